#!/bin/bash
# Runs one ctest test again and again until it hangs or fails, and on a hang writes every matching
# process's backtraces (gdb, all threads) before the test's own timeout kills it.
#   scripts/hang-catch.sh BUILD_DIR TEST_NAME PROCESS_PATTERN [RUNS=40] [HANG_S=60]
# e.g. scripts/hang-catch.sh build multinode_rebuild_2x2 'test_rebuild$'
# Logs and backtraces go to ${OUT:-/tmp/hang-catch}; add load beside it (stress-ng --cpu 2) to
# provoke timing-dependent hangs.
set -u
B=$1 T=$2 PAT=$3 RUNS=${4:-40} HANG=${5:-60} O=${OUT:-/tmp/hang-catch}
command -v gdb >/dev/null || { echo "hang-catch: gdb is not on PATH" >&2; exit 2; }
mkdir -p "$O"; cd "$B" || exit 2
for i in $(seq 1 "$RUNS"); do
  ctest -R "^$T\$" --output-on-failure > "$O/run-$i.log" 2>&1 &
  P=$!; t=0
  while kill -0 $P 2>/dev/null && [ $t -lt "$HANG" ]; do sleep 1; t=$((t + 1)); done
  if kill -0 $P 2>/dev/null; then
    echo "run $i: still running after ${HANG} s: backtraces in $O/bt-*.txt"
    for p in $(pgrep -f "$PAT"); do gdb -p "$p" -batch -ex "thread apply all bt" > "$O/bt-$p.txt" 2>&1; done
    wait $P; exit 1
  fi
  wait $P; rc=$?; echo "run $i: rc=$rc"
  [ $rc -eq 0 ] || { echo "run $i failed: $O/run-$i.log"; exit 1; }
done
