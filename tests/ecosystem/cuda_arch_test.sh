#!/usr/bin/env bash
# The default CUDA architectures (cmake/acxCudaArch.cmake, issue 15 item 2) against a fake nvcc
# (CUDA 13's architecture list) and a fake nvidia-smi (the GPUs of a machine): the GPUs present,
# else every major architecture, and a user's value always wins. Runs the module in cmake -P mode:
# no toolkit or GPU needed.
#   cuda_arch_test.sh <source dir>
set -uo pipefail
src=$1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/acx-arch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "cuda_arch_test: FAIL: $*" >&2; exit 1; }

cat >"$tmp/nvcc" <<'SH'
#!/bin/sh
[ "$1" = --list-gpu-arch ] || exit 1
printf 'compute_%s\n' 75 80 86 87 88 89 90 100 110 103 120 121
SH
cat >"$tmp/probe.cmake" <<EOF2
cmake_minimum_required(VERSION 3.25)
list(APPEND CMAKE_MODULE_PATH "$src/cmake")
include(acxCudaArch)
set(CMAKE_CUDA_COMPILER "$tmp/nvcc")
if(DEFINED USER_ARCHS)
  set(CMAKE_CUDA_ARCHITECTURES "\${USER_ARCHS}")
endif()
acx_cuda_architectures()
message("archs=[\${CMAKE_CUDA_ARCHITECTURES}] source=[\${ACX_CUDA_ARCH_SOURCE}]")
EOF2
chmod +x "$tmp/nvcc"

# check <GPU compute capabilities, one per line, or FAIL> <expected archs> <source regex> [cmake -D...]
check() {
  local caps=$1 want=$2 src_re=$3 out
  shift 3
  if [ "$caps" = FAIL ]; then
    printf '#!/bin/sh\necho "NVIDIA-SMI has failed" >&2\nexit 9\n' >"$tmp/nvidia-smi"
  else
    printf '#!/bin/sh\nprintf "%s\\n"\n' "$caps" >"$tmp/nvidia-smi"
  fi
  chmod +x "$tmp/nvidia-smi"
  out=$(PATH="$tmp:$PATH" cmake "$@" -P "$tmp/probe.cmake" 2>&1) || fail "cmake -P failed: $out"
  echo "  gpus '${caps//$'\n'/,}' $*: $(grep '^archs=' <<<"$out")"
  grep -qF "archs=[$want]" <<<"$out" || fail "gpus '$caps': expected [$want], got: $out"
  grep -qE "source=\[$src_re" <<<"$out" || fail "gpus '$caps': source not /$src_re/: $out"
}

unset CUDAARCHS
check FAIL "75-real;80-real;90-real;100-real;110-real;120" "no GPU that it supports"
check "9.0" "90" "the GPUs of this machine: compute capability 9.0"
check $'9.0\n9.0\n8.0' "80-real;90" "the GPUs of this machine: compute capability 9.0, 8.0"
# A GPU whose exact architecture nvcc lacks runs the code of the same major's lower minor.
check "8.5" "80" "the GPUs of this machine"
# CUDA 13 dropped Volta: a 7.0 GPU alone leaves the default at every architecture, with a warning.
check "7.0" "75-real;80-real;90-real;100-real;110-real;120" "no GPU that it supports"
check "9.0" "80-real" "set by the user" -DUSER_ARCHS=80-real
check "9.0" "native" "set by the user" -DUSER_ARCHS=native
out=$(CUDAARCHS=86 PATH="$tmp:$PATH" cmake -P "$tmp/probe.cmake" 2>&1)
grep -qF "archs=[] source=[from the CUDAARCHS environment variable]" <<<"$out" || fail "CUDAARCHS not left to CMake: $out"
echo "cuda_arch_test: PASS"
