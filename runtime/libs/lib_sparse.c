/* cuSPARSE context, rank side: validates CSR SpMV / SpMM requests (dimensions, nnz, index base and
 * dtypes, the extent of every array, dense leading dimensions, overlaps, generations) before
 * anything is enqueued and submits them to the executor (lib_sparse_exec.c). No CUDA header. */
#include <inttypes.h>
#include <stdlib.h>

#include "acx/sparse.h"
#include "runtime/libs/lib_internal.h"
#include "runtime/device/device_internal.h"
#include "runtime/base/log.h"

struct acx_sparse {
  acxk_lib_ctx_t *ctx;
};

#define REALS (ACXK_DT(ACX_DTYPE_F32) | ACXK_DT(ACX_DTYPE_F64))
#define INDICES (ACXK_DT(ACX_DTYPE_I32) | ACXK_DT(ACX_DTYPE_I64))

acx_status_t acx_sparse_create(acx_device_t *dev, const acx_lib_config_t *cfg, acx_sparse_t **sp) {
  ACX_CHECK_NULL(dev);
  ACX_CHECK_NULL(sp);
  *sp = NULL;
  acx_sparse_t *s = calloc(1, sizeof *s);
  if (!s) return ACX_ERR_NO_MEMORY;
  acx_status_t st = acxk_lib_ctx_create(dev, cfg, ACX_LIB_CUSPARSE, &s->ctx);
  if (st != ACX_OK) {
    free(s);
    return st;
  }
  *sp = s;
  return ACX_OK;
}

acx_status_t acx_sparse_destroy(acx_sparse_t *sp) {
  if (!sp) return ACX_OK;
  acx_status_t st = acxk_lib_ctx_destroy(sp->ctx);
  free(sp);
  return st;
}

/* The CSR part of a request: operands 0-2 and the descriptor's matrix fields. */
static acx_status_t csr(acxk_lib_ctx_t *x, const char *fn, const acx_sparse_csr_t *a, acxk_req_t *req) {
  if (!a) {
    ACX_WARN(LIB, "%s: argument 'a' is NULL", fn);
    return ACX_ERR_NULL_ARG;
  }
  ACX_CHECK_ARG(a->rows >= 0 && a->cols >= 0 && a->nnz >= 0,
                "%s: argument 'a': rows=%" PRId64 " cols=%" PRId64 " nnz=%" PRId64 " must be >= 0", fn, a->rows,
                a->cols, a->nnz);
  ACX_CHECK_ARG(a->nnz == 0 || (a->rows > 0 && (a->nnz - 1) / a->rows < a->cols),
                "%s: argument 'a': nnz=%" PRId64 " exceeds rows x cols = %" PRId64 " x %" PRId64, fn, a->nnz,
                a->rows, a->cols);
  ACX_CHECK_ARG((a->rows && a->cols) || a->nnz == 0, "%s: argument 'a' is empty but has nnz=%" PRId64, fn, a->nnz);
  ACX_CHECK_ARG(a->base == 0 || a->base == 1, "%s: argument 'a->base'=%d must be 0 or 1", fn, a->base);
  ACXCHECK(acxk_lib_check_buf(x, fn, "a->row_offsets", a->row_offsets, 0, INDICES));
  ACXCHECK(acxk_lib_check_buf(x, fn, "a->col_indices", a->col_indices, 0, INDICES));
  ACXCHECK(acxk_lib_check_buf(x, fn, "a->values", a->values, 0, REALS));
  if (a->col_indices->dtype != a->row_offsets->dtype) {
    ACX_WARN(LIB, "%s: 'a->row_offsets' is %s but 'a->col_indices' %s: they must share the index type", fn,
             acx_dtype_name(a->row_offsets->dtype), acx_dtype_name(a->col_indices->dtype));
    return ACX_ERR_BAD_DTYPE;
  }
  if (a->row_offsets->dtype == ACX_DTYPE_I32 && (a->nnz > INT32_MAX - 1 || a->rows > INT32_MAX - 1 ||
                                                 a->cols > INT32_MAX - 1)) {
    ACX_WARN(LIB, "%s: argument 'a' is too large for i32 indices: use i64", fn);
    return ACX_ERR_OVERFLOW;
  }
  ACXCHECK(acxk_req_vector(req, 0, fn, "a->row_offsets", a->row_offsets, a->row_offsets_offset, a->rows + 1, 1, 0));
  ACXCHECK(acxk_req_vector(req, 1, fn, "a->col_indices", a->col_indices, a->col_indices_offset, a->nnz, 1, 0));
  ACXCHECK(acxk_req_vector(req, 2, fn, "a->values", a->values, a->values_offset, a->nnz, 1, 0));
  req->d.u.sparse.rows = a->rows;
  req->d.u.sparse.cols = a->cols;
  req->d.u.sparse.nnz = a->nnz;
  req->d.u.sparse.base = a->base;
  req->d.u.sparse.index = (uint32_t)a->row_offsets->dtype;
  req->d.u.sparse.dtype = (uint32_t)a->values->dtype;
  return ACX_OK;
}

static acx_status_t dense_dtype(const char *fn, const char *name, const acx_buffer_t *b, const acx_sparse_csr_t *a) {
  if (b->dtype == a->values->dtype) return ACX_OK;
  ACX_WARN(LIB, "%s: argument '%s' is %s but 'a->values' is %s", fn, name, acx_dtype_name(b->dtype),
           acx_dtype_name(a->values->dtype));
  return ACX_ERR_BAD_DTYPE;
}

/* The output overlaps none of the inputs. */
static acx_status_t disjoint_out(const acxk_req_t *req, const char *fn) {
  for (int i = 0; i < 4; i++) ACXCHECK(acxk_req_disjoint(req, fn, 4, i));
  return ACX_OK;
}

acx_status_t acx_sparse_spmv(acx_sparse_t *sp, acx_blas_op_t trans, double alpha, const acx_sparse_csr_t *a,
                             acx_buffer_t *xv, size_t x_offset, double beta, acx_buffer_t *y, size_t y_offset,
                             acx_future_t **done) {
  static const char fn[] = "acx_sparse_spmv";
  if (done) *done = NULL;
  if (!sp) {
    ACX_WARN(LIB, "%s: argument 'sp' is NULL", fn);
    return ACX_ERR_NULL_ARG;
  }
  acxk_lib_ctx_t *x = sp->ctx;
  ACX_CHECK_ARG(trans == ACX_BLAS_N || trans == ACX_BLAS_T, "%s: argument 'trans'=%d is not ACX_BLAS_N or ACX_BLAS_T",
                fn, (int)trans);
  acxk_req_t req;
  acxk_req_init(&req, ACXK_OP_SPARSE_SPMV);
  ACXCHECK(csr(x, fn, a, &req));
  ACXCHECK(acxk_lib_check_buf(x, fn, "x", xv, 0, REALS));
  ACXCHECK(acxk_lib_check_buf(x, fn, "y", y, 0, REALS));
  ACXCHECK(dense_dtype(fn, "x", xv, a));
  ACXCHECK(dense_dtype(fn, "y", y, a));
  int t = trans == ACX_BLAS_T;
  ACXCHECK(acxk_req_vector(&req, 3, fn, "x", xv, x_offset, t ? a->rows : a->cols, 1, 0));
  ACXCHECK(acxk_req_vector(&req, 4, fn, "y", y, y_offset, t ? a->cols : a->rows, 1, 1));
  ACXCHECK(disjoint_out(&req, fn));
  req.d.u.sparse.trans = (uint32_t)trans;
  req.d.u.sparse.alpha = alpha;
  req.d.u.sparse.beta = beta;
  return acxk_lib_submit(x, fn, &req, done, NULL);
}

acx_status_t acx_sparse_spmm(acx_sparse_t *sp, acx_blas_op_t trans, int64_t n, double alpha, const acx_sparse_csr_t *a,
                             acx_buffer_t *b, size_t b_offset, int64_t ldb, double beta, acx_buffer_t *c,
                             size_t c_offset, int64_t ldc, acx_future_t **done) {
  static const char fn[] = "acx_sparse_spmm";
  if (done) *done = NULL;
  if (!sp) {
    ACX_WARN(LIB, "%s: argument 'sp' is NULL", fn);
    return ACX_ERR_NULL_ARG;
  }
  acxk_lib_ctx_t *x = sp->ctx;
  ACX_CHECK_ARG(trans == ACX_BLAS_N || trans == ACX_BLAS_T, "%s: argument 'trans'=%d is not ACX_BLAS_N or ACX_BLAS_T",
                fn, (int)trans);
  ACX_CHECK_ARG(n >= 0, "%s: argument 'n'=%" PRId64 " must be >= 0", fn, n);
  acxk_req_t req;
  acxk_req_init(&req, ACXK_OP_SPARSE_SPMM);
  ACXCHECK(csr(x, fn, a, &req));
  ACXCHECK(acxk_lib_check_buf(x, fn, "b", b, 0, REALS));
  ACXCHECK(acxk_lib_check_buf(x, fn, "c", c, 0, REALS));
  ACXCHECK(dense_dtype(fn, "b", b, a));
  ACXCHECK(dense_dtype(fn, "c", c, a));
  int t = trans == ACX_BLAS_T;
  int64_t m = t ? a->cols : a->rows, k = t ? a->rows : a->cols;
  ACXCHECK(acxk_req_matrix(&req, 3, fn, "b", b, b_offset, k, n, ldb, 1, 0, 0));
  ACXCHECK(acxk_req_matrix(&req, 4, fn, "c", c, c_offset, m, n, ldc, 1, 0, 1));
  ACXCHECK(disjoint_out(&req, fn));
  req.d.u.sparse.trans = (uint32_t)trans;
  req.d.u.sparse.n = n;
  req.d.u.sparse.ldb = ldb;
  req.d.u.sparse.ldc = ldc;
  req.d.u.sparse.alpha = alpha;
  req.d.u.sparse.beta = beta;
  return acxk_lib_submit(x, fn, &req, done, NULL);
}
