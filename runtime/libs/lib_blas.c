/* cuBLAS context, rank side: validates every BLAS request (dimensions, leading dimensions,
 * increments, dtypes, buffer extents, generations) before anything is enqueued and submits it to
 * the executor (lib_blas_exec.c). No CUDA header here. */
#include <inttypes.h>
#include <stdlib.h>

#include "acx/blas.h"
#include "runtime/libs/lib_internal.h"
#include "runtime/device/device_internal.h"
#include "runtime/base/log.h"

struct acx_blas {
  acxk_lib_ctx_t *ctx;
};

#define FLOATS (ACXK_DT(ACX_DTYPE_F32) | ACXK_DT(ACX_DTYPE_F64) | ACXK_DT(ACX_DTYPE_F16) | ACXK_DT(ACX_DTYPE_BF16))

acx_status_t acx_blas_create(acx_device_t *dev, const acx_lib_config_t *cfg, acx_blas_t **blas) {
  ACX_CHECK_NULL(dev);
  ACX_CHECK_NULL(blas);
  *blas = NULL;
  acx_blas_t *b = calloc(1, sizeof *b);
  if (!b) return ACX_ERR_NO_MEMORY;
  acx_status_t st = acxk_lib_ctx_create(dev, cfg, ACX_LIB_CUBLAS, &b->ctx);
  if (st != ACX_OK) {
    free(b);
    return st;
  }
  *blas = b;
  return ACX_OK;
}

acx_status_t acx_blas_destroy(acx_blas_t *blas) {
  if (!blas) return ACX_OK;
  acx_status_t st = acxk_lib_ctx_destroy(blas->ctx);
  free(blas);
  return st;
}

static acx_status_t check_op(const char *fn, const char *name, acx_blas_op_t op) {
  if (op == ACX_BLAS_N || op == ACX_BLAS_T) return ACX_OK;
  ACX_WARN(LIB, "%s: argument '%s'=%d is not ACX_BLAS_N or ACX_BLAS_T", fn, name, (int)op);
  return ACX_ERR_INVALID_ARG;
}

static acx_status_t same_dtype(const char *fn, const char *name, const acx_buffer_t *ref, const acx_buffer_t *b) {
  if (!b || b->dtype == ref->dtype) return ACX_OK;
  ACX_WARN(LIB, "%s: argument '%s' is %s but the first operand is %s: operands must share a dtype", fn, name,
           acx_dtype_name(b->dtype), acx_dtype_name(ref->dtype));
  return ACX_ERR_BAD_DTYPE;
}

/* cuBLAS and reference BLAS differ in corner cases of non-positive increments (nrm2 and scal
 * return or do nothing); acx takes positive increments only, so a call means one thing. */
static acx_status_t check_inc(const char *fn, const char *name, int64_t inc) {
  if (inc > 0) return ACX_OK;
  ACX_WARN(LIB, "%s: argument '%s'=%" PRId64 " must be > 0", fn, name, inc);
  return ACX_ERR_INVALID_ARG;
}

static acx_status_t check_ctx(const char *fn, acx_blas_t *blas) {
  if (blas) return ACX_OK;
  ACX_WARN(LIB, "%s: argument 'blas' is NULL", fn);
  return ACX_ERR_NULL_ARG;
}

