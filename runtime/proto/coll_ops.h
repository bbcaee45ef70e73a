/* The collectives' executor protocol: op codes ACXC_OP_FIRST..ACXC_OP_LAST (runtime/proto/limits.h)
 * of the command record (runtime/proto/cmd.h) and the host region every coll shares with its
 * executor (NCCL unique id, group lists). Plain data, no nccl.h: the rank side (coll.c) writes it,
 * the NCCL extension (nccl_exec.c) reads it. */
#ifndef ACXC_COLL_OPS_H
#define ACXC_COLL_OPS_H

#include <stdatomic.h>
#include <stdint.h>

#include "runtime/proto/cmd.h"
#include "runtime/proto/limits.h"

/* Every command: arg[0] = communicator id (per rank process, never 0). Collectives: stream, dtype
 * (acx_dtype_t), buf[0] = send, buf[1] = recv (ids, 0 = none), bytes = count in elements,
 * arg[1] = acx_redop_t, arg[2] = root or peer, arg[3] = the coll's sequence number (logs). */
typedef enum acxc_op {
  ACXC_OP_INIT = 0x200,      /* arg[1] = nranks, arg[2] = rank, arg[3] = host region id (the id is
                                in it), arg[4] = init deadline (ms), off[0] = ACXC_INIT_* options;
                                completes when ready */
  ACXC_OP_DESTROY = 0x201,   /* finalize then destroy; arg[4] = deadline (ms), then abort */
  ACXC_OP_ABORT = 0x202,     /* ncclCommAbort now; arg[1] = the cause (acx_status_t) that later
                                commands of this communicator fail with */
  ACXC_OP_CHECK = 0x203,     /* replies value[0] = the communicator's status (acx_status_t),
                                value[1] = NCCL's code: the watchdog's probe for async errors */
  ACXC_OP_FENCE = 0x204,     /* completes after the work queued so far on `stream`, with the
                                communicator's status (surfaces fire-and-forget failures) */
  ACXC_OP_UNIQUE_ID = 0x205, /* arg[3] = host region id: a new ncclUniqueId is written into its
                                nccl_id (NCCL's bootstrap root then runs in this executor); no
                                communicator (arg[0] unused) */
  ACXC_OP_ALLREDUCE = 0x210, /* off[0], off[1]: byte offsets into send and recv (the flat path
                                sends 0; the hierarchical ordered path names a staging slot) */
  ACXC_OP_BROADCAST = 0x211,
  ACXC_OP_REDUCE = 0x212,
  ACXC_OP_ALLGATHER = 0x213,
  ACXC_OP_REDUCE_SCATTER = 0x214,
  ACXC_OP_SEND = 0x215,      /* buf[0] = the buffer sent, off[0] = byte offset into it;
                                private-stream communicators: arg[4] = deadline (ms, 0: ACX_COLL_TIMEOUT) */
  ACXC_OP_RECV = 0x216,      /* buf[1] = the buffer received into, off[1] = byte offset into it;
                                arg[4] as for SEND */
  ACXC_OP_ALLTOALL = 0x217,  /* grouped send/recv, count elements per peer */
  ACXC_OP_GROUP = 0x220      /* arg[3] = host region, off[0] = byte offset of the entries there,
                                bytes = number of entries, arg[4] = group sequence number: the
                                executor stores it in the region's `consumed` once it has read
                                the entries (the rank may then reuse the slot) */
} acxc_op_t;
_Static_assert(ACXC_OP_INIT >= ACXC_OP_FIRST && ACXC_OP_GROUP <= ACXC_OP_LAST,
               "collective ops stay inside their range (runtime/proto/limits.h)");

/* INIT options (off[0]). PRIVATE_STREAM: the communicator carries point-to-point operations only,
 * on a CUDA stream of its own (ordered after the command's engine stream), with completions of its
 * own: the two-rank channels of remote access, which must never wait behind each other. */
#define ACXC_INIT_PRIVATE_STREAM 0x1u
/* BLOCKING: a blocking NCCL communicator issued by direct calls, without graphs (the network path,
 * where NCCL's captured graphs hold host nodes; nccl_exec.c, "blocking communicators"). */
#define ACXC_INIT_BLOCKING 0x2u

/* One member of a group, in the host region. */
typedef struct acxc_group_entry {
  uint32_t op;    /* ACXC_OP_ALLREDUCE .. ACXC_OP_ALLTOALL */
  uint32_t dtype; /* acx_dtype_t */
  uint32_t redop; /* acx_redop_t */
  int32_t peer;   /* root or peer */
  uint64_t send, recv; /* buffer ids */
  uint64_t count;
} acxc_group_entry_t;
_Static_assert(sizeof(acxc_group_entry_t) == 40, "acxc_group_entry_t is a fixed 40-byte record");

/* ACXC_GROUP_MAX members per group, ACXC_GROUP_SLOTS groups in flight: runtime/proto/limits.h. */
#define ACXC_REGION_MAGIC 0x61637863636f6c6cull /* "acxccoll" */

/* The coll's host region (acx_host_alloc: both processes map it). */
typedef struct acxc_region {
  uint64_t magic;
  _Atomic uint64_t consumed;   /* last group sequence number the executor has read */
  unsigned char nccl_id[128];  /* ncclUniqueId of the INIT command */
  uint64_t reserved[6];
  acxc_group_entry_t slots[ACXC_GROUP_SLOTS][ACXC_GROUP_MAX];
} acxc_region_t;

#endif
