/* Timer thread: a binary min-heap of due times under one mutex; the thread sleeps on a
 * CLOCK_MONOTONIC condition variable until the earliest due time or a new earlier timer.
 * Sends happen under the lock so that a cancel that returns ACX_OK guarantees no later firing. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/actor/actor_internal.h"
#include "runtime/base/clock.h"
#include "runtime/base/log.h"
#include "runtime/actor/timer.h"

struct acxi_timer {
  int64_t due;
  int64_t period;
  acx_timer_id_t id;
  acx_ref_t to;
  int kind;
  uint32_t type;
  acx_status_t status;
  size_t len;
  unsigned char payload[];
};

static void heap_swap(acxi_timers_t *t, size_t a, size_t b) {
  acxi_timer_t *x = t->heap[a];
  t->heap[a] = t->heap[b];
  t->heap[b] = x;
}

static void sift_up(acxi_timers_t *t, size_t i) {
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (t->heap[p]->due <= t->heap[i]->due) break;
    heap_swap(t, p, i);
    i = p;
  }
}

static void sift_down(acxi_timers_t *t, size_t i) {
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < t->n && t->heap[l]->due < t->heap[m]->due) m = l;
    if (r < t->n && t->heap[r]->due < t->heap[m]->due) m = r;
    if (m == i) return;
    heap_swap(t, m, i);
    i = m;
  }
}

static acxi_timer_t *heap_remove(acxi_timers_t *t, size_t i) {
  acxi_timer_t *x = t->heap[i];
  t->heap[i] = t->heap[--t->n];
  if (i < t->n) {
    sift_down(t, i);
    sift_up(t, i);
  }
  return x;
}

static void timer_free(acxi_timer_t *x) {
  acx_ref_release(x->to);
  free(x);
}

static void *timer_main(void *arg) {
  acxi_timers_t *t = arg;
  pthread_mutex_lock(&t->lock);
  while (!t->stopping) {
    int64_t now = acxi_now_ns();
    if (t->n == 0 || t->heap[0]->due > now) {
      /* an idle timer thread still wakes every second: no wait without a deadline */
      int64_t until = t->n ? t->heap[0]->due : now + 1000000000LL;
      struct timespec ts = acxi_ts_from_ns(until);
      pthread_cond_timedwait(&t->cond, &t->lock, &ts);
      continue;
    }
    acxi_timer_t *x = t->heap[0];
    acx_status_t s = acxi_send(x->to, x->kind, x->type, x->status, x->payload, x->len);
    if (x->period > 0 && s != ACX_ERR_ACTOR_STOPPED) {
      x->due += x->period;
      if (x->due < now) x->due = now + x->period; /* fell behind: skip, do not burst */
      sift_down(t, 0);
    } else {
      heap_remove(t, 0);
      timer_free(x);
    }
  }
  pthread_mutex_unlock(&t->lock);
  return NULL;
}

acx_status_t acxi_timers_start(acxi_timers_t *t, const char *name) {
  memset(t, 0, sizeof *t);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&t->cond, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_init(&t->lock, NULL);
  t->next_id = 1;
  int rc = pthread_create(&t->thread, NULL, timer_main, t);
  if (rc != 0) {
    ACX_WARN(ACTOR, "pthread_create of the timer thread failed: %s", strerror(rc));
    pthread_cond_destroy(&t->cond);
    pthread_mutex_destroy(&t->lock);
    return ACX_ERR_SYSTEM;
  }
  char tname[32]; /* the kernel keeps 15 characters */
  snprintf(tname, sizeof tname, "%.8s-tmr", name ? name : "acx");
  tname[15] = '\0';
  pthread_setname_np(t->thread, tname);
  t->started = 1;
  return ACX_OK;
}

void acxi_timers_stop(acxi_timers_t *t) {
  if (!t->started) return;
  pthread_mutex_lock(&t->lock);
  t->stopping = 1;
  pthread_cond_signal(&t->cond);
  pthread_mutex_unlock(&t->lock);
  pthread_join(t->thread, NULL); /* bounded: the thread only ever blocks in a timed wait */
  t->started = 0;
  while (t->n) timer_free(heap_remove(t, t->n - 1));
  free(t->heap);
  t->heap = NULL;
  pthread_cond_destroy(&t->cond);
  pthread_mutex_destroy(&t->lock);
}

acx_status_t acxi_timer_add(acxi_timers_t *t, acx_ref_t to, int64_t delay_ns, int64_t period_ns, int kind,
                            uint32_t type, acx_status_t status, const void *payload, size_t len,
                            acx_timer_id_t *id) {
  acxi_timer_t *x = malloc(sizeof *x + len);
  if (!x) {
    ACX_WARN(ACTOR, "timer: out of memory");
    return ACX_ERR_NO_MEMORY;
  }
  x->period = period_ns;
  x->kind = kind;
  x->type = type;
  x->status = status;
  x->len = len;
  if (len) memcpy(x->payload, payload, len);
  x->to = to;
  acx_ref_hold(to);
  x->due = acxi_deadline(delay_ns);
  pthread_mutex_lock(&t->lock);
  if (t->stopping || !t->started) {
    pthread_mutex_unlock(&t->lock);
    timer_free(x);
    return ACX_ERR_SYSTEM_STOPPING;
  }
  if (t->n == t->cap) {
    size_t cap = t->cap ? 2 * t->cap : 64;
    acxi_timer_t **h = realloc(t->heap, cap * sizeof *h);
    if (!h) {
      pthread_mutex_unlock(&t->lock);
      timer_free(x);
      ACX_WARN(ACTOR, "timer: out of memory");
      return ACX_ERR_NO_MEMORY;
    }
    t->heap = h;
    t->cap = cap;
  }
  x->id = t->next_id++;
  t->heap[t->n++] = x;
  sift_up(t, t->n - 1);
  if (t->heap[0] == x) pthread_cond_signal(&t->cond);
  if (id) *id = x->id;
  pthread_mutex_unlock(&t->lock);
  return ACX_OK;
}

acx_status_t acxi_timer_cancel(acxi_timers_t *t, acx_timer_id_t id) {
  acxi_timer_t *x = NULL;
  pthread_mutex_lock(&t->lock);
  for (size_t i = 0; i < t->n; i++)
    if (t->heap[i]->id == id) {
      x = heap_remove(t, i);
      break;
    }
  pthread_mutex_unlock(&t->lock);
  if (!x) return ACX_ERR_NOT_FOUND;
  timer_free(x);
  return ACX_OK;
}
