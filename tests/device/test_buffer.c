/* Buffers on the host kind (runtime/buffer.c): allocation and copies checked byte for byte on
 * random data, fills of every width, D2D whole and ranges, managed prefetch/advise, events,
 * raw pointers (inline only), and bad arguments and bad commands with their statuses.
 * Usage: test_buffer process|inline (kind cuda: see test_device_gpu.c). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acx/device.h"
#include "acx_test.h"
#include "runtime/device_internal.h"

static acx_system_t *sys;
static acx_device_t *dev;
static int inline_mode;
#define T 20000000000LL

static acx_buffer_t *alloc(size_t bytes, acx_dtype_t dt, acx_mem_kind_t kind) {
  acx_buffer_t *b = NULL;
  ACX_ASSERT_STATUS(acx_buffer_alloc(dev, bytes, dt, kind, T, &b), ACX_OK);
  return b;
}

static void test_dtypes(void) {
  CU_ASSERT_EQUAL(acx_dtype_size(ACX_DTYPE_BYTE), 1);
  CU_ASSERT_EQUAL(acx_dtype_size(ACX_DTYPE_BF16), 2);
  CU_ASSERT_EQUAL(acx_dtype_size(ACX_DTYPE_F32), 4);
  CU_ASSERT_EQUAL(acx_dtype_size(ACX_DTYPE_U64), 8);
  CU_ASSERT_EQUAL(acx_dtype_size((acx_dtype_t)99), 0);
  CU_ASSERT_STRING_EQUAL(acx_dtype_name(ACX_DTYPE_F16), "f16");
  CU_ASSERT_STRING_EQUAL(acx_dtype_name((acx_dtype_t)-1), "unknown");
}

static void test_roundtrip_random(void) {
  /* Around the staging chunk size (ACX_STAGING_BYTES/2 = 2 MiB by default) and odd sizes. */
  const size_t sizes[] = {1, 7, 4096, 65537, (2u << 20) - 1, 2u << 20, (2u << 20) + 1, (9u << 20) + 13};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t n = sizes[i];
    unsigned char *in = malloc(n), *out = malloc(n);
    acx_test_fill_random(in, n, 1000 + i);
    memset(out, 0xee, n);
    acx_buffer_t *b = alloc(n, ACX_DTYPE_BYTE, i % 2 ? ACX_MEM_MANAGED : ACX_MEM_DEVICE);
    ACX_ASSERT_STATUS(acx_buffer_write(b, 0, in, n, 0, T), ACX_OK);
    ACX_ASSERT_STATUS(acx_buffer_read(b, 0, out, n, 1, T), ACX_OK);
    CU_ASSERT(memcmp(in, out, n) == 0);
    /* A sub-range, read back through another stream. */
    if (n > 16) {
      memset(out, 0, n);
      ACX_ASSERT_STATUS(acx_buffer_read(b, 3, out, n - 10, 1, T), ACX_OK);
      CU_ASSERT(memcmp(in + 3, out, n - 10) == 0);
    }
    acx_buffer_info_t info;
    ACX_ASSERT_STATUS(acx_buffer_query(b, &info), ACX_OK);
    CU_ASSERT_EQUAL(info.bytes, n);
    CU_ASSERT_EQUAL(info.generation, 1);
    acx_buffer_release(b);
    free(in);
    free(out);
  }
}

static void test_fill_widths(void) {
  const unsigned widths[] = {1, 2, 4, 8};
  const uint64_t pattern = 0x1122334455667788ull;
  for (int w = 0; w < 4; w++) {
    size_t n = 4096;
    acx_buffer_t *b = alloc(n, ACX_DTYPE_BYTE, ACX_MEM_DEVICE);
    ACX_ASSERT_STATUS(acx_buffer_fill(b, 0, ACX_WHOLE, 0, 1, 0, T), ACX_OK);
    ACX_ASSERT_STATUS(acx_buffer_fill(b, 64, 1024, pattern, widths[w], 1, T), ACX_OK);
    unsigned char out[4096], want[4096];
    memset(want, 0, n);
    for (size_t i = 0; i < 1024; i += widths[w]) memcpy(want + 64 + i, &pattern, widths[w]);
    ACX_ASSERT_STATUS(acx_buffer_read(b, 0, out, n, 0, T), ACX_OK);
    CU_ASSERT(memcmp(out, want, n) == 0);
    acx_buffer_release(b);
  }
  /* A typed buffer takes its element width only. */
  acx_buffer_t *f = alloc(1024, ACX_DTYPE_F32, ACX_MEM_DEVICE);
  float one = 1.0f;
  uint32_t bits;
  memcpy(&bits, &one, 4);
  ACX_ASSERT_STATUS(acx_buffer_fill(f, 0, ACX_WHOLE, bits, 4, 0, T), ACX_OK);
  float got[256];
  ACX_ASSERT_STATUS(acx_buffer_read(f, 0, got, sizeof got, 0, T), ACX_OK);
  int ok = 1;
  for (int i = 0; i < 256; i++) ok &= got[i] == 1.0f;
  CU_ASSERT(ok);
  ACX_ASSERT_STATUS(acx_buffer_fill(f, 0, ACX_WHOLE, 0, 8, 0, T), ACX_ERR_BAD_DTYPE);
  ACX_ASSERT_STATUS(acx_buffer_fill(f, 0, ACX_WHOLE, 0, 3, 0, T), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_buffer_fill(f, 2, 8, 0, 4, 0, T), ACX_ERR_INVALID_ARG);
  acx_buffer_release(f);
}

static void test_d2d(void) {
  enum { N = 1 << 20 };
  unsigned char *in = malloc(N), *out = malloc(N);
  acx_test_fill_random(in, N, 5);
  acx_buffer_t *a = alloc(N, ACX_DTYPE_U8, ACX_MEM_DEVICE), *b = alloc(N, ACX_DTYPE_U8, ACX_MEM_DEVICE);
  ACX_ASSERT_STATUS(acx_buffer_write(a, 0, in, N, 0, T), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_copy(b, 0, a, 0, ACX_WHOLE, 1, T), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_read(b, 0, out, N, 0, T), ACX_OK);
  CU_ASSERT(memcmp(in, out, N) == 0);
  /* Ranges, and an overlapping move inside one buffer. */
  ACX_ASSERT_STATUS(acx_buffer_copy(b, 100, a, 5000, 3000, 0, T), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_read(b, 100, out, 3000, 0, T), ACX_OK);
  CU_ASSERT(memcmp(in + 5000, out, 3000) == 0);
  ACX_ASSERT_STATUS(acx_buffer_copy(a, 10, a, 0, 4096, 0, T), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_read(a, 10, out, 4096, 0, T), ACX_OK);
  CU_ASSERT(memcmp(in, out, 4096) == 0);
  /* Async variants. */
  acx_future_t *f = NULL;
  ACX_ASSERT_STATUS(acx_buffer_copy_async(b, 0, a, 0, 4096, 1, &f), ACX_OK);
  ACX_ASSERT_STATUS(acx_future_wait(f, T, NULL, 0, NULL), ACX_OK);
  acx_future_release(f);
  ACX_ASSERT_STATUS(acx_buffer_fill_async(b, 0, 16, 0xab, 1, 0, &f), ACX_OK);
  ACX_ASSERT_STATUS(acx_future_wait(f, T, NULL, 0, NULL), ACX_OK);
  acx_future_release(f);
  ACX_ASSERT_STATUS(acx_device_synchronize_async(dev, ACX_STREAM_ALL, &f), ACX_OK);
  ACX_ASSERT_STATUS(acx_future_wait(f, T, NULL, 0, NULL), ACX_OK);
  acx_future_release(f);
  acx_buffer_t *c = NULL;
  ACX_ASSERT_STATUS(acx_buffer_alloc_async(dev, 64, ACX_DTYPE_BYTE, ACX_MEM_DEVICE, &c, &f), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_fill(c, 0, 64, 7, 1, 0, T), ACX_OK); /* queued behind the allocation */
  ACX_ASSERT_STATUS(acx_future_wait(f, T, NULL, 0, NULL), ACX_OK);
  acx_future_release(f);
  acx_buffer_release(c);
  ACX_ASSERT_STATUS(acx_buffer_free(a, T), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_free(a, T), ACX_ERR_INVALID_STATE);
  ACX_ASSERT_STATUS(acx_buffer_fill(a, 0, 4, 0, 1, 0, T), ACX_ERR_INVALID_STATE);
  acx_buffer_release(a);
  acx_buffer_release(b);
  free(in);
  free(out);
}

