/* The executor loop: pops commands from the command ring, hands them to an engine, posts
 * completions to the reply ring, stamps its progress. The same code runs in the acx-executor
 * process (process transport) and on a thread of the rank (inline transport). The process's
 * heartbeat comes from a thread of its own (acxi_heartbeat_start), so that a loop blocked in a long
 * call still shows a live process. */
#ifndef ACXI_EXEC_LOOP_H
#define ACXI_EXEC_LOOP_H

#include <pthread.h>
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
  int64_t heartbeat_period_ns;      /* stamp progress_ns at least this often while the loop runs */
  int64_t spin_ns;                  /* keep busy-polling this long after the last activity */
  _Atomic int *stop;                /* optional: set (then acxi_ring_wake the command ring) to leave */
  /* Process mode: a hot standby. The loop creates the engine, sets ACXI_EXEC_STANDBY and sleeps on
   * ctrl->promote (stamping its progress) until the rank promotes it (ctrl->generation is then
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

/* The heartbeat of an executor process: a thread that stamps ctrl->heartbeat_ns every period_ns
 * whatever the loop does (a heartbeat the rank sees proves the process alive and scheduled; a
 * SIGSTOPped or dead one stops it). When parent_pid (> 0) is no longer the parent it lets the loop
 * leave on its own (it checks too) for `orphan_grace_ns`, then ends the process (_exit(5)): the
 * loop may be blocked in a call that never returns, and an orphan must not outlive its rank. */
typedef struct acxi_heartbeat {
  acxi_ctrl_t *ctrl;
  int64_t period_ns, orphan_grace_ns;
  int parent_pid;
  pthread_t th;
  pthread_mutex_t lock;
  pthread_cond_t cond; /* CLOCK_MONOTONIC; signalled by acxi_heartbeat_stop */
  int stop, live;
} acxi_heartbeat_t;

/* Stamps once, then starts the thread. ACX_ERR_SYSTEM when it cannot be created (logged). */
acx_status_t acxi_heartbeat_start(acxi_heartbeat_t *hb, acxi_ctrl_t *ctrl, int64_t period_ns, int parent_pid,
                                  int64_t orphan_grace_ns);
/* Stops and joins the thread (it leaves within microseconds: it only sleeps on its condition). */
void acxi_heartbeat_stop(acxi_heartbeat_t *hb);

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
