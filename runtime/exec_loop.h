/* The executor loop: pops commands from the command ring, hands them to an engine, posts
 * completions to the reply ring, stamps the heartbeat. The same code runs in the acx-executor
 * process (process transport) and on a thread of the rank (inline transport). */
#ifndef ACXI_EXEC_LOOP_H
#define ACXI_EXEC_LOOP_H

#include <stdatomic.h>
#include <stdint.h>

#include "runtime/engine.h"
#include "runtime/shm.h"

typedef struct acxi_exec_loop_params {
  acxi_ctrl_view_t view;            /* the control block (heartbeat, state, sticky error), both rings */
  const acxi_engine_ops_t *ops;     /* the device kind's engine */
  acxi_engine_params_t engine;      /* generation must equal view.ctrl->generation */
  int sock_fd;                      /* process mode: host-region fds arrive here; -1 inline */
  int parent_pid;                   /* process mode: leave when the rank is gone; 0 inline */
  int64_t heartbeat_period_ns;      /* stamp the heartbeat at least this often */
  int64_t spin_ns;                  /* keep busy-polling this long after the last activity */
  _Atomic int *stop;                /* optional: set (then acxi_ring_wake the command ring) to leave */
  /* Process mode: a hot standby. The loop creates the engine, sets ACXI_EXEC_STANDBY and sleeps on
   * ctrl->promote (stamping the heartbeat) until the rank promotes it (ctrl->generation is then
   * its generation; engine.generation stays 0) or tells it to leave. */
  int standby;
  /* Inline mode, optional: completions go straight to direct(direct_sink, cpl) (the executor
   * thread or a CUDA callback thread; must be thread-safe) instead of through the reply ring. */
  acxi_complete_fn direct;
  void *direct_sink;
} acxi_exec_loop_params_t;

typedef enum acxi_loop_exit {
  ACXI_LOOP_SHUTDOWN = 0,     /* SHUTDOWN served; queued work finished */
  ACXI_LOOP_POISONED = 1,     /* the engine reported a sticky error (written to ctrl) */
  ACXI_LOOP_START_FAILED = 2, /* the engine could not be created (written to ctrl) */
  ACXI_LOOP_ORPHANED = 3,     /* the rank process is gone */
  ACXI_LOOP_STOPPED = 4       /* *stop was set, or a standby was told to leave */
} acxi_loop_exit_t;

/* Runs until one of acxi_loop_exit_t happens; returns which. Sets ctrl->state READY once the
 * engine exists (a standby: STANDBY, then READY once promoted) and STOPPED or FAILED when it
 * leaves. */
acxi_loop_exit_t acxi_exec_loop_run(const acxi_exec_loop_params_t *p);

/* How long the executor and the reply poller busy-poll after their last activity: ACX_EXEC_SPIN_NS,
 * or, when it is negative (the default, "auto"), 5 ms for the cuda kind and 100 us for the host
 * kind. A GPU rank owns the cores local to its GPU, and a doorbell wake-up costs ~20 us: measured
 * on the 2xH200 host, back-to-back 8-byte all-reduces took 26-36 us with a 100 us window (1 ms:
 * still 32 us at 8 B) and 8.5 us with 5 ms (raw NCCL: 9-10 us). The host kind runs on small
 * development and CI machines where spinning threads steal the cores the work needs. */
int64_t acxi_exec_spin_ns(const char *kind);

/* Parses an ACX_FAULT_INJECT schedule: "" (none), "cmd:N" (the Nth command of every
 * incarnation), "once:N" (the Nth command of generation 1 only). *nth = 0 when nothing is to be
 * injected in `generation`. ACX_ERR_BAD_PARAM (logged) for anything else. */
acx_status_t acxi_fault_schedule(const char *spec, uint64_t generation, uint64_t *nth);
#endif
