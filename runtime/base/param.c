/* The one registry of ACX_* parameters: name, type, default, help. Values are read from the
 * environment on first use and cached; acx-info and docs/environment.md list this table. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acx/version.h"
#include "runtime/base/log.h"
#include "runtime/base/param.h"

typedef struct {
  const char *name;
  acx_param_type_t type;
  const char *def;
  const char *help;
} param_def_t;

/* Keep sorted by subsystem; add new parameters here and nowhere else. */
static const param_def_t defs[] = {
    /* logging */
    {"ACX_DEBUG", ACX_PARAM_STRING, "WARN", "Log level: NONE, VERSION, WARN, INFO, TRACE"},
    {"ACX_DEBUG_SUBSYS", ACX_PARAM_STRING, "ALL",
     "Comma list of subsystems to log (INIT,ACTOR,SCHED,DEVICE,EXEC,BUFFER,COLL,TOPO,TOKEN,LIB,ALL); ^X excludes"},
    {"ACX_DEBUG_FILE", ACX_PARAM_STRING, "", "Log file instead of stderr; %h = host name, %p = pid"},
    /* actor system */
    {"ACX_THREADS", ACX_PARAM_INT, "2", "Worker threads of the actor system"},
    {"ACX_ACTOR_BATCH", ACX_PARAM_INT, "64", "Messages an actor may handle per turn before yielding its worker"},
    {"ACX_SPIN_NS", ACX_PARAM_INT, "20000", "How long waits spin before they park (ns)"},
    {"ACX_IDLE_WAKE_NS", ACX_PARAM_INT, "10000000", "Longest sleep of a parked idle worker (ns): bounds how long an actor woken inside another actor's long-running hook waits for a second worker"},
    {"ACX_STEAL_WAIT_NS", ACX_PARAM_INT, "5000", "An idle worker takes a lone queued actor from a busy worker only after that worker has spent this long in one turn (ns): short turns keep a message exchange on one warm core"},
    {"ACX_CPUSET", ACX_PARAM_STRING, "", "Cores (cpuset list, e.g. 0-15,32-47) for actor workers, device pollers and executors whose config sets no cpuset; empty: leave them unbound"},
    /* device layer */
    {"ACX_EXECUTOR", ACX_PARAM_STRING, "process", "GPU executor transport: process (fault-isolated) or inline (in-process thread)"},
    {"ACX_EXECUTOR_STANDBY", ACX_PARAM_INT, "1", "1: keep a hot standby executor per process-transport device (a second process and CUDA context, ~0.5 GB of GPU memory) so that a restart promotes it instead of spawning; 0: spawn on demand"},
    {"ACX_EXECUTOR_PATH", ACX_PARAM_STRING, "", "Path of the acx-executor program (default: next to libacx, then the install bindir)"},
    {"ACX_EXEC_LIBRARY", ACX_PARAM_STRING, "", "Path of the executor library the inline transport loads (default: libacx_exec.so.<major> beside libacx, then the loader's search path)"},
    {"ACX_DEVICE_KIND", ACX_PARAM_STRING, "auto", "Device kind: auto (cuda when a GPU is visible, else host), cuda or host"},
    {"ACX_DEVICE", ACX_PARAM_INT, "-1", "CUDA device ordinal for this rank, overriding topology-based choice (-1: choose)"},
    {"ACX_HEARTBEAT_MS", ACX_PARAM_INT, "1000", "Liveness limit: an executor process whose heartbeat thread is silent this long (dead, stopped) is declared lost, and so is an executor loop that made no progress this long once every outstanding request is past its deadline (docs/fault-model.md)"},
    {"ACX_EXEC_TIMEOUT_MS", ACX_PARAM_INT, "60000", "Deadline of a single device command"},
    {"ACX_LIB_READBACK_SLOTS", ACX_PARAM_INT, "1024", "CUDA library calls that return a value to the host (a dot product, a norm, a solver's info) each hold one readback slot of the executor until the value has come back; with every slot held, the next such call fails at once with ACX_ERR_QUEUE_FULL (retryable). 1 to 65536, 16 bytes of device and pinned host memory each; read by each executor at its first library call"},
    {"ACX_MAX_RESTARTS", ACX_PARAM_INT, "5", "Executor restarts allowed within ACX_RESTART_WINDOW_MS before the device escalates"},
    {"ACX_RESTART_WINDOW_MS", ACX_PARAM_INT, "60000", "Window for ACX_MAX_RESTARTS"},
    {"ACX_RING_SLOTS", ACX_PARAM_INT, "1024", "Slots of each command and reply ring (power of two)"},
    {"ACX_EXEC_SPIN_NS", ACX_PARAM_INT, "-1", "Executor and reply poller busy-poll this long after their last activity before sleeping on the doorbell (ns); -1: 5 ms for the cuda kind, 100 us for the host kind"},
    {"ACX_EXEC_NAP_NS", ACX_PARAM_INT, "0", "Once a collective or kernel has been in flight this long with no command and no completion, the executor sleeps on its doorbell this long between polls instead of busy-polling (ns, 0 to 10000000; 0: busy-poll). A command wakes it at once; a completion is seen up to one nap late; shorter work is busy-polled as before. For nodes with more busy threads than cores"},
    {"ACX_DEVICE_STREAMS", ACX_PARAM_INT, "4", "Executor streams per device when the device config does not say"},
    {"ACX_STAGING_BYTES", ACX_PARAM_INT, "4194304", "Shared staging region per device for acx_buffer_write/read from unregistered memory"},
    {"ACX_COMPLETION", ACX_PARAM_STRING, "auto", "How the CUDA executor learns a stream finished: auto, event (polling) or hostfn (callback)"},
    {"ACX_FAULT_INJECT", ACX_PARAM_STRING, "", "Fault injection schedule: 'cmd:N' faults the Nth command of each executor incarnation, 'once:N' only the first incarnation"},
    /* world and collectives */
    {"ACX_COLL_TIMEOUT", ACX_PARAM_INT, "60000", "Deadline of a collective (ms); on expiry the communicator is aborted"},
    {"ACX_NCCL_INIT_TIMEOUT", ACX_PARAM_INT, "120000", "Deadline of NCCL communicator creation (ms)"},
    {"ACX_COLL_GRAPH_MAX_BYTES", ACX_PARAM_INT, "-1", "Largest collective (bytes of its send buffer) the graph cache replays; larger ones call NCCL directly; -1: no limit"},
    {"ACX_COLL_BLOCKING", ACX_PARAM_INT, "-1", "NCCL communicators of acx_coll_create: 1 blocking (direct NCCL calls, no graphs: the fast choice on NCCL's network transport), 0 non-blocking (graph replays: the fast choice within a node), -1 (auto): blocking when the world spans nodes or NCCL_P2P_DISABLE and NCCL_SHM_DISABLE are both set"},
    {"ACX_COLL_HIER", ACX_PARAM_INT, "-1", "Hierarchical collectives (collectives/hier_coll.c: the ranks of one device reduce through its memory, one leader per device talks to the others): -1 (auto) when ranks share a GPU (NCCL takes one rank per GPU), 1 always (the host kind groups the ranks of a node, or ACX_COLL_HIER_GROUP of them), 0 never (a cuda coll on a shared GPU is then refused)"},
    {"ACX_COLL_HIER_GROUP", ACX_PARAM_INT, "0", "Host kind with ACX_COLL_HIER=1: ranks per group (consecutive ranks of a node); 0: all the ranks of a node"},
    {"ACX_COLL_PEER", ACX_PARAM_INT, "-1", "acx's own all-reduce between the executors of one node (issue 17; runtime/proto/peer_ops.h): all-reduces of at most ACX_COLL_PEER_MAX_KB run as a one-shot exchange through each other's memory (CUDA IPC; host kind: shared memory), without NCCL or MPI. -1 (default, auto): on GPUs, 3 or more ranks, one rank per GPU or ranks sharing GPUs under MPS, unless NCCL_P2P_DISABLE is set; 1: also on the host kind, at 2 ranks and on ranks that share GPUs without MPS (bypassing the hierarchical groups: fast only under MPS); 0: never, the two-shot (ACX_COLL_PEER_BIG_KB) neither. Large all-reduces: ACX_COLL_PEER_BIG_KB (by default on at 2 ranks on GPUs, where the small ones are not, and where ranks share GPUs). On only where the world is one node of 2 to 16 ranks, every rank wants it and every rank's executor can map every other's area (peer access); else every rank falls back to NCCL or MPI"},
    {"ACX_COLL_PEER_MAX_KB", ACX_PARAM_INT, "-1", "The largest all-reduce (KiB) of the own path's one-shot (ACX_COLL_PEER); every rank's area holds two slots of this size. -1 (default, auto): 256, and 1024 where the ranks of a GPU form groups (ACX_COLL_PEER_BIG_GROUPS: the one-shot with groups up to it; 2xH200 under MPS, session 26: 512 KiB and 1 MiB at 2 and 4 ranks per GPU 1.2-1.5x faster than through the two-shot); 0: the own path off. The ranks use the smallest value any of them has (auto only where every rank has it)"},
    {"ACX_COLL_PEER_EVENT_EVERY", ACX_PARAM_INT, "1", "The own all-reduce (ACX_COLL_PEER) on GPUs: 1 (default): a completion event after every operation; K (2 to 64): only after operations with a reply and every K-th without, the others completing through the next event (fewer event records and queries in the executor for back-to-back all-reduces without futures; no gain measured on 2xH100). Read by each executor when the own path is set up"},
    {"ACX_COLL_PEER_BATCH", ACX_PARAM_INT, "16", "The own all-reduce (ACX_COLL_PEER) on GPUs: all-reduces up to the one-shot's slot (ACX_COLL_PEER_MAX_KB: the push lines, the one-shot, the one-shot with groups) of one dtype, op and count sent back to back run up to this many per kernel launch, one after the other inside it (1 to 16; 1: a launch each; the one-shot's batches since session 26: 2xH200 under MPS, 4 ranks per GPU, 128-256 KiB 16.1-17.3 us instead of 18.0-20.5). The executor gathers only what it has already received when it would launch: a lone all-reduce waits for nothing. Read by each executor when the own path is set up; ranks may differ"},
    {"ACX_COLL_PEER_LL_CLEAR", ACX_PARAM_INT, "1073741824", "The own all-reduce's push lines on GPUs are cleared (between two launches) after the two operations at the start of every this many (at least 2; runtime/proto/peer_ops.h): a line's 32-bit flag then never meets an old line carrying the same flag. Smaller values only for tests"},
    {"ACX_COLL_PEER_REG", ACX_PARAM_INT, "3", "Which registered buffers (acx_coll_register) the own all-reduce's two-shot with groups reads and stores through on GPUs: 3 (default) inputs and outputs, 1 inputs only, 2 outputs only, 0 none (staged as unregistered ones). Read by each executor when the own path is set up; ranks may differ (each publishes what it uses)"},
    {"ACX_COLL_PEER_TRACE", ACX_PARAM_INT, "0", "1: the own all-reduce's kernels (ACX_COLL_PEER, GPUs) time their steps (block 0, the GPU's global timer) and each executor logs, when the set goes, one INFO line per kernel kind that ran: the operations and each step's mean (the gap before an operation, copies, flag waits, reductions) in us, with the median and 90th percentile of its occurrences. A diagnosis: two 8-byte adds per step and operation. Read by each executor when the own path is set up; ranks may differ"},
    {"ACX_COLL_PEER_PDL", ACX_PARAM_INT, "0", "The own all-reduce's kernels (ACX_COLL_PEER) launched with programmatic dependent launch (sm_90 and later: a kernel may be scheduled while the one before it on the stream ends, and waits for it before it touches memory): 1 on, 0 off. Read by each executor when the own path is set up; ranks may differ"},
    {"ACX_COLL_PEER_BIG_KB", ACX_PARAM_INT, "-1", "acx's own all-reduce (ACX_COLL_PEER) for large all-reduces, of at least ACX_COLL_PEER_BIG_MIN_KB: the two-shot variant (runtime/proto/peer_ops.h: reduce-scatter and all-gather by stores into the executors' areas, in chunks of up to N/2 KiB; every rank's area grows by 2N KiB). -1 (default, auto): N = 65536 on GPUs at exactly 2 ranks of one node, one rank per GPU, and where ranks share the GPUs of one node under MPS with as many ranks on each of 2 or more GPUs (the two-shot with groups, ACX_COLL_PEER_BIG_GROUPS; session 18; N = 131072 on 2 GPUs: the pipelined kernel at 4 per GPU on 2 of 4xH200, session 29, ran at 1.00-1.01 of one rank per GPU at 1 GiB with it, 0.85-0.94 with 65536; on 4 GPUs with 65536 0.91 at 4 per GPU and 0.96 at 2, where the hierarchical path had 0.30 and 0.46), where the path is not off (ACX_COLL_PEER=0, NCCL_P2P_DISABLE); elsewhere off. Costs 2N KiB of GPU memory per rank. 0: off (NCCL or MPI take them). N (at least 64): on wherever the path is. The ranks use the smallest value any of them has. With 65536 and 128 blocks (ACX_COLL_PEER_BIG_BLOCKS) on 4xH200 (session 15, 4 rounds): at 2 ranks 1.25-1.34x NCCL's busbw at 16 MiB (one round 0.88x), 1.13-1.19x at 256 MiB, 1.08-1.11x at 1 GiB; at 4 ranks 1.01-1.13x at 16 MiB, 1.01-1.02x at 256 MiB, 0.98x at 1 GiB (hence 2 ranks only). Smaller chunks lose (16384: 0.88-0.98x from 256 MiB). Session 17, 2 ranks, 3 rounds: 1.19-1.20x at 256 MiB and 1.09-1.10x at 1 GiB on 2xH100, 1.18x and 1.10x on 2xH200"},
    {"ACX_COLL_PEER_BIG_MIN_KB", ACX_PARAM_INT, "-1", "The smallest all-reduce (KiB) of the own path's two-shot (ACX_COLL_PEER_BIG_KB). -1 (default, auto): 2048 where the two-shot runs one rank per GPU, and every all-reduce above ACX_COLL_PEER_MAX_KB where it runs with groups (ranks sharing GPUs; the alternative there is the hierarchical path: session 21, 2xH100 under MPS, 512 KiB - 1 MiB took 69-81 us at 2 ranks per GPU and 94-130 us at 4 through it, 20-22 and 29-34 us through the two-shot with groups). At 2 ranks (session 17, 2 rounds on 2xH100, 3 on 2xH200) it ran at 1.62-1.77x NCCL's busbw at 2 MiB but 0.91-0.99x at 1 MiB on H100 (1.04-1.05x on H200); all-reduces above ACX_COLL_PEER_MAX_KB and below this take NCCL (or MPI). 0: every all-reduce above ACX_COLL_PEER_MAX_KB. The ranks use the smallest value any of them has"},
    {"ACX_COLL_PEER_BIG_GROUPS", ACX_PARAM_INT, "1", "The own all-reduce's two-shot (ACX_COLL_PEER_BIG_KB) where ranks share GPUs (issue 16): 1 (default): the ranks of a GPU are a group, when every GPU of the set has as many ranks (on the host kind: the hierarchical collectives' groups, ACX_COLL_HIER_GROUP): each group sums its parts on its GPU first and every byte crosses between GPUs once each way, as with one rank per GPU (runtime/proto/peer_ops.h); 0: every rank on its own, its parts sent across separately. The ranks use the smallest value any of them has"},
    {"ACX_COLL_PEER_LL_GROUPS", ACX_PARAM_INT, "-1", "The own all-reduce's push lines (all-reduces up to ACX_COLL_PEER_LL_KB) where the two-shot has groups (ACX_COLL_PEER_BIG_GROUPS; issue 16, session 22): -1 (default, auto): as 1 from 4 ranks per GPU, as 0 below (2xH100 under MPS: 0.2-1.1 us faster at 8-64 KiB at 4 per GPU, 0-0.9 us slower at 2); 1: push lines with groups (runtime/proto/peer_ops.h): each rank pushes each slice of its input to its group's rank at the slice's place (within the GPU), that rank pushes its group's partial sum of the slice to every rank (across GPUs once per group, instead of every rank's whole input to every rank); 0: every rank pushes its whole input to every rank. The ranks use the smallest value any of them has"},
    {"ACX_COLL_PEER_SMALL_GROUPS", ACX_PARAM_INT, "-1", "The own all-reduce's one-shot (all-reduces above ACX_COLL_PEER_LL_KB and up to ACX_COLL_PEER_MAX_KB) where the two-shot has groups (ACX_COLL_PEER_BIG_GROUPS; issue 16, session 22): the one-shot with groups (runtime/proto/peer_ops.h: the ranks of a GPU sum their slices there and each slice's partial sum crosses to each GPU once, stored into the area of the rank at the slice's place there, one more flag round) for all-reduces of at least N KiB, the plain one-shot (every rank loads every rank's slot: K x K slots across each GPU's link at K ranks per GPU) below. -1 (default, auto): N = 1024 / K^2 (256 at 2 ranks per GPU; 64 at 4, i.e. everything above the push lines; measured on 2xH200 under MPS, session 27); 0: never. Where it can run, each rank's area grows by 2 x groups x ACX_COLL_PEER_MAX_KB. The ranks use the smallest value any of them has"},
    {"ACX_COLL_PEER_BIG_BLOCKS", ACX_PARAM_INT, "128", "The own all-reduce's two-shot (ACX_COLL_PEER_BIG_KB) on GPUs: thread blocks per operation (1 to 128; the ranks use the smallest value any of them has). On 4xH200 with 64 MiB big slots 128 blocks ran at 1.05-1.11x NCCL's busbw at 1 GiB and 2 ranks, 64 blocks at 1.05x (0.98x and 0.94-0.95x at 4 ranks; session 15). Every block stays resident for the whole operation: on a GPU with fewer SMs than blocks, two must fit on one SM"},
    {"ACX_COLL_PEER_LL_KB", ACX_PARAM_INT, "64", "The own path's all-reduces of at most this many KiB (0 to 128; the own path's largest, ACX_COLL_PEER_MAX_KB, at most) push their data into the peers' areas with the flag in the same stores (runtime/proto/peer_ops.h) instead of the flag-then-read one-shot; 0: never. The ranks use the smallest value any of them has"},
    {"ACX_COLL_HIER_DIRECT_KB", ACX_PARAM_INT, "8", "Hierarchical collectives: all-reduces of at most this many KiB take the direct path (each rank reads its input to host memory, one MPI all-reduce over every rank, each writes its result back: the fastest up to about 8 KiB on the GPU host), larger ones the ordered path (ACX_COLL_HIER_ORDERED) or the staging steps; 0: never direct. The ranks use the smallest value any of them has"},
    {"ACX_COLL_HIER_ORDERED", ACX_PARAM_INT, "1", "Hierarchical collectives: 1: all-reduces (every size) are ordered on the executors' streams through flags in host memory shared by the ranks of a device (members enqueue every step at once; the leader waits for its members' flags on the host, then enqueues the reduce and the leaders' step), 0: the step protocol of MPI exchanges (and ACX_COLL_HIER_DIRECT_KB). The ranks use the ordered path only if every rank has it on and can share the flags"},
    {"ACX_COLL_HIER_OVERLAP", ACX_PARAM_INT, "0", "Hierarchical collectives, the ordered path: 1: the second of the two staging slots is a buffer of its own and the leader's local steps (its input in, the members' inputs reduced) run on the engine stream after the operation's, so that a chunk's copies overlap the previous chunk's leaders' NCCL step; 0 (default): one buffer, one stream. On only if every rank has it on. Under MPS on 2xH100 (2 ranks per GPU): +5-7% out of place from 64 MiB, 0-5% slower in place"},
    {"ACX_COLL_HIER_STAGE_KB", ACX_PARAM_INT, "32768", "Hierarchical collectives: the device staging buffer of each rank (KiB); an operation moves through it in chunks of at most this size (the ordered path: half of it, two slots). 32 MiB gave 2.6x the busbw of 4 MiB at 128 MiB on the GPU host"},
    {"ACX_COLL_GRAPH_COPY", ACX_PARAM_INT, "1", "1: a captured collective that is one NCCL kernel (with NCCL's event nodes) is replayed as a copy of that kernel node, launched about twice as fast; 0: NCCL's graph is replayed whole"},
    {"ACX_COLL_GRAPH_CACHE", ACX_PARAM_INT, "64", "CUDA graphs kept per NCCL communicator: a collective seen twice with the same arguments is captured and then replayed without an NCCL call; 0 calls NCCL every time"},
    {"ACX_WORLD_TIMEOUT", ACX_PARAM_INT, "120000", "Deadline of acx_world_init as a whole, and of each later bootstrap exchange of the world (control plane, collectives creation), in ms, unless acx_world_config_t.timeout_ms is set: a rank that never arrives fails the others"},
    {"ACX_CTRL_TIMEOUT", ACX_PARAM_INT, "10000", "Deadline of sending one control-plane message between ranks (ms)"},
    {"ACX_CTRL_POLL_US", ACX_PARAM_INT, "500", "How long the control plane's progress thread naps between polls when idle (us)"},
    {"ACX_REMOTE_TIMEOUT", ACX_PARAM_INT, "30000", "Deadline of a remote token get/put, request to completion (ms)"},
    {"ACX_REMOTE_TRANSPORT", ACX_PARAM_STRING, "auto", "How remote get/put bytes move: auto (both buffers on cuda devices: to a rank on this rank's GPU, on the device through a shareable staging buffer of the requester; to other GPUs, on a two-rank NCCL channel; else MPI through host memory), mpi (always MPI through host memory) or ipc (on the device through a staging buffer for every owner on this node, host kind included; owners on other nodes refused)"},
    {"ACX_REBUILD_TIMEOUT", ACX_PARAM_INT, "120000", "Deadline of a world rebuild, fault to ready world (ms)"},
    {"ACX_REBUILD_ATTEMPTS", ACX_PARAM_INT, "3", "Attempts at rebuilding the world before it is declared failed"},
    {"ACX_LAUNCH_CHECK", ACX_PARAM_INT, "1", "1: refuse a launch where MPI sees 1 process but the launcher started more (missing PMI/PMIx); 0: skip"},
    /* CUDA library contexts */
    {"ACX_BLASLT_WORKSPACE_MB", ACX_PARAM_INT, "32", "cuBLASLt workspace per executor stream (MiB): the most a matmul algorithm may use"},
    /* observability */
    {"ACX_NVTX", ACX_PARAM_INT, "0", "1: NVTX ranges in the 'acx' domain around commands and collectives"},
};
#define NDEFS (sizeof defs / sizeof defs[0])

typedef struct {
  const char *str; /* environment value or default */
  int64_t ival;
  int from_env;
  int bad;
} param_val_t;

static param_val_t vals[NDEFS];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static int parse_int(const char *s, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 0);
  if (errno || end == s || *end != '\0') return -1;
  *out = v;
  return 0;
}

static void load(void) {
  for (size_t i = 0; i < NDEFS; i++) {
    const char *env = getenv(defs[i].name);
    vals[i].from_env = env != NULL;
    vals[i].str = env ? env : defs[i].def;
    if (defs[i].type == ACX_PARAM_INT) {
      if (parse_int(vals[i].str, &vals[i].ival) != 0) {
        vals[i].bad = 1;
        parse_int(defs[i].def, &vals[i].ival);
      }
    }
  }
}

static long find(const char *name) {
  for (size_t i = 0; i < NDEFS; i++)
    if (strcmp(defs[i].name, name) == 0) return (long)i;
  return -1;
}

size_t acx_param_count(void) { return NDEFS; }

acx_status_t acx_param_info(size_t i, acx_param_info_t *info) {
  ACX_CHECK_NULL(info);
  if (i >= NDEFS) return ACX_ERR_OUT_OF_RANGE;
  pthread_once(&once, load);
  info->name = defs[i].name;
  info->type = defs[i].type;
  info->default_str = defs[i].def;
  info->help = defs[i].help;
  info->value_str = vals[i].str;
  info->from_env = vals[i].from_env;
  return ACX_OK;
}

