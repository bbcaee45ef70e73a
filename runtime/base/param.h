/* The parameter registry: every ACX_* variable is declared in the table of param.c, read once
 * (on first use) and cached. Internal users call acxi_param_int / acxi_param_str by name. */
#ifndef ACXI_PARAM_H
#define ACXI_PARAM_H
#include <stdint.h>

#include "acx/config.h"

/* Value of a registered integer parameter; an unknown name is a programming error (aborts in
 * debug builds, logs and returns 0 otherwise). */
int64_t acxi_param_int(const char *name);
const char *acxi_param_str(const char *name);
#endif
