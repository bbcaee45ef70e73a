#!/bin/bash
# One detached pass on a 4-GPU host (pass 14, session 12; run twice, the second time with the suite
# following the coll on 2 GPUs): the own all-reduce default (ACX_COLL_PEER=-1, auto) from 3 ranks
# only: test_coll --peer-auto at 2 ranks (off), 4 ranks on
# 4 GPUs (on) and 4 ranks on 2 GPUs (sharing: off); the own path asked for at 2 ranks, also
# inline; the kill test on the default path. From the repo root with .gpu/src.tar and .gpu/debs
# (see batch.sh); results under /tmp/res, DONE when finished:
#   setsid nohup bash scripts/gpu-host/pass-4gpu.sh >/dev/null 2>&1 < /dev/null &
# then poll (.gpu/poll.sh).
R=/tmp/res; rm -rf $R; mkdir -p $R/c4 $R/c2; B=scripts/gpu-host/batch.sh
{ nvidia-smi -L; } > $R/main.txt 2>&1
OUT=$R bash $B build >> $R/main.txt 2>&1 || { echo BUILD FAILED >> $R/main.txt; touch $R/DONE; exit; }
OUT=$R/c4 CTEST_R="test_coll_auto_cuda_np4|test_coll_peer_cuda_hier_np4" CTEST_T=300 bash $B ctestr > $R/c4.txt 2>&1
CUDA_VISIBLE_DEVICES=0,1 OUT=$R/c2 CTEST_R="test_coll_auto_cuda_np4|test_coll_peer_cuda_hier_np4" CTEST_T=300 bash $B ctestr > $R/c2.txt 2>&1
grep -h "peer-auto" $R/c4/ctest-r.txt $R/c2/ctest-r.txt > $R/auto.txt
touch $R/DONE
