#!/bin/bash
# Issue 15 item 7 on whatever GPU comes (one GPU is enough): acx-lib-bench, every case, twice, and
# the cuRAND case in both position modes; only the targets it needs are built. From the repo root
# with .gpu/src.tar and .gpu/debs; results under /tmp/res, DONE when finished:
#   setsid nohup bash scripts/gpu-host/pass-libs.sh >/dev/null 2>&1 < /dev/null &
R=/tmp/res; rm -rf $R; mkdir -p $R; S=/tmp/acx-clean; B=$S/build-gpu
export PATH="/usr/local/cuda/bin:$PATH" ACX_EXECUTOR_PATH=$B/tools/acx-executor
nvidia-smi -L > $R/main.txt 2>&1
rm -rf $S && mkdir -p $S && tar -xf .gpu/src.tar -C $S
cmake -S $S -B $B -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >$R/cfg.txt 2>&1 &&
  cmake --build $B -j 16 --target acx-lib-bench acx-executor >$R/build.txt 2>&1 || { echo BUILD FAILED >> $R/main.txt; touch $R/DONE; exit; }
for k in 1 2; do timeout 200 $B/bench/libs/acx-lib-bench > $R/libs-$k.txt 2>&1; echo "libs $k rc=$?" >> $R/main.txt; done
for w in never each; do timeout 120 $B/bench/libs/acx-lib-bench --only rand_normal -r 5 --raw-rand-offset $w > $R/randoff-$w.txt 2>&1; done
touch $R/DONE
