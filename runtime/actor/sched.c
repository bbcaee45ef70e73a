/* Workers and run queues. A worker runs its own queue FIFO, steals from the others when empty,
 * spins ACX_SPIN_NS for latency, then parks on the scheduler's futex word (at most
 * ACX_IDLE_WAKE_NS: a backstop, the wake protocol below does not rely on it). A push wakes a
 * parked worker only when it creates surplus work (a non-empty queue, or a push from outside), so
 * the ping-pong of two actors stays on one warm core without a syscall per message. */
#define _GNU_SOURCE
#include "runtime/actor/sched.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/bind.h"
#include "runtime/base/clock.h"
#include "runtime/base/futex.h"
#include "runtime/base/log.h"

/* initial-exec: no __tls_get_addr call per message in the shared library */
static __thread __attribute__((tls_model("initial-exec"))) acxi_worker_t *tl_worker;

acxi_worker_t *acxi_sched_current(void) { return tl_worker; }

static void wake_one(acxi_sched_t *s) {
  /* seq_cst: with the fence in push, a parker either sees the queued work or is counted here */
  if (atomic_load_explicit(&s->parked, memory_order_seq_cst) > 0) {
    /* release: a woken worker's acquire load of epoch orders after the push */
    atomic_fetch_add_explicit(&s->epoch, 1, memory_order_release);
    acxi_futex_wake(&s->epoch, 1);
  }
}

static bool queue_push(acxi_worker_t *w, acxi_runnable_t *r, int *len_before) {
  r->rq_next = NULL;
  pthread_mutex_lock(&w->lock);
  if (w->closed) {
    pthread_mutex_unlock(&w->lock);
    return false;
  }
  if (w->rq_tail)
    w->rq_tail->rq_next = r;
  else
    w->rq_head = r;
  w->rq_tail = r;
  /* relaxed: a hint for thieves and parkers; the mutex protects the list itself */
  *len_before = atomic_fetch_add_explicit(&w->rq_len, 1, memory_order_relaxed);
  pthread_mutex_unlock(&w->lock);
  return true;
}

static acxi_runnable_t *queue_pop(acxi_worker_t *w) {
  /* relaxed: a stale zero only delays this worker until its next look */
  if (atomic_load_explicit(&w->rq_len, memory_order_relaxed) == 0) return NULL;
  pthread_mutex_lock(&w->lock);
  acxi_runnable_t *r = w->rq_head;
  if (r) {
    w->rq_head = r->rq_next;
    if (!w->rq_head) w->rq_tail = NULL;
    atomic_fetch_sub_explicit(&w->rq_len, 1, memory_order_relaxed);
  }
  pthread_mutex_unlock(&w->lock);
  return r;
}

bool acxi_sched_push(acxi_sched_t *s, acxi_runnable_t *r) {
  acxi_worker_t *w = tl_worker;
  int own = w && w->sched == s;
  if (!own) {
    int i = r->last_worker;
    if (i < 0 || i >= s->nworkers) /* relaxed: any spread will do */
      i = (int)(atomic_fetch_add_explicit(&s->rr, 1, memory_order_relaxed) % (unsigned)s->nworkers);
    w = &s->workers[i];
  }
  int before = 0;
  if (!queue_push(w, r, &before)) return false; /* drained after the stop: nothing runs it */
  atomic_thread_fence(memory_order_seq_cst); /* Dekker with the parker's state store then look */
  /* a spinning owner takes it at once; a busy or parked one needs a thief or a wake-up */
  if (own ? before > 0 : atomic_load_explicit(&w->state, memory_order_relaxed) != ACXI_W_SPINNING) wake_one(s);
  return true;
}

/* Worth taking from victim v: more than one item, or one its owner is not about to run. A
 * spinning owner picks its single item up at once, and so does a running one at the end of a
 * short turn: an actor's reply to its peer is queued on the sender's worker, and taking it there
 * would move the pair across cores on every message (a cache-line round trip each, half the
 * single-core rate). So a lone item behind a running owner is taken only when the owner has been
 * in the same turn for steal_wait_ns: a long hook still lends its queue to the idle worker. */
static int stealable(acxi_worker_t *w, acxi_worker_t *v) {
  int n = atomic_load_explicit(&v->rq_len, memory_order_seq_cst);
  if (n != 1) return n >= 2;
  /* relaxed, both: hints; a stale value costs one early steal or one more look */
  int state = atomic_load_explicit(&v->state, memory_order_relaxed);
  if (state != ACXI_W_RUNNING) return state == ACXI_W_PARKED;
  uint32_t turns = atomic_load_explicit(&v->turns, memory_order_relaxed);
  acxi_steal_watch_t *sw = &w->watch[v->index];
  if (sw->turns != turns) { /* a new turn since the last look: start over */
    sw->turns = turns;
    sw->since = 0;
    return 0;
  }
  int64_t now = acxi_now_ns();
  if (sw->since == 0) {
    sw->since = now;
    return w->sched->steal_wait_ns <= 0;
  }
  return now - sw->since >= w->sched->steal_wait_ns;
}

static acxi_runnable_t *find_work(acxi_worker_t *w) {
  acxi_runnable_t *r = queue_pop(w);
  if (r) return r;
  acxi_sched_t *s = w->sched;
  for (int k = 1; k < s->nworkers; k++) {
    acxi_worker_t *v = &s->workers[(w->index + k) % s->nworkers];
    if (stealable(w, v) && (r = queue_pop(v))) return r;
  }
  return NULL;
}

static int any_work(acxi_worker_t *w) {
  acxi_sched_t *s = w->sched;
  if (atomic_load_explicit(&w->rq_len, memory_order_seq_cst) > 0) return 1;
  for (int k = 1; k < s->nworkers; k++)
    if (stealable(w, &s->workers[(w->index + k) % s->nworkers])) return 1;
  return 0;
}

static void park(acxi_worker_t *w) {
  acxi_sched_t *s = w->sched;
  /* acquire: pairs with wake_one's release increment */
  uint32_t e = atomic_load_explicit(&s->epoch, memory_order_acquire);
  /* seq_cst: a pusher that then reads SPINNING is seen by the look below, and vice versa */
  atomic_store_explicit(&w->state, ACXI_W_PARKED, memory_order_seq_cst);
  atomic_fetch_add_explicit(&s->parked, 1, memory_order_seq_cst);
  if (!any_work(w) && !atomic_load_explicit(&s->stopping, memory_order_acquire))
    acxi_futex_wait(&s->epoch, e, s->park_ns);
  atomic_fetch_sub_explicit(&s->parked, 1, memory_order_relaxed);
  atomic_store_explicit(&w->state, ACXI_W_SPINNING, memory_order_relaxed);
}

static void *worker_main(void *arg) {
  acxi_worker_t *w = arg;
  acxi_sched_t *s = w->sched;
  tl_worker = w;
  ACX_TRACE(SCHED, "worker %d started", w->index);
  /* acquire: see everything done before stop was requested */
  while (!atomic_load_explicit(&s->stopping, memory_order_acquire)) {
    acxi_runnable_t *r = find_work(w);
    if (r) {
      /* relaxed: a hint for thieves; a stale value costs one steal or one wake-up */
      atomic_store_explicit(&w->state, ACXI_W_RUNNING, memory_order_relaxed);
      /* relaxed load+store: only this worker writes it; thieves read it as a hint */
      atomic_store_explicit(&w->turns, atomic_load_explicit(&w->turns, memory_order_relaxed) + 1,
                            memory_order_relaxed);
      r->last_worker = w->index;
      if (s->run(w, r)) {
        int before = 0;
        queue_push(w, r, &before);
        atomic_thread_fence(memory_order_seq_cst);
        if (before > 0) wake_one(s);
      }
      continue;
    }
    atomic_store_explicit(&w->state, ACXI_W_SPINNING, memory_order_relaxed);
    int64_t until = acxi_now_ns() + s->spin_ns;
    int found = 0;
    for (unsigned i = 1; !found; i++) {
      found = any_work(w) || atomic_load_explicit(&s->stopping, memory_order_relaxed);
      if ((i & 15) == 0 && acxi_now_ns() >= until) break;
      acxi_cpu_relax();
    }
    if (!found) park(w);
  }
  ACX_TRACE(SCHED, "worker %d exits", w->index);
  tl_worker = NULL;
  return NULL;
}

acx_status_t acxi_sched_start(acxi_sched_t *s, int nworkers, int64_t spin_ns, int64_t park_ns, int64_t steal_wait_ns,
                              acxi_run_fn run, const char *name, const acxi_cpuset_t *cpuset) {
  memset(s, 0, sizeof *s);
  s->workers = aligned_alloc(64, sizeof(acxi_worker_t) * (size_t)nworkers);
  if (!s->workers) return ACX_ERR_NO_MEMORY;
  memset(s->workers, 0, sizeof(acxi_worker_t) * (size_t)nworkers);
  /* one row per thief, zeroed: a first look at a victim only starts its watch */
  acxi_steal_watch_t *watch = calloc((size_t)nworkers * (size_t)nworkers, sizeof *watch);
  if (!watch) {
    free(s->workers);
    s->workers = NULL;
    return ACX_ERR_NO_MEMORY;
  }
  s->nworkers = nworkers;
  s->run = run;
  s->spin_ns = spin_ns < 0 ? 0 : spin_ns;
  s->park_ns = park_ns;
  s->steal_wait_ns = steal_wait_ns;
  for (int i = 0; i < nworkers; i++) {
    acxi_worker_t *w = &s->workers[i];
    pthread_mutex_init(&w->lock, NULL);
    w->sched = s;
    w->index = i;
    w->watch = watch + (size_t)i * (size_t)nworkers;
  }
  for (int i = 0; i < nworkers; i++) {
    acxi_worker_t *w = &s->workers[i];
    /* Bound at creation rather than by the worker itself: a refused set fails here, and no actor
     * turn ever runs on a core outside it. */
    int rc = acxi_thread_create(&w->thread, cpuset, worker_main, w);
    if (rc != 0) {
      int refused = rc == EINVAL && cpuset && cpuset->set;
      if (refused)
        ACX_WARN(SCHED, "worker %d: cpuset '%s' holds no CPU this process may run on", i, cpuset->list);
      else
        ACX_WARN(SCHED, "pthread_create of worker %d failed: %s", i, strerror(rc));
      acxi_sched_stop(s, acxi_deadline(5LL * 1000000000LL));
      acxi_sched_fini(s);
      return refused ? ACX_ERR_INVALID_ARG : ACX_ERR_SYSTEM;
    }
    w->started = 1;
    char tname[32]; /* the kernel keeps 15 characters */
    snprintf(tname, sizeof tname, "%.8s-w%d", name ? name : "acx", i % 1000);
    tname[15] = '\0';
    pthread_setname_np(w->thread, tname);
  }
  return ACX_OK;
}

acx_status_t acxi_sched_stop(acxi_sched_t *s, int64_t deadline) {
  /* release: workers that see stopping see what the caller did before */
  atomic_store_explicit(&s->stopping, 1, memory_order_release);
  atomic_fetch_add_explicit(&s->epoch, 1, memory_order_release);
  acxi_futex_wake(&s->epoch, INT_MAX);
  acx_status_t res = ACX_OK;
  for (int i = 0; i < s->nworkers; i++) {
    acxi_worker_t *w = &s->workers[i];
    if (!w->started) continue;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts); /* pthread_timedjoin_np takes a CLOCK_REALTIME time */
    int64_t left = deadline - acxi_now_ns();
    if (left < 0) left = 0;
    int64_t abs = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec + left;
    struct timespec dl = acxi_ts_from_ns(abs);
    int rc = pthread_timedjoin_np(w->thread, NULL, &dl);
    if (rc != 0) {
      ACX_WARN(SCHED, "worker %d did not finish by the deadline (%s)", i, strerror(rc));
      res = ACX_ERR_TIMEOUT;
      continue;
    }
    w->started = 0;
  }
  return res;
}

acxi_runnable_t *acxi_sched_drain(acxi_sched_t *s) {
  for (int i = 0; i < s->nworkers; i++) { /* closed first: a push from now on is refused */
    acxi_worker_t *w = &s->workers[i];
    pthread_mutex_lock(&w->lock);
    w->closed = 1;
    pthread_mutex_unlock(&w->lock);
  }
  for (int i = 0; i < s->nworkers; i++) {
    acxi_runnable_t *r = queue_pop(&s->workers[i]);
    if (r) return r;
  }
  return NULL;
}

void acxi_sched_fini(acxi_sched_t *s) {
  if (!s->workers) return;
  for (int i = 0; i < s->nworkers; i++) pthread_mutex_destroy(&s->workers[i].lock);
  free(s->workers[0].watch); /* row 0 starts the block */
  free(s->workers);
  s->workers = NULL;
}

uint64_t acxi_sched_delivered(acxi_sched_t *s) {
  uint64_t n = 0;
  for (int i = 0; i < s->nworkers; i++)
    n += atomic_load_explicit(&s->workers[i].delivered, memory_order_relaxed);
  return n;
}
