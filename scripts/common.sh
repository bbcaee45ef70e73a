# Shared by test.sh and bench.sh: what each job needs and where it comes from (a Debian package,
# or a tool already on PATH from an environment module or a Spack view), the install of what is
# missing (as root, on Debian/Ubuntu, when a registry answers), and CUDA's environment.
# shellcheck shell=bash

# The dependency table: one Debian package a line, read by acx_deps_check.
#   package   probes ('|': any of them) counting it as present without the package:
#             cmd:<tool on PATH>  pc:<pkg-config module>  hdr:<header under an include dir>
#             file:<glob>  clangrt:<runtime of the clang on PATH>
#   job       build (bench.sh and test.sh), test (test.sh), ci (test.sh with CI=true)
#   need      required (the job cannot run without it) or optional
#   without   what is skipped when an optional package is missing
# Add a package as one more line; keep the columns.
acx_deps_table() {
  cat <<'EOF'
cmake             cmd:cmake                          build  required  -
ninja-build       cmd:ninja                          build  required  -
gcc               cmd:cc|cmd:gcc                     build  required  -
g++               cmd:c++|cmd:g++                    build  required  -
libopenmpi-dev    cmd:mpicc                          build  required  -
openmpi-bin       cmd:mpirun|cmd:mpiexec             build  required  -
libhwloc-dev      pc:hwloc|hdr:hwloc.h               build  required  -
pkg-config        cmd:pkg-config                     build  optional  CMake finds hwloc by a plain search; the pkg-config install test cannot run
gnuplot-nox       cmd:gnuplot                        build  optional  no benchmark plot (--plot)
libcunit1-dev     pc:cunit|hdr:CUnit/CUnit.h         test   required  -
gfortran          cmd:gfortran                       test   optional  no Fortran module: the Fortran tests are skipped
clang             cmd:clang                          test   optional  the clang fuzzers are skipped
libclang-rt-14-dev clangrt:fuzzer                    test   optional  the clang fuzzers are skipped
munge             cmd:munged                         test   optional  the Slurm test is skipped
slurmctld         cmd:slurmctld                      test   optional  the Slurm test is skipped
slurmd            cmd:slurmd                         test   optional  the Slurm test is skipped
slurm-client      cmd:srun                           test   optional  the Slurm test is skipped
python3           cmd:python3                        test   optional  the Slurm test is skipped
lmod              file:/usr/share/lmod/lmod/init/bash|file:${LMOD_PKG:-/nonexistent}/init/bash  test  optional  the modulefile test is skipped
mpich             cmd:mpiexec.mpich                  ci     optional  the MPICH configuration is skipped
libmpich-dev      cmd:mpicc.mpich                    ci     optional  the MPICH configuration is skipped
EOF
}

# 0 when one of the '|'-separated probes finds the thing on this machine.
acx_dep_probe() {
  local alt dir alts
  IFS='|' read -ra alts <<<"$1"
  for alt in "${alts[@]}"; do
    case $alt in
      cmd:*) command -v "${alt#cmd:}" >/dev/null 2>&1 && return 0 ;;
      pc:*) command -v pkg-config >/dev/null 2>&1 && pkg-config --exists "${alt#pc:}" 2>/dev/null && return 0 ;;
      hdr:*)
        # Module systems put headers on CPATH; the compiler's default places last.
        for dir in ${CPATH:+${CPATH//:/ }} ${C_INCLUDE_PATH:+${C_INCLUDE_PATH//:/ }} ${ACX_DEPS_INCLUDE_DIRS-/usr/local/include /usr/include}; do
          [ -f "$dir/${alt#hdr:}" ] && return 0
        done ;;
      file:*) eval "compgen -G \"${alt#file:}\"" >/dev/null && return 0 ;;
      clangrt:*)
        command -v clang >/dev/null 2>&1 &&
          compgen -G "$(clang --print-runtime-dir 2>/dev/null)/libclang_rt.${alt#clangrt:}*.a" >/dev/null && return 0 ;;
    esac
  done
  return 1
}

acx_dep_installed() { # the Debian package itself
  command -v dpkg-query >/dev/null 2>&1 &&
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}

# acx_deps_check <job>...: fills ACX_DEPS_REQUIRED and ACX_DEPS_OPTIONAL with the packages of
# these jobs that are neither installed nor found by a probe, and ACX_DEPS_WITHOUT with what
# each missing optional one costs ("package: consequence"). 1 when a required one is missing.
acx_deps_check() {
  ACX_DEPS_REQUIRED=() ACX_DEPS_OPTIONAL=() ACX_DEPS_WITHOUT=()
  local pkg probe job need without
  while read -r pkg probe job need without; do
    [[ " $* " == *" $job "* ]] || continue
    acx_dep_installed "$pkg" || acx_dep_probe "$probe" && continue
    if [ "$need" = required ]; then
      ACX_DEPS_REQUIRED+=("$pkg")
    else
      ACX_DEPS_OPTIONAL+=("$pkg")
      ACX_DEPS_WITHOUT+=("$pkg: $without")
    fi
  done < <(acx_deps_table)
  [ ${#ACX_DEPS_REQUIRED[@]} -eq 0 ]
}

# Installs the missing packages of the jobs; a node that reaches no registry keeps going.
acx_apt_install() {
  # Short timeouts: an offline compute node's firewall may drop packets rather than refuse them.
  local opts=(-o Acquire::http::Timeout=15 -o Acquire::https::Timeout=15 -o Acquire::Retries=0 -qq)
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get "${opts[@]}" update >/dev/null 2>&1; then
    echo "acx: no package registry answered (apt-get update failed): installing nothing"
    return 1
  fi
  apt-get "${opts[@]}" install -y --no-install-recommends "$@" >/dev/null 2>&1 && return 0
  # One unknown package (another release's name) must not keep the others out.
  local p rc=0
  for p in "$@"; do
    apt-get "${opts[@]}" install -y --no-install-recommends "$p" >/dev/null 2>&1 ||
      { echo "acx: apt-get could not install $p"; rc=1; }
  done
  return $rc
}

# acx_install_deps <job>...: what acx_deps_check finds missing is installed where possible, then
# said: a missing required package stops the job (status 1), a missing optional one is named
# with what is skipped. ACX_NO_INSTALL=1: never call apt-get (check and report only). Under
# CI=true every test must run: a missing optional package fails too.
acx_install_deps() {
  acx_deps_check "$@" || true
  local missing=("${ACX_DEPS_REQUIRED[@]}" "${ACX_DEPS_OPTIONAL[@]}")
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "${ACX_NO_INSTALL:-0}" = 1 ]; then
      echo "acx: ACX_NO_INSTALL=1: not installing ${missing[*]}"
    elif [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
      echo "acx: not root on Debian/Ubuntu: not installing ${missing[*]}"
    else
      echo "acx: installing ${missing[*]}"
      acx_apt_install "${missing[@]}" || true
    fi
    acx_deps_check "$@" || true
  fi
  local w
  for w in "${ACX_DEPS_WITHOUT[@]}"; do echo "acx: missing optional ${w%%:*}:${w#*:}"; done
  if [ ${#ACX_DEPS_REQUIRED[@]} -gt 0 ]; then
    echo "acx: cannot go on: missing required ${ACX_DEPS_REQUIRED[*]} (install them, or put the tools" \
      "on PATH and the libraries on PKG_CONFIG_PATH/CPATH, e.g. with module load)" >&2
    return 1
  fi
  if [ ${#ACX_DEPS_OPTIONAL[@]} -gt 0 ] && [ "${CI:-}" = true ]; then
    echo "acx: CI=true runs every test: missing ${ACX_DEPS_OPTIONAL[*]}" >&2
    return 1
  fi
  if [ ${#missing[@]} -gt 0 ]; then
    echo "acx: going on${ACX_DEPS_OPTIONAL[*]:+ without ${ACX_DEPS_OPTIONAL[*]}}"
  fi
  return 0
}

# ACX_DEPS_ONLY=1 scripts/<job>.sh: check (and install) the job's dependencies, then stop.
acx_deps_only_exit() {
  [ "${ACX_DEPS_ONLY:-0}" = 1 ] || return 0
  echo "acx: ACX_DEPS_ONLY=1: dependencies checked, stopping here"
  exit 0
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

# openmpi, mpich (Hydra: MPICH, MVAPICH, Intel MPI) or other: the launcher's flags differ.
acx_mpi_flavor() {
  local v
  v=$("$1" --version 2>&1 || true)
  case $v in
    *"Open MPI"* | *OpenRTE*) echo openmpi ;;
    *HYDRA* | *MPICH* | *"Intel(R) MPI"*) echo mpich ;;
    *) echo other ;;
  esac
}

acx_have_gpu() {
  command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q GPU
}

# Makes sure the ranks about to start (K per GPU) reach an MPS control daemon: the one that
# answers at $CUDA_MPS_PIPE_DIRECTORY (or /tmp/nvidia-mps), else one of this run's own (in a fresh
# directory under /tmp named after TAG), quit and removed when the calling script exits (an EXIT
# trap). Sets ACX_MPS_SAID to what it did or why not. Returns 0 (a daemon answers), 2 (no
# nvidia-cuda-mps-control on PATH) or 1 (it could not start one).
acx_mps_start() {
  local tag=$1 pipe=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/nvidia-mps} dir
  if [ -e "$pipe/control" ]; then
    export CUDA_MPS_PIPE_DIRECTORY=$pipe
    ACX_MPS_SAID="a control daemon answers at $pipe"
    return 0
  fi
  if ! command -v nvidia-cuda-mps-control >/dev/null; then
    ACX_MPS_SAID="nvidia-cuda-mps-control is not on PATH"
    return 2
  fi
  if ! dir=$(mktemp -d "/tmp/acx-$tag-mps.XXXXXX"); then
    ACX_MPS_SAID="no directory for a control daemon: mktemp -d in /tmp failed"
    return 1
  fi
  if ! mkdir -p "$dir/pipe" "$dir/log" ||
    ! CUDA_MPS_PIPE_DIRECTORY=$dir/pipe CUDA_MPS_LOG_DIRECTORY=$dir/log nvidia-cuda-mps-control -d; then
    rm -rf "$dir"
    ACX_MPS_SAID="nvidia-cuda-mps-control -d failed (pipe directory $dir/pipe)"
    return 1
  fi
  export CUDA_MPS_PIPE_DIRECTORY=$dir/pipe CUDA_MPS_LOG_DIRECTORY=$dir/log
  # shellcheck disable=SC2064 # $dir is this run's: expanded now
  trap "echo quit | timeout 30 nvidia-cuda-mps-control; rm -rf '$dir'" EXIT
  ACX_MPS_SAID="started a control daemon for this run ($CUDA_MPS_PIPE_DIRECTORY; quit at the end)"
}
