/* What every CUDA library context of acx shares (cuBLAS, cuRAND, cuFFT, ...): its configuration,
 * the result a request's future carries, and the library identities that travel with a library
 * error. Each library has its own header (acx/blas.h, ...) built on this one.
 *
 * A library context is an actor child of its device's DeviceActor: it validates every request in
 * the calling thread before anything is enqueued, then submits it to the device's executor, which
 * owns the library handles (created lazily per executor incarnation, so a restarted executor makes
 * new ones). Requests of one context run in order on its stream.
 *
 * Completion: every request function takes `acx_future_t **done`. With done == NULL it waits for
 * the result (up to the context's timeout) and returns the request's final status; with done it
 * returns once the request is queued, and *done (release it with acx_future_release) completes
 * with the status. acx_lib_result() reads a completed future's details. */
#ifndef ACX_LIB_H
#define ACX_LIB_H

/* Exported from libacx, which hides everything else (cmake/libacx.map). */
#pragma GCC visibility push(default)

#include <stddef.h>
#include <stdint.h>

#include "acx/actor.h"
#include "acx/device.h"
#include "acx/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The library a library error comes from (acx_lib_result_t.library). */
typedef enum acx_lib_id {
  ACX_LIB_NONE = 0, /* the error is acx's own or CUDA's (lib_code is then a cudaError_t) */
  ACX_LIB_CUBLAS = 1,
  ACX_LIB_CUBLASLT = 2,
  ACX_LIB_CUFFT = 3,
  ACX_LIB_CURAND = 4,
  ACX_LIB_CUSOLVER = 5,
  ACX_LIB_CUSPARSE = 6,
  ACX_LIB_CUDNN = 7,
  ACX_LIB_NVRTC = 8,
  ACX_LIB_CUDA_DRIVER = 9,
  ACX_LIB_CUTENSOR = 10,
  ACX_LIB_COUNT
} acx_lib_id_t;

/* "cublas", "cufft", ...; "none" for ACX_LIB_NONE, "unknown" otherwise. Never NULL. Any thread. */
const char *acx_lib_name(acx_lib_id_t lib);

typedef struct acx_lib_config {
  size_t size;        /* sizeof(acx_lib_config_t): set by ACX_LIB_CONFIG_INIT */
  uint32_t stream;    /* executor stream the context's requests run on (< the device's streams) */
  int64_t timeout_ns; /* waits of requests called with done == NULL; < 0: ACX_EXEC_TIMEOUT_MS */
  const char *name;   /* actor name under the DeviceActor; NULL: "<library>-<n>" */
} acx_lib_config_t;

#define ACX_LIB_CONFIG_INIT {.size = sizeof(acx_lib_config_t), .stream = 0, .timeout_ns = -1, .name = NULL}

/* The details of a finished request. */
typedef struct acx_lib_result {
  acx_status_t status;
  acx_lib_id_t library; /* the library that failed (ACX_ERR_LIBRARY, _INFO, ACX_ERR_COMPILE) or that
                           produced `value`; ACX_LIB_NONE otherwise */
  int lib_code;         /* the library's own status code (cublasStatus_t, cufftResult, ...) or, with
                           ACX_ERR_LIBRARY_INFO, the solver's info */
  double value;         /* scalar results (dot, nrm2 without an output buffer); else 0 */
  uint64_t bits;        /* the same result's raw bits in its own dtype, or an integer result */
} acx_lib_result_t;

/* Reads the result of a completed request future into *result and returns ACX_OK; ACX_ERR_TIMEOUT
 * when it has not completed yet (non-blocking). A request failed by the device layer itself
 * (executor lost, cancelled) has only `status` set. Any thread. */
acx_status_t acx_lib_result(acx_future_t *future, acx_lib_result_t *result);

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif
