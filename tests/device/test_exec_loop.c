/* The executor loop (kernels/exec/exec_loop.c) with the host engine, driven through a control block:
 * commands and replies, generation check, host regions, fault schedules, shutdown, stop, a failed
 * start, progress stamps and the heartbeat thread (it beats while the loop is blocked), standby
 * executors (promotion, leave), direct (inline) completion. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acx_test.h"
#include "runtime/base/clock.h"
#include "kernels/exec/exec_loop.h"

typedef struct rig {
  acxi_shm_t shm;
  acxi_ctrl_t *ctrl;
  acxi_ctrl_view_t v; /* the test plays the rank: its own view of the rings */
  acxi_exec_loop_params_t p;
  pthread_t th;
  acxi_loop_exit_t why;
  _Atomic int stop;
  uint64_t next_req;
} rig_t;

static void *run_loop(void *arg) {
  rig_t *r = arg;
  r->why = acxi_exec_loop_run(&r->p);
  return NULL;
}

/* A control block and the loop's parameters (host engine unless ops says; inline); started by
 * rig_run, so that a test may change them first. */
static void rig_init(rig_t *r, int streams, const char *fault) {
  memset(r, 0, sizeof *r);
  ACX_ASSERT_STATUS(acxi_ctrl_create(64, 1, &r->shm), ACX_OK);
  r->ctrl = acxi_ctrl(&r->shm);
  ACX_ASSERT_STATUS(acxi_ctrl_view_init(&r->v, r->shm.addr, 64), ACX_OK);
  r->p = (acxi_exec_loop_params_t){
      .view = r->v,
      .ops = acxi_engine_find("host"),
      .engine = {.streams = streams, .generation = 1, .inline_mode = 1, .completion = "auto", .fault_inject = fault},
      .sock_fd = -1,
      .heartbeat_period_ns = 5000000,
      .spin_ns = 10000,
      .stop = &r->stop,
  };
  CU_ASSERT_PTR_NOT_NULL_FATAL(r->p.ops);
}

static void rig_run(rig_t *r) { CU_ASSERT_EQUAL_FATAL(pthread_create(&r->th, NULL, run_loop, r), 0); }

static void rig_start(rig_t *r, int streams, const char *fault) {
  rig_init(r, streams, fault);
  rig_run(r);
}

/* Sends one command and waits for its completion. */
static acxi_cpl_t call(rig_t *r, acxi_cmd_t cmd) {
  cmd.req_id = ++r->next_req;
  if (!cmd.generation) cmd.generation = 1;
  acxi_cpl_t c = {.status = -1};
  CU_ASSERT_EQUAL(acxi_ring_push(&r->v.cmds, &cmd, acxi_deadline(5000000000LL)), ACX_OK);
  int64_t dl = acxi_deadline(10000000000LL);
  while (acxi_ring_try_pop(&r->v.cpls, &c) != ACXI_RING_DONE && acxi_now_ns() < dl)
    acxi_ring_consumer_wait(&r->v.cpls, acxi_now_ns() + 100000000);
  CU_ASSERT_EQUAL(c.req_id, cmd.req_id);
  return c;
}

static void rig_join(rig_t *r) { pthread_join(r->th, NULL); }
static void rig_free(rig_t *r) { acxi_shm_destroy(&r->shm); }

static void test_commands_and_shutdown(void) {
  rig_t r;
  rig_start(&r, 2, "");
  CU_ASSERT_EQUAL(call(&r, (acxi_cmd_t){.op = ACXI_OP_NOP}).status, ACX_OK);
  CU_ASSERT_EQUAL(atomic_load(&r.ctrl->state), ACXI_EXEC_READY);
  CU_ASSERT_EQUAL(call(&r, (acxi_cmd_t){.op = ACXI_OP_ALLOC, .buf = {5}, .bytes = 4096}).status, ACX_OK);
  /* A host region by address (inline), filled by the executor, read back here. */
  static unsigned char region[4096] __attribute__((aligned(64)));
  memset(region, 0, sizeof region);
  CU_ASSERT_EQUAL(call(&r, (acxi_cmd_t){.op = ACXI_OP_HOST_REGISTER, .bytes = sizeof region,
                                         .arg = {9, (uint64_t)(uintptr_t)region}}).status, ACX_OK);
  CU_ASSERT_EQUAL(call(&r, (acxi_cmd_t){.op = ACXI_OP_HOST_REGISTER, .bytes = sizeof region,
                                         .arg = {9, (uint64_t)(uintptr_t)region}}).status, ACX_ERR_INVALID_ARG);
  CU_ASSERT_EQUAL(call(&r, (acxi_cmd_t){.op = ACXI_OP_FILL, .buf = {5}, .bytes = 4096, .arg = {0xc3, 1}}).status, ACX_OK);
  CU_ASSERT_EQUAL(call(&r, (acxi_cmd_t){.op = ACXI_OP_COPY_D2H, .buf = {0, 5}, .bytes = 4096, .arg = {9}}).status, ACX_OK);
  unsigned char want[4096];
  memset(want, 0xc3, sizeof want);
  CU_ASSERT(memcmp(region, want, sizeof want) == 0);
  acxi_cpl_t info = call(&r, (acxi_cmd_t){.op = ACXI_OP_BUFFER_INFO, .buf = {5}});
  CU_ASSERT_EQUAL(info.value[0], 4096);
  CU_ASSERT(info.value[1] != 0);
  /* Another generation's command is refused as stale. */
  CU_ASSERT_EQUAL(call(&r, (acxi_cmd_t){.op = ACXI_OP_NOP, .generation = 7}).status, ACX_ERR_STALE_BUFFER);
  CU_ASSERT_EQUAL(call(&r, (acxi_cmd_t){.op = ACXI_OP_HOST_UNREGISTER, .arg = {9}}).status, ACX_OK);
  CU_ASSERT_EQUAL(call(&r, (acxi_cmd_t){.op = ACXI_OP_HOST_UNREGISTER, .arg = {9}}).status, ACX_ERR_INVALID_ARG);
  /* A fire-and-forget command that succeeds posts nothing; one that fails does. */
  acxi_cmd_t quiet = {.op = ACXI_OP_NOP, .flags = ACXI_CMD_FLAG_NO_REPLY, .generation = 1, .req_id = 1000};
  CU_ASSERT_EQUAL(acxi_ring_try_push(&r.v.cmds, &quiet), ACXI_RING_DONE);
  CU_ASSERT_EQUAL(call(&r, (acxi_cmd_t){.op = ACXI_OP_FREE, .buf = {5}}).status, ACX_OK); /* next reply is ours */
  /* The progress stamp moves while idle. */
  int64_t b0 = atomic_load(&r.ctrl->progress_ns);
  struct timespec ts = {0, 30000000};
  nanosleep(&ts, NULL);
  CU_ASSERT(atomic_load(&r.ctrl->progress_ns) > b0);
  CU_ASSERT_EQUAL(call(&r, (acxi_cmd_t){.op = ACXI_OP_SHUTDOWN}).status, ACX_OK);
  rig_join(&r);
  CU_ASSERT_EQUAL(r.why, ACXI_LOOP_SHUTDOWN);
  CU_ASSERT_EQUAL(atomic_load(&r.ctrl->state), ACXI_EXEC_STOPPED);
  rig_free(&r);
}

static void test_stop_flag(void) {
  rig_t r;
  rig_start(&r, 1, "");
  CU_ASSERT_EQUAL(call(&r, (acxi_cmd_t){.op = ACXI_OP_NOP}).status, ACX_OK);
  atomic_store(&r.stop, 1);
  acxi_ring_wake(&r.v.cmds);
  rig_join(&r);
  CU_ASSERT_EQUAL(r.why, ACXI_LOOP_STOPPED);
  rig_free(&r);
}

