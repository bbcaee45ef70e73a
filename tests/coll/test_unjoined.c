/* acxc_unjoined_count (collectives/coll.c): after a world rebuild, the collective operations a
 * rank submitted beyond the fewest any rank submitted are classified by what this rank was told:
 * a failure, a success (a wrong result: a kernel that ended before anyone heard of the fault; a
 * right one where the result here needs no other rank, a broadcast's root), no
 * reply (fire-and-forget), or not on record (the ring's 256 entries passed, or a future not yet
 * complete). The rebuild's use of it needs ranks and a fault: test_rebuild's after-kill test. */
#include <stdlib.h>

#include "acx/actor.h"
#include "acx_test.h"
#include "collectives/coll_internal.h"

static acxc_unj_t ring[ACXC_UNJ_RING];

/* Records operation idx: without a future when nofut, else with one completed with st, or left
 * pending when pending. */
static void put(uint64_t idx, int nofut, int pending, acx_status_t st) {
  acxc_unj_t *u = &ring[(idx - 1) % ACXC_UNJ_RING];
  if (u->f) acx_future_release(u->f);
  u->idx = idx;
  u->f = NULL;
  u->local = 0;
  if (nofut) return;
  CU_ASSERT_EQUAL_FATAL(acx_future_create(&u->f), ACX_OK);
  if (!pending) CU_ASSERT_EQUAL(acx_future_complete(u->f, st, NULL, 0), ACX_OK);
}

static void clear(void) {
  for (int i = 0; i < ACXC_UNJ_RING; i++) {
    if (ring[i].f) acx_future_release(ring[i].f);
    ring[i] = (acxc_unj_t){0, NULL, 0};
  }
}

static void test_all_joined(void) {
  for (uint64_t k = 1; k <= 10; k++) put(k, 0, 0, ACX_OK);
  acx_coll_rebuild_report_t r = {.size = sizeof r};
  acxc_unjoined_count(ring, 10, 10, &r);
  CU_ASSERT_EQUAL(r.unjoined_ok + r.unjoined_failed + r.unjoined_noreply + r.unjoined_unknown, 0);
  /* Nothing submitted at all. */
  clear();
  acxc_unjoined_count(ring, 0, 0, &r);
  CU_ASSERT_EQUAL(r.unjoined_ok + r.unjoined_failed + r.unjoined_noreply + r.unjoined_unknown, 0);
}

static void test_classes(void) {
  clear();
  /* 1..5 joined by every rank (successes that are right); 6..10 not. */
  for (uint64_t k = 1; k <= 5; k++) put(k, 0, 0, ACX_OK);
  put(6, 0, 0, ACX_ERR_WORLD_REBUILDING);
  put(7, 0, 0, ACX_OK); /* the false success */
  put(8, 1, 0, ACX_OK); /* fire-and-forget */
  put(9, 0, 1, ACX_OK); /* still pending */
  put(10, 0, 0, ACX_ERR_NCCL);
  acx_coll_rebuild_report_t r = {.size = sizeof r};
  acxc_unjoined_count(ring, 5, 10, &r);
  CU_ASSERT_EQUAL(r.unjoined_failed, 2);
  CU_ASSERT_EQUAL(r.unjoined_ok, 1);
  CU_ASSERT_EQUAL(r.unjoined_noreply, 1);
  CU_ASSERT_EQUAL(r.unjoined_unknown, 1);
  /* The same ring seen by a rank that had joined 8 of them. */
  acxc_unjoined_count(ring, 8, 10, &r);
  CU_ASSERT_EQUAL(r.unjoined_failed, 1);
  CU_ASSERT_EQUAL(r.unjoined_ok, 0);
  CU_ASSERT_EQUAL(r.unjoined_unknown, 1);
  /* A success whose result here needs no other rank (a broadcast's root) is right: counted apart. */
  ring[(7 - 1) % ACXC_UNJ_RING].local = 1;
  acxc_unjoined_count(ring, 5, 10, &r);
  CU_ASSERT_EQUAL(r.unjoined_ok, 0);
  CU_ASSERT_EQUAL(r.unjoined_ok_local, 1);
  CU_ASSERT_EQUAL(r.unjoined_failed, 2);
  clear();
}

static void test_ring_wrapped(void) {
  /* 600 operations, the first 100 joined by every rank: only the last 256 are on record. */
  for (uint64_t k = 1; k <= 600; k++) put(k, 0, 0, k % 2 ? ACX_OK : ACX_ERR_WORLD_REBUILDING);
  acx_coll_rebuild_report_t r = {.size = sizeof r};
  acxc_unjoined_count(ring, 100, 600, &r);
  CU_ASSERT_EQUAL(r.unjoined_unknown, 500 - ACXC_UNJ_RING);
  CU_ASSERT_EQUAL(r.unjoined_ok, ACXC_UNJ_RING / 2);
  CU_ASSERT_EQUAL(r.unjoined_failed, ACXC_UNJ_RING / 2);
  clear();
}

int main(void) {
  static const acx_test_case_t cases[] = {ACX_TEST(test_all_joined), ACX_TEST(test_classes),
                                          ACX_TEST(test_ring_wrapped), ACX_TEST_END};
  return acx_test_run("unjoined", cases, NULL, NULL);
}
