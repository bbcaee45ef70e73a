/* GPU and core choice from hwloc PCI locality: GPUs in PCI order, CUDA_VISIBLE_DEVICES and the
 * launcher's mask applied, ranks dealt to GPUs near their mask, cpusets from the GPU's non-I/O
 * ancestor. No CUDA call anywhere, so recorded topologies exercise every path without a GPU. */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "runtime/base/log.h"
#include "runtime/base/param.h"
#include "runtime/device/topo.h"

/* The NVIDIA driver lists the GPUs this process may open here; in a container sysfs still shows
 * every GPU of the host, so PCI alone would count GPUs CUDA cannot see. */
#define NVIDIA_PROC_GPUS "/proc/driver/nvidia/gpus"

static int busid_cmp(const void *a, const void *b) {
  const struct hwloc_pcidev_attr_s *x = &((const acxi_topo_gpu_t *)a)->pci->attr->pcidev;
  const struct hwloc_pcidev_attr_s *y = &((const acxi_topo_gpu_t *)b)->pci->attr->pcidev;
  unsigned long kx = ((unsigned long)x->domain << 24) | ((unsigned long)x->bus << 16) | (x->dev << 8) | x->func;
  unsigned long ky = ((unsigned long)y->domain << 24) | ((unsigned long)y->bus << 16) | (y->dev << 8) | y->func;
  return kx < ky ? -1 : kx > ky;
}

static int driver_lists(DIR *d, const char *busid) {
  if (!d) return 1;
  rewinddir(d);
  for (struct dirent *e; (e = readdir(d));)
    if (strcasecmp(e->d_name, busid) == 0) return 1;
  return 0;
}

static void fill_gpu_info(const acx_topo_t *t, acxi_topo_gpu_t *g) {
  const struct hwloc_pcidev_attr_s *p = &g->pci->attr->pcidev;
  snprintf(g->info.pci_bus_id, sizeof g->info.pci_bus_id, "%04x:%02x:%02x.%01x", p->domain, p->bus, p->dev,
           p->func);
  g->info.vendor_id = p->vendor_id;
  g->info.device_id = p->device_id;
  hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t->hw, g->pci);
  hwloc_bitmap_copy(g->cpuset, anc && anc->cpuset ? anc->cpuset : hwloc_topology_get_topology_cpuset(t->hw));
  hwloc_bitmap_and(g->cpuset, g->cpuset, hwloc_topology_get_allowed_cpuset(t->hw));
  hwloc_bitmap_list_snprintf(g->info.cpuset, sizeof g->info.cpuset, g->cpuset);
  g->info.numa_node = anc && anc->nodeset && hwloc_bitmap_weight(anc->nodeset) == 1 ? hwloc_bitmap_first(anc->nodeset) : -1;
  for (hwloc_obj_t c = g->pci->io_first_child; c; c = c->next_sibling) {
    const char *uuid = c->type == HWLOC_OBJ_OS_DEVICE ? hwloc_obj_get_info_by_name(c, "NVIDIAUUID") : NULL;
    if (uuid) snprintf(g->info.uuid, sizeof g->info.uuid, "%s", uuid);
  }
}

static acx_status_t collect_gpus(acx_topo_t *t) {
  DIR *drv = t->thissystem ? opendir(NVIDIA_PROC_GPUS) : NULL;
  int n = 0;
  for (hwloc_obj_t o = NULL; (o = hwloc_get_next_pcidev(t->hw, o));)
    if (acxi_topo_is_nvidia_gpu(o->attr->pcidev.vendor_id, o->attr->pcidev.class_id)) n++;
  t->gpus = calloc(n ? (size_t)n : 1, sizeof *t->gpus);
  if (!t->gpus) {
    if (drv) closedir(drv);
    return ACX_ERR_NO_MEMORY;
  }
  for (hwloc_obj_t o = NULL; (o = hwloc_get_next_pcidev(t->hw, o));) {
    if (!acxi_topo_is_nvidia_gpu(o->attr->pcidev.vendor_id, o->attr->pcidev.class_id)) continue;
    acxi_topo_gpu_t *g = &t->gpus[t->ngpus];
    g->pci = o;
    if (!(g->cpuset = hwloc_bitmap_alloc())) {
      if (drv) closedir(drv);
      return ACX_ERR_NO_MEMORY;
    }
    fill_gpu_info(t, g);
    if (!driver_lists(drv, g->info.pci_bus_id)) {
      ACX_INFO(TOPO, "GPU %s is on PCI but not in %s: not usable from this process", g->info.pci_bus_id,
               NVIDIA_PROC_GPUS);
      hwloc_bitmap_free(g->cpuset);
      memset(g, 0, sizeof *g);
      continue;
    }
    t->ngpus++;
  }
  if (drv) closedir(drv);
  qsort(t->gpus, (size_t)t->ngpus, sizeof *t->gpus, busid_cmp);
  for (int i = 0; i < t->ngpus; i++) t->gpus[i].info.index = i;
  return ACX_OK;
}

acx_status_t acx_topo_create(const char *xml_path, acx_topo_t **topo) {
  ACX_CHECK_NULL(topo);
  *topo = NULL;
  acx_status_t res = ACX_ERR_SYSTEM;
  acx_topo_t *t = calloc(1, sizeof *t);
  if (!t) return ACX_ERR_NO_MEMORY;
  if (hwloc_topology_init(&t->hw) != 0) {
    ACX_WARN(TOPO, "hwloc_topology_init failed: %s", strerror(errno));
    goto err_free_topo;
  }
  hwloc_topology_set_io_types_filter(t->hw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (xml_path && hwloc_topology_set_xml(t->hw, xml_path) != 0) {
    ACX_WARN(TOPO, "cannot read topology XML '%s': %s", xml_path, strerror(errno));
    goto err_destroy_hwloc;
  }
  if (hwloc_topology_load(t->hw) != 0) {
    ACX_WARN(TOPO, "hwloc_topology_load%s%s failed: %s", xml_path ? " of " : "", xml_path ? xml_path : "",
             strerror(errno));
    goto err_destroy_hwloc;
  }
  t->thissystem = hwloc_topology_is_thissystem(t->hw);
  ACXCHECKGOTO(collect_gpus(t), res, err_free_gpus);
  ACX_INFO(TOPO, "topology %s: %d NVIDIA GPU(s)%s", xml_path ? xml_path : "of this machine", t->ngpus,
           t->thissystem ? "" : " (recorded, not this machine)");
  *topo = t;
  return ACX_OK;

err_free_gpus:
  for (int i = 0; i < t->ngpus; i++) hwloc_bitmap_free(t->gpus[i].cpuset);
  free(t->gpus);
err_destroy_hwloc:
  hwloc_topology_destroy(t->hw);
err_free_topo:
  free(t);
  return res;
}

void acx_topo_destroy(acx_topo_t *t) {
  if (!t) return;
  for (int i = 0; i < t->ngpus; i++) hwloc_bitmap_free(t->gpus[i].cpuset);
  free(t->gpus);
  hwloc_topology_destroy(t->hw);
  free(t);
}

acx_status_t acx_topo_gpu_count(const acx_topo_t *topo, int *count) {
  ACX_CHECK_NULL(topo);
  ACX_CHECK_NULL(count);
  *count = topo->ngpus;
  return ACX_OK;
}

acx_status_t acx_topo_gpu_get(const acx_topo_t *topo, int index, acx_topo_gpu_t *gpu) {
  ACX_CHECK_NULL(topo);
  ACX_CHECK_NULL(gpu);
  if (index < 0 || index >= topo->ngpus) return ACX_ERR_OUT_OF_RANGE;
  *gpu = topo->gpus[index].info;
  return ACX_OK;
}

/* One CUDA_VISIBLE_DEVICES entry: the GPU index, -1 when it names none (the list ends there). */
static acx_status_t visible_entry(const acx_topo_t *t, const char *tok, int *gpu) {
  *gpu = -1;
  if (strncasecmp(tok, "MIG-", 4) == 0) {
    ACX_WARN(TOPO, "CUDA_VISIBLE_DEVICES entry '%s' is a MIG instance: acx schedules whole GPUs only", tok);
    return ACX_ERR_NOT_SUPPORTED;
  }
  if (strncasecmp(tok, "GPU-", 4) == 0) {
    int with_uuid = 0, match = -1, matches = 0;
    for (int i = 0; i < t->ngpus; i++) {
      if (!t->gpus[i].info.uuid[0]) continue;
      with_uuid++;
      if (strncasecmp(t->gpus[i].info.uuid, tok, strlen(tok)) == 0) {
        match = i;
        matches++;
      }
    }
    if (!with_uuid && t->ngpus > 0) {
      ACX_WARN(TOPO, "CUDA_VISIBLE_DEVICES entry '%s' is a GPU UUID, but this topology has no GPU UUIDs "
               "(hwloc's NVML backend did not run: no NVIDIA driver here, or a recorded XML without it); "
               "use ordinals or ACX_DEVICE", tok);
      return ACX_ERR_NOT_SUPPORTED;
    }
    if (matches != 1)
      ACX_WARN(TOPO, "CUDA_VISIBLE_DEVICES entry '%s' matches %d GPUs: the visible list ends before it", tok, matches);
    *gpu = matches == 1 ? match : -1;
    return ACX_OK;
  }
  char *end;
  errno = 0;
  long v = strtol(tok, &end, 10);
  if (errno || end == tok || *end != '\0' || v < 0 || v >= t->ngpus) {
    ACX_WARN(TOPO, "CUDA_VISIBLE_DEVICES entry '%s' names no GPU (%d on this machine): the visible list ends "
             "before it", tok, t->ngpus);
    return ACX_OK;
  }
  *gpu = (int)v;
  return ACX_OK;
}

acx_status_t acx_topo_visible(const acx_topo_t *topo, const char *visible, int *index, int max, int *count) {
  ACX_CHECK_NULL(topo);
  ACX_CHECK_NULL(count);
  ACX_CHECK_ARG(max >= 0 && (index || max == 0), "acx_topo_visible: index is NULL or max (%d) < 0", max);
  *count = 0;
  if (!visible) visible = getenv("CUDA_VISIBLE_DEVICES");
  if (!visible) {
    for (int i = 0; i < topo->ngpus; i++)
      if (i < max) index[(*count)++] = i;
      else (*count)++;
    return ACX_OK;
  }
  char buf[1024];
  ACX_CHECK_ARG(strlen(visible) < sizeof buf, "CUDA_VISIBLE_DEVICES is longer than %zu characters", sizeof buf - 1);
  snprintf(buf, sizeof buf, "%s", visible);
  unsigned char seen[256] = {0}; /* GPUs per node stay far below this; entries beyond it end the list */
  char *save = NULL;
  for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    while (isspace((unsigned char)*tok)) tok++;
    for (char *e = tok + strlen(tok); e > tok && isspace((unsigned char)e[-1]);) *--e = '\0';
    int gpu;
    ACXCHECK(visible_entry(topo, tok, &gpu));
    if (gpu < 0 || gpu >= (int)sizeof seen) break;
    if (seen[gpu]) {
      ACX_WARN(TOPO, "CUDA_VISIBLE_DEVICES names GPU %d twice: the visible list ends before the repeat", gpu);
      break;
    }
    seen[gpu] = 1;
    if (*count < max) index[*count] = gpu;
    (*count)++;
  }
  return ACX_OK;
}

/* The process mask as a bitmap (caller frees); *bound as in acx_topo_process_cpuset. */
static hwloc_bitmap_t process_mask(const acx_topo_t *t, int *bound) {
  hwloc_const_bitmap_t allowed = hwloc_topology_get_allowed_cpuset(t->hw);
  hwloc_bitmap_t set = hwloc_bitmap_dup(allowed);
  *bound = 0;
  if (!set || !t->thissystem) return set;
  if (hwloc_get_cpubind(t->hw, set, HWLOC_CPUBIND_PROCESS) != 0) {
    ACX_INFO(TOPO, "hwloc_get_cpubind failed (%s): taking the process as unbound", strerror(errno));
    hwloc_bitmap_copy(set, allowed);
  }
  hwloc_bitmap_and(set, set, allowed);
  *bound = !hwloc_bitmap_iszero(set) && !hwloc_bitmap_isincluded(allowed, set);
  return set;
}

acx_status_t acx_topo_process_cpuset(const acx_topo_t *topo, char *buf, size_t len, int *bound) {
  ACX_CHECK_NULL(topo);
  ACX_CHECK_NULL(buf);
  int b = 0;
  hwloc_bitmap_t set = process_mask(topo, &b);
  if (!set) return ACX_ERR_NO_MEMORY;
  int n = hwloc_bitmap_list_snprintf(buf, len, set);
  hwloc_bitmap_free(set);
  if (bound) *bound = b;
  return n < 0 || (size_t)n >= len ? ACX_ERR_OVERFLOW : ACX_OK;
}

/* A launcher mask given as text; NULL text means unbound. */
static acx_status_t parse_mask(const acx_topo_t *t, const char *text, const char *what, hwloc_bitmap_t set,
                               int *bound) {
  hwloc_const_bitmap_t allowed = hwloc_topology_get_allowed_cpuset(t->hw);
  *bound = 0;
  if (!text) {
    hwloc_bitmap_copy(set, allowed);
    return ACX_OK;
  }
  if (hwloc_bitmap_list_sscanf(set, text) != 0) {
    ACX_WARN(TOPO, "%s '%s' is not a cpuset list (e.g. 0-15,32-47)", what, text);
    return ACX_ERR_INVALID_ARG;
  }
  hwloc_bitmap_and(set, set, allowed);
  if (hwloc_bitmap_iszero(set)) {
    ACX_WARN(TOPO, "%s '%s' holds none of this topology's cores", what, text);
    return ACX_ERR_INVALID_ARG;
  }
  *bound = !hwloc_bitmap_isincluded(allowed, set);
  return ACX_OK;
}

/* The visible GPU (position in vis) a rank with this mask gets, given the load so far. */
static int pick_gpu(const acx_topo_t *t, const int *vis, int nvis, hwloc_const_bitmap_t mask, int bound,
                    const int *load) {
  int best = -1;
  for (int pass = 0; pass < 2 && best < 0; pass++) /* pass 0: GPUs near the mask; 1: any GPU */
    for (int k = 0; k < nvis; k++) {
      if (pass == 0 && !(bound && hwloc_bitmap_intersects(t->gpus[vis[k]].cpuset, mask))) continue;
      if (best < 0 || load[k] < load[best]) best = k;
    }
  return best;
}

