/* acx world rebuild: supervision of a world so that it heals after a fault. When any rank's
 * executor is restarted (its device generation moved) or its collectives fail (an NCCL error, a
 * passed deadline), that rank tells every other rank over the control plane (REBUILD_NOTICE);
 * every rank then retires its collectives (waiting and new operations fail with the retryable
 * ACX_ERR_WORLD_REBUILDING; so do they when the rank's transport sees the fault first, e.g. NCCL
 * over sockets seeing a dead peer's connection close before the notice arrives), waits for its device, creates a new communicator under the same
 * acx_coll_t (cuda: a fresh ncclUniqueId from rank 0 broadcast over MPI, a new NCCL
 * communicator in each executor; host: a fresh MPI duplicate), moves the world's epoch on (older
 * tokens answer ACX_ERR_STALE_TOKEN from then on, remote requests accepted before but whose bytes
 * had not moved included), waits for the remote accesses of the old epoch under way (within the
 * rebuild's deadline) and says REBUILD_READY to every rank. The world is ready once every other
 * rank has said it for this epoch (each rank counted once). The MPI job never dies; the
 * application resumes after acx_world_wait_ready / acx_world_wait_epoch.
 * Buffers of a restarted device are gone with its executor: the application restores them
 * (docs/resilience.md shows how, with replicas on another rank and acx_token_get). */
#ifndef ACX_REBUILD_H
#define ACX_REBUILD_H

/* Exported from libacx, which hides everything else (cmake/libacx.map). */
#pragma GCC visibility push(default)

#include <stdint.h>

#include "acx/actor.h"
#include "acx/coll.h"
#include "acx/device.h"
#include "acx/status.h"
#include "acx/world.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct acx_rebuild_config {
  size_t size;        /* sizeof(acx_rebuild_config_t): set by ACX_REBUILD_CONFIG_INIT */
  int64_t timeout_ns; /* deadline of one rebuild, fault to ready; <= 0: ACX_REBUILD_TIMEOUT */
  int attempts;       /* tries before the world is declared failed; <= 0: ACX_REBUILD_ATTEMPTS */
} acx_rebuild_config_t;
#define ACX_REBUILD_CONFIG_INIT {.size = sizeof(acx_rebuild_config_t)}

/* Supervises `world` on this rank: watches `dev` (this rank's device, opened in sys) and polls
 * `coll` (the world's collectives on dev; may be NULL: then only the epoch and the tokens move),
 * and takes part in every rebuild. Collective over the world's ranks (it brings up the control
 * plane, shared with acx_remote_start); one supervision per world; call it from one thread, in
 * the same order relative to acx_coll_create and acx_remote_start on every rank. While a rebuild
 * runs, the application must not create collectives on this world (both use the world's
 * communicator). ACX_ERR_NULL_ARG; ACX_ERR_INVALID_ARG (cfg->size; coll of another world or
 * device); ACX_ERR_INVALID_STATE (already supervised); control-plane statuses (ACX_ERR_MPI,
 * ACX_ERR_TIMEOUT); actor statuses. Not a worker thread of sys. */
acx_status_t acx_world_supervise(acx_world_t *world, acx_system_t *sys, acx_device_t *dev, acx_coll_t *coll,
                                 const acx_rebuild_config_t *cfg);
/* Ends the supervision (a rebuild in progress is waited for, up to its deadline). Collective
 * (the control plane's last user waits for every rank, up to timeout_ns; < 0: ACX_WORLD_TIMEOUT).
 * Call it before acx_coll_destroy and acx_device_close. ACX_ERR_INVALID_STATE (not supervised),
 * ACX_ERR_TIMEOUT. */
acx_status_t acx_world_unsupervise(acx_world_t *world, int64_t timeout_ns);

/* ACX_OK while the world is ready; ACX_ERR_WORLD_REBUILDING while a rebuild is pending or running;
 * the failure that ended the last rebuild when every attempt failed (the world is unusable);
 * ACX_ERR_INVALID_STATE when not supervised. Any thread. */
acx_status_t acx_world_state(acx_world_t *world);
/* Waits up to timeout_ns until no rebuild is pending or running; returns acx_world_state then,
 * or ACX_ERR_TIMEOUT. Any thread but a worker of the supervision's actor system. */
acx_status_t acx_world_wait_ready(acx_world_t *world, int64_t timeout_ns);
/* Waits up to timeout_ns until the world is ready at an epoch above `epoch`: what a rank whose
 * operation failed (e.g. ACX_ERR_DEVICE_LOST) calls with the epoch it read before the operation,
 * since the fault may reach the supervision only after the failure reached the caller. Returns
 * as acx_world_wait_ready. */
acx_status_t acx_world_wait_epoch(acx_world_t *world, uint64_t epoch, int64_t timeout_ns);
/* Starts a rebuild from this rank as if its collectives had failed with `cause` (an error
 * status; ACX_ERR_INVALID_ARG for ACX_OK). For applications that detect a fault acx cannot see.
 * A request made while a rebuild is already under way (or about to start) is covered by it: that
 * rebuild moves the world to a new epoch, and no second one follows (logged at INFO). Wait for
 * the new epoch with acx_world_wait_epoch. ACX_ERR_INVALID_STATE (not supervised). Any thread. */
acx_status_t acx_world_request_rebuild(acx_world_t *world, acx_status_t cause);

typedef struct acx_rebuild_stats {
  size_t size;                  /* sizeof(acx_rebuild_stats_t): set before the call */
  uint64_t epoch;               /* the world's epoch now */
  uint64_t rebuilds;            /* completed rebuilds */
  uint64_t failed_attempts;     /* attempts that failed and were retried (or ended the world) */
  int64_t last_fault_to_ready_ns; /* this rank: from the fault (the loss of its own executor, its
                                     own detection of a failed collective, or the arrival of
                                     another rank's notice) to a ready world, last rebuild */
  int64_t max_fault_to_ready_ns;
  int64_t total_fault_to_ready_ns;
  int64_t last_device_recovery_ns; /* this rank's last executor restart (loss to ready), 0: none */
  int last_initiator;           /* the rank whose fault started the last rebuild; -1: none yet */
  acx_status_t last_cause;      /* its cause */
} acx_rebuild_stats_t;
/* ACX_ERR_INVALID_STATE (not supervised), ACX_ERR_INVALID_ARG (stats->size). Any thread. */
acx_status_t acx_world_rebuild_stats(acx_world_t *world, acx_rebuild_stats_t *stats);

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif
