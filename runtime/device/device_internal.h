/* Rank-side device state shared by the device's pieces (device.c and those device_impl.h lists:
 * lifecycle, supervision, submission, reply poller) and buffer.c (buffers, host memory, events).
 * One acx_device per open device. */
#ifndef ACXI_DEVICE_INTERNAL_H
#define ACXI_DEVICE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/types.h>

#include "acx/coll.h" /* acx_redop_t */
#include "acx/device.h"
#include "acx/topo.h"
#include "runtime/proto/cmd.h"
#include "runtime/proto/exec_api.h"
#include "runtime/proto/limits.h"
#include "runtime/proto/shm.h"

struct acxi_cpuset;       /* runtime/base/bind.h */
struct acxi_dev_transport; /* runtime/device/device_impl.h */

/* The device kinds the rank knows. Choices that depend on the kind (where buffers live, the
 * collectives' path, remote transfers) compare this, never a string; the name is for logs and for
 * the executor, whose engine registry is keyed by it (acx-executor --kind, engine_find). */
typedef enum acxi_kind {
  ACXI_KIND_HOST = 0, /* buffers in host memory, collectives through MPI: runs without a GPU */
  ACXI_KIND_CUDA = 1,
} acxi_kind_t;
#define ACXI_KIND_COUNT 2

static inline const char *acxi_kind_name(acxi_kind_t kind) {
  static const char *const names[ACXI_KIND_COUNT] = {[ACXI_KIND_HOST] = "host", [ACXI_KIND_CUDA] = "cuda"};
  return (unsigned)kind < ACXI_KIND_COUNT ? names[kind] : "unknown";
}

/* The kind named `name` (ACX_DEVICE_KIND's spelling); -1 when none is. */
static inline int acxi_kind_parse(const char *name, acxi_kind_t *kind) {
  for (int k = 0; k < ACXI_KIND_COUNT; k++)
    if (!strcmp(name, acxi_kind_name((acxi_kind_t)k))) {
      *kind = (acxi_kind_t)k;
      return 0;
    }
  return -1;
}

/* Device states. Submissions from users are accepted in RUNNING only; internal ones (host
 * region re-registration, SHUTDOWN) also in STARTING and CLOSING. */
typedef enum acxi_dev_state {
  ACXI_DEV_STARTING = 0,    /* an executor incarnation is coming up */
  ACXI_DEV_RUNNING = 1,
  ACXI_DEV_RECOVERING = 2,  /* the executor was lost; the DeviceActor restarts it */
  ACXI_DEV_UNAVAILABLE = 3, /* restart limit reached */
  ACXI_DEV_FATAL = 4,       /* inline transport after a sticky fault */
  ACXI_DEV_CLOSING = 5,
  ACXI_DEV_CLOSED = 6
} acxi_dev_state_t;

typedef struct acxi_pend {
  uint64_t req_id; /* 0: free */
  acx_future_t *future;
  int64_t deadline; /* the submitter's (CLOCK_MONOTONIC ns): the liveness rule reads it */
} acxi_pend_t;

struct acx_host_mem {
  acx_device_t *dev; /* a reference, except for the device's own staging region */
  uint64_t id;
  acxi_shm_t shm;
  size_t bytes;
  int internal;        /* the staging region: holds no device reference */
  _Atomic int freed;
  struct acx_host_mem *next, *prev; /* dev->host_list, under host_lock */
};

/* acx_buffer.share: what other executors on the device may do with the buffer's memory. */
#define ACXI_SHARE_NONE 0   /* nothing */
#define ACXI_SHARE_EXPORT 1 /* map it (acxi_buffer_alloc_shareable; acxi_buffer_ipc_export) */
#define ACXI_SHARE_IMPORT 2 /* it is another executor's (acxi_buffer_ipc_import) */

struct acx_buffer {
  _Atomic int refs;
  acx_device_t *dev; /* a reference */
  uint64_t id;
  size_t bytes;
  acx_dtype_t dtype;
  acx_mem_kind_t kind;
  int share; /* ACXI_SHARE_* */
  uint64_t generation;
  _Atomic int freed;
  /* Registrations with colls that hold it (collectives/coll_reg.c): acx_buffer_free is refused
   * while any does, so that no group peer's executor maps memory that is gone. */
  _Atomic int registered;
  /* Collectives queued or running on a coll's worker thread that use it (acxi_buffer_coll_begin). */
  _Atomic int coll_pending;
};

struct acx_event {
  acx_device_t *dev; /* a reference */
  uint64_t id;
  uint64_t generation;
};

struct acx_device {
  _Atomic int refs; /* the opener, the DeviceActor, buffers, host memory, events */
  acx_system_t *sys;
  acx_ref_t actor;

  /* Resolved configuration. */
  acxi_kind_t kind_id;
  char kind[16]; /* acxi_kind_name(kind_id), for logs and the executor's --kind */
  const struct acxi_dev_transport *transport; /* process or inline (ACX_EXECUTOR), chosen at open */
  int cuda_ordinal;
  char pci_bus_id[ACXI_PCI_BUS_ID_LEN];
  int streams; /* 1 to ACXI_MAX_STREAMS */
  int max_restarts;
  int64_t restart_window_ns, heartbeat_ns, exec_timeout_ns, spin_ns;
  uint32_t slots;
  char fault_inject[64];
  char completion[16];
  char exe_path[4096];
  size_t staging_bytes;
  /* Cores of the executor process, the inline executor thread and the poller ("": unbound);
   * cpuset_mask is the same set parsed (NULL when unbound). */
  char cpuset[ACX_TOPO_CPUSET_STRLEN];
  struct acxi_cpuset *cpuset_mask;

  /* Lifecycle. */
  _Atomic int state;          /* acxi_dev_state_t */
  _Atomic uint64_t generation;
  _Atomic int submitters;     /* threads between the state check and the ring push */
  acxi_shm_t shm;             /* the current incarnation's control block */
  /* The incarnation's control block as the rank uses it: ring geometry and addresses computed
   * from dev->slots and our own mapping, never read back from the block (the executor can write
   * it). cv.ctrl is NULL between incarnations; swapped under poll_lock. */
  acxi_ctrl_view_t cv;
  /* Set (1) by whoever finds an impossible sequence number in one of cv's rings (a submitter or
   * the poller): the poller declares the incarnation lost. Cleared with each new block. */
  _Atomic int ring_broken;
  _Atomic int close_requested; /* acx_device_close was called: a restart under way gives up */
  _Atomic int64_t close_by;    /* a close's deadline (0 before): bounds the supervision's waits */
  /* acxi_device_restart: the generation whose loss was asked for (generations only grow, so an
   * older value is inert) and why (under restart_lock). */
  _Atomic uint64_t restart_gen;
  /* The newest generation whose outstanding requests have all been failed (its loss declared, or
   * its teardown): acxi_device_restart returns once it reaches the generation it asked about. */
  _Atomic uint64_t failed_gen;
  pthread_mutex_t restart_lock;
  char restart_reason[96];
  /* Poller only: no outstanding request's deadline lies beyond this (the liveness rule need not
   * scan the request table again before it). Reset with each control block. */
  int64_t busy_until;
  /* Written by the poller only: when it last resumed from a gap in its own checks long enough to
   * mean that this process was not scheduled (a stalled virtual machine, an overloaded node): the
   * executor's silence counts from here, not from before a stall it shared (0: none). Atomic so
   * that diagnostics and tests may read it (relaxed: a lone timestamp). */
  _Atomic int64_t stall_resumed_ns;
  _Atomic pid_t pid;          /* process transport: the executor (read by the poller) */
  int sock;                   /* process transport: our end of the fd socket */
  pthread_mutex_t sock_lock;  /* fd send + ring push of HOST_REGISTER stay in one order */
  pthread_t exec_thread;      /* inline transport */
  int exec_thread_live;
  _Atomic int exec_stop;
  acxi_exec_loop_params_t loop; /* inline transport: the thread's parameters */
  const acxi_exec_entry_t *exec; /* inline transport: the executor library (acxi_exec_lib) */
  int loss_exit_status;       /* wait status of the last reaped executor (DeviceActor) */
  /* Process transport: the hot standby (ACX_EXECUTOR_STANDBY), an executor with its engine made,
   * promoted on a loss instead of a fresh spawn. Changed by the DeviceActor under poll_pause
   * (the poller reads sb_ctrl and sb_pid under poll_lock to watch it). */
  int standby_enabled;
  acxi_shm_t sb_shm;
  acxi_ctrl_t *sb_ctrl;       /* NULL: no standby */
  _Atomic pid_t sb_pid;
  int sb_sock;
  int64_t sb_spawned_ns;
  int64_t sb_losses[3];      /* times of the last standby losses, oldest first (DeviceActor) */
  int sb_gave_up;             /* too many losses in the window: no more standbys (DeviceActor) */
  _Atomic int sb_reported;    /* the poller told the DeviceActor this standby is lost */
  _Atomic int sb_ready;       /* the poller last saw it waiting, engine made (a statistic) */
  int64_t *restart_times;     /* max_restarts + 1 timestamps, a ring */
  int n_restart_times;

  /* Requests waiting for their reply: req_id = (sequence << pend_bits) | slot. */
  pthread_mutex_t pend_lock;
  pthread_cond_t pend_cond;   /* a slot was freed */
  acxi_pend_t *pend;
  uint32_t pend_cap, pend_bits;
  uint32_t *pend_free;
  uint32_t n_pend_free;
  uint64_t req_seq;
  _Atomic uint64_t n_outstanding;
  _Atomic uint64_t submitted; /* req_seq's last value: the poller's sign of a new submission */

  /* The reply poller. */
  pthread_t poller;
  int poller_live;
  pthread_mutex_t poll_lock;  /* held by the poller while it uses ctrl */
  pthread_cond_t poll_cond;   /* state changed */
  _Atomic int poller_stop;
  _Atomic int poll_yield;     /* someone waits for poll_lock: the poller parks */

  /* Host memory shared with the executor. */
  pthread_mutex_t host_lock;
  acx_host_mem_t *host_list;
  _Atomic uint64_t next_region_id;
  pthread_mutex_t staging_lock; /* guards `staging` and its turn (buffer.c): held briefly */
  struct acxi_staging *staging; /* buffer.c's staging region, its turn, what may still use it */

  /* Watchers of restarts. */
  pthread_mutex_t watch_lock;
  acx_ref_t *watchers;
  int n_watchers, cap_watchers;

  /* Id spaces (never 0). */
  _Atomic uint64_t next_buffer_id;
  pthread_mutex_t event_lock;
  uint64_t *free_events;
  int n_free_events, cap_free_events;
  uint64_t next_event_id;

  /* Fire-and-forget commands: the first failure not reported yet (0: none), returned by the
   * next acx_device_synchronize; ff_sent/ff_fenced: user fire-and-forget launches sent, and how
   * many of them an all-stream synchronize had covered (a loss with more sent than fenced may
   * have dropped some: the next synchronize says ACX_ERR_DEVICE_LOST). */
  _Atomic int ff_error;
  _Atomic uint64_t ff_sent, ff_fenced;
  /* The latest deadline a fire-and-forget command was sent with (they have no request-table slot),
   * for the liveness rule; beside ff_sent, which the same submissions already write. */
  _Atomic int64_t ff_deadline;

  /* Statistics. */
  _Atomic uint64_t restarts, commands, buffers_live, device_bytes, managed_bytes, host_bytes;
  _Atomic uint64_t standby_promotions, standby_spawns, ff_failures;
  _Atomic int64_t last_recovery_ns;
};

/* A buffer argument to validate inside the submission's critical section, where the generation
 * cannot move: name is the API argument's name for the log line. */
typedef struct acxi_bufarg {
  acx_buffer_t *buf;
  const char *name;
} acxi_bufarg_t;

#define ACXI_SUBMIT_INTERNAL 0x1u /* allowed while STARTING/CLOSING (the DeviceActor's own) */

/* Sends cmd (req_id and generation are filled in). With `future`, the request gets a reply and
 * *future (held for the caller) completes with its status and the acxi_cpl_t as payload; without,
 * it is fire-and-forget (ACXI_CMD_FLAG_NO_REPLY; a failure is logged). fd >= 0 (process
 * transport) travels on the socket right before the push. The buffers are checked for their
 * generation (ACX_ERR_STALE_BUFFER) and for being freed (ACX_ERR_INVALID_STATE). */
acx_status_t acxi_device_submit(acx_device_t *dev, acxi_cmd_t *cmd, const acxi_bufarg_t *bufs, int nbufs,
                                unsigned flags, int fd, int64_t deadline_ns, acx_future_t **future);
/* Submits and waits for the reply; *cpl (may be NULL) receives it. */
acx_status_t acxi_device_call(acx_device_t *dev, acxi_cmd_t *cmd, const acxi_bufarg_t *bufs, int nbufs,
                              unsigned flags, int fd, int64_t timeout_ns, acxi_cpl_t *cpl);
/* timeout_ns < 0 -> ACX_EXEC_TIMEOUT_MS. */
int64_t acxi_device_timeout(acx_device_t *dev, int64_t timeout_ns);
/* Status for a call on a device in `state` (ACX_OK when RUNNING). */
acx_status_t acxi_device_state_status(acx_device_t *dev);

/* Declares the device's current executor incarnation lost through the normal loss path, as if the
 * supervision had found it dead: the state leaves RUNNING, every outstanding request fails with
 * ACX_ERR_DEVICE_LOST, the executor is killed (SIGKILL) and replaced (the standby is promoted or a
 * fresh one spawned), the generation moves by 1 and watchers get ACX_MSG_DEVICE_RESTARTED whose
 * reason is "restart requested: <reason>". For callers that know the executor is stuck where
 * the liveness rule cannot see it, e.g. a blocking NCCL collective past its deadline (the loop
 * counts as busy while any request's deadline lies ahead): killing the process cures the hang.
 * Waits until the loss is declared (outstanding requests failed), at most max(ACX_HEARTBEAT_MS,
 * 1 s); the restart itself goes on in the DeviceActor (acx_device_generation / watchers tell when
 * it serves). Only the incarnation current at the call is affected: calls racing for the same one
 * cause one restart. Any thread (not the reply poller). Returns ACX_OK (declared lost, by this
 * call or already: a restart was under way), ACX_ERR_NOT_SUPPORTED (inline transport: a thread
 * cannot be killed), ACX_ERR_DEVICE_UNAVAILABLE (restart limit reached), ACX_ERR_INVALID_STATE
 * (closing or closed), ACX_ERR_TIMEOUT (the poller did not act in time; logged). reason may be
 * NULL. */
acx_status_t acxi_device_restart(acx_device_t *dev, const char *reason);

/* ---- stream order for collectives run by a worker thread (runtime/device/buffer.c) ----
 * The host kind's collectives and the hierarchical ones run on their coll's worker thread
 * (collectives/mpi_coll.c), which reads and writes the buffers through this API after the
 * collective's call has returned. On GPUs a command issued later on a stream runs after the
 * collective; here every command that names a buffer with such collectives queued or running
 * (acxi_device_submit's buffer arguments: copies, fills, library calls, token transfers, other
 * colls) and acx_buffer_read/write/free wait for them first (within their deadline), so that they
 * behave as the stream order promises (include/acx/coll.h). The worker marks its thread
 * (acxi_buffer_coll_worker), whose own commands never wait. */
void acxi_buffer_coll_begin(acx_buffer_t *buf);
void acxi_buffer_coll_end(acx_buffer_t *buf);
void acxi_buffer_coll_worker(void);
/* ACX_OK once buf has no such collective (at once on the worker's thread); ACX_ERR_TIMEOUT at
 * the deadline, logged naming fn and the argument `name`. */
acx_status_t acxi_buffer_coll_order(const char *fn, const char *name, acx_buffer_t *buf, int64_t deadline);

/* ---- shareable buffers (runtime/device/share.c; issue 16: ranks sharing one GPU) ----
 * Device memory that another executor on the same device can map: kind cuda, CUDA IPC (the
 * memory is cudaMalloc'd, so that cudaIpcGetMemHandle applies); kind host, a memfd mapped
 * MAP_SHARED, which the importing executor opens through /proc/<pid>/fd/<fd>. Lifetime: a host-kind
 * import keeps the memory alive after its exporter freed it or exited; a CUDA import does not (the
 * exporter must keep the allocation until every importer closed its import): callers free imports
 * before exports, and after an executor loss (the buffers are stale) export and import anew. Every
 * call: any thread; a rejected argument is logged naming it. */
/* ACXI_IPC_HANDLE_BYTES: runtime/proto/limits.h (the executor writes the same bytes). */
typedef struct acxi_ipc_handle {
  unsigned char bytes[ACXI_IPC_HANDLE_BYTES];
} acxi_ipc_handle_t;
/* A shareable buffer of `bytes` (a multiple of dtype's size), kind ACX_MEM_DEVICE. Statuses as
 * acx_buffer_alloc. */
acx_status_t acxi_buffer_alloc_shareable(acx_device_t *dev, size_t bytes, acx_dtype_t dtype, int64_t timeout_ns,
                                         acx_buffer_t **out);
/* The handle of a shareable buffer; it names the memory, for as long as its exporter holds it.
 * ACX_ERR_INVALID_ARG (logged) for any other buffer (an import included); the buffer checks of
 * acx_buffer_check; the executor's statuses. */
acx_status_t acxi_buffer_ipc_export(acx_buffer_t *buf, acxi_ipc_handle_t *h, int64_t timeout_ns);
/* A buffer of dev's executor that is the memory named by h (of another executor on the same
 * device, or of this one): reads and writes through it are the exporter's bytes, in
 * acx_buffer_copy, acx_buffer_read/write, collectives and acxi_buffer_reduce/div like any buffer
 * of dev. Its size is the export's; dtype must divide it. Freeing or releasing it unmaps it (never
 * frees the exporter's memory). Work of two executors on the same memory is ordered only by their
 * replies: wait for one's command before the other's touches the bytes. ACX_ERR_INVALID_ARG: bytes
 * that are not a handle, or a handle of another device kind; ACX_ERR_PEER_LOST: the exporter is
 * gone or freed the buffer (both logged). */
acx_status_t acxi_buffer_ipc_import(acx_device_t *dev, const acxi_ipc_handle_t *h, acx_dtype_t dtype,
                                    int64_t timeout_ns, acx_buffer_t **out);
/* dst[dst_off..] := dst[dst_off..] (op) src[src_off..] elementwise over count elements of dtype
 * (offsets in bytes, multiples of its size; the buffers' own dtypes are not consulted), on
 * `stream`, waited for up to timeout_ns. op: ACX_REDOP_SUM, PROD, MAX, MIN (AVG, or another value:
 * ACX_ERR_INVALID_ARG; AVG is a SUM, then acxi_buffer_div). dtypes: the ten of NCCL: I8 U8 I32 U32
 * I64 U64 F16 BF16 F32 F64 (BYTE, F8: ACX_ERR_NOT_SUPPORTED; no dtype: ACX_ERR_BAD_DTYPE; logged).
 * Integer sums and products wrap; MAX/MIN keep dst's element unless src's compares greater/less;
 * f16/bf16 are computed in float, rounded to nearest even, bit-identical between the host kind and
 * CUDA (NaN payloads aside). Both buffers of the same device; ranges checked (ACX_ERR_OUT_OF_RANGE,
 * ACX_ERR_OVERFLOW); the same buffer's ranges may be equal, not overlap partly
 * (ACX_ERR_INVALID_ARG). count 0: ACX_OK, nothing sent. */
acx_status_t acxi_buffer_reduce(acx_buffer_t *dst, size_t dst_off, acx_buffer_t *src, size_t src_off, size_t count,
                                acx_dtype_t dtype, acx_redop_t op, uint32_t stream, int64_t timeout_ns);
/* buf[off..] := buf[off..] / divisor over count elements: integer division (truncation) for
 * integer dtypes, IEEE division for float ones (f16/bf16 through float): ACX_REDOP_AVG as the sum
 * divided by the rank count, as the host kind's MPI path does. divisor 0, or above INT64_MAX for a
 * signed dtype: ACX_ERR_INVALID_ARG. dtypes, ranges, count 0: as acxi_buffer_reduce. */
acx_status_t acxi_buffer_div(acx_buffer_t *buf, size_t off, size_t count, acx_dtype_t dtype, uint64_t divisor,
                             uint32_t stream, int64_t timeout_ns);

/* A host region that every rank of a node may map (issue 16: the flags through which the executors
 * of one GPU's ranks order a collective's steps): its owner's process, descriptor and the file's
 * identity. The owner's acx_host_free ends the sharing; an attached region keeps its mapping. */
typedef struct acxi_host_share {
  int32_t pid, fd;
  uint64_t dev, ino, bytes;
} acxi_host_share_t;
/* What another process of the node needs to attach mem. ACX_ERR_SYSTEM (logged) if it cannot say. */
acx_status_t acxi_host_share(const acx_host_mem_t *mem, acxi_host_share_t *out);
/* A host region of dev that is the region `share` names (through /proc/<pid>/fd/<fd>), registered
 * with dev's executor like acx_host_alloc's (and with every later incarnation); acx_host_free
 * unmaps it. ACX_ERR_PEER_LOST (logged): the owner is gone or freed the region; the statuses of
 * acx_host_alloc. */
acx_status_t acxi_host_attach(acx_device_t *dev, const acxi_host_share_t *share, acx_host_mem_t **out);

/* The executor library for the inline transport, loaded on first use (runtime/device/exec_lib.c).
 * ACX_ERR_NOT_SUPPORTED (logged) when it cannot be found, ACX_ERR_BAD_PARAM when ACX_EXEC_LIBRARY
 * names a file that is not one. */
acx_status_t acxi_exec_lib(const acxi_exec_entry_t **entry);
void acxi_device_hold(acx_device_t *dev);
void acxi_device_release(acx_device_t *dev);

#endif
