/* The scheduler: N worker threads, each with a FIFO run queue of runnable actors that idle
 * workers steal from. Workers spin for ACX_SPIN_NS when idle, then park on a futex. */
#ifndef ACXI_SCHED_H
#define ACXI_SCHED_H
#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "acx/status.h"

struct acxi_cpuset;

/* Embedded in whatever is scheduled (an actor); it sits in at most one run queue at a time. */
typedef struct acxi_runnable {
  struct acxi_runnable *rq_next;
  int last_worker; /* where it ran last: pushes from outside go there, to a warm, spinning worker */
} acxi_runnable_t;

struct acxi_sched;

typedef struct acxi_worker {
  alignas(64) pthread_mutex_t lock;
  acxi_runnable_t *rq_head, *rq_tail; /* under lock */
  int closed;                         /* under lock: drained after the stop, takes nothing more */
  _Atomic int rq_len;                 /* mirror of the length, read without the lock by thieves */
  struct acxi_sched *sched;
  int index;
  pthread_t thread;
  int started;
  _Atomic uint64_t delivered; /* messages handed to hooks on this worker (stats) */
  _Atomic int state;          /* ACXI_W_RUNNING, _SPINNING or _PARKED: thieves and pushers read it */
  _Atomic uint32_t turns;     /* turns started here: thieves tell a long turn from a stream of short ones */
  struct acxi_steal_watch *watch; /* this worker's view of each victim (thief-private) */
} acxi_worker_t;

/* What a thief saw of a victim's single queued item behind a running owner: the owner's turn
 * count and since when (0: seen once, not timed yet). */
typedef struct acxi_steal_watch {
  uint32_t turns;
  int64_t since;
} acxi_steal_watch_t;

enum { ACXI_W_RUNNING = 0, ACXI_W_SPINNING = 1, ACXI_W_PARKED = 2 };

/* Runs one turn of r on worker w; returns true when r must be queued again. */
typedef bool (*acxi_run_fn)(acxi_worker_t *w, acxi_runnable_t *r);

typedef struct acxi_sched {
  int nworkers;
  acxi_worker_t *workers;
  acxi_run_fn run;
  int64_t spin_ns;
  int64_t park_ns; /* a parked worker's longest sleep: the backstop behind the wake protocol */
  int64_t steal_wait_ns; /* a single item behind one running turn is stolen after this long */
  alignas(64) _Atomic uint32_t epoch; /* futex word parked workers sleep on */
  _Atomic int parked;
  _Atomic int stopping;
  _Atomic unsigned rr; /* round robin for pushes from threads that are not workers */
} acxi_sched_t;

/* Starts nworkers workers, each bound to cpuset from its first instruction (NULL or unbound: they
 * inherit the caller's mask). A lone item queued behind a running owner is stolen only once that
 * owner has spent steal_wait_ns in one turn. ACX_ERR_INVALID_ARG (logged) when the kernel refuses
 * the cpuset (no CPU of it is usable by this process), ACX_ERR_SYSTEM, ACX_ERR_NO_MEMORY. */
acx_status_t acxi_sched_start(acxi_sched_t *s, int nworkers, int64_t spin_ns, int64_t park_ns, int64_t steal_wait_ns,
                              acxi_run_fn run, const char *name, const struct acxi_cpuset *cpuset);
/* Makes r runnable and returns true. Any thread; a worker of s queues on its own run queue.
 * Returns false, taking nothing, once acxi_sched_drain has run: the caller keeps r. */
bool acxi_sched_push(acxi_sched_t *s, acxi_runnable_t *r);
/* Asks the workers to exit and joins them by deadline (absolute, acxi_now_ns based).
 * ACX_ERR_TIMEOUT when a worker is still running: then s must not be freed. */
acx_status_t acxi_sched_stop(acxi_sched_t *s, int64_t deadline);
/* After a successful stop: takes one leftover runnable, or NULL; from its first call on, the
 * queues are closed (acxi_sched_push returns false). */
acxi_runnable_t *acxi_sched_drain(acxi_sched_t *s);
void acxi_sched_fini(acxi_sched_t *s);
/* The worker the calling thread is, or NULL. */
acxi_worker_t *acxi_sched_current(void);
uint64_t acxi_sched_delivered(acxi_sched_t *s);
#endif
