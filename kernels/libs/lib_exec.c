/* Executor side of the library contexts: the "acx-libs" extension (ops 0x300-0x3ff). It reads a
 * request's descriptor from the shared host region, re-checks and resolves its operands to device
 * pointers, orders them on the command's stream, and hands the request to the library's handler;
 * then replies once the stream has passed the work, or after reading back a scalar (dot, nrm2) or
 * a solver's info through a small pinned slot, polled by the extension's progress hook. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "kernels/libs/lib_exec.h"
#include "runtime/base/clock.h"
#include "runtime/base/log.h"
#include "runtime/base/param.h"

#define SLOT_BYTES 16
#define WS_STREAMS 64 /* the engine's stream limit */

typedef struct pending {
  cudaEvent_t ev;
  int slot;
  acxi_cpl_t cpl;
  uint32_t flags;
  acxk_readback_t readback;
  uint32_t dtype;
} pending_t;

/* Per engine incarnation (the extension's ext_state slot). */
struct acxk_lib_engine {
  void *state[ACX_LIB_COUNT]; /* each library's handles, created on first use */
  uint8_t *dev_slots;         /* n_slots x SLOT_BYTES device scratch */
  uint8_t *host_slots;        /* the same, pinned host memory the results are copied into */
  int *free_slots;            /* n_slots */
  int n_free, n_slots;        /* n_slots: ACX_LIB_READBACK_SLOTS, read at the first library call */
  pending_t *pend; /* in submission order */
  size_t n_pend, cap_pend;
  cudaEvent_t *ev_free;
  size_t n_ev, cap_ev;
  void *ws[ACX_LIB_COUNT][WS_STREAMS]; /* library workspaces per stream (acxk_lib_workspace) */
  size_t ws_bytes[ACX_LIB_COUNT][WS_STREAMS];
};

typedef struct lib_entry {
  uint32_t first, last;
  acx_lib_id_t lib;
  acx_status_t (*exec)(acxk_lib_call_t *c);
  void (*destroy)(void *state);
} lib_entry_t;

static const lib_entry_t libs[] = {
    {ACXK_OP_BLAS_FIRST, ACXK_OP_BLASLT_FIRST - 1, ACX_LIB_CUBLAS, acxk_blas_exec, acxk_blas_exec_destroy},
    {ACXK_OP_BLASLT_FIRST, ACXK_OP_FFT_FIRST - 1, ACX_LIB_CUBLASLT, acxk_blaslt_exec, acxk_blaslt_exec_destroy},
    {ACXK_OP_FFT_FIRST, ACXK_OP_RAND_FIRST - 1, ACX_LIB_CUFFT, acxk_fft_exec, acxk_fft_exec_destroy},
    {ACXK_OP_RAND_FIRST, ACXK_OP_SOLVER_FIRST - 1, ACX_LIB_CURAND, acxk_rand_exec, acxk_rand_exec_destroy},
    {ACXK_OP_SOLVER_FIRST, ACXK_OP_SPARSE_FIRST - 1, ACX_LIB_CUSOLVER, acxk_solver_exec, acxk_solver_exec_destroy},
    {ACXK_OP_SPARSE_FIRST, ACXK_OP_DNN_FIRST - 1, ACX_LIB_CUSPARSE, acxk_sparse_exec, acxk_sparse_exec_destroy},
#if ACX_HAVE_CUDNN
    {ACXK_OP_DNN_FIRST, ACXK_OP_RTC_FIRST - 1, ACX_LIB_CUDNN, acxk_dnn_exec, acxk_dnn_exec_destroy},
#endif
    {ACXK_OP_RTC_FIRST, ACXK_OP_TENSOR_FIRST - 1, ACX_LIB_NVRTC, acxk_rtc_exec, acxk_rtc_exec_destroy},
#if ACX_HAVE_CUTENSOR
    {ACXK_OP_TENSOR_FIRST, ACXK_OP_LIB_LAST, ACX_LIB_CUTENSOR, acxk_tensor_exec, acxk_tensor_exec_destroy},
#endif
};
#define NLIBS (sizeof libs / sizeof libs[0])

