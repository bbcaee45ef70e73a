#!/usr/bin/env bash
# Runs acx-actor-bench and the CAF anchor (../shared/anchors/caf_bench.cpp) back to back with the
# same n and 2 worker threads, prints both programs' lines and the acx/CAF ratios.
# Usage: scripts/actor-vs-caf.sh [path/to/caf_bench.cpp]   (ACX_BENCH_N, ACX_BUILD_DIR override)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
caf_src=${1:-$root/../shared/anchors/caf_bench.cpp}
build=${ACX_BUILD_DIR:-$root/build}
n=${ACX_BENCH_N:-1000000}
threads=2

[ -f "$caf_src" ] || { echo "actor-vs-caf: no CAF anchor at $caf_src" >&2; exit 1; }
if [ ! -x "$build/bench/actor/acx-actor-bench" ]; then
  [ -f "$build/build.ninja" ] || [ -f "$build/Makefile" ] || cmake -S "$root" -B "$build" -G Ninja >/dev/null
  cmake --build "$build" -j2 --target acx-actor-bench >/dev/null
fi
g++ -O2 -std=c++17 "$caf_src" -o "$build/caf_bench" -lcaf_core -pthread

acx_out=$("$build/bench/actor/acx-actor-bench" "$n" "$threads")
caf_out=$("$build/caf_bench" "$n" "$threads")
echo "== acx-actor-bench $n $threads"
echo "$acx_out"
echo "== caf_bench $n $threads"
echo "$caf_out"
echo "== ratio (acx / CAF messages per second; ask: microseconds per ask, lower is better)"
{ echo "$acx_out" | sed 's/^/acx /'; echo "$caf_out" | sed 's/^/caf /'; } | awk '
  { rate[$1, $2] = $5; us[$1, $2] = $6 }
  END {
    printf "%-9s %14s %14s %9s\n", "workload", "acx msgs/s", "CAF msgs/s", "acx/CAF"
    split("pingpong fanin", w, " ")
    for (i = 1; i <= 2; i++)
      printf "%-9s %14.0f %14.0f %8.2fx\n", w[i], rate["acx", w[i]], rate["caf", w[i]],
             (rate["caf", w[i]] > 0 ? rate["acx", w[i]] / rate["caf", w[i]] : 0)
    printf "%-9s %11.3f us %11.3f us %8.2fx faster\n", "ask", us["acx", "ask"], us["caf", "ask"],
           (us["acx", "ask"] > 0 ? us["caf", "ask"] / us["acx", "ask"] : 0)
  }'
