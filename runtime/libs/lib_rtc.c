/* NVRTC and module context, rank side: validates compile, load, lookup, launch and unload
 * requests and submits them to the executor (lib_rtc_exec.c). Source, options, images and the
 * compile log cross in a host region made for the request; launches carry their arguments in the
 * descriptor. No CUDA header: this runs in the rank. */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acx/rtc.h"
#include "runtime/libs/lib_internal.h"
#include "runtime/device/device_internal.h"
#include "runtime/base/log.h"

/* The first attempt's room for the image: PTX and cubins of hand-written kernels are far
 * smaller; a larger image costs one more compilation (the executor reports its size). */
#define IMAGE_CAP_FIRST ((size_t)1 << 20)
/* Room for the compiler's log in the region, at least: enough to log the first errors at WARN
 * even when the caller passes no log buffer. */
#define LOG_CAP_MIN ((size_t)16 << 10)
#define WARN_LOG_BYTES 2000

struct acx_rtc_image {
  acx_rtc_target_t target;
  char arch[16];
  size_t bytes;
  unsigned char data[]; /* PTX: NUL-terminated, bytes counts the NUL */
};

static const char *const arg_names[ACX_KERNEL_MAX_ARGS] = {
    "args[0]",  "args[1]",  "args[2]",  "args[3]",  "args[4]",  "args[5]",  "args[6]",  "args[7]",
    "args[8]",  "args[9]",  "args[10]", "args[11]", "args[12]", "args[13]", "args[14]", "args[15]",
    "args[16]", "args[17]", "args[18]", "args[19]", "args[20]", "args[21]", "args[22]", "args[23]"};
_Static_assert(ACX_KERNEL_MAX_ARGS == ACXK_RTC_MAX_ARGS, "public and wire argument limits agree");
_Static_assert(ACX_KERNEL_MAX_BUFFER_ARGS == ACXK_MAX_OPERANDS, "buffer arguments are descriptor operands");

acx_status_t acx_rtc_create(acx_device_t *dev, const acx_lib_config_t *cfg, acx_rtc_t **rtc) {
  ACX_CHECK_NULL(dev);
  ACX_CHECK_NULL(rtc);
  *rtc = NULL;
  acx_rtc_t *r = calloc(1, sizeof *r);
  if (!r) return ACX_ERR_NO_MEMORY;
  acx_status_t st = acxk_lib_ctx_create(dev, cfg, ACX_LIB_NVRTC, &r->ctx);
  if (st != ACX_OK) {
    free(r);
    return st;
  }
  *rtc = r;
  return ACX_OK;
}

acx_status_t acx_rtc_destroy(acx_rtc_t *rtc) {
  if (!rtc) return ACX_OK;
  int live = atomic_load_explicit(&rtc->modules, memory_order_acquire);
  if (live > 0) {
    ACX_WARN(LIB, "acx_rtc_destroy: %d modules of this context are still loaded: unload them first", live);
    return ACX_ERR_INVALID_STATE;
  }
  acx_status_t st = acxk_lib_ctx_destroy(rtc->ctx);
  free(rtc);
  return st;
}

static uint64_t generation_of(acx_device_t *dev) {
  /* acquire: the module's generation is compared with this; a restart's bump must be seen. */
  return atomic_load_explicit(&dev->generation, memory_order_acquire);
}

/* ------------------------------------------------------------------------------------------ */
/* host regions of compile and load requests                                                 */

static size_t up64(size_t n) { return (n + 63u) & ~(size_t)63u; }

/* A request's host region: allocated for it, freed after the reply. After a reply that never came
 * the executor may still write into it: then it is left mapped (a leak, logged) rather than freed. */
static void region_done(acx_host_mem_t *mem, acx_status_t st, const char *fn) {
  if (st == ACX_ERR_TIMEOUT) {
    ACX_WARN(LIB, "%s: no reply before the deadline; the request's host region stays mapped", fn);
    return;
  }
  acx_host_free(mem);
}

