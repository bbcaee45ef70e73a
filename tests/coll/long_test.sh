#!/usr/bin/env bash
# Liveness tells busy from dead: an all-reduce that outlasts the executor heartbeat limit
# (ACX_HEARTBEAT_MS) must finish with a correct result and no executor declared lost. Runs
# acx-allreduce-bench (results checked) and passes only if every rank's operation took longer than
# the limit (else it proves nothing) and no rank logged a lost executor. Exit 77 without a GPU.
#   long_test.sh <bench> <bytes> <mpiexec> <mpiexec args...>
set -u
bench=$1 bytes=$2
shift 2
if ! nvidia-smi -L 2>/dev/null | grep -q GPU; then echo "long_test.sh: no GPU: skipped"; exit 77; fi
json=$(mktemp /tmp/acx-long.XXXXXX.json)
trap 'rm -f "$json"' EXIT
out=$("$@" "$bench" --mode actor -b "$bytes" -e "$bytes" -n 1 -w 0 -r 1 -d float --json "$json" 2>&1)
rc=$?
printf '%s\n' "$out" | grep -v "^#  Rank"
[ $rc -eq 0 ] || { echo "long_test.sh: the benchmark failed (status $rc)" >&2; exit 1; }
if printf '%s\n' "$out" | grep -qE "lost: |no heartbeat"; then
  echo "long_test.sh: an executor was declared lost during the long all-reduce" >&2; exit 1
fi
limit_us=$(( ${ACX_HEARTBEAT_MS:-1000} * 1000 ))
t=$(grep -oE '"time_us": [0-9.]+' "$json" | head -1 | grep -oE '[0-9.]+$')
[ -n "$t" ] || { echo "long_test.sh: no time in the benchmark's JSON" >&2; exit 1; }
if awk -v t="$t" -v l="$limit_us" 'BEGIN { exit !(t > l) }'; then
  echo "long_test.sh: PASS: one all-reduce of $bytes bytes took $t us, over the $limit_us us heartbeat limit"
  exit 0
fi
echo "long_test.sh: the all-reduce took $t us, not longer than the heartbeat limit ($limit_us us): inconclusive" >&2
exit 1
