/* cuTENSOR through acx (runtime/libs/lib_tensor.c, lib_tensor_exec.c).
 * --unit (label unit): validation on a host-kind device; every valid request ends in
 * ACX_ERR_NOT_SUPPORTED (host kind, and on builds without cuTENSOR the library's absence).
 * Default (label gpu, registered only when configure found cuTENSOR): a matrix product written as
 * a contraction, a 4-mode contraction with padded strides and beta != 0, and a full contraction to
 * a scalar, against double references. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acx/tensor.h"
#include "acx_test.h"
#include "lib_test_util.h"

static acx_device_t *dev;
static acx_tensor_t *ten;
static int unit_mode;

static acx_buffer_t *alloc(size_t elems, acx_dtype_t dt) {
  acx_buffer_t *b = NULL;
  ACX_ASSERT_STATUS(acx_buffer_alloc(dev, elems * acx_dtype_size(dt), dt, ACX_MEM_DEVICE, LT_TIMEOUT, &b), ACX_OK);
  return b;
}

static acx_tensor_operand_t OP(int n, const int32_t *m, const int64_t *e, const int64_t *s, acx_buffer_t *b) {
  return (acx_tensor_operand_t){.nmodes = n, .modes = m, .extents = e, .strides = s, .buf = b, .offset = 0};
}

/* ------------------------------------------------------------------------------------------ */
/* validation (host kind)                                                                      */

static void t_validation(void) {
  /* C[m,n] = A[m,k] B[k,n] with m = 6, k = 5, n = 4 */
  const int32_t ma[] = {'m', 'k'}, mb[] = {'k', 'n'}, mc[] = {'m', 'n'}, mdup[] = {'m', 'm'}, mz[] = {'m', 'z'};
  const int64_t ea[] = {6, 5}, eb[] = {5, 4}, ec[] = {6, 4}, ebad[] = {6, 3}, e0[] = {6, 0};
  acx_buffer_t *a = alloc(30, ACX_DTYPE_F64), *b = alloc(20, ACX_DTYPE_F64), *c = alloc(24, ACX_DTYPE_F64);
  acx_buffer_t *c32 = alloc(24, ACX_DTYPE_F32), *c16 = alloc(24, ACX_DTYPE_F16), *big = alloc(200, ACX_DTYPE_F64);
  acx_tensor_operand_t A = OP(2, ma, ea, NULL, a), B = OP(2, mb, eb, NULL, b), C = OP(2, mc, ec, NULL, c);
  ACX_ASSERT_STATUS(acx_tensor_contract(ten, 1.0, &A, &B, 0.0, &C, NULL), ACX_ERR_NOT_SUPPORTED);
  acx_future_t *f = (acx_future_t *)&A;
  ACX_ASSERT_STATUS(acx_tensor_contract(ten, 1.0, &A, &B, 0.0, &C, &f), ACX_ERR_NOT_SUPPORTED);
  CU_ASSERT_PTR_NULL(f);
  ACX_ASSERT_STATUS(acx_tensor_contract(NULL, 1.0, &A, &B, 0.0, &C, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_tensor_contract(ten, 1.0, NULL, &B, 0.0, &C, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_tensor_contract(ten, 1.0, &A, NULL, 0.0, &C, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_tensor_contract(ten, 1.0, &A, &B, 0.0, NULL, NULL), ACX_ERR_NULL_ARG);
  acx_tensor_operand_t X = A;
  X.nmodes = ACX_TENSOR_MAX_MODES + 1;
  ACX_ASSERT_STATUS(acx_tensor_contract(ten, 1.0, &X, &B, 0.0, &C, NULL), ACX_ERR_INVALID_ARG);
  X = A, X.nmodes = -1;
  ACX_ASSERT_STATUS(acx_tensor_contract(ten, 1.0, &X, &B, 0.0, &C, NULL), ACX_ERR_INVALID_ARG);
  X = A, X.modes = NULL;
  ACX_ASSERT_STATUS(acx_tensor_contract(ten, 1.0, &X, &B, 0.0, &C, NULL), ACX_ERR_NULL_ARG);
  X = A, X.extents = NULL;
  ACX_ASSERT_STATUS(acx_tensor_contract(ten, 1.0, &X, &B, 0.0, &C, NULL), ACX_ERR_NULL_ARG);
  X = A, X.buf = NULL;
  ACX_ASSERT_STATUS(acx_tensor_contract(ten, 1.0, &X, &B, 0.0, &C, NULL), ACX_ERR_NULL_ARG);
  X = A, X.modes = mdup; /* a mode twice in one tensor */
  ACX_ASSERT_STATUS(acx_tensor_contract(ten, 1.0, &X, &B, 0.0, &C, NULL), ACX_ERR_INVALID_ARG);
  X = B, X.extents = (const int64_t[]){6, 4}; /* k is 5 in A but 6 here */
  ACX_ASSERT_STATUS(acx_tensor_contract(ten, 1.0, &A, &X, 0.0, &C, NULL), ACX_ERR_INVALID_ARG);
  X = C, X.extents = ebad; /* n is 4 in B but 3 here */
  ACX_ASSERT_STATUS(acx_tensor_contract(ten, 1.0, &A, &B, 0.0, &X, NULL), ACX_ERR_INVALID_ARG);
  X = A, X.extents = e0;
  ACX_ASSERT_STATUS(acx_tensor_contract(ten, 1.0, &X, &B, 0.0, &C, NULL), ACX_ERR_INVALID_ARG);
  X = C, X.modes = mz; /* z only in C */
  ACX_ASSERT_STATUS(acx_tensor_contract(ten, 1.0, &A, &B, 0.0, &X, NULL), ACX_ERR_INVALID_ARG);
  X = A, X.strides = (const int64_t[]){1, 0};
  ACX_ASSERT_STATUS(acx_tensor_contract(ten, 1.0, &X, &B, 0.0, &C, NULL), ACX_ERR_INVALID_ARG);
  X = A, X.strides = (const int64_t[]){1, 7}; /* padded columns: 1 + 5 + 4*7 = 34 > 30 elements */
  ACX_ASSERT_STATUS(acx_tensor_contract(ten, 1.0, &X, &B, 0.0, &C, NULL), ACX_ERR_OUT_OF_RANGE);
  X.buf = big;
  ACX_ASSERT_STATUS(acx_tensor_contract(ten, 1.0, &X, &B, 0.0, &C, NULL), ACX_ERR_NOT_SUPPORTED);
  X = A, X.offset = 8; /* one element short */
  ACX_ASSERT_STATUS(acx_tensor_contract(ten, 1.0, &X, &B, 0.0, &C, NULL), ACX_ERR_OUT_OF_RANGE);
  X = A, X.offset = 3;
  ACX_ASSERT_STATUS(acx_tensor_contract(ten, 1.0, &X, &B, 0.0, &C, NULL), ACX_ERR_INVALID_ARG);
  X = C, X.buf = c32;
  ACX_ASSERT_STATUS(acx_tensor_contract(ten, 1.0, &A, &B, 0.0, &X, NULL), ACX_ERR_BAD_DTYPE);
  X = C, X.buf = c16;
  ACX_ASSERT_STATUS(acx_tensor_contract(ten, 1.0, &A, &B, 0.0, &X, NULL), ACX_ERR_BAD_DTYPE);
  X = C, X.buf = a; /* C over A */
  ACX_ASSERT_STATUS(acx_tensor_contract(ten, 1.0, &A, &B, 0.0, &X, NULL), ACX_ERR_INVALID_ARG);
  X = C, X.buf = big, X.offset = 8 * 100;
  acx_tensor_operand_t Ab = A;
  Ab.buf = big; /* C after A in one buffer: disjoint */
  ACX_ASSERT_STATUS(acx_tensor_contract(ten, 1.0, &Ab, &B, 0.0, &X, NULL), ACX_ERR_NOT_SUPPORTED);
  /* a full contraction to a scalar: c has no modes */
  const int32_t mi[] = {'i'};
  const int64_t ei[] = {20};
  acx_tensor_operand_t V = OP(1, mi, ei, NULL, b), W = OP(1, mi, ei, NULL, big), S = OP(0, NULL, NULL, NULL, c);
  ACX_ASSERT_STATUS(acx_tensor_contract(ten, 1.0, &V, &W, 0.0, &S, NULL), ACX_ERR_NOT_SUPPORTED);
  /* 13 distinct modes */
  const int32_t m8[] = {1, 2, 3, 4, 5, 6, 7, 8}, m8b[] = {1, 2, 3, 9, 10, 11, 12, 13};
  const int64_t e8[] = {1, 1, 1, 1, 1, 1, 1, 1};
  acx_tensor_operand_t P = OP(8, m8, e8, NULL, a), Q = OP(8, m8b, e8, NULL, b);
  ACX_ASSERT_STATUS(acx_tensor_contract(ten, 1.0, &P, &Q, 0.0, &C, NULL), ACX_ERR_INVALID_ARG);
  acx_buffer_t *all[] = {a, b, c, c32, c16, big};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) acx_buffer_release(all[i]);
}

/* ------------------------------------------------------------------------------------------ */
/* GPU (with cuTENSOR)                                                                        */

/* Element offset of a multi-index under strides. */
static size_t at(int n, const int64_t *idx, const int64_t *strides) {
  size_t o = 0;
  for (int i = 0; i < n; i++) o += (size_t)(idx[i] * strides[i]);
  return o;
}

/* C[a,b,c,d]... reference by brute force over all labels. */
static void ref_contract(int nl, const int32_t *labels, const int64_t *ext, const acx_tensor_operand_t *o[3],
                         const int64_t *st[3], const double *v[3], double alpha, double beta, double *out) {
  /* out starts as beta C over C's positions. */
  int64_t idx[16] = {0};
  size_t total = 1;
  for (int i = 0; i < nl; i++) total *= (size_t)ext[i];
  /* positions of C written: scale once */
  int64_t cidx[ACX_TENSOR_MAX_MODES];
  size_t ctotal = 1;
  for (int i = 0; i < o[2]->nmodes; i++) ctotal *= (size_t)o[2]->extents[i];
  for (size_t p = 0; p < ctotal; p++) {
    size_t r = p;
    for (int i = 0; i < o[2]->nmodes; i++) {
      cidx[i] = (int64_t)(r % (size_t)o[2]->extents[i]);
      r /= (size_t)o[2]->extents[i];
    }
    size_t k = at(o[2]->nmodes, cidx, st[2]);
    out[k] = beta * v[2][k];
  }
  for (size_t p = 0; p < total; p++) {
    size_t r = p;
    for (int i = 0; i < nl; i++) {
      idx[i] = (int64_t)(r % (size_t)ext[i]);
      r /= (size_t)ext[i];
    }
    size_t off[3];
    for (int t = 0; t < 3; t++) {
      int64_t mi[ACX_TENSOR_MAX_MODES];
      for (int i = 0; i < o[t]->nmodes; i++) {
        int l = 0;
        while (labels[l] != o[t]->modes[i]) l++;
        mi[i] = idx[l];
      }
      off[t] = at(o[t]->nmodes, mi, st[t]);
    }
    out[off[2]] += alpha * v[0][off[0]] * v[1][off[1]];
  }
}

static void run_case(const char *what, acx_dtype_t dt, acx_tensor_operand_t *A, acx_tensor_operand_t *B,
                     acx_tensor_operand_t *C, int nl, const int32_t *labels, const int64_t *ext, double alpha,
                     double beta) {
  acx_tensor_operand_t *o[3] = {A, B, C};
  int64_t packed[3][ACX_TENSOR_MAX_MODES];
  const int64_t *st[3];
  size_t span[3];
  double *v[3];
  for (int t = 0; t < 3; t++) {
    int64_t s = 1;
    for (int i = 0; i < o[t]->nmodes; i++) {
      packed[t][i] = s;
      s *= o[t]->extents[i];
    }
    st[t] = o[t]->strides ? o[t]->strides : packed[t];
    span[t] = 1;
    for (int i = 0; i < o[t]->nmodes; i++) span[t] += (size_t)((o[t]->extents[i] - 1) * st[t][i]);
    v[t] = malloc(span[t] * 8);
    lt_random(v[t], span[t], 90 + (uint64_t)t);
    lt_round(v[t], span[t], dt);
    o[t]->buf = lt_poisoned(dev, span[t] + 1, dt);
    lt_write(o[t]->buf, 0, v[t], span[t]);
  }
  double *ref = malloc(span[2] * 8), *got = malloc((span[2] + 1) * 8);
  for (size_t i = 0; i < span[2]; i++) ref[i] = v[2][i]; /* padding keeps C's values */
  const acx_tensor_operand_t *co[3] = {A, B, C};
  ref_contract(nl, labels, ext, co, st, (const double **)v, alpha, beta, ref);
  ACX_ASSERT_STATUS(acx_tensor_contract(ten, alpha, A, B, beta, C, NULL), ACX_OK);
  lt_read(C->buf, 0, got, span[2] + 1);
  LT_CHECK_ERR(what, lt_rel_err(got, ref, span[2]), dt == ACX_DTYPE_F64 ? 1e-13 : 1e-5);
  CU_ASSERT(isnan(got[span[2]]));
  for (int t = 0; t < 3; t++) {
    acx_buffer_release(o[t]->buf);
    free(v[t]);
  }
  free(ref), free(got);
}

static void t_contract(void) {
  const acx_dtype_t dts[] = {ACX_DTYPE_F64, ACX_DTYPE_F32};
  for (int d = 0; d < 2; d++) {
    acx_dtype_t dt = dts[d];
    { /* a matrix product */
      const int32_t L[] = {'m', 'n', 'k'}, ma[] = {'m', 'k'}, mb[] = {'k', 'n'}, mc[] = {'m', 'n'};
      const int64_t E[] = {37, 29, 41}, ea[] = {37, 41}, eb[] = {41, 29}, ec[] = {37, 29};
      acx_tensor_operand_t A = OP(2, ma, ea, NULL, NULL), B = OP(2, mb, eb, NULL, NULL), C = OP(2, mc, ec, NULL, NULL);
      run_case(dt == ACX_DTYPE_F64 ? "gemm f64" : "gemm f32", dt, &A, &B, &C, 3, L, E, 1.0, 0.0);
    }
    { /* C[a,b,c] = A[a,k,c,l] B[l,b,k] with padded C and beta */
      const int32_t L[] = {'a', 'b', 'c', 'k', 'l'}, ma[] = {'a', 'k', 'c', 'l'}, mb[] = {'l', 'b', 'k'},
                    mc[] = {'a', 'b', 'c'};
      const int64_t E[] = {7, 5, 6, 4, 3}, ea[] = {7, 4, 6, 3}, eb[] = {3, 5, 4}, ec[] = {7, 5, 6};
      const int64_t sc[] = {1, 9, 9 * 5 + 2};
      acx_tensor_operand_t A = OP(4, ma, ea, NULL, NULL), B = OP(3, mb, eb, NULL, NULL), C = OP(3, mc, ec, sc, NULL);
      run_case(dt == ACX_DTYPE_F64 ? "4-mode f64" : "4-mode f32", dt, &A, &B, &C, 5, L, E, -0.5, 2.0);
    }
    { /* a dot product into a scalar */
      const int32_t L[] = {'i'}, mi[] = {'i'};
      const int64_t E[] = {1000}, ei[] = {1000};
      acx_tensor_operand_t A = OP(1, mi, ei, NULL, NULL), B = OP(1, mi, ei, NULL, NULL), C = OP(0, NULL, NULL, NULL, NULL);
      run_case(dt == ACX_DTYPE_F64 ? "dot f64" : "dot f32", dt, &A, &B, &C, 1, L, E, 1.0, 1.0);
    }
  }
}

static int setup(void) {
  if (acx_system_create(NULL, &lt_sys) != ACX_OK) return 1;
  dev = unit_mode ? lt_open_host(2) : lt_open_cuda(2);
  return acx_tensor_create(dev, NULL, &ten) != ACX_OK;
}

static int teardown(void) {
  int bad = acx_tensor_destroy(ten) != ACX_OK;
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
  static const acx_test_case_t unit_cases[] = {ACX_TEST(t_validation), ACX_TEST_END};
  static const acx_test_case_t gpu_cases[] = {ACX_TEST(t_contract), ACX_TEST_END};
  if (!unit_mode && access("/dev/nvidiactl", F_OK) != 0) acx_test_skip("no GPU on this machine");
  if (!unit_mode && !acx_tensor_available()) acx_test_skip("this libacx was built without cuTENSOR");
  return acx_test_run(unit_mode ? "lib_tensor_unit" : "lib_tensor", unit_mode ? unit_cases : gpu_cases, setup,
                      teardown);
}
