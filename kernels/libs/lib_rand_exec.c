/* cuRAND, executor side: one generator per (stream, generator type), created on first use in
 * this executor incarnation and bound to its stream. Each request names seed and offset; the
 * seed is set only when it changes (it re-initialises the generator). The offset is set unless
 * the generator is known to stand there already: cuRAND re-initialises its state on every
 * curandSetGeneratorOffset (about 15 us for 2^28 Philox normals on an H100, measured with
 * acx-lib-bench --raw-rand-offset), and a context's consecutive requests continue where the last
 * one ended. Where cuRAND's own position after a call is not known to be offset + n, the offset
 * is set every time (see continues()). */
#include <inttypes.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>
#include <curand.h>

#include "acx/rand.h"
#include "kernels/libs/lib_exec.h"
#include "runtime/base/log.h"

#define NRNG 3

typedef struct gen {
  curandGenerator_t g;
  uint64_t seed;
  int seeded;
  int at_next;   /* 1: cuRAND's position is `next` (the last call ended there and succeeded) */
  uint64_t next;
} gen_t;

/* Whether cuRAND's generator stands at offset + n after drawing n numbers of this kind, so that
 * the next request at offset + n needs no curandSetGeneratorOffset. Kept to what the GPU tests
 * show (test_lib_rand t_positional compares continued requests with positioned ones for every
 * generator, distribution and dtype): Philox, 32-bit outputs, whole 4-number blocks (Philox
 * draws four at a time); Poisson never (its draws per number vary). Elsewhere the offset is set
 * every time, as before. */
static int continues(const acxk_rand_desc_t *q) {
  return q->rng == ACX_RAND_PHILOX && q->dist != ACX_RAND_POISSON && q->dtype != ACX_DTYPE_F64 && q->n % 4 == 0;
}

typedef struct rand_state {
  gen_t gen[ACXI_MAX_STREAMS][NRNG];
} rand_state_t;

static const char *status_name(curandStatus_t s) {
  switch (s) {
    case CURAND_STATUS_SUCCESS: return "CURAND_STATUS_SUCCESS";
    case CURAND_STATUS_VERSION_MISMATCH: return "CURAND_STATUS_VERSION_MISMATCH";
    case CURAND_STATUS_NOT_INITIALIZED: return "CURAND_STATUS_NOT_INITIALIZED";
    case CURAND_STATUS_ALLOCATION_FAILED: return "CURAND_STATUS_ALLOCATION_FAILED";
    case CURAND_STATUS_TYPE_ERROR: return "CURAND_STATUS_TYPE_ERROR";
    case CURAND_STATUS_OUT_OF_RANGE: return "CURAND_STATUS_OUT_OF_RANGE";
    case CURAND_STATUS_LENGTH_NOT_MULTIPLE: return "CURAND_STATUS_LENGTH_NOT_MULTIPLE";
    case CURAND_STATUS_DOUBLE_PRECISION_REQUIRED: return "CURAND_STATUS_DOUBLE_PRECISION_REQUIRED";
    case CURAND_STATUS_LAUNCH_FAILURE: return "CURAND_STATUS_LAUNCH_FAILURE";
    case CURAND_STATUS_PREEXISTING_FAILURE: return "CURAND_STATUS_PREEXISTING_FAILURE";
    case CURAND_STATUS_INITIALIZATION_FAILED: return "CURAND_STATUS_INITIALIZATION_FAILED";
    case CURAND_STATUS_ARCH_MISMATCH: return "CURAND_STATUS_ARCH_MISMATCH";
    case CURAND_STATUS_INTERNAL_ERROR: return "CURAND_STATUS_INTERNAL_ERROR";
  }
  return "CURAND_STATUS_<unknown>";
}

#define RANDCHECK(c, call)                                                                               \
  do {                                                                                                  \
    curandStatus_t acxk_rs_ = (call);                                                                   \
    if (acxk_rs_ != CURAND_STATUS_SUCCESS)                                                              \
      return acxk_lib_fail((c), ACX_LIB_CURAND, (int)acxk_rs_, status_name(acxk_rs_), #call,            \
                           acxk_rs_ == CURAND_STATUS_ALLOCATION_FAILED);                               \
  } while (0)

void acxk_rand_exec_destroy(void *state) {
  rand_state_t *s = state;
  for (int i = 0; i < ACXI_MAX_STREAMS; i++)
    for (int r = 0; r < NRNG; r++)
      if (s->gen[i][r].g) (void)curandDestroyGenerator(s->gen[i][r].g);
  free(s);
}

static acx_status_t generator(acxk_lib_call_t *c, uint32_t rng, gen_t **out) {
  static const curandRngType_t types[NRNG] = {CURAND_RNG_PSEUDO_PHILOX4_32_10, CURAND_RNG_PSEUDO_XORWOW,
                                              CURAND_RNG_PSEUDO_MRG32K3A};
  if (rng >= NRNG) return acxk_lib_bad(c, ACX_ERR_INVALID_ARG, "unknown generator type");
  if (c->cmd->stream >= ACXI_MAX_STREAMS)
    return acxk_lib_bad(c, ACX_ERR_INVALID_ARG, "stream beyond the generator table");
  void **slot = acxk_lib_state(c, ACX_LIB_CURAND);
  if (!*slot && !(*slot = calloc(1, sizeof(rand_state_t)))) return ACX_ERR_NO_MEMORY;
  gen_t *g = &((rand_state_t *)*slot)->gen[c->cmd->stream][rng];
  if (!g->g) {
    curandGenerator_t h;
    RANDCHECK(c, curandCreateGenerator(&h, types[rng]));
    curandStatus_t rs = curandSetStream(h, (cudaStream_t)c->stream);
    if (rs != CURAND_STATUS_SUCCESS) {
      (void)curandDestroyGenerator(h);
      return acxk_lib_fail(c, ACX_LIB_CURAND, (int)rs, status_name(rs), "curandSetStream", 0);
    }
    g->g = h;
    g->seeded = 0;
    g->at_next = 0;
  }
  *out = g;
  return ACX_OK;
}

static acx_status_t draw(acxk_lib_call_t *c, gen_t *g, const acxk_rand_desc_t *q, void *out, size_t n);

acx_status_t acxk_rand_exec(acxk_lib_call_t *c) {
  const acxk_rand_desc_t *q = &c->d.u.rand;
  gen_t *g = NULL;
  ACXCHECK(generator(c, q->rng, &g));
  if (!g->seeded || g->seed != q->seed) {
    RANDCHECK(c, curandSetPseudoRandomGeneratorSeed(g->g, q->seed));
    g->seed = q->seed;
    g->seeded = 1;
    g->at_next = 0;
  }
  if (!g->at_next || g->next != q->offset) RANDCHECK(c, curandSetGeneratorOffset(g->g, q->offset));
  /* Until this call has succeeded, where cuRAND stands is not known. */
  g->at_next = 0;
  void *out = c->ptr[0];
  size_t n = (size_t)q->n;
  if (n == 0) return ACX_OK;
  ACXCHECK(draw(c, g, q, out, n));
  if (continues(q)) {
    g->next = q->offset + n;
    g->at_next = 1;
  }
  return ACX_OK;
}

static acx_status_t draw(acxk_lib_call_t *c, gen_t *g, const acxk_rand_desc_t *q, void *out, size_t n) {
  int f64 = q->dtype == ACX_DTYPE_F64;
  switch (q->dist) {
    case ACX_RAND_UNIFORM:
      if (f64) RANDCHECK(c, curandGenerateUniformDouble(g->g, out, n));
      else RANDCHECK(c, curandGenerateUniform(g->g, out, n));
      return ACX_OK;
    case ACX_RAND_NORMAL:
      if (f64) RANDCHECK(c, curandGenerateNormalDouble(g->g, out, n, q->p0, q->p1));
      else RANDCHECK(c, curandGenerateNormal(g->g, out, n, (float)q->p0, (float)q->p1));
      return ACX_OK;
    case ACX_RAND_LOG_NORMAL:
      if (f64) RANDCHECK(c, curandGenerateLogNormalDouble(g->g, out, n, q->p0, q->p1));
      else RANDCHECK(c, curandGenerateLogNormal(g->g, out, n, (float)q->p0, (float)q->p1));
      return ACX_OK;
    case ACX_RAND_POISSON: RANDCHECK(c, curandGeneratePoisson(g->g, out, n, q->p0)); return ACX_OK;
    case ACX_RAND_BITS: RANDCHECK(c, curandGenerate(g->g, out, n)); return ACX_OK;
    default: return acxk_lib_bad(c, ACX_ERR_INVALID_ARG, "unknown distribution");
  }
}
