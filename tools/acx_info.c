/* acx-info: version, build configuration and every ACX_* parameter with its value; the machine's
 * topology; under mpirun or srun, the job's rank -> node -> GPU map. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acx_build_config.h"
#include "acx/config.h"
#include "acx/topo.h"
#if ACX_HAVE_MPI
#include "acx/world.h"
#endif

static void usage(void) {
  printf("usage: acx-info [-p|--params] [-m|--markdown] [-t|--topo] [--map] [-h]\n"
         "  --map  under mpirun/srun: every rank's host, node, local rank and the GPU acx_world_init chose\n");
}

/* GPUs, cores and the binding map of this machine (or of HWLOC_XMLFILE). */
static int print_topo(void) {
  acx_topo_t *t = NULL;
  acx_status_t s = acx_topo_create(NULL, &t);
  if (s == ACX_OK) s = acx_topo_print(t, 0, stdout);
  acx_topo_destroy(t);
  if (s != ACX_OK) fprintf(stderr, "acx-info: topology: %s\n", acx_status_str(s));
  return s == ACX_OK ? 0 : 1;
}

/* The GPU architectures the CUDA kernels were compiled for (CMAKE_CUDA_ARCHITECTURES): a GPU that
 * none of them runs on cannot be opened. */
static void print_cuda_architectures(void) {
  printf("# cuda architectures: %s\n", ACX_HAVE_CUDA ? ACX_CUDA_ARCHITECTURES : "none (built without CUDA)");
}

#if ACX_HAVE_MPI
/* One rank's line of the map: what acx_world_init decided (topology and CUDA_VISIBLE_DEVICES, no
 * CUDA call) and the host it runs on. */
typedef struct map_entry {
  int node, nodes, local_rank, local_size, gpu;
  char host[64];
  char bus_id[ACX_TOPO_BUSID_STRLEN];
  char visible[64]; /* CUDA_VISIBLE_DEVICES, "(unset)" */
  char cpuset[ACX_TOPO_CPUSET_STRLEN];
  char sharing[64]; /* the other ranks on this GPU, "-" when none */
} map_entry_t;

static acx_status_t map_entry_fill(acx_world_t *w, map_entry_t *e) {
  acx_topo_binding_t b;
  memset(e, 0, sizeof *e);
  acx_status_t s = acx_world_node(w, &e->node, &e->nodes);
  if (s == ACX_OK) s = acx_world_local_rank(w, &e->local_rank);
  if (s == ACX_OK) s = acx_world_local_size(w, &e->local_size);
  if (s == ACX_OK) s = acx_world_binding(w, &b);
  if (s != ACX_OK) return s;
  gethostname(e->host, sizeof e->host - 1);
  e->gpu = b.gpu;
  snprintf(e->bus_id, sizeof e->bus_id, "%s", b.pci_bus_id);
  const char *vis = getenv("CUDA_VISIBLE_DEVICES");
  snprintf(e->visible, sizeof e->visible, "%s", vis ? vis : "(unset)");
  snprintf(e->cpuset, sizeof e->cpuset, "%s", b.cpuset);
  int peers[16], n = 0, me = 0;
  if ((s = acx_world_gpu_peers(w, peers, 16, &n)) != ACX_OK) return s;
  acx_world_rank(w, &me);
  size_t at = 0;
  snprintf(e->sharing, sizeof e->sharing, "-");
  for (int i = 0; i < n && i < 16 && at + 8 < sizeof e->sharing; i++)
    if (peers[i] != me) at += (size_t)snprintf(e->sharing + at, sizeof e->sharing - at, "%s%d", at ? "," : "", peers[i]);
  if (n > 16 && at + 4 < sizeof e->sharing) snprintf(e->sharing + at, sizeof e->sharing - at, ",...");
  return ACX_OK;
}

static void map_print(const map_entry_t *all, int size) {
  printf("# acx rank map: %d rank(s) on %d node(s); GPU: the CUDA ordinal among the rank's visible GPUs\n", size,
         all[0].nodes);
  printf("# %4s  %-20s %6s %7s  %-24s %-12s %-20s %s\n", "rank", "host", "node", "local", "GPU", "shared with",
         "CUDA_VISIBLE_DEVICES", "cpuset");
  for (int r = 0; r < size; r++) {
    const map_entry_t *e = &all[r];
    char dev[48];
    if (e->gpu >= 0)
      snprintf(dev, sizeof dev, "%d (%s)", e->gpu, e->bus_id);
    else
      snprintf(dev, sizeof dev, "none: host kind");
    char local[24];
    snprintf(local, sizeof local, "%d/%d", e->local_rank, e->local_size);
    printf("  %4d  %-20s %6d %7s  %-24s %-12s %-20s %s\n", r, e->host, e->node, local, dev, e->sharing, e->visible,
           e->cpuset);
  }
}

/* Every rank builds its world; rank 0 prints the map in rank order. Collective. */
static int print_map(void) {
  int provided = 0, rank = 0, size = 1;
  if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    fprintf(stderr, "acx-info --map: MPI_Init_thread failed\n");
    return 1;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  acx_log_set_rank(rank);
  acx_world_t *w = NULL;
  map_entry_t me, *all = rank == 0 ? calloc((size_t)size, sizeof *all) : NULL;
  acx_status_t s = acx_world_init(MPI_COMM_WORLD, NULL, &w);
  if (s == ACX_OK) s = map_entry_fill(w, &me);
  if (s == ACX_OK && rank == 0 && !all) s = ACX_ERR_NO_MEMORY;
  if (s != ACX_OK) fprintf(stderr, "acx-info --map: rank %d: %s\n", rank, acx_status_str(s));
  /* Print only when every rank has its entry; a failed rank's entry would be garbage. */
  int ok = s == ACX_OK, all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (all_ok) {
    MPI_Gather(&me, sizeof me, MPI_BYTE, all, sizeof me, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (rank == 0) map_print(all, size);
  }
  free(all);
  acx_world_finalize(w);
  MPI_Finalize();
  return all_ok ? 0 : 1;
}
#endif

/* The registry as a markdown table of defaults (never the values in effect, so the output does
 * not depend on the environment): docs/environment.md is generated from it and checked by a test. */
static void print_md_cell(const char *s) {
  for (; *s; s++) {
    if (*s == '|') putchar('\\'); /* a bar would end the cell */
    putchar(*s);
  }
}

static void print_markdown(void) {
  printf("| Variable | Type | Default | Description |\n|---|---|---|---|\n");
  for (size_t i = 0; i < acx_param_count(); i++) {
    acx_param_info_t p;
    if (acx_param_info(i, &p) != ACX_OK) continue;
    printf("| `%s` | %s | ", p.name, p.type == ACX_PARAM_INT ? "integer" : "string");
    if (*p.default_str) {
      putchar('`');
      print_md_cell(p.default_str);
      putchar('`');
    } else {
      printf("(empty)");
    }
    printf(" | ");
    print_md_cell(p.help);
    printf(" |\n");
  }
}

int main(int argc, char **argv) {
  int params_only = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-p") || !strcmp(argv[i], "--params")) {
      params_only = 1;
    } else if (!strcmp(argv[i], "-m") || !strcmp(argv[i], "--markdown")) {
      print_markdown();
      return 0;
    } else if (!strcmp(argv[i], "-t") || !strcmp(argv[i], "--topo")) {
      return print_topo();
    } else if (!strcmp(argv[i], "--map")) {
#if ACX_HAVE_MPI
      return print_map();
#else
      fprintf(stderr, "acx-info --map: this acx was built without MPI (no world to map)\n");
      return 1;
#endif
    } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      usage();
      return 0;
    } else {
      fprintf(stderr, "acx-info: unknown argument '%s'\n", argv[i]);
      usage();
      return 2;
    }
  }
  if (!params_only) {
    printf("# acx %s\n", acx_version(NULL));
    printf("# build: cuda=%s mpi=%s nccl=%s\n", ACX_HAVE_CUDA ? "yes" : "no",
           ACX_HAVE_MPI ? "yes" : "no", ACX_HAVE_NCCL ? "yes" : "no");
    print_cuda_architectures();
    printf("# parameters (value, [env] when set in the environment):\n");
  }
  for (size_t i = 0; i < acx_param_count(); i++) {
    acx_param_info_t p;
    if (acx_param_info(i, &p) != ACX_OK) continue;
    printf("%-24s = %-12s %s  # %s (default %s)\n", p.name, p.value_str, p.from_env ? "[env]" : "     ",
           p.help, p.default_str);
  }
  return 0;
}
