/* The CUDA side of the extension "peer" (peer_exec.c): the one-shot all-reduce kernel's
 * arguments and its C-callable launcher (peer_kernels.cu). Only built with CUDA. */
#ifndef ACXK_PEER_KERNELS_H
#define ACXK_PEER_KERNELS_H

#include <stdint.h>

#include "acx_build_config.h"
#include "runtime/proto/peer_ops.h"

#if ACX_HAVE_CUDA
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One operation, by value to the kernel: device addresses in this executor. */
typedef struct acxk_peer_args {
  const void *data[ACXP_MAX_RANKS]; /* [q]: the operation's data slot in rank q's area (mine at [rank]) */
  unsigned char *flags[ACXP_MAX_RANKS]; /* [q]: rank q's area (its flags come first) */
  const void *send;
  void *recv;
  uint64_t count;                   /* elements */
  uint64_t timeout_ns;              /* the wait for the peers (the GPU's global timer) */
  int32_t *status;                  /* pinned host word: the kernel's failure (0: none) */
  const int32_t *abort;             /* pinned host word: nonzero makes waiting blocks leave */
  int32_t nranks, rank;
  uint64_t seq;                     /* the operation number s */
  int32_t ll;                       /* 1: the small-message variant (lines pushed to the peers) */
  uint64_t ll_off;                  /* its lines from rank 0 for this operation's parity, in an area */
  int32_t big;                      /* 1: the two-shot variant (flags[q]: rank q's area; data unused) */
  uint64_t slot_bytes, big_bytes;   /* the set's slot and big slot sizes (the two-shot's layout) */
  int32_t pdl;                      /* 1: launched with programmatic stream serialization (sm_90+: the
                                       kernel may be scheduled while the previous one on the stream
                                       ends, and waits for it before touching memory) */
} acxk_peer_args_t;

/* Launches the one-shot all-reduce (runtime/proto/peer_ops.h) of a->count elements of `dtype` with
 * `op` (acx_redop_t) on `stream`. cudaErrorInvalidValue for a dtype or op it does not reduce. */
cudaError_t acxk_peer_launch_allreduce(const acxk_peer_args_t *a, int dtype, int op, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
#endif
