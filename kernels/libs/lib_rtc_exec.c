/* NVRTC and modules, executor side. Compilation (NVRTC) and module loading (cuModuleLoadData, a
 * PTX JIT inside) can take seconds: they run on a worker thread of this engine incarnation, which
 * replies itself, so the executor thread keeps serving other streams and its heartbeat. Lookups
 * and launches (cuModuleGetFunction, cuLaunchKernel / cuLaunchCooperativeKernel) run on the
 * executor thread, on the command's stream after the framework ordered the buffer arguments.
 * Unloading waits on the worker for the launches queued from the module (events), then unloads.
 *
 * The driver API is reached through cudaGetDriverEntryPointByVersion rather than by linking
 * libcuda: libacx must load on machines without a driver (the host kind, CI), and the toolkit's
 * link stub names libcuda.so.1, which only a driver installation provides. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <nvrtc.h>

#include "acx/rtc.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/libs/lib_exec.h"
#include "runtime/base/clock.h"
#include "runtime/base/log.h"
#include "runtime/base/param.h"

#define STATIC_SHARED_LIMIT (48u << 10) /* dynamic shared memory above this needs the opt-in */

/* ------------------------------------------------------------------------------------------ */
/* the driver API, through the runtime's entry points                                         */

typedef struct drv {
  CUresult (*GetErrorName)(CUresult, const char **);
  CUresult (*CtxGetCurrent)(CUcontext *);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*ModuleLoadData)(CUmodule *, const void *);
  CUresult (*ModuleUnload)(CUmodule);
  CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*FuncSetAttribute)(CUfunction, CUfunction_attribute, int);
  CUresult (*FuncGetParamInfo)(CUfunction, size_t, size_t *, size_t *); /* NULL before CUDA 12.4 */
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           CUstream, void **, void **);
  CUresult (*LaunchCooperativeKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                      unsigned, CUstream, void **);
} drv_t;

static drv_t drv;
static int drv_ok;
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

static int entry(const char *name, unsigned version, void **fn) { return acxk_driver_entry(name, version, fn); }

static void drv_load(void) {
  int bad = 0;
  bad |= entry("cuGetErrorName", 12000, (void **)&drv.GetErrorName);
  bad |= entry("cuCtxGetCurrent", 12000, (void **)&drv.CtxGetCurrent);
  bad |= entry("cuCtxSetCurrent", 12000, (void **)&drv.CtxSetCurrent);
  bad |= entry("cuModuleLoadData", 12000, (void **)&drv.ModuleLoadData);
  bad |= entry("cuModuleUnload", 12000, (void **)&drv.ModuleUnload);
  bad |= entry("cuModuleGetFunction", 12000, (void **)&drv.ModuleGetFunction);
  bad |= entry("cuFuncSetAttribute", 12000, (void **)&drv.FuncSetAttribute);
  bad |= entry("cuLaunchKernel", 12000, (void **)&drv.LaunchKernel);
  bad |= entry("cuLaunchCooperativeKernel", 12000, (void **)&drv.LaunchCooperativeKernel);
  if (entry("cuFuncGetParamInfo", 12040, (void **)&drv.FuncGetParamInfo) != 0)
    ACX_INFO(LIB, "cuFuncGetParamInfo is not available (driver before CUDA 12.4): kernel arguments are not checked "
             "against the kernels' signatures");
  drv_ok = !bad;
  if (bad) ACX_WARN(LIB, "the CUDA driver API entry points could not be loaded: modules are not available");
}

static const char *cu_name(CUresult r) {
  const char *s = NULL;
  if (drv.GetErrorName && drv.GetErrorName(r, &s) == CUDA_SUCCESS && s) return s;
  return "CUDA_ERROR_UNKNOWN";
}

/* ------------------------------------------------------------------------------------------ */
/* executor-side state                                                                        */

typedef struct rtc_fn {
  CUfunction f;
  int nparams;                       /* -1: unknown (no cuFuncGetParamInfo) */
  uint8_t psize[ACXK_RTC_MAX_ARGS];  /* parameter sizes, when known */
  uint32_t shared_limit;             /* dynamic shared memory the kernel is opted in for */
} rtc_fn_t;

typedef struct rtc_module {
  uint64_t id;
  CUmodule mod;
  uint64_t streams; /* bit i: kernels of the module were launched on stream i */
  rtc_fn_t *fns;
  uint32_t nfns, cap;
  struct rtc_module *next;
} rtc_module_t;

typedef enum job_kind { JOB_COMPILE, JOB_LOAD, JOB_UNLOAD } job_kind_t;

typedef struct job {
  job_kind_t kind;
  uint64_t req_id;
  acxk_rtc_desc_t d;
  char *region; /* COMPILE, LOAD: the request's host region in this process */
  uint64_t region_bytes;
  rtc_module_t *module; /* UNLOAD: detached from the table */
  cudaEvent_t ev[ACXI_MAX_STREAMS];
  int nev;
  struct job *next;
} job_t;

typedef struct rtc_state {
  acxi_engine_t *e;
  const acxi_engine_api_t *api;
  uint64_t generation;
  CUcontext ctx;
  int cc_major, cc_minor;
  pthread_mutex_t lock; /* the job queue and the module list */
  pthread_cond_t cv;
  pthread_t worker;
  int started, stopping;
  job_t *head, *tail;
  rtc_module_t *modules;
  uint64_t next_id;
} rtc_state_t;

static void post(rtc_state_t *s, uint64_t req_id, acx_status_t st, acx_lib_id_t lib, int code, uint64_t value) {
  acxk_lib_post(s->e, s->api, req_id, st, lib, code, value);
}

static void sleep_us(long us) {
  struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------------------------------------ */
/* the worker: compile, load, unload                                                          */

static int arch_option(const char *o) {
  return strncmp(o, "--gpu-architecture", 18) == 0 || strncmp(o, "-arch", 5) == 0;
}

static void do_compile(rtc_state_t *s, job_t *j) {
  const acxk_rtc_desc_t *q = &j->d;
  char *base = j->region;
  acxk_rtc_out_t out;
  memset(&out, 0, sizeof out);
  const char *opts[ACX_RTC_MAX_OPTIONS + 1];
  int n = 0;
  int user_arch = 0;
  for (uint64_t at = 0; at < q->u.compile.opt_len && n < ACX_RTC_MAX_OPTIONS; n++) {
    const char *o = base + q->u.compile.opt_off + at;
    opts[n] = o;
    at += strlen(o) + 1; /* each option's NUL was checked before the job was queued */
    if (arch_option(o)) {
      user_arch = 1;
      const char *eq = strchr(o, '=');
      snprintf(out.arch, sizeof out.arch, "%s", eq ? eq + 1 : "user");
    }
  }
  char arch_opt[48];
  if (!user_arch) {
    int cubin = q->target == ACX_RTC_CUBIN;
    snprintf(out.arch, sizeof out.arch, "%s_%d%d", cubin ? "sm" : "compute", s->cc_major, s->cc_minor);
    snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=%s", out.arch);
    opts[n++] = arch_opt;
  }
  const char *name = base + q->u.compile.name_off;
  nvrtcProgram prog = NULL;
  acx_status_t st = ACX_OK;
  int code = 0;
  nvrtcResult r = nvrtcCreateProgram(&prog, base + q->u.compile.src_off, name, 0, NULL, NULL);
  if (r != NVRTC_SUCCESS) {
    ACX_WARN(LIB, "request %" PRIu64 ": nvrtcCreateProgram failed: nvrtc %s (%d)", j->req_id, nvrtcGetErrorString(r),
             (int)r);
    post(s, j->req_id, r == NVRTC_ERROR_OUT_OF_MEMORY ? ACX_ERR_NO_MEMORY : ACX_ERR_LIBRARY, ACX_LIB_NVRTC, (int)r, 0);
    return;
  }
  int64_t t0 = acxi_now_ns();
  nvrtcResult cr = nvrtcCompileProgram(prog, n, opts);
  size_t ls = 0;
  if (nvrtcGetProgramLogSize(prog, &ls) == NVRTC_SUCCESS && ls > 1) {
    char *log = malloc(ls);
    if (log && nvrtcGetProgramLog(prog, log) == NVRTC_SUCCESS) {
      size_t len = ls - 1, k = len < q->u.compile.log_cap - 1 ? len : q->u.compile.log_cap - 1;
      memcpy(base + q->u.compile.log_off, log, k);
      base[q->u.compile.log_off + k] = '\0';
      out.log_len = k;
      out.log_total = len;
    }
    free(log);
  }
  if (cr == NVRTC_ERROR_COMPILATION || cr == NVRTC_ERROR_INVALID_OPTION) {
    st = ACX_ERR_COMPILE; /* the user's source or options: the log says what */
    code = (int)cr;
    ACX_INFO(LIB, "request %" PRIu64 ": compiling '%s' failed: nvrtc %s", j->req_id, name, nvrtcGetErrorString(cr));
  } else if (cr != NVRTC_SUCCESS) {
    ACX_WARN(LIB, "request %" PRIu64 ": nvrtcCompileProgram failed: nvrtc %s (%d)", j->req_id, nvrtcGetErrorString(cr),
             (int)cr);
    st = cr == NVRTC_ERROR_OUT_OF_MEMORY ? ACX_ERR_NO_MEMORY : ACX_ERR_LIBRARY;
    code = (int)cr;
  } else {
    size_t bytes = 0;
    int cubin = q->target == ACX_RTC_CUBIN;
    r = cubin ? nvrtcGetCUBINSize(prog, &bytes) : nvrtcGetPTXSize(prog, &bytes);
    if (r == NVRTC_SUCCESS) {
      out.image_len = bytes;
      if (bytes <= q->u.compile.image_cap) {
        char *img = base + q->u.compile.image_off;
        r = cubin ? nvrtcGetCUBIN(prog, img) : nvrtcGetPTX(prog, img);
      }
    }
    if (r != NVRTC_SUCCESS) {
      ACX_WARN(LIB, "request %" PRIu64 ": reading the %s failed: nvrtc %s (%d)", j->req_id, cubin ? "cubin" : "PTX",
               nvrtcGetErrorString(r), (int)r);
      st = ACX_ERR_LIBRARY;
      code = (int)r;
    } else {
      ACX_INFO(LIB, "request %" PRIu64 ": '%s' compiled for %s in %.1f ms (%zu bytes)", j->req_id, name, out.arch,
               (double)(acxi_now_ns() - t0) / 1e6, bytes);
    }
  }
  (void)nvrtcDestroyProgram(&prog);
  memcpy(base, &out, sizeof out);
  post(s, j->req_id, st, ACX_LIB_NVRTC, code, 0);
}

static void do_load(rtc_state_t *s, job_t *j) {
  CUmodule mod = NULL;
  CUresult r = drv.ModuleLoadData(&mod, j->region + j->d.u.load.image_off);
  if (r != CUDA_SUCCESS) {
    ACX_WARN(LIB, "request %" PRIu64 ": cuModuleLoadData failed: cuda-driver %s (%d)", j->req_id, cu_name(r), (int)r);
    post(s, j->req_id, r == CUDA_ERROR_OUT_OF_MEMORY ? ACX_ERR_DEVICE_OOM : ACX_ERR_LIBRARY, ACX_LIB_CUDA_DRIVER, (int)r,
         0);
    return;
  }
  rtc_module_t *m = calloc(1, sizeof *m);
  if (!m) {
    (void)drv.ModuleUnload(mod);
    post(s, j->req_id, ACX_ERR_NO_MEMORY, ACX_LIB_NONE, 0, 0);
    return;
  }
  m->mod = mod;
  pthread_mutex_lock(&s->lock);
  m->id = ++s->next_id;
  m->next = s->modules;
  s->modules = m;
  pthread_mutex_unlock(&s->lock);
  post(s, j->req_id, ACX_OK, ACX_LIB_CUDA_DRIVER, 0, m->id);
}

static void free_module(rtc_module_t *m) {
  free(m->fns);
  free(m);
}

static void do_unload(rtc_state_t *s, job_t *j) {
  rtc_module_t *m = j->module;
  acx_status_t st = ACX_OK;
  int code = 0;
  /* Poll rather than cudaEventSynchronize: the wait keeps a deadline even on a hung kernel. */
  int64_t deadline = acxi_deadline(acxi_param_int("ACX_EXEC_TIMEOUT_MS") * 1000000);
  for (int i = 0; i < j->nev && st == ACX_OK; i++) {
    cudaError_t err;
    while ((err = cudaEventQuery(j->ev[i])) == cudaErrorNotReady && acxi_now_ns() < deadline) sleep_us(100);
    if (err == cudaErrorNotReady) {
      ACX_WARN(LIB, "request %" PRIu64 ": module %" PRIu64 "'s launches did not finish within ACX_EXEC_TIMEOUT_MS; it "
               "stays loaded", j->req_id, m->id);
      st = ACX_ERR_TIMEOUT;
    } else if (err != cudaSuccess) {
      ACX_WARN(LIB, "request %" PRIu64 ": waiting for module %" PRIu64 "'s launches: %s (%d)", j->req_id, m->id,
               cudaGetErrorString(err), (int)err);
      (void)cudaGetLastError();
      st = ACX_ERR_DEVICE;
      code = (int)err;
    }
  }
  for (int i = 0; i < j->nev; i++) (void)cudaEventDestroy(j->ev[i]);
  if (st == ACX_OK) {
    CUresult r = drv.ModuleUnload(m->mod);
    if (r != CUDA_SUCCESS) {
      ACX_WARN(LIB, "request %" PRIu64 ": cuModuleUnload failed: cuda-driver %s (%d)", j->req_id, cu_name(r), (int)r);
      st = ACX_ERR_LIBRARY;
      code = (int)r;
    }
    free_module(m);
  } /* else: leaked with its module; launches may still use it */
  post(s, j->req_id, st, ACX_LIB_CUDA_DRIVER, code, 0);
}

static void *worker_main(void *arg) {
  rtc_state_t *s = arg;
  /* The executor thread's context (the device's primary context): modules loaded here are
   * usable there. */
  if (s->ctx) (void)drv.CtxSetCurrent(s->ctx);
  pthread_mutex_lock(&s->lock);
  for (;;) {
    while (!s->head && !s->stopping) {
      /* Idle between jobs; the timeout only bounds the wait (a stop is signalled). */
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_sec += 1;
      pthread_cond_timedwait(&s->cv, &s->lock, &ts);
    }
    if (!s->head) break; /* stopping, and every queued job done */
    job_t *j = s->head;
    s->head = j->next;
    if (!s->head) s->tail = NULL;
    pthread_mutex_unlock(&s->lock);
    switch (j->kind) {
      case JOB_COMPILE: do_compile(s, j); break;
      case JOB_LOAD: do_load(s, j); break;
      case JOB_UNLOAD: do_unload(s, j); break;
    }
    free(j);
    pthread_mutex_lock(&s->lock);
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

static acx_status_t enqueue(acxk_lib_call_t *c, rtc_state_t *s, job_t *j) {
  pthread_mutex_lock(&s->lock);
  if (!s->started) {
    int rc = pthread_create(&s->worker, NULL, worker_main, s);
    if (rc != 0) {
      pthread_mutex_unlock(&s->lock);
      ACX_WARN(LIB, "request %" PRIu64 ": starting the NVRTC/module worker thread failed (error %d)", c->cmd->req_id, rc);
      return ACX_ERR_SYSTEM;
    }
    s->started = 1;
  }
  if (s->tail) s->tail->next = j;
  else s->head = j;
  s->tail = j;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->lock);
  c->readback = ACXK_READBACK_HANDLER;
  return ACX_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* the handler                                                                                */

void acxk_rtc_exec_destroy(void *state) {
  rtc_state_t *s = state;
  pthread_mutex_lock(&s->lock);
  s->stopping = 1;
  pthread_cond_signal(&s->cv);
  int started = s->started;
  pthread_mutex_unlock(&s->lock);
  /* The worker finishes the queued jobs first: each one's caller gets its reply. */
  if (started) pthread_join(s->worker, NULL);
  for (rtc_module_t *m = s->modules, *n; m; m = n) {
    n = m->next;
    (void)drv.ModuleUnload(m->mod);
    free_module(m);
  }
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

static acx_status_t state_of(acxk_lib_call_t *c, rtc_state_t **out) {
  pthread_once(&drv_once, drv_load);
  if (!drv_ok) return acxk_lib_bad(c, ACX_ERR_NOT_SUPPORTED, "the CUDA driver API is not available");
  void **slot = acxk_lib_state(c, ACX_LIB_NVRTC);
  if (*slot) {
    *out = *slot;
    return ACX_OK;
  }
  rtc_state_t *s = calloc(1, sizeof *s);
  if (!s) return ACX_ERR_NO_MEMORY;
  s->e = c->e;
  s->api = c->api;
  s->generation = c->api->params(c->e)->generation;
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&s->cc_major, cudaDevAttrComputeCapabilityMajor, dev);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&s->cc_minor, cudaDevAttrComputeCapabilityMinor, dev);
  if (err != cudaSuccess) {
    free(s);
    return acxk_lib_cuda_fail(c, err, "cudaDeviceGetAttribute(compute capability)");
  }
  CUresult r = drv.CtxGetCurrent(&s->ctx);
  if (r != CUDA_SUCCESS || !s->ctx) {
    free(s);
    return acxk_lib_fail(c, ACX_LIB_CUDA_DRIVER, (int)r, cu_name(r), "cuCtxGetCurrent", 0);
  }
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->cv, NULL);
  *slot = s;
  *out = s;
  ACX_INFO(LIB, "NVRTC/modules: device %d, compute capability %d.%d", dev, s->cc_major, s->cc_minor);
  return ACX_OK;
}

/* [off, off + len) inside a region of `bytes`. */
static int inside(uint64_t off, uint64_t len, uint64_t bytes) { return off <= bytes && len <= bytes - off; }

static acx_status_t region_of(acxk_lib_call_t *c, job_t *j) {
  void *p = NULL;
  uint64_t bytes = 0;
  ACXCHECK(c->api->host_region(c->e, c->d.u.rtc.region, &p, &bytes));
  j->region = p;
  j->region_bytes = bytes;
  if (bytes < sizeof(acxk_rtc_out_t)) return acxk_lib_bad(c, ACX_ERR_OUT_OF_RANGE, "the request's host region is too small");
  return ACX_OK;
}

/* The compile request's layout, checked before the worker trusts it: every piece inside the
 * region, every string terminated where the descriptor says. */
static acx_status_t check_compile(acxk_lib_call_t *c, const job_t *j) {
  const acxk_rtc_desc_t *q = &c->d.u.rtc;
  const char *b = j->region;
  uint64_t n = j->region_bytes;
  if (q->target != ACX_RTC_PTX && q->target != ACX_RTC_CUBIN)
    return acxk_lib_bad(c, ACX_ERR_INVALID_ARG, "unknown compile target");
  if (!inside(q->u.compile.src_off, q->u.compile.src_len + 1, n) || b[q->u.compile.src_off + q->u.compile.src_len] ||
      !inside(q->u.compile.name_off, 1, n) || !memchr(b + q->u.compile.name_off, 0, n - q->u.compile.name_off) ||
      !inside(q->u.compile.opt_off, q->u.compile.opt_len, n) || !inside(q->u.compile.log_off, q->u.compile.log_cap, n) ||
      q->u.compile.log_cap < 1 || !inside(q->u.compile.image_off, q->u.compile.image_cap, n) ||
      q->u.compile.nopts > ACX_RTC_MAX_OPTIONS)
    return acxk_lib_bad(c, ACX_ERR_OUT_OF_RANGE, "the compile request's layout exceeds its host region");
  uint32_t nuls = 0;
  for (uint64_t i = 0; i < q->u.compile.opt_len; i++) nuls += b[q->u.compile.opt_off + i] == '\0';
  if (nuls != q->u.compile.nopts || (q->u.compile.opt_len && b[q->u.compile.opt_off + q->u.compile.opt_len - 1]))
    return acxk_lib_bad(c, ACX_ERR_INVALID_ARG, "the compile request's options are malformed");
  return ACX_OK;
}

/* The module of a GET_FUNCTION / LAUNCH / UNLOAD (ACX_ERR_STALE_BUFFER: not of this executor). */
static acx_status_t find_module(acxk_lib_call_t *c, rtc_state_t *s, int detach, rtc_module_t **out) {
  const acxk_rtc_desc_t *q = &c->d.u.rtc;
  *out = NULL;
  if (q->generation != s->generation) {
    ACX_WARN(LIB, "request %" PRIu64 ": module %" PRIu64 " is of executor generation %" PRIu64 ", this is %" PRIu64,
             c->cmd->req_id, q->module, q->generation, s->generation);
    return ACX_ERR_STALE_BUFFER;
  }
  pthread_mutex_lock(&s->lock);
  rtc_module_t **pp = &s->modules;
  while (*pp && (*pp)->id != q->module) pp = &(*pp)->next;
  rtc_module_t *m = *pp;
  if (m && detach) *pp = m->next;
  pthread_mutex_unlock(&s->lock);
  if (!m) {
    ACX_WARN(LIB, "request %" PRIu64 ": no module %" PRIu64 " in this executor (unloaded)", c->cmd->req_id, q->module);
    return ACX_ERR_STALE_BUFFER;
  }
  *out = m;
  return ACX_OK;
}

static acx_status_t get_function(acxk_lib_call_t *c, rtc_state_t *s) {
  const acxk_rtc_desc_t *q = &c->d.u.rtc;
  if (!memchr(q->u.name, 0, sizeof q->u.name) || !q->u.name[0])
    return acxk_lib_bad(c, ACX_ERR_INVALID_ARG, "the kernel name is empty or not terminated");
  rtc_module_t *m = NULL;
  ACXCHECK(find_module(c, s, 0, &m));
  CUfunction f = NULL;
  CUresult r = drv.ModuleGetFunction(&f, m->mod, q->u.name);
  if (r != CUDA_SUCCESS) {
    ACX_WARN(LIB, "request %" PRIu64 ": no kernel '%s' in module %" PRIu64, c->cmd->req_id, q->u.name, m->id);
    return acxk_lib_fail(c, ACX_LIB_CUDA_DRIVER, (int)r, cu_name(r), "cuModuleGetFunction", 0);
  }
  uint32_t i = 0;
  while (i < m->nfns && m->fns[i].f != f) i++;
  if (i == m->nfns) {
    if (m->nfns == m->cap) {
      uint32_t cap = m->cap ? 2 * m->cap : 8;
      rtc_fn_t *n = realloc(m->fns, cap * sizeof *n);
      if (!n) return ACX_ERR_NO_MEMORY;
      m->fns = n;
      m->cap = cap;
    }
    rtc_fn_t *fn = &m->fns[m->nfns++];
    memset(fn, 0, sizeof *fn);
    fn->f = f;
    fn->nparams = -1;
    if (drv.FuncGetParamInfo) {
      int np = 0;
      for (; np <= ACXK_RTC_MAX_ARGS; np++) {
        size_t off = 0, size = 0;
        if (drv.FuncGetParamInfo(f, (size_t)np, &off, &size) != CUDA_SUCCESS) break;
        if (np < ACXK_RTC_MAX_ARGS) fn->psize[np] = size > 255 ? 255 : (uint8_t)size;
      }
      fn->nparams = np;
    }
  }
  c->value = i;
  c->readback = ACXK_READBACK_NOW;
  return ACX_OK;
}

static size_t arg_size(uint32_t type) {
  return type == ACX_KARG_I32 || type == ACX_KARG_U32 || type == ACX_KARG_F32 ? 4 : 8;
}

static acx_status_t launch(acxk_lib_call_t *c, rtc_state_t *s) {
  const acxk_rtc_desc_t *q = &c->d.u.rtc;
  rtc_module_t *m = NULL;
  ACXCHECK(find_module(c, s, 0, &m));
  if (q->function >= m->nfns) return acxk_lib_bad(c, ACX_ERR_INVALID_ARG, "unknown function index");
  rtc_fn_t *fn = &m->fns[q->function];
  uint32_t na = q->u.launch.nargs;
  if (na > ACXK_RTC_MAX_ARGS) return acxk_lib_bad(c, ACX_ERR_INVALID_ARG, "too many kernel arguments");
  if (fn->nparams >= 0 && (uint32_t)fn->nparams != na) {
    ACX_WARN(LIB, "request %" PRIu64 ": the kernel takes %d parameters, the launch passes %u", c->cmd->req_id,
             fn->nparams, na);
    return ACX_ERR_INVALID_ARG;
  }
  uint64_t vals[ACXK_RTC_MAX_ARGS];
  void *params[ACXK_RTC_MAX_ARGS];
  for (uint32_t i = 0; i < na; i++) {
    const acxk_rtc_arg_t *a = &q->u.launch.args[i];
    if (a->type >= ACX_KARG_BUF_IN && a->type <= ACX_KARG_BUF_INOUT) {
      if (a->opnd >= c->d.nops || !c->ptr[a->opnd])
        return acxk_lib_bad(c, ACX_ERR_INVALID_ARG, "a buffer argument names no operand");
      vals[i] = (uint64_t)(uintptr_t)c->ptr[a->opnd];
    } else if (a->type >= ACX_KARG_I32 && a->type <= ACX_KARG_F64) {
      vals[i] = a->bits;
    } else {
      return acxk_lib_bad(c, ACX_ERR_INVALID_ARG, "unknown kernel argument type");
    }
    if (fn->nparams >= 0 && fn->psize[i] != arg_size(a->type)) {
      ACX_WARN(LIB, "request %" PRIu64 ": kernel parameter %u has %u bytes, the argument %zu", c->cmd->req_id, i,
               fn->psize[i], arg_size(a->type));
      return ACX_ERR_INVALID_ARG;
    }
    params[i] = &vals[i]; /* little-endian: a 4-byte value is the low half */
  }
  const uint32_t *g = q->u.launch.grid, *b = q->u.launch.block;
  for (int i = 0; i < 3; i++)
    if (!g[i] || !b[i]) return acxk_lib_bad(c, ACX_ERR_INVALID_ARG, "a launch dimension is 0");
  uint32_t shared = q->u.launch.shared_bytes;
  if (shared > STATIC_SHARED_LIMIT && shared > fn->shared_limit) {
    CUresult r = drv.FuncSetAttribute(fn->f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)shared);
    if (r != CUDA_SUCCESS)
      return acxk_lib_fail(c, ACX_LIB_CUDA_DRIVER, (int)r, cu_name(r), "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
                           0);
    fn->shared_limit = shared;
  }
  CUstream st = (CUstream)c->stream;
  CUresult r = q->u.launch.cooperative
                   ? drv.LaunchCooperativeKernel(fn->f, g[0], g[1], g[2], b[0], b[1], b[2], shared, st, na ? params : NULL)
                   : drv.LaunchKernel(fn->f, g[0], g[1], g[2], b[0], b[1], b[2], shared, st, na ? params : NULL, NULL);
  if (r != CUDA_SUCCESS)
    return acxk_lib_fail(c, ACX_LIB_CUDA_DRIVER, (int)r, cu_name(r),
                         q->u.launch.cooperative ? "cuLaunchCooperativeKernel" : "cuLaunchKernel",
                         r == CUDA_ERROR_OUT_OF_MEMORY);
  if (c->cmd->stream < ACXI_MAX_STREAMS) m->streams |= ACXI_STREAM_BIT(c->cmd->stream);
  return ACX_OK; /* the reply follows the kernel (complete_after) */
}

static acx_status_t unload(acxk_lib_call_t *c, rtc_state_t *s) {
  rtc_module_t *m = NULL;
  ACXCHECK(find_module(c, s, 1, &m));
  job_t *j = calloc(1, sizeof *j);
  if (!j) {
    /* Put it back: the module stays usable and the caller may try again. */
    pthread_mutex_lock(&s->lock);
    m->next = s->modules;
    s->modules = m;
    pthread_mutex_unlock(&s->lock);
    return ACX_ERR_NO_MEMORY;
  }
  j->kind = JOB_UNLOAD;
  j->req_id = c->cmd->req_id;
  j->module = m;
  /* Behind everything queued so far on each stream that launched from the module. */
  for (uint32_t i = 0; i < ACXI_MAX_STREAMS; i++) {
    if (!(m->streams & ((uint64_t)1 << i))) continue;
    void *sp = c->api->stream(c->e, i);
    if (!sp) continue;
    cudaEvent_t ev = NULL;
    cudaError_t err = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (err == cudaSuccess) err = cudaEventRecord(ev, (cudaStream_t)sp);
    if (err != cudaSuccess) {
      if (ev) (void)cudaEventDestroy(ev);
      for (int k = 0; k < j->nev; k++) (void)cudaEventDestroy(j->ev[k]);
      pthread_mutex_lock(&s->lock);
      m->next = s->modules;
      s->modules = m;
      pthread_mutex_unlock(&s->lock);
      free(j);
      return acxk_lib_cuda_fail(c, err, "cudaEventRecord(module unload)");
    }
    j->ev[j->nev++] = ev;
  }
  return enqueue(c, s, j);
}

acx_status_t acxk_rtc_exec(acxk_lib_call_t *c) {
  rtc_state_t *s = NULL;
  ACXCHECK(state_of(c, &s));
  switch (c->cmd->op) {
    case ACXK_OP_RTC_COMPILE:
    case ACXK_OP_RTC_LOAD: {
      job_t *j = calloc(1, sizeof *j);
      if (!j) return ACX_ERR_NO_MEMORY;
      j->kind = c->cmd->op == ACXK_OP_RTC_COMPILE ? JOB_COMPILE : JOB_LOAD;
      j->req_id = c->cmd->req_id;
      j->d = c->d.u.rtc;
      acx_status_t st = region_of(c, j);
      if (st == ACX_OK && j->kind == JOB_COMPILE) st = check_compile(c, j);
      if (st == ACX_OK && j->kind == JOB_LOAD &&
          (!j->d.u.load.image_len || !inside(j->d.u.load.image_off, j->d.u.load.image_len + 1, j->region_bytes) ||
           j->region[j->d.u.load.image_off + j->d.u.load.image_len] != '\0'))
        st = acxk_lib_bad(c, ACX_ERR_OUT_OF_RANGE, "the module image exceeds its host region");
      if (st == ACX_OK) st = enqueue(c, s, j);
      if (st != ACX_OK) free(j);
      return st;
    }
    case ACXK_OP_RTC_GET_FUNCTION: return get_function(c, s);
    case ACXK_OP_RTC_LAUNCH: return launch(c, s);
    case ACXK_OP_RTC_UNLOAD: return unload(c, s);
    default: return acxk_lib_bad(c, ACX_ERR_NOT_SUPPORTED, "unknown NVRTC/module op");
  }
}
