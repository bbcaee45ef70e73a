/* Bounded lock-free ring of fixed-size records (Vyukov: one sequence number per slot), laid out
 * so that it can live in a shared mapping and be used by two processes at once: it holds no
 * pointer, only counters and records. Many producers, one or more consumers. A futex doorbell
 * (process-shared: no FUTEX_PRIVATE_FLAG) lets an idle consumer sleep, with a deadline. */
#ifndef ACXI_RING_H
#define ACXI_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "acx/status.h"

#define ACXI_RING_MAGIC 0x61637872696e6731ull /* "acxring1" */

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

/* Bytes a ring of `slots` records of `rec_size` bytes occupies (0 when slots is not a power of
 * two >= 2 or the size overflows). */
size_t acxi_ring_bytes(uint32_t slots, uint32_t rec_size);
/* Initialises a ring in `mem` (at least acxi_ring_bytes, 64-byte aligned). Not thread-safe: do
 * it before the ring is shared. ACX_ERR_INVALID_ARG for a bad slot count or record size. */
acx_status_t acxi_ring_init(acxi_ring_t *r, uint32_t slots, uint32_t rec_size);
/* ACX_OK when r looks like an initialised ring of records of rec_size bytes that fits in
 * `bytes` (a mapping received from another process is checked before use). */
acx_status_t acxi_ring_check(const acxi_ring_t *r, uint32_t rec_size, size_t bytes);

/* Producer: copies rec into the ring; returns 1, or 0 when the ring is full. Rings the
 * consumer's doorbell only when the consumer sleeps. Any thread, any process. */
int acxi_ring_try_push(acxi_ring_t *r, const void *rec);
/* Producer: as try_push, but waits for space (spinning, then sleeping on the space doorbell)
 * until deadline_ns (CLOCK_MONOTONIC). ACX_ERR_QUEUE_FULL when the ring stayed full. */
acx_status_t acxi_ring_push(acxi_ring_t *r, const void *rec, int64_t deadline_ns);
/* Producer: sleeps until a consumer frees a slot, `deadline_ns` passes or 1 ms elapsed, so a
 * caller can recheck its own conditions while it waits for space. */
void acxi_ring_wait_space(acxi_ring_t *r, int64_t deadline_ns);

/* Consumer: copies the oldest record into rec and returns 1, or 0 when the ring is empty. */
int acxi_ring_try_pop(acxi_ring_t *r, void *rec);
/* 1 when no record is ready for the consumer (a snapshot). */
int acxi_ring_empty(acxi_ring_t *r);
/* Consumer: sleeps until a record may be ready, acxi_ring_wake is called, or deadline_ns.
 * Returns at once when the ring is not empty. Callers recheck the ring after it returns. */
void acxi_ring_consumer_wait(acxi_ring_t *r, int64_t deadline_ns);
/* Wakes a consumer sleeping in acxi_ring_consumer_wait (shutdown, state changes). */
void acxi_ring_wake(acxi_ring_t *r);

/* Process-shared futex helpers (also used by the control block). */
void acxi_futex_wait(_Atomic uint32_t *word, uint32_t seen, int64_t deadline_ns);
void acxi_futex_wake(_Atomic uint32_t *word, int all);
#endif
