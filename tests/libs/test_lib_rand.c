/* cuRAND through acx (runtime/libs/lib_rand.c, lib_rand_exec.c). Default (label gpu): the moments of
 * every distribution in every dtype against their exact values, on poisoned outputs, and
 * reproducibility (same generator, seed, offset and count give the same bits: twice in one
 * context, in a second context, after an executor restart; continued requests against positioned
 * ones for every generator, distribution and dtype). --unit (label unit): validation on a
 * host-kind device, and that refused requests do not move the position. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acx/rand.h"
#include "acx_test.h"
#include "lib_test_util.h"

static acx_device_t *dev;
static acx_rand_t *rng;
static int unit_mode;

static acx_buffer_t *alloc(size_t elems, acx_dtype_t dt) {
  acx_buffer_t *b = NULL;
  ACX_ASSERT_STATUS(acx_buffer_alloc(dev, elems * acx_dtype_size(dt), dt, ACX_MEM_DEVICE, LT_TIMEOUT, &b), ACX_OK);
  return b;
}

/* ---- validation (host kind) ---- */

static void t_validation(void) {
  acx_buffer_t *f = alloc(64, ACX_DTYPE_F32), *u = alloc(64, ACX_DTYPE_U32), *h = alloc(64, ACX_DTYPE_F16);
  acx_rand_t *r = NULL;
  ACX_ASSERT_STATUS(acx_rand_create(dev, NULL, (acx_rand_rng_t)5, 1, &r), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_rand_create(NULL, NULL, ACX_RAND_PHILOX, 1, &r), ACX_ERR_NULL_ARG);
  uint64_t off = 99;
  ACX_ASSERT_STATUS(acx_rand_get_offset(rng, &off), ACX_OK);
  CU_ASSERT_EQUAL(off, 0);
  ACX_ASSERT_STATUS(acx_rand_generate(rng, ACX_RAND_UNIFORM, f, 0, 64, 0, 0, NULL), ACX_ERR_NOT_SUPPORTED);
  ACX_ASSERT_STATUS(acx_rand_generate(rng, ACX_RAND_NORMAL, f, 0, 64, 0, 1, NULL), ACX_ERR_NOT_SUPPORTED);
  ACX_ASSERT_STATUS(acx_rand_generate(rng, ACX_RAND_POISSON, u, 0, 64, 3, 0, NULL), ACX_ERR_NOT_SUPPORTED);
  ACX_ASSERT_STATUS(acx_rand_generate(rng, ACX_RAND_BITS, u, 0, 64, 0, 0, NULL), ACX_ERR_NOT_SUPPORTED);
  ACX_ASSERT_STATUS(acx_rand_generate(rng, (acx_rand_dist_t)9, f, 0, 64, 0, 0, NULL), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_rand_generate(rng, ACX_RAND_UNIFORM, h, 0, 64, 0, 0, NULL), ACX_ERR_BAD_DTYPE);
  ACX_ASSERT_STATUS(acx_rand_generate(rng, ACX_RAND_UNIFORM, u, 0, 64, 0, 0, NULL), ACX_ERR_BAD_DTYPE);
  ACX_ASSERT_STATUS(acx_rand_generate(rng, ACX_RAND_POISSON, f, 0, 64, 3, 0, NULL), ACX_ERR_BAD_DTYPE);
  ACX_ASSERT_STATUS(acx_rand_generate(rng, ACX_RAND_NORMAL, f, 0, 63, 0, 1, NULL), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_rand_generate(rng, ACX_RAND_NORMAL, f, 4, 62, 0, 1, NULL), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_rand_generate(rng, ACX_RAND_NORMAL, f, 8, 62, 0, 1, NULL), ACX_ERR_NOT_SUPPORTED);
  ACX_ASSERT_STATUS(acx_rand_generate(rng, ACX_RAND_NORMAL, f, 0, 64, 0, 0, NULL), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_rand_generate(rng, ACX_RAND_LOG_NORMAL, f, 0, 64, NAN, 1, NULL), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_rand_generate(rng, ACX_RAND_POISSON, u, 0, 64, 0, 0, NULL), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_rand_generate(rng, ACX_RAND_UNIFORM, f, 0, 65, 0, 0, NULL), ACX_ERR_OUT_OF_RANGE);
  ACX_ASSERT_STATUS(acx_rand_generate(rng, ACX_RAND_UNIFORM, f, 8, 63, 0, 0, NULL), ACX_ERR_OUT_OF_RANGE);
  ACX_ASSERT_STATUS(acx_rand_generate(rng, ACX_RAND_UNIFORM, f, 2, 8, 0, 0, NULL), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_rand_generate(rng, ACX_RAND_UNIFORM, NULL, 0, 8, 0, 0, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_rand_generate(NULL, ACX_RAND_UNIFORM, f, 0, 8, 0, 0, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_rand_get_offset(rng, &off), ACX_OK);
  CU_ASSERT_EQUAL(off, 0); /* nothing was drawn */
  ACX_ASSERT_STATUS(acx_rand_set_offset(rng, 1234), ACX_OK);
  ACX_ASSERT_STATUS(acx_rand_get_offset(rng, &off), ACX_OK);
  CU_ASSERT_EQUAL(off, 1234);
  acx_buffer_t *g = alloc(8, ACX_DTYPE_F32);
  ACX_ASSERT_STATUS(acx_buffer_free(g, LT_TIMEOUT), ACX_OK);
  ACX_ASSERT_STATUS(acx_rand_generate(rng, ACX_RAND_UNIFORM, g, 0, 8, 0, 0, NULL), ACX_ERR_INVALID_STATE);
  acx_buffer_release(g);
  acx_buffer_release(f);
  acx_buffer_release(u);
  acx_buffer_release(h);
}

/* ---- GPU ---- */

static double *draw(acx_rand_t *r, acx_rand_dist_t dist, acx_dtype_t dt, size_t n, double p0, double p1) {
  acx_buffer_t *b = lt_poisoned(dev, n, dt);
  ACX_ASSERT_STATUS(acx_rand_generate(r, dist, b, 0, n, p0, p1, NULL), ACX_OK);
  double *v = malloc(n * sizeof *v);
  lt_read(b, 0, v, n);
  acx_buffer_release(b);
  return v;
}

static void moments(const double *v, size_t n, double *mean, double *var) {
  double s = 0, s2 = 0;
  for (size_t i = 0; i < n; i++) s += v[i];
  *mean = s / n;
  for (size_t i = 0; i < n; i++) s2 += (v[i] - *mean) * (v[i] - *mean);
  *var = s2 / (n - 1);
}

/* |sample mean - mu| within 6 standard errors, variance within 2% (n = 2^20). */
static void check_moments(const char *what, const double *v, size_t n, double mu, double var_exp) {
  double m, var;
  moments(v, n, &m, &var);
  double se = sqrt(var_exp / n);
  if (fabs(m - mu) > 6 * se || fabs(var / var_exp - 1) > 0.02)
    printf("\n  %s: mean %.6g (expected %.6g +- %.2g), variance %.6g (expected %.6g)\n", what, m, mu, 6 * se, var,
           var_exp);
  CU_ASSERT(fabs(m - mu) <= 6 * se);
  CU_ASSERT(fabs(var / var_exp - 1) <= 0.02);
}

static void t_distributions(void) {
  const size_t n = 1u << 20;
  const acx_rand_rng_t rngs[] = {ACX_RAND_PHILOX, ACX_RAND_XORWOW, ACX_RAND_MRG32K3A};
  const acx_dtype_t dts[] = {ACX_DTYPE_F32, ACX_DTYPE_F64};
  for (int g = 0; g < 3; g++) {
    acx_rand_t *r = NULL;
    ACX_ASSERT_STATUS(acx_rand_create(dev, NULL, rngs[g], 1000 + g, &r), ACX_OK);
    for (int t = 0; t < 2; t++) {
      char what[64];
      double *v = draw(r, ACX_RAND_UNIFORM, dts[t], n, 0, 0);
      int in = 1;
      for (size_t i = 0; i < n; i++) in &= v[i] > 0 && v[i] <= 1;
      CU_ASSERT(in);
      snprintf(what, sizeof what, "uniform rng %d %s", g, acx_dtype_name(dts[t]));
      check_moments(what, v, n, 0.5, 1.0 / 12);
      free(v);
      v = draw(r, ACX_RAND_NORMAL, dts[t], n, 2.0, 3.0);
      snprintf(what, sizeof what, "normal rng %d %s", g, acx_dtype_name(dts[t]));
      check_moments(what, v, n, 2.0, 9.0);
      free(v);
      v = draw(r, ACX_RAND_LOG_NORMAL, dts[t], n, 0.5, 0.25);
      int pos = 1;
      for (size_t i = 0; i < n; i++) pos &= v[i] > 0, v[i] = log(v[i]);
      CU_ASSERT(pos);
      snprintf(what, sizeof what, "log-normal rng %d %s (log)", g, acx_dtype_name(dts[t]));
      check_moments(what, v, n, 0.5, 0.0625);
      free(v);
    }
    double *v = draw(r, ACX_RAND_POISSON, ACX_DTYPE_U32, n, 4.5, 0);
    check_moments("poisson 4.5", v, n, 4.5, 4.5);
    free(v);
    acx_buffer_t *b = lt_poisoned(dev, n, ACX_DTYPE_U32);
    ACX_ASSERT_STATUS(acx_rand_generate(r, ACX_RAND_BITS, b, 0, n, 0, 0, NULL), ACX_OK);
    uint32_t *bits = malloc(n * 4);
    lt_read_raw(b, 0, bits, n);
    size_t ones[32] = {0}, all_ff = 0;
    for (size_t i = 0; i < n; i++) {
      all_ff += bits[i] == 0xffffffffu;
      for (int k = 0; k < 32; k++) ones[k] += (bits[i] >> k) & 1;
    }
    for (int k = 0; k < 32; k++) CU_ASSERT(fabs((double)ones[k] / n - 0.5) < 6 * 0.5 / sqrt((double)n));
    CU_ASSERT(all_ff < 8); /* the poison pattern would show as a pile of 0xffffffff */
    free(bits);
    acx_buffer_release(b);
    ACX_ASSERT_STATUS(acx_rand_destroy(r), ACX_OK);
  }
}

static void get_bits(acx_rand_t *r, size_t n, uint32_t *out) {
  acx_buffer_t *b = lt_poisoned(dev, n, ACX_DTYPE_F32);
  ACX_ASSERT_STATUS(acx_rand_generate(r, ACX_RAND_NORMAL, b, 0, n, 0.0, 1.0, NULL), ACX_OK);
  lt_read_raw(b, 0, out, n);
  acx_buffer_release(b);
}

static void t_reproducible(void) {
  const size_t n = 1u << 16;
  uint32_t *a = malloc(n * 4), *b = malloc(n * 4), *c = malloc(n * 4), *d = malloc(n * 4);
  acx_rand_t *r1 = NULL, *r2 = NULL, *r3 = NULL;
  ACX_ASSERT_STATUS(acx_rand_create(dev, NULL, ACX_RAND_PHILOX, 42, &r1), ACX_OK);
  ACX_ASSERT_STATUS(acx_rand_create(dev, NULL, ACX_RAND_PHILOX, 42, &r2), ACX_OK);
  ACX_ASSERT_STATUS(acx_rand_create(dev, NULL, ACX_RAND_PHILOX, 43, &r3), ACX_OK);
  get_bits(r1, n, a);
  get_bits(r1, n, b); /* the position moved: new numbers */
  CU_ASSERT(memcmp(a, b, n * 4) != 0);
  uint64_t off;
  ACX_ASSERT_STATUS(acx_rand_get_offset(r1, &off), ACX_OK);
  CU_ASSERT_EQUAL(off, 2 * n);
  get_bits(r2, n, c); /* same seed, offset 0 */
  CU_ASSERT(memcmp(a, c, n * 4) == 0);
  get_bits(r3, n, d); /* another seed */
  CU_ASSERT(memcmp(a, d, n * 4) != 0);
  ACX_ASSERT_STATUS(acx_rand_set_offset(r3, n), ACX_OK); /* r3's generator is reseeded below */
  ACX_ASSERT_STATUS(acx_rand_destroy(r3), ACX_OK);
  ACX_ASSERT_STATUS(acx_rand_create(dev, NULL, ACX_RAND_PHILOX, 42, &r3), ACX_OK);
  ACX_ASSERT_STATUS(acx_rand_set_offset(r3, n), ACX_OK); /* jump straight to the second batch */
  get_bits(r3, n, d);
  CU_ASSERT(memcmp(b, d, n * 4) == 0);
  /* After a restart the new executor's generators give the same numbers at the same position. */
  uint64_t g0, g = 0;
  ACX_ASSERT_STATUS(acx_device_generation(dev, &g0), ACX_OK);
  ACX_ASSERT_STATUS(acx_device_inject_fault(dev, 0, LT_TIMEOUT), ACX_ERR_DEVICE_LOST);
  for (int i = 0; i < 20000 && (acx_device_generation(dev, &g), g == g0); i++) usleep(1000);
  CU_ASSERT(g > g0);
  for (int i = 0; i < 20000 && acx_device_ping(dev, LT_TIMEOUT) != ACX_OK; i++) usleep(1000);
  ACX_ASSERT_STATUS(acx_rand_set_offset(r1, 0), ACX_OK);
  get_bits(r1, n, c);
  CU_ASSERT(memcmp(a, c, n * 4) == 0);
  ACX_ASSERT_STATUS(acx_rand_destroy(r1), ACX_OK);
  ACX_ASSERT_STATUS(acx_rand_destroy(r2), ACX_OK);
  ACX_ASSERT_STATUS(acx_rand_destroy(r3), ACX_OK);
  free(a);
  free(b);
  free(c);
  free(d);
}

/* A request's numbers depend only on its position, however the executor's generator got there:
 * a context on stream 0 draws a run of requests forward (each continuing where the last ended,
 * where the executor may skip setting cuRAND's offset), a second context with the same seed on
 * stream 1 (its own generator) draws the same positions backwards (each one set), and the bits
 * must agree, for every generator, distribution and dtype, with counts that are and are not
 * whole 4-number blocks. */
static void t_positional(void) {
  static const struct { acx_rand_dist_t dist; acx_dtype_t dt; double p0, p1; const char *name; } kinds[] = {
      {ACX_RAND_UNIFORM, ACX_DTYPE_F32, 0, 0, "uniform f32"},   {ACX_RAND_UNIFORM, ACX_DTYPE_F64, 0, 0, "uniform f64"},
      {ACX_RAND_NORMAL, ACX_DTYPE_F32, 1, 2, "normal f32"},     {ACX_RAND_NORMAL, ACX_DTYPE_F64, 1, 2, "normal f64"},
      {ACX_RAND_LOG_NORMAL, ACX_DTYPE_F32, 0, 0.5, "log-normal f32"},
      {ACX_RAND_LOG_NORMAL, ACX_DTYPE_F64, 0, 0.5, "log-normal f64"},
      {ACX_RAND_BITS, ACX_DTYPE_U32, 0, 0, "bits"},             {ACX_RAND_POISSON, ACX_DTYPE_U32, 4, 0, "poisson"}};
  static const char *rngs[] = {"philox", "xorwow", "mrg32k3a"};
  static const size_t counts[] = {4096, 1002, 998, 3000, 65536, 6}; /* even: normal draws pairs */
  enum { NC = sizeof counts / sizeof counts[0] };
  size_t total = 0, at[NC];
  for (int i = 0; i < NC; i++) at[i] = total, total += counts[i];
  acx_lib_config_t c1 = ACX_LIB_CONFIG_INIT;
  c1.stream = 1;
  for (int g = 0; g < 3; g++)
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
      acx_dtype_t dt = kinds[k].dt;
      size_t es = acx_dtype_size(dt);
      acx_rand_t *fwd = NULL, *back = NULL;
      ACX_ASSERT_STATUS(acx_rand_create(dev, NULL, (acx_rand_rng_t)g, 1000 + (uint64_t)k, &fwd), ACX_OK);
      ACX_ASSERT_STATUS(acx_rand_create(dev, &c1, (acx_rand_rng_t)g, 1000 + (uint64_t)k, &back), ACX_OK);
      acx_buffer_t *a = lt_poisoned(dev, total, dt), *b = lt_poisoned(dev, total, dt);
      for (int i = 0; i < NC; i++)
        ACX_ASSERT_STATUS(acx_rand_generate(fwd, kinds[k].dist, a, at[i] * es, counts[i], kinds[k].p0, kinds[k].p1, NULL),
                          ACX_OK);
      for (int i = NC - 1; i >= 0; i--) {
        ACX_ASSERT_STATUS(acx_rand_set_offset(back, at[i]), ACX_OK);
        ACX_ASSERT_STATUS(acx_rand_generate(back, kinds[k].dist, b, at[i] * es, counts[i], kinds[k].p0, kinds[k].p1, NULL),
                          ACX_OK);
      }
      unsigned char *va = malloc(total * es), *vb = malloc(total * es);
      CU_ASSERT_PTR_NOT_NULL_FATAL(va && vb);
      lt_read_raw(a, 0, va, total);
      lt_read_raw(b, 0, vb, total);
      size_t bad = 0, first = total;
      for (size_t e = 0; e < total; e++)
        if (memcmp(va + e * es, vb + e * es, es)) {
          bad++;
          if (first == total) first = e;
        }
      if (bad) printf("\n  %s %s: %zu of %zu numbers differ between continued and positioned requests (first at %zu)",
                      rngs[g], kinds[k].name, bad, total, first);
      CU_ASSERT_EQUAL(bad, 0);
      free(va);
      free(vb);
      acx_buffer_release(a);
      acx_buffer_release(b);
      ACX_ASSERT_STATUS(acx_rand_destroy(fwd), ACX_OK);
      ACX_ASSERT_STATUS(acx_rand_destroy(back), ACX_OK);
    }
}

static int setup(void) {
  if (acx_system_create(NULL, &lt_sys) != ACX_OK) return 1;
  dev = unit_mode ? lt_open_host(2) : lt_open_cuda(2);
  return acx_rand_create(dev, NULL, ACX_RAND_PHILOX, 7, &rng) != ACX_OK;
}

static int teardown(void) {
  int bad = acx_rand_destroy(rng) != ACX_OK;
  bad |= acx_device_close(dev, LT_TIMEOUT) != ACX_OK;
  bad |= acx_system_destroy(lt_sys, LT_TIMEOUT) != ACX_OK;
  return bad;
}

int main(int argc, char **argv) {
  unit_mode = argc > 1 && !strcmp(argv[1], "--unit");
  static const acx_test_case_t unit_cases[] = {ACX_TEST(t_validation), ACX_TEST_END};
  static const acx_test_case_t gpu_cases[] = {ACX_TEST(t_distributions), ACX_TEST(t_reproducible),
                                              ACX_TEST(t_positional), ACX_TEST_END};
  if (!unit_mode && access("/dev/nvidiactl", F_OK) != 0) acx_test_skip("no GPU on this machine");
  return acx_test_run(unit_mode ? "lib_rand_unit" : "lib_rand", unit_mode ? unit_cases : gpu_cases, setup, teardown);
}
