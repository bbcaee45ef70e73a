/* Remote buffer access through tokens: the requester's side (a table of requests by tag, each
 * with its deadline) and the owner's (acxi_token_resolve on every request, then the bytes), as
 * handlers of the control plane. Data is staged through host memory and travels as MPI messages
 * on the control plane's communicator under a tag derived from the request's, so remote traffic
 * never shares a communicator, or an order, with the collectives. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acx/remote.h"
#include "collectives/ctrl_plane.h"
#include "runtime/clock.h"
#include "runtime/log.h"
#include "runtime/param.h"
#include "runtime/token_internal.h"

#define MAX_IN_FLIGHT 4096

/* One request of this rank. In the table while it waits for the owner's reply; out of it (owned by
 * the control plane's callbacks) while its bytes move. */
typedef struct rop {
  struct rop *next;
  uint64_t tag;
  int is_put, owner, dtag_in, dtag_out, pending;
  acx_status_t first_error;
  acx_future_t *future; /* held */
  acx_buffer_t *local;  /* held */
  uint64_t local_off, bytes;
  unsigned char *staging; /* malloc; NULL once the control plane took it */
  unsigned char *ack;     /* put: the owner's 4-byte status */
  int64_t deadline_ns;
  struct remote *rm;
} rop_t;

/* A put this rank serves: the bytes are on their way in. */
typedef struct oput {
  acx_buffer_t *buf; /* held */
  uint64_t off, bytes;
  int requester, dtag_in, dtag_out; /* bytes in from the requester, status back */
  unsigned char *staging;
  struct remote *rm;
} oput_t;

typedef struct remote {
  struct remote *next;
  acx_world_t *world;
  acxc_ctrl_t *cp;
  int64_t timeout_ns;
  pthread_mutex_t lock;
  rop_t *ops;
  int nops;
  _Atomic int inflight; /* requests and served puts owned by control-plane callbacks */
  _Atomic uint64_t next_tag;
  _Atomic uint64_t gets, puts, served, refused, failed, bytes_in, bytes_out;
} remote_t;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static remote_t *registry;

static remote_t *remote_of(const acx_world_t *w) {
  pthread_mutex_lock(&registry_lock);
  remote_t *rm = registry;
  while (rm && rm->world != w) rm = rm->next;
  pthread_mutex_unlock(&registry_lock);
  return rm;
}

static void add(_Atomic uint64_t *c, uint64_t n) { atomic_fetch_add_explicit(c, n, memory_order_relaxed); }

static int64_t left_ns(int64_t deadline) {
  int64_t l = deadline - acxi_now_ns();
  return l > 1000000 ? l : 1000000;
}

static void put_status(unsigned char *p, acx_status_t st) { acxi_put_le32(p, (uint32_t)st); }

/* ------------------------------------------------------------------------------------------ */
/* requester side                                                                             */

static void rop_finish(rop_t *r, acx_status_t st) {
  remote_t *rm = r->rm;
  if (st != ACX_OK) {
    add(&rm->failed, 1);
    ACX_INFO(COLL, "remote %s (tag %" PRIu64 ") of %" PRIu64 " bytes at rank %d: %s", r->is_put ? "put" : "get", r->tag,
             r->bytes, r->owner, acx_status_name(st));
  }
  acx_future_complete(r->future, st, NULL, 0);
  acx_future_release(r->future);
  acx_buffer_release(r->local);
  free(r->staging);
  free(r->ack);
  free(r);
}

/* Takes the request with `tag` out of the table (NULL: none, e.g. it passed its deadline). */
static rop_t *rop_take(remote_t *rm, uint64_t tag) {
  pthread_mutex_lock(&rm->lock);
  rop_t **pp = &rm->ops, *r = NULL;
  while (*pp && (*pp)->tag != tag) pp = &(*pp)->next;
  if (*pp) {
    r = *pp;
    *pp = r->next;
    rm->nops--;
  }
  pthread_mutex_unlock(&rm->lock);
  return r;
}

static void get_data_in(acxc_ctrl_t *cp, void *arg, acx_status_t st) {
  rop_t *r = arg;
  if (st != ACX_OK) r->staging = NULL; /* the control plane keeps it */
  if (st == ACX_OK) {
    add(&r->rm->bytes_in, r->bytes);
    st = acx_buffer_write(r->local, r->local_off, r->staging, r->bytes, 0, left_ns(r->deadline_ns));
  }
  atomic_fetch_sub_explicit(&r->rm->inflight, 1, memory_order_release);
  rop_finish(r, st);
}

/* A put has two transfers (the bytes out, the owner's status in); the last one finishes it. */
static void put_step(rop_t *r, acx_status_t st) {
  if (st != ACX_OK && r->first_error == ACX_OK) r->first_error = st;
  if (--r->pending > 0) return;
  acx_status_t res = r->first_error != ACX_OK ? r->first_error : (acx_status_t)acxi_get_le32(r->ack);
  atomic_fetch_sub_explicit(&r->rm->inflight, 1, memory_order_release);
  rop_finish(r, res);
}

static void put_data_out(acxc_ctrl_t *cp, void *arg, acx_status_t st) {
  rop_t *r = arg;
  if (st != ACX_OK) r->staging = NULL;
  else add(&r->rm->bytes_out, r->bytes);
  put_step(r, st);
}

static void put_ack_in(acxc_ctrl_t *cp, void *arg, acx_status_t st) {
  rop_t *r = arg;
  if (st != ACX_OK) r->ack = NULL;
  put_step(r, st);
}

static void on_reply(acxc_ctrl_t *cp, void *arg, const acxi_ctrl_msg_t *m, acx_status_t decoded) {
  remote_t *rm = arg;
  rop_t *r = rop_take(rm, m->u.reply.tag);
  if (!r) {
    ACX_INFO(COLL, "remote: a %s from rank %d for tag %" PRIu64 ", which is not waiting (past its deadline?): dropped",
             acxi_ctrl_type_str(m->type), m->sender, m->u.reply.tag);
    return;
  }
  int want_put = m->type == ACXI_CTRL_PUT_REPLY;
  if (r->owner != m->sender || r->is_put != want_put) {
    ACX_WARN(COLL, "remote: a %s from rank %d answers a %s to rank %d (tag %" PRIu64 "): the request fails",
             acxi_ctrl_type_str(m->type), m->sender, r->is_put ? "put" : "get", r->owner, r->tag);
    rop_finish(r, ACX_ERR_MPI);
    return;
  }
  if (m->u.reply.status != ACX_OK) {
    rop_finish(r, m->u.reply.status);
    return;
  }
  atomic_fetch_add_explicit(&rm->inflight, 1, memory_order_relaxed);
  acx_status_t st;
  if (!r->is_put) {
    st = acxc_ctrl_data_recv(cp, r->owner, r->dtag_in, r->staging, r->bytes, r->deadline_ns, get_data_in, r);
  } else {
    r->ack = malloc(4);
    r->pending = 2;
    st = r->ack ? acxc_ctrl_data_recv(cp, r->owner, r->dtag_in, r->ack, 4, r->deadline_ns, put_ack_in, r)
                : ACX_ERR_NO_MEMORY;
    if (st == ACX_OK) {
      acx_status_t s2 = acxc_ctrl_data_send(cp, r->owner, r->dtag_out, r->staging, r->bytes, r->deadline_ns, put_data_out, r);
      /* The ack receive is posted: it ends at the deadline and finishes the request then. */
      if (s2 != ACX_OK) put_step(r, s2);
      return;
    }
  }
  if (st != ACX_OK) {
    atomic_fetch_sub_explicit(&rm->inflight, 1, memory_order_release);
    rop_finish(r, st);
  }
}

/* Requests still waiting for a reply at their deadline fail; the progress thread calls it. */
static void on_tick(acxc_ctrl_t *cp, void *arg, int64_t now) {
  remote_t *rm = arg;
  rop_t *expired = NULL;
  pthread_mutex_lock(&rm->lock);
  rop_t **pp = &rm->ops;
  while (*pp) {
    rop_t *r = *pp;
    if (now >= r->deadline_ns) {
      *pp = r->next;
      rm->nops--;
      r->next = expired;
      expired = r;
    } else {
      pp = &r->next;
    }
  }
  pthread_mutex_unlock(&rm->lock);
  while (expired) {
    rop_t *r = expired;
    expired = r->next;
    ACX_WARN(COLL, "remote %s (tag %" PRIu64 ") to rank %d: no answer within ACX_REMOTE_TIMEOUT",
             r->is_put ? "put" : "get", r->tag, r->owner);
    rop_finish(r, ACX_ERR_TIMEOUT);
  }
}

/* ------------------------------------------------------------------------------------------ */
/* owner side                                                                                 */

static void reply(acxc_ctrl_t *cp, const acxi_ctrl_msg_t *req, acx_status_t st) {
  acxi_ctrl_msg_t m = {.type = req->type == ACXI_CTRL_GET_REQ ? ACXI_CTRL_GET_REPLY : ACXI_CTRL_PUT_REPLY,
                       .u.reply = {.status = st, .tag = req->u.access.tag}};
  acx_status_t s = acxc_ctrl_send(cp, req->sender, &m, NULL, NULL);
  if (s != ACX_OK)
    ACX_WARN(COLL, "remote: cannot answer rank %d's request %" PRIu64 ": %s", req->sender, req->u.access.tag,
             acx_status_name(s));
}

static void free_on_ok(acxc_ctrl_t *cp, void *arg, acx_status_t st) {
  if (st == ACX_OK) free(arg); /* on failure the control plane frees it */
}

/* The owner's check; ACX_OK with *buf held, else the verdict for the requester. */
static acx_status_t check_request(remote_t *rm, const acxi_ctrl_msg_t *m, acx_status_t decoded, unsigned access,
                                  acx_buffer_t **buf) {
  add(&rm->served, 1);
  acx_status_t st = decoded;
  if (st == ACX_OK && m->u.access.bytes == 0) {
    ACX_WARN(COLL, "remote: rank %d asked for 0 bytes", m->sender);
    st = ACX_ERR_INVALID_ARG;
  }
  if (st == ACX_OK) st = acxi_token_resolve(&m->u.access.token, access, m->u.access.offset, m->u.access.bytes, buf);
  if (st != ACX_OK) {
    add(&rm->refused, 1);
    ACX_INFO(COLL, "remote: %s %" PRIu64 " from rank %d refused: %s", acxi_ctrl_type_str(m->type), m->u.access.tag,
             m->sender, acx_status_name(st));
  }
  return st;
}

static void on_get_req(acxc_ctrl_t *cp, void *arg, const acxi_ctrl_msg_t *m, acx_status_t decoded) {
  remote_t *rm = arg;
  acx_buffer_t *buf = NULL;
  acx_status_t st = check_request(rm, m, decoded, ACX_TOKEN_READ, &buf);
  unsigned char *staging = NULL;
  if (st == ACX_OK) {
    /* The resolve bounded bytes by the buffer's size: the staging allocation is as trusted as it. */
    staging = malloc(m->u.access.bytes);
    st = staging ? acx_buffer_read(buf, m->u.access.offset, staging, m->u.access.bytes, 0, rm->timeout_ns)
                 : ACX_ERR_NO_MEMORY;
    acx_buffer_release(buf);
  }
  reply(cp, m, st);
  if (st != ACX_OK) {
    free(staging);
    return;
  }
  st = acxc_ctrl_data_send(cp, m->sender, acxc_ctrl_data_tag(cp, m->u.access.tag, 0), staging, m->u.access.bytes,
                           acxi_deadline(rm->timeout_ns), free_on_ok, staging);
  if (st != ACX_OK) free(staging);
  else add(&rm->bytes_out, m->u.access.bytes);
}

static void oput_data_in(acxc_ctrl_t *cp, void *arg, acx_status_t st) {
  oput_t *o = arg;
  if (st == ACX_OK) {
    add(&o->rm->bytes_in, o->bytes);
    st = acx_buffer_write(o->buf, o->off, o->staging, o->bytes, 0, o->rm->timeout_ns);
    free(o->staging);
  }
  acx_buffer_release(o->buf);
  unsigned char *ack = malloc(4);
  if (ack) {
    put_status(ack, st);
    if (acxc_ctrl_data_send(cp, o->requester, o->dtag_out, ack, 4, acxi_deadline(o->rm->timeout_ns), free_on_ok, ack) !=
        ACX_OK)
      free(ack);
  }
  atomic_fetch_sub_explicit(&o->rm->inflight, 1, memory_order_release);
  free(o);
}

static void on_put_req(acxc_ctrl_t *cp, void *arg, const acxi_ctrl_msg_t *m, acx_status_t decoded) {
  remote_t *rm = arg;
  acx_buffer_t *buf = NULL;
  acx_status_t st = check_request(rm, m, decoded, ACX_TOKEN_WRITE, &buf);
  oput_t *o = NULL;
  if (st == ACX_OK) {
    o = calloc(1, sizeof *o);
    if (o) o->staging = malloc(m->u.access.bytes);
    if (!o || !o->staging) st = ACX_ERR_NO_MEMORY;
  }
  if (st == ACX_OK) {
    *o = (oput_t){.buf = buf, .off = m->u.access.offset, .bytes = m->u.access.bytes, .requester = m->sender,
                  .dtag_in = acxc_ctrl_data_tag(cp, m->u.access.tag, 1),
                  .dtag_out = acxc_ctrl_data_tag(cp, m->u.access.tag, 0), .staging = o->staging, .rm = rm};
    atomic_fetch_add_explicit(&rm->inflight, 1, memory_order_relaxed);
    st = acxc_ctrl_data_recv(cp, m->sender, o->dtag_in, o->staging, o->bytes, acxi_deadline(rm->timeout_ns),
                             oput_data_in, o);
    if (st != ACX_OK) atomic_fetch_sub_explicit(&rm->inflight, 1, memory_order_release);
  }
  if (st != ACX_OK) {
    if (o) free(o->staging);
    free(o);
    acx_buffer_release(buf);
  }
  /* The receive is posted before the go-ahead, so the bytes find it waiting. */
  reply(cp, m, st);
}

/* ------------------------------------------------------------------------------------------ */
/* API                                                                                        */

acx_status_t acx_remote_start(acx_world_t *world) {
  ACX_CHECK_NULL(world);
  if (remote_of(world)) {
    ACX_WARN(COLL, "acx_remote_start: remote access is running on this world already");
    return ACX_ERR_INVALID_STATE;
  }
  remote_t *rm = calloc(1, sizeof *rm);
  if (!rm) return ACX_ERR_NO_MEMORY;
  acx_status_t st = acxc_ctrl_acquire(world, &rm->cp);
  if (st != ACX_OK) {
    free(rm);
    return st;
  }
  rm->world = world;
  int64_t ms = acxi_param_int("ACX_REMOTE_TIMEOUT");
  rm->timeout_ns = (ms > 0 ? ms : 1) * 1000000LL;
  pthread_mutex_init(&rm->lock, NULL);
  pthread_mutex_lock(&registry_lock);
  rm->next = registry;
  registry = rm;
  pthread_mutex_unlock(&registry_lock);
  acxc_ctrl_set_handler(rm->cp, ACXI_CTRL_GET_REQ, on_get_req, rm);
  acxc_ctrl_set_handler(rm->cp, ACXI_CTRL_PUT_REQ, on_put_req, rm);
  acxc_ctrl_set_handler(rm->cp, ACXI_CTRL_GET_REPLY, on_reply, rm);
  acxc_ctrl_set_handler(rm->cp, ACXI_CTRL_PUT_REPLY, on_reply, rm);
  acxc_ctrl_set_tick(rm->cp, 0, on_tick, rm);
  return ACX_OK;
}

acx_status_t acx_remote_stop(acx_world_t *world, int64_t timeout_ns) {
  ACX_CHECK_NULL(world);
  pthread_mutex_lock(&registry_lock);
  remote_t **pp = &registry;
  while (*pp && (*pp)->world != world) pp = &(*pp)->next;
  remote_t *rm = *pp;
  if (rm) *pp = rm->next;
  pthread_mutex_unlock(&registry_lock);
  if (!rm) {
    ACX_WARN(COLL, "acx_remote_stop: remote access was not started on this world");
    return ACX_ERR_INVALID_STATE;
  }
  for (int t = ACXI_CTRL_GET_REQ; t <= ACXI_CTRL_PUT_REPLY; t++) acxc_ctrl_set_handler(rm->cp, t, NULL, NULL);
  acxc_ctrl_set_tick(rm->cp, 0, NULL, NULL);
  /* The progress thread may be inside a handler or the tick right now. */
  (void)acxc_ctrl_quiesce(rm->cp, rm->timeout_ns);
  pthread_mutex_lock(&rm->lock);
  rop_t *ops = rm->ops;
  rm->ops = NULL;
  rm->nops = 0;
  pthread_mutex_unlock(&rm->lock);
  while (ops) {
    rop_t *r = ops;
    ops = r->next;
    rop_finish(r, ACX_ERR_CANCELLED);
  }
  acx_status_t st = acxc_ctrl_release(rm->cp, timeout_ns);
  /* What the control plane still owns ends at its deadline (or at once when the plane stopped). */
  int64_t deadline = acxi_deadline(rm->timeout_ns + 1000000000LL);
  while (atomic_load_explicit(&rm->inflight, memory_order_acquire) > 0 && acxi_now_ns() < deadline)
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  if (atomic_load_explicit(&rm->inflight, memory_order_acquire) > 0) {
    ACX_WARN(COLL, "acx_remote_stop: transfers still in flight after their deadline; their state is leaked");
    return st != ACX_OK ? st : ACX_ERR_TIMEOUT;
  }
  pthread_mutex_destroy(&rm->lock);
  free(rm);
  return st;
}

/* Checks shared by get and put; *info describes local. */
static acx_status_t check_call(const char *fn, acx_world_t *world, const acx_token_t *token, uint64_t bytes,
                               acx_buffer_t *local, uint64_t local_offset, acx_future_t **done,
                               acx_buffer_info_t *info) {
  ACX_CHECK_NULL(world);
  ACX_CHECK_NULL(token);
  ACX_CHECK_NULL(local);
  ACX_CHECK_NULL(done);
  *done = NULL;
  ACX_CHECK_ARG(bytes > 0, "%s: argument 'bytes' is 0", fn);
  ACXCHECK(acx_buffer_check(local));
  ACXCHECK(acx_buffer_query(local, info));
  if (local_offset > info->bytes || bytes > info->bytes - local_offset) {
    ACX_WARN(COLL, "%s: arguments 'local_offset'=%" PRIu64 " + 'bytes'=%" PRIu64 " exceed the local buffer's %zu bytes",
             fn, local_offset, bytes, info->bytes);
    return ACX_ERR_OUT_OF_RANGE;
  }
  int size = 0;
  acx_world_size(world, &size);
  if (token->owner_rank < 0 || token->owner_rank >= size) {
    ACX_WARN(COLL, "%s: argument 'token' names rank %d, which is not in this world of %d", fn, token->owner_rank, size);
    return ACX_ERR_BAD_TOKEN;
  }
  return ACX_OK;
}

/* A token of this rank: the same owner's check, then a copy through host memory (the two buffers
 * may differ in type or device). */
static acx_status_t local_access(remote_t *rm, const acx_token_t *token, uint64_t offset, uint64_t bytes,
                                 acx_buffer_t *local, uint64_t local_off, int is_put, acx_future_t **done) {
  acx_buffer_t *buf = NULL;
  acx_status_t st = acxi_token_resolve(token, is_put ? ACX_TOKEN_WRITE : ACX_TOKEN_READ, offset, bytes, &buf);
  void *tmp = st == ACX_OK ? malloc(bytes) : NULL;
  if (st == ACX_OK && !tmp) st = ACX_ERR_NO_MEMORY;
  if (st == ACX_OK)
    st = is_put ? acx_buffer_read(local, local_off, tmp, bytes, 0, rm->timeout_ns)
                : acx_buffer_read(buf, offset, tmp, bytes, 0, rm->timeout_ns);
  if (st == ACX_OK)
    st = is_put ? acx_buffer_write(buf, offset, tmp, bytes, 0, rm->timeout_ns)
                : acx_buffer_write(local, local_off, tmp, bytes, 0, rm->timeout_ns);
  free(tmp);
  acx_buffer_release(buf);
  if (st != ACX_OK) add(&rm->failed, 1);
  acx_future_t *f = NULL;
  ACXCHECK(acx_future_create(&f));
  acx_future_complete(f, st, NULL, 0);
  *done = f;
  return ACX_OK;
}

static acx_status_t access_remote(const char *fn, acx_world_t *world, const acx_token_t *token, uint64_t offset,
                                  uint64_t bytes, acx_buffer_t *local, uint64_t local_offset, int is_put,
                                  acx_future_t **done) {
  acx_buffer_info_t info;
  ACXCHECK(check_call(fn, world, token, bytes, local, local_offset, done, &info));
  remote_t *rm = remote_of(world);
  if (!rm) {
    ACX_WARN(COLL, "%s: acx_remote_start was not called on this world", fn);
    return ACX_ERR_INVALID_STATE;
  }
  add(is_put ? &rm->puts : &rm->gets, 1);
  if (token->owner_rank == acxc_ctrl_rank(rm->cp))
    return local_access(rm, token, offset, bytes, local, local_offset, is_put, done);

  rop_t *r = calloc(1, sizeof *r);
  if (!r) return ACX_ERR_NO_MEMORY;
  r->staging = malloc(bytes);
  acx_status_t st = r->staging ? acx_future_create(&r->future) : ACX_ERR_NO_MEMORY;
  if (st == ACX_OK && is_put) st = acx_buffer_read(local, local_offset, r->staging, bytes, 0, rm->timeout_ns);
  if (st != ACX_OK) {
    if (r->future) acx_future_release(r->future);
    free(r->staging);
    free(r);
    return st;
  }
  acx_buffer_hold(local);
  r->rm = rm;
  r->is_put = is_put;
  r->owner = token->owner_rank;
  r->local = local;
  r->local_off = local_offset;
  r->bytes = bytes;
  r->tag = atomic_fetch_add_explicit(&rm->next_tag, 1, memory_order_relaxed) + 1;
  r->dtag_in = acxc_ctrl_data_tag(rm->cp, r->tag, 0);
  r->dtag_out = acxc_ctrl_data_tag(rm->cp, r->tag, 1);
  r->deadline_ns = acxi_deadline(rm->timeout_ns);
  acx_future_hold(r->future); /* one for the request, one for the caller */

  pthread_mutex_lock(&rm->lock);
  if (rm->nops >= MAX_IN_FLIGHT) {
    pthread_mutex_unlock(&rm->lock);
    ACX_WARN(COLL, "%s: %d requests are waiting for their owners already", fn, MAX_IN_FLIGHT);
    acx_future_release(r->future);
    rop_finish(r, ACX_ERR_QUEUE_FULL);
    return ACX_ERR_QUEUE_FULL;
  }
  r->next = rm->ops;
  rm->ops = r;
  rm->nops++;
  pthread_mutex_unlock(&rm->lock);

  acxi_ctrl_msg_t m = {.type = is_put ? ACXI_CTRL_PUT_REQ : ACXI_CTRL_GET_REQ,
                       .u.access = {.token = *token, .offset = offset, .bytes = bytes, .tag = r->tag}};
  st = acxc_ctrl_send(rm->cp, r->owner, &m, NULL, NULL);
  if (st != ACX_OK) {
    rop_t *again = rop_take(rm, r->tag);
    if (again) {
      acx_future_release(again->future); /* the caller's reference: the call fails */
      rop_finish(again, st);
    }
    return st;
  }
  *done = r->future;
  return ACX_OK;
}

acx_status_t acx_token_get(acx_world_t *world, const acx_token_t *token, uint64_t offset, uint64_t bytes,
                           acx_buffer_t *local, uint64_t local_offset, acx_future_t **done) {
  return access_remote(__func__, world, token, offset, bytes, local, local_offset, 0, done);
}

acx_status_t acx_token_put(acx_world_t *world, const acx_token_t *token, uint64_t offset, uint64_t bytes,
                           acx_buffer_t *local, uint64_t local_offset, acx_future_t **done) {
  return access_remote(__func__, world, token, offset, bytes, local, local_offset, 1, done);
}

static acx_status_t sync_wait(acx_world_t *world, acx_future_t *f, int64_t timeout_ns) {
  remote_t *rm = remote_of(world);
  int64_t t = timeout_ns >= 0 ? timeout_ns : (rm ? rm->timeout_ns : 0) + 2000000000LL;
  acx_status_t st = acx_future_wait(f, t, NULL, 0, NULL);
  acx_future_release(f);
  return st;
}

acx_status_t acx_token_get_sync(acx_world_t *world, const acx_token_t *token, uint64_t offset, uint64_t bytes,
                                acx_buffer_t *local, uint64_t local_offset, int64_t timeout_ns) {
  acx_future_t *f = NULL;
  ACXCHECK(acx_token_get(world, token, offset, bytes, local, local_offset, &f));
  return sync_wait(world, f, timeout_ns);
}

acx_status_t acx_token_put_sync(acx_world_t *world, const acx_token_t *token, uint64_t offset, uint64_t bytes,
                                acx_buffer_t *local, uint64_t local_offset, int64_t timeout_ns) {
  acx_future_t *f = NULL;
  ACXCHECK(acx_token_put(world, token, offset, bytes, local, local_offset, &f));
  return sync_wait(world, f, timeout_ns);
}

acx_status_t acx_token_local_buffer(const acx_token_t *token, unsigned access, acx_buffer_t **buf) {
  ACX_CHECK_NULL(token);
  ACX_CHECK_NULL(buf);
  *buf = NULL;
  int32_t rank = 0, node = 0;
  uint64_t epoch = 0;
  acxi_token_identity(&rank, &node, &epoch);
  if (token->owner_rank != rank) {
    ACX_WARN(COLL, "acx_token_local_buffer: the token names a buffer of rank %d; only this rank's (%d) buffers can be "
             "operands here (read another rank's with acx_token_get)", token->owner_rank, rank);
    return ACX_ERR_BAD_TOKEN;
  }
  return acxi_token_resolve(token, access, 0, token->bytes, buf);
}

acx_status_t acx_remote_stats(acx_world_t *world, acx_remote_stats_t *s) {
  ACX_CHECK_NULL(world);
  ACX_CHECK_NULL(s);
  ACX_CHECK_ARG(s->size == sizeof *s, "acx_remote_stats: stats->size is %zu, expected %zu", s->size, sizeof *s);
  remote_t *rm = remote_of(world);
  if (!rm) {
    ACX_WARN(COLL, "acx_remote_stats: acx_remote_start was not called on this world");
    return ACX_ERR_INVALID_STATE;
  }
  *s = (acx_remote_stats_t){.size = sizeof *s,
                            .gets = atomic_load(&rm->gets),
                            .puts = atomic_load(&rm->puts),
                            .served = atomic_load(&rm->served),
                            .refused = atomic_load(&rm->refused),
                            .failed = atomic_load(&rm->failed),
                            .bytes_in = atomic_load(&rm->bytes_in),
                            .bytes_out = atomic_load(&rm->bytes_out)};
  return ACX_OK;
}
