#!/bin/bash
# One detached pass on a 4-GPU host (pass 11, for the session after session 11): the own
# all-reduce's small-message kernel and 64-bit flags (commit 3f3c634, never run on a GPU), the
# 2 x 2 test_rebuild with session 11's fixes, then every GPU test. From the repo root with
# .gpu/src.tar and .gpu/debs (see batch.sh); results under /tmp/res, DONE when finished:
#   setsid nohup bash scripts/gpu-host/pass-4gpu.sh >/dev/null 2>&1 < /dev/null &
# then poll (.gpu/poll.sh). Order: what decides the most first. On a 2-GPU host run steps 1-2 only.
R=/tmp/res; rm -rf $R; mkdir -p $R/a $R/b $R/c0 $R/c1 $R/d $R/e; B=scripts/gpu-host/batch.sh
NG=$(nvidia-smi -L | grep -c '^GPU')
{ nvidia-smi -L; nvidia-smi topo -m; } > $R/main.txt 2>&1
OUT=$R bash $B build >> $R/main.txt 2>&1 || { echo BUILD FAILED >> $R/main.txt; touch $R/DONE; exit; }
# 1. the own all-reduce's GPU tests (the small-message kernel's border among them)
OUT=$R/d CTEST_R="peer" CTEST_T=300 bash $B ctestr > $R/c-peer.txt 2>&1
# 2. the own all-reduce beside raw NCCL at NG and 2 GPUs: the small-message kernel (up to 16 KiB)
#    against the one-shot alone (ACX_COLL_PEER_LL_KB=0) and the NCCL path (batch.sh PEER_V)
OUT=$R/d PEER_NOTEST=1 PEER_REPS=2 PEER_NPS="$NG 2" PEER_F=2 bash $B peer pfloor > $R/d-peer.txt 2>&1
# 3. 2 nodes x 2 GPUs: test_rebuild (the channels after a rebuild), test_remote, the example
[ "$NG" -ge 4 ] && OUT=$R/a bash $B smn > $R/a.txt 2>&1
# 4. every other gpu / gpu-mpi test, in two halves on two GPU pairs, and gpu-multinode
if [ "$NG" -ge 4 ]; then
  (CUDA_VISIBLE_DEVICES=0,1 OUT=$R/c0 CTEST_E="multinode|peer" CTEST_I=1,,2 CTEST_T=400 bash $B ctestr > $R/c0.txt 2>&1) &
  (CUDA_VISIBLE_DEVICES=2,3 OUT=$R/c1 CTEST_E="multinode|peer" CTEST_I=2,,2 CTEST_T=400 bash $B ctestr > $R/c1.txt 2>&1; CUDA_VISIBLE_DEVICES=2,3 OUT=$R/c1 MT_T=300 bash $B mtests > $R/c-mt.txt 2>&1) &
  wait
fi
# 5. issue 15's cuRAND case: is acx's 20 us per call cuRAND's state reset on a new offset?
OUT=$R/e bash $B randoff > $R/e-randoff.txt 2>&1
touch $R/DONE
