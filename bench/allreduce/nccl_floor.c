/* acx-nccl-floor: what a small all-reduce costs raw NCCL in the ways acx's executor could issue
 * it, side by side in one process per rank: direct calls on a blocking and on a non-blocking
 * communicator, and CUDA-graph replays of one captured call (1 or 4 executable instances in turn,
 * with and without the event nodes NCCL puts around its kernel). Prints, per way, the time per
 * operation (back-to-back launches, then one synchronize, as nccl-tests) and the launching
 * thread's time per call. The executor replays graphs (kernels/nccl/nccl_exec.c); this is the floor
 * that choice stands on. Run: mpirun -np 2 acx-nccl-floor [bytes] [iters]. */
#include <cuda.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(call)                                                                                      \
  do {                                                                                                \
    cudaError_t e_ = (call);                                                                          \
    if (e_ != cudaSuccess) {                                                                          \
      fprintf(stderr, "acx-nccl-floor: %s: %s (line %d)\n", #call, cudaGetErrorString(e_), __LINE__); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                                   \
    }                                                                                                 \
  } while (0)
#define NK(call)                                                                                       \
  do {                                                                                                 \
    ncclResult_t r_ = (call);                                                                          \
    if (r_ != ncclSuccess && r_ != ncclInProgress) {                                                   \
      fprintf(stderr, "acx-nccl-floor: %s: %s (line %d)\n", #call, ncclGetErrorString(r_), __LINE__); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                                    \
    }                                                                                                  \
  } while (0)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A non-blocking communicator's call may answer ncclInProgress: wait until it is done. */
static void settle(ncclComm_t c) {
  ncclResult_t st;
  do NK(ncclCommGetAsyncError(c, &st));
  while (st == ncclInProgress);
  NK(st);
}

typedef struct way {
  const char *name;
  double op_us, call_us;
  long wrong;
} way_t;

static float *sbuf, *rbuf;
static size_t count;
static cudaStream_t stream;

static void allreduce(ncclComm_t c, int nonblocking, cudaStream_t s) {
  NK(ncclAllReduce(sbuf, rbuf, count, ncclFloat32, ncclSum, c, s));
  if (nonblocking) settle(c);
}

/* Times iters calls of fn (after a warmup), averaged over the ranks. */
typedef void (*issue_fn)(void *arg, int i);
static void timed(way_t *w, issue_fn fn, void *arg, int iters) {
  for (int i = 0; i < iters / 10 + 1; i++) fn(arg, i);
  CK(cudaStreamSynchronize(stream));
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = now();
  for (int i = 0; i < iters; i++) fn(arg, i);
  double t1 = now();
  CK(cudaStreamSynchronize(stream));
  double t2 = now();
  double v[2] = {(t2 - t0) / iters * 1e6, (t1 - t0) / iters * 1e6}, s[2];
  int n;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  MPI_Allreduce(v, s, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  w->op_us = s[0] / n;
  w->call_us = s[1] / n;
}

/* One more operation by `fn` on fresh inputs (rank r contributes r + 1 everywhere): the number of
 * wrong elements of the result, summed over the ranks. */
static long check(issue_fn fn, void *arg) {
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  float *h = malloc(count * sizeof *h);
  for (size_t i = 0; i < count; i++) h[i] = (float)(rank + 1);
  CK(cudaMemcpy(sbuf, h, count * sizeof *h, cudaMemcpyHostToDevice));
  CK(cudaMemset(rbuf, 0, count * sizeof *h));
  CK(cudaDeviceSynchronize()); /* the copy's DMA and the memset, before `stream` (which does not wait for them) */
  fn(arg, 0);
  CK(cudaStreamSynchronize(stream));
  CK(cudaMemcpy(h, rbuf, count * sizeof *h, cudaMemcpyDeviceToHost));
  long wrong = 0, all = 0;
  for (size_t i = 0; i < count; i++) wrong += h[i] != (float)(n * (n + 1) / 2);
  free(h);
  MPI_Allreduce(&wrong, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  return all;
}

typedef struct direct_arg {
  ncclComm_t c;
  int nb;
} direct_arg_t;
static void issue_direct(void *a, int i) {
  (void)i;
  direct_arg_t *d = a;
  allreduce(d->c, d->nb, stream);
}

typedef struct graph_arg {
  cudaGraphExec_t exec[4];
  int n;
} graph_arg_t;
static void issue_graph(void *a, int i) {
  graph_arg_t *g = a;
  CK(cudaGraphLaunch(g->exec[i % g->n], stream));
}

/* Captures one all-reduce; with kernel_only, a new graph holding only its kernel node(s), the
 * captured graph kept alive (NCCL ties its resources for the graph to it). */
/* Launch attributes of NCCL's captured kernel node that differ from a plain copy's: a bit per
 * CUlaunchAttributeID (1-16). */
static unsigned attrs_set;
static unsigned attr_val[17][3]; /* the first words of each such attribute's value */

static cudaGraph_t capture(ncclComm_t c, int nb, int kernel_only, unsigned restore, cudaGraph_t *keep, char *types,
                           size_t tn) {
  cudaStream_t cs;
  CK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
  CK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeRelaxed));
  allreduce(c, nb, cs);
  cudaGraph_t g;
  CK(cudaStreamEndCapture(cs, &g));
  CK(cudaStreamDestroy(cs));
  cudaGraphNode_t nv[16];
  size_t nn = 16;
  CK(cudaGraphGetNodes(g, nv, &nn));
  size_t o = 0;
  types[0] = 0;
  for (size_t i = 0; i < nn && o + 4 < tn; i++) {
    enum cudaGraphNodeType t;
    CK(cudaGraphNodeGetType(nv[i], &t));
    o += (size_t)snprintf(types + o, tn - o, "%s%d", i ? "," : "", (int)t);
  }
  *keep = NULL;
  if (!kernel_only || strchr(types, '3')) return g; /* a host node (NCCL's proxy): it cannot go */
  /* NCCL launches through the driver API (its own module): the runtime cannot read those nodes. */
  cudaGraph_t k;
  CK(cudaGraphCreate(&k, 0));
  CUgraphNode prev = NULL;
  for (size_t i = 0; i < nn; i++) {
    enum cudaGraphNodeType t;
    CK(cudaGraphNodeGetType(nv[i], &t));
    if (t != cudaGraphNodeTypeKernel) continue;
    CUDA_KERNEL_NODE_PARAMS p;
    CUgraphNode node;
    if (cuGraphKernelNodeGetParams((CUgraphNode)nv[i], &p) != CUDA_SUCCESS ||
        cuGraphAddKernelNode(&node, (CUgraph)k, prev ? &prev : NULL, prev ? 1 : 0, &p) != CUDA_SUCCESS) {
      CK(cudaGraphDestroy(k));
      return g; /* not possible here: the way is timed with the whole graph and says so */
    }
    /* The copy has default launch attributes; restore those named in `restore`. */
    for (int a = 1; a <= 16; a++) {
      CUkernelNodeAttrValue va, vb;
      memset(&va, 0, sizeof va);
      memset(&vb, 0, sizeof vb);
      if (cuGraphKernelNodeGetAttribute((CUgraphNode)nv[i], (CUkernelNodeAttrID)a, &va) != CUDA_SUCCESS ||
          cuGraphKernelNodeGetAttribute(node, (CUkernelNodeAttrID)a, &vb) != CUDA_SUCCESS ||
          memcmp(&va, &vb, sizeof va) == 0)
        continue;
      attrs_set |= 1u << a;
      memcpy(attr_val[a], &va, sizeof attr_val[a]);
      if ((restore >> a) & 1) (void)cuGraphKernelNodeSetAttribute(node, (CUkernelNodeAttrID)a, &va);
    }
    (void)cudaGetLastError();
    prev = node;
  }
  *keep = g;
  return k;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  size_t bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : 8;
  int iters = argc > 2 ? atoi(argv[2]) : 2000;
  if (bytes < 4 || iters < 1) {
    if (!rank) fprintf(stderr, "usage: acx-nccl-floor [bytes >= 4] [iters >= 1]\n");
    MPI_Finalize();
    return 2;
  }
  count = bytes / sizeof(float);
  int ndev;
  CK(cudaGetDeviceCount(&ndev));
  CK(cudaSetDevice(rank % ndev));
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CK(cudaMalloc((void **)&sbuf, bytes));
  CK(cudaMalloc((void **)&rbuf, bytes));
  ncclUniqueId id[2];
  if (!rank) {
    NK(ncclGetUniqueId(&id[0]));
    NK(ncclGetUniqueId(&id[1]));
  }
  MPI_Bcast(id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t cb, cn;
  NK(ncclCommInitRank(&cb, n, id[0], rank));
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  NK(ncclCommInitRankConfig(&cn, n, id[1], rank, &cfg));
  settle(cn);

  way_t w[16];
  int nw = 0;
  char types[16][64];
  direct_arg_t db = {cb, 0}, dn = {cn, 1};
  w[nw].name = "direct, blocking comm";
  timed(&w[nw], issue_direct, &db, iters);
  w[nw++].wrong = check(issue_direct, &db);
  w[nw].name = "direct, non-blocking comm";
  timed(&w[nw], issue_direct, &dn, iters < 200 ? iters : 200);
  w[nw++].wrong = check(issue_direct, &dn);
  struct {
    const char *name;
    ncclComm_t c;
    int nb, inst, kernel_only;
    unsigned restore;
  } gw[] = {{"graph x1, blocking comm", cb, 0, 1, 0, 0},
            {"graph x4, blocking comm", cb, 0, 4, 0, 0},
            {"graph x1, non-blocking comm", cn, 1, 1, 0, 0},
            {"graph x4, non-blocking comm", cn, 1, 4, 0, 0},
            {"kernel copy x4, no attributes", cn, 1, 4, 1, 0},
            {"kernel copy x4, all attributes", cn, 1, 4, 1, ~0u},
            {"kernel copy x4, all but mem sync (9,10)", cn, 1, 4, 1, ~((1u << 9) | (1u << 10))},
            {"kernel copy x4, all but cluster (4,5,11)", cn, 1, 4, 1, ~((1u << 4) | (1u << 5) | (1u << 11))},
            {"kernel copy x4, all but 1,2,8,13-16", cn, 1, 4, 1,
             (1u << 4) | (1u << 5) | (1u << 11) | (1u << 9) | (1u << 10)}};
  int tw = 0;
  for (size_t i = 0; i < sizeof gw / sizeof gw[0]; i++) {
    graph_arg_t ga = {.n = gw[i].inst};
    cudaGraph_t keep;
    cudaGraph_t g = capture(gw[i].c, gw[i].nb, gw[i].kernel_only, gw[i].restore, &keep, types[tw], sizeof types[tw]);
    for (int k = 0; k < ga.n; k++) CK(cudaGraphInstantiate(&ga.exec[k], g, 0));
    w[nw].name = gw[i].name;
    timed(&w[nw], issue_graph, &ga, iters);
    w[nw++].wrong = check(issue_graph, &ga);
    if (!rank)
      printf("# %s: captured node types %s%s\n", gw[i].name, types[tw],
             gw[i].kernel_only && !keep ? " (the kernel node could not be copied: timed whole)" : "");
    for (int k = 0; k < ga.n; k++) CK(cudaGraphExecDestroy(ga.exec[k]));
    CK(cudaGraphDestroy(g));
    if (keep) CK(cudaGraphDestroy(keep));
  }
  if (!rank) {
    printf("# acx-nccl-floor: %zu-byte float sum all-reduce, %d ranks, %d iterations per way\n", bytes, n, iters);
    const char *mix = getenv("NCCL_GRAPH_MIXING_SUPPORT");
    printf("# NCCL_GRAPH_MIXING_SUPPORT=%s; launch attributes NCCL set on its kernel node:", mix ? mix : "(unset: 1)");
    for (int a = 1; a <= 16; a++)
      if ((attrs_set >> a) & 1) printf(" %d=(%u,%u,%u)", a, attr_val[a][0], attr_val[a][1], attr_val[a][2]);
    printf("\n");
    printf("# %-38s %12s %14s %8s\n", "way", "us per op", "us per call", "#wrong");
    for (int i = 0; i < nw; i++)
      printf("  %-38s %12.2f %14.2f %8ld\n", w[i].name, w[i].op_us, w[i].call_us, w[i].wrong);
  }
  NK(ncclCommDestroy(cb));
  NK(ncclCommFinalize(cn));
  settle(cn);
  NK(ncclCommDestroy(cn));
  MPI_Finalize();
  return 0;
}
