/* Shareable buffers (issue 16): memory one executor exports and another on the same device maps,
 * and the elementwise reduce and divide a hierarchical collective runs on it. The handle's bytes
 * cross through a small host region of the device, as an NCCL unique id does; everything else is
 * an ordinary command on ordinary buffers. device_internal.h documents the calls. */
#include <inttypes.h>
#include <string.h>

#include "runtime/base/log.h"
#include "runtime/device/buffer.h"

/* The handle's head, as the executor wrote it (runtime/proto/cmd.h). */
static acxi_ipc_wire_t wire_of(const acxi_ipc_handle_t *h) {
  acxi_ipc_wire_t w;
  memcpy(&w, h->bytes, sizeof w);
  return w;
}

/* A host region of dev holding ACXI_IPC_HANDLE_BYTES, for one command's handle. */
static acx_status_t handle_region(acx_device_t *dev, acx_host_mem_t **mem, unsigned char **p) {
  void *addr;
  ACXCHECK(acx_host_alloc(dev, ACXI_IPC_HANDLE_BYTES, mem));
  acx_status_t st = acx_host_mem_ptr(*mem, &addr, NULL);
  if (st != ACX_OK) {
    acx_host_free(*mem);
    return st;
  }
  *p = addr;
  return ACX_OK;
}

acx_status_t acxi_buffer_ipc_export(acx_buffer_t *buf, acxi_ipc_handle_t *h, int64_t timeout_ns) {
  static const char fn[] = "acxi_buffer_ipc_export";
  ACX_CHECK_NULL_IN(fn, h, "h");
  ACXCHECK(acxi_buffer_check(fn, "buf", buf));
  if (buf->share != ACXI_SHARE_EXPORT) {
    ACX_WARN(BUFFER, "%s: argument 'buf' (buffer %" PRIu64 ") is not shareable (%s): only acxi_buffer_alloc_shareable's "
             "buffers have a handle", fn, buf->id, buf->share == ACXI_SHARE_IMPORT ? "an import" : "an ordinary buffer");
    return ACX_ERR_INVALID_ARG;
  }
  acx_device_t *dev = buf->dev;
  acx_host_mem_t *mem;
  unsigned char *p;
  ACXCHECK(handle_region(dev, &mem, &p));
  acxi_cmd_t cmd = {.op = ACXI_OP_IPC_EXPORT, .buf = {buf->id}, .off = {0}, .arg = {mem->id}};
  acxi_bufarg_t ba[] = {{buf, "buf"}};
  acx_status_t st = acxi_device_call(dev, &cmd, ba, 1, 0, -1, timeout_ns, NULL);
  if (st == ACX_OK) memcpy(h->bytes, p, ACXI_IPC_HANDLE_BYTES);
  else ACX_WARN(BUFFER, "%s: buffer %" PRIu64 " not exported: %s", fn, buf->id, acx_status_name(st));
  acx_host_free(mem);
  return st;
}

acx_status_t acxi_buffer_ipc_import(acx_device_t *dev, const acxi_ipc_handle_t *h, acx_dtype_t dtype,
                                    int64_t timeout_ns, acx_buffer_t **out) {
  static const char fn[] = "acxi_buffer_ipc_import";
  ACX_CHECK_NULL_IN(fn, dev, "dev");
  ACX_CHECK_NULL_IN(fn, h, "h");
  ACX_CHECK_NULL_IN(fn, out, "out");
  *out = NULL;
  size_t es = acx_dtype_size(dtype);
  if (es == 0) {
    ACX_WARN(BUFFER, "%s: argument 'dtype'=%d is not an acx_dtype_t", fn, (int)dtype);
    return ACX_ERR_BAD_DTYPE;
  }
  acxi_ipc_wire_t w = wire_of(h);
  if (w.magic != ACXI_IPC_MAGIC || w.bytes == 0 || w.bytes > (uint64_t)INT64_MAX) {
    ACX_WARN(BUFFER, "%s: argument 'h' is not a shareable-buffer handle (magic %#" PRIx64 ", %" PRIu64 " bytes)", fn,
             w.magic, w.bytes);
    return ACX_ERR_INVALID_ARG;
  }
  ACX_CHECK_ARG(w.bytes % es == 0, "%s: the handle's %" PRIu64 " bytes are not a multiple of the %s size %zu", fn,
                w.bytes, acx_dtype_name(dtype), es);
  if (acxi_device_state_status(dev) == ACX_ERR_INVALID_STATE) {
    ACX_WARN(BUFFER, "%s: argument 'dev' is closed", fn);
    return ACX_ERR_INVALID_STATE;
  }
  acx_host_mem_t *mem;
  unsigned char *p;
  ACXCHECK(handle_region(dev, &mem, &p));
  memcpy(p, h->bytes, ACXI_IPC_HANDLE_BYTES);
  acxi_cmd_t cmd = {.op = ACXI_OP_IPC_IMPORT, .dtype = (uint32_t)dtype, .off = {0}, .arg = {mem->id}};
  acx_status_t st =
      acxi_buffer_make(dev, fn, &cmd, (size_t)w.bytes, dtype, ACX_MEM_DEVICE, ACXI_SHARE_IMPORT, timeout_ns, out, NULL);
  acx_host_free(mem); /* the executor read it before it replied; on a timeout the import was failed */
  return st;
}

/* ---- elementwise arithmetic ---- */

/* The element size of dtype, one of the ten dtypes NCCL reduces. */
static acx_status_t arith_dtype(const char *fn, acx_dtype_t dtype, size_t *es) {
  switch (dtype) {
  case ACX_DTYPE_I8: case ACX_DTYPE_U8: case ACX_DTYPE_I32: case ACX_DTYPE_U32: case ACX_DTYPE_I64:
  case ACX_DTYPE_U64: case ACX_DTYPE_F16: case ACX_DTYPE_BF16: case ACX_DTYPE_F32: case ACX_DTYPE_F64:
    *es = acx_dtype_size(dtype);
    return ACX_OK;
  default:
    if (acx_dtype_size(dtype) == 0) {
      ACX_WARN(BUFFER, "%s: argument 'dtype'=%d is not an acx_dtype_t", fn, (int)dtype);
      return ACX_ERR_BAD_DTYPE;
    }
    ACX_WARN(BUFFER, "%s: argument 'dtype'=%s is not one of i8 u8 i32 u32 i64 u64 f16 bf16 f32 f64", fn,
             acx_dtype_name(dtype));
    return ACX_ERR_NOT_SUPPORTED;
  }
}

/* [off, off + count elements) inside buf, off a multiple of the element size; *bytes := the range's. */
static acx_status_t elem_range(const char *fn, const char *name, const char *off_name, const acx_buffer_t *buf,
                               size_t off, size_t count, size_t es, size_t *bytes) {
  if (count > SIZE_MAX / es) {
    ACX_WARN(BUFFER, "%s: argument 'count'=%zu elements of %zu bytes overflow", fn, count, es);
    return ACX_ERR_OVERFLOW;
  }
  *bytes = count * es;
  ACX_CHECK_ARG(off % es == 0, "%s: argument '%s'=%zu is not a multiple of the element size %zu", fn, off_name, off,
                es);
  if (off > buf->bytes || *bytes > buf->bytes - off) {
    ACX_WARN(BUFFER, "%s: range [%zu, +%zu) exceeds '%s' (%zu bytes)", fn, off, *bytes, name, buf->bytes);
    return ACX_ERR_OUT_OF_RANGE;
  }
  return ACX_OK;
}

static acx_status_t check_stream(acx_device_t *dev, const char *fn, uint32_t stream) {
  if (stream < (uint32_t)dev->streams) return ACX_OK;
  ACX_WARN(BUFFER, "%s: argument 'stream'=%u is not in [0, %d)", fn, stream, dev->streams);
  return ACX_ERR_INVALID_ARG;
}

acx_status_t acxi_buffer_reduce(acx_buffer_t *dst, size_t dst_off, acx_buffer_t *src, size_t src_off, size_t count,
                                acx_dtype_t dtype, acx_redop_t op, uint32_t stream, int64_t timeout_ns) {
  static const char fn[] = "acxi_buffer_reduce";
  size_t es = 0, bytes = 0;
  ACXCHECK(acxi_buffer_check(fn, "dst", dst));
  ACXCHECK(acxi_buffer_check_on(fn, "src", src, dst->dev, "argument 'dst'"));
  ACX_CHECK_ARG(op == ACX_REDOP_SUM || op == ACX_REDOP_PROD || op == ACX_REDOP_MAX || op == ACX_REDOP_MIN,
                "%s: argument 'op'=%d is not sum, prod, max or min%s", fn, (int)op,
                op == ACX_REDOP_AVG ? " (avg: a sum, then acxi_buffer_div)" : "");
  ACXCHECK(arith_dtype(fn, dtype, &es));
  ACXCHECK(check_stream(dst->dev, fn, stream));
  ACXCHECK(elem_range(fn, "dst", "dst_off", dst, dst_off, count, es, &bytes));
  ACXCHECK(elem_range(fn, "src", "src_off", src, src_off, count, es, &bytes));
  ACX_CHECK_ARG(dst != src || dst_off == src_off || dst_off >= src_off + bytes || src_off >= dst_off + bytes,
                "%s: 'dst' and 'src' are one buffer whose ranges at %zu and %zu overlap partly", fn, dst_off, src_off);
  if (count == 0) return ACX_OK;
  acxi_cmd_t cmd = {.op = ACXI_OP_REDUCE, .stream = stream, .dtype = (uint32_t)dtype, .buf = {dst->id, src->id},
                    .off = {dst_off, src_off}, .bytes = bytes, .arg = {(uint64_t)op}};
  acxi_bufarg_t ba[] = {{dst, "dst"}, {src, "src"}};
  return acxi_device_call(dst->dev, &cmd, ba, 2, 0, -1, timeout_ns, NULL);
}

acx_status_t acxi_buffer_div(acx_buffer_t *buf, size_t off, size_t count, acx_dtype_t dtype, uint64_t divisor,
                             uint32_t stream, int64_t timeout_ns) {
  static const char fn[] = "acxi_buffer_div";
  size_t es = 0, bytes = 0;
  ACXCHECK(acxi_buffer_check(fn, "buf", buf));
  ACXCHECK(arith_dtype(fn, dtype, &es));
  int is_signed = dtype == ACX_DTYPE_I8 || dtype == ACX_DTYPE_I32 || dtype == ACX_DTYPE_I64;
  ACX_CHECK_ARG(divisor != 0, "%s: argument 'divisor' is 0", fn);
  ACX_CHECK_ARG(!is_signed || divisor <= (uint64_t)INT64_MAX,
                "%s: argument 'divisor'=%" PRIu64 " exceeds the signed %s range of the division", fn, divisor,
                acx_dtype_name(dtype));
  ACXCHECK(check_stream(buf->dev, fn, stream));
  ACXCHECK(elem_range(fn, "buf", "off", buf, off, count, es, &bytes));
  if (count == 0) return ACX_OK;
  acxi_cmd_t cmd = {.op = ACXI_OP_DIV, .stream = stream, .dtype = (uint32_t)dtype, .buf = {buf->id}, .off = {off},
                    .bytes = bytes, .arg = {divisor}};
  acxi_bufarg_t ba[] = {{buf, "buf"}};
  return acxi_device_call(buf->dev, &cmd, ba, 1, 0, -1, timeout_ns, NULL);
}
