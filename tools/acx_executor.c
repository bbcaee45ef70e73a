/* acx-executor: one device executor incarnation. The rank's DeviceActor spawns it (posix_spawn)
 * with the control block and a unix socket as inherited fds; it maps the block, creates the
 * engine of the asked device kind and runs the shared executor loop until SHUTDOWN or death.
 * A heartbeat thread of its own stamps the control block all along (exec_loop.h).
 * Exit status: 0 shutdown, 2 bad arguments, 3 start failed, 4 sticky error, 5 orphaned. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/base/bind.h"
#include "kernels/exec/exec_loop.h"
#include "runtime/base/log.h"
#include "runtime/base/param.h"

static void usage(void) {
  fprintf(stderr, "usage: acx-executor --kind host|cuda (--generation G | --standby 1) --shm-fd FD --sock-fd FD\n"
                  "                    [--ordinal N] [--pci-bus-id ID] [--streams N] [--parent-pid PID]\n"
                  "                    [--heartbeat-ms MS] [--completion auto|event|hostfn] [--fault-inject SPEC]\n"
                  "                    [--cpuset LIST]\n"
                  "--standby 1: create the engine, then wait idle until the rank promotes this executor.\n"
                  "--cpuset LIST: bind the process (every thread it and CUDA make) to these cores first.\n"
                  "Started by libacx; not meant to be run by hand.\n");
}

static int parse_i64(const char *opt, const char *s, int64_t lo, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo) {
    fprintf(stderr, "acx-executor: %s '%s' is not an integer >= %lld\n", opt, s, (long long)lo);
    return -1;
  }
  *out = v;
  return 0;
}

int main(int argc, char **argv) {
  const char *kind = NULL, *pci = "", *completion = "auto", *fault = "", *cpuset = NULL;
  int64_t generation = -1, shm_fd = -1, sock_fd = -1, ordinal = 0, streams = 1, parent = 0, hb_ms = 0, standby = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage();
      return 0;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "acx-executor: %s needs a value\n", a);
      usage();
      return 2;
    }
    const char *v = argv[++i];
    int bad = 0;
    if (!strcmp(a, "--kind")) kind = v;
    else if (!strcmp(a, "--pci-bus-id")) pci = v;
    else if (!strcmp(a, "--completion")) completion = v;
    else if (!strcmp(a, "--fault-inject")) fault = v;
    else if (!strcmp(a, "--cpuset")) cpuset = v;
    else if (!strcmp(a, "--generation")) bad = parse_i64(a, v, 1, &generation);
    else if (!strcmp(a, "--shm-fd")) bad = parse_i64(a, v, 0, &shm_fd);
    else if (!strcmp(a, "--sock-fd")) bad = parse_i64(a, v, 0, &sock_fd);
    else if (!strcmp(a, "--ordinal")) bad = parse_i64(a, v, 0, &ordinal);
    else if (!strcmp(a, "--streams")) bad = parse_i64(a, v, 1, &streams);
    else if (!strcmp(a, "--parent-pid")) bad = parse_i64(a, v, 0, &parent);
    else if (!strcmp(a, "--heartbeat-ms")) bad = parse_i64(a, v, 1, &hb_ms);
    else if (!strcmp(a, "--standby")) bad = parse_i64(a, v, 0, &standby);
    else {
      fprintf(stderr, "acx-executor: unknown argument '%s'\n", a);
      bad = 1;
    }
    if (bad) {
      usage();
      return 2;
    }
  }
  if (!kind || (generation < 1) == !standby || standby > 1 || shm_fd < 0 || sock_fd < 0 ||
      streams > ACXI_MAX_STREAMS || strlen(pci) >= ACXI_PCI_BUS_ID_LEN) {
    fprintf(stderr, "acx-executor: --kind, --shm-fd, --sock-fd and one of --generation or --standby 1 are "
                    "required (streams <= %d, PCI bus id < %d chars)\n", ACXI_MAX_STREAMS, ACXI_PCI_BUS_ID_LEN);
    usage();
    return 2;
  }
  acxi_cpuset_t cores = ACXI_CPUSET_NONE;
  if (acxi_cpuset_parse(cpuset, &cores) != ACX_OK) {
    fprintf(stderr, "acx-executor: --cpuset '%s' is not a non-empty cpuset list\n", cpuset);
    usage();
    return 2;
  }
  const acxi_engine_ops_t *ops = acxi_engine_find(kind);
  acxi_shm_t shm;
  if (acxi_ctrl_attach((int)shm_fd, &shm) != ACX_OK) {
    fprintf(stderr, "acx-executor: fd %" PRId64 " is not a usable control block\n", shm_fd);
    acxi_cpuset_fini(&cores);
    return 2;
  }
  close((int)shm_fd); /* acxi_ctrl_attach keeps its own descriptor */
  acxi_ctrl_t *ctrl = acxi_ctrl(&shm);
  acxi_ctrl_view_t view;
  if (acxi_ctrl_view_init(&view, shm.addr, ctrl->slots) != ACX_OK) { /* checked by attach: cannot fail */
    acxi_shm_destroy(&shm);
    acxi_cpuset_fini(&cores);
    return 2;
  }
  atomic_store_explicit(&ctrl->executor_pid, (int32_t)getpid(), memory_order_relaxed);
  /* Bound while this is the process's only thread: everything made later (the loop's helpers,
   * CUDA's and NCCL's threads) inherits the mask. */
  int bind_rc = cores.set ? sched_setaffinity(0, cores.setsize, cores.set) : 0;
  int bind_errno = errno;
  if (cores.set && !bind_rc) ACX_INFO(EXEC, "executor pid %d bound to cpuset %s", (int)getpid(), cores.list);
  if (bind_rc)
    acxi_ctrl_set_sticky(&view, ACX_ERR_INVALID_ARG, 0, "executor cpuset %s refused: %s", cores.list,
                         strerror(bind_errno));
  acxi_cpuset_fini(&cores);
  if (bind_rc) return 2;
  if (!standby && ctrl->generation != (uint64_t)generation) {
    acxi_ctrl_set_sticky(&view, ACX_ERR_INVALID_ARG, 0, "executor started for generation %" PRId64
                         ", control block is for %" PRIu64, generation, ctrl->generation);
    return 2;
  }
  if (!ops) {
    acxi_ctrl_set_sticky(&view, ACX_ERR_NO_DEVICE, 0, "this acx-executor has no '%s' device kind", kind);
    return 3;
  }
  acxi_exec_loop_params_t p = {
      .view = view,
      .ops = ops,
      .engine = {.cuda_ordinal = (int)ordinal, .streams = (int)streams,
                 .generation = standby ? 0 : (uint64_t)generation, .inline_mode = 0, .completion = completion,
                 .fault_inject = fault},
      .sock_fd = (int)sock_fd,
      .parent_pid = (int)parent,
      .heartbeat_period_ns = (hb_ms ? hb_ms : acxi_param_int("ACX_HEARTBEAT_MS")) * 1000000 / 4,
      .spin_ns = acxi_exec_spin_ns(kind),
      .nap_ns = acxi_exec_nap_ns(),
      .standby = (int)standby,
  };
  snprintf(p.engine.pci_bus_id, sizeof p.engine.pci_bus_id, "%s", pci);
  if (p.heartbeat_period_ns < 1000000) p.heartbeat_period_ns = 1000000;
  /* Beats from here on, also while the engine is made, while a standby waits and while the loop is
   * blocked in a long call: the rank then tells a busy executor from a dead or stopped one. */
  acxi_heartbeat_t hb;
  int64_t limit_ns = (hb_ms ? hb_ms : acxi_param_int("ACX_HEARTBEAT_MS")) * 1000000;
  if (acxi_heartbeat_start(&hb, ctrl, p.heartbeat_period_ns, (int)parent, limit_ns) != ACX_OK) {
    acxi_ctrl_set_sticky(&view, ACX_ERR_SYSTEM, 0, "the executor's heartbeat thread could not start");
    return 3;
  }
  acxi_loop_exit_t why = acxi_exec_loop_run(&p);
  acxi_heartbeat_stop(&hb);
  close((int)sock_fd);
  acxi_shm_destroy(&shm);
  switch (why) {
  case ACXI_LOOP_SHUTDOWN:
  case ACXI_LOOP_STOPPED:
    return 0;
  case ACXI_LOOP_START_FAILED:
    return 3;
  case ACXI_LOOP_POISONED:
    return 4;
  default:
    return 5;
  }
}
