/* IEEE binary16 and bfloat16 conversions (round to nearest even), shared by both processes: the MPI
 * collectives of the host device kind (their f16/bf16 reduction ops), the host engine's REDUCE and
 * DIV (kernels/host/engine_host.c: bit for bit what the CUDA kernels' __float2half_rn and
 * __float2bfloat16_rn give for every non-NaN value) and acx-allreduce-bench (its data and check).
 * Header-only: the benchmark links no acx internals. */
#ifndef ACXI_HALF_H
#define ACXI_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint16_t acxc_float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  uint32_t sign = (x >> 16) & 0x8000u, mant = x & 0x7fffffu;
  int32_t exp = (int32_t)((x >> 23) & 0xffu);
  if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
  int32_t e = exp - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7c00u);
  if (e <= 0) { /* half subnormal: h = 1.mant * 2^(exp-127) / 2^-24 */
    if (e < -10) return (uint16_t)sign;
    mant |= 0x800000u;
    uint32_t shift = (uint32_t)(14 - e), h = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (h & 1u))) h++;
    return (uint16_t)(sign | h);
  }
  uint32_t h = ((uint32_t)e << 10) | (mant >> 13), rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* a carry into the exponent is right */
  return (uint16_t)(sign | h);
}

static inline float acxc_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
  if (e == 0 && m == 0) {
    x = sign;
  } else if (e == 0) {
    e = 113;
    while (!(m & 0x400u)) {
      m <<= 1;
      e--;
    }
    x = sign | (e << 23) | ((m & 0x3ffu) << 13);
  } else if (e == 31) {
    x = sign | 0x7f800000u | (m << 13);
  } else {
    x = sign | ((e + 112) << 23) | (m << 13);
  }
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}

static inline uint16_t acxc_float_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

static inline float acxc_bf16_to_float(uint16_t b) {
  uint32_t x = (uint32_t)b << 16;
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}

#endif
