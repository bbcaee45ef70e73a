/* The token codec (runtime/proto/token.c): round trips, the wire layout byte by byte against an
 * independent CRC, every single-bit flip rejected, truncated/oversized/magic/version, each field
 * outside its domain rejected with its own reason, canonical form (decode OK => re-encode gives
 * the same bytes), and the log line a rejection writes. */
#define _GNU_SOURCE
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acx/config.h"
#include "acx/token.h"
#include "acx_test.h"
#include "runtime/proto/token_internal.h"

/* Bitwise CRC-32C, independent of the table-driven one under test. */
static uint32_t crc32c_ref(const uint8_t *p, size_t n) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
  }
  return ~c;
}

static void reseal(uint8_t *b) {
  uint32_t c = crc32c_ref(b, 96);
  for (int i = 0; i < 4; i++) b[96 + i] = (uint8_t)(c >> (8 * i));
}

static uint64_t rd64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

static void wr32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void wr64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Three tokens covering the device-id types and extreme values. */
static acx_token_t sample(int which) {
  acx_token_t t = {.version = ACX_TOKEN_VERSION,
                   .owner_rank = 3,
                   .node = 1,
                   .buffer_id = 42,
                   .generation = 7,
                   .epoch = 2,
                   .bytes = 4096,
                   .dtype = ACX_DTYPE_F32,
                   .rights = ACX_TOKEN_READ,
                   .key = 0x0123456789abcdefull};
  if (which == 1) {
    t.devid_type = ACX_TOKEN_DEVID_PCI;
    snprintf(t.device.pci_bus_id, sizeof t.device.pci_bus_id, "%s", "0000:18:00.0");
    t.rights = ACX_TOKEN_RIGHTS_ALL;
    t.dtype = ACX_DTYPE_BF16;
  } else if (which == 2) {
    t.devid_type = ACX_TOKEN_DEVID_UUID;
    for (int i = 0; i < 16; i++) t.device.uuid[i] = (uint8_t)(0xa0 + i);
    t.owner_rank = INT32_MAX;
    t.node = INT32_MAX;
    t.buffer_id = UINT64_MAX;
    t.generation = UINT64_MAX;
    t.epoch = UINT64_MAX;
    t.bytes = UINT64_MAX;
    t.key = UINT64_MAX;
    t.rights = ACX_TOKEN_WRITE;
    t.dtype = (acx_dtype_t)(ACX_DTYPE_COUNT - 1);
  }
  return t;
}

static int same_token(const acx_token_t *a, const acx_token_t *b) {
  return a->version == b->version && a->owner_rank == b->owner_rank && a->node == b->node &&
         a->devid_type == b->devid_type && memcmp(&a->device, &b->device, sizeof a->device) == 0 &&
         a->buffer_id == b->buffer_id && a->generation == b->generation && a->epoch == b->epoch &&
         a->bytes == b->bytes && a->dtype == b->dtype && a->rights == b->rights && a->key == b->key;
}

static void encode_ok(const acx_token_t *t, uint8_t b[ACX_TOKEN_BYTES]) {
  size_t len = 0;
  ACX_ASSERT_STATUS(acx_token_encode(t, b, ACX_TOKEN_BYTES, &len), ACX_OK);
  CU_ASSERT_EQUAL_FATAL(len, ACX_TOKEN_BYTES);
}

static acxi_token_defect_t defect_of(const uint8_t *b, size_t len) {
  acx_token_t t;
  acxi_token_defect_t why = ACXI_TOKEN_OK;
  acx_status_t st = acxi_token_decode_why(b, len, &t, &why);
  CU_ASSERT((st == ACX_OK) == (why == ACXI_TOKEN_OK));
  if (st != ACX_OK) CU_ASSERT_EQUAL(st, ACX_ERR_BAD_TOKEN);
  return why;
}

/* ---- tests ---- */

static void test_crc32c(void) {
  const char *s = "123456789";
  CU_ASSERT_EQUAL(acxi_crc32c(0, s, 9), 0xe3069283u); /* the published check value */
  CU_ASSERT_EQUAL(acxi_crc32c(acxi_crc32c(0, s, 4), s + 4, 5), 0xe3069283u);
  uint8_t buf[1000];
  acx_test_fill_random(buf, sizeof buf, 5);
  for (size_t n = 0; n <= sizeof buf; n += 37) CU_ASSERT_EQUAL(acxi_crc32c(0, buf, n), crc32c_ref(buf, n));
}

static void test_round_trip(void) {
  for (int w = 0; w < 3; w++) {
    acx_token_t t = sample(w), d;
    memset(&d, 0x5a, sizeof d);
    uint8_t b[ACX_TOKEN_BYTES], b2[ACX_TOKEN_BYTES];
    encode_ok(&t, b);
    ACX_ASSERT_STATUS(acx_token_decode(b, sizeof b, &d), ACX_OK);
    CU_ASSERT(same_token(&t, &d));
    CU_ASSERT_EQUAL(d.checksum, crc32c_ref(b, 96));
    encode_ok(&d, b2);
    CU_ASSERT(memcmp(b, b2, sizeof b) == 0);
  }
}

/* The layout of docs/tokens.md, checked byte by byte: a reader in another language relies on it. */
static void test_wire_layout(void) {
  acx_token_t t = sample(1);
  uint8_t b[ACX_TOKEN_BYTES];
  encode_ok(&t, b);
  static const uint8_t head[24] = {'A', 'C', 'X', 'T', 1, 0, ACX_TOKEN_DEVID_PCI, ACX_DTYPE_BF16,
                                   3,   0,   0,   0,   1, 0, 0,  0,
                                   3,   0,   0,   0,   0, 0, 0,  0};
  CU_ASSERT(memcmp(b, head, sizeof head) == 0);
  CU_ASSERT(memcmp(b + 24, "0000:18:00.0", 12) == 0);
  for (int i = 24 + 12; i < 56; i++) CU_ASSERT_EQUAL(b[i], 0);
  CU_ASSERT_EQUAL(rd64(b + 56), 42);
  CU_ASSERT_EQUAL(rd64(b + 64), 7);
  CU_ASSERT_EQUAL(rd64(b + 72), 2);
  CU_ASSERT_EQUAL(rd64(b + 80), 4096);
  CU_ASSERT_EQUAL(b[88], 0xef); /* key, least significant byte first */
  CU_ASSERT_EQUAL(b[95], 0x01);
  uint32_t c = crc32c_ref(b, 96);
  CU_ASSERT(b[96] == (uint8_t)c && b[97] == (uint8_t)(c >> 8) && b[98] == (uint8_t)(c >> 16) &&
            b[99] == (uint8_t)(c >> 24));
  /* Bytes past the PCI id's NUL are zero even when the struct held garbage there. */
  acx_token_t g = sample(1);
  memset(g.device.pci_bus_id + 13, 'x', sizeof g.device.pci_bus_id - 13);
  uint8_t b2[ACX_TOKEN_BYTES];
  encode_ok(&g, b2);
  CU_ASSERT(memcmp(b, b2, sizeof b) == 0);
}

static void test_every_bit_flip_rejected(void) {
  int rejected = 0, total = 0;
  for (int w = 0; w < 3; w++) {
    acx_token_t t = sample(w), d;
    uint8_t b[ACX_TOKEN_BYTES];
    encode_ok(&t, b);
    for (int bit = 0; bit < ACX_TOKEN_BYTES * 8; bit++) {
      b[bit / 8] ^= (uint8_t)(1u << (bit % 8));
      acxi_token_defect_t why = ACXI_TOKEN_OK;
      acx_status_t st = acxi_token_decode_why(b, sizeof b, &d, &why);
      total++;
      if (st == ACX_ERR_BAD_TOKEN) rejected++;
      else printf("\n    bit %d of token %d accepted\n", bit, w);
      /* Magic and version are read first; anything else is caught by the checksum. */
      acxi_token_defect_t want = bit < 32 ? ACXI_TOKEN_BAD_MAGIC : bit < 48 ? ACXI_TOKEN_BAD_VERSION : ACXI_TOKEN_BAD_CHECKSUM;
      CU_ASSERT_EQUAL(why, want);
      b[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    ACX_ASSERT_STATUS(acx_token_decode(b, sizeof b, &d), ACX_OK); /* restored */
  }
  printf("\n    %d of %d single-bit flips rejected\n", rejected, total);
  CU_ASSERT_EQUAL(rejected, total);
  CU_ASSERT_EQUAL(total, 3 * ACX_TOKEN_BYTES * 8);
}

static void test_truncated_and_oversized(void) {
  acx_token_t t = sample(0);
  uint8_t b[2 * ACX_TOKEN_BYTES];
  acx_test_fill_random(b, sizeof b, 9);
  encode_ok(&t, b);
  for (size_t n = 0; n < ACX_TOKEN_BYTES; n++) CU_ASSERT_EQUAL(defect_of(b, n), ACXI_TOKEN_TRUNCATED);
  for (size_t n = ACX_TOKEN_BYTES + 1; n <= sizeof b; n++) CU_ASSERT_EQUAL(defect_of(b, n), ACXI_TOKEN_OVERSIZED);
  CU_ASSERT_EQUAL(defect_of(b, ACX_TOKEN_BYTES), ACXI_TOKEN_OK);
  CU_ASSERT_EQUAL(defect_of(b, SIZE_MAX), ACXI_TOKEN_OVERSIZED); /* never read past the record */
}

static void test_magic_and_version(void) {
  acx_token_t t = sample(0);
  uint8_t b[ACX_TOKEN_BYTES];
  encode_ok(&t, b);
  b[3] = 'Y'; /* "ACXY", checksum made right: magic alone is wrong */
  reseal(b);
  CU_ASSERT_EQUAL(defect_of(b, sizeof b), ACXI_TOKEN_BAD_MAGIC);
  wr32(b, 0x43584341u); /* the control-message magic is not a token's */
  reseal(b);
  CU_ASSERT_EQUAL(defect_of(b, sizeof b), ACXI_TOKEN_BAD_MAGIC);
  encode_ok(&t, b);
  for (unsigned v = 0; v < 4; v++) {
    if (v == ACX_TOKEN_VERSION) continue;
    b[4] = (uint8_t)v;
    reseal(b);
    CU_ASSERT_EQUAL(defect_of(b, sizeof b), ACXI_TOKEN_BAD_VERSION);
  }
  b[4] = ACX_TOKEN_VERSION;
  b[5] = 1; /* version 257 */
  reseal(b);
  CU_ASSERT_EQUAL(defect_of(b, sizeof b), ACXI_TOKEN_BAD_VERSION);
}

/* Each field outside its domain, with a correct checksum so the field check itself is reached. */
static void test_field_domains(void) {
  struct {
    const char *what;
    int off;
    int width; /* 1, 4 or 8 */
    uint64_t value;
    acxi_token_defect_t want;
    int sample;
  } cases[] = {
      {"dtype = COUNT", 7, 1, ACX_DTYPE_COUNT, ACXI_TOKEN_BAD_DTYPE, 0},
      {"dtype = 255", 7, 1, 255, ACXI_TOKEN_BAD_DTYPE, 0},
      {"devid type 3", 6, 1, 3, ACXI_TOKEN_BAD_DEVID, 0},
      {"devid NONE with a byte set", 40, 1, 1, ACXI_TOKEN_BAD_DEVID, 0},
      {"PCI id with a bad character", 24, 1, 'g', ACXI_TOKEN_BAD_DEVID, 1},
      {"PCI id empty", 24, 1, 0, ACXI_TOKEN_BAD_DEVID, 1},
      {"PCI id with garbage after the NUL", 40, 1, '1', ACXI_TOKEN_BAD_DEVID, 1},
      {"UUID with a byte past 16", 24 + 16, 1, 1, ACXI_TOKEN_BAD_DEVID, 2},
      {"rights 0", 16, 4, 0, ACXI_TOKEN_BAD_RIGHTS, 0},
      {"rights 4", 16, 4, 4, ACXI_TOKEN_BAD_RIGHTS, 0},
      {"rights read + bit 31", 16, 4, 0x80000001u, ACXI_TOKEN_BAD_RIGHTS, 0},
      {"reserved", 20, 4, 1, ACXI_TOKEN_BAD_RESERVED, 0},
      {"owner rank negative", 8, 4, 0x80000000u, ACXI_TOKEN_BAD_RANK, 0},
      {"node negative", 12, 4, 0xffffffffu, ACXI_TOKEN_BAD_RANK, 0},
      {"key 0", 88, 8, 0, ACXI_TOKEN_ZERO_KEY, 0},
      {"buffer id 0", 56, 8, 0, ACXI_TOKEN_ZERO_FIELD, 0},
      {"generation 0", 64, 8, 0, ACXI_TOKEN_ZERO_FIELD, 0},
      {"bytes 0", 80, 8, 0, ACXI_TOKEN_ZERO_FIELD, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    acx_token_t t = sample(cases[i].sample);
    uint8_t b[ACX_TOKEN_BYTES];
    encode_ok(&t, b);
    if (cases[i].width == 1) b[cases[i].off] = (uint8_t)cases[i].value;
    else if (cases[i].width == 4) wr32(b + cases[i].off, (uint32_t)cases[i].value);
    else wr64(b + cases[i].off, cases[i].value);
    reseal(b);
    acxi_token_defect_t got = defect_of(b, sizeof b);
    if (got != cases[i].want)
      printf("\n    %s: got '%s', expected '%s'\n", cases[i].what, acxi_token_defect_str(got),
             acxi_token_defect_str(cases[i].want));
    CU_ASSERT_EQUAL(got, cases[i].want);
  }
  /* A UUID of all zeros names nothing. */
  acx_token_t t = sample(2);
  uint8_t b[ACX_TOKEN_BYTES];
  encode_ok(&t, b);
  memset(b + 24, 0, 16);
  reseal(b);
  CU_ASSERT_EQUAL(defect_of(b, sizeof b), ACXI_TOKEN_BAD_DEVID);
  /* A PCI id filling all 32 bytes leaves no room for its NUL. */
  t = sample(1);
  encode_ok(&t, b);
  memset(b + 24, 'a', 32);
  reseal(b);
  CU_ASSERT_EQUAL(defect_of(b, sizeof b), ACXI_TOKEN_BAD_DEVID);
}

static void test_encode_rejects(void) {
  uint8_t b[ACX_TOKEN_BYTES];
  acx_token_t t = sample(0);
  ACX_ASSERT_STATUS(acx_token_encode(NULL, b, sizeof b, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_token_encode(&t, NULL, sizeof b, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_token_encode(&t, b, ACX_TOKEN_BYTES - 1, NULL), ACX_ERR_OUT_OF_RANGE);
  ACX_ASSERT_STATUS(acx_token_decode(NULL, ACX_TOKEN_BYTES, &t), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_token_decode(b, ACX_TOKEN_BYTES, NULL), ACX_ERR_NULL_ARG);
  acx_token_t bad[9];
  for (int i = 0; i < 9; i++) bad[i] = sample(i % 3);
  bad[0].version = 2;
  bad[1].rights = 0;
  bad[2].rights = 8;
  bad[3].dtype = ACX_DTYPE_COUNT;
  bad[4].key = 0;
  bad[5].owner_rank = -1;
  bad[6].devid_type = ACX_TOKEN_DEVID_PCI;
  bad[6].device.pci_bus_id[0] = '\0';
  bad[7].devid_type = (acx_token_devid_t)7;
  bad[8].bytes = 0;
  for (int i = 0; i < 9; i++) {
    memset(b, 0xee, sizeof b);
    ACX_ASSERT_STATUS(acx_token_encode(&bad[i], b, sizeof b, NULL), ACX_ERR_BAD_TOKEN);
  }
}

/* Property: whatever decodes re-encodes to the very same bytes (one encoding per token, so a
 * token cannot be re-shaped without the owner noticing), and random records with a valid
 * envelope are either accepted canonically or rejected. */
static void test_canonical_and_random(void) {
  int accepted = 0;
  uint64_t seed = 1;
  for (int i = 0; i < 200000; i++) {
    uint8_t b[ACX_TOKEN_BYTES], b2[ACX_TOKEN_BYTES];
    acx_test_fill_random(b, sizeof b, seed++);
    if (i % 2) { /* a valid envelope, random fields with the domains made likely */
      wr32(b, ACX_TOKEN_MAGIC);
      b[4] = ACX_TOKEN_VERSION;
      b[5] = 0;
      b[6] %= 3;
      b[7] %= ACX_DTYPE_COUNT + 1;
      b[8 + 3] &= 0x7f;
      b[12 + 3] &= 0x7f;
      wr32(b + 16, 1 + b[16] % 4);
      if (i % 4 == 1) wr32(b + 20, 0);
      if (b[6] == ACX_TOKEN_DEVID_NONE) memset(b + 24, 0, 32);
      if (b[6] == ACX_TOKEN_DEVID_UUID) memset(b + 40, 0, 16);
      if (b[6] == ACX_TOKEN_DEVID_PCI) {
        memcpy(b + 24, "0000:3b:00.0", 13);
        memset(b + 37, 0, 19);
      }
      reseal(b);
    }
    acx_token_t t;
    if (acx_token_decode(b, sizeof b, &t) == ACX_OK) {
      accepted++;
      encode_ok(&t, b2);
      CU_ASSERT(memcmp(b, b2, sizeof b) == 0);
    }
  }
  printf("\n    %d of 200000 random records accepted (all re-encoded identically)\n", accepted);
  CU_ASSERT(accepted > 1000); /* the enveloped half must reach the field checks and pass some */
}

/* A rejection says why in the log (the argument of the line is the reason). */
static void test_rejection_logged(void) {
  char path[] = "/tmp/acx-token-log-XXXXXX";
  int fd = mkstemp(path);
  CU_ASSERT_FATAL(fd >= 0);
  close(fd);
  setenv("ACX_DEBUG_FILE", path, 1);
  setenv("ACX_DEBUG", "WARN", 1);
  acx_log_reinit();
  acx_token_t t = sample(0), d;
  uint8_t b[ACX_TOKEN_BYTES];
  encode_ok(&t, b);
  ACX_ASSERT_STATUS(acx_token_decode(b, 57, &d), ACX_ERR_BAD_TOKEN);
  b[60] ^= 4;
  ACX_ASSERT_STATUS(acx_token_decode(b, sizeof b, &d), ACX_ERR_BAD_TOKEN);
  ACX_ASSERT_STATUS(acx_token_decode(NULL, sizeof b, &d), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_token_decode(b, sizeof b, NULL), ACX_ERR_NULL_ARG);
  unsetenv("ACX_DEBUG_FILE");
  setenv("ACX_DEBUG", "NONE", 1);
  acx_log_reinit();
  FILE *f = fopen(path, "r");
  CU_ASSERT_FATAL(f != NULL);
  char text[4096] = {0};
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  unlink(path);
  text[n] = '\0';
  CU_ASSERT(strstr(text, "truncated (57 bytes, a token has 100)") != NULL);
  CU_ASSERT(strstr(text, "checksum mismatch") != NULL);
  CU_ASSERT(strstr(text, "TOKEN") != NULL);
  /* The user called acx_token_decode: its name and acx/token.h's parameter names, never the
   * internal decoder's (issue 15 item 6). */
  CU_ASSERT(strstr(text, "acx_token_decode: argument 'buf' is NULL") != NULL);
  CU_ASSERT(strstr(text, "acx_token_decode: argument 'token' is NULL") != NULL);
  CU_ASSERT(strstr(text, "acxi_") == NULL);
}

int main(void) {
  static const acx_test_case_t cases[] = {ACX_TEST(test_crc32c),
                                          ACX_TEST(test_round_trip),
                                          ACX_TEST(test_wire_layout),
                                          ACX_TEST(test_rejection_logged),
                                          ACX_TEST(test_every_bit_flip_rejected),
                                          ACX_TEST(test_truncated_and_oversized),
                                          ACX_TEST(test_magic_and_version),
                                          ACX_TEST(test_field_domains),
                                          ACX_TEST(test_encode_rejects),
                                          ACX_TEST(test_canonical_and_random),
                                          ACX_TEST_END};
  /* The bulk tests reject on purpose hundreds of thousands of times: keep stderr readable. The
   * logging of a rejection is checked by test_rejection_logged, which turns WARN on for itself. */
  setenv("ACX_DEBUG", "NONE", 1);
  acx_log_reinit();
  return acx_test_run("token-codec", cases, NULL, NULL);
}
