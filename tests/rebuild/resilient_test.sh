#!/usr/bin/env bash
# The resilient all-reduce demonstration, judged: a fault-free run and a run where rank 1's executor
# is lost at an iteration must print the same "result:" line (every rank's final state and the last
# residual, bit for bit), and the faulty run must have recovered. Exit 77 when the example skips
# (no GPU for --cuda).
#   resilient_test.sh <example> <mpiexec> <np> <fault-at> [example args...]
# ACX_MPIEXEC_OVERSUBSCRIBE: the launcher's flag for more ranks than cores (default Open MPI's
# --oversubscribe; empty for MPICH's Hydra, which needs none).
set -u
example=$1 mpiexec=$2 np=$3 fault_at=$4
shift 4
# The example prints its "result:" line, alone, on stdout (one write by rank 0) and every per-rank
# progress line on stderr, so the launcher's interleaving of ranks cannot split the line compared.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# A run still going after RESILIENT_HANG_S seconds (default 100; a run takes a few) is a hang: what
# every rank's threads are doing goes to stderr before the 150 s timeout kills the job, so a rare
# hang leaves its evidence (gdb's backtraces when gdb is installed, else each thread's kernel wait).
hang_report() {
  local exe p t
  exe=$(readlink -f "$example")
  echo "resilient_test.sh: the $1 run is still going after ${RESILIENT_HANG_S:-100} s: its ranks' threads" >&2
  for p in $(pgrep -f -- "$example"); do
    [ "$(readlink -f "/proc/$p/exe" 2>/dev/null)" = "$exe" ] || continue
    echo "--- pid $p" >&2
    if command -v gdb >/dev/null; then
      gdb -p "$p" -batch -ex "thread apply all bt" 2>&1 | grep -E "^Thread|^#" | head -120 >&2
    else
      for t in /proc/"$p"/task/*; do
        echo "  thread $(basename "$t") $(cat "$t/comm" 2>/dev/null): $(cat "$t/wchan" 2>/dev/null)" >&2
      done
    fi
  done
}
run() { # run NAME [example args...]: stdout to $tmp/NAME.out, stderr to $tmp/NAME.err
  local name=$1 pid waited=0
  shift
  # shellcheck disable=SC2086 # the flag is one word or none
  timeout 150 "$mpiexec" -np "$np" ${ACX_MPIEXEC_OVERSUBSCRIBE---oversubscribe} "$example" "$@" \
    >"$tmp/$name.out" 2>"$tmp/$name.err" &
  pid=$!
  # A watchdog's poll, not a synchronisation: the run's end is waited for below.
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$waited" -ge "$((${RESILIENT_HANG_S:-100} * 5))" ]; then
      hang_report "$name"
      break
    fi
    sleep 0.2
    waited=$((waited + 1))
  done
  wait "$pid"
}
run clean "$@"
rc=$?
echo "--- fault-free run (exit $rc)"
cat "$tmp/clean.out" "$tmp/clean.err"
# Skipped: the example says so, or the launcher passes on a rank's 77 (it may kill rank 0 before
# rank 0's line is out).
if grep -q "skipped" "$tmp/clean.out" || [ $rc -eq 77 ]; then exit 77; fi
[ $rc -eq 0 ] || { echo "resilient_test.sh: the fault-free run failed" >&2; exit 1; }
run faulty --fault-at "$fault_at" "$@"
rc=$?
echo "--- run with a fault on rank 1 at iteration $fault_at (exit $rc)"
cat "$tmp/faulty.out" "$tmp/faulty.err"
[ $rc -eq 0 ] || { echo "resilient_test.sh: the run with a fault failed" >&2; exit 1; }
grep -q "rank 1: recovered at epoch" "$tmp/faulty.err" || { echo "resilient_test.sh: rank 1 never recovered: no fault happened?" >&2; exit 1; }
a=$(grep '^result:' "$tmp/clean.out")
b=$(grep '^result:' "$tmp/faulty.out")
[ -n "$a" ] || { echo "resilient_test.sh: no result line" >&2; exit 1; }
if [ "$a" != "$b" ]; then
  printf 'resilient_test.sh: results differ\n  fault-free: %s\n  with fault: %s\n' "$a" "$b" >&2
  exit 1
fi
echo "resilient_test.sh: identical results with and without the fault: $a"