acx_status_t acx_param_get_int(const char *name, int64_t *value) {
  ACX_CHECK_NULL(name);
  ACX_CHECK_NULL(value);
  pthread_once(&once, load);
  long i = find(name);
  if (i < 0 || defs[i].type != ACX_PARAM_INT) return ACX_ERR_NOT_FOUND;
  *value = vals[i].ival;
  if (vals[i].bad) {
    ACX_WARN(INIT, "%s='%s' is not an integer; using the default %s", name, vals[i].str, defs[i].def);
    return ACX_ERR_BAD_PARAM;
  }
  return ACX_OK;
}

acx_status_t acx_param_get_str(const char *name, const char **value) {
  ACX_CHECK_NULL(name);
  ACX_CHECK_NULL(value);
  pthread_once(&once, load);
  long i = find(name);
  if (i < 0) return ACX_ERR_NOT_FOUND;
  *value = vals[i].str;
  return ACX_OK;
}

int64_t acxi_param_int(const char *name) {
  int64_t v = 0;
  acx_status_t s = acx_param_get_int(name, &v);
  if (s == ACX_ERR_NOT_FOUND) {
    fprintf(stderr, "acx: internal error: parameter %s is not registered\n", name);
    abort();
  }
  return v;
}

const char *acxi_param_str(const char *name) {
  const char *v = "";
  if (acx_param_get_str(name, &v) != ACX_OK) {
    fprintf(stderr, "acx: internal error: parameter %s is not registered\n", name);
    abort();
  }
  return v;
}

const char *acx_version(int *code) {
  if (code) *code = ACX_VERSION;
  return ACX_VERSION_STRING;
}
