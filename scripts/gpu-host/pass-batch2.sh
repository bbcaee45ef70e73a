#!/bin/bash
# Pass 18 (session 13, the device time's last 8 minutes): the batches after the fix (one count per
# batch): the own path's GPU tests that failed in pass 17, then the small all-reduces at 2 ranks
# (batches of 16 with PDL / batches of one with PDL / the NCCL path, 2 interleaved rounds) and raw
# NCCL's graph floor at 8 B. Results under /tmp/res, DONE when finished.
R=/tmp/res; rm -rf $R; mkdir -p $R/c0 $R/d $R/f; B=scripts/gpu-host/batch.sh
S=/tmp/acx-clean; BB=$S/build-gpu
nvidia-smi -L > $R/main.txt 2>&1
OUT=$R bash $B build >> $R/main.txt 2>&1 || { echo BUILD FAILED >> $R/main.txt; touch $R/DONE; exit; }
OUT=$R/c0 CTEST_R="test_peer_exec_gpu|test_coll_peer_cuda_np2" CTEST_T=200 bash $B ctestr > $R/c0.txt 2>&1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 ACX_EXECUTOR_PATH=$BB/tools/acx-executor
run() {
  local name=$1; shift
  env "$@" timeout 60 mpirun -np 2 --bind-to none -x NCCL_NVLS_ENABLE -x ACX_EXECUTOR_PATH -x ACX_COLL_PEER \
    -x ACX_COLL_PEER_BATCH -x ACX_COLL_PEER_PDL $BB/bench/allreduce/acx-allreduce-bench --compare -b 8 -e 64K -f 8 -n 500 -w 50 -d float \
    > $R/d/$name.txt 2>&1
  echo "$name rc=$?" >> $R/d-small.txt; grep -E "^ +[0-9]+ " $R/d/$name.txt | sed "s/^/$name /" >> $R/d-small.txt
}
for rep in 1 2; do for v in 1:16:1 1:1:1 0:1:0; do IFS=: read -r on bt pdl <<<"$v"
  run small-$on-$bt-$pdl-$rep ACX_COLL_PEER=$on ACX_COLL_PEER_BATCH=$bt ACX_COLL_PEER_PDL=$pdl
done; done
timeout 40 mpirun -np 2 --bind-to none -x NCCL_NVLS_ENABLE $BB/bench/allreduce/acx-nccl-floor 8 3000 > $R/f/floor-8.txt 2>&1
touch $R/DONE
