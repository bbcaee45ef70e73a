/* cuDNN through acx: forward convolution, activation, softmax, pooling and batch-norm inference on
 * NCHW tensors in acx buffers (cuDNN's descriptor API; the convolution's algorithm chosen by
 * cudnnGetConvolutionForwardAlgorithm_v7, its workspace sized by
 * cudnnGetConvolutionForwardWorkspaceSize and taken from the executor's per-stream library
 * workspace).
 *
 * Tensors are packed NCHW (w fastest) of f32 or f16, the dtype of their buffer; a request's
 * tensors share one dtype. Scalars alpha and beta blend as in cuDNN: y = alpha op(x) + beta y
 * (beta = 0: y is not read). Batch-norm parameters are f32 for both data dtypes, as cuDNN wants.
 *
 * acx is built with cuDNN when configure finds it (cmake/FindCUDNN.cmake, hint CUDNN_HOME);
 * without it every request is validated and then returns ACX_ERR_NOT_SUPPORTED (as on a
 * host-kind device).
 *
 * Threads and completion as in acx/lib.h. Statuses besides those of acx/lib.h and acx/device.h:
 * ACX_ERR_NULL_ARG, ACX_ERR_INVALID_ARG (dimensions, modes, windows, padding, strides, overlaps:
 * the log names the argument), ACX_ERR_BAD_DTYPE, ACX_ERR_OUT_OF_RANGE, ACX_ERR_OVERFLOW,
 * ACX_ERR_STALE_BUFFER, ACX_ERR_INVALID_STATE, ACX_ERR_NOT_SUPPORTED (host kind, or no cuDNN in
 * this build), ACX_ERR_LIBRARY (cudnnStatus_t in lib_code; no convolution algorithm for a case
 * gives CUDNN_STATUS_NOT_SUPPORTED), ACX_ERR_DEVICE_OOM. */
#ifndef ACX_DNN_H
#define ACX_DNN_H

/* Exported from libacx, which hides everything else (cmake/libacx.map). */
#pragma GCC visibility push(default)

#include "acx/lib.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct acx_dnn acx_dnn_t;

/* A packed NCHW tensor in a buffer (a plain description: it holds no reference). Each dimension
 * in [1, 2^31). */
typedef struct acx_dnn_tensor {
  int64_t n, c, h, w;
  acx_buffer_t *buf; /* f32 or f16 */
  size_t offset;     /* bytes */
} acx_dnn_tensor_t;

/* Creates a cuDNN context (also without cuDNN: its requests are then refused). Statuses as
 * acx_blas_create. */
acx_status_t acx_dnn_create(acx_device_t *dev, const acx_lib_config_t *cfg, acx_dnn_t **dnn);
/* As acx_blas_destroy. */
acx_status_t acx_dnn_destroy(acx_dnn_t *dnn);
/* 1 when this libacx was built with cuDNN. Any thread. */
int acx_dnn_available(void);

/* Forward convolution (cross-correlation, as deep-learning frameworks define it, one group):
 * y = alpha conv(x, w) + beta y with x n x c x h x w, the filter w k x c x r x s (KCRS packed) and
 * y n x k x oh x ow, oh = (h + 2 pad_h - dilation_h (r - 1) - 1) / stride_h + 1 (likewise ow), which
 * acx_dnn_conv_output_dims computes. f32 convolutions compute in strict f32 unless allow_tf32
 * (then cuDNN may use TF32 tensor cores: about 1e-3 relative error); f16 ones accumulate in f32. */
typedef struct acx_dnn_conv_desc {
  size_t size; /* sizeof(acx_dnn_conv_desc_t): set by ACX_DNN_CONV_DESC_INIT */
  acx_dnn_tensor_t x, y;
  acx_buffer_t *w; /* the filter, x's dtype */
  size_t w_offset;
  int64_t k, r, s; /* output channels, filter height and width */
  int pad_h, pad_w;           /* >= 0 */
  int stride_h, stride_w;     /* >= 1 */
  int dilation_h, dilation_w; /* >= 1 */
  double alpha, beta;
  int allow_tf32;
} acx_dnn_conv_desc_t;

#define ACX_DNN_CONV_DESC_INIT                                                                           \
  {.size = sizeof(acx_dnn_conv_desc_t), .stride_h = 1, .stride_w = 1, .dilation_h = 1, .dilation_w = 1, \
   .alpha = 1.0, .beta = 0.0, .allow_tf32 = 0}

