#!/bin/bash
# One detached pass on a 4-GPU host for what sessions 9 and 10 left unrun on a GPU (issue 17's own
# all-reduce, issue 18's open problems), from the repo root with .gpu/src.tar and .gpu/debs (see
# batch.sh); results under /tmp/res, DONE when finished:
#   setsid nohup bash scripts/gpu-host/pass-4gpu.sh >/dev/null 2>&1 < /dev/null &
# then poll (.gpu/poll.sh). Order: what decides the most first, the long checks last.
R=/tmp/res; rm -rf $R; mkdir -p $R/a $R/b0 $R/b1 $R/c $R/d; B=scripts/gpu-host/batch.sh
{ nvidia-smi -L; nvidia-smi topo -m; } > $R/main.txt 2>&1
OUT=$R bash $B build >> $R/main.txt 2>&1 || { echo BUILD FAILED >> $R/main.txt; touch $R/DONE; exit; }
# 1. GPUs 0,1: the own all-reduce's GPU tests, then every other gpu / gpu-mpi test; GPUs 2,3: gpu-multinode
(export CUDA_VISIBLE_DEVICES=0,1; OUT=$R/d CTEST_R=peer CTEST_T=300 bash $B ctestr > $R/c-peer.txt 2>&1
 OUT=$R/c CTEST_E="multinode|peer" CTEST_T=480 bash $B ctestr > $R/c.txt 2>&1) &
(CUDA_VISIBLE_DEVICES=2,3 OUT=$R/c MT_T=400 bash $B mtests > $R/c-mt.txt 2>&1) &
wait
# 2. the own all-reduce beside raw NCCL at 4 and 2 GPUs, and raw NCCL's graph floor
OUT=$R/d PEER_NOTEST=1 PEER_REPS=2 PEER_NPS="$(nvidia-smi -L | grep -c '^GPU') 2" PEER_F=2 bash $B peer pfloor > $R/d-peer.txt 2>&1
# 3. 2 nodes x 2 GPUs (the wrong ACX_OK, the channels), then the rebuild with NCCL's cuMem off and on
OUT=$R/a bash $B smn > $R/a.txt 2>&1
for cm in 0 1; do OUT=$R/b$cm SRB_REPS=1 SRB_X="-x NCCL_CUMEM_ENABLE=$cm" bash $B srb > $R/b-cumem$cm.txt 2>&1; done
# 4. 2 ranks per GPU under MPS through the own path
OUT=$R/d PEER_REPS=2 bash $B peermps > $R/d-peermps.txt 2>&1
touch $R/DONE
