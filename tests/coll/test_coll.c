/* Tests of the collectives (include/acx/coll.h), one program for both device kinds: run under
 * mpirun. Default: host kind (MPI path) -- every collective x dtypes x ops, in place and out of
 * place, groups, a send/recv ring, all-to-all, bad input. Modes: --inline (inline transport),
 * --watchdog (rank 1 withholds a collective: rank 0 gets ACX_ERR_COLL_TIMEOUT in time; with --hier,
 * every other rank fails in time and rank 1 finds its group aborted), --stale
 * (a killed executor: old buffers answer ACX_ERR_STALE_BUFFER), --cuda (the same suite through
 * NCCL; exit 77 without a GPU), --kill-after K (cuda: rank 1 SIGKILLs itself after K all-reduces;
 * the survivor must report the failure within the timeout and exit), --hier (the coll is
 * hierarchical -- ranks sharing a GPU, or ACX_COLL_HIER=1 on the host kind --: the same suite,
 * with send/recv refused as such a coll must; on GPUs the suite follows the coll: hierarchical
 * where ranks share a GPU, flat where each has its own, with or without --hier), --peer (acx's
 * own all-reduce must be on, by ACX_COLL_PEER=1 or by the default on GPUs, and take exactly the
 * all-reduces that fit its slot), --peer-auto (ACX_COLL_PEER at its default: the own path on exactly
 * where auto takes it, then as --peer). Under scripts/sim-cluster
 * (tests/multinode) the same suite runs across simulated nodes and checks the node layout.
 * --exec-abort (cuda, 2 ranks): rank 0's executor aborts the NCCL communicator while an all-reduce
 * that rank 1 never joins is in its stream; the all-reduce must report the abort's cause, not
 * success (the aborted kernel leaves with garbage). */
#define _GNU_SOURCE
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acx/coll.h"
#include "acx/config.h"
#include "acx/device.h"
#include "acx/world.h"
#include "acx_test.h"
#include "acx_test_nodes.h"
#include "bench_util.h"
#include "collectives/coll_internal.h"
#include "runtime/base/clock.h"
#include "runtime/device/device_internal.h"
#include "runtime/proto/coll_ops.h"

#define T_LONG 30000000000LL

static int rank, nranks, use_cuda, inline_mode, hier, peer, peer_auto;
static acx_world_t *world;
static acx_system_t *sys;
static acx_device_t *dev;
static acx_coll_t *coll;

/* bench_util's types and ops are acx's, the dtype shifted by the byte type. */
static bench_dtype_t bdt(acx_dtype_t d) { return (bench_dtype_t)(d - ACX_DTYPE_I8); }

static acx_buffer_t *alloc(size_t count, acx_dtype_t d) {
  acx_buffer_t *b = NULL;
  ACX_ASSERT_STATUS(acx_buffer_alloc(dev, count * acx_dtype_size(d), d, ACX_MEM_DEVICE, T_LONG, &b), ACX_OK);
  return b;
}

static void put(acx_buffer_t *b, size_t off_elems, const void *src, size_t count, acx_dtype_t d) {
  size_t es = acx_dtype_size(d);
  ACX_ASSERT_STATUS(acx_buffer_write(b, off_elems * es, src, count * es, 0, T_LONG), ACX_OK);
}

static void get(acx_buffer_t *b, size_t off_elems, void *dst, size_t count, acx_dtype_t d) {
  size_t es = acx_dtype_size(d);
  ACX_ASSERT_STATUS(acx_buffer_read(b, off_elems * es, dst, count * es, 0, T_LONG), ACX_OK);
}

static const acx_dtype_t all_types[] = {ACX_DTYPE_I8,  ACX_DTYPE_U8,   ACX_DTYPE_I32, ACX_DTYPE_U32, ACX_DTYPE_I64,
                                        ACX_DTYPE_U64, ACX_DTYPE_F16,  ACX_DTYPE_BF16, ACX_DTYPE_F32, ACX_DTYPE_F64};
#define NTYPES (sizeof all_types / sizeof all_types[0])

/* ---- all-reduce: every dtype x op, out of place and in place, checked exactly ---- */
/* Two sizes: 37 elements, and 83 KiB and a bit (above the own path's push lines, 64 KiB by
 * default, and within its one-shot's slot, 256 KiB: the one-shot, with groups where ranks share
 * GPUs; beyond a smaller slot, as the host kind's tests set it, the two-shot). The larger on GPUs
 * and wherever the own path is on: on the host kind MPI's and the hierarchical path's larger
 * all-reduces have their own tests, and 100 more of them cost CI a minute. */
static void test_allreduce_all(void) {
  const size_t most = 83 * 1024 + 3;
  void *in = malloc(most * 8), *out = malloc(most * 8), *exp = malloc(most * 8);
  const int sizes = use_cuda || acxc_peer_parts(coll, NULL, NULL) ? 2 : 1;
  for (int big = 0; big < sizes; big++)
    for (size_t t = 0; t < NTYPES; t++)
      for (int op = 0; op < ACX_REDOP_COUNT; op++)
        for (int inplace = 0; inplace < 2; inplace++) {
          acx_dtype_t d = all_types[t];
          const size_t n = big ? 83 * 1024 / acx_dtype_size(d) + 3 : 37;
          unsigned seed = (unsigned)(t * 10 + (unsigned)op);
          bench_fill(in, bdt(d), (bench_op_t)op, n, rank, nranks, seed);
          bench_expected(exp, bdt(d), (bench_op_t)op, n, nranks, seed);
          acx_buffer_t *s = alloc(n, d), *r = inplace ? s : alloc(n, d);
          put(s, 0, in, n, d);
          ACX_ASSERT_STATUS(acx_allreduce_sync(coll, s, r, n, d, (acx_redop_t)op, 0, -1), ACX_OK);
          memset(out, 0x5a, n * 8);
          get(r, 0, out, n, d);
          size_t wrong = bench_count_wrong(out, exp, bdt(d), (bench_op_t)op, n, nranks);
          if (wrong)
            fprintf(stderr, "rank %d: allreduce %s %s %s, %zu elements: %zu wrong\n", rank, acx_dtype_name(d),
                    acx_redop_name((acx_redop_t)op), inplace ? "in-place" : "out-of-place", n, wrong);
          CU_ASSERT_EQUAL(wrong, 0);
          acx_buffer_release(s);
          if (!inplace) acx_buffer_release(r);
        }
  free(in);
  free(out);
  free(exp);
}

/* ---- broadcast from every root, reduce to the last rank ---- */
static void test_broadcast_reduce(void) {
  const size_t n = 100;
  int64_t v[100], o[100];
  for (int root = 0; root < nranks; root++)
    for (int inplace = 0; inplace < 2; inplace++) {
      for (size_t i = 0; i < n; i++) v[i] = rank == root ? (int64_t)(i * 1000 + (size_t)root) : -1;
      acx_buffer_t *s = alloc(n, ACX_DTYPE_I64), *r = inplace ? s : alloc(n, ACX_DTYPE_I64);
      put(s, 0, v, n, ACX_DTYPE_I64);
      ACX_ASSERT_STATUS(acx_broadcast_sync(coll, s, r, n, ACX_DTYPE_I64, root, 1, -1), ACX_OK);
      get(r, 0, o, n, ACX_DTYPE_I64);
      for (size_t i = 0; i < n; i++) CU_ASSERT_EQUAL(o[i], (int64_t)(i * 1000 + (size_t)root));
      acx_buffer_release(s);
      if (!inplace) acx_buffer_release(r);
    }
  double dv[64], dout[64];
  for (int inplace = 0; inplace < 2; inplace++) {
    for (int i = 0; i < 64; i++) dv[i] = rank * 0.5 + i;
    acx_buffer_t *s = alloc(64, ACX_DTYPE_F64), *r = inplace ? s : alloc(64, ACX_DTYPE_F64);
    put(s, 0, dv, 64, ACX_DTYPE_F64);
    int root = nranks - 1;
    ACX_ASSERT_STATUS(acx_reduce_sync(coll, s, r, 64, ACX_DTYPE_F64, ACX_REDOP_MAX, root, 0, -1), ACX_OK);
    if (rank == root) {
      get(r, 0, dout, 64, ACX_DTYPE_F64);
      for (int i = 0; i < 64; i++) CU_ASSERT_EQUAL(dout[i], (nranks - 1) * 0.5 + i);
    }
    acx_buffer_release(s);
    if (!inplace) acx_buffer_release(r);
  }
}

/* ---- all-gather and reduce-scatter, NCCL's in-place conventions ---- */
static void test_allgather_reduce_scatter(void) {
  const size_t k = 33, all = k * (size_t)nranks;
  int32_t *v = malloc(all * 4), *o = malloc(all * 4);
  for (int inplace = 0; inplace < 2; inplace++) {
    for (size_t i = 0; i < k; i++) v[i] = rank * 100000 + (int32_t)i;
    acx_buffer_t *r = alloc(all, ACX_DTYPE_I32), *s = inplace ? r : alloc(k, ACX_DTYPE_I32);
    put(s, inplace ? (size_t)rank * k : 0, v, k, ACX_DTYPE_I32);
    ACX_ASSERT_STATUS(acx_allgather_sync(coll, s, r, k, ACX_DTYPE_I32, 0, -1), ACX_OK);
    get(r, 0, o, all, ACX_DTYPE_I32);
    for (int p = 0; p < nranks; p++)
      for (size_t i = 0; i < k; i++) CU_ASSERT_EQUAL(o[(size_t)p * k + i], p * 100000 + (int32_t)i);
    acx_buffer_release(r);
    if (!inplace) acx_buffer_release(s);
  }
  float *f = malloc(all * 4), *fo = malloc(all * 4);
  for (int inplace = 0; inplace < 2; inplace++) {
    for (size_t i = 0; i < all; i++) f[i] = (float)(rank + 1) * (float)(i % 50);
    acx_buffer_t *s = alloc(all, ACX_DTYPE_F32), *r = inplace ? s : alloc(k, ACX_DTYPE_F32);
    put(s, 0, f, all, ACX_DTYPE_F32);
    ACX_ASSERT_STATUS(acx_reduce_scatter_sync(coll, s, r, k, ACX_DTYPE_F32, ACX_REDOP_SUM, 0, -1), ACX_OK);
    get(r, inplace ? (size_t)rank * k : 0, fo, k, ACX_DTYPE_F32);
    float tri = (float)(nranks * (nranks + 1) / 2);
    for (size_t i = 0; i < k; i++) CU_ASSERT_EQUAL(fo[i], tri * (float)(((size_t)rank * k + i) % 50));
    acx_buffer_release(s);
    if (!inplace) acx_buffer_release(r);
  }
  free(v);
  free(o);
  free(f);
  free(fo);
}

/* ---- a send/recv ring, grouped and ungrouped; all-to-all ---- */
static void test_ring_alltoall(void) {
  const size_t n = 50;
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  uint32_t v[50], o[50];
  if (hier) {
    /* The leaders' communicator holds one rank per device: point-to-point is refused, clearly. */
    acx_buffer_t *s = alloc(n, ACX_DTYPE_U32);
    acx_future_t *f = NULL;
    ACX_ASSERT_STATUS(acx_send(coll, s, n, ACX_DTYPE_U32, next, 0, &f), ACX_ERR_NOT_SUPPORTED);
    ACX_ASSERT_STATUS(acx_recv(coll, s, n, ACX_DTYPE_U32, prev, 0, &f), ACX_ERR_NOT_SUPPORTED);
    CU_ASSERT_PTR_NULL(f);
    acx_buffer_release(s);
  }
  for (int grouped = 0; grouped < 2 && !hier; grouped++) {
    for (size_t i = 0; i < n; i++) v[i] = (uint32_t)(rank * 1000 + (int)i + grouped);
    acx_buffer_t *s = alloc(n, ACX_DTYPE_U32), *r = alloc(n, ACX_DTYPE_U32);
    put(s, 0, v, n, ACX_DTYPE_U32);
    acx_future_t *fs = NULL, *fr = NULL, *fg = NULL;
    /* Ungrouped, operations of one coll run in order (as NCCL's on one stream): a send waits for
     * the peer's receive, so the ring alternates by parity (nranks is even in these runs). */
    int send_first = !grouped && rank % 2 == 0;
    if (grouped) ACX_ASSERT_STATUS(acx_coll_group_start(coll), ACX_OK);
    if (send_first) ACX_ASSERT_STATUS(acx_send(coll, s, n, ACX_DTYPE_U32, next, 0, &fs), ACX_OK);
    ACX_ASSERT_STATUS(acx_recv(coll, r, n, ACX_DTYPE_U32, prev, 0, &fr), ACX_OK);
    if (!send_first) ACX_ASSERT_STATUS(acx_send(coll, s, n, ACX_DTYPE_U32, next, 0, &fs), ACX_OK);
    if (grouped) {
      ACX_ASSERT_STATUS(acx_coll_group_end(coll, &fg), ACX_OK);
      ACX_ASSERT_STATUS(acx_coll_wait(coll, fg, -1), ACX_OK);
    }
    ACX_ASSERT_STATUS(acx_coll_wait(coll, fr, -1), ACX_OK);
    ACX_ASSERT_STATUS(acx_coll_wait(coll, fs, -1), ACX_OK);
    get(r, 0, o, n, ACX_DTYPE_U32);
    for (size_t i = 0; i < n; i++) CU_ASSERT_EQUAL(o[i], (uint32_t)(prev * 1000 + (int)i + grouped));
    acx_buffer_release(s);
    acx_buffer_release(r);
  }
  const size_t k = 9, all = k * (size_t)nranks;
  uint64_t *a = malloc(all * 8), *b = malloc(all * 8);
  for (int p = 0; p < nranks; p++)
    for (size_t i = 0; i < k; i++) a[(size_t)p * k + i] = (uint64_t)rank << 32 | (uint64_t)p << 16 | i;
  acx_buffer_t *s = alloc(all, ACX_DTYPE_U64), *r = alloc(all, ACX_DTYPE_U64);
  put(s, 0, a, all, ACX_DTYPE_U64);
  ACX_ASSERT_STATUS(acx_alltoall_sync(coll, s, r, k, ACX_DTYPE_U64, 1, -1), ACX_OK);
  get(r, 0, b, all, ACX_DTYPE_U64);
  for (int p = 0; p < nranks; p++)
    for (size_t i = 0; i < k; i++) CU_ASSERT_EQUAL(b[(size_t)p * k + i], (uint64_t)p << 32 | (uint64_t)rank << 16 | i);
  acx_buffer_release(s);
  acx_buffer_release(r);
  free(a);
  free(b);
}