static void test_engine_cannot_start(void) {
  rig_t r;
  rig_start(&r, 0, ""); /* the host engine needs >= 1 stream */
  rig_join(&r);
  CU_ASSERT_EQUAL(r.why, ACXI_LOOP_START_FAILED);
  CU_ASSERT_EQUAL(atomic_load(&r.ctrl->state), ACXI_EXEC_FAILED);
  CU_ASSERT_EQUAL(atomic_load(&r.ctrl->sticky), 1);
  CU_ASSERT_EQUAL(r.ctrl->sticky_status, ACX_ERR_INVALID_ARG);
  rig_free(&r);
}

static void test_fault_schedule_poisons(void) {
  rig_t r;
  rig_start(&r, 1, "cmd:2"); /* inline host engine: the fault poisons instead of aborting */
  CU_ASSERT_EQUAL(call(&r, (acxi_cmd_t){.op = ACXI_OP_NOP}).status, ACX_OK);
  CU_ASSERT_EQUAL(call(&r, (acxi_cmd_t){.op = ACXI_OP_NOP}).status, ACX_ERR_DEVICE_FATAL);
  rig_join(&r);
  CU_ASSERT_EQUAL(r.why, ACXI_LOOP_POISONED);
  CU_ASSERT_EQUAL(atomic_load(&r.ctrl->sticky), 1);
  CU_ASSERT_PTR_NOT_NULL(strstr(r.ctrl->sticky_msg, "poisoned"));
  rig_free(&r);
}

/* A standby rig: control block of generation 0, the loop told to stand by. */
static void rig_start_standby(rig_t *r, const char *fault) {
  memset(r, 0, sizeof *r);
  ACX_ASSERT_STATUS(acxi_ctrl_create(64, 0, &r->shm), ACX_OK);
  r->ctrl = acxi_ctrl(&r->shm);
  ACX_ASSERT_STATUS(acxi_ctrl_view_init(&r->v, r->shm.addr, 64), ACX_OK);
  r->p = (acxi_exec_loop_params_t){
      .view = r->v,
      .ops = acxi_engine_find("host"),
      .engine = {.streams = 1, .generation = 0, .inline_mode = 1, .completion = "auto", .fault_inject = fault},
      .sock_fd = -1,
      .heartbeat_period_ns = 5000000,
      .spin_ns = 10000,
      .stop = &r->stop,
      .standby = 1,
  };
  CU_ASSERT_EQUAL_FATAL(pthread_create(&r->th, NULL, run_loop, r), 0);
  int64_t dl = acxi_deadline(10000000000LL);
  while (atomic_load(&r->ctrl->state) != ACXI_EXEC_STANDBY && acxi_now_ns() < dl) usleep(1000);
  CU_ASSERT_EQUAL_FATAL(atomic_load(&r->ctrl->state), ACXI_EXEC_STANDBY);
}

static void nap_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

/* A standby serves nothing until promoted, keeps stamping its progress, and counts a fault schedule from
 * its promotion. */
static void test_standby_promote(void) {
  rig_t r;
  rig_start_standby(&r, "cmd:2");
  int64_t b0 = atomic_load(&r.ctrl->progress_ns);
  acxi_cmd_t early = {.op = ACXI_OP_NOP, .generation = 3, .req_id = 77};
  CU_ASSERT_EQUAL(acxi_ring_try_push(&r.v.cmds, &early), ACXI_RING_DONE);
  nap_ms(30);
  CU_ASSERT(atomic_load(&r.ctrl->progress_ns) > b0);
  acxi_cpl_t c;
  CU_ASSERT_EQUAL(acxi_ring_try_pop(&r.v.cpls, &c), ACXI_RING_WAIT); /* not served while standing by */
  CU_ASSERT_EQUAL(atomic_load(&r.ctrl->state), ACXI_EXEC_STANDBY);
  r.ctrl->generation = 3;
  atomic_store_explicit(&r.ctrl->promote, ACXI_STANDBY_PROMOTE, memory_order_release);
  acxi_futex_wake(&r.ctrl->promote, 1);
  int64_t dl = acxi_deadline(10000000000LL);
  int got = 0;
  while ((got = acxi_ring_try_pop(&r.v.cpls, &c)) != ACXI_RING_DONE && acxi_now_ns() < dl) usleep(100);
  CU_ASSERT_FATAL(got == ACXI_RING_DONE);
  CU_ASSERT_EQUAL(c.req_id, 77);
  CU_ASSERT_EQUAL(c.status, ACX_OK);
  CU_ASSERT_EQUAL(atomic_load(&r.ctrl->state), ACXI_EXEC_READY);
  r.next_req = 100;
  /* Command 2 since the promotion: the scheduled fault (inline host engine: poisoned). */
  CU_ASSERT_EQUAL(call(&r, (acxi_cmd_t){.op = ACXI_OP_NOP, .generation = 3}).status, ACX_ERR_DEVICE_FATAL);
  rig_join(&r);
  CU_ASSERT_EQUAL(r.why, ACXI_LOOP_POISONED);
  rig_free(&r);
}

