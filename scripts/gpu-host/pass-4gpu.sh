#!/bin/bash
# One detached pass on a 4-GPU host (pass 10, session 11): the own all-reduce's second kernel and
# executor path, NCCL's cuMem off by default, the executor's HOST_UNREGISTER that no longer
# waits; from the repo root with .gpu/src.tar and .gpu/debs (see batch.sh); results under
# /tmp/res, DONE when finished:
#   setsid nohup bash scripts/gpu-host/pass-4gpu.sh >/dev/null 2>&1 < /dev/null &
# then poll (.gpu/poll.sh). Order: what decides the most first.
R=/tmp/res; rm -rf $R; mkdir -p $R/a $R/b $R/c0 $R/c1 $R/d $R/e; B=scripts/gpu-host/batch.sh
NG=$(nvidia-smi -L | grep -c '^GPU')
{ nvidia-smi -L; nvidia-smi topo -m; } > $R/main.txt 2>&1
OUT=$R bash $B build >> $R/main.txt 2>&1 || { echo BUILD FAILED >> $R/main.txt; touch $R/DONE; exit; }
# 1. GPUs 0,1: the own all-reduce's GPU tests and the device/engine tests; GPUs 2,3: the tests that hung or failed
(CUDA_VISIBLE_DEVICES=0,1 OUT=$R/d CTEST_R="peer|device_gpu|engine_cuda" CTEST_T=300 bash $B ctestr > $R/c-peer.txt 2>&1) &
(CUDA_VISIBLE_DEVICES=2,3 OUT=$R/e CTEST_R="resilient_allreduce_cuda_np2|test_remote_cuda_np2|test_rebuild_cuda_np2" CTEST_T=300 bash $B ctestr > $R/c-res.txt 2>&1) &
wait
# 2. the own all-reduce beside raw NCCL at NG and 2 GPUs
OUT=$R/d PEER_NOTEST=1 PEER_REPS=2 PEER_NPS="$NG 2" PEER_F=2 bash $B peer pfloor > $R/d-peer.txt 2>&1
# 3. the rebuild with the new default (NCCL_CUMEM_ENABLE unset: the executor makes it 0)
OUT=$R/b SRB_REPS=2 bash $B srb > $R/b-srb.txt 2>&1
# 4. every other gpu / gpu-mpi test, in two halves on two GPU pairs
(CUDA_VISIBLE_DEVICES=0,1 OUT=$R/c0 CTEST_E="multinode|peer|device_gpu|engine_cuda|resilient_allreduce_cuda_np2|test_remote_cuda_np2|test_rebuild_cuda_np2" CTEST_I=1,,2 CTEST_T=400 bash $B ctestr > $R/c0.txt 2>&1) &
(CUDA_VISIBLE_DEVICES=2,3 OUT=$R/c1 CTEST_E="multinode|peer|device_gpu|engine_cuda|resilient_allreduce_cuda_np2|test_remote_cuda_np2|test_rebuild_cuda_np2" CTEST_I=2,,2 CTEST_T=400 bash $B ctestr > $R/c1.txt 2>&1) &
wait
touch $R/DONE
