#!/usr/bin/env bash
# Builds acx and runs the all-reduce benchmark on this machine: one MPI rank per local GPU, acx's
# collectives against raw NCCL side by side (--compare: actor vs nccl with the ratio column), or,
# without a GPU, 2 ranks: acx on the host device kind beside raw MPI (--compare --baseline mpi), so
# that acx's own overhead shows (not a GPU number).
# Extra arguments go to acx-allreduce-bench (e.g. -b 8 -e 8G -d bfloat16 --json r.json).
#   scripts/bench.sh [bench args...]        ACX_BUILD_DIR (default build), ACX_BENCH_NP override
# ACX_BENCH_RANKS_PER_GPU=k (k > 1): k ranks per GPU through acx beside raw NCCL on one rank per GPU
# (--compare --per-gpu: the ratio is the busbw per GPU), under MPS: a private MPS control daemon is
# started for the run (and quit after) where none answers; without a GPU, 2 k ranks on the host
# kind in groups of k (ACX_COLL_HIER=1 ACX_COLL_HIER_GROUP=k) beside MPI on one rank per group. On
# GPUs acx's buffers are registered with the coll (--register, acx_coll_register: the ranks of a GPU
# read and store each other's buffers; ACX_BENCH_REGISTER=0 leaves them unregistered, staged).
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
cmake --build "$build" -j "$ACX_JOBS" --target acx-allreduce-bench acx-info acx-executor >"$build.build.log" 2>&1 ||
  { tail -80 "$build.build.log"; exit 1; }
bench=$build/bench/allreduce/acx-allreduce-bench
[ -x "$bench" ] || { echo "bench: $bench was not built (MPI not found? see $build.configure.log)" >&2; exit 1; }

per=${ACX_BENCH_RANKS_PER_GPU:-1}
case $per in '' | *[!0-9]* | 0) echo "bench: ACX_BENCH_RANKS_PER_GPU='$per': a whole number >= 1" >&2; exit 2 ;; esac
extra=()
if acx_have_gpu; then
  ngpu=$(nvidia-smi -L | grep -c '^GPU')
  np=${ACX_BENCH_NP:-$((ngpu * per))}
  mode=(--compare)
  echo "== $ngpu GPU(s): $(nvidia-smi -L | head -1 | sed 's/ (UUID.*//')$([ "$ngpu" -gt 1 ] && echo ", ...")"
  if [ "$per" -gt 1 ]; then
    mode+=(--per-gpu)
    reg=${ACX_BENCH_REGISTER:-1}
    [ "$reg" = 0 ] || mode+=(--register)
    echo "== mpirun -np $np: $per ranks per GPU through acx beside raw NCCL on one rank per GPU (ratio per GPU)$([ "$reg" = 0 ] && echo ", buffers unregistered" || echo ", buffers registered")"
    mps=0
    acx_mps_start bench || mps=$?
    if [ $mps = 0 ]; then
      echo "== MPS: $ACX_MPS_SAID"
    else
      echo "== no MPS here ($ACX_MPS_SAID): the ranks of a GPU time-slice it" >&2
    fi
  else
    echo "== mpirun -np $np, acx (actor: NCCL in the executor) vs raw NCCL; NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"
  fi
else
  np=${ACX_BENCH_NP:-$((2 * per))}
  mode=(--compare --baseline mpi)
  echo "== no GPU here: acx on the host device kind (actor mode: collectives through MPI on host-staged"
  echo "== copies) beside raw MPI_Allreduce, $np ranks, with the ratio: acx's overhead over MPI on this"
  echo "== machine, not a GPU measurement"
  if [ "$per" -gt 1 ]; then
    mode+=(--per-gpu)
    export ACX_COLL_HIER=1 ACX_COLL_HIER_GROUP=$per
    echo "== $per ranks per group (the host kind's hierarchical groups), MPI on one rank per group"
  fi
fi
if [ "$np" -gt "$(nproc)" ] && [ "$(acx_mpi_flavor mpirun)" = openmpi ]; then extra+=(--oversubscribe); fi
"$build/tools/acx-info" --topo || true
# --bind-to none: acx binds by GPU locality itself. The ACX_*/NCCL_* settings in effect (and the
# library path) must reach every rank: Open MPI's mpirun forwards what -x names, MPICH's Hydra
# forwards the whole environment by default (and knows no -x).
fwd=()
if [ "$(acx_mpi_flavor mpirun)" = openmpi ]; then
  for v in $(compgen -e | grep -E '^(ACX_|NCCL_|CUDA_VISIBLE_DEVICES$|CUDA_MPS_(PIPE|LOG)_DIRECTORY$|LD_LIBRARY_PATH$)' || true); do fwd+=(-x "$v"); done
fi
set -x
mpirun -np "$np" --bind-to none "${extra[@]}" "${fwd[@]}" "$bench" "${mode[@]}" "$@"
