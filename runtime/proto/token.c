/* The token codec: acx_token_t <-> the fixed 100-byte little-endian record of docs/tokens.md,
 * written and read byte by byte, and CRC-32C. Pure functions: no registry, no device, so the
 * fuzzer links it alone (with status.c, log.c, param.c). */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "runtime/base/log.h"
#include "runtime/proto/token_internal.h"

/* Record layout, version 1 (offsets in bytes). */
enum {
  OFF_MAGIC = 0,      /* u32 */
  OFF_VERSION = 4,    /* u16 */
  OFF_DEVID_TYPE = 6, /* u8 */
  OFF_DTYPE = 7,      /* u8 */
  OFF_RANK = 8,       /* u32, int32 >= 0 */
  OFF_NODE = 12,      /* u32, int32 >= 0 */
  OFF_RIGHTS = 16,    /* u32 */
  OFF_RESERVED = 20,  /* u32, zero */
  OFF_DEVID = 24,     /* 32 bytes */
  OFF_BUFFER_ID = 56, /* u64 */
  OFF_GENERATION = 64,
  OFF_EPOCH = 72,
  OFF_BYTES = 80,
  OFF_KEY = 88,
  OFF_CRC = 96, /* u32 over [0, 96) */
  TOKEN_END = 100
};
_Static_assert(TOKEN_END == ACX_TOKEN_BYTES, "token layout and ACX_TOKEN_BYTES disagree");
_Static_assert(OFF_DEVID + ACX_TOKEN_PCI_ID_BYTES == OFF_BUFFER_ID, "device id field width");

/* ---- CRC-32C ---- */

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u))); /* reflected 0x1edc6f41 */
    crc_table[i] = c;
  }
}

uint32_t acxi_crc32c(uint32_t crc, const void *data, size_t len) {
  pthread_once(&crc_once, crc_init);
  const uint8_t *p = data;
  crc = ~crc;
  for (size_t i = 0; i < len; i++) crc = crc_table[(crc ^ p[i]) & 0xffu] ^ (crc >> 8);
  return ~crc;
}

/* ---- field checks ---- */

static const char *const defect_names[ACXI_TOKEN_DEFECT_COUNT] = {
    [ACXI_TOKEN_OK] = "well-formed",
    [ACXI_TOKEN_TRUNCATED] = "truncated",
    [ACXI_TOKEN_OVERSIZED] = "oversized",
    [ACXI_TOKEN_BAD_MAGIC] = "wrong magic",
    [ACXI_TOKEN_BAD_VERSION] = "unsupported version",
    [ACXI_TOKEN_BAD_CHECKSUM] = "checksum mismatch",
    [ACXI_TOKEN_BAD_DEVID] = "malformed device id",
    [ACXI_TOKEN_BAD_DTYPE] = "unknown dtype",
    [ACXI_TOKEN_BAD_RIGHTS] = "rights empty or with unknown bits",
    [ACXI_TOKEN_BAD_RESERVED] = "reserved bytes not zero",
    [ACXI_TOKEN_BAD_RANK] = "negative owner rank or node",
    [ACXI_TOKEN_ZERO_KEY] = "zero key",
    [ACXI_TOKEN_ZERO_FIELD] = "zero buffer id, generation or size",
};

const char *acxi_token_defect_str(acxi_token_defect_t d) {
  return (unsigned)d < ACXI_TOKEN_DEFECT_COUNT ? defect_names[d] : "unknown defect";
}

static int pci_char(unsigned char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == ':' || c == '.';
}

static int all_zero(const uint8_t *p, size_t n) {
  uint8_t acc = 0;
  for (size_t i = 0; i < n; i++) acc |= p[i];
  return acc == 0;
}

/* The 32 device-id bytes as they go on the wire; -1 when the id does not fit its type. */
static int devid_to_wire(const acx_token_t *t, uint8_t out[ACX_TOKEN_PCI_ID_BYTES]) {
  memset(out, 0, ACX_TOKEN_PCI_ID_BYTES);
  switch (t->devid_type) {
  case ACX_TOKEN_DEVID_NONE:
    return 0;
  case ACX_TOKEN_DEVID_PCI: {
    size_t n = strnlen(t->device.pci_bus_id, ACX_TOKEN_PCI_ID_BYTES);
    if (n == 0 || n == ACX_TOKEN_PCI_ID_BYTES) return -1; /* empty, or no room for the NUL */
    for (size_t i = 0; i < n; i++)
      if (!pci_char((unsigned char)t->device.pci_bus_id[i])) return -1;
    memcpy(out, t->device.pci_bus_id, n); /* bytes past the NUL stay zero: nothing leaks */
    return 0;
  }
  case ACX_TOKEN_DEVID_UUID:
    if (all_zero(t->device.uuid, sizeof t->device.uuid)) return -1;
    memcpy(out, t->device.uuid, sizeof t->device.uuid);
    return 0;
  }
  return -1;
}

