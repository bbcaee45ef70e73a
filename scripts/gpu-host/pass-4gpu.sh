#!/bin/bash
# One detached pass on a 4-GPU host for what the ninth session left open (issue 18) and the tenth
# added (issue 17's own all-reduce: its GPU tests run in step 3, step 4 measures it), from the repo
# root with .gpu/src.tar and .gpu/debs (see batch.sh); results under /tmp/res, DONE when finished:
#   setsid nohup bash scripts/gpu-host/pass-4gpu.sh >/dev/null 2>&1 < /dev/null &
# then poll (.gpu/poll.sh). Order: what decides the open problems first, the long checks last.
R=/tmp/res; rm -rf $R; mkdir -p $R/a $R/b0 $R/b1 $R/c; B=scripts/gpu-host/batch.sh
{ nvidia-smi -L; nvidia-smi topo -m; } > $R/main.txt 2>&1
OUT=$R bash $B build >> $R/main.txt 2>&1 || { echo BUILD FAILED >> $R/main.txt; touch $R/DONE; exit; }
# 1. 2 nodes x 2 GPUs: test_coll, test_remote (never run there), test_rebuild (the wrong ACX_OK, the channels), resilient, sweep
OUT=$R/a bash $B smn > $R/a.txt 2>&1
# 2. the rebuild with second sticky faults: the example's teardown timed; NCCL's cuMem on, then off (2 rounds each)
for cm in 1 0; do OUT=$R/b$cm SRB_REPS=2 SRB_X="-x NCCL_CUMEM_ENABLE=$cm" bash $B srb > $R/b-cumem$cm.txt 2>&1; done
# 3. every gpu / gpu-mpi test on GPUs 0,1 while gpu-multinode runs on GPUs 2,3; then bf16 8 GiB with the faster data
(CUDA_VISIBLE_DEVICES=0,1 OUT=$R/c CTEST_E="multinode" CTEST_T=560 bash $B ctestr > $R/c.txt 2>&1) &
(CUDA_VISIBLE_DEVICES=2,3 OUT=$R/c MT_T=500 bash $B mtests > $R/c-mt.txt 2>&1) &
wait
OUT=$R/c SBIG_T=300 bash $B sbig > $R/c-sbig.txt 2>&1
# 4. the own all-reduce (ACX_COLL_PEER) on every GPU beside raw NCCL, then 2 ranks per GPU under MPS
mkdir -p $R/d; OUT=$R/d bash $B peer > $R/d-peer.txt 2>&1; OUT=$R/d bash $B peermps > $R/d-peermps.txt 2>&1
touch $R/DONE
