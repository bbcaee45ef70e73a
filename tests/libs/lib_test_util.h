/* Helpers of the library tests: devices (host kind for validation, cuda for the real thing, with
 * the exit-77 skip), random non-zero data in every float dtype, dtype conversion, poisoned
 * buffers, and relative-error checks against double-precision references. */
#ifndef ACX_LIB_TEST_UTIL_H
#define ACX_LIB_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "acx/device.h"

#define LT_TIMEOUT 30000000000LL /* 30 s: reached only when something hangs */

extern acx_system_t *lt_sys;

/* Opens a device of the host kind (validation tests) with `streams` streams. */
acx_device_t *lt_open_host(int streams);
/* Opens the CUDA device (process transport unless ACX_EXECUTOR says otherwise); exits 77 when
 * this build or machine has none. */
acx_device_t *lt_open_cuda(int streams);

/* n doubles uniform in [-1, -1/8] U [1/8, 1] (never zero), from seed. */
void lt_random(double *v, size_t n, uint64_t seed);
/* Rounds v to what dtype can hold (fp8, f16, bf16, f32, f64), in place. */
void lt_round(double *v, size_t n, acx_dtype_t dtype);
/* Packs n doubles into dtype elements / unpacks them. */
void lt_pack(void *dst, const double *src, size_t n, acx_dtype_t dtype);
void lt_unpack(double *dst, const void *src, size_t n, acx_dtype_t dtype);

/* A buffer of `elems` elements of dtype, every byte 0xff (NaN in every float dtype). */
acx_buffer_t *lt_poisoned(acx_device_t *dev, size_t elems, acx_dtype_t dtype);
/* Writes doubles into buf (converted to its dtype) at element offset `at`. */
void lt_write(acx_buffer_t *buf, size_t at, const double *v, size_t n);
/* Reads n elements from element offset `at` as doubles. */
void lt_read(acx_buffer_t *buf, size_t at, double *v, size_t n);
/* Raw bytes of n elements (to check that poison survived where nothing may write). */
void lt_read_raw(acx_buffer_t *buf, size_t at, void *dst, size_t n);

/* ||got - ref|| / ||ref|| over n elements (inf when got has a NaN). */
double lt_rel_err(const double *got, const double *ref, size_t n);
/* Tolerance of a result computed from k-term sums in dtype. */
double lt_tol(acx_dtype_t dtype);
/* Asserts rel_err <= tol, printing the case on failure. */
#define LT_CHECK_ERR(what, err, tol)                                                             \
  do {                                                                                           \
    double lt_e_ = (err), lt_t_ = (tol);                                                         \
    if (!(lt_e_ <= lt_t_)) printf("\n  %s: relative error %.3g > tolerance %.3g\n", (what), lt_e_, lt_t_); \
    CU_ASSERT(lt_e_ <= lt_t_);                                                                   \
  } while (0)
#endif
