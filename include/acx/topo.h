/* acx topology: which GPU a rank uses and which cores its threads run on, decided with hwloc
 * from PCI locality alone (no CUDA call), so the same decision can be computed, and tested, on a
 * machine without a GPU from a recorded topology (hwloc XML). */
#ifndef ACX_TOPO_H
#define ACX_TOPO_H

/* Exported from libacx, which hides everything else (cmake/libacx.map). */
#pragma GCC visibility push(default)

#include <stddef.h>
#include <stdio.h>

#include "acx/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct acx_topo acx_topo_t;

/* Longest cpuset list string acx produces ("0-15,32-47" style, hwloc list syntax). */
#define ACX_TOPO_CPUSET_STRLEN 1024
#define ACX_TOPO_BUSID_STRLEN 32
#define ACX_TOPO_UUID_STRLEN 64

/* Loads a topology. xml_path: a recorded topology (hwloc XML, as `lstopo --of xml` writes it);
 * NULL discovers this machine, except that hwloc itself honours HWLOC_XMLFILE then. I/O
 * discovery is on (PCI devices and, when hwloc has the backends, NVML/CUDA OS devices).
 * A topology loaded from XML is "another machine": the process binding is not read from it and
 * threads cannot be bound through it, unless HWLOC_THISSYSTEM=1 says the XML is this machine.
 * Returns ACX_ERR_NULL_ARG, ACX_ERR_SYSTEM (hwloc failed: unreadable or malformed XML, logged),
 * ACX_ERR_NO_MEMORY. Any thread; the topology is read-only afterwards and may be shared. */
acx_status_t acx_topo_create(const char *xml_path, acx_topo_t **topo);
/* Releases a topology from acx_topo_create. NULL is ignored. */
void acx_topo_destroy(acx_topo_t *topo);

/* One NVIDIA GPU of the machine, as PCI sees it. */
typedef struct acx_topo_gpu {
  int index;                                /* position in the machine's PCI-ordered GPU list */
  char pci_bus_id[ACX_TOPO_BUSID_STRLEN];   /* "0000:18:00.0" (domain:bus:device.function) */
  char uuid[ACX_TOPO_UUID_STRLEN];          /* "GPU-..." when hwloc's NVML backend saw it, else "" */
  char cpuset[ACX_TOPO_CPUSET_STRLEN];      /* cores local to the GPU (its non-I/O ancestor) */
  int numa_node;                            /* OS index of the local NUMA node, -1 if not one */
  unsigned vendor_id, device_id;            /* 0x10de, e.g. 0x2335 (H200) */
} acx_topo_gpu_t;

/* Number of NVIDIA GPUs of the machine (PCI class VGA or 3D, vendor 0x10de), whatever
 * CUDA_VISIBLE_DEVICES says. On this machine, when the NVIDIA driver lists its GPUs in
 * /proc/driver/nvidia/gpus (containers see only theirs there), only those count. */
acx_status_t acx_topo_gpu_count(const acx_topo_t *topo, int *count);
/* Describes GPU `index` (0 <= index < count) in PCI order. ACX_ERR_OUT_OF_RANGE past the end. */
acx_status_t acx_topo_gpu_get(const acx_topo_t *topo, int index, acx_topo_gpu_t *gpu);

/* The GPUs CUDA will show, in CUDA ordinal order: index[k] is the machine GPU index of CUDA
 * device k. visible: a CUDA_VISIBLE_DEVICES value; NULL reads the environment (unset: every GPU
 * in PCI order, set but empty: none). Entries are ordinals into the PCI-ordered list or GPU UUIDs
 * ("GPU-8932f937", a unique prefix is enough). As CUDA does, the list ends at the first entry
 * that names no GPU (logged) or repeats one. UUIDs can only be matched when the topology holds
 * them, that is when hwloc's NVML backend ran on a machine with the GPUs and their driver (or a
 * recorded XML taken there): otherwise, and for MIG instances ("MIG-..."), returns
 * ACX_ERR_NOT_SUPPORTED and says so. Writes at most `max` entries, *count gets the number of
 * visible GPUs. Assumes CUDA enumerates in PCI order: identical GPUs (the HPC case) do; for mixed
 * GPUs set CUDA_DEVICE_ORDER=PCI_BUS_ID. Any thread. */
acx_status_t acx_topo_visible(const acx_topo_t *topo, const char *visible, int *index, int max, int *count);

/* The launcher's CPU mask of this process (hwloc_get_cpubind of the whole process), as a list
 * string. *bound is 1 when the mask leaves out some of the cores the process may use (the
 * launcher, numactl or taskset bound it). For a topology that is not this machine the process is
 * reported unbound with the topology's whole cpuset. ACX_ERR_OVERFLOW if len is too short. */
