/* NVRTC and modules through acx: compile CUDA C++ source to PTX or a cubin for the device's own
 * architecture, load a PTX / cubin / fatbin image as a module, look up its kernels and launch
 * them (plain or cooperative) on acx buffers -- how simulation codes run their own kernels.
 *
 * Everything runs in the device's executor (NVRTC and the CUDA driver included): the rank process
 * never touches CUDA. Compilation and module loading run on the executor's library worker thread,
 * so a long compile never holds up the executor's other streams or its heartbeat.
 *
 * Lifetimes. An image (acx_rtc_image_t) is plain host memory owned by the caller and survives
 * everything. A module lives in one executor incarnation: after an executor restart (the device's
 * generation changed) its handle is stale -- launches and lookups return ACX_ERR_STALE_BUFFER, as
 * buffers of the old generation do -- and the caller loads the image again (acx_module_unload on
 * a stale module only frees the handle). A function handle is valid until its module is unloaded.
 *
 * Threads: any thread, except that one module must not be unloaded while another thread uses it
 * or its functions. Launches of one context run in order on its stream (acx_lib_config_t.stream)
 * and are ordered against other streams' work on the buffer arguments: an argument declared IN
 * waits for the buffer's last writer, OUT and INOUT for every earlier access. The kernel may touch
 * its buffer arguments from the given offset to the end of the buffer; acx cannot check what the
 * kernel does inside that range (a kernel that faults restarts the executor: docs/fault-model.md).
 *
 * Statuses besides those of acx/lib.h and acx/device.h: ACX_ERR_NULL_ARG, ACX_ERR_INVALID_ARG
 * (sizes, launch dimensions, argument types and counts, names: the log names the argument),
 * ACX_ERR_OUT_OF_RANGE (a buffer argument's offset beyond its buffer), ACX_ERR_STALE_BUFFER (a
 * module of an earlier executor incarnation, or a stale buffer argument), ACX_ERR_NOT_SUPPORTED
 * (host kind, or a build without CUDA), ACX_ERR_COMPILE (library ACX_LIB_NVRTC, lib_code the
 * nvrtcResult), ACX_ERR_LIBRARY (ACX_LIB_NVRTC: an nvrtcResult; ACX_LIB_CUDA_DRIVER: a CUresult,
 * e.g. CUDA_ERROR_NOT_FOUND for an unknown kernel name, CUDA_ERROR_INVALID_IMAGE,
 * CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE), ACX_ERR_DEVICE_OOM. */
#ifndef ACX_RTC_H
#define ACX_RTC_H

/* Exported from libacx, which hides everything else (cmake/libacx.map). */
#pragma GCC visibility push(default)

#include <stddef.h>
#include <stdint.h>

#include "acx/lib.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct acx_rtc acx_rtc_t;             /* an NVRTC / module context (a library actor) */
typedef struct acx_rtc_image acx_rtc_image_t; /* a compiled image in host memory */
typedef struct acx_module acx_module_t;       /* a module loaded in the current executor */
typedef struct acx_function acx_function_t;   /* a kernel of a module */

typedef enum acx_rtc_target {
  ACX_RTC_PTX = 1,   /* PTX text for compute_XY of the device (JIT-compiled when loaded) */
  ACX_RTC_CUBIN = 2  /* SASS for sm_XY of the device (nvrtcGetCUBIN) */
} acx_rtc_target_t;

/* A compilation: source and options, as nvrtcCreateProgram / nvrtcCompileProgram take them. */
typedef struct acx_rtc_program {
  size_t size;                /* sizeof(acx_rtc_program_t): set by ACX_RTC_PROGRAM_INIT */
  const char *source;         /* NUL-terminated CUDA C++ source */
  const char *name;           /* the program's file name in diagnostics; NULL: "acx_program.cu" */
  const char *const *options; /* NVRTC options ("-std=c++17", "--use_fast_math", "-DN=4", ...) */
  int num_options;
  acx_rtc_target_t target;
} acx_rtc_program_t;

#define ACX_RTC_PROGRAM_INIT                                                                   \
  {.size = sizeof(acx_rtc_program_t), .source = NULL, .name = NULL, .options = NULL, .num_options = 0, \
   .target = ACX_RTC_CUBIN}

/* At most this many options, and this many bytes of source + name + options together. */
#define ACX_RTC_MAX_OPTIONS 64
#define ACX_RTC_MAX_SOURCE_BYTES (64u << 20)

/* Creates a context on dev (an actor under the device's DeviceActor; cfg may be NULL).
 * Statuses as acx_blas_create. Any thread. */
acx_status_t acx_rtc_create(acx_device_t *dev, const acx_lib_config_t *cfg, acx_rtc_t **rtc);
/* Waits for the context's outstanding launches (up to its timeout) and destroys it. Modules and
 * functions created through it must have been unloaded first (ACX_ERR_INVALID_STATE otherwise, and
 * nothing is destroyed). NULL is ignored. */
acx_status_t acx_rtc_destroy(acx_rtc_t *rtc);

/* Compiles prog in the executor, for the executor device's architecture: the option
 * --gpu-architecture=sm_XY (cubin) or compute_XY (PTX) is added unless prog has its own
 * (--gpu-architecture / -arch). On success *image is the result (release with
 * acx_rtc_image_free). The compiler's log (warnings on success, the errors on failure) is copied
 * into log (NUL-terminated, log_size bytes at most; when it does not fit it is cut and ends with
 * a line "[acx: log truncated: N of M bytes]"); log may be NULL (log_size 0). A failed
 * compilation returns ACX_ERR_COMPILE and logs the log's first lines at WARN. Waits up to the
 * context's timeout. Statuses: ACX_ERR_NULL_ARG, ACX_ERR_INVALID_ARG (prog's size, target,
 * option count, NULL options, sizes above ACX_RTC_MAX_SOURCE_BYTES), ACX_ERR_COMPILE,
 * ACX_ERR_LIBRARY (nvrtcResult), ACX_ERR_NOT_SUPPORTED (host kind), ACX_ERR_TIMEOUT, and those
 * of acx_host_alloc. */
acx_status_t acx_rtc_compile(acx_rtc_t *rtc, const acx_rtc_program_t *prog, acx_rtc_image_t **image, char *log,
                             size_t log_size);

/* The image's bytes (PTX images are NUL-terminated text; bytes counts the NUL), its target and
 * the architecture it was compiled for ("sm_90"). Any argument but image may be NULL. */
acx_status_t acx_rtc_image_data(const acx_rtc_image_t *image, const void **data, size_t *bytes,
                                acx_rtc_target_t *target, const char **arch);
void acx_rtc_image_free(acx_rtc_image_t *image);

/* Loads a PTX, cubin or fatbin image (from acx_rtc_compile or from a file) into the executor
 * (cuModuleLoadData on the worker thread; PTX is JIT-compiled there) and returns the module.
 * The image is copied: the caller's memory may be reused at once. Statuses: ACX_ERR_NULL_ARG,
 * ACX_ERR_INVALID_ARG (bytes 0 or above ACX_RTC_MAX_SOURCE_BYTES), ACX_ERR_LIBRARY
 * (ACX_LIB_CUDA_DRIVER: CUDA_ERROR_INVALID_IMAGE, CUDA_ERROR_INVALID_PTX, ...),
 * ACX_ERR_NOT_SUPPORTED, ACX_ERR_TIMEOUT. */
acx_status_t acx_module_load(acx_rtc_t *rtc, const void *image, size_t bytes, acx_module_t **module);
acx_status_t acx_module_load_image(acx_rtc_t *rtc, const acx_rtc_image_t *image, acx_module_t **module);

/* Unloads the module once the launches queued from it have finished (the executor waits for
 * them on its worker thread) and frees the handle and its functions, also when the module is
 * stale (nothing left to unload). NULL is ignored. Statuses: ACX_ERR_TIMEOUT (the launches did
 * not finish within the context's timeout: the handle is freed, the module stays loaded in the
 * executor until it ends), ACX_ERR_LIBRARY, ACX_ERR_DEVICE_LOST. */
acx_status_t acx_module_unload(acx_module_t *module);

/* The generation of the executor the module was loaded in (compare acx_device_generation). */
uint64_t acx_module_generation(const acx_module_t *module);

/* Looks up kernel `name` (an extern "C" name, or the mangled one; at most 255 bytes). The handle
 * belongs to the module (freed by acx_module_unload); looking a name up twice gives the same
 * kernel. Statuses: ACX_ERR_NULL_ARG, ACX_ERR_INVALID_ARG (empty or too long name),
 * ACX_ERR_LIBRARY (ACX_LIB_CUDA_DRIVER, CUDA_ERROR_NOT_FOUND), ACX_ERR_STALE_BUFFER. */
acx_status_t acx_module_get_function(acx_module_t *module, const char *name, acx_function_t **fn);

/* Kernel argument types. Buffers pass `buf`'s device address + offset (a pointer parameter);
 * scalars pass their value. The executor checks the count and, where the driver tells it
 * (cuFuncGetParamInfo, CUDA 12.4 and later), each parameter's size against the kernel's signature:
 * a mismatch is ACX_ERR_INVALID_ARG. */
typedef enum acx_kernel_arg_type {
  ACX_KARG_BUF_IN = 1,    /* read by the kernel */
  ACX_KARG_BUF_OUT = 2,   /* written (ordered as a write) */
  ACX_KARG_BUF_INOUT = 3, /* read and written */
  ACX_KARG_I32 = 4,
  ACX_KARG_U32 = 5,
  ACX_KARG_I64 = 6,
  ACX_KARG_U64 = 7,
  ACX_KARG_F32 = 8,
  ACX_KARG_F64 = 9
} acx_kernel_arg_type_t;

typedef struct acx_kernel_arg {
  acx_kernel_arg_type_t type;
  acx_buffer_t *buf; /* buffer arguments */
  size_t offset;     /* bytes into buf; a multiple of its element size */
  union {
    int32_t i32;
    uint32_t u32;
    int64_t i64;
    uint64_t u64;
    float f32;
    double f64;
  } v;
} acx_kernel_arg_t;

#define ACX_KARG_IN(b, off) ((acx_kernel_arg_t){.type = ACX_KARG_BUF_IN, .buf = (b), .offset = (off)})
#define ACX_KARG_OUT(b, off) ((acx_kernel_arg_t){.type = ACX_KARG_BUF_OUT, .buf = (b), .offset = (off)})
#define ACX_KARG_INOUT(b, off) ((acx_kernel_arg_t){.type = ACX_KARG_BUF_INOUT, .buf = (b), .offset = (off)})
#define ACX_KARG_INT32(x) ((acx_kernel_arg_t){.type = ACX_KARG_I32, .v.i32 = (x)})
#define ACX_KARG_UINT32(x) ((acx_kernel_arg_t){.type = ACX_KARG_U32, .v.u32 = (x)})
#define ACX_KARG_INT64(x) ((acx_kernel_arg_t){.type = ACX_KARG_I64, .v.i64 = (x)})
#define ACX_KARG_UINT64(x) ((acx_kernel_arg_t){.type = ACX_KARG_U64, .v.u64 = (x)})
#define ACX_KARG_FLOAT(x) ((acx_kernel_arg_t){.type = ACX_KARG_F32, .v.f32 = (x)})
#define ACX_KARG_DOUBLE(x) ((acx_kernel_arg_t){.type = ACX_KARG_F64, .v.f64 = (x)})

/* At most this many arguments, of which at most ACX_KERNEL_MAX_BUFFER_ARGS buffers. */
#define ACX_KERNEL_MAX_ARGS 24
#define ACX_KERNEL_MAX_BUFFER_ARGS 8

typedef struct acx_launch_config {
  size_t size;           /* sizeof(acx_launch_config_t): set by ACX_LAUNCH_CONFIG_INIT */
  uint32_t grid[3];      /* blocks per dimension, each >= 1 */
  uint32_t block[3];     /* threads per dimension, each >= 1, product <= 1024 */
  uint32_t shared_bytes; /* dynamic shared memory; above 48 KiB the kernel's limit is raised */
  int cooperative;       /* 1: cuLaunchCooperativeKernel (grid-wide sync; the grid must fit the
                            device at once, else CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE) */
} acx_launch_config_t;

#define ACX_LAUNCH_CONFIG_INIT \
  {.size = sizeof(acx_launch_config_t), .grid = {1, 1, 1}, .block = {1, 1, 1}, .shared_bytes = 0, .cooperative = 0}

/* Launches fn with args on the context's stream after validating every argument (types, buffer
 * generations and devices, offsets, counts, launch dimensions). Completion as in acx/lib.h: the
 * future completes when the kernel has finished. Statuses: ACX_ERR_NULL_ARG, ACX_ERR_INVALID_ARG,
 * ACX_ERR_OUT_OF_RANGE, ACX_ERR_STALE_BUFFER, ACX_ERR_INVALID_STATE (freed buffer),
 * ACX_ERR_NOT_SUPPORTED (host kind), ACX_ERR_LIBRARY (ACX_LIB_CUDA_DRIVER: the launch's CUresult). */
acx_status_t acx_kernel_launch(acx_function_t *fn, const acx_launch_config_t *cfg, const acx_kernel_arg_t *args,
                               int nargs, acx_future_t **done);

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif
