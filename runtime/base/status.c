/* Names both processes print: acx_status_t codes (with descriptions), element types, CUDA
 * libraries. */
#include "acx/status.h"
#include "acx/device.h"
#include "acx/lib.h"

#include <stddef.h>

typedef struct {
  acx_status_t code;
  const char *name;
  const char *full;
} status_entry_t;

#define S(c, d) {c, #c, #c ": " d}
static const status_entry_t statuses[] = {
    S(ACX_OK, "success"),
    S(ACX_ERR_INVALID_ARG, "invalid argument"),
    S(ACX_ERR_NULL_ARG, "required argument is NULL"),
    S(ACX_ERR_INVALID_STATE, "object is not in a state that allows this call"),
    S(ACX_ERR_NOT_SUPPORTED, "not supported by this build or device kind"),
    S(ACX_ERR_BAD_DTYPE, "element type unknown or not allowed here"),
    S(ACX_ERR_OUT_OF_RANGE, "offset or size out of range"),
    S(ACX_ERR_OVERFLOW, "size computation overflows"),
    S(ACX_ERR_BAD_PARAM, "invalid value of an ACX_* parameter"),
    S(ACX_ERR_NO_MEMORY, "host memory exhausted"),
    S(ACX_ERR_QUEUE_FULL, "queue full"),
    S(ACX_ERR_SYSTEM, "operating system call failed"),
    S(ACX_ERR_TIMEOUT, "deadline reached"),
    S(ACX_ERR_ACTOR_STOPPED, "actor has stopped"),
    S(ACX_ERR_NAME_TAKEN, "actor name already taken"),
    S(ACX_ERR_NOT_FOUND, "not found"),
    S(ACX_ERR_ACTOR_FAILED, "actor failed while handling the request"),
    S(ACX_ERR_CANCELLED, "cancelled"),
    S(ACX_ERR_ESCALATED, "supervisor gave up and escalated"),
    S(ACX_ERR_SYSTEM_STOPPING, "actor system is stopping"),
    S(ACX_ERR_DEVICE, "device operation failed"),
    S(ACX_ERR_DEVICE_OOM, "device memory exhausted"),
    S(ACX_ERR_NO_DEVICE, "no such device"),
    S(ACX_ERR_DEVICE_LOST, "device executor lost; retry after restart"),
    S(ACX_ERR_DEVICE_FATAL, "sticky device fault in inline mode; GPU unusable in this process"),
    S(ACX_ERR_DEVICE_UNAVAILABLE, "device gave up restarting"),
    S(ACX_ERR_STALE_BUFFER, "buffer from an earlier device generation"),
    S(ACX_ERR_UNKNOWN_BUFFER, "unknown buffer id"),
    S(ACX_ERR_BAD_TOKEN, "malformed token"),
    S(ACX_ERR_STALE_TOKEN, "token from an earlier generation or epoch, or revoked"),
    S(ACX_ERR_DENIED, "access denied by token rights"),
    S(ACX_ERR_WORLD_REBUILDING, "world is being rebuilt; retry"),
    S(ACX_ERR_PEER_LOST, "peer rank lost"),
    S(ACX_ERR_COLL_TIMEOUT, "collective deadline passed; communicator aborted"),
    S(ACX_ERR_NCCL, "NCCL error"),
    S(ACX_ERR_MPI, "MPI error"),
    S(ACX_ERR_BAD_LAUNCH, "inconsistent launch (missing PMIx?)"),
    S(ACX_ERR_LIBRARY, "CUDA library error"),
    S(ACX_ERR_LIBRARY_INFO, "solver reported info != 0"),
    S(ACX_ERR_COMPILE, "compilation failed"),
};
#undef S

static const status_entry_t *find(acx_status_t s) {
  for (size_t i = 0; i < sizeof statuses / sizeof statuses[0]; i++)
    if (statuses[i].code == s) return &statuses[i];
  return NULL;
}

const char *acx_status_str(acx_status_t s) {
  const status_entry_t *e = find(s);
  return e ? e->full : "ACX_ERR_<unknown>";
}

const char *acx_status_name(acx_status_t s) {
  const status_entry_t *e = find(s);
  return e ? e->name : "ACX_ERR_<unknown>";
}

/* Names both processes print: element types and CUDA libraries. */

static const struct {
  const char *name;
  size_t size;
} dtypes[ACX_DTYPE_COUNT] = {
    [ACX_DTYPE_BYTE] = {"byte", 1}, [ACX_DTYPE_I8] = {"i8", 1},   [ACX_DTYPE_U8] = {"u8", 1},
    [ACX_DTYPE_I32] = {"i32", 4},   [ACX_DTYPE_U32] = {"u32", 4}, [ACX_DTYPE_I64] = {"i64", 8},
    [ACX_DTYPE_U64] = {"u64", 8},   [ACX_DTYPE_F16] = {"f16", 2}, [ACX_DTYPE_BF16] = {"bf16", 2},
    [ACX_DTYPE_F32] = {"f32", 4},   [ACX_DTYPE_F64] = {"f64", 8},
    [ACX_DTYPE_F8E4M3] = {"f8e4m3", 1}, [ACX_DTYPE_F8E5M2] = {"f8e5m2", 1},
};

size_t acx_dtype_size(acx_dtype_t dtype) {
  return (unsigned)dtype < ACX_DTYPE_COUNT ? dtypes[dtype].size : 0;
}

const char *acx_dtype_name(acx_dtype_t dtype) {
  return (unsigned)dtype < ACX_DTYPE_COUNT ? dtypes[dtype].name : "unknown";
}

/* ---- CUDA libraries ---- */

static const char *const lib_names[ACX_LIB_COUNT] = {
    [ACX_LIB_NONE] = "none",         [ACX_LIB_CUBLAS] = "cublas",    [ACX_LIB_CUBLASLT] = "cublaslt",
    [ACX_LIB_CUFFT] = "cufft",       [ACX_LIB_CURAND] = "curand",    [ACX_LIB_CUSOLVER] = "cusolver",
    [ACX_LIB_CUSPARSE] = "cusparse", [ACX_LIB_CUDNN] = "cudnn",      [ACX_LIB_NVRTC] = "nvrtc",
    [ACX_LIB_CUDA_DRIVER] = "cuda-driver", [ACX_LIB_CUTENSOR] = "cutensor"};

const char *acx_lib_name(acx_lib_id_t lib) {
  return (unsigned)lib < ACX_LIB_COUNT && lib_names[lib] ? lib_names[lib] : "unknown";
}

