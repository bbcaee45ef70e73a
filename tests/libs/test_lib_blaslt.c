/* cuBLASLt through acx (runtime/libs/lib_blaslt.c, lib_blaslt_exec.c).
 * Default (label gpu): matmuls in f32, f16, bf16 with every epilogue combination (none, relu,
 * gelu, bias, relu+bias, gelu+bias, gelu+aux, gelu+aux+bias), transposes, C separate and in
 * place, and fp8 (e4m3 x e4m3, e4m3 x e5m2) with per-tensor scales, against double-precision
 * references; outputs poisoned first and their padding checked untouched; a repeated shape (cached
 * algorithm) gives the same bits; a restarted executor builds its state again.
 * --unit (label unit): validation on a host-kind device. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acx/blaslt.h"
#include "acx_test.h"
#include "lib_test_util.h"

static acx_device_t *dev;
static acx_blaslt_t *lt;
static int unit_mode;

static acx_buffer_t *alloc(size_t elems, acx_dtype_t dt) {
  acx_buffer_t *b = NULL;
  ACX_ASSERT_STATUS(acx_buffer_alloc(dev, elems * acx_dtype_size(dt), dt, ACX_MEM_DEVICE, LT_TIMEOUT, &b), ACX_OK);
  return b;
}

/* ------------------------------------------------------------------------------------------ */
/* validation (host kind)                                                                      */

static void t_create(void) {
  acx_blaslt_t *l = NULL;
  ACX_ASSERT_STATUS(acx_blaslt_create(NULL, NULL, &l), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_blaslt_create(dev, NULL, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_blaslt_destroy(NULL), ACX_OK);
}

static void t_validation(void) {
  const int64_t m = 32, n = 16, k = 48;
  acx_buffer_t *a = alloc(m * k, ACX_DTYPE_BF16), *b = alloc(k * n, ACX_DTYPE_BF16), *d = alloc(m * n, ACX_DTYPE_BF16);
  acx_buffer_t *c = alloc(m * n, ACX_DTYPE_BF16), *bias = alloc(m, ACX_DTYPE_BF16), *aux = alloc(m * n, ACX_DTYPE_BF16);
  acx_buffer_t *d32 = alloc(m * n, ACX_DTYPE_F32), *b16 = alloc(k * n, ACX_DTYPE_F16), *bias32 = alloc(m, ACX_DTYPE_F32);
  acx_buffer_t *a8 = alloc(m * k, ACX_DTYPE_F8E4M3), *b8 = alloc(k * n, ACX_DTYPE_F8E4M3);
  acx_buffer_t *a85 = alloc(m * k, ACX_DTYPE_F8E5M2), *b85 = alloc(k * n, ACX_DTYPE_F8E5M2);
  acx_buffer_t *sc = alloc(2, ACX_DTYPE_F32), *sc16 = alloc(2, ACX_DTYPE_F16);
  acx_blaslt_matmul_desc_t g = ACX_BLASLT_MATMUL_DESC_INIT;
  g.m = m, g.n = n, g.k = k;
  g.a = a, g.lda = m, g.b = b, g.ldb = k, g.d = d, g.ldd = m;
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &g, NULL), ACX_ERR_NOT_SUPPORTED); /* valid */
  acx_blaslt_matmul_desc_t e = g;
  ACX_ASSERT_STATUS(acx_blaslt_matmul(NULL, &g, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, NULL, NULL), ACX_ERR_NULL_ARG);
  e.size = 4;
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_INVALID_ARG);
  e = g, e.k = 0;
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_INVALID_ARG);
  e = g, e.lda = m - 1;
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_INVALID_ARG);
  e = g, e.transb = ACX_BLAS_T, e.ldb = n; /* B read as n x k: 16 x 48 in 48 x 16 elements: fits */
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_NOT_SUPPORTED);
  e = g, e.k = k + 1;
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_OUT_OF_RANGE);
  e = g, e.b = b16;
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_BAD_DTYPE);
  e = g, e.d = d32;
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_BAD_DTYPE);
  e = g, e.compute = ACX_BLAS_COMPUTE_F32_FAST_TF32; /* bf16 operands */
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_BAD_DTYPE);
  e = g, e.beta = 1.0; /* beta without C */
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_NULL_ARG);
  e.c = c, e.ldc = m;
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_NOT_SUPPORTED);
  e.c = d; /* in place */
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_NOT_SUPPORTED);
  e.c_offset = 2; /* C and D overlap without being the same range */
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_OUT_OF_RANGE);
  e = g, e.d = a, e.ldd = m; /* D overlaps A */
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_INVALID_ARG);
  /* epilogues */
  e = g, e.epilogue = ACX_BLASLT_EPILOGUE_RELU | ACX_BLASLT_EPILOGUE_GELU;
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_INVALID_ARG);
  e = g, e.epilogue = 64;
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_INVALID_ARG);
  e = g, e.epilogue = ACX_BLASLT_EPILOGUE_BIAS; /* bias missing */
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_NULL_ARG);
  e.bias = bias;
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_NOT_SUPPORTED);
  e.bias = bias32;
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_BAD_DTYPE);
  e.bias = bias, e.bias_offset = 2; /* one element short */
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_OUT_OF_RANGE);
  e = g, e.bias = bias; /* bias without the flag */
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_INVALID_ARG);
  e = g, e.epilogue = ACX_BLASLT_EPILOGUE_RELU | ACX_BLASLT_EPILOGUE_AUX; /* aux goes with GELU */
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_INVALID_ARG);
  e = g, e.epilogue = ACX_BLASLT_EPILOGUE_GELU | ACX_BLASLT_EPILOGUE_AUX | ACX_BLASLT_EPILOGUE_BIAS;
  e.bias = bias, e.aux = aux, e.aux_ld = m;
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_NOT_SUPPORTED);
  e.aux_ld = m - 8;
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_INVALID_ARG);
  e.aux_ld = m + 4; /* not a multiple of 8 */
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_INVALID_ARG);
  e.aux_ld = m, e.aux = d; /* aux over D */
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_INVALID_ARG);
  e.aux = NULL;
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_NULL_ARG);
  e = g, e.aux = aux, e.aux_ld = m; /* aux without the flag */
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_INVALID_ARG);
  /* fp8: TN, lda/ldb multiples of 16, scales f32, no e5m2 x e5m2, outputs not fp8 */
  acx_blaslt_matmul_desc_t f = ACX_BLASLT_MATMUL_DESC_INIT;
  f.transa = ACX_BLAS_T, f.m = m, f.n = n, f.k = k;
  f.a = a8, f.lda = k, f.b = b8, f.ldb = k, f.d = d, f.ldd = m, f.scale_a = sc, f.scale_b = sc, f.scale_b_offset = 4;
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &f, NULL), ACX_ERR_NOT_SUPPORTED);
  e = f, e.d = d32, e.epilogue = ACX_BLASLT_EPILOGUE_BIAS, e.bias = bias; /* f32 out: bf16 bias */
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_NOT_SUPPORTED);
  e.bias = bias32;
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_BAD_DTYPE);
  e = f, e.b = b85;
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_NOT_SUPPORTED);
  e = f, e.a = a85, e.b = b85;
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_BAD_DTYPE);
  e = f, e.transa = ACX_BLAS_N, e.lda = m;
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_INVALID_ARG);
  e = f, e.k = 40, e.lda = 40, e.ldb = 40; /* not multiples of 16 */
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_INVALID_ARG);
  e = f, e.b = b;
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_BAD_DTYPE);
  e = f, e.d = b8, e.ldd = m;
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_BAD_DTYPE);
  e = f, e.scale_a = sc16;
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_BAD_DTYPE);
  e = f, e.scale_b_offset = 8;
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_OUT_OF_RANGE);
  e = g, e.scale_a = sc; /* scales are for fp8 */
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &e, NULL), ACX_ERR_INVALID_ARG);
  acx_buffer_t *all[] = {a, b, d, c, bias, aux, d32, b16, bias32, a8, b8, a85, b85, sc, sc16};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) acx_buffer_release(all[i]);
}

static void wait_generation(uint64_t old) {
  uint64_t g = old;
  for (int i = 0; i < 20000 && g == old; i++) {
    usleep(1000);
    acx_device_generation(dev, &g);
  }
  CU_ASSERT(g > old);
  for (int i = 0; i < 20000 && acx_device_ping(dev, LT_TIMEOUT) != ACX_OK; i++) usleep(1000);
}

static void t_stale(void) {
  acx_buffer_t *a = alloc(64, ACX_DTYPE_F32), *b = alloc(64, ACX_DTYPE_F32), *d = alloc(64, ACX_DTYPE_F32);
  uint64_t g0;
  ACX_ASSERT_STATUS(acx_device_generation(dev, &g0), ACX_OK);
  ACX_ASSERT_STATUS(acx_device_inject_fault(dev, 0, LT_TIMEOUT), ACX_ERR_DEVICE_LOST);
  wait_generation(g0);
  acx_blaslt_matmul_desc_t g = ACX_BLASLT_MATMUL_DESC_INIT;
  g.m = g.n = g.k = 8, g.a = a, g.lda = 8, g.b = b, g.ldb = 8, g.d = d, g.ldd = 8;
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &g, NULL), ACX_ERR_STALE_BUFFER);
  acx_buffer_release(a);
  acx_buffer_release(b);
  acx_buffer_release(d);
}

/* ------------------------------------------------------------------------------------------ */
/* GPU                                                                                        */

static double gelu(double x) { return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

typedef struct lcase {
  acx_dtype_t ta, tb, td;
  int transa, transb;
  unsigned epi;
  int with_c, in_place;
  double scale_a, scale_b; /* 0: no scale buffer */
} lcase_t;

static double out_tol(acx_dtype_t td) {
  return td == ACX_DTYPE_F32 ? 2e-5 : td == ACX_DTYPE_F16 ? 5e-3 : 2e-2;
}

/* fp8 inputs: Hopper's fp8 tensor cores accumulate with fewer mantissa bits than an f32 FMA
 * chain (measured on the H200: relative error 2.1e-5 to 2.3e-5 at k = 64 against a double
 * reference of the same fp8 values), so an f32 output gets 1e-4 there. */
static double case_tol(const lcase_t *L) {
  int fp8 = L->ta == ACX_DTYPE_F8E4M3 || L->ta == ACX_DTYPE_F8E5M2;
  return fp8 && L->td == ACX_DTYPE_F32 ? 1e-4 : out_tol(L->td);
}

/* Runs one case; returns D's raw bytes (malloc) for repeat comparisons. */
static uint8_t *lt_case(const lcase_t *L, uint64_t seed) {
  const int64_t m = 96, n = 80, k = 64;
  const int64_t ra = L->transa ? k : m, ca = L->transa ? m : k, rb = L->transb ? n : k, cb = L->transb ? k : n;
  const int64_t lda = ra + 16, ldb = rb + 16, ldd = m + 8, ldc = m + 16, aux_ld = m + 8;
  int fp8 = L->ta == ACX_DTYPE_F8E4M3 || L->ta == ACX_DTYPE_F8E5M2;
  acx_dtype_t tbias = fp8 && L->td == ACX_DTYPE_F32 ? ACX_DTYPE_BF16 : L->td;
  size_t na = (size_t)(lda * ca), nb = (size_t)(ldb * cb), nd = (size_t)(ldd * n), nc = (size_t)(ldc * n);
  double *A = malloc(na * 8), *B = malloc(nb * 8), *C = malloc(nc * 8), *bias = malloc((size_t)m * 8);
  double *ref = malloc((size_t)(m * n) * 8), *pre = malloc((size_t)(m * n) * 8), *got = malloc(nd * 8);
  lt_random(A, na, seed);
  lt_random(B, nb, seed + 1);
  lt_random(C, nc, seed + 2);
  lt_random(bias, (size_t)m, seed + 3);
  lt_round(A, na, L->ta);
  lt_round(B, nb, L->tb);
  lt_round(C, nc, L->td);
  lt_round(bias, (size_t)m, tbias);
  acx_buffer_t *a = lt_poisoned(dev, na, L->ta), *b = lt_poisoned(dev, nb, L->tb), *d = lt_poisoned(dev, nd, L->td);
  lt_write(a, 0, A, na);
  lt_write(b, 0, B, nb);
  acx_buffer_t *c = NULL, *bb = NULL, *aux = NULL, *sa = NULL, *sb = NULL;
  double beta = L->with_c ? -0.5 : 0.0, alpha = 1.25;
  acx_blaslt_matmul_desc_t g = ACX_BLASLT_MATMUL_DESC_INIT;
  g.transa = L->transa ? ACX_BLAS_T : ACX_BLAS_N, g.transb = L->transb ? ACX_BLAS_T : ACX_BLAS_N;
  g.m = m, g.n = n, g.k = k, g.alpha = alpha, g.beta = beta;
  g.a = a, g.lda = lda, g.b = b, g.ldb = ldb, g.d = d, g.ldd = ldd, g.epilogue = L->epi;
  if (L->with_c) {
    if (L->in_place) {
      for (int64_t j = 0; j < n; j++) lt_write(d, (size_t)(j * ldd), C + j * ldc, (size_t)m);
      g.c = d, g.ldc = ldd;
    } else {
      c = lt_poisoned(dev, nc, L->td);
      for (int64_t j = 0; j < n; j++) lt_write(c, (size_t)(j * ldc), C + j * ldc, (size_t)m);
      g.c = c, g.ldc = ldc;
    }
  }
  if (L->epi & ACX_BLASLT_EPILOGUE_BIAS) {
    bb = lt_poisoned(dev, (size_t)m, tbias);
    lt_write(bb, 0, bias, (size_t)m);
    g.bias = bb;
  }
  if (L->epi & ACX_BLASLT_EPILOGUE_AUX) {
    aux = lt_poisoned(dev, (size_t)(aux_ld * n), L->td);
    g.aux = aux, g.aux_ld = aux_ld;
  }
  double s = 1.0;
  if (L->scale_a != 0) {
    sa = lt_poisoned(dev, 1, ACX_DTYPE_F32);
    lt_write(sa, 0, &L->scale_a, 1);
    g.scale_a = sa;
    s *= L->scale_a;
  }
  if (L->scale_b != 0) {
    sb = lt_poisoned(dev, 1, ACX_DTYPE_F32);
    lt_write(sb, 0, &L->scale_b, 1);
    g.scale_b = sb;
    s *= L->scale_b;
  }
  ACX_ASSERT_STATUS(acx_blaslt_matmul(lt, &g, NULL), ACX_OK);
  for (int64_t j = 0; j < n; j++)
    for (int64_t i = 0; i < m; i++) {
      double acc = 0;
      for (int64_t l = 0; l < k; l++)
        acc += (L->transa ? A[l + i * lda] : A[i + l * lda]) * (L->transb ? B[j + l * ldb] : B[l + j * ldb]);
      double v = alpha * s * acc + beta * (L->with_c ? C[i + j * ldc] : 0.0);
      if (L->epi & ACX_BLASLT_EPILOGUE_BIAS) v += bias[i];
      pre[i + j * m] = v;
      if (L->epi & ACX_BLASLT_EPILOGUE_RELU) v = v > 0 ? v : 0;
      if (L->epi & ACX_BLASLT_EPILOGUE_GELU) v = gelu(v);
      ref[i + j * m] = v;
    }
  lt_read(d, 0, got, nd);
  double *out = malloc((size_t)(m * n) * 8);
  int pad_ok = 1;
  for (int64_t j = 0; j < n; j++)
    for (int64_t i = 0; i < ldd; i++) {
      if (i < m) out[i + j * m] = got[i + j * ldd];
      else pad_ok &= isnan(got[i + j * ldd]);
    }
  char what[160];
  snprintf(what, sizeof what, "matmul %s x %s -> %s %c%c epilogue %#x%s%s", acx_dtype_name(L->ta),
           acx_dtype_name(L->tb), acx_dtype_name(L->td), L->transa ? 'T' : 'N', L->transb ? 'T' : 'N', L->epi,
           L->with_c ? (L->in_place ? " C in place" : " C") : "", sa ? " scaled" : "");
  LT_CHECK_ERR(what, lt_rel_err(out, ref, (size_t)(m * n)), case_tol(L));
  if (!pad_ok) printf("\n  %s: D's padding was written\n", what);
  CU_ASSERT(pad_ok);
  if (aux) {
    double *ga = malloc((size_t)(aux_ld * n) * 8);
    lt_read(aux, 0, ga, (size_t)(aux_ld * n));
    for (int64_t j = 0; j < n; j++)
      for (int64_t i = 0; i < m; i++) out[i + j * m] = ga[i + j * aux_ld];
    LT_CHECK_ERR("aux (GELU input)", lt_rel_err(out, pre, (size_t)(m * n)), out_tol(L->td));
    free(ga);
  }
  uint8_t *raw = malloc(nd * acx_dtype_size(L->td));
  lt_read_raw(d, 0, raw, nd);
  free(out), free(A), free(B), free(C), free(bias), free(ref), free(pre), free(got);
  acx_buffer_t *bufs[] = {a, b, d, c, bb, aux, sa, sb};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    if (bufs[i]) acx_buffer_release(bufs[i]);
  return raw;
}

static const unsigned epilogues[] = {
    ACX_BLASLT_EPILOGUE_NONE,
    ACX_BLASLT_EPILOGUE_RELU,
    ACX_BLASLT_EPILOGUE_GELU,
    ACX_BLASLT_EPILOGUE_BIAS,
    ACX_BLASLT_EPILOGUE_RELU | ACX_BLASLT_EPILOGUE_BIAS,
    ACX_BLASLT_EPILOGUE_GELU | ACX_BLASLT_EPILOGUE_BIAS,
    ACX_BLASLT_EPILOGUE_GELU | ACX_BLASLT_EPILOGUE_AUX,
    ACX_BLASLT_EPILOGUE_GELU | ACX_BLASLT_EPILOGUE_AUX | ACX_BLASLT_EPILOGUE_BIAS,
};
#define NEPI (sizeof epilogues / sizeof epilogues[0])

static void t_epilogues(void) {
  const acx_dtype_t dts[] = {ACX_DTYPE_F32, ACX_DTYPE_F16, ACX_DTYPE_BF16};
  uint64_t seed = 1000;
  for (int t = 0; t < 3; t++)
    for (size_t e = 0; e < NEPI; e++) {
      lcase_t L = {.ta = dts[t], .tb = dts[t], .td = dts[t], .epi = epilogues[e]};
      free(lt_case(&L, seed += 10));
    }
}

static void t_layouts_and_c(void) {
  const acx_dtype_t dts[] = {ACX_DTYPE_F32, ACX_DTYPE_F16, ACX_DTYPE_BF16};
  uint64_t seed = 2000;
  for (int t = 0; t < 3; t++)
    for (int tr = 1; tr < 4; tr++) {
      lcase_t L = {.ta = dts[t], .tb = dts[t], .td = dts[t], .transa = tr & 1, .transb = tr >> 1,
                   .epi = ACX_BLASLT_EPILOGUE_GELU | ACX_BLASLT_EPILOGUE_BIAS, .with_c = 1, .in_place = tr == 3};
      free(lt_case(&L, seed += 10));
    }
}

static void t_fp8(void) {
  const struct {
    acx_dtype_t ta, tb, td;
  } combos[] = {{ACX_DTYPE_F8E4M3, ACX_DTYPE_F8E4M3, ACX_DTYPE_BF16},
                {ACX_DTYPE_F8E4M3, ACX_DTYPE_F8E4M3, ACX_DTYPE_F32},
                {ACX_DTYPE_F8E4M3, ACX_DTYPE_F8E5M2, ACX_DTYPE_F16},
                {ACX_DTYPE_F8E5M2, ACX_DTYPE_F8E4M3, ACX_DTYPE_BF16}};
  uint64_t seed = 3000;
  for (size_t i = 0; i < sizeof combos / sizeof combos[0]; i++) {
    lcase_t L = {.ta = combos[i].ta, .tb = combos[i].tb, .td = combos[i].td, .transa = 1, .scale_a = 0.5,
                 .scale_b = 4.0};
    free(lt_case(&L, seed += 10));
    L.epi = ACX_BLASLT_EPILOGUE_BIAS, L.scale_b = 0; /* one scale only, with bias */
    free(lt_case(&L, seed += 10));
  }
  /* A lone scale equal to 1 must not be what makes the case pass: unscaled differs by 2x. */
  lcase_t L = {.ta = ACX_DTYPE_F8E4M3, .tb = ACX_DTYPE_F8E4M3, .td = ACX_DTYPE_F32, .transa = 1, .scale_a = 2.0};
  free(lt_case(&L, seed + 10));
}

/* The second call of a shape takes the cached algorithm: same inputs, same bits. */
static void t_cache_repeat(void) {
  lcase_t L = {.ta = ACX_DTYPE_BF16, .tb = ACX_DTYPE_BF16, .td = ACX_DTYPE_BF16,
               .epi = ACX_BLASLT_EPILOGUE_GELU | ACX_BLASLT_EPILOGUE_BIAS};
  uint8_t *r1 = lt_case(&L, 4000), *r2 = lt_case(&L, 4000);
  CU_ASSERT(memcmp(r1, r2, (size_t)(104 * 80 * 2)) == 0);
  free(r1);
  free(r2);
}

static void t_restart(void) {
  uint64_t g0;
  ACX_ASSERT_STATUS(acx_device_generation(dev, &g0), ACX_OK);
  ACX_ASSERT_STATUS(acx_device_inject_fault(dev, 0, LT_TIMEOUT), ACX_ERR_DEVICE_LOST);
  wait_generation(g0);
  lcase_t L = {.ta = ACX_DTYPE_F16, .tb = ACX_DTYPE_F16, .td = ACX_DTYPE_F16,
               .epi = ACX_BLASLT_EPILOGUE_RELU | ACX_BLASLT_EPILOGUE_BIAS, .with_c = 1};
  free(lt_case(&L, 5000));
}

static int setup(void) {
  if (acx_system_create(NULL, &lt_sys) != ACX_OK) return 1;
  dev = unit_mode ? lt_open_host(2) : lt_open_cuda(2);
  return acx_blaslt_create(dev, NULL, &lt) != ACX_OK;
}

static int teardown(void) {
  int bad = acx_blaslt_destroy(lt) != ACX_OK;
  bad |= acx_device_close(dev, LT_TIMEOUT) != ACX_OK;
  bad |= acx_system_destroy(lt_sys, LT_TIMEOUT) != ACX_OK;
  return bad;
}

int main(int argc, char **argv) {
  unit_mode = argc > 1 && !strcmp(argv[1], "--unit");
  if (argc > 1 && !unit_mode) {
    fprintf(stderr, "usage: %s [--unit]\n", argv[0]);
    return 2;
  }
  static const acx_test_case_t unit_cases[] = {ACX_TEST(t_create), ACX_TEST(t_validation), ACX_TEST(t_stale),
                                               ACX_TEST_END};
  static const acx_test_case_t gpu_cases[] = {ACX_TEST(t_epilogues), ACX_TEST(t_layouts_and_c), ACX_TEST(t_fp8),
                                              ACX_TEST(t_cache_repeat), ACX_TEST(t_restart), ACX_TEST_END};
  if (!unit_mode && access("/dev/nvidiactl", F_OK) != 0) acx_test_skip("no GPU on this machine");
  return acx_test_run(unit_mode ? "lib_blaslt_unit" : "lib_blaslt", unit_mode ? unit_cases : gpu_cases, setup,
                      teardown);
}
