/* Futures, runtime side: the continuation hook acx_future_then and acx_ask build on. */
#ifndef ACXI_FUTURE_H
#define ACXI_FUTURE_H
#include "acx/actor.h"

/* Called once, on the completing thread, after the result is visible; or `drop` is called instead
 * when the last reference goes before completion. */
typedef void (*acxi_then_fn)(void *arg, acx_future_t *future, uint64_t cookie);
typedef void (*acxi_drop_fn)(void *arg);

/* Registers a continuation; runs it at once (on the caller) when already complete. */
acx_status_t acxi_future_on_complete(acx_future_t *future, acxi_then_fn fn, acxi_drop_fn drop, void *arg,
                                     uint64_t cookie);
int acxi_future_is_done(acx_future_t *future);
#endif
