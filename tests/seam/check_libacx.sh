#!/usr/bin/env bash
# libacx as built: it needs no CUDA, NCCL or CUDA-library shared object (directly or through
# its dependencies), and its dynamic symbol table defines only the public acx_ API; libacx_exec
# exports its entry for the inline transport.
#   check_libacx.sh <libacx.so> <libacx_exec.so>
set -u
lib=$1 exec_lib=$2
bad=0
cuda='libcudart|libcuda[.]|libnccl|libcublas|libcufft|libcurand|libcusolver|libcusparse|libnvrtc|libcudnn|libcutensor'
needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
echo "libacx NEEDED: $needed"
if ldd "$lib" | grep -E "$cuda"; then echo "check_libacx: libacx loads the CUDA stack (above)"; bad=1; fi
defined=$(nm -D --defined-only "$lib" | awk '{print $3}')
others=$(printf '%s\n' "$defined" | grep -v '^acx_' | grep -v '^$')
echo "libacx exports $(printf '%s\n' "$defined" | grep -c '^acx_') acx_ symbols"
if [ -n "$others" ]; then echo "check_libacx: libacx exports non-API symbols:"; printf '  %s\n' $others | head -20; bad=1; fi
if ! nm -D --defined-only "$exec_lib" | awk '{print $3}' | grep -qx acx_exec_entry; then
  echo "check_libacx: $exec_lib does not export acx_exec_entry"; bad=1
fi
[ $bad = 0 ] && echo "check_libacx: libacx links no CUDA library and exports only acx_"
exit $bad
