#!/usr/bin/env bash
# Installs the build into a temporary prefix (no rebuild), compiles a Fortran program with the
# MPI Fortran wrapper against the installed module and libraries the way docs/fortran.md tells
# users to, and runs it on 2 ranks with --check.
#   mpif90_test.sh <build dir> <program.f90> <mpif90> <mpiexec>
set -euo pipefail
build=$1 program=$2 mpif90=$3 mpiexec=$4
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
out=$(timeout 120 "$mpiexec" -n 2 --oversubscribe "$tmp/prog" --check --steps 300 2>&1) || { echo "$out" >&2; fail "the program failed"; }
echo "$out"
grep -q "check: OK" <<<"$out" || fail "no 'check: OK' line"
echo "mpif90_test: OK"
