#!/usr/bin/env bash
# Runs a command as an MPI job of N nodes x M ranks on this one host (docs/multinode.md): each node
# is its own UTS namespace with its own host name (node0, node1, ...), IPC namespace and /dev/shm;
# the launcher starts one daemon per node (Open MPI's orted, or MPICH's Hydra proxy) through an
# rsh agent (rsh-agent.sh) that enters the node instead of logging in anywhere; MPI talks over
# loopback between nodes (shared memory within a node), NCCL's sockets use loopback; each node sees
# its own GPUs as a batch system would set CUDA_VISIBLE_DEVICES. Nothing but loopback addresses is
# ever used. The launcher: SIM_CLUSTER_MPIRUN (default mpirun), Open MPI's or MPICH's Hydra
# (mpiexec.hydra, mpiexec.mpich; Cray MPICH, MVAPICH and Intel MPI launch the same way).
#   run.sh [options] -- COMMAND [ARGS...]
# Exits with mpirun's status; 2 on bad usage; 77 when this host cannot simulate the cluster asked
# for (no namespaces, no Open MPI, fewer GPUs than --gpus-per-node needs), so ctest skips.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

usage() {
  cat <<'USAGE'
usage: run.sh [options] -- COMMAND [ARGS...]
  -N, --nodes N            simulated nodes (default 2)
  -r, --ranks-per-node M   MPI ranks per node (default 1)
  -g, --gpus-per-node G    give node k the host's GPUs k*G .. k*G+G-1 (of CUDA_VISIBLE_DEVICES when
                           set, else of all GPUs) as its CUDA_VISIBLE_DEVICES; 0 hides every GPU;
                           unset leaves GPU visibility as it is (every node sees every GPU)
      --map-by slot|node   rank placement: slot fills node0 first (block, Slurm's default),
                           node deals ranks round-robin (cyclic)  (default slot)
      --prefix NAME        node names are NAME0, NAME1, ... (default node)
      --shared-shm         keep the host's /dev/shm and IPC namespace in every node
      --mpirun ARG         one more launcher argument, in the launcher's own syntax (repeat for
                           several)
      --dry-run            print the mpirun command and stop
  -q, --quiet              print nothing but the command's own output
  -h, --help
Each rank finds SIM_CLUSTER_NODES, SIM_CLUSTER_RANKS_PER_NODE, SIM_CLUSTER_NODELIST and, for its
own node, SIM_CLUSTER_NODE and SIM_CLUSTER_NODE_INDEX in its environment.
USAGE
}

die() { echo "sim-cluster: $*" >&2; exit 2; }
cannot() { echo "sim-cluster: cannot simulate here: $*" >&2; exit 77; }
count_arg() { # option, value: a non-negative integer
  [[ $2 =~ ^[0-9]+$ ]] || die "$1: '$2' is not a number"
}

nodes=2 per_node=1 gpus_per_node= map_by=slot prefix=node shared_shm=0 dry_run=0 quiet=0
extra=()
while [ $# -gt 0 ]; do
  case $1 in
    -N | --nodes) [ $# -ge 2 ] || die "$1 needs a value"; count_arg "$1" "$2"; nodes=$2; shift 2 ;;
    -r | --ranks-per-node) [ $# -ge 2 ] || die "$1 needs a value"; count_arg "$1" "$2"; per_node=$2; shift 2 ;;
    -g | --gpus-per-node) [ $# -ge 2 ] || die "$1 needs a value"; count_arg "$1" "$2"; gpus_per_node=$2; shift 2 ;;
    --map-by) [ $# -ge 2 ] || die "$1 needs a value"; map_by=$2; shift 2 ;;
    --prefix) [ $# -ge 2 ] || die "$1 needs a value"; prefix=$2; shift 2 ;;
    --shared-shm) shared_shm=1; shift ;;
    --mpirun) [ $# -ge 2 ] || die "$1 needs a value"; extra+=("$2"); shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    -q | --quiet) quiet=1; shift ;;
    -h | --help) usage; exit 0 ;;
    --) shift; break ;;
    *) usage >&2; die "unknown option '$1' (the command comes after --)" ;;
  esac
done
[ $# -gt 0 ] || { usage >&2; die "no command given (after --)"; }
[ "$nodes" -ge 1 ] || die "--nodes: at least 1"
[ "$per_node" -ge 1 ] || die "--ranks-per-node: at least 1"
case $map_by in slot | node) ;; *) die "--map-by: slot or node, not '$map_by'" ;; esac
[[ $prefix =~ ^[A-Za-z][A-Za-z0-9-]*$ ]] || die "--prefix: '$prefix' must start with a letter (letters, digits, '-')"
say() { [ $quiet = 1 ] || echo "sim-cluster: $*" >&2; }

mpirun=${SIM_CLUSTER_MPIRUN:-mpirun}
command -v "$mpirun" >/dev/null || cannot "no $mpirun in PATH (set SIM_CLUSTER_MPIRUN)"
version=$("$mpirun" --version 2>&1 || true)
if grep -qE "Open MPI|OpenRTE" <<<"$version"; then
  flavour=openmpi
elif grep -q "HYDRA" <<<"$version"; then
  flavour=hydra
else
  cannot "$mpirun is neither Open MPI's mpirun nor MPICH's Hydra (mpiexec.hydra)"
fi

# Node names: never this host's name, and never a name that resolves to an address, since Open
# MPI starts a node whose name is one of this host's addresses locally, without the agent.
names=()
for ((k = 0; k < nodes; k++)); do
  name=$prefix$k
  [ "$name" != "$(hostname)" ] && [ "$name" != "$(hostname -s)" ] ||
    die "node name '$name' is this host's name: choose another --prefix"
  if addr=$(timeout 5 getent hosts "$name" 2>/dev/null); then
    die "node name '$name' resolves to ${addr%% *} (/etc/hosts or DNS): choose another --prefix"
  fi
  names+=("$name")
done
nodelist=$(IFS=,; echo "${names[*]}")

# GPU visibility per node: consecutive shares of the GPUs this process may use.
gpu_map=
if [ -n "$gpus_per_node" ]; then
  if [ -n "${CUDA_VISIBLE_DEVICES+x}" ]; then
    IFS=, read -r -a pool <<<"$CUDA_VISIBLE_DEVICES"
  else
    n=0
    if [ -d /proc/driver/nvidia/gpus ]; then
      n=$(find /proc/driver/nvidia/gpus -mindepth 1 -maxdepth 1 | wc -l)
    elif command -v nvidia-smi >/dev/null; then
      n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
    fi
    pool=()
    for ((i = 0; i < n; i++)); do pool+=("$i"); done
  fi
  need=$((nodes * gpus_per_node))
  [ ${#pool[@]} -ge $need ] ||
    cannot "$nodes nodes x $gpus_per_node GPUs need $need GPUs; this host offers ${#pool[@]}"
  shares=()
  for ((k = 0; k < nodes; k++)); do
    share=$(IFS=,; echo "${pool[*]:k*gpus_per_node:gpus_per_node}")
    shares+=("$share")
  done
  gpu_map=$(IFS=';'; echo "${shares[*]}")
fi

# Fail here, not inside mpirun, when the namespaces are forbidden (node.sh exits 77 then).
probe_opt=()
[ $shared_shm = 1 ] && probe_opt=(--shared-shm)
"$here/node.sh" "${probe_opt[@]}" "${names[0]}" true || { rc=$?; [ $rc = 77 ] && exit 77; exit $rc; }

np=$((nodes * per_node))
if [ $flavour = openmpi ]; then
  hosts=$(for n in "${names[@]}"; do printf '%s:%d,' "$n" "$per_node"; done)
  cmd=("$mpirun"
    # Open MPI launches the orteds through our agent (the GPU host exports OMPI_MCA_plm=isolated,
    # which this overrides), each directly from mpirun: no tree spawn through other nodes.
    --mca plm rsh --mca plm_rsh_agent "$here/rsh-agent.sh" --mca plm_rsh_no_tree_spawn 1
    # Loopback only, for the daemons' wire-up and for MPI between nodes. ob1 with TCP between nodes
    # and shared memory (vader) within one, as on a cluster with Ethernet; UCX would choose its own
    # transports and could see one machine.
    --mca oob_tcp_if_include lo --mca btl_tcp_if_include lo --mca pml ob1 --mca btl self,vader,tcp
    --host "${hosts%,}" -np "$np" --map-by "$map_by"
    # Every node's orted would bind its ranks to the same first cores of this one host.
    --bind-to none
    "${extra[@]}" "$@")
  how="Open MPI through $here/rsh-agent.sh, TCP on lo"
else
  # Hydra deals ranks to the hosts in blocks of each host's count: the whole count fills a node
  # before the next (slot), blocks of one deal them round-robin (node).
  block=$per_node
  [ "$map_by" = node ] && block=1
  hosts=$(for n in "${names[@]}"; do printf '%s:%d,' "$n" "$block"; done)
  cmd=("$mpirun"
    # Hydra starts its proxies through our agent in place of ssh, and talks to them on lo.
    -launcher ssh -launcher-exec "$here/rsh-agent.sh" -iface lo
    -hosts "${hosts%,}" -n "$np"
    "${extra[@]}" "$@")
  how="MPICH's Hydra through $here/rsh-agent.sh, on lo"
  # MPI between nodes on loopback whichever network layer MPICH was built with (UCX, libfabric).
  export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo} FI_TCP_IFACE=${FI_TCP_IFACE:-lo} FI_SOCKETS_IFACE=${FI_SOCKETS_IFACE:-lo}
fi

say "$nodes nodes x $per_node ranks ($np ranks, --map-by $map_by), $how"
for ((k = 0; k < nodes; k++)); do
  if [ -n "$gpus_per_node" ]; then vis="CUDA_VISIBLE_DEVICES=${shares[k]}"; else vis="GPU visibility unchanged"; fi
  say "  ${names[k]}: $per_node slot(s), $vis"
done
say "$(printf '%q ' "${cmd[@]}")"
[ $dry_run = 1 ] && exit 0

# PMIx's data store: restricted to one component (the GPU host exports PMIX_MCA_gds=hash), MPI_Init
# and the first collectives hang with 2 or more ranks per node when several orteds share one host
# (seen with Open MPI 4.1.4 and 4.1.6: plain MPI_Comm_split_type + MPI_Allgather never return on
# node0; hash, ds21 and ds12 alone all hang; the default selection works). Leave the choice to PMIx.
if [ -n "${PMIX_MCA_gds:-}" ] && [[ $PMIX_MCA_gds != *,* ]] && [ "$per_node" -gt 1 ]; then
  say "PMIX_MCA_gds=$PMIX_MCA_gds unset for this job: one data-store component hangs $per_node ranks per simulated node"
  unset PMIX_MCA_gds
fi

export SIM_CLUSTER_NODES=$nodes SIM_CLUSTER_RANKS_PER_NODE=$per_node SIM_CLUSTER_NODELIST=$nodelist
export SIM_CLUSTER_SHARED_SHM=$shared_shm
if [ -n "$gpus_per_node" ]; then
  export SIM_CLUSTER_GPU_MAP=$gpu_map
  # Hydra hands its own environment to every rank, over the one the agent gave the node's proxy:
  # the launcher's CUDA_VISIBLE_DEVICES would undo the node's share.
  [ $flavour = hydra ] && unset CUDA_VISIBLE_DEVICES
else
  unset SIM_CLUSTER_GPU_MAP
fi
# NCCL's bootstrap and socket transport on loopback, unless the caller chose an interface.
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
# Open MPI refuses root without both; the simulated cluster is often run as root (CI, containers).
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
exec "${cmd[@]}"
