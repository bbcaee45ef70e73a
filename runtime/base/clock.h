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

static inline void acxi_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}
#endif
