/* CUnit runner and helpers shared by the acx tests. */
#include "acx_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
