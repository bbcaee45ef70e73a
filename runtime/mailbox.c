/* The actor mailbox (lock-free MPSC, Pony messageq style) and the envelope pool. Producers pay
 * one atomic exchange and one release store per message; the consumer pays an acquire load. The
 * pool keeps per-thread free lists and trades batches through one mutex-protected list, because
 * envelopes are mostly freed on a different thread (the receiver's worker) than they were
 * allocated on (the sender's). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "mailbox.h"

#if defined(__SANITIZE_ADDRESS__)
#define POOL_ENABLED 0 /* plain malloc/free under ASan: exact use-after-free and leak reports */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define POOL_ENABLED 0
#else
#define POOL_ENABLED 1
#endif
#else
#define POOL_ENABLED 1
#endif

#define POOL_BATCH 256
#define POOL_LOCAL_MAX (2 * POOL_BATCH)

#if POOL_ENABLED
/* Global stock: a stack of batches; env->link chains a batch, batch heads chain via `next`. */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static acxi_env_t *pool_batches;
static pthread_key_t pool_key;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static __thread acxi_env_t *tl_free;
static __thread int tl_count;
static __thread int tl_registered;

static void pool_give_batch(acxi_env_t *first) {
  pthread_mutex_lock(&pool_lock);
  /* relaxed: the envelope is private while in the pool; the mutex orders the handoff */
  atomic_store_explicit(&first->next, pool_batches, memory_order_relaxed);
  pool_batches = first;
  pthread_mutex_unlock(&pool_lock);
}

static void pool_thread_exit(void *unused) {
  (void)unused;
  if (tl_free) pool_give_batch(tl_free);
  tl_free = NULL;
  tl_count = 0;
}

static void pool_init(void) { pthread_key_create(&pool_key, pool_thread_exit); }
#endif

acxi_env_t *acxi_env_alloc(size_t len) {
  acxi_env_t *e = NULL;
  int pooled = len <= ACXI_ENV_INLINE;
#if POOL_ENABLED
  if (pooled) {
    if (!tl_free) {
      pthread_mutex_lock(&pool_lock);
      if (pool_batches) {
        tl_free = pool_batches;
        pool_batches = atomic_load_explicit(&pool_batches->next, memory_order_relaxed);
        tl_count = POOL_BATCH; /* an estimate: a thread-exit batch may be shorter */
      }
      pthread_mutex_unlock(&pool_lock);
    }
    if (tl_free) {
      e = tl_free;
      tl_free = e->link;
      if (tl_count > 0) tl_count--;
    }
  }
#endif
  if (!e) e = malloc(pooled ? ACXI_ENV_SIZE : offsetof(acxi_env_t, data) + len);
  if (!e) return NULL;
  memset(e, 0, offsetof(acxi_env_t, data));
  e->pooled = (uint16_t)pooled;
  e->msg.data = e->data;
  return e;
}

void acxi_env_free(acxi_env_t *e) {
  if (!e) return;
#if POOL_ENABLED
  if (e->pooled) {
    if (!tl_registered) {
      pthread_once(&pool_once, pool_init);
      pthread_setspecific(pool_key, (void *)1); /* makes pool_thread_exit run at thread exit */
      tl_registered = 1;
    }
    e->link = tl_free;
    tl_free = e;
    if (++tl_count >= POOL_LOCAL_MAX) {
      acxi_env_t *cut = tl_free; /* keep POOL_BATCH here, give the rest back */
      int kept = 1;
      for (; kept < POOL_BATCH && cut->link; kept++) cut = cut->link;
      acxi_env_t *rest = cut->link;
      cut->link = NULL;
      if (rest) pool_give_batch(rest);
      tl_count = kept;
    }
    return;
  }
#endif
  free(e);
}

acx_status_t acxi_mbox_init(acxi_mbox_t *q) {
  acxi_env_t *stub = acxi_env_alloc(0);
  if (!stub) return ACX_ERR_NO_MEMORY;
  /* relaxed: the queue is not shared yet; publishing the actor orders these stores */
  atomic_store_explicit(&stub->next, NULL, memory_order_relaxed);
  q->tail = stub;
  atomic_store_explicit(&q->head, (acxi_env_t *)((uintptr_t)stub | 1), memory_order_relaxed);
  return ACX_OK;
}

void acxi_mbox_fini(acxi_mbox_t *q) {
  acxi_env_free(q->tail);
  q->tail = NULL;
}

bool acxi_mbox_push(acxi_mbox_t *q, acxi_env_t *e) {
  /* relaxed: published by the release store into prev->next below */
  atomic_store_explicit(&e->next, NULL, memory_order_relaxed);
  /* acq_rel: acquire pairs with the consumer's release CAS in markempty, so a producer that sees
   * the empty mark also sees the consumer's turn finished; release orders e->next = NULL before
   * any later producer links behind e */
  acxi_env_t *prev = atomic_exchange_explicit(&q->head, e, memory_order_acq_rel);
  bool was_empty = ((uintptr_t)prev & 1) != 0;
  prev = (acxi_env_t *)((uintptr_t)prev & ~(uintptr_t)1);
  /* release: the consumer's acquire load of next sees e's contents */
  atomic_store_explicit(&prev->next, e, memory_order_release);
  return was_empty;
}

acxi_env_t *acxi_mbox_pop(acxi_mbox_t *q) {
  acxi_env_t *tail = q->tail;
  /* acquire: pairs with the producer's release store, making the message body visible */
  acxi_env_t *next = atomic_load_explicit(&tail->next, memory_order_acquire);
  if (!next) return NULL;
  q->tail = next;
  acxi_env_free(tail);
  return next;
}

bool acxi_mbox_markempty(acxi_mbox_t *q) {
  acxi_env_t *tail = q->tail;
  /* relaxed: only a hint; the CAS below decides */
  acxi_env_t *head = atomic_load_explicit(&q->head, memory_order_relaxed);
  if (((uintptr_t)head & 1) != 0) return true;
  if (head != tail) return false;
  /* release: the next producer to see the mark (acquire in push) sees everything this turn did */
  return atomic_compare_exchange_strong_explicit(&q->head, &tail, (acxi_env_t *)((uintptr_t)tail | 1),
                                                 memory_order_release, memory_order_relaxed);
}
