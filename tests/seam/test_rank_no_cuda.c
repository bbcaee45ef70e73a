/* The rank library loads no CUDA (issue 14): a program linked with libacx (the shared library,
 * as users link it) has no CUDA, NCCL or CUDA-library mapping after calling into acx, after
 * opening a host device with an executor process, and after a round trip through it. The inline
 * transport loads the executor library (libacx_exec) on first use, and works. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acx/actor.h"
#include "acx/device.h"
#include "acx/status.h"
#include "acx_test.h"

/* The first mapped file whose name contains one of the CUDA stack's libraries, or "". */
static const char *cuda_mapping(char *out, size_t cap) {
  static const char *const libs[] = {"libcudart", "libcuda.so", "libnccl", "libcublas", "libcufft", "libcurand",
                                     "libcusolver", "libcusparse", "libnvrtc", "libcudnn", "libcutensor"};
  out[0] = 0;
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return out;
  char line[4096];
  while (!out[0] && fgets(line, sizeof line, f))
    for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++)
      if (strstr(line, libs[i])) {
        char *p = strchr(line, '/');
        snprintf(out, cap, "%s", p ? p : line);
        break;
      }
  fclose(f);
  return out;
}

static int mapped(const char *name) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return 0;
  char line[4096];
  int found = 0;
  while (!found && fgets(line, sizeof line, f)) found = strstr(line, name) != NULL;
  fclose(f);
  return found;
}

static void expect_no_cuda(const char *when) {
  char m[4096];
  cuda_mapping(m, sizeof m);
  if (m[0]) printf("\n    %s: mapped %s", when, m);
  CU_ASSERT_STRING_EQUAL(m, "");
}

static void test_status_only(void) {
  CU_ASSERT_PTR_NOT_NULL(strstr(acx_status_str(ACX_ERR_TIMEOUT), "TIMEOUT"));
  expect_no_cuda("after acx_status_str");
  CU_ASSERT_FALSE(mapped("libacx_exec"));
}

static void round_trip(acx_transport_t transport) {
  acx_system_t *sys = NULL;
  ACX_ASSERT_STATUS(acx_system_create(NULL, &sys), ACX_OK);
  acx_device_config_t cfg = ACX_DEVICE_CONFIG_INIT;
  cfg.kind = ACX_DEVICE_KIND_HOST;
  cfg.transport = transport;
  acx_device_t *dev = NULL;
  ACX_ASSERT_STATUS(acx_device_open(sys, &cfg, &dev), ACX_OK);
  acx_buffer_t *buf = NULL;
  ACX_ASSERT_STATUS(acx_buffer_alloc(dev, 4096, ACX_DTYPE_U8, ACX_MEM_DEVICE, 10000000000LL, &buf), ACX_OK);
  unsigned char in[4096], out[4096];
  for (int i = 0; i < 4096; i++) in[i] = (unsigned char)(i * 13 + 5);
  ACX_ASSERT_STATUS(acx_buffer_write(buf, 0, in, sizeof in, 0, 10000000000LL), ACX_OK);
  memset(out, 0, sizeof out);
  ACX_ASSERT_STATUS(acx_buffer_read(buf, 0, out, sizeof out, 0, 10000000000LL), ACX_OK);
  CU_ASSERT_EQUAL(memcmp(in, out, sizeof in), 0);
  acx_buffer_release(buf);
  ACX_ASSERT_STATUS(acx_device_close(dev, 10000000000LL), ACX_OK);
  ACX_ASSERT_STATUS(acx_system_destroy(sys, 10000000000LL), ACX_OK);
}

static void test_process_transport(void) {
  round_trip(ACX_TRANSPORT_PROCESS);
  expect_no_cuda("after a host device with an executor process");
  CU_ASSERT_FALSE(mapped("libacx_exec"));
}

/* Last: it loads the executor library (and, in a CUDA build, the CUDA libraries it links). */
static void test_inline_transport_loads_exec(void) {
  round_trip(ACX_TRANSPORT_INLINE);
  CU_ASSERT_TRUE(mapped("libacx_exec"));
}

int main(void) {
  static const acx_test_case_t cases[] = {ACX_TEST(test_status_only), ACX_TEST(test_process_transport),
                                          ACX_TEST(test_inline_transport_loads_exec), ACX_TEST_END};
  return acx_test_run("rank-no-cuda", cases, NULL, NULL);
}
