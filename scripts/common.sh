# Shared by test.sh and bench.sh: install what is missing (as root, on Debian/Ubuntu), find CUDA.
# shellcheck shell=bash

ACX_DEBS="cmake ninja-build pkg-config gcc g++ gfortran make libopenmpi-dev openmpi-bin libhwloc-dev libcunit1-dev gnuplot-nox
  clang libclang-rt-14-dev
  munge slurmctld slurmd slurm-client python3" # the last line: the single-host Slurm test

acx_install_deps() {
  local missing=()
  for p in $ACX_DEBS "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "acx: missing packages (${missing[*]}); run as root on Debian to install them" >&2
    return 0
  fi
  echo "acx: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

acx_env() {
  [ -d /usr/local/cuda/bin ] && export PATH="$PATH:/usr/local/cuda/bin"
  # Open MPI refuses root unless told; containers and CI run as root.
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_MCA_rmaps_base_oversubscribe=1
  # Never use NVLink multicast (it can take shared GPUs out of service).
  export NCCL_NVLS_ENABLE=0
  ACX_JOBS=${ACX_JOBS:-$(nproc)}
}

acx_have_gpu() {
  command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q GPU
}
