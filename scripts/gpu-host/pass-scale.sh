#!/bin/bash
# Issue 18 on a 4-GPU host (session 24), with issue 16's per-GPU comparison on the same GPUs, in one
# detached pass, most decisive first. PARTS (default "tests sbench srb smn stests pergpu") picks:
#   tests:  every gpu / gpu-mpi test outside multinode, in two halves at once (ctest -I 1,,2 on
#           GPUs 0,1 and -I 2,,2 on GPUs 2,3), then gpu-multinode on GPUs 0,1;
#   sbench: acx-allreduce-bench --compare on all GPUs, f32 and bf16, 8 B - 8 GiB;
#   srb:    the resilient example with a fault on rank 1, injected and killed, at 2 and NG ranks:
#           bit-identical result (sres) and fault to ready (srb, SRB_REPS rounds);
#   smn:    2 simulated nodes x NG/2 GPUs (test_coll, test_remote, test_rebuild, the example, bench);
#   stests: test_coll at NG and 2 NG ranks, test_rebuild and test_remote at NG;
#   pergpu: issue 16 under MPS at 2 ranks per GPU (PG_K) on all GPUs, 8 B - 1 GiB, 3 rounds.
# From the repo root with .gpu/src.tar and .gpu/debs; results under /tmp/res, DONE when finished:
#   setsid nohup bash scripts/gpu-host/pass-scale.sh >/dev/null 2>&1 < /dev/null &
# then poll with calls chained back to back (scripts/gpu-host/poll.sh MAX STEP).
R=/tmp/res; rm -rf $R; mkdir -p $R/t0 $R/t1 $R/m $R/s $R/p; B=scripts/gpu-host/batch.sh
PARTS=${PARTS:-tests sbench srb smn stests pergpu}
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
NG=$(nvidia-smi -L | grep -c '^GPU')
nvidia-smi -L > $R/main.txt 2>&1; nvidia-smi topo -m >> $R/main.txt 2>&1
OUT=$R bash $B build >> $R/main.txt 2>&1 || { echo BUILD FAILED >> $R/main.txt; touch $R/DONE; exit; }
if has tests; then
  if [ "$NG" -ge 4 ]; then
    (CUDA_VISIBLE_DEVICES=0,1 OUT=$R/t0 CTEST_E=multinode CTEST_I=1,,2 CTEST_T=560 bash $B ctestr > $R/t0.txt 2>&1
     CUDA_VISIBLE_DEVICES=0,1 OUT=$R/m bash $B mtests > $R/m.txt 2>&1) &
    CUDA_VISIBLE_DEVICES=2,3 OUT=$R/t1 CTEST_E=multinode CTEST_I=2,,2 CTEST_T=560 bash $B ctestr > $R/t1.txt 2>&1 &
    wait
  else
    OUT=$R/t0 CTEST_E=multinode CTEST_T=560 bash $B ctestr > $R/t0.txt 2>&1
    OUT=$R/m bash $B mtests > $R/m.txt 2>&1
  fi
fi
has sbench && OUT=$R/s SB_T=300 bash $B sbench > $R/sbench.txt 2>&1
has srb && OUT=$R/s bash $B sres > $R/sres.txt 2>&1
has srb && OUT=$R/s SRB_REPS=${SRB_REPS:-1} bash $B srb > $R/srb.txt 2>&1
has smn && OUT=$R/s bash $B smn > $R/smn.txt 2>&1
has stests && OUT=$R/s ST_T=200 bash $B stests > $R/stests.txt 2>&1
has pergpu && OUT=$R/p PG_K=${PG_K:-2} bash $B pergpu > $R/pergpu.txt 2>&1
touch $R/DONE
