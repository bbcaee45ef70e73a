/* The actor mailbox (lock-free MPSC, Pony messageq style) and the envelope pool. Producers pay
 * one atomic exchange and one release store per message; the consumer pays an acquire load. The
 * pool keeps per-thread free lists and trades batches of POOL_BATCH through one mutex-protected
 * stack, because envelopes are mostly freed on a different thread (the receiver's worker) than
 * they were allocated on (the sender's): each side takes the mutex once per batch, never per
 * message. When the stock runs dry the pool carves envelopes from 2 MiB slabs (cache-line aligned,
 * transparent huge pages where the kernel offers them): a burst of messages that outruns its
 * receiver then costs a page fault per 16384 envelopes instead of a malloc and a fault per 32.
 * Pooled envelopes are kept for reuse until the process exits (the pool holds the high-water mark
 * of messages in flight). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "runtime/base/log.h"
#include "runtime/actor/mailbox.h"

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
#define SLAB_BYTES ((size_t)2 << 20)

/* initial-exec: libacx is a shared library, and the default model costs a __tls_get_addr call
 * per access on the per-message path */
#define TLS __thread __attribute__((tls_model("initial-exec")))

#if POOL_ENABLED
/* Global stock: a stack of batches (env->link chains a batch, batch heads chain via `next`), and
 * the untouched rest of the newest slab. All under pool_lock. */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static acxi_env_t *pool_batches;
static unsigned char *slab_next, *slab_end;
static pthread_key_t pool_key;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static TLS acxi_env_t *tl_free;
static TLS int tl_count;
static TLS int tl_registered;
static TLS acxi_env_t *tl_ret; /* a batch being filled for the global stock */
static TLS int tl_ret_n;

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
  if (tl_ret) pool_give_batch(tl_ret);
  tl_free = tl_ret = NULL;
  tl_count = tl_ret_n = 0;
}

static void pool_init(void) { pthread_key_create(&pool_key, pool_thread_exit); }

/* Under pool_lock: up to POOL_BATCH fresh envelopes from the slab, as a span [*lo, *hi). */
static int slab_take(unsigned char **lo, unsigned char **hi) {
  if (slab_next == slab_end) {
    void *p = mmap(NULL, SLAB_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) return 0;
    slab_next = p;
    slab_end = slab_next + SLAB_BYTES;
  }
  size_t n = (size_t)(slab_end - slab_next) / ACXI_ENV_SIZE;
  if (n > POOL_BATCH) n = POOL_BATCH;
  *lo = slab_next;
  slab_next += n * ACXI_ENV_SIZE;
  *hi = slab_next;
  return 1;
}

/* The calling thread's free list is empty: take a returned batch, else carve from the slab
 * (outside the lock: the span is ours once slab_next moved past it). */
static void pool_refill(void) {
  if (tl_ret) { /* our own unfinished return batch: no lock needed */
    tl_free = tl_ret;
    tl_count = tl_ret_n;
    tl_ret = NULL;
    tl_ret_n = 0;
    return;
  }
  unsigned char *lo = NULL, *hi = NULL;
  pthread_mutex_lock(&pool_lock);
  if (pool_batches) {
    tl_free = pool_batches;
    pool_batches = atomic_load_explicit(&pool_batches->next, memory_order_relaxed);
    tl_count = POOL_BATCH; /* an estimate: a thread-exit batch may be shorter; only a hint */
  } else if (!slab_take(&lo, &hi)) {
    ACX_WARN(ACTOR, "envelope pool: no memory for a %zu-byte slab", SLAB_BYTES);
  }
  pthread_mutex_unlock(&pool_lock);
  if (lo == hi) return;
  acxi_env_t *first = NULL;
  int n = 0;
  for (unsigned char *p = hi; p > lo; n++) { /* linked in address order: the pages fill in turn */
    p -= ACXI_ENV_SIZE;
    acxi_env_t *e = (acxi_env_t *)p;
    e->link = first;
    first = e;
  }
  tl_free = first;
  tl_count = n;
}
#endif

acxi_env_t *acxi_env_alloc(size_t len) {
  acxi_env_t *e = NULL;
  int pooled = len <= ACXI_ENV_INLINE;
#if POOL_ENABLED
  if (pooled) {
    if (!tl_free) pool_refill();
    if (tl_free) {
      e = tl_free;
      tl_free = e->link;
      if (tl_count > 0) tl_count--;
    }
  }
  if (!e && pooled) return NULL; /* no memory even for a slab: malloc would not do better */
  if (!e) e = malloc(offsetof(acxi_env_t, data) + len);
#else
  e = malloc(pooled ? ACXI_ENV_SIZE : offsetof(acxi_env_t, data) + len);
#endif
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
    if (tl_count < POOL_BATCH) { /* enough for this thread's own sends first */
      e->link = tl_free;
      tl_free = e;
      tl_count++;
      return;
    }
    e->link = tl_ret; /* then a batch for the threads that send more than they receive */
    tl_ret = e;
    if (++tl_ret_n == POOL_BATCH) {
      pool_give_batch(tl_ret);
      tl_ret = NULL;
      tl_ret_n = 0;
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

bool acxi_mbox_push_chain(acxi_mbox_t *q, acxi_env_t *first, acxi_env_t *last) {
  /* relaxed: published by the release store into prev->next below (the links inside the chain
   * were stored before it too, so a consumer that acquires prev->next sees the whole chain) */
  atomic_store_explicit(&last->next, NULL, memory_order_relaxed);
  /* acq_rel: acquire pairs with the consumer's release CAS in markempty, so a producer that sees
   * the empty mark also sees the consumer's turn finished; release orders last->next = NULL before
   * any later producer links behind last */
  acxi_env_t *prev = atomic_exchange_explicit(&q->head, last, memory_order_acq_rel);
  bool was_empty = ((uintptr_t)prev & 1) != 0;
  prev = (acxi_env_t *)((uintptr_t)prev & ~(uintptr_t)1);
  /* release: the consumer's acquire load of next sees the chain's contents */
  atomic_store_explicit(&prev->next, first, memory_order_release);
  return was_empty;
}

bool acxi_mbox_push(acxi_mbox_t *q, acxi_env_t *e) { return acxi_mbox_push_chain(q, e, e); }

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
