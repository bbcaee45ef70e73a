/* acx-allreduce-bench: all-reduce bandwidth and latency across MPI ranks, with nccl-tests' flags,
 * columns and busbw formula. Modes: raw NCCL (the peer acx is measured against), MPI_Allreduce on
 * host-staged buffers, and acx's own collectives; --compare runs two of them alternately per size
 * (--per-gpu: the baseline on one rank per GPU, where ranks share GPUs).
 * Every result is checked against exactly known values (-c 1) and any wrong value fails the run. */
#define _GNU_SOURCE
#include <getopt.h>
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "acx/coll.h"
#include "acx/config.h"
#include "acx/device.h"
#include "acx/world.h"
#include "acx_build_config.h"
#include "bench_util.h"
#if ACX_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#if ACX_HAVE_NCCL
#include <nccl.h>
#endif

#define MAX_SIZES 64

typedef enum { MODE_ACTOR, MODE_NCCL, MODE_MPI, MODE_NONE } bench_mode_t;
static const char *const mode_names[] = {"actor", "nccl", "mpi"};
/* The baseline's name when it is the mode itself (--mode nccl --baseline nccl): two communicators of
 * one kind, measured as acx is against its peer, show the comparison's own noise floor. */
static const char *const twin_names[] = {"actor2", "nccl2", "mpi2"};

typedef struct opts {
  size_t min_bytes, max_bytes;
  unsigned factor;
  int iters, warmup, check;
  int reps; /* rounds per size and placement, the modes alternating (ABBA); medians reported */
  bench_dtype_t dtype;
  bench_op_t op;
  bench_mode_t mode, baseline;
  int compare;
  int per_gpu; /* --per-gpu: the baseline on one rank per GPU (issue 16: ranks that share GPUs) */
  int reg;     /* --register: acx's buffers ACX_MEM_SHAREABLE and registered with the coll */
  const char *transport; /* actor mode: NULL (ACX_EXECUTOR), "process" or "inline" */
  const char *json, *csv, *plot;
} opts_t;

typedef struct bench {
  opts_t o;
  int rank, nranks, local_rank, nodes;
  int have_gpu, cuda_dev;
  char dev_desc[ACX_TOPO_CPUSET_STRLEN + 512];
  void *h_in, *h_out, *h_exp; /* host buffers of the check */
  size_t exp_count;           /* h_exp holds the result of exp_count elements over exp_nranks ranks */
  int exp_nranks;             /* with seed exp_seed (0 ranks: nothing yet) */
  unsigned exp_seed;
  acx_world_t *world;
  acx_topo_binding_t bind;
  /* --per-gpu: this rank leads its GPU's ranks (the lowest of them) and takes part in the
   * baseline; leaders: their number, lead_rank: this leader's index among them, lead_comm: theirs
   * (MPI_COMM_NULL elsewhere); per_min/per_max: the fewest and most ranks on one GPU. */
  int leader, leaders, lead_rank, per_min, per_max;
  MPI_Comm lead_comm;
  int side_nranks[2]; /* the ranks of each side's all-reduce (--mode's, --baseline's) */
} bench_t;

typedef struct backend backend_t;
struct backend {
  bench_mode_t mode;
  /* 0 on success; otherwise has printed why. Same outcome expected on every rank. */
  int (*setup)(backend_t *, bench_t *);
  /* `iters` all-reduces of count elements launched back to back, then waited for. */
  int (*run)(backend_t *, bench_t *, int inplace, size_t count, int iters);
  int (*load)(backend_t *, bench_t *, int inplace, const void *host, size_t bytes);
  int (*fetch)(backend_t *, bench_t *, void *host, size_t bytes);
  void (*teardown)(backend_t *, bench_t *);
  void *send, *recv;   /* device buffers (nccl; mpi with a GPU) or host buffers (mpi) */
  void *hsend, *hrecv; /* host staging (mpi with a GPU) */
  void *stream;
  void *nccl_comm;
  MPI_Datatype mpi_type;
  MPI_Op mpi_op;
  int own_op;
  /* Who takes part: every rank, or with --per-gpu in the baseline one rank per GPU. A rank that
   * does not (active 0) allocates nothing and returns at once from run, load and fetch; brank and
   * bnranks are the rank and size of the ranks that do, comm their communicator. */
  int active, brank, bnranks;
  MPI_Comm comm;
  /* actor mode */
  acx_system_t *sys;
  acx_device_t *dev;
  acx_coll_t *coll;
  acx_buffer_t *asend, *arecv;
  acx_coll_reg_t *rsend, *rrecv; /* --register */
  /* run: when the last operation had been handed over (now_s), before the final wait */
  double issued_s;
};

typedef struct result {
  double time_us, algbw, busbw;
  double issue_us; /* the issuing thread's time per call (launch or hand-over), before the final wait */
  long wrong; /* -1: not checked */
} result_t;

#define MAX_REPS 99

typedef struct row {
  size_t bytes, count;
  result_t r[2][2]; /* [backend: primary, baseline][0 out-of-place, 1 in-place]: medians over rounds */
  double rmin[2], rmax[2]; /* per placement: the smallest and largest ratio of one round's pair */
  double rq[2][MAX_REPS];  /* per placement: every round's ratio, in round order */
} row_t;

static int g_rank;

#define FAIL(...)                                                                  \
  do {                                                                             \
    fprintf(stderr, "acx-allreduce-bench: rank %d: ", g_rank);                     \
    fprintf(stderr, __VA_ARGS__);                                                  \
    fprintf(stderr, "\n");                                                         \
  } while (0)

/* A failure in the middle of a timed loop leaves the peers inside a collective: end the job. */
#define DIE(...)                                                                   \
  do {                                                                             \
    FAIL(__VA_ARGS__);                                                             \
    MPI_Abort(MPI_COMM_WORLD, 3);                                                  \
  } while (0)

