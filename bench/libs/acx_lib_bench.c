/* acx-lib-bench: CUDA library calls made directly (the peer: this process's own CUDA context and
 * library handles) beside the same calls through acx (library contexts, process transport by
 * default: ACX_EXECUTOR), in one run on one GPU. Each case queues N calls and waits for the last,
 * as a user pipelining work would, so the per-command cost amortises the way it does in practice;
 * the table gives time per call, TFLOP/s or GB/s, and the ratio acx/raw (goal >= 0.97).
 * Repetitions interleave (-r R: rounds raw,acx then acx,raw, ABBA, so that a drift of the GPU's
 * clocks or of the machine's load falls on both sides alike): the table gives each side's median
 * time and the median of the rounds' ratios, with their smallest and largest (the spread: a goal
 * checked at 3% needs a spread well inside 3%).
 * The raw peer includes the libraries' headers by necessity: it is what acx is measured against.
 * Usage: acx-lib-bench [-r R] [--iters-scale F] [--only NAME[,NAME...]] [--device N] [--json FILE]
 *                      [--raw-alloc malloc|pool] [--raw-rand-offset never|each] */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cufft.h>
#include <curand.h>
#include <cusolverDn.h>

#include "acx/blas.h"
#include "acx/blaslt.h"
#include "acx/device.h"
#include "acx/fft.h"
#include "acx/rand.h"
#include "acx/solver.h"

#define GOAL_RATIO 0.97
#define T_WAIT (600LL * 1000000000LL)

typedef struct bcase {
  const char *name;  /* --only key */
  const char *shape; /* for the table */
  double work;       /* flops (TFLOP/s) or bytes (GB/s) per call */
  int is_bytes;
  int iters;
} bcase_t;

#define MAX_REPS 99

typedef struct result {
  double raw_s, acx_s;      /* seconds per call: the rounds' medians */
  double ratio, rmin, rmax; /* raw_s / acx_s (the rates' acx/raw): median, smallest, largest round */
  int raw_ok, acx_ok;       /* every round of that side ran */
} result_t;

typedef struct opts {
  double scale;
  const char *only, *json;
  int device, reps, pool, rand_offset;
} opts_t;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

#define N8K 8192LL
#define RAND_N (1LL << 28)
#define FFT_N (1LL << 24)

static bcase_t cases[] = {
    {"gemm_bf16", "8192^3 bf16 (f32 accumulate)", 2.0 * N8K * N8K * N8K, 0, 60},
    {"gemm_f32", "8192^3 f32", 2.0 * N8K * N8K * N8K, 0, 8},
    {"fft_c2c", "2^24 C2C f32 (5 N log2 N flops)", 5.0 * FFT_N * 24, 0, 200},
    {"rand_normal", "2^28 f32 normal (Philox)", 4.0 * RAND_N, 1, 40},
    {"lt_gelu_bias", "8192^3 bf16 cuBLASLt GELU+bias", 2.0 * N8K * N8K * N8K, 0, 60},
    {"potrf_f64", "8192 f64 Cholesky (n^3/3 flop)", N8K * N8K * N8K / 3.0, 0, 10},
};
#define NCASES (sizeof cases / sizeof cases[0])

/* ------------------------------------------------------------------------------------------ */
/* raw                                                                                        */

#define CK(call)                                                                             \
  do {                                                                                       \
    cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) {                                                                 \
      fprintf(stderr, "raw: %s: %s\n", #call, cudaGetErrorString(e_));                       \
      return -1;                                                                             \
    }                                                                                        \
  } while (0)
#define BK(call)                                                                             \
  do {                                                                                       \
    cublasStatus_t s_ = (call);                                                              \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                       \
      fprintf(stderr, "raw: %s: %s\n", #call, cublasGetStatusName(s_));                      \
      return -1;                                                                             \
    }                                                                                        \
  } while (0)
#define LK(call)                                                                             \
  do {                                                                                       \
    cublasStatus_t s_ = (call);                                                              \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                       \
      fprintf(stderr, "raw: %s: %s\n", #call, cublasGetStatusName(s_));                      \
      return -1;                                                                             \
    }                                                                                        \
  } while (0)
#define SK(call)                                                                             \
  do {                                                                                       \
    cusolverStatus_t s_ = (call);                                                            \
    if (s_ != CUSOLVER_STATUS_SUCCESS) {                                                     \
      fprintf(stderr, "raw: %s: cusolver status %d\n", #call, (int)s_);                      \
      return -1;                                                                             \
    }                                                                                        \
  } while (0)
#define RK(call)                                                                             \
  do {                                                                                       \
    curandStatus_t s_ = (call);                                                              \
    if (s_ != CURAND_STATUS_SUCCESS) {                                                       \
      fprintf(stderr, "raw: %s: curand status %d\n", #call, (int)s_);                        \
      return -1;                                                                             \
    }                                                                                        \
  } while (0)

/* The raw side's device memory: cudaMalloc, or with --raw-alloc pool the device's stream-ordered
 * pool (cudaMallocAsync), which is where acx's ACX_MEM_DEVICE buffers come from: a gap that
 * follows the allocator is not acx's. */
static int raw_pool;
/* The cuRAND case's position: by default both sides draw on from where the last call ended (the
 * raw generator is never repositioned; acx's context advances, and its executor sets cuRAND's
 * offset only where a request does not continue the last one). With --raw-rand-offset each, both
 * go back to position 0 before every call: the raw side's curandSetGeneratorOffset resets
 * cuRAND's state, the cost acx's executor pays for a request that jumps. */
static int raw_rand_offset;

static cudaError_t raw_malloc(void *p, size_t bytes) {
  void **out = p;
  if (!raw_pool) return cudaMalloc(out, bytes);
  cudaError_t e = cudaMallocAsync(out, bytes, 0);
  return e == cudaSuccess ? cudaStreamSynchronize(0) : e;
}

static void raw_free(void *p) {
  if (!raw_pool) {
    cudaFree(p);
    return;
  }
  if (cudaFreeAsync(p, 0) == cudaSuccess) (void)cudaStreamSynchronize(0);
}

static int raw_gemm(cudaStream_t s, cudaDataType t, size_t es, int iters, double *sec) {
  void *a, *b, *c;
  size_t bytes = (size_t)(N8K * N8K) * es;
  CK(raw_malloc(&a, bytes));
  CK(raw_malloc(&b, bytes));
  CK(raw_malloc(&c, bytes));
  CK(cudaMemsetAsync(a, 0x3c, bytes, s)); /* ~0.0115 in f32 and bf16: non-zero, no overflow */
  CK(cudaMemsetAsync(b, 0x3c, bytes, s));
  cublasHandle_t h;
  BK(cublasCreate(&h));
  BK(cublasSetStream(h, s));
  float alpha = 1, beta = 0;
  for (int i = 0; i < 2; i++)
    BK(cublasGemmEx_64(h, CUBLAS_OP_N, CUBLAS_OP_N, N8K, N8K, N8K, &alpha, a, t, N8K, b, t, N8K, &beta, c, t, N8K,
                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  CK(cudaStreamSynchronize(s));
  int64_t t0 = now_ns();
  for (int i = 0; i < iters; i++)
    BK(cublasGemmEx_64(h, CUBLAS_OP_N, CUBLAS_OP_N, N8K, N8K, N8K, &alpha, a, t, N8K, b, t, N8K, &beta, c, t, N8K,
                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  CK(cudaStreamSynchronize(s));
  *sec = (double)(now_ns() - t0) * 1e-9 / iters;
  cublasDestroy(h);
  raw_free(a);
  raw_free(b);
  raw_free(c);
  return 0;
}

static int raw_rand(cudaStream_t s, int iters, double *sec) {
  float *out;
  CK(raw_malloc((void **)&out, (size_t)RAND_N * 4));
  curandGenerator_t g;
  RK(curandCreateGenerator(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10));
  RK(curandSetStream(g, s));
  RK(curandSetPseudoRandomGeneratorSeed(g, 1234));
  for (int i = 0; i < 2; i++) {
    if (raw_rand_offset) RK(curandSetGeneratorOffset(g, 0));
    RK(curandGenerateNormal(g, out, (size_t)RAND_N, 0.0f, 1.0f));
  }
  CK(cudaStreamSynchronize(s));
  int64_t t0 = now_ns();
  for (int i = 0; i < iters; i++) {
    if (raw_rand_offset) RK(curandSetGeneratorOffset(g, 0));
    RK(curandGenerateNormal(g, out, (size_t)RAND_N, 0.0f, 1.0f));
  }
  CK(cudaStreamSynchronize(s));
  *sec = (double)(now_ns() - t0) * 1e-9 / iters;
  curandDestroyGenerator(g);
  raw_free(out);
  return 0;
}

static int raw_fft(cudaStream_t s, int iters, double *sec) {
  void *in, *out;
  CK(raw_malloc(&in, (size_t)FFT_N * 8));
  CK(raw_malloc(&out, (size_t)FFT_N * 8));
  CK(cudaMemsetAsync(in, 0x3c, (size_t)FFT_N * 8, s));
  cufftHandle p;
  if (cufftPlan1d(&p, (int)FFT_N, CUFFT_C2C, 1) != CUFFT_SUCCESS || cufftSetStream(p, s) != CUFFT_SUCCESS) {
    fprintf(stderr, "raw: cufftPlan1d failed\n");
    return -1;
  }
  for (int i = 0; i < 2; i++) cufftExecC2C(p, in, out, CUFFT_FORWARD);
  CK(cudaStreamSynchronize(s));
  int64_t t0 = now_ns();
  for (int i = 0; i < iters; i++)
    if (cufftExecC2C(p, in, out, CUFFT_FORWARD) != CUFFT_SUCCESS) {
      fprintf(stderr, "raw: cufftExecC2C failed\n");
      return -1;
    }
  CK(cudaStreamSynchronize(s));
  *sec = (double)(now_ns() - t0) * 1e-9 / iters;
  cufftDestroy(p);
  raw_free(in);
  raw_free(out);
  return 0;
}

/* cuBLASLt bf16 matmul with the GELU+bias epilogue, the algorithm from the heuristic (as acx
 * picks it) and a 32 MiB workspace (ACX_BLASLT_WORKSPACE_MB's default). */
static int raw_lt(cudaStream_t s, int iters, double *sec) {
  void *a, *b, *d, *bias, *ws;
  size_t bytes = (size_t)(N8K * N8K) * 2, wsb = (size_t)32 << 20;
  CK(raw_malloc(&a, bytes));
  CK(raw_malloc(&b, bytes));
  CK(raw_malloc(&d, bytes));
  CK(raw_malloc(&bias, (size_t)N8K * 2));
  CK(raw_malloc(&ws, wsb));
  CK(cudaMemsetAsync(a, 0x3c, bytes, s));
  CK(cudaMemsetAsync(b, 0x3c, bytes, s));
  CK(cudaMemsetAsync(bias, 0x3c, (size_t)N8K * 2, s));
  cublasLtHandle_t h;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t l;
  cublasLtMatmulPreference_t pref;
  LK(cublasLtCreate(&h));
  LK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_GELU_BIAS;
  int32_t bt = CUDA_R_16BF;
  LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
  LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  LK(cublasLtMatrixLayoutCreate(&l, CUDA_R_16BF, N8K, N8K, N8K));
  LK(cublasLtMatmulPreferenceCreate(&pref));
  LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
  cublasLtMatmulHeuristicResult_t r;
  int found = 0;
  LK(cublasLtMatmulAlgoGetHeuristic(h, op, l, l, l, l, pref, 1, &r, &found));
  if (found < 1) {
    fprintf(stderr, "raw: cuBLASLt heuristic found no algorithm\n");
    return -1;
  }
  float alpha = 1, beta = 0;
  for (int i = 0; i < iters + 2; i++) {
    if (i == 2) {
      CK(cudaStreamSynchronize(s));
      *sec = (double)now_ns();
    }
    LK(cublasLtMatmul(h, op, &alpha, a, l, b, l, &beta, d, l, d, l, &r.algo, ws, wsb, s));
  }
  CK(cudaStreamSynchronize(s));
  *sec = ((double)now_ns() - *sec) * 1e-9 / iters;
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(l);
  cublasLtMatmulDescDestroy(op);
  cublasLtDestroy(h);
  raw_free(a), raw_free(b), raw_free(d), raw_free(bias), raw_free(ws);
  return 0;
}

/* Cholesky of the identity: dense Cholesky does the same work whatever the values, and the
 * identity is its own factor, so repeated in-place calls stay valid (no info > 0 early exit). */
static int raw_potrf(cudaStream_t s, int iters, double *sec) {
  double *a;
  int *info;
  size_t bytes = (size_t)(N8K * N8K) * 8;
  CK(raw_malloc((void **)&a, bytes));
  CK(raw_malloc((void **)&info, sizeof(int)));
  CK(cudaMemsetAsync(a, 0, bytes, s));
  double *ones = malloc((size_t)N8K * 8);
  for (int64_t i = 0; i < N8K; i++) ones[i] = 1.0;
  CK(cudaMemcpy2DAsync(a, (size_t)(N8K + 1) * 8, ones, 8, 8, (size_t)N8K, cudaMemcpyHostToDevice, s));
  CK(cudaStreamSynchronize(s));
  free(ones);
  cusolverDnHandle_t h;
  cusolverDnParams_t p;
  SK(cusolverDnCreate(&h));
  SK(cusolverDnSetStream(h, s));
  SK(cusolverDnCreateParams(&p));
  size_t dws = 0, hws = 0;
  SK(cusolverDnXpotrf_bufferSize(h, p, CUBLAS_FILL_MODE_LOWER, N8K, CUDA_R_64F, a, N8K, CUDA_R_64F, &dws, &hws));
  void *dw = NULL, *hw = hws ? malloc(hws) : NULL;
  CK(raw_malloc(&dw, dws ? dws : 1));
  for (int i = 0; i < iters + 1; i++) {
    if (i == 1) {
      CK(cudaStreamSynchronize(s));
      *sec = (double)now_ns();
    }
    SK(cusolverDnXpotrf(h, p, CUBLAS_FILL_MODE_LOWER, N8K, CUDA_R_64F, a, N8K, CUDA_R_64F, dw, dws, hw, hws, info));
  }
  CK(cudaStreamSynchronize(s));
  *sec = ((double)now_ns() - *sec) * 1e-9 / iters;
  cusolverDnDestroyParams(p);
  cusolverDnDestroy(h);
  free(hw);
  raw_free(dw), raw_free(a), raw_free(info);
  return 0;
}

static int run_raw(int device, const char *name, int iters, double *sec) {
  CK(cudaSetDevice(device));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int rc = -1;
  if (!strcmp(name, "gemm_bf16")) rc = raw_gemm(s, CUDA_R_16BF, 2, iters, sec);
  else if (!strcmp(name, "gemm_f32")) rc = raw_gemm(s, CUDA_R_32F, 4, iters, sec);
  else if (!strcmp(name, "rand_normal")) rc = raw_rand(s, iters, sec);
  else if (!strcmp(name, "fft_c2c")) rc = raw_fft(s, iters, sec);
  else if (!strcmp(name, "lt_gelu_bias")) rc = raw_lt(s, iters, sec);
  else if (!strcmp(name, "potrf_f64")) rc = raw_potrf(s, iters, sec);
  cudaStreamDestroy(s);
  return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* acx                                                                                        */

/* Every byte of buf := v. Fills go by element (the width must be the dtype's size), so the byte
 * is repeated across one element. */
static acx_status_t fill_byte(acx_buffer_t *buf, uint8_t v) {
  acx_buffer_info_t info;
  acx_status_t st = acx_buffer_query(buf, &info);
  if (st != ACX_OK) return st;
  unsigned width = (unsigned)acx_dtype_size(info.dtype);
  uint64_t pattern = 0;
  for (unsigned k = 0; k < width; k++) pattern |= (uint64_t)v << (8 * k);
  return acx_buffer_fill(buf, 0, ACX_WHOLE, pattern, width, 0, T_WAIT);
}

#define AK(call)                                                                             \
  do {                                                                                       \
    acx_status_t st_ = (call);                                                               \
    if (st_ != ACX_OK) {                                                                     \
      fprintf(stderr, "acx: %s: %s\n", #call, acx_status_str(st_));                          \
      rc = -1;                                                                               \
      goto out;                                                                              \
    }                                                                                        \
  } while (0)

/* Queues iters requests through `submit`, waits for the last. */
typedef acx_status_t (*submit_fn)(void *arg, acx_future_t **done);

static int time_acx(submit_fn submit, void *arg, int iters, double *sec) {
  acx_future_t *f = NULL;
  for (int i = 0; i < 2; i++) {
    if (submit(arg, &f) != ACX_OK) return -1;
    acx_status_t st = acx_future_wait(f, T_WAIT, NULL, 0, NULL);
    acx_future_release(f);
    if (st != ACX_OK) {
      fprintf(stderr, "acx: warm-up request: %s\n", acx_status_str(st));
      return -1;
    }
  }
  int64_t t0 = now_ns();
  acx_future_t *last = NULL;
  for (int i = 0; i < iters; i++) {
    if (last) acx_future_release(last);
    acx_status_t st = submit(arg, &last);
    if (st != ACX_OK) {
      fprintf(stderr, "acx: request %d: %s\n", i, acx_status_str(st));
      return -1;
    }
  }
  acx_status_t st = acx_future_wait(last, T_WAIT, NULL, 0, NULL);
  *sec = (double)(now_ns() - t0) * 1e-9 / iters;
  acx_future_release(last);
  if (st != ACX_OK) fprintf(stderr, "acx: last request: %s\n", acx_status_str(st));
  return st == ACX_OK ? 0 : -1;
}

typedef struct gemm_arg {
  acx_blas_t *blas;
  acx_blas_gemm_desc_t d;
} gemm_arg_t;

static acx_status_t submit_gemm(void *arg, acx_future_t **done) {
  gemm_arg_t *g = arg;
  return acx_blas_gemm(g->blas, &g->d, done);
}

typedef struct rand_arg {
  acx_rand_t *r;
  acx_buffer_t *out;
} rand_arg_t;

static acx_status_t submit_rand(void *arg, acx_future_t **done) {
  rand_arg_t *r = arg;
  /* As the raw side: by default each call continues where the last ended (the raw generator is
   * never repositioned); with --raw-rand-offset each, both go back to position 0 every call. */
  if (raw_rand_offset) acx_rand_set_offset(r->r, 0);
  return acx_rand_generate(r->r, ACX_RAND_NORMAL, r->out, 0, (size_t)RAND_N, 0.0, 1.0, done);
}

static int acx_gemm(acx_device_t *dev, acx_dtype_t dt, int iters, double *sec) {
  int rc = 0;
  size_t bytes = (size_t)(N8K * N8K) * acx_dtype_size(dt);
  acx_buffer_t *a = NULL, *b = NULL, *c = NULL;
  gemm_arg_t g = {.d = ACX_BLAS_GEMM_DESC_INIT};
  AK(acx_buffer_alloc(dev, bytes, dt, ACX_MEM_DEVICE, T_WAIT, &a));
  AK(acx_buffer_alloc(dev, bytes, dt, ACX_MEM_DEVICE, T_WAIT, &b));
  AK(acx_buffer_alloc(dev, bytes, dt, ACX_MEM_DEVICE, T_WAIT, &c));
  AK(fill_byte(a, 0x3c));
  AK(fill_byte(b, 0x3c));
  AK(acx_blas_create(dev, NULL, &g.blas));
  g.d.m = g.d.n = g.d.k = N8K;
  g.d.a = a, g.d.lda = N8K;
  g.d.b = b, g.d.ldb = N8K;
  g.d.c = c, g.d.ldc = N8K;
  rc = time_acx(submit_gemm, &g, iters, sec);
out:
  acx_blas_destroy(g.blas);
  acx_buffer_release(a);
  acx_buffer_release(b);
  acx_buffer_release(c);
  return rc;
}

static int acx_rand(acx_device_t *dev, int iters, double *sec) {
  int rc = 0;
  rand_arg_t r = {0};
  AK(acx_buffer_alloc(dev, (size_t)RAND_N * 4, ACX_DTYPE_F32, ACX_MEM_DEVICE, T_WAIT, &r.out));
  AK(acx_rand_create(dev, NULL, ACX_RAND_PHILOX, 1234, &r.r));
  rc = time_acx(submit_rand, &r, iters, sec);
out:
  acx_rand_destroy(r.r);
  acx_buffer_release(r.out);
  return rc;
}

typedef struct fft_arg {
  acx_fft_t *fft;
  acx_fft_desc_t d;
} fft_arg_t;

static acx_status_t submit_fft(void *arg, acx_future_t **done) {
  fft_arg_t *f = arg;
  return acx_fft_exec(f->fft, &f->d, done);
}

static int acx_fft(acx_device_t *dev, int iters, double *sec) {
  int rc = 0;
  acx_buffer_t *in = NULL, *out = NULL;
  fft_arg_t f = {.d = ACX_FFT_DESC_INIT};
  AK(acx_buffer_alloc(dev, (size_t)FFT_N * 8, ACX_DTYPE_F32, ACX_MEM_DEVICE, T_WAIT, &in));
  AK(acx_buffer_alloc(dev, (size_t)FFT_N * 8, ACX_DTYPE_F32, ACX_MEM_DEVICE, T_WAIT, &out));
  AK(fill_byte(in, 0x3c));
  AK(acx_fft_create(dev, NULL, &f.fft));
  f.d.type = ACX_FFT_C2C, f.d.rank = 1, f.d.n[0] = FFT_N, f.d.in = in, f.d.out = out;
  rc = time_acx(submit_fft, &f, iters, sec);
out:
  acx_fft_destroy(f.fft);
  acx_buffer_release(in);
  acx_buffer_release(out);
  return rc;
}

typedef struct lt_arg {
  acx_blaslt_t *lt;
  acx_blaslt_matmul_desc_t d;
} lt_arg_t;

static acx_status_t submit_lt(void *arg, acx_future_t **done) {
  lt_arg_t *l = arg;
  return acx_blaslt_matmul(l->lt, &l->d, done);
}

static int acx_lt(acx_device_t *dev, int iters, double *sec) {
  int rc = 0;
  size_t bytes = (size_t)(N8K * N8K) * 2;
  acx_buffer_t *a = NULL, *b = NULL, *d = NULL, *bias = NULL;
  lt_arg_t l = {.d = ACX_BLASLT_MATMUL_DESC_INIT};
  AK(acx_buffer_alloc(dev, bytes, ACX_DTYPE_BF16, ACX_MEM_DEVICE, T_WAIT, &a));
  AK(acx_buffer_alloc(dev, bytes, ACX_DTYPE_BF16, ACX_MEM_DEVICE, T_WAIT, &b));
  AK(acx_buffer_alloc(dev, bytes, ACX_DTYPE_BF16, ACX_MEM_DEVICE, T_WAIT, &d));
  AK(acx_buffer_alloc(dev, (size_t)N8K * 2, ACX_DTYPE_BF16, ACX_MEM_DEVICE, T_WAIT, &bias));
  AK(fill_byte(a, 0x3c));
  AK(fill_byte(b, 0x3c));
  AK(fill_byte(bias, 0x3c));
  AK(acx_blaslt_create(dev, NULL, &l.lt));
  l.d.m = l.d.n = l.d.k = N8K;
  l.d.a = a, l.d.lda = N8K, l.d.b = b, l.d.ldb = N8K, l.d.d = d, l.d.ldd = N8K;
  l.d.epilogue = ACX_BLASLT_EPILOGUE_GELU | ACX_BLASLT_EPILOGUE_BIAS, l.d.bias = bias;
  rc = time_acx(submit_lt, &l, iters, sec);
out:
  acx_blaslt_destroy(l.lt);
  acx_buffer_release(a);
  acx_buffer_release(b);
  acx_buffer_release(d);
  acx_buffer_release(bias);
  return rc;
}

typedef struct potrf_arg {
  acx_solver_t *s;
  acx_buffer_t *a;
} potrf_arg_t;

static acx_status_t submit_potrf(void *arg, acx_future_t **done) {
  potrf_arg_t *p = arg;
  return acx_solver_potrf(p->s, ACX_SOLVER_LOWER, N8K, p->a, 0, N8K, done);
}

static int acx_potrf(acx_device_t *dev, int iters, double *sec) {
  int rc = 0;
  potrf_arg_t p = {0};
  const double one = 1.0;
  AK(acx_buffer_alloc(dev, (size_t)(N8K * N8K) * 8, ACX_DTYPE_F64, ACX_MEM_DEVICE, T_WAIT, &p.a));
  AK(fill_byte(p.a, 0));
  for (int64_t i = 0; i < N8K; i++) AK(acx_buffer_write(p.a, (size_t)(i * (N8K + 1)) * 8, &one, 8, 0, T_WAIT));
  AK(acx_solver_create(dev, NULL, &p.s));
  rc = time_acx(submit_potrf, &p, iters, sec);
out:
  acx_solver_destroy(p.s);
  acx_buffer_release(p.a);
  return rc;
}

static int run_acx(acx_device_t *dev, const char *name, int iters, double *sec) {
  if (!strcmp(name, "gemm_bf16")) return acx_gemm(dev, ACX_DTYPE_BF16, iters, sec);
  if (!strcmp(name, "gemm_f32")) return acx_gemm(dev, ACX_DTYPE_F32, iters, sec);
  if (!strcmp(name, "rand_normal")) return acx_rand(dev, iters, sec);
  if (!strcmp(name, "fft_c2c")) return acx_fft(dev, iters, sec);
  if (!strcmp(name, "lt_gelu_bias")) return acx_lt(dev, iters, sec);
  if (!strcmp(name, "potrf_f64")) return acx_potrf(dev, iters, sec);
  return -1;
}

/* ------------------------------------------------------------------------------------------ */

static int selected(const char *only, const char *name) {
  if (!only) return 1;
  size_t n = strlen(name);
  for (const char *p = only; (p = strstr(p, name)); p += n)
    if ((p == only || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) return 1;
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median of v[0..n) (sorted in place); the mean of the middle two when n is even. */
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int parse_int(const char *s, int lo, int hi, int *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (end == s || *end || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

static void usage(FILE *f, const char *argv0) {
  fprintf(f,
          "usage: %s [-r R] [--iters-scale F] [--only NAME[,NAME...]] [--device N] [--json FILE]\n"
          "       [--raw-alloc malloc|pool] [--raw-rand-offset never|each]\n"
          "  -r, --reps R        rounds per case (default 5, at most %d), raw and acx alternating ABBA;\n"
          "                      times are the rounds' medians, rmin/rmax the smallest and largest ratio\n"
          "  --iters-scale F     calls per round, times the case's default (> 0)\n"
          "  --only NAMES        cases to run: gemm_bf16 gemm_f32 rand_normal fft_c2c lt_gelu_bias potrf_f64\n"
          "  --raw-alloc KIND    the raw side's device memory: malloc (cudaMalloc, default) or pool\n"
          "                      (cudaMallocAsync, where acx's buffers come from)\n"
          "  --raw-rand-offset W the cuRAND case goes back to position 0 before each call, raw and acx\n"
          "                      (each), or both draw on (never, default)\n"
          "  --device N          the CUDA device (default 0)\n"
          "  --json FILE         the table as JSON as well\n",
          argv0, MAX_REPS);
}

/* 0: parsed; 1: --help; 2: a bad option (said why on stderr). */
static int parse_opts(int argc, char **argv, opts_t *o) {
  *o = (opts_t){.scale = 1.0, .reps = 5};
  const char *bad = NULL;
  for (int i = 1; i < argc && !bad; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout, argv[0]);
      return 1;
    }
    int known = !strcmp(a, "-r") || !strcmp(a, "--reps") || !strcmp(a, "--iters-scale") || !strcmp(a, "--only") ||
                !strcmp(a, "--device") || !strcmp(a, "--json") || !strcmp(a, "--raw-alloc") ||
                !strcmp(a, "--raw-rand-offset");
    if (!known) {
      fprintf(stderr, "%s: unknown option '%s'\n", argv[0], a);
      bad = a;
      break;
    }
    if (!v) {
      fprintf(stderr, "%s: %s needs a value\n", argv[0], a);
      bad = a;
      break;
    }
    i++;
    if (!strcmp(a, "-r") || !strcmp(a, "--reps")) {
      if (parse_int(v, 1, MAX_REPS, &o->reps)) bad = "-r: rounds are an integer from 1 to 99";
    } else if (!strcmp(a, "--iters-scale")) {
      char *end;
      o->scale = strtod(v, &end);
      if (end == v || *end || !(o->scale > 0) || o->scale > 1e6) bad = "--iters-scale: a number > 0";
    } else if (!strcmp(a, "--only")) {
      o->only = v;
      int any = 0;
      for (size_t k = 0; k < NCASES; k++) any |= selected(v, cases[k].name);
      if (!any) bad = "--only: names no case (gemm_bf16 gemm_f32 rand_normal fft_c2c lt_gelu_bias potrf_f64)";
    } else if (!strcmp(a, "--raw-alloc")) {
      if (!strcmp(v, "pool")) o->pool = 1;
      else if (!strcmp(v, "malloc")) o->pool = 0;
      else bad = "--raw-alloc: malloc (cudaMalloc, the default) or pool (cudaMallocAsync, as acx's buffers)";
    } else if (!strcmp(a, "--raw-rand-offset")) {
      if (!strcmp(v, "each")) o->rand_offset = 1;
      else if (!strcmp(v, "never")) o->rand_offset = 0;
      else bad = "--raw-rand-offset: never (the default) or each (the generator's offset set before every call)";
    } else if (!strcmp(a, "--device")) {
      if (parse_int(v, 0, 1 << 20, &o->device)) bad = "--device: a CUDA ordinal, 0 or more";
    } else {
      o->json = v;
    }
    if (bad) fprintf(stderr, "%s: %s (got '%s')\n", argv[0], bad, v);
  }
  if (bad) {
    usage(stderr, argv[0]);
    return 2;
  }
  return 0;
}

/* One case: R rounds, raw then acx in even rounds, acx then raw in odd ones. */
static void run_case(int device, acx_device_t *dev, const bcase_t *c, int reps, result_t *r) {
  double raw[MAX_REPS], acx[MAX_REPS], q[MAX_REPS];
  r->raw_ok = r->acx_ok = 1;
  for (int k = 0; k < reps; k++) {
    for (int side = 0; side < 2; side++) {
      int is_raw = (side == 0) == (k % 2 == 0);
      if (is_raw) r->raw_ok = run_raw(device, c->name, c->iters, &raw[k]) == 0;
      else r->acx_ok = run_acx(dev, c->name, c->iters, &acx[k]) == 0;
    }
    if (!r->raw_ok || !r->acx_ok) return; /* a failed side: the case has no ratio */
    q[k] = raw[k] / acx[k];
  }
  r->raw_s = median(raw, reps);
  r->acx_s = median(acx, reps);
  r->ratio = median(q, reps); /* sorted: q[0] and q[reps-1] are the spread */
  r->rmin = q[0];
  r->rmax = q[reps - 1];
}

static void write_json(const opts_t *o, const result_t *res, const char *transport) {
  FILE *f = fopen(o->json, "w");
  if (!f) {
    fprintf(stderr, "--json %s: %s\n", o->json, strerror(errno));
    return;
  }
  fprintf(f, "{\n  \"bench\": \"acx-lib-bench\",\n  \"transport\": \"%s\",\n  \"device\": %d,\n  \"reps\": %d,\n"
             "  \"goal_ratio\": %.2f,\n  \"cases\": [", transport, o->device, o->reps, GOAL_RATIO);
  const char *sep = "";
  for (size_t i = 0; i < NCASES; i++) {
    if (!selected(o->only, cases[i].name)) continue;
    const result_t *r = &res[i];
    int ok = r->raw_ok && r->acx_ok;
    fprintf(f, "%s\n    {\"case\": \"%s\", \"shape\": \"%s\", \"iters\": %d, \"ok\": %s", sep, cases[i].name,
            cases[i].shape, cases[i].iters, ok ? "true" : "false");
    if (ok)
      fprintf(f, ", \"raw_s\": %.9g, \"acx_s\": %.9g, \"ratio\": %.5f, \"ratio_min\": %.5f, \"ratio_max\": %.5f",
              r->raw_s, r->acx_s, r->ratio, r->rmin, r->rmax);
    fprintf(f, "}");
    sep = ",";
  }
  fprintf(f, "\n  ]\n}\n");
  fclose(f);
}

int main(int argc, char **argv) {
  opts_t o;
  int pr = parse_opts(argc, argv, &o);
  if (pr) return pr == 1 ? 0 : 2;
  raw_pool = o.pool;
  raw_rand_offset = o.rand_offset;
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("acx-lib-bench: no CUDA device visible: nothing to measure (skipped)\n");
    return 0;
  }
  if (o.device >= ndev) {
    fprintf(stderr, "--device %d: this machine has %d CUDA devices\n", o.device, ndev);
    return 2;
  }
  /* Both sides live at once, so that their rounds can alternate: this process's CUDA context (the
   * raw calls free their memory after each round) and the executor's. */
  acx_system_t *sys = NULL;
  acx_device_t *dev = NULL;
  acx_status_t st = acx_system_create(NULL, &sys);
  acx_device_config_t cfg = ACX_DEVICE_CONFIG_INIT;
  cfg.kind = ACX_DEVICE_KIND_CUDA;
  cfg.cuda_ordinal = o.device;
  if (st == ACX_OK) st = acx_device_open(sys, &cfg, &dev);
  if (st != ACX_OK) {
    fprintf(stderr, "acx: opening the device: %s\n", acx_status_str(st));
    return 1;
  }
  result_t res[NCASES] = {0};
  for (size_t i = 0; i < NCASES; i++) {
    if (!selected(o.only, cases[i].name)) continue;
    cases[i].iters = (int)fmax(1, cases[i].iters * o.scale);
    run_case(o.device, dev, &cases[i], o.reps, &res[i]);
  }
  acx_device_close(dev, T_WAIT);
  acx_system_destroy(sys, T_WAIT);

  const char *transport = getenv("ACX_EXECUTOR") ? getenv("ACX_EXECUTOR") : "process";
  printf("\nacx-lib-bench: raw library calls vs the same through acx (transport %s), GPU %d, %d round(s) ABBA; raw "
         "memory from %s\n", transport, o.device, o.reps, o.pool ? "the stream-ordered pool (cudaMallocAsync)" : "cudaMalloc");
  printf("%-12s %-30s %6s %12s %12s %12s %12s %8s %6s %6s %5s\n", "case", "shape", "iters", "raw time", "raw rate",
         "acx time", "acx rate", "acx/raw", "rmin", "rmax", "goal");
  int fail = 0;
  for (size_t i = 0; i < NCASES; i++) {
    if (!selected(o.only, cases[i].name)) continue;
    const bcase_t *c = &cases[i];
    const result_t *r = &res[i];
    const char *unit = c->is_bytes ? "GB/s" : "TFLOP/s";
    double div = c->is_bytes ? 1e9 : 1e12;
    char rt[32] = "failed", rr[32] = "-", at[32] = "failed", ar[32] = "-", ratio[16] = "-", lo[16] = "-",
         hi[16] = "-";
    int ok = r->raw_ok && r->acx_ok, met = 0;
    if (ok) {
      snprintf(rt, sizeof rt, "%.3f ms", r->raw_s * 1e3);
      snprintf(rr, sizeof rr, "%.1f %s", c->work / r->raw_s / div, unit);
      snprintf(at, sizeof at, "%.3f ms", r->acx_s * 1e3);
      snprintf(ar, sizeof ar, "%.1f %s", c->work / r->acx_s / div, unit);
      snprintf(ratio, sizeof ratio, "%.3f", r->ratio);
      snprintf(lo, sizeof lo, "%.3f", r->rmin);
      snprintf(hi, sizeof hi, "%.3f", r->rmax);
      met = r->ratio >= GOAL_RATIO;
    } else {
      if (r->raw_ok) snprintf(rt, sizeof rt, "ok");
      if (r->acx_ok) snprintf(at, sizeof at, "ok");
    }
    fail |= !met;
    printf("%-12s %-30s %6d %12s %12s %12s %12s %8s %6s %6s %5s\n", c->name, c->shape, c->iters, rt, rr, at, ar,
           ratio, lo, hi, met ? "met" : "MISS");
  }
  printf("(medians of %d rounds; rate ratio acx/raw, its smallest and largest round; goal: median >= %.2f)\n", o.reps,
         GOAL_RATIO);
  if (o.json) write_json(&o, res, transport);
  return fail ? 1 : 0;
}
