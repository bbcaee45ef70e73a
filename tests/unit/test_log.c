/* runtime/base/log.c: per-process log files (ACX_DEBUG_FILE with %h and %p), the line format with
 * host, pid and rank, the level filter, and the fallback to stderr when the file cannot open. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "acx/config.h"
#include "acx_test.h"

static char dir[256]; /* short: runtime/base/log.c expands the pattern into 512 bytes */
static char host[64];

static int setup(void) {
  snprintf(dir, sizeof dir, "%s/acx-test-log.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(dir)) return 1;
  gethostname(host, sizeof host - 1);
  char *dot = strchr(host, '.'); /* the log uses the short host name */
  if (dot) *dot = '\0';
  return 0;
}

static int teardown(void) {
  unsetenv("ACX_DEBUG_FILE");
  unsetenv("ACX_DEBUG");
  acx_log_set_rank(-1);
  acx_log_reinit(); /* back to stderr, closing the test's files */
  char cmd[PATH_MAX + 16];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  return system(cmd) == 0 ? 0 : 1;
}

/* Reads the whole file into a static buffer; NULL when it does not exist. */
static const char *slurp(const char *path) {
  static char buf[1 << 16];
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

/* Logs one warning through a public API that warns: a NULL argument. */
static void provoke_warning(void) {
  int64_t v;
  ACX_ASSERT_STATUS(acx_param_get_int(NULL, &v), ACX_ERR_NULL_ARG);
}

static void test_file_per_host_and_pid(void) {
  char pattern[PATH_MAX], path[PATH_MAX];
  snprintf(pattern, sizeof pattern, "%s/acx.%%h.%%p.log", dir);
  snprintf(path, sizeof path, "%s/acx.%s.%d.log", dir, host, (int)getpid());
  setenv("ACX_DEBUG_FILE", pattern, 1);
  setenv("ACX_DEBUG", "WARN", 1);
  acx_log_reinit();
  provoke_warning();
  const char *text = slurp(path);
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "ACX WARN"));
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "argument 'name' is NULL"));
  /* The line starts with host:pid: so merged files of many ranks stay attributable. */
  char prefix[128];
  snprintf(prefix, sizeof prefix, "%s:%d:", host, (int)getpid());
  CU_ASSERT_EQUAL(strncmp(text, prefix, strlen(prefix)), 0);
}

static void test_rank_in_line(void) {
  char pattern[PATH_MAX], path[PATH_MAX];
  snprintf(pattern, sizeof pattern, "%s/rank.%%p.log", dir);
  snprintf(path, sizeof path, "%s/rank.%d.log", dir, (int)getpid());
  setenv("ACX_DEBUG_FILE", pattern, 1);
  acx_log_reinit();
  acx_log_set_rank(3);
  provoke_warning();
  acx_log_set_rank(-1);
  const char *text = slurp(path);
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  CU_ASSERT_PTR_NOT_NULL(strstr(text, " [3] ACX WARN "));
}

static void test_level_none_writes_nothing(void) {
  char pattern[PATH_MAX], path[PATH_MAX];
  snprintf(pattern, sizeof pattern, "%s/quiet.%%p.log", dir);
  snprintf(path, sizeof path, "%s/quiet.%d.log", dir, (int)getpid());
  setenv("ACX_DEBUG_FILE", pattern, 1);
  setenv("ACX_DEBUG", "NONE", 1);
  acx_log_reinit();
  provoke_warning();
  const char *text = slurp(path);
  CU_ASSERT_PTR_NOT_NULL_FATAL(text); /* opened, since ACX_DEBUG_FILE names it */
  CU_ASSERT_STRING_EQUAL(text, "");
  setenv("ACX_DEBUG", "WARN", 1);
}

static void test_unwritable_file_falls_back(void) {
  char pattern[PATH_MAX], missing_dir[512];
  snprintf(missing_dir, sizeof missing_dir, "%s/no-such-dir", dir);
  snprintf(pattern, sizeof pattern, "%s/acx.%%p.log", missing_dir);
  setenv("ACX_DEBUG_FILE", pattern, 1);
  acx_log_reinit(); /* says so on stderr and logs there */
  provoke_warning();
  struct stat st;
  CU_ASSERT_NOT_EQUAL(stat(missing_dir, &st), 0);
}

int main(void) {
  static const acx_test_case_t cases[] = {ACX_TEST(test_file_per_host_and_pid), ACX_TEST(test_rank_in_line),
                                          ACX_TEST(test_level_none_writes_nothing),
                                          ACX_TEST(test_unwritable_file_falls_back), ACX_TEST_END};
  return acx_test_run("log", cases, setup, teardown);
}