#if ACX_HAVE_CUDA
#define CUDA_OR(call, action)                                                      \
  do {                                                                             \
    cudaError_t e_ = (call);                                                       \
    if (e_ != cudaSuccess) {                                                       \
      FAIL("%s failed: %s", #call, cudaGetErrorString(e_));                        \
      action;                                                                      \
    }                                                                              \
  } while (0)
#endif

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---------------------------------------------------------------- actor: through acx */

#define ACTOR_OR(call, action)                                                     \
  do {                                                                             \
    acx_status_t s_ = (call);                                                      \
    if (s_ != ACX_OK) {                                                            \
      FAIL("%s: %s", #call, acx_status_str(s_));                                   \
      action;                                                                      \
    }                                                                              \
  } while (0)
#define ACTOR_TIMEOUT 60000000000LL

/* bench_util's types and ops are acx's (the dtype shifted by acx's untyped byte). */
static acx_dtype_t acx_type(bench_dtype_t d) { return (acx_dtype_t)(d + ACX_DTYPE_I8); }

static int actor_setup(backend_t *be, bench_t *b) {
  /* Workers, poller and executor on the cores the world chose for this rank's GPU (the issue's
   * binding); the benchmark's main thread, which times and issues, is left where it was. */
  const char *cores = b->bind.cpuset[0] ? b->bind.cpuset : NULL;
  acx_system_config_t scfg = ACX_SYSTEM_CONFIG_INIT;
  scfg.cpuset = cores;
  ACTOR_OR(acx_system_create(&scfg, &be->sys), return -1);
  acx_device_config_t cfg = ACX_DEVICE_CONFIG_INIT;
  cfg.cpuset = cores;
  int cuda = b->have_gpu && ACX_HAVE_NCCL; /* the cuda kind's collectives are NCCL's */
  cfg.kind = cuda ? ACX_DEVICE_KIND_CUDA : ACX_DEVICE_KIND_HOST;
  cfg.transport = !b->o.transport                       ? ACX_TRANSPORT_DEFAULT
                  : strcmp(b->o.transport, "inline") == 0 ? ACX_TRANSPORT_INLINE
                                                          : ACX_TRANSPORT_PROCESS;
  if (cuda) {
    cfg.cuda_ordinal = b->cuda_dev;
    if (b->bind.pci_bus_id[0]) cfg.pci_bus_id = b->bind.pci_bus_id;
  }
  ACTOR_OR(acx_device_open(be->sys, &cfg, &be->dev), return -1);
  acx_dtype_t t = acx_type(b->o.dtype);
  const acx_mem_kind_t mk = b->o.reg ? ACX_MEM_SHAREABLE : ACX_MEM_DEVICE;
  ACTOR_OR(acx_buffer_alloc(be->dev, b->o.max_bytes, t, mk, ACTOR_TIMEOUT, &be->asend), return -1);
  ACTOR_OR(acx_buffer_alloc(be->dev, b->o.max_bytes, t, mk, ACTOR_TIMEOUT, &be->arecv), return -1);
  /* Collective: every rank reaches this line (setup is agreed on only afterwards). */
  ACTOR_OR(acx_coll_create(b->world, be->dev, be->sys, NULL, &be->coll), return -1);
  if (b->o.reg) { /* collective too */
    ACTOR_OR(acx_coll_register(be->coll, be->asend, ACTOR_TIMEOUT, &be->rsend), return -1);
    ACTOR_OR(acx_coll_register(be->coll, be->arecv, ACTOR_TIMEOUT, &be->rrecv), return -1);
  }
  return 0;
}

/* As nccl-tests: iters launches back to back, then one wait. All but the last are
 * fire-and-forget; a failure of one of those surfaces on the last (same communicator, in order). */
static int actor_run(backend_t *be, bench_t *b, int inplace, size_t count, int iters) {
  acx_buffer_t *src = inplace ? be->arecv : be->asend;
  acx_dtype_t t = acx_type(b->o.dtype);
  acx_redop_t op = (acx_redop_t)b->o.op;
  for (int i = 0; i + 1 < iters; i++)
    ACTOR_OR(acx_allreduce(be->coll, src, be->arecv, count, t, op, 0, NULL), return -1);
  acx_future_t *last = NULL;
  ACTOR_OR(acx_allreduce(be->coll, src, be->arecv, count, t, op, 0, &last), return -1);
  be->issued_s = now_s();
  ACTOR_OR(acx_coll_wait(be->coll, last, -1), return -1);
  return 0;
}

static int actor_load(backend_t *be, bench_t *b, int inplace, const void *host, size_t bytes) {
  (void)b;
  ACTOR_OR(acx_buffer_write(inplace ? be->arecv : be->asend, 0, host, bytes, 0, ACTOR_TIMEOUT), return -1);
  return 0;
}

static int actor_fetch(backend_t *be, bench_t *b, void *host, size_t bytes) {
  (void)b;
  ACTOR_OR(acx_buffer_read(be->arecv, 0, host, bytes, 0, ACTOR_TIMEOUT), return -1);
  return 0;
}

static void actor_teardown(backend_t *be, bench_t *b) {
  (void)b;
  if (be->rrecv) (void)acx_coll_deregister(be->rrecv, ACTOR_TIMEOUT);
  if (be->rsend) (void)acx_coll_deregister(be->rsend, ACTOR_TIMEOUT);
  if (be->coll) acx_coll_destroy(be->coll, ACTOR_TIMEOUT);
  acx_buffer_release(be->asend);
  acx_buffer_release(be->arecv);
  if (be->dev) acx_device_close(be->dev, ACTOR_TIMEOUT);
  if (be->sys) acx_system_destroy(be->sys, ACTOR_TIMEOUT);
}

/* ---------------------------------------------------------------- nccl: raw NCCL, the peer */

#if ACX_HAVE_NCCL
static const ncclDataType_t nccl_types[BENCH_DTYPE_COUNT] = {
    ncclInt8, ncclUint8, ncclInt32, ncclUint32, ncclInt64, ncclUint64, ncclFloat16, ncclBfloat16, ncclFloat32,
    ncclFloat64};
static const ncclRedOp_t nccl_ops[BENCH_OP_COUNT] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};

#define NCCL_OR(call, action)                                                      \
  do {                                                                             \
    ncclResult_t r_ = (call);                                                      \
    if (r_ != ncclSuccess) {                                                       \
      FAIL("%s failed: %s (%s)", #call, ncclGetErrorString(r_), ncclGetLastError(NULL)); \
      action;                                                                      \
    }                                                                              \
  } while (0)

static int nccl_setup(backend_t *be, bench_t *b) {
  if (!b->have_gpu) {
    if (b->rank == 0) FAIL("--mode nccl needs a GPU per rank; none is visible here (use --mode mpi)");
    return -1;
  }
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  int ok = 1;
  if (b->rank == 0) NCCL_OR(ncclGetUniqueId(&id), ok = 0);
  /* The root's outcome travels with the id so that no rank waits for an id that never comes. */
  struct {
    int ok;
    ncclUniqueId id;
  } msg = {ok, id};
  MPI_Bcast(&msg, sizeof msg, MPI_BYTE, 0, MPI_COMM_WORLD); /* world rank 0 always takes part */
  if (!msg.ok) return -1;
  if (!be->active) return 0;
  cudaStream_t s;
  CUDA_OR(cudaSetDevice(b->cuda_dev), return -1);
  CUDA_OR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), return -1);
  be->stream = s;
  CUDA_OR(cudaMalloc(&be->send, b->o.max_bytes), return -1);
  CUDA_OR(cudaMalloc(&be->recv, b->o.max_bytes), return -1);
  ncclComm_t comm;
  NCCL_OR(ncclCommInitRank(&comm, be->bnranks, msg.id, be->brank), return -1);
  be->nccl_comm = comm;
  return 0;
}

static int nccl_run(backend_t *be, bench_t *b, int inplace, size_t count, int iters) {
  if (!be->active) return 0;
  for (int i = 0; i < iters; i++)
    NCCL_OR(ncclAllReduce(inplace ? be->recv : be->send, be->recv, count, nccl_types[b->o.dtype], nccl_ops[b->o.op],
                          (ncclComm_t)be->nccl_comm, (cudaStream_t)be->stream),
            return -1);
  be->issued_s = now_s();
  CUDA_OR(cudaStreamSynchronize((cudaStream_t)be->stream), return -1);
  return 0;
}

static void nccl_teardown(backend_t *be, bench_t *b) {
  (void)b;
  if (be->nccl_comm) ncclCommDestroy((ncclComm_t)be->nccl_comm);
  if (be->send) cudaFree(be->send);
  if (be->recv) cudaFree(be->recv);
  if (be->stream) cudaStreamDestroy((cudaStream_t)be->stream);
}
#else
static int nccl_setup(backend_t *be, bench_t *b) {
  (void)be;
  if (b->rank == 0) FAIL("--mode nccl: this build has no NCCL (configure with CUDA and NCCL found)");
  return -1;
}
#define nccl_run NULL
#define nccl_teardown NULL
#endif

/* Device buffers shared by nccl and mpi-with-GPU. */
static int dev_load(backend_t *be, bench_t *b, int inplace, const void *host, size_t bytes) {
  if (!be->active) return 0;
#if ACX_HAVE_CUDA
  if (b->have_gpu && (be->mode == MODE_NCCL || be->mode == MODE_MPI)) {
    /* From pageable memory cudaMemcpy may return before its DMA has landed (CUDA runtime API,
     * "API synchronization behavior"), and the operations run on a non-blocking stream that does
     * not wait for the legacy one: without the device-wide wait an all-reduce could read part of
     * the old data (seen once: raw NCCL in place, 1 MiB, 14208 elements wrong). */
    CUDA_OR(cudaMemcpy(inplace ? be->recv : be->send, host, bytes, cudaMemcpyHostToDevice), return -1);
    CUDA_OR(cudaDeviceSynchronize(), return -1);
    return 0;
  }
#endif
  memcpy(inplace ? be->recv : be->send, host, bytes);
  return 0;
}

static int dev_fetch(backend_t *be, bench_t *b, void *host, size_t bytes) {
  if (!be->active) return 0;
#if ACX_HAVE_CUDA
  if (b->have_gpu && (be->mode == MODE_NCCL || be->mode == MODE_MPI)) {
    CUDA_OR(cudaMemcpy(host, be->recv, bytes, cudaMemcpyDeviceToHost), return -1);
    return 0;
  }
#endif
  memcpy(host, be->recv, bytes);
  return 0;
}

/* ---------------------------------------------------------------- mpi: MPI_Allreduce on the host */

/* MPI has no half or bfloat16: user ops computing in float, one per (type, op). */
#define HALF_OP(name, dt, op)                                                      \
  static void name(void *in, void *inout, int *len, MPI_Datatype *t) {             \
    (void)t;                                                                       \
    bench_reduce_local(inout, in, dt, op, (size_t)*len);                           \
  }
HALF_OP(h_sum, BENCH_HALF, BENCH_SUM)
HALF_OP(h_prod, BENCH_HALF, BENCH_PROD)
HALF_OP(h_max, BENCH_HALF, BENCH_MAX)
HALF_OP(h_min, BENCH_HALF, BENCH_MIN)
HALF_OP(b_sum, BENCH_BFLOAT16, BENCH_SUM)
HALF_OP(b_prod, BENCH_BFLOAT16, BENCH_PROD)
HALF_OP(b_max, BENCH_BFLOAT16, BENCH_MAX)
HALF_OP(b_min, BENCH_BFLOAT16, BENCH_MIN)

static int mpi_setup(backend_t *be, bench_t *b) {
  static const MPI_Op native_ops[] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN, MPI_SUM};
  static MPI_User_function *const half_fns[2][4] = {{h_sum, h_prod, h_max, h_min}, {b_sum, b_prod, b_max, b_min}};
  const MPI_Datatype types[BENCH_DTYPE_COUNT] = {MPI_INT8_T, MPI_UINT8_T, MPI_INT32_T, MPI_UINT32_T, MPI_INT64_T,
                                                 MPI_UINT64_T, MPI_UINT16_T, MPI_UINT16_T, MPI_FLOAT, MPI_DOUBLE};
  bench_dtype_t d = b->o.dtype;
  int opi = b->o.op == BENCH_AVG ? BENCH_SUM : (int)b->o.op; /* avg = sum, then divide */
  be->mpi_type = types[d];
  if (d == BENCH_HALF || d == BENCH_BFLOAT16) {
    if (MPI_Op_create(half_fns[d == BENCH_BFLOAT16][opi], 1, &be->mpi_op) != MPI_SUCCESS) {
      FAIL("MPI_Op_create failed");
      return -1;
    }
    be->own_op = 1;
  } else {
    be->mpi_op = native_ops[b->o.op];
  }
  size_t n = b->o.max_bytes;
  if (!be->active) return 0;
#if ACX_HAVE_CUDA
  if (b->have_gpu) {
    CUDA_OR(cudaSetDevice(b->cuda_dev), return -1);
    CUDA_OR(cudaMalloc(&be->send, n), return -1);
    CUDA_OR(cudaMalloc(&be->recv, n), return -1);
    CUDA_OR(cudaMallocHost(&be->hsend, n), return -1); /* pinned: staging copies at full speed */
    CUDA_OR(cudaMallocHost(&be->hrecv, n), return -1);
    return 0;
  }
#endif
  if (posix_memalign(&be->send, 4096, n) || posix_memalign(&be->recv, 4096, n)) {
    FAIL("out of host memory for two %zu-byte buffers", n);
    return -1;
  }
  memset(be->send, 0, n);
  memset(be->recv, 0, n);
  return 0;
}

/* MPI counts are int: huge messages go in chunks. */
static int mpi_allreduce_chunked(backend_t *be, bench_t *b, void *send, void *recv, size_t count) {
  size_t es = bench_dtype_size(b->o.dtype), step = (size_t)1 << 28;
  for (size_t off = 0; off < count; off += step) {
    size_t n = count - off < step ? count - off : step;
    void *s = send == MPI_IN_PLACE ? MPI_IN_PLACE : (char *)send + off * es;
    if (MPI_Allreduce(s, (char *)recv + off * es, (int)n, be->mpi_type, be->mpi_op, be->comm) != MPI_SUCCESS)
      return -1;
  }
  if (b->o.op == BENCH_AVG) bench_divide(recv, b->o.dtype, count, be->bnranks);
  return 0;
}

static int mpi_run(backend_t *be, bench_t *b, int inplace, size_t count, int iters) {
  if (!be->active) return 0;
  size_t bytes = count * bench_dtype_size(b->o.dtype);
  for (int i = 0; i < iters; i++) {
#if ACX_HAVE_CUDA
    if (b->have_gpu) { /* host-staged: device to host, reduce, host to device */
      void *hs = inplace ? be->hrecv : be->hsend;
      CUDA_OR(cudaMemcpy(hs, inplace ? be->recv : be->send, bytes, cudaMemcpyDeviceToHost), return -1);
      if (mpi_allreduce_chunked(be, b, inplace ? MPI_IN_PLACE : hs, be->hrecv, count)) return -1;
      CUDA_OR(cudaMemcpy(be->recv, be->hrecv, bytes, cudaMemcpyHostToDevice), return -1);
      continue;
    }
#endif
    (void)bytes;
    if (mpi_allreduce_chunked(be, b, inplace ? MPI_IN_PLACE : be->send, be->recv, count)) return -1;
  }
  return 0;
}

static void mpi_teardown(backend_t *be, bench_t *b) {
  if (be->own_op) MPI_Op_free(&be->mpi_op);
#if ACX_HAVE_CUDA
  if (b->have_gpu) {
    if (be->send) cudaFree(be->send);
    if (be->recv) cudaFree(be->recv);
    if (be->hsend) cudaFreeHost(be->hsend);
    if (be->hrecv) cudaFreeHost(be->hrecv);
    return;
  }
#endif
  (void)b;
  free(be->send);
  free(be->recv);
}

static backend_t make_backend(bench_mode_t m) {
  backend_t be = {.mode = m, .load = dev_load, .fetch = dev_fetch, .mpi_op = MPI_OP_NULL, .comm = MPI_COMM_WORLD};
  switch (m) {
  case MODE_ACTOR:
    be.setup = actor_setup, be.run = actor_run, be.load = actor_load, be.fetch = actor_fetch;
    be.teardown = actor_teardown;
    break;
  case MODE_NCCL: be.setup = nccl_setup, be.run = nccl_run, be.teardown = nccl_teardown; break;
  default: be.setup = mpi_setup, be.run = mpi_run, be.teardown = mpi_teardown; break;
  }
  return be;
}

/* ---------------------------------------------------------------- measuring */

