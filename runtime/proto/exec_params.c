/* Executor settings both sides read the same way: the busy-poll window and the fault-injection
 * schedule (runtime/proto/exec_api.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/log.h"
#include "runtime/base/param.h"
#include "runtime/proto/exec_api.h"

int64_t acxi_exec_spin_ns(const char *kind) {
  int64_t v = acxi_param_int("ACX_EXEC_SPIN_NS");
  if (v >= 0) return v;
  return kind && strcmp(kind, "cuda") == 0 ? 5000000 : 100000;
}

int64_t acxi_exec_nap_ns(void) {
  int64_t v = acxi_param_int("ACX_EXEC_NAP_NS");
  return v < 0 || v > ACXI_EXEC_NAP_MAX_NS ? 0 : v;
}

acx_status_t acxi_fault_schedule(const char *spec, uint64_t generation, uint64_t *nth) {
  ACX_CHECK_NULL(nth);
  *nth = 0;
  if (!spec || !*spec) return ACX_OK;
  int once = 0;
  const char *num;
  if (strncmp(spec, "cmd:", 4) == 0) {
    num = spec + 4;
  } else if (strncmp(spec, "once:", 5) == 0) {
    num = spec + 5;
    once = 1;
  } else {
    ACX_WARN(EXEC, "ACX_FAULT_INJECT='%s': expected 'cmd:N' or 'once:N'", spec);
    return ACX_ERR_BAD_PARAM;
  }
  char *end;
  errno = 0;
  unsigned long long n = strtoull(num, &end, 10);
  if (errno || end == num || *end || n == 0 || *num == '-') {
    ACX_WARN(EXEC, "ACX_FAULT_INJECT='%s': N must be a positive integer", spec);
    return ACX_ERR_BAD_PARAM;
  }
  *nth = once && generation != 1 ? 0 : n;
  return ACX_OK;
}
