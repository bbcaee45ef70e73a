/* Devices, rank side: open/close, the DeviceActor that owns the executor's lifecycle, the reply
 * poller, and the submission path. Users submit straight into the command ring (no mailbox on
 * the hot path); the poller completes their futures from the reply ring and is also the one who
 * notices a lost executor (exit, crash, heartbeat, sticky error), fails every outstanding request
 * and hands the restart to the DeviceActor. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "acx_build_config.h"
#include "runtime/base/bind.h"
#include "runtime/base/clock.h"
#include "runtime/device/buffer.h"
#include "runtime/device/device_internal.h"
#include "runtime/base/log.h"
#include "runtime/base/param.h"

extern char **environ;

/* DeviceActor messages: internal, from acx's own range (see ACX_MSG_DEVICE_BASE). */
#define DEV_MSG_START (ACX_MSG_DEVICE_BASE + 0x80) /* ask: start generation 1 */
#define DEV_MSG_LOST (ACX_MSG_DEVICE_BASE + 0x81)  /* tell, payload uint64_t generation lost */
#define DEV_MSG_FATAL (ACX_MSG_DEVICE_BASE + 0x82) /* tell, payload uint64_t generation */
#define DEV_MSG_CLOSE (ACX_MSG_DEVICE_BASE + 0x83) /* ask, payload int64_t deadline (CLOCK_MONOTONIC ns) */
#define DEV_MSG_STANDBY_LOST (ACX_MSG_DEVICE_BASE + 0x84) /* tell, payload sb_loss_t */

/* Standby losses within ACX_RESTART_WINDOW_MS after which no new standby is made (the device
 * then restarts by spawning on demand). */
#define STANDBY_MAX_LOSSES 3
_Static_assert(sizeof(((acx_device_t *)0)->sb_losses) == STANDBY_MAX_LOSSES * sizeof(int64_t),
               "acx_device_t.sb_losses holds STANDBY_MAX_LOSSES timestamps");

static _Atomic int device_counter;

/* What the poller saw when it declared the executor lost; travels to the DeviceActor by value. */
typedef struct dev_loss {
  uint64_t generation;
  int64_t detected_ns;
  acx_status_t cause;
  char reason[128];
} dev_loss_t;

/* ------------------------------------------------------------------------------------------ */
/* small helpers                                                                              */

static int load_state(acx_device_t *dev) {
  /* seq_cst: pairs with the submitters counter (Dekker, see acxi_device_submit). */
  return atomic_load_explicit(&dev->state, memory_order_seq_cst);
}

/* How long the supervision waits for the poller to park and for submitters to leave. Both only
 * finish a bounded step: the poller drains at most one ring's worth of replies and its loss path
 * waits for submitters at most SUBMITTERS_WAIT_NS; a submitter rechecks the state at least every
 * 10 ms in each of its waits (ring space, a request slot, socket space). Reaching either bound
 * means a thread is stuck (descheduled for seconds, or a bug): the caller logs it and takes the
 * safe way out (never unmapping memory the stuck thread may still touch). */
#define POLL_PAUSE_NS 10000000000LL
#define SUBMITTERS_WAIT_NS 5000000000LL

/* The poller holds poll_lock while it polls, spins and sleeps on the reply doorbell (it touches
 * the control block all that time). Whoever needs the lock (to swap the control block or wake a
 * parked poller) announces it in poll_yield and rings the doorbell: the poller then parks in its
 * condition wait, which releases the lock. Only the DeviceActor's thread (and a closer when the
 * actor is gone) calls these. ACX_OK with poll_lock held, or ACX_ERR_TIMEOUT (logged, not held)
 * when the poller did not park within POLL_PAUSE_NS. */
/* CLOCK_REALTIME now + ns (>= 0), for the calls that only take that clock. */
static struct timespec realtime_in(int64_t ns) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  int64_t t = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec + (ns > 0 ? ns : 0);
  return acxi_ts_from_ns(t);
}

/* now + ns, but never past a close's deadline (dev->close_by, set by acx_device_close). */
static int64_t supervision_deadline(acx_device_t *dev, int64_t ns) {
  int64_t dl = acxi_deadline(ns);
  /* relaxed: a bound read again at every slice of the waits that use it. */
  int64_t by = atomic_load_explicit(&dev->close_by, memory_order_relaxed);
  return by && by < dl ? by : dl;
}

static acx_status_t poll_pause(acx_device_t *dev, const char *why) {
  atomic_fetch_add_explicit(&dev->poll_yield, 1, memory_order_seq_cst);
  if (dev->cv.ctrl) acxi_ring_wake(&dev->cv.cpls);
  /* In 10 ms slices: a close that starts meanwhile shortens the wait (its deadline is read again). */
  int64_t start = acxi_now_ns();
  int rc;
  for (;;) {
    int64_t dl = supervision_deadline(dev, POLL_PAUSE_NS - (acxi_now_ns() - start));
    int64_t slice = acxi_now_ns() + 10000000;
    /* pthread_mutex_timedlock takes CLOCK_REALTIME: a slice this short is the same either way
     * (and the thread sanitizer knows timedlock, not clocklock). */
    struct timespec ts = realtime_in((slice < dl ? slice : dl) - acxi_now_ns());
    rc = pthread_mutex_timedlock(&dev->poll_lock, &ts);
    if (rc == 0) return ACX_OK;
    if (rc != ETIMEDOUT || acxi_now_ns() >= dl) break;
  }
  atomic_fetch_sub_explicit(&dev->poll_yield, 1, memory_order_seq_cst);
  ACX_WARN(DEVICE, "%s device: the reply poller did not park in time (%lld ms, or the close's deadline: %s); %s",
           dev->kind, POLL_PAUSE_NS / 1000000, rc == ETIMEDOUT ? "timed out" : strerror(rc), why);
  return ACX_ERR_TIMEOUT;
}

static void poll_resume(acx_device_t *dev) {
  atomic_fetch_sub_explicit(&dev->poll_yield, 1, memory_order_seq_cst);
  pthread_cond_broadcast(&dev->poll_cond);
  pthread_mutex_unlock(&dev->poll_lock);
}

static void set_state(acx_device_t *dev, int s) {
  int paused = poll_pause(dev, "the state changes without waking it") == ACX_OK;
  atomic_store_explicit(&dev->state, s, memory_order_seq_cst);
  if (paused) poll_resume(dev);
}

/* Moves from `from` to `to`; 1 when this caller made the move. */
static int cas_state(acx_device_t *dev, int from, int to) {
  return atomic_compare_exchange_strong_explicit(&dev->state, &from, to, memory_order_seq_cst,
                                                 memory_order_seq_cst);
}

static const char *state_name(int s) {
  static const char *names[] = {"starting", "running", "recovering", "unavailable", "fatal", "closing", "closed"};
  return s >= 0 && s <= ACXI_DEV_CLOSED ? names[s] : "?";
}

static acx_status_t state_status(int s) {
  switch (s) {
  case ACXI_DEV_RUNNING:
    return ACX_OK;
  case ACXI_DEV_STARTING:
  case ACXI_DEV_RECOVERING:
    return ACX_ERR_DEVICE_LOST;
  case ACXI_DEV_UNAVAILABLE:
    return ACX_ERR_DEVICE_UNAVAILABLE;
  case ACXI_DEV_FATAL:
    return ACX_ERR_DEVICE_FATAL;
  default:
    return ACX_ERR_INVALID_STATE;
  }
}

acx_status_t acxi_device_state_status(acx_device_t *dev) { return state_status(load_state(dev)); }

static int state_accepts(int s, unsigned flags) {
  return s == ACXI_DEV_RUNNING ||
         ((flags & ACXI_SUBMIT_INTERNAL) && (s == ACXI_DEV_STARTING || s == ACXI_DEV_CLOSING));
}

/* Why a submission is refused in state `s`, from the state the caller sampled, never a fresh
 * load: a recovery (a standby promotion takes a few ms) may have made the device RUNNING since,
 * and a fresh load then said ACX_OK for a request that never entered the table or the ring; its
 * caller waited for a reply that could not come ("request 0 got no reply", issue 3). */
static acx_status_t refusal_status(int s) {
  acx_status_t st = state_status(s);
  return st == ACX_OK ? ACX_ERR_INVALID_STATE : st;
}

int64_t acxi_device_timeout(acx_device_t *dev, int64_t timeout_ns) {
  return timeout_ns < 0 ? dev->exec_timeout_ns : timeout_ns;
}

static void cond_init_monotonic(pthread_cond_t *c) {
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(c, &a);
  pthread_condattr_destroy(&a);
}

static void cond_wait_until(pthread_cond_t *c, pthread_mutex_t *m, int64_t deadline_ns) {
  struct timespec ts = acxi_ts_from_ns(deadline_ns);
  pthread_cond_timedwait(c, m, &ts);
}

static void sleep_ns(int64_t ns) {
  struct timespec ts = acxi_ts_from_ns(ns);
  nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------------------------------------ */
/* the table of outstanding requests                                                          */

static acx_status_t pend_init(acx_device_t *dev) {
  uint32_t bits = 1;
  while ((1u << bits) < 4 * dev->slots && bits < 20) bits++;
  dev->pend_bits = bits;
  dev->pend_cap = 1u << bits;
  dev->pend = calloc(dev->pend_cap, sizeof *dev->pend);
  dev->pend_free = malloc(dev->pend_cap * sizeof *dev->pend_free);
  if (!dev->pend || !dev->pend_free) return ACX_ERR_NO_MEMORY;
  for (uint32_t i = 0; i < dev->pend_cap; i++) dev->pend_free[i] = dev->pend_cap - 1 - i;
  dev->n_pend_free = dev->pend_cap;
  return ACX_OK;
}

/* Takes a slot for `future` (the table holds its own reference). Waits for a free slot until
 * the deadline, giving up early when the device leaves `ok_state` conditions. */
static acx_status_t pend_add(acx_device_t *dev, acx_future_t *future, unsigned flags, int64_t deadline,
                             uint64_t *req_id) {
  pthread_mutex_lock(&dev->pend_lock);
  while (dev->n_pend_free == 0) {
    int s = load_state(dev);
    if (!state_accepts(s, flags)) {
      pthread_mutex_unlock(&dev->pend_lock);
      return refusal_status(s);
    }
    if (acxi_now_ns() >= deadline) {
      pthread_mutex_unlock(&dev->pend_lock);
      ACX_WARN(DEVICE, "%u requests already outstanding on the device: no slot before the deadline", dev->pend_cap);
      return ACX_ERR_QUEUE_FULL;
    }
    int64_t slice = acxi_now_ns() + 10000000;
    cond_wait_until(&dev->pend_cond, &dev->pend_lock, slice < deadline ? slice : deadline);
  }
  uint32_t idx = dev->pend_free[--dev->n_pend_free];
  uint64_t id = (++dev->req_seq << dev->pend_bits) | idx;
  dev->pend[idx].req_id = id;
  dev->pend[idx].future = future;
  dev->pend[idx].deadline = deadline;
  atomic_fetch_add_explicit(&dev->n_outstanding, 1, memory_order_relaxed); /* a statistic */
  pthread_mutex_unlock(&dev->pend_lock);
  *req_id = id;
  return ACX_OK;
}

/* Removes req_id; returns its future (the table's reference passes to the caller) or NULL. */
static acx_future_t *pend_take(acx_device_t *dev, uint64_t req_id) {
  uint32_t idx = (uint32_t)(req_id & (dev->pend_cap - 1));
  acx_future_t *f = NULL;
  pthread_mutex_lock(&dev->pend_lock);
  if (req_id && dev->pend[idx].req_id == req_id) {
    f = dev->pend[idx].future;
    dev->pend[idx].req_id = 0;
    dev->pend[idx].future = NULL;
    dev->pend_free[dev->n_pend_free++] = idx;
    atomic_fetch_sub_explicit(&dev->n_outstanding, 1, memory_order_relaxed);
    pthread_cond_signal(&dev->pend_cond);
  }
  pthread_mutex_unlock(&dev->pend_lock);
  return f;
}

static uint64_t pend_outstanding(acx_device_t *dev) {
  /* relaxed: a hint for the poller's busy-poll decision and a statistic. */
  return atomic_load_explicit(&dev->n_outstanding, memory_order_relaxed);
}

/* Fails every outstanding request with `status`; returns how many. */
static uint64_t pend_fail_all(acx_device_t *dev, acx_status_t status) {
  uint64_t n = 0;
  for (;;) {
    acx_future_t *batch[64];
    int k = 0;
    pthread_mutex_lock(&dev->pend_lock);
    for (uint32_t i = 0; i < dev->pend_cap && k < 64; i++) {
      if (!dev->pend[i].req_id) continue;
      batch[k++] = dev->pend[i].future;
      dev->pend[i].req_id = 0;
      dev->pend[i].future = NULL;
      dev->pend_free[dev->n_pend_free++] = i;
      atomic_fetch_sub_explicit(&dev->n_outstanding, 1, memory_order_relaxed);
    }
    pthread_cond_broadcast(&dev->pend_cond);
    pthread_mutex_unlock(&dev->pend_lock);
    if (k == 0) return n;
    for (int i = 0; i < k; i++) {
      acx_future_complete(batch[i], status, NULL, 0);
      acx_future_release(batch[i]);
    }
    n += (uint64_t)k;
  }
}

/* A submitter or the poller found garbage in one of the incarnation's rings (logged by the ring):
 * the poller declares the executor lost at its next look, which this wakes it for. */
static void ring_broken(acx_device_t *dev, const char *which) {
  if (atomic_exchange_explicit(&dev->ring_broken, 1, memory_order_relaxed)) return;
  ACX_WARN(DEVICE, "%s executor generation %" PRIu64 " corrupted the %s ring: declaring it lost", dev->kind,
           atomic_load_explicit(&dev->generation, memory_order_relaxed), which);
  acxi_ring_wake(&dev->cv.cpls);
}

/* ------------------------------------------------------------------------------------------ */
/* submission                                                                                 */

acx_status_t acxi_device_submit(acx_device_t *dev, acxi_cmd_t *cmd, const acxi_bufarg_t *bufs, int nbufs,
                                unsigned flags, int fd, int64_t deadline_ns, acx_future_t **future) {
  acx_status_t st = ACX_OK;
  acx_future_t *f = NULL;
  uint64_t req_id = 0;
  if (future) {
    *future = NULL;
    ACXCHECK(acx_future_create(&f));
    acx_future_hold(f); /* one reference for the table, one for the caller */
  }
  /* seq_cst: our increment must be visible before we read the state, and the recovery path sets
   * the state before it reads this counter (Dekker): either we see it recovering, or it waits
   * for us to leave. */
  atomic_fetch_add_explicit(&dev->submitters, 1, memory_order_seq_cst);
  int s = load_state(dev);
  if (!state_accepts(s, flags)) {
    st = refusal_status(s);
    goto out_leave;
  }
  /* relaxed: the generation only moves while no submitter is inside (see above). */
  uint64_t gen = atomic_load_explicit(&dev->generation, memory_order_relaxed);
  for (int i = 0; i < nbufs; i++) {
    acx_buffer_t *b = bufs[i].buf;
    if (atomic_load_explicit(&b->freed, memory_order_acquire)) {
      ACX_WARN(BUFFER, "argument '%s': buffer %" PRIu64 " was freed", bufs[i].name, b->id);
      st = ACX_ERR_INVALID_STATE;
      goto out_leave;
    }
    if (b->generation != gen) {
      ACX_WARN(BUFFER, "argument '%s': buffer %" PRIu64 " is from device generation %" PRIu64 ", the device is at %"
               PRIu64 " (its executor was restarted)", bufs[i].name, b->id, b->generation, gen);
      st = ACX_ERR_STALE_BUFFER;
      goto out_leave;
    }
  }
  cmd->generation = gen;
  if (f) {
    st = pend_add(dev, f, flags, deadline_ns, &req_id);
    if (st != ACX_OK) goto out_leave;
    cmd->req_id = req_id;
    cmd->flags &= ~ACXI_CMD_FLAG_NO_REPLY;
  } else {
    cmd->req_id = 0;
    cmd->flags |= ACXI_CMD_FLAG_NO_REPLY;
    /* relaxed, and a plain max (two racing submitters may leave the smaller of two near-equal
     * deadlines): a hint for the liveness rule, which only needs roughly the latest. */
    if (deadline_ns > atomic_load_explicit(&dev->ff_deadline, memory_order_relaxed))
      atomic_store_explicit(&dev->ff_deadline, deadline_ns, memory_order_relaxed);
  }
  /* A copy: the supervision swaps dev->cv only once we have left (or, if we were stuck past its
   * wait, keeps our block mapped), so this view stays valid for our whole push. */
  const acxi_ring_view_t view = dev->cv.cmds, *ring = &view;
  int locked = 0;
  if (fd >= 0) {
    pthread_mutex_lock(&dev->sock_lock);
    locked = 1;
    uint64_t msg[2] = {cmd->arg[0], cmd->bytes};
    st = acxi_fd_send(dev->sock, fd, msg, sizeof msg, deadline_ns);
    if (st != ACX_OK) goto out_unlock;
  }
  for (;;) {
    int got = acxi_ring_try_push(ring, cmd);
    if (got == ACXI_RING_DONE) break;
    if (got == ACXI_RING_BROKEN) {
      st = ACX_ERR_DEVICE_LOST;
      ring_broken(dev, "command");
      break;
    }
    s = load_state(dev);
    if (!state_accepts(s, flags)) {
      st = refusal_status(s);
      break;
    }
    if (acxi_now_ns() >= deadline_ns) {
      ACX_WARN(DEVICE, "command ring stayed full until the deadline (op %u)", cmd->op);
      st = ACX_ERR_QUEUE_FULL;
      break;
    }
    acxi_ring_wait_space(ring, deadline_ns);
  }
out_unlock:
  if (locked) pthread_mutex_unlock(&dev->sock_lock);
  if (st == ACX_OK) atomic_fetch_add_explicit(&dev->commands, 1, memory_order_relaxed);
out_leave:
  /* release: our ring push happens before the recovery path sees us gone. */
  atomic_fetch_sub_explicit(&dev->submitters, 1, memory_order_release);
  if (st != ACX_OK) {
    if (f) {
      /* The table's reference: still in the table (take it back), or already dropped by whoever
       * failed the request (pend_fail_all), or never handed to the table (no req_id). The push
       * used to fail only in the last two cases; a broken ring also fails it in the first. */
      acx_future_t *mine = req_id ? pend_take(dev, req_id) : NULL;
      if (mine || !req_id) acx_future_release(f);
      acx_future_release(f); /* the caller's */
    }
    return st;
  }
  if (future) *future = f;
  return ACX_OK;
}

acx_status_t acxi_device_call(acx_device_t *dev, acxi_cmd_t *cmd, const acxi_bufarg_t *bufs, int nbufs,
                              unsigned flags, int fd, int64_t timeout_ns, acxi_cpl_t *cpl) {
  int64_t deadline = acxi_deadline(acxi_device_timeout(dev, timeout_ns));
  acx_future_t *f;
  ACXCHECK(acxi_device_submit(dev, cmd, bufs, nbufs, flags, fd, deadline, &f));
  acxi_cpl_t c = {0};
  int64_t left = deadline - acxi_now_ns();
  acx_status_t st = acx_future_wait(f, left > 0 ? left : 0, &c, sizeof c, NULL);
  acx_future_release(f);
  if (st == ACX_ERR_TIMEOUT)
    ACX_WARN(DEVICE, "op %u (request %" PRIu64 ") got no reply within %" PRId64 " ms; it stays queued", cmd->op,
             cmd->req_id, acxi_device_timeout(dev, timeout_ns) / 1000000);
  if (cpl) *cpl = c;
  return st;
}

/* ------------------------------------------------------------------------------------------ */
/* watchers                                                                                   */

static void notify_watchers(acx_device_t *dev, uint32_t type, const acx_device_event_t *ev) {
  pthread_mutex_lock(&dev->watch_lock);
  for (int i = 0; i < dev->n_watchers;) {
    if (acx_tell(dev->watchers[i], NULL, type, ev, sizeof *ev) == ACX_ERR_ACTOR_STOPPED) {
      acx_ref_release(dev->watchers[i]);
      dev->watchers[i] = dev->watchers[--dev->n_watchers];
    } else {
      i++;
    }
  }
  pthread_mutex_unlock(&dev->watch_lock);
}

/* ------------------------------------------------------------------------------------------ */
/* the reply poller                                                                           */

/* Keeps the first unreported failure of a fire-and-forget command for acx_device_synchronize. */
static void note_ff_failure(acx_device_t *dev, acx_status_t st) {
  int expect = 0;
  /* relaxed: the reader learns of it through a later reply's future (release/acquire). */
  atomic_compare_exchange_strong_explicit(&dev->ff_error, &expect, (int)st, memory_order_relaxed,
                                          memory_order_relaxed);
}

/* The status an executor's reply or sticky error means to the caller. In the process transport a
 * poisoned context is a loss of that incarnation, which the device restarts: ACX_ERR_DEVICE_LOST,
 * retryable, as the cuda engine already says for the fault itself; ACX_ERR_DEVICE_FATAL (never
 * retryable) belongs to the inline transport. A poisoned host engine answers the commands it still
 * pops with DEVICE_FATAL, and a call that raced the loss report got that (issue 12 item 6). */
static acx_status_t executor_status(const acx_device_t *dev, acx_status_t st) {
  return st == ACX_ERR_DEVICE_FATAL && !dev->inline_mode ? ACX_ERR_DEVICE_LOST : st;
}

/* Completes the request of one reply. The poller calls it (process transport), or the inline
 * executor's threads directly (complete_direct): it is thread-safe. */
static void complete_reply(acx_device_t *dev, const acxi_cpl_t *in) {
  acxi_cpl_t fixed = *in;
  fixed.status = (int32_t)executor_status(dev, (acx_status_t)in->status);
  const acxi_cpl_t *c = &fixed;
  acx_future_t *f = pend_take(dev, c->req_id);
  if (!f) {
    /* A fire-and-forget command failed (req_id 0), or a reply to a request already failed by
     * recovery. */
    if (c->status != ACX_OK && c->req_id == 0) {
      ACX_WARN(DEVICE, "fire-and-forget command failed in the executor: %s (library code %d); reported by the "
               "next acx_device_synchronize", acx_status_str((acx_status_t)c->status), c->lib_code);
      atomic_fetch_add_explicit(&dev->ff_failures, 1, memory_order_relaxed); /* a statistic */
      note_ff_failure(dev, (acx_status_t)c->status);
    }
    return;
  }
  acx_future_complete(f, (acx_status_t)c->status, c, sizeof *c);
  acx_future_release(f);
}

static void complete_direct(void *sink, const acxi_cpl_t *c) { complete_reply(sink, c); }

/* Completes the replies waiting in the ring, at most one ring's worth (an executor that keeps
 * posting cannot hold the poller here). */
static int drain_replies(acx_device_t *dev) {
  acxi_cpl_t c;
  int n = 0, got = ACXI_RING_WAIT;
  while (n < (int)dev->slots && (got = acxi_ring_try_pop(&dev->cv.cpls, &c)) == ACXI_RING_DONE) {
    complete_reply(dev, &c);
    n++;
  }
  if (got == ACXI_RING_BROKEN) ring_broken(dev, "reply");
  return n;
}

static void describe_wait_status(int ws, char *buf, size_t cap) {
  if (WIFEXITED(ws))
    snprintf(buf, cap, "exited with status %d", WEXITSTATUS(ws));
  else if (WIFSIGNALED(ws))
    snprintf(buf, cap, "killed by signal %d (%s)", WTERMSIG(ws), strsignal(WTERMSIG(ws)));
  else
    snprintf(buf, cap, "wait status 0x%x", ws);
}

/* The latest deadline among the outstanding requests and fire-and-forget commands (INT64_MIN when
 * there is none). Scans the request table: the poller calls it only while the loop shows no
 * progress, and at most once per deadline (busy_until). */
static int64_t latest_deadline(acx_device_t *dev) {
  int64_t latest = atomic_load_explicit(&dev->ff_deadline, memory_order_relaxed); /* a hint, see submit */
  pthread_mutex_lock(&dev->pend_lock);
  for (uint32_t i = 0; i < dev->pend_cap; i++)
    if (dev->pend[i].req_id && dev->pend[i].deadline > latest) latest = dev->pend[i].deadline;
  pthread_mutex_unlock(&dev->pend_lock);
  return latest;
}

/* The liveness rule's second half (docs/fault-model.md): a loop that has made no progress for a
 * heartbeat limit is hung only when no work it was given may still legitimately be running, i.e.
 * every outstanding request's deadline has passed. Before that it is busy (a long collective, a
 * long library call): its caller's own deadline bounds the wait, and acxi_device_restart can end
 * it sooner. Poller only. */
static int loop_hung(acx_device_t *dev, int64_t now) {
  if (now < dev->busy_until) return 0;
  dev->busy_until = latest_deadline(dev);
  return now >= dev->busy_until;
}

/* 1 when the executor is gone, silent, hung, broke a ring, reported a sticky error, or a restart
 * was asked for (acxi_device_restart); fills *loss. Poller only. */
static int executor_lost(acx_device_t *dev, acxi_ctrl_t *ctrl, int64_t now, dev_loss_t *loss) {
  /* acquire: pairs with acxi_device_restart's release store; the reason is written. */
  if (atomic_load_explicit(&dev->restart_gen, memory_order_acquire) ==
      atomic_load_explicit(&dev->generation, memory_order_relaxed)) {
    loss->cause = ACX_ERR_DEVICE_LOST;
    pthread_mutex_lock(&dev->restart_lock);
    snprintf(loss->reason, sizeof loss->reason, "restart requested: %s", dev->restart_reason);
    pthread_mutex_unlock(&dev->restart_lock);
    return 1;
  }
  /* relaxed: a flag; whoever set it logged the details, and the rings are not used again. */
  if (atomic_load_explicit(&dev->ring_broken, memory_order_relaxed)) {
    loss->cause = ACX_ERR_DEVICE_LOST;
    snprintf(loss->reason, sizeof loss->reason, "the executor wrote an impossible sequence number into a ring");
    return 1;
  }
  /* acquire: pairs with acxi_ctrl_set_sticky's release; the message is complete. */
  if (atomic_load_explicit(&ctrl->sticky, memory_order_acquire) == 1) {
    loss->cause = executor_status(dev, ACX_ERR_DEVICE_FATAL);
    snprintf(loss->reason, sizeof loss->reason, "sticky error: %.110s", ctrl->sticky_msg);
    return 1;
  }
  if (dev->inline_mode) return 0;
  pid_t pid = atomic_load_explicit(&dev->pid, memory_order_relaxed); /* set before RUNNING */
  siginfo_t si;
  memset(&si, 0, sizeof si);
  if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid) {
    loss->cause = ACX_ERR_DEVICE_LOST;
    if (si.si_code == CLD_EXITED)
      snprintf(loss->reason, sizeof loss->reason, "executor exited with status %d", si.si_status);
    else
      snprintf(loss->reason, sizeof loss->reason, "executor killed by signal %d (%s)", si.si_status,
               strsignal(si.si_status));
    return 1;
  }
  /* relaxed: lone timestamps. */
  int64_t beat = atomic_load_explicit(&ctrl->heartbeat_ns, memory_order_relaxed);
  if (now - beat > dev->heartbeat_ns) {
    loss->cause = ACX_ERR_DEVICE_LOST;
    snprintf(loss->reason, sizeof loss->reason, "no heartbeat for %" PRId64 " ms (limit %" PRId64 " ms): the "
             "executor process is stopped or not scheduled", (now - beat) / 1000000, dev->heartbeat_ns / 1000000);
    return 1;
  }
  int64_t progress = atomic_load_explicit(&ctrl->progress_ns, memory_order_relaxed);
  if (now - progress > dev->heartbeat_ns && loop_hung(dev, now)) {
    loss->cause = ACX_ERR_DEVICE_LOST;
    snprintf(loss->reason, sizeof loss->reason, "loop hung: no progress for %" PRId64 " ms (limit %" PRId64
             " ms), every request past its deadline", (now - progress) / 1000000, dev->heartbeat_ns / 1000000);
    return 1;
  }
  return 0;
}

/* Waits (SUBMITTERS_WAIT_NS at most) until no submitter is between its state check and its ring
 * push; the state no longer accepts them. ACX_ERR_TIMEOUT (logged) when some stayed. */
static acx_status_t wait_submitters_gone(acx_device_t *dev, const char *why) {
  int64_t deadline = supervision_deadline(dev, SUBMITTERS_WAIT_NS);
  /* acquire: pairs with the release decrement; their pushes are visible. */
  for (int i = 0; atomic_load_explicit(&dev->submitters, memory_order_acquire) != 0; i++) {
    if (i < 1000) {
      acxi_cpu_relax();
      continue;
    }
    if (acxi_now_ns() >= deadline) {
      ACX_WARN(DEVICE, "%s device: %d submitting threads still inside after %lld ms (or the close's deadline); %s", dev->kind,
               atomic_load_explicit(&dev->submitters, memory_order_relaxed), SUBMITTERS_WAIT_NS / 1000000, why);
      return ACX_ERR_TIMEOUT;
    }
    sleep_ns(100000);
  }
  return ACX_OK;
}

/* The common path of every loss: stop accepting, fail every outstanding request, hand the
 * restart to the DeviceActor. Runs on the poller with poll_lock held. */
/* Records that every request outstanding with generation `gen` has been failed. */
static void mark_failed(acx_device_t *dev, uint64_t gen) {
  /* release: the failed futures are complete before acxi_device_restart's acquire load sees it. */
  uint64_t cur = atomic_load_explicit(&dev->failed_gen, memory_order_relaxed);
  while (cur < gen && !atomic_compare_exchange_weak_explicit(&dev->failed_gen, &cur, gen, memory_order_release,
                                                             memory_order_relaxed)) {
  }
}

static void begin_loss(acx_device_t *dev, dev_loss_t *loss) {
  int fatal = dev->inline_mode;
  if (!cas_state(dev, ACXI_DEV_RUNNING, fatal ? ACXI_DEV_FATAL : ACXI_DEV_RECOVERING)) return;
  uint64_t gen = atomic_load_explicit(&dev->generation, memory_order_relaxed);
  loss->generation = gen;
  /* Late ones only add requests that their own deadlines end: nothing here unmaps the block. */
  wait_submitters_gone(dev, "failing the outstanding requests anyway");
  drain_replies(dev); /* whatever the executor answered before it went */
  /* Fire-and-forget launches that no all-stream synchronize covered may have been dropped. */
  uint64_t sent = atomic_load_explicit(&dev->ff_sent, memory_order_relaxed);
  if (sent != atomic_exchange_explicit(&dev->ff_fenced, sent, memory_order_relaxed))
    note_ff_failure(dev, fatal ? ACX_ERR_DEVICE_FATAL : ACX_ERR_DEVICE_LOST);
  acx_status_t fail_with = fatal ? ACX_ERR_DEVICE_FATAL : ACX_ERR_DEVICE_LOST;
  uint64_t failed = pend_fail_all(dev, fail_with);
  mark_failed(dev, gen);
  if (fatal) {
    ACX_WARN(DEVICE, "FATAL: %s device (inline transport) generation %" PRIu64 ": %s. This process can no longer use "
             "the GPU (a sticky fault poisons every context of the process); %" PRIu64 " outstanding requests failed "
             "with ACX_ERR_DEVICE_FATAL. Use ACX_EXECUTOR=process to survive such faults.", dev->kind, gen,
             loss->reason, failed);
  } else {
    ACX_WARN(DEVICE, "%s executor generation %" PRIu64 " (pid %d) lost: %s; %" PRIu64 " outstanding requests failed "
             "with ACX_ERR_DEVICE_LOST; restarting", dev->kind, gen, (int)dev->pid, loss->reason, failed);
  }
  acx_status_t st = acx_tell(dev->actor, NULL, fatal ? DEV_MSG_FATAL : DEV_MSG_LOST, loss, sizeof *loss);
  if (st != ACX_OK && !fatal) {
    ACX_WARN(DEVICE, "the DeviceActor is gone (%s): the device is unavailable", acx_status_name(st));
    atomic_store_explicit(&dev->state, ACXI_DEV_UNAVAILABLE, memory_order_seq_cst);
  }
}

/* What the poller saw when it declared the standby lost. */
typedef struct sb_loss {
  pid_t pid;
  char reason[128];
} sb_loss_t;

/* Poller, with poll_lock held (sb_* cannot change): tells the DeviceActor once when the standby
 * died, reported an error, stopped beating, or did not get ready within ACX_EXEC_TIMEOUT_MS. */
static void standby_watch(acx_device_t *dev, int64_t now) {
  acxi_ctrl_t *c = dev->sb_ctrl;
  if (!c || atomic_load_explicit(&dev->sb_reported, memory_order_relaxed)) return;
  sb_loss_t loss = {.pid = atomic_load_explicit(&dev->sb_pid, memory_order_relaxed)};
  siginfo_t si;
  memset(&si, 0, sizeof si);
  /* acquire: pairs with the standby's release stores of state and sticky. */
  uint32_t es = atomic_load_explicit(&c->state, memory_order_acquire);
  /* relaxed: a statistic (acx_device_stats), at most one check period old. */
  atomic_store_explicit(&dev->sb_ready, es == ACXI_EXEC_STANDBY, memory_order_relaxed);
  if (waitid(P_PID, (id_t)loss.pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == loss.pid) {
    if (si.si_code == CLD_EXITED)
      snprintf(loss.reason, sizeof loss.reason, "exited with status %d", si.si_status);
    else
      snprintf(loss.reason, sizeof loss.reason, "killed by signal %d (%s)", si.si_status, strsignal(si.si_status));
  } else if (atomic_load_explicit(&c->sticky, memory_order_acquire) == 1) {
    snprintf(loss.reason, sizeof loss.reason, "reported: %.100s", c->sticky_msg);
  } else if (es == ACXI_EXEC_STANDBY) {
    int64_t beat = atomic_load_explicit(&c->heartbeat_ns, memory_order_relaxed);
    if (now - beat <= dev->heartbeat_ns) return;
    snprintf(loss.reason, sizeof loss.reason, "no heartbeat for %" PRId64 " ms", (now - beat) / 1000000);
  } else if (es == ACXI_EXEC_STARTING) {
    if (now - dev->sb_spawned_ns <= dev->exec_timeout_ns) return;
    snprintf(loss.reason, sizeof loss.reason, "not ready within %" PRId64 " ms", dev->exec_timeout_ns / 1000000);
  } else {
    snprintf(loss.reason, sizeof loss.reason, "in executor state %u", es);
  }
  atomic_store_explicit(&dev->sb_reported, 1, memory_order_relaxed);
  atomic_store_explicit(&dev->sb_ready, 0, memory_order_relaxed);
  if (acx_tell(dev->actor, NULL, DEV_MSG_STANDBY_LOST, &loss, sizeof loss) != ACX_OK)
    ACX_WARN(DEVICE, "standby executor pid %d lost (%s) and the DeviceActor is gone", (int)loss.pid, loss.reason);
}

static void *poller_main(void *arg) {
  acx_device_t *dev = arg;
  int64_t check_period = dev->heartbeat_ns / 8;
  if (check_period > 20000000) check_period = 20000000;
  if (check_period < 1000000) check_period = 1000000;
  int64_t last_active = 0, last_check = 0;
  pthread_mutex_lock(&dev->poll_lock);
  /* relaxed: a stop request; the broadcast that follows it orders the rest. */
  while (!atomic_load_explicit(&dev->poller_stop, memory_order_relaxed)) {
    int s = load_state(dev);
    /* seq_cst: pairs with poll_pause's increment before its doorbell. */
    if (atomic_load_explicit(&dev->poll_yield, memory_order_seq_cst) || !dev->cv.ctrl ||
        !(s == ACXI_DEV_RUNNING || s == ACXI_DEV_STARTING || s == ACXI_DEV_CLOSING)) {
      cond_wait_until(&dev->poll_cond, &dev->poll_lock, acxi_now_ns() + 50000000);
      continue;
    }
    acxi_ctrl_t *ctrl = dev->cv.ctrl;
    int n = drain_replies(dev);
    /* Again: completing replies runs continuations, which may have taken long (a close may have
     * given up on us meanwhile and released what the checks below tell). */
    s = load_state(dev);
    int64_t now = acxi_now_ns();
    if (n) last_active = now;
    /* relaxed: hints to check now rather than at the period (a sticky executor, a broken ring and
     * acxi_device_restart wake us). */
    int sticky = atomic_load_explicit(&ctrl->sticky, memory_order_relaxed) != 0 ||
                 atomic_load_explicit(&dev->ring_broken, memory_order_relaxed) ||
                 atomic_load_explicit(&dev->restart_gen, memory_order_relaxed) ==
                     atomic_load_explicit(&dev->generation, memory_order_relaxed);
    /* While requests wait (and we spin anyway), look for a dead executor every millisecond: they
     * fail, and the device recovers, that much sooner. */
    int64_t period = !dev->inline_mode && pend_outstanding(dev) > 0 ? 1000000 : check_period;
    if ((s == ACXI_DEV_RUNNING || s == ACXI_DEV_STARTING) && (sticky || now - last_check >= period)) {
      last_check = now;
      dev_loss_t loss = {.detected_ns = now, .cause = ACX_ERR_DEVICE_LOST};
      if (executor_lost(dev, ctrl, now, &loss)) {
        if (s == ACXI_DEV_RUNNING) {
          begin_loss(dev, &loss);
        } else {
          /* A new incarnation died while the DeviceActor registers host memory with it: fail
           * those requests so that its start fails now rather than at its deadline. */
          drain_replies(dev);
          pend_fail_all(dev, ACX_ERR_DEVICE_LOST);
          cond_wait_until(&dev->poll_cond, &dev->poll_lock, acxi_now_ns() + check_period);
        }
        continue;
      }
      if (s == ACXI_DEV_RUNNING) standby_watch(dev, now);
    }
    if (n) continue;
    /* Inline, replies do not come through the ring (complete_direct): nothing to spin for. */
    if (!dev->inline_mode && (pend_outstanding(dev) > 0 || now - last_active < dev->spin_ns)) {
      acxi_cpu_relax();
      continue;
    }
    int64_t wake = (last_check ? last_check : now) + check_period;
    acxi_ring_consumer_wait(&dev->cv.cpls, wake);
  }
  pthread_mutex_unlock(&dev->poll_lock);
  acxi_device_release(dev);
  return NULL;
}

/* Installs the next control block (or none) while the poller is parked, and unmaps the old one
 * when nobody can touch it any more: the poller is parked and `submitters_gone` (the caller's
 * wait_submitters_gone succeeded). Otherwise the old mapping is left in place (logged): a stuck
 * thread may still write into it. ACX_ERR_TIMEOUT when the poller did not park: nothing changed
 * but `next`, which is destroyed. */
static acx_status_t ctrl_swap(acx_device_t *dev, acxi_shm_t *next, int submitters_gone) {
  if (poll_pause(dev, next ? "the new executor's control block is not installed" : "the old control block stays "
                 "mapped") != ACX_OK) {
    if (next) acxi_shm_destroy(next);
    return ACX_ERR_TIMEOUT;
  }
  acxi_shm_t old = dev->shm;
  if (next) {
    dev->shm = *next;
    /* From our own slot count and mapping: cannot fail for a block acxi_ctrl_create made. */
    acxi_ctrl_view_init(&dev->cv, next->addr, dev->slots);
  } else {
    dev->shm = (acxi_shm_t){.fd = -1};
    dev->cv = (acxi_ctrl_view_t){0};
  }
  /* No submitter or poller inside: per-incarnation state starts afresh. */
  atomic_store_explicit(&dev->ring_broken, 0, memory_order_relaxed);
  atomic_store_explicit(&dev->ff_deadline, INT64_MIN, memory_order_relaxed);
  dev->busy_until = 0;
  poll_resume(dev);
  if (submitters_gone || !old.addr) {
    acxi_shm_destroy(&old);
  } else {
    ACX_WARN(DEVICE, "%s device: the old control block stays mapped (%zu bytes): a submitting thread may still "
             "write into it", dev->kind, old.bytes);
    if (old.fd >= 0) close(old.fd);
  }
  return ACX_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* executor incarnations                                                                      */

static void *inline_main(void *arg) {
  acx_device_t *dev = arg;
  dev->exec->log_set_rank(acxi_log_rank()); /* the executor library logs through its own copy */
  dev->exec->loop_run(&dev->loop);
  return NULL;
}

/* Spawns acx-executor with the control block on fd 3 and the socket on fd 4: generation `gen`,
 * or a standby (gen 0) that creates its engine and waits to be promoted. */
static acx_status_t spawn_executor(acx_device_t *dev, uint64_t gen, int shm_fd, int sock_fd, pid_t *out_pid) {
  acx_status_t res = ACX_OK;
  /* Move both fds above the fixed targets first: dup2 onto an fd that is one of the sources
   * would clobber it, and dup2(fd, fd) would keep its close-on-exec flag. */
  int hi_shm = fcntl(shm_fd, F_DUPFD_CLOEXEC, 64);
  int hi_sock = hi_shm >= 0 ? fcntl(sock_fd, F_DUPFD_CLOEXEC, 64) : -1;
  if (hi_shm < 0 || hi_sock < 0) {
    ACX_WARN(DEVICE, "fcntl(F_DUPFD_CLOEXEC) failed: %s", strerror(errno));
    if (hi_shm >= 0) close(hi_shm);
    return ACX_ERR_SYSTEM;
  }
  char a_gen[32], a_ord[32], a_streams[32], a_parent[32], a_hb[32];
  snprintf(a_gen, sizeof a_gen, "%" PRIu64, gen);
  snprintf(a_ord, sizeof a_ord, "%d", dev->cuda_ordinal);
  snprintf(a_streams, sizeof a_streams, "%d", dev->streams);
  snprintf(a_parent, sizeof a_parent, "%d", (int)getpid());
  snprintf(a_hb, sizeof a_hb, "%" PRId64, dev->heartbeat_ns / 1000000 > 0 ? dev->heartbeat_ns / 1000000 : 1);
  char *argv[] = {dev->exe_path, "--kind", dev->kind, gen ? "--generation" : "--standby", gen ? a_gen : "1",
                  "--shm-fd", "3", "--sock-fd", "4",
                  "--ordinal", a_ord, "--pci-bus-id", dev->pci_bus_id[0] ? dev->pci_bus_id : "",
                  "--streams", a_streams, "--parent-pid", a_parent, "--heartbeat-ms", a_hb,
                  "--completion", dev->completion, "--fault-inject", dev->fault_inject, NULL, NULL, NULL};
  if (dev->cpuset[0]) { /* the executor binds itself before it makes its engine */
    size_t end = sizeof argv / sizeof argv[0] - 3;
    argv[end] = "--cpuset";
    argv[end + 1] = dev->cpuset;
  }
  /* The child's environment: ours, with NCCL_NVLS_ENABLE forced to 0 (NVLink multicast must stay
   * off on the test hosts). */
  size_t n = 0;
  while (environ[n]) n++;
  char **envp = calloc(n + 2, sizeof *envp);
  if (!envp) {
    res = ACX_ERR_NO_MEMORY;
    goto err_close_fds;
  }
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], "NCCL_NVLS_ENABLE=", 17) != 0) envp[k++] = environ[i];
  envp[k++] = "NCCL_NVLS_ENABLE=0";
  envp[k] = NULL;

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, hi_shm, 3);
  posix_spawn_file_actions_adddup2(&fa, hi_sock, 4);
  posix_spawn_file_actions_addclosefrom_np(&fa, 5); /* MPI's and the user's fds stay with the rank */
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  /* A default signal mask and dispositions: the rank may block or ignore signals we rely on. */
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid;
  int rc = posix_spawn(&pid, dev->exe_path, &fa, &attr, argv, envp);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  free(envp);
  if (rc != 0) {
    ACX_WARN(DEVICE, "posix_spawn of '%s' failed: %s", dev->exe_path, strerror(rc));
    res = ACX_ERR_SYSTEM;
    goto err_close_fds;
  }
  *out_pid = pid;
  if (gen)
    ACX_INFO(DEVICE, "spawned %s executor generation %" PRIu64 ": pid %d cpuset %s (%s)", dev->kind, gen, (int)pid,
             dev->cpuset[0] ? dev->cpuset : "unbound", dev->exe_path);
  else
    ACX_INFO(DEVICE, "spawned standby %s executor: pid %d cpuset %s (%s)", dev->kind, (int)pid,
             dev->cpuset[0] ? dev->cpuset : "unbound", dev->exe_path);
err_close_fds:
  close(hi_shm);
  close(hi_sock);
  return res;
}

/* Waits up to grace_ns for an executor process to leave, then SIGKILLs it and reaps it (10 s at
 * most). Returns its wait status, -1 when it could not be reaped. */
static int reap_pid(pid_t pid, int64_t grace_ns) {
  int ws = 0;
  int64_t deadline = acxi_now_ns() + grace_ns;
  pid_t r;
  while ((r = waitpid(pid, &ws, WNOHANG)) == 0 && acxi_now_ns() < deadline) sleep_ns(1000000);
  if (r == 0) {
    kill(pid, SIGKILL);
    deadline = acxi_now_ns() + 10000000000LL;
    while ((r = waitpid(pid, &ws, WNOHANG)) == 0 && acxi_now_ns() < deadline) sleep_ns(200000);
  }
  if (r != pid) {
    ACX_WARN(DEVICE, "executor pid %d did not die after SIGKILL within 10 s; left behind", (int)pid);
    return -1;
  }
  char how[96];
  describe_wait_status(ws, how, sizeof how);
  ACX_INFO(DEVICE, "executor pid %d reaped: %s", (int)pid, how);
  return ws;
}

/* Kills (when still running) and reaps the current executor; records its wait status. */
static void reap_executor(acx_device_t *dev, int64_t grace_ns) {
  dev->loss_exit_status = -1;
  if (dev->inline_mode) {
    if (!dev->exec_thread_live) return;
    atomic_store_explicit(&dev->exec_stop, 1, memory_order_relaxed);
    if (dev->cv.ctrl) acxi_ring_wake(&dev->cv.cmds);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts); /* pthread_timedjoin_np takes CLOCK_REALTIME */
    int64_t dl = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec + (grace_ns > 0 ? grace_ns : 0) + 5000000000LL;
    ts = acxi_ts_from_ns(dl);
    if (pthread_timedjoin_np(dev->exec_thread, NULL, &ts) != 0) {
      ACX_WARN(DEVICE, "inline executor thread did not leave its loop within its deadline; detached");
      pthread_detach(dev->exec_thread);
    }
    dev->exec_thread_live = 0;
    return;
  }
  if (dev->pid <= 0) return;
  dev->loss_exit_status = reap_pid(dev->pid, grace_ns);
  dev->pid = 0;
  if (dev->sock >= 0) close(dev->sock);
  dev->sock = -1;
}

static acx_status_t finish_start(acx_device_t *dev, uint64_t gen, int64_t deadline);

/* Brings up generation `gen`: control block, executor, READY, host regions, RUNNING. */
static acx_status_t start_incarnation(acx_device_t *dev, uint64_t gen) {
  acx_status_t res;
  acxi_shm_t shm;
  ACXCHECK(acxi_ctrl_create(dev->slots, gen, &shm));
  ACXCHECK(ctrl_swap(dev, &shm, 1)); /* RECOVERING or STARTING: no submitter (waited for by our caller) */
  /* relaxed: no submitter is inside (state is STARTING or RECOVERING). */
  atomic_store_explicit(&dev->generation, gen, memory_order_relaxed);
  if (dev->inline_mode) {
    atomic_store_explicit(&dev->exec_stop, 0, memory_order_relaxed);
    dev->loop = (acxi_exec_loop_params_t){
        .view = dev->cv,
        .ops = dev->exec->engine_find(dev->kind),
        .engine = {.cuda_ordinal = dev->cuda_ordinal, .streams = dev->streams, .generation = gen,
                   .inline_mode = 1, .completion = dev->completion, .fault_inject = dev->fault_inject},
        .sock_fd = -1,
        .heartbeat_period_ns = dev->heartbeat_ns / 4,
        .spin_ns = dev->spin_ns,
        .stop = &dev->exec_stop,
        .direct = complete_direct, /* no reply ring, no poller hop: the future completes here */
        .direct_sink = dev,
    };
    memcpy(dev->loop.engine.pci_bus_id, dev->pci_bus_id, sizeof dev->pci_bus_id);
    /* Bound from its first instruction: the engine's context and streams are made there. */
    int rc = acxi_thread_create(&dev->exec_thread, dev->cpuset_mask, inline_main, dev);
    if (rc) {
      ACX_WARN(DEVICE, "pthread_create of the inline executor failed: %s", strerror(rc));
      return ACX_ERR_SYSTEM;
    }
    dev->exec_thread_live = 1;
    char where[ACX_TOPO_CPUSET_STRLEN];
    ACX_INFO(DEVICE, "inline %s executor generation %" PRIu64 " thread on cpuset %s%s", dev->kind, gen,
             acxi_thread_cpuset_str(dev->exec_thread, where, sizeof where), dev->cpuset[0] ? "" : " (unbound)");
  } else {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
      ACX_WARN(DEVICE, "socketpair failed: %s", strerror(errno));
      return ACX_ERR_SYSTEM;
    }
    pid_t pid = 0;
    res = spawn_executor(dev, gen, dev->shm.fd, sv[1], &pid);
    close(sv[1]);
    if (res != ACX_OK) {
      close(sv[0]);
      return res;
    }
    atomic_store_explicit(&dev->pid, pid, memory_order_relaxed); /* the poller reads it once RUNNING */
    dev->sock = sv[0];
  }
  return finish_start(dev, gen, acxi_deadline(dev->exec_timeout_ns));
}

/* Waits until the executor of generation `gen` (dev->cv, dev->pid) is READY, FAILED or dead,
 * or the deadline passes; then registers the host regions with it and goes RUNNING. */
static acx_status_t finish_start(acx_device_t *dev, uint64_t gen, int64_t deadline) {
  acx_status_t res;
  acxi_ctrl_t *ctrl = dev->cv.ctrl;
  for (;;) {
    /* acquire: pairs with the executor's release store of READY. */
    uint32_t es = atomic_load_explicit(&ctrl->state, memory_order_acquire);
    if (es == ACXI_EXEC_READY) break;
    if (es == ACXI_EXEC_FAILED || es == ACXI_EXEC_STOPPED) {
      res = atomic_load_explicit(&ctrl->sticky, memory_order_acquire) == 1 ? (acx_status_t)ctrl->sticky_status
                                                                          : ACX_ERR_DEVICE_LOST;
      if (res == ACX_OK) res = ACX_ERR_DEVICE_LOST;
      res = executor_status(dev, res);
      /* Bounded: the executor writes the message and need not terminate it. */
      ACX_WARN(DEVICE, "%s executor generation %" PRIu64 " failed to start: %.*s", dev->kind, gen,
               (int)sizeof ctrl->sticky_msg, ctrl->sticky_msg[0] ? ctrl->sticky_msg : "no reason given");
      return res;
    }
    if (!dev->inline_mode) {
      pid_t pid = dev->pid;
      siginfo_t si = {0};
      if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid) {
        ACX_WARN(DEVICE, "%s executor generation %" PRIu64 " (%s) died before it was ready (code %d, status %d)",
                 dev->kind, gen, dev->exe_path, si.si_code, si.si_status);
        return ACX_ERR_DEVICE_LOST;
      }
    }
    if (acxi_now_ns() >= deadline) {
      ACX_WARN(DEVICE, "%s executor generation %" PRIu64 " not ready before its deadline", dev->kind, gen);
      return ACX_ERR_TIMEOUT;
    }
    if (atomic_load_explicit(&dev->close_requested, memory_order_relaxed)) return ACX_ERR_CANCELLED; /* as in recover */
    sleep_ns(50000);
  }
  set_state(dev, ACXI_DEV_STARTING); /* the poller polls; internal submissions only */
  res = acxi_host_mem_register_all(dev);
  if (res != ACX_OK) {
    ACX_WARN(DEVICE, "re-registering host memory with executor generation %" PRIu64 " failed: %s", gen,
             acx_status_name(res));
    return res;
  }
  set_state(dev, ACXI_DEV_RUNNING);
  return ACX_OK;
}

/* Tears down a failed or lost incarnation: nothing is accepted, the poller is parked. */
static void end_incarnation(acx_device_t *dev, int64_t grace_ns) {
  int s = load_state(dev);
  if (s == ACXI_DEV_STARTING || s == ACXI_DEV_RUNNING) atomic_store(&dev->state, ACXI_DEV_RECOVERING);
  int gone = wait_submitters_gone(dev, "the old control block stays mapped") == ACX_OK;
  reap_executor(dev, grace_ns);
  pend_fail_all(dev, ACX_ERR_DEVICE_LOST);
  mark_failed(dev, atomic_load_explicit(&dev->generation, memory_order_relaxed));
  ctrl_swap(dev, NULL, gone);
}

/* ------------------------------------------------------------------------------------------ */
/* the hot standby executor (process transport)                                               */

/* Spawns a standby when the device runs without one. It loads, creates its engine (a second CUDA
 * context on the GPU) and waits idle; the poller watches it. DeviceActor only. */
static void standby_spawn(acx_device_t *dev) {
  if (!dev->standby_enabled || dev->sb_gave_up || dev->sb_ctrl || load_state(dev) != ACXI_DEV_RUNNING) return;
  acxi_shm_t shm;
  if (acxi_ctrl_create(dev->slots, 0, &shm) != ACX_OK) return; /* logged; the next restart spawns on demand */
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    ACX_WARN(DEVICE, "socketpair for a standby executor failed: %s", strerror(errno));
    goto err_destroy_shm;
  }
  pid_t pid = 0;
  acx_status_t st = spawn_executor(dev, 0, shm.fd, sv[1], &pid);
  close(sv[1]);
  if (st != ACX_OK) goto err_close_sock;
  if (poll_pause(dev, "the new standby is dropped") != ACX_OK) goto err_kill_standby;
  dev->sb_shm = shm;
  dev->sb_ctrl = acxi_ctrl(&dev->sb_shm);
  atomic_store_explicit(&dev->sb_pid, pid, memory_order_relaxed);
  dev->sb_sock = sv[0];
  dev->sb_spawned_ns = acxi_now_ns();
  atomic_store_explicit(&dev->sb_reported, 0, memory_order_relaxed);
  poll_resume(dev);
  atomic_fetch_add_explicit(&dev->standby_spawns, 1, memory_order_relaxed);
  return;
err_kill_standby:
  kill(pid, SIGKILL);
  reap_pid(pid, 0);
err_close_sock:
  close(sv[0]);
err_destroy_shm:
  acxi_shm_destroy(&shm);
}

/* Asks the standby to leave (it may be initialising or waiting), without waiting for it. */
static void standby_ask_leave(acx_device_t *dev) {
  if (!dev->sb_ctrl) return;
  /* release: as the promotion store; the standby reads it with acquire. */
  atomic_store_explicit(&dev->sb_ctrl->promote, ACXI_STANDBY_LEAVE, memory_order_release);
  acxi_futex_wake(&dev->sb_ctrl->promote, 1);
}

/* Detaches the standby from the device (poller included) and returns what is left to clean up.
 * ACX_ERR_TIMEOUT when the poller did not park: the standby stays attached (the poller may read
 * its block), only *pid is set. */
static acx_status_t standby_detach(acx_device_t *dev, acxi_shm_t *shm, pid_t *pid, int *sock) {
  *pid = atomic_load_explicit(&dev->sb_pid, memory_order_relaxed);
  ACXCHECK(poll_pause(dev, "the standby stays attached"));
  *shm = dev->sb_shm;
  *pid = atomic_load_explicit(&dev->sb_pid, memory_order_relaxed);
  *sock = dev->sb_sock;
  dev->sb_shm = (acxi_shm_t){.fd = -1};
  dev->sb_ctrl = NULL;
  atomic_store_explicit(&dev->sb_pid, 0, memory_order_relaxed);
  atomic_store_explicit(&dev->sb_ready, 0, memory_order_relaxed);
  dev->sb_sock = -1;
  poll_resume(dev);
  return ACX_OK;
}

/* Stops the standby: asks it to leave, gives it grace_ns, then SIGKILL; reaps it. */
static void standby_discard(acx_device_t *dev, int64_t grace_ns, const char *why) {
  if (!dev->sb_ctrl) return;
  standby_ask_leave(dev);
  acxi_shm_t shm;
  pid_t pid;
  int sock;
  int detached = standby_detach(dev, &shm, &pid, &sock) == ACX_OK;
  ACX_INFO(DEVICE, "stopping the standby %s executor pid %d: %s", dev->kind, (int)pid, why);
  if (pid > 0) reap_pid(pid, detached ? grace_ns : 0);
  if (!detached) return; /* its block stays mapped: the poller may still look at it */
  if (sock >= 0) close(sock);
  acxi_shm_destroy(&shm);
}

/* Counts a standby loss; 0 when STANDBY_MAX_LOSSES happened within the restart window. */
static int standby_loss_allowed(acx_device_t *dev, int64_t now) {
  memmove(&dev->sb_losses[0], &dev->sb_losses[1], sizeof dev->sb_losses - sizeof dev->sb_losses[0]);
  dev->sb_losses[STANDBY_MAX_LOSSES - 1] = now;
  return !(dev->sb_losses[0] && now - dev->sb_losses[0] < dev->restart_window_ns);
}

/* A standby that died, failed or went silent: replace it, unless that keeps happening. */
static void standby_lost(acx_device_t *dev, const char *reason) {
  ACX_WARN(DEVICE, "standby %s executor pid %d lost: %s", dev->kind,
           (int)atomic_load_explicit(&dev->sb_pid, memory_order_relaxed), reason);
  standby_discard(dev, 0, reason);
  if (!standby_loss_allowed(dev, acxi_now_ns())) {
    dev->sb_gave_up = 1;
    ACX_WARN(DEVICE, "%s device: %d standby executors lost within %" PRId64 " ms: no more standbys; a restart "
             "spawns its executor on demand", dev->kind, STANDBY_MAX_LOSSES, dev->restart_window_ns / 1000000);
    return;
  }
  standby_spawn(dev);
}

/* 1 when the standby can be promoted: alive, engine made, no error, heartbeat fresh. One still
 * initialising is waited for until its start deadline (it is ahead of a fresh spawn anyway). */
static int standby_usable(acx_device_t *dev, char *why, size_t cap) {
  acxi_ctrl_t *c = dev->sb_ctrl;
  pid_t pid = atomic_load_explicit(&dev->sb_pid, memory_order_relaxed);
  int64_t deadline = dev->sb_spawned_ns + dev->exec_timeout_ns;
  for (;;) {
    siginfo_t si;
    memset(&si, 0, sizeof si);
    /* acquire: pairs with the standby's release stores of state and sticky. */
    uint32_t es = atomic_load_explicit(&c->state, memory_order_acquire);
    int64_t now = acxi_now_ns();
    if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid) {
      snprintf(why, cap, "it is gone (code %d, status %d)", si.si_code, si.si_status);
      return 0;
    }
    if (atomic_load_explicit(&c->sticky, memory_order_acquire) == 1) {
      snprintf(why, cap, "it reported: %.100s", c->sticky_msg);
      return 0;
    }
    if (es == ACXI_EXEC_STANDBY) {
      int64_t age = now - atomic_load_explicit(&c->heartbeat_ns, memory_order_relaxed);
      if (age <= dev->heartbeat_ns) return 1;
      snprintf(why, cap, "no heartbeat for %" PRId64 " ms", age / 1000000);
      return 0;
    }
    if (es != ACXI_EXEC_STARTING) {
      snprintf(why, cap, "executor state %u", es);
      return 0;
    }
    if (now >= deadline) {
      snprintf(why, cap, "not ready within %" PRId64 " ms", dev->exec_timeout_ns / 1000000);
      return 0;
    }
    if (atomic_load_explicit(&dev->close_requested, memory_order_relaxed)) { /* as in recover */
      snprintf(why, cap, "the device closes");
      return 0;
    }
    sleep_ns(50000);
  }
}

/* Makes the standby generation `gen`: it becomes the device's executor (control block, pid,
 * socket), is told its generation, and gets the host regions; RUNNING on success. Returns
 * ACX_ERR_NO_DEVICE when there was no usable standby (nothing changed but its removal). */
static acx_status_t standby_promote(acx_device_t *dev, uint64_t gen) {
  if (!dev->sb_ctrl) return ACX_ERR_NO_DEVICE;
  char why[160];
  if (!standby_usable(dev, why, sizeof why)) {
    ACX_WARN(DEVICE, "the standby %s executor cannot take generation %" PRIu64 " (%s): spawning one", dev->kind, gen,
             why);
    standby_discard(dev, 0, why);
    return ACX_ERR_NO_DEVICE;
  }
  acxi_shm_t shm;
  pid_t pid;
  int sock;
  if (standby_detach(dev, &shm, &pid, &sock) != ACX_OK) return ACX_ERR_NO_DEVICE; /* logged; spawn instead */
  acxi_ctrl_t *c = acxi_ctrl(&shm);
  c->generation = gen; /* published by the release store of PROMOTE */
  if (ctrl_swap(dev, &shm, 1) != ACX_OK) { /* shm destroyed: the standby has no future */
    kill(pid, SIGKILL);
    reap_pid(pid, 0);
    if (sock >= 0) close(sock);
    return ACX_ERR_TIMEOUT;
  }
  atomic_store_explicit(&dev->pid, pid, memory_order_relaxed);
  dev->sock = sock;
  /* relaxed: no submitter is inside (the state is RECOVERING). */
  atomic_store_explicit(&dev->generation, gen, memory_order_relaxed);
  /* release: the standby reads ctrl->generation after its acquire load of PROMOTE. */
  atomic_store_explicit(&c->promote, ACXI_STANDBY_PROMOTE, memory_order_release);
  acxi_futex_wake(&c->promote, 1);
  ACX_INFO(DEVICE, "standby %s executor pid %d promoted to generation %" PRIu64, dev->kind, (int)pid, gen);
  /* It only has to wake up: a heartbeat's time is plenty, else it is as good as hung. */
  return finish_start(dev, gen, acxi_now_ns() + dev->heartbeat_ns);
}

/* As end_incarnation, but the executor is only sent SIGKILL: the caller reaps the returned pid
 * (0: none) once a successor serves. */
static pid_t end_incarnation_kill(acx_device_t *dev) {
  int s = load_state(dev);
  if (s == ACXI_DEV_STARTING || s == ACXI_DEV_RUNNING) atomic_store(&dev->state, ACXI_DEV_RECOVERING);
  int gone = wait_submitters_gone(dev, "the old control block stays mapped") == ACX_OK;
  pid_t pid = atomic_load_explicit(&dev->pid, memory_order_relaxed);
  if (pid > 0) kill(pid, SIGKILL);
  atomic_store_explicit(&dev->pid, 0, memory_order_relaxed);
  if (dev->sock >= 0) close(dev->sock);
  dev->sock = -1;
  pend_fail_all(dev, ACX_ERR_DEVICE_LOST);
  mark_failed(dev, atomic_load_explicit(&dev->generation, memory_order_relaxed));
  ctrl_swap(dev, NULL, gone);
  return pid;
}

/* Counts a restart; 0 when the limit within the window is reached. */
static int restart_allowed(acx_device_t *dev, int64_t now) {
  int in_window = 0;
  for (int i = 0; i < dev->n_restart_times; i++)
    if (now - dev->restart_times[i] < dev->restart_window_ns) in_window++;
  if (in_window >= dev->max_restarts) return 0;
  /* Overwrite the oldest timestamp. */
  int slot = 0;
  if (dev->n_restart_times < dev->max_restarts + 1) {
    slot = dev->n_restart_times++;
  } else {
    for (int i = 1; i < dev->n_restart_times; i++)
      if (dev->restart_times[i] < dev->restart_times[slot]) slot = i;
  }
  dev->restart_times[slot] = now;
  return 1;
}

/* ------------------------------------------------------------------------------------------ */
/* the DeviceActor                                                                            */

typedef struct dev_actor {
  acx_device_t *dev;
} dev_actor_t;

static void close_device(acx_device_t *dev, int64_t deadline);

static acx_status_t actor_init(acx_ctx_t *ctx, void *state, const void *arg) {
  dev_actor_t *a = state;
  a->dev = (acx_device_t *)arg;
  acxi_device_hold(a->dev);
  return ACX_OK;
}

/* Restarted by its supervisor (after it escalated): the device stays as it is (an unavailable
 * device stays unavailable until it is closed and opened again); init takes the reference again. */
static void actor_pre_restart(acx_ctx_t *ctx, void *state, acx_status_t cause) {
  dev_actor_t *a = state;
  if (a->dev) acxi_device_release(a->dev);
  a->dev = NULL;
}

/* Records the lost executor's wait status in ev (and the log). */
static void note_exit_status(acx_device_t *dev, const dev_loss_t *loss, acx_device_event_t *ev) {
  ev->exit_status = dev->loss_exit_status;
  if (dev->loss_exit_status != -1 && loss->cause == ACX_ERR_DEVICE_LOST) {
    char how[96];
    describe_wait_status(dev->loss_exit_status, how, sizeof how);
    ACX_INFO(DEVICE, "lost executor generation %" PRIu64 ": %s", loss->generation, how);
  }
}

/* After a loss: the standby, when there is a usable one, becomes generation + 1 (the lost
 * executor is only SIGKILLed first and reaped once its successor serves: a CUDA context's
 * teardown takes time); else a fresh executor is spawned. Then a new standby is spawned. */
static void recover(acx_ctx_t *ctx, acx_device_t *dev, const dev_loss_t *loss) {
  uint64_t lost_gen = loss->generation;
  if (atomic_load_explicit(&dev->generation, memory_order_relaxed) != lost_gen ||
      load_state(dev) != ACXI_DEV_RECOVERING)
    return; /* a stale report */
  acx_device_event_t ev = {.old_generation = lost_gen, .cause = loss->cause};
  /* One restart, one generation: an attempt that fails before the device runs again (a promoted
   * standby that does not report READY within a heartbeat, a spawn that dies starting, a failed
   * re-registration) served nothing, admitted no user command and made no buffer, so the next
   * attempt reuses its number. It used to take the next one, and a single restart moved the
   * generation by 2 (issue 12 item 6). Each attempt still counts against ACX_MAX_RESTARTS. */
  const uint64_t gen = lost_gen + 1;
  memcpy(ev.reason, loss->reason, sizeof ev.reason);
  pid_t unreaped = 0;
  if (dev->sb_ctrl) {
    unreaped = end_incarnation_kill(dev);
  } else {
    end_incarnation(dev, 0);
    note_exit_status(dev, loss, &ev);
  }
  for (;;) {
    /* relaxed: a request; the close that follows is serialised behind us by the mailbox. */
    if (atomic_load_explicit(&dev->close_requested, memory_order_relaxed)) {
      ACX_INFO(DEVICE, "%s device: restart after generation %" PRIu64 " abandoned: the device closes", dev->kind,
               lost_gen);
      if (unreaped) reap_pid(unreaped, 0);
      return;
    }
    if (!restart_allowed(dev, acxi_now_ns())) {
      if (unreaped) {
        dev->loss_exit_status = reap_pid(unreaped, 0);
        note_exit_status(dev, loss, &ev);
      }
      standby_discard(dev, 0, "the restart limit is reached");
      set_state(dev, ACXI_DEV_UNAVAILABLE);
      pend_fail_all(dev, ACX_ERR_DEVICE_UNAVAILABLE);
      ACX_WARN(DEVICE, "%s device: %d restarts within %" PRId64 " ms reached: the device is unavailable; telling its "
               "supervisor", dev->kind, dev->max_restarts, dev->restart_window_ns / 1000000);
      ev.new_generation = ev.old_generation;
      notify_watchers(dev, ACX_MSG_DEVICE_UNAVAILABLE, &ev);
      acx_actor_fail(ctx, ACX_ERR_DEVICE_UNAVAILABLE);
      return;
    }
    acx_status_t st = standby_promote(dev, gen);
    int promoted = st != ACX_ERR_NO_DEVICE;
    if (!promoted) st = start_incarnation(dev, gen);
    int64_t took = acxi_now_ns() - loss->detected_ns;
    if (st == ACX_OK) {
      /* Counted before the lost executor is reaped (a CUDA context's teardown takes ~100 ms), so
       * stats read right after the first successful command already show this recovery. */
      atomic_fetch_add_explicit(&dev->restarts, 1, memory_order_relaxed);
      if (promoted) atomic_fetch_add_explicit(&dev->standby_promotions, 1, memory_order_relaxed);
      atomic_store_explicit(&dev->last_recovery_ns, took, memory_order_relaxed);
    }
    if (unreaped) {
      dev->loss_exit_status = reap_pid(unreaped, 0);
      note_exit_status(dev, loss, &ev);
      unreaped = 0;
    }
    if (st == ACX_OK) {
      ACX_WARN(DEVICE, "%s device recovered: executor generation %" PRIu64 " (%s) serves it, %.1f ms after the loss "
               "of generation %" PRIu64, dev->kind, gen, promoted ? "the promoted standby" : "freshly spawned",
               took / 1e6, lost_gen);
      ev.new_generation = gen;
      notify_watchers(dev, ACX_MSG_DEVICE_RESTARTED, &ev);
      standby_spawn(dev);
      return;
    }
    end_incarnation(dev, 0);
  }
}

static acx_status_t actor_receive(acx_ctx_t *ctx, void *state, const acx_msg_t *msg) {
  acx_device_t *dev = ((dev_actor_t *)state)->dev;
  switch (msg->type) {
  case DEV_MSG_START: {
    acx_status_t st = start_incarnation(dev, 1);
    if (st != ACX_OK) end_incarnation(dev, 0); /* the opener closes the device */
    acx_reply(ctx, msg, st, NULL, 0);
    if (st == ACX_OK) standby_spawn(dev);
    return ACX_OK;
  }
  case DEV_MSG_STANDBY_LOST:
    if (msg->len == sizeof(sb_loss_t)) {
      const sb_loss_t *l = msg->data;
      /* A stale report when that standby was promoted or replaced meanwhile. */
      if (dev->sb_ctrl && l->pid == atomic_load_explicit(&dev->sb_pid, memory_order_relaxed) &&
          load_state(dev) == ACXI_DEV_RUNNING)
        standby_lost(dev, l->reason);
    }
    return ACX_OK;
  case DEV_MSG_LOST:
    if (msg->len == sizeof(dev_loss_t)) recover(ctx, dev, (const dev_loss_t *)msg->data);
    return ACX_OK;
  case DEV_MSG_FATAL:
    if (msg->len == sizeof(dev_loss_t)) {
      const dev_loss_t *loss = msg->data;
      acx_device_event_t ev = {.old_generation = loss->generation, .cause = ACX_ERR_DEVICE_FATAL,
                               .exit_status = -1};
      ev.new_generation = ev.old_generation;
      memcpy(ev.reason, loss->reason, sizeof ev.reason);
      notify_watchers(dev, ACX_MSG_DEVICE_FATAL, &ev);
    }
    return ACX_OK;
  case DEV_MSG_CLOSE: {
    int64_t dl = msg->len == sizeof(int64_t) ? *(const int64_t *)msg->data : acxi_deadline(dev->exec_timeout_ns);
    close_device(dev, dl);
    acx_reply(ctx, msg, ACX_OK, NULL, 0);
    acx_stop_self(ctx);
    return ACX_OK;
  }
  default:
    ACX_WARN(DEVICE, "DeviceActor: message type 0x%x ignored", msg->type);
    return ACX_OK;
  }
}

static void actor_post_stop(acx_ctx_t *ctx, void *state) {
  dev_actor_t *a = state;
  if (!a->dev) return;
  /* The system is going down before acx_device_close, or acx_device_close passed its deadline and
   * stopped us (its CLOSE never ran): that close's deadline still holds. */
  int64_t by = atomic_load_explicit(&a->dev->close_by, memory_order_relaxed);
  close_device(a->dev, by ? by : acxi_deadline(a->dev->exec_timeout_ns));
  acxi_device_release(a->dev);
  a->dev = NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* open / close                                                                               */

void acxi_device_hold(acx_device_t *dev) { atomic_fetch_add_explicit(&dev->refs, 1, memory_order_relaxed); }

static void device_free(acx_device_t *dev) {
  pthread_mutex_lock(&dev->watch_lock);
  for (int i = 0; i < dev->n_watchers; i++) acx_ref_release(dev->watchers[i]);
  pthread_mutex_unlock(&dev->watch_lock);
  free(dev->watchers);
  free(dev->pend);
  free(dev->pend_free);
  free(dev->restart_times);
  free(dev->free_events);
  if (dev->cpuset_mask) {
    acxi_cpuset_fini(dev->cpuset_mask);
    free(dev->cpuset_mask);
  }
  pthread_mutex_destroy(&dev->pend_lock);
  pthread_cond_destroy(&dev->pend_cond);
  pthread_mutex_destroy(&dev->poll_lock);
  pthread_cond_destroy(&dev->poll_cond);
  pthread_mutex_destroy(&dev->sock_lock);
  pthread_mutex_destroy(&dev->host_lock);
  pthread_mutex_destroy(&dev->staging_lock);
  pthread_mutex_destroy(&dev->watch_lock);
  pthread_mutex_destroy(&dev->event_lock);
  pthread_mutex_destroy(&dev->restart_lock);
  free(dev);
}

void acxi_device_release(acx_device_t *dev) {
  /* acq_rel: the last releaser sees every other holder's writes before it frees. */
  if (dev && atomic_fetch_sub_explicit(&dev->refs, 1, memory_order_acq_rel) == 1) device_free(dev);
}

/* Stops the reply poller and joins it until `deadline` (at least 100 ms from now). A poller that
 * does not leave in time is detached (logged): it holds its own device reference, so it never
 * touches freed memory, and it leaves at its next look at poller_stop. */
static void stop_poller(acx_device_t *dev, int64_t deadline) {
  if (!dev->poller_live) return;
  atomic_store_explicit(&dev->poller_stop, 1, memory_order_relaxed);
  /* Without poll_lock (the poller may be stuck holding it): a wake-up it misses between its check
   * and its wait only costs that wait's 50 ms bound. */
  pthread_cond_broadcast(&dev->poll_cond);
  int64_t min = acxi_deadline(100000000);
  struct timespec ts = realtime_in((deadline > min ? deadline : min) - acxi_now_ns()); /* timedjoin: REALTIME */
  int rc = pthread_timedjoin_np(dev->poller, NULL, &ts);
  if (rc) {
    ACX_WARN(DEVICE, "%s device: the reply poller did not leave by the close's deadline (%s); detached", dev->kind,
             strerror(rc));
    pthread_detach(dev->poller);
  }
  dev->poller_live = 0;
}

/* Part of a close's time kept for killing and reaping what did not leave on its own (a SIGKILLed
 * host process is reaped in a few ms): min(timeout / 4, 250 ms). */
static int64_t close_reserve(int64_t timeout_ns) {
  int64_t r = timeout_ns / 4;
  return r < 250000000 ? r : 250000000;
}

/* Shuts the executor down and stops the poller, by `deadline` (the executor gets until
 * deadline - close_reserve to leave on its own). Idempotent; serialised by the DeviceActor (or
 * run by the closer when the actor is gone). */
static void close_device(acx_device_t *dev, int64_t deadline) {
  int s;
  /* The poller may move RUNNING to RECOVERING/FATAL concurrently: retry until our move sticks,
   * remembering the state we moved away from. */
  do {
    s = load_state(dev);
    if (s == ACXI_DEV_CLOSED || s == ACXI_DEV_CLOSING) return;
  } while (!cas_state(dev, s, ACXI_DEV_CLOSING));
  /* Bounds the supervision's own waits from here on (acx_device_close set it already). */
  int64_t by = atomic_load_explicit(&dev->close_by, memory_order_relaxed);
  if (!by || deadline < by) atomic_store_explicit(&dev->close_by, deadline > 0 ? deadline : 1, memory_order_relaxed);
  int gone = wait_submitters_gone(dev, "the control block stays mapped") == ACX_OK;
  standby_ask_leave(dev); /* it winds down while the active executor finishes */
  int64_t left = deadline - acxi_now_ns();
  int64_t leave_by = deadline - close_reserve(left > 0 ? left : 0);
  if (s == ACXI_DEV_RUNNING && dev->cv.ctrl && leave_by > acxi_now_ns()) {
    acxi_cmd_t cmd = {.op = ACXI_OP_SHUTDOWN, .stream = ACXI_STREAM_ALL};
    acx_status_t st =
        acxi_device_call(dev, &cmd, NULL, 0, ACXI_SUBMIT_INTERNAL, -1, leave_by - acxi_now_ns(), NULL);
    if (st != ACX_OK) ACX_WARN(DEVICE, "SHUTDOWN of the %s executor: %s; killing it", dev->kind, acx_status_name(st));
    if (st != ACX_OK) leave_by = 0;
  }
  atomic_store(&dev->state, ACXI_DEV_CLOSED);
  int64_t grace = leave_by - acxi_now_ns();
  reap_executor(dev, grace > 0 ? grace : 0);
  grace = leave_by - acxi_now_ns(); /* the standby was asked to leave at the start */
  standby_discard(dev, grace > 0 ? grace : 0, "the device closes");
  pend_fail_all(dev, ACX_ERR_CANCELLED);
  ctrl_swap(dev, NULL, gone);
  stop_poller(dev, deadline);
  acxi_device_staging_destroy(dev);
}

static acx_status_t find_executor(acx_device_t *dev) {
  const char *env = acxi_param_str("ACX_EXECUTOR_PATH");
  if (env && *env) {
    snprintf(dev->exe_path, sizeof dev->exe_path, "%s", env);
    if (access(dev->exe_path, X_OK) == 0) return ACX_OK;
    ACX_WARN(DEVICE, "ACX_EXECUTOR_PATH='%s' is not an executable file", env);
    return ACX_ERR_BAD_PARAM;
  }
  Dl_info info;
  if (dladdr((void *)acx_device_open, &info) && info.dli_fname) {
    char lib[4096];
    snprintf(lib, sizeof lib, "%s", info.dli_fname);
    const char *dir = dirname(lib);
    /* Beside libacx, the install layout (lib/ -> bin/) and the build tree (tools/). */
    const char *rel[] = {"acx-executor", "../bin/acx-executor", "tools/acx-executor", "../tools/acx-executor"};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
      snprintf(dev->exe_path, sizeof dev->exe_path, "%s/%s", dir, rel[i]);
      if (access(dev->exe_path, X_OK) == 0) return ACX_OK;
    }
  }
  snprintf(dev->exe_path, sizeof dev->exe_path, "%s/acx-executor", ACX_INSTALL_BINDIR);
  if (access(dev->exe_path, X_OK) == 0) return ACX_OK;
  ACX_WARN(DEVICE, "acx-executor not found (ACX_EXECUTOR_PATH unset; not beside libacx; not in %s)",
           ACX_INSTALL_BINDIR);
  return ACX_ERR_NO_DEVICE;
}

static int gpu_visible(void) {
  const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
  if (cvd && (!*cvd || !strcmp(cvd, "-1") || !strcasecmp(cvd, "none"))) return 0;
  return access("/dev/nvidiactl", F_OK) == 0 && access("/dev/nvidia0", F_OK) == 0;
}

/* cfg->cpuset, else ACX_CPUSET; both empty: unbound. Whether the kernel accepts the set is known
 * when the poller is created bound to it (acx_device_open). */
static acx_status_t resolve_cpuset(acx_device_t *dev, const char *list) {
  const char *what = "argument 'cfg->cpuset'";
  acx_status_t bad = ACX_ERR_INVALID_ARG;
  if (!list) {
    list = acxi_param_str("ACX_CPUSET");
    if (!list || !*list) return ACX_OK;
    what = "ACX_CPUSET";
    bad = ACX_ERR_BAD_PARAM;
  }
  acxi_cpuset_t cs = ACXI_CPUSET_NONE;
  acx_status_t st = acxi_cpuset_parse(list, &cs);
  if (st == ACX_ERR_INVALID_ARG) {
    ACX_WARN(DEVICE, "acx_device_open: %s = '%s' is not a non-empty cpuset list (e.g. \"0-15,32-47\")", what, list);
    return bad;
  }
  if (st != ACX_OK) return st;
  dev->cpuset_mask = malloc(sizeof *dev->cpuset_mask);
  if (!dev->cpuset_mask) {
    acxi_cpuset_fini(&cs);
    return ACX_ERR_NO_MEMORY;
  }
  *dev->cpuset_mask = cs;
  snprintf(dev->cpuset, sizeof dev->cpuset, "%s", cs.list);
  return ACX_OK;
}

static acx_status_t resolve_config(acx_device_t *dev, const acx_device_config_t *in) {
  acx_device_config_t cfg = ACX_DEVICE_CONFIG_INIT;
  if (in) {
    ACX_CHECK_ARG(in->size >= offsetof(acx_device_config_t, transport) && in->size <= sizeof cfg,
                  "acx_device_open: cfg->size=%zu; initialise the config with ACX_DEVICE_CONFIG_INIT", in->size);
    memcpy(&cfg, in, in->size);
  }
  switch (cfg.kind) {
  case ACX_DEVICE_KIND_HOST:
    dev->kind_id = ACXI_KIND_HOST;
    break;
  case ACX_DEVICE_KIND_CUDA:
    dev->kind_id = ACXI_KIND_CUDA;
    break;
  case ACX_DEVICE_KIND_DEFAULT: {
    const char *p = acxi_param_str("ACX_DEVICE_KIND");
    if (!strcmp(p, "auto")) {
      dev->kind_id = ACX_HAVE_CUDA && gpu_visible() ? ACXI_KIND_CUDA : ACXI_KIND_HOST;
    } else if (acxi_kind_parse(p, &dev->kind_id) != 0) {
      ACX_WARN(DEVICE, "ACX_DEVICE_KIND='%s': expected auto, cuda or host", p);
      return ACX_ERR_BAD_PARAM;
    }
    break;
  }
  default:
    ACX_WARN(DEVICE, "acx_device_open: cfg->kind=%d is not an acx_device_kind_t", (int)cfg.kind);
    return ACX_ERR_INVALID_ARG;
  }
  if (dev->kind_id == ACXI_KIND_CUDA && !ACX_HAVE_CUDA) {
    ACX_WARN(DEVICE, "device kind 'cuda' is not in this build of acx (CUDA off)");
    return ACX_ERR_NO_DEVICE;
  }
  snprintf(dev->kind, sizeof dev->kind, "%s", acxi_kind_name(dev->kind_id));
  switch (cfg.transport) {
  case ACX_TRANSPORT_PROCESS:
    dev->inline_mode = 0;
    break;
  case ACX_TRANSPORT_INLINE:
    dev->inline_mode = 1;
    break;
  case ACX_TRANSPORT_DEFAULT: {
    const char *p = acxi_param_str("ACX_EXECUTOR");
    if (strcmp(p, "process") && strcmp(p, "inline")) {
      ACX_WARN(DEVICE, "ACX_EXECUTOR='%s': expected process or inline", p);
      return ACX_ERR_BAD_PARAM;
    }
    dev->inline_mode = !strcmp(p, "inline");
    break;
  }
  default:
    ACX_WARN(DEVICE, "acx_device_open: cfg->transport=%d is not an acx_transport_t", (int)cfg.transport);
    return ACX_ERR_INVALID_ARG;
  }
  if (dev->inline_mode) {
    ACXCHECK(acxi_exec_lib(&dev->exec));
    if (!dev->exec->engine_find(dev->kind)) {
      ACX_WARN(DEVICE, "device kind '%s' is not in the executor library loaded for the inline transport", dev->kind);
      return ACX_ERR_NO_DEVICE;
    }
  }
  dev->cuda_ordinal = cfg.cuda_ordinal >= 0 ? cfg.cuda_ordinal : (int)acxi_param_int("ACX_DEVICE");
  if (dev->cuda_ordinal < 0) dev->cuda_ordinal = 0;
  if (cfg.pci_bus_id) {
    ACX_CHECK_ARG(strlen(cfg.pci_bus_id) < sizeof dev->pci_bus_id, "acx_device_open: cfg->pci_bus_id '%s' is too long",
                  cfg.pci_bus_id);
    snprintf(dev->pci_bus_id, sizeof dev->pci_bus_id, "%s", cfg.pci_bus_id);
  }
  /* Checked here, before any executor starts: the executor refuses more streams than it has room
   * for, and would only say so once spawned. */
  if (cfg.streams > ACXI_MAX_STREAMS) {
    ACX_WARN(DEVICE, "acx_device_open: argument 'cfg->streams'=%d is not in [1, %d] (the executor's stream limit)",
             cfg.streams, ACXI_MAX_STREAMS);
    return ACX_ERR_INVALID_ARG;
  }
  int64_t streams = cfg.streams > 0 ? cfg.streams : acxi_param_int("ACX_DEVICE_STREAMS");
  if (streams < 1 || streams > ACXI_MAX_STREAMS) {
    ACX_WARN(DEVICE, "acx_device_open: cfg->streams=%d leaves it to ACX_DEVICE_STREAMS=%" PRId64 ", which is not in "
             "[1, %d] (the executor's stream limit)", cfg.streams, streams, ACXI_MAX_STREAMS);
    return ACX_ERR_BAD_PARAM;
  }
  dev->streams = (int)streams;
  dev->max_restarts = cfg.max_restarts >= 0 ? cfg.max_restarts : (int)acxi_param_int("ACX_MAX_RESTARTS");
  if (dev->max_restarts < 0) dev->max_restarts = 0;
  dev->restart_window_ns = cfg.restart_window_ns > 0 ? cfg.restart_window_ns
                                                     : acxi_param_int("ACX_RESTART_WINDOW_MS") * 1000000;
  dev->heartbeat_ns = cfg.heartbeat_ns > 0 ? cfg.heartbeat_ns : acxi_param_int("ACX_HEARTBEAT_MS") * 1000000;
  dev->exec_timeout_ns = acxi_param_int("ACX_EXEC_TIMEOUT_MS") * 1000000;
  dev->spin_ns = acxi_exec_spin_ns(dev->kind);
  int64_t slots = acxi_param_int("ACX_RING_SLOTS");
  if (slots < ACXI_RING_SLOTS_MIN || slots > ACXI_RING_SLOTS_MAX || (slots & (slots - 1))) {
    ACX_WARN(DEVICE, "ACX_RING_SLOTS=%" PRId64 " must be a power of two in [%u, %u]", slots, ACXI_RING_SLOTS_MIN,
             ACXI_RING_SLOTS_MAX);
    return ACX_ERR_BAD_PARAM;
  }
  dev->slots = (uint32_t)slots;
  if (dev->heartbeat_ns < 4000000 || dev->restart_window_ns <= 0 || dev->exec_timeout_ns <= 0 || dev->spin_ns < 0) {
    ACX_WARN(DEVICE, "heartbeat (%" PRId64 " ms, min 4), restart window, ACX_EXEC_TIMEOUT_MS and ACX_EXEC_SPIN_NS must "
             "be positive", dev->heartbeat_ns / 1000000);
    return ACX_ERR_BAD_PARAM;
  }
  int64_t staging = acxi_param_int("ACX_STAGING_BYTES");
  if (staging < 8192) {
    ACX_WARN(DEVICE, "ACX_STAGING_BYTES=%" PRId64 " is below 8192", staging);
    return ACX_ERR_BAD_PARAM;
  }
  dev->staging_bytes = (size_t)staging & ~(size_t)4095;
  const char *fi = acxi_param_str("ACX_FAULT_INJECT");
  uint64_t nth;
  if (strlen(fi) >= sizeof dev->fault_inject) {
    ACX_WARN(DEVICE, "ACX_FAULT_INJECT='%s' is too long", fi);
    return ACX_ERR_BAD_PARAM;
  }
  ACXCHECK(acxi_fault_schedule(fi, 1, &nth));
  snprintf(dev->fault_inject, sizeof dev->fault_inject, "%s", fi);
  const char *comp = acxi_param_str("ACX_COMPLETION");
  if (strcmp(comp, "auto") && strcmp(comp, "event") && strcmp(comp, "hostfn")) {
    ACX_WARN(DEVICE, "ACX_COMPLETION='%s': expected auto, event or hostfn", comp);
    return ACX_ERR_BAD_PARAM;
  }
  snprintf(dev->completion, sizeof dev->completion, "%s", comp);
  int64_t standby = acxi_param_int("ACX_EXECUTOR_STANDBY");
  if (standby != 0 && standby != 1) {
    ACX_WARN(DEVICE, "ACX_EXECUTOR_STANDBY=%" PRId64 ": expected 0 or 1", standby);
    return ACX_ERR_BAD_PARAM;
  }
  dev->standby_enabled = !dev->inline_mode && standby == 1; /* inline: no process to stand in for */
  ACXCHECK(resolve_cpuset(dev, cfg.cpuset));
  if (!dev->inline_mode) ACXCHECK(find_executor(dev));
  return ACX_OK;
}

acx_status_t acx_device_open(acx_system_t *sys, const acx_device_config_t *cfg, acx_device_t **out) {
  ACX_CHECK_NULL(sys);
  ACX_CHECK_NULL_AS(out, "dev");
  *out = NULL;
  acx_status_t res;
  acx_device_t *dev = calloc(1, sizeof *dev);
  if (!dev) return ACX_ERR_NO_MEMORY;
  atomic_init(&dev->refs, 1);
  dev->sys = sys;
  dev->sock = -1;
  dev->shm.fd = -1;
  dev->sb_sock = -1;
  dev->sb_shm.fd = -1;
  atomic_init(&dev->state, ACXI_DEV_STARTING);
  atomic_init(&dev->next_buffer_id, 1);
  atomic_init(&dev->next_region_id, 1);
  dev->next_event_id = 1;
  pthread_mutex_init(&dev->pend_lock, NULL);
  cond_init_monotonic(&dev->pend_cond);
  pthread_mutex_init(&dev->poll_lock, NULL);
  cond_init_monotonic(&dev->poll_cond);
  pthread_mutex_init(&dev->sock_lock, NULL);
  pthread_mutex_init(&dev->host_lock, NULL);
  pthread_mutex_init(&dev->staging_lock, NULL);
  pthread_mutex_init(&dev->watch_lock, NULL);
  pthread_mutex_init(&dev->event_lock, NULL);
  pthread_mutex_init(&dev->restart_lock, NULL);
  atomic_init(&dev->ff_deadline, INT64_MIN);
  ACXCHECKGOTO(resolve_config(dev, cfg), res, err_free_dev);
  dev->restart_times = calloc((size_t)dev->max_restarts + 1, sizeof *dev->restart_times);
  if (!dev->restart_times) {
    res = ACX_ERR_NO_MEMORY;
    goto err_free_dev;
  }
  ACXCHECKGOTO(pend_init(dev), res, err_free_dev);
  /* The poller is the device's first bound thread: a set the kernel refuses fails the open here,
   * before any executor is spawned with it. */
  acxi_device_hold(dev); /* the poller's own: released as it leaves (stop_poller may detach it) */
  int rc = acxi_thread_create(&dev->poller, dev->cpuset_mask, poller_main, dev);
  if (rc) atomic_fetch_sub_explicit(&dev->refs, 1, memory_order_relaxed); /* no thread: not shared yet */
  if (rc == EINVAL && dev->cpuset_mask) {
    ACX_WARN(DEVICE, "acx_device_open: cpuset '%s' (cfg->cpuset or ACX_CPUSET) holds no CPU this process may run "
             "on", dev->cpuset);
    res = ACX_ERR_INVALID_ARG;
    goto err_free_dev;
  }
  if (rc) {
    ACX_WARN(DEVICE, "pthread_create of the reply poller failed: %s", strerror(rc));
    res = ACX_ERR_SYSTEM;
    goto err_free_dev;
  }
  dev->poller_live = 1;

  acx_props_t props = ACX_PROPS_INIT;
  props.state_size = sizeof(dev_actor_t);
  props.init = actor_init;
  props.receive = actor_receive;
  props.post_stop = actor_post_stop;
  props.pre_restart = actor_pre_restart;
  props.arg = dev;
  char name[64];
  const char *nm = cfg && cfg->size > offsetof(acx_device_config_t, name) && cfg->name ? cfg->name : NULL;
  if (!nm) {
    snprintf(name, sizeof name, "device%d", atomic_fetch_add(&device_counter, 1));
    nm = name;
  }
  acx_ref_t parent = cfg && cfg->size > offsetof(acx_device_config_t, supervisor) ? cfg->supervisor : NULL;
  ACXCHECKGOTO(acx_spawn(sys, parent, &props, nm, &dev->actor), res, err_stop_poller);
  acx_future_t *f;
  ACXCHECKGOTO(acx_ask(dev->actor, DEV_MSG_START, NULL, 0, &f), res, err_stop_actor);
  res = acx_future_wait(f, dev->exec_timeout_ns + 10000000000LL, NULL, 0, NULL);
  acx_future_release(f);
  if (res != ACX_OK) goto err_stop_actor;
  char where[ACX_TOPO_CPUSET_STRLEN];
  ACX_INFO(DEVICE, "%s device open: %s transport, %d streams, generation 1, executor %s %d, cpuset %s, poller on %s",
           dev->kind, dev->inline_mode ? "inline" : "process", dev->streams, dev->inline_mode ? "in rank pid" : "pid",
           dev->inline_mode ? (int)getpid() : (int)atomic_load_explicit(&dev->pid, memory_order_relaxed),
           dev->cpuset[0] ? dev->cpuset : "unbound", acxi_thread_cpuset_str(dev->poller, where, sizeof where));
  *out = dev;
  return ACX_OK;

err_stop_actor:
  /* The actor's post_stop closes whatever was started and drops its device reference. */
  acx_stop(dev->actor);
  acx_ref_release(dev->actor);
  for (int64_t dl = acxi_deadline(dev->exec_timeout_ns); load_state(dev) != ACXI_DEV_CLOSED && acxi_now_ns() < dl;)
    sleep_ns(1000000);
  close_device(dev, 0);
  acxi_device_release(dev);
  return res;
err_stop_poller:
  atomic_store_explicit(&dev->state, ACXI_DEV_CLOSED, memory_order_seq_cst);
  stop_poller(dev, acxi_deadline(POLL_PAUSE_NS));
  acxi_device_release(dev); /* freed here, or by a detached poller as it leaves */
  return res;
err_free_dev:
  device_free(dev);
  return res;
}

acx_status_t acx_device_close(acx_device_t *dev, int64_t timeout_ns) {
  ACX_CHECK_NULL(dev);
  int64_t deadline = acxi_deadline(acxi_device_timeout(dev, timeout_ns));
  /* A restart under way gives up at its next step (it would delay the DeviceActor's close). */
  atomic_store_explicit(&dev->close_requested, 1, memory_order_relaxed);
  atomic_store_explicit(&dev->close_by, deadline, memory_order_relaxed); /* the supervision's waits end by then */
  int s = load_state(dev);
  if (s == ACXI_DEV_STARTING || s == ACXI_DEV_RECOVERING) pend_fail_all(dev, ACX_ERR_CANCELLED);
  acx_future_t *f = NULL;
  acx_status_t st = acx_ask(dev->actor, DEV_MSG_CLOSE, &deadline, sizeof deadline, &f);
  if (st == ACX_OK) {
    int64_t left = deadline - acxi_now_ns();
    st = acx_future_wait(f, left > 0 ? left : 0, NULL, 0, NULL);
    acx_future_release(f);
    if (st != ACX_OK)
      ACX_WARN(DEVICE, "acx_device_close: the DeviceActor did not finish closing the %s device within timeout_ns "
               "(%s); it goes on in the background", dev->kind, acx_status_name(st));
  } else {
    /* The DeviceActor is gone (stopped by its supervisor): its post_stop closes the device. */
    while (load_state(dev) != ACXI_DEV_CLOSED && acxi_now_ns() < deadline) sleep_ns(1000000);
    if (load_state(dev) != ACXI_DEV_CLOSED) close_device(dev, deadline);
    st = load_state(dev) == ACXI_DEV_CLOSED ? ACX_OK : ACX_ERR_TIMEOUT;
  }
  if (st != ACX_OK) {
    acx_stop(dev->actor); /* its post_stop finishes the close and drops its device reference */
    st = ACX_ERR_TIMEOUT;
  }
  acx_ref_release(dev->actor);
  acxi_device_release(dev);
  return st;
}

acx_status_t acx_device_generation(acx_device_t *dev, uint64_t *generation) {
  ACX_CHECK_NULL(dev);
  ACX_CHECK_NULL(generation);
  *generation = atomic_load_explicit(&dev->generation, memory_order_relaxed);
  return ACX_OK;
}

acx_status_t acx_device_actor(acx_device_t *dev, acx_ref_t *actor) {
  ACX_CHECK_NULL(dev);
  ACX_CHECK_NULL(actor);
  *actor = dev->actor;
  return ACX_OK;
}

acx_status_t acx_device_watch(acx_device_t *dev, acx_ref_t watcher) {
  ACX_CHECK_NULL(dev);
  ACX_CHECK_NULL(watcher);
  ACXCHECK(acx_ref_hold(watcher));
  pthread_mutex_lock(&dev->watch_lock);
  if (dev->n_watchers == dev->cap_watchers) {
    int cap = dev->cap_watchers ? 2 * dev->cap_watchers : 4;
    acx_ref_t *w = realloc(dev->watchers, (size_t)cap * sizeof *w);
    if (!w) {
      pthread_mutex_unlock(&dev->watch_lock);
      acx_ref_release(watcher);
      return ACX_ERR_NO_MEMORY;
    }
    dev->watchers = w;
    dev->cap_watchers = cap;
  }
  dev->watchers[dev->n_watchers++] = watcher;
  pthread_mutex_unlock(&dev->watch_lock);
  return ACX_OK;
}

acx_status_t acx_device_stats(acx_device_t *dev, acx_device_stats_t *stats) {
  ACX_CHECK_NULL(dev);
  ACX_CHECK_NULL(stats);
  ACX_CHECK_ARG(stats->size == sizeof *stats, "acx_device_stats: stats->size=%zu, expected %zu", stats->size,
                sizeof *stats);
  /* relaxed: statistics, each counter on its own. */
  stats->generation = atomic_load_explicit(&dev->generation, memory_order_relaxed);
  stats->restarts = atomic_load_explicit(&dev->restarts, memory_order_relaxed);
  stats->last_recovery_ns = atomic_load_explicit(&dev->last_recovery_ns, memory_order_relaxed);
  stats->commands = atomic_load_explicit(&dev->commands, memory_order_relaxed);
  stats->outstanding = pend_outstanding(dev);
  stats->buffers_live = atomic_load_explicit(&dev->buffers_live, memory_order_relaxed);
  stats->device_bytes = atomic_load_explicit(&dev->device_bytes, memory_order_relaxed);
  stats->managed_bytes = atomic_load_explicit(&dev->managed_bytes, memory_order_relaxed);
  stats->host_bytes = atomic_load_explicit(&dev->host_bytes, memory_order_relaxed);
  stats->standby_promotions = atomic_load_explicit(&dev->standby_promotions, memory_order_relaxed);
  stats->standby_spawns = atomic_load_explicit(&dev->standby_spawns, memory_order_relaxed);
  stats->async_failures = atomic_load_explicit(&dev->ff_failures, memory_order_relaxed);
  stats->standby_ready = atomic_load_explicit(&dev->sb_ready, memory_order_relaxed);
  int s = load_state(dev);
  stats->available = s == ACXI_DEV_RUNNING || s == ACXI_DEV_STARTING || s == ACXI_DEV_RECOVERING;
  ACX_TRACE(DEVICE, "stats: state %s", state_name(s));
  return ACX_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* device-wide commands                                                                       */

static acx_status_t check_stream(acx_device_t *dev, const char *fn, uint32_t stream, int allow_all) {
  if (stream < (uint32_t)dev->streams || (allow_all && stream == ACX_STREAM_ALL)) return ACX_OK;
  ACX_WARN(DEVICE, "%s: argument 'stream'=%u is not in [0, %d)%s", fn, stream, dev->streams,
           allow_all ? " or ACX_STREAM_ALL" : "");
  return ACX_ERR_INVALID_ARG;
}

acx_status_t acx_device_synchronize(acx_device_t *dev, uint32_t stream, int64_t timeout_ns) {
  ACX_CHECK_NULL(dev);
  ACXCHECK(check_stream(dev, __func__, stream, 1));
  /* relaxed: counted before our SYNC is pushed, so every launch it counts is ahead of the SYNC. */
  uint64_t sent = atomic_load_explicit(&dev->ff_sent, memory_order_relaxed);
  acxi_cmd_t cmd = {.op = ACXI_OP_SYNC, .stream = stream};
  ACXCHECK(acxi_device_call(dev, &cmd, NULL, 0, 0, -1, timeout_ns, NULL));
  if (stream == ACX_STREAM_ALL) {
    /* relaxed: a watermark; a racing loss at worst reports one DEVICE_LOST too many. */
    uint64_t fenced = atomic_load_explicit(&dev->ff_fenced, memory_order_relaxed);
    while (fenced < sent && !atomic_compare_exchange_weak_explicit(&dev->ff_fenced, &fenced, sent,
                                                                   memory_order_relaxed, memory_order_relaxed)) {
    }
  }
  /* relaxed: the failure was noted before the SYNC's reply completed our future (same poller or
   * executor thread, in reply order), and that completion is a release our wait acquired. */
  int err = atomic_exchange_explicit(&dev->ff_error, 0, memory_order_relaxed);
  return (acx_status_t)err;
}

acx_status_t acx_device_synchronize_async(acx_device_t *dev, uint32_t stream, acx_future_t **done) {
  ACX_CHECK_NULL(dev);
  ACX_CHECK_NULL(done);
  ACXCHECK(check_stream(dev, __func__, stream, 1));
  acxi_cmd_t cmd = {.op = ACXI_OP_SYNC, .stream = stream};
  return acxi_device_submit(dev, &cmd, NULL, 0, 0, -1, acxi_deadline(dev->exec_timeout_ns), done);
}

acx_status_t acx_device_mem_info(acx_device_t *dev, uint64_t *free_bytes, uint64_t *total_bytes,
                                 int64_t timeout_ns) {
  ACX_CHECK_NULL(dev);
  ACX_CHECK_NULL(free_bytes);
  ACX_CHECK_NULL(total_bytes);
  acxi_cmd_t cmd = {.op = ACXI_OP_MEM_INFO};
  acxi_cpl_t c;
  ACXCHECK(acxi_device_call(dev, &cmd, NULL, 0, 0, -1, timeout_ns, &c));
  *free_bytes = c.value[0];
  *total_bytes = c.value[1];
  return ACX_OK;
}

acx_status_t acx_device_ping(acx_device_t *dev, int64_t timeout_ns) {
  ACX_CHECK_NULL(dev);
  acxi_cmd_t cmd = {.op = ACXI_OP_NOP};
  return acxi_device_call(dev, &cmd, NULL, 0, 0, -1, timeout_ns, NULL);
}

acx_status_t acx_device_launch_empty(acx_device_t *dev, uint32_t stream, int64_t timeout_ns) {
  ACX_CHECK_NULL(dev);
  ACXCHECK(check_stream(dev, __func__, stream, 0));
  acxi_cmd_t cmd = {.op = ACXI_OP_KERNEL_EMPTY, .stream = stream};
  return acxi_device_call(dev, &cmd, NULL, 0, 0, -1, timeout_ns, NULL);
}

acx_status_t acx_device_launch_empty_async(acx_device_t *dev, uint32_t stream, acx_future_t **done) {
  ACX_CHECK_NULL(dev);
  ACXCHECK(check_stream(dev, __func__, stream, 0));
  acxi_cmd_t cmd = {.op = ACXI_OP_KERNEL_EMPTY, .stream = stream};
  acx_status_t st = acxi_device_submit(dev, &cmd, NULL, 0, 0, -1, acxi_deadline(dev->exec_timeout_ns), done);
  /* relaxed: a counter compared at the next loss and all-stream synchronize. */
  if (st == ACX_OK && !done) atomic_fetch_add_explicit(&dev->ff_sent, 1, memory_order_relaxed);
  return st;
}

acx_status_t acx_device_inject_fault(acx_device_t *dev, int sticky, int64_t timeout_ns) {
  ACX_CHECK_NULL(dev);
  ACX_CHECK_ARG(sticky == 0 || sticky == 1, "acx_device_inject_fault: argument 'sticky'=%d must be 0 or 1", sticky);
  ACX_WARN(DEVICE, "injecting a %s fault into the %s executor (generation %" PRIu64 ")", sticky ? "sticky" : "crash",
           dev->kind, atomic_load_explicit(&dev->generation, memory_order_relaxed));
  acxi_cmd_t cmd = {.op = ACXI_OP_FAULT, .arg = {sticky ? ACXI_FAULT_STICKY : ACXI_FAULT_CRASH}};
  return acxi_device_call(dev, &cmd, NULL, 0, 0, -1, timeout_ns, NULL);
}

acx_status_t acxi_device_restart(acx_device_t *dev, const char *reason) {
  ACX_CHECK_NULL(dev);
  if (dev->inline_mode) {
    ACX_WARN(DEVICE, "restart of the %s device refused: its executor is a thread of this process (inline "
             "transport) and cannot be killed", dev->kind);
    return ACX_ERR_NOT_SUPPORTED;
  }
  /* As a submitter (see acxi_device_submit): while we are counted and see RUNNING, the control
   * block cannot be swapped under our doorbell ring below. */
  atomic_fetch_add_explicit(&dev->submitters, 1, memory_order_seq_cst);
  int s = load_state(dev);
  /* relaxed: the generation only moves while no submitter is inside. */
  uint64_t gen = atomic_load_explicit(&dev->generation, memory_order_relaxed);
  if (s == ACXI_DEV_RUNNING) {
    pthread_mutex_lock(&dev->restart_lock);
    snprintf(dev->restart_reason, sizeof dev->restart_reason, "%s", reason && *reason ? reason : "(no reason given)");
    pthread_mutex_unlock(&dev->restart_lock);
    uint64_t cur = atomic_load_explicit(&dev->restart_gen, memory_order_relaxed);
    /* release: the reason above is visible to the poller's acquire load. Generations only grow:
     * never move the request back to an older one. */
    while (cur < gen && !atomic_compare_exchange_weak_explicit(&dev->restart_gen, &cur, gen, memory_order_release,
                                                               memory_order_relaxed)) {
    }
    ACX_WARN(DEVICE, "%s executor generation %" PRIu64 ": restart requested: %s", dev->kind, gen,
             reason && *reason ? reason : "(no reason given)");
    acxi_ring_wake(&dev->cv.cpls); /* the poller may sleep on the reply doorbell */
  }
  /* release: as in acxi_device_submit. */
  atomic_fetch_sub_explicit(&dev->submitters, 1, memory_order_release);
  switch (s) {
  case ACXI_DEV_RUNNING:
    break;
  case ACXI_DEV_STARTING:
  case ACXI_DEV_RECOVERING:
    return ACX_OK; /* that incarnation is lost already; a restart is under way */
  case ACXI_DEV_UNAVAILABLE:
    return ACX_ERR_DEVICE_UNAVAILABLE;
  default:
    return ACX_ERR_INVALID_STATE;
  }
  int64_t wait = dev->heartbeat_ns > 1000000000LL ? dev->heartbeat_ns : 1000000000LL;
  for (int64_t dl = acxi_deadline(wait);;) {
    /* acquire: pairs with mark_failed's release; the failed futures are complete. Declared lost
     * means its requests have failed, not merely that the state left RUNNING (begin_loss changes
     * the state first, then fails them). */
    if (atomic_load_explicit(&dev->failed_gen, memory_order_acquire) >= gen ||
        atomic_load_explicit(&dev->generation, memory_order_relaxed) != gen)
      return ACX_OK;
    s = load_state(dev);
    if (s == ACXI_DEV_UNAVAILABLE) return ACX_ERR_DEVICE_UNAVAILABLE;
    if (s != ACXI_DEV_RUNNING && s != ACXI_DEV_RECOVERING) return ACX_OK; /* closing: its own path fails them */
    if (acxi_now_ns() >= dl) {
      ACX_WARN(DEVICE, "%s executor generation %" PRIu64 ": the restart was requested but the reply poller did not "
               "declare the loss within %" PRId64 " ms", dev->kind, gen, wait / 1000000);
      return ACX_ERR_TIMEOUT;
    }
    sleep_ns(100000); /* the poller acts within ~1 ms of the doorbell */
  }
}
