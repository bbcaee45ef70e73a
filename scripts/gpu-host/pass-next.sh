#!/bin/bash
# The GPU pass, on 2 GPUs or more (session 13; session 14 ran every step on 2xH100; session 15 ran
# push big ll64 small gpumn libs on 4xH200 and made the two-shot store-only; session 17 made it the
# default at 2 ranks from 2 MiB). PARTS (default "push ll64 big tests gpumn small mps hierov
# mpsbig mbench"; "libs" runs the library benchmark twice on GPU 0) picks the steps, run in this order:
#   push:   the GPU tests of the two-shot (by stores since session 15), first;
#   ll64:   the own path's GPU tests (the push lines to 64 KiB by default since session 14), the
#           hierarchical overlap (test_coll_nccl_hier_overlap_np4) and the
#           executor waiting for a full set: test_peer_exec_gpu*, test_coll_peer*_cuda*, and the
#           default's choice (test_coll_auto_cuda_np2 / _np4);
#   big:    below;
#   tests:  every other gpu / gpu-mpi test (last full run: session 14, 45 of 45 with ll64);
#   gpumn:  the gpu-multinode tests on GPUs 0 and 1 (last run: session 15, 9 of 9 on 4xH200);
#   small:  acx-allreduce-bench --compare, 8 B - 64 KiB, factor 2, batches with the lines to 16 and
#           to 64 KiB, the NCCL path; 2 interleaved rounds, at 2 ranks and at every GPU where more;
#           raw NCCL's graph floor at 8 B and 64 KiB (issue 17's small-message goal);
#   mps:    issue 16: 2 ranks per GPU under MPS through the own path with batches (peermps);
#   hierov: issue 16's large all-reduces under MPS, ACX_COLL_HIER_OVERLAP 0 and 1 (1 ran in session 14
#           on 2xH100: +5-7 % out of place, 0-5 % slower in place);
#   mpsbig: issue 16's large all-reduces under MPS through the own two-shot (2 ranks per GPU),
#           beside the ordered hierarchical path and 1 rank per GPU (batch.sh mpsbig);
#   mbench: issue 13's goals across 2 simulated nodes (batch.sh mbench, 9 rounds).
# From the repo root with .gpu/src.tar and .gpu/debs; results under /tmp/res (one .txt per step),
# DONE when finished:   setsid nohup bash scripts/gpu-host/pass-next.sh >/dev/null 2>&1 < /dev/null &
# then poll with calls chained back to back (.gpu/poll.sh): the machine is given back 30 s after a
# call returns, and what runs on it is lost (session 13 lost a pass so).
R=/tmp/res; rm -rf $R; mkdir -p $R/cp $R/c0 $R/c1 $R/c2 $R/d $R/e $R/f $R/m; B=scripts/gpu-host/batch.sh
S=/tmp/acx-clean; BB=$S/build-gpu
NG=$(nvidia-smi -L | grep -c '^GPU')
nvidia-smi -L > $R/main.txt 2>&1
PARTS=${PARTS:-push ll64 big tests gpumn small mps hierov mpsbig mbench}
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
OUT=$R bash $B build >> $R/main.txt 2>&1 || { echo BUILD FAILED >> $R/main.txt; touch $R/DONE; exit; }
# (before every step: the big step's runs need them; session 17's first pass ran it without)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 ACX_EXECUTOR_PATH=$BB/tools/acx-executor
NPS=$(printf '%s\n' $NG 2 | sort -rnu)
LL='test_peer_exec_gpu|peer.*cuda|hier_overlap|coll_auto'
has push && OUT=$R/cp CTEST_R="peer_big|test_peer_exec_gpu$" CTEST_T=240 bash $B ctestr > $R/cp.txt 2>&1
has ll64 && OUT=$R/c0 CTEST_R="$LL" CTEST_T=400 bash $B ctestr > $R/c0.txt 2>&1
# big: the default (at 2 ranks the two-shot from 2 MiB since session 17) against raw NCCL, acx's
# NCCL path (ACX_COLL_PEER=0), the two-shot from just above the slot (BIG_MIN_KB=0, 512 KiB - 16
# MiB: where it starts to win) and, at more ranks, the two-shot asked for; BIG_REPS interleaved rounds.
bigrun() { # name np args env...
  local name=$1 np=$2 args=$3; shift 3
  env "$@" timeout 120 mpirun -np $np --bind-to none -x NCCL_NVLS_ENABLE -x ACX_EXECUTOR_PATH -x ACX_COLL_PEER \
    -x ACX_COLL_PEER_BIG_KB -x ACX_COLL_PEER_BIG_MIN_KB -x ACX_COLL_PEER_BIG_BLOCKS \
    $BB/bench/allreduce/acx-allreduce-bench --compare $args -d float > $R/d/$name.txt 2>&1
  echo "$name rc=$?" >> $R/d-big.txt; grep -E "^ +[0-9]+ " $R/d/$name.txt | sed "s/^/$name /" >> $R/d-big.txt
}
if has big; then
  for rep in $(seq ${BIG_REPS:-2}); do for np in $NPS; do
    bigrun big-$np-def-$rep $np "-b 16M -e 1G -f 4 -n 20 -w 5"
    bigrun big-$np-nccl-$rep $np "-b 16M -e 1G -f 4 -n 20 -w 5" ACX_COLL_PEER=0
    bigrun mid-$np-min0-$rep $np "-b 512K -e 16M -f 2 -n 40 -w 5" ACX_COLL_PEER_BIG_MIN_KB=0 ACX_COLL_PEER_BIG_KB=65536
    [ $np -gt 2 ] && bigrun big-$np-on-$rep $np "-b 16M -e 1G -f 4 -n 20 -w 5" ACX_COLL_PEER_BIG_KB=65536
  done; done