/* Copies the log into the caller's buffer, cut with a note when it does not fit. */
static void copy_log(char *dst, size_t cap, const char *src, size_t len, size_t total) {
  if (!dst || cap == 0) return;
  if (len == total && len < cap) {
    memcpy(dst, src, len);
    dst[len] = '\0';
    return;
  }
  char note[96];
  int n = snprintf(note, sizeof note, "\n[acx: log truncated: %zu of %zu bytes]\n", len < cap ? len : cap, total);
  size_t nl = n > 0 ? (size_t)n : 0;
  if (nl + 1 >= cap) { /* no room even for the note: what fits of the log */
    size_t k = len < cap - 1 ? len : cap - 1;
    memcpy(dst, src, k);
    dst[k] = '\0';
    return;
  }
  size_t k = cap - 1 - nl;
  if (k > len) k = len;
  memcpy(dst, src, k);
  memcpy(dst + k, note, nl);
  dst[k + nl] = '\0';
}

/* The first lines of a failed compilation's log, for the WARN line. */
static void warn_log(const char *fn, const char *name, const char *log, size_t len) {
  size_t k = len < WARN_LOG_BYTES ? len : WARN_LOG_BYTES;
  ACX_WARN(LIB, "%s: compiling '%s' failed:\n%.*s%s", fn, name, (int)k, log, k < len ? "\n[...]" : "");
}

static acx_status_t check_program(const char *fn, const acx_rtc_program_t *p, size_t *src_len, size_t *opt_len) {
  ACX_CHECK_ARG(p->size >= sizeof(acx_rtc_program_t) && p->size <= 4096,
                "%s: argument 'prog' has size %zu; initialise it with ACX_RTC_PROGRAM_INIT", fn, p->size);
  if (!p->source) {
    ACX_WARN(LIB, "%s: argument 'prog->source' is NULL", fn);
    return ACX_ERR_NULL_ARG;
  }
  ACX_CHECK_ARG(p->target == ACX_RTC_PTX || p->target == ACX_RTC_CUBIN,
                "%s: argument 'prog->target'=%d is not ACX_RTC_PTX or ACX_RTC_CUBIN", fn, (int)p->target);
  ACX_CHECK_ARG(p->num_options >= 0 && p->num_options <= ACX_RTC_MAX_OPTIONS,
                "%s: argument 'prog->num_options'=%d is not in [0, %d]", fn, p->num_options, ACX_RTC_MAX_OPTIONS);
  if (p->num_options > 0 && !p->options) {
    ACX_WARN(LIB, "%s: argument 'prog->options' is NULL with num_options=%d", fn, p->num_options);
    return ACX_ERR_NULL_ARG;
  }
  size_t total = strnlen(p->source, ACX_RTC_MAX_SOURCE_BYTES + 1);
  ACX_CHECK_ARG(total <= ACX_RTC_MAX_SOURCE_BYTES, "%s: argument 'prog->source' is longer than %u bytes", fn,
                ACX_RTC_MAX_SOURCE_BYTES);
  *src_len = total;
  size_t ol = 0;
  for (int i = 0; i < p->num_options; i++) {
    if (!p->options[i]) {
      ACX_WARN(LIB, "%s: argument 'prog->options[%d]' is NULL", fn, i);
      return ACX_ERR_NULL_ARG;
    }
    ol += strnlen(p->options[i], ACX_RTC_MAX_SOURCE_BYTES) + 1;
    ACX_CHECK_ARG(total + ol <= ACX_RTC_MAX_SOURCE_BYTES,
                  "%s: argument 'prog': source and options are longer than %u bytes", fn, ACX_RTC_MAX_SOURCE_BYTES);
  }
  *opt_len = ol;
  if (p->name) ACX_CHECK_ARG(strnlen(p->name, 4096) < 4096, "%s: argument 'prog->name' is longer than 4095 bytes", fn);
  return ACX_OK;
}

/* One compilation in the executor with room for an image of image_cap bytes. */
static acx_status_t compile_once(acx_rtc_t *rtc, const char *fn, const acx_rtc_program_t *p, size_t src_len,
                                 size_t opt_len, size_t image_cap, char *log, size_t log_size,
                                 acx_rtc_image_t **image, size_t *image_needed) {
  const char *name = p->name ? p->name : "acx_program.cu";
  size_t name_len = strlen(name);
  size_t log_cap = log_size > LOG_CAP_MIN ? log_size : LOG_CAP_MIN;
  size_t o_src = up64(sizeof(acxk_rtc_out_t)), o_name = up64(o_src + src_len + 1), o_opt = up64(o_name + name_len + 1);
  size_t o_log = up64(o_opt + opt_len), o_img = up64(o_log + log_cap), total = o_img + image_cap;
  acx_host_mem_t *mem = NULL;
  ACXCHECK(acx_host_alloc(acxk_lib_ctx_device(rtc->ctx), total, &mem));
  void *base_v = NULL;
  size_t bytes = 0;
  acx_status_t st = acx_host_mem_ptr(mem, &base_v, &bytes);
  if (st != ACX_OK) {
    acx_host_free(mem);
    return st;
  }
  char *base = base_v;
  memset(base, 0, sizeof(acxk_rtc_out_t));
  memcpy(base + o_src, p->source, src_len + 1);
  memcpy(base + o_name, name, name_len + 1);
  size_t at = o_opt;
  for (int i = 0; i < p->num_options; i++) {
    size_t l = strlen(p->options[i]) + 1;
    memcpy(base + at, p->options[i], l);
    at += l;
  }
  acxk_req_t req;
  acxk_req_init(&req, ACXK_OP_RTC_COMPILE);
  acxk_rtc_desc_t *q = &req.d.u.rtc;
  q->region = mem->id;
  q->target = (uint32_t)p->target;
  q->u.compile.src_off = o_src;
  q->u.compile.src_len = src_len;
  q->u.compile.name_off = o_name;
  q->u.compile.opt_off = o_opt;
  q->u.compile.opt_len = opt_len;
  q->u.compile.nopts = (uint32_t)p->num_options;
  q->u.compile.log_off = o_log;
  q->u.compile.log_cap = log_cap;
  q->u.compile.image_off = o_img;
  q->u.compile.image_cap = image_cap;
  acx_lib_result_t res;
  memset(&res, 0, sizeof res);
  st = acxk_lib_submit(rtc->ctx, fn, &req, NULL, &res);
  if (st == ACX_OK || st == ACX_ERR_COMPILE || st == ACX_ERR_LIBRARY) {
    acxk_rtc_out_t out;
    memcpy(&out, base, sizeof out);
    size_t ll = out.log_len < log_cap ? (size_t)out.log_len : log_cap - 1;
    copy_log(log, log_size, base + o_log, ll, (size_t)out.log_total);
    if (st == ACX_ERR_COMPILE) warn_log(fn, name, base + o_log, ll);
    if (st == ACX_OK && out.image_len > image_cap) {
      *image_needed = (size_t)out.image_len;
    } else if (st == ACX_OK) {
      acx_rtc_image_t *img = malloc(sizeof *img + (size_t)out.image_len);
      if (!img) {
        st = ACX_ERR_NO_MEMORY;
      } else {
        img->target = p->target;
        img->bytes = (size_t)out.image_len;
        memcpy(img->arch, out.arch, sizeof img->arch);
        img->arch[sizeof img->arch - 1] = '\0';
        memcpy(img->data, base + o_img, img->bytes);
        *image = img;
        ACX_INFO(LIB, "%s: '%s' compiled to %zu bytes of %s for %s", fn, name, img->bytes,
                 p->target == ACX_RTC_PTX ? "PTX" : "cubin", img->arch);
      }
    }
  } else if (log && log_size) {
    log[0] = '\0';
  }
  region_done(mem, st, fn);
  return st;
}

acx_status_t acx_rtc_compile(acx_rtc_t *rtc, const acx_rtc_program_t *prog, acx_rtc_image_t **image, char *log,
                             size_t log_size) {
  static const char fn[] = "acx_rtc_compile";
  if (image) *image = NULL;
  if (log && log_size) log[0] = '\0';
  if (!rtc || !prog || !image) {
    ACX_WARN(LIB, "%s: argument '%s' is NULL", fn, !rtc ? "rtc" : !prog ? "prog" : "image");
    return ACX_ERR_NULL_ARG;
  }
  if (!log) log_size = 0;
  size_t src_len = 0, opt_len = 0;
  ACXCHECK(check_program(fn, prog, &src_len, &opt_len));
  ACXCHECK(acxk_lib_refuse_host(rtc->ctx, fn));
  size_t needed = 0;
  acx_status_t st = compile_once(rtc, fn, prog, src_len, opt_len, IMAGE_CAP_FIRST, log, log_size, image, &needed);
  if (st == ACX_OK && !*image) {
    /* The same input gives the same image: a second compilation with room for it. */
    ACX_INFO(LIB, "%s: the image has %zu bytes; compiling again with room for it", fn, needed);
    size_t again = 0;
    st = compile_once(rtc, fn, prog, src_len, opt_len, needed, log, log_size, image, &again);
    if (st == ACX_OK && !*image) {
      ACX_WARN(LIB, "%s: the image grew from %zu to %zu bytes between two compilations", fn, needed, again);
      st = ACX_ERR_INVALID_STATE;
    }
  }
  return st;
}

acx_status_t acx_rtc_image_data(const acx_rtc_image_t *image, const void **data, size_t *bytes,
                                acx_rtc_target_t *target, const char **arch) {
  ACX_CHECK_NULL(image);
  if (data) *data = image->data;
  if (bytes) *bytes = image->bytes;
  if (target) *target = image->target;
  if (arch) *arch = image->arch;
  return ACX_OK;
}

void acx_rtc_image_free(acx_rtc_image_t *image) { free(image); }

/* ------------------------------------------------------------------------------------------ */
/* modules                                                                                    */

acx_status_t acx_module_load(acx_rtc_t *rtc, const void *image, size_t bytes, acx_module_t **module) {
  static const char fn[] = "acx_module_load";
  if (module) *module = NULL;
  if (!rtc || !image || !module) {
    ACX_WARN(LIB, "%s: argument '%s' is NULL", fn, !rtc ? "rtc" : !image ? "image" : "module");
    return ACX_ERR_NULL_ARG;
  }
  ACX_CHECK_ARG(bytes > 0 && bytes <= ACX_RTC_MAX_SOURCE_BYTES, "%s: argument 'bytes'=%zu is not in [1, %u]", fn, bytes,
                ACX_RTC_MAX_SOURCE_BYTES);
  ACXCHECK(acxk_lib_refuse_host(rtc->ctx, fn));
  acx_device_t *dev = acxk_lib_ctx_device(rtc->ctx);
  size_t o_img = up64(sizeof(acxk_rtc_out_t));
  acx_host_mem_t *mem = NULL;
  ACXCHECK(acx_host_alloc(dev, o_img + bytes + 1, &mem));
  void *base = NULL;
  size_t rb = 0;
  acx_status_t st = acx_host_mem_ptr(mem, &base, &rb);
  if (st != ACX_OK) {
    acx_host_free(mem);
    return st;
  }
  memcpy((char *)base + o_img, image, bytes);
  ((char *)base)[o_img + bytes] = '\0'; /* PTX is loaded as a C string */
  acxk_req_t req;
  acxk_req_init(&req, ACXK_OP_RTC_LOAD);
  req.d.u.rtc.region = mem->id;
  req.d.u.rtc.u.load.image_off = o_img;
  req.d.u.rtc.u.load.image_len = bytes;
  /* Read before the request: if the executor restarts meanwhile, the module looks older than it
   * is and is refused as stale, never taken for one of the new executor. */
  uint64_t gen = generation_of(dev);
  acx_lib_result_t res;
  memset(&res, 0, sizeof res);
  st = acxk_lib_submit(rtc->ctx, fn, &req, NULL, &res);
  region_done(mem, st, fn);
  if (st != ACX_OK) return st;
  acx_module_t *m = calloc(1, sizeof *m);
  if (!m) return ACX_ERR_NO_MEMORY; /* the module stays loaded until the executor ends */
  m->rtc = rtc;
  m->id = res.bits;
  m->generation = gen;
  atomic_fetch_add_explicit(&rtc->modules, 1, memory_order_acq_rel);
  ACX_INFO(LIB, "%s: module %" PRIu64 " loaded (%zu bytes) in executor generation %" PRIu64, fn, m->id, bytes, gen);
  *module = m;
  return ACX_OK;
}

acx_status_t acx_module_load_image(acx_rtc_t *rtc, const acx_rtc_image_t *image, acx_module_t **module) {
  if (module) *module = NULL;
  if (!image) {
    ACX_WARN(LIB, "acx_module_load_image: argument 'image' is NULL");
    return ACX_ERR_NULL_ARG;
  }
  return acx_module_load(rtc, image->data, image->bytes, module);
}

uint64_t acx_module_generation(const acx_module_t *module) { return module ? module->generation : 0; }

/* ACX_ERR_STALE_BUFFER when the module belongs to an earlier executor incarnation. */
static acx_status_t check_module(const char *fn, const acx_module_t *m) {
  uint64_t g = generation_of(acxk_lib_ctx_device(m->rtc->ctx));
  if (m->generation == g) return ACX_OK;
  ACX_WARN(LIB, "%s: module %" PRIu64 " was loaded in executor generation %" PRIu64 ", the device is at %" PRIu64
           ": load its image again", fn, m->id, m->generation, g);
  return ACX_ERR_STALE_BUFFER;
}

static void free_module(acx_module_t *m) {
  for (acx_function_t *f = m->fns, *n; f; f = n) {
    n = f->next;
    free(f);
  }
  atomic_fetch_sub_explicit(&m->rtc->modules, 1, memory_order_acq_rel);
  free(m);
}

acx_status_t acx_module_unload(acx_module_t *m) {
  static const char fn[] = "acx_module_unload";
  if (!m) return ACX_OK;
  acx_status_t st = ACX_OK;
  if (check_module(fn, m) == ACX_OK) {
    acxk_req_t req;
    acxk_req_init(&req, ACXK_OP_RTC_UNLOAD);
    req.d.u.rtc.module = m->id;
    req.d.u.rtc.generation = m->generation;
    st = acxk_lib_submit(m->rtc->ctx, fn, &req, NULL, NULL);
    /* A module the executor no longer has (restarted meanwhile) is gone with it. */
    if (st == ACX_ERR_STALE_BUFFER || st == ACX_ERR_DEVICE_LOST) st = ACX_OK;
  } else {
    ACX_INFO(LIB, "%s: module %" PRIu64 " died with executor generation %" PRIu64 "; freeing its handle", fn, m->id,
             m->generation);
  }
  free_module(m);
  return st;
}

acx_status_t acx_module_get_function(acx_module_t *m, const char *name, acx_function_t **out) {
  static const char fn[] = "acx_module_get_function";
  if (out) *out = NULL;
  if (!m || !name || !out) {
    ACX_WARN(LIB, "%s: argument '%s' is NULL", fn, !m ? "module" : !name ? "name" : "fn");
    return ACX_ERR_NULL_ARG;
  }
  size_t len = strnlen(name, ACXK_RTC_NAME_MAX);
  ACX_CHECK_ARG(len > 0 && len < ACXK_RTC_NAME_MAX, "%s: argument 'name' must have 1 to %d bytes", fn,
                ACXK_RTC_NAME_MAX - 1);
  ACXCHECK(check_module(fn, m));
  for (acx_function_t *f = m->fns; f; f = f->next)
    if (strcmp(f->name, name) == 0) {
      *out = f;
      return ACX_OK;
    }
  ACXCHECK(acxk_lib_refuse_host(m->rtc->ctx, fn));
  acxk_req_t req;
  acxk_req_init(&req, ACXK_OP_RTC_GET_FUNCTION);
  req.d.u.rtc.module = m->id;
  req.d.u.rtc.generation = m->generation;
  memcpy(req.d.u.rtc.u.name, name, len + 1);
  acx_lib_result_t res;
  memset(&res, 0, sizeof res);
  ACXCHECK(acxk_lib_submit(m->rtc->ctx, fn, &req, NULL, &res));
  acx_function_t *f = calloc(1, sizeof *f);
  if (!f) return ACX_ERR_NO_MEMORY;
  f->module = m;
  f->index = (uint32_t)res.bits;
  memcpy(f->name, name, len + 1);
  f->next = m->fns;
  m->fns = f;
  *out = f;
  return ACX_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* launch                                                                                     */

static acx_status_t check_launch_config(const char *fn, const acx_launch_config_t *c) {
  ACX_CHECK_ARG(c->size >= sizeof(acx_launch_config_t) && c->size <= 4096,
                "%s: argument 'cfg' has size %zu; initialise it with ACX_LAUNCH_CONFIG_INIT", fn, c->size);
  for (int i = 0; i < 3; i++) {
    ACX_CHECK_ARG(c->grid[i] >= 1 && c->block[i] >= 1, "%s: argument 'cfg': grid[%d]=%u and block[%d]=%u must be >= 1",
                  fn, i, c->grid[i], i, c->block[i]);
  }
  /* CUDA's limits on every GPU acx runs on (compute capability >= 7). */
  ACX_CHECK_ARG(c->grid[0] <= INT32_MAX && c->grid[1] <= 65535 && c->grid[2] <= 65535,
                "%s: argument 'cfg->grid' {%u, %u, %u} exceeds CUDA's {2^31-1, 65535, 65535}", fn, c->grid[0],
                c->grid[1], c->grid[2]);
  uint64_t threads = (uint64_t)c->block[0] * c->block[1] * c->block[2];
  ACX_CHECK_ARG(threads <= 1024 && c->block[2] <= 64, "%s: argument 'cfg->block' {%u, %u, %u} exceeds 1024 threads "
                "(or 64 in z)", fn, c->block[0], c->block[1], c->block[2]);
  ACX_CHECK_ARG(c->cooperative == 0 || c->cooperative == 1, "%s: argument 'cfg->cooperative'=%d must be 0 or 1", fn,
                c->cooperative);
  return ACX_OK;
}

static acx_status_t buffer_arg(acxk_lib_ctx_t *x, const char *fn, acxk_req_t *req, int i, const acx_kernel_arg_t *a,
                               int *nbuf) {
  const char *name = arg_names[i];
  ACXCHECK(acxk_lib_check_buf(x, fn, name, a->buf, 0, 0));
  if (*nbuf >= ACX_KERNEL_MAX_BUFFER_ARGS) {
    ACX_WARN(LIB, "%s: argument '%s' is buffer argument %d; at most %d are allowed", fn, name, *nbuf + 1,
             ACX_KERNEL_MAX_BUFFER_ARGS);
    return ACX_ERR_INVALID_ARG;
  }
  size_t es = acx_dtype_size(a->buf->dtype);
  if (a->offset > a->buf->bytes) {
    ACX_WARN(LIB, "%s: argument '%s': offset %zu is beyond its buffer's %zu bytes", fn, name, a->offset, a->buf->bytes);
    return ACX_ERR_OUT_OF_RANGE;
  }
  /* The kernel may touch everything from the offset on: that whole range is ordered. */
  uint64_t span = (uint64_t)((a->buf->bytes - a->offset) / es * es);
  int writes = a->type != ACX_KARG_BUF_IN;
  ACXCHECK(acxk_req_span(req, *nbuf, fn, name, a->buf, a->offset, span, writes));
  req->d.u.rtc.u.launch.args[i] = (acxk_rtc_arg_t){.type = (uint32_t)a->type, .opnd = (uint32_t)*nbuf};
  (*nbuf)++;
  return ACX_OK;
}

acx_status_t acx_kernel_launch(acx_function_t *f, const acx_launch_config_t *cfg, const acx_kernel_arg_t *args,
                               int nargs, acx_future_t **done) {
  static const char fn[] = "acx_kernel_launch";
  if (done) *done = NULL;
  if (!f || !cfg || (nargs > 0 && !args)) {
    ACX_WARN(LIB, "%s: argument '%s' is NULL", fn, !f ? "fn" : !cfg ? "cfg" : "args");
    return ACX_ERR_NULL_ARG;
  }
  ACX_CHECK_ARG(nargs >= 0 && nargs <= ACX_KERNEL_MAX_ARGS, "%s: argument 'nargs'=%d is not in [0, %d]", fn, nargs,
                ACX_KERNEL_MAX_ARGS);
  ACXCHECK(check_launch_config(fn, cfg));
  acx_module_t *m = f->module;
  acxk_lib_ctx_t *x = m->rtc->ctx;
  acxk_req_t req;
  acxk_req_init(&req, ACXK_OP_RTC_LAUNCH);
  acxk_rtc_desc_t *q = &req.d.u.rtc;
  int nbuf = 0;
  for (int i = 0; i < nargs; i++) {
    const acx_kernel_arg_t *a = &args[i];
    acxk_rtc_arg_t *w = &q->u.launch.args[i];
    switch (a->type) {
      case ACX_KARG_BUF_IN:
      case ACX_KARG_BUF_OUT:
      case ACX_KARG_BUF_INOUT: ACXCHECK(buffer_arg(x, fn, &req, i, a, &nbuf)); break;
      case ACX_KARG_I32:
      case ACX_KARG_U32:
      case ACX_KARG_F32: {
        uint32_t b;
        memcpy(&b, &a->v, sizeof b); /* the union's first four bytes hold each 4-byte member */
        *w = (acxk_rtc_arg_t){.type = (uint32_t)a->type, .bits = b};
        break;
      }
      case ACX_KARG_I64:
      case ACX_KARG_U64:
      case ACX_KARG_F64: {
        uint64_t b;
        memcpy(&b, &a->v, sizeof b);
        *w = (acxk_rtc_arg_t){.type = (uint32_t)a->type, .bits = b};
        break;
      }
      default:
        ACX_WARN(LIB, "%s: argument '%s' has type %d, which is no acx_kernel_arg_type_t", fn, arg_names[i], (int)a->type);
        return ACX_ERR_INVALID_ARG;
    }
  }
  ACXCHECK(check_module(fn, m));
  q->module = m->id;
  q->generation = m->generation;
  q->function = f->index;
  memcpy(q->u.launch.grid, cfg->grid, sizeof q->u.launch.grid);
  memcpy(q->u.launch.block, cfg->block, sizeof q->u.launch.block);
  q->u.launch.shared_bytes = cfg->shared_bytes;
  q->u.launch.cooperative = (uint32_t)cfg->cooperative;
  q->u.launch.nargs = (uint32_t)nargs;
  return acxk_lib_submit(x, fn, &req, done, NULL);
}
