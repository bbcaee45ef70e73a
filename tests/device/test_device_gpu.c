/* The device API on kind cuda (label gpu; exits 77 without a GPU): random data byte for byte,
 * fills, cross-stream ordering through an event, managed prefetch/advise, raw pointers inline,
 * an injected illegal-address fault in process mode (executor restarted, generation bumped,
 * stale buffers rejected, new work correct, this process unharmed) and in inline mode
 * (ACX_ERR_DEVICE_FATAL and a clear message; run in a child process, which it poisons); a host
 * region freed while a stream is blocked (the executor's loop answers at once). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "acx/device.h"
#include "acx_test.h"
#include "runtime/base/clock.h"
#include "runtime/device/device_internal.h"

extern char **environ;

static acx_system_t *sys;
static acx_device_t *dev;
#define T 60000000000LL

static acx_status_t open_cuda(acx_transport_t transport, acx_device_t **out) {
  acx_device_config_t cfg = ACX_DEVICE_CONFIG_INIT;
  cfg.kind = ACX_DEVICE_KIND_CUDA;
  cfg.transport = transport;
  cfg.streams = 2;
  return acx_device_open(sys, &cfg, out);
}

static acx_buffer_t *alloc(size_t bytes, acx_dtype_t dt, acx_mem_kind_t kind) {
  acx_buffer_t *b = NULL;
  ACX_ASSERT_STATUS(acx_buffer_alloc(dev, bytes, dt, kind, T, &b), ACX_OK);
  return b;
}

static void test_random_roundtrip(void) {
  const size_t sizes[] = {1, 4099, 1 << 20, (64u << 20) + 5};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t n = sizes[i];
    unsigned char *in = malloc(n), *out = malloc(n);
    acx_test_fill_random(in, n, 77 + i);
    memset(out, 0, n);
    acx_buffer_t *a = alloc(n, ACX_DTYPE_BYTE, ACX_MEM_DEVICE), *b = alloc(n, ACX_DTYPE_BYTE, ACX_MEM_DEVICE);
    ACX_ASSERT_STATUS(acx_buffer_write(a, 0, in, n, 0, T), ACX_OK);
    ACX_ASSERT_STATUS(acx_buffer_copy(b, 0, a, 0, ACX_WHOLE, 1, T), ACX_OK);
    ACX_ASSERT_STATUS(acx_buffer_read(b, 0, out, n, 0, T), ACX_OK);
    CU_ASSERT(memcmp(in, out, n) == 0);
    acx_buffer_release(a);
    acx_buffer_release(b);
    free(in);
    free(out);
  }
  /* Zero-copy through pinned shared host memory. */
  enum { N = 8 << 20 };
  acx_host_mem_t *h = NULL, *g = NULL;
  ACX_ASSERT_STATUS(acx_host_alloc(dev, N, &h), ACX_OK);
  ACX_ASSERT_STATUS(acx_host_alloc(dev, N, &g), ACX_OK);
  void *ph, *pg;
  acx_host_mem_ptr(h, &ph, NULL);
  acx_host_mem_ptr(g, &pg, NULL);
  acx_test_fill_random(ph, N, 5);
  memset(pg, 0, N);
  acx_buffer_t *b = alloc(N, ACX_DTYPE_U32, ACX_MEM_DEVICE);
  ACX_ASSERT_STATUS(acx_buffer_copy_from_host(b, 0, h, 0, ACX_WHOLE, 0, T), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_copy_to_host(g, 0, b, 0, ACX_WHOLE, 1, T), ACX_OK);
  CU_ASSERT(memcmp(ph, pg, N) == 0);
  acx_buffer_release(b);
  acx_host_free(h);
  acx_host_free(g);
}

static void test_fill_widths(void) {
  const unsigned widths[] = {1, 2, 4, 8};
  const uint64_t pattern = 0x0102030405060708ull;
  for (int w = 0; w < 4; w++) {
    size_t n = 1 << 16;
    acx_buffer_t *b = alloc(n, ACX_DTYPE_BYTE, ACX_MEM_DEVICE);
    ACX_ASSERT_STATUS(acx_buffer_fill(b, 0, ACX_WHOLE, 0, 1, 0, T), ACX_OK);
    ACX_ASSERT_STATUS(acx_buffer_fill(b, 8, 4096, pattern, widths[w], 1, T), ACX_OK);
    unsigned char *out = malloc(n), *want = calloc(1, n);
    for (size_t i = 0; i < 4096; i += widths[w]) memcpy(want + 8 + i, &pattern, widths[w]);
    ACX_ASSERT_STATUS(acx_buffer_read(b, 0, out, n, 1, T), ACX_OK);
    CU_ASSERT(memcmp(out, want, n) == 0);
    free(out);
    free(want);
    acx_buffer_release(b);
  }
}

/* A large fill on stream 0, an event, stream 1 waits on it and copies: the copy must see the
 * fill, though the host never waited in between. */
static void test_cross_stream_order(void) {
  size_t n = 256u << 20;
  acx_buffer_t *a = alloc(n, ACX_DTYPE_U32, ACX_MEM_DEVICE), *b = alloc(n, ACX_DTYPE_U32, ACX_MEM_DEVICE);
  ACX_ASSERT_STATUS(acx_buffer_fill(b, 0, ACX_WHOLE, 0, 4, 1, T), ACX_OK);
  for (uint32_t round = 1; round <= 3; round++) {
    acx_future_t *f = NULL;
    ACX_ASSERT_STATUS(acx_buffer_fill_async(a, 0, ACX_WHOLE, 0xabc00000u + round, 4, 0, &f), ACX_OK);
    acx_event_t *ev = NULL;
    ACX_ASSERT_STATUS(acx_event_record(dev, 0, &ev, T), ACX_OK);
    ACX_ASSERT_STATUS(acx_stream_wait_event(dev, 1, ev, T), ACX_OK);
    ACX_ASSERT_STATUS(acx_buffer_copy(b, 0, a, 0, ACX_WHOLE, 1, T), ACX_OK);
    uint32_t tail[1024];
    ACX_ASSERT_STATUS(acx_buffer_read(b, n - sizeof tail, tail, sizeof tail, 1, T), ACX_OK);
    int ok = 1;
    for (int i = 0; i < 1024; i++) ok &= tail[i] == 0xabc00000u + round;
    CU_ASSERT(ok);
    ACX_ASSERT_STATUS(acx_future_wait(f, T, NULL, 0, NULL), ACX_OK);
    acx_future_release(f);
    acx_event_destroy(ev);
  }
  ACX_ASSERT_STATUS(acx_device_synchronize(dev, ACX_STREAM_ALL, T), ACX_OK);
  acx_buffer_release(a);
  acx_buffer_release(b);
}

static void test_managed(void) {
  size_t n = 32u << 20;
  unsigned char *in = malloc(n), *out = malloc(n);
  acx_test_fill_random(in, n, 3);
  acx_buffer_t *m = alloc(n, ACX_DTYPE_BYTE, ACX_MEM_MANAGED);
  ACX_ASSERT_STATUS(acx_buffer_advise(m, 0, ACX_WHOLE, ACX_ADVISE_PREFERRED_DEVICE, T), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_prefetch(m, 0, ACX_WHOLE, 0, 0, T), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_write(m, 0, in, n, 0, T), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_advise(m, 0, ACX_WHOLE, ACX_ADVISE_READ_MOSTLY, T), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_prefetch(m, 0, ACX_WHOLE, 1, 1, T), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_read(m, 0, out, n, 1, T), ACX_OK);
  CU_ASSERT(memcmp(in, out, n) == 0);
  acx_device_stats_t st = {.size = sizeof st};
  ACX_ASSERT_STATUS(acx_device_stats(dev, &st), ACX_OK);
  CU_ASSERT(st.managed_bytes >= n);
  uint64_t fr, tot;
  ACX_ASSERT_STATUS(acx_device_mem_info(dev, &fr, &tot, T), ACX_OK);
  acx_buffer_t *huge = NULL;
  ACX_ASSERT_STATUS(acx_buffer_alloc(dev, (size_t)fr + (1u << 30), ACX_DTYPE_BYTE, ACX_MEM_MANAGED, T, &huge),
                    ACX_ERR_DEVICE_OOM);
  acx_buffer_release(m);
  free(in);
  free(out);
}

static acx_device_stats_t stats_now(void) {
  acx_device_stats_t st = {.size = sizeof st};
  ACX_ASSERT_STATUS(acx_device_stats(dev, &st), ACX_OK);
  return st;
}

/* Twice: an illegal-address fault, recovery (through the hot standby executor unless
 * ACX_EXECUTOR_STANDBY=0: it must be ready first, and a new one is made for the second fault). */
static void test_fault_process_mode(void) {
  printf("\n");
  for (int round = 1; round <= 2; round++) {
    acx_device_stats_t st = stats_now();
    int standby = st.standby_spawns > 0;
    for (int i = 0; i < 30000 && standby && !stats_now().standby_ready; i++) usleep(1000);
    CU_ASSERT(!standby || stats_now().standby_ready);
    uint64_t promoted0 = st.standby_promotions;
    uint64_t g0 = 0, g1 = 0;
    acx_device_generation(dev, &g0);
    acx_buffer_t *old = alloc(4096, ACX_DTYPE_BYTE, ACX_MEM_DEVICE);
    int64_t t0 = acxi_now_ns();
    ACX_ASSERT_STATUS(acx_device_inject_fault(dev, 0, T), ACX_ERR_DEVICE_LOST);
    for (int i = 0; i < 6000 && (acx_device_generation(dev, &g1), g1 == g0 || acx_device_ping(dev, T) != ACX_OK); i++)
      usleep(100);
    int64_t took = acxi_now_ns() - t0;
    CU_ASSERT_EQUAL(g1, g0 + 1);
    ACX_ASSERT_STATUS(acx_buffer_fill(old, 0, 16, 1, 1, 0, T), ACX_ERR_STALE_BUFFER);
    acx_buffer_release(old);
    /* The counters move just after the device runs again: allow them a moment. */
    for (int i = 0; i < 2000 && (st = stats_now()).standby_promotions == promoted0 && standby; i++) usleep(1000);
    if (standby) CU_ASSERT_EQUAL(st.standby_promotions, promoted0 + 1);
    printf("    fault %d: recovered %s; loss -> ready %.1f ms, fault -> first good ping %.1f ms\n", round,
           st.standby_promotions > promoted0 ? "through the standby executor" : "by spawning an executor",
           st.last_recovery_ns / 1e6, took / 1e6);
    test_random_roundtrip(); /* new work is correct; this process never touched CUDA */
  }
}

/* Child: inline transport, fault, expect FATAL everywhere after. Exit 0 when all held. */
static int inline_fault_child(void) {
  if (acx_system_create(NULL, &sys) != ACX_OK) return 10;
  acx_device_t *d = NULL;
  if (open_cuda(ACX_TRANSPORT_INLINE, &d) != ACX_OK) return 11;
  acx_buffer_t *b = NULL;
  if (acx_buffer_alloc(d, 4096, ACX_DTYPE_BYTE, ACX_MEM_DEVICE, T, &b) != ACX_OK) return 12;
  void *p = NULL;
  if (acx_buffer_device_ptr(b, &p, T) != ACX_OK || !p) return 13;
  acx_status_t st = acx_device_inject_fault(d, 1, T);
  if (st != ACX_ERR_DEVICE_FATAL) {
    fprintf(stderr, "inject_fault returned %s\n", acx_status_name(st));
    return 14;
  }
  for (int i = 0; i < 5000 && acx_device_ping(d, T) != ACX_ERR_DEVICE_FATAL; i++) usleep(1000);
  if (acx_device_ping(d, T) != ACX_ERR_DEVICE_FATAL) return 15;
  if (acx_buffer_fill(b, 0, 16, 0, 1, 0, T) != ACX_ERR_DEVICE_FATAL) return 16;
  acx_buffer_release(b);
  acx_device_close(d, T);
  acx_system_destroy(sys, T);
  return 0;
}

static void test_fault_inline_mode(void) {
  char log[] = "/tmp/acx-inline-fault-XXXXXX";
  int fd = mkstemp(log);
  CU_ASSERT_FATAL(fd >= 0);
  close(fd);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, log, O_WRONLY | O_TRUNC, 0600);
  char *argv[] = {"test_device_gpu", "--inline-fault-child", NULL};
  pid_t pid;
  CU_ASSERT_EQUAL_FATAL(posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  int ws = 0;
  CU_ASSERT_EQUAL(waitpid(pid, &ws, 0), pid);
  CU_ASSERT(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
  if (!WIFEXITED(ws) || WEXITSTATUS(ws)) printf("\n    child wait status 0x%x\n", ws);
  FILE *f = fopen(log, "r");
  char line[2048];
  int clear = 0;
  while (f && fgets(line, sizeof line, f)) clear |= strstr(line, "can no longer use the GPU") != NULL;
  if (f) fclose(f);
  CU_ASSERT(clear);
  unlink(log);
  ACX_ASSERT_STATUS(acx_device_ping(dev, T), ACX_OK); /* the parent's device is untouched */
}

/* acx_host_free while a stream is blocked behind a device-side wait for a flag nobody has raised
 * yet (as a channel's transfer waits for its peer's executor): the executor answers at once and
 * unpins the region once the stream has moved on. It used to wait for every stream in its loop,
 * for up to ACX_EXEC_TIMEOUT_MS, serving nothing (the free then failed with a timeout), and two
 * executors each waiting for the other's transfer never moved again (the resilient example's
 * teardown hung in acx_remote_stop on the 4-GPU host). */
static void test_host_free_behind_blocked_stream(void) {
  acx_host_mem_t *flag = NULL, *h = NULL, *h2 = NULL;
  ACX_ASSERT_STATUS(acx_host_alloc(dev, 4096, &flag), ACX_OK);
  ACX_ASSERT_STATUS(acx_host_alloc(dev, 1u << 20, &h), ACX_OK);
  ACX_ASSERT_STATUS(acx_host_alloc(dev, 1u << 20, &h2), ACX_OK);
  void *p = NULL;
  size_t nb = 0;
  ACX_ASSERT_STATUS(acx_host_mem_ptr(flag, &p, &nb), ACX_OK);
  volatile uint32_t *word = p;
  *word = 0;
  /* Stream 0 waits from here; the command's reply comes once the stream has passed it. */
  acxi_cmd_t cmd = {.op = ACXI_OP_WAIT_VALUE, .stream = 0, .arg = {flag->id, 1, 0}};
  acx_future_t *w = NULL;
  ACX_ASSERT_STATUS(acxi_device_submit(dev, &cmd, NULL, 0, 0, -1, acxi_deadline(T), &w), ACX_OK);
  ACX_ASSERT_STATUS(acx_host_free(h), ACX_OK);
  ACX_ASSERT_STATUS(acx_device_ping(dev, T), ACX_OK); /* the loop serves */
  ACX_ASSERT_STATUS(acx_host_free(h2), ACX_OK);        /* a second one behind the same wait */
  acx_future_t *f = NULL;
  acx_buffer_t *b = alloc(4096, ACX_DTYPE_U8, ACX_MEM_DEVICE);
  ACX_ASSERT_STATUS(acx_buffer_fill_async(b, 0, ACX_WHOLE, 7, 1, 0, &f), ACX_OK); /* queued behind the wait */
  CU_ASSERT_EQUAL(acx_future_wait(f, 200000000LL, NULL, 0, NULL), ACX_ERR_TIMEOUT); /* still blocked */
  __atomic_store_n(word, 1u, __ATOMIC_RELEASE);
  ACX_ASSERT_STATUS(acx_future_wait(w, T, NULL, 0, NULL), ACX_OK);
  ACX_ASSERT_STATUS(acx_future_wait(f, T, NULL, 0, NULL), ACX_OK);
  acx_future_release(w);
  acx_future_release(f);
  ACX_ASSERT_STATUS(acx_device_synchronize(dev, ACX_STREAM_ALL, T), ACX_OK);
  unsigned char got[4096];
  ACX_ASSERT_STATUS(acx_buffer_read(b, 0, got, sizeof got, 0, T), ACX_OK);
  CU_ASSERT(got[0] == 7 && got[4095] == 7);
  acx_buffer_release(b);
  ACX_ASSERT_STATUS(acx_host_free(flag), ACX_OK);
  ACX_ASSERT_STATUS(acx_device_ping(dev, T), ACX_OK);
}

static int gpu_present(void) {
  const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
  if (cvd && (!*cvd || !strcmp(cvd, "-1"))) return 0;
  return access("/dev/nvidiactl", F_OK) == 0;
}

static int setup(void) {
  if (acx_system_create(NULL, &sys) != ACX_OK) return 1;
  return open_cuda(ACX_TRANSPORT_PROCESS, &dev) == ACX_OK ? 0 : 1;
}

static int teardown(void) {
  int bad = acx_device_close(dev, T) != ACX_OK;
  return bad | (acx_system_destroy(sys, T) != ACX_OK);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--inline-fault-child")) return inline_fault_child();
  if (!gpu_present()) acx_test_skip("no GPU visible (/dev/nvidiactl missing or CUDA_VISIBLE_DEVICES empty)");
  /* A build without the cuda kind, or a driver that finds no device: skipped, never passed. */
  {
    acx_system_t *s = NULL;
    acx_device_t *d = NULL;
    if (acx_system_create(NULL, &s) != ACX_OK) return 1;
    sys = s;
    acx_status_t st = open_cuda(ACX_TRANSPORT_PROCESS, &d);
    if (st == ACX_OK) acx_device_close(d, T);
    acx_system_destroy(s, T);
    if (st == ACX_ERR_NO_DEVICE) acx_test_skip("kind cuda: no usable device (ACX_ERR_NO_DEVICE)");
  }
  static const acx_test_case_t cases[] = {ACX_TEST(test_random_roundtrip), ACX_TEST(test_fill_widths),
                                          ACX_TEST(test_cross_stream_order), ACX_TEST(test_managed),
                                          ACX_TEST(test_fault_process_mode), ACX_TEST(test_fault_inline_mode),
                                          ACX_TEST(test_host_free_behind_blocked_stream),
                                          ACX_TEST_END};
  return acx_test_run("device-gpu", cases, setup, teardown);
}
