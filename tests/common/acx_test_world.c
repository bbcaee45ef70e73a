/* The MPI tests' device set-up (acx_test.h: acx_test_open_device). */
#include <mpi.h>
#include <stdio.h>

#include "acx/config.h"
#include "acx/device.h"
#include "acx/world.h"
#include "acx_test.h"

int acx_test_open_device(acx_world_t *world, acx_system_t *sys, acx_device_config_t *cfg, const char *prog,
                         acx_device_t **dev) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int cuda = cfg->kind == ACX_DEVICE_KIND_CUDA;
  acx_topo_binding_t bind;
  const char *asked = cfg->pci_bus_id;
  if (cuda && !asked && acx_world_binding(world, &bind) == ACX_OK && bind.pci_bus_id[0])
    cfg->pci_bus_id = bind.pci_bus_id;
  *dev = NULL;
  acx_status_t st = acx_device_open(sys, cfg, dev);
  cfg->pci_bus_id = asked; /* bind is gone with this call */
  int ok = st == ACX_OK, all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (all) return 0;
  if (*dev) acx_device_close(*dev, 30000000000LL);
  *dev = NULL;
  int rc = 1;
  if (cuda && (st == ACX_ERR_NO_DEVICE || st == ACX_OK)) {
    if (rank == 0) printf("%s: no GPU on every rank: skipped\n", prog);
    rc = ACX_TEST_SKIP;
  } else {
    fprintf(stderr, "rank %d: %s: acx_device_open: %s\n", rank, prog, acx_status_str(st));
  }
  /* The program ends with this status: what it set up goes. */
  acx_system_destroy(sys, 30000000000LL);
  acx_world_finalize(world);
  MPI_Finalize();
  return rc;
}
