/* cuRAND through acx: pseudo-random numbers into acx buffers, reproducibly. A context has a
 * generator type and a seed; every request draws from an absolute position (the offset) of that
 * generator's sequence, which the context advances by the request's count. The numbers of a
 * request depend only on (generator type, seed, offset, count, distribution and its parameters):
 * the same five give the same numbers on any executor incarnation, before or after a restart.
 *
 * Threads and completion as in acx/lib.h. Statuses of every request, besides those of acx/lib.h
 * and acx/device.h: ACX_ERR_NULL_ARG, ACX_ERR_INVALID_ARG (n, alignment, a distribution
 * parameter out of its domain), ACX_ERR_BAD_DTYPE, ACX_ERR_OUT_OF_RANGE, ACX_ERR_STALE_BUFFER,
 * ACX_ERR_INVALID_STATE, ACX_ERR_NOT_SUPPORTED (host kind), ACX_ERR_LIBRARY (curandStatus_t in
 * lib_code). */
#ifndef ACX_RAND_H
#define ACX_RAND_H

/* Exported from libacx, which hides everything else (cmake/libacx.map). */
#pragma GCC visibility push(default)

#include "acx/lib.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct acx_rand acx_rand_t;

/* Generators whose position can be set directly (counter- or skip-ahead-based). PHILOX is the
 * default: its position costs nothing to set, so every request can name its own. */
typedef enum acx_rand_rng {
  ACX_RAND_PHILOX = 0,  /* Philox-4x32-10 */
  ACX_RAND_XORWOW = 1,
  ACX_RAND_MRG32K3A = 2
} acx_rand_rng_t;

typedef enum acx_rand_dist {
  ACX_RAND_UNIFORM = 0,    /* (0, 1] */
  ACX_RAND_NORMAL = 1,     /* mean, stddev */
  ACX_RAND_LOG_NORMAL = 2, /* exp of a normal with mean, stddev */
  ACX_RAND_POISSON = 3,    /* lambda */
  ACX_RAND_BITS = 4        /* 32 random bits */
} acx_rand_dist_t;

/* Creates a context drawing from generator `rng` seeded with `seed`, at offset 0. cfg may be
 * NULL. Statuses as acx_blas_create. */
acx_status_t acx_rand_create(acx_device_t *dev, const acx_lib_config_t *cfg, acx_rand_rng_t rng, uint64_t seed,
                             acx_rand_t **rand);
/* As acx_blas_destroy. */
acx_status_t acx_rand_destroy(acx_rand_t *rand);
/* The position the next request draws from, and setting it (e.g. back to 0 to repeat a run). */
acx_status_t acx_rand_get_offset(acx_rand_t *rand, uint64_t *offset);
acx_status_t acx_rand_set_offset(acx_rand_t *rand, uint64_t offset);

/* Fills n elements of buf from byte `offset` on and advances the context's position by n.
 * Dtypes: f32 or f64 for UNIFORM, NORMAL, LOG_NORMAL; u32 for POISSON and BITS. NORMAL and
 * LOG_NORMAL draw pairs (Box-Muller): n must be even and offset a multiple of two elements.
 * p0, p1: mean and stddev (> 0) for NORMAL and LOG_NORMAL; lambda (> 0) in p0 for POISSON;
 * unused otherwise. */
acx_status_t acx_rand_generate(acx_rand_t *rand, acx_rand_dist_t dist, acx_buffer_t *buf, size_t offset, size_t n,
                               double p0, double p1, acx_future_t **done);

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif
