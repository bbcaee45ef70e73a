/* Thin futex wrappers: the park/wake primitive under futures and idle workers. A wake is only
 * issued by callers that saw a parked flag, so the uncontended paths make no syscall. */
#ifndef ACXI_FUTEX_H
#define ACXI_FUTEX_H
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Sleeps while *addr == val, at most rel_ns (>0). Spurious returns are fine: callers loop. */
static inline void acxi_futex_wait(_Atomic uint32_t *addr, uint32_t val, int64_t rel_ns) {
  struct timespec ts = {.tv_sec = rel_ns / 1000000000LL, .tv_nsec = rel_ns % 1000000000LL};
  syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, val, &ts, NULL, 0);
}

static inline void acxi_futex_wake(_Atomic uint32_t *addr, int n) {
  syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}
#endif
