#!/bin/bash
# Issue 16's goals on 2 GPUs in one detached pass (session 23, for the next device time): the
# per-GPU comparison in one run (acx-allreduce-bench --compare --per-gpu under MPS at 2 and 4
# ranks per GPU, 8 B - 1 GiB, 3 interleaved rounds), then the same from 16 MiB with smaller big
# slots for the two-shot with groups (PGKB, default "4096 16384": does staging that stays in the
# L2 cache beat the 64 MiB default, which streams it through HBM?), after the gpu-mpi tests of the
# new option and of the own path. From the repo root with .gpu/src.tar and .gpu/debs; results
# under /tmp/res, DONE when finished:
#   setsid nohup bash scripts/gpu-host/pass-pergpu.sh >/dev/null 2>&1 < /dev/null &
# then poll with calls chained back to back (a machine is given back 30 s after a call returns).
R=/tmp/res; rm -rf $R; mkdir -p $R/c $R/p; B=scripts/gpu-host/batch.sh
nvidia-smi -L > $R/main.txt 2>&1
OUT=$R bash $B build >> $R/main.txt 2>&1 || { echo BUILD FAILED >> $R/main.txt; touch $R/DONE; exit; }
OUT=$R/c CTEST_R='per_gpu|peer_big|coll_auto' CTEST_T=400 bash $B ctestr > $R/c.txt 2>&1
OUT=$R/p bash $B pergpu > $R/p-default.txt 2>&1
for kb in ${PGKB:-4096 16384}; do
  OUT=$R/p PG_B=16M PG_ENV="ACX_COLL_PEER_BIG_KB=$kb" bash $B pergpu > $R/p-kb$kb.txt 2>&1
done
touch $R/DONE
