/* cuDNN through acx (runtime/libs/lib_dnn.c, lib_dnn_exec.c).
 * Default (label gpu, registered when configure found cuDNN): convolution forward (f32 strict,
 * f32 with TF32 allowed, f16; padding, strides, dilation, beta != 0) against a direct double
 * convolution; activations (relu, sigmoid, tanh; in place), softmax (accurate and log, instance
 * and channel), pooling (max, average with and without padding) and batch-norm inference against
 * double references; outputs poisoned, the element past each checked untouched; a restarted
 * executor makes new handles. --unit (label unit): validation on a host-kind device. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acx/dnn.h"
#include "acx_test.h"
#include "lib_test_util.h"

static acx_device_t *dev;
static acx_dnn_t *dnn;
static int unit_mode;

static acx_buffer_t *alloc(size_t elems, acx_dtype_t dt) {
  acx_buffer_t *b = NULL;
  ACX_ASSERT_STATUS(acx_buffer_alloc(dev, elems * acx_dtype_size(dt), dt, ACX_MEM_DEVICE, LT_TIMEOUT, &b), ACX_OK);
  return b;
}

static acx_dnn_tensor_t T(acx_buffer_t *b, int64_t n, int64_t c, int64_t h, int64_t w) {
  return (acx_dnn_tensor_t){.n = n, .c = c, .h = h, .w = w, .buf = b, .offset = 0};
}

/* ------------------------------------------------------------------------------------------ */
/* validation (host kind)                                                                      */

static void t_validation(void) {
  acx_buffer_t *x = alloc(2 * 3 * 8 * 8, ACX_DTYPE_F32), *w = alloc(4 * 3 * 3 * 3, ACX_DTYPE_F32);
  acx_buffer_t *y = alloc(2 * 4 * 8 * 8, ACX_DTYPE_F32), *h16 = alloc(2 * 4 * 8 * 8, ACX_DTYPE_F16);
  acx_buffer_t *d64 = alloc(2 * 4 * 8 * 8, ACX_DTYPE_F64), *p = alloc(16, ACX_DTYPE_F32);
  acx_dnn_conv_desc_t d = ACX_DNN_CONV_DESC_INIT;
  d.x = T(x, 2, 3, 8, 8);
  d.w = w, d.k = 4, d.r = 3, d.s = 3, d.pad_h = 1, d.pad_w = 1;
  d.y = T(y, 2, 4, 8, 8);
  int64_t on = 0, oc = 0, oh = 0, ow = 0;
  ACX_ASSERT_STATUS(acx_dnn_conv_output_dims(&d, &on, &oc, &oh, &ow), ACX_OK);
  CU_ASSERT(on == 2 && oc == 4 && oh == 8 && ow == 8);
  acx_dnn_conv_desc_t e = d;
  e.stride_h = 2, e.dilation_w = 2; /* h: (8 + 2 - 3) / 2 + 1 = 4; w: (8 + 2 - 5) + 1 = 6 */
  ACX_ASSERT_STATUS(acx_dnn_conv_output_dims(&e, &on, &oc, &oh, &ow), ACX_OK);
  CU_ASSERT(oh == 4 && ow == 6);
  ACX_ASSERT_STATUS(acx_dnn_conv_forward(dnn, &d, NULL), ACX_ERR_NOT_SUPPORTED);
  ACX_ASSERT_STATUS(acx_dnn_conv_forward(NULL, &d, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_dnn_conv_forward(dnn, NULL, NULL), ACX_ERR_NULL_ARG);
  e = d, e.size = 8;
  ACX_ASSERT_STATUS(acx_dnn_conv_forward(dnn, &e, NULL), ACX_ERR_INVALID_ARG);
  e = d, e.y.h = 7; /* not the output's shape */
  ACX_ASSERT_STATUS(acx_dnn_conv_forward(dnn, &e, NULL), ACX_ERR_INVALID_ARG);
  e = d, e.stride_w = 0;
  ACX_ASSERT_STATUS(acx_dnn_conv_forward(dnn, &e, NULL), ACX_ERR_INVALID_ARG);
  e = d, e.pad_h = -1;
  ACX_ASSERT_STATUS(acx_dnn_conv_forward(dnn, &e, NULL), ACX_ERR_INVALID_ARG);
  e = d, e.r = 11; /* larger than the padded input */
  ACX_ASSERT_STATUS(acx_dnn_conv_forward(dnn, &e, NULL), ACX_ERR_INVALID_ARG);
  e = d, e.k = 0;
  ACX_ASSERT_STATUS(acx_dnn_conv_forward(dnn, &e, NULL), ACX_ERR_INVALID_ARG);
  e = d, e.x.c = 0;
  ACX_ASSERT_STATUS(acx_dnn_conv_forward(dnn, &e, NULL), ACX_ERR_INVALID_ARG);
  e = d, e.k = 5, e.y.c = 5; /* y needs 640 elements, its buffer has 512 (the filter too few) */
  ACX_ASSERT_STATUS(acx_dnn_conv_forward(dnn, &e, NULL), ACX_ERR_OUT_OF_RANGE);
  e = d, e.y.buf = h16; /* dtypes differ */
  ACX_ASSERT_STATUS(acx_dnn_conv_forward(dnn, &e, NULL), ACX_ERR_BAD_DTYPE);
  e = d, e.y.buf = d64; /* f64 is not taken */
  ACX_ASSERT_STATUS(acx_dnn_conv_forward(dnn, &e, NULL), ACX_ERR_BAD_DTYPE);
  e = d, e.w = NULL;
  ACX_ASSERT_STATUS(acx_dnn_conv_forward(dnn, &e, NULL), ACX_ERR_NULL_ARG);
  e = d, e.y.buf = x, e.y.n = 1, e.y.c = 3; /* shape fits x's buffer, but the output overlaps x */
  e.k = 3;
  acx_buffer_t *w3 = alloc(3 * 3 * 3 * 3, ACX_DTYPE_F32);
  e.w = w3;
  e.x.n = 1;
  ACX_ASSERT_STATUS(acx_dnn_conv_forward(dnn, &e, NULL), ACX_ERR_INVALID_ARG);
  e.y.offset = 3 * 64 * 4; /* past x's first image: disjoint */
  ACX_ASSERT_STATUS(acx_dnn_conv_forward(dnn, &e, NULL), ACX_ERR_NOT_SUPPORTED);
  e = d, e.x.offset = 2; /* not a multiple of 4 */
  ACX_ASSERT_STATUS(acx_dnn_conv_forward(dnn, &e, NULL), ACX_ERR_INVALID_ARG);
  e = d, e.x.offset = 4; /* one element short */
  ACX_ASSERT_STATUS(acx_dnn_conv_forward(dnn, &e, NULL), ACX_ERR_OUT_OF_RANGE);

  /* activation, softmax */
  acx_dnn_tensor_t tx = T(x, 2, 3, 8, 8), ty = T(y, 2, 3, 8, 8);
  ACX_ASSERT_STATUS(acx_dnn_activation_forward(dnn, ACX_DNN_RELU, 1, &tx, 0, &ty, NULL), ACX_ERR_NOT_SUPPORTED);
  ACX_ASSERT_STATUS(acx_dnn_activation_forward(dnn, ACX_DNN_TANH, 1, &tx, 0, &tx, NULL), ACX_ERR_NOT_SUPPORTED);
  ACX_ASSERT_STATUS(acx_dnn_activation_forward(dnn, (acx_dnn_activation_t)3, 1, &tx, 0, &ty, NULL), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_dnn_activation_forward(dnn, ACX_DNN_RELU, 1, NULL, 0, &ty, NULL), ACX_ERR_NULL_ARG);
  acx_dnn_tensor_t tbad = ty;
  tbad.w = 7;
  ACX_ASSERT_STATUS(acx_dnn_activation_forward(dnn, ACX_DNN_RELU, 1, &tx, 0, &tbad, NULL), ACX_ERR_INVALID_ARG);
  tbad = tx, tbad.offset = 4; /* y over x, shifted by one element */
  ACX_ASSERT_STATUS(acx_dnn_activation_forward(dnn, ACX_DNN_RELU, 1, &tx, 0, &tbad, NULL), ACX_ERR_OUT_OF_RANGE);
  tbad = tx, tbad.n = 1, tbad.offset = 4;
  acx_dnn_tensor_t tx1 = tx;
  tx1.n = 1;
  ACX_ASSERT_STATUS(acx_dnn_activation_forward(dnn, ACX_DNN_RELU, 1, &tx1, 0, &tbad, NULL), ACX_ERR_INVALID_ARG);
  tbad = ty, tbad.buf = h16;
  ACX_ASSERT_STATUS(acx_dnn_activation_forward(dnn, ACX_DNN_RELU, 1, &tx, 0, &tbad, NULL), ACX_ERR_BAD_DTYPE);
  ACX_ASSERT_STATUS(acx_dnn_softmax_forward(dnn, ACX_DNN_SOFTMAX_LOG, ACX_DNN_SOFTMAX_CHANNEL, 1, &tx, 0, &ty, NULL),
                    ACX_ERR_NOT_SUPPORTED);
  ACX_ASSERT_STATUS(acx_dnn_softmax_forward(dnn, ACX_DNN_SOFTMAX_ACCURATE, ACX_DNN_SOFTMAX_INSTANCE, 1, &tx, 0, &tx, NULL),
                    ACX_ERR_INVALID_ARG); /* not in place */
  ACX_ASSERT_STATUS(acx_dnn_softmax_forward(dnn, (acx_dnn_softmax_alg_t)2, ACX_DNN_SOFTMAX_INSTANCE, 1, &tx, 0, &ty, NULL),
                    ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_dnn_softmax_forward(dnn, ACX_DNN_SOFTMAX_LOG, (acx_dnn_softmax_mode_t)5, 1, &tx, 0, &ty, NULL),
                    ACX_ERR_INVALID_ARG);

  /* pooling: 8x8, window 3, pad 1, stride 2 -> 4x4 */
  acx_dnn_pool_desc_t pd = ACX_DNN_POOL_DESC_INIT;
  pd.window_h = pd.window_w = 3, pd.pad_h = pd.pad_w = 1;
  acx_dnn_tensor_t tp = T(y, 2, 3, 4, 4);
  ACX_ASSERT_STATUS(acx_dnn_pooling_forward(dnn, &pd, 1, &tx, 0, &tp, NULL), ACX_ERR_NOT_SUPPORTED);
  acx_dnn_pool_desc_t pe = pd;
  pe.pad_h = 3;
  ACX_ASSERT_STATUS(acx_dnn_pooling_forward(dnn, &pe, 1, &tx, 0, &tp, NULL), ACX_ERR_INVALID_ARG);
  pe = pd, pe.mode = (acx_dnn_pool_mode_t)3;
  ACX_ASSERT_STATUS(acx_dnn_pooling_forward(dnn, &pe, 1, &tx, 0, &tp, NULL), ACX_ERR_INVALID_ARG);
  pe = pd, pe.size = 0;
  ACX_ASSERT_STATUS(acx_dnn_pooling_forward(dnn, &pe, 1, &tx, 0, &tp, NULL), ACX_ERR_INVALID_ARG);
  pe = pd, pe.window_w = 11;
  ACX_ASSERT_STATUS(acx_dnn_pooling_forward(dnn, &pe, 1, &tx, 0, &tp, NULL), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_dnn_pooling_forward(dnn, NULL, 1, &tx, 0, &tp, NULL), ACX_ERR_NULL_ARG);
  tbad = tp, tbad.h = 5;
  ACX_ASSERT_STATUS(acx_dnn_pooling_forward(dnn, &pd, 1, &tx, 0, &tbad, NULL), ACX_ERR_INVALID_ARG);

  /* batch-norm: 3 channels, parameters in p at 0, 3, 6, 9 */
  acx_dnn_bn_params_t bn = {.scale = p, .bias = p, .mean = p, .var = p, .scale_offset = 0, .bias_offset = 12,
                            .mean_offset = 24, .var_offset = 36, .epsilon = 1e-5};
  ACX_ASSERT_STATUS(acx_dnn_batchnorm_forward_inference(dnn, 1, &tx, 0, &ty, &bn, NULL), ACX_ERR_NOT_SUPPORTED);
  acx_dnn_bn_params_t be = bn;
  be.epsilon = 1e-7;
  ACX_ASSERT_STATUS(acx_dnn_batchnorm_forward_inference(dnn, 1, &tx, 0, &ty, &be, NULL), ACX_ERR_INVALID_ARG);
  be = bn, be.var_offset = 56; /* 14 + 3 > 16 */
  ACX_ASSERT_STATUS(acx_dnn_batchnorm_forward_inference(dnn, 1, &tx, 0, &ty, &be, NULL), ACX_ERR_OUT_OF_RANGE);
  be = bn, be.mean = h16;
  ACX_ASSERT_STATUS(acx_dnn_batchnorm_forward_inference(dnn, 1, &tx, 0, &ty, &be, NULL), ACX_ERR_BAD_DTYPE);
  be = bn, be.bias = NULL;
  ACX_ASSERT_STATUS(acx_dnn_batchnorm_forward_inference(dnn, 1, &tx, 0, &ty, &be, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_dnn_batchnorm_forward_inference(dnn, 1, &tx, 0, &ty, NULL, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_dnn_batchnorm_forward_inference(dnn, 1, &tx, 0, &tx, &bn, NULL), ACX_ERR_INVALID_ARG);
  acx_buffer_t *all[] = {x, w, y, h16, d64, p, w3};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) acx_buffer_release(all[i]);
}

static void wait_generation(uint64_t old) {
  uint64_t g = old;
  for (int i = 0; i < 20000 && g == old; i++) {
    usleep(1000);
    acx_device_generation(dev, &g);
  }
  CU_ASSERT(g > old);
  for (int i = 0; i < 20000 && acx_device_ping(dev, LT_TIMEOUT) != ACX_OK; i++) usleep(1000);
}

static void t_stale(void) {
  acx_buffer_t *x = alloc(16, ACX_DTYPE_F32), *y = alloc(16, ACX_DTYPE_F32);
  uint64_t g0;
  ACX_ASSERT_STATUS(acx_device_generation(dev, &g0), ACX_OK);
  ACX_ASSERT_STATUS(acx_device_inject_fault(dev, 0, LT_TIMEOUT), ACX_ERR_DEVICE_LOST);
  wait_generation(g0);
  acx_dnn_tensor_t tx = T(x, 1, 1, 4, 4), ty = T(y, 1, 1, 4, 4);
  ACX_ASSERT_STATUS(acx_dnn_activation_forward(dnn, ACX_DNN_RELU, 1, &tx, 0, &ty, NULL), ACX_ERR_STALE_BUFFER);
  acx_buffer_release(x);
  acx_buffer_release(y);
}

/* ------------------------------------------------------------------------------------------ */
/* GPU                                                                                        */

#define AT(v, C, H, W, n, c, h, w) ((v)[(((size_t)(n) * (C) + (c)) * (H) + (h)) * (W) + (w)])

/* A tensor of random values (rounded to dt) in a poisoned buffer with one element to spare. */
static acx_buffer_t *upload(double *host, size_t n, acx_dtype_t dt, uint64_t seed) {
  lt_random(host, n, seed);
  lt_round(host, n, dt);
  acx_buffer_t *b = lt_poisoned(dev, n + 1, dt);
  lt_write(b, 0, host, n);
  return b;
}

static void check(const char *what, acx_buffer_t *y, const double *ref, size_t n, double tol) {
  double *got = malloc((n + 1) * 8);
  lt_read(y, 0, got, n + 1);
  LT_CHECK_ERR(what, lt_rel_err(got, ref, n), tol);
  CU_ASSERT(isnan(got[n])); /* past y: untouched */
  free(got);
}

static void conv_case(acx_dtype_t dt, int tf32, double tol) {
  const int64_t N = 2, C = 3, H = 17, W = 19, K = 4, R = 3, S = 5;
  acx_dnn_conv_desc_t d = ACX_DNN_CONV_DESC_INIT;
  d.k = K, d.r = R, d.s = S;
  d.pad_h = 1, d.pad_w = 2, d.stride_h = 2, d.stride_w = 1, d.dilation_h = 1, d.dilation_w = 2;
  d.alpha = 1.5, d.beta = 0.5, d.allow_tf32 = tf32;
  d.x.n = N, d.x.c = C, d.x.h = H, d.x.w = W;
  int64_t on, oc, OH, OW;
  ACX_ASSERT_STATUS(acx_dnn_conv_output_dims(&d, &on, &oc, &OH, &OW), ACX_OK);
  size_t nx = (size_t)(N * C * H * W), nw = (size_t)(K * C * R * S), ny = (size_t)(N * K * OH * OW);
  double *X = malloc(nx * 8), *Wt = malloc(nw * 8), *Y = malloc(ny * 8), *ref = malloc(ny * 8);
  d.x.buf = upload(X, nx, dt, 1);
  d.w = upload(Wt, nw, dt, 2);
  acx_buffer_t *y = upload(Y, ny, dt, 3);
  d.y = T(y, N, K, OH, OW);
  for (int64_t n = 0; n < N; n++)
    for (int64_t k = 0; k < K; k++)
      for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++) {
          double acc = 0;
          for (int64_t c = 0; c < C; c++)
            for (int64_t r = 0; r < R; r++)
              for (int64_t s = 0; s < S; s++) {
                int64_t ih = oh * d.stride_h - d.pad_h + r * d.dilation_h, iw = ow * d.stride_w - d.pad_w + s * d.dilation_w;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += AT(X, C, H, W, n, c, ih, iw) * AT(Wt, C, R, S, k, c, r, s);
              }
          AT(ref, K, OH, OW, n, k, oh, ow) = 1.5 * acc + 0.5 * AT(Y, K, OH, OW, n, k, oh, ow);
        }
  ACX_ASSERT_STATUS(acx_dnn_conv_forward(dnn, &d, NULL), ACX_OK);
  char what[64];
  snprintf(what, sizeof what, "conv %s%s %lldx%lld", acx_dtype_name(dt), tf32 ? " tf32" : "", (long long)OH, (long long)OW);
  check(what, y, ref, ny, tol);
  free(X), free(Wt), free(Y), free(ref);
  acx_buffer_release(d.x.buf);
  acx_buffer_release(d.w);
  acx_buffer_release(y);
}

static void t_conv(void) {
  conv_case(ACX_DTYPE_F32, 0, 1e-6);
  conv_case(ACX_DTYPE_F32, 1, 5e-3);
  conv_case(ACX_DTYPE_F16, 0, 5e-3);
}

static double act(int mode, double v) {
  return mode == ACX_DNN_RELU ? (v > 0 ? v : 0) : mode == ACX_DNN_SIGMOID ? 1 / (1 + exp(-v)) : tanh(v);
}

static void t_activation(void) {
  const acx_dtype_t dts[] = {ACX_DTYPE_F32, ACX_DTYPE_F16};
  const size_t n = 2 * 5 * 7 * 9;
  double *X = malloc(n * 8), *Y = malloc(n * 8), *ref = malloc(n * 8);
  for (int d = 0; d < 2; d++)
    for (int mode = 0; mode < 3; mode++) {
      acx_dtype_t dt = dts[d];
      acx_buffer_t *x = upload(X, n, dt, 10 + (uint64_t)mode), *y = upload(Y, n, dt, 20 + (uint64_t)mode);
      acx_dnn_tensor_t tx = T(x, 2, 5, 7, 9), ty = T(y, 2, 5, 7, 9);
      ACX_ASSERT_STATUS(acx_dnn_activation_forward(dnn, (acx_dnn_activation_t)mode, 2.0, &tx, -1.0, &ty, NULL), ACX_OK);
      for (size_t i = 0; i < n; i++) ref[i] = 2.0 * act(mode, X[i]) - Y[i];
      char what[64];
      snprintf(what, sizeof what, "activation %d %s", mode, acx_dtype_name(dt));
      check(what, y, ref, n, dt == ACX_DTYPE_F16 ? 2e-3 : 1e-6);
      /* in place */
      ACX_ASSERT_STATUS(acx_dnn_activation_forward(dnn, (acx_dnn_activation_t)mode, 1.0, &tx, 0.0, &tx, NULL), ACX_OK);
      for (size_t i = 0; i < n; i++) ref[i] = act(mode, X[i]);
      snprintf(what, sizeof what, "activation %d %s in place", mode, acx_dtype_name(dt));
      check(what, x, ref, n, dt == ACX_DTYPE_F16 ? 2e-3 : 1e-6);
      acx_buffer_release(x);
      acx_buffer_release(y);
    }
  free(X), free(Y), free(ref);
}

static void t_softmax(void) {
  const int64_t N = 3, C = 6, H = 4, W = 5;
  const size_t n = (size_t)(N * C * H * W);
  double *X = malloc(n * 8), *Y = malloc(n * 8), *ref = malloc(n * 8);
  for (int alg = 0; alg < 2; alg++)
    for (int mode = 0; mode < 2; mode++) {
      acx_buffer_t *x = upload(X, n, ACX_DTYPE_F32, 30), *y = lt_poisoned(dev, n + 1, ACX_DTYPE_F32);
      for (size_t i = 0; i < n; i++) X[i] *= 4; /* a wider spread than [-1, 1] */
      lt_write(x, 0, X, n);
      acx_dnn_tensor_t tx = T(x, N, C, H, W), ty = T(y, N, C, H, W);
      ACX_ASSERT_STATUS(acx_dnn_softmax_forward(dnn, (acx_dnn_softmax_alg_t)alg, (acx_dnn_softmax_mode_t)mode, 1.0, &tx,
                                                0.0, &ty, NULL),
                        ACX_OK);
      for (int64_t b = 0; b < N; b++)
        for (int64_t hw = 0; hw < (mode ? H * W : 1); hw++) {
          /* instance: one group of C*H*W per image; channel: C values per (image, pixel) */
          size_t cnt = mode ? (size_t)C : (size_t)(C * H * W), step = mode ? (size_t)(H * W) : 1;
          size_t base = (size_t)b * (size_t)(C * H * W) + (size_t)hw;
          double mx = -INFINITY, sum = 0;
          for (size_t i = 0; i < cnt; i++) mx = fmax(mx, X[base + i * step]);
          for (size_t i = 0; i < cnt; i++) sum += exp(X[base + i * step] - mx);
          for (size_t i = 0; i < cnt; i++) {
            double v = X[base + i * step] - mx;
            ref[base + i * step] = alg ? v - log(sum) : exp(v) / sum;
          }
        }
      char what[64];
      snprintf(what, sizeof what, "softmax alg %d mode %d", alg, mode);
      check(what, y, ref, n, 1e-5);
      acx_buffer_release(x);
      acx_buffer_release(y);
    }
  free(X), free(Y), free(ref);
}

static void t_pooling(void) {
  const int64_t N = 2, C = 3, H = 11, W = 10;
  const size_t nx = (size_t)(N * C * H * W);
  double *X = malloc(nx * 8);
  for (int mode = 0; mode < 3; mode++) {
    acx_dnn_pool_desc_t p = ACX_DNN_POOL_DESC_INIT;
    p.mode = (acx_dnn_pool_mode_t)mode;
    p.window_h = 3, p.window_w = 2, p.pad_h = 1, p.pad_w = 1, p.stride_h = 2, p.stride_w = 3;
    int64_t OH = (H + 2 * p.pad_h - p.window_h) / p.stride_h + 1, OW = (W + 2 * p.pad_w - p.window_w) / p.stride_w + 1;
    size_t ny = (size_t)(N * C * OH * OW);
    double *ref = malloc(ny * 8);
    acx_buffer_t *x = upload(X, nx, ACX_DTYPE_F32, 40 + (uint64_t)mode), *y = lt_poisoned(dev, ny + 1, ACX_DTYPE_F32);
    acx_dnn_tensor_t tx = T(x, N, C, H, W), ty = T(y, N, C, OH, OW);
    ACX_ASSERT_STATUS(acx_dnn_pooling_forward(dnn, &p, 1.0, &tx, 0.0, &ty, NULL), ACX_OK);
    for (int64_t n = 0; n < N; n++)
      for (int64_t c = 0; c < C; c++)
        for (int64_t oh = 0; oh < OH; oh++)
          for (int64_t ow = 0; ow < OW; ow++) {
            double mx = -INFINITY, sum = 0;
            int inside = 0;
            for (int r = 0; r < p.window_h; r++)
              for (int s = 0; s < p.window_w; s++) {
                int64_t ih = oh * p.stride_h - p.pad_h + r, iw = ow * p.stride_w - p.pad_w + s;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                double v = AT(X, C, H, W, n, c, ih, iw);
                mx = fmax(mx, v);
                sum += v;
                inside++;
              }
            AT(ref, C, OH, OW, n, c, oh, ow) =
                mode == 0 ? mx : mode == 1 ? sum / (p.window_h * p.window_w) : sum / inside;
          }
    char what[64];
    snprintf(what, sizeof what, "pooling mode %d", mode);
    check(what, y, ref, ny, 1e-6);
    free(ref);
    acx_buffer_release(x);
    acx_buffer_release(y);
  }
  free(X);
}

static void t_batchnorm(void) {
  const acx_dtype_t dts[] = {ACX_DTYPE_F32, ACX_DTYPE_F16};
  const int64_t N = 2, C = 5, H = 6, W = 7;
  const size_t n = (size_t)(N * C * H * W);
  double *X = malloc(n * 8), *Y = malloc(n * 8), *ref = malloc(n * 8), P[4 * 5];
  lt_random(P, 20, 50);
  for (int i = 0; i < 5; i++) P[15 + i] = fabs(P[15 + i]) + 0.5; /* variances */
  lt_round(P, 20, ACX_DTYPE_F32);
  acx_buffer_t *p = lt_poisoned(dev, 20, ACX_DTYPE_F32);
  lt_write(p, 0, P, 20);
  acx_dnn_bn_params_t bn = {.scale = p, .bias = p, .mean = p, .var = p, .scale_offset = 0, .bias_offset = 20,
                            .mean_offset = 40, .var_offset = 60, .epsilon = 1e-3};
  for (int d = 0; d < 2; d++) {
    acx_dtype_t dt = dts[d];
    acx_buffer_t *x = upload(X, n, dt, 60), *y = upload(Y, n, dt, 61);
    acx_dnn_tensor_t tx = T(x, N, C, H, W), ty = T(y, N, C, H, W);
    ACX_ASSERT_STATUS(acx_dnn_batchnorm_forward_inference(dnn, 1.0, &tx, 0.25, &ty, &bn, NULL), ACX_OK);
    for (int64_t b = 0; b < N; b++)
      for (int64_t c = 0; c < C; c++)
        for (int64_t i = 0; i < H * W; i++) {
          size_t k = (size_t)((b * C + c) * H * W + i);
          ref[k] = P[c] * (X[k] - P[10 + c]) / sqrt(P[15 + c] + 1e-3) + P[5 + c] + 0.25 * Y[k];
        }
    char what[64];
    snprintf(what, sizeof what, "batch-norm %s", acx_dtype_name(dt));
    check(what, y, ref, n, dt == ACX_DTYPE_F16 ? 2e-3 : 1e-6);
    acx_buffer_release(x);
    acx_buffer_release(y);
  }
  acx_buffer_release(p);
  free(X), free(Y), free(ref);
}

static void t_restart(void) {
  uint64_t g0;
  ACX_ASSERT_STATUS(acx_device_generation(dev, &g0), ACX_OK);
  ACX_ASSERT_STATUS(acx_device_inject_fault(dev, 0, LT_TIMEOUT), ACX_ERR_DEVICE_LOST);
  wait_generation(g0);
  t_activation();
  conv_case(ACX_DTYPE_F32, 0, 1e-6);
}

static int setup(void) {
  if (acx_system_create(NULL, &lt_sys) != ACX_OK) return 1;
  dev = unit_mode ? lt_open_host(2) : lt_open_cuda(2);
  return acx_dnn_create(dev, NULL, &dnn) != ACX_OK;
}

static int teardown(void) {
  int bad = acx_dnn_destroy(dnn) != ACX_OK;
  bad |= acx_device_close(dev, LT_TIMEOUT) != ACX_OK;
  bad |= acx_system_destroy(lt_sys, LT_TIMEOUT) != ACX_OK;
  return bad;
}

int main(int argc, char **argv) {
  unit_mode = argc > 1 && !strcmp(argv[1], "--unit");
  if (argc > 1 && !unit_mode) {
    fprintf(stderr, "usage: %s [--unit]\n", argv[0]);
    return 2;
  }
  static const acx_test_case_t unit_cases[] = {ACX_TEST(t_validation), ACX_TEST(t_stale), ACX_TEST_END};
  static const acx_test_case_t gpu_cases[] = {ACX_TEST(t_conv),    ACX_TEST(t_activation), ACX_TEST(t_softmax),
                                              ACX_TEST(t_pooling), ACX_TEST(t_batchnorm),  ACX_TEST(t_restart),
                                              ACX_TEST_END};
  if (!unit_mode && access("/dev/nvidiactl", F_OK) != 0) acx_test_skip("no GPU on this machine");
  if (!unit_mode && !acx_dnn_available()) acx_test_skip("this libacx was built without cuDNN");
  return acx_test_run(unit_mode ? "lib_dnn_unit" : "lib_dnn", unit_mode ? unit_cases : gpu_cases, setup, teardown);
}
