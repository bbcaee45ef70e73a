#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time on a copy of its seed corpus (ctest, label unit).
# Usage: run_fuzzer.sh <fuzzer binary | SKIP:reason> <seed dir> <work dir> <seconds> <max runs>
# Exit 77 (skipped) when the fuzzer could not be built here (no clang or no fuzzer runtime).
set -euo pipefail
bin=$1 seeds=$2 work=$3 secs=$4 runs=$5
case $bin in SKIP:*) echo "SKIP: ${bin#SKIP:}"; exit 77 ;; esac
[ -x "$bin" ] || { echo "fuzzer $bin was not built"; exit 1; }
rm -rf "$work"
mkdir -p "$work/corpus" "$work/artifacts"
# New inputs go to the work corpus (first directory); the checked-in seeds are only read.
rc=0
"$bin" -max_total_time="$secs" -runs="$runs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" "$work/corpus" "$seeds" >"$work/log" 2>&1 || rc=$?
tail -25 "$work/log"
if [ $rc -ne 0 ] || [ -n "$(ls -A "$work/artifacts")" ]; then
  echo "fuzzer failed (exit $rc); crashing inputs: $(ls "$work/artifacts")"
  exit 1
fi
grep -E "^#[0-9]+.*(DONE|pulse|INITED)" "$work/log" | tail -1 || true
