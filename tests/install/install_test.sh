#!/usr/bin/env bash
# Installs the current build into a temporary prefix (no rebuild) and builds two outside
# projects against it, one through find_package(acx), one through pkg-config, then runs both.
#   install_test.sh <build dir> <consumer source dir> <C compiler> <cmake generator> <version>
# ACX_CONSUMER_CFLAGS: extra flags for the consumers (the sanitizer flags of a sanitizer build).
# ACX_DOC_PROGRAM=<page.md> ACX_MPIEXEC=<mpiexec>: also assemble the walk-through program from the
# page's C blocks (doc_blocks.sh: each follows a "getting-started:program" marker), build it with
# pkg-config and with the page's CMake project (the "getting-started:cmake" block), run the first
# on 2 ranks of the host device kind and check the lines the page says it prints
# (ACX_MPIEXEC_OVERSUBSCRIBE: the launcher's flag for more ranks than cores, default --oversubscribe).
set -euo pipefail
build=$1 consumer=$2 cc=$3 generator=$4 version=$5
flags=${ACX_CONSUMER_CFLAGS:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/acx-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

fail() { echo "install_test: FAIL: $*" >&2; exit 1; }
run_logged() { # log file, command...: keeps the output quiet unless the command fails
  local log=$1; shift
  "$@" >"$log" 2>&1 || { tail -40 "$log" >&2; fail "$* (see above)"; }
}

run_logged "$tmp/install.log" cmake --install "$build" --prefix "$prefix"
pc=$(find "$prefix" -name acx.pc -path '*/pkgconfig/*' | head -1)
cfg=$(find "$prefix" -name acxConfig.cmake | head -1)
[ -n "$pc" ] || fail "acx.pc not installed"
[ -n "$cfg" ] || fail "acxConfig.cmake not installed"
[ -f "$(dirname "$cfg")/acxConfigVersion.cmake" ] || fail "acxConfigVersion.cmake not installed"
libdir=$(dirname "$(dirname "$pc")")
lib=$libdir/libacx.so
[ -e "$lib" ] || fail "libacx.so not in $libdir"
for h in status.h config.h version.h; do
  [ -f "$prefix/include/acx/$h" ] || fail "header acx/$h not installed"
done
[ -x "$prefix/bin/acx-info" ] || fail "acx-info not installed"
# Whatever the build produced must be installed where the runtime looks for it.
if [ -x "$build/tools/acx-executor" ]; then
  [ -x "$prefix/bin/acx-executor" ] || fail "acx-executor built but not installed in bin/"
fi
if [ -d "$build/bench" ]; then
  while IFS= read -r b; do
    [ -x "$prefix/bin/$(basename "$b")" ] || fail "benchmark $(basename "$b") built but not installed in bin/"
  done < <(find "$build/bench" -mindepth 2 -maxdepth 2 -type f -perm -u+x ! -name '*.*')
fi
"$prefix/bin/acx-info" >"$tmp/info.log" 2>&1 || { cat "$tmp/info.log" >&2; fail "installed acx-info does not run"; }
grep -q "^# acx $version\$" "$tmp/info.log" || fail "installed acx-info does not report version $version"
grep -q "^# cuda architectures: ." "$tmp/info.log" || fail "installed acx-info does not report the CUDA architectures"
echo "install_test: installed into $prefix ($(find "$prefix" -type f | wc -l) files)"

# The actor runtime arrives in stages; exercise it as soon as the installed library has it.
actors=OFF
syms=$(nm -D --defined-only "$lib") # whole, not piped into grep -q: pipefail would see SIGPIPE
grep -qw acx_system_create <<<"$syms" && actors=ON
device=OFF
[ $actors = ON ] && grep -qw acx_device_open <<<"$syms" && [ -f "$prefix/include/acx/device.h" ] && device=ON
# The installed libacx must find the installed executor itself, not the build's (ctest sets this).
unset ACX_EXECUTOR_PATH

echo "install_test: find_package(acx) consumer (actor system: $actors, host device: $device)"
run_logged "$tmp/cmake-configure.log" cmake -S "$consumer" -B "$tmp/cmake-build" -G "$generator" \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$flags" -DCMAKE_PREFIX_PATH="$prefix" \
  -DACX_CONSUMER_ACTORS=$actors -DACX_CONSUMER_DEVICE=$device
run_logged "$tmp/cmake-build.log" cmake --build "$tmp/cmake-build"
out=$(timeout 60 "$tmp/cmake-build/acx_consumer" "$version" 2>&1) || fail "find_package consumer failed: $out"
echo "$out"
grep -q "^acx consumer: ok $version\$" <<<"$out" || fail "find_package consumer printed no success line"

echo "install_test: pkg-config consumer"
export PKG_CONFIG_PATH=$libdir/pkgconfig
pkg-config --exists --print-errors acx || fail "pkg-config cannot resolve acx"
[ "$(pkg-config --modversion acx)" = "$version" ] || fail "pkg-config reports version $(pkg-config --modversion acx)"
# Each installed header must stand alone (no internal header, its own includes) in C17 and C++.
for h in "$prefix"/include/acx/*.h; do
  name=acx/$(basename "$h")
  printf '#include <%s>\nint acx_header_check;\n' "$name" >"$tmp/hdr.c"
  # shellcheck disable=SC2046,SC2086 # pkg-config output and flags are word lists
  "$cc" -std=c17 -Wall -Wextra -Werror $flags -fsyntax-only $(pkg-config --cflags acx) "$tmp/hdr.c" \
    >"$tmp/hdr.log" 2>&1 || { cat "$tmp/hdr.log" >&2; fail "$name does not compile alone (C17)"; }
  if command -v c++ >/dev/null; then
    cp "$tmp/hdr.c" "$tmp/hdr.cc"
    # The deprecated MPI C++ bindings that mpi.h pulls into C++ do not pass -Wextra -Werror.
    # shellcheck disable=SC2046
    c++ -std=c++17 -Wall -Wextra -Werror -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX -fsyntax-only \
      $(pkg-config --cflags acx) "$tmp/hdr.cc" \
      >"$tmp/hdr.log" 2>&1 || { cat "$tmp/hdr.log" >&2; fail "$name does not compile alone (C++17)"; }
  fi
done
echo "install_test: $(find "$prefix/include/acx" -name '*.h' | wc -l) installed headers compile alone"
defs=""
[ $actors = ON ] && defs="-DACX_CONSUMER_ACTORS=1"
[ $device = ON ] && defs="$defs -DACX_CONSUMER_DEVICE=1"
# shellcheck disable=SC2046,SC2086 # pkg-config output and flags are word lists
run_logged "$tmp/pc-build.log" "$cc" $flags $defs -o "$tmp/pc_consumer" "$consumer/main.c" \
  $(pkg-config --cflags --libs acx) -Wl,-rpath,"$libdir"
out=$(timeout 60 "$tmp/pc_consumer" "$version" 2>&1) || fail "pkg-config consumer failed: $out"
echo "$out"
grep -q "^acx consumer: ok $version\$" <<<"$out" || fail "pkg-config consumer printed no success line"
# The installed examples build against the installed tree as the docs say (compile and link only:
# the mpi tests run them).
example=$prefix/share/acx/examples/resilient_allreduce.c
[ -f "$example" ] || fail "examples/resilient_allreduce.c not installed in share/acx/examples"
[ -f "$prefix/share/acx/examples/fortran/heat1d.f90" ] || fail "examples/fortran/heat1d.f90 not installed"
if [ -x "$build/examples/resilient_allreduce" ]; then # built where acx has MPI
  # shellcheck disable=SC2046,SC2086 # pkg-config output and flags are word lists
  run_logged "$tmp/example-build.log" "$cc" -std=c17 -Wall -Wextra -Werror $flags -o "$tmp/resilient_allreduce" \
    "$example" $(pkg-config --cflags --libs acx) -Wl,-rpath,"$libdir"
  echo "install_test: share/acx/examples/resilient_allreduce.c builds against the install"
fi
if [ -n "${ACX_DOC_PROGRAM:-}" ]; then
  page=$ACX_DOC_PROGRAM
  blocks=$(dirname "$0")/doc_blocks.sh
  echo "install_test: the walk-through of $(basename "$page")"
  mkdir "$tmp/doc"
  "$blocks" "$page" program c >"$tmp/doc/walkthrough.c" || fail "the C blocks of $page (see above)"
  "$blocks" "$page" cmake cmake >"$tmp/doc/CMakeLists.txt" || fail "the CMake block of $page (see above)"
  # shellcheck disable=SC2046,SC2086
  run_logged "$tmp/doc-build.log" "$cc" -std=c17 -Wall -Wextra -Werror $flags -o "$tmp/doc/walkthrough" \
    "$tmp/doc/walkthrough.c" $(pkg-config --cflags --libs acx) -Wl,-rpath,"$libdir"
  run_logged "$tmp/doc-cmake-configure.log" cmake -S "$tmp/doc" -B "$tmp/doc/build" -G "$generator" \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$flags -Wall -Wextra -Werror" -DCMAKE_PREFIX_PATH="$prefix"
  run_logged "$tmp/doc-cmake-build.log" cmake --build "$tmp/doc/build"
  [ -x "$tmp/doc/build/walkthrough" ] || fail "the page's CMake project built no walkthrough"
  echo "install_test: built with pkg-config and with the page's CMakeLists.txt; running on 2 ranks"
  # stdout alone: acx's log lines (stderr) may land in the middle of a printed line.
  # shellcheck disable=SC2086 # the flag is one word or none
  out=$(timeout 120 "$ACX_MPIEXEC" -n 2 ${ACX_MPIEXEC_OVERSUBSCRIBE---oversubscribe} "$tmp/doc/walkthrough" \
    2>"$tmp/doc/stderr") || { echo "$out"; cat "$tmp/doc/stderr"; fail "the walk-through failed under $ACX_MPIEXEC -n 2"; } >&2
  echo "$out"
  expect_lines() { # count, regular expression: lines of the output the page shows
    [ "$(grep -cE "$2" <<<"$out")" = "$1" ] ||
      { cat "$tmp/doc/stderr" >&2; fail "the walk-through printed not $1 line(s) matching '$2', as the page shows"; }
  }
  expect_lines 2 '^rank [01] of 2 on node 0 of 1 \(.*\): the actor says (2\^2 = 4|3\^2 = 9)$'
  expect_lines 1 '^rank 1: executor restarted, generation 1 -> 2 \(.+\)$'
  expect_lines 2 '^rank [01]: world rebuilt at epoch 1 \(started by rank 1: ACX_ERR_DEVICE_LOST\)$'
  expect_lines 2 '^rank [01]: buffers, all-reduce, tokens, remote get/put, rebuild and teardown: all checked$'
fi
echo "install_test: PASS"
