/* Internals of the world (collectives/world.c) shared with the NCCL world, the control plane and
 * the tests: the object itself, byte broadcasts with a deadline, and the NCCL unique id step. */
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
  int64_t timeout_ns; /* ACX_WORLD_TIMEOUT */
};

/* Broadcasts len bytes from root over the world's communicator, waiting at most the world's
 * timeout. ACX_ERR_TIMEOUT leaves the broadcast pending (the world must be rebuilt). */
acx_status_t acxc_world_bcast_bytes(acx_world_t *w, int root, void *buf, size_t len);

/* The NCCL bootstrap step: `root` obtains an ncclUniqueId (ncclGetUniqueId needs no GPU) and
 * every rank receives the same 128 bytes in id. A failure on the root reaches every rank (the
 * root broadcasts its status with the id), so no rank waits for an id that will not come.
 * ACX_ERR_NOT_SUPPORTED in a build without NCCL; ACX_ERR_NCCL (logged with NCCL's message). */
acx_status_t acxc_world_nccl_unique_id(acx_world_t *w, int root, unsigned char id[ACXC_NCCL_ID_BYTES]);
/* A fresh ncclUniqueId made here, for a communicator this rank sets up with one peer (it listens
 * for the bootstrap in this process). ACX_ERR_NCCL; ACX_ERR_NOT_SUPPORTED without NCCL. */
acx_status_t acxc_nccl_local_id(unsigned char id[ACXC_NCCL_ID_BYTES]);

/* The rebuild protocol (rebuild.c) moved the world to `epoch`: the token identity follows at once,
 * so exports carry the new epoch and older tokens go stale. Any thread. */
void acxc_world_set_epoch(acx_world_t *w, uint64_t epoch);

/* The process count the launcher announced through its environment (OMPI_COMM_WORLD_SIZE,
 * PMI_SIZE, MV2_COMM_WORLD_SIZE, SLURM_STEP_NUM_TASKS), with the variable's name; 0 when none
 * says. The largest claim wins. */
int acxc_launcher_size(const char **var);
#endif
