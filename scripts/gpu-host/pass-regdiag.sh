#!/bin/bash
# Issue 16's mapped path, where its fixed cost comes from (session 25): acx-allreduce-bench
# --compare --per-gpu under MPS at 2 and 4 ranks per GPU from 16 MiB to 1 GiB, unregistered and
# --register with ACX_COLL_PEER_REG=0 (registered, none used: the buffers' kind alone), 1 (inputs),
# 2 (outputs), 3 (both), in that order and back (REG_ROUNDS). Results under /tmp/res, DONE at the end.
R=/tmp/res; rm -rf $R; mkdir -p $R/p; B=scripts/gpu-host/batch.sh
nvidia-smi -L > $R/main.txt 2>&1
OUT=$R bash $B build >> $R/main.txt 2>&1 || { echo BUILD FAILED >> $R/main.txt; touch $R/DONE; exit; }
V="plain 0 1 2 3"
for rnd in $(seq ${REG_ROUNDS:-1}); do
  for v in $V; do
    if [ $v = plain ]; then x=""; e=""; else x="--register"; e="ACX_COLL_PEER_REG=$v"; fi
    OUT=$R/p PG_K="${PG_K:-2 4}" PG_B=16M PG_E=1G PG_R=${PG_R:-2} PG_N=10 PG_X="$x" PG_ENV="$e" bash $B pergpu > "$R/p-$rnd-$v.txt" 2>&1
  done
  V=$(echo $V | tr ' ' '\n' | tac | tr '\n' ' ')
done
touch $R/DONE
