/* The collectives API: validation of every argument before anything is enqueued, one submission
 * order per communicator, the NCCL path (commands to the executor's NCCL extension, no actor hop
 * per operation), groups, and the watchdog that fails and aborts what passes its deadline. The
 * host device kind hands validated operations to mpi_coll.c. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acx_build_config.h"
#include "collectives/coll_internal.h"
#include "collectives/world_internal.h"
#include "runtime/base/clock.h"
#include "runtime/device/buffer.h"
#include "runtime/device/device_internal.h"
#include "runtime/actor/future.h"
#include "runtime/base/log.h"
#include "runtime/base/param.h"

static _Atomic uint64_t next_comm_id = 1; /* executor-side communicator ids */

uint64_t acxc_next_comm_id(void) { return atomic_fetch_add_explicit(&next_comm_id, 1, memory_order_relaxed); }
static _Atomic int coll_counter;

static const char *const redop_names[ACX_REDOP_COUNT] = {"sum", "prod", "max", "min", "avg"};

const char *acx_redop_name(acx_redop_t op) {
  return (unsigned)op < ACX_REDOP_COUNT ? redop_names[op] : "unknown";
}

static const char *op_fn(uint32_t op) {
  switch (op) {
  case ACXC_OP_ALLREDUCE: return "acx_allreduce";
  case ACXC_OP_BROADCAST: return "acx_broadcast";
  case ACXC_OP_REDUCE: return "acx_reduce";
  case ACXC_OP_ALLGATHER: return "acx_allgather";
  case ACXC_OP_REDUCE_SCATTER: return "acx_reduce_scatter";
  case ACXC_OP_SEND: return "acx_send";
  case ACXC_OP_RECV: return "acx_recv";
  case ACXC_OP_ALLTOALL: return "acx_alltoall";
  default: return "acx_coll";
  }
}

static acx_status_t broken(const acx_coll_t *c) { return acxc_coll_broken(c); }

/* ------------------------------------------------------------------------------------------ */
/* validation                                                                                 */

/* One buffer argument: present where needed, on the coll's device, not freed, current
 * generation, the operation's dtype, and at least `elems` elements. */
static acx_status_t check_buf(const acx_coll_t *c, const char *fn, const char *name, acx_buffer_t *b,
                              acx_dtype_t dtype, size_t elems) {
  ACXCHECK(acxi_buffer_check_on(fn, name, b, c->dev, "the coll's"));
  if (b->dtype != ACX_DTYPE_BYTE && b->dtype != dtype) {
    ACX_WARN(COLL, "%s: argument '%s' holds %s, argument 'dtype' is %s", fn, name, acx_dtype_name(b->dtype),
             acx_dtype_name(dtype));
    return ACX_ERR_BAD_DTYPE;
  }
  size_t es = acx_dtype_size(dtype);
  if (b->bytes / es < elems) {
    ACX_WARN(COLL, "%s: argument '%s' holds %zu bytes; the operation needs %zu elements of %zu bytes", fn, name,
             b->bytes, elems, es);
    return ACX_ERR_OUT_OF_RANGE;
  }
  return ACX_OK;
}

static acx_status_t validate(const acx_coll_t *c, const acxc_opdesc_t *d) {
  const char *fn = op_fn(d->op);
  if ((unsigned)d->dtype >= ACX_DTYPE_COUNT) {
    ACX_WARN(COLL, "%s: argument 'dtype'=%d is unknown", fn, (int)d->dtype);
    return ACX_ERR_BAD_DTYPE;
  }
  int reduces = d->op == ACXC_OP_ALLREDUCE || d->op == ACXC_OP_REDUCE || d->op == ACXC_OP_REDUCE_SCATTER;
  if (reduces && d->dtype == ACX_DTYPE_BYTE) {
    ACX_WARN(COLL, "%s: argument 'dtype' is byte: a reduction needs a typed element", fn);
    return ACX_ERR_BAD_DTYPE;
  }
  /* fp8 moves as bytes (broadcast, gathers, send/recv, all-to-all); neither the MPI path nor
   * acx's NCCL type table reduces it, so a reduction is refused rather than summed as int8. */
  if (reduces && (d->dtype == ACX_DTYPE_F8E4M3 || d->dtype == ACX_DTYPE_F8E5M2)) {
    ACX_WARN(COLL, "%s: argument 'dtype' is %s: fp8 reductions are not supported (move it, or reduce in f16/bf16/f32)",
             fn, acx_dtype_name(d->dtype));
    return ACX_ERR_BAD_DTYPE;
  }
  if (reduces && (unsigned)d->redop >= ACX_REDOP_COUNT) {
    ACX_WARN(COLL, "%s: argument 'op'=%d is not a reduction (sum, prod, max, min, avg)", fn, (int)d->redop);
    return ACX_ERR_INVALID_ARG;
  }
  if (d->count == 0) {
    ACX_WARN(COLL, "%s: argument 'count' is 0", fn);
    return ACX_ERR_INVALID_ARG;
  }
  if (d->stream >= (uint32_t)c->dev->streams) {
    ACX_WARN(COLL, "%s: argument 'stream'=%u is not in [0, %d)", fn, d->stream, c->dev->streams);
    return ACX_ERR_INVALID_ARG;
  }
  int rooted = d->op == ACXC_OP_BROADCAST || d->op == ACXC_OP_REDUCE;
  int p2p = d->op == ACXC_OP_SEND || d->op == ACXC_OP_RECV;
  if ((rooted || p2p) && (d->peer < 0 || d->peer >= c->size)) {
    ACX_WARN(COLL, "%s: argument '%s'=%d is not a rank of [0, %d)", fn, rooted ? "root" : "peer", d->peer, c->size);
    return ACX_ERR_INVALID_ARG;
  }
  size_t es = acx_dtype_size(d->dtype), n = (size_t)c->size, all;
  if (__builtin_mul_overflow(d->count, es, &all) || __builtin_mul_overflow(all, n, &all)) {
    ACX_WARN(COLL, "%s: argument 'count'=%zu x %zu bytes x %d ranks overflows", fn, d->count, es, c->size);
    return ACX_ERR_OVERFLOW;
  }
  if (c->hier_on && p2p) {
    ACX_WARN(COLL, "%s: this coll is hierarchical (rank %d shares a device: %s): its leaders' communicator holds one "
             "rank per device, so it carries collectives only; send and recv need one rank per GPU (ACX_COLL_HIER=0 "
             "and a rank per GPU)", fn, c->rank, c->hier_where);
    return ACX_ERR_NOT_SUPPORTED;
  }
  if (c->host_kind && d->count > (size_t)INT32_MAX) {
    ACX_WARN(COLL, "%s: argument 'count'=%zu: the host kind's MPI path takes at most %d elements", fn, d->count,
             INT32_MAX);
    return ACX_ERR_OUT_OF_RANGE;
  }
  size_t nc = d->count * n;
  int root = d->peer == c->rank;
  switch (d->op) {
  case ACXC_OP_ALLREDUCE:
    ACXCHECK(check_buf(c, fn, "send", d->send, d->dtype, d->count));
    return check_buf(c, fn, "recv", d->recv, d->dtype, d->count);
  case ACXC_OP_BROADCAST:
    if (root) ACXCHECK(check_buf(c, fn, "send", d->send, d->dtype, d->count));
    return check_buf(c, fn, "recv", d->recv, d->dtype, d->count);
  case ACXC_OP_REDUCE:
    ACXCHECK(check_buf(c, fn, "send", d->send, d->dtype, d->count));
    return root ? check_buf(c, fn, "recv", d->recv, d->dtype, d->count) : ACX_OK;
  case ACXC_OP_ALLGATHER:
    ACXCHECK(check_buf(c, fn, "send", d->send, d->dtype, d->send == d->recv ? nc : d->count));
    return check_buf(c, fn, "recv", d->recv, d->dtype, nc);
  case ACXC_OP_REDUCE_SCATTER:
    ACXCHECK(check_buf(c, fn, "send", d->send, d->dtype, nc));
    return check_buf(c, fn, "recv", d->recv, d->dtype, d->send == d->recv ? nc : d->count);
  case ACXC_OP_SEND:
    return check_buf(c, fn, "buf", d->send, d->dtype, d->count);
  case ACXC_OP_RECV:
    return check_buf(c, fn, "buf", d->recv, d->dtype, d->count);
  case ACXC_OP_ALLTOALL:
    if (d->send && d->send == d->recv) {
      ACX_WARN(COLL, "%s: arguments 'send' and 'recv' are the same buffer: all-to-all cannot run in place", fn);
      return ACX_ERR_INVALID_ARG;
    }
    ACXCHECK(check_buf(c, fn, "send", d->send, d->dtype, nc));
    return check_buf(c, fn, "recv", d->recv, d->dtype, nc);
  default:
    return ACX_ERR_INVALID_ARG;
  }
}

/* ------------------------------------------------------------------------------------------ */
/* submission order                                                                           */

static acx_status_t lock_submit(acx_coll_t *c, const char *fn) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  int64_t t = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec + c->timeout_ns;
  ts = acxi_ts_from_ns(t);
  int r = pthread_mutex_timedlock(&c->submit_lock, &ts);
  if (r == 0) return ACX_OK;
  ACX_WARN(COLL, "%s: another thread held the coll's submission order (a group?) for the whole timeout: %s", fn,
           strerror(r));
  return ACX_ERR_TIMEOUT;
}

static int group_mine(const acx_coll_t *c) { return c->in_group && pthread_equal(c->group_owner, pthread_self()); }

/* ------------------------------------------------------------------------------------------ */
/* the watchdog                                                                               */

acx_status_t acxc_coll_track(acx_coll_t *c, acx_future_t *f) {
  pthread_mutex_lock(&c->track_lock);
  if (c->tcount == c->tcap) {
    size_t cap = c->tcap ? 2 * c->tcap : 256;
    acxc_tracked_t *n = malloc(cap * sizeof *n);
    if (!n) {
      pthread_mutex_unlock(&c->track_lock);
      ACX_WARN(COLL, "out of host memory tracking an operation for the watchdog");
      return ACX_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < c->tcount; i++) n[i] = c->tv[(c->thead + i) % c->tcap];
    free(c->tv);
    c->tv = n;
    c->tcap = cap;
    c->thead = 0;
  }
  acx_future_hold(f);
  c->tv[(c->thead + c->tcount) % c->tcap] = (acxc_tracked_t){f, acxi_deadline(c->timeout_ns)};
  c->tcount++;
  pthread_mutex_unlock(&c->track_lock);
  return ACX_OK;
}

/* Fails every tracked operation with cause (those already complete keep their status). */
static void fail_tracked(acx_coll_t *c, acx_status_t cause) {
  pthread_mutex_lock(&c->track_lock);
  while (c->tcount) {
    acxc_tracked_t t = c->tv[c->thead];
    c->thead = (c->thead + 1) % c->tcap;
    c->tcount--;
    (void)acx_future_complete(t.future, cause, NULL, 0); /* first completion wins */
    acx_future_release(t.future);
  }
  pthread_mutex_unlock(&c->track_lock);
}

static void send_abort(acx_coll_t *c, acx_status_t cause) {
  if (c->host || !c->comm_id) return;
  acxi_cmd_t cmd = {.op = ACXC_OP_ABORT, .arg = {c->comm_id, (uint64_t)cause}};
  acx_status_t st = acxi_device_submit(c->dev, &cmd, NULL, 0, 0, -1, acxi_deadline(100000000), NULL);
  if (st != ACX_OK)
    ACX_WARN(COLL, "could not send ABORT to the executor (%s): the communicator is gone with it or aborts itself "
             "after ACX_COLL_TIMEOUT", acx_status_name(st));
}

void acxc_coll_break(acx_coll_t *c, acx_status_t cause, int abort, const char *why) {
  int expect = ACX_OK;
  if (!atomic_compare_exchange_strong_explicit(&c->broken, &expect, (int)cause, memory_order_acq_rel,
                                               memory_order_acquire))
    return;
  ACX_WARN(COLL, "coll (rank %d of %d, %s) broken: %s: %s; waiting operations fail with it%s", c->rank, c->size,
           c->host ? "host kind, MPI" : "NCCL", why, acx_status_name(cause),
           abort && !c->host ? ", the communicator is aborted" : "");
  acxc_peer_abort(c, cause);
  fail_tracked(c, acxc_coll_user_status(c, cause));
  if (c->host) acxc_mpi_break(c, cause);
  else if (abort) send_abort(c, cause);
}

/* Statuses that mean the communicator is unusable when an operation completes with them. */
static int fatal_status(acx_status_t s) {
  return ACX_IS_WORLD_ERROR(s) || ACX_IS_DEVICE_LOST(s) || s == ACX_ERR_NO_MEMORY;
}

void acxc_coll_watchdog(acx_coll_t *c) {
  /* The worker path watches its own requests (the own all-reduce's included). */
  if (c->host || broken(c) != ACX_OK) return;
  int64_t now = acxi_now_ns();
  acx_status_t failed = ACX_OK;
  int expired = 0;
  size_t left;
  pthread_mutex_lock(&c->track_lock);
  while (c->tcount) {
    acxc_tracked_t *t = &c->tv[c->thead];
    if (acxi_future_is_done(t->future)) {
      acx_status_t s = acx_future_result(t->future, NULL, 0, NULL);
      if (fatal_status(s) && failed == ACX_OK) failed = s;
      acx_future_release(t->future);
      c->thead = (c->thead + 1) % c->tcap;
      c->tcount--;
      continue;
    }
    expired = now >= t->deadline_ns;
    break;
  }
  left = c->tcount;
  pthread_mutex_unlock(&c->track_lock);
  if (failed != ACX_OK) {
    acxc_coll_break(c, failed, !ACX_IS_DEVICE_LOST(failed), "an operation failed");
    return;
  }
  if (expired) {
    acxc_coll_break(c, ACX_ERR_COLL_TIMEOUT, 1, "an operation passed its deadline (ACX_COLL_TIMEOUT)");
    return;
  }
  /* Asynchronous NCCL errors live in the executor: ask while anything waits. */
  if (left == 0 || atomic_exchange_explicit(&c->check_outstanding, 1, memory_order_acq_rel)) return;
  acxi_cmd_t cmd = {.op = ACXC_OP_CHECK, .arg = {c->comm_id}};
  acx_future_t *f = NULL;
  acx_status_t st = acxi_device_submit(c->dev, &cmd, NULL, 0, 0, -1, acxi_deadline(10000000), &f);
  if (st == ACX_OK) st = acx_future_then(f, c->actor, ACXC_COOKIE_CHECK);
  if (st != ACX_OK) {
    if (f) acx_future_release(f);
    atomic_store_explicit(&c->check_outstanding, 0, memory_order_release);
    if (ACX_IS_DEVICE_LOST(st)) acxc_coll_break(c, st, 0, "the device was lost");
  }
  /* On success the actor's FUTURE_DONE hands f to acxc_coll_check_done, which releases it. */
}

void acxc_coll_check_done(acx_coll_t *c, acx_future_t *f) {
  acxi_cpl_t cpl = {0};
  acx_status_t st = acx_future_result(f, &cpl, sizeof cpl, NULL);
  acx_future_release(f);
  atomic_store_explicit(&c->check_outstanding, 0, memory_order_release);
  if (st == ACX_OK && cpl.value[0] != ACX_OK) {
    ACX_WARN(COLL, "the executor reports the communicator failed: %s (NCCL code %d)",
             acx_status_name((acx_status_t)cpl.value[0]), (int)(int64_t)cpl.value[1]);
    acxc_coll_break(c, (acx_status_t)cpl.value[0], 1, "asynchronous NCCL error");
  } else if (st != ACX_OK && fatal_status(st)) {
    acxc_coll_break(c, st, !ACX_IS_DEVICE_LOST(st), "the watchdog's probe failed");
  }
}

/* ------------------------------------------------------------------------------------------ */
/* the NCCL path                                                                              */

static void fill_cmd(const acx_coll_t *c, const acxc_opdesc_t *d, acxi_cmd_t *cmd, acxi_bufarg_t *ba, int *nb) {
  *cmd = (acxi_cmd_t){.op = d->op, .stream = d->stream, .dtype = (uint32_t)d->dtype, .bytes = d->count,
                      .arg = {c->comm_id, (uint64_t)d->redop, (uint64_t)(int64_t)d->peer}};
  *nb = 0;
  int root = d->peer == c->rank;
  acx_buffer_t *s = d->send, *r = d->recv;
  if (d->op == ACXC_OP_BROADCAST && !root) s = NULL;
  if (d->op == ACXC_OP_REDUCE && !root) r = NULL;
  if (s) {
    cmd->buf[0] = s->id;
    ba[(*nb)++] = (acxi_bufarg_t){s, "send"};
  }
  if (r) {
    cmd->buf[1] = r->id;
    if (r != s) ba[(*nb)++] = (acxi_bufarg_t){r, "recv"};
  }
}

static acx_status_t nccl_submit(acx_coll_t *c, const acxc_opdesc_t *d, acx_future_t **done) {
  acxi_cmd_t cmd;
  acxi_bufarg_t ba[2];
  int nb;
  fill_cmd(c, d, &cmd, ba, &nb);
  cmd.arg[3] = ++c->seq;
  acx_future_t *f = NULL;
  acx_status_t st = acxi_device_submit(c->dev, &cmd, ba, nb, 0, -1, acxi_deadline(acxi_device_timeout(c->dev, -1)),
                                       done ? &f : NULL);
  if (st != ACX_OK) return st;
  return acxc_coll_issued(c, d->stream, f, done);
}

acx_status_t acxc_coll_issued(acx_coll_t *c, uint32_t stream, acx_future_t *f, acx_future_t **done) {
  atomic_fetch_or_explicit(&c->streams_used, ACXI_STREAM_BIT(stream), memory_order_relaxed);
  if (!f) return ACX_OK;
  acx_status_t st = acxc_coll_track(c, f);
  if (st != ACX_OK) {
    acx_future_release(f);
    return st;
  }
  *done = f;
  return ACX_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* the epoch's collective operations, for the rebuild's count (acx_coll_rebuild_report)       */

static int counted_op(uint32_t op) { return op != ACXC_OP_SEND && op != ACXC_OP_RECV; }

/* Records the epoch's next collective operation with f, a reference the caller holds for the
 * record (NULL: fire-and-forget). Under submit_lock. */
static void unj_put_held(acx_coll_t *c, acx_future_t *f, uint32_t op, int root) {
  uint64_t idx = ++c->ncoll;
  acxc_unj_t *u = &c->unj[(idx - 1) % ACXC_UNJ_RING];
  if (u->f) acx_future_release(u->f);
  int local = (op == ACXC_OP_BROADCAST && root == c->rank) || (op == ACXC_OP_REDUCE && root != c->rank);
  *u = (acxc_unj_t){idx, f, local};
}

static void unj_put(acx_coll_t *c, acx_future_t *f, uint32_t op, int root) {
  if (f) acx_future_hold(f);
  unj_put_held(c, f, op, root);
}

static void unj_reset(acx_coll_t *c) {
  for (int i = 0; i < ACXC_UNJ_RING; i++) {
    if (c->unj[i].f) acx_future_release(c->unj[i].f);
    c->unj[i] = (acxc_unj_t){0, NULL, 0};
  }
  c->ncoll = 0;
}

void acxc_unjoined_count(const acxc_unj_t *ring, uint64_t joined, uint64_t submitted, acx_coll_rebuild_report_t *r) {
  r->unjoined_failed = r->unjoined_ok = r->unjoined_ok_local = r->unjoined_noreply = r->unjoined_unknown = 0;
  for (uint64_t k = joined + 1; k <= submitted; k++) {
    const acxc_unj_t *u = &ring[(k - 1) % ACXC_UNJ_RING];
    if (u->idx != k) {
      r->unjoined_unknown++;
    } else if (!u->f) {
      r->unjoined_noreply++;
    } else if (!acxi_future_is_done(u->f)) {
      r->unjoined_unknown++;
    } else if (acx_future_result(u->f, NULL, 0, NULL) == ACX_OK) {
      if (u->local) r->unjoined_ok_local++;
      else r->unjoined_ok++;
    } else {
      r->unjoined_failed++;
    }
  }
}

acx_status_t acx_coll_rebuild_report(acx_coll_t *c, acx_coll_rebuild_report_t *report) {
  ACX_CHECK_NULL_AS(c, "coll");
  ACX_CHECK_NULL_AS(report, "report");
  ACX_CHECK_ARG(report->size == sizeof *report, "acx_coll_rebuild_report: report->size is %zu, expected %zu",
                report->size, sizeof *report);
  pthread_mutex_lock(&c->report_lock);
  *report = c->report;
  pthread_mutex_unlock(&c->report_lock);
  return ACX_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* entry point of every operation                                                             */

static acx_status_t hold_desc(acxc_opdesc_t *d) {
  if (d->send) acx_buffer_hold(d->send);
  if (d->recv && d->recv != d->send) acx_buffer_hold(d->recv);
  return ACX_OK;
}

static acx_status_t group_add(acx_coll_t *c, const acxc_opdesc_t *d, acx_future_t **done) {
  if (c->gcount == ACXC_GROUP_MAX) {
    ACX_WARN(COLL, "%s: the group already holds %d operations", op_fn(d->op), ACXC_GROUP_MAX);
    if (c->gerr == ACX_OK) c->gerr = ACX_ERR_QUEUE_FULL;
    return ACX_ERR_QUEUE_FULL;
  }
  if (c->gcount > 0 && d->stream != c->gstream) {
    ACX_WARN(COLL, "%s: argument 'stream'=%u differs from the group's stream %u", op_fn(d->op), d->stream, c->gstream);
    if (c->gerr == ACX_OK) c->gerr = ACX_ERR_INVALID_ARG;
    return ACX_ERR_INVALID_ARG;
  }
  acx_future_t *f = NULL;
  if (done) ACXCHECK(acx_future_create(&f));
  int i = c->gcount++;
  c->gstream = d->stream;
  acxc_opdesc_t m = *d;
  acxi_cmd_t cmd;
  acxi_bufarg_t ba[2];
  int nb;
  fill_cmd(c, d, &cmd, ba, &nb);
  m.send = cmd.buf[0] ? d->send : NULL;
  m.recv = cmd.buf[1] ? d->recv : NULL;
  hold_desc(&m);
  c->gdesc[i] = m;
  c->gents[i] = (acxc_group_entry_t){.op = d->op, .dtype = (uint32_t)d->dtype, .redop = (uint32_t)d->redop,
                                     .peer = d->peer, .send = cmd.buf[0], .recv = cmd.buf[1], .count = d->count};
  c->gfuts[i] = f;
  if (f) {
    acx_future_hold(f);
    *done = f;
  }
  return ACX_OK;
}

static acx_status_t submit_op(acx_coll_t *c, acxc_opdesc_t *d, acx_future_t **done) {
  const char *fn = op_fn(d->op);
  if (!c) {
    ACX_WARN(COLL, "%s: argument 'coll' is NULL", fn);
    return ACX_ERR_NULL_ARG;
  }
  if (done) *done = NULL;
  if (atomic_load_explicit(&c->closing, memory_order_acquire)) {
    ACX_WARN(COLL, "%s: the coll is being destroyed", fn);
    return ACX_ERR_INVALID_STATE;
  }
  acx_status_t st = validate(c, d);
  if (st == ACX_OK) st = broken(c);
  if (group_mine(c)) {
    if (st != ACX_OK) {
      if (c->gerr == ACX_OK) c->gerr = st;
      return st;
    }
    return group_add(c, d, done);
  }
  if (st != ACX_OK) return st;
  ACXCHECK(lock_submit(c, fn));
  /* A rebuild may have retired the communicator while this call waited for the order: an
   * operation validated before must not land in the next world on this rank only. */
  if ((st = broken(c)) != ACX_OK) {
    pthread_mutex_unlock(&c->submit_lock);
    return st;
  }
  int own = acxc_peer_takes(c, d);
  if (own && !c->host) {
    st = acxc_peer_submit(c, d, done);
  } else if (c->host) {
    /* The worker path keeps the coll's order: the own all-reduce is queued with the rest. */
    acxc_opdesc_t m = *d;
    hold_desc(&m);
    st = own ? acxc_mpi_submit_peer(c, &m, done) : acxc_mpi_submit(c, &m, 1, NULL, done);
  } else {
    st = nccl_submit(c, d, done);
  }
  if (st == ACX_OK && counted_op(d->op)) unj_put(c, done ? *done : NULL, d->op, d->peer);
  pthread_mutex_unlock(&c->submit_lock);
  return st;
}

#define DESC(...) (&(acxc_opdesc_t){__VA_ARGS__})

acx_status_t acx_allreduce(acx_coll_t *coll, acx_buffer_t *send, acx_buffer_t *recv, size_t count, acx_dtype_t dtype,
                           acx_redop_t op, uint32_t stream, acx_future_t **done) {
  return submit_op(coll, DESC(.op = ACXC_OP_ALLREDUCE, .dtype = dtype, .redop = op, .peer = -1, .send = send,
                              .recv = recv, .count = count, .stream = stream), done);
}

acx_status_t acx_broadcast(acx_coll_t *coll, acx_buffer_t *send, acx_buffer_t *recv, size_t count, acx_dtype_t dtype,
                           int root, uint32_t stream, acx_future_t **done) {
  return submit_op(coll, DESC(.op = ACXC_OP_BROADCAST, .dtype = dtype, .peer = root, .send = send, .recv = recv,
                              .count = count, .stream = stream), done);
}

acx_status_t acx_reduce(acx_coll_t *coll, acx_buffer_t *send, acx_buffer_t *recv, size_t count, acx_dtype_t dtype,
                        acx_redop_t op, int root, uint32_t stream, acx_future_t **done) {
  return submit_op(coll, DESC(.op = ACXC_OP_REDUCE, .dtype = dtype, .redop = op, .peer = root, .send = send,
                              .recv = recv, .count = count, .stream = stream), done);
}

acx_status_t acx_allgather(acx_coll_t *coll, acx_buffer_t *send, acx_buffer_t *recv, size_t count, acx_dtype_t dtype,
                           uint32_t stream, acx_future_t **done) {
  return submit_op(coll, DESC(.op = ACXC_OP_ALLGATHER, .dtype = dtype, .peer = -1, .send = send, .recv = recv,
                              .count = count, .stream = stream), done);
}

acx_status_t acx_reduce_scatter(acx_coll_t *coll, acx_buffer_t *send, acx_buffer_t *recv, size_t count,
                                acx_dtype_t dtype, acx_redop_t op, uint32_t stream, acx_future_t **done) {
  return submit_op(coll, DESC(.op = ACXC_OP_REDUCE_SCATTER, .dtype = dtype, .redop = op, .peer = -1, .send = send,
                              .recv = recv, .count = count, .stream = stream), done);
}

acx_status_t acx_send(acx_coll_t *coll, acx_buffer_t *buf, size_t count, acx_dtype_t dtype, int peer, uint32_t stream,
                      acx_future_t **done) {
  return submit_op(coll, DESC(.op = ACXC_OP_SEND, .dtype = dtype, .peer = peer, .send = buf, .count = count,
                              .stream = stream), done);
}

acx_status_t acx_recv(acx_coll_t *coll, acx_buffer_t *buf, size_t count, acx_dtype_t dtype, int peer, uint32_t stream,
                      acx_future_t **done) {
  return submit_op(coll, DESC(.op = ACXC_OP_RECV, .dtype = dtype, .peer = peer, .recv = buf, .count = count,
                              .stream = stream), done);
}

acx_status_t acx_alltoall(acx_coll_t *coll, acx_buffer_t *send, acx_buffer_t *recv, size_t count, acx_dtype_t dtype,
                          uint32_t stream, acx_future_t **done) {
  return submit_op(coll, DESC(.op = ACXC_OP_ALLTOALL, .dtype = dtype, .peer = -1, .send = send, .recv = recv,
                              .count = count, .stream = stream), done);
}

/* ------------------------------------------------------------------------------------------ */
/* waiting                                                                                    */

/* The watchdog completes a late operation at its deadline; give it a few ticks beyond. */
static int64_t wait_budget(const acx_coll_t *c, int64_t timeout_ns) {
  return timeout_ns >= 0 ? timeout_ns : c->timeout_ns + c->timeout_ns / 4 + 1000000000LL;
}

acx_status_t acx_coll_wait(acx_coll_t *coll, acx_future_t *done, int64_t timeout_ns) {
  ACX_CHECK_NULL(coll);
  ACX_CHECK_NULL(done);
  acx_status_t st = acx_future_wait(done, wait_budget(coll, timeout_ns), NULL, 0, NULL);
  acx_future_release(done);
  if (st == ACX_ERR_TIMEOUT)
    ACX_WARN(COLL, "acx_coll_wait: the operation did not finish within %" PRId64 " ms (it stays in flight)",
             wait_budget(coll, timeout_ns) / 1000000);
  return st;
}

#define SYNC(call)                                                                                 \
  do {                                                                                             \
    acx_future_t *f_ = NULL;                                                                       \
    acx_status_t s_ = (call);                                                                      \
    if (s_ != ACX_OK) return s_;                                                                   \
    if (!f_) {                                                                                     \
      ACX_WARN(COLL, "%s: a synchronous call inside a group cannot wait for the group", __func__); \
      return ACX_ERR_INVALID_STATE;                                                                \
    }                                                                                              \
    return acx_coll_wait(coll, f_, timeout_ns);                                                    \
  } while (0)

static acx_status_t no_sync_in_group(acx_coll_t *c, const char *fn) {
  if (c && group_mine(c)) {
    ACX_WARN(COLL, "%s: a synchronous call inside a group would wait for itself", fn);
    return ACX_ERR_INVALID_STATE;
  }
  return ACX_OK;
}

acx_status_t acx_allreduce_sync(acx_coll_t *coll, acx_buffer_t *send, acx_buffer_t *recv, size_t count,
                                acx_dtype_t dtype, acx_redop_t op, uint32_t stream, int64_t timeout_ns) {
  ACXCHECK(no_sync_in_group(coll, __func__));
  SYNC(acx_allreduce(coll, send, recv, count, dtype, op, stream, &f_));
}
acx_status_t acx_broadcast_sync(acx_coll_t *coll, acx_buffer_t *send, acx_buffer_t *recv, size_t count,
                                acx_dtype_t dtype, int root, uint32_t stream, int64_t timeout_ns) {
  ACXCHECK(no_sync_in_group(coll, __func__));
  SYNC(acx_broadcast(coll, send, recv, count, dtype, root, stream, &f_));
}
acx_status_t acx_reduce_sync(acx_coll_t *coll, acx_buffer_t *send, acx_buffer_t *recv, size_t count, acx_dtype_t dtype,
                             acx_redop_t op, int root, uint32_t stream, int64_t timeout_ns) {
  ACXCHECK(no_sync_in_group(coll, __func__));
  SYNC(acx_reduce(coll, send, recv, count, dtype, op, root, stream, &f_));
}
acx_status_t acx_allgather_sync(acx_coll_t *coll, acx_buffer_t *send, acx_buffer_t *recv, size_t count,
                                acx_dtype_t dtype, uint32_t stream, int64_t timeout_ns) {
  ACXCHECK(no_sync_in_group(coll, __func__));
  SYNC(acx_allgather(coll, send, recv, count, dtype, stream, &f_));
}
acx_status_t acx_reduce_scatter_sync(acx_coll_t *coll, acx_buffer_t *send, acx_buffer_t *recv, size_t count,
                                     acx_dtype_t dtype, acx_redop_t op, uint32_t stream, int64_t timeout_ns) {
  ACXCHECK(no_sync_in_group(coll, __func__));
  SYNC(acx_reduce_scatter(coll, send, recv, count, dtype, op, stream, &f_));
}
acx_status_t acx_alltoall_sync(acx_coll_t *coll, acx_buffer_t *send, acx_buffer_t *recv, size_t count,
                               acx_dtype_t dtype, uint32_t stream, int64_t timeout_ns) {
  ACXCHECK(no_sync_in_group(coll, __func__));
  SYNC(acx_alltoall(coll, send, recv, count, dtype, stream, &f_));
}

acx_status_t acx_coll_synchronize(acx_coll_t *c, int64_t timeout_ns) {
  ACX_CHECK_NULL_AS(c, "coll");
  ACXCHECK(no_sync_in_group(c, __func__));
  if (c->host) {
    /* c->mpi is replaced by a rebuild, under the submit lock: take it under that lock too. */
    ACXCHECK(lock_submit(c, __func__));
    acxc_mpi_t *m = acxc_mpi_wait_begin(c);
    pthread_mutex_unlock(&c->submit_lock);
    if (!m) return broken(c) != ACX_OK ? broken(c) : ACX_ERR_INVALID_STATE;
    acx_status_t st = acxc_mpi_synchronize(c, m, wait_budget(c, timeout_ns));
    acxc_mpi_wait_end(m);
    return st;
  }
  ACXCHECK(broken(c));
  uint64_t used = atomic_load_explicit(&c->streams_used, memory_order_relaxed);
  acx_future_t *fs[ACXI_MAX_STREAMS + 1];
  int n = 0;
  acx_status_t st = lock_submit(c, __func__);
  int locked = st == ACX_OK;
  for (int s = 0; st == ACX_OK && s < ACXI_MAX_STREAMS; s++) {
    if (!(used & ACXI_STREAM_BIT(s))) continue;
    acxi_cmd_t cmd = {.op = ACXC_OP_FENCE, .stream = (uint32_t)s, .arg = {c->comm_id}};
    st = acxi_device_submit(c->dev, &cmd, NULL, 0, 0, -1, acxi_deadline(acxi_device_timeout(c->dev, -1)), &fs[n]);
    if (st == ACX_OK && (st = acxc_coll_track(c, fs[n])) != ACX_OK) acx_future_release(fs[n]);
    else if (st == ACX_OK) n++;
  }
  /* The own all-reduce's operations report a failure of one sent without a future here. */
  if (st == ACX_OK && acxc_peer_on(c) && acxc_peer_ops(c)) {
    st = acxc_peer_fence(c, &fs[n]);
    if (st == ACX_OK && (st = acxc_coll_track(c, fs[n])) != ACX_OK) acx_future_release(fs[n]);
    else if (st == ACX_OK) n++;
  }
  if (locked) pthread_mutex_unlock(&c->submit_lock);
  for (int i = 0; i < n; i++) {
    acx_status_t w = acx_coll_wait(c, fs[i], timeout_ns);
    if (st == ACX_OK) st = w;
  }
  return st == ACX_OK ? broken(c) : st;
}

/* ------------------------------------------------------------------------------------------ */
/* groups                                                                                     */

acx_status_t acx_coll_group_start(acx_coll_t *c) {
  ACX_CHECK_NULL_AS(c, "coll");
  if (group_mine(c)) {
    ACX_WARN(COLL, "acx_coll_group_start: this thread already has a group open (groups do not nest)");
    return ACX_ERR_INVALID_STATE;
  }
  ACXCHECK(lock_submit(c, __func__));
  c->in_group = 1;
  c->group_owner = pthread_self();
  c->gcount = 0;
  c->gerr = ACX_OK;
  return ACX_OK;
}

typedef struct group_then {
  int n;
  acx_future_t *f[];
} group_then_t;

static void group_done(void *arg, acx_future_t *future, uint64_t cookie) {
  group_then_t *g = arg;
  acx_status_t st = acx_future_result(future, NULL, 0, NULL);
  for (int i = 0; i < g->n; i++) {
    acx_future_complete(g->f[i], st, NULL, 0);
    acx_future_release(g->f[i]);
  }
  free(g);
}

static void group_drop(void *arg) {
  group_then_t *g = arg;
  for (int i = 0; i < g->n; i++) {
    acx_future_complete(g->f[i], ACX_ERR_CANCELLED, NULL, 0);
    acx_future_release(g->f[i]);
  }
  free(g);
}

/* Waits until the executor has read the group that used slot `seq % SLOTS` before. */
static acx_status_t slot_wait(acx_coll_t *c, uint64_t seq) {
  if (seq <= ACXC_GROUP_SLOTS) return ACX_OK;
  int64_t deadline = acxi_deadline(acxi_device_timeout(c->dev, -1));
  for (unsigned i = 0;; i++) {
    /* acquire: pairs with the executor's release store after it copied the entries. */
    if (atomic_load_explicit(&c->reg->consumed, memory_order_acquire) >= seq - ACXC_GROUP_SLOTS) return ACX_OK;
    if (acxi_now_ns() >= deadline) {
      ACX_WARN(COLL, "acx_coll_group_end: the executor has not read group %" PRIu64 " by the deadline",
               seq - ACXC_GROUP_SLOTS);
      return ACX_ERR_QUEUE_FULL;
    }
    if (i < 1000) acxi_cpu_relax();
    else nanosleep(&(struct timespec){0, 50000}, NULL);
  }
}

static void group_clear(acx_coll_t *c, acx_status_t fail_members) {
  for (int i = 0; i < c->gcount; i++) {
    if (c->gfuts[i]) {
      if (fail_members != ACX_OK) acx_future_complete(c->gfuts[i], fail_members, NULL, 0);
      acx_future_release(c->gfuts[i]);
      c->gfuts[i] = NULL;
    }
    acxc_opdesc_t *d = &c->gdesc[i];
    acx_buffer_release(d->send);
    if (d->recv != d->send) acx_buffer_release(d->recv);
  }
  c->gcount = 0;
}

acx_status_t acx_coll_group_end(acx_coll_t *c, acx_future_t **done) {
  ACX_CHECK_NULL_AS(c, "coll");
  if (done) *done = NULL;
  if (!group_mine(c)) {
    ACX_WARN(COLL, "acx_coll_group_end: this thread has no group open");
    return ACX_ERR_INVALID_STATE;
  }
  c->in_group = 0;
  acx_status_t st = c->gerr != ACX_OK ? c->gerr : broken(c);
  if (st == ACX_OK && c->gcount == 0) {
    ACX_WARN(COLL, "acx_coll_group_end: the group is empty");
    st = ACX_ERR_INVALID_ARG;
  }
  if (st != ACX_OK) {
    group_clear(c, st);
    pthread_mutex_unlock(&c->submit_lock);
    return st;
  }
  if (c->host) {
    /* The MPI path takes the members (their buffer references and futures). */
    acx_future_t **mf = malloc((size_t)c->gcount * sizeof *mf);
    if (!mf) {
      group_clear(c, ACX_ERR_NO_MEMORY);
      pthread_mutex_unlock(&c->submit_lock);
      return ACX_ERR_NO_MEMORY;
    }
    memcpy(mf, c->gfuts, (size_t)c->gcount * sizeof *mf);
    /* The members' records hold their futures before the worker may complete and drop them. */
    for (int i = 0; i < c->gcount; i++)
      if (c->gfuts[i] && counted_op(c->gdesc[i].op)) acx_future_hold(c->gfuts[i]);
    int gn = c->gcount;
    st = acxc_mpi_submit(c, c->gdesc, c->gcount, mf, done);
    for (int i = 0; i < gn; i++) {
      if (!counted_op(c->gdesc[i].op)) continue;
      if (st == ACX_OK) unj_put_held(c, c->gfuts[i], c->gdesc[i].op, c->gdesc[i].peer);
      else if (c->gfuts[i]) acx_future_release(c->gfuts[i]);
    }
    for (int i = 0; i < c->gcount; i++) c->gfuts[i] = NULL;
    c->gcount = 0;
    pthread_mutex_unlock(&c->submit_lock);
    return st;
  }
  int n = c->gcount, nb = 0;
  uint64_t seq = ++c->group_seq;
  acxi_bufarg_t *ba = malloc((size_t)n * 2 * sizeof *ba);
  group_then_t *g = malloc(sizeof *g + (size_t)n * sizeof(acx_future_t *));
  if (!ba || !g) st = ACX_ERR_NO_MEMORY;
  if (st == ACX_OK) st = slot_wait(c, seq);
  acx_future_t *f = NULL;
  if (st == ACX_OK) {
    g->n = 0;
    for (int i = 0; i < n; i++) {
      if (c->gdesc[i].send) ba[nb++] = (acxi_bufarg_t){c->gdesc[i].send, "send"};
      if (c->gdesc[i].recv && c->gdesc[i].recv != c->gdesc[i].send) ba[nb++] = (acxi_bufarg_t){c->gdesc[i].recv, "recv"};
      if (c->gfuts[i]) g->f[g->n++] = c->gfuts[i];
    }
    uint64_t slot = seq % ACXC_GROUP_SLOTS;
    memcpy(c->reg->slots[slot], c->gents, (size_t)n * sizeof(acxc_group_entry_t));
    acxi_cmd_t cmd = {.op = ACXC_OP_GROUP, .stream = c->gstream, .bytes = (uint64_t)n,
                      .off = {offsetof(acxc_region_t, slots) + slot * sizeof c->reg->slots[0]},
                      .arg = {c->comm_id, 0, 0, c->region->id, seq}};
    int want = done || g->n > 0;
    st = acxi_device_submit(c->dev, &cmd, ba, nb, 0, -1, acxi_deadline(acxi_device_timeout(c->dev, -1)),
                            want ? &f : NULL);
    if (st == ACX_OK) atomic_fetch_or_explicit(&c->streams_used, ACXI_STREAM_BIT(c->gstream), memory_order_relaxed);
    if (st == ACX_OK && f) st = acxc_coll_track(c, f);
  }
  if (st != ACX_OK) {
    /* A slot whose group never reached the executor stays unread: step back over it. */
    if (!f) c->group_seq--;
    free(g);
    group_clear(c, st);
    if (f) acx_future_release(f);
  } else {
    for (int i = 0; i < n; i++)
      if (counted_op(c->gents[i].op)) unj_put(c, c->gfuts[i], c->gents[i].op, c->gents[i].peer); /* g holds them */
    for (int i = 0; i < n; i++) c->gfuts[i] = NULL; /* now owned by g */
    group_clear(c, ACX_OK);
    if (f && g->n > 0) {
      acxi_future_on_complete(f, group_done, group_drop, g, 0);
    } else {
      free(g);
    }
    if (done) *done = f;
    else if (f) acx_future_release(f);
  }
  free(ba);
  pthread_mutex_unlock(&c->submit_lock);
  return st;
}

/* ------------------------------------------------------------------------------------------ */
/* create / destroy                                                                           */

acx_status_t acx_coll_rank(const acx_coll_t *c, int *rank) {
  ACX_CHECK_NULL_AS(c, "coll");
  ACX_CHECK_NULL(rank);
  *rank = c->rank;
  return ACX_OK;
}

acx_status_t acx_coll_size(const acx_coll_t *c, int *size) {
  ACX_CHECK_NULL_AS(c, "coll");
  ACX_CHECK_NULL(size);
  *size = c->size;
  return ACX_OK;
}

acx_status_t acx_coll_state(const acx_coll_t *c) {
  ACX_CHECK_NULL_AS(c, "coll");
  return broken(c);
}

acx_status_t acx_coll_abort(acx_coll_t *c, acx_status_t cause) {
  ACX_CHECK_NULL_AS(c, "coll");
  acxc_coll_break(c, cause == ACX_OK ? ACX_ERR_CANCELLED : cause, 1, "acx_coll_abort");
  return ACX_OK;
}

/* Every rank's n values of `size` bytes (MPI type `type`) at mine combined with MPI_MIN over the
 * world into all, within the world's deadline. */
static acx_status_t agree_min(acx_coll_t *c, const void *mine, void *all, int n, MPI_Datatype type, size_t size) {
  MPI_Request req;
  /* On the heap: a timed-out exchange is parked with its buffers, which MPI may still write. */
  char *v = malloc(2 * (size_t)n * size);
  if (!v) return ACX_ERR_NO_MEMORY;
  memcpy(v, mine, (size_t)n * size);
  if (MPI_Iallreduce(v, v + (size_t)n * size, n, type, MPI_MIN, c->world->comm, &req) != MPI_SUCCESS) {
    free(v);
    return ACX_ERR_MPI;
  }
  acx_status_t st = acxc_world_wait(req, v, acxi_deadline(c->world->timeout_ns));
  if (st == ACX_ERR_TIMEOUT) ACX_WARN(COLL, "coll (rank %d of %d): a rank did not arrive within the world's timeout",
                                      c->rank, c->size);
  if (st != ACX_OK) return st; /* v is parked */
  memcpy(all, v + (size_t)n * size, (size_t)n * size);
  free(v);
  return ACX_OK;
}

acx_status_t acxc_coll_agree_min_n(acx_coll_t *c, const int *mine, int *all, int n) {
  return agree_min(c, mine, all, n, MPI_INT, sizeof(int));
}

acx_status_t acxc_coll_agree_min(acx_coll_t *c, int mine, int *all) { return acxc_coll_agree_min_n(c, &mine, all, 1); }

static acx_status_t agree_min64_n(acx_coll_t *c, const int64_t *mine, int64_t *all, int n) {
  return agree_min(c, mine, all, n, MPI_INT64_T, sizeof(int64_t));
}

#if ACX_HAVE_NCCL
static int env_set(const char *name) {
  const char *v = getenv(name);
  return v && atoi(v) != 0;
}

/* ACX_COLL_BLOCKING: 1 always, 0 never, -1 (auto) when NCCL's traffic takes its network transport:
 * the world spans nodes, or NCCL_P2P_DISABLE and NCCL_SHM_DISABLE are both set. That path is
 * faster on a blocking communicator (nccl_exec.c, "blocking communicators"). */
static unsigned init_options(const acx_coll_t *c) {
  int64_t v = acxi_param_int("ACX_COLL_BLOCKING");
  int blocking = v > 0 || (v < 0 && (c->world->nodes > 1 || (env_set("NCCL_P2P_DISABLE") && env_set("NCCL_SHM_DISABLE"))));
  return blocking ? ACXC_INIT_BLOCKING : 0;
}
#endif

acx_status_t acxc_nccl_make_id(acx_device_t *dev, acx_host_mem_t *region) {
#if ACX_HAVE_NCCL
  acxi_cmd_t cmd = {.op = ACXC_OP_UNIQUE_ID, .arg = {0, 0, 0, region->id}};
  acxi_cpl_t cpl = {0};
  acx_status_t st = acxi_device_call(dev, &cmd, NULL, 0, 0, -1, acxi_device_timeout(dev, -1), &cpl);
  if (st != ACX_OK)
    ACX_WARN(COLL, "the executor could not make an NCCL unique id: %s (NCCL code %d)", acx_status_str(st), cpl.lib_code);
  return st;
#else
  (void)dev;
  (void)region;
  ACX_WARN(COLL, "acxc_nccl_make_id: this build has no NCCL");
  return ACX_ERR_NOT_SUPPORTED;
#endif
}

acx_status_t acxc_coll_init_comm(acx_coll_t *c, acxi_cmd_t *cmd, int64_t wait_ns, acxi_cpl_t *cpl) {
  int64_t deadline = acxi_deadline(wait_ns);
  acx_future_t *f = NULL;
  pthread_mutex_lock(&c->attempt_lock);
  int abandoned = c->attempt_key && c->abandoned_key == c->attempt_key;
  acx_status_t st = abandoned ? ACX_ERR_PEER_LOST : acxi_device_submit(c->dev, cmd, NULL, 0, 0, -1, deadline, &f);
  if (st == ACX_OK) c->init_comm = cmd->arg[0];
  pthread_mutex_unlock(&c->attempt_lock);
  if (abandoned) {
    ACX_WARN(COLL, "coll (rank %d of %d): a peer abandoned this attempt of the rebuild before this rank's NCCL "
             "communicator creation began", c->rank, c->size);
    return st;
  }
  if (st != ACX_OK) return st;
  int64_t left = deadline - acxi_now_ns();
  st = acx_future_wait(f, left > 0 ? left : 0, cpl, sizeof *cpl, NULL);
  acx_future_release(f);
  pthread_mutex_lock(&c->attempt_lock);
  c->init_comm = 0;
  pthread_mutex_unlock(&c->attempt_lock);
  return st;
}

static acx_status_t nccl_init(acx_coll_t *c, int64_t init_timeout_ns) {
#if !ACX_HAVE_NCCL
  (void)init_timeout_ns;
  ACX_WARN(COLL, "acx_coll_create: a cuda device needs NCCL, and this libacx was built without it");
  return ACX_ERR_NOT_SUPPORTED;
#else
  /* NCCL refuses two ranks of one communicator on one GPU (it fails the init with an invalid-usage
   * code that says nothing of why); every rank sees the world's largest sharing, so all refuse. */
  int sharers = acxc_world_gpu_sharers(c->world);
  if (sharers > 1) {
    acx_topo_binding_t b;
    acx_world_binding(c->world, &b);
    char peers[256];
    acxc_world_gpu_peers_str(c->world, peers, sizeof peers);
    ACX_WARN(COLL, "acx_coll_create: a cuda coll needs one rank per GPU (NCCL takes no two ranks of a communicator "
             "on one GPU), and up to %d ranks share a GPU in this world; this rank's GPU %s on node %d serves "
             "ranks %s. Leave ACX_COLL_HIER at -1 (or 1) for hierarchical collectives, run one rank per GPU, or use "
             "the host kind for these ranks", sharers,
             b.pci_bus_id[0] ? b.pci_bus_id : "(none)", c->world->node, peers);
    return ACX_ERR_NOT_SUPPORTED;
  }
  if (!c->region) ACXCHECK(acx_host_alloc(c->dev, sizeof(acxc_region_t), &c->region)); /* kept by rebuilds */
  void *p;
  size_t bytes;
  ACXCHECK(acx_host_mem_ptr(c->region, &p, &bytes));
  c->reg = p;
  memset(c->reg, 0, offsetof(acxc_region_t, slots));
  c->reg->magic = ACXC_REGION_MAGIC;
  /* Rank 0's executor makes the id (and hosts NCCL's bootstrap root); MPI carries it. */
  acx_status_t made = c->rank == 0 ? acxc_nccl_make_id(c->dev, c->region) : ACX_OK;
  ACXCHECK(acxc_world_bcast_nccl_id(c->world, 0, made, c->reg->nccl_id));
  c->comm_id = acxc_next_comm_id();
  acxi_cmd_t cmd = {.op = ACXC_OP_INIT,
                    .arg = {c->comm_id, (uint64_t)c->size, (uint64_t)c->rank, c->region->id,
                            (uint64_t)(init_timeout_ns / 1000000)},
                    .off = {init_options(c)}};
  ACX_INFO(COLL, "acx_coll_create: rank %d of %d, %d node(s): %s NCCL communicator", c->rank, c->size,
           c->world->nodes, cmd.off[0] & ACXC_INIT_BLOCKING ? "blocking" : "non-blocking");
  acxi_cpl_t cpl = {0};
  acx_status_t st = acxc_coll_init_comm(c, &cmd, init_timeout_ns + 5000000000LL, &cpl);
  if (st != ACX_OK)
    ACX_WARN(COLL, "acx_coll_create: NCCL communicator creation (rank %d of %d) failed: %s (NCCL code %d)", c->rank,
             c->size, acx_status_str(st), cpl.lib_code);
  return st;
#endif
}

static void coll_free(acx_coll_t *c) {
  unj_reset(c);
  acxc_peer_free(c);
  if (c->region) acx_host_free(c->region);
  pthread_mutex_destroy(&c->submit_lock);
  pthread_mutex_destroy(&c->track_lock);
  pthread_mutex_destroy(&c->attempt_lock);
  pthread_mutex_destroy(&c->reg_lock);
  pthread_mutex_destroy(&c->report_lock);
  free(c->tv);
  free(c->gents);
  free(c->gdesc);
  free(c->gfuts);
  acxi_device_release(c->dev);
  free(c);
}

acx_status_t acx_coll_create(acx_world_t *world, acx_device_t *dev, acx_system_t *sys, const acx_coll_config_t *cfg,
                             acx_coll_t **out) {
  ACX_CHECK_NULL(world);
  ACX_CHECK_NULL(dev);
  ACX_CHECK_NULL(sys);
  ACX_CHECK_NULL_AS(out, "coll");
  *out = NULL;
  acx_coll_config_t conf = ACX_COLL_CONFIG_INIT;
  if (cfg) {
    ACX_CHECK_ARG(cfg->size == sizeof(acx_coll_config_t),
                  "acx_coll_create: cfg->size is %zu, expected %zu (use ACX_COLL_CONFIG_INIT)", cfg->size,
                  sizeof(acx_coll_config_t));
    conf = *cfg;
  }
  ACX_CHECK_ARG(dev->sys == sys, "acx_coll_create: argument 'dev' was opened in another actor system than 'sys'");
  ACXCHECK(acxi_device_state_status(dev));
  acx_coll_t *c = calloc(1, sizeof *c);
  if (!c) return ACX_ERR_NO_MEMORY;
  c->world = world;
  c->dev = dev;
  acxi_device_hold(dev);
  c->sys = sys;
  c->rank = world->rank;
  c->size = world->size;
  c->host = c->host_kind = dev->kind_id == ACXI_KIND_HOST;
  c->timeout_ns = conf.timeout_ns > 0 ? conf.timeout_ns : acxi_param_int("ACX_COLL_TIMEOUT") * 1000000;
  if (c->timeout_ns <= 0) c->timeout_ns = 60000000000LL;
  int64_t init_ns = conf.init_timeout_ns > 0 ? conf.init_timeout_ns : acxi_param_int("ACX_NCCL_INIT_TIMEOUT") * 1000000;
  c->generation = atomic_load_explicit(&dev->generation, memory_order_acquire);
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
  pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
  pthread_mutex_init(&c->submit_lock, &ma);
  pthread_mutexattr_destroy(&ma);
  pthread_mutex_init(&c->track_lock, NULL);
  pthread_mutex_init(&c->attempt_lock, NULL);
  pthread_mutex_init(&c->reg_lock, NULL);
  pthread_mutex_init(&c->report_lock, NULL);
  c->report = (acx_coll_rebuild_report_t){.size = sizeof c->report, .short_rank = -1};
  atomic_init(&c->broken, ACX_OK);
  atomic_init(&c->supervised, 0);
  c->gents = malloc(ACXC_GROUP_MAX * sizeof *c->gents);
  c->gdesc = malloc(ACXC_GROUP_MAX * sizeof *c->gdesc);
  c->gfuts = calloc(ACXC_GROUP_MAX, sizeof *c->gfuts);
  acx_status_t st = c->gents && c->gdesc && c->gfuts ? ACX_OK : ACX_ERR_NO_MEMORY;

  /* Every rank must take the same path: a kind mismatch would leave one side in NCCL init and
   * the other in MPI. */
  int all = 0;
  acx_status_t ag = acxc_coll_agree_min(c, st == ACX_OK ? c->host : -1, &all);
  int any = 0;
  if (ag == ACX_OK) ag = acxc_coll_agree_min(c, st == ACX_OK ? -c->host : 1, &any); /* any = -max */
  if (st == ACX_OK) st = ag;
  if (st == ACX_OK && (all < 0 || any > 0)) st = ACX_ERR_NO_MEMORY;
  if (st == ACX_OK && all != -any) {
    ACX_WARN(COLL, "acx_coll_create: ranks disagree on the device kind (this rank: %s); every rank needs the same",
             dev->kind);
    st = ACX_ERR_INVALID_ARG;
  }
  /* ... and the same shape: hierarchical everywhere or nowhere (ACX_COLL_HIER is read per rank). */
  if (st == ACX_OK) {
    int mode = acxc_hier_mode(c), lo = 0, hi = 0;
    st = acxc_coll_agree_min(c, mode, &lo);
    if (st == ACX_OK) st = acxc_coll_agree_min(c, -mode, &hi);
    if (st == ACX_OK && lo != -hi) {
      ACX_WARN(COLL, "acx_coll_create: ranks disagree on hierarchical collectives (this rank: %s; ACX_COLL_HIER=%" PRId64
               "): set ACX_COLL_HIER the same on every rank", mode ? "on" : "off", acxi_param_int("ACX_COLL_HIER"));
      st = ACX_ERR_INVALID_ARG;
    }
    c->hier_on = st == ACX_OK && mode;
    if (c->hier_on) c->host = 1; /* the worker path runs it */
  }
  if (st == ACX_OK) {
    if (c->hier_on) {
      st = acxc_mpi_create(c);
      if (st == ACX_OK) st = acxc_hier_create(c, init_ns);
    } else {
      st = c->host ? acxc_mpi_create(c) : nccl_init(c, init_ns);
    }
  }
  st = acxc_peer_create(c, st, init_ns);
  /* A rank that failed must not leave the others believing in a communicator. */
  int ok = 0;
  ag = acxc_coll_agree_min(c, st == ACX_OK, &ok);
  if (st == ACX_OK && ag != ACX_OK) st = ag;
  if (st == ACX_OK && !ok) {
    ACX_WARN(COLL, "acx_coll_create: another rank failed to create its side of the communicator");
    st = ACX_ERR_PEER_LOST;
  }
  if (st == ACX_OK) {
    char name[32];
    if (!conf.name) snprintf(name, sizeof name, "coll%d", atomic_fetch_add(&coll_counter, 1));
    st = acxc_coll_actor_start(c, conf.name ? conf.name : name);
  }
  if (st != ACX_OK) {
    if (c->host && c->mpi) acxc_mpi_destroy(c, 0);
    acxc_hier_destroy(c);
    if (!c->host && c->comm_id) {
      acxi_cmd_t cmd = {.op = ACXC_OP_DESTROY, .arg = {c->comm_id, 0, 0, 0, 1000}};
      (void)acxi_device_call(c->dev, &cmd, NULL, 0, 0, -1, 5000000000LL, NULL);
    }
    coll_free(c);
    return st;
  }
  ACX_INFO(COLL, "coll ready: rank %d of %d on a %s device (%s), timeout %" PRId64 " ms", c->rank, c->size, dev->kind,
           c->hier_on ? "hierarchical: ranks of a device through its memory, leaders among themselves"
           : c->host  ? "MPI on host-staged copies"
                      : "NCCL in the executor", c->timeout_ns / 1000000);
  *out = c;
  return ACX_OK;
}

acx_status_t acx_coll_destroy(acx_coll_t *c, int64_t timeout_ns) {
  if (!c) return ACX_OK;
  if (group_mine(c)) {
    ACX_WARN(COLL, "acx_coll_destroy: a group is open on this thread; it is dropped");
    c->in_group = 0;
    group_clear(c, ACX_ERR_CANCELLED);
    pthread_mutex_unlock(&c->submit_lock);
  }
  int64_t budget = timeout_ns >= 0 ? timeout_ns : c->timeout_ns;
  acx_status_t st = broken(c) == ACX_OK ? acx_coll_synchronize(c, budget) : broken(c);
  atomic_store_explicit(&c->closing, 1, memory_order_release);
  acxc_coll_regs_destroy(c, budget);
  acxc_coll_actor_stop(c);
  if (broken(c) != ACX_OK) acxc_peer_abort(c, broken(c));
  if (!c->host) acxc_peer_destroy(c, budget);
  if (c->host) {
    acxc_mpi_destroy(c, budget);
    acxc_peer_destroy(c, budget);
    acxc_hier_destroy(c);
  } else if (atomic_load_explicit(&c->dev->generation, memory_order_acquire) == c->generation) {
    acxi_cmd_t cmd = {.op = ACXC_OP_DESTROY, .arg = {c->comm_id, 0, 0, 0, (uint64_t)(budget / 1000000)}};
    acx_status_t d = acxi_device_call(c->dev, &cmd, NULL, 0, 0, -1, budget + 1000000000LL, NULL);
    if (d != ACX_OK) ACX_WARN(COLL, "acx_coll_destroy: DESTROY of the communicator: %s", acx_status_name(d));
  }
  fail_tracked(c, ACX_ERR_CANCELLED);
  coll_free(c);
  return st;
}

/* ------------------------------------------------------------------------------------------ */
/* world rebuild (collectives/rebuild.c)                                                      */

void acxc_coll_retire(acx_coll_t *c, acx_status_t cause) {
  acxc_coll_break(c, cause, 1, "the world is being rebuilt");
  /* An earlier cause (deadline, NCCL error, lost device) gives way to the retryable one. */
  atomic_store_explicit(&c->broken, (int)cause, memory_order_release);
  fail_tracked(c, cause);
  if (c->host) acxc_mpi_break(c, cause);
}

void acxc_coll_abandon_attempt(acx_coll_t *c, uint64_t key, acx_status_t cause) {
  if (!c || !key) return;
  pthread_mutex_lock(&c->attempt_lock);
  if (key > c->abandoned_key) c->abandoned_key = key;
  uint64_t id = key == c->attempt_key ? c->init_comm : 0;
  if (id) {
    acxi_cmd_t cmd = {.op = ACXC_OP_ABORT, .arg = {id, (uint64_t)cause}};
    acx_status_t st = acxi_device_submit(c->dev, &cmd, NULL, 0, 0, -1, acxi_deadline(100000000), NULL);
    if (st != ACX_OK)
      ACX_WARN(COLL, "could not abort the abandoned communicator creation in the executor (%s): it ends at its own "
               "deadline", acx_status_name(st));
  }
  pthread_mutex_unlock(&c->attempt_lock);
  if (id)
    ACX_WARN(COLL, "coll (rank %d of %d): a peer abandoned the rebuild's attempt; this rank's NCCL communicator "
             "creation is aborted (%s)", c->rank, c->size, acx_status_name(cause));
}

/* The rank below the count in the rebuild's agreement (acxc_coll_reinit): 2^20 ranks, 2^43 operations. */
#define UNJ_RANK_BITS 20
#define UNJ_RANK_MASK ((1ULL << UNJ_RANK_BITS) - 1)

/* After the rebuild's agreement: what became of the operations not every rank submitted, into the
 * report and the log; the next epoch counts from 0. Under submit_lock. */
static void unjoined_report(acx_coll_t *c, uint64_t joined, int short_rank, uint64_t most) {
  acx_coll_rebuild_report_t r = {.size = sizeof r};
  r.submitted = c->ncoll;
  r.joined = joined;
  r.short_rank = joined == most ? -1 : short_rank;
  acxc_unjoined_count(c->unj, joined, c->ncoll, &r);
  uint64_t un = c->ncoll - joined;
  if (r.unjoined_ok)
    ACX_WARN(COLL, "coll (rank %d of %d): %" PRIu64 " collective operation(s) completed here as success although "
             "rank %d never submitted them (it submitted %" PRIu64 " in the epoch that ended, this rank %" PRIu64
             "): their results are wrong (acx_coll_rebuild_report)", c->rank, c->size, r.unjoined_ok, r.short_rank,
             joined, c->ncoll);
  else if (un)
    ACX_INFO(COLL, "coll (rank %d of %d): %" PRIu64 " collective operation(s) of the epoch that ended were not joined "
             "by rank %d: %" PRIu64 " failed, %" PRIu64 " fire-and-forget, %" PRIu64 " not on record, %" PRIu64
             " succeeded where this rank's result needs no other (a broadcast's root, a reduce's other ranks)",
             c->rank, c->size, un, r.short_rank, r.unjoined_failed, r.unjoined_noreply, r.unjoined_unknown,
             r.unjoined_ok_local);
  pthread_mutex_lock(&c->report_lock);
  r.rebuilds = c->report.rebuilds + 1;
  c->report = r;
  pthread_mutex_unlock(&c->report_lock);
  unj_reset(c);
}

acx_status_t acxc_coll_reinit(acx_coll_t *c, int64_t init_timeout_ns, uint64_t key,
                              void (*on_fail)(void *arg, acx_status_t st), void *arg) {
  ACXCHECK(lock_submit(c, __func__));
  pthread_mutex_lock(&c->attempt_lock);
  c->attempt_key = key;
  pthread_mutex_unlock(&c->attempt_lock);
  /* A watchdog probe of the old communicator must not break the new one. */
  int64_t deadline = acxi_deadline(2000000000LL);
  while (atomic_load_explicit(&c->check_outstanding, memory_order_acquire) && acxi_now_ns() < deadline)
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  fail_tracked(c, ACX_ERR_WORLD_REBUILDING);
  acx_status_t st;
  uint64_t gen = atomic_load_explicit(&c->dev->generation, memory_order_acquire);
  /* The own all-reduce's set goes too (its abort word is up: the break raised it); on the worker
   * path once the worker, which runs its operations, has stopped. */
  if (!c->host) acxc_peer_destroy(c, 1000000000LL);
  if (c->host) {
    /* A fresh MPI communicator: collectives a peer abandoned on the old one must not match. */
    acxc_mpi_destroy(c, 0);
    acxc_peer_destroy(c, 1000000000LL);
    acxc_hier_destroy(c);
    st = acxc_mpi_create(c);
    if (st == ACX_OK && c->hier_on)
      st = acxc_hier_create(c, init_timeout_ns > 0 ? init_timeout_ns : acxi_param_int("ACX_NCCL_INIT_TIMEOUT") * 1000000);
  } else {
    if (c->comm_id && gen == c->generation) {
      acxi_cmd_t cmd = {.op = ACXC_OP_DESTROY, .arg = {c->comm_id, 0, 0, 0, 1000}};
      (void)acxi_device_call(c->dev, &cmd, NULL, 0, 0, -1, 5000000000LL, NULL);
    }
    c->group_seq = 0; /* nccl_init clears the region's `consumed` */
    st = nccl_init(c, init_timeout_ns > 0 ? init_timeout_ns : acxi_param_int("ACX_NCCL_INIT_TIMEOUT") * 1000000);
  }
  pthread_mutex_lock(&c->attempt_lock);
  int abandoned = key && c->abandoned_key == key;
  c->attempt_key = 0;
  pthread_mutex_unlock(&c->attempt_lock);
  /* This rank's own failure: the others may wait for it in NCCL's creation until its deadline.
   * Told before the own all-reduce's agreement below, which the others reach only once their
   * creation has ended. */
  if (st != ACX_OK && !abandoned && on_fail) on_fail(arg, st);
  st = acxc_peer_create(c, st, init_timeout_ns);
  /* Every rank's success, and how many collective operations each submitted in the epoch that
   * ends: the fewest (with the lowest rank that submitted so few, packed below it) and the most. */
  int64_t mine[3] = {st == ACX_OK, (int64_t)((c->ncoll << UNJ_RANK_BITS) | (uint64_t)c->rank), -(int64_t)c->ncoll};
  int64_t all[3] = {0, 0, 0};
  acx_status_t ag = agree_min64_n(c, mine, all, 3);
  if (st == ACX_OK && ag != ACX_OK) st = ag;
  if (st == ACX_OK && !all[0]) st = ACX_ERR_PEER_LOST;
  if (st == ACX_OK) unjoined_report(c, (uint64_t)all[1] >> UNJ_RANK_BITS, (int)((uint64_t)all[1] & UNJ_RANK_MASK),
                                    (uint64_t)-all[2]);
  if (st == ACX_OK) {
    c->generation = gen;
    atomic_store_explicit(&c->unreported, ACX_OK, memory_order_relaxed);
    atomic_store_explicit(&c->broken, ACX_OK, memory_order_release);
    ACX_INFO(COLL, "coll rebuilt: rank %d of %d, device generation %" PRIu64, c->rank, c->size, gen);
  } else {
    ACX_WARN(COLL, "coll rebuild (rank %d of %d) failed: %s", c->rank, c->size, acx_status_name(st));
  }
  pthread_mutex_unlock(&c->submit_lock);
  return st;
}
