/* Internals of the topology layer (runtime/device/topo.c): the loaded hwloc topology and the NVIDIA GPUs
 * found in it, for the device layer and acx-info. The public side is include/acx/topo.h. */
#ifndef ACXI_TOPO_H
#define ACXI_TOPO_H

#include <hwloc.h>

#include "acx/topo.h"

typedef struct acxi_topo_gpu {
  hwloc_obj_t pci;       /* the GPU's PCI object */
  hwloc_bitmap_t cpuset; /* cores local to it, within the allowed cpuset */
  acx_topo_gpu_t info;
} acxi_topo_gpu_t;

struct acx_topo {
  hwloc_topology_t hw;
  int thissystem;        /* 0 for a recorded topology: no binding through it */
  int ngpus;
  acxi_topo_gpu_t *gpus; /* PCI order */
};

/* NVIDIA display or 3D controller (not an NVSwitch, audio function or bridge). */
static inline int acxi_topo_is_nvidia_gpu(unsigned vendor, unsigned class_id) {
  return vendor == 0x10de && (class_id == 0x0300 || class_id == 0x0302);
}
#endif
