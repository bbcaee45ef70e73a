/* acx world: the MPI side of an acx job. One acx_world per rank, made after MPI_Init_thread on a
 * communicator of the application's choice: it learns the rank's node and local rank, picks its
 * GPU and cores (acx/topo.h), and is what NCCL bootstrap and world rebuilds hang off. */
#ifndef ACX_WORLD_H
#define ACX_WORLD_H

/* Exported from libacx, which hides everything else (cmake/libacx.map). */
#pragma GCC visibility push(default)

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "acx/status.h"
#include "acx/topo.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct acx_world acx_world_t;

typedef struct acx_world_config {
  size_t size;          /* sizeof(acx_world_config_t): lets the struct grow */
  int device;           /* CUDA ordinal (among visible GPUs) for this rank; -1: ACX_DEVICE, and when
                           that is -1 too, the topology's choice */
  int bind_caller;      /* 1: bind the calling thread to the chosen cpuset. Nothing else is
                           bound by the world: pass the binding's cpuset to the actor system and
                           the device (see acx_world_binding) */
  const char *topo_xml; /* recorded topology instead of this machine's (tests); NULL: this
                           machine, or HWLOC_XMLFILE when set */
  int64_t timeout_ms;   /* deadline of acx_world_init as a whole, and the world's timeout for its
                           later bootstrap exchanges (ms); 0: ACX_WORLD_TIMEOUT */
} acx_world_config_t;
#define ACX_WORLD_CONFIG_INIT {sizeof(acx_world_config_t), -1, 0, NULL, 0}

/* Builds this rank's world over `comm` (usually MPI_COMM_WORLD). Collective: every rank of comm
 * calls it. One acx_world per rank: while one lives (until acx_world_finalize), another call is
 * refused with ACX_ERR_INVALID_STATE and a log line, touching neither the live world nor the
 * token identity (the rank, node and epoch its exports carry, acx/token.h).
 * MPI must be initialised with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...): acx's
 * control plane issues MPI calls from an actor thread while the application issues its own, so a
 * lower level is refused (ACX_ERR_NOT_SUPPORTED) rather than risking silent corruption.
 * The world duplicates comm (acx traffic never matches the application's messages) with
 * MPI_ERRORS_RETURN, splits it per node (MPI_COMM_TYPE_SHARED), numbers the nodes, gathers the
 * launcher masks of the node's ranks and chooses this rank's GPU and cpuset; the binding is
 * logged at ACX_DEBUG=INFO.
 * Deadline: the whole call waits at most cfg->timeout_ms, or ACX_WORLD_TIMEOUT (an environment
 * variable, 120 s by default) when that is 0; every exchange is non-blocking and polled against
 * it. The only blocking MPI call, the node split (MPI has no non-blocking MPI_Comm_split_type),
 * runs after a barrier every rank has passed, so it waits only for ranks already on their way.
 * On ACX_ERR_TIMEOUT no world is built, and the exchange that timed out stays pending: MPI cannot
 * cancel a collective. acx keeps it for the life of the process with its buffers and
 * communicators (never freed, so a late arrival writes nowhere it should not), and the late rank
 * fails too, at the step its peers left. The missing rank is best treated as lost: end the job
 * (MPI_Abort). Once every rank has returned, all of them may call acx_world_init again: the only
 * collective this call issues on comm is the duplicate, so comm's collectives stay matched.
 * The epoch: the world starts at 0 in a process's first world and, in later ones, above every
 * epoch any of its ranks used before, so tokens of an earlier world never validate again.
 * cfg may be NULL: the defaults of ACX_WORLD_CONFIG_INIT (test_world's test_log_names).
 * Returns ACX_OK; ACX_ERR_NULL_ARG (world); ACX_ERR_INVALID_ARG (cfg->size, cfg->timeout_ms negative,
 * comm is MPI_COMM_NULL); ACX_ERR_INVALID_STATE (MPI not initialised or already finalised; this
 * rank already has a world, or another thread is building one); ACX_ERR_NOT_SUPPORTED (thread
 * level); ACX_ERR_BAD_LAUNCH (MPI sees one process although the launcher started more: the MPI
 * library and the launcher do not share a PMI/PMIx, e.g. srun without --mpi=pmix; every rank
 * would believe it is rank 0 of 1); ACX_ERR_MPI; ACX_ERR_TIMEOUT (a rank did not arrive in
 * time, logged with the step); the statuses of acx_topo_create (on any rank: every rank fails,
 * with ACX_ERR_PEER_LOST where its own topology loaded) and acx_topo_choose. Any thread, one at
 * a time per process. */
acx_status_t acx_world_init(MPI_Comm comm, const acx_world_config_t *cfg, acx_world_t **world);
/* Releases the world: frees its communicators (MPI_Comm_free, a local call in MPI libraries: no
 * wait) and topology. Call it on every rank, before MPI_Finalize, after what was built on the
 * world has ended (acx_world_unsupervise, acx_remote_stop, acx_coll_destroy). After MPI_Finalize
 * it only frees memory (logged). The token identity leaves with the world: exports made without
 * a world name rank 0, node 0 and an epoch above the world's last, and the world's tokens are
 * stale from now on. NULL is ignored (ACX_OK); ACX_ERR_INVALID_STATE (logged, nothing done) for
 * anything but this rank's live world, e.g. a world already finalized, and while supervision or
 * remote access still runs on it (their threads read the world: unsupervise and stop them first). */
acx_status_t acx_world_finalize(acx_world_t *world);

/* Accessors. Any thread; the values never change for the world's lifetime, except the epoch. */
acx_status_t acx_world_rank(const acx_world_t *world, int *rank);
acx_status_t acx_world_size(const acx_world_t *world, int *size);
/* Rank and number of ranks on this node (shared-memory domain). */
acx_status_t acx_world_local_rank(const acx_world_t *world, int *local_rank);
acx_status_t acx_world_local_size(const acx_world_t *world, int *local_size);
/* Node index (0..nodes-1, in order of each node's lowest rank) and the node count. */
acx_status_t acx_world_node(const acx_world_t *world, int *node, int *nodes);
/* The world ranks bound to this rank's GPU (same node, same PCI bus id), this rank included, in
 * rank order: more than one when there are more ranks than GPUs on the node (or ACX_DEVICE puts
 * several on one). *count is their number (1 without a GPU: this rank alone); the first
 * min(count, cap) go to ranks (may be NULL when cap is 0). acx_world_init logs the sharing at
 * INFO, and `acx-info --map` prints it. NCCL takes one rank per GPU in a communicator: a cuda
 * acx_coll_create over a world where ranks share a GPU returns ACX_ERR_NOT_SUPPORTED, naming the
 * GPU and the ranks. ACX_ERR_NULL_ARG, ACX_ERR_INVALID_ARG (cap < 0, or ranks NULL with cap > 0). */
acx_status_t acx_world_gpu_peers(const acx_world_t *world, int *ranks, int cap, int *count);
/* The GPU and cpuset chosen for this rank (gpu = -1: no GPU, host device kind). To put acx's
 * threads and the executor there, hand it on:
 *   acx_topo_binding_t b;
 *   acx_world_binding(world, &b);
 *   acx_system_config_t sc = ACX_SYSTEM_CONFIG_INIT;
 *   sc.cpuset = b.cpuset;                    // actor workers and timer
 *   acx_system_create(&sc, &sys);
 *   acx_device_config_t dc = ACX_DEVICE_CONFIG_INIT;
 *   dc.cpuset = b.cpuset;                    // executor process (and standby), poller
 *   if (b.pci_bus_id[0]) dc.pci_bus_id = b.pci_bus_id; // the chosen GPU, whatever its ordinal
 *   acx_device_open(sys, &dc, &dev);
 * Both copy the strings. ACX_ERR_NULL_ARG. Any thread. */
acx_status_t acx_world_binding(const acx_world_t *world, acx_topo_binding_t *binding);
/* The world epoch, moved on by every world rebuild: after acx_world_init, 0 in a process's first
 * world, and above every epoch its ranks used before in a later one. It never moves back. */
acx_status_t acx_world_epoch(const acx_world_t *world, uint64_t *epoch);
/* The world's own communicator (a duplicate of the one given to init). For tools and tests that
 * need to exchange beside acx; do not free it. */
acx_status_t acx_world_comm(const acx_world_t *world, MPI_Comm *comm);

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif
