#!/bin/bash
# Pass 17 (session 13): the own all-reduce's batches of small all-reduces (ACX_COLL_PEER_BATCH) on
# whatever GPUs come (2 or more), most decisive first:
#   1. the GPU tests of the own path (test_peer_exec_gpu with its batch, clearing and batch-of-one
#      variants; test_peer_exec_gpu once more with the executors' launch counts logged), and
#      test_lib_blas (its readback test rewritten after pass 16);
#   2. acx-allreduce-bench --compare at 2 ranks (and at every GPU where more), 8 B - 256 KiB:
#      batches of 16 with and without programmatic dependent launch, batches of one, the NCCL path;
#      2 interleaved rounds; raw NCCL's graph replays beside (acx-nccl-floor);
#   3. issue 16: 2 ranks per GPU under MPS through the own path (batch.sh peermps, one round);
#   4. where the GPUs are H200: acx-lib-bench twice (issue 15).
# From the repo root with .gpu/src.tar and .gpu/debs; results under /tmp/res, DONE when finished:
#   setsid nohup bash scripts/gpu-host/pass-batch.sh >/dev/null 2>&1 < /dev/null &
R=/tmp/res; rm -rf $R; mkdir -p $R/c0 $R/d $R/e $R/f; B=scripts/gpu-host/batch.sh
S=/tmp/acx-clean; BB=$S/build-gpu
NG=$(nvidia-smi -L | grep -c '^GPU')
nvidia-smi -L > $R/main.txt 2>&1
OUT=$R bash $B build >> $R/main.txt 2>&1 || { echo BUILD FAILED >> $R/main.txt; touch $R/DONE; exit; }
OUT=$R/c0 CTEST_R="peer|auto|test_lib_blas$" CTEST_T=420 bash $B ctestr > $R/c0.txt 2>&1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 ACX_EXECUTOR_PATH=$BB/tools/acx-executor
ACX_DEBUG=INFO ACX_DEBUG_SUBSYS=COLL timeout 200 $BB/tests/device/test_peer_exec_process --cuda > $R/c0-launches.txt 2>&1
echo "rc=$?" >> $R/c0-launches.txt
NPS=$(printf '%s\n' $NG 2 | sort -rnu)
run() { # name np env... : acx-allreduce-bench --compare with the given environment, rows tagged
  local name=$1 np=$2; shift 2
  env "$@" timeout 120 mpirun -np $np --bind-to none -x NCCL_NVLS_ENABLE -x ACX_EXECUTOR_PATH -x ACX_COLL_PEER \
    -x ACX_COLL_PEER_BATCH -x ACX_COLL_PEER_PDL $BB/bench/allreduce/acx-allreduce-bench --compare $ARGS -d float \
    > $R/d/$name.txt 2>&1
  echo "$name rc=$?" >> $R/d-$KIND.txt; grep -E "^ +[0-9]+ " $R/d/$name.txt | sed "s/^/$name /" >> $R/d-$KIND.txt
}
KIND=small ARGS="-b 8 -e 256K -f 8 -n 500 -w 50"
for rep in 1 2; do for np in $NPS; do for v in 1:16:0 1:16:1 1:1:1 0:1:0; do IFS=: read -r on bt pdl <<<"$v"
  run small-$np-$on-$bt-$pdl-$rep $np ACX_COLL_PEER=$on ACX_COLL_PEER_BATCH=$bt ACX_COLL_PEER_PDL=$pdl
done; done; done
OUT=$R/f PFLOOR_SZ="8 4096 65536" FLOOR_N=3000 bash $B pfloor > $R/f-pfloor.txt 2>&1
OUT=$R/e PEER_REPS=1 bash $B peermps > $R/e-peermps.txt 2>&1
if nvidia-smi -L | grep -q H200; then # issue 15's H200 library run, where H200s came
  for k in 1 2; do CUDA_VISIBLE_DEVICES=0 timeout 200 $BB/bench/libs/acx-lib-bench > $R/libs-$k.txt 2>&1; echo "libs $k rc=$?" >> $R/main.txt; done
fi
touch $R/DONE