/* The inverse: checks the wire bytes against the type (NONE: all zero; PCI: id characters, a
 * NUL, zeros after it; UUID: 16 bytes not all zero, then zeros). */
static int devid_from_wire(unsigned type, const uint8_t in[ACX_TOKEN_PCI_ID_BYTES], acx_token_t *t) {
  memset(&t->device, 0, sizeof t->device);
  switch (type) {
  case ACX_TOKEN_DEVID_NONE:
    if (!all_zero(in, ACX_TOKEN_PCI_ID_BYTES)) return -1;
    break;
  case ACX_TOKEN_DEVID_PCI: {
    size_t n = 0;
    while (n < ACX_TOKEN_PCI_ID_BYTES && in[n] != 0) {
      if (!pci_char(in[n])) return -1;
      n++;
    }
    if (n == 0 || n == ACX_TOKEN_PCI_ID_BYTES || !all_zero(in + n, ACX_TOKEN_PCI_ID_BYTES - n)) return -1;
    memcpy(t->device.pci_bus_id, in, n);
    break;
  }
  case ACX_TOKEN_DEVID_UUID:
    if (all_zero(in, 16) || !all_zero(in + 16, ACX_TOKEN_PCI_ID_BYTES - 16)) return -1;
    memcpy(t->device.uuid, in, 16);
    break;
  default:
    return -1;
  }
  t->devid_type = (acx_token_devid_t)type;
  return 0;
}

acxi_token_defect_t acxi_token_check_fields(const acx_token_t *t) {
  if (t->version != ACX_TOKEN_VERSION) return ACXI_TOKEN_BAD_VERSION;
  uint8_t scratch[ACX_TOKEN_PCI_ID_BYTES];
  if (devid_to_wire(t, scratch) != 0) return ACXI_TOKEN_BAD_DEVID;
  if ((unsigned)t->dtype >= ACX_DTYPE_COUNT) return ACXI_TOKEN_BAD_DTYPE;
  if (t->rights == 0 || (t->rights & ~ACX_TOKEN_RIGHTS_ALL) != 0) return ACXI_TOKEN_BAD_RIGHTS;
  if (t->owner_rank < 0 || t->node < 0) return ACXI_TOKEN_BAD_RANK;
  if (t->key == 0) return ACXI_TOKEN_ZERO_KEY;
  if (t->buffer_id == 0 || t->generation == 0 || t->bytes == 0) return ACXI_TOKEN_ZERO_FIELD;
  return ACXI_TOKEN_OK;
}

/* ---- encode / decode ---- */

acx_status_t acx_token_encode(const acx_token_t *token, void *buf, size_t cap, size_t *len) {
  ACX_CHECK_NULL(token);
  ACX_CHECK_NULL(buf);
  if (cap < ACX_TOKEN_BYTES) {
    ACX_WARN(TOKEN, "acx_token_encode: argument 'cap'=%zu is below ACX_TOKEN_BYTES (%d)", cap, ACX_TOKEN_BYTES);
    return ACX_ERR_OUT_OF_RANGE;
  }
  acxi_token_defect_t d = acxi_token_check_fields(token);
  if (d != ACXI_TOKEN_OK) {
    ACX_WARN(TOKEN, "acx_token_encode: argument 'token' is malformed: %s", acxi_token_defect_str(d));
    return ACX_ERR_BAD_TOKEN;
  }
  uint8_t *p = buf;
  acxi_put_le32(p + OFF_MAGIC, ACX_TOKEN_MAGIC);
  acxi_put_le16(p + OFF_VERSION, ACX_TOKEN_VERSION);
  p[OFF_DEVID_TYPE] = (uint8_t)token->devid_type;
  p[OFF_DTYPE] = (uint8_t)token->dtype;
  acxi_put_le32(p + OFF_RANK, (uint32_t)token->owner_rank);
  acxi_put_le32(p + OFF_NODE, (uint32_t)token->node);
  acxi_put_le32(p + OFF_RIGHTS, token->rights);
  acxi_put_le32(p + OFF_RESERVED, 0);
  devid_to_wire(token, p + OFF_DEVID);
  acxi_put_le64(p + OFF_BUFFER_ID, token->buffer_id);
  acxi_put_le64(p + OFF_GENERATION, token->generation);
  acxi_put_le64(p + OFF_EPOCH, token->epoch);
  acxi_put_le64(p + OFF_BYTES, token->bytes);
  acxi_put_le64(p + OFF_KEY, token->key);
  acxi_put_le32(p + OFF_CRC, acxi_crc32c(0, p, OFF_CRC));
  if (len) *len = ACX_TOKEN_BYTES;
  return ACX_OK;
}

static acx_status_t reject(acxi_token_defect_t d, acxi_token_defect_t *why, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static acx_status_t reject(acxi_token_defect_t d, acxi_token_defect_t *why, const char *fmt, ...) {
  if (why) *why = d;
  char detail[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  ACX_WARN(TOKEN, "acx_token_decode: token rejected: %s (%s)", acxi_token_defect_str(d), detail);
  return ACX_ERR_BAD_TOKEN;
}

acx_status_t acxi_token_decode_why(const void *buf, size_t len, acx_token_t *token, acxi_token_defect_t *why) {
  if (why) *why = ACXI_TOKEN_OK;
  /* Named as the user's call: the control plane's decoder never passes NULL. */
  ACX_CHECK_NULL_IN("acx_token_decode", buf, "buf");
  ACX_CHECK_NULL_IN("acx_token_decode", token, "token");
  const uint8_t *p = buf;
  if (len < ACX_TOKEN_BYTES) return reject(ACXI_TOKEN_TRUNCATED, why, "%zu bytes, a token has %d", len, ACX_TOKEN_BYTES);
  if (len > ACX_TOKEN_BYTES) return reject(ACXI_TOKEN_OVERSIZED, why, "%zu bytes, a token has %d", len, ACX_TOKEN_BYTES);
  uint32_t magic = acxi_get_le32(p + OFF_MAGIC);
  if (magic != ACX_TOKEN_MAGIC) return reject(ACXI_TOKEN_BAD_MAGIC, why, "0x%08" PRIx32 ", expected 0x%08x", magic, ACX_TOKEN_MAGIC);
  uint16_t version = acxi_get_le16(p + OFF_VERSION);
  if (version != ACX_TOKEN_VERSION) return reject(ACXI_TOKEN_BAD_VERSION, why, "version %u, this build reads %d", (unsigned)version, ACX_TOKEN_VERSION);
  /* The checksum before any field: a corrupted record is reported as corrupted, not as whatever
   * field the flipped bit happened to land in. */
  uint32_t crc = acxi_get_le32(p + OFF_CRC), want = acxi_crc32c(0, p, OFF_CRC);
  if (crc != want) return reject(ACXI_TOKEN_BAD_CHECKSUM, why, "crc32c 0x%08" PRIx32 " in the record, 0x%08" PRIx32 " computed", crc, want);

  acx_token_t t = {0};
  t.version = version;
  if (devid_from_wire(p[OFF_DEVID_TYPE], p + OFF_DEVID, &t) != 0)
    return reject(ACXI_TOKEN_BAD_DEVID, why, "device-id type %u with bytes that do not fit it", p[OFF_DEVID_TYPE]);
  if (p[OFF_DTYPE] >= ACX_DTYPE_COUNT) return reject(ACXI_TOKEN_BAD_DTYPE, why, "dtype %u, known are 0..%d", p[OFF_DTYPE], ACX_DTYPE_COUNT - 1);
  t.dtype = (acx_dtype_t)p[OFF_DTYPE];
  uint32_t rank = acxi_get_le32(p + OFF_RANK), node = acxi_get_le32(p + OFF_NODE);
  if (rank > INT32_MAX) return reject(ACXI_TOKEN_BAD_RANK, why, "owner rank %" PRId32, (int32_t)rank);
  if (node > INT32_MAX) return reject(ACXI_TOKEN_BAD_RANK, why, "node %" PRId32, (int32_t)node);
  t.owner_rank = (int32_t)rank;
  t.node = (int32_t)node;
  t.rights = acxi_get_le32(p + OFF_RIGHTS);
  if (t.rights == 0 || (t.rights & ~ACX_TOKEN_RIGHTS_ALL) != 0)
    return reject(ACXI_TOKEN_BAD_RIGHTS, why, "rights 0x%" PRIx32, t.rights);
  uint32_t reserved = acxi_get_le32(p + OFF_RESERVED);
  if (reserved != 0) return reject(ACXI_TOKEN_BAD_RESERVED, why, "0x%08" PRIx32, reserved);
  t.buffer_id = acxi_get_le64(p + OFF_BUFFER_ID);
  t.generation = acxi_get_le64(p + OFF_GENERATION);
  t.epoch = acxi_get_le64(p + OFF_EPOCH);
  t.bytes = acxi_get_le64(p + OFF_BYTES);
  t.key = acxi_get_le64(p + OFF_KEY);
  if (t.key == 0) return reject(ACXI_TOKEN_ZERO_KEY, why, "an export never has key 0");
  if (t.buffer_id == 0) return reject(ACXI_TOKEN_ZERO_FIELD, why, "buffer id 0");
  if (t.generation == 0) return reject(ACXI_TOKEN_ZERO_FIELD, why, "generation 0");
  if (t.bytes == 0) return reject(ACXI_TOKEN_ZERO_FIELD, why, "size 0");
  t.checksum = crc;
  *token = t;
  return ACX_OK;
}

acx_status_t acx_token_decode(const void *buf, size_t len, acx_token_t *token) {
  return acxi_token_decode_why(buf, len, token, NULL);
}
