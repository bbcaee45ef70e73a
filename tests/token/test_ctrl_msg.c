/* The control-message codec (runtime/proto/ctrl_msg.c): round trip of every type, every single-bit
 * flip rejected, every truncation and an extra byte rejected, unknown type/version/flags, payload
 * length, field domains, a malformed token inside a request (answerable by tag), encode checks. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acx/config.h"
#include "acx_test.h"
#include "runtime/proto/ctrl_msg.h"
#include "runtime/proto/token_internal.h"

static acx_token_t token_sample(void) {
  acx_token_t t = {.version = ACX_TOKEN_VERSION, .owner_rank = 1, .node = 0, .buffer_id = 9, .generation = 2,
                   .epoch = 4, .bytes = 1 << 20, .dtype = ACX_DTYPE_F64, .rights = ACX_TOKEN_RIGHTS_ALL,
                   .key = 0xfeedface12345678ull};
  t.devid_type = ACX_TOKEN_DEVID_PCI;
  snprintf(t.device.pci_bus_id, sizeof t.device.pci_bus_id, "0000:00:07.0");
  return t;
}

#define N_SAMPLES 13
static acxi_ctrl_msg_t sample(int i) {
  acxi_ctrl_msg_t m = {.seq = 1000 + (uint64_t)i, .sender = i, .epoch = 4};
  switch (i) {
  case 0:
    m.type = ACXI_CTRL_GET_REQ;
    m.u.access = (acxi_ctrl_access_t){.token = token_sample(), .offset = 64, .bytes = 4096, .tag = 77};
    break;
  case 1:
    m.type = ACXI_CTRL_PUT_REQ;
    m.flags = ACXI_CTRL_FLAG_RESEND;
    m.u.access = (acxi_ctrl_access_t){.token = token_sample(), .offset = UINT64_MAX, .bytes = UINT64_MAX,
                                      .tag = UINT64_MAX};
    break;
  case 2:
    m.type = ACXI_CTRL_GET_REPLY;
    m.u.reply = (acxi_ctrl_reply_t){.status = ACX_OK, .tag = 77};
    break;
  case 3:
    m.type = ACXI_CTRL_PUT_REPLY;
    m.u.reply = (acxi_ctrl_reply_t){.status = ACX_ERR_STALE_TOKEN, .tag = 78};
    break;
  case 4:
    m.type = ACXI_CTRL_REBUILD_NOTICE;
    m.u.notice = (acxi_ctrl_rebuild_notice_t){.rank = 1, .cause = ACX_ERR_DEVICE_LOST, .old_generation = 1,
                                              .new_generation = 2};
    break;
  case 5:
    m.type = ACXI_CTRL_REBUILD_NOTICE; /* an NCCL failure: no generation moved */
    m.u.notice = (acxi_ctrl_rebuild_notice_t){.rank = 0, .cause = ACX_ERR_NCCL, .old_generation = 3,
                                              .new_generation = 3};
    break;
  case 6:
    m.type = ACXI_CTRL_CHAN_OPEN;
    m.u.chan.channel = 3;
    for (int k = 0; k < (int)ACXI_CTRL_NCCL_ID_BYTES; k++) m.u.chan.nccl_id[k] = (unsigned char)(k * 7 + 1);
    break;
  case 7:
    m.type = ACXI_CTRL_GET_REQ; /* bytes on the NCCL channel */
    m.flags = ACXI_CTRL_FLAG_CHANNEL;
    m.u.access = (acxi_ctrl_access_t){.token = token_sample(), .offset = 0, .bytes = 1 << 20, .tag = 79};
    break;
  case 9:
    m.type = ACXI_CTRL_IPC_OPEN;
    m.u.ipc.staging = 2;
    m.u.ipc.bytes = 1 << 20;
    for (int k = 0; k < (int)ACXI_CTRL_IPC_HANDLE_BYTES; k++) m.u.ipc.handle[k] = (unsigned char)(k * 5 + 3);
    break;
  case 10:
    m.type = ACXI_CTRL_PUT_REQ; /* bytes through the requester's staging buffer 2 */
    m.flags = ACXI_CTRL_FLAG_IPC;
    m.u.access = (acxi_ctrl_access_t){.token = token_sample(), .offset = 8, .bytes = 4096, .tag = 80, .staging = 2};
    break;
  case 12:
    m.type = ACXI_CTRL_REBUILD_ABORT;
    m.epoch = 3;
    m.u.abort = (acxi_ctrl_rebuild_abort_t){.epoch = 4, .attempt = 2, .cause = ACX_ERR_DEVICE_LOST};
    break;
  case 11:
    m.type = ACXI_CTRL_GET_REQ;
    m.flags = ACXI_CTRL_FLAG_IPC | ACXI_CTRL_FLAG_RESEND;
    m.u.access = (acxi_ctrl_access_t){.token = token_sample(), .offset = 0, .bytes = 1, .tag = 81,
                                      .staging = UINT64_MAX};
    break;
  default:
    m.type = ACXI_CTRL_REBUILD_READY;
    m.sender = INT32_MAX;
    m.seq = UINT64_MAX;
    m.u.ready.epoch = 5;
    break;
  }
  return m;
}

static int same_msg(const acxi_ctrl_msg_t *a, const acxi_ctrl_msg_t *b) {
  if (a->type != b->type || a->flags != b->flags || a->seq != b->seq || a->sender != b->sender ||
      a->epoch != b->epoch)
    return 0;
  switch (a->type) {
  case ACXI_CTRL_GET_REQ:
  case ACXI_CTRL_PUT_REQ: {
    const acx_token_t *s = &a->u.access.token, *t = &b->u.access.token;
    return a->u.access.offset == b->u.access.offset && a->u.access.bytes == b->u.access.bytes &&
           a->u.access.tag == b->u.access.tag && a->u.access.staging == b->u.access.staging && s->key == t->key && s->buffer_id == t->buffer_id &&
           s->generation == t->generation && s->epoch == t->epoch && s->bytes == t->bytes && s->rights == t->rights &&
           s->dtype == t->dtype && s->owner_rank == t->owner_rank &&
           strcmp(s->device.pci_bus_id, t->device.pci_bus_id) == 0;
  }
  case ACXI_CTRL_GET_REPLY:
  case ACXI_CTRL_PUT_REPLY:
    return a->u.reply.status == b->u.reply.status && a->u.reply.tag == b->u.reply.tag;
  case ACXI_CTRL_REBUILD_NOTICE:
    return a->u.notice.rank == b->u.notice.rank && a->u.notice.cause == b->u.notice.cause &&
           a->u.notice.old_generation == b->u.notice.old_generation &&
           a->u.notice.new_generation == b->u.notice.new_generation;
  case ACXI_CTRL_REBUILD_READY:
    return a->u.ready.epoch == b->u.ready.epoch;
  case ACXI_CTRL_REBUILD_ABORT:
    return a->u.abort.epoch == b->u.abort.epoch && a->u.abort.attempt == b->u.abort.attempt &&
           a->u.abort.cause == b->u.abort.cause;
  case ACXI_CTRL_CHAN_OPEN:
    return a->u.chan.channel == b->u.chan.channel &&
           memcmp(a->u.chan.nccl_id, b->u.chan.nccl_id, ACXI_CTRL_NCCL_ID_BYTES) == 0;
  case ACXI_CTRL_IPC_OPEN:
    return a->u.ipc.staging == b->u.ipc.staging && a->u.ipc.bytes == b->u.ipc.bytes &&
           memcmp(a->u.ipc.handle, b->u.ipc.handle, ACXI_CTRL_IPC_HANDLE_BYTES) == 0;
  default:
    return 0;
  }
}

static size_t encode_ok(const acxi_ctrl_msg_t *m, uint8_t *b) {
  size_t len = 0;
  ACX_ASSERT_STATUS(acxi_ctrl_encode(m, b, ACXI_CTRL_MAX_BYTES, &len), ACX_OK);
  CU_ASSERT_EQUAL(len, acxi_ctrl_wire_size(m->type));
  return len;
}

/* Recomputes the message CRC (header [0,36) then payload) so one field alone is wrong. */
static void reseal(uint8_t *b, size_t len) {
  uint32_t c = acxi_crc32c(acxi_crc32c(0, b, 36), b + 40, len - 40);
  for (int i = 0; i < 4; i++) b[36 + i] = (uint8_t)(c >> (8 * i));
}

static void wr16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static void wr32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void wr64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static acxi_ctrl_defect_t defect_of(const uint8_t *b, size_t len, acx_status_t *st_out) {
  acxi_ctrl_msg_t m;
  acxi_ctrl_defect_t why = ACXI_CTRL_OK;
  acx_status_t st = acxi_ctrl_decode(b, len, &m, &why);
  CU_ASSERT((st == ACX_OK) == (why == ACXI_CTRL_OK));
  if (st_out) *st_out = st;
  return why;
}

/* ---- tests ---- */

static void test_round_trip(void) {
  for (int i = 0; i < N_SAMPLES; i++) {
    acxi_ctrl_msg_t m = sample(i), d;
    uint8_t b[ACXI_CTRL_MAX_BYTES], b2[ACXI_CTRL_MAX_BYTES];
    size_t len = encode_ok(&m, b);
    memset(&d, 0x33, sizeof d);
    ACX_ASSERT_STATUS(acxi_ctrl_decode(b, len, &d, NULL), ACX_OK);
    CU_ASSERT(same_msg(&m, &d));
    CU_ASSERT_EQUAL(encode_ok(&d, b2), len);
    CU_ASSERT(memcmp(b, b2, len) == 0);
  }
  CU_ASSERT_EQUAL(acxi_ctrl_wire_size(ACXI_CTRL_CHAN_OPEN), ACXI_CTRL_MAX_BYTES);
  CU_ASSERT(acxi_ctrl_wire_size(ACXI_CTRL_GET_REQ) < ACXI_CTRL_MAX_BYTES);
  CU_ASSERT_EQUAL(acxi_ctrl_wire_size(ACXI_CTRL_REBUILD_READY), ACXI_CTRL_HEADER_BYTES + 8);
  CU_ASSERT_EQUAL(acxi_ctrl_wire_size(ACXI_CTRL_REBUILD_ABORT), ACXI_CTRL_HEADER_BYTES + 16);
  CU_ASSERT_EQUAL(acxi_ctrl_wire_size(ACXI_CTRL_IPC_OPEN), ACXI_CTRL_HEADER_BYTES + 16 + ACXI_CTRL_IPC_HANDLE_BYTES);
  CU_ASSERT_EQUAL(acxi_ctrl_wire_size(ACXI_CTRL_GET_REQ), ACXI_CTRL_HEADER_BYTES + ACX_TOKEN_BYTES + 32);
  CU_ASSERT_EQUAL(acxi_ctrl_wire_size((acxi_ctrl_type_t)0), 0);
}

static void test_header_layout(void) {
  acxi_ctrl_msg_t m = sample(2);
  uint8_t b[ACXI_CTRL_MAX_BYTES];
  size_t len = encode_ok(&m, b);
  static const uint8_t head[36] = {'A', 'C', 'X', 'C', 4, 0, ACXI_CTRL_GET_REPLY, 0, 0, 0, 0, 0, 2, 0, 0, 0,
                                   0xea, 3, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0};
  CU_ASSERT(memcmp(b, head, sizeof head) == 0);
  CU_ASSERT_EQUAL(len, 56);
  CU_ASSERT_EQUAL(b[40 + 8], 77); /* reply tag */
}

static void test_every_bit_flip_rejected(void) {
  int rejected = 0, total = 0, header_flips = 0;
  for (int i = 0; i < N_SAMPLES; i++) {
    acxi_ctrl_msg_t m = sample(i);
    uint8_t b[ACXI_CTRL_MAX_BYTES];
    size_t len = encode_ok(&m, b);
    for (size_t bit = 0; bit < len * 8; bit++) {
      b[bit / 8] ^= (uint8_t)(1u << (bit % 8));
      acx_status_t st;
      acxi_ctrl_defect_t why = defect_of(b, len, &st);
      total++;
      if (bit < 40 * 8) header_flips++;
      if (st != ACX_OK) rejected++;
      else printf("\n    bit %zu of message %d accepted\n", bit, i);
      if (bit >= 32 && bit < 48) CU_ASSERT(st == ACX_ERR_NOT_SUPPORTED && why == ACXI_CTRL_BAD_VERSION);
      /* A flip in the payload length makes the message look truncated or oversized; anything
       * else past magic and version is caught by the checksum. */
      if (bit >= 48 && (bit < 32 * 8 || bit >= 36 * 8))
        CU_ASSERT(st == ACX_ERR_INVALID_ARG && why == ACXI_CTRL_BAD_CHECKSUM);
      if (bit >= 32 * 8 && bit < 36 * 8)
        CU_ASSERT(why == ACXI_CTRL_TRUNCATED || why == ACXI_CTRL_OVERSIZED || why == ACXI_CTRL_BAD_CHECKSUM);
      b[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    CU_ASSERT_EQUAL(defect_of(b, len, NULL), ACXI_CTRL_OK);
  }
  printf("\n    %d of %d single-bit flips rejected (%d of them in headers)\n", rejected, total, header_flips);
  CU_ASSERT_EQUAL(rejected, total);
}

static void test_truncated_and_oversized(void) {
  for (int i = 0; i < N_SAMPLES; i++) {
    acxi_ctrl_msg_t m = sample(i);
    uint8_t b[ACXI_CTRL_MAX_BYTES + 8];
    size_t len = encode_ok(&m, b);
    for (size_t n = 0; n < len; n++) {
      acx_status_t st;
      CU_ASSERT_EQUAL(defect_of(b, n, &st), ACXI_CTRL_TRUNCATED);
      CU_ASSERT_EQUAL(st, ACX_ERR_INVALID_ARG);
    }
    b[len] = 0;
    CU_ASSERT_EQUAL(defect_of(b, len + 1, NULL), ACXI_CTRL_OVERSIZED);
    CU_ASSERT_EQUAL(defect_of(b, len + 8, NULL), ACXI_CTRL_OVERSIZED);
  }
  /* A header announcing a 4 GiB payload is truncated, not a read past the buffer. */
  acxi_ctrl_msg_t m = sample(8);
  uint8_t b[ACXI_CTRL_MAX_BYTES];
  size_t len = encode_ok(&m, b);
  wr32(b + 32, 0xffffffffu);
  CU_ASSERT_EQUAL(defect_of(b, len, NULL), ACXI_CTRL_TRUNCATED);
}

static void test_header_fields(void) {
  uint8_t b[ACXI_CTRL_MAX_BYTES];
  acx_status_t st;
  acxi_ctrl_msg_t m = sample(2);
  size_t len;

  len = encode_ok(&m, b);
  b[0] = 'X';
  reseal(b, len);
  CU_ASSERT_EQUAL(defect_of(b, len, &st), ACXI_CTRL_BAD_MAGIC);
  CU_ASSERT_EQUAL(st, ACX_ERR_INVALID_ARG);
  wr32(b, ACX_TOKEN_MAGIC); /* a token is not a message */
  reseal(b, len);
  CU_ASSERT_EQUAL(defect_of(b, len, NULL), ACXI_CTRL_BAD_MAGIC);

  len = encode_ok(&m, b);
  wr16(b + 4, 1); /* the version before CHAN_OPEN */
  reseal(b, len);
  CU_ASSERT_EQUAL(defect_of(b, len, &st), ACXI_CTRL_BAD_VERSION);
  CU_ASSERT_EQUAL(st, ACX_ERR_NOT_SUPPORTED);
  len = encode_ok(&m, b);
  wr16(b + 4, 2); /* the version before IPC_OPEN (requests 8 bytes shorter) */
  reseal(b, len);
  CU_ASSERT_EQUAL(defect_of(b, len, &st), ACXI_CTRL_BAD_VERSION);
  len = encode_ok(&m, b);
  wr16(b + 4, ACXI_CTRL_VERSION + 1);
  reseal(b, len);
  CU_ASSERT_EQUAL(defect_of(b, len, &st), ACXI_CTRL_BAD_VERSION);

  /* Unknown types, with a payload length that would fit some real type. */
  const uint16_t bad_types[] = {0, ACXI_CTRL_TYPE_END, 100, 0xffff};
  for (size_t i = 0; i < sizeof bad_types / sizeof bad_types[0]; i++) {
    len = encode_ok(&m, b);
    wr16(b + 6, bad_types[i]);
    reseal(b, len);
    CU_ASSERT_EQUAL(defect_of(b, len, &st), ACXI_CTRL_BAD_TYPE);
    CU_ASSERT_EQUAL(st, ACX_ERR_INVALID_ARG);
  }

  len = encode_ok(&m, b);
  wr32(b + 8, 0x2);
  reseal(b, len);
  CU_ASSERT_EQUAL(defect_of(b, len, NULL), ACXI_CTRL_BAD_FLAGS);

  len = encode_ok(&m, b);
  wr32(b + 12, 0x80000000u);
  reseal(b, len);
  CU_ASSERT_EQUAL(defect_of(b, len, NULL), ACXI_CTRL_BAD_SENDER);

  /* A REBUILD_READY header on a reply-sized payload: the length does not fit the type. */
  len = encode_ok(&m, b);
  wr16(b + 6, ACXI_CTRL_REBUILD_READY);
  reseal(b, len);
  CU_ASSERT_EQUAL(defect_of(b, len, NULL), ACXI_CTRL_BAD_LENGTH);
  /* And a GET_REQ header whose announced length matches the bytes but not the type. */
  len = encode_ok(&m, b);
  wr16(b + 6, ACXI_CTRL_GET_REQ);
  reseal(b, len);
  CU_ASSERT_EQUAL(defect_of(b, len, NULL), ACXI_CTRL_BAD_LENGTH);
}

static void test_payload_fields(void) {
  uint8_t b[ACXI_CTRL_MAX_BYTES];
  acxi_ctrl_msg_t m = sample(3);
  size_t len = encode_ok(&m, b);
  wr32(b + 40, 99999); /* not an acx status */
  reseal(b, len);
  CU_ASSERT_EQUAL(defect_of(b, len, NULL), ACXI_CTRL_BAD_FIELD);
  len = encode_ok(&m, b);
  wr32(b + 44, 1); /* reply reserved */
  reseal(b, len);
  CU_ASSERT_EQUAL(defect_of(b, len, NULL), ACXI_CTRL_BAD_FIELD);

  m = sample(4);
  len = encode_ok(&m, b);
  wr32(b + 44, ACX_OK); /* a rebuild with no cause */
  reseal(b, len);
  CU_ASSERT_EQUAL(defect_of(b, len, NULL), ACXI_CTRL_BAD_FIELD);
  len = encode_ok(&m, b);
  wr32(b + 40, 0xfffffffeu); /* negative rank */
  reseal(b, len);
  CU_ASSERT_EQUAL(defect_of(b, len, NULL), ACXI_CTRL_BAD_FIELD);
  len = encode_ok(&m, b);
  wr64(b + 48, 5); /* old generation 5, new 2 */
  reseal(b, len);
  CU_ASSERT_EQUAL(defect_of(b, len, NULL), ACXI_CTRL_BAD_FIELD);

  /* REBUILD_ABORT: epoch and attempt from 1, a known error as the cause. */
  m = sample(12);
  CU_ASSERT_EQUAL(encode_ok(&m, b), ACXI_CTRL_HEADER_BYTES + 16);
  len = encode_ok(&m, b);
  wr64(b + 40, 0); /* epoch 0: no rebuild goes there */
  reseal(b, len);
  CU_ASSERT_EQUAL(defect_of(b, len, NULL), ACXI_CTRL_BAD_FIELD);
  len = encode_ok(&m, b);
  wr32(b + 48, 0); /* attempt 0 */
  reseal(b, len);
  CU_ASSERT_EQUAL(defect_of(b, len, NULL), ACXI_CTRL_BAD_FIELD);
  len = encode_ok(&m, b);
  wr32(b + 52, ACX_OK); /* no cause */
  reseal(b, len);
  CU_ASSERT_EQUAL(defect_of(b, len, NULL), ACXI_CTRL_BAD_FIELD);
  len = encode_ok(&m, b);
  wr32(b + 52, 99999); /* not an acx status */
  reseal(b, len);
  CU_ASSERT_EQUAL(defect_of(b, len, NULL), ACXI_CTRL_BAD_FIELD);

  m = sample(6);
  len = encode_ok(&m, b);
  wr64(b + 40, 0); /* channel number 0 */
  reseal(b, len);
  CU_ASSERT_EQUAL(defect_of(b, len, NULL), ACXI_CTRL_BAD_FIELD);
  m = sample(8);
  len = encode_ok(&m, b);
  wr32(b + 8, ACXI_CTRL_FLAG_CHANNEL); /* the CHANNEL flag on anything but a request */
  reseal(b, len);
  CU_ASSERT_EQUAL(defect_of(b, len, NULL), ACXI_CTRL_BAD_FLAGS);

  /* The device path: IPC_OPEN's staging number and size; the IPC flag and a request's staging
   * number go together, on requests only, never with CHANNEL. */
  m = sample(9);
  len = encode_ok(&m, b);
  wr64(b + 40, 0); /* staging number 0 */
  reseal(b, len);
  CU_ASSERT_EQUAL(defect_of(b, len, NULL), ACXI_CTRL_BAD_FIELD);
  len = encode_ok(&m, b);
  wr64(b + 48, 0); /* staging size 0 */
  reseal(b, len);
  CU_ASSERT_EQUAL(defect_of(b, len, NULL), ACXI_CTRL_BAD_FIELD);
  len = encode_ok(&m, b);
  wr32(b + 8, ACXI_CTRL_FLAG_IPC); /* the IPC flag on an IPC_OPEN */
  reseal(b, len);
  CU_ASSERT_EQUAL(defect_of(b, len, NULL), ACXI_CTRL_BAD_FLAGS);
  m = sample(10);
  len = encode_ok(&m, b);
  const size_t staging_at = 40 + ACX_TOKEN_BYTES + 24;
  wr64(b + staging_at, 0); /* an IPC request naming no staging buffer */
  reseal(b, len);
  CU_ASSERT_EQUAL(defect_of(b, len, NULL), ACXI_CTRL_BAD_FIELD);
  len = encode_ok(&m, b);
  wr32(b + 8, 0); /* a staging number without the IPC flag */
  reseal(b, len);
  CU_ASSERT_EQUAL(defect_of(b, len, NULL), ACXI_CTRL_BAD_FIELD);
  len = encode_ok(&m, b);
  wr32(b + 8, ACXI_CTRL_FLAG_IPC | ACXI_CTRL_FLAG_CHANNEL); /* two paths at once */
  reseal(b, len);
  CU_ASSERT_EQUAL(defect_of(b, len, NULL), ACXI_CTRL_BAD_FLAGS);
  len = encode_ok(&m, b);
  wr32(b + 8, 0x8); /* a bit with no meaning yet */
  reseal(b, len);
  CU_ASSERT_EQUAL(defect_of(b, len, NULL), ACXI_CTRL_BAD_FLAGS);
  m = sample(2);
  len = encode_ok(&m, b);
  wr32(b + 8, ACXI_CTRL_FLAG_IPC); /* on a reply */
  reseal(b, len);
  CU_ASSERT_EQUAL(defect_of(b, len, NULL), ACXI_CTRL_BAD_FLAGS);
}

/* A request whose token is broken (message checksum right): BAD_TOKEN, and the receiver still
 * knows whom to answer and with which tag. */
static void test_bad_token_in_request(void) {
  uint8_t b[ACXI_CTRL_MAX_BYTES];
  acxi_ctrl_msg_t m = sample(0), d;
  size_t len = encode_ok(&m, b);
  b[40 + 60] ^= 0x10; /* inside the token: its own CRC breaks */
  reseal(b, len);
  acxi_ctrl_defect_t why;
  memset(&d, 0, sizeof d);
  ACX_ASSERT_STATUS(acxi_ctrl_decode(b, len, &d, &why), ACX_ERR_BAD_TOKEN);
  CU_ASSERT_EQUAL(why, ACXI_CTRL_BAD_TOKEN);
  CU_ASSERT_EQUAL(d.type, ACXI_CTRL_GET_REQ);
  CU_ASSERT_EQUAL(d.sender, 0);
  CU_ASSERT_EQUAL(d.seq, 1000);
  CU_ASSERT_EQUAL(d.u.access.tag, 77);
  CU_ASSERT_EQUAL(d.u.access.token.key, 0); /* nothing of the broken token is passed on */
}

static void test_encode_rejects(void) {
  uint8_t b[ACXI_CTRL_MAX_BYTES];
  acxi_ctrl_msg_t m = sample(0);
  ACX_ASSERT_STATUS(acxi_ctrl_encode(NULL, b, sizeof b, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acxi_ctrl_encode(&m, NULL, sizeof b, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acxi_ctrl_encode(&m, b, acxi_ctrl_wire_size(m.type) - 1, NULL), ACX_ERR_OUT_OF_RANGE);
  ACX_ASSERT_STATUS(acxi_ctrl_decode(NULL, 10, &m, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acxi_ctrl_decode(b, 10, NULL, NULL), ACX_ERR_NULL_ARG);
  m.type = (acxi_ctrl_type_t)0;
  ACX_ASSERT_STATUS(acxi_ctrl_encode(&m, b, sizeof b, NULL), ACX_ERR_INVALID_ARG);
  m = sample(0);
  m.flags = 8;
  ACX_ASSERT_STATUS(acxi_ctrl_encode(&m, b, sizeof b, NULL), ACX_ERR_INVALID_ARG);
  m = sample(0);
  m.flags = ACXI_CTRL_FLAG_IPC; /* no staging number */
  ACX_ASSERT_STATUS(acxi_ctrl_encode(&m, b, sizeof b, NULL), ACX_ERR_INVALID_ARG);
  m = sample(0);
  m.u.access.staging = 3; /* without the IPC flag */
  ACX_ASSERT_STATUS(acxi_ctrl_encode(&m, b, sizeof b, NULL), ACX_ERR_INVALID_ARG);
  m = sample(10);
  m.flags |= ACXI_CTRL_FLAG_CHANNEL;
  ACX_ASSERT_STATUS(acxi_ctrl_encode(&m, b, sizeof b, NULL), ACX_ERR_INVALID_ARG);
  m = sample(2);
  m.flags = ACXI_CTRL_FLAG_IPC; /* requests only */
  ACX_ASSERT_STATUS(acxi_ctrl_encode(&m, b, sizeof b, NULL), ACX_ERR_INVALID_ARG);
  m = sample(9);
  m.u.ipc.bytes = 0;
  ACX_ASSERT_STATUS(acxi_ctrl_encode(&m, b, sizeof b, NULL), ACX_ERR_INVALID_ARG);
  m = sample(9);
  m.u.ipc.staging = 0;
  ACX_ASSERT_STATUS(acxi_ctrl_encode(&m, b, sizeof b, NULL), ACX_ERR_INVALID_ARG);
  m = sample(0);
  m.sender = -1;
  ACX_ASSERT_STATUS(acxi_ctrl_encode(&m, b, sizeof b, NULL), ACX_ERR_INVALID_ARG);
  m = sample(0);
  m.u.access.token.key = 0;
  ACX_ASSERT_STATUS(acxi_ctrl_encode(&m, b, sizeof b, NULL), ACX_ERR_BAD_TOKEN);
  m = sample(2);
  m.u.reply.status = (acx_status_t)12345;
  ACX_ASSERT_STATUS(acxi_ctrl_encode(&m, b, sizeof b, NULL), ACX_ERR_INVALID_ARG);
  m = sample(4);
  m.u.notice.new_generation = 0;
  ACX_ASSERT_STATUS(acxi_ctrl_encode(&m, b, sizeof b, NULL), ACX_ERR_INVALID_ARG);
  m = sample(2);
  m.flags = ACXI_CTRL_FLAG_CHANNEL; /* requests only */
  ACX_ASSERT_STATUS(acxi_ctrl_encode(&m, b, sizeof b, NULL), ACX_ERR_INVALID_ARG);
  m = sample(6);
  m.u.chan.channel = 0;
  ACX_ASSERT_STATUS(acxi_ctrl_encode(&m, b, sizeof b, NULL), ACX_ERR_INVALID_ARG);
  m = sample(8);
  ACX_ASSERT_STATUS(acxi_ctrl_encode(&m, b, acxi_ctrl_wire_size(m.type), NULL), ACX_OK); /* exact fit */
}

/* Random bytes, and random bytes in a valid envelope: never accepted unless canonical. */
static void test_random(void) {
  int accepted = 0;
  for (int i = 0; i < 100000; i++) {
    uint8_t b[ACXI_CTRL_MAX_BYTES], b2[ACXI_CTRL_MAX_BYTES];
    acx_test_fill_random(b, sizeof b, (uint64_t)i + 1);
    uint16_t type = (uint16_t)(1 + b[6] % 9);
    size_t len = type <= ACXI_CTRL_REBUILD_READY || type == ACXI_CTRL_IPC_OPEN || type == ACXI_CTRL_REBUILD_ABORT
                     ? acxi_ctrl_wire_size((acxi_ctrl_type_t)type) : 48;
    if (i % 2) {
      wr32(b, ACXI_CTRL_MAGIC);
      wr16(b + 4, ACXI_CTRL_VERSION);
      wr16(b + 6, type);
      wr32(b + 8, b[8] & 1);
      b[15] &= 0x7f;
      wr32(b + 32, (uint32_t)(len - 40));
      if (type == ACXI_CTRL_GET_REPLY || type == ACXI_CTRL_PUT_REPLY) {
        wr32(b + 40, b[40] % 2 ? ACX_OK : ACX_ERR_DENIED);
        wr32(b + 44, 0);
      }
      if (type == ACXI_CTRL_REBUILD_ABORT) wr32(b + 52, b[52] % 2 ? ACX_ERR_NCCL : ACX_ERR_DEVICE_LOST);
      if (type == ACXI_CTRL_REBUILD_NOTICE) {
        wr32(b + 40, b[40]);
        wr32(b + 44, ACX_ERR_DEVICE_LOST);
        wr64(b + 56, UINT64_MAX);
      }
      reseal(b, len);
    }
    acxi_ctrl_msg_t m;
    if (acxi_ctrl_decode(b, len, &m, NULL) == ACX_OK) {
      accepted++;
      size_t l2 = 0;
      ACX_ASSERT_STATUS(acxi_ctrl_encode(&m, b2, sizeof b2, &l2), ACX_OK);
      CU_ASSERT(l2 == len && memcmp(b, b2, len) == 0);
    }
  }
  printf("\n    %d of 100000 random messages accepted (all re-encoded identically)\n", accepted);
  CU_ASSERT(accepted > 1000);
}

int main(void) {
  static const acx_test_case_t cases[] = {ACX_TEST(test_round_trip),
                                          ACX_TEST(test_header_layout),
                                          ACX_TEST(test_every_bit_flip_rejected),
                                          ACX_TEST(test_truncated_and_oversized),
                                          ACX_TEST(test_header_fields),
                                          ACX_TEST(test_payload_fields),
                                          ACX_TEST(test_bad_token_in_request),
                                          ACX_TEST(test_encode_rejects),
                                          ACX_TEST(test_random),
                                          ACX_TEST_END};
  /* Rejections are logged at WARN by design; tens of thousands of them would bury the report. */
  setenv("ACX_DEBUG", "NONE", 1);
  acx_log_reinit();
  return acx_test_run("ctrl-msg", cases, NULL, NULL);
}
