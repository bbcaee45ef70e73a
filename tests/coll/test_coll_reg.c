/* Registered buffers (collectives/coll_reg.c; issue 16's mapped path), under mpirun: the ranks of
 * each group of the own all-reduce (ranks sharing a GPU; on the host kind ACX_COLL_HIER_GROUP
 * consecutive ranks, with ACX_COLL_HIER=1) map each other's ACX_MEM_SHAREABLE buffers, collectively:
 *  - every group peer's bytes read through this rank's mapping, and nobody else's mapped;
 *  - a registered buffer cannot be freed; after deregistration it can;
 *  - registrations are numbered alike on every rank;
 *  - a rank's bad argument (a pool buffer, NULL) fails the call on that rank with its reason and on
 *    every other rank with ACX_ERR_PEER_LOST, and leaves nothing registered;
 *  - a rebuild makes a registration stale (no mappings) and a new one maps again;
 *  - a coll destroyed with a registration left closes it.
 * Default: host kind; --cuda: the same on GPUs (exit 77 without one). */
#define _GNU_SOURCE
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acx/coll.h"
#include "acx/config.h"
#include "acx/device.h"
#include "acx/rebuild.h"
#include "acx/remote.h"
#include "acx/world.h"
#include "acx_test.h"
#include "collectives/coll_internal.h"

#define T_LONG 30000000000LL
#define BYTES 4096

static int rank, nranks, use_cuda;
static acx_world_t *world;
static acx_system_t *sys;
static acx_device_t *dev;
static acx_coll_t *coll;
static int mine[64], nmine; /* the other ranks of this rank's group, as the test expects them */

static int in_group(int q) {
  for (int i = 0; i < nmine; i++)
    if (mine[i] == q) return 1;
  return 0;
}

static acx_buffer_t *shareable(unsigned char seed) {
  acx_buffer_t *b = NULL;
  ACX_ASSERT_STATUS(acx_buffer_alloc(dev, BYTES, ACX_DTYPE_BYTE, ACX_MEM_SHAREABLE, T_LONG, &b), ACX_OK);
  unsigned char v[BYTES];
  for (int i = 0; i < BYTES; i++) v[i] = (unsigned char)(seed + rank * 7 + i);
  ACX_ASSERT_STATUS(acx_buffer_write(b, 0, v, BYTES, 0, T_LONG), ACX_OK);
  return b;
}

/* Every group peer's bytes through this rank's mapping; nobody else mapped. */
static void check_maps(const acxc_reg_t *reg, unsigned char seed) {
  size_t wrong = 0;
  int mapped = 0;
  for (int q = 0; q < nranks; q++) {
    acx_buffer_t *m = acxc_reg_peer(reg, q);
    if (!in_group(q)) {
      CU_ASSERT_PTR_NULL(m);
      continue;
    }
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    mapped++;
    unsigned char v[BYTES];
    ACX_ASSERT_STATUS(acx_buffer_read(m, 0, v, BYTES, 0, T_LONG), ACX_OK);
    for (int i = 0; i < BYTES; i++) wrong += v[i] != (unsigned char)(seed + q * 7 + i);
  }
  if (wrong) fprintf(stderr, "rank %d: %zu wrong bytes read through the mappings\n", rank, wrong);
  CU_ASSERT_EQUAL(wrong, 0);
  CU_ASSERT_EQUAL(mapped, nmine);
}

