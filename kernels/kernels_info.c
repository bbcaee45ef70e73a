/* What this build of the executor side supports, for acx-info and the tests. */
#include "acx_build_config.h"
#include "kernels/kernels.h"

int acxk_have_cuda(void) { return ACX_HAVE_CUDA; }
