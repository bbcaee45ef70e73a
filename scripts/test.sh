#!/usr/bin/env bash
# Builds acx and runs every test this machine can run; ends with ctest's summary.
# On CI (CI=true) also runs the CPU tests under ASan+UBSan and under TSan first.
# On CI also builds with MPICH (the second MPI) and runs its mpi tests.
# Tests that need a GPU exit 77 where there is none and ctest reports them as skipped.
# ACX_DEPS_ONLY=1: check (and install) the dependencies only; ACX_MPICH=1: the MPICH run off CI.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=common.sh
. "$root/scripts/common.sh"
jobs=(build test)
[ "${CI:-}" = true ] && jobs+=(ci)
acx_install_deps "${jobs[@]}"
acx_deps_only_exit
acx_env
build=${ACX_BUILD_DIR:-$root/build}

sanitizer_run() { # name, cmake flag
  local dir="$root/build-$1"
  echo "== $1: configure, build, ctest -L unit"
  cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -D"$2"=ON \
    -DACX_WITH_CUDA=OFF -DACX_BUILD_BENCH=OFF >"$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; return 1; }
  cmake --build "$dir" -j "$ACX_JOBS" >"$dir.build.log" 2>&1 || { tail -50 "$dir.build.log"; return 1; }
  local rc=0
  (cd "$dir" && ctest -L unit --output-on-failure -j "$ACX_JOBS") >"$dir.ctest.log" 2>&1 || rc=1
  if [ $rc -ne 0 ]; then grep -v "^ *[0-9]*/[0-9]* Test.*Passed" "$dir.ctest.log" | tail -150
  else grep -E "tests passed|Skipped|Total Test time" "$dir.ctest.log"; fi
  return $rc
}

# MPICH beside Open MPI (Debian installs both; mpicc/mpirun stay Open MPI's): CPU-only, the mpi
# tests. MPICH is what Cray MPICH, MVAPICH and Intel MPI derive from.
mpich_run() {
  local dir="$root/build-mpich" cc mpiexec
  if ! cc=$(command -v mpicc.mpich) || ! mpiexec=$(command -v mpiexec.mpich); then
    echo "== mpich: mpicc.mpich/mpiexec.mpich not found: skipped"
    return 0
  fi
  echo "== mpich: configure, build, ctest -L mpi"
  local args=(-DCMAKE_BUILD_TYPE=Debug -DACX_WITH_CUDA=OFF -DACX_BUILD_FUZZERS=OFF
              -DMPI_C_COMPILER="$cc" -DMPIEXEC_EXECUTABLE="$mpiexec")
  command -v mpif90.mpich >/dev/null && args+=(-DMPI_Fortran_COMPILER="$(command -v mpif90.mpich)")
  cmake -S "$root" -B "$dir" -G Ninja "${args[@]}" >"$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; return 1; }
  grep "acx: MPI launcher" "$dir.configure.log" || true
  cmake --build "$dir" -j "$ACX_JOBS" >"$dir.build.log" 2>&1 || { tail -50 "$dir.build.log"; return 1; }
  local rc=0
  # One test at a time: MPICH 4 over UCX busy-polls in blocking calls, so two 4-rank tests with
  # their executors and standbys on a 2-core CI machine starved processes for 20-150 s (session 17:
  # 3 of 6 runs of this stage at -j2 failed on c3b0f7b and later trees, standby executors "lost"
  # without a heartbeat, a buffer read past 30 s); at -j1 it takes about as long (94-101 s against
  # 70-120 s) and passed every run (docs/status.md).
  (cd "$dir" && ctest -L '^mpi$' --output-on-failure -j 1) >"$dir.ctest.log" 2>&1 || rc=1
  if [ $rc -ne 0 ]; then grep -v "^ *[0-9]*/[0-9]* Test.*Passed" "$dir.ctest.log" | tail -150
  else grep -E "tests passed|Total Test time" "$dir.ctest.log"; fi
  return $rc
}

status=0
if [ "${CI:-}" = "true" ] || [ "${ACX_SANITIZERS:-0}" = 1 ]; then
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
  # hwloc's PCI plugin (libpciaccess) leaks ~1 KB per live topology load and is dlclose'd before
  # LeakSanitizer reports, so no suppression can name it. The sanitizer runs read live topologies
  # without it; GPU choice is tested on recorded XML topologies, which need no plugin.
  HWLOC_PLUGINS_BLACKLIST=hwloc_pci sanitizer_run asan ACX_SANITIZE_ADDRESS || status=1
  HWLOC_PLUGINS_BLACKLIST=hwloc_pci sanitizer_run tsan ACX_SANITIZE_THREAD || status=1
fi
if [ "${CI:-}" = "true" ] || [ "${ACX_MPICH:-0}" = 1 ]; then
  mpich_run || status=1
fi

echo "== main build: configure, build"
cmake -S "$root" -B "$build" -G Ninja ${ACX_CMAKE_ARGS:-} >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
grep "acx:" "$build.configure.log" || true
cmake --build "$build" -j "$ACX_JOBS" >"$build.build.log" 2>&1 || { tail -80 "$build.build.log"; exit 1; }
if acx_have_gpu; then echo "== GPUs: $(nvidia-smi -L | wc -l): gpu tests run"; else echo "== no GPU: gpu tests are skipped"; fi
[ $status -ne 0 ] && echo "== a sanitizer or the MPICH build failed (see above)"
cd "$build"
ctest --output-on-failure -j "$ACX_JOBS" ${ACX_CTEST_ARGS:-} || status=1
exit $status
