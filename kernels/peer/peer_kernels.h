/* The CUDA side of the extension "peer" (peer_exec.c): the one-shot all-reduce kernel's
 * arguments and its C-callable launcher (peer_kernels.cu). Only built with CUDA. */
#ifndef ACXK_PEER_KERNELS_H
#define ACXK_PEER_KERNELS_H

#include <stdint.h>

#include "acx_build_config.h"
#include "runtime/proto/peer_ops.h"

/* ACX_COLL_PEER_TRACE's histograms (below): ACXK_TRACE_BUCKETS buckets, 4 per power of two. A
 * time of t ns falls in bucket t below 4, else 4 (o - 1) + the two bits below t's leading one (o
 * that bit's place), at most the last (from about 7.5 s); ACXK_TRACE_BUCKET_LO(b) is the least
 * time of bucket b, ACXK_TRACE_BUCKET_W(b) its width (tests/device/test_peer_layout.c checks
 * that they agree). */
#define ACXK_TRACE_BUCKETS 128
#define ACXK_TRACE_BUCKET_LO(b) ((b) < 4 ? (uint64_t)(b) : (uint64_t)(4 + (b) % 4) << ((b) / 4 - 1))
#define ACXK_TRACE_BUCKET_W(b) ((b) < 4 ? (uint64_t)1 : (uint64_t)1 << ((b) / 4 - 1))
#ifdef __CUDACC__
__host__ __device__
#endif
static inline int acxk_trace_bucket(uint64_t t) {
  if (t < 4) return (int)t;
#ifdef __CUDA_ARCH__
  const int o = 63 - __clzll((long long)t);
#else
  const int o = 63 - __builtin_clzll(t);
#endif
  const int b = 4 * (o - 1) + (int)((t >> (o - 2)) & 3u);
  return b < ACXK_TRACE_BUCKETS ? b : ACXK_TRACE_BUCKETS - 1;
}

#if ACX_HAVE_CUDA
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One operation, by value to the kernel: device addresses in this executor. */
typedef struct acxk_peer_args {
  const void *data[ACXP_MAX_RANKS]; /* [q]: data slot 0 of rank q's area (mine at [rank]; the one-shot) */
  unsigned char *flags[ACXP_MAX_RANKS]; /* [q]: rank q's area (its flags come first) */
  const void *send;
  void *recv;
  uint64_t count;                   /* elements */
  uint64_t timeout_ns;              /* the wait for the peers (the GPU's global timer) */
  int32_t *status;                  /* pinned host word: the kernel's failure (0: none) */
  const int32_t *abort;             /* pinned host word: nonzero makes waiting blocks leave */
  int32_t nranks, rank;
  uint64_t seq;                     /* the operation number s */
  int32_t big;                      /* 1: the two-shot variant (flags[q]: rank q's area; data unused) */
  uint64_t slot_bytes, big_bytes;   /* the set's slot and big slot sizes (the two-shot's layout) */
  int32_t big_blocks;               /* the two-shot's grid (the set's, the same on every rank) */
  int32_t groups, per_group;        /* the two-shot's groups (peer_ops.h): G groups of K ranks; K = 1
                                       (G = nranks): without groups */
  int8_t grp[ACXP_MAX_RANKS], lane[ACXP_MAX_RANKS], at[ACXP_MAX_RANKS];
  int32_t small_groups;             /* 1: this one-shot is the one-shot with groups (peer_ops.h) */
  int32_t ll;                       /* 1: the push lines (the small-message kernel) */
  int32_t ll_groups;                /* 1: the push lines with groups (peer_ops.h) */
  const uint64_t *regtab;           /* the two-shot with groups: the registration table (peer_ops.h,
                                       "Registered buffers"; in this rank's area) */
  uint64_t pub_in, pub_out;         /* ... and this rank's publication words for its input and output */
  uint64_t *trace;                  /* ACX_COLL_PEER_TRACE: the set's trace words (below; device memory),
                                       or NULL */
  int32_t pdl;                      /* 1: launched with programmatic stream serialization (sm_90+: the
                                       kernel may be scheduled while the previous one on the stream
                                       ends, and waits for it before touching memory) */
} acxk_peer_args_t;

/* ACX_COLL_PEER_TRACE=1: where each operation's time goes, as block 0's thread 0 sees it (the GPU's
 * global timer, ns), summed per kernel kind and phase over the set's life: word
 * ACXK_TRACE_SUM(kind, phase), the operations traced ACXK_TRACE_OPS(kind), the end of the last one
 * ACXK_TRACE_LAST. Phase 0 of every kind is the gap before the operation (since the end of the
 * set's operation before it, in this launch or an earlier one); the others are the kind's steps,
 * named in peer_exec.c (acxk_trace_phase). The kernels of a set run one after the other, so one
 * thread at a time writes the words. */
enum { ACXK_KIND_LL, ACXK_KIND_ONE, ACXK_KIND_ONE_G, ACXK_KIND_TWO, ACXK_KIND_TWO_G, ACXK_KINDS };
#define ACXK_TRACE_PHASES 10
#define ACXK_TRACE_SUM(kind, phase) ((kind) * ACXK_TRACE_PHASES + (phase))
#define ACXK_TRACE_OPS(kind) (ACXK_KINDS * ACXK_TRACE_PHASES + (kind))
#define ACXK_TRACE_LAST (ACXK_KINDS * ACXK_TRACE_PHASES + ACXK_KINDS)
/* And per kind and phase a histogram of each occurrence's time (acxk_trace_bucket, above), so that
 * the log can give medians beside the means, which a few long waits (warm-up, a late peer) pull
 * up. */
#define ACXK_TRACE_HIST(kind, phase, b) \
  (ACXK_TRACE_LAST + 1 + ((uint64_t)(kind) * ACXK_TRACE_PHASES + (phase)) * ACXK_TRACE_BUCKETS + (b))
#define ACXK_TRACE_WORDS ACXK_TRACE_HIST(ACXK_KINDS, 0, 0)

/* The push lines and the one-shot run a batch of operations of one dtype, op and count in one
 * launch, one after the other: their own fields (the set's are in acxk_peer_args_t). */
#define ACXK_PEER_BATCH_MAX 16
typedef struct acxk_peer_op {
  const void *send;
  void *recv;
  uint64_t count;      /* elements (the push lines: at most the set's ll_bytes of them; the
                          one-shot: acxk_peer_args_t's count, every operation's) */
  uint64_t seq;        /* the operation number s */
  uint64_t timeout_ns; /* its wait for the peers */
  int32_t *status;     /* pinned host word: its failure (0: none) */
} acxk_peer_op_t;
typedef struct acxk_peer_batch {
  uint32_t nops; /* 1 .. ACXK_PEER_BATCH_MAX, of one dtype and op */
  acxk_peer_op_t op[ACXK_PEER_BATCH_MAX];
} acxk_peer_batch_t;

/* Launches the all-reduce (runtime/proto/peer_ops.h) on `stream`: with a->big, the two-shot of
 * a's own operation (bt unused); else bt's operations (a's send, recv, seq, status unused; a->data[q]
 * slot 0 of rank q's area): with a->ll the small-message kernel, else the one-shot of a->count
 * elements each (with a->small_groups, with groups). `dtype` and `op` (acx_redop_t) are every
 * operation's. cudaErrorInvalidValue for a dtype or op it does not reduce, or a batch that is
 * missing, empty or larger than ACXK_PEER_BATCH_MAX. */
cudaError_t acxk_peer_launch_allreduce(const acxk_peer_args_t *a, const acxk_peer_batch_t *bt, int dtype, int op,
                                       cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
#endif
