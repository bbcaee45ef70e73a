/* The supervised world rebuild: an actor watches the device and polls the collectives for faults;
 * the control plane carries REBUILD_NOTICE and REBUILD_READY between ranks; a rebuild thread (the
 * steps block on MPI and on the executor, which an actor worker must not) retires the
 * collectives, waits for the device, rebuilds the communicator with every rank, moves the epoch
 * and exchanges READY. One rebuild per epoch: notices of an epoch already left are stale. The
 * READY barrier counts senders, not messages: each rank once, and only for the epoch under way. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acx/rebuild.h"
#include "collectives/coll_internal.h"
#include "collectives/remote/ctrl_plane.h"
#include "collectives/world_internal.h"
#include "runtime/base/clock.h"
#include "runtime/base/log.h"
#include "runtime/base/param.h"
#include "runtime/proto/token_internal.h"

#define MSG_TICK 0xfffd0101u
#define MSG_STOP 0xfffd0102u
#define TICK_NS 10000000 /* the collectives' state is polled this often */

typedef enum sstate { S_READY = 0, S_REBUILDING = 1, S_FAILED = 2 } sstate_t;

typedef struct sup {
  struct sup *next; /* registry */
  acx_world_t *w;
  acx_system_t *sys;
  acx_device_t *dev;
  acx_coll_t *coll;
  acxc_ctrl_t *cp;
  int64_t timeout_ns;
  int attempts;

  acx_ref_t actor;
  acx_timer_id_t timer;
  pthread_t thread;
  int thread_live;

  pthread_mutex_t lock;
  pthread_cond_t cond; /* trigger, state change, READY arrivals, stop */
  sstate_t state;
  acx_status_t fail_status;
  int pending;          /* a rebuild is asked for and not started */
  int again;            /* a fault of the next epoch arrived during a rebuild */
  uint64_t again_gen;   /* ... and when each such fault was a device restart, the newest generation
                           (0: some fault was not a restart, it always calls for another rebuild) */
  acx_status_t again_cause; /* ... the cause the next rebuild reports (a non-restart fault's first) */
  uint64_t rebuilt_gen; /* the device generation the last rebuild made its collectives on */
  uint64_t from_epoch;  /* the epoch the pending/running rebuild leaves */
  int64_t fault_ns;     /* when this rank learned of the fault */
  int initiator;
  acx_status_t cause;
  uint64_t ready_epoch;    /* the epoch READY senders are recorded for */
  unsigned char *ready_from; /* [rank]: 1 once that rank said READY for ready_epoch */
  int ready_count;           /* distinct senders in ready_from */
  int stop;

  /* stats (under lock) */
  uint64_t rebuilds, failed_attempts;
  int64_t last_ns, max_ns, total_ns;
  int last_initiator;
  acx_status_t last_cause;
} sup_t;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static sup_t *registry;

static sup_t *sup_of(const acx_world_t *w) {
  pthread_mutex_lock(&registry_lock);
  sup_t *s = registry;
  while (s && s->w != w) s = s->next;
  pthread_mutex_unlock(&registry_lock);
  return s;
}

int acxc_world_supervised(const acx_world_t *w) { return sup_of(w) != NULL; }

static uint64_t epoch_of(const sup_t *s) {
  uint64_t e = 0;
  acx_world_epoch(s->w, &e);
  return e;
}

/* ------------------------------------------------------------------------------------------ */
/* triggers                                                                                   */

static void notify_all(sup_t *s, acx_status_t cause, uint64_t old_gen, uint64_t new_gen) {
  int rank = acxc_ctrl_rank(s->cp), size = acxc_ctrl_size(s->cp);
  for (int r = 0; r < size; r++) {
    if (r == rank) continue;
    acxi_ctrl_msg_t m = {.type = ACXI_CTRL_REBUILD_NOTICE,
                         .u.notice = {.rank = rank, .cause = cause, .old_generation = old_gen,
                                      .new_generation = new_gen}};
    acx_status_t st = acxc_ctrl_send(s->cp, r, &m, NULL, NULL);
    if (st != ACX_OK)
      ACX_WARN(COLL, "rebuild: cannot tell rank %d of the fault: %s (it learns when its collectives fail)", r,
               acx_status_name(st));
  }
}

/* A fault seen on this rank (new_gen: the device generation a restart moved to, 0 for other
 * faults). Returns 1 when it starts a rebuild (the caller then tells the others). A request
 * (the application's) made while a rebuild is under way is covered by it: the world that rebuild
 * makes is a new epoch, after whatever the application saw go wrong in the old one. */
static int trigger_local(sup_t *s, acx_status_t cause, const char *why, int64_t fault_ns, uint64_t new_gen,
                         int request) {
  int start = 0, covered = 0;
  uint64_t leaving = 0;
  pthread_mutex_lock(&s->lock);
  if (s->stop || s->state == S_FAILED) {
  } else if (request && (s->state == S_REBUILDING || s->pending)) {
    covered = 1;
    leaving = s->from_epoch;
  } else if (s->state == S_READY && !s->pending && new_gen && new_gen <= s->rebuilt_gen) {
    /* A restart whose event came after the rebuild that already built on it. */
    ACX_INFO(COLL, "rebuild: %s: covered by the last rebuild (collectives made on generation %" PRIu64 ")", why,
             s->rebuilt_gen);
  } else if (s->state == S_READY && !s->pending) {
    s->pending = 1;
    s->from_epoch = epoch_of(s);
    s->fault_ns = fault_ns;
    s->initiator = acxc_ctrl_rank(s->cp);
    s->cause = cause;
    start = 1;
    pthread_cond_broadcast(&s->cond);
  } else if (s->state == S_REBUILDING) {
    /* The rebuild under way may have been made before this fault. A device restart it has
     * already built on (its collectives were made on that generation, or a later one) is not. */
    if (!s->again) {
      s->again_gen = new_gen;
      s->again_cause = cause;
    } else if (s->again_gen) {
      s->again_gen = new_gen && new_gen > s->again_gen ? new_gen : 0;
      if (!new_gen) s->again_cause = cause;
    }
    s->again = 1;
  }
  pthread_mutex_unlock(&s->lock);
  if (covered)
    ACX_INFO(COLL, "rebuild: %s (%s): covered by the rebuild under way from epoch %" PRIu64, why,
             acx_status_name(cause), leaving);
  if (start)
    ACX_WARN(COLL, "rebuild: rank %d starts a world rebuild from epoch %" PRIu64 ": %s (%s)", acxc_ctrl_rank(s->cp),
             s->from_epoch, why, acx_status_name(cause));
  return start;
}

static void on_notice(acxc_ctrl_t *cp, void *arg, const acxi_ctrl_msg_t *m, acx_status_t decoded) {
  sup_t *s = arg;
  const acxi_ctrl_rebuild_notice_t *n = &m->u.notice;
  pthread_mutex_lock(&s->lock);
  uint64_t now_epoch = epoch_of(s);
  if (m->epoch < now_epoch || (s->state == S_REBUILDING && m->epoch == s->from_epoch) ||
      (s->pending && m->epoch == s->from_epoch)) {
    /* Of an epoch already left, or of the rebuild already under way. */
    pthread_mutex_unlock(&s->lock);
    ACX_INFO(COLL, "rebuild: notice of rank %d for epoch %" PRIu64 " is part of a rebuild already made or running",
             m->sender, m->epoch);
    return;
  }
  if (s->state == S_READY && !s->pending && !s->stop) {
    s->pending = 1;
    s->from_epoch = now_epoch;
    s->fault_ns = acxi_now_ns();
    s->initiator = n->rank;
    s->cause = n->cause;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    /* Generations 0 -> 0: the fault was no device restart (a collective's error, a request). */
    char gens[80] = "";
    if (n->old_generation || n->new_generation)
      snprintf(gens, sizeof gens, " (device generation %" PRIu64 " -> %" PRIu64 ")", n->old_generation,
               n->new_generation);
    ACX_WARN(COLL, "rebuild: rank %d reports %s%s: rebuilding the world from epoch %" PRIu64, n->rank,
             acx_status_name(n->cause), gens, now_epoch);
    return;
  }
  if (s->state == S_REBUILDING) {
    if (!s->again || s->again_gen) s->again_cause = n->cause;
    s->again = 1;
    s->again_gen = 0;
  }
  pthread_mutex_unlock(&s->lock);
}

/* Starts recording READY senders for `epoch` (under lock). */
static void ready_reset_locked(sup_t *s, uint64_t epoch) {
  s->ready_epoch = epoch;
  s->ready_count = 0;
  memset(s->ready_from, 0, (size_t)acxc_ctrl_size(s->cp));
}

/* A peer is ready at an epoch. Only the epoch this rank is rebuilding to counts, each sender once
 * (the control plane has checked that the sender is the MPI source). An epoch beyond it cannot be
 * honest: no rank gets there without this one (the rebuild's agreement needs every rank). */
static void on_ready(acxc_ctrl_t *cp, void *arg, const acxi_ctrl_msg_t *m, acx_status_t decoded) {
  sup_t *s = arg;
  uint64_t e = m->u.ready.epoch;
  pthread_mutex_lock(&s->lock);
  int live = (s->state == S_REBUILDING || s->pending) && !s->stop;
  uint64_t target = live ? s->from_epoch + 1 : epoch_of(s);
  if (live && e == target && m->sender != acxc_ctrl_rank(cp)) {
    if (s->ready_epoch != target) ready_reset_locked(s, target);
    int dup = s->ready_from[m->sender];
    if (!dup) {
      s->ready_from[m->sender] = 1;
      s->ready_count++;
      pthread_cond_broadcast(&s->cond);
    }
    pthread_mutex_unlock(&s->lock);
    if (dup) ACX_WARN(COLL, "rebuild: rank %d said READY for epoch %" PRIu64 " again: counted once", m->sender, e);
    return;
  }
  pthread_mutex_unlock(&s->lock);
  if (e > target || m->sender == acxc_ctrl_rank(cp))
    ACX_WARN(COLL, "rebuild: protocol error: READY for epoch %" PRIu64 " from rank %d, %s (at epoch %" PRIu64 "): "
             "ignored", e, m->sender, m->sender == acxc_ctrl_rank(cp) ? "this rank itself" :
             live ? "beyond the rebuild under way" : "while no rebuild is under way", target);
  else
    ACX_INFO(COLL, "rebuild: READY for epoch %" PRIu64 " from rank %d belongs to a rebuild already over: dropped", e,
             m->sender);
}

/* ------------------------------------------------------------------------------------------ */
/* the actor: device events and the collectives' state                                        */

typedef struct sactor {
  sup_t *s;
} sactor_t;

static acx_status_t actor_init(acx_ctx_t *ctx, void *state, const void *arg) {
  ((sactor_t *)state)->s = (sup_t *)arg; /* unsupervise stops the actor before freeing s */
  return ACX_OK;
}

static acx_status_t actor_receive(acx_ctx_t *ctx, void *state, const acx_msg_t *msg) {
  sup_t *s = ((sactor_t *)state)->s;
  switch (msg->type) {
  case MSG_TICK: {
    if (!s->coll) return ACX_OK;
    acx_status_t cs = acxc_coll_cause(s->coll); /* acx_coll_state says WORLD_REBUILDING under supervision */
    pthread_mutex_lock(&s->lock);
    int ready = s->state == S_READY && !s->pending;
    pthread_mutex_unlock(&s->lock);
    if (ready && cs != ACX_OK && cs != ACX_ERR_WORLD_REBUILDING &&
        trigger_local(s, cs, "the collectives failed", acxi_now_ns(), 0, 0))
      notify_all(s, cs, 0, 0);
    return ACX_OK;
  }
  case ACX_MSG_DEVICE_RESTARTED: {
    const acx_device_event_t *ev = msg->data;
    char why[200];
    snprintf(why, sizeof why, "device generation %" PRIu64 " -> %" PRIu64 ": %s", ev->old_generation,
             ev->new_generation, ev->reason);
    acx_status_t cause = ev->cause != ACX_OK ? ev->cause : ACX_ERR_DEVICE_LOST;
    /* The fault happened when the executor was lost, before its restart: count from there. */
    acx_device_stats_t ds = {.size = sizeof ds};
    int64_t lost_ns = acxi_now_ns();
    if (acx_device_stats(s->dev, &ds) == ACX_OK && ds.last_recovery_ns > 0) lost_ns -= ds.last_recovery_ns;
    if (trigger_local(s, cause, why, lost_ns, ev->new_generation, 0))
      notify_all(s, cause, ev->old_generation, ev->new_generation);
    return ACX_OK;
  }
  case ACX_MSG_DEVICE_UNAVAILABLE:
  case ACX_MSG_DEVICE_FATAL:
    /* Nothing to rebuild with: the collectives fail with the device's status and the world with
     * them; the peers learn it when their collectives time out. */
    ACX_WARN(COLL, "rebuild: this rank's device is gone for good (%s): no rebuild can bring it back",
             msg->type == ACX_MSG_DEVICE_FATAL ? "fatal" : "restart limit reached");
    return ACX_OK;
  case MSG_STOP:
    acx_timer_cancel(acx_ctx_system(ctx), s->timer);
    acx_stop_self(ctx);
    acx_reply(ctx, msg, ACX_OK, NULL, 0);
    return ACX_OK;
  default:
    return ACX_OK;
  }
}

/* ------------------------------------------------------------------------------------------ */
/* the rebuild                                                                                */

/* Every rank's `mine` combined with MPI_MIN over the world, within the deadline. */
static acx_status_t agree_min(sup_t *s, int mine, int *all, int64_t deadline) {
  MPI_Request req;
  if (MPI_Iallreduce(&mine, all, 1, MPI_INT, MPI_MIN, s->w->comm, &req) != MPI_SUCCESS) return ACX_ERR_MPI;
  const int64_t start = acxi_now_ns();
  for (;;) {
    int flag = 0;
    if (MPI_Test(&req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) return ACX_ERR_MPI;
    if (flag) return ACX_OK;
    if (acxi_now_ns() >= deadline) {
      ACX_WARN(COLL, "rebuild: a rank did not arrive at the agreement by the rebuild's deadline");
      return ACX_ERR_TIMEOUT;
    }
    acxi_poll_nap(acxi_now_ns() - start, 50000);
  }
}

/* The device serves commands again (a restart may still be under way). */
static acx_status_t wait_device(sup_t *s, int64_t deadline) {
  for (;;) {
    acx_status_t st = acx_device_ping(s->dev, 1000000000LL);
    if (st == ACX_OK || !ACX_IS_RETRYABLE(st)) return st;
    if (acxi_now_ns() >= deadline) return st;
    nanosleep(&(struct timespec){0, 5000000}, NULL);
  }
}

/* Attempt `a` of the rebuild to epoch `target`, as one number (acxc_coll_reinit's key). */
static uint64_t attempt_key(uint64_t target, uint32_t a) { return target << 16 | (a & 0xffffu); }

typedef struct fail_ctx {
  sup_t *s;
  uint64_t target;
  uint32_t attempt;
} fail_ctx_t;

/* This rank's part of the attempt failed (its communicator's creation): every other rank hears at
 * once, instead of waiting in NCCL's creation for it until the deadline. */
static void tell_attempt_failed(void *arg, acx_status_t st) {
  fail_ctx_t *f = arg;
  sup_t *s = f->s;
  int rank = acxc_ctrl_rank(s->cp), size = acxc_ctrl_size(s->cp);
  acx_status_t cause = st != ACX_OK ? st : ACX_ERR_PEER_LOST;
  ACX_WARN(COLL, "rebuild to epoch %" PRIu64 ": this rank's part of attempt %u failed (%s); the other ranks are told",
           f->target, f->attempt, acx_status_name(cause));
  for (int r = 0; r < size; r++) {
    if (r == rank) continue;
    acxi_ctrl_msg_t m = {.type = ACXI_CTRL_REBUILD_ABORT,
                         .u.abort = {.epoch = f->target, .attempt = f->attempt, .cause = cause}};
    acx_status_t ss = acxc_ctrl_send(s->cp, r, &m, NULL, NULL);
    if (ss != ACX_OK)
      ACX_WARN(COLL, "rebuild: cannot tell rank %d that the attempt failed: %s (it waits until its own deadline)", r,
               acx_status_name(ss));
  }
}

/* A peer's part of an attempt failed. Only the rebuild under way counts (its epoch); the coll
 * ignores attempts older than one already abandoned. */
static void on_abort(acxc_ctrl_t *cp, void *arg, const acxi_ctrl_msg_t *m, acx_status_t decoded) {
  (void)cp;
  (void)decoded;
  sup_t *s = arg;
  const acxi_ctrl_rebuild_abort_t *b = &m->u.abort;
  pthread_mutex_lock(&s->lock);
  int live = (s->state == S_REBUILDING || s->pending) && !s->stop;
  uint64_t target = live ? s->from_epoch + 1 : epoch_of(s);
  pthread_mutex_unlock(&s->lock);
  if (!live || b->epoch != target) {
    ACX_INFO(COLL, "rebuild: rank %d's failed attempt %u to epoch %" PRIu64 " is not of a rebuild under way (%s "
             "epoch %" PRIu64 "): dropped", m->sender, b->attempt, b->epoch, live ? "rebuilding to" : "at", target);
    return;
  }
  ACX_WARN(COLL, "rebuild to epoch %" PRIu64 ": rank %d's part of attempt %u failed (%s); this rank stops waiting in "
           "that attempt", b->epoch, m->sender, b->attempt, acx_status_name(b->cause));
  if (s->coll) acxc_coll_abandon_attempt(s->coll, attempt_key(b->epoch, b->attempt), ACX_ERR_PEER_LOST);
}

static acx_status_t attempt(sup_t *s, uint64_t target, int a, int64_t deadline) {
  acx_status_t st = wait_device(s, deadline);
  if (st != ACX_OK) ACX_WARN(COLL, "rebuild: this rank's device is not usable: %s", acx_status_name(st));
  int all = 0;
  ACXCHECK(agree_min(s, st == ACX_OK, &all, deadline));
  if (!all) return st != ACX_OK ? st : ACX_ERR_PEER_LOST;
  uint64_t gen;
  ACXCHECK(acx_device_generation(s->dev, &gen));
  if (s->coll) {
    int64_t left = deadline - acxi_now_ns();
    fail_ctx_t fc = {s, target, (uint32_t)a};
    ACXCHECK(acxc_coll_reinit(s->coll, left > 1000000 ? left : 1000000, attempt_key(target, (uint32_t)a),
                              tell_attempt_failed, &fc));
    gen = s->coll->generation;
  }
  pthread_mutex_lock(&s->lock);
  s->rebuilt_gen = gen;
  pthread_mutex_unlock(&s->lock);
  /* Exports from here on carry the new epoch; older tokens are stale. Remote accesses admitted at
   * an older epoch that are under way (a put's write, a channel transfer the retire aborted) end
   * before this rank says READY; those not begun fail at their begin (docs/resilience.md). A
   * rebuild is not held beyond its deadline for them: past it, it goes on (logged). */
  acxc_world_set_epoch(s->w, target);
  (void)acxi_token_drain_epoch(target, deadline);
  int rank = acxc_ctrl_rank(s->cp), size = acxc_ctrl_size(s->cp);
  for (int r = 0; r < size; r++) {
    if (r == rank) continue;
    acxi_ctrl_msg_t m = {.type = ACXI_CTRL_REBUILD_READY, .u.ready = {.epoch = target}};
    ACXCHECK(acxc_ctrl_send(s->cp, r, &m, NULL, NULL));
  }
  pthread_mutex_lock(&s->lock);
  while (!(s->ready_epoch == target && s->ready_count >= size - 1)) {
    if (acxi_now_ns() >= deadline) {
      int got = s->ready_epoch == target ? s->ready_count : 0;
      pthread_mutex_unlock(&s->lock);
      ACX_WARN(COLL, "rebuild: %d of %d ranks said READY for epoch %" PRIu64 " by the deadline", got, size - 1, target);
      return ACX_ERR_TIMEOUT;
    }
    struct timespec ts = acxi_ts_from_ns(acxi_now_ns() + 10000000);
    pthread_cond_timedwait(&s->cond, &s->lock, &ts);
  }
  pthread_mutex_unlock(&s->lock);
  return ACX_OK;
}

static acx_status_t rebuild(sup_t *s, uint64_t target, int64_t fault_ns) {
  if (s->coll) acxc_coll_retire(s->coll, ACX_ERR_WORLD_REBUILDING);
  acxc_remote_retire(s->w);
  int64_t deadline = fault_ns + s->timeout_ns;
  acx_status_t st = ACX_ERR_TIMEOUT;
  for (int a = 1; a <= s->attempts; a++) {
    st = attempt(s, target, a, deadline);
    if (st == ACX_OK) return ACX_OK;
    pthread_mutex_lock(&s->lock);
    s->failed_attempts++;
    pthread_mutex_unlock(&s->lock);
    ACX_WARN(COLL, "rebuild to epoch %" PRIu64 ": attempt %d of %d failed: %s", target, a, s->attempts,
             acx_status_name(st));
    if (st == ACX_ERR_TIMEOUT || acxi_now_ns() >= deadline) break; /* the ranks no longer agree on the steps */
    nanosleep(&(struct timespec){0, 100000000}, NULL);
  }
  return st;
}

static void *rebuild_thread(void *arg) {
  sup_t *s = arg;
  pthread_mutex_lock(&s->lock);
  for (;;) {
    while (!s->pending && !s->stop) {
      struct timespec ts = acxi_ts_from_ns(acxi_now_ns() + 1000000000LL);
      pthread_cond_timedwait(&s->cond, &s->lock, &ts);
    }
    if (s->stop) break;
    s->pending = 0;
    s->state = S_REBUILDING;
    uint64_t target = s->from_epoch + 1;
    if (s->ready_epoch != target) ready_reset_locked(s, target); /* READYs that came early stay */
    int64_t fault_ns = s->fault_ns;
    int initiator = s->initiator;
    acx_status_t cause = s->cause;
    pthread_mutex_unlock(&s->lock);

    acx_status_t st = rebuild(s, target, fault_ns);
    int64_t took = acxi_now_ns() - fault_ns;

    pthread_mutex_lock(&s->lock);
    int again = 0;
    acx_status_t again_cause = s->again_cause;
    if (st == ACX_OK) {
      s->state = S_READY;
      s->rebuilds++;
      s->last_ns = took;
      s->total_ns += took;
      if (took > s->max_ns) s->max_ns = took;
      s->last_initiator = initiator;
      s->last_cause = cause;
      again = s->again;
      if (again && s->again_gen && s->again_gen <= s->rebuilt_gen) {
        ACX_INFO(COLL, "rebuild: the device restart (generation %" PRIu64 ") seen during the rebuild is covered by it "
                 "(collectives made on generation %" PRIu64 "): no second rebuild", s->again_gen, s->rebuilt_gen);
        again = 0;
      }
      s->again = 0;
      s->again_gen = 0;
      ACX_WARN(COLL, "rebuild: world ready at epoch %" PRIu64 ", %.1f ms after this rank learned of the fault "
               "(its executor's loss, or the notice's arrival; rank %d: %s)", target, took / 1e6, initiator, acx_status_name(cause));
    } else {
      s->state = S_FAILED;
      s->fail_status = st;
      ACX_WARN(COLL, "rebuild: the world could not be rebuilt (%s); it is unusable", acx_status_name(st));
    }
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    if (again && trigger_local(s, again_cause, "a fault arrived while the world was rebuilt", acxi_now_ns(), 0, 0))
      notify_all(s, again_cause, 0, 0);
    pthread_mutex_lock(&s->lock);
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* API                                                                                        */

static void sup_free(sup_t *s) {
  free(s->ready_from);
  pthread_cond_destroy(&s->cond);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

static void stop_actor(sup_t *s) {
  acx_future_t *f = NULL;
  acx_status_t st = acx_ask(s->actor, MSG_STOP, NULL, 0, &f);
  if (st == ACX_OK) {
    st = acx_future_wait(f, 10000000000LL, NULL, 0, NULL);
    acx_future_release(f);
  }
  if (st != ACX_OK) {
    acx_timer_cancel(s->sys, s->timer);
    acx_stop(s->actor);
  }
  acx_ref_release(s->actor);
  s->actor = NULL;
}

acx_status_t acx_world_supervise(acx_world_t *world, acx_system_t *sys, acx_device_t *dev, acx_coll_t *coll,
                                 const acx_rebuild_config_t *cfg) {
  ACX_CHECK_NULL(world);
  ACX_CHECK_NULL(sys);
  ACX_CHECK_NULL(dev);
  acx_rebuild_config_t conf = ACX_REBUILD_CONFIG_INIT;
  if (cfg) {
    ACX_CHECK_ARG(cfg->size == sizeof conf, "acx_world_supervise: cfg->size is %zu, expected %zu", cfg->size,
                  sizeof conf);
    conf = *cfg;
  }
  ACX_CHECK_ARG(!coll || (coll->world == world && coll->dev == dev),
                "acx_world_supervise: argument 'coll' belongs to another world or device");
  if (sup_of(world)) {
    ACX_WARN(COLL, "acx_world_supervise: this world is supervised already");
    return ACX_ERR_INVALID_STATE;
  }
  sup_t *s = calloc(1, sizeof *s);
  if (!s) return ACX_ERR_NO_MEMORY;
  s->w = world;
  s->sys = sys;
  s->dev = dev;
  s->coll = coll;
  s->last_initiator = -1;
  s->timeout_ns = conf.timeout_ns > 0 ? conf.timeout_ns : acxi_param_int("ACX_REBUILD_TIMEOUT") * 1000000;
  if (s->timeout_ns <= 0) s->timeout_ns = 1000000;
  s->attempts = conf.attempts > 0 ? conf.attempts : (int)acxi_param_int("ACX_REBUILD_ATTEMPTS");
  if (s->attempts <= 0) s->attempts = 1;
  pthread_mutex_init(&s->lock, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&s->cond, &ca);
  pthread_condattr_destroy(&ca);

  acx_status_t st = acxc_ctrl_acquire(world, &s->cp);
  if (st != ACX_OK) {
    sup_free(s);
    return st;
  }
  s->ready_from = calloc((size_t)acxc_ctrl_size(s->cp), 1);
  if (!s->ready_from) {
    st = ACX_ERR_NO_MEMORY;
    goto err_release_ctrl;
  }
  if (pthread_create(&s->thread, NULL, rebuild_thread, s) != 0) {
    ACX_WARN(COLL, "acx_world_supervise: cannot start the rebuild thread");
    st = ACX_ERR_SYSTEM;
    goto err_release_ctrl;
  }
  s->thread_live = 1;
  acx_props_t props = ACX_PROPS_INIT;
  props.state_size = sizeof(sactor_t);
  props.init = actor_init;
  props.receive = actor_receive;
  props.arg = s;
  ACXCHECKGOTO(acx_spawn(sys, NULL, &props, NULL, &s->actor), st, err_stop_thread);
  ACXCHECKGOTO(acx_device_watch(dev, s->actor), st, err_stop_actor);
  ACXCHECKGOTO(acx_timer_periodic(sys, s->actor, TICK_NS, MSG_TICK, NULL, 0, &s->timer), st, err_stop_actor);
  acxc_ctrl_set_handler(s->cp, ACXI_CTRL_REBUILD_NOTICE, on_notice, s);
  acxc_ctrl_set_handler(s->cp, ACXI_CTRL_REBUILD_READY, on_ready, s);
  acxc_ctrl_set_handler(s->cp, ACXI_CTRL_REBUILD_ABORT, on_abort, s);
  pthread_mutex_lock(&registry_lock);
  s->next = registry;
  registry = s;
  pthread_mutex_unlock(&registry_lock);
  if (coll) atomic_store_explicit(&coll->supervised, 1, memory_order_release);
  ACX_INFO(COLL, "world supervised: rank %d, rebuild deadline %" PRId64 " ms, %d attempts", acxc_ctrl_rank(s->cp),
           s->timeout_ns / 1000000, s->attempts);
  return ACX_OK;

err_stop_actor:
  stop_actor(s);
err_stop_thread:
  pthread_mutex_lock(&s->lock);
  s->stop = 1;
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
  pthread_join(s->thread, NULL);
err_release_ctrl:
  acxc_ctrl_release(s->cp, 0);
  sup_free(s);
  return st;
}

acx_status_t acx_world_unsupervise(acx_world_t *world, int64_t timeout_ns) {
  ACX_CHECK_NULL(world);
  pthread_mutex_lock(&registry_lock);
  sup_t **pp = &registry;
  while (*pp && (*pp)->w != world) pp = &(*pp)->next;
  sup_t *s = *pp;
  if (s) *pp = s->next;
  pthread_mutex_unlock(&registry_lock);
  if (!s) {
    ACX_WARN(COLL, "acx_world_unsupervise: this world is not supervised");
    return ACX_ERR_INVALID_STATE;
  }
  if (s->coll) atomic_store_explicit(&s->coll->supervised, 0, memory_order_release);
  stop_actor(s);
  acxc_ctrl_set_handler(s->cp, ACXI_CTRL_REBUILD_NOTICE, NULL, NULL);
  acxc_ctrl_set_handler(s->cp, ACXI_CTRL_REBUILD_READY, NULL, NULL);
  acxc_ctrl_set_handler(s->cp, ACXI_CTRL_REBUILD_ABORT, NULL, NULL);
  (void)acxc_ctrl_quiesce(s->cp, 10000000000LL);
  pthread_mutex_lock(&s->lock);
  s->stop = 1;
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
  pthread_join(s->thread, NULL); /* a rebuild under way ends by its deadline */
  acx_status_t st = acxc_ctrl_release(s->cp, timeout_ns);
  sup_free(s);
  return st;
}

static acx_status_t state_locked(const sup_t *s) {
  if (s->state == S_FAILED) return s->fail_status;
  return s->state == S_REBUILDING || s->pending ? ACX_ERR_WORLD_REBUILDING : ACX_OK;
}

acx_status_t acx_world_state(acx_world_t *world) {
  ACX_CHECK_NULL(world);
  sup_t *s = sup_of(world);
  if (!s) return ACX_ERR_INVALID_STATE;
  pthread_mutex_lock(&s->lock);
  acx_status_t st = state_locked(s);
  pthread_mutex_unlock(&s->lock);
  return st;
}

static acx_status_t wait_for(const char *fn, acx_world_t *world, int by_epoch, uint64_t epoch, int64_t timeout_ns) {
  ACX_CHECK_NULL_IN(fn, world, "world");
  sup_t *s = sup_of(world);
  if (!s) {
    ACX_WARN(COLL, "%s: this world is not supervised (acx_world_supervise)", fn);
    return ACX_ERR_INVALID_STATE;
  }
  int64_t deadline = acxi_deadline(timeout_ns);
  pthread_mutex_lock(&s->lock);
  for (;;) {
    acx_status_t st = state_locked(s);
    if (st != ACX_ERR_WORLD_REBUILDING && (!by_epoch || epoch_of(s) > epoch || s->state == S_FAILED)) {
      pthread_mutex_unlock(&s->lock);
      return st;
    }
    if (acxi_now_ns() >= deadline) {
      pthread_mutex_unlock(&s->lock);
      return ACX_ERR_TIMEOUT;
    }
    struct timespec ts = acxi_ts_from_ns(deadline < acxi_now_ns() + 10000000 ? deadline : acxi_now_ns() + 10000000);
    pthread_cond_timedwait(&s->cond, &s->lock, &ts);
  }
}

acx_status_t acx_world_wait_ready(acx_world_t *world, int64_t timeout_ns) {
  return wait_for(__func__, world, 0, 0, timeout_ns);
}

acx_status_t acx_world_wait_epoch(acx_world_t *world, uint64_t epoch, int64_t timeout_ns) {
  return wait_for(__func__, world, 1, epoch, timeout_ns);
}

acx_status_t acx_world_request_rebuild(acx_world_t *world, acx_status_t cause) {
  ACX_CHECK_NULL(world);
  ACX_CHECK_ARG(cause != ACX_OK, "acx_world_request_rebuild: argument 'cause' is ACX_OK");
  sup_t *s = sup_of(world);
  if (!s) {
    ACX_WARN(COLL, "acx_world_request_rebuild: this world is not supervised");
    return ACX_ERR_INVALID_STATE;
  }
  if (trigger_local(s, cause, "requested by the application", acxi_now_ns(), 0, 1)) notify_all(s, cause, 0, 0);
  return ACX_OK;
}

acx_status_t acx_world_rebuild_stats(acx_world_t *world, acx_rebuild_stats_t *out) {
  ACX_CHECK_NULL(world);
  ACX_CHECK_NULL_AS(out, "stats");
  ACX_CHECK_ARG(out->size == sizeof *out, "acx_world_rebuild_stats: stats->size is %zu, expected %zu", out->size,
                sizeof *out);
  sup_t *s = sup_of(world);
  if (!s) {
    ACX_WARN(COLL, "acx_world_rebuild_stats: this world is not supervised");
    return ACX_ERR_INVALID_STATE;
  }
  acx_device_stats_t ds = {.size = sizeof ds};
  int64_t dev_rec = acx_device_stats(s->dev, &ds) == ACX_OK && ds.restarts ? ds.last_recovery_ns : 0;
  pthread_mutex_lock(&s->lock);
  *out = (acx_rebuild_stats_t){.size = sizeof *out,
                               .epoch = epoch_of(s),
                               .rebuilds = s->rebuilds,
                               .failed_attempts = s->failed_attempts,
                               .last_fault_to_ready_ns = s->last_ns,
                               .max_fault_to_ready_ns = s->max_ns,
                               .total_fault_to_ready_ns = s->total_ns,
                               .last_device_recovery_ns = dev_rec,
                               .last_initiator = s->last_initiator,
                               .last_cause = s->last_cause};
  pthread_mutex_unlock(&s->lock);
  return ACX_OK;
}
