/* Stress of the hot standby promotion path (issue 3): many rounds of {standby ready, kill -9 of
 * the active executor, ping until the promoted standby answers, a burst of pings from several
 * threads}, while background threads ping all along. Any ping that times out (rather than
 * succeeding or failing with ACX_ERR_DEVICE_LOST) is a request lost across a promotion. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acx/device.h"
#include "acx_test.h"
#include "runtime/base/clock.h"
#include "runtime/device/device_internal.h"

static acx_system_t *sys;
#define T_LONG 20000000000LL      /* 20 s: only reached when something hangs */
#define T_PING 3000000000LL       /* a ping's deadline: a lost request shows up within it */
#define BUDGET_NS 25000000000LL   /* the whole stress stays well within the ctest timeout */
#define MAX_ROUNDS 1000
#define BURST_THREADS 3
#define BURST_PINGS 20

typedef struct pinger {
  acx_device_t *dev;
  _Atomic int *stop;
  int ok, lost, timeouts, other;
} pinger_t;

static void count(pinger_t *p, acx_status_t st) {
  if (st == ACX_OK)
    p->ok++;
  else if (st == ACX_ERR_DEVICE_LOST)
    p->lost++;
  else if (st == ACX_ERR_TIMEOUT)
    p->timeouts++;
  else
    p->other++;
}

/* Pings until told to stop (background) or BURST_PINGS times (stop NULL). */
static void *pinger_main(void *arg) {
  pinger_t *p = arg;
  for (int i = 0; p->stop ? !atomic_load(p->stop) : i < BURST_PINGS; i++) {
    acx_status_t st = acx_device_ping(p->dev, T_PING);
    count(p, st);
    if (st != ACX_OK) usleep(100); /* a recovering device refuses at once: leave the cores to it */
  }
  return NULL;
}

static pid_t standby_pid(acx_device_t *dev) { return atomic_load(&dev->sb_pid); }

static int standby_ready(acx_device_t *dev) {
  acx_device_stats_t st = {.size = sizeof st};
  return acx_device_stats(dev, &st) == ACX_OK && st.standby_ready;
}

static void test_promotion_stress(void) {
  acx_device_config_t cfg = ACX_DEVICE_CONFIG_INIT;
  cfg.kind = ACX_DEVICE_KIND_HOST;
  cfg.transport = ACX_TRANSPORT_PROCESS;
  cfg.streams = 2;
  cfg.max_restarts = 100000;
  acx_device_t *dev = NULL;
  ACX_ASSERT_STATUS(acx_device_open(sys, &cfg, &dev), ACX_OK);
  _Atomic int stop = 0;
  pinger_t bg[2] = {{.dev = dev, .stop = &stop}, {.dev = dev, .stop = &stop}};
  pthread_t bg_t[2];
  for (int i = 0; i < 2; i++) CU_ASSERT_EQUAL_FATAL(pthread_create(&bg_t[i], NULL, pinger_main, &bg[i]), 0);
  pinger_t burst_total = {0};
  int rounds = 0, main_failures = 0, no_standby = 0;
  int64_t t_start = acxi_now_ns();
  for (; rounds < MAX_ROUNDS && acxi_now_ns() - t_start < BUDGET_NS; rounds++) {
    pid_t sb = 0;
    for (int64_t dl = acxi_deadline(T_LONG); acxi_now_ns() < dl && !sb;) {
      pid_t p = standby_pid(dev);
      if (p > 0 && standby_ready(dev)) sb = p;
      else usleep(200);
    }
    /* No fatal assertion while the background pingers run: they use the device. */
    if (sb <= 0) {
      no_standby++;
      break;
    }
    pid_t victim = atomic_load(&dev->pid);
    if (kill(victim, SIGKILL) != 0) {
      no_standby++;
      break;
    }
    acx_status_t st;
    int64_t t0 = acxi_now_ns();
    do {
      st = acx_device_ping(dev, T_PING);
    } while (st == ACX_ERR_DEVICE_LOST && acxi_now_ns() - t0 < T_LONG);
    if (st != ACX_OK) {
      printf("\n    round %d: the first ping after the kill returned %s\n", rounds, acx_status_name(st));
      main_failures++;
      break;
    }
    pinger_t burst[BURST_THREADS];
    pthread_t bt[BURST_THREADS];
    int made[BURST_THREADS];
    for (int i = 0; i < BURST_THREADS; i++) {
      burst[i] = (pinger_t){.dev = dev};
      made[i] = pthread_create(&bt[i], NULL, pinger_main, &burst[i]) == 0;
      if (!made[i]) pinger_main(&burst[i]); /* no thread: this one pings in its place */
    }
    for (int i = 0; i < BURST_THREADS; i++) {
      if (made[i]) pthread_join(bt[i], NULL);
      burst_total.ok += burst[i].ok;
      burst_total.lost += burst[i].lost;
      burst_total.timeouts += burst[i].timeouts;
      burst_total.other += burst[i].other;
    }
    if (burst_total.timeouts || burst_total.lost || burst_total.other) break;
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < 2; i++) pthread_join(bg_t[i], NULL);
  printf("\n    %d promotions in %.1f s; after each: no standby %d, first ping failed %d; burst pings ok %d lost %d timeout %d "
         "other %d; background pings ok %d lost %d timeout %d other %d\n",
         rounds, (acxi_now_ns() - t_start) / 1e9, no_standby, main_failures, burst_total.ok, burst_total.lost,
         burst_total.timeouts, burst_total.other, bg[0].ok + bg[1].ok, bg[0].lost + bg[1].lost,
         bg[0].timeouts + bg[1].timeouts, bg[0].other + bg[1].other);
  CU_ASSERT(rounds >= 5);
  CU_ASSERT_EQUAL(no_standby, 0);
  CU_ASSERT_EQUAL(main_failures, 0);
  /* After a good ping the promoted executor serves: the burst neither waits nor fails. */
  CU_ASSERT_EQUAL(burst_total.timeouts, 0);
  CU_ASSERT_EQUAL(burst_total.lost, 0);
  CU_ASSERT_EQUAL(burst_total.other, 0);
  /* Pings racing the kills may fail with ACX_ERR_DEVICE_LOST, never hang or fail otherwise. */
  CU_ASSERT_EQUAL(bg[0].timeouts + bg[1].timeouts, 0);
  CU_ASSERT_EQUAL(bg[0].other + bg[1].other, 0);
  acx_device_stats_t s = {.size = sizeof s};
  ACX_ASSERT_STATUS(acx_device_stats(dev, &s), ACX_OK);
  /* Each round was a promotion (the last one may be counted just after its first good ping). */
  CU_ASSERT(s.standby_promotions + 1 >= (uint64_t)rounds);
  ACX_ASSERT_STATUS(acx_device_close(dev, T_LONG), ACX_OK);
}

static int setup(void) { return acx_system_create(NULL, &sys) == ACX_OK ? 0 : 1; }
static int teardown(void) { return acx_system_destroy(sys, T_LONG) == ACX_OK ? 0 : 1; }

int main(void) {
  static const acx_test_case_t cases[] = {ACX_TEST(test_promotion_stress), ACX_TEST_END};
  return acx_test_run("device-standby-stress", cases, setup, teardown);
}
