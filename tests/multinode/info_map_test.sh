#!/usr/bin/env bash
# `acx-info --map` on a simulated cluster, judged: one row per rank, each on the host of its node
# (node k is the host nodek), local ranks 0..M-1 on every node, and each node's GPU share as the
# launcher gave it: with GPUs, every rank on a GPU of its own node's CUDA_VISIBLE_DEVICES and no
# two nodes on one bus id; without, the host kind.
#   info_map_test.sh <run.sh> <acx-info> <nodes> <ranks per node> [<gpus per node>]
set -u
run=$1 info=$2 nodes=$3 per_node=$4 gpus=${5:-}
opts=(-N "$nodes" -r "$per_node" --map-by node)
[ -n "$gpus" ] && opts+=(-g "$gpus")
out=$("$run" "${opts[@]}" -- "$info" --map 2>&1)
rc=$?
printf '%s\n' "$out"
[ $rc = 77 ] && exit 77
fail() { echo "info_map_test: FAILED: $*" >&2; exit 1; }
[ $rc = 0 ] || fail "acx-info --map exited $rc"
np=$((nodes * per_node))
grep -q "^# acx rank map: $np rank(s) on $nodes node(s)" <<<"$out" || fail "no header for $np ranks on $nodes nodes"
rows=$(grep -E '^ +[0-9]+ ' <<<"$out")
[ "$(wc -l <<<"$rows")" = "$np" ] || fail "expected $np rows"
declare -A seen_local bus_node vis_node
while read -r rank host node local dev rest; do
  # --map-by node: rank r runs on node r % nodes, as local rank r / nodes.
  want=$((rank % nodes))
  [ "$host" = "node$want" ] || fail "rank $rank: host $host, expected node$want"
  [ "$node" = "$want" ] || fail "rank $rank: node $node, expected $want"
  [ "$local" = "$((rank / nodes))/$per_node" ] || fail "rank $rank: local rank $local, expected $((rank / nodes))/$per_node"
  [ -z "${seen_local[$node/$local]:-}" ] || fail "rank $rank: local rank $local twice on node $node"
  seen_local[$node/$local]=1
  if [ -n "$gpus" ] && [ "$gpus" -gt 0 ]; then
    # dev is the ordinal, rest starts "(bus id) shared-with CUDA_VISIBLE_DEVICES cpuset".
    read -r bus sharing visible _ <<<"$rest"
    if [ "$per_node" -le "$gpus" ]; then
      [ "$sharing" = "-" ] || fail "rank $rank: shares its GPU with '$sharing' although its node has a GPU per rank"
    fi
    [[ $dev =~ ^[0-9]+$ ]] && [ "$dev" -lt "$gpus" ] || fail "rank $rank: GPU '$dev' is not one of its node's $gpus"
    [ "${bus_node[$bus]:-$node}" = "$node" ] || fail "rank $rank: bus id $bus is also on node ${bus_node[$bus]}"
    bus_node[$bus]=$node
    [ "${vis_node[$visible]:-$node}" = "$node" ] || fail "CUDA_VISIBLE_DEVICES=$visible on two nodes"
    vis_node[$visible]=$node
  else
    [[ "$dev $rest" == "none: host kind"* ]] || fail "rank $rank: expected the host kind, got '$dev $rest'"
  fi
done <<<"$rows"
echo "info_map_test: $np ranks on $nodes nodes mapped as launched"
