/* Binding of acx's threads and executor processes (runtime/base/bind.c and its users): cpuset parsing,
 * actor workers and timer bound through acx_system_config_t.cpuset, a device's executor process
 * (active, standby, after kill -9), poller and inline executor thread through
 * acx_device_config_t.cpuset, bad sets refused, old config sizes still accepted, ACX_CPUSET.
 * Masks are read back from the kernel (/proc/.../status, pthread_getaffinity_np).
 * Usage: test_bind api|env|badenv (env: run with ACX_CPUSET=0; badenv: ACX_CPUSET=junk). */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "acx/actor.h"
#include "acx/device.h"
#include "acx_test.h"
#include "runtime/base/bind.h"
#include "runtime/base/clock.h"
#include "runtime/device/device_internal.h"

#define T_LONG 20000000000LL /* 20 s: only reached when something hangs */
#define M_WHERE 1

static int c0 = -1, c1 = -1;     /* the first two CPUs this process may use */
static char s0[16], s1[16];      /* the same as list strings */
static char all[1024];           /* the process's whole mask at start */

/* Cpus_allowed_list of /proc/<path>/status, "" when unreadable. */
static void allowed_of(const char *path, char *out, size_t len) {
  char file[400];
  snprintf(file, sizeof file, "/proc/%s/status", path);
  out[0] = '\0';
  FILE *f = fopen(file, "r");
  if (!f) return;
  char line[2048];
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "Cpus_allowed_list:", 18)) {
      const char *v = line + 18;
      v += strspn(v, " \t");
      size_t n = strcspn(v, "\n");
      if (n >= len) n = len - 1;
      memcpy(out, v, n);
      out[n] = '\0';
    }
  fclose(f);
}

/* Checks that every thread of process pid whose name starts with prefix ("" for all) is allowed
 * exactly `want`; returns how many threads matched. */
static int check_tasks(pid_t pid, const char *prefix, const char *want) {
  char dir[64];
  snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
  DIR *d = opendir(dir);
  CU_ASSERT_PTR_NOT_NULL_FATAL(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    char path[320], comm[64] = "", mask[1024];
    snprintf(path, sizeof path, "%d/task/%s/comm", (int)pid, e->d_name);
    char file[340];
    snprintf(file, sizeof file, "/proc/%s", path);
    FILE *f = fopen(file, "r");
    if (!f) continue; /* the thread left meanwhile */
    if (!fgets(comm, sizeof comm, f)) comm[0] = '\0';
    fclose(f);
    comm[strcspn(comm, "\n")] = '\0';
    if (strncmp(comm, prefix, strlen(prefix))) continue;
    snprintf(path, sizeof path, "%d/task/%s", (int)pid, e->d_name);
    allowed_of(path, mask, sizeof mask);
    if (strcmp(mask, want)) printf("\n    task %s '%s' of pid %d: allowed %s, expected %s", e->d_name, comm, (int)pid, mask, want);
    CU_ASSERT_STRING_EQUAL(mask, want);
    n++;
  }
  closedir(d);
  return n;
}

static int setup(void) {
  cpu_set_t m;
  if (sched_getaffinity(0, sizeof m, &m) != 0) return 1;
  for (int c = 0; c < CPU_SETSIZE && c1 < 0; c++)
    if (CPU_ISSET(c, &m)) {
      if (c0 < 0)
        c0 = c;
      else
        c1 = c;
    }
  if (c1 < 0) acx_test_skip("fewer than 2 CPUs: binding cannot be told from inheritance");
  snprintf(s0, sizeof s0, "%d", c0);
  snprintf(s1, sizeof s1, "%d", c1);
  char self[32];
  snprintf(self, sizeof self, "%d", (int)getpid());
  allowed_of(self, all, sizeof all);
  return all[0] ? 0 : 1;
}

static int teardown(void) { return 0; }

/* ---- cpuset strings */

static void test_parse(void) {
  acxi_cpuset_t cs = ACXI_CPUSET_NONE;
  ACX_ASSERT_STATUS(acxi_cpuset_parse("0-3,8", &cs), ACX_OK);
  CU_ASSERT_PTR_NOT_NULL_FATAL(cs.set);
  CU_ASSERT_STRING_EQUAL(cs.list, "0-3,8");
  CU_ASSERT(CPU_ISSET_S(3, cs.setsize, cs.set) && CPU_ISSET_S(8, cs.setsize, cs.set));
  CU_ASSERT(!CPU_ISSET_S(4, cs.setsize, cs.set));
  CU_ASSERT_EQUAL(CPU_COUNT_S(cs.setsize, cs.set), 5);
  acxi_cpuset_t cp = ACXI_CPUSET_NONE;
  ACX_ASSERT_STATUS(acxi_cpuset_copy(&cp, &cs), ACX_OK);
  CU_ASSERT_STRING_EQUAL(cp.list, "0-3,8");
  CU_ASSERT(CPU_EQUAL_S(cs.setsize, cp.set, cs.set));
  acxi_cpuset_fini(&cp);
  acxi_cpuset_fini(&cs);
  CU_ASSERT_PTR_NULL(cs.set);
  ACX_ASSERT_STATUS(acxi_cpuset_parse("2,0,1", &cs), ACX_OK);
  CU_ASSERT_STRING_EQUAL(cs.list, "0-2"); /* normalised */
  acxi_cpuset_fini(&cs);
  ACX_ASSERT_STATUS(acxi_cpuset_parse(NULL, &cs), ACX_OK);
  CU_ASSERT_PTR_NULL(cs.set);
  CU_ASSERT_STRING_EQUAL(cs.list, "");
  const char *bad[] = {"", "0-", "x", "1-0x", "-3"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    acx_status_t st = acxi_cpuset_parse(bad[i], &cs);
    if (st != ACX_ERR_INVALID_ARG) printf("\n    '%s' parsed as %s", bad[i], cs.list);
    CU_ASSERT_EQUAL(st, ACX_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(cs.set);
  }
}

static void *report_mask(void *arg) {
  char *out = arg;
  acxi_thread_cpuset_str(pthread_self(), out, 64);
  return NULL;
}

static void test_thread_create(void) {
  acxi_cpuset_t cs = ACXI_CPUSET_NONE;
  ACX_ASSERT_STATUS(acxi_cpuset_parse(s1, &cs), ACX_OK);
  pthread_t t;
  char seen[64] = "";
  CU_ASSERT_EQUAL_FATAL(acxi_thread_create(&t, &cs, report_mask, seen), 0);
  pthread_join(t, NULL);
  CU_ASSERT_STRING_EQUAL(seen, s1); /* bound before its first line ran */
  acxi_cpuset_fini(&cs);
  CU_ASSERT_EQUAL_FATAL(acxi_thread_create(&t, NULL, report_mask, seen), 0);
  pthread_join(t, NULL);
  CU_ASSERT_STRING_EQUAL(seen, all); /* unbound: inherits */
  ACX_ASSERT_STATUS(acxi_cpuset_parse("100000", &cs), ACX_OK);
  CU_ASSERT_EQUAL(acxi_thread_create(&t, &cs, report_mask, seen), EINVAL); /* no such CPU */
  acxi_cpuset_fini(&cs);
}

/* ---- actor system */

static acx_status_t where_receive(acx_ctx_t *ctx, void *state, const acx_msg_t *msg) {
  (void)state;
  char mask[64];
  acxi_thread_cpuset_str(pthread_self(), mask, sizeof mask);
  return acx_reply(ctx, msg, ACX_OK, mask, strlen(mask) + 1);
}

/* Asks n actors where they ran, several times each, so that both workers answer. */
static void check_hooks(acx_system_t *sys, const char *want) {
  acx_props_t p = ACX_PROPS_INIT;
  p.receive = where_receive;
  enum { N = 8 };
  acx_ref_t a[N];
  for (int i = 0; i < N; i++) ACX_ASSERT_STATUS(acx_spawn(sys, NULL, &p, NULL, &a[i]), ACX_OK);
  for (int round = 0; round < 4; round++) {
    acx_future_t *f[N];
    for (int i = 0; i < N; i++) ACX_ASSERT_STATUS(acx_ask(a[i], M_WHERE, NULL, 0, &f[i]), ACX_OK);
    for (int i = 0; i < N; i++) {
      char got[64] = "";
      ACX_ASSERT_STATUS(acx_future_wait(f[i], T_LONG, got, sizeof got, NULL), ACX_OK);
      CU_ASSERT_STRING_EQUAL(got, want);
      acx_future_release(f[i]);
    }
  }
  for (int i = 0; i < N; i++) {
    acx_stop(a[i]);
    acx_ref_release(a[i]);
  }
}

static void test_system_bound(void) {
  acx_system_config_t cfg = ACX_SYSTEM_CONFIG_INIT;
  cfg.threads = 2;
  cfg.name = "bndA";
  cfg.cpuset = s0;
  acx_system_t *sys = NULL;
  ACX_ASSERT_STATUS(acx_system_create(&cfg, &sys), ACX_OK);
  CU_ASSERT_EQUAL(check_tasks(getpid(), "bndA-w", s0), 2); /* each worker, exactly {c0} */
  CU_ASSERT_EQUAL(check_tasks(getpid(), "bndA-tmr", s0), 1);
  check_hooks(sys, s0);
  ACX_ASSERT_STATUS(acx_system_destroy(sys, T_LONG), ACX_OK);
  /* the creator is untouched */
  char self[32], mine[1024];
  snprintf(self, sizeof self, "%d", (int)getpid());
  allowed_of(self, mine, sizeof mine);
  CU_ASSERT_STRING_EQUAL(mine, all);
}

static void test_system_unbound_and_old_size(void) {
  acx_system_config_t cfg = ACX_SYSTEM_CONFIG_INIT;
  cfg.name = "bndB";
  acx_system_t *sys = NULL;
  ACX_ASSERT_STATUS(acx_system_create(&cfg, &sys), ACX_OK); /* cpuset NULL, ACX_CPUSET unset */
  CU_ASSERT(check_tasks(getpid(), "bndB-w", all) >= 1);
  ACX_ASSERT_STATUS(acx_system_destroy(sys, T_LONG), ACX_OK);
  /* A caller built before the field existed: its size ends at name, and whatever lies where
   * cpuset is now must not be read. */
  cfg.size = offsetof(acx_system_config_t, name) + sizeof cfg.name;
  cfg.name = "bndC";
  cfg.cpuset = "not a cpuset";
  ACX_ASSERT_STATUS(acx_system_create(&cfg, &sys), ACX_OK);
  CU_ASSERT(check_tasks(getpid(), "bndC-w", all) >= 1);
  ACX_ASSERT_STATUS(acx_system_destroy(sys, T_LONG), ACX_OK);
  cfg.size = offsetof(acx_system_config_t, name); /* shorter than any released struct */
  ACX_ASSERT_STATUS(acx_system_create(&cfg, &sys), ACX_ERR_INVALID_ARG);
  cfg.size = sizeof cfg + 8;
  ACX_ASSERT_STATUS(acx_system_create(&cfg, &sys), ACX_ERR_INVALID_ARG);
}

/* How many threads of process pid have a name starting with prefix. */
static int count_tasks(pid_t pid, const char *prefix) {
  char dir[64];
  snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    char file[340], comm[64] = "";
    snprintf(file, sizeof file, "/proc/%d/task/%s/comm", (int)pid, e->d_name);
    FILE *f = fopen(file, "r");
    if (!f) continue; /* the thread left meanwhile */
    if (!fgets(comm, sizeof comm, f)) comm[0] = '\0';
    fclose(f);
    n += strncmp(comm, prefix, strlen(prefix)) == 0;
  }
  closedir(d);
  return n;
}

static void test_system_bad_cpuset(void) {
  const char *bad[] = {"", "0-", "zero", "100000"}; /* the last parses but names no usable CPU */
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    acx_system_config_t cfg = ACX_SYSTEM_CONFIG_INIT;
    cfg.name = "bndX";
    cfg.cpuset = bad[i];
    acx_system_t *sys = NULL;
    ACX_ASSERT_STATUS(acx_system_create(&cfg, &sys), ACX_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(sys);
  }
  /* Nothing left running. A thread that a failed create has joined can still be listed under
   * /proc for a moment after pthread_join returns (the kernel clears its tid before it releases
   * the task; a stalled machine stretches that moment: seen once in a CI-style run): wait for it
   * to go, with a deadline. */
  int left = 0;
  for (int64_t dl = acxi_deadline(10000000000LL); (left = count_tasks(getpid(), "bndX")) != 0 && acxi_now_ns() < dl;)
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  if (left) printf("\n    %d thread(s) named bndX* still listed 10 s after the failed creates", left);
  CU_ASSERT_EQUAL(left, 0);
}

/* ---- devices */

static acx_system_t *dev_sys; /* workers on c0: the executor is spawned from a worker there */

static acx_device_t *open_dev(acx_transport_t t, const char *cpuset, acx_status_t want) {
  acx_device_config_t cfg = ACX_DEVICE_CONFIG_INIT;
  cfg.kind = ACX_DEVICE_KIND_HOST;
  cfg.transport = t;
  cfg.streams = 2;
  cfg.cpuset = cpuset;
  acx_device_t *dev = NULL;
  ACX_ASSERT_STATUS(acx_device_open(dev_sys, &cfg, &dev), want);
  return dev;
}

