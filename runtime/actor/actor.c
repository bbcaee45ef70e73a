/* Actors: spawn, tell/ask/reply, the turn a worker runs for one actor, stop (children first),
 * watch, supervision (one-for-one / all-for-one, max restarts in a window, backoff, escalation)
 * and the system with its root guardian "/" and user guardian "/user". */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/actor/actor_internal.h"
#include "runtime/base/bind.h"
#include "runtime/base/clock.h"
#include "runtime/base/log.h"
#include "runtime/base/param.h"

#define NAME_MAX_LEN 63
#define DEFAULT_MAX_RESTARTS 10
#define DEFAULT_RESTART_WINDOW_NS (60LL * 1000000000LL)

static void actor_free(struct acx_actor *a);
static void request_stop(struct acx_actor *a, acx_status_t reason);

/* initial-exec: libacx is a shared library, and the default model costs a __tls_get_addr call
 * per access on the per-message path */
#define TLS __thread __attribute__((tls_model("initial-exec")))

/* ---------------------------------------------------------------- references */

acx_status_t acx_ref_hold(acx_ref_t ref) {
  ACX_CHECK_NULL(ref);
  /* relaxed: the caller owns a reference already */
  atomic_fetch_add_explicit(&ref->refs, 1, memory_order_relaxed);
  return ACX_OK;
}

void acx_ref_release(acx_ref_t ref) {
  if (!ref) return;
  /* acq_rel: the last releaser sees all writes of the other holders before freeing */
  if (atomic_fetch_sub_explicit(&ref->refs, 1, memory_order_acq_rel) == 1) actor_free(ref);
}

/* The reference a message holds on its sender comes, for messages sent by the actor whose turn
 * this worker runs, from a stock bought SENDER_REF_STOCK at a time: a turn that sends many
 * messages (a fan-out, a sender loop) would otherwise pay a locked add per message. What is left
 * goes back at the end of the turn, while the run queue's reference still pins the actor, so the
 * give-back is never the last release. */
#define SENDER_REF_STOCK 64
static TLS struct acx_actor *tl_turn; /* the actor whose turn this thread runs, else NULL */
static TLS int tl_stock;

static void hold_sender(struct acx_actor *s) {
  if (s == tl_turn) {
    if (tl_stock == 0) { /* relaxed: the turn holds the run queue's reference already */
      atomic_fetch_add_explicit(&s->refs, SENDER_REF_STOCK, memory_order_relaxed);
      tl_stock = SENDER_REF_STOCK;
    }
    tl_stock--;
    return;
  }
  atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed); /* relaxed: the caller holds one */
}

static void turn_refs_end(struct acx_actor *a) {
  /* release: a later last releaser (acq_rel) sees this turn's writes */
  if (tl_stock) atomic_fetch_sub_explicit(&a->refs, tl_stock, memory_order_release);
  tl_stock = 0;
  tl_turn = NULL;
}

static void sys_release(acx_system_t *sys) {
  /* acq_rel: as for actor references */
  if (atomic_fetch_sub_explicit(&sys->refs, 1, memory_order_acq_rel) != 1) return;
  acxi_sched_fini(&sys->sched);
  pthread_mutex_destroy(&sys->tree_lock);
  acx_future_release(sys->root_done);
  free(sys);
}

acx_status_t acx_ref_path(acx_ref_t ref, char *buf, size_t cap) {
  ACX_CHECK_NULL(ref);
  ACX_CHECK_NULL(buf);
  size_t n = strlen(ref->path);
  ACX_CHECK_ARG(n < cap, "acx_ref_path: argument 'cap' (%zu) is too small for '%s'", cap, ref->path);
  memcpy(buf, ref->path, n + 1);
  return ACX_OK;
}

/* ---------------------------------------------------------------- envelopes */

/* Drops what an envelope holds; the envelope memory itself belongs to the mailbox or stash. */
static void env_release(acxi_env_t *e) {
  if (e->msg.sender) acx_ref_release(e->msg.sender);
  if (e->aux) acx_ref_release(e->aux);
  if (e->future) acx_future_release(e->future);
  e->msg.sender = NULL;
  e->aux = NULL;
  e->future = NULL;
}

static void dead_letter(struct acx_actor *a, acxi_env_t *e) {
  if (e->kind == ACXI_ENV_USER) {
    /* relaxed: a statistic */
    atomic_fetch_add_explicit(&a->sys->dead_letters, 1, memory_order_relaxed);
    a->dead_letters++;
    ACX_TRACE(ACTOR, "dead letter: type 0x%x (%zu bytes) to stopped %s", e->msg.type, e->msg.len, a->path);
    if (e->msg.is_ask && e->future) acx_future_complete(e->future, ACX_ERR_ACTOR_STOPPED, NULL, 0);
  }
  env_release(e);
}

/* Refuses a message for a stopped target: a dead letter, the envelope freed. */
static bool refused(struct acx_actor *to, acxi_env_t *e) {
  /* acquire: a STOPPED seen here comes with the drain that already ran; refusing is then safe */
  if (atomic_load_explicit(&to->life, memory_order_acquire) != ACXI_LIFE_STOPPED) return false;
  if (e->kind == ACXI_ENV_USER) {
    atomic_fetch_add_explicit(&to->sys->dead_letters, 1, memory_order_relaxed);
    ACX_INFO(ACTOR, "tell to stopped actor %s: type 0x%x is a dead letter", to->path, e->msg.type);
  }
  env_release(e);
  acxi_env_free(e);
  return true;
}

static void publish(struct acx_actor *to, acxi_env_t *first, acxi_env_t *last) {
  if (acxi_mbox_push_chain(&to->mbox, first, last)) {
    /* the run queue's reference: taken before the actor can run, dropped when it goes idle */
    atomic_fetch_add_explicit(&to->refs, 1, memory_order_relaxed);
    if (acxi_sched_push(&to->sys->sched, &to->rq)) return;
    /* The system's workers are gone and their queues drained (acx_system_destroy): nothing will
     * run a turn of `to` again. This thread found its mailbox idle, so it alone may take from it
     * now: the envelopes are released here (each may hold another actor: left in the mailbox they
     * would keep the whole tree, and the system, alive). A sender that read the target as not yet
     * stopped just before it stopped lands here when the destroy has moved on meanwhile. */
    do {
      for (acxi_env_t *e; (e = acxi_mbox_pop(&to->mbox));) dead_letter(to, e);
    } while (!acxi_mbox_markempty(&to->mbox));
    acx_ref_release(to);
  }
}

/* Tells batched inside a receive hook. A hook that tells the same actor again (a sender loop, a
 * fan-in) links those envelopes privately and publishes them with one exchange on the receiver's
 * mailbox head: with several senders on several cores, an exchange per message made that cache
 * line bounce on every message (40% of the fan-in benchmark). The batch is published when it
 * holds ACX_ACTOR_BATCH messages, before this thread sends anything else (another target, an
 * ask, a reply, a stop, a spawn: every other send goes through push_env, which flushes first),
 * and when the hook returns; so every order that could be observed before still holds, and per-
 * sender FIFO holds because the batch is one contiguous run of this sender's messages. The first
 * tell to a target goes out at once (a ping-pong reply is never delayed); the batch holds a
 * reference on its target, since the hook may drop its own before the batch goes out. */
static TLS int tl_batching;                 /* 1 while this thread runs a receive hook */
static TLS struct acx_actor *tl_last_to;    /* the hook's last direct tell target (compared only) */
static TLS struct acx_actor *tl_pend_to;    /* held: the pending batch's target, or NULL */
static TLS acxi_env_t *tl_pend_first, *tl_pend_last;
static TLS int tl_pend_n;

static void tells_flush(void) {
  struct acx_actor *to = tl_pend_to;
  if (!to) return;
  acxi_env_t *first = tl_pend_first, *last = tl_pend_last;
  tl_pend_to = NULL;
  tl_pend_first = tl_pend_last = NULL;
  tl_pend_n = 0;
  publish(to, first, last);
  acx_ref_release(to); /* usually not the last (a scheduled mailbox holds one); if the target
                        * stopped meanwhile it may be, and frees it as a hook's own release would */
}

static acx_status_t push_env(struct acx_actor *to, acxi_env_t *e) {
  tells_flush(); /* this thread's batched tells go first: they were sent first */
  if (refused(to, e)) return ACX_ERR_ACTOR_STOPPED;
  publish(to, e, e);
  return ACX_OK;
}

static acx_status_t tell_batched(struct acx_actor *to, acxi_env_t *e) {
  if (to != tl_pend_to && to != tl_last_to) {
    tl_last_to = to;
    return push_env(to, e);
  }
  if (refused(to, e)) return ACX_ERR_ACTOR_STOPPED;
  if (to != tl_pend_to) {
    tells_flush();
    atomic_fetch_add_explicit(&to->refs, 1, memory_order_relaxed); /* relaxed: the caller holds one */
    tl_pend_to = to;
    tl_pend_first = e;
  } else { /* relaxed: private until the release store in acxi_mbox_push_chain publishes it */
    atomic_store_explicit(&tl_pend_last->next, e, memory_order_relaxed);
  }
  tl_pend_last = e;
  if (++tl_pend_n >= to->sys->batch) tells_flush();
  return ACX_OK;
}

static acxi_env_t *env_new(int kind, uint32_t type, acx_status_t status, const void *payload, size_t len) {
  acxi_env_t *e = acxi_env_alloc(len);
  if (!e) {
    ACX_WARN(ACTOR, "out of memory for a %zu-byte message", len);
    return NULL;
  }
  e->kind = (uint16_t)kind;
  e->msg.type = type;
  e->msg.len = len;
  e->msg.status = status;
  if (len) memcpy(e->data, payload, len);
  return e;
}

acx_status_t acxi_send(acx_ref_t to, int kind, uint32_t type, acx_status_t status, const void *payload, size_t len) {
  acxi_env_t *e = env_new(kind, type, status, payload, len);
  if (!e) return ACX_ERR_NO_MEMORY;
  return push_env(to, e);
}

/* A system message about actor `about` (held by the envelope). */
static acx_status_t send_about(struct acx_actor *to, int kind, struct acx_actor *about, acx_status_t status) {
  acxi_env_t *e = env_new(kind, 0, status, NULL, 0);
  if (!e) return ACX_ERR_NO_MEMORY;
  acx_ref_hold(about);
  e->aux = about;
  return push_env(to, e);
}

static acx_status_t check_payload(const char *fn, uint32_t type, const void *payload, size_t len) {
  if (!payload && len) {
    ACX_WARN(ACTOR, "%s: argument 'payload' is NULL with len %zu", fn, len);
    return ACX_ERR_INVALID_ARG;
  }
  if (type >= ACX_MSG_SYSTEM) {
    ACX_WARN(ACTOR, "%s: argument 'type' 0x%x is reserved for system messages", fn, type);
    return ACX_ERR_INVALID_ARG;
  }
  return ACX_OK;
}

acx_status_t acx_tell(acx_ref_t to, acx_ref_t sender, uint32_t type, const void *payload, size_t len) {
  ACX_CHECK_NULL(to);
  ACXCHECK(check_payload("acx_tell", type, payload, len));
  acxi_env_t *e = env_new(ACXI_ENV_USER, type, ACX_OK, payload, len);
  if (!e) return ACX_ERR_NO_MEMORY;
  if (sender) {
    hold_sender(sender);
    e->msg.sender = sender;
  }
  return tl_batching ? tell_batched(to, e) : push_env(to, e);
}

acx_status_t acx_ask(acx_ref_t to, uint32_t type, const void *payload, size_t len, acx_future_t **future) {
  ACX_CHECK_NULL(to);
  ACX_CHECK_NULL(future);
  ACXCHECK(check_payload("acx_ask", type, payload, len));
  acx_future_t *f = NULL;
  ACXCHECK(acx_future_create(&f));
  acxi_env_t *e = env_new(ACXI_ENV_USER, type, ACX_OK, payload, len);
  if (!e) {
    acx_future_release(f);
    return ACX_ERR_NO_MEMORY;
  }
  acx_future_hold(f);
  e->future = f;
  e->msg.is_ask = 1;
  acx_status_t s = push_env(to, e);
  if (s != ACX_OK) {
    acx_future_release(f);
    return s;
  }
  *future = f;
  return ACX_OK;
}

/* ---------------------------------------------------------------- hooks and context */

static int ctx_ok(acx_ctx_t *ctx, const char *fn) {
  if (!ctx) {
    ACX_WARN(ACTOR, "%s: argument 'ctx' is NULL", fn);
    return 0;
  }
  if (!ctx->in_hook) {
    ACX_WARN(ACTOR, "%s: called outside the actor's hooks", fn);
    return 0;
  }
  return 1;
}

acx_ref_t acx_self(acx_ctx_t *ctx) { return ctx ? ctx->self : NULL; }
acx_system_t *acx_ctx_system(acx_ctx_t *ctx) { return ctx ? ctx->self->sys : NULL; }
uint32_t acx_ctx_restarts(acx_ctx_t *ctx) { return ctx ? ctx->self->restarts : 0; }

acx_status_t acx_actor_fail(acx_ctx_t *ctx, acx_status_t status) {
  ACX_CHECK_NULL(ctx);
  if (!ctx_ok(ctx, __func__)) return ACX_ERR_INVALID_STATE;
  ACX_CHECK_ARG(status != ACX_OK, "acx_actor_fail: argument 'status' is ACX_OK");
  ctx->fail = status;
  return ACX_OK;
}

acx_status_t acx_stop_self(acx_ctx_t *ctx) {
  ACX_CHECK_NULL(ctx);
  if (!ctx_ok(ctx, __func__)) return ACX_ERR_INVALID_STATE;
  ctx->stop_self = 1;
  return ACX_OK;
}

static acx_status_t find_cur(acx_ctx_t *ctx, const acx_msg_t *msg, const char *fn, acxi_env_t **e) {
  if (!ctx_ok(ctx, fn)) return ACX_ERR_INVALID_STATE;
  if (!ctx->cur || &ctx->cur->msg != msg) {
    ACX_WARN(ACTOR, "%s: argument 'msg' is not the message being handled", fn);
    return ACX_ERR_INVALID_ARG;
  }
  *e = ctx->cur;
  return ACX_OK;
}

acx_status_t acx_reply(acx_ctx_t *ctx, const acx_msg_t *msg, acx_status_t status, const void *payload, size_t len) {
  ACX_CHECK_NULL(ctx);
  ACX_CHECK_NULL(msg);
  ACX_CHECK_ARG(payload || !len, "acx_reply: argument 'payload' is NULL with len %zu", len);
  acxi_env_t *e = NULL;
  ACXCHECK(find_cur(ctx, msg, __func__, &e));
  if (e->msg.is_ask && e->future) return acx_future_complete(e->future, status, payload, len);
  if (!e->msg.sender) {
    ACX_WARN(ACTOR, "acx_reply: message type 0x%x has nobody to answer", msg->type);
    return ACX_ERR_INVALID_STATE;
  }
  acxi_env_t *r = env_new(ACXI_ENV_USER, msg->type, status, payload, len);
  if (!r) return ACX_ERR_NO_MEMORY;
  hold_sender(ctx->self);
  r->msg.sender = ctx->self;
  return push_env(e->msg.sender, r);
}

acx_status_t acx_msg_future(acx_ctx_t *ctx, const acx_msg_t *msg, acx_future_t **future) {
  ACX_CHECK_NULL(ctx);
  ACX_CHECK_NULL(msg);
  ACX_CHECK_NULL(future);
  acxi_env_t *e = NULL;
  ACXCHECK(find_cur(ctx, msg, __func__, &e));
  if (!e->msg.is_ask || !e->future) return ACX_ERR_INVALID_STATE;
  acx_future_hold(e->future);
  *future = e->future;
  return ACX_OK;
}

/* ---------------------------------------------------------------- futures meet actors */

static void then_tell(void *arg, acx_future_t *f, uint64_t cookie) {
  struct acx_actor *to = arg;
  acx_future_done_t d = {.future = f, .cookie = cookie};
  acxi_env_t *e = env_new(ACXI_ENV_USER, ACX_MSG_FUTURE_DONE, ACX_OK, &d, sizeof d);
  if (e) {
    acx_future_hold(f);
    e->future = f;
    push_env(to, e);
  }
  acx_ref_release(to);
}

static void then_drop(void *arg) { acx_ref_release(arg); }

acx_status_t acx_future_then(acx_future_t *future, acx_ref_t to, uint64_t cookie) {
  ACX_CHECK_NULL(future);
  ACX_CHECK_NULL(to);
  acx_ref_hold(to);
  acx_status_t s = acxi_future_on_complete(future, then_tell, then_drop, to, cookie);
  if (s != ACX_OK) {
    ACX_WARN(ACTOR, "acx_future_then: out of memory");
    acx_ref_release(to);
  }
  return s;
}

/* ---------------------------------------------------------------- spawn, lookup */

static int name_ok(const char *name) {
  size_t n = strlen(name);
  return n > 0 && n <= NAME_MAX_LEN && !strchr(name, '/') && strcmp(name, ".") && strcmp(name, "..");
}

/* Under tree_lock: a live child of p named name. */
static struct acx_actor *child_named(struct acx_actor *p, const char *name, size_t n) {
  for (struct acx_actor *c = p->first_child; c; c = c->next_sibling)
    if (strlen(c->name) == n && memcmp(c->name, name, n) == 0 &&
        atomic_load_explicit(&c->stop_req, memory_order_relaxed) == 0 &&
        atomic_load_explicit(&c->life, memory_order_relaxed) == ACXI_LIFE_RUNNING)
      return c;
  return NULL;
}

static acx_status_t props_ok(const acx_props_t *props) {
  ACX_CHECK_ARG(props->size == sizeof(acx_props_t), "acx_spawn: argument 'props' has size %zu, expected %zu",
                props->size, sizeof(acx_props_t));
  ACX_CHECK_ARG(props->receive != NULL, "acx_spawn: argument 'props' has no receive hook");
  ACX_CHECK_ARG(props->strategy == ACX_ONE_FOR_ONE || props->strategy == ACX_ALL_FOR_ONE,
                "acx_spawn: argument 'props' has an unknown strategy %d", (int)props->strategy);
  ACX_CHECK_ARG(props->backoff_min_ns >= 0 && props->backoff_max_ns >= 0,
                "acx_spawn: argument 'props' has a negative backoff");
  return ACX_OK;
}

static acx_status_t spawn(acx_system_t *sys, struct acx_actor *parent, const acx_props_t *props, const char *name,
                          int guardian, acx_ref_t *ref) {
  struct acx_actor *a = aligned_alloc(64, (sizeof *a + 63) & ~(size_t)63);
  if (!a) goto err_nomem;
  memset(a, 0, sizeof *a);
  if (acxi_mbox_init(&a->mbox) != ACX_OK) goto err_free_actor;
  a->props = *props;
  if (props->state_size && !(a->state = calloc(1, props->state_size))) goto err_fini_mbox;
  char anon[32];
  if (!name) {
    snprintf(anon, sizeof anon, "$%llu",
             (unsigned long long)atomic_fetch_add_explicit(&sys->anon_ids, 1, memory_order_relaxed));
    name = anon;
  }
  size_t plen = (parent ? strlen(parent->path) : 0) + strlen(name) + 2;
  if (!(a->path = malloc(plen))) goto err_free_state;
  if (!parent)
    snprintf(a->path, plen, "/");
  else
    snprintf(a->path, plen, "%s/%s", strcmp(parent->path, "/") ? parent->path : "", name);
  a->name = strrchr(a->path, '/') + 1;
  a->sys = sys;
  a->rq.last_worker = -1;
  a->guardian = guardian;
  a->ctx.self = a;
  atomic_init(&a->refs, parent ? 2 : 1); /* the caller's, and the parent's list */
  atomic_init(&a->life, ACXI_LIFE_RUNNING);
  atomic_init(&a->stop_req, 0);
  acxi_env_t *init = env_new(ACXI_ENV_INIT, 0, ACX_OK, NULL, 0);
  if (!init) goto err_free_path;

  if (parent) {
    acx_status_t refuse = ACX_OK;
    pthread_mutex_lock(&sys->tree_lock);
    if (atomic_load_explicit(&parent->life, memory_order_relaxed) != ACXI_LIFE_RUNNING ||
        atomic_load_explicit(&parent->stop_req, memory_order_relaxed) != 0)
      refuse = ACX_ERR_ACTOR_STOPPED;
    else if (child_named(parent, a->name, strlen(a->name)))
      refuse = ACX_ERR_NAME_TAKEN;
    if (refuse == ACX_OK) {
      acx_ref_hold(parent);
      a->parent = parent;
      a->next_sibling = parent->first_child;
      parent->first_child = a;
    }
    pthread_mutex_unlock(&sys->tree_lock);
    if (refuse != ACX_OK) {
      ACX_INFO(ACTOR, "acx_spawn %s: %s", a->path,
               refuse == ACX_ERR_NAME_TAKEN ? "the name is taken" : "the parent is stopping");
      acxi_env_free(init);
      free(a->path);
      free(a->state);
      acxi_mbox_fini(&a->mbox);
      free(a);
      return refuse;
    }
  }
  atomic_fetch_add_explicit(&sys->refs, 1, memory_order_relaxed);
  if (!guardian) atomic_fetch_add_explicit(&sys->actors_live, 1, memory_order_relaxed);
  ACX_TRACE(ACTOR, "spawned %s", a->path);
  push_env(a, init);
  *ref = a;
  return ACX_OK;

err_free_path:
  free(a->path);
err_free_state:
  free(a->state);
err_fini_mbox:
  acxi_mbox_fini(&a->mbox);
err_free_actor:
  free(a);
err_nomem:
  ACX_WARN(ACTOR, "acx_spawn: out of memory");
  return ACX_ERR_NO_MEMORY;
}

acx_status_t acx_spawn(acx_system_t *sys, acx_ref_t parent, const acx_props_t *props, const char *name,
                       acx_ref_t *ref) {
  ACX_CHECK_NULL(sys);
  ACX_CHECK_NULL(props);
  ACX_CHECK_NULL(ref);
  ACXCHECK(props_ok(props));
  ACX_CHECK_ARG(!name || name_ok(name), "acx_spawn: argument 'name' ('%s') must be 1-%d characters without '/'",
                name, NAME_MAX_LEN);
  ACX_CHECK_ARG(!parent || parent->sys == sys, "acx_spawn: argument 'parent' belongs to another system");
  /* acquire: pairs with the release in acx_system_destroy */
  if (atomic_load_explicit(&sys->destroying, memory_order_acquire)) return ACX_ERR_SYSTEM_STOPPING;
  return spawn(sys, parent ? parent : sys->user, props, name, 0, ref);
}

acx_status_t acx_spawn_child(acx_ctx_t *ctx, const acx_props_t *props, const char *name, acx_ref_t *ref) {
  ACX_CHECK_NULL(ctx);
  if (!ctx_ok(ctx, __func__)) return ACX_ERR_INVALID_STATE;
  return acx_spawn(ctx->self->sys, ctx->self, props, name, ref);
}

acx_status_t acx_lookup(acx_system_t *sys, const char *path, acx_ref_t *ref) {
  ACX_CHECK_NULL(sys);
  ACX_CHECK_NULL(path);
  ACX_CHECK_NULL(ref);
  ACX_CHECK_ARG(path[0] == '/', "acx_lookup: argument 'path' ('%s') must start with '/'", path);
  pthread_mutex_lock(&sys->tree_lock);
  struct acx_actor *a = sys->root;
  for (const char *p = path + 1; a && *p;) {
    const char *end = strchrnul(p, '/');
    if (end > p) a = child_named(a, p, (size_t)(end - p));
    p = *end ? end + 1 : end;
  }
  if (a) acx_ref_hold(a);
  pthread_mutex_unlock(&sys->tree_lock);
  if (!a) return ACX_ERR_NOT_FOUND;
  *ref = a;
  return ACX_OK;
}

/* ---------------------------------------------------------------- stop and watch */

static void request_stop(struct acx_actor *a, acx_status_t reason) {
  int expected = 0;
  /* acq_rel: the first request wins; its reason is read by the actor's turn (acquire there) */
  if (atomic_compare_exchange_strong_explicit(&a->stop_req, &expected, (int)reason + 1, memory_order_acq_rel,
                                              memory_order_relaxed))
    acxi_send(a, ACXI_ENV_STOP, 0, reason, NULL, 0);
}

acx_status_t acx_stop(acx_ref_t ref) {
  ACX_CHECK_NULL(ref);
  ACX_CHECK_ARG(!ref->guardian, "acx_stop: argument 'ref' is the guardian %s (use acx_system_destroy)", ref->path);
  request_stop(ref, ACX_OK);
  return ACX_OK;
}

acx_status_t acx_watch(acx_ref_t watcher, acx_ref_t target) {
  ACX_CHECK_NULL(watcher);
  ACX_CHECK_NULL(target);
  ACX_CHECK_ARG(watcher != target, "acx_watch: an actor cannot watch itself (%s)", target->path);
  acx_system_t *sys = target->sys;
  acxi_watch_t *w = malloc(sizeof *w);
  if (!w) return ACX_ERR_NO_MEMORY;
  pthread_mutex_lock(&sys->tree_lock);
  if (target->watch_closed) {
    acx_status_t reason = target->reason;
    pthread_mutex_unlock(&sys->tree_lock);
    free(w);
    acx_down_t d = {.actor = target, .reason = reason};
    acxi_env_t *e = env_new(ACXI_ENV_USER, ACX_MSG_DOWN, ACX_OK, &d, sizeof d);
    if (!e) return ACX_ERR_NO_MEMORY;
    acx_ref_hold(target);
    e->aux = target;
    push_env(watcher, e);
    return ACX_OK;
  }
  acx_ref_hold(watcher);
  w->watcher = watcher;
  w->next = target->watchers;
  target->watchers = w;
  pthread_mutex_unlock(&sys->tree_lock);
  return ACX_OK;
}

acx_status_t acx_unwatch(acx_ref_t watcher, acx_ref_t target) {
  ACX_CHECK_NULL(watcher);
  ACX_CHECK_NULL(target);
  acxi_watch_t *found = NULL;
  pthread_mutex_lock(&target->sys->tree_lock);
  for (acxi_watch_t **pp = &target->watchers; *pp; pp = &(*pp)->next)
    if ((*pp)->watcher == watcher) {
      found = *pp;
      *pp = found->next;
      break;
    }
  pthread_mutex_unlock(&target->sys->tree_lock);
  if (!found) return ACX_ERR_NOT_FOUND;
  acx_ref_release(found->watcher);
  free(found);
  return ACX_OK;
}

/* Turn of a: post_stop, watchers, parent; then everything queued is a dead letter. */
static void finish_stop(struct acx_actor *a) {
  acx_system_t *sys = a->sys;
  if (a->initialized && a->props.post_stop) {
    a->ctx.in_hook = 1;
    a->props.post_stop(&a->ctx, a->state);
    a->ctx.in_hook = 0;
  }
  pthread_mutex_lock(&sys->tree_lock);
  acxi_watch_t *w = a->watchers;
  a->watchers = NULL;
  a->watch_closed = 1;
  /* release: a tell that reads STOPPED (acquire) finds the drain below already promised */
  atomic_store_explicit(&a->life, ACXI_LIFE_STOPPED, memory_order_release);
  pthread_mutex_unlock(&sys->tree_lock);
  while (w) {
    acxi_watch_t *next = w->next;
    acx_down_t d = {.actor = a, .reason = a->reason};
    acxi_env_t *e = env_new(ACXI_ENV_USER, ACX_MSG_DOWN, ACX_OK, &d, sizeof d);
    if (e) {
      acx_ref_hold(a);
      e->aux = a;
      push_env(w->watcher, e);
    }
    acx_ref_release(w->watcher);
    free(w);
    w = next;
  }
  for (acxi_env_t *e = a->stash_head, *next; e; e = next) {
    next = e->link;
    dead_letter(a, e);
    acxi_env_free(e);
  }
  a->stash_head = a->stash_tail = NULL;
  for (acxi_env_t *e; (e = acxi_mbox_pop(&a->mbox));) dead_letter(a, e);
  if (a->dead_letters)
    ACX_INFO(ACTOR, "%s stopped (%s) with %llu dead letters", a->path, acx_status_name(a->reason),
             (unsigned long long)a->dead_letters);
  else
    ACX_TRACE(ACTOR, "%s stopped (%s)", a->path, acx_status_name(a->reason));
  free(a->state);
  a->state = NULL;
  if (!a->guardian) atomic_fetch_sub_explicit(&sys->actors_live, 1, memory_order_relaxed);
  if (a->parent)
    send_about(a->parent, ACXI_ENV_CHILD_STOPPED, a, a->reason);
  else
    acx_future_complete(sys->root_done, ACX_OK, NULL, 0);
}

/* Turn of a: a stop request was seen. Children stop first. */
static void begin_stop(struct acx_actor *a) {
  acx_system_t *sys = a->sys;
  /* acquire: pairs with request_stop's CAS */
  a->reason = (acx_status_t)(atomic_load_explicit(&a->stop_req, memory_order_acquire) - 1);
  int n = 0;
  pthread_mutex_lock(&sys->tree_lock);
  /* relaxed: spawn reads life under the same lock */
  atomic_store_explicit(&a->life, ACXI_LIFE_STOPPING, memory_order_relaxed);
  for (struct acx_actor *c = a->first_child; c; c = c->next_sibling) {
    request_stop(c, ACX_OK);
    n++;
  }
  pthread_mutex_unlock(&sys->tree_lock);
  a->children_waiting = n;
}

/* Turn of a, between two messages: takes the stop as far as it can go now. Stop transitions run
 * only here, never inside handle(): finish_stop drains the mailbox, and the mailbox's current node
 * (the envelope handle() is using) is what the drain's first pop frees. Checking after every
 * message, not only before the next pop, is what makes a STOP handled as a turn's last message,
 * or an INIT handled after an early STOP, start the stop before the actor goes idle. */
static void stop_step(struct acx_actor *a) {
  int life = atomic_load_explicit(&a->life, memory_order_relaxed); /* relaxed: this turn writes it */
  if (life == ACXI_LIFE_RUNNING) {
    /* relaxed: the STOP envelope follows the flag; popping it (acquire) makes the flag visible,
     * and this check runs after every handled message. Not before init: INIT is handled before
     * any stop, so a started actor always gets post_stop. */
    if (!a->initialized || !atomic_load_explicit(&a->stop_req, memory_order_relaxed)) return;
    begin_stop(a);
    life = ACXI_LIFE_STOPPING;
  }
  if (life == ACXI_LIFE_STOPPING && a->children_waiting == 0) finish_stop(a);
}

static void unlink_child(struct acx_actor *p, struct acx_actor *c) {
  int found = 0;
  pthread_mutex_lock(&p->sys->tree_lock);
  for (struct acx_actor **pp = &p->first_child; *pp; pp = &(*pp)->next_sibling)
    if (*pp == c) {
      *pp = c->next_sibling;
      c->next_sibling = NULL;
      found = 1;
      break;
    }
  pthread_mutex_unlock(&p->sys->tree_lock);
  if (found) acx_ref_release(c); /* the list's reference */
}

/* ---------------------------------------------------------------- supervision */

static void fail(struct acx_actor *a, acx_status_t status);

static void run_init(struct acx_actor *a) {
  a->ctx.fail = ACX_OK;
  a->ctx.in_hook = 1;
  acx_status_t s = a->props.init ? a->props.init(&a->ctx, a->state, a->props.arg) : ACX_OK;
  a->ctx.in_hook = 0;
  if (s == ACX_OK) s = a->ctx.fail;
  a->initialized = 1;
  if (a->ctx.stop_self) {
    a->ctx.stop_self = 0;
    request_stop(a, ACX_OK);
  }
  if (s != ACX_OK) fail(a, s);
}

static void restart(struct acx_actor *a, acx_status_t cause) {
  if (a->initialized && a->props.pre_restart) {
    a->ctx.in_hook = 1;
    a->props.pre_restart(&a->ctx, a->state, cause);
    a->ctx.in_hook = 0;
  }
  if (a->state) memset(a->state, 0, a->props.state_size);
  a->restarts++;
  atomic_fetch_add_explicit(&a->sys->restarts, 1, memory_order_relaxed);
  a->suspended = 0;
  ACX_INFO(ACTOR, "%s restarts (%u) after %s", a->path, a->restarts, acx_status_name(cause));
  run_init(a);
}

static void fail(struct acx_actor *a, acx_status_t status) {
  a->suspended = 1;
  ACX_INFO(ACTOR, "%s failed: %s", a->path, acx_status_name(status));
  if (a->parent) {
    send_about(a->parent, ACXI_ENV_FAILED, a, status);
  } else {
    ACX_WARN(ACTOR, "the root guardian failed (%s): stopping it", acx_status_name(status));
    request_stop(a, status);
  }
}

static void deliver(struct acx_actor *a, acxi_env_t *e);

/* Turn of parent p: child c failed with s. */
static void supervise(struct acx_actor *p, struct acx_actor *c, acx_status_t s) {
  if (atomic_load_explicit(&c->stop_req, memory_order_relaxed) || c->parent != p) return;
  acx_directive_t d = p->props.decider ? p->props.decider(s, p->state) : ACX_RESTART;
  int64_t now = acxi_now_ns();
  if (d == ACX_RESTART) {
    int max = p->props.max_restarts > 0 ? p->props.max_restarts : DEFAULT_MAX_RESTARTS;
    int64_t window = p->props.restart_window_ns > 0 ? p->props.restart_window_ns : DEFAULT_RESTART_WINDOW_NS;
    if (c->win_count == 0 || now - c->win_start > window) {
      c->win_start = now;
      c->win_count = 0;
    }
    if (c->win_count >= max) {
      ACX_WARN(ACTOR, "%s failed %d times within %lld ms (%s): escalating", c->path, c->win_count + 1,
               (long long)(window / 1000000), acx_status_name(s));
      d = ACX_ESCALATE;
    } else {
      c->win_count++;
    }
  }
  int64_t delay = 0;
  if (d == ACX_RESTART && p->props.backoff_min_ns > 0) {
    delay = p->props.backoff_min_ns;
    for (int i = 1; i < c->win_count && delay < INT64_MAX / 2; i++) delay *= 2;
    if (p->props.backoff_max_ns > 0 && delay > p->props.backoff_max_ns) delay = p->props.backoff_max_ns;
  }
  int n = 0;
  struct acx_actor *targets[64], **all = targets;
  if ((d == ACX_RESTART || d == ACX_STOP) && p->props.strategy == ACX_ALL_FOR_ONE) {
    pthread_mutex_lock(&p->sys->tree_lock);
    int cnt = 0;
    for (struct acx_actor *x = p->first_child; x; x = x->next_sibling) cnt++;
    if (cnt > 64) all = malloc(sizeof *all * (size_t)cnt);
    if (all) {
      for (struct acx_actor *x = p->first_child; x; x = x->next_sibling) {
        acx_ref_hold(x);
        all[n++] = x;
      }
    } else {
      ACX_WARN(ACTOR, "%s: out of memory for all-for-one: applying the directive to %s only", p->path, c->path);
      all = targets;
    }
    pthread_mutex_unlock(&p->sys->tree_lock);
  }
  if (n == 0) {
    acx_ref_hold(c);
    all[n++] = c;
  }
  switch (d) {
  case ACX_RESUME:
    acxi_send(c, ACXI_ENV_RESUME, 0, s, NULL, 0);
    break;
  case ACX_RESTART:
    for (int i = 0; i < n; i++) {
      if (delay > 0 && acxi_timer_add(&p->sys->timers, all[i], delay, 0, ACXI_ENV_RESTART, 0, s, NULL, 0, NULL) ==
                           ACX_OK)
        continue;
      acxi_send(all[i], ACXI_ENV_RESTART, 0, s, NULL, 0);
    }
    break;
  case ACX_STOP:
    for (int i = 0; i < n; i++) request_stop(all[i], s);
    break;
  case ACX_ESCALATE:
  default:
    request_stop(c, ACX_ERR_ESCALATED);
    if (p->guardian) {
      ACX_WARN(ACTOR, "top-level actor %s escalated %s: stopped", c->path, acx_status_name(s));
    } else {
      acx_down_t dn = {.actor = c, .reason = s};
      acxi_env_t *e = env_new(ACXI_ENV_USER, ACX_MSG_ESCALATED, ACX_OK, &dn, sizeof dn);
      if (e) {
        deliver(p, e); /* lets the parent see what escalated before it fails itself */
        env_release(e);
        acxi_env_free(e);
      }
      fail(p, s);
    }
    break;
  }
  for (int i = 0; i < n; i++) acx_ref_release(all[i]);
  if (all != targets) free(all);
}

/* ---------------------------------------------------------------- the turn */

static void deliver(struct acx_actor *a, acxi_env_t *e) {
  acx_ctx_t *ctx = &a->ctx;
  /* counted before the hook runs: a reply the hook sends then comes after the count, so an asker
   * that reads the statistics after its answer sees its own message counted */
  acxi_worker_t *w = acxi_sched_current();
  if (w) /* relaxed load+store: only this worker writes its counter */
    atomic_store_explicit(&w->delivered, atomic_load_explicit(&w->delivered, memory_order_relaxed) + 1,
                          memory_order_relaxed);
  ctx->cur = e;
  ctx->fail = ACX_OK;
  ctx->in_hook = 1;
  tl_batching = 1;
  tl_last_to = NULL;
  acx_status_t s = a->props.receive(ctx, a->state, &e->msg);
  tl_batching = 0;
  tl_last_to = NULL;
  tells_flush(); /* before the turn goes on: the hook's tells are out when it has returned */
  ctx->in_hook = 0;
  ctx->cur = NULL;
  if (s == ACX_OK) s = ctx->fail;
  if (ctx->stop_self) {
    ctx->stop_self = 0;
    request_stop(a, ACX_OK);
  }
  if (s != ACX_OK && e->kind == ACXI_ENV_USER) {
    if (e->msg.is_ask && e->future) acx_future_complete(e->future, ACX_ERR_ACTOR_FAILED, NULL, 0);
    if (e->msg.type != ACX_MSG_ESCALATED) fail(a, s);
  }
}

/* A copy that outlives the mailbox slot; the references move into it. */
static void stash(struct acx_actor *a, acxi_env_t *e) {
  acxi_env_t *c = acxi_env_alloc(e->msg.len);
  if (!c) {
    ACX_WARN(ACTOR, "%s: out of memory stashing a message during failure: dropped", a->path);
    dead_letter(a, e);
    return;
  }
  size_t len = e->msg.len;
  c->kind = e->kind;
  c->msg = e->msg;
  c->msg.data = c->data;
  c->future = e->future;
  c->aux = e->aux;
  if (len) memcpy(c->data, e->data, len);
  e->msg.sender = NULL;
  e->future = NULL;
  e->aux = NULL;
  c->link = NULL;
  if (a->stash_tail)
    a->stash_tail->link = c;
  else
    a->stash_head = c;
  a->stash_tail = c;
}

/* Sender references released by a turn are summed and dropped with one atomic per run of
 * messages from the same sender: the sender's worker takes them one by one, and a release per
 * message would bounce that cache line between the two cores on every message. */
static TLS struct acx_actor *tl_rel;
static TLS int tl_rel_n;

static void flush_sender_releases(void) {
  struct acx_actor *s = tl_rel;
  if (!s) return;
  int n = tl_rel_n;
  tl_rel = NULL;
  tl_rel_n = 0;
  /* acq_rel: as in acx_ref_release */
  if (atomic_fetch_sub_explicit(&s->refs, n, memory_order_acq_rel) == n) actor_free(s);
}

static void release_sender_later(acxi_env_t *e) {
  struct acx_actor *s = e->msg.sender;
  if (!s) return;
  e->msg.sender = NULL;
  if (s != tl_rel) {
    flush_sender_releases();
    tl_rel = s;
  }
  tl_rel_n++;
}

static void handle(struct acx_actor *a, acxi_env_t *e) {
  int life = atomic_load_explicit(&a->life, memory_order_relaxed); /* relaxed: this turn writes it */
  switch (e->kind) {
  case ACXI_ENV_USER:
    if (life != ACXI_LIFE_RUNNING) {
      dead_letter(a, e);
      return;
    }
    if (a->suspended || !a->initialized) {
      stash(a, e);
      return;
    }
    deliver(a, e);
    release_sender_later(e);
    break;
  case ACXI_ENV_INIT:
    if (life == ACXI_LIFE_RUNNING) run_init(a);
    break;
  case ACXI_ENV_STOP:
    break; /* the flag carries the request; the message only makes sure we run */
  case ACXI_ENV_FAILED:
    if (life == ACXI_LIFE_RUNNING) supervise(a, e->aux, e->msg.status);
    break;
  case ACXI_ENV_RESTART:
    if (life == ACXI_LIFE_RUNNING) restart(a, e->msg.status);
    break;
  case ACXI_ENV_RESUME:
    if (life == ACXI_LIFE_RUNNING) a->suspended = 0;
    break;
  case ACXI_ENV_CHILD_STOPPED:
    unlink_child(a, e->aux);
    if (life == ACXI_LIFE_STOPPING) a->children_waiting--; /* stop_step finishes at 0 */
    break;
  default:
    ACX_WARN(ACTOR, "%s: unknown envelope kind %d", a->path, e->kind);
  }
  env_release(e);
}

static bool run_turn(acxi_worker_t *w, acxi_runnable_t *r) {
  struct acx_actor *a = (struct acx_actor *)r;
  int batch = a->sys->batch;
  tl_turn = a;
  stop_step(a); /* a request made while the actor was idle and the STOP is still on its way */
  for (int n = 0; n < batch; n++) {
    if (!a->suspended && a->stash_head &&
        atomic_load_explicit(&a->life, memory_order_relaxed) == ACXI_LIFE_RUNNING) {
      acxi_env_t *e = a->stash_head;
      a->stash_head = e->link;
      if (!a->stash_head) a->stash_tail = NULL;
      handle(a, e);
      acxi_env_free(e);
      stop_step(a);
      continue;
    }
    acxi_env_t *e = acxi_mbox_pop(&a->mbox);
    if (!e) break;
    handle(a, e);
    stop_step(a);
  }
  flush_sender_releases();
  turn_refs_end(a);
  if (!a->suspended && a->stash_head && atomic_load_explicit(&a->life, memory_order_relaxed) == ACXI_LIFE_RUNNING)
    return true;
  if (!acxi_mbox_markempty(&a->mbox)) return true;
  acx_ref_release(a); /* the run queue's reference */
  return false;
}

/* ---------------------------------------------------------------- freeing */

static void actor_free(struct acx_actor *a) {
  acx_system_t *sys = a->sys;
  for (acxi_env_t *e; (e = acxi_mbox_pop(&a->mbox));) dead_letter(a, e);
  for (acxi_env_t *e = a->stash_head, *next; e; e = next) {
    next = e->link;
    dead_letter(a, e);
    acxi_env_free(e);
  }
  acxi_mbox_fini(&a->mbox);
  for (acxi_watch_t *w = a->watchers, *next; w; w = next) {
    next = w->next;
    acx_ref_release(w->watcher);
    free(w);
  }
  if (atomic_load_explicit(&a->life, memory_order_relaxed) != ACXI_LIFE_STOPPED && !a->guardian)
    atomic_fetch_sub_explicit(&sys->actors_live, 1, memory_order_relaxed);
  free(a->state);
  free(a->path);
  struct acx_actor *parent = a->parent;
  free(a);
  if (parent) acx_ref_release(parent);
  sys_release(sys);
}

/* ---------------------------------------------------------------- the system */

static acx_status_t guardian_receive(acx_ctx_t *ctx, void *state, const acx_msg_t *msg) {
  ACX_TRACE(ACTOR, "%s ignores message type 0x%x", ctx->self->path, msg->type);
  return ACX_OK;
}

/* The cpuset of a new system: config->cpuset when the caller's struct has the field and sets it,
 * else ACX_CPUSET ("" leaves the workers unbound). */
static acx_status_t system_cpuset(const acx_system_config_t *config, acxi_cpuset_t *cs) {
  const char *list = config && config->size >= offsetof(acx_system_config_t, cpuset) + sizeof config->cpuset
                         ? config->cpuset
                         : NULL;
  if (list) {
    acx_status_t st = acxi_cpuset_parse(list, cs);
    if (st == ACX_ERR_INVALID_ARG)
      ACX_WARN(ACTOR, "acx_system_create: argument 'config->cpuset' = '%s' is not a non-empty cpuset list "
               "(e.g. \"0-15,32-47\")", list);
    return st;
  }
  const char *env = acxi_param_str("ACX_CPUSET");
  if (!env || !*env) return acxi_cpuset_parse(NULL, cs);
  acx_status_t st = acxi_cpuset_parse(env, cs);
  if (st == ACX_ERR_INVALID_ARG) {
    ACX_WARN(ACTOR, "ACX_CPUSET='%s' is not a non-empty cpuset list (e.g. \"0-15,32-47\")", env);
    return ACX_ERR_BAD_PARAM;
  }
  return st;
}

acx_status_t acx_system_create(const acx_system_config_t *config, acx_system_t **sys_out) {
  ACX_CHECK_NULL_AS(sys_out, "sys");
  /* Growth rule: fields are only appended, so a caller built against an older header passes a
   * smaller size; every size from the first release's struct (up to name) to today's is valid. */
  ACX_CHECK_ARG(!config || (config->size >= offsetof(acx_system_config_t, name) + sizeof config->name &&
                            config->size <= sizeof(acx_system_config_t)),
                "acx_system_create: argument 'config' has size %zu, expected %zu (ACX_SYSTEM_CONFIG_INIT)",
                config ? config->size : 0, sizeof(acx_system_config_t));
  int threads = config && config->threads > 0 ? config->threads : (int)acxi_param_int("ACX_THREADS");
  int batch = config && config->batch > 0 ? config->batch : (int)acxi_param_int("ACX_ACTOR_BATCH");
  ACX_CHECK_ARG(threads > 0 && threads <= 1024, "acx_system_create: %d worker threads (ACX_THREADS) is out of 1..1024",
                threads);
  ACX_CHECK_ARG(batch > 0, "acx_system_create: batch (ACX_ACTOR_BATCH) %d must be positive", batch);
  int64_t wake_ns = acxi_param_int("ACX_IDLE_WAKE_NS");
  ACX_CHECK_ARG(wake_ns >= 100000 && wake_ns <= 10000000000LL,
                "acx_system_create: ACX_IDLE_WAKE_NS %lld is out of 100000..10000000000 ns", (long long)wake_ns);
  int64_t steal_wait_ns = acxi_param_int("ACX_STEAL_WAIT_NS");
  ACX_CHECK_ARG(steal_wait_ns >= 0 && steal_wait_ns <= 1000000000LL,
                "acx_system_create: ACX_STEAL_WAIT_NS %lld is out of 0..1000000000 ns", (long long)steal_wait_ns);
  acxi_cpuset_t cpuset = ACXI_CPUSET_NONE;
  acx_status_t res = system_cpuset(config, &cpuset);
  if (res != ACX_OK) return res;
  acx_system_t *sys = calloc(1, sizeof *sys);
  if (!sys) {
    res = ACX_ERR_NO_MEMORY;
    goto err_free_cpuset;
  }
  snprintf(sys->name, sizeof sys->name, "%s", config && config->name ? config->name : "acx");
  atomic_init(&sys->refs, 1);
  sys->batch = batch;
  pthread_mutex_init(&sys->tree_lock, NULL);
  ACXCHECKGOTO(acx_future_create(&sys->root_done), res, err_free_sys);
  ACXCHECKGOTO(acxi_timers_start(&sys->timers, sys->name), res, err_release_future);
  ACXCHECKGOTO(acxi_sched_start(&sys->sched, threads, acxi_param_int("ACX_SPIN_NS"), wake_ns, steal_wait_ns,
                                run_turn, sys->name, &cpuset),
               res, err_stop_timers);
  /* The workers accepted the set, so the timer thread (started unbound) can take it too. */
  int rc = acxi_thread_bind(sys->timers.thread, &cpuset);
  if (rc) ACX_WARN(ACTOR, "binding the timer thread of '%s' to %s failed: %s", sys->name, cpuset.list, strerror(rc));
  acx_props_t gp = ACX_PROPS_INIT;
  gp.receive = guardian_receive;
  ACXCHECKGOTO(spawn(sys, NULL, &gp, NULL, 1, &sys->root), res, err_stop_sched);
  res = spawn(sys, sys->root, &gp, "user", 1, &sys->user);
  if (res != ACX_OK) {
    acxi_cpuset_fini(&cpuset);
    acx_system_destroy(sys, 5LL * 1000000000LL); /* the root runs: take the normal way down */
    return res;
  }
  char where[ACX_TOPO_CPUSET_STRLEN];
  ACX_INFO(ACTOR, "actor system '%s': %d workers, batch %d, %s %s", sys->name, threads, batch,
           cpuset.set ? "bound to cpuset" : "unbound, on the creator's cpuset",
           acxi_thread_cpuset_str(sys->sched.workers[0].thread, where, sizeof where));
  acxi_cpuset_fini(&cpuset);
  *sys_out = sys;
  return ACX_OK;

err_stop_sched:
  acxi_sched_stop(&sys->sched, acxi_deadline(5LL * 1000000000LL));
  acxi_sched_fini(&sys->sched);
err_stop_timers:
  acxi_timers_stop(&sys->timers);
err_release_future:
  acx_future_release(sys->root_done);
err_free_sys:
  pthread_mutex_destroy(&sys->tree_lock);
  free(sys);
err_free_cpuset:
  acxi_cpuset_fini(&cpuset);
  return res;
}

acx_status_t acx_system_destroy(acx_system_t *sys, int64_t timeout_ns) {
  ACX_CHECK_NULL(sys);
  ACX_CHECK_ARG(timeout_ns >= 0, "acx_system_destroy: argument 'timeout_ns' is negative");
  ACX_CHECK_ARG(!acxi_sched_current() || acxi_sched_current()->sched != &sys->sched,
                "acx_system_destroy: called from one of its own workers");
  int64_t deadline = acxi_deadline(timeout_ns);
  /* release: spawns that see the flag see a system already going down */
  atomic_store_explicit(&sys->destroying, 1, memory_order_release);
  request_stop(sys->root, ACX_ERR_SYSTEM_STOPPING);
  acx_status_t res = acx_future_wait(sys->root_done, timeout_ns, NULL, 0, NULL);
  if (res == ACX_ERR_TIMEOUT)
    ACX_WARN(ACTOR, "acx_system_destroy: actors still running at the deadline (%lld live)",
             (long long)atomic_load(&sys->actors_live));
  acxi_timers_stop(&sys->timers);
  acx_status_t s = acxi_sched_stop(&sys->sched, deadline);
  if (s != ACX_OK) {
    ACX_WARN(ACTOR, "acx_system_destroy: workers still busy at the deadline: the system is leaked");
    return s;
  }
  /* An actor still queued had messages its last turn never took: a stopped actor can be sent one
   * (a parent its last child's CHILD_STOPPED, a stop racing its own finish) that only a later turn
   * would release. Released here, with the workers gone: such an envelope holds the actor it is
   * about, which holds its parent, the recipient -- a cycle that leaked the whole system (once in
   * 12 runs of test_destroy_while_stopping under ASan beside two busy loops). */
  for (acxi_runnable_t *r; (r = acxi_sched_drain(&sys->sched));) {
    struct acx_actor *a = (struct acx_actor *)r;
    for (acxi_env_t *e; (e = acxi_mbox_pop(&a->mbox));) dead_letter(a, e);
    acx_ref_release(a);
  }
  if (sys->user) acx_ref_release(sys->user);
  acx_ref_release(sys->root);
  sys_release(sys);
  return res == ACX_OK ? ACX_OK : ACX_ERR_TIMEOUT;
}

acx_status_t acx_system_stats(acx_system_t *sys, acx_system_stats_t *stats) {
  ACX_CHECK_NULL(sys);
  ACX_CHECK_NULL(stats);
  /* relaxed: statistics, each counter on its own */
  stats->messages = acxi_sched_delivered(&sys->sched);
  stats->dead_letters = atomic_load_explicit(&sys->dead_letters, memory_order_relaxed);
  stats->restarts = atomic_load_explicit(&sys->restarts, memory_order_relaxed);
  int64_t live = atomic_load_explicit(&sys->actors_live, memory_order_relaxed);
  stats->actors_live = live > 0 ? (uint64_t)live : 0;
  return ACX_OK;
}

acx_status_t acx_timer_once(acx_system_t *sys, acx_ref_t to, int64_t delay_ns, uint32_t type, const void *payload,
                            size_t len, acx_timer_id_t *id) {
  ACX_CHECK_NULL(sys);
  ACX_CHECK_NULL(to);
  ACX_CHECK_ARG(delay_ns >= 0, "acx_timer_once: argument 'delay_ns' is negative");
  ACXCHECK(check_payload("acx_timer_once", type, payload, len));
  return acxi_timer_add(&sys->timers, to, delay_ns, 0, ACXI_ENV_USER, type, ACX_OK, payload, len, id);
}

acx_status_t acx_timer_periodic(acx_system_t *sys, acx_ref_t to, int64_t period_ns, uint32_t type,
                                const void *payload, size_t len, acx_timer_id_t *id) {
  ACX_CHECK_NULL(sys);
  ACX_CHECK_NULL(to);
  ACX_CHECK_ARG(period_ns > 0, "acx_timer_periodic: argument 'period_ns' must be positive");
  ACXCHECK(check_payload("acx_timer_periodic", type, payload, len));
  return acxi_timer_add(&sys->timers, to, period_ns, period_ns, ACXI_ENV_USER, type, ACX_OK, payload, len, id);
}

acx_status_t acx_timer_cancel(acx_system_t *sys, acx_timer_id_t id) {
  ACX_CHECK_NULL(sys);
  return acxi_timer_cancel(&sys->timers, id);
}
