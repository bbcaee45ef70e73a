/* acx-launch-bench: what acx costs per GPU command. One run prints, side by side, raw CUDA (an
 * empty kernel + cudaStreamSynchronize), acx inline and acx process (an empty-kernel command and
 * its reply), each acx mode with both completion strategies: median and p99 round trip, pipelined
 * commands per second (fire-and-forget launches + one synchronize, as raw CUDA launches + one
 * stream synchronize; and with a future per command), and, in process mode, the time from an injected fault to the first
 * successful command on the new executor. Each measurement runs in a child process of its own
 * (a fresh CUDA context, ACX_COMPLETION read at start, a fault that cannot touch the others). */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "acx/actor.h"
#include "acx/device.h"
#include "acx/status.h"

extern char **environ;
cudaError_t bench_launch_empty(cudaStream_t stream); /* raw_kernel.cu */

#define CHILD_TIMEOUT_NS (300LL * 1000000000LL)
#define CMD_TIMEOUT_NS (10LL * 1000000000LL)
#define RECOVERY_DEADLINE_NS (20LL * 1000000000LL)

/* Goals of issue 3. */
#define GOAL_INLINE_US 2.0
#define GOAL_PROCESS_US 5.0
#define GOAL_PIPELINE_RATIO 0.9
#define GOAL_RECOVERY_MS 500.0

typedef struct opts {
  long iters, warmup, depth, batches, recoveries, device;
  int host_kind; /* --kind host: the acx paths on the host device kind, no raw peer (a CPU smoke run) */
} opts_t;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Sorts v; reports its median and 99th percentile. */
static void percentiles(double *v, size_t n, double *median, double *p99) {
  qsort(v, n, sizeof *v, cmp_double);
  *median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  *p99 = v[(size_t)(0.99 * (double)(n - 1) + 0.5)];
}

/* ---------------------------------------------------------------------------------------------
 * Children: each prints "ACXB <key> <value>" lines on stdout for the parent. */

static int raw_child(const opts_t *o) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    printf("ACXB no_gpu %s\n", err != cudaSuccess ? cudaGetErrorName(err) : "0_devices");
    return 0;
  }
  if (o->device >= n) {
    fprintf(stderr, "--device %ld: only %d CUDA devices\n", o->device, n);
    return 1;
  }
  struct cudaDeviceProp prop;
  cudaStream_t s;
  if (cudaSetDevice((int)o->device) != cudaSuccess || cudaGetDeviceProperties(&prop, (int)o->device) != cudaSuccess ||
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
    fprintf(stderr, "raw: CUDA setup failed: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  for (char *c = prop.name; *c; c++)
    if (*c == ' ') *c = '_';
  printf("ACXB device_name %s\n", prop.name);
  double *lat = malloc((size_t)o->iters * sizeof *lat);
  if (!lat) return 1;
  for (long i = 0; i < o->warmup + o->iters; i++) {
    int64_t t0 = now_ns();
    err = bench_launch_empty(s);
    if (err == cudaSuccess) err = cudaStreamSynchronize(s);
    int64_t t1 = now_ns();
    if (err != cudaSuccess) {
      fprintf(stderr, "raw: launch/synchronize failed: %s\n", cudaGetErrorString(err));
      return 1;
    }
    if (i >= o->warmup) lat[i - o->warmup] = (double)(t1 - t0) / 1e3;
  }
  double med, p99;
  percentiles(lat, (size_t)o->iters, &med, &p99);
  printf("ACXB rt_median_us %.3f\nACXB rt_p99_us %.3f\n", med, p99);
  free(lat);
  int64_t total = 0;
  for (long b = 0; b < o->batches; b++) {
    int64_t t0 = now_ns();
    for (long j = 0; j < o->depth && err == cudaSuccess; j++) err = bench_launch_empty(s);
    if (err == cudaSuccess) err = cudaStreamSynchronize(s);
    total += now_ns() - t0;
    if (err != cudaSuccess) {
      fprintf(stderr, "raw: pipelined launches failed: %s\n", cudaGetErrorString(err));
      return 1;
    }
  }
  printf("ACXB pipe_rate %.1f\n", (double)(o->depth * o->batches) / ((double)total / 1e9));
  cudaStreamDestroy(s);
  return 0;
}

static int acx_child(const opts_t *o, acx_transport_t transport) {
  const char *tname = transport == ACX_TRANSPORT_INLINE ? "inline" : "process";
  acx_system_t *sys = NULL;
  acx_device_t *dev = NULL;
  acx_status_t st = acx_system_create(NULL, &sys);
  if (st != ACX_OK) {
    fprintf(stderr, "%s: acx_system_create: %s\n", tname, acx_status_str(st));
    return 1;
  }
  acx_device_config_t cfg = ACX_DEVICE_CONFIG_INIT;
  cfg.kind = o->host_kind ? ACX_DEVICE_KIND_HOST : ACX_DEVICE_KIND_CUDA;
  cfg.transport = transport;
  cfg.cuda_ordinal = (int)o->device;
  cfg.max_restarts = (int)o->recoveries + 1; /* the recoveries below must not exhaust the limit */
  st = acx_device_open(sys, &cfg, &dev);
  if (st != ACX_OK) {
    fprintf(stderr, "%s: acx_device_open: %s\n", tname, acx_status_str(st));
    acx_system_destroy(sys, CMD_TIMEOUT_NS);
    return st == ACX_ERR_NO_DEVICE ? 77 : 1;
  }
  int rc = 1;
  double *lat = malloc((size_t)o->iters * sizeof *lat);
  acx_future_t **f = malloc((size_t)o->depth * sizeof *f);
  double *rec = malloc((size_t)(o->recoveries > 0 ? o->recoveries : 1) * sizeof *rec);
  if (!lat || !f || !rec) goto out_close;

  for (long i = 0; i < o->warmup + o->iters; i++) {
    int64_t t0 = now_ns();
    st = acx_device_launch_empty(dev, 0, CMD_TIMEOUT_NS);
    int64_t t1 = now_ns();
    if (st != ACX_OK) {
      fprintf(stderr, "%s: acx_device_launch_empty: %s\n", tname, acx_status_str(st));
      goto out_close;
    }
    if (i >= o->warmup) lat[i - o->warmup] = (double)(t1 - t0) / 1e3;
  }
  double med, p99;
  percentiles(lat, (size_t)o->iters, &med, &p99);
  printf("ACXB rt_median_us %.3f\nACXB rt_p99_us %.3f\n", med, p99);

  /* Pipelined as the raw peer does it: `depth` fire-and-forget launches (done NULL: no future,
   * no reply), then acx_device_synchronize (which also reports any of them that failed). */
  int64_t total = 0;
  for (long b = 0; b < o->batches; b++) {
    int64_t t0 = now_ns();
    for (long j = 0; j < o->depth && st == ACX_OK; j++) st = acx_device_launch_empty_async(dev, 0, NULL);
    if (st == ACX_OK) st = acx_device_synchronize(dev, 0, CMD_TIMEOUT_NS);
    total += now_ns() - t0;
    if (st != ACX_OK) {
      fprintf(stderr, "%s: pipelined fire-and-forget launches: %s\n", tname, acx_status_str(st));
      goto out_close;
    }
  }
  printf("ACXB pipe_rate %.1f\n", (double)(o->depth * o->batches) / ((double)total / 1e9));

  /* The same with a future per launch, each waited for. */
  total = 0;
  for (long b = 0; b < o->batches; b++) {
    int64_t t0 = now_ns();
    long sent = 0;
    for (; sent < o->depth; sent++) {
      st = acx_device_launch_empty_async(dev, 0, &f[sent]);
      if (st != ACX_OK) break;
    }
    for (long j = 0; j < sent; j++) {
      acx_status_t w = acx_future_wait(f[j], CMD_TIMEOUT_NS, NULL, 0, NULL);
      if (w != ACX_OK && st == ACX_OK) st = w;
      acx_future_release(f[j]);
    }
    total += now_ns() - t0;
    if (st != ACX_OK) {
      fprintf(stderr, "%s: pipelined launches: %s\n", tname, acx_status_str(st));
      goto out_close;
    }
  }
  printf("ACXB pipe_fut_rate %.1f\n", (double)(o->depth * o->batches) / ((double)total / 1e9));

  /* Recovery: only the process transport restarts (inline, the fault ends GPU use for good). */
  long nrec = 0;
  double reported = 0;
  long promoted = 0;
  for (long k = 0; transport == ACX_TRANSPORT_PROCESS && k < o->recoveries; k++) {
    /* The steady state: a fault finds the device back at full strength, i.e. with its standby
     * executor (ACX_EXECUTOR_STANDBY) initialised, as it is unless faults come back to back. */
    acx_device_stats_t ds = {.size = sizeof ds};
    for (int64_t dl = now_ns() + RECOVERY_DEADLINE_NS; acx_device_stats(dev, &ds) == ACX_OK && ds.standby_spawns > 0 &&
                                                       !ds.standby_ready && now_ns() < dl;)
      usleep(1000);
    int64_t t0 = now_ns();
    st = acx_device_inject_fault(dev, 0, CMD_TIMEOUT_NS);
    if (st != ACX_ERR_DEVICE_LOST) {
      fprintf(stderr, "%s: acx_device_inject_fault returned %s, expected ACX_ERR_DEVICE_LOST\n", tname,
              acx_status_name(st));
      goto out_close;
    }
    int64_t deadline = t0 + RECOVERY_DEADLINE_NS;
    do {
      st = acx_device_launch_empty(dev, 0, CMD_TIMEOUT_NS);
    } while (st != ACX_OK && ACX_IS_RETRYABLE(st) && now_ns() < deadline);
    int64_t t1 = now_ns();
    if (st != ACX_OK) {
      fprintf(stderr, "%s: no successful command after fault %ld: %s\n", tname, k + 1, acx_status_str(st));
      goto out_close;
    }
    rec[nrec++] = (double)(t1 - t0) / 1e6;
    acx_device_stats_t stats = {.size = sizeof stats};
    if (acx_device_stats(dev, &stats) == ACX_OK) {
      reported += (double)stats.last_recovery_ns / 1e6;
      promoted = (long)stats.standby_promotions;
    }
  }
  if (nrec > 0) {
    double rmax = 0;
    for (long k = 0; k < nrec; k++) rmax = rec[k] > rmax ? rec[k] : rmax;
    double rmed, rp99;
    percentiles(rec, (size_t)nrec, &rmed, &rp99);
    printf("ACXB rec_n %ld\nACXB rec_median_ms %.2f\nACXB rec_max_ms %.2f\nACXB rec_reported_ms %.2f\n"
           "ACXB rec_promoted %ld\n", nrec, rmed, rmax, reported / (double)nrec, promoted);
  }
  rc = 0;

out_close:
  free(lat);
  free(f);
  free(rec);
  st = acx_device_close(dev, CMD_TIMEOUT_NS);
  if (st != ACX_OK) fprintf(stderr, "%s: acx_device_close: %s\n", tname, acx_status_str(st));
  acx_system_destroy(sys, CMD_TIMEOUT_NS);
  fflush(stdout);
  return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Parent: runs the children, collects their lines, prints the table. */

typedef struct result {
  const char *mode, *completion;
  int ran, skipped;
  char device_name[160];
  double rt_median, rt_p99, pipe_rate, pipe_fut_rate, rec_median, rec_max, rec_reported;
  long rec_n, rec_promoted;
  int no_gpu;
} result_t;

static void parse_line(result_t *r, char *line) {
  char key[64], val[160];
  if (sscanf(line, "ACXB %63s %159s", key, val) != 2) return;
  if (!strcmp(key, "device_name")) snprintf(r->device_name, sizeof r->device_name, "%s", val);
  else if (!strcmp(key, "no_gpu")) r->no_gpu = 1;
  else if (!strcmp(key, "rt_median_us")) r->rt_median = atof(val);
  else if (!strcmp(key, "rt_p99_us")) r->rt_p99 = atof(val);
  else if (!strcmp(key, "pipe_rate")) r->pipe_rate = atof(val);
  else if (!strcmp(key, "pipe_fut_rate")) r->pipe_fut_rate = atof(val);
  else if (!strcmp(key, "rec_n")) r->rec_n = atol(val);
  else if (!strcmp(key, "rec_promoted")) r->rec_promoted = atol(val);
  else if (!strcmp(key, "rec_median_ms")) r->rec_median = atof(val);
  else if (!strcmp(key, "rec_max_ms")) r->rec_max = atof(val);
  else if (!strcmp(key, "rec_reported_ms")) r->rec_reported = atof(val);
}

static char self_path[4096];
static volatile pid_t current_child; /* read by the SIGALRM handler */

/* Runs `self --child <mode>` with ACX_COMPLETION=<completion>; 0 when it exited 0. */
static int run_child(const opts_t *o, result_t *r) {
  char a_iters[32], a_warm[32], a_depth[32], a_batches[32], a_rec[32], a_dev[32];
  snprintf(a_iters, sizeof a_iters, "%ld", o->iters);
  snprintf(a_warm, sizeof a_warm, "%ld", o->warmup);
  snprintf(a_depth, sizeof a_depth, "%ld", o->depth);
  snprintf(a_batches, sizeof a_batches, "%ld", o->batches);
  snprintf(a_rec, sizeof a_rec, "%ld", o->recoveries);
  snprintf(a_dev, sizeof a_dev, "%ld", o->device);
  char *argv[] = {self_path, "--child", (char *)r->mode, "--iters", a_iters, "--warmup", a_warm, "--depth", a_depth,
                  "--batches", a_batches, "--recoveries", a_rec, "--device", a_dev, "--kind",
                  o->host_kind ? "host" : "cuda", NULL};
  if (r->completion && setenv("ACX_COMPLETION", r->completion, 1) != 0) return -1;
  int pfd[2];
  if (pipe(pfd) != 0) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, pfd[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&fa, pfd[0]);
  pid_t pid;
  int err = posix_spawn(&pid, self_path, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(pfd[1]);
  current_child = err == 0 ? pid : 0;
  if (err != 0) {
    close(pfd[0]);
    fprintf(stderr, "posix_spawn(%s): %s\n", self_path, strerror(err));
    return -1;
  }
  FILE *in = fdopen(pfd[0], "r");
  if (!in) {
    close(pfd[0]);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
  }
  /* The child's deadline: SIGALRM kills it, which closes the pipe and ends the read loop. */
  char line[512];
  alarm((unsigned)(CHILD_TIMEOUT_NS / 1000000000LL));
  while (fgets(line, sizeof line, in)) parse_line(r, line);
  fclose(in);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  alarm(0);
  current_child = 0;
  r->ran = 1;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) r->skipped = 1;
  return WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 77) ? 0 : -1;
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "acx-launch-bench: a measurement passed its deadline; killed\n";
  if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0) { /* nothing more to do in a handler */
  }
  if (current_child > 0) kill(current_child, SIGKILL);
}

/* Without ACX_EXECUTOR_PATH, the executor beside this program (installed: one bindir) or in the
 * build tree (bench/launch/ -> tools/), so that a run from the build directory just works. */
static void default_executor_path(void) {
  const char *set = getenv("ACX_EXECUTOR_PATH");
  if (set && *set) return;
  char dir[sizeof self_path];
  snprintf(dir, sizeof dir, "%s", self_path);
  char *slash = strrchr(dir, '/');
  if (!slash) return;
  *slash = '\0';
  static const char *rel[] = {"acx-executor", "../../tools/acx-executor"};
  for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
    char path[sizeof self_path + 32];
    snprintf(path, sizeof path, "%s/%s", dir, rel[i]);
    if (access(path, X_OK) == 0) {
      setenv("ACX_EXECUTOR_PATH", path, 1);
      return;
    }
  }
}

static const char *verdict(int ok) { return ok ? "PASS" : "MISS"; }

static void print_table(const opts_t *o, const result_t *res, int n) {
  const result_t *raw = &res[0];
  printf("\nacx-launch-bench: %s (device %ld); %ld round trips after %ld warm-up; pipelined %ld x %ld commands\n",
         o->host_kind ? "host device kind (smoke run: no GPU, goals do not apply)"
                      : (raw->device_name[0] ? raw->device_name : "?"),
         o->device, o->iters, o->warmup, o->batches, o->depth);
  printf("%-8s %-7s | %9s %9s %9s %-10s | %12s %7s %-8s | %11s | %s\n", "mode", "compl", "median_us", "p99_us",
         "vs_raw", "goal", "pipelined/s", "x_raw", "goal", "w/future/s", "verdict");
  if (!o->host_kind)
    printf("%-8s %-7s | %9.2f %9.2f %9s %-10s | %12.0f %7s %-8s | %11s |\n", "raw", "-", raw->rt_median, raw->rt_p99,
           "-", "-", raw->pipe_rate, "-", "-", "-");
  for (int i = 1; i < n; i++) {
    const result_t *r = &res[i];
    if (!r->ran || r->skipped || r->rt_median == 0) {
      printf("%-8s %-7s | %s\n", r->mode, r->completion,
             !r->ran ? "not run (--only)" : r->skipped ? "skipped (no device)" : "FAILED (see stderr)");
      continue;
    }
    if (o->host_kind) {
      printf("%-8s %-7s | %9.2f %9.2f %9s %-10s | %12.0f %7s %-8s | %11.0f |\n", r->mode, r->completion, r->rt_median,
             r->rt_p99, "-", "-", r->pipe_rate, "-", "-", r->pipe_fut_rate);
      continue;
    }
    double goal_us = strcmp(r->mode, "inline") == 0 ? GOAL_INLINE_US : GOAL_PROCESS_US;
    double diff = r->rt_median - raw->rt_median;
    double ratio = raw->pipe_rate > 0 ? r->pipe_rate / raw->pipe_rate : 0;
    char g1[16], g2[16];
    snprintf(g1, sizeof g1, "<= +%.0f us", goal_us);
    snprintf(g2, sizeof g2, ">= %.2fx", GOAL_PIPELINE_RATIO);
    printf("%-8s %-7s | %9.2f %9.2f %+9.2f %-10s | %12.0f %7.2f %-8s | %11.0f | latency %s, rate %s\n", r->mode,
           r->completion, r->rt_median, r->rt_p99, diff, g1, r->pipe_rate, ratio, g2, r->pipe_fut_rate,
           verdict(diff <= goal_us),
           verdict(ratio >= GOAL_PIPELINE_RATIO));
  }
  for (int i = 1; i < n; i++) {
    const result_t *r = &res[i];
    if (r->rec_n > 0)
      printf("recovery %-7s %-6s: fault -> first good command: median %.1f ms, max %.1f ms over %ld "
             "(device-reported loss -> ready %.1f ms; %ld through the standby); goal < %.0f ms: %s\n",
             r->mode, r->completion, r->rec_median, r->rec_max, r->rec_n, r->rec_reported, r->rec_promoted,
             GOAL_RECOVERY_MS, verdict(r->rec_max < GOAL_RECOVERY_MS));
  }
  /* Which completion strategy won, per transport: the input for AUTO_COMPLETION (engine_cuda.c). */
  for (int t = 0; t < 2; t++) {
    const char *mode = t ? "process" : "inline";
    const result_t *ev = NULL, *hf = NULL;
    for (int i = 1; i < n; i++) {
      if (strcmp(res[i].mode, mode) || res[i].rt_median == 0) continue;
      if (!strcmp(res[i].completion, "event")) ev = &res[i];
      if (!strcmp(res[i].completion, "hostfn")) hf = &res[i];
    }
    if (ev && hf)
      printf("completion, %s: event %.2f us / %.0f cmd/s, hostfn %.2f us / %.0f cmd/s -> faster: %s\n", mode,
             ev->rt_median, ev->pipe_rate, hf->rt_median, hf->pipe_rate, ev->rt_median <= hf->rt_median ? "event" : "hostfn");
  }
}

static int parse_long(const char *s, long min, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < min) return -1;
  *out = v;
  return 0;
}

static void usage(void) {
  fprintf(stderr,
          "usage: acx-launch-bench [--iters N] [--warmup N] [--depth N] [--batches N] [--recoveries N] [--device N]\n"
          "                        [--only raw|inline|process] [--kind cuda|host]\n"
          "  --iters      round trips measured per mode (default 20000)\n"
          "  --warmup     round trips before measuring (default 2000)\n"
          "  --depth      commands in flight per pipelined batch (default 256; below ACX_RING_SLOTS)\n"
          "  --batches    pipelined batches (default 40)\n"
          "  --recoveries injected faults per process-mode run (default 5)\n"
          "  --device     CUDA device ordinal (default 0)\n"
          "  --kind       host: run the acx paths on the host device kind (no GPU; a smoke run)\n");
}

int main(int argc, char **argv) {
  opts_t o = {.iters = 20000, .warmup = 2000, .depth = 256, .batches = 40, .recoveries = 5, .device = 0};
  const char *child = NULL, *only = NULL;
  for (int i = 1; i < argc; i++) {
    long *dst = NULL;
    long min = 1;
    if (!strcmp(argv[i], "--iters")) dst = &o.iters;
    else if (!strcmp(argv[i], "--warmup")) dst = &o.warmup, min = 0;
    else if (!strcmp(argv[i], "--depth")) dst = &o.depth;
    else if (!strcmp(argv[i], "--batches")) dst = &o.batches;
    else if (!strcmp(argv[i], "--recoveries")) dst = &o.recoveries, min = 0;
    else if (!strcmp(argv[i], "--device")) dst = &o.device, min = 0;
    if (dst) {
      if (i + 1 >= argc || parse_long(argv[i + 1], min, dst) != 0) {
        fprintf(stderr, "acx-launch-bench: %s needs an integer >= %ld\n", argv[i], min);
        usage();
        return 2;
      }
      i++;
    } else if (!strcmp(argv[i], "--kind") && i + 1 < argc) {
      const char *k = argv[++i];
      if (strcmp(k, "cuda") && strcmp(k, "host")) {
        usage();
        return 2;
      }
      o.host_kind = !strcmp(k, "host");
    } else if (!strcmp(argv[i], "--child") && i + 1 < argc) {
      child = argv[++i];
    } else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
      only = argv[++i];
      if (strcmp(only, "raw") && strcmp(only, "inline") && strcmp(only, "process")) {
        usage();
        return 2;
      }
    } else {
      fprintf(stderr, "acx-launch-bench: unknown argument '%s'\n", argv[i]);
      usage();
      return 2;
    }
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (child) {
    if (!strcmp(child, "raw")) return raw_child(&o);
    if (!strcmp(child, "inline")) return acx_child(&o, ACX_TRANSPORT_INLINE);
    if (!strcmp(child, "process")) return acx_child(&o, ACX_TRANSPORT_PROCESS);
    fprintf(stderr, "acx-launch-bench: unknown child '%s'\n", child);
    return 2;
  }

  ssize_t len = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
  if (len <= 0) {
    perror("readlink /proc/self/exe");
    return 1;
  }
  self_path[len] = '\0';
  default_executor_path();
  struct sigaction sa = {.sa_handler = on_alarm};
  sigaction(SIGALRM, &sa, NULL);

  result_t res[] = {
      {.mode = "raw"},
      {.mode = "inline", .completion = "event"},
      {.mode = "inline", .completion = "hostfn"},
      {.mode = "process", .completion = "event"},
      {.mode = "process", .completion = "hostfn"},
  };
  int n = (int)(sizeof res / sizeof res[0]);
  int failed = 0;
  if (o.host_kind) {
    res[0].ran = 1;
  } else if (run_child(&o, &res[0]) != 0 || res[0].rt_median == 0) {
    if (res[0].no_gpu) {
      printf("acx-launch-bench: no CUDA device visible: nothing to measure\n");
      return 77;
    }
    fprintf(stderr, "acx-launch-bench: the raw CUDA measurement failed\n");
    return 1;
  }
  for (int i = 1; i < n; i++) {
    if (only && strcmp(only, res[i].mode)) continue;
    fprintf(stderr, "acx-launch-bench: measuring %s, completion %s ...\n", res[i].mode, res[i].completion);
    if (run_child(&o, &res[i]) != 0) failed = 1;
  }
  print_table(&o, res, n);
  return failed;
}
