/* cuFFT through acx (runtime/libs/lib_fft.c, lib_fft_exec.c). Default (label gpu): C2C forward and
 * inverse, R2C and C2R, in 1D/2D/3D, batched, f32 and f64, in place and out of place, against a
 * double-precision DFT on fresh random inputs with poisoned outputs; plans reused across calls.
 * --unit (label unit): validation on a host-kind device. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acx/fft.h"
#include "acx_test.h"
#include "lib_test_util.h"

static acx_device_t *dev;
static acx_fft_t *fft;
static int unit_mode;

static acx_buffer_t *alloc(size_t elems, acx_dtype_t dt) {
  acx_buffer_t *b = NULL;
  ACX_ASSERT_STATUS(acx_buffer_alloc(dev, elems * acx_dtype_size(dt), dt, ACX_MEM_DEVICE, LT_TIMEOUT, &b), ACX_OK);
  return b;
}

/* ---- validation ---- */

static void t_validation(void) {
  acx_buffer_t *a = alloc(64, ACX_DTYPE_F32), *b = alloc(64, ACX_DTYPE_F32), *d64 = alloc(64, ACX_DTYPE_F64);
  acx_buffer_t *i32 = alloc(64, ACX_DTYPE_I32);
  acx_fft_desc_t d = ACX_FFT_DESC_INIT;
  d.n[0] = 16, d.in = a, d.out = b; /* C2C of 16 complex = 32 floats each */
  ACX_ASSERT_STATUS(acx_fft_exec(fft, &d, NULL), ACX_ERR_NOT_SUPPORTED);
  acx_fft_desc_t e = d;
  e.out = a; /* in place, C2C: allowed */
  ACX_ASSERT_STATUS(acx_fft_exec(fft, &e, NULL), ACX_ERR_NOT_SUPPORTED);
  e = d, e.out = a, e.out_offset = 8; /* overlapping, shifted */
  ACX_ASSERT_STATUS(acx_fft_exec(fft, &e, NULL), ACX_ERR_INVALID_ARG);
  e = d, e.type = ACX_FFT_R2C, e.out = a; /* R2C in place */
  ACX_ASSERT_STATUS(acx_fft_exec(fft, &e, NULL), ACX_ERR_INVALID_ARG);
  e = d, e.type = ACX_FFT_R2C, e.out = a, e.out_offset = 64; /* 16 reals in, 9 complex out: disjoint */
  ACX_ASSERT_STATUS(acx_fft_exec(fft, &e, NULL), ACX_ERR_NOT_SUPPORTED);
  e = d, e.type = ACX_FFT_R2C, e.n[0] = 60; /* 31 complex out = 62 floats: fits; 60 in: fits */
  ACX_ASSERT_STATUS(acx_fft_exec(fft, &e, NULL), ACX_ERR_NOT_SUPPORTED);
  e = d, e.type = ACX_FFT_R2C, e.n[0] = 64; /* 33 complex out = 66 floats > 64 */
  ACX_ASSERT_STATUS(acx_fft_exec(fft, &e, NULL), ACX_ERR_OUT_OF_RANGE);
  e = d, e.type = ACX_FFT_C2R, e.n[0] = 64, e.direction = 0; /* direction implied; 66 floats in > 64 */
  ACX_ASSERT_STATUS(acx_fft_exec(fft, &e, NULL), ACX_ERR_OUT_OF_RANGE);
  e = d, e.batch = 3; /* 96 floats > 64 */
  ACX_ASSERT_STATUS(acx_fft_exec(fft, &e, NULL), ACX_ERR_OUT_OF_RANGE);
  e = d, e.rank = 2, e.n[1] = 2; /* 16 x 2 complex = 64 floats */
  ACX_ASSERT_STATUS(acx_fft_exec(fft, &e, NULL), ACX_ERR_NOT_SUPPORTED);
  e = d, e.rank = 0;
  ACX_ASSERT_STATUS(acx_fft_exec(fft, &e, NULL), ACX_ERR_INVALID_ARG);
  e = d, e.rank = 4;
  ACX_ASSERT_STATUS(acx_fft_exec(fft, &e, NULL), ACX_ERR_INVALID_ARG);
  e = d, e.rank = 2, e.n[1] = 0;
  ACX_ASSERT_STATUS(acx_fft_exec(fft, &e, NULL), ACX_ERR_INVALID_ARG);
  e = d, e.batch = 0;
  ACX_ASSERT_STATUS(acx_fft_exec(fft, &e, NULL), ACX_ERR_INVALID_ARG);
  e = d, e.direction = 0;
  ACX_ASSERT_STATUS(acx_fft_exec(fft, &e, NULL), ACX_ERR_INVALID_ARG);
  e = d, e.type = (acx_fft_type_t)5;
  ACX_ASSERT_STATUS(acx_fft_exec(fft, &e, NULL), ACX_ERR_INVALID_ARG);
  e = d, e.out = d64;
  ACX_ASSERT_STATUS(acx_fft_exec(fft, &e, NULL), ACX_ERR_BAD_DTYPE);
  e = d, e.in = i32;
  ACX_ASSERT_STATUS(acx_fft_exec(fft, &e, NULL), ACX_ERR_BAD_DTYPE);
  e = d, e.in = NULL;
  ACX_ASSERT_STATUS(acx_fft_exec(fft, &e, NULL), ACX_ERR_NULL_ARG);
  e = d, e.size = 4;
  ACX_ASSERT_STATUS(acx_fft_exec(fft, &e, NULL), ACX_ERR_INVALID_ARG);
  e = d, e.rank = 3, e.n[1] = INT64_MAX / 2, e.n[2] = 4;
  ACX_ASSERT_STATUS(acx_fft_exec(fft, &e, NULL), ACX_ERR_OVERFLOW);
  ACX_ASSERT_STATUS(acx_fft_exec(NULL, &d, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_fft_exec(fft, NULL, NULL), ACX_ERR_NULL_ARG);
  acx_buffer_release(a);
  acx_buffer_release(b);
  acx_buffer_release(d64);
  acx_buffer_release(i32);
}

/* ---- GPU ---- */

/* In-place DFT of a row-major complex array (interleaved doubles) along every axis. */
static void dft_nd(double *z, int rank, const int64_t *n, int sign) {
  int64_t total = 1;
  for (int i = 0; i < rank; i++) total *= n[i];
  for (int ax = 0; ax < rank; ax++) {
    int64_t len = n[ax], inner = 1;
    for (int j = ax + 1; j < rank; j++) inner *= n[j];
    int64_t outer = total / (len * inner);
    double *tmp = malloc((size_t)len * 16);
    for (int64_t o = 0; o < outer; o++)
      for (int64_t in = 0; in < inner; in++) {
        for (int64_t k = 0; k < len; k++) {
          double re = 0, im = 0;
          for (int64_t j = 0; j < len; j++) {
            double ang = sign * 2 * M_PI * (double)((k * j) % len) / (double)len;
            const double *v = z + 2 * ((o * len + j) * inner + in);
            re += v[0] * cos(ang) - v[1] * sin(ang);
            im += v[0] * sin(ang) + v[1] * cos(ang);
          }
          tmp[2 * k] = re, tmp[2 * k + 1] = im;
        }
        for (int64_t k = 0; k < len; k++) {
          double *v = z + 2 * ((o * len + k) * inner + in);
          v[0] = tmp[2 * k], v[1] = tmp[2 * k + 1];
        }
      }
    free(tmp);
  }
}

static double tol_of(acx_dtype_t dt) { return dt == ACX_DTYPE_F64 ? 1e-12 : 2e-5; }

static void fft_case(acx_fft_type_t type, acx_dtype_t dt, int rank, int64_t n0, int64_t n1, int64_t n2, int64_t batch,
                     int dir, int in_place, uint64_t seed) {
  int64_t n[3] = {n0, n1, n2}, full = 1, half = 1;
  for (int i = 0; i < rank; i++) full *= n[i], half *= i == rank - 1 ? n[i] / 2 + 1 : n[i];
  size_t in_el = (size_t)(type == ACX_FFT_R2C ? full : type == ACX_FFT_C2R ? 2 * half : 2 * full);
  size_t out_el = (size_t)(type == ACX_FFT_R2C ? 2 * half : type == ACX_FFT_C2R ? full : 2 * full);
  double *in = malloc(in_el * batch * 8), *ref = malloc(out_el * batch * 8), *got = malloc(out_el * batch * 8);
  double *z = malloc((size_t)full * 16);
  for (int64_t b = 0; b < batch; b++) {
    if (type == ACX_FFT_C2C) {
      lt_random(in + b * in_el, in_el, seed + (uint64_t)b);
      lt_round(in + b * in_el, in_el, dt);
      memcpy(z, in + b * in_el, (size_t)full * 16);
      dft_nd(z, rank, n, dir);
      memcpy(ref + b * out_el, z, (size_t)full * 16);
    } else {
      /* A real signal x: R2C maps x to its half spectrum; C2R maps that half spectrum back to
       * full * x (unnormalised). */
      double *x = malloc((size_t)full * 8);
      lt_random(x, (size_t)full, seed + (uint64_t)b);
      lt_round(x, (size_t)full, dt);
      for (int64_t i = 0; i < full; i++) z[2 * i] = x[i], z[2 * i + 1] = 0;
      dft_nd(z, rank, n, -1);
      int64_t last = n[rank - 1], h = last / 2 + 1, rows = full / last;
      double *spec = type == ACX_FFT_R2C ? ref + b * out_el : in + b * in_el;
      for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < h; k++) {
          spec[2 * (r * h + k)] = z[2 * (r * last + k)];
          spec[2 * (r * h + k) + 1] = z[2 * (r * last + k) + 1];
        }
      if (type == ACX_FFT_R2C) {
        memcpy(in + b * in_el, x, (size_t)full * 8);
      } else {
        lt_round(spec, (size_t)(2 * half), dt);
        for (int64_t i = 0; i < full; i++) ref[b * out_el + i] = (double)full * x[i];
      }
      free(x);
    }
  }
  acx_buffer_t *bi = lt_poisoned(dev, in_el * batch, dt);
  acx_buffer_t *bo = in_place ? bi : lt_poisoned(dev, out_el * batch, dt);
  lt_write(bi, 0, in, in_el * batch);
  acx_fft_desc_t d = ACX_FFT_DESC_INIT;
  d.type = type, d.rank = rank, d.n[0] = n0, d.n[1] = n1, d.n[2] = n2, d.batch = batch, d.direction = dir;
  d.in = bi, d.out = bo;
  ACX_ASSERT_STATUS(acx_fft_exec(fft, &d, NULL), ACX_OK);
  lt_read(bo, 0, got, out_el * batch);
  char what[128];
  snprintf(what, sizeof what, "%s %s rank %d (%lld %lld %lld) batch %lld dir %d%s",
           type == ACX_FFT_C2C ? "C2C" : type == ACX_FFT_R2C ? "R2C" : "C2R", acx_dtype_name(dt), rank, (long long)n0,
           (long long)n1, (long long)n2, (long long)batch, dir, in_place ? " in place" : "");
  LT_CHECK_ERR(what, lt_rel_err(got, ref, out_el * batch), tol_of(dt));
  free(in);
  free(ref);
  free(got);
  free(z);
  acx_buffer_release(bi);
  if (!in_place) acx_buffer_release(bo);
}

static void t_c2c(void) {
  const acx_dtype_t dts[] = {ACX_DTYPE_F32, ACX_DTYPE_F64};
  for (int t = 0; t < 2; t++) {
    fft_case(ACX_FFT_C2C, dts[t], 1, 100, 0, 0, 3, ACX_FFT_FORWARD, 0, 11);
    fft_case(ACX_FFT_C2C, dts[t], 1, 100, 0, 0, 3, ACX_FFT_INVERSE, 0, 12);
    fft_case(ACX_FFT_C2C, dts[t], 1, 100, 0, 0, 3, ACX_FFT_FORWARD, 0, 13); /* the cached plan */
    fft_case(ACX_FFT_C2C, dts[t], 2, 12, 10, 0, 2, ACX_FFT_FORWARD, 1, 14);
    fft_case(ACX_FFT_C2C, dts[t], 3, 6, 5, 4, 2, ACX_FFT_INVERSE, 0, 15);
    fft_case(ACX_FFT_C2C, dts[t], 1, 1024, 0, 0, 1, ACX_FFT_FORWARD, 1, 16);
  }
}

static void t_r2c_c2r(void) {
  const acx_dtype_t dts[] = {ACX_DTYPE_F32, ACX_DTYPE_F64};
  for (int t = 0; t < 2; t++) {
    fft_case(ACX_FFT_R2C, dts[t], 1, 64, 0, 0, 2, 0, 0, 21);
    fft_case(ACX_FFT_R2C, dts[t], 1, 45, 0, 0, 3, 0, 0, 22);
    fft_case(ACX_FFT_R2C, dts[t], 2, 8, 9, 0, 1, 0, 0, 23);
    fft_case(ACX_FFT_R2C, dts[t], 3, 4, 6, 5, 2, 0, 0, 24);
    fft_case(ACX_FFT_C2R, dts[t], 1, 64, 0, 0, 2, 0, 0, 31);
    fft_case(ACX_FFT_C2R, dts[t], 1, 45, 0, 0, 3, 0, 0, 32);
    fft_case(ACX_FFT_C2R, dts[t], 2, 8, 9, 0, 1, 0, 0, 33);
    fft_case(ACX_FFT_C2R, dts[t], 3, 4, 6, 6, 2, 0, 0, 34);
  }
}

static int setup(void) {
  if (acx_system_create(NULL, &lt_sys) != ACX_OK) return 1;
  dev = unit_mode ? lt_open_host(2) : lt_open_cuda(2);
  return acx_fft_create(dev, NULL, &fft) != ACX_OK;
}

static int teardown(void) {
  int bad = acx_fft_destroy(fft) != ACX_OK;
  bad |= acx_device_close(dev, LT_TIMEOUT) != ACX_OK;
  bad |= acx_system_destroy(lt_sys, LT_TIMEOUT) != ACX_OK;
  return bad;
}

int main(int argc, char **argv) {
  unit_mode = argc > 1 && !strcmp(argv[1], "--unit");
  static const acx_test_case_t unit_cases[] = {ACX_TEST(t_validation), ACX_TEST_END};
  static const acx_test_case_t gpu_cases[] = {ACX_TEST(t_c2c), ACX_TEST(t_r2c_c2r), ACX_TEST_END};
  if (!unit_mode && access("/dev/nvidiactl", F_OK) != 0) acx_test_skip("no GPU on this machine");
  return acx_test_run(unit_mode ? "lib_fft_unit" : "lib_fft", unit_mode ? unit_cases : gpu_cases, setup, teardown);
}
