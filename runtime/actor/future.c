/* Futures: a one-shot cell holding a status and a payload. Completing one is an atomic claim, a
 * copy and one atomic exchange; a futex wake follows only when a waiter has parked. Waiters spin
 * for ACX_SPIN_NS, then park on the futex with their deadline. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "acx/actor.h"
#include "runtime/base/clock.h"
#include "runtime/actor/future.h"
#include "runtime/base/futex.h"
#include "runtime/base/log.h"
#include "runtime/base/param.h"

enum { PENDING = 0, PARKED = 1, DONE = 2 };
#define FUTURE_INLINE 48
#define THENS_CLOSED ((then_t *)(uintptr_t)1)

typedef struct then {
  struct then *next;
  acxi_then_fn fn;
  acxi_drop_fn drop;
  void *arg;
  uint64_t cookie;
} then_t;

struct acx_future {
  _Atomic uint32_t word; /* PENDING, PARKED (a waiter sleeps on it) or DONE; the futex word */
  _Atomic int claimed;   /* first acx_future_complete wins */
  _Atomic int refs;
  _Atomic(then_t *) thens; /* Treiber stack of continuations; THENS_CLOSED once completed */
  acx_status_t status;
  size_t len;
  void *payload; /* inline_buf or heap */
  unsigned char inline_buf[FUTURE_INLINE];
};

static int64_t spin_ns(void) {
  static _Atomic int64_t cached = -1;
  /* relaxed: the value is the same whichever thread reads it first */
  int64_t v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (v < 0) {
    v = acxi_param_int("ACX_SPIN_NS");
    if (v < 0) v = 0;
    atomic_store_explicit(&cached, v, memory_order_relaxed);
  }
  return v;
}

acx_status_t acx_future_create(acx_future_t **future) {
  ACX_CHECK_NULL(future);
  acx_future_t *f = malloc(sizeof *f);
  if (!f) {
    ACX_WARN(ACTOR, "acx_future_create: out of memory");
    return ACX_ERR_NO_MEMORY;
  }
  atomic_init(&f->word, PENDING);
  atomic_init(&f->claimed, 0);
  atomic_init(&f->refs, 1);
  atomic_init(&f->thens, NULL);
  f->status = ACX_OK;
  f->len = 0;
  f->payload = f->inline_buf;
  *future = f;
  return ACX_OK;
}

acx_status_t acx_future_hold(acx_future_t *future) {
  ACX_CHECK_NULL(future);
  /* relaxed: the caller already owns a reference, so the object cannot go away meanwhile */
  atomic_fetch_add_explicit(&future->refs, 1, memory_order_relaxed);
  return ACX_OK;
}

void acx_future_release(acx_future_t *future) {
  if (!future) return;
  /* acq_rel: the last releaser must see every other holder's writes before freeing */
  if (atomic_fetch_sub_explicit(&future->refs, 1, memory_order_acq_rel) != 1) return;
  /* acquire: pairs with the release of the CAS in acxi_future_on_complete */
  then_t *t = atomic_load_explicit(&future->thens, memory_order_acquire);
  if (t != THENS_CLOSED) {
    while (t) {
      then_t *next = t->next;
      if (t->drop) t->drop(t->arg);
      free(t);
      t = next;
    }
  }
  if (future->payload != future->inline_buf) free(future->payload);
  free(future);
}

int acxi_future_is_done(acx_future_t *future) {
  /* acquire: a true answer lets the caller read the status and payload */
  return atomic_load_explicit(&future->word, memory_order_acquire) == DONE;
}

acx_status_t acx_future_complete(acx_future_t *future, acx_status_t status, const void *payload, size_t len) {
  ACX_CHECK_NULL(future);
  ACX_CHECK_ARG(payload || len == 0, "acx_future_complete: argument 'payload' is NULL with len %zu", len);
  /* relaxed: only decides who writes; the result is published by the release exchange below */
  if (atomic_exchange_explicit(&future->claimed, 1, memory_order_relaxed)) return ACX_ERR_INVALID_STATE;
  /* a woken waiter may drop its reference at once: keep the future alive until we are done */
  acx_future_hold(future);
  future->status = status;
  if (len > FUTURE_INLINE) {
    future->payload = malloc(len);
    if (!future->payload) {
      ACX_WARN(ACTOR, "acx_future_complete: no memory for a %zu-byte payload", len);
      future->payload = future->inline_buf;
      future->status = ACX_ERR_NO_MEMORY;
      len = 0;
    }
  }
  if (len) memcpy(future->payload, payload, len);
  future->len = len;
  /* release: waiters that read DONE with acquire see status and payload */
  if (atomic_exchange_explicit(&future->word, DONE, memory_order_release) == PARKED)
    acxi_futex_wake(&future->word, INT_MAX);
  /* acq_rel: acquire sees the continuations' fields (pushed with release); release lets a later
   * registrant that reads CLOSED see the result before running its continuation itself */
  then_t *t = atomic_exchange_explicit(&future->thens, THENS_CLOSED, memory_order_acq_rel);
  then_t *rev = NULL; /* run in registration order */
  while (t) {
    then_t *next = t->next;
    t->next = rev;
    rev = t;
    t = next;
  }
  while (rev) {
    then_t *next = rev->next;
    rev->fn(rev->arg, future, rev->cookie);
    free(rev);
    rev = next;
  }
  acx_future_release(future);
  return ACX_OK;
}

acx_status_t acxi_future_on_complete(acx_future_t *future, acxi_then_fn fn, acxi_drop_fn drop, void *arg,
                                     uint64_t cookie) {
  then_t *t = malloc(sizeof *t);
  if (!t) return ACX_ERR_NO_MEMORY;
  t->fn = fn;
  t->drop = drop;
  t->arg = arg;
  t->cookie = cookie;
  /* acquire: reading CLOSED must make the result visible (pairs with the completer's acq_rel) */
  then_t *head = atomic_load_explicit(&future->thens, memory_order_acquire);
  do {
    if (head == THENS_CLOSED) {
      free(t);
      fn(arg, future, cookie);
      return ACX_OK;
    }
    t->next = head;
    /* release: publishes t's fields to the completer's acquire exchange */
  } while (!atomic_compare_exchange_weak_explicit(&future->thens, &head, t, memory_order_release,
                                                  memory_order_acquire));
  return ACX_OK;
}

static acx_status_t copy_result(acx_future_t *f, void *out, size_t cap, size_t *len) {
  if (out && cap) memcpy(out, f->payload, f->len < cap ? f->len : cap);
  if (len) *len = f->len;
  return f->status;
}

acx_status_t acx_future_result(acx_future_t *future, void *out, size_t cap, size_t *len) {
  ACX_CHECK_NULL(future);
  if (!acxi_future_is_done(future)) return ACX_ERR_TIMEOUT;
  return copy_result(future, out, cap, len);
}

acx_status_t acx_future_wait(acx_future_t *future, int64_t timeout_ns, void *out, size_t cap, size_t *len) {
  ACX_CHECK_NULL(future);
  ACX_CHECK_ARG(timeout_ns >= 0, "acx_future_wait: argument 'timeout_ns' is negative (%lld)",
                (long long)timeout_ns);
  if (acxi_future_is_done(future)) return copy_result(future, out, cap, len);
  int64_t deadline = acxi_deadline(timeout_ns);
  int64_t spin = spin_ns();
  int64_t spin_end = deadline;
  if (spin > 0) {
    int64_t now = acxi_now_ns();
    spin_end = spin < deadline - now ? now + spin : deadline;
  } else {
    spin_end = 0;
  }
  for (unsigned i = 1;; i++) {
    if (acxi_future_is_done(future)) return copy_result(future, out, cap, len);
    if ((i & 63) == 0 && acxi_now_ns() >= spin_end) break;
    acxi_cpu_relax();
  }
  for (;;) {
    /* acquire: DONE must make status and payload visible */
    uint32_t w = atomic_load_explicit(&future->word, memory_order_acquire);
    if (w == DONE) return copy_result(future, out, cap, len);
    int64_t now = acxi_now_ns();
    if (now >= deadline) return ACX_ERR_TIMEOUT;
    /* relaxed: the flag only asks the completer for a wake; the futex re-checks the value */
    if (w == PENDING &&
        !atomic_compare_exchange_strong_explicit(&future->word, &w, PARKED, memory_order_relaxed,
                                                 memory_order_relaxed))
      continue;
    acxi_futex_wait(&future->word, PARKED, deadline - now);
  }
}