/* ---- a group of different collectives; a fire-and-forget pipeline ---- */
static void test_group_and_pipeline(void) {
  const size_t n = 16;
  int32_t v[16], o[16];
  for (size_t i = 0; i < n; i++) v[i] = rank + (int32_t)i;
  acx_buffer_t *a = alloc(n, ACX_DTYPE_I32), *b = alloc(n, ACX_DTYPE_I32);
  put(a, 0, v, n, ACX_DTYPE_I32);
  put(b, 0, v, n, ACX_DTYPE_I32);
  acx_future_t *f1 = NULL, *f2 = NULL, *fg = NULL;
  ACX_ASSERT_STATUS(acx_coll_group_start(coll), ACX_OK);
  ACX_ASSERT_STATUS(acx_allreduce(coll, a, a, n, ACX_DTYPE_I32, ACX_REDOP_SUM, 0, &f1), ACX_OK);
  ACX_ASSERT_STATUS(acx_broadcast(coll, b, b, n, ACX_DTYPE_I32, 0, 0, &f2), ACX_OK);
  ACX_ASSERT_STATUS(acx_allreduce_sync(coll, a, a, n, ACX_DTYPE_I32, ACX_REDOP_SUM, 0, -1), ACX_ERR_INVALID_STATE);
  ACX_ASSERT_STATUS(acx_coll_group_end(coll, &fg), ACX_OK);
  ACX_ASSERT_STATUS(acx_coll_wait(coll, fg, -1), ACX_OK);
  ACX_ASSERT_STATUS(acx_coll_wait(coll, f1, -1), ACX_OK);
  ACX_ASSERT_STATUS(acx_coll_wait(coll, f2, -1), ACX_OK);
  get(a, 0, o, n, ACX_DTYPE_I32);
  for (size_t i = 0; i < n; i++) CU_ASSERT_EQUAL(o[i], nranks * (nranks - 1) / 2 + nranks * (int32_t)i);
  get(b, 0, o, n, ACX_DTYPE_I32);
  for (size_t i = 0; i < n; i++) CU_ASSERT_EQUAL(o[i], (int32_t)i);
  /* 20 fire-and-forget in-place sums, then one with a future: rank-independent doubling. */
  for (size_t i = 0; i < n; i++) v[i] = 1;
  put(a, 0, v, n, ACX_DTYPE_I32);
  for (int i = 0; i < 4; i++) ACX_ASSERT_STATUS(acx_allreduce(coll, a, a, n, ACX_DTYPE_I32, ACX_REDOP_SUM, 0, NULL), ACX_OK);
  acx_future_t *last = NULL;
  ACX_ASSERT_STATUS(acx_allreduce(coll, a, a, n, ACX_DTYPE_I32, ACX_REDOP_SUM, 0, &last), ACX_OK);
  ACX_ASSERT_STATUS(acx_coll_wait(coll, last, -1), ACX_OK);
  ACX_ASSERT_STATUS(acx_coll_synchronize(coll, -1), ACX_OK);
  get(a, 0, o, n, ACX_DTYPE_I32);
  int32_t want = 1;
  for (int i = 0; i < 5; i++) want *= nranks;
  for (size_t i = 0; i < n; i++) CU_ASSERT_EQUAL(o[i], want);
  acx_buffer_release(a);
  acx_buffer_release(b);
}

/* ---- the same collectives again and again (NCCL: captured into a graph once, then replayed):
 * a dependent in-place chain alternating streams, fresh inputs under a repeated operation, two
 * counts on the same buffers, and a buffer freed and replaced (perhaps at the same address) ---- */
static void test_repeated(void) {
  enum { N = 1000, CHAIN = 8 };
  static int32_t v[N], o[N];
  acx_buffer_t *a = alloc(N, ACX_DTYPE_I32), *b = alloc(N, ACX_DTYPE_I32);
  for (size_t i = 0; i < N; i++) v[i] = 1 + (int32_t)(i % 3);
  put(a, 0, v, N, ACX_DTYPE_I32);
  for (int k = 0; k < CHAIN; k++)
    ACX_ASSERT_STATUS(acx_allreduce(coll, a, a, N, ACX_DTYPE_I32, ACX_REDOP_SUM, (uint32_t)(k % 2), NULL), ACX_OK);
  ACX_ASSERT_STATUS(acx_coll_synchronize(coll, -1), ACX_OK);
  get(a, 0, o, N, ACX_DTYPE_I32);
  int32_t f = 1;
  for (int k = 0; k < CHAIN; k++) f *= nranks;
  long bad = 0;
  for (size_t i = 0; i < N; i++) bad += o[i] != f * (1 + (int32_t)(i % 3));
  CU_ASSERT_EQUAL(bad, 0);
  /* The same out-of-place sum on new inputs each time: a replay reads what the buffer holds now. */
  for (int k = 0; k < 5; k++) {
    for (size_t i = 0; i < N; i++) v[i] = rank + k + (int32_t)i;
    put(a, 0, v, N, ACX_DTYPE_I32);
    size_t cnt = k % 2 ? N / 2 : N;
    ACX_ASSERT_STATUS(acx_allreduce_sync(coll, a, b, cnt, ACX_DTYPE_I32, ACX_REDOP_SUM, 0, -1), ACX_OK);
    get(b, 0, o, cnt, ACX_DTYPE_I32);
    bad = 0;
    for (size_t i = 0; i < cnt; i++) bad += o[i] != nranks * (nranks - 1) / 2 + nranks * (k + (int32_t)i);
    CU_ASSERT_EQUAL(bad, 0);
  }
  /* Replace b: the new buffer may sit at the old address; the operation must still land in it. */
  acx_buffer_release(b);
  for (int round = 0; round < 2; round++) {
    acx_buffer_t *c = alloc(N, ACX_DTYPE_I32);
    for (int k = 0; k < 3; k++) {
      for (size_t i = 0; i < N; i++) v[i] = (rank + 1) * (round + 2) + (int32_t)i;
      put(a, 0, v, N, ACX_DTYPE_I32);
      ACX_ASSERT_STATUS(acx_allreduce_sync(coll, a, c, N, ACX_DTYPE_I32, ACX_REDOP_MAX, 0, -1), ACX_OK);
      get(c, 0, o, N, ACX_DTYPE_I32);
      bad = 0;
      for (size_t i = 0; i < N; i++) bad += o[i] != nranks * (round + 2) + (int32_t)i;
      CU_ASSERT_EQUAL(bad, 0);
    }
    acx_buffer_release(c);
  }
  /* A repeated broadcast from each root in turn. */
  for (int k = 0; k < 2 * nranks; k++) {
    int root = k % nranks;
    for (size_t i = 0; i < N; i++) v[i] = rank * 7 + k + (int32_t)i;
    put(a, 0, v, N, ACX_DTYPE_I32);
    ACX_ASSERT_STATUS(acx_broadcast_sync(coll, a, a, N, ACX_DTYPE_I32, root, 0, -1), ACX_OK);
    get(a, 0, o, N, ACX_DTYPE_I32);
    bad = 0;
    for (size_t i = 0; i < N; i++) bad += o[i] != root * 7 + k + (int32_t)i;
    CU_ASSERT_EQUAL(bad, 0);
  }
  acx_buffer_release(a);
}

/* ---- bad input: each with its status, nothing enqueued (the coll stays usable) ---- */
static void test_bad_input(void) {
  acx_buffer_t *f = alloc(8, ACX_DTYPE_F32), *i32 = alloc(8, ACX_DTYPE_I32), *raw = NULL, *big = alloc(64, ACX_DTYPE_F32);
  ACX_ASSERT_STATUS(acx_buffer_alloc(dev, 32, ACX_DTYPE_BYTE, ACX_MEM_DEVICE, T_LONG, &raw), ACX_OK);
  acx_future_t *x = NULL;
  ACX_ASSERT_STATUS(acx_allreduce(NULL, f, f, 8, ACX_DTYPE_F32, ACX_REDOP_SUM, 0, &x), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_allreduce(coll, NULL, f, 8, ACX_DTYPE_F32, ACX_REDOP_SUM, 0, &x), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_allreduce(coll, f, f, 0, ACX_DTYPE_F32, ACX_REDOP_SUM, 0, &x), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_allreduce(coll, f, i32, 8, ACX_DTYPE_F32, ACX_REDOP_SUM, 0, &x), ACX_ERR_BAD_DTYPE);
  ACX_ASSERT_STATUS(acx_allreduce(coll, raw, raw, 8, ACX_DTYPE_BYTE, ACX_REDOP_SUM, 0, &x), ACX_ERR_BAD_DTYPE);
  ACX_ASSERT_STATUS(acx_allreduce(coll, f, f, 8, (acx_dtype_t)99, ACX_REDOP_SUM, 0, &x), ACX_ERR_BAD_DTYPE);
  ACX_ASSERT_STATUS(acx_allreduce(coll, raw, raw, 8, ACX_DTYPE_F8E4M3, ACX_REDOP_SUM, 0, &x), ACX_ERR_BAD_DTYPE);
  ACX_ASSERT_STATUS(acx_reduce_scatter(coll, raw, raw, 4, ACX_DTYPE_F8E5M2, ACX_REDOP_MAX, 0, &x), ACX_ERR_BAD_DTYPE);
  ACX_ASSERT_STATUS(acx_allreduce(coll, f, f, 8, ACX_DTYPE_F32, (acx_redop_t)7, 0, &x), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_allreduce(coll, f, f, 9, ACX_DTYPE_F32, ACX_REDOP_SUM, 0, &x), ACX_ERR_OUT_OF_RANGE);
  ACX_ASSERT_STATUS(acx_allreduce(coll, f, f, SIZE_MAX / 2, ACX_DTYPE_F32, ACX_REDOP_SUM, 0, &x), ACX_ERR_OVERFLOW);
  ACX_ASSERT_STATUS(acx_allreduce(coll, f, f, 8, ACX_DTYPE_F32, ACX_REDOP_SUM, 999, &x), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_broadcast(coll, f, f, 8, ACX_DTYPE_F32, nranks, 0, &x), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_reduce(coll, f, f, 8, ACX_DTYPE_F32, ACX_REDOP_SUM, -1, 0, &x), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_send(coll, f, 8, ACX_DTYPE_F32, nranks, 0, &x), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_recv(coll, f, 8, ACX_DTYPE_F32, -3, 0, &x), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_allgather(coll, f, f, 8, ACX_DTYPE_F32, 0, &x), nranks > 1 ? ACX_ERR_OUT_OF_RANGE : ACX_OK);
  if (nranks == 1) ACX_ASSERT_STATUS(acx_coll_wait(coll, x, -1), ACX_OK);
  ACX_ASSERT_STATUS(acx_alltoall(coll, big, big, 8, ACX_DTYPE_F32, 0, &x), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_coll_group_end(coll, &x), ACX_ERR_INVALID_STATE);
  ACX_ASSERT_STATUS(acx_coll_group_start(coll), ACX_OK);
  ACX_ASSERT_STATUS(acx_coll_group_start(coll), ACX_ERR_INVALID_STATE);
  ACX_ASSERT_STATUS(acx_allreduce(coll, f, f, 8, ACX_DTYPE_F32, ACX_REDOP_SUM, 0, NULL), ACX_OK);
  ACX_ASSERT_STATUS(acx_allreduce(coll, f, f, 8, ACX_DTYPE_F32, ACX_REDOP_SUM, 1, NULL), ACX_ERR_INVALID_ARG);
  /* The group holds an invalid member: it is dropped whole, on every rank alike. */
  ACX_ASSERT_STATUS(acx_coll_group_end(coll, &x), ACX_ERR_INVALID_ARG);
  CU_ASSERT_PTR_NULL(x);
  ACX_ASSERT_STATUS(acx_coll_state(coll), ACX_OK);
  ACX_ASSERT_STATUS(acx_allreduce_sync(coll, f, f, 8, ACX_DTYPE_F32, ACX_REDOP_MAX, 0, -1), ACX_OK);
  acx_buffer_release(f);
  acx_buffer_release(i32);
  acx_buffer_release(raw);
  acx_buffer_release(big);
}

