/* Internals of the world (collectives/world.c) shared with the NCCL world, the control plane and
 * the tests: the object itself, byte broadcasts with a deadline, the NCCL unique id step, and the
 * parking of timed-out MPI operations. */
#ifndef ACXC_WORLD_INTERNAL_H
#define ACXC_WORLD_INTERNAL_H

#include <stdatomic.h>

#include "acx/world.h"

/* sizeof(ncclUniqueId) (NCCL_UNIQUE_ID_BYTES); world.c checks it against nccl.h. */
#define ACXC_NCCL_ID_BYTES 128

struct acx_world {
  MPI_Comm comm;       /* duplicate of the user's communicator, MPI_ERRORS_RETURN */
  MPI_Comm local_comm; /* the ranks of this node */
  int rank, size, local_rank, local_size, node, nodes;
  _Atomic uint64_t epoch;
  acx_topo_t *topo;
  acx_topo_binding_t binding;
  int64_t timeout_ns; /* acx_world_config_t.timeout_ms, or ACX_WORLD_TIMEOUT */
  /* The world ranks bound to this rank's GPU (same node, same bus id), this rank included, in
   * rank order; 1 entry (this rank) without a GPU. max_gpu_sharers: the most ranks on one GPU
   * anywhere in the world. */
  int *gpu_peers, n_gpu_peers, max_gpu_sharers;
};

/* Broadcasts len bytes from root over the world's communicator, waiting at most the world's
 * timeout. MPI writes a heap copy, handed to buf on success: on ACX_ERR_TIMEOUT the pending
 * broadcast is parked with the copy (buf is never written later), and the world's communicator
 * has an unmatched collective on it (the world must be rebuilt). */
acx_status_t acxc_world_bcast_bytes(acx_world_t *w, int root, void *buf, size_t len);

/* 1 while acx_remote_start's remote access (remote/remote.c), or acx_world_supervise's
 * supervision (rebuild.c), runs on w: their threads read the world, so it must outlive them. */
int acxc_remote_running(const acx_world_t *w);
/* The most ranks bound to one GPU anywhere in the world (1: one rank per GPU, or no GPUs). */
int acxc_world_gpu_sharers(const acx_world_t *w);
/* 1 when `rank` (not this one) is bound to this rank's GPU. */
int acxc_world_shares_gpu(const acx_world_t *w, int rank);
/* "r1,r2,...": the world ranks on this rank's GPU (acx_world_gpu_peers), into buf. */
char *acxc_world_gpu_peers_str(const acx_world_t *w, char *buf, size_t len);
int acxc_world_supervised(const acx_world_t *w);

/* The NCCL bootstrap step: `root` made an ncclUniqueId (its executor did: acxc_nccl_make_id) with
 * status `root_status`, and every rank receives the same 128 bytes in id. The root's failure
 * reaches every rank (the status travels with the id), so no rank waits for an id that will not
 * come: every rank then returns root_status. root_status and id are read on the root only. */
acx_status_t acxc_world_bcast_nccl_id(acx_world_t *w, int root, acx_status_t root_status,
                                      unsigned char id[ACXC_NCCL_ID_BYTES]);

/* The rebuild protocol (rebuild.c) moved the world to `epoch`: the token identity follows at once,
 * so exports carry the new epoch and older tokens go stale. An epoch below the world's is refused
 * (logged): epochs only move forward. One thread at a time (the rebuild's). */
void acxc_world_set_epoch(acx_world_t *w, uint64_t epoch);

/* The process count the launcher announced through its environment (OMPI_COMM_WORLD_SIZE,
 * PMI_SIZE, MV2_COMM_WORLD_SIZE, SLURM_STEP_NUM_TASKS), with the variable's name; 0 when none
 * says. The largest claim wins. */
int acxc_launcher_size(const char **var);

/* A non-blocking MPI operation that passed its deadline cannot be cancelled, and a late rank may
 * still complete it: everything it may write (its buffers, the handle MPI_Comm_idup fills) and
 * the communicators it runs on must never be freed or reused. This keeps `mem` (one allocation,
 * or a struct pointing to the others) and `req` for the life of the process, reachable so leak
 * checkers stay quiet. For every bootstrap exchange with a deadline (the world, the control
 * plane, collective creation). Any thread. */
void acxc_world_park(MPI_Request req, void *mem);
/* Polls req (short naps) until it completes (ACX_OK) or `deadline` passes (ACX_ERR_TIMEOUT);
 * on a timeout or an MPI error (ACX_ERR_MPI) req and mem are parked (acxc_world_park): MPI may
 * still write mem, the caller must not free it. Logs nothing; the caller says what was late. */
acx_status_t acxc_world_wait(MPI_Request req, void *mem, int64_t deadline);
/* The number of operations parked so far in this process (tests). Any thread. */
size_t acxc_world_parked(void);
#endif
