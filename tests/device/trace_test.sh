#!/bin/sh
# trace_test.sh KINDS -- <command> [args...]: runs the command (a test of the own all-reduce on a
# GPU, with ACX_COLL_PEER_TRACE=1 and ACX_DEBUG=INFO in its environment) and passes where it passed
# and every executor's log has, for each kernel kind named in KINDS (comma-separated, as the log
# names them: "push lines", "one-shot", ...), a trace line with at least one operation and for
# each of its phases a mean, a median and a 90th percentile. Exit 77 (skipped) is passed on.
kinds=$1
shift
[ "$1" = "--" ] && shift
out=$(mktemp) || exit 1
"$@" > "$out" 2>&1
rc=$?
cat "$out"
if [ $rc -eq 77 ]; then rm -f "$out"; exit 77; fi
if [ $rc -ne 0 ]; then echo "trace_test.sh: the command failed (exit $rc)"; rm -f "$out"; exit 1; fi
bad=0
IFS=,
for k in $kinds; do
  # "peer set N trace (rank R, block 0, us per operation): KIND, OPS operations: gap G (p50 M p90 P), ..."
  v='[0-9]+\.[0-9]+ \(p50 [0-9]+\.[0-9]+ p90 [0-9]+\.[0-9]+\)'
  n=$(grep -cE "trace \(rank [0-9]+, block 0, us per operation\): $k, [1-9][0-9]* operations: gap $v(, [a-zA-Z0-9 ]+ $v)+$" "$out")
  if [ "$n" -eq 0 ]; then echo "trace_test.sh: no trace line for \"$k\""; bad=1; else echo "trace_test.sh: $n trace lines for \"$k\""; fi
done
rm -f "$out"
exit $bad
