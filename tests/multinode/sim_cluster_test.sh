#!/usr/bin/env bash
# Tests of the simulated cluster itself (scripts/sim-cluster/run.sh): the mpirun line it builds,
# its refusals, the per-node GPU shares, where each rank lands, and that nodes differ where two
# machines differ (host name, UTS and IPC namespaces, /dev/shm) and agree within a node.
#   sim_cluster_test.sh <run.sh>
# Exits 77 when this host cannot make namespaces (run.sh's own 77).
set -u
run=$1
fails=0 checks=0
ok() { checks=$((checks + 1)); echo "  ok: $*"; }
bad() { checks=$((checks + 1)); fails=$((fails + 1)); echo "  FAILED: $*"; }
expect() { # description, test command...
  local what=$1; shift
  if "$@"; then ok "$what"; else bad "$what"; fi
}
has() { grep -qF -- "$2" <<<"$1"; }

"$run" -q -N 1 -- true >/dev/null 2>&1
[ $? = 77 ] && { echo "sim_cluster_test: SKIP: this host cannot simulate nodes (see run.sh)"; exit 77; }

# The launcher run.sh uses (SIM_CLUSTER_MPIRUN, default mpirun): Open MPI's, or MPICH's Hydra.
if "${SIM_CLUSTER_MPIRUN:-mpirun}" --version 2>&1 | grep -q HYDRA; then hydra=1; else hydra=0; fi
echo "== the launcher line (--dry-run)"
out=$("$run" --dry-run -N 2 -r 2 -- ./prog arg 2>&1)
rc=$?
expect "dry run exits 0 (got $rc)" [ $rc = 0 ]
if [ $hydra = 0 ]; then
  wants=("--mca plm rsh" "rsh-agent.sh" "--mca plm_rsh_no_tree_spawn 1" "--mca oob_tcp_if_include lo"
    "--mca btl_tcp_if_include lo" "--mca pml ob1" "--host node0:2\\,node1:2" "-np 4" "--map-by slot" "./prog arg")
else
  wants=("-launcher ssh -launcher-exec" "rsh-agent.sh" "-iface lo" "-hosts node0:2\\,node1:2 -n 4 ./prog arg")
fi
for want in "${wants[@]}"; do
  expect "launcher line has '$want'" has "$out" "$want"
done
if [ $hydra = 0 ]; then
  out=$("$run" --dry-run -N 3 -r 1 --map-by node --prefix cn --mpirun -x --mpirun FOO -- ./prog 2>&1)
  expect "3 nodes named cn0..cn2, cyclic, extra mpirun arguments" \
    has "$out" "--host cn0:1\\,cn1:1\\,cn2:1 -np 3 --map-by node --bind-to none -x FOO ./prog"
else
  out=$("$run" --dry-run -N 3 -r 2 --map-by node --prefix cn --mpirun -genv --mpirun FOO --mpirun 1 -- ./prog 2>&1)
  expect "3 nodes named cn0..cn2, cyclic (blocks of one), extra launcher arguments" \
    has "$out" "-hosts cn0:1\\,cn1:1\\,cn2:1 -n 6 -genv FOO 1 ./prog"
fi

echo "== refusals"
refused() { # expected status, args...: run.sh refuses with that status and says why
  local want=$1; shift
  local msg
  msg=$("$run" "$@" 2>&1 >/dev/null)
  local rc=$?
  expect "run.sh $* exits $want (got $rc: ${msg##*$'\n'})" [ "$rc" = "$want" ] && [ -n "$msg" ]
}
refused 2 -N 2
refused 2 -N two -- true
refused 2 -N 0 -- true
refused 2 -r 0 -- true
refused 2 --map-by socket -- true
refused 2 --prefix 0bad -- true
refused 2 --bogus -- true
# Four GPUs offered (CUDA_VISIBLE_DEVICES): 2 nodes x 3 GPUs cannot be made.
CUDA_VISIBLE_DEVICES=0,1,2,3 refused 77 -N 2 -g 3 -- true

echo "== where the ranks land"
# One line per rank: rank, local rank, host name, node name and index, GPUs, namespaces, /dev/shm.
probe='echo "${OMPI_COMM_WORLD_RANK:-$PMI_RANK} ${OMPI_COMM_WORLD_LOCAL_RANK:-$MPI_LOCALRANKID} $(hostname) $SIM_CLUSTER_NODE $SIM_CLUSTER_NODE_INDEX'
probe+=' [${CUDA_VISIBLE_DEVICES-unset}] $(readlink /proc/self/ns/uts) $(readlink /proc/self/ns/ipc)'
probe+=' $(stat -c %d /dev/shm) $SIM_CLUSTER_NODES $SIM_CLUSTER_RANKS_PER_NODE $NCCL_SOCKET_IFNAME"'
me="$(readlink /proc/self/ns/uts) $(readlink /proc/self/ns/ipc) $(stat -c %d /dev/shm)"
layout() { # map-by, expected node index of ranks 0..3
  local map=$1; shift
  local lines
  lines=$(CUDA_VISIBLE_DEVICES=7,6,5,4 "$run" -q -N 2 -r 2 -g 2 --map-by "$map" -- sh -c "$probe" 2>&1)
  local rc=$?
  expect "--map-by $map: 2 nodes x 2 ranks ran (status $rc)" [ $rc = 0 ]
  expect "--map-by $map: 4 ranks answered" [ "$(grep -c '^[0-3] ' <<<"$lines")" = 4 ]
  local r want
  for r in 0 1 2 3; do
    want=$1; shift
    read -r rank lr host node idx gpus uts ipc shm nn rpn ifname <<<"$(grep "^$r " <<<"$lines")"
    expect "rank $r: host name node$want, its SIM_CLUSTER_NODE and index" \
      [ "$host" = "node$want" ] && [ "$node" = "node$want" ] && [ "$idx" = "$want" ]
    local gw="[7,6]"
    [ "$want" = 1 ] && gw="[5,4]"
    expect "rank $r: CUDA_VISIBLE_DEVICES $gw, 2 nodes x 2 ranks, NCCL on lo" \
      [ "$gpus" = "$gw" ] && [ "$nn/$rpn" = 2/2 ] && [ "$ifname" = lo ]
    eval "ns_$r='$uts $ipc $shm'"
    eval "node_$r=$want"
  done
  local p q
  for p in 0 1 2 3; do
    eval "local a=\$ns_$p na=\$node_$p"
    expect "rank $p: its node's namespaces and /dev/shm are not the launcher's" [ "$a" != "$me" ]
    for q in 0 1 2 3; do
      [ $q -gt $p ] || continue
      eval "local b=\$ns_$q nb=\$node_$q"
      if [ "$na" = "$nb" ]; then
        expect "ranks $p and $q (one node) share UTS, IPC and /dev/shm" [ "$a" = "$b" ]
      else
        local a3 b3
        read -r -a a3 <<<"$a"
        read -r -a b3 <<<"$b"
        expect "ranks $p and $q (two nodes) differ in UTS, IPC and /dev/shm" \
          [ "${a3[0]}" != "${b3[0]}" ] && [ "${a3[1]}" != "${b3[1]}" ] && [ "${a3[2]}" != "${b3[2]}" ]
      fi
    done
  done
}
layout slot 0 0 1 1
[ $fails = 0 ] || { echo "sim_cluster_test: $fails of $checks checks failed"; exit 1; }
layout node 0 1 0 1

echo "== statuses"
"$run" -q -N 2 -r 1 -- sh -c '[ "$SIM_CLUSTER_NODE_INDEX" = 1 ] && exit 3; exit 0' >/dev/null 2>&1
rc=$?
expect "a rank failing on node1 fails the job (status $rc)" [ $rc != 0 ]
"$run" -q -N 2 -r 1 --shared-shm -- sh -c '[ "$(stat -c %d /dev/shm)" = "'"$(stat -c %d /dev/shm)"'" ]' >/dev/null 2>&1
rc=$?
expect "--shared-shm keeps the host's /dev/shm (status $rc)" [ $rc = 0 ]

echo "sim_cluster_test: $((checks - fails)) passed, $fails failed"
[ $fails = 0 ]
