/* Buffers (generation-checked handles to executor memory), pinned host memory shared with the
 * executor, staging for arbitrary user memory, and events. Every argument is validated here,
 * before anything is enqueued; the generation is checked again inside the submission's critical
 * section (acxi_device_submit) where a restart cannot interleave. */
#define _GNU_SOURCE
#include "runtime/device/buffer.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/base/clock.h"
#include "runtime/actor/future.h"
#include "runtime/base/log.h"
#include "runtime/device/device_impl.h"

/* ---- validation helpers: each logs the argument it rejects, once ---- */

static acx_status_t usable(acx_device_t *dev) {
  acx_status_t st = acxi_device_state_status(dev);
  return st == ACX_ERR_INVALID_STATE ? st : ACX_OK; /* the other states are reported by submit */
}

/* The one buffer check of every public call (buffers here, libraries, collectives, remote
 * access). fn == NULL: no line (the caller says why in its own words). */
acx_status_t acxi_buffer_check_on(const char *fn, const char *name, acx_buffer_t *b, acx_device_t *dev,
                                  const char *whose) {
  if (!b) {
    if (fn) ACX_WARN(BUFFER, "%s: argument '%s' is NULL", fn, name);
    return ACX_ERR_NULL_ARG;
  }
  /* acquire: pairs with acx_buffer_free's exchange (a free that happened before this call is
   * seen); a free racing with the call is caught again by acxi_device_submit. */
  if (atomic_load_explicit(&b->freed, memory_order_acquire)) {
    if (fn) ACX_WARN(BUFFER, "%s: argument '%s' (buffer %" PRIu64 ") was freed", fn, name, b->id);
    return ACX_ERR_INVALID_STATE;
  }
  if (dev && b->dev != dev) {
    if (fn)
      ACX_WARN(BUFFER, "%s: argument '%s' (buffer %" PRIu64 ") belongs to another device than %s", fn, name, b->id,
               whose ? whose : "the call's");
    return ACX_ERR_INVALID_ARG;
  }
  if (usable(b->dev) != ACX_OK) {
    if (fn) ACX_WARN(BUFFER, "%s: argument '%s': its device is closed", fn, name);
    return ACX_ERR_INVALID_STATE;
  }
  /* relaxed: a hint; the submission checks again where the generation cannot move. */
  uint64_t gen = atomic_load_explicit(&b->dev->generation, memory_order_relaxed);
  if (b->generation != gen) {
    if (fn)
      ACX_WARN(BUFFER, "%s: argument '%s' (buffer %" PRIu64 ") is from device generation %" PRIu64
               ", the device is at %" PRIu64 " (its executor was restarted)", fn, name, b->id, b->generation, gen);
    return ACX_ERR_STALE_BUFFER;
  }
  return ACX_OK;
}

acx_status_t acxi_buffer_check(const char *fn, const char *name, acx_buffer_t *buf) {
  return acxi_buffer_check_on(fn, name, buf, NULL, NULL);
}

/* [off, off + *bytes) within size; *bytes == ACX_WHOLE means "to the end". */
static acx_status_t check_range(const char *fn, const char *name, size_t off, size_t *bytes, size_t size) {
  if (*bytes == ACX_WHOLE) {
    if (off > size) {
      ACX_WARN(BUFFER, "%s: offset %zu is past the end of '%s' (%zu bytes)", fn, off, name, size);
      return ACX_ERR_OUT_OF_RANGE;
    }
    *bytes = size - off;
  }
  if (off > SIZE_MAX - *bytes) {
    ACX_WARN(BUFFER, "%s: offset %zu + bytes %zu of '%s' overflows", fn, off, *bytes, name);
    return ACX_ERR_OVERFLOW;
  }
  if (off + *bytes > size) {
    ACX_WARN(BUFFER, "%s: range [%zu, +%zu) exceeds '%s' (%zu bytes)", fn, off, *bytes, name, size);
    return ACX_ERR_OUT_OF_RANGE;
  }
  return ACX_OK;
}

static acx_status_t check_elems(const char *fn, const char *name, const acx_buffer_t *b, size_t off, size_t bytes) {
  size_t es = acx_dtype_size(b->dtype);
  if (off % es || bytes % es) {
    ACX_WARN(BUFFER, "%s: offset %zu and bytes %zu of '%s' must be multiples of its element size %zu (%s)", fn, off,
             bytes, name, es, acx_dtype_name(b->dtype));
    return ACX_ERR_INVALID_ARG;
  }
  return ACX_OK;
}

static acx_status_t check_stream(acx_device_t *dev, const char *fn, uint32_t stream) {
  if (stream < (uint32_t)dev->streams) return ACX_OK;
  ACX_WARN(BUFFER, "%s: argument 'stream'=%u is not in [0, %d)", fn, stream, dev->streams);
  return ACX_ERR_INVALID_ARG;
}

static acx_status_t check_host(const char *fn, const char *name, acx_host_mem_t *m, acx_device_t *dev) {
  if (!m) {
    ACX_WARN(BUFFER, "%s: argument '%s' is NULL", fn, name);
    return ACX_ERR_NULL_ARG;
  }
  if (atomic_load_explicit(&m->freed, memory_order_acquire)) {
    ACX_WARN(BUFFER, "%s: argument '%s' (host region %" PRIu64 ") was freed", fn, name, m->id);
    return ACX_ERR_INVALID_STATE;
  }
  if (m->dev != dev) {
    ACX_WARN(BUFFER, "%s: argument '%s' is host memory of another device", fn, name);
    return ACX_ERR_INVALID_ARG;
  }
  return ACX_OK;
}

static int64_t deadline_of(acx_device_t *dev) { return acxi_deadline(dev->exec_timeout_ns); }

/* Sync or async: with done, submit and hand the future over; else call and wait. */
static acx_status_t run(acx_device_t *dev, acxi_cmd_t *cmd, const acxi_bufarg_t *bufs, int n, int64_t timeout_ns,
                        acx_future_t **done, acxi_cpl_t *cpl) {
  if (done) return acxi_device_submit(dev, cmd, bufs, n, 0, -1, deadline_of(dev), done);
  return acxi_device_call(dev, cmd, bufs, n, 0, -1, timeout_ns, cpl);
}

/* ---- buffers ---- */

static void account(acx_device_t *dev, const acx_buffer_t *b, int sign) {
  /* relaxed: statistics. */
  _Atomic uint64_t *bytes = b->kind == ACX_MEM_MANAGED ? &dev->managed_bytes : &dev->device_bytes;
  if (sign > 0) {
    atomic_fetch_add_explicit(&dev->buffers_live, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(bytes, b->bytes, memory_order_relaxed);
  } else {
    atomic_fetch_sub_explicit(&dev->buffers_live, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(bytes, b->bytes, memory_order_relaxed);
  }
}

/* share: ACXI_SHARE_NONE (kind as asked) or ACXI_SHARE_EXPORT (device memory another executor may
 * map: acxi_buffer_alloc_shareable). */
static acx_status_t alloc_common(const char *fn, acx_device_t *dev, size_t bytes, acx_dtype_t dtype,
                                 acx_mem_kind_t kind, int share, int64_t timeout_ns, acx_buffer_t **out,
                                 acx_future_t **done) {
  *out = NULL; /* dev and out: checked by the public callers */
  if (acx_dtype_size(dtype) == 0) {
    ACX_WARN(BUFFER, "%s: argument 'dtype'=%d is not an acx_dtype_t", fn, (int)dtype);
    return ACX_ERR_BAD_DTYPE;
  }
  ACX_CHECK_ARG(kind == ACX_MEM_DEVICE || kind == ACX_MEM_MANAGED || kind == ACX_MEM_SHAREABLE,
                "%s: argument 'kind'=%d is not an acx_mem_kind_t", fn, (int)kind);
  if (kind == ACX_MEM_SHAREABLE) share = ACXI_SHARE_EXPORT;
  ACX_CHECK_ARG(bytes > 0, "%s: argument 'bytes' is 0", fn);
  if (bytes > (size_t)INT64_MAX) {
    ACX_WARN(BUFFER, "%s: argument 'bytes'=%zu overflows a device size", fn, bytes);
    return ACX_ERR_OVERFLOW;
  }
  ACX_CHECK_ARG(bytes % acx_dtype_size(dtype) == 0, "%s: argument 'bytes'=%zu is not a multiple of the %s size %zu",
                fn, bytes, acx_dtype_name(dtype), acx_dtype_size(dtype));
  ACXCHECK(usable(dev));
  if (kind == ACX_MEM_MANAGED) {
    /* Never ask for more managed memory than the device has free: oversubscription would page
     * instead of failing, and on the GPU host that stalls every rank of the node. */
    uint64_t fr, tot;
    ACXCHECK(acx_device_mem_info(dev, &fr, &tot, timeout_ns));
    if (bytes > fr) {
      ACX_WARN(BUFFER, "%s: %zu managed bytes asked, the device has %" PRIu64 " free", fn, bytes, fr);
      return ACX_ERR_DEVICE_OOM;
    }
  }
  uint64_t mem = share == ACXI_SHARE_EXPORT ? ACXI_MEM_SHAREABLE
                 : kind == ACX_MEM_MANAGED    ? ACXI_MEM_MANAGED
                                              : ACXI_MEM_DEVICE;
  acxi_cmd_t cmd = {.op = ACXI_OP_ALLOC, .bytes = bytes, .dtype = (uint32_t)dtype, .arg = {mem}};
  return acxi_buffer_make(dev, fn, &cmd, bytes, dtype, kind, share, timeout_ns, out, done);
}

acx_status_t acxi_buffer_make(acx_device_t *dev, const char *fn, acxi_cmd_t *cmd, size_t bytes, acx_dtype_t dtype,
                              acx_mem_kind_t kind, int share, int64_t timeout_ns, acx_buffer_t **out,
                              acx_future_t **done) {
  acx_buffer_t *b = calloc(1, sizeof *b);
  if (!b) return ACX_ERR_NO_MEMORY;
  atomic_init(&b->refs, 1);
  atomic_init(&b->freed, 0);
  atomic_init(&b->registered, 0);
  atomic_init(&b->coll_pending, 0);
  b->dev = dev;
  acxi_device_hold(dev);
  b->id = atomic_fetch_add_explicit(&dev->next_buffer_id, 1, memory_order_relaxed); /* unique is enough */
  b->bytes = bytes;
  b->dtype = dtype;
  b->kind = kind;
  b->share = share;
  cmd->buf[0] = b->id;
  /* The generation is the one the submission stamps on the command. */
  acx_future_t *f = NULL;
  acx_status_t st = acxi_device_submit(dev, cmd, NULL, 0, 0, -1, acxi_deadline(acxi_device_timeout(dev, timeout_ns)),
                                       &f);
  if (st != ACX_OK) {
    atomic_store(&b->freed, 1); /* nothing was allocated */
    acx_buffer_release(b);
    return st;
  }
  b->generation = cmd->generation;
  account(dev, b, +1);
  if (done) {
    *done = f;
    *out = b;
    return ACX_OK;
  }
  st = acx_future_wait(f, acxi_device_timeout(dev, timeout_ns), NULL, 0, NULL);
  acx_future_release(f);
  if (st != ACX_OK) {
    /* The executor's own line names only a request id: say here what the user asked for. */
    static const char *const mem[] = {[ACXI_SHARE_NONE] = "", [ACXI_SHARE_EXPORT] = "shareable ",
                                      [ACXI_SHARE_IMPORT] = "another executor's "};
    ACX_WARN(BUFFER, "%s: %zu bytes of %s (%s%s memory) not %s: %s", fn, bytes, acx_dtype_name(dtype), mem[share],
             kind == ACX_MEM_MANAGED ? "managed" : "device", share == ACXI_SHARE_IMPORT ? "imported" : "allocated",
             acx_status_name(st));
    /* On a timeout the allocation may still happen: the release's FREE follows it in the ring.
     * Otherwise nothing was allocated. */
    if (st != ACX_ERR_TIMEOUT) {
      atomic_store(&b->freed, 1);
      account(dev, b, -1);
    }
    acx_buffer_release(b);
    return st;
  }
  *out = b;
  return ACX_OK;
}

acx_status_t acx_buffer_alloc(acx_device_t *dev, size_t bytes, acx_dtype_t dtype, acx_mem_kind_t kind,
                              int64_t timeout_ns, acx_buffer_t **buf) {
  ACX_CHECK_NULL(dev);
  ACX_CHECK_NULL(buf);
  return alloc_common("acx_buffer_alloc", dev, bytes, dtype, kind, ACXI_SHARE_NONE, timeout_ns, buf, NULL);
}

acx_status_t acxi_buffer_alloc_shareable(acx_device_t *dev, size_t bytes, acx_dtype_t dtype, int64_t timeout_ns,
                                         acx_buffer_t **out) {
  /* Internal (hierarchical collectives' staging): the log names the shareable allocation. */
  static const char fn[] = "acxi_buffer_alloc_shareable";
  ACX_CHECK_NULL_IN(fn, dev, "dev");
  ACX_CHECK_NULL_IN(fn, out, "out");
  return alloc_common(fn, dev, bytes, dtype, ACX_MEM_DEVICE, ACXI_SHARE_EXPORT, timeout_ns,
                      out, NULL);
}

acx_status_t acx_buffer_alloc_async(acx_device_t *dev, size_t bytes, acx_dtype_t dtype, acx_mem_kind_t kind,
                                    acx_buffer_t **buf, acx_future_t **done) {
  ACX_CHECK_NULL(dev);
  ACX_CHECK_NULL(buf);
  ACX_CHECK_NULL(done);
  return alloc_common("acx_buffer_alloc", dev, bytes, dtype, kind, ACXI_SHARE_NONE, -1, buf, done);
}

acx_status_t acx_buffer_free(acx_buffer_t *buf, int64_t timeout_ns) {
  ACX_CHECK_NULL(buf);
  acx_device_t *dev = buf->dev;
  int regs = atomic_load_explicit(&buf->registered, memory_order_acquire);
  if (regs > 0) {
    ACX_WARN(BUFFER, "acx_buffer_free: argument 'buf' (buffer %" PRIu64 ") is registered with %d coll(s): deregister it "
             "first (acx_coll_deregister), since the executors of its GPU's other ranks map it", buf->id, regs);
    return ACX_ERR_INVALID_STATE;
  }
  /* FREE names no buffer argument (the buffer is marked freed first): its wait is here. */
  int64_t deadline = acxi_deadline(acxi_device_timeout(dev, timeout_ns));
  ACXCHECK(acxi_buffer_coll_order("acx_buffer_free", "buf", buf, deadline));
  int expected = 0;
  if (!atomic_compare_exchange_strong(&buf->freed, &expected, 1)) {
    ACX_WARN(BUFFER, "acx_buffer_free: argument 'buf' (buffer %" PRIu64 ") was already freed", buf->id);
    return ACX_ERR_INVALID_STATE;
  }
  account(dev, buf, -1);
  if (buf->generation != atomic_load_explicit(&dev->generation, memory_order_relaxed) || usable(dev) != ACX_OK)
    return ACX_OK; /* its executor is gone, and its memory with it */
  acxi_cmd_t cmd = {.op = ACXI_OP_FREE, .buf = {buf->id}};
  /* The buffer is marked freed already, so it is not passed for validation; the executor
   * rejects a FREE for another generation with ACX_ERR_STALE_BUFFER. */
  acx_status_t st = acxi_device_call(dev, &cmd, NULL, 0, 0, -1, timeout_ns, NULL);
  if (st == ACX_ERR_STALE_BUFFER || st == ACX_ERR_DEVICE_LOST) return ACX_OK;
  return st;
}

acx_status_t acx_buffer_hold(acx_buffer_t *buf) {
  ACX_CHECK_NULL(buf);
  atomic_fetch_add_explicit(&buf->refs, 1, memory_order_relaxed); /* the caller holds one already */
  return ACX_OK;
}

void acx_buffer_release(acx_buffer_t *buf) {
  if (!buf) return;
  /* acq_rel: the last releaser sees every use made through other references. */
  if (atomic_fetch_sub_explicit(&buf->refs, 1, memory_order_acq_rel) != 1) return;
  acx_device_t *dev = buf->dev;
  if (!atomic_load(&buf->freed)) {
    account(dev, buf, -1);
    if (buf->generation == atomic_load_explicit(&dev->generation, memory_order_relaxed) &&
        acxi_device_state_status(dev) == ACX_OK) {
      acxi_cmd_t cmd = {.op = ACXI_OP_FREE, .buf = {buf->id}};
      acx_status_t st = acxi_device_submit(dev, &cmd, NULL, 0, 0, -1, acxi_deadline(dev->exec_timeout_ns), NULL);
      if (st != ACX_OK && st != ACX_ERR_DEVICE_LOST && st != ACX_ERR_STALE_BUFFER)
        ACX_WARN(BUFFER, "releasing buffer %" PRIu64 ": its FREE could not be sent (%s)", buf->id, acx_status_name(st));
    }
  }
  acxi_device_release(dev);
  free(buf);
}

acx_status_t acx_buffer_query(acx_buffer_t *buf, acx_buffer_info_t *info) {
  ACX_CHECK_NULL(buf);
  ACX_CHECK_NULL(info);
  *info = (acx_buffer_info_t){.device = buf->dev, .id = buf->id, .bytes = buf->bytes, .dtype = buf->dtype,
                              .kind = buf->kind, .generation = buf->generation};
  return ACX_OK;
}

acx_status_t acx_buffer_check(acx_buffer_t *buf) { return acxi_buffer_check(__func__, "buf", buf); }

/* ---- stream order for collectives on a worker thread (device_internal.h) ---- */

static _Thread_local int coll_worker_thread;

void acxi_buffer_coll_worker(void) { coll_worker_thread = 1; }

void acxi_buffer_coll_begin(acx_buffer_t *buf) {
  if (buf) atomic_fetch_add_explicit(&buf->coll_pending, 1, memory_order_relaxed);
}

void acxi_buffer_coll_end(acx_buffer_t *buf) {
  /* release: the collective's writes to the buffer come before the count that lets a waiter on. */
  if (buf) atomic_fetch_sub_explicit(&buf->coll_pending, 1, memory_order_release);
}

acx_status_t acxi_buffer_coll_order(const char *fn, const char *name, acx_buffer_t *buf, int64_t deadline) {
  /* acquire: pairs with acxi_buffer_coll_end. */
  if (coll_worker_thread || atomic_load_explicit(&buf->coll_pending, memory_order_acquire) == 0) return ACX_OK;
  const int64_t t0 = acxi_now_ns();
  while (atomic_load_explicit(&buf->coll_pending, memory_order_acquire) > 0) {
    int64_t now = acxi_now_ns();
    if (now >= deadline) {
      ACX_WARN(BUFFER, "%s: argument '%s' (buffer %" PRIu64 "): a collective on it was still queued or running "
               "after %.0f ms (the operation is ordered after it, as in a stream)", fn, name, buf->id, (now - t0) / 1e6);
      return ACX_ERR_TIMEOUT;
    }
    acxi_poll_nap(now - t0, 20000);
  }
  return ACX_OK;
}

static acx_status_t fill_common(acx_buffer_t *buf, size_t offset, size_t bytes, uint64_t pattern, unsigned width,
                                uint32_t stream, int64_t timeout_ns, acx_future_t **done) {
  static const char fn[] = "acx_buffer_fill";
  ACXCHECK(acxi_buffer_check(fn, "buf", buf));
  ACX_CHECK_ARG(width == 1 || width == 2 || width == 4 || width == 8, "%s: argument 'width'=%u is not 1, 2, 4 or 8",
                fn, width);
  if (buf->dtype != ACX_DTYPE_BYTE && width != acx_dtype_size(buf->dtype)) {
    ACX_WARN(BUFFER, "%s: argument 'width'=%u does not match the %s buffer's element size %zu", fn, width,
             acx_dtype_name(buf->dtype), acx_dtype_size(buf->dtype));
    return ACX_ERR_BAD_DTYPE;
  }
  ACXCHECK(check_stream(buf->dev, fn, stream));
  ACXCHECK(check_range(fn, "buf", offset, &bytes, buf->bytes));
  ACX_CHECK_ARG(offset % width == 0 && bytes % width == 0,
                "%s: 'offset'=%zu and 'bytes'=%zu must be multiples of 'width'=%u", fn, offset, bytes, width);
  acxi_cmd_t cmd = {.op = ACXI_OP_FILL, .stream = stream, .dtype = (uint32_t)buf->dtype, .buf = {buf->id},
                    .off = {offset}, .bytes = bytes, .arg = {pattern, width}};
  acxi_bufarg_t ba[] = {{buf, "buf"}};
  return run(buf->dev, &cmd, ba, 1, timeout_ns, done, NULL);
}

acx_status_t acx_buffer_fill(acx_buffer_t *buf, size_t offset, size_t bytes, uint64_t pattern, unsigned width,
                             uint32_t stream, int64_t timeout_ns) {
  return fill_common(buf, offset, bytes, pattern, width, stream, timeout_ns, NULL);
}

acx_status_t acx_buffer_fill_async(acx_buffer_t *buf, size_t offset, size_t bytes, uint64_t pattern,
                                   unsigned width, uint32_t stream, acx_future_t **done) {
  ACX_CHECK_NULL(done);
  return fill_common(buf, offset, bytes, pattern, width, stream, -1, done);
}

/* ---- copies ---- */

static acx_status_t h2d_common(acx_buffer_t *dst, size_t dst_offset, acx_host_mem_t *src, size_t src_offset,
                               size_t bytes, uint32_t stream, int64_t timeout_ns, acx_future_t **done,
                               const char *fn) {
  ACXCHECK(acxi_buffer_check(fn, "dst", dst));
  ACXCHECK(check_host(fn, "src", src, dst->dev));
  ACXCHECK(check_stream(dst->dev, fn, stream));
  if (bytes == ACX_WHOLE) {
    if (src_offset > src->bytes) {
      ACX_WARN(BUFFER, "%s: 'src_offset'=%zu is past the end of 'src' (%zu bytes)", fn, src_offset, src->bytes);
      return ACX_ERR_OUT_OF_RANGE;
    }
    bytes = src->bytes - src_offset;
  }
  ACXCHECK(check_range(fn, "src", src_offset, &bytes, src->bytes));
  ACXCHECK(check_range(fn, "dst", dst_offset, &bytes, dst->bytes));
  ACXCHECK(check_elems(fn, "dst", dst, dst_offset, bytes));
  acxi_cmd_t cmd = {.op = ACXI_OP_COPY_H2D, .stream = stream, .dtype = (uint32_t)dst->dtype, .buf = {dst->id},
                    .off = {dst_offset, src_offset}, .bytes = bytes, .arg = {src->id}};
  acxi_bufarg_t ba[] = {{dst, "dst"}};
  return run(dst->dev, &cmd, ba, 1, timeout_ns, done, NULL);
}

acx_status_t acx_buffer_copy_from_host(acx_buffer_t *dst, size_t dst_offset, acx_host_mem_t *src,
                                       size_t src_offset, size_t bytes, uint32_t stream, int64_t timeout_ns) {
  return h2d_common(dst, dst_offset, src, src_offset, bytes, stream, timeout_ns, NULL, __func__);
}

acx_status_t acx_buffer_copy_from_host_async(acx_buffer_t *dst, size_t dst_offset, acx_host_mem_t *src,
                                             size_t src_offset, size_t bytes, uint32_t stream,
                                             acx_future_t **done) {
  ACX_CHECK_NULL(done);
  return h2d_common(dst, dst_offset, src, src_offset, bytes, stream, -1, done, __func__);
}

static acx_status_t d2h_common(acx_host_mem_t *dst, size_t dst_offset, acx_buffer_t *src, size_t src_offset,
                               size_t bytes, uint32_t stream, int64_t timeout_ns, acx_future_t **done,
                               const char *fn) {
  ACXCHECK(acxi_buffer_check(fn, "src", src));
  ACXCHECK(check_host(fn, "dst", dst, src->dev));
  ACXCHECK(check_stream(src->dev, fn, stream));
  ACXCHECK(check_range(fn, "src", src_offset, &bytes, src->bytes));
  ACXCHECK(check_range(fn, "dst", dst_offset, &bytes, dst->bytes));
  ACXCHECK(check_elems(fn, "src", src, src_offset, bytes));
  acxi_cmd_t cmd = {.op = ACXI_OP_COPY_D2H, .stream = stream, .dtype = (uint32_t)src->dtype, .buf = {0, src->id},
                    .off = {dst_offset, src_offset}, .bytes = bytes, .arg = {dst->id}};
  acxi_bufarg_t ba[] = {{src, "src"}};
  return run(src->dev, &cmd, ba, 1, timeout_ns, done, NULL);
}

acx_status_t acx_buffer_copy_to_host(acx_host_mem_t *dst, size_t dst_offset, acx_buffer_t *src, size_t src_offset,
                                     size_t bytes, uint32_t stream, int64_t timeout_ns) {
  return d2h_common(dst, dst_offset, src, src_offset, bytes, stream, timeout_ns, NULL, __func__);
}

acx_status_t acx_buffer_copy_to_host_async(acx_host_mem_t *dst, size_t dst_offset, acx_buffer_t *src,
                                           size_t src_offset, size_t bytes, uint32_t stream,
                                           acx_future_t **done) {
  ACX_CHECK_NULL(done);
  return d2h_common(dst, dst_offset, src, src_offset, bytes, stream, -1, done, __func__);
}

static acx_status_t d2d_common(acx_buffer_t *dst, size_t dst_offset, acx_buffer_t *src, size_t src_offset,
                               size_t bytes, uint32_t stream, int64_t timeout_ns, acx_future_t **done,
                               const char *fn) {
  ACXCHECK(acxi_buffer_check(fn, "dst", dst));
  ACXCHECK(acxi_buffer_check_on(fn, "src", src, dst->dev, "argument 'dst'"));
  if (dst->dtype != src->dtype && dst->dtype != ACX_DTYPE_BYTE && src->dtype != ACX_DTYPE_BYTE) {
    ACX_WARN(BUFFER, "%s: 'dst' holds %s, 'src' holds %s", fn, acx_dtype_name(dst->dtype), acx_dtype_name(src->dtype));
    return ACX_ERR_BAD_DTYPE;
  }
  ACXCHECK(check_stream(dst->dev, fn, stream));
  ACXCHECK(check_range(fn, "src", src_offset, &bytes, src->bytes));
  ACXCHECK(check_range(fn, "dst", dst_offset, &bytes, dst->bytes));
  ACXCHECK(check_elems(fn, "src", src, src_offset, bytes));
  ACXCHECK(check_elems(fn, "dst", dst, dst_offset, bytes));
  acxi_cmd_t cmd = {.op = ACXI_OP_COPY_D2D, .stream = stream, .dtype = (uint32_t)dst->dtype,
                    .buf = {dst->id, src->id}, .off = {dst_offset, src_offset}, .bytes = bytes};
  acxi_bufarg_t ba[] = {{dst, "dst"}, {src, "src"}};
  return run(dst->dev, &cmd, ba, 2, timeout_ns, done, NULL);
}

acx_status_t acx_buffer_copy(acx_buffer_t *dst, size_t dst_offset, acx_buffer_t *src, size_t src_offset, size_t bytes,
                             uint32_t stream, int64_t timeout_ns) {
  return d2d_common(dst, dst_offset, src, src_offset, bytes, stream, timeout_ns, NULL, __func__);
}

acx_status_t acx_buffer_copy_async(acx_buffer_t *dst, size_t dst_offset, acx_buffer_t *src, size_t src_offset,
                                   size_t bytes, uint32_t stream, acx_future_t **done) {
  ACX_CHECK_NULL(done);
  return d2d_common(dst, dst_offset, src, src_offset, bytes, stream, -1, done, __func__);
}

/* ---- staged write/read ----
 * Through one staging region per device, shared with the executor, in two halves: the memcpy of
 * one chunk into (or out of) a half overlaps the executor's copy of the other. A half is retired
 * while a command that uses it may still run: a chunk that timed out leaves its copy queued, and
 * a later caller's bytes put in that half would be copied into the first caller's buffer (or a
 * late device-to-staging copy would overwrite them). It returns to service when that command's
 * reply came, or when the executor incarnation that could run it is gone: the device moves the
 * generation on only after the lost executor was killed. One transfer at a time (the staging
 * turn); every wait, for the turn as for a retired half, ends at the caller's deadline. */

typedef struct stg_half {
  acx_future_t *cmd; /* the last command sent through this half, while it may still run; NULL: free */
  uint64_t gen;      /* the generation it was sent to */
  uint64_t seq;      /* order of sending: the oldest retired half is waited for first */
} stg_half_t;

struct acxi_staging {
  /* The staging turn, under dev->staging_lock (held for this bookkeeping only, never across a
   * wait for the executor): a condition variable on CLOCK_MONOTONIC, so that a caller waits for
   * its turn until its own deadline. */
  pthread_cond_t turn; /* busy went to 0, a waiter left, or the device closed */
  int busy;            /* a transfer holds the turn */
  int waiters;         /* threads waiting for the turn */
  int closed;          /* the device closed: waiters leave, the holder is waited for */
  /* Owned by the turn's holder. */
  acx_host_mem_t *mem; /* NULL until the first staged transfer, or after the executor refused it */
  stg_half_t reg;      /* its HOST_REGISTER, until answered: no half is used before */
  stg_half_t half[2];
  uint64_t seq;
};

/* Frees h (returns 1) when the command in it can no longer run: its reply came (*status: the
 * reply's status) or its incarnation is gone (*status: ACX_OK, nothing of it survives). */
static int half_settle(acx_device_t *dev, stg_half_t *h, acx_status_t *status) {
  *status = ACX_OK;
  if (!h->cmd) return 1;
  /* A reply carries the executor's completion record; a loss or a close completes the future
   * without one, possibly while the lost executor still runs. */
  size_t len = 0;
  int replied = acxi_future_is_done(h->cmd) &&
                (*status = acx_future_result(h->cmd, NULL, 0, &len), len == sizeof(acxi_cpl_t));
  /* relaxed: a lone value; the device stores the next generation after the lost executor was
   * killed, and nothing else is read through it. */
  if (atomic_load_explicit(&dev->generation, memory_order_relaxed) != h->gen) {
    *status = ACX_OK;
  } else if (!replied) {
    return 0;
  }
  acx_future_release(h->cmd);
  h->cmd = NULL;
  return 1;
}

/* Waits for h's command until the deadline; returns the wait's status (ACX_ERR_TIMEOUT: still
 * running, h stays retired). */
static acx_status_t half_wait(acx_device_t *dev, stg_half_t *h, int64_t deadline) {
  if (!h->cmd) return ACX_OK;
  int64_t left = deadline - acxi_now_ns();
  acx_status_t st = acx_future_wait(h->cmd, left > 0 ? left : 0, NULL, 0, NULL), reply;
  half_settle(dev, h, &reply);
  return st;
}

/* pthread_mutex_lock until a CLOCK_MONOTONIC deadline, in slices of pthread_mutex_trylock (the
 * lock is held for list walks and registrations: its waits are rare and short); 1 when taken. */
static int lock_by(pthread_mutex_t *m, int64_t deadline) {
  for (int64_t pause = 10000;; pause = pause < 1000000 ? 2 * pause : pause) {
    if (pthread_mutex_trylock(m) == 0) return 1;
    int64_t now = acxi_now_ns();
    if (now >= deadline) return 0;
    struct timespec ts = acxi_ts_from_ns(pause < deadline - now ? pause : deadline - now);
    nanosleep(&ts, NULL);
  }
}

static void host_list_add(acx_device_t *dev, acx_host_mem_t *m);
static void host_list_remove(acx_device_t *dev, acx_host_mem_t *m);
static acx_status_t host_mem_new(acx_device_t *dev, size_t bytes, int internal, acx_host_mem_t **out);
static void host_mem_init(acx_device_t *dev, acx_host_mem_t *m, size_t bytes, int internal);
static acx_status_t host_mem_publish(acx_device_t *dev, acx_host_mem_t *m, acx_host_mem_t **out);
static void host_mem_free(acx_host_mem_t *m);
static acxi_cmd_t host_register_cmd(acx_device_t *dev, acx_host_mem_t *m);

/* Creates the region and sends its HOST_REGISTER, without waiting for the reply: listed first,
 * under host_lock, so that a restart in between registers it with the new executor instead. */
static acx_status_t staging_create(acx_device_t *dev, const char *fn, acxi_staging_t *s, int64_t deadline) {
  acx_host_mem_t *m;
  ACXCHECK(host_mem_new(dev, dev->staging_bytes, 1, &m));
  acxi_cmd_t cmd = host_register_cmd(dev, m);
  acx_future_t *f = NULL;
  acx_status_t st;
  if (!lock_by(&dev->host_lock, deadline)) {
    ACX_WARN(BUFFER, "%s: the device's host memory list stayed busy until the deadline", fn);
    st = ACX_ERR_TIMEOUT;
    goto err_free_mem;
  }
  host_list_add(dev, m);
  st = acxi_device_submit(dev, &cmd, NULL, 0, 0, dev->transport->in_rank ? -1 : m->shm.fd, deadline, &f);
  if (st != ACX_OK) host_list_remove(dev, m);
  pthread_mutex_unlock(&dev->host_lock);
  if (st != ACX_OK) goto err_free_mem;
  s->mem = m;
  s->reg = (stg_half_t){.cmd = f, .gen = cmd.generation};
  return ACX_OK;
err_free_mem:
  host_mem_free(m);
  return st;
}

/* The executor refused the registration: the region goes (a new one is made by the next call),
 * unless a restart has registered it with a newer executor meanwhile. */
static void staging_drop_refused(acx_device_t *dev, acxi_staging_t *s, uint64_t gen) {
  pthread_mutex_lock(&dev->host_lock); /* held only for list walks and bounded device calls */
  /* relaxed: as in half_settle; a restart registers listed regions under host_lock. */
  int kept = atomic_load_explicit(&dev->generation, memory_order_relaxed) != gen;
  if (!kept) host_list_remove(dev, s->mem);
  pthread_mutex_unlock(&dev->host_lock);
  if (kept) return;
  host_mem_free(s->mem);
  s->mem = NULL;
}

/* The region exists and the executor has it: creates it at the first use and waits for its
 * registration within the caller's deadline (a timed-out registration stays queued; a later call
 * finds it answered). */
static acx_status_t staging_ready(acx_device_t *dev, const char *fn, acxi_staging_t *s, int64_t deadline) {
  if (!s->mem) ACXCHECK(staging_create(dev, fn, s, deadline));
  if (!s->reg.cmd) return ACX_OK;
  uint64_t gen = s->reg.gen;
  int64_t left = deadline - acxi_now_ns();
  acx_status_t st = acx_future_wait(s->reg.cmd, left > 0 ? left : 0, NULL, 0, NULL), reply;
  if (!half_settle(dev, &s->reg, &reply)) {
    if (st == ACX_ERR_TIMEOUT)
      ACX_WARN(BUFFER, "%s: registering the staging region (ACX_STAGING_BYTES=%zu) with the executor got no reply "
               "by the deadline; it stays queued", fn, dev->staging_bytes);
    return st; /* else failed by a loss: registered again with the restarted executor */
  }
  if (reply != ACX_OK) {
    ACX_WARN(BUFFER, "%s: the executor refused the staging region (ACX_STAGING_BYTES=%zu): %s", fn,
             dev->staging_bytes, acx_status_name(reply));
    staging_drop_refused(dev, s, gen);
    return reply;
  }
  return ACX_OK;
}

/* Free halves (up to want) into idx; when both are retired, waits for the oldest until the
 * deadline. */
static acx_status_t staging_halves(acx_device_t *dev, const char *fn, acxi_staging_t *s, int want, int64_t deadline,
                                   int idx[2], int *n) {
  for (;;) {
    acx_status_t reply;
    *n = 0;
    for (int k = 0; k < 2 && *n < want; k++)
      if (half_settle(dev, &s->half[k], &reply)) idx[(*n)++] = k;
    if (*n) return ACX_OK;
    acx_status_t st = acxi_device_state_status(dev);
    if (st != ACX_OK) return st; /* no command would be accepted */
    stg_half_t *oldest = s->half[0].seq < s->half[1].seq ? &s->half[0] : &s->half[1];
    st = half_wait(dev, oldest, deadline);
    if (st == ACX_ERR_TIMEOUT && oldest->cmd) {
      ACX_WARN(BUFFER, "%s: both staging halves wait for copies of earlier calls that timed out; neither was "
               "answered by the deadline", fn);
      return ACX_ERR_TIMEOUT;
    }
    if (oldest->cmd) return st; /* failed by a loss: usable again once the executor is restarted */
  }
}

static acxi_staging_t *staging_new(void) {
  acxi_staging_t *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  int rc = pthread_cond_init(&s->turn, &a);
  pthread_condattr_destroy(&a);
  if (rc == 0) return s;
  free(s);
  return NULL;
}

/* Waits for the staging turn until the deadline (staging_lock held). */
static acx_status_t turn_take(acx_device_t *dev, const char *fn, acxi_staging_t *s, int64_t deadline) {
  struct timespec ts = acxi_ts_from_ns(deadline);
  s->waiters++;
  while (s->busy && !s->closed && acxi_now_ns() < deadline)
    pthread_cond_timedwait(&s->turn, &dev->staging_lock, &ts);
  s->waiters--;
  if (s->closed) {
    pthread_cond_broadcast(&s->turn); /* the closer waits for the waiters to leave */
    return ACX_ERR_INVALID_STATE;
  }
  if (s->busy) {
    ACX_WARN(BUFFER, "%s: another thread's staged write/read kept the device's staging region until the deadline "
             "(one staged transfer at a time per device)", fn);
    return ACX_ERR_TIMEOUT;
  }
  s->busy = 1;
  return ACX_OK;
}

static void staging_end(acx_device_t *dev, acxi_staging_t *s) {
  pthread_mutex_lock(&dev->staging_lock);
  s->busy = 0;
  pthread_cond_broadcast(&s->turn); /* waiters with different deadlines, and maybe the closer */
  pthread_mutex_unlock(&dev->staging_lock);
}

/* Takes the staging turn and up to `want` free halves, all within the caller's deadline. On
 * ACX_OK the caller holds the turn and gives it back with staging_end. */
static acx_status_t staging_begin(acx_device_t *dev, const char *fn, int want, int64_t deadline, acxi_staging_t **out,
                                  int idx[2], int *n) {
  pthread_mutex_lock(&dev->staging_lock); /* bookkeeping only: no holder waits with it */
  acx_status_t st = acxi_device_state_status(dev);
  acxi_staging_t *s = dev->staging;
  if (st != ACX_ERR_INVALID_STATE && !s && !(s = dev->staging = staging_new())) st = ACX_ERR_NO_MEMORY;
  if (st != ACX_ERR_INVALID_STATE && st != ACX_ERR_NO_MEMORY) st = turn_take(dev, fn, s, deadline);
  pthread_mutex_unlock(&dev->staging_lock);
  if (st != ACX_OK) return st; /* closed: the region is gone for good */
  ACXCHECKGOTO(staging_ready(dev, fn, s, deadline), st, err_end);
  ACXCHECKGOTO(staging_halves(dev, fn, s, want, deadline, idx, n), st, err_end);
  *out = s;
  return ACX_OK;
err_end:
  staging_end(dev, s);
  return st;
}

static void *half_addr(acxi_staging_t *s, int k, size_t half) { return (char *)s->mem->shm.addr + (size_t)k * half; }

/* Sends one chunk's copy through half k, which stays retired until it is answered. */
static acx_status_t chunk_send(acx_device_t *dev, acxi_staging_t *s, int k, acxi_cmd_t *cmd, acxi_bufarg_t *ba,
                               int64_t deadline) {
  acx_future_t *f = NULL;
  ACXCHECK(acxi_device_submit(dev, cmd, ba, 1, 0, -1, deadline, &f));
  s->half[k] = (stg_half_t){.cmd = f, .gen = cmd->generation, .seq = ++s->seq};
  return ACX_OK;
}

static acx_status_t chunk_wait(acx_device_t *dev, const char *fn, acxi_staging_t *s, int k, int64_t deadline) {
  acx_status_t st = half_wait(dev, &s->half[k], deadline);
  if (st == ACX_ERR_TIMEOUT && s->half[k].cmd)
    ACX_WARN(BUFFER, "%s: a chunk's copy got no reply by the deadline; it stays queued and its staging half is not "
             "reused until it is answered or the executor is restarted", fn);
  return st;
}

/* Waits for the chunks still in flight; the first failure wins (and is the one logged). */
static void staging_finish(acx_device_t *dev, const char *fn, acxi_staging_t *s, const int idx[2], int n,
                           int64_t deadline, acx_status_t *st) {
  for (int j = 0; j < n; j++) {
    acx_status_t s2 = *st == ACX_OK ? chunk_wait(dev, fn, s, idx[j], deadline)
                                    : half_wait(dev, &s->half[idx[j]], deadline);
    if (*st == ACX_OK) *st = s2;
  }
}

acx_status_t acx_buffer_write(acx_buffer_t *dst, size_t dst_offset, const void *src, size_t bytes, uint32_t stream,
                              int64_t timeout_ns) {
  static const char fn[] = "acx_buffer_write";
  ACXCHECK(acxi_buffer_check(fn, "dst", dst));
  ACX_CHECK_NULL(src);
  acx_device_t *dev = dst->dev;
  ACXCHECK(check_stream(dev, fn, stream));
  ACXCHECK(check_range(fn, "dst", dst_offset, &bytes, dst->bytes));
  ACXCHECK(check_elems(fn, "dst", dst, dst_offset, bytes));
  if (bytes == 0) return ACX_OK;
  int64_t deadline = acxi_deadline(acxi_device_timeout(dev, timeout_ns));
  /* Before the staging is taken (acxi_device_submit would wait holding it, and the worker reads
   * and writes through the same staging). */
  ACXCHECK(acxi_buffer_coll_order(fn, "dst", dst, deadline));
  size_t half = dev->staging_bytes / 2;
  acxi_staging_t *s;
  int idx[2], n;
  ACXCHECK(staging_begin(dev, fn, bytes > half ? 2 : 1, deadline, &s, idx, &n));
  acx_status_t st = ACX_OK;
  for (size_t done = 0, i = 0; st == ACX_OK && done < bytes; done += half, i++) {
    size_t len = bytes - done < half ? bytes - done : half;
    int k = idx[i % (size_t)n];
    st = chunk_wait(dev, fn, s, k, deadline); /* the chunk before, through this half */
    if (st != ACX_OK) break;
    memcpy(half_addr(s, k, half), (const char *)src + done, len);
    acxi_cmd_t cmd = {.op = ACXI_OP_COPY_H2D, .stream = stream, .dtype = (uint32_t)dst->dtype, .buf = {dst->id},
                      .off = {dst_offset + done, (size_t)k * half}, .bytes = len, .arg = {s->mem->id}};
    acxi_bufarg_t ba[] = {{dst, "dst"}};
    st = chunk_send(dev, s, k, &cmd, ba, deadline);
  }
  staging_finish(dev, fn, s, idx, n, deadline, &st);
  staging_end(dev, s);
  return st;
}

acx_status_t acx_buffer_read(acx_buffer_t *src, size_t src_offset, void *dst, size_t bytes, uint32_t stream,
                             int64_t timeout_ns) {
  static const char fn[] = "acx_buffer_read";
  ACXCHECK(acxi_buffer_check(fn, "src", src));
  ACX_CHECK_NULL(dst);
  acx_device_t *dev = src->dev;
  ACXCHECK(check_stream(dev, fn, stream));
  ACXCHECK(check_range(fn, "src", src_offset, &bytes, src->bytes));
  ACXCHECK(check_elems(fn, "src", src, src_offset, bytes));
  if (bytes == 0) return ACX_OK;
  int64_t deadline = acxi_deadline(acxi_device_timeout(dev, timeout_ns));
  ACXCHECK(acxi_buffer_coll_order(fn, "src", src, deadline)); /* before the staging: as in write */
  size_t half = dev->staging_bytes / 2, nchunks = (bytes + half - 1) / half;
  acxi_staging_t *s;
  int idx[2], n;
  ACXCHECK(staging_begin(dev, fn, nchunks > 1 ? 2 : 1, deadline, &s, idx, &n));
  acx_status_t st = ACX_OK;
  /* With two halves, chunk j+1 is requested before chunk j is copied out. A chunk is copied out
   * only after its own reply: a late copy never reaches the caller's memory. */
  for (size_t j = 0, next = 0; st == ACX_OK && j < nchunks; j++) {
    for (; st == ACX_OK && next < nchunks && next < j + (size_t)n; next++) {
      size_t off = next * half, len = bytes - off < half ? bytes - off : half;
      int k = idx[next % (size_t)n];
      acxi_cmd_t cmd = {.op = ACXI_OP_COPY_D2H, .stream = stream, .dtype = (uint32_t)src->dtype,
                        .buf = {0, src->id}, .off = {(size_t)k * half, src_offset + off}, .bytes = len,
                        .arg = {s->mem->id}};
      acxi_bufarg_t ba[] = {{src, "src"}};
      st = chunk_send(dev, s, k, &cmd, ba, deadline);
    }
    if (st != ACX_OK) break;
    size_t off = j * half, len = bytes - off < half ? bytes - off : half;
    int k = idx[j % (size_t)n];
    st = chunk_wait(dev, fn, s, k, deadline);
    if (st == ACX_OK) memcpy((char *)dst + off, half_addr(s, k, half), len);
  }
  staging_finish(dev, fn, s, idx, n, deadline, &st);
  staging_end(dev, s);
  return st;
}

/* ---- managed memory ---- */

static acx_status_t check_managed(const char *fn, acx_buffer_t *buf) {
  if (buf->kind == ACX_MEM_MANAGED) return ACX_OK;
  ACX_WARN(BUFFER, "%s: argument 'buf' (buffer %" PRIu64 ") is not managed memory", fn, buf->id);
  return ACX_ERR_INVALID_ARG;
}

acx_status_t acx_buffer_prefetch(acx_buffer_t *buf, size_t offset, size_t bytes, int to_host, uint32_t stream,
                                 int64_t timeout_ns) {
  static const char fn[] = "acx_buffer_prefetch";
  ACXCHECK(acxi_buffer_check(fn, "buf", buf));
  ACXCHECK(check_managed(fn, buf));
  ACX_CHECK_ARG(to_host == 0 || to_host == 1, "%s: argument 'to_host'=%d must be 0 or 1", fn, to_host);
  ACXCHECK(check_stream(buf->dev, fn, stream));
  ACXCHECK(check_range(fn, "buf", offset, &bytes, buf->bytes));
  acxi_cmd_t cmd = {.op = ACXI_OP_PREFETCH, .stream = stream, .buf = {buf->id}, .off = {offset}, .bytes = bytes,
                    .arg = {(uint64_t)to_host}};
  acxi_bufarg_t ba[] = {{buf, "buf"}};
  return run(buf->dev, &cmd, ba, 1, timeout_ns, NULL, NULL);
}

acx_status_t acx_buffer_advise(acx_buffer_t *buf, size_t offset, size_t bytes, acx_advice_t advice,
                               int64_t timeout_ns) {
  static const char fn[] = "acx_buffer_advise";
  ACXCHECK(acxi_buffer_check(fn, "buf", buf));
  ACXCHECK(check_managed(fn, buf));
  ACX_CHECK_ARG(advice >= ACX_ADVISE_READ_MOSTLY && advice <= ACX_ADVISE_UNSET_READ_MOSTLY,
                "%s: argument 'advice'=%d is not an acx_advice_t", fn, (int)advice);
  ACXCHECK(check_range(fn, "buf", offset, &bytes, buf->bytes));
  /* acx_advice_t mirrors acxi_advice_t value for value. */
  acxi_cmd_t cmd = {.op = ACXI_OP_ADVISE, .buf = {buf->id}, .off = {offset}, .bytes = bytes, .arg = {(uint64_t)advice}};
  acxi_bufarg_t ba[] = {{buf, "buf"}};
  return run(buf->dev, &cmd, ba, 1, timeout_ns, NULL, NULL);
}

acx_status_t acx_buffer_device_ptr(acx_buffer_t *buf, void **ptr, int64_t timeout_ns) {
  static const char fn[] = "acx_buffer_device_ptr";
  ACX_CHECK_NULL(ptr);
  *ptr = NULL;
  ACXCHECK(acxi_buffer_check(fn, "buf", buf));
  if (!buf->dev->transport->in_rank) {
    ACX_WARN(BUFFER, "%s: raw device pointers exist only with the inline transport (ACX_EXECUTOR=inline); this "
             "device's executor is another process", fn);
    return ACX_ERR_NOT_SUPPORTED;
  }
  acxi_cmd_t cmd = {.op = ACXI_OP_BUFFER_INFO, .buf = {buf->id}};
  acxi_bufarg_t ba[] = {{buf, "buf"}};
  acxi_cpl_t c;
  ACXCHECK(acxi_device_call(buf->dev, &cmd, ba, 1, 0, -1, timeout_ns, &c));
  *ptr = (void *)(uintptr_t)c.value[1];
  return ACX_OK;
}

/* ---- pinned shared host memory ---- */

static acxi_cmd_t host_register_cmd(acx_device_t *dev, acx_host_mem_t *m) {
  return (acxi_cmd_t){.op = ACXI_OP_HOST_REGISTER, .bytes = m->bytes,
                      .arg = {m->id, dev->transport->in_rank ? (uint64_t)(uintptr_t)m->shm.addr : 0}};
}

acx_status_t acxi_host_mem_register(acx_device_t *dev, acx_host_mem_t *m, unsigned flags) {
  acxi_cmd_t cmd = host_register_cmd(dev, m);
  return acxi_device_call(dev, &cmd, NULL, 0, flags, dev->transport->in_rank ? -1 : m->shm.fd, -1, NULL);
}

acx_status_t acxi_host_mem_register_all(acx_device_t *dev) {
  acx_status_t st = ACX_OK;
  pthread_mutex_lock(&dev->host_lock);
  for (acx_host_mem_t *m = dev->host_list; m && st == ACX_OK; m = m->next)
    st = acxi_host_mem_register(dev, m, ACXI_SUBMIT_INTERNAL);
  pthread_mutex_unlock(&dev->host_lock);
  return st;
}

/* host_lock held. */
static void host_list_add(acx_device_t *dev, acx_host_mem_t *m) {
  m->prev = NULL;
  m->next = dev->host_list;
  if (m->next) m->next->prev = m;
  dev->host_list = m;
}

/* host_lock held. */
static void host_list_remove(acx_device_t *dev, acx_host_mem_t *m) {
  if (m->prev) m->prev->next = m->next;
  else dev->host_list = m->next;
  if (m->next) m->next->prev = m->prev;
  m->next = m->prev = NULL;
}

/* The shared memory and the handle, neither listed nor registered (host_mem_free undoes it). */
/* m->shm mapped: the rest of the handle (host_mem_free undoes it). */
static void host_mem_init(acx_device_t *dev, acx_host_mem_t *m, size_t bytes, int internal) {
  m->dev = dev;
  m->bytes = bytes;
  m->internal = internal;
  atomic_init(&m->freed, 0);
  m->id = atomic_fetch_add_explicit(&dev->next_region_id, 1, memory_order_relaxed);
  if (!internal) acxi_device_hold(dev);
  atomic_fetch_add_explicit(&dev->host_bytes, bytes, memory_order_relaxed); /* a statistic */
}

static acx_status_t host_mem_new(acx_device_t *dev, size_t bytes, int internal, acx_host_mem_t **out) {
  acx_host_mem_t *m = calloc(1, sizeof *m);
  if (!m) return ACX_ERR_NO_MEMORY;
  acx_status_t res;
  ACXCHECKGOTO(acxi_shm_create("acx-host", bytes, &m->shm), res, err_free_mem);
  host_mem_init(dev, m, bytes, internal);
  *out = m;
  return ACX_OK;
err_free_mem:
  free(m);
  return res;
}

static void host_mem_free(acx_host_mem_t *m) {
  acx_device_t *dev = m->dev;
  atomic_fetch_sub_explicit(&dev->host_bytes, m->bytes, memory_order_relaxed);
  acxi_shm_destroy(&m->shm);
  if (!m->internal) acxi_device_release(dev);
  free(m);
}

static acx_status_t host_mem_create(acx_device_t *dev, size_t bytes, acx_host_mem_t **out) {
  acx_host_mem_t *m;
  ACXCHECK(host_mem_new(dev, bytes, 0, &m));
  return host_mem_publish(dev, m, out);
}

/* Lists m and registers it with the executor; on failure frees it. */
static acx_status_t host_mem_publish(acx_device_t *dev, acx_host_mem_t *m, acx_host_mem_t **out) {
  /* Listed before it is registered, under host_lock, so a restart in between registers it with
   * the new executor instead. */
  pthread_mutex_lock(&dev->host_lock);
  host_list_add(dev, m);
  acx_status_t res = acxi_host_mem_register(dev, m, 0);
  if (res != ACX_OK) host_list_remove(dev, m);
  pthread_mutex_unlock(&dev->host_lock);
  if (res != ACX_OK) {
    host_mem_free(m);
    return res;
  }
  *out = m;
  return ACX_OK;
}

/* ---- host regions shared by the ranks of a node ---- */

acx_status_t acxi_host_share(const acx_host_mem_t *mem, acxi_host_share_t *out) {
  static const char fn[] = "acxi_host_share";
  ACX_CHECK_NULL_IN(fn, mem, "mem");
  ACX_CHECK_NULL_IN(fn, out, "out");
  struct stat st;
  if (fstat(mem->shm.fd, &st) != 0) {
    ACX_WARN(BUFFER, "%s: host region %" PRIu64 ": fstat failed: %s", fn, mem->id, strerror(errno));
    return ACX_ERR_SYSTEM;
  }
  *out = (acxi_host_share_t){.pid = (int32_t)getpid(), .fd = mem->shm.fd, .dev = (uint64_t)st.st_dev,
                             .ino = (uint64_t)st.st_ino, .bytes = mem->bytes};
  return ACX_OK;
}

acx_status_t acxi_host_attach(acx_device_t *dev, const acxi_host_share_t *share, acx_host_mem_t **out) {
  static const char fn[] = "acxi_host_attach";
  ACX_CHECK_NULL_IN(fn, dev, "dev");
  ACX_CHECK_NULL_IN(fn, share, "share");
  ACX_CHECK_NULL_IN(fn, out, "out");
  *out = NULL;
  ACX_CHECK_ARG(share->pid > 0 && share->fd >= 0 && share->bytes > 0 && share->bytes <= (uint64_t)INT64_MAX,
                "%s: argument 'share' names no region (pid %d, fd %d, %" PRIu64 " bytes)", fn, (int)share->pid,
                (int)share->fd, share->bytes);
  ACXCHECK(usable(dev));
  int fd;
  ACXCHECK(acxi_shm_open_peer(fn, share->pid, share->fd, share->dev, share->ino, share->bytes, &fd));
  acx_status_t st = ACX_OK;
  acx_host_mem_t *m = calloc(1, sizeof *m);
  if (!m) {
    st = ACX_ERR_NO_MEMORY;
    goto err_close_fd;
  }
  if ((st = acxi_shm_map(fd, (size_t)share->bytes, &m->shm)) != ACX_OK) { /* maps a duplicate of fd */
    free(m);
    goto err_close_fd;
  }
  close(fd);
  host_mem_init(dev, m, (size_t)share->bytes, 0);
  return host_mem_publish(dev, m, out);
err_close_fd:
  close(fd);
  return st;
}

acx_status_t acx_host_alloc(acx_device_t *dev, size_t bytes, acx_host_mem_t **mem) {
  ACX_CHECK_NULL(dev);
  ACX_CHECK_NULL(mem);
  *mem = NULL;
  ACX_CHECK_ARG(bytes > 0, "acx_host_alloc: argument 'bytes' is 0");
  if (bytes > (size_t)INT64_MAX) {
    ACX_WARN(BUFFER, "acx_host_alloc: argument 'bytes'=%zu overflows", bytes);
    return ACX_ERR_OVERFLOW;
  }
  ACXCHECK(usable(dev));
  return host_mem_create(dev, bytes, mem);
}

static acx_status_t host_mem_destroy(acx_host_mem_t *m) {
  acx_device_t *dev = m->dev;
  acx_status_t st = ACX_OK;
  pthread_mutex_lock(&dev->host_lock);
  host_list_remove(dev, m);
  pthread_mutex_unlock(&dev->host_lock);
  if (acxi_device_state_status(dev) == ACX_OK) {
    acxi_cmd_t cmd = {.op = ACXI_OP_HOST_UNREGISTER, .arg = {m->id}};
    st = acxi_device_call(dev, &cmd, NULL, 0, 0, -1, -1, NULL);
    /* A lost executor took its mapping with it; the region was never registered with a newer
     * one since it left the list first. */
    if (st == ACX_ERR_DEVICE_LOST || st == ACX_ERR_STALE_BUFFER) st = ACX_OK;
  }
  host_mem_free(m);
  return st;
}

acx_status_t acx_host_free(acx_host_mem_t *mem) {
  if (!mem) return ACX_OK;
  int expected = 0;
  if (!atomic_compare_exchange_strong(&mem->freed, &expected, 1)) {
    ACX_WARN(BUFFER, "acx_host_free: argument 'mem' (host region %" PRIu64 ") was already freed", mem->id);
    return ACX_ERR_INVALID_STATE;
  }
  return host_mem_destroy(mem);
}

acx_status_t acx_host_mem_ptr(acx_host_mem_t *mem, void **ptr, size_t *bytes) {
  ACX_CHECK_NULL(mem);
  ACX_CHECK_NULL(ptr);
  if (atomic_load(&mem->freed)) {
    ACX_WARN(BUFFER, "acx_host_mem_ptr: argument 'mem' was freed");
    return ACX_ERR_INVALID_STATE;
  }
  *ptr = mem->shm.addr;
  if (bytes) *bytes = mem->bytes;
  return ACX_OK;
}

void acxi_device_staging_destroy(acx_device_t *dev) {
  pthread_mutex_lock(&dev->staging_lock);
  acxi_staging_t *s = dev->staging;
  if (s) {
    s->closed = 1;
    pthread_cond_broadcast(&s->turn);
    /* Untimed, yet bounded: the device is closed, so waiters leave at once, and the holder of the
     * turn finds its futures completed (ACX_ERR_CANCELLED) and its submissions refused. */
    while (s->busy || s->waiters) pthread_cond_wait(&s->turn, &dev->staging_lock);
    dev->staging = NULL;
  }
  pthread_mutex_unlock(&dev->staging_lock);
  if (!s) return;
  /* The executor is gone (reaped): nothing can run through the halves any more. */
  if (s->reg.cmd) acx_future_release(s->reg.cmd);
  for (int k = 0; k < 2; k++)
    if (s->half[k].cmd) acx_future_release(s->half[k].cmd);
  if (s->mem) {
    atomic_store(&s->mem->freed, 1);
    host_mem_destroy(s->mem);
  }
  pthread_cond_destroy(&s->turn);
  free(s);
}

/* ---- events ---- */

acx_status_t acx_event_record(acx_device_t *dev, uint32_t stream, acx_event_t **event, int64_t timeout_ns) {
  static const char fn[] = "acx_event_record";
  ACX_CHECK_NULL(dev);
  ACX_CHECK_NULL(event);
  *event = NULL;
  ACXCHECK(check_stream(dev, fn, stream));
  acx_event_t *ev = calloc(1, sizeof *ev);
  if (!ev) return ACX_ERR_NO_MEMORY;
  pthread_mutex_lock(&dev->event_lock);
  ev->id = dev->n_free_events ? dev->free_events[--dev->n_free_events] : dev->next_event_id++;
  pthread_mutex_unlock(&dev->event_lock);
  ev->dev = dev;
  acxi_device_hold(dev);
  acxi_cmd_t cmd = {.op = ACXI_OP_EVENT_RECORD, .stream = stream, .arg = {ev->id}};
  acx_status_t st = acxi_device_call(dev, &cmd, NULL, 0, 0, -1, timeout_ns, NULL);
  if (st != ACX_OK) {
    acx_event_destroy(ev);
    return st;
  }
  ev->generation = cmd.generation;
  *event = ev;
  return ACX_OK;
}

acx_status_t acx_stream_wait_event(acx_device_t *dev, uint32_t stream, acx_event_t *event, int64_t timeout_ns) {
  static const char fn[] = "acx_stream_wait_event";
  ACX_CHECK_NULL(dev);
  ACX_CHECK_NULL(event);
  ACX_CHECK_ARG(event->dev == dev, "%s: argument 'event' belongs to another device", fn);
  ACXCHECK(check_stream(dev, fn, stream));
  uint64_t gen = atomic_load_explicit(&dev->generation, memory_order_relaxed);
  if (event->generation != gen) {
    ACX_WARN(BUFFER, "%s: argument 'event' is from device generation %" PRIu64 ", the device is at %" PRIu64, fn,
             event->generation, gen);
    return ACX_ERR_STALE_BUFFER;
  }
  acxi_cmd_t cmd = {.op = ACXI_OP_STREAM_WAIT, .stream = stream, .arg = {event->id}};
  acx_status_t st = acxi_device_call(dev, &cmd, NULL, 0, 0, -1, timeout_ns, NULL);
  if (st == ACX_OK && cmd.generation != event->generation) return ACX_ERR_STALE_BUFFER;
  return st;
}

void acx_event_destroy(acx_event_t *event) {
  if (!event) return;
  acx_device_t *dev = event->dev;
  pthread_mutex_lock(&dev->event_lock);
  if (dev->n_free_events == dev->cap_free_events) {
    int cap = dev->cap_free_events ? 2 * dev->cap_free_events : 16;
    uint64_t *f = realloc(dev->free_events, (size_t)cap * sizeof *f);
    if (f) {
      dev->free_events = f;
      dev->cap_free_events = cap;
    }
  }
  if (dev->n_free_events < dev->cap_free_events) dev->free_events[dev->n_free_events++] = event->id;
  pthread_mutex_unlock(&dev->event_lock);
  acxi_device_release(dev);
  free(event);
}
