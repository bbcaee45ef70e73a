/* Tests of kernels/cuda/engine_cuda.c, driving the engine directly (no executor loop, no rings): the
 * data path byte for byte, cross-stream ordering, managed memory, both completion strategies,
 * bad commands, extensions, and the sticky fault (in a child process: it poisons the process).
 * `--unit` runs only what needs no GPU (registration, parameter checks). */
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "acx_build_config.h"
#include "acx_test.h"
#include "kernels/exec/engine.h"

extern char **environ;

#define SLOTS 8192 /* completions remembered, by req_id modulo SLOTS */
#define WAIT_NS 20000000000LL
#define MIB (1024ull * 1024ull)

/* ------------------------------------------------------------------------------------------ */
/* Completion sink: thread-safe (hostfn callbacks post from a CUDA thread). */

typedef struct sink {
  pthread_mutex_t lock;
  acxi_cpl_t cpl[SLOTS];
  uint64_t got_id[SLOTS]; /* req_id whose completion sits in the slot, 0: none */
  int count[SLOTS];       /* completions seen for that req_id (must be 1) */
  uint64_t total;
} sink_t;

static sink_t sink = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void sink_post(void *s, const acxi_cpl_t *c) {
  sink_t *k = s;
  pthread_mutex_lock(&k->lock);
  size_t i = c->req_id % SLOTS;
  if (k->got_id[i] == c->req_id) {
    k->count[i]++;
  } else {
    k->got_id[i] = c->req_id;
    k->count[i] = 1;
  }
  k->cpl[i] = *c;
  k->total++;
  pthread_mutex_unlock(&k->lock);
}

static int sink_take(uint64_t req, acxi_cpl_t *out, int *count) {
  pthread_mutex_lock(&sink.lock);
  size_t i = req % SLOTS;
  int found = sink.got_id[i] == req;
  if (found) {
    *out = sink.cpl[i];
    *count = sink.count[i];
  }
  pthread_mutex_unlock(&sink.lock);
  return found;
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ------------------------------------------------------------------------------------------ */
/* Engine harness. */

static const acxi_engine_ops_t *ops;
static acxi_engine_t *E;
static const char *mode_name = "event";
static uint64_t next_req = 1;

static acxi_engine_params_t params_for(const char *completion, int streams) {
  acxi_engine_params_t p;
  memset(&p, 0, sizeof p);
  p.cuda_ordinal = 0;
  p.streams = streams;
  p.generation = 1;
  p.inline_mode = 1;
  p.completion = completion;
  p.fault_inject = "";
  return p;
}

static acxi_cmd_t cmd(uint32_t op, uint32_t stream) {
  acxi_cmd_t c;
  memset(&c, 0, sizeof c);
  c.op = op;
  c.stream = stream;
  c.generation = 1;
  return c;
}

static uint64_t submit(acxi_cmd_t *c) {
  c->req_id = next_req++;
  ops->submit(E, c);
  return c->req_id;
}

/* Progresses the engine until req's completion arrives (status -1 on timeout). */
static int repeated; /* completions posted more than once (checked by drain) */

static acxi_cpl_t wait_req(uint64_t req) {
  acxi_cpl_t c = {.req_id = req, .status = -1};
  int count = 0;
  int64_t deadline = now_ns() + WAIT_NS;
  while (now_ns() < deadline) {
    ops->progress(E);
    if (sink_take(req, &c, &count)) {
      if (count != 1) repeated++;
      return c;
    }
  }
  fprintf(stderr, "request %llu: no completion within %lld s\n", (unsigned long long)req, WAIT_NS / 1000000000LL);
  c.status = -1;
  return c;
}

static acxi_cpl_t run(acxi_cmd_t *c) { return wait_req(submit(c)); }
static int run_status(acxi_cmd_t *c) { return run(c).status; }

static void drain(void) {
  int64_t deadline = now_ns() + WAIT_NS;
  while (ops->in_flight(E) > 0 && now_ns() < deadline) ops->progress(E);
  CU_ASSERT_EQUAL(ops->in_flight(E), 0);
  CU_ASSERT_EQUAL(repeated, 0);
}

static uint64_t next_buf = 1000;

static uint64_t alloc_buf(uint64_t bytes, int kind, uint32_t stream) {
  acxi_cmd_t c = cmd(ACXI_OP_ALLOC, stream);
  c.buf[0] = next_buf++;
  c.bytes = bytes;
  c.arg[0] = (uint64_t)kind;
  acxi_cpl_t r = run(&c);
  CU_ASSERT_EQUAL_FATAL(r.status, ACX_OK);
  CU_ASSERT_EQUAL(r.value[0], bytes);
  CU_ASSERT_NOT_EQUAL(r.value[1], 0);
  return c.buf[0];
}

static void free_buf(uint64_t id, uint32_t stream) {
  acxi_cmd_t c = cmd(ACXI_OP_FREE, stream);
  c.buf[0] = id;
  ACX_ASSERT_STATUS(run_status(&c), ACX_OK);
}

/* Host regions: shared anonymous mappings, like the executor's memfd regions. */
typedef struct region {
  uint64_t id;
  unsigned char *p;
  size_t bytes;
} region_t;

static uint64_t next_region = 1;

static region_t region_new(size_t bytes) {
  region_t r = {.id = next_region++, .bytes = bytes};
  r.p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CU_ASSERT_FATAL(r.p != MAP_FAILED);
  ACX_ASSERT_STATUS(ops->host_region_add(E, r.id, r.p, bytes), ACX_OK);
  return r;
}

static void region_free(region_t *r) {
  ACX_ASSERT_STATUS(ops->host_region_remove(E, r->id), ACX_OK);
  munmap(r->p, r->bytes);
}

static uint64_t copy(uint32_t op, uint32_t stream, uint64_t dst, uint64_t doff, uint64_t src, uint64_t soff,
                     uint64_t region, uint64_t bytes) {
  acxi_cmd_t c = cmd(op, stream);
  c.buf[0] = dst;
  c.buf[1] = src;
  c.off[0] = doff;
  c.off[1] = soff;
  c.arg[0] = region;
  c.bytes = bytes;
  return submit(&c);
}

static uint64_t h2d(uint32_t s, uint64_t buf, uint64_t boff, const region_t *r, uint64_t roff, uint64_t n) {
  return copy(ACXI_OP_COPY_H2D, s, buf, boff, 0, roff, r->id, n);
}
static uint64_t d2h(uint32_t s, const region_t *r, uint64_t roff, uint64_t buf, uint64_t boff, uint64_t n) {
  return copy(ACXI_OP_COPY_D2H, s, 0, roff, buf, boff, r->id, n);
}
static uint64_t d2d(uint32_t s, uint64_t dst, uint64_t doff, uint64_t src, uint64_t soff, uint64_t n) {
  return copy(ACXI_OP_COPY_D2D, s, dst, doff, src, soff, 0, n);
}

static uint64_t fill(uint32_t s, uint64_t buf, uint64_t off, uint64_t bytes, uint64_t pattern, int width) {
  acxi_cmd_t c = cmd(ACXI_OP_FILL, s);
  c.buf[0] = buf;
  c.off[0] = off;
  c.bytes = bytes;
  c.arg[0] = pattern;
  c.arg[1] = (uint64_t)width;
  return submit(&c);
}

static int ok(uint64_t req) { return wait_req(req).status == ACX_OK; }

/* Runs body once per completion strategy, each with a fresh 4-stream engine. */
static void each_mode(void (*body)(void)) {
  static const char *modes[] = {"event", "hostfn"};
  for (int m = 0; m < 2; m++) {
    acxi_engine_params_t p = params_for(modes[m], 4);
    ACX_ASSERT_STATUS(ops->create(&p, sink_post, &sink, &E), ACX_OK);
    mode_name = modes[m];
    body();
    drain();
    ops->destroy(E);
    E = NULL;
  }
}

/* ------------------------------------------------------------------------------------------ */
/* Cases. */

static void body_copies(void) {
  const size_t n = 8 * MIB + 3;
  region_t src = region_new(n), dst = region_new(n);
  acx_test_fill_random(src.p, n, 42 + (uint64_t)mode_name[0]);
  memset(dst.p, 0, n);
  uint64_t a = alloc_buf(n, ACXI_MEM_DEVICE, 0), b = alloc_buf(n, ACXI_MEM_DEVICE, 0);
  uint64_t m = alloc_buf(n, ACXI_MEM_MANAGED, 0);
  /* whole: host -> a -> b -> managed -> host */
  CU_ASSERT(ok(h2d(0, a, 0, &src, 0, n)));
  CU_ASSERT(ok(d2d(0, b, 0, a, 0, n)));
  CU_ASSERT(ok(d2d(0, m, 0, b, 0, n)));
  CU_ASSERT(ok(d2h(0, &dst, 0, m, 0, n)));
  CU_ASSERT_EQUAL(memcmp(src.p, dst.p, n), 0);
  /* ranges at odd offsets, each checked against its own source bytes and neighbours untouched */
  memset(dst.p, 0, n);
  const uint64_t off_h = 4097, off_d = 12345, len = 1 * MIB + 77;
  CU_ASSERT(ok(fill(0, a, 0, n - 3, 0, 1)));
  CU_ASSERT(ok(h2d(0, a, off_d, &src, off_h, len)));
  CU_ASSERT(ok(d2h(0, &dst, 999, a, off_d - 5, len + 10)));
  for (int i = 0; i < 5; i++) CU_ASSERT_EQUAL(dst.p[999 + (size_t)i], 0);
  CU_ASSERT_EQUAL(memcmp(dst.p + 999 + 5, src.p + off_h, len), 0);
  for (int i = 0; i < 5; i++) CU_ASSERT_EQUAL(dst.p[999 + 5 + len + (size_t)i], 0);
  CU_ASSERT_EQUAL(dst.p[998], 0);
  /* zero-byte copy at the very end is valid */
  CU_ASSERT(ok(d2h(0, &dst, n, a, n, 0)));
  /* on another stream than the one that allocated */
  CU_ASSERT(ok(d2d(3, b, 7, a, off_d, len)));
  memset(dst.p, 0, n);
  CU_ASSERT(ok(d2h(2, &dst, 0, b, 7, len)));
  CU_ASSERT_EQUAL(memcmp(dst.p, src.p + off_h, len), 0);
  /* overlapping ranges in one buffer behave like memmove, both directions */
  unsigned char *expect = malloc(n);
  CU_ASSERT_FATAL(expect != NULL);
  CU_ASSERT(ok(h2d(1, a, 0, &src, 0, n)));
  memcpy(expect, src.p, n);
  CU_ASSERT(ok(d2d(1, a, 1000, a, 0, 3 * MIB)));
  memmove(expect + 1000, expect, 3 * MIB);
  CU_ASSERT(ok(d2d(2, a, 5 * MIB, a, 5 * MIB + 333, 2 * MIB)));
  memmove(expect + 5 * MIB, expect + 5 * MIB + 333, 2 * MIB);
  CU_ASSERT(ok(d2d(3, a, 64, a, 64, 4096))); /* onto itself */
  memset(dst.p, 0, n);
  CU_ASSERT(ok(d2h(0, &dst, 0, a, 0, n)));
  CU_ASSERT_EQUAL(memcmp(dst.p, expect, n), 0);
  free(expect);
  free_buf(a, 0);
  free_buf(b, 1);
  free_buf(m, 0);
  region_free(&src);
  region_free(&dst);
}
static void test_copies(void) { each_mode(body_copies); }

static void check_pattern(const unsigned char *p, size_t bytes, uint64_t pattern, int width) {
  size_t bad = 0;
  for (size_t i = 0; i < bytes; i++)
    if (p[i] != (unsigned char)(pattern >> (8 * (i % (size_t)width)))) bad++;
  if (bad) fprintf(stderr, "fill width %d pattern %#llx: %zu wrong bytes of %zu\n", width, (unsigned long long)pattern, bad, bytes);
  CU_ASSERT_EQUAL(bad, 0);
}

static void body_fill(void) {
  const size_t n = 4 * MIB;
  region_t h = region_new(n);
  uint64_t a = alloc_buf(n, ACXI_MEM_DEVICE, 1);
  static const struct { int w; uint64_t pat; uint64_t off, len; } cases[] = {
      {1, 0xa5, 3, 1000003},
      {2, 0xbeef, 6, 2 * 500001},
      {4, 0xdeadbeef, 12, 4 * 250007},
      {8, 0x0123456789abcdefull, 8, 8 * 125003},
      {8, 0x0101010101010101ull, 16, 8 * 1000}, /* byte-uniform: the memset path */
      {2, 0x1234, 2, 2},                        /* a single element, head only */
      {1, 0xffab12, 5, 77},                     /* only the low `width` bytes count */
      {2, 0x77665544332211ull, 10, 4096 + 6},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    memset(h.p, 0x5c, n);
    CU_ASSERT(ok(fill(1, a, 0, n, 0, 1)));
    CU_ASSERT(ok(fill(1, a, cases[i].off, cases[i].len, cases[i].pat, cases[i].w)));
    CU_ASSERT(ok(d2h(1, &h, 0, a, 0, n)));
    for (uint64_t j = 0; j < cases[i].off; j++) CU_ASSERT_EQUAL_FATAL(h.p[j], 0);
    check_pattern(h.p + cases[i].off, cases[i].len, cases[i].pat, cases[i].w);
    for (uint64_t j = cases[i].off + cases[i].len; j < n; j++) CU_ASSERT_EQUAL_FATAL(h.p[j], 0);
  }
  free_buf(a, 1);
  region_free(&h);
}
static void test_fill(void) { each_mode(body_fill); }

/* Every step on another stream, nothing waited for in between: only the engine's event waits
 * keep the order. Large buffers so that a missing wait shows (the copy would read old data). */
static void body_cross_stream(void) {
  const size_t n = 64 * MIB;
  region_t h = region_new(n);
  uint64_t x = alloc_buf(n, ACXI_MEM_DEVICE, 0), y = alloc_buf(n, ACXI_MEM_DEVICE, 0);
  for (uint32_t round = 1; round <= 24; round++) {
    uint64_t pat = 0x01000000u * round + 0x00abcdefu;
    uint64_t r1 = fill(1, x, 0, n, pat, 4);      /* write x on 1 */
    uint64_t r2 = d2d(2, y, 0, x, 0, n);         /* read x, write y on 2: waits for 1 */
    uint64_t r3 = d2h(3, &h, 0, y, 0, n);        /* read y on 3: waits for 2 */
    uint64_t r4 = fill(0, y, 0, n, 0, 1);        /* write y on 0: waits for reader 3 (WAR) */
    CU_ASSERT(ok(r1) && ok(r2) && ok(r3) && ok(r4));
    check_pattern(h.p, n, pat, 4);
  }
  /* write-after-read across streams: the D2H on 1 must see the data before the fill on 2 */
  CU_ASSERT(ok(fill(0, x, 0, n, 0x77, 1)));
  uint64_t r1 = d2h(1, &h, 0, x, 0, n);
  uint64_t r2 = fill(2, x, 0, n, 0x11, 1);
  CU_ASSERT(ok(r1) && ok(r2));
  check_pattern(h.p, n, 0x77, 1);
  free_buf(x, 3);
  free_buf(y, 2);
  region_free(&h);
}
static void test_cross_stream(void) { each_mode(body_cross_stream); }

static void body_managed(void) {
  const size_t n = 16 * MIB;
  region_t h = region_new(n);
  uint64_t m = alloc_buf(n, ACXI_MEM_MANAGED, 0);
  static const uint64_t advice[] = {ACXI_ADVISE_READ_MOSTLY, ACXI_ADVISE_UNSET_READ_MOSTLY, ACXI_ADVISE_PREFERRED_DEVICE,
                                    ACXI_ADVISE_ACCESSED_BY_DEVICE, ACXI_ADVISE_PREFERRED_HOST};
  for (size_t i = 0; i < sizeof advice / sizeof advice[0]; i++) {
    acxi_cmd_t c = cmd(ACXI_OP_ADVISE, 0);
    c.buf[0] = m;
    c.bytes = n;
    c.arg[0] = advice[i];
    ACX_ASSERT_STATUS(run_status(&c), ACX_OK);
  }
  acxi_cmd_t pf = cmd(ACXI_OP_PREFETCH, 1);
  pf.buf[0] = m;
  pf.bytes = n;
  pf.arg[0] = 0;
  ACX_ASSERT_STATUS(run_status(&pf), ACX_OK);
  CU_ASSERT(ok(fill(1, m, 0, n, 0x0badcafe, 4)));
  pf.arg[0] = 1;
  pf.off[0] = MIB;
  pf.bytes = 2 * MIB;
  ACX_ASSERT_STATUS(run_status(&pf), ACX_OK);
  CU_ASSERT(ok(d2h(2, &h, 0, m, 0, n)));
  check_pattern(h.p, n, 0x0badcafe, 4);
  /* inline mode: the managed pointer is readable right here once the stream is done */
  acxi_cmd_t bi = cmd(ACXI_OP_BUFFER_INFO, 0);
  bi.buf[0] = m;
  acxi_cpl_t r = run(&bi);
  ACX_ASSERT_STATUS(r.status, ACX_OK);
  CU_ASSERT_EQUAL(r.value[0], n);
  CU_ASSERT_FATAL(r.value[1] != 0);
  acxi_cmd_t sy = cmd(ACXI_OP_SYNC, ACXI_STREAM_ALL);
  ACX_ASSERT_STATUS(run_status(&sy), ACX_OK);
  check_pattern((const unsigned char *)(uintptr_t)r.value[1], n, 0x0badcafe, 4);
  /* wrong kinds and values */
  uint64_t d = alloc_buf(MIB, ACXI_MEM_DEVICE, 0);
  pf.buf[0] = d;
  pf.off[0] = 0;
  pf.bytes = MIB;
  pf.arg[0] = 0;
  ACX_ASSERT_STATUS(run_status(&pf), ACX_ERR_INVALID_ARG); /* not managed */
  pf.buf[0] = m;
  pf.arg[0] = 7;
  ACX_ASSERT_STATUS(run_status(&pf), ACX_ERR_INVALID_ARG); /* no such target */
  acxi_cmd_t ad = cmd(ACXI_OP_ADVISE, 0);
  ad.buf[0] = m;
  ad.bytes = n;
  ad.arg[0] = 99;
  ACX_ASSERT_STATUS(run_status(&ad), ACX_ERR_INVALID_ARG);
  ad.arg[0] = ACXI_ADVISE_READ_MOSTLY;
  ad.off[0] = n;
  ad.bytes = 1;
  ACX_ASSERT_STATUS(run_status(&ad), ACX_ERR_OUT_OF_RANGE);
  /* more managed memory than the device has free is refused before asking CUDA */
  acxi_cmd_t mi = cmd(ACXI_OP_MEM_INFO, 0);
  acxi_cpl_t info = run(&mi);
  ACX_ASSERT_STATUS(info.status, ACX_OK);
  acxi_cmd_t big = cmd(ACXI_OP_ALLOC, 0);
  big.buf[0] = next_buf++;
  big.bytes = info.value[0] + 64 * MIB;
  big.arg[0] = ACXI_MEM_MANAGED;
  ACX_ASSERT_STATUS(run_status(&big), ACX_ERR_DEVICE_OOM);
  free_buf(d, 0);
  free_buf(m, 3); /* managed: freed once stream 3 got there */
  region_free(&h);
}
static void test_managed(void) { each_mode(body_managed); }

static void body_mem_info(void) {
  acxi_cmd_t mi = cmd(ACXI_OP_MEM_INFO, 0);
  acxi_cpl_t a = run(&mi);
  ACX_ASSERT_STATUS(a.status, ACX_OK);
  CU_ASSERT(a.value[1] > 0);
  CU_ASSERT(a.value[0] <= a.value[1]);
  /* Larger than anything the earlier tests left in the pool (its release threshold keeps freed
   * memory reserved), so the pool must grow and the free count must drop. */
  uint64_t big = alloc_buf(8192 * MIB, ACXI_MEM_DEVICE, 0);
  acxi_cmd_t sy = cmd(ACXI_OP_SYNC, 0);
  ACX_ASSERT_STATUS(run_status(&sy), ACX_OK);
  acxi_cpl_t b = run(&mi);
  ACX_ASSERT_STATUS(b.status, ACX_OK);
  CU_ASSERT_EQUAL(b.value[1], a.value[1]);
  /* The pool may serve the allocation from memory it reserved earlier (its release threshold
   * keeps freed memory, and a refused over-sized request can leave it reserved), so the free count
   * need not drop; it must not rise while the allocation lives. */
  CU_ASSERT(b.value[0] <= a.value[0]);
  free_buf(big, 0);
}
static void test_mem_info(void) { each_mode(body_mem_info); }

static void body_bad_commands(void) {
  region_t h = region_new(MIB);
  uint64_t a = alloc_buf(MIB, ACXI_MEM_DEVICE, 0);
  acxi_cmd_t c;

  c = cmd(ACXI_OP_FILL, 0); /* unknown buffer */
  c.buf[0] = 987654321;
  c.bytes = 8;
  c.arg[1] = 1;
  ACX_ASSERT_STATUS(run_status(&c), ACX_ERR_UNKNOWN_BUFFER);
  c = cmd(ACXI_OP_FILL, 0); /* id 0 */
  c.arg[1] = 1;
  ACX_ASSERT_STATUS(run_status(&c), ACX_ERR_UNKNOWN_BUFFER);
  ACX_ASSERT_STATUS(wait_req(fill(0, a, MIB - 4, 8, 0, 1)).status, ACX_ERR_OUT_OF_RANGE);
  ACX_ASSERT_STATUS(wait_req(fill(0, a, MIB + 8, 0, 0, 1)).status, ACX_ERR_OUT_OF_RANGE);
  ACX_ASSERT_STATUS(wait_req(fill(0, a, UINT64_MAX - 7, 16, 0, 1)).status, ACX_ERR_OVERFLOW);
  ACX_ASSERT_STATUS(wait_req(fill(0, a, 0, 8, 0, 3)).status, ACX_ERR_INVALID_ARG);      /* width */
  ACX_ASSERT_STATUS(wait_req(fill(0, a, 2, 8, 0, 4)).status, ACX_ERR_INVALID_ARG);      /* misaligned */
  ACX_ASSERT_STATUS(wait_req(fill(4, a, 0, 8, 0, 1)).status, ACX_ERR_INVALID_ARG);      /* stream */
  ACX_ASSERT_STATUS(wait_req(h2d(0, a, 0, &h, 1, MIB)).status, ACX_ERR_OUT_OF_RANGE);   /* region range */
  ACX_ASSERT_STATUS(wait_req(h2d(0, a, UINT64_MAX, &h, 0, 2)).status, ACX_ERR_OVERFLOW);
  ACX_ASSERT_STATUS(wait_req(d2h(0, &h, 0, a, 1, MIB)).status, ACX_ERR_OUT_OF_RANGE);
  ACX_ASSERT_STATUS(wait_req(d2d(0, a, 0, 55555, 0, 64)).status, ACX_ERR_UNKNOWN_BUFFER);
  region_t fake = {.id = 4242, .p = h.p, .bytes = MIB}; /* never added */
  ACX_ASSERT_STATUS(wait_req(d2h(0, &fake, 0, a, 0, 8)).status, ACX_ERR_INVALID_ARG);
  c = cmd(ACXI_OP_ALLOC, 0); /* duplicate id */
  c.buf[0] = a;
  c.bytes = 64;
  ACX_ASSERT_STATUS(run_status(&c), ACX_ERR_INVALID_ARG);
  c.buf[0] = next_buf++; /* zero bytes */
  c.bytes = 0;
  ACX_ASSERT_STATUS(run_status(&c), ACX_ERR_INVALID_ARG);
  c.bytes = 64; /* unknown memory kind */
  c.arg[0] = 9;
  ACX_ASSERT_STATUS(run_status(&c), ACX_ERR_INVALID_ARG);
  acxi_cmd_t mi = cmd(ACXI_OP_MEM_INFO, 0);
  acxi_cpl_t info = run(&mi);
  ACX_ASSERT_STATUS(info.status, ACX_OK);
  c.arg[0] = ACXI_MEM_DEVICE; /* twice what the GPU has: CUDA says out of memory */
  c.bytes = 2 * info.value[1];
  acxi_cpl_t oom = run(&c);
  ACX_ASSERT_STATUS(oom.status, ACX_ERR_DEVICE_OOM);
  CU_ASSERT_EQUAL(oom.lib_code, 2); /* cudaErrorMemoryAllocation */
  c = cmd(ACXI_OP_FREE, 0); /* that id was not created */
  c.buf[0] = next_buf - 1;
  ACX_ASSERT_STATUS(run_status(&c), ACX_ERR_UNKNOWN_BUFFER);
  c = cmd(99, 0);
  ACX_ASSERT_STATUS(run_status(&c), ACX_ERR_INVALID_ARG);
  c = cmd(ACXI_OP_EXT_BASE + 0x3ff0, 0); /* no extension there */
  ACX_ASSERT_STATUS(run_status(&c), ACX_ERR_NOT_SUPPORTED);
  c = cmd(ACXI_OP_STREAM_WAIT, 1); /* never recorded */
  c.arg[0] = 31337;
  ACX_ASSERT_STATUS(run_status(&c), ACX_ERR_INVALID_ARG);
  c = cmd(ACXI_OP_SYNC, 17);
  ACX_ASSERT_STATUS(run_status(&c), ACX_ERR_INVALID_ARG);
  c = cmd(ACXI_OP_BUFFER_INFO, 0);
  c.buf[0] = 1;
  ACX_ASSERT_STATUS(run_status(&c), ACX_ERR_UNKNOWN_BUFFER);
  /* the host-region entry points check their arguments too */
  ACX_ASSERT_STATUS(ops->host_region_add(E, h.id, h.p, MIB), ACX_ERR_INVALID_ARG); /* twice */
  ACX_ASSERT_STATUS(ops->host_region_add(E, 77, NULL, MIB), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(ops->host_region_add(E, 0, h.p, MIB), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(ops->host_region_remove(E, 4243), ACX_ERR_INVALID_ARG);
  /* and after all that the engine still works */
  CU_ASSERT(ok(fill(0, a, 0, MIB, 0x3c, 1)));
  CU_ASSERT(ok(d2h(0, &h, 0, a, 0, MIB)));
  check_pattern(h.p, MIB, 0x3c, 1);
  CU_ASSERT_EQUAL(ops->poisoned(E), 0);
  free_buf(a, 0);
  region_free(&h);
}
static void test_bad_commands(void) { each_mode(body_bad_commands); }

static void body_events_sync(void) {
  const size_t n = 32 * MIB;
  region_t h = region_new(n);
  uint64_t a = alloc_buf(n, ACXI_MEM_DEVICE, 0);
  uint64_t r1 = fill(1, a, 0, n, 0x42, 1);
  acxi_cmd_t ev = cmd(ACXI_OP_EVENT_RECORD, 1);
  ev.arg[0] = 5;
  uint64_t r2 = submit(&ev);
  acxi_cmd_t wt = cmd(ACXI_OP_STREAM_WAIT, 2);
  wt.arg[0] = 5;
  uint64_t r3 = submit(&wt);
  acxi_cmd_t sy = cmd(ACXI_OP_SYNC, ACXI_STREAM_ALL);
  uint64_t r4 = submit(&sy);
  CU_ASSERT(ok(r2) && ok(r3) && ok(r4));
  /* SYNC ALL completed, so the fill has too: its completion is already on its way */
  CU_ASSERT(ok(r1));
  CU_ASSERT(ok(d2h(2, &h, 0, a, 0, n)));
  check_pattern(h.p, n, 0x42, 1);
  /* NO_REPLY: no completion when it succeeds, one when it fails */
  acxi_cmd_t k = cmd(ACXI_OP_KERNEL_EMPTY, 3);
  k.flags = ACXI_CMD_FLAG_NO_REPLY;
  uint64_t silent = submit(&k);
  acxi_cmd_t bad = cmd(ACXI_OP_FILL, 3);
  bad.flags = ACXI_CMD_FLAG_NO_REPLY;
  bad.buf[0] = 123456;
  bad.arg[1] = 1;
  uint64_t loud = submit(&bad);
  sy = cmd(ACXI_OP_SYNC, 3);
  CU_ASSERT(ok(submit(&sy)));
  drain();
  acxi_cpl_t got;
  int count;
  CU_ASSERT_FALSE(sink_take(silent, &got, &count));
  CU_ASSERT_TRUE(sink_take(loud, &got, &count) && got.status == ACX_ERR_UNKNOWN_BUFFER);
  /* SHUTDOWN completes once everything queued is done (the loop then leaves) */
  uint64_t r5 = fill(2, a, 0, n, 0x43, 1);
  acxi_cmd_t sd = cmd(ACXI_OP_SHUTDOWN, 0);
  CU_ASSERT(ok(submit(&sd)));
  CU_ASSERT(ok(r5));
  free_buf(a, 0);
  region_free(&h);
}
static void test_events_sync(void) { each_mode(body_events_sync); }

static void body_pipelined(void) {
  enum { N = 2000 };
  uint64_t first = next_req;
  for (int i = 0; i < N; i++) {
    acxi_cmd_t k = cmd(ACXI_OP_KERNEL_EMPTY, (uint32_t)(i % 4));
    submit(&k);
  }
  /* event mode posts only from progress(), which has not run yet */
  if (strcmp(mode_name, "event") == 0) CU_ASSERT_EQUAL(ops->in_flight(E), N);
  drain();
  int missing = 0;
  for (uint64_t r = first; r < first + N; r++) {
    acxi_cpl_t c;
    int count;
    if (!sink_take(r, &c, &count) || count != 1 || c.status != ACX_OK) missing++;
  }
  CU_ASSERT_EQUAL(missing, 0);
}
static void test_pipelined(void) { each_mode(body_pipelined); }

/* An extension using the engine API the way library handlers will. */
#define EXT_OP ACXI_OP_TEST_FIRST /* above every product range (runtime/proto/limits.h) */
#define TEST_EXT_SLOT ACXI_EXT_SLOT_TEST
static int ext_destroyed;

static void ext_submit(acxi_engine_t *e, const acxi_engine_api_t *api, const acxi_cmd_t *c) {
  void *ptr = NULL;
  uint64_t bytes = 0;
  acx_status_t st = api->buffer(e, c->buf[0], &ptr, &bytes);
  void **state = api->ext_state(e, TEST_EXT_SLOT);
  if (st != ACX_OK || !state || !api->stream(e, c->stream) || api->stream(e, 1000) != NULL ||
      api->ext_state(e, ACXI_EXT_MAX) != NULL || strcmp(api->params(e)->completion, mode_name) != 0) {
    acxi_cpl_t r = {.req_id = c->req_id, .status = st != ACX_OK ? st : ACX_ERR_INVALID_STATE};
    api->complete(e, &r);
    return;
  }
  *state = (void *)(uintptr_t)(1 + (uintptr_t)*state); /* counts calls per engine */
  api->order_access(e, c->buf[0], c->stream, 1);
  api->complete_after(e, c->stream, c);
}

static void ext_destroy(acxi_engine_t *e, const acxi_engine_api_t *api) {
  void **state = api->ext_state(e, TEST_EXT_SLOT);
  if (state && *state) ext_destroyed++;
}

static const acxi_ext_ops_t test_ext = {
    .name = "test", .op_first = EXT_OP, .op_last = EXT_OP, .slot = TEST_EXT_SLOT, .submit = ext_submit,
    .engine_destroy = ext_destroy};

static void body_extension(void) {
  uint64_t a = alloc_buf(MIB, ACXI_MEM_DEVICE, 0);
  acxi_cmd_t c = cmd(EXT_OP, 2);
  c.buf[0] = a;
  ACX_ASSERT_STATUS(run_status(&c), ACX_OK);
  ACX_ASSERT_STATUS(run_status(&c), ACX_OK);
  c.buf[0] = 8888;
  ACX_ASSERT_STATUS(run_status(&c), ACX_ERR_UNKNOWN_BUFFER);
  /* the extension recorded stream 2 as last writer: a read on 3 still works and sees order */
  region_t h = region_new(MIB);
  CU_ASSERT(ok(fill(2, a, 0, MIB, 0x99, 1)));
  c.buf[0] = a;
  ACX_ASSERT_STATUS(run_status(&c), ACX_OK);
  CU_ASSERT(ok(d2h(3, &h, 0, a, 0, MIB)));
  check_pattern(h.p, MIB, 0x99, 1);
  free_buf(a, 0);
  region_free(&h);
}
static void test_extension(void) {
  acxi_ext_register(&test_ext);
  CU_ASSERT_PTR_EQUAL(acxi_ext_find(EXT_OP), &test_ext);
  ext_destroyed = 0;
  each_mode(body_extension);
  CU_ASSERT_EQUAL(ext_destroyed, 2); /* engine_destroy ran once per engine, state intact */
}

/* The fault poisons this process's context for good, so it runs in a child: the test binary
 * itself, started with --fault-child <mode>. */
static int fault_child(const char *mode) {
  ops = acxi_engine_find("cuda");
  acxi_engine_params_t p = params_for(mode, 2);
  /* event: as the executor process would run it; hostfn: as the inline thread would */
  p.inline_mode = strcmp(mode, "hostfn") == 0;
  const int lost = p.inline_mode ? ACX_ERR_DEVICE_FATAL : ACX_ERR_DEVICE_LOST;
  if (!ops || ops->create(&p, sink_post, &sink, &E) != ACX_OK) return 2;
  uint64_t a;
  {
    acxi_cmd_t c = cmd(ACXI_OP_ALLOC, 0);
    c.buf[0] = 1;
    c.bytes = MIB;
    a = c.buf[0];
    if (wait_req(submit(&c)).status != ACX_OK || repeated) return 3;
  }
  acxi_cmd_t f = cmd(ACXI_OP_FAULT, 1);
  uint64_t rf = submit(&f);
  uint64_t behind[8];
  for (int i = 0; i < 8; i++) {
    acxi_cmd_t k = cmd(ACXI_OP_KERNEL_EMPTY, 1); /* queued behind the fault */
    behind[i] = submit(&k);
  }
  int64_t deadline = now_ns() + WAIT_NS;
  while (!ops->poisoned(E) && now_ns() < deadline) ops->progress(E);
  if (!ops->poisoned(E)) {
    fprintf(stderr, "fault child (%s): engine not poisoned after the fault kernel\n", mode);
    return 4;
  }
  if (ops->in_flight(E) != 0) return 5;
  acxi_cpl_t c;
  int count;
  if (!sink_take(rf, &c, &count) || count != 1 || c.status != lost) {
    fprintf(stderr, "fault child (%s): the fault command did not complete once with %s\n", mode,
            acx_status_name((acx_status_t)lost));
    return 6;
  }
  for (int i = 0; i < 8; i++)
    if (!sink_take(behind[i], &c, &count) || count != 1 || c.status != lost) return 7;
  /* later commands fail at once, none hangs */
  uint64_t rl = fill(0, a, 0, 64, 0, 1);
  if (!sink_take(rl, &c, &count) || c.status != lost) return 8;
  ops->destroy(E);
  printf("fault child (%s): poisoned, every command %s (lib_code %d)\n", mode, acx_status_name((acx_status_t)lost),
         c.lib_code);
  return 0;
}

static char self_path[4096];

static void test_fault_poisons(void) {
  static const char *modes[] = {"event", "hostfn"};
  for (int m = 0; m < 2; m++) {
    char *argv[] = {self_path, "--fault-child", (char *)modes[m], NULL};
    pid_t pid;
    CU_ASSERT_EQUAL_FATAL(posix_spawn(&pid, self_path, NULL, NULL, argv, environ), 0);
    int status = 0, done = 0;
    int64_t deadline = now_ns() + 60000000000LL;
    while (now_ns() < deadline && !(done = waitpid(pid, &status, WNOHANG) == pid)) usleep(10000);
    if (!done) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      fprintf(stderr, "fault child (%s) hung\n", modes[m]);
    }
    CU_ASSERT(done && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (done && WIFEXITED(status) && WEXITSTATUS(status) != 0)
      fprintf(stderr, "fault child (%s) exited %d\n", modes[m], WEXITSTATUS(status));
  }
}

/* ------------------------------------------------------------------------------------------ */
/* Needs no GPU: the engine is registered and checks its parameters before touching CUDA. */

static void test_registered(void) {
  const acxi_engine_ops_t *o = acxi_engine_find("cuda");
  CU_ASSERT_PTR_NOT_NULL_FATAL(o);
  CU_ASSERT_STRING_EQUAL(o->kind, "cuda");
  CU_ASSERT_PTR_NOT_NULL(o->submit);
  CU_ASSERT_PTR_NOT_NULL(o->progress);
  CU_ASSERT_PTR_NOT_NULL(o->poisoned);
  static char not_null;
  acxi_engine_t *e = (acxi_engine_t *)&not_null; /* create must reset it on failure */
  acxi_engine_params_t p = params_for("event", 0);
  ACX_ASSERT_STATUS(o->create(&p, sink_post, &sink, &e), ACX_ERR_INVALID_ARG);
  CU_ASSERT_PTR_NULL(e);
  p.streams = ACXI_MAX_STREAMS + 1;
  ACX_ASSERT_STATUS(o->create(&p, sink_post, &sink, &e), ACX_ERR_INVALID_ARG);
  p = params_for("sometimes", 2);
  ACX_ASSERT_STATUS(o->create(&p, sink_post, &sink, &e), ACX_ERR_BAD_PARAM);
  ACX_ASSERT_STATUS(o->create(NULL, sink_post, &sink, &e), ACX_ERR_NULL_ARG);
  p = params_for("auto", 2);
  ACX_ASSERT_STATUS(o->create(&p, NULL, &sink, &e), ACX_ERR_NULL_ARG);
  /* a bus id no machine has */
  snprintf(p.pci_bus_id, sizeof p.pci_bus_id, "00ff:ee:1f.7");
  ACX_ASSERT_STATUS(o->create(&p, sink_post, &sink, &e), ACX_ERR_NO_DEVICE);
  p = params_for("auto", 2);
  p.cuda_ordinal = 4096;
  ACX_ASSERT_STATUS(o->create(&p, sink_post, &sink, &e), ACX_ERR_NO_DEVICE);
  /* a real device where there is one */
  p.cuda_ordinal = 0;
  acx_status_t st = o->create(&p, sink_post, &sink, &e);
  CU_ASSERT(st == ACX_OK || st == ACX_ERR_NO_DEVICE);
  if (st == ACX_OK) o->destroy(e);
  else CU_ASSERT_PTR_NULL(e);
}

int main(int argc, char **argv) {
#if !ACX_HAVE_CUDA
  acx_test_skip("this build has no CUDA device kind");
#else
  ssize_t len = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
  if (len <= 0) return 1;
  self_path[len] = '\0';
  if (argc == 3 && strcmp(argv[1], "--fault-child") == 0) return fault_child(argv[2]);
  if (argc == 2 && strcmp(argv[1], "--unit") == 0) {
    static const acx_test_case_t unit[] = {ACX_TEST(test_registered), ACX_TEST_END};
    return acx_test_run("engine_cuda_unit", unit, NULL, NULL);
  }
  /* --no-fault (or ACX_MEMCHECK=1): everything but the fault child, for runs under
   * compute-sanitizer, which would report the injected illegal address as the error it is. */
  int no_fault = argc == 2 && strcmp(argv[1], "--no-fault") == 0;
  const char *memcheck = getenv("ACX_MEMCHECK"); /* set by scripts/gpu-host/run.sh memcheck */
  if (argc > 1 && !no_fault) {
    fprintf(stderr, "usage: %s [--unit | --no-fault | --fault-child event|hostfn]\n", argv[0]);
    return 2;
  }
  if (memcheck && strcmp(memcheck, "1") == 0) no_fault = 1;
  ops = acxi_engine_find("cuda");
  if (!ops) return 1;
  acxi_engine_params_t p = params_for("event", 1);
  acx_status_t st = ops->create(&p, sink_post, &sink, &E);
  if (st == ACX_ERR_NO_DEVICE) acx_test_skip("no CUDA device visible");
  if (st != ACX_OK) return 1;
  ops->destroy(E);
  E = NULL;
  static const acx_test_case_t cases[] = {
      ACX_TEST(test_registered), ACX_TEST(test_copies),     ACX_TEST(test_fill),
      ACX_TEST(test_cross_stream), ACX_TEST(test_managed),  ACX_TEST(test_mem_info),
      ACX_TEST(test_bad_commands), ACX_TEST(test_events_sync), ACX_TEST(test_pipelined),
      ACX_TEST(test_extension),  ACX_TEST(test_fault_poisons), ACX_TEST_END};
  acx_test_case_t *run_cases = malloc(sizeof cases);
  if (!run_cases) return 1;
  size_t k = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (!(no_fault && cases[i].fn == test_fault_poisons)) run_cases[k++] = cases[i];
  int rc = acx_test_run("engine_cuda", run_cases, NULL, NULL);
  free(run_cases);
  return rc;
#endif
}
