/* cuBLAS through acx: dense linear algebra on acx buffers. Matrices are column-major, as in
 * cuBLAS and Fortran; leading dimensions, increments, strides and dimensions are in elements,
 * buffer offsets in bytes (multiples of the element size). The operands' dtype is their
 * buffers' dtype; all operands of one call share it.
 *
 * Threads: any thread may call any function; requests of one context run in the order they were
 * queued, on the context's stream. Completion: see acx/lib.h (done == NULL waits).
 * Statuses of every request, besides its own: ACX_ERR_NULL_ARG, ACX_ERR_INVALID_ARG (a dimension,
 * leading dimension, increment or transpose is out of its domain: the log names it),
 * ACX_ERR_BAD_DTYPE, ACX_ERR_OUT_OF_RANGE (a buffer is too small for the operand it holds),
 * ACX_ERR_OVERFLOW, ACX_ERR_STALE_BUFFER (a buffer of an earlier executor generation),
 * ACX_ERR_INVALID_STATE (a freed buffer, a closed device), ACX_ERR_NOT_SUPPORTED (a valid request
 * on a device of the host kind), ACX_ERR_LIBRARY (cuBLAS failed: acx_lib_result's lib_code is the
 * cublasStatus_t), the device statuses of acx/device.h (ACX_ERR_DEVICE_LOST, ACX_ERR_TIMEOUT,
 * ACX_ERR_QUEUE_FULL, ...). */
#ifndef ACX_BLAS_H
#define ACX_BLAS_H

/* Exported from libacx, which hides everything else (cmake/libacx.map). */
#pragma GCC visibility push(default)

#include "acx/lib.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct acx_blas acx_blas_t;

typedef enum acx_blas_op {
  ACX_BLAS_N = 0, /* op(X) = X */
  ACX_BLAS_T = 1  /* op(X) = X^T */
} acx_blas_op_t;

/* How GEMM accumulates. DEFAULT: f64 in f64, everything else in f32 (f16/bf16 inputs and
 * outputs, f32 accumulation and scalars). The FAST modes let f32 GEMMs use tensor cores with
 * reduced-precision inputs (f32 operands only). */
typedef enum acx_blas_compute {
  ACX_BLAS_COMPUTE_DEFAULT = 0,
  ACX_BLAS_COMPUTE_F32_FAST_TF32 = 1,
  ACX_BLAS_COMPUTE_F32_FAST_BF16 = 2,
  ACX_BLAS_COMPUTE_F32_FAST_F16 = 3
} acx_blas_compute_t;

/* Creates a cuBLAS context on dev (an actor under the DeviceActor). cfg may be NULL. Statuses:
 * ACX_ERR_INVALID_ARG (cfg->stream out of range), ACX_ERR_INVALID_STATE (dev closed),
 * ACX_ERR_NAME_TAKEN, those of acx_host_alloc. Not from a worker thread of the actor system. */
acx_status_t acx_blas_create(acx_device_t *dev, const acx_lib_config_t *cfg, acx_blas_t **blas);
/* Waits for the context's outstanding requests (up to its timeout), then frees it. NULL is
 * ignored. ACX_ERR_TIMEOUT when some were still outstanding (their futures stay valid). */
acx_status_t acx_blas_destroy(acx_blas_t *blas);

/* C[b] = alpha op(A[b]) op(B[b]) + beta C[b] for b < batch, where op(A) is m x k, op(B) k x n and
 * C m x n. A is m x k (lda >= m) when transa = N, else k x m (lda >= k); likewise B. batch = 1 is
 * a plain GEMM (strides ignored); batch > 1 uses the strides (elements, >= 0) between matrices.
 * Dtypes: f64, f32, f16, bf16 (all three alike). */
typedef struct acx_blas_gemm_desc {
  size_t size; /* sizeof(acx_blas_gemm_desc_t): set by ACX_BLAS_GEMM_DESC_INIT */
  acx_blas_op_t transa, transb;
  int64_t m, n, k;
  double alpha, beta;
  acx_buffer_t *a;
  size_t a_offset;
  int64_t lda, stride_a;
  acx_buffer_t *b;
  size_t b_offset;
  int64_t ldb, stride_b;
  acx_buffer_t *c;
  size_t c_offset;
  int64_t ldc, stride_c;
  int64_t batch;              /* >= 1 */
  acx_blas_compute_t compute;
} acx_blas_gemm_desc_t;

#define ACX_BLAS_GEMM_DESC_INIT {.size = sizeof(acx_blas_gemm_desc_t), .alpha = 1.0, .beta = 0.0, .batch = 1}

acx_status_t acx_blas_gemm(acx_blas_t *blas, const acx_blas_gemm_desc_t *desc, acx_future_t **done);

/* y = alpha op(A) x + beta y, A m x n (lda >= m); x has n elements (m when trans = T), y the
 * other count; increments > 0. Dtypes f32, f64. */
acx_status_t acx_blas_gemv(acx_blas_t *blas, acx_blas_op_t trans, int64_t m, int64_t n, double alpha,
                           acx_buffer_t *a, size_t a_offset, int64_t lda, acx_buffer_t *x, size_t x_offset,
                           int64_t incx, double beta, acx_buffer_t *y, size_t y_offset, int64_t incy,
                           acx_future_t **done);

/* Level 1 on strided vectors of n elements (increments > 0: acx leaves out BLAS's negative
 * increments, whose corner cases differ between implementations). Dtypes f32, f64, f16, bf16 (f16/bf16 computed in f32). */

/* y = alpha x + y. */
acx_status_t acx_blas_axpy(acx_blas_t *blas, int64_t n, double alpha, acx_buffer_t *x, size_t x_offset,
                           int64_t incx, acx_buffer_t *y, size_t y_offset, int64_t incy, acx_future_t **done);
/* x = alpha x. */
acx_status_t acx_blas_scal(acx_blas_t *blas, int64_t n, double alpha, acx_buffer_t *x, size_t x_offset,
                           int64_t incx, acx_future_t **done);
/* x . y. The result goes to `result` at result_offset (one element of the operands' dtype,
 * written on the device, nothing read back) when result is not NULL; else it comes back with the
 * reply: *value (done == NULL; value may then not be NULL) or acx_lib_result(*done).value. */
acx_status_t acx_blas_dot(acx_blas_t *blas, int64_t n, acx_buffer_t *x, size_t x_offset, int64_t incx,
                          acx_buffer_t *y, size_t y_offset, int64_t incy, acx_buffer_t *result,
                          size_t result_offset, double *value, acx_future_t **done);
/* ||x||_2, returned as acx_blas_dot returns its result. */
acx_status_t acx_blas_nrm2(acx_blas_t *blas, int64_t n, acx_buffer_t *x, size_t x_offset, int64_t incx,
                           acx_buffer_t *result, size_t result_offset, double *value, acx_future_t **done);

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif
