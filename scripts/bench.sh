#!/usr/bin/env bash
# Builds acx and runs the all-reduce benchmark on this machine: one MPI rank per local GPU, acx's
# collectives against raw NCCL side by side (--compare: actor vs nccl with the ratio column), or,
# without a GPU, 2 ranks: acx on the host device kind beside raw MPI (--compare --baseline mpi), so
# that acx's own overhead shows (not a GPU number).
# Extra arguments go to acx-allreduce-bench (e.g. -b 8 -e 8G -d bfloat16 --json r.json).
#   scripts/bench.sh [bench args...]        ACX_BUILD_DIR (default build), ACX_BENCH_NP override
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=common.sh
. "$root/scripts/common.sh"
# Only what the build and the benchmark need: the test-only packages (CUnit, Fortran, clang, Slurm)
# are not asked for, so that a compute node with cmake/ninja/MPI/hwloc on PATH needs no registry.
acx_install_deps build
acx_deps_only_exit
acx_env
build=${ACX_BUILD_DIR:-$root/build}

echo "== configure, build ($build)"
# shellcheck disable=SC2086 # ACX_CMAKE_ARGS holds several words
cmake -S "$root" -B "$build" -G Ninja ${ACX_CMAKE_ARGS:-} >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
grep "acx:" "$build.configure.log" || true
cmake --build "$build" -j "$ACX_JOBS" --target acx-allreduce-bench acx-info >"$build.build.log" 2>&1 ||
  { tail -80 "$build.build.log"; exit 1; }
bench=$build/bench/allreduce/acx-allreduce-bench
[ -x "$bench" ] || { echo "bench: $bench was not built (MPI not found? see $build.configure.log)" >&2; exit 1; }

if acx_have_gpu; then
  np=${ACX_BENCH_NP:-$(nvidia-smi -L | grep -c '^GPU')}
  mode=(--compare)
  echo "== $np GPU(s): $(nvidia-smi -L | head -1 | sed 's/ (UUID.*//')$([ "$np" -gt 1 ] && echo ", ...")"
  echo "== mpirun -np $np, acx (actor: NCCL in the executor) vs raw NCCL; NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"
else
  np=${ACX_BENCH_NP:-2}
  mode=(--compare --baseline mpi)
  echo "== no GPU here: acx on the host device kind (actor mode: collectives through MPI on host-staged"
  echo "== copies) beside raw MPI_Allreduce, $np ranks, with the ratio: acx's overhead over MPI on this"
  echo "== machine, not a GPU measurement"
fi
"$build/tools/acx-info" --topo || true
# --bind-to none: acx binds by GPU locality itself. The ACX_*/NCCL_* settings in effect (and the
# library path) must reach every rank: Open MPI's mpirun forwards what -x names, MPICH's Hydra
# forwards the whole environment by default (and knows no -x).
fwd=()
if [ "$(acx_mpi_flavor mpirun)" = openmpi ]; then
  for v in $(compgen -e | grep -E '^(ACX_|NCCL_|CUDA_VISIBLE_DEVICES$|LD_LIBRARY_PATH$)' || true); do fwd+=(-x "$v"); done
fi
set -x
mpirun -np "$np" --bind-to none "${fwd[@]}" "$bench" "${mode[@]}" "$@"
