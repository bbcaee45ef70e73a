/* Internal logging and check macros, NCCL style. A line reads
 *   host:pid:tid [rank] ACX WARN SUBSYS file:line message
 * ACX_DEBUG selects the level, ACX_DEBUG_SUBSYS a comma list of subsystems (ALL by default,
 * ^X excludes), ACX_DEBUG_FILE a file name where %h is the host and %p the pid. Warnings are
 * printed whatever ACX_DEBUG_SUBSYS says. */
#ifndef ACXI_LOG_H
#define ACXI_LOG_H

#include <errno.h>
#include <string.h>

#include "acx/config.h"
#include "acx/status.h"

typedef enum acxi_subsys {
  ACXI_SUB_INIT = 1u << 0,
  ACXI_SUB_ACTOR = 1u << 1,
  ACXI_SUB_SCHED = 1u << 2,
  ACXI_SUB_DEVICE = 1u << 3,
  ACXI_SUB_EXEC = 1u << 4,
  ACXI_SUB_BUFFER = 1u << 5,
  ACXI_SUB_COLL = 1u << 6,
  ACXI_SUB_TOPO = 1u << 7,
  ACXI_SUB_TOKEN = 1u << 8,
  ACXI_SUB_LIB = 1u << 9,
  ACXI_SUB_ALL = 0xffffffffu
} acxi_subsys_t;

extern int acxi_log_level_cached; /* -1 until initialised */
void acxi_log_init_once(void);
void acxi_log(acx_log_level_t lvl, unsigned subsys, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
int acxi_log_enabled(acx_log_level_t lvl, unsigned subsys);
/* The rank set by acx_log_set_rank, -1 before. */
int acxi_log_rank(void);

#define ACXI_LOG(lvl, sub, ...)                                          \
  do {                                                                   \
    if (acxi_log_enabled((lvl), (sub)))                                  \
      acxi_log((lvl), (sub), __FILE__, __LINE__, __VA_ARGS__);           \
  } while (0)
#define ACX_WARN(sub, ...) ACXI_LOG(ACX_LOG_WARN, ACXI_SUB_##sub, __VA_ARGS__)
#define ACX_INFO(sub, ...) ACXI_LOG(ACX_LOG_INFO, ACXI_SUB_##sub, __VA_ARGS__)
#define ACX_TRACE(sub, ...) ACXI_LOG(ACX_LOG_TRACE, ACXI_SUB_##sub, __VA_ARGS__)

/* Argument checks: log the argument's name once, where the error starts, and return. The line
 * names __func__ and #p, so ACX_CHECK_NULL belongs in the public function the user called, with
 * the parameter spelled as in the public header (tests/logging/check_log_names.py checks both);
 * ACX_CHECK_NULL_AS names a parameter whose variable is spelled otherwise, and ACX_CHECK_NULL_IN a
 * helper's caller. */
#define ACX_CHECK_NULL_IN(fn, p, name)                                            \
  do {                                                                            \
    if ((p) == NULL) {                                                            \
      ACX_WARN(ALL, "%s: argument '%s' is NULL", (fn), (name));                   \
      return ACX_ERR_NULL_ARG;                                                    \
    }                                                                             \
  } while (0)
#define ACX_CHECK_NULL_AS(p, name) ACX_CHECK_NULL_IN(__func__, p, name)
#define ACX_CHECK_NULL(p) ACX_CHECK_NULL_IN(__func__, p, #p)
#define ACX_CHECK_ARG(cond, ...)                                                  \
  do {                                                                            \
    if (!(cond)) {                                                                \
      ACX_WARN(ALL, __VA_ARGS__);                                                 \
      return ACX_ERR_INVALID_ARG;                                                 \
    }                                                                             \
  } while (0)

/* Propagate a status: ACXCHECK returns it, ACXCHECKGOTO stores it in `res` and jumps. */
#define ACXCHECK(call)                                                            \
  do {                                                                            \
    acx_status_t acxi_s_ = (call);                                                \
    if (acxi_s_ != ACX_OK) return acxi_s_;                                        \
  } while (0)
#define ACXCHECKGOTO(call, res, label)                                            \
  do {                                                                            \
    (res) = (call);                                                               \
    if ((res) != ACX_OK) goto label;                                              \
  } while (0)

/* OS calls returning -1 with errno: log the call's text and errno once. */
#define SYSCHECKGOTO(call, res, label)                                            \
  do {                                                                            \
    if ((call) == -1) {                                                           \
      ACX_WARN(ALL, "%s failed: %s", #call, strerror(errno));                     \
      (res) = ACX_ERR_SYSTEM;                                                     \
      goto label;                                                                 \
    }                                                                             \
  } while (0)

#endif
