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
#   pergpu: issue 16 under MPS at 2 ranks per GPU (PG_K) on all GPUs, 8 B - 1 GiB, 3 rounds; then
#           the same from 512 KiB for each of PG_VARIANTS (default: the two-shot with groups asked
#           for, ACX_COLL_PEER_BIG_KB=65536: its default takes it on 2 GPUs only, and on 4 GPUs
#           session 24 measured 0.18-0.46 of one rank per GPU from 512 KiB through the hierarchical
#           path), each also with registered buffers (--register, session 25: on 2 GPUs 1.01-1.05
#           of one rank per GPU at 2 ranks per GPU);
#   rbdbg:  test_rebuild --cuda across 2 simulated nodes x NG/2 GPUs with ACX_DEBUG=INFO (session 24:
#           failed twice there, an all-reduce that rank 1 never joined returned ACX_OK on two
#           ranks), and the executor-abort tests (test_coll --exec-abort).
# Session 25's suggestion: PARTS="rbdbg pergpu tests".
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
if has rbdbg; then
  mkdir -p $R/r
  (cd /tmp/acx-clean/build-gpu && timeout 200 ctest -R exec_abort --output-on-failure > $R/r/exec-abort.txt 2>&1; grep -E "Test +#|tests passed|returned" $R/r/exec-abort.txt) > $R/rbdbg.txt 2>&1
  S=/tmp/acx-clean; BB=$S/build-gpu; d=$(dirname "$(find $BB/tests -name test_rebuild -type f | head -1)")
  env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 ACX_EXECUTOR_PATH=$BB/tools/acx-executor \
    ACX_HEARTBEAT_MS=20000 ACX_COLL_TIMEOUT=30000 ACX_REBUILD_TIMEOUT=60000 ACX_REMOTE_TIMEOUT=20000 ACX_DEBUG=INFO ACX_DEBUG_SUBSYS=COLL,DEVICE,TOKEN \
    timeout 240 $S/scripts/sim-cluster/run.sh -q -N 2 -r $((NG / 2)) -g $((NG / 2)) --mpirun -x --mpirun ACX_EXECUTOR_PATH \
    --mpirun -x --mpirun ACX_DEBUG --mpirun -x --mpirun ACX_DEBUG_SUBSYS -- $d/test_rebuild --cuda > $R/r/rb-2x.txt 2>&1
  echo "test_rebuild across 2 x $((NG / 2)): rc=$?" >> $R/rbdbg.txt; grep -E "Run Summary|tests  |asserts|never joined" $R/r/rb-2x.txt >> $R/rbdbg.txt
  # The same with NCCL's cuMem buffers (refcounted across processes: a dead executor's memory stays
  # while its peers map it), against the hypothesis that the survivors' kernels read the killed
  # executor's freed (or reused) legacy-IPC pages and completed with garbage (resilience.md).
  env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 ACX_EXECUTOR_PATH=$BB/tools/acx-executor \
    ACX_HEARTBEAT_MS=20000 ACX_COLL_TIMEOUT=30000 ACX_REBUILD_TIMEOUT=60000 ACX_REMOTE_TIMEOUT=20000 NCCL_CUMEM_ENABLE=1 \
    timeout 240 $S/scripts/sim-cluster/run.sh -q -N 2 -r $((NG / 2)) -g $((NG / 2)) --mpirun -x --mpirun ACX_EXECUTOR_PATH \
    --mpirun -x --mpirun NCCL_CUMEM_ENABLE -- $d/test_rebuild --cuda > $R/r/rb-2x-cumem.txt 2>&1
  echo "test_rebuild across 2 x $((NG / 2)), NCCL_CUMEM_ENABLE=1: rc=$?" >> $R/rbdbg.txt
  grep -E "Run Summary|tests  |asserts|never joined|sticky" $R/r/rb-2x-cumem.txt >> $R/rbdbg.txt
fi
has pergpu && OUT=$R/p PG_K=${PG_K:-2} bash $B pergpu > $R/pergpu.txt 2>&1
if has pergpu; then
  for v in ${PG_VARIANTS:-ACX_COLL_PEER_BIG_KB=65536}; do
    OUT=$R/p PG_K=${PG_K:-2} PG_B=512K PG_ENV="${v//,/ }" bash $B pergpu > "$R/pergpu-$(tr -c 'a-zA-Z0-9=_\n' _ <<<"$v").txt" 2>&1
    OUT=$R/p PG_K=${PG_K:-2} PG_B=512K PG_X=--register PG_ENV="${v//,/ }" bash $B pergpu \
      > "$R/pergpu-reg-$(tr -c 'a-zA-Z0-9=_\n' _ <<<"$v").txt" 2>&1
  done
fi
touch $R/DONE
