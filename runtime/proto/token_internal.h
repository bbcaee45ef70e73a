/* Token internals shared by the codec (token.c), the owner-side export registry
 * (token_registry.c), the control-message codec (ctrl_msg.c) and, later, collectives/ (remote
 * access, world rebuild): little-endian byte helpers, CRC-32C, decode reasons, identity, resolve. */
#ifndef ACXI_TOKEN_INTERNAL_H
#define ACXI_TOKEN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "acx/token.h"

/* ---- explicit little-endian encoding (never memcpy of a struct) ---- */

static inline void acxi_put_le16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static inline void acxi_put_le32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void acxi_put_le64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t acxi_get_le16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t acxi_get_le32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}
static inline uint64_t acxi_get_le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

/* CRC-32C (Castagnoli, reflected, init and final xor 0xffffffff): crc = acxi_crc32c(0, p, n);
 * chain with crc = acxi_crc32c(crc, q, m). Check value of "123456789": 0xe3069283. */
uint32_t acxi_crc32c(uint32_t crc, const void *data, size_t len);

/* ---- codec ---- */

/* Why a token failed to decode (or encode); ACXI_TOKEN_OK when it did not. Tests and the
 * control-message parser assert on the exact reason. */
typedef enum acxi_token_defect {
  ACXI_TOKEN_OK = 0,
  ACXI_TOKEN_TRUNCATED,     /* fewer than ACX_TOKEN_BYTES */
  ACXI_TOKEN_OVERSIZED,     /* more than ACX_TOKEN_BYTES */
  ACXI_TOKEN_BAD_MAGIC,
  ACXI_TOKEN_BAD_VERSION,
  ACXI_TOKEN_BAD_CHECKSUM,
  ACXI_TOKEN_BAD_DEVID,     /* unknown device-id type, or its bytes do not fit the type */
  ACXI_TOKEN_BAD_DTYPE,
  ACXI_TOKEN_BAD_RIGHTS,    /* 0 or unknown bits */
  ACXI_TOKEN_BAD_RESERVED,  /* reserved bytes not zero */
  ACXI_TOKEN_BAD_RANK,      /* owner rank or node negative */
  ACXI_TOKEN_ZERO_KEY,
  ACXI_TOKEN_ZERO_FIELD,    /* buffer id, generation or size is 0 */
  ACXI_TOKEN_DEFECT_COUNT
} acxi_token_defect_t;

const char *acxi_token_defect_str(acxi_token_defect_t d);

/* acx_token_decode with the reason (why may be NULL). */
acx_status_t acxi_token_decode_why(const void *buf, size_t len, acx_token_t *token, acxi_token_defect_t *why);
/* Checks the fields of a token as decode does after the checksum (encode uses it too). */
acxi_token_defect_t acxi_token_check_fields(const acx_token_t *t);

/* ---- owner side ---- */

/* The identity stamped into exports and checked by resolve; rank 0, node 0, epoch 0 until the
 * first world. It belongs to the live world: only collectives/world.c sets it (at a successful
 * acx_world_init, at every rebuild, and at acx_world_finalize: rank 0, node 0, an epoch above
 * the world's last), and the world never moves the epoch back, across worlds too, so a stale
 * token stays stale. Tests may set anything. Any thread. */
void acxi_token_set_identity(int32_t rank, int32_t node, uint64_t epoch);
void acxi_token_identity(int32_t *rank, int32_t *node, uint64_t *epoch);

/* The owner's check of a remote request: `access` (ACX_TOKEN_READ for a get, ACX_TOKEN_WRITE for
 * a put) of [offset, offset + bytes) of the buffer t names. On ACX_OK *buf holds a reference for
 * the caller (acx_buffer_release). Statuses, each logged with its reason:
 *   ACX_ERR_BAD_TOKEN    the token is not this rank's (owner rank or node differ): misrouted
 *   ACX_ERR_STALE_TOKEN  older world epoch; export revoked (or never made here); the buffer's
 *                        device moved to a newer generation; the buffer was freed
 *   ACX_ERR_DENIED       wrong key for a live export of that buffer; fields that differ from the
 *                        export the key names (forged); access not within the token's rights
 *   ACX_ERR_OUT_OF_RANGE offset + bytes beyond the buffer (or overflowing)
 *   ACX_ERR_INVALID_ARG  access 0 or unknown bits; offset/bytes not multiples of the element size
 *   ACX_ERR_NULL_ARG
 * Any thread. */
acx_status_t acxi_token_resolve(const acx_token_t *t, unsigned access, uint64_t offset, uint64_t bytes,
                                acx_buffer_t **buf);

/* Admissions: revocation that holds while the bytes move. A request that passed the owner's
 * check (acxi_token_admit: acxi_token_resolve, plus a record of the export and epoch it passed
 * under) may touch the buffer much later: a put's bytes arrive up to ACX_REMOTE_TIMEOUT after its
 * request. Each access to the buffer (a device read or write, a transfer on a channel) is
 * bracketed by access_begin/access_end. access_begin checks again: the export the key named is
 * still live for the same buffer, and the world is still at the token's epoch; else
 * ACX_ERR_STALE_TOKEN (logged) and nothing may move. acx_buffer_unexport waits for the accesses
 * of that buffer under way (no new one begins once it took the exports out); a rebuild, once the
 * identity carries the new epoch, waits with acxi_token_drain_epoch. Every wait ends by the
 * latest deadline_ns the accesses gave plus 1 s. Any thread; an admission is used by one thread
 * at a time and freed with acxi_token_adm_free (which ends an access under way). */
typedef struct acxi_token_adm acxi_token_adm_t;
acx_status_t acxi_token_admit(const acx_token_t *t, unsigned access, uint64_t offset, uint64_t bytes,
                              acx_buffer_t **buf, acxi_token_adm_t **adm);
acx_status_t acxi_token_access_begin(acxi_token_adm_t *adm, int64_t deadline_ns);
void acxi_token_access_end(acxi_token_adm_t *adm);
void acxi_token_adm_free(acxi_token_adm_t *adm);
/* Waits until no access admitted at an epoch older than `epoch` is under way, or deadline_ns
 * (absolute, CLOCK_MONOTONIC; also bounded by the accesses' own deadlines). ACX_OK,
 * ACX_ERR_TIMEOUT (logged). Not a thread that has an access under way. */
acx_status_t acxi_token_drain_epoch(uint64_t epoch, int64_t deadline_ns);

/* Live exports (tests, acx-info). */
size_t acxi_token_export_count(void);

#endif
