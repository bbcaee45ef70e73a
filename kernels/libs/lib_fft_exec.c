/* cuFFT, executor side: plans cached per (type, precision, shape, batch, stream) for this executor
 * incarnation, least recently used evicted beyond PLAN_CACHE; each plan is bound to its stream
 * at creation and owns its work area (cuFFT's automatic allocation). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <cufft.h>

#include "acx/fft.h"
#include "kernels/libs/lib_exec.h"
#include "runtime/base/log.h"

/* Plans hold work areas as large as a transform's data: keep a modest number alive. */
#define PLAN_CACHE 32

typedef struct plan {
  int live;
  uint32_t type, dtype, stream;
  int32_t rank;
  int64_t n[3], batch;
  cufftHandle h;
  uint64_t last_use;
} plan_t;

typedef struct fft_state {
  plan_t plans[PLAN_CACHE];
  uint64_t clock;
} fft_state_t;

static const char *result_name(cufftResult r) {
  switch (r) {
    case CUFFT_SUCCESS: return "CUFFT_SUCCESS";
    case CUFFT_INVALID_PLAN: return "CUFFT_INVALID_PLAN";
    case CUFFT_ALLOC_FAILED: return "CUFFT_ALLOC_FAILED";
    case CUFFT_INVALID_TYPE: return "CUFFT_INVALID_TYPE";
    case CUFFT_INVALID_VALUE: return "CUFFT_INVALID_VALUE";
    case CUFFT_INTERNAL_ERROR: return "CUFFT_INTERNAL_ERROR";
    case CUFFT_EXEC_FAILED: return "CUFFT_EXEC_FAILED";
    case CUFFT_SETUP_FAILED: return "CUFFT_SETUP_FAILED";
    case CUFFT_INVALID_SIZE: return "CUFFT_INVALID_SIZE";
    case CUFFT_UNALIGNED_DATA: return "CUFFT_UNALIGNED_DATA";
    case CUFFT_INVALID_DEVICE: return "CUFFT_INVALID_DEVICE";
    case CUFFT_NO_WORKSPACE: return "CUFFT_NO_WORKSPACE";
    case CUFFT_NOT_IMPLEMENTED: return "CUFFT_NOT_IMPLEMENTED";
    case CUFFT_NOT_SUPPORTED: return "CUFFT_NOT_SUPPORTED";
    default: return "CUFFT_<other>";
  }
}

#define FFTCHECK(c, call)                                                                             \
  do {                                                                                               \
    cufftResult acxk_fr_ = (call);                                                                   \
    if (acxk_fr_ != CUFFT_SUCCESS)                                                                   \
      return acxk_lib_fail((c), ACX_LIB_CUFFT, (int)acxk_fr_, result_name(acxk_fr_), #call,          \
                           acxk_fr_ == CUFFT_ALLOC_FAILED);                                         \
  } while (0)

void acxk_fft_exec_destroy(void *state) {
  fft_state_t *s = state;
  for (int i = 0; i < PLAN_CACHE; i++)
    if (s->plans[i].live) (void)cufftDestroy(s->plans[i].h);
  free(s);
}

static int same(const plan_t *p, const acxk_fft_desc_t *q, uint32_t stream) {
  return p->live && p->type == q->type && p->dtype == q->dtype && p->stream == stream && p->rank == q->rank &&
         p->batch == q->batch && !memcmp(p->n, q->n, sizeof p->n);
}

static acx_status_t get_plan(acxk_lib_call_t *c, const acxk_fft_desc_t *q, cufftHandle *out) {
  void **slot = acxk_lib_state(c, ACX_LIB_CUFFT);
  if (!*slot && !(*slot = calloc(1, sizeof(fft_state_t)))) return ACX_ERR_NO_MEMORY;
  fft_state_t *s = *slot;
  plan_t *victim = &s->plans[0];
  for (int i = 0; i < PLAN_CACHE; i++) {
    plan_t *p = &s->plans[i];
    if (same(p, q, c->cmd->stream)) {
      p->last_use = ++s->clock;
      *out = p->h;
      return ACX_OK;
    }
    if (!p->live || (victim->live && p->last_use < victim->last_use)) victim = p;
  }
  if (victim->live) {
    (void)cufftDestroy(victim->h);
    victim->live = 0;
  }
  int f64 = q->dtype == ACX_DTYPE_F64;
  cufftType t = q->type == ACX_FFT_C2C ? (f64 ? CUFFT_Z2Z : CUFFT_C2C)
                : q->type == ACX_FFT_R2C ? (f64 ? CUFFT_D2Z : CUFFT_R2C)
                                         : (f64 ? CUFFT_Z2D : CUFFT_C2R);
  long long n[3] = {q->n[0], q->n[1], q->n[2]};
  size_t work = 0;
  cufftHandle h = 0;
  FFTCHECK(c, cufftCreate(&h));
  /* NULL embeddings: the contiguous layout, strides and distances implied. */
  cufftResult r = cufftMakePlanMany64(h, q->rank, n, NULL, 1, 0, NULL, 1, 0, t, q->batch, &work);
  if (r == CUFFT_SUCCESS) r = cufftSetStream(h, (cudaStream_t)c->stream);
  if (r != CUFFT_SUCCESS) {
    (void)cufftDestroy(h);
    return acxk_lib_fail(c, ACX_LIB_CUFFT, (int)r, result_name(r), "cufftMakePlanMany64/cufftSetStream",
                         r == CUFFT_ALLOC_FAILED);
  }
  *victim = (plan_t){.live = 1, .type = q->type, .dtype = q->dtype, .stream = c->cmd->stream, .rank = q->rank,
                     .n = {q->n[0], q->n[1], q->n[2]}, .batch = q->batch, .h = h, .last_use = ++s->clock};
  ACX_INFO(LIB, "cuFFT plan: type %u, %s, rank %d, %" PRId64 " x %" PRId64 " x %" PRId64 ", batch %" PRId64
           ", work area %zu bytes", q->type, q->dtype == ACX_DTYPE_F64 ? "f64" : "f32", q->rank, q->n[0], q->n[1],
           q->n[2], q->batch, work);
  *out = h;
  return ACX_OK;
}

acx_status_t acxk_fft_exec(acxk_lib_call_t *c) {
  const acxk_fft_desc_t *q = &c->d.u.fft;
  if (q->rank < 1 || q->rank > 3 || q->batch < 1 || (q->dtype != ACX_DTYPE_F32 && q->dtype != ACX_DTYPE_F64))
    return acxk_lib_bad(c, ACX_ERR_INVALID_ARG, "malformed FFT descriptor");
  cufftHandle h = 0;
  ACXCHECK(get_plan(c, q, &h));
  void *in = c->ptr[0], *out = c->ptr[1];
  int f64 = q->dtype == ACX_DTYPE_F64;
  switch (q->type) {
    case ACX_FFT_C2C:
      if (f64) FFTCHECK(c, cufftExecZ2Z(h, in, out, q->direction));
      else FFTCHECK(c, cufftExecC2C(h, in, out, q->direction));
      return ACX_OK;
    case ACX_FFT_R2C:
      if (f64) FFTCHECK(c, cufftExecD2Z(h, in, out));
      else FFTCHECK(c, cufftExecR2C(h, in, out));
      return ACX_OK;
    case ACX_FFT_C2R:
      if (f64) FFTCHECK(c, cufftExecZ2D(h, in, out));
      else FFTCHECK(c, cufftExecC2R(h, in, out));
      return ACX_OK;
    default: return acxk_lib_bad(c, ACX_ERR_INVALID_ARG, "unknown FFT type");
  }
}
