/* Timers of an actor system: one thread, a min-heap ordered by due time, a condition variable
 * waiting for the earliest deadline. Firing tells the target actor (or, internally, sends it a
 * system message such as a delayed restart). */
#ifndef ACXI_TIMER_H
#define ACXI_TIMER_H
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "acx/actor.h"

typedef struct acxi_timer acxi_timer_t;

typedef struct acxi_timers {
  pthread_mutex_t lock;
  pthread_cond_t cond; /* CLOCK_MONOTONIC */
  acxi_timer_t **heap;
  size_t n, cap;
  uint64_t next_id;
  int stopping;
  int started;
  pthread_t thread;
} acxi_timers_t;

acx_status_t acxi_timers_start(acxi_timers_t *t, const char *name);
/* Stops the thread and drops every pending timer (their target references are released). */
void acxi_timers_stop(acxi_timers_t *t);
/* Schedules a send of (kind, type, status, payload) to `to` after delay_ns, then every period_ns
 * when period_ns > 0. Holds a reference on `to` until the timer ends. */
acx_status_t acxi_timer_add(acxi_timers_t *t, acx_ref_t to, int64_t delay_ns, int64_t period_ns, int kind,
                            uint32_t type, acx_status_t status, const void *payload, size_t len,
                            acx_timer_id_t *id);
/* ACX_ERR_NOT_FOUND when it fired (once) or was cancelled already. */
acx_status_t acxi_timer_cancel(acxi_timers_t *t, acx_timer_id_t id);
#endif
