/* The DeviceActor, rank side: owns the executor's lifecycle. It starts generation 1, recovers
 * after a loss (promotes the standby or spawns a fresh executor, within ACX_MAX_RESTARTS), tells
 * the watchers, and closes the device; acxi_device_restart asks the poller for a loss. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "runtime/base/clock.h"
#include "runtime/base/log.h"
#include "runtime/device/device_impl.h"

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

typedef struct dev_actor {
  acx_device_t *dev;
} dev_actor_t;

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
static void note_exit_status(acx_device_t *dev, const acxi_dev_loss_t *loss, acx_device_event_t *ev) {
  ev->exit_status = dev->loss_exit_status;
  if (dev->loss_exit_status != -1 && loss->cause == ACX_ERR_DEVICE_LOST) {
    char how[96];
    acxi_dev_describe_wait_status(dev->loss_exit_status, how, sizeof how);
    ACX_INFO(DEVICE, "lost executor generation %" PRIu64 ": %s", loss->generation, how);
  }
}

/* After a loss: the standby, when there is a usable one, becomes generation + 1 (the lost
 * executor is only SIGKILLed first and reaped once its successor serves: a CUDA context's
 * teardown takes time); else a fresh executor is spawned. Then a new standby is spawned. */
static void recover(acx_ctx_t *ctx, acx_device_t *dev, const acxi_dev_loss_t *loss) {
  uint64_t lost_gen = loss->generation;
  if (atomic_load_explicit(&dev->generation, memory_order_relaxed) != lost_gen ||
      acxi_dev_load_state(dev) != ACXI_DEV_RECOVERING)
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
    unreaped = acxi_dev_end_incarnation_kill(dev);
  } else {
    acxi_dev_end_incarnation(dev, 0);
    note_exit_status(dev, loss, &ev);
  }
  for (;;) {
    /* relaxed: a request; the close that follows is serialised behind us by the mailbox. */
    if (atomic_load_explicit(&dev->close_requested, memory_order_relaxed)) {
      ACX_INFO(DEVICE, "%s device: restart after generation %" PRIu64 " abandoned: the device closes", dev->kind,
               lost_gen);
      if (unreaped) acxi_dev_reap_pid(unreaped, 0);
      return;
    }
    if (!restart_allowed(dev, acxi_now_ns())) {
      if (unreaped) {
        dev->loss_exit_status = acxi_dev_reap_pid(unreaped, 0);
        note_exit_status(dev, loss, &ev);
      }
      acxi_dev_standby_discard(dev, 0, "the restart limit is reached");
      acxi_dev_set_state(dev, ACXI_DEV_UNAVAILABLE);
      acxi_dev_pend_fail_all(dev, ACX_ERR_DEVICE_UNAVAILABLE);
      ACX_WARN(DEVICE, "%s device: %d restarts within %" PRId64 " ms reached: the device is unavailable; telling its "
               "supervisor", dev->kind, dev->max_restarts, dev->restart_window_ns / 1000000);
      ev.new_generation = ev.old_generation;
      notify_watchers(dev, ACX_MSG_DEVICE_UNAVAILABLE, &ev);
      acx_actor_fail(ctx, ACX_ERR_DEVICE_UNAVAILABLE);
      return;
    }
    acx_status_t st = acxi_dev_standby_promote(dev, gen);
    int promoted = st != ACX_ERR_NO_DEVICE;
    if (!promoted) st = acxi_dev_start_incarnation(dev, gen);
    int64_t took = acxi_now_ns() - loss->detected_ns;
    if (st == ACX_OK) {
      /* Counted before the lost executor is reaped (a CUDA context's teardown takes ~100 ms), so
       * stats read right after the first successful command already show this recovery. */
      atomic_fetch_add_explicit(&dev->restarts, 1, memory_order_relaxed);
      if (promoted) atomic_fetch_add_explicit(&dev->standby_promotions, 1, memory_order_relaxed);
      atomic_store_explicit(&dev->last_recovery_ns, took, memory_order_relaxed);
    }
    if (unreaped) {
      dev->loss_exit_status = acxi_dev_reap_pid(unreaped, 0);
      note_exit_status(dev, loss, &ev);
      unreaped = 0;
    }
    if (st == ACX_OK) {
      ACX_WARN(DEVICE, "%s device recovered: executor generation %" PRIu64 " (%s) serves it, %.1f ms after the loss "
               "of generation %" PRIu64, dev->kind, gen, promoted ? "the promoted standby" : "freshly spawned",
               took / 1e6, lost_gen);
      ev.new_generation = gen;
      notify_watchers(dev, ACX_MSG_DEVICE_RESTARTED, &ev);
      acxi_dev_standby_spawn(dev);
      return;
    }
    acxi_dev_end_incarnation(dev, 0);
  }
}

static acx_status_t actor_receive(acx_ctx_t *ctx, void *state, const acx_msg_t *msg) {
  acx_device_t *dev = ((dev_actor_t *)state)->dev;
  switch (msg->type) {
  case DEV_MSG_START: {
    acx_status_t st = acxi_dev_start_incarnation(dev, 1);
    if (st != ACX_OK) acxi_dev_end_incarnation(dev, 0); /* the opener closes the device */
    acx_reply(ctx, msg, st, NULL, 0);
    if (st == ACX_OK) acxi_dev_standby_spawn(dev);
    return ACX_OK;
  }
  case DEV_MSG_STANDBY_LOST:
    if (msg->len == sizeof(acxi_dev_sb_loss_t)) {
      const acxi_dev_sb_loss_t *l = msg->data;
      /* A stale report when that standby was promoted or replaced meanwhile. */
      if (dev->sb_ctrl && l->pid == atomic_load_explicit(&dev->sb_pid, memory_order_relaxed) &&
          acxi_dev_load_state(dev) == ACXI_DEV_RUNNING)
        acxi_dev_standby_lost(dev, l->reason);
    }
    return ACX_OK;
  case DEV_MSG_LOST:
    if (msg->len == sizeof(acxi_dev_loss_t)) recover(ctx, dev, (const acxi_dev_loss_t *)msg->data);
    return ACX_OK;
  case DEV_MSG_FATAL:
    if (msg->len == sizeof(acxi_dev_loss_t)) {
      const acxi_dev_loss_t *loss = msg->data;
      acx_device_event_t ev = {.old_generation = loss->generation, .cause = ACX_ERR_DEVICE_FATAL,
                               .exit_status = -1};
      ev.new_generation = ev.old_generation;
      memcpy(ev.reason, loss->reason, sizeof ev.reason);
      notify_watchers(dev, ACX_MSG_DEVICE_FATAL, &ev);
    }
    return ACX_OK;
  case DEV_MSG_CLOSE: {
    int64_t dl = msg->len == sizeof(int64_t) ? *(const int64_t *)msg->data : acxi_deadline(dev->exec_timeout_ns);
    acxi_dev_close_device(dev, dl);
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
  acxi_dev_close_device(a->dev, by ? by : acxi_deadline(a->dev->exec_timeout_ns));
  acxi_device_release(a->dev);
  a->dev = NULL;
}

/* The DeviceActor's props for acx_spawn (acx_device_open): its state holds the device. */
void acxi_dev_actor_props(acx_device_t *dev, acx_props_t *out) {
  acx_props_t props = ACX_PROPS_INIT;
  props.state_size = sizeof(dev_actor_t);
  props.init = actor_init;
  props.receive = actor_receive;
  props.post_stop = actor_post_stop;
  props.pre_restart = actor_pre_restart;
  props.arg = dev;
  *out = props;
}

acx_status_t acxi_device_restart(acx_device_t *dev, const char *reason) {
  ACX_CHECK_NULL(dev);
  if (!dev->transport->restartable) {
    ACX_WARN(DEVICE, "restart of the %s device refused: its executor is a thread of this process (%s "
             "transport) and cannot be killed", dev->kind, dev->transport->name);
    return ACX_ERR_NOT_SUPPORTED;
  }
  /* As a submitter (see acxi_device_submit): while we are counted and see RUNNING, the control
   * block cannot be swapped under our doorbell ring below. */
  atomic_fetch_add_explicit(&dev->submitters, 1, memory_order_seq_cst);
  int s = acxi_dev_load_state(dev);
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
    /* acquire: pairs with acxi_dev_mark_failed's release; the failed futures are complete. Declared lost
     * means its requests have failed, not merely that the state left RUNNING (begin_loss changes
     * the state first, then fails them). */
    if (atomic_load_explicit(&dev->failed_gen, memory_order_acquire) >= gen ||
        atomic_load_explicit(&dev->generation, memory_order_relaxed) != gen)
      return ACX_OK;
    s = acxi_dev_load_state(dev);
    if (s == ACXI_DEV_UNAVAILABLE) return ACX_ERR_DEVICE_UNAVAILABLE;
    if (s != ACXI_DEV_RUNNING && s != ACXI_DEV_RECOVERING) return ACX_OK; /* closing: its own path fails them */
    if (acxi_now_ns() >= dl) {
      ACX_WARN(DEVICE, "%s executor generation %" PRIu64 ": the restart was requested but the reply poller did not "
               "declare the loss within %" PRId64 " ms", dev->kind, gen, wait / 1000000);
      return ACX_ERR_TIMEOUT;
    }
    acxi_dev_sleep_ns(100000); /* the poller acts within ~1 ms of the doorbell */
  }
}
