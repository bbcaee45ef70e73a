/* The shared-memory ring (runtime/proto/ring.c): wrap-around, a full ring, many producers, the futex
 * doorbell, and a producer in a real child process mapping the ring through its memfd. */
#define _GNU_SOURCE
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "acx_test.h"
#include "runtime/base/clock.h"
#include "runtime/proto/ring.h"
#include "runtime/proto/shm.h"

extern char **environ;

typedef struct rec {
  uint32_t producer;
  uint32_t pad;
  uint64_t seq;
  uint64_t check;
  uint64_t more;
} rec_t;

static uint64_t check_of(uint32_t p, uint64_t s) { return (s * 0x9e3779b97f4a7c15ull) ^ p; }

/* A ring in private memory and our view of it. */
static acxi_ring_view_t *ring_new(uint32_t slots) {
  size_t bytes = acxi_ring_bytes(slots, sizeof(rec_t));
  CU_ASSERT_FATAL(bytes > 0);
  acxi_ring_t *r = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
  acxi_ring_view_t *v = malloc(sizeof *v);
  CU_ASSERT_FATAL(r != NULL && v != NULL);
  ACX_ASSERT_STATUS(acxi_ring_init(r, slots, sizeof(rec_t)), ACX_OK);
  ACX_ASSERT_STATUS(acxi_ring_view_init(v, r, slots, sizeof(rec_t)), ACX_OK);
  return v;
}

static void ring_free(acxi_ring_view_t *v) {
  free(v->r);
  free(v);
}

static void test_init_rejects_bad_geometry(void) {
  CU_ASSERT_EQUAL(acxi_ring_bytes(0, 8), 0);
  CU_ASSERT_EQUAL(acxi_ring_bytes(1, 8), 0);
  CU_ASSERT_EQUAL(acxi_ring_bytes(12, 8), 0);
  CU_ASSERT_EQUAL(acxi_ring_bytes(16, 0), 0);
  acxi_ring_view_t *r = ring_new(4);
  ACX_ASSERT_STATUS(acxi_ring_check(r->r, sizeof(rec_t), acxi_ring_bytes(4, sizeof(rec_t))), ACX_OK);
  ACX_ASSERT_STATUS(acxi_ring_check(r->r, 8, acxi_ring_bytes(4, sizeof(rec_t))), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acxi_ring_check(r->r, sizeof(rec_t), 64), ACX_ERR_INVALID_ARG);
  acxi_ring_view_t v;
  ACX_ASSERT_STATUS(acxi_ring_view_init(&v, r->r, 6, sizeof(rec_t)), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acxi_ring_view_init(&v, r->r, 4, 0), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acxi_ring_init(r->r, 6, sizeof(rec_t)), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acxi_ring_init(NULL, 4, sizeof(rec_t)), ACX_ERR_NULL_ARG);
  ring_free(r);
}

static void test_wrap_around(void) {
  acxi_ring_view_t *r = ring_new(8);
  rec_t in = {0}, out;
  uint64_t next_in = 0, next_out = 0;
  CU_ASSERT(acxi_ring_empty(r));
  CU_ASSERT_EQUAL(acxi_ring_try_pop(r, &out), 0);
  /* Uneven batches so that head and tail cross the slot boundary at every phase. */
  for (int round = 0; round < 500; round++) {
    int batch = 1 + round % 4; /* at most 4 left over + 4 new = 8 slots */
    for (int i = 0; i < batch; i++) {
      in.seq = next_in;
      in.check = check_of(0, next_in);
      CU_ASSERT_EQUAL_FATAL(acxi_ring_try_push(r, &in), 1);
      next_in++;
    }
    int take = 1 + (round * 7) % batch;
    if (round % 3 == 0) take = batch;
    for (int i = 0; i < take; i++) {
      CU_ASSERT_EQUAL_FATAL(acxi_ring_try_pop(r, &out), 1);
      CU_ASSERT_EQUAL_FATAL(out.seq, next_out);
      CU_ASSERT_EQUAL_FATAL(out.check, check_of(0, next_out));
      next_out++;
    }
    while (next_in - next_out > 4) {
      CU_ASSERT_EQUAL_FATAL(acxi_ring_try_pop(r, &out), 1);
      CU_ASSERT_EQUAL_FATAL(out.seq, next_out);
      next_out++;
    }
  }
  while (acxi_ring_try_pop(r, &out) == ACXI_RING_DONE) CU_ASSERT_EQUAL(out.seq, next_out++);
  CU_ASSERT_EQUAL(next_in, next_out);
  CU_ASSERT(next_in > 8 * 100); /* wrapped many times */
  CU_ASSERT(acxi_ring_empty(r));
  ring_free(r);
}

typedef struct delayed_pop {
  acxi_ring_view_t *r;
  int64_t delay_ns;
  int popped;
} delayed_pop_t;

static void *pop_later(void *arg) {
  delayed_pop_t *d = arg;
  struct timespec ts = acxi_ts_from_ns(d->delay_ns);
  nanosleep(&ts, NULL);
  rec_t out;
  d->popped = acxi_ring_try_pop(d->r, &out);
  return NULL;
}

static void test_full_ring(void) {
  acxi_ring_view_t *r = ring_new(4);
  rec_t in = {0};
  for (int i = 0; i < 4; i++) {
    in.seq = (uint64_t)i;
    CU_ASSERT_EQUAL(acxi_ring_try_push(r, &in), 1);
  }
  in.seq = 4;
  CU_ASSERT_EQUAL(acxi_ring_try_push(r, &in), 0);
  int64_t t0 = acxi_now_ns();
  ACX_ASSERT_STATUS(acxi_ring_push(r, &in, t0 + 30000000), ACX_ERR_QUEUE_FULL);
  int64_t waited = acxi_now_ns() - t0;
  CU_ASSERT(waited >= 30000000);
  CU_ASSERT(waited < 2000000000);
  /* A consumer frees a slot after 50 ms: the waiting producer goes through well before its
   * deadline. */
  delayed_pop_t d = {.r = r, .delay_ns = 50000000};
  pthread_t th;
  CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, pop_later, &d), 0);
  t0 = acxi_now_ns();
  ACX_ASSERT_STATUS(acxi_ring_push(r, &in, t0 + 5000000000LL), ACX_OK);
  CU_ASSERT(acxi_now_ns() - t0 < 2000000000);
  pthread_join(th, NULL);
  CU_ASSERT_EQUAL(d.popped, 1);
  rec_t out;
  for (uint64_t i = 1; i <= 4; i++) {
    CU_ASSERT_EQUAL(acxi_ring_try_pop(r, &out), 1);
    CU_ASSERT_EQUAL(out.seq, i);
  }
  CU_ASSERT_EQUAL(acxi_ring_try_pop(r, &out), 0);
  ring_free(r);
}

#define PRODUCERS 4
#define PER_PRODUCER 100000

typedef struct producer_arg {
  acxi_ring_view_t *r;
  uint32_t id;
  int failures;
} producer_arg_t;

static void *produce(void *arg) {
  producer_arg_t *a = arg;
  for (uint64_t s = 0; s < PER_PRODUCER; s++) {
    rec_t in = {.producer = a->id, .seq = s, .check = check_of(a->id, s), .more = ~s};
    if (acxi_ring_push(a->r, &in, acxi_deadline(30000000000LL)) != ACX_OK) a->failures++;
  }
  return NULL;
}

/* Consumes `total` records, sleeping on the doorbell when the ring runs dry; checks per-producer
 * FIFO order and integrity. Returns the number of violations. */
static int consume_all(acxi_ring_view_t *r, uint32_t producers, uint64_t total, int64_t deadline) {
  uint64_t next[PRODUCERS] = {0};
  int bad = 0;
  for (uint64_t got = 0; got < total;) {
    rec_t out;
    if (acxi_ring_try_pop(r, &out) != ACXI_RING_DONE) {
      if (acxi_now_ns() > deadline) return bad + 1000000;
      acxi_ring_consumer_wait(r, acxi_now_ns() + 100000000);
      continue;
    }
    got++;
    if (out.producer >= producers || out.seq != next[out.producer] ||
        out.check != check_of(out.producer, out.seq) || out.more != ~out.seq)
      bad++;
    else
      next[out.producer]++;
  }
  for (uint32_t p = 0; p < producers; p++)
    if (next[p] != PER_PRODUCER) bad++;
  return bad;
}

static void test_many_producers(void) {
  acxi_ring_view_t *r = ring_new(64); /* small, so producers keep finding it full */
  pthread_t th[PRODUCERS];
  producer_arg_t args[PRODUCERS];
  for (uint32_t i = 0; i < PRODUCERS; i++) {
    args[i] = (producer_arg_t){.r = r, .id = i};
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, produce, &args[i]), 0);
  }
  int bad = consume_all(r, PRODUCERS, (uint64_t)PRODUCERS * PER_PRODUCER, acxi_deadline(60000000000LL));
  for (int i = 0; i < PRODUCERS; i++) {
    pthread_join(th[i], NULL);
    CU_ASSERT_EQUAL(args[i].failures, 0);
  }
  CU_ASSERT_EQUAL(bad, 0);
  CU_ASSERT(acxi_ring_empty(r));
  ring_free(r);
}

typedef struct late_push {
  acxi_ring_view_t *r;
  int64_t delay_ns;
} late_push_t;

static void *push_later(void *arg) {
  late_push_t *l = arg;
  struct timespec ts = acxi_ts_from_ns(l->delay_ns);
  nanosleep(&ts, NULL);
  rec_t in = {.seq = 42};
  acxi_ring_try_push(l->r, &in);
  return NULL;
}

static void *wake_later(void *arg) {
  struct timespec ts = acxi_ts_from_ns(50000000);
  nanosleep(&ts, NULL);
  acxi_ring_wake(arg);
  return NULL;
}

static void test_doorbell(void) {
  acxi_ring_view_t *r = ring_new(8);
  /* An empty ring: the consumer sleeps until its deadline. */
  int64_t t0 = acxi_now_ns();
  acxi_ring_consumer_wait(r, t0 + 30000000);
  int64_t slept = acxi_now_ns() - t0;
  CU_ASSERT(slept >= 30000000);
  /* A producer pushes after 50 ms: the doorbell wakes the consumer long before its 10 s deadline. */
  late_push_t l = {.r = r, .delay_ns = 50000000};
  pthread_t th;
  CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, push_later, &l), 0);
  t0 = acxi_now_ns();
  while (acxi_ring_empty(r) && acxi_now_ns() - t0 < 10000000000LL)
    acxi_ring_consumer_wait(r, acxi_now_ns() + 10000000000LL);
  int64_t woke = acxi_now_ns() - t0;
  pthread_join(th, NULL);
  CU_ASSERT(woke < 2000000000);
  rec_t out;
  CU_ASSERT_EQUAL(acxi_ring_try_pop(r, &out), 1);
  CU_ASSERT_EQUAL(out.seq, 42);
  /* A non-empty ring: no sleep at all. */
  acxi_ring_try_push(r, &out);
  t0 = acxi_now_ns();
  acxi_ring_consumer_wait(r, t0 + 5000000000LL);
  CU_ASSERT(acxi_now_ns() - t0 < 1000000000);
  /* acxi_ring_wake ends a sleep on an empty ring early. */
  CU_ASSERT_EQUAL(acxi_ring_try_pop(r, &out), 1);
  CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, wake_later, r), 0);
  t0 = acxi_now_ns();
  acxi_ring_consumer_wait(r, t0 + 10000000000LL);
  CU_ASSERT(acxi_now_ns() - t0 < 5000000000LL);
  pthread_join(th, NULL);
  ring_free(r);
}

/* Issue 12 item 1: the other process rewrites the shared header's geometry (record size, stride,
 * slot count) to huge values. Push and pop keep copying exactly the view's record size into the
 * view's cells: the bytes after the caller's record stay untouched. */
static void test_ring_untrusted_geometry(void) {
  acxi_ring_view_t *r = ring_new(8);
  r->r->rec_size = 1u << 20;
  r->r->stride = 1u << 30;
  r->r->slots = 1u << 31;
  struct {
    rec_t rec;
    unsigned char guard[4096];
  } in, out;
  memset(&in, 0xab, sizeof in);
  memset(&out, 0x5c, sizeof out);
  for (uint64_t i = 0; i < 20; i++) { /* wraps the 8 slots */
    in.rec.seq = i;
    CU_ASSERT_EQUAL_FATAL(acxi_ring_try_push(r, &in.rec), ACXI_RING_DONE);
    CU_ASSERT_EQUAL_FATAL(acxi_ring_try_pop(r, &out.rec), ACXI_RING_DONE);
    CU_ASSERT_EQUAL(out.rec.seq, i);
  }
  int intact = 1;
  for (size_t i = 0; i < sizeof out.guard; i++) intact &= out.guard[i] == 0x5c;
  CU_ASSERT(intact);
  ring_free(r);
}

static uint64_t cell_seq_at(acxi_ring_view_t *v, uint64_t pos) {
  return atomic_load((_Atomic uint64_t *)(v->cells + (pos & v->mask) * v->stride));
}

static void cell_seq_set(acxi_ring_view_t *v, uint64_t pos, uint64_t seq) {
  atomic_store((_Atomic uint64_t *)(v->cells + (pos & v->mask) * v->stride), seq);
}

/* Issue 12 item 1: a sequence number no correct ring can hold makes push and pop report the ring
 * broken at once, instead of spinning forever (seq ahead of an unmoving counter) or reporting a
 * full or empty ring until some deadline (seq far behind). Every legal state still works. */
static void test_ring_impossible_seq(void) {
  acxi_ring_view_t *r = ring_new(8);
  rec_t in = {0}, out;
  for (int i = 0; i < 3; i++) CU_ASSERT_EQUAL(acxi_ring_try_push(r, &in), ACXI_RING_DONE);
  CU_ASSERT_EQUAL(acxi_ring_try_pop(r, &out), ACXI_RING_DONE);
  uint64_t head = atomic_load(&r->r->head), tail = atomic_load(&r->r->tail);
  CU_ASSERT_EQUAL_FATAL(head, 3);
  CU_ASSERT_EQUAL_FATAL(tail, 1);
  /* Producer side, at head: ahead of head (head never moved), far behind, between the legal values. */
  uint64_t bad_push[] = {head + 1, head + 5 * 8 + 1, head - 3 * 8, head - 8 + 2};
  for (size_t i = 0; i < sizeof bad_push / sizeof bad_push[0]; i++) {
    uint64_t keep = cell_seq_at(r, head);
    cell_seq_set(r, head, bad_push[i]);
    int64_t t0 = acxi_now_ns();
    CU_ASSERT_EQUAL(acxi_ring_try_push(r, &in), ACXI_RING_BROKEN);
    ACX_ASSERT_STATUS(acxi_ring_push(r, &in, acxi_deadline(10000000000LL)), ACX_ERR_INVALID_STATE);
    CU_ASSERT(acxi_now_ns() - t0 < 1000000000); /* at once, not at the deadline */
    cell_seq_set(r, head, keep);
  }
  /* Consumer side, at tail: ahead of tail + 1 with tail unmoved, behind the legal values. */
  uint64_t bad_pop[] = {tail + 2, tail + 1 + 3 * 8, tail - 8, tail - 1};
  for (size_t i = 0; i < sizeof bad_pop / sizeof bad_pop[0]; i++) {
    uint64_t keep = cell_seq_at(r, tail);
    cell_seq_set(r, tail, bad_pop[i]);
    CU_ASSERT_EQUAL(acxi_ring_try_pop(r, &out), ACXI_RING_BROKEN);
    cell_seq_set(r, tail, keep);
  }
  /* The legal in-between states: a previous lap's producer claimed and not published (full for
   * a producer), a previous lap's consumer still copying (empty for a consumer). */
  cell_seq_set(r, head, head - 8);
  CU_ASSERT_EQUAL(acxi_ring_try_push(r, &in), ACXI_RING_WAIT);
  cell_seq_set(r, head, head);
  while (acxi_ring_try_pop(r, &out) == ACXI_RING_DONE) {
  }
  tail = atomic_load(&r->r->tail);
  uint64_t keep = cell_seq_at(r, tail);
  cell_seq_set(r, tail, tail + 1 - 8);
  CU_ASSERT_EQUAL(acxi_ring_try_pop(r, &out), ACXI_RING_WAIT);
  cell_seq_set(r, tail, keep);
  CU_ASSERT_EQUAL(acxi_ring_try_push(r, &in), ACXI_RING_DONE);
  CU_ASSERT_EQUAL(acxi_ring_try_pop(r, &out), ACXI_RING_DONE);
  ring_free(r);
}

/* Child side of the cross-process test: maps the ring by fd and produces into it. */
static int child_produce(int fd, uint32_t producers) {
  acxi_shm_t shm;
  if (acxi_shm_map(fd, 0, &shm) != ACX_OK) return 3;
  acxi_ring_view_t v;
  acxi_ring_view_t *r = &v;
  if (acxi_ring_check(shm.addr, sizeof(rec_t), shm.bytes) != ACX_OK) return 4;
  if (acxi_ring_view_init(&v, shm.addr, ((acxi_ring_t *)shm.addr)->slots, sizeof(rec_t)) != ACX_OK) return 4;
  producer_arg_t args[PRODUCERS];
  pthread_t th[PRODUCERS];
  for (uint32_t i = 0; i < producers; i++) {
    args[i] = (producer_arg_t){.r = r, .id = i};
    if (pthread_create(&th[i], NULL, produce, &args[i])) return 5;
  }
  int fails = 0;
  for (uint32_t i = 0; i < producers; i++) {
    pthread_join(th[i], NULL);
    fails += args[i].failures;
  }
  acxi_shm_destroy(&shm);
  return fails ? 6 : 0;
}

static void test_cross_process(void) {
  uint32_t slots = 128, producers = 2;
  acxi_shm_t shm;
  ACX_ASSERT_STATUS(acxi_shm_create("acx-test-ring", acxi_ring_bytes(slots, sizeof(rec_t)), &shm), ACX_OK);
  acxi_ring_view_t v, *r = &v;
  ACX_ASSERT_STATUS(acxi_ring_init(shm.addr, slots, sizeof(rec_t)), ACX_OK);
  ACX_ASSERT_STATUS(acxi_ring_view_init(&v, shm.addr, slots, sizeof(rec_t)), ACX_OK);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, shm.fd, 3); /* memfd is CLOEXEC; dup2 clears it on fd 3 */
  char *argv[] = {"test_ring", "--child", "3", "2", NULL};
  pid_t pid;
  CU_ASSERT_EQUAL_FATAL(posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  int bad = consume_all(r, producers, (uint64_t)producers * PER_PRODUCER, acxi_deadline(60000000000LL));
  CU_ASSERT_EQUAL(bad, 0);
  int status = -1;
  CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
  CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CU_ASSERT(acxi_ring_empty(r));
  acxi_shm_destroy(&shm);
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "--child") == 0) return child_produce(atoi(argv[2]), (uint32_t)atoi(argv[3]));
  static const acx_test_case_t cases[] = {ACX_TEST(test_init_rejects_bad_geometry), ACX_TEST(test_wrap_around),
                                          ACX_TEST(test_full_ring), ACX_TEST(test_many_producers),
                                          ACX_TEST(test_doorbell), ACX_TEST(test_cross_process),
                                          ACX_TEST(test_ring_untrusted_geometry), ACX_TEST(test_ring_impossible_seq),
                                          ACX_TEST_END};
  return acx_test_run("ring", cases, NULL, NULL);
}
