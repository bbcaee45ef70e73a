/* libFuzzer target for the control-message parser (acxi_ctrl_decode). The first input byte picks
 * a mode: even, the rest is parsed as received; odd, the payload length, the message checksum and
 * (for requests) the embedded token's checksum are made right first, so the fuzzer reaches the
 * type and field checks. Whatever parses must re-encode to the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/proto/ctrl_msg.h"
#include "runtime/proto/token_internal.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  setenv("ACX_DEBUG", "NONE", 1);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  int reseal = data[0] & 1;
  data++;
  size--;
  uint8_t *copy = malloc(size ? size : 1);
  if (!copy) return 0;
  memcpy(copy, data, size);
  if (reseal && size >= ACXI_CTRL_HEADER_BYTES) {
    size_t plen = size - ACXI_CTRL_HEADER_BYTES;
    acxi_put_le32(copy + 32, (uint32_t)plen);
    if (plen >= ACX_TOKEN_BYTES) {
      uint8_t *tok = copy + ACXI_CTRL_HEADER_BYTES;
      acxi_put_le32(tok + 96, acxi_crc32c(0, tok, 96));
    }
    acxi_put_le32(copy + 36, acxi_crc32c(acxi_crc32c(0, copy, 36), copy + ACXI_CTRL_HEADER_BYTES, plen));
  }
  acxi_ctrl_msg_t m;
  if (acxi_ctrl_decode(copy, size, &m, NULL) == ACX_OK) {
    uint8_t out[ACXI_CTRL_MAX_BYTES];
    size_t len = 0;
    if (acxi_ctrl_encode(&m, out, sizeof out, &len) != ACX_OK || len != size || memcmp(out, copy, size) != 0)
      abort(); /* accepted but not canonical */
  }
  free(copy);
  return 0;
}