acx_status_t acx_topo_process_cpuset(const acx_topo_t *topo, char *buf, size_t len, int *bound);

/* What acx_topo_choose decides for one local rank. */
typedef struct acx_topo_request {
  size_t size;        /* sizeof(acx_topo_request_t): lets the struct grow */
  int local_rank;     /* this process's rank among the processes of its node (>= 0) */
  int local_size;     /* processes of this node (> local_rank) */
  int device;         /* CUDA ordinal among the visible GPUs to use, overriding the choice
                         (ACX_DEVICE); -1 chooses */
  const char *visible_devices; /* CUDA_VISIBLE_DEVICES value; NULL reads the environment */
  const char *cpuset; /* this rank's launcher mask (list string); NULL: acx_topo_process_cpuset */
  /* Optional: the launcher masks of all local_size ranks of the node, by local rank (the world
   * gathers them). With them the choice spreads ranks over the GPUs near each rank's mask
   * without two ranks of the same node picking the same GPU while another is idle. Entry
   * [local_rank] replaces `cpuset`. NULL entries mean unbound. */
  const char *const *peer_cpusets;
} acx_topo_request_t;
#define ACX_TOPO_REQUEST_INIT {sizeof(acx_topo_request_t), 0, 1, -1, NULL, NULL, NULL}

typedef struct acx_topo_binding {
  int local_rank;
  int gpu;                                 /* CUDA ordinal among the visible GPUs; -1: none */
  int gpu_index;                           /* machine (PCI order) index; -1: none */
  char pci_bus_id[ACX_TOPO_BUSID_STRLEN];  /* the chosen GPU's bus id, "" without a GPU; the
                                              executor opens the device by it */
  char gpu_cpuset[ACX_TOPO_CPUSET_STRLEN]; /* cores local to the chosen GPU ("" without one) */
  char cpuset[ACX_TOPO_CPUSET_STRLEN];     /* where to bind workers and the executor */
  int launcher_bound;                      /* 1: the launcher's mask restricted this rank */
  int numa_node;                           /* NUMA node local to the GPU, -1 if unknown */
} acx_topo_binding_t;

/* Chooses the GPU and cpuset of one local rank:
 *  - device >= 0 (ACX_DEVICE): that visible GPU; ACX_ERR_NO_DEVICE if there is no such ordinal.
 *  - otherwise the ranks of the node are dealt, in local-rank order, each to the least loaded
 *    visible GPU among those local to its launcher mask (all visible GPUs when the rank is not
 *    bound or no visible GPU is near its mask), ties going to PCI order; with no masks known that
 *    is local_rank % visible GPUs.
 *  - cpuset: the cores local to the GPU, narrowed to the launcher's mask when it was bound;
 *    when the launcher bound the rank away from its GPU its mask wins (logged at INFO).
 * No visible GPU is not an error: gpu = -1 and cpuset = the launcher mask (host device kind).
 * ACX_ERR_INVALID_ARG names a bad field (size, ranks, a malformed cpuset string); the statuses
 * of acx_topo_visible pass through. Any thread. */
acx_status_t acx_topo_choose(const acx_topo_t *topo, const acx_topo_request_t *req,
                             acx_topo_binding_t *binding);

/* Binds the calling thread to a cpuset list string (e.g. binding.cpuset). Works on this machine
 * whatever topology chose the set (it needs none). ACX_ERR_INVALID_ARG for a malformed or empty
 * set, ACX_ERR_SYSTEM when the OS refuses (CPUs outside the process's cgroup; errno logged).
 * Any thread, for itself. */
acx_status_t acx_topo_bind_thread(const char *cpuset);

/* One line for logs and acx-info: "local rank 1: GPU 1 (0000:3b:00.0, NUMA 0) cpuset 0-31
 * [launcher-bound]" or "local rank 0: no GPU (host device kind) cpuset 0-1". Returns buf. */
const char *acx_topo_binding_str(const acx_topo_binding_t *binding, char *buf, size_t len);

/* Prints the topology's view for acx-info --topo: the GPUs in PCI order with their cores,
 * CUDA_VISIBLE_DEVICES and the CUDA ordinals it gives, this process's mask, and the binding map
 * (GPU, bus id, cpuset) of local ranks 0..local_size-1, each computed as if bound like this
 * process. local_size <= 0 takes the launcher's local size (OMPI_COMM_WORLD_LOCAL_SIZE,
 * SLURM_NTASKS_PER_NODE, MPI_LOCALNRANKS) or else one rank per visible GPU. The launcher's local
 * rank of this process (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, MPI_LOCALRANKID), when known,
 * is marked. ACX_ERR_NULL_ARG; the statuses of acx_topo_choose. Any thread. */
acx_status_t acx_topo_print(const acx_topo_t *topo, int local_size, FILE *out);

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif
