/* Internals shared by the library contexts: the rank side (lib_common.c: context actor, request
 * validation helpers, the descriptor arena and submission) and the executor side (lib_exec.c:
 * the "acx-libs" extension that resolves a request's operands and dispatches to the library
 * handlers in lib_<name>_exec.c). No CUDA header here: executor-side handles are void *. */
#ifndef ACXK_LIB_INTERNAL_H
#define ACXK_LIB_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "acx/lib.h"
#include "kernels/lib_ops.h"
#include "runtime/cmd.h"
#include "runtime/engine.h"

/* ------------------------------------------------------------------------------------------ */
/* rank side                                                                                  */

typedef struct acxk_lib_ctx acxk_lib_ctx_t;

/* A request being built: the descriptor and, per operand, the buffer handle and the API
 * argument's name (the submission re-checks generations under the device's lock). */
typedef struct acxk_req {
  acxk_desc_t d;
  acx_buffer_t *bufs[ACXK_MAX_OPERANDS];
  const char *names[ACXK_MAX_OPERANDS];
} acxk_req_t;

/* Spawns the context's actor under the device's DeviceActor and maps its descriptor arena.
 * cfg may be NULL. Statuses: those of acx_spawn and acx_host_alloc, ACX_ERR_INVALID_ARG. */
acx_status_t acxk_lib_ctx_create(acx_device_t *dev, const acx_lib_config_t *cfg, acx_lib_id_t lib,
                                 acxk_lib_ctx_t **ctx);
/* Waits for the context's outstanding requests (up to its timeout), stops the actor, frees the
 * arena. ACX_ERR_TIMEOUT when requests were still outstanding (their futures stay valid). */
acx_status_t acxk_lib_ctx_destroy(acxk_lib_ctx_t *ctx);
acx_device_t *acxk_lib_ctx_device(const acxk_lib_ctx_t *ctx);
/* 1 when the device is of the host kind: requests are validated, then ACX_ERR_NOT_SUPPORTED. */
int acxk_lib_ctx_host_kind(const acxk_lib_ctx_t *ctx);

/* Starts a request: zeroes req, sets op. */
void acxk_req_init(acxk_req_t *req, uint32_t op);

/* Checks a buffer argument: not NULL (unless optional, then ACX_OK for NULL), not freed, of this
 * context's device, of its current generation, and of one of the dtypes in dtype_mask (bit per
 * acx_dtype_t; 0: any). Logs "fn: argument 'name' ..." once. */
acx_status_t acxk_lib_check_buf(const acxk_lib_ctx_t *ctx, const char *fn, const char *name, acx_buffer_t *buf,
                                int optional, uint32_t dtype_mask);
#define ACXK_DT(t) (1u << (t))

/* Operand `idx` of req: a column-major matrix of rows x cols with leading dimension ld (in
 * elements), `batch` of them `stride` elements apart, starting at byte `off`. Checks ld >=
 * max(1, rows), batch >= 1, stride (batch > 1) >= 0, the offset's alignment to the element size,
 * overflow, and that the whole extent lies in the buffer. The buffer must have passed
 * acxk_lib_check_buf. */
acx_status_t acxk_req_matrix(acxk_req_t *req, int idx, const char *fn, const char *name, acx_buffer_t *buf,
                             size_t off, int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride,
                             int writes);
/* Operand idx: a strided vector of n elements, inc != 0 (negative: BLAS order, same extent). */
acx_status_t acxk_req_vector(acxk_req_t *req, int idx, const char *fn, const char *name, acx_buffer_t *buf,
                             size_t off, int64_t n, int64_t inc, int writes);
/* Operand idx: `bytes` contiguous bytes at off (elements of the buffer's dtype). */
acx_status_t acxk_req_span(acxk_req_t *req, int idx, const char *fn, const char *name, acx_buffer_t *buf,
                           size_t off, uint64_t bytes, int writes);

/* Refuses (ACX_ERR_INVALID_ARG, logged) when operands i and j are set, lie in one buffer and
 * their byte ranges intersect: a library would read what it is writing. */
acx_status_t acxk_req_disjoint(const acxk_req_t *req, const char *fn, int i, int j);

/* On a device of the host kind: logs that the valid request needs a CUDA device and returns
 * ACX_ERR_NOT_SUPPORTED; ACX_OK otherwise. For requests that prepare more than a descriptor
 * (host regions) before acxk_lib_submit, which makes the same check. */
acx_status_t acxk_lib_refuse_host(const acxk_lib_ctx_t *ctx, const char *fn);

/* Submits a validated request (on the host kind: logs and returns ACX_ERR_NOT_SUPPORTED). With
 * done, hands over the future; without, waits up to the context's timeout and fills *result
 * (may be NULL). */
acx_status_t acxk_lib_submit(acxk_lib_ctx_t *ctx, const char *fn, acxk_req_t *req, acx_future_t **done,
                             acx_lib_result_t *result);

/* NVRTC / module handles (lib_rtc.c). Here rather than in lib_rtc.c so that the unit tests can
 * build a function handle on a host-kind device, where no module can be loaded, and test the
 * launch validation there. */
struct acx_rtc {
  acxk_lib_ctx_t *ctx;
  _Atomic int modules; /* loaded modules not unloaded yet */
};
struct acx_module {
  struct acx_rtc *rtc;
  uint64_t id;         /* the executor's module id */
  uint64_t generation; /* of the executor that loaded it */
  struct acx_function *fns;
};
struct acx_function {
  struct acx_module *module;
  uint32_t index; /* in the executor's table of the module's kernels */
  char name[ACXK_RTC_NAME_MAX];
  struct acx_function *next;
};

/* ------------------------------------------------------------------------------------------ */
/* executor side                                                                              */

typedef struct acxk_lib_engine acxk_lib_engine_t;

/* What happens once the library work is enqueued. */
typedef enum acxk_readback {
  ACXK_READBACK_NONE = 0,  /* reply when the stream passes the work */
  ACXK_READBACK_VALUE = 1, /* reply with the scalar in the scratch slot (readback_dtype) */
  ACXK_READBACK_INFO = 2,  /* the slot holds a solver's int32 info: != 0 -> ACX_ERR_LIBRARY_INFO */
  ACXK_READBACK_NOW = 3,   /* reply at once with `value` (no stream work: a handle, an index) */
  ACXK_READBACK_HANDLER = 4 /* the handler has replied or will reply itself (acxk_lib_post), possibly
                              from another thread */
} acxk_readback_t;

/* One request in the executor, handed to a library handler. */
typedef struct acxk_lib_call {
  acxi_engine_t *e;
  const acxi_engine_api_t *api;
  const acxi_cmd_t *cmd;
  acxk_desc_t d;                     /* a private copy of the descriptor */
  void *ptr[ACXK_MAX_OPERANDS];      /* device address of each operand (base + off), NULL if absent */
  void *stream;                      /* cudaStream_t of cmd->stream */
  acxk_lib_engine_t *le;
  /* Set by the handler. */
  acx_lib_id_t lib;                  /* the library whose code lib_code is */
  int lib_code;
  acxk_readback_t readback;
  uint32_t readback_dtype;           /* acx_dtype_t of a VALUE readback */
  void *scratch;                     /* from acxk_lib_scratch: device memory for the readback */
  int slot;
  uint64_t value;                    /* ACXK_READBACK_NOW: the reply's value[0] */
} acxk_lib_call_t;

/* Posts a library request's reply (any thread: the engine's completion sink is thread-safe).
 * `lib` is reported with ACX_ERR_LIBRARY, _INFO and ACX_ERR_COMPILE. */
void acxk_lib_post(acxi_engine_t *e, const acxi_engine_api_t *api, uint64_t req_id, acx_status_t st, acx_lib_id_t lib,
                   int lib_code, uint64_t value);

/* The library's executor-side state in this engine incarnation (NULL until created). */
void **acxk_lib_state(acxk_lib_call_t *c, acx_lib_id_t lib);
/* 16 bytes of device scratch whose content is read back after the work (readback must be set).
 * ACX_ERR_QUEUE_FULL when every slot stayed in use until ACX_EXEC_TIMEOUT_MS. */
acx_status_t acxk_lib_scratch(acxk_lib_call_t *c, void **dev_ptr);
/* Logs a failed library call once, with the library's own name of the code, and returns the
 * status to reply with (ACX_ERR_LIBRARY, or ACX_ERR_DEVICE_OOM for allocation failures). */
acx_status_t acxk_lib_fail(acxk_lib_call_t *c, acx_lib_id_t lib, int code, const char *code_name, const char *call,
                           int oom);
/* A failed CUDA runtime call inside a handler (lib_code = the cudaError_t, library NONE). */
acx_status_t acxk_lib_cuda_fail(acxk_lib_call_t *c, int err, const char *call);
/* Bad descriptor contents (the rank validates first; this guards the executor). */
acx_status_t acxk_lib_bad(acxk_lib_call_t *c, acx_status_t st, const char *what);

/* Checks that operand idx is present and its extent covers a column-major rows x cols matrix with
 * leading dimension ld of es-byte elements: the descriptor's dimensions and its operands must
 * agree before a library writes through them (a rank-side bug must not become a wild write). */
acx_status_t acxk_lib_need(acxk_lib_call_t *c, int idx, int64_t rows, int64_t cols, int64_t ld, size_t es);

/* Device workspace of the library `lib` for the command's stream, at least `bytes`, kept per
 * (library, stream) in this engine incarnation and grown stream-ordered (cudaFreeAsync /
 * cudaMallocAsync on the stream), so work queued earlier keeps its old area. *ptr is NULL for 0
 * bytes. ACX_ERR_DEVICE_OOM when the allocation fails. */
acx_status_t acxk_lib_workspace(acxk_lib_call_t *c, acx_lib_id_t lib, size_t bytes, void **ptr);

/* Library handlers: validate what only the executor can see, enqueue on c->stream. */
acx_status_t acxk_blas_exec(acxk_lib_call_t *c);
void acxk_blas_exec_destroy(void *state);
acx_status_t acxk_rand_exec(acxk_lib_call_t *c);
void acxk_rand_exec_destroy(void *state);
acx_status_t acxk_fft_exec(acxk_lib_call_t *c);
void acxk_fft_exec_destroy(void *state);
acx_status_t acxk_blaslt_exec(acxk_lib_call_t *c);
void acxk_blaslt_exec_destroy(void *state);
acx_status_t acxk_sparse_exec(acxk_lib_call_t *c);
void acxk_sparse_exec_destroy(void *state);
acx_status_t acxk_solver_exec(acxk_lib_call_t *c);
void acxk_solver_exec_destroy(void *state);
acx_status_t acxk_dnn_exec(acxk_lib_call_t *c);
void acxk_dnn_exec_destroy(void *state);
acx_status_t acxk_tensor_exec(acxk_lib_call_t *c);
void acxk_tensor_exec_destroy(void *state);
acx_status_t acxk_rtc_exec(acxk_lib_call_t *c);
void acxk_rtc_exec_destroy(void *state);

#endif
