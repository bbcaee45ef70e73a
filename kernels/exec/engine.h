/* The engine interface: what executes commands for one device kind. kernels/host and
 * kernels/cuda implement it and register the implementations at load time; the executor loop
 * (kernels/exec, run by the acx-executor process and by the inline thread alike) drives it. The
 * rank never sees an engine: it reaches the executor library through runtime/proto/exec_api.h. */
#ifndef ACXI_ENGINE_H
#define ACXI_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "acx/status.h"
#include "runtime/proto/cmd.h"
#include "runtime/proto/exec_api.h"
#include "runtime/proto/limits.h"


struct acxi_engine_ops {
  const char *kind; /* "host", "cuda" */
  acx_status_t (*create)(const acxi_engine_params_t *params, acxi_complete_fn complete, void *sink,
                         acxi_engine_t **engine);
  /* Waits for queued work, releases everything. */
  void (*destroy)(acxi_engine_t *engine);
  /* Executes or enqueues cmd; validation failures complete at once with their status. */
  void (*submit)(acxi_engine_t *engine, const acxi_cmd_t *cmd);
  /* Polls for finished asynchronous work and posts its completions; returns how many. */
  int (*progress)(acxi_engine_t *engine);
  /* Number of commands submitted whose completion is not posted yet (the loop busy-polls while
   * this is non-zero). */
  uint64_t (*in_flight)(acxi_engine_t *engine);
  /* A host region mapped in the executor's address space (shared with the rank). */
  acx_status_t (*host_region_add)(acxi_engine_t *engine, uint64_t region_id, void *addr, size_t bytes);
  acx_status_t (*host_region_remove)(acxi_engine_t *engine, uint64_t region_id);
  /* Optional: non-zero while a removed region may still be accessed by work queued before its
   * removal; the loop keeps its mapping until then and asks again. NULL: never. */
  int (*host_region_busy)(acxi_engine_t *engine, uint64_t region_id);
  /* Non-zero once the device context is poisoned by a sticky error: the loop reports it and the
   * executor exits (process mode) or the device is declared fatal (inline mode). */
  int (*poisoned)(acxi_engine_t *engine);
  /* A standby engine is created before it knows its generation; promotion tells it, before any
   * command runs, so params->generation (seen by extensions through api->params) is true. */
  void (*set_generation)(acxi_engine_t *engine, uint64_t generation);
};

/* Extensions: handlers for ops in [op_first, op_last] >= ACXI_OP_EXT_BASE, registered at load
 * time by collectives/ (NCCL) and the library actors (cuBLAS, ...). They run on the executor
 * thread and reach the engine's buffers and streams through acxi_engine_api_t. Variable-size
 * inputs (an ncclUniqueId, source text) travel in a host region named by the command. */
typedef struct acxi_engine_api {
  /* Device (or host-kind) address and size of buffer `id`; ACX_ERR_UNKNOWN_BUFFER if none. */
  acx_status_t (*buffer)(acxi_engine_t *e, uint64_t id, void **ptr, uint64_t *bytes);
  /* Address of host region `id` in the executor's address space. */
  acx_status_t (*host_region)(acxi_engine_t *e, uint64_t id, void **ptr, uint64_t *bytes);
  /* The engine's stream `idx` (a cudaStream_t; NULL for the host kind); NULL if out of range. */
  void *(*stream)(acxi_engine_t *e, uint32_t idx);
  /* Orders `stream` after the last writer of buffer `id` (device-side wait), and records this
   * stream as the buffer's last writer when `writes` is set. */
  void (*order_access)(acxi_engine_t *e, uint64_t id, uint32_t stream, int writes);
  /* Makes an extension's own stream (a cudaStream_t) wait for the accesses of buffer `id` that
   * must precede this one (its last writer; with `writes`, its readers too), and nothing else.
   * The access is not recorded: later engine work on the buffer does not wait for it, so the
   * extension reports its completion only once it has finished. ACX_ERR_UNKNOWN_BUFFER,
   * ACX_ERR_DEVICE (a CUDA call failed, logged). */
  acx_status_t (*order_external)(acxi_engine_t *e, uint64_t id, void *stream, int writes);
  /* Posts the completion now. */
  void (*complete)(acxi_engine_t *e, const acxi_cpl_t *cpl);
  /* Posts a completion for cmd (status ACX_OK, values 0) once the work queued so far on
   * `stream` has finished, using the engine's completion strategy. */
  void (*complete_after)(acxi_engine_t *e, uint32_t stream, const acxi_cmd_t *cmd);
  /* Per-engine storage for extension `slot` (0..ACXI_EXT_MAX-1), NULL at engine creation. */
  void **(*ext_state)(acxi_engine_t *e, int slot);
  const acxi_engine_params_t *(*params)(acxi_engine_t *e);
} acxi_engine_api_t;

/* ACXI_EXT_MAX and the slot each extension takes: runtime/proto/limits.h. */
typedef struct acxi_ext_ops {
  const char *name;
  uint32_t op_first, op_last;
  int slot; /* index into ext_state, unique per extension */
  /* Must complete cmd exactly once (api->complete or api->complete_after). */
  void (*submit)(acxi_engine_t *e, const acxi_engine_api_t *api, const acxi_cmd_t *cmd);
  /* Optional: polled by the loop while the engine is busy (async error checks). */
  int (*progress)(acxi_engine_t *e, const acxi_engine_api_t *api);
  /* Optional: releases the extension's per-engine state before the engine goes. */
  void (*engine_destroy)(acxi_engine_t *e, const acxi_engine_api_t *api);
  /* Optional (the cuda engine calls it): puts into the streams the work the extension has accepted
   * but not launched yet: what it holds back to launch together with what may follow (acx's own
   * all-reduce batches small ones), or what a library still enqueues on a thread of its own (NCCL's
   * non-blocking communicators: this waits for it, within its deadline). Called before the engine
   * runs any command outside [op_first, op_last], so that the streams keep the commands' order; the
   * extension launches what it holds back before its own progress hook returns. */
  void (*flush)(acxi_engine_t *e, const acxi_engine_api_t *api);
} acxi_ext_ops_t;

void acxi_ext_register(const acxi_ext_ops_t *ops);
/* The extension handling op, or NULL. Engines dispatch ops >= ACXI_OP_EXT_BASE through this. */
const acxi_ext_ops_t *acxi_ext_find(uint32_t op);
/* All registered extensions (for destroy/progress hooks). */
int acxi_ext_count(void);
const acxi_ext_ops_t *acxi_ext_at(int i);

/* Registry (kernels/ registers from constructors). */
void acxi_engine_register(const acxi_engine_ops_t *ops);
const acxi_engine_ops_t *acxi_engine_find(const char *kind);
#endif
