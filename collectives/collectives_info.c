/* What this build of the collectives layer supports, for acx-info and the tests. */
#include "acx_build_config.h"
#include "collectives/collectives.h"

int acxc_have_mpi(void) { return ACX_HAVE_MPI; }
int acxc_have_nccl(void) { return ACX_HAVE_NCCL; }
