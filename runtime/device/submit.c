/* Submission, rank side: users push straight into the command ring (no mailbox on the hot path);
 * the state and the submitters counter (a Dekker pair with the supervision) decide what is
 * accepted; acxi_device_call waits for the reply. */
#include <inttypes.h>
#include <pthread.h>

#include "runtime/base/clock.h"
#include "runtime/base/log.h"
#include "runtime/device/device_impl.h"

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

acx_status_t acxi_device_state_status(acx_device_t *dev) {
  return state_status(acxi_dev_load_state(dev));
}

int acxi_dev_state_accepts(int s, unsigned flags) {
  return s == ACXI_DEV_RUNNING ||
         ((flags & ACXI_SUBMIT_INTERNAL) && (s == ACXI_DEV_STARTING || s == ACXI_DEV_CLOSING));
}

/* Why a submission is refused in state `s`, from the state the caller sampled, never a fresh
 * load: a recovery (a standby promotion takes a few ms) may have made the device RUNNING since,
 * and a fresh load then said ACX_OK for a request that never entered the table or the ring; its
 * caller waited for a reply that could not come ("request 0 got no reply", issue 3). */
acx_status_t acxi_dev_refusal_status(int s) {
  acx_status_t st = state_status(s);
  return st == ACX_OK ? ACX_ERR_INVALID_STATE : st;
}

int64_t acxi_device_timeout(acx_device_t *dev, int64_t timeout_ns) {
  return timeout_ns < 0 ? dev->exec_timeout_ns : timeout_ns;
}

acx_status_t acxi_device_submit(acx_device_t *dev, acxi_cmd_t *cmd, const acxi_bufarg_t *bufs, int nbufs,
                                unsigned flags, int fd, int64_t deadline_ns, acx_future_t **future) {
  acx_status_t st = ACX_OK;
  acx_future_t *f = NULL;
  uint64_t req_id = 0;
  if (future) *future = NULL;
  /* Stream order with collectives on a coll's worker thread (device_internal.h). */
  for (int i = 0; i < nbufs; i++)
    ACXCHECK(acxi_buffer_coll_order("a command", bufs[i].name, bufs[i].buf, deadline_ns));
  if (future) {
    ACXCHECK(acx_future_create(&f));
    acx_future_hold(f); /* one reference for the table, one for the caller */
  }
  /* seq_cst: our increment must be visible before we read the state, and the recovery path sets
   * the state before it reads this counter (Dekker): either we see it recovering, or it waits
   * for us to leave. */
  atomic_fetch_add_explicit(&dev->submitters, 1, memory_order_seq_cst);
  int s = acxi_dev_load_state(dev);
  if (!acxi_dev_state_accepts(s, flags)) {
    st = acxi_dev_refusal_status(s);
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
    st = acxi_dev_pend_add(dev, f, flags, deadline_ns, &req_id);
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
      acxi_dev_ring_broken(dev, "command");
      break;
    }
    s = acxi_dev_load_state(dev);
    if (!acxi_dev_state_accepts(s, flags)) {
      st = acxi_dev_refusal_status(s);
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
       * failed the request (acxi_dev_pend_fail_all), or never handed to the table (no req_id). The push
       * used to fail only in the last two cases; a broken ring also fails it in the first. */
      acx_future_t *mine = req_id ? acxi_dev_pend_take(dev, req_id) : NULL;
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

/* Waits (SUBMITTERS_WAIT_NS at most) until no submitter is between its state check and its ring
 * push; the state no longer accepts them. ACX_ERR_TIMEOUT (logged) when some stayed. */
acx_status_t acxi_dev_wait_submitters_gone(acx_device_t *dev, const char *why) {
  int64_t deadline = acxi_dev_supervision_deadline(dev, SUBMITTERS_WAIT_NS);
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
    acxi_dev_sleep_ns(100000);
  }
  return ACX_OK;
}