/* ---- the watchdog: rank 1 withholds its all-reduce ---- */
static void run_watchdog(void) {
  acx_buffer_t *b = alloc(4, ACX_DTYPE_F32);
  float v[4] = {1, 2, 3, 4};
  put(b, 0, v, 4, ACX_DTYPE_F32);
  MPI_Comm wc;
  acx_world_comm(world, &wc);
  int64_t limit = (int64_t)atoi(getenv("ACX_COLL_TIMEOUT") ? getenv("ACX_COLL_TIMEOUT") : "60000") * 1000000;
  if (hier) {
    /* Rank 1 is a member of group 0 (ranks 0 and 1). Its leader's wait for its flag passes the
     * deadline and aborts the group's flags; the other group's leader waits for rank 0 in the
     * leaders' step until the deadline, its member for its leader's result (or sees the abort).
     * Nobody hangs, nobody reports a result; rank 1, arriving late, finds its group aborted. */
    if (rank != 1) {
      /* Waited for with a generous limit of the test's own: on CI's 2 cores MPICH's busy-polling
       * ranks can keep a worker thread off the CPU for seconds; what matters is that every rank
       * gets a failure, not a result and not a hang. */
      int64_t t0 = acxi_now_ns();
      acx_future_t *f = NULL;
      ACX_ASSERT_STATUS(acx_allreduce(coll, b, b, 4, ACX_DTYPE_F32, ACX_REDOP_SUM, 0, &f), ACX_OK);
      acx_status_t st = acx_future_wait(f, limit + T_LONG, NULL, 0, NULL);
      acx_future_release(f);
      int64_t dt = acxi_now_ns() - t0;
      printf("rank %d: hierarchical all-reduce without rank 1 returned %s after %lld ms (ACX_COLL_TIMEOUT %lld ms)\n",
             rank, acx_status_name(st), (long long)(dt / 1000000), (long long)(limit / 1000000));
      CU_ASSERT(st == ACX_ERR_COLL_TIMEOUT || st == ACX_ERR_PEER_LOST);
      CU_ASSERT(dt >= limit - 50000000 || st == ACX_ERR_PEER_LOST);
      CU_ASSERT(acx_coll_state(coll) != ACX_OK);
    }
    MPI_Barrier(wc);
    if (rank == 1) {
      /* ACX_ERR_PEER_LOST comes only from finding the group's flags aborted at the start (a wait
       * for the deadline would give ACX_ERR_COLL_TIMEOUT). */
      acx_future_t *f = NULL;
      ACX_ASSERT_STATUS(acx_allreduce(coll, b, b, 4, ACX_DTYPE_F32, ACX_REDOP_SUM, 0, &f), ACX_OK);
      acx_status_t st = acx_future_wait(f, limit + T_LONG, NULL, 0, NULL);
      acx_future_release(f);
      CU_ASSERT_EQUAL(st, ACX_ERR_PEER_LOST);
      CU_ASSERT(acx_coll_state(coll) != ACX_OK);
    }
    MPI_Barrier(wc);
    acx_buffer_release(b);
    return;
  }
  if (rank == 0) {
    int64_t t0 = acxi_now_ns();
    acx_status_t st = acx_allreduce_sync(coll, b, b, 4, ACX_DTYPE_F32, ACX_REDOP_SUM, 0, -1);
    int64_t dt = acxi_now_ns() - t0;
    printf("rank 0: all-reduce without its peer returned %s after %lld ms (ACX_COLL_TIMEOUT %lld ms)\n",
           acx_status_name(st), (long long)(dt / 1000000), (long long)(limit / 1000000));
    CU_ASSERT_EQUAL(st, ACX_ERR_COLL_TIMEOUT);
    CU_ASSERT(dt >= limit - 50000000 && dt <= limit + 2000000000LL);
    ACX_ASSERT_STATUS(acx_coll_state(coll), ACX_ERR_COLL_TIMEOUT);
    ACX_ASSERT_STATUS(acx_allreduce(coll, b, b, 4, ACX_DTYPE_F32, ACX_REDOP_SUM, 0, NULL), ACX_ERR_COLL_TIMEOUT);
  }
  MPI_Barrier(wc);
  /* The late peer joins: its operation matches the abandoned one, so MPI can finish both. */
  if (rank == 1) ACX_ASSERT_STATUS(acx_allreduce_sync(coll, b, b, 4, ACX_DTYPE_F32, ACX_REDOP_SUM, 0, -1), ACX_OK);
  MPI_Barrier(wc);
  acx_buffer_release(b);
}

/* ---- stream order: buffer operations issued after a fire-and-forget collective ---- */
/* A write to the send buffer and a read of the receive buffer, issued on the collective's stream
 * right after it, run after it: the collective adds the old values, the read sees the result. On
 * GPUs the stream does it; the host kind's collectives and the hierarchical ones run on the coll's
 * worker thread after their call returns, and the buffer operations wait for them. Rank 1 submits
 * late, so that rank 0's collective is still queued when its write and read come (not a
 * synchronisation: the checks hold whatever the timing). */
static void test_stream_order(void) {
  static const size_t counts[] = {1000, 30000};
  for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
    const size_t n = counts[k];
    float *v = malloc(n * sizeof *v), *o = malloc(n * sizeof *o);
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    CU_ASSERT_PTR_NOT_NULL_FATAL(o);
    acx_buffer_t *a = alloc(n, ACX_DTYPE_F32), *b = alloc(n, ACX_DTYPE_F32);
    for (size_t i = 0; i < n; i++) v[i] = (float)(rank + 1 + (int)(i % 7));
    put(a, 0, v, n, ACX_DTYPE_F32);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) usleep(100000);
    ACX_ASSERT_STATUS(acx_allreduce(coll, a, b, n, ACX_DTYPE_F32, ACX_REDOP_SUM, 0, NULL), ACX_OK);
    for (size_t i = 0; i < n; i++) v[i] = -1000.0f; /* too late for the all-reduce */
    put(a, 0, v, n, ACX_DTYPE_F32);
    get(b, 0, o, n, ACX_DTYPE_F32);
    size_t wrong = 0;
    const float ranks_sum = (float)nranks * (float)(nranks + 1) / 2;
    for (size_t i = 0; i < n; i++) wrong += o[i] != ranks_sum + (float)nranks * (float)(i % 7);
    /* In place, then copied at once on the device (a command, not the buffer API's staged read),
     * then read. */
    acx_buffer_t *cp = alloc(n, ACX_DTYPE_F32);
    ACX_ASSERT_STATUS(acx_allreduce(coll, b, b, n, ACX_DTYPE_F32, ACX_REDOP_SUM, 0, NULL), ACX_OK);
    ACX_ASSERT_STATUS(acx_buffer_copy(cp, 0, b, 0, n * sizeof(float), 0, T_LONG), ACX_OK);
    get(cp, 0, o, n, ACX_DTYPE_F32);
    for (size_t i = 0; i < n; i++) wrong += o[i] != (float)nranks * (ranks_sum + (float)nranks * (float)(i % 7));
    acx_buffer_release(cp);
    if (wrong) fprintf(stderr, "rank %d: %zu values out of stream order (%zu elements)\n", rank, wrong, n);
    CU_ASSERT_EQUAL(wrong, 0);
    ACX_ASSERT_STATUS(acx_coll_synchronize(coll, T_LONG), ACX_OK);
    acx_buffer_release(a);
    acx_buffer_release(b);
    free(v);
    free(o);
  }
}

/* ---- cuda: the executor aborts the communicator under an operation in flight ---- */
/* The executor aborts a communicator on its own in several cases (an operation that NCCL or its
 * validation refused, a point-to-point deadline, a destroy's deadline, the grace period after an
 * asynchronous error); ncclCommAbort ends the kernels in flight, which leave with whatever their
 * buffers hold. Those operations must report the abort's cause, not success. The commands go to
 * the executor directly, past the coll, so that the rank's watchdog (which would fail a tracked
 * operation first) sees nothing: what is checked is the executor's own reply. */
static acx_status_t raw_submit(acxi_cmd_t *cmd, acx_buffer_t *b, acx_future_t **f) {
  acxi_bufarg_t ba[1] = {{b, "buf"}};
  return acxi_device_submit(coll->dev, cmd, b ? ba : NULL, b ? 1 : 0, 0, -1, acxi_deadline(T_LONG), f);
}

static void run_exec_abort(void) {
  acx_buffer_t *b = alloc(4, ACX_DTYPE_F32);
  float v[4] = {1, 2, 3, 4};
  put(b, 0, v, 4, ACX_DTYPE_F32);
  MPI_Comm wc;
  acx_world_comm(world, &wc);
  /* One all-reduce together first: NCCL connects its peers on a communicator's first operation,
   * and a blocking communicator's first call would wait there for rank 1. */
  ACX_ASSERT_STATUS(acx_allreduce_sync(coll, b, b, 4, ACX_DTYPE_F32, ACX_REDOP_SUM, 0, -1), ACX_OK);
  MPI_Barrier(wc);
  const acx_status_t cause = ACX_ERR_WORLD_REBUILDING;
  if (rank == 0) {
    acxi_cmd_t op = {.op = ACXC_OP_ALLREDUCE, .dtype = ACX_DTYPE_F32, .bytes = 4, .buf = {b->id, b->id},
                     .arg = {coll->comm_id, ACX_REDOP_SUM, (uint64_t)(int64_t)-1}};
    acxi_cmd_t ab = {.op = ACXC_OP_ABORT, .arg = {coll->comm_id, (uint64_t)cause}};
    acx_future_t *f = NULL, *fa = NULL;
    ACX_ASSERT_STATUS(raw_submit(&op, b, &f), ACX_OK);
    ACX_ASSERT_STATUS(raw_submit(&ab, NULL, &fa), ACX_OK);
    ACX_ASSERT_STATUS(acx_future_wait(fa, T_LONG, NULL, 0, NULL), ACX_OK);
    acx_future_release(fa);
    int64_t t0 = acxi_now_ns();
    acx_status_t st = acx_future_wait(f, T_LONG, NULL, 0, NULL);
    acx_future_release(f);
    printf("rank 0: the all-reduce in flight when its communicator was aborted returned %s after %lld ms\n",
           acx_status_name(st), (long long)((acxi_now_ns() - t0) / 1000000));
    ACX_ASSERT_STATUS(st, cause);
  }
  MPI_Barrier(wc);
  if (rank != 0) {
    /* Rank 1's communicator is whole but its peer's is gone: aborted too, so that both destroys
     * are immediate. */
    acxi_cmd_t ab = {.op = ACXC_OP_ABORT, .arg = {coll->comm_id, (uint64_t)cause}};
    acx_future_t *fa = NULL;
    ACX_ASSERT_STATUS(raw_submit(&ab, NULL, &fa), ACX_OK);
    ACX_ASSERT_STATUS(acx_future_wait(fa, T_LONG, NULL, 0, NULL), ACX_OK);
    acx_future_release(fa);
  }
  MPI_Barrier(wc);
  acx_buffer_release(b);
}

/* ---- a killed executor: buffers of the old generation are stale ---- */
static void run_stale(void) {
  acx_buffer_t *old = alloc(8, ACX_DTYPE_F32);
  uint64_t g0 = 0, g = 0;
  acx_device_generation(dev, &g0);
  ACX_ASSERT_STATUS(acx_device_inject_fault(dev, 0, T_LONG), ACX_ERR_DEVICE_LOST);
  for (int64_t dl = acxi_deadline(T_LONG); acxi_now_ns() < dl; usleep(2000)) {
    acx_device_generation(dev, &g);
    if (g > g0 && acx_device_ping(dev, 1000000000) == ACX_OK) break;
  }
  CU_ASSERT(g > g0);
  acx_future_t *x = NULL;
  ACX_ASSERT_STATUS(acx_allreduce(coll, old, old, 8, ACX_DTYPE_F32, ACX_REDOP_SUM, 0, &x), ACX_ERR_STALE_BUFFER);
  CU_ASSERT_PTR_NULL(x);
  acx_buffer_release(old);
  /* The host kind's communicator is MPI's, in the rank: fresh buffers go on working. */
  acx_buffer_t *b = alloc(8, ACX_DTYPE_F32);
  float v[8], o[8];
  for (int i = 0; i < 8; i++) v[i] = (float)(rank + i);
  put(b, 0, v, 8, ACX_DTYPE_F32);
  ACX_ASSERT_STATUS(acx_allreduce_sync(coll, b, b, 8, ACX_DTYPE_F32, ACX_REDOP_SUM, 0, -1), ACX_OK);
  get(b, 0, o, 8, ACX_DTYPE_F32);
  for (int i = 0; i < 8; i++) CU_ASSERT_EQUAL(o[i], (float)(nranks * (nranks - 1) / 2 + nranks * i));
  acx_buffer_release(b);
}

/* ---- cuda: rank 1 dies mid-run ---- */
static int run_kill(int k) {
  /* Runs outside CUnit (no suite is active): plain checks, not CU_ASSERT. */
  const size_t n = 1 << 16;
  acx_buffer_t *b = NULL;
  acx_status_t s = acx_buffer_alloc(dev, n * sizeof(float), ACX_DTYPE_F32, ACX_MEM_DEVICE, T_LONG, &b);
  if (s == ACX_OK) s = acx_buffer_fill(b, 0, ACX_WHOLE, 0x3f800000u, 4, 0, T_LONG);
  if (s != ACX_OK) {
    printf("rank %d: setup failed: %s: FAIL\n", rank, acx_status_str(s));
    return 1;
  }
  for (int i = 0;; i++) {
    if (rank == 1 && i == k) {
      printf("rank 1: SIGKILL after %d all-reduces\n", k);
      fflush(stdout);
      raise(SIGKILL);
    }
    int64_t t0 = acxi_now_ns();
    acx_status_t st = acx_allreduce_sync(coll, b, b, n, ACX_DTYPE_F32, ACX_REDOP_MAX, 0, -1);
    if (st != ACX_OK) {
      double ms = (double)(acxi_now_ns() - t0) / 1e6;
      printf("survivor: rank %d all-reduce %d failed with %s after %.0f ms; coll state %s: PASS (no hang)\n", rank, i,
             acx_status_name(st), ms, acx_status_name(acx_coll_state(coll)));
      fflush(stdout);
      acx_buffer_release(b);
      return ACX_IS_WORLD_ERROR(st) ? 0 : 1;
    }
    if (i > k + 1000) {
      printf("rank %d: the peer is gone but all-reduces keep succeeding: FAIL\n", rank);
      return 1;
    }
  }
}

/* The layout the collectives run over: on a (simulated) cluster they cross nodes. */
/* ---- --peer: acx's own all-reduce takes exactly the all-reduces its parts should ---- */
/* The parts expected (main sets them from the options, the environment and the layout): the small
 * all-reduces (ACX_COLL_PEER=1, or its default from 3 ranks on GPUs) and the two-shot
 * (ACX_COLL_PEER_BIG_KB > 0, or its default: GPUs, exactly 2 ranks, one per GPU, or ranks sharing
 * 2 or more GPUs under MPS, as many on each). */
static int want_small, want_big;

static void test_own_path(void) {
  if (!peer) return;
  uint64_t slot = 0, big_min = 0;
  int parts = acxc_peer_parts(coll, &slot, &big_min);
  CU_ASSERT_FATAL(parts != 0);
  CU_ASSERT_EQUAL(!!(parts & ACXC_PEER_SMALL), want_small);
  CU_ASSERT_EQUAL(!!(parts & ACXC_PEER_BIG), want_big);
  /* unset or -1 (auto): 1 MiB where the ranks of a GPU sum first (groups), else 256 KiB */
  const char *e = getenv("ACX_COLL_PEER_MAX_KB");
  const int auto_kb = (parts & ACXC_PEER_GROUPS) ? ACXC_PEER_SLOT_KB_GROUPS : ACXC_PEER_SLOT_KB_DEFAULT;
  CU_ASSERT_EQUAL(slot, (uint64_t)(e && atoi(e) > 0 ? atoi(e) : auto_kb) * 1024);
  if (parts & ACXC_PEER_BIG) {
    /* unset or -1 (auto): 2 MiB one rank per GPU, just above the slot with groups */
    e = getenv("ACX_COLL_PEER_BIG_MIN_KB");
    uint64_t m = e && atoi(e) >= 0 ? (uint64_t)atoi(e) * 1024 : (parts & ACXC_PEER_GROUPS) ? 0 : 2048 * 1024;
    CU_ASSERT_EQUAL(big_min, m > slot ? m : slot + 1);
  }
  /* f32 counts: one element, a full slot, one more; where the two-shot starts above that, one
   * element less than its smallest (NCCL's) and its smallest. */
  struct { size_t count; int own; } cases[5];
  size_t ncases = 0, most = slot / 4 + 1;
  cases[ncases++].count = 1;
  cases[ncases++].count = slot / 4;
  cases[ncases++].count = slot / 4 + 1;
  if ((parts & ACXC_PEER_BIG) && big_min > slot + 4) {
    cases[ncases++].count = (size_t)(big_min + 3) / 4 - 1;
    cases[ncases++].count = (size_t)(big_min + 3) / 4;
    most = (size_t)(big_min + 3) / 4;
  }
  for (size_t k = 0; k < ncases; k++) {
    uint64_t bytes = (uint64_t)cases[k].count * 4;
    cases[k].own = bytes <= slot ? want_small : want_big && bytes >= big_min;
  }
  float *v = malloc(most * sizeof *v), *o = malloc(most * sizeof *o);
  CU_ASSERT_PTR_NOT_NULL_FATAL(v && o);
  acx_buffer_t *a = alloc(most, ACX_DTYPE_F32), *b = alloc(most, ACX_DTYPE_F32);
  for (size_t i = 0; i < most; i++) v[i] = (float)(rank + 1) * (float)(i % 1000);
  put(a, 0, v, most, ACX_DTYPE_F32);
  const float s = (float)(nranks * (nranks + 1) / 2);
  for (size_t k = 0; k < ncases; k++) {
    uint64_t before = acxc_peer_ops(coll);
    ACX_ASSERT_STATUS(acx_allreduce_sync(coll, a, b, cases[k].count, ACX_DTYPE_F32, ACX_REDOP_SUM, 0, -1), ACX_OK);
    if (acxc_peer_ops(coll) - before != (uint64_t)cases[k].own)
      fprintf(stderr, "rank %d: an all-reduce of %zu f32 %s the own path, which it should %s\n", rank,
              cases[k].count, cases[k].own ? "did not take" : "took", cases[k].own ? "take" : "not take");
    CU_ASSERT_EQUAL(acxc_peer_ops(coll) - before, (uint64_t)cases[k].own);
    memset(o, 0, cases[k].count * sizeof *o);
    get(b, 0, o, cases[k].count, ACX_DTYPE_F32);
    size_t bad = 0;
    for (size_t i = 0; i < cases[k].count; i++) bad += o[i] != s * (float)(i % 1000);
    if (bad) fprintf(stderr, "rank %d: %zu elements: %zu wrong\n", rank, cases[k].count, bad);
    CU_ASSERT_EQUAL(bad, 0);
  }
  /* Other collectives never take it. */
  uint64_t before = acxc_peer_ops(coll);
  ACX_ASSERT_STATUS(acx_broadcast_sync(coll, a, b, 16, ACX_DTYPE_F32, 0, 0, -1), ACX_OK);
  ACX_ASSERT_STATUS(acx_reduce_sync(coll, a, b, 16, ACX_DTYPE_F32, ACX_REDOP_SUM, 0, 0, -1), ACX_OK);
  CU_ASSERT_EQUAL(acxc_peer_ops(coll), before);
  /* Many in flight on two streams, then one synchronize: each in-place sum multiplies by the
   * number of ranks, so a lost, repeated or reordered operation shows. The expected value repeats
   * the path's own arithmetic (equal values added in rank order, in f32). */
  enum { CHAIN = 12 };
  for (size_t i = 0; i < 64; i++) v[i] = 1.0f;
  put(a, 0, v, 64, ACX_DTYPE_F32);
  for (int k = 0; k < CHAIN; k++)
    ACX_ASSERT_STATUS(acx_allreduce(coll, a, a, 64, ACX_DTYPE_F32, ACX_REDOP_SUM, (uint32_t)(k % 2), NULL), ACX_OK);
  ACX_ASSERT_STATUS(acx_coll_synchronize(coll, -1), ACX_OK);
  CU_ASSERT_EQUAL(acxc_peer_ops(coll) - before, want_small ? CHAIN : 0);
  get(a, 0, o, 64, ACX_DTYPE_F32);
  float want = 1.0f;
  for (int k = 0; k < CHAIN; k++) {
    float acc = want;
    for (int q = 1; q < nranks; q++) acc += want;
    want = acc;
  }
  size_t bad = 0;
  for (size_t i = 0; i < 64; i++) bad += o[i] != want;
  CU_ASSERT_EQUAL(bad, 0);
  /* More than the worker path's window (ACXC_PEER_WINDOW, 64) back to back, fire-and-forget, with
   * a broadcast between (another path) that must read what the sums before it wrote: 8 sums (n^8),
   * the root's value broadcast, 70 maxima (the value stays), 4 sums: n^12 everywhere, exact in f32
   * for n <= 8. On the NCCL path the broadcast shares the sums' stream: an own all-reduce that
   * overtook it in the executor deadlocked there (session 18, the NCCL extension's flush hook). On
   * the worker path (host kind, hierarchical) it goes on another stream, so that the coll's order
   * must hold across streams; on the host kind the executor's order keeps it too (a worker that
   * did not drain its own all-reduces first still passed here), so that rule is not isolated. */
  const uint32_t bstream = !use_cuda || hier ? 1u : 0u;
  for (size_t i = 0; i < 64; i++) v[i] = 1.0f;
  put(a, 0, v, 64, ACX_DTYPE_F32);
  before = acxc_peer_ops(coll);
  for (int k = 0; k < 8; k++) ACX_ASSERT_STATUS(acx_allreduce(coll, a, a, 64, ACX_DTYPE_F32, ACX_REDOP_SUM, 0, NULL), ACX_OK);
  ACX_ASSERT_STATUS(acx_broadcast(coll, a, a, 64, ACX_DTYPE_F32, nranks - 1, bstream, NULL), ACX_OK);
  for (int k = 0; k < 70; k++) ACX_ASSERT_STATUS(acx_allreduce(coll, a, a, 64, ACX_DTYPE_F32, ACX_REDOP_MAX, 0, NULL), ACX_OK);
  acx_future_t *last = NULL;
  for (int k = 0; k < 4; k++)
    ACX_ASSERT_STATUS(acx_allreduce(coll, a, a, 64, ACX_DTYPE_F32, ACX_REDOP_SUM, 0, k == 3 ? &last : NULL), ACX_OK);
  ACX_ASSERT_STATUS(acx_coll_wait(coll, last, -1), ACX_OK);
  ACX_ASSERT_STATUS(acx_coll_synchronize(coll, -1), ACX_OK);
  CU_ASSERT_EQUAL(acxc_peer_ops(coll) - before, want_small ? 82 : 0);
  get(a, 0, o, 64, ACX_DTYPE_F32);
  want = 1.0f;
  for (int k = 0; k < 12; k++) want *= (float)nranks;
  bad = 0;
  for (size_t i = 0; i < 64; i++) bad += o[i] != want;
  if (bad) fprintf(stderr, "rank %d: 82 own all-reduces around a broadcast: %zu of 64 wrong (o[0] %g, want %g)\n", rank,
                   bad, (double)o[0], (double)want);
  CU_ASSERT_EQUAL(bad, 0);
  acx_buffer_release(a);
  acx_buffer_release(b);
  free(v);
  free(o);
}