/* The output's dimensions for d's input, filter and geometry (y is not looked at).
 * ACX_ERR_INVALID_ARG when the filter does not fit the padded input. */
acx_status_t acx_dnn_conv_output_dims(const acx_dnn_conv_desc_t *d, int64_t *n, int64_t *c, int64_t *h, int64_t *w);
acx_status_t acx_dnn_conv_forward(acx_dnn_t *dnn, const acx_dnn_conv_desc_t *d, acx_future_t **done);

typedef enum acx_dnn_activation {
  ACX_DNN_RELU = 0,
  ACX_DNN_SIGMOID = 1,
  ACX_DNN_TANH = 2
} acx_dnn_activation_t;

/* y = alpha act(x) + beta y, x and y of one shape; y may be x itself (same buffer, offset). */
acx_status_t acx_dnn_activation_forward(acx_dnn_t *dnn, acx_dnn_activation_t mode, double alpha,
                                        const acx_dnn_tensor_t *x, double beta, const acx_dnn_tensor_t *y,
                                        acx_future_t **done);

typedef enum acx_dnn_softmax_alg {
  ACX_DNN_SOFTMAX_ACCURATE = 0, /* exp(x - max) / sum */
  ACX_DNN_SOFTMAX_LOG = 1       /* log softmax */
} acx_dnn_softmax_alg_t;

typedef enum acx_dnn_softmax_mode {
  ACX_DNN_SOFTMAX_INSTANCE = 0, /* over c x h x w for each n */
  ACX_DNN_SOFTMAX_CHANNEL = 1   /* over c for each n, h, w */
} acx_dnn_softmax_mode_t;

/* y = alpha softmax(x) + beta y, x and y of one shape, not overlapping. */
acx_status_t acx_dnn_softmax_forward(acx_dnn_t *dnn, acx_dnn_softmax_alg_t alg, acx_dnn_softmax_mode_t mode,
                                     double alpha, const acx_dnn_tensor_t *x, double beta, const acx_dnn_tensor_t *y,
                                     acx_future_t **done);

typedef enum acx_dnn_pool_mode {
  ACX_DNN_POOL_MAX = 0,
  ACX_DNN_POOL_AVG_INCLUDE_PAD = 1, /* padding counts as zeros in the mean */
  ACX_DNN_POOL_AVG_EXCLUDE_PAD = 2  /* the mean of the window's elements inside the input */
} acx_dnn_pool_mode_t;

/* 2-D pooling: y is n x c x oh x ow, oh = (h + 2 pad_h - window_h) / stride_h + 1 (likewise ow);
 * pad_h < window_h, pad_w < window_w. */
typedef struct acx_dnn_pool_desc {
  size_t size; /* sizeof(acx_dnn_pool_desc_t): set by ACX_DNN_POOL_DESC_INIT */
  acx_dnn_pool_mode_t mode;
  int window_h, window_w; /* >= 1 */
  int pad_h, pad_w;       /* >= 0 */
  int stride_h, stride_w; /* >= 1 */
} acx_dnn_pool_desc_t;

#define ACX_DNN_POOL_DESC_INIT \
  {.size = sizeof(acx_dnn_pool_desc_t), .mode = ACX_DNN_POOL_MAX, .window_h = 2, .window_w = 2, .stride_h = 2, .stride_w = 2}

acx_status_t acx_dnn_pooling_forward(acx_dnn_t *dnn, const acx_dnn_pool_desc_t *p, double alpha,
                                     const acx_dnn_tensor_t *x, double beta, const acx_dnn_tensor_t *y,
                                     acx_future_t **done);

/* Per-channel f32 vectors of batch-norm inference (c elements each, from their offsets). */
typedef struct acx_dnn_bn_params {
  acx_buffer_t *scale, *bias, *mean, *var;
  size_t scale_offset, bias_offset, mean_offset, var_offset;
  double epsilon; /* >= 1e-5 (cuDNN's CUDNN_BN_MIN_EPSILON) */
} acx_dnn_bn_params_t;

/* Spatial batch normalisation, inference: y = alpha (scale (x - mean) / sqrt(var + epsilon) +
 * bias) + beta y, per channel; x and y of one shape, not overlapping. */
acx_status_t acx_dnn_batchnorm_forward_inference(acx_dnn_t *dnn, double alpha, const acx_dnn_tensor_t *x,
                                                 double beta, const acx_dnn_tensor_t *y,
                                                 const acx_dnn_bn_params_t *bn, acx_future_t **done);

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif
