#!/usr/bin/env bash
# Runs an MPI program with K ranks on every visible GPU under MPS: the defaults that hold only
# where ranks share GPUs under MPS (the own path's small all-reduces, the two-shot with groups on
# 2 or more GPUs) can only be tested so. Uses the MPS control daemon that answers at
# $CUDA_MPS_PIPE_DIRECTORY (or /tmp/nvidia-mps), else starts one of its own for the run and quits
# it at the end. Exit 77 (skipped) without 2 GPUs or without nvidia-cuda-mps-control.
#   mps_test.sh K <mpiexec> <np flag> -- <mpiexec options...> <program> <args...>
set -u
[ $# -ge 4 ] && [ "$4" = "--" ] || { echo "usage: mps_test.sh K MPIEXEC NPFLAG -- [MPIEXEC OPTIONS] PROGRAM [ARGS]" >&2; exit 2; }
k=$1 mpiexec=$2 npflag=$3
shift 4
case "$k" in ''|*[!0-9]*|0) echo "mps_test.sh: K (ranks per GPU) must be a positive integer, not '$k'" >&2; exit 2 ;; esac
if ! ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU') || [ "$ngpu" -eq 0 ]; then echo "mps_test.sh: no GPU: skipped"; exit 77; fi
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then ngpu=$(tr , '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c .); fi
if [ "$ngpu" -lt 2 ]; then echo "mps_test.sh: $ngpu GPU visible, the test needs 2 or more: skipped"; exit 77; fi
# shellcheck source=../../scripts/common.sh
. "$(dirname "$0")/../../scripts/common.sh"
mps=0
acx_mps_start mps-test || mps=$?
case $mps in
  0) echo "mps_test.sh: MPS: $ACX_MPS_SAID" ;;
  2) echo "mps_test.sh: no MPS ($ACX_MPS_SAID): skipped"; exit 77 ;;
  *) echo "mps_test.sh: FAIL: $ACX_MPS_SAID" >&2; exit 1 ;;
esac
np=$((ngpu * k))
echo "mps_test.sh: $np ranks, $k on each of $ngpu GPUs"
"$mpiexec" "$npflag" "$np" "$@"
rc=$?
echo "mps_test.sh: $mpiexec exited with $rc"
exit $rc
