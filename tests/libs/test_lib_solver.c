/* cuSOLVER through acx (runtime/libs/lib_solver.c, lib_solver_exec.c).
 * Default (label gpu): potrf/potrs, getrf/getrs, geqrf, gesvd, syevd in f32 and f64 against
 * double-precision CPU checks (reconstruction of A from the factors, residuals, orthogonality) on
 * fresh random inputs with poisoned outputs; info reported for singular / indefinite matrices;
 * growing workspaces queued without waiting; handles recreated after an executor restart.
 * --unit (label unit): validation on a host-kind device. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acx/solver.h"
#include "acx_test.h"
#include "lib_test_util.h"

static acx_device_t *dev;
static acx_solver_t *sol;
static int unit_mode;

static acx_buffer_t *alloc(size_t elems, acx_dtype_t dt) {
  acx_buffer_t *b = NULL;
  ACX_ASSERT_STATUS(acx_buffer_alloc(dev, elems * acx_dtype_size(dt), dt, ACX_MEM_DEVICE, LT_TIMEOUT, &b), ACX_OK);
  return b;
}

/* ------------------------------------------------------------------------------------------ */
/* validation (host kind)                                                                      */

static void t_create(void) {
  acx_solver_t *s = NULL;
  ACX_ASSERT_STATUS(acx_solver_create(NULL, NULL, &s), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_solver_create(dev, NULL, NULL), ACX_ERR_NULL_ARG);
  acx_lib_config_t cfg = ACX_LIB_CONFIG_INIT;
  cfg.stream = 7;
  ACX_ASSERT_STATUS(acx_solver_create(dev, &cfg, &s), ACX_ERR_INVALID_ARG);
  CU_ASSERT_PTR_NULL(s);
  ACX_ASSERT_STATUS(acx_solver_destroy(NULL), ACX_OK);
}

