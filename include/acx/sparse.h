/* cuSPARSE through acx: a CSR matrix times a dense vector (SpMV) or a dense column-major matrix
 * (SpMM), through cuSPARSE's generic API (each call's work buffer sized by its _bufferSize and
 * taken from the executor's per-stream library workspace).
 *
 * A CSR matrix lives in three acx buffers: row offsets (rows + 1 entries) and column indices (nnz
 * entries), both i32 or both i64, and values (nnz entries, f32 or f64, the dense operands' dtype).
 * acx checks every buffer's dtype, generation and extent, but not the index *contents* (they are
 * on the device): offsets must be non-decreasing from `base` to nnz + base and column indices in
 * [base, cols + base). Malformed indices make cuSPARSE read outside the arrays, which may fault the
 * executor: with the process transport the device restarts (ACX_ERR_DEVICE_LOST), see
 * docs/fault-model.md.
 *
 * Threads and completion as in acx/lib.h. Statuses besides those of acx/lib.h and acx/device.h:
 * ACX_ERR_NULL_ARG, ACX_ERR_INVALID_ARG (dimensions, nnz, base, operation, leading dimension,
 * overlapping operands: the log names the argument), ACX_ERR_BAD_DTYPE, ACX_ERR_OUT_OF_RANGE,
 * ACX_ERR_OVERFLOW, ACX_ERR_STALE_BUFFER, ACX_ERR_INVALID_STATE, ACX_ERR_NOT_SUPPORTED (host
 * kind), ACX_ERR_LIBRARY (cusparseStatus_t in lib_code), ACX_ERR_DEVICE_OOM. */
#ifndef ACX_SPARSE_H
#define ACX_SPARSE_H

/* Exported from libacx, which hides everything else (cmake/libacx.map). */
#pragma GCC visibility push(default)

#include "acx/blas.h"
#include "acx/lib.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct acx_sparse acx_sparse_t;

/* A CSR matrix of rows x cols with nnz stored entries (a plain description: it holds no
 * references; the buffers must stay alive until the requests that use it complete). */
typedef struct acx_sparse_csr {
  int64_t rows, cols, nnz;
  int base;                  /* index base: 0 (C) or 1 (Fortran) */
  acx_buffer_t *row_offsets; /* i32 or i64, rows + 1 entries */
  size_t row_offsets_offset;
  acx_buffer_t *col_indices; /* the row offsets' dtype, nnz entries */
  size_t col_indices_offset;
  acx_buffer_t *values;      /* f32 or f64, nnz entries */
  size_t values_offset;
} acx_sparse_csr_t;

/* Creates a cuSPARSE context. Statuses as acx_blas_create. */
acx_status_t acx_sparse_create(acx_device_t *dev, const acx_lib_config_t *cfg, acx_sparse_t **sp);
/* As acx_blas_destroy. */
acx_status_t acx_sparse_destroy(acx_sparse_t *sp);

/* y = alpha op(A) x + beta y. x has cols elements (rows with trans = T), y the other count;
 * contiguous; x, y and A's values share the dtype. */
acx_status_t acx_sparse_spmv(acx_sparse_t *sp, acx_blas_op_t trans, double alpha, const acx_sparse_csr_t *a,
                             acx_buffer_t *x, size_t x_offset, double beta, acx_buffer_t *y, size_t y_offset,
                             acx_future_t **done);

/* C = alpha op(A) B + beta C with op(A) m x k: B dense k x n (ldb >= max(1, k)), C dense m x n
 * (ldc >= max(1, m)), both column-major, of the values' dtype; n >= 0. */
acx_status_t acx_sparse_spmm(acx_sparse_t *sp, acx_blas_op_t trans, int64_t n, double alpha, const acx_sparse_csr_t *a,
                             acx_buffer_t *b, size_t b_offset, int64_t ldb, double beta, acx_buffer_t *c,
                             size_t c_offset, int64_t ldc, acx_future_t **done);

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif
