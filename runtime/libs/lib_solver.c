/* cuSOLVER context, rank side: validates dense factorisations and solves (dimensions, leading
 * dimensions, uplo/trans/jobs, dtypes, extents, overlaps, generations) before anything is enqueued
 * and submits them to the executor (lib_solver_exec.c). No CUDA header here. */
#include <inttypes.h>
#include <stdlib.h>

#include "acx/solver.h"
#include "runtime/libs/lib_internal.h"
#include "runtime/device/device_internal.h"
#include "runtime/base/log.h"

struct acx_solver {
  acxk_lib_ctx_t *ctx;
};

#define REALS (ACXK_DT(ACX_DTYPE_F32) | ACXK_DT(ACX_DTYPE_F64))

acx_status_t acx_solver_create(acx_device_t *dev, const acx_lib_config_t *cfg, acx_solver_t **solver) {
  ACX_CHECK_NULL(dev);
  ACX_CHECK_NULL(solver);
  *solver = NULL;
  acx_solver_t *s = calloc(1, sizeof *s);
  if (!s) return ACX_ERR_NO_MEMORY;
  acx_status_t st = acxk_lib_ctx_create(dev, cfg, ACX_LIB_CUSOLVER, &s->ctx);
  if (st != ACX_OK) {
    free(s);
    return st;
  }
  *solver = s;
  return ACX_OK;
}

acx_status_t acx_solver_destroy(acx_solver_t *solver) {
  if (!solver) return ACX_OK;
  acx_status_t st = acxk_lib_ctx_destroy(solver->ctx);
  free(solver);
  return st;
}

static acx_status_t check_ctx(const char *fn, acx_solver_t *s) {
  if (s) return ACX_OK;
  ACX_WARN(LIB, "%s: argument 'solver' is NULL", fn);
  return ACX_ERR_NULL_ARG;
}

static acx_status_t check_uplo(const char *fn, acx_solver_uplo_t uplo) {
  if (uplo == ACX_SOLVER_LOWER || uplo == ACX_SOLVER_UPPER) return ACX_OK;
  ACX_WARN(LIB, "%s: argument 'uplo'=%d is not ACX_SOLVER_LOWER or ACX_SOLVER_UPPER", fn, (int)uplo);
  return ACX_ERR_INVALID_ARG;
}

static acx_status_t check_dims(const char *fn, const char *what, int64_t a, int64_t b) {
  if (a >= 0 && b >= 0) return ACX_OK;
  ACX_WARN(LIB, "%s: dimensions %s = %" PRId64 ", %" PRId64 " must be >= 0", fn, what, a, b);
  return ACX_ERR_INVALID_ARG;
}

static acx_status_t same_dtype(const char *fn, const char *name, const acx_buffer_t *ref, const acx_buffer_t *b) {
  if (!b || b->dtype == ref->dtype) return ACX_OK;
  ACX_WARN(LIB, "%s: argument '%s' is %s but 'a' is %s: they must share a dtype", fn, name, acx_dtype_name(b->dtype),
           acx_dtype_name(ref->dtype));
  return ACX_ERR_BAD_DTYPE;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

acx_status_t acx_solver_potrf(acx_solver_t *solver, acx_solver_uplo_t uplo, int64_t n, acx_buffer_t *a,
                              size_t a_offset, int64_t lda, acx_future_t **done) {
  static const char fn[] = "acx_solver_potrf";
  if (done) *done = NULL;
  ACXCHECK(check_ctx(fn, solver));
  acxk_lib_ctx_t *x = solver->ctx;
  ACXCHECK(check_uplo(fn, uplo));
  ACXCHECK(check_dims(fn, "n, n", n, n));
  ACXCHECK(acxk_lib_check_buf(x, fn, "a", a, 0, REALS));
  acxk_req_t req;
  acxk_req_init(&req, ACXK_OP_SOLVER_POTRF);
  ACXCHECK(acxk_req_matrix(&req, 0, fn, "a", a, a_offset, n, n, lda, 1, 0, 1));
  req.d.u.solver = (acxk_solver_desc_t){.dtype = (uint32_t)a->dtype, .uplo = (uint32_t)uplo, .n = n, .lda = lda};
  return acxk_lib_submit(x, fn, &req, done, NULL);
}

acx_status_t acx_solver_potrs(acx_solver_t *solver, acx_solver_uplo_t uplo, int64_t n, int64_t nrhs, acx_buffer_t *a,
                              size_t a_offset, int64_t lda, acx_buffer_t *b, size_t b_offset, int64_t ldb,
                              acx_future_t **done) {
  static const char fn[] = "acx_solver_potrs";
  if (done) *done = NULL;
  ACXCHECK(check_ctx(fn, solver));
  acxk_lib_ctx_t *x = solver->ctx;
  ACXCHECK(check_uplo(fn, uplo));
  ACXCHECK(check_dims(fn, "n, nrhs", n, nrhs));
  ACXCHECK(acxk_lib_check_buf(x, fn, "a", a, 0, REALS));
  ACXCHECK(acxk_lib_check_buf(x, fn, "b", b, 0, REALS));
  ACXCHECK(same_dtype(fn, "b", a, b));
  acxk_req_t req;
  acxk_req_init(&req, ACXK_OP_SOLVER_POTRS);
  ACXCHECK(acxk_req_matrix(&req, 0, fn, "a", a, a_offset, n, n, lda, 1, 0, 0));
  ACXCHECK(acxk_req_matrix(&req, 1, fn, "b", b, b_offset, n, nrhs, ldb, 1, 0, 1));
  ACXCHECK(acxk_req_disjoint(&req, fn, 0, 1));
  req.d.u.solver = (acxk_solver_desc_t){.dtype = (uint32_t)a->dtype, .uplo = (uint32_t)uplo, .n = n, .nrhs = nrhs,
                                        .lda = lda, .ldb = ldb};
  return acxk_lib_submit(x, fn, &req, done, NULL);
}

acx_status_t acx_solver_getrf(acx_solver_t *solver, int64_t m, int64_t n, acx_buffer_t *a, size_t a_offset,
                              int64_t lda, acx_buffer_t *ipiv, size_t ipiv_offset, acx_future_t **done) {
  static const char fn[] = "acx_solver_getrf";
  if (done) *done = NULL;
  ACXCHECK(check_ctx(fn, solver));
  acxk_lib_ctx_t *x = solver->ctx;
  ACXCHECK(check_dims(fn, "m, n", m, n));
  ACXCHECK(acxk_lib_check_buf(x, fn, "a", a, 0, REALS));
  ACXCHECK(acxk_lib_check_buf(x, fn, "ipiv", ipiv, 0, ACXK_DT(ACX_DTYPE_I64)));
  acxk_req_t req;
  acxk_req_init(&req, ACXK_OP_SOLVER_GETRF);
  ACXCHECK(acxk_req_matrix(&req, 0, fn, "a", a, a_offset, m, n, lda, 1, 0, 1));
  ACXCHECK(acxk_req_vector(&req, 1, fn, "ipiv", ipiv, ipiv_offset, min64(m, n), 1, 1));
  ACXCHECK(acxk_req_disjoint(&req, fn, 0, 1));
  req.d.u.solver = (acxk_solver_desc_t){.dtype = (uint32_t)a->dtype, .m = m, .n = n, .lda = lda};
  return acxk_lib_submit(x, fn, &req, done, NULL);
}

acx_status_t acx_solver_getrs(acx_solver_t *solver, acx_blas_op_t trans, int64_t n, int64_t nrhs, acx_buffer_t *a,
                              size_t a_offset, int64_t lda, acx_buffer_t *ipiv, size_t ipiv_offset, acx_buffer_t *b,
                              size_t b_offset, int64_t ldb, acx_future_t **done) {
  static const char fn[] = "acx_solver_getrs";
  if (done) *done = NULL;
  ACXCHECK(check_ctx(fn, solver));
  acxk_lib_ctx_t *x = solver->ctx;
  ACX_CHECK_ARG(trans == ACX_BLAS_N || trans == ACX_BLAS_T, "%s: argument 'trans'=%d is not ACX_BLAS_N or ACX_BLAS_T",
                fn, (int)trans);
  ACXCHECK(check_dims(fn, "n, nrhs", n, nrhs));
  ACXCHECK(acxk_lib_check_buf(x, fn, "a", a, 0, REALS));
  ACXCHECK(acxk_lib_check_buf(x, fn, "ipiv", ipiv, 0, ACXK_DT(ACX_DTYPE_I64)));
  ACXCHECK(acxk_lib_check_buf(x, fn, "b", b, 0, REALS));
  ACXCHECK(same_dtype(fn, "b", a, b));
  acxk_req_t req;
  acxk_req_init(&req, ACXK_OP_SOLVER_GETRS);
  ACXCHECK(acxk_req_matrix(&req, 0, fn, "a", a, a_offset, n, n, lda, 1, 0, 0));
  ACXCHECK(acxk_req_vector(&req, 1, fn, "ipiv", ipiv, ipiv_offset, n, 1, 0));
  ACXCHECK(acxk_req_matrix(&req, 2, fn, "b", b, b_offset, n, nrhs, ldb, 1, 0, 1));
  ACXCHECK(acxk_req_disjoint(&req, fn, 0, 2));
  ACXCHECK(acxk_req_disjoint(&req, fn, 1, 2));
  req.d.u.solver = (acxk_solver_desc_t){.dtype = (uint32_t)a->dtype, .trans = (uint32_t)trans, .n = n, .nrhs = nrhs,
                                        .lda = lda, .ldb = ldb};
  return acxk_lib_submit(x, fn, &req, done, NULL);
}

acx_status_t acx_solver_geqrf(acx_solver_t *solver, int64_t m, int64_t n, acx_buffer_t *a, size_t a_offset,
                              int64_t lda, acx_buffer_t *tau, size_t tau_offset, acx_future_t **done) {
  static const char fn[] = "acx_solver_geqrf";
  if (done) *done = NULL;
  ACXCHECK(check_ctx(fn, solver));
  acxk_lib_ctx_t *x = solver->ctx;
  ACXCHECK(check_dims(fn, "m, n", m, n));
  ACXCHECK(acxk_lib_check_buf(x, fn, "a", a, 0, REALS));
  ACXCHECK(acxk_lib_check_buf(x, fn, "tau", tau, 0, REALS));
  ACXCHECK(same_dtype(fn, "tau", a, tau));
  acxk_req_t req;
  acxk_req_init(&req, ACXK_OP_SOLVER_GEQRF);
  ACXCHECK(acxk_req_matrix(&req, 0, fn, "a", a, a_offset, m, n, lda, 1, 0, 1));
  ACXCHECK(acxk_req_vector(&req, 1, fn, "tau", tau, tau_offset, min64(m, n), 1, 1));
  ACXCHECK(acxk_req_disjoint(&req, fn, 0, 1));
  req.d.u.solver = (acxk_solver_desc_t){.dtype = (uint32_t)a->dtype, .m = m, .n = n, .lda = lda};
  return acxk_lib_submit(x, fn, &req, done, NULL);
}

static acx_status_t check_job(const char *fn, const char *name, acx_solver_svd_job_t job) {
  if (job == ACX_SOLVER_SVD_NONE || job == ACX_SOLVER_SVD_SOME || job == ACX_SOLVER_SVD_ALL) return ACX_OK;
  ACX_WARN(LIB, "%s: argument '%s'=%d is not an acx_solver_svd_job_t", fn, name, (int)job);
  return ACX_ERR_INVALID_ARG;
}

acx_status_t acx_solver_gesvd(acx_solver_t *solver, const acx_solver_gesvd_desc_t *d, acx_future_t **done) {
  static const char fn[] = "acx_solver_gesvd";
  if (done) *done = NULL;
  ACXCHECK(check_ctx(fn, solver));
  ACX_CHECK_NULL_AS(d, "desc");
  acxk_lib_ctx_t *x = solver->ctx;
  ACX_CHECK_ARG(d->size == sizeof *d, "%s: argument 'desc' has size %zu, expected %zu (ACX_SOLVER_GESVD_DESC_INIT)",
                fn, d->size, sizeof *d);
  ACXCHECK(check_job(fn, "desc->jobu", d->jobu));
  ACXCHECK(check_job(fn, "desc->jobvt", d->jobvt));
  ACXCHECK(check_dims(fn, "m, n", d->m, d->n));
  ACX_CHECK_ARG(d->m >= d->n, "%s: m=%" PRId64 " < n=%" PRId64 ": cuSOLVER's gesvd takes m >= n (factor A^T instead)",
                fn, d->m, d->n);
  ACXCHECK(acxk_lib_check_buf(x, fn, "desc->a", d->a, 0, REALS));
  ACXCHECK(acxk_lib_check_buf(x, fn, "desc->s", d->s, 0, REALS));
  ACXCHECK(same_dtype(fn, "desc->s", d->a, d->s));
  if (d->jobu == ACX_SOLVER_SVD_NONE && d->u) {
    ACX_WARN(LIB, "%s: argument 'desc->u' is given but desc->jobu is ACX_SOLVER_SVD_NONE", fn);
    return ACX_ERR_INVALID_ARG;
  }
  if (d->jobvt == ACX_SOLVER_SVD_NONE && d->vt) {
    ACX_WARN(LIB, "%s: argument 'desc->vt' is given but desc->jobvt is ACX_SOLVER_SVD_NONE", fn);
    return ACX_ERR_INVALID_ARG;
  }
  ACXCHECK(acxk_lib_check_buf(x, fn, "desc->u", d->u, d->jobu == ACX_SOLVER_SVD_NONE, REALS));
  ACXCHECK(acxk_lib_check_buf(x, fn, "desc->vt", d->vt, d->jobvt == ACX_SOLVER_SVD_NONE, REALS));
  ACXCHECK(same_dtype(fn, "desc->u", d->a, d->u));
  ACXCHECK(same_dtype(fn, "desc->vt", d->a, d->vt));
  acxk_req_t req;
  acxk_req_init(&req, ACXK_OP_SOLVER_GESVD);
  ACXCHECK(acxk_req_matrix(&req, 0, fn, "desc->a", d->a, d->a_offset, d->m, d->n, d->lda, 1, 0, 1));
  ACXCHECK(acxk_req_vector(&req, 1, fn, "desc->s", d->s, d->s_offset, d->n, 1, 1));
  if (d->u)
    ACXCHECK(acxk_req_matrix(&req, 2, fn, "desc->u", d->u, d->u_offset, d->m,
                             d->jobu == ACX_SOLVER_SVD_ALL ? d->m : d->n, d->ldu, 1, 0, 1));
  if (d->vt) ACXCHECK(acxk_req_matrix(&req, 3, fn, "desc->vt", d->vt, d->vt_offset, d->n, d->n, d->ldvt, 1, 0, 1));
  req.d.nops = 4;
  for (int i = 0; i < 4; i++)
    for (int j = i + 1; j < 4; j++) ACXCHECK(acxk_req_disjoint(&req, fn, i, j));
  req.d.u.solver = (acxk_solver_desc_t){.dtype = (uint32_t)d->a->dtype, .jobu = (uint32_t)d->jobu,
                                        .jobvt = (uint32_t)d->jobvt, .m = d->m, .n = d->n, .lda = d->lda,
                                        .ldu = d->u ? d->ldu : 1, .ldvt = d->vt ? d->ldvt : 1};
  return acxk_lib_submit(x, fn, &req, done, NULL);
}

acx_status_t acx_solver_syevd(acx_solver_t *solver, int vectors, acx_solver_uplo_t uplo, int64_t n, acx_buffer_t *a,
                              size_t a_offset, int64_t lda, acx_buffer_t *w, size_t w_offset, acx_future_t **done) {
  static const char fn[] = "acx_solver_syevd";
  if (done) *done = NULL;
  ACXCHECK(check_ctx(fn, solver));
  acxk_lib_ctx_t *x = solver->ctx;
  ACX_CHECK_ARG(vectors == 0 || vectors == 1, "%s: argument 'vectors'=%d must be 0 or 1", fn, vectors);
  ACXCHECK(check_uplo(fn, uplo));
  ACXCHECK(check_dims(fn, "n, n", n, n));
  ACXCHECK(acxk_lib_check_buf(x, fn, "a", a, 0, REALS));
  ACXCHECK(acxk_lib_check_buf(x, fn, "w", w, 0, REALS));
  ACXCHECK(same_dtype(fn, "w", a, w));
  acxk_req_t req;
  acxk_req_init(&req, ACXK_OP_SOLVER_SYEVD);
  ACXCHECK(acxk_req_matrix(&req, 0, fn, "a", a, a_offset, n, n, lda, 1, 0, 1));
  ACXCHECK(acxk_req_vector(&req, 1, fn, "w", w, w_offset, n, 1, 1));
  ACXCHECK(acxk_req_disjoint(&req, fn, 0, 1));
  req.d.u.solver = (acxk_solver_desc_t){.dtype = (uint32_t)a->dtype, .uplo = (uint32_t)uplo,
                                        .vectors = (uint32_t)vectors, .n = n, .lda = lda};
  return acxk_lib_submit(x, fn, &req, done, NULL);
}
