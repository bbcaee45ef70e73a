/* The control plane: a duplicate of the world's communicator on which one progress thread makes
 * every MPI call (probe and receive of control messages, their sends, bulk data), so its order is
 * one thread's and nothing else in the rank can match its messages. Other threads queue work; the
 * thread polls with short naps, and every transfer carries a deadline. Needs MPI_THREAD_MULTIPLE
 * (acx_world_init checks it): the application and the collectives call MPI meanwhile. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collectives/remote/ctrl_plane.h"
#include "collectives/world_internal.h"
#include "runtime/base/clock.h"
#include "runtime/base/log.h"
#include "runtime/base/param.h"

#define CTRL_TAG 0              /* control messages; data uses tags 1..tag_ub */
#define CHUNK ((size_t)1 << 30) /* MPI counts are int: larger data travels in 1 GiB pieces */
#define MAX_TICKS 2

typedef enum xkind { X_CTRL = 0, X_SEND = 1, X_RECV = 2 } xkind_t;

typedef struct xfer {
  struct xfer *next;
  xkind_t kind;
  int peer, tag;
  unsigned char *buf; /* X_CTRL: msg; else the caller's */
  size_t bytes;
  unsigned char msg[ACXI_CTRL_MAX_BYTES];
  int nreq;
  MPI_Request *reqs;
  int64_t deadline_ns;
  acxc_ctrl_done_fn done;
  void *arg;
} xfer_t;

typedef struct handler {
  acxc_ctrl_handler_fn fn;
  void *arg;
} handler_t;

typedef struct tick {
  acxc_ctrl_tick_fn fn;
  void *arg;
} tick_t;

/* What this rank has received from one sender (progress thread only): the highest sequence
 * number, and the last RECENT numbers accepted, against which a RESEND is deduplicated. */
#define RECENT 16
typedef struct peer {
  uint64_t last;
  uint64_t recent[RECENT];
  unsigned pos, filled;
} peer_t;

struct acxc_ctrl {
  struct acxc_ctrl *next; /* registry */
  acx_world_t *world;
  MPI_Comm comm;
  int rank, size, tag_ub, refs;
  int64_t ctrl_timeout_ns; /* deadline of a control message's send */
  int64_t poll_ns;         /* the idle nap */

  pthread_t thread;
  int thread_live;
  pthread_mutex_t lock; /* queue, handlers, ticks, stop */
  pthread_cond_t cond;  /* work queued, or stop */
  xfer_t *qhead, *qtail;
  int stop;
  handler_t handlers[ACXI_CTRL_TYPE_END];
  tick_t ticks[MAX_TICKS];

  uint64_t seq; /* the last sequence number given out (under lock: numbered in queue order) */

  /* Progress thread only. */
  xfer_t *active;
  xfer_t *orphans; /* past their deadline: MPI may still use their buffers */
  peer_t *peers;   /* one per rank of the world */

  _Atomic uint64_t turns; /* completed turns of the progress thread */
  _Atomic uint64_t n_sent, n_received, n_rejected, n_unhandled, n_data_sent, n_data_received, n_timeouts,
      n_duplicates;
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static acxc_ctrl_t *registry;

static void count(_Atomic uint64_t *c) { atomic_fetch_add_explicit(c, 1, memory_order_relaxed); }

static const char *mpi_msg(int rc, char *buf) {
  int len = 0;
  buf[0] = '\0';
  MPI_Error_string(rc, buf, &len);
  return buf;
}

/* ------------------------------------------------------------------------------------------ */
/* transfers (progress thread)                                                                */

static void xfer_free(xfer_t *x) {
  if (x->kind != X_CTRL) free(x->buf);
  free(x->reqs);
  free(x);
}

static acx_status_t post(acxc_ctrl_t *cp, xfer_t *x) {
  size_t n = x->kind == X_CTRL ? 1 : (x->bytes + CHUNK - 1) / CHUNK;
  if (n == 0) n = 1;
  x->reqs = malloc(n * sizeof *x->reqs);
  if (!x->reqs) return ACX_ERR_NO_MEMORY;
  x->nreq = (int)n;
  for (size_t i = 0; i < n; i++) x->reqs[i] = MPI_REQUEST_NULL;
  for (size_t i = 0; i < n; i++) {
    size_t off = i * CHUNK, len = x->bytes - off < CHUNK ? x->bytes - off : CHUNK;
    int rc;
    if (x->kind == X_RECV)
      rc = MPI_Irecv(x->buf + off, (int)len, MPI_BYTE, x->peer, x->tag, cp->comm, &x->reqs[i]);
    else
      rc = MPI_Isend(x->buf + off, (int)len, MPI_BYTE, x->peer, x->kind == X_CTRL ? CTRL_TAG : x->tag, cp->comm,
                     &x->reqs[i]);
    if (rc != MPI_SUCCESS) {
      char m[MPI_MAX_ERROR_STRING];
      ACX_WARN(COLL, "control plane: posting a %s of %zu bytes to/from rank %d failed: %s",
               x->kind == X_RECV ? "receive" : "send", len, x->peer, mpi_msg(rc, m));
      /* Pieces already posted cannot be taken back: they go with the orphans. */
      x->nreq = (int)i;
      return ACX_ERR_MPI;
    }
  }
  return ACX_OK;
}

static void finish(acxc_ctrl_t *cp, xfer_t *x, acx_status_t st) {
  if (st == ACX_OK) {
    if (x->kind == X_CTRL) count(&cp->n_sent);
    else count(x->kind == X_SEND ? &cp->n_data_sent : &cp->n_data_received);
  }
  if (x->done) x->done(cp, x->arg, st);
}

/* A transfer MPI still holds: its buffer is freed when MPI lets go of it. */
static void orphan(acxc_ctrl_t *cp, xfer_t *x) {
  for (int i = 0; i < x->nreq; i++)
    if (x->reqs[i] != MPI_REQUEST_NULL) MPI_Cancel(&x->reqs[i]);
  x->next = cp->orphans;
  cp->orphans = x;
}

/* Tests each piece on its own: a piece that completed in error is done with (its handle is not
 * touched again), the others stay pending. *flag: all pieces complete. */
static int test_all(xfer_t *x, int *flag) {
  int rc = MPI_SUCCESS, pending = 0;
  for (int i = 0; i < x->nreq; i++) {
    if (x->reqs[i] == MPI_REQUEST_NULL) continue;
    int done = 0;
    int r = MPI_Test(&x->reqs[i], &done, MPI_STATUS_IGNORE);
    if (r != MPI_SUCCESS) {
      x->reqs[i] = MPI_REQUEST_NULL;
      rc = r;
    } else if (!done) {
      pending = 1;
    }
  }
  *flag = !pending;
  return rc;
}

static int test_active(acxc_ctrl_t *cp, int64_t now) {
  int progressed = 0;
  xfer_t **pp = &cp->active;
  while (*pp) {
    xfer_t *x = *pp;
    int flag = 0;
    int rc = test_all(x, &flag);
    if (rc == MPI_SUCCESS && !flag && now < x->deadline_ns) {
      pp = &x->next;
      continue;
    }
    *pp = x->next;
    progressed = 1;
    if (rc != MPI_SUCCESS) {
      char m[MPI_MAX_ERROR_STRING];
      ACX_WARN(COLL, "control plane: a transfer with rank %d failed: %s", x->peer, mpi_msg(rc, m));
      finish(cp, x, ACX_ERR_MPI);
      orphan(cp, x);
    } else if (flag) {
      /* On success the caller takes its buffer back. */
      finish(cp, x, ACX_OK);
      if (x->kind != X_CTRL) x->buf = NULL;
      xfer_free(x);
    } else {
      count(&cp->n_timeouts);
      ACX_WARN(COLL, "control plane: a %s of %zu bytes %s rank %d (tag %d) passed its deadline; abandoned",
               x->kind == X_CTRL ? "control message" : x->kind == X_SEND ? "data send" : "data receive", x->bytes,
               x->kind == X_RECV ? "from" : "to", x->peer, x->tag);
      finish(cp, x, ACX_ERR_TIMEOUT);
      orphan(cp, x);
    }
  }
  return progressed;
}

static void test_orphans(acxc_ctrl_t *cp) {
  xfer_t **pp = &cp->orphans;
  while (*pp) {
    xfer_t *x = *pp;
    int flag = 0;
    test_all(x, &flag);
    if (flag) {
      *pp = x->next;
      xfer_free(x);
    } else {
      pp = &x->next;
    }
  }
}

/* ------------------------------------------------------------------------------------------ */
/* incoming control messages (progress thread)                                                */

static void dispatch(acxc_ctrl_t *cp, const acxi_ctrl_msg_t *m, acx_status_t decoded) {
  pthread_mutex_lock(&cp->lock);
  handler_t h = cp->handlers[m->type];
  pthread_mutex_unlock(&cp->lock);
  if (!h.fn) {
    count(&cp->n_unhandled);
    ACX_INFO(COLL, "control plane: %s from rank %d with no handler on this rank: dropped", acxi_ctrl_type_str(m->type),
             m->sender);
    return;
  }
  h.fn(cp, h.arg, m, decoded);
}

/* Sequence numbers of one sender only grow on the wire (one communicator, one tag: MPI's
 * non-overtaking rule, and senders number in queue order). A number at or below the last one seen
 * is a RESEND of a message that was delivered (dropped: receivers deduplicate), a RESEND of one
 * that never arrived (delivered now), or a replay without the flag (a protocol error, dropped).
 * 1: deliver m. */
static int admit_seq(acxc_ctrl_t *cp, const acxi_ctrl_msg_t *m) {
  peer_t *p = &cp->peers[m->sender]; /* sender == the MPI source, a rank of the plane */
  int fresh = m->seq > p->last;
  if (!fresh) {
    if (!(m->flags & ACXI_CTRL_FLAG_RESEND)) {
      count(&cp->n_rejected);
      ACX_WARN(COLL, "control plane: a %s from rank %d repeats sequence number %" PRIu64 " (the last was %" PRIu64
               ") without the RESEND flag: dropped", acxi_ctrl_type_str(m->type), m->sender, m->seq, p->last);
      return 0;
    }
    uint64_t oldest = UINT64_MAX;
    for (unsigned i = 0; i < p->filled; i++) {
      if (p->recent[i] == m->seq) {
        count(&cp->n_duplicates);
        ACX_INFO(COLL, "control plane: a RESEND of %s %" PRIu64 " from rank %d, delivered already: dropped",
                 acxi_ctrl_type_str(m->type), m->seq, m->sender);
        return 0;
      }
      if (p->recent[i] < oldest) oldest = p->recent[i];
    }
    if (p->filled == RECENT && m->seq < oldest) {
      count(&cp->n_rejected);
      ACX_WARN(COLL, "control plane: a RESEND of %s %" PRIu64 " from rank %d is older than the last %d messages "
               "received from it: whether it was delivered is unknown, dropped", acxi_ctrl_type_str(m->type), m->seq,
               m->sender, RECENT);
      return 0;
    }
  }
  p->recent[p->pos] = m->seq;
  p->pos = (p->pos + 1) % RECENT;
  if (p->filled < RECENT) p->filled++;
  if (fresh) p->last = m->seq;
  return 1;
}

/* A message announcing more than any control message: its size is checked before anything is
 * allocated for it. A receive into a smaller buffer would take it out of MPI (MPI_ERR_TRUNCATE),
 * but Open MPI 4.1.4's shared-memory single-copy path (vader, CMA) writes the whole message past
 * a truncated buffer (a 256 MiB message smashed the stack here). So junk up to DISCARD_MAX is
 * received whole into a buffer of its size and dropped; anything larger is left matched and
 * unreceived (the probe took it out of matching: it never comes back), which costs MPI's small
 * record of it and leaves its sender's send pending until the sender gives up on it. */
#define DISCARD_MAX 65536
static void drop_oversized(acxc_ctrl_t *cp, MPI_Message *handle, int n, int source) {
  count(&cp->n_rejected);
  unsigned char *junk = n >= 0 && n <= DISCARD_MAX ? malloc((size_t)n + 1) : NULL;
  if (junk) {
    (void)MPI_Mrecv(junk, n, MPI_BYTE, handle, MPI_STATUS_IGNORE);
    free(junk);
  }
  ACX_WARN(COLL, "control plane: a message from rank %d announces %s%d bytes, more than the largest control "
           "message (%u): dropped %s", source, n < 0 ? "over " : "", n < 0 ? INT32_MAX : n,
           (unsigned)ACXI_CTRL_MAX_BYTES, junk ? "" : "unreceived");
}

static int poll_incoming(acxc_ctrl_t *cp) {
  int got = 0;
  for (int i = 0; i < 64; i++) {
    int flag = 0;
    MPI_Message handle;
    MPI_Status status;
    int rc = MPI_Improbe(MPI_ANY_SOURCE, CTRL_TAG, cp->comm, &flag, &handle, &status);
    if (rc != MPI_SUCCESS) {
      char m[MPI_MAX_ERROR_STRING];
      ACX_WARN(COLL, "control plane: MPI_Improbe failed: %s", mpi_msg(rc, m));
      return got;
    }
    if (!flag) return got;
    got = 1;
    int n = 0;
    MPI_Get_count(&status, MPI_BYTE, &n);
    unsigned char buf[ACXI_CTRL_MAX_BYTES];
    if (n < 0 || n > (int)sizeof buf) {
      drop_oversized(cp, &handle, n, status.MPI_SOURCE);
      continue;
    }
    rc = MPI_Mrecv(buf, n, MPI_BYTE, &handle, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      char m[MPI_MAX_ERROR_STRING];
      ACX_WARN(COLL, "control plane: receiving %d bytes from rank %d failed: %s", n, status.MPI_SOURCE,
               mpi_msg(rc, m));
      count(&cp->n_rejected);
      continue;
    }
    acxi_ctrl_msg_t msg;
    acxi_ctrl_defect_t why = ACXI_CTRL_OK;
    acx_status_t st = acxi_ctrl_decode(buf, (size_t)n, &msg, &why);
    int request = st == ACX_ERR_BAD_TOKEN && (msg.type == ACXI_CTRL_GET_REQ || msg.type == ACXI_CTRL_PUT_REQ);
    if (st != ACX_OK && !request) {
      count(&cp->n_rejected);
      ACX_WARN(COLL, "control plane: a message from rank %d was rejected (%s): dropped", status.MPI_SOURCE,
               acxi_ctrl_defect_str(why));
      continue;
    }
    if (msg.sender != status.MPI_SOURCE) {
      count(&cp->n_rejected);
      ACX_WARN(COLL, "control plane: a %s claims sender %d but came from rank %d: dropped",
               acxi_ctrl_type_str(msg.type), msg.sender, status.MPI_SOURCE);
      continue;
    }
    if (!admit_seq(cp, &msg)) continue;
    count(&cp->n_received);
    dispatch(cp, &msg, st);
  }
  return got;
}

/* ------------------------------------------------------------------------------------------ */
/* the progress thread                                                                        */

static void *progress(void *arg) {
  acxc_ctrl_t *cp = arg;
  int64_t last_busy = acxi_now_ns();
  pthread_mutex_lock(&cp->lock);
  while (!cp->stop) {
    xfer_t *q = cp->qhead;
    cp->qhead = cp->qtail = NULL;
    tick_t ticks[MAX_TICKS];
    memcpy(ticks, cp->ticks, sizeof ticks);
    pthread_mutex_unlock(&cp->lock);

    int busy = q != NULL;
    while (q) {
      xfer_t *x = q;
      q = q->next;
      acx_status_t st = post(cp, x);
      if (st != ACX_OK) {
        finish(cp, x, st);
        if (x->nreq) orphan(cp, x);
        else xfer_free(x);
        continue;
      }
      x->next = cp->active;
      cp->active = x;
    }
    busy |= poll_incoming(cp);
    int64_t now = acxi_now_ns();
    busy |= test_active(cp, now);
    if (cp->orphans) test_orphans(cp);
    for (int i = 0; i < MAX_TICKS; i++)
      if (ticks[i].fn) ticks[i].fn(cp, ticks[i].arg, now);

    atomic_fetch_add_explicit(&cp->turns, 1, memory_order_release);
    pthread_mutex_lock(&cp->lock);
    if (busy) last_busy = now;
    if (!busy && !cp->qhead && !cp->stop) {
      /* Short naps right after traffic (replies follow requests), the configured one when idle:
       * a spinning thread per rank would starve oversubscribed launches. */
      int64_t nap = now - last_busy < 2000000 ? 20000 : cp->poll_ns;
      struct timespec ts = acxi_ts_from_ns(acxi_now_ns() + nap);
      pthread_cond_timedwait(&cp->cond, &cp->lock, &ts);
    }
  }
  /* Stopping: what was queued is cancelled, what is in flight is abandoned. */
  xfer_t *q = cp->qhead;
  cp->qhead = cp->qtail = NULL;
  pthread_mutex_unlock(&cp->lock);
  while (q) {
    xfer_t *x = q;
    q = q->next;
    finish(cp, x, ACX_ERR_CANCELLED);
    xfer_free(x);
  }
  while (cp->active) {
    xfer_t *x = cp->active;
    cp->active = x->next;
    finish(cp, x, ACX_ERR_CANCELLED);
    orphan(cp, x);
  }
  int64_t deadline = acxi_deadline(100000000);
  while (cp->orphans && acxi_now_ns() < deadline) {
    test_orphans(cp);
    if (cp->orphans) nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
  return NULL;
}

static void enqueue_locked(acxc_ctrl_t *cp, xfer_t *x) {
  x->next = NULL;
  if (cp->qtail) cp->qtail->next = x;
  else cp->qhead = x;
  cp->qtail = x;
  pthread_cond_signal(&cp->cond);
}

static acx_status_t enqueue(acxc_ctrl_t *cp, xfer_t *x) {
  pthread_mutex_lock(&cp->lock);
  if (cp->stop) {
    pthread_mutex_unlock(&cp->lock);
    ACX_WARN(COLL, "control plane: stopping; nothing more is sent");
    return ACX_ERR_INVALID_STATE;
  }
  enqueue_locked(cp, x);
  pthread_mutex_unlock(&cp->lock);
  return ACX_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* interface                                                                                  */

acx_status_t acxc_ctrl_send(acxc_ctrl_t *cp, int dest, acxi_ctrl_msg_t *m, acxc_ctrl_done_fn done, void *arg) {
  ACX_CHECK_NULL(cp);
  ACX_CHECK_NULL(m);
  ACX_CHECK_ARG(dest >= 0 && dest < cp->size, "acxc_ctrl_send: argument 'dest'=%d is not a rank of [0, %d)", dest,
                cp->size);
  m->sender = cp->rank;
  uint64_t epoch = 0;
  acx_world_epoch(cp->world, &epoch);
  m->epoch = epoch;
  xfer_t *x = calloc(1, sizeof *x);
  if (!x) return ACX_ERR_NO_MEMORY;
  x->kind = X_CTRL;
  x->peer = dest;
  x->tag = CTRL_TAG;
  x->buf = x->msg;
  x->deadline_ns = acxi_deadline(cp->ctrl_timeout_ns);
  x->done = done;
  x->arg = arg;
  /* Numbered, encoded and queued under one lock: numbers leave in the order they were given, so a
   * receiver can tell a repeated number from a new one. Encoding 176 bytes is cheap. */
  pthread_mutex_lock(&cp->lock);
  if (cp->stop) {
    pthread_mutex_unlock(&cp->lock);
    free(x);
    ACX_WARN(COLL, "control plane: stopping; nothing more is sent");
    return ACX_ERR_INVALID_STATE;
  }
  m->seq = cp->seq + 1;
  acx_status_t st = acxi_ctrl_encode(m, x->msg, sizeof x->msg, &x->bytes);
  if (st != ACX_OK) {
    pthread_mutex_unlock(&cp->lock);
    free(x);
    return st;
  }
  cp->seq++;
  enqueue_locked(cp, x);
  pthread_mutex_unlock(&cp->lock);
  return ACX_OK;
}

static void free_raw_on_ok(acxc_ctrl_t *cp, void *arg, acx_status_t st) {
  (void)cp;
  if (st == ACX_OK) free(arg); /* on success the buffer is the caller's again: here, ours to free */
}

uint64_t acxc_ctrl_reserve_seq(acxc_ctrl_t *cp) {
  pthread_mutex_lock(&cp->lock);
  uint64_t seq = ++cp->seq;
  pthread_mutex_unlock(&cp->lock);
  return seq;
}

acx_status_t acxc_ctrl_send_raw(acxc_ctrl_t *cp, int dest, const void *bytes, size_t len) {
  ACX_CHECK_NULL(cp);
  ACX_CHECK_ARG(dest >= 0 && dest < cp->size, "acxc_ctrl_send_raw: argument 'dest'=%d is not a rank of [0, %d)", dest,
                cp->size);
  ACX_CHECK_ARG(bytes || len == 0, "acxc_ctrl_send_raw: argument 'bytes' is NULL for %zu bytes", len);
  xfer_t *x = calloc(1, sizeof *x);
  unsigned char *copy = malloc(len ? len : 1);
  if (!x || !copy) {
    free(x);
    free(copy);
    return ACX_ERR_NO_MEMORY;
  }
  if (len) memcpy(copy, bytes, len);
  /* A data send on the control tag: the plane frees the copy (xfer_free) once MPI lets go. */
  *x = (xfer_t){.kind = X_SEND, .peer = dest, .tag = CTRL_TAG, .buf = copy, .bytes = len,
                .deadline_ns = acxi_deadline(cp->ctrl_timeout_ns), .done = free_raw_on_ok, .arg = copy};
  acx_status_t st = enqueue(cp, x);
  if (st != ACX_OK) xfer_free(x);
  return st;
}

static acx_status_t data_op(acxc_ctrl_t *cp, xkind_t kind, int peer, int tag, void *buf, size_t bytes,
                            int64_t deadline_ns, acxc_ctrl_done_fn done, void *arg) {
  ACX_CHECK_NULL(cp);
  ACX_CHECK_ARG(peer >= 0 && peer < cp->size, "acxc_ctrl_data: argument 'peer'=%d is not a rank of [0, %d)", peer,
                cp->size);
  ACX_CHECK_ARG(tag > CTRL_TAG && tag <= cp->tag_ub, "acxc_ctrl_data: argument 'tag'=%d is not in [1, %d]", tag,
                cp->tag_ub);
  ACX_CHECK_ARG(buf || bytes == 0, "acxc_ctrl_data: argument 'buf' is NULL for %zu bytes", bytes);
  xfer_t *x = calloc(1, sizeof *x);
  if (!x) return ACX_ERR_NO_MEMORY;
  x->kind = kind;
  x->peer = peer;
  x->tag = tag;
  x->buf = buf;
  x->bytes = bytes;
  x->deadline_ns = deadline_ns;
  x->done = done;
  x->arg = arg;
  acx_status_t st = enqueue(cp, x);
  if (st != ACX_OK) free(x);
  return st;
}

acx_status_t acxc_ctrl_data_send(acxc_ctrl_t *cp, int peer, int tag, const void *buf, size_t bytes,
                                 int64_t deadline_ns, acxc_ctrl_done_fn done, void *arg) {
  return data_op(cp, X_SEND, peer, tag, (void *)buf, bytes, deadline_ns, done, arg);
}

acx_status_t acxc_ctrl_data_recv(acxc_ctrl_t *cp, int peer, int tag, void *buf, size_t bytes, int64_t deadline_ns,
                                 acxc_ctrl_done_fn done, void *arg) {
  return data_op(cp, X_RECV, peer, tag, buf, bytes, deadline_ns, done, arg);
}

int acxc_ctrl_data_tag(const acxc_ctrl_t *cp, uint64_t request_tag, int to_owner) {
  /* Two halves: both ranks of a pair number their own requests from 1, so a message from X to Y
   * may be for Y's request t (toward the requester) or for X's request t (toward the owner). */
  uint64_t half = (uint64_t)(cp->tag_ub - 1) / 2;
  return 1 + 2 * (int)(request_tag % half) + (to_owner ? 1 : 0);
}

void acxc_ctrl_set_handler(acxc_ctrl_t *cp, acxi_ctrl_type_t type, acxc_ctrl_handler_fn fn, void *arg) {
  if (!cp || type <= 0 || type >= ACXI_CTRL_TYPE_END) return;
  pthread_mutex_lock(&cp->lock);
  cp->handlers[type] = (handler_t){fn, arg};
  pthread_mutex_unlock(&cp->lock);
}

void acxc_ctrl_get_handler(acxc_ctrl_t *cp, acxi_ctrl_type_t type, acxc_ctrl_handler_fn *fn, void **arg) {
  *fn = NULL;
  *arg = NULL;
  if (!cp || type <= 0 || type >= ACXI_CTRL_TYPE_END) return;
  pthread_mutex_lock(&cp->lock);
  *fn = cp->handlers[type].fn;
  *arg = cp->handlers[type].arg;
  pthread_mutex_unlock(&cp->lock);
}

void acxc_ctrl_set_tick(acxc_ctrl_t *cp, int slot, acxc_ctrl_tick_fn fn, void *arg) {
  if (!cp || slot < 0 || slot >= MAX_TICKS) return;
  pthread_mutex_lock(&cp->lock);
  cp->ticks[slot] = (tick_t){fn, arg};
  pthread_mutex_unlock(&cp->lock);
}

acx_status_t acxc_ctrl_quiesce(acxc_ctrl_t *cp, int64_t timeout_ns) {
  uint64_t start = atomic_load_explicit(&cp->turns, memory_order_acquire);
  int64_t deadline = acxi_deadline(timeout_ns);
  pthread_mutex_lock(&cp->lock);
  pthread_cond_signal(&cp->cond);
  pthread_mutex_unlock(&cp->lock);
  while (atomic_load_explicit(&cp->turns, memory_order_acquire) < start + 2) {
    if (acxi_now_ns() >= deadline) {
      ACX_WARN(COLL, "control plane: the progress thread did not finish a turn in %lld ms (a handler blocks?)",
               (long long)(timeout_ns / 1000000));
      return ACX_ERR_TIMEOUT;
    }
    nanosleep(&(struct timespec){0, 100000}, NULL);
  }
  return ACX_OK;
}

acx_world_t *acxc_ctrl_world(const acxc_ctrl_t *cp) { return cp->world; }
int acxc_ctrl_rank(const acxc_ctrl_t *cp) { return cp->rank; }
int acxc_ctrl_size(const acxc_ctrl_t *cp) { return cp->size; }

void acxc_ctrl_stats(acxc_ctrl_t *cp, acxc_ctrl_stats_t *s) {
  s->sent = atomic_load(&cp->n_sent);
  s->received = atomic_load(&cp->n_received);
  s->rejected = atomic_load(&cp->n_rejected);
  s->unhandled = atomic_load(&cp->n_unhandled);
  s->data_sent = atomic_load(&cp->n_data_sent);
  s->data_received = atomic_load(&cp->n_data_received);
  s->timeouts = atomic_load(&cp->n_timeouts);
  s->duplicates = atomic_load(&cp->n_duplicates);
}

acxc_ctrl_t *acxc_ctrl_of(const acx_world_t *world) {
  pthread_mutex_lock(&registry_lock);
  acxc_ctrl_t *cp = registry;
  while (cp && cp->world != world) cp = cp->next;
  pthread_mutex_unlock(&registry_lock);
  return cp;
}

/* Polls a non-blocking collective of the plane against the world's deadline. */
static acx_status_t wait_req(acx_world_t *w, MPI_Request *req, int64_t timeout_ns, const char *what) {
  const int64_t start = acxi_now_ns(), deadline = acxi_deadline(timeout_ns);
  for (;;) {
    int flag = 0;
    int rc = MPI_Test(req, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      char m[MPI_MAX_ERROR_STRING];
      ACX_WARN(COLL, "control plane: %s failed: %s", what, mpi_msg(rc, m));
      return ACX_ERR_MPI;
    }
    if (flag) return ACX_OK;
    if (acxi_now_ns() >= deadline) {
      ACX_WARN(COLL, "control plane: %s: not every rank arrived within %lld ms", what,
               (long long)(timeout_ns / 1000000));
      return ACX_ERR_TIMEOUT;
    }
    acxi_poll_nap(acxi_now_ns() - start, 20000);
  }
}

static acx_status_t ctrl_create(acx_world_t *w, acxc_ctrl_t **out) {
  acxc_ctrl_t *cp = calloc(1, sizeof *cp);
  if (!cp) return ACX_ERR_NO_MEMORY;
  acx_status_t st = ACX_OK;
  cp->world = w;
  cp->comm = MPI_COMM_NULL;
  cp->rank = w->rank;
  cp->size = w->size;
  cp->peers = calloc((size_t)w->size, sizeof *cp->peers);
  if (!cp->peers) {
    free(cp);
    return ACX_ERR_NO_MEMORY;
  }
  int64_t ms = acxi_param_int("ACX_CTRL_TIMEOUT");
  cp->ctrl_timeout_ns = (ms > 0 ? ms : 1) * 1000000LL;
  int64_t us = acxi_param_int("ACX_CTRL_POLL_US");
  cp->poll_ns = (us > 0 ? us : 1) * 1000LL;
  MPI_Request req;
  if (MPI_Comm_idup(w->comm, &cp->comm, &req) != MPI_SUCCESS) {
    ACX_WARN(COLL, "control plane: MPI_Comm_idup of the world's communicator failed");
    free(cp->peers);
    free(cp);
    return ACX_ERR_MPI;
  }
  st = wait_req(w, &req, w->timeout_ns, "duplicating the world's communicator");
  if (st != ACX_OK) {
    free(cp->peers);
    free(cp); /* the pending duplicate goes with the world, which is unusable now */
    return st;
  }
  MPI_Comm_set_errhandler(cp->comm, MPI_ERRORS_RETURN);
  void *ub = NULL;
  int flag = 0;
  MPI_Comm_get_attr(cp->comm, MPI_TAG_UB, &ub, &flag);
  cp->tag_ub = flag && ub ? *(int *)ub : 32767;
  pthread_mutex_init(&cp->lock, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&cp->cond, &ca);
  pthread_condattr_destroy(&ca);
  if (pthread_create(&cp->thread, NULL, progress, cp) != 0) {
    ACX_WARN(COLL, "control plane: cannot start the progress thread");
    st = ACX_ERR_SYSTEM;
    goto err_free_comm;
  }
  cp->thread_live = 1;
  cp->refs = 1;
  ACX_INFO(COLL, "control plane up: rank %d of %d, tag_ub %d, poll %lld us", cp->rank, cp->size, cp->tag_ub,
           (long long)(cp->poll_ns / 1000));
  *out = cp;
  return ACX_OK;

err_free_comm:
  pthread_cond_destroy(&cp->cond);
  pthread_mutex_destroy(&cp->lock);
  MPI_Comm_free(&cp->comm);
  free(cp->peers);
  free(cp);
  return st;
}

acx_status_t acxc_ctrl_acquire(acx_world_t *world, acxc_ctrl_t **out) {
  ACX_CHECK_NULL(world);
  ACX_CHECK_NULL(out);
  *out = NULL;
  pthread_mutex_lock(&registry_lock);
  acxc_ctrl_t *cp = registry;
  while (cp && cp->world != world) cp = cp->next;
  acx_status_t st = ACX_OK;
  if (cp) {
    cp->refs++;
  } else {
    st = ctrl_create(world, &cp);
    if (st == ACX_OK) {
      cp->next = registry;
      registry = cp;
    }
  }
  pthread_mutex_unlock(&registry_lock);
  if (st == ACX_OK) *out = cp;
  return st;
}

acx_status_t acxc_ctrl_release(acxc_ctrl_t *cp, int64_t timeout_ns) {
  if (!cp) return ACX_OK;
  pthread_mutex_lock(&registry_lock);
  if (--cp->refs > 0) {
    pthread_mutex_unlock(&registry_lock);
    return ACX_OK;
  }
  acxc_ctrl_t **pp = &registry;
  while (*pp && *pp != cp) pp = &(*pp)->next;
  if (*pp) *pp = cp->next;
  pthread_mutex_unlock(&registry_lock);

  /* The barrier runs while the thread still serves: a peer's last request gets its answer. */
  MPI_Request req;
  acx_status_t st = ACX_OK;
  if (MPI_Ibarrier(cp->comm, &req) != MPI_SUCCESS) st = ACX_ERR_MPI;
  else st = wait_req(cp->world, &req, timeout_ns >= 0 ? timeout_ns : cp->world->timeout_ns, "control plane shutdown");
  pthread_mutex_lock(&cp->lock);
  cp->stop = 1;
  pthread_cond_broadcast(&cp->cond);
  pthread_mutex_unlock(&cp->lock);
  pthread_join(cp->thread, NULL);
  if (cp->orphans) {
    ACX_WARN(COLL, "control plane: transfers MPI never completed; their buffers and the communicator are left to MPI");
  } else if (st == ACX_OK) {
    MPI_Comm_free(&cp->comm);
  }
  if (!cp->orphans) {
    pthread_cond_destroy(&cp->cond);
    pthread_mutex_destroy(&cp->lock);
    free(cp->peers);
    free(cp);
  }
  return st;
}
