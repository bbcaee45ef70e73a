/* The driver API for the executor's CUDA code without linking libcuda (kernels/cuda/cuda_internal.h). */
#include "kernels/cuda/cuda_internal.h"

#include <stddef.h>

int acxk_driver_entry(const char *name, unsigned version, void **fn) {
  enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  *fn = NULL;
  cudaError_t err = cudaGetDriverEntryPointByVersion(name, fn, version, cudaEnableDefault, &q);
  if (err != cudaSuccess || q != cudaDriverEntryPointSuccess || !*fn) {
    (void)cudaGetLastError();
    *fn = NULL;
    return -1;
  }
  return 0;
}