static void test_managed_and_events(void) {
  acx_buffer_t *m = alloc(1 << 16, ACX_DTYPE_F64, ACX_MEM_MANAGED);
  acx_buffer_t *d = alloc(1 << 16, ACX_DTYPE_F64, ACX_MEM_DEVICE);
  ACX_ASSERT_STATUS(acx_buffer_prefetch(m, 0, ACX_WHOLE, 0, 0, T), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_prefetch(m, 0, 4096, 1, 1, T), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_advise(m, 0, ACX_WHOLE, ACX_ADVISE_READ_MOSTLY, T), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_advise(m, 0, ACX_WHOLE, ACX_ADVISE_PREFERRED_DEVICE, T), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_advise(m, 0, ACX_WHOLE, (acx_advice_t)42, T), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_buffer_prefetch(m, 0, ACX_WHOLE, 2, 0, T), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_buffer_prefetch(d, 0, ACX_WHOLE, 0, 0, T), ACX_ERR_INVALID_ARG); /* not managed */
  ACX_ASSERT_STATUS(acx_buffer_prefetch(m, 8, 1 << 16, 0, 0, T), ACX_ERR_OUT_OF_RANGE);
  acx_device_stats_t st = {.size = sizeof st};
  ACX_ASSERT_STATUS(acx_device_stats(dev, &st), ACX_OK);
  CU_ASSERT(st.managed_bytes >= 1 << 16);
  CU_ASSERT(st.device_bytes >= 1 << 16);
  /* Never more managed memory than the device has free. */
  uint64_t fr, tot;
  ACX_ASSERT_STATUS(acx_device_mem_info(dev, &fr, &tot, T), ACX_OK);
  acx_buffer_t *huge = NULL;
  ACX_ASSERT_STATUS(acx_buffer_alloc(dev, (size_t)tot * 2, ACX_DTYPE_BYTE, ACX_MEM_MANAGED, T, &huge),
                    ACX_ERR_DEVICE_OOM);
  /* Write on stream 0, event, stream 1 waits for it, read on stream 1. */
  double v[64];
  for (int i = 0; i < 64; i++) v[i] = i * 1.5;
  ACX_ASSERT_STATUS(acx_buffer_write(d, 0, v, sizeof v, 0, T), ACX_OK);
  acx_event_t *ev = NULL;
  ACX_ASSERT_STATUS(acx_event_record(dev, 0, &ev, T), ACX_OK);
  ACX_ASSERT_STATUS(acx_stream_wait_event(dev, 1, ev, T), ACX_OK);
  double w[64] = {0};
  ACX_ASSERT_STATUS(acx_buffer_read(d, 0, w, sizeof w, 1, T), ACX_OK);
  CU_ASSERT(memcmp(v, w, sizeof v) == 0);
  ACX_ASSERT_STATUS(acx_stream_wait_event(dev, 9, ev, T), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_stream_wait_event(dev, 1, NULL, T), ACX_ERR_NULL_ARG);
  acx_event_destroy(ev);
  ACX_ASSERT_STATUS(acx_event_record(dev, 1, &ev, T), ACX_OK); /* reuses the id */
  acx_event_destroy(ev);
  acx_buffer_release(m);
  acx_buffer_release(d);
}

static void test_device_ptr(void) {
  acx_buffer_t *b = alloc(256, ACX_DTYPE_BYTE, ACX_MEM_DEVICE);
  void *p = (void *)1;
  if (!inline_mode) {
    ACX_ASSERT_STATUS(acx_buffer_device_ptr(b, &p, T), ACX_ERR_NOT_SUPPORTED);
    CU_ASSERT_PTR_NULL(p);
  } else {
    ACX_ASSERT_STATUS(acx_buffer_fill(b, 0, ACX_WHOLE, 0x5a, 1, 0, T), ACX_OK);
    ACX_ASSERT_STATUS(acx_buffer_device_ptr(b, &p, T), ACX_OK);
    /* The host kind's "device" memory is host memory: the pointer is readable here. */
    CU_ASSERT_FATAL(p != NULL);
    unsigned char want[256];
    memset(want, 0x5a, sizeof want);
    CU_ASSERT(memcmp(p, want, 256) == 0);
  }
  acx_buffer_release(b);
}

static void test_bad_arguments(void) {
  acx_buffer_t *b = NULL, *f32 = alloc(256, ACX_DTYPE_F32, ACX_MEM_DEVICE), *i32 = alloc(256, ACX_DTYPE_I32, ACX_MEM_DEVICE);
  char tmp[512];
  /* NULLs */
  ACX_ASSERT_STATUS(acx_buffer_alloc(NULL, 4, ACX_DTYPE_BYTE, ACX_MEM_DEVICE, T, &b), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_buffer_alloc(dev, 4, ACX_DTYPE_BYTE, ACX_MEM_DEVICE, T, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_buffer_fill(NULL, 0, 4, 0, 1, 0, T), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_buffer_write(f32, 0, NULL, 4, 0, T), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_buffer_read(NULL, 0, tmp, 4, 0, T), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_buffer_copy(f32, 0, NULL, 0, 4, 0, T), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_buffer_query(NULL, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_host_alloc(dev, 16, NULL), ACX_ERR_NULL_ARG);
  /* dtype */
  ACX_ASSERT_STATUS(acx_buffer_alloc(dev, 4, (acx_dtype_t)99, ACX_MEM_DEVICE, T, &b), ACX_ERR_BAD_DTYPE);
  ACX_ASSERT_STATUS(acx_buffer_copy(i32, 0, f32, 0, ACX_WHOLE, 0, T), ACX_ERR_BAD_DTYPE);
  ACX_ASSERT_STATUS(acx_buffer_alloc(dev, 6, ACX_DTYPE_F32, ACX_MEM_DEVICE, T, &b), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_buffer_write(f32, 2, tmp, 4, 0, T), ACX_ERR_INVALID_ARG); /* not element aligned */
  /* sizes and ranges */
  ACX_ASSERT_STATUS(acx_buffer_alloc(dev, 0, ACX_DTYPE_BYTE, ACX_MEM_DEVICE, T, &b), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_buffer_alloc(dev, SIZE_MAX, ACX_DTYPE_BYTE, ACX_MEM_DEVICE, T, &b), ACX_ERR_OVERFLOW);
  ACX_ASSERT_STATUS(acx_buffer_alloc(dev, 4, ACX_DTYPE_BYTE, (acx_mem_kind_t)5, T, &b), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_buffer_write(f32, 252, tmp, 8, 0, T), ACX_ERR_OUT_OF_RANGE);
  ACX_ASSERT_STATUS(acx_buffer_read(f32, 0, tmp, 260, 0, T), ACX_ERR_OUT_OF_RANGE);
  ACX_ASSERT_STATUS(acx_buffer_read(f32, SIZE_MAX - 3, tmp, 8, 0, T), ACX_ERR_OVERFLOW);
  ACX_ASSERT_STATUS(acx_buffer_copy(f32, 128, f32, 0, 256, 0, T), ACX_ERR_OUT_OF_RANGE);
  ACX_ASSERT_STATUS(acx_buffer_fill(f32, 300, ACX_WHOLE, 0, 4, 0, T), ACX_ERR_OUT_OF_RANGE);
  ACX_ASSERT_STATUS(acx_buffer_fill(f32, 0, 4, 0, 4, 7, T), ACX_ERR_INVALID_ARG); /* stream */
  ACX_ASSERT_STATUS(acx_device_synchronize(dev, 77, T), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_host_alloc(dev, 0, &(acx_host_mem_t *){NULL}), ACX_ERR_INVALID_ARG);
  acx_buffer_release(f32);
  acx_buffer_release(i32);
}

/* Commands that bypass the rank's validation reach the executor, which must still refuse them
 * with the same statuses (a rank bug or a stale id must not corrupt executor memory). */
static void test_bad_commands_reach_executor(void) {
  acx_buffer_t *b = alloc(1024, ACX_DTYPE_BYTE, ACX_MEM_DEVICE);
  acx_host_mem_t *h = NULL;
  ACX_ASSERT_STATUS(acx_host_alloc(dev, 4096, &h), ACX_OK);
  struct {
    acxi_cmd_t cmd;
    acx_status_t want;
  } cases[] = {
      {{.op = ACXI_OP_FILL, .buf = {987654}, .bytes = 4, .arg = {0, 1}}, ACX_ERR_UNKNOWN_BUFFER},
      {{.op = ACXI_OP_FILL, .buf = {b->id}, .off = {1000}, .bytes = 100, .arg = {0, 1}}, ACX_ERR_OUT_OF_RANGE},
      {{.op = ACXI_OP_FILL, .buf = {b->id}, .off = {UINT64_MAX - 1}, .bytes = 4, .arg = {0, 1}}, ACX_ERR_OVERFLOW},
      {{.op = ACXI_OP_FILL, .buf = {b->id}, .bytes = 4, .arg = {0, 3}}, ACX_ERR_INVALID_ARG},
      {{.op = ACXI_OP_COPY_D2D, .buf = {b->id, 424242}, .bytes = 4}, ACX_ERR_UNKNOWN_BUFFER},
      {{.op = ACXI_OP_COPY_D2D, .buf = {b->id, b->id}, .off = {0, 1000}, .bytes = 100}, ACX_ERR_OUT_OF_RANGE},
      {{.op = ACXI_OP_COPY_H2D, .buf = {b->id}, .off = {0, 4000}, .bytes = 200, .arg = {h->id}}, ACX_ERR_OUT_OF_RANGE},
      {{.op = ACXI_OP_COPY_H2D, .buf = {b->id}, .bytes = 4, .arg = {55555}}, ACX_ERR_INVALID_ARG},
      {{.op = ACXI_OP_COPY_D2H, .buf = {0, b->id}, .off = {4095, 0}, .bytes = 2, .arg = {h->id}}, ACX_ERR_OUT_OF_RANGE},
      {{.op = ACXI_OP_ALLOC, .buf = {b->id}, .bytes = 64}, ACX_ERR_INVALID_ARG}, /* id in use */
      {{.op = ACXI_OP_ALLOC, .buf = {777777}, .bytes = UINT64_MAX}, ACX_ERR_OVERFLOW},
      {{.op = ACXI_OP_FREE, .buf = {31337}}, ACX_ERR_UNKNOWN_BUFFER},
      {{.op = ACXI_OP_STREAM_WAIT, .arg = {999}}, ACX_ERR_INVALID_ARG}, /* never recorded */
      {{.op = ACXI_OP_KERNEL_EMPTY, .stream = 99}, ACX_ERR_INVALID_ARG},
      {{.op = 250}, ACX_ERR_INVALID_ARG},                       /* unknown op */
      {{.op = ACXI_OP_EXT_BASE + 0x7777}, ACX_ERR_INVALID_ARG}, /* no such extension */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    acxi_cmd_t c = cases[i].cmd;
    acx_status_t st = acxi_device_call(dev, &c, NULL, 0, 0, -1, T, NULL);
    if (st != cases[i].want)
      printf("\n    case %zu (op %u): %s, expected %s\n", i, c.op, acx_status_name(st), acx_status_name(cases[i].want));
    CU_ASSERT_EQUAL(st, cases[i].want);
  }
  /* The device is fine after all that. */
  ACX_ASSERT_STATUS(acx_device_ping(dev, T), ACX_OK);
  ACX_ASSERT_STATUS(acx_host_free(h), ACX_OK);
  acx_buffer_release(b);
  acx_device_stats_t st = {.size = sizeof st};
  ACX_ASSERT_STATUS(acx_device_stats(dev, &st), ACX_OK);
  CU_ASSERT_EQUAL(st.outstanding, 0);
}

static int setup(void) {
  if (acx_system_create(NULL, &sys) != ACX_OK) return 1;
  acx_device_config_t cfg = ACX_DEVICE_CONFIG_INIT;
  cfg.kind = ACX_DEVICE_KIND_HOST;
  cfg.transport = inline_mode ? ACX_TRANSPORT_INLINE : ACX_TRANSPORT_PROCESS;
  cfg.streams = 2;
  return acx_device_open(sys, &cfg, &dev) == ACX_OK ? 0 : 1;
}

static int teardown(void) {
  acx_device_stats_t st = {.size = sizeof st};
  int bad = acx_device_stats(dev, &st) != ACX_OK || st.buffers_live != 0;
  if (bad) printf("leaked buffers: %llu\n", (unsigned long long)st.buffers_live);
  bad |= acx_device_close(dev, T) != ACX_OK;
  bad |= acx_system_destroy(sys, T) != ACX_OK;
  return bad;
}

int main(int argc, char **argv) {
  inline_mode = argc > 1 && !strcmp(argv[1], "inline");
  static const acx_test_case_t cases[] = {
      ACX_TEST(test_dtypes),      ACX_TEST(test_roundtrip_random),    ACX_TEST(test_fill_widths),
      ACX_TEST(test_d2d),         ACX_TEST(test_managed_and_events),  ACX_TEST(test_device_ptr),
      ACX_TEST(test_bad_arguments), ACX_TEST(test_bad_commands_reach_executor), ACX_TEST_END};
  return acx_test_run(inline_mode ? "buffer-inline" : "buffer-process", cases, setup, teardown);
}