static result_t measure(backend_t *be, bench_t *b, int inplace, size_t count, unsigned seed, int check) {
  result_t r = {0, 0, 0, 0, -1};
  size_t bytes = count * bench_dtype_size(b->o.dtype);
  if (b->o.warmup > 0 && be->run(be, b, inplace, count, b->o.warmup)) DIE("%s warmup failed", mode_names[be->mode]);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = now_s();
  be->issued_s = 0;
  if (be->run(be, b, inplace, count, b->o.iters)) DIE("%s all-reduce failed", mode_names[be->mode]);
  double t1 = now_s();
  double dt[2] = {t1 - t0, (be->issued_s > 0 ? be->issued_s : t1) - t0}, sum[2] = {0, 0};
  if (!be->active) dt[0] = dt[1] = 0; /* not its operation: only the ranks that ran it count */
  MPI_Allreduce(dt, sum, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); /* nccl-tests: average over ranks */
  double sec = sum[0] / be->bnranks / b->o.iters;
  r.issue_us = sum[1] / be->bnranks / b->o.iters * 1e6;
  r.time_us = sec * 1e6;
  r.algbw = bench_algbw(bytes, sec);
  r.busbw = bench_allreduce_busbw(r.algbw, be->bnranks);
  if (check) { /* fresh inputs, one operation, compare every element */
    long wrong = 0, all = 0;
    if (be->active) {
      bench_fill(b->h_in, b->o.dtype, b->o.op, count, be->brank, be->bnranks, seed);
      if (b->exp_nranks != be->bnranks || b->exp_count != count || b->exp_seed != seed) {
        bench_expected(b->h_exp, b->o.dtype, b->o.op, count, be->bnranks, seed);
        b->exp_nranks = be->bnranks, b->exp_count = count, b->exp_seed = seed;
      }
    }
    memset(b->h_out, 0xa5, bytes);
    if (be->load(be, b, inplace, b->h_in, bytes) || be->run(be, b, inplace, count, 1) ||
        be->fetch(be, b, b->h_out, bytes))
      DIE("%s check run failed", mode_names[be->mode]);
    if (be->active) wrong = (long)bench_count_wrong(b->h_out, b->h_exp, b->o.dtype, b->o.op, count, be->bnranks);
    MPI_Allreduce(&wrong, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    r.wrong = all;
  }
  return r;
}

/* Before the first timed size: each mode runs the first size for at least WARM_S (every rank
 * the same number of operations, so nobody waits in a collective alone), so that neither mode's
 * first row pays for clocks ramping up, a sleeping executor or first connections that the other
 * mode's rows were spared. Returns the operations per mode (0 with -w 0). */
#define WARM_S 0.05
static int warm_all(backend_t *be, int nb, bench_t *b, size_t count) {
  if (b->o.warmup <= 0) return 0;
  int batch = b->o.warmup, ops = 0;
  for (int k = 0; k < nb; k++) {
    double t0 = now_s(), el = 0;
    for (int round = 0; round < 1000 && el < WARM_S; round++) {
      if (be[k].run(&be[k], b, 0, count, batch)) DIE("%s warm-up failed", mode_names[be[k].mode]);
      if (k == 0) ops += batch;
      double mine = now_s() - t0;
      MPI_Allreduce(&mine, &el, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    }
  }
  return ops;
}

/* ---------------------------------------------------------------- output */

static void print_result(const result_t *r) {
  char t[32], w[32];
  bench_format_time(r->time_us, t, sizeof t);
  if (r->wrong < 0)
    snprintf(w, sizeof w, "N/A");
  else
    snprintf(w, sizeof w, "%ld", r->wrong);
  printf("  %7s  %6.2f  %6.2f  %5s", t, r->algbw, r->busbw, w);
}

/* Side a against side b: the ratio of their algbw, the same message's time (b's over a's). With the
 * same ranks on both sides it is the ratio of their busbw; with --per-gpu, where b runs on one rank
 * per GPU, the ratio of the busbw per GPU (the GPUs' all-reduce of the message, whatever the ranks
 * on each). */
static double ratio(const result_t *a, const result_t *b) { return b->algbw > 0 ? a->algbw / b->algbw : 0.0; }

static int by_time(const void *x, const void *y) {
  double a = ((const result_t *)x)->time_us, b = ((const result_t *)y)->time_us;
  return a < b ? -1 : a > b;
}

/* The round of median time (the lower middle one of an even count); #wrong from the checked round. */
static result_t median_of(result_t *v, int n) {
  long wrong = v[0].wrong;
  qsort(v, (size_t)n, sizeof *v, by_time);
  result_t m = v[(n - 1) / 2];
  m.wrong = wrong;
  return m;
}

/* The name of side k (0: --mode, 1: --baseline) in the tables, JSON, CSV and plot. */
static const char *side_name(const opts_t *o, int k) {
  if (k == 0) return mode_names[o->mode];
  return o->baseline == o->mode ? twin_names[o->baseline] : mode_names[o->baseline];
}

static void print_header(const bench_t *b, const char *const *devs) {
  const opts_t *o = &b->o;
  printf("# acx-allreduce-bench  mode: %s%s%s%s  nranks: %d  nodes: %d\n", mode_names[o->mode],
         o->reg ? " (registered buffers)" : "", o->compare ? "  baseline: " : "", o->compare ? side_name(o, 1) : "",
         b->nranks, b->nodes);
  printf("# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %u(factor) warmup iters: %d iters: %d agg iters: 1 "
         "validation: %d graph: 0\n#\n# Using devices\n",
         o->min_bytes, o->max_bytes, o->factor, o->warmup, o->iters, o->check);
  for (int r = 0; r < b->nranks; r++) printf("%s\n", devs[r]);
  printf("#\n");
  if (!o->compare) {
    printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "", "",
           "", "");
    printf("# %10s  %12s  %8s  %6s  %6s", "size", "count", "type", "redop", "root");
    printf("  %7s  %6s  %6s  %6s", "time", "algbw", "busbw", "#wrong");
    printf("  %7s  %6s  %6s  %6s\n", "time", "algbw", "busbw", "#wrong");
    printf("# %10s  %12s  %8s  %6s  %6s", "(B)", "(elements)", "", "", "");
    printf("  %7s  %6s  %6s  %6s", "(us)", "(GB/s)", "(GB/s)", "");
    printf("  %7s  %6s  %6s  %6s\n", "(us)", "(GB/s)", "(GB/s)", "");
  } else {
    const char *a = side_name(o, 0), *bl = side_name(o, 1);
    if (o->per_gpu)
      printf("# per GPU: %s on all %d ranks (%d to %d per GPU), %s on one rank per GPU (%d rank%s: the\n"
             "# lowest of each GPU's, the others wait); busbw as nccl-tests' over each side's ranks\n"
             "# out-of-place, then in-place; each: %s time, algbw, busbw, #wrong, then %s time, busbw, and\n"
             "# ratio = %s time / %s time, the busbw per GPU of %s over %s's (> 1: %s is faster)\n",
             a, b->nranks, b->per_min, b->per_max, bl, b->leaders, b->leaders == 1 ? "" : "s", a, bl, bl, a, a, bl, a);
    else
      printf("# out-of-place, then in-place; each: %s time, algbw, busbw, #wrong, then %s time, busbw, and\n"
             "# ratio = %s busbw / %s busbw (> 1: %s is faster)\n", a, bl, a, bl, a);
    if (o->reps > 1)
      printf("# %d rounds per size and placement, the modes alternating: times are medians; rmin/rmax: the\n"
             "# smallest and largest ratio of one round's pair\n", o->reps);
    printf("#\n");
    printf("# %10s  %12s  %8s  %6s  %6s", "", "", "", "", "");
    for (int p = 0; p < 2; p++)
      printf("  %-33.33s  %-7.7s  %6s  %5s", p ? "in-place" : "out-of-place", bl, "", "");
    printf("\n# %10s  %12s  %8s  %6s  %6s", "size", "count", "type", "redop", "root");
    for (int p = 0; p < 2; p++) {
      printf("  %7s  %6s  %6s  %6s  %7s  %6s  %5s", "time", "algbw", "busbw", "#wrong", "time", "busbw", "ratio");
      if (o->reps > 1) printf("  %5s  %5s", "rmin", "rmax");
    }
    printf("\n# %10s  %12s  %8s  %6s  %6s", "(B)", "(elements)", "", "", "");
    for (int p = 0; p < 2; p++) {
      printf("  %7s  %6s  %6s  %6s  %7s  %6s  %5s", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "");
      if (o->reps > 1) printf("  %5s  %5s", "", "");
    }
    printf("\n");
  }
}

static void print_row(const bench_t *b, const row_t *row) {
  printf("%12zu  %12zu  %8s  %6s  %6i", row->bytes, row->count, bench_dtype_name(b->o.dtype), bench_op_name(b->o.op),
         -1);
  for (int p = 0; p < 2; p++) {
    print_result(&row->r[0][p]);
    if (b->o.compare) {
      char t[32];
      printf("  %7s  %6.2f  %5.3f", bench_format_time(row->r[1][p].time_us, t, sizeof t), row->r[1][p].busbw,
             ratio(&row->r[0][p], &row->r[1][p]));
      if (b->o.reps > 1) printf("  %5.3f  %5.3f", row->rmin[p], row->rmax[p]);
    }
  }
  printf("\n");
  fflush(stdout);
}

static void write_json(const bench_t *b, const row_t *rows, int nrows, const double *avg) {
  FILE *f = fopen(b->o.json, "w");
  if (!f) {
    FAIL("--json: cannot write '%s'", b->o.json);
    return;
  }
  int nb = b->o.compare ? 2 : 1;
  fprintf(f, "{\n  \"benchmark\": \"acx-allreduce-bench\",\n  \"collective\": \"all_reduce\",\n");
  fprintf(f, "  \"mode\": \"%s\",\n  \"baseline\": %s%s%s,\n", mode_names[b->o.mode], nb > 1 ? "\"" : "",
          nb > 1 ? side_name(&b->o, 1) : "null", nb > 1 ? "\"" : "");
  fprintf(f, "  \"nranks\": %d,\n  \"nodes\": %d,\n  \"dtype\": \"%s\",\n  \"op\": \"%s\",\n", b->nranks, b->nodes,
          bench_dtype_name(b->o.dtype), bench_op_name(b->o.op));
  fprintf(f, "  \"iters\": %d,\n  \"warmup\": %d,\n  \"check\": %d,\n  \"busbw_factor\": %.6f,\n", b->o.iters,
          b->o.warmup, b->o.check, bench_allreduce_busbw(1.0, b->nranks));
  fprintf(f, "  \"registered\": %s,\n", b->o.reg ? "true" : "false");
  if (nb > 1) /* ratio: side 0's algbw over side 1's (with the same ranks, their busbw's ratio) */
    fprintf(f, "  \"per_gpu\": %s,\n  \"baseline_nranks\": %d,\n", b->o.per_gpu ? "true" : "false",
            b->side_nranks[1]);
  if (nb > 1 && b->o.per_gpu) fprintf(f, "  \"ranks_per_gpu\": [%d, %d],\n", b->per_min, b->per_max);
  fprintf(f, "  \"avg_busbw\": {");
  for (int k = 0; k < nb; k++) fprintf(f, "%s\"%s\": %.6f", k ? ", " : "", side_name(&b->o, k), avg[k]);
  fprintf(f, "},\n  \"results\": [\n");
  for (int i = 0; i < nrows; i++) {
    fprintf(f, "    {\"size\": %zu, \"count\": %zu, \"type\": \"%s\", \"redop\": \"%s\", \"root\": -1", rows[i].bytes,
            rows[i].count, bench_dtype_name(b->o.dtype), bench_op_name(b->o.op));
    for (int k = 0; k < nb; k++) {
      fprintf(f, ",\n     \"%s\": {", side_name(&b->o, k));
      for (int p = 0; p < 2; p++) {
        const result_t *r = &rows[i].r[k][p];
        fprintf(f, "%s\"%s\": {\"time_us\": %.3f, \"issue_us\": %.3f, \"algbw\": %.4f, \"busbw\": %.4f, \"wrong\": ",
                p ? ", " : "", p ? "in_place" : "out_of_place", r->time_us, r->issue_us, r->algbw, r->busbw);
        if (r->wrong < 0)
          fprintf(f, "null}");
        else
          fprintf(f, "%ld}", r->wrong);
      }
      fprintf(f, "}");
    }
    if (nb > 1)
      fprintf(f, ",\n     \"ratio\": {\"out_of_place\": %.4f, \"in_place\": %.4f}", ratio(&rows[i].r[0][0], &rows[i].r[1][0]),
              ratio(&rows[i].r[0][1], &rows[i].r[1][1]));
    if (nb > 1 && b->o.reps > 1)
      fprintf(f, ",\n     \"ratio_min\": {\"out_of_place\": %.4f, \"in_place\": %.4f}, \"ratio_max\": {\"out_of_place\": "
              "%.4f, \"in_place\": %.4f}", rows[i].rmin[0], rows[i].rmin[1], rows[i].rmax[0], rows[i].rmax[1]);
    if (nb > 1 && b->o.reps > 1) { /* every round's ratio, for pooling rounds over runs */
      fprintf(f, ",\n     \"ratio_rounds\": {");
      for (int p = 0; p < 2; p++) {
        fprintf(f, "%s\"%s\": [", p ? ", " : "", p ? "in_place" : "out_of_place");
        for (int r = 0; r < b->o.reps; r++) fprintf(f, "%s%.4f", r ? ", " : "", rows[i].rq[p][r]);
        fprintf(f, "]");
      }
      fprintf(f, "}");
    }
    fprintf(f, "}%s\n", i + 1 < nrows ? "," : "");
  }
  fprintf(f, "  ]\n}\n");
  if (fclose(f) != 0) FAIL("--json: error writing '%s'", b->o.json);
}

static void write_csv(const bench_t *b, const row_t *rows, int nrows) {
  FILE *f = fopen(b->o.csv, "w");
  if (!f) {
    FAIL("--csv: cannot write '%s'", b->o.csv);
    return;
  }
  fprintf(f, "size,count,type,redop,root,mode,placement,time_us,algbw_GBps,busbw_GBps,wrong,nranks\n");
  for (int i = 0; i < nrows; i++)
    for (int k = 0; k < (b->o.compare ? 2 : 1); k++)
      for (int p = 0; p < 2; p++) {
        const result_t *r = &rows[i].r[k][p];
        fprintf(f, "%zu,%zu,%s,%s,-1,%s,%s,%.3f,%.4f,%.4f,", rows[i].bytes, rows[i].count, bench_dtype_name(b->o.dtype),
                bench_op_name(b->o.op), side_name(&b->o, k), p ? "in-place" : "out-of-place", r->time_us, r->algbw,
                r->busbw);
        if (r->wrong >= 0) fprintf(f, "%ld", r->wrong);
        fprintf(f, ",%d\n", b->side_nranks[k]);
      }
  if (fclose(f) != 0) FAIL("--csv: error writing '%s'", b->o.csv);
}

static int in_path(const char *prog) {
  const char *path = getenv("PATH");
  char dir[4096];
  while (path && *path) {
    size_t n = strcspn(path, ":");
    snprintf(dir, sizeof dir, "%.*s/%s", (int)n, path, prog);
    if (n && access(dir, X_OK) == 0) return 1;
    path += n + (path[n] == ':');
  }
  return 0;
}

static void write_plot(const bench_t *b, const row_t *rows, int nrows) {
  if (!in_path("gnuplot")) {
    printf("# --plot: gnuplot is not installed (not in PATH): no plot written to %s\n", b->o.plot);
    return;
  }
  if (strchr(b->o.plot, '\'') || strchr(b->o.plot, '\n')) {
    FAIL("--plot: file name '%s' holds a quote or newline", b->o.plot);
    return;
  }
  FILE *probe = fopen(b->o.plot, "w"); /* else gnuplot would keep writing the image to stdout */
  if (!probe) {
    FAIL("--plot: cannot write '%s'", b->o.plot);
    return;
  }
  fclose(probe);
  FILE *g = popen("gnuplot >/dev/null", "w");
  if (!g) {
    FAIL("--plot: cannot start gnuplot");
    return;
  }
  int nb = b->o.compare ? 2 : 1;
  fprintf(g, "$D << EOD\n");
  for (int i = 0; i < nrows; i++) {
    fprintf(g, "%zu", rows[i].bytes);
    for (int k = 0; k < nb; k++)
      for (int p = 0; p < 2; p++) fprintf(g, " %.6g %.6g", rows[i].r[k][p].busbw, rows[i].r[k][p].time_us);
    fprintf(g, "\n");
  }
  fprintf(g, "EOD\n");
  fprintf(g, "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) { set terminal pngcairo size 1400,520 noenhanced } "
             "else { set terminal png size 1400,520 noenhanced }\n");
  fprintf(g, "set output '%s'\n", b->o.plot);
  fprintf(g, "set multiplot layout 1,2 title 'acx-allreduce-bench: all-reduce %s %s, %d ranks on %d node(s)'\n",
          bench_dtype_name(b->o.dtype), bench_op_name(b->o.op), b->nranks, b->nodes);
  fprintf(g, "set logscale x 2\nset format x '%%.0b%%B'\nset xlabel 'message size (bytes)'\nset grid\n"
             "set key left top\n");
  for (int panel = 0; panel < 2; panel++) {
    fprintf(g, panel == 0 ? "set ylabel 'bus bandwidth (GB/s)'\nunset logscale y\n"
                          : "set ylabel 'time (us)'\nset logscale y 10\nset key left top\n");
    fprintf(g, "plot ");
    for (int k = 0; k < nb; k++)
      for (int p = 0; p < 2; p++) {
        int col = 2 + (k * 2 + p) * 2 + panel;
        fprintf(g, "%s$D using 1:%d with linespoints title '%s %s'", k || p ? ", " : "", col, side_name(&b->o, k),
                p ? "in-place" : "out-of-place");
      }
    fprintf(g, "\n");
  }
  fprintf(g, "unset multiplot\nset output\n");
  int rc = pclose(g);
  if (rc != 0)
    FAIL("--plot: gnuplot failed (status %d): see its messages above", rc);
  else
    printf("# plot written to %s (busbw and time against size, log axes)\n", b->o.plot);
}

/* ---------------------------------------------------------------- options */

static void usage(void) {
  printf("usage: acx-allreduce-bench [options]   (run under mpirun/srun, one rank per GPU; several with --per-gpu)\n"
         "  -b, --minbytes SIZE      smallest message (default 8; K, M, G suffixes)\n"
         "  -e, --maxbytes SIZE      largest message (default 128M)\n"
         "  -f, --stepfactor N       multiply the size by N between steps (default 2)\n"
         "  -n, --iters N            timed iterations per size (default 20)\n"
         "  -w, --warmup_iters N     untimed iterations before (default 5)\n"
         "  -r, --reps R             rounds per size and placement (default 1, at most 99); with --compare the\n"
         "                           modes alternate ABBA; times are the rounds' medians, rmin/rmax the ratio's\n"
         "                           spread over the rounds\n"
         "  -c, --check 0|1          check every result (default 1); a wrong value fails the run\n"
         "  -d, --datatype T         int8 uint8 int32 uint32 int64 uint64 half bfloat16 float double (float)\n"
         "  -o, --op OP              sum prod max min avg (default sum)\n"
         "      --mode M             actor (through acx: the default; NCCL in the executor with a GPU, the\n"
         "                           host device kind's MPI collectives without), nccl (raw NCCL),\n"
         "                           mpi (MPI_Allreduce on host-staged buffers)\n"
         "      --transport T        actor mode's executor: process (default, ACX_EXECUTOR) or inline\n"
         "      --compare            run --mode and --baseline alternately per size, with a ratio column\n"
         "      --baseline M         the mode compared against (default nccl); nccl or mpi may also be\n"
         "                           compared with itself (--mode nccl --baseline nccl: two communicators,\n"
         "                           the second named nccl2): the comparison's noise floor on this machine\n"
         "      --per-gpu            with --compare, where ranks share GPUs: the baseline runs on one rank per\n"
         "                           GPU (the lowest of its ranks; the others wait), --mode (actor or mpi) on\n"
         "                           every rank, and the ratio is that of the busbw per GPU (the baseline's\n"
         "                           time over the mode's);\n"
         "                           without GPUs the groups are ACX_COLL_HIER_GROUP ranks of a node (the\n"
         "                           host kind's; 0 or unset: the whole node)\n"
         "      --register           acx's buffers ACX_MEM_SHAREABLE and registered with the coll\n"
         "                           (acx_coll_register: ranks sharing a GPU read and store each other's\n"
         "                           buffers instead of staging them; issue 16)\n"
         "      --json FILE          write the results as JSON\n"
         "      --csv FILE           write the results as CSV\n"
         "      --plot FILE.png      plot busbw and time against size (needs gnuplot)\n"
         "  -h, --help\n");
}

static int parse_mode(const char *s, bench_mode_t *m) {
  for (int i = 0; i < MODE_NONE; i++)
    if (strcmp(s, mode_names[i]) == 0) {
      *m = (bench_mode_t)i;
      return 0;
    }
  return -1;
}

static int parse_int_arg(const char *s, int lo, int *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (end == s || *end || v < lo || v > INT_MAX) return -1;
  *out = (int)v;
  return 0;
}

/* 0: run; 1: --help printed; 2: bad arguments (printed by rank 0). */
static int parse_args(int argc, char **argv, opts_t *o, int rank) {
  static const struct option longs[] = {
      {"minbytes", required_argument, 0, 'b'}, {"maxbytes", required_argument, 0, 'e'},
      {"stepfactor", required_argument, 0, 'f'}, {"iters", required_argument, 0, 'n'},
      {"warmup_iters", required_argument, 0, 'w'}, {"check", required_argument, 0, 'c'},
      {"reps", required_argument, 0, 'r'},
      {"datatype", required_argument, 0, 'd'}, {"op", required_argument, 0, 'o'},
      {"mode", required_argument, 0, 'M'}, {"compare", no_argument, 0, 'C'},
      {"baseline", required_argument, 0, 'B'}, {"json", required_argument, 0, 'J'},
      {"transport", required_argument, 0, 'T'},
      {"csv", required_argument, 0, 'V'}, {"plot", required_argument, 0, 'P'},
      {"per-gpu", no_argument, 0, 'G'}, {"register", no_argument, 0, 'R'},
      {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  opterr = 0;
  int c, factor = 2;
  const char *bad = NULL;
  char why[160] = "";
  while (!bad && (c = getopt_long(argc, argv, "b:e:f:n:w:r:c:d:o:h", longs, NULL)) != -1) {
    switch (c) {
    case 'b': if (bench_parse_size(optarg, &o->min_bytes)) bad = "-b: not a size (e.g. 8, 64K, 128M, 8G)"; break;
    case 'e': if (bench_parse_size(optarg, &o->max_bytes)) bad = "-e: not a size (e.g. 8, 64K, 128M, 8G)"; break;
    case 'f': if (parse_int_arg(optarg, 1, &factor)) bad = "-f: the step factor is an integer >= 1"; break;
    case 'n': if (parse_int_arg(optarg, 1, &o->iters)) bad = "-n: iterations are an integer >= 1"; break;
    case 'w': if (parse_int_arg(optarg, 0, &o->warmup)) bad = "-w: warmup iterations are an integer >= 0"; break;
    case 'r': if (parse_int_arg(optarg, 1, &o->reps) || o->reps > MAX_REPS) bad = "-r: rounds are an integer from 1 to 99"; break;
    case 'c': if (parse_int_arg(optarg, 0, &o->check) || o->check > 1) bad = "-c: 0 or 1"; break;
    case 'd': if (bench_dtype_parse(optarg, &o->dtype)) bad = "-d: int8 uint8 int32 uint32 int64 uint64 half bfloat16 float double"; break;
    case 'o': if (bench_op_parse(optarg, &o->op)) bad = "-o: sum prod max min avg"; break;
    case 'M': if (parse_mode(optarg, &o->mode)) bad = "--mode: actor, nccl or mpi"; break;
    case 'B': if (parse_mode(optarg, &o->baseline)) bad = "--baseline: actor, nccl or mpi"; break;
    case 'C': o->compare = 1; break;
    case 'G': o->per_gpu = 1; break;
    case 'R': o->reg = 1; break;
    case 'T':
      if (strcmp(optarg, "process") && strcmp(optarg, "inline")) bad = "--transport: process or inline";
      o->transport = optarg;
      break;
    case 'J': o->json = optarg; break;
    case 'V': o->csv = optarg; break;
    case 'P': o->plot = optarg; break;
    case 'h': if (rank == 0) usage(); return 1;
    default:
      snprintf(why, sizeof why, "unknown option or missing value: '%s'", argv[optind - 1]);
      bad = why;
      break;
    }
  }
  if (!bad && optind < argc) bad = "unexpected argument after the options";
  o->factor = (unsigned)factor;
  size_t probe[1];
  if (!bad && bench_sizes(o->min_bytes, o->max_bytes, o->factor, bench_dtype_size(o->dtype), probe, 0) <= 0)
    bad = "-b/-e/-f: need 0 < minbytes <= maxbytes, a factor >= 2 when they differ, and at least one element";
  if (!bad && o->compare && o->baseline == (o->mode == MODE_NONE ? MODE_ACTOR : o->mode) && o->baseline == MODE_ACTOR)
    bad = "--compare: --mode and --baseline may be equal for nccl and mpi only (acx runs one device per rank)";
  if (!bad && o->per_gpu && (!o->compare || o->baseline == MODE_ACTOR))
    bad = "--per-gpu: needs --compare and --baseline nccl or mpi (the baseline runs on one rank per GPU; acx's "
          "collectives span every rank)";
  if (!bad && o->reg && o->mode != MODE_ACTOR && o->mode != MODE_NONE && !(o->compare && o->baseline == MODE_ACTOR))
    bad = "--register: registers acx's buffers, and neither --mode nor --baseline is actor";
  if (!bad && o->per_gpu && o->mode == MODE_NCCL)
    bad = "--per-gpu: --mode runs on every rank, and NCCL takes one rank per GPU: use actor (the default) or mpi";
  if (bad) {
    if (rank == 0) {
      fprintf(stderr, "acx-allreduce-bench: %s\n", bad);
      usage();
    }
    return 2;
  }
  return 0;
}

/* ---------------------------------------------------------------- main */

static void describe_device(bench_t *b, const acx_topo_binding_t *bind) {
  char host[64] = "";
  gethostname(host, sizeof host - 1);
  const char *name = "host memory";
  char busid[32] = "-";
#if ACX_HAVE_CUDA
  struct cudaDeviceProp prop;
  if (b->have_gpu && cudaGetDeviceProperties(&prop, b->cuda_dev) == cudaSuccess) {
    static char model[256];
    snprintf(model, sizeof model, "%s", prop.name);
    name = model;
    cudaDeviceGetPCIBusId(busid, sizeof busid, b->cuda_dev);
  }
#endif
  snprintf(b->dev_desc, sizeof b->dev_desc, "#  Rank %2d Group  0 Pid %6d on %10s device %2d [%s] %s, cpuset %s",
           b->rank, (int)getpid(), host, b->have_gpu ? b->cuda_dev : -1, busid, name, bind->cpuset);
}

/* The CUDA device of this rank: the topology's choice by PCI bus id, else local rank % count. */
static void choose_gpu(bench_t *b, const acx_topo_binding_t *bind) {
  b->have_gpu = 0;
  b->cuda_dev = -1;
#if ACX_HAVE_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return;
  b->have_gpu = 1;
  b->cuda_dev = b->local_rank % n;
  int dev;
  if (bind->pci_bus_id[0] && cudaDeviceGetByPCIBusId(&dev, bind->pci_bus_id) == cudaSuccess) b->cuda_dev = dev;
#else
  (void)bind;
#endif
}

/* --per-gpu: which ranks lead their GPU (the lowest rank bound to it; without GPUs, the lowest of
 * each ACX_COLL_HIER_GROUP consecutive ranks of a node, as the host kind's hierarchical groups) and
 * the leaders' communicator. Collective. 0, or -1 with a message (rank 0) on every rank. */
static int per_gpu_groups(bench_t *b, int all_gpu) {
  int per = 1, leader = 1;
  if (all_gpu) {
    int first = b->rank;
    if (acx_world_gpu_peers(b->world, &first, 1, &per) != ACX_OK) per = 1, first = b->rank;
    leader = first == b->rank;
  } else {
    int local_size = 1;
    acx_world_local_size(b->world, &local_size);
    int64_t want = 0; /* acx's own reading of it (a bad value: the default, with acx's warning) */
    acx_param_get_int("ACX_COLL_HIER_GROUP", &want);
    int block = want > 0 && want < local_size ? (int)want : local_size;
    leader = b->local_rank % block == 0;
    int start = b->local_rank / block * block;
    per = local_size - start < block ? local_size - start : block;
  }
  b->leader = leader;
  MPI_Allreduce(&leader, &b->leaders, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(&per, &b->per_min, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&per, &b->per_max, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  b->lead_comm = MPI_COMM_NULL;
  if (MPI_Comm_split(MPI_COMM_WORLD, leader ? 0 : MPI_UNDEFINED, b->rank, &b->lead_comm) != MPI_SUCCESS) return -1;
  b->lead_rank = -1;
  if (leader) MPI_Comm_rank(b->lead_comm, &b->lead_rank);
  int first_leads = 0; /* world rank 0 must lead: it times, prints and hands out NCCL's id */
  if (b->rank == 0) first_leads = leader && b->lead_rank == 0;
  MPI_Bcast(&first_leads, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (!first_leads) {
    if (b->rank == 0) FAIL("--per-gpu: rank 0 does not lead its GPU's ranks (is it bound to a GPU another rank has?)");
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  bench_t b;
  memset(&b, 0, sizeof b);
  MPI_Comm_rank(MPI_COMM_WORLD, &b.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &b.nranks);
  g_rank = b.rank;
  opts_t *o = &b.o;
  *o = (opts_t){.min_bytes = 8, .max_bytes = 128u << 20, .factor = 2, .iters = 20, .warmup = 5, .reps = 1, .check = 1,
                .dtype = BENCH_FLOAT, .op = BENCH_SUM, .mode = MODE_NONE, .baseline = MODE_NCCL};
  int rc = parse_args(argc, argv, o, b.rank);
  if (rc) {
    MPI_Finalize();
    return rc == 1 ? 0 : 2;
  }

  acx_world_t *world = NULL;
  acx_status_t s = acx_world_init(MPI_COMM_WORLD, NULL, &world);
  if (s != ACX_OK) {
    FAIL("acx_world_init: %s", acx_status_str(s));
    MPI_Abort(MPI_COMM_WORLD, 2); /* the world's own checks already agreed or timed out */
  }
  acx_topo_binding_t bind;
  acx_world_binding(world, &bind);
  b.world = world;
  b.bind = bind;
  acx_world_local_rank(world, &b.local_rank);
  acx_world_node(world, NULL, &b.nodes);
  choose_gpu(&b, &bind);
  int any_gpu = 0, all_gpu = 0;
  MPI_Allreduce(&b.have_gpu, &any_gpu, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(&b.have_gpu, &all_gpu, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  int nccl_ok = ACX_HAVE_NCCL && all_gpu;
  if (o->mode == MODE_NONE && o->compare) o->mode = MODE_ACTOR; /* --compare: acx against its peer */
  if (o->mode == MODE_NONE) o->mode = MODE_ACTOR;
  if (!nccl_ok && b.rank == 0 && (o->mode == MODE_ACTOR || (o->compare && o->baseline == MODE_ACTOR)))
    printf("# no GPU%s: actor mode on the host device kind (acx collectives through MPI, not a GPU measurement)\n",
           any_gpu ? " on every rank (or no NCCL in this build)" : "");
  if (!all_gpu) b.have_gpu = 0; /* all ranks stage the same way */
  describe_device(&b, &bind);

  int nb = o->compare ? 2 : 1;
  backend_t be[2] = {make_backend(o->mode), make_backend(o->baseline)};
  for (int k = 0; k < 2; k++) be[k].active = 1, be[k].brank = b.rank, be[k].bnranks = b.nranks;
  b.lead_comm = MPI_COMM_NULL;
  int ok = 1;
  if (o->per_gpu) {
    ok = per_gpu_groups(&b, all_gpu) == 0;
    if (ok) {
      be[1].active = b.leader, be[1].brank = b.lead_rank, be[1].bnranks = b.leaders;
      be[1].comm = b.leader ? b.lead_comm : MPI_COMM_NULL;
    } else {
      nb = 0;
    }
  }
  b.side_nranks[0] = be[0].bnranks, b.side_nranks[1] = be[1].bnranks;
  for (int k = 0; k < nb && ok; k++) {
    int mine = be[k].setup(&be[k], &b) == 0, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all && mine && b.rank == 0) FAIL("%s setup failed on another rank", mode_names[be[k].mode]);
    if (!all) {
      if (be[k].teardown) be[k].teardown(&be[k], &b);
      ok = 0;
      nb = k; /* tear down only those set up */
    }
  }
  size_t sizes[MAX_SIZES];
  int nsizes = bench_sizes(o->min_bytes, o->max_bytes, o->factor, bench_dtype_size(o->dtype), sizes, MAX_SIZES);
  if (nsizes > MAX_SIZES) nsizes = MAX_SIZES;
  row_t *rows = calloc((size_t)(nsizes > 0 ? nsizes : 1), sizeof *rows);
  if (ok) {
    if (o->check) {
      b.h_in = malloc(o->max_bytes);
      b.h_out = malloc(o->max_bytes);
      b.h_exp = malloc(o->max_bytes);
    }
    int mine = rows && (!o->check || (b.h_in && b.h_out && b.h_exp)), all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!mine) FAIL("out of host memory for the check buffers (3 x %zu bytes)", o->max_bytes);
    ok = all;
  }

  long total_wrong = 0;
  double avg[2] = {0, 0};
  if (ok) {
    const char **devs = calloc((size_t)b.nranks, sizeof *devs);
    char *all = b.rank == 0 ? calloc((size_t)b.nranks, sizeof b.dev_desc) : NULL;
    MPI_Gather(b.dev_desc, sizeof b.dev_desc, MPI_CHAR, all, sizeof b.dev_desc, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (b.rank == 0) {
      for (int r = 0; r < b.nranks; r++) devs[r] = all + (size_t)r * sizeof b.dev_desc;
      print_header(&b, devs);
    }
    free(all);
    free(devs);
    if (nsizes > 0) {
      int w = warm_all(be, nb, &b, sizes[0] / bench_dtype_size(o->dtype));
      if (b.rank == 0 && w > 0)
        printf("# warm-up: each mode ran the first size for at least %.0f ms before timing (%d operations for %s)\n#\n",
               WARM_S * 1e3, w, mode_names[be[0].mode]);
    }
    for (int i = 0; i < nsizes; i++) {
      row_t *row = &rows[i];
      row->bytes = sizes[i];
      row->count = sizes[i] / bench_dtype_size(o->dtype);
      unsigned seed = (unsigned)i;
      for (int p = 0; p < 2; p++) { /* alternate the modes per size and placement, ABBA over rounds */
        result_t rr[2][MAX_REPS];
        row->rmin[p] = 1e300, row->rmax[p] = 0;
        for (int rep = 0; rep < o->reps; rep++) {
          for (int j = 0; j < nb; j++) {
            int k = rep & 1 ? nb - 1 - j : j;
            rr[k][rep] = measure(&be[k], &b, p, row->count, seed, o->check && rep == 0);
          }
          if (nb > 1) {
            double q = ratio(&rr[0][rep], &rr[1][rep]);
            row->rq[p][rep] = q;
            if (q < row->rmin[p]) row->rmin[p] = q;
            if (q > row->rmax[p]) row->rmax[p] = q;
          }
        }
        for (int k = 0; k < nb; k++) row->r[k][p] = median_of(rr[k], o->reps);
      }
      for (int k = 0; k < nb; k++)
        for (int p = 0; p < 2; p++) {
          avg[k] += row->r[k][p].busbw / (2.0 * nsizes);
          if (row->r[k][p].wrong > 0) total_wrong += row->r[k][p].wrong;
        }
      if (b.rank == 0) print_row(&b, row);
    }
    if (b.rank == 0) {
      printf("# Out of bounds values : %ld %s\n", total_wrong, total_wrong ? "FAILED" : "OK");
      printf("# Avg bus bandwidth    : %g %s\n", avg[0], nb > 1 ? side_name(o, 0) : "");
      if (nb > 1) printf("# Avg bus bandwidth    : %g %s\n", avg[1], side_name(o, 1));
      printf("#\n");
      if (o->json) write_json(&b, rows, nsizes, avg);
      if (o->csv) write_csv(&b, rows, nsizes);
      if (o->plot) write_plot(&b, rows, nsizes);
      if (total_wrong)
        fprintf(stderr, "acx-allreduce-bench: FAILED: %ld wrong values in the results (see #wrong)\n", total_wrong);
      fflush(stdout);
    }
  }
  for (int k = 0; k < nb; k++)
    if (be[k].teardown) be[k].teardown(&be[k], &b);
  free(b.h_in);
  free(b.h_out);
  free(b.h_exp);
  free(rows);
  if (b.lead_comm != MPI_COMM_NULL) MPI_Comm_free(&b.lead_comm);
  acx_world_finalize(world);
  MPI_Finalize();
  return !ok ? 2 : total_wrong ? 1 : 0;
}
