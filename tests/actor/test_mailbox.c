/* The MPSC mailbox (runtime/actor/mailbox.c): 4 producers x 1M messages, none lost, none duplicated,
 * FIFO per producer; the empty mark hands scheduling to exactly one producer. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "acx_test.h"
#include "runtime/actor/mailbox.h"

#if defined(__SANITIZE_THREAD__)
#define PER_PRODUCER 100000L /* TSan is ~20x slower; the interleavings are the same */
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PER_PRODUCER 100000L
#endif
#endif
#ifndef PER_PRODUCER
#define PER_PRODUCER 1000000L
#endif
#define PRODUCERS 4

typedef struct {
  acxi_mbox_t q;
  _Atomic int wakeups; /* pushes that found the queue marked empty */
  _Atomic int failed_alloc;
} shared_t;

typedef struct {
  shared_t *sh;
  uint32_t id;
} prod_t;

static void *producer(void *p) {
  prod_t *pr = p;
  for (long i = 0; i < PER_PRODUCER; i++) {
    acxi_env_t *e = acxi_env_alloc(2 * sizeof(uint64_t));
    if (!e) {
      atomic_fetch_add(&pr->sh->failed_alloc, 1);
      continue;
    }
    uint64_t v[2] = {pr->id, (uint64_t)i};
    memcpy(e->data, v, sizeof v);
    e->msg.len = sizeof v;
    if (acxi_mbox_push(&pr->sh->q, e)) atomic_fetch_add(&pr->sh->wakeups, 1);
  }
  return NULL;
}

static void test_mpsc_4x1m(void) {
  shared_t sh = {.wakeups = 0, .failed_alloc = 0};
  ACX_ASSERT_STATUS(acxi_mbox_init(&sh.q), ACX_OK);
  pthread_t th[PRODUCERS];
  prod_t pr[PRODUCERS];
  for (int i = 0; i < PRODUCERS; i++) {
    pr[i] = (prod_t){&sh, (uint32_t)i};
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, producer, &pr[i]), 0);
  }
  long next[PRODUCERS] = {0};
  long total = 0, bad_order = 0, bad_id = 0, empties = 0;
  const long want = PRODUCERS * PER_PRODUCER;
  while (total < want) {
    acxi_env_t *e = acxi_mbox_pop(&sh.q);
    if (!e) {
      /* play the scheduler: go idle; a producer that sees the mark would reschedule us */
      if (acxi_mbox_markempty(&sh.q)) empties++;
      continue;
    }
    uint64_t v[2];
    memcpy(v, e->data, sizeof v);
    if (v[0] >= PRODUCERS) {
      bad_id++;
      continue;
    }
    if ((long)v[1] != next[v[0]]) bad_order++;
    next[v[0]] = (long)v[1] + 1;
    total++;
  }
  for (int i = 0; i < PRODUCERS; i++) pthread_join(th[i], NULL);
  CU_ASSERT_PTR_NULL(acxi_mbox_pop(&sh.q)); /* nothing duplicated */
  CU_ASSERT_EQUAL(bad_id, 0);
  CU_ASSERT_EQUAL(bad_order, 0);
  CU_ASSERT_EQUAL(atomic_load(&sh.failed_alloc), 0);
  for (int i = 0; i < PRODUCERS; i++) CU_ASSERT_EQUAL(next[i], PER_PRODUCER);
  /* each wake-up answers one mark, and the queue starts marked */
  CU_ASSERT(atomic_load(&sh.wakeups) >= 1);
  CU_ASSERT(atomic_load(&sh.wakeups) <= empties + 1);
  acxi_mbox_fini(&sh.q);
}

static void test_empty_mark(void) {
  acxi_mbox_t q;
  ACX_ASSERT_STATUS(acxi_mbox_init(&q), ACX_OK);
  CU_ASSERT_PTR_NULL(acxi_mbox_pop(&q));
  CU_ASSERT(acxi_mbox_markempty(&q)); /* starts marked */
  acxi_env_t *a = acxi_env_alloc(0), *b = acxi_env_alloc(1000); /* inline and heap-sized */
  CU_ASSERT_FATAL(a && b);
  CU_ASSERT(acxi_mbox_push(&q, a));  /* first push after the mark schedules */
  CU_ASSERT(!acxi_mbox_push(&q, b)); /* the second does not */
  CU_ASSERT(!acxi_mbox_markempty(&q));
  CU_ASSERT_PTR_EQUAL(acxi_mbox_pop(&q), a);
  CU_ASSERT(!acxi_mbox_markempty(&q));
  CU_ASSERT_PTR_EQUAL(acxi_mbox_pop(&q), b);
  CU_ASSERT_PTR_NULL(acxi_mbox_pop(&q));
  CU_ASSERT(acxi_mbox_markempty(&q));
  acxi_env_t *c = acxi_env_alloc(8);
  CU_ASSERT(acxi_mbox_push(&q, c));
  CU_ASSERT_PTR_EQUAL(acxi_mbox_pop(&q), c);
  acxi_mbox_fini(&q);
}

int main(void) {
  static const acx_test_case_t cases[] = {ACX_TEST(test_empty_mark), ACX_TEST(test_mpsc_4x1m), ACX_TEST_END};
  return acx_test_run("mailbox", cases, NULL, NULL);
}
