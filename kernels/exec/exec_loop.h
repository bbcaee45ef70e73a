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

#include "kernels/exec/engine.h"
#include "runtime/proto/exec_api.h"
#include "runtime/proto/shm.h"


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

#endif
