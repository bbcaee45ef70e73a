#!/bin/bash
# One detached pass on a 4-GPU host (pass 13, session 12): cuRAND normals with both sides drawing
# on (acx's executor no longer resets cuRAND's offset for a request that continues the last) and
# both going back to 0; the library table; the own all-reduce's small-message kernel, its
# one-shot and the NCCL path beside raw NCCL, with each rank's issue time per call (--json), on
# whatever 4-GPU host comes (pass 12's host ran the own path at 8.3 us where pass 11's ran it at
# 5.6-6.4). From the repo root with .gpu/src.tar and .gpu/debs (see batch.sh); results under
# /tmp/res, DONE when finished:
#   setsid nohup bash scripts/gpu-host/pass-4gpu.sh >/dev/null 2>&1 < /dev/null &
# then poll (.gpu/poll.sh).
R=/tmp/res; rm -rf $R; mkdir -p $R/d $R/e; B=scripts/gpu-host/batch.sh
NG=$(nvidia-smi -L | grep -c '^GPU')
{ nvidia-smi -L; nvidia-smi topo -m; nvidia-smi -q -d CLOCK,PERFORMANCE | grep -E "Graphics|SM|Memory|Clocks Event|Active|Idle" | head -20; lscpu | grep -E "Model name|MHz|^CPU\(s\)"; } > $R/main.txt 2>&1
OUT=$R bash $B build >> $R/main.txt 2>&1 || { echo BUILD FAILED >> $R/main.txt; touch $R/DONE; exit; }
OUT=$R/e bash $B randoff > $R/e-randoff.txt 2>&1
OUT=$R/e bash $B libs > $R/e-libs.txt 2>&1
OUT=$R/d PEER_NOTEST=1 PEER_REPS=2 PEER_NPS="2 $NG" PEER_F=8 PEER_V="1 1:0 0" bash $B peer pfloor > $R/d-peer.txt 2>&1
touch $R/DONE
