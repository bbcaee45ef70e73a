/* Control-plane messages: the wire format remote get/put requests, their replies and world-rebuild
 * notices use between ranks over MPI. Fixed header + one typed payload, little-endian, written
 * byte by byte, CRC-32C over both (docs/tokens.md). Codec only: collectives/ carries them. */
#ifndef ACXI_CTRL_MSG_H
#define ACXI_CTRL_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "acx/status.h"
#include "acx/token.h"
#include "runtime/proto/limits.h"

#define ACXI_CTRL_MAGIC 0x43584341u /* "ACXC" as bytes on the wire */
#define ACXI_CTRL_VERSION 4u /* 2: CHAN_OPEN and the CHANNEL flag; 3: IPC_OPEN, the IPC flag and the
                                 request's staging number; 4: REBUILD_ABORT */
#define ACXI_CTRL_HEADER_BYTES 40u
#define ACXI_CTRL_NCCL_ID_BYTES 128u
#define ACXI_CTRL_IPC_HANDLE_BYTES ACXI_IPC_HANDLE_BYTES /* a shareable buffer's handle (96) */
/* The largest message (a CHAN_OPEN): receivers size their buffers with it. */
#define ACXI_CTRL_MAX_BYTES (ACXI_CTRL_HEADER_BYTES + 8u + ACXI_CTRL_NCCL_ID_BYTES)

typedef enum acxi_ctrl_type {
  ACXI_CTRL_GET_REQ = 1,        /* requester -> owner: read [offset, +bytes) of token's buffer */
  ACXI_CTRL_PUT_REQ = 2,        /* requester -> owner: write [offset, +bytes) */
  ACXI_CTRL_GET_REPLY = 3,      /* owner -> requester: status of the GET with `tag` */
  ACXI_CTRL_PUT_REPLY = 4,      /* owner -> requester: status of the PUT with `tag` */
  ACXI_CTRL_REBUILD_NOTICE = 5, /* any rank -> all: rank's device generation moved, or a
                                   collective failed (cause); the world must be rebuilt */
  ACXI_CTRL_REBUILD_READY = 6,  /* a rank has rebuilt and is ready at `epoch` */
  ACXI_CTRL_CHAN_OPEN = 7,      /* requester -> owner: a new two-rank NCCL channel for the bytes of
                                   this requester's later CHANNEL requests (replaces the last one) */
  ACXI_CTRL_IPC_OPEN = 8,       /* requester -> owner (same node): the handle of a shareable staging
                                   buffer the owner maps, for this requester's later IPC requests
                                   naming its number (replaces the owner's import of that number) */
  ACXI_CTRL_REBUILD_ABORT = 9,  /* any rank -> all: this rank's part of attempt `attempt` of the
                                   rebuild to `epoch` failed (cause): the others stop waiting in it */
  ACXI_CTRL_TYPE_END
} acxi_ctrl_type_t;

/* Header flags. Unknown bits are rejected, so a flag can be given a meaning later only together
 * with a version bump. */
#define ACXI_CTRL_FLAG_RESEND 0x1u /* repeats an earlier message with the same sequence number
                                      (the sender's deadline passed): receivers deduplicate */
#define ACXI_CTRL_FLAG_CHANNEL 0x2u /* GET/PUT request only: the bytes move on the channel of the
                                      sender's last CHAN_OPEN (NCCL, GPU to GPU), not through MPI */
#define ACXI_CTRL_FLAG_IPC 0x4u     /* GET/PUT request only, never with CHANNEL: the bytes move on the
                                      device through the requester's staging buffer `staging` (its
                                      IPC_OPEN), not through MPI */
#define ACXI_CTRL_FLAGS_KNOWN (ACXI_CTRL_FLAG_RESEND | ACXI_CTRL_FLAG_CHANNEL | ACXI_CTRL_FLAG_IPC)

typedef struct acxi_ctrl_access {
  acx_token_t token;
  uint64_t offset, bytes;
  uint64_t tag;     /* the requester's id of this request, echoed by the reply */
  uint64_t staging; /* IPC requests: the number of the requester's staging buffer (never 0); else 0 */
} acxi_ctrl_access_t;

typedef struct acxi_ctrl_reply {
  acx_status_t status; /* a known acx_status_t (ACX_OK included) */
  uint64_t tag;
} acxi_ctrl_reply_t;

typedef struct acxi_ctrl_rebuild_notice {
  int32_t rank;            /* the rank whose device restarted, or that saw the failure */
  acx_status_t cause;      /* a known error status (not ACX_OK) */
  uint64_t old_generation; /* new_generation >= old_generation (equal: no restart, e.g. NCCL) */
  uint64_t new_generation;
} acxi_ctrl_rebuild_notice_t;

typedef struct acxi_ctrl_rebuild_ready {
  uint64_t epoch;
} acxi_ctrl_rebuild_ready_t;

typedef struct acxi_ctrl_rebuild_abort {
  uint64_t epoch;     /* the epoch the rebuild goes to (>= 1) */
  uint32_t attempt;   /* which attempt of it, from 1 */
  acx_status_t cause; /* why this rank's part failed: a known error status (not ACX_OK) */
} acxi_ctrl_rebuild_abort_t;

typedef struct acxi_ctrl_chan_open {
  uint64_t channel; /* the requester's number for it (never 0), for the logs of both sides */
  unsigned char nccl_id[ACXI_CTRL_NCCL_ID_BYTES]; /* ncclUniqueId made by the requester */
} acxi_ctrl_chan_open_t;

typedef struct acxi_ctrl_ipc_open {
  uint64_t staging; /* the requester's number for the staging buffer (never 0) */
  uint64_t bytes;   /* its size (never 0): IPC requests use [0, bytes) of it */
  unsigned char handle[ACXI_CTRL_IPC_HANDLE_BYTES]; /* acxi_buffer_ipc_export's bytes */
} acxi_ctrl_ipc_open_t;

typedef struct acxi_ctrl_msg {
  acxi_ctrl_type_t type;
  uint32_t flags;
  uint64_t seq;    /* per sender, increasing */
  int32_t sender;  /* world rank, >= 0 */
  uint64_t epoch;  /* the sender's world epoch when it sent */
  union {
    acxi_ctrl_access_t access;         /* GET_REQ, PUT_REQ */
    acxi_ctrl_reply_t reply;           /* GET_REPLY, PUT_REPLY */
    acxi_ctrl_rebuild_notice_t notice; /* REBUILD_NOTICE */
    acxi_ctrl_rebuild_ready_t ready;   /* REBUILD_READY */
    acxi_ctrl_rebuild_abort_t abort;   /* REBUILD_ABORT */
    acxi_ctrl_chan_open_t chan;        /* CHAN_OPEN */
    acxi_ctrl_ipc_open_t ipc;          /* IPC_OPEN */
  } u;
} acxi_ctrl_msg_t;

/* Why a message failed to decode (or encode). */
typedef enum acxi_ctrl_defect {
  ACXI_CTRL_OK = 0,
  ACXI_CTRL_TRUNCATED,       /* shorter than the header, or than header + payload length */
  ACXI_CTRL_OVERSIZED,       /* bytes after the payload */
  ACXI_CTRL_BAD_MAGIC,
  ACXI_CTRL_BAD_VERSION,
  ACXI_CTRL_BAD_CHECKSUM,
  ACXI_CTRL_BAD_TYPE,
  ACXI_CTRL_BAD_FLAGS,
  ACXI_CTRL_BAD_LENGTH,      /* payload length is not the one of the type */
  ACXI_CTRL_BAD_SENDER,      /* negative sender rank */
  ACXI_CTRL_BAD_TOKEN,       /* the request's token is malformed */
  ACXI_CTRL_BAD_FIELD,       /* a payload field outside its domain (the log says which) */
  ACXI_CTRL_DEFECT_COUNT
} acxi_ctrl_defect_t;

const char *acxi_ctrl_defect_str(acxi_ctrl_defect_t d);
const char *acxi_ctrl_type_str(acxi_ctrl_type_t t);
/* Encoded size of a message of type t; 0 for an unknown type. */
size_t acxi_ctrl_wire_size(acxi_ctrl_type_t t);

/* Encodes m into buf (cap >= acxi_ctrl_wire_size(m->type)); *len := the size. The fields are
 * checked as decode checks them. ACX_ERR_NULL_ARG; ACX_ERR_OUT_OF_RANGE (cap); ACX_ERR_INVALID_ARG
 * (a field outside its domain, logged); ACX_ERR_BAD_TOKEN (the request's token). Any thread. */
acx_status_t acxi_ctrl_encode(const acxi_ctrl_msg_t *m, void *buf, size_t cap, size_t *len);

/* Parses exactly len bytes into *m; *why (may be NULL) gets the reason of a rejection, which is
 * also logged. Statuses:
 *   ACX_ERR_INVALID_ARG   malformed: truncated, oversized, magic, checksum, unknown type or flags,
 *                         payload length, sender, a payload field
 *   ACX_ERR_NOT_SUPPORTED another protocol version (the peer runs a different acx)
 *   ACX_ERR_BAD_TOKEN     a GET/PUT request whose token is malformed; the header and the
 *                         request's offset, bytes and tag are filled in, so the receiver can
 *                         still answer the requester with this status
 *   ACX_ERR_NULL_ARG
 * Any thread. */
acx_status_t acxi_ctrl_decode(const void *buf, size_t len, acxi_ctrl_msg_t *m, acxi_ctrl_defect_t *why);

#endif