static void t_factor_validation(void) {
  const int64_t n = 8;
  acx_buffer_t *a = alloc(n * n, ACX_DTYPE_F64), *b = alloc(n * 3, ACX_DTYPE_F64), *a32 = alloc(n * n, ACX_DTYPE_F32);
  acx_buffer_t *ai = alloc(n * n, ACX_DTYPE_I32), *piv = alloc(n, ACX_DTYPE_I64), *piv32 = alloc(n, ACX_DTYPE_I32);
  acx_buffer_t *tau = alloc(n, ACX_DTYPE_F64);
  /* potrf */
  ACX_ASSERT_STATUS(acx_solver_potrf(sol, ACX_SOLVER_LOWER, n, a, 0, n, NULL), ACX_ERR_NOT_SUPPORTED);
  ACX_ASSERT_STATUS(acx_solver_potrf(sol, ACX_SOLVER_UPPER, n, a32, 0, n, NULL), ACX_ERR_NOT_SUPPORTED);
  ACX_ASSERT_STATUS(acx_solver_potrf(NULL, ACX_SOLVER_LOWER, n, a, 0, n, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_solver_potrf(sol, (acx_solver_uplo_t)2, n, a, 0, n, NULL), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_solver_potrf(sol, ACX_SOLVER_LOWER, -1, a, 0, n, NULL), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_solver_potrf(sol, ACX_SOLVER_LOWER, n, a, 0, n - 1, NULL), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_solver_potrf(sol, ACX_SOLVER_LOWER, n + 1, a, 0, n + 1, NULL), ACX_ERR_OUT_OF_RANGE);
  ACX_ASSERT_STATUS(acx_solver_potrf(sol, ACX_SOLVER_LOWER, n, a, 8, n, NULL), ACX_ERR_OUT_OF_RANGE);
  ACX_ASSERT_STATUS(acx_solver_potrf(sol, ACX_SOLVER_LOWER, n, a, 4, n, NULL), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_solver_potrf(sol, ACX_SOLVER_LOWER, n, ai, 0, n, NULL), ACX_ERR_BAD_DTYPE);
  ACX_ASSERT_STATUS(acx_solver_potrf(sol, ACX_SOLVER_LOWER, n, NULL, 0, n, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_solver_potrf(sol, ACX_SOLVER_LOWER, 0, a, 0, 1, NULL), ACX_ERR_NOT_SUPPORTED); /* empty */
  /* potrs */
  ACX_ASSERT_STATUS(acx_solver_potrs(sol, ACX_SOLVER_LOWER, n, 3, a, 0, n, b, 0, n, NULL), ACX_ERR_NOT_SUPPORTED);
  ACX_ASSERT_STATUS(acx_solver_potrs(sol, ACX_SOLVER_LOWER, n, 4, a, 0, n, b, 0, n, NULL), ACX_ERR_OUT_OF_RANGE);
  ACX_ASSERT_STATUS(acx_solver_potrs(sol, ACX_SOLVER_LOWER, n, 3, a32, 0, n, b, 0, n, NULL), ACX_ERR_BAD_DTYPE);
  ACX_ASSERT_STATUS(acx_solver_potrs(sol, ACX_SOLVER_LOWER, n, -2, a, 0, n, b, 0, n, NULL), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_solver_potrs(sol, ACX_SOLVER_LOWER, 4, 2, a, 0, 4, a, 64, 4, NULL), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_solver_potrs(sol, ACX_SOLVER_LOWER, 4, 2, a, 0, 4, a, 128, 4, NULL), ACX_ERR_NOT_SUPPORTED);
  /* getrf / getrs */
  ACX_ASSERT_STATUS(acx_solver_getrf(sol, n, n, a, 0, n, piv, 0, NULL), ACX_ERR_NOT_SUPPORTED);
  ACX_ASSERT_STATUS(acx_solver_getrf(sol, n, n, a, 0, n, piv32, 0, NULL), ACX_ERR_BAD_DTYPE);
  ACX_ASSERT_STATUS(acx_solver_getrf(sol, n, n, a, 0, n, NULL, 0, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_solver_getrf(sol, n, n, a, 0, n, piv, 8, NULL), ACX_ERR_OUT_OF_RANGE);
  ACX_ASSERT_STATUS(acx_solver_getrf(sol, 4, n + 2, a, 0, 4, piv, 8, NULL), ACX_ERR_NOT_SUPPORTED); /* min(m,n) = 4 */
  ACX_ASSERT_STATUS(acx_solver_getrf(sol, n, -1, a, 0, n, piv, 0, NULL), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_solver_getrs(sol, ACX_BLAS_T, n, 3, a, 0, n, piv, 0, b, 0, n, NULL), ACX_ERR_NOT_SUPPORTED);
  ACX_ASSERT_STATUS(acx_solver_getrs(sol, (acx_blas_op_t)3, n, 3, a, 0, n, piv, 0, b, 0, n, NULL),
                    ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_solver_getrs(sol, ACX_BLAS_N, n, 3, a, 0, n, piv, 0, b, 0, n - 1, NULL), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_solver_getrs(sol, ACX_BLAS_N, n, 3, a, 0, n, piv32, 0, b, 0, n, NULL), ACX_ERR_BAD_DTYPE);
  ACX_ASSERT_STATUS(acx_solver_getrs(sol, ACX_BLAS_N, n, 3, a, 0, n, piv, 0, a, 0, n, NULL), ACX_ERR_INVALID_ARG);
  /* geqrf */
  ACX_ASSERT_STATUS(acx_solver_geqrf(sol, n, 4, a, 0, n, tau, 0, NULL), ACX_ERR_NOT_SUPPORTED);
  ACX_ASSERT_STATUS(acx_solver_geqrf(sol, n, n, a, 0, n, tau, 8, NULL), ACX_ERR_OUT_OF_RANGE);
  ACX_ASSERT_STATUS(acx_solver_geqrf(sol, n, n, a32, 0, n, tau, 0, NULL), ACX_ERR_BAD_DTYPE);
  ACX_ASSERT_STATUS(acx_solver_geqrf(sol, n, n, a, 0, n, a, 0, NULL), ACX_ERR_INVALID_ARG); /* overlap */
  /* syevd */
  ACX_ASSERT_STATUS(acx_solver_syevd(sol, 1, ACX_SOLVER_LOWER, n, a, 0, n, tau, 0, NULL), ACX_ERR_NOT_SUPPORTED);
  ACX_ASSERT_STATUS(acx_solver_syevd(sol, 2, ACX_SOLVER_LOWER, n, a, 0, n, tau, 0, NULL), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_solver_syevd(sol, 0, ACX_SOLVER_LOWER, n + 1, a, 0, n + 1, tau, 0, NULL),
                    ACX_ERR_OUT_OF_RANGE);
  ACX_ASSERT_STATUS(acx_solver_syevd(sol, 0, ACX_SOLVER_LOWER, n, a, 0, n, NULL, 0, NULL), ACX_ERR_NULL_ARG);
  acx_buffer_t *bufs[] = {a, b, a32, ai, piv, piv32, tau};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) acx_buffer_release(bufs[i]);
}

static void t_gesvd_validation(void) {
  const int64_t m = 10, n = 6;
  acx_buffer_t *a = alloc(m * n, ACX_DTYPE_F32), *s = alloc(n, ACX_DTYPE_F32), *u = alloc(m * m, ACX_DTYPE_F32);
  acx_buffer_t *vt = alloc(n * n, ACX_DTYPE_F32), *s64 = alloc(n, ACX_DTYPE_F64);
  acx_solver_gesvd_desc_t d = ACX_SOLVER_GESVD_DESC_INIT;
  d.jobu = ACX_SOLVER_SVD_ALL, d.jobvt = ACX_SOLVER_SVD_SOME;
  d.m = m, d.n = n, d.a = a, d.lda = m, d.s = s, d.u = u, d.ldu = m, d.vt = vt, d.ldvt = n;
  ACX_ASSERT_STATUS(acx_solver_gesvd(sol, &d, NULL), ACX_ERR_NOT_SUPPORTED);
  acx_solver_gesvd_desc_t e = d;
  ACX_ASSERT_STATUS(acx_solver_gesvd(sol, NULL, NULL), ACX_ERR_NULL_ARG);
  e.size = 3;
  ACX_ASSERT_STATUS(acx_solver_gesvd(sol, &e, NULL), ACX_ERR_INVALID_ARG);
  e = d, e.m = n - 1, e.lda = n; /* wide */
  ACX_ASSERT_STATUS(acx_solver_gesvd(sol, &e, NULL), ACX_ERR_INVALID_ARG);
  e = d, e.jobu = (acx_solver_svd_job_t)5;
  ACX_ASSERT_STATUS(acx_solver_gesvd(sol, &e, NULL), ACX_ERR_INVALID_ARG);
  e = d, e.jobu = ACX_SOLVER_SVD_NONE; /* u given but not asked for */
  ACX_ASSERT_STATUS(acx_solver_gesvd(sol, &e, NULL), ACX_ERR_INVALID_ARG);
  e.u = NULL;
  ACX_ASSERT_STATUS(acx_solver_gesvd(sol, &e, NULL), ACX_ERR_NOT_SUPPORTED);
  e = d, e.u = NULL; /* asked for, not given */
  ACX_ASSERT_STATUS(acx_solver_gesvd(sol, &e, NULL), ACX_ERR_NULL_ARG);
  e = d, e.jobvt = ACX_SOLVER_SVD_NONE, e.vt = NULL, e.jobu = ACX_SOLVER_SVD_SOME, e.u = vt, e.ldu = m;
  ACX_ASSERT_STATUS(acx_solver_gesvd(sol, &e, NULL), ACX_ERR_OUT_OF_RANGE); /* 36 < 60 elements */
  e = d, e.s = s64;
  ACX_ASSERT_STATUS(acx_solver_gesvd(sol, &e, NULL), ACX_ERR_BAD_DTYPE);
  e = d, e.ldvt = n - 1;
  ACX_ASSERT_STATUS(acx_solver_gesvd(sol, &e, NULL), ACX_ERR_INVALID_ARG);
  e = d, e.vt = u, e.vt_offset = 0; /* U and VT in one range */
  ACX_ASSERT_STATUS(acx_solver_gesvd(sol, &e, NULL), ACX_ERR_INVALID_ARG);
  acx_buffer_release(a);
  acx_buffer_release(s);
  acx_buffer_release(u);
  acx_buffer_release(vt);
  acx_buffer_release(s64);
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
  acx_buffer_t *a = alloc(16, ACX_DTYPE_F64);
  uint64_t g0;
  ACX_ASSERT_STATUS(acx_device_generation(dev, &g0), ACX_OK);
  ACX_ASSERT_STATUS(acx_device_inject_fault(dev, 0, LT_TIMEOUT), ACX_ERR_DEVICE_LOST);
  wait_generation(g0);
  ACX_ASSERT_STATUS(acx_solver_potrf(sol, ACX_SOLVER_LOWER, 4, a, 0, 4, NULL), ACX_ERR_STALE_BUFFER);
  acx_buffer_release(a);
}

/* ------------------------------------------------------------------------------------------ */
/* GPU: against double-precision checks                                                       */

static const acx_dtype_t dts[] = {ACX_DTYPE_F64, ACX_DTYPE_F32};

/* Tolerance of a factorisation of a well-conditioned matrix of order ~100. */
static double tol(acx_dtype_t dt) { return dt == ACX_DTYPE_F64 ? 1e-11 : 5e-5; }

/* C (m x n) = op(A) op(B), column-major, dense leading dimensions. */
static void matmul(int ta, int tb, int64_t m, int64_t n, int64_t k, const double *A, int64_t lda, const double *B,
                   int64_t ldb, double *C) {
  for (int64_t j = 0; j < n; j++)
    for (int64_t i = 0; i < m; i++) {
      double s = 0;
      for (int64_t l = 0; l < k; l++) s += (ta ? A[l + i * lda] : A[i + l * lda]) * (tb ? B[j + l * ldb] : B[l + j * ldb]);
      C[i + j * m] = s;
    }
}

/* A symmetric positive definite matrix M M^T / n + I, rounded to dt, in an n x n array. */
static void spd(double *A, int64_t n, uint64_t seed, acx_dtype_t dt) {
  double *M = malloc((size_t)(n * n) * 8);
  lt_random(M, (size_t)(n * n), seed);
  matmul(0, 1, n, n, n, M, n, M, n, A);
  for (int64_t i = 0; i < n * n; i++) A[i] /= (double)n;
  for (int64_t i = 0; i < n; i++) A[i + i * n] += 1.0;
  lt_round(A, (size_t)(n * n), dt);
  for (int64_t j = 0; j < n; j++) /* rounding kept it symmetric; make that exact */
    for (int64_t i = 0; i < j; i++) A[i + j * n] = A[j + i * n];
  free(M);
}

/* A (n x n, lda) into a buffer of lda x n elements whose padding keeps its poison. */
static acx_buffer_t *upload(const double *A, int64_t rows, int64_t cols, int64_t lda, acx_dtype_t dt) {
  acx_buffer_t *b = lt_poisoned(dev, (size_t)(lda * cols), dt);
  for (int64_t j = 0; j < cols; j++) lt_write(b, (size_t)(j * lda), A + j * rows, (size_t)rows);
  return b;
}

static void download(acx_buffer_t *b, double *A, int64_t rows, int64_t cols, int64_t lda) {
  for (int64_t j = 0; j < cols; j++) lt_read(b, (size_t)(j * lda), A + j * rows, (size_t)rows);
}

/* Residual of A X = B relative to ||A|| ||X|| (Frobenius norms). */
static double residual(int trans, const double *A, const double *X, const double *B, int64_t n, int64_t nrhs) {
  double *AX = malloc((size_t)(n * nrhs) * 8), r = 0, na = 0, nx = 0;
  matmul(trans, 0, n, nrhs, n, A, n, X, n, AX);
  for (int64_t i = 0; i < n * nrhs; i++) r += (AX[i] - B[i]) * (AX[i] - B[i]), nx += X[i] * X[i];
  for (int64_t i = 0; i < n * n; i++) na += A[i] * A[i];
  free(AX);
  return isnan(r) ? INFINITY : sqrt(r) / (sqrt(na) * sqrt(nx));
}

static void t_potrf_potrs(void) {
  const int64_t n = 97, lda = 101, nrhs = 5, ldb = 99;
  for (size_t t = 0; t < 2; t++)
    for (int up = 0; up < 2; up++) {
      acx_dtype_t dt = dts[t];
      double *A = malloc(n * n * 8), *F = malloc(n * n * 8), *LLt = malloc(n * n * 8), *T = calloc(n * n, 8);
      double *B = malloc(n * nrhs * 8), *X = malloc(n * nrhs * 8);
      spd(A, n, 10 + t * 2 + (uint64_t)up, dt);
      lt_random(B, (size_t)(n * nrhs), 20 + t);
      lt_round(B, (size_t)(n * nrhs), dt);
      acx_buffer_t *a = upload(A, n, n, lda, dt), *b = upload(B, n, nrhs, ldb, dt);
      acx_solver_uplo_t uplo = up ? ACX_SOLVER_UPPER : ACX_SOLVER_LOWER;
      ACX_ASSERT_STATUS(acx_solver_potrf(sol, uplo, n, a, 0, lda, NULL), ACX_OK);
      download(a, F, n, n, lda);
      /* The factor's triangle: L L^T (lower) or U^T U (upper) must give A back. */
      for (int64_t j = 0; j < n; j++)
        for (int64_t i = 0; i < n; i++)
          if (up ? i <= j : i >= j) T[i + j * n] = F[i + j * n];
      if (up) matmul(1, 0, n, n, n, T, n, T, n, LLt);
      else matmul(0, 1, n, n, n, T, n, T, n, LLt);
      char what[64];
      snprintf(what, sizeof what, "potrf %s %s", acx_dtype_name(dt), up ? "upper" : "lower");
      LT_CHECK_ERR(what, lt_rel_err(LLt, A, (size_t)(n * n)), tol(dt));
      ACX_ASSERT_STATUS(acx_solver_potrs(sol, uplo, n, nrhs, a, 0, lda, b, 0, ldb, NULL), ACX_OK);
      download(b, X, n, nrhs, ldb);
      snprintf(what, sizeof what, "potrs %s %s", acx_dtype_name(dt), up ? "upper" : "lower");
      LT_CHECK_ERR(what, residual(0, A, X, B, n, nrhs), tol(dt));
      /* The padding between columns was not touched. */
      double pad[4];
      lt_read(b, (size_t)n, pad, (size_t)(ldb - n));
      CU_ASSERT(isnan(pad[0]) && isnan(pad[1]));
      free(A), free(F), free(LLt), free(T), free(B), free(X);
      acx_buffer_release(a);
      acx_buffer_release(b);
    }
}

/* An indefinite matrix: info names the first leading minor that is not positive definite. */
static void t_potrf_info(void) {
  for (size_t t = 0; t < 2; t++) {
    const int64_t n = 16;
    double *A = malloc(n * n * 8);
    spd(A, n, 33, dts[t]);
    for (int64_t i = 0; i < n; i++) A[i + 6 * n] = A[6 + i * n] = 0;
    A[6 + 6 * n] = -1.0; /* the 7th leading minor is negative */
    acx_buffer_t *a = upload(A, n, n, n, dts[t]);
    ACX_ASSERT_STATUS(acx_solver_potrf(sol, ACX_SOLVER_LOWER, n, a, 0, n, NULL), ACX_ERR_LIBRARY_INFO);
    acx_future_t *f = NULL;
    lt_write(a, 0, A, (size_t)(n * n));
    ACX_ASSERT_STATUS(acx_solver_potrf(sol, ACX_SOLVER_LOWER, n, a, 0, n, &f), ACX_OK);
    CU_ASSERT_EQUAL(acx_future_wait(f, LT_TIMEOUT, NULL, 0, NULL), ACX_ERR_LIBRARY_INFO);
    acx_lib_result_t r;
    ACX_ASSERT_STATUS(acx_lib_result(f, &r), ACX_OK);
    acx_future_release(f);
    CU_ASSERT_EQUAL(r.status, ACX_ERR_LIBRARY_INFO);
    CU_ASSERT_EQUAL(r.library, ACX_LIB_CUSOLVER);
    CU_ASSERT_EQUAL(r.lib_code, 7);
    /* The context carries on: a good matrix next factors fine. */
    spd(A, n, 34, dts[t]);
    lt_write(a, 0, A, (size_t)(n * n));
    ACX_ASSERT_STATUS(acx_solver_potrf(sol, ACX_SOLVER_LOWER, n, a, 0, n, NULL), ACX_OK);
    free(A);
    acx_buffer_release(a);
  }
}

/* LAPACK's row interchanges applied to A, in order. */
static void apply_pivots(double *A, int64_t m, int64_t n, const int64_t *ipiv, int64_t k) {
  for (int64_t i = 0; i < k; i++) {
    int64_t p = ipiv[i] - 1;
    if (p == i) continue;
    for (int64_t j = 0; j < n; j++) {
      double tmp = A[i + j * m];
      A[i + j * m] = A[p + j * m];
      A[p + j * m] = tmp;
    }
  }
}

static void t_getrf_getrs(void) {
  const int64_t n = 83, lda = 85, nrhs = 3;
  for (size_t t = 0; t < 2; t++) {
    acx_dtype_t dt = dts[t];
    double *A = malloc(n * n * 8), *F = malloc(n * n * 8), *L = calloc(n * n, 8), *U = calloc(n * n, 8);
    double *LU = malloc(n * n * 8), *PA = malloc(n * n * 8), *B = malloc(n * nrhs * 8), *X = malloc(n * nrhs * 8);
    lt_random(A, (size_t)(n * n), 40 + t);
    for (int64_t i = 0; i < n; i++) A[i + i * n] *= 4.0; /* well conditioned, pivoting still happens */
    lt_round(A, (size_t)(n * n), dt);
    acx_buffer_t *a = upload(A, n, n, lda, dt), *piv = lt_poisoned(dev, (size_t)n + 1, ACX_DTYPE_I64);
    ACX_ASSERT_STATUS(acx_solver_getrf(sol, n, n, a, 0, lda, piv, 8, NULL), ACX_OK);
    int64_t ip[84];
    lt_read_raw(piv, 0, ip, (size_t)n + 1);
    CU_ASSERT_EQUAL(ip[0], -1); /* the element before the pivots keeps its poison */
    int ok = 1, swaps = 0;
    for (int64_t i = 0; i < n; i++) ok &= ip[i + 1] >= i + 1 && ip[i + 1] <= n, swaps += ip[i + 1] != i + 1;
    CU_ASSERT(ok);
    CU_ASSERT(swaps > 0);
    download(a, F, n, n, lda);
    for (int64_t j = 0; j < n; j++)
      for (int64_t i = 0; i < n; i++) {
        if (i > j) L[i + j * n] = F[i + j * n];
        else U[i + j * n] = F[i + j * n];
        if (i == j) L[i + j * n] = 1.0;
      }
    matmul(0, 0, n, n, n, L, n, U, n, LU);
    memcpy(PA, A, (size_t)(n * n) * 8);
    if (ok) apply_pivots(PA, n, n, ip + 1, n);
    char what[64];
    snprintf(what, sizeof what, "getrf %s: P A = L U", acx_dtype_name(dt));
    LT_CHECK_ERR(what, lt_rel_err(LU, PA, (size_t)(n * n)), tol(dt));
    for (int tr = 0; tr < 2; tr++) {
      lt_random(B, (size_t)(n * nrhs), 50 + t * 2 + (uint64_t)tr);
      lt_round(B, (size_t)(n * nrhs), dt);
      acx_buffer_t *b = upload(B, n, nrhs, n, dt);
      ACX_ASSERT_STATUS(acx_solver_getrs(sol, tr ? ACX_BLAS_T : ACX_BLAS_N, n, nrhs, a, 0, lda, piv, 8, b, 0, n, NULL),
                        ACX_OK);
      download(b, X, n, nrhs, n);
      snprintf(what, sizeof what, "getrs %s %c", acx_dtype_name(dt), tr ? 'T' : 'N');
      LT_CHECK_ERR(what, residual(tr, A, X, B, n, nrhs), tol(dt));
      acx_buffer_release(b);
    }
    free(A), free(F), free(L), free(U), free(LU), free(PA), free(B), free(X);
    acx_buffer_release(a);
    acx_buffer_release(piv);
  }
}

/* A zero column makes U(3, 3) exactly zero: info = 3, the factorisation otherwise done. */
static void t_getrf_singular(void) {
  const int64_t n = 12;
  double A[144];
  lt_random(A, 144, 61);
  for (int64_t i = 0; i < n; i++) A[i + 2 * n] = 0;
  acx_buffer_t *a = upload(A, n, n, n, ACX_DTYPE_F64), *piv = lt_poisoned(dev, (size_t)n, ACX_DTYPE_I64);
  acx_future_t *f = NULL;
  ACX_ASSERT_STATUS(acx_solver_getrf(sol, n, n, a, 0, n, piv, 0, &f), ACX_OK);
  CU_ASSERT_EQUAL(acx_future_wait(f, LT_TIMEOUT, NULL, 0, NULL), ACX_ERR_LIBRARY_INFO);
  acx_lib_result_t r;
  ACX_ASSERT_STATUS(acx_lib_result(f, &r), ACX_OK);
  acx_future_release(f);
  CU_ASSERT_EQUAL(r.library, ACX_LIB_CUSOLVER);
  CU_ASSERT_EQUAL(r.lib_code, 3);
  acx_buffer_release(a);
  acx_buffer_release(piv);
}

static void t_geqrf(void) {
  const int64_t m = 71, n = 43, lda = 75, k = n;
  for (size_t t = 0; t < 2; t++) {
    acx_dtype_t dt = dts[t];
    double *A = malloc(m * n * 8), *F = malloc(m * n * 8), *Q = malloc(m * m * 8), *R = calloc(m * n, 8);
    double *QR = malloc(m * n * 8), tau[44], v[71], w[71];
    lt_random(A, (size_t)(m * n), 70 + t);
    lt_round(A, (size_t)(m * n), dt);
    acx_buffer_t *a = upload(A, m, n, lda, dt), *tb = lt_poisoned(dev, (size_t)k + 1, dt);
    ACX_ASSERT_STATUS(acx_solver_geqrf(sol, m, n, a, 0, lda, tb, 0, NULL), ACX_OK);
    download(a, F, m, n, lda);
    lt_read(tb, 0, tau, (size_t)k + 1);
    CU_ASSERT(isnan(tau[k])); /* only min(m, n) factors are written */
    /* Q = H_1 ... H_k (H_i = I - tau_i v v^T, v_i = 1, v below from F), built by applying the
     * reflectors right to left to the identity. */
    for (int64_t i = 0; i < m * m; i++) Q[i] = 0;
    for (int64_t i = 0; i < m; i++) Q[i + i * m] = 1;
    for (int64_t h = k - 1; h >= 0; h--) {
      for (int64_t i = 0; i < m; i++) v[i] = i < h ? 0 : i == h ? 1 : F[i + h * m];
      for (int64_t j = 0; j < m; j++) {
        double s = 0;
        for (int64_t i = h; i < m; i++) s += v[i] * Q[i + j * m];
        w[j] = s;
      }
      for (int64_t j = 0; j < m; j++)
        for (int64_t i = h; i < m; i++) Q[i + j * m] -= tau[h] * v[i] * w[j];
    }
    for (int64_t j = 0; j < n; j++)
      for (int64_t i = 0; i <= j && i < m; i++) R[i + j * m] = F[i + j * m];
    matmul(0, 0, m, n, m, Q, m, R, m, QR);
    char what[64];
    snprintf(what, sizeof what, "geqrf %s: Q R = A", acx_dtype_name(dt));
    LT_CHECK_ERR(what, lt_rel_err(QR, A, (size_t)(m * n)), tol(dt));
    free(A), free(F), free(Q), free(R), free(QR);
    acx_buffer_release(a);
    acx_buffer_release(tb);
  }
}

/* ||Q^T Q - I||_F for the cols columns of Q (rows x cols). */
static double orth_err(const double *Q, int64_t rows, int64_t cols, int transposed) {
  double e = 0;
  for (int64_t i = 0; i < cols; i++)
    for (int64_t j = 0; j < cols; j++) {
      double s = 0;
      for (int64_t l = 0; l < rows; l++)
        s += transposed ? Q[i + l * cols] * Q[j + l * cols] : Q[l + i * rows] * Q[l + j * rows];
      e += (s - (i == j)) * (s - (i == j));
    }
  return isnan(e) ? INFINITY : sqrt(e);
}

static void t_gesvd(void) {
  const int64_t m = 64, n = 37, lda = 66, ldu = 65, ldvt = 40;
  for (size_t t = 0; t < 2; t++)
    for (int all = 0; all < 2; all++) {
      acx_dtype_t dt = dts[t];
      int64_t ucols = all ? m : n;
      double *A = malloc(m * n * 8), *U = malloc(m * m * 8), *VT = malloc(n * n * 8), S[38], S2[37];
      double *US = malloc(m * n * 8), *USV = malloc(m * n * 8);
      lt_random(A, (size_t)(m * n), 80 + t * 2 + (uint64_t)all);
      lt_round(A, (size_t)(m * n), dt);
      acx_buffer_t *a = upload(A, m, n, lda, dt), *s = lt_poisoned(dev, (size_t)n + 1, dt);
      acx_buffer_t *u = lt_poisoned(dev, (size_t)(ldu * ucols), dt), *vt = lt_poisoned(dev, (size_t)(ldvt * n), dt);
      acx_solver_gesvd_desc_t d = ACX_SOLVER_GESVD_DESC_INIT;
      d.jobu = all ? ACX_SOLVER_SVD_ALL : ACX_SOLVER_SVD_SOME, d.jobvt = ACX_SOLVER_SVD_ALL;
      d.m = m, d.n = n, d.a = a, d.lda = lda, d.s = s, d.u = u, d.ldu = ldu, d.vt = vt, d.ldvt = ldvt;
      ACX_ASSERT_STATUS(acx_solver_gesvd(sol, &d, NULL), ACX_OK);
      lt_read(s, 0, S, (size_t)n + 1);
      download(u, U, m, ucols, ldu);
      download(vt, VT, n, n, ldvt);
      CU_ASSERT(isnan(S[n]));
      int desc = 1;
      for (int64_t i = 0; i + 1 < n; i++) desc &= S[i] >= S[i + 1] && S[i + 1] >= 0;
      CU_ASSERT(desc);
      for (int64_t j = 0; j < n; j++)
        for (int64_t i = 0; i < m; i++) US[i + j * m] = U[i + j * m] * S[j];
      matmul(0, 0, m, n, n, US, m, VT, n, USV);
      char what[64];
      snprintf(what, sizeof what, "gesvd %s %s: U S VT = A", acx_dtype_name(dt), all ? "ALL" : "SOME");
      LT_CHECK_ERR(what, lt_rel_err(USV, A, (size_t)(m * n)), tol(dt));
      snprintf(what, sizeof what, "gesvd %s: U orthonormal", acx_dtype_name(dt));
      LT_CHECK_ERR(what, orth_err(U, m, ucols, 0), 100 * tol(dt));
      snprintf(what, sizeof what, "gesvd %s: VT orthonormal", acx_dtype_name(dt));
      LT_CHECK_ERR(what, orth_err(VT, n, n, 1), 100 * tol(dt));
      /* Values only: the same singular values. */
      acx_buffer_release(a);
      a = upload(A, m, n, lda, dt);
      acx_solver_gesvd_desc_t e = ACX_SOLVER_GESVD_DESC_INIT;
      e.m = m, e.n = n, e.a = a, e.lda = lda, e.s = s;
      ACX_ASSERT_STATUS(acx_solver_gesvd(sol, &e, NULL), ACX_OK);
      lt_read(s, 0, S2, (size_t)n);
      snprintf(what, sizeof what, "gesvd %s: values only", acx_dtype_name(dt));
      LT_CHECK_ERR(what, lt_rel_err(S2, S, (size_t)n), tol(dt));
      free(A), free(U), free(VT), free(US), free(USV);
      acx_buffer_release(a);
      acx_buffer_release(s);
      acx_buffer_release(u);
      acx_buffer_release(vt);
    }
}

static void t_syevd(void) {
  const int64_t n = 59, lda = 61;
  for (size_t t = 0; t < 2; t++)
    for (int up = 0; up < 2; up++) {
      acx_dtype_t dt = dts[t];
      double *A = malloc(n * n * 8), *V = malloc(n * n * 8), *AV = malloc(n * n * 8), *VW = malloc(n * n * 8);
      double W[60], W2[59];
      lt_random(A, (size_t)(n * n), 90 + t * 2 + (uint64_t)up);
      for (int64_t j = 0; j < n; j++)
        for (int64_t i = 0; i < j; i++) A[i + j * n] = A[j + i * n];
      lt_round(A, (size_t)(n * n), dt);
      acx_buffer_t *a = upload(A, n, n, lda, dt), *w = lt_poisoned(dev, (size_t)n + 1, dt);
      acx_solver_uplo_t uplo = up ? ACX_SOLVER_UPPER : ACX_SOLVER_LOWER;
      ACX_ASSERT_STATUS(acx_solver_syevd(sol, 1, uplo, n, a, 0, lda, w, 0, NULL), ACX_OK);
      lt_read(w, 0, W, (size_t)n + 1);
      download(a, V, n, n, lda);
      CU_ASSERT(isnan(W[n]));
      int asc = 1;
      for (int64_t i = 0; i + 1 < n; i++) asc &= W[i] <= W[i + 1];
      CU_ASSERT(asc);
      matmul(0, 0, n, n, n, A, n, V, n, AV);
      for (int64_t j = 0; j < n; j++)
        for (int64_t i = 0; i < n; i++) VW[i + j * n] = V[i + j * n] * W[j];
      char what[64];
      snprintf(what, sizeof what, "syevd %s %s: A V = V W", acx_dtype_name(dt), up ? "upper" : "lower");
      LT_CHECK_ERR(what, lt_rel_err(VW, AV, (size_t)(n * n)), 10 * tol(dt));
      LT_CHECK_ERR("syevd: V orthonormal", orth_err(V, n, n, 0), 100 * tol(dt));
      acx_buffer_release(a);
      a = upload(A, n, n, lda, dt);
      ACX_ASSERT_STATUS(acx_solver_syevd(sol, 0, uplo, n, a, 0, lda, w, 0, NULL), ACX_OK);
      lt_read(w, 0, W2, (size_t)n);
      LT_CHECK_ERR("syevd: values only", lt_rel_err(W2, W, (size_t)n), 10 * tol(dt));
      free(A), free(V), free(AV), free(VW);
      acx_buffer_release(a);
      acx_buffer_release(w);
    }
}

/* Growing workspaces: factorisations of rising and falling sizes queued without waiting (the
 * stream-ordered workspace swap must not pull memory from under queued work). */
static void t_workspace_growth(void) {
  const int64_t ns[] = {16, 700, 64, 1200, 200};
  enum { N = 5 };
  acx_buffer_t *a[N];
  double *A[N];
  acx_future_t *f[N];
  for (int i = 0; i < N; i++) {
    A[i] = malloc((size_t)(ns[i] * ns[i]) * 8);
    spd(A[i], ns[i], 100 + (uint64_t)i, ACX_DTYPE_F64);
    a[i] = upload(A[i], ns[i], ns[i], ns[i], ACX_DTYPE_F64);
  }
  for (int i = 0; i < N; i++)
    ACX_ASSERT_STATUS(acx_solver_potrf(sol, ACX_SOLVER_LOWER, ns[i], a[i], 0, ns[i], &f[i]), ACX_OK);
  for (int i = 0; i < N; i++) {
    ACX_ASSERT_STATUS(acx_future_wait(f[i], LT_TIMEOUT, NULL, 0, NULL), ACX_OK);
    acx_future_release(f[i]);
    int64_t n = ns[i];
    double *F = malloc((size_t)(n * n) * 8), *T = calloc((size_t)(n * n), 8), *LLt = malloc((size_t)(n * n) * 8);
    download(a[i], F, n, n, n);
    for (int64_t j = 0; j < n; j++)
      for (int64_t r = j; r < n; r++) T[r + j * n] = F[r + j * n];
    matmul(0, 1, n, n, n, T, n, T, n, LLt);
    LT_CHECK_ERR("queued potrf", lt_rel_err(LLt, A[i], (size_t)(n * n)), tol(ACX_DTYPE_F64));
    free(F), free(T), free(LLt), free(A[i]);
    acx_buffer_release(a[i]);
  }
}

/* After an executor restart the new incarnation creates its own handles and workspace. */
static void t_restart(void) {
  uint64_t g0;
  ACX_ASSERT_STATUS(acx_device_generation(dev, &g0), ACX_OK);
  ACX_ASSERT_STATUS(acx_device_inject_fault(dev, 0, LT_TIMEOUT), ACX_ERR_DEVICE_LOST);
  wait_generation(g0);
  t_potrf_potrs();
  t_potrf_info();
}

static int setup(void) {
  if (acx_system_create(NULL, &lt_sys) != ACX_OK) return 1;
  dev = unit_mode ? lt_open_host(2) : lt_open_cuda(2);
  return acx_solver_create(dev, NULL, &sol) != ACX_OK;
}

static int teardown(void) {
  int bad = acx_solver_destroy(sol) != ACX_OK;
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
  static const acx_test_case_t unit_cases[] = {ACX_TEST(t_create), ACX_TEST(t_factor_validation),
                                               ACX_TEST(t_gesvd_validation), ACX_TEST(t_stale), ACX_TEST_END};
  static const acx_test_case_t gpu_cases[] = {
      ACX_TEST(t_potrf_potrs), ACX_TEST(t_potrf_info), ACX_TEST(t_getrf_getrs),      ACX_TEST(t_getrf_singular),
      ACX_TEST(t_geqrf),       ACX_TEST(t_gesvd),      ACX_TEST(t_syevd),            ACX_TEST(t_workspace_growth),
      ACX_TEST(t_restart),     ACX_TEST_END};
  if (!unit_mode && access("/dev/nvidiactl", F_OK) != 0) acx_test_skip("no GPU on this machine");
  return acx_test_run(unit_mode ? "lib_solver_unit" : "lib_solver", unit_mode ? unit_cases : gpu_cases, setup,
                      teardown);
}