acx_status_t acx_blas_gemm(acx_blas_t *blas, const acx_blas_gemm_desc_t *d, acx_future_t **done) {
  static const char fn[] = "acx_blas_gemm";
  ACXCHECK(check_ctx(fn, blas));
  ACX_CHECK_NULL_AS(d, "desc");
  if (done) *done = NULL;
  acxk_lib_ctx_t *x = blas->ctx;
  ACX_CHECK_ARG(d->size == sizeof *d, "%s: argument 'desc' has size %zu, expected %zu (ACX_BLAS_GEMM_DESC_INIT)", fn,
                d->size, sizeof *d);
  ACXCHECK(check_op(fn, "desc->transa", d->transa));
  ACXCHECK(check_op(fn, "desc->transb", d->transb));
  ACX_CHECK_ARG(d->m >= 0 && d->n >= 0 && d->k >= 0, "%s: dimensions m=%" PRId64 " n=%" PRId64 " k=%" PRId64
                " must be >= 0", fn, d->m, d->n, d->k);
  ACX_CHECK_ARG(d->batch >= 1, "%s: argument 'desc->batch'=%" PRId64 " must be >= 1", fn, d->batch);
  ACXCHECK(acxk_lib_check_buf(x, fn, "desc->a", d->a, 0, FLOATS));
  ACXCHECK(acxk_lib_check_buf(x, fn, "desc->b", d->b, 0, FLOATS));
  ACXCHECK(acxk_lib_check_buf(x, fn, "desc->c", d->c, 0, FLOATS));
  ACXCHECK(same_dtype(fn, "desc->b", d->a, d->b));
  ACXCHECK(same_dtype(fn, "desc->c", d->a, d->c));
  acx_dtype_t dt = d->a->dtype;
  ACX_CHECK_ARG((unsigned)d->compute <= ACX_BLAS_COMPUTE_F32_FAST_F16,
                "%s: argument 'desc->compute'=%d is not an acx_blas_compute_t", fn, (int)d->compute);
  if (d->compute != ACX_BLAS_COMPUTE_DEFAULT && dt != ACX_DTYPE_F32) {
    ACX_WARN(LIB, "%s: argument 'desc->compute': the FAST modes take f32 operands, these are %s", fn,
             acx_dtype_name(dt));
    return ACX_ERR_BAD_DTYPE;
  }
  int ta = d->transa == ACX_BLAS_T, tb = d->transb == ACX_BLAS_T;
  acxk_req_t req;
  acxk_req_init(&req, ACXK_OP_BLAS_GEMM);
  ACXCHECK(acxk_req_matrix(&req, 0, fn, "desc->a", d->a, d->a_offset, ta ? d->k : d->m, ta ? d->m : d->k, d->lda,
                           d->batch, d->stride_a, 0));
  ACXCHECK(acxk_req_matrix(&req, 1, fn, "desc->b", d->b, d->b_offset, tb ? d->n : d->k, tb ? d->k : d->n, d->ldb,
                           d->batch, d->stride_b, 0));
  ACXCHECK(acxk_req_matrix(&req, 2, fn, "desc->c", d->c, d->c_offset, d->m, d->n, d->ldc, d->batch, d->stride_c, 1));
  /* Batched C matrices that overlap would be written concurrently: refuse rather than race. */
  if (d->batch > 1 && d->m > 0 && d->n > 0 && d->stride_c < (d->n - 1) * d->ldc + d->m) {
    ACX_WARN(LIB, "%s: argument 'desc->stride_c'=%" PRId64 " makes the %" PRId64 " output matrices overlap", fn,
             d->stride_c, d->batch);
    return ACX_ERR_INVALID_ARG;
  }
  acxk_blas_desc_t *q = &req.d.u.blas;
  *q = (acxk_blas_desc_t){.dtype = (uint32_t)dt, .compute = (uint32_t)d->compute, .transa = (uint32_t)d->transa,
                          .transb = (uint32_t)d->transb, .m = d->m, .n = d->n, .k = d->k, .lda = d->lda,
                          .ldb = d->ldb, .ldc = d->ldc, .stride_a = d->stride_a, .stride_b = d->stride_b,
                          .stride_c = d->stride_c, .batch = d->batch, .alpha = d->alpha, .beta = d->beta};
  return acxk_lib_submit(x, fn, &req, done, NULL);
}

