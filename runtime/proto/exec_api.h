/* The seam between the rank library (libacx) and the executor library (libacx_exec): what both
 * sides agree on to run an executor loop. The acx-executor process links libacx_exec; the inline
 * transport runs the same loop on a thread of the rank, reaching libacx_exec through the entry
 * table below (dlopen'ed on first use, so that a rank that never runs an inline device never
 * loads CUDA). Engines stay opaque here: only kernels/ knows their layout. */
#ifndef ACXI_EXEC_API_H
#define ACXI_EXEC_API_H

#include <stdatomic.h>
#include <stdint.h>

#include "acx/status.h"
#include "runtime/proto/cmd.h"
#include "runtime/proto/limits.h"
#include "runtime/proto/shm.h"

typedef struct acxi_engine acxi_engine_t;
typedef struct acxi_engine_ops acxi_engine_ops_t; /* kernels/exec/engine.h */

/* Posts one completion. Thread-safe: the CUDA engine may call it from a host-function callback
 * thread. Called exactly once per command, unless the command has ACXI_CMD_FLAG_NO_REPLY and
 * succeeded. */
typedef void (*acxi_complete_fn)(void *sink, const acxi_cpl_t *cpl);

typedef struct acxi_engine_params {
  int cuda_ordinal;       /* CUDA device ordinal inside the executor (cuda kind) */
  char pci_bus_id[ACXI_PCI_BUS_ID_LEN]; /* preferred over the ordinal when non-empty */
  int streams;            /* stream pool size, 1 to ACXI_MAX_STREAMS */
  uint64_t generation;    /* this incarnation's generation */
  int inline_mode;        /* 1: running on a thread of the rank process */
  const char *completion; /* "auto", "event" or "hostfn" */
  const char *fault_inject; /* ACX_FAULT_INJECT schedule, or "" */
} acxi_engine_params_t;

typedef struct acxi_exec_loop_params {
  acxi_ctrl_view_t view;            /* the control block (heartbeat, state, sticky error), both rings */
  const acxi_engine_ops_t *ops;     /* the device kind's engine */
  acxi_engine_params_t engine;      /* generation must equal view.ctrl->generation */
  int sock_fd;                      /* process mode: host-region fds arrive here; -1 inline */
  int parent_pid;                   /* process mode: leave when the rank is gone; 0 inline */
  int64_t heartbeat_period_ns;      /* stamp progress_ns at least this often while the loop runs */
  int64_t spin_ns;                  /* keep busy-polling this long after the last activity */
  int64_t nap_ns;                   /* work in flight, no command or completion for this long: sleep on
                                       the doorbell this long between polls (0: busy-poll; ACX_EXEC_NAP_NS) */
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

/* The executor library's entry for the inline transport: libacx_exec exports one function,
 * ACXI_EXEC_ENTRY_SYMBOL, returning this table for ACXI_EXEC_ABI (NULL for another ABI: a
 * libacx_exec from another build). */
#define ACXI_EXEC_ABI 1u
#define ACXI_EXEC_ENTRY_SYMBOL "acx_exec_entry"
typedef struct acxi_exec_entry {
  uint32_t abi;
  /* The engine of a device kind, NULL when this build has none. */
  const acxi_engine_ops_t *(*engine_find)(const char *kind);
  acxi_loop_exit_t (*loop_run)(const acxi_exec_loop_params_t *p);
  /* The rank number in the executor library's log lines (it has its own copy of the log). */
  void (*log_set_rank)(int rank);
} acxi_exec_entry_t;
typedef const acxi_exec_entry_t *(*acxi_exec_entry_fn)(uint32_t abi);

/* How long the executor and the reply poller busy-poll after their last activity: ACX_EXEC_SPIN_NS,
 * or, when it is negative (the default, "auto"), 5 ms for the cuda kind and 100 us for the host
 * kind. A GPU rank owns the cores local to its GPU, and a doorbell wake-up costs ~20 us: measured
 * on the 2xH200 host, back-to-back 8-byte all-reduces took 26-36 us with a 100 us window (1 ms:
 * still 32 us at 8 B) and 8.5 us with 5 ms (raw NCCL: 9-10 us). The host kind runs on small
 * development and CI machines where spinning threads steal the cores the work needs. */
int64_t acxi_exec_spin_ns(const char *kind);

/* How long the executor loop sleeps on its command doorbell between polls once the engine has had
 * work in flight that long with no command and no completion: ACX_EXEC_NAP_NS, 0 (the default)
 * busy-polls. A command wakes it at once; a completion is seen up to one nap late. For nodes with
 * more busy threads than cores (ranks sharing GPUs, NCCL's proxy and socket threads beside the
 * executors). The rank checks the range (0 to ACXI_EXEC_NAP_MAX_NS); the executor reads a bad
 * value as 0. */
#define ACXI_EXEC_NAP_MAX_NS 10000000
int64_t acxi_exec_nap_ns(void);

/* Parses an ACX_FAULT_INJECT schedule: "" (none), "cmd:N" (the Nth command of every
 * incarnation), "once:N" (the Nth command of generation 1 only). *nth = 0 when nothing is to be
 * injected in `generation`. ACX_ERR_BAD_PARAM (logged) for anything else. */
acx_status_t acxi_fault_schedule(const char *spec, uint64_t generation, uint64_t *nth);
#endif
