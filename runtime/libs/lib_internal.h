/* Rank side of the library contexts (runtime/libs/): the context actor, request validation
 * helpers, the descriptor arena and submission (lib_common.c), shared by lib_<name>.c. What the
 * executor reads (op numbers, the descriptor) is in runtime/proto/lib_ops.h; the executor's half is
 * kernels/libs/lib_exec.h. */
#ifndef ACXK_LIB_INTERNAL_H
#define ACXK_LIB_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "acx/lib.h"
#include "runtime/proto/lib_ops.h"
#include "runtime/proto/cmd.h"

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

#endif