acx_status_t acx_blas_gemv(acx_blas_t *blas, acx_blas_op_t trans, int64_t m, int64_t n, double alpha, acx_buffer_t *a,
                           size_t a_offset, int64_t lda, acx_buffer_t *xv, size_t x_offset, int64_t incx, double beta,
                           acx_buffer_t *y, size_t y_offset, int64_t incy, acx_future_t **done) {
  static const char fn[] = "acx_blas_gemv";
  ACXCHECK(check_ctx(fn, blas));
  if (done) *done = NULL;
  acxk_lib_ctx_t *x = blas->ctx;
  ACXCHECK(check_op(fn, "trans", trans));
  ACX_CHECK_ARG(m >= 0 && n >= 0, "%s: dimensions m=%" PRId64 " n=%" PRId64 " must be >= 0", fn, m, n);
  const uint32_t dts = ACXK_DT(ACX_DTYPE_F32) | ACXK_DT(ACX_DTYPE_F64);
  ACXCHECK(acxk_lib_check_buf(x, fn, "a", a, 0, dts));
  ACXCHECK(acxk_lib_check_buf(x, fn, "x", xv, 0, dts));
  ACXCHECK(acxk_lib_check_buf(x, fn, "y", y, 0, dts));
  ACXCHECK(same_dtype(fn, "x", a, xv));
  ACXCHECK(same_dtype(fn, "y", a, y));
  ACXCHECK(check_inc(fn, "incx", incx));
  ACXCHECK(check_inc(fn, "incy", incy));
  int t = trans == ACX_BLAS_T;
  acxk_req_t req;
  acxk_req_init(&req, ACXK_OP_BLAS_GEMV);
  ACXCHECK(acxk_req_matrix(&req, 0, fn, "a", a, a_offset, m, n, lda, 1, 0, 0));
  ACXCHECK(acxk_req_vector(&req, 1, fn, "x", xv, x_offset, t ? m : n, incx, 0));
  ACXCHECK(acxk_req_vector(&req, 2, fn, "y", y, y_offset, t ? n : m, incy, 1));
  req.d.u.blas = (acxk_blas_desc_t){.dtype = (uint32_t)a->dtype, .transa = (uint32_t)trans, .m = m, .n = n,
                                    .lda = lda, .incx = incx, .incy = incy, .alpha = alpha, .beta = beta};
  return acxk_lib_submit(x, fn, &req, done, NULL);
}

acx_status_t acx_blas_axpy(acx_blas_t *blas, int64_t n, double alpha, acx_buffer_t *xv, size_t x_offset, int64_t incx,
                           acx_buffer_t *y, size_t y_offset, int64_t incy, acx_future_t **done) {
  static const char fn[] = "acx_blas_axpy";
  ACXCHECK(check_ctx(fn, blas));
  if (done) *done = NULL;
  acxk_lib_ctx_t *x = blas->ctx;
  ACXCHECK(acxk_lib_check_buf(x, fn, "x", xv, 0, FLOATS));
  ACXCHECK(acxk_lib_check_buf(x, fn, "y", y, 0, FLOATS));
  ACXCHECK(same_dtype(fn, "y", xv, y));
  ACXCHECK(check_inc(fn, "incx", incx));
  ACXCHECK(check_inc(fn, "incy", incy));
  acxk_req_t req;
  acxk_req_init(&req, ACXK_OP_BLAS_AXPY);
  ACXCHECK(acxk_req_vector(&req, 0, fn, "x", xv, x_offset, n, incx, 0));
  ACXCHECK(acxk_req_vector(&req, 1, fn, "y", y, y_offset, n, incy, 1));
  req.d.u.blas = (acxk_blas_desc_t){.dtype = (uint32_t)xv->dtype, .n = n, .incx = incx, .incy = incy, .alpha = alpha};
  return acxk_lib_submit(x, fn, &req, done, NULL);
}

acx_status_t acx_blas_scal(acx_blas_t *blas, int64_t n, double alpha, acx_buffer_t *xv, size_t x_offset, int64_t incx,
                           acx_future_t **done) {
  static const char fn[] = "acx_blas_scal";
  ACXCHECK(check_ctx(fn, blas));
  if (done) *done = NULL;
  acxk_lib_ctx_t *x = blas->ctx;
  ACXCHECK(acxk_lib_check_buf(x, fn, "x", xv, 0, FLOATS));
  ACXCHECK(check_inc(fn, "incx", incx));
  acxk_req_t req;
  acxk_req_init(&req, ACXK_OP_BLAS_SCAL);
  ACXCHECK(acxk_req_vector(&req, 0, fn, "x", xv, x_offset, n, incx, 1));
  req.d.u.blas = (acxk_blas_desc_t){.dtype = (uint32_t)xv->dtype, .n = n, .incx = incx, .alpha = alpha};
  return acxk_lib_submit(x, fn, &req, done, NULL);
}

/* dot and nrm2: the result to a buffer, or back with the reply. */
static acx_status_t reduce(acx_blas_t *blas, const char *fn, uint32_t op, int64_t n, acx_buffer_t *xv, size_t x_offset,
                           int64_t incx, acx_buffer_t *y, size_t y_offset, int64_t incy, acx_buffer_t *result,
                           size_t result_offset, double *value, acx_future_t **done) {
  ACXCHECK(check_ctx(fn, blas));
  if (done) *done = NULL;
  acxk_lib_ctx_t *x = blas->ctx;
  ACXCHECK(acxk_lib_check_buf(x, fn, "x", xv, 0, FLOATS));
  if (op == ACXK_OP_BLAS_DOT) {
    ACXCHECK(acxk_lib_check_buf(x, fn, "y", y, 0, FLOATS));
    ACXCHECK(same_dtype(fn, "y", xv, y));
  }
  ACXCHECK(acxk_lib_check_buf(x, fn, "result", result, 1, FLOATS));
  ACXCHECK(same_dtype(fn, "result", xv, result));
  ACXCHECK(check_inc(fn, "incx", incx));
  if (op == ACXK_OP_BLAS_DOT) ACXCHECK(check_inc(fn, "incy", incy));
  if (result && value) {
    ACX_WARN(LIB, "%s: arguments 'result' and 'value' are both given: the result goes to one of them", fn);
    return ACX_ERR_INVALID_ARG;
  }
  if (!result && !value && !done) {
    ACX_WARN(LIB, "%s: arguments 'result', 'value' and 'done' are all NULL: the result would be lost", fn);
    return ACX_ERR_NULL_ARG;
  }
  acxk_req_t req;
  acxk_req_init(&req, op);
  ACXCHECK(acxk_req_vector(&req, 0, fn, "x", xv, x_offset, n, incx, 0));
  if (op == ACXK_OP_BLAS_DOT) ACXCHECK(acxk_req_vector(&req, 1, fn, "y", y, y_offset, n, incy, 0));
  if (result) ACXCHECK(acxk_req_vector(&req, 2, fn, "result", result, result_offset, 1, 1, 1));
  req.d.nops = 3;
  req.d.u.blas = (acxk_blas_desc_t){.dtype = (uint32_t)xv->dtype, .n = n, .incx = incx, .incy = incy};
  acx_lib_result_t r;
  acx_status_t st = acxk_lib_submit(x, fn, &req, done, &r);
  if (st == ACX_OK && !done && value) *value = r.value;
  return st;
}

acx_status_t acx_blas_dot(acx_blas_t *blas, int64_t n, acx_buffer_t *x, size_t x_offset, int64_t incx, acx_buffer_t *y,
                          size_t y_offset, int64_t incy, acx_buffer_t *result, size_t result_offset, double *value,
                          acx_future_t **done) {
  return reduce(blas, "acx_blas_dot", ACXK_OP_BLAS_DOT, n, x, x_offset, incx, y, y_offset, incy, result,
                result_offset, value, done);
}

acx_status_t acx_blas_nrm2(acx_blas_t *blas, int64_t n, acx_buffer_t *x, size_t x_offset, int64_t incx,
                           acx_buffer_t *result, size_t result_offset, double *value, acx_future_t **done) {
  return reduce(blas, "acx_blas_nrm2", ACXK_OP_BLAS_NRM2, n, x, x_offset, incx, NULL, 0, 1, result, result_offset,
                value, done);
}
