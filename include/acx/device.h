/* acx devices and buffers. A device is one GPU (kind cuda) or its host-memory stand-in (kind
 * host) reached through an executor: a supervised process (transport process, the default) or a
 * thread of this process (transport inline). A buffer is a refcounted, generation-checked handle
 * to device memory: when the executor dies and is restarted, the device generation moves on and
 * every older buffer answers ACX_ERR_STALE_BUFFER.
 *
 * Threads: every function may be called from any thread, concurrently, unless it says otherwise.
 * Timeouts: timeout_ns bounds the wait for the executor's reply; ACX_TIMEOUT_DEFAULT (any
 * negative value) means ACX_EXEC_TIMEOUT_MS. On ACX_ERR_TIMEOUT the command stays queued and may
 * still take effect. Calls without a timeout_ns argument wait only as long as an environment
 * variable allows: acx_device_open (the executor's start and first registration:
 * ACX_EXEC_TIMEOUT_MS, plus 10 s for the DeviceActor to answer), the _async variants and
 * acx_buffer_release (a full command ring or request table: ACX_EXEC_TIMEOUT_MS), acx_host_alloc,
 * acx_host_free and acx_event_destroy (their executor round trip: ACX_EXEC_TIMEOUT_MS). The
 * device's own supervision waits are bounded too (the reply poller parking: 10 s, threads leaving
 * a submission: 5 s; both also by acx_device_close's deadline) and say so in the log when hit.
 * Statuses every device call may return besides its own: ACX_ERR_NULL_ARG, ACX_ERR_INVALID_ARG
 * (the log line names the argument), ACX_ERR_DEVICE_LOST (the executor died or stopped answering
 * while the call was outstanding, or is being restarted: retry), ACX_ERR_DEVICE_UNAVAILABLE (the
 * restart limit was reached), ACX_ERR_DEVICE_FATAL (inline transport after a sticky fault: this
 * process can no longer use the GPU), ACX_ERR_INVALID_STATE (the device was closed),
 * ACX_ERR_TIMEOUT, ACX_ERR_QUEUE_FULL (the command ring stayed full until the deadline). */
#ifndef ACX_DEVICE_H
#define ACX_DEVICE_H

/* Exported from libacx, which hides everything else (cmake/libacx.map). */
#pragma GCC visibility push(default)

#include <stddef.h>
#include <stdint.h>

#include "acx/actor.h"
#include "acx/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ACX_TIMEOUT_DEFAULT (-1)
/* As a byte count: "from the offset to the end of the source". */
#define ACX_WHOLE SIZE_MAX
/* As a stream of acx_device_synchronize: every stream. */
#define ACX_STREAM_ALL 0xffffffffu

/* Element types. Copies between buffers need equal types (or one of them ACX_DTYPE_BYTE);
 * offsets and sizes of typed buffers are in bytes but must be multiples of the element size. */
typedef enum acx_dtype {
  ACX_DTYPE_BYTE = 0, /* untyped bytes */
  ACX_DTYPE_I8 = 1,
  ACX_DTYPE_U8 = 2,
  ACX_DTYPE_I32 = 3,
  ACX_DTYPE_U32 = 4,
  ACX_DTYPE_I64 = 5,
  ACX_DTYPE_U64 = 6,
  ACX_DTYPE_F16 = 7,
  ACX_DTYPE_BF16 = 8,
  ACX_DTYPE_F32 = 9,
  ACX_DTYPE_F64 = 10,
  ACX_DTYPE_F8E4M3 = 11, /* OCP fp8 E4M3 (CUDA_R_8F_E4M3), e.g. cuBLASLt matmul inputs */
  ACX_DTYPE_F8E5M2 = 12, /* OCP fp8 E5M2 (CUDA_R_8F_E5M2) */
  ACX_DTYPE_COUNT
} acx_dtype_t;

/* Bytes of one element (1 for BYTE); 0 for an unknown type. Any thread. */
size_t acx_dtype_size(acx_dtype_t dtype);
/* "f32", "bf16", "byte", ...; "unknown" for an unknown type. Never NULL. Any thread. */
const char *acx_dtype_name(acx_dtype_t dtype);

typedef enum acx_device_kind {
  ACX_DEVICE_KIND_DEFAULT = 0, /* ACX_DEVICE_KIND (auto: cuda when this build has it and a GPU
                                  driver node exists, else host) */
  ACX_DEVICE_KIND_HOST = 1,
  ACX_DEVICE_KIND_CUDA = 2
} acx_device_kind_t;

typedef enum acx_transport {
  ACX_TRANSPORT_DEFAULT = 0, /* ACX_EXECUTOR */
  ACX_TRANSPORT_PROCESS = 1, /* acx-executor process: fault-isolated, restarted on failure */
  ACX_TRANSPORT_INLINE = 2   /* a thread of this process: lowest latency, raw device pointers;
                                a sticky fault is fatal for the process's GPU use */
} acx_transport_t;

/* Grows by appending fields only: size tells which fields the caller has (any size from the one
 * that ends at `kind` up to sizeof(acx_device_config_t)); missing fields take their defaults. */
typedef struct acx_device_config {
  size_t size;                 /* sizeof(acx_device_config_t): set by ACX_DEVICE_CONFIG_INIT */
  acx_device_kind_t kind;
  acx_transport_t transport;
  int cuda_ordinal;            /* < 0: ACX_DEVICE, and 0 when that is -1 */
  const char *pci_bus_id;      /* e.g. "0000:18:00.0"; NULL or "": use cuda_ordinal */
  int streams;                 /* executor streams, at most 64; <= 0: ACX_DEVICE_STREAMS */
  int max_restarts;            /* < 0: ACX_MAX_RESTARTS; 0: the first loss makes it unavailable */
  int64_t restart_window_ns;   /* <= 0: ACX_RESTART_WINDOW_MS */
  int64_t heartbeat_ns;        /* <= 0: ACX_HEARTBEAT_MS: the liveness limit. An executor process
                                  silent this long is lost; a loop making no progress this long is
                                  lost only once every outstanding request is past its deadline
                                  (busy is not dead: docs/fault-model.md) */
  const char *name;            /* DeviceActor name under its parent; NULL: "device<N>" */
  acx_ref_t supervisor;        /* parent of the DeviceActor; NULL: the system's user root */
  /* Cores for the device's executor (a cpuset list, "0-15,32-47"), e.g. the cpuset of
   * acx_world_binding (acx/world.h): the acx-executor process (and every thread it or CUDA makes;
   * the standby too) binds itself to it before creating its engine, the inline executor thread
   * and this process's reply poller are created bound to it. NULL: ACX_CPUSET, and when that is
   * empty too nothing is bound. The string is copied. */
  const char *cpuset;
} acx_device_config_t;

#define ACX_DEVICE_CONFIG_INIT {.size = sizeof(acx_device_config_t), .cuda_ordinal = -1, .max_restarts = -1}

typedef struct acx_device acx_device_t;
typedef struct acx_buffer acx_buffer_t;
typedef struct acx_host_mem acx_host_mem_t;
typedef struct acx_event acx_event_t;

/* Messages a watcher (acx_device_watch) receives; payload acx_device_event_t. They are told like
 * user messages, so they sit just below ACX_MSG_SYSTEM, in [ACX_MSG_DEVICE_BASE, ACX_MSG_SYSTEM),
 * a range acx's own actors use: keep application message types below ACX_MSG_DEVICE_BASE. */
#define ACX_MSG_DEVICE_BASE 0xfffe0000u
#define ACX_MSG_DEVICE_RESTARTED (ACX_MSG_DEVICE_BASE + 1)   /* a new executor serves the device */
#define ACX_MSG_DEVICE_UNAVAILABLE (ACX_MSG_DEVICE_BASE + 2) /* restart limit reached: given up */
#define ACX_MSG_DEVICE_FATAL (ACX_MSG_DEVICE_BASE + 3)       /* inline sticky fault */

typedef struct acx_device_event {
  uint64_t old_generation;
  uint64_t new_generation; /* equals old_generation for UNAVAILABLE and FATAL */
  acx_status_t cause;      /* what ended the old executor: ACX_ERR_DEVICE_LOST for every loss in
                              the process transport (exit, crash, heartbeat, a hung loop, a
                              corrupted ring, a sticky error it reported: reason says which);
                              ACX_ERR_DEVICE_FATAL only with ACX_MSG_DEVICE_FATAL (inline) */
  int exit_status;         /* wait status of the old executor process; -1 when unknown */
  char reason[128];        /* "killed by signal 9", "no heartbeat for 1002 ms", the sticky message */
} acx_device_event_t;

/* Opens a device: spawns its DeviceActor in sys (under cfg->supervisor) and starts the first
 * executor (generation 1), waiting until it serves commands. cfg may be NULL (all defaults).
 * ACX_ERR_NO_DEVICE (no such kind in this build, or the engine found no device),
 * ACX_ERR_BAD_PARAM (an ACX_* parameter is invalid), ACX_ERR_SYSTEM (spawn, memfd, threads),
 * ACX_ERR_TIMEOUT (the executor did not become ready within ACX_EXEC_TIMEOUT_MS),
 * ACX_ERR_NAME_TAKEN, ACX_ERR_INVALID_ARG (a bad field, logged with its name: among them a
 * malformed or empty cfg->cpuset, or one with no CPU this process may run on). Any thread except a
 * worker of sys (it waits for the DeviceActor). */
acx_status_t acx_device_open(acx_system_t *sys, const acx_device_config_t *cfg, acx_device_t **dev);
/* Shuts the executor down and returns by timeout_ns (ACX_TIMEOUT_DEFAULT: ACX_EXEC_TIMEOUT_MS):
 * SHUTDOWN, which lets queued work finish until min(timeout/4, 250 ms) before the deadline, then
 * kill -9 and reap; a restart under way is abandoned. Fails what is still outstanding with
 * ACX_ERR_CANCELLED, stops the DeviceActor. Buffers and host memory of the device stay valid
 * handles until released, but every use returns ACX_ERR_INVALID_STATE (host memory pointers stay
 * readable until acx_host_free). Returns ACX_OK, or ACX_ERR_TIMEOUT when the DeviceActor had not
 * finished by the deadline (it finishes in the background); dev is released either way. Not a
 * worker thread of the system. */
acx_status_t acx_device_close(acx_device_t *dev, int64_t timeout_ns);

/* The current generation: 1 for the first executor, exactly +1 per restart (an attempt that fails
 * before the device serves again, such as a promoted standby that never reports ready, reuses the
 * number; it counts against ACX_MAX_RESTARTS). While a restart is under way it may already show the
 * new number; ACX_MSG_DEVICE_RESTARTED and acx_device_stats (restarts) follow once it serves. */
acx_status_t acx_device_generation(acx_device_t *dev, uint64_t *generation);
/* watcher receives ACX_MSG_DEVICE_* (payload acx_device_event_t) from now on. The device holds
 * a reference to watcher until close. */
acx_status_t acx_device_watch(acx_device_t *dev, acx_ref_t watcher);
/* The DeviceActor (borrowed; valid while the device is open). */
acx_status_t acx_device_actor(acx_device_t *dev, acx_ref_t *actor);

typedef struct acx_device_stats {
  size_t size;                 /* set to sizeof(acx_device_stats_t) before the call */
  uint64_t generation;
  uint64_t restarts;           /* executor restarts since open */
  int64_t last_recovery_ns;    /* loss detected -> new executor ready, of the last restart */
  uint64_t commands;           /* commands sent */
  uint64_t outstanding;        /* requests waiting for a reply now */
  uint64_t buffers_live;
  uint64_t device_bytes;       /* bytes of live device-pool buffers */
  uint64_t managed_bytes;      /* bytes of live managed buffers */
  uint64_t host_bytes;         /* bytes of live acx_host_alloc regions */
  int available;               /* 0 once unavailable, fatal or closed */
  uint64_t standby_promotions; /* restarts served by promoting the hot standby executor
                                  (ACX_EXECUTOR_STANDBY) rather than spawning one */
  uint64_t standby_spawns;     /* standby executors started since open */
  int standby_ready;           /* 1 while a standby executor waits with its engine made (as
                                  last seen by the device's supervision, at most ~20 ms ago) */
  uint64_t async_failures;     /* fire-and-forget commands that failed in the executor */
} acx_device_stats_t;
/* Counters of a recovery are updated by the DeviceActor as it finishes it, which may trail the
 * first command the new executor answers by a moment. */
acx_status_t acx_device_stats(acx_device_t *dev, acx_device_stats_t *stats);

/* Blocks until the work queued on `stream` (ACX_STREAM_ALL: every stream) has finished. Then
 * returns (and forgets) the first failure of a fire-and-forget command (an async call with done
 * NULL) not reported yet, whichever its stream: the executor's status for it, or
 * ACX_ERR_DEVICE_LOST (ACX_ERR_DEVICE_FATAL inline) when the executor was lost after such
 * commands were sent and before an ACX_STREAM_ALL synchronize covered them, so they may not have
 * run. */
acx_status_t acx_device_synchronize(acx_device_t *dev, uint32_t stream, int64_t timeout_ns);
/* As acx_device_synchronize, as a future; it does not report fire-and-forget failures. done must
 * not be NULL. */
acx_status_t acx_device_synchronize_async(acx_device_t *dev, uint32_t stream, acx_future_t **done);
/* Free and total device memory (host kind: the machine's RAM). */
acx_status_t acx_device_mem_info(acx_device_t *dev, uint64_t *free_bytes, uint64_t *total_bytes,
                                 int64_t timeout_ns);
/* One empty round trip through the executor (latency probe, liveness check). */
acx_status_t acx_device_ping(acx_device_t *dev, int64_t timeout_ns);
/* Launches an empty kernel on `stream` and waits for it (host kind: a round trip). */
acx_status_t acx_device_launch_empty(acx_device_t *dev, uint32_t stream, int64_t timeout_ns);
/* As acx_device_launch_empty without waiting: *done (held for the caller) completes with its
 * status. done NULL: fire-and-forget, the cheapest way to pipeline (no future, no reply: n
 * launches then one acx_device_synchronize, as with CUDA). Its failure is logged, counted in
 * acx_device_stats (async_failures) and returned by the next acx_device_synchronize. */
acx_status_t acx_device_launch_empty_async(acx_device_t *dev, uint32_t stream, acx_future_t **done);

/* Fault injection, for tests and demos. sticky = 0: the executor crashes (cuda: an illegal
 * address; host: abort()); sticky = 1: its context is poisoned and it reports so (cuda: the same
 * illegal address). Returns the fault command's status: ACX_ERR_DEVICE_LOST in process mode (the
 * device restarts; every call the lost incarnation had queued, or takes before the restart, also
 * gets ACX_ERR_DEVICE_LOST, never ACX_ERR_DEVICE_FATAL), ACX_ERR_DEVICE_FATAL inline.
 * ACX_FAULT_INJECT schedules the same from the environment. */
acx_status_t acx_device_inject_fault(acx_device_t *dev, int sticky, int64_t timeout_ns);

/* ---- buffers ---- */

typedef enum acx_mem_kind {
  ACX_MEM_DEVICE = 0,  /* stream-ordered device pool */
  ACX_MEM_MANAGED = 1, /* managed (unified) memory: prefetch/advise apply */
  /* Device memory that the executors of other ranks on the same GPU can map (cuda: cudaMalloc with
   * a CUDA IPC handle; host kind: a memfd), for registration with a coll where ranks share GPUs
   * (docs/collectives.md, "Registered buffers"). Allocated and freed synchronously (cudaMalloc,
   * cudaFree), not from the stream-ordered pool: meant for long-lived buffers. */
  ACX_MEM_SHAREABLE = 2
} acx_mem_kind_t;

