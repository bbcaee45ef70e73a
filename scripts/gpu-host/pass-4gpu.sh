#!/bin/bash
# One detached pass on a 4-GPU host (pass 12, session 12): the own all-reduce on by default
# (ACX_COLL_PEER=-1, auto) under every GPU test; cuRAND's offset no longer reset for a request that
# continues the last (test_lib_rand t_positional; acx-lib-bench); the default all-reduce beside
# the NCCL path and raw NCCL. From the repo root with .gpu/src.tar and .gpu/debs (see batch.sh);
# results under /tmp/res, DONE when finished:
#   setsid nohup bash scripts/gpu-host/pass-4gpu.sh >/dev/null 2>&1 < /dev/null &
# then poll (.gpu/poll.sh). On a 2-GPU host run steps 1 (one half after the other) and 3-4.
R=/tmp/res; rm -rf $R; mkdir -p $R/c0 $R/c1 $R/c4 $R/d $R/e; B=scripts/gpu-host/batch.sh
NG=$(nvidia-smi -L | grep -c '^GPU')
{ nvidia-smi -L; nvidia-smi topo -m; command -v nsys ncu; } > $R/main.txt 2>&1
OUT=$R bash $B build >> $R/main.txt 2>&1 || { echo BUILD FAILED >> $R/main.txt; touch $R/DONE; exit; }
# 1. every gpu / gpu-mpi test, in two halves on two GPU pairs, then gpu-multinode
(CUDA_VISIBLE_DEVICES=0,1 OUT=$R/c0 CTEST_E="multinode" CTEST_I=1,,2 CTEST_T=450 bash $B ctestr > $R/c0.txt 2>&1) &
(CUDA_VISIBLE_DEVICES=2,3 OUT=$R/c1 CTEST_E="multinode" CTEST_I=2,,2 CTEST_T=450 bash $B ctestr > $R/c1.txt 2>&1; CUDA_VISIBLE_DEVICES=2,3 OUT=$R/c1 MT_T=300 bash $B mtests > $R/c-mt.txt 2>&1) &
wait
# 2. four ranks on four GPUs (flat: the own path on by default): coll, rebuild, remote
OUT=$R/c4 CTEST_R="test_coll_peer_cuda_hier_np4|test_coll_nccl_hier_np4|test_rebuild_cuda_hier_np4|test_remote_cuda_np4" CTEST_T=400 bash $B ctestr > $R/c4.txt 2>&1
# 3. the library benchmark twice (every case, 5 ABBA rounds each), cuRAND normals between
for k in 1 2; do OUT=$R/e bash $B libs > $R/e-libs-$k.txt 2>&1; done
# 4. the default (auto) against the NCCL path (ACX_COLL_PEER=0) and raw NCCL, 4 and 2 ranks
OUT=$R/d PEER_NOTEST=1 PEER_REPS=2 PEER_NPS="$NG 2" PEER_F=2 PEER_V="-1 0" bash $B peer > $R/d-peer.txt 2>&1
touch $R/DONE
