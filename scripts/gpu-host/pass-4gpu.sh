#!/bin/bash
# One detached pass (pass 16, prepared in session 12 for the next session) on a 4-GPU host, or a
# 2-GPU one: what session 12 built and could not run on a GPU, most decisive first.
#   1. GPU tests of the new pieces: the two-shot (test_peer_exec_gpu now covers it,
#      test_coll_peer_big_cuda_np2), the readback backpressure (test_lib_blas
#      t_readback_backpressure), cuSOLVER's retired host workspaces (test_lib_solver), the own path
#      with programmatic dependent launch and an event every 16 operations (ACX_COLL_PEER_PDL=1,
#      ACX_COLL_PEER_EVENT_EVERY=16); then every other GPU test.
#   2. The two-shot against the NCCL path and raw NCCL, 1 MiB - 1 GiB (issue 17's large-message goal:
#      >= 1.05x NCCL's busbw from 256 MiB), chunks of 4 and 16 MiB, interleaved rounds.
#   3. The small all-reduces with PDL off/on and an event per operation / every 16th, interleaved.
#   4. Issue 16: 2 ranks per GPU under MPS through the own path's current kernels (batch.sh peermps).
# From the repo root with .gpu/src.tar and .gpu/debs (see batch.sh); results under /tmp/res, DONE
# when finished:
#   setsid nohup bash scripts/gpu-host/pass-4gpu.sh >/dev/null 2>&1 < /dev/null &
# then poll (.gpu/poll.sh). PARTS (default "new pdl others big small mps") picks the steps:
# new: 1's new pieces, pdl: 1's PDL run, others: every other GPU test, big: 2, small: 3, mps: 4;
# libs: acx-lib-bench twice on GPU 0 (issue 15 on H200: added on its own where the GPUs are H200).
R=/tmp/res; rm -rf $R; mkdir -p $R/c0 $R/c1 $R/c2 $R/d $R/e; B=scripts/gpu-host/batch.sh
S=/tmp/acx-clean; BB=$S/build-gpu
NG=$(nvidia-smi -L | grep -c '^GPU')
nvidia-smi -L > $R/main.txt 2>&1
PARTS=${PARTS:-new pdl others big small mps}
nvidia-smi -L | grep -q H200 && PARTS="$PARTS libs"
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
OUT=$R bash $B build >> $R/main.txt 2>&1 || { echo BUILD FAILED >> $R/main.txt; touch $R/DONE; exit; }
NEW="peer|auto|test_lib_blas$|test_lib_solver$|test_lib_rand$|test_device_gpu"
C0='has new && OUT=$R/c0 CTEST_R="$NEW" CTEST_T=400 bash $B ctestr > $R/c0.txt 2>&1'
C1='has others && OUT=$R/c1 CTEST_E="multinode|$NEW" CTEST_T=450 bash $B ctestr > $R/c1.txt 2>&1'
C2='has pdl && OUT=$R/c2 CTEST_ENV="ACX_COLL_PEER_PDL=1 ACX_COLL_PEER_EVENT_EVERY=16" CTEST_R="peer|auto" CTEST_T=300 bash $B ctestr > $R/c2.txt 2>&1'
if [ "$NG" -ge 4 ]; then
  (export CUDA_VISIBLE_DEVICES=0,1; eval "$C0"; eval "$C2") & (export CUDA_VISIBLE_DEVICES=2,3; eval "$C1") & wait
else
  eval "$C0"; eval "$C2"; eval "$C1"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 ACX_EXECUTOR_PATH=$BB/tools/acx-executor
NPS=$(printf '%s\n' $NG 2 | sort -rnu)
run() { # name np env... : acx-allreduce-bench --compare with the given environment, rows tagged
  local name=$1 np=$2; shift 2
  env "$@" timeout 150 mpirun -np $np --bind-to none -x NCCL_NVLS_ENABLE -x ACX_EXECUTOR_PATH -x ACX_COLL_PEER \
    -x ACX_COLL_PEER_BIG_KB -x ACX_COLL_PEER_PDL -x ACX_COLL_PEER_EVENT_EVERY $BB/bench/allreduce/acx-allreduce-bench --compare $ARGS -d float \
    > $R/d/$name.txt 2>&1
  echo "$name rc=$?" >> $R/d-$KIND.txt; grep -E "^ +[0-9]+ " $R/d/$name.txt | sed "s/^/$name /" >> $R/d-$KIND.txt
}
KIND=big ARGS="-b 1M -e 1G -f 4 -n 20 -w 3"
has big && for rep in 1 2; do for np in $NPS; do
  run big-$np-off-$rep $np ACX_COLL_PEER=0
  run big-$np-4M-$rep $np ACX_COLL_PEER=1 ACX_COLL_PEER_BIG_KB=4096
  run big-$np-16M-$rep $np ACX_COLL_PEER=1 ACX_COLL_PEER_BIG_KB=16384
done; done
KIND=pdl ARGS="-b 8 -e 256K -f 8 -n 200 -w 20"
has small && for rep in 1 2; do for np in $NPS; do for v in 0:1 1:1 0:16 1:16; do IFS=: read -r pdl k <<<"$v"
  run pdl-$np-$pdl-$k-$rep $np ACX_COLL_PEER=1 ACX_COLL_PEER_PDL=$pdl ACX_COLL_PEER_EVENT_EVERY=$k
done; done; done
has mps && OUT=$R/e PEER_REPS=2 bash $B peermps > $R/e-peermps.txt 2>&1
if has libs; then
  for k in 1 2; do CUDA_VISIBLE_DEVICES=0 timeout 200 $BB/bench/libs/acx-lib-bench > $R/libs-$k.txt 2>&1; echo "libs $k rc=$?" >> $R/main.txt; done
fi
touch $R/DONE
