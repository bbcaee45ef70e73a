#!/bin/bash
# A short pass for a 4-GPU host (issue 17 at 4 ranks): build, then acx-allreduce-bench --compare at
# 4 ranks: small sizes with batches and the 64 KiB lines against the NCCL path, large sizes with the
# two-shot at 128 blocks against the NCCL path. Output under $OUT. From the repo root with .gpu/.
S=/tmp/acx-clean; BB=$S/build-gpu; R=${OUT:-/tmp/res}; mkdir -p $R
nvidia-smi -L > $R/main.txt
NG=$(nvidia-smi -L | grep -c '^GPU')
[ "$NG" -ge 4 ] || { echo "pass-4q: needs 4 GPUs, this host has $NG (use pass-next.sh)"; exit 1; }
bash scripts/gpu-host/batch.sh build >> $R/main.txt 2>&1 || { echo BUILD FAILED; tail $R/main.txt; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 ACX_EXECUTOR_PATH=$BB/tools/acx-executor
X="-x NCCL_NVLS_ENABLE -x ACX_EXECUTOR_PATH -x ACX_COLL_PEER -x ACX_COLL_PEER_PDL -x ACX_COLL_PEER_LL_KB -x ACX_COLL_PEER_BIG_KB -x ACX_COLL_PEER_BIG_BLOCKS"
b() { local name=$1 args=$2; shift 2
  env "$@" timeout 50 mpirun -np 4 --bind-to none $X $BB/bench/allreduce/acx-allreduce-bench --compare $args -d float > $R/$name.txt 2>&1
  echo "$name rc=$?"; grep -E "^ +[0-9]+ " $R/$name.txt | awk -v n=$name '{print n, $1, $6, $10, $12, $13, $17, $19}'; }
b small-ll64 "-b 8 -e 64K -f 8 -n 300 -w 30" ACX_COLL_PEER=1 ACX_COLL_PEER_PDL=1 ACX_COLL_PEER_LL_KB=64
b small-nccl "-b 8 -e 64K -f 8 -n 300 -w 30" ACX_COLL_PEER=0
b big-128 "-b 16M -e 256M -f 4 -n 5 -w 2" ACX_COLL_PEER=1 ACX_COLL_PEER_BIG_KB=16384 ACX_COLL_PEER_BIG_BLOCKS=128
b big-nccl "-b 16M -e 256M -f 4 -n 5 -w 2" ACX_COLL_PEER=0
