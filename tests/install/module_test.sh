#!/usr/bin/env bash
# The Lmod modulefile (cmake/acx.lua.in): installs the build into a temporary prefix (no rebuild),
# then with Debian's Lmod `module use <prefix>/share/modulefiles` and `module load acx`, and with
# nothing else set: acx-info from PATH, pkg-config finds acx, an outside project builds through
# find_package(acx) and through pkg-config and runs (libacx through LD_LIBRARY_PATH, no rpath);
# `module unload acx` takes it all back. Skipped (77) without Lmod, except under CI=true.
#   module_test.sh <build dir> <consumer source dir> <C compiler> <cmake generator> <version>
# ACX_CONSUMER_CFLAGS: extra flags for the consumers (the sanitizer flags of a sanitizer build).
set -euo pipefail
build=$1 consumer=$2 cc=$3 generator=$4 version=$5
flags=${ACX_CONSUMER_CFLAGS:-}
fail() { echo "module_test: FAIL: $*" >&2; exit 1; }
init=${LMOD_PKG:-/usr/share/lmod/lmod}/init/bash
if [ ! -f "$init" ]; then
  [ "${CI:-}" = true ] && fail "Lmod is not installed ($init): CI must run this test (apt-get install lmod)"
  echo "module_test: Lmod not installed ($init): skipped"
  exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/acx-module.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
run_logged() { # log file, command...
  local log=$1; shift
  "$@" >"$log" 2>&1 || { tail -40 "$log" >&2; fail "$* (see above)"; }
}
run_logged "$tmp/install.log" cmake --install "$build" --prefix "$prefix"
modfile=$(find "$prefix" -path "*/modulefiles/acx/$version.lua")
[ -n "$modfile" ] || fail "no modulefiles/acx/$version.lua installed"
moddir=$(dirname "$(dirname "$modfile")")

# A user's shell: Lmod's `module`, nothing of acx on any path.
unset ACX_EXECUTOR_PATH CMAKE_PREFIX_PATH PKG_CONFIG_PATH
export LD_LIBRARY_PATH='' MODULEPATH=''
set +u # Lmod's shell functions read unset variables
# shellcheck disable=SC1090
. "$init"
module use "$moddir"
avail=$(module --terse avail acx 2>&1)
grep -q "^acx/$version" <<<"$avail" || fail "module avail does not list acx/$version: $avail"
module load acx || fail "module load acx"
set -u
module_list=$(module --terse list 2>&1)
grep -q "^acx/$version" <<<"$module_list" || fail "acx/$version not loaded: $module_list"
echo "module_test: module load acx ($modfile)"

[ "$(command -v acx-info)" = "$prefix/bin/acx-info" ] || fail "acx-info on PATH is '$(command -v acx-info)', not $prefix/bin/acx-info"
info=$(acx-info 2>&1) || fail "acx-info from the module failed: $info"
grep -q "^# acx $version\$" <<<"$info" || fail "acx-info from the module does not report $version"
[ "$(pkg-config --modversion acx)" = "$version" ] || fail "pkg-config --modversion acx: '$(pkg-config --modversion acx 2>&1)'"

echo "module_test: find_package(acx) through CMAKE_PREFIX_PATH"
run_logged "$tmp/cmake-configure.log" cmake -S "$consumer" -B "$tmp/cmake-build" -G "$generator" \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$flags" -DCMAKE_SKIP_RPATH=ON
run_logged "$tmp/cmake-build.log" cmake --build "$tmp/cmake-build"
out=$(timeout 60 "$tmp/cmake-build/acx_consumer" "$version" 2>&1) || fail "find_package consumer failed: $out"
grep -q "^acx consumer: ok $version\$" <<<"$out" || fail "find_package consumer: $out"

echo "module_test: pkg-config --cflags --libs acx through PKG_CONFIG_PATH, libacx through LD_LIBRARY_PATH"
# shellcheck disable=SC2046,SC2086 # pkg-config output and flags are word lists
run_logged "$tmp/pc-build.log" "$cc" $flags -o "$tmp/pc_consumer" "$consumer/main.c" $(pkg-config --cflags --libs acx)
out=$(timeout 60 "$tmp/pc_consumer" "$version" 2>&1) || fail "pkg-config consumer failed: $out"
grep -q "^acx consumer: ok $version\$" <<<"$out" || fail "pkg-config consumer: $out"

set +u
module unload acx || fail "module unload acx"
set -u
! command -v acx-info >/dev/null || fail "acx-info still on PATH after module unload: $(command -v acx-info)"
[[ ":${PKG_CONFIG_PATH:-}:" != *":$prefix/"* ]] || fail "PKG_CONFIG_PATH keeps $prefix after module unload"
[[ ":${LD_LIBRARY_PATH:-}:" != *":$prefix/"* ]] || fail "LD_LIBRARY_PATH keeps $prefix after module unload"
echo "module_test: PASS"
