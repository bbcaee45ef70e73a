/* The acx actor system: per-process workers, actors with lock-free mailboxes, futures,
 * supervision, timers. Data flows rank -> actor -> command -> executor -> completion -> reply;
 * this header is the first step of that path.
 *
 * Threads: every function here may be called from any thread (actor or not) unless it says
 * otherwise. Functions taking an acx_ctx_t may only be called from inside that actor's hook. */
#ifndef ACX_ACTOR_H
#define ACX_ACTOR_H

/* Exported from libacx, which hides everything else (cmake/libacx.map). */
#pragma GCC visibility push(default)

#include <stddef.h>
#include <stdint.h>

#include "acx/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct acx_system acx_system_t;
/* A counted reference to an actor. It stays valid (telling it returns ACX_ERR_ACTOR_STOPPED)
 * after the actor stops, until the last acx_ref_release. */
typedef struct acx_actor *acx_ref_t;
typedef struct acx_future acx_future_t;
typedef struct acx_ctx acx_ctx_t; /* the running actor's view of itself, inside hooks only */
typedef uint64_t acx_timer_id_t;

/* Message types below this are the user's; ACX_MSG_SYSTEM and up are reserved. */
#define ACX_MSG_SYSTEM 0xffff0000u
#define ACX_MSG_DOWN (ACX_MSG_SYSTEM + 1)        /* payload acx_down_t: a watched actor stopped */
#define ACX_MSG_FUTURE_DONE (ACX_MSG_SYSTEM + 2) /* payload acx_future_done_t: acx_future_then */
#define ACX_MSG_ESCALATED (ACX_MSG_SYSTEM + 3)   /* payload acx_down_t: a child escalated its failure */

typedef struct acx_msg {
  uint32_t type;
  size_t len;
  const void *data;  /* valid for the duration of the receive hook only */
  acx_ref_t sender;  /* borrowed; NULL when sent from outside an actor. acx_ref_hold to keep it */
  int is_ask;        /* 1 when the sender waits for acx_reply */
  acx_status_t status; /* replies told back by acx_reply: the replier's status; else ACX_OK */
} acx_msg_t;

typedef struct acx_down {
  acx_ref_t actor;     /* borrowed for the duration of the hook */
  acx_status_t reason; /* ACX_OK for a normal stop */
} acx_down_t;

typedef struct acx_future_done {
  acx_future_t *future; /* borrowed; the result can be read with acx_future_result */
  uint64_t cookie;
} acx_future_done_t;

/* Supervision. The parent's props decide what happens to a failing child. */
typedef enum acx_directive {
  ACX_RESTART = 0, /* re-initialise the child's state (pre_restart, then init); mailbox kept */
  ACX_RESUME = 1,  /* keep state, go on with the next message */
  ACX_STOP = 2,    /* stop the child */
  ACX_ESCALATE = 3 /* fail the parent with the child's status */
} acx_directive_t;

typedef enum acx_strategy {
  ACX_ONE_FOR_ONE = 0, /* the directive applies to the failing child only */
  ACX_ALL_FOR_ONE = 1  /* the directive applies to all children of this parent */
} acx_strategy_t;

typedef acx_directive_t (*acx_decider_fn)(acx_status_t failure, void *parent_state);

typedef struct acx_props {
  size_t size;       /* sizeof(acx_props_t): lets the struct grow; set by ACX_PROPS_INIT */
  size_t state_size; /* bytes of zeroed state the runtime allocates for the actor */
  /* Hooks. receive is required; the rest may be NULL. A non-OK status from init or receive is a
   * failure handled by the parent's supervision. */
  acx_status_t (*init)(acx_ctx_t *ctx, void *state, const void *arg);
  acx_status_t (*receive)(acx_ctx_t *ctx, void *state, const acx_msg_t *msg);
  void (*post_stop)(acx_ctx_t *ctx, void *state);
  void (*pre_restart)(acx_ctx_t *ctx, void *state, acx_status_t cause);
  const void *arg; /* passed to init at start and at every restart */
  /* How this actor supervises its children. */
  acx_strategy_t strategy;
  acx_decider_fn decider;     /* NULL: always ACX_RESTART */
  int max_restarts;           /* within restart_window_ns, then ACX_ESCALATE; <=0 means 10 */
  int64_t restart_window_ns;  /* <=0 means 60 s */
  int64_t backoff_min_ns;     /* 0: restart at once; else first delay, doubled per restart */
  int64_t backoff_max_ns;     /* cap of the exponential backoff */
} acx_props_t;

#define ACX_PROPS_INIT {.size = sizeof(acx_props_t)}

/* Grows by appending fields only: size tells which fields the caller has. Any size from the
 * first struct (size .. name) to sizeof(acx_system_config_t) is accepted; missing fields take
 * their defaults. */
typedef struct acx_system_config {
  size_t size;     /* sizeof(acx_system_config_t): set by ACX_SYSTEM_CONFIG_INIT */
  int threads;     /* worker threads; <=0: ACX_THREADS (default 2) */
  int batch;       /* messages per actor turn; <=0: ACX_ACTOR_BATCH (default 64) */
  const char *name;
  /* Cores of the workers and the timer thread, a cpuset list ("0-15,32-47"), e.g. the cpuset of
   * acx_world_binding (acx/world.h). Workers are created bound to it. NULL: ACX_CPUSET, and when
   * that is empty too the workers are not bound (they inherit the creating thread's mask). The
   * string is copied; it need not outlive the call. */
  const char *cpuset;
} acx_system_config_t;

#define ACX_SYSTEM_CONFIG_INIT {.size = sizeof(acx_system_config_t)}

/* Creates an actor system with its workers and root guardian. config may be NULL.
 * ACX_ERR_NULL_ARG; ACX_ERR_INVALID_ARG (config->size, threads, batch, a malformed or empty
 * config->cpuset, or one with no CPU this process may run on: each logged with the argument);
 * ACX_ERR_BAD_PARAM (a malformed ACX_CPUSET); ACX_ERR_NO_MEMORY; ACX_ERR_SYSTEM. Any thread. */
acx_status_t acx_system_create(const acx_system_config_t *config, acx_system_t **sys);
/* Stops every actor (post_stop hooks run), waits for the workers up to timeout_ns, frees the
 * system. Pending messages become dead letters. ACX_ERR_TIMEOUT if workers did not finish. */
acx_status_t acx_system_destroy(acx_system_t *sys, int64_t timeout_ns);

typedef struct acx_system_stats {
  uint64_t messages;     /* messages delivered to receive hooks */
  uint64_t dead_letters; /* messages that reached a stopped actor or were left at its stop */
  uint64_t restarts;
  uint64_t actors_live;
} acx_system_stats_t;
acx_status_t acx_system_stats(acx_system_t *sys, acx_system_stats_t *stats);

/* Spawns an actor as a child of parent (NULL: the root guardian's user branch). name may be
 * NULL; otherwise unique under the parent and reachable by acx_lookup("/user/<name>/..").
 * *ref is held for the caller: release it with acx_ref_release. */
acx_status_t acx_spawn(acx_system_t *sys, acx_ref_t parent, const acx_props_t *props,
                       const char *name, acx_ref_t *ref);
/* Looks up a named actor, e.g. "/user/device0/blas". *ref is held for the caller. */
acx_status_t acx_lookup(acx_system_t *sys, const char *path, acx_ref_t *ref);

acx_status_t acx_ref_hold(acx_ref_t ref);
void acx_ref_release(acx_ref_t ref);
/* The actor's path ("/user/a/b") into buf. */
acx_status_t acx_ref_path(acx_ref_t ref, char *buf, size_t cap);

/* Sends a copy of payload (len bytes; payload may be NULL only when len is 0). Messages from
 * one sender to one receiver arrive in the order sent. ACX_ERR_ACTOR_STOPPED when the target
 * has stopped (the message is counted as a dead letter). sender may be NULL.
 * Inside a receive hook, the second and later tells in a row to one actor are delivered together:
 * when 64 (ACX_ACTOR_BATCH) are queued, before this hook sends anything else, or when the hook
 * returns. A hook must therefore not block waiting for the effect of such a tell. */
acx_status_t acx_tell(acx_ref_t to, acx_ref_t sender, uint32_t type, const void *payload, size_t len);
/* Sends a request whose reply completes *future. Release the future when done with it. */
acx_status_t acx_ask(acx_ref_t to, uint32_t type, const void *payload, size_t len, acx_future_t **future);

/* Stops the actor after the message it is handling: its children stop first, post_stop runs,
 * queued messages become dead letters, watchers receive ACX_MSG_DOWN. Idempotent. */
acx_status_t acx_stop(acx_ref_t ref);
/* watcher receives ACX_MSG_DOWN when target stops (at once if it already has). */
acx_status_t acx_watch(acx_ref_t watcher, acx_ref_t target);
acx_status_t acx_unwatch(acx_ref_t watcher, acx_ref_t target);

/* Inside hooks. */
acx_ref_t acx_self(acx_ctx_t *ctx);            /* borrowed */
acx_system_t *acx_ctx_system(acx_ctx_t *ctx);
/* Answers msg: completes the asker's future, or tells the sender a message of msg's own type
 * with the payload and msg.status = status when msg came from acx_tell with a sender (the
 * replier is the sender of that answer). ACX_ERR_INVALID_STATE when there is nobody to answer,
 * ACX_ERR_INVALID_ARG when msg is not the message being handled, ACX_ERR_ACTOR_STOPPED when the
 * sender has stopped. A second reply to an ask returns ACX_ERR_INVALID_STATE. */
acx_status_t acx_reply(acx_ctx_t *ctx, const acx_msg_t *msg, acx_status_t status, const void *payload,
                       size_t len);
/* For answering an ask later, outside the hook: *future is the asker's future, held for the
 * caller (complete it with acx_future_complete, then release it). ACX_ERR_INVALID_STATE when msg
 * is not an ask. Addition to the first API draft. */
acx_status_t acx_msg_future(acx_ctx_t *ctx, const acx_msg_t *msg, acx_future_t **future);
/* Marks the current actor failed with status (as if receive had returned it). */
acx_status_t acx_actor_fail(acx_ctx_t *ctx, acx_status_t status);
/* Stops the current actor after this hook returns. */
acx_status_t acx_stop_self(acx_ctx_t *ctx);
/* Spawn a child of the current actor. */
acx_status_t acx_spawn_child(acx_ctx_t *ctx, const acx_props_t *props, const char *name, acx_ref_t *ref);
/* How many times the current actor has been restarted. */
uint32_t acx_ctx_restarts(acx_ctx_t *ctx);

/* Futures: completed once, with a status and an optional payload. */
acx_status_t acx_future_create(acx_future_t **future);
/* Completes the future (first completion wins; later ones return ACX_ERR_INVALID_STATE). Any
 * thread; cheap: no syscall unless a waiter has parked. The future must stay referenced while the
 * call starts (a woken waiter may release its reference while this returns; that is safe).
 * Continuations registered with acx_future_then are sent from the completing thread.
 * ACX_ERR_INVALID_ARG for a NULL payload with len > 0. */
acx_status_t acx_future_complete(acx_future_t *future, acx_status_t status, const void *payload,
                                 size_t len);
/* Waits up to timeout_ns (spinning for ACX_SPIN_NS first, then parking). Returns ACX_ERR_TIMEOUT
 * on expiry (the future stays valid), else the status the future was completed with. When out
 * is non-NULL, copies up to cap bytes of the payload and sets *len (may be NULL) to its size. */
acx_status_t acx_future_wait(acx_future_t *future, int64_t timeout_ns, void *out, size_t cap, size_t *len);
/* Non-blocking: ACX_ERR_TIMEOUT when not yet complete, else as acx_future_wait. */
acx_status_t acx_future_result(acx_future_t *future, void *out, size_t cap, size_t *len);
/* When the future completes, tells `to` an ACX_MSG_FUTURE_DONE with cookie. */
acx_status_t acx_future_then(acx_future_t *future, acx_ref_t to, uint64_t cookie);
acx_status_t acx_future_hold(acx_future_t *future);
void acx_future_release(acx_future_t *future);

/* Timers: tell `to` a message after delay_ns, once or every period_ns. */
acx_status_t acx_timer_once(acx_system_t *sys, acx_ref_t to, int64_t delay_ns, uint32_t type,
                            const void *payload, size_t len, acx_timer_id_t *id);
acx_status_t acx_timer_periodic(acx_system_t *sys, acx_ref_t to, int64_t period_ns, uint32_t type,
                                const void *payload, size_t len, acx_timer_id_t *id);
/* ACX_ERR_NOT_FOUND if it already fired (once) or was cancelled. */
acx_status_t acx_timer_cancel(acx_system_t *sys, acx_timer_id_t id);

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif
