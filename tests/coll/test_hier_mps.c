/* acxc_hier_mps (collectives/hier_coll.c): where a hierarchical coll looks for an MPS control
 * daemon before it warns that ranks share a GPU without one. A directory without `control`, one
 * with it (a FIFO, as the daemon makes), an unset and an empty CUDA_MPS_PIPE_DIRECTORY (the
 * default directory is reported; whether it holds a daemon is this machine's business). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "acx_test.h"
#include "collectives/coll_internal.h"

/* The test's private pipe directory: a mkdtemp template, made unique by main() before the tests. */
static char tmp[] = "/tmp/acx-mps-test-XXXXXX";

static void test_no_daemon(void) {
  char dir[256] = "";
  CU_ASSERT_EQUAL(setenv("CUDA_MPS_PIPE_DIRECTORY", tmp, 1), 0);
  CU_ASSERT_EQUAL(acxc_hier_mps(dir, sizeof dir), 0);
  CU_ASSERT_STRING_EQUAL(dir, tmp);
  CU_ASSERT_EQUAL(acxc_hier_mps(NULL, 0), 0);
}

static void test_daemon(void) {
  char path[128], dir[256] = "";
  snprintf(path, sizeof path, "%s/control", tmp);
  CU_ASSERT_EQUAL_FATAL(mkfifo(path, 0600), 0);
  CU_ASSERT_EQUAL(setenv("CUDA_MPS_PIPE_DIRECTORY", tmp, 1), 0);
  CU_ASSERT_EQUAL(acxc_hier_mps(dir, sizeof dir), 1);
  CU_ASSERT_STRING_EQUAL(dir, tmp);
  /* A short buffer gets what fits; the answer does not depend on it. */
  char small[4];
  CU_ASSERT_EQUAL(acxc_hier_mps(small, sizeof small), 1);
  CU_ASSERT_EQUAL(strlen(small), 3u);
  CU_ASSERT_EQUAL(unlink(path), 0);
  CU_ASSERT_EQUAL(acxc_hier_mps(NULL, 0), 0);
}

static void test_default_directory(void) {
  char dir[256] = "";
  CU_ASSERT_EQUAL(unsetenv("CUDA_MPS_PIPE_DIRECTORY"), 0);
  int a = acxc_hier_mps(dir, sizeof dir);
  CU_ASSERT_STRING_EQUAL(dir, "/tmp/nvidia-mps");
  CU_ASSERT_EQUAL(setenv("CUDA_MPS_PIPE_DIRECTORY", "", 1), 0);
  CU_ASSERT_EQUAL(acxc_hier_mps(dir, sizeof dir), a);
  CU_ASSERT_STRING_EQUAL(dir, "/tmp/nvidia-mps");
}

int main(void) {
  if (!mkdtemp(tmp)) {
    perror("mkdtemp");
    return 1;
  }
  static const acx_test_case_t cases[] = {ACX_TEST(test_no_daemon), ACX_TEST(test_daemon),
                                          ACX_TEST(test_default_directory), ACX_TEST_END};
  int rc = acx_test_run("hier_mps", cases, NULL, NULL);
  rmdir(tmp);
  return rc;
}
