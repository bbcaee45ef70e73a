/* Built outside the acx tree against an installed acx (find_package or pkg-config): checks that
 * the installed headers and library agree and, where libacx has them, runs an ask through a
 * real actor system and a buffer round trip through a host device served by the installed
 * acx-executor. Prints "acx consumer: ok <version>" on success. */
#include <stdio.h>
#include <string.h>

#include "acx/actor.h"
#include "acx/config.h"
#include "acx/status.h"
#include "acx/version.h"

#define FAIL(...)                                    \
  do {                                               \
    fprintf(stderr, "acx consumer: " __VA_ARGS__);   \
    fputc('\n', stderr);                             \
    return 1;                                        \
  } while (0)

#if ACX_CONSUMER_ACTORS
enum { MSG_DOUBLE = 1 };

static acx_status_t doubler(acx_ctx_t *ctx, void *state, const acx_msg_t *msg) {
  int v;
  if (msg->type != MSG_DOUBLE || msg->len != sizeof v) return ACX_ERR_INVALID_ARG;
  memcpy(&v, msg->data, sizeof v);
  v *= 2;
  return acx_reply(ctx, msg, ACX_OK, &v, sizeof v);
}

static int run_actor_system(void) {
  acx_system_t *sys = NULL;
  acx_status_t s = acx_system_create(NULL, &sys);
  if (s != ACX_OK) FAIL("acx_system_create: %s", acx_status_str(s));
  acx_props_t props = ACX_PROPS_INIT;
  props.receive = doubler;
  acx_ref_t ref = NULL;
  acx_future_t *f = NULL;
  int in = 21, out = 0;
  size_t len = 0;
  s = acx_spawn(sys, NULL, &props, "doubler", &ref);
  if (s == ACX_OK) s = acx_ask(ref, MSG_DOUBLE, &in, sizeof in, &f);
  if (s == ACX_OK) s = acx_future_wait(f, 5000000000LL, &out, sizeof out, &len);
  if (f) acx_future_release(f);
  if (ref) acx_ref_release(ref);
  acx_status_t d = acx_system_destroy(sys, 5000000000LL);
  if (s != ACX_OK) FAIL("ask through the actor system: %s", acx_status_str(s));
  if (d != ACX_OK) FAIL("acx_system_destroy: %s", acx_status_str(d));
  if (len != sizeof out || out != 42) FAIL("the actor answered %d (len %zu), expected 42", out, len);
  return 0;
}
#endif

#if ACX_CONSUMER_DEVICE
#include "acx/device.h"

/* A host-kind device in process mode: libacx must find the installed acx-executor by itself
 * (the test unsets ACX_EXECUTOR_PATH), beside the library or in the install's bin/. */
static int run_device(void) {
  acx_system_t *sys = NULL;
  acx_status_t s = acx_system_create(NULL, &sys);
  if (s != ACX_OK) FAIL("acx_system_create: %s", acx_status_str(s));
  acx_device_config_t cfg = ACX_DEVICE_CONFIG_INIT;
  cfg.kind = ACX_DEVICE_KIND_HOST;
  cfg.transport = ACX_TRANSPORT_PROCESS;
  acx_device_t *dev = NULL;
  acx_buffer_t *buf = NULL;
  float in[64], out[64];
  for (int i = 0; i < 64; i++) in[i] = (float)i * 0.5f;
  memset(out, 0, sizeof out);
  const int64_t t = 10000000000LL;
  s = acx_device_open(sys, &cfg, &dev);
  if (s == ACX_OK) s = acx_buffer_alloc(dev, sizeof in, ACX_DTYPE_F32, ACX_MEM_DEVICE, t, &buf);
  if (s == ACX_OK) s = acx_buffer_write(buf, 0, in, sizeof in, 0, t);
  if (s == ACX_OK) s = acx_buffer_read(buf, 0, out, sizeof out, 0, t);
  if (buf) {
    acx_status_t f = acx_buffer_free(buf, t);
    if (s == ACX_OK) s = f;
    acx_buffer_release(buf);
  }
  acx_status_t c = dev ? acx_device_close(dev, t) : ACX_OK;
  acx_status_t d = acx_system_destroy(sys, t);
  if (s != ACX_OK) FAIL("host device through the installed executor: %s", acx_status_str(s));
  if (c != ACX_OK) FAIL("acx_device_close: %s", acx_status_str(c));
  if (d != ACX_OK) FAIL("acx_system_destroy: %s", acx_status_str(d));
  if (memcmp(in, out, sizeof in) != 0) FAIL("the buffer read back differs from what was written");
  return 0;
}
#endif

int main(int argc, char **argv) {
  int code = -1;
  const char *v = acx_version(&code);
  if (code != ACX_VERSION) FAIL("library version code %d, header says %d", code, ACX_VERSION);
  if (strcmp(v, ACX_VERSION_STRING) != 0) FAIL("library version '%s', header says '%s'", v, ACX_VERSION_STRING);
  if (argc > 1 && strcmp(argv[1], v) != 0) FAIL("installed version '%s', expected '%s'", v, argv[1]);
  if (strstr(acx_status_str(ACX_ERR_STALE_BUFFER), "ACX_ERR_STALE_BUFFER") == NULL)
    FAIL("acx_status_str(ACX_ERR_STALE_BUFFER) = '%s'", acx_status_str(ACX_ERR_STALE_BUFFER));
  if (acx_param_count() == 0) FAIL("no parameters registered");

  acx_future_t *f = NULL;
  int payload = 7, got = 0;
  acx_status_t s = acx_future_create(&f);
  if (s != ACX_OK) FAIL("acx_future_create: %s", acx_status_str(s));
  s = acx_future_complete(f, ACX_OK, &payload, sizeof payload);
  if (s == ACX_OK) s = acx_future_wait(f, 1000000000LL, &got, sizeof got, NULL);
  acx_future_release(f);
  if (s != ACX_OK || got != payload) FAIL("future round trip: %s, got %d", acx_status_str(s), got);

#if ACX_CONSUMER_ACTORS
  if (run_actor_system() != 0) return 1;
  printf("acx consumer: actor system ok\n");
#endif
#if ACX_CONSUMER_DEVICE
  if (run_device() != 0) return 1;
  printf("acx consumer: device ok (host kind, installed acx-executor)\n");
#endif
  printf("acx consumer: ok %s\n", v);
  return 0;
}