/* ------------------------------------------------------------------------------------------ */
/* helpers for the handlers                                                                   */

void **acxk_lib_state(acxk_lib_call_t *c, acx_lib_id_t lib) { return &c->le->state[lib]; }

acx_status_t acxk_lib_fail(acxk_lib_call_t *c, acx_lib_id_t lib, int code, const char *code_name, const char *call,
                           int oom) {
  ACX_WARN(LIB, "request %" PRIu64 " (op %#x): %s failed: %s %s (%d)", c->cmd->req_id, c->cmd->op, call,
           acx_lib_name(lib), code_name, code);
  c->lib = lib;
  c->lib_code = code;
  return oom ? ACX_ERR_DEVICE_OOM : ACX_ERR_LIBRARY;
}

acx_status_t acxk_lib_cuda_fail(acxk_lib_call_t *c, int err, const char *call) {
  ACX_WARN(LIB, "request %" PRIu64 " (op %#x): %s failed: %s (%d)", c->cmd->req_id, c->cmd->op, call,
           cudaGetErrorString((cudaError_t)err), err);
  (void)cudaGetLastError(); /* a non-sticky error must not show up in a later call */
  c->lib = ACX_LIB_NONE;
  c->lib_code = err;
  return err == cudaErrorMemoryAllocation ? ACX_ERR_DEVICE_OOM : ACX_ERR_DEVICE;
}

static int lib_error(acx_status_t st) {
  return st == ACX_ERR_LIBRARY || st == ACX_ERR_LIBRARY_INFO || st == ACX_ERR_COMPILE;
}

void acxk_lib_post(acxi_engine_t *e, const acxi_engine_api_t *api, uint64_t req_id, acx_status_t st, acx_lib_id_t lib,
                   int lib_code, uint64_t value) {
  acxi_cpl_t cpl = {.req_id = req_id, .status = st, .lib_code = lib_code,
                    .value = {value, ACXK_CPL_V1(lib_error(st) ? lib : ACX_LIB_NONE, 0)}};
  api->complete(e, &cpl);
}

acx_status_t acxk_lib_bad(acxk_lib_call_t *c, acx_status_t st, const char *what) {
  ACX_WARN(LIB, "request %" PRIu64 " (op %#x): %s", c->cmd->req_id, c->cmd->op, what);
  return st;
}

acx_status_t acxk_lib_need(acxk_lib_call_t *c, int idx, int64_t rows, int64_t cols, int64_t ld, size_t es) {
  if (idx < 0 || (uint32_t)idx >= c->d.nops || !c->d.opnd[idx].id || !c->ptr[idx])
    return acxk_lib_bad(c, ACX_ERR_INVALID_ARG, "a required operand is absent from the descriptor");
  if (rows < 0 || cols < 0 || ld < (rows > 1 ? rows : 1))
    return acxk_lib_bad(c, ACX_ERR_INVALID_ARG, "an operand's dimensions are malformed");
  if (rows == 0 || cols == 0) return ACX_OK;
  /* The rank bounded every dimension by a buffer size: an overflow here means a corrupt descriptor. */
  uint64_t r = (uint64_t)rows, cl = (uint64_t)cols - 1, l = (uint64_t)ld;
  if (cl && l > (UINT64_MAX - r) / cl) return acxk_lib_bad(c, ACX_ERR_OVERFLOW, "an operand's extent overflows");
  uint64_t elems = cl * l + r;
  if (elems > UINT64_MAX / es || elems * es > c->d.opnd[idx].extent)
    return acxk_lib_bad(c, ACX_ERR_OUT_OF_RANGE, "an operand's dimensions exceed its extent");
  return ACX_OK;
}

acx_status_t acxk_lib_workspace(acxk_lib_call_t *c, acx_lib_id_t lib, size_t bytes, void **ptr) {
  uint32_t s = c->cmd->stream;
  *ptr = NULL;
  if (s >= WS_STREAMS || (unsigned)lib >= ACX_LIB_COUNT)
    return acxk_lib_bad(c, ACX_ERR_INVALID_ARG, "stream index beyond the workspace table");
  acxk_lib_engine_t *le = c->le;
  if (bytes == 0) return ACX_OK;
  if (le->ws_bytes[lib][s] < bytes) {
    cudaStream_t st = (cudaStream_t)c->stream;
    /* 1 MiB granules: solvers of slowly growing sizes should not reallocate every call. */
    size_t want = (bytes + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);
    if (le->ws[lib][s]) {
      /* Stream-ordered: work queued earlier on this stream still uses the old area. */
      cudaError_t err = cudaFreeAsync(le->ws[lib][s], st);
      le->ws[lib][s] = NULL;
      le->ws_bytes[lib][s] = 0;
      if (err != cudaSuccess) return acxk_lib_cuda_fail(c, err, "cudaFreeAsync(workspace)");
    }
    void *p = NULL;
    cudaError_t err = cudaMallocAsync(&p, want, st);
    if (err != cudaSuccess) return acxk_lib_cuda_fail(c, err, "cudaMallocAsync(workspace)");
    le->ws[lib][s] = p;
    le->ws_bytes[lib][s] = want;
    ACX_INFO(LIB, "%s workspace on stream %u: %zu bytes", acx_lib_name(lib), s, want);
  }
  *ptr = le->ws[lib][s];
  return ACX_OK;
}

static acx_status_t event_get(acxk_lib_engine_t *le, cudaEvent_t *ev) {
  if (le->n_ev) {
    *ev = le->ev_free[--le->n_ev];
    return ACX_OK;
  }
  cudaError_t err = cudaEventCreateWithFlags(ev, cudaEventDisableTiming);
  if (err != cudaSuccess) {
    ACX_WARN(LIB, "cudaEventCreateWithFlags failed: %s (%d)", cudaGetErrorString(err), (int)err);
    return ACX_ERR_DEVICE;
  }
  return ACX_OK;
}

static void event_put(acxk_lib_engine_t *le, cudaEvent_t ev) {
  if (le->n_ev == le->cap_ev) {
    size_t cap = le->cap_ev ? 2 * le->cap_ev : 32;
    cudaEvent_t *n = realloc(le->ev_free, cap * sizeof *n);
    if (!n) {
      (void)cudaEventDestroy(ev);
      return;
    }
    le->ev_free = n;
    le->cap_ev = cap;
  }
  le->ev_free[le->n_ev++] = ev;
}

static void post(const acxi_engine_api_t *api, acxi_engine_t *e, const acxi_cpl_t *cpl, uint32_t flags) {
  if (cpl->status == ACX_OK && (flags & ACXI_CMD_FLAG_NO_REPLY)) return;
  api->complete(e, cpl);
}

/* Completes the finished readbacks; with `all`, also those not finished (engine going away). */
static int sweep(acxi_engine_t *e, const acxi_engine_api_t *api, acxk_lib_engine_t *le, int all) {
  int n = 0;
  size_t w = 0;
  for (size_t i = 0; i < le->n_pend; i++) {
    pending_t *p = &le->pend[i];
    cudaError_t err = cudaEventQuery(p->ev);
    if (err == cudaErrorNotReady && !all) {
      le->pend[w++] = *p;
      continue;
    }
    acxi_cpl_t cpl = p->cpl;
    if (err == cudaSuccess) {
      const uint8_t *v = le->host_slots + (size_t)p->slot * SLOT_BYTES;
      if (p->readback == ACXK_READBACK_INFO) {
        int32_t info;
        memcpy(&info, v, sizeof info);
        cpl.value[0] = (uint64_t)(int64_t)info;
        if (info != 0) {
          cpl.status = ACX_ERR_LIBRARY_INFO;
          cpl.lib_code = info;
          ACX_INFO(LIB, "request %" PRIu64 ": %s reported info = %d", cpl.req_id,
                   acx_lib_name((acx_lib_id_t)ACXK_CPL_LIB(cpl.value[1])), (int)info);
        }
      } else {
        uint64_t bits = 0;
        size_t es = p->dtype == ACX_DTYPE_F64 ? 8 : p->dtype == ACX_DTYPE_F32 ? 4 : 2;
        memcpy(&bits, v, es); /* little-endian host */
        cpl.value[0] = bits;
      }
    } else {
      ACX_WARN(LIB, "request %" PRIu64 ": cudaEventQuery failed: %s (%d)", cpl.req_id, cudaGetErrorString(err),
               (int)err);
      cpl.status = all && err == cudaErrorNotReady ? ACX_ERR_CANCELLED : ACX_ERR_DEVICE;
      cpl.lib_code = (int)err;
      cpl.value[1] = ACXK_CPL_V1(ACX_LIB_NONE, 0);
      if (err != cudaErrorNotReady) (void)cudaGetLastError();
    }
    if (err != cudaErrorNotReady) event_put(le, p->ev);
    le->free_slots[le->n_free++] = p->slot;
    post(api, e, &cpl, p->flags);
    n++;
  }
  le->n_pend = w;
  return n;
}

acx_status_t acxk_lib_scratch(acxk_lib_call_t *c, void **dev_ptr) {
  acxk_lib_engine_t *le = c->le;
  if (le->n_free == 0) (void)sweep(c->e, c->api, le, 0);
  /* Never wait here: the loop must go on serving (a slot may be held by work queued behind another
   * executor's transfer, whose deadline only the loop enforces). The request fails, retryable. */
  if (le->n_free == 0)
    return acxk_lib_bad(c, ACX_ERR_QUEUE_FULL, "every readback slot (ACX_LIB_READBACK_SLOTS) is held by a request in "
                        "flight: wait for some of the earlier ones to complete");
  c->slot = le->free_slots[--le->n_free];
  c->scratch = le->dev_slots + (size_t)c->slot * SLOT_BYTES;
  *dev_ptr = c->scratch;
  return ACX_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* the extension                                                                              */

static acx_status_t engine_state(acxi_engine_t *e, const acxi_engine_api_t *api, acxk_lib_engine_t **out) {
  void **slot = api->ext_state(e, ACXK_LIB_EXT_SLOT);
  if (*slot) {
    *out = *slot;
    return ACX_OK;
  }
  acxk_lib_engine_t *le = calloc(1, sizeof *le);
  if (!le) return ACX_ERR_NO_MEMORY;
  int64_t n = acxi_param_int("ACX_LIB_READBACK_SLOTS");
  if (n < 1 || n > 65536) {
    ACX_WARN(LIB, "ACX_LIB_READBACK_SLOTS=%" PRId64 " is outside 1..65536; using 1024", n);
    n = 1024;
  }
  le->n_slots = (int)n;
  if (!(le->free_slots = malloc((size_t)n * sizeof *le->free_slots))) {
    free(le);
    return ACX_ERR_NO_MEMORY;
  }
  cudaError_t err = cudaMalloc((void **)&le->dev_slots, (size_t)n * SLOT_BYTES);
  if (err == cudaSuccess) err = cudaHostAlloc((void **)&le->host_slots, (size_t)n * SLOT_BYTES, cudaHostAllocPortable);
  if (err != cudaSuccess) {
    ACX_WARN(LIB, "library readback slots: %s (%d)", cudaGetErrorString(err), (int)err);
    (void)cudaGetLastError();
    if (le->dev_slots) (void)cudaFree(le->dev_slots);
    free(le->free_slots);
    free(le);
    return err == cudaErrorMemoryAllocation ? ACX_ERR_DEVICE_OOM : ACX_ERR_DEVICE;
  }
  for (int i = 0; i < le->n_slots; i++) le->free_slots[i] = le->n_slots - 1 - i;
  le->n_free = le->n_slots;
  *slot = le;
  *out = le;
  return ACX_OK;
}

static acx_status_t prepare(acxk_lib_call_t *c) {
  const acxi_cmd_t *cmd = c->cmd;
  if (!c->api->stream(c->e, 0))
    return acxk_lib_bad(c, ACX_ERR_NOT_SUPPORTED, "CUDA libraries need the cuda device kind (this engine has no streams)");
  c->stream = c->api->stream(c->e, cmd->stream);
  if (!c->stream) return acxk_lib_bad(c, ACX_ERR_INVALID_ARG, "stream out of range");
  void *base;
  uint64_t rbytes;
  ACXCHECK(c->api->host_region(c->e, cmd->arg[ACXK_CMD_REGION], &base, &rbytes));
  uint64_t off = cmd->arg[ACXK_CMD_OFFSET];
  if (off > rbytes || rbytes - off < sizeof c->d)
    return acxk_lib_bad(c, ACX_ERR_OUT_OF_RANGE, "the descriptor lies outside its host region");
  memcpy(&c->d, (const uint8_t *)base + off, sizeof c->d);
  if (c->d.magic != ACXK_DESC_MAGIC || c->d.op != cmd->op || c->d.nops > ACXK_MAX_OPERANDS)
    return acxk_lib_bad(c, ACX_ERR_INVALID_ARG, "the descriptor is not this command's (magic, op or operand count)");
  ACXCHECK(engine_state(c->e, c->api, &c->le));
  for (uint32_t i = 0; i < c->d.nops; i++) {
    const acxk_operand_t *o = &c->d.opnd[i];
    c->ptr[i] = NULL;
    if (!o->id) continue;
    void *p;
    uint64_t bytes;
    ACXCHECK(c->api->buffer(c->e, o->id, &p, &bytes));
    if (o->off > bytes || bytes - o->off < o->extent) {
      ACX_WARN(LIB, "request %" PRIu64 ": operand %u [%" PRIu64 ", +%" PRIu64 ") exceeds buffer %" PRIu64 " (%" PRIu64
               " bytes)", cmd->req_id, i, o->off, o->extent, o->id, bytes);
      return ACX_ERR_OUT_OF_RANGE;
    }
    c->ptr[i] = (uint8_t *)p + o->off;
  }
  /* Only once every operand is known good: an order_access records the access. */
  for (uint32_t i = 0; i < c->d.nops; i++)
    if (c->d.opnd[i].id) c->api->order_access(c->e, c->d.opnd[i].id, cmd->stream, (int)c->d.opnd[i].writes);
  return ACX_OK;
}

static acx_status_t finish_readback(acxk_lib_call_t *c) {
  acxk_lib_engine_t *le = c->le;
  cudaStream_t s = (cudaStream_t)c->stream;
  cudaError_t err = cudaMemcpyAsync(le->host_slots + (size_t)c->slot * SLOT_BYTES, c->scratch, SLOT_BYTES,
                                    cudaMemcpyDeviceToHost, s);
  if (err != cudaSuccess) return acxk_lib_cuda_fail(c, err, "cudaMemcpyAsync(readback)");
  if (le->n_pend == le->cap_pend) {
    size_t cap = le->cap_pend ? 2 * le->cap_pend : 64;
    pending_t *n = realloc(le->pend, cap * sizeof *n);
    if (!n) return ACX_ERR_NO_MEMORY;
    le->pend = n;
    le->cap_pend = cap;
  }
  pending_t p = {.slot = c->slot, .flags = c->cmd->flags, .readback = c->readback, .dtype = c->readback_dtype};
  p.cpl = (acxi_cpl_t){.req_id = c->cmd->req_id, .status = ACX_OK,
                       .value = {0, ACXK_CPL_V1(c->lib, c->readback == ACXK_READBACK_VALUE ? c->readback_dtype : 0)}};
  ACXCHECK(event_get(le, &p.ev));
  err = cudaEventRecord(p.ev, s);
  if (err != cudaSuccess) {
    event_put(le, p.ev);
    return acxk_lib_cuda_fail(c, err, "cudaEventRecord(readback)");
  }
  le->pend[le->n_pend++] = p;
  c->slot = -1; /* owned by the pending entry now */
  /* The engine counts this shadow completion as in flight, so its loop keeps polling (and with it
   * our progress hook) until the stream has passed the readback; the shadow itself posts nothing. */
  acxi_cmd_t shadow = *c->cmd;
  shadow.flags |= ACXI_CMD_FLAG_NO_REPLY;
  c->api->complete_after(c->e, c->cmd->stream, &shadow);
  return ACX_OK;
}

static void libs_submit(acxi_engine_t *e, const acxi_engine_api_t *api, const acxi_cmd_t *cmd) {
  acxk_lib_call_t c = {.e = e, .api = api, .cmd = cmd, .slot = -1};
  const lib_entry_t *L = NULL;
  for (size_t i = 0; i < NLIBS; i++)
    if (cmd->op >= libs[i].first && cmd->op <= libs[i].last) L = &libs[i];
  acx_status_t st;
  if (!L) {
    st = acxk_lib_bad(&c, ACX_ERR_NOT_SUPPORTED, "no library of this build handles the op");
  } else {
    c.lib = L->lib;
    st = prepare(&c);
    if (st == ACX_OK) st = L->exec(&c);
    if (st == ACX_OK && c.readback == ACXK_READBACK_HANDLER) return;
    if (st == ACX_OK && c.readback == ACXK_READBACK_NOW) {
      acxk_lib_post(e, api, cmd->req_id, ACX_OK, c.lib, 0, c.value);
      return;
    }
    if (st == ACX_OK && c.readback != ACXK_READBACK_NONE) {
      if (c.slot < 0) st = acxk_lib_bad(&c, ACX_ERR_INVALID_STATE, "a readback without a scratch slot");
      else st = finish_readback(&c);
      if (st == ACX_OK) return;
    } else if (st == ACX_OK) {
      api->complete_after(e, cmd->stream, cmd);
      return;
    }
  }
  if (c.slot >= 0) c.le->free_slots[c.le->n_free++] = c.slot;
  acxk_lib_post(e, api, cmd->req_id, st, c.lib, c.lib_code, 0);
}

static int libs_progress(acxi_engine_t *e, const acxi_engine_api_t *api) {
  acxk_lib_engine_t *le = *api->ext_state(e, ACXK_LIB_EXT_SLOT);
  return le && le->n_pend ? sweep(e, api, le, 0) : 0;
}

static void libs_engine_destroy(acxi_engine_t *e, const acxi_engine_api_t *api) {
  void **slot = api->ext_state(e, ACXK_LIB_EXT_SLOT);
  acxk_lib_engine_t *le = *slot;
  if (!le) return;
  /* The engine drained its streams first (our shadow completions are among its in-flight
   * commands), so every readback is finished unless the GPU hung or the context is lost. */
  if (le->n_pend) (void)sweep(e, api, le, 1);
  for (size_t i = 0; i < NLIBS; i++)
    if (le->state[libs[i].lib]) libs[i].destroy(le->state[libs[i].lib]);
  for (size_t i = 0; i < le->n_ev; i++) (void)cudaEventDestroy(le->ev_free[i]);
  for (int l = 0; l < ACX_LIB_COUNT; l++)
    for (int i = 0; i < WS_STREAMS; i++)
      if (le->ws[l][i]) (void)cudaFree(le->ws[l][i]);
  (void)cudaFree(le->dev_slots);
  (void)cudaFreeHost(le->host_slots);
  free(le->free_slots);
  (void)cudaGetLastError();
  free(le->ev_free);
  free(le->pend);
  free(le);
  *slot = NULL;
}

static const acxi_ext_ops_t libs_ext = {
    .name = "acx-libs",
    .op_first = ACXK_OP_LIB_FIRST,
    .op_last = ACXK_OP_LIB_LAST,
    .slot = ACXK_LIB_EXT_SLOT,
    .submit = libs_submit,
    .progress = libs_progress,
    .engine_destroy = libs_engine_destroy,
};

__attribute__((constructor)) static void libs_ext_register(void) { acxi_ext_register(&libs_ext); }
