/* cuRAND context, rank side: validates generate requests and stamps each with the context's
 * generator, seed and position, which it then advances, so the numbers never depend on what the
 * executor did before (lib_rand_exec.c sets both before generating). No CUDA header here. */
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "acx/rand.h"
#include "runtime/libs/lib_internal.h"
#include "runtime/device/device_internal.h"
#include "runtime/base/log.h"

struct acx_rand {
  acxk_lib_ctx_t *ctx;
  acx_rand_rng_t rng;
  uint64_t seed;
  _Atomic uint64_t offset;
};

acx_status_t acx_rand_create(acx_device_t *dev, const acx_lib_config_t *cfg, acx_rand_rng_t rng, uint64_t seed,
                             acx_rand_t **rand) {
  ACX_CHECK_NULL(dev);
  ACX_CHECK_NULL(rand);
  *rand = NULL;
  ACX_CHECK_ARG((unsigned)rng <= ACX_RAND_MRG32K3A, "acx_rand_create: argument 'rng'=%d is not an acx_rand_rng_t",
                (int)rng);
  acx_rand_t *r = calloc(1, sizeof *r);
  if (!r) return ACX_ERR_NO_MEMORY;
  acx_status_t st = acxk_lib_ctx_create(dev, cfg, ACX_LIB_CURAND, &r->ctx);
  if (st != ACX_OK) {
    free(r);
    return st;
  }
  r->rng = rng;
  r->seed = seed;
  atomic_init(&r->offset, 0);
  *rand = r;
  return ACX_OK;
}

acx_status_t acx_rand_destroy(acx_rand_t *rand) {
  if (!rand) return ACX_OK;
  acx_status_t st = acxk_lib_ctx_destroy(rand->ctx);
  free(rand);
  return st;
}

acx_status_t acx_rand_get_offset(acx_rand_t *rand, uint64_t *offset) {
  ACX_CHECK_NULL(rand);
  ACX_CHECK_NULL(offset);
  *offset = atomic_load(&rand->offset);
  return ACX_OK;
}

acx_status_t acx_rand_set_offset(acx_rand_t *rand, uint64_t offset) {
  ACX_CHECK_NULL(rand);
  atomic_store(&rand->offset, offset);
  return ACX_OK;
}

acx_status_t acx_rand_generate(acx_rand_t *rand, acx_rand_dist_t dist, acx_buffer_t *buf, size_t offset, size_t n,
                               double p0, double p1, acx_future_t **done) {
  static const char fn[] = "acx_rand_generate";
  if (done) *done = NULL;
  ACX_CHECK_NULL(rand);
  acxk_lib_ctx_t *x = rand->ctx;
  uint32_t dts;
  switch (dist) {
    case ACX_RAND_UNIFORM:
    case ACX_RAND_NORMAL:
    case ACX_RAND_LOG_NORMAL: dts = ACXK_DT(ACX_DTYPE_F32) | ACXK_DT(ACX_DTYPE_F64); break;
    case ACX_RAND_POISSON:
    case ACX_RAND_BITS: dts = ACXK_DT(ACX_DTYPE_U32); break;
    default:
      ACX_WARN(LIB, "%s: argument 'dist'=%d is not an acx_rand_dist_t", fn, (int)dist);
      return ACX_ERR_INVALID_ARG;
  }
  ACXCHECK(acxk_lib_check_buf(x, fn, "buf", buf, 0, dts));
  if (dist == ACX_RAND_NORMAL || dist == ACX_RAND_LOG_NORMAL) {
    ACX_CHECK_ARG(n % 2 == 0, "%s: argument 'n'=%zu must be even for normal draws (Box-Muller pairs)", fn, n);
    ACX_CHECK_ARG(offset % (2 * acx_dtype_size(buf->dtype)) == 0,
                  "%s: argument 'offset'=%zu must be a multiple of two elements for normal draws", fn, offset);
    ACX_CHECK_ARG(isfinite(p0) && isfinite(p1) && p1 > 0, "%s: mean %g and stddev %g: stddev must be finite and > 0",
                  fn, p0, p1);
  }
  if (dist == ACX_RAND_POISSON)
    ACX_CHECK_ARG(isfinite(p0) && p0 > 0, "%s: argument 'p0' (lambda) = %g must be finite and > 0", fn, p0);
  if (dist == ACX_RAND_NORMAL || dist == ACX_RAND_LOG_NORMAL) {
    if (buf->dtype == ACX_DTYPE_F32 && (fabs(p0) > 3.0e38 || p1 > 3.0e38)) {
      ACX_WARN(LIB, "%s: mean %g or stddev %g does not fit an f32", fn, p0, p1);
      return ACX_ERR_INVALID_ARG;
    }
  }
  if (n > (size_t)INT64_MAX) {
    ACX_WARN(LIB, "%s: argument 'n'=%zu overflows", fn, n);
    return ACX_ERR_OVERFLOW;
  }
  acxk_req_t req;
  acxk_req_init(&req, ACXK_OP_RAND_GENERATE);
  ACXCHECK(acxk_req_vector(&req, 0, fn, "buf", buf, offset, (int64_t)n, 1, 1));
  /* The position is taken only for a request that passed validation, so a refused one leaves no
   * gap; a request the device then fails still consumes its numbers (the position says where the
   * next one draws from, not how many were delivered). */
  if (acxk_lib_ctx_host_kind(x)) return acxk_lib_submit(x, fn, &req, done, NULL); /* refused: no draw */
  uint64_t pos = atomic_fetch_add(&rand->offset, (uint64_t)n);
  req.d.u.rand = (acxk_rand_desc_t){.rng = (uint32_t)rand->rng, .dist = (uint32_t)dist,
                                    .dtype = (uint32_t)buf->dtype, .seed = rand->seed, .offset = pos,
                                    .n = (uint64_t)n, .p0 = p0, .p1 = p1};
  return acxk_lib_submit(x, fn, &req, done, NULL);
}
