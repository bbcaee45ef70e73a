/* Internals of the actor system shared by actor.c, timer.c and the device layer: the actor and
 * system structs and the internal send. Everything here runs under the rules of actor.c: fields
 * marked "turn" are touched only by the worker running that actor's turn. */
#ifndef ACXI_ACTOR_INTERNAL_H
#define ACXI_ACTOR_INTERNAL_H
#include <pthread.h>
#include <stdatomic.h>

#include "acx/actor.h"
#include "runtime/actor/future.h"
#include "runtime/actor/mailbox.h"
#include "runtime/actor/sched.h"
#include "runtime/actor/timer.h"

enum { ACXI_LIFE_RUNNING = 0, ACXI_LIFE_STOPPING = 1, ACXI_LIFE_STOPPED = 2 };

struct acx_ctx {
  struct acx_actor *self;
  acxi_env_t *cur;  /* the message being handled, NULL in init/post_stop/pre_restart */
  int in_hook;
  int stop_self;
  acx_status_t fail; /* set by acx_actor_fail */
};

typedef struct acxi_watch {
  struct acxi_watch *next;
  struct acx_actor *watcher; /* held */
} acxi_watch_t;

struct acx_actor {
  acxi_runnable_t rq; /* run-queue link (first: the scheduler sees only this) */
  acxi_mbox_t mbox;
  alignas(64) _Atomic int refs;
  _Atomic int life;     /* ACXI_LIFE_*: tells read it to refuse a stopped target */
  _Atomic int stop_req; /* 0, or the stop reason + 1 */
  acx_system_t *sys;    /* held */
  acx_props_t props;
  void *state;
  int guardian; /* 1 for "/" and "/user": not stoppable by users, not counted live */
  /* turn */
  struct acx_ctx ctx;
  int initialized;
  int suspended; /* failed: waits for the parent's directive, stashing user messages */
  acxi_env_t *stash_head, *stash_tail;
  int children_waiting; /* stopping: children that have not reported CHILD_STOPPED yet */
  acx_status_t reason;  /* stop reason, final once life is STOPPED */
  uint32_t restarts;
  uint64_t dead_letters;
  /* turn of the parent: restart bookkeeping of this actor as a child */
  int64_t win_start;
  int win_count;
  /* tree: under sys->tree_lock */
  struct acx_actor *parent; /* held */
  struct acx_actor *first_child, *next_sibling; /* the parent's list holds a reference */
  acxi_watch_t *watchers;
  int watch_closed;
  char *name; /* last path element */
  char *path;
};

struct acx_system {
  _Atomic int refs; /* the creator's plus one per actor struct */
  acxi_sched_t sched;
  acxi_timers_t timers;
  pthread_mutex_t tree_lock;
  struct acx_actor *root, *user; /* held by the system */
  acx_future_t *root_done;       /* completed when "/" finished stopping */
  int batch;
  _Atomic uint64_t dead_letters;
  _Atomic uint64_t restarts;
  _Atomic int64_t actors_live;
  _Atomic uint64_t anon_ids;
  _Atomic int destroying;
  char name[32];
};

/* Sends a message of `kind` (ACXI_ENV_*) from no sender. ACX_ERR_ACTOR_STOPPED for a stopped
 * target (a user message then counts as a dead letter). Any thread. */
acx_status_t acxi_send(acx_ref_t to, int kind, uint32_t type, acx_status_t status, const void *payload, size_t len);
#endif
