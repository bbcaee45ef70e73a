/* Message envelopes and the actor mailbox: an intrusive lock-free MPSC queue in the style of
 * Pony's messageq (Vyukov's algorithm with the low bit of head marking "empty, not scheduled"),
 * and a per-thread envelope pool so the hot path does not call malloc. */
#ifndef ACXI_MAILBOX_H
#define ACXI_MAILBOX_H
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "acx/actor.h"

typedef enum acxi_env_kind {
  ACXI_ENV_USER = 0,      /* goes to receive (includes ACX_MSG_DOWN/FUTURE_DONE/ESCALATED) */
  ACXI_ENV_INIT,          /* run init for the first time */
  ACXI_ENV_STOP,          /* wake-up for a stop request (the flag carries the request) */
  ACXI_ENV_FAILED,        /* to a parent: child `aux` failed with `status` */
  ACXI_ENV_RESTART,       /* to a child: restart now (cause in `status`) */
  ACXI_ENV_RESUME,        /* to a child: resume */
  ACXI_ENV_CHILD_STOPPED, /* to a parent: child `aux` finished stopping */
} acxi_env_kind_t;

typedef struct acxi_env {
  _Atomic(struct acxi_env *) next; /* mailbox link */
  struct acxi_env *link;           /* consumer-private lists (stash, pool batches) */
  acx_msg_t msg;                   /* the receive hook's view; msg.data points into data[] */
  uint16_t kind;
  uint16_t pooled; /* 1: fixed-size pool envelope, else malloc'd to fit */
  uint32_t flags;
  acx_future_t *future;  /* held: the ask's reply target, or the ACX_MSG_FUTURE_DONE subject */
  struct acx_actor *aux; /* held: the actor a system/DOWN/ESCALATED message is about */
  alignas(16) unsigned char data[];
} acxi_env_t;

#define ACXI_ENV_SIZE 128 /* 48 payload bytes inline: two cache lines per message */
#define ACXI_ENV_INLINE (ACXI_ENV_SIZE - offsetof(acxi_env_t, data))

/* An envelope able to carry len payload bytes; fields zeroed except data. NULL on no memory. */
acxi_env_t *acxi_env_alloc(size_t len);
void acxi_env_free(acxi_env_t *e);

typedef struct acxi_mbox {
  alignas(64) _Atomic(acxi_env_t *) head; /* producers swap themselves in here */
  alignas(64) acxi_env_t *tail;           /* consumer only: the last envelope popped (the stub) */
} acxi_mbox_t;

/* Starts empty and marked unscheduled. ACX_ERR_NO_MEMORY without a stub. */
acx_status_t acxi_mbox_init(acxi_mbox_t *q);
/* Frees the stub; the queue must have been drained by the consumer. */
void acxi_mbox_fini(acxi_mbox_t *q);
/* Any thread. Returns true when the queue was marked empty: the caller must schedule the actor. */
bool acxi_mbox_push(acxi_mbox_t *q, acxi_env_t *e);
/* Any thread: pushes first..last, already linked through `next` by the caller (private until
 * now), with one exchange; they are popped in that order. Returns as acxi_mbox_push. */
bool acxi_mbox_push_chain(acxi_mbox_t *q, acxi_env_t *first, acxi_env_t *last);
/* Consumer only. The returned envelope stays owned by the queue (it is the new stub) until the
 * next pop frees it; the caller may read it and release what it holds, but not free it. */
acxi_env_t *acxi_mbox_pop(acxi_mbox_t *q);
/* Consumer only: marks the queue empty (the actor becomes unscheduled) when nothing is queued.
 * false: a message is in the queue or being linked in; keep the actor scheduled. */
bool acxi_mbox_markempty(acxi_mbox_t *q);
#endif
