// The one-shot all-reduce between the GPUs of one node (runtime/proto/peer_ops.h): every block
// copies its elements of the input into this rank's data slot, raises its flag in every peer's
// area, waits for the peers' flags in its own area, then reduces its elements over ranks 0..n-1
// in that order. No host in the loop; the wait is bounded by a timeout (the GPU's global timer)
// and by an abort word in pinned host memory that the rank raises when the coll breaks.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include <type_traits>

#include "acx/coll.h"
#include "kernels/peer/peer_kernels.h"

namespace {

constexpr int kThreads = 512;

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The flag protocol's two halves: a store that publishes this block's data (every thread's writes
// before the __syncthreads that precedes it) to the whole system, and a load that sees it.
__device__ __forceinline__ void flag_release(uint32_t *p, uint32_t v) {
#if __CUDA_ARCH__ >= 700
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#else
  __threadfence_system();
  *(volatile uint32_t *)p = v;
#endif
}

__device__ __forceinline__ uint32_t flag_acquire(const uint32_t *p) {
  uint32_t v;
#if __CUDA_ARCH__ >= 700
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
#else
  v = *(volatile const uint32_t *)p;
  __threadfence_system();
#endif
  return v;
}

// Element types and their accumulators: integers through the unsigned type (sums and products
// wrap), f16/bf16 in float rounded once at the end, f32/f64 in their own type.
template <typename T>
struct Int {
  using S = T;
  using A = typename std::make_unsigned<T>::type;
  __device__ static A up(S v) { return (A)v; }
  template <int OP>
  __device__ static A comb(A a, A b) {
    if constexpr (OP == ACX_REDOP_MAX) return (S)a > (S)b ? a : b;
    else if constexpr (OP == ACX_REDOP_MIN) return (S)a < (S)b ? a : b;
    else if constexpr (OP == ACX_REDOP_PROD) return (A)(a * b);
    else return (A)(a + b);
  }
  // avg: the wrapped sum as T, divided by n with C's truncation (as NCCL's integer avg).
  __device__ static S fin(A a, int n) { return (S)((S)a / (S)n); }
  __device__ static S down(A a) { return (S)a; }
};

template <typename T>
struct Flt {
  using S = T;
  using A = T;
  __device__ static A up(S v) { return v; }
  template <int OP>
  __device__ static A comb(A a, A b) {
    if constexpr (OP == ACX_REDOP_MAX) return a > b ? a : b;
    else if constexpr (OP == ACX_REDOP_MIN) return a < b ? a : b;
    else if constexpr (OP == ACX_REDOP_PROD) return a * b;
    else return a + b;
  }
  __device__ static S fin(A a, int n) { return a / (A)n; }
  __device__ static S down(A a) { return a; }
};

template <bool BF>
struct Half {
  using S = uint16_t;
  using A = float;
  __device__ static A up(S b) {
    if constexpr (BF) return __bfloat162float(__ushort_as_bfloat16(b));
    else return __half2float(__ushort_as_half(b));
  }
  template <int OP>
  __device__ static A comb(A a, A b) {
    return Flt<float>::template comb<OP>(a, b);
  }
  __device__ static S down(A a) {
    if constexpr (BF) return __bfloat16_as_ushort(__float2bfloat16_rn(a));
    else return __half_as_ushort(__float2half_rn(a));
  }
  __device__ static S fin(A a, int n) { return down(a / (float)n); }
};

// A block's elements, in 16-byte vectors where the addresses allow (V elements each) and one by
// one elsewhere. Every load of every rank's area is issued before the first combine, so a thread
// waits for one round trip over the links per vector, not one per rank.
template <typename E>
struct Vec {
  using S = typename E::S;
  static constexpr int V = 16 / sizeof(S);
};

template <typename E, int OP>
__device__ __forceinline__ void reduce_vec(const acxk_peer_args_t &a, uint64_t i, typename E::S *out) {
  using S = typename E::S;
  using A = typename E::A;
  constexpr int V = Vec<E>::V;
  uint4 r[ACXP_MAX_RANKS];
#pragma unroll
  for (int q = 0; q < ACXP_MAX_RANKS; q++)
    if (q < a.nranks) r[q] = __ldcg((const uint4 *)((const S *)a.data[q] + i));
  A acc[V];
  const S *s0 = (const S *)&r[0];
#pragma unroll
  for (int j = 0; j < V; j++) acc[j] = E::up(s0[j]);
#pragma unroll
  for (int q = 1; q < ACXP_MAX_RANKS; q++) {
    if (q < a.nranks) {
      const S *sq = (const S *)&r[q];
#pragma unroll
      for (int j = 0; j < V; j++) acc[j] = E::template comb<OP>(acc[j], E::up(sq[j]));
    }
  }
  uint4 o;
  S *so = (S *)&o;
#pragma unroll
  for (int j = 0; j < V; j++) {
    if constexpr (OP == ACX_REDOP_AVG) so[j] = E::fin(acc[j], a.nranks);
    else so[j] = E::down(acc[j]);
  }
  *(uint4 *)(out + i) = o;
}

template <typename E, int OP>
__device__ __forceinline__ void reduce_one(const acxk_peer_args_t &a, uint64_t i, typename E::S *out) {
  using S = typename E::S;
  using A = typename E::A;
  S v[ACXP_MAX_RANKS];
#pragma unroll
  for (int q = 0; q < ACXP_MAX_RANKS; q++)
    if (q < a.nranks) v[q] = __ldcg((const S *)a.data[q] + i);
  A acc = E::up(v[0]);
#pragma unroll
  for (int q = 1; q < ACXP_MAX_RANKS; q++)
    if (q < a.nranks) acc = E::template comb<OP>(acc, E::up(v[q]));
  if constexpr (OP == ACX_REDOP_AVG) out[i] = E::fin(acc, a.nranks);
  else out[i] = E::down(acc);
}

__device__ __forceinline__ bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

template <typename E, int OP>
__global__ void __launch_bounds__(kThreads) one_shot(acxk_peer_args_t a) {
  using S = typename E::S;
  constexpr int V = Vec<E>::V;
  const int b = blockIdx.x, nb = gridDim.x;
  // Every rank splits the elements alike (block b waits for the peers' block b): per block a
  // multiple of V elements, so that only the last block has a part that is not a whole vector.
  uint64_t per = (a.count + nb - 1) / nb;
  per = (per + V - 1) / V * V;
  const uint64_t lo = per * b < a.count ? per * b : a.count, hi = lo + per < a.count ? lo + per : a.count;
  __shared__ int32_t fail;

  // The vector part of [lo, hi) where every address allows it (the same test on every thread).
  bool vec = aligned16(a.send) && aligned16(a.recv);
  for (int q = 0; q < a.nranks; q++) vec = vec && aligned16(a.data[q]);
  const uint64_t vend = vec ? lo + (hi - lo) / V * V : lo;

  // 1. my elements into my data slot
  S *mine = (S *)a.data[a.rank];
  const S *in = (const S *)a.send;
  for (uint64_t i = lo + (uint64_t)threadIdx.x * V; i < vend; i += (uint64_t)kThreads * V)
    *(uint4 *)(mine + i) = *(const uint4 *)(in + i);
  for (uint64_t i = vend + threadIdx.x; i < hi; i += kThreads) mine[i] = in[i];
  if (threadIdx.x == 0) fail = 0;
  __syncthreads();

  // 2. my flag [rank][b] in every peer's area; 3. the peers' flags [p][b] in mine
  const int p = threadIdx.x;
  if (p < a.nranks && p != a.rank) {
    flag_release((uint32_t *)(a.flags[p] + ACXP_FLAG_OFF(a.rank, b)), a.seq);
    const uint32_t *f = (const uint32_t *)(a.flags[a.rank] + ACXP_FLAG_OFF(p, b));
    const uint64_t start = global_ns();
    for (unsigned spin = 0;; spin++) {
      if ((int32_t)(flag_acquire(f) - a.seq) >= 0) break;
      if ((spin & 255) == 255) {
        int32_t ab = *(volatile const int32_t *)a.abort;  // host memory: looked at now and then
        if (ab) {
          fail = ab;
          break;
        }
        if (global_ns() - start > a.timeout_ns) {
          fail = ACX_ERR_COLL_TIMEOUT;
          break;
        }
      }
      if (*(volatile int32_t *)&fail) break;
    }
  }
  __syncthreads();
  if (fail) {
    if (threadIdx.x == 0) {
      *(volatile int32_t *)a.status = fail;
      __threadfence_system();
    }
    return;
  }

  // 4. reduce over ranks 0..n-1, in that order, into the output
  S *out = (S *)a.recv;
  for (uint64_t i = lo + (uint64_t)threadIdx.x * V; i < vend; i += (uint64_t)kThreads * V) reduce_vec<E, OP>(a, i, out);
  for (uint64_t i = vend + threadIdx.x; i < hi; i += kThreads) reduce_one<E, OP>(a, i, out);
}

// Blocks: one per 8 KiB of data (one 16-byte vector per thread), at most ACXP_MAX_BLOCKS (each
// block waits for its own flags).
template <typename E>
cudaError_t launch(const acxk_peer_args_t *a, int op, cudaStream_t stream) {
  uint64_t bytes = a->count * sizeof(typename E::S);
  uint64_t nb = (bytes + kThreads * 16 - 1) / (kThreads * 16);
  if (nb > ACXP_MAX_BLOCKS) nb = ACXP_MAX_BLOCKS;
  if (nb == 0) nb = 1;
  dim3 grid((unsigned)nb), block(kThreads);
  switch (op) {
    case ACX_REDOP_SUM: one_shot<E, ACX_REDOP_SUM><<<grid, block, 0, stream>>>(*a); break;
    case ACX_REDOP_PROD: one_shot<E, ACX_REDOP_PROD><<<grid, block, 0, stream>>>(*a); break;
    case ACX_REDOP_MAX: one_shot<E, ACX_REDOP_MAX><<<grid, block, 0, stream>>>(*a); break;
    case ACX_REDOP_MIN: one_shot<E, ACX_REDOP_MIN><<<grid, block, 0, stream>>>(*a); break;
    case ACX_REDOP_AVG: one_shot<E, ACX_REDOP_AVG><<<grid, block, 0, stream>>>(*a); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace

extern "C" cudaError_t acxk_peer_launch_allreduce(const acxk_peer_args_t *a, int dtype, int op,
                                                  cudaStream_t stream) {
  switch (dtype) {
    case ACX_DTYPE_I8: return launch<Int<int8_t>>(a, op, stream);
    case ACX_DTYPE_U8: return launch<Int<uint8_t>>(a, op, stream);
    case ACX_DTYPE_I32: return launch<Int<int32_t>>(a, op, stream);
    case ACX_DTYPE_U32: return launch<Int<uint32_t>>(a, op, stream);
    case ACX_DTYPE_I64: return launch<Int<int64_t>>(a, op, stream);
    case ACX_DTYPE_U64: return launch<Int<uint64_t>>(a, op, stream);
    case ACX_DTYPE_F16: return launch<Half<false>>(a, op, stream);
    case ACX_DTYPE_BF16: return launch<Half<true>>(a, op, stream);
    case ACX_DTYPE_F32: return launch<Flt<float>>(a, op, stream);
    case ACX_DTYPE_F64: return launch<Flt<double>>(a, op, stream);
    default: return cudaErrorInvalidValue;
  }
}
