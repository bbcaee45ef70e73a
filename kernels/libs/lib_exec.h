/* Executor side of the library contexts (kernels/libs/): the "acx-libs" extension (lib_exec.c)
 * resolves a request's operands and dispatches to the library handlers in lib_<name>_exec.c. The
 * request format is runtime/proto/lib_ops.h; the rank's half is runtime/libs/lib_internal.h. No
 * CUDA header here: executor-side handles are void *. */
#ifndef ACXK_LIB_EXEC_H
#define ACXK_LIB_EXEC_H

#include <stddef.h>
#include <stdint.h>

#include "acx/lib.h"
#include "kernels/exec/engine.h"
#include "runtime/proto/cmd.h"
#include "runtime/proto/lib_ops.h"


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
/* A macro's value as a string literal (for the fixed texts acxk_lib_bad takes). */
#define ACXK_STR_(x) #x
#define ACXK_STR(x) ACXK_STR_(x)

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
