/* CUnit runner and helpers shared by the acx tests. */
#include "acx_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acx/config.h"

#include "acx/status.h"

int acx_test_run(const char *suite, const acx_test_case_t *cases, int (*setup)(void), int (*teardown)(void)) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 1;
  CU_pSuite s = CU_add_suite(suite, setup, teardown);
  if (!s) return 1;
  /* ACX_TEST_ONLY=name[,name...]: run only those cases (to chase one failure). */
  const char *only = getenv("ACX_TEST_ONLY");
  for (const acx_test_case_t *c = cases; c->name; c++) {
    if (only && *only) {
      size_t n = strlen(c->name);
      const char *p = only;
      while ((p = strstr(p, c->name)) && !((p == only || p[-1] == ',') && (p[n] == ',' || p[n] == 0))) p += n;
      if (!p) continue;
    }
    if (!CU_add_test(s, c->name, c->fn)) return 1;
  }
  CU_basic_set_mode(CU_BRM_VERBOSE);
  CU_basic_run_tests();
  unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
  unsigned suites_failed = CU_get_number_of_suites_failed();
  unsigned ran = CU_get_number_of_tests_run();
  CU_cleanup_registry();
  if (ran == 0 || suites_failed) return 1;
  return failed ? 1 : 0;
}

void acx_test_skip(const char *why) {
  printf("SKIP: %s\n", why);
  fflush(stdout);
  exit(ACX_TEST_SKIP);
}

void acx_test_fill_random(void *buf, size_t bytes, uint64_t seed) {
  uint64_t x = seed ? seed : 0x9e3779b97f4a7c15ull;
  unsigned char *p = buf;
  for (size_t i = 0; i < bytes; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = (unsigned char)(x >> 24);
  }
}

int acx_test_status_check(int got, int expected, const char *expr, const char *file, int line) {
  if (got == expected) return 1;
  fprintf(stderr, "%s:%d: %s returned %s, expected %s\n", file, line, expr,
          acx_status_name((acx_status_t)got), acx_status_name((acx_status_t)expected));
  return 0;
}

static char log_path[64];
static char *log_saved_level, *log_saved_file;

static char *dup_env(const char *name) {
  const char *v = getenv(name);
  return v ? strdup(v) : NULL;
}

static void restore_env(const char *name, char *value) {
  if (value) setenv(name, value, 1);
  else unsetenv(name);
  free(value);
}

void acx_test_log_begin(void) {
  snprintf(log_path, sizeof log_path, "/tmp/acx-test-log-XXXXXX");
  int fd = mkstemp(log_path);
  if (fd < 0) {
    perror("acx_test_log_begin: mkstemp");
    exit(1);
  }
  close(fd);
  log_saved_level = dup_env("ACX_DEBUG");
  log_saved_file = dup_env("ACX_DEBUG_FILE");
  setenv("ACX_DEBUG_FILE", log_path, 1);
  setenv("ACX_DEBUG", "WARN", 1);
  acx_log_reinit();
}

char *acx_test_log_end(void) {
  restore_env("ACX_DEBUG", log_saved_level);
  restore_env("ACX_DEBUG_FILE", log_saved_file);
  log_saved_level = log_saved_file = NULL;
  acx_log_reinit(); /* closes the capture file: every line is in it */
  FILE *f = fopen(log_path, "r");
  size_t cap = 1 << 16, n = 0;
  char *text = calloc(cap, 1);
  if (f && text) {
    n = fread(text, 1, cap - 1, f);
    text[n] = '\0';
  }
  if (f) fclose(f);
  unlink(log_path);
  if (!text) {
    fprintf(stderr, "acx_test_log_end: out of memory\n");
    exit(1);
  }
  return text;
}