fi
has tests && OUT=$R/c1 CTEST_E="multinode|$LL" CTEST_T=550 bash $B ctestr > $R/c1.txt 2>&1
has gpumn && CUDA_VISIBLE_DEVICES=0,1 OUT=$R/c2 bash $B mtests > $R/c2.txt 2>&1
run() { # name np env... : acx-allreduce-bench --compare with the given environment, rows tagged
  local name=$1 np=$2; shift 2
  env "$@" timeout 60 mpirun -np $np --bind-to none -x NCCL_NVLS_ENABLE -x ACX_EXECUTOR_PATH -x ACX_COLL_PEER \
    -x ACX_COLL_PEER_BATCH -x ACX_COLL_PEER_PDL -x ACX_COLL_PEER_LL_KB $BB/bench/allreduce/acx-allreduce-bench --compare \
    -b 8 -e 64K -f 2 -n 500 -w 50 -d float > $R/d/$name.txt 2>&1
  echo "$name rc=$?" >> $R/d-small.txt; grep -E "^ +[0-9]+ " $R/d/$name.txt | sed "s/^/$name /" >> $R/d-small.txt
}
if has small; then
  for rep in 1 2; do for np in $NPS; do
    run small-$np-ll16-$rep $np ACX_COLL_PEER=1 ACX_COLL_PEER_PDL=1 ACX_COLL_PEER_LL_KB=16
    run small-$np-ll64-$rep $np ACX_COLL_PEER=1 ACX_COLL_PEER_PDL=1
    run small-$np-nccl-$rep $np ACX_COLL_PEER=0
  done; done
  OUT=$R/f PFLOOR_SZ="8 65536" FLOOR_N=3000 bash $B pfloor > $R/f-pfloor.txt 2>&1
fi
has mps && OUT=$R/e PEER_REPS=2 bash $B peermps > $R/e-peermps.txt 2>&1
has hierov && OUT=$R/e bash $B hierov > $R/e-hierov.txt 2>&1
has mpsbig && OUT=$R/e bash $B mpsbig > $R/e-mpsbig.txt 2>&1
has mbench && CUDA_VISIBLE_DEVICES=0,1 OUT=$R/m MB_R=9 MB_N=10 MB_T=480 bash $B mbench > $R/m-mbench.txt 2>&1
if has libs; then
  for k in 1 2; do CUDA_VISIBLE_DEVICES=0 timeout 200 $BB/bench/libs/acx-lib-bench > $R/libs-$k.txt 2>&1; echo "libs $k rc=$?" >> $R/main.txt; done
fi
touch $R/DONE
