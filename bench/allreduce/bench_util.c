/* Pure helpers of acx-allreduce-bench (see bench_util.h): parsing, nccl-tests formulas, exact
 * test data and half/bfloat16 arithmetic. */
#include "bench_util.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/half.h"

static const struct {
  const char *name;
  size_t size;
} dtypes[BENCH_DTYPE_COUNT] = {{"int8", 1},  {"uint8", 1}, {"int32", 4},    {"uint32", 4}, {"int64", 8},
                               {"uint64", 8}, {"half", 2}, {"bfloat16", 2}, {"float", 4},  {"double", 8}};
static const char *const ops[BENCH_OP_COUNT] = {"sum", "prod", "max", "min", "avg"};

int bench_parse_size(const char *text, size_t *bytes) {
  if (!text || !bytes || !isdigit((unsigned char)text[0])) return -1;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno) return -1;
  unsigned shift = 0;
  switch (toupper((unsigned char)*end)) {
  case '\0': break;
  case 'K': shift = 10; break;
  case 'M': shift = 20; break;
  case 'G': shift = 30; break;
  default: return -1;
  }
  if (*end && end[1] != '\0' && !(toupper((unsigned char)end[1]) == 'B' && end[2] == '\0')) return -1;
  if (v > (~0ull >> shift)) return -1;
  *bytes = (size_t)(v << shift);
  return 0;
}

int bench_dtype_parse(const char *text, bench_dtype_t *dtype) {
  for (int i = 0; text && i < BENCH_DTYPE_COUNT; i++)
    if (strcmp(text, dtypes[i].name) == 0) {
      *dtype = (bench_dtype_t)i;
      return 0;
    }
  return -1;
}

const char *bench_dtype_name(bench_dtype_t d) { return d < BENCH_DTYPE_COUNT ? dtypes[d].name : "?"; }
size_t bench_dtype_size(bench_dtype_t d) { return d < BENCH_DTYPE_COUNT ? dtypes[d].size : 0; }
int bench_dtype_is_float(bench_dtype_t d) { return d >= BENCH_HALF; }

int bench_op_parse(const char *text, bench_op_t *op) {
  for (int i = 0; text && i < BENCH_OP_COUNT; i++)
    if (strcmp(text, ops[i]) == 0) {
      *op = (bench_op_t)i;
      return 0;
    }
  return -1;
}

const char *bench_op_name(bench_op_t op) { return op < BENCH_OP_COUNT ? ops[op] : "?"; }

int bench_sizes(size_t min_bytes, size_t max_bytes, unsigned factor, size_t elem_size, size_t *out, int max_out) {
  if (min_bytes > max_bytes || elem_size == 0) return -1;
  if (min_bytes < max_bytes && (factor < 2 || min_bytes == 0)) return -1;
  int n = 0;
  size_t last = 0;
  for (size_t s = min_bytes;;) {
    size_t b = s / elem_size * elem_size;
    if (b > 0 && b != last) {
      if (n < max_out) out[n] = b;
      n++;
      last = b;
    }
    if (s >= max_bytes || s > max_bytes / factor) break;
    s *= factor;
  }
  return n;
}

double bench_algbw(size_t bytes, double seconds) { return seconds > 0 ? (double)bytes / 1.0e9 / seconds : 0.0; }

double bench_allreduce_busbw(double algbw, int nranks) {
  return nranks > 0 ? algbw * 2.0 * (nranks - 1) / nranks : 0.0;
}

const char *bench_format_time(double usec, char *buf, size_t len) {
  if (usec >= 10000.0)
    snprintf(buf, len, "%7.0f", usec);
  else if (usec >= 100.0)
    snprintf(buf, len, "%7.1f", usec);
  else
    snprintf(buf, len, "%7.2f", usec);
  return buf;
}

uint16_t bench_float_to_half(float f) { return acxc_float_to_half(f); }
float bench_half_to_float(uint16_t h) { return acxc_half_to_float(h); }
uint16_t bench_float_to_bf16(float f) { return acxc_float_to_bf16(f); }
float bench_bf16_to_float(uint16_t b) { return acxc_bf16_to_float(b); }

static double get(const void *buf, bench_dtype_t d, size_t i) {
  switch (d) {
  case BENCH_INT8: return ((const int8_t *)buf)[i];
  case BENCH_UINT8: return ((const uint8_t *)buf)[i];
  case BENCH_INT32: return ((const int32_t *)buf)[i];
  case BENCH_UINT32: return ((const uint32_t *)buf)[i];
  case BENCH_INT64: return (double)((const int64_t *)buf)[i];
  case BENCH_UINT64: return (double)((const uint64_t *)buf)[i];
  case BENCH_HALF: return bench_half_to_float(((const uint16_t *)buf)[i]);
  case BENCH_BFLOAT16: return bench_bf16_to_float(((const uint16_t *)buf)[i]);
  case BENCH_FLOAT: return ((const float *)buf)[i];
  case BENCH_DOUBLE: return ((const double *)buf)[i];
  default: return 0;
  }
}

/* v is exactly representable in d whenever it is called (small integers, or an avg quotient). */
static void put(void *buf, bench_dtype_t d, size_t i, double v) {
  switch (d) {
  case BENCH_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
  case BENCH_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
  case BENCH_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
  case BENCH_UINT32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
  case BENCH_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
  case BENCH_UINT64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
  case BENCH_HALF: ((uint16_t *)buf)[i] = bench_float_to_half((float)v); break;
  case BENCH_BFLOAT16: ((uint16_t *)buf)[i] = bench_float_to_bf16((float)v); break;
  case BENCH_FLOAT: ((float *)buf)[i] = (float)v; break;
  case BENCH_DOUBLE: ((double *)buf)[i] = v; break;
  default: break;
  }
}

/* The largest integer a sum may reach and stay exact (and unwrapped) in d. */
static unsigned exact_limit(bench_dtype_t d) {
  switch (d) {
  case BENCH_INT8: return 127;
  case BENCH_UINT8: return 255;
  case BENCH_BFLOAT16: return 256;
  case BENCH_HALF: return 2048;
  default: return 1u << 30;
  }
}

static unsigned value(bench_dtype_t d, bench_op_t op, size_t i, int r, int n, unsigned seed) {
  switch (op) {
  case BENCH_SUM:
  case BENCH_AVG: {
    unsigned vmax = exact_limit(d) / (unsigned)n;
    if (vmax > 3) vmax = 3;
    return (unsigned)((i * 7 + (size_t)r * 3 + seed) % (vmax + 1));
  }
  case BENCH_PROD: { /* a factor 2 from at most 6 ranks per element: the product stays <= 64 */
    unsigned period = ((unsigned)n + 5) / 6;
    return (i + (size_t)r + seed) % period == 0 ? 2 : 1;
  }
  default: return (unsigned)((i * 13 + (size_t)r * 7 + seed) % 17);
  }
}

/* value() repeats in i with this period (it divides it): the data are made for one period and
 * copied on, so that 8 GiB of bfloat16 are not 4 Gi conversions per rank (minutes on the host). */
static size_t period(bench_dtype_t d, bench_op_t op, int n) {
  switch (op) {
  case BENCH_SUM:
  case BENCH_AVG: {
    unsigned vmax = exact_limit(d) / (unsigned)n;
    return (vmax > 3 ? 3 : vmax) + 1;
  }
  case BENCH_PROD: return ((unsigned)n + 5) / 6;
  default: return 17;
  }
}

/* buf holds its first `made` elements: copies them on, doubling, up to count. */
static void replicate(void *buf, size_t es, size_t made, size_t count) {
  unsigned char *b = buf;
  while (made < count) {
    size_t n = made < count - made ? made : count - made;
    memcpy(b + made * es, b, n * es);
    made += n;
  }
}

void bench_fill(void *buf, bench_dtype_t d, bench_op_t op, size_t count, int rank, int nranks, unsigned seed) {
  size_t p = period(d, op, nranks), head = count < p ? count : p;
  for (size_t i = 0; i < head; i++) put(buf, d, i, value(d, op, i, rank, nranks, seed));
  replicate(buf, bench_dtype_size(d), head, count);
}

void bench_expected(void *buf, bench_dtype_t d, bench_op_t op, size_t count, int nranks, unsigned seed) {
  size_t p = period(d, op, nranks), head = count < p ? count : p;
  for (size_t i = 0; i < head; i++) {
    uint64_t acc = op == BENCH_PROD ? 1 : op == BENCH_MIN ? UINT64_MAX : 0;
    for (int r = 0; r < nranks; r++) {
      uint64_t v = value(d, op, i, r, nranks, seed);
      switch (op) {
      case BENCH_PROD: acc *= v; break;
      case BENCH_MAX: acc = v > acc ? v : acc; break;
      case BENCH_MIN: acc = v < acc ? v : acc; break;
      default: acc += v; break;
      }
    }
    double res = (double)acc;
    if (op == BENCH_AVG) res = bench_dtype_is_float(d) ? (double)acc / nranks : (double)(acc / (uint64_t)nranks);
    put(buf, d, i, res);
  }
  replicate(buf, bench_dtype_size(d), head, count);
}

size_t bench_count_wrong(const void *got, const void *expected, bench_dtype_t d, bench_op_t op, size_t count,
                         int nranks) {
  size_t wrong = 0, es = bench_dtype_size(d);
  if (op == BENCH_AVG && bench_dtype_is_float(d)) {
    double ulp = d == BENCH_HALF ? 0x1p-10 : d == BENCH_BFLOAT16 ? 0x1p-7 : d == BENCH_FLOAT ? 0x1p-23 : 0x1p-52;
    double tol = (nranks + 1) * ulp;
    for (size_t i = 0; i < count; i++) {
      double g = get(got, d, i), e = get(expected, d, i);
      if (!(fabs(g - e) <= tol * fmax(1.0, fabs(e)))) wrong++;
    }
    return wrong;
  }
  /* Blocks first: only a block that differs is compared element by element. */
  const unsigned char *a = got, *b = expected;
  const size_t block = 4096;
  for (size_t at = 0; at < count; at += block) {
    size_t n = count - at < block ? count - at : block;
    if (memcmp(a + at * es, b + at * es, n * es) == 0) continue;
    for (size_t i = at; i < at + n; i++)
      if (memcmp(a + i * es, b + i * es, es) != 0) wrong++;
  }
  return wrong;
}

#define REDUCE_LOOP(T)                                                            \
  do {                                                                            \
    T *o = inout;                                                                 \
    const T *x = in;                                                              \
    for (size_t i = 0; i < count; i++) {                                          \
      switch (op) {                                                               \
      case BENCH_PROD: o[i] = (T)(o[i] * x[i]); break;                            \
      case BENCH_MAX: o[i] = x[i] > o[i] ? x[i] : o[i]; break;                    \
      case BENCH_MIN: o[i] = x[i] < o[i] ? x[i] : o[i]; break;                    \
      default: o[i] = (T)(o[i] + x[i]); break;                                    \
      }                                                                           \
    }                                                                             \
  } while (0)

void bench_reduce_local(void *inout, const void *in, bench_dtype_t d, bench_op_t op, size_t count) {
  switch (d) {
  case BENCH_INT8: REDUCE_LOOP(uint8_t); return; /* wraps like NCCL, without signed overflow */
  case BENCH_UINT8: REDUCE_LOOP(uint8_t); return;
  case BENCH_INT32: REDUCE_LOOP(uint32_t); return;
  case BENCH_UINT32: REDUCE_LOOP(uint32_t); return;
  case BENCH_INT64: REDUCE_LOOP(uint64_t); return;
  case BENCH_UINT64: REDUCE_LOOP(uint64_t); return;
  case BENCH_FLOAT: REDUCE_LOOP(float); return;
  case BENCH_DOUBLE: REDUCE_LOOP(double); return;
  default: break;
  }
  /* half and bfloat16: each step computed in float and rounded back, as the GPU does. */
  uint16_t *o = inout;
  const uint16_t *x = in;
  int half = d == BENCH_HALF;
  for (size_t i = 0; i < count; i++) {
    float a = half ? bench_half_to_float(o[i]) : bench_bf16_to_float(o[i]);
    float b = half ? bench_half_to_float(x[i]) : bench_bf16_to_float(x[i]);
    float r = op == BENCH_PROD ? a * b : op == BENCH_MAX ? fmaxf(a, b) : op == BENCH_MIN ? fminf(a, b) : a + b;
    o[i] = half ? bench_float_to_half(r) : bench_float_to_bf16(r);
  }
}

void bench_divide(void *buf, bench_dtype_t d, size_t count, int n) {
  for (size_t i = 0; i < count; i++) {
    switch (d) {
    case BENCH_INT8: ((int8_t *)buf)[i] = (int8_t)(((int8_t *)buf)[i] / n); break;
    case BENCH_UINT8: ((uint8_t *)buf)[i] = (uint8_t)(((uint8_t *)buf)[i] / (unsigned)n); break;
    case BENCH_INT32: ((int32_t *)buf)[i] /= n; break;
    case BENCH_UINT32: ((uint32_t *)buf)[i] /= (uint32_t)n; break;
    case BENCH_INT64: ((int64_t *)buf)[i] /= n; break;
    case BENCH_UINT64: ((uint64_t *)buf)[i] /= (uint64_t)n; break;
    default: put(buf, d, i, get(buf, d, i) / n); break;
    }
  }
}
