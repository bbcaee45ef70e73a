/* cuDNN, executor side: one cudnnHandle_t per engine stream (cudnnSetStream at creation), created
 * on first use in this executor incarnation; tensor, filter, convolution, activation and pooling
 * descriptors made per request and destroyed once the work is enqueued (host objects the enqueued
 * work does not refer to). The convolution's algorithm comes from
 * cudnnGetConvolutionForwardAlgorithm_v7, the first of its ranked results that accepts the
 * request's math mode; its workspace from the per-stream library workspace.
 *
 * cuDNN 9 marks this descriptor API deprecated (cudnn_ops.h, cudnn_cnn.h) in favour of the graph
 * API, but it is complete for these forward operations and still shipped. The deprecation
 * warnings appear only when CUDNN_WARN_DEPRECATED is defined, which acx does not do, so no
 * pragma is needed around the calls with -Werror. */
#include <inttypes.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "acx/dnn.h"
#include "kernels/libs/lib_exec.h"
#include "runtime/base/log.h"


typedef struct dnn_state {
  cudnnHandle_t h[ACXI_MAX_STREAMS];
} dnn_state_t;

static acx_status_t fail(acxk_lib_call_t *c, cudnnStatus_t s, const char *call) {
  int oom = s == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
            s == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED;
  return acxk_lib_fail(c, ACX_LIB_CUDNN, (int)s, cudnnGetErrorString(s), call, oom);
}

/* Inside a handler: on failure, remember the status and leave through the cleanup. */
#define DNNCHECK(call)                                                                             \
  do {                                                                                             \
    cudnnStatus_t acxk_dnn_ = (call);                                                              \
    if (acxk_dnn_ != CUDNN_STATUS_SUCCESS) {                                                       \
      st = fail(c, acxk_dnn_, #call);                                                              \
      goto out;                                                                                    \
    }                                                                                              \
  } while (0)

void acxk_dnn_exec_destroy(void *state) {
  dnn_state_t *s = state;
  for (int i = 0; i < ACXI_MAX_STREAMS; i++)
    if (s->h[i]) (void)cudnnDestroy(s->h[i]);
  free(s);
}

static acx_status_t handle(acxk_lib_call_t *c, cudnnHandle_t *out) {
  void **slot = acxk_lib_state(c, ACX_LIB_CUDNN);
  if (!*slot && !(*slot = calloc(1, sizeof(dnn_state_t)))) return ACX_ERR_NO_MEMORY;
  dnn_state_t *s = *slot;
  uint32_t i = c->cmd->stream;
  if (i >= ACXI_MAX_STREAMS) return acxk_lib_bad(c, ACX_ERR_INVALID_ARG, "stream index beyond the cuDNN handle table");
  if (!s->h[i]) {
    cudnnHandle_t h = NULL;
    cudnnStatus_t ds = cudnnCreate(&h);
    if (ds != CUDNN_STATUS_SUCCESS) return fail(c, ds, "cudnnCreate");
    ds = cudnnSetStream(h, (cudaStream_t)c->stream);
    if (ds != CUDNN_STATUS_SUCCESS) {
      (void)cudnnDestroy(h);
      return fail(c, ds, "cudnnSetStream");
    }
    s->h[i] = h;
    ACX_INFO(LIB, "cuDNN %zu handle for stream %u", cudnnGetVersion(), i);
  }
  *out = s->h[i];
  return ACX_OK;
}

/* The operand must hold a packed tensor of these dimensions (a rank-side bug must not become a
 * wild write). */
static acx_status_t need(acxk_lib_call_t *c, int idx, const int64_t d[4], size_t es) {
  for (int i = 0; i < 4; i++)
    if (d[i] < 1 || d[i] > INT32_MAX) return acxk_lib_bad(c, ACX_ERR_INVALID_ARG, "a cuDNN tensor dimension is malformed");
  return acxk_lib_need(c, idx, d[0] * d[1], d[2] * d[3], d[0] * d[1], es);
}

static cudnnStatus_t set4d(cudnnTensorDescriptor_t t, cudnnDataType_t dt, const int64_t d[4]) {
  return cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, dt, (int)d[0], (int)d[1], (int)d[2], (int)d[3]);
}

/* Scalars: float for f32 and f16 data (cuDNN's rule). */
typedef struct scal {
  float alpha, beta;
} scal_t;

static acx_status_t conv(acxk_lib_call_t *c, cudnnHandle_t h, cudnnDataType_t dt) {
  const acxk_dnn_desc_t *q = &c->d.u.dnn;
  acx_status_t st = ACX_OK;
  cudnnTensorDescriptor_t X = NULL, Y = NULL;
  cudnnFilterDescriptor_t W = NULL;
  cudnnConvolutionDescriptor_t C = NULL;
  scal_t s = {(float)q->alpha, (float)q->beta};
  DNNCHECK(cudnnCreateTensorDescriptor(&X));
  DNNCHECK(cudnnCreateTensorDescriptor(&Y));
  DNNCHECK(cudnnCreateFilterDescriptor(&W));
  DNNCHECK(cudnnCreateConvolutionDescriptor(&C));
  DNNCHECK(set4d(X, dt, q->x));
  DNNCHECK(set4d(Y, dt, q->y));
  DNNCHECK(cudnnSetFilter4dDescriptor(W, dt, CUDNN_TENSOR_NCHW, (int)q->w[0], (int)q->w[1], (int)q->w[2], (int)q->w[3]));
  /* f32 and f16 data both accumulate in f32. */
  DNNCHECK(cudnnSetConvolution2dDescriptor(C, q->pad[0], q->pad[1], q->stride[0], q->stride[1], q->dilation[0],
                                           q->dilation[1], CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  /* Strict f32 unless the caller allows TF32: DEFAULT_MATH lets cuDNN use TF32 on Ampere and
   * later. f16 may always use tensor cores. */
  cudnnMathType_t math = dt == CUDNN_DATA_HALF ? CUDNN_TENSOR_OP_MATH : q->allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
  DNNCHECK(cudnnSetConvolutionMathType(C, math));
  int on = 0, ow = 0, oc = 0, oh = 0;
  DNNCHECK(cudnnGetConvolution2dForwardOutputDim(C, X, W, &on, &oc, &oh, &ow));
  if (on != q->y[0] || oc != q->y[1] || oh != q->y[2] || ow != q->y[3]) {
    st = acxk_lib_bad(c, ACX_ERR_INVALID_ARG, "the convolution's output shape disagrees with y");
    goto out;
  }
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int n = 0;
  DNNCHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, X, W, C, Y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf));
  /* Ranked best first; an algorithm that does not take this math mode answers NOT_SUPPORTED to
   * the workspace query or the call itself: try the next. */
  cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
  for (int i = 0; i < n; i++) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (dt == CUDNN_DATA_FLOAT && !q->allow_tf32 && perf[i].mathType != CUDNN_FMA_MATH &&
        perf[i].mathType != CUDNN_DEFAULT_MATH)
      continue; /* a tensor-core algorithm: not strict f32 */
    size_t bytes = 0;
    last = cudnnGetConvolutionForwardWorkspaceSize(h, X, W, C, Y, perf[i].algo, &bytes);
    if (last == CUDNN_STATUS_NOT_SUPPORTED) continue;
    if (last != CUDNN_STATUS_SUCCESS) break;
    void *ws = NULL;
    st = acxk_lib_workspace(c, ACX_LIB_CUDNN, bytes, &ws);
    if (st != ACX_OK) goto out;
    last = cudnnConvolutionForward(h, &s.alpha, X, c->ptr[0], W, c->ptr[1], C, perf[i].algo, ws, bytes, &s.beta, Y,
                                   c->ptr[2]);
    if (last != CUDNN_STATUS_NOT_SUPPORTED) break;
  }
  if (last != CUDNN_STATUS_SUCCESS) st = fail(c, last, "cudnnConvolutionForward (algorithms of cudnnGetConvolutionForwardAlgorithm_v7)");
out:
  if (X) (void)cudnnDestroyTensorDescriptor(X);
  if (Y) (void)cudnnDestroyTensorDescriptor(Y);
  if (W) (void)cudnnDestroyFilterDescriptor(W);
  if (C) (void)cudnnDestroyConvolutionDescriptor(C);
  return st;
}

static acx_status_t pointwise(acxk_lib_call_t *c, cudnnHandle_t h, cudnnDataType_t dt) {
  const acxk_dnn_desc_t *q = &c->d.u.dnn;
  acx_status_t st = ACX_OK;
  cudnnTensorDescriptor_t X = NULL, Y = NULL, P = NULL;
  cudnnActivationDescriptor_t A = NULL;
  cudnnPoolingDescriptor_t PL = NULL;
  scal_t s = {(float)q->alpha, (float)q->beta};
  DNNCHECK(cudnnCreateTensorDescriptor(&X));
  DNNCHECK(cudnnCreateTensorDescriptor(&Y));
  DNNCHECK(set4d(X, dt, q->x));
  DNNCHECK(set4d(Y, dt, q->y));
  switch (c->cmd->op) {
    case ACXK_OP_DNN_ACTIVATION_FWD: {
      static const cudnnActivationMode_t modes[] = {CUDNN_ACTIVATION_RELU, CUDNN_ACTIVATION_SIGMOID,
                                                    CUDNN_ACTIVATION_TANH};
      if (q->mode > 2) {
        st = acxk_lib_bad(c, ACX_ERR_INVALID_ARG, "unknown activation mode");
        goto out;
      }
      DNNCHECK(cudnnCreateActivationDescriptor(&A));
      DNNCHECK(cudnnSetActivationDescriptor(A, modes[q->mode], CUDNN_PROPAGATE_NAN, 0.0));
      DNNCHECK(cudnnActivationForward(h, A, &s.alpha, X, c->ptr[0], &s.beta, Y, c->ptr[1]));
      break;
    }
    case ACXK_OP_DNN_SOFTMAX_FWD:
      if (q->alg > 1 || q->mode > 1) {
        st = acxk_lib_bad(c, ACX_ERR_INVALID_ARG, "unknown softmax algorithm or mode");
        goto out;
      }
      DNNCHECK(cudnnSoftmaxForward(h, q->alg ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE,
                                   q->mode ? CUDNN_SOFTMAX_MODE_CHANNEL : CUDNN_SOFTMAX_MODE_INSTANCE, &s.alpha, X,
                                   c->ptr[0], &s.beta, Y, c->ptr[1]));
      break;
    case ACXK_OP_DNN_POOLING_FWD: {
      static const cudnnPoolingMode_t modes[] = {CUDNN_POOLING_MAX, CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
                                                 CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING};
      if (q->mode > 2) {
        st = acxk_lib_bad(c, ACX_ERR_INVALID_ARG, "unknown pooling mode");
        goto out;
      }
      DNNCHECK(cudnnCreatePoolingDescriptor(&PL));
      DNNCHECK(cudnnSetPooling2dDescriptor(PL, modes[q->mode], CUDNN_PROPAGATE_NAN, q->window[0], q->window[1],
                                           q->pad[0], q->pad[1], q->stride[0], q->stride[1]));
      int on = 0, oc = 0, oh = 0, ow = 0;
      DNNCHECK(cudnnGetPooling2dForwardOutputDim(PL, X, &on, &oc, &oh, &ow));
      if (on != q->y[0] || oc != q->y[1] || oh != q->y[2] || ow != q->y[3]) {
        st = acxk_lib_bad(c, ACX_ERR_INVALID_ARG, "the pooling's output shape disagrees with y");
        goto out;
      }
      DNNCHECK(cudnnPoolingForward(h, PL, &s.alpha, X, c->ptr[0], &s.beta, Y, c->ptr[1]));
      break;
    }
    case ACXK_OP_DNN_BATCHNORM_INFER: {
      const int64_t pd[4] = {1, q->x[1], 1, 1};
      for (int i = 2; i < 6; i++) ACXCHECKGOTO(acxk_lib_need(c, i, q->x[1], 1, q->x[1], 4), st, out);
      DNNCHECK(cudnnCreateTensorDescriptor(&P));
      DNNCHECK(set4d(P, CUDNN_DATA_FLOAT, pd)); /* f32 parameters for f32 and f16 data */
      DNNCHECK(cudnnBatchNormalizationForwardInference(h, CUDNN_BATCHNORM_SPATIAL, &s.alpha, &s.beta, X, c->ptr[0], Y,
                                                       c->ptr[1], P, c->ptr[2], c->ptr[3], c->ptr[4], c->ptr[5],
                                                       q->epsilon));
      break;
    }
    default: st = acxk_lib_bad(c, ACX_ERR_NOT_SUPPORTED, "unknown cuDNN op");
  }
out:
  if (X) (void)cudnnDestroyTensorDescriptor(X);
  if (Y) (void)cudnnDestroyTensorDescriptor(Y);
  if (P) (void)cudnnDestroyTensorDescriptor(P);
  if (A) (void)cudnnDestroyActivationDescriptor(A);
  if (PL) (void)cudnnDestroyPoolingDescriptor(PL);
  return st;
}

acx_status_t acxk_dnn_exec(acxk_lib_call_t *c) {
  const acxk_dnn_desc_t *q = &c->d.u.dnn;
  if (q->dtype != ACX_DTYPE_F32 && q->dtype != ACX_DTYPE_F16)
    return acxk_lib_bad(c, ACX_ERR_BAD_DTYPE, "malformed cuDNN descriptor (dtype)");
  cudnnDataType_t dt = q->dtype == ACX_DTYPE_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
  size_t es = q->dtype == ACX_DTYPE_F16 ? 2 : 4;
  int is_conv = c->cmd->op == ACXK_OP_DNN_CONV_FWD;
  ACXCHECK(need(c, 0, q->x, es));
  ACXCHECK(need(c, is_conv ? 2 : 1, q->y, es));
  if (is_conv) ACXCHECK(need(c, 1, q->w, es));
  cudnnHandle_t h = NULL;
  ACXCHECK(handle(c, &h));
  return is_conv ? conv(c, h, dt) : pointwise(c, h, dt);
}
