#!/bin/bash
# One detached pass on a 4-GPU host (pass 15, session 12): the own all-reduce's kernels with
# programmatic dependent launch (ACX_COLL_PEER_PDL=1) under its GPU tests, and beside PDL off in
# interleaved benchmark runs; the library tests with the readback backpressure (no wait in the
# executor's loop) and cuSOLVER's host workspaces retired behind events. From the repo root with
# .gpu/src.tar and .gpu/debs (see batch.sh); results under /tmp/res, DONE when finished:
#   setsid nohup bash scripts/gpu-host/pass-4gpu.sh >/dev/null 2>&1 < /dev/null &
# then poll (.gpu/poll.sh).
R=/tmp/res; rm -rf $R; mkdir -p $R/c0 $R/c1 $R/d; B=scripts/gpu-host/batch.sh
S=/tmp/acx-clean; BB=$S/build-gpu
NG=$(nvidia-smi -L | grep -c '^GPU')
nvidia-smi -L > $R/main.txt 2>&1
OUT=$R bash $B build >> $R/main.txt 2>&1 || { echo BUILD FAILED >> $R/main.txt; touch $R/DONE; exit; }
C0='OUT=$R/c0 CTEST_ENV="ACX_COLL_PEER_PDL=1" CTEST_R="peer" CTEST_T=300 bash $B ctestr > $R/c0.txt 2>&1'
C1='OUT=$R/c1 CTEST_R="test_lib_blas$|test_lib_solver$|test_lib_rand$|test_device_gpu" CTEST_T=300 bash $B ctestr > $R/c1.txt 2>&1'
if [ "$NG" -ge 4 ]; then
  (export CUDA_VISIBLE_DEVICES=0,1; eval "$C0") & (export CUDA_VISIBLE_DEVICES=2,3; eval "$C1") & wait
else  # a 2-GPU host: one after the other
  eval "$C0"; eval "$C1"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 ACX_EXECUTOR_PATH=$BB/tools/acx-executor
for rep in 1 2; do for np in $(printf '%s\n' $NG 2 | sort -rnu); do for pdl in 0 1; do
  ACX_COLL_PEER=1 ACX_COLL_PEER_PDL=$pdl timeout 90 mpirun -np $np --bind-to none -x NCCL_NVLS_ENABLE -x ACX_EXECUTOR_PATH -x ACX_COLL_PEER -x ACX_COLL_PEER_PDL $BB/bench/allreduce/acx-allreduce-bench --compare -b 8 -e 256K -f 8 -n 200 -w 20 -d float > $R/d/pdl-$np-$pdl-$rep.txt 2>&1
  echo "np=$np pdl=$pdl rep=$rep rc=$?" >> $R/d-pdl.txt; grep -E "^ +[0-9]+ " $R/d/pdl-$np-$pdl-$rep.txt | sed "s/^/np=$np pdl=$pdl rep=$rep /" >> $R/d-pdl.txt
done; done; done
touch $R/DONE
