/* cuSPARSE through acx (runtime/libs/lib_sparse.c, lib_sparse_exec.c).
 * Default (label gpu): CSR SpMV and SpMM (both transposes, i32 base 0 and i64 base 1 indices, f32
 * and f64, beta != 0, padded leading dimensions with the padding checked untouched) against
 * double-precision references on random sparse matrices; a restarted executor makes new handles.
 * --unit (label unit): validation on a host-kind device. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acx/sparse.h"
#include "acx_test.h"
#include "lib_test_util.h"

static acx_device_t *dev;
static acx_sparse_t *sp;
static int unit_mode;

static acx_buffer_t *alloc(size_t elems, acx_dtype_t dt) {
  acx_buffer_t *b = NULL;
  ACX_ASSERT_STATUS(acx_buffer_alloc(dev, elems * acx_dtype_size(dt), dt, ACX_MEM_DEVICE, LT_TIMEOUT, &b), ACX_OK);
  return b;
}

/* ------------------------------------------------------------------------------------------ */
/* validation (host kind)                                                                      */

static void t_validation(void) {
  const int64_t rows = 10, cols = 8, nnz = 20;
  acx_buffer_t *ro = alloc(rows + 1, ACX_DTYPE_I32), *ci = alloc(nnz, ACX_DTYPE_I32), *v = alloc(nnz, ACX_DTYPE_F64);
  acx_buffer_t *ro64 = alloc(rows + 1, ACX_DTYPE_I64), *v32 = alloc(nnz, ACX_DTYPE_F32);
  acx_buffer_t *x = alloc(rows, ACX_DTYPE_F64), *y = alloc(rows, ACX_DTYPE_F64), *x32 = alloc(rows, ACX_DTYPE_F32);
  acx_buffer_t *b = alloc(cols * 4, ACX_DTYPE_F64), *c = alloc(rows * 4, ACX_DTYPE_F64);
  acx_sparse_csr_t a = {.rows = rows, .cols = cols, .nnz = nnz, .row_offsets = ro, .col_indices = ci, .values = v};
  ACX_ASSERT_STATUS(acx_sparse_spmv(sp, ACX_BLAS_N, 1, &a, x, 0, 0, y, 0, NULL), ACX_ERR_NOT_SUPPORTED);
  ACX_ASSERT_STATUS(acx_sparse_spmv(sp, ACX_BLAS_T, 1, &a, x, 0, 0, y, 0, NULL), ACX_ERR_NOT_SUPPORTED);
  ACX_ASSERT_STATUS(acx_sparse_spmv(NULL, ACX_BLAS_N, 1, &a, x, 0, 0, y, 0, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_sparse_spmv(sp, ACX_BLAS_N, 1, NULL, x, 0, 0, y, 0, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_sparse_spmv(sp, (acx_blas_op_t)4, 1, &a, x, 0, 0, y, 0, NULL), ACX_ERR_INVALID_ARG);
  acx_sparse_csr_t e = a;
  e.nnz = rows * cols + 1;
  ACX_ASSERT_STATUS(acx_sparse_spmv(sp, ACX_BLAS_N, 1, &e, x, 0, 0, y, 0, NULL), ACX_ERR_INVALID_ARG);
  e = a, e.nnz = nnz + 1; /* arrays too small */
  ACX_ASSERT_STATUS(acx_sparse_spmv(sp, ACX_BLAS_N, 1, &e, x, 0, 0, y, 0, NULL), ACX_ERR_OUT_OF_RANGE);
  e = a, e.rows = rows + 1, e.nnz = nnz;
  ACX_ASSERT_STATUS(acx_sparse_spmv(sp, ACX_BLAS_N, 1, &e, x, 0, 0, y, 0, NULL), ACX_ERR_OUT_OF_RANGE);
  e = a, e.base = 2;
  ACX_ASSERT_STATUS(acx_sparse_spmv(sp, ACX_BLAS_N, 1, &e, x, 0, 0, y, 0, NULL), ACX_ERR_INVALID_ARG);
  e = a, e.rows = -1;
  ACX_ASSERT_STATUS(acx_sparse_spmv(sp, ACX_BLAS_N, 1, &e, x, 0, 0, y, 0, NULL), ACX_ERR_INVALID_ARG);
  e = a, e.row_offsets = ro64; /* index types differ */
  ACX_ASSERT_STATUS(acx_sparse_spmv(sp, ACX_BLAS_N, 1, &e, x, 0, 0, y, 0, NULL), ACX_ERR_BAD_DTYPE);
  e = a, e.values = ci;
  ACX_ASSERT_STATUS(acx_sparse_spmv(sp, ACX_BLAS_N, 1, &e, x, 0, 0, y, 0, NULL), ACX_ERR_BAD_DTYPE);
  e = a, e.values = v32; /* dense operands are f64 */
  ACX_ASSERT_STATUS(acx_sparse_spmv(sp, ACX_BLAS_N, 1, &e, x, 0, 0, y, 0, NULL), ACX_ERR_BAD_DTYPE);
  e = a, e.row_offsets = NULL;
  ACX_ASSERT_STATUS(acx_sparse_spmv(sp, ACX_BLAS_N, 1, &e, x, 0, 0, y, 0, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_sparse_spmv(sp, ACX_BLAS_N, 1, &a, x32, 0, 0, y, 0, NULL), ACX_ERR_BAD_DTYPE);
  ACX_ASSERT_STATUS(acx_sparse_spmv(sp, ACX_BLAS_N, 1, &a, x, 16, 0, y, 0, NULL), ACX_ERR_NOT_SUPPORTED); /* 8 of 10 */
  ACX_ASSERT_STATUS(acx_sparse_spmv(sp, ACX_BLAS_N, 1, &a, x, 0, 0, y, 8, NULL), ACX_ERR_OUT_OF_RANGE);
  ACX_ASSERT_STATUS(acx_sparse_spmv(sp, ACX_BLAS_N, 1, &a, x, 0, 0, x, 0, NULL), ACX_ERR_INVALID_ARG); /* y over x */
  ACX_ASSERT_STATUS(acx_sparse_spmv(sp, ACX_BLAS_N, 1, &a, x, 0, 0, v, 0, NULL), ACX_ERR_INVALID_ARG); /* y over A */
  /* SpMM */
  ACX_ASSERT_STATUS(acx_sparse_spmm(sp, ACX_BLAS_N, 4, 1, &a, b, 0, cols, 0, c, 0, rows, NULL), ACX_ERR_NOT_SUPPORTED);
  ACX_ASSERT_STATUS(acx_sparse_spmm(sp, ACX_BLAS_N, 5, 1, &a, b, 0, cols, 0, c, 0, rows, NULL), ACX_ERR_OUT_OF_RANGE);
  ACX_ASSERT_STATUS(acx_sparse_spmm(sp, ACX_BLAS_N, 4, 1, &a, b, 0, cols - 1, 0, c, 0, rows, NULL),
                    ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_sparse_spmm(sp, ACX_BLAS_T, 4, 1, &a, b, 0, rows, 0, c, 0, cols, NULL), ACX_ERR_OUT_OF_RANGE);
  ACX_ASSERT_STATUS(acx_sparse_spmm(sp, ACX_BLAS_T, 3, 1, &a, c, 0, rows, 0, b, 0, cols, NULL), ACX_ERR_NOT_SUPPORTED);
  ACX_ASSERT_STATUS(acx_sparse_spmm(sp, ACX_BLAS_N, -1, 1, &a, b, 0, cols, 0, c, 0, rows, NULL), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_sparse_spmm(sp, ACX_BLAS_N, 2, 1, &a, b, 0, cols, 0, b, 64, rows, NULL), ACX_ERR_INVALID_ARG);
  acx_buffer_t *all[] = {ro, ci, v, ro64, v32, x, y, x32, b, c};
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
  acx_buffer_t *ro = alloc(3, ACX_DTYPE_I32), *ci = alloc(2, ACX_DTYPE_I32), *v = alloc(2, ACX_DTYPE_F32);
  acx_buffer_t *x = alloc(2, ACX_DTYPE_F32), *y = alloc(2, ACX_DTYPE_F32);
  uint64_t g0;
  ACX_ASSERT_STATUS(acx_device_generation(dev, &g0), ACX_OK);
  ACX_ASSERT_STATUS(acx_device_inject_fault(dev, 0, LT_TIMEOUT), ACX_ERR_DEVICE_LOST);
  wait_generation(g0);
  acx_sparse_csr_t a = {.rows = 2, .cols = 2, .nnz = 2, .row_offsets = ro, .col_indices = ci, .values = v};
  ACX_ASSERT_STATUS(acx_sparse_spmv(sp, ACX_BLAS_N, 1, &a, x, 0, 0, y, 0, NULL), ACX_ERR_STALE_BUFFER);
  acx_buffer_t *all[] = {ro, ci, v, x, y};
  for (size_t i = 0; i < 5; i++) acx_buffer_release(all[i]);
}

/* ------------------------------------------------------------------------------------------ */
/* GPU                                                                                        */

typedef struct host_csr {
  int64_t rows, cols, nnz;
  int64_t *ro, *ci; /* 0-based */
  double *val;
} host_csr_t;

/* About 6% of the entries, at least one per row except every 7th row (empty rows are legal). */
static host_csr_t make_csr(int64_t rows, int64_t cols, uint64_t seed, acx_dtype_t dt) {
  host_csr_t h = {.rows = rows, .cols = cols};
  h.ro = malloc((size_t)(rows + 1) * 8);
  h.ci = malloc((size_t)(rows * cols) * 8);
  h.val = malloc((size_t)(rows * cols) * 8);
  double *u = malloc((size_t)(rows * cols) * 8);
  lt_random(u, (size_t)(rows * cols), seed);
  h.ro[0] = 0;
  for (int64_t i = 0; i < rows; i++) {
    for (int64_t j = 0; j < cols; j++) {
      double r = fabs(u[i * cols + j]); /* [1/8, 1] */
      if (i % 7 != 3 && (r < 0.18 || j == (i * 5) % cols)) {
        h.ci[h.nnz] = j;
        h.val[h.nnz] = u[(i * cols + j + 1) % (rows * cols)];
        h.nnz++;
      }
    }
    h.ro[i + 1] = h.nnz;
  }
  lt_round(h.val, (size_t)h.nnz, dt);
  free(u);
  return h;
}

static void free_csr(host_csr_t *h) {
  free(h->ro);
  free(h->ci);
  free(h->val);
}

/* Device arrays of h with index dtype it and base. */
static acx_sparse_csr_t upload_csr(const host_csr_t *h, acx_dtype_t it, int base, acx_dtype_t dt) {
  acx_sparse_csr_t a = {.rows = h->rows, .cols = h->cols, .nnz = h->nnz, .base = base};
  double *ro = malloc((size_t)(h->rows + 1) * 8), *ci = malloc((size_t)h->nnz * 8 + 8);
  for (int64_t i = 0; i <= h->rows; i++) ro[i] = (double)(h->ro[i] + base);
  for (int64_t i = 0; i < h->nnz; i++) ci[i] = (double)(h->ci[i] + base);
  a.row_offsets = lt_poisoned(dev, (size_t)h->rows + 1, it);
  a.col_indices = lt_poisoned(dev, (size_t)h->nnz, it);
  a.values = lt_poisoned(dev, (size_t)h->nnz, dt);
  /* lt_write converts doubles to the buffer's dtype (i32 among them); i64 goes as raw bytes. */
  if (it == ACX_DTYPE_I64) {
    int64_t *r64 = malloc((size_t)(h->rows + 1) * 8), *c64 = malloc((size_t)h->nnz * 8 + 8);
    for (int64_t i = 0; i <= h->rows; i++) r64[i] = h->ro[i] + base;
    for (int64_t i = 0; i < h->nnz; i++) c64[i] = h->ci[i] + base;
    ACX_ASSERT_STATUS(acx_buffer_write(a.row_offsets, 0, r64, (size_t)(h->rows + 1) * 8, 0, LT_TIMEOUT), ACX_OK);
    ACX_ASSERT_STATUS(acx_buffer_write(a.col_indices, 0, c64, (size_t)h->nnz * 8, 0, LT_TIMEOUT), ACX_OK);
    free(r64);
    free(c64);
  } else {
    lt_write(a.row_offsets, 0, ro, (size_t)h->rows + 1);
    lt_write(a.col_indices, 0, ci, (size_t)h->nnz);
  }
  lt_write(a.values, 0, h->val, (size_t)h->nnz);
  free(ro);
  free(ci);
  return a;
}

static void release_csr(acx_sparse_csr_t *a) {
  acx_buffer_release(a->row_offsets);
  acx_buffer_release(a->col_indices);
  acx_buffer_release(a->values);
}

/* out (m x n) = op(A) X (k x n, ldx), column-major. */
static void ref_spmm(const host_csr_t *h, int t, const double *X, int64_t ldx, int64_t n, double *out) {
  int64_t m = t ? h->cols : h->rows;
  for (int64_t i = 0; i < m * n; i++) out[i] = 0;
  for (int64_t j = 0; j < n; j++)
    for (int64_t r = 0; r < h->rows; r++)
      for (int64_t p = h->ro[r]; p < h->ro[r + 1]; p++) {
        int64_t col = h->ci[p];
        if (t) out[col + j * m] += h->val[p] * X[r + j * ldx];
        else out[r + j * m] += h->val[p] * X[col + j * ldx];
      }
}

static void t_spmv(void) {
  const acx_dtype_t dts[] = {ACX_DTYPE_F64, ACX_DTYPE_F32};
  uint64_t seed = 10;
  for (int d = 0; d < 2; d++)
    for (int ix = 0; ix < 2; ix++)
      for (int t = 0; t < 2; t++) {
        acx_dtype_t dt = dts[d], it = ix ? ACX_DTYPE_I64 : ACX_DTYPE_I32;
        host_csr_t h = make_csr(301, 203, seed++, dt);
        acx_sparse_csr_t a = upload_csr(&h, it, ix, dt);
        int64_t nx = t ? h.rows : h.cols, ny = t ? h.cols : h.rows;
        double *X = malloc((size_t)nx * 8), *Y = malloc((size_t)ny * 8), *ref = malloc((size_t)ny * 8);
        double *got = malloc((size_t)(ny + 1) * 8);
        lt_random(X, (size_t)nx, seed++);
        lt_random(Y, (size_t)ny, seed++);
        lt_round(X, (size_t)nx, dt);
        lt_round(Y, (size_t)ny, dt);
        acx_buffer_t *x = lt_poisoned(dev, (size_t)nx, dt), *y = lt_poisoned(dev, (size_t)ny + 1, dt);
        lt_write(x, 0, X, (size_t)nx);
        lt_write(y, 0, Y, (size_t)ny);
        ACX_ASSERT_STATUS(acx_sparse_spmv(sp, t ? ACX_BLAS_T : ACX_BLAS_N, 1.5, &a, x, 0, -0.5, y, 0, NULL), ACX_OK);
        ref_spmm(&h, t, X, nx, 1, ref);
        for (int64_t i = 0; i < ny; i++) ref[i] = 1.5 * ref[i] - 0.5 * Y[i];
        lt_read(y, 0, got, (size_t)ny + 1);
        char what[96];
        snprintf(what, sizeof what, "spmv %s %s base %d %c (nnz %lld)", acx_dtype_name(dt), acx_dtype_name(it), ix,
                 t ? 'T' : 'N', (long long)h.nnz);
        LT_CHECK_ERR(what, lt_rel_err(got, ref, (size_t)ny), dt == ACX_DTYPE_F64 ? 1e-13 : 1e-5);
        CU_ASSERT(isnan(got[ny])); /* past y: untouched */
        free(X), free(Y), free(ref), free(got);
        acx_buffer_release(x);
        acx_buffer_release(y);
        release_csr(&a);
        free_csr(&h);
      }
}

static void t_spmm(void) {
  const acx_dtype_t dts[] = {ACX_DTYPE_F64, ACX_DTYPE_F32};
  const int64_t n = 7;
  uint64_t seed = 100;
  for (int d = 0; d < 2; d++)
    for (int ix = 0; ix < 2; ix++)
      for (int t = 0; t < 2; t++) {
        acx_dtype_t dt = dts[d], it = ix ? ACX_DTYPE_I64 : ACX_DTYPE_I32;
        host_csr_t h = make_csr(157, 211, seed++, dt);
        acx_sparse_csr_t a = upload_csr(&h, it, ix, dt);
        int64_t m = t ? h.cols : h.rows, k = t ? h.rows : h.cols, ldb = k + 3, ldc = m + 5;
        double *B = malloc((size_t)(ldb * n) * 8), *C = malloc((size_t)(ldc * n) * 8), *ref = malloc((size_t)(m * n) * 8);
        double *got = malloc((size_t)(ldc * n) * 8), *out = malloc((size_t)(m * n) * 8);
        lt_random(B, (size_t)(ldb * n), seed++);
        lt_random(C, (size_t)(ldc * n), seed++);
        lt_round(B, (size_t)(ldb * n), dt);
        lt_round(C, (size_t)(ldc * n), dt);
        acx_buffer_t *b = lt_poisoned(dev, (size_t)(ldb * n), dt), *c = lt_poisoned(dev, (size_t)(ldc * n), dt);
        lt_write(b, 0, B, (size_t)(ldb * n));
        for (int64_t j = 0; j < n; j++) lt_write(c, (size_t)(j * ldc), C + j * ldc, (size_t)m);
        ACX_ASSERT_STATUS(acx_sparse_spmm(sp, t ? ACX_BLAS_T : ACX_BLAS_N, n, 2.0, &a, b, 0, ldb, 0.25, c, 0, ldc, NULL),
                          ACX_OK);
        ref_spmm(&h, t, B, ldb, n, ref);
        lt_read(c, 0, got, (size_t)(ldc * n));
        int pad_ok = 1;
        for (int64_t j = 0; j < n; j++)
          for (int64_t i = 0; i < ldc; i++) {
            if (i < m) {
              ref[i + j * m] = 2.0 * ref[i + j * m] + 0.25 * C[i + j * ldc];
              out[i + j * m] = got[i + j * ldc];
            } else {
              pad_ok &= isnan(got[i + j * ldc]);
            }
          }
        char what[96];
        snprintf(what, sizeof what, "spmm %s %s base %d %c", acx_dtype_name(dt), acx_dtype_name(it), ix, t ? 'T' : 'N');
        LT_CHECK_ERR(what, lt_rel_err(out, ref, (size_t)(m * n)), dt == ACX_DTYPE_F64 ? 1e-13 : 1e-5);
        CU_ASSERT(pad_ok);
        free(B), free(C), free(ref), free(got), free(out);
        acx_buffer_release(b);
        acx_buffer_release(c);
        release_csr(&a);
        free_csr(&h);
      }
}

static void t_restart(void) {
  uint64_t g0;
  ACX_ASSERT_STATUS(acx_device_generation(dev, &g0), ACX_OK);
  ACX_ASSERT_STATUS(acx_device_inject_fault(dev, 0, LT_TIMEOUT), ACX_ERR_DEVICE_LOST);
  wait_generation(g0);
  t_spmv();
}

static int setup(void) {
  if (acx_system_create(NULL, &lt_sys) != ACX_OK) return 1;
  dev = unit_mode ? lt_open_host(2) : lt_open_cuda(2);
  return acx_sparse_create(dev, NULL, &sp) != ACX_OK;
}

static int teardown(void) {
  int bad = acx_sparse_destroy(sp) != ACX_OK;
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
  static const acx_test_case_t unit_cases[] = {ACX_TEST(t_validation), ACX_TEST(t_stale), ACX_TEST_END};
  static const acx_test_case_t gpu_cases[] = {ACX_TEST(t_spmv), ACX_TEST(t_spmm), ACX_TEST(t_restart), ACX_TEST_END};
  if (!unit_mode && access("/dev/nvidiactl", F_OK) != 0) acx_test_skip("no GPU on this machine");
  return acx_test_run(unit_mode ? "lib_sparse_unit" : "lib_sparse", unit_mode ? unit_cases : gpu_cases, setup,
                      teardown);
}
