/* The NCCL executor extension (ops 0x200-0x2ff, runtime/proto/coll_ops.h): runs on the executor
 * thread, which therefore issues every NCCL call of its device, in the order of the command ring.
 * Communicators are non-blocking by default; every state that NCCL finishes in the background
 * (init, an enqueue that returned ncclInProgress, finalize) is a state of the communicator polled
 * from the extension's progress hook, so the executor loop keeps serving other commands meanwhile.
 * A communicator made with ACXC_INIT_BLOCKING (the network path: see "blocking communicators")
 * is a blocking NCCL communicator whose init and finalize run on side threads.
 * A collective repeated with the same arguments is captured once into a CUDA graph and replayed
 * from then on (see "graph cache" below for why).
 * A communicator made with ACXC_INIT_PRIVATE_STREAM (remote access's two-rank channels) runs its
 * operations on a stream of its own and tracks their completions itself (see "private streams"). */
#define _GNU_SOURCE
#include <inttypes.h>
#include <cuda.h>
#include <nccl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "acx/device.h"
#include "runtime/proto/coll_ops.h"
#include "kernels/cuda/cuda_internal.h"
#include "runtime/base/clock.h"
#include "kernels/exec/engine.h"
#include "runtime/base/log.h"
#include "runtime/base/param.h"

/* While a communicator is healthy and idle-ish, how often progress asks NCCL for async errors. */
#define ASYNC_POLL_NS 200000
/* A collective is captured into a graph the second time it is seen: one-off operations never pay
 * for a capture, loops pay for one. */
#define GRAPH_MIN_SEEN 2
#define GRAPH_CACHE_MAX 4096
/* Executable instances per cached graph, launched in turn. One instance of an executable graph
 * runs at a time, and relaunching one still in flight costs the launching thread about as long as
 * the collective itself takes on the GPU (measured: 8-11 us per cudaGraphLaunch for an 8-byte
 * all-reduce); with several instances the executor runs ahead of the GPU as with direct calls. */
#define GRAPH_INSTANCES 4
/* Operations closer than this count as back to back in the statistics. */
#define PERIOD_MAX_NS 100000

typedef enum cstate {
  C_INIT = 0,       /* ncclCommInitRankConfig in progress; init_cmd waits */
  C_READY = 1,      /* NCCL calls may be issued */
  C_ISSUING = 2,    /* the last NCCL call returned ncclInProgress; `issuing` waits for success */
  C_FINALIZING = 3, /* ncclCommFinalize in progress; init_cmd holds the DESTROY */
  C_FAILED = 4      /* every later command fails with fail_status */
} cstate_t;

/* What makes two collectives the same graph: the operation and the exact addresses (a graph holds
 * raw pointers), with the buffer ids so that a freed buffer's entry never matches a new buffer
 * that happens to get its address. No padding: keys are compared with memcmp. */
typedef struct gkey {
  uint32_t op, dtype, redop;
  int32_t peer;
  uint64_t send, recv, count;
  uint64_t sp, rp;
} gkey_t;

typedef struct gentry {
  gkey_t key;
  cudaGraphExec_t exec[GRAPH_INSTANCES]; /* nexec of them; 0: seen, not captured (yet) */
  int nexec, next;
  /* The captured graph, kept while exec holds copies of its kernel node (see "kernel copies"). */
  cudaGraph_t orig;
  uint64_t used; /* LRU clock */
  uint32_t seen;
  int valid;
} gentry_t;

/* Where the time of a communicator's operations went; logged at INFO when it goes. */
typedef struct cstats {
  uint64_t ops, eager, in_progress, replays, captures, capture_fails, copies;
  int64_t wait_ns, wait_max_ns;
  int64_t replay_ns, launch_ns; /* executor time per replay: all of it, cudaGraphLaunch alone */
  /* From one operation's start to the next one's, when under PERIOD_MAX_NS (back-to-back work):
   * the executor's whole cost per operation, its loop and the wait for the next command included. */
  int64_t prev_t0, period_ns;
  uint64_t periods;
  /* The executor thread's context switches since the first operation, and its CPUs then and at the
   * log: a thread that shares its core shows up as involuntary switches. */
  long nivcsw0, nvcsw0;
  int cpu0;
} cstats_t;

/* A growable FIFO of T, name_t, with name_push (0, or -1 out of host memory) and name_pop. */
#define FIFO_DEFINE(name, T)                                                                                          \
  typedef struct name {                                                                                               \
    T *v;                                                                                                             \
    size_t head, count, cap;                                                                                          \
  } name##_t;                                                                                                         \
  static int name##_push(name##_t *f, const T *e) {                                                                   \
    if (f->count == f->cap) {                                                                                         \
      size_t cap = f->cap ? 2 * f->cap : 16;                                                                          \
      T *n = malloc(cap * sizeof *n);                                                                                 \
      if (!n) return -1;                                                                                              \
      for (size_t i = 0; i < f->count; i++) n[i] = f->v[(f->head + i) % f->cap];                                      \
      free(f->v);                                                                                                     \
      f->v = n;                                                                                                       \
      f->cap = cap;                                                                                                   \
      f->head = 0;                                                                                                    \
    }                                                                                                                 \
    f->v[(f->head + f->count) % f->cap] = *e;                                                                         \
    f->count++;                                                                                                       \
    return 0;                                                                                                         \
  }                                                                                                                   \
  static T name##_pop(name##_t *f) {                                                                                  \
    T e = f->v[f->head];                                                                                              \
    f->head = (f->head + 1) % f->cap;                                                                                 \
    f->count--;                                                                                                       \
    return e;                                                                                                         \
  }

/* An operation in flight whose completion waits for ev (see "private streams" and "replies"). */
typedef struct pend {
  acxi_cmd_t cmd;
  cudaEvent_t ev;
  int64_t deadline_ns;
} pend_t;

FIFO_DEFINE(cmdq, acxi_cmd_t)
FIFO_DEFINE(pring, pend_t)

typedef struct ncomm {
  uint64_t id;
  ncclComm_t comm; /* NULL once aborted or destroyed */
  cstate_t state;
  int nranks, rank;
  acxi_cmd_t init_cmd; /* INIT (C_INIT) or DESTROY (C_FINALIZING) */
  int64_t deadline_ns; /* of init, of the enqueue in progress, of finalize */
  acxi_cmd_t issuing;
  acx_status_t fail_status;
  int fail_code;
  int64_t failed_at_ns;
  int64_t next_poll_ns;
  /* Commands that arrived while NCCL may not be called (C_INIT, C_ISSUING). */
  cmdq_t q;
  int64_t timeout_ns;   /* ACX_COLL_TIMEOUT, read once */
  int64_t issued_at_ns; /* C_ISSUING: when the call returned ncclInProgress */
  /* Graph cache (gcap 0: off): capture runs on the private stream cs; `capturing` is the entry
   * whose capture the call in progress belongs to (C_ISSUING). */
  gentry_t *gc;
  int gcap;
  int64_t gmax_bytes; /* ACX_COLL_GRAPH_MAX_BYTES; < 0: no limit */
  uint64_t gclock;
  cudaStream_t cs;
  gentry_t *capturing;
  /* The stream of the last collective, and an event to chain the next one after it when it goes
   * to another stream: NCCL orders a communicator's direct calls across streams itself, and graph
   * replays must keep that order too. */
  int last_stream;
  cudaEvent_t chain_ev;
  /* Private stream (ACXC_INIT_PRIVATE_STREAM): ps carries every operation, after an event of the
   * engine stream named by the command (ordered there after the buffers' earlier users); pv holds
   * the operations in flight, a FIFO. */
  cudaStream_t ps;
  pring_t pq;
  /* The other communicators' operations in flight that want a reply (see "replies"), and events
   * for both FIFOs to reuse. */
  pring_t rq;
  cudaEvent_t *evs;
  size_t nevs, evcap;
  int destroy_pending; /* a DESTROY (in init_cmd) waits for the operations in flight to leave */
  /* Kernel copies (see there): the stream of the last copy launched, captured graphs waiting for
   * the copies launched before them to finish, and a DESTROY (in init_cmd) waiting for those. */
  int copy_on;
  cudaStream_t copy_s;
  struct grave *gv;
  size_t gn, gvcap;
  int finalize_wait;
  /* Blocking communicator (ACXC_INIT_BLOCKING): its init or finalize running on a side thread. */
  int blocking;
  struct sjob *job;
  cstats_t st;
} ncomm_t;

typedef struct ext {
  ncomm_t **v;
  int n, cap;
} ext_t;

static const ncclDataType_t nccl_types[ACX_DTYPE_COUNT] = {
    [ACX_DTYPE_BYTE] = ncclUint8,     [ACX_DTYPE_I8] = ncclInt8,     [ACX_DTYPE_U8] = ncclUint8,
    [ACX_DTYPE_I32] = ncclInt32,      [ACX_DTYPE_U32] = ncclUint32,  [ACX_DTYPE_I64] = ncclInt64,
    [ACX_DTYPE_U64] = ncclUint64,     [ACX_DTYPE_F16] = ncclFloat16, [ACX_DTYPE_BF16] = ncclBfloat16,
    [ACX_DTYPE_F32] = ncclFloat32,    [ACX_DTYPE_F64] = ncclFloat64};
static const ncclRedOp_t nccl_ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
#define N_REDOPS (sizeof nccl_ops / sizeof nccl_ops[0])

/* A failed NCCL call: logged once with the call's text and NCCL's last message. */
#define NCCL_WARN(c, what, r)                                                                      \
  ACX_WARN(COLL, "communicator %" PRIu64 ": %s: %s (%d)%s%s", (c)->id, (what), ncclGetErrorString(r), (int)(r), \
           (c)->comm ? ": " : "", (c)->comm ? ncclGetLastError((c)->comm) : "")

/* ------------------------------------------------------------------------------------------ */

/* Posts cmd's completion unless it is a successful fire-and-forget command. */
static void finish(acxi_engine_t *e, const acxi_engine_api_t *api, const acxi_cmd_t *cmd, acx_status_t st,
                   int code, uint64_t v0, uint64_t v1) {
  if (st == ACX_OK && (cmd->flags & ACXI_CMD_FLAG_NO_REPLY)) return;
  acxi_cpl_t cpl = {.req_id = cmd->req_id, .status = st, .lib_code = code, .value = {v0, v1}};
  api->complete(e, &cpl);
}

static ext_t *ext_get(acxi_engine_t *e, const acxi_engine_api_t *api, int create) {
  void **slot = api->ext_state(e, ACXC_EXT_SLOT);
  if (!slot) return NULL;
  if (!*slot && create) *slot = calloc(1, sizeof(ext_t));
  return *slot;
}

static ncomm_t *comm_find(ext_t *x, uint64_t id) {
  for (int i = 0; x && i < x->n; i++)
    if (x->v[i]->id == id) return x->v[i];
  return NULL;
}

static void graphs_off(ncomm_t *c);
static void grave_free(ncomm_t *c);
static void capture_abandon(ncomm_t *c);
static void stats_log(const ncomm_t *c);

static void sjob_abandon(ncomm_t *c);
static void replies_drop(acxi_engine_t *e, const acxi_engine_api_t *api, ncomm_t *c);

static void pring_free(pring_t *r) {
  for (size_t i = 0; i < r->count; i++) (void)cudaEventDestroy(r->v[(r->head + i) % r->cap].ev);
  free(r->v);
  *r = (pring_t){0};
}

static cudaError_t ev_get(ncomm_t *c, cudaEvent_t *ev) {
  if (c->nevs) {
    *ev = c->evs[--c->nevs];
    return cudaSuccess;
  }
  return cudaEventCreateWithFlags(ev, cudaEventDisableTiming);
}

/* An event whose query succeeded, kept for the next operation. */
static void ev_put(ncomm_t *c, cudaEvent_t ev) {
  if (c->nevs == c->evcap) {
    size_t cap = c->evcap ? 2 * c->evcap : 16;
    cudaEvent_t *n = realloc(c->evs, cap * sizeof *n);
    if (!n) {
      (void)cudaEventDestroy(ev);
      return;
    }
    c->evs = n;
    c->evcap = cap;
  }
  c->evs[c->nevs++] = ev;
}

/* Every reply still owed is posted first (see "replies"). */
static void comm_remove(acxi_engine_t *e, const acxi_engine_api_t *api, ext_t *x, ncomm_t *c) {
  replies_drop(e, api, c);
  stats_log(c);
  sjob_abandon(c);
  capture_abandon(c);
  graphs_off(c);
  grave_free(c);
  if (c->cs) (void)cudaStreamDestroy(c->cs);
  if (c->chain_ev) (void)cudaEventDestroy(c->chain_ev);
  pring_free(&c->pq);
  pring_free(&c->rq);
  for (size_t i = 0; i < c->nevs; i++) (void)cudaEventDestroy(c->evs[i]);
  free(c->evs);
  if (c->ps) (void)cudaStreamDestroy(c->ps);
  for (int i = 0; i < x->n; i++)
    if (x->v[i] == c) {
      x->v[i] = x->v[--x->n];
      break;
    }
  free(c->q.v);
  free(c);
}

/* ------------------------------------------------------------------------------------------ */
/* graph cache                                                                                */
/*
 * Why: on a non-blocking communicator, NCCL (2.19 and later) runs every ncclGroupEnd -- and so
 * every single collective -- on a freshly created thread and answers ncclInProgress; no further
 * call may be made on the communicator until that thread has launched the kernel. Back-to-back
 * collectives are therefore serialized behind one thread creation and join each, 100-300 us on
 * the GPU host against NCCL's own ~10 us. A CUDA graph of the collective, captured once (that
 * capture takes the same slow path), is replayed with cudaGraphLaunch: no NCCL call, no thread,
 * nothing in progress, and the same kernel with the same arguments in the same stream order, so
 * the order of operations on the communicator is the command ring's as before. Failures fall back
 * to direct calls for the rest of the communicator's life.
 */

/* ------------------------------------------------------------------------------------------ */
/* kernel copies                                                                              */
/*
 * Why: a replay of the graph NCCL captured costs the executor 8-11 us per cudaGraphLaunch of an
 * 8-byte all-reduce on the GPU host, whether the graph holds NCCL's event nodes around the kernel
 * (NCCL_GRAPH_MIXING_SUPPORT=1, the default) or the kernel alone (=0); a graph holding a copy of
 * the same kernel node -- function, arguments, grid, launch attributes -- launches in 3.7 us and
 * completes an all-reduce every 5.6 us, against 6.2-10 us for raw NCCL's own direct calls
 * (acx-nccl-floor, docs/benchmark.md). The copy is what the executor replays when the captured
 * graph is that one kernel with at most NCCL's event wait and record around it; a graph with
 * anything else (the host node that drives NCCL's proxy on the network transport, several
 * kernels) is replayed whole.
 * What the event nodes did -- order the graph after the communicator's earlier work and later work
 * after it -- the executor does already: every operation of a communicator goes to its stream in
 * the command ring's order, chained across streams (chain()), and NCCL's direct calls wait for
 * the stream they are issued on.
 * Lifetime: NCCL ties the device memory of a captured operation to the captured graph (a CUDA
 * user object) and frees it once the graph and the executables made from it are gone and their
 * launches have finished. The copies are made from another graph and do not hold it, so the
 * captured graph is kept with the entry, and when the entry goes it waits in the communicator's
 * "grave" until an event recorded after the last copy launched has completed. A communicator is
 * finalized only once its grave is empty; an aborted one empties it at once (NCCL's abort ends
 * the kernels first). ACX_COLL_GRAPH_COPY=0 replays NCCL's graphs whole.
 */

typedef struct grave {
  cudaGraph_t g;
  cudaEvent_t ev; /* NULL: nothing of it was launched, or no event could be had: destroyed at once */
} grave_t;

typedef struct drvapi {
  CUresult (*KernelNodeGetParams)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS *);
  CUresult (*AddKernelNode)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, const CUDA_KERNEL_NODE_PARAMS *);
  CUresult (*KernelNodeGetAttribute)(CUgraphNode, CUkernelNodeAttrID, CUkernelNodeAttrValue *);
  CUresult (*KernelNodeSetAttribute)(CUgraphNode, CUkernelNodeAttrID, const CUkernelNodeAttrValue *);
} drvapi_t;

static drvapi_t drv;
static int drv_ok;
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

static void drv_load(void) {
  int bad = 0;
  bad |= acxk_driver_entry("cuGraphKernelNodeGetParams", 12000, (void **)&drv.KernelNodeGetParams);
  bad |= acxk_driver_entry("cuGraphAddKernelNode", 12000, (void **)&drv.AddKernelNode);
  bad |= acxk_driver_entry("cuGraphKernelNodeGetAttribute", 11000, (void **)&drv.KernelNodeGetAttribute);
  bad |= acxk_driver_entry("cuGraphKernelNodeSetAttribute", 11000, (void **)&drv.KernelNodeSetAttribute);
  drv_ok = !bad;
  if (bad)
    ACX_INFO(COLL, "the CUDA driver lacks the graph node calls kernel copies need: NCCL's graphs are replayed whole");
}

/* A graph holding only a copy of `graph`'s kernel node, launch attributes included, when `graph`
 * is one kernel node with at most event wait and record nodes besides; NULL otherwise. */
static cudaGraph_t kernel_copy(uint64_t id, cudaGraph_t graph) {
  pthread_once(&drv_once, drv_load);
  if (!drv_ok) return NULL;
  cudaGraphNode_t nv[4], kn = NULL;
  size_t nn = 4;
  if (cudaGraphGetNodes(graph, nv, &nn) != cudaSuccess || nn > 3) goto none;
  for (size_t i = 0; i < nn; i++) {
    enum cudaGraphNodeType t;
    if (cudaGraphNodeGetType(nv[i], &t) != cudaSuccess) goto none;
    if (t == cudaGraphNodeTypeKernel) {
      if (kn) goto none;
      kn = nv[i];
    } else if (t != cudaGraphNodeTypeWaitEvent && t != cudaGraphNodeTypeEventRecord) {
      goto none;
    }
  }
  if (!kn) goto none;
  CUDA_KERNEL_NODE_PARAMS kp;
  memset(&kp, 0, sizeof kp);
  cudaGraph_t copy = NULL;
  CUgraphNode node;
  if (drv.KernelNodeGetParams((CUgraphNode)kn, &kp) != CUDA_SUCCESS || cudaGraphCreate(&copy, 0) != cudaSuccess ||
      drv.AddKernelNode(&node, (CUgraph)copy, NULL, 0, &kp) != CUDA_SUCCESS) {
    ACX_INFO(COLL, "communicator %" PRIu64 ": NCCL's kernel node could not be copied; its graphs are replayed whole",
             id);
    if (copy) (void)cudaGraphDestroy(copy);
    goto none;
  }
  /* Launch attributes (cluster shape, memory synchronization domain ...): those NCCL set. */
  for (int a = 1; a <= 16; a++) {
    CUkernelNodeAttrValue want, have;
    memset(&want, 0, sizeof want);
    memset(&have, 0, sizeof have);
    if (drv.KernelNodeGetAttribute((CUgraphNode)kn, (CUkernelNodeAttrID)a, &want) != CUDA_SUCCESS ||
        drv.KernelNodeGetAttribute(node, (CUkernelNodeAttrID)a, &have) != CUDA_SUCCESS ||
        memcmp(&want, &have, sizeof want) == 0)
      continue;
    if (drv.KernelNodeSetAttribute(node, (CUkernelNodeAttrID)a, &want) != CUDA_SUCCESS) {
      ACX_INFO(COLL, "communicator %" PRIu64 ": launch attribute %d of NCCL's kernel node could not be copied; its "
               "graphs are replayed whole", id, a);
      (void)cudaGraphDestroy(copy);
      goto none;
    }
  }
  (void)cudaGetLastError();
  return copy;
none:
  (void)cudaGetLastError();
  return NULL;
}

/* Destroys the captured graphs whose copies have finished (all of them with force). */
static int grave_reap(ncomm_t *c, int force) {
  size_t k = 0;
  int n = 0;
  for (size_t i = 0; i < c->gn; i++) {
    grave_t *t = &c->gv[i];
    cudaError_t q = force || !t->ev ? cudaSuccess : cudaEventQuery(t->ev);
    if (q == cudaErrorNotReady) {
      c->gv[k++] = *t;
      continue;
    }
    (void)cudaGetLastError(); /* another error: the context is gone, nothing runs any more */
    if (t->ev) (void)cudaEventDestroy(t->ev);
    (void)cudaGraphDestroy(t->g);
    n++;
  }
  c->gn = k;
  return n;
}

/* The captured graph of an entry that goes: destroyed once the copies launched so far are done. */
static void grave_add(ncomm_t *c, cudaGraph_t g) {
  grave_t t = {.g = g};
  if (c->copy_s && cudaEventCreateWithFlags(&t.ev, cudaEventDisableTiming) == cudaSuccess &&
      cudaEventRecord(t.ev, c->copy_s) != cudaSuccess) {
    (void)cudaEventDestroy(t.ev);
    t.ev = NULL;
  }
  (void)cudaGetLastError();
  if (t.ev && c->gn == c->gvcap) {
    size_t cap = c->gvcap ? 2 * c->gvcap : 8;
    grave_t *v = realloc(c->gv, cap * sizeof *v);
    if (v) c->gv = v, c->gvcap = cap;
  }
  if (!t.ev || c->gn == c->gvcap) {
    /* Nothing launched, or nothing can tell when the copies finish (the context is lost, or the
     * host is out of memory): destroying it now is all that is left. */
    if (t.ev) (void)cudaEventDestroy(t.ev);
    (void)cudaGraphDestroy(g);
    return;
  }
  c->gv[c->gn++] = t;
}

static void grave_free(ncomm_t *c) {
  grave_reap(c, 1);
  free(c->gv);
  c->gv = NULL;
  c->gvcap = 0;
}

/* Destroying a graph that is still running is allowed: CUDA releases it once done. Kernel copies
 * do not hold their captured graph: it goes to the grave. */
static void gentry_clear(ncomm_t *c, gentry_t *g) {
  for (int k = 0; k < g->nexec; k++) (void)cudaGraphExecDestroy(g->exec[k]);
  if (g->orig) grave_add(c, g->orig);
  *g = (gentry_t){0};
}

static void graphs_clear(ncomm_t *c) {
  for (int i = 0; c->gc && i < c->gcap; i++) gentry_clear(c, &c->gc[i]);
}

static void graphs_off(ncomm_t *c) {
  graphs_clear(c);
  free(c->gc);
  c->gc = NULL;
  c->gcap = 0;
}

static int graph_eligible(const ncomm_t *c, uint32_t op) {
  /* Point-to-point operations keep the direct path: their connections are made lazily per peer. */
  return c->gcap > 0 && (op == ACXC_OP_ALLREDUCE || op == ACXC_OP_BROADCAST || op == ACXC_OP_REDUCE ||
                         op == ACXC_OP_ALLGATHER || op == ACXC_OP_REDUCE_SCATTER);
}

/* The entry of `k`, counted as seen once more; a new entry (replacing the least recently used)
 * when there is none. */
static gentry_t *graph_find(ncomm_t *c, const gkey_t *k) {
  if (!c->gc) {
    c->gc = calloc((size_t)c->gcap, sizeof *c->gc);
    if (!c->gc) {
      ACX_WARN(COLL, "communicator %" PRIu64 ": out of host memory for the graph cache; it stays off", c->id);
      c->gcap = 0;
      return NULL;
    }
  }
  gentry_t *victim = &c->gc[0];
  for (int i = 0; i < c->gcap; i++) {
    gentry_t *g = &c->gc[i];
    if (g->valid && memcmp(&g->key, k, sizeof *k) == 0) {
      g->used = ++c->gclock;
      if (g->seen < UINT32_MAX) g->seen++;
      return g;
    }
    if (!g->valid) victim = g;
    else if (victim->valid && g->used < victim->used) victim = g;
  }
  gentry_clear(c, victim);
  *victim = (gentry_t){.key = *k, .used = ++c->gclock, .seen = 1, .valid = 1};
  return victim;
}

/* Puts the private capture stream into (relaxed) capture mode: relaxed, because the executor and
 * NCCL's own threads go on making unrelated CUDA calls while NCCL finishes in the background. */
static int capture_begin(ncomm_t *c) {
  cudaError_t err = cudaSuccess;
  if (!c->cs) err = cudaStreamCreateWithFlags(&c->cs, cudaStreamNonBlocking);
  if (err == cudaSuccess) err = cudaStreamBeginCapture(c->cs, cudaStreamCaptureModeRelaxed);
  if (err == cudaSuccess) return 1;
  ACX_WARN(COLL, "communicator %" PRIu64 ": cannot start a CUDA graph capture: %s (%d); collectives are issued "
           "directly from now on", c->id, cudaGetErrorString(err), (int)err);
  (void)cudaGetLastError();
  graphs_off(c);
  return 0;
}

/* Ends a capture that will not be used (NCCL failed, the communicator fails). */
static void capture_abandon(ncomm_t *c) {
  if (!c->capturing) return;
  cudaGraph_t g = NULL;
  if (cudaStreamEndCapture(c->cs, &g) == cudaSuccess && g) (void)cudaGraphDestroy(g);
  (void)cudaGetLastError();
  c->capturing = NULL;
}

/* NCCL has put the collective into the capture: instantiate it, keep it and launch it on s.
 * 0 when any step failed (nothing was launched then; the caller issues the collective directly). */
static int capture_finish(ncomm_t *c, cudaStream_t s) {
  gentry_t *g = c->capturing;
  c->capturing = NULL;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec[GRAPH_INSTANCES] = {NULL};
  int n = 0;
  size_t nodes = 0;
  cudaError_t err = cudaStreamEndCapture(c->cs, &graph);
  if (err == cudaSuccess && !graph) err = cudaErrorStreamCaptureInvalidated;
  if (err == cudaSuccess) err = cudaGraphGetNodes(graph, NULL, &nodes);
  /* What NCCL put into the graph (cudaGraphNodeType: 0 kernel, 1 memcpy, 2 memset, 3 host, 6 event
   * record, 7 event wait ...), for the first capture's log line. */
  char kinds[64] = "";
  if (err == cudaSuccess && !c->st.captures) {
    cudaGraphNode_t nv[8];
    size_t nn = 8, o = 0;
    if (cudaGraphGetNodes(graph, nv, &nn) == cudaSuccess)
      for (size_t i = 0; i < nn && i < 8 && o + 8 < sizeof kinds; i++) {
        enum cudaGraphNodeType t;
        if (cudaGraphNodeGetType(nv[i], &t) == cudaSuccess)
          o += (size_t)snprintf(kinds + o, sizeof kinds - o, "%s%d", i ? "," : "", (int)t);
      }
    (void)cudaGetLastError();
  }
  cudaGraph_t copy = err == cudaSuccess && c->copy_on ? kernel_copy(c->id, graph) : NULL;
  cudaGraph_t src = copy ? copy : graph;
  while (err == cudaSuccess && n < GRAPH_INSTANCES && (err = cudaGraphInstantiate(&exec[n], src, 0)) == cudaSuccess)
    n++;
  if (copy) (void)cudaGraphDestroy(copy); /* its executables keep what they need */
  if (n > 0 && err != cudaSuccess) { /* fewer instances: still a graph to replay */
    ACX_INFO(COLL, "communicator %" PRIu64 ": instance %d of a collective's graph: %s; keeping %d", c->id, n + 1,
             cudaGetErrorString(err), n);
    (void)cudaGetLastError();
    err = cudaSuccess;
  }
  /* The executables made from the captured graph keep what they need; copies do not. */
  if (graph && !(copy && n > 0)) (void)cudaGraphDestroy(graph);
  if (err == cudaSuccess) err = cudaGraphLaunch(exec[0], s);
  if (err != cudaSuccess) {
    if (copy && n > 0 && graph) (void)cudaGraphDestroy(graph); /* nothing of it was launched */
    ACX_WARN(COLL, "communicator %" PRIu64 ": capturing a collective into a CUDA graph failed: %s (%d); this "
             "communicator issues every collective directly from now on", c->id, cudaGetErrorString(err), (int)err);
    for (int k = 0; k < n; k++) (void)cudaGraphExecDestroy(exec[k]);
    (void)cudaGetLastError();
    c->st.capture_fails++;
    graphs_off(c);
    return 0;
  }
  memcpy(g->exec, exec, sizeof exec);
  g->nexec = n;
  g->next = 1 % n;
  if (copy) {
    g->orig = graph;
    c->copy_s = s;
    c->st.copies++;
  }
  if (!c->st.captures) {
    /* What NCCL put into the graph (kernel, event record/wait, host, memset ... nodes). */
    ACX_INFO(COLL, "communicator %" PRIu64 ": first collective captured: %zu graph nodes (types %s), %d instances, "
             "replayed %s", c->id, nodes, kinds, n, copy ? "as a copy of its kernel node" : "whole");
  }
  c->st.captures++;
  return 1;
}

static void stats_log(const ncomm_t *c) {
  const cstats_t *t = &c->st;
  if (!t->ops) return;
  struct rusage ru;
  long iv = -1, v = -1;
  if (getrusage(RUSAGE_THREAD, &ru) == 0) iv = ru.ru_nivcsw - t->nivcsw0, v = ru.ru_nvcsw - t->nvcsw0;
  ACX_INFO(COLL, "communicator %" PRIu64 ": %" PRIu64 " operations: %" PRIu64 " graph replays, %" PRIu64
           " captures (%" PRIu64 " failed, %" PRIu64 " replayed as kernel copies), %" PRIu64
           " direct NCCL calls; %" PRIu64 " calls returned ncclInProgress, waited %.1f us on average, %.1f us at "
           "most; a replay took %.2f us of the executor (%.2f us in cudaGraphLaunch); back-to-back operations "
           "started every %.2f us; executor thread: %ld involuntary and %ld voluntary context switches, cpu %d "
           "then %d", c->id, t->ops, t->replays, t->captures, t->capture_fails,
           t->copies, t->eager, t->in_progress,
           t->in_progress ? (double)t->wait_ns / (double)t->in_progress / 1e3 : 0.0,
           (double)t->wait_max_ns / 1e3, t->replays ? (double)t->replay_ns / (double)t->replays / 1e3 : 0.0,
           t->replays ? (double)t->launch_ns / (double)t->replays / 1e3 : 0.0,
           t->periods ? (double)t->period_ns / (double)t->periods / 1e3 : 0.0, iv, v, t->cpu0, sched_getcpu());
}

/* ------------------------------------------------------------------------------------------ */
/* aborts                                                                                     */
/*
 * ncclCommAbort takes about half a second on the GPU host whatever the communicator's state
 * (measured: 505-520 ms for collectives' communicators and two-rank channels alike), and a world
 * rebuild aborts several. On the executor thread that is half a second per communicator in which
 * nothing else is served, the rebuild's own ping and the new communicator's creation included. So
 * each abort runs on a thread of its own. Nothing of acx's waits for it: the kernels it stops
 * complete (with garbage) and their completions follow the abort's effect, as they would after a
 * synchronous abort; the engine's teardown waits for every abort thread.
 */
typedef struct abort_job {
  ncclComm_t comm;
  uint64_t id;
  int device;
  char why[96];
} abort_job_t;

static pthread_mutex_t aborts_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t aborts_cond = PTHREAD_COND_INITIALIZER;
static int aborts_running;

static void abort_now(ncclComm_t comm, uint64_t id, const char *why) {
  /* ncclCommAbort frees the communicator whatever it returns: never touch it again. */
  int64_t t0 = acxi_now_ns();
  ncclResult_t r = ncclCommAbort(comm);
  int64_t took = acxi_now_ns() - t0;
  if (r != ncclSuccess && r != ncclInProgress)
    ACX_WARN(COLL, "communicator %" PRIu64 ": ncclCommAbort (%s) returned %s (%d) after %.0f ms", id, why,
             ncclGetErrorString(r), (int)r, took / 1e6);
  else
    ACX_INFO(COLL, "communicator %" PRIu64 " aborted (%s) in %.0f ms", id, why, took / 1e6);
}

static void *abort_main(void *arg) {
  abort_job_t *j = arg;
  if (cudaSetDevice(j->device) != cudaSuccess) (void)cudaGetLastError(); /* NCCL sets the comm's own too */
  abort_now(j->comm, j->id, j->why);
  pthread_mutex_lock(&aborts_lock);
  aborts_running--;
  pthread_cond_broadcast(&aborts_cond);
  pthread_mutex_unlock(&aborts_lock);
  free(j);
  return NULL;
}

/* Starts ncclCommAbort(comm) on a detached thread; on the calling thread when none can start. */
static void abort_async(ncclComm_t comm, uint64_t id, const char *why) {
  abort_job_t *j = calloc(1, sizeof *j);
  int dev = 0;
  if (j && cudaGetDevice(&dev) == cudaSuccess) {
    *j = (abort_job_t){.comm = comm, .id = id, .device = dev};
    snprintf(j->why, sizeof j->why, "%s", why);
    pthread_attr_t at;
    pthread_t t;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_mutex_lock(&aborts_lock);
    aborts_running++;
    int rc = pthread_create(&t, &at, abort_main, j);
    if (rc != 0) aborts_running--;
    pthread_mutex_unlock(&aborts_lock);
    pthread_attr_destroy(&at);
    if (rc == 0) return;
    ACX_WARN(COLL, "communicator %" PRIu64 ": no thread for its abort (%s): aborting on the executor thread", id,
             strerror(rc));
  }
  (void)cudaGetLastError();
  free(j);
  abort_now(comm, id, why);
}

/* Waits (up to deadline) for the abort threads to finish. */
static void aborts_wait(int64_t deadline_ns) {
  pthread_mutex_lock(&aborts_lock);
  while (aborts_running > 0 && acxi_now_ns() < deadline_ns) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 10000000;
    if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
    pthread_cond_timedwait(&aborts_cond, &aborts_lock, &ts);
  }
  int left = aborts_running;
  pthread_mutex_unlock(&aborts_lock);
  if (left) ACX_WARN(COLL, "%d ncclCommAbort call(s) still running at the engine's teardown", left);
}

/* ------------------------------------------------------------------------------------------ */
/* blocking communicators                                                                     */
/*
 * Why: on NCCL's network transport (between nodes, or P2P and SHM disabled) a captured collective
 * holds a host node that drives NCCL's proxy, so it can be neither copied nor replayed fast, and a
 * non-blocking communicator's direct calls each wait for a thread NCCL creates (docs/collectives.md,
 * "The network path", has the numbers). A blocking communicator's direct call enqueues the kernel
 * and returns, as raw NCCL does. What blocking costs is that a call can block: init and finalize
 * (which wait for every peer) therefore run on side threads here, and the collectives themselves
 * are issued from the executor thread, which waits only for the enqueue. If a peer dies in a way
 * that makes an enqueue block (a connection being set up), the executor thread stops making
 * progress; the rank's supervisor restarts an executor whose loop is stuck past the deadline of
 * every request it holds (docs/fault-model.md), which ends the call with the process: killing the
 * executor is this path's abort.
 * A side job is shared by its thread and the communicator; whoever ends second frees it: the
 * thread moves state RUNNING -> DONE, the communicator RUNNING -> ABANDONED when it stops waiting
 * (deadline, abort, teardown), and then the thread cleans up what it made.
 */

typedef enum { SJ_RUNNING = 0, SJ_DONE = 1, SJ_ABANDONED = 2 } sjob_state_t;

typedef struct sjob {
  int init; /* 1: ncclCommInitRankConfig (blocking); 0: ncclCommFinalize + ncclCommDestroy */
  uint64_t id;
  int device, nranks, rank;
  ncclUniqueId uid;
  ncclComm_t comm; /* finalize: the communicator (owned by the job); init: the result */
  ncclResult_t r;
  _Atomic int state; /* sjob_state_t */
} sjob_t;

static void side_done(void) {
  pthread_mutex_lock(&aborts_lock);
  aborts_running--;
  pthread_cond_broadcast(&aborts_cond);
  pthread_mutex_unlock(&aborts_lock);
}

static void *sjob_main(void *arg) {
  sjob_t *j = arg;
  if (cudaSetDevice(j->device) != cudaSuccess) (void)cudaGetLastError();
  if (j->init) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 1;
    config.commName = "acx";
    j->r = ncclCommInitRankConfig(&j->comm, j->nranks, j->uid, j->rank, &config);
    if (j->r != ncclSuccess) j->comm = NULL;
  } else {
    j->r = ncclCommFinalize(j->comm);
    if (j->r == ncclSuccess) {
      j->r = ncclCommDestroy(j->comm);
    } else {
      ACX_WARN(COLL, "communicator %" PRIu64 ": ncclCommFinalize: %s (%d): %s", j->id, ncclGetErrorString(j->r),
               (int)j->r, ncclGetLastError(j->comm));
      abort_now(j->comm, j->id, "finalize failed");
    }
    j->comm = NULL;
  }
  /* acq_rel: our results are visible to the communicator that sees DONE; its ABANDONED to us. */
  if (atomic_exchange_explicit(&j->state, SJ_DONE, memory_order_acq_rel) == SJ_ABANDONED) {
    if (j->comm) abort_now(j->comm, j->id, "created after its init was abandoned");
    free(j);
  }
  side_done();
  return NULL;
}

/* Starts j on a detached thread (counted with the aborts, which the teardown waits for). */
static int sjob_start(sjob_t *j) {
  if (cudaGetDevice(&j->device) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  pthread_attr_t at;
  pthread_t t;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  pthread_mutex_lock(&aborts_lock);
  aborts_running++;
  int rc = pthread_create(&t, &at, sjob_main, j);
  if (rc != 0) aborts_running--;
  pthread_mutex_unlock(&aborts_lock);
  pthread_attr_destroy(&at);
  if (rc != 0) ACX_WARN(COLL, "communicator %" PRIu64 ": no thread for its %s: %s", j->id,
                        j->init ? "init" : "finalize", strerror(rc));
  return rc == 0 ? 0 : -1;
}

/* The communicator stops waiting for its side job. A finished init's communicator is aborted; a
 * running job cleans up after itself when it returns. */
static void sjob_abandon(ncomm_t *c) {
  sjob_t *j = c->job;
  if (!j) return;
  c->job = NULL;
  /* acq_rel: as in sjob_main. */
  if (atomic_exchange_explicit(&j->state, SJ_ABANDONED, memory_order_acq_rel) != SJ_DONE) return;
  if (j->comm) abort_async(j->comm, c->id, "init abandoned");
  free(j);
}

/* The side job's result once it is done (1), else 0. The job is freed; *comm receives an init's
 * communicator. */
static int sjob_take(ncomm_t *c, ncclResult_t *r, ncclComm_t *comm) {
  sjob_t *j = c->job;
  /* acquire: pairs with sjob_main's exchange; r and comm are complete. */
  if (atomic_load_explicit(&j->state, memory_order_acquire) != SJ_DONE) return 0;
  *r = j->r;
  if (comm) *comm = j->comm;
  c->job = NULL;
  free(j);
  return 1;
}

static void do_abort(ncomm_t *c, const char *why) {
  sjob_abandon(c);
  /* Graphs hold NCCL plans that point into the communicator: they go first. */
  capture_abandon(c);
  graphs_clear(c);
  grave_reap(c, 1); /* the abort ends the kernels they hold memory for */
  if (!c->comm) return;
  ncclComm_t comm = c->comm;
  c->comm = NULL;
  abort_async(comm, c->id, why);
}

/* The communicator cannot go on: everything waiting on it fails with st. abort_now 0 keeps the
 * NCCL communicator until the rank's ABORT (or the grace period): an asynchronous error leaves the
 * kernels in flight hanging, and aborting them here would let their completions report success
 * before the rank has heard of the error. */
static void comm_fail(acxi_engine_t *e, const acxi_engine_api_t *api, ncomm_t *c, acx_status_t st, int code,
                      int abort_now, const char *why) {
  if (c->state != C_FAILED) {
    ACX_WARN(COLL, "communicator %" PRIu64 " (rank %d of %d) fails: %s: %s; %zu queued commands fail with it",
             c->id, c->rank, c->nranks, why, acx_status_name(st), c->q.count);
    cstate_t was = c->state;
    c->state = C_FAILED;
    c->fail_status = st;
    c->fail_code = code;
    c->failed_at_ns = acxi_now_ns();
    if (was == C_INIT || was == C_FINALIZING) finish(e, api, &c->init_cmd, st, code, 0, 0);
    if (was == C_ISSUING) {
      capture_abandon(c);
      finish(e, api, &c->issuing, st, code, 0, 0);
    }
    while (c->q.count) {
      acxi_cmd_t q = cmdq_pop(&c->q);
      finish(e, api, &q, st, code, 0, 0);
    }
  }
  if (abort_now) do_abort(c, why);
  /* Private stream: what is in flight fails with the communicator once its kernel has left (the
   * abort makes it leave; without one, the rank's ABORT or the grace period follows): the rank
   * may free the buffer as soon as it hears, and nothing of the engine orders a free after these
   * kernels. private_poll reports them. */
}

/* ------------------------------------------------------------------------------------------ */
/* launching                                                                                  */

typedef struct desc {
  uint32_t op, dtype, redop;
  int peer;
  uint64_t send, recv, count;
  uint64_t soff, roff; /* SEND/RECV, ALLREDUCE: byte offsets into the buffers (0 for every other operation) */
} desc_t;

/* Resolves buffer `id` and checks it holds `elems` elements from byte `off` on; *p = that address. */
static acx_status_t resolve_at(acxi_engine_t *e, const acxi_engine_api_t *api, ncomm_t *c, uint64_t id, uint64_t off,
                               uint64_t elems, size_t es, const char *what, char **p) {
  void *ptr;
  uint64_t bytes;
  if (id == 0) {
    ACX_WARN(COLL, "communicator %" PRIu64 ": %s buffer missing", c->id, what);
    return ACX_ERR_INVALID_ARG;
  }
  ACXCHECK(api->buffer(e, id, &ptr, &bytes));
  if (off > bytes || elems > (bytes - off) / es) {
    ACX_WARN(COLL, "communicator %" PRIu64 ": %s buffer %" PRIu64 " holds %" PRIu64 " bytes, the operation needs %"
             PRIu64 " elements of %zu bytes from offset %" PRIu64, c->id, what, id, bytes, elems, es, off);
    return ACX_ERR_OUT_OF_RANGE;
  }
  *p = (char *)ptr + off;
  return ACX_OK;
}

static acx_status_t resolve(acxi_engine_t *e, const acxi_engine_api_t *api, ncomm_t *c, uint64_t id,
                            uint64_t elems, size_t es, const char *what, char **p) {
  return resolve_at(e, api, c, id, 0, elems, es, what, p);
}

/* Orders `stream` after earlier writers of the buffers and records this operation's accesses
 * (the engine records their events after the NCCL call is in the stream). */
static void order(acxi_engine_t *e, const acxi_engine_api_t *api, const desc_t *d, uint32_t stream) {
  if (d->send && d->send != d->recv) api->order_access(e, d->send, stream, 0);
  if (d->recv) api->order_access(e, d->recv, stream, 1);
}

/* One operation, validated and resolved: the NCCL call's arguments and the buffer accesses it
 * makes (acc: send read, recv written; 0 where not accessed). */
typedef struct plan {
  desc_t d, acc;
  char *sp, *rp;
  ncclDataType_t t;
  ncclRedOp_t op;
  size_t es;
} plan_t;

/* Checks d against the communicator and resolves its buffers. Nothing is issued. */
static acx_status_t plan_op(acxi_engine_t *e, const acxi_engine_api_t *api, ncomm_t *c, const desc_t *d, plan_t *p) {
  *p = (plan_t){.d = *d};
  if (d->dtype >= ACX_DTYPE_COUNT) {
    ACX_WARN(COLL, "communicator %" PRIu64 ": dtype %u is unknown", c->id, d->dtype);
    return ACX_ERR_BAD_DTYPE;
  }
  int reduces = d->op == ACXC_OP_ALLREDUCE || d->op == ACXC_OP_REDUCE || d->op == ACXC_OP_REDUCE_SCATTER;
  if (reduces && (d->redop >= N_REDOPS || d->dtype == ACX_DTYPE_BYTE)) {
    ACX_WARN(COLL, "communicator %" PRIu64 ": reduction %u on dtype %u is not supported", c->id, d->redop, d->dtype);
    return ACX_ERR_INVALID_ARG;
  }
  size_t es = acx_dtype_size((acx_dtype_t)d->dtype);
  p->es = es;
  p->t = nccl_types[d->dtype];
  p->op = reduces ? nccl_ops[d->redop] : ncclSum;
  uint64_t n = (uint64_t)c->nranks, cnt = d->count;
  int root_here = d->peer == c->rank;
  if (d->peer < 0 || d->peer >= c->nranks) {
    if (d->op == ACXC_OP_BROADCAST || d->op == ACXC_OP_REDUCE || d->op == ACXC_OP_SEND || d->op == ACXC_OP_RECV) {
      ACX_WARN(COLL, "communicator %" PRIu64 ": root/peer %d is not a rank of [0, %d)", c->id, d->peer, c->nranks);
      return ACX_ERR_INVALID_ARG;
    }
  }
  p->acc = (desc_t){.send = d->send, .recv = d->recv};
  switch (d->op) {
  case ACXC_OP_ALLREDUCE:
    ACXCHECK(resolve_at(e, api, c, d->send, d->soff, cnt, es, "send", &p->sp));
    return resolve_at(e, api, c, d->recv, d->roff, cnt, es, "recv", &p->rp);
  case ACXC_OP_BROADCAST:
    ACXCHECK(resolve(e, api, c, d->recv, cnt, es, "recv", &p->rp));
    if (root_here && d->send) ACXCHECK(resolve(e, api, c, d->send, cnt, es, "send", &p->sp));
    if (!p->sp) p->sp = p->rp;
    return ACX_OK;
  case ACXC_OP_REDUCE:
    ACXCHECK(resolve(e, api, c, d->send, cnt, es, "send", &p->sp));
    if (root_here) return resolve(e, api, c, d->recv, cnt, es, "recv", &p->rp);
    p->acc.recv = 0;
    return ACX_OK;
  case ACXC_OP_ALLGATHER:
    ACXCHECK(resolve(e, api, c, d->recv, cnt * n, es, "recv", &p->rp));
    if (d->send == d->recv) p->sp = p->rp + (size_t)c->rank * cnt * es; /* NCCL's in-place convention */
    else return resolve(e, api, c, d->send, cnt, es, "send", &p->sp);
    return ACX_OK;
  case ACXC_OP_REDUCE_SCATTER:
    ACXCHECK(resolve(e, api, c, d->send, cnt * n, es, "send", &p->sp));
    if (d->send == d->recv) p->rp = p->sp + (size_t)c->rank * cnt * es;
    else return resolve(e, api, c, d->recv, cnt, es, "recv", &p->rp);
    return ACX_OK;
  case ACXC_OP_SEND:
    p->acc.recv = 0;
    return resolve_at(e, api, c, d->send, d->soff, cnt, es, "send", &p->sp);
  case ACXC_OP_RECV:
    p->acc.send = 0;
    return resolve_at(e, api, c, d->recv, d->roff, cnt, es, "recv", &p->rp);
  case ACXC_OP_ALLTOALL:
    ACXCHECK(resolve(e, api, c, d->send, cnt * n, es, "send", &p->sp));
    ACXCHECK(resolve(e, api, c, d->recv, cnt * n, es, "recv", &p->rp));
    if (d->send == d->recv) {
      ACX_WARN(COLL, "communicator %" PRIu64 ": all-to-all cannot run in place", c->id);
      return ACX_ERR_INVALID_ARG;
    }
    return ACX_OK;
  default:
    ACX_WARN(COLL, "communicator %" PRIu64 ": op %#x is not a collective", c->id, d->op);
    return ACX_ERR_INVALID_ARG;
  }
}

/* The NCCL call of a planned operation, into stream s. */
static ncclResult_t nccl_call(ncomm_t *c, const plan_t *p, cudaStream_t s) {
  size_t cnt = p->d.count;
  switch (p->d.op) {
  case ACXC_OP_ALLREDUCE: return ncclAllReduce(p->sp, p->rp, cnt, p->t, p->op, c->comm, s);
  case ACXC_OP_BROADCAST: return ncclBroadcast(p->sp, p->rp, cnt, p->t, p->d.peer, c->comm, s);
  case ACXC_OP_REDUCE: return ncclReduce(p->sp, p->rp, cnt, p->t, p->op, p->d.peer, c->comm, s);
  case ACXC_OP_ALLGATHER: return ncclAllGather(p->sp, p->rp, cnt, p->t, c->comm, s);
  case ACXC_OP_REDUCE_SCATTER: return ncclReduceScatter(p->sp, p->rp, cnt, p->t, p->op, c->comm, s);
  case ACXC_OP_SEND: return ncclSend(p->sp, cnt, p->t, p->d.peer, c->comm, s);
  case ACXC_OP_RECV: return ncclRecv(p->rp, cnt, p->t, p->d.peer, c->comm, s);
  case ACXC_OP_ALLTOALL: {
    /* Nested inside an acx group this is one more level: NCCL counts group depth. */
    ncclResult_t g = ncclGroupStart(), x = ncclSuccess;
    if (g != ncclSuccess) return g;
    for (int q = 0; q < c->nranks && x == ncclSuccess; q++) {
      x = ncclSend(p->sp + (size_t)q * cnt * p->es, cnt, p->t, q, c->comm, s);
      if (x == ncclSuccess) x = ncclRecv(p->rp + (size_t)q * cnt * p->es, cnt, p->t, q, c->comm, s);
    }
    g = ncclGroupEnd(); /* always closes the group, also after a failed member */
    return x != ncclSuccess && x != ncclInProgress ? x : g;
  }
  default:
    return ncclInvalidArgument; /* plan_op refused it already */
  }
}

/* Issues one operation of a group. *r is NCCL's result; the return value is a validation failure
 * (nothing issued). */
static acx_status_t launch(acxi_engine_t *e, const acxi_engine_api_t *api, ncomm_t *c, const desc_t *d,
                           uint32_t stream, cudaStream_t s, ncclResult_t *r) {
  *r = ncclSuccess;
  plan_t p;
  ACXCHECK(plan_op(e, api, c, d, &p));
  order(e, api, &p.acc, stream);
  *r = nccl_call(c, &p, s);
  return ACX_OK;
}

static desc_t desc_of(const acxi_cmd_t *cmd) {
  int offsets = cmd->op == ACXC_OP_SEND || cmd->op == ACXC_OP_RECV || cmd->op == ACXC_OP_ALLREDUCE;
  return (desc_t){.op = cmd->op, .dtype = cmd->dtype, .redop = (uint32_t)cmd->arg[1], .peer = (int)(int64_t)cmd->arg[2],
                  .send = cmd->buf[0], .recv = cmd->buf[1], .count = cmd->bytes,
                  .soff = offsets ? cmd->off[0] : 0, .roff = offsets ? cmd->off[1] : 0};
}

/* The accesses of a command once more, after NCCL has really enqueued it (ncclInProgress case). */
static void reorder(acxi_engine_t *e, const acxi_engine_api_t *api, ncomm_t *c, const acxi_cmd_t *cmd) {
  if (cmd->op != ACXC_OP_GROUP) {
    desc_t d = desc_of(cmd);
    if (d.op == ACXC_OP_SEND) d.recv = 0;
    if (d.op == ACXC_OP_RECV) d.send = 0;
    if (d.op == ACXC_OP_REDUCE && d.peer != c->rank) d.recv = 0;
    order(e, api, &d, cmd->stream);
    return;
  }
  void *base;
  uint64_t bytes;
  if (api->host_region(e, cmd->arg[3], &base, &bytes) != ACX_OK) return;
  const acxc_group_entry_t *g = (const acxc_group_entry_t *)((char *)base + cmd->off[0]);
  for (uint64_t i = 0; i < cmd->bytes; i++) {
    desc_t d = {.op = g[i].op, .send = g[i].send, .recv = g[i].recv};
    if (d.op == ACXC_OP_SEND) d.recv = 0;
    if (d.op == ACXC_OP_RECV) d.send = 0;
    if (d.op == ACXC_OP_REDUCE && g[i].peer != c->rank) d.recv = 0;
    order(e, api, &d, cmd->stream);
  }
}

/* ------------------------------------------------------------------------------------------ */
/* replies                                                                                    */
/*
 * Why: a kernel can leave without having done its work. ncclCommAbort ends the kernels of the
 * communicator it aborts, and they leave with whatever their buffers hold (garbage: partial sums,
 * NCCL's LL lines). The engine's completion (complete_after) posts success once the stream has
 * passed the operation, whatever became of the communicator. The rank fails its waiting
 * operations before it asks for an abort, but the executor also aborts on its own (an operation
 * that NCCL or the validation here refused, a point-to-point deadline, a destroy or finalize
 * deadline, the grace period after an asynchronous error), and the operations in flight before
 * such an abort reported success with garbage in their buffers. So an operation that wants a
 * reply gets an event of its own, after it in its stream; the events are polled in order (the
 * communicator's operations are ordered across streams: chain), and an operation whose
 * communicator had failed when its completion was seen reports the communicator's failure. The
 * engine still gets a completion without reply after the operation, so that it records the
 * operation's buffer accesses before it and counts it in flight.
 *
 * A fire-and-forget collective gets no completion record: its success is never posted anyway, a
 * failure on the GPU surfaces on the next operation that is waited for (one with a future, a FENCE)
 * or as the communicator's asynchronous error, and tracking each one would cost an event record
 * and event queries per operation -- executor time that back-to-back small collectives cannot
 * spare.
 */
static void complete_op(acxi_engine_t *e, const acxi_engine_api_t *api, ncomm_t *c, const acxi_cmd_t *cmd) {
  if (cmd->flags & ACXI_CMD_FLAG_NO_REPLY) return;
  cudaEvent_t ev = NULL;
  cudaError_t err = ev_get(c, &ev);
  if (err == cudaSuccess) err = cudaEventRecord(ev, (cudaStream_t)api->stream(e, cmd->stream));
  pend_t p = {.cmd = *cmd, .ev = ev};
  if (err != cudaSuccess || pring_push(&c->rq, &p) != 0) {
    /* The engine's own completion then: success once the stream has passed it. */
    ACX_WARN(COLL, "communicator %" PRIu64 ": cannot track request %" PRIu64 "'s completion (%s); it completes with "
             "its stream", c->id, cmd->req_id, err != cudaSuccess ? cudaGetErrorString(err) : "out of host memory");
    if (err != cudaSuccess) (void)cudaGetLastError();
    if (ev) (void)cudaEventDestroy(ev);
    api->complete_after(e, cmd->stream, cmd);
    return;
  }
  acxi_cmd_t shadow = *cmd;
  shadow.flags |= ACXI_CMD_FLAG_NO_REPLY;
  api->complete_after(e, cmd->stream, &shadow);
}

static void reply(acxi_engine_t *e, const acxi_engine_api_t *api, ncomm_t *c, const pend_t *pd, cudaError_t err) {
  acx_status_t st = ACX_OK;
  int code = 0;
  if (err != cudaSuccess) {
    /* A sticky error: the engine's completion of the shadow reports the lost device too. */
    ACX_WARN(COLL, "communicator %" PRIu64 ": request %" PRIu64 " (op %#x) failed on the GPU: %s (%d)", c->id,
             pd->cmd.req_id, pd->cmd.op, cudaGetErrorString(err), (int)err);
    st = ACX_ERR_DEVICE;
    code = (int)err;
  } else if (c->state == C_FAILED) {
    st = c->fail_status;
    code = c->fail_code;
    ACX_INFO(COLL, "communicator %" PRIu64 ": request %" PRIu64 " (op %#x) left its stream after the communicator "
             "failed: reported %s, not success", c->id, pd->cmd.req_id, pd->cmd.op, acx_status_name(st));
  }
  finish(e, api, &pd->cmd, st, code, 0, 0);
}

/* Posts the replies whose operations have left their streams, in order. Returns nonzero while any
 * is owed, so that the executor loop keeps polling. */
static int replies_poll(acxi_engine_t *e, const acxi_engine_api_t *api, ncomm_t *c) {
  int n = 0;
  while (c->rq.count) {
    cudaError_t err = cudaEventQuery(c->rq.v[c->rq.head].ev);
    if (err == cudaErrorNotReady) return n + 1;
    pend_t pd = pring_pop(&c->rq);
    if (err == cudaSuccess) {
      ev_put(c, pd.ev);
    } else {
      (void)cudaGetLastError();
      (void)cudaEventDestroy(pd.ev);
    }
    reply(e, api, c, &pd, err);
    n++;
  }
  return n;
}

/* The communicator goes: the replies still owed are posted now, those whose operations have not
 * left their streams as failed (the communicator's failure, else ACX_ERR_CANCELLED). */
static void replies_drop(acxi_engine_t *e, const acxi_engine_api_t *api, ncomm_t *c) {
  (void)replies_poll(e, api, c);
  while (c->rq.count) {
    pend_t pd = pring_pop(&c->rq);
    (void)cudaEventDestroy(pd.ev);
    acx_status_t st = c->state == C_FAILED ? c->fail_status : ACX_ERR_CANCELLED;
    ACX_WARN(COLL, "communicator %" PRIu64 " goes while request %" PRIu64 " (op %#x) is still in its stream: "
             "reported %s", c->id, pd.cmd.req_id, pd.cmd.op, acx_status_name(st));
    finish(e, api, &pd.cmd, st, c->state == C_FAILED ? c->fail_code : 0, 0, 0);
  }
}

/* Makes stream s (index idx) wait for the communicator's previous collective when that one went
 * to another stream. */
static void chain(ncomm_t *c, const acxi_engine_api_t *api, acxi_engine_t *e, uint32_t idx, cudaStream_t s) {
  int prev = c->last_stream;
  c->last_stream = (int)idx;
  if (prev < 0 || prev == (int)idx) return;
  cudaStream_t p = (cudaStream_t)api->stream(e, (uint32_t)prev);
  cudaError_t err = cudaSuccess;
  if (!c->chain_ev) err = cudaEventCreateWithFlags(&c->chain_ev, cudaEventDisableTiming);
  if (err == cudaSuccess && p) err = cudaEventRecord(c->chain_ev, p);
  if (err == cudaSuccess && p) err = cudaStreamWaitEvent(s, c->chain_ev, 0);
  if (err != cudaSuccess) {
    /* The call that fails here fails again on the operation itself, which reports it. */
    ACX_WARN(COLL, "communicator %" PRIu64 ": ordering stream %u after stream %d: %s (%d)", c->id, idx, prev,
             cudaGetErrorString(err), (int)err);
    (void)cudaGetLastError();
  }
}

/* ------------------------------------------------------------------------------------------ */
/* private streams                                                                            */
/*
 * Why: remote access (collectives/remote/remote.c) moves bytes on two-rank channels, one per ordered
 * pair of ranks, each with its operations in one agreed order. Operations of different channels
 * must not wait for each other: in one shared stream, rank A's send to B could sit behind A's
 * receive from C while C's send to A sits behind a receive from B ... and the ring deadlocks. Nor
 * may they wait for unrelated work of an engine stream (a collective waiting for the very rank
 * whose transfer this is). So a channel's operations run on its own stream, ordered after the
 * earlier users of their buffer only (the engine's order_external), and complete through an
 * event of their own. The command's stream index is checked and otherwise unused.
 */

/* The operation is in c->ps now: it completes when an event recorded after it has. */
static void private_track(acxi_engine_t *e, const acxi_engine_api_t *api, ncomm_t *c, const acxi_cmd_t *cmd) {
  cudaEvent_t ev = NULL;
  cudaError_t err = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (err == cudaSuccess) err = cudaEventRecord(ev, c->ps);
  int64_t ms = (int64_t)cmd->arg[4];
  pend_t p = {.cmd = *cmd, .ev = ev, .deadline_ns = acxi_now_ns() + (ms > 0 ? ms * 1000000 : c->timeout_ns)};
  int grown = err == cudaSuccess && pring_push(&c->pq, &p) == 0;
  if (err != cudaSuccess || !grown) {
    acx_status_t st = err != cudaSuccess ? ACX_ERR_DEVICE : ACX_ERR_NO_MEMORY;
    ACX_WARN(COLL, "communicator %" PRIu64 ": tracking an operation of its private stream: %s", c->id,
             err != cudaSuccess ? cudaGetErrorString(err) : "out of host memory");
    if (ev) (void)cudaEventDestroy(ev);
    (void)cudaGetLastError();
    comm_fail(e, api, c, st, (int)err, 1, "an operation's completion cannot be tracked");
    finish(e, api, cmd, st, (int)err, 0, 0);
    return;
  }
}

/* Completions of the private stream, in order; the first operation past its deadline aborts the
 * communicator (its peer never came). Returns nonzero while anything is in flight, so that the
 * executor loop keeps polling. */
static int private_poll(acxi_engine_t *e, const acxi_engine_api_t *api, ncomm_t *c, int64_t now) {
  int n = 0;
  while (c->pq.count) {
    pend_t *pd = &c->pq.v[c->pq.head];
    cudaError_t err = cudaEventQuery(pd->ev);
    if (err == cudaErrorNotReady && c->state == C_FAILED) {
      /* Aborted: its kernel is leaving. One that outstays the grace period is reported anyway. */
      if (now - c->failed_at_ns < c->timeout_ns) return n + 1;
      ACX_WARN(COLL, "communicator %" PRIu64 ": an operation still runs %.0f s after the communicator failed; "
               "reported failed", c->id, (now - c->failed_at_ns) / 1e9);
      err = cudaSuccess;
    } else if (err == cudaErrorNotReady) {
      if (now >= pd->deadline_ns) {
        ACX_WARN(COLL, "communicator %" PRIu64 ": a point-to-point operation (op %#x, %" PRIu64 " bytes) with rank %d"
                 " is still waiting for its peer at its deadline", c->id, pd->cmd.op, pd->cmd.bytes,
                 (int)(int64_t)pd->cmd.arg[2]);
        comm_fail(e, api, c, ACX_ERR_COLL_TIMEOUT, 0, 1, "a point-to-point operation passed its deadline");
      }
      return n + 1;
    }
    acx_status_t st = c->state == C_FAILED ? c->fail_status : ACX_OK;
    if (err != cudaSuccess) {
      /* A sticky error shows on the engine's own streams too, which poisons the engine. */
      ACX_WARN(COLL, "communicator %" PRIu64 ": an operation of its private stream failed: %s (%d)", c->id,
               cudaGetErrorString(err), (int)err);
      st = ACX_ERR_DEVICE;
    }
    (void)cudaEventDestroy(pd->ev);
    acxi_cmd_t done = pring_pop(&c->pq).cmd;
    finish(e, api, &done, st, st == ACX_OK ? 0 : err != cudaSuccess ? (int)err : c->fail_code, 0, 0);
    n++;
  }
  return n;
}

/* An operation of a private-stream communicator (point-to-point only). Only in C_READY. */
static void issue_private(acxi_engine_t *e, const acxi_engine_api_t *api, ncomm_t *c, const acxi_cmd_t *cmd) {
  acx_status_t st = ACX_OK;
  plan_t p;
  if (cmd->op != ACXC_OP_SEND && cmd->op != ACXC_OP_RECV) {
    ACX_WARN(COLL, "communicator %" PRIu64 ": op %#x on a point-to-point channel (send and receive only)", c->id,
             cmd->op);
    st = ACX_ERR_INVALID_ARG;
  } else {
    desc_t d = desc_of(cmd);
    st = plan_op(e, api, c, &d, &p);
  }
  if (st != ACX_OK) {
    comm_fail(e, api, c, st, 0, 1, "a point-to-point operation failed validation in the executor");
    finish(e, api, cmd, st, 0, 0, 0);
    return;
  }
  c->st.ops++;
  c->st.eager++;
  /* The private stream waits for the buffer's earlier users alone. Waiting for a whole engine
   * stream would tie the transfer to unrelated work queued there (a collective that waits for the
   * very peer that waits for this transfer: a deadlock across ranks). */
  uint64_t id = cmd->op == ACXC_OP_SEND ? p.acc.send : p.acc.recv;
  st = api->order_external(e, id, c->ps, cmd->op == ACXC_OP_RECV);
  if (st != ACX_OK) {
    comm_fail(e, api, c, st, 0, 1, "ordering the private stream after the buffer's users failed");
    finish(e, api, cmd, st, 0, 0, 0);
    return;
  }
  ncclResult_t r = nccl_call(c, &p, c->ps);
  if (r == ncclSuccess) {
    private_track(e, api, c, cmd);
    return;
  }
  if (r == ncclInProgress) {
    c->state = C_ISSUING;
    c->issuing = *cmd;
    c->issued_at_ns = acxi_now_ns();
    c->deadline_ns = c->issued_at_ns + c->timeout_ns;
    c->st.in_progress++;
    return;
  }
  NCCL_WARN(c, "enqueueing a point-to-point operation", r);
  comm_fail(e, api, c, ACX_ERR_NCCL, (int)r, 1, "NCCL refused a point-to-point operation");
  finish(e, api, cmd, ACX_ERR_NCCL, (int)r, 0, 0);
}

/* Issues a collective or a group and arranges its completion. Only in C_READY. */
static void issue(acxi_engine_t *e, const acxi_engine_api_t *api, ncomm_t *c, const acxi_cmd_t *cmd) {
  cudaStream_t s = (cudaStream_t)api->stream(e, cmd->stream);
  if (!s) {
    ACX_WARN(COLL, "communicator %" PRIu64 ": stream %u is out of range", c->id, cmd->stream);
    comm_fail(e, api, c, ACX_ERR_INVALID_ARG, 0, 1, "a collective named no stream of the device");
    finish(e, api, cmd, ACX_ERR_INVALID_ARG, 0, 0, 0);
    return;
  }
  if (c->ps) {
    issue_private(e, api, c, cmd);
    return;
  }
  ncclResult_t r = ncclSuccess;
  acx_status_t st = ACX_OK;
  int64_t t0 = acxi_now_ns();
  c->st.ops++;
  if (c->st.prev_t0 && t0 - c->st.prev_t0 < PERIOD_MAX_NS) {
    c->st.period_ns += t0 - c->st.prev_t0;
    c->st.periods++;
  }
  c->st.prev_t0 = t0;
  if (c->st.ops == 1) {
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) == 0) c->st.nivcsw0 = ru.ru_nivcsw, c->st.nvcsw0 = ru.ru_nvcsw;
    c->st.cpu0 = sched_getcpu();
  }
  chain(c, api, e, cmd->stream, s);
  if (cmd->op == ACXC_OP_GROUP) {
    void *base;
    uint64_t bytes;
    st = api->host_region(e, cmd->arg[3], &base, &bytes);
    uint64_t n = cmd->bytes;
    if (st == ACX_OK && (n == 0 || n > ACXC_GROUP_MAX || cmd->off[0] > bytes ||
                         n * sizeof(acxc_group_entry_t) > bytes - cmd->off[0])) {
      ACX_WARN(COLL, "communicator %" PRIu64 ": group of %" PRIu64 " entries at offset %" PRIu64
               " does not fit its %" PRIu64 "-byte region", c->id, n, cmd->off[0], bytes);
      st = ACX_ERR_INVALID_ARG;
    }
    if (st == ACX_OK) {
      /* Copied first: the rank may refill the slot as soon as `consumed` moves. */
      acxc_group_entry_t ents[ACXC_GROUP_MAX];
      memcpy(ents, (char *)base + cmd->off[0], n * sizeof *ents);
      acxc_region_t *reg = base;
      /* release: our copy is complete before the rank sees the slot free. */
      atomic_store_explicit(&reg->consumed, cmd->arg[4], memory_order_release);
      r = ncclGroupStart();
      ncclResult_t x = ncclSuccess;
      for (uint64_t i = 0; i < n && r == ncclSuccess && st == ACX_OK && (x == ncclSuccess || x == ncclInProgress); i++) {
        desc_t d = {.op = ents[i].op, .dtype = ents[i].dtype, .redop = ents[i].redop, .peer = ents[i].peer,
                    .send = ents[i].send, .recv = ents[i].recv, .count = ents[i].count};
        st = launch(e, api, c, &d, cmd->stream, s, &x);
      }
      if (r == ncclSuccess) {
        ncclResult_t g = ncclGroupEnd();
        r = x != ncclSuccess && x != ncclInProgress ? x : g;
      }
    }
    c->st.eager++;
  } else {
    desc_t d = desc_of(cmd);
    plan_t p;
    st = plan_op(e, api, c, &d, &p);
    if (st == ACX_OK) {
      order(e, api, &p.acc, cmd->stream);
      gentry_t *g = NULL;
      if (graph_eligible(c, d.op) && (c->gmax_bytes < 0 || d.count * p.es <= (uint64_t)c->gmax_bytes)) {
        gkey_t k;
        memset(&k, 0, sizeof k);
        k.op = d.op, k.dtype = d.dtype, k.redop = d.redop, k.peer = d.peer;
        k.send = d.send, k.recv = d.recv, k.count = d.count;
        k.sp = (uint64_t)(uintptr_t)p.sp, k.rp = (uint64_t)(uintptr_t)p.rp;
        g = graph_find(c, &k);
      }
      if (g && g->nexec) {
        int64_t t1 = acxi_now_ns();
        cudaError_t err = cudaGraphLaunch(g->exec[g->next], s);
        g->next = (g->next + 1) % g->nexec;
        if (g->orig) c->copy_s = s;
        if (err == cudaSuccess) {
          c->st.launch_ns += acxi_now_ns() - t1;
          c->st.replays++;
          complete_op(e, api, c, cmd);
          c->st.replay_ns += acxi_now_ns() - t0;
          return;
        }
        ACX_WARN(COLL, "communicator %" PRIu64 ": replaying a collective's CUDA graph failed: %s (%d); this "
                 "communicator issues every collective directly from now on", c->id, cudaGetErrorString(err),
                 (int)err);
        (void)cudaGetLastError();
        graphs_off(c);
        g = NULL;
      }
      if (g && g->seen >= GRAPH_MIN_SEEN && capture_begin(c)) {
        c->capturing = g;
        r = nccl_call(c, &p, c->cs);
        if (r == ncclSuccess) {
          if (capture_finish(c, s)) {
            complete_op(e, api, c, cmd);
            return;
          }
          c->st.eager++; /* nothing was launched: directly, then */
          r = nccl_call(c, &p, s);
        }
      } else {
        c->st.eager++;
        r = nccl_call(c, &p, s);
      }
    }
  }
  if (st != ACX_OK) {
    /* This rank skipped an operation its peers issue: the communicator's order is broken. */
    comm_fail(e, api, c, st, 0, 1, "a collective failed validation in the executor");
    finish(e, api, cmd, st, 0, 0, 0);
    return;
  }
  if (r == ncclSuccess) {
    complete_op(e, api, c, cmd);
    return;
  }
  if (r == ncclInProgress) {
    /* NCCL enqueues on a thread of its own (NCCL >= 2.19 does so for every call on a non-blocking
     * communicator): no CUDA work on the stream and no NCCL call on the communicator until it
     * reports ncclSuccess. */
    c->state = C_ISSUING;
    c->issuing = *cmd;
    c->issued_at_ns = acxi_now_ns();
    c->deadline_ns = c->issued_at_ns + c->timeout_ns;
    c->st.in_progress++;
    return;
  }
  capture_abandon(c);
  NCCL_WARN(c, "enqueueing a collective", r);
  comm_fail(e, api, c, ACX_ERR_NCCL, (int)r, 1, "NCCL refused a collective");
  finish(e, api, cmd, ACX_ERR_NCCL, (int)r, 0, 0);
}

/* NCCL's cuMem buffers (NCCL_CUMEM_ENABLE, on by default since 2.19): with them on, the world
 * rebuild after an injected fault on 4 ranks hit second sticky faults (illegal address) in two or
 * three healthy executors in each of 4 runs (4×H100), and the rebuild's first attempt failed;
 * with them off, none in 9 runs at 2 and 4 ranks, injected faults and kills (docs/resilience.md).
 * The candidate cause: an aborted communicator unmaps its peers' cuMem buffers while a kernel of
 * the survivors still reads them. And across 2 simulated nodes x 2 GPUs (4xH200, session 30) an
 * all-reduce that a killed rank never joined left the stream of two survivors as success, with
 * wrong values, before either executor had seen any failure: no completion check can catch that
 * (test_rebuild --cuda; with it off the same test passed in sessions 29 and 30). Off unless the
 * environment says; a value from the environment is kept, with a warning. */
static void cumem_default(void) {
  static int checked;
  if (checked) return;
  checked = 1;
  const char *v = getenv("NCCL_CUMEM_ENABLE");
  if (v) {
    if (strcmp(v, "0") != 0)
      ACX_WARN(COLL, "NCCL_CUMEM_ENABLE=%s from the environment: kept; acx's default is 0: with NCCL's cuMem buffers "
               "a peer's executor death has caused second sticky faults in healthy executors and collectives that "
               "completed with wrong values before any failure was seen (docs/resilience.md)", v);
    return;
  }
  setenv("NCCL_CUMEM_ENABLE", "0", 1);
}

/* ACXC_OP_UNIQUE_ID: a new ncclUniqueId into the collectives region arg[3]. ncclGetUniqueId
 * starts NCCL's bootstrap root in this process (it serves the communicator's init), which is why
 * the executor makes it and not the rank: the rank library loads no NCCL. */
static void make_unique_id(acxi_engine_t *e, const acxi_engine_api_t *api, const acxi_cmd_t *cmd) {
  void *base;
  uint64_t bytes;
  acx_status_t st = api->host_region(e, cmd->arg[3], &base, &bytes);
  if (st == ACX_OK && (bytes < sizeof(acxc_region_t) || ((acxc_region_t *)base)->magic != ACXC_REGION_MAGIC)) {
    ACX_WARN(COLL, "UNIQUE_ID: host region %" PRIu64 " is not a collectives region", cmd->arg[3]);
    st = ACX_ERR_INVALID_ARG;
  }
  if (st != ACX_OK) {
    finish(e, api, cmd, st, 0, 0, 0);
    return;
  }
  cumem_default(); /* before NCCL's first call in this process reads its environment */
  ncclUniqueId uid;
  _Static_assert(sizeof uid == sizeof((acxc_region_t *)0)->nccl_id, "ncclUniqueId size");
  ncclResult_t r = ncclGetUniqueId(&uid);
  if (r != ncclSuccess) {
    ACX_WARN(COLL, "ncclGetUniqueId failed: %s (%s)", ncclGetErrorString(r), ncclGetLastError(NULL));
    finish(e, api, cmd, ACX_ERR_NCCL, (int)r, 0, 0);
    return;
  }
  memcpy(((acxc_region_t *)base)->nccl_id, &uid, sizeof uid);
  finish(e, api, cmd, ACX_OK, 0, 0, 0);
}

/* ------------------------------------------------------------------------------------------ */
/* commands                                                                                   */

static void finalize_start(acxi_engine_t *e, const acxi_engine_api_t *api, ext_t *x, ncomm_t *c);

static void start_destroy(acxi_engine_t *e, const acxi_engine_api_t *api, ext_t *x, ncomm_t *c,
                          const acxi_cmd_t *cmd) {
  if (c->pq.count) {
    /* Removed once they have left (progress_one), so their completions are still posted. */
    comm_fail(e, api, c, ACX_ERR_CANCELLED, 0, 1, "destroyed with point-to-point operations in flight");
    c->destroy_pending = 1;
    c->init_cmd = *cmd;
    return;
  }
  if (c->state == C_FAILED || !c->comm) {
    do_abort(c, "destroy of a failed communicator");
    finish(e, api, cmd, ACX_OK, 0, 0, 0);
    comm_remove(e, api, x, c);
    return;
  }
  graphs_clear(c); /* they hold NCCL plans of this communicator */
  c->state = C_FINALIZING;
  c->init_cmd = *cmd;
  int64_t ms = (int64_t)cmd->arg[4];
  c->deadline_ns = acxi_deadline((ms > 0 ? ms : acxi_param_int("ACX_COLL_TIMEOUT")) * 1000000);
  grave_reap(c, 0);
  if (c->gn) {
    c->finalize_wait = 1; /* kernel copies still run: progress finalizes once they are done */
    return;
  }
  finalize_start(e, api, x, c);
}

/* ncclCommFinalize of a communicator in C_FINALIZING whose kernel copies have all finished. */
static void finalize_start(acxi_engine_t *e, const acxi_engine_api_t *api, ext_t *x, ncomm_t *c) {
  c->finalize_wait = 0;
  if (c->blocking) {
    /* ncclCommFinalize of a blocking communicator waits for its peers: on a side thread. */
    sjob_t *j = calloc(1, sizeof *j);
    if (j) *j = (sjob_t){.init = 0, .id = c->id, .comm = c->comm};
    if (j && sjob_start(j) == 0) {
      c->comm = NULL; /* the job's now */
      c->job = j;
      return;
    }
    free(j);
    do_abort(c, "no thread for the finalize");
    finish(e, api, &c->init_cmd, ACX_ERR_SYSTEM, 0, 0, 0);
    comm_remove(e, api, x, c);
    return;
  }
  ncclResult_t r = ncclCommFinalize(c->comm);
  if (r != ncclSuccess && r != ncclInProgress) {
    NCCL_WARN(c, "ncclCommFinalize", r);
    do_abort(c, "finalize failed");
    finish(e, api, &c->init_cmd, ACX_ERR_NCCL, (int)r, 0, 0);
    comm_remove(e, api, x, c);
  }
}

/* A command for a communicator that may issue NCCL calls now (C_READY). */
static void execute(acxi_engine_t *e, const acxi_engine_api_t *api, ext_t *x, ncomm_t *c, const acxi_cmd_t *cmd) {
  switch (cmd->op) {
  case ACXC_OP_FENCE:
    if (c->ps) private_track(e, api, c, cmd); /* after what the private stream holds */
    else if (cmd->flags & ACXI_CMD_FLAG_NO_REPLY) api->complete_after(e, cmd->stream, cmd);
    else complete_op(e, api, c, cmd); /* fails if the communicator has failed before it is seen */
    break;
  case ACXC_OP_DESTROY:
    start_destroy(e, api, x, c, cmd);
    break;
  default:
    issue(e, api, c, cmd);
  }
}

/* Runs queued commands while the communicator is ready. */
static int drain(acxi_engine_t *e, const acxi_engine_api_t *api, ext_t *x, ncomm_t *c) {
  int n = 0;
  while (c->state == C_READY && c->q.count) {
    acxi_cmd_t cmd = cmdq_pop(&c->q);
    int last = cmd.op == ACXC_OP_DESTROY;
    execute(e, api, x, c, &cmd);
    n++;
    if (last) break; /* c may be gone */
  }
  return n;
}

static void nvls_check(void) {
  static int checked;
  if (checked) return;
  checked = 1;
  const char *v = getenv("NCCL_NVLS_ENABLE");
  if (!v || strcmp(v, "0") != 0) {
    /* NVLink SHARP multicast objects outlive an aborted communicator on the test host and block
     * the next world: acx runs with it off. The rank's environment should have said so. */
    ACX_WARN(COLL, "NCCL_NVLS_ENABLE is %s%s%s in the executor's environment; acx requires 0 and sets it",
             v ? "'" : "unset", v ? v : "", v ? "'" : "");
    setenv("NCCL_NVLS_ENABLE", "0", 1);
  }
}

/* The graph cache's size for new communicators. NCCL registers buffers it sees during a capture
 * with its peers (NCCL_GRAPH_REGISTER, on by default) and keeps them registered while the graph
 * lives; a cached graph may outlive the buffer it names (acx frees buffers without asking the
 * communicator), and the registration would then point at memory reused by another buffer. acx
 * turns that registration off (the direct path does not register either) or, when the environment
 * asks for it explicitly, turns its own cache off. */
static int graph_cache_size(void) {
  static int size = -1;
  if (size >= 0) return size;
  int64_t n = acxi_param_int("ACX_COLL_GRAPH_CACHE");
  size = n <= 0 ? 0 : n > GRAPH_CACHE_MAX ? GRAPH_CACHE_MAX : (int)n;
  const char *v = getenv("NCCL_GRAPH_REGISTER");
  if (size > 0 && v && strcmp(v, "0") != 0) {
    ACX_INFO(COLL, "NCCL_GRAPH_REGISTER=%s: the collectives' graph cache (ACX_COLL_GRAPH_CACHE) is off", v);
    size = 0;
  } else if (size > 0 && !v) {
    setenv("NCCL_GRAPH_REGISTER", "0", 1);
  }
  return size;
}

static void start_init(acxi_engine_t *e, const acxi_engine_api_t *api, ext_t *x, const acxi_cmd_t *cmd) {
  uint64_t id = cmd->arg[0];
  int nranks = (int)cmd->arg[1], rank = (int)cmd->arg[2];
  if (comm_find(x, id)) {
    ACX_WARN(COLL, "INIT: communicator %" PRIu64 " exists already", id);
    finish(e, api, cmd, ACX_ERR_INVALID_ARG, 0, 0, 0);
    return;
  }
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    ACX_WARN(COLL, "INIT: rank %d of %d is out of range", rank, nranks);
    finish(e, api, cmd, ACX_ERR_INVALID_ARG, 0, 0, 0);
    return;
  }
  void *base;
  uint64_t bytes;
  acx_status_t st = api->host_region(e, cmd->arg[3], &base, &bytes);
  if (st == ACX_OK && (bytes < sizeof(acxc_region_t) || ((acxc_region_t *)base)->magic != ACXC_REGION_MAGIC)) {
    ACX_WARN(COLL, "INIT: host region %" PRIu64 " is not a collectives region", cmd->arg[3]);
    st = ACX_ERR_INVALID_ARG;
  }
  ncomm_t *c = st == ACX_OK ? calloc(1, sizeof *c) : NULL;
  if (st == ACX_OK && !c) st = ACX_ERR_NO_MEMORY;
  if (st == ACX_OK && x->n == x->cap) {
    int cap = x->cap ? 2 * x->cap : 4;
    ncomm_t **v = realloc(x->v, (size_t)cap * sizeof *v);
    if (!v) st = ACX_ERR_NO_MEMORY;
    else x->v = v, x->cap = cap;
  }
  if (st != ACX_OK) {
    free(c);
    finish(e, api, cmd, st, 0, 0, 0);
    return;
  }
  x->v[x->n++] = c;
  c->id = id;
  c->nranks = nranks;
  c->rank = rank;
  c->timeout_ns = acxi_param_int("ACX_COLL_TIMEOUT") * 1000000;
  c->last_stream = -1;
  c->gcap = graph_cache_size();
  c->gmax_bytes = acxi_param_int("ACX_COLL_GRAPH_MAX_BYTES");
  c->copy_on = acxi_param_int("ACX_COLL_GRAPH_COPY") != 0;
  if (cmd->off[0] & ACXC_INIT_PRIVATE_STREAM) {
    c->gcap = 0; /* point-to-point only: nothing to capture */
    cudaError_t err = cudaStreamCreateWithFlags(&c->ps, cudaStreamNonBlocking);
    if (err != cudaSuccess) {
      ACX_WARN(COLL, "INIT: communicator %" PRIu64 ": creating its private stream: %s (%d)", id,
               cudaGetErrorString(err), (int)err);
      (void)cudaGetLastError();
      c->ps = NULL;
      c->init_cmd = *cmd;
      c->state = C_INIT;
      comm_fail(e, api, c, ACX_ERR_DEVICE, (int)err, 0, "no private stream");
      return;
    }
  }
  c->init_cmd = *cmd;
  c->state = C_INIT;
  int64_t ms = (int64_t)cmd->arg[4];
  c->deadline_ns = acxi_deadline((ms > 0 ? ms : acxi_param_int("ACX_NCCL_INIT_TIMEOUT")) * 1000000);
  nvls_check();
  cumem_default();
  ncclUniqueId uid;
  memcpy(&uid, ((acxc_region_t *)base)->nccl_id, sizeof uid);
  if (cmd->off[0] & ACXC_INIT_BLOCKING) {
    c->blocking = 1;
    c->gcap = 0; /* direct calls: see "blocking communicators" */
    sjob_t *j = calloc(1, sizeof *j);
    if (!j) {
      comm_fail(e, api, c, ACX_ERR_NO_MEMORY, 0, 1, "out of memory");
      return;
    }
    *j = (sjob_t){.init = 1, .id = id, .nranks = nranks, .rank = rank, .uid = uid};
    if (sjob_start(j) != 0) {
      free(j);
      comm_fail(e, api, c, ACX_ERR_SYSTEM, 0, 1, "no thread for the blocking communicator's init");
      return;
    }
    c->job = j;
    c->issued_at_ns = acxi_now_ns(); /* for the log of how long the init took */
    ACX_INFO(COLL, "communicator %" PRIu64 ": rank %d of %d initialising (blocking, on a side thread, deadline %"
             PRId64 " ms)", id, rank, nranks, (c->deadline_ns - acxi_now_ns()) / 1000000);
    return;
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0; /* every call returns at once; abort is always possible */
  config.commName = "acx";
  ncclResult_t r = ncclCommInitRankConfig(&c->comm, nranks, uid, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    NCCL_WARN(c, "ncclCommInitRankConfig", r);
    comm_fail(e, api, c, ACX_ERR_NCCL, (int)r, 1, "communicator creation failed");
    return;
  }
  ACX_INFO(COLL, "communicator %" PRIu64 ": rank %d of %d initialising (non-blocking, deadline %" PRId64
           " ms, graph cache %d)", id, rank, nranks, (c->deadline_ns - acxi_now_ns()) / 1000000, c->gcap);
}

static int progress_state(acxi_engine_t *e, const acxi_engine_api_t *api, ext_t *x, ncomm_t *c, int64_t now);

static void nccl_submit(acxi_engine_t *e, const acxi_engine_api_t *api, const acxi_cmd_t *cmd) {
  if (cmd->op == ACXC_OP_UNIQUE_ID) { /* no GPU needed: any device kind's executor makes one */
    make_unique_id(e, api, cmd);
    return;
  }
  if (!api->stream(e, 0)) {
    ACX_WARN(COLL, "NCCL command %#x on a device without CUDA streams (host kind runs collectives through MPI)",
             cmd->op);
    finish(e, api, cmd, ACX_ERR_NOT_SUPPORTED, 0, 0, 0);
    return;
  }
  ext_t *x = ext_get(e, api, 1);
  if (!x) {
    finish(e, api, cmd, ACX_ERR_NO_MEMORY, 0, 0, 0);
    return;
  }
  if (cmd->op == ACXC_OP_INIT) {
    start_init(e, api, x, cmd);
    return;
  }
  ncomm_t *c = comm_find(x, cmd->arg[0]);
  if (!c) {
    ACX_WARN(COLL, "command %#x names communicator %" PRIu64 ", which does not exist in this executor", cmd->op,
             cmd->arg[0]);
    /* An executor of a later generation never saw the INIT: the communicator is gone. */
    finish(e, api, cmd, ACX_ERR_DEVICE_LOST, 0, 0, 0);
    return;
  }
  switch (cmd->op) {
  case ACXC_OP_CHECK: /* answered at once, never queued: it is how the rank learns of failures */
    finish(e, api, cmd, ACX_OK, 0, c->state == C_FAILED ? (uint64_t)c->fail_status : ACX_OK,
           c->state == C_FAILED ? (uint64_t)(int64_t)c->fail_code : 0);
    return;
  case ACXC_OP_ABORT: {
    acx_status_t cause = cmd->arg[1] ? (acx_status_t)cmd->arg[1] : ACX_ERR_CANCELLED;
    comm_fail(e, api, c, cause, 0, 1, "aborted by the rank");
    finish(e, api, cmd, ACX_OK, 0, 0, 0);
    return;
  }
  default:
    break;
  }
  if (c->state == C_FAILED) {
    if (cmd->op == ACXC_OP_DESTROY) {
      start_destroy(e, api, x, c, cmd);
      return;
    }
    finish(e, api, cmd, c->fail_status, c->fail_code, 0, 0);
    return;
  }
  if (c->state == C_FINALIZING) {
    ACX_WARN(COLL, "command %#x on communicator %" PRIu64 " after its DESTROY", cmd->op, c->id);
    finish(e, api, cmd, ACX_ERR_INVALID_STATE, 0, 0, 0);
    return;
  }
  if (c->state != C_READY || c->q.count) {
    if (cmdq_push(&c->q, cmd) != 0) {
      ACX_WARN(COLL, "communicator %" PRIu64 ": out of host memory queueing a command", c->id);
      comm_fail(e, api, c, ACX_ERR_NO_MEMORY, 0, 1, "out of memory");
      finish(e, api, cmd, ACX_ERR_NO_MEMORY, 0, 0, 0);
    }
    return;
  }
  execute(e, api, x, c, cmd);
}

/* ------------------------------------------------------------------------------------------ */
/* progress: the background states and asynchronous errors                                    */

/* NCCL's view of the communicator: ncclSuccess, ncclInProgress or an error. */
static ncclResult_t comm_state(ncomm_t *c) {
  ncclResult_t st = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(c->comm, &st);
  return r != ncclSuccess ? r : st;
}

static int progress_one(acxi_engine_t *e, const acxi_engine_api_t *api, ext_t *x, ncomm_t *c, int64_t now) {
  int busy = c->pq.count ? private_poll(e, api, c, now) : 0;
  if (c->rq.count) busy += replies_poll(e, api, c);
  if (c->destroy_pending) {
    if (c->pq.count) return busy;
    finish(e, api, &c->init_cmd, ACX_OK, 0, 0, 0);
    comm_remove(e, api, x, c);
    return busy + 1;
  }
  return busy + progress_state(e, api, x, c, now);
}

static int progress_state(acxi_engine_t *e, const acxi_engine_api_t *api, ext_t *x, ncomm_t *c, int64_t now) {
  switch (c->state) {
  case C_INIT: {
    ncclResult_t st = ncclInProgress;
    if (!c->blocking) {
      st = comm_state(c);
    } else if (c->job && sjob_take(c, &st, &c->comm) && st == ncclSuccess) {
      ACX_INFO(COLL, "communicator %" PRIu64 ": blocking init took %.1f ms", c->id, (now - c->issued_at_ns) / 1e6);
    }
    if (st == ncclInProgress) {
      if (now >= c->deadline_ns)
        comm_fail(e, api, c, ACX_ERR_COLL_TIMEOUT, 0, 1, "NCCL communicator creation passed ACX_NCCL_INIT_TIMEOUT");
      return 1;
    }
    if (st != ncclSuccess) {
      NCCL_WARN(c, "communicator creation", st);
      comm_fail(e, api, c, ACX_ERR_NCCL, (int)st, 1, "communicator creation failed");
      return 1;
    }
    c->state = C_READY;
    ACX_INFO(COLL, "communicator %" PRIu64 ": rank %d of %d ready", c->id, c->rank, c->nranks);
    finish(e, api, &c->init_cmd, ACX_OK, 0, (uint64_t)c->nranks, 0);
    return 1 + drain(e, api, x, c);
  }
  case C_ISSUING: {
    ncclResult_t st = comm_state(c);
    if (st == ncclInProgress) {
      if (now >= c->deadline_ns)
        comm_fail(e, api, c, ACX_ERR_COLL_TIMEOUT, 0, 1, "NCCL did not finish enqueueing within ACX_COLL_TIMEOUT");
      return 1;
    }
    if (st != ncclSuccess) {
      NCCL_WARN(c, "background enqueue", st);
      comm_fail(e, api, c, ACX_ERR_NCCL, (int)st, 1, "NCCL failed enqueueing a collective");
      return 1;
    }
    c->state = C_READY;
    int64_t waited = now - c->issued_at_ns;
    c->st.wait_ns += waited;
    if (waited > c->st.wait_max_ns) c->st.wait_max_ns = waited;
    if (c->ps) {
      private_track(e, api, c, &c->issuing);
      return 1 + (c->state == C_READY ? drain(e, api, x, c) : 0);
    }
    if (c->capturing && !capture_finish(c, (cudaStream_t)api->stream(e, c->issuing.stream))) {
      /* Nothing was launched (graphs are off now): the collective goes directly. */
      acxi_cmd_t cmd = c->issuing;
      c->st.ops--; /* issue counts it again */
      issue(e, api, c, &cmd);
      return 1 + (c->state == C_READY ? drain(e, api, x, c) : 0);
    }
    /* Now the work is in the stream: record the accesses and the completion after it. */
    reorder(e, api, c, &c->issuing);
    complete_op(e, api, c, &c->issuing);
    return 1 + drain(e, api, x, c);
  }
  case C_FINALIZING: {
    if (c->finalize_wait) {
      grave_reap(c, 0);
      if (!c->gn) {
        finalize_start(e, api, x, c);
        return 1;
      }
      if (now < c->deadline_ns) return 1;
      ACX_WARN(COLL, "communicator %" PRIu64 ": its last collectives did not finish in time for the destroy; aborting",
               c->id);
      do_abort(c, "destroy deadline");
      finish(e, api, &c->init_cmd, ACX_ERR_COLL_TIMEOUT, 0, 0, 0);
      comm_remove(e, api, x, c);
      return 1;
    }
    if (c->blocking) {
      ncclResult_t r = ncclInProgress;
      if (c->job && !sjob_take(c, &r, NULL)) {
        if (now < c->deadline_ns) return 1;
        ACX_WARN(COLL, "communicator %" PRIu64 ": ncclCommFinalize of the blocking communicator did not finish in "
                 "time; its thread is left to end it (a restart of this executor reclaims it)", c->id);
        sjob_abandon(c);
        r = ncclInProgress;
      }
      acx_status_t res = r == ncclSuccess ? ACX_OK : r == ncclInProgress ? ACX_ERR_COLL_TIMEOUT : ACX_ERR_NCCL;
      finish(e, api, &c->init_cmd, res, res == ACX_ERR_NCCL ? (int)r : 0, 0, 0);
      if (res == ACX_OK) ACX_INFO(COLL, "communicator %" PRIu64 " destroyed", c->id);
      comm_remove(e, api, x, c);
      return 1;
    }
    ncclResult_t st = comm_state(c);
    if (st == ncclInProgress) {
      if (now < c->deadline_ns) return 1;
      ACX_WARN(COLL, "communicator %" PRIu64 ": ncclCommFinalize did not finish in time; aborting", c->id);
      do_abort(c, "finalize deadline");
      finish(e, api, &c->init_cmd, ACX_ERR_COLL_TIMEOUT, 0, 0, 0);
      comm_remove(e, api, x, c);
      return 1;
    }
    acx_status_t res = ACX_OK;
    if (st != ncclSuccess) {
      NCCL_WARN(c, "ncclCommFinalize", st);
      do_abort(c, "finalize failed");
      res = ACX_ERR_NCCL;
    } else {
      ncclResult_t r = ncclCommDestroy(c->comm);
      c->comm = NULL;
      if (r != ncclSuccess) {
        ACX_WARN(COLL, "communicator %" PRIu64 ": ncclCommDestroy: %s (%d)", c->id, ncclGetErrorString(r), (int)r);
        res = ACX_ERR_NCCL;
      }
    }
    finish(e, api, &c->init_cmd, res, res == ACX_OK ? 0 : (int)st, 0, 0);
    ACX_INFO(COLL, "communicator %" PRIu64 " destroyed", c->id);
    comm_remove(e, api, x, c);
    return 1;
  }
  case C_READY:
    if (c->gn) grave_reap(c, 0);
    if (now >= c->next_poll_ns) {
      c->next_poll_ns = now + ASYNC_POLL_NS;
      ncclResult_t st = comm_state(c);
      if (st != ncclSuccess && st != ncclInProgress) {
        NCCL_WARN(c, "asynchronous error", st);
        comm_fail(e, api, c, ACX_ERR_NCCL, (int)st, 0, "NCCL reported an asynchronous error");
        return 1;
      }
    }
    return 0;
  case C_FAILED:
    /* The rank aborts once its watchdog has failed the waiting requests; if it never asks (no
     * operation has a future), abort after a grace period so the GPU does not spin forever. */
    if (c->comm && now - c->failed_at_ns > c->timeout_ns)
      do_abort(c, "no ABORT from the rank within ACX_COLL_TIMEOUT of the error");
    return 0;
  }
  return 0;
}

static int nccl_progress(acxi_engine_t *e, const acxi_engine_api_t *api) {
  ext_t *x = ext_get(e, api, 0);
  if (!x || x->n == 0) return 0;
  int64_t now = acxi_now_ns();
  int n = 0;
  /* Backwards: progress_one may remove the communicator it handles (the last slot moves in). */
  for (int i = x->n - 1; i >= 0; i--)
    if (i < x->n) n += progress_one(e, api, x, x->v[i], now);
  return n;
}

/* The hook `flush` (engine.h): the engine is about to run a command that is not this extension's
 * (the engine's own, or another extension's: acx's own all-reduce). A collective in ISSUING is not
 * in its stream yet (NCCL puts it there later, from a thread of its own), nor are the commands
 * queued behind it; a command that ran now would land in the stream before them on this rank
 * alone, and where a peer's order differs, two ranks wait in each other's kernels: session 18's
 * test_coll --peer on 2xH100 deadlocked so (an own all-reduce overtook an NCCL broadcast on one
 * rank). So every communicator's enqueue in progress, and its queue, goes into the streams first:
 * this waits for them, each within its own deadline (ACX_COLL_TIMEOUT fails the communicator). It
 * also orders that command after the collective's kernel on any stream (docs/collectives.md). */
static void nccl_flush(acxi_engine_t *e, const acxi_engine_api_t *api) {
  ext_t *x = ext_get(e, api, 0);
  if (!x) return;
  for (;;) {
    ncomm_t *c = NULL;
    for (int i = 0; i < x->n && !c; i++)
      if (x->v[i]->state == C_ISSUING || (x->v[i]->state == C_READY && x->v[i]->q.count)) c = x->v[i];
    if (!c) return;
    /* Either may issue again, or take c away (a DESTROY drained): c is found anew above. */
    if (c->state == C_READY) {
      drain(e, api, x, c);
    } else {
      (void)progress_state(e, api, x, c, acxi_now_ns());
      acxi_cpu_relax();
    }
  }
}

static void nccl_engine_destroy(acxi_engine_t *e, const acxi_engine_api_t *api) {
  void **slot = api->ext_state(e, ACXC_EXT_SLOT);
  if (!slot || !*slot) return;
  ext_t *x = *slot;
  while (x->n) {
    ncomm_t *c = x->v[x->n - 1];
    comm_fail(e, api, c, ACX_ERR_CANCELLED, 0, 1, "the executor is shutting down");
    comm_remove(e, api, x, c);
  }
  free(x->v);
  free(x);
  *slot = NULL;
  /* The CUDA context goes after this: NCCL's aborts must be done with it. */
  aborts_wait(acxi_now_ns() + 10000000000LL);
}

static const acxi_ext_ops_t nccl_ext_ops = {
    .name = "nccl",
    .op_first = ACXC_OP_FIRST,
    .op_last = ACXC_OP_LAST,
    .slot = ACXC_EXT_SLOT,
    .submit = nccl_submit,
    .progress = nccl_progress,
    .engine_destroy = nccl_engine_destroy,
    .flush = nccl_flush,
};

__attribute__((constructor)) static void nccl_ext_register(void) { acxi_ext_register(&nccl_ext_ops); }
