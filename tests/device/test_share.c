/* Shareable buffers (runtime/device/share.c, issue 16): two devices (two executors) in one process;
 * memory allocated shareable on A, exported, imported on B: B reads A's bytes and A sees B's writes
 * (shared, not copied); copies from an import; acxi_buffer_reduce of (B's own dst) op (the import)
 * for the ten dtypes and four ops, checked bit for bit against a CPU reference whose f16/bf16
 * rounding is computed here from the formats' definitions (not runtime/base/half.h); acxi_buffer_div
 * for each dtype; bad input at the rank and at the executor; an exporter closed or killed: import
 * fails with ACX_ERR_PEER_LOST, and (host kind) an import made before stays readable.
 * Usage: test_share process|inline (kind host) | test_share --cuda [inline] (kind cuda, two executors
 * on GPU 0: processes, or threads of this process sharing its context; exits 77 without a GPU). */
#define _GNU_SOURCE
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "acx/device.h"
#include "acx_test.h"
#include "runtime/base/clock.h"
#include "runtime/device/device_internal.h"

static acx_system_t *sys;
static acx_device_t *dev_a, *dev_b;
static int inline_mode, cuda_mode;
#define T 60000000000LL
#define N 1027 /* elements per reduce: odd, so vector paths meet a tail */

static acx_status_t open_dev(acx_device_t **out) {
  acx_device_config_t cfg = ACX_DEVICE_CONFIG_INIT;
  cfg.kind = cuda_mode ? ACX_DEVICE_KIND_CUDA : ACX_DEVICE_KIND_HOST;
  cfg.transport = inline_mode ? ACX_TRANSPORT_INLINE : ACX_TRANSPORT_PROCESS;
  cfg.streams = 2;
  return acx_device_open(sys, &cfg, out);
}

static acx_buffer_t *alloc_shared(acx_device_t *d, size_t bytes, acx_dtype_t dt) {
  acx_buffer_t *b = NULL;
  ACX_ASSERT_STATUS(acxi_buffer_alloc_shareable(d, bytes, dt, T, &b), ACX_OK);
  return b;
}

static acx_buffer_t *alloc_plain(acx_device_t *d, size_t bytes, acx_dtype_t dt) {
  acx_buffer_t *b = NULL;
  ACX_ASSERT_STATUS(acx_buffer_alloc(d, bytes, dt, ACX_MEM_DEVICE, T, &b), ACX_OK);
  return b;
}

static acx_buffer_t *import_on(acx_device_t *d, acx_buffer_t *exported, acx_dtype_t dt) {
  acxi_ipc_handle_t h;
  ACX_ASSERT_STATUS(acxi_buffer_ipc_export(exported, &h, T), ACX_OK);
  acx_buffer_t *b = NULL;
  ACX_ASSERT_STATUS(acxi_buffer_ipc_import(d, &h, dt, T, &b), ACX_OK);
  return b;
}

static void expect_bytes(acx_buffer_t *b, const void *want, size_t n, const char *what) {
  unsigned char *got = malloc(n);
  ACX_ASSERT_STATUS(acx_buffer_read(b, 0, got, n, 0, T), ACX_OK);
  int same = memcmp(got, want, n) == 0;
  if (!same) printf("\n    %s: the bytes differ\n", what);
  CU_ASSERT(same);
  free(got);
}

/* ---- sharing ---- */

static void test_shared_not_copied(void) {
  enum { B = 3 << 20 }; /* beyond one staging chunk */
  unsigned char *p1 = malloc(B), *p2 = malloc(B);
  acx_test_fill_random(p1, B, 1);
  acx_test_fill_random(p2, B, 2);
  acx_buffer_t *a = alloc_shared(dev_a, B, ACX_DTYPE_U8);
  ACX_ASSERT_STATUS(acx_buffer_write(a, 0, p1, B, 0, T), ACX_OK);
  acx_buffer_t *ib = import_on(dev_b, a, ACX_DTYPE_U8);
  acx_buffer_info_t info;
  ACX_ASSERT_STATUS(acx_buffer_query(ib, &info), ACX_OK);
  CU_ASSERT_EQUAL(info.bytes, B);
  CU_ASSERT_PTR_EQUAL(info.device, dev_b);
  expect_bytes(ib, p1, B, "B reads A's pattern through the import");
  /* B writes, A reads: one memory. */
  ACX_ASSERT_STATUS(acx_buffer_write(ib, 0, p2, B, 1, T), ACX_OK);
  expect_bytes(a, p2, B, "A sees B's write");
  /* A copy out of the import into B's own memory, and a fill through the import. */
  acx_buffer_t *local = alloc_plain(dev_b, B, ACX_DTYPE_U8);
  ACX_ASSERT_STATUS(acx_buffer_copy(local, 0, ib, 0, ACX_WHOLE, 0, T), ACX_OK);
  expect_bytes(local, p2, B, "B's copy of the import");
  ACX_ASSERT_STATUS(acx_buffer_fill(ib, 0, 4096, 0x5a, 1, 0, T), ACX_OK);
  memset(p2, 0x5a, 4096);
  expect_bytes(a, p2, B, "A sees B's fill");
  /* The exporter's own executor imports it too (the same context, for CUDA). */
  acx_buffer_t *ia = import_on(dev_a, a, ACX_DTYPE_U8);
  expect_bytes(ia, p2, B, "A's import of its own export");
  /* Imports go first (CUDA IPC: the exporter keeps its memory until importers closed). */
  ACX_ASSERT_STATUS(acx_buffer_free(ia, T), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_free(ib, T), ACX_OK);
  /* A freed import leaves the exporter's memory alone. */
  expect_bytes(a, p2, B, "A's memory after the imports were freed");
  acx_buffer_release(ia);
  acx_buffer_release(ib);
  acx_buffer_release(local);
  acx_buffer_release(a);
  free(p1);
  free(p2);
}

/* ---- the CPU reference ---- */

/* Finite f16 / bf16 magnitudes from the formats' definitions: both grow with their bit pattern. */
static double f16_value(unsigned bits) {
  unsigned e = (bits >> 10) & 0x1f, m = bits & 0x3ff;
  double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, (int)e - 25);
  return bits & 0x8000 ? -v : v;
}

static double bf16_value(unsigned bits) {
  unsigned e = (bits >> 7) & 0xff, m = bits & 0x7f;
  double v = e == 0 ? ldexp(m, -133) : ldexp(128 + m, (int)e - 134);
  return bits & 0x8000 ? -v : v;
}

/* x rounded to nearest even among the finite values of a 16-bit format whose largest finite
 * pattern is max_bits (x stays inside its range here: the test's values cannot overflow). */
static uint16_t round16(double x, double (*value)(unsigned), unsigned max_bits) {
  unsigned sign = signbit(x) ? 0x8000 : 0;
  double a = fabs(x);
  unsigned lo = 0, hi = max_bits; /* value(lo) <= a < value(hi + 1) after the search */
  while (lo < hi) {
    unsigned mid = (lo + hi + 1) / 2;
    if (value(mid) <= a) lo = mid;
    else hi = mid - 1;
  }
  if (lo < max_bits) {
    double dl = a - value(lo), dh = value(lo + 1) - a;
    if (dh < dl || (dh == dl && (lo & 1))) lo++;
  }
  return (uint16_t)(sign | lo);
}

static uint16_t to_f16(double x) { return round16(x, f16_value, 0x7bff); }
static uint16_t to_bf16(double x) { return round16(x, bf16_value, 0x7f7f); }

static const acx_dtype_t dtypes[] = {ACX_DTYPE_I8,  ACX_DTYPE_U8,   ACX_DTYPE_I32, ACX_DTYPE_U32, ACX_DTYPE_I64,
                                     ACX_DTYPE_U64, ACX_DTYPE_F16, ACX_DTYPE_BF16, ACX_DTYPE_F32, ACX_DTYPE_F64};
#define NDT (sizeof dtypes / sizeof dtypes[0])
static const acx_redop_t ops[] = {ACX_REDOP_SUM, ACX_REDOP_PROD, ACX_REDOP_MAX, ACX_REDOP_MIN};
static const char *const op_names[] = {"sum", "prod", "max", "min"};

static uint64_t rng_next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* Element i of a test vector: integers over their whole range, so sums and products wrap (two's
 * complement, as the GPU does); floats with few mantissa bits (exact sums and products); f16 and
 * bf16 of any sign and mantissa with exponents that keep products finite (f16: below 256, so a
 * product stays below 65472; subnormals included, so products also round into subnormals). */
static void make_elem(acx_dtype_t dt, uint64_t *s, void *out) {
  uint64_t r = rng_next(s);
  switch (dt) {
  case ACX_DTYPE_I8: case ACX_DTYPE_U8: *(uint8_t *)out = (uint8_t)r; break;
  case ACX_DTYPE_I32: case ACX_DTYPE_U32: *(uint32_t *)out = (uint32_t)r; break;
  case ACX_DTYPE_I64: case ACX_DTYPE_U64: *(uint64_t *)out = r; break;
  case ACX_DTYPE_F16: *(uint16_t *)out = (uint16_t)((r & 0x83ff) | ((r >> 20) % 23) << 10); break;
  case ACX_DTYPE_BF16: *(uint16_t *)out = (uint16_t)((r & 0x807f) | (((r >> 20) % 120) + 68) << 7); break;
  case ACX_DTYPE_F32: *(float *)out = (float)((int64_t)(r % 20001) - 10000) / 8.0f; break;
  default: *(double *)out = (double)((int64_t)(r % 2000001) - 1000000) / 16.0; break;
  }
}

#define PICK(a, b, op) ((op) == ACX_REDOP_MAX ? ((a) > (b) ? (a) : (b)) : ((a) < (b) ? (a) : (b)))

/* The reference of one element: integers in 64 bits truncated to the type; floats exactly in
 * double (every result here is exact in double), then rounded once to the type. */
static void ref_elem(acx_dtype_t dt, acx_redop_t op, const void *pa, const void *pb, void *out) {
  int minmax = op == ACX_REDOP_MAX || op == ACX_REDOP_MIN;
#define INTREF(T, W)                                                                         \
  do {                                                                                       \
    W a = (W) * (const T *)pa, b = (W) * (const T *)pb;                                      \
    uint64_t v = minmax ? (uint64_t)PICK(a, b, op)                                           \
                        : op == ACX_REDOP_SUM ? (uint64_t)a + (uint64_t)b : (uint64_t)a * (uint64_t)b; \
    *(T *)out = (T)v;                                                                        \
  } while (0)
  switch (dt) {
  case ACX_DTYPE_I8: INTREF(int8_t, int64_t); break;
  case ACX_DTYPE_U8: INTREF(uint8_t, uint64_t); break;
  case ACX_DTYPE_I32: INTREF(int32_t, int64_t); break;
  case ACX_DTYPE_U32: INTREF(uint32_t, uint64_t); break;
  case ACX_DTYPE_I64: INTREF(int64_t, int64_t); break;
  case ACX_DTYPE_U64: INTREF(uint64_t, uint64_t); break;
  case ACX_DTYPE_F16: case ACX_DTYPE_BF16: {
    double (*val)(unsigned) = dt == ACX_DTYPE_F16 ? f16_value : bf16_value;
    uint16_t ba = *(const uint16_t *)pa, bb = *(const uint16_t *)pb;
    double a = val(ba), b = val(bb);
    if (minmax) {
      int first = op == ACX_REDOP_MAX ? a > b : a < b;
      *(uint16_t *)out = first ? ba : bb;
    } else {
      double v = op == ACX_REDOP_SUM ? a + b : a * b;
      *(uint16_t *)out = dt == ACX_DTYPE_F16 ? to_f16(v) : to_bf16(v);
    }
    break;
  }
  case ACX_DTYPE_F32: {
    double a = *(const float *)pa, b = *(const float *)pb;
    *(float *)out = (float)(minmax ? PICK(a, b, op) : op == ACX_REDOP_SUM ? a + b : a * b);
    break;
  }
  default: {
    double a = *(const double *)pa, b = *(const double *)pb;
    *(double *)out = minmax ? PICK(a, b, op) : op == ACX_REDOP_SUM ? a + b : a * b;
    break;
  }
  }
#undef INTREF
}

/* ---- reduce ---- */

static void test_reduce_every_dtype_and_op(void) {
  int bad_cases = 0;
  for (size_t d = 0; d < NDT; d++) {
    acx_dtype_t dt = dtypes[d];
    size_t es = acx_dtype_size(dt), src_off = 5 * es, dst_off = 3 * es;
    size_t sbytes = src_off + N * es, dbytes = dst_off + N * es + 2 * es;
    unsigned char *src = calloc(1, sbytes), *dst = calloc(1, dbytes), *want = malloc(dbytes), *got = malloc(dbytes);
    acx_buffer_t *exp = alloc_shared(dev_a, sbytes, dt);
    acx_buffer_t *imp = import_on(dev_b, exp, dt);
    acx_buffer_t *local = alloc_plain(dev_b, dbytes, dt);
    for (size_t o = 0; o < 4; o++) {
      uint64_t seed = 0x9e3779b97f4a7c15ull ^ (d * 131 + o * 7 + 1);
      for (size_t i = 0; i < N; i++) {
        make_elem(dt, &seed, src + src_off + i * es);
        make_elem(dt, &seed, dst + dst_off + i * es);
      }
      ACX_ASSERT_STATUS(acx_buffer_write(exp, 0, src, sbytes, 0, T), ACX_OK); /* through A */
      ACX_ASSERT_STATUS(acx_buffer_write(local, 0, dst, dbytes, 0, T), ACX_OK);
      memcpy(want, dst, dbytes);
      for (size_t i = 0; i < N; i++)
        ref_elem(dt, ops[o], dst + dst_off + i * es, src + src_off + i * es, want + dst_off + i * es);
      ACX_ASSERT_STATUS(acxi_buffer_reduce(local, dst_off, imp, src_off, N, dt, ops[o], (uint32_t)(o % 2), T), ACX_OK);
      ACX_ASSERT_STATUS(acx_buffer_read(local, 0, got, dbytes, 0, T), ACX_OK);
      if (memcmp(got, want, dbytes) != 0) {
        size_t i = 0;
        while (i < dbytes && got[i] == want[i]) i++;
        printf("\n    reduce %s %s: first difference at byte %zu (element %zd)\n", acx_dtype_name(dt), op_names[o], i,
               (ssize_t)((i - dst_off) / es));
        bad_cases++;
      }
      /* The source, through its exporter, is untouched. */
      ACX_ASSERT_STATUS(acx_buffer_read(exp, 0, got, sbytes, 0, T), ACX_OK);
      CU_ASSERT(memcmp(got, src, sbytes) == 0);
    }
    acx_buffer_release(imp);
    acx_buffer_release(local);
    acx_buffer_release(exp);
    free(src);
    free(dst);
    free(want);
    free(got);
  }
  CU_ASSERT_EQUAL(bad_cases, 0);
}

/* The reduce writes into the import (the hierarchical collective's other direction), and a
 * buffer reduced with itself. */
static void test_reduce_into_import(void) {
  enum { M = 4096 };
  int32_t a[M], b[M], want[M];
  for (int i = 0; i < M; i++) {
    a[i] = i * 3 - 5000;
    b[i] = 7 - i;
    want[i] = 2 * (a[i] + b[i]);
  }
  acx_buffer_t *exp = alloc_shared(dev_a, sizeof a, ACX_DTYPE_I32);
  acx_buffer_t *imp = import_on(dev_b, exp, ACX_DTYPE_I32), *local = alloc_plain(dev_b, sizeof b, ACX_DTYPE_I32);
  ACX_ASSERT_STATUS(acx_buffer_write(exp, 0, a, sizeof a, 0, T), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_write(local, 0, b, sizeof b, 0, T), ACX_OK);
  ACX_ASSERT_STATUS(acxi_buffer_reduce(imp, 0, local, 0, M, ACX_DTYPE_I32, ACX_REDOP_SUM, 1, T), ACX_OK);
  ACX_ASSERT_STATUS(acxi_buffer_reduce(imp, 0, imp, 0, M, ACX_DTYPE_I32, ACX_REDOP_SUM, 0, T), ACX_OK);
  expect_bytes(exp, want, sizeof want, "A's memory after B reduced into it");
  acx_buffer_release(imp);
  acx_buffer_release(local);
  acx_buffer_release(exp);
}

/* ---- div ---- */

static void test_div_every_dtype(void) {
  int bad_cases = 0;
  const uint64_t divisors[] = {3, 7};
  for (size_t d = 0; d < NDT; d++) {
    acx_dtype_t dt = dtypes[d];
    size_t es = acx_dtype_size(dt), off = 2 * es, bytes = off + N * es + es;
    unsigned char *buf = malloc(bytes), *want = malloc(bytes), *got = malloc(bytes);
    acx_buffer_t *exp = alloc_shared(dev_a, bytes, dt);
    acx_buffer_t *imp = import_on(dev_b, exp, dt);
    for (size_t k = 0; k < 2; k++) {
      uint64_t seed = 0x2545f4914f6cdd1dull ^ (d * 17 + k + 1), v = divisors[k];
      acx_test_fill_random(buf, bytes, d * 5 + k + 1);
      for (size_t i = 0; i < N; i++) make_elem(dt, &seed, buf + off + i * es);
      memcpy(want, buf, bytes);
      for (size_t i = 0; i < N; i++) {
        void *p = want + off + i * es;
        switch (dt) {
        case ACX_DTYPE_I8: *(int8_t *)p = (int8_t)(*(int8_t *)p / (int64_t)v); break; /* C truncates */
        case ACX_DTYPE_U8: *(uint8_t *)p = (uint8_t)(*(uint8_t *)p / v); break;
        case ACX_DTYPE_I32: *(int32_t *)p = (int32_t)(*(int32_t *)p / (int64_t)v); break;
        case ACX_DTYPE_U32: *(uint32_t *)p = (uint32_t)(*(uint32_t *)p / v); break;
        case ACX_DTYPE_I64: *(int64_t *)p = *(int64_t *)p / (int64_t)v; break;
        case ACX_DTYPE_U64: *(uint64_t *)p = *(uint64_t *)p / v; break;
        /* Rounding the double quotient once more is exact rounding: 53 >= 2 x 24 + 2. */
        case ACX_DTYPE_F16: *(uint16_t *)p = to_f16(f16_value(*(uint16_t *)p) / (double)v); break;
        case ACX_DTYPE_BF16: *(uint16_t *)p = to_bf16(bf16_value(*(uint16_t *)p) / (double)v); break;
        case ACX_DTYPE_F32: *(float *)p = (float)((double)*(float *)p / (double)v); break;
        default: *(double *)p = *(double *)p / (double)v; break;
        }
      }
      ACX_ASSERT_STATUS(acx_buffer_write(exp, 0, buf, bytes, 0, T), ACX_OK);
      ACX_ASSERT_STATUS(acxi_buffer_div(imp, off, N, dt, v, (uint32_t)k, T), ACX_OK);
      ACX_ASSERT_STATUS(acx_buffer_read(exp, 0, got, bytes, 0, T), ACX_OK);
      if (memcmp(got, want, bytes) != 0) {
        size_t i = 0;
        while (i < bytes && got[i] == want[i]) i++;
        printf("\n    div %s by %llu: first difference at byte %zu\n", acx_dtype_name(dt), (unsigned long long)v, i);
        bad_cases++;
      }
    }
    acx_buffer_release(imp);
    acx_buffer_release(exp);
    free(buf);
    free(want);
    free(got);
  }
  CU_ASSERT_EQUAL(bad_cases, 0);
}

/* ---- bad input ---- */

static void test_bad_arguments(void) {
  acx_buffer_t *exp = alloc_shared(dev_a, 256, ACX_DTYPE_F32), *plain = alloc_plain(dev_b, 256, ACX_DTYPE_F32);
  acx_buffer_t *other = alloc_plain(dev_a, 256, ACX_DTYPE_F32), *imp = import_on(dev_b, exp, ACX_DTYPE_F32);
  acx_buffer_t *out = NULL;
  acx_buffer_t *exp6 = alloc_shared(dev_a, 6, ACX_DTYPE_U8);
  acxi_ipc_handle_t h, g, h6;
  ACX_ASSERT_STATUS(acxi_buffer_ipc_export(exp, &h, T), ACX_OK);
  ACX_ASSERT_STATUS(acxi_buffer_ipc_export(exp6, &h6, T), ACX_OK);
  acx_test_log_begin();
  /* Bytes that are not a handle: refused by the rank. */
  acx_test_fill_random(g.bytes, sizeof g.bytes, 99);
  acx_status_t garbage = acxi_buffer_ipc_import(dev_b, &g, ACX_DTYPE_F32, T, &out);
  /* A handle whose head is right and whose kind is not: refused by the executor. */
  g = h;
  acxi_ipc_wire_t w;
  memcpy(&w, g.bytes, sizeof w);
  w.kind = 77;
  memcpy(g.bytes, &w, sizeof w);
  acx_status_t kind = acxi_buffer_ipc_import(dev_b, &g, ACX_DTYPE_F32, T, &out);
  acx_status_t not_multiple = acxi_buffer_ipc_import(dev_b, &h6, ACX_DTYPE_F32, T, &out);
  acx_status_t exp_plain = acxi_buffer_ipc_export(plain, &g, T);
  acx_status_t exp_import = acxi_buffer_ipc_export(imp, &g, T);
  acx_status_t avg = acxi_buffer_reduce(plain, 0, imp, 0, 8, ACX_DTYPE_F32, ACX_REDOP_AVG, 0, T);
  acx_status_t badop = acxi_buffer_reduce(plain, 0, imp, 0, 8, ACX_DTYPE_F32, (acx_redop_t)9, 0, T);
  acx_status_t range = acxi_buffer_reduce(plain, 0, imp, 4, 64, ACX_DTYPE_F32, ACX_REDOP_SUM, 0, T);
  acx_status_t huge = acxi_buffer_reduce(plain, 0, imp, 0, SIZE_MAX / 2, ACX_DTYPE_F32, ACX_REDOP_SUM, 0, T);
  acx_status_t misaligned = acxi_buffer_reduce(plain, 2, imp, 0, 8, ACX_DTYPE_F32, ACX_REDOP_SUM, 0, T);
  acx_status_t overlap = acxi_buffer_reduce(plain, 0, plain, 4, 8, ACX_DTYPE_F32, ACX_REDOP_SUM, 0, T);
  acx_status_t foreign = acxi_buffer_reduce(plain, 0, other, 0, 8, ACX_DTYPE_F32, ACX_REDOP_SUM, 0, T);
  acx_status_t byte = acxi_buffer_reduce(plain, 0, imp, 0, 8, ACX_DTYPE_BYTE, ACX_REDOP_SUM, 0, T);
  acx_status_t f8 = acxi_buffer_reduce(plain, 0, imp, 0, 8, ACX_DTYPE_F8E4M3, ACX_REDOP_MAX, 0, T);
  acx_status_t nodt = acxi_buffer_reduce(plain, 0, imp, 0, 8, (acx_dtype_t)99, ACX_REDOP_SUM, 0, T);
  acx_status_t stream = acxi_buffer_reduce(plain, 0, imp, 0, 8, ACX_DTYPE_F32, ACX_REDOP_SUM, 5, T);
  acx_status_t div0 = acxi_buffer_div(plain, 0, 8, ACX_DTYPE_F32, 0, 0, T);
  acx_status_t div_big = acxi_buffer_div(plain, 0, 8, ACX_DTYPE_I32, UINT64_MAX, 0, T);
  acx_status_t div_f8 = acxi_buffer_div(plain, 0, 8, ACX_DTYPE_F8E5M2, 2, 0, T);
  acx_status_t div_range = acxi_buffer_div(plain, 128, 33, ACX_DTYPE_F32, 2, 0, T);
  char *log = acx_test_log_end();
  printf("\n    captured:\n%s", log);
  CU_ASSERT_EQUAL(garbage, ACX_ERR_INVALID_ARG);
  CU_ASSERT(strstr(log, "acxi_buffer_ipc_import: argument 'h' is not a shareable-buffer handle") != NULL);
  CU_ASSERT_EQUAL(kind, ACX_ERR_INVALID_ARG);
  /* The executor's own line reaches this log only when it runs in this process. */
  if (inline_mode) CU_ASSERT(strstr(log, "the handle is of device kind unknown") != NULL);
  CU_ASSERT_PTR_NULL(out);
  CU_ASSERT_EQUAL(not_multiple, ACX_ERR_INVALID_ARG);
  CU_ASSERT(strstr(log, "acxi_buffer_ipc_import: the handle's 6 bytes are not a multiple of the f32 size 4") != NULL);
  CU_ASSERT_EQUAL(exp_plain, ACX_ERR_INVALID_ARG);
  CU_ASSERT(strstr(log, "acxi_buffer_ipc_export: argument 'buf' (buffer ") != NULL);
  CU_ASSERT(strstr(log, "is not shareable (an ordinary buffer)") != NULL);
  CU_ASSERT_EQUAL(exp_import, ACX_ERR_INVALID_ARG);
  CU_ASSERT(strstr(log, "is not shareable (an import)") != NULL);
  CU_ASSERT_EQUAL(avg, ACX_ERR_INVALID_ARG);
  CU_ASSERT(strstr(log, "acxi_buffer_reduce: argument 'op'=4 is not sum, prod, max or min (avg") != NULL);
  CU_ASSERT_EQUAL(badop, ACX_ERR_INVALID_ARG);
  CU_ASSERT_EQUAL(range, ACX_ERR_OUT_OF_RANGE);
  CU_ASSERT(strstr(log, "acxi_buffer_reduce: range [4, +256) exceeds 'src' (256 bytes)") != NULL);
  CU_ASSERT_EQUAL(huge, ACX_ERR_OVERFLOW);
  CU_ASSERT_EQUAL(misaligned, ACX_ERR_INVALID_ARG);
  CU_ASSERT(strstr(log, "argument 'dst_off'=2 is not a multiple of the element size 4") != NULL);
  CU_ASSERT_EQUAL(overlap, ACX_ERR_INVALID_ARG);
  CU_ASSERT_EQUAL(foreign, ACX_ERR_INVALID_ARG);
  CU_ASSERT_EQUAL(byte, ACX_ERR_NOT_SUPPORTED);
  CU_ASSERT(strstr(log, "acxi_buffer_reduce: argument 'dtype'=byte is not one of") != NULL);
  CU_ASSERT_EQUAL(f8, ACX_ERR_NOT_SUPPORTED);
  CU_ASSERT_EQUAL(nodt, ACX_ERR_BAD_DTYPE);
  CU_ASSERT_EQUAL(stream, ACX_ERR_INVALID_ARG);
  CU_ASSERT_EQUAL(div0, ACX_ERR_INVALID_ARG);
  CU_ASSERT(strstr(log, "acxi_buffer_div: argument 'divisor' is 0") != NULL);
  CU_ASSERT_EQUAL(div_big, ACX_ERR_INVALID_ARG);
  CU_ASSERT_EQUAL(div_f8, ACX_ERR_NOT_SUPPORTED);
  CU_ASSERT_EQUAL(div_range, ACX_ERR_OUT_OF_RANGE);
  free(log);
  /* count 0 is nothing to do. */
  ACX_ASSERT_STATUS(acxi_buffer_reduce(plain, 0, imp, 0, 0, ACX_DTYPE_F32, ACX_REDOP_SUM, 0, T), ACX_OK);
  ACX_ASSERT_STATUS(acxi_buffer_div(plain, 256, 0, ACX_DTYPE_F32, 3, 0, T), ACX_OK);
  acx_buffer_release(imp);
  acx_buffer_release(other);
  acx_buffer_release(plain);
  acx_buffer_release(exp6);
  acx_buffer_release(exp);
}

/* Commands the rank would never send reach the executor's own checks. */
static void test_bad_commands_reach_executor(void) {
  acx_buffer_t *exp = alloc_shared(dev_b, 256, ACX_DTYPE_U32), *plain = alloc_plain(dev_b, 256, ACX_DTYPE_U32);
  acx_host_mem_t *region = NULL;
  ACX_ASSERT_STATUS(acx_host_alloc(dev_b, 2 * ACXI_IPC_HANDLE_BYTES, &region), ACX_OK);
  void *rp;
  ACX_ASSERT_STATUS(acx_host_mem_ptr(region, &rp, NULL), ACX_OK);
  acx_test_fill_random(rp, 2 * ACXI_IPC_HANDLE_BYTES, 5);
  acxi_bufarg_t ba[] = {{plain, "dst"}, {exp, "src"}};
  struct {
    acxi_cmd_t cmd;
    int nbufs;
    acx_status_t want;
  } cases[] = {
      {{.op = ACXI_OP_REDUCE, .dtype = ACX_DTYPE_U32, .buf = {plain->id, exp->id}, .bytes = 64,
        .arg = {ACX_REDOP_AVG}}, 2, ACX_ERR_INVALID_ARG},
      {{.op = ACXI_OP_REDUCE, .dtype = ACX_DTYPE_BYTE, .buf = {plain->id, exp->id}, .bytes = 64}, 2,
       ACX_ERR_NOT_SUPPORTED},
      {{.op = ACXI_OP_REDUCE, .dtype = ACX_DTYPE_U32, .buf = {plain->id, exp->id}, .off = {0, 2}, .bytes = 64}, 2,
       ACX_ERR_INVALID_ARG},
      {{.op = ACXI_OP_REDUCE, .dtype = ACX_DTYPE_U32, .buf = {plain->id, exp->id}, .off = {0, 200}, .bytes = 64}, 2,
       ACX_ERR_OUT_OF_RANGE},
      {{.op = ACXI_OP_REDUCE, .dtype = ACX_DTYPE_U32, .buf = {plain->id, plain->id}, .off = {0, 4}, .bytes = 64}, 1,
       ACX_ERR_INVALID_ARG},
      {{.op = ACXI_OP_REDUCE, .dtype = ACX_DTYPE_U32, .buf = {plain->id, exp->id}, .bytes = 64}, 2, ACX_OK},
      {{.op = ACXI_OP_DIV, .dtype = ACX_DTYPE_U32, .buf = {plain->id}, .bytes = 64}, 1, ACX_ERR_INVALID_ARG},
      {{.op = ACXI_OP_DIV, .dtype = ACX_DTYPE_I64, .buf = {plain->id}, .bytes = 64, .arg = {UINT64_MAX}}, 1,
       ACX_ERR_INVALID_ARG},
      {{.op = ACXI_OP_DIV, .dtype = ACX_DTYPE_F8E4M3, .buf = {plain->id}, .bytes = 64, .arg = {2}}, 1,
       ACX_ERR_NOT_SUPPORTED},
      {{.op = ACXI_OP_DIV, .dtype = ACX_DTYPE_U32, .buf = {plain->id}, .bytes = 6, .arg = {2}}, 1,
       ACX_ERR_INVALID_ARG},
      {{.op = ACXI_OP_IPC_EXPORT, .buf = {plain->id}, .arg = {region->id}}, 1, ACX_ERR_INVALID_ARG},
      {{.op = ACXI_OP_IPC_EXPORT, .buf = {exp->id}, .off = {ACXI_IPC_HANDLE_BYTES + 1}, .arg = {region->id}}, 0,
       ACX_ERR_OUT_OF_RANGE},
      {{.op = ACXI_OP_IPC_EXPORT, .buf = {exp->id}, .arg = {12345}}, 0, ACX_ERR_INVALID_ARG},
      {{.op = ACXI_OP_IPC_IMPORT, .buf = {(uint64_t)1 << 60}, .arg = {region->id}}, 0, ACX_ERR_INVALID_ARG},
      {{.op = ACXI_OP_IPC_IMPORT, .buf = {exp->id}, .arg = {region->id}}, 0, ACX_ERR_INVALID_ARG},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    acx_status_t st = acxi_device_call(dev_b, &cases[i].cmd, ba, cases[i].nbufs, 0, -1, T, NULL);
    if (st != cases[i].want)
      printf("\n    case %zu (op %u): %s, expected %s\n", i, cases[i].cmd.op, acx_status_name(st),
             acx_status_name(cases[i].want));
    CU_ASSERT_EQUAL(st, cases[i].want);
  }
  ACX_ASSERT_STATUS(acx_host_free(region), ACX_OK);
  acx_buffer_release(plain);
  acx_buffer_release(exp);
}

/* ---- flags in a shared host region (WAIT_VALUE / WRITE_VALUE, acxi_host_share/attach) ---- */

static acx_status_t flag_cmd(acx_device_t *d, uint32_t op, acx_host_mem_t *m, uint64_t off, uint64_t value,
                             uint64_t limit_ns, uint32_t stream, acx_future_t **f) {
  acxi_cmd_t cmd = {.op = op, .stream = stream, .off = {off}, .arg = {m->id, value, limit_ns}};
  return acxi_device_submit(d, &cmd, NULL, 0, 0, -1, acxi_deadline(T), f);
}

/* A's region, attached on B: B's executor writes a flag that A's executor waits for (a stream
 * wait: A's later copy on that stream runs only after it), and the host sees the same word. */
static void test_flags_across_executors(void) {
  acx_host_mem_t *mine = NULL, *theirs = NULL;
  ACX_ASSERT_STATUS(acx_host_alloc(dev_a, 4096, &mine), ACX_OK);
  acxi_host_share_t sh;
  ACX_ASSERT_STATUS(acxi_host_share(mine, &sh), ACX_OK);
  ACX_ASSERT_STATUS(acxi_host_attach(dev_b, &sh, &theirs), ACX_OK);
  void *pa, *pb;
  ACX_ASSERT_STATUS(acx_host_mem_ptr(mine, &pa, NULL), ACX_OK);
  ACX_ASSERT_STATUS(acx_host_mem_ptr(theirs, &pb, NULL), ACX_OK);
  _Atomic uint32_t *fa = pa, *fb = pb;
  /* Shared, not copied: a word written through one mapping is read through the other. */
  atomic_store(&fa[3], 77u);
  CU_ASSERT_EQUAL(atomic_load(&fb[3]), 77u);
  atomic_store(&fa[3], 0u);

  /* A waits for word 1 >= 5, then fills a buffer; nothing of it may run before B writes 5. A
   * value that wrapped around 2^32 still compares as later (5 is 2^32 + 5 past 0xffffffff + 1). */
  acx_buffer_t *buf = alloc_plain(dev_a, 64, ACX_DTYPE_U32);
  ACX_ASSERT_STATUS(acx_buffer_fill(buf, 0, ACX_WHOLE, 1, 4, 1, T), ACX_OK);
  acx_future_t *waited = NULL, *filled = NULL;
  atomic_store(&fa[1], 0xfffffff0u);
  ACX_ASSERT_STATUS(flag_cmd(dev_a, ACXI_OP_WAIT_VALUE, mine, 4, 5, 0, 1, &waited), ACX_OK);
  if (!cuda_mode) {
    /* The host kind's executor polls in its loop: nothing else it runs may be asked of it
     * meanwhile, so B writes at once and A's stream order is checked after. */
    ACX_ASSERT_STATUS(flag_cmd(dev_b, ACXI_OP_WRITE_VALUE, theirs, 4, 5, 0, 0, NULL), ACX_OK);
  }
  acxi_cmd_t fill = {.op = ACXI_OP_FILL, .stream = 1, .buf = {buf->id}, .bytes = 64, .arg = {2, 4}};
  acxi_bufarg_t ba[] = {{buf, "buf"}};
  ACX_ASSERT_STATUS(acxi_device_submit(dev_a, &fill, ba, 1, 0, -1, acxi_deadline(T), &filled), ACX_OK);
  if (cuda_mode) {
    /* Device-side: A's executor went on, its stream did not. */
    CU_ASSERT_EQUAL(acx_future_wait(waited, 200000000LL, NULL, 0, NULL), ACX_ERR_TIMEOUT);
    CU_ASSERT_EQUAL(acx_future_wait(filled, 1000000LL, NULL, 0, NULL), ACX_ERR_TIMEOUT);
    ACX_ASSERT_STATUS(flag_cmd(dev_b, ACXI_OP_WRITE_VALUE, theirs, 4, 5, 0, 0, NULL), ACX_OK);
  }
  ACX_ASSERT_STATUS(acx_future_wait(waited, T, NULL, 0, NULL), ACX_OK);
  ACX_ASSERT_STATUS(acx_future_wait(filled, T, NULL, 0, NULL), ACX_OK);
  acx_future_release(waited);
  acx_future_release(filled);
  CU_ASSERT_EQUAL(atomic_load(&fa[1]), 5u);
  uint32_t want[16];
  for (int i = 0; i < 16; i++) want[i] = 2;
  expect_bytes(buf, want, sizeof want, "the fill behind the wait");

  /* B's write follows B's own earlier work on its stream: a copy into A's word through a buffer
   * would be another test; here the write after a wait that is already satisfied. */
  ACX_ASSERT_STATUS(flag_cmd(dev_b, ACXI_OP_WAIT_VALUE, theirs, 4, 5, 0, 0, NULL), ACX_OK);
  acx_future_t *w2 = NULL;
  ACX_ASSERT_STATUS(flag_cmd(dev_b, ACXI_OP_WRITE_VALUE, theirs, 8, 9, 0, 0, &w2), ACX_OK);
  ACX_ASSERT_STATUS(acx_future_wait(w2, T, NULL, 0, NULL), ACX_OK);
  acx_future_release(w2);
  CU_ASSERT_EQUAL(atomic_load(&fa[2]), 9u);

  /* Host kind: a wait that is never satisfied gives up at its limit. */
  if (!cuda_mode) {
    acx_future_t *late = NULL;
    ACX_ASSERT_STATUS(flag_cmd(dev_a, ACXI_OP_WAIT_VALUE, mine, 4, 6, 50000000, 0, &late), ACX_OK);
    ACX_ASSERT_STATUS(acx_future_wait(late, T, NULL, 0, NULL), ACX_ERR_COLL_TIMEOUT);
    acx_future_release(late);
  }
  acx_buffer_release(buf);
  ACX_ASSERT_STATUS(acx_host_free(theirs), ACX_OK);
  ACX_ASSERT_STATUS(acx_host_free(mine), ACX_OK);
  ACX_ASSERT_STATUS(acx_device_ping(dev_a, T), ACX_OK);
  ACX_ASSERT_STATUS(acx_device_ping(dev_b, T), ACX_OK);
}

static void test_flags_bad_input(void) {
  acx_host_mem_t *m = NULL;
  ACX_ASSERT_STATUS(acx_host_alloc(dev_a, 64, &m), ACX_OK);
  struct {
    uint32_t op;
    uint64_t region, off, value;
    acx_status_t want;
  } cases[] = {
      {ACXI_OP_WAIT_VALUE, 12345, 0, 0, ACX_ERR_INVALID_ARG},        /* no such region */
      {ACXI_OP_WRITE_VALUE, m->id, 2, 0, ACX_ERR_INVALID_ARG},       /* not 4-aligned */
      {ACXI_OP_WRITE_VALUE, m->id, 64, 0, ACX_ERR_INVALID_ARG},      /* past the region */
      {ACXI_OP_WAIT_VALUE, m->id, 62, 0, ACX_ERR_INVALID_ARG},       /* straddles its end */
      {ACXI_OP_WRITE_VALUE, m->id, 0, 1ull << 32, ACX_ERR_INVALID_ARG}, /* more than 32 bits */
      {ACXI_OP_WRITE_VALUE, m->id, 60, 3, ACX_OK},
      {ACXI_OP_WAIT_VALUE, m->id, 60, 3, ACX_OK},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    acxi_cmd_t cmd = {.op = cases[i].op, .off = {cases[i].off}, .arg = {cases[i].region, cases[i].value}};
    acx_status_t st = acxi_device_call(dev_a, &cmd, NULL, 0, 0, -1, T, NULL);
    if (st != cases[i].want)
      printf("\n    case %zu (op %u): %s, expected %s\n", i, cases[i].op, acx_status_name(st),
             acx_status_name(cases[i].want));
    CU_ASSERT_EQUAL(st, cases[i].want);
  }
  /* A share that names nothing, or a file that is no longer the region. */
  acxi_host_share_t sh, bad;
  acx_host_mem_t *got = NULL;
  ACX_ASSERT_STATUS(acxi_host_share(m, &sh), ACX_OK);
  bad = sh;
  bad.bytes = 0;
  ACX_ASSERT_STATUS(acxi_host_attach(dev_b, &bad, &got), ACX_ERR_INVALID_ARG);
  bad = sh;
  bad.ino ^= 1;
  ACX_ASSERT_STATUS(acxi_host_attach(dev_b, &bad, &got), ACX_ERR_PEER_LOST);
  CU_ASSERT_PTR_NULL(got);
  ACX_ASSERT_STATUS(acxi_host_attach(dev_b, NULL, &got), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_host_free(m), ACX_OK);
  /* Freed by its owner: its descriptor is closed, nothing to attach. */
  ACX_ASSERT_STATUS(acxi_host_attach(dev_b, &sh, &got), ACX_ERR_PEER_LOST);
  CU_ASSERT_PTR_NULL(got);
}

/* ---- the exporter goes ---- */

static int wait_generation(acx_device_t *d, uint64_t gen) {
  for (int64_t dl = acxi_deadline(T); acxi_now_ns() < dl; nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL)) {
    uint64_t g = 0;
    if (acx_device_generation(d, &g) == ACX_OK && g >= gen && acx_device_ping(d, T) == ACX_OK) return g == gen;
  }
  return 0;
}

static void test_exporter_closed(void) {
  enum { B = 1 << 16 };
  unsigned char *p = malloc(B);
  acx_test_fill_random(p, B, 31);
  acx_device_t *c = NULL;
  ACX_ASSERT_STATUS(open_dev(&c), ACX_OK);
  acx_buffer_t *exp = alloc_shared(c, B, ACX_DTYPE_U8);
  ACX_ASSERT_STATUS(acx_buffer_write(exp, 0, p, B, 0, T), ACX_OK);
  acxi_ipc_handle_t h;
  ACX_ASSERT_STATUS(acxi_buffer_ipc_export(exp, &h, T), ACX_OK);
  acx_buffer_t *early = NULL, *late = NULL;
  ACX_ASSERT_STATUS(acxi_buffer_ipc_import(dev_b, &h, ACX_DTYPE_U8, T, &early), ACX_OK);
  if (cuda_mode) { /* CUDA IPC: importers close before the exporter frees (docs/architecture.md) */
    acx_buffer_release(early);
    early = NULL;
  }
  acx_buffer_release(exp);
  ACX_ASSERT_STATUS(acx_device_close(c, T), ACX_OK);
  acx_test_log_begin();
  acx_status_t st = acxi_buffer_ipc_import(dev_b, &h, ACX_DTYPE_U8, T, &late);
  char *log = acx_test_log_end();
  printf("\n    captured:\n%s", log);
  CU_ASSERT_EQUAL(st, ACX_ERR_PEER_LOST);
  CU_ASSERT_PTR_NULL(late);
  CU_ASSERT(strstr(log, "acxi_buffer_ipc_import: 65536 bytes of u8 (another executor's device memory) not imported: "
                        "ACX_ERR_PEER_LOST") != NULL);
  free(log);
  /* Host kind: the import made before keeps the memory (documented), readable and writable. */
  if (early) {
    expect_bytes(early, p, B, "an import made before its exporter closed");
    ACX_ASSERT_STATUS(acx_buffer_fill(early, 0, ACX_WHOLE, 0x11, 1, 0, T), ACX_OK);
    acx_buffer_release(early);
  }
  ACX_ASSERT_STATUS(acx_device_ping(dev_b, T), ACX_OK); /* B's executor is unharmed */
  free(p);
}

static void test_exporter_killed(void) {
  if (inline_mode) return; /* needs an executor process to kill */
  acx_device_t *c = NULL;
  ACX_ASSERT_STATUS(open_dev(&c), ACX_OK);
  acx_buffer_t *exp = alloc_shared(c, 4096, ACX_DTYPE_U8);
  acxi_ipc_handle_t h;
  ACX_ASSERT_STATUS(acxi_buffer_ipc_export(exp, &h, T), ACX_OK);
  pid_t pid = atomic_load(&c->pid);
  CU_ASSERT_FATAL(pid > 0);
  CU_ASSERT_EQUAL(kill(pid, SIGKILL), 0);
  /* The next generation serves once the killed executor was reaped: its memory is gone then. */
  CU_ASSERT_FATAL(wait_generation(c, 2));
  acx_buffer_t *late = NULL;
  ACX_ASSERT_STATUS(acxi_buffer_ipc_import(dev_b, &h, ACX_DTYPE_U8, T, &late), ACX_ERR_PEER_LOST);
  CU_ASSERT_PTR_NULL(late);
  /* The stale export has no handle any more; a new one does. */
  acxi_ipc_handle_t h2;
  ACX_ASSERT_STATUS(acxi_buffer_ipc_export(exp, &h2, T), ACX_ERR_STALE_BUFFER);
  acx_buffer_release(exp);
  acx_buffer_t *fresh = alloc_shared(c, 4096, ACX_DTYPE_U8);
  acx_buffer_t *imp = import_on(dev_b, fresh, ACX_DTYPE_U8);
  acx_buffer_release(imp);
  acx_buffer_release(fresh);
  ACX_ASSERT_STATUS(acx_device_close(c, T), ACX_OK);
  ACX_ASSERT_STATUS(acx_device_ping(dev_b, T), ACX_OK);
}

static int setup(void) {
  if (acx_system_create(NULL, &sys) != ACX_OK) return 1;
  return open_dev(&dev_a) != ACX_OK || open_dev(&dev_b) != ACX_OK;
}

static int teardown(void) {
  int bad = 0;
  acx_device_t *devs[] = {dev_a, dev_b};
  for (int i = 0; i < 2; i++) {
    acx_device_stats_t st = {.size = sizeof st};
    if (acx_device_stats(devs[i], &st) != ACX_OK || st.buffers_live != 0) {
      printf("device %d: leaked buffers: %llu\n", i, (unsigned long long)st.buffers_live);
      bad = 1;
    }
    bad |= acx_device_close(devs[i], T) != ACX_OK;
  }
  return bad | (acx_system_destroy(sys, T) != ACX_OK);
}

static int gpu_present(void) {
  const char *v = getenv("CUDA_VISIBLE_DEVICES");
  if (v && (!*v || !strcmp(v, "-1"))) return 0;
  return access("/dev/nvidiactl", F_OK) == 0;
}

int main(int argc, char **argv) {
  setenv("ACX_EXEC_TIMEOUT_MS", "30000", 0);
  for (int i = 1; i < argc; i++) {
    cuda_mode |= !strcmp(argv[i], "--cuda");
    inline_mode |= !strcmp(argv[i], "inline");
  }
  if (cuda_mode) {
    if (!gpu_present()) acx_test_skip("no GPU visible (/dev/nvidiactl missing or CUDA_VISIBLE_DEVICES empty)");
    acx_system_t *s = NULL;
    acx_device_t *d = NULL;
    if (acx_system_create(NULL, &s) != ACX_OK) return 1;
    sys = s;
    acx_status_t st = open_dev(&d);
    if (st == ACX_OK) acx_device_close(d, T);
    acx_system_destroy(s, T);
    sys = NULL;
    if (st == ACX_ERR_NO_DEVICE || st == ACX_ERR_NOT_SUPPORTED)
      acx_test_skip("kind cuda: no usable device (or this build has no cuda kind)");
  }
  static const acx_test_case_t cases[] = {
      ACX_TEST(test_shared_not_copied),   ACX_TEST(test_reduce_every_dtype_and_op), ACX_TEST(test_reduce_into_import),
      ACX_TEST(test_div_every_dtype),     ACX_TEST(test_bad_arguments),
      ACX_TEST(test_bad_commands_reach_executor), ACX_TEST(test_exporter_closed), ACX_TEST(test_exporter_killed),
      ACX_TEST(test_flags_across_executors), ACX_TEST(test_flags_bad_input),
      ACX_TEST_END};
  return acx_test_run(cuda_mode ? (inline_mode ? "share-cuda-inline" : "share-cuda")
                                 : inline_mode ? "share-inline" : "share-process",
                      cases, setup, teardown);
}