acx_status_t acx_topo_choose(const acx_topo_t *topo, const acx_topo_request_t *req, acx_topo_binding_t *binding) {
  ACX_CHECK_NULL(topo);
  ACX_CHECK_NULL(req);
  ACX_CHECK_NULL(binding);
  ACX_CHECK_ARG(req->size >= sizeof(acx_topo_request_t), "acx_topo_choose: req->size %zu is not "
                "sizeof(acx_topo_request_t) (use ACX_TOPO_REQUEST_INIT)", req->size);
  ACX_CHECK_ARG(req->local_rank >= 0 && req->local_size > req->local_rank,
                "acx_topo_choose: req->local_rank %d is not in [0, req->local_size %d)", req->local_rank,
                req->local_size);
  memset(binding, 0, sizeof *binding);
  binding->local_rank = req->local_rank;
  binding->gpu = binding->gpu_index = binding->numa_node = -1;

  int *vis = calloc((size_t)topo->ngpus + 1, sizeof *vis);
  int *load = calloc((size_t)topo->ngpus + 1, sizeof *load);
  hwloc_bitmap_t mask = hwloc_bitmap_alloc(), peer = hwloc_bitmap_alloc(), set = hwloc_bitmap_alloc();
  acx_status_t res = ACX_ERR_NO_MEMORY;
  int nvis = 0, bound = 0;
  if (!vis || !load || !mask || !peer || !set) goto err_free_sets;
  ACXCHECKGOTO(acx_topo_visible(topo, req->visible_devices, vis, topo->ngpus, &nvis), res, err_free_sets);
  if (nvis > topo->ngpus) nvis = topo->ngpus;

  const char *own = req->peer_cpusets ? req->peer_cpusets[req->local_rank] : req->cpuset;
  if (own || req->peer_cpusets) {
    ACXCHECKGOTO(parse_mask(topo, own, "launcher cpuset", mask, &bound), res, err_free_sets);
  } else {
    hwloc_bitmap_t pm = process_mask(topo, &bound);
    if (!pm) goto err_free_sets;
    hwloc_bitmap_copy(mask, pm);
    hwloc_bitmap_free(pm);
  }
  binding->launcher_bound = bound;

  if (nvis == 0) {
    hwloc_bitmap_list_snprintf(binding->cpuset, sizeof binding->cpuset, mask);
    res = ACX_OK;
    goto err_free_sets;
  }
  int k;
  if (req->device >= 0) {
    if (req->device >= nvis) {
      ACX_WARN(TOPO, "device %d was asked for (ACX_DEVICE), but %d GPU(s) are visible", req->device, nvis);
      res = ACX_ERR_NO_DEVICE;
      goto err_free_sets;
    }
    k = req->device;
  } else if (req->peer_cpusets) {
    k = -1;
    for (int r = 0; r <= req->local_rank; r++) {
      int pb = bound;
      if (r != req->local_rank)
        ACXCHECKGOTO(parse_mask(topo, req->peer_cpusets[r], "peer launcher cpuset", peer, &pb), res, err_free_sets);
      k = pick_gpu(topo, vis, nvis, r == req->local_rank ? mask : peer, pb, load);
      load[k]++;
    }
  } else {
    /* Without the peers' masks, assume they look like ours: deal among the GPUs near it. */
    int near[256], nnear = 0;
    for (int j = 0; j < nvis && nnear < 256; j++)
      if (bound && hwloc_bitmap_intersects(topo->gpus[vis[j]].cpuset, mask)) near[nnear++] = j;
    k = nnear ? near[req->local_rank % nnear] : req->local_rank % nvis;
  }

  const acxi_topo_gpu_t *g = &topo->gpus[vis[k]];
  binding->gpu = k;
  binding->gpu_index = vis[k];
  binding->numa_node = g->info.numa_node;
  snprintf(binding->pci_bus_id, sizeof binding->pci_bus_id, "%s", g->info.pci_bus_id);
  snprintf(binding->gpu_cpuset, sizeof binding->gpu_cpuset, "%s", g->info.cpuset);
  hwloc_bitmap_copy(set, g->cpuset);
  if (bound) hwloc_bitmap_and(set, set, mask);
  if (hwloc_bitmap_iszero(set)) {
    ACX_INFO(TOPO, "local rank %d: the launcher bound it away from GPU %d (%s, cores %s): keeping its mask",
             req->local_rank, k, g->info.pci_bus_id, g->info.cpuset);
    hwloc_bitmap_copy(set, mask);
  }
  if (hwloc_bitmap_list_snprintf(binding->cpuset, sizeof binding->cpuset, set) >= (int)sizeof binding->cpuset)
    res = ACX_ERR_OVERFLOW;
  else
    res = ACX_OK;

err_free_sets:
  hwloc_bitmap_free(set);
  hwloc_bitmap_free(peer);
  hwloc_bitmap_free(mask);
  free(load);
  free(vis);
  return res;
}

acx_status_t acx_topo_bind_thread(const char *cpuset) {
  ACX_CHECK_NULL(cpuset);
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  if (!set) return ACX_ERR_NO_MEMORY;
  acx_status_t res = ACX_ERR_INVALID_ARG;
  if (hwloc_bitmap_list_sscanf(set, cpuset) != 0 || hwloc_bitmap_iszero(set) || hwloc_bitmap_last(set) < 0) {
    ACX_WARN(TOPO, "acx_topo_bind_thread: cpuset '%s' is not a finite, non-empty cpuset list", cpuset);
    goto err_free_set;
  }
  int ncpu = hwloc_bitmap_last(set) + 1;
  cpu_set_t *cs = CPU_ALLOC((size_t)ncpu);
  res = ACX_ERR_NO_MEMORY;
  if (!cs) goto err_free_set;
  size_t sz = CPU_ALLOC_SIZE((size_t)ncpu);
  CPU_ZERO_S(sz, cs);
  int i;
  hwloc_bitmap_foreach_begin(i, set) CPU_SET_S((size_t)i, sz, cs);
  hwloc_bitmap_foreach_end();
  int rc = pthread_setaffinity_np(pthread_self(), sz, cs);
  CPU_FREE(cs);
  if (rc != 0) {
    ACX_WARN(TOPO, "pthread_setaffinity_np(%s) failed: %s", cpuset, strerror(rc));
    res = ACX_ERR_SYSTEM;
    goto err_free_set;
  }
  ACX_TRACE(TOPO, "thread bound to cores %s", cpuset);
  res = ACX_OK;
err_free_set:
  hwloc_bitmap_free(set);
  return res;
}

const char *acx_topo_binding_str(const acx_topo_binding_t *b, char *buf, size_t len) {
  if (!buf || len == 0) return buf;
  if (!b) {
    snprintf(buf, len, "(no binding)");
  } else if (b->gpu < 0) {
    snprintf(buf, len, "local rank %d: no GPU (host device kind) cpuset %s%s", b->local_rank, b->cpuset,
             b->launcher_bound ? " [launcher-bound]" : "");
  } else {
    char numa[24] = "";
    if (b->numa_node >= 0) snprintf(numa, sizeof numa, ", NUMA %d", b->numa_node);
    snprintf(buf, len, "local rank %d: GPU %d (%s%s) cpuset %s%s", b->local_rank, b->gpu, b->pci_bus_id, numa,
             b->cpuset, b->launcher_bound ? " [launcher-bound]" : "");
  }
  return buf;
}

/* The first of the launcher's variables that holds a number >= 0, or -1. */
static int launcher_int(const char *const *vars) {
  for (; *vars; vars++) {
    const char *v = getenv(*vars);
    char *end;
    long n = v ? strtol(v, &end, 10) : -1;
    if (v && end != v && *end == '\0' && n >= 0 && n < (1L << 20)) return (int)n;
  }
  return -1;
}

acx_status_t acx_topo_print(const acx_topo_t *t, int local_size, FILE *out) {
  static const char *const size_vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE", "MPI_LOCALNRANKS", NULL};
  static const char *const rank_vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID", NULL};
  ACX_CHECK_NULL_AS(t, "topo");
  ACX_CHECK_NULL(out);
  fprintf(out, "# topology: %s\n", t->thissystem ? "this machine" : "recorded (HWLOC_XMLFILE or XML), not this machine");
  fprintf(out, "# NVIDIA GPUs in PCI order: %d\n", t->ngpus);
  for (int i = 0; i < t->ngpus; i++) {
    const acx_topo_gpu_t *g = &t->gpus[i].info;
    fprintf(out, "#   %d  %s  [%04x:%04x]  NUMA %d  cores %s%s%s\n", i, g->pci_bus_id, g->vendor_id, g->device_id,
            g->numa_node, g->cpuset, g->uuid[0] ? "  " : "", g->uuid);
  }
  const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
  int *vis = calloc((size_t)t->ngpus + 1, sizeof *vis), nvis = 0;
  if (!vis) return ACX_ERR_NO_MEMORY;
  acx_status_t res = acx_topo_visible(t, NULL, vis, t->ngpus, &nvis);
  if (res != ACX_OK) goto err_free_vis;
  fprintf(out, "# CUDA_VISIBLE_DEVICES: %s%s%s -> %d visible:", cvd ? "\"" : "", cvd ? cvd : "unset", cvd ? "\"" : "", nvis);
  for (int k = 0; k < nvis && k < t->ngpus; k++) fprintf(out, " cuda%d=GPU%d", k, vis[k]);
  fprintf(out, "\n");
  char mask[ACX_TOPO_CPUSET_STRLEN];
  int bound = 0;
  if ((res = acx_topo_process_cpuset(t, mask, sizeof mask, &bound)) != ACX_OK) goto err_free_vis;
  fprintf(out, "# process cpuset: %s (%s)\n", mask, bound ? "bound by the launcher" : "unbound");
  if (local_size <= 0) local_size = launcher_int(size_vars);
  if (local_size <= 0) local_size = nvis > 0 ? nvis : 1;
  int me = launcher_int(rank_vars);
  fprintf(out, "# binding map, %d local rank(s), each bound like this process:\n", local_size);
  for (int lr = 0; lr < local_size; lr++) {
    acx_topo_request_t req = ACX_TOPO_REQUEST_INIT;
    acx_topo_binding_t b;
    char line[ACX_TOPO_CPUSET_STRLEN + 128];
    req.local_rank = lr;
    req.local_size = local_size;
    req.cpuset = bound ? mask : NULL;
    req.device = (int)acxi_param_int("ACX_DEVICE");
    if ((res = acx_topo_choose(t, &req, &b)) != ACX_OK) goto err_free_vis;
    fprintf(out, "#   %s%s\n", acx_topo_binding_str(&b, line, sizeof line), lr == me ? "   <- this process" : "");
  }
err_free_vis:
  free(vis);
  return res;
}
