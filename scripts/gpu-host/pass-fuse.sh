#!/bin/bash
# Issue 16, for session 28 on 2 GPUs: decides branch s27-two-shot-fuse (the two-shot with groups
# loading the other GPU's parts once) against main, in one run. Prepare (here):
#   git archive s27-two-shot-fuse -o .gpu/src.tar; git archive main -o .gpu/src-main.tar
# (where the branch is not in the checkout: scripts/gpu-host/s27-two-shot-fuse.patch is its diff
# against main; `git apply` it on a scratch branch and archive that)
# then on the GPU host: setsid nohup bash scripts/gpu-host/pass-fuse.sh >/dev/null 2>&1 < /dev/null &
# Results under /tmp/res, DONE when finished. PARTS (default "tests ab trace"), in this order:
#   tests: the own path's GPU tests on the branch (incl. the trace tests: the percentiles are new);
#   ab:    --per-gpu --register at 4 ranks per GPU, 64 MiB - 1 GiB, AB_REPS (2) rounds of the branch
#          and main in turn (main built beside it: executor and benchmark only);
#   trace: the branch's step trace at TRACE_SIZES (64K 1G), 4 and 2 ranks per GPU.
R=/tmp/res; rm -rf $R; mkdir -p $R/c $R/p $R/t; B=scripts/gpu-host/batch.sh
PARTS=${PARTS:-tests ab trace}
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
nvidia-smi -L > $R/main.txt 2>&1; nproc >> $R/main.txt
OUT=$R bash $B build >> $R/main.txt 2>&1 || { echo BUILD FAILED >> $R/main.txt; touch $R/DONE; exit; }
if has ab; then
  M=/tmp/acx-main; rm -rf $M && mkdir -p $M && tar -xf .gpu/src-main.tar -C $M
  { PATH=/usr/local/cuda/bin:$PATH cmake -S $M -B $M/build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
    cmake --build $M/build -j 32 --target acx-executor acx-allreduce-bench; } > $R/main-build.txt 2>&1 ||
    echo "main build FAILED" >> $R/main.txt
fi
has tests && OUT=$R/c CTEST_R="${OWN:-peer|coll_reg|coll_auto|per_gpu}" CTEST_T=${OWN_T:-420} bash $B ctestr > $R/c.txt 2>&1
if has ab; then
  for rep in $(seq ${AB_REPS:-2}); do for t in branch main; do
    mkdir -p $R/p/$t-$rep
    if [ $t = main ]; then X="ACX_GPU_BUILD=/tmp/acx-main/build ACX_EXECUTOR_PATH=/tmp/acx-main/build/tools/acx-executor"; else X=; fi
    env $X OUT=$R/p/$t-$rep PG_K=4 PG_B=64M PG_E=1G PG_F=4 PG_R=1 PG_N=10 PG_X=--register bash $B pergpu > $R/p-$t-$rep.txt 2>&1
  done; done
fi
has trace && OUT=$R/t TRACE_SIZES="${TRACE_SIZES:-64K 1G}" bash $B ptrace > $R/t.txt 2>&1
touch $R/DONE
