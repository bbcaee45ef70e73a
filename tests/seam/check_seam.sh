#!/usr/bin/env bash
# The process seam, checked on the sources (docs/architecture.md): libacx (the rank) and
# libacx_exec (the executor) share only runtime/base and runtime/proto.
#   rank side      runtime/actor runtime/device runtime/libs collectives   never includes kernels/,
#                  nor a CUDA, NCCL or CUDA-library header
#   executor side  kernels                                                 never includes the rank
#                  side's folders
#   shared         runtime/base runtime/proto                             includes only base/proto
# Prints every offending line; exit 1 when there is one.
#   check_seam.sh [source root]
set -u
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root" || exit 2
bad=0
report() { # file:line:text, why
  echo "seam: $1  <- $2"
  bad=1
}
includes() { # folders...: every #include "..." / <...> line of their C, CUDA and header files
  find "$@" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) -print0 2>/dev/null |
    xargs -0 -r grep -HnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]'
}
cuda_headers='[<"](cuda|cuda_runtime|cuda_runtime_api|cudaTypedefs|nccl|cublas|cublasLt|cublas_v2|cufft|curand|cusolver[A-Za-z]*|cusparse|nvrtc|cudnn|cutensor|nvtx3/[^">]*|nvToolsExt)[.]h[">]'
rank=(runtime/actor runtime/device runtime/libs collectives)
for d in "${rank[@]}"; do [ -d "$d" ] || { echo "seam: $d is missing: the map in docs/architecture.md is out of date"; bad=1; }; done
while IFS= read -r l; do
  case "$l" in
    *'"kernels/'*) report "$l" "the rank side includes an executor header" ;;
  esac
  if printf '%s\n' "$l" | grep -qE "$cuda_headers"; then report "$l" "the rank side includes a CUDA/NCCL header"; fi
done < <(includes "${rank[@]}")
while IFS= read -r l; do
  case "$l" in
    *'"runtime/actor/'* | *'"runtime/device/'* | *'"runtime/libs/'* | *'"collectives/'*)
      report "$l" "the executor side includes a rank header" ;;
  esac
done < <(includes kernels)
while IFS= read -r l; do
  case "$l" in
    *'"runtime/base/'* | *'"runtime/proto/'* | *'"acx/'* | *'"acx_build_config.h"'* | *'<'*) ;;
    *'"'*) report "$l" "a shared (base/proto) file includes something outside base/proto" ;;
  esac
done < <(includes runtime/base runtime/proto)
if [ $bad = 0 ]; then
  n=$(includes "${rank[@]}" kernels runtime/base runtime/proto | wc -l)
  echo "seam: $n include lines checked: the rank side, the executor side and the shared base/proto keep apart"
fi
exit $bad
