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
#include <stdint.h>
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
static void check_maps(const acx_coll_reg_t *reg, unsigned char seed) {
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
  acx_coll_reg_t *ra = NULL, *rb = NULL;
  ACX_ASSERT_STATUS(acx_coll_register(coll, a, T_LONG, &ra), ACX_OK);
  ACX_ASSERT_STATUS(acx_coll_register(coll, b, T_LONG, &rb), ACX_OK);
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
  ACX_ASSERT_STATUS(acx_coll_deregister(ra, T_LONG), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_free(a, T_LONG), ACX_OK);
  acx_buffer_release(a);
  /* The release before the deregistration: the registration keeps the buffer. */
  acx_buffer_release(b);
  ACX_ASSERT_STATUS(acx_coll_deregister(rb, T_LONG), ACX_OK);
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
    acx_coll_reg_t *r = (acx_coll_reg_t *)&sentinel; /* must come back NULL */
    ACX_ASSERT_STATUS(acx_coll_register(coll, arg, T_LONG, &r), want);
    CU_ASSERT_PTR_NULL(r);
    /* Nothing stays registered: the buffer frees. */
    ACX_ASSERT_STATUS(acx_buffer_free(b, T_LONG), ACX_OK);
    acx_buffer_release(b);
    acx_buffer_release(pool);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  ACX_ASSERT_STATUS(acx_coll_register(NULL, NULL, T_LONG, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_coll_deregister(NULL, T_LONG), ACX_ERR_NULL_ARG);
}

static void test_rebuild_makes_stale(void) {
  acx_buffer_t *a = shareable(4);
  acx_coll_reg_t *ra = NULL;
  ACX_ASSERT_STATUS(acx_coll_register(coll, a, T_LONG, &ra), ACX_OK);
  uint64_t e = 0;
  acx_world_epoch(world, &e);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) ACX_ASSERT_STATUS(acx_world_request_rebuild(world, ACX_ERR_PEER_LOST), ACX_OK);
  ACX_ASSERT_STATUS(acx_world_wait_epoch(world, e, T_LONG), ACX_OK);
  ACX_ASSERT_STATUS(acx_world_wait_ready(world, T_LONG), ACX_OK);
  /* The own all-reduce's set was made anew: the old mappings are not used (staged instead). */
  CU_ASSERT_EQUAL(acxc_reg_stale(ra), nmine > 0);
  for (int q = 0; q < nranks; q++) CU_ASSERT_PTR_NULL(acxc_reg_peer(ra, q));
  ACX_ASSERT_STATUS(acx_coll_deregister(ra, T_LONG), ACX_OK);
  /* Registered again, it maps again. */
  ACX_ASSERT_STATUS(acx_coll_register(coll, a, T_LONG, &ra), ACX_OK);
  check_maps(ra, 4);
  ACX_ASSERT_STATUS(acx_coll_deregister(ra, T_LONG), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_free(a, T_LONG), ACX_OK);
  acx_buffer_release(a);
  MPI_Barrier(MPI_COMM_WORLD);
}

/* ---- the all-reduce through registered buffers (runtime/proto/peer_ops.h, "Registered buffers") ----
 * Every rank's output must be the exact sum (max) and bit-identical to the unregistered run's,
 * whichever ranks registered what: all (out of place and in place), ranks with only their input or
 * only their output registered, one rank only. Registration is collective, so a rank "without" a
 * registration registers a scratch buffer in its place. An out-of-place input must come back
 * untouched (its group peers read it where it is). Sizes from the smallest the two-shot takes to
 * several of its chunks, with odd counts (the kernels' element-by-element tails). */
enum { M_NONE, M_ALL, M_INPLACE, M_SEND_ONLY_EVEN, M_ONE_RANK, M_COUNT };
static const char *const mode_name[M_COUNT] = {"none", "all", "in place", "inputs of even ranks, outputs of odd",
                                               "rank 0 only"};

static float fval(size_t i, int r) { return (float)((int)((i * 7 + (size_t)r * 13) % 61) - 30); }
static uint16_t bf16_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16); /* exact: small integers */
}

/* Input element i of rank r, as bytes of the dtype. */
static void fill_input(unsigned char *v, size_t n, acx_dtype_t dt, int r) {
  for (size_t i = 0; i < n; i++) {
    if (dt == ACX_DTYPE_F32) ((float *)v)[i] = fval(i, r);
    else if (dt == ACX_DTYPE_BF16) ((uint16_t *)v)[i] = bf16_of((float)((i + (size_t)r * 5) % 29));
    else ((int32_t *)v)[i] = (int32_t)((i * 2654435761u + (size_t)r * 977) % 100003) - 50000;
  }
}

/* The exact result of sum (f32, bf16) or max (i32) over every rank, compared with got: wrong elements. */
static size_t count_wrong(const unsigned char *got, size_t n, acx_dtype_t dt) {
  size_t wrong = 0;
  for (size_t i = 0; i < n; i++) {
    if (dt == ACX_DTYPE_F32) {
      float want = 0;
      for (int r = 0; r < nranks; r++) want += fval(i, r);
      wrong += ((const float *)got)[i] != want;
    } else if (dt == ACX_DTYPE_BF16) {
      float want = 0;
      for (int r = 0; r < nranks; r++) want += (float)((i + (size_t)r * 5) % 29);
      wrong += ((const uint16_t *)got)[i] != bf16_of(want);
    } else {
      int32_t want = INT32_MIN;
      for (int r = 0; r < nranks; r++) {
        int32_t v = (int32_t)((i * 2654435761u + (size_t)r * 977) % 100003) - 50000;
        if (v > want) want = v;
      }
      wrong += ((const int32_t *)got)[i] != want;
    }
  }
  return wrong;
}

/* Whether this rank registers its input / output in mode m (else a scratch buffer in its place). */
static int reg_send(int m) { return m == M_ALL || m == M_INPLACE || (m == M_SEND_ONLY_EVEN && rank % 2 == 0) || (m == M_ONE_RANK && rank == 0); }
static int reg_recv(int m) { return m == M_ALL || (m == M_SEND_ONLY_EVEN && rank % 2 == 1) || (m == M_ONE_RANK && rank == 0); }

static void one_case(size_t n, acx_dtype_t dt, acx_redop_t op, int groups) {
  const size_t es = acx_dtype_size(dt), bytes = n * es;
  unsigned char *in = malloc(bytes), *ref = malloc(bytes), *got = malloc(bytes);
  CU_ASSERT_PTR_NOT_NULL_FATAL(in);
  CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
  CU_ASSERT_PTR_NOT_NULL_FATAL(got);
  fill_input(in, n, dt, rank);
  for (int m = 0; m < M_COUNT; m++) {
    acx_buffer_t *send = NULL, *recv = NULL, *scratch[2] = {NULL, NULL};
    ACX_ASSERT_STATUS(acx_buffer_alloc(dev, bytes, ACX_DTYPE_BYTE, ACX_MEM_SHAREABLE, T_LONG, &send), ACX_OK);
    if (m == M_INPLACE) recv = send;
    else ACX_ASSERT_STATUS(acx_buffer_alloc(dev, bytes, ACX_DTYPE_BYTE, ACX_MEM_SHAREABLE, T_LONG, &recv), ACX_OK);
    ACX_ASSERT_STATUS(acx_buffer_write(send, 0, in, bytes, 0, T_LONG), ACX_OK);
    acx_coll_reg_t *rs = NULL, *rr = NULL;
    if (m != M_NONE) { /* two registrations on every rank (collective), the real buffers or scratch */
      for (int k = 0; k < 2; k++)
        if (!(k == 0 ? reg_send(m) : reg_recv(m)))
          ACX_ASSERT_STATUS(acx_buffer_alloc(dev, 4096, ACX_DTYPE_BYTE, ACX_MEM_SHAREABLE, T_LONG, &scratch[k]), ACX_OK);
      ACX_ASSERT_STATUS(acx_coll_register(coll, reg_send(m) ? send : scratch[0], T_LONG, &rs), ACX_OK);
      ACX_ASSERT_STATUS(acx_coll_register(coll, m == M_INPLACE ? scratch[1] : reg_recv(m) ? recv : scratch[1], T_LONG, &rr),
                        ACX_OK);
      if (groups && reg_send(m)) CU_ASSERT(acxc_reg_slot_of(coll, send) >= 0);
    }
    uint64_t ops0 = acxc_peer_ops(coll);
    ACX_ASSERT_STATUS(acx_allreduce_sync(coll, send, recv, n, dt, op, 0, T_LONG), ACX_OK);
    if (groups) CU_ASSERT_EQUAL(acxc_peer_ops(coll), ops0 + 1); /* the own path's two-shot took it */
    ACX_ASSERT_STATUS(acx_buffer_read(recv, 0, got, bytes, 0, T_LONG), ACX_OK);
    size_t wrong = count_wrong(got, n, dt);
    if (m == M_NONE) memcpy(ref, got, bytes);
    int same = !memcmp(ref, got, bytes);
    if (wrong || !same)
      fprintf(stderr, "rank %d: %zu elements of dtype %d op %d, registered %s: %zu wrong, %s the unregistered run's\n",
              rank, n, (int)dt, (int)op, mode_name[m], wrong, same ? "the same as" : "NOT bit-identical to");
    CU_ASSERT_EQUAL(wrong, 0);
    CU_ASSERT(same);
    if (m != M_INPLACE) { /* the input, read where it is by the group peers, is untouched */
      ACX_ASSERT_STATUS(acx_buffer_read(send, 0, got, bytes, 0, T_LONG), ACX_OK);
      CU_ASSERT(!memcmp(got, in, bytes));
    }
    if (rr) ACX_ASSERT_STATUS(acx_coll_deregister(rr, T_LONG), ACX_OK);
    if (rs) ACX_ASSERT_STATUS(acx_coll_deregister(rs, T_LONG), ACX_OK);
    for (int k = 0; k < 2; k++)
      if (scratch[k]) {
        ACX_ASSERT_STATUS(acx_buffer_free(scratch[k], T_LONG), ACX_OK);
        acx_buffer_release(scratch[k]);
      }
    if (recv != send) {
      ACX_ASSERT_STATUS(acx_buffer_free(recv, T_LONG), ACX_OK);
      acx_buffer_release(recv);
    }
    ACX_ASSERT_STATUS(acx_buffer_free(send, T_LONG), ACX_OK);
    acx_buffer_release(send);
  }
  free(in);
  free(ref);
  free(got);
}

static void test_allreduce_registered(void) {
  uint64_t slot = 0, big_min = 0;
  int parts = acxc_peer_on(coll) ? acxc_peer_parts(coll, &slot, &big_min) : 0;
  const int groups = (parts & ACXC_PEER_GROUPS) != 0;
  /* the smallest all-reduce the two-shot takes (or 64 KiB without it), then one of several chunks */
  uint64_t base = groups ? (big_min > slot ? big_min : slot + 1) : 65536;
  const struct { acx_dtype_t dt; acx_redop_t op; } kinds[] = {
      {ACX_DTYPE_F32, ACX_REDOP_SUM}, {ACX_DTYPE_BF16, ACX_REDOP_SUM}, {ACX_DTYPE_I32, ACX_REDOP_MAX}};
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    const size_t es = acx_dtype_size(kinds[k].dt), n1 = (size_t)(base + es - 1) / es + 37;
    one_case(n1, kinds[k].dt, kinds[k].op, groups);
    if (k == 0) one_case(n1 * 37 + 11, kinds[k].dt, kinds[k].op, groups);
  }
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
  if (orc != 0) return orc; /* skipped or failed: sys, world and MPI are gone */
  if (acx_coll_create(world, dev, sys, NULL, &coll) != ACX_OK) MPI_Abort(MPI_COMM_WORLD, 2);
  if (acx_remote_start(world) != ACX_OK) MPI_Abort(MPI_COMM_WORLD, 2);
  if (acx_world_supervise(world, sys, dev, coll, NULL) != ACX_OK) MPI_Abort(MPI_COMM_WORLD, 2);
  expect_groups();
  if (rank == 0) printf("test_coll_reg: %d ranks, %d group peer(s) each\n", nranks, nmine);
  static const acx_test_case_t cases[] = {ACX_TEST(test_register_maps), ACX_TEST(test_register_refused),
                                          ACX_TEST(test_allreduce_registered), ACX_TEST(test_rebuild_makes_stale),
                                          ACX_TEST_END};
  int rc = acx_test_run("coll-reg", cases, NULL, NULL);
  /* A registration left to the coll's destroy: closed with it (collective, as the destroy is). */
  acx_buffer_t *left = NULL;
  acx_coll_reg_t *rl = NULL;
  st = acx_buffer_alloc(dev, BYTES, ACX_DTYPE_BYTE, ACX_MEM_SHAREABLE, T_LONG, &left);
  if (st == ACX_OK) st = acx_coll_register(coll, left, T_LONG, &rl);
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
