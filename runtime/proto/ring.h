/* Bounded lock-free ring of fixed-size records (Vyukov: one sequence number per slot), laid out
 * so that it can live in a shared mapping and be used by two processes at once: it holds no
 * pointer, only counters and records. Many producers, one or more consumers. A futex doorbell
 * (process-shared: no FUTEX_PRIVATE_FLAG) lets an idle consumer sleep, with a deadline. Each side
 * uses the ring through a private view (acxi_ring_view_t): the other process can corrupt the
 * shared part, never the geometry this side copies and indexes with. */
#ifndef ACXI_RING_H
#define ACXI_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "acx/status.h"
#include "runtime/proto/limits.h"

#define ACXI_RING_MAGIC 0x61637872696e6731ull /* "acxring1" */

/* The shared part. magic, slots, rec_size and stride are written once by acxi_ring_init and read
 * only by acxi_ring_check; push and pop use the view's copies. */
typedef struct acxi_ring {
  uint64_t magic;
  uint32_t slots;    /* power of two */
  uint32_t rec_size; /* bytes of one record */
  uint32_t stride;   /* bytes of one cell: sequence number + record, 64-byte aligned */
  uint32_t pad0;
  _Alignas(64) _Atomic uint64_t head; /* next position a producer claims */
  _Alignas(64) _Atomic uint64_t tail; /* next position a consumer takes */
  /* Consumer doorbell: bumped by a producer that saw consumer_sleeping. */
  _Alignas(64) _Atomic uint32_t bell;
  _Atomic uint32_t consumer_sleeping;
  /* Producer doorbell: bumped by a consumer that saw space_waiters (the ring was full). */
  _Alignas(64) _Atomic uint32_t space;
  _Atomic uint32_t space_waiters;
  _Alignas(64) unsigned char cells[];
} acxi_ring_t;

/* One side's private view of a ring: where it lives and its geometry, captured once from values
 * this side trusts (the rank computes them from its own configuration, never from the shared
 * header), so that push and pop never re-read a size or an offset from memory the other process
 * can write. Only the counters, the doorbells and the cells' sequence numbers are shared. */
typedef struct acxi_ring_view {
  acxi_ring_t *r;        /* the shared header: counters and doorbells */
  unsigned char *cells;  /* r->cells */
  uint64_t mask;         /* slots - 1 */
  uint32_t slots;
  uint32_t rec_size;     /* bytes copied per record: always this, whatever the header says */
  size_t stride;
} acxi_ring_view_t;

/* What try_push / try_pop return. */
#define ACXI_RING_DONE 1     /* the record was copied */
#define ACXI_RING_WAIT 0     /* full (push) or empty (pop), or contended: try again later */
#define ACXI_RING_BROKEN (-1) /* a cell holds a sequence number no correct ring can hold: the
                                 other process wrote garbage (logged); stop using the ring */

/* Bytes a ring of `slots` records of `rec_size` bytes occupies (0 when slots is not a power of
 * two in [ACXI_RING_SLOTS_MIN, ACXI_RING_SLOTS_MAX] or the size overflows). */
size_t acxi_ring_bytes(uint32_t slots, uint32_t rec_size);
/* Initialises a ring in `mem` (at least acxi_ring_bytes, 64-byte aligned). Not thread-safe: do
 * it before the ring is shared. ACX_ERR_INVALID_ARG for a bad slot count or record size. */
acx_status_t acxi_ring_init(acxi_ring_t *r, uint32_t slots, uint32_t rec_size);
/* ACX_OK when r looks like an initialised ring of records of rec_size bytes that fits in
 * `bytes` (a mapping received from another process is checked before use). */
acx_status_t acxi_ring_check(const acxi_ring_t *r, uint32_t rec_size, size_t bytes);
/* Fills *v for the ring at r with the geometry the caller knows (slots, rec_size): reads nothing
 * from *r. ACX_ERR_INVALID_ARG for a bad geometry. */
acx_status_t acxi_ring_view_init(acxi_ring_view_t *v, acxi_ring_t *r, uint32_t slots, uint32_t rec_size);

/* Producer: copies rec into the ring: ACXI_RING_DONE, ACXI_RING_WAIT (full, or no claim after a
 * bounded number of tries), ACXI_RING_BROKEN. Rings the consumer's doorbell only when the
 * consumer sleeps. Any thread, any process. Never spins unboundedly, whatever the shared memory
 * holds. */
int acxi_ring_try_push(const acxi_ring_view_t *v, const void *rec);
/* Producer: as try_push, but waits for space (spinning, then sleeping on the space doorbell)
 * until deadline_ns (CLOCK_MONOTONIC). ACX_ERR_QUEUE_FULL when the ring stayed full,
 * ACX_ERR_INVALID_STATE when it is broken. */
acx_status_t acxi_ring_push(const acxi_ring_view_t *v, const void *rec, int64_t deadline_ns);
/* Producer: sleeps until a consumer frees a slot, `deadline_ns` passes or 1 ms elapsed, so a
 * caller can recheck its own conditions while it waits for space. */
void acxi_ring_wait_space(const acxi_ring_view_t *v, int64_t deadline_ns);

/* Consumer: copies the oldest record into rec: ACXI_RING_DONE, ACXI_RING_WAIT (empty),
 * ACXI_RING_BROKEN. Bounded as try_push. */
int acxi_ring_try_pop(const acxi_ring_view_t *v, void *rec);
/* 1 when no record is ready for the consumer (a snapshot). */
int acxi_ring_empty(const acxi_ring_view_t *v);
/* Consumer: sleeps until a record may be ready, acxi_ring_wake is called, or deadline_ns.
 * Returns at once when the ring is not empty. Callers recheck the ring after it returns. */
void acxi_ring_consumer_wait(const acxi_ring_view_t *v, int64_t deadline_ns);
/* Wakes a consumer sleeping in acxi_ring_consumer_wait (shutdown, state changes). */
void acxi_ring_wake(const acxi_ring_view_t *v);

/* Process-shared futex helpers (also used by the control block). */
void acxi_futex_wait(_Atomic uint32_t *word, uint32_t seen, int64_t deadline_ns);
void acxi_futex_wake(_Atomic uint32_t *word, int all);
#endif
