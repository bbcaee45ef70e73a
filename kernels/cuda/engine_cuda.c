/* The CUDA engine: executes acxi commands on one GPU, inside the acx-executor process or on the
 * inline executor thread. A pool of non-blocking streams, the device's stream-ordered memory pool,
 * device-side cross-stream ordering through per-buffer events, and two completion strategies
 * (event polling, host-function callbacks). docs/cuda-engine.md explains the choices. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acx/coll.h" /* acx_redop_t, acx_dtype_t (acx/device.h) */
#include "acx_build_config.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/nvtx.h"
#include "runtime/base/clock.h"
#include "kernels/exec/engine.h"
#include "runtime/base/log.h"
#include "runtime/base/param.h"

typedef enum completion { COMPLETION_EVENT = 0, COMPLETION_HOSTFN = 1 } completion_t;

/* What "auto" picks. Event polling: the executor already busy-polls while work is in flight, and a
 * cudaEventQuery on the stream head sees completion sooner than a host function, which is run by
 * a driver thread that must wake up and then hand over to the executor through the reply ring.
 * TO BE CONFIRMED by acx-launch-bench on the GPU host (docs/cuda-engine.md holds the numbers). */
#define AUTO_COMPLETION COMPLETION_EVENT

#define EVENT_POOL_INIT 64
#define HEALTH_CHECK_NS 100000 /* hostfn mode: how often progress() looks for a sticky error */
#define KEY_EMPTY 0u
#define KEY_TOMB UINT64_MAX

/* ---------------------------------------------------------------------------------------------
 * id -> object map: open addressing, linear probing, tombstones. Ids come from the rank side
 * (buffers, host regions) or the command (events); 0 and UINT64_MAX are reserved. */
typedef struct idmap {
  uint64_t *keys;
  void **vals;
  size_t cap; /* power of two */
  size_t used; /* live + tombstones */
  size_t live;
} idmap_t;

static size_t hash64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  k ^= k >> 33;
  return (size_t)k;
}

static int idmap_init(idmap_t *m, size_t cap) {
  m->keys = calloc(cap, sizeof *m->keys);
  m->vals = calloc(cap, sizeof *m->vals);
  if (!m->keys || !m->vals) {
    free(m->keys);
    free(m->vals);
    return -1;
  }
  m->cap = cap;
  m->used = m->live = 0;
  return 0;
}

static void idmap_fini(idmap_t *m) {
  free(m->keys);
  free(m->vals);
  memset(m, 0, sizeof *m);
}

static void *idmap_get(const idmap_t *m, uint64_t k) {
  for (size_t i = hash64(k) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    if (m->keys[i] == k) return m->vals[i];
    if (m->keys[i] == KEY_EMPTY) return NULL;
  }
}

static void idmap_insert_raw(idmap_t *m, uint64_t k, void *v) {
  size_t i = hash64(k) & (m->cap - 1);
  while (m->keys[i] != KEY_EMPTY && m->keys[i] != KEY_TOMB) i = (i + 1) & (m->cap - 1);
  if (m->keys[i] == KEY_EMPTY) m->used++;
  m->keys[i] = k;
  m->vals[i] = v;
  m->live++;
}

/* k must not be present. -1 when the table cannot grow. */
static int idmap_put(idmap_t *m, uint64_t k, void *v) {
  if ((m->used + 1) * 4 > m->cap * 3) { /* keep probes short: at most 3/4 full, tombs included */
    idmap_t n;
    size_t cap = m->live * 2 + 2 > m->cap / 2 ? m->cap * 2 : m->cap;
    if (idmap_init(&n, cap) != 0) return -1;
    for (size_t i = 0; i < m->cap; i++)
      if (m->keys[i] != KEY_EMPTY && m->keys[i] != KEY_TOMB) idmap_insert_raw(&n, m->keys[i], m->vals[i]);
    idmap_fini(m);
    *m = n;
  }
  idmap_insert_raw(m, k, v);
  return 0;
}

static void *idmap_del(idmap_t *m, uint64_t k) {
  for (size_t i = hash64(k) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    if (m->keys[i] == k) {
      void *v = m->vals[i];
      m->keys[i] = KEY_TOMB;
      m->vals[i] = NULL;
      m->live--;
      return v;
    }
    if (m->keys[i] == KEY_EMPTY) return NULL;
  }
}

#define IDMAP_FOREACH(m, i) \
  for (size_t i = 0; i < (m)->cap; i++) \
    if ((m)->keys[i] != KEY_EMPTY && (m)->keys[i] != KEY_TOMB)

/* ---------------------------------------------------------------------------------------------
 * Engine state. */

/* Cross-stream hazard tracking for one buffer or host region: the last writer's stream and an
 * event recorded after its write, and the streams that read since, each with an event recorded
 * after its last read. A writer waits for both; a reader waits for the writer. */
typedef struct track {
  int writer; /* stream index, -1: none since allocation */
  cudaEvent_t write_ev;
  uint64_t readers; /* bit i: stream i read since the last write */
  cudaEvent_t *read_ev; /* [nstreams], created on first use */
} track_t;

/* buffer_t.import: how an ACXI_MEM_SHAREABLE buffer came to be. */
#define IMPORT_NONE 0  /* our own cudaMalloc, exportable */
#define IMPORT_IPC 1   /* another process's, opened with cudaIpcOpenMemHandle (FREE closes it) */
#define IMPORT_ALIAS 2 /* an allocation of this process (CUDA opens no handle of its own process):
                          ptr is its pointer, FREE forgets it */

typedef struct buffer {
  uint64_t id;
  void *ptr;
  uint64_t bytes;
  acxi_mem_kind_t kind;
  int import; /* IMPORT_* */
  track_t t;
} buffer_t;

typedef struct region {
  uint64_t id;
  void *addr;
  uint64_t bytes;
  int registered; /* 1: we called cudaHostRegister and must unregister */
  track_t t;
  /* Retiring (HOST_UNREGISTER came): out of e->regions, in e->retiring until the work queued on
   * every stream before the command has finished (one event per stream); then unpinned. */
  struct region *next;
  cudaEvent_t *retire_ev; /* [nstreams] */
  int64_t retire_deadline;
  int retire_warned;
} region_t;

typedef struct user_event {
  cudaEvent_t ev;
  int recorded;
} user_event_t;

/* One command waiting for its stream: event mode (and deferred frees in both modes). */
typedef struct pending {
  acxi_cpl_t cpl;
  uint32_t flags;
  void *free_ptr; /* cudaFree this (free_ipc: cudaIpcCloseMemHandle) once its stream has passed it */
  int free_ipc;
} pending_t;

/* An event recorded on a stream, covering the `count` oldest pending commands not yet covered. */
typedef struct mark {
  cudaEvent_t ev;
  size_t count;
} mark_t;

/* Per-stream completion queue. Commands are queued unsealed; progress() seals all unsealed ones
 * with a single event (one driver call per poll, not per command: pipelined commands arrive in
 * batches), then posts the commands of every mark whose event has completed, in order. */
typedef struct squeue {
  pending_t *v; /* FIFO of every deferred command of the stream */
  size_t cap, head, count;
  size_t unsealed; /* the newest `unsealed` entries have no mark yet */
  mark_t *m; /* FIFO of marks */
  size_t mcap, mhead, mcount;
} squeue_t;

/* One command waiting for its stream in hostfn mode. The callback and the poison path race to
 * own it through `state`; the winner posts the completion. */
typedef struct hostfn_rec {
  struct acxi_engine *e;
  acxi_cpl_t cpl;
  uint32_t flags;
  _Atomic int state; /* 0 pending, 1 owned by the callback, 2 failed by the poison path */
  struct hostfn_rec *prev, *next;
} hostfn_rec_t;

typedef struct access {
  track_t *t;
  int stream;
  int writes;
} access_t;

struct acxi_engine {
  acxi_engine_params_t params;
  char completion_str[16];
  char fault_str[64];
  acxi_complete_fn complete;
  void *sink;

  int device;
  int nstreams;
  cudaStream_t *streams;
  cudaMemPool_t pool;
  completion_t mode;

  squeue_t *queues; /* [nstreams] */
  cudaEvent_t *ev_free; /* event pool: a stack of idle events */
  size_t ev_count, ev_cap;

  idmap_t buffers, regions, events;
  region_t *retiring; /* host regions removed, waiting for their streams (region_remove) */

  /* Accesses of the command being submitted; their events are recorded after its work is
   * enqueued (an event recorded before the work would not cover it). */
  access_t *acc;
  size_t nacc, acc_cap;

  _Atomic uint64_t in_flight;
  pthread_mutex_t hf_lock;
  hostfn_rec_t *hf_head;

  int poisoned;
  cudaError_t poison_err;
  char poison_msg[256];

  int lib_code; /* cudaError_t of the failing call of the command being submitted */
  int64_t next_health_ns;

  void *ext_state[ACXI_EXT_MAX];
};

static const acxi_engine_api_t engine_api;

/* ---------------------------------------------------------------------------------------------
 * Errors. */

/* Errors that leave the context unusable: every later call returns them again. */
static int sticky_error(cudaError_t err) {
  switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorContextIsDestroyed:
    case cudaErrorDevicesUnavailable:
    case cudaErrorExternalDevice:
    case cudaErrorTensorMemoryLeak:
    case cudaErrorUnknown:
      return 1;
    case cudaSuccess:
    case cudaErrorNotReady:
      return 0;
    default:
      /* Anything else is sticky exactly when clearing the thread's last error does not work. */
      (void)cudaGetLastError();
      return cudaPeekAtLastError() != cudaSuccess;
  }
}

/* What a command gets once the context is poisoned: the executor process will be replaced
 * (retry), but an inline engine's process can never use the GPU again. */
static acx_status_t lost_status(const acxi_engine_t *e) {
  return e->params.inline_mode ? ACX_ERR_DEVICE_FATAL : ACX_ERR_DEVICE_LOST;
}

static void post(acxi_engine_t *e, const acxi_cpl_t *cpl, uint32_t flags) {
  if (cpl->status == ACX_OK && (flags & ACXI_CMD_FLAG_NO_REPLY)) return;
  e->complete(e->sink, cpl);
}

static void fail_in_flight(acxi_engine_t *e);

static void poison(acxi_engine_t *e, cudaError_t err) {
  if (e->poisoned) return;
  e->poisoned = 1;
  e->poison_err = err;
  snprintf(e->poison_msg, sizeof e->poison_msg,
           "sticky CUDA error on device %d: %s (%d): the context is lost; in-flight commands fail "
           "with %s, only a new process can use the GPU again",
           e->device, cudaGetErrorString(err), (int)err, acx_status_name(lost_status(e)));
  ACX_WARN(EXEC, "%s", e->poison_msg);
  fail_in_flight(e);
}

/* Maps a failed call's error to a status, keeps it for the reply, poisons on a sticky error. */
static acx_status_t cuda_status(acxi_engine_t *e, cudaError_t err) {
  e->lib_code = (int)err;
  if (sticky_error(err)) {
    poison(e, err);
    return lost_status(e);
  }
  (void)cudaGetLastError(); /* a non-sticky error must not show up again in a later call */
  return err == cudaErrorMemoryAllocation ? ACX_ERR_DEVICE_OOM : ACX_ERR_DEVICE;
}

#define CUFAIL(err) cuda_status(e, (err))
#define CUDACHECK(call) ACXK_CUDACHECK(CUFAIL, call)
#define CUDACHECKGOTO(call, res, label) ACXK_CUDACHECKGOTO(CUFAIL, call, res, label)

/* Bad input: a log line naming the command and the argument, then the status. */
#define BAD(status, c, fmt, ...)                                                             \
  do {                                                                                       \
    ACX_WARN(EXEC, "cmd %" PRIu64 " (op %u): " fmt, (c)->req_id, (c)->op, ##__VA_ARGS__);    \
    return (status);                                                                         \
  } while (0)

/* The current device is per thread in the runtime API: the loop may call us from a thread other
 * than the creator's (inline mode). The cache avoids a call per command. */
static __thread int tls_device = -1;

static acx_status_t bind_device(acxi_engine_t *e) {
  if (tls_device == e->device) return ACX_OK;
  CUDACHECK(cudaSetDevice(e->device));
  tls_device = e->device;
  return ACX_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Event pool and per-stream completion queues. */

static acx_status_t event_get(acxi_engine_t *e, cudaEvent_t *ev) {
  if (e->ev_count > 0) {
    *ev = e->ev_free[--e->ev_count];
    return ACX_OK;
  }
  CUDACHECK(cudaEventCreateWithFlags(ev, cudaEventDisableTiming));
  return ACX_OK;
}

/* A recorded event may go back at once: later waits and queries see only later records. */
static void event_put(acxi_engine_t *e, cudaEvent_t ev) {
  if (e->ev_count == e->ev_cap) {
    size_t cap = e->ev_cap ? e->ev_cap * 2 : EVENT_POOL_INIT;
    cudaEvent_t *n = realloc(e->ev_free, cap * sizeof *n);
    if (!n) {
      (void)cudaEventDestroy(ev);
      return;
    }
    e->ev_free = n;
    e->ev_cap = cap;
  }
  e->ev_free[e->ev_count++] = ev;
}

static int squeue_push(squeue_t *q, const pending_t *p) {
  if (q->count == q->cap) {
    size_t cap = q->cap ? q->cap * 2 : 64;
    pending_t *n = malloc(cap * sizeof *n);
    if (!n) return -1;
    for (size_t i = 0; i < q->count; i++) n[i] = q->v[(q->head + i) % q->cap];
    free(q->v);
    q->v = n;
    q->cap = cap;
    q->head = 0;
  }
  q->v[(q->head + q->count) % q->cap] = *p;
  q->count++;
  q->unsealed++;
  return 0;
}

static pending_t squeue_pop(squeue_t *q) {
  pending_t p = q->v[q->head];
  q->head = (q->head + 1) % q->cap;
  q->count--;
  return p;
}

/* Removes the newest entry (a command whose sealing failed). */
static pending_t squeue_pop_tail(squeue_t *q) {
  q->count--;
  q->unsealed--;
  return q->v[(q->head + q->count) % q->cap];
}

static int mark_push(squeue_t *q, mark_t m) {
  if (q->mcount == q->mcap) {
    size_t cap = q->mcap ? q->mcap * 2 : 16;
    mark_t *n = malloc(cap * sizeof *n);
    if (!n) return -1;
    for (size_t i = 0; i < q->mcount; i++) n[i] = q->m[(q->mhead + i) % q->mcap];
    free(q->m);
    q->m = n;
    q->mcap = cap;
    q->mhead = 0;
  }
  q->m[(q->mhead + q->mcount) % q->mcap] = m;
  q->mcount++;
  return 0;
}

static void mark_pop(squeue_t *q) {
  q->mhead = (q->mhead + 1) % q->mcap;
  q->mcount--;
}

static void CUDART_CB hostfn_done(void *arg) {
  hostfn_rec_t *r = arg;
  acxi_engine_t *e = r->e;
  int expect = 0;
  /* acq_rel: the poison path's claim and ours must see each other's ownership. */
  if (!atomic_compare_exchange_strong_explicit(&r->state, &expect, 1, memory_order_acq_rel,
                                               memory_order_acquire))
    return;
  pthread_mutex_lock(&e->hf_lock);
  if (r->prev) r->prev->next = r->next;
  else e->hf_head = r->next;
  if (r->next) r->next->prev = r->prev;
  pthread_mutex_unlock(&e->hf_lock);
  post(e, &r->cpl, r->flags);
  free(r);
  /* release: the loop reading in_flight == 0 must also see the completion just posted. This is
   * the callback's last touch of e, so destroy may free e once it reads 0. */
  atomic_fetch_sub_explicit(&e->in_flight, 1, memory_order_release);
}

/* Posts cpl once the work queued so far on `stream` has finished. A pointer to free (free_ipc: to
 * close) rides on the event queue in both modes: a host function may not call CUDA. */
static acx_status_t defer(acxi_engine_t *e, int stream, const acxi_cpl_t *cpl, uint32_t flags,
                          void *free_ptr, int free_ipc) {
  cudaStream_t s = e->streams[stream];
  if (e->mode == COMPLETION_HOSTFN && !free_ptr) {
    hostfn_rec_t *r = malloc(sizeof *r);
    if (!r) {
      ACX_WARN(EXEC, "cmd %" PRIu64 ": out of host memory for a completion record", cpl->req_id);
      return ACX_ERR_NO_MEMORY;
    }
    r->e = e;
    r->cpl = *cpl;
    r->flags = flags;
    atomic_init(&r->state, 0);
    r->prev = NULL;
    pthread_mutex_lock(&e->hf_lock);
    r->next = e->hf_head;
    if (e->hf_head) e->hf_head->prev = r;
    e->hf_head = r;
    pthread_mutex_unlock(&e->hf_lock);
    /* Counted before the launch: the callback may run before cudaLaunchHostFunc returns. */
    atomic_fetch_add_explicit(&e->in_flight, 1, memory_order_relaxed);
    cudaError_t err = cudaLaunchHostFunc(s, hostfn_done, r);
    if (err != cudaSuccess) {
      ACX_WARN(EXEC, "cudaLaunchHostFunc(stream %d) failed: %s (%d)", stream, cudaGetErrorString(err), (int)err);
      pthread_mutex_lock(&e->hf_lock);
      if (r->prev) r->prev->next = r->next;
      else e->hf_head = r->next;
      if (r->next) r->next->prev = r->prev;
      pthread_mutex_unlock(&e->hf_lock);
      free(r);
      atomic_fetch_sub_explicit(&e->in_flight, 1, memory_order_relaxed);
      return cuda_status(e, err);
    }
    return ACX_OK;
  }
  /* Event mode: the work is in the stream already; progress() records the event covering it. */
  pending_t p = {.cpl = *cpl, .flags = flags, .free_ptr = free_ptr, .free_ipc = free_ipc};
  if (squeue_push(&e->queues[stream], &p) != 0) {
    ACX_WARN(EXEC, "cmd %" PRIu64 ": out of host memory for a completion record", cpl->req_id);
    return ACX_ERR_NO_MEMORY;
  }
  atomic_fetch_add_explicit(&e->in_flight, 1, memory_order_relaxed);
  return ACX_OK;
}

/* Gives back memory that is not stream-ordered: managed and shareable allocations (cudaFree), IPC
 * imports (cudaIpcCloseMemHandle). */
static cudaError_t free_now(void *ptr, int ipc) { return ipc ? cudaIpcCloseMemHandle(ptr) : cudaFree(ptr); }

/* Posts one finished command of a completion queue (first the deferred free, if any). */
static void retire(acxi_engine_t *e, pending_t *p, acx_status_t st, int lib_code) {
  if (st == ACX_OK && p->free_ptr) {
    cudaError_t err = free_now(p->free_ptr, p->free_ipc);
    if (err != cudaSuccess) {
      ACX_WARN(EXEC, "%s(%p) failed: %s (%d)", p->free_ipc ? "cudaIpcCloseMemHandle" : "cudaFree", p->free_ptr,
               cudaGetErrorString(err), (int)err);
      st = cuda_status(e, err);
      lib_code = (int)err;
    }
  }
  if (e->poisoned) { /* the cudaFree found the context lost; p is off the queue poison() failed */
    st = lost_status(e);
    lib_code = (int)e->poison_err;
  }
  p->cpl.status = st;
  p->cpl.lib_code = lib_code;
  post(e, &p->cpl, p->flags);
  atomic_fetch_sub_explicit(&e->in_flight, 1, memory_order_release);
}

/* One event after everything queued so far on stream i covers the unsealed commands. */
static void seal(acxi_engine_t *e, int i) {
  squeue_t *q = &e->queues[i];
  if (!q->unsealed) return;
  mark_t m = {.count = q->unsealed};
  acx_status_t st = event_get(e, &m.ev);
  int lib_code = 0;
  if (st == ACX_OK) {
    cudaError_t err = cudaEventRecord(m.ev, e->streams[i]);
    if (err == cudaSuccess && mark_push(q, m) == 0) {
      q->unsealed = 0;
      return;
    }
    event_put(e, m.ev);
    if (err != cudaSuccess) {
      ACX_WARN(EXEC, "cudaEventRecord(completion, stream %d) failed: %s (%d)", i, cudaGetErrorString(err), (int)err);
      st = cuda_status(e, err);
      lib_code = (int)err;
    } else {
      ACX_WARN(EXEC, "out of host memory for a completion mark");
      st = ACX_ERR_NO_MEMORY;
    }
  }
  /* Without an event nothing tells when these finish: fail them (the work itself stays queued). */
  while (!e->poisoned && q->unsealed) {
    pending_t p = squeue_pop_tail(q);
    p.free_ptr = NULL; /* not known to be unused: leaked rather than freed under the GPU */
    retire(e, &p, st, lib_code);
  }
}

/* Called once, when the engine is poisoned: nothing queued will ever complete by itself. */
static void fail_in_flight(acxi_engine_t *e) {
  for (int i = 0; i < e->nstreams; i++) {
    squeue_t *q = &e->queues[i];
    while (q->count) {
      pending_t p = squeue_pop(q);
      p.cpl.status = lost_status(e);
      p.cpl.lib_code = (int)e->poison_err;
      post(e, &p.cpl, p.flags);
      atomic_fetch_sub_explicit(&e->in_flight, 1, memory_order_release);
    }
    q->unsealed = 0;
    q->mcount = 0; /* their events are not destroyed: no CUDA call after poisoning */
  }
  /* Host functions never run after a context error (cudaLaunchHostFunc's documentation); claim
   * each record so a callback that does run anyway does nothing. Claimed records are not freed:
   * such a late callback would still read them. The process is lost, so this leak is bounded. */
  pthread_mutex_lock(&e->hf_lock);
  hostfn_rec_t *claimed = NULL;
  for (hostfn_rec_t *r = e->hf_head, *next; r; r = next) {
    next = r->next;
    int expect = 0;
    if (atomic_compare_exchange_strong_explicit(&r->state, &expect, 2, memory_order_acq_rel,
                                                memory_order_acquire)) {
      if (r->prev) r->prev->next = r->next;
      else e->hf_head = r->next;
      if (r->next) r->next->prev = r->prev;
      r->prev = NULL;
      r->next = claimed;
      claimed = r;
    }
  }
  pthread_mutex_unlock(&e->hf_lock);
  for (hostfn_rec_t *r = claimed; r; r = r->next) {
    acxi_cpl_t c = r->cpl;
    c.status = lost_status(e);
    c.lib_code = (int)e->poison_err;
    post(e, &c, r->flags);
    atomic_fetch_sub_explicit(&e->in_flight, 1, memory_order_release);
  }
}

/* ---------------------------------------------------------------------------------------------
 * Cross-stream ordering. */

static void track_init(track_t *t) {
  t->writer = -1;
  t->write_ev = NULL;
  t->readers = 0;
  t->read_ev = NULL;
}

/* Destroying an event with a record still pending is allowed: CUDA releases it once done. */
static void track_fini(acxi_engine_t *e, track_t *t) {
  if (!e->poisoned) {
    if (t->write_ev) (void)cudaEventDestroy(t->write_ev);
    if (t->read_ev)
      for (int i = 0; i < e->nstreams; i++)
        if (t->read_ev[i]) (void)cudaEventDestroy(t->read_ev[i]);
  }
  free(t->read_ev);
  track_init(t);
}

/* Makes `stream` wait (on the device) for the accesses that must precede this one. With `record`
 * the access is remembered and its event recorded by flush_accesses once the work is enqueued. */
static acx_status_t order(acxi_engine_t *e, track_t *t, int stream, int writes, int record) {
  if (e->nstreams == 1) return ACX_OK; /* one stream orders everything by itself */
  cudaStream_t s = e->streams[stream];
  if (t->writer >= 0 && t->writer != stream) CUDACHECK(cudaStreamWaitEvent(s, t->write_ev, 0));
  if (writes && t->readers) {
    for (int r = 0; r < e->nstreams; r++)
      if (r != stream && (t->readers & (1ull << r))) CUDACHECK(cudaStreamWaitEvent(s, t->read_ev[r], 0));
  }
  if (!record) return ACX_OK;
  if (e->nacc == e->acc_cap) {
    size_t cap = e->acc_cap ? e->acc_cap * 2 : 8;
    access_t *n = realloc(e->acc, cap * sizeof *n);
    if (!n) {
      ACX_WARN(EXEC, "out of host memory tracking buffer accesses");
      return ACX_ERR_NO_MEMORY;
    }
    e->acc = n;
    e->acc_cap = cap;
  }
  e->acc[e->nacc++] = (access_t){.t = t, .stream = stream, .writes = writes};
  return ACX_OK;
}

static acx_status_t flush_accesses(acxi_engine_t *e) {
  acx_status_t st = ACX_OK;
  for (size_t i = 0; i < e->nacc && st == ACX_OK; i++) {
    track_t *t = e->acc[i].t;
    int s = e->acc[i].stream;
    if (e->acc[i].writes) {
      if (!t->write_ev) CUDACHECKGOTO(cudaEventCreateWithFlags(&t->write_ev, cudaEventDisableTiming), st, done);
      CUDACHECKGOTO(cudaEventRecord(t->write_ev, e->streams[s]), st, done);
      t->writer = s;
      t->readers = 0;
    } else {
      if (!t->read_ev) {
        t->read_ev = calloc((size_t)e->nstreams, sizeof *t->read_ev);
        if (!t->read_ev) {
          ACX_WARN(EXEC, "out of host memory tracking buffer readers");
          st = ACX_ERR_NO_MEMORY;
          goto done;
        }
      }
      if (!t->read_ev[s]) CUDACHECKGOTO(cudaEventCreateWithFlags(&t->read_ev[s], cudaEventDisableTiming), st, done);
      CUDACHECKGOTO(cudaEventRecord(t->read_ev[s], e->streams[s]), st, done);
      t->readers |= 1ull << s;
    }
  }
done:
  e->nacc = 0;
  return st;
}

/* ---------------------------------------------------------------------------------------------
 * Validation helpers. */

static acx_status_t check_stream(const acxi_engine_t *e, const acxi_cmd_t *c, uint32_t stream) {
  if (stream >= (uint32_t)e->nstreams)
    BAD(ACX_ERR_INVALID_ARG, c, "stream %u is out of range (the engine has %d)", stream,
        e->nstreams);
  return ACX_OK;
}

static acx_status_t check_range(const acxi_cmd_t *c, const char *what, uint64_t size, uint64_t off,
                                uint64_t bytes) {
  if (bytes > UINT64_MAX - off)
    BAD(ACX_ERR_OVERFLOW, c, "%s: offset %" PRIu64 " + %" PRIu64 " bytes overflows", what, off,
        bytes);
  if (off + bytes > size)
    BAD(ACX_ERR_OUT_OF_RANGE, c, "%s: [%" PRIu64 ", +%" PRIu64 ") is outside its %" PRIu64 " bytes", what, off, bytes, size);
  return ACX_OK;
}

static acx_status_t get_buffer(acxi_engine_t *e, const acxi_cmd_t *c, int i, buffer_t **b) {
  uint64_t id = c->buf[i];
  *b = (id == KEY_EMPTY || id == KEY_TOMB) ? NULL : idmap_get(&e->buffers, id);
  if (!*b) BAD(ACX_ERR_UNKNOWN_BUFFER, c, "buf[%d] id %" PRIu64 " is unknown", i, id);
  return ACX_OK;
}

static acx_status_t get_region(acxi_engine_t *e, const acxi_cmd_t *c, uint64_t id, region_t **r) {
  *r = (id == KEY_EMPTY || id == KEY_TOMB) ? NULL : idmap_get(&e->regions, id);
  if (!*r) BAD(ACX_ERR_INVALID_ARG, c, "host region arg[0] = %" PRIu64 " is not registered", id);
  return ACX_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Ops. Each validates, enqueues, and sets *after to the stream whose completion posts the reply
 * (-1: reply at once). */

typedef struct op_out {
  int after;
  void *free_ptr; /* memory to free once `after` has passed it */
  int free_ipc;   /* ... by cudaIpcCloseMemHandle */
} op_out_t;

/* ---------------------------------------------------------------------------------------------
 * Shareable memory. CUDA opens no IPC handle of the process that made it, and two engines of one
 * process (inline transport, two devices) share its primary context: an import of a handle made in
 * this process maps to the allocation's own pointer, found in this list of the process's live
 * shareable allocations (any engine's), or not found: freed. */

typedef struct shared_alloc {
  void *ptr;
  uint64_t bytes;
  struct shared_alloc *next;
} shared_alloc_t;

static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static shared_alloc_t *shared_list;

static int shared_add(void *ptr, uint64_t bytes) {
  shared_alloc_t *a = malloc(sizeof *a);
  if (!a) return -1;
  a->ptr = ptr;
  a->bytes = bytes;
  pthread_mutex_lock(&shared_lock);
  a->next = shared_list;
  shared_list = a;
  pthread_mutex_unlock(&shared_lock);
  return 0;
}

static void shared_remove(void *ptr) {
  pthread_mutex_lock(&shared_lock);
  for (shared_alloc_t **pp = &shared_list; *pp; pp = &(*pp)->next)
    if ((*pp)->ptr == ptr) {
      shared_alloc_t *a = *pp;
      *pp = a->next;
      free(a);
      break;
    }
  pthread_mutex_unlock(&shared_lock);
}

static int shared_live(void *ptr, uint64_t bytes) {
  int found = 0;
  pthread_mutex_lock(&shared_lock);
  for (shared_alloc_t *a = shared_list; a && !found; a = a->next) found = a->ptr == ptr && a->bytes == bytes;
  pthread_mutex_unlock(&shared_lock);
  return found;
}

/* A shareable allocation that never made it into the buffer table. */
static void buffer_free_shareable(buffer_t *b) {
  shared_remove(b->ptr);
  (void)cudaFree(b->ptr);
}

/* The handle's bytes in host region arg[0] at off[0] (written by the CPU: the region is ours to
 * write while the rank waits for this reply). */
static acx_status_t handle_at(acxi_engine_t *e, const acxi_cmd_t *c, unsigned char **p) {
  region_t *r;
  ACXCHECK(get_region(e, c, c->arg[0], &r));
  ACXCHECK(check_range(c, "host region (off[0])", r->bytes, c->off[0], ACXI_IPC_HANDLE_BYTES));
  *p = (unsigned char *)r->addr + c->off[0];
  return ACX_OK;
}

static acx_status_t op_ipc_export(acxi_engine_t *e, const acxi_cmd_t *c, acxi_cpl_t *cpl, op_out_t *o) {
  buffer_t *b;
  unsigned char *p;
  ACXCHECK(get_buffer(e, c, 0, &b));
  if (b->kind != ACXI_MEM_SHAREABLE || b->import != IMPORT_NONE)
    BAD(ACX_ERR_INVALID_ARG, c, "buf[0] id %" PRIu64 " is not a shareable allocation of this executor", b->id);
  ACXCHECK(handle_at(e, c, &p));
  cudaIpcMemHandle_t h;
  _Static_assert(sizeof h <= sizeof(((acxi_ipc_wire_t *)0)->body), "a CUDA IPC handle fits the handle's body");
  CUDACHECK(cudaIpcGetMemHandle(&h, b->ptr));
  acxi_ipc_wire_t w = {.magic = ACXI_IPC_MAGIC, .kind = ACXI_IPC_KIND_CUDA, .pid = (int32_t)getpid(),
                       .bytes = b->bytes, .addr = (uint64_t)(uintptr_t)b->ptr};
  memcpy(w.body, &h, sizeof h);
  memcpy(p, &w, sizeof w);
  o->after = -1;
  return ACX_OK;
}

/* cuMemGetAddressRange (driver API, reached without linking libcuda: cuda_internal.h). CUresult and
 * CUdeviceptr spelled as what they are on every 64-bit platform CUDA supports. */
typedef int (*mem_range_fn)(unsigned long long *base, size_t *size, unsigned long long dptr);
static mem_range_fn mem_range;
static pthread_once_t mem_range_once = PTHREAD_ONCE_INIT;
static void mem_range_load(void) {
  if (acxk_driver_entry("cuMemGetAddressRange", 12000, (void **)&mem_range) != 0) mem_range = NULL;
}

/* The bytes of the allocation ptr points into, from ptr on; 0 when the driver cannot say. */
static uint64_t allocation_bytes(void *ptr) {
  pthread_once(&mem_range_once, mem_range_load);
  unsigned long long base = 0;
  size_t size = 0;
  if (!mem_range || mem_range(&base, &size, (unsigned long long)(uintptr_t)ptr) != 0) return 0;
  return base + size - (unsigned long long)(uintptr_t)ptr;
}

static acx_status_t op_ipc_import(acxi_engine_t *e, const acxi_cmd_t *c, acxi_cpl_t *cpl, op_out_t *o) {
  uint64_t id = c->buf[0];
  if (id == KEY_EMPTY || id == KEY_TOMB) BAD(ACX_ERR_INVALID_ARG, c, "buf[0] id %" PRIu64 " is reserved", id);
  if (idmap_get(&e->buffers, id)) BAD(ACX_ERR_INVALID_ARG, c, "buf[0] id %" PRIu64 " already exists", id);
  unsigned char *p;
  ACXCHECK(handle_at(e, c, &p));
  acxi_ipc_wire_t w;
  memcpy(&w, p, sizeof w);
  if (w.magic != ACXI_IPC_MAGIC)
    BAD(ACX_ERR_INVALID_ARG, c, "host region arg[0] = %" PRIu64 " at off[0] = %" PRIu64 " holds no shareable-memory "
        "handle (magic %#" PRIx64 ")", c->arg[0], c->off[0], w.magic);
  if (w.kind != ACXI_IPC_KIND_CUDA)
    BAD(ACX_ERR_INVALID_ARG, c, "the handle is of device kind %s, this executor is of kind cuda",
        w.kind == ACXI_IPC_KIND_HOST ? "host" : "unknown");
  if (w.pid <= 0 || w.bytes == 0 || w.bytes > SIZE_MAX)
    BAD(ACX_ERR_INVALID_ARG, c, "the handle's pid %" PRId32 " or bytes %" PRIu64 " is out of range", w.pid, w.bytes);
  buffer_t *b = calloc(1, sizeof *b);
  if (!b) {
    ACX_WARN(EXEC, "cmd %" PRIu64 ": out of host memory for a buffer entry", c->req_id);
    return ACX_ERR_NO_MEMORY;
  }
  b->id = id;
  b->bytes = w.bytes;
  b->kind = ACXI_MEM_SHAREABLE;
  track_init(&b->t);
  acx_status_t st = ACX_OK;
  if (w.pid == (int32_t)getpid()) {
    if (!shared_live((void *)(uintptr_t)w.addr, w.bytes)) {
      ACX_WARN(EXEC, "cmd %" PRIu64 ": the exported allocation (this process's, %" PRIu64 " bytes) was freed",
               c->req_id, w.bytes);
      st = ACX_ERR_PEER_LOST;
      goto err_free_entry;
    }
    b->ptr = (void *)(uintptr_t)w.addr;
    b->import = IMPORT_ALIAS;
  } else {
    cudaIpcMemHandle_t h;
    memcpy(&h, w.body, sizeof h);
    cudaError_t err = cudaIpcOpenMemHandle(&b->ptr, h, cudaIpcMemLazyEnablePeerAccess);
    if (err != cudaSuccess) {
      ACX_WARN(EXEC, "cmd %" PRIu64 ": cudaIpcOpenMemHandle (exporter pid %" PRId32 ", %" PRIu64 " bytes) failed: %s "
               "(%d): the exporting executor is gone or freed the buffer", c->req_id, w.pid, w.bytes,
               cudaGetErrorString(err), (int)err);
      e->lib_code = (int)err;
      /* Not the device's fault: a sticky error poisons as ever, any other is the peer's loss. */
      st = sticky_error(err) ? cuda_status(e, err) : ACX_ERR_PEER_LOST;
      (void)cudaGetLastError();
      goto err_free_entry;
    }
    b->import = IMPORT_IPC;
    /* The handle's size is what reads and writes are checked against: the mapping must hold it. */
    uint64_t have = allocation_bytes(b->ptr);
    if (have && have < w.bytes) {
      ACX_WARN(EXEC, "cmd %" PRIu64 ": the handle says %" PRIu64 " bytes, the exporter's allocation has %" PRIu64,
               c->req_id, w.bytes, have);
      st = ACX_ERR_INVALID_ARG;
      goto err_close;
    }
  }
  if (idmap_put(&e->buffers, id, b) != 0) {
    ACX_WARN(EXEC, "cmd %" PRIu64 ": out of host memory for the buffer table", c->req_id);
    st = ACX_ERR_NO_MEMORY;
    goto err_close;
  }
  cpl->value[0] = b->bytes;
  o->after = -1;
  return ACX_OK;

err_close:
  if (b->import == IMPORT_IPC) (void)cudaIpcCloseMemHandle(b->ptr);
err_free_entry:
  free(b);
  return st;
}

/* ---------------------------------------------------------------------------------------------
 * Elementwise REDUCE and DIV (cuda_kernels.cu). */

/* The element size of the command's dtype, one of the ten NCCL reduces. */
static acx_status_t arith_dtype(const acxi_cmd_t *c, size_t *es) {
  switch (c->dtype) {
    case ACX_DTYPE_I8: case ACX_DTYPE_U8: case ACX_DTYPE_I32: case ACX_DTYPE_U32: case ACX_DTYPE_I64:
    case ACX_DTYPE_U64: case ACX_DTYPE_F16: case ACX_DTYPE_BF16: case ACX_DTYPE_F32: case ACX_DTYPE_F64:
      *es = acx_dtype_size((acx_dtype_t)c->dtype);
      return ACX_OK;
    default:
      BAD(ACX_ERR_NOT_SUPPORTED, c, "dtype %u (%s) is not one of i8 u8 i32 u32 i64 u64 f16 bf16 f32 f64", c->dtype,
          acx_dtype_name((acx_dtype_t)c->dtype));
  }
}

/* Element-aligned offsets and size: a misaligned element access would be a sticky GPU fault. */
static acx_status_t check_elems(const acxi_cmd_t *c, const char *field, uint64_t v, size_t es) {
  if (v % es)
    BAD(ACX_ERR_INVALID_ARG, c, "%s = %" PRIu64 " is not a multiple of the %s element size %zu", field, v,
        acx_dtype_name((acx_dtype_t)c->dtype), es);
  return ACX_OK;
}

static acx_status_t op_reduce(acxi_engine_t *e, const acxi_cmd_t *c, acxi_cpl_t *cpl, op_out_t *o) {
  buffer_t *d, *s;
  size_t es = 0;
  ACXCHECK(check_stream(e, c, c->stream));
  ACXCHECK(get_buffer(e, c, 0, &d));
  ACXCHECK(get_buffer(e, c, 1, &s));
  ACXCHECK(arith_dtype(c, &es));
  if (c->arg[0] > ACX_REDOP_MIN)
    BAD(ACX_ERR_INVALID_ARG, c, "op arg[0] = %" PRIu64 " is not sum, prod, max or min%s", c->arg[0],
        c->arg[0] == ACX_REDOP_AVG ? " (avg is a sum, then a DIV)" : "");
  ACXCHECK(check_elems(c, "bytes", c->bytes, es));
  ACXCHECK(check_elems(c, "off[0]", c->off[0], es));
  ACXCHECK(check_elems(c, "off[1]", c->off[1], es));
  ACXCHECK(check_range(c, "buf[0]", d->bytes, c->off[0], c->bytes));
  ACXCHECK(check_range(c, "buf[1]", s->bytes, c->off[1], c->bytes));
  char *dp = (char *)d->ptr + c->off[0], *sp = (char *)s->ptr + c->off[1];
  if (dp != sp && dp < sp + c->bytes && sp < dp + c->bytes)
    BAD(ACX_ERR_INVALID_ARG, c, "buf[0] at off[0] = %" PRIu64 " and buf[1] at off[1] = %" PRIu64 " overlap partly (%"
        PRIu64 " bytes each)", c->off[0], c->off[1], c->bytes);
  int st = (int)c->stream;
  if (s != d) ACXCHECK(order(e, &s->t, st, 0, 1));
  ACXCHECK(order(e, &d->t, st, 1, 1));
  if (c->bytes > 0)
    CUDACHECK(acxk_cuda_launch_reduce(dp, sp, c->bytes / es, (int)c->dtype, (int)c->arg[0], e->streams[st]));
  o->after = st;
  return ACX_OK;
}

static acx_status_t op_div(acxi_engine_t *e, const acxi_cmd_t *c, acxi_cpl_t *cpl, op_out_t *o) {
  buffer_t *b;
  size_t es = 0;
  ACXCHECK(check_stream(e, c, c->stream));
  ACXCHECK(get_buffer(e, c, 0, &b));
  ACXCHECK(arith_dtype(c, &es));
  int is_signed = c->dtype == ACX_DTYPE_I8 || c->dtype == ACX_DTYPE_I32 || c->dtype == ACX_DTYPE_I64;
  if (c->arg[0] == 0 || (is_signed && c->arg[0] > (uint64_t)INT64_MAX))
    BAD(ACX_ERR_INVALID_ARG, c, "divisor arg[0] = %" PRIu64 " is 0 or exceeds the %s range", c->arg[0],
        acx_dtype_name((acx_dtype_t)c->dtype));
  ACXCHECK(check_elems(c, "bytes", c->bytes, es));
  ACXCHECK(check_elems(c, "off[0]", c->off[0], es));
  ACXCHECK(check_range(c, "buf[0]", b->bytes, c->off[0], c->bytes));
  ACXCHECK(order(e, &b->t, (int)c->stream, 1, 1));
  if (c->bytes > 0)
    CUDACHECK(acxk_cuda_launch_div((char *)b->ptr + c->off[0], c->bytes / es, (int)c->dtype, c->arg[0],
                                   e->streams[c->stream]));
  o->after = (int)c->stream;
  return ACX_OK;
}

/* cuStreamWaitValue32 / cuStreamWriteValue32 (driver API, reached without linking libcuda:
 * cuda_internal.h). CUresult, CUstream, CUdeviceptr and cuuint32_t spelled as what they are on
 * every 64-bit platform CUDA supports; flags 0: CU_STREAM_WAIT_VALUE_GEQ (wrap-around compare,
 * (int32_t)(*addr - value) >= 0) and CU_STREAM_WRITE_VALUE_DEFAULT (after a memory barrier). */
typedef int (*stream_value_fn)(cudaStream_t stream, unsigned long long addr, uint32_t value, unsigned flags);
static stream_value_fn wait_value32, write_value32;
static pthread_once_t stream_value_once = PTHREAD_ONCE_INIT;
static void stream_value_load(void) {
  if (acxk_driver_entry("cuStreamWaitValue32", 12000, (void **)&wait_value32) != 0) wait_value32 = NULL;
  if (acxk_driver_entry("cuStreamWriteValue32", 12000, (void **)&write_value32) != 0) write_value32 = NULL;
}
#define CU_ERROR_NOT_SUPPORTED_ 801

/* WAIT_VALUE / WRITE_VALUE: the flag is a word of a pinned host region, reached by the GPU
 * through its mapping. Nothing is tracked: a flag orders work, it is not data. */
static acx_status_t op_flag(acxi_engine_t *e, const acxi_cmd_t *c, acxi_cpl_t *cpl, op_out_t *o) {
  region_t *r;
  ACXCHECK(check_stream(e, c, c->stream));
  ACXCHECK(get_region(e, c, c->arg[0], &r));
  if (c->off[0] % 4 != 0 || c->off[0] > r->bytes || r->bytes - c->off[0] < 4)
    BAD(ACX_ERR_INVALID_ARG, c, "flag offset off[0] = %" PRIu64 " is not a 4-aligned word inside host region %" PRIu64
        " (%" PRIu64 " bytes)", c->off[0], c->arg[0], r->bytes);
  if (c->arg[1] > UINT32_MAX) BAD(ACX_ERR_INVALID_ARG, c, "flag value arg[1] = %" PRIu64 " exceeds 32 bits", c->arg[1]);
  pthread_once(&stream_value_once, stream_value_load);
  stream_value_fn fn = c->op == ACXI_OP_WAIT_VALUE ? wait_value32 : write_value32;
  if (!fn) BAD(ACX_ERR_NOT_SUPPORTED, c, "the driver has no cuStream%sValue32", c->op == ACXI_OP_WAIT_VALUE ? "Wait" : "Write");
  void *dp = NULL;
  CUDACHECK(cudaHostGetDevicePointer(&dp, (char *)r->addr + c->off[0], 0));
  int rc = fn(e->streams[c->stream], (unsigned long long)(uintptr_t)dp, (uint32_t)c->arg[1], 0);
  if (rc != 0)
    BAD(rc == CU_ERROR_NOT_SUPPORTED_ ? ACX_ERR_NOT_SUPPORTED : ACX_ERR_DEVICE, c, "cuStream%sValue32 failed: CUresult %d",
        c->op == ACXI_OP_WAIT_VALUE ? "Wait" : "Write", rc);
  o->after = (int)c->stream;
  return ACX_OK;
}

static acx_status_t op_kernel_empty(acxi_engine_t *e, const acxi_cmd_t *c, acxi_cpl_t *cpl, op_out_t *o) {
  ACXCHECK(check_stream(e, c, c->stream));
  CUDACHECK(acxk_cuda_launch_empty(e->streams[c->stream]));
  o->after = (int)c->stream;
  return ACX_OK;
}

static acx_status_t op_alloc(acxi_engine_t *e, const acxi_cmd_t *c, acxi_cpl_t *cpl, op_out_t *o) {
  uint64_t id = c->buf[0];
  if (id == KEY_EMPTY || id == KEY_TOMB) BAD(ACX_ERR_INVALID_ARG, c, "buf[0] id %" PRIu64 " is reserved", id);
  if (idmap_get(&e->buffers, id))
    BAD(ACX_ERR_INVALID_ARG, c, "buf[0] id %" PRIu64 " already exists", id);
  if (c->bytes == 0) BAD(ACX_ERR_INVALID_ARG, c, "bytes is 0");
  if (c->arg[0] != ACXI_MEM_DEVICE && c->arg[0] != ACXI_MEM_MANAGED && c->arg[0] != ACXI_MEM_SHAREABLE)
    BAD(ACX_ERR_INVALID_ARG, c, "arg[0] = %" PRIu64 " is no memory kind", c->arg[0]);
  if (c->bytes > SIZE_MAX) BAD(ACX_ERR_OVERFLOW, c, "bytes %" PRIu64 " exceeds size_t", c->bytes);
  acx_status_t st = ACX_OK;
  buffer_t *b = calloc(1, sizeof *b);
  if (!b) {
    ACX_WARN(EXEC, "cmd %" PRIu64 ": out of host memory for a buffer entry", c->req_id);
    return ACX_ERR_NO_MEMORY;
  }
  b->id = id;
  b->bytes = c->bytes;
  b->kind = (acxi_mem_kind_t)c->arg[0];
  track_init(&b->t);
  if (b->kind == ACXI_MEM_DEVICE) {
    ACXCHECKGOTO(check_stream(e, c, c->stream), st, err_free_entry);
    CUDACHECKGOTO(cudaMallocAsync(&b->ptr, (size_t)c->bytes, e->streams[c->stream]), st, err_free_entry);
  } else if (b->kind == ACXI_MEM_SHAREABLE) {
    /* Not from the stream-ordered pool: cudaIpcGetMemHandle takes cudaMalloc's memory only.
     * cudaMalloc is not stream-ordered either, so no stream needs to reach it. */
    CUDACHECKGOTO(cudaMalloc(&b->ptr, (size_t)c->bytes), st, err_free_entry);
    if (shared_add(b->ptr, b->bytes) != 0) {
      ACX_WARN(EXEC, "cmd %" PRIu64 ": out of host memory for the shareable allocation list", c->req_id);
      (void)cudaFree(b->ptr);
      st = ACX_ERR_NO_MEMORY;
      goto err_free_entry;
    }
  } else {
    /* Oversubscribing managed memory can hang the GPU, not only this process: never ask for more
     * than the device has free. */
    size_t free_b = 0, total_b = 0;
    CUDACHECKGOTO(cudaMemGetInfo(&free_b, &total_b), st, err_free_entry);
    if (c->bytes > free_b) {
      ACX_WARN(EXEC, "cmd %" PRIu64 ": managed alloc of %" PRIu64 " bytes exceeds the %zu bytes free on device %d",
               c->req_id, c->bytes, free_b, e->device);
      st = ACX_ERR_DEVICE_OOM;
      goto err_free_entry;
    }
    CUDACHECKGOTO(cudaMallocManaged(&b->ptr, (size_t)c->bytes, cudaMemAttachGlobal), st, err_free_entry);
  }
  if (idmap_put(&e->buffers, id, b) != 0) {
    ACX_WARN(EXEC, "cmd %" PRIu64 ": out of host memory for the buffer table", c->req_id);
    st = ACX_ERR_NO_MEMORY;
    goto err_free_memory;
  }
  /* A stream-ordered allocation is usable on other streams only after its stream got there. */
  if (b->kind == ACXI_MEM_DEVICE) {
    st = order(e, &b->t, (int)c->stream, 1, 1);
    if (st != ACX_OK) {
      idmap_del(&e->buffers, id);
      goto err_free_memory;
    }
  }
  cpl->value[0] = b->bytes;
  cpl->value[1] = (uint64_t)(uintptr_t)b->ptr;
  o->after = -1;
  return ACX_OK;

err_free_memory:
  if (b->kind == ACXI_MEM_DEVICE) (void)cudaFreeAsync(b->ptr, e->streams[c->stream]);
  else if (b->kind == ACXI_MEM_SHAREABLE) buffer_free_shareable(b);
  else (void)cudaFree(b->ptr);
err_free_entry:
  free(b);
  return st;
}

static acx_status_t op_free(acxi_engine_t *e, const acxi_cmd_t *c, acxi_cpl_t *cpl, op_out_t *o) {
  buffer_t *b;
  ACXCHECK(get_buffer(e, c, 0, &b));
  ACXCHECK(check_stream(e, c, c->stream));
  /* Freeing is a write: it must follow every reader and writer on every stream. */
  ACXCHECK(order(e, &b->t, (int)c->stream, 1, 0));
  if (b->kind == ACXI_MEM_DEVICE) {
    CUDACHECK(cudaFreeAsync(b->ptr, e->streams[c->stream]));
    o->after = -1;
  } else if (b->import == IMPORT_ALIAS) {
    o->after = -1; /* another engine's memory, in this process: nothing of ours to give back */
  } else {
    /* cudaFree of managed or shareable memory and cudaIpcCloseMemHandle are not stream-ordered:
     * they happen in progress() once the stream has passed this point. A shareable allocation
     * leaves the list at once: an import from now on finds it gone. */
    if (b->kind == ACXI_MEM_SHAREABLE && b->import == IMPORT_NONE) shared_remove(b->ptr);
    o->after = (int)c->stream;
    o->free_ptr = b->ptr;
    o->free_ipc = b->import == IMPORT_IPC;
  }
  idmap_del(&e->buffers, b->id);
  track_fini(e, &b->t);
  free(b);
  return ACX_OK;
}

static acx_status_t op_fill(acxi_engine_t *e, const acxi_cmd_t *c, acxi_cpl_t *cpl, op_out_t *o) {
  buffer_t *b;
  ACXCHECK(get_buffer(e, c, 0, &b));
  ACXCHECK(check_stream(e, c, c->stream));
  uint64_t w = c->arg[1];
  if (w != 1 && w != 2 && w != 4 && w != 8)
    BAD(ACX_ERR_INVALID_ARG, c, "fill width arg[1] = %" PRIu64 " is not 1, 2, 4 or 8", w);
  if (c->off[0] % w || c->bytes % w)
    BAD(ACX_ERR_INVALID_ARG, c, "off[0] %" PRIu64 " and bytes %" PRIu64 " must be multiples of the width %" PRIu64, c->off[0], c->bytes, w);
  ACXCHECK(check_range(c, "buf[0]", b->bytes, c->off[0], c->bytes));
  ACXCHECK(order(e, &b->t, (int)c->stream, 1, 1));
  CUDACHECK(acxk_cuda_launch_fill((char *)b->ptr + c->off[0], c->bytes, c->arg[0], (int)w, e->streams[c->stream]));
  o->after = (int)c->stream;
  return ACX_OK;
}

static acx_status_t op_copy(acxi_engine_t *e, const acxi_cmd_t *c, acxi_cpl_t *cpl, op_out_t *o) {
  ACXCHECK(check_stream(e, c, c->stream));
  int s = (int)c->stream;
  void *dst, *src;
  if (c->op == ACXI_OP_COPY_H2D) {
    region_t *r;
    buffer_t *b;
    ACXCHECK(get_region(e, c, c->arg[0], &r));
    ACXCHECK(get_buffer(e, c, 0, &b));
    ACXCHECK(check_range(c, "host region (off[1])", r->bytes, c->off[1], c->bytes));
    ACXCHECK(check_range(c, "buf[0]", b->bytes, c->off[0], c->bytes));
    ACXCHECK(order(e, &r->t, s, 0, 1));
    ACXCHECK(order(e, &b->t, s, 1, 1));
    src = (char *)r->addr + c->off[1];
    dst = (char *)b->ptr + c->off[0];
  } else if (c->op == ACXI_OP_COPY_D2H) {
    region_t *r;
    buffer_t *b;
    ACXCHECK(get_region(e, c, c->arg[0], &r));
    ACXCHECK(get_buffer(e, c, 1, &b));
    ACXCHECK(check_range(c, "buf[1]", b->bytes, c->off[1], c->bytes));
    ACXCHECK(check_range(c, "host region (off[0])", r->bytes, c->off[0], c->bytes));
    ACXCHECK(order(e, &b->t, s, 0, 1));
    ACXCHECK(order(e, &r->t, s, 1, 1));
    src = (char *)b->ptr + c->off[1];
    dst = (char *)r->addr + c->off[0];
  } else {
    buffer_t *bd, *bs;
    ACXCHECK(get_buffer(e, c, 0, &bd));
    ACXCHECK(get_buffer(e, c, 1, &bs));
    ACXCHECK(check_range(c, "buf[1]", bs->bytes, c->off[1], c->bytes));
    ACXCHECK(check_range(c, "buf[0]", bd->bytes, c->off[0], c->bytes));
    ACXCHECK(order(e, &bs->t, s, 0, 1));
    ACXCHECK(order(e, &bd->t, s, 1, 1));
    src = (char *)bs->ptr + c->off[1];
    dst = (char *)bd->ptr + c->off[0];
    if (bd == bs && c->bytes > 0 && c->off[0] != c->off[1] && c->off[0] < c->off[1] + c->bytes &&
        c->off[1] < c->off[0] + c->bytes) {
      /* Overlapping ranges (memmove semantics, as the host kind): cudaMemcpy does not promise
       * them, so go through a stream-ordered scratch allocation from the pool. */
      void *tmp = NULL;
      acx_status_t st = ACX_OK;
      CUDACHECK(cudaMallocAsync(&tmp, (size_t)c->bytes, e->streams[s]));
      CUDACHECKGOTO(cudaMemcpyAsync(tmp, src, (size_t)c->bytes, cudaMemcpyDefault, e->streams[s]), st, err_free_tmp);
      CUDACHECKGOTO(cudaMemcpyAsync(dst, tmp, (size_t)c->bytes, cudaMemcpyDefault, e->streams[s]), st, err_free_tmp);
    err_free_tmp:
      if (!e->poisoned) {
        cudaError_t err = cudaFreeAsync(tmp, e->streams[s]);
        if (err != cudaSuccess && st == ACX_OK) {
          ACX_WARN(EXEC, "cudaFreeAsync(scratch) failed: %s (%d)", cudaGetErrorString(err), (int)err);
          st = cuda_status(e, err);
        }
      }
      o->after = s;
      return st;
    }
  }
  /* A copy onto itself is a no-op (and cudaMemcpy does not promise identical ranges either). */
  if (c->bytes > 0 && dst != src)
    CUDACHECK(cudaMemcpyAsync(dst, src, (size_t)c->bytes, cudaMemcpyDefault, e->streams[s]));
  o->after = s;
  return ACX_OK;
}

static acx_status_t find_event(acxi_engine_t *e, const acxi_cmd_t *c, user_event_t **out) {
  uint64_t id = c->arg[0];
  user_event_t *u = (id == KEY_EMPTY || id == KEY_TOMB) ? NULL : idmap_get(&e->events, id);
  if (!u || !u->recorded) BAD(ACX_ERR_INVALID_ARG, c, "event arg[0] = %" PRIu64 " was never recorded", id);
  *out = u;
  return ACX_OK;
}

static acx_status_t op_event(acxi_engine_t *e, const acxi_cmd_t *c, acxi_cpl_t *cpl, op_out_t *o) {
  ACXCHECK(check_stream(e, c, c->stream));
  user_event_t *u = NULL;
  if (c->op == ACXI_OP_EVENT_RECORD) {
    if (c->arg[0] == KEY_EMPTY || c->arg[0] == KEY_TOMB)
      BAD(ACX_ERR_INVALID_ARG, c, "event id arg[0] = %" PRIu64 " is reserved", c->arg[0]);
    u = idmap_get(&e->events, c->arg[0]);
    if (!u) {
      /* Events come into being on their first record. */
      u = calloc(1, sizeof *u);
      if (!u) {
        ACX_WARN(EXEC, "cmd %" PRIu64 ": out of host memory for an event", c->req_id);
        return ACX_ERR_NO_MEMORY;
      }
      cudaError_t err = cudaEventCreateWithFlags(&u->ev, cudaEventDisableTiming);
      if (err != cudaSuccess) {
        ACX_WARN(EXEC, "cudaEventCreateWithFlags failed: %s (%d)", cudaGetErrorString(err), (int)err);
        free(u);
        return cuda_status(e, err);
      }
      if (idmap_put(&e->events, c->arg[0], u) != 0) {
        (void)cudaEventDestroy(u->ev);
        free(u);
        ACX_WARN(EXEC, "cmd %" PRIu64 ": out of host memory for the event table", c->req_id);
        return ACX_ERR_NO_MEMORY;
      }
    }
    CUDACHECK(cudaEventRecord(u->ev, e->streams[c->stream]));
    u->recorded = 1;
  } else {
    ACXCHECK(find_event(e, c, &u));
    CUDACHECK(cudaStreamWaitEvent(e->streams[c->stream], u->ev, 0));
  }
  o->after = -1;
  return ACX_OK;
}

/* Joins every stream into stream 0, so that one completion there covers all queued work. */
static acx_status_t join_all(acxi_engine_t *e) {
  for (int i = 1; i < e->nstreams; i++) {
    cudaEvent_t ev;
    ACXCHECK(event_get(e, &ev));
    cudaError_t err = cudaEventRecord(ev, e->streams[i]);
    if (err == cudaSuccess) err = cudaStreamWaitEvent(e->streams[0], ev, 0);
    event_put(e, ev);
    if (err != cudaSuccess) {
      ACX_WARN(EXEC, "joining stream %d into stream 0 failed: %s (%d)", i, cudaGetErrorString(err), (int)err);
      return cuda_status(e, err);
    }
  }
  return ACX_OK;
}

static acx_status_t op_sync(acxi_engine_t *e, const acxi_cmd_t *c, acxi_cpl_t *cpl, op_out_t *o) {
  if (c->op == ACXI_OP_SHUTDOWN || c->stream == ACXI_STREAM_ALL) {
    ACXCHECK(join_all(e));
    o->after = 0;
    return ACX_OK;
  }
  ACXCHECK(check_stream(e, c, c->stream));
  o->after = (int)c->stream;
  return ACX_OK;
}

static acx_status_t op_mem_info(acxi_engine_t *e, const acxi_cmd_t *c, acxi_cpl_t *cpl, op_out_t *o) {
  size_t free_b = 0, total_b = 0;
  CUDACHECK(cudaMemGetInfo(&free_b, &total_b));
  cpl->value[0] = free_b;
  cpl->value[1] = total_b;
  o->after = -1;
  return ACX_OK;
}

static acx_status_t managed_range(acxi_engine_t *e, const acxi_cmd_t *c, buffer_t **b) {
  ACXCHECK(get_buffer(e, c, 0, b));
  if ((*b)->kind != ACXI_MEM_MANAGED)
    BAD(ACX_ERR_INVALID_ARG, c, "buf[0] id %" PRIu64 " is not managed memory", (*b)->id);
  return check_range(c, "buf[0]", (*b)->bytes, c->off[0], c->bytes);
}

static acx_status_t op_prefetch(acxi_engine_t *e, const acxi_cmd_t *c, acxi_cpl_t *cpl, op_out_t *o) {
  buffer_t *b;
  ACXCHECK(managed_range(e, c, &b));
  ACXCHECK(check_stream(e, c, c->stream));
  struct cudaMemLocation loc;
  if (c->arg[0] == 0) loc = (struct cudaMemLocation){.type = cudaMemLocationTypeDevice, .id = e->device};
  else if (c->arg[0] == 1) loc = (struct cudaMemLocation){.type = cudaMemLocationTypeHost, .id = 0};
  else BAD(ACX_ERR_INVALID_ARG, c, "prefetch target arg[0] = %" PRIu64 " is not 0 (device) or 1 (host)", c->arg[0]);
  /* Migration must follow the last writer; readers may overlap it (it moves pages, not data). */
  ACXCHECK(order(e, &b->t, (int)c->stream, 0, 1));
  if (c->bytes > 0)
    CUDACHECK(cudaMemPrefetchAsync((char *)b->ptr + c->off[0], (size_t)c->bytes, loc, 0, e->streams[c->stream]));
  o->after = (int)c->stream;
  return ACX_OK;
}

static acx_status_t op_advise(acxi_engine_t *e, const acxi_cmd_t *c, acxi_cpl_t *cpl, op_out_t *o) {
  buffer_t *b;
  ACXCHECK(managed_range(e, c, &b));
  struct cudaMemLocation dev = {.type = cudaMemLocationTypeDevice, .id = e->device};
  struct cudaMemLocation host = {.type = cudaMemLocationTypeHost, .id = 0};
  enum cudaMemoryAdvise adv;
  struct cudaMemLocation loc = dev;
  switch (c->arg[0]) {
    case ACXI_ADVISE_READ_MOSTLY: adv = cudaMemAdviseSetReadMostly; break;
    case ACXI_ADVISE_UNSET_READ_MOSTLY: adv = cudaMemAdviseUnsetReadMostly; break;
    case ACXI_ADVISE_PREFERRED_DEVICE: adv = cudaMemAdviseSetPreferredLocation; break;
    case ACXI_ADVISE_PREFERRED_HOST: adv = cudaMemAdviseSetPreferredLocation; loc = host; break;
    case ACXI_ADVISE_ACCESSED_BY_DEVICE: adv = cudaMemAdviseSetAccessedBy; break;
    default: BAD(ACX_ERR_INVALID_ARG, c, "advice arg[0] = %" PRIu64 " is unknown", c->arg[0]);
  }
  if (c->bytes > 0) CUDACHECK(cudaMemAdvise((char *)b->ptr + c->off[0], (size_t)c->bytes, adv, loc));
  o->after = -1;
  return ACX_OK;
}

static acx_status_t region_remove(acxi_engine_t *e, uint64_t id);
static int region_retire_poll(acxi_engine_t *e, uint64_t id);

static acx_status_t op_host_register(acxi_engine_t *e, const acxi_cmd_t *c, acxi_cpl_t *cpl, op_out_t *o) {
  region_t *r;
  ACXCHECK(get_region(e, c, c->arg[0], &r));
  o->after = -1;
  if (c->op == ACXI_OP_HOST_REGISTER) {
    if (c->bytes > r->bytes)
      BAD(ACX_ERR_OUT_OF_RANGE, c, "region %" PRIu64 " maps %" PRIu64 " bytes, the command says %" PRIu64, r->id, r->bytes, c->bytes);
    return ACX_OK;
  }
  return region_remove(e, r->id);
}

/* Whatever arg[0] asks (ACXI_FAULT_CRASH or _STICKY), the real fault: it is what the tests and
 * the recovery benchmark must see. ACX_FAULT_INJECT schedules arrive here as FAULT commands
 * (the executor loop replaces the scheduled command). */
static acx_status_t op_fault(acxi_engine_t *e, uint32_t stream, op_out_t *o) {
  if (stream >= (uint32_t)e->nstreams) stream = 0;
  ACX_WARN(EXEC, "fault injection: launching the illegal-address kernel on device %d stream %u", e->device, stream);
  CUDACHECK(acxk_cuda_launch_fault(e->streams[stream]));
  o->after = (int)stream;
  return ACX_OK;
}

static acx_status_t op_buffer_info(acxi_engine_t *e, const acxi_cmd_t *c, acxi_cpl_t *cpl, op_out_t *o) {
  buffer_t *b;
  ACXCHECK(get_buffer(e, c, 0, &b));
  cpl->value[0] = b->bytes;
  cpl->value[1] = (uint64_t)(uintptr_t)b->ptr;
  /* The pointer is for the user's own streams (inline mode), which our events do not order: reply
   * once the stream-ordered allocation and the last write have happened. */
  o->after = e->nstreams == 1 ? 0 : b->t.writer;
  return ACX_OK;
}

static acx_status_t dispatch(acxi_engine_t *e, const acxi_cmd_t *c, acxi_cpl_t *cpl, op_out_t *o) {
  switch (c->op) {
    case ACXI_OP_NOP: return ACX_OK;
    case ACXI_OP_KERNEL_EMPTY: return op_kernel_empty(e, c, cpl, o);
    case ACXI_OP_ALLOC: return op_alloc(e, c, cpl, o);
    case ACXI_OP_FREE: return op_free(e, c, cpl, o);
    case ACXI_OP_FILL: return op_fill(e, c, cpl, o);
    case ACXI_OP_COPY_H2D:
    case ACXI_OP_COPY_D2H:
    case ACXI_OP_COPY_D2D: return op_copy(e, c, cpl, o);
    case ACXI_OP_EVENT_RECORD:
    case ACXI_OP_STREAM_WAIT: return op_event(e, c, cpl, o);
    case ACXI_OP_SYNC:
    case ACXI_OP_SHUTDOWN: return op_sync(e, c, cpl, o);
    case ACXI_OP_MEM_INFO: return op_mem_info(e, c, cpl, o);
    case ACXI_OP_PREFETCH: return op_prefetch(e, c, cpl, o);
    case ACXI_OP_ADVISE: return op_advise(e, c, cpl, o);
    case ACXI_OP_HOST_REGISTER:
    case ACXI_OP_HOST_UNREGISTER: return op_host_register(e, c, cpl, o);
    case ACXI_OP_FAULT: return op_fault(e, c->stream, o);
    case ACXI_OP_BUFFER_INFO: return op_buffer_info(e, c, cpl, o);
    case ACXI_OP_IPC_EXPORT: return op_ipc_export(e, c, cpl, o);
    case ACXI_OP_IPC_IMPORT: return op_ipc_import(e, c, cpl, o);
    case ACXI_OP_REDUCE: return op_reduce(e, c, cpl, o);
    case ACXI_OP_DIV: return op_div(e, c, cpl, o);
    case ACXI_OP_WAIT_VALUE:
    case ACXI_OP_WRITE_VALUE: return op_flag(e, c, cpl, o);
    default: BAD(ACX_ERR_INVALID_ARG, c, "unknown op");
  }
}

/* ---------------------------------------------------------------------------------------------
 * Engine ops. */

static void finish(acxi_engine_t *e, const acxi_cmd_t *c, acx_status_t st, acxi_cpl_t *cpl) {
  cpl->status = e->poisoned ? lost_status(e) : st;
  cpl->lib_code = e->poisoned ? (int)e->poison_err : e->lib_code;
  post(e, cpl, c->flags);
}

static const char *op_name(uint32_t op) {
  static const char *names[] = {
      [ACXI_OP_NOP] = "acx:nop",           [ACXI_OP_KERNEL_EMPTY] = "acx:kernel_empty",
      [ACXI_OP_ALLOC] = "acx:alloc",       [ACXI_OP_FREE] = "acx:free",
      [ACXI_OP_FILL] = "acx:fill",         [ACXI_OP_COPY_H2D] = "acx:copy_h2d",
      [ACXI_OP_COPY_D2H] = "acx:copy_d2h", [ACXI_OP_COPY_D2D] = "acx:copy_d2d",
      [ACXI_OP_EVENT_RECORD] = "acx:event_record", [ACXI_OP_STREAM_WAIT] = "acx:stream_wait",
      [ACXI_OP_SYNC] = "acx:sync",         [ACXI_OP_MEM_INFO] = "acx:mem_info",
      [ACXI_OP_PREFETCH] = "acx:prefetch", [ACXI_OP_ADVISE] = "acx:advise",
      [ACXI_OP_HOST_REGISTER] = "acx:host_register", [ACXI_OP_HOST_UNREGISTER] = "acx:host_unregister",
      [ACXI_OP_FAULT] = "acx:fault",       [ACXI_OP_SHUTDOWN] = "acx:shutdown",
      [ACXI_OP_BUFFER_INFO] = "acx:buffer_info", [ACXI_OP_IPC_EXPORT] = "acx:ipc_export",
      [ACXI_OP_IPC_IMPORT] = "acx:ipc_import", [ACXI_OP_REDUCE] = "acx:reduce", [ACXI_OP_DIV] = "acx:div",
      [ACXI_OP_WAIT_VALUE] = "acx:wait_value", [ACXI_OP_WRITE_VALUE] = "acx:write_value"};
  if (op >= ACXI_OP_EXT_BASE) return "acx:extension";
  return op < sizeof names / sizeof names[0] && names[op] ? names[op] : "acx:unknown";
}

static void submit_one(acxi_engine_t *e, const acxi_cmd_t *c);

/* The range covers enqueueing only; the device work shows on the stream rows of the profile. */
static void cuda_submit(acxi_engine_t *e, const acxi_cmd_t *c) {
  acxk_nvtx_push(op_name(c->op));
  submit_one(e, c);
  acxk_nvtx_pop();
}

static void submit_one(acxi_engine_t *e, const acxi_cmd_t *c) {
  acxi_cpl_t cpl = {.req_id = c->req_id};
  e->lib_code = 0;
  e->nacc = 0;
  if (e->poisoned) {
    finish(e, c, lost_status(e), &cpl);
    return;
  }
  acx_status_t st = bind_device(e);
  if (st != ACX_OK) {
    finish(e, c, st, &cpl);
    return;
  }
  /* Work an extension holds back goes before a command that is not its own. */
  for (int i = 0, n = acxi_ext_count(); i < n && !e->poisoned; i++) {
    const acxi_ext_ops_t *h = acxi_ext_at(i);
    if (h->flush && (c->op < h->op_first || c->op > h->op_last)) {
      h->flush(e, &engine_api);
      (void)flush_accesses(e);
    }
  }
  if (e->poisoned) {
    finish(e, c, lost_status(e), &cpl);
    return;
  }
  if (c->op >= ACXI_OP_EXT_BASE) {
    const acxi_ext_ops_t *x = acxi_ext_find(c->op);
    if (!x) {
      ACX_WARN(EXEC, "cmd %" PRIu64 ": op %#x has no registered extension", c->req_id, c->op);
      finish(e, c, ACX_ERR_NOT_SUPPORTED, &cpl);
      return;
    }
    x->submit(e, &engine_api, c); /* completes c itself */
    if (!e->poisoned) (void)flush_accesses(e);
    return;
  }
  op_out_t o = {.after = -1, .free_ptr = NULL, .free_ipc = 0};
  st = dispatch(e, c, &cpl, &o);
  if (st == ACX_OK && !e->poisoned) st = flush_accesses(e);
  if (st == ACX_OK && !e->poisoned) {
    if (o.after < 0) {
      post(e, &cpl, c->flags);
      return;
    }
    /* Fire-and-forget and enqueued: a success posts nothing, so there is nothing to wait for (no
     * completion record, event or host function per command). The only failure left is a device
     * fault, which is sticky: the next command that does wait for the stream sees it. */
    if ((c->flags & ACXI_CMD_FLAG_NO_REPLY) && !o.free_ptr) return;
    st = defer(e, o.after, &cpl, c->flags, o.free_ptr, o.free_ipc);
    if (st == ACX_OK && !e->poisoned) return;
    /* The buffer entry is gone already: free it now rather than leak it. cudaFree waits for the
     * device, which is what the deferral would have done. */
    if (o.free_ptr && !e->poisoned) (void)free_now(o.free_ptr, o.free_ipc);
  }
  e->nacc = 0;
  memset(cpl.value, 0, sizeof cpl.value);
  finish(e, c, st, &cpl);
}

static int cuda_progress(acxi_engine_t *e) {
  int n = 0;
  if (e->poisoned) return 0;
  if (bind_device(e) != ACX_OK) return 0;
  for (int i = 0; i < e->nstreams && !e->poisoned; i++) {
    squeue_t *q = &e->queues[i];
    seal(e, i);
    while (q->mcount && !e->poisoned) {
      mark_t m = q->m[q->mhead];
      cudaError_t err = cudaEventQuery(m.ev);
      if (err == cudaErrorNotReady) break;
      acx_status_t st = ACX_OK;
      if (err != cudaSuccess) {
        ACX_WARN(EXEC, "cudaEventQuery(stream %d) failed: %s (%d)", i, cudaGetErrorString(err), (int)err);
        st = cuda_status(e, err);
        if (e->poisoned) break; /* poison() failed every queued command */
      }
      mark_pop(q);
      event_put(e, m.ev);
      for (size_t k = 0; k < m.count && !e->poisoned; k++) {
        pending_t p = squeue_pop(q);
        retire(e, &p, st, st == ACX_OK ? 0 : (int)err);
        n++;
      }
    }
  }
  /* In hostfn mode nothing above sees a sticky error, and the callbacks will never run after one:
   * look for it now and then while work is in flight. */
  if (!e->poisoned && e->mode == COMPLETION_HOSTFN &&
      atomic_load_explicit(&e->in_flight, memory_order_relaxed) > 0) {
    int64_t now = acxi_now_ns();
    if (now >= e->next_health_ns) {
      e->next_health_ns = now + HEALTH_CHECK_NS;
      for (int i = 0; i < e->nstreams && !e->poisoned; i++) {
        cudaError_t err = cudaStreamQuery(e->streams[i]);
        if (err != cudaSuccess && err != cudaErrorNotReady && sticky_error(err)) {
          ACX_WARN(EXEC, "cudaStreamQuery(stream %d) failed: %s (%d)", i, cudaGetErrorString(err), (int)err);
          poison(e, err);
        }
      }
    }
  }
  for (int i = 0; i < acxi_ext_count() && !e->poisoned; i++) {
    const acxi_ext_ops_t *x = acxi_ext_at(i);
    if (x->progress) {
      n += x->progress(e, &engine_api);
      (void)flush_accesses(e);
    }
  }
  return n;
}

static uint64_t cuda_in_flight(acxi_engine_t *e) {
  /* acquire: pairs with the release decrements, so every completion counted out is visible. */
  return atomic_load_explicit(&e->in_flight, memory_order_acquire);
}

static int cuda_poisoned(acxi_engine_t *e) { return e->poisoned; }

static acx_status_t cuda_host_region_add(acxi_engine_t *e, uint64_t id, void *addr, size_t bytes) {
  ACX_CHECK_NULL(e);
  ACX_CHECK_NULL(addr);
  ACX_CHECK_ARG(id != KEY_EMPTY && id != KEY_TOMB, "host_region_add: region id %" PRIu64 " is reserved", id);
  ACX_CHECK_ARG(bytes > 0, "host_region_add: region %" PRIu64 " has 0 bytes", id);
  if (e->poisoned) return lost_status(e);
  ACX_CHECK_ARG(idmap_get(&e->regions, id) == NULL, "host_region_add: region %" PRIu64 " already exists", id);
  ACXCHECK(bind_device(e));
  region_t *r = calloc(1, sizeof *r);
  if (!r) {
    ACX_WARN(EXEC, "host_region_add: out of host memory");
    return ACX_ERR_NO_MEMORY;
  }
  r->id = id;
  r->addr = addr;
  r->bytes = bytes;
  track_init(&r->t);
  acx_status_t st = ACX_OK;
  /* Pinned, so that copies are true DMA and asynchronous; portable, for every context. */
  /* Mapped: the GPU reaches flags in it (WAIT_VALUE, WRITE_VALUE). */
  cudaError_t err = cudaHostRegister(addr, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped);
  if (err == cudaErrorHostMemoryAlreadyRegistered) {
    (void)cudaGetLastError(); /* someone else pinned it (inline mode: the user): fine, not ours to undo */
  } else if (err != cudaSuccess) {
    ACX_WARN(EXEC, "cudaHostRegister(%p, %zu) failed: %s (%d)", addr, bytes, cudaGetErrorString(err), (int)err);
    st = cuda_status(e, err);
    goto err_free_region;
  } else {
    r->registered = 1;
  }
  if (idmap_put(&e->regions, id, r) != 0) {
    ACX_WARN(EXEC, "host_region_add: out of host memory for the region table");
    st = ACX_ERR_NO_MEMORY;
    goto err_unregister;
  }
  return ACX_OK;

err_unregister:
  if (r->registered) (void)cudaHostUnregister(addr);
err_free_region:
  free(r);
  return st;
}

/* Host wait, with a deadline, until every stream has finished the work queued so far. Used where
 * the host must know (a region about to be unpinned, teardown); commands never wait this way. */
static acx_status_t drain_streams(acxi_engine_t *e, const char *why) {
  int64_t deadline = acxi_deadline(acxi_param_int("ACX_EXEC_TIMEOUT_MS") * 1000000);
  for (int i = 0; i < e->nstreams; i++) {
    cudaEvent_t ev;
    ACXCHECK(event_get(e, &ev));
    cudaError_t err = cudaEventRecord(ev, e->streams[i]);
    if (err == cudaSuccess) {
      while ((err = cudaEventQuery(ev)) == cudaErrorNotReady) {
        if (acxi_now_ns() > deadline) {
          event_put(e, ev);
          ACX_WARN(EXEC, "%s: stream %d still busy after ACX_EXEC_TIMEOUT_MS", why, i);
          return ACX_ERR_TIMEOUT;
        }
        acxi_cpu_relax();
      }
    }
    event_put(e, ev);
    if (err != cudaSuccess) {
      ACX_WARN(EXEC, "%s: waiting for stream %d failed: %s (%d)", why, i, cudaGetErrorString(err), (int)err);
      return cuda_status(e, err);
    }
  }
  return ACX_OK;
}

static void region_free(acxi_engine_t *e, region_t *r, int unpin) {
  if (unpin && r->registered) {
    cudaError_t err = cudaHostUnregister(r->addr);
    if (err != cudaSuccess) {
      ACX_WARN(EXEC, "cudaHostUnregister(%p) of host region %" PRIu64 " failed: %s (%d)", r->addr, r->id,
               cudaGetErrorString(err), (int)err);
      (void)cuda_status(e, err);
    }
  }
  if (r->retire_ev) {
    for (int i = 0; i < e->nstreams; i++)
      if (r->retire_ev[i]) event_put(e, r->retire_ev[i]);
    free(r->retire_ev);
  }
  track_fini(e, &r->t);
  free(r);
}

/* HOST_UNREGISTER, without waiting: copies from or to the region may still be queued on any
 * stream, behind work that waits for another executor (a channel's transfer, whose deadline this
 * loop enforces); a loop blocked here until they finish could wait for ever for a peer blocked the
 * same way. The region leaves the table at once (no new command can name it) and is unpinned once
 * an event recorded now on every stream has completed (region_retire_poll); until then the
 * executor keeps its mapping (cuda_host_region_busy tells the loop). */
static acx_status_t region_remove(acxi_engine_t *e, uint64_t id) {
  region_t *r = idmap_get(&e->regions, id);
  ACX_CHECK_ARG(r != NULL, "host_region_remove: region %" PRIu64 " is not registered", id);
  idmap_del(&e->regions, id);
  if (e->poisoned) {
    region_free(e, r, 0);
    return ACX_OK;
  }
  acx_status_t st = bind_device(e);
  if (st == ACX_OK && !(r->retire_ev = calloc((size_t)e->nstreams, sizeof *r->retire_ev))) st = ACX_ERR_NO_MEMORY;
  for (int i = 0; st == ACX_OK && i < e->nstreams; i++) {
    st = event_get(e, &r->retire_ev[i]);
    if (st == ACX_OK) {
      cudaError_t err = cudaEventRecord(r->retire_ev[i], e->streams[i]);
      if (err != cudaSuccess) {
        ACX_WARN(EXEC, "host region %" PRIu64 " unregister: recording an event on stream %d failed: %s (%d)", id, i,
                 cudaGetErrorString(err), (int)err);
        st = cuda_status(e, err);
      }
    }
  }
  if (st != ACX_OK) {
    /* Not known to be idle: never unpinned under a copy (its pages stay pinned until the context
     * goes with this process). */
    ACX_WARN(EXEC, "host region %" PRIu64 " stays pinned: %s", id, acx_status_str(st));
    r->registered = 0;
    region_free(e, r, 0);
    return st;
  }
  r->retire_deadline = acxi_deadline(acxi_param_int("ACX_EXEC_TIMEOUT_MS") * 1000000);
  r->next = e->retiring;
  e->retiring = r;
  (void)region_retire_poll(e, id);
  return ACX_OK;
}

/* Unpins the retiring regions whose streams have passed their events. Returns whether region
 * `id` (0: any) is still retiring. */
static int region_retire_poll(acxi_engine_t *e, uint64_t id) {
  int left = 0;
  for (region_t **pp = &e->retiring, *r; (r = *pp);) {
    int busy = 0;
    for (int i = 0; i < e->nstreams && !busy && !e->poisoned; i++) {
      if (!r->retire_ev[i]) continue;
      cudaError_t err = cudaEventQuery(r->retire_ev[i]);
      if (err == cudaErrorNotReady) {
        busy = 1;
      } else {
        if (err != cudaSuccess) (void)cuda_status(e, err);
        event_put(e, r->retire_ev[i]);
        r->retire_ev[i] = NULL;
      }
    }
    if (busy) {
      if (!r->retire_warned && acxi_now_ns() > r->retire_deadline) {
        ACX_WARN(EXEC, "host region %" PRIu64 ": work queued before its unregister is still running after "
                 "ACX_EXEC_TIMEOUT_MS; it stays pinned and mapped until that work ends", r->id);
        r->retire_warned = 1;
      }
      if (!id || r->id == id) left = 1;
      pp = &r->next;
      continue;
    }
    *pp = r->next;
    region_free(e, r, !e->poisoned);
  }
  return left;
}

static acx_status_t cuda_host_region_remove(acxi_engine_t *e, uint64_t id) {
  ACX_CHECK_NULL(e);
  return region_remove(e, id);
}

static int cuda_host_region_busy(acxi_engine_t *e, uint64_t id) { return e ? region_retire_poll(e, id) : 0; }

static acx_status_t parse_completion(const char *s, completion_t *mode) {
  if (!s || !*s || strcmp(s, "auto") == 0) *mode = AUTO_COMPLETION;
  else if (strcmp(s, "event") == 0) *mode = COMPLETION_EVENT;
  else if (strcmp(s, "hostfn") == 0) *mode = COMPLETION_HOSTFN;
  else {
    ACX_WARN(EXEC, "completion '%s' (ACX_COMPLETION) is not auto, event or hostfn", s);
    return ACX_ERR_BAD_PARAM;
  }
  return ACX_OK;
}

static acx_status_t select_device(const acxi_engine_params_t *p, int *device) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    ACX_WARN(EXEC, "no usable CUDA device: %s", err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    (void)cudaGetLastError();
    return ACX_ERR_NO_DEVICE;
  }
  if (p->pci_bus_id[0]) {
    char bus[sizeof p->pci_bus_id + 1];
    memcpy(bus, p->pci_bus_id, sizeof p->pci_bus_id);
    bus[sizeof p->pci_bus_id] = '\0';
    err = cudaDeviceGetByPCIBusId(device, bus);
    if (err != cudaSuccess) {
      ACX_WARN(EXEC, "no CUDA device at PCI bus id '%s': %s", bus, cudaGetErrorString(err));
      (void)cudaGetLastError();
      return ACX_ERR_NO_DEVICE;
    }
    return ACX_OK;
  }
  if (p->cuda_ordinal < 0 || p->cuda_ordinal >= n) {
    ACX_WARN(EXEC, "CUDA device ordinal %d is out of range (%d devices)", p->cuda_ordinal, n);
    return ACX_ERR_NO_DEVICE;
  }
  *device = p->cuda_ordinal;
  return ACX_OK;
}

/* A build without code for this GPU fails its first kernel launch with "no kernel image"; say
 * it at open instead, with what the user needs to rebuild: the GPU, its compute capability and
 * the architectures this libacx was compiled for. */
static acx_status_t check_kernel_image(acxi_engine_t *e) {
  cudaError_t err = acxk_cuda_kernel_image();
  if (err == cudaSuccess) return ACX_OK;
  if (err != cudaErrorNoKernelImageForDevice && err != cudaErrorInvalidDeviceFunction) {
    ACX_WARN(EXEC, "cudaFuncGetAttributes(empty_kernel) failed: %s (%d)", cudaGetErrorString(err), (int)err);
    return cuda_status(e, err);
  }
  struct cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, e->device) != cudaSuccess) {
    (void)cudaGetLastError();
    snprintf(prop.name, sizeof prop.name, "unknown GPU");
    prop.major = prop.minor = 0;
  }
  ACX_WARN(EXEC,
           "acx_device_open: CUDA device %d (%s, compute capability %d.%d) has no kernel image in this "
           "libacx, built for CUDA architectures '%s': rebuild acx with -DCMAKE_CUDA_ARCHITECTURES=%d%d "
           "(or leave it unset on the GPU node: the default is the GPUs present)",
           e->device, prop.name, prop.major, prop.minor, ACX_CUDA_ARCHITECTURES, prop.major, prop.minor);
  return ACX_ERR_NOT_SUPPORTED;
}

static acx_status_t cuda_create(const acxi_engine_params_t *params, acxi_complete_fn complete, void *sink,
                                acxi_engine_t **out) {
  ACX_CHECK_NULL(params);
  ACX_CHECK_NULL(complete);
  ACX_CHECK_NULL(out);
  *out = NULL;
  ACX_CHECK_ARG(params->streams >= 1 && params->streams <= ACXI_MAX_STREAMS,
                "cuda engine: streams = %d is outside [1, %d]", params->streams, ACXI_MAX_STREAMS);
  completion_t mode;
  ACXCHECK(parse_completion(params->completion, &mode));
  acx_status_t st = ACX_OK;
  acxi_engine_t *e = calloc(1, sizeof *e);
  if (!e) {
    ACX_WARN(EXEC, "cuda engine: out of host memory");
    return ACX_ERR_NO_MEMORY;
  }
  e->params = *params;
  snprintf(e->completion_str, sizeof e->completion_str, "%s", mode == COMPLETION_EVENT ? "event" : "hostfn");
  snprintf(e->fault_str, sizeof e->fault_str, "%s", params->fault_inject ? params->fault_inject : "");
  e->params.completion = e->completion_str;
  e->params.fault_inject = e->fault_str;
  e->complete = complete;
  e->sink = sink;
  e->mode = mode;
  e->nstreams = params->streams;
  atomic_init(&e->in_flight, 0);
  if (pthread_mutex_init(&e->hf_lock, NULL) != 0) {
    ACX_WARN(EXEC, "cuda engine: pthread_mutex_init failed");
    st = ACX_ERR_SYSTEM;
    goto err_free_engine;
  }
  if (idmap_init(&e->buffers, 256) || idmap_init(&e->regions, 64) || idmap_init(&e->events, 64)) {
    ACX_WARN(EXEC, "cuda engine: out of host memory");
    st = ACX_ERR_NO_MEMORY;
    goto err_free_tables;
  }
  e->streams = calloc((size_t)e->nstreams, sizeof *e->streams);
  e->queues = calloc((size_t)e->nstreams, sizeof *e->queues);
  if (!e->streams || !e->queues) {
    ACX_WARN(EXEC, "cuda engine: out of host memory");
    st = ACX_ERR_NO_MEMORY;
    goto err_free_tables;
  }
  ACXCHECKGOTO(select_device(params, &e->device), st, err_free_tables);
  tls_device = -1;
  ACXCHECKGOTO(bind_device(e), st, err_free_tables);
  ACXCHECKGOTO(check_kernel_image(e), st, err_free_tables);
  int pools = 0;
  CUDACHECKGOTO(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, e->device), st, err_free_tables);
  if (!pools) {
    ACX_WARN(EXEC, "CUDA device %d has no stream-ordered memory pools (cudaMallocAsync)", e->device);
    st = ACX_ERR_NOT_SUPPORTED;
    goto err_free_tables;
  }
  for (int i = 0; i < e->nstreams; i++)
    CUDACHECKGOTO(cudaStreamCreateWithFlags(&e->streams[i], cudaStreamNonBlocking), st, err_destroy_streams);
  CUDACHECKGOTO(cudaDeviceGetDefaultMemPool(&e->pool, e->device), st, err_destroy_streams);
  /* Keep freed memory in the pool instead of returning it at every synchronization: allocation
   * then costs no driver call in steady state. destroy trims the pool. */
  uint64_t threshold = UINT64_MAX;
  CUDACHECKGOTO(cudaMemPoolSetAttribute(e->pool, cudaMemPoolAttrReleaseThreshold, &threshold), st, err_destroy_streams);
  for (int i = 0; i < EVENT_POOL_INIT; i++) {
    cudaEvent_t ev;
    CUDACHECKGOTO(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), st, err_destroy_events);
    event_put(e, ev);
  }
  ACX_INFO(EXEC, "cuda engine: device %d, %d streams, completion %s, generation %" PRIu64 "%s", e->device,
           e->nstreams, e->completion_str, params->generation, params->inline_mode ? ", inline" : "");
  *out = e;
  return ACX_OK;

err_destroy_events:
  for (size_t i = 0; i < e->ev_count; i++) (void)cudaEventDestroy(e->ev_free[i]);
  free(e->ev_free);
err_destroy_streams:
  for (int i = 0; i < e->nstreams; i++)
    if (e->streams[i]) (void)cudaStreamDestroy(e->streams[i]);
err_free_tables:
  free(e->streams);
  free(e->queues);
  if (e->buffers.keys) idmap_fini(&e->buffers);
  if (e->regions.keys) idmap_fini(&e->regions);
  if (e->events.keys) idmap_fini(&e->events);
  pthread_mutex_destroy(&e->hf_lock);
err_free_engine:
  free(e);
  return st;
}

/* Releases device objects (not after poisoning: every call would fail) and host tables. */
static void release_all(acxi_engine_t *e) {
  int live = !e->poisoned;
  /* Nothing may still use a region or buffer when it goes. A GPU that does not drain within the
   * deadline keeps its memory (leaked, never unpinned under a running copy). */
  if (live && drain_streams(e, "engine destroy") != ACX_OK) live = 0;
  IDMAP_FOREACH(&e->buffers, i) {
    buffer_t *b = e->buffers.vals[i];
    if (b->kind == ACXI_MEM_SHAREABLE && b->import == IMPORT_NONE) shared_remove(b->ptr); /* even when lost */
    if (live) {
      if (b->kind == ACXI_MEM_DEVICE) (void)cudaFreeAsync(b->ptr, e->streams[0]);
      else if (b->import != IMPORT_ALIAS) (void)free_now(b->ptr, b->import == IMPORT_IPC);
    }
    track_fini(e, &b->t);
    free(b);
  }
  IDMAP_FOREACH(&e->regions, i) region_free(e, e->regions.vals[i], live);
  while (e->retiring) {
    region_t *r = e->retiring;
    e->retiring = r->next;
    region_free(e, r, live);
  }
  IDMAP_FOREACH(&e->events, i) {
    user_event_t *u = e->events.vals[i];
    if (live) (void)cudaEventDestroy(u->ev);
    free(u);
  }
  if (live) {
    /* The frees above are stream-ordered: let them land before the pool is trimmed. */
    (void)drain_streams(e, "engine destroy");
    (void)cudaMemPoolTrimTo(e->pool, 0);
    for (size_t i = 0; i < e->ev_count; i++) (void)cudaEventDestroy(e->ev_free[i]);
    for (int i = 0; i < e->nstreams; i++) (void)cudaStreamDestroy(e->streams[i]);
    (void)cudaGetLastError();
  }
  for (int i = 0; i < e->nstreams; i++) {
    free(e->queues[i].v);
    free(e->queues[i].m);
  }
  free(e->queues);
  free(e->streams);
  free(e->ev_free);
  free(e->acc);
  idmap_fini(&e->buffers);
  idmap_fini(&e->regions);
  idmap_fini(&e->events);
}

static void cuda_destroy(acxi_engine_t *e) {
  if (!e) return;
  if (!e->poisoned && bind_device(e) == ACX_OK) {
    int64_t deadline = acxi_deadline(acxi_param_int("ACX_EXEC_TIMEOUT_MS") * 1000000);
    while (cuda_in_flight(e) > 0 && !e->poisoned && acxi_now_ns() < deadline) {
      if (cuda_progress(e) == 0) acxi_cpu_relax();
    }
  }
  for (int i = 0; i < acxi_ext_count(); i++) {
    const acxi_ext_ops_t *x = acxi_ext_at(i);
    if (x->engine_destroy) x->engine_destroy(e, &engine_api);
  }
  uint64_t left = cuda_in_flight(e);
  if (left > 0) {
    /* Host-function callbacks may still run and touch e: leave it to them. Only after a deadline
     * passed with work still queued, so a hung GPU costs memory, not a crash. */
    ACX_WARN(EXEC, "cuda engine destroyed with %" PRIu64 " commands still in flight after ACX_EXEC_TIMEOUT_MS; "
             "its memory is left to them", left);
    return;
  }
  release_all(e);
  pthread_mutex_destroy(&e->hf_lock);
  free(e);
}

/* ---------------------------------------------------------------------------------------------
 * The extension API: executor-side handlers reach buffers, regions and streams through it. */

static acx_status_t api_buffer(acxi_engine_t *e, uint64_t id, void **ptr, uint64_t *bytes) {
  buffer_t *b = (id == KEY_EMPTY || id == KEY_TOMB) ? NULL : idmap_get(&e->buffers, id);
  if (!b) {
    ACX_WARN(EXEC, "extension: buffer id %" PRIu64 " is unknown", id);
    return ACX_ERR_UNKNOWN_BUFFER;
  }
  if (ptr) *ptr = b->ptr;
  if (bytes) *bytes = b->bytes;
  return ACX_OK;
}

static acx_status_t api_host_region(acxi_engine_t *e, uint64_t id, void **ptr, uint64_t *bytes) {
  region_t *r = (id == KEY_EMPTY || id == KEY_TOMB) ? NULL : idmap_get(&e->regions, id);
  if (!r) {
    ACX_WARN(EXEC, "extension: host region %" PRIu64 " is not registered", id);
    return ACX_ERR_INVALID_ARG;
  }
  if (ptr) *ptr = r->addr;
  if (bytes) *bytes = r->bytes;
  return ACX_OK;
}

static void *api_stream(acxi_engine_t *e, uint32_t idx) {
  return idx < (uint32_t)e->nstreams ? (void *)e->streams[idx] : NULL;
}

static void api_order_access(acxi_engine_t *e, uint64_t id, uint32_t stream, int writes) {
  buffer_t *b = (id == KEY_EMPTY || id == KEY_TOMB) ? NULL : idmap_get(&e->buffers, id);
  if (!b || stream >= (uint32_t)e->nstreams) {
    ACX_WARN(EXEC, "extension: order_access(buffer %" PRIu64 ", stream %u) names no buffer or stream", id, stream);
    return;
  }
  if (e->poisoned) return;
  /* The event is recorded after the extension's submit returns, i.e. after its work. */
  (void)order(e, &b->t, (int)stream, writes != 0, 1);
}

static acx_status_t api_order_external(acxi_engine_t *e, uint64_t id, void *stream, int writes) {
  buffer_t *b = (id == KEY_EMPTY || id == KEY_TOMB) ? NULL : idmap_get(&e->buffers, id);
  if (!b) {
    ACX_WARN(EXEC, "extension: order_external(buffer %" PRIu64 ") names no buffer", id);
    return ACX_ERR_UNKNOWN_BUFFER;
  }
  if (e->poisoned) return ACX_ERR_DEVICE_LOST;
  cudaStream_t s = stream;
  track_t *t = &b->t;
  if (e->nstreams == 1) {
    /* One engine stream keeps no per-buffer events: after everything in it, then. */
    cudaEvent_t ev;
    ACXCHECK(event_get(e, &ev));
    cudaError_t err = cudaEventRecord(ev, e->streams[0]);
    if (err == cudaSuccess) err = cudaStreamWaitEvent(s, ev, 0);
    event_put(e, ev);
    CUDACHECK(err);
    return ACX_OK;
  }
  if (t->writer >= 0) CUDACHECK(cudaStreamWaitEvent(s, t->write_ev, 0));
  if (writes && t->readers)
    for (int r = 0; r < e->nstreams; r++)
      if (t->readers & (1ull << r)) CUDACHECK(cudaStreamWaitEvent(s, t->read_ev[r], 0));
  return ACX_OK;
}

static void api_complete(acxi_engine_t *e, const acxi_cpl_t *cpl) { e->complete(e->sink, cpl); }

static void api_complete_after(acxi_engine_t *e, uint32_t stream, const acxi_cmd_t *cmd) {
  acxi_cpl_t cpl = {.req_id = cmd->req_id};
  acx_status_t st;
  if (e->poisoned) st = lost_status(e);
  else if (stream >= (uint32_t)e->nstreams) {
    ACX_WARN(EXEC, "extension: complete_after(stream %u) is out of range", stream);
    st = ACX_ERR_INVALID_ARG;
  } else {
    /* The extension's accesses must be recorded before the completion event, or a reader
     * released by this completion could race the writer's event record. */
    st = flush_accesses(e);
    if (st == ACX_OK && !e->poisoned) st = defer(e, (int)stream, &cpl, cmd->flags, NULL, 0);
    if (st == ACX_OK && !e->poisoned) return;
  }
  finish(e, cmd, st, &cpl);
}

static void **api_ext_state(acxi_engine_t *e, int slot) {
  return slot >= 0 && slot < ACXI_EXT_MAX ? &e->ext_state[slot] : NULL;
}

static const acxi_engine_params_t *api_params(acxi_engine_t *e) { return &e->params; }
static void cuda_set_generation(acxi_engine_t *e, uint64_t generation) { e->params.generation = generation; }

static const acxi_engine_api_t engine_api = {
    .buffer = api_buffer,
    .host_region = api_host_region,
    .stream = api_stream,
    .order_access = api_order_access,
    .order_external = api_order_external,
    .complete = api_complete,
    .complete_after = api_complete_after,
    .ext_state = api_ext_state,
    .params = api_params,
};

static const acxi_engine_ops_t cuda_engine_ops = {
    .kind = "cuda",
    .create = cuda_create,
    .destroy = cuda_destroy,
    .submit = cuda_submit,
    .progress = cuda_progress,
    .in_flight = cuda_in_flight,
    .host_region_add = cuda_host_region_add,
    .host_region_remove = cuda_host_region_remove,
    .host_region_busy = cuda_host_region_busy,
    .poisoned = cuda_poisoned,
    .set_generation = cuda_set_generation,
};

__attribute__((constructor)) static void cuda_engine_register(void) { acxi_engine_register(&cuda_engine_ops); }
