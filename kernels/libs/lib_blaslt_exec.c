/* cuBLASLt, executor side: one cublasLtHandle_t per executor incarnation (cublasLtMatmul takes the
 * stream per call); the matmul descriptor, layouts and the algorithm chosen by
 * cublasLtMatmulAlgoGetHeuristic cached per shape (LRU), so a repeated shape costs no heuristic
 * query; a workspace of ACX_BLASLT_WORKSPACE_MB per stream from the library workspaces. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "acx/blaslt.h"
#include "kernels/libs/lib_exec.h"
#include "runtime/base/log.h"
#include "runtime/base/param.h"

#define ALGO_CACHE 64

/* Everything the heuristic's answer depends on: the descriptor's shape part, which optional
 * operands are present, and the alignment of every pointer (cuBLASLt picks kernels by it). */
typedef struct lt_key {
  acxk_blaslt_desc_t q; /* alpha and beta zeroed: they do not select the algorithm */
  uint32_t present;     /* bit per operand */
  uint32_t align[ACXK_MAX_OPERANDS];
} lt_key_t;

typedef struct lt_entry {
  int live;
  lt_key_t key;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, lc, ld;
  cublasLtMatmulAlgo_t algo;
  size_t ws_needed;
  uint64_t last_use;
} lt_entry_t;

typedef struct lt_state {
  cublasLtHandle_t h;
  size_t ws_bytes;
  lt_entry_t e[ALGO_CACHE];
  uint64_t clock;
} lt_state_t;

#define LTCHECK(c, call)                                                                            \
  do {                                                                                             \
    cublasStatus_t acxk_ls_ = (call);                                                              \
    if (acxk_ls_ != CUBLAS_STATUS_SUCCESS)                                                         \
      return acxk_lib_fail((c), ACX_LIB_CUBLASLT, (int)acxk_ls_, cublasGetStatusName(acxk_ls_), #call, \
                           acxk_ls_ == CUBLAS_STATUS_ALLOC_FAILED);                                \
  } while (0)

static void entry_free(lt_entry_t *en) {
  if (en->op) (void)cublasLtMatmulDescDestroy(en->op);
  if (en->la) (void)cublasLtMatrixLayoutDestroy(en->la);
  if (en->lb) (void)cublasLtMatrixLayoutDestroy(en->lb);
  if (en->lc) (void)cublasLtMatrixLayoutDestroy(en->lc);
  if (en->ld) (void)cublasLtMatrixLayoutDestroy(en->ld);
  memset(en, 0, sizeof *en);
}

void acxk_blaslt_exec_destroy(void *state) {
  lt_state_t *s = state;
  for (int i = 0; i < ALGO_CACHE; i++)
    if (s->e[i].live) entry_free(&s->e[i]);
  if (s->h) (void)cublasLtDestroy(s->h);
  free(s);
}

static acx_status_t get_state(acxk_lib_call_t *c, lt_state_t **out) {
  void **slot = acxk_lib_state(c, ACX_LIB_CUBLASLT);
  if (!*slot) {
    lt_state_t *s = calloc(1, sizeof *s);
    if (!s) return ACX_ERR_NO_MEMORY;
    cublasLtHandle_t h = NULL;
    cublasStatus_t bs = cublasLtCreate(&h);
    if (bs != CUBLAS_STATUS_SUCCESS) {
      free(s);
      return acxk_lib_fail(c, ACX_LIB_CUBLASLT, (int)bs, cublasGetStatusName(bs), "cublasLtCreate",
                           bs == CUBLAS_STATUS_ALLOC_FAILED);
    }
    s->h = h;
    s->ws_bytes = (size_t)acxi_param_int("ACX_BLASLT_WORKSPACE_MB") << 20;
    *slot = s;
  }
  *out = *slot;
  return ACX_OK;
}

static acx_status_t data_type(acxk_lib_call_t *c, uint32_t dt, cudaDataType *out) {
  switch (dt) {
    case ACX_DTYPE_F32: *out = CUDA_R_32F; return ACX_OK;
    case ACX_DTYPE_F16: *out = CUDA_R_16F; return ACX_OK;
    case ACX_DTYPE_BF16: *out = CUDA_R_16BF; return ACX_OK;
    case ACX_DTYPE_F8E4M3: *out = CUDA_R_8F_E4M3; return ACX_OK;
    case ACX_DTYPE_F8E5M2: *out = CUDA_R_8F_E5M2; return ACX_OK;
    default: return acxk_lib_bad(c, ACX_ERR_BAD_DTYPE, "cuBLASLt dtype is not f32, f16, bf16 or fp8");
  }
}

static cublasLtEpilogue_t epilogue_of(uint32_t e) {
  int bias = (e & ACX_BLASLT_EPILOGUE_BIAS) != 0, aux = (e & ACX_BLASLT_EPILOGUE_AUX) != 0;
  if (e & ACX_BLASLT_EPILOGUE_RELU) return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
  if (e & ACX_BLASLT_EPILOGUE_GELU)
    return aux ? (bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
               : (bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU);
  return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

static uint32_t align_of(const void *p) {
  uintptr_t v = (uintptr_t)p;
  if (!v) return 0;
  uintptr_t a = v & (~v + 1);
  return a > 256 ? 256u : (uint32_t)a;
}

/* Sets the per-call pointers on the descriptor (cached descriptors keep the previous call's). */
static acx_status_t set_pointers(acxk_lib_call_t *c, cublasLtMatmulDesc_t op) {
  void *const *p = c->ptr;
  const acxk_blaslt_desc_t *q = &c->d.u.blaslt;
  if (q->epilogue & ACX_BLASLT_EPILOGUE_BIAS)
    LTCHECK(c, cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p[ACXK_LT_BIAS], sizeof(void *)));
  if (q->epilogue & ACX_BLASLT_EPILOGUE_AUX)
    LTCHECK(c, cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p[ACXK_LT_AUX],
                                              sizeof(void *)));
  if (p[ACXK_LT_SCALE_A])
    LTCHECK(c, cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &p[ACXK_LT_SCALE_A],
                                              sizeof(void *)));
  if (p[ACXK_LT_SCALE_B])
    LTCHECK(c, cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &p[ACXK_LT_SCALE_B],
                                              sizeof(void *)));
  return ACX_OK;
}

/* Builds the descriptor and layouts of a new shape and asks the heuristic for its best algorithm. */
static acx_status_t build(acxk_lib_call_t *c, lt_state_t *s, lt_entry_t *en) {
  const acxk_blaslt_desc_t *q = &c->d.u.blaslt;
  cudaDataType ta = CUDA_R_32F, tb = CUDA_R_32F, td = CUDA_R_32F, tbias = CUDA_R_32F;
  ACXCHECK(data_type(c, q->a_dtype, &ta));
  ACXCHECK(data_type(c, q->b_dtype, &tb));
  ACXCHECK(data_type(c, q->d_dtype, &td));
  ACXCHECK(data_type(c, q->bias_dtype, &tbias));
  cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
  if (q->a_dtype == ACX_DTYPE_F32) {
    if (q->compute == ACX_BLAS_COMPUTE_F32_FAST_TF32) ct = CUBLAS_COMPUTE_32F_FAST_TF32;
    else if (q->compute == ACX_BLAS_COMPUTE_F32_FAST_BF16) ct = CUBLAS_COMPUTE_32F_FAST_16BF;
    else if (q->compute == ACX_BLAS_COMPUTE_F32_FAST_F16) ct = CUBLAS_COMPUTE_32F_FAST_16F;
  }
  LTCHECK(c, cublasLtMatmulDescCreate(&en->op, ct, CUDA_R_32F));
  cublasOperation_t opa = q->transa == ACX_BLAS_T ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opb = q->transb == ACX_BLAS_T ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtEpilogue_t epi = epilogue_of(q->epilogue);
  LTCHECK(c, cublasLtMatmulDescSetAttribute(en->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
  LTCHECK(c, cublasLtMatmulDescSetAttribute(en->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
  LTCHECK(c, cublasLtMatmulDescSetAttribute(en->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  if (q->epilogue & ACX_BLASLT_EPILOGUE_BIAS) {
    int32_t bt = (int32_t)tbias;
    LTCHECK(c, cublasLtMatmulDescSetAttribute(en->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
  }
  if (q->epilogue & ACX_BLASLT_EPILOGUE_AUX) {
    int64_t ald = q->aux_ld;
    LTCHECK(c, cublasLtMatmulDescSetAttribute(en->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ald, sizeof ald));
  }
  ACXCHECK(set_pointers(c, en->op));
  int at = q->transa == ACX_BLAS_T, bt = q->transb == ACX_BLAS_T;
  LTCHECK(c, cublasLtMatrixLayoutCreate(&en->la, ta, (uint64_t)(at ? q->k : q->m), (uint64_t)(at ? q->m : q->k), q->lda));
  LTCHECK(c, cublasLtMatrixLayoutCreate(&en->lb, tb, (uint64_t)(bt ? q->n : q->k), (uint64_t)(bt ? q->k : q->n), q->ldb));
  LTCHECK(c, cublasLtMatrixLayoutCreate(&en->lc, td, (uint64_t)q->m, (uint64_t)q->n, q->ldc));
  LTCHECK(c, cublasLtMatrixLayoutCreate(&en->ld, td, (uint64_t)q->m, (uint64_t)q->n, q->ldd));
  cublasLtMatmulPreference_t pref = NULL;
  LTCHECK(c, cublasLtMatmulPreferenceCreate(&pref));
  size_t ws = s->ws_bytes;
  cublasLtMatmulHeuristicResult_t res;
  memset(&res, 0, sizeof res);
  int found = 0;
  cublasStatus_t bs = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  if (bs == CUBLAS_STATUS_SUCCESS)
    bs = cublasLtMatmulAlgoGetHeuristic(s->h, en->op, en->la, en->lb, en->lc, en->ld, pref, 1, &res, &found);
  (void)cublasLtMatmulPreferenceDestroy(pref);
  if (bs != CUBLAS_STATUS_SUCCESS)
    return acxk_lib_fail(c, ACX_LIB_CUBLASLT, (int)bs, cublasGetStatusName(bs), "cublasLtMatmulAlgoGetHeuristic", 0);
  if (found < 1 || res.state != CUBLAS_STATUS_SUCCESS)
    return acxk_lib_fail(c, ACX_LIB_CUBLASLT, CUBLAS_STATUS_NOT_SUPPORTED, "CUBLAS_STATUS_NOT_SUPPORTED",
                         "cublasLtMatmulAlgoGetHeuristic (no algorithm for this case)", 0);
  en->algo = res.algo;
  en->ws_needed = res.workspaceSize;
  ACX_INFO(LIB, "cuBLASLt: %" PRId64 " x %" PRId64 " x %" PRId64 " (%s x %s -> %s, epilogue %#x): algorithm chosen, "
           "workspace %zu bytes", q->m, q->n, q->k, acx_dtype_name((acx_dtype_t)q->a_dtype),
           acx_dtype_name((acx_dtype_t)q->b_dtype), acx_dtype_name((acx_dtype_t)q->d_dtype), q->epilogue,
           res.workspaceSize);
  return ACX_OK;
}

static acx_status_t lookup(acxk_lib_call_t *c, lt_state_t *s, lt_entry_t **out) {
  lt_key_t key;
  memset(&key, 0, sizeof key);
  key.q = c->d.u.blaslt;
  key.q.alpha = key.q.beta = 0;
  for (int i = 0; i < ACXK_MAX_OPERANDS; i++) {
    key.present |= (c->ptr[i] != NULL) << i;
    key.align[i] = align_of(c->ptr[i]);
  }
  lt_entry_t *victim = &s->e[0];
  for (int i = 0; i < ALGO_CACHE; i++) {
    lt_entry_t *en = &s->e[i];
    if (en->live && !memcmp(&en->key, &key, sizeof key)) {
      en->last_use = ++s->clock;
      ACXCHECK(set_pointers(c, en->op));
      *out = en;
      return ACX_OK;
    }
    if (!en->live || (victim->live && en->last_use < victim->last_use)) victim = en;
  }
  if (victim->live) entry_free(victim);
  acx_status_t st = build(c, s, victim);
  if (st != ACX_OK) {
    entry_free(victim);
    return st;
  }
  victim->key = key;
  victim->live = 1;
  victim->last_use = ++s->clock;
  *out = victim;
  return ACX_OK;
}

acx_status_t acxk_blaslt_exec(acxk_lib_call_t *c) {
  if (c->cmd->op != ACXK_OP_BLASLT_MATMUL) return acxk_lib_bad(c, ACX_ERR_NOT_SUPPORTED, "unknown cuBLASLt op");
  const acxk_blaslt_desc_t *q = &c->d.u.blaslt;
  size_t ea = acx_dtype_size((acx_dtype_t)q->a_dtype), eb = acx_dtype_size((acx_dtype_t)q->b_dtype);
  size_t ed = acx_dtype_size((acx_dtype_t)q->d_dtype);
  if (!ea || !eb || !ed) return acxk_lib_bad(c, ACX_ERR_BAD_DTYPE, "cuBLASLt descriptor with an unknown dtype");
  int at = q->transa == ACX_BLAS_T, bt = q->transb == ACX_BLAS_T;
  ACXCHECK(acxk_lib_need(c, ACXK_LT_A, at ? q->k : q->m, at ? q->m : q->k, q->lda, ea));
  ACXCHECK(acxk_lib_need(c, ACXK_LT_B, bt ? q->n : q->k, bt ? q->k : q->n, q->ldb, eb));
  ACXCHECK(acxk_lib_need(c, ACXK_LT_D, q->m, q->n, q->ldd, ed));
  if (c->ptr[ACXK_LT_C]) ACXCHECK(acxk_lib_need(c, ACXK_LT_C, q->m, q->n, q->ldc, ed));
  else if (q->beta != 0.0) return acxk_lib_bad(c, ACX_ERR_INVALID_ARG, "beta != 0 without C");
  if (q->epilogue & ACX_BLASLT_EPILOGUE_BIAS)
    ACXCHECK(acxk_lib_need(c, ACXK_LT_BIAS, q->m, 1, q->m, acx_dtype_size((acx_dtype_t)q->bias_dtype)));
  if (q->epilogue & ACX_BLASLT_EPILOGUE_AUX) ACXCHECK(acxk_lib_need(c, ACXK_LT_AUX, q->m, q->n, q->aux_ld, ed));
  if (q->m < 1 || q->n < 1 || q->k < 1) return acxk_lib_bad(c, ACX_ERR_INVALID_ARG, "empty cuBLASLt matmul");
  lt_state_t *s = NULL;
  ACXCHECK(get_state(c, &s));
  lt_entry_t *en = NULL;
  ACXCHECK(lookup(c, s, &en));
  void *ws = NULL;
  ACXCHECK(acxk_lib_workspace(c, ACX_LIB_CUBLASLT, s->ws_bytes, &ws));
  float alpha = (float)q->alpha, beta = (float)q->beta;
  /* Without C, beta is 0 and C is never read: cuBLASLt still wants a pointer of D's layout. */
  const void *cp = c->ptr[ACXK_LT_C] ? c->ptr[ACXK_LT_C] : c->ptr[ACXK_LT_D];
  LTCHECK(c, cublasLtMatmul(s->h, en->op, &alpha, c->ptr[ACXK_LT_A], en->la, c->ptr[ACXK_LT_B], en->lb, &beta, cp,
                            en->lc, c->ptr[ACXK_LT_D], en->ld, &en->algo, ws, s->ws_bytes,
                            (cudaStream_t)c->stream));
  return ACX_OK;
}
