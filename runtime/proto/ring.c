/* Vyukov's bounded MPMC queue over a shared mapping, plus futex doorbells. Each cell carries a
 * sequence number that says whose turn it is (producer at pos: seq == pos; consumer at pos:
 * seq == pos + 1), so producers and consumers never touch the same counter after claiming. */
#include "runtime/proto/ring.h"

#include <limits.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "runtime/base/clock.h"
#include "runtime/base/log.h"

typedef struct cell {
  _Atomic uint64_t seq;
} cell_t;

/* A producer or consumer that keeps losing its claim (other threads win every CAS, or the other
 * process keeps moving the counters) gives up after this many tries and reports WAIT: the caller
 * rechecks its deadline and its state. Legitimate contention never gets near it. */
#define RING_MAX_TRIES 1024

static inline cell_t *cell_at(const acxi_ring_view_t *v, uint64_t pos) {
  return (cell_t *)(v->cells + (size_t)(pos & v->mask) * v->stride);
}

static inline void *cell_data(cell_t *c) { return (unsigned char *)c + sizeof(cell_t); }

static size_t stride_of(uint32_t rec_size) { return (sizeof(cell_t) + rec_size + 63) & ~(size_t)63; }

size_t acxi_ring_bytes(uint32_t slots, uint32_t rec_size) {
  if (slots < ACXI_RING_SLOTS_MIN || slots > ACXI_RING_SLOTS_MAX || (slots & (slots - 1)) != 0 || rec_size == 0 ||
      rec_size > (1u << 20))
    return 0;
  return sizeof(acxi_ring_t) + (size_t)slots * stride_of(rec_size);
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
  r->stride = (uint32_t)stride_of(rec_size);
  /* Plain initialisation: the ring is not shared yet (the mapping is published afterwards by
   * posix_spawn or pthread_create, both of which order memory). */
  atomic_init(&r->head, 0);
  atomic_init(&r->tail, 0);
  atomic_init(&r->bell, 0);
  atomic_init(&r->consumer_sleeping, 0);
  atomic_init(&r->space, 0);
  atomic_init(&r->space_waiters, 0);
  acxi_ring_view_t v;
  ACXCHECK(acxi_ring_view_init(&v, r, slots, rec_size));
  for (uint32_t i = 0; i < slots; i++) atomic_init(&cell_at(&v, i)->seq, i);
  return ACX_OK;
}

acx_status_t acxi_ring_view_init(acxi_ring_view_t *v, acxi_ring_t *r, uint32_t slots, uint32_t rec_size) {
  ACX_CHECK_NULL(v);
  ACX_CHECK_NULL(r);
  ACX_CHECK_ARG(acxi_ring_bytes(slots, rec_size) != 0,
                "acxi_ring_view_init: slots=%u must be a power of two >= 2 and rec_size=%u in (0, 1 MiB]", slots,
                rec_size);
  v->r = r;
  v->cells = r->cells;
  v->slots = slots;
  v->mask = slots - 1;
  v->rec_size = rec_size;
  v->stride = stride_of(rec_size);
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

/* A sequence number no correct ring can hold at this position (see try_push / try_pop): logged,
 * and the caller stops using the ring. Cold. */
static int __attribute__((noinline, cold)) ring_broken(const acxi_ring_view_t *v, const char *side, uint64_t pos,
                                                       uint64_t seq) {
  ACX_WARN(EXEC, "shared ring %p: cell %llu holds sequence %llu, impossible for the %s at position %llu (ring of "
           "%u slots): the other process wrote into the ring", (void *)v->r, (unsigned long long)(pos & v->mask),
           (unsigned long long)seq, side, (unsigned long long)pos, v->slots);
  return ACXI_RING_BROKEN;
}

/* In a correct ring the cell at a producer's position pos (a value `head` had) holds pos - slots
 * (the previous lap's producer claimed it and has not published yet), pos - slots + 1 (published,
 * not consumed: full), pos (free), or more than pos, and then only once `head` has moved past
 * pos: the producer that published it claimed pos first, and our acquire load of its seq orders
 * that claim before our next load of head. Anything else is garbage from the other process. */
int acxi_ring_try_push(const acxi_ring_view_t *v, const void *rec) {
  acxi_ring_t *r = v->r;
  /* relaxed: a stale head only costs one failed CAS; the cell's seq carries the ordering. */
  uint64_t pos = atomic_load_explicit(&r->head, memory_order_relaxed);
  cell_t *c;
  for (int tries = 0;; tries++) {
    if (tries == RING_MAX_TRIES) return ACXI_RING_WAIT;
    c = cell_at(v, pos);
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
      if (diff != -(int64_t)v->slots && diff != 1 - (int64_t)v->slots) return ring_broken(v, "producer", pos, seq);
      return ACXI_RING_WAIT; /* the consumer has not freed this cell yet: full */
    } else {
      uint64_t now = atomic_load_explicit(&r->head, memory_order_relaxed); /* another producer won it */
      if (now == pos) return ring_broken(v, "producer", pos, seq);
      pos = now;
    }
  }
  memcpy(cell_data(c), rec, v->rec_size);
  /* release: publishes the record bytes to the consumer's acquire load of seq. */
  atomic_store_explicit(&c->seq, pos + 1, memory_order_release);
  notify_consumer(r);
  return ACXI_RING_DONE;
}

static int ring_full(const acxi_ring_view_t *v) {
  uint64_t pos = atomic_load_explicit(&v->r->head, memory_order_relaxed);
  uint64_t seq = atomic_load_explicit(&cell_at(v, pos)->seq, memory_order_acquire);
  return (int64_t)(seq - pos) < 0;
}

void acxi_ring_wait_space(const acxi_ring_view_t *v, int64_t deadline_ns) {
  acxi_ring_t *r = v->r;
  /* relaxed RMW: ordered against the ring check below by the seq_cst fence. */
  atomic_fetch_add_explicit(&r->space_waiters, 1, memory_order_relaxed);
  /* acquire: pairs with the consumer's release bump of `space`. */
  uint32_t seen = atomic_load_explicit(&r->space, memory_order_acquire);
  /* seq_cst fence: our waiter count is visible before we look at the ring (Dekker with
   * notify_space): either the consumer sees us waiting or we see the freed cell. */
  atomic_thread_fence(memory_order_seq_cst);
  if (ring_full(v)) {
    int64_t slice = acxi_now_ns() + 1000000;
    acxi_futex_wait(&r->space, seen, slice < deadline_ns ? slice : deadline_ns);
  }
  atomic_fetch_sub_explicit(&r->space_waiters, 1, memory_order_relaxed);
}

acx_status_t acxi_ring_push(const acxi_ring_view_t *v, const void *rec, int64_t deadline_ns) {
  for (int spin = 0;; spin++) {
    int got = acxi_ring_try_push(v, rec);
    if (got == ACXI_RING_DONE) return ACX_OK;
    if (got == ACXI_RING_BROKEN) return ACX_ERR_INVALID_STATE;
    if (acxi_now_ns() >= deadline_ns) return ACX_ERR_QUEUE_FULL;
    if (spin < 256)
      acxi_cpu_relax();
    else
      acxi_ring_wait_space(v, deadline_ns);
  }
}

/* In a correct ring the cell at a consumer's position pos (a value `tail` had) holds pos (not
 * published yet), pos + 1 - slots (the previous lap's consumer claimed it and is still copying),
 * pos + 1 (ready), or more, and then only once `tail` has moved past pos (as in try_push). */
int acxi_ring_try_pop(const acxi_ring_view_t *v, void *rec) {
  acxi_ring_t *r = v->r;
  uint64_t pos = atomic_load_explicit(&r->tail, memory_order_relaxed); /* as in try_push */
  cell_t *c;
  for (int tries = 0;; tries++) {
    if (tries == RING_MAX_TRIES) return ACXI_RING_WAIT;
    c = cell_at(v, pos);
    /* acquire: pairs with the producer's release store; the record bytes are visible. */
    uint64_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
    int64_t diff = (int64_t)(seq - (pos + 1));
    if (diff == 0) {
      if (atomic_compare_exchange_weak_explicit(&r->tail, &pos, pos + 1, memory_order_relaxed,
                                                memory_order_relaxed))
        break;
    } else if (diff < 0) {
      if (diff != -1 && diff != -(int64_t)v->slots) return ring_broken(v, "consumer", pos, seq);
      return ACXI_RING_WAIT; /* not published yet: empty */
    } else {
      uint64_t now = atomic_load_explicit(&r->tail, memory_order_relaxed);
      if (now == pos) return ring_broken(v, "consumer", pos, seq);
      pos = now;
    }
  }
  memcpy(rec, cell_data(c), v->rec_size);
  /* release: our read of the record happens before a producer reuses the cell. */
  atomic_store_explicit(&c->seq, pos + v->slots, memory_order_release);
  notify_space(r);
  return ACXI_RING_DONE;
}

int acxi_ring_empty(const acxi_ring_view_t *v) {
  uint64_t pos = atomic_load_explicit(&v->r->tail, memory_order_relaxed);
  uint64_t seq = atomic_load_explicit(&cell_at(v, pos)->seq, memory_order_acquire);
  return (int64_t)(seq - (pos + 1)) < 0;
}

void acxi_ring_consumer_wait(const acxi_ring_view_t *v, int64_t deadline_ns) {
  acxi_ring_t *r = v->r;
  /* acquire: pairs with the producer's release bump; read before the emptiness check so a bump
   * after the check makes the futex wait return at once. */
  uint32_t seen = atomic_load_explicit(&r->bell, memory_order_acquire);
  atomic_fetch_add_explicit(&r->consumer_sleeping, 1, memory_order_relaxed);
  /* seq_cst fence: the sleep flag is visible before we look at the ring (Dekker with
   * notify_consumer). */
  atomic_thread_fence(memory_order_seq_cst);
  if (acxi_ring_empty(v)) acxi_futex_wait(&r->bell, seen, deadline_ns);
  atomic_fetch_sub_explicit(&r->consumer_sleeping, 1, memory_order_relaxed);
}

void acxi_ring_wake(const acxi_ring_view_t *v) {
  atomic_fetch_add_explicit(&v->r->bell, 1, memory_order_release); /* as in notify_consumer */
  acxi_futex_wake(&v->r->bell, 1);
}
