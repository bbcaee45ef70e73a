#!/bin/bash
# Session 31's pass on a 2-GPU host (status lent nvidia-h200 and -x2 only), the committed tree only:
#   git archive main -o .gpu/src.tar
# then on the host: setsid nohup bash scripts/gpu-host/pass-s32.sh >/dev/null 2>&1 < /dev/null &
# and poll with scripts/gpu-host/poll.sh (carry [".gpu"] on every call). Results under /tmp/res, DONE
# when finished. Most decisive first:
#   goal 1: issue 16's goal run on both GPUs under MPS: acx-allreduce-bench --compare --per-gpu
#           --register at 2 and 4 ranks per GPU, 16 B - 1 GiB by 4 (64 KiB, 64 MiB and 1 GiB among
#           them), 3 interleaved rounds in one run: small all-reduces at most 2x the time of one rank
#           per GPU (ratio >= 0.5), from 64 MiB busbw per GPU at least 0.9x;
#   rb:     test_rebuild --cuda across 2 simulated nodes x 1 GPU, NCCL_CUMEM_ENABLE 0 and 1,
#           ACX_DEBUG=INFO: the rebuild report's first GPU run (session 30);
#   tests:  every gpu / gpu-mpi test outside multinode, then the gpu-multinode tests;
#   goal 2: the goal run again (a second, later sample of the same run).
R=/tmp/res; rm -rf $R; mkdir -p $R/t0 $R/m $R/r $R/g/1 $R/g/2; B=scripts/gpu-host/batch.sh
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*" >> $R/main.txt; }
nvidia-smi -L > $R/topo.txt 2>&1; nvidia-smi topo -m >> $R/topo.txt 2>&1; nproc >> $R/topo.txt
goal() { el "goal $1"; OUT=$R/g/$1 PG_K="2 4" PG_B=16 PG_E=1G PG_F=4 PG_R=${GOAL_R:-3} PG_N=20 PG_X=--register bash $B pergpu > $R/goal-$1.txt 2>&1; }
el build; OUT=$R bash $B build >> $R/main.txt 2>&1 || { echo BUILD FAILED >> $R/main.txt; touch $R/DONE; exit; }
goal 1
el rb; OUT=$R/r RB_G=1 bash $B rb2x2 > $R/rb.txt 2>&1
el tests; OUT=$R/t0 CTEST_E=multinode CTEST_T=900 bash $B ctestr > $R/t0.txt 2>&1
OUT=$R/m MT_T=300 bash $B mtests > $R/m.txt 2>&1
goal 2
el done; touch $R/DONE
# Session 31 ran this pass once (all parts passed, 873 s), then on the same host, from the repo root:
#   for rep in 3 4; do for x in --register ""; do OUT=/tmp/res/g3/$rep${x:+r} PG_K="2 4" PG_B=16 PG_E=1G \
#     PG_F=4 PG_R=3 PG_N=20 PG_X="$x" bash scripts/gpu-host/batch.sh pergpu; done; done     (goal runs 3 and 4, staged beside)
#   for rep in 1 2; do OUT=.../small$rep PG_K="2 4" PG_B=16 PG_E=1M PG_F=4 PG_R=3 PG_N=200 PG_X=--register bash $B pergpu
#     OUT=.../big$rep PG_K=4 PG_B=16M PG_E=256M PG_F=2 PG_R=3 PG_N=50 PG_X=--register bash $B pergpu; done
#   rm -rf build; ACX_BENCH_RANKS_PER_GPU=4 scripts/bench.sh -r 3 -b 16 -e 1G -f 4 -n 20 (and =2): the README's command
# Tables: docs/benchmark.md, "Ranks sharing GPUs: issue 16's goal run (session 31)".
