/* cuSOLVER, executor side: one cusolverDn handle (bound to its stream at creation) and params per
 * engine stream, created on first use in this executor incarnation; the 64-bit generic API
 * (cusolverDnX*), each call's device workspace sized by its *_bufferSize and taken from the
 * per-stream library workspace; the int info written into a readback slot and returned. */
#include <inttypes.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>
#include <cusolverDn.h>

#include "acx/solver.h"
#include "kernels/libs/lib_exec.h"
#include "runtime/base/log.h"


#define RETIRED_MAX 8

typedef struct solver_stream {
  cusolverDnHandle_t h;
  cusolverDnParams_t params;
  void *host_ws; /* host workspace (most calls need none) */
  size_t host_bytes;
  /* Host workspaces outgrown while work queued before may still read them: each is freed once
   * its stream has passed the event recorded when it was replaced. */
  struct { void *p; cudaEvent_t ev; } retired[RETIRED_MAX];
  int n_retired;
} solver_stream_t;

/* Frees the retired host workspaces the stream has passed. */
static void retire_sweep(solver_stream_t *s) {
  int w = 0;
  for (int i = 0; i < s->n_retired; i++) {
    cudaError_t err = cudaEventQuery(s->retired[i].ev);
    if (err == cudaErrorNotReady) {
      s->retired[w++] = s->retired[i];
      continue;
    }
    if (err != cudaSuccess) (void)cudaGetLastError(); /* the stream failed: nothing reads it any more */
    (void)cudaEventDestroy(s->retired[i].ev);
    free(s->retired[i].p);
  }
  s->n_retired = w;
}

typedef struct solver_state {
  solver_stream_t s[ACXI_MAX_STREAMS];
} solver_state_t;

static const char *status_name(cusolverStatus_t s) {
  switch (s) {
    case CUSOLVER_STATUS_SUCCESS: return "CUSOLVER_STATUS_SUCCESS";
    case CUSOLVER_STATUS_NOT_INITIALIZED: return "CUSOLVER_STATUS_NOT_INITIALIZED";
    case CUSOLVER_STATUS_ALLOC_FAILED: return "CUSOLVER_STATUS_ALLOC_FAILED";
    case CUSOLVER_STATUS_INVALID_VALUE: return "CUSOLVER_STATUS_INVALID_VALUE";
    case CUSOLVER_STATUS_ARCH_MISMATCH: return "CUSOLVER_STATUS_ARCH_MISMATCH";
    case CUSOLVER_STATUS_MAPPING_ERROR: return "CUSOLVER_STATUS_MAPPING_ERROR";
    case CUSOLVER_STATUS_EXECUTION_FAILED: return "CUSOLVER_STATUS_EXECUTION_FAILED";
    case CUSOLVER_STATUS_INTERNAL_ERROR: return "CUSOLVER_STATUS_INTERNAL_ERROR";
    case CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED: return "CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED";
    case CUSOLVER_STATUS_NOT_SUPPORTED: return "CUSOLVER_STATUS_NOT_SUPPORTED";
    case CUSOLVER_STATUS_ZERO_PIVOT: return "CUSOLVER_STATUS_ZERO_PIVOT";
    case CUSOLVER_STATUS_INVALID_LICENSE: return "CUSOLVER_STATUS_INVALID_LICENSE";
    case CUSOLVER_STATUS_INVALID_WORKSPACE: return "CUSOLVER_STATUS_INVALID_WORKSPACE";
    default: return "CUSOLVER_STATUS_<other>";
  }
}

#define SOLVERCHECK(c, call)                                                                       \
  do {                                                                                             \
    cusolverStatus_t acxk_ss_ = (call);                                                            \
    if (acxk_ss_ != CUSOLVER_STATUS_SUCCESS)                                                       \
      return acxk_lib_fail((c), ACX_LIB_CUSOLVER, (int)acxk_ss_, status_name(acxk_ss_), #call,     \
                           acxk_ss_ == CUSOLVER_STATUS_ALLOC_FAILED);                              \
  } while (0)

void acxk_solver_exec_destroy(void *state) {
  solver_state_t *st = state;
  for (int i = 0; i < ACXI_MAX_STREAMS; i++) {
    if (st->s[i].params) (void)cusolverDnDestroyParams(st->s[i].params);
    if (st->s[i].h) (void)cusolverDnDestroy(st->s[i].h);
    free(st->s[i].host_ws);
    for (int k = 0; k < st->s[i].n_retired; k++) { /* the engine's streams are gone or drained */
      (void)cudaEventDestroy(st->s[i].retired[k].ev);
      free(st->s[i].retired[k].p);
    }
  }
  free(st);
}

static acx_status_t stream_state(acxk_lib_call_t *c, solver_stream_t **out) {
  void **slot = acxk_lib_state(c, ACX_LIB_CUSOLVER);
  if (!*slot && !(*slot = calloc(1, sizeof(solver_state_t)))) return ACX_ERR_NO_MEMORY;
  solver_state_t *st = *slot;
  uint32_t i = c->cmd->stream;
  if (i >= ACXI_MAX_STREAMS) return acxk_lib_bad(c, ACX_ERR_INVALID_ARG, "stream index beyond the cuSOLVER handle table");
  solver_stream_t *s = &st->s[i];
  if (!s->h) {
    cusolverDnHandle_t h = NULL;
    cusolverDnParams_t p = NULL;
    SOLVERCHECK(c, cusolverDnCreate(&h));
    cusolverStatus_t ss = cusolverDnSetStream(h, (cudaStream_t)c->stream);
    if (ss == CUSOLVER_STATUS_SUCCESS) ss = cusolverDnCreateParams(&p);
    if (ss != CUSOLVER_STATUS_SUCCESS) {
      (void)cusolverDnDestroy(h);
      return acxk_lib_fail(c, ACX_LIB_CUSOLVER, (int)ss, status_name(ss), "cusolverDnSetStream/CreateParams",
                           ss == CUSOLVER_STATUS_ALLOC_FAILED);
    }
    s->h = h;
    s->params = p;
  }
  *out = s;
  return ACX_OK;
}

/* Device and host workspaces of at least the sizes *_bufferSize asked for. */
static acx_status_t workspaces(acxk_lib_call_t *c, solver_stream_t *s, size_t dev_bytes, size_t host_bytes,
                               void **dev, void **host) {
  ACXCHECK(acxk_lib_workspace(c, ACX_LIB_CUSOLVER, dev_bytes, dev));
  *host = NULL;
  if (host_bytes == 0) return ACX_OK;
  retire_sweep(s);
  if (s->host_bytes < host_bytes) {
    /* Work queued earlier on this stream may still read the old workspace: it is retired behind an
     * event, never waited for in the loop (rare: it only grows, at least twofold, and few routines
     * use one). */
    if (s->host_ws && s->n_retired == RETIRED_MAX)
      return acxk_lib_bad(c, ACX_ERR_QUEUE_FULL, "cuSOLVER host workspace: " ACXK_STR(RETIRED_MAX) " outgrown workspaces "
                          "still wait for their stream; wait for earlier requests to complete");
    size_t want = host_bytes < 2 * s->host_bytes ? 2 * s->host_bytes : host_bytes;
    void *p = malloc(want);
    if (!p) return ACX_ERR_NO_MEMORY;
    if (s->host_ws) {
      cudaEvent_t ev = NULL;
      cudaError_t err = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
      if (err == cudaSuccess) err = cudaEventRecord(ev, (cudaStream_t)c->stream);
      if (err != cudaSuccess) {
        if (ev) (void)cudaEventDestroy(ev);
        free(p);
        return acxk_lib_cuda_fail(c, err, "cudaEventRecord(host workspace retirement)");
      }
      s->retired[s->n_retired].p = s->host_ws;
      s->retired[s->n_retired].ev = ev;
      s->n_retired++;
    }
    s->host_ws = p;
    s->host_bytes = want;
  }
  *host = s->host_ws;
  return ACX_OK;
}

static cublasFillMode_t fill(uint32_t uplo) {
  return uplo == ACX_SOLVER_UPPER ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER;
}

static signed char job_char(uint32_t job) {
  return job == ACX_SOLVER_SVD_ALL ? 'A' : job == ACX_SOLVER_SVD_SOME ? 'S' : 'N';
}

/* Checks every operand the op names against the descriptor's dimensions. */
static acx_status_t check_shapes(acxk_lib_call_t *c, size_t es) {
  const acxk_solver_desc_t *q = &c->d.u.solver;
  int64_t mn = q->m < q->n ? q->m : q->n;
  switch (c->cmd->op) {
    case ACXK_OP_SOLVER_POTRF: return acxk_lib_need(c, 0, q->n, q->n, q->lda, es);
    case ACXK_OP_SOLVER_POTRS:
      ACXCHECK(acxk_lib_need(c, 0, q->n, q->n, q->lda, es));
      return acxk_lib_need(c, 1, q->n, q->nrhs, q->ldb, es);
    case ACXK_OP_SOLVER_GETRF:
      ACXCHECK(acxk_lib_need(c, 0, q->m, q->n, q->lda, es));
      return mn ? acxk_lib_need(c, 1, mn, 1, mn, sizeof(int64_t)) : ACX_OK;
    case ACXK_OP_SOLVER_GETRS:
      ACXCHECK(acxk_lib_need(c, 0, q->n, q->n, q->lda, es));
      if (q->n) ACXCHECK(acxk_lib_need(c, 1, q->n, 1, q->n, sizeof(int64_t)));
      return acxk_lib_need(c, 2, q->n, q->nrhs, q->ldb, es);
    case ACXK_OP_SOLVER_GEQRF:
      ACXCHECK(acxk_lib_need(c, 0, q->m, q->n, q->lda, es));
      return mn ? acxk_lib_need(c, 1, mn, 1, mn, es) : ACX_OK;
    case ACXK_OP_SOLVER_GESVD:
      if (q->m < q->n) return acxk_lib_bad(c, ACX_ERR_INVALID_ARG, "gesvd with m < n");
      ACXCHECK(acxk_lib_need(c, 0, q->m, q->n, q->lda, es));
      if (q->n) ACXCHECK(acxk_lib_need(c, 1, q->n, 1, q->n, es));
      if (q->jobu != ACX_SOLVER_SVD_NONE)
        ACXCHECK(acxk_lib_need(c, 2, q->m, q->jobu == ACX_SOLVER_SVD_ALL ? q->m : q->n, q->ldu, es));
      if (q->jobvt != ACX_SOLVER_SVD_NONE) ACXCHECK(acxk_lib_need(c, 3, q->n, q->n, q->ldvt, es));
      return ACX_OK;
    case ACXK_OP_SOLVER_SYEVD:
      ACXCHECK(acxk_lib_need(c, 0, q->n, q->n, q->lda, es));
      return q->n ? acxk_lib_need(c, 1, q->n, 1, q->n, es) : ACX_OK;
    default: return acxk_lib_bad(c, ACX_ERR_NOT_SUPPORTED, "unknown cuSOLVER op");
  }
}

acx_status_t acxk_solver_exec(acxk_lib_call_t *c) {
  const acxk_solver_desc_t *q = &c->d.u.solver;
  if (q->dtype != ACX_DTYPE_F32 && q->dtype != ACX_DTYPE_F64)
    return acxk_lib_bad(c, ACX_ERR_BAD_DTYPE, "cuSOLVER dtype is not f32 or f64");
  cudaDataType t = q->dtype == ACX_DTYPE_F64 ? CUDA_R_64F : CUDA_R_32F;
  size_t es = q->dtype == ACX_DTYPE_F64 ? 8 : 4;
  ACXCHECK(check_shapes(c, es));
  solver_stream_t *s = NULL;
  ACXCHECK(stream_state(c, &s));
  void *info = NULL;
  c->readback = ACXK_READBACK_INFO;
  ACXCHECK(acxk_lib_scratch(c, &info));
  /* Nothing guarantees a call writes info on every path (n = 0): start from 0. */
  cudaError_t err = cudaMemsetAsync(info, 0, sizeof(int), (cudaStream_t)c->stream);
  if (err != cudaSuccess) return acxk_lib_cuda_fail(c, err, "cudaMemsetAsync(info)");
  size_t dbytes = 0, hbytes = 0;
  void *dws = NULL, *hws = NULL;
  void **p = c->ptr;
  switch (c->cmd->op) {
    case ACXK_OP_SOLVER_POTRF:
      SOLVERCHECK(c, cusolverDnXpotrf_bufferSize(s->h, s->params, fill(q->uplo), q->n, t, p[0], q->lda, t, &dbytes,
                                                 &hbytes));
      ACXCHECK(workspaces(c, s, dbytes, hbytes, &dws, &hws));
      SOLVERCHECK(c, cusolverDnXpotrf(s->h, s->params, fill(q->uplo), q->n, t, p[0], q->lda, t, dws, dbytes, hws,
                                      hbytes, info));
      return ACX_OK;
    case ACXK_OP_SOLVER_POTRS:
      SOLVERCHECK(c, cusolverDnXpotrs(s->h, s->params, fill(q->uplo), q->n, q->nrhs, t, p[0], q->lda, t, p[1], q->ldb,
                                      info));
      return ACX_OK;
    case ACXK_OP_SOLVER_GETRF:
      SOLVERCHECK(c, cusolverDnXgetrf_bufferSize(s->h, s->params, q->m, q->n, t, p[0], q->lda, t, &dbytes, &hbytes));
      ACXCHECK(workspaces(c, s, dbytes, hbytes, &dws, &hws));
      SOLVERCHECK(c, cusolverDnXgetrf(s->h, s->params, q->m, q->n, t, p[0], q->lda, p[1], t, dws, dbytes, hws, hbytes,
                                      info));
      return ACX_OK;
    case ACXK_OP_SOLVER_GETRS:
      SOLVERCHECK(c, cusolverDnXgetrs(s->h, s->params, q->trans == ACX_BLAS_T ? CUBLAS_OP_T : CUBLAS_OP_N, q->n,
                                      q->nrhs, t, p[0], q->lda, p[1], t, p[2], q->ldb, info));
      return ACX_OK;
    case ACXK_OP_SOLVER_GEQRF:
      SOLVERCHECK(c, cusolverDnXgeqrf_bufferSize(s->h, s->params, q->m, q->n, t, p[0], q->lda, t, p[1], t, &dbytes,
                                                 &hbytes));
      ACXCHECK(workspaces(c, s, dbytes, hbytes, &dws, &hws));
      SOLVERCHECK(c, cusolverDnXgeqrf(s->h, s->params, q->m, q->n, t, p[0], q->lda, t, p[1], t, dws, dbytes, hws,
                                      hbytes, info));
      return ACX_OK;
    case ACXK_OP_SOLVER_GESVD: {
      /* Job NONE: cuSOLVER does not reference U / VT, but its leading dimensions must still be >= 1. */
      int64_t ldu = q->jobu != ACX_SOLVER_SVD_NONE ? q->ldu : 1, ldvt = q->jobvt != ACX_SOLVER_SVD_NONE ? q->ldvt : 1;
      SOLVERCHECK(c, cusolverDnXgesvd_bufferSize(s->h, s->params, job_char(q->jobu), job_char(q->jobvt), q->m, q->n, t,
                                                 p[0], q->lda, t, p[1], t, p[2], ldu, t, p[3], ldvt, t, &dbytes,
                                                 &hbytes));
      ACXCHECK(workspaces(c, s, dbytes, hbytes, &dws, &hws));
      SOLVERCHECK(c, cusolverDnXgesvd(s->h, s->params, job_char(q->jobu), job_char(q->jobvt), q->m, q->n, t, p[0],
                                      q->lda, t, p[1], t, p[2], ldu, t, p[3], ldvt, t, dws, dbytes, hws, hbytes,
                                      info));
      return ACX_OK;
    }
    case ACXK_OP_SOLVER_SYEVD: {
      cusolverEigMode_t jobz = q->vectors ? CUSOLVER_EIG_MODE_VECTOR : CUSOLVER_EIG_MODE_NOVECTOR;
      SOLVERCHECK(c, cusolverDnXsyevd_bufferSize(s->h, s->params, jobz, fill(q->uplo), q->n, t, p[0], q->lda, t, p[1],
                                                 t, &dbytes, &hbytes));
      ACXCHECK(workspaces(c, s, dbytes, hbytes, &dws, &hws));
      SOLVERCHECK(c, cusolverDnXsyevd(s->h, s->params, jobz, fill(q->uplo), q->n, t, p[0], q->lda, t, p[1], t, dws,
                                      dbytes, hws, hbytes, info));
      return ACX_OK;
    }
    default: return acxk_lib_bad(c, ACX_ERR_NOT_SUPPORTED, "unknown cuSOLVER op");
  }
}
