#!/bin/bash
# Issue 16, session 26, on 2 GPUs: the one-shot's batches (several one-shot all-reduces per kernel
# launch, as the push lines'), then 4 ranks per GPU's large sizes with registered buffers. Results
# under /tmp/res, DONE when finished:
#   setsid nohup bash scripts/gpu-host/pass-oneshot.sh >/dev/null 2>&1 < /dev/null &
# PARTS (default "tests small k4"):
# Parts run in this order: trace, tests, small, k4, all.
#   tests: the own path's GPU tests (test_peer_exec's back-to-back sequence now also at a one-shot
#          size in its _ll16 variants), registration, auto, per-GPU bench tests;
#   small: --per-gpu 32 KiB - 4 MiB at 4 and 2 ranks per GPU, -n 200, for each of SMALL_VARIANTS
#          (default: with the batches, the default, and without, ACX_COLL_PEER_BATCH=1), two rounds
#          of the variants in turn;
#   k4:    --per-gpu --register at 4 ranks per GPU, 64 MiB - 1 GiB, for each of K4_VARIANTS.
#   trace: --per-gpu --register with ACX_COLL_PEER_TRACE=1 at 4 and 2 ranks per GPU, one size a run
#          (TRACE_SIZES, 128K 1M 64M 1G): every executor's per-step means (gaps, copies, flag waits,
#          reductions) for the open gaps of issue 16 (the one-shots' 16-17 us at 4 per GPU, the
#          two-shot with groups' 0.85-0.88 at 1 GiB);
#   all:   every other gpu / gpu-mpi test, then gpu-multinode.
R=/tmp/res; rm -rf $R; mkdir -p $R/c $R/s $R/p $R/a $R/m; B=scripts/gpu-host/batch.sh
PARTS=${PARTS:-tests small k4}
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
nvidia-smi -L > $R/main.txt 2>&1; nproc >> $R/main.txt
OUT=$R bash $B build >> $R/main.txt 2>&1 || { echo BUILD FAILED >> $R/main.txt; touch $R/DONE; exit; }
OWN=${OWN:-'peer|coll_reg|coll_auto|per_gpu'}
has trace && OUT=$R/t TRACE_SIZES="${TRACE_SIZES:-128K 1M 64M 1G}" bash $B ptrace > $R/t.txt 2>&1
has tests && OUT=$R/c CTEST_R="$OWN" CTEST_T=${OWN_T:-420} bash $B ctestr > $R/c.txt 2>&1
if has small; then
  for rep in $(seq ${SMALL_REPS:-2}); do for v in ${SMALL_VARIANTS:-default ACX_COLL_PEER_BATCH=1}; do
    e=$([ "$v" = default ] || echo "$v")
    mkdir -p $R/s/$rep; OUT=$R/s/$rep PG_K="${SMALL_K:-4 2}" PG_B=32K PG_E=4M PG_F=2 PG_R=2 PG_N=200 PG_ENV="$e" bash $B pergpu \
      > "$R/s-$rep-$(tr -c 'a-zA-Z0-9=_\n' _ <<<"$v").txt" 2>&1
  done; done
fi
if has k4; then
  for v in ${K4_VARIANTS:-default ACX_COLL_PEER_BIG_KB=131072 ACX_COLL_PEER_BIG_KB=262144 ACX_COLL_PEER_BIG_BLOCKS=64}; do
    e=$([ "$v" = default ] || echo "$v")
    OUT=$R/p PG_K=4 PG_B=64M PG_E=1G PG_F=4 PG_R=2 PG_N=10 PG_X=--register PG_ENV="$e" bash $B pergpu \
      > "$R/p-$(tr -c 'a-zA-Z0-9=_\n' _ <<<"$v").txt" 2>&1
  done
fi
has all && OUT=$R OWN="$OWN" bash $B others > $R/a.txt 2>&1
touch $R/DONE
