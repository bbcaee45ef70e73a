/* collectives/world.c under mpirun: ranks, node split, the per-node GPU choice on a recorded
 * topology, byte broadcasts, the NCCL unique id step, and the refusals (thread level, a launch
 * where MPI sees one process although the launcher started more).
 * Modes: no argument: the suite (any -np); --single: MPI_Init without threads must be refused;
 * --bad-launch: -np 1 with a launcher claiming 4 processes must be refused. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acx/world.h"
#include "acx_build_config.h"
#include "acx_test.h"
#include "acx_test_nodes.h"
#include "collectives/world_internal.h"

#define TWO_SOCKET ACX_TOPO_DATA_DIR "/2socket-4gpu.xml"

static int mpi_rank, mpi_size;

static void test_init_this_machine(void) {
  acx_world_t *w = NULL;
  ACX_ASSERT_STATUS(acx_world_init(MPI_COMM_WORLD, NULL, &w), ACX_OK);
  CU_ASSERT_PTR_NOT_NULL_FATAL(w);
  int rank = -1, size = -1, lr = -1, ls = -1, node = -1, nodes = -1;
  uint64_t epoch = 99;
  ACX_ASSERT_STATUS(acx_world_rank(w, &rank), ACX_OK);
  ACX_ASSERT_STATUS(acx_world_size(w, &size), ACX_OK);
  ACX_ASSERT_STATUS(acx_world_local_rank(w, &lr), ACX_OK);
  ACX_ASSERT_STATUS(acx_world_local_size(w, &ls), ACX_OK);
  ACX_ASSERT_STATUS(acx_world_node(w, &node, &nodes), ACX_OK);
  ACX_ASSERT_STATUS(acx_world_epoch(w, &epoch), ACX_OK);
  CU_ASSERT_EQUAL(rank, mpi_rank);
  CU_ASSERT_EQUAL(size, mpi_size);
  CU_ASSERT_EQUAL(epoch, 0);
  /* Independent check of the node split: every rank of one machine shares the node. */
  MPI_Comm shm;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shm);
  int shm_rank, shm_size;
  MPI_Comm_rank(shm, &shm_rank);
  MPI_Comm_size(shm, &shm_size);
  MPI_Comm_free(&shm);
  CU_ASSERT_EQUAL(lr, shm_rank);
  CU_ASSERT_EQUAL(ls, shm_size);
  int min_node = 0, max_node = 0;
  MPI_Allreduce(&node, &min_node, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&node, &max_node, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  CU_ASSERT(node >= 0 && node < nodes);
  if (ls == mpi_size) CU_ASSERT(nodes == 1 && min_node == 0 && max_node == 0);
  /* Node ids against host names, the launcher's local ranks and, on a simulated cluster, the
   * nodes it launched (tests/multinode). */
  CU_ASSERT_EQUAL(acx_test_check_nodes(w), nodes);
  /* The world's communicator is its own: same group, not the same handle. */
  MPI_Comm c;
  ACX_ASSERT_STATUS(acx_world_comm(w, &c), ACX_OK);
  int cmp = MPI_UNEQUAL;
  MPI_Comm_compare(c, MPI_COMM_WORLD, &cmp);
  CU_ASSERT_EQUAL(cmp, MPI_CONGRUENT);
  acx_topo_binding_t b;
  ACX_ASSERT_STATUS(acx_world_binding(w, &b), ACX_OK);
  CU_ASSERT_EQUAL(b.local_rank, lr);
  CU_ASSERT(b.cpuset[0] != '\0');
  ACX_ASSERT_STATUS(acx_world_finalize(w), ACX_OK);
}

static void binding_on_recorded_node(void) {
  /* The 4-GPU node: local ranks deal over its GPUs in PCI order, cores of the GPU's socket. */
  static const char *bus[4] = {"0000:18:00.0", "0000:3b:00.0", "0000:86:00.0", "0000:af:00.0"};
  static const char *cpus[4] = {"0-15,32-47", "0-15,32-47", "16-31,48-63", "16-31,48-63"};
  acx_world_config_t cfg = ACX_WORLD_CONFIG_INIT;
  cfg.topo_xml = TWO_SOCKET;
  acx_world_t *w = NULL;
  ACX_ASSERT_STATUS(acx_world_init(MPI_COMM_WORLD, &cfg, &w), ACX_OK);
  CU_ASSERT_PTR_NOT_NULL_FATAL(w);
  int lr = -1;
  acx_world_local_rank(w, &lr);
  acx_topo_binding_t b;
  ACX_ASSERT_STATUS(acx_world_binding(w, &b), ACX_OK);
  CU_ASSERT_EQUAL(b.gpu, lr % 4);
  CU_ASSERT_STRING_EQUAL(b.pci_bus_id, bus[lr % 4]);
  CU_ASSERT_STRING_EQUAL(b.cpuset, cpus[lr % 4]);
  /* No two ranks of the node on one GPU while another is idle (each node is the recorded one). */
  int gpus[64] = {0};
  int ls = 0;
  acx_world_local_size(w, &ls);
  MPI_Comm c, node_comm;
  acx_world_comm(w, &c);
  MPI_Comm_split_type(c, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node_comm);
  MPI_Allgather(&b.gpu, 1, MPI_INT, gpus, 1, MPI_INT, node_comm);
  MPI_Comm_free(&node_comm);
  for (int i = 0; i < ls && i < 4; i++)
    for (int j = 0; j < i; j++) CU_ASSERT_NOT_EQUAL(gpus[i], gpus[j]);
  ACX_ASSERT_STATUS(acx_world_finalize(w), ACX_OK);

  /* A forced device (ACX_DEVICE through the config) wins on every rank. */
  cfg.device = 2;
  ACX_ASSERT_STATUS(acx_world_init(MPI_COMM_WORLD, &cfg, &w), ACX_OK);
  ACX_ASSERT_STATUS(acx_world_binding(w, &b), ACX_OK);
  CU_ASSERT_STRING_EQUAL(b.pci_bus_id, "0000:86:00.0");
  ACX_ASSERT_STATUS(acx_world_finalize(w), ACX_OK);
  /* A device the node does not have fails on every rank, and nobody hangs. */
  cfg.device = 9;
  w = NULL;
  ACX_ASSERT_STATUS(acx_world_init(MPI_COMM_WORLD, &cfg, &w), ACX_ERR_NO_DEVICE);
  CU_ASSERT_PTR_NULL(w);
}

/* The recorded node is another machine: the GPUs a launcher made visible here (Slurm, or a
 * simulated cluster's per-node share) say nothing about it, so the choice is made with all of its
 * GPUs visible. */
static void test_binding_on_recorded_node(void) {
  const char *v = getenv("CUDA_VISIBLE_DEVICES");
  char *saved = v ? strdup(v) : NULL;
  unsetenv("CUDA_VISIBLE_DEVICES");
  binding_on_recorded_node();
  if (saved) setenv("CUDA_VISIBLE_DEVICES", saved, 1);
  free(saved);
}

static void test_bcast_and_nccl_id(void) {
  acx_world_t *w = NULL;
  ACX_ASSERT_STATUS(acx_world_init(MPI_COMM_WORLD, NULL, &w), ACX_OK);
  CU_ASSERT_PTR_NOT_NULL_FATAL(w);
  unsigned char buf[100];
  int root = mpi_size - 1;
  for (int i = 0; i < 100; i++) buf[i] = (unsigned char)(mpi_rank == root ? i * 7 + 1 : 0);
  ACX_ASSERT_STATUS(acxc_world_bcast_bytes(w, root, buf, sizeof buf), ACX_OK);
  for (int i = 0; i < 100; i++) CU_ASSERT_EQUAL(buf[i], (unsigned char)(i * 7 + 1));
  ACX_ASSERT_STATUS(acxc_world_bcast_bytes(w, mpi_size, buf, sizeof buf), ACX_ERR_INVALID_ARG);

  unsigned char id[ACXC_NCCL_ID_BYTES];
  memset(id, 0, sizeof id);
#if ACX_HAVE_NCCL
  ACX_ASSERT_STATUS(acxc_world_nccl_unique_id(w, 0, id), ACX_OK);
  int nonzero = 0;
  for (size_t i = 0; i < sizeof id; i++) nonzero |= id[i];
  CU_ASSERT(nonzero);
  /* Every rank holds the bytes rank 0 made. */
  unsigned char *all = malloc((size_t)mpi_size * sizeof id);
  CU_ASSERT_PTR_NOT_NULL_FATAL(all);
  MPI_Allgather(id, sizeof id, MPI_BYTE, all, sizeof id, MPI_BYTE, MPI_COMM_WORLD);
  for (int r = 1; r < mpi_size; r++) CU_ASSERT_EQUAL(memcmp(all, all + (size_t)r * sizeof id, sizeof id), 0);
  free(all);
  /* A second id differs from the first (NCCL ids carry a fresh random magic). */
  unsigned char id2[ACXC_NCCL_ID_BYTES];
  ACX_ASSERT_STATUS(acxc_world_nccl_unique_id(w, 0, id2), ACX_OK);
  CU_ASSERT_NOT_EQUAL(memcmp(id, id2, sizeof id), 0);
#else
  ACX_ASSERT_STATUS(acxc_world_nccl_unique_id(w, 0, id), ACX_ERR_NOT_SUPPORTED);
#endif
  ACX_ASSERT_STATUS(acx_world_finalize(w), ACX_OK);
}

static void test_bad_arguments(void) {
  acx_world_t *w = NULL;
  ACX_ASSERT_STATUS(acx_world_init(MPI_COMM_WORLD, NULL, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_world_init(MPI_COMM_NULL, NULL, &w), ACX_ERR_INVALID_ARG);
  acx_world_config_t cfg = ACX_WORLD_CONFIG_INIT;
  cfg.size = 4;
  ACX_ASSERT_STATUS(acx_world_init(MPI_COMM_WORLD, &cfg, &w), ACX_ERR_INVALID_ARG);
  cfg.size = sizeof cfg;
  cfg.topo_xml = ACX_TOPO_DATA_DIR "/missing.xml";
  ACX_ASSERT_STATUS(acx_world_init(MPI_COMM_WORLD, &cfg, &w), ACX_ERR_SYSTEM);
  CU_ASSERT_PTR_NULL(w);
  int r;
  ACX_ASSERT_STATUS(acx_world_rank(NULL, &r), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_world_finalize(NULL), ACX_OK);
}

static void test_launcher_size(void) {
  const char *var = NULL;
  setenv("SLURM_STEP_NUM_TASKS", "6", 1);
  CU_ASSERT(acxc_launcher_size(&var) >= 6);
  unsetenv("SLURM_STEP_NUM_TASKS");
  setenv("MV2_COMM_WORLD_SIZE", "not-a-number", 1);
  int n = acxc_launcher_size(&var);
  unsetenv("MV2_COMM_WORLD_SIZE");
  CU_ASSERT(n == 0 || strcmp(var, "MV2_COMM_WORLD_SIZE") != 0);
}

static int suite_main(void) {
  static const acx_test_case_t cases[] = {
      ACX_TEST(test_init_this_machine), ACX_TEST(test_binding_on_recorded_node), ACX_TEST(test_bcast_and_nccl_id),
      ACX_TEST(test_bad_arguments),     ACX_TEST(test_launcher_size),            ACX_TEST_END};
  int rc = acx_test_run("world", cases, NULL, NULL);
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  int provided = 0, rc = 0;
  if (strcmp(mode, "--single") == 0) {
    MPI_Init(&argc, &argv);
    MPI_Query_thread(&provided);
    acx_world_t *w = NULL;
    acx_status_t s = acx_world_init(MPI_COMM_WORLD, NULL, &w);
    printf("MPI thread level %d: acx_world_init -> %s\n", provided, acx_status_name(s));
    rc = provided < MPI_THREAD_MULTIPLE ? s != ACX_ERR_NOT_SUPPORTED : s != ACX_OK;
    acx_world_finalize(w);
  } else if (strcmp(mode, "--bad-launch") == 0) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_size(MPI_COMM_WORLD, &mpi_size);
    /* What srun without --mpi=pmix looks like from inside one of the four processes. */
    setenv("SLURM_STEP_NUM_TASKS", "4", 1);
    acx_world_t *w = NULL;
    acx_status_t s = acx_world_init(MPI_COMM_WORLD, NULL, &w);
    printf("MPI size %d, SLURM_STEP_NUM_TASKS=4: acx_world_init -> %s\n", mpi_size, acx_status_name(s));
    rc = mpi_size != 1 || s != ACX_ERR_BAD_LAUNCH || w != NULL;
    unsetenv("SLURM_STEP_NUM_TASKS");
    s = acx_world_init(MPI_COMM_WORLD, NULL, &w); /* the same process, honestly launched */
    printf("without the claim: acx_world_init -> %s\n", acx_status_name(s));
    rc |= s != ACX_OK;
    acx_world_finalize(w);
  } else {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &mpi_size);
    if (provided < MPI_THREAD_MULTIPLE) {
      printf("this MPI provides thread level %d < MPI_THREAD_MULTIPLE\n", provided);
      rc = 1; /* acx requires it; an MPI without it is a failed platform check, not a skip */
    } else {
      rc = suite_main();
    }
  }
  MPI_Finalize();
  return rc;
}
