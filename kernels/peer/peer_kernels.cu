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

// The two-shot kernels' launch bounds: ACXK_BIG_MIN_BLOCKS (CMake's ACX_PEER_BIG_MIN_BLOCKS, 1 by
// default) blocks of kThreads must fit one SM at once, which caps their registers (65536 / (512 x
// that) per thread). With 1 the compiler takes what it likes: 96-128 registers, one block per SM,
// 16 warps (two_shot_grouped, sm_90, session 23's ptxas -v). 2 halves the registers (spilling
// where they do not fit) and lets two blocks share an SM: an experiment for issue 16's per-GPU
// bandwidth (scripts/gpu-host/pass-pergpu.sh, part occ), not a default until measured.
#if defined(ACXK_BIG_MIN_BLOCKS) && ACXK_BIG_MIN_BLOCKS > 1
#define ACXK_BIG_BOUNDS __launch_bounds__(kThreads, ACXK_BIG_MIN_BLOCKS)
#else
#define ACXK_BIG_BOUNDS __launch_bounds__(kThreads)
#endif

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The flag protocol's two halves: a store that publishes this block's data (every thread's writes
// before the __syncthreads that precedes it) to the whole system, and a load that sees it.
__device__ __forceinline__ void flag_release(uint64_t *p, uint64_t v) {
#if __CUDA_ARCH__ >= 700
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
#else
  __threadfence_system();
  *(volatile uint64_t *)p = v;
#endif
}

__device__ __forceinline__ uint64_t flag_acquire(const uint64_t *p) {
  uint64_t v;
#if __CUDA_ARCH__ >= 700
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
#else
  v = *(volatile const uint64_t *)p;
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

// ACX_COLL_PEER_TRACE (peer_kernels.h): block 0's thread 0 adds each step's time to the set's trace
// words; every other thread, and every kernel of a set without a trace, does nothing. start() at an
// operation's beginning (after pdl_enter), mark(p) at the end of step p, end() at the operation's end.
struct Trace {
  uint64_t *w;
  uint64_t t;
  int kind;
  __device__ Trace(const acxk_peer_args_t &a, int k)
      : w(a.trace && blockIdx.x == 0 && threadIdx.x == 0 ? a.trace : nullptr), t(0), kind(k) {}
  __device__ void start() {
    if (!w) return;
    t = global_ns();
    const uint64_t last = *(volatile uint64_t *)&w[ACXK_TRACE_LAST];
    if (last && t > last) {
      w[ACXK_TRACE_SUM(kind, 0)] += t - last;
      w[ACXK_TRACE_HIST(kind, 0, acxk_trace_bucket(t - last))]++;
    }
    w[ACXK_TRACE_OPS(kind)]++;
  }
  __device__ void mark(int p) {
    if (!w) return;
    const uint64_t n = global_ns();
    w[ACXK_TRACE_SUM(kind, p)] += n - t;
    w[ACXK_TRACE_HIST(kind, p, acxk_trace_bucket(n - t))]++;
    t = n;
  }
  __device__ void end(int p) {
    if (!w) return;
    mark(p);
    *(volatile uint64_t *)&w[ACXK_TRACE_LAST] = t;
  }
};

template <typename E, int OP>
__device__ __forceinline__ void reduce_vec(const acxk_peer_args_t &a, uint64_t doff, uint64_t i, typename E::S *out) {
  using S = typename E::S;
  using A = typename E::A;
  constexpr int V = Vec<E>::V;
  // Ranks' vectors loaded in batches (all of them at once, or 8 for 8-byte types, whose
  // comparisons would otherwise spill registers), combined in rank order.
  constexpr int BATCH = sizeof(S) == 8 ? 8 : ACXP_MAX_RANKS;
  A acc[V];
#pragma unroll
  for (int q0 = 0; q0 < ACXP_MAX_RANKS; q0 += BATCH) {
    if (q0 >= a.nranks) break;
    uint4 r[BATCH];
#pragma unroll
    for (int k = 0; k < BATCH; k++)
      if (q0 + k < a.nranks) r[k] = __ldcg((const uint4 *)((const S *)((const unsigned char *)a.data[q0 + k] + doff) + i));
#pragma unroll
    for (int k = 0; k < BATCH; k++) {
      if (q0 + k < a.nranks) {
        const S *sq = (const S *)&r[k];
#pragma unroll
        for (int j = 0; j < V; j++)
          acc[j] = q0 + k == 0 ? E::up(sq[j]) : E::template comb<OP>(acc[j], E::up(sq[j]));
      }
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
__device__ __forceinline__ void reduce_one(const acxk_peer_args_t &a, uint64_t doff, uint64_t i, typename E::S *out) {
  using S = typename E::S;
  using A = typename E::A;
  S v[ACXP_MAX_RANKS];
#pragma unroll
  for (int q = 0; q < ACXP_MAX_RANKS; q++)
    if (q < a.nranks) v[q] = __ldcg((const S *)((const unsigned char *)a.data[q] + doff) + i);
  A acc = E::up(v[0]);
#pragma unroll
  for (int q = 1; q < ACXP_MAX_RANKS; q++)
    if (q < a.nranks) acc = E::template comb<OP>(acc, E::up(v[q]));
  if constexpr (OP == ACX_REDOP_AVG) out[i] = E::fin(acc, a.nranks);
  else out[i] = E::down(acc);
}

__device__ __forceinline__ bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

// Programmatic dependent launch (sm_90+): wait until the previous kernel on the stream has
// finished and its memory is visible (at once when this kernel was not launched early), then let
// the next kernel be scheduled. Both are no-ops where the launch had no programmatic dependency,
// so every operation still starts after everything before it on its stream.
__device__ __forceinline__ void pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Where an operation of a batch fails (a wait gave up: fail set, read after a barrier), every
// operation of the batch fails: which one the failure hit first is in the log of none of them, the
// executor fails the set's later operations with the first failure anyway, and each operation's
// status word is the executor's only news of it.
__device__ __forceinline__ void batch_fail(const acxk_peer_batch_t &bt, int32_t fail) {
  if (fail && threadIdx.x == 0) {
    for (uint32_t k = 0; k < bt.nops; k++) *(volatile int32_t *)bt.op[k].status = fail;
    __threadfence_system();
  }
}

// The one-shot (runtime/proto/peer_ops.h) over a batch of operations of one count, one after the
// other in each block (a lone one is a batch of one): block b's elements are the same in every
// operation, and block b of operation s + 1 writes only what the peers' blocks b have read of s
// (the reuse argument holds per block), so the blocks need no barrier between operations.
// a.data[q] is slot 0 of rank q's area; operation s uses slot s % 2.
template <typename E, int OP>
__global__ void __launch_bounds__(kThreads) one_shot(acxk_peer_args_t a, acxk_peer_batch_t bt) {
  using S = typename E::S;
  constexpr int V = Vec<E>::V;
  const int b = blockIdx.x, nb = gridDim.x;
  // Every rank splits the elements alike (block b waits for the peers' block b): per block a
  // multiple of V elements, so that only the last block has a part that is not a whole vector.
  uint64_t per = (a.count + nb - 1) / nb;
  per = (per + V - 1) / V * V;
  const uint64_t lo = per * b < a.count ? per * b : a.count, hi = lo + per < a.count ? lo + per : a.count;
  __shared__ int32_t fail;
  pdl_enter();
  if (threadIdx.x == 0) fail = 0;
  __syncthreads();
  Trace tr(a, ACXK_KIND_ONE);

  for (uint32_t k = 0; k < bt.nops; k++) {
    const acxk_peer_op_t &op = bt.op[k];
    tr.start();
    const uint64_t doff = (op.seq & 1u) * a.slot_bytes;
    // The vector part of [lo, hi) where every address allows it (the same test on every thread).
    bool vec = aligned16(op.send) && aligned16(op.recv);
    for (int q = 0; q < a.nranks; q++) vec = vec && aligned16((const unsigned char *)a.data[q] + doff);
    const uint64_t vend = vec ? lo + (hi - lo) / V * V : lo;

    // 1. my elements into my data slot
    S *mine = (S *)((unsigned char *)a.data[a.rank] + doff);
    const S *in = (const S *)op.send;
    for (uint64_t i = lo + (uint64_t)threadIdx.x * V; i < vend; i += (uint64_t)kThreads * V)
      *(uint4 *)(mine + i) = *(const uint4 *)(in + i);
    for (uint64_t i = vend + threadIdx.x; i < hi; i += kThreads) mine[i] = in[i];
    __syncthreads();
    tr.mark(1);

    // 2. my flag [rank][b] in every peer's area; 3. the peers' flags [p][b] in mine
    const int p = threadIdx.x;
    if (p < a.nranks && p != a.rank) {
      flag_release((uint64_t *)(a.flags[p] + ACXP_FLAG_OFF(a.rank, b)), op.seq);
      const uint64_t *f = (const uint64_t *)(a.flags[a.rank] + ACXP_FLAG_OFF(p, b));
      const uint64_t start = global_ns();
      for (unsigned spin = 0;; spin++) {
        if ((int64_t)(flag_acquire(f) - op.seq) >= 0) break;
        if ((spin & 255) == 255) {
          int32_t ab = *(volatile const int32_t *)a.abort;  // host memory: looked at now and then
          if (ab) {
            fail = ab;
            break;
          }
          if (global_ns() - start > op.timeout_ns) {
            fail = ACX_ERR_COLL_TIMEOUT;
            break;
          }
        }
        if (*(volatile int32_t *)&fail) break;
      }
    }
    __syncthreads();
    tr.mark(2);
    if (fail) break;  // the same on every thread (read after the barrier)

    // 4. reduce over ranks 0..n-1, in that order, into the output
    S *out = (S *)op.recv;
    for (uint64_t i = lo + (uint64_t)threadIdx.x * V; i < vend; i += (uint64_t)kThreads * V)
      reduce_vec<E, OP>(a, doff, i, out);
    for (uint64_t i = vend + threadIdx.x; i < hi; i += kThreads) reduce_one<E, OP>(a, doff, i, out);
    // The next operation's copy may map elements to other threads (its own alignment).
    __syncthreads();
    tr.end(3);
  }
  batch_fail(bt, fail);
}


// The small-message variant (runtime/proto/peer_ops.h): one 16-byte line per 8 bytes of data,
// {4 data bytes, s, 4 data bytes, s}, stored whole into every peer's area and polled for in this
// rank's own. Each thread has one line: it pushes its 8 input bytes to every peer, then takes the
// line of every rank in order 0..n-1 (its own from its registers) and writes its 8 output bytes.
// One launch runs a batch of operations one after the other (the executor gathers all-reduces
// sent back to back; a lone one is a batch of one): a thread goes on to its line of the next
// operation as soon as it has its own output of this one. That is safe without a barrier between
// operations because each line of data is only ever touched by the thread of its line index: the
// executor batches only operations of one count whose buffers are the same as, or disjoint from,
// those of the operations before them in the batch (peer_exec.c), and a peer's line for operation
// s + 2 lands where this thread read operation s only after this thread's push of s + 1
// (peer_ops.h). Lines are not cleared here: the executor clears a parity's lines between two
// launches now and then.
__device__ __forceinline__ void ll_store(void *p, uint32_t d0, uint32_t d1, uint32_t f) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(d0), "r"(f), "r"(d1), "r"(f)
               : "memory");
}

__device__ __forceinline__ uint4 ll_load(const void *p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

template <typename E, int OP>
__global__ void __launch_bounds__(kThreads) one_shot_ll(acxk_peer_args_t a, acxk_peer_batch_t bt) {
  using S = typename E::S;
  using A = typename E::A;
  constexpr int V = 8 / sizeof(S);  // elements per line
  union Line {
    uint32_t w[2];
    S e[V];
    unsigned char b[8];
  };
  const uint64_t l = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x, b0 = l * 8;
  __shared__ int32_t fail;
  pdl_enter();
  if (threadIdx.x == 0) fail = 0;
  __syncthreads();
  Trace tr(a, ACXK_KIND_LL);  // line 0's timeline

  for (uint32_t k = 0; k < bt.nops; k++) {
    const acxk_peer_op_t &op = bt.op[k];
    tr.start();
    const uint64_t bytes = op.count * sizeof(S), lines = (bytes + 7) / 8;
    const bool active = l < lines;
    const int nb = !active ? 0 : bytes - b0 < 8 ? (int)(bytes - b0) : 8;  // the last line may be short
    const uint32_t f = (uint32_t)(op.seq % 0xffffffffull) + 1u;             // never 0: a cleared line
    const uint64_t ll_off = ACXP_LL_OFF(op.seq & 1u, 0, a.slot_bytes);
    // A failure of an earlier operation of the batch fails this one at once (the executor fails
    // the set's later operations with the first failure anyway).
    bool ok = active && !*(volatile int32_t *)&fail;

    // 1. my line to every peer
    Line mine;
    mine.w[0] = mine.w[1] = 0;
    if (ok) {
      const unsigned char *in = (const unsigned char *)op.send + b0;
      if (nb == 8 && ((uintptr_t)in & 7u) == 0) {
        uint2 v = *(const uint2 *)in;
        mine.w[0] = v.x;
        mine.w[1] = v.y;
      } else {
        for (int i = 0; i < nb; i++) mine.b[i] = in[i];
      }
      for (int p = 0; p < a.nranks; p++)
        if (p != a.rank)
          ll_store(a.flags[p] + ll_off + (uint64_t)a.rank * ACXP_LL_SRC_BYTES + l * 16, mine.w[0], mine.w[1], f);
    }

    tr.mark(1);
    // 2. every rank's line, in rank order, reduced as it comes
    A acc[V];
    for (int q = 0; ok && q < a.nranks; q++) {
      Line got;
      if (q == a.rank) {
        got = mine;
      } else {
        const unsigned char *src = a.flags[a.rank] + ll_off + (uint64_t)q * ACXP_LL_SRC_BYTES + l * 16;
        const uint64_t start = global_ns();
        uint4 v;
        for (unsigned spin = 0;; spin++) {
          v = ll_load(src);
          if (v.y == f && v.w == f) break;
          if ((spin & 255) == 255) {
            int32_t ab = *(volatile const int32_t *)a.abort;  // host memory: looked at now and then
            if (!ab && global_ns() - start > op.timeout_ns) ab = ACX_ERR_COLL_TIMEOUT;
            if (!ab) ab = *(volatile int32_t *)&fail;  // another thread of the block gave up
            if (ab) {
              fail = ab;
              ok = false;
              break;
            }
          }
        }
        if (!ok) break;
        got.w[0] = v.x;
        got.w[1] = v.z;
      }
#pragma unroll
      for (int j = 0; j < V; j++) acc[j] = q == 0 ? E::up(got.e[j]) : E::template comb<OP>(acc[j], E::up(got.e[j]));
    }

    // 3. my 8 bytes of the output
    if (ok) {
      Line o;
#pragma unroll
      for (int j = 0; j < V; j++) {
        if constexpr (OP == ACX_REDOP_AVG) o.e[j] = E::fin(acc[j], a.nranks);
        else o.e[j] = E::down(acc[j]);
      }
      unsigned char *out = (unsigned char *)op.recv + b0;
      if (nb == 8 && ((uintptr_t)out & 7u) == 0) *(uint2 *)out = make_uint2(o.w[0], o.w[1]);
      else
        for (int i = 0; i < nb; i++) out[i] = o.b[i];
    }
    tr.end(2);
  }
  __syncthreads();
  batch_fail(bt, fail);
}

// Push lines with groups (runtime/proto/peer_ops.h; issue 16): the thread of line l, in slice js
// (of K, by lines) of the operation, pushes its input line to its group's rank at place js (within
// the GPU) unless that is itself; the thread of a line of this rank's own slice sums its group's
// lines in place order and pushes the partial sum to every rank (across GPUs once per group); then
// every thread sums the groups' partial sums of its line in group order. One line per thread as in
// one_shot_ll, batches alike; a line of a source is written once per operation (a rank's input
// lines go to the rank at their slice's place, its partial lines are of its own slice), and the
// reuse argument holds per line (peer_ops.h).
template <typename E, int OP>
__global__ void __launch_bounds__(kThreads) one_shot_ll_grouped(acxk_peer_args_t a, acxk_peer_batch_t bt) {
  using S = typename E::S;
  using A = typename E::A;
  constexpr int V = 8 / sizeof(S);  // elements per line
  union Line {
    uint32_t w[2];
    S e[V];
    unsigned char b[8];
  };
  const uint64_t l = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x, b0 = l * 8;
  const int r = a.rank, n = a.nranks, G = a.groups, K = a.per_group, g = a.grp[r], j = a.lane[r];
  __shared__ int32_t fail;
  pdl_enter();
  if (threadIdx.x == 0) fail = 0;
  __syncthreads();
  Trace tr(a, ACXK_KIND_LL);  // line 0's timeline (with groups alike)

  for (uint32_t k = 0; k < bt.nops; k++) {
    const acxk_peer_op_t &op = bt.op[k];
    tr.start();
    const uint64_t bytes = op.count * sizeof(S), lines = (bytes + 7) / 8, pl = (lines + K - 1) / K;
    const bool active = l < lines;
    const int nb = !active ? 0 : bytes - b0 < 8 ? (int)(bytes - b0) : 8;  // the last line may be short
    const int js = active ? (int)(l / pl) : 0;                             // the line's slice
    const uint32_t f = (uint32_t)(op.seq % 0xffffffffull + 1u);
    const uint64_t ll_off = ACXP_LL_OFF(op.seq & 1u, 0, a.slot_bytes) + l * 16;
    bool ok = active && !*(volatile int32_t *)&fail;
    // Waits for rank q's line in this rank's area: false (fail set) when it gave up.
    auto await = [&](int q, Line *got) {
      const unsigned char *src = a.flags[r] + ll_off + (uint64_t)q * ACXP_LL_SRC_BYTES;
      const uint64_t start = global_ns();
      for (unsigned spin = 0;; spin++) {
        const uint4 v = ll_load(src);
        if (v.y == f && v.w == f) {
          got->w[0] = v.x;
          got->w[1] = v.z;
          return true;
        }
        if ((spin & 255) == 255) {
          int32_t ab = *(volatile const int32_t *)a.abort;  // host memory: looked at now and then
          if (!ab && global_ns() - start > op.timeout_ns) ab = ACX_ERR_COLL_TIMEOUT;
          if (!ab) ab = *(volatile int32_t *)&fail;  // another thread of the block gave up
          if (ab) {
            fail = ab;
            return false;
          }
        }
      }
    };

    // 1. my input line, to my group's rank at its slice's place (or kept)
    Line mine;
    mine.w[0] = mine.w[1] = 0;
    if (ok) {
      const unsigned char *in = (const unsigned char *)op.send + b0;
      if (nb == 8 && ((uintptr_t)in & 7u) == 0) {
        uint2 v = *(const uint2 *)in;
        mine.w[0] = v.x;
        mine.w[1] = v.y;
      } else {
        for (int i = 0; i < nb; i++) mine.b[i] = in[i];
      }
      if (js != j) ll_store(a.flags[a.at[g * K + js]] + ll_off + (uint64_t)r * ACXP_LL_SRC_BYTES, mine.w[0], mine.w[1], f);
    }

    tr.mark(1);
    // 2. a line of my slice: my group's partial sum, in place order, to every rank
    Line part;
    if (ok && js == j) {
      A acc[V];
      for (int jl = 0; ok && jl < K; jl++) {
        Line got = mine;
        if (jl != j && !await(a.at[g * K + jl], &got)) ok = false;
#pragma unroll
        for (int e = 0; e < V; e++) acc[e] = jl == 0 ? E::up(got.e[e]) : E::template comb<OP>(acc[e], E::up(got.e[e]));
      }
      if (ok) {
#pragma unroll
        for (int e = 0; e < V; e++) part.e[e] = E::down(acc[e]);
        for (int t = 1; t < n; t++) {
          const int q = (r + t) % n;
          ll_store(a.flags[q] + ll_off + (uint64_t)r * ACXP_LL_SRC_BYTES, part.w[0], part.w[1], f);
        }
      }
    }

    // 3. the groups' partial sums of my line, in group order: my output's 8 bytes
    if (ok) {
      A acc[V];
      for (int gq = 0; ok && gq < G; gq++) {
        const int q = a.at[gq * K + js];
        Line got = part;
        if (q != r && !await(q, &got)) ok = false;
#pragma unroll
        for (int e = 0; e < V; e++) acc[e] = gq == 0 ? E::up(got.e[e]) : E::template comb<OP>(acc[e], E::up(got.e[e]));
      }
      if (ok) {
        Line o;
#pragma unroll
        for (int e = 0; e < V; e++) {
          if constexpr (OP == ACX_REDOP_AVG) o.e[e] = E::fin(acc[e], n);
          else o.e[e] = E::down(acc[e]);
        }
        unsigned char *out = (unsigned char *)op.recv + b0;
        if (nb == 8 && ((uintptr_t)out & 7u) == 0) *(uint2 *)out = make_uint2(o.w[0], o.w[1]);
        else
          for (int i = 0; i < nb; i++) out[i] = o.b[i];
      }
    }
    tr.end(2);
  }
  __syncthreads();
  batch_fail(bt, fail);
}

// The large-message variant, two-shot with stores (runtime/proto/peer_ops.h): per chunk, every
// block stores its piece of every peer's part of the input into that peer's first half, flags
// (phase 0), reduces its piece of this rank's part over the input and its own first half into the
// output and every peer's second half, flags (phase 1), then copies the peers' reduced pieces from
// its own second half into the output. Nothing crosses the links as a load: on 4xH200, from 64 MiB
// to 1 GiB at 2 and 4 ranks, this ran at 0.98-1.27x NCCL's busbw (medians, 64 MiB big slots) where
// an earlier version that loaded the peers' parts from their areas ran at 0.80-1.08x
// (docs/benchmark.md, session 15).

// This thread's part of a block's flag step: this rank's phase flag [rank][b] raised in peer q's
// area, then q's [q][b] in this rank's awaited, within the timeout and the abort word (fail set
// when it gave up, or when another thread of the block did).
__device__ __forceinline__ void flag_step(const acxk_peer_args_t &a, int phase, int q, int b, uint64_t val,
                                          int32_t *fail) {
  flag_release((uint64_t *)(a.flags[q] + ACXP_BIG_FLAG_OFF(phase, a.rank, b, a.slot_bytes)), val);
  const uint64_t *f = (const uint64_t *)(a.flags[a.rank] + ACXP_BIG_FLAG_OFF(phase, q, b, a.slot_bytes));
  const uint64_t start = global_ns();
  for (unsigned spin = 0;; spin++) {
    if ((int64_t)(flag_acquire(f) - val) >= 0) break;
    if ((spin & 255) == 255) {
      int32_t ab = *(volatile const int32_t *)a.abort;  // host memory: looked at now and then
      if (!ab && global_ns() - start > a.timeout_ns) ab = ACX_ERR_COLL_TIMEOUT;
      if (!ab) ab = *(volatile int32_t *)fail;  // another thread of the block gave up
      if (ab) {
        *(volatile int32_t *)fail = ab;
        break;
      }
    }
  }
}

// This rank's phase flag [rank][b] to every peer, then the peers' [p][b] awaited (one thread per
// peer), within the timeout and the abort word; false (fail set) when it failed.
__device__ bool big_sync(const acxk_peer_args_t &a, int phase, int b, uint64_t val, int32_t *fail) {
  const int p = threadIdx.x;
  if (p < a.nranks && p != a.rank) flag_step(a, phase, p, b, val, fail);
  __syncthreads();
  return *(volatile int32_t *)fail == 0;
}

// Piece b of part q of a chunk of m elements cut in parts of pp (a multiple of V): pieces of
// ceil(pp / nb) rounded up to whole vectors, clipped to the chunk, the same on every rank. pp is
// the operation's (ACXP_BIG_PART of its first chunk, peer_ops.h), not each chunk's: block b's
// pieces of a short last chunk then lie inside its pieces of the full ones, so that it writes a big
// slot only where the peers' blocks b have read it. With each chunk's own parts, block b of a
// short third chunk could overwrite pieces of the first that other blocks of the peer had still
// to read (wrong values in test_coll_peer_big_cuda_np2 on 2xH100, session 22).
template <int V>
__device__ __forceinline__ void big_piece(uint64_t m, uint64_t pp, int q, int nb, int b, uint64_t *lo, uint64_t *hi) {
  acxp_big_piece(m, pp, q, nb, b, V, lo, hi);
}

// dst[i] = src[i] for i < len: 16-byte vectors where both allow, else element by element. dst may
// be a peer's memory (stores are posted: nothing waits for the link); each thread has U vector
// loads in flight before it stores, so that a block keeps U x 8 KiB of reads going.
template <typename S>
__device__ __forceinline__ void big_copy(S *dst, const S *src, uint64_t len, bool vec) {
  constexpr int V = 16 / sizeof(S), U = 4;
  constexpr uint64_t STEP = (uint64_t)kThreads * V;
  const uint64_t vend = vec ? len / V * V : 0;
  uint64_t i = (uint64_t)threadIdx.x * V;
  for (; i + (U - 1) * STEP < vend; i += U * STEP) {
    uint4 v[U];
#pragma unroll
    for (int k = 0; k < U; k++) v[k] = __ldcg((const uint4 *)(src + i + k * STEP));
#pragma unroll
    for (int k = 0; k < U; k++) *(uint4 *)(dst + i + k * STEP) = v[k];
  }
  for (; i < vend; i += STEP) *(uint4 *)(dst + i) = __ldcg((const uint4 *)(src + i));
  for (uint64_t j = vend + threadIdx.x; j < len; j += kThreads) dst[j] = src[j];
}

// Element i of the chunk (j: its index in part r) reduced over the input and the peers' inputs in
// this rank's first half, in rank order, into the output and the peers' second halves (at i: a
// second half is laid out as the chunk): 16-byte vectors, 4 loads in flight (the one-shot's 16
// would spill here), or one element (vec false). The vector part is reduce_vec's loop over other
// addresses with another batch; a common helper taking the sources as a callable changed the
// one-shot's generated code when tried (session 14, ptxas: other register counts, an added
// branch), so the two stay apart until a GPU pass can time the one-shot on merged code.
template <typename E, int OP>
__device__ __forceinline__ void reduce_big(const acxk_peer_args_t &a, uint64_t off, uint64_t half, uint64_t pp,
                                            const typename E::S *in, typename E::S *out, uint64_t i,
                                            uint64_t j, bool vec) {
  using S = typename E::S;
  using A = typename E::A;
  constexpr int V = Vec<E>::V, BATCH = 4;
  const int n = a.nranks, r = a.rank;
  const S *first = (const S *)(a.flags[r] + off);  // sender q's piece at first + q * pp + j
  if (!vec) {
    A acc = E::up(r == 0 ? in[i] : __ldcg(first + j));
    for (int q = 1; q < n; q++) acc = E::template comb<OP>(acc, E::up(q == r ? in[i] : __ldcg(first + q * pp + j)));
    S o;
    if constexpr (OP == ACX_REDOP_AVG) o = E::fin(acc, n);
    else o = E::down(acc);
    out[i] = o;
    for (int k = 1; k < n; k++) ((S *)(a.flags[(r + k) % n] + off) + half)[i] = o;
    return;
  }
  A acc[V];
  for (int q0 = 0; q0 < n; q0 += BATCH) {
    uint4 v[BATCH];
#pragma unroll
    for (int k = 0; k < BATCH; k++)
      if (q0 + k < n) v[k] = q0 + k == r ? *(const uint4 *)(in + i) : __ldcg((const uint4 *)(first + (q0 + k) * pp + j));
#pragma unroll
    for (int k = 0; k < BATCH; k++) {
      if (q0 + k < n) {
        const S *sq = (const S *)&v[k];
#pragma unroll
        for (int e = 0; e < V; e++)
          acc[e] = q0 + k == 0 ? E::up(sq[e]) : E::template comb<OP>(acc[e], E::up(sq[e]));
      }
    }
  }
  uint4 o;
  S *so = (S *)&o;
#pragma unroll
  for (int e = 0; e < V; e++) {
    if constexpr (OP == ACX_REDOP_AVG) so[e] = E::fin(acc[e], n);
    else so[e] = E::down(acc[e]);
  }
  *(uint4 *)(out + i) = o;
  // the next ranks first, so that the ranks spread their stores over the links
  for (int k = 1; k < n; k++) *(uint4 *)((S *)(a.flags[(r + k) % n] + off) + half + i) = o;
}

template <typename E, int OP>
__global__ void ACXK_BIG_BOUNDS two_shot(acxk_peer_args_t a) {
  using S = typename E::S;
  constexpr int V = Vec<E>::V;
  const int b = blockIdx.x, nb = gridDim.x, n = a.nranks, r = a.rank;
  const uint64_t half = a.big_bytes / 2 / sizeof(S), cpe = ACXP_BIG_CHUNK(a.big_bytes, sizeof(S), n);
  const uint64_t chunks = (a.count + cpe - 1) / cpe;
  const uint64_t pp = ACXP_BIG_OP_PART(a.count, cpe, n, V);  // every chunk's parts (big_piece)
  const bool vec = aligned16(a.send) && aligned16(a.recv);
  __shared__ int32_t fail;
  if (threadIdx.x == 0) fail = 0;
  pdl_enter();
  __syncthreads();
  Trace tr(a, ACXK_KIND_TWO);
  tr.start();
  for (uint64_t t = 0; t < chunks; t++) {
    const uint64_t val = ACXP_BIG_VAL(a.seq, t), base = t * cpe;
    const uint64_t m = a.count - base < cpe ? a.count - base : cpe;
    const uint64_t off = ACXP_BIG_SLOT_OFF(t & 1u, a.slot_bytes, a.big_bytes);
    const S *in = (const S *)a.send + base;
    S *out = (S *)a.recv + base;
    uint64_t lo, hi;
    // 1. my piece of each peer's part into its first half (the next ranks first)
    for (int k = 1; k < n; k++) {
      const int q = (r + k) % n;
      big_piece<V>(m, pp, q, nb, b, &lo, &hi);
      const uint64_t p0 = (uint64_t)q * pp < m ? (uint64_t)q * pp : m;  // big_piece's part q starts there
      big_copy<S>((S *)(a.flags[q] + off) + r * pp + (lo - p0), in + lo, hi - lo, vec);
    }
    __syncthreads();
    tr.mark(1);
    const bool ok0 = big_sync(a, 0, b, val, &fail);
    tr.mark(2);
    if (!ok0) break;
    // 2. my piece of my part reduced, into the output and the peers' second halves
    big_piece<V>(m, pp, r, nb, b, &lo, &hi);
    const uint64_t p0 = (uint64_t)r * pp < m ? (uint64_t)r * pp : m;
    const uint64_t vend = vec ? lo + (hi - lo) / V * V : lo;
    for (uint64_t i = lo + (uint64_t)threadIdx.x * V; i < vend; i += (uint64_t)kThreads * V)
      reduce_big<E, OP>(a, off, half, pp, in, out, i, i - p0, true);
    for (uint64_t i = vend + threadIdx.x; i < hi; i += kThreads)
      reduce_big<E, OP>(a, off, half, pp, in, out, i, i - p0, false);
    __syncthreads();
    tr.mark(3);
    const bool ok1 = big_sync(a, 1, b, val, &fail);
    tr.mark(4);
    if (!ok1) break;
    // 3. the peers' reduced pieces, from my second half
    for (int k = 1; k < n; k++) {
      const int q = (r + k) % n;
      big_piece<V>(m, pp, q, nb, b, &lo, &hi);
      big_copy<S>(out + lo, (const S *)(a.flags[r] + off) + half + lo, hi - lo, vec);
    }
    tr.mark(5);
  }
  __syncthreads();
  tr.end(5);
  if (fail && threadIdx.x == 0) {
    *(volatile int32_t *)a.status = fail;
    __threadfence_system();
  }
}

// The two-shot with groups (runtime/proto/peer_ops.h; issue 16: the ranks of one GPU are a group):
// every byte crosses between GPUs once each way, as with one rank per GPU. Per chunk: the pieces a
// rank's group peers stand for go to them (within the GPU), A; each rank sums its group's pieces of
// its lane's parts and stores the partial sums to their owners (across GPUs), B; each owner sums
// the groups' partial sums into its output, its own second half and its lane's second halves, C;
// then each rank copies its lane's parts to the outputs, D, and the other parts from its group's
// second halves (within the GPU) — those last steps inside the next chunk, the lane parts in the
// loop of its partial sums (pipelined, session 28: peer_ops.h). Its
// prologue and chunk set-up repeat two_shot's: merging them (a K = 1 path in one kernel) would
// change the generated code of the kernel measured at one rank per GPU, so the two stay apart
// until a GPU pass can time the merged one (as reduce_big and reduce_vec above).

// Who a flag step talks to, one per thread p: who 0, the other ranks of this rank's group; 1, the
// ranks at its place in the other groups.
__device__ __forceinline__ int grp_peer(const acxk_peer_args_t &a, int who, int p) {
  const int g = a.grp[a.rank], j = a.lane[a.rank], K = a.per_group;
  if (who == 0) return a.at[g * K + (p < j ? p : p + 1)];
  return a.at[(p < g ? p : p + 1) * K + j];
}

__device__ bool grp_sync(const acxk_peer_args_t &a, int phase, int who, int b, uint64_t val, int32_t *fail) {
  const int p = threadIdx.x, np = who == 0 ? a.per_group - 1 : a.groups - 1;
  if (p < np) flag_step(a, phase, grp_peer(a, who, p), b, val, fail);
  __syncthreads();
  return *(volatile int32_t *)fail == 0;
}

// acc := the sum (avg: the sum; OP's combine) over this rank's group, in place order, of vector i
// of the part whose lane is this rank's and whose group is gq: its own input at its place, the
// group peers' pieces from its first half (slot jl * G + gq, d: the offset in the part); loads
// four at a time.
// A group peer's element comes from its registered input where it published one (pin[place], in
// shared memory: the whole buffer, element base + i of it), else from its staged piece.
template <typename E, int OP>
__device__ __forceinline__ void group_sum_vec(const acxk_peer_args_t &a, const typename E::S *first,
                                              const typename E::S *in, uint64_t i, uint64_t d, int gq, uint64_t pp,
                                              typename E::A *acc, const typename E::S *const *pin, uint64_t base) {
  using S = typename E::S;
  constexpr int V = Vec<E>::V, BATCH = 4;
  const int K = a.per_group, G = a.groups, j = a.lane[a.rank];
  for (int j0 = 0; j0 < K; j0 += BATCH) {
    uint4 v[BATCH];
#pragma unroll
    for (int k = 0; k < BATCH; k++)
      if (j0 + k < K)
        v[k] = j0 + k == j ? *(const uint4 *)(in + i)
               : pin[j0 + k] ? __ldcg((const uint4 *)(pin[j0 + k] + base + i))
                             : __ldcg((const uint4 *)(first + (uint64_t)((j0 + k) * G + gq) * pp + d));
#pragma unroll
    for (int k = 0; k < BATCH; k++) {
      if (j0 + k < K) {
        const S *sq = (const S *)&v[k];
#pragma unroll
        for (int e = 0; e < V; e++) acc[e] = j0 + k == 0 ? E::up(sq[e]) : E::template comb<OP>(acc[e], E::up(sq[e]));
      }
    }
  }
}

template <typename E, int OP>
__device__ __forceinline__ typename E::A group_sum_one(const acxk_peer_args_t &a, const typename E::S *first,
                                                       const typename E::S *in, uint64_t i, uint64_t d, int gq,
                                                       uint64_t pp, const typename E::S *const *pin, uint64_t base) {
  using A = typename E::A;
  const int K = a.per_group, G = a.groups, j = a.lane[a.rank];
  auto at = [&](int jl) {
    return jl == j ? in[i] : pin[jl] ? __ldcg(pin[jl] + base + i) : __ldcg(first + (uint64_t)(jl * G + gq) * pp + d);
  };
  A acc = E::up(at(0));
  for (int jl = 1; jl < K; jl++) acc = E::template comb<OP>(acc, E::up(at(jl)));
  return acc;
}

// src[0, len) stored at dst[k] + at for each of the nd outputs (16-byte vectors where vec; each
// vector loaded once): the parts that came from other GPUs, into the group peers' registered outputs.
template <typename S>
__device__ __forceinline__ void big_copy_to(S *const *dst, int nd, uint64_t at, const S *src, uint64_t len,
                                            bool vec) {
  constexpr int V = 16 / sizeof(S);
  const uint64_t vend = vec ? len / V * V : 0;
  for (uint64_t i = (uint64_t)threadIdx.x * V; i < vend; i += (uint64_t)kThreads * V) {
    const uint4 v = __ldcg((const uint4 *)(src + i));
    for (int k = 0; k < nd; k++) *(uint4 *)(dst[k] + at + i) = v;
  }
  for (uint64_t i = vend + threadIdx.x; i < len; i += kThreads) {
    const S v = src[i];
    for (int k = 0; k < nd; k++) dst[k][at + i] = v;
  }
}

// The group peers' publications (peer_ops.h, "Registered buffers"), read by block b after its
// first A: pin[place] / pout[place] their registered input / output through this executor's
// table (NULL: staged / copied from the second halves; NULL at this rank's own place), pout's
// registered ones also packed into outs[0, *nouts), and this rank's own output after them at
// outs[*nouts] (step 4 copies its lane's parts into all of them at once). False (fail set) where
// a peer published a slot that this executor's table does not have (a registration out of step:
// never by design).
template <typename S>
__device__ bool read_pubs(const acxk_peer_args_t &a, int b, const S **pin, S **pout, S **outs, int *nouts,
                          int32_t *fail) {
  const int p = threadIdx.x, K = a.per_group, g = a.grp[a.rank], j = a.lane[a.rank];
  if (p < K) {
    pin[p] = nullptr;
    pout[p] = nullptr;
    if (p != j) {
      const int l = a.at[g * K + p];
      const volatile uint64_t *w = (const volatile uint64_t *)(a.flags[l] + ACXP_BIG_PUB_OFF(b, a.slot_bytes));
      const uint64_t wi = w[0], wo = w[1];
      for (int io = 0; io < 2; io++) {
        const uint64_t word = io ? wo : wi;
        const int slot = ACXP_PUB_SLOT(word);
        if (slot < 0) continue;
        const uint64_t base = slot < ACXP_REG_MAX ? __ldcg(a.regtab + l * ACXP_REG_MAX + slot) : 0;
        if (!base) {
          *(volatile int32_t *)fail = ACX_ERR_INVALID_STATE;
          continue;
        }
        const uint64_t addr = base + ACXP_PUB_OFF(word);
        if (io) pout[p] = (S *)addr;
        else pin[p] = (const S *)addr;
      }
    }
  }
  __syncthreads();
  if (p == 0) {
    int n = 0;
    for (int k = 0; k < K; k++)
      if (pout[k]) outs[n++] = pout[k];
    outs[n] = (S *)a.recv;
    *nouts = n;
  }
  __syncthreads();
  return *(volatile int32_t *)fail == 0;
}

// Raises this rank's flag to its group (phase 1, gval: D) where dgroup, and to its lane (phase 0,
// lval: B), one thread per peer, then awaits them all: the D of the chunk before and the B of this
// one in one round.
__device__ bool grp_sync_db(const acxk_peer_args_t &a, bool dgroup, int b, uint64_t gval, uint64_t lval,
                            int32_t *fail) {
  const int p = threadIdx.x, ng = dgroup ? a.per_group - 1 : 0, nl = a.groups - 1;
  if (p < ng) flag_step(a, 1, grp_peer(a, 0, p), b, gval, fail);
  else if (p < ng + nl) flag_step(a, 0, grp_peer(a, 1, p - ng), b, lval, fail);
  __syncthreads();
  return *(volatile int32_t *)fail == 0;
}

// Chunk t's parts not of this rank's lane (tb: its first element, m its elements, off its big
// slot), from the second halves of its group's ranks at their places into the output (none where
// the output is registered: the others stored theirs into it).
template <typename S, int V>
__device__ __forceinline__ void group_copies(const acxk_peer_args_t &a, uint64_t tb, uint64_t m, uint64_t off,
                                             uint64_t pp, uint64_t half, bool vec) {
  const int n = a.nranks, r = a.rank, K = a.per_group, g = a.grp[r], b = blockIdx.x, nb = gridDim.x;
  for (int k = 1; k < n && !a.pub_out; k++) {
    const int q = (r + k) % n, from = a.at[g * K + a.lane[q]];
    if (from == r) continue;
    uint64_t lo, hi;
    big_piece<V>(m, pp, q, nb, b, &lo, &hi);
    big_copy<S>((S *)a.recv + tb + lo, (const S *)(a.flags[from] + off) + half + lo, hi - lo, vec);
  }
}

template <typename E, int OP>
__global__ void ACXK_BIG_BOUNDS two_shot_grouped(acxk_peer_args_t a) {
  using S = typename E::S;
  using A = typename E::A;
  constexpr int V = Vec<E>::V;
  const int b = blockIdx.x, nb = gridDim.x, n = a.nranks, r = a.rank, G = a.groups, K = a.per_group;
  const int g = a.grp[r], j = a.lane[r];
  const uint64_t half = a.big_bytes / 2 / sizeof(S), cpe = ACXP_BIG_CHUNK(a.big_bytes, sizeof(S), n);
  const uint64_t chunks = (a.count + cpe - 1) / cpe;
  const uint64_t pp = ACXP_BIG_OP_PART(a.count, cpe, n, V);  // every chunk's parts (big_piece)
  const bool vec = aligned16(a.send) && aligned16(a.recv);
  __shared__ int32_t fail;
  __shared__ const S *pin[ACXP_MAX_RANKS];
  __shared__ S *pout[ACXP_MAX_RANKS], *outs[ACXP_MAX_RANKS];
  __shared__ int nouts;
  if (threadIdx.x == 0) fail = 0;
  pdl_enter();
  if (threadIdx.x == 0) {  // my publication, raised with my first A
    uint64_t *w = (uint64_t *)(a.flags[r] + ACXP_BIG_PUB_OFF(b, a.slot_bytes));
    w[0] = a.pub_in;
    w[1] = a.pub_out;
  }
  __syncthreads();
  Trace tr(a, ACXK_KIND_TWO_G);
  tr.start();
  for (uint64_t t = 0; t < chunks; t++) {
    const uint64_t val = ACXP_BIG_VAL(a.seq, t), base = t * cpe;
    const uint64_t m = a.count - base < cpe ? a.count - base : cpe;
    const uint64_t off = ACXP_BIG_SLOT_OFF(t & 1u, a.slot_bytes, a.big_bytes);
    // the chunk before (whole: only the last chunk is short), finished here (peer_ops.h)
    const uint64_t poff = ACXP_BIG_SLOT_OFF((t + 1) & 1u, a.slot_bytes, a.big_bytes), pbase = base - cpe;
    const S *in = (const S *)a.send + base;
    S *out = (S *)a.recv + base;
    const S *first = (const S *)(a.flags[r] + off);
    uint64_t lo, hi;
    // 1. my pieces of the parts my group's peers stand for, into their first halves (none where
    // my input is registered: they read it where it is)
    for (int k = 1; k < K && !a.pub_in; k++) {
      const int jl = (j + k) % K, l = a.at[g * K + jl];
      for (int gq = 0; gq < G; gq++) {
        const int q = a.at[gq * K + jl];
        big_piece<V>(m, pp, q, nb, b, &lo, &hi);
        const uint64_t p0 = (uint64_t)q * pp < m ? (uint64_t)q * pp : m;
        big_copy<S>((S *)(a.flags[l] + off) + (uint64_t)(j * G + gq) * pp + (lo - p0), in + lo, hi - lo, vec);
      }
    }
    __syncthreads();
    tr.mark(1);
    if (!grp_sync(a, 0, 0, b, val, &fail)) break;
    if (t == 0 && !read_pubs<S>(a, b, pin, pout, outs, &nouts, &fail)) break;
    tr.mark(2);
    // 2. my group's partial sums of my lane's parts, into their owners' first halves (the next
    // groups first, so that the groups spread their stores over the links), and in the same loop
    // the chunk before's lane parts from my second half into my output and my group's registered
    // outputs: the copies within the GPU ride along with the stores across the link (session 28;
    // they had a step of their own, with the link idle)
    for (int k = 1; k < G; k++) {
      const int gq = (g + k) % G, q = a.at[gq * K + j];
      big_piece<V>(m, pp, q, nb, b, &lo, &hi);
      const uint64_t p0 = (uint64_t)q * pp < m ? (uint64_t)q * pp : m;
      uint64_t plo = 0, phi = 0;
      if (t) big_piece<V>(cpe, pp, q, nb, b, &plo, &phi);
      S *to = (S *)(a.flags[q] + off) + (uint64_t)(j * G + g) * pp;
      const S *lane = (const S *)(a.flags[r] + poff) + half;
      const uint64_t nv = vec ? (hi - lo) / V * V : 0, npv = vec ? (phi - plo) / V * V : 0;
      const uint64_t nmax = nv > npv ? nv : npv;
      for (uint64_t d = (uint64_t)threadIdx.x * V; d < nmax; d += (uint64_t)kThreads * V) {
        uint4 c = make_uint4(0, 0, 0, 0);
        if (d < npv) c = __ldcg((const uint4 *)(lane + plo + d));
        if (d < nv) {
          A acc[V];
          group_sum_vec<E, OP>(a, first, in, lo + d, lo + d - p0, gq, pp, acc, pin, base);
          uint4 o;
          S *so = (S *)&o;
#pragma unroll
          for (int e = 0; e < V; e++) so[e] = E::down(acc[e]);
          *(uint4 *)(to + (lo + d - p0)) = o;
        }
        if (d < npv)
          for (int x = 0; x <= nouts; x++) *(uint4 *)(outs[x] + pbase + plo + d) = c;
      }
      for (uint64_t i = lo + nv + threadIdx.x; i < hi; i += kThreads)
        to[i - p0] = E::down(group_sum_one<E, OP>(a, first, in, i, i - p0, gq, pp, pin, base));
      for (uint64_t i = plo + npv + threadIdx.x; i < phi; i += kThreads) {
        const S v = lane[i];
        for (int x = 0; x <= nouts; x++) outs[x][pbase + i] = v;
      }
    }
    __syncthreads();
    tr.mark(3);
    // D of the chunk before (its lane parts are in my second half and my group's registered
    // outputs), B of this one
    if (!grp_sync_db(a, t > 0, b, val - 1, val, &fail)) break;
    tr.mark(4);
    // 3. the chunk before's other parts from my group's second halves
    if (t) group_copies<S, V>(a, pbase, cpe, poff, pp, half, vec);
    tr.mark(5);
    // 4. my part over the groups in order (each group's sum rounded to the type alike), into the
    // output, my lane's second halves, the registered outputs of my group and, where a group peer
    // copies from it, my own second half
    const bool own_half = nouts < K - 1;
    big_piece<V>(m, pp, r, nb, b, &lo, &hi);
    const uint64_t p0 = (uint64_t)r * pp < m ? (uint64_t)r * pp : m;
    const uint64_t vend = vec ? lo + (hi - lo) / V * V : lo;
    for (uint64_t i = lo + (uint64_t)threadIdx.x * V; i < vend; i += (uint64_t)kThreads * V) {
      A acc[V], part[V];
      for (int gq = 0; gq < G; gq++) {
        if (gq == g) {
          group_sum_vec<E, OP>(a, first, in, i, i - p0, g, pp, part, pin, base);
#pragma unroll
          for (int e = 0; e < V; e++) part[e] = E::up(E::down(part[e]));
        } else {
          const uint4 v = __ldcg((const uint4 *)(first + (uint64_t)(j * G + gq) * pp + (i - p0)));
          const S *sv = (const S *)&v;
#pragma unroll
          for (int e = 0; e < V; e++) part[e] = E::up(sv[e]);
        }
#pragma unroll
        for (int e = 0; e < V; e++) acc[e] = gq == 0 ? part[e] : E::template comb<OP>(acc[e], part[e]);
      }
      uint4 o;
      S *so = (S *)&o;
#pragma unroll
      for (int e = 0; e < V; e++) {
        if constexpr (OP == ACX_REDOP_AVG) so[e] = E::fin(acc[e], n);
        else so[e] = E::down(acc[e]);
      }
      *(uint4 *)(out + i) = o;
      if (own_half) *(uint4 *)((S *)(a.flags[r] + off) + half + i) = o;
      for (int k = 1; k < G; k++) *(uint4 *)((S *)(a.flags[a.at[((g + k) % G) * K + j]] + off) + half + i) = o;
      for (int k = 0; k < nouts; k++) *(uint4 *)(outs[k] + base + i) = o;
    }
    for (uint64_t i = vend + threadIdx.x; i < hi; i += kThreads) {
      A acc = A();
      for (int gq = 0; gq < G; gq++) {
        const A part = gq == g ? E::up(E::down(group_sum_one<E, OP>(a, first, in, i, i - p0, g, pp, pin, base)))
                               : E::up(__ldcg(first + (uint64_t)(j * G + gq) * pp + (i - p0)));
        acc = gq == 0 ? part : E::template comb<OP>(acc, part);
      }
      S o;
      if constexpr (OP == ACX_REDOP_AVG) o = E::fin(acc, n);
      else o = E::down(acc);
      out[i] = o;
      if (own_half) ((S *)(a.flags[r] + off) + half)[i] = o;
      for (int k = 1; k < G; k++) ((S *)(a.flags[a.at[((g + k) % G) * K + j]] + off) + half)[i] = o;
      for (int k = 0; k < nouts; k++) outs[k][base + i] = o;
    }
    __syncthreads();
    tr.mark(6);
    // C: my lane's parts of this chunk are in my second half (they go on to the outputs with the
    // next chunk's partial sums, or below after the last chunk)
    if (!grp_sync(a, 1, 1, b, val, &fail)) break;
    tr.mark(7);
  }
  // The last chunk's lane parts into my output and my group's registered outputs, its D, and its
  // other parts from my group's second halves.
  if (chunks && *(volatile int32_t *)&fail == 0) {
    const uint64_t t = chunks - 1, base = t * cpe, m = a.count - base;
    const uint64_t off = ACXP_BIG_SLOT_OFF(t & 1u, a.slot_bytes, a.big_bytes);
    for (int k = 1; k < G; k++) {
      uint64_t lo, hi;
      big_piece<V>(m, pp, a.at[((g + k) % G) * K + j], nb, b, &lo, &hi);
      big_copy_to<S>(outs, nouts + 1, base + lo, (const S *)(a.flags[r] + off) + half + lo, hi - lo, vec);
    }
    __syncthreads();
    tr.mark(8);
    if (grp_sync(a, 1, 0, b, ACXP_BIG_VAL(a.seq, t), &fail)) group_copies<S, V>(a, base, m, off, pp, half, vec);
  }
  __syncthreads();
  tr.end(9);
  if (fail && threadIdx.x == 0) {
    *(volatile int32_t *)a.status = fail;
    __threadfence_system();
  }
}

// One 16-byte vector combined over ns sources in order, load(k) giving source k's (loads four at
// a time), rounded to the type: with fin, avg divided by n (a result), else not (a partial sum).
// The older kernels' loops of this shape stay as they were timed (reduce_big's note).
template <typename E, int OP, typename L>
__device__ __forceinline__ uint4 comb_vec(int ns, bool fin, int n, L load) {
  using S = typename E::S;
  using A = typename E::A;
  constexpr int V = Vec<E>::V;
  A acc[V];
  for (int k0 = 0; k0 < ns; k0 += 4) {
    uint4 v[4];
#pragma unroll
    for (int k = 0; k < 4; k++)
      if (k0 + k < ns) v[k] = load(k0 + k);
#pragma unroll
    for (int k = 0; k < 4; k++) {
      if (k0 + k < ns) {
        const S *sq = (const S *)&v[k];
#pragma unroll
        for (int e = 0; e < V; e++) acc[e] = k0 + k == 0 ? E::up(sq[e]) : E::template comb<OP>(acc[e], E::up(sq[e]));
      }
    }
  }
  uint4 o;
  S *so = (S *)&o;
#pragma unroll
  for (int e = 0; e < V; e++) {
    if constexpr (OP == ACX_REDOP_AVG) so[e] = fin ? E::fin(acc[e], n) : E::down(acc[e]);
    else so[e] = E::down(acc[e]);
  }
  return o;
}

// The one-shot with groups (runtime/proto/peer_ops.h; issue 16): the ranks of a GPU sum their
// slices there and store each slice's partial sum once per GPU, into the area of the rank at the
// same place in every group, so each GPU's link carries G - 1 slices of stores per rank (the
// whole count once per other GPU) instead of K (G - 1) whole slots of loads; every rank then
// reduces each slice's partial sums from the area of its group's rank at that slice's place.
// Block b takes piece b of every slice (big_piece over K slices), so that its group's and every
// rank's blocks b are the ones it waits for.
template <typename E, int OP>
__global__ void __launch_bounds__(kThreads) one_shot_grouped(acxk_peer_args_t a, acxk_peer_batch_t bt) {
  using S = typename E::S;
  using A = typename E::A;
  constexpr int V = Vec<E>::V;
  const int b = blockIdx.x, nb = gridDim.x, n = a.nranks, r = a.rank, G = a.groups, K = a.per_group;
  const int g = a.grp[r], j = a.lane[r];
  const uint64_t ps = ACXP_BIG_PART(a.count, K, V);
  __shared__ int32_t fail;
  if (threadIdx.x == 0) fail = 0;
  pdl_enter();
  __syncthreads();
  // A batch of operations of one count, one after the other in each block, as the one-shot's
  // (block b's pieces are the same in every operation: the reuse argument of peer_ops.h holds per
  // block). a.data[q] is slot 0 of rank q's area; operation s uses slot s % 2.
  Trace tr(a, ACXK_KIND_ONE_G);
  for (uint32_t bk = 0; bk < bt.nops && !fail; bk++) {
    const acxk_peer_op_t &op = bt.op[bk];
    tr.start();
    const uint64_t val = ACXP_BIG_VAL(op.seq, 0), par = op.seq & 1u, doff = par * a.slot_bytes;
    const bool vec = aligned16(op.send) && aligned16(op.recv);
    const S *in = (const S *)op.send;
    S *out = (S *)op.recv;
    auto data = [&](int q) { return (const S *)((const unsigned char *)a.data[q] + doff); };
    uint64_t lo, hi;
    // 1. my piece of every slice into my data slot
    for (int jl = 0; jl < K; jl++) {
      big_piece<V>(a.count, ps, jl, nb, b, &lo, &hi);
      big_copy<S>((S *)data(r) + lo, in + lo, hi - lo, vec);
    }
    __syncthreads();
    tr.mark(1);
    // 2. A: my group's pieces are in their slots
    if (grp_sync(a, 0, 0, b, val, &fail)) {
      tr.mark(2);
      // 3. my group's partial sum of my piece of slice j, into the partial region [s % 2][g] of the
      // rank at place j of every group (from the next group on, so that the groups start on
      // different GPUs)
      big_piece<V>(a.count, ps, j, nb, b, &lo, &hi);
      const uint64_t goff = ACXP_GOS_OFF(par, g, G, a.slot_bytes, a.big_bytes);
      const uint64_t vend = vec ? lo + (hi - lo) / V * V : lo;
      for (uint64_t i = lo + (uint64_t)threadIdx.x * V; i < vend; i += (uint64_t)kThreads * V) {
        const uint4 o = comb_vec<E, OP>(K, false, n, [&](int jl) {
          return jl == j ? *(const uint4 *)(in + i) : __ldcg((const uint4 *)(data(a.at[g * K + jl]) + i));
        });
        for (int k = 1; k <= G; k++) *(uint4 *)((S *)(a.flags[a.at[(g + k) % G * K + j]] + goff) + i) = o;
      }
      for (uint64_t i = vend + threadIdx.x; i < hi; i += kThreads) {
        A acc = E::up(j == 0 ? in[i] : __ldcg(data(a.at[g * K]) + i));
        for (int jl = 1; jl < K; jl++)
          acc = E::template comb<OP>(acc, E::up(jl == j ? in[i] : __ldcg(data(a.at[g * K + jl]) + i)));
        const S o = E::down(acc);
        for (int k = 1; k <= G; k++) ((S *)(a.flags[a.at[(g + k) % G * K + j]] + goff))[i] = o;
      }
      __syncthreads();
      tr.mark(3);
      // 4. B: every rank's partial sums are in place; 5. my pieces over the groups in order, slice
      // jl's from the area of my group's rank at place jl (on my GPU)
      if (big_sync(a, 1, b, val, &fail)) {
        tr.mark(4);
        const uint64_t gstride = a.slot_bytes / sizeof(S);
        for (int jl = 0; jl < K; jl++) {
          const S *part = (const S *)(a.flags[a.at[g * K + jl]] + ACXP_GOS_OFF(par, 0, G, a.slot_bytes, a.big_bytes));
          big_piece<V>(a.count, ps, jl, nb, b, &lo, &hi);
          const uint64_t ve = vec ? lo + (hi - lo) / V * V : lo;
          for (uint64_t i = lo + (uint64_t)threadIdx.x * V; i < ve; i += (uint64_t)kThreads * V) {
            const uint4 o = comb_vec<E, OP>(G, true, n, [&](int gq) {
              return __ldcg((const uint4 *)(part + (uint64_t)gq * gstride + i));
            });
            *(uint4 *)(out + i) = o;
          }
          for (uint64_t i = ve + threadIdx.x; i < hi; i += kThreads) {
            A acc = E::up(__ldcg(part + i));
            for (int gq = 1; gq < G; gq++) acc = E::template comb<OP>(acc, E::up(__ldcg(part + (uint64_t)gq * gstride + i)));
            if constexpr (OP == ACX_REDOP_AVG) out[i] = E::fin(acc, n);
            else out[i] = E::down(acc);
          }
        }
      }
    }
    __syncthreads();  // fail is read by every thread after it; the next copy maps its own elements
    tr.end(5);
  }
  batch_fail(bt, fail);
}

// Calls launch(std::integral_constant<int, OP>) for the op: the kernels are templates on it.

template <typename L>
cudaError_t by_op(int op, L launch) {
  switch (op) {
    case ACX_REDOP_SUM: launch(std::integral_constant<int, ACX_REDOP_SUM>{}); break;
    case ACX_REDOP_PROD: launch(std::integral_constant<int, ACX_REDOP_PROD>{}); break;
    case ACX_REDOP_MAX: launch(std::integral_constant<int, ACX_REDOP_MAX>{}); break;
    case ACX_REDOP_MIN: launch(std::integral_constant<int, ACX_REDOP_MIN>{}); break;
    case ACX_REDOP_AVG: launch(std::integral_constant<int, ACX_REDOP_AVG>{}); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

// One kernel launch, with the programmatic-serialization attribute when a->pdl.
template <typename K, typename... More>
cudaError_t launch_k(K kernel, dim3 grid, dim3 block, cudaStream_t stream, const acxk_peer_args_t *a, More... more) {
  if (!a->pdl) {
    kernel<<<grid, block, 0, stream>>>(*a, more...);
    return cudaGetLastError();
  }
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.stream = stream;
  cfg.attrs = at;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, *a, more...);
}

template <typename E>
cudaError_t launch(const acxk_peer_args_t *a, const acxk_peer_batch_t *bt, int op, cudaStream_t stream) {
  cudaError_t err = cudaSuccess;
  uint64_t bytes = a->count * sizeof(typename E::S);
  if (a->big) {
    // The two-shot: every block takes part in every chunk's flags, so the grid is the same on
    // every rank whatever the size.
    dim3 grid((unsigned)a->big_blocks), block(kThreads);
    cudaError_t r = a->per_group > 1
        ? by_op(op, [&](auto o) { err = launch_k(two_shot_grouped<E, decltype(o)::value>, grid, block, stream, a); })
        : by_op(op, [&](auto o) { err = launch_k(two_shot<E, decltype(o)::value>, grid, block, stream, a); });
    return err != cudaSuccess ? err : r;
  }
  if (!bt || bt->nops < 1 || bt->nops > ACXK_PEER_BATCH_MAX) return cudaErrorInvalidValue;
  if (a->ll) {
    // The small-message kernel: one thread per 8-byte line of the batch's largest operation,
    // whole warps, at most kThreads a block.
    uint64_t lines = 0;
    for (uint32_t k = 0; k < bt->nops; k++) {
      uint64_t n = (bt->op[k].count * sizeof(typename E::S) + 7) / 8;
      if (n > lines) lines = n;
    }
    unsigned threads = lines >= kThreads ? kThreads : (unsigned)((lines + 31) / 32 * 32);
    dim3 grid((unsigned)((lines + threads - 1) / threads)), block(threads);
    cudaError_t r = a->ll_groups
        ? by_op(op, [&](auto o) { err = launch_k(one_shot_ll_grouped<E, decltype(o)::value>, grid, block, stream, a, *bt); })
        : by_op(op, [&](auto o) { err = launch_k(one_shot_ll<E, decltype(o)::value>, grid, block, stream, a, *bt); });
    return err != cudaSuccess ? err : r;
  }
  // The one-shot: one block per 8 KiB of data (one 16-byte vector per thread), at most
  // ACXP_MAX_BLOCKS (each block waits for its own flags); with groups alike. Every operation of
  // the batch has a->count elements.
  uint64_t nb = (bytes + kThreads * 16 - 1) / (kThreads * 16);
  if (nb > ACXP_MAX_BLOCKS) nb = ACXP_MAX_BLOCKS;
  if (nb == 0) nb = 1;
  dim3 grid((unsigned)nb), block(kThreads);
  cudaError_t r = a->small_groups
      ? by_op(op, [&](auto o) { err = launch_k(one_shot_grouped<E, decltype(o)::value>, grid, block, stream, a, *bt); })
      : by_op(op, [&](auto o) { err = launch_k(one_shot<E, decltype(o)::value>, grid, block, stream, a, *bt); });
  return err != cudaSuccess ? err : r;
}

}  // namespace

extern "C" cudaError_t acxk_peer_launch_allreduce(const acxk_peer_args_t *a, const acxk_peer_batch_t *bt,
                                                  int dtype, int op, cudaStream_t stream) {
  switch (dtype) {
    case ACX_DTYPE_I8: return launch<Int<int8_t>>(a, bt, op, stream);
    case ACX_DTYPE_U8: return launch<Int<uint8_t>>(a, bt, op, stream);
    case ACX_DTYPE_I32: return launch<Int<int32_t>>(a, bt, op, stream);
    case ACX_DTYPE_U32: return launch<Int<uint32_t>>(a, bt, op, stream);
    case ACX_DTYPE_I64: return launch<Int<int64_t>>(a, bt, op, stream);
    case ACX_DTYPE_U64: return launch<Int<uint64_t>>(a, bt, op, stream);
    case ACX_DTYPE_F16: return launch<Half<false>>(a, bt, op, stream);
    case ACX_DTYPE_BF16: return launch<Half<true>>(a, bt, op, stream);
    case ACX_DTYPE_F32: return launch<Flt<float>>(a, bt, op, stream);
    case ACX_DTYPE_F64: return launch<Flt<double>>(a, bt, op, stream);
    default: return cudaErrorInvalidValue;
  }
}
