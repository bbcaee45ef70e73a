/* Internals of the CUDA device kind, shared by engine_cuda.c (gcc) and cuda_kernels.cu (nvcc):
 * the C-callable kernel launchers, the check macros for CUDA runtime calls, and the driver-API
 * entry point lookup. Only the executor's CUDA code includes this header (kernels/ and the NCCL
 * extension, kernels/nccl/nccl_exec.c): it pulls in the CUDA runtime API. */
#ifndef ACXK_CUDA_INTERNAL_H
#define ACXK_CUDA_INTERNAL_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Each launcher enqueues on `stream` and returns the launch's own error (cudaGetLastError, so a
 * non-sticky launch error does not linger on the thread). */

/* An empty kernel, <<<1, 1>>>: the unit of the launch benchmark. */
cudaError_t acxk_cuda_launch_empty(cudaStream_t stream);
/* dst[0, bytes) := `pattern` (its low `width` bytes, little-endian) repeated. width is 1, 2, 4 or
 * 8; dst and bytes must be multiples of width. Byte-uniform patterns go through cudaMemsetAsync. */
cudaError_t acxk_cuda_launch_fill(void *dst, uint64_t bytes, uint64_t pattern, int width, cudaStream_t stream);
/* dst[i] := dst[i] op src[i] for i < n, elements of acx_dtype_t `dtype` (one of the ten NCCL
 * reduces: i8 u8 i32 u32 i64 u64 f16 bf16 f32 f64), op an acx_redop_t among SUM PROD MAX MIN.
 * Integer sums and products wrap; f16/bf16 are computed in float and rounded to nearest even;
 * MAX/MIN keep dst's element unless src's compares greater/less. dst and src are element-aligned
 * and equal or disjoint. cudaErrorInvalidValue for another dtype or op. */
cudaError_t acxk_cuda_launch_reduce(void *dst, const void *src, uint64_t n, int dtype, int op, cudaStream_t stream);
/* p[i] := p[i] / divisor for i < n: integers truncate (signed ones through int64_t: divisor at most
 * INT64_MAX), floats divide in their type, f16/bf16 in float rounded to nearest even. divisor > 0. */
cudaError_t acxk_cuda_launch_div(void *p, uint64_t n, int dtype, uint64_t divisor, cudaStream_t stream);
/* A kernel that stores through an invalid address: the context gets the sticky
 * cudaErrorIllegalAddress once it runs. Fault injection only. */
cudaError_t acxk_cuda_launch_fault(cudaStream_t stream);

/* cudaSuccess when this build holds code (a cubin or PTX) for the current device's GPU, else
 * cudaErrorNoKernelImageForDevice or cudaErrorInvalidDeviceFunction (no architecture of
 * CMAKE_CUDA_ARCHITECTURES runs on it). Launches nothing. */
cudaError_t acxk_cuda_kernel_image(void);

/* *fn := the driver API function `name` at `version` (e.g. 12000 for the CUDA 12 ABI), reached
 * through cudaGetDriverEntryPointByVersion: libacx does not link libcuda, so that it loads where
 * no driver is installed (host kind, CI). 0 on success; -1 (and *fn NULL) when the driver lacks it. */
int acxk_driver_entry(const char *name, unsigned version, void **fn);

#ifdef __cplusplus
}
#endif

/* CUDA check pair, NCCL style: log the call's text and the error once, where it starts, then
 * return (CUDACHECK) or jump (CUDACHECKGOTO) with the mapped acx status in `res`. `map` names a
 * function or function-like macro turning a cudaError_t into an acx_status_t (the engine's also
 * keeps the code for the reply's lib_code and poisons itself on a sticky error). Needs log.h. */
#define ACXK_CUDACHECK(map, call)                                                          \
  do {                                                                                     \
    cudaError_t acxk_e_ = (call);                                                          \
    if (acxk_e_ != cudaSuccess) {                                                          \
      ACX_WARN(EXEC, "%s failed: %s (%d)", #call, cudaGetErrorString(acxk_e_), (int)acxk_e_); \
      return map(acxk_e_);                                                               \
    }                                                                                      \
  } while (0)
#define ACXK_CUDACHECKGOTO(map, call, res, label)                                          \
  do {                                                                                     \
    cudaError_t acxk_e_ = (call);                                                          \
    if (acxk_e_ != cudaSuccess) {                                                          \
      ACX_WARN(EXEC, "%s failed: %s (%d)", #call, cudaGetErrorString(acxk_e_), (int)acxk_e_); \
      (res) = map(acxk_e_);                                                              \
      goto label;                                                                          \
    }                                                                                      \
  } while (0)

#endif
