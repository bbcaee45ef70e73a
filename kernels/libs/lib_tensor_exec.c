/* cuTENSOR 2, executor side: one cutensorHandle_t per executor incarnation (cuTENSOR 2 takes the
 * stream per call, and the handle keeps cuTENSOR's own plan cache); per request the tensor
 * descriptors, the contraction, a plan preference and a plan whose workspace is estimated by
 * cutensorEstimateWorkspaceSize and taken from the per-stream library workspace.
 *
 * Compiled only where configure found cuTENSOR 2 (ACX_HAVE_CUTENSOR). Neither the development
 * machine nor the GPU test host has cuTENSOR, so this file has not been compiled yet: see
 * docs/libraries.md before relying on it. */
#include <inttypes.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>
#include <cutensor.h>

#include "acx/tensor.h"
#include "kernels/libs/lib_exec.h"
#include "runtime/base/log.h"

typedef struct tensor_state {
  cutensorHandle_t h;
} tensor_state_t;

static acx_status_t fail(acxk_lib_call_t *c, cutensorStatus_t s, const char *call) {
  return acxk_lib_fail(c, ACX_LIB_CUTENSOR, (int)s, cutensorGetErrorString(s), call,
                       s == CUTENSOR_STATUS_ALLOC_FAILED || s == CUTENSOR_STATUS_INSUFFICIENT_WORKSPACE);
}

#define TNCHECK(call)                                                                              \
  do {                                                                                             \
    cutensorStatus_t acxk_tn_ = (call);                                                            \
    if (acxk_tn_ != CUTENSOR_STATUS_SUCCESS) {                                                     \
      st = fail(c, acxk_tn_, #call);                                                               \
      goto out;                                                                                    \
    }                                                                                              \
  } while (0)

void acxk_tensor_exec_destroy(void *state) {
  tensor_state_t *s = state;
  if (s->h) (void)cutensorDestroy(s->h);
  free(s);
}

static acx_status_t handle(acxk_lib_call_t *c, cutensorHandle_t *out) {
  void **slot = acxk_lib_state(c, ACX_LIB_CUTENSOR);
  if (!*slot && !(*slot = calloc(1, sizeof(tensor_state_t)))) return ACX_ERR_NO_MEMORY;
  tensor_state_t *s = *slot;
  if (!s->h) {
    cutensorHandle_t h = NULL;
    cutensorStatus_t ts = cutensorCreate(&h);
    if (ts != CUTENSOR_STATUS_SUCCESS) return fail(c, ts, "cutensorCreate");
    s->h = h;
    ACX_INFO(LIB, "cuTENSOR %zu handle created", cutensorGetVersion());
  }
  *out = s->h;
  return ACX_OK;
}

/* The largest power of two up to 256 dividing the address: cuTENSOR's alignment requirement must
 * hold for the pointer passed later. */
static uint32_t alignment(const void *p) {
  uintptr_t a = (uintptr_t)p;
  uint32_t al = 256;
  while (al > 1 && (a % al) != 0) al /= 2;
  return al;
}

acx_status_t acxk_tensor_exec(acxk_lib_call_t *c) {
  const acxk_tensor_desc_t *q = &c->d.u.tensor;
  if (c->cmd->op != ACXK_OP_TENSOR_CONTRACT) return acxk_lib_bad(c, ACX_ERR_NOT_SUPPORTED, "unknown cuTENSOR op");
  if ((q->dtype != ACX_DTYPE_F32 && q->dtype != ACX_DTYPE_F64) || q->nlabels > ACXK_TENSOR_MAX_LABELS)
    return acxk_lib_bad(c, ACX_ERR_BAD_DTYPE, "malformed cuTENSOR descriptor (dtype or label count)");
  size_t es = q->dtype == ACX_DTYPE_F64 ? 8 : 4;
  /* Each tensor's extents from the label table, and its span against its operand. */
  int64_t ext[3][ACXK_TENSOR_MAX_MODES];
  for (int t = 0; t < 3; t++) {
    const acxk_tensor_modes_t *m = &q->t[t];
    if (m->nmodes > ACXK_TENSOR_MAX_MODES) return acxk_lib_bad(c, ACX_ERR_INVALID_ARG, "too many modes");
    uint64_t span = 1;
    for (uint32_t i = 0; i < m->nmodes; i++) {
      uint32_t k = 0;
      while (k < q->nlabels && q->label[k] != m->modes[i]) k++;
      if (k == q->nlabels || q->extent[k] < 1 || m->strides[i] < 1)
        return acxk_lib_bad(c, ACX_ERR_INVALID_ARG, "a mode without an extent, or a bad stride");
      ext[t][i] = q->extent[k];
      /* The rank bounded every span by a buffer size: an overflow means a corrupt descriptor. */
      uint64_t e1 = (uint64_t)q->extent[k] - 1, s = (uint64_t)m->strides[i];
      if (e1 && s > (UINT64_MAX - span) / e1) return acxk_lib_bad(c, ACX_ERR_OVERFLOW, "a tensor's span overflows");
      span += e1 * s;
    }
    ACXCHECK(acxk_lib_need(c, t, (int64_t)span, 1, (int64_t)span, es));
  }
  cutensorHandle_t h = NULL;
  ACXCHECK(handle(c, &h));
  cutensorDataType_t dt = q->dtype == ACX_DTYPE_F64 ? CUTENSOR_R_64F : CUTENSOR_R_32F;
  cutensorComputeDescriptor_t compute = q->dtype == ACX_DTYPE_F64 ? CUTENSOR_COMPUTE_DESC_64F : CUTENSOR_COMPUTE_DESC_32F;
  double a64 = q->alpha, b64 = q->beta;
  float a32 = (float)q->alpha, b32 = (float)q->beta;
  const void *alpha = q->dtype == ACX_DTYPE_F64 ? (const void *)&a64 : (const void *)&a32;
  const void *beta = q->dtype == ACX_DTYPE_F64 ? (const void *)&b64 : (const void *)&b32;
  acx_status_t st = ACX_OK;
  cutensorTensorDescriptor_t D[3] = {NULL, NULL, NULL};
  cutensorOperationDescriptor_t op = NULL;
  cutensorPlanPreference_t pref = NULL;
  cutensorPlan_t plan = NULL;
  uint64_t ws_bytes = 0;
  void *ws = NULL;
  for (int t = 0; t < 3; t++)
    TNCHECK(cutensorCreateTensorDescriptor(h, &D[t], q->t[t].nmodes, ext[t], q->t[t].strides, dt, alignment(c->ptr[t])));
  /* D is C: the same descriptor, modes and pointer. */
  TNCHECK(cutensorCreateContraction(h, &op, D[0], q->t[0].modes, CUTENSOR_OP_IDENTITY, D[1], q->t[1].modes,
                                    CUTENSOR_OP_IDENTITY, D[2], q->t[2].modes, CUTENSOR_OP_IDENTITY, D[2],
                                    q->t[2].modes, compute));
  TNCHECK(cutensorCreatePlanPreference(h, &pref, CUTENSOR_ALGO_DEFAULT, CUTENSOR_JIT_MODE_NONE));
  TNCHECK(cutensorEstimateWorkspaceSize(h, op, pref, CUTENSOR_WORKSPACE_DEFAULT, &ws_bytes));
  TNCHECK(cutensorCreatePlan(h, &plan, op, pref, ws_bytes));
  st = acxk_lib_workspace(c, ACX_LIB_CUTENSOR, (size_t)ws_bytes, &ws);
  if (st != ACX_OK) goto out;
  TNCHECK(cutensorContract(h, plan, alpha, c->ptr[0], c->ptr[1], beta, c->ptr[2], c->ptr[2], ws, ws_bytes,
                           (cudaStream_t)c->stream));
out:
  if (plan) (void)cutensorDestroyPlan(plan);
  if (pref) (void)cutensorDestroyPlanPreference(pref);
  if (op) (void)cutensorDestroyOperationDescriptor(op);
  for (int t = 0; t < 3; t++)
    if (D[t]) (void)cutensorDestroyTensorDescriptor(D[t]);
  return st;
}
