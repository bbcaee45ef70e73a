/* Registered buffers (issue 16's mapped path; coll_internal.h documents the calls, and
 * docs/collectives.md, "Registered buffers", the design they serve).
 *
 * Why a collective registration: where K ranks share a GPU, the two-shot with groups stages every
 * input through the ranks' areas because no executor can reach another rank's buffers; at K = 4
 * that traffic alone bounds it at about half of one rank per GPU (docs/collectives.md, "Why staging
 * cannot reach 0.9x"). Mapping a group peer's buffer needs its handle exchanged once and, under
 * CUDA IPC, every mapping closed before its owner frees the memory. A collective call, as NCCL's
 * buffer registration and MPI's windows are, settles both: the handles travel once, and the
 * deregistration's agreement orders every close before any free, with no per-operation exchange
 * and no acknowledgements with deadlines.
 *
 * What a registration holds: the buffer (a reference, and its `registered` count, which refuses
 * acx_buffer_free), the set of the own all-reduce it was made for (its id: a rebuild makes a new
 * set, and the registration stale), and this rank's executor's mappings of its group peers'
 * buffers (imports, acx_buffer_t of this device). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/coll_internal.h"
#include "runtime/base/clock.h"
#include "runtime/base/log.h"
#include "runtime/device/buffer.h"
#include "runtime/device/device_internal.h"
#include "runtime/proto/peer_ops.h"

struct acx_coll_reg {
  acx_coll_t *coll;
  acx_buffer_t *buf; /* held */
  uint64_t set_id;   /* the own all-reduce's set it maps for (0: none, no group peers) */
  int index;
  int slot;          /* its entry in the executors' registration tables (peer_ops.h; -1: none, all taken) */
  int npeers;
  int peer[ACXP_MAX_RANKS];          /* world ranks of this rank's group, this rank excepted */
  acx_buffer_t *imp[ACXP_MAX_RANKS]; /* their buffers, mapped by this rank's executor */
  struct acx_coll_reg *next;
};

/* Closes this rank's mappings (each waits for its executor: stream-ordered behind the work that
 * uses it). A mapping of a lost executor generation is gone with it. */
static void close_imports(acxc_reg_t *r, int64_t deadline) {
  for (int i = 0; i < r->npeers; i++) {
    if (!r->imp[i]) continue;
    acx_status_t st = acx_buffer_free(r->imp[i], acxi_left_ns(deadline));
    if (st != ACX_OK)
      ACX_WARN(COLL, "registration %d: closing this executor's mapping of rank %d's buffer: %s", r->index, r->peer[i],
               acx_status_name(st));
    acx_buffer_release(r->imp[i]);
    r->imp[i] = NULL;
  }
}

/* The lowest registration slot no registration of c holds, or -1 (under reg_lock). Every rank
 * holds the same registrations (the calls are collective), so every rank picks the same. */
static int free_slot(acx_coll_t *c) {
  for (int slot = 0; slot < ACXP_REG_MAX; slot++) {
    int used = 0;
    for (const acxc_reg_t *q = c->regs; q && !used; q = q->next) used = q->slot == slot;
    if (!used) return slot;
  }
  return -1;
}

/* Writes (imp non-NULL) or clears this rank's executor's table entries of r's slot. */
static acx_status_t table(acxc_reg_t *r, int set, int64_t deadline) {
  acx_status_t st = ACX_OK;
  for (int i = 0; st == ACX_OK && i < r->npeers && r->slot >= 0; i++)
    st = acxc_peer_reg(r->coll, r->set_id, r->slot, r->peer[i], set ? r->imp[i] : NULL, deadline);
  return st;
}

/* This rank's checks of its argument (its failure is every rank's, through the agreement). */
static acx_status_t check_buf(const char *fn, acx_coll_t *c, acx_buffer_t *buf) {
  if (!buf) {
    ACX_WARN(COLL, "%s: argument 'buf' is NULL", fn);
    return ACX_ERR_NULL_ARG;
  }
  ACXCHECK(acxi_buffer_check(fn, "buf", buf));
  if (buf->dev != c->dev) {
    ACX_WARN(COLL, "%s: argument 'buf' (buffer %" PRIu64 ") is on another device than the coll's", fn, buf->id);
    return ACX_ERR_INVALID_ARG;
  }
  if (buf->share != ACXI_SHARE_EXPORT) {
    ACX_WARN(COLL, "%s: argument 'buf' (buffer %" PRIu64 ") is not shareable: allocate it with ACX_MEM_SHAREABLE (the "
             "stream-ordered pool's memory cannot be mapped by other executors)", fn, buf->id);
    return ACX_ERR_INVALID_ARG;
  }
  return acx_coll_state(c);
}

acx_status_t acxc_coll_register(acx_coll_t *c, acx_buffer_t *buf, int64_t timeout_ns, acxc_reg_t **out) {
  static const char fn[] = "acxc_coll_register";
  ACX_CHECK_NULL_IN(fn, c, "coll");
  ACX_CHECK_NULL_IN(fn, out, "reg");
  *out = NULL;
  int64_t deadline = acxi_deadline(timeout_ns >= 0 ? timeout_ns : c->timeout_ns);
  acxc_reg_t *r = calloc(1, sizeof *r);
  acx_status_t st = r ? check_buf(fn, c, buf) : ACX_ERR_NO_MEMORY;
  /* The groups are agreed (every rank derives them from the same colors): every rank with groups
   * has group peers, and every rank sees the same, so all take the same steps below. */
  int peers[ACXP_MAX_RANKS];
  uint64_t set = 0;
  int np = acxc_peer_group(c, peers, ACXP_MAX_RANKS, &set);
  if (r) {
    r->coll = c;
    r->set_id = np > 0 ? set : 0;
    pthread_mutex_lock(&c->reg_lock);
    r->slot = np > 0 ? free_slot(c) : -1;
    pthread_mutex_unlock(&c->reg_lock);
  }
  int tabled = 0; /* this executor's table may hold entries of r (cleared before the mappings close) */
  if (np > 0) {
    acxi_ipc_handle_t h, *all = calloc((size_t)c->size, sizeof *all);
    memset(&h, 0, sizeof h);
    if (!all) { /* before any exchange: the others fail at their deadline */
      free(r);
      return ACX_ERR_NO_MEMORY;
    }
    if (st == ACX_OK) st = acxi_buffer_ipc_export(buf, &h, acxi_left_ns(deadline));
    /* Every rank takes part in the exchange, an empty handle where its own steps failed. */
    acx_status_t x = acxc_coll_allgather(c, &h, sizeof h, all, deadline, fn);
    if (x != ACX_OK) {
      free(all);
      free(r);
      return x;
    }
    acxi_ipc_handle_t none;
    memset(&none, 0, sizeof none);
    for (int i = 0; st == ACX_OK && i < np; i++) {
      r->peer[i] = peers[i];
      r->npeers = i + 1;
      if (!memcmp(&all[peers[i]], &none, sizeof none)) {
        st = ACX_ERR_PEER_LOST; /* that rank's own steps failed: its log says why */
        break;
      }
      st = acxi_buffer_ipc_import(c->dev, &all[peers[i]], ACX_DTYPE_BYTE, acxi_left_ns(deadline), &r->imp[i]);
      if (st != ACX_OK)
        ACX_WARN(COLL, "%s: rank %d's buffer cannot be mapped by this rank's executor: %s", fn, peers[i],
                 acx_status_name(st));
    }
    free(all);
    /* The executor's table, for the kernels that read through it (after every import worked). */
    if (st == ACX_OK) {
      tabled = 1;
      if ((st = table(r, 1, deadline)) != ACX_OK)
        ACX_WARN(COLL, "%s: this rank's executor did not take the registration's table entries: %s", fn,
                 acx_status_name(st));
    }
  }
  int ok = 0;
  acx_status_t ag = acxc_coll_agree_min(c, st == ACX_OK, &ok);
  if (ag != ACX_OK || !ok) {
    if (tabled) (void)table(r, 0, deadline);
    if (r) close_imports(r, deadline);
    free(r);
    /* Every mapping made is closed before any rank returns (and may free its buffer): every rank
     * takes this second step, whatever failed on it. */
    int dummy = 0;
    if (np > 0 && ag == ACX_OK) (void)acxc_coll_agree_min(c, 1, &dummy);
    if (st == ACX_OK)
      ACX_WARN(COLL, "%s: %s", fn, ag != ACX_OK ? "the ranks could not agree" : "another rank's registration failed "
                                                                                  "(its log says why)");
    return st != ACX_OK ? st : ag != ACX_OK ? ag : ACX_ERR_PEER_LOST;
  }
  r->buf = buf;
  acx_buffer_hold(buf);
  atomic_fetch_add_explicit(&buf->registered, 1, memory_order_acq_rel);
  pthread_mutex_lock(&c->reg_lock);
  r->index = c->reg_next++;
  r->next = c->regs;
  c->regs = r;
  pthread_mutex_unlock(&c->reg_lock);
  if (np > 0 && r->slot < 0)
    ACX_WARN(COLL, "registration %d: all %d table slots are taken: buffer %" PRIu64 " is mapped but the own "
             "all-reduce stages it (deregister another to free one)", r->index, ACXP_REG_MAX, buf->id);
  ACX_INFO(COLL, "registration %d (slot %d): buffer %" PRIu64 " (%zu bytes) mapped by %d group peer(s)' executors",
           r->index, r->slot, buf->id, buf->bytes, np);
  *out = r;
  return ACX_OK;
}

/* Takes r off its coll's list and lets its buffer go. */
static void unlink_free(acxc_reg_t *r) {
  acx_coll_t *c = r->coll;
  pthread_mutex_lock(&c->reg_lock);
  for (acxc_reg_t **pp = &c->regs; *pp; pp = &(*pp)->next)
    if (*pp == r) {
      *pp = r->next;
      break;
    }
  pthread_mutex_unlock(&c->reg_lock);
  atomic_fetch_sub_explicit(&r->buf->registered, 1, memory_order_acq_rel);
  acx_buffer_release(r->buf);
  free(r);
}

acx_status_t acxc_coll_deregister(acxc_reg_t *r, int64_t timeout_ns) {
  static const char fn[] = "acxc_coll_deregister";
  ACX_CHECK_NULL_IN(fn, r, "reg");
  acx_coll_t *c = r->coll;
  int64_t deadline = acxi_deadline(timeout_ns >= 0 ? timeout_ns : c->timeout_ns);
  /* No kernel reads the entries once they are cleared (REG waits for the set's operations in
   * flight); a stale registration's set is gone with its table. */
  if (!acxc_reg_stale(r) && r->set_id) {
    acx_status_t ts = table(r, 0, deadline);
    if (ts != ACX_OK)
      ACX_WARN(COLL, "%s: registration %d: clearing this executor's table entries: %s", fn, r->index,
               acx_status_name(ts));
  }
  close_imports(r, deadline);
  /* Every rank has closed its mappings before any buffer goes. */
  int ok = 0;
  acx_status_t st = acxc_coll_agree_min(c, 1, &ok);
  if (st != ACX_OK) {
    /* Whether every group peer has closed its mapping is unknown: the buffer stays registered (not
     * freeable, held) rather than risk a mapping of freed memory. A later call tries again. */
    ACX_WARN(COLL, "%s: registration %d: the ranks did not agree (%s): buffer %" PRIu64 " stays registered", fn,
             r->index, acx_status_name(st), r->buf->id);
    return st;
  }
  unlink_free(r);
  return ACX_OK;
}

acx_buffer_t *acxc_reg_peer(const acxc_reg_t *r, int peer) {
  if (!r || acxc_reg_stale(r)) return NULL;
  for (int i = 0; i < r->npeers; i++)
    if (r->peer[i] == peer) return r->imp[i];
  return NULL;
}

int acxc_reg_index(const acxc_reg_t *r) { return r ? r->index : -1; }

int acxc_reg_slot(const acxc_reg_t *r) { return r && !acxc_reg_stale(r) ? r->slot : -1; }

int acxc_reg_slot_of(acx_coll_t *c, const acx_buffer_t *buf) {
  int slot = -1;
  uint64_t of = 0;
  pthread_mutex_lock(&c->reg_lock);
  for (const acxc_reg_t *q = c->regs; q && slot < 0; q = q->next)
    if (q->buf == buf && q->slot >= 0) slot = q->slot, of = q->set_id;
  pthread_mutex_unlock(&c->reg_lock);
  if (slot < 0) return -1;
  /* Only a registration of the current set: a stale one (its set rebuilt) has no entries in the
   * new set's tables. */
  uint64_t set = 0;
  int peers[ACXP_MAX_RANKS];
  (void)acxc_peer_group(c, peers, ACXP_MAX_RANKS, &set);
  return of == set ? slot : -1;
}

int acxc_reg_stale(const acxc_reg_t *r) {
  if (!r || !r->set_id) return 0; /* nothing mapped: nothing to go stale */
  int peers[ACXP_MAX_RANKS];
  uint64_t set = 0;
  (void)acxc_peer_group(r->coll, peers, ACXP_MAX_RANKS, &set);
  return set != r->set_id;
}

void acxc_coll_regs_destroy(acx_coll_t *c, int64_t timeout_ns) {
  int64_t deadline = acxi_deadline(timeout_ns);
  pthread_mutex_lock(&c->reg_lock);
  acxc_reg_t *r = c->regs;
  int n = 0;
  for (acxc_reg_t *q = r; q; q = q->next) n++;
  pthread_mutex_unlock(&c->reg_lock);
  if (!n) return;
  /* Every rank registered as many (the calls are collective): all take this step alike. */
  ACX_WARN(COLL, "acx_coll_destroy: %d registration(s) left; they are closed with the coll", n);
  for (acxc_reg_t *q = r; q; q = q->next) {
    if (q->set_id && !acxc_reg_stale(q)) (void)table(q, 0, deadline); /* before the mappings close */
    close_imports(q, deadline);
  }
  int ok = 0;
  if (acxc_coll_agree_min(c, 1, &ok) != ACX_OK) {
    ACX_WARN(COLL, "acx_coll_destroy: the ranks did not agree on closing the registrations: their buffers stay "
             "registered (not freeable)");
    pthread_mutex_lock(&c->reg_lock);
    c->regs = NULL; /* the buffers keep their `registered` count and the hold: never freed, never reused */
    pthread_mutex_unlock(&c->reg_lock);
    while (r) {
      acxc_reg_t *next = r->next;
      free(r);
      r = next;
    }
    return;
  }
  while (c->regs) unlink_free(c->regs);
}

acx_status_t acx_coll_register(acx_coll_t *coll, acx_buffer_t *buf, int64_t timeout_ns, acx_coll_reg_t **reg) {
  return acxc_coll_register(coll, buf, timeout_ns, reg);
}

acx_status_t acx_coll_deregister(acx_coll_reg_t *reg, int64_t timeout_ns) { return acxc_coll_deregister(reg, timeout_ns); }
