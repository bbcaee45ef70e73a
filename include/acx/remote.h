/* acx remote access: reading and writing another rank's exported buffer through its token
 * (acx/token.h). The request travels over the world's control plane (MPI, on a duplicate of the
 * world's communicator, served by one progress thread per rank; MPI_THREAD_MULTIPLE, which
 * acx_world_init requires already), the owner checks the token (generation, epoch, key, rights,
 * bounds) and answers, then the bytes move:
 *  - GPU to GPU through NCCL when both buffers live on cuda devices (ACX_REMOTE_TRANSPORT=auto,
 *    the default): on a two-rank channel per (requester, owner) pair, a NCCL communicator of its
 *    own in each executor, on a CUDA stream of its own, with its sends and receives issued in the
 *    owner's serving order on both sides (docs/resilience.md#remote-access-through-tokens);
 *  - otherwise (host device kind, ACX_REMOTE_TRANSPORT=mpi) staged through host memory and sent
 *    over MPI on the control plane's communicator.
 * Remote traffic never enters a collectives communicator, so it cannot interleave with
 * collectives in a different order on different ranks. The owner's bytes are read when the
 * transfer runs, after every write to that buffer the owner submitted before it served the
 * request; an owner that writes the buffer while peers read it orders the two itself (as with
 * MPI one-sided access).
 *
 * The owner checks a request on the control plane's progress thread and answers a refusal at
 * once; the device I/O of requests it accepts runs on a thread of remote access's own, one
 * request at a time in arrival order, so a slow device delays other requests' bytes but never the
 * control messages. The owner checks again when the bytes touch its buffer: an export revoked or
 * a world epoch left in between refuses them (ACX_ERR_STALE_TOKEN; acx_buffer_unexport). A reply
 * is accepted only from the rank the request went to. */
#ifndef ACX_REMOTE_H
#define ACX_REMOTE_H

/* Exported from libacx, which hides everything else (cmake/libacx.map). */
#pragma GCC visibility push(default)

#include <stdint.h>

#include "acx/actor.h"
#include "acx/device.h"
#include "acx/status.h"
#include "acx/token.h"
#include "acx/world.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Starts remote access on `world`: brings up its control plane (shared with the world rebuild,
 * counted) and serves this rank's exports to the other ranks from now on. Collective over the
 * world's ranks, within ACX_WORLD_TIMEOUT; call it from one thread, in the same order relative to
 * acx_coll_create on every rank (both use the world's communicator). ACX_ERR_MPI,
 * ACX_ERR_TIMEOUT, ACX_ERR_SYSTEM, ACX_ERR_NO_MEMORY. Not a worker thread of an actor system. */
acx_status_t acx_remote_start(acx_world_t *world);
/* Ends what acx_remote_start began: requests still waiting fail with ACX_ERR_CANCELLED, and so
 * do peers' requests accepted but not served yet; the last user of the control plane waits (up
 * to timeout_ns; < 0: ACX_WORLD_TIMEOUT) for every rank to arrive, so no peer's request goes
 * unanswered. The device call a request is in finishes first (bounded by ACX_REMOTE_TIMEOUT + 1 s).
 * Collective. ACX_ERR_INVALID_STATE (not started), ACX_ERR_TIMEOUT (also: a device call held
 * remote access's thread past that bound; its state is left allocated). */
acx_status_t acx_remote_stop(acx_world_t *world, int64_t timeout_ns);

/* Reads [offset, offset + bytes) of the buffer `token` names into local[local_offset, +bytes).
 * Asynchronous: *done (held for the caller: release it) completes once the bytes are in local,
 * with ACX_OK or the failure. Every request has the deadline ACX_REMOTE_TIMEOUT. Statuses of the
 * call itself: ACX_ERR_NULL_ARG; ACX_ERR_INVALID_ARG (bytes 0, offsets not multiples of the
 * element size); ACX_ERR_OUT_OF_RANGE (the range does not fit local); ACX_ERR_STALE_BUFFER /
 * ACX_ERR_INVALID_STATE (local is stale or freed); ACX_ERR_BAD_TOKEN (the owner rank is not in
 * the world); ACX_ERR_INVALID_STATE (acx_remote_start not called); ACX_ERR_QUEUE_FULL (too many
 * requests in flight); ACX_ERR_NO_MEMORY. Statuses *done may complete with: the owner's verdict
 * (ACX_ERR_STALE_TOKEN: an older epoch, a revoked export, a restarted device, a freed buffer,
 * or an export revoked / an epoch left after the request was accepted, before its bytes moved;
 * ACX_ERR_DENIED: wrong key, forged fields, no read right; ACX_ERR_OUT_OF_RANGE: beyond the
 * remote buffer; ACX_ERR_BAD_TOKEN: the token is not the owner's), the owner's device statuses,
 * this rank's device statuses writing local, ACX_ERR_QUEUE_FULL (the owner serves 4096 requests
 * already), ACX_ERR_TIMEOUT, ACX_ERR_MPI, ACX_ERR_CANCELLED (remote access stopped, here or at the
 * owner). A token of this rank is served locally, with the same checks.
 * Any thread. */
acx_status_t acx_token_get(acx_world_t *world, const acx_token_t *token, uint64_t offset, uint64_t bytes,
                           acx_buffer_t *local, uint64_t local_offset, acx_future_t **done);
/* Writes local[local_offset, +bytes) into [offset, offset + bytes) of the buffer `token` names.
 * local is read before the call returns (it may be reused at once); *done completes once the
 * owner has written the bytes, or refused them: a put accepted before the owner's
 * acx_buffer_unexport (or a world rebuild) whose bytes arrive after it writes nothing and
 * completes with ACX_ERR_STALE_TOKEN. Statuses as acx_token_get, with ACX_ERR_DENIED for a token
 * without the write right. Any thread. */
acx_status_t acx_token_put(acx_world_t *world, const acx_token_t *token, uint64_t offset, uint64_t bytes,
                           acx_buffer_t *local, uint64_t local_offset, acx_future_t **done);
/* The same, waiting up to timeout_ns (< 0: ACX_REMOTE_TIMEOUT plus a margin) for the result. */
acx_status_t acx_token_get_sync(acx_world_t *world, const acx_token_t *token, uint64_t offset, uint64_t bytes,
                                acx_buffer_t *local, uint64_t local_offset, int64_t timeout_ns);
acx_status_t acx_token_put_sync(acx_world_t *world, const acx_token_t *token, uint64_t offset, uint64_t bytes,
                                acx_buffer_t *local, uint64_t local_offset, int64_t timeout_ns);

/* Tokens as operands of collectives: a token received from another rank that names one of THIS
 * rank's buffers (e.g. a peer handed it back to say "reduce into this") becomes the buffer
 * itself, after the owner's full check of `access` (ACX_TOKEN_READ and/or ACX_TOKEN_WRITE) over
 * the whole buffer. *buf is held for the caller (acx_buffer_release). A token of another rank
 * cannot be an operand here (collectives take this rank's buffers): ACX_ERR_BAD_TOKEN. Statuses
 * of the owner's check (ACX_ERR_STALE_TOKEN, ACX_ERR_DENIED, ...), ACX_ERR_INVALID_ARG for an
 * empty or unknown `access`, ACX_ERR_NULL_ARG. On every failure *buf is NULL (when buf is not).
 * Works without acx_remote_start. Any thread. */
acx_status_t acx_token_local_buffer(const acx_token_t *token, unsigned access, acx_buffer_t **buf);

typedef struct acx_remote_stats {
  size_t size;          /* sizeof(acx_remote_stats_t): set before the call */
  uint64_t gets, puts;  /* requests made by this rank */
  uint64_t served;      /* requests of other ranks this rank answered (any verdict) */
  uint64_t refused;     /* of those, refused by the owner's check */
  uint64_t failed;      /* this rank's requests that completed with an error */
  uint64_t bytes_in, bytes_out; /* payload received / sent (either path) */
  uint64_t channel_transfers;   /* transfers (as requester or owner) that moved on an NCCL channel */
  uint64_t channels_opened;     /* channels this rank opened as requester */
} acx_remote_stats_t;
/* ACX_ERR_INVALID_STATE when acx_remote_start was not called. Any thread. */
acx_status_t acx_remote_stats(acx_world_t *world, acx_remote_stats_t *stats);

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif
