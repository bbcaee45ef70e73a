/* cuFFT context, rank side: validates transforms (rank, dimensions, batch, direction, dtypes,
 * extents, in/out overlap) before anything is enqueued. No CUDA header here. */
#include <inttypes.h>
#include <stdlib.h>

#include "acx/fft.h"
#include "runtime/libs/lib_internal.h"
#include "runtime/device/device_internal.h"
#include "runtime/base/log.h"

struct acx_fft {
  acxk_lib_ctx_t *ctx;
};

acx_status_t acx_fft_create(acx_device_t *dev, const acx_lib_config_t *cfg, acx_fft_t **fft) {
  ACX_CHECK_NULL(dev);
  ACX_CHECK_NULL(fft);
  *fft = NULL;
  acx_fft_t *f = calloc(1, sizeof *f);
  if (!f) return ACX_ERR_NO_MEMORY;
  acx_status_t st = acxk_lib_ctx_create(dev, cfg, ACX_LIB_CUFFT, &f->ctx);
  if (st != ACX_OK) {
    free(f);
    return st;
  }
  *fft = f;
  return ACX_OK;
}

acx_status_t acx_fft_destroy(acx_fft_t *fft) {
  if (!fft) return ACX_OK;
  acx_status_t st = acxk_lib_ctx_destroy(fft->ctx);
  free(fft);
  return st;
}

acx_status_t acx_fft_exec(acx_fft_t *fft, const acx_fft_desc_t *d, acx_future_t **done) {
  static const char fn[] = "acx_fft_exec";
  if (done) *done = NULL;
  ACX_CHECK_NULL(fft);
  ACX_CHECK_NULL_AS(d, "desc");
  acxk_lib_ctx_t *x = fft->ctx;
  ACX_CHECK_ARG(d->size == sizeof *d, "%s: argument 'desc' has size %zu, expected %zu (ACX_FFT_DESC_INIT)", fn,
                d->size, sizeof *d);
  ACX_CHECK_ARG((unsigned)d->type <= ACX_FFT_C2R, "%s: argument 'desc->type'=%d is not an acx_fft_type_t", fn,
                (int)d->type);
  ACX_CHECK_ARG(d->rank >= 1 && d->rank <= 3, "%s: argument 'desc->rank'=%d must be 1, 2 or 3", fn, d->rank);
  ACX_CHECK_ARG(d->batch >= 1, "%s: argument 'desc->batch'=%" PRId64 " must be >= 1", fn, d->batch);
  ACX_CHECK_ARG(d->type != ACX_FFT_C2C || d->direction == ACX_FFT_FORWARD || d->direction == ACX_FFT_INVERSE,
                "%s: argument 'desc->direction'=%d is neither ACX_FFT_FORWARD nor ACX_FFT_INVERSE", fn, d->direction);
  uint64_t full = 1, half = 1; /* elements per batch: all dimensions, and with the last halved */
  for (int i = 0; i < d->rank; i++) {
    ACX_CHECK_ARG(d->n[i] >= 1, "%s: argument 'desc->n[%d]'=%" PRId64 " must be >= 1", fn, i, d->n[i]);
    uint64_t h = i == d->rank - 1 ? (uint64_t)d->n[i] / 2 + 1 : (uint64_t)d->n[i];
    if ((uint64_t)d->n[i] > UINT64_MAX / full || h > UINT64_MAX / half) {
      ACX_WARN(LIB, "%s: the transform size overflows", fn);
      return ACX_ERR_OVERFLOW;
    }
    full *= (uint64_t)d->n[i];
    half *= h;
  }
  const uint32_t dts = ACXK_DT(ACX_DTYPE_F32) | ACXK_DT(ACX_DTYPE_F64);
  ACXCHECK(acxk_lib_check_buf(x, fn, "desc->in", d->in, 0, dts));
  ACXCHECK(acxk_lib_check_buf(x, fn, "desc->out", d->out, 0, dts));
  if (d->in->dtype != d->out->dtype) {
    ACX_WARN(LIB, "%s: 'desc->in' is %s and 'desc->out' %s: they must share the precision", fn,
             acx_dtype_name(d->in->dtype), acx_dtype_name(d->out->dtype));
    return ACX_ERR_BAD_DTYPE;
  }
  /* Real elements per batch on each side (a complex value is two). */
  uint64_t in_el = d->type == ACX_FFT_R2C ? full : d->type == ACX_FFT_C2R ? 2 * half : 2 * full;
  uint64_t out_el = d->type == ACX_FFT_R2C ? 2 * half : d->type == ACX_FFT_C2R ? full : 2 * full;
  if (in_el > (uint64_t)INT64_MAX / (uint64_t)d->batch || out_el > (uint64_t)INT64_MAX / (uint64_t)d->batch) {
    ACX_WARN(LIB, "%s: the batched transform size overflows", fn);
    return ACX_ERR_OVERFLOW;
  }
  acxk_req_t req;
  acxk_req_init(&req, ACXK_OP_FFT_EXEC);
  /* C2R overwrites its input (cuFFT's multi-dimensional C2R works in it): the input is written. */
  ACXCHECK(acxk_req_vector(&req, 0, fn, "desc->in", d->in, d->in_offset, (int64_t)(in_el * (uint64_t)d->batch), 1,
                           d->type == ACX_FFT_C2R || d->in == d->out));
  ACXCHECK(acxk_req_vector(&req, 1, fn, "desc->out", d->out, d->out_offset, (int64_t)(out_el * (uint64_t)d->batch),
                           1, 1));
  if (d->in == d->out) {
    const acxk_operand_t *a = &req.d.opnd[0], *b = &req.d.opnd[1];
    int overlap = a->off < b->off + b->extent && b->off < a->off + a->extent;
    int in_place = d->type == ACX_FFT_C2C && a->off == b->off;
    if (overlap && !in_place) {
      ACX_WARN(LIB, "%s: 'desc->in' and 'desc->out' overlap; only a C2C transform may run in place (same offset)", fn);
      return ACX_ERR_INVALID_ARG;
    }
  }
  req.d.u.fft = (acxk_fft_desc_t){.type = (uint32_t)d->type, .dtype = (uint32_t)d->in->dtype,
                                  .direction = d->type == ACX_FFT_C2C ? d->direction
                                               : d->type == ACX_FFT_R2C ? ACX_FFT_FORWARD : ACX_FFT_INVERSE,
                                  .rank = d->rank, .n = {d->n[0], d->rank > 1 ? d->n[1] : 0, d->rank > 2 ? d->n[2] : 0},
                                  .batch = d->batch};
  return acxk_lib_submit(x, fn, &req, done, NULL);
}
