/* bench/allreduce/bench_util.c: size parsing, the nccl-tests formulas, half/bfloat16 rounding,
 * and that the benchmark's data reduce exactly to bench_expected in every type and op while a
 * single corrupted element is counted. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "acx_test.h"
#include "bench_util.h"

static void test_parse_size(void) {
  size_t v = 0;
  CU_ASSERT(bench_parse_size("8", &v) == 0 && v == 8);
  CU_ASSERT(bench_parse_size("64K", &v) == 0 && v == 65536);
  CU_ASSERT(bench_parse_size("128M", &v) == 0 && v == 128u << 20);
  CU_ASSERT(bench_parse_size("8G", &v) == 0 && v == (size_t)8 << 30);
  CU_ASSERT(bench_parse_size("1m", &v) == 0 && v == 1u << 20);
  CU_ASSERT(bench_parse_size("2KB", &v) == 0 && v == 2048);
  CU_ASSERT_EQUAL(bench_parse_size("", &v), -1);
  CU_ASSERT_EQUAL(bench_parse_size("K", &v), -1);
  CU_ASSERT_EQUAL(bench_parse_size("12X", &v), -1);
  CU_ASSERT_EQUAL(bench_parse_size("-5", &v), -1);
  CU_ASSERT_EQUAL(bench_parse_size("1Kx", &v), -1);
  CU_ASSERT_EQUAL(bench_parse_size("99999999999999G", &v), -1);
  CU_ASSERT_EQUAL(bench_parse_size(NULL, &v), -1);
}

static void test_names(void) {
  bench_dtype_t d;
  bench_op_t o;
  for (int i = 0; i < BENCH_DTYPE_COUNT; i++) {
    CU_ASSERT(bench_dtype_parse(bench_dtype_name((bench_dtype_t)i), &d) == 0 && d == (bench_dtype_t)i);
  }
  CU_ASSERT(bench_dtype_parse("bfloat16", &d) == 0 && d == BENCH_BFLOAT16 && bench_dtype_size(d) == 2);
  CU_ASSERT(bench_dtype_parse("double", &d) == 0 && bench_dtype_size(d) == 8);
  CU_ASSERT_EQUAL(bench_dtype_parse("fp32", &d), -1);
  CU_ASSERT(bench_op_parse("avg", &o) == 0 && o == BENCH_AVG);
  CU_ASSERT_STRING_EQUAL(bench_op_name(BENCH_PROD), "prod");
  CU_ASSERT_EQUAL(bench_op_parse("mean", &o), -1);
}

static void test_sizes(void) {
  size_t s[64];
  int n = bench_sizes(8, 128u << 20, 2, 4, s, 64);
  CU_ASSERT_EQUAL(n, 25);
  CU_ASSERT(s[0] == 8 && s[24] == 128u << 20);
  n = bench_sizes(1, 16, 2, 4, s, 64); /* 1 and 2 bytes hold no float: dropped */
  CU_ASSERT(n == 3 && s[0] == 4 && s[1] == 8 && s[2] == 16);
  n = bench_sizes(6, 100, 3, 4, s, 64); /* 6, 18, 54 round down to 4, 16, 52 */
  CU_ASSERT(n == 3 && s[0] == 4 && s[1] == 16 && s[2] == 52);
  CU_ASSERT_EQUAL(bench_sizes(8, 8, 1, 4, s, 64), 1);
  CU_ASSERT_EQUAL(bench_sizes(16, 8, 2, 4, s, 64), -1);
  CU_ASSERT_EQUAL(bench_sizes(8, 64, 1, 4, s, 64), -1);
  CU_ASSERT_EQUAL(bench_sizes(0, 64, 2, 4, s, 64), -1);
  CU_ASSERT_EQUAL(bench_sizes(1, 3, 2, 4, s, 64), 0);
  CU_ASSERT_EQUAL(bench_sizes(8, (size_t)1 << 62, 2, 1, s, 4), 60); /* counts past max_out, no overflow */
}

static void test_bandwidth_formulas(void) {
  CU_ASSERT_DOUBLE_EQUAL(bench_algbw(1000000000, 1.0), 1.0, 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(bench_algbw((size_t)8 << 30, 0.0245), 350.6, 0.1); /* 8 GiB in 24.5 ms */
  CU_ASSERT_DOUBLE_EQUAL(bench_allreduce_busbw(1.0, 2), 1.0, 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(bench_allreduce_busbw(1.0, 4), 1.5, 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(bench_allreduce_busbw(10.0, 8), 17.5, 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(bench_allreduce_busbw(10.0, 1), 0.0, 1e-12);
  char t[32];
  CU_ASSERT_STRING_EQUAL(bench_format_time(6.5, t, sizeof t), "   6.50");
  CU_ASSERT_STRING_EQUAL(bench_format_time(123.45, t, sizeof t), "  123.5");
  CU_ASSERT_STRING_EQUAL(bench_format_time(24512.7, t, sizeof t), "  24513");
}

static void test_half_bfloat16(void) {
  CU_ASSERT_EQUAL(bench_float_to_half(1.0f), 0x3c00);
  CU_ASSERT_EQUAL(bench_float_to_half(-2.0f), 0xc000);
  CU_ASSERT_EQUAL(bench_float_to_half(65504.0f), 0x7bff);
  CU_ASSERT_EQUAL(bench_float_to_half(70000.0f), 0x7c00);
  CU_ASSERT_EQUAL(bench_float_to_half(2049.0f), bench_float_to_half(2048.0f)); /* tie to even */
  CU_ASSERT_EQUAL(bench_float_to_half(2051.0f), bench_float_to_half(2052.0f));
  CU_ASSERT_EQUAL(bench_float_to_half(0x1p-24f), 0x0001); /* smallest subnormal */
  CU_ASSERT_EQUAL(bench_float_to_half(0x1p-26f), 0x0000);
  CU_ASSERT_EQUAL(bench_float_to_bf16(257.0f), bench_float_to_bf16(256.0f));
  CU_ASSERT_EQUAL(bench_float_to_bf16(259.0f), bench_float_to_bf16(260.0f));
  CU_ASSERT_EQUAL(bench_float_to_bf16(1.0f), 0x3f80);
  int bad_h = 0, bad_b = 0;
  for (uint32_t v = 0; v < 65536; v++) { /* every finite value survives the round trip */
    uint16_t h = (uint16_t)v;
    if ((h & 0x7c00) != 0x7c00 && bench_float_to_half(bench_half_to_float(h)) != h) bad_h++;
    if ((h & 0x7f80) != 0x7f80 && bench_float_to_bf16(bench_bf16_to_float(h)) != h) bad_b++;
  }
  CU_ASSERT_EQUAL(bad_h, 0);
  CU_ASSERT_EQUAL(bad_b, 0);
  CU_ASSERT(isnan(bench_half_to_float(bench_float_to_half(NAN))));
  CU_ASSERT(isnan(bench_bf16_to_float(bench_float_to_bf16(NAN))));
}

/* What MPI or NCCL do, done here: reduce every rank's input in rank order (and in reverse), then
 * compare with bench_expected; then corrupt one element and see it counted. */
static void test_data_reduce_exactly(void) {
  const int ranks[] = {1, 2, 3, 8, 64};
  const size_t count = 301;
  unsigned char in[301 * 8], acc[301 * 8], rev[301 * 8], exp[301 * 8];
  for (int d = 0; d < BENCH_DTYPE_COUNT; d++)
    for (int op = 0; op < BENCH_OP_COUNT; op++)
      for (size_t k = 0; k < sizeof ranks / sizeof ranks[0]; k++) {
        int n = ranks[k];
        bench_dtype_t dt = (bench_dtype_t)d;
        bench_op_t o = (bench_op_t)op;
        size_t es = bench_dtype_size(dt);
        bench_fill(acc, dt, o, count, 0, n, 5);
        bench_fill(rev, dt, o, count, n - 1, n, 5);
        for (int r = 1; r < n; r++) {
          bench_fill(in, dt, o, count, r, n, 5);
          bench_reduce_local(acc, in, dt, o, count);
          bench_fill(in, dt, o, count, n - 1 - r, n, 5);
          bench_reduce_local(rev, in, dt, o, count);
        }
        if (o == BENCH_AVG) {
          bench_divide(acc, dt, count, n);
          bench_divide(rev, dt, count, n);
        }
        bench_expected(exp, dt, o, count, n, 5);
        size_t w1 = bench_count_wrong(acc, exp, dt, o, count, n), w2 = bench_count_wrong(rev, exp, dt, o, count, n);
        if (w1 || w2) printf("\n  %s %s n=%d: %zu / %zu wrong", bench_dtype_name(dt), bench_op_name(o), n, w1, w2);
        CU_ASSERT_EQUAL(w1, 0);
        CU_ASSERT_EQUAL(w2, 0);
        memcpy(in, acc, count * es);
        memset(in + 17 * es, 0x5a, es); /* 0x5a... is none of the small values the data holds */
        CU_ASSERT_EQUAL(bench_count_wrong(in, exp, dt, o, count, n), 1);
      }
  /* Made for one period and copied on: every element of a long fill is the formula's own
   * (a float sum over 2 ranks: (i * 7 + rank * 3 + seed) % 4), and a wrong element deep in the
   * buffer is counted (the comparison goes by blocks first). */
  const size_t big = 100003;
  float *fb = malloc(big * sizeof *fb), *fe = malloc(big * sizeof *fe);
  CU_ASSERT_PTR_NOT_NULL_FATAL(fb);
  CU_ASSERT_PTR_NOT_NULL_FATAL(fe);
  bench_fill(fb, BENCH_FLOAT, BENCH_SUM, big, 1, 2, 5);
  size_t off = 0;
  for (size_t i = 0; i < big; i++) off += fb[i] != (float)((i * 7 + 1 * 3 + 5) % 4);
  CU_ASSERT_EQUAL(off, 0);
  bench_expected(fe, BENCH_FLOAT, BENCH_SUM, big, 2, 5);
  off = 0;
  for (size_t i = 0; i < big; i++) off += fe[i] != (float)((i * 7 + 5) % 4 + (i * 7 + 3 + 5) % 4);
  CU_ASSERT_EQUAL(off, 0);
  memcpy(fb, fe, big * sizeof *fb);
  CU_ASSERT_EQUAL(bench_count_wrong(fb, fe, BENCH_FLOAT, BENCH_SUM, big, 2), 0);
  fb[big - 2] = 1000.0f;
  fb[70000] = -1.0f;
  CU_ASSERT_EQUAL(bench_count_wrong(fb, fe, BENCH_FLOAT, BENCH_SUM, big, 2), 2);
  free(fb);
  free(fe);
  /* The data is not trivial: a sum over 2 ranks holds more than one distinct value. */
  float f[64];
  bench_expected(f, BENCH_FLOAT, BENCH_SUM, 64, 2, 0);
  int distinct = 0;
  for (int i = 1; i < 64; i++) distinct += f[i] != f[0];
  CU_ASSERT(distinct > 10);
}

int main(void) {
  static const acx_test_case_t cases[] = {
      ACX_TEST(test_parse_size),         ACX_TEST(test_names),         ACX_TEST(test_sizes),
      ACX_TEST(test_bandwidth_formulas), ACX_TEST(test_half_bfloat16), ACX_TEST(test_data_reduce_exactly),
      ACX_TEST_END};
  return acx_test_run("bench_util", cases, NULL, NULL);
}
