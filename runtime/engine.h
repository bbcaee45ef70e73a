/* The engine interface: what executes commands for one device kind. kernels/ implements it
 * (host kind and CUDA kind) and registers the implementations at load time; the executor loop
 * (runtime/, used by the acx-executor process and by the inline thread alike) drives it.
 * runtime/ never includes kernels/: it finds engines through this registry. */
#ifndef ACXI_ENGINE_H
#define ACXI_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "acx/status.h"
#include "runtime/cmd.h"

typedef struct acxi_engine acxi_engine_t;

/* Posts one completion. Thread-safe: the CUDA engine may call it from a host-function callback
 * thread. Called exactly once per command, unless the command has ACXI_CMD_FLAG_NO_REPLY and
 * succeeded. */
typedef void (*acxi_complete_fn)(void *sink, const acxi_cpl_t *cpl);

typedef struct acxi_engine_params {
  int cuda_ordinal;       /* CUDA device ordinal inside the executor (cuda kind) */
  char pci_bus_id[32];    /* preferred over the ordinal when non-empty */
  int streams;            /* stream pool size (>= 1) */
  uint64_t generation;    /* this incarnation's generation */
  int inline_mode;        /* 1: running on a thread of the rank process */
  const char *completion; /* "auto", "event" or "hostfn" */
  const char *fault_inject; /* ACX_FAULT_INJECT schedule, or "" */
} acxi_engine_params_t;

typedef struct acxi_engine_ops {
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
  /* Non-zero once the device context is poisoned by a sticky error: the loop reports it and the
   * executor exits (process mode) or the device is declared fatal (inline mode). */
  int (*poisoned)(acxi_engine_t *engine);
} acxi_engine_ops_t;

/* Registry (kernels/ registers from constructors). */
void acxi_engine_register(const acxi_engine_ops_t *ops);
const acxi_engine_ops_t *acxi_engine_find(const char *kind);
#endif