/* Told to leave, a standby stops without serving. */
static void test_standby_leave(void) {
  rig_t r;
  rig_start_standby(&r, "");
  atomic_store_explicit(&r.ctrl->promote, ACXI_STANDBY_LEAVE, memory_order_release);
  acxi_futex_wake(&r.ctrl->promote, 1);
  rig_join(&r);
  CU_ASSERT_EQUAL(r.why, ACXI_LOOP_STOPPED);
  CU_ASSERT_EQUAL(atomic_load(&r.ctrl->state), ACXI_EXEC_STOPPED);
  rig_free(&r);
}

/* Inline direct completion: every completion (the engine's and the loop's own) goes to the
 * callback; the reply ring stays empty. */
static pthread_mutex_t direct_lock = PTHREAD_MUTEX_INITIALIZER;
static acxi_cpl_t direct_got[8];
static int n_direct;

static void direct_sink(void *sink, const acxi_cpl_t *c) {
  CU_ASSERT_EQUAL(sink, &direct_got);
  pthread_mutex_lock(&direct_lock);
  if (n_direct < 8) direct_got[n_direct++] = *c;
  pthread_mutex_unlock(&direct_lock);
}

static int direct_count(void) {
  pthread_mutex_lock(&direct_lock);
  int n = n_direct;
  pthread_mutex_unlock(&direct_lock);
  return n;
}

static void test_direct_completion(void) {
  rig_t r;
  memset(&r, 0, sizeof r);
  n_direct = 0;
  ACX_ASSERT_STATUS(acxi_ctrl_create(64, 1, &r.shm), ACX_OK);
  r.ctrl = acxi_ctrl(&r.shm);
  ACX_ASSERT_STATUS(acxi_ctrl_view_init(&r.v, r.shm.addr, 64), ACX_OK);
  r.p = (acxi_exec_loop_params_t){
      .view = r.v,
      .ops = acxi_engine_find("host"),
      .engine = {.streams = 1, .generation = 1, .inline_mode = 1, .completion = "auto", .fault_inject = ""},
      .sock_fd = -1,
      .heartbeat_period_ns = 5000000,
      .spin_ns = 10000,
      .stop = &r.stop,
      .direct = direct_sink,
      .direct_sink = &direct_got,
  };
  CU_ASSERT_EQUAL_FATAL(pthread_create(&r.th, NULL, run_loop, &r), 0);
  acxi_cmd_t cmds[] = {{.op = ACXI_OP_NOP, .generation = 1, .req_id = 5},
                       {.op = ACXI_OP_HOST_REGISTER, .generation = 1, .req_id = 6, .arg = {9, 0}}, /* no address */
                       {.op = ACXI_OP_NOP, .generation = 1, .req_id = 7, .flags = ACXI_CMD_FLAG_NO_REPLY},
                       {.op = ACXI_OP_SHUTDOWN, .generation = 1, .req_id = 8}};
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
    CU_ASSERT_EQUAL(acxi_ring_push(&r.v.cmds, &cmds[i], acxi_deadline(5000000000LL)), ACX_OK);
  rig_join(&r);
  CU_ASSERT_EQUAL(r.why, ACXI_LOOP_SHUTDOWN);
  CU_ASSERT_EQUAL_FATAL(direct_count(), 3);
  CU_ASSERT_EQUAL(direct_got[0].req_id, 5);
  CU_ASSERT_EQUAL(direct_got[0].status, ACX_OK);
  CU_ASSERT_EQUAL(direct_got[1].req_id, 6);
  CU_ASSERT_EQUAL(direct_got[1].status, ACX_ERR_INVALID_ARG);
  CU_ASSERT_EQUAL(direct_got[2].req_id, 8);
  acxi_cpl_t c;
  CU_ASSERT_EQUAL(acxi_ring_try_pop(&r.v.cpls, &c), ACXI_RING_WAIT);
  rig_free(&r);
}

/* Issue 13 item 4: a loop blocked inside one command (ACXI_FAULT_BUSY) stops its progress stamp,
 * but the heartbeat thread keeps beating, so the rank sees a live, busy process. Its reply comes
 * once the call returns, and the progress stamp moves again. */
static void test_heartbeat_thread_beats_while_loop_blocked(void) {
  rig_t r;
  rig_start(&r, 1, "");
  acxi_heartbeat_t hb;
  ACX_ASSERT_STATUS(acxi_heartbeat_start(&hb, r.ctrl, 2000000, 0, 0), ACX_OK);
  CU_ASSERT_EQUAL(call(&r, (acxi_cmd_t){.op = ACXI_OP_NOP}).status, ACX_OK);
  acxi_cmd_t busy = {.op = ACXI_OP_FAULT, .generation = 1, .req_id = 500, .arg = {ACXI_FAULT_BUSY, 2000000000}};
  CU_ASSERT_EQUAL(acxi_ring_push(&r.v.cmds, &busy, acxi_deadline(5000000000LL)), ACX_OK);
  /* Once the loop has been inside the call for a while (its progress stamp is 100 ms old), the
   * heartbeat is still fresh. */
  int64_t dl = acxi_deadline(10000000000LL), stale_seen = 0;
  while (acxi_now_ns() < dl) {
    int64_t now = acxi_now_ns();
    if (now - atomic_load(&r.ctrl->progress_ns) > 100000000) {
      stale_seen = now;
      break;
    }
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  CU_ASSERT_FATAL(stale_seen != 0);
  /* Then the heartbeat moves on while the progress stamp stays where the loop left it. */
  int64_t stuck_at = atomic_load(&r.ctrl->progress_ns), beat_after = 0;
  while (acxi_now_ns() < dl && atomic_load(&r.ctrl->progress_ns) == stuck_at) {
    if (atomic_load(&r.ctrl->heartbeat_ns) > stale_seen) {
      beat_after = atomic_load(&r.ctrl->heartbeat_ns);
      break;
    }
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  CU_ASSERT(beat_after > stale_seen);
  acxi_cpl_t c = {.status = -1};
  while (acxi_ring_try_pop(&r.v.cpls, &c) != ACXI_RING_DONE && acxi_now_ns() < dl)
    acxi_ring_consumer_wait(&r.v.cpls, acxi_now_ns() + 100000000);
  CU_ASSERT_EQUAL(c.req_id, 500);
  CU_ASSERT_EQUAL(c.status, ACX_OK);
  while (atomic_load(&r.ctrl->progress_ns) == stuck_at && acxi_now_ns() < dl) { /* the loop runs again */
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  CU_ASSERT(atomic_load(&r.ctrl->progress_ns) > stuck_at);
  acxi_heartbeat_stop(&hb);
  int64_t b = atomic_load(&r.ctrl->heartbeat_ns);
  CU_ASSERT_EQUAL(call(&r, (acxi_cmd_t){.op = ACXI_OP_SHUTDOWN}).status, ACX_OK);
  rig_join(&r);
  CU_ASSERT_EQUAL(atomic_load(&r.ctrl->heartbeat_ns), b); /* stopped: no thread left behind */
  rig_free(&r);
}

/* ACX_EXEC_NAP_NS: a host engine that says it has work in flight until the test clears busy_until.
 * With a 2 ms nap, once nothing happened for 2 ms, the loop polls it at most once per nap (a few dozen times in 100 ms, where
 * busy-polling polls millions of times), and a command pushed during a nap is served at once. */
static _Atomic int64_t busy_until;
static _Atomic uint64_t polls;
static uint64_t busy_in_flight(acxi_engine_t *e) {
  (void)e;
  return acxi_now_ns() < atomic_load(&busy_until) ? 1 : 0;
}
static int counting_progress(acxi_engine_t *e) {
  atomic_fetch_add(&polls, 1);
  return acxi_engine_find("host")->progress(e);
}

static void nap_rig(rig_t *r, acxi_engine_ops_t *ops, int64_t nap_ns, int64_t period_ns) {
  *ops = *acxi_engine_find("host");
  ops->in_flight = busy_in_flight;
  ops->progress = counting_progress;
  rig_init(r, 1, "");
  r->p.ops = ops;
  r->p.heartbeat_period_ns = period_ns;
  r->p.spin_ns = 0;
  r->p.nap_ns = nap_ns;
  rig_run(r);
}

static void test_inflight_nap(void) {
  static acxi_engine_ops_t ops;
  rig_t r;
  atomic_store(&busy_until, INT64_MAX);
  nap_rig(&r, &ops, 2000000, 5000000);
  CU_ASSERT_EQUAL(call(&r, (acxi_cmd_t){.op = ACXI_OP_NOP}).status, ACX_OK);
  nanosleep(&(struct timespec){0, 10000000}, NULL); /* past the first nap_ns of busy-polling */
  uint64_t p0 = atomic_load(&polls);
  int64_t t0 = acxi_now_ns();
  struct timespec ts = {0, 100000000};
  nanosleep(&ts, NULL);
  uint64_t n = atomic_load(&polls) - p0;
  int64_t ms = (acxi_now_ns() - t0) / 1000000;
  /* One poll per nap, plus one per command. A nap also ends at the next heartbeat stamp (every
   * 5 ms), so each 5 ms period holds at most 3 naps (2, 2, 1 ms): 60 per 100 ms, with room. (The
   * bound was 50 + 10 until session 27, when CI saw 61 in 100 ms: naps cut at the stamp.) */
  const uint64_t most = (uint64_t)(ms * 3 / 5 + 10);
  CU_ASSERT(n <= most);
  if (n > most) fprintf(stderr, "%" PRIu64 " polls in %" PRId64 " ms with 2 ms naps and a 5 ms heartbeat\n", n, ms);
  /* It still polls while napping, and its progress stamp moves on (every 5 ms); waited for with a
   * deadline, not a fixed sleep (a loaded machine may hold the loop's thread off for seconds). */
  uint64_t p1 = atomic_load(&polls);
  int64_t b0 = atomic_load(&r.ctrl->progress_ns), dl = acxi_deadline(10000000000LL);
  while ((atomic_load(&polls) == p1 || atomic_load(&r.ctrl->progress_ns) == b0) && acxi_now_ns() < dl)
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  CU_ASSERT(atomic_load(&polls) > p1);
  CU_ASSERT(atomic_load(&r.ctrl->progress_ns) > b0);
  atomic_store(&busy_until, 0);
  CU_ASSERT_EQUAL(call(&r, (acxi_cmd_t){.op = ACXI_OP_SHUTDOWN}).status, ACX_OK);
  rig_join(&r);
  rig_free(&r);

  /* 5 s naps (progress period 60 s): 5.5 s after a command the loop is 0.5 s into its first nap,
   * which would last until 10 s; a command sent then is served at once (the doorbell ends the nap),
   * not 4.5 s later (3 s allowed: a loaded machine may hold a thread off for a second or two). */
  atomic_store(&busy_until, INT64_MAX);
  nap_rig(&r, &ops, 5000000000LL, 60000000000LL);
  CU_ASSERT_EQUAL(call(&r, (acxi_cmd_t){.op = ACXI_OP_NOP}).status, ACX_OK);
  nanosleep(&(struct timespec){5, 500000000}, NULL);
  int64_t s0 = acxi_now_ns();
  CU_ASSERT_EQUAL(call(&r, (acxi_cmd_t){.op = ACXI_OP_NOP}).status, ACX_OK);
  int64_t waited_ms = (acxi_now_ns() - s0) / 1000000;
  CU_ASSERT(waited_ms < 3000);
  if (waited_ms >= 3000) fprintf(stderr, "a command sent during a nap waited %" PRId64 " ms\n", waited_ms);
  atomic_store(&busy_until, 0);
  CU_ASSERT_EQUAL(call(&r, (acxi_cmd_t){.op = ACXI_OP_SHUTDOWN}).status, ACX_OK);
  rig_join(&r);
  CU_ASSERT_EQUAL(r.why, ACXI_LOOP_SHUTDOWN);
  rig_free(&r);
}

static void test_fault_schedule_parse(void) {
  uint64_t n = 99;
  ACX_ASSERT_STATUS(acxi_fault_schedule("", 1, &n), ACX_OK);
  CU_ASSERT_EQUAL(n, 0);
  ACX_ASSERT_STATUS(acxi_fault_schedule("cmd:12", 3, &n), ACX_OK);
  CU_ASSERT_EQUAL(n, 12);
  ACX_ASSERT_STATUS(acxi_fault_schedule("once:4", 1, &n), ACX_OK);
  CU_ASSERT_EQUAL(n, 4);
  ACX_ASSERT_STATUS(acxi_fault_schedule("once:4", 2, &n), ACX_OK);
  CU_ASSERT_EQUAL(n, 0);
  ACX_ASSERT_STATUS(acxi_fault_schedule("cmd:0", 1, &n), ACX_ERR_BAD_PARAM);
  ACX_ASSERT_STATUS(acxi_fault_schedule("cmd:-3", 1, &n), ACX_ERR_BAD_PARAM);
  ACX_ASSERT_STATUS(acxi_fault_schedule("cmd:4x", 1, &n), ACX_ERR_BAD_PARAM);
  ACX_ASSERT_STATUS(acxi_fault_schedule("sometimes", 1, &n), ACX_ERR_BAD_PARAM);
  ACX_ASSERT_STATUS(acxi_fault_schedule("cmd:1", 1, NULL), ACX_ERR_NULL_ARG);
}

static void test_registry(void) {
  CU_ASSERT_PTR_NOT_NULL(acxi_engine_find("host"));
  CU_ASSERT_PTR_NULL(acxi_engine_find("tpu"));
  CU_ASSERT_PTR_NULL(acxi_engine_find(NULL));
  CU_ASSERT_PTR_NULL(acxi_ext_find(ACXI_OP_EXT_BASE + 0xfffff));
  int before = acxi_ext_count();
  static const acxi_ext_ops_t bad = {.name = "bad", .op_first = 5, .op_last = 6}; /* below EXT_BASE */
  acxi_ext_register(&bad);
  CU_ASSERT_EQUAL(acxi_ext_count(), before);
  CU_ASSERT_PTR_NULL(acxi_ext_at(-1));
  CU_ASSERT_PTR_NULL(acxi_ext_at(before));
}

int main(void) {
  static const acx_test_case_t cases[] = {ACX_TEST(test_commands_and_shutdown), ACX_TEST(test_stop_flag),
                                          ACX_TEST(test_engine_cannot_start), ACX_TEST(test_fault_schedule_poisons),
                                          ACX_TEST(test_fault_schedule_parse), ACX_TEST(test_registry),
                                          ACX_TEST(test_standby_promote), ACX_TEST(test_standby_leave),
                                          ACX_TEST(test_direct_completion),
                                          ACX_TEST(test_heartbeat_thread_beats_while_loop_blocked),
                                          ACX_TEST(test_inflight_nap), ACX_TEST_END};
  return acx_test_run("exec_loop", cases, NULL, NULL);
}
