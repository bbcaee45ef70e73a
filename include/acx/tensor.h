/* cuTENSOR through acx: tensor contractions D = alpha A B + beta C, with D written over C, on
 * acx buffers, through the cuTENSOR 2 API (cutensorCreateContraction, a plan per request with
 * its workspace estimated by cutensorEstimateWorkspaceSize, cutensorContract).
 *
 * A tensor is described by its modes (integer labels, as in Einstein notation), one extent per
 * mode and optional strides in elements (NULL: packed with the first mode fastest, cuTENSOR's
 * convention). Modes appearing in A and B but not C are contracted (summed); every mode must
 * appear in at least two of A, B and C, and a mode's extent must be the same wherever it appears.
 * A, B and C share the dtype, f32 or f64 (the computation runs in that precision).
 *
 * cuTENSOR is optional: configure looks for it (cmake/FindCUTENSOR.cmake, hints CUTENSOR_HOME /
 * CUTENSOR_ROOT) and says whether it was found. Without it -- the usual case: it is not part of
 * the CUDA toolkit -- every request is validated and then returns ACX_ERR_NOT_SUPPORTED, the
 * documented behaviour of such a build.
 *
 * Threads and completion as in acx/lib.h. Statuses besides those of acx/lib.h and acx/device.h:
 * ACX_ERR_NULL_ARG, ACX_ERR_INVALID_ARG (mode counts, repeated or unmatched modes, extents that
 * disagree, strides, overlaps: the log names the argument), ACX_ERR_BAD_DTYPE,
 * ACX_ERR_OUT_OF_RANGE, ACX_ERR_OVERFLOW, ACX_ERR_STALE_BUFFER, ACX_ERR_INVALID_STATE,
 * ACX_ERR_NOT_SUPPORTED (no cuTENSOR in this build, or host kind), ACX_ERR_LIBRARY
 * (cutensorStatus_t in lib_code), ACX_ERR_DEVICE_OOM. */
#ifndef ACX_TENSOR_H
#define ACX_TENSOR_H

/* Exported from libacx, which hides everything else (cmake/libacx.map). */
#pragma GCC visibility push(default)

#include "acx/lib.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct acx_tensor acx_tensor_t;

/* At most this many modes per tensor, and this many distinct modes in one contraction. */
#define ACX_TENSOR_MAX_MODES 8
#define ACX_TENSOR_MAX_LABELS 12

/* One operand (a plain description: it holds no reference). nmodes 0 is a scalar. */
typedef struct acx_tensor_operand {
  int nmodes;
  const int32_t *modes;   /* nmodes distinct labels */
  const int64_t *extents; /* nmodes extents, each >= 1 */
  const int64_t *strides; /* nmodes strides in elements (>= 1), or NULL for packed */
  acx_buffer_t *buf;      /* f32 or f64 */
  size_t offset;          /* bytes */
} acx_tensor_operand_t;

/* Creates a cuTENSOR context (also without cuTENSOR: its requests are then refused). Statuses as
 * acx_blas_create. */
acx_status_t acx_tensor_create(acx_device_t *dev, const acx_lib_config_t *cfg, acx_tensor_t **t);
/* As acx_blas_destroy. */
acx_status_t acx_tensor_destroy(acx_tensor_t *t);
/* 1 when this libacx was built with cuTENSOR. Any thread. */
int acx_tensor_available(void);

/* C = alpha A B + beta C (contracting the modes C lacks). C may not overlap A or B. */
acx_status_t acx_tensor_contract(acx_tensor_t *t, double alpha, const acx_tensor_operand_t *a,
                                 const acx_tensor_operand_t *b, double beta, const acx_tensor_operand_t *c,
                                 acx_future_t **done);

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif
