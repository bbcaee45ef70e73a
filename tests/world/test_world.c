/* collectives/world.c under mpirun: ranks, node split, the per-node GPU choice on a recorded
 * topology, byte broadcasts, the NCCL unique id step, and the refusals (thread level, a launch
 * where MPI sees one process although the launcher started more, a second world on a rank), the
 * token identity a world gives this rank's exports (right rank, an epoch that never moves back).
 * Modes: no argument: the suite (any -np); --single: MPI_Init without threads must be refused;
 * --bad-launch: -np 1 with a launcher claiming 4 processes must be refused; --late-rank (-np >= 2,
 * ACX_WORLD_TIMEOUT=1000): the last rank calls acx_world_init 5 s late and the others must
 * return ACX_ERR_TIMEOUT within the deadline. */
#include <mpi.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acx/rebuild.h"
#include "acx/remote.h"
#include "acx/token.h"
#include "acx/world.h"
#include "acx_build_config.h"
#include "acx_test.h"
#include "acx_test_nodes.h"
#include "collectives/coll_internal.h"
#include "collectives/world_internal.h"
#include "acx/device.h"
#include "acx/actor.h"
#include "runtime/base/clock.h"
#include "runtime/base/param.h"

#define TWO_SOCKET ACX_TOPO_DATA_DIR "/2socket-4gpu.xml"
#define T_LONG 30000000000LL

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

/* 1 when this node runs at most `n` ranks (MPI_COMM_TYPE_SHARED). */
static int ls_all_at_most(int n) {
  MPI_Comm nc;
  int size = 0;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &nc);
  MPI_Comm_size(nc, &size);
  MPI_Comm_free(&nc);
  return size <= n;
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
  /* One rank per GPU up to 4 ranks a node; past 4 the node's ranks share (dealt in turn). */
  int peers[64], n_peers = 0;
  ACX_ASSERT_STATUS(acx_world_gpu_peers(w, peers, 64, &n_peers), ACX_OK);
  CU_ASSERT(n_peers >= 1);
  if (ls_all_at_most(4)) CU_ASSERT_EQUAL(n_peers, 1);
  CU_ASSERT(n_peers >= 1 && (peers[0] == mpi_rank || n_peers > 1));
  ACX_ASSERT_STATUS(acx_world_gpu_peers(w, NULL, 0, &n_peers), ACX_OK);
  ACX_ASSERT_STATUS(acx_world_gpu_peers(w, NULL, 4, &n_peers), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_world_gpu_peers(w, peers, 4, NULL), ACX_ERR_NULL_ARG);
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
  /* ... so every rank of a node is on that one GPU: each sees all of its node's ranks as sharers
   * (issue 16: the world discovers which ranks share a GPU). */
  int sharers[64], n_sharers = 0, node_ranks[64];
  ACX_ASSERT_STATUS(acx_world_gpu_peers(w, sharers, 64, &n_sharers), ACX_OK);
  CU_ASSERT_EQUAL(n_sharers, ls);
  MPI_Comm nc;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &nc);
  MPI_Allgather(&mpi_rank, 1, MPI_INT, node_ranks, 1, MPI_INT, nc);
  MPI_Comm_free(&nc);
  for (int i = 0; i < n_sharers && i < ls; i++) CU_ASSERT_EQUAL(sharers[i], node_ranks[i]);
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

  /* The NCCL id: rank 0's executor makes it (a host-kind one too: ncclGetUniqueId needs no GPU),
   * MPI carries it to every rank; the rank library itself loads no NCCL. */
  unsigned char id[ACXC_NCCL_ID_BYTES];
  memset(id, 0, sizeof id);
  acx_system_t *sys = NULL;
  acx_device_t *dev = NULL;
  acx_host_mem_t *region = NULL;
  ACX_ASSERT_STATUS(acx_system_create(NULL, &sys), ACX_OK);
  acx_device_config_t dcfg = ACX_DEVICE_CONFIG_INIT;
  dcfg.kind = ACX_DEVICE_KIND_HOST;
  ACX_ASSERT_STATUS(acx_device_open(sys, &dcfg, &dev), ACX_OK);
  ACX_ASSERT_STATUS(acx_host_alloc(dev, sizeof(acxc_region_t), &region), ACX_OK);
  void *p = NULL;
  size_t pbytes = 0;
  ACX_ASSERT_STATUS(acx_host_mem_ptr(region, &p, &pbytes), ACX_OK);
  acxc_region_t *reg = p;
  memset(reg, 0, offsetof(acxc_region_t, slots));
  reg->magic = ACXC_REGION_MAGIC;
#if ACX_HAVE_NCCL
  acx_status_t made = mpi_rank == 0 ? acxc_nccl_make_id(dev, region) : ACX_OK;
  CU_ASSERT_EQUAL(made, ACX_OK);
  if (mpi_rank == 0) memcpy(id, reg->nccl_id, sizeof id);
  ACX_ASSERT_STATUS(acxc_world_bcast_nccl_id(w, 0, made, id), ACX_OK);
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
  made = mpi_rank == 0 ? acxc_nccl_make_id(dev, region) : ACX_OK;
  if (mpi_rank == 0) memcpy(id2, reg->nccl_id, sizeof id2);
  ACX_ASSERT_STATUS(acxc_world_bcast_nccl_id(w, 0, made, id2), ACX_OK);
  CU_ASSERT_NOT_EQUAL(memcmp(id, id2, sizeof id), 0);
#else
  ACX_ASSERT_STATUS(acxc_nccl_make_id(dev, region), ACX_ERR_NOT_SUPPORTED);
#endif
  /* The root's failure reaches every rank: nobody waits for an id that will not come. */
  ACX_ASSERT_STATUS(acxc_world_bcast_nccl_id(w, 0, ACX_ERR_NCCL, id), ACX_ERR_NCCL);
  acx_host_free(region);
  ACX_ASSERT_STATUS(acx_device_close(dev, 10000000000LL), ACX_OK);
  ACX_ASSERT_STATUS(acx_system_destroy(sys, 10000000000LL), ACX_OK);
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
  cfg.timeout_ms = -1;
  ACX_ASSERT_STATUS(acx_world_init(MPI_COMM_WORLD, &cfg, &w), ACX_ERR_INVALID_ARG);
  cfg.timeout_ms = 0;
  cfg.topo_xml = ACX_TOPO_DATA_DIR "/missing.xml";
  ACX_ASSERT_STATUS(acx_world_init(MPI_COMM_WORLD, &cfg, &w), ACX_ERR_SYSTEM);
  CU_ASSERT_PTR_NULL(w);
  /* A config of the first layout (before timeout_ms) is still read. */
  cfg.topo_xml = NULL;
  cfg.size = offsetof(acx_world_config_t, timeout_ms);
  ACX_ASSERT_STATUS(acx_world_init(MPI_COMM_WORLD, &cfg, &w), ACX_OK);
  ACX_ASSERT_STATUS(acx_world_finalize(w), ACX_OK);
  /* Only the live world can be finalized: not twice, not something else. */
  ACX_ASSERT_STATUS(acx_world_finalize(w), ACX_ERR_INVALID_STATE);
  int not_a_world = 0;
  ACX_ASSERT_STATUS(acx_world_finalize((acx_world_t *)&not_a_world), ACX_ERR_INVALID_STATE);
  w = NULL;
  int r;
  ACX_ASSERT_STATUS(acx_world_rank(NULL, &r), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_world_finalize(NULL), ACX_OK);
}

/* A NULL config is the defaults (ACX_WORLD_CONFIG_INIT); a getter's NULL output is logged under
 * acx/world.h's parameter name (issue 15 item 6: acx_world_rank(world, NULL) blamed 'out'). */
static void test_log_names(void) {
  acx_world_t *w = NULL;
  ACX_ASSERT_STATUS(acx_world_init(MPI_COMM_WORLD, NULL, &w), ACX_OK);
  acx_test_log_begin();
  acx_status_t rank = acx_world_rank(w, NULL), size = acx_world_size(w, NULL), epoch = acx_world_epoch(w, NULL);
  acx_status_t ready = acx_world_wait_ready(NULL, 0);
  char *log = acx_test_log_end();
  CU_ASSERT_EQUAL(rank, ACX_ERR_NULL_ARG);
  CU_ASSERT_EQUAL(size, ACX_ERR_NULL_ARG);
  CU_ASSERT_EQUAL(epoch, ACX_ERR_NULL_ARG);
  CU_ASSERT_EQUAL(ready, ACX_ERR_NULL_ARG);
  CU_ASSERT(strstr(log, "acx_world_rank: argument 'rank' is NULL") != NULL);
  CU_ASSERT(strstr(log, "acx_world_size: argument 'size' is NULL") != NULL);
  CU_ASSERT(strstr(log, "acx_world_epoch: argument 'epoch' is NULL") != NULL);
  CU_ASSERT(strstr(log, "acx_world_wait_ready: argument 'world' is NULL") != NULL);
  CU_ASSERT(strstr(log, "'out'") == NULL);
  CU_ASSERT(strstr(log, "wait_for") == NULL);
  if (mpi_rank == 0) printf("\n    captured:\n%s", log);
  free(log);
  ACX_ASSERT_STATUS(acx_world_finalize(w), ACX_OK);
}

/* A host-kind device in its own actor system, for the tests that export buffers. */
typedef struct {
  acx_system_t *sys;
  acx_device_t *dev;
} host_dev_t;

static int host_dev_open(host_dev_t *h) {
  h->sys = NULL;
  h->dev = NULL;
  acx_status_t s = acx_system_create(NULL, &h->sys);
  if (s == ACX_OK) {
    acx_device_config_t dc = ACX_DEVICE_CONFIG_INIT;
    dc.kind = ACX_DEVICE_KIND_HOST;
    s = acx_device_open(h->sys, &dc, &h->dev);
  }
  if (s != ACX_OK) fprintf(stderr, "rank %d: host device: %s\n", mpi_rank, acx_status_str(s));
  int ok = s == ACX_OK, all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all;
}

static void host_dev_close(host_dev_t *h) {
  if (h->dev) ACX_ASSERT_STATUS(acx_device_close(h->dev, T_LONG), ACX_OK);
  if (h->sys) ACX_ASSERT_STATUS(acx_system_destroy(h->sys, T_LONG), ACX_OK);
}

static unsigned char pattern(int owner, size_t i) { return (unsigned char)(owner * 53 + i * 7 + 1); }

/* Regression (issue 12, item 6): a second acx_world_init on a rank returned ACX_OK with a second
 * world, and that world's finalize reset the token identity to rank 0, epoch 0: the first world's
 * new exports then named rank 0 and gets through them went to the wrong rank. */
static void test_world_second_init_refused(void) {
  acx_world_t *w = NULL, *w2 = NULL;
  ACX_ASSERT_STATUS(acx_world_init(MPI_COMM_WORLD, NULL, &w), ACX_OK);
  CU_ASSERT_PTR_NOT_NULL_FATAL(w);
  int node = -1;
  uint64_t epoch = 0;
  acx_world_node(w, &node, NULL);
  acx_world_epoch(w, &epoch);
  acx_status_t s = acx_world_init(MPI_COMM_WORLD, NULL, &w2);
  CU_ASSERT_EQUAL(s, ACX_ERR_INVALID_STATE);
  CU_ASSERT_PTR_NULL(w2);
  /* What an application does with the world it was handed; harmless once none is handed out. */
  if (w2) acx_world_finalize(w2);
  /* Refused again: the refusal changed nothing. */
  CU_ASSERT_EQUAL(acx_world_init(MPI_COMM_WORLD, NULL, &w2), ACX_ERR_INVALID_STATE);
  if (w2) acx_world_finalize(w2);

  host_dev_t h;
  if (!host_dev_open(&h)) {
    CU_FAIL("no host device on every rank");
    host_dev_close(&h);
    acx_world_finalize(w);
    return;
  }
  const size_t n = 4096;
  unsigned char host[4096], back[4096];
  for (size_t i = 0; i < n; i++) host[i] = pattern(mpi_rank, i);
  acx_buffer_t *mine = NULL, *local = NULL;
  ACX_ASSERT_STATUS(acx_buffer_alloc(h.dev, n, ACX_DTYPE_BYTE, ACX_MEM_DEVICE, T_LONG, &mine), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_alloc(h.dev, n, ACX_DTYPE_BYTE, ACX_MEM_DEVICE, T_LONG, &local), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_write(mine, 0, host, n, 0, T_LONG), ACX_OK);
  acx_token_t tok;
  ACX_ASSERT_STATUS(acx_buffer_export(mine, ACX_TOKEN_READ, &tok), ACX_OK);
  /* The export names this rank of the live world, at its epoch. */
  CU_ASSERT_EQUAL(tok.owner_rank, mpi_rank);
  CU_ASSERT_EQUAL(tok.node, node);
  CU_ASSERT_EQUAL(tok.epoch, epoch);

  /* A get through the right neighbour's token reaches the right neighbour: its bytes come back. */
  int rs = acx_remote_start(w), all_started = 0, ok = rs == ACX_OK;
  MPI_Allreduce(&ok, &all_started, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  CU_ASSERT_EQUAL(rs, ACX_OK);
  if (all_started) {
    unsigned char enc[ACX_TOKEN_BYTES], *encs = malloc((size_t)mpi_size * ACX_TOKEN_BYTES);
    CU_ASSERT_PTR_NOT_NULL_FATAL(encs);
    ACX_ASSERT_STATUS(acx_token_encode(&tok, enc, sizeof enc, NULL), ACX_OK);
    MPI_Allgather(enc, ACX_TOKEN_BYTES, MPI_BYTE, encs, ACX_TOKEN_BYTES, MPI_BYTE, MPI_COMM_WORLD);
    int right = (mpi_rank + 1) % mpi_size;
    acx_token_t rt;
    ACX_ASSERT_STATUS(acx_token_decode(encs + (size_t)right * ACX_TOKEN_BYTES, ACX_TOKEN_BYTES, &rt), ACX_OK);
    free(encs);
    CU_ASSERT_EQUAL(rt.owner_rank, right);
    memset(back, 0, n);
    CU_ASSERT_EQUAL(acx_token_get_sync(w, &rt, 0, n, local, 0, -1), ACX_OK);
    CU_ASSERT_EQUAL(acx_buffer_read(local, 0, back, n, 0, T_LONG), ACX_OK);
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++) wrong += back[i] != pattern(right, i);
    CU_ASSERT_EQUAL(wrong, 0);
    MPI_Barrier(MPI_COMM_WORLD); /* every get served before any rank stops serving */
  }
  /* Remote access still runs (its progress thread reads the world): finalize refuses, nothing done. */
  if (rs == ACX_OK) CU_ASSERT_EQUAL(acx_world_finalize(w), ACX_ERR_INVALID_STATE);
  if (rs == ACX_OK) CU_ASSERT_EQUAL(acx_remote_stop(w, T_LONG), ACX_OK);
  acx_buffer_unexport(mine);
  acx_buffer_release(mine);
  acx_buffer_release(local);
  host_dev_close(&h);
  ACX_ASSERT_STATUS(acx_world_finalize(w), ACX_OK);
}

/* Regression (issue 12, item 6): a token made stale by a rebuild became valid again once its world
 * was finalized and a new one made (the epoch went back to 0). Epochs only move forward in a
 * process: tokens of an earlier world stay stale in every later one. */
static void test_world_stale_token_across_reinit(void) {
  acx_world_t *w = NULL;
  ACX_ASSERT_STATUS(acx_world_init(MPI_COMM_WORLD, NULL, &w), ACX_OK);
  CU_ASSERT_PTR_NOT_NULL_FATAL(w);
  host_dev_t h;
  if (!host_dev_open(&h)) {
    CU_FAIL("no host device on every rank");
    host_dev_close(&h);
    acx_world_finalize(w);
    return;
  }
  acx_buffer_t *buf = NULL, *res = NULL;
  ACX_ASSERT_STATUS(acx_buffer_alloc(h.dev, 256, ACX_DTYPE_BYTE, ACX_MEM_DEVICE, T_LONG, &buf), ACX_OK);
  acx_token_t before, after, fresh;
  ACX_ASSERT_STATUS(acx_buffer_export(buf, ACX_TOKEN_READ, &before), ACX_OK);
  ACX_ASSERT_STATUS(acx_token_local_buffer(&before, ACX_TOKEN_READ, &res), ACX_OK);
  acx_buffer_release(res);

  /* A rebuild asked for by rank 0 moves every rank's epoch on: the export made before is stale. */
  uint64_t e0 = 0, e1 = 0, e2 = 0;
  acx_world_epoch(w, &e0);
  acx_status_t s = acx_world_supervise(w, h.sys, h.dev, NULL, NULL);
  int ok = s == ACX_OK, all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  CU_ASSERT_EQUAL(s, ACX_OK);
  if (all) {
    if (mpi_rank == 0) CU_ASSERT_EQUAL(acx_world_request_rebuild(w, ACX_ERR_PEER_LOST), ACX_OK);
    CU_ASSERT_EQUAL(acx_world_wait_epoch(w, e0, T_LONG), ACX_OK);
    acx_world_epoch(w, &e1);
    CU_ASSERT(e1 > e0);
    MPI_Barrier(MPI_COMM_WORLD); /* every rank rebuilt before any leaves the supervision */
  }
  /* Supervised: finalize refuses (the supervisor reads the world), nothing done. */
  if (s == ACX_OK) CU_ASSERT_EQUAL(acx_world_finalize(w), ACX_ERR_INVALID_STATE);
  if (s == ACX_OK) CU_ASSERT_EQUAL(acx_world_unsupervise(w, T_LONG), ACX_OK);
  res = NULL;
  CU_ASSERT_EQUAL(acx_token_local_buffer(&before, ACX_TOKEN_READ, &res), ACX_ERR_STALE_TOKEN);
  if (res) acx_buffer_release(res);
  ACX_ASSERT_STATUS(acx_buffer_export(buf, ACX_TOKEN_READ, &after), ACX_OK);
  CU_ASSERT_EQUAL(after.epoch, e1);
  ACX_ASSERT_STATUS(acx_world_finalize(w), ACX_OK);

  /* A new world: its epoch is above the old world's, so neither export of it validates. */
  w = NULL;
  ACX_ASSERT_STATUS(acx_world_init(MPI_COMM_WORLD, NULL, &w), ACX_OK);
  CU_ASSERT_PTR_NOT_NULL_FATAL(w);
  acx_world_epoch(w, &e2);
  CU_ASSERT(e2 > e1);
  uint64_t lo = 0, hi = 0;
  MPI_Allreduce(&e2, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&e2, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  CU_ASSERT_EQUAL(lo, hi); /* every rank of the world agrees on its epoch */
  res = NULL;
  CU_ASSERT_EQUAL(acx_token_local_buffer(&before, ACX_TOKEN_READ, &res), ACX_ERR_STALE_TOKEN);
  if (res) acx_buffer_release(res);
  res = NULL;
  CU_ASSERT_EQUAL(acx_token_local_buffer(&after, ACX_TOKEN_READ, &res), ACX_ERR_STALE_TOKEN);
  if (res) acx_buffer_release(res);
  ACX_ASSERT_STATUS(acx_buffer_export(buf, ACX_TOKEN_READ, &fresh), ACX_OK);
  CU_ASSERT_EQUAL(fresh.owner_rank, mpi_rank);
  CU_ASSERT_EQUAL(fresh.epoch, e2);
  res = NULL;
  CU_ASSERT_EQUAL(acx_token_local_buffer(&fresh, ACX_TOKEN_READ, &res), ACX_OK);
  if (res) acx_buffer_release(res);
  ACX_ASSERT_STATUS(acx_world_finalize(w), ACX_OK);
  acx_buffer_unexport(buf);
  acx_buffer_release(buf);
  host_dev_close(&h);
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
      ACX_TEST(test_init_this_machine),
      ACX_TEST(test_binding_on_recorded_node),
      ACX_TEST(test_bcast_and_nccl_id),
      ACX_TEST(test_bad_arguments),
      ACX_TEST(test_log_names),
      ACX_TEST(test_launcher_size),
      ACX_TEST(test_world_second_init_refused),
      ACX_TEST(test_world_stale_token_across_reinit),
      ACX_TEST_END};
  int rc = acx_test_run("world", cases, NULL, NULL);
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

static double now_s(void) { return (double)acxi_now_ns() / 1e9; }

/* Regression (issue 12, item 4): with one rank 8 s late and ACX_WORLD_TIMEOUT=1000, acx_world_init
 * returned ACX_OK after 8 s (MPI_Comm_dup and MPI_Comm_split wait without a deadline). The last
 * rank is late by LATE_S (the fault injected); every other rank must fail with ACX_ERR_TIMEOUT,
 * not before the deadline and not later than it plus MARGIN_S, and so must the late rank (its
 * peers have left). Then every rank builds a world again: what a timed-out call left pending does
 * not disturb the next one. Returns the process exit status. */
#define LATE_S 5.0
#define MARGIN_S 2.0
static int late_rank_main(void) {
  double tmo_s = (double)acxi_param_int("ACX_WORLD_TIMEOUT") / 1000.0;
  int late = mpi_rank == mpi_size - 1, rc = 0;
  if (mpi_size < 2 || tmo_s + MARGIN_S >= LATE_S) {
    fprintf(stderr, "--late-rank needs -np >= 2 and ACX_WORLD_TIMEOUT < %.0f ms\n", (LATE_S - MARGIN_S) * 1000);
    return 1;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (late) nanosleep(&(struct timespec){(time_t)LATE_S, 0}, NULL); /* the fault: this rank is late */
  acx_world_t *w = NULL;
  double t0 = now_s();
  acx_status_t s = acx_world_init(MPI_COMM_WORLD, NULL, &w);
  double took = now_s() - t0;
  printf("rank %d%s: acx_world_init -> %s after %.2f s (deadline %.2f s)\n", mpi_rank, late ? " (late)" : "",
         acx_status_name(s), took, tmo_s);
  if (s != ACX_ERR_TIMEOUT || w != NULL) rc = 1;
  if (!late && (took < tmo_s || took > tmo_s + MARGIN_S)) rc = 1;
  /* What the timed-out exchange may still write is kept, not freed. */
  if (acxc_world_parked() < 1) {
    printf("rank %d: nothing parked after a timeout\n", mpi_rank);
    rc = 1;
  }
  if (w) acx_world_finalize(w);
  /* Every rank returned: the job is whole again and a world can be built, here with a deadline
   * from the config (longer than ACX_WORLD_TIMEOUT, for a loaded machine). */
  MPI_Barrier(MPI_COMM_WORLD);
  w = NULL;
  acx_world_config_t cfg = ACX_WORLD_CONFIG_INIT;
  cfg.timeout_ms = 60000;
  s = acx_world_init(MPI_COMM_WORLD, &cfg, &w);
  int r = -1;
  if (w) acx_world_rank(w, &r);
  printf("rank %d: acx_world_init again -> %s\n", mpi_rank, acx_status_name(s));
  if (s != ACX_OK || r != mpi_rank) rc = 1;
  if (w && acx_world_finalize(w) != ACX_OK) rc = 1;
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (mpi_rank == 0) printf("late rank: %s\n", worst ? "FAILED" : "OK");
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
    } else if (strcmp(mode, "--late-rank") == 0) {
      rc = late_rank_main();
    } else {
      rc = suite_main();
    }
  }
  MPI_Finalize();
  return rc;
}
