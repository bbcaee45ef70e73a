/* acx tokens: how a buffer is named from another rank. Only an explicitly exported buffer has a
 * token; the token travels as a fixed-size, versioned, little-endian record (ACX_TOKEN_BYTES,
 * docs/tokens.md gives the layout) and holds no pointer, only names the owner checks on every use. */
#ifndef ACX_TOKEN_H
#define ACX_TOKEN_H

/* Exported from libacx, which hides everything else (cmake/libacx.map). */
#pragma GCC visibility push(default)

#include <stddef.h>
#include <stdint.h>

#include "acx/device.h"
#include "acx/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Size of an encoded token (format version ACX_TOKEN_VERSION). */
#define ACX_TOKEN_BYTES 100
#define ACX_TOKEN_VERSION 1
#define ACX_TOKEN_MAGIC 0x54584341u /* "ACXT" as bytes on the wire */

/* Access rights. */
#define ACX_TOKEN_READ 0x1u  /* remote get */
#define ACX_TOKEN_WRITE 0x2u /* remote put */
#define ACX_TOKEN_RIGHTS_ALL (ACX_TOKEN_READ | ACX_TOKEN_WRITE)

/* How the token names the owner's device. */
typedef enum acx_token_devid {
  ACX_TOKEN_DEVID_NONE = 0, /* host device kind, or a GPU whose identity is not known rank-side */
  ACX_TOKEN_DEVID_PCI = 1,  /* device.pci_bus_id: "0000:18:00.0", NUL-terminated */
  ACX_TOKEN_DEVID_UUID = 2  /* device.uuid: the GPU's 16-byte UUID */
} acx_token_devid_t;

#define ACX_TOKEN_PCI_ID_BYTES 32

/* A decoded token. Plain data: copy it freely; send it only encoded (acx_token_encode). */
typedef struct acx_token {
  uint32_t version;       /* ACX_TOKEN_VERSION */
  int32_t owner_rank;     /* rank of the world that exported the buffer */
  int32_t node;           /* that rank's node index (acx_world_node) */
  acx_token_devid_t devid_type;
  union {
    char pci_bus_id[ACX_TOKEN_PCI_ID_BYTES]; /* [0-9a-fA-F:.] characters, NUL-terminated */
    uint8_t uuid[16];
  } device;
  uint64_t buffer_id;     /* the buffer's id on its device (never 0) */
  uint64_t generation;    /* the device generation the buffer belongs to (>= 1) */
  uint64_t epoch;         /* the world epoch of the export */
  uint64_t bytes;         /* size of the buffer (> 0) */
  acx_dtype_t dtype;
  uint32_t rights;        /* ACX_TOKEN_READ | ACX_TOKEN_WRITE, not 0 */
  uint64_t key;           /* random per export (never 0): the owner's proof the token is its own */
  uint32_t checksum;      /* CRC-32C of the encoded bytes before it; set by encode and decode */
} acx_token_t;

/* Encodes *token into buf (cap >= ACX_TOKEN_BYTES); *len (may be NULL) := ACX_TOKEN_BYTES. The
 * fields are checked as acx_token_decode checks them, so a token that encodes also decodes;
 * token->checksum is ignored (computed). ACX_ERR_NULL_ARG; ACX_ERR_OUT_OF_RANGE (cap too
 * small); ACX_ERR_BAD_TOKEN (a field is outside its domain: the log line names it). Any thread. */
acx_status_t acx_token_encode(const acx_token_t *token, void *buf, size_t cap, size_t *len);

/* Decodes exactly len bytes. Rejects anything malformed with ACX_ERR_BAD_TOKEN and one log line
 * giving the reason: a size other than ACX_TOKEN_BYTES (truncated or oversized), wrong magic,
 * another version, a checksum mismatch, an unknown device-id type or a malformed device id,
 * an unknown dtype, no rights or unknown rights bits, non-zero reserved bytes, a negative rank
 * or node, and a zero key, buffer id, generation or size. ACX_ERR_NULL_ARG. A well-formed token
 * is not yet a valid one: only its owner can say (generation, epoch, key, rights, bounds).
 * Any thread. */
acx_status_t acx_token_decode(const void *buf, size_t len, acx_token_t *token);

/* Exports buf for remote access with `rights` (ACX_TOKEN_READ and/or ACX_TOKEN_WRITE): records
 * the export under a fresh random key (getrandom) and describes it in *token, stamped with this
 * rank, node and world epoch of the live world (without one: rank 0, node 0, and epoch 0 before
 * the first world, one above the last world's after it; docs/tokens.md). The export holds a
 * reference to buf until acx_buffer_unexport. A buffer may be exported several times (e.g.
 * read-only for most peers, read-write for one); each export has its own key.
 * ACX_ERR_NULL_ARG; ACX_ERR_INVALID_ARG (rights 0 or unknown bits); ACX_ERR_STALE_BUFFER (buf is
 * from an earlier generation); ACX_ERR_INVALID_STATE (buf freed or its device closed);
 * ACX_ERR_SYSTEM (getrandom failed); ACX_ERR_NO_MEMORY. Any thread. */
acx_status_t acx_buffer_export(acx_buffer_t *buf, unsigned rights, acx_token_t *token);

/* Revokes every export of buf: their tokens answer ACX_ERR_STALE_TOKEN from now on, and the
 * references the exports held are released. Revocation holds for requests admitted before the
 * call too: one whose bytes have not started to move is refused with ACX_ERR_STALE_TOKEN when
 * they would (e.g. a put whose data arrives later), and the call waits for remote accesses of buf
 * under way (a device read or write of a request, a transfer on an NCCL channel), so that once it
 * returns no remote request touches buf through these exports. That wait is bounded by the
 * accesses' own deadlines (ACX_REMOTE_TIMEOUT) plus 1 s. ACX_ERR_NULL_ARG; ACX_ERR_NOT_FOUND when
 * buf has no export; ACX_ERR_TIMEOUT when an access was still under way past that bound (the
 * exports are revoked all the same; its bytes may still land). Any thread; not one serving a
 * remote request (the remote-access threads). */
acx_status_t acx_buffer_unexport(acx_buffer_t *buf);

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif
