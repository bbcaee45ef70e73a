/* The reply poller, rank side: completes futures from the reply ring, and is the one who notices a
 * lost executor (exit, crash, heartbeat, the liveness rule, a broken ring, a sticky error, a
 * requested restart), fails every outstanding request and hands the restart to the DeviceActor.
 * acxi_dev_poll_pause/acxi_dev_poll_resume let the supervision take the control block from under it. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "runtime/base/clock.h"
#include "runtime/base/log.h"
#include "runtime/device/device_impl.h"

/* CLOCK_REALTIME now + ns (>= 0), for the calls that only take that clock. */
static struct timespec realtime_in(int64_t ns) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  int64_t t = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec + (ns > 0 ? ns : 0);
  return acxi_ts_from_ns(t);
}

/* The poller holds poll_lock while it polls, spins and sleeps on the reply doorbell (it touches
 * the control block all that time). Whoever needs the lock (to swap the control block or wake a
 * parked poller) announces it in poll_yield and rings the doorbell: the poller then parks in its
 * condition wait, which releases the lock. Only the DeviceActor's thread (and a closer when the
 * actor is gone) calls these. ACX_OK with poll_lock held, or ACX_ERR_TIMEOUT (logged, not held)
 * when the poller did not park within POLL_PAUSE_NS. */
acx_status_t acxi_dev_poll_pause(acx_device_t *dev, const char *why) {
  atomic_fetch_add_explicit(&dev->poll_yield, 1, memory_order_seq_cst);
  if (dev->cv.ctrl) acxi_ring_wake(&dev->cv.cpls);
  /* In 10 ms slices: a close that starts meanwhile shortens the wait (its deadline is read again). */
  int64_t start = acxi_now_ns();
  int rc;
  for (;;) {
    int64_t dl = acxi_dev_supervision_deadline(dev, POLL_PAUSE_NS - (acxi_now_ns() - start));
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

void acxi_dev_poll_resume(acx_device_t *dev) {
  atomic_fetch_sub_explicit(&dev->poll_yield, 1, memory_order_seq_cst);
  pthread_cond_broadcast(&dev->poll_cond);
  pthread_mutex_unlock(&dev->poll_lock);
}

void acxi_dev_set_state(acx_device_t *dev, int s) {
  int paused = acxi_dev_poll_pause(dev, "the state changes without waking it") == ACX_OK;
  atomic_store_explicit(&dev->state, s, memory_order_seq_cst);
  if (paused) acxi_dev_poll_resume(dev);
}

/* A submitter or the poller found garbage in one of the incarnation's rings (logged by the ring):
 * the poller declares the executor lost at its next look, which this wakes it for. */
void acxi_dev_ring_broken(acx_device_t *dev, const char *which) {
  if (atomic_exchange_explicit(&dev->ring_broken, 1, memory_order_relaxed)) return;
  ACX_WARN(DEVICE, "%s executor generation %" PRIu64 " corrupted the %s ring: declaring it lost", dev->kind,
           atomic_load_explicit(&dev->generation, memory_order_relaxed), which);
  acxi_ring_wake(&dev->cv.cpls);
}

/* Keeps the first unreported failure of a fire-and-forget command for acx_device_synchronize. */
static void note_ff_failure(acx_device_t *dev, acx_status_t st) {
  int expect = 0;
  /* relaxed: the reader learns of it through a later reply's future (release/acquire). */
  atomic_compare_exchange_strong_explicit(&dev->ff_error, &expect, (int)st, memory_order_relaxed,
                                          memory_order_relaxed);
}

/* The status an executor's reply or sticky error means to the caller. Where the executor can be
 * replaced (the process transport) a poisoned context is a loss of that incarnation, which the
 * device restarts: ACX_ERR_DEVICE_LOST, retryable, as the cuda engine already says for the fault
 * itself; ACX_ERR_DEVICE_FATAL (never retryable) belongs to the inline transport. A poisoned host
 * engine answers the commands it still pops with DEVICE_FATAL, and a call that raced the loss
 * report got that (issue 12 item 6). */
acx_status_t acxi_dev_executor_status(const acx_device_t *dev, acx_status_t st) {
  return st == ACX_ERR_DEVICE_FATAL && dev->transport->restartable ? ACX_ERR_DEVICE_LOST : st;
}

/* Completes the request of one reply. The poller calls it (process transport), or the inline
 * executor's threads directly (acxi_dev_complete_direct): it is thread-safe. */
static void complete_reply(acx_device_t *dev, const acxi_cpl_t *in) {
  acxi_cpl_t fixed = *in;
  fixed.status = (int32_t)acxi_dev_executor_status(dev, (acx_status_t)in->status);
  const acxi_cpl_t *c = &fixed;
  acx_future_t *f = acxi_dev_pend_take(dev, c->req_id);
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

void acxi_dev_complete_direct(void *sink, const acxi_cpl_t *c) { complete_reply(sink, c); }

/* Completes the replies waiting in the ring, at most one ring's worth (an executor that keeps
 * posting cannot hold the poller here). */
static int drain_replies(acx_device_t *dev) {
  acxi_cpl_t c;
  int n = 0, got = ACXI_RING_WAIT;
  while (n < (int)dev->slots && (got = acxi_ring_try_pop(&dev->cv.cpls, &c)) == ACXI_RING_DONE) {
    complete_reply(dev, &c);
    n++;
  }
  if (got == ACXI_RING_BROKEN) acxi_dev_ring_broken(dev, "reply");
  return n;
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
static int executor_lost(acx_device_t *dev, acxi_ctrl_t *ctrl, int64_t now, acxi_dev_loss_t *loss) {
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
    loss->cause = acxi_dev_executor_status(dev, ACX_ERR_DEVICE_FATAL);
    snprintf(loss->reason, sizeof loss->reason, "sticky error: %.110s", ctrl->sticky_msg);
    return 1;
  }
  siginfo_t si;
  if (dev->transport->exited(dev, &si)) {
    loss->cause = ACX_ERR_DEVICE_LOST;
    if (si.si_code == CLD_EXITED)
      snprintf(loss->reason, sizeof loss->reason, "executor exited with status %d", si.si_status);
    else
      snprintf(loss->reason, sizeof loss->reason, "executor killed by signal %d (%s)", si.si_status,
               strsignal(si.si_status));
    return 1;
  }
  /* One that cannot be replaced is never declared lost for being slow: it would be lost for good. */
  if (!dev->transport->restartable) return 0;
  /* relaxed: lone timestamps. */
  int64_t beat = atomic_load_explicit(&ctrl->heartbeat_ns, memory_order_relaxed);
  /* Silence that this rank's own stall explains is not the executor's: count from the resume. */
  int64_t resumed = atomic_load_explicit(&dev->stall_resumed_ns, memory_order_relaxed);
  if (beat < resumed) beat = resumed;
  if (now - beat > dev->heartbeat_ns) {
    loss->cause = ACX_ERR_DEVICE_LOST;
    snprintf(loss->reason, sizeof loss->reason, "no heartbeat for %" PRId64 " ms (limit %" PRId64 " ms): the "
             "executor process is stopped or not scheduled", (now - beat) / 1000000, dev->heartbeat_ns / 1000000);
    return 1;
  }
  int64_t progress = atomic_load_explicit(&ctrl->progress_ns, memory_order_relaxed);
  if (progress < resumed) progress = resumed;
  if (now - progress > dev->heartbeat_ns && loop_hung(dev, now)) {
    loss->cause = ACX_ERR_DEVICE_LOST;
    snprintf(loss->reason, sizeof loss->reason, "loop hung: no progress for %" PRId64 " ms (limit %" PRId64
             " ms), every request past its deadline", (now - progress) / 1000000, dev->heartbeat_ns / 1000000);
    return 1;
  }
  return 0;
}

/* The common path of every loss: stop accepting, fail every outstanding request, hand the
 * restart to the DeviceActor. Runs on the poller with poll_lock held. */
static void begin_loss(acx_device_t *dev, acxi_dev_loss_t *loss) {
  int fatal = !dev->transport->restartable;
  if (!acxi_dev_cas_state(dev, ACXI_DEV_RUNNING, fatal ? ACXI_DEV_FATAL : ACXI_DEV_RECOVERING)) return;
  uint64_t gen = atomic_load_explicit(&dev->generation, memory_order_relaxed);
  loss->generation = gen;
  /* Late ones only add requests that their own deadlines end: nothing here unmaps the block. */
  acxi_dev_wait_submitters_gone(dev, "failing the outstanding requests anyway");
  drain_replies(dev); /* whatever the executor answered before it went */
  /* Fire-and-forget launches that no all-stream synchronize covered may have been dropped. */
  uint64_t sent = atomic_load_explicit(&dev->ff_sent, memory_order_relaxed);
  if (sent != atomic_exchange_explicit(&dev->ff_fenced, sent, memory_order_relaxed))
    note_ff_failure(dev, fatal ? ACX_ERR_DEVICE_FATAL : ACX_ERR_DEVICE_LOST);
  acx_status_t fail_with = fatal ? ACX_ERR_DEVICE_FATAL : ACX_ERR_DEVICE_LOST;
  uint64_t failed = acxi_dev_pend_fail_all(dev, fail_with);
  acxi_dev_mark_failed(dev, gen);
  if (fatal) {
    ACX_WARN(DEVICE, "FATAL: %s device (%s transport) generation %" PRIu64 ": %s. This process can no longer use "
             "the GPU (a sticky fault poisons every context of the process); %" PRIu64 " outstanding requests failed "
             "with ACX_ERR_DEVICE_FATAL. Use ACX_EXECUTOR=process to survive such faults.", dev->kind,
             dev->transport->name, gen, loss->reason, failed);
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

void *acxi_dev_poller_main(void *arg) {
  acx_device_t *dev = arg;
  int64_t check_period = dev->heartbeat_ns / 8;
  if (check_period > 20000000) check_period = 20000000;
  if (check_period < 1000000) check_period = 1000000;
  int64_t stall_gap = dev->heartbeat_ns / 4 > 250000000 ? dev->heartbeat_ns / 4 : 250000000;
  int64_t last_active = 0, last_check = 0;
  uint64_t seen_submitted = 0;
  pthread_mutex_lock(&dev->poll_lock);
  /* relaxed: a stop request; the broadcast that follows it orders the rest. */
  while (!atomic_load_explicit(&dev->poller_stop, memory_order_relaxed)) {
    int s = acxi_dev_load_state(dev);
    /* seq_cst: pairs with acxi_dev_poll_pause's increment before its doorbell. */
    if (atomic_load_explicit(&dev->poll_yield, memory_order_seq_cst) || !dev->cv.ctrl ||
        !(s == ACXI_DEV_RUNNING || s == ACXI_DEV_STARTING || s == ACXI_DEV_CLOSING)) {
      acxi_dev_cond_wait_until(&dev->poll_cond, &dev->poll_lock, acxi_now_ns() + 50000000);
      continue;
    }
    acxi_ctrl_t *ctrl = dev->cv.ctrl;
    int n = drain_replies(dev);
    /* Again: completing replies runs continuations, which may have taken long (a close may have
     * given up on us meanwhile and released what the checks below tell). */
    s = acxi_dev_load_state(dev);
    int64_t now = acxi_now_ns();
    /* relaxed: a hint; a submission seen one look late costs one look. */
    uint64_t sub = atomic_load_explicit(&dev->submitted, memory_order_relaxed);
    if (n || sub != seen_submitted) last_active = now;
    seen_submitted = sub;
    /* relaxed: hints to check now rather than at the period (a sticky executor, a broken ring and
     * acxi_device_restart wake us). */
    int sticky = atomic_load_explicit(&ctrl->sticky, memory_order_relaxed) != 0 ||
                 atomic_load_explicit(&dev->ring_broken, memory_order_relaxed) ||
                 atomic_load_explicit(&dev->restart_gen, memory_order_relaxed) ==
                     atomic_load_explicit(&dev->generation, memory_order_relaxed);
    /* While requests wait (and we spin anyway), look for a dead executor every millisecond: they
     * fail, and the device recovers, that much sooner. */
    int64_t period = dev->transport->ring_replies && acxi_dev_pend_outstanding(dev) > 0 ? 1000000 : check_period;
    if ((s == ACXI_DEV_RUNNING || s == ACXI_DEV_STARTING) && (sticky || now - last_check >= period)) {
      /* The poller checks every check_period at most; a gap of a quarter of the heartbeat limit
       * (and at least 250 ms) means this process itself was not scheduled meanwhile, and the
       * executor, on the same node, most likely neither: its silence is measured from now. */
      if (last_check && now - last_check > stall_gap) {
        atomic_store_explicit(&dev->stall_resumed_ns, now, memory_order_relaxed);
        ACX_INFO(DEVICE, "the supervision was not scheduled for %" PRId64 " ms (a stalled or overloaded node): the "
                 "executor's heartbeat is judged from now", (now - last_check) / 1000000);
      }
      last_check = now;
      acxi_dev_loss_t loss = {.detected_ns = now, .cause = ACX_ERR_DEVICE_LOST};
      if (executor_lost(dev, ctrl, now, &loss)) {
        if (s == ACXI_DEV_RUNNING) {
          begin_loss(dev, &loss);
        } else {
          /* A new incarnation died while the DeviceActor registers host memory with it: fail
           * those requests so that its start fails now rather than at its deadline. */
          drain_replies(dev);
          acxi_dev_pend_fail_all(dev, ACX_ERR_DEVICE_LOST);
          acxi_dev_cond_wait_until(&dev->poll_cond, &dev->poll_lock, acxi_now_ns() + check_period);
        }
        continue;
      }
      if (s == ACXI_DEV_RUNNING) acxi_dev_standby_watch(dev, now);
    }
    if (n) continue;
    /* Busy-poll for ACX_EXEC_SPIN_NS after the last reply or submission, then sleep on the reply
     * doorbell (the executor rings it for a sleeping poller), also while requests are outstanding:
     * a request that outlasts the window (a long collective, an all-reduce waiting for a late
     * peer) costs one wake-up on its reply, where spinning for it would take a core from the
     * executors it waits for on a node with more runnable threads than cores. Inline, replies do
     * not come through the ring (acxi_dev_complete_direct): nothing to spin for. While a new
     * incarnation starts (STARTING: host memory re-registered with it) the poller still spins for
     * every outstanding request, as before session 16: with the sleeping rule, a walk-through whose
     * ranks were bound to one core each under salloc stalled in that step (seen 2 times in 4 runs,
     * cause not found; 0 of 1 with the spinning rule kept there). */
    int starting = s == ACXI_DEV_STARTING && acxi_dev_pend_outstanding(dev) > 0;
    if (dev->transport->ring_replies && (starting || now - last_active < dev->spin_ns)) {
      acxi_cpu_relax();
      continue;
    }
    int64_t wake = (last_check ? last_check : now) + period;
    if (wake <= now) wake = now + period; /* no check ran lately (CLOSING): still sleep, not spin */
    acxi_ring_consumer_wait(&dev->cv.cpls, wake);
  }
  pthread_mutex_unlock(&dev->poll_lock);
  acxi_device_release(dev);
  return NULL;
}

/* Stops the reply poller and joins it until `deadline` (at least 100 ms from now). A poller that
 * does not leave in time is detached (logged): it holds its own device reference, so it never
 * touches freed memory, and it leaves at its next look at poller_stop. */
void acxi_dev_stop_poller(acx_device_t *dev, int64_t deadline) {
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
