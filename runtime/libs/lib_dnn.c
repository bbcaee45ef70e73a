/* cuDNN context, rank side: validates convolution, activation, softmax, pooling and batch-norm
 * requests (shapes, geometry, dtypes, extents, overlaps, generations) before anything is enqueued
 * and submits them to the executor (lib_dnn_exec.c). Built without cuDNN, a valid request is
 * refused with ACX_ERR_NOT_SUPPORTED. No CUDA header. */
#include <inttypes.h>
#include <stdlib.h>

#include "acx/dnn.h"
#include "runtime/libs/lib_internal.h"
#include "runtime/device/device_internal.h"
#include "runtime/base/log.h"

struct acx_dnn {
  acxk_lib_ctx_t *ctx;
};

#define DATA (ACXK_DT(ACX_DTYPE_F32) | ACXK_DT(ACX_DTYPE_F16))
#define BN_MIN_EPSILON 1e-5 /* CUDNN_BN_MIN_EPSILON */

int acx_dnn_available(void) { return ACX_HAVE_CUDNN; }

acx_status_t acx_dnn_create(acx_device_t *dev, const acx_lib_config_t *cfg, acx_dnn_t **dnn) {
  ACX_CHECK_NULL(dev);
  ACX_CHECK_NULL(dnn);
  *dnn = NULL;
  acx_dnn_t *d = calloc(1, sizeof *d);
  if (!d) return ACX_ERR_NO_MEMORY;
  acx_status_t st = acxk_lib_ctx_create(dev, cfg, ACX_LIB_CUDNN, &d->ctx);
  if (st != ACX_OK) {
    free(d);
    return st;
  }
  if (!ACX_HAVE_CUDNN)
    ACX_INFO(LIB, "acx_dnn_create: this libacx was built without cuDNN; requests will be validated, then refused");
  *dnn = d;
  return ACX_OK;
}

acx_status_t acx_dnn_destroy(acx_dnn_t *dnn) {
  if (!dnn) return ACX_OK;
  acx_status_t st = acxk_lib_ctx_destroy(dnn->ctx);
  free(dnn);
  return st;
}

static acx_status_t submit(acx_dnn_t *d, const char *fn, acxk_req_t *req, acx_future_t **done) {
#if !ACX_HAVE_CUDNN
  (void)d;
  (void)req;
  (void)done;
  ACX_WARN(LIB, "%s: the request is valid, but this libacx was built without cuDNN (configure did not find it)", fn);
  return ACX_ERR_NOT_SUPPORTED;
#else
  return acxk_lib_submit(d->ctx, fn, req, done, NULL);
#endif
}

/* Operand idx: tensor t (packed NCHW) of the given dtype (0: f32 or f16). */
static acx_status_t tensor(acx_dnn_t *d, const char *fn, const char *name, const acx_dnn_tensor_t *t, acxk_req_t *req,
                           int idx, int writes, int64_t dims[4]) {
  if (!t) {
    ACX_WARN(LIB, "%s: argument '%s' is NULL", fn, name);
    return ACX_ERR_NULL_ARG;
  }
  const int64_t v[4] = {t->n, t->c, t->h, t->w};
  for (int i = 0; i < 4; i++)
    ACX_CHECK_ARG(v[i] >= 1 && v[i] <= INT32_MAX, "%s: argument '%s' is %" PRId64 " x %" PRId64 " x %" PRId64 " x %" PRId64
                  ": each dimension must be in [1, 2^31)", fn, name, t->n, t->c, t->h, t->w);
  /* cuDNN's tensor strides are int: n's stride c*h*w must fit too. */
  uint64_t chw = (uint64_t)t->c * (uint64_t)t->h * (uint64_t)t->w;
  if (chw > INT32_MAX || chw > UINT64_MAX / (uint64_t)t->n) {
    ACX_WARN(LIB, "%s: argument '%s' has %" PRIu64 " elements per image: more than cuDNN's int strides hold", fn, name, chw);
    return ACX_ERR_OVERFLOW;
  }
  ACXCHECK(acxk_lib_check_buf(d->ctx, fn, name, t->buf, 0, DATA));
  uint64_t elems = chw * (uint64_t)t->n;
  ACXCHECK(acxk_req_vector(req, idx, fn, name, t->buf, t->offset, (int64_t)elems, 1, writes));
  for (int i = 0; i < 4; i++) dims[i] = v[i];
  return ACX_OK;
}

static acx_status_t same_dtype(const char *fn, const char *a, const acx_buffer_t *x, const char *b, const acx_buffer_t *y) {
  if (x->dtype == y->dtype) return ACX_OK;
  ACX_WARN(LIB, "%s: argument '%s' is %s but '%s' is %s", fn, b, acx_dtype_name(y->dtype), a, acx_dtype_name(x->dtype));
  return ACX_ERR_BAD_DTYPE;
}

static acx_status_t same_shape(const char *fn, const int64_t x[4], const int64_t y[4]) {
  for (int i = 0; i < 4; i++)
    ACX_CHECK_ARG(x[i] == y[i], "%s: argument 'y' is %" PRId64 " x %" PRId64 " x %" PRId64 " x %" PRId64 " but 'x' %" PRId64
                  " x %" PRId64 " x %" PRId64 " x %" PRId64, fn, y[0], y[1], y[2], y[3], x[0], x[1], x[2], x[3]);
  return ACX_OK;
}

static acx_status_t want_dims(const char *fn, const char *name, const int64_t y[4], const int64_t n, int64_t c, int64_t h,
                              int64_t w) {
  ACX_CHECK_ARG(y[0] == n && y[1] == c && y[2] == h && y[3] == w,
                "%s: argument '%s' is %" PRId64 " x %" PRId64 " x %" PRId64 " x %" PRId64 " but the output is %" PRId64
                " x %" PRId64 " x %" PRId64 " x %" PRId64, fn, name, y[0], y[1], y[2], y[3], n, c, h, w);
  return ACX_OK;
}

static acx_status_t head(acx_dnn_t *d, const char *fn, acx_future_t **done) {
  if (done) *done = NULL;
  if (!d) {
    ACX_WARN(LIB, "%s: argument 'dnn' is NULL", fn);
    return ACX_ERR_NULL_ARG;
  }
  return ACX_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* convolution                                                                                */

static acx_status_t conv_geometry(const char *fn, const acx_dnn_conv_desc_t *d, int64_t out[4]) {
  ACX_CHECK_ARG(d->size >= sizeof(acx_dnn_conv_desc_t) && d->size <= 4096,
                "%s: argument 'd' has size %zu; initialise it with ACX_DNN_CONV_DESC_INIT", fn, d->size);
  ACX_CHECK_ARG(d->k >= 1 && d->k <= INT32_MAX && d->r >= 1 && d->r <= INT32_MAX && d->s >= 1 && d->s <= INT32_MAX,
                "%s: argument 'd': filter k=%" PRId64 " r=%" PRId64 " s=%" PRId64 " must be in [1, 2^31)", fn, d->k, d->r,
                d->s);
  ACX_CHECK_ARG(d->pad_h >= 0 && d->pad_w >= 0, "%s: argument 'd': padding %d x %d must be >= 0", fn, d->pad_h, d->pad_w);
  ACX_CHECK_ARG(d->stride_h >= 1 && d->stride_w >= 1, "%s: argument 'd': stride %d x %d must be >= 1", fn, d->stride_h,
                d->stride_w);
  ACX_CHECK_ARG(d->dilation_h >= 1 && d->dilation_w >= 1, "%s: argument 'd': dilation %d x %d must be >= 1", fn,
                d->dilation_h, d->dilation_w);
  ACX_CHECK_ARG(d->x.h >= 1 && d->x.w >= 1 && d->x.n >= 1, "%s: argument 'd->x' has an empty dimension", fn);
  /* All in int64: h, pads and dilated extents are below 2^31 each. */
  int64_t eh = (int64_t)d->dilation_h * (d->r - 1) + 1, ew = (int64_t)d->dilation_w * (d->s - 1) + 1;
  int64_t ph = d->x.h + 2 * (int64_t)d->pad_h, pw = d->x.w + 2 * (int64_t)d->pad_w;
  ACX_CHECK_ARG(eh <= ph && ew <= pw, "%s: argument 'd': the dilated filter %" PRId64 " x %" PRId64 " does not fit the "
                "padded input %" PRId64 " x %" PRId64, fn, eh, ew, ph, pw);
  out[0] = d->x.n;
  out[1] = d->k;
  out[2] = (ph - eh) / d->stride_h + 1;
  out[3] = (pw - ew) / d->stride_w + 1;
  return ACX_OK;
}

acx_status_t acx_dnn_conv_output_dims(const acx_dnn_conv_desc_t *d, int64_t *n, int64_t *c, int64_t *h, int64_t *w) {
  ACX_CHECK_NULL(d);
  int64_t o[4];
  ACXCHECK(conv_geometry("acx_dnn_conv_output_dims", d, o));
  if (n) *n = o[0];
  if (c) *c = o[1];
  if (h) *h = o[2];
  if (w) *w = o[3];
  return ACX_OK;
}

acx_status_t acx_dnn_conv_forward(acx_dnn_t *dnn, const acx_dnn_conv_desc_t *d, acx_future_t **done) {
  static const char fn[] = "acx_dnn_conv_forward";
  ACXCHECK(head(dnn, fn, done));
  ACX_CHECK_NULL(d);
  int64_t o[4];
  ACXCHECK(conv_geometry(fn, d, o));
  acxk_req_t req;
  acxk_req_init(&req, ACXK_OP_DNN_CONV_FWD);
  acxk_dnn_desc_t *q = &req.d.u.dnn;
  ACXCHECK(tensor(dnn, fn, "d->x", &d->x, &req, 0, 0, q->x));
  ACXCHECK(tensor(dnn, fn, "d->y", &d->y, &req, 2, 1, q->y));
  ACXCHECK(want_dims(fn, "d->y", q->y, o[0], o[1], o[2], o[3]));
  ACXCHECK(acxk_lib_check_buf(dnn->ctx, fn, "d->w", d->w, 0, DATA));
  ACXCHECK(same_dtype(fn, "d->x", d->x.buf, "d->y", d->y.buf));
  ACXCHECK(same_dtype(fn, "d->x", d->x.buf, "d->w", d->w));
  uint64_t crs = (uint64_t)d->x.c * (uint64_t)d->r * (uint64_t)d->s;
  if (crs > INT32_MAX || crs > UINT64_MAX / (uint64_t)d->k) {
    ACX_WARN(LIB, "%s: the filter's %" PRIu64 " elements per output channel exceed cuDNN's int strides", fn, crs);
    return ACX_ERR_OVERFLOW;
  }
  ACXCHECK(acxk_req_vector(&req, 1, fn, "d->w", d->w, d->w_offset, (int64_t)(crs * (uint64_t)d->k), 1, 0));
  ACXCHECK(acxk_req_disjoint(&req, fn, 2, 0));
  ACXCHECK(acxk_req_disjoint(&req, fn, 2, 1));
  q->dtype = (uint32_t)d->x.buf->dtype;
  q->w[0] = d->k, q->w[1] = d->x.c, q->w[2] = d->r, q->w[3] = d->s;
  q->pad[0] = d->pad_h, q->pad[1] = d->pad_w;
  q->stride[0] = d->stride_h, q->stride[1] = d->stride_w;
  q->dilation[0] = d->dilation_h, q->dilation[1] = d->dilation_w;
  q->alpha = d->alpha;
  q->beta = d->beta;
  q->allow_tf32 = d->allow_tf32 != 0;
  return submit(dnn, fn, &req, done);
}

/* ------------------------------------------------------------------------------------------ */
/* pointwise, softmax, pooling, batch-norm                                                     */

/* x and y of one dtype in operands 0 and 1; y may equal x exactly when in_place is allowed. */
static acx_status_t x_and_y(acx_dnn_t *dnn, const char *fn, const acx_dnn_tensor_t *x, const acx_dnn_tensor_t *y,
                            acxk_req_t *req, int in_place) {
  acxk_dnn_desc_t *q = &req->d.u.dnn;
  ACXCHECK(tensor(dnn, fn, "x", x, req, 0, 0, q->x));
  ACXCHECK(tensor(dnn, fn, "y", y, req, 1, 1, q->y));
  ACXCHECK(same_dtype(fn, "x", x->buf, "y", y->buf));
  q->dtype = (uint32_t)x->buf->dtype;
  const acxk_operand_t *a = &req->d.opnd[0], *b = &req->d.opnd[1];
  if (in_place && a->id == b->id && a->off == b->off && a->extent == b->extent) return ACX_OK;
  return acxk_req_disjoint(req, fn, 1, 0);
}

acx_status_t acx_dnn_activation_forward(acx_dnn_t *dnn, acx_dnn_activation_t mode, double alpha,
                                        const acx_dnn_tensor_t *x, double beta, const acx_dnn_tensor_t *y,
                                        acx_future_t **done) {
  static const char fn[] = "acx_dnn_activation_forward";
  ACXCHECK(head(dnn, fn, done));
  ACX_CHECK_ARG(mode == ACX_DNN_RELU || mode == ACX_DNN_SIGMOID || mode == ACX_DNN_TANH,
                "%s: argument 'mode'=%d is not an acx_dnn_activation_t", fn, (int)mode);
  acxk_req_t req;
  acxk_req_init(&req, ACXK_OP_DNN_ACTIVATION_FWD);
  ACXCHECK(x_and_y(dnn, fn, x, y, &req, 1));
  ACXCHECK(same_shape(fn, req.d.u.dnn.x, req.d.u.dnn.y));
  req.d.u.dnn.mode = (uint32_t)mode;
  req.d.u.dnn.alpha = alpha;
  req.d.u.dnn.beta = beta;
  return submit(dnn, fn, &req, done);
}

acx_status_t acx_dnn_softmax_forward(acx_dnn_t *dnn, acx_dnn_softmax_alg_t alg, acx_dnn_softmax_mode_t mode,
                                     double alpha, const acx_dnn_tensor_t *x, double beta, const acx_dnn_tensor_t *y,
                                     acx_future_t **done) {
  static const char fn[] = "acx_dnn_softmax_forward";
  ACXCHECK(head(dnn, fn, done));
  ACX_CHECK_ARG(alg == ACX_DNN_SOFTMAX_ACCURATE || alg == ACX_DNN_SOFTMAX_LOG,
                "%s: argument 'alg'=%d is not an acx_dnn_softmax_alg_t", fn, (int)alg);
  ACX_CHECK_ARG(mode == ACX_DNN_SOFTMAX_INSTANCE || mode == ACX_DNN_SOFTMAX_CHANNEL,
                "%s: argument 'mode'=%d is not an acx_dnn_softmax_mode_t", fn, (int)mode);
  acxk_req_t req;
  acxk_req_init(&req, ACXK_OP_DNN_SOFTMAX_FWD);
  ACXCHECK(x_and_y(dnn, fn, x, y, &req, 0));
  ACXCHECK(same_shape(fn, req.d.u.dnn.x, req.d.u.dnn.y));
  req.d.u.dnn.alg = (uint32_t)alg;
  req.d.u.dnn.mode = (uint32_t)mode;
  req.d.u.dnn.alpha = alpha;
  req.d.u.dnn.beta = beta;
  return submit(dnn, fn, &req, done);
}

acx_status_t acx_dnn_pooling_forward(acx_dnn_t *dnn, const acx_dnn_pool_desc_t *p, double alpha,
                                     const acx_dnn_tensor_t *x, double beta, const acx_dnn_tensor_t *y,
                                     acx_future_t **done) {
  static const char fn[] = "acx_dnn_pooling_forward";
  ACXCHECK(head(dnn, fn, done));
  ACX_CHECK_NULL(p);
  ACX_CHECK_ARG(p->size >= sizeof(acx_dnn_pool_desc_t) && p->size <= 4096,
                "%s: argument 'p' has size %zu; initialise it with ACX_DNN_POOL_DESC_INIT", fn, p->size);
  ACX_CHECK_ARG(p->mode == ACX_DNN_POOL_MAX || p->mode == ACX_DNN_POOL_AVG_INCLUDE_PAD ||
                    p->mode == ACX_DNN_POOL_AVG_EXCLUDE_PAD,
                "%s: argument 'p->mode'=%d is not an acx_dnn_pool_mode_t", fn, (int)p->mode);
  ACX_CHECK_ARG(p->window_h >= 1 && p->window_w >= 1 && p->stride_h >= 1 && p->stride_w >= 1,
                "%s: argument 'p': window %d x %d and stride %d x %d must be >= 1", fn, p->window_h, p->window_w,
                p->stride_h, p->stride_w);
  ACX_CHECK_ARG(p->pad_h >= 0 && p->pad_w >= 0 && p->pad_h < p->window_h && p->pad_w < p->window_w,
                "%s: argument 'p': padding %d x %d must be >= 0 and below the window %d x %d", fn, p->pad_h, p->pad_w,
                p->window_h, p->window_w);
  acxk_req_t req;
  acxk_req_init(&req, ACXK_OP_DNN_POOLING_FWD);
  ACXCHECK(x_and_y(dnn, fn, x, y, &req, 0));
  int64_t ph = x->h + 2 * (int64_t)p->pad_h, pw = x->w + 2 * (int64_t)p->pad_w;
  ACX_CHECK_ARG(p->window_h <= ph && p->window_w <= pw, "%s: argument 'p': the window %d x %d exceeds the padded input "
                "%" PRId64 " x %" PRId64, fn, p->window_h, p->window_w, ph, pw);
  ACXCHECK(want_dims(fn, "y", req.d.u.dnn.y, x->n, x->c, (ph - p->window_h) / p->stride_h + 1,
                     (pw - p->window_w) / p->stride_w + 1));
  acxk_dnn_desc_t *q = &req.d.u.dnn;
  q->mode = (uint32_t)p->mode;
  q->window[0] = p->window_h, q->window[1] = p->window_w;
  q->pad[0] = p->pad_h, q->pad[1] = p->pad_w;
  q->stride[0] = p->stride_h, q->stride[1] = p->stride_w;
  q->alpha = alpha;
  q->beta = beta;
  return submit(dnn, fn, &req, done);
}

acx_status_t acx_dnn_batchnorm_forward_inference(acx_dnn_t *dnn, double alpha, const acx_dnn_tensor_t *x,
                                                 double beta, const acx_dnn_tensor_t *y,
                                                 const acx_dnn_bn_params_t *bn, acx_future_t **done) {
  static const char fn[] = "acx_dnn_batchnorm_forward_inference";
  ACXCHECK(head(dnn, fn, done));
  if (!bn) {
    ACX_WARN(LIB, "%s: argument 'bn' is NULL", fn);
    return ACX_ERR_NULL_ARG;
  }
  ACX_CHECK_ARG(bn->epsilon >= BN_MIN_EPSILON, "%s: argument 'bn->epsilon'=%g is below cuDNN's minimum %g", fn,
                bn->epsilon, BN_MIN_EPSILON);
  acxk_req_t req;
  acxk_req_init(&req, ACXK_OP_DNN_BATCHNORM_INFER);
  ACXCHECK(x_and_y(dnn, fn, x, y, &req, 0));
  ACXCHECK(same_shape(fn, req.d.u.dnn.x, req.d.u.dnn.y));
  acx_buffer_t *const bufs[4] = {bn->scale, bn->bias, bn->mean, bn->var};
  const size_t offs[4] = {bn->scale_offset, bn->bias_offset, bn->mean_offset, bn->var_offset};
  static const char *const names[4] = {"bn->scale", "bn->bias", "bn->mean", "bn->var"};
  for (int i = 0; i < 4; i++) {
    ACXCHECK(acxk_lib_check_buf(dnn->ctx, fn, names[i], bufs[i], 0, ACXK_DT(ACX_DTYPE_F32)));
    ACXCHECK(acxk_req_vector(&req, 2 + i, fn, names[i], bufs[i], offs[i], x->c, 1, 0));
    ACXCHECK(acxk_req_disjoint(&req, fn, 1, 2 + i));
  }
  req.d.u.dnn.alpha = alpha;
  req.d.u.dnn.beta = beta;
  req.d.u.dnn.epsilon = bn->epsilon;
  return submit(dnn, fn, &req, done);
}
