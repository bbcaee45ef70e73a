/* The wire format of library requests, shared by the rank-side library contexts (lib_<name>.c)
 * and their executor-side handlers (lib_<name>_exec.c): op numbers and the descriptor a command
 * names in a host region. Plain data, no CUDA headers. The rank and the executor are built
 * together, so the layout only needs to be fixed, not versioned. */
#ifndef ACXK_LIB_OPS_H
#define ACXK_LIB_OPS_H

#include <stdint.h>

#include "runtime/proto/cmd.h"
#include "runtime/proto/limits.h"

/* The op ranges (ACXK_OP_LIB_FIRST..ACXK_OP_LIB_LAST, one ACXK_OP_<LIB>_FIRST per library, inside
 * the one extension "acx-libs"), its ext_state slot (ACXK_LIB_EXT_SLOT) and the descriptor's
 * limits (operands, tensor modes, kernel arguments, names) are in runtime/proto/limits.h. */

enum {
  ACXK_OP_BLAS_GEMM = ACXK_OP_BLAS_FIRST, /* gemm and strided batched gemm */
  ACXK_OP_BLAS_GEMV,
  ACXK_OP_BLAS_AXPY,
  ACXK_OP_BLAS_DOT,
  ACXK_OP_BLAS_NRM2,
  ACXK_OP_BLAS_SCAL,
  ACXK_OP_BLAS_LAST_ = ACXK_OP_BLAS_SCAL,
};

enum {
  ACXK_OP_BLASLT_MATMUL = ACXK_OP_BLASLT_FIRST,
};

enum {
  ACXK_OP_FFT_EXEC = ACXK_OP_FFT_FIRST,
};

enum {
  ACXK_OP_SPARSE_SPMV = ACXK_OP_SPARSE_FIRST,
  ACXK_OP_SPARSE_SPMM,
};

/* NVRTC and modules. COMPILE and LOAD run on the executor's library worker thread (they may take
 * longer than a heartbeat period); GET_FUNCTION, LAUNCH and UNLOAD's bookkeeping on the executor
 * thread. */
enum {
  ACXK_OP_RTC_COMPILE = ACXK_OP_RTC_FIRST,
  ACXK_OP_RTC_LOAD,
  ACXK_OP_RTC_GET_FUNCTION,
  ACXK_OP_RTC_LAUNCH,
  ACXK_OP_RTC_UNLOAD,
};

enum {
  ACXK_OP_DNN_CONV_FWD = ACXK_OP_DNN_FIRST,
  ACXK_OP_DNN_ACTIVATION_FWD,
  ACXK_OP_DNN_SOFTMAX_FWD,
  ACXK_OP_DNN_POOLING_FWD,
  ACXK_OP_DNN_BATCHNORM_INFER,
};

enum {
  ACXK_OP_TENSOR_CONTRACT = ACXK_OP_TENSOR_FIRST,
};

enum {
  ACXK_OP_RAND_GENERATE = ACXK_OP_RAND_FIRST, /* every distribution: acxk_rand_desc_t.dist */
};

enum {
  ACXK_OP_SOLVER_POTRF = ACXK_OP_SOLVER_FIRST,
  ACXK_OP_SOLVER_POTRS,
  ACXK_OP_SOLVER_GETRF,
  ACXK_OP_SOLVER_GETRS,
  ACXK_OP_SOLVER_GEQRF,
  ACXK_OP_SOLVER_GESVD,
  ACXK_OP_SOLVER_SYEVD,
};

/* Each library's ops stay inside its sub-range (runtime/proto/limits.h). */
_Static_assert(ACXK_OP_BLAS_LAST_ < ACXK_OP_BLASLT_FIRST && ACXK_OP_BLASLT_MATMUL < ACXK_OP_FFT_FIRST &&
                   ACXK_OP_FFT_EXEC < ACXK_OP_RAND_FIRST && ACXK_OP_RAND_GENERATE < ACXK_OP_SOLVER_FIRST &&
                   ACXK_OP_SOLVER_SYEVD < ACXK_OP_SPARSE_FIRST && ACXK_OP_SPARSE_SPMM < ACXK_OP_DNN_FIRST &&
                   ACXK_OP_DNN_BATCHNORM_INFER < ACXK_OP_RTC_FIRST && ACXK_OP_RTC_UNLOAD < ACXK_OP_TENSOR_FIRST &&
                   ACXK_OP_TENSOR_CONTRACT <= ACXK_OP_LIB_LAST,
               "a library's ops overflow into the next library's range");

/* One buffer operand: the executor resolves id to a device pointer, checks [off, off + extent)
 * against the buffer's size again (the rank checked it first), and orders the access on the
 * command's stream (readers wait for the last writer, writers for everyone). id 0: absent. */
typedef struct acxk_operand {
  uint64_t id;
  uint64_t off;    /* bytes */
  uint64_t extent; /* bytes touched from off */
  uint32_t writes;
  uint32_t dtype;  /* acx_dtype_t */
} acxk_operand_t;

/* BLAS: column-major, as cuBLAS. Operands: gemm A B C; gemv A x y; axpy x y; dot x y [result];
 * nrm2 x - [result]; scal x. */
typedef struct acxk_blas_desc {
  uint32_t dtype;   /* acx_dtype_t of the operands */
  uint32_t compute; /* acx_blas_compute_t (gemm) */
  uint32_t transa, transb; /* acx_blas_op_t */
  int64_t m, n, k;
  int64_t lda, ldb, ldc;
  int64_t stride_a, stride_b, stride_c;
  int64_t batch; /* 1: plain gemm */
  int64_t incx, incy;
  double alpha, beta;
} acxk_blas_desc_t;

/* cuRAND: operand 0 is the output. The rank fixes seed and offset per request, so the numbers
 * depend on (rng, seed, offset, n, distribution) only, never on the executor's history. */
typedef struct acxk_rand_desc {
  uint32_t rng;   /* acx_rand_rng_t */
  uint32_t dist;  /* acx_rand_dist_t */
  uint32_t dtype; /* f32/f64 (uniform, normal, log-normal), u32 (bits, poisson) */
  uint32_t reserved;
  uint64_t seed, offset, n;
  double p0, p1; /* mean and stddev, or lambda */
} acxk_rand_desc_t;

/* cuFFT: operand 0 input, 1 output (the same range for an in-place C2C). Contiguous layouts,
 * batches back to back; complex values interleaved (re, im) in a real dtype's buffer. */
typedef struct acxk_fft_desc {
  uint32_t type;  /* acx_fft_type_t */
  uint32_t dtype; /* f32 or f64 */
  int32_t direction;
  int32_t rank;
  int64_t n[3];
  int64_t batch;
} acxk_fft_desc_t;

/* cuBLASLt matmul, column-major. Operands: 0 A, 1 B, 2 C (absent: none, beta = 0), 3 D, 4 bias,
 * 5 aux, 6 scale_a, 7 scale_b (absent when unused). */
#define ACXK_LT_A 0
#define ACXK_LT_B 1
#define ACXK_LT_C 2
#define ACXK_LT_D 3
#define ACXK_LT_BIAS 4
#define ACXK_LT_AUX 5
#define ACXK_LT_SCALE_A 6
#define ACXK_LT_SCALE_B 7
typedef struct acxk_blaslt_desc {
  uint32_t a_dtype, b_dtype, d_dtype, bias_dtype; /* acx_dtype_t; C has D's */
  uint32_t compute;                               /* acx_blas_compute_t */
  uint32_t transa, transb;                        /* acx_blas_op_t */
  uint32_t epilogue;                              /* acx_blaslt_epilogue_t flags */
  int64_t m, n, k;
  int64_t lda, ldb, ldc, ldd, aux_ld;
  double alpha, beta;
} acxk_blaslt_desc_t;

/* cuSPARSE generic API. Operands: 0 row offsets, 1 column indices, 2 values, 3 x / B, 4 y / C. */
typedef struct acxk_sparse_desc {
  uint32_t dtype;     /* f32 or f64 (values, x/y, B/C) */
  uint32_t index;     /* i32 or i64 (offsets and indices) */
  uint32_t trans;     /* acx_blas_op_t */
  int32_t base;       /* 0 or 1 */
  int64_t rows, cols, nnz;
  int64_t n, ldb, ldc; /* SpMM */
  double alpha, beta;
} acxk_sparse_desc_t;

/* cuSOLVER (dense, 64-bit API), column-major. Operands: potrf A; potrs A B; getrf A ipiv;
 * getrs A ipiv B; geqrf A tau; gesvd A S U VT (U, VT absent with job NONE); syevd A W. The info
 * is read back through the scratch slot. */
typedef struct acxk_solver_desc {
  uint32_t dtype; /* f32 or f64 */
  uint32_t uplo;  /* acx_solver_uplo_t */
  uint32_t trans; /* acx_blas_op_t (getrs) */
  uint32_t jobu, jobvt; /* acx_solver_svd_job_t (gesvd) */
  uint32_t vectors;     /* syevd */
  int64_t m, n, nrhs;
  int64_t lda, ldb, ldu, ldvt;
} acxk_solver_desc_t;

/* cuDNN, NCHW packed tensors. Operands: conv x w y; activation, softmax, pooling x y; batch-norm
 * x y scale bias mean var (scale..var: C f32 values each). */
#define ACXK_DNN_X 0
#define ACXK_DNN_W 1 /* conv */
typedef struct acxk_dnn_desc {
  uint32_t dtype; /* f32 or f16 (x, y, w) */
  uint32_t mode;  /* acx_dnn_activation_t, acx_dnn_softmax_mode_t, acx_dnn_pool_mode_t */
  uint32_t alg;   /* acx_dnn_softmax_alg_t */
  uint32_t allow_tf32;
  int64_t x[4], y[4], w[4]; /* n c h w; the filter k c r s */
  int32_t pad[2], stride[2], dilation[2], window[2];
  double alpha, beta, epsilon;
} acxk_dnn_desc_t;

/* cuTENSOR contraction D = alpha A B + beta C with D = C. Operands: 0 A, 1 B, 2 C. Each tensor
 * names its modes; a mode's extent is in the label table (the rank checked that the tensors
 * agree). Strides in elements. */
typedef struct acxk_tensor_modes {
  uint32_t nmodes;
  int32_t modes[ACXK_TENSOR_MAX_MODES];
  int64_t strides[ACXK_TENSOR_MAX_MODES];
} acxk_tensor_modes_t;
typedef struct acxk_tensor_desc {
  uint32_t dtype; /* f32 or f64 */
  uint32_t nlabels;
  int32_t label[ACXK_TENSOR_MAX_LABELS];
  int64_t extent[ACXK_TENSOR_MAX_LABELS];
  acxk_tensor_modes_t t[3];
  double alpha, beta;
} acxk_tensor_desc_t;

/* NVRTC and modules. A launch argument: a buffer operand (opnd) or a scalar's bits (4-byte
 * scalars in the low half). */
typedef struct acxk_rtc_arg {
  uint32_t type; /* acx_kernel_arg_type_t */
  uint32_t opnd; /* operand index for buffer arguments */
  uint64_t bits;
} acxk_rtc_arg_t;

/* COMPILE and LOAD carry their inputs and outputs in the host region `region` (not a buffer):
 * an acxk_rtc_out_t at offset 0, written by the executor, then the inputs at the offsets below.
 * GET_FUNCTION, LAUNCH and UNLOAD name a module by the id its LOAD returned and the generation
 * of the executor that loaded it. */
typedef struct acxk_rtc_desc {
  uint64_t region;
  uint64_t module;
  uint64_t generation;
  uint32_t function; /* index returned by GET_FUNCTION */
  uint32_t target;   /* acx_rtc_target_t (COMPILE) */
  union {
    struct {
      uint64_t src_off, src_len; /* NUL-terminated source; src_len without the NUL */
      uint64_t name_off;         /* NUL-terminated program name */
      uint64_t opt_off, opt_len; /* nopts NUL-terminated options back to back */
      uint64_t log_off, log_cap; /* room for the log, NUL included */
      uint64_t image_off, image_cap;
      uint32_t nopts, reserved;
    } compile;
    struct {
      uint64_t image_off, image_len; /* the image, followed by a NUL (PTX is text) */
    } load;
    char name[ACXK_RTC_NAME_MAX]; /* GET_FUNCTION: NUL-terminated */
    struct {
      uint32_t grid[3], block[3];
      uint32_t shared_bytes, cooperative, nargs, reserved;
      acxk_rtc_arg_t args[ACXK_RTC_MAX_ARGS];
    } launch;
  } u;
} acxk_rtc_desc_t;

/* Written by the executor at offset 0 of a COMPILE's region before it replies. */
typedef struct acxk_rtc_out {
  uint64_t log_len;   /* bytes written at log_off (NUL not counted; truncated to log_cap - 1) */
  uint64_t log_total; /* the whole log's length */
  uint64_t image_len; /* the image's size; written at image_off only when it fits image_cap */
  char arch[16];      /* the architecture compiled for, "sm_90" */
} acxk_rtc_out_t;

#define ACXK_DESC_MAGIC 0x4c584341u /* "ACXL" */

typedef struct acxk_desc {
  uint32_t magic;
  uint32_t op;
  uint32_t nops;
  uint32_t reserved;
  acxk_operand_t opnd[ACXK_MAX_OPERANDS];
  union {
    acxk_blas_desc_t blas;
    acxk_blaslt_desc_t blaslt;
    acxk_rand_desc_t rand;
    acxk_fft_desc_t fft;
    acxk_solver_desc_t solver;
    acxk_sparse_desc_t sparse;
    acxk_rtc_desc_t rtc;
    acxk_dnn_desc_t dnn;
    acxk_tensor_desc_t tensor;
    uint8_t raw[ACXK_DESC_BODY];
  } u;
} acxk_desc_t;

/* A library command: op, stream, and the descriptor's place: arg[0] host region id, arg[1] byte
 * offset of the acxk_desc_t in it. */
#define ACXK_CMD_REGION 0
#define ACXK_CMD_OFFSET 1

/* The completion of a library command: cpl.lib_code is the library's own code on a library
 * error; value[0] a scalar result's bits; value[1] = library id | (result dtype << 8). */
#define ACXK_CPL_LIB(v1) ((uint32_t)((v1)&0xffu))
#define ACXK_CPL_DTYPE(v1) ((uint32_t)(((v1) >> 8) & 0xffu))
#define ACXK_CPL_V1(lib, dtype) ((uint64_t)(lib) | ((uint64_t)(dtype) << 8))

_Static_assert(sizeof(acxk_operand_t) == 32, "operand records are 32 bytes");
_Static_assert(sizeof(acxk_blas_desc_t) <= ACXK_DESC_BODY, "the BLAS body fits the descriptor");
_Static_assert(sizeof(acxk_blaslt_desc_t) <= ACXK_DESC_BODY, "the cuBLASLt body fits the descriptor");
_Static_assert(sizeof(acxk_solver_desc_t) <= ACXK_DESC_BODY, "the solver body fits the descriptor");
_Static_assert(sizeof(acxk_rtc_desc_t) <= ACXK_DESC_BODY, "the NVRTC/module body fits the descriptor");
_Static_assert(sizeof(acxk_dnn_desc_t) <= ACXK_DESC_BODY, "the cuDNN body fits the descriptor");
_Static_assert(sizeof(acxk_tensor_desc_t) <= ACXK_DESC_BODY, "the cuTENSOR body fits the descriptor");
#endif
