/* cuBLAS through acx (runtime/libs/lib_blas.c, lib_blas_exec.c, lib_common.c, lib_exec.c).
 * Default (label gpu): every operation against a double-precision CPU reference on fresh random
 * inputs, outputs poisoned first; queued pipelines; handles recreated after an executor restart.
 * --unit (label unit): validation on a host-kind device, where valid requests are refused with
 * ACX_ERR_NOT_SUPPORTED and bad ones get their validation status first. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acx/blas.h"
#include "acx_test.h"
#include "lib_test_util.h"
#include "runtime/base/clock.h"
#include "runtime/device/device_internal.h"

static acx_device_t *dev;
static acx_blas_t *blas;
static int unit_mode;

/* ------------------------------------------------------------------------------------------ */
/* validation (host kind)                                                                      */

static acx_buffer_t *alloc(size_t elems, acx_dtype_t dt) {
  acx_buffer_t *b = NULL;
  ACX_ASSERT_STATUS(acx_buffer_alloc(dev, elems * acx_dtype_size(dt), dt, ACX_MEM_DEVICE, LT_TIMEOUT, &b), ACX_OK);
  return b;
}

static void t_create(void) {
  acx_blas_t *b = NULL;
  ACX_ASSERT_STATUS(acx_blas_create(NULL, NULL, &b), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_blas_create(dev, NULL, NULL), ACX_ERR_NULL_ARG);
  acx_lib_config_t cfg = ACX_LIB_CONFIG_INIT;
  cfg.stream = 99;
  ACX_ASSERT_STATUS(acx_blas_create(dev, &cfg, &b), ACX_ERR_INVALID_ARG);
  CU_ASSERT_PTR_NULL(b);
  cfg.stream = 1;
  cfg.name = "blas-on-stream-1";
  ACX_ASSERT_STATUS(acx_blas_create(dev, &cfg, &b), ACX_OK);
  acx_blas_t *dup = NULL;
  ACX_ASSERT_STATUS(acx_blas_create(dev, &cfg, &dup), ACX_ERR_NAME_TAKEN); /* one actor per name */
  ACX_ASSERT_STATUS(acx_blas_destroy(b), ACX_OK);
  ACX_ASSERT_STATUS(acx_blas_destroy(NULL), ACX_OK);
}

static acx_blas_gemm_desc_t gemm_desc(acx_buffer_t *a, acx_buffer_t *b, acx_buffer_t *c, int64_t m, int64_t n,
                                      int64_t k) {
  acx_blas_gemm_desc_t d = ACX_BLAS_GEMM_DESC_INIT;
  d.m = m, d.n = n, d.k = k;
  d.a = a, d.lda = m;
  d.b = b, d.ldb = k;
  d.c = c, d.ldc = m;
  return d;
}

