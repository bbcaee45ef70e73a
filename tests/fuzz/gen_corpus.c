/* Writes the fuzzers' seed corpora (tests/fuzz/corpus/{token,ctrl}/): valid encodings of tokens
 * and of every control-message type, each prefixed by the fuzz targets' mode byte (0: as is,
 * 1: checksums resealed). Usage: gen_corpus write|check <corpus dir>. `check` (a unit test) fails
 * when the checked-in files differ from what this build encodes, i.e. when the format moved. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "acx/token.h"
#include "runtime/proto/ctrl_msg.h"

static int mode_write;
static int failures;

static void emit(const char *dir, const char *sub, const char *name, const uint8_t *b, size_t len) {
  for (int mode = 0; mode < 2; mode++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s/%s-%s", dir, sub, name, mode ? "reseal" : "raw");
    uint8_t buf[1 + ACXI_CTRL_MAX_BYTES];
    buf[0] = (uint8_t)mode;
    memcpy(buf + 1, b, len);
    if (mode_write) {
      FILE *f = fopen(path, "wb");
      if (!f || fwrite(buf, 1, len + 1, f) != len + 1 || fclose(f) != 0) {
        fprintf(stderr, "gen_corpus: cannot write %s: %s\n", path, strerror(errno));
        failures++;
      }
      continue;
    }
    uint8_t old[2 * sizeof buf];
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(old, 1, sizeof old, f) : 0;
    if (f) fclose(f);
    if (!f || n != len + 1 || memcmp(old, buf, n) != 0) {
      fprintf(stderr, "gen_corpus: %s is missing or differs from this build's encoding (run gen_corpus write)\n", path);
      failures++;
    }
  }
}

static acx_token_t token(int which) {
  acx_token_t t = {.version = ACX_TOKEN_VERSION, .owner_rank = 1, .node = 0, .buffer_id = 17, .generation = 1,
                   .epoch = 0, .bytes = 1 << 20, .dtype = ACX_DTYPE_F32, .rights = ACX_TOKEN_READ,
                   .key = 0x8badf00d5eed1234ull};
  if (which == 1) {
    t.devid_type = ACX_TOKEN_DEVID_PCI;
    snprintf(t.device.pci_bus_id, sizeof t.device.pci_bus_id, "0000:00:06.0");
    t.rights = ACX_TOKEN_RIGHTS_ALL;
  } else if (which == 2) {
    t.devid_type = ACX_TOKEN_DEVID_UUID;
    for (int i = 0; i < 16; i++) t.device.uuid[i] = (uint8_t)(i * 17 + 1);
    t.dtype = ACX_DTYPE_BF16;
    t.rights = ACX_TOKEN_WRITE;
    t.epoch = 3;
    t.generation = 2;
  }
  return t;
}

int main(int argc, char **argv) {
  if (argc != 3 || (strcmp(argv[1], "write") && strcmp(argv[1], "check"))) {
    fprintf(stderr, "usage: gen_corpus write|check <corpus dir>\n");
    return 2;
  }
  mode_write = !strcmp(argv[1], "write");
  const char *dir = argv[2];
  if (mode_write) {
    char p[4096];
    snprintf(p, sizeof p, "%s/token", dir);
    mkdir(dir, 0755);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/ctrl", dir);
    mkdir(p, 0755);
  }
  static const char *const tnames[] = {"token-host", "token-pci", "token-uuid"};
  uint8_t b[ACXI_CTRL_MAX_BYTES];
  size_t len;
  for (int i = 0; i < 3; i++) {
    acx_token_t t = token(i);
    if (acx_token_encode(&t, b, sizeof b, &len) != ACX_OK) return 1;
    emit(dir, "token", tnames[i], b, len);
  }
  acxi_ctrl_msg_t msgs[9] = {
      {.type = ACXI_CTRL_GET_REQ, .seq = 1, .sender = 0, .u.access = {.token = token(1), .offset = 0, .bytes = 4096, .tag = 1}},
      {.type = ACXI_CTRL_PUT_REQ, .flags = ACXI_CTRL_FLAG_RESEND, .seq = 2, .sender = 0,
       .u.access = {.token = token(2), .offset = 64, .bytes = 64, .tag = 2}},
      {.type = ACXI_CTRL_GET_REPLY, .seq = 1, .sender = 1, .u.reply = {.status = ACX_OK, .tag = 1}},
      {.type = ACXI_CTRL_PUT_REPLY, .seq = 2, .sender = 1, .u.reply = {.status = ACX_ERR_DENIED, .tag = 2}},
      {.type = ACXI_CTRL_REBUILD_NOTICE, .seq = 3, .sender = 1, .epoch = 0,
       .u.notice = {.rank = 1, .cause = ACX_ERR_DEVICE_LOST, .old_generation = 1, .new_generation = 2}},
      {.type = ACXI_CTRL_REBUILD_READY, .seq = 4, .sender = 1, .epoch = 1, .u.ready = {.epoch = 1}},
      {.type = ACXI_CTRL_CHAN_OPEN, .seq = 5, .sender = 0, .u.chan = {.channel = 1, .nccl_id = {2, 0, 0x9c, 0x41}}},
      {.type = ACXI_CTRL_IPC_OPEN, .seq = 6, .sender = 0,
       .u.ipc = {.staging = 1, .bytes = 65536, .handle = {'A', 'X', 'S', 'H', 1, 0, 0, 0, 0x10}}},
      {.type = ACXI_CTRL_REBUILD_ABORT, .seq = 7, .sender = 2, .epoch = 0,
       .u.abort = {.epoch = 1, .attempt = 1, .cause = ACX_ERR_DEVICE_LOST}},
  };
  for (int i = 0; i < 9; i++) {
    if (acxi_ctrl_encode(&msgs[i], b, sizeof b, &len) != ACX_OK) return 1;
    char name[64];
    snprintf(name, sizeof name, "ctrl-%s", acxi_ctrl_type_str(msgs[i].type));
    emit(dir, "ctrl", name, b, len);
  }
  if (failures) return 1;
  printf("gen_corpus: %s: 6 token and 16 control-message seeds %s\n", dir, mode_write ? "written" : "match this build");
  return 0;
}
