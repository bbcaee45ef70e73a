/* The extension "peer" (ops ACXP_OP_*, runtime/proto/peer_ops.h): acx's own one-shot all-reduce
 * between the executors of one node, through each other's memory. One engine for both kinds:
 *   host kind: the executor runs the protocol itself, one operation of a set at a time, from its
 *              progress hook: the loop never blocks on a peer and serves its other commands
 *              meanwhile (a peer may need them to get to its own part: a remote get served here);
 *              the wait is bounded by the operation's deadline and the coll's abort word;
 *   cuda:      a kernel (peer_kernels.cu) runs it on the command's stream; the extension tracks its
 *              completion with an event and reports the status the kernel left in the control
 *              region (a peer that never came, an abort), never a success it did not see.
 * The protocol, the memory layout and the arithmetic are described in runtime/proto/peer_ops.h. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acx/coll.h"
#include "acx_build_config.h"
#include "kernels/exec/engine.h"
#include "kernels/peer/peer_kernels.h"
#include "runtime/base/clock.h"
#include "runtime/base/half.h"
#include "runtime/base/log.h"
#include "runtime/base/param.h"
#include "runtime/proto/peer_ops.h"

#if ACX_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define EV_CACHE 64
#define ACXP_BATCH_MAX 16 /* operations of one kernel launch at most (cuda) */
#if ACX_HAVE_CUDA
_Static_assert(ACXP_BATCH_MAX == ACXK_PEER_BATCH_MAX, "the batch limit is the kernel's");
#endif

typedef struct pend {
  acxi_cmd_t cmd;
  void *ev; /* cudaEvent_t after the kernel; NULL: a later operation's event covers it (below) */
  int64_t submit_ns; /* cuda: when it was launched */
  const unsigned char *in; /* the input and output in this executor */
  unsigned char *out;
  /* host kind */
  size_t es;
  int started;      /* its data is in the slot and its flags raised */
  int64_t deadline; /* from its start */
  unsigned polls;   /* looks at the peers' flags without news */
  int fence;        /* an ACXP_OP_FENCE: completes with the set's failure once it reaches the head */
  int ll;           /* host kind: the small-message variant (lines pushed to the peers) */
  int big;          /* host kind: the two-shot variant (larger than a slot) */
  int gos;          /* host kind: the one-shot with groups */
  uint64_t big_t;   /* ... its chunk */
  int big_phase;    /* ... 0: chunk not started, 1-8: the steps of host_big (waits for A, D, B, C);
                       the one-shot with groups: 1, 2 waiting for A, B (host_gos) */
  unsigned char *big_in; /* ... the input as it was at the start (the host engine runs a later write
                            on the stream at once; the chunks read it over time) */
  /* host kind, the two-shot with groups through registered buffers (peer_ops.h): this rank's
   * publication words, and its group peers' inputs / outputs where they published them (NULL:
   * staged / copied from the second halves), read once after the first A */
  uint64_t pub_in, pub_out;
  int pubs_read, nouts;
  const unsigned char *pin[ACXP_MAX_RANKS];
  unsigned char *outs[ACXP_MAX_RANKS];
} pend_t;

typedef struct pset {
  struct pset *next;
  uint64_t id; /* 0: destroyed, kept until its kernels have left */
  int nranks, rank;
  acxp_ctl_t *ctl;     /* in this process */
  acxp_ctl_t *ctl_dev; /* the same, as the GPU addresses it (cuda) */
  uint64_t *trace;     /* cuda, ACX_COLL_PEER_TRACE=1: the kernels' trace words (peer_kernels.h;
                          device memory), logged when the set goes */
  unsigned char *area[ACXP_MAX_RANKS];
  uint64_t slot_bytes;
  uint64_t ll_bytes; /* all-reduces of at most this many bytes push lines (peer_ops.h) */
  uint64_t big_bytes; /* the big slots (0: no two-shot; all-reduces larger than a slot refused) */
  uint64_t big_blocks; /* cuda: the two-shot's blocks */
  /* The two-shot's groups (peer_ops.h; without groups: G = nranks, K = 1, grp[q] = q, lane[q] = 0,
   * at[q] = q) */
  int G, K;
  int8_t grp[ACXP_MAX_RANKS], lane[ACXP_MAX_RANKS], at[ACXP_MAX_RANKS];
  int llg;           /* push lines with groups (peer_ops.h; acxp_ctl_t's ll_groups) */
  uint64_t gos_min;  /* the one-shot with groups from this many bytes (peer_ops.h; acxp_ctl_t's
                        small_groups; 0: never) */
  int pdl;           /* cuda: ACX_COLL_PEER_PDL, read at SETUP */
  int reg_use;       /* ACX_COLL_PEER_REG (bit 0 inputs, bit 1 outputs), read at SETUP */
  unsigned ev_every; /* cuda: ACX_COLL_PEER_EVENT_EVERY, read at SETUP */
  unsigned since_ev; /* cuda: operations launched without an event since the last one with */
  unsigned batch_max;   /* cuda: ACX_COLL_PEER_BATCH, read at SETUP */
  uint64_t clear_every; /* cuda: ACX_COLL_PEER_LL_CLEAR, read at SETUP */
  unsigned nstaged;     /* cuda: the newest pending operations, not launched yet (a batch) */
  uint64_t nlaunch, nops; /* cuda: kernels launched, operations they ran (the log at the end) */
  uint64_t npub;          /* operations of the two-shot with groups that published a registered buffer */
  unsigned char *ll_scratch; /* host kind: the lines of every rank unpacked, [nranks][ACXP_LL_MAX] */
  acx_status_t failed; /* the first failure: later operations fail with it at once */
  pend_t pv[ACXP_PENDING];
  unsigned phead, pcount;
  int destroying;
  acxi_cmd_t destroy_cmd;
  int64_t destroy_deadline_ns;
  /* cuda: completion events of finished operations, kept for the next ones (an event made and
   * destroyed per operation costs more host time than the kernel's launch) */
  void *ev_free[EV_CACHE];
  unsigned nev_free;
} pset_t;

typedef struct ext {
  pset_t *sets;
  pset_t *staged; /* cuda: the set with operations staged (one at most: the sets' operations keep
                     their order across sets on a stream), NULL: none */
} ext_t;

static void finish(acxi_engine_t *e, const acxi_engine_api_t *api, const acxi_cmd_t *cmd, acx_status_t st) {
  if (st == ACX_OK && (cmd->flags & ACXI_CMD_FLAG_NO_REPLY)) return;
  acxi_cpl_t cpl = {.req_id = cmd->req_id, .status = st};
  api->complete(e, &cpl);
}

static ext_t *ext_get(acxi_engine_t *e, const acxi_engine_api_t *api) {
  void **slot = api->ext_state(e, ACXP_EXT_SLOT);
  if (!slot) return NULL;
  if (!*slot) *slot = calloc(1, sizeof(ext_t));
  return *slot;
}

static pset_t *set_find(ext_t *x, uint64_t id) {
  for (pset_t *s = x->sets; s; s = s->next)
    if (s->id == id && id) return s;
  return NULL;
}

static int on_cuda(acxi_engine_t *e, const acxi_engine_api_t *api) { return api->stream(e, 0) != NULL; }

/* The element size of the ten dtypes NCCL reduces, 0 for the others. */
static size_t elem_size(uint32_t dtype) {
  switch (dtype) {
  case ACX_DTYPE_I8: case ACX_DTYPE_U8: return 1;
  case ACX_DTYPE_F16: case ACX_DTYPE_BF16: return 2;
  case ACX_DTYPE_I32: case ACX_DTYPE_U32: case ACX_DTYPE_F32: return 4;
  case ACX_DTYPE_I64: case ACX_DTYPE_U64: case ACX_DTYPE_F64: return 8;
  default: return 0;
  }
}

/* ------------------------------------------------------------------------------------------ */
/* SETUP and DESTROY                                                                          */

static void setup(acxi_engine_t *e, const acxi_engine_api_t *api, ext_t *x, const acxi_cmd_t *cmd) {
  uint64_t id = cmd->arg[0];
  int n = (int)cmd->arg[1], r = (int)cmd->arg[2];
  acx_status_t st = ACX_ERR_INVALID_ARG;
  void *cp = NULL;
  uint64_t cbytes = 0;
  if (!id || set_find(x, id)) {
    ACX_WARN(COLL, "peer SETUP: set id %" PRIu64 " is %s", id, id ? "in use" : "0");
    goto out;
  }
  if (n < 2 || n > ACXP_MAX_RANKS || r < 0 || r >= n) {
    ACX_WARN(COLL, "peer SETUP: nranks %d, rank %d: need 2 <= nranks <= %d and 0 <= rank < nranks", n, r,
             ACXP_MAX_RANKS);
    goto out;
  }
  if ((st = api->host_region(e, cmd->arg[3], &cp, &cbytes)) != ACX_OK || cbytes < sizeof(acxp_ctl_t)) {
    ACX_WARN(COLL, "peer SETUP: host region %" PRIu64 " %s", cmd->arg[3],
             st != ACX_OK ? "is unknown" : "is smaller than the control block");
    if (st == ACX_OK) st = ACX_ERR_INVALID_ARG;
    goto out;
  }
  acxp_ctl_t *ctl = cp;
  st = ACX_ERR_INVALID_ARG;
  if (ctl->magic != ACXP_CTL_MAGIC || ctl->slot_bytes == 0 || ctl->slot_bytes % 16 || ctl->ll_bytes % 8 ||
      ctl->ll_bytes > ACXP_LL_MAX ||
      (ctl->big_bytes && (ctl->big_bytes % 16 || ctl->big_bytes < ACXP_BIG_MIN || ctl->big_blocks < 1 ||
                          ctl->big_blocks > ACXP_BIG_MAX_BLOCKS))) {
    ACX_WARN(COLL, "peer SETUP: the control block has magic %#" PRIx64 ", slot_bytes %" PRIu64 ", ll_bytes %" PRIu64
             ", big_bytes %" PRIu64 " and big_blocks %" PRIu64 " (need %#llx, a multiple of 16, a multiple of 8 up to "
             "%d, and 0 or a multiple of 16 from %d with 1 to %d blocks)", ctl->magic, ctl->slot_bytes, ctl->ll_bytes,
             ctl->big_bytes, ctl->big_blocks, (unsigned long long)ACXP_CTL_MAGIC, ACXP_LL_MAX, ACXP_BIG_MIN,
             ACXP_BIG_MAX_BLOCKS);
    goto out;
  }
  if (ctl->groups) {
    /* Groups of equal size covering the set, at[] the inverse of (grp, lane). */
    int G = ctl->groups, K = ctl->per_group, okg = G >= 1 && K >= 2 && G * K == n;
    for (int q = 0; okg && q < n; q++)
      okg = ctl->grp[q] >= 0 && ctl->grp[q] < G && ctl->lane[q] >= 0 && ctl->lane[q] < K &&
            ctl->at[ctl->grp[q] * K + ctl->lane[q]] == q;
    if (!okg) {
      ACX_WARN(COLL, "peer SETUP: the control block's groups (%d groups of %d for %d ranks) are not groups of equal "
               "size covering the set, each rank once", G, K, n);
      goto out;
    }
  }
  if (ctl->ll_groups && !ctl->groups) {
    ACX_WARN(COLL, "peer SETUP: the control block asks for push lines with groups (ll_groups %d) without groups",
             (int)ctl->ll_groups);
    goto out;
  }
  if (ctl->small_groups < 0 || (ctl->small_groups && (!ctl->groups || !ctl->big_bytes))) {
    ACX_WARN(COLL, "peer SETUP: the control block asks for the one-shot with groups from %d bytes (small_groups) %s",
             (int)ctl->small_groups, ctl->small_groups < 0 ? "(need 0 or more)"
             : ctl->groups ? "without big slots (big_bytes 0)" : "without groups");
    goto out;
  }
  pset_t *s = calloc(1, sizeof *s);
  if (!s) {
    st = ACX_ERR_NO_MEMORY;
    goto out;
  }
  s->G = ctl->groups ? ctl->groups : n;
  s->K = ctl->groups ? ctl->per_group : 1;
  for (int q = 0; q < n; q++) {
    s->grp[q] = (int8_t)(ctl->groups ? ctl->grp[q] : q);
    s->lane[q] = (int8_t)(ctl->groups ? ctl->lane[q] : 0);
    s->at[q] = (int8_t)(ctl->groups ? ctl->at[q] : q);
  }
  s->gos_min = (uint64_t)ctl->small_groups;
  s->llg = ctl->ll_groups != 0;
  s->id = id;
  s->nranks = n;
  s->rank = r;
  s->ctl = s->ctl_dev = ctl;
  s->slot_bytes = ctl->slot_bytes;
  s->ll_bytes = ctl->ll_bytes;
  s->big_bytes = ctl->big_bytes;
  s->big_blocks = ctl->big_blocks;
  s->pdl = acxi_param_int("ACX_COLL_PEER_PDL") > 0;
  int64_t ru = acxi_param_int("ACX_COLL_PEER_REG");
  s->reg_use = ru < 0 ? 3 : (int)(ru & 3);
  int64_t every = acxi_param_int("ACX_COLL_PEER_EVENT_EVERY");
  s->ev_every = every < 1 ? 1 : every > 64 ? 64 : (unsigned)every;
  int64_t batch = acxi_param_int("ACX_COLL_PEER_BATCH");
  s->batch_max = batch < 1 ? 1 : batch > ACXP_BATCH_MAX ? ACXP_BATCH_MAX : (unsigned)batch;
  int64_t clear = acxi_param_int("ACX_COLL_PEER_LL_CLEAR");
  s->clear_every = clear < 2 ? 2 : (uint64_t)clear;
  for (int q = 0; q < n; q++) {
    void *p = NULL;
    uint64_t bytes = 0;
    st = api->buffer(e, ctl->area[q], &p, &bytes);
    if (st != ACX_OK || bytes < ACXP_AREA_BYTES_SET(s->slot_bytes, s->big_bytes, s->gos_min ? s->G : 0)) {
      ACX_WARN(COLL, "peer SETUP: the area of rank %d (buffer %" PRIu64 ") %s", q, ctl->area[q],
               st != ACX_OK ? "is unknown here"
               : s->gos_min ? "is smaller than the flags, two data slots, the lines, the big slots and the partial regions"
                        : "is smaller than the flags, two data slots, the lines and the big slots");
      if (st == ACX_OK) st = ACX_ERR_INVALID_ARG;
      free(s);
      goto out;
    }
    s->area[q] = p;
  }
#if ACX_HAVE_CUDA
  if (on_cuda(e, api)) {
    void *dp = NULL;
    cudaError_t err = cudaHostGetDevicePointer(&dp, ctl, 0);
    if (err != cudaSuccess) {
      ACX_WARN(COLL, "peer SETUP: the control block has no device address: %s", cudaGetErrorString(err));
      (void)cudaGetLastError();
      free(s);
      st = ACX_ERR_DEVICE;
      goto out;
    }
    s->ctl_dev = dp;
    if (acxi_param_int("ACX_COLL_PEER_TRACE") > 0) {
      void *tp = NULL;
      err = cudaMalloc(&tp, ACXK_TRACE_WORDS * sizeof(uint64_t));
      if (err == cudaSuccess) err = cudaMemset(tp, 0, ACXK_TRACE_WORDS * sizeof(uint64_t));
      if (err != cudaSuccess) { /* the trace is a diagnosis: the set works without it */
        ACX_WARN(COLL, "peer SETUP: ACX_COLL_PEER_TRACE: no trace (%s)", cudaGetErrorString(err));
        (void)cudaGetLastError();
        if (tp) (void)cudaFree(tp);
        tp = NULL;
      }
      s->trace = tp;
    }
  }
#endif
  if (!on_cuda(e, api) && s->ll_bytes && !(s->ll_scratch = malloc((size_t)n * ACXP_LL_MAX))) {
    free(s);
    st = ACX_ERR_NO_MEMORY;
    goto out;
  }
  s->next = x->sets;
  x->sets = s;
  st = ACX_OK;
out:
  finish(e, api, cmd, st);
}

static void ev_cache_drop(pset_t *s) {
#if ACX_HAVE_CUDA
  while (s->nev_free) (void)cudaEventDestroy((cudaEvent_t)s->ev_free[--s->nev_free]);
#else
  (void)s;
#endif
}

#if ACX_HAVE_CUDA
/* The trace's phases per kernel kind (peer_kernels.h; phase 0 is the gap before each operation). */
static const char *const trace_kind[ACXK_KINDS] = {"push lines", "one-shot", "one-shot with groups", "two-shot",
                                                   "two-shot with groups"};
static const char *const trace_phase[ACXK_KINDS][ACXK_TRACE_PHASES] = {
    {"gap", "push", "receive and reduce"},
    {"gap", "copy in", "flag wait", "reduce"},
    {"gap", "copy in", "wait A", "partial sums out", "wait B", "reduce"},
    {"gap", "stores out", "wait 0", "reduce", "wait 1", "copies"},
    {"gap", "stores to group", "wait A", "partial sums out and lane parts", "wait D and B", "copies", "reduce",
     "wait C", "last lane parts", "last wait D and copies"},
};

/* The time (us) below which a share q of a phase's occurrences fell, from its histogram: the
 * middle of the bucket that holds it (peer_kernels.h; 4 buckets per power of two). */
static double trace_quantile(const uint64_t *h, double q) {
  uint64_t all = 0, c = 0;
  for (int b = 0; b < ACXK_TRACE_BUCKETS; b++) all += h[b];
  if (!all) return 0;
  for (int b = 0; b < ACXK_TRACE_BUCKETS; b++) {
    c += h[b];
    if ((double)c >= q * (double)all)
      return ((double)ACXK_TRACE_BUCKET_LO(b) + (double)ACXK_TRACE_BUCKET_W(b) / 2.0) / 1000.0;
  }
  return 0;
}

/* ACX_COLL_PEER_TRACE: the set's trace, read back and logged (INFO, one line per kernel kind that
 * ran: the operations and each phase's mean in us per operation, with the median and 90th
 * percentile of its occurrences: a two-shot's steps occur once per chunk), then freed. */
static void trace_log(pset_t *s) {
  if (!s->trace) return;
  uint64_t *w = malloc(ACXK_TRACE_WORDS * sizeof *w);
  cudaError_t err = w ? cudaMemcpy(w, s->trace, ACXK_TRACE_WORDS * sizeof *w, cudaMemcpyDeviceToHost)
                      : cudaErrorMemoryAllocation;
  if (err != cudaSuccess) {
    ACX_WARN(COLL, "peer set %" PRIu64 ": its trace could not be read: %s", s->id, cudaGetErrorString(err));
    (void)cudaGetLastError();
  }
  for (int k = 0; err == cudaSuccess && k < ACXK_KINDS; k++) {
    const uint64_t ops = w[ACXK_TRACE_OPS(k)];
    if (!ops) continue;
    char line[1024];
    int len = 0;
    for (int p = 0; p < ACXK_TRACE_PHASES && trace_phase[k][p] && len < (int)sizeof line; p++) {
      const uint64_t *h = &w[ACXK_TRACE_HIST(k, p, 0)];
      len += snprintf(line + len, sizeof line - (size_t)len, "%s%s %.2f (p50 %.2f p90 %.2f)", p ? ", " : "",
                      trace_phase[k][p], (double)w[ACXK_TRACE_SUM(k, p)] / (double)ops / 1000.0,
                      trace_quantile(h, 0.5), trace_quantile(h, 0.9));
    }
    ACX_INFO(COLL, "peer set %" PRIu64 " trace (rank %d, block 0, us per operation): %s, %" PRIu64 " operations: %s",
             s->id, s->rank, trace_kind[k], ops, line);
  }
  free(w);
  (void)cudaFree(s->trace);
  (void)cudaGetLastError();
  s->trace = NULL;
}
#endif

static void log_launches(const pset_t *s) {
  if (s->nlaunch)
    ACX_INFO(COLL, "peer set %" PRIu64 ": %" PRIu64 " all-reduces in %" PRIu64 " kernel launches, %" PRIu64
             " through registered buffers", s->id, s->nops, s->nlaunch, s->npub);
  else if (s->npub)
    ACX_INFO(COLL, "peer set %" PRIu64 ": %" PRIu64 " all-reduces through registered buffers", s->id, s->npub);
}

static void set_free(ext_t *x, pset_t *s) {
  log_launches(s);
#if ACX_HAVE_CUDA
  trace_log(s);
#endif
  if (x->staged == s) x->staged = NULL;
  for (pset_t **pp = &x->sets; *pp; pp = &(*pp)->next)
    if (*pp == s) {
      *pp = s->next;
      break;
    }
  ev_cache_drop(s);
  for (unsigned k = 0; k < s->pcount; k++) free(s->pv[(s->phead + k) % ACXP_PENDING].big_in);
  free(s->ll_scratch);
  free(s);
}

static void destroy(acxi_engine_t *e, const acxi_engine_api_t *api, ext_t *x, const acxi_cmd_t *cmd) {
  pset_t *s = set_find(x, cmd->arg[0]);
  if (!s) {
    ACX_WARN(COLL, "peer DESTROY: no set %" PRIu64 " in this executor", cmd->arg[0]);
    finish(e, api, cmd, ACX_ERR_INVALID_ARG);
    return;
  }
  if (!s->pcount) {
    set_free(x, s);
    finish(e, api, cmd, ACX_OK);
    return;
  }
  /* Operations in flight: the progress hook finishes the DESTROY once they have left. */
  s->destroying = 1;
  s->destroy_cmd = *cmd;
  int64_t ms = (int64_t)cmd->arg[4];
  s->destroy_deadline_ns = acxi_now_ns() + (ms > 0 ? ms : 1000) * 1000000;
}

/* An all-reduce's time limit (ns): its command's (ms), else 60 s. */
static int64_t op_timeout_ns(const acxi_cmd_t *cmd) {
  int64_t ms = (int64_t)cmd->arg[4];
  return (ms > 0 ? ms : 60000) * 1000000;
}

/* ------------------------------------------------------------------------------------------ */
/* the host kind: the protocol on the executor's thread                                       */

/* Not an acx status: the host kind's operation waits for a peer's data. */
#define NOT_YET ((acx_status_t)-1)

/* A line's flag for operation seq: never 0, so a cleared line never looks written (peer_ops.h). */
static uint64_t ll_flag(uint64_t seq) { return seq % 0xffffffffull + 1u; }

/* Lines [l0, l1) of the bytes at src (line l: its bytes 8l .. 8l + 7, the last line short) into
 * rank `to`'s area as this rank's lines of operation seq: each half line {4 data bytes, flag} one
 * 8-byte store, as the GPU's halves are written whole. */
static void ll_push(pset_t *s, int to, uint64_t seq, const unsigned char *src, uint64_t bytes, uint64_t l0,
                    uint64_t l1) {
  const uint64_t f = ll_flag(seq);
  _Atomic uint64_t *dst = (_Atomic uint64_t *)(void *)(s->area[to] + ACXP_LL_OFF(seq & 1u, s->rank, s->slot_bytes));
  for (uint64_t l = l0; l < l1; l++) {
    uint32_t w[2] = {0, 0};
    memcpy(w, src + 8 * l, bytes - 8 * l < 8 ? bytes - 8 * l : 8);
    atomic_store_explicit(&dst[2 * l], (uint64_t)w[0] | f << 32, memory_order_release);
    atomic_store_explicit(&dst[2 * l + 1], (uint64_t)w[1] | f << 32, memory_order_release);
  }
}

/* ACX_OK once rank q's lines [l0, l1) of the head operation are in this rank's area; NOT_YET, the
 * abort word's status, or ACX_ERR_COLL_TIMEOUT past its deadline. Never waits. */
static acx_status_t ll_here(pset_t *s, const pend_t *pd, int q, uint64_t l0, uint64_t l1) {
  const uint64_t seq = pd->cmd.arg[3], f = ll_flag(seq);
  _Atomic uint64_t *src = (_Atomic uint64_t *)(void *)(s->area[s->rank] + ACXP_LL_OFF(seq & 1u, q, s->slot_bytes));
  for (uint64_t h = 2 * l0; h < 2 * l1; h++) {
    if (atomic_load_explicit(&src[h], memory_order_acquire) >> 32 == f) continue;
    int32_t ab = atomic_load_explicit(&s->ctl->abort, memory_order_relaxed);
    if (ab) return (acx_status_t)ab;
    if (acxi_now_ns() >= pd->deadline) {
      ACX_WARN(COLL, "peer all-reduce %" PRIu64 ": rank %d's data did not come by the deadline", seq, q);
      return ACX_ERR_COLL_TIMEOUT;
    }
    return NOT_YET;
  }
  return ACX_OK;
}

/* Rank q's lines [l0, l1) of operation seq (ll_here said they are there) unpacked into dst (line
 * l at byte 8l) and cleared: read, so cleared before q can write them again (peer_ops.h). */
static void ll_take(pset_t *s, uint64_t seq, int q, uint64_t bytes, uint64_t l0, uint64_t l1, unsigned char *dst) {
  _Atomic uint64_t *src = (_Atomic uint64_t *)(void *)(s->area[s->rank] + ACXP_LL_OFF(seq & 1u, q, s->slot_bytes));
  for (uint64_t l = l0; l < l1; l++) {
    uint32_t w[2] = {(uint32_t)atomic_load_explicit(&src[2 * l], memory_order_relaxed),
                     (uint32_t)atomic_load_explicit(&src[2 * l + 1], memory_order_relaxed)};
    memcpy(dst + 8 * l, w, bytes - 8 * l < 8 ? bytes - 8 * l : 8);
    atomic_store_explicit(&src[2 * l], 0, memory_order_relaxed);
    atomic_store_explicit(&src[2 * l + 1], 0, memory_order_relaxed);
  }
}

/* Slice js of K of an operation's lines (push lines with groups, peer_ops.h): [l0, l1). */
static void ll_slice(uint64_t lines, int K, int js, uint64_t *l0, uint64_t *l1) {
  const uint64_t pl = (lines + (uint64_t)K - 1) / (uint64_t)K;
  *l0 = (uint64_t)js * pl < lines ? (uint64_t)js * pl : lines;
  *l1 = *l0 + pl < lines ? *l0 + pl : lines;
}

/* ACX_OK once flag [p][0] of this rank's area has reached seq for every peer p, NOT_YET before; the abort word's status, or ACX_ERR_COLL_TIMEOUT past the deadline. Never waits. */
static acx_status_t host_ready(pset_t *s, uint64_t seq, int64_t deadline_ns) {
  unsigned char *own = s->area[s->rank];
  for (int p = 0; p < s->nranks; p++) {
    if (p == s->rank) continue;
    _Atomic uint64_t *f = (_Atomic uint64_t *)(void *)(own + ACXP_FLAG_OFF(p, 0));
    if ((int64_t)(atomic_load_explicit(f, memory_order_acquire) - seq) >= 0) continue;
    int32_t ab = atomic_load_explicit(&s->ctl->abort, memory_order_relaxed);
    if (ab) return (acx_status_t)ab;
    if (acxi_now_ns() >= deadline_ns) {
      ACX_WARN(COLL, "peer all-reduce %" PRIu64 ": rank %d's data did not come by the deadline", seq, p);
      return ACX_ERR_COLL_TIMEOUT;
    }
    return NOT_YET;
  }
  return ACX_OK;
}

/* out[i] := the reduction of the areas' slot elements i over ranks 0..n-1, in that order. T: the
 * element type, A: the accumulator, LD/ST: element <-> accumulator, COMB(a, b), FIN(a): avg's
 * division (or nothing). */
#define REDUCE_LOOP(T, A, LD, ST, COMB, FIN)                                                  \
  do {                                                                                        \
    T *o_ = (T *)out;                                                                         \
    for (uint64_t i_ = 0; i_ < count; i_++) {                                                 \
      A acc = LD(((const T *)(const void *)src[0])[i_]);                                      \
      for (int q_ = 1; q_ < nsrc; q_++) {                                                     \
        A b = LD(((const T *)(const void *)src[q_])[i_]);                                     \
        acc = COMB(acc, b);                                                                   \
      }                                                                                       \
      o_[i_] = ST(FIN(acc));                                                                  \
    }                                                                                         \
  } while (0)
#define ID(x) (x)
#define ADD(a, b) ((a) + (b))
#define MUL(a, b) ((a) * (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
static inline int64_t div_i64(uint64_t a, int64_t n, int is_signed, int bits) {
  if (!is_signed) return (int64_t)(a / (uint64_t)n);
  /* the wrapped sum back to its signed value of `bits` bits, then C's truncating division */
  int64_t v = bits == 64 ? (int64_t)a : (int64_t)(a << (64 - bits)) >> (64 - bits);
  return v / n;
}

/* out := the reduction of src[0..nsrc-1] in that order (src[q]: rank q's elements, its data slot or
 * its unpacked lines; or the two-shot's partial sums). fin: avg divides by the set's ranks (else an
 * avg is the plain sum: a partial sum of the two-shot with groups). */
static void host_reduce_n(pset_t *s, const unsigned char *const *src, int nsrc, int fin, void *out, uint64_t count,
                          uint32_t dtype, uint32_t op) {
  const int64_t n = s->nranks;
  if (!fin && op == ACX_REDOP_AVG) op = ACX_REDOP_SUM;
#define FIN_F(a) (op == ACX_REDOP_AVG ? (a) / (float)n : (a))
#define FIN_D(a) (op == ACX_REDOP_AVG ? (a) / (double)n : (a))
#define FCOMB(a, b) (op == ACX_REDOP_SUM || op == ACX_REDOP_AVG ? (a) + (b) : op == ACX_REDOP_PROD ? (a) * (b) \
                     : op == ACX_REDOP_MAX ? MAX(a, b) : MIN(a, b))
  switch (dtype) {
  case ACX_DTYPE_F32: REDUCE_LOOP(float, float, ID, ID, FCOMB, FIN_F); return;
  case ACX_DTYPE_F64: REDUCE_LOOP(double, double, ID, ID, FCOMB, FIN_D); return;
  case ACX_DTYPE_F16: REDUCE_LOOP(uint16_t, float, acxc_half_to_float, acxc_float_to_half, FCOMB, FIN_F); return;
  case ACX_DTYPE_BF16: REDUCE_LOOP(uint16_t, float, acxc_bf16_to_float, acxc_float_to_bf16, FCOMB, FIN_F); return;
  default: break;
  }
#undef FIN_F
#undef FIN_D
#undef FCOMB
  /* Integers: SUM and AVG wrap through the unsigned type; AVG then divides the signed (or
   * unsigned) value by n, truncating, as NCCL does. */
#define ICOMB(a, b) (op == ACX_REDOP_PROD ? (a) * (b) : (a) + (b))
#define INT_TYPE(T, U, SIGNED)                                                                \
  do {                                                                                        \
    if (op == ACX_REDOP_MAX) REDUCE_LOOP(T, T, ID, ID, MAX, ID);                              \
    else if (op == ACX_REDOP_MIN) REDUCE_LOOP(T, T, ID, ID, MIN, ID);                         \
    else if (op == ACX_REDOP_AVG) {                                                           \
      T *o_ = (T *)out;                                                                       \
      for (uint64_t i_ = 0; i_ < count; i_++) {                                               \
        U acc = 0;                                                                            \
        for (int q_ = 0; q_ < nsrc; q_++)                                                     \
          acc = (U)(acc + (U)((const T *)(const void *)src[q_])[i_]);                         \
        o_[i_] = (T)div_i64((uint64_t)acc, n, SIGNED, (int)(8 * sizeof(T)));                  \
      }                                                                                       \
    } else REDUCE_LOOP(T, U, (U), (T), ICOMB, ID);                                            \
  } while (0)
  switch (dtype) {
  case ACX_DTYPE_I8: INT_TYPE(int8_t, uint8_t, 1); break;
  case ACX_DTYPE_U8: INT_TYPE(uint8_t, uint8_t, 0); break;
  case ACX_DTYPE_I32: INT_TYPE(int32_t, uint32_t, 1); break;
  case ACX_DTYPE_U32: INT_TYPE(uint32_t, uint32_t, 0); break;
  case ACX_DTYPE_I64: INT_TYPE(int64_t, uint64_t, 1); break;
  default: INT_TYPE(uint64_t, uint64_t, 0); break;
  }
#undef ICOMB
#undef INT_TYPE
}

static void host_reduce(pset_t *s, const unsigned char *const *src, void *out, uint64_t count, uint32_t dtype,
                        uint32_t op) {
  host_reduce_n(s, src, s->nranks, 1, out, count, dtype, op);
}

static void big_signal(pset_t *s, int phase, int who, uint64_t val);

/* A buffer's publication word (peer_ops.h, "Registered buffers"): slot1 = its registration slot + 1
 * from the rank (0: none), off its byte offset; none where the address is not 16-byte aligned (the
 * peers read and store it in 16-byte vectors where their own buffers allow). */
static uint64_t pub_word(uint64_t slot1, uint64_t off, const unsigned char *p) {
  if (!slot1 || slot1 > ACXP_REG_MAX || ((uintptr_t)p & 15u) || off >= (1ull << 56)) return 0;
  return ACXP_PUB(slot1 - 1, off);
}

/* Steps 1 and 2 of the head operation: its input into the slot, then the flags (release) into
 * every peer's area; the small-message variant: its lines into every peer's area. */
static void host_start(pset_t *s, pend_t *pd) {
  uint64_t seq = pd->cmd.arg[3];
  pd->deadline = acxi_now_ns() + op_timeout_ns(&pd->cmd);
  pd->started = 1;
  if (pd->big) {
    /* The chunks read the input over time: it is taken as it is now (host_big fails the operation
     * with ACX_ERR_NO_MEMORY if the copy cannot be made). */
    size_t bytes = pd->cmd.bytes * pd->es;
    if ((pd->big_in = malloc(bytes))) memcpy(pd->big_in, pd->in, bytes);
    if (s->K > 1) {
      /* Registered buffers: peers read this input and store into this output where they are. The
       * rank keeps later commands on them behind the all-reduce (collectives/mpi_coll.c: stream
       * order on the worker path), so a later write cannot reach what the peers read. The words go
       * out with A's release. */
      pd->pub_in = (s->reg_use & 1) ? pub_word(pd->cmd.arg[2] & 0xff, pd->cmd.off[0], pd->in) : 0;
      pd->pub_out = (s->reg_use & 2) ? pub_word((pd->cmd.arg[2] >> 8) & 0xff, pd->cmd.off[1], pd->out) : 0;
      _Atomic uint64_t *w = (_Atomic uint64_t *)(void *)(s->area[s->rank] + ACXP_BIG_PUB_OFF(0, s->slot_bytes));
      atomic_store_explicit(&w[0], pd->pub_in, memory_order_relaxed);
      atomic_store_explicit(&w[1], pd->pub_out, memory_order_relaxed);
      s->npub += pd->pub_in || pd->pub_out;
    }
    return;
  }
  if (pd->ll) {
    /* This rank's own part is the input as it is now (as the peers get it), kept in the scratch:
     * the input may be written again before the peers' lines come. With groups (push lines with
     * groups, peer_ops.h) each slice's lines go to its group's rank at its place only. */
    uint64_t bytes = pd->cmd.bytes * pd->es, lines = (bytes + 7) / 8;
    memcpy(s->ll_scratch + (size_t)s->rank * ACXP_LL_MAX, pd->in, bytes);
    if (s->llg) {
      const int g = s->grp[s->rank], j = s->lane[s->rank];
      for (int jl = 0; jl < s->K; jl++) {
        uint64_t l0, l1;
        ll_slice(lines, s->K, jl, &l0, &l1);
        if (jl != j) ll_push(s, s->at[g * s->K + jl], seq, pd->in, bytes, l0, l1);
      }
      pd->big_phase = 1;
      return;
    }
    for (int p = 0; p < s->nranks; p++)
      if (p != s->rank) ll_push(s, p, seq, pd->in, bytes, 0, lines);
    return;
  }
  uint64_t doff = ACXP_SLOT_OFF(seq & 1u, s->slot_bytes);
  memcpy(s->area[s->rank] + doff, pd->in, pd->cmd.bytes * pd->es);
  if (pd->gos) { /* the one-shot with groups: A to the group (host_gos goes on) */
    big_signal(s, 0, 0, ACXP_BIG_VAL(seq, 0));
    pd->big_phase = 1;
    return;
  }
  for (int p = 0; p < s->nranks; p++)
    if (p != s->rank)
      atomic_store_explicit((_Atomic uint64_t *)(void *)(s->area[p] + ACXP_FLAG_OFF(s->rank, 0)), seq,
                            memory_order_release);
}

/* The small-message variant's step 3 on the host kind: ACX_OK once every peer's lines for the
 * operation are in this rank's area (then unpacked into the scratch, [q] for rank q, and cleared;
 * [rank] holds this rank's input since the start);
 * NOT_YET, the abort word's status or ACX_ERR_COLL_TIMEOUT as host_ready. */
static acx_status_t host_ready_ll(pset_t *s, pend_t *pd) {
  uint64_t seq = pd->cmd.arg[3], bytes = pd->cmd.bytes * pd->es, lines = (bytes + 7) / 8;
  acx_status_t st;
  for (int q = 0; q < s->nranks; q++)
    if (q != s->rank && (st = ll_here(s, pd, q, 0, lines)) != ACX_OK) return st;
  for (int q = 0; q < s->nranks; q++)
    if (q != s->rank) ll_take(s, seq, q, bytes, 0, lines, s->ll_scratch + (size_t)q * ACXP_LL_MAX);
  return ACX_OK;
}

/* The push lines with groups on the host kind (runtime/proto/peer_ops.h; host_start pushed the
 * slices' lines to the group): ACX_OK once the output is written, NOT_YET, or a failure. Never
 * waits. big_phase 1: waiting for the group's lines of this rank's slice, 2: for the partial sums.
 * The scratch holds rank q's lines at [q] (their byte offsets): the group's inputs of this rank's
 * slice, then every slice's partial sums from the ranks at its place (this rank's own at [rank]). */
static acx_status_t host_ready_llg(pset_t *s, pend_t *pd) {
  const int r = s->rank, G = s->G, K = s->K, g = s->grp[r], j = s->lane[r];
  const uint64_t seq = pd->cmd.arg[3], es = pd->es, bytes = pd->cmd.bytes * es, lines = (bytes + 7) / 8;
  const uint32_t dtype = pd->cmd.dtype, op = (uint32_t)pd->cmd.arg[1];
  const unsigned char *src[ACXP_MAX_RANKS];
  uint64_t l0, l1;
  acx_status_t st;
  if (pd->big_phase == 1) { /* my slice over my group in place order, then to every rank */
    ll_slice(lines, K, j, &l0, &l1);
    for (int jl = 0; jl < K; jl++)
      if (jl != j && (st = ll_here(s, pd, s->at[g * K + jl], l0, l1)) != ACX_OK) return st;
    const uint64_t b0 = 8 * l0 < bytes ? 8 * l0 : bytes, nb = (8 * l1 < bytes ? 8 * l1 : bytes) - b0;
    for (int jl = 0; jl < K; jl++) {
      const int q = s->at[g * K + jl];
      if (jl != j) ll_take(s, seq, q, bytes, l0, l1, s->ll_scratch + (size_t)q * ACXP_LL_MAX);
      src[jl] = s->ll_scratch + (size_t)q * ACXP_LL_MAX + b0;
    }
    /* The partial sum by way of the output (the input was taken at the start; the output's
     * bytes are written again at the end), then into the scratch and to every rank. */
    if (nb) {
      host_reduce_n(s, src, K, 0, pd->out + b0, nb / es, dtype, op);
      memcpy(s->ll_scratch + (size_t)r * ACXP_LL_MAX + b0, pd->out + b0, nb);
    }
    for (int q = 0; q < s->nranks; q++)
      if (q != r) ll_push(s, q, seq, s->ll_scratch + (size_t)r * ACXP_LL_MAX, bytes, l0, l1);
    pd->big_phase = 2;
  }
  for (int js = 0; js < K; js++) { /* every slice's partial sums, from the ranks at its place */
    ll_slice(lines, K, js, &l0, &l1);
    for (int gq = 0; gq < G; gq++) {
      const int q = s->at[gq * K + js];
      if (q != r && (st = ll_here(s, pd, q, l0, l1)) != ACX_OK) return st;
    }
  }
  for (int js = 0; js < K; js++) { /* each slice over the groups in order */
    ll_slice(lines, K, js, &l0, &l1);
    const uint64_t b0 = 8 * l0 < bytes ? 8 * l0 : bytes, nb = (8 * l1 < bytes ? 8 * l1 : bytes) - b0;
    for (int gq = 0; gq < G; gq++) {
      const int q = s->at[gq * K + js];
      if (q != r) ll_take(s, seq, q, bytes, l0, l1, s->ll_scratch + (size_t)q * ACXP_LL_MAX);
      src[gq] = s->ll_scratch + (size_t)q * ACXP_LL_MAX + b0;
    }
    if (nb) host_reduce_n(s, src, G, 1, pd->out + b0, nb / es, dtype, op);
  }
  return ACX_OK;
}

/* The two-shot on the host kind (one block, runtime/proto/peer_ops.h). The ranks a step talks to:
 * who 0, this rank's group (the other ranks of its GPU); who 1, its lane (the ranks at its place
 * in the other groups; without groups every other rank); who 2, every other rank. */
static int big_peers(const pset_t *s, int who, int *peer) {
  const int g = s->grp[s->rank], j = s->lane[s->rank];
  int np = 0;
  if (who == 2) {
    for (int q = 0; q < s->nranks; q++)
      if (q != s->rank) peer[np++] = q;
  } else if (who == 0) {
    for (int jl = 0; jl < s->K; jl++)
      if (jl != j) peer[np++] = s->at[g * s->K + jl];
  } else {
    for (int gq = 0; gq < s->G; gq++)
      if (gq != g) peer[np++] = s->at[gq * s->K + j];
  }
  return np;
}

/* This rank's phase flag [rank][0] to the ranks of `who`. */
static void big_signal(pset_t *s, int phase, int who, uint64_t val) {
  int peer[ACXP_MAX_RANKS], np = big_peers(s, who, peer);
  for (int k = 0; k < np; k++)
    atomic_store_explicit(
        (_Atomic uint64_t *)(void *)(s->area[peer[k]] + ACXP_BIG_FLAG_OFF(phase, s->rank, 0, s->slot_bytes)), val,
        memory_order_release);
}

/* ACX_OK once the phase flag [p][0] in this rank's area has reached val for every rank p of `who`;
 * NOT_YET, the abort word's status or ACX_ERR_COLL_TIMEOUT as host_ready. */
static acx_status_t big_ready(pset_t *s, const pend_t *pd, int phase, int who, uint64_t val) {
  unsigned char *own = s->area[s->rank];
  int peer[ACXP_MAX_RANKS], np = big_peers(s, who, peer);
  for (int k = 0; k < np; k++) {
    const int p = peer[k];
    _Atomic uint64_t *f = (_Atomic uint64_t *)(void *)(own + ACXP_BIG_FLAG_OFF(phase, p, 0, s->slot_bytes));
    if ((int64_t)(atomic_load_explicit(f, memory_order_acquire) - val) >= 0) continue;
    int32_t ab = atomic_load_explicit(&s->ctl->abort, memory_order_relaxed);
    if (ab) return (acx_status_t)ab;
    if (acxi_now_ns() >= pd->deadline) {
      ACX_WARN(COLL, "peer all-reduce %" PRIu64 ": rank %d did not reach phase %d of chunk %" PRIu64
               " by the deadline", pd->cmd.arg[3], p, phase, pd->big_t);
      return ACX_ERR_COLL_TIMEOUT;
    }
    return NOT_YET;
  }
  return ACX_OK;
}

/* Part q of a chunk of m elements (runtime/proto/peer_ops.h): from q * pp, pp elements at most. */
static void big_part(uint64_t m, uint64_t pp, int q, uint64_t *lo, uint64_t *hi) {
  *lo = (uint64_t)q * pp < m ? (uint64_t)q * pp : m;
  *hi = *lo + pp < m ? *lo + pp : m;
}

/* The sum over this rank's group, in place order, of its elements [lo, hi) of the part of group
 * gq's rank at this rank's place (this rank's input, the others' pieces from its first half), into
 * `to`: a partial sum (avg not divided; f16/bf16 rounded to the type). [lo, hi) is the whole part:
 * the host kind runs one block, so a piece is a part and starts at its slot's start. */
static void big_group_sum(pset_t *s, const pend_t *pd, const unsigned char *first, uint64_t base, uint64_t pp,
                          uint64_t lo, uint64_t hi, int gq, void *to) {
  const uint64_t es = pd->es;
  const unsigned char *src[ACXP_MAX_RANKS];
  for (int jl = 0; jl < s->K; jl++)
    src[jl] = jl == s->lane[s->rank] ? pd->big_in + (base + lo) * es
              : pd->pin[jl]          ? pd->pin[jl] + (base + lo) * es
                                     : first + (uint64_t)(jl * s->G + gq) * pp * es;
  host_reduce_n(s, src, s->K, 0, to, hi - lo, pd->cmd.dtype, (uint32_t)pd->cmd.arg[1]);
}

/* The group peers' publications (peer_ops.h, "Registered buffers"), after the first A: their
 * registered inputs and outputs through this executor's table. ACX_ERR_INVALID_STATE where a peer
 * published a slot the table does not have (a registration out of step: never by design). */
static acx_status_t read_pubs(pset_t *s, pend_t *pd) {
  const int r = s->rank, g = s->grp[r], j = s->lane[r], K = s->K;
  const unsigned char *tab = s->area[r] + ACXP_BIG_REGTAB_OFF(s->slot_bytes);
  pd->nouts = 0;
  for (int jl = 0; jl < K; jl++) {
    pd->pin[jl] = NULL;
    if (jl == j) continue;
    const int l = s->at[g * K + jl];
    _Atomic uint64_t *w = (_Atomic uint64_t *)(void *)(s->area[l] + ACXP_BIG_PUB_OFF(0, s->slot_bytes));
    for (int io = 0; io < 2; io++) {
      const uint64_t word = atomic_load_explicit(&w[io], memory_order_relaxed); /* after A's acquire */
      const int slot = ACXP_PUB_SLOT(word);
      if (slot < 0) continue;
      uint64_t base = 0;
      if (slot < ACXP_REG_MAX) memcpy(&base, tab + (uint64_t)(l * ACXP_REG_MAX + slot) * 8, 8);
      if (!base) {
        ACX_WARN(COLL, "peer all-reduce %" PRIu64 ": rank %d published registration slot %d, which this executor's "
                 "table does not have", pd->cmd.arg[3], l, slot);
        return ACX_ERR_INVALID_STATE;
      }
      unsigned char *addr = (unsigned char *)(uintptr_t)base + ACXP_PUB_OFF(word);
      if (io) pd->outs[pd->nouts++] = addr;
      else pd->pin[jl] = addr;
    }
  }
  pd->pubs_read = 1;
  return ACX_OK;
}

/* Chunk t's lane parts (the other groups' parts at this rank's place, in its second half after C)
 * into its output and its group's registered outputs: step 4 of the two-shot with groups. */
static void big_lane_copies(pset_t *s, pend_t *pd, uint64_t t) {
  const int n = s->nranks, r = s->rank, G = s->G, K = s->K, g = s->grp[r], j = s->lane[r];
  const uint64_t es = pd->es, count = pd->cmd.bytes, half = s->big_bytes / 2;
  const uint64_t cpe = ACXP_BIG_CHUNK(s->big_bytes, es, n), base = t * cpe;
  const uint64_t m = count - base < cpe ? count - base : cpe, pp = ACXP_BIG_OP_PART(count, cpe, n, 16 / es);
  const unsigned char *second = s->area[r] + ACXP_BIG_SLOT_OFF(t & 1u, s->slot_bytes, s->big_bytes) + half;
  uint64_t lo, hi;
  for (int gq = 0; gq < G; gq++) {
    if (gq == g) continue;
    big_part(m, pp, s->at[gq * K + j], &lo, &hi);
    if (hi <= lo) continue;
    memcpy(pd->out + (base + lo) * es, second + lo * es, (hi - lo) * es);
    for (int k = 0; k < pd->nouts; k++) memcpy(pd->outs[k] + (base + lo) * es, second + lo * es, (hi - lo) * es);
  }
}

/* Chunk t's other parts (not of this rank's lane) from the second halves of its group's ranks at
 * their places into the output (none where the output is registered: the others stored theirs
 * into it): step 5 of the two-shot with groups, its copies of the flat two-shot's step 5. */
static void big_group_copies(pset_t *s, pend_t *pd, uint64_t t) {
  const int n = s->nranks, r = s->rank, g = s->grp[r];
  const uint64_t es = pd->es, count = pd->cmd.bytes, half = s->big_bytes / 2;
  const uint64_t cpe = ACXP_BIG_CHUNK(s->big_bytes, es, n), base = t * cpe;
  const uint64_t m = count - base < cpe ? count - base : cpe, pp = ACXP_BIG_OP_PART(count, cpe, n, 16 / es);
  const uint64_t off = ACXP_BIG_SLOT_OFF(t & 1u, s->slot_bytes, s->big_bytes);
  uint64_t lo, hi;
  for (int q = 0; q < n && !pd->pub_out; q++) {
    big_part(m, pp, q, &lo, &hi);
    const int from = s->at[g * s->K + s->lane[q]];
    if (from != r && hi > lo) memcpy(pd->out + (base + lo) * es, s->area[from] + off + half + lo * es, (hi - lo) * es);
  }
}

/* Runs the two-shot's steps as far as the peers allow: ACX_OK when the output is complete,
 * NOT_YET, or a failure. Never waits. big_phase, per chunk: 0 the chunk not started, 1 waiting for
 * the group (A), 2 for the group (D of the chunk before; with groups only), 3 for the lane (B), 4
 * for the lane (C); without groups (K = 1: the flat two-shot, whose GPU kernel keeps this order)
 * 5 then waits for the group's D of the chunk itself. With groups the chunk's lane parts go on to
 * the outputs at the next chunk's step 2 (the GPU kernel's loop that overlaps them with the stores
 * across the link; peer_ops.h), and after the last chunk big_phase 6 copies them and 7 waits for
 * its D. */
static acx_status_t host_big(pset_t *s, pend_t *pd) {
  if (!pd->big_in) return ACX_ERR_NO_MEMORY;
  const int n = s->nranks, r = s->rank, G = s->G, K = s->K, g = s->grp[r], j = s->lane[r];
  const int pipe = K > 1; /* the lane parts one chunk late (above) */
  const uint64_t seq = pd->cmd.arg[3], es = pd->es, count = pd->cmd.bytes, half = s->big_bytes / 2;
  const uint64_t cpe = ACXP_BIG_CHUNK(s->big_bytes, es, n), chunks = (count + cpe - 1) / cpe;
  const uint32_t dtype = pd->cmd.dtype, op = (uint32_t)pd->cmd.arg[1];
  acx_status_t st;
  while (pd->big_t < chunks) {
    const uint64_t t = pd->big_t, val = ACXP_BIG_VAL(seq, t), base = t * cpe;
    /* every chunk's parts are the first chunk's (peer_ops.h), the last ones of a short chunk
     * shorter or empty */
    const uint64_t m = count - base < cpe ? count - base : cpe, pp = ACXP_BIG_OP_PART(count, cpe, n, 16 / es);
    unsigned char *first[ACXP_MAX_RANKS]; /* rank q's first half; its second: first[q] + half */
    for (int q = 0; q < n; q++) first[q] = s->area[q] + ACXP_BIG_SLOT_OFF(t & 1u, s->slot_bytes, s->big_bytes);
    uint64_t lo, hi;
    if (pd->big_phase == 0) { /* 1. my pieces for my group's proxies (none where my input is
                                 registered: they read it where it is); A raised */
      for (int jl = 0; jl < K && !pd->pub_in; jl++) {
        const int l = s->at[g * K + jl];
        if (jl == j) continue;
        for (int gq = 0; gq < G; gq++) {
          big_part(m, pp, s->at[gq * K + jl], &lo, &hi);
          if (hi > lo)
            memcpy(first[l] + (uint64_t)(j * G + gq) * pp * es, pd->big_in + (base + lo) * es, (hi - lo) * es);
        }
      }
      big_signal(s, 0, 0, val);
      pd->big_phase = 1;
    }
    if (pd->big_phase == 1) { /* 2. my group's partial sums for my lane's owners (with groups, the
                                 chunk before's lane parts on to the outputs, its D raised); B raised */
      if ((st = big_ready(s, pd, 0, 0, val)) != ACX_OK) return st;
      if (K > 1 && !pd->pubs_read && (st = read_pubs(s, pd)) != ACX_OK) return st;
      for (int gq = 0; gq < G; gq++) {
        const int q = s->at[gq * K + j];
        if (gq == g) continue;
        big_part(m, pp, q, &lo, &hi);
        if (hi <= lo) continue;
        unsigned char *to = first[q] + (uint64_t)(j * G + g) * pp * es;
        if (K == 1) memcpy(to, pd->big_in + (base + lo) * es, (hi - lo) * es);
        else big_group_sum(s, pd, first[r], base, pp, lo, hi, gq, to);
      }
      if (pipe && t > 0) {
        big_lane_copies(s, pd, t - 1);
        big_signal(s, 1, 0, val - 1);
      }
      big_signal(s, 0, 1, val);
      pd->big_phase = 2;
    }
    if (pd->big_phase == 2) { /* 3. (with groups) D of the chunk before awaited; its other parts */
      if (pipe && t > 0) {
        if ((st = big_ready(s, pd, 1, 0, val - 1)) != ACX_OK) return st;
        big_group_copies(s, pd, t - 1);
      }
      pd->big_phase = 3;
    }
    if (pd->big_phase == 3) { /* 4. B awaited; my part over the groups into the output and second
                                 halves; C raised */
      if ((st = big_ready(s, pd, 0, 1, val)) != ACX_OK) return st;
      big_part(m, pp, r, &lo, &hi);
      if (hi > lo) {
        const unsigned char *src[ACXP_MAX_RANKS];
        unsigned char *mine = NULL;
        if (K > 1 && !(mine = malloc((hi - lo) * es))) return ACX_ERR_NO_MEMORY;
        for (int gq = 0; gq < G; gq++)
          src[gq] = gq != g ? first[r] + ((uint64_t)(j * G + gq) * pp) * es
                    : K == 1 ? pd->big_in + (base + lo) * es : mine;
        if (K > 1) big_group_sum(s, pd, first[r], base, pp, lo, hi, g, mine);
        unsigned char *o = pd->out + (base + lo) * es;
        host_reduce_n(s, src, G, 1, o, hi - lo, dtype, op);
        free(mine);
        /* my second half only where a group peer copies from it; registered outputs directly */
        if (K > 1 && pd->nouts < K - 1) memcpy(first[r] + half + lo * es, o, (hi - lo) * es);
        for (int gq = 0; gq < G; gq++)
          if (gq != g) memcpy(first[s->at[gq * K + j]] + half + lo * es, o, (hi - lo) * es);
        for (int k = 0; k < pd->nouts; k++) memcpy(pd->outs[k] + (base + lo) * es, o, (hi - lo) * es);
      }
      big_signal(s, 1, 1, val);
      pd->big_phase = 4;
    }
    if (pd->big_phase == 4) { /* C awaited: my lane's parts are in my second half */
      if ((st = big_ready(s, pd, 1, 1, val)) != ACX_OK) return st;
      if (!pipe) { /* the flat two-shot: its peers' parts into the output now */
        big_lane_copies(s, pd, t);
        big_signal(s, 1, 0, val);
      }
      pd->big_phase = pipe ? 0 : 5;
    }
    if (pd->big_phase == 5) { /* (flat) D awaited (no group: at once); the other parts */
      if ((st = big_ready(s, pd, 1, 0, val)) != ACX_OK) return st;
      big_group_copies(s, pd, t);
    }
    pd->big_t++;
    pd->big_phase = 0;
    pd->polls = 0;
  }
  if (pipe && chunks && pd->big_phase != 8) { /* the last chunk's lane parts, its D and its other parts */
    const uint64_t t = chunks - 1, val = ACXP_BIG_VAL(seq, t);
    if (pd->big_phase == 0) {
      big_lane_copies(s, pd, t);
      big_signal(s, 1, 0, val);
      pd->big_phase = 7;
    }
    if ((st = big_ready(s, pd, 1, 0, val)) != ACX_OK) return st;
    big_group_copies(s, pd, t);
    pd->big_phase = 8; /* done: a later poll returns at once */
  }
  return ACX_OK;
}

/* The one-shot with groups on the host kind (runtime/proto/peer_ops.h; one block, so a piece is a
 * slice; host_start made step 1 and raised A): ACX_OK once the output is written, NOT_YET, or a
 * failure. Never waits. big_phase 1: waiting for the group (A), 2: for every rank (B). */
static acx_status_t host_gos(pset_t *s, pend_t *pd) {
  const int r = s->rank, G = s->G, K = s->K, g = s->grp[r], j = s->lane[r];
  const uint64_t seq = pd->cmd.arg[3], es = pd->es, count = pd->cmd.bytes, val = ACXP_BIG_VAL(seq, 0);
  const uint32_t dtype = pd->cmd.dtype, op = (uint32_t)pd->cmd.arg[1];
  const unsigned char *src[ACXP_MAX_RANKS];
  acx_status_t st;
  if (pd->big_phase == 1) { /* 3. my group's partial sum of slice j into the region of the rank at
                               place j of every group (mine first); B */
    if ((st = big_ready(s, pd, 0, 0, val)) != ACX_OK) return st;
    uint64_t lo, hi;
    big_part(count, ACXP_BIG_PART(count, K, 16 / es), j, &lo, &hi);
    if (hi > lo) {
      const uint64_t doff = ACXP_SLOT_OFF(seq & 1u, s->slot_bytes) + lo * es;
      const uint64_t goff = ACXP_GOS_OFF(seq & 1u, g, G, s->slot_bytes, s->big_bytes) + lo * es;
      for (int jl = 0; jl < K; jl++) src[jl] = s->area[s->at[g * K + jl]] + doff;
      host_reduce_n(s, src, K, 0, s->area[r] + goff, hi - lo, dtype, op);
      for (int gq = 0; gq < G; gq++)
        if (gq != g) memcpy(s->area[s->at[gq * K + j]] + goff, s->area[r] + goff, (hi - lo) * es);
    }
    big_signal(s, 1, 2, val);
    pd->big_phase = 2;
  }
  if ((st = big_ready(s, pd, 1, 2, val)) != ACX_OK) return st;
  for (int jl = 0; jl < K; jl++) { /* 5. each slice over the groups in order, from my group's rank at its place */
    uint64_t lo, hi;
    big_part(count, ACXP_BIG_PART(count, K, 16 / es), jl, &lo, &hi);
    if (hi <= lo) continue;
    const unsigned char *at = s->area[s->at[g * K + jl]];
    for (int gq = 0; gq < G; gq++) src[gq] = at + ACXP_GOS_OFF(seq & 1u, gq, G, s->slot_bytes, s->big_bytes) + lo * es;
    host_reduce_n(s, src, G, 1, pd->out + lo * es, hi - lo, dtype, op);
  }
  return ACX_OK;
}

/* The host kind's operations of one set, in order: each starts once the one before it has
 * finished (its input is read then, as a stream would), and finishes once the peers' data is in
 * place (steps 3 and 4). Returns nonzero while any is left. */
static int host_poll(acxi_engine_t *e, const acxi_engine_api_t *api, pset_t *s) {
  while (s->pcount) {
    pend_t *pd = &s->pv[s->phead];
    acx_status_t st = s->failed;
    if (st == ACX_OK && !pd->fence) {
      if (!pd->started) host_start(s, pd);
      st = pd->big ? host_big(s, pd) : pd->ll ? (s->llg ? host_ready_llg(s, pd) : host_ready_ll(s, pd))
           : pd->gos ? host_gos(s, pd) : host_ready(s, pd->cmd.arg[3], pd->deadline);
      if (st == NOT_YET) {
        /* The loop polls again at once: let the peers' executors have the cores meanwhile, the
         * more the longer the wait (past ~20 ms of naps a peer is late, not just descheduled). */
        if (++pd->polls > 2400) nanosleep(&(struct timespec){0, 1000000}, NULL);
        else if (pd->polls > 2000) nanosleep(&(struct timespec){0, 50000}, NULL);
        else if (pd->polls > 200) sched_yield();
        return 1;
      }
      if (st == ACX_OK && !pd->big && !pd->gos && !(pd->ll && s->llg)) {
        const unsigned char *src[ACXP_MAX_RANKS];
        uint64_t doff = ACXP_SLOT_OFF(pd->cmd.arg[3] & 1u, s->slot_bytes);
        for (int q = 0; q < s->nranks; q++)
          src[q] = !pd->ll ? s->area[q] + doff : s->ll_scratch + (size_t)q * ACXP_LL_MAX;
        host_reduce(s, src, pd->out, pd->cmd.bytes, pd->cmd.dtype, (uint32_t)pd->cmd.arg[1]);
      } else if (st != ACX_OK) {
        s->failed = st;
      }
    }
    free(pd->big_in);
    pd->big_in = NULL;
    acxi_cmd_t done = pd->cmd;
    s->phead = (s->phead + 1) % ACXP_PENDING;
    s->pcount--;
    if (s->id) finish(e, api, &done, st);
  }
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* ALLREDUCE                                                                                  */

static acx_status_t resolve(acxi_engine_t *e, const acxi_engine_api_t *api, const acxi_cmd_t *cmd, int i,
                            uint64_t bytes, unsigned char **p) {
  void *ptr = NULL;
  uint64_t have = 0;
  acx_status_t st = api->buffer(e, cmd->buf[i], &ptr, &have);
  if (st != ACX_OK) {
    ACX_WARN(COLL, "peer all-reduce %" PRIu64 ": %s buffer %" PRIu64 " is unknown here", cmd->arg[3],
             i ? "recv" : "send", cmd->buf[i]);
    return st;
  }
  if (cmd->off[i] > have || bytes > have - cmd->off[i]) {
    ACX_WARN(COLL, "peer all-reduce %" PRIu64 ": %s buffer %" PRIu64 " has %" PRIu64 " bytes; %" PRIu64
             " from offset %" PRIu64 " do not fit", cmd->arg[3], i ? "recv" : "send", cmd->buf[i], have, bytes,
             cmd->off[i]);
    return ACX_ERR_OUT_OF_RANGE;
  }
  *p = (unsigned char *)ptr + cmd->off[i];
  return ACX_OK;
}

#if ACX_HAVE_CUDA
/* Records an event after pd's kernel on its stream, now (it also covers what the stream took
 * after the kernel: a completion seen through it is never early). */
static cudaError_t pend_event(acxi_engine_t *e, const acxi_engine_api_t *api, pset_t *s, pend_t *pd) {
  cudaEvent_t ev = NULL;
  cudaError_t err = cudaSuccess;
  if (s->nev_free) ev = (cudaEvent_t)s->ev_free[--s->nev_free];
  else err = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (err == cudaSuccess) err = cudaEventRecord(ev, api->stream(e, pd->cmd.stream));
  if (err != cudaSuccess) {
    if (ev) (void)cudaEventDestroy(ev);
    return err;
  }
  pd->ev = ev;
  return cudaSuccess;
}

/* Whether buffer ranges [a, a + n) and [b, b + m) are the same start or disjoint: then every byte
 * of both sits at the same line index in both (the batch kernel's threads never share a byte
 * between operations). */
static int same_or_apart(const unsigned char *a, uint64_t n, const unsigned char *b, uint64_t m) {
  return a == b || a + n <= b || b + m <= a;
}

/* Whether an all-reduce of `bytes` runs in a batch (the push lines or the one-shot), not alone
 * (the two-shot). */
static int batched(const pset_t *s, uint64_t bytes) { return bytes <= s->ll_bytes || bytes <= s->slot_bytes; }

/* Whether cmd (input `in`, output `out`, `bytes` each) may join the operations staged in s: the
 * push lines or the one-shot (up to a slot), the same dtype, op, count, stream and deadline, and
 * no byte that a staged operation writes and cmd reads or writes (or that a staged one reads and
 * cmd writes) at another index: the kernels map an element to the same thread (the lines) or
 * block (the one-shot) in every operation of one count. */
static int joins(const pset_t *s, const acxi_cmd_t *cmd, const unsigned char *in, const unsigned char *out,
                 uint64_t bytes) {
  if (!batched(s, bytes)) return 0;
  for (unsigned k = 0; k < s->nstaged; k++) {
    const pend_t *pd = &s->pv[(s->phead + s->pcount - s->nstaged + k) % ACXP_PENDING];
    uint64_t b = pd->cmd.bytes * pd->es;
    /* One count: a line that one operation of a batch does not use would break the chain that
     * keeps a peer's line for s + 2 from landing before this rank has read s (peer_ops.h). */
    if (pd->cmd.dtype != cmd->dtype || pd->cmd.arg[1] != cmd->arg[1] || pd->cmd.stream != cmd->stream ||
        pd->cmd.bytes != cmd->bytes || pd->cmd.arg[4] != cmd->arg[4])
      return 0;
    if (!same_or_apart(pd->out, b, in, bytes) || !same_or_apart(pd->out, b, out, bytes) ||
        !same_or_apart(pd->in, b, out, bytes))
      return 0;
  }
  return 1;
}


/* Whether the lines of operation seq's parity are cleared after it (peer_ops.h): for the two
 * operations at the start of every clear_every. */
static int clears_after(const pset_t *s, uint64_t seq) { return s->ll_bytes && seq % s->clear_every < 2; }

/* Launches the operations staged in s (one kernel: a batch of small ones, or one of another
 * size), then, where due, the clearing of the last one's lines, then its completion event. A
 * failure fails them all (and the set). */
static void launch_staged(acxi_engine_t *e, const acxi_engine_api_t *api, pset_t *s) {
  const unsigned n = s->nstaged, first = (s->phead + s->pcount - n) % ACXP_PENDING;
  s->nstaged = 0;
  if (!n) return;
  pend_t *p0 = &s->pv[first], *pl = &s->pv[(first + n - 1) % ACXP_PENDING];
  const uint32_t sidx = p0->cmd.stream;
  cudaStream_t stream = api->stream(e, sidx);
  /* The buffers' earlier accesses, each buffer once. */
  for (unsigned k = 0; k < n; k++) {
    const pend_t *pd = &s->pv[(first + k) % ACXP_PENDING];
    for (int b = 0; b < 2; b++) {
      int seen = 0;
      for (unsigned j = 0; j < k && !seen; j++)
        seen = s->pv[(first + j) % ACXP_PENDING].cmd.buf[b] == pd->cmd.buf[b];
      if (!seen) api->order_access(e, pd->cmd.buf[b], sidx, b);
    }
  }
  cudaError_t err = cudaSuccess;
  /* The set's operations run one after the other, whatever their streams: a slot is written again
   * two operations later only because operation s has finished on every GPU before any block of
   * s + 1 raises a flag (runtime/proto/peer_ops.h). */
  for (unsigned k = s->pcount - n; k > 0 && err == cudaSuccess; k--) { /* the last kernel still in flight */
    pend_t *prev = &s->pv[(s->phead + k - 1) % ACXP_PENDING];
    if (prev->fence) continue;
    if (prev->cmd.stream != sidx) { /* else in order */
      if (!prev->ev) err = pend_event(e, api, s, prev);
      if (err == cudaSuccess) err = cudaStreamWaitEvent(stream, (cudaEvent_t)prev->ev, 0);
    }
    break;
  }
  acxk_peer_args_t a = {.nranks = s->nranks, .rank = s->rank, .abort = (const int32_t *)(const void *)&s->ctl_dev->abort,
                        .slot_bytes = s->slot_bytes, .big_bytes = s->big_bytes, .pdl = s->pdl, .trace = s->trace,
                        .big_blocks = (int32_t)s->big_blocks, .groups = s->G, .per_group = s->K,
                        };
  for (int q = 0; q < s->nranks; q++) {
    a.flags[q] = s->area[q];
    a.grp[q] = s->grp[q];
    a.lane[q] = s->lane[q];
    a.at[q] = s->at[q];
  }
  acxk_peer_batch_t bt;
  const uint64_t bytes = p0->cmd.bytes * p0->es;
  const int64_t ms = (int64_t)p0->cmd.arg[4]; /* every operation's (joins) */
  a.count = p0->cmd.bytes;
  a.timeout_ns = (uint64_t)(ms > 0 ? ms : 60000) * 1000000ull;
  a.ll = bytes <= s->ll_bytes;
  a.big = !batched(s, bytes);
  a.ll_groups = a.ll && s->llg;
  if (!a.big) { /* the push lines or the one-shot: a batch of one count (joins) */
    bt.nops = n;
    for (unsigned k = 0; k < n; k++) {
      const unsigned idx = (first + k) % ACXP_PENDING;
      const pend_t *pd = &s->pv[idx];
      bt.op[k] = (acxk_peer_op_t){.send = pd->in, .recv = pd->out, .count = pd->cmd.bytes, .seq = pd->cmd.arg[3],
                                     .timeout_ns = a.timeout_ns,
                                     .status = (int32_t *)(void *)&s->ctl_dev->status[idx]};
    }
    a.small_groups = !a.ll && s->gos_min && bytes >= s->gos_min;
    for (int q = 0; q < s->nranks; q++) a.data[q] = s->area[q] + ACXP_SLOT_OFF(0, s->slot_bytes);
  } else {
    a.send = p0->in;
    a.recv = p0->out;
    a.seq = p0->cmd.arg[3];
    a.status = (int32_t *)(void *)&s->ctl_dev->status[first];
    if (s->K > 1) { /* the two-shot with groups: this rank's publication (peer_ops.h) */
      a.regtab = (const uint64_t *)(const void *)(s->area[s->rank] + ACXP_BIG_REGTAB_OFF(s->slot_bytes));
      a.pub_in = (s->reg_use & 1) ? pub_word(p0->cmd.arg[2] & 0xff, p0->cmd.off[0], p0->in) : 0;
      a.pub_out = (s->reg_use & 2) ? pub_word((p0->cmd.arg[2] >> 8) & 0xff, p0->cmd.off[1], p0->out) : 0;
      s->npub += a.pub_in || a.pub_out;
    }
  }
  if (err == cudaSuccess)
    err = acxk_peer_launch_allreduce(&a, a.big ? NULL : &bt, (int)p0->cmd.dtype, (int)p0->cmd.arg[1], stream);
  const uint64_t last = pl->cmd.arg[3];
  if (err == cudaSuccess && clears_after(s, last))
    err = cudaMemsetAsync(s->area[s->rank] + ACXP_LL_OFF(last & 1u, 0, s->slot_bytes), 0,
                          (uint64_t)(s->nranks - 1) * ACXP_LL_SRC_BYTES + 2 * s->ll_bytes, stream);
  /* An event per launch, or (ACX_COLL_PEER_EVENT_EVERY = K > 1) only for launches with a reply
   * among their operations and every K-th operation without: an event record and its queries cost
   * host time that back-to-back small all-reduces cannot spare (the NCCL path records none for
   * operations without a reply). Operations without an event complete through a later one's. */
  int reply = 0;
  for (unsigned k = 0; k < n; k++) reply |= !(s->pv[(first + k) % ACXP_PENDING].cmd.flags & ACXI_CMD_FLAG_NO_REPLY);
  s->since_ev += n;
  if (err == cudaSuccess && (s->ev_every <= 1 || reply || s->since_ev >= s->ev_every)) {
    err = pend_event(e, api, s, pl);
    s->since_ev = 0;
  }
  if (err != cudaSuccess) {
    ACX_WARN(COLL, "peer all-reduce %" PRIu64 "%s: launching it failed: %s (%d)", p0->cmd.arg[3],
             n > 1 ? " and the rest of its batch" : "", cudaGetErrorString(err), (int)err);
    (void)cudaGetLastError();
    s->failed = ACX_ERR_DEVICE;
    for (unsigned k = 0; k < n; k++) {
      pend_t *pd = &s->pv[(first + k) % ACXP_PENDING];
      if (pd->ev) {
        (void)cudaEventDestroy((cudaEvent_t)pd->ev);
        pd->ev = NULL;
      }
      finish(e, api, &pd->cmd, ACX_ERR_DEVICE);
    }
    s->pcount -= n;
    return;
  }
  s->nlaunch++;
  s->nops += n;
}

/* Launches what is staged (ext_t.staged). */
static void flush(acxi_engine_t *e, const acxi_engine_api_t *api, ext_t *x) {
  pset_t *s = x->staged;
  x->staged = NULL;
  if (s) launch_staged(e, api, s);
}

static void cuda_complete(acxi_engine_t *e, const acxi_engine_api_t *api, pset_t *s);

/* The all-reduce joins the operations staged (x->staged) when it can, else they are launched
 * first; it is launched at once unless a later one may join it. Whatever is staged is launched
 * before the engine runs any other command (the hook `flush`) and at every progress. */
static void cuda_allreduce(acxi_engine_t *e, const acxi_engine_api_t *api, ext_t *x, pset_t *s,
                           const acxi_cmd_t *cmd, unsigned char *in, unsigned char *out) {
  if (s->pcount == ACXP_PENDING) {
    /* The rank sends faster than the GPUs reduce (batches launch 16 at a time): wait here for the
     * oldest to finish, as a launch into a full CUDA queue would, within this operation's
     * deadline. Its kernels need nothing from this loop: they wait only for kernels the peers'
     * executors have launched or will launch in the same order. */
    flush(e, api, x);
    int64_t ms = (int64_t)cmd->arg[4], dl = acxi_now_ns() + (ms > 0 ? ms : 60000) * 1000000;
    for (unsigned spins = 0; s->pcount == ACXP_PENDING && s->failed == ACX_OK && acxi_now_ns() < dl; spins++) {
      cuda_complete(e, api, s);
      if (s->pcount == ACXP_PENDING && spins > 64) sched_yield();
    }
    if (s->failed != ACX_OK) { /* an operation in flight failed meanwhile: this one fails with it */
      finish(e, api, cmd, s->failed);
      return;
    }
    if (s->pcount == ACXP_PENDING) {
      ACX_WARN(COLL, "peer all-reduce %" PRIu64 ": %d operations of the set are still in flight at its deadline",
               cmd->arg[3], ACXP_PENDING);
      finish(e, api, cmd, ACX_ERR_QUEUE_FULL);
      return;
    }
  }
  const size_t es = elem_size(cmd->dtype);
  const uint64_t bytes = cmd->bytes * es;
  if (x->staged && (x->staged != s || !joins(s, cmd, in, out, bytes))) flush(e, api, x);
  const unsigned idx = (s->phead + s->pcount) % ACXP_PENDING;
  atomic_store_explicit(&s->ctl->status[idx], 0, memory_order_relaxed);
  s->pv[idx] = (pend_t){.cmd = *cmd, .in = in, .out = out, .es = es, .submit_ns = acxi_now_ns()};
  s->pcount++;
  s->nstaged++;
  x->staged = s;
  if (!batched(s, bytes) || s->nstaged >= s->batch_max || clears_after(s, cmd->arg[3])) flush(e, api, x);
}
#endif

static void allreduce(acxi_engine_t *e, const acxi_engine_api_t *api, ext_t *x, const acxi_cmd_t *cmd) {
  pset_t *s = set_find(x, cmd->arg[0]);
  acx_status_t st = ACX_OK;
  size_t es = elem_size(cmd->dtype);
  unsigned char *in = NULL, *out = NULL;
  if (!s || s->destroying) {
    ACX_WARN(COLL, "peer all-reduce %" PRIu64 ": no set %" PRIu64 " in this executor", cmd->arg[3], cmd->arg[0]);
    st = ACX_ERR_INVALID_ARG;
  } else if (s->failed != ACX_OK) {
    st = s->failed;
  } else if (!es || cmd->arg[1] > ACX_REDOP_AVG) {
    ACX_WARN(COLL, "peer all-reduce %" PRIu64 ": dtype %u, op %" PRIu64 " (need one of the ten dtypes NCCL reduces "
             "and sum, prod, max, min or avg)", cmd->arg[3], cmd->dtype, cmd->arg[1]);
    st = ACX_ERR_INVALID_ARG;
  } else if (cmd->bytes == 0 || (cmd->bytes > s->slot_bytes / es && !s->big_bytes) ||
             cmd->bytes > (UINT64_MAX >> 1) / es || cmd->stream >= ACXI_MAX_STREAMS) {
    ACX_WARN(COLL, "peer all-reduce %" PRIu64 ": %" PRIu64 " elements of %zu bytes on stream %u (a slot holds %" PRIu64
             " bytes%s)", cmd->arg[3], cmd->bytes, es, cmd->stream, s->slot_bytes,
             s->big_bytes ? "" : "; the set has no big slots");
    st = ACX_ERR_INVALID_ARG;
  }
  if (st == ACX_OK) st = resolve(e, api, cmd, 0, cmd->bytes * es, &in);
  if (st == ACX_OK) st = resolve(e, api, cmd, 1, cmd->bytes * es, &out);
  if (st == ACX_OK && in != out && in < out + cmd->bytes * es && out < in + cmd->bytes * es) {
    ACX_WARN(COLL, "peer all-reduce %" PRIu64 ": send and recv overlap partly", cmd->arg[3]);
    st = ACX_ERR_INVALID_ARG;
  }
  if (st != ACX_OK) {
    finish(e, api, cmd, st);
    return;
  }
#if ACX_HAVE_CUDA
  if (on_cuda(e, api)) {
    cuda_allreduce(e, api, x, s, cmd, in, out);
    return;
  }
#endif
  if (s->pcount == ACXP_PENDING) {
    /* As on GPUs: the oldest is run on (host_poll never waits) until it leaves, within this
     * operation's deadline. */
    const int64_t dl = acxi_now_ns() + op_timeout_ns(cmd);
    for (unsigned spins = 0; s->pcount == ACXP_PENDING && acxi_now_ns() < dl; spins++) {
      host_poll(e, api, s);
      if (s->pcount == ACXP_PENDING && spins > 64) sched_yield(); /* the peers' executors may share this CPU */
    }
    if (s->pcount == ACXP_PENDING) {
      ACX_WARN(COLL, "peer all-reduce %" PRIu64 ": %d operations of the set are still in flight at its deadline",
               cmd->arg[3], ACXP_PENDING);
      finish(e, api, cmd, ACX_ERR_QUEUE_FULL);
      return;
    }
    if (s->failed != ACX_OK) {
      finish(e, api, cmd, s->failed);
      return;
    }
  }
  s->pv[(s->phead + s->pcount) % ACXP_PENDING] =
      (pend_t){.cmd = *cmd, .in = in, .out = out, .es = es, .ll = cmd->bytes * es <= s->ll_bytes,
               .big = cmd->bytes * es > s->slot_bytes,
               .gos = cmd->bytes * es > s->ll_bytes && cmd->bytes * es <= s->slot_bytes && s->gos_min &&
                      cmd->bytes * es >= s->gos_min};
  s->pcount++;
  host_poll(e, api, s); /* the head starts now */
}

/* REG: an entry of the registration table (peer_ops.h, "Registered buffers"), written once the set
 * has nothing in flight: a kernel reads the table after its launch, so an entry that changed under
 * a kernel launched before it could name another buffer. Registration is collective, so the
 * operations in flight here need no more commands from this rank to finish; their peers' kernels
 * were launched (or will be) in the same order. */
static void reg(acxi_engine_t *e, const acxi_engine_api_t *api, ext_t *x, const acxi_cmd_t *cmd) {
  pset_t *s = set_find(x, cmd->arg[0]);
  const uint64_t slot = cmd->arg[1], q = cmd->arg[2];
  if (!s || s->destroying) {
    ACX_WARN(COLL, "peer REG: no set %" PRIu64 " in this executor", cmd->arg[0]);
    finish(e, api, cmd, ACX_ERR_INVALID_ARG);
    return;
  }
  if (!s->big_bytes) {
    ACX_WARN(COLL, "peer REG: set %" PRIu64 " has no big slots (its areas have no registration table)", s->id);
    finish(e, api, cmd, ACX_ERR_INVALID_ARG);
    return;
  }
  if (slot >= ACXP_REG_MAX || q >= (uint64_t)s->nranks || q == (uint64_t)s->rank) {
    ACX_WARN(COLL, "peer REG: slot %" PRIu64 " of rank %" PRIu64 " (need a slot below %d and another rank of the %d)",
             slot, q, ACXP_REG_MAX, s->nranks);
    finish(e, api, cmd, ACX_ERR_INVALID_ARG);
    return;
  }
  uint64_t addr = 0;
  if (cmd->buf[0]) {
    void *p = NULL;
    uint64_t have = 0;
    acx_status_t st = api->buffer(e, cmd->buf[0], &p, &have);
    if (st != ACX_OK) {
      ACX_WARN(COLL, "peer REG: buffer %" PRIu64 " (rank %" PRIu64 "'s, slot %" PRIu64 ") is unknown here",
               cmd->buf[0], q, slot);
      finish(e, api, cmd, st);
      return;
    }
    addr = (uint64_t)(uintptr_t)p;
  }
  const int64_t dl = acxi_now_ns() + op_timeout_ns(cmd);
  for (unsigned spins = 0; s->pcount && s->failed == ACX_OK && acxi_now_ns() < dl; spins++) {
#if ACX_HAVE_CUDA
    if (on_cuda(e, api)) cuda_complete(e, api, s);
    else
#endif
      host_poll(e, api, s);
    if (s->pcount && spins > 64) sched_yield();
  }
  if (s->pcount) {
    /* A failed set ends its operations through its abort; the entry is not needed then, and one
     * written under a kernel still in flight is what this wait avoids. */
    ACX_WARN(COLL, "peer REG: %u operations of set %" PRIu64 " still in flight%s: slot %" PRIu64 " of rank %" PRIu64
             " not written", s->pcount, s->id, s->failed != ACX_OK ? " after its failure" : " at the deadline", slot, q);
    finish(e, api, cmd, s->failed != ACX_OK ? s->failed : ACX_ERR_TIMEOUT);
    return;
  }
  acx_status_t st = ACX_OK;
  unsigned char *at = s->area[s->rank] + ACXP_BIG_REGTAB_OFF(s->slot_bytes) + (q * ACXP_REG_MAX + slot) * 8;
#if ACX_HAVE_CUDA
  if (on_cuda(e, api)) {
    cudaStream_t st0 = api->stream(e, 0);
    cudaError_t err = cudaMemcpyAsync(at, &addr, sizeof addr, cudaMemcpyHostToDevice, st0);
    if (err == cudaSuccess) err = cudaStreamSynchronize(st0);
    if (err != cudaSuccess) {
      ACX_WARN(COLL, "peer REG: writing slot %" PRIu64 " of rank %" PRIu64 ": %s", slot, q, cudaGetErrorString(err));
      (void)cudaGetLastError();
      st = ACX_ERR_DEVICE;
    }
  } else
#endif
    memcpy(at, &addr, sizeof addr);
  finish(e, api, cmd, st);
}

/* FENCE: at once when nothing of the set is in flight, else in its turn after what is. */
static void fence(acxi_engine_t *e, const acxi_engine_api_t *api, ext_t *x, const acxi_cmd_t *cmd) {
  pset_t *s = set_find(x, cmd->arg[0]);
  if (!s || s->destroying) {
    ACX_WARN(COLL, "peer FENCE: no set %" PRIu64 " in this executor", cmd->arg[0]);
    finish(e, api, cmd, ACX_ERR_INVALID_ARG);
    return;
  }
  if (!s->pcount) {
    finish(e, api, cmd, s->failed);
    return;
  }
  if (s->pcount == ACXP_PENDING) {
    ACX_WARN(COLL, "peer FENCE: %d operations of the set are in flight already", ACXP_PENDING);
    finish(e, api, cmd, ACX_ERR_QUEUE_FULL);
    return;
  }
  s->pv[(s->phead + s->pcount) % ACXP_PENDING] = (pend_t){.cmd = *cmd, .fence = 1};
  s->pcount++;
}

/* ------------------------------------------------------------------------------------------ */
/* the hooks                                                                                  */

static void peer_submit(acxi_engine_t *e, const acxi_engine_api_t *api, const acxi_cmd_t *cmd) {
  ext_t *x = ext_get(e, api);
  if (!x) {
    finish(e, api, cmd, ACX_ERR_NO_MEMORY);
    return;
  }
#if ACX_HAVE_CUDA
  if (cmd->op != ACXP_OP_ALLREDUCE) flush(e, api, x); /* what is staged goes first */
#endif
  switch (cmd->op) {
  case ACXP_OP_SETUP: setup(e, api, x, cmd); return;
  case ACXP_OP_ALLREDUCE: allreduce(e, api, x, cmd); return;
  case ACXP_OP_DESTROY: destroy(e, api, x, cmd); return;
  case ACXP_OP_FENCE: fence(e, api, x, cmd); return;
  case ACXP_OP_REG: reg(e, api, x, cmd); return;
  default:
    ACX_WARN(COLL, "peer: unknown op %#x", cmd->op);
    finish(e, api, cmd, ACX_ERR_INVALID_ARG);
  }
}

#if ACX_HAVE_CUDA
/* Completes the set's operations whose kernels have finished, in order (a FENCE in its turn). */
static void cuda_complete(acxi_engine_t *e, const acxi_engine_api_t *api, pset_t *s) {
  while (s->pcount) {
    pend_t *pd = &s->pv[s->phead];
    if (pd->fence) {
      acxi_cmd_t done = pd->cmd;
      s->phead = (s->phead + 1) % ACXP_PENDING;
      s->pcount--;
      if (s->id) finish(e, api, &done, s->failed);
      continue;
    }
    cudaEvent_t ev = (cudaEvent_t)pd->ev;
    cudaError_t err = cudaSuccess;
    if (!ev) {
      /* Launched without an event: the next operation's event that follows covers it (the set's
       * operations run in order, across streams too); where none does yet, the newest is given
       * one once a FENCE waits behind it, the set is going, or it is 20 us old. */
      pend_t *cover = NULL, *newest = pd;
      int fence_behind = 0;
      for (unsigned k = 1; k < s->pcount && !cover; k++) {
        pend_t *q = &s->pv[(s->phead + k) % ACXP_PENDING];
        if (q->fence) fence_behind = 1;
        else if (q->ev) cover = q;
        else newest = q;
      }
      if (!cover && (fence_behind || s->destroying || acxi_now_ns() - newest->submit_ns > 20000)) {
        err = pend_event(e, api, s, newest);
        if (err == cudaSuccess) cover = newest;
      }
      if (err == cudaSuccess && !cover) break;
      if (cover) ev = (cudaEvent_t)cover->ev;
    }
    if (err == cudaSuccess) err = cudaEventQuery(ev);
    if (err == cudaErrorNotReady) break;
    acx_status_t st = ACX_OK;
    if (err != cudaSuccess) {
      ACX_WARN(COLL, "peer all-reduce %" PRIu64 ": the kernel failed: %s (%d)", pd->cmd.arg[3],
               cudaGetErrorString(err), (int)err);
      st = ACX_ERR_DEVICE;
    } else {
      st = (acx_status_t)atomic_load_explicit(&s->ctl->status[s->phead], memory_order_acquire);
      if (st == ACX_ERR_COLL_TIMEOUT)
        ACX_WARN(COLL, "peer all-reduce %" PRIu64 ": a peer's data did not come by the deadline", pd->cmd.arg[3]);
    }
    if (st != ACX_OK && s->failed == ACX_OK) s->failed = st;
    acxi_cmd_t done = pd->cmd;
    if (pd->ev && s->nev_free < EV_CACHE) s->ev_free[s->nev_free++] = pd->ev;
    else if (pd->ev) (void)cudaEventDestroy((cudaEvent_t)pd->ev);
    s->phead = (s->phead + 1) % ACXP_PENDING;
    s->pcount--;
    if (s->id) finish(e, api, &done, st);
  }
}
#endif

/* Completions of the kernels in flight, in order; a DESTROY waiting for them. Nonzero while
 * anything is in flight (the loop keeps polling). */
static int peer_progress(acxi_engine_t *e, const acxi_engine_api_t *api) {
  ext_t *x = ext_get(e, api);
  int busy = 0;
  if (!x) return 0;
  int cuda = 0;
#if ACX_HAVE_CUDA
  cuda = on_cuda(e, api);
  flush(e, api, x); /* the loop has taken every command it had: a batch is complete */
#endif
  for (pset_t *s = x->sets, *next; s; s = next) {
    next = s->next;
    if (!cuda && host_poll(e, api, s)) busy = 1;
#if ACX_HAVE_CUDA
    if (cuda) cuda_complete(e, api, s);
#endif
    if (s->pcount) {
      busy = 1;
      if (s->destroying && s->id && acxi_now_ns() >= s->destroy_deadline_ns) {
        ACX_WARN(COLL, "peer DESTROY of set %" PRIu64 ": %u operations still run at its deadline; the set goes once "
                 "they leave", s->id, s->pcount);
        finish(e, api, &s->destroy_cmd, ACX_ERR_TIMEOUT);
        s->id = 0;
      }
      continue;
    }
    if (s->destroying) {
      if (s->id) finish(e, api, &s->destroy_cmd, ACX_OK);
      set_free(x, s);
    }
  }
  return busy;
}

#if ACX_HAVE_CUDA
/* The hook `flush`: the engine is about to run a command of its own or another extension's. */
static void peer_flush(acxi_engine_t *e, const acxi_engine_api_t *api) {
  void **slot = api->ext_state(e, ACXP_EXT_SLOT);
  if (slot && *slot) flush(e, api, *slot);
}
#endif

static void peer_engine_destroy(acxi_engine_t *e, const acxi_engine_api_t *api) {
  void **slot = api->ext_state(e, ACXP_EXT_SLOT);
  ext_t *x = slot ? *slot : NULL;
  if (!x) return;
#if ACX_HAVE_CUDA
  flush(e, api, x);
#endif
  while (x->sets) {
    pset_t *s = x->sets;
#if ACX_HAVE_CUDA
    /* Kernels still waiting for peers leave at the abort word's next look; waited for 10 s at
     * most (a kernel past that is the device's problem: the context goes with the engine). */
    if (s->pcount) atomic_store_explicit(&s->ctl->abort, ACX_ERR_CANCELLED, memory_order_relaxed);
    int64_t dl = acxi_now_ns() + 10000000000LL;
    for (unsigned i = s->pcount; i > 0; i--) { /* the newest kernel gets an event if it has none */
      pend_t *pd = &s->pv[(s->phead + i - 1) % ACXP_PENDING];
      if (pd->fence) continue;
      if (!pd->ev) (void)pend_event(e, api, s, pd);
      break;
    }
    for (unsigned i = 0; i < s->pcount; i++) {
      pend_t *pd = &s->pv[(s->phead + i) % ACXP_PENDING];
      if (pd->fence || !pd->ev) continue;
      while (cudaEventQuery((cudaEvent_t)pd->ev) == cudaErrorNotReady && acxi_now_ns() < dl)
        nanosleep(&(struct timespec){0, 100000}, NULL);
      (void)cudaEventDestroy((cudaEvent_t)pd->ev);
    }
    ev_cache_drop(s);
    (void)cudaGetLastError();
    trace_log(s);
#endif
    x->sets = s->next;
    log_launches(s);
    for (unsigned k = 0; k < s->pcount; k++) free(s->pv[(s->phead + k) % ACXP_PENDING].big_in);
    free(s->ll_scratch);
    free(s);
  }
  free(x);
  *slot = NULL;
}

static const acxi_ext_ops_t peer_ext_ops = {
    .name = "peer",
    .op_first = ACXP_OP_FIRST,
    .op_last = ACXP_OP_LAST,
    .slot = ACXP_EXT_SLOT,
    .submit = peer_submit,
    .progress = peer_progress,
    .engine_destroy = peer_engine_destroy,
#if ACX_HAVE_CUDA
    .flush = peer_flush,
#endif
};

__attribute__((constructor)) static void peer_ext_register(void) { acxi_ext_register(&peer_ext_ops); }
