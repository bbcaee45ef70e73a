#!/bin/bash
# Issue 16's goals on 2 GPUs in one detached pass (written in session 23 for the next device
# time). PARTS (default "own pergpu l2 occ all") picks the steps, run in this order:
#   own:    the gpu-mpi test of --per-gpu, the own path's big and default-choice tests, and session 24's
#           executor-abort (test_coll --exec-abort) and registration (test_coll_reg) tests;
#   pergpu: the per-GPU comparison in one run each (acx-allreduce-bench --compare --per-gpu under
#           MPS at 2 and 4 ranks per GPU, 8 B - 1 GiB, 3 interleaved rounds);
#   l2:     the same from 16 MiB for each of PG_VARIANTS (default: big slots of 4 and 16 MiB for
#           the two-shot with groups, "ACX_COLL_PEER_BIG_KB=4096 ACX_COLL_PEER_BIG_KB=16384"; a
#           variant of several settings joins them with commas, e.g. ACX_COLL_PEER_BIG_KB=8192,
#           ACX_COLL_PEER_BIG_BLOCKS=96): does staging that stays in the 50 MiB L2 beat the 64 MiB
#           default, which streams it through HBM, despite four flag rounds per chunk?
#   occ:    the two-shot kernels built for 2 blocks per SM (-DACX_PEER_BIG_MIN_BLOCKS=2: 64
#           registers instead of 96-128, with spills; kernels/peer/peer_kernels.cu) in a second
#           build of the tree, then the l2 step's runs from 16 MiB with the default big slots
#           (OCC_VARIANTS, default "ACX_COLL_PEER_BIG_BLOCKS=128") against pergpu's default rows;
#   all:    every other gpu / gpu-mpi test, then gpu-multinode (last full runs: sessions 20-21).
# From the repo root with .gpu/src.tar and .gpu/debs; results under /tmp/res, DONE when finished:
#   setsid nohup bash scripts/gpu-host/pass-pergpu.sh >/dev/null 2>&1 < /dev/null &
# then poll with calls chained back to back (scripts/gpu-host/poll.sh MAX STEP), each stopping at once where /tmp/res is missing (a
# machine is given back 30 s after a call returns, and the next call may get a fresh one: session
# 23 lost 7 minutes polling a machine with nothing running).
R=/tmp/res; rm -rf $R; mkdir -p $R/c $R/p $R/a $R/m; B=scripts/gpu-host/batch.sh
PARTS=${PARTS:-own pergpu l2 occ all}
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
nvidia-smi -L > $R/main.txt 2>&1
OUT=$R bash $B build >> $R/main.txt 2>&1 || { echo BUILD FAILED >> $R/main.txt; touch $R/DONE; exit; }
OWN='per_gpu|peer_big|coll_auto|exec_abort|coll_reg'
has own && OUT=$R/c CTEST_R="$OWN" CTEST_T=400 bash $B ctestr > $R/c.txt 2>&1
has pergpu && OUT=$R/p bash $B pergpu > $R/p-default.txt 2>&1
if has l2; then
  for v in ${PG_VARIANTS:-ACX_COLL_PEER_BIG_KB=4096 ACX_COLL_PEER_BIG_KB=16384}; do
    OUT=$R/p PG_B=16M PG_ENV="${v//,/ }" bash $B pergpu > "$R/p-$(tr -c 'a-zA-Z0-9=_\n' _ <<<"$v").txt" 2>&1
  done
fi
if has occ; then
  O=/tmp/acx-clean/build-occ
  { cmake -S /tmp/acx-clean -B $O -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DACX_PEER_BIG_MIN_BLOCKS=2 &&
    cmake --build $O -j 32 --target acx-executor acx-allreduce-bench; } > $R/occ-build.txt 2>&1 || echo "occ build FAILED" >> $R/main.txt
  for v in ${OCC_VARIANTS:-ACX_COLL_PEER_BIG_BLOCKS=128}; do
    ACX_GPU_BUILD=$O ACX_EXECUTOR_PATH=$O/tools/acx-executor OUT=$R/p PG_B=16M PG_ENV="${v//,/ }" bash $B pergpu \
      > "$R/p-occ2-$(tr -c 'a-zA-Z0-9=_\n' _ <<<"$v").txt" 2>&1
  done
fi
has all && OUT=$R OWN="$OWN" bash $B others > $R/a.txt 2>&1
touch $R/DONE
