#!/bin/bash
# Issue 13's goals across simulated nodes, with enough rounds to tell a gap from loopback noise
# (raw NCCL's own medians over loopback sockets moved by up to 10 % between runs of 3 rounds):
# batch.sh mbench with 9 rounds per size and 10 iterations at 64 MiB - 1 GiB, on 2 GPUs. From the
# repo root with .gpu/src.tar and .gpu/debs; results under /tmp/res, DONE when finished:
#   setsid nohup bash scripts/gpu-host/pass-mbench.sh >/dev/null 2>&1 < /dev/null &
R=/tmp/res; rm -rf $R; mkdir -p $R/m; B=scripts/gpu-host/batch.sh
nvidia-smi -L > $R/main.txt 2>&1
OUT=$R bash $B build >> $R/main.txt 2>&1 || { echo BUILD FAILED >> $R/main.txt; touch $R/DONE; exit; }
CUDA_VISIBLE_DEVICES=0,1 OUT=$R/m MB_R=9 MB_N=10 MB_T=480 bash $B mbench > $R/m-mbench.txt 2>&1
touch $R/DONE
