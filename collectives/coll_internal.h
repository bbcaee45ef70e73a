/* Rank-side internals of the collectives, shared by coll.c (API, validation, NCCL submission,
 * watchdog), mpi_coll.c (host device kind: MPI on host-staged copies) and coll_actor.c (the
 * CollectiveActor: device watch and watchdog timer). */
#ifndef ACXC_COLL_INTERNAL_H
#define ACXC_COLL_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "acx/coll.h"
#include "runtime/proto/coll_ops.h"

/* One operation as validated by the API, before it goes to the NCCL or the MPI path. */
typedef struct acxc_opdesc {
  uint32_t op; /* ACXC_OP_ALLREDUCE .. ACXC_OP_ALLTOALL */
  acx_dtype_t dtype;
  acx_redop_t redop;
  int peer; /* root or peer; -1 when none */
  acx_buffer_t *send, *recv; /* borrowed from the caller (NULL where unused) */
  size_t count;
  uint32_t stream;
} acxc_opdesc_t;

/* An operation with a future, watched for its deadline (NCCL path). */
typedef struct acxc_tracked {
  acx_future_t *future; /* held */
  int64_t deadline_ns;
} acxc_tracked_t;

/* One collective operation of the epoch on record for the rebuild's count (coll.c). */
#define ACXC_UNJ_RING 256
typedef struct acxc_unj {
  uint64_t idx;       /* 1-based within the epoch; 0: an empty entry */
  acx_future_t *f;    /* held; NULL: fire-and-forget */
  int local;          /* this rank's result does not depend on the others' (a broadcast's root, a
                         reduce's other ranks) */
} acxc_unj_t;

/* Classifies the operations joined+1 .. submitted on record in ring[ACXC_UNJ_RING] (entry of
 * operation k at (k - 1) % ACXC_UNJ_RING) into the report's unjoined_* counts: failed, ok (future
 * completed with ACX_OK; ok_local where the entry is local), noreply (no future), unknown (not on
 * record, or its future not complete). */
void acxc_unjoined_count(const acxc_unj_t *ring, uint64_t joined, uint64_t submitted, acx_coll_rebuild_report_t *r);

typedef struct acxc_mpi acxc_mpi_t;
typedef struct acxc_hier acxc_hier_t;
typedef struct acxc_peer acxc_peer_t;

struct acx_coll {
  acx_world_t *world;
  acx_device_t *dev;
  acx_system_t *sys;
  int rank, size;
  int host;         /* 1: the worker path (mpi_coll.c): the host kind's MPI, or hierarchical */
  int host_kind;    /* 1: host device kind */
  int hier_on;      /* 1: hierarchical (hier_coll.c, on the worker path); fixed at creation */
  char hier_where[200]; /* "GPU <bus id> of node N, ranks a,b" (or host memory): set once, at creation */
  uint64_t comm_id; /* NCCL path: the executor's communicator */
  int64_t timeout_ns;
  uint64_t generation; /* device generation the communicator was made in */

  _Atomic int broken; /* acx_status_t: ACX_OK while usable, else the cause (acxc_coll_cause) */
  /* 1 while acx_world_supervise rebuilds the world when this coll fails: its operations then fail
   * with the retryable ACX_ERR_WORLD_REBUILDING whatever broke it (acxc_coll_broken), since the
   * supervisor rebuilds on every cause; `broken` keeps the cause for the supervisor and the logs. */
  _Atomic int supervised;
  _Atomic int closing;

  /* Submission order: one submitter at a time per communicator (group owners hold it across
   * their group). Recursive so the group owner's own calls pass. */
  pthread_mutex_t submit_lock;
  uint64_t seq;
  _Atomic uint64_t streams_used; /* ACXI_STREAM_BIT(s): stream s carried a collective (synchronize
                                   fences them) */

  /* Group being built by the thread holding submit_lock. */
  int in_group;
  pthread_t group_owner;
  acxc_group_entry_t *gents;
  acxc_opdesc_t *gdesc;  /* MPI path: the members as descriptors (buffers held) */
  acx_future_t **gfuts;  /* members' futures (held; NULL where the caller passed none) */
  int gcount;
  uint32_t gstream;
  acx_status_t gerr;     /* first invalid member: the group is dropped at its end */
  uint64_t group_seq;

  /* The collective operations (all but send and recv) submitted in this epoch, and the last
   * ACXC_UNJ_RING of them with their futures (held; NULL: fire-and-forget), so that a rebuild can
   * tell which of those not every rank submitted reported success here (acxc_unjoined_count).
   * Under submit_lock; the report under report_lock. */
  uint64_t ncoll;
  acxc_unj_t unj[ACXC_UNJ_RING];
  pthread_mutex_t report_lock;
  acx_coll_rebuild_report_t report;

  /* A rebuild's attempt under way (acxc_coll_reinit's key) and the last one a peer abandoned
   * (acxc_coll_abandon_attempt): a communicator creation of an abandoned attempt fails at once
   * instead of waiting for ranks that will never join it. Under attempt_lock. */
  pthread_mutex_t attempt_lock;
  uint64_t attempt_key;   /* 0: no reinit under way */
  uint64_t abandoned_key; /* 0: none */
  uint64_t init_comm;     /* the communicator whose creation attempt_key waits for (0: none) */

  /* NCCL path: the host region shared with the executor. */
  acx_host_mem_t *region;
  acxc_region_t *reg;

  /* Watchdog list (NCCL path), a FIFO in submission order. */
  pthread_mutex_t track_lock;
  acxc_tracked_t *tv;
  size_t thead, tcount, tcap;
  _Atomic int check_outstanding;
  _Atomic int unreported; /* first failure of a fire-and-forget operation, for synchronize */

  acx_ref_t actor;
  acx_timer_id_t timer;
  acxc_mpi_t *mpi; /* worker path */
  acxc_hier_t *hier; /* hierarchical: groups, staging, the leaders' communicator (replaced by a rebuild) */
  acxc_peer_t *peer; /* the own all-reduce's set (peer_coll.c; NULL: never wanted); made anew by a rebuild */
  /* Registered buffers (coll_reg.c), newest first, and the next registration's number. */
  pthread_mutex_t reg_lock;
  struct acx_coll_reg *regs;
  int reg_next;
};

/* The world is being rebuilt: remote access's NCCL channels are aborted (their transfers fail at
 * once, with ACX_ERR_WORLD_REBUILDING) and replaced on their next use. No-op without
 * acx_remote_start. Any thread but the control plane's progress thread. */
void acxc_remote_retire(acx_world_t *world);

/* ---- registered buffers (coll_reg.c; issue 16's mapped path, docs/collectives.md) ----
 * A shareable buffer (ACX_MEM_SHAREABLE) registered with a coll is mapped by the executors of the
 * ranks that share this rank's GPU (the own all-reduce's groups: acxc_peer_group), so that the
 * two-shot with groups can read their inputs and store their outputs in place. Registration and
 * deregistration are collective over the coll: every rank calls them, the same number of times in
 * the same order (like MPI_Win_create / MPI_Win_free), each rank with its own buffer; a rank's
 * failure fails the call on every rank (the others with ACX_ERR_PEER_LOST). While registered the
 * buffer cannot be freed (acx_buffer_free: ACX_ERR_INVALID_STATE) and is held; deregistration
 * closes this rank's mappings and agrees with every rank before it lets the buffer go, so that no
 * executor maps memory that its owner has freed (CUDA IPC's rule). A rebuild makes every
 * registration stale (the own all-reduce's set is made anew): acxc_reg_peer then answers NULL and
 * the buffer is used as an unregistered one until deregistered and registered again. Like coll
 * creation, registration uses the world's MPI communicator: not while a rebuild runs (wait for
 * acx_world_wait_ready first). Not yet public: the two-shot's kernels do not read through it yet. */
typedef struct acx_coll_reg acxc_reg_t; /* the public acx_coll_reg_t */
acx_status_t acxc_coll_register(acx_coll_t *c, acx_buffer_t *buf, int64_t timeout_ns, acxc_reg_t **reg);
acx_status_t acxc_coll_deregister(acxc_reg_t *reg, int64_t timeout_ns);
/* World rank `peer`'s buffer of the registration as this rank's executor maps it; NULL where peer
 * is not of this rank's group (or is this rank), or the registration is stale. */
acx_buffer_t *acxc_reg_peer(const acxc_reg_t *reg, int peer);
/* Its number in the coll (the same on every rank), and whether a rebuild has made it stale. */
int acxc_reg_index(const acxc_reg_t *reg);
/* Its slot in the executors' registration tables (runtime/proto/peer_ops.h), -1 where it has none
 * (no group peers, all ACXP_REG_MAX slots taken, or stale). */
int acxc_reg_slot(const acxc_reg_t *reg);
/* The slot of buf's live registration with c, or -1. */
int acxc_reg_slot_of(acx_coll_t *c, const acx_buffer_t *buf);
int acxc_reg_stale(const acxc_reg_t *reg);
/* acx_coll_destroy: the registrations left are closed (collective, as destroy is), with a warning. */
void acxc_coll_regs_destroy(acx_coll_t *c, int64_t timeout_ns);
/* The other ranks of this rank's group in the own all-reduce's set, into peers (up to cap); returns
 * how many (0: no set, or a set without groups) and *set_id the set's id (0: none). */
int acxc_peer_group(const acx_coll_t *c, int *peers, int cap, uint64_t *set_id);
/* MPI_Allgather of `bytes` per rank over the world within the deadline; `what` names the exchange
 * in the log line of a late rank. */
acx_status_t acxc_coll_allgather(acx_coll_t *c, const void *mine, size_t bytes, void *all, int64_t deadline,
                                 const char *what);

/* A new executor-side communicator id (per rank process, never 0): colls and remote channels. */
uint64_t acxc_next_comm_id(void);
/* Every rank's `mine` combined with MPI_MIN over the world, within the world's deadline
 * (collective: every rank calls it at the same point). */
acx_status_t acxc_coll_agree_min(acx_coll_t *c, int mine, int *all);
/* The same for n values at once (one exchange): all[i] is the smallest of every rank's mine[i]. */
acx_status_t acxc_coll_agree_min_n(acx_coll_t *c, const int *mine, int *all, int n);
/* f joins the watchdog's list (held; the operation's deadline is the coll's timeout). */
acx_status_t acxc_coll_track(acx_coll_t *c, acx_future_t *f);
/* An operation sent to the executor on `stream` (synchronize fences it), its future f (may be
 * NULL: fire-and-forget) tracked and handed to *done; on a tracking failure f is released. */
acx_status_t acxc_coll_issued(acx_coll_t *c, uint32_t stream, acx_future_t *f, acx_future_t **done);

/* The own all-reduce between the executors of one node (peer_coll.c, runtime/proto/peer_ops.h). */
/* Collective (every rank, at the same point, whatever `st`): where every rank wants it and `st` is
 * ACX_OK everywhere, makes the set; otherwise leaves it off. Returns `st`, or an agreement's
 * failure; a set-up step that fails turns the path off on every rank (logged), not the coll. */
acx_status_t acxc_peer_create(acx_coll_t *c, acx_status_t st, int64_t timeout_ns);
/* Drops the executor's set (when it is still of this device generation) and the areas. */
void acxc_peer_destroy(acx_coll_t *c, int64_t timeout_ns);
/* acxc_peer_destroy's buffers and the control block, for good (the coll goes). */
void acxc_peer_free(acx_coll_t *c);
/* The hierarchical collectives' group of this rank (hier_coll.c), as a number equal on the ranks of
 * one group: the lowest rank of its GPU, or on the host kind its node's ACX_COLL_HIER_GROUP block. */
int acxc_hier_color(const acx_coll_t *c);
/* Raises the abort word: operations waiting for peers in the executors leave with `cause`. */
void acxc_peer_abort(acx_coll_t *c, acx_status_t cause);
/* 1 when d goes to the own path: an all-reduce of at most the slot's bytes where the small part is
 * on, or of at least the two-shot's smallest where the large part is; the set made. */
int acxc_peer_takes(const acx_coll_t *c, const acxc_opdesc_t *d);
/* Sends d to the executor's set; under the submit lock. The NCCL path: the executor orders it on
 * d's stream with the coll's NCCL operations. */
acx_status_t acxc_peer_submit(acx_coll_t *c, const acxc_opdesc_t *d, acx_future_t **done);
/* The worker path (host kind, hierarchical): the coll's worker thread sends d to the set
 * (acxc_peer_start, *f its reply) and, once it has sent what may follow it, waits for it until
 * `deadline` (acxc_peer_finish, which releases f); past it the coll breaks (the abort word ends the
 * executor's part) and the wait goes on briefly for the executor to let go of the buffers. */
acx_status_t acxc_peer_start(acx_coll_t *c, const acxc_opdesc_t *d, acx_future_t **f);
acx_status_t acxc_peer_finish(acx_coll_t *c, acx_future_t *f, int64_t deadline);
/* Sends the set's FENCE (NCCL path): *f completes once the set's operations sent before it have,
 * with the set's first failure. Under the submit lock. */
acx_status_t acxc_peer_fence(acx_coll_t *c, acx_future_t **f);
/* ACXP_OP_REG to this rank's executor, waited for: entry [peer][slot] of set set_id's registration
 * table := imp's device address (imp NULL: cleared), once the set has nothing in flight. */
acx_status_t acxc_peer_reg(acx_coll_t *c, uint64_t set_id, int slot, int peer, acx_buffer_t *imp, int64_t deadline);
/* 1 while the set is made (the path is on). */
int acxc_peer_on(const acx_coll_t *c);
/* The parts of the path that are on (ACXC_PEER_SMALL: the all-reduces of at most *slot_bytes;
 * ACXC_PEER_BIG: the two-shot, from *big_min bytes; ACXC_PEER_GROUPS: the two-shot with groups, the
 * ranks of a GPU summing first); 0 while the set is not made. */
enum { ACXC_PEER_SMALL = 1, ACXC_PEER_BIG = 2, ACXC_PEER_GROUPS = 4 };
/* ACX_COLL_PEER_BIG_MIN_KB=-1's smallest two-shot all-reduce where it runs one rank per GPU. */
#define ACXC_PEER_BIG_MIN_DEFAULT (2048ULL * 1024)
/* ACX_COLL_PEER_MAX_KB=-1 (auto): the one-shot's slot one rank per GPU, and where the ranks of a GPU
 * form groups (the one-shot with groups up to it, batched; 2xH200 under MPS, session 26: 512 KiB
 * and 1 MiB at 4 ranks per GPU in 20-28 us instead of the two-shot's 29-32). */
#define ACXC_PEER_SLOT_KB_DEFAULT 256
#define ACXC_PEER_SLOT_KB_GROUPS 1024
int acxc_peer_parts(const acx_coll_t *c, uint64_t *slot_bytes, uint64_t *big_min);
/* All-reduces sent down the own path since the coll was made (tests, statistics). */
uint64_t acxc_peer_ops(const acx_coll_t *c);
/* Asks dev's executor for a new ncclUniqueId, written into the nccl_id of `region` (an
 * acxc_region_t): the executor hosts NCCL's bootstrap root, the rank loads no NCCL. Waits up to
 * the device's timeout. ACX_ERR_NCCL (logged with NCCL's code), ACX_ERR_NOT_SUPPORTED without
 * NCCL, the device's statuses. */
acx_status_t acxc_nccl_make_id(acx_device_t *dev, acx_host_mem_t *region);

/* The coll is broken with `cause` (first cause wins): waiting operations fail with it, the NCCL
 * communicator is aborted (abort != 0). Any thread. */
void acxc_coll_break(acx_coll_t *c, acx_status_t cause, int abort, const char *why);
/* What broke the coll (ACX_OK: nothing), as recorded. */
static inline acx_status_t acxc_coll_cause(const acx_coll_t *c) {
  return (acx_status_t)atomic_load_explicit(&c->broken, memory_order_acquire);
}
/* The status a caller sees for `s`, a failure of this coll: under supervision a failure means a
 * rebuild (a peer's fault can reach this rank first as its transport's error: NCCL over sockets
 * sees the connection close before the rebuild notice arrives), so ACX_ERR_WORLD_REBUILDING. */
static inline acx_status_t acxc_coll_user_status(const acx_coll_t *c, acx_status_t s) {
  if (s == ACX_OK || s == ACX_ERR_CANCELLED || !atomic_load_explicit(&c->supervised, memory_order_acquire)) return s;
  return ACX_ERR_WORLD_REBUILDING;
}
/* acxc_coll_user_status of the cause: what operations of a broken coll fail with. */
static inline acx_status_t acxc_coll_broken(const acx_coll_t *c) {
  return acxc_coll_user_status(c, acxc_coll_cause(c));
}
/* The watchdog's turn (the actor's timer): deadlines and the NCCL async-error probe. */
void acxc_coll_watchdog(acx_coll_t *c);
/* The probe's answer (cpl of the CHECK command). */
void acxc_coll_check_done(acx_coll_t *c, acx_future_t *f);

/* World rebuild (rebuild.c). retire: the coll is broken with `cause` (ACX_ERR_WORLD_REBUILDING),
 * replacing an earlier cause, its communicator aborted, waiting operations failed. reinit:
 * collective over the world's ranks: a new communicator in place of the old (host: a fresh MPI
 * duplicate; cuda: the old one destroyed where it still exists, a new ncclUniqueId from rank 0, a
 * new NCCL communicator in the executor), agreed by every rank; ACX_OK makes the coll usable
 * again under the same handle. Not a worker thread. */
void acxc_coll_retire(acx_coll_t *c, acx_status_t cause);
/* key (0: none) names the rebuild's attempt; when this rank's own part fails (not because a peer
 * abandoned the attempt), on_fail(arg, status) runs before the ranks agree, so the caller can tell
 * the others (acxc_coll_abandon_attempt on their side) while they may still wait in NCCL's
 * communicator creation for this rank. */
acx_status_t acxc_coll_reinit(acx_coll_t *c, int64_t init_timeout_ns, uint64_t key,
                              void (*on_fail)(void *arg, acx_status_t st), void *arg);
/* A peer's part of attempt `key` failed: a communicator creation of that attempt under way on this
 * rank fails now with `cause` (ABORT to the executor), one not begun yet fails at its start. Keys
 * only grow; an older one is ignored. Any thread. */
void acxc_coll_abandon_attempt(acx_coll_t *c, uint64_t key, acx_status_t cause);
/* Submits cmd (an ACXC_OP_INIT of communicator cmd->arg[0]) and waits up to wait_ns for it; a
 * reinit's attempt abandoned by a peer fails it at once (ACX_ERR_PEER_LOST before it is sent, or
 * the ABORT's status after). *cpl gets the reply. Not a worker thread. */
acx_status_t acxc_coll_init_comm(acx_coll_t *c, acxi_cmd_t *cmd, int64_t wait_ns, acxi_cpl_t *cpl);

/* The CollectiveActor. */
acx_status_t acxc_coll_actor_start(acx_coll_t *c, const char *name);
void acxc_coll_actor_stop(acx_coll_t *c);
#define ACXC_MSG_TICK 0xfffd0001u
#define ACXC_MSG_STOP 0xfffd0002u
#define ACXC_COOKIE_CHECK 1u

/* MPI path (mpi_coll.c). */
acx_status_t acxc_mpi_create(acx_coll_t *c);
/* Queues op for the MPI worker. *done (may be NULL) completes with its status. */
/* The own all-reduce d (buffers held, as for acxc_mpi_submit) in the worker's order: the worker
 * sends it to the set and keeps up to ACXC_PEER_WINDOW of them in flight while the requests
 * queued behind them are own all-reduces too (the executor runs a set's operations in order);
 * anything else waits until they have finished. */
acx_status_t acxc_mpi_submit_peer(acx_coll_t *c, const acxc_opdesc_t *d, acx_future_t **done);
acx_status_t acxc_mpi_submit(acx_coll_t *c, const acxc_opdesc_t *ops, int nops, acx_future_t **member_futs,
                             acx_future_t **done);
/* Waits for m's queue to drain (up to timeout_ns, or until m stops: ACX_ERR_CANCELLED unless the
 * coll is broken); the first failure not reported to a future. m comes from acxc_mpi_wait_begin,
 * taken under the coll's submit lock (a rebuild replaces c->mpi under it), and is handed back with
 * acxc_mpi_wait_end: acxc_mpi_destroy waits for its waiters before freeing. wait_begin returns NULL
 * when the coll has no MPI state. */
acxc_mpi_t *acxc_mpi_wait_begin(acx_coll_t *c);
void acxc_mpi_wait_end(acxc_mpi_t *m);
acx_status_t acxc_mpi_synchronize(acx_coll_t *c, acxc_mpi_t *m, int64_t timeout_ns);
/* Fails every queued request with cause and wakes the worker. */
void acxc_mpi_break(acx_coll_t *c, acx_status_t cause);
void acxc_mpi_destroy(acx_coll_t *c, int64_t timeout_ns);
/* The worker's duplicate of the world's communicator; MPI's type and op for an acx dtype/redop
 * (avg: sum; f16/bf16: acx's user ops computing in float). */
MPI_Comm acxc_mpi_comm(const acx_coll_t *c);
MPI_Datatype acxc_mpi_dtype(acx_dtype_t d);
MPI_Op acxc_mpi_redop(const acx_coll_t *c, acx_dtype_t d, acx_redop_t op);
/* buf[i] /= n for count elements of d: avg's division (integer division for integer types). */
void acxc_mpi_divide(void *buf, acx_dtype_t d, size_t count, int n);

/* Hierarchical collectives (hier_coll.c). mode: 1 when this coll should be hierarchical
 * (ACX_COLL_HIER, and ranks sharing a GPU); the ranks agree on it before create. create:
 * collective over the world's ranks, on the worker path's communicator (acxc_mpi_create first);
 * destroy: after acxc_mpi_destroy (the worker is gone). run: one operation, on the worker thread,
 * by `deadline`. */
int acxc_hier_mode(const acx_coll_t *c);
acx_status_t acxc_hier_create(acx_coll_t *c, int64_t init_timeout_ns);
void acxc_hier_destroy(acx_coll_t *c);
acx_status_t acxc_hier_run(acx_coll_t *c, const acxc_opdesc_t *d, int64_t deadline);
/* 1 when an MPS control daemon's pipe is where this process's CUDA clients would look for it
 * (`control` in $CUDA_MPS_PIPE_DIRECTORY, else /tmp/nvidia-mps); `dir` (may be NULL) receives the
 * directory looked in. Without MPS the GPU time-slices the contexts of ranks that share it. */
int acxc_hier_mps(char *dir, size_t n);

#endif
