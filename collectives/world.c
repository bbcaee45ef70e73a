/* The world bootstrap: launch sanity, the world's own communicators, node numbering, and the GPU
 * and cpuset choice made from the launcher masks of all ranks of a node. Every exchange is
 * non-blocking and polled against ACX_WORLD_TIMEOUT, so a rank that never arrives fails the rest. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acx_build_config.h"
#include "collectives/world_internal.h"
#include "runtime/clock.h"
#include "runtime/log.h"
#include "runtime/param.h"
#include "runtime/token_internal.h"
#if ACX_HAVE_NCCL
#include <nccl.h>
_Static_assert(sizeof(ncclUniqueId) == ACXC_NCCL_ID_BYTES, "ACXC_NCCL_ID_BYTES must match nccl.h");
#endif

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

/* Polls a non-blocking exchange until it completes or the world's deadline passes. Sleeping
 * between polls keeps oversubscribed launches (more ranks than cores) moving. */
static acx_status_t wait_request(const acx_world_t *w, MPI_Request *req, const char *what) {
  int64_t deadline = acxi_deadline(w->timeout_ns);
  acx_status_t res = ACX_OK;
  for (int polls = 0;; polls++) {
    int done = 0;
    MPICHECKGOTO(MPI_Test(req, &done, MPI_STATUS_IGNORE), res, err_mpi);
    if (done) return ACX_OK;
    if (acxi_now_ns() > deadline) {
      ACX_WARN(INIT, "%s: not every rank arrived within ACX_WORLD_TIMEOUT=%lld ms (a rank died or never "
               "called it); this world is unusable", what, (long long)(w->timeout_ns / 1000000));
      return ACX_ERR_TIMEOUT;
    }
    if (polls > 100) {
      struct timespec ts = {0, 50000};
      nanosleep(&ts, NULL);
    }
  }
err_mpi:
  return res;
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

/* Node numbering: the node leaders (local rank 0) number themselves in rank order. */
static acx_status_t number_nodes(acx_world_t *w) {
  acx_status_t res = ACX_OK;
  MPI_Comm leaders = MPI_COMM_NULL;
  int pair[2] = {0, 0};
  MPICHECKGOTO(MPI_Comm_split(w->comm, w->local_rank == 0 ? 0 : MPI_UNDEFINED, w->rank, &leaders), res, err_mpi);
  if (leaders != MPI_COMM_NULL) {
    MPI_Comm_rank(leaders, &pair[0]);
    MPI_Comm_size(leaders, &pair[1]);
  }
  MPI_Request req;
  MPICHECKGOTO(MPI_Ibcast(pair, 2, MPI_INT, 0, w->local_comm, &req), res, err_free_leaders);
  ACXCHECKGOTO(wait_request(w, &req, "node numbering"), res, err_free_leaders);
  w->node = pair[0];
  w->nodes = pair[1];
err_free_leaders:
  if (leaders != MPI_COMM_NULL) MPI_Comm_free(&leaders);
err_mpi:
  return res;
}

/* Every local rank's launcher mask, so that the choice spreads the node's ranks over its GPUs. */
static acx_status_t choose_binding(acx_world_t *w, int device) {
  acx_status_t res = ACX_ERR_NO_MEMORY;
  char own[ACX_TOPO_CPUSET_STRLEN];
  int bound = 0;
  char *all = calloc((size_t)w->local_size, ACX_TOPO_CPUSET_STRLEN);
  const char **peers = calloc((size_t)w->local_size, sizeof *peers);
  if (!all || !peers) goto err_free_masks;
  ACXCHECKGOTO(acx_topo_process_cpuset(w->topo, own, sizeof own, &bound), res, err_free_masks);
  MPI_Request req;
  MPICHECKGOTO(MPI_Iallgather(own, ACX_TOPO_CPUSET_STRLEN, MPI_CHAR, all, ACX_TOPO_CPUSET_STRLEN, MPI_CHAR,
                              w->local_comm, &req), res, err_free_masks);
  ACXCHECKGOTO(wait_request(w, &req, "launcher mask exchange"), res, err_free_masks);
  for (int r = 0; r < w->local_size; r++) {
    all[(size_t)r * ACX_TOPO_CPUSET_STRLEN + ACX_TOPO_CPUSET_STRLEN - 1] = '\0';
    peers[r] = all + (size_t)r * ACX_TOPO_CPUSET_STRLEN;
  }
  acx_topo_request_t rq = ACX_TOPO_REQUEST_INIT;
  rq.local_rank = w->local_rank;
  rq.local_size = w->local_size;
  rq.device = device;
  rq.peer_cpusets = peers;
  res = acx_topo_choose(w->topo, &rq, &w->binding);
err_free_masks:
  free(peers);
  free(all);
  return res;
}

acx_status_t acx_world_init(MPI_Comm comm, const acx_world_config_t *cfg, acx_world_t **world) {
  ACX_CHECK_NULL(world);
  *world = NULL;
  acx_world_config_t defaults = ACX_WORLD_CONFIG_INIT;
  if (!cfg) cfg = &defaults;
  ACX_CHECK_ARG(cfg->size >= sizeof(acx_world_config_t), "acx_world_init: cfg->size %zu is not "
                "sizeof(acx_world_config_t) (use ACX_WORLD_CONFIG_INIT)", cfg->size);
  ACXCHECK(check_mpi_state(comm));

  acx_status_t res = ACX_ERR_NO_MEMORY;
  acx_world_t *w = calloc(1, sizeof *w);
  if (!w) return res;
  w->comm = w->local_comm = MPI_COMM_NULL;
  int64_t tmo_ms = acxi_param_int("ACX_WORLD_TIMEOUT");
  w->timeout_ns = (tmo_ms > 0 ? tmo_ms : 1) * 1000000LL;
  MPICHECKGOTO(MPI_Comm_dup(comm, &w->comm), res, err_free_world);
  MPI_Comm_set_errhandler(w->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(w->comm, &w->rank);
  MPI_Comm_size(w->comm, &w->size);
  acx_log_set_rank(w->rank);
  MPICHECKGOTO(MPI_Comm_split_type(w->comm, MPI_COMM_TYPE_SHARED, w->rank, MPI_INFO_NULL, &w->local_comm), res,
               err_free_comm);
  MPI_Comm_set_errhandler(w->local_comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(w->local_comm, &w->local_rank);
  MPI_Comm_size(w->local_comm, &w->local_size);
  ACXCHECKGOTO(number_nodes(w), res, err_free_local);

  /* A rank whose topology fails to load must not strand the others in the mask exchange. */
  acx_status_t topo_res = acx_topo_create(cfg->topo_xml, &w->topo);
  int ok = topo_res == ACX_OK, all_ok = 0;
  MPI_Request req;
  MPICHECKGOTO(MPI_Iallreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, w->local_comm, &req), res, err_free_topo);
  ACXCHECKGOTO(wait_request(w, &req, "topology agreement"), res, err_free_topo);
  if (!all_ok) {
    res = topo_res != ACX_OK ? topo_res : ACX_ERR_PEER_LOST;
    if (topo_res == ACX_OK) ACX_WARN(INIT, "another rank of this node could not load its topology");
    goto err_free_topo;
  }
  int device = cfg->device >= 0 ? cfg->device : (int)acxi_param_int("ACX_DEVICE");
  ACXCHECKGOTO(choose_binding(w, device), res, err_free_topo);
  if (cfg->bind_caller) ACXCHECKGOTO(acx_topo_bind_thread(w->binding.cpuset), res, err_free_topo);

  char line[ACX_TOPO_CPUSET_STRLEN + 128];
  ACX_INFO(TOPO, "binding: rank %d/%d node %d/%d %s", w->rank, w->size, w->node, w->nodes,
           acx_topo_binding_str(&w->binding, line, sizeof line));
  atomic_store_explicit(&w->epoch, 0, memory_order_relaxed);
  /* Exports from now on name this rank; the owner-side check refuses other ranks' tokens. */
  acxi_token_set_identity(w->rank, w->node, 0);
  *world = w;
  return ACX_OK;

err_free_topo:
  acx_topo_destroy(w->topo);
err_free_local:
  MPI_Comm_free(&w->local_comm);
err_free_comm:
  MPI_Comm_free(&w->comm);
err_free_world:
  free(w);
  return res;
}

acx_status_t acx_world_finalize(acx_world_t *w) {
  if (!w) return ACX_OK;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    ACX_WARN(INIT, "acx_world_finalize after MPI_Finalize: only memory is released");
  } else {
    MPI_Comm_free(&w->local_comm);
    MPI_Comm_free(&w->comm);
  }
  acx_topo_destroy(w->topo);
  free(w);
  acxi_token_set_identity(0, 0, 0);
  return ACX_OK;
}

void acxc_world_set_epoch(acx_world_t *w, uint64_t epoch) {
  /* Tokens first: an export made by a thread that already sees the new epoch must carry it. */
  acxi_token_set_identity(w->rank, w->node, epoch);
  atomic_store_explicit(&w->epoch, epoch, memory_order_release);
}

#define WORLD_GETTER(fn, type, expr)                                              \
  acx_status_t fn(const acx_world_t *world, type *out) {                        \
    ACX_CHECK_NULL(world);                                                        \
    ACX_CHECK_NULL(out);                                                          \
    *out = (expr);                                                                \
    return ACX_OK;                                                                \
  }
WORLD_GETTER(acx_world_rank, int, world->rank)
WORLD_GETTER(acx_world_size, int, world->size)
WORLD_GETTER(acx_world_local_rank, int, world->local_rank)
WORLD_GETTER(acx_world_local_size, int, world->local_size)
WORLD_GETTER(acx_world_binding, acx_topo_binding_t, world->binding)
WORLD_GETTER(acx_world_comm, MPI_Comm, world->comm)
/* Relaxed: the epoch is a counter read for tagging; the rebuild protocol orders its own steps. */
WORLD_GETTER(acx_world_epoch, uint64_t, atomic_load_explicit(&world->epoch, memory_order_relaxed))

acx_status_t acx_world_node(const acx_world_t *world, int *node, int *nodes) {
  ACX_CHECK_NULL(world);
  if (node) *node = world->node;
  if (nodes) *nodes = world->nodes;
  return ACX_OK;
}

acx_status_t acxc_world_bcast_bytes(acx_world_t *w, int root, void *buf, size_t len) {
  ACX_CHECK_NULL(w);
  ACX_CHECK_NULL(buf);
  ACX_CHECK_ARG(root >= 0 && root < w->size, "acxc_world_bcast_bytes: root %d is not a rank of [0, %d)", root,
                w->size);
  ACX_CHECK_ARG(len <= (size_t)1 << 30, "acxc_world_bcast_bytes: len %zu is over 1 GiB", len);
  acx_status_t res = ACX_OK;
  MPI_Request req;
  MPICHECKGOTO(MPI_Ibcast(buf, (int)len, MPI_BYTE, root, w->comm, &req), res, err_mpi);
  return wait_request(w, &req, "byte broadcast");
err_mpi:
  return res;
}

acx_status_t acxc_world_nccl_unique_id(acx_world_t *w, int root, unsigned char id[ACXC_NCCL_ID_BYTES]) {
  ACX_CHECK_NULL(w);
  ACX_CHECK_NULL(id);
#if ACX_HAVE_NCCL
  struct {
    int32_t status;
    unsigned char id[ACXC_NCCL_ID_BYTES];
  } msg;
  memset(&msg, 0, sizeof msg);
  if (w->rank == root) {
    ncclUniqueId uid;
    ncclResult_t nr = ncclGetUniqueId(&uid);
    if (nr != ncclSuccess) {
      ACX_WARN(COLL, "ncclGetUniqueId failed: %s (%s)", ncclGetErrorString(nr), ncclGetLastError(NULL));
      msg.status = ACX_ERR_NCCL;
    } else {
      memcpy(msg.id, &uid, sizeof msg.id);
    }
  }
  ACXCHECK(acxc_world_bcast_bytes(w, root, &msg, sizeof msg));
  if (msg.status != ACX_OK) {
    if (w->rank != root) ACX_WARN(COLL, "rank %d could not make the NCCL unique id", root);
    return (acx_status_t)msg.status;
  }
  memcpy(id, msg.id, ACXC_NCCL_ID_BYTES);
  ACX_TRACE(COLL, "NCCL unique id from rank %d received", root);
  return ACX_OK;
#else
  (void)root;
  ACX_WARN(COLL, "acxc_world_nccl_unique_id: this libacx was built without NCCL");
  return ACX_ERR_NOT_SUPPORTED;
#endif
}

acx_status_t acxc_nccl_local_id(unsigned char id[ACXC_NCCL_ID_BYTES]) {
  ACX_CHECK_NULL(id);
#if ACX_HAVE_NCCL
  ncclUniqueId uid;
  ncclResult_t nr = ncclGetUniqueId(&uid);
  if (nr != ncclSuccess) {
    ACX_WARN(COLL, "ncclGetUniqueId failed: %s (%s)", ncclGetErrorString(nr), ncclGetLastError(NULL));
    return ACX_ERR_NCCL;
  }
  _Static_assert(sizeof uid == ACXC_NCCL_ID_BYTES, "ncclUniqueId size");
  memcpy(id, &uid, ACXC_NCCL_ID_BYTES);
  return ACX_OK;
#else
  ACX_WARN(COLL, "acxc_nccl_local_id: this libacx was built without NCCL");
  return ACX_ERR_NOT_SUPPORTED;
#endif
}
