// The raw-CUDA peer of acx-launch-bench: the same empty kernel the executor launches, from the
// benchmark's own code, so the baseline goes through nothing of acx.
#include <cuda_runtime_api.h>

namespace {
__global__ void bench_empty_kernel() {}
}  // namespace

extern "C" cudaError_t bench_launch_empty(cudaStream_t stream) {
  bench_empty_kernel<<<1, 1, 0, stream>>>();
  return cudaGetLastError();
}
