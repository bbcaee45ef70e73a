#!/usr/bin/env bash
# Installs the build into a temporary prefix (no rebuild), builds a Fortran program against the
# installed module and libraries the two ways docs/fortran.md tells users to -- the MPI Fortran
# wrapper, and CMake with find_package(acx) and acx::acx_fortran -- and runs both on 2 ranks with
# --check.
#   mpif90_test.sh <build dir> <program.f90> <mpif90> <mpiexec> <Fortran compiler> <generator>
# ACX_MPIEXEC_OVERSUBSCRIBE: as in tests/rebuild/resilient_test.sh (default --oversubscribe).
set -euo pipefail
build=$1 program=$2 mpif90=$3 mpiexec=$4 fc=$5 generator=$6
tmp=$(mktemp -d "${TMPDIR:-/tmp}/acx-fortran.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
fail() { echo "mpif90_test: FAIL: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 || { tail -20 "$tmp/install.log" >&2; fail "install"; }
mod=$(find "$prefix" -name acx.mod | head -1)
[ -n "$mod" ] || fail "acx.mod not installed"
lib=$(find "$prefix" -name 'libacx_fortran.so' | head -1)
[ -n "$lib" ] || fail "libacx_fortran.so not installed"
libdir=$(dirname "$lib")
[ "$(dirname "$mod")" = "$prefix/include/acx/fortran" ] || fail "acx.mod in $(dirname "$mod"), not include/acx/fortran"

# The installed libacx must find the installed executor itself.
unset ACX_EXECUTOR_PATH
echo "mpif90_test: $mpif90 -I$prefix/include/acx/fortran $(basename "$program") -L$libdir -lacx_fortran -lacx"
"$mpif90" -o "$tmp/prog" "$program" -I"$prefix/include/acx/fortran" -L"$libdir" -lacx_fortran -lacx \
  -Wl,-rpath,"$libdir" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log" >&2; fail "$mpif90 could not build the program"; }
run() { # program: 2 ranks, checked against the serial run
  local out
  # shellcheck disable=SC2086 # the flag is one word or none
  out=$(timeout 120 "$mpiexec" -n 2 ${ACX_MPIEXEC_OVERSUBSCRIBE---oversubscribe} "$1" --check --steps 300 2>&1) || { echo "$out" >&2; fail "$1 failed"; }
  echo "$out"
  grep -q "check: OK" <<<"$out" || fail "$1 printed no 'check: OK' line"
}
run "$tmp/prog"

echo "mpif90_test: find_package(acx) consumer, target acx::acx_fortran"
mkdir -p "$tmp/src"
cp "$program" "$tmp/src/prog.f90"
cat >"$tmp/src/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(acx_fortran_consumer LANGUAGES C Fortran)
find_package(MPI REQUIRED COMPONENTS Fortran)
find_package(acx REQUIRED)
if(NOT TARGET acx::acx_fortran)
  message(FATAL_ERROR "the installed acx has no acx::acx_fortran")
endif()
add_executable(prog prog.f90)
target_link_libraries(prog PRIVATE acx::acx_fortran MPI::MPI_Fortran)
CMAKE
# The MPI Fortran of this build, not whichever mpif90 comes first (Open MPI and MPICH may both be there).
cmake -S "$tmp/src" -B "$tmp/cbuild" -G "$generator" -DCMAKE_Fortran_COMPILER="$fc" -DCMAKE_PREFIX_PATH="$prefix" \
  -DMPI_Fortran_COMPILER="$mpif90" \
  >"$tmp/cmake.log" 2>&1 || { cat "$tmp/cmake.log" >&2; fail "configure of the CMake consumer"; }
cmake --build "$tmp/cbuild" >"$tmp/cbuild.log" 2>&1 || { cat "$tmp/cbuild.log" >&2; fail "build of the CMake consumer"; }
run "$tmp/cbuild/prog"
echo "mpif90_test: OK"