static void test_node_layout(void) {
  int nodes = acx_test_check_nodes(world), size = 0;
  ACX_ASSERT_STATUS(acx_coll_size(coll, &size), ACX_OK);
  CU_ASSERT_EQUAL(size, nranks);
  if (rank == 0) printf("\n    %d ranks on %d node(s)", nranks, nodes);
}

static int run_suite(void) {
  static const acx_test_case_t cases[] = {ACX_TEST(test_node_layout),   ACX_TEST(test_bad_input),
                                          ACX_TEST(test_allreduce_all), ACX_TEST(test_broadcast_reduce),
                                          ACX_TEST(test_allgather_reduce_scatter),
                                          ACX_TEST(test_ring_alltoall), ACX_TEST(test_group_and_pipeline),
                                          ACX_TEST(test_repeated),      ACX_TEST(test_own_path),
                                          ACX_TEST(test_stream_order),  ACX_TEST_END};
  return acx_test_run(use_cuda ? "coll-nccl" : "coll-mpi", cases, NULL, NULL);
}

int main(int argc, char **argv) {
  int provided = 0, watchdog = 0, stale = 0, exec_abort = 0, kill_after = -1;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--inline")) inline_mode = 1;
    else if (!strcmp(argv[i], "--watchdog")) watchdog = 1;
    else if (!strcmp(argv[i], "--stale")) stale = 1;
    else if (!strcmp(argv[i], "--exec-abort")) exec_abort = 1, use_cuda = 1;
    else if (!strcmp(argv[i], "--cuda")) use_cuda = 1;
    else if (!strcmp(argv[i], "--hier")) hier = 1;
    else if (!strcmp(argv[i], "--peer")) peer = 1;
    else if (!strcmp(argv[i], "--peer-auto")) peer_auto = 1;
    else if (!strcmp(argv[i], "--kill-after") && i + 1 < argc) kill_after = atoi(argv[++i]), use_cuda = 1;
    else {
      fprintf(stderr, "test_coll: unknown argument '%s'\n", argv[i]);
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
  cfg.transport = inline_mode ? ACX_TRANSPORT_INLINE : ACX_TRANSPORT_PROCESS;
  cfg.streams = 2;
  int orc = acx_test_open_device(world, sys, &cfg, "test_coll", &dev);
  if (orc != 0) return orc; /* skipped or failed: sys, world and MPI are gone */
  acx_status_t st = acx_coll_create(world, dev, sys, NULL, &coll);
  if (st != ACX_OK) {
    fprintf(stderr, "rank %d: acx_coll_create: %s\n", rank, acx_status_str(st));
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  /* On GPUs the host decides: ranks sharing a GPU make the coll hierarchical (send/recv refused),
   * a GPU per rank keeps it flat, whatever --hier said; the suite follows the coll. */
  if (use_cuda && hier != coll->hier_on) {
    if (rank == 0)
      printf("test_coll: %s: the coll is %s here, and so is the suite\n", hier ? "--hier" : "no --hier",
             coll->hier_on ? "hierarchical (ranks share a GPU)" : "flat (a GPU per rank)");
    hier = coll->hier_on;
  }
  /* The parts of the own path to expect. --peer: ACX_COLL_PEER=1, the small all-reduces; the
   * two-shot by ACX_COLL_PEER_BIG_KB or its default (2 GPUs of one node, one rank each, or 2 or
   * more with as many ranks each under MPS). --peer-auto: ACX_COLL_PEER left at its default, the
   * small part on GPUs of one node from 3 ranks, one per GPU or sharing under MPS; the path must be
   * on exactly where one of the parts is, and is then tested as with --peer. */
  if (peer || peer_auto) {
    int nodes = 0, node = 0, mine = 0, sharers = 0, mps_mine = acxc_hier_mps(NULL, 0), mps = 0;
    if (acx_world_gpu_peers(world, NULL, 0, &mine) != ACX_OK || acx_world_node(world, &node, &nodes) != ACX_OK)
      MPI_Abort(MPI_COMM_WORLD, 2);
    MPI_Allreduce(&mine, &sharers, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&mps_mine, &mps, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    int fewest = 0; /* the fewest ranks on one GPU */
    MPI_Allreduce(&mine, &fewest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    const char *bk = getenv("ACX_COLL_PEER_BIG_KB"), *bg = getenv("ACX_COLL_PEER_BIG_GROUPS");
    int one_node = nodes == 1 && nranks <= 16;
    want_small = one_node && (peer || (use_cuda && nranks >= 3 && (sharers == 1 || mps)));
    /* the two-shot's default: 2 GPUs, one rank each, or 2 or more GPUs with as many ranks each
     * under MPS (with groups) */
    int even = fewest == sharers && nranks >= 2 * sharers;
    want_big = one_node && (bk && atoi(bk) >= 0 ? atoi(bk) > 0
                            : use_cuda && even && (sharers == 1 ? nranks == 2 : mps && (!bg || atoi(bg) > 0)));
    int want = want_small || want_big;
    if (rank == 0)
      printf("test_coll: %s: %d ranks on %d node(s), at most %d per GPU, MPS %s: the own path should be %s (small "
             "all-reduces %s, two-shot %s), is %s\n", peer ? "--peer" : "--peer-auto", nranks, nodes, sharers,
             mps ? "on" : "off", want ? "on" : "off", want_small ? "on" : "off", want_big ? "on" : "off",
             acxc_peer_on(coll) ? "on" : "off");
    if (!!acxc_peer_on(coll) != want) {
      fprintf(stderr, "rank %d: %s: the own path is %s, should be %s\n", rank, peer ? "--peer" : "--peer-auto",
              acxc_peer_on(coll) ? "on" : "off", want ? "on" : "off");
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    peer = want;
  }
  int rc;
  if (kill_after >= 0) {
    rc = run_kill(kill_after);
    /* The survivor leaves without MPI_Finalize: its peer is dead, and MPI cannot finalize a job
     * with a dead process (that is the launcher's business). acx's side is torn down first. */
    acx_coll_destroy(coll, 2000000000LL);
    acx_device_close(dev, T_LONG);
    acx_system_destroy(sys, T_LONG);
    fflush(stdout);
    _exit(rc);
  }
  if (exec_abort && (nranks != 2 || hier || acxc_peer_on(coll))) {
    fprintf(stderr, "rank %d: --exec-abort wants 2 ranks on NCCL's path (a GPU each, ACX_COLL_PEER=0)\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  if (watchdog || stale || exec_abort) {
    static const acx_test_case_t wcases[] = {{"watchdog", run_watchdog}, ACX_TEST_END};
    static const acx_test_case_t scases[] = {{"stale_buffer", run_stale}, ACX_TEST_END};
    static const acx_test_case_t acases[] = {{"exec_abort", run_exec_abort}, ACX_TEST_END};
    rc = acx_test_run("coll", watchdog ? wcases : stale ? scases : acases, NULL, NULL);
  } else {
    rc = run_suite();
  }
  st = acx_coll_destroy(coll, T_LONG);
  if (!watchdog && !exec_abort && st != ACX_OK) {
    fprintf(stderr, "rank %d: acx_coll_destroy: %s\n", rank, acx_status_str(st));
    rc = 1;
  }
  acx_device_close(dev, T_LONG);
  acx_system_destroy(sys, T_LONG);
  acx_world_finalize(world);
  int any = 0;
  MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any ? 1 : 0;
}
