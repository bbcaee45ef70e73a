/* Vyukov's bounded MPMC queue over a shared mapping, plus futex doorbells. Each cell carries a
 * sequence number that says whose turn it is (producer at pos: seq == pos; consumer at pos:
 * seq == pos + 1), so producers and consumers never touch the same counter after claiming. */
#include "runtime/ring.h"

#include <limits.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "runtime/clock.h"
#include "runtime/log.h"

typedef struct cell {
  _Atomic uint64_t seq;
} cell_t;

static inline cell_t *cell_at(acxi_ring_t *r, uint64_t pos) {
  return (cell_t *)(r->cells + (size_t)(pos & (r->slots - 1)) * r->stride);
}

static inline void *cell_data(cell_t *c) { return (unsigned char *)c + sizeof(cell_t); }

size_t acxi_ring_bytes(uint32_t slots, uint32_t rec_size) {
  if (slots < 2 || (slots & (slots - 1)) != 0 || rec_size == 0 || rec_size > (1u << 20)) return 0;
  size_t stride = (sizeof(cell_t) + rec_size + 63) & ~(size_t)63;
  return sizeof(acxi_ring_t) + (size_t)slots * stride;
}

acx_status_t acxi_ring_init(acxi_ring_t *r, uint32_t slots, uint32_t rec_size) {
  ACX_CHECK_NULL(r);
  ACX_CHECK_ARG(acxi_ring_bytes(slots, rec_size) != 0,
                "acxi_ring_init: slots=%u must be a power of two >= 2 and rec_size=%u in (0, 1 MiB]", slots,
                rec_size);
  ACX_CHECK_ARG(((uintptr_t)r & 63) == 0, "acxi_ring_init: ring memory %p is not 64-byte aligned", (void *)r);
  r->magic = ACXI_RING_MAGIC;
  r->slots = slots;
  r->rec_size = rec_size;
  r->stride = (uint32_t)((sizeof(cell_t) + rec_size + 63) & ~(size_t)63);
  /* Plain initialisation: the ring is not shared yet (the mapping is published afterwards by
   * posix_spawn or pthread_create, both of which order memory). */
  atomic_init(&r->head, 0);
  atomic_init(&r->tail, 0);
  atomic_init(&r->bell, 0);
  atomic_init(&r->consumer_sleeping, 0);
  atomic_init(&r->space, 0);
  atomic_init(&r->space_waiters, 0);
  for (uint32_t i = 0; i < slots; i++) atomic_init(&cell_at(r, i)->seq, i);
  return ACX_OK;
}

acx_status_t acxi_ring_check(const acxi_ring_t *r, uint32_t rec_size, size_t bytes) {
  ACX_CHECK_NULL(r);
  if (bytes < sizeof(acxi_ring_t) || r->magic != ACXI_RING_MAGIC || r->rec_size != rec_size ||
      acxi_ring_bytes(r->slots, r->rec_size) == 0 || acxi_ring_bytes(r->slots, r->rec_size) > bytes) {
    ACX_WARN(EXEC, "ring at %p is not a valid ring of %u-byte records within %zu bytes", (const void *)r,
             rec_size, bytes);
    return ACX_ERR_INVALID_ARG;
  }
  return ACX_OK;
}

void acxi_futex_wait(_Atomic uint32_t *word, uint32_t seen, int64_t deadline_ns) {
  if (deadline_ns <= acxi_now_ns()) return;
  struct timespec ts = acxi_ts_from_ns(deadline_ns);
  /* FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC deadline; no PRIVATE flag because the
   * word may live in a mapping shared with another process. EINTR/EAGAIN/ETIMEDOUT all mean
   * "recheck", which every caller does. */
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_BITSET, seen, &ts, NULL, FUTEX_BITSET_MATCH_ANY);
}

void acxi_futex_wake(_Atomic uint32_t *word, int all) {
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, all ? INT_MAX : 1, NULL, NULL, 0);
}

static inline void notify_consumer(acxi_ring_t *r) {
  /* seq_cst fence: our cell publication must be visible before we read the sleep flag, pairing
   * with the fence in acxi_ring_consumer_wait (Dekker): either it sees our record or we see it
   * sleeping. */
  atomic_thread_fence(memory_order_seq_cst);
  /* relaxed: the fence above already ordered this load. */
  if (atomic_load_explicit(&r->consumer_sleeping, memory_order_relaxed)) {
    /* release: pairs with the acquire load of `bell` by the consumer before it sleeps. */
    atomic_fetch_add_explicit(&r->bell, 1, memory_order_release);
    acxi_futex_wake(&r->bell, 1);
  }
}

static inline void notify_space(acxi_ring_t *r) {
  /* seq_cst fence: the freed cell must be visible before we read space_waiters (Dekker with
   * acxi_ring_wait_space). */
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(&r->space_waiters, memory_order_relaxed)) {
    atomic_fetch_add_explicit(&r->space, 1, memory_order_release);
    acxi_futex_wake(&r->space, 1);
  }
}

int acxi_ring_try_push(acxi_ring_t *r, const void *rec) {
  /* relaxed: a stale head only costs one failed CAS; the cell's seq carries the ordering. */
  uint64_t pos = atomic_load_explicit(&r->head, memory_order_relaxed);
  cell_t *c;
  for (;;) {
    c = cell_at(r, pos);
    /* acquire: pairs with the consumer's release store of seq, so its read of the previous
     * record in this cell happened before we overwrite it. */
    uint64_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
    int64_t diff = (int64_t)(seq - pos);
    if (diff == 0) {
      /* relaxed: the CAS only claims the position; publication is the seq store below. */
      if (atomic_compare_exchange_weak_explicit(&r->head, &pos, pos + 1, memory_order_relaxed,
                                                memory_order_relaxed))
        break;
    } else if (diff < 0) {
      return 0; /* the consumer has not freed this cell yet: full */
    } else {
      pos = atomic_load_explicit(&r->head, memory_order_relaxed); /* another producer won it */
    }
  }
  memcpy(cell_data(c), rec, r->rec_size);
  /* release: publishes the record bytes to the consumer's acquire load of seq. */
  atomic_store_explicit(&c->seq, pos + 1, memory_order_release);
  notify_consumer(r);
  return 1;
}

static int ring_full(acxi_ring_t *r) {
  uint64_t pos = atomic_load_explicit(&r->head, memory_order_relaxed);
  uint64_t seq = atomic_load_explicit(&cell_at(r, pos)->seq, memory_order_acquire);
  return (int64_t)(seq - pos) < 0;
}

void acxi_ring_wait_space(acxi_ring_t *r, int64_t deadline_ns) {
  /* relaxed RMW: ordered against the ring check below by the seq_cst fence. */
  atomic_fetch_add_explicit(&r->space_waiters, 1, memory_order_relaxed);
  /* acquire: pairs with the consumer's release bump of `space`. */
  uint32_t seen = atomic_load_explicit(&r->space, memory_order_acquire);
  /* seq_cst fence: our waiter count is visible before we look at the ring (Dekker with
   * notify_space): either the consumer sees us waiting or we see the freed cell. */
  atomic_thread_fence(memory_order_seq_cst);
  if (ring_full(r)) {
    int64_t slice = acxi_now_ns() + 1000000;
    acxi_futex_wait(&r->space, seen, slice < deadline_ns ? slice : deadline_ns);
  }
  atomic_fetch_sub_explicit(&r->space_waiters, 1, memory_order_relaxed);
}

acx_status_t acxi_ring_push(acxi_ring_t *r, const void *rec, int64_t deadline_ns) {
  for (int spin = 0;; spin++) {
    if (acxi_ring_try_push(r, rec)) return ACX_OK;
    if (acxi_now_ns() >= deadline_ns) return ACX_ERR_QUEUE_FULL;
    if (spin < 256)
      acxi_cpu_relax();
    else
      acxi_ring_wait_space(r, deadline_ns);
  }
}

int acxi_ring_try_pop(acxi_ring_t *r, void *rec) {
  uint64_t pos = atomic_load_explicit(&r->tail, memory_order_relaxed); /* as in try_push */
  cell_t *c;
  for (;;) {
    c = cell_at(r, pos);
    /* acquire: pairs with the producer's release store; the record bytes are visible. */
    uint64_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
    int64_t diff = (int64_t)(seq - (pos + 1));
    if (diff == 0) {
      if (atomic_compare_exchange_weak_explicit(&r->tail, &pos, pos + 1, memory_order_relaxed,
                                                memory_order_relaxed))
        break;
    } else if (diff < 0) {
      return 0; /* not published yet: empty */
    } else {
      pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
    }
  }
  memcpy(rec, cell_data(c), r->rec_size);
  /* release: our read of the record happens before a producer reuses the cell. */
  atomic_store_explicit(&c->seq, pos + r->slots, memory_order_release);
  notify_space(r);
  return 1;
}

int acxi_ring_empty(acxi_ring_t *r) {
  uint64_t pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
  uint64_t seq = atomic_load_explicit(&cell_at(r, pos)->seq, memory_order_acquire);
  return (int64_t)(seq - (pos + 1)) < 0;
}

void acxi_ring_consumer_wait(acxi_ring_t *r, int64_t deadline_ns) {
  /* acquire: pairs with the producer's release bump; read before the emptiness check so a bump
   * after the check makes the futex wait return at once. */
  uint32_t seen = atomic_load_explicit(&r->bell, memory_order_acquire);
  atomic_fetch_add_explicit(&r->consumer_sleeping, 1, memory_order_relaxed);
  /* seq_cst fence: the sleep flag is visible before we look at the ring (Dekker with
   * notify_consumer). */
  atomic_thread_fence(memory_order_seq_cst);
  if (acxi_ring_empty(r)) acxi_futex_wait(&r->bell, seen, deadline_ns);
  atomic_fetch_sub_explicit(&r->consumer_sleeping, 1, memory_order_relaxed);
}

void acxi_ring_wake(acxi_ring_t *r) {
  atomic_fetch_add_explicit(&r->bell, 1, memory_order_release); /* as in notify_consumer */
  acxi_futex_wake(&r->bell, 1);
}
