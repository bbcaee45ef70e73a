#!/bin/bash
# The next pass after session 30, on a 2- or 4-GPU host, with the committed tree only:
#   git archive main -o .gpu/src.tar
# then on the host: setsid nohup bash scripts/gpu-host/pass-s31.sh >/dev/null 2>&1 < /dev/null &
# and poll with scripts/gpu-host/poll.sh (carry [".gpu"] on every call). Results under /tmp/res, DONE
# when finished. Most decisive first; PARTS (default: all that the host's GPUs allow, in this order):
#   tests:  every gpu / gpu-mpi test outside multinode (4 GPUs: two halves at once on GPUs 0,1 and
#           2,3, -I 1,,2 / 2,,2), then the gpu-multinode tests: session 30's rebuild report
#           (acx_coll_rebuild_report, test_rebuild's after-kill test) on its first GPU run;
#   rbdbg:  (4 GPUs) test_rebuild --cuda across 2 simulated nodes x 2 GPUs with NCCL_CUMEM_ENABLE 0
#           and 1, ACX_DEBUG=INFO: with 1 session 30 saw an unjoined all-reduce come back ACX_OK on
#           two survivors; the test now passes only if the rebuild's report names every such one
#           (the log's "completed here as success although rank 1 never submitted them");
#   goal:   issue 16's goal run on GPUs 0,1 under MPS: acx-allreduce-bench --compare --per-gpu
#           --register at 2 and 4 ranks per GPU, 8 B - 1 GiB, GOAL_R (3) interleaved rounds in one run,
#           GOAL_REPS (2) runs: small all-reduces at most 2x the time of one rank per GPU, from 64 MiB
#           busbw per GPU at least 0.9x;
#   pergpu: (4 GPUs) the same on all 4 GPUs, 512 KiB - 1 GiB.
R=/tmp/res; rm -rf $R; mkdir -p $R/t0 $R/t1 $R/m $R/r $R/g $R/pg; B=scripts/gpu-host/batch.sh
NG=$(nvidia-smi -L | grep -c '^GPU')
if [ "$NG" -ge 4 ]; then PARTS=${PARTS:-tests rbdbg goal pergpu}; else PARTS=${PARTS:-tests goal}; fi
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*" >> $R/main.txt; }
nvidia-smi -L > $R/topo.txt 2>&1; nvidia-smi topo -m >> $R/topo.txt 2>&1; nproc >> $R/topo.txt
el build; OUT=$R bash $B build >> $R/main.txt 2>&1 || { echo BUILD FAILED >> $R/main.txt; touch $R/DONE; exit; }
if has tests; then el tests
  if [ "$NG" -ge 4 ]; then
    ( CUDA_VISIBLE_DEVICES=0,1 OUT=$R/t1 CTEST_E=multinode CTEST_I=2,,2 CTEST_T=480 bash $B ctestr > $R/t1.txt 2>&1 ) &
    ( CUDA_VISIBLE_DEVICES=2,3 OUT=$R/t0 CTEST_E=multinode CTEST_I=1,,2 CTEST_T=480 bash $B ctestr > $R/t0.txt 2>&1
      CUDA_VISIBLE_DEVICES=2,3 OUT=$R/m MT_T=300 bash $B mtests > $R/m.txt 2>&1 ) &
    wait
  else
    OUT=$R/t0 CTEST_E=multinode CTEST_T=560 bash $B ctestr > $R/t0.txt 2>&1
    OUT=$R/m MT_T=300 bash $B mtests > $R/m.txt 2>&1
  fi
fi
if has rbdbg && [ "$NG" -ge 4 ]; then el rbdbg
  OUT=$R/r bash $B rb2x2 > $R/rbdbg.txt 2>&1
fi
if has goal; then el goal
  for rep in $(seq ${GOAL_REPS:-2}); do
    mkdir -p $R/g/$rep
    CUDA_VISIBLE_DEVICES=0,1 OUT=$R/g/$rep PG_K="2 4" PG_B=8 PG_E=1G PG_F=4 PG_R=${GOAL_R:-3} PG_N=20 PG_X=--register bash $B pergpu > $R/goal-$rep.txt 2>&1
  done
fi
if has pergpu && [ "$NG" -ge 4 ]; then el pergpu
  OUT=$R/pg PG_K="2 4" PG_B=512K PG_E=1G PG_F=4 PG_R=2 PG_N=20 PG_X=--register bash $B pergpu > $R/pergpu.txt 2>&1
fi
el done; touch $R/DONE
