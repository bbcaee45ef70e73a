/* NCCL-style logging: level and subsystem filters from the environment, one line per call,
 * prefixed with host, pid, thread and rank, written whole with one write(2). */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "runtime/base/log.h"
#include "runtime/base/param.h"

int acxi_log_level_cached = -1;
static unsigned log_subsys = ACXI_SUB_ALL;
static FILE *log_file;
static char log_host[64];
static _Atomic int log_rank = -1;
static pthread_mutex_t log_init_lock = PTHREAD_MUTEX_INITIALIZER;

static const struct {
  const char *name;
  unsigned bit;
} subsys_names[] = {{"INIT", ACXI_SUB_INIT},     {"ACTOR", ACXI_SUB_ACTOR}, {"SCHED", ACXI_SUB_SCHED},
                    {"DEVICE", ACXI_SUB_DEVICE}, {"EXEC", ACXI_SUB_EXEC},   {"BUFFER", ACXI_SUB_BUFFER},
                    {"COLL", ACXI_SUB_COLL},     {"TOPO", ACXI_SUB_TOPO},   {"TOKEN", ACXI_SUB_TOKEN},
                    {"LIB", ACXI_SUB_LIB},       {"ALL", ACXI_SUB_ALL}};

static unsigned parse_subsys(const char *s) {
  int invert = s[0] == '^';
  if (invert) s++;
  unsigned mask = 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", s);
  for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
    for (size_t i = 0; i < sizeof subsys_names / sizeof subsys_names[0]; i++)
      if (strcasecmp(tok, subsys_names[i].name) == 0) mask |= subsys_names[i].bit;
  return invert ? ~mask : (mask ? mask : ACXI_SUB_ALL);
}

static int parse_level(const char *s) {
  if (strcasecmp(s, "NONE") == 0) return ACX_LOG_NONE;
  if (strcasecmp(s, "VERSION") == 0) return ACX_LOG_VERSION;
  if (strcasecmp(s, "INFO") == 0) return ACX_LOG_INFO;
  if (strcasecmp(s, "TRACE") == 0) return ACX_LOG_TRACE;
  return ACX_LOG_WARN;
}

static void open_file(const char *pattern) {
  if (log_file && log_file != stderr) fclose(log_file);
  log_file = stderr;
  if (!pattern || !*pattern) return;
  char path[512];
  size_t o = 0;
  for (const char *p = pattern; *p && o + 64 < sizeof path; p++) {
    if (p[0] == '%' && p[1] == 'h') {
      o += (size_t)snprintf(path + o, sizeof path - o, "%s", log_host);
      p++;
    } else if (p[0] == '%' && p[1] == 'p') {
      o += (size_t)snprintf(path + o, sizeof path - o, "%d", (int)getpid());
      p++;
    } else {
      path[o++] = *p;
    }
  }
  path[o] = '\0';
  FILE *f = fopen(path, "a");
  if (f) {
    setvbuf(f, NULL, _IOLBF, 0);
    log_file = f;
  } else {
    fprintf(stderr, "acx: cannot open ACX_DEBUG_FILE '%s'; logging to stderr\n", path);
  }
}

static void init_locked(void) {
  gethostname(log_host, sizeof log_host - 1);
  char *dot = strchr(log_host, '.');
  if (dot) *dot = '\0';
  /* Read the environment directly: the registry logs through us, so it must not recurse. */
  const char *lvl = getenv("ACX_DEBUG");
  const char *sub = getenv("ACX_DEBUG_SUBSYS");
  const char *file = getenv("ACX_DEBUG_FILE");
  log_subsys = parse_subsys(sub ? sub : "ALL");
  open_file(file);
  __atomic_store_n(&acxi_log_level_cached, parse_level(lvl ? lvl : "WARN"), __ATOMIC_RELEASE);
}

void acxi_log_init_once(void) {
  pthread_mutex_lock(&log_init_lock);
  if (__atomic_load_n(&acxi_log_level_cached, __ATOMIC_ACQUIRE) < 0) init_locked();
  pthread_mutex_unlock(&log_init_lock);
}

void acx_log_reinit(void) {
  pthread_mutex_lock(&log_init_lock);
  init_locked();
  pthread_mutex_unlock(&log_init_lock);
}

void acx_log_set_rank(int rank) { atomic_store_explicit(&log_rank, rank, memory_order_relaxed); }

int acxi_log_rank(void) { return atomic_load_explicit(&log_rank, memory_order_relaxed); }

int acxi_log_enabled(acx_log_level_t lvl, unsigned subsys) {
  int cur = __atomic_load_n(&acxi_log_level_cached, __ATOMIC_ACQUIRE);
  if (cur < 0) {
    acxi_log_init_once();
    cur = __atomic_load_n(&acxi_log_level_cached, __ATOMIC_ACQUIRE);
  }
  if ((int)lvl > cur) return 0;
  return lvl <= ACX_LOG_WARN || (log_subsys & subsys) != 0;
}

void acxi_log(acx_log_level_t lvl, unsigned subsys, const char *file, int line, const char *fmt, ...) {
  static const char *lvl_names[] = {"NONE", "VERSION", "WARN", "INFO", "TRACE"};
  const char *sub = "ALL";
  for (size_t i = 0; i + 1 < sizeof subsys_names / sizeof subsys_names[0]; i++)
    if (subsys == subsys_names[i].bit) sub = subsys_names[i].name;
  const char *base = strrchr(file, '/');
  base = base ? base + 1 : file;
  char buf[1024];
  int rank = atomic_load_explicit(&log_rank, memory_order_relaxed);
  int n;
  if (rank >= 0)
    n = snprintf(buf, sizeof buf, "%s:%d:%ld [%d] ACX %s %s %s:%d ", log_host, (int)getpid(),
                 (long)syscall(SYS_gettid), rank, lvl_names[lvl], sub, base, line);
  else
    n = snprintf(buf, sizeof buf, "%s:%d:%ld ACX %s %s %s:%d ", log_host, (int)getpid(),
                 (long)syscall(SYS_gettid), lvl_names[lvl], sub, base, line);
  if (n < 0) return;
  if ((size_t)n > sizeof buf - 2) n = (int)sizeof buf - 2;
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
  va_end(ap);
  if (m < 0) m = 0;
  size_t len = (size_t)n + (size_t)m;
  if (len > sizeof buf - 2) len = sizeof buf - 2;
  buf[len++] = '\n';
  FILE *f = log_file ? log_file : stderr;
  fwrite(buf, 1, len, f);
  fflush(f);
}
