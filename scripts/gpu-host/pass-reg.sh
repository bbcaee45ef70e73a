#!/bin/bash
# Issue 16's mapped path on 2 GPUs (session 25), one detached pass: the build, the GPU tests of the
# own path's two-shot with groups and of registration (test_coll_reg_cuda_np4 runs the all-reduce
# through registered buffers in five modes), then acx-allreduce-bench --compare --per-gpu under MPS
# at 2 and 4 ranks per GPU from 16 MiB to 1 GiB, unregistered and --register alternating (REG_ROUNDS
# runs of each, each with PG_R interleaved rounds against raw NCCL on one rank per GPU), then the
# other test_coll GPU tests (stream order, exec abort). Results under /tmp/res, DONE when finished:
#   setsid nohup bash scripts/gpu-host/pass-reg.sh >/dev/null 2>&1 < /dev/null &
# and poll with .gpu/poll.sh in calls chained back to back.
R=/tmp/res; rm -rf $R; mkdir -p $R/c $R/p $R/a; B=scripts/gpu-host/batch.sh
nvidia-smi -L > $R/main.txt 2>&1
OUT=$R bash $B build >> $R/main.txt 2>&1 || { echo BUILD FAILED >> $R/main.txt; touch $R/DONE; exit; }
OUT=$R/c CTEST_R='coll_reg|peer_big_cuda_hier|coll_auto_cuda_np4|per_gpu_cuda' CTEST_T=300 bash $B ctestr > $R/c.txt 2>&1
for rnd in $(seq ${REG_ROUNDS:-2}); do
  for x in "" "--register"; do
    [ $((rnd % 2)) = 0 ] && x=$([ -z "$x" ] && echo --register || echo "")
    OUT=$R/p PG_K="2 4" PG_B=16M PG_E=1G PG_R=${PG_R:-2} PG_N=10 PG_X="$x" bash $B pergpu > "$R/p-$rnd-${x:-plain}.txt" 2>&1
  done
done
OUT=$R/a CTEST_R='test_coll_.*cuda|exec_abort' CTEST_E='coll_reg|peer_big_cuda_hier|coll_auto_cuda_np4|per_gpu_cuda|multinode' CTEST_T=400 bash $B ctestr > $R/a.txt 2>&1
touch $R/DONE
