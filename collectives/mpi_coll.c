/* Collectives of the host device kind: the rank runs them with MPI on host-staged copies of the
 * buffers (read from the executor, nonblocking MPI on a duplicate of the world's communicator,
 * written back). One worker thread per coll issues every MPI call of the coll, in submission
 * order, and enforces each request's deadline while it polls; f16 and bf16 reduce through user
 * ops computing in float, avg divides the sum (integer division for integer types, as NCCL). */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collectives/coll_internal.h"
#include "runtime/base/half.h"
#include "collectives/world_internal.h"
#include "runtime/base/clock.h"
#include "runtime/device/device_internal.h"
#include "runtime/base/log.h"
#include "runtime/actor/future.h"

#define P2P_TAG 0x6163 /* one tag: MPI matches in order per (peer, tag, comm), as NCCL does */

typedef struct mop {
  acxc_opdesc_t d; /* buffers held */
  void *sbuf, *rbuf;
  size_t sn, rn; /* elements staged */
} mop_t;

typedef struct mreq {
  struct mreq *next;
  int nops;
  mop_t *ops;
  MPI_Request *reqs;
  acx_future_t **mfuts; /* members' futures (group), held; may be NULL */
  acx_future_t *future; /* the request's own, held; NULL: fire-and-forget */
  int64_t deadline_ns;
  int peer;             /* the own all-reduce (peer_coll.c): one operation, run by the executors */
  acx_future_t *pf;     /* ... its reply once sent (the worker's, till it finishes the request) */
} mreq_t;

/* Own all-reduces the worker keeps in flight at most (the executor's set holds ACXP_PENDING). */
#define ACXC_PEER_WINDOW 64

struct acxc_mpi {
  MPI_Comm comm;
  MPI_Op hops[2][4]; /* [bf16][sum, prod, max, min] */
  pthread_t thread;
  int thread_live;
  pthread_mutex_t lock;
  pthread_cond_t cond;  /* work queued, or stop */
  pthread_cond_t idle;  /* a request finished */
  mreq_t *head, *tail;
  int stop;
  int waiters; /* threads inside acxc_mpi_synchronize: acxc_mpi_destroy frees nothing before they left */
  uint64_t submitted, finished;
  acx_status_t unreported;
  mreq_t *orphans; /* abandoned at their deadline: MPI may still write their staging buffers */
};

/* ------------------------------------------------------------------------------------------ */
/* f16 / bf16 reduction ops                                                                   */

#define HALF_OP(name, to_f, from_f, expr)                                                          \
  static void name(void *in, void *inout, int *len, MPI_Datatype *t) {                            \
    (void)t;                                                                                       \
    const uint16_t *a = in;                                                                        \
    uint16_t *b = inout;                                                                           \
    for (int i = 0; i < *len; i++) {                                                               \
      float x = to_f(a[i]), y = to_f(b[i]);                                                        \
      b[i] = from_f(expr);                                                                         \
    }                                                                                              \
  }
HALF_OP(h_sum, acxc_half_to_float, acxc_float_to_half, x + y)
HALF_OP(h_prod, acxc_half_to_float, acxc_float_to_half, x *y)
HALF_OP(h_max, acxc_half_to_float, acxc_float_to_half, x > y ? x : y)
HALF_OP(h_min, acxc_half_to_float, acxc_float_to_half, x < y ? x : y)
HALF_OP(b_sum, acxc_bf16_to_float, acxc_float_to_bf16, x + y)
HALF_OP(b_prod, acxc_bf16_to_float, acxc_float_to_bf16, x *y)
HALF_OP(b_max, acxc_bf16_to_float, acxc_float_to_bf16, x > y ? x : y)
HALF_OP(b_min, acxc_bf16_to_float, acxc_float_to_bf16, x < y ? x : y)

static MPI_Datatype mpi_type(acx_dtype_t d) {
  switch (d) {
  case ACX_DTYPE_I8: return MPI_INT8_T;
  case ACX_DTYPE_U8: return MPI_UINT8_T;
  case ACX_DTYPE_I32: return MPI_INT32_T;
  case ACX_DTYPE_U32: return MPI_UINT32_T;
  case ACX_DTYPE_I64: return MPI_INT64_T;
  case ACX_DTYPE_U64: return MPI_UINT64_T;
  case ACX_DTYPE_F16:
  case ACX_DTYPE_BF16: return MPI_UINT16_T;
  case ACX_DTYPE_F32: return MPI_FLOAT;
  case ACX_DTYPE_F64: return MPI_DOUBLE;
  default: return MPI_BYTE;
  }
}

static MPI_Op mpi_op(const acxc_mpi_t *m, acx_dtype_t d, acx_redop_t op) {
  int k = op == ACX_REDOP_AVG ? ACX_REDOP_SUM : (int)op; /* avg: sum, then divide */
  if (d == ACX_DTYPE_F16 || d == ACX_DTYPE_BF16) return m->hops[d == ACX_DTYPE_BF16][k];
  static const MPI_Op native[4] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN};
  return native[k];
}

MPI_Comm acxc_mpi_comm(const acx_coll_t *c) { return c->mpi ? c->mpi->comm : MPI_COMM_NULL; }
MPI_Datatype acxc_mpi_dtype(acx_dtype_t d) { return mpi_type(d); }
MPI_Op acxc_mpi_redop(const acx_coll_t *c, acx_dtype_t d, acx_redop_t op) { return mpi_op(c->mpi, d, op); }

void acxc_mpi_divide(void *buf, acx_dtype_t d, size_t count, int n) {
  for (size_t i = 0; i < count; i++) {
    switch (d) {
    case ACX_DTYPE_I8: ((int8_t *)buf)[i] = (int8_t)(((int8_t *)buf)[i] / n); break;
    case ACX_DTYPE_U8: ((uint8_t *)buf)[i] = (uint8_t)(((uint8_t *)buf)[i] / (unsigned)n); break;
    case ACX_DTYPE_I32: ((int32_t *)buf)[i] /= n; break;
    case ACX_DTYPE_U32: ((uint32_t *)buf)[i] /= (uint32_t)n; break;
    case ACX_DTYPE_I64: ((int64_t *)buf)[i] /= n; break;
    case ACX_DTYPE_U64: ((uint64_t *)buf)[i] /= (uint64_t)n; break;
    case ACX_DTYPE_F16: ((uint16_t *)buf)[i] = acxc_float_to_half(acxc_half_to_float(((uint16_t *)buf)[i]) / (float)n); break;
    case ACX_DTYPE_BF16: ((uint16_t *)buf)[i] = acxc_float_to_bf16(acxc_bf16_to_float(((uint16_t *)buf)[i]) / (float)n); break;
    case ACX_DTYPE_F32: ((float *)buf)[i] /= (float)n; break;
    case ACX_DTYPE_F64: ((double *)buf)[i] /= (double)n; break;
    default: break;
    }
  }
}

/* ------------------------------------------------------------------------------------------ */
/* one request                                                                                */

static void release_op(mop_t *o, int free_staging) {
  acx_buffer_release(o->d.send);
  if (o->d.recv != o->d.send) acx_buffer_release(o->d.recv);
  if (free_staging) {
    free(o->sbuf);
    free(o->rbuf);
  }
}

static void req_free(mreq_t *r, int free_staging) {
  for (int i = 0; i < r->nops; i++) release_op(&r->ops[i], free_staging);
  free(r->ops);
  free(r->reqs);
  free(r->mfuts);
  free(r);
}

static void req_complete(acx_coll_t *c, mreq_t *r, acx_status_t st) {
  /* Done with the buffers (the results written back, or failed; an abandoned MPI request keeps only
   * its staging): the buffer operations ordered after it may go (acxi_buffer_coll_begin), before
   * its future says so. Once per request: every path completes it once. */
  for (int i = 0; i < r->nops; i++) {
    acxi_buffer_coll_end(r->ops[i].d.send);
    if (r->ops[i].d.recv != r->ops[i].d.send) acxi_buffer_coll_end(r->ops[i].d.recv);
  }
  /* A failure that broke the coll reads as its callers see every failure of a broken coll
   * (ACX_ERR_WORLD_REBUILDING under supervision: coll_internal.h). */
  if (st != ACX_OK && acxc_coll_cause(c) != ACX_OK) st = acxc_coll_user_status(c, st);
  int told = 0;
  for (int i = 0; r->mfuts && i < r->nops; i++)
    if (r->mfuts[i]) {
      acx_future_complete(r->mfuts[i], st, NULL, 0);
      acx_future_release(r->mfuts[i]);
      told = 1;
    }
  if (r->future) {
    acx_future_complete(r->future, st, NULL, 0);
    acx_future_release(r->future);
    told = 1;
  }
  if (!told && st != ACX_OK) {
    pthread_mutex_lock(&c->mpi->lock);
    if (c->mpi->unreported == ACX_OK) c->mpi->unreported = st;
    pthread_mutex_unlock(&c->mpi->lock);
    ACX_WARN(COLL, "a fire-and-forget collective failed: %s (reported by acx_coll_synchronize)", acx_status_name(st));
  }
}

/* Elements staged for send and receive, and where the input comes from. */
static void shape(const acx_coll_t *c, mop_t *o) {
  size_t n = (size_t)c->size, k = o->d.count;
  switch (o->d.op) {
  case ACXC_OP_ALLREDUCE: o->sn = k, o->rn = k; break;
  case ACXC_OP_BROADCAST: o->sn = 0, o->rn = k; break;
  case ACXC_OP_REDUCE: o->sn = k, o->rn = k; break;
  case ACXC_OP_ALLGATHER: o->sn = k, o->rn = n * k; break;
  case ACXC_OP_REDUCE_SCATTER: o->sn = n * k, o->rn = k; break;
  case ACXC_OP_SEND: o->sn = k, o->rn = 0; break;
  case ACXC_OP_RECV: o->sn = 0, o->rn = k; break;
  case ACXC_OP_ALLTOALL: o->sn = n * k, o->rn = n * k; break;
  default: o->sn = o->rn = 0;
  }
}

/* Stages the inputs and posts the MPI operation. */
static acx_status_t post(acx_coll_t *c, mop_t *o, MPI_Request *req, int64_t tmo) {
  acxc_mpi_t *m = c->mpi;
  const acxc_opdesc_t *d = &o->d;
  size_t es = acx_dtype_size(d->dtype);
  int root = d->peer == c->rank;
  shape(c, o);
  o->sbuf = o->sn ? malloc(o->sn * es) : NULL;
  o->rbuf = o->rn ? malloc(o->rn * es) : NULL;
  if ((o->sn && !o->sbuf) || (o->rn && !o->rbuf)) {
    ACX_WARN(COLL, "out of host memory staging %zu + %zu elements", o->sn, o->rn);
    return ACX_ERR_NO_MEMORY;
  }
  acx_status_t st = ACX_OK;
  if (d->op == ACXC_OP_ALLGATHER && d->send == d->recv)
    st = acx_buffer_read(d->recv, (size_t)c->rank * d->count * es, o->sbuf, o->sn * es, d->stream, tmo);
  else if (d->op == ACXC_OP_BROADCAST && root)
    st = acx_buffer_read(d->send, 0, o->rbuf, o->rn * es, d->stream, tmo);
  else if (o->sn)
    st = acx_buffer_read(d->send, 0, o->sbuf, o->sn * es, d->stream, tmo);
  if (st != ACX_OK) return st;
  MPI_Datatype t = mpi_type(d->dtype);
  MPI_Op op = (d->op == ACXC_OP_ALLREDUCE || d->op == ACXC_OP_REDUCE || d->op == ACXC_OP_REDUCE_SCATTER)
                  ? mpi_op(m, d->dtype, d->redop) : MPI_OP_NULL;
  int k = (int)d->count, r;
  switch (d->op) {
  case ACXC_OP_ALLREDUCE: r = MPI_Iallreduce(o->sbuf, o->rbuf, k, t, op, m->comm, req); break;
  case ACXC_OP_BROADCAST: r = MPI_Ibcast(o->rbuf, k, t, d->peer, m->comm, req); break;
  case ACXC_OP_REDUCE: r = MPI_Ireduce(o->sbuf, o->rbuf, k, t, op, d->peer, m->comm, req); break;
  case ACXC_OP_ALLGATHER: r = MPI_Iallgather(o->sbuf, k, t, o->rbuf, k, t, m->comm, req); break;
  case ACXC_OP_REDUCE_SCATTER: r = MPI_Ireduce_scatter_block(o->sbuf, o->rbuf, k, t, op, m->comm, req); break;
  case ACXC_OP_SEND: r = MPI_Isend(o->sbuf, k, t, d->peer, P2P_TAG, m->comm, req); break;
  case ACXC_OP_RECV: r = MPI_Irecv(o->rbuf, k, t, d->peer, P2P_TAG, m->comm, req); break;
  case ACXC_OP_ALLTOALL: r = MPI_Ialltoall(o->sbuf, k, t, o->rbuf, k, t, m->comm, req); break;
  default: return ACX_ERR_INVALID_ARG;
  }
  if (r != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(r, msg, &len);
    ACX_WARN(COLL, "posting an MPI collective (op %#x) failed: %s", d->op, msg);
    return ACX_ERR_MPI;
  }
  return ACX_OK;
}

/* Writes the results back (avg divided first). */
static acx_status_t finish_op(acx_coll_t *c, mop_t *o, int64_t tmo) {
  const acxc_opdesc_t *d = &o->d;
  size_t es = acx_dtype_size(d->dtype);
  int root = d->peer == c->rank;
  int reduces = d->op == ACXC_OP_ALLREDUCE || d->op == ACXC_OP_REDUCE || d->op == ACXC_OP_REDUCE_SCATTER;
  if (d->op == ACXC_OP_REDUCE && !root) return ACX_OK;
  if (!o->rn) return ACX_OK;
  if (reduces && d->redop == ACX_REDOP_AVG) acxc_mpi_divide(o->rbuf, d->dtype, o->rn, c->size);
  size_t off = 0;
  if (d->op == ACXC_OP_REDUCE_SCATTER && d->send == d->recv) off = (size_t)c->rank * d->count * es;
  return acx_buffer_write(d->recv, off, o->rbuf, o->rn * es, d->stream, tmo);
}

/* Hierarchical: one member after the other (no point-to-point in these groups: coll.c refuses it). */
static void run_hier(acx_coll_t *c, mreq_t *r) {
  acx_status_t st = acxc_coll_broken(c);
  for (int i = 0; st == ACX_OK && i < r->nops; i++) st = acxc_hier_run(c, &r->ops[i].d, r->deadline_ns);
  req_complete(c, r, st);
  req_free(r, 1);
}

/* The own all-reduce, in this worker's order with the coll's other operations: the executor runs
 * the set's operations one after another, so the worker sends the next own all-reduce before the
 * previous one has finished (back-to-back small ones then reach the executor together, and it
 * batches them as on the NCCL path) and finishes them in order (finish_peer) before it runs
 * anything else. */
static void finish_peer(acx_coll_t *c, mreq_t *r) {
  acx_status_t st = acxc_peer_finish(c, r->pf, r->deadline_ns);
  r->pf = NULL;
  req_complete(c, r, st);
  req_free(r, 1);
}

/* 1: r is in flight (the worker finishes it later); 0: r is done with (it failed to start). */
static int start_peer(acx_coll_t *c, mreq_t *r) {
  acx_status_t st = acxc_coll_broken(c);
  if (st == ACX_OK) st = acxc_peer_start(c, &r->ops[0].d, &r->pf);
  if (st != ACX_OK) {
    req_complete(c, r, st);
    req_free(r, 1);
    return 0;
  }
  return 1;
}

static void run_request(acx_coll_t *c, mreq_t *r) {
  if (c->hier_on) {
    run_hier(c, r);
    return;
  }
  acxc_mpi_t *m = c->mpi;
  int64_t tmo = acxi_device_timeout(c->dev, -1);
  acx_status_t st = acxc_coll_broken(c);
  int posted = 0;
  for (int i = 0; st == ACX_OK && i < r->nops; i++) {
    st = post(c, &r->ops[i], &r->reqs[i], tmo);
    if (st == ACX_OK) posted++;
  }
  if (posted && st != ACX_OK) {
    /* Some members are in MPI already: the peers expect the rest; the order is lost. */
    acxc_coll_break(c, st, 0, "a group member could not be posted");
  }
  if (posted == r->nops && st == ACX_OK) {
    const int64_t started = acxi_now_ns();
    for (unsigned spin = 0;; spin++) {
      int flag = 0;
      if (MPI_Testall(r->nops, r->reqs, &flag, MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
        st = ACX_ERR_MPI;
        acxc_coll_break(c, st, 0, "MPI failed a collective");
        break;
      }
      if (flag) break;
      int64_t now = acxi_now_ns();
      acx_status_t b = acxc_coll_broken(c);
      if (now >= r->deadline_ns || b != ACX_OK) {
        st = b != ACX_OK ? b : ACX_ERR_COLL_TIMEOUT;
        if (b == ACX_OK)
          acxc_coll_break(c, st, 0, "an MPI collective passed its deadline (ACX_COLL_TIMEOUT): a peer did not take "
                                    "part; MPI cannot cancel it, its request is abandoned");
        break;
      }
      /* Short naps: MPI progresses inside MPI_Testall, and the peers need us in it; 200 us once the
       * collective has waited 20 ms (a late peer: polling it at 20 kHz takes the cores it needs). */
      struct timespec ts = {0, spin < 100 ? 2000 : now - started < 20000000 ? 50000 : 200000};
      nanosleep(&ts, NULL);
    }
  }
  if (st == ACX_OK)
    for (int i = 0; st == ACX_OK && i < r->nops; i++) st = finish_op(c, &r->ops[i], tmo);
  req_complete(c, r, st);
  int abandoned = 0;
  for (int i = 0; i < posted; i++) {
    int flag = 1;
    if (r->reqs[i] != MPI_REQUEST_NULL) MPI_Test(&r->reqs[i], &flag, MPI_STATUS_IGNORE);
    abandoned |= !flag;
  }
  if (abandoned) {
    pthread_mutex_lock(&m->lock);
    r->next = m->orphans;
    m->orphans = r;
    pthread_mutex_unlock(&m->lock);
    return;
  }
  req_free(r, 1);
}

/* Lets abandoned requests finish when a late peer joins after all. Worker only. */
static int test_orphans(acxc_mpi_t *m) {
  pthread_mutex_lock(&m->lock);
  mreq_t **pp = &m->orphans;
  int left = 0;
  while (*pp) {
    mreq_t *r = *pp;
    int flag = 0;
    MPI_Testall(r->nops, r->reqs, &flag, MPI_STATUSES_IGNORE);
    if (flag) {
      *pp = r->next;
      req_free(r, 1);
    } else {
      pp = &r->next;
      left++;
    }
  }
  pthread_mutex_unlock(&m->lock);
  return left;
}

static void *worker(void *arg) {
  acx_coll_t *c = arg;
  acxi_buffer_coll_worker(); /* its own buffer operations are the collectives' */
  acxc_mpi_t *m = c->mpi;
  mreq_t *fly = NULL, *fly_tail = NULL; /* own all-reduces in flight, oldest first */
  int nfly = 0;
  pthread_mutex_lock(&m->lock);
  for (;;) {
    while (!m->head && !m->stop && !fly) {
      int has_orphans = m->orphans != NULL;
      struct timespec ts = acxi_ts_from_ns(acxi_now_ns() + (has_orphans ? 1000000 : 100000000));
      pthread_cond_timedwait(&m->cond, &m->lock, &ts);
      if (m->orphans) {
        pthread_mutex_unlock(&m->lock);
        test_orphans(m);
        pthread_mutex_lock(&m->lock);
      }
    }
    /* The oldest in flight is finished once it is done, and before anything but another own
     * all-reduce (the coll's order), when the window is full and before stopping; with nothing
     * queued the worker waits for it a millisecond at a time, taking what comes meanwhile. */
    if (fly) {
      int done = acxi_future_is_done(fly->pf);
      int must = m->stop || (m->head && !m->head->peer) || nfly >= ACXC_PEER_WINDOW;
      if (!done && !must && !m->head && acxi_now_ns() < fly->deadline_ns) {
        acx_future_t *f = fly->pf;
        int64_t left = acxi_left_ns(fly->deadline_ns);
        pthread_mutex_unlock(&m->lock);
        (void)acx_future_wait(f, left < 1000000 ? left : 1000000, NULL, 0, NULL);
        pthread_mutex_lock(&m->lock);
        continue;
      }
      if (done || must || !m->head) {
        mreq_t *r = fly;
        fly = r->next;
        if (!fly) fly_tail = NULL;
        nfly--;
        pthread_mutex_unlock(&m->lock);
        finish_peer(c, r);
        pthread_mutex_lock(&m->lock);
        m->finished++;
        pthread_cond_broadcast(&m->idle);
        continue;
      }
    }
    if (!m->head) break; /* stop with nothing queued or in flight */
    mreq_t *r = m->head;
    m->head = r->next;
    if (!m->head) m->tail = NULL;
    r->next = NULL;
    int stopping = m->stop;
    pthread_mutex_unlock(&m->lock);
    if (stopping) {
      req_complete(c, r, ACX_ERR_CANCELLED);
      req_free(r, 1);
    } else if (r->peer) {
      if (start_peer(c, r)) {
        pthread_mutex_lock(&m->lock);
        if (fly_tail) fly_tail->next = r;
        else fly = r;
        fly_tail = r;
        nfly++;
        continue; /* counted as finished once finish_peer has run */
      }
    } else {
      run_request(c, r);
    }
    pthread_mutex_lock(&m->lock);
    m->finished++;
    pthread_cond_broadcast(&m->idle);
  }
  pthread_mutex_unlock(&m->lock);
  return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* interface                                                                                  */

acx_status_t acxc_mpi_create(acx_coll_t *c) {
  acxc_mpi_t *m = calloc(1, sizeof *m);
  if (!m) return ACX_ERR_NO_MEMORY;
  MPI_Request req;
  m->comm = MPI_COMM_NULL;
  /* A duplicate: the coll's messages never match the application's or the world's. */
  if (MPI_Comm_idup(c->world->comm, &m->comm, &req) != MPI_SUCCESS) {
    free(m);
    return ACX_ERR_MPI;
  }
  /* MPI cannot cancel a collective and writes m->comm when a late rank comes: parked, not freed. */
  acx_status_t w = acxc_world_wait(req, m, acxi_deadline(c->world->timeout_ns));
  if (w == ACX_ERR_TIMEOUT)
    ACX_WARN(COLL, "acx_coll_create: MPI_Comm_idup did not finish within the world's timeout (a rank is missing)");
  if (w != ACX_OK) return w;
  MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
  static MPI_User_function *const fns[2][4] = {{h_sum, h_prod, h_max, h_min}, {b_sum, b_prod, b_max, b_min}};
  for (int b = 0; b < 2; b++)
    for (int k = 0; k < 4; k++) m->hops[b][k] = MPI_OP_NULL;
  acx_status_t st = ACX_OK;
  for (int b = 0; b < 2 && st == ACX_OK; b++)
    for (int k = 0; k < 4 && st == ACX_OK; k++)
      if (MPI_Op_create(fns[b][k], 1, &m->hops[b][k]) != MPI_SUCCESS) st = ACX_ERR_MPI;
  pthread_mutex_init(&m->lock, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&m->cond, &ca);
  pthread_cond_init(&m->idle, &ca);
  pthread_condattr_destroy(&ca);
  c->mpi = m;
  if (st == ACX_OK) {
    if (pthread_create(&m->thread, NULL, worker, c) != 0) {
      ACX_WARN(COLL, "acx_coll_create: cannot start the MPI worker thread");
      st = ACX_ERR_SYSTEM;
    } else {
      m->thread_live = 1;
    }
  }
  if (st != ACX_OK) acxc_mpi_destroy(c, 0);
  return st;
}

static acx_status_t enqueue(acx_coll_t *c, const acxc_opdesc_t *ops, int nops, acx_future_t **member_futs,
                            acx_future_t **done, int peer) {
  acxc_mpi_t *m = c->mpi;
  mreq_t *r = calloc(1, sizeof *r);
  mop_t *o = r ? calloc((size_t)nops, sizeof *o) : NULL;
  MPI_Request *reqs = o ? malloc((size_t)nops * sizeof *reqs) : NULL;
  acx_future_t *f = NULL;
  acx_status_t st = reqs ? ACX_OK : ACX_ERR_NO_MEMORY;
  if (st == ACX_OK && done) st = acx_future_create(&f);
  if (st != ACX_OK) {
    /* The buffer references and member futures were handed to us: give them back. */
    for (int i = 0; i < nops; i++) {
      mop_t tmp = {.d = ops[i]};
      release_op(&tmp, 0);
      if (member_futs && member_futs[i]) {
        acx_future_complete(member_futs[i], st, NULL, 0);
        acx_future_release(member_futs[i]);
      }
    }
    free(member_futs);
    free(reqs);
    free(o);
    free(r);
    return st;
  }
  for (int i = 0; i < nops; i++) {
    o[i].d = ops[i];
    reqs[i] = MPI_REQUEST_NULL;
    /* Until req_complete: the caller's later commands on these wait for it, as in a stream. */
    acxi_buffer_coll_begin(ops[i].send);
    if (ops[i].recv != ops[i].send) acxi_buffer_coll_begin(ops[i].recv);
  }
  r->nops = nops;
  r->ops = o;
  r->reqs = reqs;
  r->peer = peer;
  r->mfuts = member_futs;
  r->deadline_ns = acxi_deadline(c->timeout_ns);
  if (f) {
    acx_future_hold(f); /* one for the worker, one for the caller */
    r->future = f;
  }
  pthread_mutex_lock(&m->lock);
  if (m->tail) m->tail->next = r;
  else m->head = r;
  m->tail = r;
  m->submitted++;
  pthread_cond_signal(&m->cond);
  pthread_mutex_unlock(&m->lock);
  atomic_fetch_or_explicit(&c->streams_used, ACXI_STREAM_BIT(ops[0].stream), memory_order_relaxed);
  if (done) *done = f;
  return ACX_OK;
}

acx_status_t acxc_mpi_submit(acx_coll_t *c, const acxc_opdesc_t *ops, int nops, acx_future_t **member_futs,
                             acx_future_t **done) {
  return enqueue(c, ops, nops, member_futs, done, 0);
}

acx_status_t acxc_mpi_submit_peer(acx_coll_t *c, const acxc_opdesc_t *d, acx_future_t **done) {
  return enqueue(c, d, 1, NULL, done, 1);
}

acxc_mpi_t *acxc_mpi_wait_begin(acx_coll_t *c) {
  acxc_mpi_t *m = c->mpi;
  if (!m) return NULL;
  pthread_mutex_lock(&m->lock);
  m->waiters++;
  pthread_mutex_unlock(&m->lock);
  return m;
}

void acxc_mpi_wait_end(acxc_mpi_t *m) {
  pthread_mutex_lock(&m->lock);
  m->waiters--;
  pthread_cond_broadcast(&m->idle); /* acxc_mpi_destroy may be waiting for the last waiter */
  pthread_mutex_unlock(&m->lock);
}

acx_status_t acxc_mpi_synchronize(acx_coll_t *c, acxc_mpi_t *m, int64_t timeout_ns) {
  int64_t deadline = acxi_deadline(timeout_ns);
  pthread_mutex_lock(&m->lock);
  uint64_t target = m->submitted;
  while (m->finished < target && !m->stop) {
    if (acxi_now_ns() >= deadline) {
      pthread_mutex_unlock(&m->lock);
      ACX_WARN(COLL, "acx_coll_synchronize: %" PRIu64 " operations still in flight at the deadline",
               target - m->finished);
      return ACX_ERR_COLL_TIMEOUT;
    }
    struct timespec ts = acxi_ts_from_ns(deadline);
    pthread_cond_timedwait(&m->idle, &m->lock, &ts);
  }
  /* Stopping (a rebuild replaces this state, or the coll goes): what was queued is cancelled. */
  int stopped = m->stop && m->finished < target;
  acx_status_t st = m->unreported;
  m->unreported = ACX_OK;
  pthread_mutex_unlock(&m->lock);
  acx_status_t b = acxc_coll_broken(c);
  if (st == ACX_OK && b == ACX_OK && stopped) st = ACX_ERR_CANCELLED;
  return st != ACX_OK ? st : b;
}

void acxc_mpi_break(acx_coll_t *c, acx_status_t cause) {
  /* The worker checks the broken status before each request and fails it with that status. */
  (void)cause;
  acxc_mpi_t *m = c->mpi;
  if (!m) return;
  pthread_mutex_lock(&m->lock);
  pthread_cond_broadcast(&m->cond);
  pthread_mutex_unlock(&m->lock);
}

void acxc_mpi_destroy(acx_coll_t *c, int64_t timeout_ns) {
  acxc_mpi_t *m = c->mpi;
  if (!m) return;
  if (m->thread_live) {
    pthread_mutex_lock(&m->lock);
    m->stop = 1;
    pthread_cond_broadcast(&m->cond);
    pthread_mutex_unlock(&m->lock);
    /* Bounded: a request in progress ends at its own deadline at the latest. */
    pthread_join(m->thread, NULL);
  }
  /* Threads in acxc_mpi_synchronize leave once they see stop (they hold no lock of the coll). */
  pthread_mutex_lock(&m->lock);
  m->stop = 1;
  pthread_cond_broadcast(&m->idle);
  int64_t wdl = acxi_deadline(5000000000LL);
  while (m->waiters > 0 && acxi_now_ns() < wdl) {
    struct timespec ts = acxi_ts_from_ns(acxi_now_ns() + 10000000);
    pthread_cond_timedwait(&m->idle, &m->lock, &ts);
  }
  int waiting = m->waiters;
  pthread_mutex_unlock(&m->lock);
  int64_t deadline = acxi_deadline(timeout_ns);
  int left = test_orphans(m);
  while (left && acxi_now_ns() < deadline) {
    nanosleep(&(struct timespec){0, 1000000}, NULL);
    left = test_orphans(m);
  }
  if (left) {
    /* MPI may still write into their staging buffers: those and the communicator are leaked. */
    ACX_WARN(COLL, "%d abandoned MPI collectives never completed: their buffers and the coll's communicator are "
             "left to MPI", left);
  } else if (m->comm != MPI_COMM_NULL) {
    MPI_Comm_free(&m->comm);
  }
  for (int b = 0; b < 2; b++)
    for (int k = 0; k < 4; k++)
      if (m->hops[b][k] != MPI_OP_NULL) MPI_Op_free(&m->hops[b][k]);
  if (waiting) ACX_WARN(COLL, "%d thread(s) still inside acx_coll_synchronize after 5 s: the coll's MPI state is "
                         "left to them", waiting);
  if (!left && !waiting) {
    pthread_mutex_destroy(&m->lock);
    pthread_cond_destroy(&m->cond);
    pthread_cond_destroy(&m->idle);
    free(m);
  }
  c->mpi = NULL;
}
