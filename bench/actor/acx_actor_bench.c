/* acx-actor-bench <n> <threads> [workload]: the three actor-runtime workloads of the CAF anchor
 * (../shared/anchors/caf_bench.cpp), one line each: <workload> <messages> <seconds> <msgs_per_s>
 * <us_per_op>. pingpong: n round trips (2n messages); fanin: 4 senders x n/4 to one counter;
 * ask: n/10 asks from a thread that is not an actor, each waited for. A third argument runs only
 * the workload it names (for profiling one of them). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acx/actor.h"

enum { M_START = 1, M_INT };
#define DEADLINE_NS (600LL * 1000000000LL)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void check(acx_status_t s, const char *what) {
  if (s != ACX_OK) {
    fprintf(stderr, "acx-actor-bench: %s: %s\n", what, acx_status_str(s));
    exit(1);
  }
}

/* ponger: answers x with x + 1 (to the sender, or to the asker's future) */
static acx_status_t ponger_receive(acx_ctx_t *ctx, void *st, const acx_msg_t *msg) {
  int x;
  memcpy(&x, msg->data, sizeof x);
  x++;
  return acx_reply(ctx, msg, ACX_OK, &x, sizeof x);
}

typedef struct {
  long left;
  acx_ref_t peer;
  acx_future_t *done;
} pinger_t;

static acx_status_t pinger_receive(acx_ctx_t *ctx, void *st, const acx_msg_t *msg) {
  pinger_t *p = st;
  int x = 0;
  if (msg->type == M_START) {
    memcpy(p, msg->data, sizeof *p);
    return acx_tell(p->peer, acx_self(ctx), M_INT, &x, sizeof x);
  }
  memcpy(&x, msg->data, sizeof x);
  if (--p->left == 0) {
    acx_future_complete(p->done, ACX_OK, NULL, 0);
    return acx_stop_self(ctx);
  }
  return acx_tell(p->peer, acx_self(ctx), M_INT, &x, sizeof x);
}

typedef struct {
  long left;
  acx_future_t *done;
} counter_t;

static acx_status_t counter_receive(acx_ctx_t *ctx, void *st, const acx_msg_t *msg) {
  counter_t *c = st;
  if (msg->type == M_START) {
    memcpy(c, msg->data, sizeof *c);
    return ACX_OK;
  }
  if (--c->left == 0) {
    acx_future_complete(c->done, ACX_OK, NULL, 0);
    return acx_stop_self(ctx);
  }
  return ACX_OK;
}

typedef struct {
  long m;
  acx_ref_t sink;
} sender_start_t;

static acx_status_t sender_receive(acx_ctx_t *ctx, void *st, const acx_msg_t *msg) {
  sender_start_t s;
  memcpy(&s, msg->data, sizeof s);
  int one = 1;
  for (long i = 0; i < s.m; i++) {
    acx_status_t r = acx_tell(s.sink, acx_self(ctx), M_INT, &one, sizeof one);
    if (r != ACX_OK) return r;
  }
  return acx_stop_self(ctx);
}

static acx_ref_t spawn(acx_system_t *sys, acx_status_t (*receive)(acx_ctx_t *, void *, const acx_msg_t *),
                       size_t state) {
  acx_props_t p = ACX_PROPS_INIT;
  p.receive = receive;
  p.state_size = state;
  acx_ref_t r = NULL;
  check(acx_spawn(sys, NULL, &p, NULL, &r), "spawn");
  return r;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 1000000;
  int threads = argc > 2 ? atoi(argv[2]) : 2;
  const char *only = argc > 3 ? argv[3] : NULL;
  if (n < 40 || threads < 1 ||
      (only && strcmp(only, "pingpong") && strcmp(only, "fanin") && strcmp(only, "ask"))) {
    fprintf(stderr, "usage: acx-actor-bench <n >= 40> <threads >= 1> [pingpong|fanin|ask]\n");
    return 2;
  }
  acx_system_config_t cfg = ACX_SYSTEM_CONFIG_INIT;
  cfg.threads = threads;
  cfg.name = "bench";
  acx_system_t *sys = NULL;
  check(acx_system_create(&cfg, &sys), "acx_system_create");

  if (!only || !strcmp(only, "pingpong")) { /* pingpong */
    acx_ref_t po = spawn(sys, ponger_receive, 0);
    acx_future_t *done = NULL;
    check(acx_future_create(&done), "future");
    double t0 = now_s();
    acx_ref_t pi = spawn(sys, pinger_receive, sizeof(pinger_t));
    pinger_t start = {n, po, done};
    check(acx_tell(pi, NULL, M_START, &start, sizeof start), "tell");
    check(acx_future_wait(done, DEADLINE_NS, NULL, 0, NULL), "pingpong");
    double t = now_s() - t0;
    printf("pingpong %ld %.3f %.0f %.3f\n", 2 * n, t, 2 * n / t, t / n * 1e6);
    fflush(stdout);
    acx_stop(po);
    acx_ref_release(po);
    acx_ref_release(pi);
    acx_future_release(done);
  }
  if (!only || !strcmp(only, "fanin")) { /* fanin: 4 senders -> 1 counter */
    long m = n / 4;
    acx_future_t *done = NULL;
    check(acx_future_create(&done), "future");
    double t0 = now_s();
    acx_ref_t c = spawn(sys, counter_receive, sizeof(counter_t));
    counter_t cs = {4 * m, done};
    check(acx_tell(c, NULL, M_START, &cs, sizeof cs), "tell");
    for (int i = 0; i < 4; i++) {
      acx_ref_t s = spawn(sys, sender_receive, 0);
      sender_start_t ss = {m, c};
      check(acx_tell(s, NULL, M_START, &ss, sizeof ss), "tell");
      acx_ref_release(s);
    }
    check(acx_future_wait(done, DEADLINE_NS, NULL, 0, NULL), "fanin");
    double t = now_s() - t0;
    printf("fanin %ld %.3f %.0f %.3f\n", 4 * m, t, 4 * m / t, t / (4 * m) * 1e6);
    fflush(stdout);
    acx_ref_release(c);
    acx_future_release(done);
  }
  if (!only || !strcmp(only, "ask")) { /* ask from a thread that is not an actor */
    acx_ref_t po = spawn(sys, ponger_receive, 0);
    long k = n / 10;
    double t0 = now_s();
    for (long i = 0; i < k; i++) {
      acx_future_t *f = NULL;
      int x = (int)i, y = 0;
      check(acx_ask(po, M_INT, &x, sizeof x, &f), "ask");
      check(acx_future_wait(f, DEADLINE_NS, &y, sizeof y, NULL), "ask wait");
      if (y != x + 1) {
        fprintf(stderr, "acx-actor-bench: ask %ld answered %d\n", i, y);
        return 1;
      }
      acx_future_release(f);
    }
    double t = now_s() - t0;
    printf("ask %ld %.3f %.0f %.3f\n", k, t, k / t, t / k * 1e6);
    fflush(stdout);
    acx_stop(po);
    acx_ref_release(po);
  }
  check(acx_system_destroy(sys, 30LL * 1000000000LL), "acx_system_destroy");
  return 0;
}
