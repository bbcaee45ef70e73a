/* cuSOLVER (dense) through acx: Cholesky, LU and QR factorisations, the solves that use them, the
 * SVD and the symmetric eigensolver, on acx buffers. Column-major, as cuSOLVER and LAPACK;
 * dimensions and leading dimensions in elements, buffer offsets in bytes (multiples of the element
 * size). Matrices, tau, singular values and eigenvalues share one dtype, f32 or f64; LU pivots are
 * i64 (1-based, LAPACK's convention). The executor sizes each call's workspace with cuSOLVER's
 * *_bufferSize and keeps one growing workspace per stream (per executor incarnation).
 *
 * Every call returns cuSOLVER's `info`: 0 is ACX_OK; info != 0 completes the request with
 * ACX_ERR_LIBRARY_INFO and acx_lib_result()'s lib_code = info (library ACX_LIB_CUSOLVER), e.g.
 * potrf: the leading minor of order info is not positive definite; getrf: U(info, info) is exactly
 * zero; gesvd: info superdiagonals did not converge; syevd: info off-diagonal elements did not
 * converge. With done == NULL the call returns that status directly.
 *
 * Threads and completion as in acx/lib.h. Statuses besides those of acx/lib.h and acx/device.h:
 * ACX_ERR_NULL_ARG, ACX_ERR_INVALID_ARG (dimension, leading dimension, uplo/trans/job out of their
 * domain: the log names the argument), ACX_ERR_BAD_DTYPE, ACX_ERR_OUT_OF_RANGE (a buffer too small
 * for its operand), ACX_ERR_OVERFLOW, ACX_ERR_STALE_BUFFER, ACX_ERR_INVALID_STATE (a freed buffer,
 * a closed device), ACX_ERR_NOT_SUPPORTED (a valid request on a device of the host kind),
 * ACX_ERR_LIBRARY_INFO, ACX_ERR_LIBRARY (cusolverStatus_t in lib_code), ACX_ERR_DEVICE_OOM (no
 * device memory for the workspace). */
#ifndef ACX_SOLVER_H
#define ACX_SOLVER_H

/* Exported from libacx, which hides everything else (cmake/libacx.map). */
#pragma GCC visibility push(default)

#include "acx/blas.h"
#include "acx/lib.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct acx_solver acx_solver_t;

/* Which triangle of a symmetric matrix is referenced (and, for potrf, overwritten). */
typedef enum acx_solver_uplo {
  ACX_SOLVER_LOWER = 0,
  ACX_SOLVER_UPPER = 1
} acx_solver_uplo_t;

/* Which singular vectors gesvd computes. */
typedef enum acx_solver_svd_job {
  ACX_SOLVER_SVD_NONE = 0, /* none (U / VT may be NULL) */
  ACX_SOLVER_SVD_SOME = 1, /* the first min(m, n) columns of U (rows of VT) */
  ACX_SOLVER_SVD_ALL = 2   /* all m columns of U (all n rows of VT) */
} acx_solver_svd_job_t;

/* Creates a cuSOLVER context. Statuses as acx_blas_create. */
acx_status_t acx_solver_create(acx_device_t *dev, const acx_lib_config_t *cfg, acx_solver_t **solver);
/* As acx_blas_destroy. */
acx_status_t acx_solver_destroy(acx_solver_t *solver);

/* Cholesky: A = L L^T (lower) or U^T U (upper), A n x n (lda >= max(1, n)); the factor overwrites
 * the `uplo` triangle, the other triangle is not referenced. info > 0: not positive definite. */
acx_status_t acx_solver_potrf(acx_solver_t *solver, acx_solver_uplo_t uplo, int64_t n, acx_buffer_t *a,
                              size_t a_offset, int64_t lda, acx_future_t **done);
/* Solves A X = B with potrf's factor of A; B n x nrhs (ldb >= max(1, n)) is overwritten by X. */
acx_status_t acx_solver_potrs(acx_solver_t *solver, acx_solver_uplo_t uplo, int64_t n, int64_t nrhs,
                              acx_buffer_t *a, size_t a_offset, int64_t lda, acx_buffer_t *b, size_t b_offset,
                              int64_t ldb, acx_future_t **done);
/* LU with partial pivoting: P A = L U, A m x n overwritten by L (unit diagonal, not stored) and U;
 * ipiv (i64, min(m, n) elements) receives the 1-based row interchanges. info > 0: U is singular
 * (the factorisation itself completed). */
acx_status_t acx_solver_getrf(acx_solver_t *solver, int64_t m, int64_t n, acx_buffer_t *a, size_t a_offset,
                              int64_t lda, acx_buffer_t *ipiv, size_t ipiv_offset, acx_future_t **done);
/* Solves op(A) X = B with getrf's factors of the n x n matrix A and its pivots; B n x nrhs is
 * overwritten by X. trans: ACX_BLAS_N or ACX_BLAS_T. */
acx_status_t acx_solver_getrs(acx_solver_t *solver, acx_blas_op_t trans, int64_t n, int64_t nrhs, acx_buffer_t *a,
                              size_t a_offset, int64_t lda, acx_buffer_t *ipiv, size_t ipiv_offset, acx_buffer_t *b,
                              size_t b_offset, int64_t ldb, acx_future_t **done);
/* QR: A = Q R, A m x n overwritten by R (upper triangle) and the Householder vectors below it;
 * tau (min(m, n) elements, A's dtype) receives their scalar factors (LAPACK's representation). */
acx_status_t acx_solver_geqrf(acx_solver_t *solver, int64_t m, int64_t n, acx_buffer_t *a, size_t a_offset,
                              int64_t lda, acx_buffer_t *tau, size_t tau_offset, acx_future_t **done);

/* SVD: A = U diag(S) VT for m >= n (cuSOLVER's gesvd takes no wide matrices: factor A^T instead).
 * A m x n is destroyed. s receives the n singular values, descending. jobu SOME: U m x n
 * (ldu >= m); ALL: U m x m; NONE: u may be NULL. jobvt SOME or ALL: VT n x n (ldvt >= n); NONE:
 * vt may be NULL. info > 0: that many superdiagonals of the bidiagonal form did not converge. */
typedef struct acx_solver_gesvd_desc {
  size_t size; /* sizeof(acx_solver_gesvd_desc_t): set by ACX_SOLVER_GESVD_DESC_INIT */
  acx_solver_svd_job_t jobu, jobvt;
  int64_t m, n;
  acx_buffer_t *a;
  size_t a_offset;
  int64_t lda;
  acx_buffer_t *s;
  size_t s_offset;
  acx_buffer_t *u;
  size_t u_offset;
  int64_t ldu;
  acx_buffer_t *vt;
  size_t vt_offset;
  int64_t ldvt;
} acx_solver_gesvd_desc_t;

#define ACX_SOLVER_GESVD_DESC_INIT {.size = sizeof(acx_solver_gesvd_desc_t)}

acx_status_t acx_solver_gesvd(acx_solver_t *solver, const acx_solver_gesvd_desc_t *desc, acx_future_t **done);

/* Symmetric eigensolver (divide and conquer): w (n elements) receives the eigenvalues ascending;
 * with vectors != 0 A's columns are overwritten by the orthonormal eigenvectors, else the `uplo`
 * triangle of A is destroyed. info > 0: that many off-diagonal elements did not converge. */
acx_status_t acx_solver_syevd(acx_solver_t *solver, int vectors, acx_solver_uplo_t uplo, int64_t n, acx_buffer_t *a,
                              size_t a_offset, int64_t lda, acx_buffer_t *w, size_t w_offset, acx_future_t **done);

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif
