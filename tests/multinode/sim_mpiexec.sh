#!/usr/bin/env bash
# An mpiexec look-alike over the simulated cluster, for test scripts that take a launcher
# (tests/rebuild/resilient_test.sh): `sim_mpiexec.sh -np N [--oversubscribe] PROGRAM [ARGS...]`
# runs PROGRAM as N ranks on SIM_MPIEXEC_NODES simulated nodes (default 2), N / nodes per node,
# dealt round-robin (SIM_MPIEXEC_MAP_BY, default node: rank r's neighbours r-1 and r+1 sit on
# other nodes), with SIM_MPIEXEC_GPUS_PER_NODE GPUs per node when set. Exits like run.sh, and
# prints "skipped" before its 77.
set -u
run=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../scripts/sim-cluster" && pwd)/run.sh
np=
while [ $# -gt 0 ]; do
  case $1 in
    -np | -n | --np) np=$2; shift 2 ;;
    --oversubscribe) shift ;; # each simulated node has the slots it needs
    -*) echo "sim_mpiexec.sh: unsupported launcher option '$1'" >&2; exit 2 ;;
    *) break ;;
  esac
done
nodes=${SIM_MPIEXEC_NODES:-2}
[ -n "$np" ] && [ $# -gt 0 ] || { echo "usage: sim_mpiexec.sh -np N [--oversubscribe] PROGRAM [ARGS...]" >&2; exit 2; }
[ $((np % nodes)) = 0 ] || { echo "sim_mpiexec.sh: $np ranks do not divide over $nodes nodes" >&2; exit 2; }
opts=(-N "$nodes" -r $((np / nodes)) --map-by "${SIM_MPIEXEC_MAP_BY:-node}")
[ -n "${SIM_MPIEXEC_GPUS_PER_NODE:-}" ] && opts+=(-g "$SIM_MPIEXEC_GPUS_PER_NODE")
# A host that cannot make this cluster (namespaces, GPUs) skips: resilient_test.sh reads "skipped".
"$run" "${opts[@]}" --dry-run -q -- "$@"
rc=$?
if [ $rc = 77 ]; then
  echo "sim_mpiexec.sh: this host cannot simulate ${nodes} nodes here: skipped"
  exit 77
fi
[ $rc = 0 ] || exit $rc
exec "$run" "${opts[@]}" -- "$@"
