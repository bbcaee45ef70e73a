/* acx collectives: all-reduce, broadcast, reduce, all-gather, reduce-scatter, send/recv,
 * all-to-all and groups over the ranks of an acx world, on acx buffers of this rank's device.
 * cuda devices run them through NCCL in the device's executor (one non-blocking communicator per
 * world and device, every NCCL call on the executor thread); host devices run the same API
 * through MPI on host-staged copies, so that everything above the device runs without a GPU.
 *
 * Ordering: collectives of one acx_coll_t are issued in the order their calls return on this
 * rank (submission is serialised per communicator). As with NCCL, every rank must call the same
 * collectives in the same order; two threads racing to submit on one coll give an order that
 * differs between ranks and deadlock (or corrupt) the job: use one thread per coll, or agree.
 *
 * Completion: every call takes `done`. With a non-NULL done, *done (held for the caller: release
 * it) completes with the operation's status once the result is in the receive buffer. With done
 * NULL the operation is fire-and-forget: nothing waits for it, and a failure shows at the next
 * operation of this coll that has a future, at acx_coll_synchronize, and in acx_coll_state.
 * Launching n operations with done NULL and the last one with a future, then waiting for that
 * one, is the fastest way to pipeline (the benchmark's loop).
 *
 * Deadlines: every operation with a future has the deadline ACX_COLL_TIMEOUT (or cfg->timeout_ns)
 * from its submission. On expiry, or on an asynchronous NCCL error, the watchdog aborts the
 * communicator and fails every waiting operation (ACX_ERR_COLL_TIMEOUT, ACX_ERR_NCCL); the coll
 * is then broken: later calls return that status at once. No rank waits forever on a dead peer.
 * A broken coll is rebuilt by destroying it and creating a new one on every rank.
 *
 * Statuses every operation may return besides its own: ACX_ERR_NULL_ARG, ACX_ERR_INVALID_ARG
 * (the log line names the argument: counts, ranks, streams, buffers of another device),
 * ACX_ERR_BAD_DTYPE (dtype unknown, ACX_DTYPE_BYTE, or not the dtype of a typed buffer),
 * ACX_ERR_OUT_OF_RANGE (a buffer is smaller than the operation needs), ACX_ERR_OVERFLOW
 * (count x element size x ranks overflows), ACX_ERR_STALE_BUFFER (a buffer from an earlier
 * device generation), ACX_ERR_INVALID_STATE (a freed buffer, a destroyed coll, group misuse),
 * ACX_ERR_COLL_TIMEOUT, ACX_ERR_NCCL, ACX_ERR_MPI, ACX_ERR_DEVICE_LOST (the executor was
 * restarted: its communicator is gone until the world is rebuilt), ACX_ERR_PEER_LOST,
 * ACX_ERR_QUEUE_FULL, ACX_ERR_NO_MEMORY. Nothing is enqueued when validation fails. */
#ifndef ACX_COLL_H
#define ACX_COLL_H

/* Exported from libacx, which hides everything else (cmake/libacx.map). */
#pragma GCC visibility push(default)

#include <stddef.h>
#include <stdint.h>

#include "acx/actor.h"
#include "acx/device.h"
#include "acx/status.h"
#include "acx/world.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct acx_coll acx_coll_t;

/* Reduction operations (NCCL's; avg divides the sum by the number of ranks, integer types with
 * integer division: on the host kind C's, which truncates toward zero, so a sum of -7 over 2 ranks
 * averages to -3, not -4; on the cuda kind NCCL's ncclAvg). */
typedef enum acx_redop {
  ACX_REDOP_SUM = 0,
  ACX_REDOP_PROD = 1,
  ACX_REDOP_MAX = 2,
  ACX_REDOP_MIN = 3,
  ACX_REDOP_AVG = 4,
  ACX_REDOP_COUNT
} acx_redop_t;

/* "sum", "prod", ...; "unknown" otherwise. Never NULL. Any thread. */
const char *acx_redop_name(acx_redop_t op);

typedef struct acx_coll_config {
  size_t size;             /* sizeof(acx_coll_config_t): set by ACX_COLL_CONFIG_INIT */
  int64_t timeout_ns;      /* deadline of each operation; <= 0: ACX_COLL_TIMEOUT */
  int64_t init_timeout_ns; /* deadline of communicator creation; <= 0: ACX_NCCL_INIT_TIMEOUT */
  const char *name;        /* name of the CollectiveActor under the device's actor system;
                              NULL: "coll<N>" */
} acx_coll_config_t;
#define ACX_COLL_CONFIG_INIT {.size = sizeof(acx_coll_config_t)}

