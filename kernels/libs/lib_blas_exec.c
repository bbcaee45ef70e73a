/* cuBLAS, executor side: one cuBLAS handle per engine stream, created on first use in this
 * executor incarnation and bound to its stream once, so requests never rebind a shared handle;
 * GEMMs through cublasGemmEx / cublasGemmStridedBatchedEx (64-bit interfaces). */
#include <inttypes.h>
#include <stdlib.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "acx/blas.h"
#include "kernels/libs/lib_exec.h"
#include "runtime/base/log.h"


typedef struct blas_state {
  cublasHandle_t h[ACXI_MAX_STREAMS];
} blas_state_t;

#define BLASCHECK(c, call)                                                                          \
  do {                                                                                             \
    cublasStatus_t acxk_bs_ = (call);                                                              \
    if (acxk_bs_ != CUBLAS_STATUS_SUCCESS)                                                         \
      return acxk_lib_fail((c), ACX_LIB_CUBLAS, (int)acxk_bs_, cublasGetStatusName(acxk_bs_), #call, \
                           acxk_bs_ == CUBLAS_STATUS_ALLOC_FAILED);                                \
  } while (0)

static acx_status_t handle(acxk_lib_call_t *c, cublasHandle_t *out) {
  void **slot = acxk_lib_state(c, ACX_LIB_CUBLAS);
  if (!*slot) {
    *slot = calloc(1, sizeof(blas_state_t));
    if (!*slot) return ACX_ERR_NO_MEMORY;
  }
  blas_state_t *s = *slot;
  uint32_t i = c->cmd->stream;
  if (i >= ACXI_MAX_STREAMS) return acxk_lib_bad(c, ACX_ERR_INVALID_ARG, "stream index beyond the cuBLAS handle table");
  if (!s->h[i]) {
    cublasHandle_t h = NULL;
    BLASCHECK(c, cublasCreate(&h));
    cublasStatus_t bs = cublasSetStream(h, (cudaStream_t)c->stream);
    if (bs != CUBLAS_STATUS_SUCCESS) {
      (void)cublasDestroy(h);
      return acxk_lib_fail(c, ACX_LIB_CUBLAS, (int)bs, cublasGetStatusName(bs), "cublasSetStream", 0);
    }
    s->h[i] = h;
  }
  *out = s->h[i];
  return ACX_OK;
}

void acxk_blas_exec_destroy(void *state) {
  blas_state_t *s = state;
  for (int i = 0; i < ACXI_MAX_STREAMS; i++)
    if (s->h[i]) (void)cublasDestroy(s->h[i]);
  free(s);
}

static acx_status_t data_type(acxk_lib_call_t *c, uint32_t dt, cudaDataType *out) {
  switch (dt) {
    case ACX_DTYPE_F32: *out = CUDA_R_32F; return ACX_OK;
    case ACX_DTYPE_F64: *out = CUDA_R_64F; return ACX_OK;
    case ACX_DTYPE_F16: *out = CUDA_R_16F; return ACX_OK;
    case ACX_DTYPE_BF16: *out = CUDA_R_16BF; return ACX_OK;
    default: return acxk_lib_bad(c, ACX_ERR_BAD_DTYPE, "BLAS dtype is not f32, f64, f16 or bf16");
  }
}

static cublasOperation_t op_of(uint32_t t) { return t == ACX_BLAS_T ? CUBLAS_OP_T : CUBLAS_OP_N; }

static acx_status_t gemm(acxk_lib_call_t *c, cublasHandle_t h) {
  const acxk_blas_desc_t *q = &c->d.u.blas;
  cudaDataType t = CUDA_R_32F;
  ACXCHECK(data_type(c, q->dtype, &t));
  cublasComputeType_t ct;
  /* Scalars follow the compute type: double for 64F, float for every 32F variant. */
  double a64 = q->alpha, b64 = q->beta;
  float a32 = (float)q->alpha, b32 = (float)q->beta;
  const void *alpha = &a32, *beta = &b32;
  if (q->dtype == ACX_DTYPE_F64) {
    ct = CUBLAS_COMPUTE_64F;
    alpha = &a64;
    beta = &b64;
  } else {
    switch (q->compute) {
      case ACX_BLAS_COMPUTE_F32_FAST_TF32: ct = CUBLAS_COMPUTE_32F_FAST_TF32; break;
      case ACX_BLAS_COMPUTE_F32_FAST_BF16: ct = CUBLAS_COMPUTE_32F_FAST_16BF; break;
      case ACX_BLAS_COMPUTE_F32_FAST_F16: ct = CUBLAS_COMPUTE_32F_FAST_16F; break;
      default: ct = CUBLAS_COMPUTE_32F; break;
    }
  }
  BLASCHECK(c, cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
  if (q->batch == 1) {
    BLASCHECK(c, cublasGemmEx_64(h, op_of(q->transa), op_of(q->transb), q->m, q->n, q->k, alpha, c->ptr[0], t, q->lda,
                                 c->ptr[1], t, q->ldb, beta, c->ptr[2], t, q->ldc, ct, CUBLAS_GEMM_DEFAULT));
  } else {
    BLASCHECK(c, cublasGemmStridedBatchedEx_64(h, op_of(q->transa), op_of(q->transb), q->m, q->n, q->k, alpha,
                                               c->ptr[0], t, q->lda, q->stride_a, c->ptr[1], t, q->ldb, q->stride_b,
                                               beta, c->ptr[2], t, q->ldc, q->stride_c, q->batch, ct,
                                               CUBLAS_GEMM_DEFAULT));
  }
  return ACX_OK;
}

static acx_status_t gemv(acxk_lib_call_t *c, cublasHandle_t h) {
  const acxk_blas_desc_t *q = &c->d.u.blas;
  BLASCHECK(c, cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
  if (q->dtype == ACX_DTYPE_F64) {
    double a = q->alpha, b = q->beta;
    BLASCHECK(c, cublasDgemv_64(h, op_of(q->transa), q->m, q->n, &a, c->ptr[0], q->lda, c->ptr[1], q->incx, &b,
                                c->ptr[2], q->incy));
  } else if (q->dtype == ACX_DTYPE_F32) {
    float a = (float)q->alpha, b = (float)q->beta;
    BLASCHECK(c, cublasSgemv_64(h, op_of(q->transa), q->m, q->n, &a, c->ptr[0], q->lda, c->ptr[1], q->incx, &b,
                                c->ptr[2], q->incy));
  } else {
    return acxk_lib_bad(c, ACX_ERR_BAD_DTYPE, "gemv dtype is not f32 or f64");
  }
  return ACX_OK;
}

/* Level 1: f16 and bf16 execute in f32; alpha has the execution type. */
static acx_status_t level1(acxk_lib_call_t *c, cublasHandle_t h) {
  const acxk_blas_desc_t *q = &c->d.u.blas;
  cudaDataType t = CUDA_R_32F, exec;
  ACXCHECK(data_type(c, q->dtype, &t));
  exec = q->dtype == ACX_DTYPE_F64 ? CUDA_R_64F : CUDA_R_32F;
  double a64 = q->alpha;
  float a32 = (float)q->alpha;
  const void *alpha = exec == CUDA_R_64F ? (const void *)&a64 : (const void *)&a32;
  switch (c->cmd->op) {
    case ACXK_OP_BLAS_AXPY:
      BLASCHECK(c, cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
      BLASCHECK(c, cublasAxpyEx_64(h, q->n, alpha, exec, c->ptr[0], t, q->incx, c->ptr[1], t, q->incy, exec));
      return ACX_OK;
    case ACXK_OP_BLAS_SCAL:
      BLASCHECK(c, cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
      BLASCHECK(c, cublasScalEx_64(h, q->n, alpha, exec, c->ptr[0], t, q->incx, exec));
      return ACX_OK;
    default:
      break;
  }
  /* dot / nrm2: the result is written on the device (device pointer mode: no host sync), into the
   * caller's buffer or into a scratch slot that is read back with the reply. */
  void *res = c->ptr[2];
  if (!res) {
    c->readback = ACXK_READBACK_VALUE;
    c->readback_dtype = q->dtype;
    ACXCHECK(acxk_lib_scratch(c, &res));
  }
  BLASCHECK(c, cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
  if (c->cmd->op == ACXK_OP_BLAS_DOT)
    BLASCHECK(c, cublasDotEx_64(h, q->n, c->ptr[0], t, q->incx, c->ptr[1], t, q->incy, res, t, exec));
  else
    BLASCHECK(c, cublasNrm2Ex_64(h, q->n, c->ptr[0], t, q->incx, res, t, exec));
  return ACX_OK;
}

acx_status_t acxk_blas_exec(acxk_lib_call_t *c) {
  cublasHandle_t h = NULL;
  ACXCHECK(handle(c, &h));
  switch (c->cmd->op) {
    case ACXK_OP_BLAS_GEMM: return gemm(c, h);
    case ACXK_OP_BLAS_GEMV: return gemv(c, h);
    case ACXK_OP_BLAS_AXPY:
    case ACXK_OP_BLAS_SCAL:
    case ACXK_OP_BLAS_DOT:
    case ACXK_OP_BLAS_NRM2: return level1(c, h);
    default: return acxk_lib_bad(c, ACX_ERR_NOT_SUPPORTED, "unknown BLAS op");
  }
}
