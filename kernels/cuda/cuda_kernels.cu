// Device kernels of the CUDA executor and their C-callable launchers: the empty kernel (launch
// benchmark), fills of width 1/2/4/8, the illegal-address kernel used for fault injection, and the
// elementwise reduce and divide of shareable buffers. Compiled by nvcc; engine_cuda.c (plain C)
// calls only the extern "C" launchers.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include <type_traits>

#include "acx/coll.h"  // acx_redop_t, acx_dtype_t (acx/device.h): the launchers take their values
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

// ---- elementwise REDUCE and DIV (issue 16: the hierarchical collective's local steps) ----------
// Bit for bit what the host engine computes (kernels/host/engine_host.c, runtime/base/half.h):
// integers through their unsigned type (wrapping), f16/bf16 through float with round-to-nearest-
// even conversions, MAX/MIN by comparison keeping dst's element on ties.

namespace {

enum { OP_SUM = ACX_REDOP_SUM, OP_PROD = ACX_REDOP_PROD, OP_MAX = ACX_REDOP_MAX, OP_MIN = ACX_REDOP_MIN };

// Element types with their arithmetic. S: the stored type.
template <typename T>
struct Plain {
  using S = T;
  template <int OP>
  __device__ static S combine(S a, S b) {
    if constexpr (OP == OP_MAX) {
      return a > b ? a : b;
    } else if constexpr (OP == OP_MIN) {
      return a < b ? a : b;
    } else if constexpr (std::is_integral<T>::value) {
      using U = typename std::make_unsigned<T>::type;
      return OP == OP_SUM ? (S)(U)((U)a + (U)b) : (S)(U)((U)a * (U)b);
    } else {
      return OP == OP_SUM ? a + b : a * b;
    }
  }
  // D: the divisor as the host launcher converted it (int64_t, uint64_t, float or double).
  template <typename D>
  __device__ static S divide(S a, D d) {
    return (S)((D)a / d);
  }
};

struct Half {
  using S = uint16_t;
  __device__ static float to(S b) { return __half2float(__ushort_as_half(b)); }
  __device__ static S from(float f) { return __half_as_ushort(__float2half_rn(f)); }
};
struct BHalf {
  using S = uint16_t;
  __device__ static float to(S b) { return __bfloat162float(__ushort_as_bfloat16(b)); }
  __device__ static S from(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
};
template <typename C>
struct Half16 {
  using S = uint16_t;
  template <int OP>
  __device__ static S combine(S a, S b) {
    float x = C::to(a), y = C::to(b);
    if constexpr (OP == OP_MAX) return x > y ? a : b;
    else if constexpr (OP == OP_MIN) return x < y ? a : b;
    else if constexpr (OP == OP_SUM) return C::from(__fadd_rn(x, y));
    else return C::from(__fmul_rn(x, y));
  }
  __device__ static S divide(S a, float d) { return C::from(__fdiv_rn(C::to(a), d)); }
};

// 16 bytes of elements, for loads and stores as one vector.
template <typename S>
union Vec {
  uint4 v;
  S e[sizeof(uint4) / sizeof(S)];
};

// dst op= src over n elements: the first nvec * V elements as 16-byte vectors (both pointers are
// 16-byte aligned when nvec > 0), the rest element by element; grid-stride.
template <typename E, int OP>
__global__ void reduce_kernel(typename E::S *d, const typename E::S *s, uint64_t n, uint64_t nvec) {
  using S = typename E::S;
  constexpr int V = sizeof(uint4) / sizeof(S);
  const uint64_t tid = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t i = tid; i < nvec; i += stride) {
    Vec<S> a, b;
    a.v = reinterpret_cast<const uint4 *>(d)[i];
    b.v = reinterpret_cast<const uint4 *>(s)[i];
#pragma unroll
    for (int k = 0; k < V; k++) a.e[k] = E::template combine<OP>(a.e[k], b.e[k]);
    reinterpret_cast<uint4 *>(d)[i] = a.v;
  }
  for (uint64_t i = nvec * V + tid; i < n; i += stride) d[i] = E::template combine<OP>(d[i], s[i]);
}

template <typename E, typename D>
__global__ void div_kernel(typename E::S *p, uint64_t n, uint64_t nvec, D divisor) {
  using S = typename E::S;
  constexpr int V = sizeof(uint4) / sizeof(S);
  const uint64_t tid = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t i = tid; i < nvec; i += stride) {
    Vec<S> a;
    a.v = reinterpret_cast<const uint4 *>(p)[i];
#pragma unroll
    for (int k = 0; k < V; k++) a.e[k] = E::divide(a.e[k], divisor);
    reinterpret_cast<uint4 *>(p)[i] = a.v;
  }
  for (uint64_t i = nvec * V + tid; i < n; i += stride) p[i] = E::divide(p[i], divisor);
}

// Blocks for `work` units of one thread each: at most 4096 (the grid-stride loop does the rest).
unsigned grid_for(uint64_t work) {
  const uint64_t threads = 256;
  uint64_t blocks = (work + threads - 1) / threads;
  if (blocks > 4096) blocks = 4096;
  return blocks ? (unsigned)blocks : 1u;
}

template <typename E>
cudaError_t launch_reduce(void *dst, const void *src, uint64_t n, int op, cudaStream_t stream) {
  using S = typename E::S;
  constexpr uint64_t V = sizeof(uint4) / sizeof(S);
  const bool aligned = (((uintptr_t)dst | (uintptr_t)src) & 15) == 0;
  const uint64_t nvec = aligned ? n / V : 0;
  const unsigned blocks = grid_for(nvec + (n - nvec * V));
  S *d = static_cast<S *>(dst);
  const S *s = static_cast<const S *>(src);
  switch (op) {
    case OP_SUM: reduce_kernel<E, OP_SUM><<<blocks, 256, 0, stream>>>(d, s, n, nvec); break;
    case OP_PROD: reduce_kernel<E, OP_PROD><<<blocks, 256, 0, stream>>>(d, s, n, nvec); break;
    case OP_MAX: reduce_kernel<E, OP_MAX><<<blocks, 256, 0, stream>>>(d, s, n, nvec); break;
    case OP_MIN: reduce_kernel<E, OP_MIN><<<blocks, 256, 0, stream>>>(d, s, n, nvec); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

template <typename E, typename D>
cudaError_t launch_div(void *p, uint64_t n, D divisor, cudaStream_t stream) {
  using S = typename E::S;
  constexpr uint64_t V = sizeof(uint4) / sizeof(S);
  const uint64_t nvec = ((uintptr_t)p & 15) == 0 ? n / V : 0;
  div_kernel<E, D><<<grid_for(nvec + (n - nvec * V)), 256, 0, stream>>>(static_cast<S *>(p), n, nvec, divisor);
  return cudaGetLastError();
}

}  // namespace

extern "C" cudaError_t acxk_cuda_launch_reduce(void *dst, const void *src, uint64_t n, int dtype, int op,
                                               cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (dtype) {
    case ACX_DTYPE_I8: return launch_reduce<Plain<int8_t>>(dst, src, n, op, stream);
    case ACX_DTYPE_U8: return launch_reduce<Plain<uint8_t>>(dst, src, n, op, stream);
    case ACX_DTYPE_I32: return launch_reduce<Plain<int32_t>>(dst, src, n, op, stream);
    case ACX_DTYPE_U32: return launch_reduce<Plain<uint32_t>>(dst, src, n, op, stream);
    case ACX_DTYPE_I64: return launch_reduce<Plain<int64_t>>(dst, src, n, op, stream);
    case ACX_DTYPE_U64: return launch_reduce<Plain<uint64_t>>(dst, src, n, op, stream);
    case ACX_DTYPE_F16: return launch_reduce<Half16<Half>>(dst, src, n, op, stream);
    case ACX_DTYPE_BF16: return launch_reduce<Half16<BHalf>>(dst, src, n, op, stream);
    case ACX_DTYPE_F32: return launch_reduce<Plain<float>>(dst, src, n, op, stream);
    case ACX_DTYPE_F64: return launch_reduce<Plain<double>>(dst, src, n, op, stream);
    default: return cudaErrorInvalidValue;
  }
}

extern "C" cudaError_t acxk_cuda_launch_div(void *p, uint64_t n, int dtype, uint64_t divisor, cudaStream_t stream) {
  if (divisor == 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  // The divisor converted once, here, as the host engine converts it: (int64_t) for signed
  // integers, (float) (round to nearest even) for f32, f16 and bf16, (double) for f64.
  const int64_t sdiv = (int64_t)divisor;
  switch (dtype) {
    case ACX_DTYPE_I8: return launch_div<Plain<int8_t>>(p, n, sdiv, stream);
    case ACX_DTYPE_U8: return launch_div<Plain<uint8_t>>(p, n, divisor, stream);
    case ACX_DTYPE_I32: return launch_div<Plain<int32_t>>(p, n, sdiv, stream);
    case ACX_DTYPE_U32: return launch_div<Plain<uint32_t>>(p, n, divisor, stream);
    case ACX_DTYPE_I64: return launch_div<Plain<int64_t>>(p, n, sdiv, stream);
    case ACX_DTYPE_U64: return launch_div<Plain<uint64_t>>(p, n, divisor, stream);
    case ACX_DTYPE_F16: return launch_div<Half16<Half>>(p, n, (float)divisor, stream);
    case ACX_DTYPE_BF16: return launch_div<Half16<BHalf>>(p, n, (float)divisor, stream);
    case ACX_DTYPE_F32: return launch_div<Plain<float>>(p, n, (float)divisor, stream);
    case ACX_DTYPE_F64: return launch_div<Plain<double>>(p, n, (double)divisor, stream);
    default: return cudaErrorInvalidValue;
  }
}
