/* NVRTC and modules through acx (runtime/libs/lib_rtc.c, lib_rtc_exec.c).
 * Default (label gpu): compile saxpy to a cubin and to PTX (f32 and f64), load, launch, compare
 * with a double-precision CPU result (output poisoned, the element past it checked untouched); a
 * syntax error gives ACX_ERR_COMPILE with the compiler's log (whole, and cut with the note); a
 * cooperative launch of a grid-sync reduction; argument-count mismatches, unknown kernel names
 * and bad images refused; a module is stale after an executor restart and works again once
 * reloaded. --unit (label unit): validation on a host-kind device. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acx/rtc.h"
#include "acx_test.h"
#include "runtime/libs/lib_internal.h"
#include "lib_test_util.h"

#ifndef ACX_TEST_CUDA_INCLUDE
#define ACX_TEST_CUDA_INCLUDE "/usr/local/cuda/include"
#endif

static acx_device_t *dev;
static acx_rtc_t *rtc;
static int unit_mode;

static const char saxpy_src[] =
    "extern \"C\" __global__ void saxpy(float a, const float *x, float *y, long long n) {\n"
    "  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = a * x[i] + y[i];\n"
    "}\n"
    "extern \"C\" __global__ void daxpy(double a, const double *x, double *y, long long n) {\n"
    "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)\n"
    "    y[i] = a * x[i] + y[i];\n"
    "}\n";

static acx_buffer_t *alloc(size_t elems, acx_dtype_t dt) {
  acx_buffer_t *b = NULL;
  ACX_ASSERT_STATUS(acx_buffer_alloc(dev, elems * acx_dtype_size(dt), dt, ACX_MEM_DEVICE, LT_TIMEOUT, &b), ACX_OK);
  return b;
}

/* ------------------------------------------------------------------------------------------ */
/* validation (host kind)                                                                      */

static void t_validation_compile(void) {
  acx_rtc_program_t p = ACX_RTC_PROGRAM_INIT;
  p.source = saxpy_src;
  acx_rtc_image_t *img = (acx_rtc_image_t *)&p; /* must be reset to NULL by every call */
  char log[64];
  ACX_ASSERT_STATUS(acx_rtc_compile(rtc, &p, &img, log, sizeof log), ACX_ERR_NOT_SUPPORTED);
  CU_ASSERT_PTR_NULL(img);
  ACX_ASSERT_STATUS(acx_rtc_compile(NULL, &p, &img, log, sizeof log), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_rtc_compile(rtc, NULL, &img, log, sizeof log), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_rtc_compile(rtc, &p, NULL, log, sizeof log), ACX_ERR_NULL_ARG);
  acx_rtc_program_t q = p;
  q.size = 8;
  ACX_ASSERT_STATUS(acx_rtc_compile(rtc, &q, &img, log, sizeof log), ACX_ERR_INVALID_ARG);
  q = p, q.source = NULL;
  ACX_ASSERT_STATUS(acx_rtc_compile(rtc, &q, &img, log, sizeof log), ACX_ERR_NULL_ARG);
  q = p, q.target = (acx_rtc_target_t)7;
  ACX_ASSERT_STATUS(acx_rtc_compile(rtc, &q, &img, log, sizeof log), ACX_ERR_INVALID_ARG);
  q = p, q.num_options = -1;
  ACX_ASSERT_STATUS(acx_rtc_compile(rtc, &q, &img, log, sizeof log), ACX_ERR_INVALID_ARG);
  q = p, q.num_options = 1;
  ACX_ASSERT_STATUS(acx_rtc_compile(rtc, &q, &img, log, sizeof log), ACX_ERR_NULL_ARG); /* options NULL */
  const char *opts[ACX_RTC_MAX_OPTIONS + 1];
  for (int i = 0; i <= ACX_RTC_MAX_OPTIONS; i++) opts[i] = "-DX=1";
  q = p, q.options = opts, q.num_options = ACX_RTC_MAX_OPTIONS + 1;
  ACX_ASSERT_STATUS(acx_rtc_compile(rtc, &q, &img, log, sizeof log), ACX_ERR_INVALID_ARG);
  q.num_options = ACX_RTC_MAX_OPTIONS; /* the most allowed: valid */
  ACX_ASSERT_STATUS(acx_rtc_compile(rtc, &q, &img, NULL, 0), ACX_ERR_NOT_SUPPORTED);
  opts[3] = NULL;
  ACX_ASSERT_STATUS(acx_rtc_compile(rtc, &q, &img, log, sizeof log), ACX_ERR_NULL_ARG);
  q = p, q.target = ACX_RTC_PTX, q.name = "saxpy.cu";
  ACX_ASSERT_STATUS(acx_rtc_compile(rtc, &q, &img, log, sizeof log), ACX_ERR_NOT_SUPPORTED);
  CU_ASSERT_STRING_EQUAL(log, ""); /* no compilation, no log */

  /* module load */
  acx_module_t *m = (acx_module_t *)&p;
  ACX_ASSERT_STATUS(acx_module_load(rtc, saxpy_src, sizeof saxpy_src, &m), ACX_ERR_NOT_SUPPORTED);
  CU_ASSERT_PTR_NULL(m);
  ACX_ASSERT_STATUS(acx_module_load(NULL, saxpy_src, sizeof saxpy_src, &m), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_module_load(rtc, NULL, sizeof saxpy_src, &m), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_module_load(rtc, saxpy_src, sizeof saxpy_src, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_module_load(rtc, saxpy_src, 0, &m), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_module_load_image(rtc, NULL, &m), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_module_unload(NULL), ACX_OK);
}

/* A function handle on the host kind, where no module can be loaded (white box: the launch's
 * validation is what is under test, and it runs before anything reaches the executor). */
static struct acx_module fake_module;
static struct acx_function fake_fn;

static void make_fake(uint64_t generation) {
  memset(&fake_module, 0, sizeof fake_module);
  memset(&fake_fn, 0, sizeof fake_fn);
  fake_module.rtc = rtc;
  fake_module.id = 1;
  fake_module.generation = generation;
  fake_fn.module = &fake_module;
  snprintf(fake_fn.name, sizeof fake_fn.name, "saxpy");
}

static void t_validation_launch(void) {
  uint64_t g = 0;
  ACX_ASSERT_STATUS(acx_device_generation(dev, &g), ACX_OK);
  make_fake(g);
  acx_function_t *f = &fake_fn;
  acx_buffer_t *x = alloc(100, ACX_DTYPE_F32), *y = alloc(100, ACX_DTYPE_F32), *d = alloc(10, ACX_DTYPE_F64);
  acx_launch_config_t cfg = ACX_LAUNCH_CONFIG_INIT;
  cfg.grid[0] = 1, cfg.block[0] = 128;
  acx_kernel_arg_t a[4] = {ACX_KARG_FLOAT(2.0f), ACX_KARG_IN(x, 0), ACX_KARG_INOUT(y, 0), ACX_KARG_INT64(100)};
  ACX_ASSERT_STATUS(acx_kernel_launch(f, &cfg, a, 4, NULL), ACX_ERR_NOT_SUPPORTED);
  acx_future_t *fut = (acx_future_t *)&cfg;
  ACX_ASSERT_STATUS(acx_kernel_launch(f, &cfg, a, 4, &fut), ACX_ERR_NOT_SUPPORTED);
  CU_ASSERT_PTR_NULL(fut);
  ACX_ASSERT_STATUS(acx_kernel_launch(f, &cfg, NULL, 0, NULL), ACX_ERR_NOT_SUPPORTED); /* no arguments */
  ACX_ASSERT_STATUS(acx_kernel_launch(NULL, &cfg, a, 4, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_kernel_launch(f, NULL, a, 4, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_kernel_launch(f, &cfg, NULL, 4, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_kernel_launch(f, &cfg, a, -1, NULL), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_kernel_launch(f, &cfg, a, ACX_KERNEL_MAX_ARGS + 1, NULL), ACX_ERR_INVALID_ARG);
  /* launch configurations */
  acx_launch_config_t c = cfg;
  c.size = 4;
  ACX_ASSERT_STATUS(acx_kernel_launch(f, &c, a, 4, NULL), ACX_ERR_INVALID_ARG);
  c = cfg, c.grid[1] = 0;
  ACX_ASSERT_STATUS(acx_kernel_launch(f, &c, a, 4, NULL), ACX_ERR_INVALID_ARG);
  c = cfg, c.block[0] = 0;
  ACX_ASSERT_STATUS(acx_kernel_launch(f, &c, a, 4, NULL), ACX_ERR_INVALID_ARG);
  c = cfg, c.block[0] = 512, c.block[1] = 4;
  ACX_ASSERT_STATUS(acx_kernel_launch(f, &c, a, 4, NULL), ACX_ERR_INVALID_ARG);
  c = cfg, c.grid[2] = 70000;
  ACX_ASSERT_STATUS(acx_kernel_launch(f, &c, a, 4, NULL), ACX_ERR_INVALID_ARG);
  c = cfg, c.cooperative = 2;
  ACX_ASSERT_STATUS(acx_kernel_launch(f, &c, a, 4, NULL), ACX_ERR_INVALID_ARG);
  c = cfg, c.cooperative = 1, c.block[0] = 1024, c.shared_bytes = 100000;
  ACX_ASSERT_STATUS(acx_kernel_launch(f, &c, a, 4, NULL), ACX_ERR_NOT_SUPPORTED);
  /* arguments */
  acx_kernel_arg_t b[4];
  memcpy(b, a, sizeof b);
  b[2].type = (acx_kernel_arg_type_t)0;
  ACX_ASSERT_STATUS(acx_kernel_launch(f, &cfg, b, 4, NULL), ACX_ERR_INVALID_ARG);
  b[2].type = (acx_kernel_arg_type_t)42;
  ACX_ASSERT_STATUS(acx_kernel_launch(f, &cfg, b, 4, NULL), ACX_ERR_INVALID_ARG);
  memcpy(b, a, sizeof b), b[1].buf = NULL;
  ACX_ASSERT_STATUS(acx_kernel_launch(f, &cfg, b, 4, NULL), ACX_ERR_NULL_ARG);
  memcpy(b, a, sizeof b), b[1].offset = 404; /* past the 400 bytes */
  ACX_ASSERT_STATUS(acx_kernel_launch(f, &cfg, b, 4, NULL), ACX_ERR_OUT_OF_RANGE);
  memcpy(b, a, sizeof b), b[1].offset = 400; /* at the end: an empty range, legal */
  ACX_ASSERT_STATUS(acx_kernel_launch(f, &cfg, b, 4, NULL), ACX_ERR_NOT_SUPPORTED);
  memcpy(b, a, sizeof b), b[1].offset = 6; /* not a multiple of 4 */
  ACX_ASSERT_STATUS(acx_kernel_launch(f, &cfg, b, 4, NULL), ACX_ERR_INVALID_ARG);
  memcpy(b, a, sizeof b), b[2] = ACX_KARG_OUT(d, 8);
  ACX_ASSERT_STATUS(acx_kernel_launch(f, &cfg, b, 4, NULL), ACX_ERR_NOT_SUPPORTED);
  /* a buffer of another device */
  acx_device_t *other = lt_open_host(1);
  acx_buffer_t *ob = NULL;
  ACX_ASSERT_STATUS(acx_buffer_alloc(other, 64, ACX_DTYPE_F32, ACX_MEM_DEVICE, LT_TIMEOUT, &ob), ACX_OK);
  memcpy(b, a, sizeof b), b[1].buf = ob;
  ACX_ASSERT_STATUS(acx_kernel_launch(f, &cfg, b, 4, NULL), ACX_ERR_INVALID_ARG);
  acx_buffer_release(ob);
  ACX_ASSERT_STATUS(acx_device_close(other, LT_TIMEOUT), ACX_OK);
  /* counts: 8 buffers and 16 scalars is the most; a ninth buffer is refused */
  acx_kernel_arg_t many[ACX_KERNEL_MAX_ARGS + 1];
  for (int i = 0; i < ACX_KERNEL_MAX_ARGS; i++)
    many[i] = i < ACX_KERNEL_MAX_BUFFER_ARGS ? ACX_KARG_INOUT(y, (size_t)i * 4)
                                             : (i % 2 ? ACX_KARG_DOUBLE(0.5) : ACX_KARG_UINT32((uint32_t)i));
  ACX_ASSERT_STATUS(acx_kernel_launch(f, &cfg, many, ACX_KERNEL_MAX_ARGS, NULL), ACX_ERR_NOT_SUPPORTED);
  many[ACX_KERNEL_MAX_BUFFER_ARGS] = ACX_KARG_IN(x, 0);
  ACX_ASSERT_STATUS(acx_kernel_launch(f, &cfg, many, ACX_KERNEL_MAX_ARGS, NULL), ACX_ERR_INVALID_ARG);
  /* a freed buffer */
  acx_buffer_t *fb = alloc(16, ACX_DTYPE_F32);
  ACX_ASSERT_STATUS(acx_buffer_free(fb, LT_TIMEOUT), ACX_OK);
  memcpy(b, a, sizeof b), b[2] = ACX_KARG_OUT(fb, 0);
  ACX_ASSERT_STATUS(acx_kernel_launch(f, &cfg, b, 4, NULL), ACX_ERR_INVALID_STATE);
  acx_buffer_release(fb);
  /* lookups */
  acx_function_t *out = NULL;
  ACX_ASSERT_STATUS(acx_module_get_function(&fake_module, "saxpy", &out), ACX_ERR_NOT_SUPPORTED);
  ACX_ASSERT_STATUS(acx_module_get_function(&fake_module, NULL, &out), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_module_get_function(NULL, "saxpy", &out), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_module_get_function(&fake_module, "saxpy", NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_module_get_function(&fake_module, "", &out), ACX_ERR_INVALID_ARG);
  char longname[300];
  memset(longname, 'k', sizeof longname - 1);
  longname[sizeof longname - 1] = '\0';
  ACX_ASSERT_STATUS(acx_module_get_function(&fake_module, longname, &out), ACX_ERR_INVALID_ARG);
  /* a module of another executor generation */
  make_fake(g + 1);
  ACX_ASSERT_STATUS(acx_kernel_launch(f, &cfg, a, 4, NULL), ACX_ERR_STALE_BUFFER);
  ACX_ASSERT_STATUS(acx_module_get_function(&fake_module, "saxpy", &out), ACX_ERR_STALE_BUFFER);
  acx_buffer_release(x);
  acx_buffer_release(y);
  acx_buffer_release(d);
}

static void wait_generation(uint64_t old) {
  uint64_t g = old;
  for (int i = 0; i < 20000 && g == old; i++) {
    usleep(1000);
    acx_device_generation(dev, &g);
  }
  CU_ASSERT(g > old);
  for (int i = 0; i < 20000 && acx_device_ping(dev, LT_TIMEOUT) != ACX_OK; i++) usleep(1000);
}

/* A buffer argument of an earlier executor incarnation. */
static void t_stale_buffer_arg(void) {
  acx_buffer_t *x = alloc(8, ACX_DTYPE_F32);
  uint64_t g0;
  ACX_ASSERT_STATUS(acx_device_generation(dev, &g0), ACX_OK);
  ACX_ASSERT_STATUS(acx_device_inject_fault(dev, 0, LT_TIMEOUT), ACX_ERR_DEVICE_LOST);
  wait_generation(g0);
  uint64_t g1;
  ACX_ASSERT_STATUS(acx_device_generation(dev, &g1), ACX_OK);
  make_fake(g1);
  acx_launch_config_t cfg = ACX_LAUNCH_CONFIG_INIT;
  acx_kernel_arg_t a[1] = {ACX_KARG_OUT(x, 0)};
  ACX_ASSERT_STATUS(acx_kernel_launch(&fake_fn, &cfg, a, 1, NULL), ACX_ERR_STALE_BUFFER);
  acx_buffer_release(x);
}

/* ------------------------------------------------------------------------------------------ */
/* GPU                                                                                        */

static acx_rtc_image_t *compile(const char *src, acx_rtc_target_t target, const char *const *opts, int nopts) {
  acx_rtc_program_t p = ACX_RTC_PROGRAM_INIT;
  p.source = src;
  p.target = target;
  p.options = opts;
  p.num_options = nopts;
  acx_rtc_image_t *img = NULL;
  char log[4096];
  acx_status_t st = acx_rtc_compile(rtc, &p, &img, log, sizeof log);
  if (st != ACX_OK) printf("\n  compile: %s\n%s\n", acx_status_name(st), log);
  ACX_ASSERT_STATUS(st, ACX_OK);
  CU_ASSERT_PTR_NOT_NULL_FATAL(img);
  return img;
}

/* y = a x + y through kernel `name` (f32 saxpy or f64 daxpy) against a double reference. */
static void run_axpy(acx_function_t *f, acx_dtype_t dt, int64_t n, uint64_t seed, int grid_stride) {
  double *X = malloc((size_t)n * 8), *Y = malloc((size_t)n * 8), *got = malloc((size_t)(n + 1) * 8);
  double *ref = malloc((size_t)n * 8);
  lt_random(X, (size_t)n, seed);
  lt_random(Y, (size_t)n, seed + 1);
  lt_round(X, (size_t)n, dt);
  lt_round(Y, (size_t)n, dt);
  acx_buffer_t *x = lt_poisoned(dev, (size_t)n, dt), *y = lt_poisoned(dev, (size_t)n + 1, dt);
  lt_write(x, 0, X, (size_t)n);
  lt_write(y, 0, Y, (size_t)n);
  const double a = -1.75;
  acx_launch_config_t cfg = ACX_LAUNCH_CONFIG_INIT;
  cfg.block[0] = 256;
  cfg.grid[0] = grid_stride ? 7 : (uint32_t)((n + 255) / 256);
  acx_kernel_arg_t args[4] = {dt == ACX_DTYPE_F32 ? ACX_KARG_FLOAT((float)a) : ACX_KARG_DOUBLE(a), ACX_KARG_IN(x, 0),
                              ACX_KARG_INOUT(y, 0), ACX_KARG_INT64(n)};
  acx_future_t *done = NULL;
  ACX_ASSERT_STATUS(acx_kernel_launch(f, &cfg, args, 4, &done), ACX_OK);
  ACX_ASSERT_STATUS(acx_future_wait(done, LT_TIMEOUT, NULL, 0, NULL), ACX_OK);
  acx_future_release(done);
  for (int64_t i = 0; i < n; i++) ref[i] = a * X[i] + Y[i];
  lt_read(y, 0, got, (size_t)n + 1);
  char what[64];
  snprintf(what, sizeof what, "axpy %s n=%lld", acx_dtype_name(dt), (long long)n);
  LT_CHECK_ERR(what, lt_rel_err(got, ref, (size_t)n), dt == ACX_DTYPE_F64 ? 1e-15 : 1e-6);
  CU_ASSERT(isnan(got[n])); /* past y: untouched */
  free(X), free(Y), free(got), free(ref);
  acx_buffer_release(x);
  acx_buffer_release(y);
}

static void t_saxpy(void) {
  for (int t = 0; t < 2; t++) {
    acx_rtc_target_t target = t ? ACX_RTC_PTX : ACX_RTC_CUBIN;
    acx_rtc_image_t *img = compile(saxpy_src, target, NULL, 0);
    const void *data = NULL;
    size_t bytes = 0;
    acx_rtc_target_t got_t = 0;
    const char *arch = NULL;
    ACX_ASSERT_STATUS(acx_rtc_image_data(img, &data, &bytes, &got_t, &arch), ACX_OK);
    CU_ASSERT(bytes > 0);
    CU_ASSERT_EQUAL(got_t, target);
    CU_ASSERT(strncmp(arch, target == ACX_RTC_CUBIN ? "sm_" : "compute_", target == ACX_RTC_CUBIN ? 3 : 8) == 0);
    printf("\n  %s image: %zu bytes for %s", t ? "PTX" : "cubin", bytes, arch);
    if (target == ACX_RTC_PTX) CU_ASSERT(strstr((const char *)data, ".entry saxpy") != NULL);
    acx_module_t *m = NULL;
    ACX_ASSERT_STATUS(acx_module_load_image(rtc, img, &m), ACX_OK);
    acx_function_t *fs = NULL, *fd = NULL, *fs2 = NULL;
    ACX_ASSERT_STATUS(acx_module_get_function(m, "saxpy", &fs), ACX_OK);
    ACX_ASSERT_STATUS(acx_module_get_function(m, "daxpy", &fd), ACX_OK);
    ACX_ASSERT_STATUS(acx_module_get_function(m, "saxpy", &fs2), ACX_OK);
    CU_ASSERT_PTR_EQUAL(fs, fs2);
    run_axpy(fs, ACX_DTYPE_F32, 100003, 10 + (uint64_t)t, 0);
    run_axpy(fd, ACX_DTYPE_F64, 54321, 20 + (uint64_t)t, 1);
    ACX_ASSERT_STATUS(acx_module_unload(m), ACX_OK);
    acx_rtc_image_free(img);
  }
}

static void t_compile_error(void) {
  static const char bad[] = "extern \"C\" __global__ void broken(float *y) {\n"
                            "  y[threadIdx.x] = undeclared_thing * 2.0f\n" /* and no semicolon */
                            "}\n";
  acx_rtc_program_t p = ACX_RTC_PROGRAM_INIT;
  p.source = bad;
  p.name = "broken.cu";
  acx_rtc_image_t *img = NULL;
  char log[8192];
  acx_status_t st = acx_rtc_compile(rtc, &p, &img, log, sizeof log);
  ACX_ASSERT_STATUS(st, ACX_ERR_COMPILE);
  CU_ASSERT_PTR_NULL(img);
  CU_ASSERT(strstr(log, "broken.cu") != NULL);
  CU_ASSERT(strstr(log, "undeclared_thing") != NULL);
  CU_ASSERT(strstr(log, "error") != NULL);
  CU_ASSERT(strstr(log, "[acx: log truncated") == NULL);
  size_t full = strlen(log);
  /* The same with a buffer smaller than the log: cut, with the note, still NUL-terminated. */
  char small[100];
  memset(small, 'Z', sizeof small);
  ACX_ASSERT_STATUS(acx_rtc_compile(rtc, &p, &img, small, sizeof small), ACX_ERR_COMPILE);
  CU_ASSERT(full > sizeof small);
  CU_ASSERT(memchr(small, '\0', sizeof small) != NULL);
  CU_ASSERT(strstr(small, "[acx: log truncated") != NULL);
  CU_ASSERT(strncmp(small, log, 10) == 0);
  /* A bad option is the caller's mistake too: ACX_ERR_COMPILE with the log. */
  const char *opts[] = {"--no-such-option"};
  p.source = saxpy_src;
  p.options = opts;
  p.num_options = 1;
  ACX_ASSERT_STATUS(acx_rtc_compile(rtc, &p, &img, log, sizeof log), ACX_ERR_COMPILE);
  printf("\n  bad option log: %s", log);
  /* The compiler's result code travels with the future's details. */
  acx_module_t *m = NULL;
  ACX_ASSERT_STATUS(acx_module_load(rtc, "this is no image", 16, &m), ACX_ERR_LIBRARY);
  CU_ASSERT_PTR_NULL(m);
}

static const char coop_src[] =
    "#include <cooperative_groups.h>\n"
    "namespace cg = cooperative_groups;\n"
    "extern \"C\" __global__ void grid_sum(const double *x, double *partial, double *out, long long n, int *valid) {\n"
    "  cg::grid_group g = cg::this_grid();\n"
    "  __shared__ double s[256];\n"
    "  double acc = 0;\n"
    "  for (long long i = g.thread_rank(); i < n; i += g.size()) acc += x[i];\n"
    "  s[threadIdx.x] = acc;\n"
    "  __syncthreads();\n"
    "  for (int w = blockDim.x / 2; w > 0; w /= 2) {\n"
    "    if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];\n"
    "    __syncthreads();\n"
    "  }\n"
    "  if (threadIdx.x == 0) partial[blockIdx.x] = s[0];\n"
    "  g.sync();\n" /* every block's partial is written before any is read */
    "  if (g.thread_rank() == 0) {\n"
    "    double t = 0;\n"
    "    for (unsigned b = 0; b < gridDim.x; b++) t += partial[b];\n"
    "    *out = t;\n"
    "    *valid = g.is_valid();\n"
    "  }\n"
    "}\n";

static void t_cooperative(void) {
  const char *opts[] = {"-std=c++17", "-I" ACX_TEST_CUDA_INCLUDE, "-I" ACX_TEST_CUDA_INCLUDE "/cccl"};
  acx_rtc_image_t *img = compile(coop_src, ACX_RTC_CUBIN, opts, 3);
  acx_module_t *m = NULL;
  ACX_ASSERT_STATUS(acx_module_load_image(rtc, img, &m), ACX_OK);
  acx_function_t *f = NULL;
  ACX_ASSERT_STATUS(acx_module_get_function(m, "grid_sum", &f), ACX_OK);
  const int64_t n = 1 << 20;
  const uint32_t blocks = 32; /* 32 x 256 threads fit any GPU acx runs on at once */
  double *X = malloc((size_t)n * 8), ref = 0, got = 0;
  lt_random(X, (size_t)n, 77);
  for (int64_t i = 0; i < n; i++) ref += X[i];
  acx_buffer_t *x = lt_poisoned(dev, (size_t)n, ACX_DTYPE_F64), *part = lt_poisoned(dev, blocks, ACX_DTYPE_F64);
  acx_buffer_t *out = lt_poisoned(dev, 1, ACX_DTYPE_F64), *valid = lt_poisoned(dev, 1, ACX_DTYPE_I32);
  lt_write(x, 0, X, (size_t)n);
  acx_launch_config_t cfg = ACX_LAUNCH_CONFIG_INIT;
  cfg.grid[0] = blocks;
  cfg.block[0] = 256;
  cfg.cooperative = 1;
  acx_kernel_arg_t args[5] = {ACX_KARG_IN(x, 0), ACX_KARG_OUT(part, 0), ACX_KARG_OUT(out, 0), ACX_KARG_INT64(n),
                              ACX_KARG_OUT(valid, 0)};
  ACX_ASSERT_STATUS(acx_kernel_launch(f, &cfg, args, 5, NULL), ACX_OK);
  lt_read(out, 0, &got, 1);
  double v = 0;
  lt_read(valid, 0, &v, 1);
  CU_ASSERT_EQUAL(v, 1.0); /* grid_group::is_valid(): launched cooperatively */
  LT_CHECK_ERR("cooperative grid sum", fabs(got - ref) / fabs(ref), 1e-12);
  /* A grid that cannot be resident at once is refused by the driver, not run into a hang. */
  cfg.grid[0] = 1u << 20;
  acx_lib_result_t r;
  acx_future_t *done = NULL;
  ACX_ASSERT_STATUS(acx_kernel_launch(f, &cfg, args, 5, &done), ACX_OK);
  ACX_ASSERT_STATUS(acx_future_wait(done, LT_TIMEOUT, NULL, 0, NULL), ACX_ERR_LIBRARY);
  ACX_ASSERT_STATUS(acx_lib_result(done, &r), ACX_OK);
  CU_ASSERT_EQUAL(r.library, ACX_LIB_CUDA_DRIVER);
  CU_ASSERT_EQUAL(r.lib_code, 720); /* CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE */
  acx_future_release(done);
  ACX_ASSERT_STATUS(acx_module_unload(m), ACX_OK);
  acx_rtc_image_free(img);
  free(X);
  acx_buffer_release(x), acx_buffer_release(part), acx_buffer_release(out), acx_buffer_release(valid);
}

/* What only the executor can check: the kernel's signature, its name. */
static void t_bad_launch(void) {
  acx_rtc_image_t *img = compile(saxpy_src, ACX_RTC_CUBIN, NULL, 0);
  acx_module_t *m = NULL;
  ACX_ASSERT_STATUS(acx_module_load_image(rtc, img, &m), ACX_OK);
  acx_function_t *f = NULL;
  acx_future_t *done = NULL;
  acx_lib_result_t r;
  ACX_ASSERT_STATUS(acx_module_get_function(m, "no_such_kernel", &f), ACX_ERR_LIBRARY);
  CU_ASSERT_PTR_NULL(f);
  ACX_ASSERT_STATUS(acx_module_get_function(m, "saxpy", &f), ACX_OK);
  acx_buffer_t *x = lt_poisoned(dev, 64, ACX_DTYPE_F32), *y = lt_poisoned(dev, 64, ACX_DTYPE_F32);
  acx_launch_config_t cfg = ACX_LAUNCH_CONFIG_INIT;
  cfg.block[0] = 64;
  acx_kernel_arg_t three[3] = {ACX_KARG_FLOAT(1.0f), ACX_KARG_IN(x, 0), ACX_KARG_INOUT(y, 0)};
  ACX_ASSERT_STATUS(acx_kernel_launch(f, &cfg, three, 3, NULL), ACX_ERR_INVALID_ARG); /* 4 parameters */
  acx_kernel_arg_t wide[4] = {ACX_KARG_DOUBLE(1.0), ACX_KARG_IN(x, 0), ACX_KARG_INOUT(y, 0), ACX_KARG_INT64(64)};
  ACX_ASSERT_STATUS(acx_kernel_launch(f, &cfg, wide, 4, NULL), ACX_ERR_INVALID_ARG); /* a is a float */
  uint32_t raw[64];
  lt_read_raw(y, 0, raw, 64);
  int untouched = 1;
  for (int i = 0; i < 64; i++) untouched &= raw[i] == 0xffffffffu;
  CU_ASSERT(untouched);
  cfg.shared_bytes = 1u << 30; /* beyond any GPU */
  acx_kernel_arg_t ok[4] = {ACX_KARG_FLOAT(1.0f), ACX_KARG_IN(x, 0), ACX_KARG_INOUT(y, 0), ACX_KARG_INT64(64)};
  ACX_ASSERT_STATUS(acx_kernel_launch(f, &cfg, ok, 4, &done), ACX_OK);
  ACX_ASSERT_STATUS(acx_future_wait(done, LT_TIMEOUT, NULL, 0, NULL), ACX_ERR_LIBRARY);
  ACX_ASSERT_STATUS(acx_lib_result(done, &r), ACX_OK);
  CU_ASSERT_EQUAL(r.library, ACX_LIB_CUDA_DRIVER);
  acx_future_release(done);
  ACX_ASSERT_STATUS(acx_module_unload(m), ACX_OK);
  acx_rtc_image_free(img);
  acx_buffer_release(x);
  acx_buffer_release(y);
}

static void t_restart(void) {
  acx_rtc_image_t *img = compile(saxpy_src, ACX_RTC_CUBIN, NULL, 0);
  acx_module_t *m = NULL;
  ACX_ASSERT_STATUS(acx_module_load_image(rtc, img, &m), ACX_OK);
  acx_function_t *f = NULL;
  ACX_ASSERT_STATUS(acx_module_get_function(m, "saxpy", &f), ACX_OK);
  run_axpy(f, ACX_DTYPE_F32, 1000, 5, 0);
  uint64_t g0;
  ACX_ASSERT_STATUS(acx_device_generation(dev, &g0), ACX_OK);
  CU_ASSERT_EQUAL(acx_module_generation(m), g0);
  ACX_ASSERT_STATUS(acx_device_inject_fault(dev, 0, LT_TIMEOUT), ACX_ERR_DEVICE_LOST);
  wait_generation(g0);
  acx_buffer_t *x = lt_poisoned(dev, 8, ACX_DTYPE_F32), *y = lt_poisoned(dev, 8, ACX_DTYPE_F32);
  acx_launch_config_t cfg = ACX_LAUNCH_CONFIG_INIT;
  acx_kernel_arg_t args[4] = {ACX_KARG_FLOAT(1.0f), ACX_KARG_IN(x, 0), ACX_KARG_INOUT(y, 0), ACX_KARG_INT64(8)};
  ACX_ASSERT_STATUS(acx_kernel_launch(f, &cfg, args, 4, NULL), ACX_ERR_STALE_BUFFER);
  acx_function_t *f2 = NULL;
  ACX_ASSERT_STATUS(acx_module_get_function(m, "daxpy", &f2), ACX_ERR_STALE_BUFFER);
  ACX_ASSERT_STATUS(acx_module_unload(m), ACX_OK); /* frees the stale handle */
  /* The image outlives the executor: load it again into the new one. */
  ACX_ASSERT_STATUS(acx_module_load_image(rtc, img, &m), ACX_OK);
  ACX_ASSERT_STATUS(acx_module_get_function(m, "saxpy", &f), ACX_OK);
  run_axpy(f, ACX_DTYPE_F32, 4099, 6, 0);
  ACX_ASSERT_STATUS(acx_module_unload(m), ACX_OK);
  acx_rtc_image_free(img);
  acx_buffer_release(x);
  acx_buffer_release(y);
}

static int setup(void) {
  if (acx_system_create(NULL, &lt_sys) != ACX_OK) return 1;
  dev = unit_mode ? lt_open_host(2) : lt_open_cuda(2);
  acx_lib_config_t cfg = ACX_LIB_CONFIG_INIT;
  cfg.stream = 1;
  return acx_rtc_create(dev, &cfg, &rtc) != ACX_OK;
}

static int teardown(void) {
  int bad = acx_rtc_destroy(rtc) != ACX_OK;
  bad |= acx_device_close(dev, LT_TIMEOUT) != ACX_OK;
  bad |= acx_system_destroy(lt_sys, LT_TIMEOUT) != ACX_OK;
  return bad;
}

int main(int argc, char **argv) {
  unit_mode = argc > 1 && !strcmp(argv[1], "--unit");
  if (argc > 1 && !unit_mode) {
    fprintf(stderr, "usage: %s [--unit]\n", argv[0]);
    return 2;
  }
  static const acx_test_case_t unit_cases[] = {ACX_TEST(t_validation_compile), ACX_TEST(t_validation_launch),
                                               ACX_TEST(t_stale_buffer_arg), ACX_TEST_END};
  static const acx_test_case_t gpu_cases[] = {ACX_TEST(t_saxpy), ACX_TEST(t_compile_error), ACX_TEST(t_cooperative),
                                              ACX_TEST(t_bad_launch), ACX_TEST(t_restart), ACX_TEST_END};
  if (!unit_mode && access("/dev/nvidiactl", F_OK) != 0) acx_test_skip("no GPU on this machine");
  return acx_test_run(unit_mode ? "lib_rtc_unit" : "lib_rtc", unit_mode ? unit_cases : gpu_cases, setup, teardown);
}
