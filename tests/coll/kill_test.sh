#!/usr/bin/env bash
# The kill test's verdict: rank 1 SIGKILLs itself, so the job's exit status says nothing about the
# survivor. Pass when rank 0 reported the failure (its "survivor: ... PASS (no hang)" line), skip
# (77) without a GPU, fail otherwise; ctest's TIMEOUT turns a hang into a failure.
#   kill_test.sh <mpiexec> <mpiexec args...>
set -u
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if printf '%s\n' "$out" | grep -q "no GPU on every rank: skipped"; then exit 77; fi
if printf '%s\n' "$out" | grep -q "survivor: rank 0 .*PASS (no hang)"; then exit 0; fi
echo "kill_test.sh: no survivor report from rank 0 (launcher status $rc)" >&2
exit 1
