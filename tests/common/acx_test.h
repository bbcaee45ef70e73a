/* Test support: a CUnit runner that exits non-zero on any failure, and the skip convention
 * (exit 77, reported by ctest as skipped, never as passed). */
#ifndef ACX_TEST_H
#define ACX_TEST_H
#include <CUnit/Basic.h>
#include <stdint.h>

#define ACX_TEST_SKIP 77

typedef struct acx_test_case {
  const char *name;
  void (*fn)(void);
} acx_test_case_t;

/* Runs the cases as one suite named `suite`; returns the process exit status (0 = all passed). */
int acx_test_run(const char *suite, const acx_test_case_t *cases, int (*setup)(void), int (*teardown)(void));
/* Prints why and exits 77. */
void acx_test_skip(const char *why) __attribute__((noreturn));
/* Fills buf with bytes from a seeded xorshift generator (never all zeros). */
void acx_test_fill_random(void *buf, size_t bytes, uint64_t seed);

/* Log capture: from acx_test_log_begin to acx_test_log_end this process's log lines (WARN and
 * above) go to a temporary file (ACX_DEBUG_FILE); end restores ACX_DEBUG and ACX_DEBUG_FILE as they
 * were and returns the lines (malloc'd, NUL-terminated, never NULL; the caller frees). */
void acx_test_log_begin(void);
char *acx_test_log_end(void);

#define ACX_TEST(fn) {#fn, fn}
#define ACX_TEST_END {NULL, NULL}
/* Asserts a status equals the expected one, printing both names on failure. */
#define ACX_ASSERT_STATUS(call, expected) CU_ASSERT_EQUAL_FATAL(acx_test_status_check((call), (expected), #call, __FILE__, __LINE__), 1)
/* The same, not fatal: for checks after which the ranks of an MPI test must stay in step (a fatal
 * assertion sends one rank on to the next test while the others wait in this one's MPI calls). */
#define ACX_CHECK_STATUS(call, expected) CU_ASSERT_EQUAL(acx_test_status_check((call), (expected), #call, __FILE__, __LINE__), 1)
int acx_test_status_check(int got, int expected, const char *expr, const char *file, int line);

/* MPI tests (tests/common/acx_test_world.c): opens the device described by cfg on every rank of
 * MPI_COMM_WORLD (cuda: this rank's GPU by the world's binding, unless cfg names one) and agrees:
 * 0 when every rank has it; ACX_TEST_SKIP where a rank has no GPU (cuda; rank 0 says so); 1 when
 * the open failed otherwise (logged). On 77 and 1 the device is closed, *dev NULL, sys destroyed,
 * the world finalized and MPI finalized: the caller returns the value from main. */
struct acx_world;
struct acx_system;
struct acx_device;
struct acx_device_config;
int acx_test_open_device(struct acx_world *world, struct acx_system *sys, struct acx_device_config *cfg,
                         const char *prog, struct acx_device **dev);
#endif