static void t_gemm_validation(void) {
  const int64_t m = 8, n = 6, k = 4;
  acx_buffer_t *a = alloc(m * k, ACX_DTYPE_F32), *b = alloc(k * n, ACX_DTYPE_F32), *c = alloc(m * n, ACX_DTYPE_F32);
  acx_buffer_t *c64 = alloc(m * n, ACX_DTYPE_F64), *ci = alloc(m * n, ACX_DTYPE_I32);
  acx_blas_gemm_desc_t d = gemm_desc(a, b, c, m, n, k);
  ACX_ASSERT_STATUS(acx_blas_gemm(blas, &d, NULL), ACX_ERR_NOT_SUPPORTED); /* valid, host kind */
  acx_future_t *f = (acx_future_t *)&d;
  ACX_ASSERT_STATUS(acx_blas_gemm(blas, &d, &f), ACX_ERR_NOT_SUPPORTED);
  CU_ASSERT_PTR_NULL(f);

  ACX_ASSERT_STATUS(acx_blas_gemm(NULL, &d, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_blas_gemm(blas, NULL, NULL), ACX_ERR_NULL_ARG);
  acx_blas_gemm_desc_t e = d;
  e.size = 8;
  ACX_ASSERT_STATUS(acx_blas_gemm(blas, &e, NULL), ACX_ERR_INVALID_ARG);
  e = d, e.a = NULL;
  ACX_ASSERT_STATUS(acx_blas_gemm(blas, &e, NULL), ACX_ERR_NULL_ARG);
  e = d, e.lda = m - 1; /* leading dimension below the rows */
  ACX_ASSERT_STATUS(acx_blas_gemm(blas, &e, NULL), ACX_ERR_INVALID_ARG);
  e = d, e.transa = ACX_BLAS_T, e.lda = k; /* A read as k x m: valid */
  ACX_ASSERT_STATUS(acx_blas_gemm(blas, &e, NULL), ACX_ERR_NOT_SUPPORTED);
  e = d, e.transb = ACX_BLAS_T; /* B is n x k: ldb = k < n */
  ACX_ASSERT_STATUS(acx_blas_gemm(blas, &e, NULL), ACX_ERR_INVALID_ARG);
  e = d, e.transa = (acx_blas_op_t)7;
  ACX_ASSERT_STATUS(acx_blas_gemm(blas, &e, NULL), ACX_ERR_INVALID_ARG);
  e = d, e.m = -1;
  ACX_ASSERT_STATUS(acx_blas_gemm(blas, &e, NULL), ACX_ERR_INVALID_ARG);
  e = d, e.k = k + 1; /* mismatched inner dimension: A and B too small */
  ACX_ASSERT_STATUS(acx_blas_gemm(blas, &e, NULL), ACX_ERR_OUT_OF_RANGE);
  e = d, e.ldc = m + 1; /* C too small for its leading dimension */
  ACX_ASSERT_STATUS(acx_blas_gemm(blas, &e, NULL), ACX_ERR_OUT_OF_RANGE);
  e = d, e.c_offset = 4; /* one element past: the last column no longer fits */
  ACX_ASSERT_STATUS(acx_blas_gemm(blas, &e, NULL), ACX_ERR_OUT_OF_RANGE);
  e = d, e.a_offset = 2; /* not a multiple of the f32 size */
  ACX_ASSERT_STATUS(acx_blas_gemm(blas, &e, NULL), ACX_ERR_INVALID_ARG);
  e = d, e.c = c64;
  ACX_ASSERT_STATUS(acx_blas_gemm(blas, &e, NULL), ACX_ERR_BAD_DTYPE);
  e = d, e.c = ci;
  ACX_ASSERT_STATUS(acx_blas_gemm(blas, &e, NULL), ACX_ERR_BAD_DTYPE);
  e = d, e.batch = 0;
  ACX_ASSERT_STATUS(acx_blas_gemm(blas, &e, NULL), ACX_ERR_INVALID_ARG);
  e = d, e.batch = 2, e.stride_a = 0, e.stride_b = 0, e.stride_c = 0; /* outputs overlap */
  ACX_ASSERT_STATUS(acx_blas_gemm(blas, &e, NULL), ACX_ERR_INVALID_ARG);
  e = d, e.batch = 2, e.stride_a = 0, e.stride_b = 0, e.stride_c = m * n; /* C holds one matrix */
  ACX_ASSERT_STATUS(acx_blas_gemm(blas, &e, NULL), ACX_ERR_OUT_OF_RANGE);
  e = d, e.m = INT64_MAX / 2, e.lda = INT64_MAX / 2, e.ldc = INT64_MAX / 2;
  ACX_ASSERT_STATUS(acx_blas_gemm(blas, &e, NULL), ACX_ERR_OVERFLOW);
  e = d, e.compute = (acx_blas_compute_t)9;
  ACX_ASSERT_STATUS(acx_blas_gemm(blas, &e, NULL), ACX_ERR_INVALID_ARG);
  e = d, e.compute = ACX_BLAS_COMPUTE_F32_FAST_TF32;
  ACX_ASSERT_STATUS(acx_blas_gemm(blas, &e, NULL), ACX_ERR_NOT_SUPPORTED); /* valid for f32 */
  e = gemm_desc(alloc(m * k, ACX_DTYPE_F64), alloc(k * n, ACX_DTYPE_F64), c64, m, n, k);
  e.compute = ACX_BLAS_COMPUTE_F32_FAST_TF32;
  ACX_ASSERT_STATUS(acx_blas_gemm(blas, &e, NULL), ACX_ERR_BAD_DTYPE);
  acx_buffer_release(e.a);
  acx_buffer_release(e.b);
  e = d, e.m = 0, e.n = 0, e.k = 0; /* empty is valid */
  ACX_ASSERT_STATUS(acx_blas_gemm(blas, &e, NULL), ACX_ERR_NOT_SUPPORTED);

  /* Freed operand. */
  acx_buffer_t *tmp = alloc(m * n, ACX_DTYPE_F32);
  ACX_ASSERT_STATUS(acx_buffer_free(tmp, LT_TIMEOUT), ACX_OK);
  e = d, e.c = tmp;
  ACX_ASSERT_STATUS(acx_blas_gemm(blas, &e, NULL), ACX_ERR_INVALID_STATE);
  acx_buffer_release(tmp);
  acx_buffer_release(a);
  acx_buffer_release(b);
  acx_buffer_release(c);
  acx_buffer_release(c64);
  acx_buffer_release(ci);
}

static void t_level12_validation(void) {
  const int64_t n = 16;
  acx_buffer_t *x = alloc(n, ACX_DTYPE_F32), *y = alloc(n, ACX_DTYPE_F32), *r = alloc(1, ACX_DTYPE_F32);
  acx_buffer_t *x64 = alloc(n, ACX_DTYPE_F64), *a = alloc(n * n, ACX_DTYPE_F32), *h = alloc(n, ACX_DTYPE_F16);
  double v;
  acx_future_t *f;
  ACX_ASSERT_STATUS(acx_blas_axpy(blas, n, 2.0, x, 0, 1, y, 0, 1, NULL), ACX_ERR_NOT_SUPPORTED);
  ACX_ASSERT_STATUS(acx_blas_axpy(blas, n, 2.0, x, 0, 0, y, 0, 1, NULL), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_blas_axpy(blas, n, 2.0, x, 0, 1, y, 0, -1, NULL), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_blas_axpy(blas, n, 2.0, x, 0, 2, y, 0, 1, NULL), ACX_ERR_OUT_OF_RANGE);
  ACX_ASSERT_STATUS(acx_blas_axpy(blas, n + 1, 2.0, x, 0, 1, y, 0, 1, NULL), ACX_ERR_OUT_OF_RANGE);
  ACX_ASSERT_STATUS(acx_blas_axpy(blas, -1, 2.0, x, 0, 1, y, 0, 1, NULL), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_blas_axpy(blas, n, 2.0, x, 0, 1, x64, 0, 1, NULL), ACX_ERR_BAD_DTYPE);
  ACX_ASSERT_STATUS(acx_blas_axpy(blas, n, 2.0, NULL, 0, 1, y, 0, 1, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_blas_axpy(blas, n, 2.0, h, 0, 1, h, 0, 1, NULL), ACX_ERR_NOT_SUPPORTED); /* f16 is fine */
  ACX_ASSERT_STATUS(acx_blas_scal(blas, n, 2.0, x, 4, 1, NULL), ACX_ERR_OUT_OF_RANGE);
  ACX_ASSERT_STATUS(acx_blas_scal(blas, n, 2.0, x, 0, 1, NULL), ACX_ERR_NOT_SUPPORTED);
  ACX_ASSERT_STATUS(acx_blas_dot(blas, n, x, 0, 1, y, 0, 1, NULL, 0, &v, NULL), ACX_ERR_NOT_SUPPORTED);
  ACX_ASSERT_STATUS(acx_blas_dot(blas, n, x, 0, 1, y, 0, 1, r, 0, NULL, NULL), ACX_ERR_NOT_SUPPORTED);
  ACX_ASSERT_STATUS(acx_blas_dot(blas, n, x, 0, 1, y, 0, 1, r, 0, &v, NULL), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_blas_dot(blas, n, x, 0, 1, y, 0, 1, NULL, 0, NULL, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_blas_dot(blas, n, x, 0, 1, y, 0, 1, r, 4, NULL, &f), ACX_ERR_OUT_OF_RANGE);
  ACX_ASSERT_STATUS(acx_blas_dot(blas, n, x, 0, 1, x64, 0, 1, NULL, 0, &v, NULL), ACX_ERR_BAD_DTYPE);
  ACX_ASSERT_STATUS(acx_blas_dot(blas, n, x, 0, 1, y, 0, 1, x64, 0, NULL, NULL), ACX_ERR_BAD_DTYPE);
  ACX_ASSERT_STATUS(acx_blas_nrm2(blas, n, x, 0, 1, NULL, 0, &v, NULL), ACX_ERR_NOT_SUPPORTED);
  ACX_ASSERT_STATUS(acx_blas_nrm2(blas, n, x, 0, 0, NULL, 0, &v, NULL), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_blas_gemv(blas, ACX_BLAS_N, n, n, 1.0, a, 0, n, x, 0, 1, 0.0, y, 0, 1, NULL),
                    ACX_ERR_NOT_SUPPORTED);
  ACX_ASSERT_STATUS(acx_blas_gemv(blas, ACX_BLAS_N, n, n, 1.0, a, 0, n - 1, x, 0, 1, 0.0, y, 0, 1, NULL),
                    ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_blas_gemv(blas, ACX_BLAS_N, n + 1, n, 1.0, a, 0, n + 1, x, 0, 1, 0.0, y, 0, 1, NULL),
                    ACX_ERR_OUT_OF_RANGE);
  ACX_ASSERT_STATUS(acx_blas_gemv(blas, ACX_BLAS_T, n, n / 2, 1.0, a, 0, n, x, 0, 1, 0.0, y, 0, 1, NULL),
                    ACX_ERR_NOT_SUPPORTED); /* x has m, y n/2 elements: both fit */
  ACX_ASSERT_STATUS(acx_blas_gemv(blas, ACX_BLAS_N, n, n, 1.0, h, 0, n, h, 0, 1, 0.0, h, 0, 1, NULL),
                    ACX_ERR_BAD_DTYPE); /* gemv: f32/f64 only */
  acx_buffer_release(x);
  acx_buffer_release(y);
  acx_buffer_release(r);
  acx_buffer_release(x64);
  acx_buffer_release(a);
  acx_buffer_release(h);
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

/* A buffer of an earlier executor generation is refused before anything is sent. */
static void t_stale(void) {
  const int64_t m = 4;
  acx_buffer_t *a = alloc(m * m, ACX_DTYPE_F32), *b = alloc(m * m, ACX_DTYPE_F32), *c = alloc(m * m, ACX_DTYPE_F32);
  uint64_t g0;
  ACX_ASSERT_STATUS(acx_device_generation(dev, &g0), ACX_OK);
  ACX_ASSERT_STATUS(acx_device_inject_fault(dev, 0, LT_TIMEOUT), ACX_ERR_DEVICE_LOST);
  wait_generation(g0);
  acx_blas_gemm_desc_t d = gemm_desc(a, b, c, m, m, m);
  ACX_ASSERT_STATUS(acx_blas_gemm(blas, &d, NULL), ACX_ERR_STALE_BUFFER);
  double v;
  ACX_ASSERT_STATUS(acx_blas_nrm2(blas, m, a, 0, 1, NULL, 0, &v, NULL), ACX_ERR_STALE_BUFFER);
  acx_buffer_release(a);
  acx_buffer_release(b);
  acx_buffer_release(c);
}

/* ------------------------------------------------------------------------------------------ */
/* GPU: against double-precision references                                                   */

static const acx_dtype_t gemm_dtypes[] = {ACX_DTYPE_F64, ACX_DTYPE_F32, ACX_DTYPE_F16, ACX_DTYPE_BF16};

static void ref_gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha, const double *A, int64_t lda,
                     const double *B, int64_t ldb, double beta, double *C, int64_t ldc) {
  for (int64_t j = 0; j < n; j++)
    for (int64_t i = 0; i < m; i++) {
      double s = 0;
      for (int64_t l = 0; l < k; l++) {
        double av = ta ? A[l + i * lda] : A[i + l * lda];
        double bv = tb ? B[j + l * ldb] : B[l + j * ldb];
        s += av * bv;
      }
      C[i + j * ldc] = alpha * s + beta * C[i + j * ldc];
    }
}

/* One GEMM case: padded leading dimensions, `batch` matrices, C poisoned (beta = 0: NaN must be
 * overwritten, never read) and its padding checked untouched. */
static void gemm_case(acx_dtype_t dt, int ta, int tb, double beta, int64_t batch, uint64_t seed) {
  const int64_t m = 67, n = 45, k = 33;
  const int64_t ra = ta ? k : m, ca = ta ? m : k, rb = tb ? n : k, cb = tb ? k : n;
  const int64_t lda = ra + 3, ldb = rb + 1, ldc = m + 5;
  const int64_t sa = lda * ca + 7, sb = ldb * cb, sc = ldc * n + 2;
  size_t na = (size_t)(sa * batch), nb = (size_t)(sb * batch), nc = (size_t)(sc * batch);
  double *A = malloc(na * 8), *B = malloc(nb * 8), *C = malloc(nc * 8), *got = malloc(nc * 8);
  lt_random(A, na, seed);
  lt_random(B, nb, seed + 1);
  lt_random(C, nc, seed + 2);
  lt_round(A, na, dt);
  lt_round(B, nb, dt);
  lt_round(C, nc, dt);
  acx_buffer_t *a = lt_poisoned(dev, na, dt), *b = lt_poisoned(dev, nb, dt), *c = lt_poisoned(dev, nc, dt);
  lt_write(a, 0, A, na);
  lt_write(b, 0, B, nb);
  /* Only the matrices' own elements of C get values; the padding keeps its poison. */
  if (beta != 0)
    for (int64_t q = 0; q < batch; q++)
      for (int64_t j = 0; j < n; j++) lt_write(c, (size_t)(q * sc + j * ldc), &C[q * sc + j * ldc], (size_t)m);
  acx_blas_gemm_desc_t d = ACX_BLAS_GEMM_DESC_INIT;
  d.transa = ta ? ACX_BLAS_T : ACX_BLAS_N;
  d.transb = tb ? ACX_BLAS_T : ACX_BLAS_N;
  d.m = m, d.n = n, d.k = k, d.alpha = 1.5, d.beta = beta;
  d.a = a, d.lda = lda, d.stride_a = sa;
  d.b = b, d.ldb = ldb, d.stride_b = sb;
  d.c = c, d.ldc = ldc, d.stride_c = sc;
  d.batch = batch;
  ACX_ASSERT_STATUS(acx_blas_gemm(blas, &d, NULL), ACX_OK);
  lt_read(c, 0, got, nc);
  uint8_t *raw = malloc(nc * acx_dtype_size(dt));
  lt_read_raw(c, 0, raw, nc);
  size_t es = acx_dtype_size(dt), untouched = 0, padding = 0;
  double *ref = malloc((size_t)(m * n) * 8), *out = malloc((size_t)(m * n) * 8);
  double worst = 0;
  for (int64_t q = 0; q < batch; q++) {
    for (int64_t j = 0; j < n; j++)
      for (int64_t i = 0; i < m; i++) ref[i + j * m] = beta != 0 ? C[q * sc + i + j * ldc] : 0;
    ref_gemm(ta, tb, m, n, k, 1.5, A + q * sa, lda, B + q * sb, ldb, beta, ref, m);
    for (int64_t j = 0; j < n; j++)
      for (int64_t i = 0; i < m; i++) out[i + j * m] = got[q * sc + i + j * ldc];
    double err = lt_rel_err(out, ref, (size_t)(m * n));
    if (err > worst) worst = err;
  }
  for (size_t i = 0; i < nc; i++) {
    int64_t q = (int64_t)i / sc, r = (int64_t)i % sc;
    int inside = q < batch && r < ldc * n && r % ldc < m;
    if (inside) continue;
    padding++;
    int poisoned = 1;
    for (size_t b2 = 0; b2 < es; b2++) poisoned &= raw[i * es + b2] == 0xff;
    untouched += poisoned;
  }
  char what[128];
  snprintf(what, sizeof what, "gemm %s %c%c beta=%g batch=%lld", acx_dtype_name(dt), ta ? 'T' : 'N', tb ? 'T' : 'N',
           beta, (long long)batch);
  LT_CHECK_ERR(what, worst, lt_tol(dt));
  CU_ASSERT_EQUAL(untouched, padding);
  free(raw);
  free(ref);
  free(out);
  free(A);
  free(B);
  free(C);
  free(got);
  acx_buffer_release(a);
  acx_buffer_release(b);
  acx_buffer_release(c);
}

static void t_gemm(void) {
  uint64_t seed = 100;
  for (size_t t = 0; t < sizeof gemm_dtypes / sizeof gemm_dtypes[0]; t++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) gemm_case(gemm_dtypes[t], ta, tb, 0.0, 1, seed++);
}

static void t_gemm_beta_batched(void) {
  uint64_t seed = 200;
  for (size_t t = 0; t < sizeof gemm_dtypes / sizeof gemm_dtypes[0]; t++) {
    gemm_case(gemm_dtypes[t], 0, 0, 0.5, 1, seed++);
    gemm_case(gemm_dtypes[t], 1, 0, 0.0, 3, seed++);
    gemm_case(gemm_dtypes[t], 0, 1, -0.75, 4, seed++);
  }
}

/* f32 GEMM with TF32 tensor cores: inputs rounded to 10 mantissa bits. */
static void t_gemm_fast_tf32(void) {
  const int64_t m = 96, n = 80, k = 64;
  double *A = malloc(m * k * 8), *B = malloc(k * n * 8), *ref = calloc((size_t)(m * n), 8), *got = malloc(m * n * 8);
  lt_random(A, m * k, 7);
  lt_random(B, k * n, 8);
  acx_buffer_t *a = lt_poisoned(dev, m * k, ACX_DTYPE_F32), *b = lt_poisoned(dev, k * n, ACX_DTYPE_F32);
  acx_buffer_t *c = lt_poisoned(dev, m * n, ACX_DTYPE_F32);
  lt_write(a, 0, A, m * k);
  lt_write(b, 0, B, k * n);
  lt_round(A, m * k, ACX_DTYPE_F32);
  lt_round(B, k * n, ACX_DTYPE_F32);
  acx_blas_gemm_desc_t d = gemm_desc(a, b, c, m, n, k);
  d.compute = ACX_BLAS_COMPUTE_F32_FAST_TF32;
  ACX_ASSERT_STATUS(acx_blas_gemm(blas, &d, NULL), ACX_OK);
  lt_read(c, 0, got, m * n);
  ref_gemm(0, 0, m, n, k, 1.0, A, m, B, k, 0.0, ref, m);
  LT_CHECK_ERR("gemm f32 fast-tf32", lt_rel_err(got, ref, m * n), 3e-3);
  free(A);
  free(B);
  free(ref);
  free(got);
  acx_buffer_release(a);
  acx_buffer_release(b);
  acx_buffer_release(c);
}

static void t_gemv(void) {
  const acx_dtype_t dts[] = {ACX_DTYPE_F64, ACX_DTYPE_F32};
  const int64_t m = 123, n = 77, lda = 130;
  for (int t = 0; t < 2; t++)
    for (int tr = 0; tr < 2; tr++) {
      acx_dtype_t dt = dts[t];
      int64_t nx = tr ? m : n, ny = tr ? n : m, incx = 2, incy = 3;
      size_t lx = (size_t)((nx - 1) * incx + 1), ly = (size_t)((ny - 1) * incy + 1);
      double *A = malloc(lda * n * 8), *X = malloc(lx * 8), *Y = malloc(ly * 8), *ref = malloc(ly * 8);
      double *got = malloc(ly * 8);
      lt_random(A, lda * n, 31 + t);
      lt_random(X, lx, 41 + t);
      lt_random(Y, ly, 51 + t);
      lt_round(A, lda * n, dt);
      lt_round(X, lx, dt);
      lt_round(Y, ly, dt);
      acx_buffer_t *a = lt_poisoned(dev, lda * n, dt), *x = lt_poisoned(dev, lx, dt), *y = lt_poisoned(dev, ly, dt);
      lt_write(a, 0, A, lda * n);
      lt_write(x, 0, X, lx);
      lt_write(y, 0, Y, ly);
      ACX_ASSERT_STATUS(acx_blas_gemv(blas, tr ? ACX_BLAS_T : ACX_BLAS_N, m, n, 0.5, a, 0, lda, x, 0, incx, -2.0, y,
                                      0, incy, NULL),
                        ACX_OK);
      lt_read(y, 0, got, ly);
      double *r = malloc(ny * 8), *g = malloc(ny * 8);
      for (int64_t i = 0; i < ny; i++) {
        double s = 0;
        for (int64_t l = 0; l < nx; l++) s += (tr ? A[l + i * lda] : A[i + l * lda]) * X[l * incx];
        r[i] = 0.5 * s - 2.0 * Y[i * incy];
        g[i] = got[i * incy];
      }
      LT_CHECK_ERR(tr ? "gemv T" : "gemv N", lt_rel_err(g, r, (size_t)ny), lt_tol(dt));
      /* Elements between the strided ones are not y's: they keep their values. */
      int kept = 1;
      for (size_t i = 0; i < ly; i++)
        if (i % (size_t)incy) kept &= got[i] == Y[i];
      CU_ASSERT(kept);
      free(r);
      free(g);
      free(A);
      free(X);
      free(Y);
      free(ref);
      free(got);
      acx_buffer_release(a);
      acx_buffer_release(x);
      acx_buffer_release(y);
    }
}

static void t_level1(void) {
  for (size_t t = 0; t < sizeof gemm_dtypes / sizeof gemm_dtypes[0]; t++) {
    acx_dtype_t dt = gemm_dtypes[t];
    const int64_t n = 1000;
    double *X = malloc(n * 8), *Y = malloc(n * 8), *ref = malloc(n * 8), *got = malloc(n * 8);
    lt_random(X, n, 61 + t);
    lt_random(Y, n, 71 + t);
    lt_round(X, n, dt);
    lt_round(Y, n, dt);
    acx_buffer_t *x = lt_poisoned(dev, n, dt), *y = lt_poisoned(dev, n, dt), *r = lt_poisoned(dev, 2, dt);
    lt_write(x, 0, X, n);
    lt_write(y, 0, Y, n);
    char what[64];

    /* dot and nrm2, value returned with the reply. */
    double dref = 0, nref = 0, v = NAN;
    for (int64_t i = 0; i < n; i++) dref += X[i] * Y[i], nref += X[i] * X[i];
    nref = sqrt(nref);
    double rtol = dt == ACX_DTYPE_F64 ? 1e-12 : dt == ACX_DTYPE_F32 ? 1e-5 : dt == ACX_DTYPE_F16 ? 2e-2 : 5e-2;
    ACX_ASSERT_STATUS(acx_blas_dot(blas, n, x, 0, 1, y, 0, 1, NULL, 0, &v, NULL), ACX_OK);
    snprintf(what, sizeof what, "dot %s (value)", acx_dtype_name(dt));
    /* A sum of 1000 products of +-[1/8, 1] may nearly cancel: compare against the scale of the terms. */
    LT_CHECK_ERR(what, fabs(v - dref) / sqrt((double)n), rtol);
    ACX_ASSERT_STATUS(acx_blas_nrm2(blas, n, x, 0, 1, NULL, 0, &v, NULL), ACX_OK);
    snprintf(what, sizeof what, "nrm2 %s (value)", acx_dtype_name(dt));
    LT_CHECK_ERR(what, fabs(v - nref) / nref, rtol);
    /* ... asynchronously, read through acx_lib_result. */
    acx_future_t *f = NULL;
    ACX_ASSERT_STATUS(acx_blas_nrm2(blas, n, x, 0, 1, NULL, 0, NULL, &f), ACX_OK);
    ACX_ASSERT_STATUS(acx_future_wait(f, LT_TIMEOUT, NULL, 0, NULL), ACX_OK);
    acx_lib_result_t res;
    ACX_ASSERT_STATUS(acx_lib_result(f, &res), ACX_OK);
    acx_future_release(f);
    CU_ASSERT_EQUAL(res.status, ACX_OK);
    CU_ASSERT_EQUAL(res.library, ACX_LIB_CUBLAS);
    LT_CHECK_ERR("nrm2 (future)", fabs(res.value - nref) / nref, rtol);
    /* ... into a buffer, the neighbouring element untouched. */
    ACX_ASSERT_STATUS(acx_blas_dot(blas, n, x, 0, 1, y, 0, 1, r, acx_dtype_size(dt), NULL, NULL), ACX_OK);
    double rr[2];
    lt_read(r, 0, rr, 2);
    CU_ASSERT(isnan(rr[0]));
    snprintf(what, sizeof what, "dot %s (buffer)", acx_dtype_name(dt));
    LT_CHECK_ERR(what, fabs(rr[1] - dref) / sqrt((double)n), rtol);

    /* axpy then scal (y := -0.5 (3 x + y)). */
    ACX_ASSERT_STATUS(acx_blas_axpy(blas, n, 3.0, x, 0, 1, y, 0, 1, NULL), ACX_OK);
    ACX_ASSERT_STATUS(acx_blas_scal(blas, n, -0.5, y, 0, 1, NULL), ACX_OK);
    lt_read(y, 0, got, n);
    for (int64_t i = 0; i < n; i++) ref[i] = -0.5 * (3.0 * X[i] + Y[i]);
    snprintf(what, sizeof what, "axpy+scal %s", acx_dtype_name(dt));
    LT_CHECK_ERR(what, lt_rel_err(got, ref, n), 2 * lt_tol(dt) + (dt == ACX_DTYPE_F64 ? 0 : 1e-6));
    free(X);
    free(Y);
    free(ref);
    free(got);
    acx_buffer_release(x);
    acx_buffer_release(y);
    acx_buffer_release(r);
  }
}

/* More requests than the context's descriptor slots, queued without waiting: each x += 1. */
static void t_pipeline(void) {
  const int64_t n = 4096;
  const int reps = 600;
  double *X = malloc(n * 8), *one = malloc(n * 8), *got = malloc(n * 8), *ref = malloc(n * 8);
  lt_random(X, n, 91);
  for (int64_t i = 0; i < n; i++) one[i] = 1.0, ref[i] = X[i] + reps;
  acx_buffer_t *x = lt_poisoned(dev, n, ACX_DTYPE_F64), *o = lt_poisoned(dev, n, ACX_DTYPE_F64);
  lt_write(x, 0, X, n);
  lt_write(o, 0, one, n);
  acx_future_t *last = NULL;
  for (int r = 0; r < reps; r++) {
    if (last) acx_future_release(last);
    ACX_ASSERT_STATUS(acx_blas_axpy(blas, n, 1.0, o, 0, 1, x, 0, 1, &last), ACX_OK);
  }
  ACX_ASSERT_STATUS(acx_future_wait(last, LT_TIMEOUT, NULL, 0, NULL), ACX_OK);
  acx_future_release(last);
  lt_read(x, 0, got, n);
  LT_CHECK_ERR("600 queued axpys", lt_rel_err(got, ref, n), 1e-14);
  free(X);
  free(one);
  free(got);
  free(ref);
  acx_buffer_release(x);
  acx_buffer_release(o);
}

/* The executors' readback slots in this suite (t_readback_backpressure). */
#define LT_READBACK_SLOTS 16
_Static_assert(LT_READBACK_SLOTS == 16, "main sets ACX_LIB_READBACK_SLOTS to 16 for the executors");

/* More value readbacks in flight than the executor has slots (ACX_LIB_READBACK_SLOTS, set to 16
 * for this suite's executors in main), every one held behind a stream that waits for the host: the
 * one beyond fails at once with ACX_ERR_QUEUE_FULL instead of holding the executor's loop until a
 * slot frees (the loop keeps serving: a ping answers), and once the stream goes on every accepted
 * one completes with its value. Few slots: each dot queues several operations behind the wait, and
 * CUDA's launch queue for a stopped stream is finite (a thousand dots filled it in the first
 * version, and the executor's loop blocked inside a launch until it was declared hung). Nothing
 * here may stop the test before the stream is let go. */
static void t_readback_backpressure(void) {
  enum { SLOTS = LT_READBACK_SLOTS, CTX = 2, PER = (SLOTS + 2) / 2, N = 64 };
  double ones[N];
  for (int i = 0; i < N; i++) ones[i] = 1.0;
  acx_buffer_t *x = lt_poisoned(dev, N, ACX_DTYPE_F64);
  lt_write(x, 0, ones, N);
  acx_blas_t *b[CTX] = {NULL};
  for (int k = 0; k < CTX; k++) ACX_ASSERT_STATUS(acx_blas_create(dev, NULL, &b[k]), ACX_OK);
  acx_host_mem_t *flag = NULL;
  void *p = NULL;
  size_t nb = 0;
  ACX_ASSERT_STATUS(acx_host_alloc(dev, 4096, &flag), ACX_OK);
  ACX_ASSERT_STATUS(acx_host_mem_ptr(flag, &p, &nb), ACX_OK);
  volatile uint32_t *word = p;
  *word = 0;
  acxi_cmd_t cmd = {.op = ACXI_OP_WAIT_VALUE, .stream = 0, .arg = {flag->id, 1, 0}};
  acx_future_t *w = NULL, *f[CTX * PER] = {NULL};
  ACX_ASSERT_STATUS(acxi_device_submit(dev, &cmd, NULL, 0, 0, -1, acxi_deadline(LT_TIMEOUT), &w), ACX_OK);
  int refused = 0;
  for (int i = 0; i < CTX * PER; i++)
    refused += acx_blas_dot(b[i / PER], N, x, 0, 1, x, 0, 1, NULL, 0, NULL, &f[i]) != ACX_OK;
  CU_ASSERT_EQUAL(refused, 0);
  acx_status_t last = f[SLOTS] ? acx_future_wait(f[SLOTS], LT_TIMEOUT, NULL, 0, NULL) : ACX_ERR_NULL_ARG;
  acx_status_t ping = acx_device_ping(dev, LT_TIMEOUT);
  acx_status_t held = f[0] ? acx_future_wait(f[0], 100000000LL, NULL, 0, NULL) : ACX_ERR_NULL_ARG;
  __atomic_store_n(word, 1u, __ATOMIC_RELEASE); /* the stream goes on, whatever happened above */
  CU_ASSERT_EQUAL(last, ACX_ERR_QUEUE_FULL);
  CU_ASSERT_EQUAL(ping, ACX_OK);
  CU_ASSERT_EQUAL(held, ACX_ERR_TIMEOUT); /* it was still held behind the wait */
  CU_ASSERT_EQUAL(acx_future_wait(w, LT_TIMEOUT, NULL, 0, NULL), ACX_OK);
  int bad = 0;
  for (int i = 0; i < SLOTS; i++) {
    acx_lib_result_t r;
    if (!f[i] || acx_future_wait(f[i], LT_TIMEOUT, NULL, 0, NULL) != ACX_OK || acx_lib_result(f[i], &r) != ACX_OK ||
        r.status != ACX_OK || r.value != (double)N)
      bad++;
  }
  CU_ASSERT_EQUAL(bad, 0);
  for (int i = 0; i < CTX * PER; i++)
    if (f[i]) acx_future_release(f[i]);
  acx_future_release(w);
  /* The slots are free again. */
  double v = 0;
  CU_ASSERT_EQUAL(acx_blas_dot(b[0], N, x, 0, 1, x, 0, 1, NULL, 0, &v, NULL), ACX_OK);
  CU_ASSERT_EQUAL(v, (double)N);
  for (int k = 0; k < CTX; k++) CU_ASSERT_EQUAL(acx_blas_destroy(b[k]), ACX_OK);
  CU_ASSERT_EQUAL(acx_host_free(flag), ACX_OK);
  acx_buffer_release(x);
}

/* After an executor restart the new incarnation creates its own cuBLAS handles. */
static void t_restart(void) {
  uint64_t g0;
  ACX_ASSERT_STATUS(acx_device_generation(dev, &g0), ACX_OK);
  gemm_case(ACX_DTYPE_F32, 0, 0, 0.0, 1, 301);
  ACX_ASSERT_STATUS(acx_device_inject_fault(dev, 0, LT_TIMEOUT), ACX_ERR_DEVICE_LOST);
  wait_generation(g0);
  gemm_case(ACX_DTYPE_F32, 0, 1, 0.5, 2, 302);
  double v = 0;
  acx_buffer_t *x = lt_poisoned(dev, 3, ACX_DTYPE_F64);
  double X[3] = {3, 4, 12};
  lt_write(x, 0, X, 3);
  ACX_ASSERT_STATUS(acx_blas_nrm2(blas, 3, x, 0, 1, NULL, 0, &v, NULL), ACX_OK);
  CU_ASSERT_DOUBLE_EQUAL(v, 13.0, 1e-12);
  acx_buffer_release(x);
}

static int setup(void) {
  if (acx_system_create(NULL, &lt_sys) != ACX_OK) return 1;
  dev = unit_mode ? lt_open_host(2) : lt_open_cuda(2);
  return acx_blas_create(dev, NULL, &blas) != ACX_OK;
}

static int teardown(void) {
  int bad = acx_blas_destroy(blas) != ACX_OK;
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
  static const acx_test_case_t unit_cases[] = {ACX_TEST(t_create), ACX_TEST(t_gemm_validation),
                                               ACX_TEST(t_level12_validation), ACX_TEST(t_stale), ACX_TEST_END};
  static const acx_test_case_t gpu_cases[] = {ACX_TEST(t_gemm),     ACX_TEST(t_gemm_beta_batched),
                                              ACX_TEST(t_gemm_fast_tf32), ACX_TEST(t_gemv),
                                              ACX_TEST(t_level1),   ACX_TEST(t_pipeline),
                                              ACX_TEST(t_readback_backpressure), ACX_TEST(t_restart),
                                              ACX_TEST_END};
  setenv("ACX_LIB_READBACK_SLOTS", "16", 1); /* LT_READBACK_SLOTS, read by the executors */
  if (!unit_mode) {
    /* Skip before anything starts when the build or the machine has no GPU. */
    if (access("/dev/nvidiactl", F_OK) != 0) acx_test_skip("no GPU on this machine");
  }
  return acx_test_run(unit_mode ? "lib_blas_unit" : "lib_blas", unit_mode ? unit_cases : gpu_cases, setup, teardown);
}
