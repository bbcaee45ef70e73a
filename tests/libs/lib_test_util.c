/* Helpers of the library tests (see lib_test_util.h). */
#include "lib_test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acx_test.h"

acx_system_t *lt_sys;

static acx_device_t *open_kind(acx_device_kind_t kind, int streams) {
  acx_device_config_t cfg = ACX_DEVICE_CONFIG_INIT;
  cfg.kind = kind;
  cfg.streams = streams;
  acx_device_t *dev = NULL;
  acx_status_t st = acx_device_open(lt_sys, &cfg, &dev);
  if (kind == ACX_DEVICE_KIND_CUDA && (st == ACX_ERR_NO_DEVICE || st == ACX_ERR_NOT_SUPPORTED)) {
    acx_system_destroy(lt_sys, LT_TIMEOUT);
    acx_test_skip("no CUDA device (this build or this machine)");
  }
  if (st != ACX_OK) {
    fprintf(stderr, "acx_device_open(kind %d): %s\n", (int)kind, acx_status_str(st));
    exit(1);
  }
  return dev;
}

acx_device_t *lt_open_host(int streams) { return open_kind(ACX_DEVICE_KIND_HOST, streams); }
acx_device_t *lt_open_cuda(int streams) { return open_kind(ACX_DEVICE_KIND_CUDA, streams); }

static uint64_t next(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

void lt_random(double *v, size_t n, uint64_t seed) {
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 0x2545f4914f6cdd1dull;
  if (!s) s = 1;
  for (size_t i = 0; i < n; i++) {
    double u = (double)(next(&s) >> 11) * 0x1p-53; /* [0, 1) */
    double m = 0.125 + 0.875 * u;
    v[i] = (next(&s) & 1) ? m : -m;
  }
}

static uint16_t f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  uint32_t sign = (x >> 16) & 0x8000u, e8 = (x >> 23) & 0xffu, mant = x & 0x7fffffu;
  if (e8 == 0xff) return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
  int32_t exp = (int32_t)e8 - 127 + 15;
  if (exp >= 31) return (uint16_t)(sign | 0x7c00u);
  if (exp <= 0) { /* subnormal half: round to nearest even */
    if (exp < -10) return (uint16_t)sign;
    mant |= 0x800000u;
    uint32_t shift = (uint32_t)(14 - exp), h = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) h++;
    return (uint16_t)(sign | h);
  }
  uint32_t h = ((uint32_t)exp << 10) | (mant >> 13), rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++; /* a carry into the exponent is right */
  return (uint16_t)(sign | h);
}

static double f16_to_d(uint16_t h) {
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  double v = e == 0 ? m * 0x1p-24 : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, (int)e - 25);
  return (h & 0x8000u) ? -v : v;
}

static uint16_t f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

static double bf16_to_d(uint16_t b) {
  uint32_t x = (uint32_t)b << 16;
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}

/* OCP fp8: E4M3 (bias 7, no infinities, S.1111.111 is NaN) and E5M2 (bias 15, IEEE-like). */
static double f8_to_d(uint8_t b, int e5m2) {
  int mbits = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7;
  uint32_t e = (b >> mbits) & (e5m2 ? 0x1fu : 0xfu), m = b & ((1u << mbits) - 1);
  double v;
  if (e5m2 && e == 31) v = m ? NAN : INFINITY;
  else if (!e5m2 && e == 15 && m == 7) v = NAN;
  else if (e == 0) v = ldexp((double)m, 1 - bias - mbits);
  else v = ldexp((double)((1u << mbits) + m), (int)e - bias - mbits);
  return (b & 0x80u) ? -v : v;
}

/* Nearest fp8 code, ties to the even code; beyond the largest finite value: that value (the
 * tests never go there). */
static uint8_t d_to_f8(double v, int e5m2) {
  uint8_t best = 0;
  double bd = INFINITY;
  for (unsigned c = 0; c < 256; c++) {
    double x = f8_to_d((uint8_t)c, e5m2);
    if (isnan(x) || isinf(x)) continue;
    double d = fabs(x - v);
    if (d < bd || (d == bd && !(c & 1))) bd = d, best = (uint8_t)c;
  }
  return best;
}

void lt_pack(void *dst, const double *src, size_t n, acx_dtype_t dtype) {
  for (size_t i = 0; i < n; i++) {
    switch (dtype) {
      case ACX_DTYPE_F64: ((double *)dst)[i] = src[i]; break;
      case ACX_DTYPE_F32: ((float *)dst)[i] = (float)src[i]; break;
      case ACX_DTYPE_F16: ((uint16_t *)dst)[i] = f32_to_f16((float)src[i]); break;
      case ACX_DTYPE_BF16: ((uint16_t *)dst)[i] = f32_to_bf16((float)src[i]); break;
      case ACX_DTYPE_I32: ((int32_t *)dst)[i] = (int32_t)src[i]; break;
      case ACX_DTYPE_U32: ((uint32_t *)dst)[i] = (uint32_t)src[i]; break;
      case ACX_DTYPE_F8E4M3: ((uint8_t *)dst)[i] = d_to_f8(src[i], 0); break;
      case ACX_DTYPE_F8E5M2: ((uint8_t *)dst)[i] = d_to_f8(src[i], 1); break;
      default: abort();
    }
  }
}

void lt_unpack(double *dst, const void *src, size_t n, acx_dtype_t dtype) {
  for (size_t i = 0; i < n; i++) {
    switch (dtype) {
      case ACX_DTYPE_F64: dst[i] = ((const double *)src)[i]; break;
      case ACX_DTYPE_F32: dst[i] = ((const float *)src)[i]; break;
      case ACX_DTYPE_F16: dst[i] = f16_to_d(((const uint16_t *)src)[i]); break;
      case ACX_DTYPE_BF16: dst[i] = bf16_to_d(((const uint16_t *)src)[i]); break;
      case ACX_DTYPE_I32: dst[i] = ((const int32_t *)src)[i]; break;
      case ACX_DTYPE_U32: dst[i] = ((const uint32_t *)src)[i]; break;
      case ACX_DTYPE_F8E4M3: dst[i] = f8_to_d(((const uint8_t *)src)[i], 0); break;
      case ACX_DTYPE_F8E5M2: dst[i] = f8_to_d(((const uint8_t *)src)[i], 1); break;
      default: abort();
    }
  }
}

void lt_round(double *v, size_t n, acx_dtype_t dtype) {
  void *tmp = malloc(n * 8 + 8);
  lt_pack(tmp, v, n, dtype);
  lt_unpack(v, tmp, n, dtype);
  free(tmp);
}

acx_buffer_t *lt_poisoned(acx_device_t *dev, size_t elems, acx_dtype_t dtype) {
  acx_buffer_t *b = NULL;
  size_t bytes = elems * acx_dtype_size(dtype);
  ACX_ASSERT_STATUS(acx_buffer_alloc(dev, bytes, dtype, ACX_MEM_DEVICE, LT_TIMEOUT, &b), ACX_OK);
  /* all-ones bytes: NaN for floats, -1 / max for integers; the width must be the element size */
  unsigned width = (unsigned)acx_dtype_size(dtype);
  ACX_ASSERT_STATUS(acx_buffer_fill(b, 0, ACX_WHOLE, UINT64_MAX, width, 0, LT_TIMEOUT), ACX_OK);
  return b;
}

void lt_write(acx_buffer_t *buf, size_t at, const double *v, size_t n) {
  acx_buffer_info_t info;
  ACX_ASSERT_STATUS(acx_buffer_query(buf, &info), ACX_OK);
  size_t es = acx_dtype_size(info.dtype);
  void *tmp = malloc(n * es + 1);
  lt_pack(tmp, v, n, info.dtype);
  ACX_ASSERT_STATUS(acx_buffer_write(buf, at * es, tmp, n * es, 0, LT_TIMEOUT), ACX_OK);
  free(tmp);
}

void lt_read(acx_buffer_t *buf, size_t at, double *v, size_t n) {
  acx_buffer_info_t info;
  ACX_ASSERT_STATUS(acx_buffer_query(buf, &info), ACX_OK);
  size_t es = acx_dtype_size(info.dtype);
  void *tmp = malloc(n * es + 1);
  ACX_ASSERT_STATUS(acx_buffer_read(buf, at * es, tmp, n * es, 0, LT_TIMEOUT), ACX_OK);
  lt_unpack(v, tmp, n, info.dtype);
  free(tmp);
}

void lt_read_raw(acx_buffer_t *buf, size_t at, void *dst, size_t n) {
  acx_buffer_info_t info;
  ACX_ASSERT_STATUS(acx_buffer_query(buf, &info), ACX_OK);
  size_t es = acx_dtype_size(info.dtype);
  ACX_ASSERT_STATUS(acx_buffer_read(buf, at * es, dst, n * es, 0, LT_TIMEOUT), ACX_OK);
}

double lt_rel_err(const double *got, const double *ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    if (isnan(got[i])) return INFINITY;
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

double lt_tol(acx_dtype_t dtype) {
  switch (dtype) {
    case ACX_DTYPE_F64: return 1e-12;
    case ACX_DTYPE_F32: return 1e-5;
    case ACX_DTYPE_F16: return 5e-3;  /* output rounding 2^-11, accumulation in f32 */
    case ACX_DTYPE_BF16: return 2e-2; /* output rounding 2^-8 */
    default: return 0;
  }
}
