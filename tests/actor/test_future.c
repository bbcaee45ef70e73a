/* Futures (runtime/actor/future.c): completion, first-wins, deadlines, many waiters, payload copies,
 * continuations and bad input. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "acx/actor.h"
#include "acx_test.h"
#include "runtime/base/clock.h"
#include "runtime/actor/future.h"

static void test_complete_then_wait(void) {
  acx_future_t *f = NULL;
  ACX_ASSERT_STATUS(acx_future_create(&f), ACX_OK);
  char out[16] = {0};
  size_t len = 99;
  ACX_ASSERT_STATUS(acx_future_result(f, out, sizeof out, &len), ACX_ERR_TIMEOUT);
  CU_ASSERT_EQUAL(len, 99); /* untouched while pending */
  ACX_ASSERT_STATUS(acx_future_complete(f, ACX_ERR_DEVICE, "hello", 6), ACX_OK);
  ACX_ASSERT_STATUS(acx_future_complete(f, ACX_OK, NULL, 0), ACX_ERR_INVALID_STATE);
  ACX_ASSERT_STATUS(acx_future_wait(f, 0, out, sizeof out, &len), ACX_ERR_DEVICE);
  CU_ASSERT_EQUAL(len, 6);
  CU_ASSERT_STRING_EQUAL(out, "hello");
  /* truncated copy still reports the full size */
  char small[2] = {0};
  ACX_ASSERT_STATUS(acx_future_result(f, small, sizeof small, &len), ACX_ERR_DEVICE);
  CU_ASSERT_EQUAL(len, 6);
  CU_ASSERT_EQUAL(small[0], 'h');
  CU_ASSERT_EQUAL(small[1], 'e');
  acx_future_release(f);
}

static void test_large_payload(void) {
  acx_future_t *f = NULL;
  ACX_ASSERT_STATUS(acx_future_create(&f), ACX_OK);
  static unsigned char in[4096], out[4096];
  acx_test_fill_random(in, sizeof in, 7);
  ACX_ASSERT_STATUS(acx_future_complete(f, ACX_OK, in, sizeof in), ACX_OK);
  size_t len = 0;
  ACX_ASSERT_STATUS(acx_future_wait(f, 1000000000, out, sizeof out, &len), ACX_OK);
  CU_ASSERT_EQUAL(len, sizeof in);
  CU_ASSERT_EQUAL(memcmp(in, out, sizeof in), 0);
  acx_future_release(f);
}

static void test_wait_deadline(void) {
  acx_future_t *f = NULL;
  ACX_ASSERT_STATUS(acx_future_create(&f), ACX_OK);
  int64_t t0 = acxi_now_ns();
  ACX_ASSERT_STATUS(acx_future_wait(f, 30 * 1000000LL, NULL, 0, NULL), ACX_ERR_TIMEOUT);
  int64_t dt = acxi_now_ns() - t0;
  CU_ASSERT(dt >= 30 * 1000000LL);
  CU_ASSERT(dt < 2000 * 1000000LL);
  /* still valid and completable after a timed-out wait */
  ACX_ASSERT_STATUS(acx_future_complete(f, ACX_OK, NULL, 0), ACX_OK);
  ACX_ASSERT_STATUS(acx_future_wait(f, 0, NULL, 0, NULL), ACX_OK);
  acx_future_release(f);
}

#define WAITERS 8
typedef struct {
  acx_future_t *f;
  _Atomic int ok;
} waiters_t;

static void *waiter(void *p) {
  waiters_t *w = p;
  int v = 0;
  size_t len = 0;
  if (acx_future_wait(w->f, 10LL * 1000000000LL, &v, sizeof v, &len) == ACX_OK && len == sizeof v && v == 42)
    atomic_fetch_add(&w->ok, 1);
  acx_future_release(w->f);
  return NULL;
}

static void test_many_waiters(void) {
  for (int round = 0; round < 20; round++) {
    waiters_t w = {.ok = 0};
    ACX_ASSERT_STATUS(acx_future_create(&w.f), ACX_OK);
    pthread_t th[WAITERS];
    for (int i = 0; i < WAITERS; i++) {
      acx_future_hold(w.f);
      CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, waiter, &w), 0);
    }
    /* odd rounds let the waiters get past their spin and park */
    if (round & 1) nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
    int v = 42;
    ACX_ASSERT_STATUS(acx_future_complete(w.f, ACX_OK, &v, sizeof v), ACX_OK);
    for (int i = 0; i < WAITERS; i++) pthread_join(th[i], NULL);
    CU_ASSERT_EQUAL(atomic_load(&w.ok), WAITERS);
    acx_future_release(w.f);
  }
}

typedef struct {
  _Atomic int calls, drops;
  uint64_t cookies[4];
} then_rec_t;

static void rec_fn(void *arg, acx_future_t *f, uint64_t cookie) {
  then_rec_t *r = arg;
  int i = atomic_fetch_add(&r->calls, 1);
  if (i < 4) r->cookies[i] = cookie;
  CU_ASSERT(acxi_future_is_done(f));
}
static void rec_drop(void *arg) { atomic_fetch_add(&((then_rec_t *)arg)->drops, 1); }

static void test_continuations(void) {
  then_rec_t r = {.calls = 0, .drops = 0};
  acx_future_t *f = NULL;
  ACX_ASSERT_STATUS(acx_future_create(&f), ACX_OK);
  ACX_ASSERT_STATUS(acxi_future_on_complete(f, rec_fn, rec_drop, &r, 1), ACX_OK);
  ACX_ASSERT_STATUS(acxi_future_on_complete(f, rec_fn, rec_drop, &r, 2), ACX_OK);
  CU_ASSERT_EQUAL(atomic_load(&r.calls), 0);
  ACX_ASSERT_STATUS(acx_future_complete(f, ACX_OK, NULL, 0), ACX_OK);
  CU_ASSERT_EQUAL(atomic_load(&r.calls), 2);
  CU_ASSERT_EQUAL(r.cookies[0], 1); /* registration order */
  CU_ASSERT_EQUAL(r.cookies[1], 2);
  ACX_ASSERT_STATUS(acxi_future_on_complete(f, rec_fn, rec_drop, &r, 3), ACX_OK); /* runs at once */
  CU_ASSERT_EQUAL(atomic_load(&r.calls), 3);
  CU_ASSERT_EQUAL(r.cookies[2], 3);
  acx_future_release(f);
  CU_ASSERT_EQUAL(atomic_load(&r.drops), 0);

  /* never completed: the continuation is dropped with the last reference */
  ACX_ASSERT_STATUS(acx_future_create(&f), ACX_OK);
  ACX_ASSERT_STATUS(acxi_future_on_complete(f, rec_fn, rec_drop, &r, 4), ACX_OK);
  acx_future_release(f);
  CU_ASSERT_EQUAL(atomic_load(&r.drops), 1);
  CU_ASSERT_EQUAL(atomic_load(&r.calls), 3);
}

static void test_bad_input(void) {
  acx_future_t *f = NULL;
  ACX_ASSERT_STATUS(acx_future_create(NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_future_complete(NULL, ACX_OK, NULL, 0), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_future_wait(NULL, 0, NULL, 0, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_future_result(NULL, NULL, 0, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_future_hold(NULL), ACX_ERR_NULL_ARG);
  acx_future_release(NULL);
  ACX_ASSERT_STATUS(acx_future_create(&f), ACX_OK);
  ACX_ASSERT_STATUS(acx_future_wait(f, -1, NULL, 0, NULL), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_future_complete(f, ACX_OK, NULL, 5), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_future_complete(f, ACX_OK, "", 0), ACX_OK); /* zero length is fine */
  size_t len = 7;
  ACX_ASSERT_STATUS(acx_future_wait(f, 0, NULL, 0, &len), ACX_OK);
  CU_ASSERT_EQUAL(len, 0);
  acx_future_release(f);
}

int main(void) {
  static const acx_test_case_t cases[] = {ACX_TEST(test_complete_then_wait), ACX_TEST(test_large_payload),
                                          ACX_TEST(test_wait_deadline),      ACX_TEST(test_many_waiters),
                                          ACX_TEST(test_continuations),      ACX_TEST(test_bad_input),
                                          ACX_TEST_END};
  return acx_test_run("future", cases, NULL, NULL);
}