/* Creates the collectives of `world` on this rank's device `dev` (opened in `sys`). Collective
 * over the world's ranks: every rank calls it, with a device of the same kind. cuda: rank 0 makes
 * an ncclUniqueId, MPI broadcasts it, and the executor creates a non-blocking communicator, all
 * within the init deadline (the executor keeps serving other commands meanwhile). host: the
 * world's communicator is duplicated for the MPI collectives. A CollectiveActor is spawned that
 * watches the device (a restarted executor breaks the coll with ACX_ERR_DEVICE_LOST) and runs the
 * watchdog. ACX_ERR_NOT_SUPPORTED (cuda device in a build without NCCL), ACX_ERR_INVALID_ARG
 * (ranks disagree on the device kind), ACX_ERR_NCCL, ACX_ERR_MPI, ACX_ERR_COLL_TIMEOUT (init
 * deadline passed: the communicator was aborted), ACX_ERR_TIMEOUT (a rank never arrived at the
 * id broadcast), device statuses. Not a worker thread of sys. */
acx_status_t acx_coll_create(acx_world_t *world, acx_device_t *dev, acx_system_t *sys, const acx_coll_config_t *cfg,
                             acx_coll_t **coll);
/* Waits (up to timeout_ns; < 0: the coll's timeout) for the operations in flight, then destroys
 * the communicator (NCCL: finalize, abort if that does not finish in time) and the actor.
 * Collective over the ranks when the coll is healthy; a broken coll is torn down locally.
 * Returns the first failure of the operations waited for, else ACX_OK. NULL is ignored. Not a
 * worker thread. */
acx_status_t acx_coll_destroy(acx_coll_t *coll, int64_t timeout_ns);

/* Registered buffers (issue 16; docs/collectives.md, "Registered buffers"). Where ranks share a GPU
 * (the own all-reduce's two-shot with groups), the executors of a GPU's ranks can read each other's
 * registered inputs and store into each other's registered outputs directly instead of staging
 * them through their areas: registering the buffers that large all-reduces use saves GPU memory
 * traffic. Collective over the coll, like MPI_Win_create: every rank calls it, the same number of
 * times in the same order (a rank with nothing to register passes a small shareable buffer of its
 * own). buf must be ACX_MEM_SHAREABLE (else ACX_ERR_INVALID_ARG, naming it) on the coll's device.
 * A rank's failure fails the call on every rank (that rank's reason there, ACX_ERR_PEER_LOST
 * elsewhere) and leaves nothing registered. While registered the buffer is held and
 * acx_buffer_free refuses it (ACX_ERR_INVALID_STATE) until acx_coll_deregister (collective too).
 * Where no rank shares a GPU the call maps nothing and results are as without it. Results are
 * bit-identical with and without registration, whichever ranks registered what. A rebuild makes
 * registrations stale (their buffers are staged again) until deregistered and registered anew; a
 * coll destroyed with registrations left closes them, with a warning. At most 32 registrations of
 * a coll are used by its kernels at once (more are mapped but staged, with a warning). Not while a
 * rebuild runs; not a worker thread. */
typedef struct acx_coll_reg acx_coll_reg_t;
acx_status_t acx_coll_register(acx_coll_t *coll, acx_buffer_t *buf, int64_t timeout_ns, acx_coll_reg_t **reg);
acx_status_t acx_coll_deregister(acx_coll_reg_t *reg, int64_t timeout_ns);

/* Rank and size in the coll (those of the world). Any thread. */
acx_status_t acx_coll_rank(const acx_coll_t *coll, int *rank);
acx_status_t acx_coll_size(const acx_coll_t *coll, int *size);
/* ACX_OK while usable; otherwise why it broke (ACX_ERR_COLL_TIMEOUT, ACX_ERR_NCCL, ACX_ERR_MPI,
 * ACX_ERR_DEVICE_LOST, ...). Under acx_world_supervise every failure means a rebuild: the coll's
 * operations and this call then say ACX_ERR_WORLD_REBUILDING, whatever broke it (the cause is in
 * the log and in acx_world_rebuild_stats' last_cause). Any thread. */
acx_status_t acx_coll_state(const acx_coll_t *coll);
/* Aborts the communicator now (NCCL: ncclCommAbort in the executor) and fails every waiting
 * operation with `cause` (ACX_ERR_CANCELLED when cause is ACX_OK). The coll stays broken. */
