#!/usr/bin/env bash
# Runs a command as one simulated node: in its own UTS namespace with the node's host name, its own
# IPC namespace and a private /dev/shm (a mount namespace with a fresh tmpfs there), so that what
# differs between two machines of a cluster differs here too, while the network (loopback), the
# file systems and the GPUs stay shared. Used by run.sh's rsh agent and by the simulated Slurm.
#   node.sh [--shared-shm] [--private DIR]... NAME COMMAND [ARGS...]
# --shared-shm keeps the host's /dev/shm and IPC namespace (only the host name differs).
# --private DIR gives the node its own empty DIR (a tmpfs), as every machine has its own /tmp:
# a per-node scratch or spool directory at one path for all nodes.
# As root it needs nothing else; otherwise an unprivileged user namespace (--map-root-user).
# Exits 77 when this host forbids the namespaces (a container without CAP_SYS_ADMIN, or user
# namespaces switched off), else with COMMAND's status.
set -u
shared_shm=0 private=()
while [ $# -gt 0 ]; do
  case $1 in
    --shared-shm) shared_shm=1; shift ;;
    --private) [ $# -ge 2 ] && [ -d "$2" ] || { echo "node.sh: --private needs an existing directory" >&2; exit 2; }
      private+=("$(cd "$2" && pwd)"); shift 2 ;;
    *) break ;;
  esac
done
if [ $# -lt 2 ]; then
  echo "usage: node.sh [--shared-shm] [--private DIR]... NAME COMMAND [ARGS...]" >&2
  exit 2
fi
if [ $shared_shm = 1 ] && [ ${#private[@]} -gt 0 ]; then
  echo "node.sh: --private needs the node's own mount namespace: not with --shared-shm" >&2
  exit 2
fi
name=$1

# Second stage, inside the new namespaces. The mark carries the mode and the mount namespace the
# first stage ran in: /dev/shm is mounted over only in a namespace that is not that one, so that a
# mistake here can never cover the host's /dev/shm.
if [ -n "${SIM_CLUSTER_NODE_STAGE:-}" ] && [ "${SIM_CLUSTER_NODE_STAGE%%/*}" = "$name.$$" ]; then
  stage=$SIM_CLUSTER_NODE_STAGE
  unset SIM_CLUSTER_NODE_STAGE
  shift
  if command -v hostname >/dev/null; then hostname "$name"; else echo "$name" >/proc/sys/kernel/hostname; fi ||
    { echo "node.sh: cannot set the host name '$name'" >&2; exit 77; }
  if [ "${stage#*/}" != shared ]; then
    if [ "$(readlink /proc/self/ns/mnt)" = "${stage#*/}" ]; then
      echo "node.sh: node '$name' is in the host's mount namespace: not mounting over /dev/shm" >&2
      exit 77
    fi
    mount -t tmpfs -o mode=1777 sim-cluster-shm /dev/shm ||
      { echo "node.sh: cannot mount a private /dev/shm for node '$name'" >&2; exit 77; }
    IFS=: read -r -a dirs <<<"${SIM_CLUSTER_NODE_PRIVATE:-}"
    for d in "${dirs[@]}"; do
      mount -t tmpfs -o mode=0755 sim-cluster-private "$d" ||
        { echo "node.sh: cannot mount a private $d for node '$name'" >&2; exit 77; }
    done
  fi
  unset SIM_CLUSTER_NODE_PRIVATE
  export SIM_CLUSTER_NODE=$name
  exec "$@"
fi

case $name in
  '' | -* | *[!A-Za-z0-9.-]*) echo "node.sh: '$name' is not a host name (letters, digits, '-' and '.')" >&2; exit 2 ;;
esac
command -v unshare >/dev/null || { echo "node.sh: unshare (util-linux) is missing" >&2; exit 77; }
user=()
[ "$(id -u)" = 0 ] || user=(--user --map-root-user)
ns=(--uts "${user[@]}")
if [ $shared_shm = 0 ]; then
  if unshare --uts --ipc --mount --propagation private "${user[@]}" true 2>/dev/null; then
    ns+=(--ipc --mount --propagation private)
  elif [ ${#private[@]} -eq 0 ]; then
    # A host name of its own is what makes a node; a shared /dev/shm only hides less.
    echo "node.sh: this host forbids mount or IPC namespaces: node '$name' shares /dev/shm and IPC" >&2
    shared_shm=1
  fi
fi
if ! unshare "${ns[@]}" true 2>/dev/null; then
  echo "node.sh: this host forbids new namespaces (unshare ${ns[*]}): needs root or user namespaces" >&2
  exit 77
fi
# unshare execs bash in place: its pid, and so the stage mark, is this process's own.
if [ $shared_shm = 1 ]; then
  export SIM_CLUSTER_NODE_STAGE="$name.$$/shared"
else
  export SIM_CLUSTER_NODE_STAGE="$name.$$/$(readlink /proc/self/ns/mnt)"
  for d in "${private[@]}"; do
    case $d in *:*) echo "node.sh: --private '$d': no ':' in the path, please" >&2; exit 2 ;; esac
  done
  SIM_CLUSTER_NODE_PRIVATE=$(IFS=:; echo "${private[*]}")
  export SIM_CLUSTER_NODE_PRIVATE
fi
exec unshare "${ns[@]}" -- "$BASH" "${BASH_SOURCE[0]}" "$@"
