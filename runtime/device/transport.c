/* The executor transports, rank side, behind one table each (acxi_dev_transport_t): `process`, an
 * acx-executor process of its own (found at open, spawned, watched for its exit, killed and
 * reaped, replaced after a loss), and `inline`, a thread of the rank running the executor
 * library's loop, which completes the futures itself. acx_device_open picks one (dev->transport). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "acx_build_config.h"
#include "runtime/base/bind.h"
#include "runtime/base/clock.h"
#include "runtime/base/log.h"
#include "runtime/base/param.h"
#include "runtime/device/device_impl.h"

/* ---- process: acx-executor ---- */

/* ACX_EXECUTOR_PATH, else beside libacx, else the install prefix. */
static acx_status_t process_prepare(acx_device_t *dev) {
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

/* Spawns generation `gen` with the control block and our socket's other end. */
static acx_status_t process_start(acx_device_t *dev, uint64_t gen) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    ACX_WARN(DEVICE, "socketpair failed: %s", strerror(errno));
    return ACX_ERR_SYSTEM;
  }
  pid_t pid = 0;
  acx_status_t res = acxi_dev_spawn_executor(dev, gen, dev->shm.fd, sv[1], &pid);
  close(sv[1]);
  if (res != ACX_OK) {
    close(sv[0]);
    return res;
  }
  atomic_store_explicit(&dev->pid, pid, memory_order_relaxed); /* the poller reads it once RUNNING */
  dev->sock = sv[0];
  return ACX_OK;
}

static void process_stop(acx_device_t *dev, int64_t grace_ns) {
  if (dev->pid <= 0) return;
  dev->loss_exit_status = acxi_dev_reap_pid(dev->pid, grace_ns);
  dev->pid = 0;
  if (dev->sock >= 0) close(dev->sock);
  dev->sock = -1;
}

/* Looks without reaping (WNOWAIT): the stop reaps it, and records its wait status. */
static int process_exited(acx_device_t *dev, siginfo_t *si) {
  pid_t pid = atomic_load_explicit(&dev->pid, memory_order_relaxed); /* set before RUNNING */
  memset(si, 0, sizeof *si);
  return waitid(P_PID, (id_t)pid, si, WEXITED | WNOHANG | WNOWAIT) == 0 && si->si_pid == pid;
}

static pid_t process_pid(const acx_device_t *dev) {
  return atomic_load_explicit(&dev->pid, memory_order_relaxed);
}

const acxi_dev_transport_t acxi_dev_transport_process = {
    .name = "process",
    .in_rank = 0,
    .restartable = 1,
    .ring_replies = 1,
    .pid_label = "pid",
    .prepare = process_prepare,
    .start = process_start,
    .stop = process_stop,
    .exited = process_exited,
    .pid = process_pid,
};

/* ---- inline: a thread of the rank ---- */

/* Loads the executor library and checks that it has this device's kind. */
static acx_status_t inline_prepare(acx_device_t *dev) {
  ACXCHECK(acxi_exec_lib(&dev->exec));
  if (!dev->exec->engine_find(dev->kind)) {
    ACX_WARN(DEVICE, "device kind '%s' is not in the executor library loaded for the inline transport", dev->kind);
    return ACX_ERR_NO_DEVICE;
  }
  return ACX_OK;
}

static void *inline_main(void *arg) {
  acx_device_t *dev = arg;
  dev->exec->log_set_rank(acxi_log_rank()); /* the executor library logs through its own copy */
  dev->exec->loop_run(&dev->loop);
  return NULL;
}

static acx_status_t inline_start(acx_device_t *dev, uint64_t gen) {
  atomic_store_explicit(&dev->exec_stop, 0, memory_order_relaxed);
  dev->loop = (acxi_exec_loop_params_t){
      .view = dev->cv,
      .ops = dev->exec->engine_find(dev->kind),
      .engine = {.cuda_ordinal = dev->cuda_ordinal, .streams = dev->streams, .generation = gen,
                 .inline_mode = 1, .completion = dev->completion, .fault_inject = dev->fault_inject},
      .sock_fd = -1,
      .heartbeat_period_ns = dev->heartbeat_ns / 4,
      .spin_ns = dev->spin_ns,
      .nap_ns = acxi_exec_nap_ns(),
      .stop = &dev->exec_stop,
      .direct = acxi_dev_complete_direct, /* no reply ring, no poller hop: the future completes here */
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
  return ACX_OK;
}

/* Asks the loop to leave and joins the thread (grace_ns + 5 s); a thread cannot be killed, so
 * one that stays is detached (logged). No wait status: loss_exit_status stays -1. */
static void inline_stop(acx_device_t *dev, int64_t grace_ns) {
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
}

/* The thread leaves only when stopped: its faults arrive as the control block's sticky error. */
static int inline_exited(acx_device_t *dev, siginfo_t *si) {
  (void)dev;
  (void)si;
  return 0;
}

static pid_t inline_pid(const acx_device_t *dev) {
  (void)dev;
  return getpid();
}

const acxi_dev_transport_t acxi_dev_transport_inline = {
    .name = "inline",
    .in_rank = 1,
    .restartable = 0,
    .ring_replies = 0,
    .pid_label = "in rank pid",
    .prepare = inline_prepare,
    .start = inline_start,
    .stop = inline_stop,
    .exited = inline_exited,
    .pid = inline_pid,
};
