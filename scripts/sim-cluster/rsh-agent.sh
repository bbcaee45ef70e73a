#!/usr/bin/env bash
# Open MPI's remote shell for the simulated cluster (run.sh sets plm_rsh_agent to this file):
# called like ssh, `rsh-agent.sh [ssh options] NODE COMMAND...`, it runs COMMAND (an orted line)
# on this host as node NODE (node.sh: the node's host name and /dev/shm), with the node's share of
# the GPUs as a batch system would give it. Never contacts another host.
# Reads from run.sh: SIM_CLUSTER_NODELIST (comma-separated names), SIM_CLUSTER_GPU_MAP (per node,
# ';'-separated CUDA_VISIBLE_DEVICES values; unset: GPU visibility untouched), SIM_CLUSTER_SHARED_SHM.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# ssh's options: skip the flags and the options that take a value (Open MPI adds none by default,
# plm_rsh_args may).
while [ $# -gt 0 ]; do
  case $1 in
    -[BbcDEeFIiJLlmOopQRSWw]) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
if [ $# -lt 2 ]; then
  echo "sim-cluster rsh-agent: usage: rsh-agent.sh [ssh options] NODE COMMAND..." >&2
  exit 255
fi
node=$1
shift
IFS=, read -r -a nodes <<<"${SIM_CLUSTER_NODELIST:-}"
index=-1
for i in "${!nodes[@]}"; do [ "${nodes[i]}" = "$node" ] && index=$i; done
if [ $index -lt 0 ]; then
  echo "sim-cluster rsh-agent: '$node' is not a node of this simulated cluster (${SIM_CLUSTER_NODELIST:-none})" >&2
  exit 255 # ssh's status for "could not reach the host"
fi
export SIM_CLUSTER_NODE_INDEX=$index
if [ -n "${SIM_CLUSTER_GPU_MAP+x}" ]; then
  IFS=';' read -r -a gpus <<<"$SIM_CLUSTER_GPU_MAP"
  export CUDA_VISIBLE_DEVICES="${gpus[index]:-}"
fi
opt=()
[ "${SIM_CLUSTER_SHARED_SHM:-0}" = 1 ] && opt=(--shared-shm)
# Like ssh: the words of the command joined by spaces, run by the user's shell.
exec "$here/node.sh" "${opt[@]}" "$node" "${SHELL:-/bin/sh}" -c "$*"
