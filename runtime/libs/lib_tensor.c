/* cuTENSOR context, rank side: validates contractions (modes, extents, strides, dtypes, the extent
 * of each operand in its buffer, overlaps, generations) before anything is enqueued, then submits
 * them to the executor (lib_tensor_exec.c) -- or, in a build without cuTENSOR, refuses the valid
 * request with ACX_ERR_NOT_SUPPORTED. No CUDA header. */
#include <inttypes.h>
#include <stdlib.h>

#include "acx/tensor.h"
#include "runtime/libs/lib_internal.h"
#include "runtime/device/device_internal.h"
#include "runtime/base/log.h"

struct acx_tensor {
  acxk_lib_ctx_t *ctx;
};

_Static_assert(ACX_TENSOR_MAX_MODES == ACXK_TENSOR_MAX_MODES, "public and wire mode limits agree");
_Static_assert(ACX_TENSOR_MAX_LABELS == ACXK_TENSOR_MAX_LABELS, "public and wire label limits agree");

int acx_tensor_available(void) { return ACX_HAVE_CUTENSOR; }

acx_status_t acx_tensor_create(acx_device_t *dev, const acx_lib_config_t *cfg, acx_tensor_t **t) {
  ACX_CHECK_NULL(dev);
  ACX_CHECK_NULL(t);
  *t = NULL;
  acx_tensor_t *x = calloc(1, sizeof *x);
  if (!x) return ACX_ERR_NO_MEMORY;
  acx_status_t st = acxk_lib_ctx_create(dev, cfg, ACX_LIB_CUTENSOR, &x->ctx);
  if (st != ACX_OK) {
    free(x);
    return st;
  }
  if (!ACX_HAVE_CUTENSOR)
    ACX_INFO(LIB, "acx_tensor_create: this libacx was built without cuTENSOR; requests will be validated, then refused");
  *t = x;
  return ACX_OK;
}

acx_status_t acx_tensor_destroy(acx_tensor_t *t) {
  if (!t) return ACX_OK;
  acx_status_t st = acxk_lib_ctx_destroy(t->ctx);
  free(t);
  return st;
}

/* The label table: each distinct mode once, with its extent. */
typedef struct labels {
  int n;
  int32_t label[ACX_TENSOR_MAX_LABELS];
  int64_t extent[ACX_TENSOR_MAX_LABELS];
  int uses[ACX_TENSOR_MAX_LABELS];
} labels_t;

/* Operand idx: checks its modes and extents into the table, its strides, and its span. */
static acx_status_t operand(acx_tensor_t *t, const char *fn, const char *name, const acx_tensor_operand_t *o, int idx,
                            int writes, labels_t *L, acxk_req_t *req) {
  if (!o) {
    ACX_WARN(LIB, "%s: argument '%s' is NULL", fn, name);
    return ACX_ERR_NULL_ARG;
  }
  ACX_CHECK_ARG(o->nmodes >= 0 && o->nmodes <= ACX_TENSOR_MAX_MODES, "%s: argument '%s->nmodes'=%d is not in [0, %d]", fn,
                name, o->nmodes, ACX_TENSOR_MAX_MODES);
  if (o->nmodes > 0 && (!o->modes || !o->extents)) {
    ACX_WARN(LIB, "%s: argument '%s->%s' is NULL with nmodes=%d", fn, name, !o->modes ? "modes" : "extents", o->nmodes);
    return ACX_ERR_NULL_ARG;
  }
  ACXCHECK(acxk_lib_check_buf(t->ctx, fn, name, o->buf, 0, ACXK_DT(ACX_DTYPE_F32) | ACXK_DT(ACX_DTYPE_F64)));
  acxk_tensor_modes_t *w = &req->d.u.tensor.t[idx];
  w->nmodes = (uint32_t)o->nmodes;
  /* The last element's offset: sum (extent - 1) * stride, then + 1 element. */
  uint64_t span = 1, packed = 1;
  for (int i = 0; i < o->nmodes; i++) {
    int32_t m = o->modes[i];
    int64_t e = o->extents[i];
    for (int j = 0; j < i; j++)
      ACX_CHECK_ARG(o->modes[j] != m, "%s: argument '%s' names mode %d twice", fn, name, (int)m);
    ACX_CHECK_ARG(e >= 1, "%s: argument '%s->extents[%d]'=%" PRId64 " must be >= 1", fn, name, i, e);
    int k = 0;
    while (k < L->n && L->label[k] != m) k++;
    if (k == L->n) {
      ACX_CHECK_ARG(L->n < ACX_TENSOR_MAX_LABELS, "%s: more than %d distinct modes", fn, ACX_TENSOR_MAX_LABELS);
      L->label[k] = m;
      L->extent[k] = e;
      L->n++;
    }
    ACX_CHECK_ARG(L->extent[k] == e, "%s: mode %d has extent %" PRId64 " in '%s' but %" PRId64 " elsewhere", fn, (int)m,
                  e, name, L->extent[k]);
    L->uses[k]++;
    int64_t s = (int64_t)packed;
    if (o->strides) {
      s = o->strides[i];
      ACX_CHECK_ARG(s >= 1, "%s: argument '%s->strides[%d]'=%" PRId64 " must be >= 1", fn, name, i, s);
    }
    if ((uint64_t)e - 1 > 0 && (uint64_t)s > (UINT64_MAX - span) / ((uint64_t)e - 1)) {
      ACX_WARN(LIB, "%s: the extent of argument '%s' overflows", fn, name);
      return ACX_ERR_OVERFLOW;
    }
    span += ((uint64_t)e - 1) * (uint64_t)s;
    if (packed > UINT64_MAX / (uint64_t)e) {
      ACX_WARN(LIB, "%s: the extent of argument '%s' overflows", fn, name);
      return ACX_ERR_OVERFLOW;
    }
    packed *= (uint64_t)e;
    w->modes[i] = m;
    w->strides[i] = s;
  }
  if (span > INT64_MAX) {
    ACX_WARN(LIB, "%s: the extent of argument '%s' overflows", fn, name);
    return ACX_ERR_OVERFLOW;
  }
  return acxk_req_vector(req, idx, fn, name, o->buf, o->offset, (int64_t)span, 1, writes);
}

acx_status_t acx_tensor_contract(acx_tensor_t *t, double alpha, const acx_tensor_operand_t *a,
                                 const acx_tensor_operand_t *b, double beta, const acx_tensor_operand_t *c,
                                 acx_future_t **done) {
  static const char fn[] = "acx_tensor_contract";
  if (done) *done = NULL;
  if (!t) {
    ACX_WARN(LIB, "%s: argument 't' is NULL", fn);
    return ACX_ERR_NULL_ARG;
  }
  acxk_req_t req;
  acxk_req_init(&req, ACXK_OP_TENSOR_CONTRACT);
  labels_t L = {0};
  ACXCHECK(operand(t, fn, "a", a, 0, 0, &L, &req));
  ACXCHECK(operand(t, fn, "b", b, 1, 0, &L, &req));
  ACXCHECK(operand(t, fn, "c", c, 2, 1, &L, &req));
  if (a->buf->dtype != c->buf->dtype || b->buf->dtype != c->buf->dtype) {
    ACX_WARN(LIB, "%s: arguments 'a', 'b' and 'c' are %s, %s and %s: they must share the dtype", fn,
             acx_dtype_name(a->buf->dtype), acx_dtype_name(b->buf->dtype), acx_dtype_name(c->buf->dtype));
    return ACX_ERR_BAD_DTYPE;
  }
  for (int k = 0; k < L.n; k++)
    ACX_CHECK_ARG(L.uses[k] >= 2, "%s: mode %d appears in only one of 'a', 'b' and 'c'", fn, (int)L.label[k]);
  ACXCHECK(acxk_req_disjoint(&req, fn, 2, 0));
  ACXCHECK(acxk_req_disjoint(&req, fn, 2, 1));
  acxk_tensor_desc_t *q = &req.d.u.tensor;
  q->dtype = (uint32_t)c->buf->dtype;
  q->nlabels = (uint32_t)L.n;
  for (int k = 0; k < L.n; k++) {
    q->label[k] = L.label[k];
    q->extent[k] = L.extent[k];
  }
  q->alpha = alpha;
  q->beta = beta;
#if ACX_HAVE_CUTENSOR
  return acxk_lib_submit(t->ctx, fn, &req, done, NULL);
#else
  ACX_WARN(LIB, "%s: the request is valid, but this libacx was built without cuTENSOR (configure did not find it)", fn);
  return ACX_ERR_NOT_SUPPORTED;
#endif
}
