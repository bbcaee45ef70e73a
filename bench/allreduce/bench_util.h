/* Pure helpers of acx-allreduce-bench, kept apart so they are unit-tested: size and option
 * parsing, data types and reduction ops, the nccl-tests bandwidth formulas and time format, the
 * deterministic per-rank data with its exactly known result, and half/bfloat16 arithmetic. */
#ifndef ACX_BENCH_UTIL_H
#define ACX_BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>

typedef enum bench_dtype {
  BENCH_INT8, BENCH_UINT8, BENCH_INT32, BENCH_UINT32, BENCH_INT64, BENCH_UINT64,
  BENCH_HALF, BENCH_BFLOAT16, BENCH_FLOAT, BENCH_DOUBLE, BENCH_DTYPE_COUNT
} bench_dtype_t;

typedef enum bench_op { BENCH_SUM, BENCH_PROD, BENCH_MAX, BENCH_MIN, BENCH_AVG, BENCH_OP_COUNT } bench_op_t;

/* "8", "64K", "128M", "8G" (K/M/G are powers of 1024, as in nccl-tests); 0 on success. */
int bench_parse_size(const char *text, size_t *bytes);
/* nccl-tests names: int8 uint8 int32 uint32 int64 uint64 half bfloat16 float double. 0 on success. */
int bench_dtype_parse(const char *text, bench_dtype_t *dtype);
const char *bench_dtype_name(bench_dtype_t dtype);
size_t bench_dtype_size(bench_dtype_t dtype);
int bench_dtype_is_float(bench_dtype_t dtype);
/* sum prod max min avg. 0 on success. */
int bench_op_parse(const char *text, bench_op_t *op);
const char *bench_op_name(bench_op_t op);

/* The sizes from min to max, multiplying by factor (nccl-tests -b -e -f), each rounded down to
 * whole elements; sizes of zero elements and repeats are dropped. Writes at most max_out and
 * returns how many there are, or -1 for bad bounds (min > max, factor < 2 with min < max). */
int bench_sizes(size_t min_bytes, size_t max_bytes, unsigned factor, size_t elem_size, size_t *out, int max_out);

/* nccl-tests all_reduce: algbw = bytes / time (GB/s, 1e9), busbw = algbw * 2(n-1)/n. */
double bench_algbw(size_t bytes, double seconds);
double bench_allreduce_busbw(double algbw, int nranks);
/* nccl-tests' time column: %7.2f below 100 us, %7.1f below 10 ms, %7.0f above. buf >= 16. */
const char *bench_format_time(double usec, char *buf, size_t len);

/* IEEE binary16 and bfloat16 from and to float, rounding to nearest even. */
uint16_t bench_float_to_half(float f);
float bench_half_to_float(uint16_t h);
uint16_t bench_float_to_bf16(float f);
float bench_bf16_to_float(uint16_t b);

/* Input of rank `rank` of `nranks`: small integers chosen so that the reduction over all ranks
 * is exact in every type (no wrap, no rounding, also in half and bfloat16) and independent of
 * the reduction order. `seed` varies the pattern between sizes. */
void bench_fill(void *buf, bench_dtype_t dtype, bench_op_t op, size_t count, int rank, int nranks, unsigned seed);
/* The exact result of the reduction of bench_fill's inputs over nranks ranks. */
void bench_expected(void *buf, bench_dtype_t dtype, bench_op_t op, size_t count, int nranks, unsigned seed);
/* Elements of got that differ from expected. Exact, except avg in floating types, where NCCL
 * pre-multiplies by 1/n: there a relative tolerance of n units in the last place is allowed. */
size_t bench_count_wrong(const void *got, const void *expected, bench_dtype_t dtype, bench_op_t op, size_t count,
                         int nranks);

/* inout[i] = inout[i] op in[i] (avg accumulates as sum). For MPI user ops on half/bfloat16. */
void bench_reduce_local(void *inout, const void *in, bench_dtype_t dtype, bench_op_t op, size_t count);
/* buf[i] /= n: the second half of avg (integer division for integer types, as NCCL does). */
void bench_divide(void *buf, bench_dtype_t dtype, size_t count, int n);
#endif
