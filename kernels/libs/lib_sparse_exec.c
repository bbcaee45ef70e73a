/* cuSPARSE, executor side: one cusparseHandle_t per engine stream (bound at creation), created on
 * first use in this executor incarnation; the generic API's matrix and vector descriptors made per
 * request (host objects: the enqueued work does not refer to them), the work buffer sized by
 * cusparseSpMV/SpMM_bufferSize and taken from the per-stream library workspace. */
#include <inttypes.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>
#include <cusparse.h>

#include "acx/sparse.h"
#include "kernels/libs/lib_exec.h"
#include "runtime/base/log.h"


typedef struct sparse_state {
  cusparseHandle_t h[ACXI_MAX_STREAMS];
} sparse_state_t;

static acx_status_t fail(acxk_lib_call_t *c, cusparseStatus_t s, const char *call) {
  return acxk_lib_fail(c, ACX_LIB_CUSPARSE, (int)s, cusparseGetErrorName(s), call, s == CUSPARSE_STATUS_ALLOC_FAILED);
}

/* Inside run(): on failure, remember the status and leave through the cleanup. */
#define SPCHECK(call)                                                                              \
  do {                                                                                             \
    cusparseStatus_t acxk_sp_ = (call);                                                            \
    if (acxk_sp_ != CUSPARSE_STATUS_SUCCESS) {                                                     \
      st = fail(c, acxk_sp_, #call);                                                               \
      goto out;                                                                                    \
    }                                                                                              \
  } while (0)

void acxk_sparse_exec_destroy(void *state) {
  sparse_state_t *s = state;
  for (int i = 0; i < ACXI_MAX_STREAMS; i++)
    if (s->h[i]) (void)cusparseDestroy(s->h[i]);
  free(s);
}

static acx_status_t handle(acxk_lib_call_t *c, cusparseHandle_t *out) {
  void **slot = acxk_lib_state(c, ACX_LIB_CUSPARSE);
  if (!*slot && !(*slot = calloc(1, sizeof(sparse_state_t)))) return ACX_ERR_NO_MEMORY;
  sparse_state_t *s = *slot;
  uint32_t i = c->cmd->stream;
  if (i >= ACXI_MAX_STREAMS) return acxk_lib_bad(c, ACX_ERR_INVALID_ARG, "stream index beyond the cuSPARSE handle table");
  if (!s->h[i]) {
    cusparseHandle_t h = NULL;
    cusparseStatus_t ss = cusparseCreate(&h);
    if (ss != CUSPARSE_STATUS_SUCCESS) return fail(c, ss, "cusparseCreate");
    ss = cusparseSetStream(h, (cudaStream_t)c->stream);
    if (ss != CUSPARSE_STATUS_SUCCESS) {
      (void)cusparseDestroy(h);
      return fail(c, ss, "cusparseSetStream");
    }
    s->h[i] = h;
  }
  *out = s->h[i];
  return ACX_OK;
}

acx_status_t acxk_sparse_exec(acxk_lib_call_t *c) {
  const acxk_sparse_desc_t *q = &c->d.u.sparse;
  int spmm = c->cmd->op == ACXK_OP_SPARSE_SPMM;
  if (!spmm && c->cmd->op != ACXK_OP_SPARSE_SPMV) return acxk_lib_bad(c, ACX_ERR_NOT_SUPPORTED, "unknown cuSPARSE op");
  if ((q->dtype != ACX_DTYPE_F32 && q->dtype != ACX_DTYPE_F64) || (q->index != ACX_DTYPE_I32 && q->index != ACX_DTYPE_I64) ||
      (q->base != 0 && q->base != 1))
    return acxk_lib_bad(c, ACX_ERR_BAD_DTYPE, "malformed cuSPARSE descriptor (dtype, index type or base)");
  size_t es = q->dtype == ACX_DTYPE_F64 ? 8 : 4, is = q->index == ACX_DTYPE_I64 ? 8 : 4;
  int t = q->trans == ACX_BLAS_T;
  int64_t m = t ? q->cols : q->rows, k = t ? q->rows : q->cols;
  ACXCHECK(acxk_lib_need(c, 0, q->rows + 1, 1, q->rows + 1, is));
  if (q->nnz) {
    ACXCHECK(acxk_lib_need(c, 1, q->nnz, 1, q->nnz, is));
    ACXCHECK(acxk_lib_need(c, 2, q->nnz, 1, q->nnz, es));
  }
  if (spmm) {
    ACXCHECK(acxk_lib_need(c, 3, k, q->n, q->ldb, es));
    ACXCHECK(acxk_lib_need(c, 4, m, q->n, q->ldc, es));
    if (m == 0 || q->n == 0) return ACX_OK; /* C is empty: nothing to write */
  } else {
    if (k) ACXCHECK(acxk_lib_need(c, 3, k, 1, k, es));
    if (m) ACXCHECK(acxk_lib_need(c, 4, m, 1, m, es));
    if (m == 0) return ACX_OK;
  }
  cusparseHandle_t h = NULL;
  ACXCHECK(handle(c, &h));
  cudaDataType vt = q->dtype == ACX_DTYPE_F64 ? CUDA_R_64F : CUDA_R_32F;
  cusparseIndexType_t it = q->index == ACX_DTYPE_I64 ? CUSPARSE_INDEX_64I : CUSPARSE_INDEX_32I;
  cusparseOperation_t op = t ? CUSPARSE_OPERATION_TRANSPOSE : CUSPARSE_OPERATION_NON_TRANSPOSE;
  double a64 = q->alpha, b64 = q->beta;
  float a32 = (float)q->alpha, b32 = (float)q->beta;
  const void *alpha = q->dtype == ACX_DTYPE_F64 ? (const void *)&a64 : (const void *)&a32;
  const void *beta = q->dtype == ACX_DTYPE_F64 ? (const void *)&b64 : (const void *)&b32;
  acx_status_t st = ACX_OK;
  cusparseSpMatDescr_t A = NULL;
  cusparseDnVecDescr_t X = NULL, Y = NULL;
  cusparseDnMatDescr_t B = NULL, C = NULL;
  size_t bytes = 0;
  void *ws = NULL;
  SPCHECK(cusparseCreateCsr(&A, q->rows, q->cols, q->nnz, c->ptr[0], c->ptr[1], c->ptr[2], it, it,
                            q->base ? CUSPARSE_INDEX_BASE_ONE : CUSPARSE_INDEX_BASE_ZERO, vt));
  if (spmm) {
    /* k = 0 leaves B without rows; cuSPARSE still wants a valid leading dimension. */
    SPCHECK(cusparseCreateDnMat(&B, k, q->n, q->ldb, c->ptr[3], vt, CUSPARSE_ORDER_COL));
    SPCHECK(cusparseCreateDnMat(&C, m, q->n, q->ldc, c->ptr[4], vt, CUSPARSE_ORDER_COL));
    SPCHECK(cusparseSpMM_bufferSize(h, op, CUSPARSE_OPERATION_NON_TRANSPOSE, alpha, A, B, beta, C, vt,
                                    CUSPARSE_SPMM_ALG_DEFAULT, &bytes));
    st = acxk_lib_workspace(c, ACX_LIB_CUSPARSE, bytes, &ws);
    if (st != ACX_OK) goto out;
    SPCHECK(cusparseSpMM(h, op, CUSPARSE_OPERATION_NON_TRANSPOSE, alpha, A, B, beta, C, vt, CUSPARSE_SPMM_ALG_DEFAULT,
                         ws));
  } else {
    SPCHECK(cusparseCreateDnVec(&X, k, c->ptr[3], vt));
    SPCHECK(cusparseCreateDnVec(&Y, m, c->ptr[4], vt));
    SPCHECK(cusparseSpMV_bufferSize(h, op, alpha, A, X, beta, Y, vt, CUSPARSE_SPMV_ALG_DEFAULT, &bytes));
    st = acxk_lib_workspace(c, ACX_LIB_CUSPARSE, bytes, &ws);
    if (st != ACX_OK) goto out;
    SPCHECK(cusparseSpMV(h, op, alpha, A, X, beta, Y, vt, CUSPARSE_SPMV_ALG_DEFAULT, ws));
  }
out:
  if (A) (void)cusparseDestroySpMat(A);
  if (X) (void)cusparseDestroyDnVec(X);
  if (Y) (void)cusparseDestroyDnVec(Y);
  if (B) (void)cusparseDestroyDnMat(B);
  if (C) (void)cusparseDestroyDnMat(C);
  return st;
}
