/* Control-message codec: header + typed payload <-> bytes, explicit little-endian, CRC-32C over
 * the whole message, every field checked on the way in. Pure functions (no transport, no state),
 * fuzzed by tests/fuzz/fuzz_ctrl.c. */
#include "runtime/proto/ctrl_msg.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "runtime/base/log.h"
#include "runtime/proto/token_internal.h"

/* Header layout. */
enum {
  H_MAGIC = 0,   /* u32 */
  H_VERSION = 4, /* u16 */
  H_TYPE = 6,    /* u16 */
  H_FLAGS = 8,   /* u32 */
  H_SENDER = 12, /* u32, int32 >= 0 */
  H_SEQ = 16,    /* u64 */
  H_EPOCH = 24,  /* u64 */
  H_PLEN = 32,   /* u32 */
  H_CRC = 36,    /* u32: CRC-32C of [0, 36) then the payload */
  H_END = 40
};
_Static_assert(H_END == ACXI_CTRL_HEADER_BYTES, "header layout");

/* Payload layouts. */
enum {
  A_TOKEN = 0,
  A_OFFSET = ACX_TOKEN_BYTES,
  A_BYTES = A_OFFSET + 8,
  A_TAG = A_BYTES + 8,
  A_STAGING = A_TAG + 8,
  A_END = A_STAGING + 8
};
enum { R_STATUS = 0, R_RESERVED = 4, R_TAG = 8, R_END = 16 };
enum { N_RANK = 0, N_CAUSE = 4, N_OLD = 8, N_NEW = 16, N_END = 24 };
enum { Y_EPOCH = 0, Y_END = 8 };
enum { B_EPOCH = 0, B_ATTEMPT = 8, B_CAUSE = 12, B_END = 16 };
enum { C_CHANNEL = 0, C_ID = 8, C_END = C_ID + ACXI_CTRL_NCCL_ID_BYTES };
enum { I_STAGING = 0, I_BYTES = 8, I_HANDLE = 16, I_END = I_HANDLE + ACXI_CTRL_IPC_HANDLE_BYTES };
_Static_assert(ACXI_CTRL_HEADER_BYTES + C_END == ACXI_CTRL_MAX_BYTES, "largest message");
_Static_assert((int)A_END <= (int)C_END && (int)R_END <= (int)C_END && (int)N_END <= (int)C_END && (int)Y_END <= (int)C_END && (int)B_END <= (int)C_END && (int)I_END <= (int)C_END,
               "largest payload");

static const char *const defect_names[ACXI_CTRL_DEFECT_COUNT] = {
    [ACXI_CTRL_OK] = "well-formed",
    [ACXI_CTRL_TRUNCATED] = "truncated",
    [ACXI_CTRL_OVERSIZED] = "oversized",
    [ACXI_CTRL_BAD_MAGIC] = "wrong magic",
    [ACXI_CTRL_BAD_VERSION] = "unsupported version",
    [ACXI_CTRL_BAD_CHECKSUM] = "checksum mismatch",
    [ACXI_CTRL_BAD_TYPE] = "unknown type",
    [ACXI_CTRL_BAD_FLAGS] = "unknown flags",
    [ACXI_CTRL_BAD_LENGTH] = "payload length does not match the type",
    [ACXI_CTRL_BAD_SENDER] = "negative sender rank",
    [ACXI_CTRL_BAD_TOKEN] = "malformed token in the request",
    [ACXI_CTRL_BAD_FIELD] = "payload field out of its domain",
};

const char *acxi_ctrl_defect_str(acxi_ctrl_defect_t d) {
  return (unsigned)d < ACXI_CTRL_DEFECT_COUNT ? defect_names[d] : "unknown defect";
}

const char *acxi_ctrl_type_str(acxi_ctrl_type_t t) {
  switch (t) {
  case ACXI_CTRL_GET_REQ: return "GET_REQ";
  case ACXI_CTRL_PUT_REQ: return "PUT_REQ";
  case ACXI_CTRL_GET_REPLY: return "GET_REPLY";
  case ACXI_CTRL_PUT_REPLY: return "PUT_REPLY";
  case ACXI_CTRL_REBUILD_NOTICE: return "REBUILD_NOTICE";
  case ACXI_CTRL_REBUILD_READY: return "REBUILD_READY";
  case ACXI_CTRL_CHAN_OPEN: return "CHAN_OPEN";
  case ACXI_CTRL_IPC_OPEN: return "IPC_OPEN";
  case ACXI_CTRL_REBUILD_ABORT: return "REBUILD_ABORT";
  case ACXI_CTRL_TYPE_END: break;
  }
  return "unknown";
}

static size_t payload_size(unsigned t) {
  switch (t) {
  case ACXI_CTRL_GET_REQ:
  case ACXI_CTRL_PUT_REQ: return A_END;
  case ACXI_CTRL_GET_REPLY:
  case ACXI_CTRL_PUT_REPLY: return R_END;
  case ACXI_CTRL_REBUILD_NOTICE: return N_END;
  case ACXI_CTRL_REBUILD_READY: return Y_END;
  case ACXI_CTRL_CHAN_OPEN: return C_END;
  case ACXI_CTRL_IPC_OPEN: return I_END;
  case ACXI_CTRL_REBUILD_ABORT: return B_END;
  }
  return 0;
}

size_t acxi_ctrl_wire_size(acxi_ctrl_type_t t) {
  size_t p = payload_size(t);
  return p ? ACXI_CTRL_HEADER_BYTES + p : 0;
}

static int known_status(uint32_t s) {
  return s <= INT32_MAX && strcmp(acx_status_name((acx_status_t)s), "ACX_ERR_<unknown>") != 0;
}

/* The payload fields' domains, shared by encode and decode; NULL when all hold, else the field. */
static const char *check_payload(const acxi_ctrl_msg_t *m) {
  switch (m->type) {
  case ACXI_CTRL_GET_REPLY:
  case ACXI_CTRL_PUT_REPLY:
    return known_status((uint32_t)m->u.reply.status) ? NULL : "reply status";
  case ACXI_CTRL_REBUILD_NOTICE:
    if (m->u.notice.rank < 0) return "notice rank";
    if (m->u.notice.cause == ACX_OK || !known_status((uint32_t)m->u.notice.cause)) return "notice cause";
    if (m->u.notice.new_generation < m->u.notice.old_generation) return "notice generations (new < old)";
    return NULL;
  case ACXI_CTRL_REBUILD_ABORT:
    if (m->u.abort.epoch == 0) return "abort epoch 0";
    if (m->u.abort.attempt == 0) return "abort attempt 0";
    if (m->u.abort.cause == ACX_OK || !known_status((uint32_t)m->u.abort.cause)) return "abort cause";
    return NULL;
  case ACXI_CTRL_CHAN_OPEN:
    return m->u.chan.channel ? NULL : "channel number 0";
  case ACXI_CTRL_IPC_OPEN:
    if (m->u.ipc.staging == 0) return "staging number 0";
    return m->u.ipc.bytes ? NULL : "staging size 0";
  case ACXI_CTRL_GET_REQ:
  case ACXI_CTRL_PUT_REQ:
    /* The token is checked by its codec, offset and bytes by the owner. */
    if (m->flags & ACXI_CTRL_FLAG_IPC) return m->u.access.staging ? NULL : "staging number 0 on an IPC request";
    return m->u.access.staging == 0 ? NULL : "staging number on a request without the IPC flag";
  default:
    return NULL;
  }
}

/* ---- encode ---- */

acx_status_t acxi_ctrl_encode(const acxi_ctrl_msg_t *m, void *buf, size_t cap, size_t *len) {
  ACX_CHECK_NULL(m);
  ACX_CHECK_NULL(buf);
  size_t plen = payload_size(m->type);
  ACX_CHECK_ARG(plen != 0, "acxi_ctrl_encode: argument 'm->type'=%u is not a message type", (unsigned)m->type);
  ACX_CHECK_ARG((m->flags & ~ACXI_CTRL_FLAGS_KNOWN) == 0, "acxi_ctrl_encode: argument 'm->flags'=0x%x has unknown bits",
                m->flags);
  ACX_CHECK_ARG(m->sender >= 0, "acxi_ctrl_encode: argument 'm->sender'=%d is negative", m->sender);
  ACX_CHECK_ARG(!(m->flags & ACXI_CTRL_FLAG_CHANNEL) || m->type == ACXI_CTRL_GET_REQ || m->type == ACXI_CTRL_PUT_REQ,
                "acxi_ctrl_encode: argument 'm->flags' has CHANNEL on a %s message (requests only)",
                acxi_ctrl_type_str(m->type));
  ACX_CHECK_ARG(!(m->flags & ACXI_CTRL_FLAG_IPC) || m->type == ACXI_CTRL_GET_REQ || m->type == ACXI_CTRL_PUT_REQ,
                "acxi_ctrl_encode: argument 'm->flags' has IPC on a %s message (requests only)",
                acxi_ctrl_type_str(m->type));
  ACX_CHECK_ARG((m->flags & (ACXI_CTRL_FLAG_IPC | ACXI_CTRL_FLAG_CHANNEL)) !=
                    (ACXI_CTRL_FLAG_IPC | ACXI_CTRL_FLAG_CHANNEL),
                "acxi_ctrl_encode: argument 'm->flags' has both CHANNEL and IPC (one path per request)");
  const char *bad = check_payload(m);
  ACX_CHECK_ARG(bad == NULL, "acxi_ctrl_encode: %s message: %s out of its domain", acxi_ctrl_type_str(m->type), bad);
  if (cap < ACXI_CTRL_HEADER_BYTES + plen) {
    ACX_WARN(TOKEN, "acxi_ctrl_encode: argument 'cap'=%zu is below the %zu bytes of a %s message", cap,
             ACXI_CTRL_HEADER_BYTES + plen, acxi_ctrl_type_str(m->type));
    return ACX_ERR_OUT_OF_RANGE;
  }
  uint8_t *h = buf, *p = h + H_END;
  switch (m->type) {
  case ACXI_CTRL_GET_REQ:
  case ACXI_CTRL_PUT_REQ:
    ACXCHECK(acx_token_encode(&m->u.access.token, p + A_TOKEN, ACX_TOKEN_BYTES, NULL));
    acxi_put_le64(p + A_OFFSET, m->u.access.offset);
    acxi_put_le64(p + A_BYTES, m->u.access.bytes);
    acxi_put_le64(p + A_TAG, m->u.access.tag);
    acxi_put_le64(p + A_STAGING, m->u.access.staging);
    break;
  case ACXI_CTRL_GET_REPLY:
  case ACXI_CTRL_PUT_REPLY:
    acxi_put_le32(p + R_STATUS, (uint32_t)m->u.reply.status);
    acxi_put_le32(p + R_RESERVED, 0);
    acxi_put_le64(p + R_TAG, m->u.reply.tag);
    break;
  case ACXI_CTRL_REBUILD_NOTICE:
    acxi_put_le32(p + N_RANK, (uint32_t)m->u.notice.rank);
    acxi_put_le32(p + N_CAUSE, (uint32_t)m->u.notice.cause);
    acxi_put_le64(p + N_OLD, m->u.notice.old_generation);
    acxi_put_le64(p + N_NEW, m->u.notice.new_generation);
    break;
  case ACXI_CTRL_REBUILD_READY:
    acxi_put_le64(p + Y_EPOCH, m->u.ready.epoch);
    break;
  case ACXI_CTRL_REBUILD_ABORT:
    acxi_put_le64(p + B_EPOCH, m->u.abort.epoch);
    acxi_put_le32(p + B_ATTEMPT, m->u.abort.attempt);
    acxi_put_le32(p + B_CAUSE, (uint32_t)m->u.abort.cause);
    break;
  case ACXI_CTRL_CHAN_OPEN:
    acxi_put_le64(p + C_CHANNEL, m->u.chan.channel);
    memcpy(p + C_ID, m->u.chan.nccl_id, ACXI_CTRL_NCCL_ID_BYTES);
    break;
  case ACXI_CTRL_IPC_OPEN:
    acxi_put_le64(p + I_STAGING, m->u.ipc.staging);
    acxi_put_le64(p + I_BYTES, m->u.ipc.bytes);
    memcpy(p + I_HANDLE, m->u.ipc.handle, ACXI_CTRL_IPC_HANDLE_BYTES);
    break;
  case ACXI_CTRL_TYPE_END:
    break;
  }
  acxi_put_le32(h + H_MAGIC, ACXI_CTRL_MAGIC);
  acxi_put_le16(h + H_VERSION, ACXI_CTRL_VERSION);
  acxi_put_le16(h + H_TYPE, (uint16_t)m->type);
  acxi_put_le32(h + H_FLAGS, m->flags);
  acxi_put_le32(h + H_SENDER, (uint32_t)m->sender);
  acxi_put_le64(h + H_SEQ, m->seq);
  acxi_put_le64(h + H_EPOCH, m->epoch);
  acxi_put_le32(h + H_PLEN, (uint32_t)plen);
  acxi_put_le32(h + H_CRC, acxi_crc32c(acxi_crc32c(0, h, H_CRC), p, plen));
  if (len) *len = ACXI_CTRL_HEADER_BYTES + plen;
  return ACX_OK;
}

/* ---- decode ---- */

static acx_status_t reject(acx_status_t st, acxi_ctrl_defect_t d, acxi_ctrl_defect_t *why, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static acx_status_t reject(acx_status_t st, acxi_ctrl_defect_t d, acxi_ctrl_defect_t *why, const char *fmt, ...) {
  if (why) *why = d;
  char detail[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  ACX_WARN(TOKEN, "acxi_ctrl_decode: message rejected: %s (%s)", acxi_ctrl_defect_str(d), detail);
  return st;
}

acx_status_t acxi_ctrl_decode(const void *buf, size_t len, acxi_ctrl_msg_t *m, acxi_ctrl_defect_t *why) {
  if (why) *why = ACXI_CTRL_OK;
  ACX_CHECK_NULL(buf);
  ACX_CHECK_NULL(m);
  const uint8_t *h = buf, *p = h + H_END;
  if (len < H_END)
    return reject(ACX_ERR_INVALID_ARG, ACXI_CTRL_TRUNCATED, why, "%zu bytes, the header alone has %d", len, H_END);
  uint32_t magic = acxi_get_le32(h + H_MAGIC);
  if (magic != ACXI_CTRL_MAGIC)
    return reject(ACX_ERR_INVALID_ARG, ACXI_CTRL_BAD_MAGIC, why, "0x%08" PRIx32 ", expected 0x%08x", magic,
                  ACXI_CTRL_MAGIC);
  unsigned version = acxi_get_le16(h + H_VERSION);
  if (version != ACXI_CTRL_VERSION)
    return reject(ACX_ERR_NOT_SUPPORTED, ACXI_CTRL_BAD_VERSION, why, "version %u, this build speaks %u", version,
                  ACXI_CTRL_VERSION);
  size_t plen = acxi_get_le32(h + H_PLEN);
  if (len < H_END + plen)
    return reject(ACX_ERR_INVALID_ARG, ACXI_CTRL_TRUNCATED, why, "%zu bytes, the header announces %zu", len, H_END + plen);
  if (len > H_END + plen)
    return reject(ACX_ERR_INVALID_ARG, ACXI_CTRL_OVERSIZED, why, "%zu bytes, the header announces %zu", len, H_END + plen);
  uint32_t crc = acxi_get_le32(h + H_CRC), want = acxi_crc32c(acxi_crc32c(0, h, H_CRC), p, plen);
  if (crc != want)
    return reject(ACX_ERR_INVALID_ARG, ACXI_CTRL_BAD_CHECKSUM, why,
                  "crc32c 0x%08" PRIx32 " in the header, 0x%08" PRIx32 " computed", crc, want);
  unsigned type = acxi_get_le16(h + H_TYPE);
  if (payload_size(type) == 0) return reject(ACX_ERR_INVALID_ARG, ACXI_CTRL_BAD_TYPE, why, "type %u", type);
  if (plen != payload_size(type))
    return reject(ACX_ERR_INVALID_ARG, ACXI_CTRL_BAD_LENGTH, why, "%s with a %zu-byte payload, expected %zu",
                  acxi_ctrl_type_str((acxi_ctrl_type_t)type), plen, payload_size(type));
  uint32_t flags = acxi_get_le32(h + H_FLAGS);
  if ((flags & ~ACXI_CTRL_FLAGS_KNOWN) != 0)
    return reject(ACX_ERR_INVALID_ARG, ACXI_CTRL_BAD_FLAGS, why, "flags 0x%" PRIx32, flags);
  if ((flags & ACXI_CTRL_FLAG_CHANNEL) && type != ACXI_CTRL_GET_REQ && type != ACXI_CTRL_PUT_REQ)
    return reject(ACX_ERR_INVALID_ARG, ACXI_CTRL_BAD_FLAGS, why, "CHANNEL flag on a %s",
                  acxi_ctrl_type_str((acxi_ctrl_type_t)type));
  if ((flags & ACXI_CTRL_FLAG_IPC) && type != ACXI_CTRL_GET_REQ && type != ACXI_CTRL_PUT_REQ)
    return reject(ACX_ERR_INVALID_ARG, ACXI_CTRL_BAD_FLAGS, why, "IPC flag on a %s",
                  acxi_ctrl_type_str((acxi_ctrl_type_t)type));
  if ((flags & ACXI_CTRL_FLAG_IPC) && (flags & ACXI_CTRL_FLAG_CHANNEL))
    return reject(ACX_ERR_INVALID_ARG, ACXI_CTRL_BAD_FLAGS, why, "both CHANNEL and IPC on a %s",
                  acxi_ctrl_type_str((acxi_ctrl_type_t)type));
  uint32_t sender = acxi_get_le32(h + H_SENDER);
  if (sender > INT32_MAX)
    return reject(ACX_ERR_INVALID_ARG, ACXI_CTRL_BAD_SENDER, why, "sender %" PRId32, (int32_t)sender);

  acxi_ctrl_msg_t out = {.type = (acxi_ctrl_type_t)type,
                         .flags = flags,
                         .seq = acxi_get_le64(h + H_SEQ),
                         .sender = (int32_t)sender,
                         .epoch = acxi_get_le64(h + H_EPOCH)};
  switch (out.type) {
  case ACXI_CTRL_GET_REQ:
  case ACXI_CTRL_PUT_REQ: {
    out.u.access.offset = acxi_get_le64(p + A_OFFSET);
    out.u.access.bytes = acxi_get_le64(p + A_BYTES);
    out.u.access.tag = acxi_get_le64(p + A_TAG);
    out.u.access.staging = acxi_get_le64(p + A_STAGING);
    acxi_token_defect_t td;
    if (acxi_token_decode_why(p + A_TOKEN, ACX_TOKEN_BYTES, &out.u.access.token, &td) != ACX_OK) {
      memset(&out.u.access.token, 0, sizeof out.u.access.token);
      *m = out; /* the requester can still be told, by sender and tag */
      return reject(ACX_ERR_BAD_TOKEN, ACXI_CTRL_BAD_TOKEN, why, "%s from rank %" PRIu32 ", tag %" PRIu64 ": %s",
                    acxi_ctrl_type_str(out.type), sender, out.u.access.tag, acxi_token_defect_str(td));
    }
    break;
  }
  case ACXI_CTRL_GET_REPLY:
  case ACXI_CTRL_PUT_REPLY:
    if (acxi_get_le32(p + R_RESERVED) != 0)
      return reject(ACX_ERR_INVALID_ARG, ACXI_CTRL_BAD_FIELD, why, "reply reserved bytes not zero");
    out.u.reply.status = (acx_status_t)acxi_get_le32(p + R_STATUS);
    out.u.reply.tag = acxi_get_le64(p + R_TAG);
    if (!known_status(acxi_get_le32(p + R_STATUS)))
      return reject(ACX_ERR_INVALID_ARG, ACXI_CTRL_BAD_FIELD, why, "reply status %" PRIu32 " is not an acx status",
                    acxi_get_le32(p + R_STATUS));
    break;
  case ACXI_CTRL_REBUILD_NOTICE: {
    uint32_t rank = acxi_get_le32(p + N_RANK), cause = acxi_get_le32(p + N_CAUSE);
    if (rank > INT32_MAX)
      return reject(ACX_ERR_INVALID_ARG, ACXI_CTRL_BAD_FIELD, why, "notice rank %" PRId32, (int32_t)rank);
    if (!known_status(cause))
      return reject(ACX_ERR_INVALID_ARG, ACXI_CTRL_BAD_FIELD, why, "notice cause %" PRIu32 " is not an acx status", cause);
    out.u.notice.rank = (int32_t)rank;
    out.u.notice.cause = (acx_status_t)cause;
    out.u.notice.old_generation = acxi_get_le64(p + N_OLD);
    out.u.notice.new_generation = acxi_get_le64(p + N_NEW);
    break;
  }
  case ACXI_CTRL_REBUILD_READY:
    out.u.ready.epoch = acxi_get_le64(p + Y_EPOCH);
    break;
  case ACXI_CTRL_REBUILD_ABORT: {
    uint32_t cause = acxi_get_le32(p + B_CAUSE);
    if (!known_status(cause))
      return reject(ACX_ERR_INVALID_ARG, ACXI_CTRL_BAD_FIELD, why, "abort cause %" PRIu32 " is not an acx status", cause);
    out.u.abort.epoch = acxi_get_le64(p + B_EPOCH);
    out.u.abort.attempt = acxi_get_le32(p + B_ATTEMPT);
    out.u.abort.cause = (acx_status_t)cause;
    break;
  }
  case ACXI_CTRL_CHAN_OPEN:
    out.u.chan.channel = acxi_get_le64(p + C_CHANNEL);
    if (out.u.chan.channel == 0)
      return reject(ACX_ERR_INVALID_ARG, ACXI_CTRL_BAD_FIELD, why, "channel number 0");
    memcpy(out.u.chan.nccl_id, p + C_ID, ACXI_CTRL_NCCL_ID_BYTES);
    break;
  case ACXI_CTRL_IPC_OPEN:
    out.u.ipc.staging = acxi_get_le64(p + I_STAGING);
    out.u.ipc.bytes = acxi_get_le64(p + I_BYTES);
    memcpy(out.u.ipc.handle, p + I_HANDLE, ACXI_CTRL_IPC_HANDLE_BYTES);
    break;
  case ACXI_CTRL_TYPE_END:
    break;
  }
  const char *bad = check_payload(&out);
  if (bad)
    return reject(ACX_ERR_INVALID_ARG, ACXI_CTRL_BAD_FIELD, why, "%s: %s", acxi_ctrl_type_str(out.type), bad);
  *m = out;
  return ACX_OK;
}
