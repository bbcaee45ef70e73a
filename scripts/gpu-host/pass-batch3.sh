#!/bin/bash
# Pass 19 (session 13, the last 5 minutes of device time; pass 18 ran the same with batches of one
# beside, from commit ec6fb3a): after pass 18 the batches were right
# but the rank outran the GPUs by more than the 256 operations a set keeps in flight
# (ACX_ERR_QUEUE_FULL in the benchmark); the executor now waits for the oldest. The own path's
# executor tests (test_back_to_back now sends 464 in a row), then the small all-reduces at 2
# ranks: batches of 16 with PDL beside the NCCL path and raw NCCL (--compare), raw NCCL's graph
# floor at 8 B. Results under /tmp/res, DONE when finished.
R=/tmp/res; rm -rf $R; mkdir -p $R/c0 $R/d $R/f; B=scripts/gpu-host/batch.sh
S=/tmp/acx-clean; BB=$S/build-gpu
nvidia-smi -L > $R/main.txt 2>&1
OUT=$R bash $B build >> $R/main.txt 2>&1 || { echo BUILD FAILED >> $R/main.txt; touch $R/DONE; exit; }
OUT=$R/c0 CTEST_R="test_peer_exec_gpu" CTEST_T=100 bash $B ctestr > $R/c0.txt 2>&1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 ACX_EXECUTOR_PATH=$BB/tools/acx-executor
run() {
  local name=$1; shift
  env "$@" timeout 40 mpirun -np 2 --bind-to none -x NCCL_NVLS_ENABLE -x ACX_EXECUTOR_PATH -x ACX_COLL_PEER \
    -x ACX_COLL_PEER_BATCH -x ACX_COLL_PEER_PDL $BB/bench/allreduce/acx-allreduce-bench --compare -b 8 -e 64K -f 8 -n 500 -w 50 -d float \
    > $R/d/$name.txt 2>&1
  echo "$name rc=$?" >> $R/d-small.txt; grep -E "^ +[0-9]+ " $R/d/$name.txt | sed "s/^/$name /" >> $R/d-small.txt
}
run small-1-16-1-1 ACX_COLL_PEER=1 ACX_COLL_PEER_BATCH=16 ACX_COLL_PEER_PDL=1
run small-0-1-0-1 ACX_COLL_PEER=0
timeout 30 mpirun -np 2 --bind-to none -x NCCL_NVLS_ENABLE $BB/bench/allreduce/acx-nccl-floor 8 3000 > $R/f/floor-8.txt 2>&1
run small-1-16-1-2 ACX_COLL_PEER=1 ACX_COLL_PEER_BATCH=16 ACX_COLL_PEER_PDL=1
touch $R/DONE
