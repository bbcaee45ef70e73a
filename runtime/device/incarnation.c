/* Executor incarnations, rank side: installing and retiring control blocks, starting an
 * executor through the device's transport (transport.c) and waiting for READY, spawning
 * acx-executor, and reaping what is left of a lost or closed executor. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/base/bind.h"
#include "runtime/base/clock.h"
#include "runtime/device/buffer.h"
#include "runtime/base/log.h"
#include "runtime/device/device_impl.h"

extern char **environ;

void acxi_dev_describe_wait_status(int ws, char *buf, size_t cap) {
  if (WIFEXITED(ws))
    snprintf(buf, cap, "exited with status %d", WEXITSTATUS(ws));
  else if (WIFSIGNALED(ws))
    snprintf(buf, cap, "killed by signal %d (%s)", WTERMSIG(ws), strsignal(WTERMSIG(ws)));
  else
    snprintf(buf, cap, "wait status 0x%x", ws);
}

/* Installs the next control block (or none) while the poller is parked, and unmaps the old one
 * when nobody can touch it any more: the poller is parked and `submitters_gone` (the caller's
 * acxi_dev_wait_submitters_gone succeeded). Otherwise the old mapping is left in place (logged): a stuck
 * thread may still write into it. ACX_ERR_TIMEOUT when the poller did not park: nothing changed
 * but `next`, which is destroyed. */
acx_status_t acxi_dev_ctrl_swap(acx_device_t *dev, acxi_shm_t *next, int submitters_gone) {
  if (acxi_dev_poll_pause(dev, next ? "the new executor's control block is not installed"
                                    : "the old control block stays mapped") != ACX_OK) {
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
  acxi_dev_poll_resume(dev);
  if (submitters_gone || !old.addr) {
    acxi_shm_destroy(&old);
  } else {
    ACX_WARN(DEVICE, "%s device: the old control block stays mapped (%zu bytes): a submitting thread may still "
             "write into it", dev->kind, old.bytes);
    if (old.fd >= 0) close(old.fd);
  }
  return ACX_OK;
}

/* Spawns acx-executor with the control block on fd 3 and the socket on fd 4: generation `gen`,
 * or a standby (gen 0) that creates its engine and waits to be promoted. */
acx_status_t acxi_dev_spawn_executor(acx_device_t *dev, uint64_t gen, int shm_fd, int sock_fd, pid_t *out_pid) {
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
int acxi_dev_reap_pid(pid_t pid, int64_t grace_ns) {
  int ws = 0;
  int64_t deadline = acxi_now_ns() + grace_ns;
  pid_t r;
  while ((r = waitpid(pid, &ws, WNOHANG)) == 0 && acxi_now_ns() < deadline) acxi_dev_sleep_ns(1000000);
  if (r == 0) {
    kill(pid, SIGKILL);
    deadline = acxi_now_ns() + 10000000000LL;
    while ((r = waitpid(pid, &ws, WNOHANG)) == 0 && acxi_now_ns() < deadline) acxi_dev_sleep_ns(200000);
  }
  if (r != pid) {
    ACX_WARN(DEVICE, "executor pid %d did not die after SIGKILL within 10 s; left behind", (int)pid);
    return -1;
  }
  char how[96];
  acxi_dev_describe_wait_status(ws, how, sizeof how);
  ACX_INFO(DEVICE, "executor pid %d reaped: %s", (int)pid, how);
  return ws;
}

/* Stops (kills when still running) and reaps the current executor; records its wait status (-1:
 * none, an inline executor has none). */
void acxi_dev_reap_executor(acx_device_t *dev, int64_t grace_ns) {
  dev->loss_exit_status = -1;
  dev->transport->stop(dev, grace_ns);
}

/* Brings up generation `gen`: control block, executor, READY, host regions, RUNNING. */
acx_status_t acxi_dev_start_incarnation(acx_device_t *dev, uint64_t gen) {
  acxi_shm_t shm;
  ACXCHECK(acxi_ctrl_create(dev->slots, gen, &shm));
  ACXCHECK(acxi_dev_ctrl_swap(dev, &shm, 1)); /* RECOVERING or STARTING: no submitter (waited for by our caller) */
  /* relaxed: no submitter is inside (state is STARTING or RECOVERING). */
  atomic_store_explicit(&dev->generation, gen, memory_order_relaxed);
  ACXCHECK(dev->transport->start(dev, gen));
  return acxi_dev_finish_start(dev, gen, acxi_deadline(dev->exec_timeout_ns));
}

/* Waits until the executor of generation `gen` (dev->cv, dev->pid) is READY, FAILED or dead,
 * or the deadline passes; then registers the host regions with it and goes RUNNING. */
acx_status_t acxi_dev_finish_start(acx_device_t *dev, uint64_t gen, int64_t deadline) {
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
      res = acxi_dev_executor_status(dev, res);
      /* Bounded: the executor writes the message and need not terminate it. */
      ACX_WARN(DEVICE, "%s executor generation %" PRIu64 " failed to start: %.*s", dev->kind, gen,
               (int)sizeof ctrl->sticky_msg, ctrl->sticky_msg[0] ? ctrl->sticky_msg : "no reason given");
      return res;
    }
    siginfo_t si;
    if (dev->transport->exited(dev, &si)) {
      ACX_WARN(DEVICE, "%s executor generation %" PRIu64 " (%s) died before it was ready (code %d, status %d)",
               dev->kind, gen, dev->exe_path, si.si_code, si.si_status);
      return ACX_ERR_DEVICE_LOST;
    }
    if (acxi_now_ns() >= deadline) {
      ACX_WARN(DEVICE, "%s executor generation %" PRIu64 " not ready before its deadline", dev->kind, gen);
      return ACX_ERR_TIMEOUT;
    }
    if (atomic_load_explicit(&dev->close_requested, memory_order_relaxed)) return ACX_ERR_CANCELLED; /* as in recover */
    acxi_dev_sleep_ns(50000);
  }
  acxi_dev_set_state(dev, ACXI_DEV_STARTING); /* the poller polls; internal submissions only */
  res = acxi_host_mem_register_all(dev);
  if (res != ACX_OK) {
    ACX_WARN(DEVICE, "re-registering host memory with executor generation %" PRIu64 " failed: %s", gen,
             acx_status_name(res));
    return res;
  }
  acxi_dev_set_state(dev, ACXI_DEV_RUNNING);
  return ACX_OK;
}

/* Tears down a failed or lost incarnation: nothing is accepted, the poller is parked. */
void acxi_dev_end_incarnation(acx_device_t *dev, int64_t grace_ns) {
  int s = acxi_dev_load_state(dev);
  if (s == ACXI_DEV_STARTING || s == ACXI_DEV_RUNNING) atomic_store(&dev->state, ACXI_DEV_RECOVERING);
  int gone = acxi_dev_wait_submitters_gone(dev, "the old control block stays mapped") == ACX_OK;
  acxi_dev_reap_executor(dev, grace_ns);
  acxi_dev_pend_fail_all(dev, ACX_ERR_DEVICE_LOST);
  acxi_dev_mark_failed(dev, atomic_load_explicit(&dev->generation, memory_order_relaxed));
  acxi_dev_ctrl_swap(dev, NULL, gone);
}

/* As acxi_dev_end_incarnation, but the executor is only sent SIGKILL: the caller reaps the returned pid
 * (0: none) once a successor serves. */
pid_t acxi_dev_end_incarnation_kill(acx_device_t *dev) {
  int s = acxi_dev_load_state(dev);
  if (s == ACXI_DEV_STARTING || s == ACXI_DEV_RUNNING) atomic_store(&dev->state, ACXI_DEV_RECOVERING);
  int gone = acxi_dev_wait_submitters_gone(dev, "the old control block stays mapped") == ACX_OK;
  pid_t pid = atomic_load_explicit(&dev->pid, memory_order_relaxed);
  if (pid > 0) kill(pid, SIGKILL);
  atomic_store_explicit(&dev->pid, 0, memory_order_relaxed);
  if (dev->sock >= 0) close(dev->sock);
  dev->sock = -1;
  acxi_dev_pend_fail_all(dev, ACX_ERR_DEVICE_LOST);
  acxi_dev_mark_failed(dev, atomic_load_explicit(&dev->generation, memory_order_relaxed));
  acxi_dev_ctrl_swap(dev, NULL, gone);
  return pid;
}
