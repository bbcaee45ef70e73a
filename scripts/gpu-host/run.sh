#!/usr/bin/env bash
# Runs on the GPU test host (no package registry there): unpacks the carried Debian packages
# (CUnit, lstopo) from .gpu/debs, builds acx in build-gpu and runs what is asked:
#   scripts/gpu-host/run.sh [probe] [test[=ctest -L regex]] [bench-launch] [bench-allreduce] ...
# Logs go to $OUT (or ./gpu-out) so they come back from the host.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$root/gpu-out}
# ACX_GPU_CLEAN=1: build the committed tree only (HEAD), leaving work in progress behind.
# The tree comes as .gpu/src.tar, made beforehand with `git archive HEAD -o .gpu/src.tar`.
if [ "${ACX_GPU_CLEAN:-0}" = 1 ] && [ -f "$root/.gpu/src.tar" ] && [ -z "${ACX_GPU_CLEAN_DONE:-}" ]; then
  rm -rf /tmp/acx-clean && mkdir -p /tmp/acx-clean && tar -xf "$root/.gpu/src.tar" -C /tmp/acx-clean
  cp -r "$root/.gpu" /tmp/acx-clean/ 2>/dev/null
  ACX_GPU_CLEAN_DONE=1 OUT="$out" exec /tmp/acx-clean/scripts/gpu-host/run.sh "$@"
fi
mkdir -p "$out"
if [ -d "$root/.gpu/debs" ]; then for f in "$root"/.gpu/debs/*.deb; do dpkg -x "$f" / ; done; ldconfig; fi
export PATH="/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
build=$root/build-gpu
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)

configure_build() {
  [ -f "$build/build.ninja" ] && cmake --build "$build" -j 16 >"$out/build.log" 2>&1 && return 0
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$out/configure.log" 2>&1 || { tail -40 "$out/configure.log"; return 1; }
  grep "acx:" "$out/configure.log"
  cmake --build "$build" -j 16 >"$out/build.log" 2>&1 || { grep -E "error|Error" "$out/build.log" | head -40; return 1; }
}

for step in "$@"; do
  case "$step" in
    probe)
      { uname -a; nvidia-smi -L; nvidia-smi topo -m; gcc --version | head -1; cmake --version | head -1;
        command -v ninja pkg-config mpicc mpirun compute-sanitizer gnuplot lstopo; mpirun --version | head -1;
        ls /usr/include/hwloc.h /usr/include/nccl.h /usr/local/cuda/include/cudnn.h 2>&1;
        ls /usr/lib/x86_64-linux-gnu/ | grep -E "hwloc|nccl|cunit|pmix" ; nproc; } 2>&1 | tee "$out/probe.log" ;;
    build) configure_build || exit 1 ;;
    test*)
      configure_build || exit 1
      regex=${step#test}; regex=${regex#=}; regex=${regex:-gpu}
      (cd "$build" && ctest -L "$regex" --output-on-failure -j 4 --timeout 300) 2>&1 | tee "$out/ctest-$(echo "$regex" | tr -c 'a-zA-Z0-9' _).log" | tail -60 ;;
    memcheck)
      configure_build || exit 1
      (cd "$build" && for t in $(ctest -L gpu -N | awk '/Test *#/{print $3}'); do
         exe=$(find . -name "$t" -type f -perm -u+x | head -1); [ -n "$exe" ] || continue
         echo "== compute-sanitizer memcheck $t"; ACX_MEMCHECK=1 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 "$exe" 2>&1 | tail -8; echo "rc=$?"; done) 2>&1 | tee "$out/memcheck.log" | tail -60 ;;
    bench-launch)
      configure_build || exit 1
      "$build/bench/launch/acx-launch-bench" 2>&1 | tee "$out/bench-launch.log" ;;
    bench-allreduce*)
      configure_build || exit 1
      args=${step#bench-allreduce}; args=${args#=}
      mpirun -np "$ngpu" --bind-to none -x NCCL_NVLS_ENABLE "$build/bench/allreduce/acx-allreduce-bench" $args 2>&1 | tee -a "$out/bench-allreduce.log" ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
done
