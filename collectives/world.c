/* The world bootstrap: launch sanity, the world's own communicators, node numbering, and the GPU
 * and cpuset choice made from the launcher masks of all ranks of a node. One world per process at
 * a time, and its epoch only moves forward, across worlds too. Every exchange is non-blocking and
 * polled against one deadline for the whole call, so a rank that never arrives fails the rest in
 * time; an exchange that passes it is parked with every byte MPI may still write. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acx_build_config.h"
#include "collectives/world_internal.h"
#include "runtime/base/clock.h"
#include "runtime/base/log.h"
#include "runtime/base/param.h"
#include "runtime/proto/token_internal.h"

/* MPI calls: log the call's text and MPI's message once, store ACX_ERR_MPI, jump. */
#define MPICHECKGOTO(call, res, label)                                            \
  do {                                                                            \
    int mpi_rc_ = (call);                                                         \
    if (mpi_rc_ != MPI_SUCCESS) {                                                 \
      char mpi_msg_[MPI_MAX_ERROR_STRING];                                        \
      int mpi_len_ = 0;                                                           \
      MPI_Error_string(mpi_rc_, mpi_msg_, &mpi_len_);                             \
      ACX_WARN(INIT, "%s failed: %s", #call, mpi_msg_);                           \
      (res) = ACX_ERR_MPI;                                                        \
      goto label;                                                                 \
    }                                                                             \
  } while (0)

/* ---- the process's world ---- */

/* "One acx_world per rank": the token identity (rank, node, epoch stamped into exports) belongs to
 * the live world, so a second init must not build another. proc_lock guards everything below;
 * it is taken before the token registry's lock, never inside it. */
static pthread_mutex_t proc_lock = PTHREAD_MUTEX_INITIALIZER;
static enum { PROC_NO_WORLD, PROC_BUILDING, PROC_LIVE } proc_state;
static const acx_world_t *proc_world; /* the live world (PROC_LIVE) */
/* The least epoch the next world may take: one above every epoch a world of this process used,
 * so a token of an earlier world never validates in a later one. */
static uint64_t next_epoch;

/* Operations that passed their deadline. MPI cannot cancel a collective, and a late rank may still
 * complete one, so the memory it writes (buffers, the handle MPI_Comm_idup fills, the
 * communicators it runs on) is kept for the life of the process: reachable from here, never
 * freed, never reused. A few hundred bytes per timed-out call. */
typedef struct parked {
  struct parked *next;
  MPI_Request req;
  void *mem;
} parked_t;
static parked_t *parked_list;
static size_t parked_count;

void acxc_world_park(MPI_Request req, void *mem) {
  /* Without the node, mem is still never freed: only leak checkers would see a difference. */
  parked_t *p = malloc(sizeof *p);
  pthread_mutex_lock(&proc_lock);
  if (p) {
    *p = (parked_t){parked_list, req, mem};
    parked_list = p;
  }
  parked_count++;
  pthread_mutex_unlock(&proc_lock);
}

acx_status_t acxc_world_wait(MPI_Request req, void *mem, int64_t deadline) {
  const int64_t start = acxi_now_ns();
  for (;;) {
    int flag = 0;
    if (MPI_Test(&req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      acxc_world_park(req, mem);
      return ACX_ERR_MPI;
    }
    if (flag) return ACX_OK;
    if (acxi_now_ns() >= deadline) {
      acxc_world_park(req, mem);
      return ACX_ERR_TIMEOUT;
    }
    acxi_poll_nap(acxi_now_ns() - start, 20000);
  }
}

size_t acxc_world_parked(void) {
  pthread_mutex_lock(&proc_lock);
  size_t n = parked_count;
  pthread_mutex_unlock(&proc_lock);
  return n;
}

/* Takes the process's one world slot for an init; ACX_ERR_INVALID_STATE, logged, when a world
 * lives or is being built. The live world is not touched. */
static acx_status_t world_claim(uint64_t *epoch_floor) {
  pthread_mutex_lock(&proc_lock);
  int state = proc_state;
  if (state == PROC_NO_WORLD) proc_state = PROC_BUILDING;
  *epoch_floor = next_epoch;
  pthread_mutex_unlock(&proc_lock);
  if (state == PROC_NO_WORLD) return ACX_OK;
  ACX_WARN(INIT, "acx_world_init: this rank %s (one acx_world per rank); call acx_world_finalize on it before "
           "making another. The existing world is unchanged", state == PROC_LIVE ? "already has a world"
           : "is building its world on another thread");
  return ACX_ERR_INVALID_STATE;
}

/* Ends an init: the built world becomes the live one and owns the token identity, or (w NULL) the
 * slot is free again and the identity stays as it was. */
static void world_settle(const acx_world_t *w) {
  pthread_mutex_lock(&proc_lock);
  if (w) {
    /* Exports from now on name this rank; the owner-side check refuses other ranks' tokens and
     * every epoch below this world's. */
    acxi_token_set_identity(w->rank, w->node, atomic_load_explicit(&w->epoch, memory_order_relaxed));
    proc_state = PROC_LIVE;
    proc_world = w;
  } else {
    proc_state = PROC_NO_WORLD;
  }
  pthread_mutex_unlock(&proc_lock);
}

static const char *const launcher_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE",
                                            "SLURM_STEP_NUM_TASKS"};

int acxc_launcher_size(const char **var) {
  int best = 0;
  if (var) *var = NULL;
  for (size_t i = 0; i < sizeof launcher_vars / sizeof launcher_vars[0]; i++) {
    const char *v = getenv(launcher_vars[i]);
    char *end;
    long n = v ? strtol(v, &end, 10) : 0;
    if (v && end != v && *end == '\0' && n > best && n < (1L << 30)) {
      best = (int)n;
      if (var) *var = launcher_vars[i];
    }
  }
  return best;
}

/* ---- the bootstrap exchanges ---- */

/* Everything MPI may write while an exchange of acx_world_init runs lives here, on the heap, so a
 * timed-out exchange can be parked whole (acxc_world_park) instead of writing into freed memory
 * when a late rank arrives. */
typedef struct boot {
  MPI_Request req;
  int pending;                    /* req may still run: park, free nothing MPI knows */
  int64_t deadline;               /* of the whole acx_world_init call */
  int64_t timeout_ns;
  MPI_Comm dup, local;            /* MPI_Comm_idup writes dup */
  int is_leader;                  /* local rank 0 */
  int *leaders;                   /* every rank's is_leader */
  uint64_t agree[2], agreed[2];   /* {topology failed, epoch floor}, combined with MPI_MAX */
  char own[ACX_TOPO_CPUSET_STRLEN];
  char *masks;                    /* every local rank's launcher mask */
  struct gpu_claim *claims;       /* every local rank's GPU (share_gpus) */
  int share[2], shared[2];        /* {a rank failed its binding, sharers of my GPU}, MPI_MAX */
} boot_t;

/* One local rank's GPU, for share_gpus. */
typedef struct gpu_claim {
  int32_t status; /* its binding's acx_status_t */
  int32_t rank;   /* in the world */
  char bus_id[ACX_TOPO_BUSID_STRLEN];
} gpu_claim_t;

/* Polls a non-blocking exchange until it completes or `deadline` passes. Sleeping between polls
 * keeps oversubscribed launches (more ranks than cores) moving. ACX_ERR_TIMEOUT (logged with the
 * public call and the step) and ACX_ERR_MPI leave *req pending: the caller parks it. */
static acx_status_t wait_request(MPI_Request *req, int64_t deadline, int64_t timeout_ns, const char *call,
                                 const char *what) {
  acx_status_t res = ACX_OK;
  const int64_t start = acxi_now_ns();
  for (int polls = 0;; polls++) {
    int done = 0;
    MPICHECKGOTO(MPI_Test(req, &done, MPI_STATUS_IGNORE), res, err_mpi);
    if (done) return ACX_OK;
    if (acxi_now_ns() > deadline) {
      ACX_WARN(INIT, "%s: %s: not every rank arrived within %lld ms (acx_world_config_t.timeout_ms, or "
               "ACX_WORLD_TIMEOUT): a rank died, is late, or never made the call. MPI cannot cancel the pending "
               "exchange: it stays parked with its memory; treat the missing rank as lost (MPI_Abort)", call, what,
               (long long)(timeout_ns / 1000000));
      return ACX_ERR_TIMEOUT;
    }
    if (polls > 100) acxi_poll_nap(acxi_now_ns() - start, 50000);
  }
err_mpi:
  return res;
}

/* The exchange just started on b->req, waited for within the init's deadline. */
static acx_status_t boot_wait(boot_t *b, const char *what) {
  b->pending = 1;
  acx_status_t res = wait_request(&b->req, b->deadline, b->timeout_ns, "acx_world_init", what);
  if (res == ACX_OK) b->pending = 0;
  return res;
}

/* Frees what an init used for its exchanges, or parks all of it while one may still run. */
static void boot_end(boot_t *b) {
  if (b->pending) {
    acxc_world_park(b->req, b);
    return;
  }
  if (b->local != MPI_COMM_NULL) MPI_Comm_free(&b->local);
  if (b->dup != MPI_COMM_NULL) MPI_Comm_free(&b->dup);
  free(b->leaders);
  free(b->masks);
  free(b->claims);
  free(b);
}

static acx_status_t check_mpi_state(MPI_Comm comm) {
  int inited = 0, finalized = 0, provided = MPI_THREAD_SINGLE;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (!inited || finalized) {
    ACX_WARN(INIT, "acx_world_init: MPI is %s; call it between MPI_Init_thread and MPI_Finalize",
             finalized ? "already finalized" : "not initialised");
    return ACX_ERR_INVALID_STATE;
  }
  ACX_CHECK_ARG(comm != MPI_COMM_NULL, "acx_world_init: argument 'comm' is MPI_COMM_NULL");
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    ACX_WARN(INIT, "acx_world_init: MPI provides thread level %s; acx needs MPI_THREAD_MULTIPLE (its control "
             "plane calls MPI from an actor thread): initialise with MPI_Init_thread(&argc, &argv, "
             "MPI_THREAD_MULTIPLE, &provided) and an MPI built with thread support",
             provided == MPI_THREAD_SINGLE ? "MPI_THREAD_SINGLE"
             : provided == MPI_THREAD_FUNNELED ? "MPI_THREAD_FUNNELED" : "MPI_THREAD_SERIALIZED");
    return ACX_ERR_NOT_SUPPORTED;
  }
  if (acxi_param_int("ACX_LAUNCH_CHECK")) {
    int wsize = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    const char *var = NULL;
    int claimed = acxc_launcher_size(&var);
    if (wsize == 1 && claimed > 1) {
      ACX_WARN(INIT, "bad launch: %s=%d processes were started, but MPI sees a world of 1: every rank believes it "
               "is rank 0 of 1. The launcher and the MPI library do not share a process manager interface "
               "(e.g. srun without --mpi=pmix, or mpirun of another MPI). Fix the launch (srun --mpi=pmix, or "
               "the mpirun of this MPI); ACX_LAUNCH_CHECK=0 skips this check", var, claimed);
      return ACX_ERR_BAD_LAUNCH;
    }
  }
  return ACX_OK;
}

/* Node numbering: the node leaders (local rank 0, the node's lowest rank) number themselves in
 * rank order. Each rank learns which ranks lead from one gather over the world and finds its own
 * leader locally, so no communicator is made (MPI has no non-blocking split to bound). */
static acx_status_t number_nodes(acx_world_t *w, boot_t *b) {
  acx_status_t res = ACX_ERR_NO_MEMORY;
  b->leaders = calloc((size_t)w->size, sizeof *b->leaders);
  if (!b->leaders) return res;
  MPI_Group wg = MPI_GROUP_NULL, lg = MPI_GROUP_NULL;
  int zero = 0, leader = MPI_UNDEFINED;
  MPICHECKGOTO(MPI_Comm_group(w->comm, &wg), res, err_mpi);
  MPICHECKGOTO(MPI_Comm_group(w->local_comm, &lg), res, err_free_groups);
  MPICHECKGOTO(MPI_Group_translate_ranks(lg, 1, &zero, wg, &leader), res, err_free_groups);
  b->is_leader = w->local_rank == 0;
  MPICHECKGOTO(MPI_Iallgather(&b->is_leader, 1, MPI_INT, b->leaders, 1, MPI_INT, w->comm, &b->req), res,
               err_free_groups);
  ACXCHECKGOTO(boot_wait(b, "node numbering"), res, err_free_groups);
  w->node = w->nodes = 0;
  for (int r = 0; r < w->size; r++) {
    if (!b->leaders[r]) continue;
    if (r < leader) w->node++;
    w->nodes++;
  }
err_free_groups:
  if (lg != MPI_GROUP_NULL) MPI_Group_free(&lg);
  MPI_Group_free(&wg);
err_mpi:
  return res;
}

/* Every local rank's launcher mask, so that the choice spreads the node's ranks over its GPUs. */
static acx_status_t choose_binding(acx_world_t *w, boot_t *b, int device) {
  acx_status_t res = ACX_ERR_NO_MEMORY;
  int bound = 0;
  b->masks = calloc((size_t)w->local_size, ACX_TOPO_CPUSET_STRLEN);
  const char **peers = calloc((size_t)w->local_size, sizeof *peers);
  if (!b->masks || !peers) goto err_free_peers;
  ACXCHECKGOTO(acx_topo_process_cpuset(w->topo, b->own, sizeof b->own, &bound), res, err_free_peers);
  MPICHECKGOTO(MPI_Iallgather(b->own, ACX_TOPO_CPUSET_STRLEN, MPI_CHAR, b->masks, ACX_TOPO_CPUSET_STRLEN, MPI_CHAR,
                              w->local_comm, &b->req), res, err_free_peers);
  ACXCHECKGOTO(boot_wait(b, "launcher mask exchange"), res, err_free_peers);
  for (int r = 0; r < w->local_size; r++) {
    b->masks[(size_t)r * ACX_TOPO_CPUSET_STRLEN + ACX_TOPO_CPUSET_STRLEN - 1] = '\0';
    peers[r] = b->masks + (size_t)r * ACX_TOPO_CPUSET_STRLEN;
  }
  acx_topo_request_t rq = ACX_TOPO_REQUEST_INIT;
  rq.local_rank = w->local_rank;
  rq.local_size = w->local_size;
  rq.device = device;
  rq.peer_cpusets = peers;
  res = acx_topo_choose(w->topo, &rq, &w->binding);
err_free_peers:
  free(peers);
  return res;
}

/* Which ranks share a GPU: every local rank's bus id over the node, then the most sharers of any
 * GPU over the world. A rank whose binding failed (bind_res) says so in both exchanges, so the
 * others fail with it instead of waiting for it. */
static acx_status_t share_gpus(acx_world_t *w, boot_t *b, acx_status_t bind_res) {
  acx_status_t res = ACX_ERR_NO_MEMORY;
  gpu_claim_t me = {.status = bind_res, .rank = w->rank};
  if (bind_res == ACX_OK) snprintf(me.bus_id, sizeof me.bus_id, "%s", w->binding.pci_bus_id);
  b->claims = calloc((size_t)w->local_size, sizeof *b->claims);
  w->gpu_peers = calloc((size_t)w->local_size, sizeof *w->gpu_peers);
  if (!b->claims || !w->gpu_peers) return res;
  MPICHECKGOTO(MPI_Iallgather(&me, sizeof me, MPI_BYTE, b->claims, sizeof me, MPI_BYTE, w->local_comm, &b->req),
               res, err_mpi);
  ACXCHECKGOTO(boot_wait(b, "GPU sharing exchange"), res, err_mpi);
  int failed = 0;
  w->n_gpu_peers = 0;
  for (int r = 0; r < w->local_size; r++) {
    gpu_claim_t *c = &b->claims[r];
    c->bus_id[ACX_TOPO_BUSID_STRLEN - 1] = '\0';
    failed |= c->status != ACX_OK;
    if (c->rank == w->rank || (me.bus_id[0] && !strcmp(c->bus_id, me.bus_id))) w->gpu_peers[w->n_gpu_peers++] = c->rank;
  }
  b->share[0] = failed;
  b->share[1] = w->n_gpu_peers;
  MPICHECKGOTO(MPI_Iallreduce(b->share, b->shared, 2, MPI_INT, MPI_MAX, w->comm, &b->req), res, err_mpi);
  ACXCHECKGOTO(boot_wait(b, "GPU sharing agreement"), res, err_mpi);
  if (b->shared[0]) {
    if (bind_res == ACX_OK) ACX_WARN(INIT, "acx_world_init: another rank could not choose its GPU");
    return bind_res != ACX_OK ? bind_res : ACX_ERR_PEER_LOST;
  }
  w->max_gpu_sharers = b->shared[1];
  if (w->n_gpu_peers > 1) {
    char list[256];
    acxc_world_gpu_peers_str(w, list, sizeof list);
    ACX_INFO(TOPO, "rank %d shares GPU %s of node %d with %d other rank(s): ranks %s", w->rank, me.bus_id, w->node,
             w->n_gpu_peers - 1, list);
  }
err_mpi:
  return res;
}

/* Every rank's topology loaded (a rank that failed must not strand the others in the mask
 * exchange, and no rank keeps a world the others gave up), and the world's first epoch: above
 * every epoch any of its ranks used before. */
static acx_status_t agree_start(acx_world_t *w, boot_t *b, acx_status_t topo_res, uint64_t epoch_floor) {
  acx_status_t res = ACX_OK;
  b->agree[0] = topo_res != ACX_OK;
  b->agree[1] = epoch_floor;
  MPICHECKGOTO(MPI_Iallreduce(b->agree, b->agreed, 2, MPI_UINT64_T, MPI_MAX, w->comm, &b->req), res, err_mpi);
  ACXCHECKGOTO(boot_wait(b, "topology and epoch agreement"), res, err_mpi);
  if (b->agreed[0]) {
    if (topo_res == ACX_OK) ACX_WARN(INIT, "acx_world_init: another rank could not load its topology");
    return topo_res != ACX_OK ? topo_res : ACX_ERR_PEER_LOST;
  }
  atomic_store_explicit(&w->epoch, b->agreed[1], memory_order_relaxed);
err_mpi:
  return res;
}

/* The world's communicators: a duplicate of comm and its per-node split. */
static acx_status_t make_comms(acx_world_t *w, boot_t *b, MPI_Comm comm) {
  acx_status_t res = ACX_OK;
  MPICHECKGOTO(MPI_Comm_idup(comm, &b->dup, &b->req), res, err_mpi);
  ACXCHECKGOTO(boot_wait(b, "duplicating the communicator"), res, err_mpi);
  w->comm = b->dup;
  MPI_Comm_set_errhandler(w->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(w->comm, &w->rank);
  MPI_Comm_size(w->comm, &w->size);
  acx_log_set_rank(w->rank);
  /* MPI_Comm_split_type has no non-blocking form. Once this barrier completes every rank has
   * arrived and is on its way to the split, which so waits only for ranks already here. */
  MPICHECKGOTO(MPI_Ibarrier(w->comm, &b->req), res, err_mpi);
  ACXCHECKGOTO(boot_wait(b, "arrival barrier"), res, err_mpi);
  MPICHECKGOTO(MPI_Comm_split_type(w->comm, MPI_COMM_TYPE_SHARED, w->rank, MPI_INFO_NULL, &b->local), res, err_mpi);
  w->local_comm = b->local;
  MPI_Comm_set_errhandler(w->local_comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(w->local_comm, &w->local_rank);
  MPI_Comm_size(w->local_comm, &w->local_size);
err_mpi:
  return res;
}

/* The oldest acx_world_config_t (before timeout_ms): callers built against it are still served. */
#define WORLD_CONFIG_V1_SIZE offsetof(acx_world_config_t, timeout_ms)

acx_status_t acx_world_init(MPI_Comm comm, const acx_world_config_t *cfg, acx_world_t **world) {
  ACX_CHECK_NULL(world);
  *world = NULL;
  acx_world_config_t c = ACX_WORLD_CONFIG_INIT;
  if (cfg) {
    ACX_CHECK_ARG(cfg->size >= WORLD_CONFIG_V1_SIZE, "acx_world_init: cfg->size %zu is not "
                  "sizeof(acx_world_config_t) (use ACX_WORLD_CONFIG_INIT)", cfg->size);
    memcpy(&c, cfg, cfg->size < sizeof c ? cfg->size : sizeof c);
  }
  ACX_CHECK_ARG(c.timeout_ms >= 0, "acx_world_init: cfg->timeout_ms %lld is negative (0: ACX_WORLD_TIMEOUT)",
                (long long)c.timeout_ms);
  ACXCHECK(check_mpi_state(comm));
  uint64_t epoch_floor = 0;
  ACXCHECK(world_claim(&epoch_floor));

  acx_status_t res = ACX_ERR_NO_MEMORY;
  acx_world_t *w = calloc(1, sizeof *w);
  boot_t *b = calloc(1, sizeof *b);
  if (!w || !b) goto err_free_world;
  w->comm = w->local_comm = b->dup = b->local = MPI_COMM_NULL;
  int64_t tmo_ms = c.timeout_ms > 0 ? c.timeout_ms : acxi_param_int("ACX_WORLD_TIMEOUT");
  w->timeout_ns = (tmo_ms > 0 ? tmo_ms : 1) * 1000000LL;
  b->timeout_ns = w->timeout_ns;
  b->deadline = acxi_deadline(w->timeout_ns); /* one deadline for every wait of this call */
  ACXCHECKGOTO(make_comms(w, b, comm), res, err_end_boot);
  ACXCHECKGOTO(number_nodes(w, b), res, err_end_boot);
  ACXCHECKGOTO(agree_start(w, b, acx_topo_create(c.topo_xml, &w->topo), epoch_floor), res, err_destroy_topo);
  int device = c.device >= 0 ? c.device : (int)acxi_param_int("ACX_DEVICE");
  acx_status_t bind_res = choose_binding(w, b, device);
  if (b->pending) { /* its exchange timed out: parked; no further exchange on these communicators */
    res = bind_res;
    goto err_destroy_topo;
  }
  ACXCHECKGOTO(share_gpus(w, b, bind_res), res, err_destroy_topo);
  if (c.bind_caller) ACXCHECKGOTO(acx_topo_bind_thread(w->binding.cpuset), res, err_destroy_topo);

  char line[ACX_TOPO_CPUSET_STRLEN + 128];
  ACX_INFO(TOPO, "binding: rank %d/%d node %d/%d epoch %" PRIu64 " %s", w->rank, w->size, w->node, w->nodes,
           atomic_load_explicit(&w->epoch, memory_order_relaxed),
           acx_topo_binding_str(&w->binding, line, sizeof line));
  b->dup = b->local = MPI_COMM_NULL; /* the communicators belong to the world now */
  boot_end(b);
  world_settle(w);
  *world = w;
  return ACX_OK;

err_destroy_topo:
  acx_topo_destroy(w->topo); /* NULL when it did not load */
  free(w->gpu_peers);
err_end_boot:
  boot_end(b); /* frees the communicators too, unless an exchange is parked on them */
  b = NULL;
err_free_world:
  free(b);
  free(w);
  world_settle(NULL);
  return res;
}

acx_status_t acx_world_finalize(acx_world_t *w) {
  if (!w) return ACX_OK;
  pthread_mutex_lock(&proc_lock);
  int live = proc_state == PROC_LIVE && proc_world == w;
  pthread_mutex_unlock(&proc_lock);
  if (!live) {
    ACX_WARN(INIT, "acx_world_finalize: argument 'world' is not this rank's live world (finalized already?): "
             "nothing done");
    return ACX_ERR_INVALID_STATE;
  }
  /* Their threads read the world (the control plane's progress thread, the supervisor): freeing it
   * under them would be a use after free. */
  int sup = acxc_world_supervised(w), rem = acxc_remote_running(w);
  if (sup || rem) {
    ACX_WARN(INIT, "acx_world_finalize: argument 'world' is still in use by %s%s%s: call %s first; nothing done",
             sup ? "supervision" : "", sup && rem ? " and " : "", rem ? "remote access" : "",
             sup && rem ? "acx_world_unsupervise and acx_remote_stop" : sup ? "acx_world_unsupervise" : "acx_remote_stop");
    return ACX_ERR_INVALID_STATE;
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    ACX_WARN(INIT, "acx_world_finalize after MPI_Finalize: only memory is released");
  } else {
    MPI_Comm_free(&w->local_comm);
    MPI_Comm_free(&w->comm);
  }
  acx_topo_destroy(w->topo);
  free(w->gpu_peers);
  uint64_t last = atomic_load_explicit(&w->epoch, memory_order_relaxed);
  pthread_mutex_lock(&proc_lock);
  /* The world's tokens end with it: exports made without a world carry an epoch above its last,
   * and the next world starts at or above that. Rank and node go back to 0 (no world). */
  if (last + 1 > next_epoch) next_epoch = last + 1;
  acxi_token_set_identity(0, 0, next_epoch);
  proc_state = PROC_NO_WORLD;
  proc_world = NULL;
  pthread_mutex_unlock(&proc_lock);
  free(w);
  return ACX_OK;
}

void acxc_world_set_epoch(acx_world_t *w, uint64_t epoch) {
  /* Relaxed: only the rebuild protocol moves the epoch, from one thread at a time. */
  uint64_t now = atomic_load_explicit(&w->epoch, memory_order_relaxed);
  if (epoch < now) {
    ACX_WARN(COLL, "world epoch %" PRIu64 " -> %" PRIu64 " refused: epochs only move forward", now, epoch);
    return;
  }
  /* Tokens first: an export made by a thread that already sees the new epoch must carry it. */
  acxi_token_set_identity(w->rank, w->node, epoch);
  atomic_store_explicit(&w->epoch, epoch, memory_order_release);
}

/* `out` is the output parameter's name in acx/world.h: a NULL one is logged under that name. */
#define WORLD_GETTER(fn, type, out, expr)                                         \
  acx_status_t fn(const acx_world_t *world, type *out) {                        \
    ACX_CHECK_NULL(world);                                                        \
    ACX_CHECK_NULL(out);                                                          \
    *out = (expr);                                                                \
    return ACX_OK;                                                                \
  }
WORLD_GETTER(acx_world_rank, int, rank, world->rank)
WORLD_GETTER(acx_world_size, int, size, world->size)
WORLD_GETTER(acx_world_local_rank, int, local_rank, world->local_rank)
WORLD_GETTER(acx_world_local_size, int, local_size, world->local_size)

acx_status_t acx_world_gpu_peers(const acx_world_t *world, int *ranks, int cap, int *count) {
  ACX_CHECK_NULL_AS(world, "world");
  ACX_CHECK_NULL_AS(count, "count");
  ACX_CHECK_ARG(cap >= 0 && (cap == 0 || ranks), "acx_world_gpu_peers: argument 'ranks' is NULL or 'cap'=%d < 0", cap);
  *count = world->n_gpu_peers;
  for (int i = 0; i < world->n_gpu_peers && i < cap; i++) ranks[i] = world->gpu_peers[i];
  return ACX_OK;
}

int acxc_world_gpu_sharers(const acx_world_t *w) { return w->max_gpu_sharers; }

int acxc_world_shares_gpu(const acx_world_t *w, int rank) {
  for (int i = 0; i < w->n_gpu_peers; i++)
    if (w->gpu_peers[i] == rank && rank != w->rank) return 1;
  return 0;
}

char *acxc_world_gpu_peers_str(const acx_world_t *w, char *buf, size_t len) {
  size_t at = 0;
  buf[0] = '\0';
  for (int i = 0; i < w->n_gpu_peers && at + 16 < len; i++)
    at += (size_t)snprintf(buf + at, len - at, "%s%d", i ? "," : "", w->gpu_peers[i]);
  return buf;
}
WORLD_GETTER(acx_world_binding, acx_topo_binding_t, binding, world->binding)
WORLD_GETTER(acx_world_comm, MPI_Comm, comm, world->comm)
/* Relaxed: the epoch is a counter read for tagging; the rebuild protocol orders its own steps. */
WORLD_GETTER(acx_world_epoch, uint64_t, epoch, atomic_load_explicit(&world->epoch, memory_order_relaxed))

acx_status_t acx_world_node(const acx_world_t *world, int *node, int *nodes) {
  ACX_CHECK_NULL(world);
  if (node) *node = world->node;
  if (nodes) *nodes = world->nodes;
  return ACX_OK;
}

/* A broadcast's request and the heap copy MPI writes: parked whole if it times out, so the
 * caller's buffer is never written after the call returns. */
typedef struct bcast {
  MPI_Request req;
  unsigned char bytes[];
} bcast_t;

acx_status_t acxc_world_bcast_bytes(acx_world_t *w, int root, void *buf, size_t len) {
  ACX_CHECK_NULL(w);
  ACX_CHECK_NULL(buf);
  ACX_CHECK_ARG(root >= 0 && root < w->size, "acxc_world_bcast_bytes: root %d is not a rank of [0, %d)", root,
                w->size);
  ACX_CHECK_ARG(len <= (size_t)1 << 30, "acxc_world_bcast_bytes: len %zu is over 1 GiB", len);
  acx_status_t res = ACX_ERR_NO_MEMORY;
  bcast_t *x = malloc(sizeof *x + (len ? len : 1));
  if (!x) return res;
  if (w->rank == root) memcpy(x->bytes, buf, len);
  MPICHECKGOTO(MPI_Ibcast(x->bytes, (int)len, MPI_BYTE, root, w->comm, &x->req), res, err_free_copy);
  res = wait_request(&x->req, acxi_deadline(w->timeout_ns), w->timeout_ns, "acx_coll_create or a world rebuild",
                     "byte broadcast of the world");
  if (res != ACX_OK) {
    acxc_world_park(x->req, x);
    return res;
  }
  memcpy(buf, x->bytes, len);
err_free_copy:
  free(x);
  return res;
}

acx_status_t acxc_world_bcast_nccl_id(acx_world_t *w, int root, acx_status_t root_status,
                                      unsigned char id[ACXC_NCCL_ID_BYTES]) {
  ACX_CHECK_NULL(w);
  ACX_CHECK_NULL(id);
  struct {
    int32_t status;
    unsigned char id[ACXC_NCCL_ID_BYTES];
  } msg;
  memset(&msg, 0, sizeof msg);
  if (w->rank == root) {
    msg.status = root_status;
    if (root_status == ACX_OK) memcpy(msg.id, id, sizeof msg.id);
  }
  ACXCHECK(acxc_world_bcast_bytes(w, root, &msg, sizeof msg));
  if (msg.status != ACX_OK) {
    if (w->rank != root) ACX_WARN(COLL, "rank %d could not make the NCCL unique id", root);
    return (acx_status_t)msg.status;
  }
  memcpy(id, msg.id, ACXC_NCCL_ID_BYTES);
  ACX_TRACE(COLL, "NCCL unique id from rank %d received", root);
  return ACX_OK;
}
