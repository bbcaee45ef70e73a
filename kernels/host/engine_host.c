/* The host device kind: an engine whose "device memory" is host memory. Every command of cmd.h
 * runs synchronously on the executor thread with the same validation the CUDA engine does, so
 * the whole device layer (rings, supervision, buffers, generations) runs without a GPU.
 * Shareable memory is a memfd; another executor maps it through /proc/<pid>/fd/<fd>. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>

#include "acx/coll.h" /* acx_redop_t, acx_dtype_t (acx/device.h) */
#include "kernels/exec/engine.h"
#include "runtime/base/clock.h"
#include "runtime/base/half.h"
#include "runtime/base/log.h"
#include "runtime/base/param.h"
#include "runtime/proto/shm.h"

typedef struct hbuf {
  uint64_t id; /* 0: empty slot; TOMB: deleted */
  void *ptr;
  uint64_t bytes;
  uint32_t kind; /* acxi_mem_kind_t */
  /* ACXI_MEM_SHAREABLE: ptr is a MAP_SHARED mapping of `bytes`. An export owns its memfd (fd,
   * and its identity for the handle); an import (imported = 1) keeps only the mapping, which
   * keeps the memory alive after the exporter freed it. */
  int imported;
  int fd;
  uint64_t st_dev, st_ino;
} hbuf_t;

#define TOMB UINT64_MAX

typedef struct region {
  uint64_t id;
  void *addr;
  uint64_t bytes;
} region_t;

struct acxi_engine {
  acxi_engine_params_t params;
  acxi_complete_fn complete;
  void *sink;
  hbuf_t *bufs; /* open addressing, linear probing; cap is a power of two */
  size_t cap, used; /* used counts live entries and tombstones */
  region_t *regions;
  size_t n_regions, cap_regions;
  uint64_t *events; /* recorded event ids (a set; events are reused, never destroyed) */
  size_t n_events, cap_events;
  int poisoned;
  void *ext_state[ACXI_EXT_MAX];
};

static const acxi_engine_api_t host_api;

/* ---- buffer table ---- */

static inline size_t slot_of(uint64_t id, size_t cap) {
  return (size_t)((id * 0x9e3779b97f4a7c15ull) >> 17) & (cap - 1);
}

static hbuf_t *buf_find(acxi_engine_t *e, uint64_t id) {
  if (id == 0 || id == TOMB || !e->cap) return NULL;
  for (size_t i = slot_of(id, e->cap), n = 0; n < e->cap; i = (i + 1) & (e->cap - 1), n++) {
    if (e->bufs[i].id == id) return &e->bufs[i];
    if (e->bufs[i].id == 0) return NULL;
  }
  return NULL;
}

static acx_status_t buf_grow(acxi_engine_t *e) {
  size_t cap = e->cap ? e->cap * 2 : 256;
  hbuf_t *nb = calloc(cap, sizeof *nb);
  if (!nb) return ACX_ERR_NO_MEMORY;
  size_t used = 0;
  for (size_t i = 0; i < e->cap; i++) {
    hbuf_t *b = &e->bufs[i];
    if (b->id == 0 || b->id == TOMB) continue;
    size_t j = slot_of(b->id, cap);
    while (nb[j].id) j = (j + 1) & (cap - 1);
    nb[j] = *b;
    used++;
  }
  free(e->bufs);
  e->bufs = nb;
  e->cap = cap;
  e->used = used;
  return ACX_OK;
}

static acx_status_t buf_insert(acxi_engine_t *e, const hbuf_t *b) {
  if (2 * (e->used + 1) > e->cap) ACXCHECK(buf_grow(e));
  size_t i = slot_of(b->id, e->cap);
  while (e->bufs[i].id != 0 && e->bufs[i].id != TOMB) i = (i + 1) & (e->cap - 1);
  if (e->bufs[i].id == 0) e->used++;
  e->bufs[i] = *b;
  return ACX_OK;
}

/* Gives back a live entry's memory. */
static void hbuf_release(hbuf_t *b) {
  if (b->kind != ACXI_MEM_SHAREABLE) {
    free(b->ptr);
    return;
  }
  munmap(b->ptr, (size_t)b->bytes);
  if (!b->imported) close(b->fd);
}

/* ---- validation helpers: each logs the argument it rejects ---- */

static acx_status_t get_buf(acxi_engine_t *e, const acxi_cmd_t *c, int i, hbuf_t **out) {
  hbuf_t *b = buf_find(e, c->buf[i]);
  if (!b) {
    ACX_WARN(EXEC, "op %u request %" PRIu64 ": buf[%d]=%" PRIu64 " is not a buffer of this executor", c->op,
             c->req_id, i, c->buf[i]);
    return ACX_ERR_UNKNOWN_BUFFER;
  }
  *out = b;
  return ACX_OK;
}

static acx_status_t check_range(const acxi_cmd_t *c, const char *what, uint64_t off, uint64_t bytes,
                                uint64_t size) {
  if (off > UINT64_MAX - bytes) {
    ACX_WARN(EXEC, "op %u request %" PRIu64 ": %s offset %" PRIu64 " + bytes %" PRIu64 " overflows", c->op,
             c->req_id, what, off, bytes);
    return ACX_ERR_OVERFLOW;
  }
  if (off + bytes > size) {
    ACX_WARN(EXEC, "op %u request %" PRIu64 ": %s range [%" PRIu64 ", +%" PRIu64 ") exceeds its %" PRIu64 " bytes",
             c->op, c->req_id, what, off, bytes, size);
    return ACX_ERR_OUT_OF_RANGE;
  }
  return ACX_OK;
}

static acx_status_t check_stream(acxi_engine_t *e, const acxi_cmd_t *c, int allow_all) {
  if (c->stream < (uint32_t)e->params.streams || (allow_all && c->stream == ACXI_STREAM_ALL)) return ACX_OK;
  ACX_WARN(EXEC, "op %u request %" PRIu64 ": stream %u is not in [0, %d)", c->op, c->req_id, c->stream,
           e->params.streams);
  return ACX_ERR_INVALID_ARG;
}

static acx_status_t get_region(acxi_engine_t *e, const acxi_cmd_t *c, region_t **out) {
  for (size_t i = 0; i < e->n_regions; i++)
    if (e->regions[i].id == c->arg[0]) {
      *out = &e->regions[i];
      return ACX_OK;
    }
  ACX_WARN(EXEC, "op %u request %" PRIu64 ": arg[0]=%" PRIu64 " is not a registered host region", c->op,
           c->req_id, c->arg[0]);
  return ACX_ERR_INVALID_ARG;
}

static int event_known(acxi_engine_t *e, uint64_t id) {
  for (size_t i = 0; i < e->n_events; i++)
    if (e->events[i] == id) return 1;
  return 0;
}

/* ---- commands ---- */

/* A memfd mapped MAP_SHARED, with the identity an importer checks (fstat's device and inode). */
static acx_status_t alloc_shareable(const acxi_cmd_t *c, hbuf_t *b) {
  acxi_shm_t shm;
  acx_status_t st = acxi_shm_create("acx-shareable", (size_t)c->bytes, &shm);
  if (st != ACX_OK) {
    ACX_WARN(EXEC, "ALLOC request %" PRIu64 ": %" PRIu64 " bytes of shareable memory not available: %s", c->req_id,
             c->bytes, acx_status_name(st));
    return st == ACX_ERR_NO_MEMORY ? ACX_ERR_DEVICE_OOM : st;
  }
  struct stat sb;
  if (fstat(shm.fd, &sb) != 0) {
    ACX_WARN(EXEC, "ALLOC request %" PRIu64 ": fstat of the shareable memfd failed: %s", c->req_id, strerror(errno));
    acxi_shm_destroy(&shm);
    return ACX_ERR_SYSTEM;
  }
  b->ptr = shm.addr;
  b->fd = shm.fd;
  b->st_dev = (uint64_t)sb.st_dev;
  b->st_ino = (uint64_t)sb.st_ino;
  return ACX_OK;
}

static acx_status_t do_alloc(acxi_engine_t *e, const acxi_cmd_t *c) {
  if (c->buf[0] == 0 || c->buf[0] == TOMB || buf_find(e, c->buf[0])) {
    ACX_WARN(EXEC, "ALLOC request %" PRIu64 ": buf[0]=%" PRIu64 " is reserved or already in use", c->req_id, c->buf[0]);
    return ACX_ERR_INVALID_ARG;
  }
  if (c->arg[0] != ACXI_MEM_DEVICE && c->arg[0] != ACXI_MEM_MANAGED && c->arg[0] != ACXI_MEM_SHAREABLE) {
    ACX_WARN(EXEC, "ALLOC request %" PRIu64 ": arg[0]=%" PRIu64 " is not a memory kind", c->req_id, c->arg[0]);
    return ACX_ERR_INVALID_ARG;
  }
  if (c->bytes == 0 || c->bytes > UINT64_MAX - 63 || c->bytes + 63 > SIZE_MAX) {
    ACX_WARN(EXEC, "ALLOC request %" PRIu64 ": bytes=%" PRIu64 " is zero or too large", c->req_id, c->bytes);
    return c->bytes == 0 ? ACX_ERR_INVALID_ARG : ACX_ERR_OVERFLOW;
  }
  /* The host kind's "device memory" is this machine's RAM: more than it has is refused before it
   * is tried, as the cuda kind refuses more than the GPU's free memory (an allocator asked for
   * petabytes may abort rather than fail, e.g. under a sanitizer). */
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0 && c->bytes > (uint64_t)pages * (uint64_t)page) {
    ACX_WARN(EXEC, "ALLOC request %" PRIu64 ": %" PRIu64 " bytes exceed this machine's %" PRIu64 " bytes of memory",
             c->req_id, c->bytes, (uint64_t)pages * (uint64_t)page);
    return ACX_ERR_DEVICE_OOM;
  }
  hbuf_t b = {.id = c->buf[0], .bytes = c->bytes, .kind = (uint32_t)c->arg[0], .fd = -1};
  if (b.kind == ACXI_MEM_SHAREABLE) {
    ACXCHECK(alloc_shareable(c, &b));
  } else {
    b.ptr = aligned_alloc(64, (size_t)((c->bytes + 63) & ~(uint64_t)63));
    if (!b.ptr) {
      ACX_WARN(EXEC, "ALLOC request %" PRIu64 ": %" PRIu64 " bytes of host memory not available", c->req_id, c->bytes);
      return ACX_ERR_DEVICE_OOM;
    }
  }
  acx_status_t st = buf_insert(e, &b);
  if (st != ACX_OK) hbuf_release(&b);
  return st;
}

static acx_status_t do_free(acxi_engine_t *e, const acxi_cmd_t *c) {
  hbuf_t *b;
  ACXCHECK(get_buf(e, c, 0, &b));
  hbuf_release(b);
  memset(b, 0, sizeof *b);
  b->id = TOMB;
  return ACX_OK;
}

static acx_status_t do_fill(acxi_engine_t *e, const acxi_cmd_t *c) {
  hbuf_t *b;
  ACXCHECK(check_stream(e, c, 0));
  ACXCHECK(get_buf(e, c, 0, &b));
  uint64_t w = c->arg[1];
  if (w != 1 && w != 2 && w != 4 && w != 8) {
    ACX_WARN(EXEC, "FILL request %" PRIu64 ": width arg[1]=%" PRIu64 " is not 1, 2, 4 or 8", c->req_id, w);
    return ACX_ERR_INVALID_ARG;
  }
  ACXCHECK(check_range(c, "buf[0]", c->off[0], c->bytes, b->bytes));
  if (c->off[0] % w || c->bytes % w) {
    ACX_WARN(EXEC, "FILL request %" PRIu64 ": offset %" PRIu64 " and bytes %" PRIu64 " must be multiples of width %"
             PRIu64, c->req_id, c->off[0], c->bytes, w);
    return ACX_ERR_INVALID_ARG;
  }
  unsigned char *p = (unsigned char *)b->ptr + c->off[0];
  if (w == 1) {
    memset(p, (int)(c->arg[0] & 0xff), c->bytes);
    return ACX_OK;
  }
  unsigned char pat[8];
  uint64_t v = c->arg[0];
  memcpy(pat, &v, 8); /* little-endian: the low `w` bytes are the pattern */
  for (uint64_t i = 0; i < c->bytes; i += w) memcpy(p + i, pat, w);
  return ACX_OK;
}

static acx_status_t do_copy(acxi_engine_t *e, const acxi_cmd_t *c) {
  hbuf_t *dst = NULL, *src = NULL;
  region_t *r = NULL;
  ACXCHECK(check_stream(e, c, 0));
  switch (c->op) {
  case ACXI_OP_COPY_H2D:
    ACXCHECK(get_buf(e, c, 0, &dst));
    ACXCHECK(get_region(e, c, &r));
    ACXCHECK(check_range(c, "buf[0]", c->off[0], c->bytes, dst->bytes));
    ACXCHECK(check_range(c, "host region", c->off[1], c->bytes, r->bytes));
    memcpy((char *)dst->ptr + c->off[0], (char *)r->addr + c->off[1], c->bytes);
    return ACX_OK;
  case ACXI_OP_COPY_D2H:
    ACXCHECK(get_buf(e, c, 1, &src));
    ACXCHECK(get_region(e, c, &r));
    ACXCHECK(check_range(c, "buf[1]", c->off[1], c->bytes, src->bytes));
    ACXCHECK(check_range(c, "host region", c->off[0], c->bytes, r->bytes));
    memcpy((char *)r->addr + c->off[0], (char *)src->ptr + c->off[1], c->bytes);
    return ACX_OK;
  default: /* D2D */
    ACXCHECK(get_buf(e, c, 0, &dst));
    ACXCHECK(get_buf(e, c, 1, &src));
    ACXCHECK(check_range(c, "buf[0]", c->off[0], c->bytes, dst->bytes));
    ACXCHECK(check_range(c, "buf[1]", c->off[1], c->bytes, src->bytes));
    memmove((char *)dst->ptr + c->off[0], (char *)src->ptr + c->off[1], c->bytes);
    return ACX_OK;
  }
}

/* The flag of a WAIT_VALUE or WRITE_VALUE: a 4-aligned word inside a registered host region. */
static acx_status_t get_flag(acxi_engine_t *e, const acxi_cmd_t *c, _Atomic uint32_t **flag) {
  region_t *r;
  ACXCHECK(check_stream(e, c, 0));
  ACXCHECK(get_region(e, c, &r));
  if (c->off[0] % 4 != 0 || c->off[0] > r->bytes || r->bytes - c->off[0] < 4) {
    ACX_WARN(EXEC, "op %u request %" PRIu64 ": flag offset off[0]=%" PRIu64 " is not a 4-aligned word inside host "
             "region %" PRIu64 " (%" PRIu64 " bytes)", c->op, c->req_id, c->off[0], c->arg[0], r->bytes);
    return ACX_ERR_INVALID_ARG;
  }
  if (c->arg[1] > UINT32_MAX) {
    ACX_WARN(EXEC, "op %u request %" PRIu64 ": flag value arg[1]=%" PRIu64 " exceeds 32 bits", c->op, c->req_id,
             c->arg[1]);
    return ACX_ERR_INVALID_ARG;
  }
  *flag = (_Atomic uint32_t *)(void *)((char *)r->addr + c->off[0]);
  return ACX_OK;
}

/* Everything runs on this thread, in order: a wait is this thread polling the word (written by
 * another process's executor or rank), yielding the core for the first 50 us, then napping
 * between looks (acxi_poll_nap: 20 us, longer as the wait lasts), until its deadline. */
static acx_status_t do_wait_value(acxi_engine_t *e, const acxi_cmd_t *c) {
  _Atomic uint32_t *flag;
  ACXCHECK(get_flag(e, c, &flag));
  int64_t limit = c->arg[2] ? (int64_t)(c->arg[2] > (uint64_t)INT64_MAX / 2 ? (uint64_t)INT64_MAX / 2 : c->arg[2])
                            : acxi_param_int("ACX_EXEC_TIMEOUT_MS") * 1000000;
  int64_t start = acxi_now_ns(), deadline = start + limit;
  uint32_t want = (uint32_t)c->arg[1];
  for (;;) {
    /* acquire: what the writer stored before its release store is visible once we see the value. */
    uint32_t v = atomic_load_explicit(flag, memory_order_acquire);
    if ((int32_t)(v - want) >= 0) return ACX_OK;
    int64_t now = acxi_now_ns();
    if (now >= deadline) {
      ACX_WARN(EXEC, "WAIT_VALUE request %" PRIu64 ": flag at host region %" PRIu64 " + %" PRIu64 " stayed at %u, "
               "below %u, for %" PRId64 " ms", c->req_id, c->arg[0], c->off[0], v, want, limit / 1000000);
      return ACX_ERR_COLL_TIMEOUT;
    }
    if (now - start < 50000) sched_yield();
    else acxi_poll_nap(now - start, 20000);
  }
}

static acx_status_t do_write_value(acxi_engine_t *e, const acxi_cmd_t *c) {
  _Atomic uint32_t *flag;
  ACXCHECK(get_flag(e, c, &flag));
  /* release: every earlier command's writes (done, on this thread) before the value. */
  atomic_store_explicit(flag, (uint32_t)c->arg[1], memory_order_release);
  return ACX_OK;
}

