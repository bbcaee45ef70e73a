#!/usr/bin/env bash
# scripts/bench.sh and scripts/test.sh on a node that reaches no package registry (issue 15 item 1):
# apt-get fails (exit 100, as without network), dpkg knows no package, and PATH holds only what a
# module or a Spack view would put there. Each script runs in its ACX_DEPS_ONLY=1 mode (the
# dependency check and install, no build). Checks: tools on PATH count as present, bench.sh asks
# only for what the benchmark needs, a missing optional package is named with what is skipped and
# the script goes on, a missing required one stops it with its name.
#   deps_test.sh <source dir>
set -uo pipefail
src=$1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/acx-deps.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "deps_test: FAIL: $*" >&2; exit 1; }

# The node: a bin/ of basic tools, fake apt-get and dpkg-query, and an empty include dir.
bin=$tmp/bin
mkdir -p "$bin" "$tmp/include"
for t in bash env cat dirname grep sed tr id nproc head tail sort uname mkdir rm true; do
  p=$(type -P "$t") || fail "no $t on this machine"
  ln -s "$p" "$bin/$t"
done
cat >"$bin/apt-get" <<SH
#!$(command -v bash)
echo "apt-get \$*" >>"$tmp/apt.log"
echo "E: Could not resolve 'deb.debian.org'" >&2
exit 100
SH
cat >"$bin/dpkg-query" <<SH
#!$(command -v bash)
echo "dpkg-query: no packages found matching \${!#}" >&2
exit 1
SH
# What an environment module provides: cmake, ninja, compilers, Open MPI, hwloc through pkg-config.
cat >"$tmp/pkg-config" <<SH
#!$(command -v bash)
[ "\$1" = --exists ] && [ "\$2" = hwloc ] && exit 0
exit 1
SH
chmod +x "$bin/apt-get" "$bin/dpkg-query" "$tmp/pkg-config"
module_tools=(cmake ninja cc c++ mpicc mpirun)
provide() { # the tools a "module load" put on PATH
  local t
  for t in "$@"; do
    if [ "$t" = pkg-config ]; then ln -sf "$tmp/pkg-config" "$bin/pkg-config"; else ln -sf "$(type -P true)" "$bin/$t"; fi
  done
}

# run <name> <script> [VAR=value...]: the script in its deps-only mode on this node, as root.
run() {
  local name=$1 script=$2
  shift 2
  rm -f "$tmp/apt.log"
  env -i PATH="$bin" HOME="$tmp" ACX_DEPS_ONLY=1 ACX_DEPS_INCLUDE_DIRS="$tmp/include" "$@" \
    bash "$src/scripts/$script" >"$tmp/$name.out" 2>&1
  echo $? >"$tmp/$name.rc"
  sed "s/^/  $name| /" "$tmp/$name.out"
}
rc() { cat "$tmp/$1.rc"; }
has() { grep -q -- "$2" "$tmp/$1.out" || fail "$1: no line matching '$2'"; }
hasnt() { ! grep -q -- "$2" "$tmp/$1.out" || fail "$1: a line matches '$2'"; }

provide "${module_tools[@]}" pkg-config
id_root() { printf '#!%s\necho 0\n' "$(command -v bash)" >"$bin/id"; chmod +x "$bin/id"; }
rm -f "$bin/id"
id_root

# 1. bench.sh with the module's tools: only gnuplot is missing; apt-get fails; it goes on.
run bench bench.sh
[ "$(rc bench)" = 0 ] || fail "bench.sh stopped (status $(rc bench)) though cmake, ninja, MPI and hwloc are on PATH"
has bench "no package registry answered"
has bench "missing optional gnuplot-nox: no benchmark plot"
has bench "dependencies checked, stopping here"
for p in cmake ninja-build libopenmpi-dev openmpi-bin libhwloc-dev gfortran libcunit1-dev clang slurmctld munge; do
  grep -qw -- "$p" "$tmp/apt.log" && fail "bench.sh asked apt-get for $p (on PATH, or not needed by the benchmark)"
done
grep -q "install.*gnuplot-nox" "$tmp/apt.log" && fail "bench.sh tried to install though apt-get update failed"
grep -q "update" "$tmp/apt.log" || fail "bench.sh never asked the registry"

# 2. test.sh on the same node: CUnit is required there; without it test.sh stops and says so.
run test_nocunit test.sh
[ "$(rc test_nocunit)" != 0 ] || fail "test.sh went on without CUnit"
has test_nocunit "cannot go on: missing required libcunit1-dev"

# 3. CUnit's header on the include path (a module's CPATH): test.sh goes on, naming every skip.
mkdir -p "$tmp/cunit/CUnit" && : >"$tmp/cunit/CUnit/CUnit.h"
run test test.sh CPATH="$tmp/cunit"
[ "$(rc test)" = 0 ] || fail "test.sh stopped (status $(rc test)) though only optional packages are missing"
has test "missing optional gfortran: no Fortran module"
has test "missing optional clang: the clang fuzzers are skipped"
has test "missing optional slurmctld: the Slurm test is skipped"
# Lmod is found by its init script's path, which this node's PATH cannot hide.
[ -e /usr/share/lmod/lmod/init/bash ] || has test "missing optional lmod: the modulefile test is skipped"
has test "going on without"
hasnt test "mpich" # the MPICH configuration is CI's

# 4. Under CI=true every test must run: the same node fails, naming what is missing.
run test_ci test.sh CPATH="$tmp/cunit" CI=true
[ "$(rc test_ci)" != 0 ] || fail "test.sh under CI=true went on with optional packages missing"
has test_ci "CI=true runs every test: missing .*mpich"

# 5. bench.sh without cmake on PATH: stops, naming it.
rm "$bin/cmake"
run bench_nocmake bench.sh
[ "$(rc bench_nocmake)" != 0 ] || fail "bench.sh went on without cmake"
has bench_nocmake "cannot go on: missing required cmake"

# 6. ACX_NO_INSTALL=1: apt-get is never called.
provide cmake
run bench_noinstall bench.sh ACX_NO_INSTALL=1
[ "$(rc bench_noinstall)" = 0 ] || fail "bench.sh with ACX_NO_INSTALL=1 stopped"
[ ! -e "$tmp/apt.log" ] || fail "ACX_NO_INSTALL=1 still called apt-get: $(cat "$tmp/apt.log")"
has bench_noinstall "not installing gnuplot-nox"

echo "deps_test: PASS"