typedef struct acx_buffer_info {
  acx_device_t *device; /* borrowed */
  uint64_t id;
  size_t bytes;
  acx_dtype_t dtype;
  acx_mem_kind_t kind;
  uint64_t generation;
} acx_buffer_info_t;

/* Allocates `bytes` (> 0, a multiple of dtype's size) of device memory. The handle holds one
 * reference for the caller. ACX_ERR_DEVICE_OOM, ACX_ERR_BAD_DTYPE. Managed allocations larger
 * than the device's free memory are refused with ACX_ERR_DEVICE_OOM before they are tried. */
acx_status_t acx_buffer_alloc(acx_device_t *dev, size_t bytes, acx_dtype_t dtype, acx_mem_kind_t kind,
                              int64_t timeout_ns, acx_buffer_t **buf);
/* As acx_buffer_alloc; *buf is usable at once (commands queue behind the allocation) and *done
 * completes with the allocation's status. */
acx_status_t acx_buffer_alloc_async(acx_device_t *dev, size_t bytes, acx_dtype_t dtype, acx_mem_kind_t kind,
                                    acx_buffer_t **buf, acx_future_t **done);
/* Frees the device memory now and waits for it; the handle stays until its last release but
 * every later use returns ACX_ERR_INVALID_STATE. A stale buffer frees nothing (its executor is
 * gone) and returns ACX_OK. Does not release the caller's reference. */
acx_status_t acx_buffer_free(acx_buffer_t *buf, int64_t timeout_ns);
acx_status_t acx_buffer_hold(acx_buffer_t *buf);
/* Drops a reference; the last one frees the device memory (without waiting) if it is still
 * allocated in the current generation, then the handle. NULL is ignored. */
void acx_buffer_release(acx_buffer_t *buf);
acx_status_t acx_buffer_query(acx_buffer_t *buf, acx_buffer_info_t *info);
/* ACX_OK while the buffer belongs to the device's current generation, else
 * ACX_ERR_STALE_BUFFER; ACX_ERR_INVALID_STATE when freed or the device closed. */
acx_status_t acx_buffer_check(acx_buffer_t *buf);

/* buf[offset, +bytes) := pattern (its low `width` bytes, little-endian), width 1, 2, 4 or 8; for
 * a typed buffer width must be the element size. bytes may be ACX_WHOLE. A width other than 1, 2,
 * 4 or 8, or an offset or bytes not a multiple of it: ACX_ERR_INVALID_ARG; one of them that is not
 * a typed buffer's element size: ACX_ERR_BAD_DTYPE (test_buffer's test_fill_widths). */
acx_status_t acx_buffer_fill(acx_buffer_t *buf, size_t offset, size_t bytes, uint64_t pattern, unsigned width,
                             uint32_t stream, int64_t timeout_ns);
acx_status_t acx_buffer_fill_async(acx_buffer_t *buf, size_t offset, size_t bytes, uint64_t pattern,
                                   unsigned width, uint32_t stream, acx_future_t **done);

/* From/to any user memory, staged through the device's shared staging region in chunks
 * (ACX_STAGING_BYTES). Synchronous: src/dst may be reused when it returns. One staged transfer at
 * a time per device; timeout_ns bounds the whole call: the wait for another thread's transfer,
 * the staging region's registration at the first use, every chunk. On ACX_ERR_TIMEOUT (or another
 * error) chunks already sent stay queued and may still land in the write's dst, with src's bytes
 * as they were at the call; the staging memory they travel through is not reused until they are
 * answered or the executor is restarted, so no other call's bytes travel with them. A read writes
 * dst only with chunks answered before it returns (on an error, a prefix may have been written),
 * never after. */
acx_status_t acx_buffer_write(acx_buffer_t *dst, size_t dst_offset, const void *src, size_t bytes,
                              uint32_t stream, int64_t timeout_ns);
acx_status_t acx_buffer_read(acx_buffer_t *src, size_t src_offset, void *dst, size_t bytes, uint32_t stream,
                             int64_t timeout_ns);

/* Zero-copy paths through pinned host memory shared with the executor (acx_host_alloc). */
acx_status_t acx_buffer_copy_from_host(acx_buffer_t *dst, size_t dst_offset, acx_host_mem_t *src,
                                       size_t src_offset, size_t bytes, uint32_t stream, int64_t timeout_ns);
acx_status_t acx_buffer_copy_from_host_async(acx_buffer_t *dst, size_t dst_offset, acx_host_mem_t *src,
                                             size_t src_offset, size_t bytes, uint32_t stream,
                                             acx_future_t **done);
acx_status_t acx_buffer_copy_to_host(acx_host_mem_t *dst, size_t dst_offset, acx_buffer_t *src,
                                     size_t src_offset, size_t bytes, uint32_t stream, int64_t timeout_ns);
acx_status_t acx_buffer_copy_to_host_async(acx_host_mem_t *dst, size_t dst_offset, acx_buffer_t *src,
                                           size_t src_offset, size_t bytes, uint32_t stream,
                                           acx_future_t **done);
/* Device to device on one device; bytes ACX_WHOLE: the rest of src from src_offset. Ranges may
 * overlap within one buffer. ACX_ERR_BAD_DTYPE when both are typed and differ. */
acx_status_t acx_buffer_copy(acx_buffer_t *dst, size_t dst_offset, acx_buffer_t *src, size_t src_offset,
                             size_t bytes, uint32_t stream, int64_t timeout_ns);
acx_status_t acx_buffer_copy_async(acx_buffer_t *dst, size_t dst_offset, acx_buffer_t *src, size_t src_offset,
                                   size_t bytes, uint32_t stream, acx_future_t **done);

/* Managed memory (ACX_MEM_MANAGED only, else ACX_ERR_INVALID_ARG). to_host 0: to the device. */
acx_status_t acx_buffer_prefetch(acx_buffer_t *buf, size_t offset, size_t bytes, int to_host, uint32_t stream,
                                 int64_t timeout_ns);
typedef enum acx_advice {
  ACX_ADVISE_READ_MOSTLY = 1,
  ACX_ADVISE_PREFERRED_DEVICE = 2,
  ACX_ADVISE_PREFERRED_HOST = 3,
  ACX_ADVISE_ACCESSED_BY_DEVICE = 4,
  ACX_ADVISE_UNSET_READ_MOSTLY = 5
} acx_advice_t;
acx_status_t acx_buffer_advise(acx_buffer_t *buf, size_t offset, size_t bytes, acx_advice_t advice,
                               int64_t timeout_ns);

/* The raw device pointer, for the user's own CUDA code. Inline transport only (a pointer into
 * another process means nothing here): ACX_ERR_NOT_SUPPORTED in process mode. Valid until the
 * buffer is freed. */
acx_status_t acx_buffer_device_ptr(acx_buffer_t *buf, void **ptr, int64_t timeout_ns);

/* ---- pinned shared host memory ---- */

/* bytes of host memory shared with the executor (memfd, mapped by both, registered with CUDA).
 * It outlives executor restarts: the device registers it again with every new executor. */
acx_status_t acx_host_alloc(acx_device_t *dev, size_t bytes, acx_host_mem_t **mem);
/* Unregisters and unmaps. NULL is ignored. Returns the unregister status (ACX_OK when the
 * device is gone already). */
acx_status_t acx_host_free(acx_host_mem_t *mem);
acx_status_t acx_host_mem_ptr(acx_host_mem_t *mem, void **ptr, size_t *bytes);

/* ---- events: device-side ordering between streams ---- */

/* Records an event after the work queued so far on `stream`. Buffers order themselves across
 * streams (the executor tracks each buffer's last writer); events are for everything else. */
acx_status_t acx_event_record(acx_device_t *dev, uint32_t stream, acx_event_t **event, int64_t timeout_ns);
/* Makes `stream` wait (on the device, not the host) for the event. ACX_ERR_STALE_BUFFER when the
 * event is from an earlier generation. */
acx_status_t acx_stream_wait_event(acx_device_t *dev, uint32_t stream, acx_event_t *event, int64_t timeout_ns);
void acx_event_destroy(acx_event_t *event);

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif
