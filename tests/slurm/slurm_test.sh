#!/usr/bin/env bash
# Brings up a real one-node Slurm (munged, slurmctld, slurmd from the Debian packages) in a
# temporary directory, runs an MPI program and then every `mpi` test of the build through srun,
# and stops everything it started, whatever happens (trap; the daemons also carry a hard time
# limit in case this script is killed).
#   slurm_test.sh <build dir> <slurm_mpi_check program> <srun_mpi_suite.py>
# Exits 77 (skipped) when not root or when the Slurm/munge packages are missing.
set -uo pipefail
build=$1 check=$2 suite=$3
budget=${ACX_SLURM_BUDGET:-240} # seconds; below the ctest TIMEOUT so cleanup always runs
t0=$SECONDS
export PATH=$PATH:/usr/sbin:/sbin # the daemons live in sbin, often not in a test PATH

skip() { echo "slurm_test: SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root to run slurmctld/slurmd (scripts/test.sh runs as root in CI)"
missing=()
for c in munged slurmctld slurmd srun salloc sinfo squeue scancel python3; do
  command -v "$c" >/dev/null || missing+=("$c")
done
[ ${#missing[@]} -eq 0 ] || skip "missing ${missing[*]} (Debian: apt-get install munge slurmctld slurmd slurm-client python3)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/acx-slurm.XXXXXX")
chmod 755 "$tmp" # munge clients must reach the socket below it
mark="ACX_SLURM_TEST_DIR=$tmp" # in the daemons' environment, inherited by slurmstepd
pids=()
status=1

# Processes whose environment carries our mark: the daemons and every slurmstepd they forked.
ours() {
  local e p
  for e in /proc/[0-9]*/environ; do
    p=${e#/proc/}; p=${p%/environ}
    [ "$p" = $$ ] && continue
    { tr "\0" "\n" <"$e"; } 2>/dev/null | grep -qxF "$mark" && echo "$p"
  done
}

stop_pids() { # signal, pids...: signal them, wait up to 10 s for them to exit
  local sig=$1; shift
  [ $# -gt 0 ] || return 0
  kill -"$sig" "$@" 2>/dev/null
  local deadline=$((SECONDS + 10)) p alive
  while [ $SECONDS -lt $deadline ]; do
    alive=0
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && return 0
    sleep 0.2
  done
  return 1
}

cleanup() {
  trap - EXIT INT TERM
  trap "" PIPE # a closed stdout must not cut the cleanup short
  if [ -n "${SLURM_CONF:-}" ] && [ ${#pids[@]} -gt 0 ]; then
    # Cancel what is still queued or running so slurmd takes its steps down with it.
    local jobs
    jobs=$(timeout 10 squeue -h -o %i 2>/dev/null)
    # shellcheck disable=SC2086 # a list of job ids
    [ -n "$jobs" ] && timeout 10 scancel $jobs 2>/dev/null
    local deadline=$((SECONDS + 10))
    while [ -n "$(timeout 5 squeue -h -o %i 2>/dev/null)" ] && [ $SECONDS -lt $deadline ]; do sleep 0.5; done
  fi
  # Reverse order of start: slurmd and slurmctld still need munged while they shut down.
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    stop_pids TERM "${pids[i]}" || stop_pids KILL "${pids[i]}"
  done
  local left
  left=$(ours)
  # shellcheck disable=SC2086 # a list of pids
  [ -n "$left" ] && { stop_pids TERM $left || stop_pids KILL $left; }
  left=$(ours)
  if [ -n "$left" ]; then
    echo "slurm_test: FAIL: processes still running after cleanup: $left" >&2
    status=1
  else
    echo "slurm_test: slurmd, slurmctld and munged stopped; nothing left running"
  fi
  if [ $status -ne 0 ]; then
    for f in "$tmp"/log/*.log; do
      [ -f "$f" ] && { echo "---- tail of $f"; tail -25 "$f"; }
    done
  fi
  rm -rf "$tmp"
  exit $status
}
trap cleanup EXIT
child=
# Foreground children would delay the trap until they end: run them in the background and wait.
run_child() {
  "$@" &
  child=$!
  wait $child
  local rc=$?
  child=
  return $rc
}
on_signal() {
  echo "slurm_test: interrupted"
  [ -n "$child" ] && { stop_pids TERM "$child" || stop_pids KILL "$child"; }
  exit 1
}
trap on_signal INT TERM

wait_for() { # seconds, description, command...: poll until the command succeeds
  local limit=$1 what=$2; shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || { echo "slurm_test: FAIL: $what not ready after ${limit}s" >&2; return 1; }
    sleep 0.2
  done
}

free_port() { # a TCP port on which nothing listens
  local p i
  for i in $(seq 50); do
    p=$((20000 + RANDOM % 30000))
    (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null || { echo $p; return 0; }
  done
  return 1
}

daemon() { # log name, command...: starts a daemon in the foreground mode, in the background
  local name=$1; shift
  env "$mark" timeout -k 5 $((budget + 30)) "$@" >"$tmp/log/$name.log" 2>&1 &
  pids+=($!)
}

mkdir -p "$tmp/munge" "$tmp/state" "$tmp/spool" "$tmp/log" "$tmp/tmpfs"
chmod 700 "$tmp/munge"
head -c 1024 /dev/urandom >"$tmp/munge/munge.key"
chmod 400 "$tmp/munge/munge.key"
daemon munged munged --foreground --force --socket="$tmp/munge/socket" --key-file="$tmp/munge/munge.key" \
  --pid-file="$tmp/munge/munged.pid" --seed-file="$tmp/munge/seed"
wait_for 10 munged test -S "$tmp/munge/socket" || exit 1
chmod 755 "$tmp/munge" # the socket is in place; clients need to traverse the directory

node=$(hostname -s)
# The node as slurmd sees the hardware (real CPU count and layout), memory left at the default
# so that a small drift between runs never drains the node.
hw=$(slurmd -C | head -1 | sed -e 's/ RealMemory=[0-9]*//' -e "s/^NodeName=[^ ]*/NodeName=$node/")
if ! ctld_port=$(free_port) || ! slurmd_port=$(free_port); then
  echo "slurm_test: FAIL: no free port" >&2
  exit 1
fi
export SLURM_CONF=$tmp/slurm.conf
write_conf() { # MpiDefault
  cat >"$SLURM_CONF" <<CONF
# Generated by tests/slurm/slurm_test.sh: a one-node cluster living in $tmp.
ClusterName=acxci
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$tmp/munge/socket
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
TmpFS=$tmp/tmpfs
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=$1
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=5
$hw NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=ci Nodes=$node Default=YES MaxTime=30 State=UP OverSubscribe=YES
CONF
}
write_conf none
mpi_list=$(srun --mpi=list 2>&1)
if grep -qw pmix <<<"$mpi_list"; then
  mpi=pmix
elif grep -qw pmi2 <<<"$mpi_list"; then
  mpi=pmi2
else
  echo "$mpi_list"
  skip "this Slurm has neither the pmix nor the pmi2 MPI plugin; MPI programs cannot be launched by srun"
fi
write_conf $mpi
echo "slurm_test: node '$hw', ports $ctld_port/$slurmd_port, srun --mpi=$mpi (offered: $(tr -s ' \n\t' ' ' <<<"$mpi_list" | sed 's/MPI plugin types are... //'))"

daemon slurmctld slurmctld -D -f "$SLURM_CONF"
daemon slurmd slurmd -D -f "$SLURM_CONF" -N "$node"
node_idle() { [ "$(sinfo -h -n "$node" -o %T 2>/dev/null)" = idle ]; }
wait_for 30 "node $node (idle in sinfo)" node_idle || exit 1
echo "slurm_test: cluster up in $((SECONDS - t0))s"

ntasks=2
echo "slurm_test: srun -n $ntasks $(basename "$check")"
run_child timeout $((budget - (SECONDS - t0))) srun --mpi=$mpi -n $ntasks --overcommit --time=2 \
  --kill-on-bad-exit=1 "$check" >"$tmp/log/check.log" 2>&1
rc=$?
grep "slurm_mpi_check:" "$tmp/log/check.log"
[ $rc -eq 0 ] || { cat "$tmp/log/check.log"; echo "slurm_test: FAIL: srun -n $ntasks $check exited $rc" >&2; exit 1; }

left=$((budget - (SECONDS - t0)))
run_child timeout -k 10 $left python3 "$suite" --build "$build" --mpi $mpi
rc=$?
[ $rc -eq 124 ] && echo "slurm_test: FAIL: the mpi suite ran past the budget of ${budget}s" >&2
[ $rc -eq 0 ] || exit 1
echo "slurm_test: PASS in $((SECONDS - t0))s"
status=0