static pid_t wait_standby(acx_device_t *dev, pid_t not_this) {
  for (int64_t dl = acxi_deadline(T_LONG); acxi_now_ns() < dl;) {
    pid_t p = atomic_load(&dev->sb_pid);
    acx_device_stats_t st = {.size = sizeof st};
    if (p > 0 && p != not_this && acx_device_stats(dev, &st) == ACX_OK && st.standby_ready) return p;
    usleep(1000);
  }
  return 0;
}

static void check_poller(acx_device_t *dev, const char *want) {
  char mask[64];
  CU_ASSERT_STRING_EQUAL(acxi_thread_cpuset_str(dev->poller, mask, sizeof mask), want);
}

static void test_device_process_bound(void) {
  acx_device_t *dev = open_dev(ACX_TRANSPORT_PROCESS, s1, ACX_OK);
  CU_ASSERT_PTR_NOT_NULL_FATAL(dev);
  pid_t active = atomic_load(&dev->pid);
  CU_ASSERT_FATAL(active > 0);
  CU_ASSERT(check_tasks(active, "", s1) >= 1); /* every thread of the executor, exactly {c1} */
  check_poller(dev, s1);
  ACX_ASSERT_STATUS(acx_device_ping(dev, T_LONG), ACX_OK);
  pid_t sb = wait_standby(dev, 0);
  if (sb > 0) { /* ACX_EXECUTOR_STANDBY=1, the default */
    CU_ASSERT(check_tasks(sb, "", s1) >= 1);
  }
  /* kill -9: the next executor (the promoted standby or a fresh spawn) is bound too */
  CU_ASSERT_EQUAL_FATAL(kill(active, SIGKILL), 0);
  acx_status_t st;
  int64_t t0 = acxi_now_ns();
  do {
    st = acx_device_ping(dev, T_LONG);
  } while (st == ACX_ERR_DEVICE_LOST && acxi_now_ns() - t0 < T_LONG);
  ACX_ASSERT_STATUS(st, ACX_OK);
  uint64_t gen = 0;
  ACX_ASSERT_STATUS(acx_device_generation(dev, &gen), ACX_OK);
  CU_ASSERT_EQUAL(gen, 2);
  pid_t next = atomic_load(&dev->pid);
  CU_ASSERT_FATAL(next > 0 && next != active);
  CU_ASSERT(check_tasks(next, "", s1) >= 1);
  if (sb > 0) {
    pid_t sb2 = wait_standby(dev, sb);
    CU_ASSERT_FATAL(sb2 > 0);
    CU_ASSERT(check_tasks(sb2, "", s1) >= 1);
  }
  ACX_ASSERT_STATUS(acx_device_close(dev, T_LONG), ACX_OK);
}

static void test_device_unbound(void) {
  /* No cpuset: the executor keeps the mask it inherits from the worker that spawned it ({c0}),
   * which shows the bound case above is the device's doing. */
  acx_device_t *dev = open_dev(ACX_TRANSPORT_PROCESS, NULL, ACX_OK);
  CU_ASSERT_PTR_NOT_NULL_FATAL(dev);
  CU_ASSERT(check_tasks(atomic_load(&dev->pid), "", s0) >= 1);
  check_poller(dev, all);
  ACX_ASSERT_STATUS(acx_device_close(dev, T_LONG), ACX_OK);
}

static void test_device_inline_bound(void) {
  acx_device_t *dev = open_dev(ACX_TRANSPORT_INLINE, s1, ACX_OK);
  CU_ASSERT_PTR_NOT_NULL_FATAL(dev);
  char mask[64];
  CU_ASSERT_STRING_EQUAL(acxi_thread_cpuset_str(dev->exec_thread, mask, sizeof mask), s1);
  check_poller(dev, s1);
  ACX_ASSERT_STATUS(acx_device_ping(dev, T_LONG), ACX_OK);
  ACX_ASSERT_STATUS(acx_device_close(dev, T_LONG), ACX_OK);
}

static void test_device_bad_cpuset(void) {
  const char *bad[] = {"", "1-", "cores", "100000"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    CU_ASSERT_PTR_NULL(open_dev(ACX_TRANSPORT_PROCESS, bad[i], ACX_ERR_INVALID_ARG));
    CU_ASSERT_PTR_NULL(open_dev(ACX_TRANSPORT_INLINE, bad[i], ACX_ERR_INVALID_ARG));
  }
  /* An older caller's config ends before cpuset: whatever lies there is not read. */
  acx_device_config_t cfg = ACX_DEVICE_CONFIG_INIT;
  cfg.size = offsetof(acx_device_config_t, cpuset);
  cfg.kind = ACX_DEVICE_KIND_HOST;
  cfg.transport = ACX_TRANSPORT_INLINE;
  cfg.cpuset = "cores";
  acx_device_t *dev = NULL;
  ACX_ASSERT_STATUS(acx_device_open(dev_sys, &cfg, &dev), ACX_OK);
  ACX_ASSERT_STATUS(acx_device_close(dev, T_LONG), ACX_OK);
}

static int setup_devices(void) {
  if (setup()) return 1;
  acx_system_config_t cfg = ACX_SYSTEM_CONFIG_INIT;
  cfg.name = "bndD";
  cfg.cpuset = s0;
  return acx_system_create(&cfg, &dev_sys) == ACX_OK ? 0 : 1;
}

static int teardown_devices(void) { return acx_system_destroy(dev_sys, T_LONG) == ACX_OK ? 0 : 1; }

/* ---- ACX_CPUSET (set by ctest for these modes) */

static void test_env_default(void) {
  /* ACX_CPUSET=<c0>: applies where the config says nothing; a config cpuset wins. */
  acx_system_config_t cfg = ACX_SYSTEM_CONFIG_INIT;
  cfg.name = "bndE";
  acx_system_t *sys = NULL;
  ACX_ASSERT_STATUS(acx_system_create(&cfg, &sys), ACX_OK);
  CU_ASSERT(check_tasks(getpid(), "bndE-w", s0) >= 1);
  dev_sys = sys;
  acx_device_t *dev = open_dev(ACX_TRANSPORT_PROCESS, NULL, ACX_OK);
  CU_ASSERT_PTR_NOT_NULL_FATAL(dev);
  CU_ASSERT(check_tasks(atomic_load(&dev->pid), "", s0) >= 1);
  check_poller(dev, s0);
  ACX_ASSERT_STATUS(acx_device_close(dev, T_LONG), ACX_OK);
  dev = open_dev(ACX_TRANSPORT_PROCESS, s1, ACX_OK);
  CU_ASSERT_PTR_NOT_NULL_FATAL(dev);
  CU_ASSERT(check_tasks(atomic_load(&dev->pid), "", s1) >= 1);
  ACX_ASSERT_STATUS(acx_device_close(dev, T_LONG), ACX_OK);
  ACX_ASSERT_STATUS(acx_system_destroy(sys, T_LONG), ACX_OK);
  cfg.name = "bndF";
  cfg.cpuset = s1;
  ACX_ASSERT_STATUS(acx_system_create(&cfg, &sys), ACX_OK);
  CU_ASSERT(check_tasks(getpid(), "bndF-w", s1) >= 1);
  ACX_ASSERT_STATUS(acx_system_destroy(sys, T_LONG), ACX_OK);
}

static void test_env_bad(void) {
  acx_system_t *sys = NULL;
  ACX_ASSERT_STATUS(acx_system_create(NULL, &sys), ACX_ERR_BAD_PARAM);
  acx_system_config_t cfg = ACX_SYSTEM_CONFIG_INIT;
  cfg.cpuset = s0; /* a config cpuset does not read ACX_CPUSET */
  ACX_ASSERT_STATUS(acx_system_create(&cfg, &sys), ACX_OK);
  dev_sys = sys;
  CU_ASSERT_PTR_NULL(open_dev(ACX_TRANSPORT_PROCESS, NULL, ACX_ERR_BAD_PARAM));
  acx_device_t *dev = open_dev(ACX_TRANSPORT_INLINE, s1, ACX_OK);
  CU_ASSERT_PTR_NOT_NULL(dev);
  if (dev) ACX_ASSERT_STATUS(acx_device_close(dev, T_LONG), ACX_OK);
  ACX_ASSERT_STATUS(acx_system_destroy(sys, T_LONG), ACX_OK);
}

static int env_setup(void) {
  if (setup()) return 1;
  const char *e = getenv("ACX_CPUSET");
  if (!e) return 1; /* ctest sets it: a run by hand without it tests nothing */
  if (strcmp(e, "junk") && strcmp(e, s0)) acx_test_skip("ACX_CPUSET is not this machine's first CPU");
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "api";
  if (!strcmp(mode, "env")) {
    static const acx_test_case_t cases[] = {ACX_TEST(test_env_default), ACX_TEST_END};
    return acx_test_run("bind-env", cases, env_setup, teardown);
  }
  if (!strcmp(mode, "badenv")) {
    static const acx_test_case_t cases[] = {ACX_TEST(test_env_bad), ACX_TEST_END};
    return acx_test_run("bind-badenv", cases, env_setup, teardown);
  }
  if (getenv("ACX_CPUSET")) unsetenv("ACX_CPUSET"); /* before the first parameter read */
  static const acx_test_case_t cases[] = {ACX_TEST(test_parse), ACX_TEST(test_thread_create),
                                          ACX_TEST(test_system_bound), ACX_TEST(test_system_unbound_and_old_size),
                                          ACX_TEST(test_system_bad_cpuset), ACX_TEST_END};
  int rc = acx_test_run("bind-system", cases, setup, teardown);
  static const acx_test_case_t dev_cases[] = {ACX_TEST(test_device_process_bound), ACX_TEST(test_device_unbound),
                                              ACX_TEST(test_device_inline_bound), ACX_TEST(test_device_bad_cpuset),
                                              ACX_TEST_END};
  int rc2 = acx_test_run("bind-device", dev_cases, setup_devices, teardown_devices);
  return rc ? rc : rc2;
}
