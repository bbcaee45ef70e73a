/* The NVTX wrapper behind kernels/cuda/nvtx.h: reads ACX_NVTX once, creates the "acx" domain and
 * pushes/pops ranges in it. nvtx3 is header-only: without an attached profiler each call is a
 * no-op inside NVTX; with one (Nsight sets NVTX_INJECTION64_PATH) the ranges reach it. */
#include "kernels/cuda/nvtx.h"

#include <pthread.h>
#include <stdatomic.h>

#include "runtime/base/log.h"
#include "runtime/base/param.h"

#if defined(__has_include)
#if __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define ACXK_HAVE_NVTX 1
#endif
#endif
#ifndef ACXK_HAVE_NVTX
#define ACXK_HAVE_NVTX 0
#endif

_Atomic int acxk_nvtx_state = -1;
static pthread_once_t nvtx_once = PTHREAD_ONCE_INIT;
static _Thread_local int nvtx_depth;
static atomic_flag unbalanced_warned = ATOMIC_FLAG_INIT;
#if ACXK_HAVE_NVTX
static nvtxDomainHandle_t nvtx_domain;
#endif

static void nvtx_init(void) {
  int on = acxi_param_int("ACX_NVTX") != 0;
#if ACXK_HAVE_NVTX
  if (on) {
    nvtx_domain = nvtxDomainCreateA("acx");
    ACX_INFO(INIT, "NVTX ranges on, domain 'acx'");
  }
#else
  if (on) {
    ACX_WARN(INIT, "ACX_NVTX=1 but this libacx was built without the NVTX headers (CUDA toolkit); no ranges");
    on = 0;
  }
#endif
  /* Release: a thread that sees 1 also sees nvtx_domain (it re-reads through nvtx_once anyway). */
  atomic_store_explicit(&acxk_nvtx_state, on, memory_order_release);
}

int acxk_nvtx_enabled(void) {
  pthread_once(&nvtx_once, nvtx_init);
  return atomic_load_explicit(&acxk_nvtx_state, memory_order_acquire) == 1;
}

int acxk_nvtx_depth(void) { return nvtx_depth; }

void acxk_nvtx_push_slow(const char *name) {
  if (!acxk_nvtx_enabled()) return;
  if (name == NULL) name = "(null)";
#if ACXK_HAVE_NVTX
  nvtxEventAttributes_t attr = {0};
  attr.version = NVTX_VERSION;
  attr.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attr.messageType = NVTX_MESSAGE_TYPE_ASCII;
  attr.message.ascii = name;
  nvtxDomainRangePushEx(nvtx_domain, &attr);
#endif
  nvtx_depth++;
}

void acxk_nvtx_pop_slow(void) {
  if (!acxk_nvtx_enabled()) return;
  if (nvtx_depth == 0) {
    /* A pop without a push would close a range of someone else's domain stack: refuse it. */
    if (!atomic_flag_test_and_set_explicit(&unbalanced_warned, memory_order_relaxed))
      ACX_WARN(EXEC, "acxk_nvtx_pop without a matching push on this thread (ignored)");
    return;
  }
  nvtx_depth--;
#if ACXK_HAVE_NVTX
  nvtxDomainRangePop(nvtx_domain);
#endif
}
