// Device kernels of the CUDA executor and their C-callable launchers: the empty kernel (launch
// benchmark), fills of width 1/2/4/8, and the illegal-address kernel used for fault injection.
// Compiled by nvcc; engine_cuda.c (plain C) calls only the extern "C" launchers.
#include <stdint.h>

#include "kernels/cuda/cuda_internal.h"

namespace {

__global__ void empty_kernel() {}

// Fills n elements of T at p with v. The 16-byte-aligned middle is written as uint4 (a 16-byte
// vector holding v repeated: valid because p is T-aligned and 16 is a multiple of sizeof(T), so
// every 16-aligned address starts a whole period of the pattern); head and tail element-wise.
template <typename T>
__global__ void fill_kernel(T *p, uint64_t n, T v, uint64_t head, uint64_t nvec, uint4 vec) {
  const uint64_t tid = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  uint4 *mid = reinterpret_cast<uint4 *>(p + head);
  for (uint64_t i = tid; i < nvec; i += stride) mid[i] = vec;
  const uint64_t per_vec = sizeof(uint4) / sizeof(T);
  const uint64_t tail_start = head + nvec * per_vec;
  // head and tail hold fewer than 2 * 16 / sizeof(T) elements together.
  for (uint64_t i = tid; i < head; i += stride) p[i] = v;
  for (uint64_t i = tail_start + tid; i < n; i += stride) p[i] = v;
}

// The store address arrives as an argument so the compiler cannot see (and drop) the bad store.
__global__ void fault_kernel(volatile int *bad) { *bad = 0xdead; }

template <typename T>
cudaError_t launch_fill(void *dst, uint64_t bytes, uint64_t pattern, cudaStream_t stream) {
  T v = (T)pattern;
  T *p = static_cast<T *>(dst);
  uint64_t n = bytes / sizeof(T);
  uint64_t addr = (uint64_t)(uintptr_t)dst;
  uint64_t head = ((16 - (addr & 15)) & 15) / sizeof(T);
  if (head > n) head = n;
  uint64_t nvec = (n - head) * sizeof(T) / 16;
  uint4 vec;
  unsigned char *vb = reinterpret_cast<unsigned char *>(&vec);
  for (int i = 0; i < 16; i++) vb[i] = (unsigned char)(pattern >> (8 * (i % sizeof(T))));
  const unsigned threads = 256;
  // Head and tail are under 16 / sizeof(T) elements each: one block covers them.
  uint64_t work = nvec > 32 ? nvec : 32;
  uint64_t blocks = (work + threads - 1) / threads;
  // Enough blocks to fill every SM many times over; the grid-stride loop does the rest.
  if (blocks > 4096) blocks = 4096;
  if (blocks == 0) blocks = 1;
  fill_kernel<T><<<(unsigned)blocks, threads, 0, stream>>>(p, n, v, head, nvec, vec);
  return cudaGetLastError();
}

bool byte_uniform(uint64_t pattern, int width) {
  unsigned char b0 = (unsigned char)pattern;
  for (int i = 1; i < width; i++)
    if ((unsigned char)(pattern >> (8 * i)) != b0) return false;
  return true;
}

}  // namespace

extern "C" cudaError_t acxk_cuda_launch_empty(cudaStream_t stream) {
  empty_kernel<<<1, 1, 0, stream>>>();
  return cudaGetLastError();
}

extern "C" cudaError_t acxk_cuda_launch_fill(void *dst, uint64_t bytes, uint64_t pattern, int width,
                                             cudaStream_t stream) {
  if (width != 1 && width != 2 && width != 4 && width != 8) return cudaErrorInvalidValue;
  if (((uintptr_t)dst % (unsigned)width) != 0 || bytes % (unsigned)width != 0) return cudaErrorInvalidValue;
  if (bytes == 0) return cudaSuccess;
  // cudaMemsetAsync runs at full bandwidth and needs no launch configuration of ours.
  if (byte_uniform(pattern, width)) return cudaMemsetAsync(dst, (int)(pattern & 0xff), bytes, stream);
  switch (width) {
    case 2: return launch_fill<uint16_t>(dst, bytes, pattern, stream);
    case 4: return launch_fill<uint32_t>(dst, bytes, pattern, stream);
    default: return launch_fill<uint64_t>(dst, bytes, pattern, stream);
  }
}

extern "C" cudaError_t acxk_cuda_launch_fault(cudaStream_t stream) {
  // Address 0x10 is never mapped in a CUDA context: the store raises cudaErrorIllegalAddress.
  fault_kernel<<<1, 1, 0, stream>>>(reinterpret_cast<volatile int *>(uintptr_t{0x10}));
  return cudaGetLastError();
}

extern "C" cudaError_t acxk_cuda_kernel_image(void) {
  // Loading a kernel's attributes loads its module for the current device (also under lazy
  // loading): without a cubin or PTX for this GPU it fails, where a launch would fail later.
  cudaFuncAttributes attr;
  cudaError_t err = cudaFuncGetAttributes(&attr, empty_kernel);
  (void)cudaGetLastError();  // not sticky: keep it off the thread's later calls
  return err;
}
