/* NVTX ranges in the "acx" domain around executor commands and collectives, for Nsight Systems.
 * Off unless ACX_NVTX=1; when off, acxk_nvtx_push/pop cost one well-predicted branch. Ranges
 * reach a profiler only when one is attached (nvtx3 loads its injection library itself). */
#ifndef ACXK_NVTX_H
#define ACXK_NVTX_H

#include <stdatomic.h>

/* 1 on, 0 off, -1 before the first use (ACX_NVTX not read yet). Internal to the inline wrappers. */
extern _Atomic int acxk_nvtx_state;
void acxk_nvtx_push_slow(const char *name);
void acxk_nvtx_pop_slow(void);

/* Opens a range named `name` (any string; copied by NVTX) on the calling thread. Any thread;
 * ranges nest per thread and each push must be paired with a pop on the same thread. */
static inline void acxk_nvtx_push(const char *name) {
  if (__builtin_expect(atomic_load_explicit(&acxk_nvtx_state, memory_order_relaxed) != 0, 0))
    acxk_nvtx_push_slow(name);
}
/* Closes the calling thread's innermost range. A pop without a push is logged once, not fatal. */
static inline void acxk_nvtx_pop(void) {
  if (__builtin_expect(atomic_load_explicit(&acxk_nvtx_state, memory_order_relaxed) != 0, 0)) acxk_nvtx_pop_slow();
}
/* 1 when ranges are being emitted (reads ACX_NVTX on first call). */
int acxk_nvtx_enabled(void);
/* Open ranges of the calling thread (for tests and for balance checks at shutdown). */
int acxk_nvtx_depth(void);
#endif
