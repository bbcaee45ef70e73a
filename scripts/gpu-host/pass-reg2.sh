#!/bin/bash
# Issue 16's mapped path with the registration table in device memory (session 25): the registration
# and two-shot-with-groups GPU tests, then --per-gpu under MPS at 2 and 4 ranks per GPU, 4 MiB - 1 GiB,
# unregistered then --register (2 interleaved rounds each against raw NCCL on one rank per GPU).
R=/tmp/res; rm -rf $R; mkdir -p $R/c $R/p; B=scripts/gpu-host/batch.sh
nvidia-smi -L > $R/main.txt 2>&1
OUT=$R bash $B build >> $R/main.txt 2>&1 || { echo BUILD FAILED >> $R/main.txt; touch $R/DONE; exit; }
OUT=$R/c CTEST_R='coll_reg_cuda|peer_big_cuda_hier' CTEST_T=120 bash $B ctestr > $R/c.txt 2>&1
OUT=$R/p PG_B=4M PG_E=1G PG_F=4 PG_R=2 PG_N=10 bash $B pergpu > $R/p-a-plain.txt 2>&1
OUT=$R/p PG_B=4M PG_E=1G PG_F=4 PG_R=2 PG_N=10 PG_X=--register bash $B pergpu > $R/p-b-reg.txt 2>&1
touch $R/DONE
