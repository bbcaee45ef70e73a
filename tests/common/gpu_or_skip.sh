#!/bin/sh
# gpu_or_skip.sh <command> [args...]: runs the command where a GPU is visible (nvidia-smi lists
# one), else says so and exits 77, which ctest reports as skipped (tests that run a program with
# no GPU check of its own, e.g. acx-allreduce-bench, which falls back to the host device kind).
if ! nvidia-smi -L 2>/dev/null | grep -q GPU; then
  echo "gpu_or_skip.sh: no GPU: skipped"
  exit 77
fi
exec "$@"