static acx_status_t do_event(acxi_engine_t *e, const acxi_cmd_t *c) {
  ACXCHECK(check_stream(e, c, 0));
  if (c->arg[0] == 0) {
    ACX_WARN(EXEC, "op %u request %" PRIu64 ": event id arg[0] is 0", c->op, c->req_id);
    return ACX_ERR_INVALID_ARG;
  }
  int known = event_known(e, c->arg[0]);
  if (c->op == ACXI_OP_STREAM_WAIT) {
    if (!known) {
      ACX_WARN(EXEC, "STREAM_WAIT request %" PRIu64 ": event %" PRIu64 " was never recorded", c->req_id, c->arg[0]);
      return ACX_ERR_INVALID_ARG;
    }
    return ACX_OK; /* one synchronous host "stream": everything before it has finished */
  }
  if (known) return ACX_OK;
  if (e->n_events == e->cap_events) {
    size_t cap = e->cap_events ? 2 * e->cap_events : 64;
    uint64_t *ev = realloc(e->events, cap * sizeof *ev);
    if (!ev) return ACX_ERR_NO_MEMORY;
    e->events = ev;
    e->cap_events = cap;
  }
  e->events[e->n_events++] = c->arg[0];
  return ACX_OK;
}

static acx_status_t do_managed(acxi_engine_t *e, const acxi_cmd_t *c) {
  hbuf_t *b;
  ACXCHECK(get_buf(e, c, 0, &b));
  if (b->kind != ACXI_MEM_MANAGED) {
    ACX_WARN(EXEC, "op %u request %" PRIu64 ": buffer %" PRIu64 " is not managed memory", c->op, c->req_id, b->id);
    return ACX_ERR_INVALID_ARG;
  }
  ACXCHECK(check_range(c, "buf[0]", c->off[0], c->bytes, b->bytes));
  if (c->op == ACXI_OP_PREFETCH) {
    ACXCHECK(check_stream(e, c, 0));
    if (c->arg[0] > 1) {
      ACX_WARN(EXEC, "PREFETCH request %" PRIu64 ": location arg[0]=%" PRIu64 " is not 0 (device) or 1 (host)",
               c->req_id, c->arg[0]);
      return ACX_ERR_INVALID_ARG;
    }
    return ACX_OK; /* host memory is already where the "device" reads it */
  }
  if (c->arg[0] < ACXI_ADVISE_READ_MOSTLY || c->arg[0] > ACXI_ADVISE_UNSET_READ_MOSTLY) {
    ACX_WARN(EXEC, "ADVISE request %" PRIu64 ": advice arg[0]=%" PRIu64 " is unknown", c->req_id, c->arg[0]);
    return ACX_ERR_INVALID_ARG;
  }
  return ACX_OK;
}

/* ---- shareable memory ---- */

/* The handle's bytes in host region arg[0] at off[0]. */
static acx_status_t handle_at(acxi_engine_t *e, const acxi_cmd_t *c, unsigned char **p) {
  region_t *r;
  ACXCHECK(get_region(e, c, &r));
  ACXCHECK(check_range(c, "host region (off[0])", c->off[0], ACXI_IPC_HANDLE_BYTES, r->bytes));
  *p = (unsigned char *)r->addr + c->off[0];
  return ACX_OK;
}

static acx_status_t do_ipc_export(acxi_engine_t *e, const acxi_cmd_t *c) {
  hbuf_t *b;
  unsigned char *p;
  ACXCHECK(get_buf(e, c, 0, &b));
  if (b->kind != ACXI_MEM_SHAREABLE || b->imported) {
    ACX_WARN(EXEC, "IPC_EXPORT request %" PRIu64 ": buf[0]=%" PRIu64 " is not a shareable allocation of this executor",
             c->req_id, b->id);
    return ACX_ERR_INVALID_ARG;
  }
  ACXCHECK(handle_at(e, c, &p));
  acxi_ipc_wire_t w = {.magic = ACXI_IPC_MAGIC, .kind = ACXI_IPC_KIND_HOST, .pid = (int32_t)getpid(),
                       .bytes = b->bytes, .addr = (uint64_t)(uintptr_t)b->ptr};
  acxi_ipc_host_t h = {.fd = b->fd, .dev = b->st_dev, .ino = b->st_ino};
  memcpy(w.body, &h, sizeof h);
  memcpy(p, &w, sizeof w);
  return ACX_OK;
}

/* Reads a handle and checks what the rank cannot: its kind and its fields' ranges. */
static acx_status_t read_handle(acxi_engine_t *e, const acxi_cmd_t *c, acxi_ipc_wire_t *w, acxi_ipc_host_t *h) {
  unsigned char *p;
  ACXCHECK(handle_at(e, c, &p));
  memcpy(w, p, sizeof *w);
  memcpy(h, w->body, sizeof *h);
  if (w->magic != ACXI_IPC_MAGIC) {
    ACX_WARN(EXEC, "IPC_IMPORT request %" PRIu64 ": host region arg[0]=%" PRIu64 " at off[0]=%" PRIu64
             " holds no shareable-memory handle (magic %#" PRIx64 ")", c->req_id, c->arg[0], c->off[0], w->magic);
    return ACX_ERR_INVALID_ARG;
  }
  if (w->kind != ACXI_IPC_KIND_HOST) {
    ACX_WARN(EXEC, "IPC_IMPORT request %" PRIu64 ": the handle is of device kind %s, this executor is of kind host",
             c->req_id, w->kind == ACXI_IPC_KIND_CUDA ? "cuda" : "unknown");
    return ACX_ERR_INVALID_ARG;
  }
  if (w->pid <= 0 || h->fd < 0 || w->bytes == 0 || w->bytes > SIZE_MAX) {
    ACX_WARN(EXEC, "IPC_IMPORT request %" PRIu64 ": the handle's pid %" PRId32 ", fd %" PRId32 " or bytes %" PRIu64
             " is out of range", c->req_id, w->pid, h->fd, w->bytes);
    return ACX_ERR_INVALID_ARG;
  }
  return ACX_OK;
}

/* Opens the exporter's memfd through /proc (its process, inline or not, is on this machine) and
 * maps it. The exporter gone, or its buffer freed: ACX_ERR_PEER_LOST. */
static acx_status_t do_ipc_import(acxi_engine_t *e, const acxi_cmd_t *c, acxi_cpl_t *cpl) {
  if (c->buf[0] == 0 || c->buf[0] == TOMB || buf_find(e, c->buf[0])) {
    ACX_WARN(EXEC, "IPC_IMPORT request %" PRIu64 ": buf[0]=%" PRIu64 " is reserved or already in use", c->req_id,
             c->buf[0]);
    return ACX_ERR_INVALID_ARG;
  }
  acxi_ipc_wire_t w;
  acxi_ipc_host_t h;
  ACXCHECK(read_handle(e, c, &w, &h));
  char who[48];
  snprintf(who, sizeof who, "IPC_IMPORT request %" PRIu64, c->req_id);
  int fd;
  ACXCHECK(acxi_shm_open_peer(who, w.pid, h.fd, h.dev, h.ino, w.bytes, &fd));
  acx_status_t st = ACX_OK;
  hbuf_t b = {.id = c->buf[0], .bytes = w.bytes, .kind = ACXI_MEM_SHAREABLE, .imported = 1, .fd = -1};
  b.ptr = mmap(NULL, (size_t)w.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (b.ptr == MAP_FAILED) {
    ACX_WARN(EXEC, "IPC_IMPORT request %" PRIu64 ": mmap of %" PRIu64 " shared bytes failed: %s", c->req_id, w.bytes,
             strerror(errno));
    st = errno == ENOMEM ? ACX_ERR_DEVICE_OOM : ACX_ERR_SYSTEM;
    goto err_close_fd;
  }
  close(fd); /* the mapping holds the memory */
  st = buf_insert(e, &b);
  if (st != ACX_OK) {
    hbuf_release(&b);
    return st;
  }
  cpl->value[0] = b.bytes;
  return ACX_OK;
err_close_fd:
  close(fd);
  return st;
}

/* ---- elementwise arithmetic: REDUCE and DIV ---- */

/* The element size of the command's dtype, for the ten dtypes NCCL reduces. */
static acx_status_t arith_dtype(const acxi_cmd_t *c, const char *what, size_t *es) {
  switch (c->dtype) {
  case ACX_DTYPE_I8: case ACX_DTYPE_U8: case ACX_DTYPE_I32: case ACX_DTYPE_U32: case ACX_DTYPE_I64:
  case ACX_DTYPE_U64: case ACX_DTYPE_F16: case ACX_DTYPE_BF16: case ACX_DTYPE_F32: case ACX_DTYPE_F64:
    *es = acx_dtype_size((acx_dtype_t)c->dtype);
    return ACX_OK;
  default:
    ACX_WARN(EXEC, "%s request %" PRIu64 ": dtype %u (%s) is not one of i8 u8 i32 u32 i64 u64 f16 bf16 f32 f64", what,
             c->req_id, c->dtype, acx_dtype_name((acx_dtype_t)c->dtype));
    return ACX_ERR_NOT_SUPPORTED;
  }
}

static acx_status_t check_elems(const acxi_cmd_t *c, const char *what, const char *field, uint64_t off, size_t es) {
  if (off % es == 0) return ACX_OK;
  ACX_WARN(EXEC, "%s request %" PRIu64 ": %s=%" PRIu64 " is not a multiple of the %s element size %zu", what,
           c->req_id, field, off, acx_dtype_name((acx_dtype_t)c->dtype), es);
  return ACX_ERR_INVALID_ARG;
}

/* d[i] := d[i] op s[i], a = d[i] and b = s[i] in EXPR; integers through their unsigned type (so a
 * sum or product wraps, as on the GPU, instead of overflowing a signed type). */
#define ELEMWISE(T, d, s, n, EXPR)                                                          \
  do {                                                                                      \
    T *d_ = (T *)(d);                                                                       \
    const T *s_ = (const T *)(s);                                                           \
    for (size_t i_ = 0; i_ < (n); i_++) {                                                   \
      T a = d_[i_], b = s_[i_];                                                             \
      d_[i_] = (EXPR);                                                                      \
    }                                                                                       \
  } while (0)
#define INT_REDUCE(T, U, d, s, n, op)                                                       \
  do {                                                                                      \
    switch (op) {                                                                           \
    case ACX_REDOP_SUM: ELEMWISE(T, d, s, n, (T)((U)a + (U)b)); break;                      \
    case ACX_REDOP_PROD: ELEMWISE(T, d, s, n, (T)((U)a * (U)b)); break;                     \
    case ACX_REDOP_MAX: ELEMWISE(T, d, s, n, a > b ? a : b); break;                         \
    default: ELEMWISE(T, d, s, n, a < b ? a : b); break;                                    \
    }                                                                                       \
  } while (0)
#define FLOAT_REDUCE(T, d, s, n, op)                                                        \
  do {                                                                                      \
    switch (op) {                                                                           \
    case ACX_REDOP_SUM: ELEMWISE(T, d, s, n, a + b); break;                                 \
    case ACX_REDOP_PROD: ELEMWISE(T, d, s, n, a * b); break;                                \
    case ACX_REDOP_MAX: ELEMWISE(T, d, s, n, a > b ? a : b); break;                         \
    default: ELEMWISE(T, d, s, n, a < b ? a : b); break;                                    \
    }                                                                                       \
  } while (0)
/* f16/bf16: in float, rounded to nearest even (runtime/base/half.h), as the CUDA kernels do. */
#define HALF_REDUCE(to_f, from_f, d, s, n, op)                                              \
  do {                                                                                      \
    switch (op) {                                                                           \
    case ACX_REDOP_SUM: ELEMWISE(uint16_t, d, s, n, from_f(to_f(a) + to_f(b))); break;      \
    case ACX_REDOP_PROD: ELEMWISE(uint16_t, d, s, n, from_f(to_f(a) * to_f(b))); break;     \
    case ACX_REDOP_MAX: ELEMWISE(uint16_t, d, s, n, to_f(a) > to_f(b) ? a : b); break;      \
    default: ELEMWISE(uint16_t, d, s, n, to_f(a) < to_f(b) ? a : b); break;                 \
    }                                                                                       \
  } while (0)

static void reduce_elems(void *d, const void *s, size_t n, uint32_t dtype, uint64_t op) {
  switch (dtype) {
  case ACX_DTYPE_I8: INT_REDUCE(int8_t, uint8_t, d, s, n, op); break;
  case ACX_DTYPE_U8: INT_REDUCE(uint8_t, uint8_t, d, s, n, op); break;
  case ACX_DTYPE_I32: INT_REDUCE(int32_t, uint32_t, d, s, n, op); break;
  case ACX_DTYPE_U32: INT_REDUCE(uint32_t, uint32_t, d, s, n, op); break;
  case ACX_DTYPE_I64: INT_REDUCE(int64_t, uint64_t, d, s, n, op); break;
  case ACX_DTYPE_U64: INT_REDUCE(uint64_t, uint64_t, d, s, n, op); break;
  case ACX_DTYPE_F16: HALF_REDUCE(acxc_half_to_float, acxc_float_to_half, d, s, n, op); break;
  case ACX_DTYPE_BF16: HALF_REDUCE(acxc_bf16_to_float, acxc_float_to_bf16, d, s, n, op); break;
  case ACX_DTYPE_F32: FLOAT_REDUCE(float, d, s, n, op); break;
  default: FLOAT_REDUCE(double, d, s, n, op); break;
  }
}

static acx_status_t do_reduce(acxi_engine_t *e, const acxi_cmd_t *c) {
  hbuf_t *dst = NULL, *src = NULL; /* set by get_buf; NULL for -O3's maybe-uninitialized */
  size_t es = 0;
  ACXCHECK(check_stream(e, c, 0));
  ACXCHECK(get_buf(e, c, 0, &dst));
  ACXCHECK(get_buf(e, c, 1, &src));
  ACXCHECK(arith_dtype(c, "REDUCE", &es));
  if (c->arg[0] > ACX_REDOP_MIN) {
    ACX_WARN(EXEC, "REDUCE request %" PRIu64 ": op arg[0]=%" PRIu64 " is not sum, prod, max or min%s", c->req_id,
             c->arg[0], c->arg[0] == ACX_REDOP_AVG ? " (avg is a sum, then a DIV)" : "");
    return ACX_ERR_INVALID_ARG;
  }
  ACXCHECK(check_elems(c, "REDUCE", "bytes", c->bytes, es));
  ACXCHECK(check_elems(c, "REDUCE", "off[0]", c->off[0], es));
  ACXCHECK(check_elems(c, "REDUCE", "off[1]", c->off[1], es));
  ACXCHECK(check_range(c, "buf[0]", c->off[0], c->bytes, dst->bytes));
  ACXCHECK(check_range(c, "buf[1]", c->off[1], c->bytes, src->bytes));
  unsigned char *d = (unsigned char *)dst->ptr + c->off[0], *s = (unsigned char *)src->ptr + c->off[1];
  if (d != s && d < s + c->bytes && s < d + c->bytes) {
    ACX_WARN(EXEC, "REDUCE request %" PRIu64 ": buf[0] at off[0]=%" PRIu64 " and buf[1] at off[1]=%" PRIu64
             " overlap partly (%" PRIu64 " bytes each)", c->req_id, c->off[0], c->off[1], c->bytes);
    return ACX_ERR_INVALID_ARG;
  }
  reduce_elems(d, s, (size_t)(c->bytes / es), c->dtype, c->arg[0]);
  return ACX_OK;
}

/* p[i] := p[i] / v: integers truncate (signed ones through int64_t), floats divide in their own
 * type, f16/bf16 in float, rounded to nearest even. */
#define DIV_ELEMS(T, W, p, n, v)                                                            \
  do {                                                                                      \
    T *p_ = (T *)(p);                                                                       \
    for (size_t i_ = 0; i_ < (n); i_++) p_[i_] = (T)((W)p_[i_] / (W)(v));                   \
  } while (0)
#define HALF_DIV(to_f, from_f, p, n, v)                                                     \
  do {                                                                                      \
    uint16_t *p_ = (uint16_t *)(p);                                                         \
    for (size_t i_ = 0; i_ < (n); i_++) p_[i_] = from_f(to_f(p_[i_]) / (float)(v));         \
  } while (0)

static void div_elems(void *p, size_t n, uint32_t dtype, uint64_t v) {
  switch (dtype) {
  case ACX_DTYPE_I8: DIV_ELEMS(int8_t, int64_t, p, n, v); break;
  case ACX_DTYPE_U8: DIV_ELEMS(uint8_t, uint64_t, p, n, v); break;
  case ACX_DTYPE_I32: DIV_ELEMS(int32_t, int64_t, p, n, v); break;
  case ACX_DTYPE_U32: DIV_ELEMS(uint32_t, uint64_t, p, n, v); break;
  case ACX_DTYPE_I64: DIV_ELEMS(int64_t, int64_t, p, n, v); break;
  case ACX_DTYPE_U64: DIV_ELEMS(uint64_t, uint64_t, p, n, v); break;
  case ACX_DTYPE_F16: HALF_DIV(acxc_half_to_float, acxc_float_to_half, p, n, v); break;
  case ACX_DTYPE_BF16: HALF_DIV(acxc_bf16_to_float, acxc_float_to_bf16, p, n, v); break;
  case ACX_DTYPE_F32: DIV_ELEMS(float, float, p, n, v); break;
  default: DIV_ELEMS(double, double, p, n, v); break;
  }
}

static acx_status_t do_div(acxi_engine_t *e, const acxi_cmd_t *c) {
  hbuf_t *b;
  size_t es = 0;
  ACXCHECK(check_stream(e, c, 0));
  ACXCHECK(get_buf(e, c, 0, &b));
  ACXCHECK(arith_dtype(c, "DIV", &es));
  int is_signed = c->dtype == ACX_DTYPE_I8 || c->dtype == ACX_DTYPE_I32 || c->dtype == ACX_DTYPE_I64;
  if (c->arg[0] == 0 || (is_signed && c->arg[0] > (uint64_t)INT64_MAX)) {
    ACX_WARN(EXEC, "DIV request %" PRIu64 ": divisor arg[0]=%" PRIu64 " is 0 or exceeds the %s range", c->req_id,
             c->arg[0], acx_dtype_name((acx_dtype_t)c->dtype));
    return ACX_ERR_INVALID_ARG;
  }
  ACXCHECK(check_elems(c, "DIV", "bytes", c->bytes, es));
  ACXCHECK(check_elems(c, "DIV", "off[0]", c->off[0], es));
  ACXCHECK(check_range(c, "buf[0]", c->off[0], c->bytes, b->bytes));
  div_elems((unsigned char *)b->ptr + c->off[0], (size_t)(c->bytes / es), c->dtype, c->arg[0]);
  return ACX_OK;
}

static acx_status_t do_fault(acxi_engine_t *e, const acxi_cmd_t *c) {
  if (!e->params.inline_mode && c->arg[0] == ACXI_FAULT_CRASH) {
    ACX_WARN(EXEC, "FAULT request %" PRIu64 ": host executor generation %" PRIu64 " aborts (injected crash)",
             c->req_id, e->params.generation);
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core); /* a wanted crash: no core file */
    abort();
  }
  ACX_WARN(EXEC, "FAULT request %" PRIu64 ": host engine generation %" PRIu64 " is now poisoned (simulated sticky "
           "error)", c->req_id, e->params.generation);
  e->poisoned = 1;
  return e->params.inline_mode ? ACX_ERR_DEVICE_FATAL : ACX_ERR_DEVICE_LOST;
}

static void host_submit(acxi_engine_t *e, const acxi_cmd_t *c) {
  acxi_cpl_t cpl = {.req_id = c->req_id, .status = ACX_OK};
  acx_status_t st;
  if (e->poisoned) {
    st = ACX_ERR_DEVICE_FATAL;
  } else if (c->op >= ACXI_OP_EXT_BASE) {
    const acxi_ext_ops_t *x = acxi_ext_find(c->op);
    if (x) {
      x->submit(e, &host_api, c); /* the extension completes it */
      return;
    }
    ACX_WARN(EXEC, "request %" PRIu64 ": no extension handles op 0x%x", c->req_id, c->op);
    st = ACX_ERR_INVALID_ARG;
  } else {
    switch (c->op) {
    case ACXI_OP_NOP:
    case ACXI_OP_SHUTDOWN:
      st = ACX_OK;
      break;
    case ACXI_OP_KERNEL_EMPTY:
      st = check_stream(e, c, 0);
      break;
    case ACXI_OP_ALLOC:
      st = do_alloc(e, c);
      break;
    case ACXI_OP_FREE:
      st = do_free(e, c);
      break;
    case ACXI_OP_FILL:
      st = do_fill(e, c);
      break;
    case ACXI_OP_COPY_H2D:
    case ACXI_OP_COPY_D2H:
    case ACXI_OP_COPY_D2D:
      st = do_copy(e, c);
      break;
    case ACXI_OP_EVENT_RECORD:
    case ACXI_OP_STREAM_WAIT:
      st = do_event(e, c);
      break;
    case ACXI_OP_SYNC:
      st = check_stream(e, c, 1);
      break;
    case ACXI_OP_MEM_INFO: {
      struct sysinfo si;
      st = sysinfo(&si) == 0 ? ACX_OK : ACX_ERR_SYSTEM;
      cpl.value[0] = (uint64_t)si.freeram * si.mem_unit;
      cpl.value[1] = (uint64_t)si.totalram * si.mem_unit;
      break;
    }
    case ACXI_OP_PREFETCH:
    case ACXI_OP_ADVISE:
      st = do_managed(e, c);
      break;
    case ACXI_OP_FAULT:
      st = do_fault(e, c);
      break;
    case ACXI_OP_BUFFER_INFO: {
      hbuf_t *b;
      st = get_buf(e, c, 0, &b);
      if (st == ACX_OK) {
        cpl.value[0] = b->bytes;
        cpl.value[1] = (uint64_t)(uintptr_t)b->ptr;
      }
      break;
    }
    case ACXI_OP_IPC_EXPORT:
      st = do_ipc_export(e, c);
      break;
    case ACXI_OP_IPC_IMPORT:
      st = do_ipc_import(e, c, &cpl);
      break;
    case ACXI_OP_REDUCE:
      st = do_reduce(e, c);
      break;
    case ACXI_OP_DIV:
      st = do_div(e, c);
      break;
    case ACXI_OP_WAIT_VALUE:
      st = do_wait_value(e, c);
      break;
    case ACXI_OP_WRITE_VALUE:
      st = do_write_value(e, c);
      break;
    default:
      /* HOST_REGISTER/UNREGISTER are served by the loop and never reach an engine. */
      ACX_WARN(EXEC, "request %" PRIu64 ": op %u is not a host-engine command", c->req_id, c->op);
      st = ACX_ERR_INVALID_ARG;
    }
  }
  if (st == ACX_OK && (c->flags & ACXI_CMD_FLAG_NO_REPLY)) return;
  cpl.status = st;
  e->complete(e->sink, &cpl);
}

/* ---- engine ops ---- */

static acx_status_t host_create(const acxi_engine_params_t *params, acxi_complete_fn complete, void *sink,
                                acxi_engine_t **engine) {
  ACX_CHECK_NULL(params);
  ACX_CHECK_NULL(complete);
  ACX_CHECK_NULL(engine);
  /* The host kind has no stream objects, but it takes what the cuda kind takes: the rank's
   * stream masks are as wide for both. */
  ACX_CHECK_ARG(params->streams >= 1 && params->streams <= ACXI_MAX_STREAMS,
                "host engine: streams=%d is outside [1, %d]", params->streams, ACXI_MAX_STREAMS);
  acxi_engine_t *e = calloc(1, sizeof *e);
  if (!e) return ACX_ERR_NO_MEMORY;
  e->params = *params;
  e->complete = complete;
  e->sink = sink;
  *engine = e;
  return ACX_OK;
}

static void host_destroy(acxi_engine_t *e) {
  if (!e) return;
  for (int i = 0; i < acxi_ext_count(); i++) {
    const acxi_ext_ops_t *x = acxi_ext_at(i);
    if (x->engine_destroy) x->engine_destroy(e, &host_api);
  }
  for (size_t i = 0; i < e->cap; i++)
    if (e->bufs[i].id && e->bufs[i].id != TOMB) hbuf_release(&e->bufs[i]);
  free(e->bufs);
  free(e->regions);
  free(e->events);
  free(e);
}

static int host_progress(acxi_engine_t *e) {
  int n = 0;
  for (int i = 0; i < acxi_ext_count(); i++) {
    const acxi_ext_ops_t *x = acxi_ext_at(i);
    if (x->progress) n += x->progress(e, &host_api);
  }
  return n;
}

static uint64_t host_in_flight(acxi_engine_t *e) { return 0; /* every command completes in submit */ }

static acx_status_t host_region_add(acxi_engine_t *e, uint64_t id, void *addr, size_t bytes) {
  for (size_t i = 0; i < e->n_regions; i++)
    if (e->regions[i].id == id) {
      ACX_WARN(EXEC, "host region %" PRIu64 " is already registered", id);
      return ACX_ERR_INVALID_ARG;
    }
  if (e->n_regions == e->cap_regions) {
    size_t cap = e->cap_regions ? 2 * e->cap_regions : 16;
    region_t *r = realloc(e->regions, cap * sizeof *r);
    if (!r) return ACX_ERR_NO_MEMORY;
    e->regions = r;
    e->cap_regions = cap;
  }
  e->regions[e->n_regions++] = (region_t){.id = id, .addr = addr, .bytes = bytes};
  return ACX_OK;
}

static acx_status_t host_region_remove(acxi_engine_t *e, uint64_t id) {
  for (size_t i = 0; i < e->n_regions; i++)
    if (e->regions[i].id == id) {
      e->regions[i] = e->regions[--e->n_regions];
      return ACX_OK;
    }
  ACX_WARN(EXEC, "host region %" PRIu64 " is not registered", id);
  return ACX_ERR_INVALID_ARG;
}

static int host_poisoned(acxi_engine_t *e) { return e->poisoned; }

/* ---- the extension API ---- */

static acx_status_t api_buffer(acxi_engine_t *e, uint64_t id, void **ptr, uint64_t *bytes) {
  hbuf_t *b = buf_find(e, id);
  if (!b) return ACX_ERR_UNKNOWN_BUFFER;
  if (ptr) *ptr = b->ptr;
  if (bytes) *bytes = b->bytes;
  return ACX_OK;
}

static acx_status_t api_host_region(acxi_engine_t *e, uint64_t id, void **ptr, uint64_t *bytes) {
  for (size_t i = 0; i < e->n_regions; i++)
    if (e->regions[i].id == id) {
      if (ptr) *ptr = e->regions[i].addr;
      if (bytes) *bytes = e->regions[i].bytes;
      return ACX_OK;
    }
  return ACX_ERR_INVALID_ARG;
}

static void *api_stream(acxi_engine_t *e, uint32_t idx) { return NULL; /* the host kind has no streams */ }
static void api_order_access(acxi_engine_t *e, uint64_t id, uint32_t stream, int writes) {
  /* synchronous execution: every earlier write has finished */
}
static acx_status_t api_order_external(acxi_engine_t *e, uint64_t id, void *stream, int writes) {
  return ACX_OK; /* synchronous execution: every earlier access has finished */
}
static void api_complete(acxi_engine_t *e, const acxi_cpl_t *cpl) { e->complete(e->sink, cpl); }
static void api_complete_after(acxi_engine_t *e, uint32_t stream, const acxi_cmd_t *cmd) {
  acxi_cpl_t cpl = {.req_id = cmd->req_id, .status = ACX_OK};
  e->complete(e->sink, &cpl);
}
static void **api_ext_state(acxi_engine_t *e, int slot) {
  return slot >= 0 && slot < ACXI_EXT_MAX ? &e->ext_state[slot] : NULL;
}
static const acxi_engine_params_t *api_params(acxi_engine_t *e) { return &e->params; }
static void host_set_generation(acxi_engine_t *e, uint64_t generation) { e->params.generation = generation; }

static const acxi_engine_api_t host_api = {
    .buffer = api_buffer,
    .host_region = api_host_region,
    .stream = api_stream,
    .order_access = api_order_access,
    .order_external = api_order_external,
    .complete = api_complete,
    .complete_after = api_complete_after,
    .ext_state = api_ext_state,
    .params = api_params,
};

static const acxi_engine_ops_t host_ops = {
    .kind = "host",
    .create = host_create,
    .destroy = host_destroy,
    .submit = host_submit,
    .progress = host_progress,
    .in_flight = host_in_flight,
    .host_region_add = host_region_add,
    .host_region_remove = host_region_remove,
    .poisoned = host_poisoned,
    .set_generation = host_set_generation,
};

__attribute__((constructor)) static void register_host_engine(void) { acxi_engine_register(&host_ops); }