acx_status_t acx_coll_abort(acx_coll_t *coll, acx_status_t cause);
/* Waits until every operation submitted so far has finished, up to timeout_ns (< 0: the coll's
 * timeout); returns the first failure not yet reported to a future (fire-and-forget operations)
 * or the coll's broken status. ACX_ERR_COLL_TIMEOUT when the wait passes the deadline (the
 * watchdog has then aborted the communicator). */
acx_status_t acx_coll_synchronize(acx_coll_t *coll, int64_t timeout_ns);
/* Waits for one operation's future up to timeout_ns (< 0: the coll's timeout plus a margin for
 * the watchdog), releases it, and returns its status. */
acx_status_t acx_coll_wait(acx_coll_t *coll, acx_future_t *done, int64_t timeout_ns);

/* What the last world rebuild of this coll found about the collective operations (every
 * operation but send and recv, counted from 1 in submission order within an epoch: from the
 * coll's creation or its last rebuild) of the epoch that ended. Every rank must submit the same
 * collectives, so the k-th of every rank is one operation: those after the fewest any rank
 * submitted (`joined`) were not joined by every rank, and none of their results is valid. Such an
 * operation normally fails (ACX_ERR_WORLD_REBUILDING): its future says so. But a GPU kernel can
 * end before any rank has heard of the fault, with wrong values and success (seen across
 * simulated nodes with NCCL's cuMem buffers on, docs/resilience.md); no check at completion can
 * catch that, the rebuild's count does: `unjoined_ok` > 0 means results this rank was told were
 * good are wrong (logged as a warning), and `unjoined_noreply` counts fire-and-forget operations
 * among the unjoined, whose results are as wrong but were never reported. All zero before the
 * coll's first rebuild and after a rebuild where every rank had submitted as many. */
typedef struct acx_coll_rebuild_report {
  size_t size;                /* sizeof(acx_coll_rebuild_report_t), set by the caller: lets it grow */
  uint64_t rebuilds;          /* rebuilds of this coll so far; the fields below are the last one's */
  uint64_t submitted;         /* collective operations this rank submitted in the epoch that ended */
  uint64_t joined;            /* the fewest any rank submitted: operations 1..joined every rank joined */
  int short_rank;             /* the lowest rank that submitted only `joined` (-1: every rank as many) */
  uint64_t unjoined_failed;   /* unjoined operations whose future reported a failure */
  uint64_t unjoined_ok;       /* unjoined operations whose future reported success: wrong results */
  uint64_t unjoined_ok_local; /* ... success of a broadcast's root or a reduce's other ranks, whose
                                 result here does not depend on the others: right */
  uint64_t unjoined_noreply;  /* unjoined fire-and-forget operations (no future) */
  uint64_t unjoined_unknown;  /* unjoined operations no longer on record (more than 256 unjoined),
                                 or whose future had not completed when the rebuild counted */
} acx_coll_rebuild_report_t;
/* Copies the last rebuild's report into *report, whose size the caller sets
 * (`acx_coll_rebuild_report_t r = {.size = sizeof r}`). ACX_ERR_NULL_ARG when either argument is
 * NULL, ACX_ERR_INVALID_ARG when report->size is not sizeof(acx_coll_rebuild_report_t). Any thread. */
acx_status_t acx_coll_rebuild_report(acx_coll_t *coll, acx_coll_rebuild_report_t *report);

/* ---- collectives; `stream` is an executor stream of the device (host kind: ordering only) ----
 * Buffer operations issued after a collective on its stream run after it (a read sees the result,
 * a write does not change what it reads). On the host kind and for hierarchical colls the
 * collective runs on the coll's worker thread, and later commands naming its buffers (copies,
 * reads, writes, library calls, ...) wait for it (docs/collectives.md, "Stream order on the worker
 * path"). */

/* recv[0, count) := op over ranks of send[0, count). send == recv: in place. */
acx_status_t acx_allreduce(acx_coll_t *coll, acx_buffer_t *send, acx_buffer_t *recv, size_t count, acx_dtype_t dtype,
                           acx_redop_t op, uint32_t stream, acx_future_t **done);
/* recv[0, count) := root's send[0, count). send is read on the root only (may be NULL elsewhere);
 * send == recv: in place. */
acx_status_t acx_broadcast(acx_coll_t *coll, acx_buffer_t *send, acx_buffer_t *recv, size_t count, acx_dtype_t dtype,
                           int root, uint32_t stream, acx_future_t **done);
/* root's recv[0, count) := op over ranks of send[0, count). recv is written on the root only
 * (may be NULL elsewhere). */
acx_status_t acx_reduce(acx_coll_t *coll, acx_buffer_t *send, acx_buffer_t *recv, size_t count, acx_dtype_t dtype,
                        acx_redop_t op, int root, uint32_t stream, acx_future_t **done);
/* recv[r * count, +count) := rank r's send[0, count). send == recv: in place, each rank's input
 * already at its slot of recv (NCCL's convention). recv holds size * count elements. */
acx_status_t acx_allgather(acx_coll_t *coll, acx_buffer_t *send, acx_buffer_t *recv, size_t count, acx_dtype_t dtype,
                           uint32_t stream, acx_future_t **done);
/* recv[0, count) := op over ranks of their send[rank * count, +count). send holds size * count
 * elements. send == recv: in place, the result lands at this rank's slot (NCCL's convention). */
acx_status_t acx_reduce_scatter(acx_coll_t *coll, acx_buffer_t *send, acx_buffer_t *recv, size_t count,
                                acx_dtype_t dtype, acx_redop_t op, uint32_t stream, acx_future_t **done);
/* Point to point: matched in order per pair of ranks, like NCCL. Outside a group the operations of
 * a coll run one after the other (as NCCL's on one stream): a send waits for the peer's matching
 * receive, so exchanges in both directions belong in a group (or in an order that pairs them). */
acx_status_t acx_send(acx_coll_t *coll, acx_buffer_t *buf, size_t count, acx_dtype_t dtype, int peer, uint32_t stream,
                      acx_future_t **done);
acx_status_t acx_recv(acx_coll_t *coll, acx_buffer_t *buf, size_t count, acx_dtype_t dtype, int peer, uint32_t stream,
                      acx_future_t **done);
/* recv[r * count, +count) := rank r's send[rank * count, +count); both hold size * count
 * elements; send and recv must differ (NCCL's grouped send/recv cannot run in place). */
acx_status_t acx_alltoall(acx_coll_t *coll, acx_buffer_t *send, acx_buffer_t *recv, size_t count, acx_dtype_t dtype,
                          uint32_t stream, acx_future_t **done);

/* Groups: operations between start and end are issued as one (ncclGroupStart/End: sends and
 * receives progress together, collectives are fused). Inside a group every operation must use
 * the same stream, their futures complete together with the group's, and `done` of
 * acx_coll_group_end (may be NULL) completes with the group. The thread that starts a group holds
 * the coll's submission order until group_end: other threads' calls wait. Groups do not nest
 * (ACX_ERR_INVALID_STATE); at most 512 operations per group (ACX_ERR_QUEUE_FULL). A group with
 * an invalid member is dropped whole at group_end (nothing was enqueued) and returns the first
 * member's failure. */
acx_status_t acx_coll_group_start(acx_coll_t *coll);
acx_status_t acx_coll_group_end(acx_coll_t *coll, acx_future_t **done);

/* ---- synchronous variants: submit, wait up to timeout_ns (< 0: the coll's timeout) ---- */
acx_status_t acx_allreduce_sync(acx_coll_t *coll, acx_buffer_t *send, acx_buffer_t *recv, size_t count,
                                acx_dtype_t dtype, acx_redop_t op, uint32_t stream, int64_t timeout_ns);
acx_status_t acx_broadcast_sync(acx_coll_t *coll, acx_buffer_t *send, acx_buffer_t *recv, size_t count,
                                acx_dtype_t dtype, int root, uint32_t stream, int64_t timeout_ns);
acx_status_t acx_reduce_sync(acx_coll_t *coll, acx_buffer_t *send, acx_buffer_t *recv, size_t count, acx_dtype_t dtype,
                             acx_redop_t op, int root, uint32_t stream, int64_t timeout_ns);
acx_status_t acx_allgather_sync(acx_coll_t *coll, acx_buffer_t *send, acx_buffer_t *recv, size_t count,
                                acx_dtype_t dtype, uint32_t stream, int64_t timeout_ns);
acx_status_t acx_reduce_scatter_sync(acx_coll_t *coll, acx_buffer_t *send, acx_buffer_t *recv, size_t count,
                                     acx_dtype_t dtype, acx_redop_t op, uint32_t stream, int64_t timeout_ns);
acx_status_t acx_alltoall_sync(acx_coll_t *coll, acx_buffer_t *send, acx_buffer_t *recv, size_t count,
                               acx_dtype_t dtype, uint32_t stream, int64_t timeout_ns);

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif
