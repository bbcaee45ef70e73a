#!/bin/bash
# Session 30 on a 4-GPU host: issue 16's candidate (branch s29-big-chunks: ACX_COLL_PEER_BIG_CHUNKS)
# on GPUs 0,1, then issue 18's open 4-GPU runs with the committed tree. One detached pass, most
# decisive first. Prepare (here):
#   git archive main -o .gpu/src.tar                      (the committed tree: issue 18's runs)
#   git archive s29-big-chunks -o .gpu/src-chunks.tar     (issue 16's candidate: full build, own tests)
# (the branch was not merged, session 30's numbers in docs/benchmark.md; its diff against main is
# `git show e7bcf29:scripts/gpu-host/s29-big-chunks.patch`, to `git apply` on a scratch branch)
# Session 30's run: builds 142 s, own 467 s, ab 144 s, srb 105 s, sbench 151 s, smn ~200 s.
# then on the host: setsid nohup bash scripts/gpu-host/pass-s30.sh >/dev/null 2>&1 < /dev/null &
# and poll with scripts/gpu-host/poll.sh (carry [".gpu"] on every call). Results under /tmp/res, DONE
# when finished. PARTS (default: all, in this order):
#   own:    GPUs 0,1: the candidate's own-path GPU tests (OWN; with the _chunks8 tests and the MPS
#           tests test_coll_auto_mps2_cuda / _mps4_cuda); at once on GPUs 2,3: main's resilient
#           example with a fault at 2 ranks (sres: bit-identical, no timing taken there);
#   ab:     GPUs 0,1 alone (2 and 3 idle): --per-gpu --register at AB_K (4) ranks per GPU, AB_B - AB_E
#           (16M - 256M, factor 2), AB_N (50) iterations, AB_REPS (3) interleaved rounds of the
#           candidate (1 chunk: main's behaviour) and of it with each of AB_ENVS;
#   srb:    all 4 GPUs, main: fault to ready at 2 and 4 ranks, injected and killed (SRB_REPS 3),
#           then the resilient example bit-identical at 4 ranks;
#   sbench: all 4 GPUs, main: acx-allreduce-bench --compare, f32 and bf16, 8 B - 8 GiB;
#   smn:    main: 2 simulated nodes x 2 GPUs (test_coll, test_remote, test_rebuild, example, bench).
R=/tmp/res; rm -rf $R; mkdir -p $R/c $R/p $R/s $R/s2; B=scripts/gpu-host/batch.sh
PARTS=${PARTS:-own ab srb sbench smn}
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*" >> $R/main.txt; }
NG=$(nvidia-smi -L | grep -c '^GPU')
nvidia-smi -L > $R/topo.txt 2>&1; nvidia-smi topo -m >> $R/topo.txt 2>&1; nproc >> $R/topo.txt
for f in .gpu/debs/*.deb; do dpkg -x "$f" /; done; ldconfig
P=/tmp/acx-chunks/build
( M=/tmp/acx-chunks; rm -rf $M && mkdir -p $M && tar -xf .gpu/src-chunks.tar -C $M &&
  { PATH=/usr/local/cuda/bin:$PATH timeout 300 cmake -S $M -B $P -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
    timeout 900 cmake --build $P -j 24; } > $R/build-chunks.txt 2>&1 || echo "chunks build FAILED" >> $R/main.txt ) &
bpid=$!
el build main
OUT=$R bash $B build >> $R/main.txt 2>&1 || { echo BUILD FAILED >> $R/main.txt; touch $R/DONE; exit; }
wait $bpid; el builds done
if has own && [ -x $P/tools/acx-executor ]; then el own
  ( CUDA_VISIBLE_DEVICES=0,1 ACX_GPU_BUILD=$P OUT=$R/c CTEST_R="${OWN:-peer|coll_reg|coll_auto|per_gpu}" CTEST_T=${OWN_T:-480} bash $B ctestr > $R/c.txt 2>&1 ) &
  ( CUDA_VISIBLE_DEVICES=2,3 OUT=$R/s2 SRES_NPS=2 bash $B sres > $R/sres2.txt 2>&1 ) &
  wait
fi
if has ab && [ -x $P/tools/acx-executor ]; then el ab
  envs=(); for e in ${AB_ENVS-ACX_COLL_PEER_BIG_CHUNKS=4 ACX_COLL_PEER_BIG_CHUNKS=8 ACX_COLL_PEER_BIG_KB=65536}; do envs+=("$e"); done
  labels=(candidate); for i in "${!envs[@]}"; do labels+=(env$((i + 1))); done
  for rep in $(seq ${AB_REPS:-3}); do for t in "${labels[@]}"; do
    mkdir -p $R/p/$t-$rep; E=
    case $t in env*) E=${envs[$((${t#env} - 1))]}; E=${E//,/ } ;; esac
    [ $rep = 1 ] && echo "$t: ${E:-ACX_COLL_PEER_BIG_CHUNKS=1 (default)}" >> $R/p-labels.txt
    CUDA_VISIBLE_DEVICES=0,1 ACX_GPU_BUILD=$P OUT=$R/p/$t-$rep PG_ENV="$E" PG_K="${AB_K:-4}" PG_B=${AB_B:-16M} PG_E=${AB_E:-256M} PG_F=${AB_F:-2} PG_R=1 PG_N=${AB_N:-50} PG_X=--register \
      bash $B pergpu > $R/p-$t-$rep.txt 2>&1
  done; done
fi
has srb && { el srb; OUT=$R/s SRB_REPS=${SRB_REPS:-3} bash $B srb > $R/srb.txt 2>&1; OUT=$R/s SRES_NPS=$NG bash $B sres > $R/sres.txt 2>&1; }
has sbench && { el sbench; OUT=$R/s SB_T=300 bash $B sbench > $R/sbench.txt 2>&1; }
has smn && { el smn; OUT=$R/s bash $B smn > $R/smn.txt 2>&1; }
el done; touch $R/DONE
