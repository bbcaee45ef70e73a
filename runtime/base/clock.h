/* Monotonic time in nanoseconds; every deadline in acx is CLOCK_MONOTONIC based. */
#ifndef ACXI_CLOCK_H
#define ACXI_CLOCK_H
#include <stdint.h>
#include <time.h>

static inline int64_t acxi_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Deadline from a relative timeout, saturating instead of overflowing. */
static inline int64_t acxi_deadline(int64_t timeout_ns) {
  int64_t now = acxi_now_ns();
  return timeout_ns > INT64_MAX - now ? INT64_MAX : now + timeout_ns;
}

/* What is left until deadline, at least 1 ms: a call that is out of time still gets one try
 * (and fails with its own timeout status) rather than a zero or negative timeout. */
static inline int64_t acxi_left_ns(int64_t deadline) {
  int64_t l = deadline - acxi_now_ns();
  return l > 1000000 ? l : 1000000;
}

static inline struct timespec acxi_ts_from_ns(int64_t ns) {
  struct timespec ts = {.tv_sec = ns / 1000000000LL, .tv_nsec = ns % 1000000000LL};
  return ts;
}

/* A nap for a loop that polls for what another thread or process will do, growing with how long
 * the loop has waited: short_ns in the first millisecond (the answer may come at once), then
 * 200 us up to 20 ms, then 1 ms. A wait that lasts means a late peer or a busy node; polling it
 * at tens of kHz gains nothing and takes the cores the peers need (on a 2-core machine running
 * two 4-rank tests with their executors, such loops kept sleeping threads off the cores for tens
 * of seconds under Linux 6.18). */
static inline void acxi_poll_nap(int64_t waited_ns, long short_ns) {
  struct timespec ts = {0, waited_ns < 1000000 ? short_ns : waited_ns < 20000000 ? 200000 : 1000000};
  nanosleep(&ts, NULL);
}

static inline void acxi_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}
#endif
