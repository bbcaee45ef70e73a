#!/bin/bash
# Session 29 on a 4-GPU host (issue 18 with the committed tree, issue 16's pipelined two-shot with
# groups against main on two of its GPUs), one detached pass, most decisive first. Prepare (here):
#   git archive main -o .gpu/src.tar                      (the committed tree: issue 18's runs)
#   git archive s28-two-shot-pipe -o .gpu/src-pipe.tar    (issue 16's candidate; full build, tests)
#   git archive s27-two-shot-fuse -o .gpu/src-fuse.tar    (executor and benchmark only)
# then on the host: setsid nohup bash scripts/gpu-host/pass-x4.sh >/dev/null 2>&1 < /dev/null &
# and poll with scripts/gpu-host/poll.sh (pass carry [".gpu"] on every call: a machine that went
# back comes fresh, without it). Session 29's run: the tests part took 640 s (two halves at once, the
# candidate's 24 own-path tests hit the 300 s limit it had then at 19), builds 124 s, ab 400 s.
# Without .gpu/src-pipe.tar / src-fuse.tar the candidate's tests, ab and trace skip what needs
# them. Next 4-GPU host: PARTS="tests rbdbg srb stests pergpu sbench smn". Results under /tmp/res, DONE
# when finished. PARTS
# (default: all, in this order):
#   tests:  GPUs 0,1: the candidate's own-path GPU tests (OWN), then main's gpu / gpu-mpi tests
#           outside multinode, second half (-I 2,,2); at once on GPUs 2,3: main's first half
#           (-I 1,,2), then main's gpu-multinode tests;
#   ab:     GPUs 0,1 alone: --per-gpu --register at AB_K (4 2) ranks per GPU, 64 MiB - 1 GiB,
#           AB_REPS (2) interleaved rounds of pipe, main, fuse and env1 (pipe with 128 MiB big slots);
#   rbdbg:  main's test_rebuild --cuda across 2 simulated nodes x 2 GPUs with ACX_DEBUG=INFO, and
#           with NCCL_CUMEM_ENABLE=1 (pass-scale.sh's part), and the exec-abort tests;
#   trace:  the candidate's step trace on GPUs 0,1 at TRACE_SIZES (64K 64M 1G), 4 and 2 per GPU;
#   srb:    main: the resilient example, fault on rank 1 injected and killed, at 2 and 4 ranks:
#           bit-identical (sres) and fault to ready (srb, SRB_REPS rounds);
#   stests: main: test_coll at 4 and 8 ranks, test_rebuild and test_remote at 4;
#   pergpu: main on all 4 GPUs: --per-gpu --register at 2 and 4 per GPU, 512 KiB - 1 GiB;
#   sbench: main: acx-allreduce-bench --compare on 4 GPUs, f32 and bf16, 8 B - 8 GiB;
#   smn:    main: 2 simulated nodes x 2 GPUs (test_coll, test_remote, test_rebuild, example, bench).
R=/tmp/res; rm -rf $R; mkdir -p $R/c $R/t0 $R/t1 $R/m $R/p $R/t $R/s $R/r $R/pg; B=scripts/gpu-host/batch.sh
PARTS=${PARTS:-tests ab rbdbg trace srb stests pergpu sbench smn}
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*" >> $R/main.txt; }
NG=$(nvidia-smi -L | grep -c '^GPU')
nvidia-smi -L > $R/topo.txt 2>&1; nvidia-smi topo -m >> $R/topo.txt 2>&1; nproc >> $R/topo.txt
for f in .gpu/debs/*.deb; do dpkg -x "$f" /; done; ldconfig
# The candidate (full: its tests run) and the fuse variant (executor and benchmark) build beside main.
builds=()
for v in pipe fuse; do
  M=/tmp/acx-$v; rm -rf $M && mkdir -p $M && tar -xf .gpu/src-$v.tar -C $M || { echo "no .gpu/src-$v.tar" >> $R/main.txt; continue; }
  tg=; [ $v = fuse ] && tg="--target acx-executor acx-allreduce-bench"
  ( { PATH=/usr/local/cuda/bin:$PATH timeout 300 cmake -S $M -B $M/build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
      timeout 900 cmake --build $M/build -j 20 $tg; } > $R/build-$v.txt 2>&1 || echo "$v build FAILED" >> $R/main.txt ) &
  builds+=($!)
done
el build main
OUT=$R bash $B build >> $R/main.txt 2>&1 || { echo BUILD FAILED >> $R/main.txt; touch $R/DONE; exit; }
wait "${builds[@]}"; el builds done
P=/tmp/acx-pipe/build
if has tests; then el tests
  ( if [ -x $P/tools/acx-executor ]; then
      CUDA_VISIBLE_DEVICES=0,1 ACX_GPU_BUILD=$P OUT=$R/c CTEST_R="${OWN:-peer|coll_reg|coll_auto|per_gpu}" CTEST_T=${OWN_T:-480} bash $B ctestr > $R/c.txt 2>&1
    fi
    CUDA_VISIBLE_DEVICES=0,1 OUT=$R/t1 CTEST_E=multinode CTEST_I=2,,2 CTEST_T=420 bash $B ctestr > $R/t1.txt 2>&1 ) &
  ( CUDA_VISIBLE_DEVICES=2,3 OUT=$R/t0 CTEST_E=multinode CTEST_I=1,,2 CTEST_T=420 bash $B ctestr > $R/t0.txt 2>&1
    CUDA_VISIBLE_DEVICES=2,3 OUT=$R/m MT_T=300 bash $B mtests > $R/m.txt 2>&1 ) &
  wait
fi
if has ab; then el ab
  labels=(pipe main fuse env1)
  for rep in $(seq ${AB_REPS:-2}); do for t in "${labels[@]}"; do
    X= E=
    case $t in
      main) ;;
      env1) [ -x $P/tools/acx-executor ] || continue
            E=ACX_COLL_PEER_BIG_KB=131072; X="ACX_GPU_BUILD=$P ACX_EXECUTOR_PATH=$P/tools/acx-executor" ;;
      *) [ -x /tmp/acx-$t/build/tools/acx-executor ] || continue
         X="ACX_GPU_BUILD=/tmp/acx-$t/build ACX_EXECUTOR_PATH=/tmp/acx-$t/build/tools/acx-executor" ;;
    esac
    [ $rep = 1 ] && echo "$t: ${E:+$E }${X:-main}" >> $R/p-labels.txt
    mkdir -p $R/p/$t-$rep
    env $X CUDA_VISIBLE_DEVICES=0,1 OUT=$R/p/$t-$rep PG_ENV="$E" PG_K="${AB_K:-4 2}" PG_B=64M PG_E=1G PG_F=4 PG_R=1 PG_N=10 PG_X=--register \
      bash $B pergpu > $R/p-$t-$rep.txt 2>&1
  done; done
fi
if has rbdbg && [ "$NG" -ge 4 ]; then el rbdbg
  BB=/tmp/acx-clean/build-gpu
  (cd $BB && timeout 200 ctest -R exec_abort --output-on-failure > $R/r/exec-abort.txt 2>&1; grep -E "Test +#|tests passed|returned" $R/r/exec-abort.txt) > $R/rbdbg.txt 2>&1
  OUT=$R/r bash $B rb2x2 >> $R/rbdbg.txt 2>&1
fi
if has trace && [ -x $P/tools/acx-executor ]; then el trace
  CUDA_VISIBLE_DEVICES=0,1 ACX_GPU_BUILD=$P OUT=$R/t TRACE_SIZES="${TRACE_SIZES:-64K 64M 1G}" bash $B ptrace > $R/t.txt 2>&1
fi
has srb && { el srb; OUT=$R/s bash $B sres > $R/sres.txt 2>&1; OUT=$R/s SRB_REPS=${SRB_REPS:-2} bash $B srb > $R/srb.txt 2>&1; }
has stests && { el stests; OUT=$R/s ST_T=200 bash $B stests > $R/stests.txt 2>&1; }
has pergpu && { el pergpu; OUT=$R/pg PG_K="2 4" PG_B=512K PG_E=1G PG_F=4 PG_R=2 PG_N=10 PG_X=--register bash $B pergpu > $R/pergpu.txt 2>&1; }
has sbench && { el sbench; OUT=$R/s SB_T=300 bash $B sbench > $R/sbench.txt 2>&1; }
has smn && { el smn; OUT=$R/s bash $B smn > $R/smn.txt 2>&1; }
el done; touch $R/DONE
