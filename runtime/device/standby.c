/* The hot standby executor, rank side (process transport, ACX_EXECUTOR_STANDBY): an executor
 * with its engine made, watched by the poller and promoted by the DeviceActor on a loss instead
 * of a fresh spawn. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/base/clock.h"
#include "runtime/base/log.h"
#include "runtime/device/device_impl.h"

/* Standby losses within ACX_RESTART_WINDOW_MS after which no new standby is made (the device
 * then restarts by spawning on demand). */
#define STANDBY_MAX_LOSSES 3
_Static_assert(sizeof(((acx_device_t *)0)->sb_losses) == STANDBY_MAX_LOSSES * sizeof(int64_t),
               "acx_device_t.sb_losses holds STANDBY_MAX_LOSSES timestamps");

/* A standby's silence is counted from `t`, or from the end of this rank's last stall if later: the
 * poller notes when it was not scheduled for a while (poller.c, stall_resumed_ns), and the standby,
 * on the same node, most likely was not either. Without it a standby that had beaten every period
 * was discarded after every such stall ("no heartbeat for 27516 ms" on two ranks at once, their
 * pollers not scheduled as long: session 19) and a new one spawned on the loaded node. */
static int64_t after_stall(acx_device_t *dev, int64_t t) {
  int64_t resumed = atomic_load_explicit(&dev->stall_resumed_ns, memory_order_relaxed);
  return t > resumed ? t : resumed;
}

/* Poller, with poll_lock held (sb_* cannot change): tells the DeviceActor once when the standby
 * died, reported an error, stopped beating, or did not get ready within ACX_EXEC_TIMEOUT_MS. */
void acxi_dev_standby_watch(acx_device_t *dev, int64_t now) {
  acxi_ctrl_t *c = dev->sb_ctrl;
  if (!c || atomic_load_explicit(&dev->sb_reported, memory_order_relaxed)) return;
  acxi_dev_sb_loss_t loss = {.pid = atomic_load_explicit(&dev->sb_pid, memory_order_relaxed)};
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
    int64_t beat = after_stall(dev, atomic_load_explicit(&c->heartbeat_ns, memory_order_relaxed));
    if (now - beat <= dev->heartbeat_ns) return;
    snprintf(loss.reason, sizeof loss.reason, "no heartbeat for %" PRId64 " ms", (now - beat) / 1000000);
  } else if (es == ACXI_EXEC_STARTING) {
    if (now - after_stall(dev, dev->sb_spawned_ns) <= dev->exec_timeout_ns) return;
    snprintf(loss.reason, sizeof loss.reason, "not ready within %" PRId64 " ms", dev->exec_timeout_ns / 1000000);
  } else {
    snprintf(loss.reason, sizeof loss.reason, "in executor state %u", es);
  }
  atomic_store_explicit(&dev->sb_reported, 1, memory_order_relaxed);
  atomic_store_explicit(&dev->sb_ready, 0, memory_order_relaxed);
  if (acx_tell(dev->actor, NULL, DEV_MSG_STANDBY_LOST, &loss, sizeof loss) != ACX_OK)
    ACX_WARN(DEVICE, "standby executor pid %d lost (%s) and the DeviceActor is gone", (int)loss.pid, loss.reason);
}

/* Spawns a standby when the device runs without one. It loads, creates its engine (a second CUDA
 * context on the GPU) and waits idle; the poller watches it. DeviceActor only. */
void acxi_dev_standby_spawn(acx_device_t *dev) {
  if (!dev->standby_enabled || dev->sb_gave_up || dev->sb_ctrl || acxi_dev_load_state(dev) != ACXI_DEV_RUNNING) return;
  acxi_shm_t shm;
  if (acxi_ctrl_create(dev->slots, 0, &shm) != ACX_OK) return; /* logged; the next restart spawns on demand */
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    ACX_WARN(DEVICE, "socketpair for a standby executor failed: %s", strerror(errno));
    goto err_destroy_shm;
  }
  pid_t pid = 0;
  acx_status_t st = acxi_dev_spawn_executor(dev, 0, shm.fd, sv[1], &pid);
  close(sv[1]);
  if (st != ACX_OK) goto err_close_sock;
  if (acxi_dev_poll_pause(dev, "the new standby is dropped") != ACX_OK) goto err_kill_standby;
  dev->sb_shm = shm;
  dev->sb_ctrl = acxi_ctrl(&dev->sb_shm);
  atomic_store_explicit(&dev->sb_pid, pid, memory_order_relaxed);
  dev->sb_sock = sv[0];
  dev->sb_spawned_ns = acxi_now_ns();
  atomic_store_explicit(&dev->sb_reported, 0, memory_order_relaxed);
  acxi_dev_poll_resume(dev);
  atomic_fetch_add_explicit(&dev->standby_spawns, 1, memory_order_relaxed);
  return;
err_kill_standby:
  kill(pid, SIGKILL);
  acxi_dev_reap_pid(pid, 0);
err_close_sock:
  close(sv[0]);
err_destroy_shm:
  acxi_shm_destroy(&shm);
}

/* Asks the standby to leave (it may be initialising or waiting), without waiting for it. */
void acxi_dev_standby_ask_leave(acx_device_t *dev) {
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
  ACXCHECK(acxi_dev_poll_pause(dev, "the standby stays attached"));
  *shm = dev->sb_shm;
  *pid = atomic_load_explicit(&dev->sb_pid, memory_order_relaxed);
  *sock = dev->sb_sock;
  dev->sb_shm = (acxi_shm_t){.fd = -1};
  dev->sb_ctrl = NULL;
  atomic_store_explicit(&dev->sb_pid, 0, memory_order_relaxed);
  atomic_store_explicit(&dev->sb_ready, 0, memory_order_relaxed);
  dev->sb_sock = -1;
  acxi_dev_poll_resume(dev);
  return ACX_OK;
}

/* Stops the standby: asks it to leave, gives it grace_ns, then SIGKILL; reaps it. */
void acxi_dev_standby_discard(acx_device_t *dev, int64_t grace_ns, const char *why) {
  if (!dev->sb_ctrl) return;
  acxi_dev_standby_ask_leave(dev);
  acxi_shm_t shm;
  pid_t pid;
  int sock;
  int detached = standby_detach(dev, &shm, &pid, &sock) == ACX_OK;
  ACX_INFO(DEVICE, "stopping the standby %s executor pid %d: %s", dev->kind, (int)pid, why);
  if (pid > 0) acxi_dev_reap_pid(pid, detached ? grace_ns : 0);
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
void acxi_dev_standby_lost(acx_device_t *dev, const char *reason) {
  ACX_WARN(DEVICE, "standby %s executor pid %d lost: %s", dev->kind,
           (int)atomic_load_explicit(&dev->sb_pid, memory_order_relaxed), reason);
  acxi_dev_standby_discard(dev, 0, reason);
  if (!standby_loss_allowed(dev, acxi_now_ns())) {
    dev->sb_gave_up = 1;
    ACX_WARN(DEVICE, "%s device: %d standby executors lost within %" PRId64 " ms: no more standbys; a restart "
             "spawns its executor on demand", dev->kind, STANDBY_MAX_LOSSES, dev->restart_window_ns / 1000000);
    return;
  }
  acxi_dev_standby_spawn(dev);
}

/* 1 when the standby can be promoted: alive, engine made, no error, heartbeat fresh. One still
 * initialising is waited for until its start deadline (it is ahead of a fresh spawn anyway). */
static int standby_usable(acx_device_t *dev, char *why, size_t cap) {
  acxi_ctrl_t *c = dev->sb_ctrl;
  pid_t pid = atomic_load_explicit(&dev->sb_pid, memory_order_relaxed);
  for (;;) {
    int64_t deadline = after_stall(dev, dev->sb_spawned_ns) + dev->exec_timeout_ns;
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
      int64_t age = now - after_stall(dev, atomic_load_explicit(&c->heartbeat_ns, memory_order_relaxed));
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
    acxi_dev_sleep_ns(50000);
  }
}

/* Makes the standby generation `gen`: it becomes the device's executor (control block, pid,
 * socket), is told its generation, and gets the host regions; RUNNING on success. Returns
 * ACX_ERR_NO_DEVICE when there was no usable standby (nothing changed but its removal). */
acx_status_t acxi_dev_standby_promote(acx_device_t *dev, uint64_t gen) {
  if (!dev->sb_ctrl) return ACX_ERR_NO_DEVICE;
  char why[160];
  if (!standby_usable(dev, why, sizeof why)) {
    ACX_WARN(DEVICE, "the standby %s executor cannot take generation %" PRIu64 " (%s): spawning one", dev->kind, gen,
             why);
    acxi_dev_standby_discard(dev, 0, why);
    return ACX_ERR_NO_DEVICE;
  }
  acxi_shm_t shm;
  pid_t pid;
  int sock;
  if (standby_detach(dev, &shm, &pid, &sock) != ACX_OK) return ACX_ERR_NO_DEVICE; /* logged; spawn instead */
  acxi_ctrl_t *c = acxi_ctrl(&shm);
  c->generation = gen; /* published by the release store of PROMOTE */
  if (acxi_dev_ctrl_swap(dev, &shm, 1) != ACX_OK) { /* shm destroyed: the standby has no future */
    kill(pid, SIGKILL);
    acxi_dev_reap_pid(pid, 0);
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
  return acxi_dev_finish_start(dev, gen, acxi_now_ns() + dev->heartbeat_ns);
}
