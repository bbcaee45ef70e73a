/* Remote buffer access through tokens: the requester's side (a table of requests by tag, each
 * with its deadline) and the owner's (acxi_token_resolve on every request, then the bytes), as
 * handlers of the control plane. Remote traffic never shares a communicator, or an order, with
 * the collectives. The bytes move one of three ways:
 *
 * Channels (both buffers on cuda devices): GPU to GPU through NCCL. A channel is a two-rank NCCL
 * communicator that carries one requester's requests to one owner (the requester is NCCL rank 1,
 * the owner rank 0), in a private stream of each executor (kernels/nccl/nccl_exec.c says why a
 * shared stream could deadlock). The requester opens it: it makes the ncclUniqueId, starts its
 * side, and sends CHAN_OPEN ahead of the first request flagged CHANNEL; the owner starts its side
 * on the device of the first buffer such a request names. Order: the owner issues its send (a get)
 * or receive (a put) while serving the request, then replies; the requester issues the matching
 * receive or send when the reply comes. Replies from one owner arrive in the order sent (MPI's
 * non-overtaking rule, one communicator and tag), so both sides issue the channel's operations in
 * the owner's serving order. Whatever could break that order (a request that passed its deadline
 * before its reply, a failed transfer) closes the channel; the next request opens a new one, and
 * a CHAN_OPEN replaces the owner's old channel with the sender.
 *
 * The device path (both buffers on cuda devices and the owner bound to this rank's GPU, where
 * NCCL makes no two-rank communicator; ACX_REMOTE_TRANSPORT=ipc: any owner on this node, host kind
 * included): the requester keeps a shareable staging buffer per (its device, owner), made on the
 * local buffer's device, re-made larger or after that device's generation moved, and sends its
 * handle in IPC_OPEN ahead of the first request flagged IPC that names it (again in each new
 * world epoch: the owner drops its imports at a rebuild). The owner maps it into the executor of
 * the first buffer such a request names (again on another device or generation) and copies
 * between its buffer and the staging on the device while serving, then replies; a put's bytes
 * were copied into the staging before the request, a get's are copied out on the reply. Order: as
 * for channels, the IPC_OPEN and the requests after it go under chan_lock on one communicator, and
 * the owner's server thread handles them in arrival order. One request at a time per staging
 * buffer: while it is busy, requests to that owner take MPI. One that ended without the owner
 * being done with it (expired, failed copy, cancelled), or one replaced by a larger one, is
 * retired, kept until acx_remote_stop, which frees staging buffers only after the collective
 * release, once every owner has dropped its imports.
 *
 * MPI (host device kind, a buffer not on a GPU, ACX_REMOTE_TRANSPORT=mpi, a busy staging buffer):
 * staged through host memory and sent as MPI messages on the control plane's communicator under a
 * tag derived from the request's.
 *
 * Threads. The control plane's progress thread runs the handlers: it checks requests (the owner's
 * check needs no device), answers refusals, matches replies and posts MPI transfers. It never
 * waits for a device: everything that does (reads and writes of buffers, a channel's start, its
 * operations, its end, the device path's imports and copies) is a job for this module's server
 * thread, which runs them one at a time in
 * the order they were queued. One thread keeps the channel order above: the owner's CHAN_OPEN and
 * its accepted channel requests are served in arrival order, and the requester issues its side
 * of accepted requests in the order of their replies. A refusal moves nothing on a channel, so it
 * is answered at once, ahead of slower requests. Requests being served are bounded
 * (MAX_SERVING); beyond that a request is refused with ACX_ERR_QUEUE_FULL.
 *
 * Revocation. A request that passed the owner's check is an admission (acxi_token_admit); each
 * access of the buffer (the read of a get, the write of a put's bytes, a channel transfer) is
 * bracketed by acxi_token_access_begin/end, which checks again that the export is live and the
 * epoch current. acx_buffer_unexport and the rebuild's epoch move wait for accesses under way. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acx/remote.h"
#include "acx_build_config.h"
#include "collectives/coll_internal.h"
#include "collectives/remote/ctrl_plane.h"
#include "collectives/remote/remote_internal.h"
#include "collectives/world_internal.h"
#include "runtime/device/buffer.h"
#include "runtime/base/clock.h"
#include "runtime/device/device_internal.h"
#include "runtime/base/log.h"
#include "runtime/base/param.h"
#include "runtime/proto/token_internal.h"

#define MAX_IN_FLIGHT 4096
#define MAX_SERVING 4096 /* requests of other ranks admitted here and not finished */
#define SERVER_NAP_NS 100000 /* the server's poll of channel transfers in flight */
#define STAGING_MIN (64u << 10) /* the smallest staging buffer of the device path */
#define MAX_IMPORTS_PER_PEER 16 /* owner: staging buffers one requester may have open here */
/* Statuses of a request the owner refused on its checks: nothing moved, the channel is intact. */
#define VERDICT(st)                                                                                \
  ((st) == ACX_ERR_BAD_TOKEN || (st) == ACX_ERR_STALE_TOKEN || (st) == ACX_ERR_DENIED ||           \
   (st) == ACX_ERR_OUT_OF_RANGE || (st) == ACX_ERR_INVALID_ARG)

struct remote;

/* A two-rank NCCL channel with one peer (see the top of the file). */
typedef struct chan {
  struct chan *next;
  int peer;
  int owner_side;      /* 1: carries the peer's requests to this rank (NCCL rank 0); 0: this rank's
                          requests to the peer (rank 1) */
  uint64_t number;     /* the requester's number for it (its communicator id there) */
  uint64_t comm_id;    /* this executor's communicator; 0 on the owner side before its first use */
  acx_device_t *dev;   /* held once comm_id is set */
  uint64_t generation; /* dev's generation at the INIT */
  uint64_t epoch;      /* requester side: the world epoch it was opened in */
  acx_token_t reach;   /* requester side: the owner device it reaches (devid_type, device) */
  acx_host_mem_t *region; /* the INIT's host region (it carries the ncclUniqueId) */
  unsigned char nccl_id[ACXC_NCCL_ID_BYTES];
  int failed;
} chan_t;

/* Requester side of the device path: a shareable staging buffer of this rank for the requests to
 * one owner from local buffers on one device (see the top of the file). */
typedef struct stg {
  struct stg *next;
  int peer;
  acx_device_t *dev;   /* the local buffers' device, where it lives (buf holds it) */
  acx_buffer_t *buf;   /* acxi_buffer_alloc_shareable's */
  uint64_t number;     /* the slot's number (peer, dev), kept when it is re-made */
  uint64_t bytes;
  uint64_t generation; /* dev's generation at the allocation */
  uint64_t epoch;      /* the world epoch of its last IPC_OPEN */
  int opened;          /* an IPC_OPEN for this allocation was sent */
  int busy;            /* a request uses it (one at a time) */
  acxi_ipc_handle_t h;
} stg_t;

/* Owner side of the device path: a requester's staging buffer, mapped into the executor of the
 * device of the buffers its requests name. */
typedef struct imp {
  struct imp *next;
  int peer;
  uint64_t number, bytes; /* the IPC_OPEN's */
  uint64_t serial;        /* this rank's id of the entry (a replaced one gets a new one) */
  acxi_ipc_handle_t h;    /* kept to map it again on another device or generation */
  acx_buffer_t *buf;      /* the import (held); NULL until a request names a device */
  uint64_t generation;    /* buf's device's generation at the import */
} imp_t;

/* A channel operation in the executor: a requester's receive/send, or an owner's send/receive. */
typedef struct xfer {
  struct xfer *next;
  acx_future_t *f; /* the executor operation's (held) */
  int64_t deadline_ns;
  int peer, owner_side;
  uint64_t comm_id;
  int aborted;
  struct rop *r; /* requester side */
  /* owner side */
  acx_buffer_t *buf;      /* held */
  acxi_token_adm_t *adm;  /* its access is under way until the transfer ends */
  int is_put, dtag_out;
  uint64_t bytes;
} xfer_t;

/* One request of this rank. In the table while it waits for the owner's reply; out of it (owned by
 * the control plane's callbacks) while its bytes move. */
typedef struct rop {
  struct rop *next;
  uint64_t tag;
  uint64_t chan; /* the channel's communicator id when the bytes move on it, else 0 */
  stg_t *stg;    /* the staging buffer when they move on the device path (busy for it), else NULL */
  int is_put, owner, dtag_in, dtag_out, pending;
  acx_status_t first_error;
  acx_future_t *future; /* held */
  acx_buffer_t *local;  /* held */
  uint64_t local_off, bytes;
  unsigned char *staging; /* malloc; NULL once the control plane took it */
  unsigned char *ack;     /* put: the owner's 4-byte status */
  int64_t deadline_ns;
  struct remote *rm;
} rop_t;

/* A put this rank serves: the bytes are on their way in. */
typedef struct oput {
  acx_buffer_t *buf; /* held */
  acxi_token_adm_t *adm;
  uint64_t off, bytes;
  int requester, dtag_in, dtag_out; /* bytes in from the requester, status back */
  unsigned char *staging;
  struct remote *rm;
} oput_t;

/* Work for the server thread (see the top of the file). */
typedef enum jkind {
  J_SERVE,      /* owner: an admitted GET through MPI (read, reply, bytes) or CHANNEL request */
  J_PUT_LAND,   /* owner: a put's bytes arrived through MPI: write them */
  J_CHAN_OPEN,  /* owner: a requester's new channel */
  J_GET_LAND,   /* requester: a get's bytes arrived through MPI: write them into local */
  J_REPLY_CHAN, /* requester: the owner accepted a channel request: this side's operation */
  J_CHAN_FREE,  /* a channel closed on the progress thread: its end in the executor */
  J_IPC_OPEN,   /* owner: a requester's new staging buffer */
  J_IPC_LAND    /* requester: the owner copied a get's bytes into the staging: into local */
} jkind_t;

typedef struct job {
  struct job *next;
  jkind_t kind;
  acxi_ctrl_msg_t m;     /* J_SERVE, J_CHAN_OPEN, J_IPC_OPEN */
  acx_buffer_t *buf;     /* J_SERVE: held */
  acxi_token_adm_t *adm; /* J_SERVE */
  oput_t *o;             /* J_PUT_LAND */
  struct rop *r;         /* J_GET_LAND, J_REPLY_CHAN, J_IPC_LAND */
  struct chan *ch;       /* J_CHAN_FREE */
} job_t;

typedef struct remote {
  struct remote *next;
  acx_world_t *world;
  acxc_ctrl_t *cp;
  int64_t timeout_ns;
  pthread_mutex_t lock;
  rop_t *ops;
  int nops;
  _Atomic int inflight; /* requests and served puts owned by control-plane callbacks */
  _Atomic uint64_t next_tag;
  _Atomic uint64_t gets, puts, served, refused, failed, bytes_in, bytes_out, channel_xfers, channels_opened;
  int use_channels;          /* ACX_REMOTE_TRANSPORT allows them and NCCL is built in */
  pthread_mutex_t chan_lock; /* requester side: channel choice through the request's send */
  chan_t *chans;             /* under lock */
  xfer_t *xfers;             /* the server thread's (and acx_remote_stop's once it has stopped) */
  _Atomic int serving;       /* admitted requests of other ranks not finished (MAX_SERVING) */
  int ipc_mode;              /* IPC_NEVER, IPC_AUTO, IPC_FORCED (ACX_REMOTE_TRANSPORT) */
  int node;                  /* this rank's node (acx_world_node) */
  unsigned char *on_node;    /* [world rank]: 1 when on this rank's node (the world's local_comm) */
  stg_t *stgs;               /* requester side, under lock */
  stg_t *stg_dead;           /* under lock: retired staging buffers an owner may still map; freed at
                                acx_remote_stop, once every owner has dropped its imports */
  uint64_t next_stg;         /* under chan_lock */
  imp_t *imps;               /* owner side, under lock */
  uint64_t next_imp;         /* under lock */
  _Atomic uint64_t ipc_requested, ipc_served;

  /* The server thread and its queue. */
  pthread_t server;
  pthread_mutex_t jlock;
  pthread_cond_t jcond; /* a job, or stop */
  job_t *jhead, *jtail;
  int jstop;            /* under jlock: no more jobs; the server cancels what is queued */
} remote_t;

enum { IPC_NEVER, IPC_AUTO, IPC_FORCED };

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static remote_t *registry;

static remote_t *remote_of(const acx_world_t *w) {
  pthread_mutex_lock(&registry_lock);
  remote_t *rm = registry;
  while (rm && rm->world != w) rm = rm->next;
  pthread_mutex_unlock(&registry_lock);
  return rm;
}

int acxc_remote_running(const acx_world_t *w) { return remote_of(w) != NULL; }

static void add(_Atomic uint64_t *c, uint64_t n) { atomic_fetch_add_explicit(c, n, memory_order_relaxed); }

static void put_status(unsigned char *p, acx_status_t st) { acxi_put_le32(p, (uint32_t)st); }

/* ------------------------------------------------------------------------------------------ */
/* channels                                                                                   */

static int same_device_id(const acx_token_t *a, const acx_token_t *b) {
  return a->devid_type == b->devid_type && memcmp(&a->device, &b->device, sizeof a->device) == 0;
}

static int on_gpu(const acx_buffer_t *b) { return b->dev->kind_id == ACXI_KIND_CUDA; }

/* Tells the executor to drop the channel's communicator and frees what the channel holds. A
 * failed channel is aborted first (operations in flight fail at once); a healthy one (remote
 * access stopping) is finalized, which is quicker than NCCL's abort. Not under rm->lock
 * (acx_host_free waits for the executor). */
static void chan_free(chan_t *ch) {
  if (ch->comm_id && ch->dev) {
    acxi_cmd_t ab = {.op = ACXC_OP_ABORT, .arg = {ch->comm_id, ACX_ERR_CANCELLED}};
    acxi_cmd_t de = {.op = ACXC_OP_DESTROY, .arg = {ch->comm_id, 0, 0, 0, 1000}};
    int64_t dl = acxi_deadline(acxi_device_timeout(ch->dev, -1));
    if (ch->failed) (void)acxi_device_submit(ch->dev, &ab, NULL, 0, 0, -1, dl, NULL);
    (void)acxi_device_submit(ch->dev, &de, NULL, 0, 0, -1, dl, NULL);
  }
  if (ch->region) (void)acx_host_free(ch->region);
  if (ch->dev) acxi_device_release(ch->dev);
  free(ch);
}

/* Unlinks the channel of (peer, side) whose communicator is comm_id (0: any), marking it failed.
 * The caller frees what it gets. */
static chan_t *chan_unlink(remote_t *rm, int peer, int owner_side, uint64_t comm_id) {
  pthread_mutex_lock(&rm->lock);
  chan_t **pp = &rm->chans, *ch = NULL;
  while (*pp && !((*pp)->peer == peer && (*pp)->owner_side == owner_side && (!comm_id || (*pp)->comm_id == comm_id)))
    pp = &(*pp)->next;
  if (*pp) {
    ch = *pp;
    *pp = ch->next;
    ch->failed = 1;
  }
  pthread_mutex_unlock(&rm->lock);
  return ch;
}

static void chan_close(remote_t *rm, int peer, int owner_side, uint64_t comm_id, const char *why) {
  chan_t *ch = chan_unlink(rm, peer, owner_side, comm_id);
  if (!ch) return;
  ACX_INFO(COLL, "remote: channel %" PRIu64 " (%s rank %d) closed: %s", ch->number, owner_side ? "serving" : "to",
           peer, why);
  chan_free(ch);
}

/* chan_close for the progress thread, which must not wait for an executor: the channel is taken
 * out now and ended by the server thread. */
static void job_submit(remote_t *rm, const job_t *tmpl);

static void chan_close_later(remote_t *rm, int peer, int owner_side, uint64_t comm_id, const char *why) {
  chan_t *ch = chan_unlink(rm, peer, owner_side, comm_id);
  if (!ch) return;
  ACX_INFO(COLL, "remote: channel %" PRIu64 " (%s rank %d) closed: %s", ch->number, owner_side ? "serving" : "to",
           peer, why);
  job_submit(rm, &(job_t){.kind = J_CHAN_FREE, .ch = ch});
}

/* Starts this side's communicator of ch in dev's executor: a host region with the id (made by
 * this executor when make_id: the opening side), then INIT
 * (fire-and-forget: a failed INIT fails the operations queued behind it). */
static acx_status_t chan_start(remote_t *rm, chan_t *ch, acx_device_t *dev, int nccl_rank, int make_id) {
  acx_status_t st = acx_host_alloc(dev, sizeof(acxc_region_t), &ch->region);
  void *p = NULL;
  size_t bytes = 0;
  if (st == ACX_OK) st = acx_host_mem_ptr(ch->region, &p, &bytes);
  if (st != ACX_OK) return st;
  acxc_region_t *reg = p;
  memset(reg, 0, offsetof(acxc_region_t, slots));
  reg->magic = ACXC_REGION_MAGIC;
  if (make_id) {
    /* This side's executor makes the id (and hosts NCCL's bootstrap root); the peer gets it in
     * CHAN_OPEN. */
    st = acxc_nccl_make_id(dev, ch->region);
    if (st != ACX_OK) return st;
    memcpy(ch->nccl_id, reg->nccl_id, sizeof ch->nccl_id);
  } else {
    memcpy(reg->nccl_id, ch->nccl_id, sizeof reg->nccl_id);
  }
  acxi_device_hold(dev);
  pthread_mutex_lock(&rm->lock); /* acxc_remote_retire reads them from another thread */
  ch->comm_id = acxc_next_comm_id();
  ch->dev = dev;
  ch->generation = atomic_load_explicit(&dev->generation, memory_order_acquire);
  pthread_mutex_unlock(&rm->lock);
  acxi_cmd_t cmd = {.op = ACXC_OP_INIT,
                    .off = {ACXC_INIT_PRIVATE_STREAM},
                    .arg = {ch->comm_id, 2, (uint64_t)nccl_rank, ch->region->id,
                            (uint64_t)acxi_param_int("ACX_NCCL_INIT_TIMEOUT")}};
  return acxi_device_submit(dev, &cmd, NULL, 0, 0, -1, acxi_deadline(acxi_device_timeout(dev, -1)), NULL);
}

/* One operation on a channel: send (a get's bytes at the owner, a put's at the requester) or
 * receive, of buf[off, +bytes); *f completes when the executor has it done. */
static acx_status_t chan_op(const chan_t *ch, int send, acx_buffer_t *buf, uint64_t off, uint64_t bytes,
                            int64_t deadline_ns, acx_future_t **f) {
  int64_t ms = (deadline_ns - acxi_now_ns()) / 1000000;
  acxi_cmd_t cmd = {.op = send ? ACXC_OP_SEND : ACXC_OP_RECV, .dtype = ACX_DTYPE_BYTE, .bytes = bytes,
                    .arg = {ch->comm_id, 0, (uint64_t)(ch->owner_side ? 1 : 0), 0, (uint64_t)(ms > 0 ? ms : 1)}};
  cmd.buf[send ? 0 : 1] = buf->id;
  cmd.off[send ? 0 : 1] = off;
  acxi_bufarg_t ba = {buf, send ? "send" : "recv"};
  return acxi_device_submit(ch->dev, &cmd, &ba, 1, 0, -1, deadline_ns, f);
}

static acx_status_t xfer_add(remote_t *rm, const chan_t *ch, acx_future_t *f, int64_t deadline_ns, xfer_t **out) {
  xfer_t *x = calloc(1, sizeof *x);
  if (!x) return ACX_ERR_NO_MEMORY;
  *x = (xfer_t){.f = f, .deadline_ns = deadline_ns, .peer = ch->peer, .owner_side = ch->owner_side,
                .comm_id = ch->comm_id, .next = rm->xfers};
  rm->xfers = x;
  atomic_fetch_add_explicit(&rm->inflight, 1, memory_order_relaxed);
  *out = x;
  return ACX_OK;
}

/* The requester's channel to `owner` for a request from local to the device t names, opened when
 * there is none or the one there no longer fits; *comm_id = 0 when the bytes go through MPI.
 * Under rm->chan_lock. */
static acx_status_t chan_for_request(remote_t *rm, const acx_token_t *t, acx_buffer_t *local, uint64_t *comm_id) {
  *comm_id = 0;
  if (!rm->use_channels || t->devid_type == ACX_TOKEN_DEVID_NONE || !on_gpu(local)) return ACX_OK;
  /* NCCL makes no two-rank communicator on one GPU: a peer on this rank's GPU is reached on the
   * device path, or through MPI while its staging buffer is busy. */
  if (acxc_world_shares_gpu(rm->world, t->owner_rank)) return ACX_OK;
  uint64_t epoch = 0;
  acx_world_epoch(rm->world, &epoch);
  pthread_mutex_lock(&rm->lock);
  chan_t *ch = rm->chans;
  while (ch && !(ch->peer == t->owner_rank && !ch->owner_side)) ch = ch->next;
  int fits = ch && !ch->failed && ch->dev == local->dev && ch->epoch == epoch && same_device_id(&ch->reach, t) &&
             ch->generation == atomic_load_explicit(&local->dev->generation, memory_order_acquire);
  /* Taken under the lock: the progress thread may close (and free) ch once it is released. */
  uint64_t old = ch ? ch->comm_id : 0;
  pthread_mutex_unlock(&rm->lock);
  if (fits) {
    *comm_id = old;
    return ACX_OK;
  }
  if (ch) chan_close(rm, t->owner_rank, 0, old, "replaced (device, generation or epoch moved, or it failed)");

  ch = calloc(1, sizeof *ch);
  if (!ch) return ACX_ERR_NO_MEMORY;
  ch->peer = t->owner_rank;
  ch->epoch = epoch;
  ch->reach.devid_type = t->devid_type;
  ch->reach.device = t->device;
  acx_status_t st = chan_start(rm, ch, local->dev, 1, 1);
  ch->number = ch->comm_id;
  acxi_ctrl_msg_t m = {.type = ACXI_CTRL_CHAN_OPEN, .u.chan = {.channel = ch->number}};
  memcpy(m.u.chan.nccl_id, ch->nccl_id, sizeof m.u.chan.nccl_id);
  if (st == ACX_OK) st = acxc_ctrl_send(rm->cp, ch->peer, &m, NULL, NULL);
  if (st != ACX_OK) {
    ACX_WARN(COLL, "remote: opening a channel to rank %d failed: %s", ch->peer, acx_status_name(st));
    ch->failed = 1; /* an INIT may be waiting for a peer that will never come: abort it */
    chan_free(ch);
    return st;
  }
  add(&rm->channels_opened, 1);
  ACX_INFO(COLL, "remote: channel %" PRIu64 " to rank %d opened", ch->number, ch->peer);
  pthread_mutex_lock(&rm->lock);
  ch->next = rm->chans;
  rm->chans = ch;
  pthread_mutex_unlock(&rm->lock);
  *comm_id = ch->comm_id;
  return ACX_OK;
}

static void imps_drop(remote_t *rm, int peer);

void acxc_remote_retire(acx_world_t *world) {
  remote_t *rm = remote_of(world);
  if (!rm) return;
  /* Marked and aborted here; unlinked and freed by their usual paths (a failed channel is replaced
   * by the next request, or by the requester's next CHAN_OPEN on the owner's side). */
  struct {
    uint64_t comm_id;
    acx_device_t *dev;
  } ab[64];
  int n = 0, more = 0;
  pthread_mutex_lock(&rm->lock);
  for (chan_t *ch = rm->chans; ch; ch = ch->next) {
    if (ch->failed) continue;
    ch->failed = 1;
    if (!ch->comm_id) continue;
    if (n == 64) {
      more = 1;
      continue;
    }
    acxi_device_hold(ch->dev);
    ab[n].comm_id = ch->comm_id;
    ab[n++].dev = ch->dev;
  }
  pthread_mutex_unlock(&rm->lock);
  for (int i = 0; i < n; i++) {
    acxi_cmd_t cmd = {.op = ACXC_OP_ABORT, .arg = {ab[i].comm_id, ACX_ERR_WORLD_REBUILDING}};
    (void)acxi_device_submit(ab[i].dev, &cmd, NULL, 0, 0, -1, acxi_deadline(acxi_device_timeout(ab[i].dev, -1)), NULL);
    acxi_device_release(ab[i].dev);
  }
  if (n || more)
    ACX_INFO(COLL, "remote: world rebuilding: %d channel(s) aborted%s", n, more ? " (more were marked failed)" : "");
  /* The owner's imports go; requesters send IPC_OPEN again in the new epoch (ipc_for_request). */
  imps_drop(rm, -1);
}

/* ------------------------------------------------------------------------------------------ */
/* the device path (ipc)                                                                      */

/* Frees a staging buffer no request uses and no owner will touch again. Not under rm->lock. */
static void stg_free(stg_t *g) {
  if (g->buf) acx_buffer_release(g->buf);
  free(g);
}

/* A request on g is over. reusable: the owner is done with the bytes (the request succeeded, or
 * was refused before any copy); otherwise (it expired, failed in a copy, was cancelled) the owner
 * may still be copying, so g is retired: kept, unused, until acx_remote_stop. Any thread. */
static void stg_done(remote_t *rm, stg_t *g, int reusable) {
  pthread_mutex_lock(&rm->lock);
  if (reusable) {
    g->busy = 0;
  } else {
    stg_t **pp = &rm->stgs;
    while (*pp && *pp != g) pp = &(*pp)->next;
    if (*pp) *pp = g->next;
    g->next = rm->stg_dead;
    rm->stg_dead = g;
  }
  pthread_mutex_unlock(&rm->lock);
}

/* Whether a request from local to the buffer t names takes the device path. IPC_FORCED refuses an
 * owner on another node (ACX_ERR_NOT_SUPPORTED, logged); *use = 0: another path. */
static acx_status_t ipc_wanted(remote_t *rm, const acx_token_t *t, const acx_buffer_t *local, int *use) {
  *use = 0;
  if (rm->ipc_mode == IPC_NEVER) return ACX_OK;
  /* The token's device identity is set for GPU buffers only (a host-kind one has none). */
  int owner_gpu = t->devid_type != ACX_TOKEN_DEVID_NONE;
  if (rm->ipc_mode == IPC_AUTO) {
    *use = on_gpu(local) && owner_gpu && acxc_world_shares_gpu(rm->world, t->owner_rank);
    return ACX_OK;
  }
  /* The world's placement, not the token's node: a misrouted token is the owner's to refuse. */
  if (!rm->on_node[t->owner_rank]) {
    ACX_WARN(COLL, "remote: ACX_REMOTE_TRANSPORT=ipc: rank %d is on another node (node %d by its token) than this "
             "rank (node %d): the device path reaches owners on this rank's node only; the request is refused",
             t->owner_rank, (int)t->node, rm->node);
    return ACX_ERR_NOT_SUPPORTED;
  }
  if (on_gpu(local) != owner_gpu) {
    ACX_INFO(COLL, "remote: ACX_REMOTE_TRANSPORT=ipc: the local buffer is on a %s device, rank %d's on a %s one: "
             "through MPI (a staging buffer maps into executors of its own kind only)", local->dev->kind,
             t->owner_rank, owner_gpu ? "GPU" : "host-kind");
    return ACX_OK;
  }
  *use = 1;
  return ACX_OK;
}

/* The requester's staging buffer to t's owner for a request of `bytes` from local: made on
 * local's device when there is none, re-made when it is too small or the device's generation
 * moved, its IPC_OPEN sent when it has none in this world epoch, then marked busy. *out = NULL:
 * the bytes go another way (not the device path, the staging buffer is busy with another request,
 * or it could not be made: logged). Under rm->chan_lock: the IPC_OPEN precedes the request. */
static acx_status_t ipc_for_request(remote_t *rm, const acx_token_t *t, acx_buffer_t *local, uint64_t bytes,
                                    stg_t **out) {
  *out = NULL;
  int use = 0;
  ACXCHECK(ipc_wanted(rm, t, local, &use));
  if (!use) return ACX_OK;
  uint64_t epoch = 0, gen = atomic_load_explicit(&local->dev->generation, memory_order_acquire);
  acx_world_epoch(rm->world, &epoch);
  stg_t *old = NULL, *g;
  pthread_mutex_lock(&rm->lock);
  stg_t **pp = &rm->stgs;
  while (*pp && !((*pp)->peer == t->owner_rank && (*pp)->dev == local->dev)) pp = &(*pp)->next;
  g = *pp;
  if (g && g->busy) {
    pthread_mutex_unlock(&rm->lock);
    return ACX_OK; /* one device-path request per staging buffer: this one goes through MPI */
  }
  if (g && (g->generation != gen || g->bytes < bytes)) {
    *pp = g->next; /* replaced below */
    old = g;
    g = NULL;
    if (old->generation == gen) {
      /* Still mapped by the owner until the replacement's IPC_OPEN: kept until the stop. */
      old->next = rm->stg_dead;
      rm->stg_dead = old;
    }
  }
  if (g) g->busy = 1;
  pthread_mutex_unlock(&rm->lock);
  uint64_t number = old ? old->number : ++rm->next_stg;
  uint64_t grown = old ? 2 * old->bytes : 0;
  if (old && old->generation != gen) stg_free(old); /* its memory died with the old executor */
  if (!g) {
    g = calloc(1, sizeof *g);
    if (!g) return ACX_ERR_NO_MEMORY;
    g->peer = t->owner_rank;
    g->dev = local->dev;
    g->number = number;
    g->bytes = bytes > grown ? bytes : grown;
    if (g->bytes < STAGING_MIN) g->bytes = STAGING_MIN;
    g->generation = gen;
    g->busy = 1;
    acx_status_t st = acxi_buffer_alloc_shareable(local->dev, g->bytes, ACX_DTYPE_BYTE, rm->timeout_ns, &g->buf);
    if (st == ACX_OK) st = acxi_buffer_ipc_export(g->buf, &g->h, rm->timeout_ns);
    if (st != ACX_OK) {
      ACX_WARN(COLL, "remote: a %" PRIu64 "-byte staging buffer for rank %d could not be made (%s): this request goes "
               "through MPI", g->bytes, t->owner_rank, acx_status_name(st));
      stg_free(g);
      return ACX_OK;
    }
    pthread_mutex_lock(&rm->lock);
    g->next = rm->stgs;
    rm->stgs = g;
    pthread_mutex_unlock(&rm->lock);
    ACX_INFO(COLL, "remote: staging buffer %" PRIu64 " (%" PRIu64 " bytes) for rank %d made", g->number, g->bytes,
             g->peer);
  }
  if (!g->opened || g->epoch != epoch) {
    acxi_ctrl_msg_t m = {.type = ACXI_CTRL_IPC_OPEN, .u.ipc = {.staging = g->number, .bytes = g->bytes}};
    memcpy(m.u.ipc.handle, g->h.bytes, sizeof m.u.ipc.handle);
    acx_status_t st = acxc_ctrl_send(rm->cp, g->peer, &m, NULL, NULL);
    if (st != ACX_OK) {
      ACX_WARN(COLL, "remote: sending staging buffer %" PRIu64 " to rank %d failed: %s", g->number, g->peer,
               acx_status_name(st));
      stg_done(rm, g, 0);
      return st;
    }
    g->opened = 1; /* g is busy: this thread's alone */
    g->epoch = epoch;
  }
  *out = g;
  return ACX_OK;
}

/* Drops the owner's imports of `peer`'s staging buffers (-1: all). Not the progress thread (an
 * import's release goes to its executor). */
static void imps_drop(remote_t *rm, int peer) {
  imp_t *gone = NULL;
  pthread_mutex_lock(&rm->lock);
  imp_t **pp = &rm->imps;
  while (*pp) {
    imp_t *e = *pp;
    if (peer < 0 || e->peer == peer) {
      *pp = e->next;
      e->next = gone;
      gone = e;
    } else {
      pp = &e->next;
    }
  }
  pthread_mutex_unlock(&rm->lock);
  while (gone) {
    imp_t *e = gone;
    gone = e->next;
    if (e->buf) acx_buffer_release(e->buf);
    free(e);
  }
}

/* A requester's IPC_OPEN (server thread: after the requests it sent before, ahead of those it
 * sends after): replaces the import of that number; mapped when a request names a device. */
static void ipc_open(remote_t *rm, const acxi_ctrl_msg_t *m) {
  acx_buffer_t *old = NULL;
  int count = 0;
  pthread_mutex_lock(&rm->lock);
  imp_t *e = rm->imps;
  for (imp_t *i = rm->imps; i; i = i->next) count += i->peer == m->sender;
  while (e && !(e->peer == m->sender && e->number == m->u.ipc.staging)) e = e->next;
  if (!e && count >= MAX_IMPORTS_PER_PEER) {
    pthread_mutex_unlock(&rm->lock);
    ACX_WARN(COLL, "remote: rank %d has %d staging buffers open to this rank already: its staging buffer %" PRIu64
             " is not mapped, and its requests naming it will be refused", m->sender, count, m->u.ipc.staging);
    return;
  }
  if (!e && (e = calloc(1, sizeof *e)) != NULL) {
    e->peer = m->sender;
    e->number = m->u.ipc.staging;
    e->next = rm->imps;
    rm->imps = e;
  }
  if (e) {
    old = e->buf;
    e->buf = NULL;
    e->serial = ++rm->next_imp;
    e->bytes = m->u.ipc.bytes;
    memcpy(e->h.bytes, m->u.ipc.handle, sizeof e->h.bytes);
  }
  pthread_mutex_unlock(&rm->lock);
  if (old) acx_buffer_release(old);
  if (!e) {
    ACX_WARN(COLL, "remote: out of memory for rank %d's staging buffer %" PRIu64 "; its requests naming it will be "
             "refused", m->sender, m->u.ipc.staging);
    return;
  }
  ACX_INFO(COLL, "remote: rank %d opened staging buffer %" PRIu64 " (%" PRIu64 " bytes) to this rank", m->sender,
           m->u.ipc.staging, m->u.ipc.bytes);
}

/* The import of `peer`'s staging buffer `number` in dev's executor, held for the caller: mapped on
 * first use, again when the device or its generation differs. Server thread. */
static acx_status_t ipc_import_for(remote_t *rm, int peer, uint64_t number, acx_device_t *dev, uint64_t bytes,
                                   acx_buffer_t **out) {
  *out = NULL;
  uint64_t gen = atomic_load_explicit(&dev->generation, memory_order_acquire);
  pthread_mutex_lock(&rm->lock);
  imp_t *e = rm->imps;
  while (e && !(e->peer == peer && e->number == number)) e = e->next;
  if (!e) {
    pthread_mutex_unlock(&rm->lock);
    ACX_WARN(COLL, "remote: rank %d named staging buffer %" PRIu64 ", which it has not opened to this rank", peer,
             number);
    return ACX_ERR_INVALID_STATE;
  }
  if (bytes > e->bytes) {
    uint64_t have = e->bytes;
    pthread_mutex_unlock(&rm->lock);
    ACX_WARN(COLL, "remote: rank %d asked for %" PRIu64 " bytes through its staging buffer %" PRIu64 " of %" PRIu64,
             peer, bytes, number, have);
    return ACX_ERR_INVALID_ARG;
  }
  if (e->buf && e->buf->dev == dev && e->generation == gen) {
    acx_buffer_hold(e->buf);
    *out = e->buf;
    pthread_mutex_unlock(&rm->lock);
    return ACX_OK;
  }
  acx_buffer_t *old = e->buf;
  e->buf = NULL;
  acxi_ipc_handle_t h = e->h;
  uint64_t serial = e->serial;
  pthread_mutex_unlock(&rm->lock);
  if (old) acx_buffer_release(old);
  acx_buffer_t *nb = NULL;
  acx_status_t st = acxi_buffer_ipc_import(dev, &h, ACX_DTYPE_BYTE, rm->timeout_ns, &nb);
  if (st != ACX_OK) {
    ACX_WARN(COLL, "remote: mapping rank %d's staging buffer %" PRIu64 " on this rank's %s device failed: %s", peer,
             number, dev->kind, acx_status_name(st));
    return st;
  }
  /* Kept for the next request unless a newer IPC_OPEN (or a rebuild) replaced the entry meanwhile:
   * then this request alone uses it. */
  pthread_mutex_lock(&rm->lock);
  e = rm->imps;
  while (e && !(e->peer == peer && e->number == number && e->serial == serial)) e = e->next;
  if (e && !e->buf) {
    acx_buffer_hold(nb);
    e->buf = nb;
    e->generation = gen;
  }
  pthread_mutex_unlock(&rm->lock);
  *out = nb;
  return ACX_OK;
}

/* The owner's copy of an admitted IPC request (its access begun): between its buffer and the
 * requester's staging, on the buffer's device. Server thread. */
static acx_status_t serve_ipc(remote_t *rm, const acxi_ctrl_msg_t *m, acx_buffer_t *buf, int is_put,
                              int64_t deadline) {
  acx_buffer_t *imp = NULL;
  uint64_t bytes = m->u.access.bytes, off = m->u.access.offset;
  ACXCHECK(ipc_import_for(rm, m->sender, m->u.access.staging, buf->dev, bytes, &imp));
  acx_status_t st = is_put ? acx_buffer_copy(buf, off, imp, 0, bytes, 0, acxi_left_ns(deadline))
                           : acx_buffer_copy(imp, 0, buf, off, bytes, 0, acxi_left_ns(deadline));
  acx_buffer_release(imp);
  if (st != ACX_OK) {
    ACX_WARN(COLL, "remote: serving rank %d's %s %" PRIu64 " through its staging buffer %" PRIu64 " failed: %s",
             m->sender, is_put ? "put" : "get", m->u.access.tag, m->u.access.staging, acx_status_name(st));
    return st;
  }
  add(is_put ? &rm->bytes_in : &rm->bytes_out, bytes);
  add(&rm->ipc_served, 1);
  return ACX_OK;
}

/* The owner copied a get's bytes into the staging buffer (server thread): into local. */
static void rop_finish(struct rop *r, acx_status_t st);

static void ipc_land(remote_t *rm, rop_t *r, acx_status_t st) {
  if (st == ACX_OK) st = acx_buffer_copy(r->local, r->local_off, r->stg->buf, 0, r->bytes, 0, acxi_left_ns(r->deadline_ns));
  if (st == ACX_OK) {
    add(&rm->bytes_in, r->bytes);
    add(&rm->ipc_requested, 1);
  }
  rop_finish(r, st);
}

void acxc_remote_ipc_counts(const acx_world_t *w, uint64_t *requested, uint64_t *served) {
  remote_t *rm = remote_of(w);
  if (requested) *requested = rm ? atomic_load(&rm->ipc_requested) : 0;
  if (served) *served = rm ? atomic_load(&rm->ipc_served) : 0;
}

/* ------------------------------------------------------------------------------------------ */
/* requester side                                                                             */

static void rop_finish(rop_t *r, acx_status_t st) {
  remote_t *rm = r->rm;
  if (st != ACX_OK) {
    add(&rm->failed, 1);
    ACX_INFO(COLL, "remote %s (tag %" PRIu64 ") of %" PRIu64 " bytes at rank %d: %s", r->is_put ? "put" : "get", r->tag,
             r->bytes, r->owner, acx_status_name(st));
  }
  /* The owner is done with the staging buffer when it answered OK (a get's bytes were then copied
   * out before this) or refused the request on its checks. */
  if (r->stg) stg_done(rm, r->stg, st == ACX_OK || VERDICT(st));
  acx_future_complete(r->future, st, NULL, 0);
  acx_future_release(r->future);
  acx_buffer_release(r->local);
  free(r->staging);
  free(r->ack);
  free(r);
}

/* Takes the request to `owner` with `tag` out of the table (NULL: none, e.g. it passed its
 * deadline). owner -1: any. */
static rop_t *rop_take(remote_t *rm, int owner, uint64_t tag) {
  pthread_mutex_lock(&rm->lock);
  rop_t **pp = &rm->ops, *r = NULL;
  while (*pp && !((*pp)->tag == tag && (owner < 0 || (*pp)->owner == owner))) pp = &(*pp)->next;
  if (*pp) {
    r = *pp;
    *pp = r->next;
    rm->nops--;
  }
  pthread_mutex_unlock(&rm->lock);
  return r;
}

/* A get's bytes are here (server thread): into local, and the request is done. st != ACX_OK:
 * they did not come, or the server is stopping. */
static void get_land(rop_t *r, acx_status_t st) {
  if (st == ACX_OK) st = acx_buffer_write(r->local, r->local_off, r->staging, r->bytes, 0, acxi_left_ns(r->deadline_ns));
  atomic_fetch_sub_explicit(&r->rm->inflight, 1, memory_order_release);
  rop_finish(r, st);
}

static void get_data_in(acxc_ctrl_t *cp, void *arg, acx_status_t st) {
  rop_t *r = arg;
  if (st != ACX_OK) {
    r->staging = NULL; /* the control plane keeps it */
    get_land(r, st);
    return;
  }
  add(&r->rm->bytes_in, r->bytes);
  job_submit(r->rm, &(job_t){.kind = J_GET_LAND, .r = r});
}

/* A put has two transfers (the bytes out, the owner's status in); the last one finishes it. */
static void put_step(rop_t *r, acx_status_t st) {
  if (st != ACX_OK && r->first_error == ACX_OK) r->first_error = st;
  if (--r->pending > 0) return;
  acx_status_t res = r->first_error != ACX_OK ? r->first_error : (acx_status_t)acxi_get_le32(r->ack);
  atomic_fetch_sub_explicit(&r->rm->inflight, 1, memory_order_release);
  rop_finish(r, res);
}

static void put_data_out(acxc_ctrl_t *cp, void *arg, acx_status_t st) {
  rop_t *r = arg;
  if (st != ACX_OK) r->staging = NULL;
  else add(&r->rm->bytes_out, r->bytes);
  put_step(r, st);
}

static void put_ack_in(acxc_ctrl_t *cp, void *arg, acx_status_t st) {
  rop_t *r = arg;
  if (st != ACX_OK) r->ack = NULL;
  put_step(r, st);
}

/* The owner accepted a channel request: this side's matching operation. */
static acx_status_t reply_on_channel(remote_t *rm, rop_t *r) {
  pthread_mutex_lock(&rm->lock);
  chan_t *ch = rm->chans;
  while (ch && !(ch->peer == r->owner && !ch->owner_side && ch->comm_id == r->chan)) ch = ch->next;
  chan_t snap = ch ? *ch : (chan_t){0};
  pthread_mutex_unlock(&rm->lock);
  /* The channel may be closed by another thread from here on: the local buffer's device reference
   * is the one to use (the same device: channels are chosen by it); an operation on a closed
   * channel fails in the executor. */
  snap.dev = r->local->dev;
  if (!ch || snap.failed) {
    ACX_WARN(COLL, "remote: rank %d accepted request %" PRIu64 " on channel %" PRIu64 ", which this rank has closed since",
             r->owner, r->tag, r->chan);
    return ACX_ERR_PEER_LOST;
  }
  acx_future_t *f = NULL;
  acx_status_t st = ACX_OK;
  if (r->is_put) {
    r->ack = malloc(4);
    r->pending = 2;
    st = r->ack ? acxc_ctrl_data_recv(rm->cp, r->owner, r->dtag_in, r->ack, 4, r->deadline_ns, put_ack_in, r)
                : ACX_ERR_NO_MEMORY;
    if (st != ACX_OK) {
      free(r->ack);
      r->ack = NULL;
      return st;
    }
  }
  st = chan_op(&snap, r->is_put, r->local, r->local_off, r->bytes, r->deadline_ns, &f);
  xfer_t *x = NULL;
  if (st == ACX_OK) st = xfer_add(rm, &snap, f, r->deadline_ns, &x);
  if (st == ACX_OK) {
    x->r = r;
    return ACX_OK;
  }
  if (f) acx_future_release(f);
  /* The owner's half is in its stream with nothing to match it here. */
  chan_close(rm, r->owner, 0, r->chan, "this side's operation could not be issued");
  if (r->is_put) {
    /* The ack receive is posted: it ends at the deadline and finishes the request then. */
    atomic_fetch_add_explicit(&rm->inflight, 1, memory_order_relaxed);
    put_step(r, st);
    return ACX_OK;
  }
  return st;
}

/* The owner accepted a channel request (server thread, in reply order): this side's operation. */
static void reply_chan(remote_t *rm, rop_t *r, acx_status_t st) {
  if (st == ACX_OK) st = reply_on_channel(rm, r);
  if (st != ACX_OK) {
    chan_close(rm, r->owner, 0, r->chan, "this side's operation could not be issued");
    rop_finish(r, st);
  }
}

/* The owner rank of a waiting request with `tag`, or -1. */
static int rop_owner_of(remote_t *rm, uint64_t tag) {
  pthread_mutex_lock(&rm->lock);
  const rop_t *r = rm->ops;
  while (r && r->tag != tag) r = r->next;
  int owner = r ? r->owner : -1;
  pthread_mutex_unlock(&rm->lock);
  return owner;
}

static void on_reply(acxc_ctrl_t *cp, void *arg, const acxi_ctrl_msg_t *m, acx_status_t decoded) {
  remote_t *rm = arg;
  /* A reply answers a request of its sender only: matched on (sender, tag), so no other rank can
   * end a request with a reply of its own making. */
  rop_t *r = rop_take(rm, m->sender, m->u.reply.tag);
  if (!r) {
    int owner = rop_owner_of(rm, m->u.reply.tag);
    if (owner >= 0) {
      ACX_WARN(COLL, "remote: a %s (%s) from rank %d names request %" PRIu64 ", which was sent to rank %d: not from "
               "its owner, dropped (the request still waits for rank %d)", acxi_ctrl_type_str(m->type),
               acx_status_name(m->u.reply.status), m->sender, m->u.reply.tag, owner, owner);
      return;
    }
    ACX_INFO(COLL, "remote: a %s from rank %d for tag %" PRIu64 ", which is not waiting (past its deadline?): dropped",
             acxi_ctrl_type_str(m->type), m->sender, m->u.reply.tag);
    /* If it went on the channel to that rank, the owner has an operation there that nothing here
     * matches: the channel's order is gone. */
    if (m->u.reply.status == ACX_OK) chan_close_later(rm, m->sender, 0, 0, "a late reply to a request that had expired");
    return;
  }
  int want_put = m->type == ACXI_CTRL_PUT_REPLY;
  if (r->is_put != want_put) {
    ACX_WARN(COLL, "remote: a %s from rank %d answers a %s (tag %" PRIu64 "): the request fails",
             acxi_ctrl_type_str(m->type), m->sender, r->is_put ? "put" : "get", r->tag);
    if (r->chan) chan_close_later(rm, r->owner, 0, r->chan, "a reply of the wrong type");
    rop_finish(r, ACX_ERR_MPI);
    return;
  }
  if (m->u.reply.status != ACX_OK) {
    if (r->chan && !VERDICT(m->u.reply.status))
      chan_close_later(rm, r->owner, 0, r->chan, acx_status_name(m->u.reply.status));
    rop_finish(r, m->u.reply.status);
    return;
  }
  if (r->chan) {
    job_submit(rm, &(job_t){.kind = J_REPLY_CHAN, .r = r});
    return;
  }
  if (r->stg) {
    /* The owner has copied: a put is done; a get's bytes wait in the staging buffer. */
    if (!r->is_put) {
      job_submit(rm, &(job_t){.kind = J_IPC_LAND, .r = r});
      return;
    }
    add(&rm->bytes_out, r->bytes);
    add(&rm->ipc_requested, 1);
    rop_finish(r, ACX_OK);
    return;
  }
  atomic_fetch_add_explicit(&rm->inflight, 1, memory_order_relaxed);
  acx_status_t st;
  if (!r->is_put) {
    st = acxc_ctrl_data_recv(cp, r->owner, r->dtag_in, r->staging, r->bytes, r->deadline_ns, get_data_in, r);
  } else {
    r->ack = malloc(4);
    r->pending = 2;
    st = r->ack ? acxc_ctrl_data_recv(cp, r->owner, r->dtag_in, r->ack, 4, r->deadline_ns, put_ack_in, r)
                : ACX_ERR_NO_MEMORY;
    if (st == ACX_OK) {
      acx_status_t s2 = acxc_ctrl_data_send(cp, r->owner, r->dtag_out, r->staging, r->bytes, r->deadline_ns, put_data_out, r);
      /* The ack receive is posted: it ends at the deadline and finishes the request then. */
      if (s2 != ACX_OK) put_step(r, s2);
      return;
    }
  }
  if (st != ACX_OK) {
    atomic_fetch_sub_explicit(&rm->inflight, 1, memory_order_release);
    rop_finish(r, st);
  }
}

static void oxfer_done(remote_t *rm, xfer_t *x, acx_status_t st);

/* Channel operations that finished; one past its deadline aborts its channel (the executor then
 * fails it, and everything behind it, at once). The server thread. */
static void xfers_poll(remote_t *rm, int64_t now) {
  xfer_t **pp = &rm->xfers;
  while (*pp) {
    xfer_t *x = *pp;
    acx_status_t st = acx_future_result(x->f, NULL, 0, NULL);
    if (st == ACX_ERR_TIMEOUT) {
      if (now >= x->deadline_ns && !x->aborted) {
        x->aborted = 1;
        ACX_WARN(COLL, "remote: a channel transfer with rank %d passed its deadline; the channel is closed", x->peer);
        chan_close(rm, x->peer, x->owner_side, x->comm_id, "a transfer passed its deadline");
      }
      pp = &x->next;
      continue;
    }
    *pp = x->next;
    acx_future_release(x->f);
    if (st != ACX_OK) chan_close(rm, x->peer, x->owner_side, x->comm_id, acx_status_name(st));
    else add(&rm->channel_xfers, 1);
    if (x->r) {
      rop_t *r = x->r;
      if (st == ACX_OK) add(r->is_put ? &rm->bytes_out : &rm->bytes_in, r->bytes);
      if (r->is_put) {
        put_step(r, st); /* the in-flight count of the request: put_step's */
      } else {
        atomic_fetch_sub_explicit(&rm->inflight, 1, memory_order_release);
        rop_finish(r, st);
      }
      free(x);
    } else {
      oxfer_done(rm, x, st);
    }
  }
}

/* Requests still waiting for a reply at their deadline fail; the progress thread calls it. */
static void on_tick(acxc_ctrl_t *cp, void *arg, int64_t now) {
  remote_t *rm = arg;
  rop_t *expired = NULL;
  pthread_mutex_lock(&rm->lock);
  rop_t **pp = &rm->ops;
  while (*pp) {
    rop_t *r = *pp;
    if (now >= r->deadline_ns) {
      *pp = r->next;
      rm->nops--;
      r->next = expired;
      expired = r;
    } else {
      pp = &r->next;
    }
  }
  pthread_mutex_unlock(&rm->lock);
  while (expired) {
    rop_t *r = expired;
    expired = r->next;
    ACX_WARN(COLL, "remote %s (tag %" PRIu64 ") to rank %d: no answer within ACX_REMOTE_TIMEOUT",
             r->is_put ? "put" : "get", r->tag, r->owner);
    if (r->chan) chan_close_later(rm, r->owner, 0, r->chan, "a request expired waiting for its reply");
    rop_finish(r, ACX_ERR_TIMEOUT);
  }
}

/* ------------------------------------------------------------------------------------------ */
/* owner side                                                                                 */

static void reply(acxc_ctrl_t *cp, const acxi_ctrl_msg_t *req, acx_status_t st) {
  acxi_ctrl_msg_t m = {.type = req->type == ACXI_CTRL_GET_REQ ? ACXI_CTRL_GET_REPLY : ACXI_CTRL_PUT_REPLY,
                       .u.reply = {.status = st, .tag = req->u.access.tag}};
  acx_status_t s = acxc_ctrl_send(cp, req->sender, &m, NULL, NULL);
  if (s != ACX_OK)
    ACX_WARN(COLL, "remote: cannot answer rank %d's request %" PRIu64 ": %s", req->sender, req->u.access.tag,
             acx_status_name(s));
}

static void free_on_ok(acxc_ctrl_t *cp, void *arg, acx_status_t st) {
  if (st == ACX_OK) free(arg); /* on failure the control plane frees it */
}

/* The owner's check (no device I/O: the progress thread runs it); ACX_OK with *buf held and the
 * admission in *adm, else the verdict for the requester. */
static acx_status_t check_request(remote_t *rm, const acxi_ctrl_msg_t *m, acx_status_t decoded, unsigned access,
                                  acx_buffer_t **buf, acxi_token_adm_t **adm) {
  add(&rm->served, 1);
  acx_status_t st = decoded;
  if (st == ACX_OK && m->u.access.bytes == 0) {
    ACX_WARN(COLL, "remote: rank %d asked for 0 bytes", m->sender);
    st = ACX_ERR_INVALID_ARG;
  }
  if (st == ACX_OK)
    st = acxi_token_admit(&m->u.access.token, access, m->u.access.offset, m->u.access.bytes, buf, adm);
  if (st == ACX_OK && atomic_load_explicit(&rm->serving, memory_order_relaxed) >= MAX_SERVING) {
    ACX_WARN(COLL, "remote: %d requests of other ranks are being served already: rank %d's request %" PRIu64
             " is refused", MAX_SERVING, m->sender, m->u.access.tag);
    acxi_token_adm_free(*adm);
    acx_buffer_release(*buf);
    *adm = NULL;
    *buf = NULL;
    st = ACX_ERR_QUEUE_FULL;
  }
  if (st == ACX_OK) atomic_fetch_add_explicit(&rm->serving, 1, memory_order_relaxed);
  if (st != ACX_OK) {
    add(&rm->refused, 1);
    ACX_INFO(COLL, "remote: %s %" PRIu64 " from rank %d refused: %s", acxi_ctrl_type_str(m->type), m->u.access.tag,
             m->sender, acx_status_name(st));
  }
  return st;
}

/* An owner-side channel operation finished: the buffer goes back; a put's requester learns the
 * outcome (its own send finishing says nothing about this side's receive). */
static void oxfer_done(remote_t *rm, xfer_t *x, acx_status_t st) {
  if (st == ACX_OK) add(x->is_put ? &rm->bytes_in : &rm->bytes_out, x->bytes);
  acxi_token_adm_free(x->adm); /* the transfer is over: its access ends */
  acx_buffer_release(x->buf);
  if (x->is_put) {
    unsigned char *ack = malloc(4);
    if (ack) {
      put_status(ack, st);
      if (acxc_ctrl_data_send(rm->cp, x->peer, x->dtag_out, ack, 4, acxi_deadline(rm->timeout_ns), free_on_ok, ack) !=
          ACX_OK)
        free(ack);
    }
  } else if (st != ACX_OK) {
    ACX_INFO(COLL, "remote: serving a get of rank %d on channel %" PRIu64 " failed: %s", x->peer, x->comm_id,
             acx_status_name(st));
  }
  atomic_fetch_sub_explicit(&rm->inflight, 1, memory_order_release);
  free(x);
}

/* A requester's new channel (server thread: after the requests it sent before, ahead of those it
 * sends after). */
static void chan_open(remote_t *rm, const acxi_ctrl_msg_t *m) {
  chan_close(rm, m->sender, 1, 0, "the requester opened a new one");
  chan_t *ch = calloc(1, sizeof *ch);
  if (!ch) {
    ACX_WARN(COLL, "remote: out of memory for rank %d's channel %" PRIu64 "; its requests will be refused", m->sender,
             m->u.chan.channel);
    return;
  }
  ch->peer = m->sender;
  ch->owner_side = 1;
  ch->number = m->u.chan.channel;
  memcpy(ch->nccl_id, m->u.chan.nccl_id, sizeof ch->nccl_id);
  pthread_mutex_lock(&rm->lock);
  ch->next = rm->chans;
  rm->chans = ch;
  pthread_mutex_unlock(&rm->lock);
  ACX_INFO(COLL, "remote: rank %d opened channel %" PRIu64 " to this rank", m->sender, ch->number);
}

/* The owner's half of a CHANNEL request that passed the checks: its send (get) or receive (put)
 * on the requester's channel, issued now, before the reply. ACX_OK: in flight, buf's reference
 * and the admission (its access begun) are the transfer's. Server thread. */
static acx_status_t serve_on_channel(remote_t *rm, const acxi_ctrl_msg_t *m, acx_buffer_t *buf,
                                     acxi_token_adm_t *adm, int is_put, int64_t deadline) {
  pthread_mutex_lock(&rm->lock);
  chan_t *ch = rm->chans;
  while (ch && !(ch->peer == m->sender && ch->owner_side)) ch = ch->next;
  int fresh = ch && !ch->failed && !ch->comm_id;
  int dev_ok = ch && !ch->failed && ch->comm_id && ch->dev == buf->dev &&
               ch->generation == atomic_load_explicit(&buf->dev->generation, memory_order_acquire);
  pthread_mutex_unlock(&rm->lock);
  if (!ch || ch->failed) {
    ACX_WARN(COLL, "remote: rank %d asked for its bytes on a channel, and it has none open to this rank", m->sender);
    return ACX_ERR_INVALID_STATE;
  }
  if (!on_gpu(buf)) {
    ACX_WARN(COLL, "remote: rank %d asked for a channel transfer of a buffer on a %s device", m->sender, buf->dev->kind);
    return ACX_ERR_NOT_SUPPORTED;
  }
  /* Only the server thread starts or replaces owner-side channels: ch stays ours meanwhile. */
  if (fresh) {
    acx_status_t st = chan_start(rm, ch, buf->dev, 0, 0);
    if (st != ACX_OK) {
      ACX_WARN(COLL, "remote: starting rank %d's channel %" PRIu64 " failed: %s", m->sender, ch->number,
               acx_status_name(st));
      chan_close(rm, m->sender, 1, 0, "its start failed");
      return st;
    }
    dev_ok = 1;
  }
  if (!dev_ok) {
    ACX_WARN(COLL, "remote: rank %d's channel %" PRIu64 " lives on another device (or generation) than the buffer its "
             "request names", m->sender, ch->number);
    chan_close(rm, m->sender, 1, 0, "device or generation mismatch");
    return ACX_ERR_DEVICE_LOST;
  }
  acx_future_t *f = NULL;
  acx_status_t st = chan_op(ch, !is_put, buf, m->u.access.offset, m->u.access.bytes, deadline, &f);
  xfer_t *x = NULL;
  if (st == ACX_OK) st = xfer_add(rm, ch, f, deadline, &x);
  if (st != ACX_OK) {
    if (f) acx_future_release(f);
    chan_close(rm, m->sender, 1, 0, "an operation could not be issued");
    return st;
  }
  x->buf = buf;
  x->adm = adm;
  x->is_put = is_put;
  x->bytes = m->u.access.bytes;
  x->dtag_out = acxc_ctrl_data_tag(rm->cp, m->u.access.tag, 0);
  return ACX_OK;
}

static void serving_done(remote_t *rm) { atomic_fetch_sub_explicit(&rm->serving, 1, memory_order_relaxed); }

/* An admitted request (server thread): a GET through MPI reads the buffer, replies, then sends
 * the bytes; a CHANNEL request issues this side's operation, then replies. st != ACX_OK: the
 * server is stopping; the requester is told. buf and adm are ended here or handed on. */
static void serve(remote_t *rm, const acxi_ctrl_msg_t *m, acx_buffer_t *buf, acxi_token_adm_t *adm, acx_status_t st) {
  int64_t deadline = acxi_deadline(rm->timeout_ns);
  if (st == ACX_OK) st = acxi_token_access_begin(adm, deadline);
  if (m->flags & ACXI_CTRL_FLAG_IPC) {
    if (st == ACX_OK) st = serve_ipc(rm, m, buf, m->type == ACXI_CTRL_PUT_REQ, deadline);
    acxi_token_adm_free(adm); /* the copy is over */
    acx_buffer_release(buf);
    reply(rm->cp, m, st);
    serving_done(rm);
    return;
  }
  if (m->flags & ACXI_CTRL_FLAG_CHANNEL) {
    if (st == ACX_OK) st = serve_on_channel(rm, m, buf, adm, m->type == ACXI_CTRL_PUT_REQ, deadline);
    if (st != ACX_OK) {
      acxi_token_adm_free(adm);
      acx_buffer_release(buf);
    }
    reply(rm->cp, m, st);
    serving_done(rm);
    return;
  }
  unsigned char *staging = NULL;
  if (st == ACX_OK) {
    /* The resolve bounded bytes by the buffer's size: the staging allocation is as trusted as it. */
    staging = malloc(m->u.access.bytes);
    st = staging ? acx_buffer_read(buf, m->u.access.offset, staging, m->u.access.bytes, 0, rm->timeout_ns)
                 : ACX_ERR_NO_MEMORY;
  }
  acxi_token_adm_free(adm); /* the read is over */
  acx_buffer_release(buf);
  reply(rm->cp, m, st);
  serving_done(rm);
  if (st != ACX_OK) {
    free(staging);
    return;
  }
  st = acxc_ctrl_data_send(rm->cp, m->sender, acxc_ctrl_data_tag(rm->cp, m->u.access.tag, 0), staging,
                           m->u.access.bytes, acxi_deadline(rm->timeout_ns), free_on_ok, staging);
  if (st != ACX_OK) free(staging);
  else add(&rm->bytes_out, m->u.access.bytes);
}

/* A put's bytes are here (server thread), or did not come (st): written if the export is still
 * live at the token's epoch, and the requester gets the outcome. */
static void put_land(remote_t *rm, oput_t *o, acx_status_t st) {
  if (st == ACX_OK) st = acxi_token_access_begin(o->adm, acxi_deadline(rm->timeout_ns));
  if (st == ACX_OK) {
    add(&rm->bytes_in, o->bytes);
    st = acx_buffer_write(o->buf, o->off, o->staging, o->bytes, 0, rm->timeout_ns);
  }
  acxi_token_adm_free(o->adm);
  acx_buffer_release(o->buf);
  free(o->staging); /* NULL when the control plane kept it */
  unsigned char *ack = malloc(4);
  if (ack) {
    put_status(ack, st);
    if (acxc_ctrl_data_send(rm->cp, o->requester, o->dtag_out, ack, 4, acxi_deadline(rm->timeout_ns), free_on_ok,
                            ack) != ACX_OK)
      free(ack);
  }
  atomic_fetch_sub_explicit(&rm->inflight, 1, memory_order_release);
  serving_done(rm);
  free(o);
}

static void oput_data_in(acxc_ctrl_t *cp, void *arg, acx_status_t st) {
  oput_t *o = arg;
  if (st != ACX_OK) {
    o->staging = NULL; /* the control plane keeps it */
    put_land(o->rm, o, st);
    return;
  }
  job_submit(o->rm, &(job_t){.kind = J_PUT_LAND, .o = o});
}

/* An admitted put through MPI (progress thread: no device I/O): the receive of its bytes is
 * posted before the go-ahead, so they find it waiting. */
static acx_status_t put_post(remote_t *rm, const acxi_ctrl_msg_t *m, acx_buffer_t *buf, acxi_token_adm_t *adm) {
  oput_t *o = calloc(1, sizeof *o);
  unsigned char *staging = o ? malloc(m->u.access.bytes) : NULL;
  if (!staging) {
    free(o);
    return ACX_ERR_NO_MEMORY;
  }
  *o = (oput_t){.buf = buf, .adm = adm, .off = m->u.access.offset, .bytes = m->u.access.bytes,
                .requester = m->sender, .dtag_in = acxc_ctrl_data_tag(rm->cp, m->u.access.tag, 1),
                .dtag_out = acxc_ctrl_data_tag(rm->cp, m->u.access.tag, 0), .staging = staging, .rm = rm};
  atomic_fetch_add_explicit(&rm->inflight, 1, memory_order_relaxed);
  acx_status_t st = acxc_ctrl_data_recv(rm->cp, m->sender, o->dtag_in, staging, o->bytes, acxi_deadline(rm->timeout_ns),
                                        oput_data_in, o);
  if (st != ACX_OK) {
    atomic_fetch_sub_explicit(&rm->inflight, 1, memory_order_release);
    free(staging);
    free(o);
  }
  return st;
}

/* GET_REQ and PUT_REQ (progress thread): checked here, refusals answered at once; what passes
 * goes to the server thread, but for a put through MPI, whose bytes are not here yet. */
static void on_request(acxc_ctrl_t *cp, void *arg, const acxi_ctrl_msg_t *m, acx_status_t decoded) {
  remote_t *rm = arg;
  int is_put = m->type == ACXI_CTRL_PUT_REQ;
  acx_buffer_t *buf = NULL;
  acxi_token_adm_t *adm = NULL;
  acx_status_t st = check_request(rm, m, decoded, is_put ? ACX_TOKEN_WRITE : ACX_TOKEN_READ, &buf, &adm);
  if (st != ACX_OK) {
    reply(cp, m, st);
    return;
  }
  if (is_put && !(m->flags & (ACXI_CTRL_FLAG_CHANNEL | ACXI_CTRL_FLAG_IPC))) {
    st = put_post(rm, m, buf, adm);
    if (st != ACX_OK) {
      acxi_token_adm_free(adm);
      acx_buffer_release(buf);
      serving_done(rm);
    }
    reply(cp, m, st);
    return;
  }
  job_submit(rm, &(job_t){.kind = J_SERVE, .m = *m, .buf = buf, .adm = adm});
}

static void on_chan_open(acxc_ctrl_t *cp, void *arg, const acxi_ctrl_msg_t *m, acx_status_t decoded) {
  job_submit((remote_t *)arg, &(job_t){.kind = J_CHAN_OPEN, .m = *m});
}

static void on_ipc_open(acxc_ctrl_t *cp, void *arg, const acxi_ctrl_msg_t *m, acx_status_t decoded) {
  job_submit((remote_t *)arg, &(job_t){.kind = J_IPC_OPEN, .m = *m});
}

/* ------------------------------------------------------------------------------------------ */
/* the server thread                                                                          */

/* Runs j (server thread). st != ACX_OK: the server is stopping, or j could not be queued; j ends
 * with that status and without device I/O, but for a channel's end, which still goes to its
 * executor. */
static void job_run(remote_t *rm, job_t *j, acx_status_t st) {
  switch (j->kind) {
  case J_SERVE: serve(rm, &j->m, j->buf, j->adm, st); break;
  case J_PUT_LAND: put_land(rm, j->o, st); break;
  case J_CHAN_OPEN:
    if (st == ACX_OK) chan_open(rm, &j->m);
    else ACX_INFO(COLL, "remote: rank %d's channel %" PRIu64 " not opened: %s", j->m.sender, j->m.u.chan.channel,
                  acx_status_name(st));
    break;
  case J_GET_LAND: get_land(j->r, st); break;
  case J_REPLY_CHAN: reply_chan(rm, j->r, st); break;
  case J_CHAN_FREE: chan_free(j->ch); break;
  case J_IPC_OPEN:
    if (st == ACX_OK) ipc_open(rm, &j->m);
    else ACX_INFO(COLL, "remote: rank %d's staging buffer %" PRIu64 " not mapped: %s", j->m.sender,
                  j->m.u.ipc.staging, acx_status_name(st));
    break;
  case J_IPC_LAND: ipc_land(rm, j->r, st); break;
  }
}

/* Queues a copy of *tmpl for the server; when that cannot be (stopping, out of memory) it runs at
 * once with that status. Any thread. */
static void job_submit(remote_t *rm, const job_t *tmpl) {
  job_t *j = malloc(sizeof *j);
  if (!j) {
    job_t t = *tmpl;
    job_run(rm, &t, ACX_ERR_NO_MEMORY);
    return;
  }
  *j = *tmpl;
  j->next = NULL;
  pthread_mutex_lock(&rm->jlock);
  int stopped = rm->jstop;
  if (!stopped) {
    if (rm->jtail) rm->jtail->next = j;
    else rm->jhead = j;
    rm->jtail = j;
    pthread_cond_signal(&rm->jcond);
  }
  pthread_mutex_unlock(&rm->jlock);
  if (stopped) {
    job_run(rm, j, ACX_ERR_CANCELLED);
    free(j);
  }
}

/* One job at a time, in queue order; channel transfers in flight are polled between jobs. At stop
 * the jobs still queued are cancelled. */
static void *server_main(void *arg) {
  remote_t *rm = arg;
  pthread_mutex_lock(&rm->jlock);
  for (;;) {
    job_t *j = rm->jhead;
    if (j) {
      rm->jhead = j->next;
      if (!rm->jhead) rm->jtail = NULL;
    }
    int stop = rm->jstop;
    pthread_mutex_unlock(&rm->jlock);
    if (j) {
      job_run(rm, j, stop ? ACX_ERR_CANCELLED : ACX_OK);
      free(j);
    }
    if (rm->xfers) xfers_poll(rm, acxi_now_ns());
    pthread_mutex_lock(&rm->jlock);
    if (!rm->jhead) {
      if (rm->jstop) break;
      /* Transfers in flight are polled every SERVER_NAP_NS; otherwise a job or stop wakes it. */
      struct timespec ts = acxi_ts_from_ns(acxi_now_ns() + (rm->xfers ? SERVER_NAP_NS : 1000000000LL));
      pthread_cond_timedwait(&rm->jcond, &rm->jlock, &ts);
    }
  }
  pthread_mutex_unlock(&rm->jlock);
  return NULL;
}

/* Stops the server: what is queued is cancelled. ACX_ERR_TIMEOUT when a job (a device call past
 * its own deadline) holds it beyond timeout_ns; the thread then still runs. */
static acx_status_t server_stop(remote_t *rm, int64_t timeout_ns) {
  pthread_mutex_lock(&rm->jlock);
  rm->jstop = 1;
  pthread_cond_signal(&rm->jcond);
  pthread_mutex_unlock(&rm->jlock);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts); /* pthread_timedjoin_np counts on this clock */
  ts.tv_sec += timeout_ns / 1000000000LL;
  ts.tv_nsec += timeout_ns % 1000000000LL;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  if (pthread_timedjoin_np(rm->server, NULL, &ts) != 0) {
    ACX_WARN(COLL, "acx_remote_stop: the remote-access server thread is still in a device call after %lld ms",
             (long long)(timeout_ns / 1000000));
    return ACX_ERR_TIMEOUT;
  }
  return ACX_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* API                                                                                        */

/* (*map)[r] = 1 for the world ranks on this rank's node: its local_comm's ranks, translated (no
 * communication). */
static acx_status_t on_node_map(acx_world_t *w, unsigned char **map) {
  *map = calloc((size_t)w->size, 1);
  int *in = malloc((size_t)w->local_size * sizeof *in), *out = malloc((size_t)w->local_size * sizeof *out);
  MPI_Group lg = MPI_GROUP_NULL, wg = MPI_GROUP_NULL;
  int rc = !*map || !in || !out ? -1 : MPI_Comm_group(w->local_comm, &lg);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_group(w->comm, &wg);
  for (int i = 0; i < w->local_size && in; i++) in[i] = i;
  if (rc == MPI_SUCCESS) rc = MPI_Group_translate_ranks(lg, w->local_size, in, wg, out);
  for (int i = 0; rc == MPI_SUCCESS && i < w->local_size; i++)
    if (out[i] >= 0 && out[i] < w->size) (*map)[out[i]] = 1;
  if (lg != MPI_GROUP_NULL) MPI_Group_free(&lg);
  if (wg != MPI_GROUP_NULL) MPI_Group_free(&wg);
  free(in);
  free(out);
  if (rc == MPI_SUCCESS) return ACX_OK;
  free(*map);
  *map = NULL;
  if (rc == -1) return ACX_ERR_NO_MEMORY;
  ACX_WARN(COLL, "acx_remote_start: the world's ranks on this node could not be listed (MPI error %d)", rc);
  return ACX_ERR_MPI;
}

acx_status_t acx_remote_start(acx_world_t *world) {
  ACX_CHECK_NULL(world);
  if (remote_of(world)) {
    ACX_WARN(COLL, "acx_remote_start: remote access is running on this world already");
    return ACX_ERR_INVALID_STATE;
  }
  remote_t *rm = calloc(1, sizeof *rm);
  if (!rm) return ACX_ERR_NO_MEMORY;
  acx_status_t st = acxc_ctrl_acquire(world, &rm->cp);
  if (st != ACX_OK) {
    free(rm);
    return st;
  }
  rm->world = world;
  int64_t ms = acxi_param_int("ACX_REMOTE_TIMEOUT");
  rm->timeout_ns = (ms > 0 ? ms : 1) * 1000000LL;
  const char *tr = acxi_param_str("ACX_REMOTE_TRANSPORT");
  if (tr && strcmp(tr, "auto") != 0 && strcmp(tr, "mpi") != 0 && strcmp(tr, "ipc") != 0) {
    ACX_WARN(COLL, "ACX_REMOTE_TRANSPORT='%s': expected 'auto', 'mpi' or 'ipc'", tr);
    (void)acxc_ctrl_release(rm->cp, -1);
    free(rm);
    return ACX_ERR_BAD_PARAM;
  }
  int auto_tr = !tr || strcmp(tr, "auto") == 0, ipc_tr = tr && strcmp(tr, "ipc") == 0;
  rm->use_channels = ACX_HAVE_NCCL && auto_tr;
  rm->ipc_mode = ipc_tr ? IPC_FORCED : auto_tr ? IPC_AUTO : IPC_NEVER;
  acx_world_node(world, &rm->node, NULL);
  st = on_node_map(world, &rm->on_node);
  if (st != ACX_OK) {
    (void)acxc_ctrl_release(rm->cp, -1);
    free(rm);
    return st;
  }
  pthread_mutex_init(&rm->lock, NULL);
  pthread_mutex_init(&rm->chan_lock, NULL);
  pthread_mutex_init(&rm->jlock, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&rm->jcond, &ca);
  pthread_condattr_destroy(&ca);
  if (pthread_create(&rm->server, NULL, server_main, rm) != 0) {
    ACX_WARN(COLL, "acx_remote_start: cannot start the remote-access server thread");
    st = ACX_ERR_SYSTEM;
    goto err_destroy_locks;
  }
  pthread_mutex_lock(&registry_lock);
  rm->next = registry;
  registry = rm;
  pthread_mutex_unlock(&registry_lock);
  acxc_ctrl_set_handler(rm->cp, ACXI_CTRL_GET_REQ, on_request, rm);
  acxc_ctrl_set_handler(rm->cp, ACXI_CTRL_PUT_REQ, on_request, rm);
  acxc_ctrl_set_handler(rm->cp, ACXI_CTRL_GET_REPLY, on_reply, rm);
  acxc_ctrl_set_handler(rm->cp, ACXI_CTRL_PUT_REPLY, on_reply, rm);
  acxc_ctrl_set_handler(rm->cp, ACXI_CTRL_CHAN_OPEN, on_chan_open, rm);
  acxc_ctrl_set_handler(rm->cp, ACXI_CTRL_IPC_OPEN, on_ipc_open, rm);
  acxc_ctrl_set_tick(rm->cp, 0, on_tick, rm);
  ACX_INFO(COLL, "remote access started: bytes between GPU buffers move %s%s",
           rm->ipc_mode == IPC_FORCED ? "on the device through staging buffers (ACX_REMOTE_TRANSPORT=ipc: owners on "
                                        "this node only)"
           : rm->use_channels ? "on NCCL channels"
                              : "through host memory over MPI (ACX_REMOTE_TRANSPORT=mpi or no NCCL)",
           rm->ipc_mode == IPC_AUTO ? "; to ranks on this rank's GPU, on the device through staging buffers" : "");
  return ACX_OK;

err_destroy_locks:
  free(rm->on_node);
  pthread_cond_destroy(&rm->jcond);
  pthread_mutex_destroy(&rm->jlock);
  pthread_mutex_destroy(&rm->chan_lock);
  pthread_mutex_destroy(&rm->lock);
  (void)acxc_ctrl_release(rm->cp, -1);
  free(rm);
  return st;
}

acx_status_t acx_remote_stop(acx_world_t *world, int64_t timeout_ns) {
  ACX_CHECK_NULL(world);
  pthread_mutex_lock(&registry_lock);
  remote_t **pp = &registry;
  while (*pp && (*pp)->world != world) pp = &(*pp)->next;
  remote_t *rm = *pp;
  if (rm) *pp = rm->next;
  pthread_mutex_unlock(&registry_lock);
  if (!rm) {
    ACX_WARN(COLL, "acx_remote_stop: remote access was not started on this world");
    return ACX_ERR_INVALID_STATE;
  }
  for (int t = ACXI_CTRL_GET_REQ; t <= ACXI_CTRL_PUT_REPLY; t++) acxc_ctrl_set_handler(rm->cp, t, NULL, NULL);
  acxc_ctrl_set_handler(rm->cp, ACXI_CTRL_CHAN_OPEN, NULL, NULL);
  acxc_ctrl_set_handler(rm->cp, ACXI_CTRL_IPC_OPEN, NULL, NULL);
  acxc_ctrl_set_tick(rm->cp, 0, NULL, NULL);
  /* The progress thread may be inside a handler or the tick right now. */
  (void)acxc_ctrl_quiesce(rm->cp, rm->timeout_ns);
  /* The server cancels what is queued (requesters are told) and ends. Should a device call hold
   * it past its deadline, rm stays allocated for it (leaked); the collective release still runs,
   * or the peers would wait for this rank in it. */
  acx_status_t server_st = server_stop(rm, rm->timeout_ns + 1000000000LL);
  if (server_st != ACX_OK) {
    acx_status_t st = acxc_ctrl_release(rm->cp, timeout_ns);
    return st != ACX_OK ? st : server_st;
  }
  /* The server is gone: nothing copies through the imports any more. Dropped before the collective
   * release below, so that every requester frees its staging buffers after every owner unmapped
   * them (a CUDA import does not keep the memory alive). */
  imps_drop(rm, -1);
  /* Channels go (their operations in flight fail at once), then those operations are reaped. */
  pthread_mutex_lock(&rm->lock);
  chan_t *chans = rm->chans;
  rm->chans = NULL;
  pthread_mutex_unlock(&rm->lock);
  while (chans) {
    chan_t *ch = chans;
    chans = ch->next;
    chan_free(ch);
  }
  int64_t xdl = acxi_deadline(rm->timeout_ns);
  while (rm->xfers && acxi_now_ns() < xdl) {
    xfers_poll(rm, acxi_now_ns());
    if (rm->xfers) nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
  if (rm->xfers) ACX_WARN(COLL, "acx_remote_stop: channel transfers still in the executor after ACX_REMOTE_TIMEOUT");
  pthread_mutex_lock(&rm->lock);
  rop_t *ops = rm->ops;
  rm->ops = NULL;
  rm->nops = 0;
  pthread_mutex_unlock(&rm->lock);
  while (ops) {
    rop_t *r = ops;
    ops = r->next;
    rop_finish(r, ACX_ERR_CANCELLED);
  }
  acx_status_t st = acxc_ctrl_release(rm->cp, timeout_ns);
  /* What the control plane still owns ends at its deadline (or at once when the plane stopped). */
  int64_t deadline = acxi_deadline(rm->timeout_ns + 1000000000LL);
  while (atomic_load_explicit(&rm->inflight, memory_order_acquire) > 0 && acxi_now_ns() < deadline)
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  if (atomic_load_explicit(&rm->inflight, memory_order_acquire) > 0) {
    ACX_WARN(COLL, "acx_remote_stop: transfers still in flight after their deadline; their state is leaked");
    return st != ACX_OK ? st : ACX_ERR_TIMEOUT;
  }
  /* Every request is over (the staging buffers are idle or retired) and, the release being
   * collective, every owner has dropped its imports. */
  stg_t *stgs = rm->stgs, *dead = rm->stg_dead;
  rm->stgs = rm->stg_dead = NULL;
  while (stgs) {
    stg_t *g = stgs;
    stgs = g->next;
    stg_free(g);
  }
  while (dead) {
    stg_t *g = dead;
    dead = g->next;
    stg_free(g);
  }
  pthread_cond_destroy(&rm->jcond);
  pthread_mutex_destroy(&rm->jlock);
  pthread_mutex_destroy(&rm->lock);
  pthread_mutex_destroy(&rm->chan_lock);
  free(rm->on_node);
  free(rm);
  return st;
}

/* Checks shared by get and put; *info describes local. */
static acx_status_t check_call(const char *fn, acx_world_t *world, const acx_token_t *token, uint64_t bytes,
                               acx_buffer_t *local, uint64_t local_offset, acx_future_t **done,
                               acx_buffer_info_t *info) {
  ACX_CHECK_NULL_IN(fn, world, "world");
  ACX_CHECK_NULL_IN(fn, token, "token");
  ACX_CHECK_NULL_IN(fn, local, "local");
  ACX_CHECK_NULL_IN(fn, done, "done");
  *done = NULL;
  ACX_CHECK_ARG(bytes > 0, "%s: argument 'bytes' is 0", fn);
  ACXCHECK(acxi_buffer_check(fn, "local", local));
  ACXCHECK(acx_buffer_query(local, info));
  if (local_offset > info->bytes || bytes > info->bytes - local_offset) {
    ACX_WARN(COLL, "%s: arguments 'local_offset'=%" PRIu64 " + 'bytes'=%" PRIu64 " exceed the local buffer's %zu bytes",
             fn, local_offset, bytes, info->bytes);
    return ACX_ERR_OUT_OF_RANGE;
  }
  int size = 0;
  acx_world_size(world, &size);
  if (token->owner_rank < 0 || token->owner_rank >= size) {
    ACX_WARN(COLL, "%s: argument 'token' names rank %d, which is not in this world of %d", fn, token->owner_rank, size);
    return ACX_ERR_BAD_TOKEN;
  }
  return ACX_OK;
}

/* A token of this rank: the same owner's check, then a copy through host memory (the two buffers
 * may differ in type or device). */
static acx_status_t local_access(remote_t *rm, const acx_token_t *token, uint64_t offset, uint64_t bytes,
                                 acx_buffer_t *local, uint64_t local_off, int is_put, acx_future_t **done) {
  acx_buffer_t *buf = NULL;
  acxi_token_adm_t *adm = NULL;
  acx_status_t st = acxi_token_admit(token, is_put ? ACX_TOKEN_WRITE : ACX_TOKEN_READ, offset, bytes, &buf, &adm);
  void *tmp = st == ACX_OK ? malloc(bytes) : NULL;
  if (st == ACX_OK && !tmp) st = ACX_ERR_NO_MEMORY;
  /* Both copies count as the access: an unexport meanwhile waits for them. */
  if (st == ACX_OK) st = acxi_token_access_begin(adm, acxi_deadline(2 * rm->timeout_ns));
  if (st == ACX_OK)
    st = is_put ? acx_buffer_read(local, local_off, tmp, bytes, 0, rm->timeout_ns)
                : acx_buffer_read(buf, offset, tmp, bytes, 0, rm->timeout_ns);
  if (st == ACX_OK)
    st = is_put ? acx_buffer_write(buf, offset, tmp, bytes, 0, rm->timeout_ns)
                : acx_buffer_write(local, local_off, tmp, bytes, 0, rm->timeout_ns);
  free(tmp);
  acxi_token_adm_free(adm);
  acx_buffer_release(buf);
  if (st != ACX_OK) add(&rm->failed, 1);
  acx_future_t *f = NULL;
  ACXCHECK(acx_future_create(&f));
  acx_future_complete(f, st, NULL, 0);
  *done = f;
  return ACX_OK;
}

static acx_status_t access_remote(const char *fn, acx_world_t *world, const acx_token_t *token, uint64_t offset,
                                  uint64_t bytes, acx_buffer_t *local, uint64_t local_offset, int is_put,
                                  acx_future_t **done) {
  acx_buffer_info_t info;
  ACXCHECK(check_call(fn, world, token, bytes, local, local_offset, done, &info));
  remote_t *rm = remote_of(world);
  if (!rm) {
    ACX_WARN(COLL, "%s: acx_remote_start was not called on this world", fn);
    return ACX_ERR_INVALID_STATE;
  }
  add(is_put ? &rm->puts : &rm->gets, 1);
  if (token->owner_rank == acxc_ctrl_rank(rm->cp))
    return local_access(rm, token, offset, bytes, local, local_offset, is_put, done);

  rop_t *r = calloc(1, sizeof *r);
  if (!r) return ACX_ERR_NO_MEMORY;
  /* From the channel's choice to the request's send, one requester thread at a time: a request
   * must reach the owner on the channel it was made for (a replacement's CHAN_OPEN comes after). */
  pthread_mutex_lock(&rm->chan_lock);
  acx_status_t st = ipc_for_request(rm, token, local, bytes, &r->stg);
  if (st == ACX_OK && !r->stg) st = chan_for_request(rm, token, local, &r->chan);
  if (st == ACX_OK && r->stg && is_put) {
    /* The bytes go into the staging buffer now; the owner copies them out when it serves. */
    st = acx_buffer_copy(r->stg->buf, 0, local, local_offset, bytes, 0, rm->timeout_ns);
    if (st != ACX_OK)
      ACX_WARN(COLL, "%s: copying %" PRIu64 " bytes into the staging buffer for rank %d failed: %s", fn, bytes,
               token->owner_rank, acx_status_name(st));
  }
  if (st == ACX_OK && !r->chan && !r->stg) {
    r->staging = malloc(bytes);
    if (!r->staging) st = ACX_ERR_NO_MEMORY;
  }
  if (st == ACX_OK) st = acx_future_create(&r->future);
  if (st == ACX_OK && is_put && !r->chan && !r->stg)
    st = acx_buffer_read(local, local_offset, r->staging, bytes, 0, rm->timeout_ns);
  if (st != ACX_OK) {
    pthread_mutex_unlock(&rm->chan_lock);
    if (r->stg) stg_done(rm, r->stg, 0);
    if (r->future) acx_future_release(r->future);
    free(r->staging);
    free(r);
    return st;
  }
  acx_buffer_hold(local);
  r->rm = rm;
  r->is_put = is_put;
  r->owner = token->owner_rank;
  r->local = local;
  r->local_off = local_offset;
  r->bytes = bytes;
  r->tag = atomic_fetch_add_explicit(&rm->next_tag, 1, memory_order_relaxed) + 1;
  r->dtag_in = acxc_ctrl_data_tag(rm->cp, r->tag, 0);
  r->dtag_out = acxc_ctrl_data_tag(rm->cp, r->tag, 1);
  r->deadline_ns = acxi_deadline(rm->timeout_ns);
  acx_future_hold(r->future); /* one for the request, one for the caller */

  pthread_mutex_lock(&rm->lock);
  if (rm->nops >= MAX_IN_FLIGHT) {
    pthread_mutex_unlock(&rm->lock);
    pthread_mutex_unlock(&rm->chan_lock);
    ACX_WARN(COLL, "%s: %d requests are waiting for their owners already", fn, MAX_IN_FLIGHT);
    acx_future_release(r->future);
    rop_finish(r, ACX_ERR_QUEUE_FULL);
    return ACX_ERR_QUEUE_FULL;
  }
  r->next = rm->ops;
  rm->ops = r;
  rm->nops++;
  pthread_mutex_unlock(&rm->lock);

  acxi_ctrl_msg_t m = {.type = is_put ? ACXI_CTRL_PUT_REQ : ACXI_CTRL_GET_REQ,
                       .flags = r->chan ? ACXI_CTRL_FLAG_CHANNEL : r->stg ? ACXI_CTRL_FLAG_IPC : 0,
                       .u.access = {.token = *token, .offset = offset, .bytes = bytes, .tag = r->tag,
                                    .staging = r->stg ? r->stg->number : 0}};
  /* Once sent, the reply may finish and free r on the progress thread before the send returns:
   * what is needed afterwards is taken now (the future has the caller's own reference). */
  uint64_t chan = r->chan, tag = r->tag;
  acx_future_t *fut = r->future;
  st = acxc_ctrl_send(rm->cp, r->owner, &m, NULL, NULL);
  pthread_mutex_unlock(&rm->chan_lock);
  if (st != ACX_OK) {
    if (chan) chan_close(rm, token->owner_rank, 0, chan, "the request could not be sent");
    rop_t *again = rop_take(rm, -1, tag);
    if (again) {
      acx_future_release(again->future); /* the caller's reference: the call fails */
      rop_finish(again, st);
    }
    return st;
  }
  *done = fut;
  return ACX_OK;
}

acx_status_t acx_token_get(acx_world_t *world, const acx_token_t *token, uint64_t offset, uint64_t bytes,
                           acx_buffer_t *local, uint64_t local_offset, acx_future_t **done) {
  return access_remote(__func__, world, token, offset, bytes, local, local_offset, 0, done);
}

acx_status_t acx_token_put(acx_world_t *world, const acx_token_t *token, uint64_t offset, uint64_t bytes,
                           acx_buffer_t *local, uint64_t local_offset, acx_future_t **done) {
  return access_remote(__func__, world, token, offset, bytes, local, local_offset, 1, done);
}

static acx_status_t sync_wait(acx_world_t *world, acx_future_t *f, int64_t timeout_ns) {
  remote_t *rm = remote_of(world);
  int64_t t = timeout_ns >= 0 ? timeout_ns : (rm ? rm->timeout_ns : 0) + 2000000000LL;
  acx_status_t st = acx_future_wait(f, t, NULL, 0, NULL);
  acx_future_release(f);
  return st;
}

acx_status_t acx_token_get_sync(acx_world_t *world, const acx_token_t *token, uint64_t offset, uint64_t bytes,
                                acx_buffer_t *local, uint64_t local_offset, int64_t timeout_ns) {
  acx_future_t *f = NULL;
  ACXCHECK(access_remote(__func__, world, token, offset, bytes, local, local_offset, 0, &f));
  return sync_wait(world, f, timeout_ns);
}

acx_status_t acx_token_put_sync(acx_world_t *world, const acx_token_t *token, uint64_t offset, uint64_t bytes,
                                acx_buffer_t *local, uint64_t local_offset, int64_t timeout_ns) {
  acx_future_t *f = NULL;
  ACXCHECK(access_remote(__func__, world, token, offset, bytes, local, local_offset, 1, &f));
  return sync_wait(world, f, timeout_ns);
}

acx_status_t acx_token_local_buffer(const acx_token_t *token, unsigned access, acx_buffer_t **buf) {
  if (buf) *buf = NULL; /* on every failure, as acx/remote.h promises */
  ACX_CHECK_NULL(token);
  ACX_CHECK_NULL(buf);
  /* Checked here too, so that the line names this call rather than the owner's check. */
  ACX_CHECK_ARG(access != 0 && (access & ~ACX_TOKEN_RIGHTS_ALL) == 0,
                "acx_token_local_buffer: argument 'access'=0x%x is not a non-empty set of ACX_TOKEN_READ|"
                "ACX_TOKEN_WRITE", access);
  int32_t rank = 0, node = 0;
  uint64_t epoch = 0;
  acxi_token_identity(&rank, &node, &epoch);
  if (token->owner_rank != rank) {
    ACX_WARN(COLL, "acx_token_local_buffer: the token names a buffer of rank %d; only this rank's (%d) buffers can be "
             "operands here (read another rank's with acx_token_get)", token->owner_rank, rank);
    return ACX_ERR_BAD_TOKEN;
  }
  return acxi_token_resolve(token, access, 0, token->bytes, buf);
}

acx_status_t acx_remote_stats(acx_world_t *world, acx_remote_stats_t *s) {
  ACX_CHECK_NULL(world);
  ACX_CHECK_NULL_AS(s, "stats");
  ACX_CHECK_ARG(s->size == sizeof *s, "acx_remote_stats: stats->size is %zu, expected %zu", s->size, sizeof *s);
  remote_t *rm = remote_of(world);
  if (!rm) {
    ACX_WARN(COLL, "acx_remote_stats: acx_remote_start was not called on this world");
    return ACX_ERR_INVALID_STATE;
  }
  *s = (acx_remote_stats_t){.size = sizeof *s,
                            .gets = atomic_load(&rm->gets),
                            .puts = atomic_load(&rm->puts),
                            .served = atomic_load(&rm->served),
                            .refused = atomic_load(&rm->refused),
                            .failed = atomic_load(&rm->failed),
                            .bytes_in = atomic_load(&rm->bytes_in),
                            .bytes_out = atomic_load(&rm->bytes_out),
                            .channel_transfers = atomic_load(&rm->channel_xfers),
                            .channels_opened = atomic_load(&rm->channels_opened)};
  return ACX_OK;
}
