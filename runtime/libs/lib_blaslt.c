/* cuBLASLt context, rank side: validates matmuls with epilogues (dimensions, leading dimensions,
 * the dtype combinations cuBLASLt supports, fp8 layout rules, epilogue flags and their operands,
 * overlaps, extents, generations) before anything is enqueued and submits them to the executor
 * (lib_blaslt_exec.c). No CUDA header here. */
#include <inttypes.h>
#include <stdlib.h>

#include "acx/blaslt.h"
#include "runtime/libs/lib_internal.h"
#include "runtime/device/device_internal.h"
#include "runtime/base/log.h"

struct acx_blaslt {
  acxk_lib_ctx_t *ctx;
};

#define FP8 (ACXK_DT(ACX_DTYPE_F8E4M3) | ACXK_DT(ACX_DTYPE_F8E5M2))
#define INPUTS (ACXK_DT(ACX_DTYPE_F32) | ACXK_DT(ACX_DTYPE_F16) | ACXK_DT(ACX_DTYPE_BF16) | FP8)
#define OUTPUTS (ACXK_DT(ACX_DTYPE_F32) | ACXK_DT(ACX_DTYPE_F16) | ACXK_DT(ACX_DTYPE_BF16))

acx_status_t acx_blaslt_create(acx_device_t *dev, const acx_lib_config_t *cfg, acx_blaslt_t **lt) {
  ACX_CHECK_NULL(dev);
  ACX_CHECK_NULL(lt);
  *lt = NULL;
  acx_blaslt_t *l = calloc(1, sizeof *l);
  if (!l) return ACX_ERR_NO_MEMORY;
  acx_status_t st = acxk_lib_ctx_create(dev, cfg, ACX_LIB_CUBLASLT, &l->ctx);
  if (st != ACX_OK) {
    free(l);
    return st;
  }
  *lt = l;
  return ACX_OK;
}

acx_status_t acx_blaslt_destroy(acx_blaslt_t *lt) {
  if (!lt) return ACX_OK;
  acx_status_t st = acxk_lib_ctx_destroy(lt->ctx);
  free(lt);
  return st;
}

static int is_fp8(acx_dtype_t t) { return t == ACX_DTYPE_F8E4M3 || t == ACX_DTYPE_F8E5M2; }

static acx_status_t check_op(const char *fn, const char *name, acx_blas_op_t op) {
  if (op == ACX_BLAS_N || op == ACX_BLAS_T) return ACX_OK;
  ACX_WARN(LIB, "%s: argument '%s'=%d is not ACX_BLAS_N or ACX_BLAS_T", fn, name, (int)op);
  return ACX_ERR_INVALID_ARG;
}

/* The dtype combinations of the header's table. */
static acx_status_t check_dtypes(const char *fn, const acx_blaslt_matmul_desc_t *d, acx_dtype_t *bias_dt) {
  acx_dtype_t ta = d->a->dtype, tb = d->b->dtype, td = d->d->dtype;
  if (is_fp8(ta) || is_fp8(tb)) {
    if (!is_fp8(ta) || !is_fp8(tb)) {
      ACX_WARN(LIB, "%s: 'desc->a' is %s and 'desc->b' %s: fp8 takes fp8 on both sides", fn, acx_dtype_name(ta),
               acx_dtype_name(tb));
      return ACX_ERR_BAD_DTYPE;
    }
    if (ta == ACX_DTYPE_F8E5M2 && tb == ACX_DTYPE_F8E5M2) {
      ACX_WARN(LIB, "%s: 'desc->a' and 'desc->b' are both f8e5m2, which cuBLASLt does not multiply", fn);
      return ACX_ERR_BAD_DTYPE;
    }
    *bias_dt = td == ACX_DTYPE_F32 ? ACX_DTYPE_BF16 : td;
  } else {
    if (tb != ta || td != ta) {
      ACX_WARN(LIB, "%s: 'desc->a', 'desc->b' and 'desc->d' are %s, %s and %s: outside fp8 they share a dtype", fn,
               acx_dtype_name(ta), acx_dtype_name(tb), acx_dtype_name(td));
      return ACX_ERR_BAD_DTYPE;
    }
    *bias_dt = td;
  }
  if (d->c && d->c->dtype != td) {
    ACX_WARN(LIB, "%s: 'desc->c' is %s but 'desc->d' is %s", fn, acx_dtype_name(d->c->dtype), acx_dtype_name(td));
    return ACX_ERR_BAD_DTYPE;
  }
  if (d->compute != ACX_BLAS_COMPUTE_DEFAULT && ta != ACX_DTYPE_F32) {
    ACX_WARN(LIB, "%s: argument 'desc->compute': the FAST modes take f32 operands, these are %s", fn,
             acx_dtype_name(ta));
    return ACX_ERR_BAD_DTYPE;
  }
  return ACX_OK;
}

static acx_status_t check_epilogue(const char *fn, const acx_blaslt_matmul_desc_t *d) {
  unsigned e = d->epilogue;
  const unsigned all = ACX_BLASLT_EPILOGUE_RELU | ACX_BLASLT_EPILOGUE_GELU | ACX_BLASLT_EPILOGUE_BIAS |
                       ACX_BLASLT_EPILOGUE_AUX;
  if (e & ~all) {
    ACX_WARN(LIB, "%s: argument 'desc->epilogue'=%#x has unknown flags", fn, e);
    return ACX_ERR_INVALID_ARG;
  }
  if ((e & ACX_BLASLT_EPILOGUE_RELU) && (e & ACX_BLASLT_EPILOGUE_GELU)) {
    ACX_WARN(LIB, "%s: argument 'desc->epilogue' has both RELU and GELU: at most one activation", fn);
    return ACX_ERR_INVALID_ARG;
  }
  if ((e & ACX_BLASLT_EPILOGUE_AUX) && !(e & ACX_BLASLT_EPILOGUE_GELU)) {
    ACX_WARN(LIB, "%s: argument 'desc->epilogue': AUX goes with GELU (its input for a backward pass)", fn);
    return ACX_ERR_INVALID_ARG;
  }
  if (!(e & ACX_BLASLT_EPILOGUE_BIAS) && d->bias) {
    ACX_WARN(LIB, "%s: argument 'desc->bias' is given but the epilogue has no BIAS", fn);
    return ACX_ERR_INVALID_ARG;
  }
  if (!(e & ACX_BLASLT_EPILOGUE_AUX) && d->aux) {
    ACX_WARN(LIB, "%s: argument 'desc->aux' is given but the epilogue has no AUX", fn);
    return ACX_ERR_INVALID_ARG;
  }
  return ACX_OK;
}

acx_status_t acx_blaslt_matmul(acx_blaslt_t *lt, const acx_blaslt_matmul_desc_t *d, acx_future_t **done) {
  static const char fn[] = "acx_blaslt_matmul";
  if (done) *done = NULL;
  if (!lt) {
    ACX_WARN(LIB, "%s: argument 'lt' is NULL", fn);
    return ACX_ERR_NULL_ARG;
  }
  ACX_CHECK_NULL_AS(d, "desc");
  acxk_lib_ctx_t *x = lt->ctx;
  ACX_CHECK_ARG(d->size == sizeof *d, "%s: argument 'desc' has size %zu, expected %zu (ACX_BLASLT_MATMUL_DESC_INIT)",
                fn, d->size, sizeof *d);
  ACXCHECK(check_op(fn, "desc->transa", d->transa));
  ACXCHECK(check_op(fn, "desc->transb", d->transb));
  /* cuBLASLt has no empty layouts (and a k = 0 product would be beta C, a scale, not a matmul). */
  ACX_CHECK_ARG(d->m >= 1 && d->n >= 1 && d->k >= 1,
                "%s: dimensions m=%" PRId64 " n=%" PRId64 " k=%" PRId64 " must be >= 1", fn, d->m, d->n, d->k);
  ACX_CHECK_ARG((unsigned)d->compute <= ACX_BLAS_COMPUTE_F32_FAST_F16,
                "%s: argument 'desc->compute'=%d is not an acx_blas_compute_t", fn, (int)d->compute);
  ACXCHECK(check_epilogue(fn, d));
  ACXCHECK(acxk_lib_check_buf(x, fn, "desc->a", d->a, 0, INPUTS));
  ACXCHECK(acxk_lib_check_buf(x, fn, "desc->b", d->b, 0, INPUTS));
  ACXCHECK(acxk_lib_check_buf(x, fn, "desc->c", d->c, 1, OUTPUTS));
  ACXCHECK(acxk_lib_check_buf(x, fn, "desc->d", d->d, 0, OUTPUTS));
  acx_dtype_t bias_dt = ACX_DTYPE_F32;
  ACXCHECK(check_dtypes(fn, d, &bias_dt));
  int fp8 = is_fp8(d->a->dtype);
  ACXCHECK(acxk_lib_check_buf(x, fn, "desc->bias", d->bias, !(d->epilogue & ACX_BLASLT_EPILOGUE_BIAS),
                              ACXK_DT(bias_dt)));
  ACXCHECK(acxk_lib_check_buf(x, fn, "desc->aux", d->aux, !(d->epilogue & ACX_BLASLT_EPILOGUE_AUX),
                              ACXK_DT(d->d->dtype)));
  ACXCHECK(acxk_lib_check_buf(x, fn, "desc->scale_a", d->scale_a, 1, ACXK_DT(ACX_DTYPE_F32)));
  ACXCHECK(acxk_lib_check_buf(x, fn, "desc->scale_b", d->scale_b, 1, ACXK_DT(ACX_DTYPE_F32)));
  if (!fp8 && (d->scale_a || d->scale_b)) {
    ACX_WARN(LIB, "%s: arguments 'desc->scale_a' / 'desc->scale_b' are for fp8 inputs; these are %s", fn,
             acx_dtype_name(d->a->dtype));
    return ACX_ERR_INVALID_ARG;
  }
  if (fp8) {
    if (d->transa != ACX_BLAS_T || d->transb != ACX_BLAS_N) {
      ACX_WARN(LIB, "%s: fp8 takes desc->transa = T and desc->transb = N (cuBLASLt's fp8 layout on Hopper)", fn);
      return ACX_ERR_INVALID_ARG;
    }
    if (d->lda % 16 || d->ldb % 16) {
      ACX_WARN(LIB, "%s: fp8 leading dimensions lda=%" PRId64 " and ldb=%" PRId64 " must be multiples of 16", fn,
               d->lda, d->ldb);
      return ACX_ERR_INVALID_ARG;
    }
  }
  if (!d->c && d->beta != 0.0) {
    ACX_WARN(LIB, "%s: argument 'desc->beta'=%g needs 'desc->c'", fn, d->beta);
    return ACX_ERR_NULL_ARG;
  }
  if (d->aux && (d->aux_ld < (d->m > 1 ? d->m : 1) || d->aux_ld % 8)) {
    ACX_WARN(LIB, "%s: argument 'desc->aux_ld'=%" PRId64 " must be >= m=%" PRId64 " and a multiple of 8", fn,
             d->aux_ld, d->m);
    return ACX_ERR_INVALID_ARG;
  }
  int ta = d->transa == ACX_BLAS_T, tb = d->transb == ACX_BLAS_T;
  acxk_req_t req;
  acxk_req_init(&req, ACXK_OP_BLASLT_MATMUL);
  ACXCHECK(acxk_req_matrix(&req, ACXK_LT_A, fn, "desc->a", d->a, d->a_offset, ta ? d->k : d->m, ta ? d->m : d->k,
                           d->lda, 1, 0, 0));
  ACXCHECK(acxk_req_matrix(&req, ACXK_LT_B, fn, "desc->b", d->b, d->b_offset, tb ? d->n : d->k, tb ? d->k : d->n,
                           d->ldb, 1, 0, 0));
  if (d->c) ACXCHECK(acxk_req_matrix(&req, ACXK_LT_C, fn, "desc->c", d->c, d->c_offset, d->m, d->n, d->ldc, 1, 0, 0));
  ACXCHECK(acxk_req_matrix(&req, ACXK_LT_D, fn, "desc->d", d->d, d->d_offset, d->m, d->n, d->ldd, 1, 0, 1));
  if (d->bias) ACXCHECK(acxk_req_vector(&req, ACXK_LT_BIAS, fn, "desc->bias", d->bias, d->bias_offset, d->m, 1, 0));
  if (d->aux)
    ACXCHECK(acxk_req_matrix(&req, ACXK_LT_AUX, fn, "desc->aux", d->aux, d->aux_offset, d->m, d->n, d->aux_ld, 1, 0, 1));
  if (d->scale_a) ACXCHECK(acxk_req_vector(&req, ACXK_LT_SCALE_A, fn, "desc->scale_a", d->scale_a, d->scale_a_offset, 1, 1, 0));
  if (d->scale_b) ACXCHECK(acxk_req_vector(&req, ACXK_LT_SCALE_B, fn, "desc->scale_b", d->scale_b, d->scale_b_offset, 1, 1, 0));
  req.d.nops = ACXK_MAX_OPERANDS;
  /* D may be C itself (in place: same range and leading dimension); otherwise the outputs overlap
   * nothing. */
  int in_place = d->c && d->c == d->d && d->c_offset == d->d_offset && d->ldc == d->ldd;
  for (int i = 0; i < ACXK_MAX_OPERANDS; i++) {
    if (i == ACXK_LT_D || i == ACXK_LT_AUX) continue;
    if (!(i == ACXK_LT_C && in_place)) ACXCHECK(acxk_req_disjoint(&req, fn, ACXK_LT_D, i));
    ACXCHECK(acxk_req_disjoint(&req, fn, ACXK_LT_AUX, i));
  }
  ACXCHECK(acxk_req_disjoint(&req, fn, ACXK_LT_AUX, ACXK_LT_D));
  req.d.u.blaslt = (acxk_blaslt_desc_t){.a_dtype = (uint32_t)d->a->dtype, .b_dtype = (uint32_t)d->b->dtype,
                                        .d_dtype = (uint32_t)d->d->dtype, .bias_dtype = (uint32_t)bias_dt,
                                        .compute = (uint32_t)d->compute, .transa = (uint32_t)d->transa,
                                        .transb = (uint32_t)d->transb, .epilogue = d->epilogue, .m = d->m,
                                        .n = d->n, .k = d->k, .lda = d->lda, .ldb = d->ldb,
                                        .ldc = d->c ? d->ldc : d->ldd, .ldd = d->ldd,
                                        .aux_ld = d->aux ? d->aux_ld : 0, .alpha = d->alpha, .beta = d->beta};
  return acxk_lib_submit(x, fn, &req, done, NULL);
}
