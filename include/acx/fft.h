/* cuFFT through acx: batched 1D, 2D and 3D transforms of contiguous data in acx buffers. Complex
 * values are interleaved (re, im) pairs of the buffer's real dtype: f32 (cufftComplex) or f64
 * (cufftDoubleComplex). Dimensions are row-major as in cuFFT (n[rank-1] varies fastest); batches
 * follow each other without gaps. Transforms are unnormalised: forward then inverse multiplies
 * by the product of the dimensions. The executor caches one plan per shape and stream (per
 * executor incarnation), so repeating a shape costs no planning.
 *
 * Threads and completion as in acx/lib.h. Statuses besides those of acx/lib.h and acx/device.h:
 * ACX_ERR_NULL_ARG, ACX_ERR_INVALID_ARG (rank, dimension, batch, direction, overlapping in/out
 * where not allowed), ACX_ERR_BAD_DTYPE, ACX_ERR_OUT_OF_RANGE, ACX_ERR_OVERFLOW,
 * ACX_ERR_STALE_BUFFER, ACX_ERR_INVALID_STATE, ACX_ERR_NOT_SUPPORTED (host kind),
 * ACX_ERR_LIBRARY (cufftResult in lib_code), ACX_ERR_DEVICE_OOM (no memory for a plan). */
#ifndef ACX_FFT_H
#define ACX_FFT_H

/* Exported from libacx, which hides everything else (cmake/libacx.map). */
#pragma GCC visibility push(default)

#include "acx/lib.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct acx_fft acx_fft_t;

typedef enum acx_fft_type {
  ACX_FFT_C2C = 0, /* complex -> complex, both of n[0]*..*n[rank-1] elements per batch */
  ACX_FFT_R2C = 1, /* real (n[0]*..*n[rank-1]) -> complex (n[0]*..*(n[rank-1]/2+1)), forward */
  ACX_FFT_C2R = 2  /* complex (n[0]*..*(n[rank-1]/2+1)) -> real, inverse; the input is clobbered */
} acx_fft_type_t;

#define ACX_FFT_FORWARD (-1)
#define ACX_FFT_INVERSE 1

typedef struct acx_fft_desc {
  size_t size; /* sizeof(acx_fft_desc_t): set by ACX_FFT_DESC_INIT */
  acx_fft_type_t type;
  int rank;       /* 1, 2 or 3 */
  int64_t n[3];   /* the first `rank` are the dimensions, each >= 1 */
  int64_t batch;  /* >= 1 */
  int direction;  /* C2C: ACX_FFT_FORWARD or ACX_FFT_INVERSE; implied by R2C/C2R */
  acx_buffer_t *in;
  size_t in_offset;
  acx_buffer_t *out; /* C2C may be in place (out = in, same offset); R2C/C2R may not overlap in */
  size_t out_offset;
} acx_fft_desc_t;

#define ACX_FFT_DESC_INIT {.size = sizeof(acx_fft_desc_t), .rank = 1, .batch = 1, .direction = ACX_FFT_FORWARD}

/* Creates a cuFFT context. Statuses as acx_blas_create. */
acx_status_t acx_fft_create(acx_device_t *dev, const acx_lib_config_t *cfg, acx_fft_t **fft);
acx_status_t acx_fft_destroy(acx_fft_t *fft);
/* Runs the transform desc describes. in and out share the dtype (f32 or f64). */
acx_status_t acx_fft_exec(acx_fft_t *fft, const acx_fft_desc_t *desc, acx_future_t **done);

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif
