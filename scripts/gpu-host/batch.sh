#!/bin/bash
# The GPU-host batch used for the 2026-11-22 results: run from the repo root on the GPU host with
# the committed tree in .gpu/src.tar (`git archive HEAD -o .gpu/src.tar`) and the CUnit debs in
# .gpu/debs; steps: build floor tests peermid pergpu ptrace others memcheck launch f32 bf16 bf16big net netcmp ctestr mtests mbench mborder mprobe hier hiero hiermps sm80 libs retest small remote remotev mid smallstats gmax testsv netsmall.
# F32_T, BF16_T, NET_T: the sweeps' time limits (s). Logs go to $OUT. Steps run on the GPUs that
# CUDA_VISIBLE_DEVICES names (all when unset): NG below; two batches on disjoint GPU sets can run at
# once with their own OUT. Steps for every visible GPU (issue 18): stests sres srb sbench sbig smn rb2x2.
# Issue 17 (acx's own all-reduce, ACX_COLL_PEER): peer peermps; issue 16's large sizes through it: mpsbig.
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
# ACX_GPU_BUILD: another build of the same tree for the steps after build (e.g. pass-pergpu.sh's
# occ part, configured with other CMake options); the build step always makes $S/build-gpu.
S=/tmp/acx-clean; B=${ACX_GPU_BUILD:-$S/build-gpu}
export PATH="/usr/local/cuda/bin:$PATH"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 ACX_EXECUTOR_PATH=$B/tools/acx-executor
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then NG=$(tr , '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c .); else NG=$(nvidia-smi -L | grep -c '^GPU'); fi
RB_ENV="ACX_HEARTBEAT_MS=20000 ACX_COLL_TIMEOUT=30000 ACX_REBUILD_TIMEOUT=60000 ACX_REMOTE_TIMEOUT=20000"
BENCH="mpirun -np 2 --bind-to none -x NCCL_NVLS_ENABLE -x ACX_EXECUTOR_PATH -x NCCL_P2P_DISABLE -x NCCL_SHM_DISABLE $B/bench/allreduce/acx-allreduce-bench --compare"
# Interleaved rounds of acx-allreduce-bench f32 at 1, 2 and 4 ranks per GPU, the hierarchical ones
# with the ordered path on and off (ACX_COLL_HIER_ORDERED); $1 names the logs, HB_X adds mpirun options.
hier_rounds() {
  for rep in $(seq ${HB_REPS:-2}); do for v in ${HB_V:-1:1 2:1 2:0 4:1 4:0}; do IFS=: read -r k o <<<"$v"; np=$((NG * k))
    t0=$(date +%s%N); timeout ${HB_T:-120} mpirun -np $np --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x ACX_EXECUTOR_PATH -x ACX_COLL_HIER_ORDERED=$o ${HB_X:-} $B/bench/allreduce/acx-allreduce-bench -b 8 -e ${HB_MAX:-256M} -f ${HB_F:-8} -n ${HB_N:-20} -w 5 -d float >$OUT/$1-$k-$o-$rep.txt 2>&1; rc=$?
    echo "ranks/GPU=$k ordered=$o rep=$rep rc=$rc wall=$(( ($(date +%s%N) - t0) / 1000000 )) ms"
    grep -E "^ +[0-9]+ " $OUT/$1-$k-$o-$rep.txt | sed "s/^/k=$k o=$o rep=$rep /"; done; done
}
# A private MPS control daemon for one step (own pipe directory; the executors inherit it): mps_on
# starts it (fails, saying so, where the host has no nvidia-cuda-mps-control), mps_off quits it.
mps_on() {
  command -v nvidia-cuda-mps-control >/dev/null || { echo "no nvidia-cuda-mps-control on PATH: skipped"; return 1; }
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/acx-mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/acx-mps/log
  mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY && nvidia-cuda-mps-control -d && echo "MPS control daemon started"
}
mps_off() { echo quit | nvidia-cuda-mps-control; unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY; }
for step in "$@"; do
  case "$step" in
    build) el build
      B=$S/build-gpu ACX_EXECUTOR_PATH=$S/build-gpu/tools/acx-executor
      rm -rf $S && mkdir -p $S && tar -xf .gpu/src.tar -C $S
      for f in .gpu/debs/*.deb; do dpkg -x "$f" / ; done; ldconfig
      cmake -S $S -B $B -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >$OUT/cfg.txt 2>&1 || { tail -30 $OUT/cfg.txt; exit 1; }
      grep "acx:" $OUT/cfg.txt
      cmake --build $B -j 32 >$OUT/build.txt 2>&1 || { grep -E "error|Error" $OUT/build.txt | head -30; exit 1; } ;;
    tests) el tests
      (cd $B && timeout 420 ctest -L gpu --output-on-failure --timeout 200 >$OUT/ctest-gpu.txt 2>&1; grep -E "^ *[0-9]+/[0-9]+ Test|tests passed|FAILED|Failed|\(Timeout\)" $OUT/ctest-gpu.txt | tail -40) ;;
    testsv) el testsv  # every GPU test, verbose: the summary plus the remote and resilience lines
      (cd $B && timeout 420 ctest -L gpu -V --timeout 200 >$OUT/ctest-gpu-v.txt 2>&1; grep -E "^ *[0-9]+/[0-9]+ Test|tests passed|tests failed|crossfire|identical|rebuild\(s\)|covered by it|ncclCommAbort .* took|world ready" $OUT/ctest-gpu-v.txt | sed 's/^[0-9]*: //' | tail -50) ;;
    netsmall) el netsmall  # small sizes on the network transport with the replay stats and graph node types
      ACX_DEBUG=INFO ACX_DEBUG_SUBSYS=COLL NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 timeout 60 mpirun -np 2 --bind-to none -x NCCL_NVLS_ENABLE -x ACX_EXECUTOR_PATH -x ACX_DEBUG -x ACX_DEBUG_SUBSYS -x NCCL_P2P_DISABLE -x NCCL_SHM_DISABLE $B/bench/allreduce/acx-allreduce-bench --compare -b 8 -e 32K -f 64 -n 50 -w 10 -d float >$OUT/netsmall.txt 2>&1; grep -E "^ +[0-9]+ " $OUT/netsmall.txt; grep -hoE "(first collective captured.*|communicator 1: [0-9]+ operations.*)" $OUT/netsmall.txt | sort -u | head -4 ;;
    memcheck) el memcheck
      for t in tests/gpu/test_engine_cuda; do timeout 150 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $B/$t --no-fault >$OUT/memcheck.txt 2>&1; echo "memcheck $t rc=$?"; grep -E "ERROR SUMMARY|Run Summary|tests " $OUT/memcheck.txt | head -4; done ;;
    launch) el launch; timeout 150 $B/bench/launch/acx-launch-bench 2>&1 | tee $OUT/launch.txt | grep -vE "ACX WARN" | tail -16 ;;
    f32) el f32; timeout ${F32_T:-200} $BENCH -b 8 -e 8G -f 4 -n 20 -w 5 -d float --json $OUT/f32.json --plot $OUT/f32.png >$OUT/ar-f32.txt 2>&1; echo rc=$?; grep -vE "^#  Rank" $OUT/ar-f32.txt | tail -24 ;;
    bf16) el bf16; timeout ${BF16_T:-150} $BENCH -b 8 -e 2G -f 4 -n 20 -w 5 -d bfloat16 --json $OUT/bf16.json >$OUT/ar-bf16.txt 2>&1; echo rc=$?; grep -vE "^#  Rank" $OUT/ar-bf16.txt | tail -24 ;;
    bf16big) el bf16big; timeout 250 $BENCH -b 8G -e 8G -n 20 -w 5 -d bfloat16 --json $OUT/bf16big.json >$OUT/ar-bf16big.txt 2>&1; echo rc=$?; grep -vE "^#  Rank" $OUT/ar-bf16big.txt | tail -8 ;;
    net) el net; NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 timeout ${NET_T:-150} $BENCH -b 8 -e 256M -f 8 -n 10 -w 3 -d float --json $OUT/net.json >$OUT/ar-net.txt 2>&1; echo rc=$?; grep -vE "^#  Rank" $OUT/ar-net.txt | tail -16 ;;
    retest) el retest
      (cd $B && timeout 200 ctest -R "test_device_gpu|test_engine_cuda|test_lib_blaslt|test_lib_rtc|resilient_allreduce_cuda_net_np2" --output-on-failure --timeout 100 >$OUT/ctest-retest.txt 2>&1; grep -E "^ *[0-9]+/[0-9]+ Test|tests passed|FAILED|Failed|\(Timeout\)|^ +[0-9]+\. " $OUT/ctest-retest.txt | tail -20) ;;
    small) el small
      for sb in 1 0; do ACX_EXECUTOR_STANDBY=$sb timeout 60 mpirun -np 2 --bind-to none -x NCCL_NVLS_ENABLE -x ACX_EXECUTOR_PATH -x ACX_EXECUTOR_STANDBY $B/bench/allreduce/acx-allreduce-bench --compare -b 8 -e 32K -f 64 -n 100 -w 20 -d float 2>&1 | grep -E "^ +[0-9]+ " | sed "s/^/standby=$sb /"; done ;;
    remote) el remote
      (cd $B && timeout ${REMOTE_T:-300} ctest -L gpu-mpi -R "${REMOTE_R:-remote|rebuild|resilient}" --output-on-failure --timeout 150 >$OUT/ctest-remote.txt 2>&1; grep -E "^ *[0-9]+/[0-9]+ Test|tests passed|FAILED|Failed|\(Timeout\)|crossfire|recovered|fault-to-ready|bit" $OUT/ctest-remote.txt | tail -40) ;;
    remotev) el remotev  # the verbose output of the GPU remote and resilience tests (timings, results)
      (cd $B && timeout 200 ctest -V -R "resilient_allreduce_cuda|test_remote_cuda" --timeout 150 >$OUT/ctest-remotev.txt 2>&1; grep -E "crossfire|result:|recovered at|rebuild\(s\)|identical|differ|tests passed" $OUT/ctest-remotev.txt | sed 's/^[0-9]*: //' | tail -40) ;;
    mid) el mid  # 32 MiB - 256 MiB with more iterations
      for rep in $(seq ${MID_REPS:-1}); do for d in float bfloat16; do timeout 120 $BENCH -b 32M -e 256M -f 2 -n ${MID_N:-60} -w 10 -d $d >$OUT/ar-mid-$d-$rep.txt 2>&1; grep -E "^ +[0-9]+ " $OUT/ar-mid-$d-$rep.txt | sed "s/^/rep=$rep /"; done; done ;;
    gmax) el gmax  # mid sizes with and without graph replay above 16 MiB, interleaved
      for rep in 1 2; do for gm in -1 16777216; do ACX_COLL_GRAPH_MAX_BYTES=$gm ACX_DEBUG=INFO ACX_DEBUG_SUBSYS=COLL timeout 60 mpirun -np 2 --bind-to none -x NCCL_NVLS_ENABLE -x ACX_EXECUTOR_PATH -x ACX_COLL_GRAPH_MAX_BYTES -x ACX_DEBUG -x ACX_DEBUG_SUBSYS $B/bench/allreduce/acx-allreduce-bench --compare -b 16M -e 128M -f 2 -n 40 -w 10 -d float >$OUT/gmax-$gm-$rep.txt 2>&1; grep -E "^ +[0-9]+ " $OUT/gmax-$gm-$rep.txt | sed "s/^/gmax=$gm /"; grep -hoE "(first collective captured.*|communicator 1: [0-9]+ operations.*)" $OUT/gmax-$gm-$rep.txt | sort -u | head -3; done; done ;;
    smallstats) el smallstats  # small messages, repeated, with the communicator's executor-time stats
      for rep in 1 2 3; do ACX_DEBUG=INFO ACX_DEBUG_SUBSYS=COLL timeout 40 mpirun -np 2 --bind-to none -x NCCL_NVLS_ENABLE -x ACX_EXECUTOR_PATH -x ACX_DEBUG -x ACX_DEBUG_SUBSYS $B/bench/allreduce/acx-allreduce-bench --compare -b 8 -e 32K -f 64 -n 100 -w 20 -d float --json $OUT/small-$rep.json >$OUT/small-$rep.txt 2>&1; grep -E "^ +[0-9]+ " $OUT/small-$rep.txt | sed "s/^/rep=$rep /"; grep -oE "communicator 1: .*" $OUT/small-$rep.txt | sed "s/^/rep=$rep /"; grep -oE '"(actor|nccl)": \{"out_of_place": \{"time_us": [0-9.]+, "issue_us": [0-9.]+' $OUT/small-$rep.json | sed "s/^/rep=$rep /"; done ;;
    copycmp) el copycmp  # small messages with kernel copies (default) and NCCL's graphs replayed whole, interleaved
      for rep in 1 2 3; do for cp in 1 0; do ACX_COLL_GRAPH_COPY=$cp ACX_DEBUG=INFO ACX_DEBUG_SUBSYS=COLL timeout 40 mpirun -np 2 --bind-to none -x NCCL_NVLS_ENABLE -x ACX_EXECUTOR_PATH -x ACX_COLL_GRAPH_COPY -x ACX_DEBUG -x ACX_DEBUG_SUBSYS $B/bench/allreduce/acx-allreduce-bench --compare -b 8 -e 1M -f 8 -n 200 -w 20 -d float >$OUT/copy-$cp-$rep.txt 2>&1; grep -E "^ +[0-9]+ " $OUT/copy-$cp-$rep.txt | sed "s/^/copy=$cp rep=$rep /"; grep -oE "communicator 1: [0-9]+ operations.*" $OUT/copy-$cp-$rep.txt | sed "s/^/copy=$cp rep=$rep /" | head -1; done; done ;;
    floor) el floor  # raw NCCL: direct calls and graph replays, blocking and non-blocking communicators, with and without graph mixing
      for w in ${FLOOR_W:-nvlink:8:1 nvlink:8:0 nvlink:32768:0 net:8:1 net:8:0}; do IFS=: read -r tr sz mix <<<"$w"; if [ $tr = net ]; then n=1; else n=; fi
        NCCL_GRAPH_MIXING_SUPPORT=$mix NCCL_P2P_DISABLE=$n NCCL_SHM_DISABLE=$n timeout 60 mpirun -np 2 --bind-to none -x NCCL_NVLS_ENABLE -x NCCL_P2P_DISABLE -x NCCL_SHM_DISABLE -x NCCL_GRAPH_MIXING_SUPPORT $B/bench/allreduce/acx-nccl-floor $sz ${FLOOR_N:-3000} 2>&1 | tee $OUT/floor-$tr-$sz-$mix.txt | grep -v "^#  Rank" | sed "s/^/$tr:$sz /"; done ;;
    netcmp) el netcmp  # NCCL's network transport on one node: blocking vs non-blocking communicators, interleaved
      for rep in $(seq ${NETCMP_REPS:-2}); do for bl in 1 0; do for rg in "-b 8 -e 256K -f 8 -n 200 -w 20" "-b 2M -e ${NETCMP_MAX:-1G} -f 8 -n 10 -w 3"; do
        ACX_COLL_BLOCKING=$bl NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 timeout 150 mpirun -np 2 --bind-to none -x NCCL_NVLS_ENABLE -x ACX_EXECUTOR_PATH -x NCCL_P2P_DISABLE -x NCCL_SHM_DISABLE -x ACX_COLL_BLOCKING $B/bench/allreduce/acx-allreduce-bench --compare $rg -d float >$OUT/netcmp-$bl-$rep.txt 2>&1; echo "rc=$?"; grep -E "^ +[0-9]+ " $OUT/netcmp-$bl-$rep.txt | sed "s/^/blocking=$bl rep=$rep /"; done; done; done ;;
    ctestr) el ctestr  # the GPU tests matching CTEST_R and not CTEST_E (CTEST_I: ctest's -I), with CTEST_ENV exported
      (cd $B && env ${CTEST_ENV:-} timeout ${CTEST_T:-300} ctest -R "${CTEST_R:-.}" -E "${CTEST_E:-^$}" ${CTEST_I:+-I $CTEST_I} -L gpu --output-on-failure --timeout 200 >$OUT/ctest-r.txt 2>&1; grep -E "^ *[0-9]+/[0-9]+ Test|tests passed|FAILED|Failed|\(Timeout\)|identical|differ" $OUT/ctest-r.txt | tail -30) ;;
    others) el others  # every gpu / gpu-mpi test but the multinode ones and those matching OWN (ctestr, OTHERS_T s, logs in $OUT/a), then the gpu-multinode tests on GPUs 0 and 1 (mtests, logs in $OUT/m)
      mkdir -p $OUT/a $OUT/m
      OUT=$OUT/a CTEST_E="multinode${OWN:+|$OWN}" CTEST_T=${OTHERS_T:-560} bash "$0" ctestr
      CUDA_VISIBLE_DEVICES=0,1 OUT=$OUT/m bash "$0" mtests ;;
    ptrace) el ptrace  # the own path's step trace (ACX_COLL_PEER_TRACE=1; issue 16): the per-GPU benchmark, registered, TRACE_N (50) iterations, one size of TRACE_SIZES (128K 1M 64M 1G) a run at TRACE_K (4 2) ranks per GPU, logs under $OUT/SIZE; then every executor's trace lines of each run
      for sz in ${TRACE_SIZES:-128K 1M 64M 1G}; do mkdir -p $OUT/$sz
        OUT=$OUT/$sz PG_K="${TRACE_K:-4 2}" PG_B=$sz PG_E=$sz PG_R=1 PG_N=${TRACE_N:-50} PG_X=--register \
          PG_ENV="ACX_COLL_PEER_TRACE=1 ACX_DEBUG=INFO ACX_DEBUG_SUBSYS=COLL" bash "$0" pergpu
        for f in $OUT/$sz/pergpu-*.txt; do echo "== $sz $f"; grep -h 'trace (rank' $f | sed 's/.*peer set [0-9]* //'; done
      done ;;
    mtests) el mtests  # the gpu-multinode tests: 2 simulated nodes x 1 GPU (docs/multinode.md)
      (cd $B && timeout ${MT_T:-420} ctest -L gpu-multinode --output-on-failure --timeout 300 >$OUT/ctest-gpu-multinode.txt 2>&1; grep -E "^ *[0-9]+/[0-9]+ Test|tests passed|FAILED|Failed|\(Timeout\)|identical|differ" $OUT/ctest-gpu-multinode.txt | tail -30) ;;
    mbench) el mbench  # acx vs raw NCCL f32 8 B - 1 GiB: 2 simulated nodes x 1 GPU, and 1 node with NCCL's network transport forced; rounds ABBA (-r; MB_R overrides, MB_N the large sizes' iterations), medians; MB_LE: the largest size, MB_SE: the small range's largest, MB_RANGES: which of small mid large, MB_CFGS: which of sim2 net1; MB_ARGS: more bench options (MB_ARGS="--mode nccl --baseline nccl": raw NCCL against itself, the comparison's noise floor); MB_ENV="NAME=VALUE ...": set for acx and raw NCCL alike (issue 13's 256-512 B gap across simulated nodes: NCCL_CUMEM_ENABLE=0 as acx's executor sets it, NCCL_SOCKET_INLINE=1024 past the socket transport's 128 B inline limit, NCCL_ALGO=Ring NCCL_PROTO=LL, NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING,NET)
      MBX=(); MBN=(); for kv in ${MB_ENV:-}; do export "${kv?}"; MBX+=(--mpirun -x --mpirun "${kv%%=*}"); MBN+=(-x "${kv%%=*}"); done
      SIM="$S/scripts/sim-cluster/run.sh -q -N 2 -r 1 -g 1 --mpirun -x --mpirun ACX_EXECUTOR_PATH ${MBX[*]} --"
      NET="env NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 mpirun -np 2 --bind-to none -x NCCL_NVLS_ENABLE -x ACX_EXECUTOR_PATH -x NCCL_P2P_DISABLE -x NCCL_SHM_DISABLE ${MBN[*]}"
      for rg in "small:-b 8 -e ${MB_SE:-64K} -f 2 -n 100 -w 20 -r ${MB_R:-5}" "mid:-b 128K -e 32M -f 4 -n 20 -w 5 -r ${MB_R:-3}" "large:-b 64M -e ${MB_LE:-1G} -f 2 -n ${MB_N:-5} -w 1 -r ${MB_R:-3}"; do
        name=${rg%%:*} args=${rg#*:}
        case " ${MB_RANGES:-small mid large} " in *" $name "*) ;; *) continue ;; esac
        for cfg in ${MB_CFGS:-sim2 net1}; do if [ $cfg = sim2 ]; then L=$SIM; else L=$NET; fi
          timeout ${MB_T:-200} $L $B/bench/allreduce/acx-allreduce-bench --compare $args ${MB_ARGS:-} -d float --json $OUT/mb-$cfg-$name.json >$OUT/mb-$cfg-$name.txt 2>&1; echo "$cfg $name rc=$?"
          grep -E "nodes:|^ +[0-9]+ " $OUT/mb-$cfg-$name.txt | sed "s/^/$cfg /"; done; done ;;
    mborder) el mborder  # issue 13's open mid sizes: short runs of acx vs raw (AB), raw vs acx (BA: raw NCCL's communicator made first) and raw vs raw (AA), interleaved, both configurations; MO_C cycles, MO_RANGES (default mid); MO_V the variants (default AB BA AA; ANnnn: AB with ACX_EXEC_NAP_NS=nnn for acx's executor; AC: AB with NCCL_CUMEM_ENABLE=0 for both, as acx's executor sets it); pool with scripts/pool-allreduce-json.py --ab '$OUT/mo-*-AB-*/*.json' --ba '...-BA-...' --aa '...-AA-...'
      for c in $(seq ${MO_C:-3}); do for cfg in ${MB_CFGS:-sim2 net1}; do for v in ${MO_V:-AB BA AA}; do
        e=""; case $v in AB) a="" ;; BA) a="--mode nccl --baseline actor" ;; AA) a="--mode nccl --baseline nccl" ;; AN*) a=""; e="ACX_EXEC_NAP_NS=${v#AN}" ;; AC) a=""; e="NCCL_CUMEM_ENABLE=0" ;; esac
        mkdir -p $OUT/mo-$cfg-$v-$c
        MB_ENV="$e" MB_ARGS="$a" MB_RANGES="${MO_RANGES:-mid}" MB_CFGS=$cfg MB_R=${MB_R:-2} OUT=$OUT/mo-$cfg-$v-$c bash $0 mbench 2>&1 | grep -E "rc=" | sed "s/^/$v c=$c /"
      done; done; done
      for cfg in ${MB_CFGS:-sim2 net1}; do echo "== $cfg"; PX=(); for v in BA AA; do case " ${MO_V:-AB BA AA} " in *" $v "*) PX+=(--${v,,} "$OUT/mo-$cfg-$v-*/*.json") ;; esac; done
        python3 $S/scripts/pool-allreduce-json.py --ab "$OUT/mo-$cfg-AB-*/*.json" "${PX[@]}"
        for v in ${MO_V:-}; do case $v in AN*|AC) echo "== $cfg: $v as AB, AB as AA"; python3 $S/scripts/pool-allreduce-json.py --ab "$OUT/mo-$cfg-$v-*/*.json" --aa "$OUT/mo-$cfg-AB-*/*.json" ;; esac; done; done ;;
    mprobe) el mprobe  # small sizes across 2 simulated nodes: is acx's extra time per operation or per batch? -n 20 vs -n 200, interleaved
      SIM="$S/scripts/sim-cluster/run.sh -q -N 2 -r 1 -g 1 --mpirun -x --mpirun ACX_EXECUTOR_PATH --"
      for rep in $(seq ${MP_REPS:-2}); do for n in 20 200; do
        timeout 120 $SIM $B/bench/allreduce/acx-allreduce-bench --compare -b 8 -e 64K -f 8 -n $n -w 20 -r 3 -d float >$OUT/mp-$n-$rep.txt 2>&1; echo "n=$n rep=$rep rc=$?"
        grep -E "^ +[0-9]+ " $OUT/mp-$n-$rep.txt | sed "s/^/n=$n rep=$rep /"; done; done ;;
    hier) el hier  # ranks sharing a GPU (hierarchical colls): acx all-reduce f32 at 1, 2 and 4 ranks per GPU, interleaved rounds
      for rep in $(seq ${HB_REPS:-2}); do for k in 1 2 4; do np=$((NG * k))
        nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits -lms 500 >$OUT/hier-mem-$k-$rep.txt 2>/dev/null & SMI=$!
        t0=$(date +%s%N); timeout ${HB_T:-150} mpirun -np $np --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x ACX_EXECUTOR_PATH $B/bench/allreduce/acx-allreduce-bench -b 8 -e ${HB_MAX:-256M} -f 8 -n ${HB_N:-20} -w 5 -d float >$OUT/hier-$k-$rep.txt 2>&1; rc=$?; kill $SMI 2>/dev/null
        echo "ranks/GPU=$k rep=$rep rc=$rc wall=$(( ($(date +%s%N) - t0) / 1000000 )) ms; GPU processes seen: $(cut -d, -f1 $OUT/hier-mem-$k-$rep.txt | sort -u | wc -l), MiB per process (max): $(sort -t, -k2 -n $OUT/hier-mem-$k-$rep.txt | tail -1 | cut -d, -f2)"
        grep -E "^ +[0-9]+ " $OUT/hier-$k-$rep.txt | sed "s/^/k=$k rep=$rep /"; done; done ;;
    hiero) el hiero  # ranks sharing a GPU: the ordered path against the step protocol (ACX_COLL_HIER_ORDERED=0, direct path up to 64 KiB), 1 rank per GPU beside, interleaved rounds
      hier_rounds hiero ;;
    hiermps) el hiermps  # hiero's rounds under MPS (a control daemon of this step's own, private pipe directory, quit at the end): the executors' contexts share the GPU instead of time-slicing
      mps_on || continue
      HB_X="-x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY ${HB_X:-}" hier_rounds hiermps
      tail -5 $CUDA_MPS_LOG_DIRECTORY/control.log; mps_off ;;
    hierov) el hierov  # issue 16's large all-reduces under MPS: 2 ranks per GPU with ACX_COLL_HIER_OVERLAP 0 and 1, 1 rank per GPU beside, 16 MiB - 512 MiB, interleaved rounds
      mps_on || continue
      for rep in $(seq ${HO_REPS:-2}); do for v in 1:0 2:0 2:1; do IFS=: read -r k ov <<<"$v"; np=$((NG * k))
        ACX_COLL_HIER_OVERLAP=$ov timeout 150 mpirun -np $np --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x ACX_EXECUTOR_PATH -x ACX_COLL_HIER_OVERLAP -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY $B/bench/allreduce/acx-allreduce-bench -b 16M -e 512M -f 4 -n 10 -w 3 -d float >$OUT/hierov-$k-$ov-$rep.txt 2>&1; echo "ranks/GPU=$k overlap=$ov rep=$rep rc=$?"
        grep -E "^ +[0-9]+ " $OUT/hierov-$k-$ov-$rep.txt | sed "s/^/k=$k ov=$ov rep=$rep /"; done; done
      mps_off ;;
    sm80) el sm80  # a build for sm_80 only, run on this GPU: the no-kernel-image error
      cmake -S $S -B $S/build-sm80 -G Ninja -DCMAKE_CUDA_ARCHITECTURES=80-real -DACX_BUILD_BENCH=OFF >$OUT/sm80-cfg.txt 2>&1 && cmake --build $S/build-sm80 -j 32 --target acx-info test_engine_cuda acx-executor >$OUT/sm80-build.txt 2>&1 || { tail -20 $OUT/sm80-build.txt; }
      $S/build-sm80/tools/acx-info 2>&1 | grep -iE "architectures|compute capability" | head -4
      ACX_EXECUTOR_PATH=$S/build-sm80/tools/acx-executor timeout 60 $S/build-sm80/tests/gpu/test_engine_cuda 2>&1 | grep -m3 -iE "no kernel image|NOT_SUPPORTED|Run Summary" ;;
    stests) el stests  # every visible GPU: test_coll (1 rank per GPU: flat NCCL; 2 per GPU: hierarchical), test_rebuild, test_remote
      for w in "$NG:test_coll:--cuda" "$((2 * NG)):test_coll:--cuda --hier" "$NG:test_rebuild:--cuda" "$NG:test_remote:--cuda"; do IFS=: read -r np t a <<<"$w"
        d=$(dirname "$(find $B/tests -name "$t" -type f | head -1)")
        env $RB_ENV timeout ${ST_T:-240} mpirun -np $np --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x ACX_EXECUTOR_PATH $d/$t $a >$OUT/st-$t-$np.txt 2>&1; echo "np=$np $t $a rc=$?"
        grep -E "Run Summary|suites|tests  |asserts|crossfire" $OUT/st-$t-$np.txt | head -5; done ;;
    sres) el sres  # the resilient example with a fault on rank 1 (injected, then executor killed) at 2 and NG ranks (SRES_NPS): identical result, fault to ready
      for np in ${SRES_NPS:-2 $NG}; do for f in inject kill; do
        env $RB_ENV timeout 320 $S/tests/rebuild/resilient_test.sh $B/examples/resilient_allreduce mpirun $np 17 --iters 40 --n 1048576 --cuda --fault $f >$OUT/sres-$np-$f.txt 2>&1; echo "np=$np fault=$f rc=$?"
        grep -E "identical|differ|rebuild\(s\)|never" $OUT/sres-$np-$f.txt | sort -u | head -$((np + 2)); done; done ;;
    srb) el srb  # the world rebuild's fault to ready, repeated: the example with a fault on rank 1 at 2 and NG ranks, injected and killed, interleaved (SRB_REPS rounds; SRB_NPS: the rank counts, default 2 and NG; SRB_X: more mpirun options, e.g. "-x NCCL_CUMEM_ENABLE=0")
      for rep in $(seq ${SRB_REPS:-2}); do for f in inject kill; do for np in ${SRB_NPS:-2 $NG}; do
        t0=$(date +%s%N); env $RB_ENV timeout 150 mpirun -np $np --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x ACX_EXECUTOR_PATH -x ACX_HEARTBEAT_MS -x ACX_COLL_TIMEOUT -x ACX_REBUILD_TIMEOUT -x ACX_REMOTE_TIMEOUT ${SRB_X:-} $B/examples/resilient_allreduce --iters 40 --n 1048576 --cuda --fault-at 17 --fault $f >$OUT/srb-$np-$f-$rep.txt 2>&1; rc=$?
        grep -hE "teardown took" $OUT/srb-$np-$f-$rep.txt | head -$np
        echo "np=$np fault=$f rep=$rep rc=$rc wall=$(( ($(date +%s%N) - t0) / 1000000 )) ms ready(ms):$(grep -oE "world ready at epoch 1, [0-9.]+ ms" $OUT/srb-$np-$f-$rep.txt | grep -oE "[0-9.]+ ms" | tr -d ' ms' | sort -n | tr '\n' ' ') restart:$(grep -oE "recovered: executor generation 2 .*, [0-9.]+ ms after" $OUT/srb-$np-$f-$rep.txt | grep -oE "[0-9.]+ ms after" | head -1); sticky faults: $(grep -c "sticky CUDA error" $OUT/srb-$np-$f-$rep.txt); failed attempts: $(grep -c "this rank's part of attempt" $OUT/srb-$np-$f-$rep.txt)"; done; done; done ;;
    sbig) el sbig  # the 4-GPU sweep's open points: bf16 8 GiB, f32 1-4 MiB with 200 iterations, bf16 8 B - 512 KiB with 200 iterations (ABBA rounds, medians)
      for w in "bf16big:-b 8G -e 8G -n 20 -w 5 -d bfloat16" "f32mid:-b 1M -e 4M -f 2 -n 200 -w 20 -r 3 -d float" "bf16small:-b 8 -e 512K -f 4 -n 200 -w 20 -r 3 -d bfloat16"; do name=${w%%:*} args=${w#*:}
        timeout ${SBIG_T:-200} mpirun -np $NG --bind-to none -x NCCL_NVLS_ENABLE -x ACX_EXECUTOR_PATH $B/bench/allreduce/acx-allreduce-bench --compare $args >$OUT/sbig-$name.txt 2>&1; echo "np=$NG $name rc=$?"; grep -E "^ +[0-9]+ " $OUT/sbig-$name.txt; done ;;
    sbench) el sbench  # acx vs raw NCCL on every visible GPU, f32 and bf16, 8 B - 8 GiB
      for d in float bfloat16; do timeout ${SB_T:-280} mpirun -np $NG --bind-to none -x NCCL_NVLS_ENABLE -x ACX_EXECUTOR_PATH $B/bench/allreduce/acx-allreduce-bench --compare -b 8 -e ${SB_MAX:-8G} -f 4 -n ${SB_N:-20} -w 5 -d $d --json $OUT/sb-$d.json >$OUT/sb-$d.txt 2>&1; echo "np=$NG $d rc=$?"; grep -vE "^#  Rank" $OUT/sb-$d.txt | tail -22; done ;;
    rb2x2) el rb2x2  # test_rebuild --cuda across 2 simulated nodes x RB_G (2) GPUs with ACX_DEBUG=INFO, once per value of RB_CUMEM (default "0 1") of NCCL_CUMEM_ENABLE; logs $OUT/rb-2x-cumemN.txt, the outcome and the rebuild report's lines
      d=$(dirname "$(find $B/tests -name test_rebuild -type f | head -1)")
      for cm in ${RB_CUMEM:-0 1}; do
        env $RB_ENV ACX_DEBUG=INFO ACX_DEBUG_SUBSYS=COLL,DEVICE,TOKEN NCCL_CUMEM_ENABLE=$cm timeout ${RB_T:-200} $S/scripts/sim-cluster/run.sh -q -N 2 -r ${RB_G:-2} -g ${RB_G:-2} \
          --mpirun -x --mpirun ACX_EXECUTOR_PATH --mpirun -x --mpirun ACX_DEBUG --mpirun -x --mpirun ACX_DEBUG_SUBSYS --mpirun -x --mpirun NCCL_CUMEM_ENABLE \
          -- $d/test_rebuild --cuda >$OUT/rb-2x-cumem$cm.txt 2>&1
        echo "test_rebuild --cuda across 2 x ${RB_G:-2}, NCCL_CUMEM_ENABLE=$cm: rc=$?"
        grep -E "Run Summary|tests  |asserts|never joined|not joined|success although|sticky|CUnit.*FAIL|Assertion|failed" $OUT/rb-2x-cumem$cm.txt | sort | uniq -c | head -20; done ;;
    smn) el smn  # 2 simulated nodes x NG/2 GPUs: test_coll, test_remote, test_rebuild, the resilient example with a fault, acx vs raw NCCL
      SIM="$S/scripts/sim-cluster/run.sh -q -N 2 -r $((NG / 2)) -g $((NG / 2)) --mpirun -x --mpirun ACX_EXECUTOR_PATH --"
      timeout 60 $SIM hostname >$OUT/smn-hostname.txt 2>&1; rc=$?; echo "2 nodes x $((NG / 2)) ranks: hostname rc=$rc: $(sort $OUT/smn-hostname.txt | uniq -c | tr -s ' \n' ' ')"; [ $rc = 0 ] || continue
      for t in test_coll test_remote test_rebuild; do d=$(dirname "$(find $B/tests -name "$t" -type f | head -1)")
        env $RB_ENV timeout 180 $SIM $d/$t --cuda >$OUT/smn-$t.txt 2>&1; echo "2 nodes x $((NG / 2)) GPUs: $t rc=$?"; grep -E "Run Summary|tests  |asserts" $OUT/smn-$t.txt | head -3; done
      env $RB_ENV SIM_MPIEXEC_GPUS_PER_NODE=$((NG / 2)) SIM_MPIEXEC_MAP_BY=slot timeout 320 $S/tests/rebuild/resilient_test.sh $B/examples/resilient_allreduce $S/tests/multinode/sim_mpiexec.sh $NG 17 --iters 40 --n 1048576 --cuda --fault inject >$OUT/smn-res.txt 2>&1; echo "resilient rc=$?"; grep -E "identical|differ|rebuild\(s\)" $OUT/smn-res.txt | sort -u | head -6
      timeout 200 $SIM $B/bench/allreduce/acx-allreduce-bench --compare -b 8 -e 1G -f 8 -n 10 -w 3 -d float >$OUT/smn-bench.txt 2>&1; echo "bench rc=$?"; grep -E "nodes:|^ +[0-9]+ " $OUT/smn-bench.txt ;;
    peer) el peer  # acx's own all-reduce (ACX_COLL_PEER=1): its GPU tests (not with PEER_NOTEST), then 8 B - 256 KiB beside raw NCCL: own path with and without its small-message kernel, NCCL path (PEER_V), at PEER_NPS ranks, interleaved rounds (PEER_REPS)
      [ -n "${PEER_NOTEST:-}" ] || (cd $B && timeout 400 ctest -R "peer" -L gpu --output-on-failure --timeout 200 >$OUT/ctest-peer.txt 2>&1; grep -E "^ *[0-9]+/[0-9]+ Test|tests passed|FAILED|Failed|\(Timeout\)|differs|wrong|^ +[0-9]+\. " $OUT/ctest-peer.txt | tail -30)
      # on: 1 (own path, small-message kernel up to ACX_COLL_PEER_LL_KB), 1:0 (own path, one-shot only), 0 (NCCL path)
      for rep in $(seq ${PEER_REPS:-3}); do for np in ${PEER_NPS:-$NG}; do for v in ${PEER_V:-1 1:0 0}; do IFS=: read -r on ll <<<"$v"; ll=${ll:-16}
        ACX_COLL_PEER=$on ACX_COLL_PEER_LL_KB=$ll ACX_DEBUG=INFO ACX_DEBUG_SUBSYS=COLL timeout 90 mpirun -np $np --bind-to none -x NCCL_NVLS_ENABLE -x ACX_EXECUTOR_PATH -x ACX_COLL_PEER -x ACX_COLL_PEER_LL_KB -x ACX_DEBUG -x ACX_DEBUG_SUBSYS $B/bench/allreduce/acx-allreduce-bench --compare -b 8 -e 256K -f ${PEER_F:-4} -n 200 -w 20 -d float --json $OUT/peer-$np-$on-$ll-$rep.json >$OUT/peer-$np-$on-$ll-$rep.txt 2>&1; echo "np=$np peer=$on ll=$ll rep=$rep rc=$?"
        grep -hoE "own all-reduce (on|off)[^(]*" $OUT/peer-$np-$on-$ll-$rep.txt | sort | uniq -c | head -2
        grep -E "^ +[0-9]+ " $OUT/peer-$np-$on-$ll-$rep.txt | sed "s/^/np=$np peer=$on ll=$ll rep=$rep /"; done; done; done ;;
    pfloor) el pfloor  # raw NCCL's floor (direct calls, graph replays) at the own path's sizes, at 2 and NG ranks
      for np in 2 $NG; do for sz in ${PFLOOR_SZ:-8 65536}; do timeout 60 mpirun -np $np --bind-to none -x NCCL_NVLS_ENABLE $B/bench/allreduce/acx-nccl-floor $sz ${FLOOR_N:-3000} >$OUT/pfloor-$np-$sz.txt 2>&1; echo "np=$np bytes=$sz rc=$?"; grep -v "^#  Rank" $OUT/pfloor-$np-$sz.txt | sed "s/^/np=$np $sz /" | tail -12; done; done ;;
    peermps) el peermps  # issue 16 through the own path: 2 ranks per GPU under MPS, small all-reduces with ACX_COLL_PEER 1 and 0 (the ordered path), 1 rank per GPU beside (the default -1: NCCL at 2 ranks; and 1), interleaved (PEERMPS_V: k:peer)
      mps_on || continue
      for rep in $(seq ${PEER_REPS:-3}); do for v in ${PEERMPS_V:-1:-1 1:1 2:-1 2:0 4:-1}; do IFS=: read -r k on <<<"$v"; np=$((NG * k))
        ACX_COLL_PEER=$on timeout 120 mpirun -np $np --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x ACX_EXECUTOR_PATH -x ACX_COLL_PEER -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY $B/bench/allreduce/acx-allreduce-bench -b 8 -e 256K -f 4 -n 200 -w 20 -d float >$OUT/peermps-$k-$on-$rep.txt 2>&1; echo "ranks/GPU=$k peer=$on rep=$rep rc=$?"
        grep -E "^ +[0-9]+ " $OUT/peermps-$k-$on-$rep.txt | sed "s/^/k=$k peer=$on rep=$rep /"; done; done
      mps_off ;;
    mpsbig) el mpsbig  # issue 16's large all-reduces under MPS through the own two-shot: 1 rank per GPU (the default: two-shot at 2 ranks), 2 per GPU through 2 and 4 per GPU by default (since session 18 the two-shot with groups: the ranks of a GPU sum first, 128 / K blocks each) and through the ordered hierarchical path (ACX_COLL_PEER_BIG_KB=0), 16 MiB - 1 GiB, interleaved rounds (MPSBIG_REPS; MPSBIG_V: the variants k:peer:bigkb:blocks:groups)
      mps_on || continue
      # the default's choice and the whole coll suite under MPS at 2 and 4 ranks per GPU (test_coll --peer-auto)
      for k in 2 4; do timeout 240 mpirun -np $((NG * k)) --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x ACX_EXECUTOR_PATH -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY $B/tests/coll/test_coll --cuda --peer-auto >$OUT/mps-coll-auto-$k.txt 2>&1; echo "test_coll --cuda --peer-auto under MPS, $k ranks per GPU: rc=$?"; grep -E "should be|asserts|tests " $OUT/mps-coll-auto-$k.txt | head -4; done
      for rep in $(seq ${MPSBIG_REPS:-2}); do for v in ${MPSBIG_V:-1:-1:-1:128:1 2:-1:-1:128:1 2:-1:0:128:1 4:-1:-1:128:1 4:-1:0:128:1}; do IFS=: read -r k on kb bb gr <<<"$v"; np=$((NG * k))
        ACX_COLL_PEER=$on ACX_COLL_PEER_BIG_KB=$kb ACX_COLL_PEER_BIG_BLOCKS=$bb ACX_COLL_PEER_BIG_GROUPS=$gr timeout 150 mpirun -np $np --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x ACX_EXECUTOR_PATH -x ACX_COLL_PEER -x ACX_COLL_PEER_BIG_KB -x ACX_COLL_PEER_BIG_BLOCKS -x ACX_COLL_PEER_BIG_GROUPS -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY $B/bench/allreduce/acx-allreduce-bench ${MPSBIG_CMP:-} -b ${MPSBIG_B:-16M} -e 1G -f 4 -n 10 -w 3 -d float >$OUT/mpsbig-$k-$on-$kb-$bb-$gr-$rep.txt 2>&1; echo "ranks/GPU=$k peer=$on bigkb=$kb blocks=$bb groups=$gr rep=$rep rc=$?"
        grep -E "^ +[0-9]+ " $OUT/mpsbig-$k-$on-$kb-$bb-$gr-$rep.txt | sed "s/^/k=$k peer=$on kb=$kb bb=$bb gr=$gr rep=$rep /"; done; done
      mps_off ;;
    peermid) el peermid  # issue 16's sizes around the one-shot's slot under MPS: the one-shot against the two-shot with groups (PM_V variants k:maxkb:bigminkb[:blocks[:smallgroups[:llkb[:llgroups]]]], "-" = default; blocks = ACX_COLL_PEER_BIG_BLOCKS, the two-shot's floor; smallgroups = ACX_COLL_PEER_SMALL_GROUPS, the one-shot with groups; llkb = ACX_COLL_PEER_LL_KB; llgroups = ACX_COLL_PEER_LL_GROUPS), PM_B - PM_E (32 KiB - 2 MiB), interleaved rounds; session 21: the default was 1:-:- 4:-:- 4:64:0 2:-:- 2:64:0
      mps_on || continue
      for rep in $(seq ${PM_REPS:-3}); do for v in ${PM_V:-1:-:- 4:-:- 4:64:0 2:-:- 2:64:0}; do IFS=: read -r k mk bk bb sg ll lg <<<"$v"; bb=${bb:--}; sg=${sg:--}; ll=${ll:--}; lg=${lg:--}; np=$((NG * k)); PE=()
        [ "$mk" != - ] && PE+=(-x ACX_COLL_PEER_MAX_KB=$mk); [ "$bk" != - ] && PE+=(-x ACX_COLL_PEER_BIG_MIN_KB=$bk); [ "$bb" != - ] && PE+=(-x ACX_COLL_PEER_BIG_BLOCKS=$bb)
        [ "$sg" != - ] && PE+=(-x ACX_COLL_PEER_SMALL_GROUPS=$sg); [ "$ll" != - ] && PE+=(-x ACX_COLL_PEER_LL_KB=$ll); [ "$lg" != - ] && PE+=(-x ACX_COLL_PEER_LL_GROUPS=$lg)
        timeout 120 mpirun -np $np --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x ACX_EXECUTOR_PATH -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY "${PE[@]}" $B/bench/allreduce/acx-allreduce-bench -b ${PM_B:-32K} -e ${PM_E:-2M} -f 2 -n ${PM_N:-200} -w 20 -d float >$OUT/peermid-$k-$mk-$bk-$bb-$sg-$ll-$lg-$rep.txt 2>&1; echo "ranks/GPU=$k maxkb=$mk bigminkb=$bk blocks=$bb smallgroups=$sg llkb=$ll llgroups=$lg rep=$rep rc=$?"
        grep -E "^ +[0-9]+ " $OUT/peermid-$k-$mk-$bk-$bb-$sg-$ll-$lg-$rep.txt | sed "s/^/k=$k mk=$mk bk=$bk bb=$bb sg=$sg ll=$ll lg=$lg rep=$rep /"; done; done
      mps_off ;;
    pergpu) el pergpu  # issue 16's goals in one run each: under MPS, PG_K ranks per GPU (default 2 4) through acx beside raw NCCL on one rank per GPU (acx-allreduce-bench --compare --per-gpu: the ratio is the busbw per GPU), PG_B - PG_E (8 B - 1 GiB), factor PG_F (4), PG_R interleaved rounds (3), f32; PG_ENV="NAME=VALUE ..." set for the runs (e.g. ACX_COLL_PEER_BIG_KB=4096); PG_X: more bench options (e.g. --register)
      mps_on || continue
      PGX=(); for kv in ${PG_ENV:-}; do export "${kv?}"; PGX+=(-x "${kv%%=*}"); done
      for k in ${PG_K:-2 4}; do np=$((NG * k)); tag=$(echo "${PG_ENV:-default}${PG_X:-}" | tr -c 'a-zA-Z0-9=_\n' _)
        timeout ${PG_T:-300} mpirun -np $np --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x ACX_EXECUTOR_PATH -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY "${PGX[@]}" $B/bench/allreduce/acx-allreduce-bench --compare --per-gpu ${PG_X:-} -b ${PG_B:-8} -e ${PG_E:-1G} -f ${PG_F:-4} -n ${PG_N:-20} -w 5 -r ${PG_R:-3} -d float --json $OUT/pergpu-$k-$tag.json >$OUT/pergpu-$k-$tag.txt 2>&1; echo "ranks/GPU=$k env=${PG_ENV:-default} ${PG_X:-} rc=$?"
        grep -E "^# per GPU|^ +[0-9]+ |Out of bounds" $OUT/pergpu-$k-$tag.txt | sed "s/^/k=$k ${PG_X:+reg }/"; done
      for kv in ${PG_ENV:-}; do unset "${kv%%=*}"; done
      mps_off ;;
    libs) el libs; timeout 200 $B/bench/libs/acx-lib-bench 2>&1 | tee $OUT/libs.txt | grep -v "ACX WARN" | tail -16 ;;
    randoff) el randoff  # cuRAND normals, raw and acx: drawing on (never) and back to position 0 before each call (each), interleaved
      for rep in 1 2; do for w in never each; do timeout 120 $B/bench/libs/acx-lib-bench --only rand_normal -r 5 --raw-rand-offset $w >$OUT/randoff-$w-$rep.txt 2>&1; echo "raw-rand-offset=$w rep=$rep rc=$?"; grep -E "rand_normal" $OUT/randoff-$w-$rep.txt | tail -1; done; done ;;
  esac
done
el done
