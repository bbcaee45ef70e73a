/* acx parameters and logging: every tunable is an ACX_* environment variable read in one
 * registry (runtime/base/param.c), listed by `acx-info` and in docs/environment.md. */
#ifndef ACX_CONFIG_H
#define ACX_CONFIG_H

/* Exported from libacx, which hides everything else (cmake/libacx.map). */
#pragma GCC visibility push(default)

#include <stddef.h>
#include <stdint.h>

#include "acx/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum acx_param_type { ACX_PARAM_INT, ACX_PARAM_STRING } acx_param_type_t;

typedef struct acx_param_info {
  const char *name;        /* "ACX_THREADS" */
  acx_param_type_t type;
  const char *default_str; /* default as text */
  const char *help;        /* one line */
  const char *value_str;   /* the value in effect, as text (environment or default) */
  int from_env;            /* 1 when the environment set it */
} acx_param_info_t;

/* Number of registered parameters. Any thread. */
size_t acx_param_count(void);
/* Describes parameter i (0 <= i < acx_param_count()). ACX_ERR_OUT_OF_RANGE past the end,
 * ACX_ERR_NULL_ARG without info. Any thread. */
acx_status_t acx_param_info(size_t i, acx_param_info_t *info);
/* Integer value of a registered parameter by name; ACX_ERR_NOT_FOUND for an unknown name,
 * ACX_ERR_BAD_PARAM when the environment holds a non-integer (logged, default used). */
acx_status_t acx_param_get_int(const char *name, int64_t *value);
/* String value (environment or default; may be ""). Pointer valid for the process lifetime. */
acx_status_t acx_param_get_str(const char *name, const char **value);

/* Log levels, NCCL style: ACX_DEBUG=NONE|VERSION|WARN|INFO|TRACE. */
typedef enum acx_log_level {
  ACX_LOG_NONE = 0,
  ACX_LOG_VERSION = 1,
  ACX_LOG_WARN = 2,
  ACX_LOG_INFO = 3,
  ACX_LOG_TRACE = 4
} acx_log_level_t;

/* Tags every later log line of this process with an MPI rank (-1: none). Any thread. */
void acx_log_set_rank(int rank);
/* Re-reads ACX_DEBUG, ACX_DEBUG_SUBSYS and ACX_DEBUG_FILE (tests change them). Not thread-safe
 * against concurrent logging. */
void acx_log_reinit(void);

/* Library version, e.g. "0.1.0"; the numeric code matches ACX_VERSION of acx/version.h. */
const char *acx_version(int *code);

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif
