/* cuBLASLt through acx: matrix multiplication with fused epilogues (ReLU, GELU, bias, and GELU's
 * auxiliary output) in f32, f16, bf16 and fp8 (E4M3 / E5M2 with per-tensor scales), on acx
 * buffers. Column-major, as cuBLAS; dimensions and leading dimensions in elements, offsets in
 * bytes (multiples of the element size).
 *
 *   D = epilogue(alpha * scale_a * scale_b * op(A) op(B) + beta * C + bias)
 *
 * op(A) is m x k, op(B) k x n, C and D m x n (m, n, k >= 1: cuBLASLt has no empty layouts); bias has m elements (one per row of D, broadcast
 * along the columns). GELU is the tanh approximation, as cuBLASLt computes it. The aux output of
 * GELU stores the epilogue's input (alpha.. + bias) for a backward pass.
 *
 * Dtypes (A, B -> C, D; bias; compute), as cuBLASLt supports them:
 *   f32 x f32 -> f32; bias f32; f32 (or the opt-in FAST modes of acx_blas_compute_t)
 *   f16 x f16 -> f16; bias f16; f32 accumulation
 *   bf16 x bf16 -> bf16; bias bf16; f32 accumulation
 *   fp8 x fp8 -> f32, f16 or bf16 (C like D); bias bf16 for f32 output, else D's dtype; f32
 *     accumulation. E4M3 x E4M3, E4M3 x E5M2 and E5M2 x E4M3 (not E5M2 x E5M2). fp8 takes
 *     transa = T, transb = N (cuBLASLt's only fp8 layout on Hopper), leading dimensions that are
 *     multiples of 16, and optional per-tensor scales: one f32 each in a device buffer (NULL:
 *     1.0), read on the device when the matmul runs, so they may be produced by earlier GPU work.
 *     fp8 outputs (and their amax) are not offered.
 * The executor picks the algorithm with cublasLtMatmulAlgoGetHeuristic once per shape (dtypes,
 * transposes, sizes, leading dimensions, epilogue, alignment of the pointers) and caches it per
 * executor incarnation; the workspace is ACX_BLASLT_WORKSPACE_MB per stream.
 *
 * Threads and completion as in acx/lib.h. Statuses besides those of acx/lib.h and acx/device.h:
 * ACX_ERR_NULL_ARG, ACX_ERR_INVALID_ARG (dimensions, leading dimensions, transposes, epilogue,
 * fp8 layout, aux leading dimension, overlapping operands: the log names the argument),
 * ACX_ERR_BAD_DTYPE, ACX_ERR_OUT_OF_RANGE, ACX_ERR_OVERFLOW, ACX_ERR_STALE_BUFFER,
 * ACX_ERR_INVALID_STATE, ACX_ERR_NOT_SUPPORTED (host kind), ACX_ERR_LIBRARY (cublasStatus_t in
 * lib_code; CUBLAS_STATUS_NOT_SUPPORTED (15) when the heuristic finds no algorithm for the case,
 * e.g. misaligned fp8 operands). */
#ifndef ACX_BLASLT_H
#define ACX_BLASLT_H

/* Exported from libacx, which hides everything else (cmake/libacx.map). */
#pragma GCC visibility push(default)

#include "acx/blas.h"
#include "acx/lib.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct acx_blaslt acx_blaslt_t;

/* Epilogue flags: at most one activation, optionally BIAS, optionally AUX (with GELU only). */
typedef enum acx_blaslt_epilogue {
  ACX_BLASLT_EPILOGUE_NONE = 0,
  ACX_BLASLT_EPILOGUE_RELU = 1,
  ACX_BLASLT_EPILOGUE_GELU = 2,
  ACX_BLASLT_EPILOGUE_BIAS = 4, /* add desc->bias (m elements) before the activation */
  ACX_BLASLT_EPILOGUE_AUX = 8   /* GELU only: store the GELU input in desc->aux (m x n, aux_ld) */
} acx_blaslt_epilogue_t;

typedef struct acx_blaslt_matmul_desc {
  size_t size; /* sizeof(acx_blaslt_matmul_desc_t): set by ACX_BLASLT_MATMUL_DESC_INIT */
  acx_blas_op_t transa, transb;
  int64_t m, n, k;
  double alpha, beta;  /* applied in f32 */
  acx_buffer_t *a;
  size_t a_offset;
  int64_t lda;
  acx_buffer_t *b;
  size_t b_offset;
  int64_t ldb;
  acx_buffer_t *c;     /* NULL: no C (beta must be 0); may be the range of d (in place) */
  size_t c_offset;
  int64_t ldc;
  acx_buffer_t *d;     /* the output */
  size_t d_offset;
  int64_t ldd;
  unsigned epilogue;   /* acx_blaslt_epilogue_t flags */
  acx_buffer_t *bias;  /* with ACX_BLASLT_EPILOGUE_BIAS */
  size_t bias_offset;
  acx_buffer_t *aux;   /* with ACX_BLASLT_EPILOGUE_AUX: D's dtype, aux_ld >= m, a multiple of 8 */
  size_t aux_offset;
  int64_t aux_ld;
  acx_buffer_t *scale_a; /* fp8 only: one f32 each, NULL for 1.0 */
  size_t scale_a_offset;
  acx_buffer_t *scale_b;
  size_t scale_b_offset;
  acx_blas_compute_t compute; /* f32 inputs only: DEFAULT or a FAST mode */
} acx_blaslt_matmul_desc_t;

#define ACX_BLASLT_MATMUL_DESC_INIT {.size = sizeof(acx_blaslt_matmul_desc_t), .alpha = 1.0, .beta = 0.0}

/* Creates a cuBLASLt context. Statuses as acx_blas_create. */
acx_status_t acx_blaslt_create(acx_device_t *dev, const acx_lib_config_t *cfg, acx_blaslt_t **lt);
/* As acx_blas_destroy. */
acx_status_t acx_blaslt_destroy(acx_blaslt_t *lt);

/* Runs the matmul desc describes. */
acx_status_t acx_blaslt_matmul(acx_blaslt_t *lt, const acx_blaslt_matmul_desc_t *desc, acx_future_t **done);

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif
