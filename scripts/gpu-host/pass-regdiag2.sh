#!/bin/bash
# Issue 16's mapped path, its cost below 256 MiB (session 25, second look): --per-gpu under MPS at 2
# and 4 ranks per GPU, 4-64 MiB with buffers of 64 MiB (is the cost the 1 GiB buffers' mapping?),
# unregistered then --register; then --register with half the blocks. Results under /tmp/res.
R=/tmp/res; rm -rf $R; mkdir -p $R/p; B=scripts/gpu-host/batch.sh
nvidia-smi -L > $R/main.txt 2>&1
OUT=$R bash $B build >> $R/main.txt 2>&1 || { echo BUILD FAILED >> $R/main.txt; touch $R/DONE; exit; }
OUT=$R/p PG_B=4M PG_E=64M PG_F=2 PG_R=2 PG_N=10 bash $B pergpu > $R/p-a-plain.txt 2>&1
OUT=$R/p PG_B=4M PG_E=64M PG_F=2 PG_R=2 PG_N=10 PG_X=--register bash $B pergpu > $R/p-b-reg.txt 2>&1
OUT=$R/p PG_B=4M PG_E=64M PG_F=2 PG_R=2 PG_N=10 PG_X=--register PG_ENV=ACX_COLL_PEER_BIG_BLOCKS=64 bash $B pergpu > $R/p-c-reg64.txt 2>&1
touch $R/DONE
