/* The executor protocol: plain-data commands and completions. A command holds no pointer into
 * the rank's memory; host data crosses through shared regions named by id. Both transports
 * (process: shared-memory rings; inline: the same rings in one process) carry these records.
 * Layout is fixed (static asserts below): the rank and the executor are built together. */
#ifndef ACXI_CMD_H
#define ACXI_CMD_H

#include <stdint.h>

#include "runtime/proto/limits.h"

#define ACXI_PROTOCOL_VERSION 3u /* 2: standby executors (acxi_ctrl_t.promote); 3: progress_ns */

typedef enum acxi_op {
  ACXI_OP_NOP = 1,          /* round trip through the executor, no device work */
  ACXI_OP_KERNEL_EMPTY = 2, /* launch an empty kernel on `stream` (host kind: nothing) */
  ACXI_OP_ALLOC = 3,        /* buf[0] := new buffer of `bytes`; arg[0] = acxi_mem_kind */
  ACXI_OP_FREE = 4,         /* free buf[0] (stream-ordered) */
  ACXI_OP_FILL = 5,         /* buf[0][off[0], +bytes) := pattern arg[0] of width arg[1] (1,2,4,8) */
  ACXI_OP_COPY_H2D = 6,     /* host region arg[0] at off[1] -> buf[0] at off[0], `bytes` */
  ACXI_OP_COPY_D2H = 7,     /* buf[1] at off[1] -> host region arg[0] at off[0], `bytes` */
  ACXI_OP_COPY_D2D = 8,     /* buf[1] at off[1] -> buf[0] at off[0], `bytes` */
  ACXI_OP_EVENT_RECORD = 9, /* record event arg[0] (executor-side id) on `stream` */
  ACXI_OP_STREAM_WAIT = 10, /* make `stream` wait for event arg[0] (device-side, not the host) */
  ACXI_OP_SYNC = 11,        /* complete when all work queued before it on `stream` finished;
                               stream ACXI_STREAM_ALL: every stream */
  ACXI_OP_MEM_INFO = 12,    /* reply value[0] = free bytes, value[1] = total bytes */
  ACXI_OP_PREFETCH = 13,    /* managed buf[0] range off[0]+bytes to arg[0]: 0 device, 1 host */
  ACXI_OP_ADVISE = 14,      /* managed buf[0] range: arg[0] = acxi_advice */
  ACXI_OP_HOST_REGISTER = 15,   /* host region arg[0] of `bytes`: map (process: the fd arrives
                                   first on the socket; inline: arg[1] = its address). Served by
                                   the loop, which calls engine->host_region_add */
  ACXI_OP_HOST_UNREGISTER = 16, /* host region arg[0] (loop: engine->host_region_remove, unmap) */
  ACXI_OP_FAULT = 17,       /* fault injection: cuda = illegal-address kernel; host = abort() */
  ACXI_OP_SHUTDOWN = 18,    /* finish queued work, reply, exit the executor loop */
  ACXI_OP_BUFFER_INFO = 19, /* reply value[0] = bytes of buf[0], value[1] = device pointer
                               (inline mode only: meaningless in another process) */
  /* Shareable memory (issue 16: ranks sharing one GPU reduce through each other's buffers). */
  ACXI_OP_IPC_EXPORT = 20, /* buf[0] (an ACXI_MEM_SHAREABLE allocation) -> its acxi_ipc_handle_t,
                              ACXI_IPC_HANDLE_BYTES into host region arg[0] at off[0] */
  ACXI_OP_IPC_IMPORT = 21, /* the acxi_ipc_handle_t in host region arg[0] at off[0] -> new buffer
                              buf[0], the exporter's memory; reply value[0] = its bytes. FREE of
                              it unmaps (never frees the exporter's memory) */
  ACXI_OP_REDUCE = 22,     /* buf[0][off[0], +bytes) := buf[0] (op arg[0], an acx_redop_t: SUM PROD
                              MAX MIN) buf[1][off[1], +bytes), elementwise in `dtype` */
  ACXI_OP_DIV = 23,        /* buf[0][off[0], +bytes) /= arg[0] (a uint64_t > 0), elementwise in
                              `dtype`: truncating for integers, IEEE for floats */
  /* Flags in host memory that several executors share (issue 16: the ranks of one GPU order a
   * collective's steps on their streams, with no rank in the loop). A flag is a 32-bit word at
   * byte offset off[0] (a multiple of 4) of host region arg[0]; values compare in wrap-around
   * order, so a sequence number may run on past 2^32. */
  ACXI_OP_WAIT_VALUE = 24,  /* later work on `stream` starts only once the flag is >= arg[1]
                               ((int32_t)(flag - arg[1]) >= 0). cuda: device-side
                               (cuStreamWaitValue32), the executor goes on at once; host kind: the
                               executor polls, for at most arg[2] ns (0: ACX_EXEC_TIMEOUT_MS),
                               then fails ACX_ERR_COLL_TIMEOUT */
  ACXI_OP_WRITE_VALUE = 25, /* once the work queued before it on `stream` is done and its memory
                               writes are visible, the flag := arg[1] (cuStreamWriteValue32) */
  /* ACXI_OP_EXT_BASE and up (runtime/proto/limits.h): ops handled by registered extensions
   * (collectives, libraries) */
} acxi_op_t;
_Static_assert(ACXI_OP_NOP >= ACXI_OP_CORE_FIRST && ACXI_OP_WRITE_VALUE <= ACXI_OP_CORE_LAST,
               "core ops stay inside their range (runtime/proto/limits.h)");

typedef enum acxi_mem_kind {
  ACXI_MEM_DEVICE = 0,  /* stream-ordered pool (cudaMallocAsync); host kind: malloc */
  ACXI_MEM_MANAGED = 1, /* cudaMallocManaged; host kind: malloc */
  ACXI_MEM_SHAREABLE = 2, /* another executor on the device may map it (ACXI_OP_IPC_EXPORT):
                             cudaMalloc (IPC handles need it); host kind: a memfd, MAP_SHARED */
} acxi_mem_kind_t;

/* What ACXI_OP_IPC_EXPORT writes and ACXI_OP_IPC_IMPORT reads: a common head, then the engine's
 * own body. The rank reads only the head (magic, bytes); the importing engine checks the kind. */
#define ACXI_IPC_MAGIC 0x6163786970633031ull /* "acxipc01" */
#define ACXI_IPC_KIND_HOST 1u                /* body: acxi_ipc_host_t */
#define ACXI_IPC_KIND_CUDA 2u                /* body: cudaIpcMemHandle_t (64 bytes) */
typedef struct acxi_ipc_wire {
  uint64_t magic;  /* ACXI_IPC_MAGIC */
  uint32_t kind;   /* ACXI_IPC_KIND_* */
  int32_t pid;     /* the exporting executor's process */
  uint64_t bytes;  /* the allocation's size */
  uint64_t addr;   /* its address in the exporter (same process: an import maps to it) */
  unsigned char body[64];
} acxi_ipc_wire_t;
/* The host kind's body: the exporter's memfd, and its identity (a freed export's fd number may
 * name another file by the time an importer opens it). */
typedef struct acxi_ipc_host {
  int32_t fd;
  uint32_t pad;
  uint64_t dev;
  uint64_t ino;
} acxi_ipc_host_t;
_Static_assert(sizeof(acxi_ipc_wire_t) == ACXI_IPC_HANDLE_BYTES, "a handle fills its ACXI_IPC_HANDLE_BYTES");
_Static_assert(sizeof(acxi_ipc_host_t) <= sizeof(((acxi_ipc_wire_t *)0)->body), "the host body fits");

typedef enum acxi_advice {
  ACXI_ADVISE_READ_MOSTLY = 1,
  ACXI_ADVISE_PREFERRED_DEVICE = 2,
  ACXI_ADVISE_PREFERRED_HOST = 3,
  ACXI_ADVISE_ACCESSED_BY_DEVICE = 4,
  ACXI_ADVISE_UNSET_READ_MOSTLY = 5,
} acxi_advice_t;

/* arg[0] of ACXI_OP_FAULT. The cuda engine always does the real thing (an illegal-address
 * kernel, which poisons the context); the host kind simulates: CRASH = abort() in process mode,
 * STICKY = the engine marks itself poisoned. In inline mode the host kind always poisons (an
 * abort would take the rank with it). */
#define ACXI_FAULT_CRASH 0
#define ACXI_FAULT_STICKY 1
/* Tests only (no public API sends it): the executor loop's thread itself blocks for arg[1] ns (at
 * most ACXI_FAULT_BUSY_MAX_NS), then replies ACX_OK, as if stuck in a long library call or a long
 * blocking NCCL collective. Served by the loop for every engine; exercises the liveness rule. */
#define ACXI_FAULT_BUSY 2
#define ACXI_FAULT_BUSY_MAX_NS 60000000000ull

#define ACXI_STREAM_ALL 0xffffffffu
#define ACXI_CMD_FLAG_NO_REPLY 0x1u /* fire-and-forget: the executor posts no completion unless it fails */

/* One command: 128 bytes, 8-byte aligned fields only. */
typedef struct acxi_cmd {
  uint32_t op;         /* acxi_op_t */
  uint32_t flags;      /* ACXI_CMD_FLAG_* */
  uint64_t req_id;     /* echoed in the completion; unique per device incarnation */
  uint64_t generation; /* device generation the rank saw when it sent this */
  uint32_t stream;     /* executor stream index */
  uint32_t dtype;      /* acx_dtype_t where it matters */
  uint64_t buf[3];     /* buffer ids: 0 = none */
  uint64_t off[3];     /* byte offsets into buf[i] (or into a host region, per op) */
  uint64_t bytes;
  uint64_t arg[5];     /* op-specific scalars (5: the record is 128 bytes) */
} acxi_cmd_t;

/* One completion: 32 bytes. */
typedef struct acxi_cpl {
  uint64_t req_id;
  int32_t status;   /* acx_status_t */
  int32_t lib_code; /* a library's or CUDA's own error code, 0 when none */
  uint64_t value[2];
} acxi_cpl_t;

_Static_assert(sizeof(acxi_cmd_t) == 128, "acxi_cmd_t is a fixed 128-byte record");
_Static_assert(sizeof(acxi_cpl_t) == 32, "acxi_cpl_t is a fixed 32-byte record");
#endif
