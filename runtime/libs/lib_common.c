/* Rank side of every library context: the context actor (a child of the DeviceActor), argument
 * validation shared by the libraries, and submission through a per-context arena of descriptor
 * slots in host memory shared with the executor. No CUDA header: this runs in the rank. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/libs/lib_internal.h"
#include "runtime/base/clock.h"
#include "runtime/device/buffer.h"
#include "runtime/device/device_internal.h"
#include "runtime/base/log.h"

/* Descriptor slots per context: how many of its requests may be outstanding before a new one
 * waits for the oldest. 256 keeps a deep pipeline (each request is large work) in 160 KiB. */
#define ARENA_SLOTS 256u
#define SLOT_BYTES ((sizeof(acxk_desc_t) + 63u) & ~(size_t)63u)

struct acxk_lib_ctx {
  acx_device_t *dev; /* held */
  acx_lib_id_t lib;
  uint32_t stream;
  int64_t timeout_ns;
  int host_kind;
  acx_ref_t actor;
  char name[64];

  acx_host_mem_t *arena;
  uint8_t *base;
  pthread_mutex_t lock;
  acx_future_t *slot_future[ARENA_SLOTS]; /* held while the slot's request may be outstanding */
  uint32_t free_stack[ARENA_SLOTS];
  uint32_t n_free;
  uint32_t order[ARENA_SLOTS]; /* slots in submission order: the oldest first */
  uint32_t o_head, o_count;
};

/* ------------------------------------------------------------------------------------------ */
/* the context actor                                                                          */

/* The actor is the context's place in the supervision tree (/user/<device>/<name>) and the one
 * that hears about executor restarts. Requests do not pass through its mailbox: validation is a
 * pure function of the request, so it runs in the caller's thread and the command goes straight
 * into the ring, as the device layer's own requests do (runtime/device/submit.c) -- a mailbox hop would add two
 * thread hand-offs to every request for no decision the actor could make better. */
typedef struct lib_actor {
  acx_lib_id_t lib;
  uint64_t restarts_seen;
} lib_actor_t;

static acx_status_t lib_actor_init(acx_ctx_t *ctx, void *state, const void *arg) {
  (void)ctx;
  lib_actor_t *a = state;
  a->lib = (acx_lib_id_t)(uintptr_t)arg;
  return ACX_OK;
}

static acx_status_t lib_actor_receive(acx_ctx_t *ctx, void *state, const acx_msg_t *msg) {
  (void)ctx;
  lib_actor_t *a = state;
  if (msg->len == sizeof(acx_device_event_t) && msg->type == ACX_MSG_DEVICE_RESTARTED) {
    acx_device_event_t ev;
    memcpy(&ev, msg->data, sizeof ev);
    a->restarts_seen++;
    /* Nothing to redo here: the new executor creates the library's handles on first use, and
     * buffers of the old generation are refused by validation (ACX_ERR_STALE_BUFFER). */
    ACX_INFO(LIB, "%s context: executor generation %" PRIu64 " replaced by %" PRIu64 " (%s); library handles "
             "are recreated on first use", acx_lib_name(a->lib), ev.old_generation, ev.new_generation, ev.reason);
  } else if (msg->len == sizeof(acx_device_event_t) &&
             (msg->type == ACX_MSG_DEVICE_UNAVAILABLE || msg->type == ACX_MSG_DEVICE_FATAL)) {
    ACX_WARN(LIB, "%s context: its device is %s; requests will fail", acx_lib_name(a->lib),
             msg->type == ACX_MSG_DEVICE_FATAL ? "fatal" : "unavailable");
  }
  return ACX_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* create / destroy                                                                           */

acx_status_t acxk_lib_ctx_create(acx_device_t *dev, const acx_lib_config_t *cfg, acx_lib_id_t lib,
                                 acxk_lib_ctx_t **out) {
  static _Atomic uint32_t counter;
  *out = NULL; /* dev: checked by each acx_<lib>_create, under its own name */
  acx_lib_config_t c = ACX_LIB_CONFIG_INIT;
  if (cfg) {
    ACX_CHECK_ARG(cfg->size >= sizeof(acx_lib_config_t) - sizeof(cfg->name) && cfg->size <= 4096,
                  "%s context: argument 'cfg' has size %zu; initialise it with ACX_LIB_CONFIG_INIT", acx_lib_name(lib),
                  cfg->size);
    c = *cfg;
  }
  acx_status_t st = acxi_device_state_status(dev);
  if (st == ACX_ERR_INVALID_STATE) {
    ACX_WARN(LIB, "%s context: argument 'dev' is closed", acx_lib_name(lib));
    return st;
  }
  ACX_CHECK_ARG(c.stream < (uint32_t)dev->streams, "%s context: argument 'cfg->stream'=%u is not in [0, %d)",
                acx_lib_name(lib), c.stream, dev->streams);
  acxk_lib_ctx_t *x = calloc(1, sizeof *x);
  if (!x) return ACX_ERR_NO_MEMORY;
  x->lib = lib;
  x->stream = c.stream;
  x->timeout_ns = acxi_device_timeout(dev, c.timeout_ns);
  x->host_kind = dev->kind_id == ACXI_KIND_HOST;
  if (c.name && *c.name) snprintf(x->name, sizeof x->name, "%s", c.name);
  else snprintf(x->name, sizeof x->name, "%s-%u", acx_lib_name(lib), atomic_fetch_add(&counter, 1) + 1);
  if (pthread_mutex_init(&x->lock, NULL) != 0) {
    free(x);
    return ACX_ERR_SYSTEM;
  }
  ACXCHECKGOTO(acx_host_alloc(dev, ARENA_SLOTS * SLOT_BYTES, &x->arena), st, err_destroy_lock);
  void *p;
  size_t bytes;
  ACXCHECKGOTO(acx_host_mem_ptr(x->arena, &p, &bytes), st, err_free_arena);
  x->base = p;
  for (uint32_t i = 0; i < ARENA_SLOTS; i++) x->free_stack[i] = ARENA_SLOTS - 1 - i;
  x->n_free = ARENA_SLOTS;

  acx_ref_t parent;
  ACXCHECKGOTO(acx_device_actor(dev, &parent), st, err_free_arena);
  acx_props_t props = ACX_PROPS_INIT;
  props.state_size = sizeof(lib_actor_t);
  props.init = lib_actor_init;
  props.receive = lib_actor_receive;
  props.arg = (const void *)(uintptr_t)lib;
  ACXCHECKGOTO(acx_spawn(dev->sys, parent, &props, x->name, &x->actor), st, err_free_arena);
  ACXCHECKGOTO(acx_device_watch(dev, x->actor), st, err_stop_actor);
  acxi_device_hold(dev);
  x->dev = dev;
  ACX_INFO(LIB, "%s context '%s' on stream %u%s", acx_lib_name(lib), x->name, x->stream,
           x->host_kind ? " (host kind: requests are validated, then refused)" : "");
  *out = x;
  return ACX_OK;

err_stop_actor:
  acx_stop(x->actor);
  acx_ref_release(x->actor);
err_free_arena:
  acx_host_free(x->arena);
err_destroy_lock:
  pthread_mutex_destroy(&x->lock);
  free(x);
  return st;
}

/* Releases the slots whose requests have completed, oldest first; with wait_until > 0 waits for
 * the oldest until then when none is free. Caller holds x->lock. */
static acx_status_t reclaim(acxk_lib_ctx_t *x, int64_t wait_until) {
  while (x->o_count > 0) {
    uint32_t s = x->order[x->o_head];
    acx_future_t *f = x->slot_future[s];
    acx_status_t st = acx_future_result(f, NULL, 0, NULL);
    if (st == ACX_ERR_TIMEOUT) {
      if (x->n_free > 0 || wait_until <= 0) return ACX_OK;
      int64_t left = wait_until - acxi_now_ns();
      if (left <= 0) return ACX_ERR_TIMEOUT;
      /* Waiting under the lock is what we want: every other submitter needs a slot too. */
      if (acx_future_wait(f, left, NULL, 0, NULL) == ACX_ERR_TIMEOUT) return ACX_ERR_TIMEOUT;
    }
    acx_future_release(f);
    x->slot_future[s] = NULL;
    x->free_stack[x->n_free++] = s;
    x->o_head = (x->o_head + 1) % ARENA_SLOTS;
    x->o_count--;
  }
  return ACX_OK;
}

acx_status_t acxk_lib_ctx_destroy(acxk_lib_ctx_t *x) {
  if (!x) return ACX_OK;
  acx_status_t st = ACX_OK;
  pthread_mutex_lock(&x->lock);
  int64_t deadline = acxi_deadline(x->timeout_ns);
  while (x->o_count > 0) {
    uint32_t s = x->order[x->o_head];
    int64_t left = deadline - acxi_now_ns();
    if (acx_future_wait(x->slot_future[s], left > 0 ? left : 0, NULL, 0, NULL) == ACX_ERR_TIMEOUT) {
      st = ACX_ERR_TIMEOUT;
      break;
    }
    acx_future_release(x->slot_future[s]);
    x->slot_future[s] = NULL;
    x->o_head = (x->o_head + 1) % ARENA_SLOTS;
    x->o_count--;
  }
  pthread_mutex_unlock(&x->lock);
  acx_stop(x->actor);
  acx_ref_release(x->actor);
  if (st != ACX_OK) {
    /* The executor may still read a descriptor: leave the arena mapped rather than pull it away. */
    ACX_WARN(LIB, "%s context '%s': %u requests still outstanding after %" PRId64 " ms; its descriptor arena is "
             "leaked", acx_lib_name(x->lib), x->name, x->o_count, x->timeout_ns / 1000000);
    for (uint32_t i = 0; i < ARENA_SLOTS; i++)
      if (x->slot_future[i]) acx_future_release(x->slot_future[i]);
  } else {
    acx_host_free(x->arena);
  }
  acxi_device_release(x->dev);
  pthread_mutex_destroy(&x->lock);
  free(x);
  return st;
}

acx_device_t *acxk_lib_ctx_device(const acxk_lib_ctx_t *x) { return x->dev; }
int acxk_lib_ctx_host_kind(const acxk_lib_ctx_t *x) { return x->host_kind; }

/* ------------------------------------------------------------------------------------------ */
/* validation                                                                                 */

void acxk_req_init(acxk_req_t *req, uint32_t op) {
  memset(req, 0, sizeof *req);
  req->d.magic = ACXK_DESC_MAGIC;
  req->d.op = op;
}

acx_status_t acxk_lib_check_buf(const acxk_lib_ctx_t *x, const char *fn, const char *name, acx_buffer_t *b,
                                int optional, uint32_t dtype_mask) {
  if (!b && optional) return ACX_OK;
  ACXCHECK(acxi_buffer_check_on(fn, name, b, x->dev, "the context's"));
  if (dtype_mask && !(dtype_mask & ACXK_DT(b->dtype))) {
    ACX_WARN(LIB, "%s: argument '%s' has dtype %s, which this operation does not take here", fn, name,
             acx_dtype_name(b->dtype));
    return ACX_ERR_BAD_DTYPE;
  }
  return ACX_OK;
}

/* a * b + c without overflow, all non-negative. */
static int mul_add(uint64_t a, uint64_t b, uint64_t c, uint64_t *out) {
  if (a && b > (UINT64_MAX - c) / a) return -1;
  *out = a * b + c;
  return 0;
}

static acx_status_t set_operand(acxk_req_t *req, int idx, const char *fn, const char *name, acx_buffer_t *buf,
                                size_t off, uint64_t elems, int writes) {
  size_t es = acx_dtype_size(buf->dtype);
  uint64_t bytes;
  if (mul_add(elems, es, 0, &bytes) != 0 || off > UINT64_MAX - bytes) {
    ACX_WARN(LIB, "%s: the extent of argument '%s' overflows", fn, name);
    return ACX_ERR_OVERFLOW;
  }
  if (off % es) {
    ACX_WARN(LIB, "%s: offset %zu of argument '%s' is not a multiple of its element size %zu", fn, off, name, es);
    return ACX_ERR_INVALID_ARG;
  }
  if (off + bytes > buf->bytes) {
    ACX_WARN(LIB, "%s: argument '%s' needs bytes [%zu, +%" PRIu64 ") but the buffer has %zu", fn, name, off, bytes,
             buf->bytes);
    return ACX_ERR_OUT_OF_RANGE;
  }
  req->d.opnd[idx] = (acxk_operand_t){.id = buf->id, .off = off, .extent = bytes, .writes = writes != 0,
                                      .dtype = (uint32_t)buf->dtype};
  req->bufs[idx] = buf;
  req->names[idx] = name;
  if ((uint32_t)idx + 1 > req->d.nops) req->d.nops = (uint32_t)idx + 1;
  return ACX_OK;
}

acx_status_t acxk_req_matrix(acxk_req_t *req, int idx, const char *fn, const char *name, acx_buffer_t *buf,
                             size_t off, int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride,
                             int writes) {
  if (rows < 0 || cols < 0) {
    ACX_WARN(LIB, "%s: argument '%s' would be %" PRId64 " x %" PRId64 ": dimensions must be >= 0", fn, name, rows, cols);
    return ACX_ERR_INVALID_ARG;
  }
  if (ld < (rows > 1 ? rows : 1)) {
    ACX_WARN(LIB, "%s: leading dimension %" PRId64 " of '%s' is less than its %" PRId64 " rows (column-major)", fn, ld,
             name, rows);
    return ACX_ERR_INVALID_ARG;
  }
  if (batch < 1 || (batch > 1 && stride < 0)) {
    ACX_WARN(LIB, "%s: argument '%s': batch %" PRId64 " must be >= 1 and its stride %" PRId64 " >= 0", fn, name, batch,
             stride);
    return ACX_ERR_INVALID_ARG;
  }
  uint64_t one = 0, all = 0;
  if (rows > 0 && cols > 0) {
    if (mul_add((uint64_t)cols - 1, (uint64_t)ld, (uint64_t)rows, &one) != 0 ||
        mul_add((uint64_t)batch - 1, (uint64_t)(batch > 1 ? stride : 0), one, &all) != 0) {
      ACX_WARN(LIB, "%s: the extent of argument '%s' overflows", fn, name);
      return ACX_ERR_OVERFLOW;
    }
  }
  return set_operand(req, idx, fn, name, buf, off, all, writes);
}

acx_status_t acxk_req_vector(acxk_req_t *req, int idx, const char *fn, const char *name, acx_buffer_t *buf,
                             size_t off, int64_t n, int64_t inc, int writes) {
  if (n < 0 || inc == 0 || inc == INT64_MIN) {
    ACX_WARN(LIB, "%s: argument '%s': n = %" PRId64 " must be >= 0 and its increment %" PRId64 " non-zero", fn, name, n,
             inc);
    return ACX_ERR_INVALID_ARG;
  }
  uint64_t elems = 0;
  if (n > 0 && mul_add((uint64_t)n - 1, (uint64_t)(inc < 0 ? -inc : inc), 1, &elems) != 0) {
    ACX_WARN(LIB, "%s: the extent of argument '%s' overflows", fn, name);
    return ACX_ERR_OVERFLOW;
  }
  return set_operand(req, idx, fn, name, buf, off, elems, writes);
}

acx_status_t acxk_req_span(acxk_req_t *req, int idx, const char *fn, const char *name, acx_buffer_t *buf,
                           size_t off, uint64_t bytes, int writes) {
  size_t es = acx_dtype_size(buf->dtype);
  if (bytes % es) {
    ACX_WARN(LIB, "%s: %" PRIu64 " bytes of argument '%s' are not whole %s elements", fn, bytes, name,
             acx_dtype_name(buf->dtype));
    return ACX_ERR_INVALID_ARG;
  }
  return set_operand(req, idx, fn, name, buf, off, bytes / es, writes);
}

acx_status_t acxk_req_disjoint(const acxk_req_t *req, const char *fn, int i, int j) {
  const acxk_operand_t *a = &req->d.opnd[i], *b = &req->d.opnd[j];
  if (!a->id || !b->id || a->id != b->id || !a->extent || !b->extent) return ACX_OK;
  if (a->off < b->off + b->extent && b->off < a->off + a->extent) {
    ACX_WARN(LIB, "%s: arguments '%s' and '%s' overlap in one buffer", fn, req->names[i], req->names[j]);
    return ACX_ERR_INVALID_ARG;
  }
  return ACX_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* submission                                                                                 */

static void fill_result(acx_status_t st, const acxi_cpl_t *c, size_t len, acx_lib_result_t *r) {
  memset(r, 0, sizeof *r);
  r->status = st;
  if (len < sizeof *c) return;
  r->library = (acx_lib_id_t)ACXK_CPL_LIB(c->value[1]);
  r->lib_code = c->lib_code;
  r->bits = c->value[0];
  switch (ACXK_CPL_DTYPE(c->value[1])) {
    case ACX_DTYPE_F64: memcpy(&r->value, &c->value[0], sizeof r->value); break;
    case ACX_DTYPE_F32: {
      float f;
      uint32_t u = (uint32_t)c->value[0];
      memcpy(&f, &u, sizeof f);
      r->value = f;
      break;
    }
    case ACX_DTYPE_F16: { /* IEEE binary16 -> double */
      uint32_t h = (uint32_t)c->value[0] & 0xffffu, e = (h >> 10) & 0x1f, m = h & 0x3ff;
      double v = e == 0 ? m * 0x1p-24 : e == 31 ? (m ? 0.0 / 0.0 : 1.0 / 0.0) : (1024 + m) * 0x1p-25 * (double)(1u << e);
      r->value = (h & 0x8000u) ? -v : v;
      break;
    }
    case ACX_DTYPE_BF16: {
      uint32_t u = ((uint32_t)c->value[0] & 0xffffu) << 16;
      float f;
      memcpy(&f, &u, sizeof f);
      r->value = f;
      break;
    }
    case ACX_DTYPE_I32: r->value = (double)(int32_t)c->value[0]; break;
    case ACX_DTYPE_I64: r->value = (double)(int64_t)c->value[0]; break;
    default: break;
  }
}

acx_status_t acx_lib_result(acx_future_t *future, acx_lib_result_t *result) {
  ACX_CHECK_NULL(future);
  ACX_CHECK_NULL(result);
  acxi_cpl_t c = {0};
  size_t len = 0;
  acx_status_t st = acx_future_result(future, &c, sizeof c, &len);
  if (st == ACX_ERR_TIMEOUT && len == 0) {
    /* Not completed yet, unless it completed with ACX_ERR_TIMEOUT itself and no payload: both
     * read the same, and both mean "no result". */
    return ACX_ERR_TIMEOUT;
  }
  fill_result(st, &c, len, result);
  return ACX_OK;
}

acx_status_t acxk_lib_refuse_host(const acxk_lib_ctx_t *x, const char *fn) {
  if (!x->host_kind) return ACX_OK;
  ACX_WARN(LIB, "%s: the request is valid, but %s needs a CUDA device and this one is of the host kind", fn,
           acx_lib_name(x->lib));
  return ACX_ERR_NOT_SUPPORTED;
}

acx_status_t acxk_lib_submit(acxk_lib_ctx_t *x, const char *fn, acxk_req_t *req, acx_future_t **done,
                             acx_lib_result_t *result) {
  if (done) *done = NULL;
  ACXCHECK(acxk_lib_refuse_host(x, fn));
  acxi_bufarg_t bufs[ACXK_MAX_OPERANDS];
  int nb = 0;
  for (uint32_t i = 0; i < req->d.nops; i++)
    if (req->bufs[i]) bufs[nb++] = (acxi_bufarg_t){.buf = req->bufs[i], .name = req->names[i]};

  int64_t deadline = acxi_deadline(x->timeout_ns);
  pthread_mutex_lock(&x->lock);
  acx_status_t st = reclaim(x, deadline);
  if (st != ACX_OK || x->n_free == 0) {
    pthread_mutex_unlock(&x->lock);
    ACX_WARN(LIB, "%s: %u requests of context '%s' outstanding and the oldest did not finish before the deadline", fn,
             ARENA_SLOTS, x->name);
    return ACX_ERR_QUEUE_FULL;
  }
  uint32_t slot = x->free_stack[--x->n_free];
  /* The slot is ours until it is recorded below with its future: fill it outside the lock. */
  pthread_mutex_unlock(&x->lock);
  memcpy(x->base + (size_t)slot * SLOT_BYTES, &req->d, sizeof req->d);
  acxi_cmd_t cmd = {.op = req->d.op, .stream = x->stream};
  cmd.arg[ACXK_CMD_REGION] = x->arena->id;
  cmd.arg[ACXK_CMD_OFFSET] = (uint64_t)slot * SLOT_BYTES;
  acx_future_t *f = NULL;
  st = acxi_device_submit(x->dev, &cmd, bufs, nb, 0, -1, deadline, &f);
  pthread_mutex_lock(&x->lock);
  if (st != ACX_OK) {
    x->free_stack[x->n_free++] = slot;
    pthread_mutex_unlock(&x->lock);
    return st;
  }
  acx_future_hold(f); /* the slot's reference */
  x->slot_future[slot] = f;
  x->order[(x->o_head + x->o_count) % ARENA_SLOTS] = slot;
  x->o_count++;
  pthread_mutex_unlock(&x->lock);
  if (done) {
    *done = f;
    return ACX_OK;
  }
  acxi_cpl_t c = {0};
  size_t len = 0;
  int64_t left = deadline - acxi_now_ns();
  st = acx_future_wait(f, left > 0 ? left : 0, &c, sizeof c, &len);
  if (st == ACX_ERR_TIMEOUT && len == 0)
    ACX_WARN(LIB, "%s: no reply within %" PRId64 " ms; the request stays queued", fn, x->timeout_ns / 1000000);
  if (result) fill_result(st, &c, len, result);
  if (st != ACX_OK && len == sizeof c && ACXK_CPL_LIB(c.value[1]) != ACX_LIB_NONE)
    ACX_WARN(LIB, "%s failed: %s (%s code %d)", fn, acx_status_name(st), acx_lib_name((acx_lib_id_t)ACXK_CPL_LIB(c.value[1])),
             c.lib_code);
  acx_future_release(f);
  return st;
}
