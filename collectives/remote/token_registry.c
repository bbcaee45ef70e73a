/* The owner side of tokens: the export table (random key -> held buffer and what was exported),
 * the rank/node/epoch identity the world stamps into exports, acxi_token_resolve, the check
 * every remote request passes before a byte moves, and admissions: a request that passed it
 * checks again when its bytes touch the buffer, and revocation (unexport, a new epoch) waits for
 * the accesses under way. One mutex guards table, identity and admissions: resolve is a hash
 * lookup and a few compares, far below the cost of the transfer it guards. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "runtime/device/buffer.h"
#include "runtime/base/clock.h"
#include "runtime/device/device_internal.h"
#include "runtime/base/log.h"
#include "runtime/proto/token_internal.h"

typedef struct export_entry {
  struct export_entry *next; /* bucket chain */
  uint64_t key;
  acx_buffer_t *buf; /* a reference, released by unexport */
  acx_token_t token; /* as handed out (checksum unset) */
} export_entry_t;

#define MIN_BUCKETS 64u

/* A request that passed the owner's check; its accesses to the buffer are bracketed by
 * acxi_token_access_begin/end. */
struct acxi_token_adm {
  struct acxi_token_adm *prev, *next; /* in `busy` while an access is under way */
  uint64_t key, epoch, buffer_id;
  const acx_buffer_t *buf; /* compared only: the admitted request holds its own reference */
  int busy;
  int64_t deadline_ns; /* of the access under way */
};

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reg_cond;  /* an access ended (CLOCK_MONOTONIC) */
static pthread_once_t cond_once = PTHREAD_ONCE_INIT;
static export_entry_t **buckets; /* power-of-two count; keys are random, so the low bits hash */
static size_t n_buckets, n_exports;
static int32_t id_rank, id_node;
static uint64_t id_epoch;
static acxi_token_adm_t *busy;   /* accesses under way */

/* A revocation waits this much past the latest deadline of the accesses it waits for: each
 * access ends by its own deadline plus the time to notice it passed. */
#define ACCESS_GRACE_NS 1000000000LL

static void cond_init(void) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&reg_cond, &ca);
  pthread_condattr_destroy(&ca);
}

void acxi_token_set_identity(int32_t rank, int32_t node, uint64_t epoch) {
  pthread_mutex_lock(&reg_lock);
  if (epoch != id_epoch) ACX_INFO(TOKEN, "token identity: rank %d node %d, epoch %" PRIu64 " -> %" PRIu64, rank, node, id_epoch, epoch);
  id_rank = rank;
  id_node = node;
  id_epoch = epoch;
  pthread_mutex_unlock(&reg_lock);
}

void acxi_token_identity(int32_t *rank, int32_t *node, uint64_t *epoch) {
  pthread_mutex_lock(&reg_lock);
  if (rank) *rank = id_rank;
  if (node) *node = id_node;
  if (epoch) *epoch = id_epoch;
  pthread_mutex_unlock(&reg_lock);
}

size_t acxi_token_export_count(void) {
  pthread_mutex_lock(&reg_lock);
  size_t n = n_exports;
  pthread_mutex_unlock(&reg_lock);
  return n;
}

/* ---- the table (reg_lock held) ---- */

static export_entry_t *find_locked(uint64_t key) {
  if (!n_buckets) return NULL;
  for (export_entry_t *e = buckets[key & (n_buckets - 1)]; e; e = e->next)
    if (e->key == key) return e;
  return NULL;
}

static acx_status_t grow_locked(void) {
  size_t nb = n_buckets ? 2 * n_buckets : MIN_BUCKETS;
  export_entry_t **nbk = calloc(nb, sizeof *nbk);
  if (!nbk) return ACX_ERR_NO_MEMORY;
  for (size_t i = 0; i < n_buckets; i++) {
    for (export_entry_t *e = buckets[i], *next; e; e = next) {
      next = e->next;
      e->next = nbk[e->key & (nb - 1)];
      nbk[e->key & (nb - 1)] = e;
    }
  }
  free(buckets);
  buckets = nbk;
  n_buckets = nb;
  return ACX_OK;
}

static int same_device(const acx_token_t *a, const acx_token_t *b) {
  return a->devid_type == b->devid_type && memcmp(&a->device, &b->device, sizeof a->device) == 0;
}

/* 64 random bits from the kernel's CSPRNG: a key must not be guessable from earlier keys. */
static acx_status_t random_key(uint64_t *key) {
  uint8_t b[8];
  size_t got = 0;
  while (got < sizeof b) {
    ssize_t n = getrandom(b + got, sizeof b - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      ACX_WARN(TOKEN, "acx_buffer_export: getrandom failed: %s", strerror(errno));
      return ACX_ERR_SYSTEM;
    }
    got += (size_t)n;
  }
  *key = acxi_get_le64(b);
  return ACX_OK;
}

/* The device identity of an export. The rank knows a GPU's PCI bus id when the device was opened
 * by one; otherwise (host kind, or a GPU chosen by ordinal) the token says NONE and the key alone
 * ties it to the export. */
static void device_identity(acx_device_t *dev, acx_token_t *t) {
  t->devid_type = ACX_TOKEN_DEVID_NONE;
  memset(&t->device, 0, sizeof t->device);
  if (dev->kind_id == ACXI_KIND_HOST || dev->pci_bus_id[0] == '\0') return;
  t->devid_type = ACX_TOKEN_DEVID_PCI;
  snprintf(t->device.pci_bus_id, sizeof t->device.pci_bus_id, "%s", dev->pci_bus_id);
  if (acxi_token_check_fields(t) == ACXI_TOKEN_BAD_DEVID) {
    ACX_INFO(TOKEN, "device PCI bus id '%s' is not in bus-id form; tokens name no device", dev->pci_bus_id);
    t->devid_type = ACX_TOKEN_DEVID_NONE;
    memset(&t->device, 0, sizeof t->device);
  }
}

/* ---- export / unexport ---- */

acx_status_t acx_buffer_export(acx_buffer_t *buf, unsigned rights, acx_token_t *token) {
  ACX_CHECK_NULL(buf);
  ACX_CHECK_NULL(token);
  ACX_CHECK_ARG(rights != 0 && (rights & ~ACX_TOKEN_RIGHTS_ALL) == 0,
                "acx_buffer_export: argument 'rights'=0x%x is not a non-empty set of ACX_TOKEN_READ|ACX_TOKEN_WRITE", rights);
  ACXCHECK(acxi_buffer_check(__func__, "buf", buf));
  acx_buffer_info_t info;
  ACXCHECK(acx_buffer_query(buf, &info));

  export_entry_t *e = calloc(1, sizeof *e);
  if (!e) return ACX_ERR_NO_MEMORY;
  acx_token_t *t = &e->token;
  t->version = ACX_TOKEN_VERSION;
  device_identity(info.device, t);
  t->buffer_id = info.id;
  t->generation = info.generation;
  t->bytes = info.bytes;
  t->dtype = info.dtype;
  t->rights = rights;
  acx_status_t st;
  pthread_mutex_lock(&reg_lock);
  /* A zero or already used key is drawn again; 8 draws all colliding means the generator is
   * broken, not unlucky. */
  for (int tries = 0;; tries++) {
    if (tries == 8) {
      ACX_WARN(TOKEN, "acx_buffer_export: 8 random keys in a row were 0 or in use: getrandom is not random");
      st = ACX_ERR_SYSTEM;
      goto err_unlock;
    }
    ACXCHECKGOTO(random_key(&t->key), st, err_unlock);
    if (t->key != 0 && !find_locked(t->key)) break;
  }
  if (n_exports >= 2 * n_buckets) ACXCHECKGOTO(grow_locked(), st, err_unlock);
  t->owner_rank = id_rank;
  t->node = id_node;
  t->epoch = id_epoch;
  acx_buffer_hold(buf);
  e->buf = buf;
  e->key = t->key;
  e->next = buckets[e->key & (n_buckets - 1)];
  buckets[e->key & (n_buckets - 1)] = e;
  n_exports++;
  *token = *t;
  pthread_mutex_unlock(&reg_lock);
  ACX_TRACE(TOKEN, "exported buffer %" PRIu64 " (generation %" PRIu64 ", %" PRIu64 " bytes, rights 0x%x) at epoch %" PRIu64,
            t->buffer_id, t->generation, t->bytes, rights, t->epoch);
  return ACX_OK;

err_unlock:
  pthread_mutex_unlock(&reg_lock);
  free(e);
  return st;
}

/* Waits (reg_lock held) until no access under way matches (buf, or an epoch older than
 * `epoch` when buf is NULL), or until ACCESS_GRACE_NS past the latest of their deadlines.
 * ACX_OK, or ACX_ERR_TIMEOUT with *left the accesses still under way. */
static acx_status_t wait_accesses_locked(const acx_buffer_t *buf, uint64_t epoch, int64_t cap_ns, int *left) {
  pthread_once(&cond_once, cond_init);
  for (;;) {
    int n = 0;
    int64_t until = 0;
    for (acxi_token_adm_t *a = busy; a; a = a->next) {
      if (buf ? a->buf != buf : a->epoch >= epoch) continue;
      n++;
      if (a->deadline_ns + ACCESS_GRACE_NS > until) until = a->deadline_ns + ACCESS_GRACE_NS;
    }
    *left = n;
    if (n == 0) return ACX_OK;
    if (cap_ns > 0 && until > cap_ns) until = cap_ns;
    int64_t now = acxi_now_ns();
    if (now >= until) return ACX_ERR_TIMEOUT;
    struct timespec ts = acxi_ts_from_ns(until);
    pthread_cond_timedwait(&reg_cond, &reg_lock, &ts);
  }
}

acx_status_t acx_buffer_unexport(acx_buffer_t *buf) {
  ACX_CHECK_NULL(buf);
  export_entry_t *revoked = NULL;
  size_t n = 0;
  pthread_mutex_lock(&reg_lock);
  for (size_t i = 0; i < n_buckets; i++) {
    for (export_entry_t **pp = &buckets[i]; *pp;) {
      export_entry_t *e = *pp;
      if (e->buf == buf) {
        *pp = e->next;
        e->next = revoked;
        revoked = e;
        n++;
      } else {
        pp = &e->next;
      }
    }
  }
  n_exports -= n;
  /* From here no admitted request starts an access (its key is gone); the ones under way end
   * before this returns: by their own deadlines, which ACX_REMOTE_TIMEOUT bounds. */
  int left = 0;
  acx_status_t st = n ? wait_accesses_locked(buf, 0, 0, &left) : ACX_OK;
  pthread_mutex_unlock(&reg_lock);
  if (n == 0) {
    ACX_WARN(TOKEN, "acx_buffer_unexport: argument 'buf' has no export");
    return ACX_ERR_NOT_FOUND;
  }
  if (st != ACX_OK)
    ACX_WARN(TOKEN, "acx_buffer_unexport: revoked, but %d remote access(es) admitted before the call were still "
             "under way past their deadline", left);
  /* Released outside the lock: the last reference sends a FREE to the executor. */
  for (export_entry_t *e = revoked, *next; e; e = next) {
    next = e->next;
    ACX_TRACE(TOKEN, "revoked an export of buffer %" PRIu64, e->token.buffer_id);
    acx_buffer_release(e->buf);
    free(e);
  }
  return st;
}

/* ---- the owner's check ---- */

static const char *rights_str(unsigned r) {
  static const char *const names[4] = {"nothing", "read", "write", "read+write"};
  return names[r & ACX_TOKEN_RIGHTS_ALL];
}

/* Which field of t differs from the export its key names; NULL when none does. */
static const char *forged_field(const acx_token_t *t, const acx_token_t *x) {
  if (t->buffer_id != x->buffer_id) return "buffer id";
  if (!same_device(t, x)) return "device";
  if (t->generation != x->generation) return "generation";
  if (t->epoch != x->epoch) return "epoch";
  if (t->bytes != x->bytes) return "size";
  if (t->dtype != x->dtype) return "dtype";
  if ((t->rights & ~x->rights) != 0) return "rights";
  return NULL;
}

acx_status_t acxi_token_resolve(const acx_token_t *t, unsigned access, uint64_t offset, uint64_t bytes,
                                acx_buffer_t **buf) {
  ACX_CHECK_NULL(t);
  ACX_CHECK_NULL(buf);
  ACX_CHECK_ARG(access != 0 && (access & ~ACX_TOKEN_RIGHTS_ALL) == 0,
                "acxi_token_resolve: argument 'access'=0x%x is not a non-empty set of ACX_TOKEN_READ|ACX_TOKEN_WRITE", access);
  *buf = NULL;
  pthread_mutex_lock(&reg_lock);
  if (t->owner_rank != id_rank || t->node != id_node) {
    int32_t r = id_rank, n = id_node;
    pthread_mutex_unlock(&reg_lock);
    ACX_WARN(TOKEN, "token of buffer %" PRIu64 " belongs to rank %d (node %d), presented to rank %d (node %d): misrouted",
             t->buffer_id, t->owner_rank, t->node, r, n);
    return ACX_ERR_BAD_TOKEN;
  }
  if (t->epoch != id_epoch) {
    uint64_t now = id_epoch;
    pthread_mutex_unlock(&reg_lock);
    ACX_WARN(TOKEN, "token of buffer %" PRIu64 " is from world epoch %" PRIu64 ", the world is at %" PRIu64 ": stale",
             t->buffer_id, t->epoch, now);
    return ACX_ERR_STALE_TOKEN;
  }
  export_entry_t *e = find_locked(t->key);
  if (!e) {
    /* Tell a wrong key for a live export (someone guessing) from a revoked export. */
    int live = 0;
    for (size_t i = 0; i < n_buckets && !live; i++)
      for (export_entry_t *x = buckets[i]; x && !live; x = x->next)
        live = x->token.buffer_id == t->buffer_id && same_device(&x->token, t) && x->token.epoch == t->epoch;
    pthread_mutex_unlock(&reg_lock);
    if (live) {
      ACX_WARN(TOKEN, "token of buffer %" PRIu64 ": wrong key for its export: denied", t->buffer_id);
      return ACX_ERR_DENIED;
    }
    ACX_WARN(TOKEN, "token of buffer %" PRIu64 ": no export with its key (revoked, or never made by this rank): stale",
             t->buffer_id);
    return ACX_ERR_STALE_TOKEN;
  }
  const char *forged = forged_field(t, &e->token);
  if (forged) {
    pthread_mutex_unlock(&reg_lock);
    ACX_WARN(TOKEN, "token of buffer %" PRIu64 ": its %s differs from the export its key names: denied", t->buffer_id,
             forged);
    return ACX_ERR_DENIED;
  }
  acx_buffer_t *b = e->buf;
  acx_buffer_hold(b);
  pthread_mutex_unlock(&reg_lock);

  acx_status_t st;
  acx_buffer_info_t info;
  uint64_t gen = 0;
  ACXCHECKGOTO(acx_buffer_query(b, &info), st, err_release_buf);
  ACXCHECKGOTO(acx_device_generation(info.device, &gen), st, err_release_buf);
  if (gen != t->generation) {
    ACX_WARN(TOKEN, "token of buffer %" PRIu64 " is from device generation %" PRIu64 ", the device is at %" PRIu64 ": stale",
             t->buffer_id, t->generation, gen);
    st = ACX_ERR_STALE_TOKEN;
    goto err_release_buf;
  }
  if (acxi_buffer_check(NULL, NULL, b) != ACX_OK) {
    ACX_WARN(TOKEN, "token of buffer %" PRIu64 ": the buffer was freed or its device closed: stale", t->buffer_id);
    st = ACX_ERR_STALE_TOKEN;
    goto err_release_buf;
  }
  if ((access & ~t->rights) != 0) {
    ACX_WARN(TOKEN, "token of buffer %" PRIu64 " grants %s, the request needs %s: denied", t->buffer_id,
             rights_str(t->rights), rights_str(access));
    st = ACX_ERR_DENIED;
    goto err_release_buf;
  }
  if (offset > t->bytes || bytes > t->bytes - offset) {
    ACX_WARN(TOKEN, "token of buffer %" PRIu64 ": range [%" PRIu64 ", +%" PRIu64 ") exceeds its %" PRIu64 " bytes",
             t->buffer_id, offset, bytes, t->bytes);
    st = ACX_ERR_OUT_OF_RANGE;
    goto err_release_buf;
  }
  size_t es = acx_dtype_size(t->dtype); /* >= 1: the dtype matched the export's */
  if (es == 0) es = 1;
  if (offset % es != 0 || bytes % es != 0) {
    ACX_WARN(TOKEN, "token of buffer %" PRIu64 ": offset %" PRIu64 " and size %" PRIu64 " must be multiples of the %s size %zu",
             t->buffer_id, offset, bytes, acx_dtype_name(t->dtype), es);
    st = ACX_ERR_INVALID_ARG;
    goto err_release_buf;
  }
  *buf = b;
  return ACX_OK;

err_release_buf:
  acx_buffer_release(b);
  return st;
}

/* ---- admissions: the check again when the bytes move ---- */

acx_status_t acxi_token_admit(const acx_token_t *t, unsigned access, uint64_t offset, uint64_t bytes,
                              acx_buffer_t **buf, acxi_token_adm_t **adm) {
  ACX_CHECK_NULL(adm);
  *adm = NULL;
  acxi_token_adm_t *a = calloc(1, sizeof *a);
  if (!a) return ACX_ERR_NO_MEMORY;
  acx_status_t st = acxi_token_resolve(t, access, offset, bytes, buf);
  if (st != ACX_OK) {
    free(a);
    return st;
  }
  a->key = t->key;
  a->epoch = t->epoch;
  a->buffer_id = t->buffer_id;
  a->buf = *buf;
  *adm = a;
  return ACX_OK;
}

acx_status_t acxi_token_access_begin(acxi_token_adm_t *a, int64_t deadline_ns) {
  ACX_CHECK_NULL(a);
  pthread_mutex_lock(&reg_lock);
  export_entry_t *e = find_locked(a->key);
  const char *why = NULL;
  uint64_t now_epoch = id_epoch;
  if (!e || e->buf != a->buf) why = "its export was revoked";
  else if (a->epoch != id_epoch) why = "the world epoch moved";
  if (!why) {
    a->busy = 1;
    a->deadline_ns = deadline_ns;
    a->prev = NULL;
    a->next = busy;
    if (busy) busy->prev = a;
    busy = a;
  }
  pthread_mutex_unlock(&reg_lock);
  if (why) {
    ACX_WARN(TOKEN, "token of buffer %" PRIu64 " (epoch %" PRIu64 ", now %" PRIu64 "): %s after the request was "
             "admitted: stale, nothing moved", a->buffer_id, a->epoch, now_epoch, why);
    return ACX_ERR_STALE_TOKEN;
  }
  return ACX_OK;
}

void acxi_token_access_end(acxi_token_adm_t *a) {
  if (!a) return;
  pthread_once(&cond_once, cond_init);
  pthread_mutex_lock(&reg_lock);
  if (a->busy) {
    if (a->prev) a->prev->next = a->next;
    else busy = a->next;
    if (a->next) a->next->prev = a->prev;
    a->prev = a->next = NULL;
    a->busy = 0;
    pthread_cond_broadcast(&reg_cond);
  }
  pthread_mutex_unlock(&reg_lock);
}

void acxi_token_adm_free(acxi_token_adm_t *a) {
  if (!a) return;
  acxi_token_access_end(a);
  free(a);
}

acx_status_t acxi_token_drain_epoch(uint64_t epoch, int64_t deadline_ns) {
  pthread_mutex_lock(&reg_lock);
  int left = 0;
  acx_status_t st = wait_accesses_locked(NULL, epoch, deadline_ns, &left);
  pthread_mutex_unlock(&reg_lock);
  if (st != ACX_OK)
    ACX_WARN(TOKEN, "world epoch %" PRIu64 ": %d remote access(es) admitted at an older epoch still under way at the "
             "deadline", epoch, left);
  return st;
}
