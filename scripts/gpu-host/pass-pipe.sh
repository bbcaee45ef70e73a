#!/bin/bash
# Issue 16 on 2 GPUs: a candidate of the own path's two-shot with groups against other builds in one
# run. The candidate is the tree in .gpu/src.tar (full build: its own-path GPU tests run); the others
# are built beside it (executor and benchmark) from .gpu/src-NAME.tar for each NAME in AB_VARIANTS
# (default "main fuse"). Session 28/29's run (candidate s28-two-shot-pipe, now on main):
#   git archive s28-two-shot-pipe -o .gpu/src.tar; git archive main -o .gpu/src-main.tar
#   git archive s27-two-shot-fuse -o .gpu/src-fuse.tar
# (scripts/gpu-host/s27-two-shot-fuse.patch is that branch's diff against 9dffcd2, main before
# session 29's merge, where the branch is not in the checkout: `git apply` on a scratch branch there)
# then on the GPU host: setsid nohup bash scripts/gpu-host/pass-pipe.sh >/dev/null 2>&1 < /dev/null &
# Session 29 merged the candidate (main since 247ed13). Session 30 ran the next candidate, branch
# s29-big-chunks (ACX_COLL_PEER_BIG_CHUNKS: the two-shot's operations in at least C chunks), on 2
# GPUs of a 4-GPU host with pass-s30.sh: 4 and 8 chunks were slower than 1 at every size from 16 to
# 256 MiB (docs/benchmark.md), so it was not merged. For a new candidate: its tree in .gpu/src.tar,
# the builds to beat in .gpu/src-NAME.tar, AB_VARIANTS="NAME ...", AB_ENVS as below.
# AB_B, AB_E, AB_F, AB_N: the A/B's sizes, factor and iterations (64M, 1G, 4, 10).
# Results under /tmp/res, DONE when finished; poll with scripts/gpu-host/poll.sh. PARTS (default
# "tests ab trace"), in this order:
#   tests: the own path's GPU tests on the candidate (OWN, default: the peer, registration,
#          default-choice and per-GPU tests, the trace tests among them);
#   ab:    --per-gpu --register at AB_K (4 2) ranks per GPU, 64 MiB - 1 GiB, AB_REPS (2) rounds of the
#          candidate and each variant in turn (the variants: executor and benchmark only, built
#          while the tests run), and of the candidate with each of AB_ENVS (default
#          "ACX_COLL_PEER_BIG_KB=131072": 128 MiB big slots, +0.01-0.05 in session 26; several
#          settings of one variant joined by commas) as variants env1, env2, ...;
#   trace: the candidate's step trace at TRACE_SIZES (64K 64M 1G: 64 KiB at 4 per GPU ran bimodal,
#          6.7 or 14-16 us, in sessions 26-27), 4 and 2 ranks per GPU.
R=/tmp/res; rm -rf $R; mkdir -p $R/c $R/p $R/t; B=scripts/gpu-host/batch.sh
PARTS=${PARTS:-tests ab trace}
VARIANTS=${AB_VARIANTS:-main fuse}
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
nvidia-smi -L > $R/main.txt 2>&1; nproc >> $R/main.txt
OUT=$R bash $B build >> $R/main.txt 2>&1 || { echo BUILD FAILED >> $R/main.txt; touch $R/DONE; exit; }
builds=()
if has ab; then
  for v in $VARIANTS; do
    M=/tmp/acx-$v; rm -rf $M && mkdir -p $M && tar -xf .gpu/src-$v.tar -C $M || { echo "no .gpu/src-$v.tar" >> $R/main.txt; continue; }
    ( { PATH=/usr/local/cuda/bin:$PATH timeout 300 cmake -S $M -B $M/build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
        timeout 900 cmake --build $M/build -j 12 --target acx-executor acx-allreduce-bench; } > $R/build-$v.txt 2>&1 ||
        echo "$v build FAILED" >> $R/main.txt ) &
    builds+=($!)
  done
fi
has tests && OUT=$R/c CTEST_R="${OWN:-peer|coll_reg|coll_auto|per_gpu}" CTEST_T=${OWN_T:-420} bash $B ctestr > $R/c.txt 2>&1
[ ${#builds[@]} -gt 0 ] && wait "${builds[@]}"
if has ab; then
  # the candidate with each of AB_ENVS (settings joined by commas) as one more variant: "env1", ...
  envs=(); for e in ${AB_ENVS-ACX_COLL_PEER_BIG_KB=131072}; do envs+=("$e"); done
  labels=(candidate $VARIANTS); for i in "${!envs[@]}"; do labels+=(env$((i + 1))); done
  for rep in $(seq ${AB_REPS:-2}); do for t in "${labels[@]}"; do
    mkdir -p $R/p/$t-$rep
    X= E=
    case $t in
      candidate) ;;
      env*) E=${envs[$((${t#env} - 1))]}; E=${E//,/ } ;;
      *) [ -x /tmp/acx-$t/build/tools/acx-executor ] || continue
         X="ACX_GPU_BUILD=/tmp/acx-$t/build ACX_EXECUTOR_PATH=/tmp/acx-$t/build/tools/acx-executor" ;;
    esac
    echo "$t: ${E:-$X}" >> $R/p-labels.txt
    env $X OUT=$R/p/$t-$rep PG_ENV="$E" PG_K="${AB_K:-4 2}" PG_B=${AB_B:-64M} PG_E=${AB_E:-1G} PG_F=${AB_F:-4} PG_R=1 PG_N=${AB_N:-10} PG_X=--register \
      bash $B pergpu > $R/p-$t-$rep.txt 2>&1
  done; done
fi
has trace && OUT=$R/t TRACE_SIZES="${TRACE_SIZES:-64K 64M 1G}" bash $B ptrace > $R/t.txt 2>&1
touch $R/DONE