static void test_register_maps(void) {
  acx_buffer_t *a = shareable(1), *b = shareable(2);
  acx_buffer_info_t info;
  ACX_ASSERT_STATUS(acx_buffer_query(a, &info), ACX_OK);
  CU_ASSERT_EQUAL(info.kind, ACX_MEM_SHAREABLE);
  acxc_reg_t *ra = NULL, *rb = NULL;
  ACX_ASSERT_STATUS(acxc_coll_register(coll, a, T_LONG, &ra), ACX_OK);
  ACX_ASSERT_STATUS(acxc_coll_register(coll, b, T_LONG, &rb), ACX_OK);
  /* Numbered alike everywhere: the same on every rank, one apart. */
  int ia = acxc_reg_index(ra), lo = 0, hi = 0;
  MPI_Allreduce(&ia, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&ia, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  CU_ASSERT_EQUAL(lo, hi);
  CU_ASSERT_EQUAL(acxc_reg_index(rb), ia + 1);
  CU_ASSERT_FALSE(acxc_reg_stale(ra));
  check_maps(ra, 1);
  check_maps(rb, 2);
  /* Registered: not freeable (its group peers' executors map it); held against release. */
  ACX_ASSERT_STATUS(acx_buffer_free(a, T_LONG), ACX_ERR_INVALID_STATE);
  ACX_ASSERT_STATUS(acxc_coll_deregister(ra, T_LONG), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_free(a, T_LONG), ACX_OK);
  acx_buffer_release(a);
  /* The release before the deregistration: the registration keeps the buffer. */
  acx_buffer_release(b);
  ACX_ASSERT_STATUS(acxc_coll_deregister(rb, T_LONG), ACX_OK);
  MPI_Barrier(MPI_COMM_WORLD);
}

static void test_register_refused(void) {
  for (int bad = 0; bad < 2; bad++) {
    acx_buffer_t *b = shareable(3), *pool = NULL;
    ACX_ASSERT_STATUS(acx_buffer_alloc(dev, BYTES, ACX_DTYPE_BYTE, ACX_MEM_DEVICE, T_LONG, &pool), ACX_OK);
    acx_buffer_t *arg = b;
    acx_status_t want = ACX_ERR_PEER_LOST;
    if (rank == nranks - 1) {
      arg = bad == 0 ? pool : NULL; /* a pool buffer; no buffer */
      want = bad == 0 ? ACX_ERR_INVALID_ARG : ACX_ERR_NULL_ARG;
    }
    static int sentinel;
    acxc_reg_t *r = (acxc_reg_t *)&sentinel; /* must come back NULL */
    ACX_ASSERT_STATUS(acxc_coll_register(coll, arg, T_LONG, &r), want);
    CU_ASSERT_PTR_NULL(r);
    /* Nothing stays registered: the buffer frees. */
    ACX_ASSERT_STATUS(acx_buffer_free(b, T_LONG), ACX_OK);
    acx_buffer_release(b);
    acx_buffer_release(pool);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  ACX_ASSERT_STATUS(acxc_coll_register(NULL, NULL, T_LONG, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acxc_coll_deregister(NULL, T_LONG), ACX_ERR_NULL_ARG);
}

static void test_rebuild_makes_stale(void) {
  acx_buffer_t *a = shareable(4);
  acxc_reg_t *ra = NULL;
  ACX_ASSERT_STATUS(acxc_coll_register(coll, a, T_LONG, &ra), ACX_OK);
  uint64_t e = 0;
  acx_world_epoch(world, &e);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) ACX_ASSERT_STATUS(acx_world_request_rebuild(world, ACX_ERR_PEER_LOST), ACX_OK);
  ACX_ASSERT_STATUS(acx_world_wait_epoch(world, e, T_LONG), ACX_OK);
  ACX_ASSERT_STATUS(acx_world_wait_ready(world, T_LONG), ACX_OK);
  /* The own all-reduce's set was made anew: the old mappings are not used (staged instead). */
  CU_ASSERT_EQUAL(acxc_reg_stale(ra), nmine > 0);
  for (int q = 0; q < nranks; q++) CU_ASSERT_PTR_NULL(acxc_reg_peer(ra, q));
  ACX_ASSERT_STATUS(acxc_coll_deregister(ra, T_LONG), ACX_OK);
  /* Registered again, it maps again. */
  ACX_ASSERT_STATUS(acxc_coll_register(coll, a, T_LONG, &ra), ACX_OK);
  check_maps(ra, 4);
  ACX_ASSERT_STATUS(acxc_coll_deregister(ra, T_LONG), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_free(a, T_LONG), ACX_OK);
  acx_buffer_release(a);
  MPI_Barrier(MPI_COMM_WORLD);
}

/* The groups this test expects: ranks on this rank's GPU; on the host kind blocks of
 * ACX_COLL_HIER_GROUP consecutive ranks (one node) where the own all-reduce's two-shot has groups. */
static void expect_groups(void) {
  nmine = 0;
  int parts = 0;
  if (!acxc_peer_on(coll) || !((parts = acxc_peer_parts(coll, NULL, NULL)) & ACXC_PEER_GROUPS)) return;
  if (use_cuda) {
    int r[64], n = 0;
    if (acx_world_gpu_peers(world, r, 64, &n) != ACX_OK) MPI_Abort(MPI_COMM_WORLD, 2);
    for (int i = 0; i < n && i < 64; i++)
      if (r[i] != rank) mine[nmine++] = r[i];
    return;
  }
  const char *g = getenv("ACX_COLL_HIER_GROUP");
  int per = g ? atoi(g) : 0;
  for (int q = 0; per > 0 && q < nranks; q++)
    if (q != rank && q / per == rank / per) mine[nmine++] = q;
}

int main(int argc, char **argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--cuda")) use_cuda = 1;
    else {
      fprintf(stderr, "test_coll_reg: unknown argument '%s'\n", argv[i]);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  acx_log_set_rank(rank);
  if (acx_world_init(MPI_COMM_WORLD, NULL, &world) != ACX_OK) MPI_Abort(MPI_COMM_WORLD, 2);
  if (acx_system_create(NULL, &sys) != ACX_OK) MPI_Abort(MPI_COMM_WORLD, 2);
  acx_device_config_t cfg = ACX_DEVICE_CONFIG_INIT;
  cfg.kind = use_cuda ? ACX_DEVICE_KIND_CUDA : ACX_DEVICE_KIND_HOST;
  acx_status_t st;
  int orc = acx_test_open_device(world, sys, &cfg, "test_coll_reg", &dev);
  if (orc != 0) {
    acx_system_destroy(sys, T_LONG);
    acx_world_finalize(world);
    MPI_Finalize();
    return orc;
  }
  if (acx_coll_create(world, dev, sys, NULL, &coll) != ACX_OK) MPI_Abort(MPI_COMM_WORLD, 2);
  if (acx_remote_start(world) != ACX_OK) MPI_Abort(MPI_COMM_WORLD, 2);
  if (acx_world_supervise(world, sys, dev, coll, NULL) != ACX_OK) MPI_Abort(MPI_COMM_WORLD, 2);
  expect_groups();
  if (rank == 0) printf("test_coll_reg: %d ranks, %d group peer(s) each\n", nranks, nmine);
  static const acx_test_case_t cases[] = {ACX_TEST(test_register_maps), ACX_TEST(test_register_refused),
                                          ACX_TEST(test_rebuild_makes_stale), ACX_TEST_END};
  int rc = acx_test_run("coll-reg", cases, NULL, NULL);
  /* A registration left to the coll's destroy: closed with it (collective, as the destroy is). */
  acx_buffer_t *left = NULL;
  acxc_reg_t *rl = NULL;
  st = acx_buffer_alloc(dev, BYTES, ACX_DTYPE_BYTE, ACX_MEM_SHAREABLE, T_LONG, &left);
  if (st == ACX_OK) st = acxc_coll_register(coll, left, T_LONG, &rl);
  if (st != ACX_OK) {
    fprintf(stderr, "rank %d: the registration left to the destroy: %s\n", rank, acx_status_str(st));
    rc = 1;
  }
  if ((st = acx_world_unsupervise(world, T_LONG)) != ACX_OK) rc = 1;
  if ((st = acx_remote_stop(world, T_LONG)) != ACX_OK) rc = 1;
  acx_coll_destroy(coll, T_LONG);
  if (left && (st = acx_buffer_free(left, T_LONG)) != ACX_OK) {
    fprintf(stderr, "rank %d: the buffer of the registration the destroy closed does not free: %s\n", rank,
            acx_status_str(st));
    rc = 1;
  }
  acx_buffer_release(left);
  acx_device_close(dev, T_LONG);
  acx_system_destroy(sys, T_LONG);
  acx_world_finalize(world);
  int any = 0;
  MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any ? 1 : 0;
}
