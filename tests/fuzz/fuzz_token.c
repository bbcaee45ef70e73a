/* libFuzzer target for acx_token_decode. The first input byte picks a mode: even, the rest is
 * decoded as received (what a peer could send); odd, its checksum is made right first, so the
 * fuzzer gets past the CRC to the field checks. Whatever decodes must re-encode to the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "acx/token.h"
#include "runtime/proto/token_internal.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  setenv("ACX_DEBUG", "NONE", 1); /* every rejection logs a WARN line: too slow and too loud here */
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  int reseal = data[0] & 1;
  data++;
  size--;
  uint8_t *copy = malloc(size ? size : 1); /* an exact-size copy: ASan sees any read past the end */
  if (!copy) return 0;
  memcpy(copy, data, size);
  if (reseal && size == ACX_TOKEN_BYTES) acxi_put_le32(copy + 96, acxi_crc32c(0, copy, 96));
  acx_token_t t;
  if (acx_token_decode(copy, size, &t) == ACX_OK) {
    uint8_t out[ACX_TOKEN_BYTES];
    size_t len = 0;
    if (acx_token_encode(&t, out, sizeof out, &len) != ACX_OK || len != size || memcmp(out, copy, size) != 0)
      abort(); /* accepted but not canonical: two encodings of one token */
  }
  free(copy);
  return 0;
}
