#!/bin/bash
# Issue 16's next pass (written in session 25 for the next device time), on 2 GPUs: what keeps 4
# ranks per GPU with registered buffers at 0.85-0.89 of one rank per GPU from 256 MiB (2xH200), then
# the GPU tests not run since session 24. Results under /tmp/res, DONE when finished:
#   setsid nohup bash scripts/gpu-host/pass-reg3.sh >/dev/null 2>&1 < /dev/null &
# PARTS (default "tests k4 all"):
#   tests: the registration and two-shot-with-groups GPU tests (test_peer_exec_gpu_group's
#          registered case has not run on a GPU yet);
#   k4:    --per-gpu --register under MPS at 4 ranks per GPU (and 2), 16 MiB - 1 GiB, for each of
#          K4_VARIANTS: the default (64 MiB big slots: 32 chunks of four flag rounds at 1 GiB), 128
#          and 256 MiB big slots (half and a quarter of the rounds; each rank's area grows by twice
#          the slot), 64 blocks per GPU instead of 128;
#   all:   every other gpu / gpu-mpi test, then gpu-multinode.
R=/tmp/res; rm -rf $R; mkdir -p $R/c $R/p $R/a $R/m; B=scripts/gpu-host/batch.sh
PARTS=${PARTS:-tests k4 all}
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
nvidia-smi -L > $R/main.txt 2>&1
OUT=$R bash $B build >> $R/main.txt 2>&1 || { echo BUILD FAILED >> $R/main.txt; touch $R/DONE; exit; }
REG='coll_reg|peer_big_cuda_hier|peer_exec_gpu_group|coll_auto_cuda_np4|per_gpu_cuda'
has tests && OUT=$R/c CTEST_R="$REG" CTEST_T=300 bash $B ctestr > $R/c.txt 2>&1
if has k4; then
  for v in ${K4_VARIANTS:-default ACX_COLL_PEER_BIG_KB=131072 ACX_COLL_PEER_BIG_KB=262144 ACX_COLL_PEER_BIG_BLOCKS=64}; do
    e=$([ "$v" = default ] || echo "$v")
    OUT=$R/p PG_K="${PG_K:-4 2}" PG_B=16M PG_E=1G PG_F=4 PG_R=2 PG_N=10 PG_X=--register PG_ENV="$e" bash $B pergpu \
      > "$R/p-$(tr -c 'a-zA-Z0-9=_\n' _ <<<"$v").txt" 2>&1
  done
fi
if has all; then
  OUT=$R/a CTEST_E="multinode|$REG" CTEST_T=560 bash $B ctestr > $R/a.txt 2>&1
  CUDA_VISIBLE_DEVICES=0,1 OUT=$R/m bash $B mtests > $R/m.txt 2>&1
fi
touch $R/DONE
