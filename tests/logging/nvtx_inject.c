/* A stand-in profiler for test_nvtx: an NVTX injection library (what Nsight Systems loads
 * through NVTX_INJECTION64_PATH) that records domain creation and range push/pop so the test can
 * check that acx's ranges really leave the process. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <nvtx3/nvToolsExt.h>

typedef struct nvtx_record {
  char domain[64];
  char last_push[64];
  int pushes;
  int pops;
  int foreign; /* ranges pushed on a domain other than the one created */
} nvtx_record_t;

static nvtx_record_t rec;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int domain_token; /* its address is the handle we give out */

__attribute__((visibility("default"))) void acx_test_nvtx_record(nvtx_record_t *out) {
  pthread_mutex_lock(&lock);
  *out = rec;
  pthread_mutex_unlock(&lock);
}

static nvtxDomainHandle_t domain_create(const char *name) {
  pthread_mutex_lock(&lock);
  snprintf(rec.domain, sizeof rec.domain, "%s", name);
  pthread_mutex_unlock(&lock);
  return (nvtxDomainHandle_t)&domain_token;
}

static int range_push(nvtxDomainHandle_t d, const nvtxEventAttributes_t *attr) {
  pthread_mutex_lock(&lock);
  if (d != (nvtxDomainHandle_t)&domain_token) rec.foreign++;
  if (attr && attr->messageType == NVTX_MESSAGE_TYPE_ASCII)
    snprintf(rec.last_push, sizeof rec.last_push, "%s", attr->message.ascii);
  int depth = ++rec.pushes - rec.pops;
  pthread_mutex_unlock(&lock);
  return depth;
}

static int range_pop(nvtxDomainHandle_t d) {
  pthread_mutex_lock(&lock);
  if (d != (nvtxDomainHandle_t)&domain_token) rec.foreign++;
  int depth = rec.pushes - ++rec.pops;
  pthread_mutex_unlock(&lock);
  return depth;
}

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get) {
  const NvtxExportTableCallbacks *cb = (const NvtxExportTableCallbacks *)get(NVTX_ETID_CALLBACKS);
  NvtxFunctionTable table = NULL;
  unsigned int size = 0;
  if (!cb || !cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size) ||
      size <= NVTX_CBID_CORE2_DomainCreateA)
    return 0;
  *table[NVTX_CBID_CORE2_DomainCreateA] = (NvtxFunctionPointer)domain_create;
  *table[NVTX_CBID_CORE2_DomainRangePushEx] = (NvtxFunctionPointer)range_push;
  *table[NVTX_CBID_CORE2_DomainRangePop] = (NvtxFunctionPointer)range_pop;
  return 1;
}
