/* Hierarchical collectives: several ranks on one device. Ranks that share a GPU cannot be ranks
 * of one NCCL communicator (NCCL refuses two on one GPU), so the ranks of a device form a group
 * whose lowest rank is its leader, and only the leaders talk to each other. On request the host
 * kind groups the ranks of a node the same way (ACX_COLL_HIER=1), which is how CI runs every
 * step below without a GPU.
 *
 * Every rank has a shareable staging buffer on its device (acxi_buffer_alloc_shareable); the
 * leader maps its members' (CUDA IPC; host kind: a memfd), every member maps its leader's.
 * All-reduces take the direct path up to ACX_COLL_HIER_DIRECT_KB and the ordered path above it
 * (both described where they are defined below); every other collective, and all-reduces with
 * ACX_COLL_HIER_ORDERED=0, move through the staging buffers in chunks, four steps per chunk:
 *   1. in:      every rank copies its chunk of input into its staging buffer (the leader: into
 *               the place where its group's data is combined);
 *   2. combine: the leader reduces (or packs) its members' chunks, read through its mappings;
 *   3. inner:   the leaders run the collective among themselves on the leader's staging buffer
 *               (cuda: an NCCL communicator of the leaders in their executors; host kind: MPI on
 *               host copies);
 *   4. out:     every rank copies its result out of its leader's staging buffer.
 * Statuses travel with the messages between the steps (a gather to the leader before step 2, an
 * agreement among the leaders before step 3, a broadcast from the leader after it): a step that
 * fails on one rank fails the operation on every rank, and the next operation starts in step.
 * These messages also order the buffers' reuse: a member writes its staging buffer again only
 * after its leader has read it (the broadcast), a leader its own only after every member has
 * copied the last result out (the next gather).
 *
 * Runs on the coll's worker thread (mpi_coll.c), which queues the requests, completes their
 * futures and enforces their deadlines; every MPI wait here has the request's deadline, and an
 * exchange that passes it breaks the coll (a rebuild makes it anew). avg is the sum divided by
 * the world's size after the leaders' step (integer division for integer types, as NCCL does). */
#define _GNU_SOURCE
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>

#include "collectives/coll_internal.h"
#include "collectives/world_internal.h"
#include "runtime/actor/future.h"
#include "runtime/base/clock.h"
#include "runtime/base/log.h"
#include "runtime/base/param.h"
#include "runtime/device/device_internal.h"

/* How long mpi_wait polls without sleeping: 200 us covers the skew between the ranks of a group
 * in one step. */
#define HIER_SPIN_NS 200000LL

struct acxc_hier {
  MPI_Comm gcomm;  /* my group: the ranks of my device, leader first (rank order) */
  MPI_Comm lcomm;  /* the leaders (MPI_COMM_NULL on members) */
  int grank, gsize, gmax; /* in my group; the largest group */
  int lrank, lsize;       /* my group's index among the groups (its leader's rank in lcomm); groups */
  int *group_of, *pos_of; /* [world rank]: its group's index, its rank in its group */
  size_t stage;           /* bytes of every staging buffer */
  acx_buffer_t *mine;     /* my staging buffer (shareable) */
  acx_buffer_t *pack;     /* leader: the send side of the leaders' all-gather and all-to-all */
  acx_buffer_t **peer;    /* leader: [grank] its members' staging buffers mapped here ([0] unused);
                             member: [0] its leader's */
  int overlap;            /* the ordered path's second slot in buffers of their own and the
                             leader's local steps on a second stream (ACX_COLL_HIER_OVERLAP, every
                             rank's); then: */
  acx_buffer_t *mine2;    /* ... my second slot (stage / 2 bytes, shareable) */
  acx_buffer_t **peer2;   /* ... and the group's, mapped as `peer` */
  uint64_t comm_id;       /* cuda leaders, more than one group: NCCL among the leaders */
  acx_host_mem_t *region; /* ... and the host region its unique id came through */
  unsigned char *host;    /* host-kind leaders: 2 x stage bytes of host copies for MPI */
  size_t direct;          /* all-reduces of at most this many bytes take the direct path (0: none;
                             the smallest ACX_COLL_HIER_DIRECT_KB of any rank, at most `stage`) */
  unsigned char *dhost;   /* the direct path's host copies: 2 x direct bytes, then 2 status ints */
  acx_host_mem_t *flags;  /* the ordered path's flags (ordered.c below): the leader's region,
                             attached by its members; NULL: the path is off */
  _Atomic uint32_t *fl;   /* ... mapped here */
  uint32_t fseq;          /* ... the sequence number of the last chunk (every rank of the group
                             counts the same chunks) */
  void *parked_mem;       /* the memory of the last exchange parked (what MPI may still write) */
  int parked;             /* an MPI exchange passed its deadline: the communicators (and `host`)
                             stay with MPI, never freed */
  int building;           /* set-up (creation or a rebuild's reinit, while the coll is still marked
                             broken): exchanges wait for their deadline only */
};

int acxc_hier_mode(const acx_coll_t *c) {
  int64_t v = acxi_param_int("ACX_COLL_HIER");
  if (v == 0) return 0;
  if (v > 0) return 1;
  return !c->host && acxc_world_gpu_sharers(c->world) > 1;
}

/* ------------------------------------------------------------------------------------------ */
/* waits                                                                                       */

/* Waits for one MPI request until the deadline. On ACX_ERR_COLL_TIMEOUT the request is parked
 * with `mem` (MPI may still write it: the caller must not free it) and the communicators are
 * kept. */
static acx_status_t mpi_wait(acx_coll_t *c, acxc_hier_t *h, MPI_Request *req, void *mem, int64_t deadline,
                             const char *what) {
  /* The group's ranks arrive within microseconds of each other in a running collective: poll
   * actively (yielding the core to whoever needs it on a loaded node) for HIER_SPIN_NS, then sleep
   * between polls. A short nanosleep is no substitute: under Linux's default 50 us timer slack,
   * nanosleep(2 us) takes 55-75 us, and the step protocol waits three times per chunk. */
  const int64_t spin_until = acxi_now_ns() + HIER_SPIN_NS;
  for (;;) {
    int flag = 0;
    if (MPI_Test(req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      ACX_WARN(COLL, "hierarchical collective: MPI failed %s", what);
      return ACX_ERR_MPI;
    }
    if (flag) return ACX_OK;
    acx_status_t b = h->building ? ACX_OK : acxc_coll_broken(c);
    if (acxi_now_ns() >= deadline || b != ACX_OK) {
      acxc_world_park(*req, mem);
      h->parked = 1;
      h->parked_mem = mem;
      if (b != ACX_OK) return b;
      ACX_WARN(COLL, "hierarchical collective: %s passed the operation's deadline (ACX_COLL_TIMEOUT): a rank did "
               "not take part", what);
      return ACX_ERR_COLL_TIMEOUT;
    }
    if (acxi_now_ns() < spin_until) sched_yield();
    else nanosleep(&(struct timespec){0, 50000}, NULL);
  }
}

/* The step protocol's small exchanges: one int per rank, on heap memory (an exchange that passes
 * its deadline is parked with it: MPI may still write it). GATHER: the worst status of the group
 * at the leader (members keep their own); BCAST: the leader's value to its group; LEADERS: the
 * worst over the leaders. Statuses are positive and ACX_OK is 0, so the worst is the largest. */
typedef enum { X_GATHER, X_BCAST, X_LEADERS } xchg_t;

static acx_status_t exchange(acx_coll_t *c, acxc_hier_t *h, xchg_t kind, acx_status_t in, int64_t deadline,
                             acx_status_t *out) {
  *out = in;
  if (kind == X_LEADERS && h->lsize == 1) return ACX_OK;
  int n = kind == X_GATHER ? h->gsize : 1; /* v[0..n): what arrives; v[n]: this rank's */
  int *v = calloc((size_t)n + 1, sizeof *v);
  if (!v) return ACX_ERR_NO_MEMORY;
  v[0] = v[n] = (int)in;
  MPI_Request req;
  int r;
  static const char *const what[] = {"the group's gather", "the group's broadcast", "the leaders' agreement"};
  switch (kind) {
  case X_GATHER: r = MPI_Igather(&v[n], 1, MPI_INT, v, 1, MPI_INT, 0, h->gcomm, &req); break;
  case X_BCAST: r = MPI_Ibcast(v, 1, MPI_INT, 0, h->gcomm, &req); break;
  default: r = MPI_Iallreduce(&v[n], v, 1, MPI_INT, MPI_MAX, h->lcomm, &req); break;
  }
  if (r != MPI_SUCCESS) {
    free(v);
    ACX_WARN(COLL, "hierarchical collective: posting %s failed", what[kind]);
    return ACX_ERR_MPI;
  }
  acx_status_t st = mpi_wait(c, h, &req, v, deadline, what[kind]);
  if (st != ACX_OK) return st; /* v is MPI's now (parked), or the request failed */
  if (kind != X_GATHER || h->grank == 0)
    for (int i = 0; i < n; i++)
      if (v[i] > (int)*out) *out = (acx_status_t)v[i];
  if (kind == X_BCAST) *out = (acx_status_t)v[0];
  free(v);
  return ACX_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* the leaders' step                                                                           */

/* cuda: one NCCL command on the leaders' communicator, send/recv whole staging buffers. */
static acx_status_t inner_nccl(acx_coll_t *c, acxc_hier_t *h, uint32_t op, acx_buffer_t *send, acx_buffer_t *recv,
                               size_t count, acx_dtype_t dt, acx_redop_t redop, int root, uint32_t stream,
                               int64_t deadline) {
  acxi_cmd_t cmd = {.op = op, .stream = stream, .dtype = (uint32_t)dt, .bytes = count,
                    .arg = {h->comm_id, (uint64_t)redop, (uint64_t)(int64_t)root, ++c->seq}};
  acxi_bufarg_t ba[2] = {{send, "staging"}, {recv, "staging"}};
  cmd.buf[0] = send->id;
  cmd.buf[1] = recv->id;
  acxi_cpl_t cpl = {0};
  acx_status_t st = acxi_device_call(c->dev, &cmd, ba, send == recv ? 1 : 2, 0, -1, acxi_left_ns(deadline), &cpl);
  if (st != ACX_OK) {
    ACX_WARN(COLL, "hierarchical collective: the leaders' NCCL step (op %#x) failed: %s (NCCL code %d)", op,
             acx_status_name(st), cpl.lib_code);
    if (st == ACX_ERR_TIMEOUT || st == ACX_ERR_COLL_TIMEOUT) {
      acxi_cmd_t ab = {.op = ACXC_OP_ABORT, .arg = {h->comm_id, (uint64_t)ACX_ERR_COLL_TIMEOUT}};
      (void)acxi_device_call(c->dev, &ab, NULL, 0, 0, -1, 5000000000LL, NULL);
    }
  }
  return st;
}

/* host kind: MPI on host copies of the staging buffers (read, exchange, write back). */
static acx_status_t inner_mpi(acx_coll_t *c, acxc_hier_t *h, uint32_t op, acx_buffer_t *send, acx_buffer_t *recv,
                              size_t count, acx_dtype_t dt, acx_redop_t redop, int root, uint32_t stream,
                              int64_t deadline) {
  size_t es = acx_dtype_size(dt), rn = count, sn = count;
  if (op == ACXC_OP_ALLGATHER) rn = count * (size_t)h->lsize;
  if (op == ACXC_OP_ALLTOALL) sn = rn = count * (size_t)h->lsize;
  unsigned char *sb = h->host, *rb = h->host + h->stage;
  if (op == ACXC_OP_ALLGATHER) {
    ACXCHECK(acx_buffer_read(send, (size_t)h->lrank * count * es, rb + (size_t)h->lrank * count * es, sn * es,
                             stream, acxi_left_ns(deadline)));
  } else {
    ACXCHECK(acx_buffer_read(send, 0, op == ACXC_OP_BROADCAST ? rb : sb, sn * es, stream, acxi_left_ns(deadline)));
  }
  MPI_Datatype t = acxc_mpi_dtype(dt);
  MPI_Request req;
  int k = (int)count, r;
  switch (op) {
  case ACXC_OP_ALLREDUCE: r = MPI_Iallreduce(sb, rb, k, t, acxc_mpi_redop(c, dt, redop), h->lcomm, &req); break;
  case ACXC_OP_BROADCAST: r = MPI_Ibcast(rb, k, t, root, h->lcomm, &req); break;
  case ACXC_OP_ALLGATHER: r = MPI_Iallgather(MPI_IN_PLACE, 0, t, rb, k, t, h->lcomm, &req); break;
  case ACXC_OP_ALLTOALL: r = MPI_Ialltoall(sb, k, t, rb, k, t, h->lcomm, &req); break;
  default: return ACX_ERR_INVALID_ARG;
  }
  if (r != MPI_SUCCESS) {
    ACX_WARN(COLL, "hierarchical collective: posting the leaders' MPI step (op %#x) failed", op);
    return ACX_ERR_MPI;
  }
  acx_status_t st = mpi_wait(c, h, &req, h->host, deadline, "the leaders' MPI step");
  if (st != ACX_OK) {
    if (h->parked && h->parked_mem == h->host) h->host = NULL; /* MPI keeps it */
    return st;
  }
  return acx_buffer_write(recv, 0, rb, rn * es, stream, acxi_left_ns(deadline));
}

static acx_status_t inner(acx_coll_t *c, acxc_hier_t *h, uint32_t op, acx_buffer_t *send, acx_buffer_t *recv,
                          size_t count, acx_dtype_t dt, acx_redop_t redop, int root, uint32_t stream,
                          int64_t deadline) {
  /* One group: nothing to exchange (an all-to-all's blocks still move from `pack` to staging). */
  if (h->lsize == 1)
    return send == recv ? ACX_OK : acx_buffer_copy(recv, 0, send, 0, count * acx_dtype_size(dt), stream, acxi_left_ns(deadline));
  if (redop == ACX_REDOP_AVG) redop = ACX_REDOP_SUM; /* divided once, after the leaders' sum */
  return c->host_kind ? inner_mpi(c, h, op, send, recv, count, dt, redop, root, stream, deadline)
                                           : inner_nccl(c, h, op, send, recv, count, dt, redop, root, stream, deadline);
}

/* ------------------------------------------------------------------------------------------ */
/* batches of copies                                                                           */

/* Copies issued without waiting, then waited for together: the gathers and the all-to-all move
 * one block per rank, and one executor round trip per block would dominate. */
#define BATCH_MAX 64
typedef struct batch {
  acx_future_t *f[BATCH_MAX];
  int n;
  acx_status_t st; /* the first failure */
  int64_t deadline;
} batch_t;

static void batch_flush(batch_t *b) {
  for (int i = 0; i < b->n; i++) {
    acx_status_t s = acx_future_wait(b->f[i], acxi_left_ns(b->deadline), NULL, 0, NULL);
    if (s != ACX_OK && b->st == ACX_OK) b->st = s;
    acx_future_release(b->f[i]);
  }
  b->n = 0;
}

static void batch_copy(batch_t *b, acx_buffer_t *dst, size_t doff, acx_buffer_t *src, size_t soff, size_t bytes,
                       uint32_t stream) {
  if (b->st != ACX_OK) return;
  if (b->n == BATCH_MAX) batch_flush(b);
  acx_future_t *f = NULL;
  acx_status_t s = acx_buffer_copy_async(dst, doff, src, soff, bytes, stream, &f);
  if (s != ACX_OK) b->st = s;
  else b->f[b->n++] = f;
}

static acx_status_t batch_end(batch_t *b) {
  batch_flush(b);
  return b->st;
}

/* ------------------------------------------------------------------------------------------ */
/* one chunk of each operation                                                                 */

/* The staging buffer this rank reads results from: its own (leader) or its leader's. */
static acx_buffer_t *result_of(acxc_hier_t *h) { return h->grank == 0 ? h->mine : h->peer[0]; }

typedef struct chunk {
  const acxc_opdesc_t *d;
  size_t es;    /* element size */
  size_t o, n;  /* elements: offset into the per-rank (or per-peer) count, and this chunk's length */
} chunk_t;

/* Step 1: this rank's input into its staging buffer. */
static acx_status_t step_in(acx_coll_t *c, acxc_hier_t *h, const chunk_t *k, int64_t deadline) {
  const acxc_opdesc_t *d = k->d;
  size_t es = k->es, n = (size_t)c->size, bytes = k->n * es;
  int64_t t = acxi_left_ns(deadline);
  switch (d->op) {
  case ACXC_OP_ALLREDUCE:
  case ACXC_OP_REDUCE:
  case ACXC_OP_REDUCE_SCATTER:
    return acx_buffer_copy(h->mine, 0, d->send, k->o * es, bytes, d->stream, t);
  case ACXC_OP_BROADCAST:
    return d->peer == c->rank ? acx_buffer_copy(h->mine, 0, d->send, k->o * es, bytes, d->stream, t) : ACX_OK;
  case ACXC_OP_ALLGATHER: {
    /* In place, this rank's block already sits in recv at its rank. */
    size_t src = d->send == d->recv ? ((size_t)c->rank * d->count + k->o) * es : k->o * es;
    size_t dst = h->grank == 0 ? (size_t)h->lrank * (size_t)h->gmax * bytes : 0;
    return acx_buffer_copy(h->grank == 0 ? h->pack : h->mine, dst, d->send, src, bytes, d->stream, t);
  }
  case ACXC_OP_ALLTOALL: {
    /* Block j of the chunk: what goes to rank j. */
    batch_t b = {.deadline = deadline};
    for (size_t j = 0; j < n; j++) batch_copy(&b, h->mine, j * bytes, d->send, (j * d->count + k->o) * es, bytes, d->stream);
    return batch_end(&b);
  }
  default:
    return ACX_ERR_INVALID_ARG;
  }
}

/* Step 2 (leader): the group's chunks combined in its staging buffer (or in `pack`). */
static acx_status_t step_combine(acx_coll_t *c, acxc_hier_t *h, const chunk_t *k, int64_t deadline) {
  const acxc_opdesc_t *d = k->d;
  size_t es = k->es, n = (size_t)c->size, bytes = k->n * es;
  int64_t t = acxi_left_ns(deadline);
  switch (d->op) {
  case ACXC_OP_ALLREDUCE:
  case ACXC_OP_REDUCE:
  case ACXC_OP_REDUCE_SCATTER:
    for (int j = 1; j < h->gsize; j++)
      ACXCHECK(acxi_buffer_reduce(h->mine, 0, h->peer[j], 0, k->n, d->dtype, d->redop == ACX_REDOP_AVG ?
                                  ACX_REDOP_SUM : d->redop, d->stream, t));
    return ACX_OK;
  case ACXC_OP_BROADCAST: {
    /* The root's chunk to its leader's staging buffer, if the root is one of its members. */
    int root = d->peer;
    if (h->group_of[root] != h->lrank || h->pos_of[root] == 0) return ACX_OK;
    return acx_buffer_copy(h->mine, 0, h->peer[h->pos_of[root]], 0, bytes, d->stream, t);
  }
  case ACXC_OP_ALLGATHER: {
    batch_t b = {.deadline = deadline};
    for (int j = 1; j < h->gsize; j++)
      batch_copy(&b, h->pack, ((size_t)h->lrank * (size_t)h->gmax + (size_t)j) * bytes, h->peer[j], 0, bytes,
                 d->stream);
    return batch_end(&b);
  }
  case ACXC_OP_ALLTOALL: {
    /* pack, per destination group m: [m][source position p][destination position q] blocks. */
    batch_t b = {.deadline = deadline};
    for (int p = 0; p < h->gsize; p++) {
      acx_buffer_t *src = p == 0 ? h->mine : h->peer[p];
      for (size_t j = 0; j < n; j++) {
        size_t m = (size_t)h->group_of[j], q = (size_t)h->pos_of[j], g = (size_t)h->gmax;
        batch_copy(&b, h->pack, ((m * g + (size_t)p) * g + q) * bytes, src, j * bytes, bytes, d->stream);
      }
    }
    return batch_end(&b);
  }
  default:
    return ACX_ERR_INVALID_ARG;
  }
}

/* Step 3 (leader): the leaders' collective; avg divided after it. */
static acx_status_t step_inner(acx_coll_t *c, acxc_hier_t *h, const chunk_t *k, int64_t deadline) {
  const acxc_opdesc_t *d = k->d;
  size_t g = (size_t)h->gmax;
  acx_status_t st;
  switch (d->op) {
  case ACXC_OP_ALLREDUCE:
  case ACXC_OP_REDUCE:
  case ACXC_OP_REDUCE_SCATTER:
    st = inner(c, h, ACXC_OP_ALLREDUCE, h->mine, h->mine, k->n, d->dtype, d->redop, 0, d->stream, deadline);
    if (st == ACX_OK && d->redop == ACX_REDOP_AVG)
      st = acxi_buffer_div(h->mine, 0, k->n, d->dtype, (uint64_t)c->size, d->stream, acxi_left_ns(deadline));
    return st;
  case ACXC_OP_BROADCAST:
    return inner(c, h, ACXC_OP_BROADCAST, h->mine, h->mine, k->n, d->dtype, ACX_REDOP_SUM, h->group_of[d->peer],
                 d->stream, deadline);
  case ACXC_OP_ALLGATHER:
    /* In place in `pack` (each leader's slot at its index), then the whole to its staging buffer. */
    st = inner(c, h, ACXC_OP_ALLGATHER, h->pack, h->pack, g * k->n, d->dtype, ACX_REDOP_SUM, 0, d->stream, deadline);
    if (st == ACX_OK)
      st = acx_buffer_copy(h->mine, 0, h->pack, 0, (size_t)h->lsize * g * k->n * k->es, d->stream, acxi_left_ns(deadline));
    return st;
  case ACXC_OP_ALLTOALL:
    return inner(c, h, ACXC_OP_ALLTOALL, h->pack, h->mine, g * g * k->n, d->dtype, ACX_REDOP_SUM, 0, d->stream,
                 deadline);
  default:
    return ACX_ERR_INVALID_ARG;
  }
}

/* Step 4: this rank's results out of its leader's staging buffer. */
static acx_status_t step_out(acx_coll_t *c, acxc_hier_t *h, const chunk_t *k, int64_t deadline) {
  const acxc_opdesc_t *d = k->d;
  size_t es = k->es, bytes = k->n * es, g = (size_t)h->gmax;
  acx_buffer_t *res = result_of(h);
  int64_t t = acxi_left_ns(deadline);
  switch (d->op) {
  case ACXC_OP_ALLREDUCE:
  case ACXC_OP_BROADCAST:
    return acx_buffer_copy(d->recv, k->o * es, res, 0, bytes, d->stream, t);
  case ACXC_OP_REDUCE:
    return d->peer == c->rank ? acx_buffer_copy(d->recv, k->o * es, res, 0, bytes, d->stream, t) : ACX_OK;
  case ACXC_OP_REDUCE_SCATTER: {
    /* The part of this chunk (of the whole n x count vector) that is this rank's block. */
    size_t lo = (size_t)c->rank * d->count, hi = lo + d->count;
    size_t a = k->o > lo ? k->o : lo, b = k->o + k->n < hi ? k->o + k->n : hi;
    if (a >= b) return ACX_OK;
    size_t at = d->send == d->recv ? a : a - lo;
    return acx_buffer_copy(d->recv, at * es, res, (a - k->o) * es, (b - a) * es, d->stream, t);
  }
  case ACXC_OP_ALLGATHER: {
    batch_t b = {.deadline = deadline};
    for (int r = 0; r < c->size; r++) {
      size_t slot = (size_t)h->group_of[r] * g + (size_t)h->pos_of[r];
      batch_copy(&b, d->recv, ((size_t)r * d->count + k->o) * es, res, slot * bytes, bytes, d->stream);
    }
    return batch_end(&b);
  }
  case ACXC_OP_ALLTOALL: {
    /* From the leaders' exchange: [source group m][source position p][my position q]. */
    size_t q = (size_t)h->grank;
    batch_t b = {.deadline = deadline};
    for (int r = 0; r < c->size; r++) {
      size_t m = (size_t)h->group_of[r], p = (size_t)h->pos_of[r];
      batch_copy(&b, d->recv, ((size_t)r * d->count + k->o) * es, res, ((m * g + p) * g + q) * bytes, bytes,
                 d->stream);
    }
    return batch_end(&b);
  }
  default:
    return ACX_ERR_INVALID_ARG;
  }
}

/* Elements per chunk: what the largest staging layout of the operation holds. */
static size_t chunk_elems(const acx_coll_t *c, const acxc_hier_t *h, const acxc_opdesc_t *d, size_t es) {
  size_t per = es, g = (size_t)h->gmax;
  switch (d->op) {
  case ACXC_OP_ALLGATHER: per = (size_t)h->lsize * g * es; break;
  case ACXC_OP_ALLTOALL: {
    size_t a = (size_t)c->size * es, b = (size_t)h->lsize * g * g * es;
    per = a > b ? a : b;
    break;
  }
  default: break;
  }
  return h->stage / per;
}

/* An exchange between the steps failed or passed its deadline: the ranks are out of step, the
 * coll is broken (a rebuild makes it anew). */
static acx_status_t lost(acx_coll_t *c, acx_status_t st) {
  acxc_coll_break(c, st, 0, "an exchange of a hierarchical collective failed; the ranks are out of step");
  return st;
}

/* Small all-reduces skip the staging steps: every rank reads its input into host memory, one MPI
 * all-reduce over every rank (with each rank's status reduced beside it, so a failed read fails
 * the operation everywhere and nothing is written), every rank writes its result. Two executor
 * round trips and one exchange, where the staged path takes three exchanges and four or five round
 * trips per chunk. The order of a floating-point sum is then MPI's (fixed for a given MPI and
 * world size), not the staged path's group order. */
static acx_status_t direct_allreduce(acx_coll_t *c, acxc_hier_t *h, const acxc_opdesc_t *d, int64_t deadline) {
  size_t es = acx_dtype_size(d->dtype), bytes = d->count * es;
  unsigned char *sb = h->dhost, *rb = h->dhost + h->direct;
  int *stv = (int *)(h->dhost + 2 * h->direct); /* [0]: this rank's status, [1]: the worst */
  acx_status_t own = acx_buffer_read(d->send, 0, sb, bytes, d->stream, acxi_left_ns(deadline));
  stv[0] = (int)own;
  MPI_Comm comm = acxc_mpi_comm(c);
  acx_redop_t op = d->redop == ACX_REDOP_AVG ? ACX_REDOP_SUM : d->redop;
  MPI_Request req[2];
  if (MPI_Iallreduce(sb, rb, (int)d->count, acxc_mpi_dtype(d->dtype), acxc_mpi_redop(c, d->dtype, op), comm, &req[0]) !=
      MPI_SUCCESS)
    return lost(c, ACX_ERR_MPI);
  if (MPI_Iallreduce(&stv[0], &stv[1], 1, MPI_INT, MPI_MAX, comm, &req[1]) != MPI_SUCCESS) {
    acxc_world_park(req[0], h->dhost);
    h->dhost = NULL; /* MPI may still write it */
    h->parked = 1;
    return lost(c, ACX_ERR_MPI);
  }
  /* A wait that passes its deadline parks its request with dhost, which MPI may still write. */
  acx_status_t m = mpi_wait(c, h, &req[0], h->dhost, deadline, "the direct all-reduce");
  if (m == ACX_OK) m = mpi_wait(c, h, &req[1], h->dhost, deadline, "the direct all-reduce's status");
  else if (h->parked) acxc_world_park(req[1], NULL); /* its memory is parked with req[0] */
  if (m != ACX_OK) {
    if (h->parked && h->parked_mem == h->dhost) h->dhost = NULL; /* parked with MPI: never freed */
    return lost(c, m);
  }
  acx_status_t worst = (acx_status_t)stv[1];
  if (worst != ACX_OK) {
    if (own == ACX_OK)
      ACX_WARN(COLL, "hierarchical all-reduce (%zu elements, direct): another rank's read failed with %s: "
               "ACX_ERR_PEER_LOST here", d->count, acx_status_name(worst));
    return own != ACX_OK ? own : ACX_ERR_PEER_LOST;
  }
  if (d->redop == ACX_REDOP_AVG) acxc_mpi_divide(rb, d->dtype, d->count, c->size);
  return acx_buffer_write(d->recv, 0, rb, bytes, d->stream, acxi_left_ns(deadline));
}

/* ------------------------------------------------------------------------------------------ */
/* the ordered path: all-reduces ordered on the streams                                         */

/* All-reduces above the direct path's limit skip the MPI exchanges: the steps are ordered on the
 * executors' streams through 32-bit flags in a host region of the group (the leader's, attached
 * by its members and registered with every executor of the group, which reach it through the
 * GPU's mapping of pinned memory). Each staging buffer holds two slots; chunk s (its sequence
 * number, the same on every rank of the group: each counts the same chunks) uses slot s % 2.
 *   member j: wait until done >= s - 2 (the leader has read what chunk s - 2 left in this slot),
 *             copy its input into its slot, ready[j] := s; then wait until done >= s - 1 and copy
 *             the previous chunk's result out of the leader's slot (after the last chunk, its
 *             own). Every command of every chunk is enqueued at once (fire-and-forget but the
 *             last); the rank waits for the last.
 *   leader:   waits on the host until every ready[j] >= s (a few loads of shared memory, no
 *             round trip), then enqueues: its input into its slot, the members' slots reduced
 *             into it, the leaders' step on the slot (NCCL in the executors; host kind: MPI on
 *             host copies), avg's division, done := s, its result out. Its gate for s + 1 may
 *             pass while its GPU still works on s: the slots pipeline.
 * Reuse is ordered by the same flags: a member writes its slot for chunk s only after done >= s - 2,
 * which the leader writes after its reduce of chunk s - 2 read it; the leader writes its own slot
 * for s only after every ready >= s, which each member writes after copying chunk s - 2 out. The
 * leader's host wait is what keeps a failure from spreading as garbage: a leader enqueues its
 * leaders' step only when all its members' inputs are there and none aborted, so a leaders' step
 * that completes had every group's real data.
 * Failure: a rank whose wait fails (deadline, broken coll, lost device, a failed command) aborts
 * the group: abort := 1 and every flag pushed far ahead, which releases every stream of the group
 * still waiting (its own included: no executor stays wedged), and breaks the coll (a rebuild makes
 * it anew). A member checks, once its last command completed, that done >= s and no abort: a
 * released wait is a failure, never a result. recv is undefined after a failed operation. */
#define FL_ABORT 0u                   /* word index: nonzero once the group aborted */
#define FL_DONE 16u                   /* the leader's: the result of chunk `done` is in its staging */
#define FL_READY(j) (32u + 16u * (j)) /* member j's: its input of chunk ready[j] is in its staging */
#define FL_BYTES(g) (4u * FL_READY(g))
#define FL_AHEAD (1u << 30)           /* how far an abort pushes the flags */

static int fl_reached(uint32_t v, uint32_t want) { return (int32_t)(v - want) >= 0; }

/* The group's flags are dead: every waiter of the group passes, and finds the abort. */
static void flags_abort(acxc_hier_t *h) {
  if (!h->fl) return;
  /* release: abort is visible to whoever sees a pushed flag (stored after it). */
  atomic_store_explicit(&h->fl[FL_ABORT], 1u, memory_order_release);
  uint32_t v = h->fseq + FL_AHEAD;
  atomic_store_explicit(&h->fl[FL_DONE], v, memory_order_release);
  for (int j = 0; j < h->gsize; j++) atomic_store_explicit(&h->fl[FL_READY(j)], v, memory_order_release);
}

static int flags_aborted(const acxc_hier_t *h) {
  return atomic_load_explicit(&h->fl[FL_ABORT], memory_order_acquire) != 0;
}

static acx_status_t post(acx_coll_t *c, acxi_cmd_t *cmd, const acxi_bufarg_t *ba, int n, int64_t deadline,
                         acx_future_t **f) {
  return acxi_device_submit(c->dev, cmd, ba, n, 0, -1, deadline, f);
}

/* A copy of the ordered path: into a staging buffer from the caller's send, or out of one into
 * its recv (the names its log lines give the buffers). */
static acx_status_t post_copy(acx_coll_t *c, acx_buffer_t *dst, size_t doff, acx_buffer_t *src, size_t soff,
                              size_t bytes, uint32_t stream, int64_t deadline, acx_future_t **f) {
  acxi_cmd_t cmd = {.op = ACXI_OP_COPY_D2D, .stream = stream, .buf = {dst->id, src->id}, .off = {doff, soff},
                    .bytes = bytes};
  int in = dst == c->hier->mine;
  acxi_bufarg_t ba[2] = {{dst, in ? "staging" : "recv"}, {src, in ? "send" : "staging"}};
  return post(c, &cmd, ba, 2, deadline, f);
}

static acx_status_t post_flag(acx_coll_t *c, acxc_hier_t *h, uint32_t op, uint32_t word, uint32_t value,
                              uint32_t stream, int64_t deadline) {
  acxi_cmd_t cmd = {.op = op, .stream = stream, .off = {4u * word},
                    .arg = {h->flags->id, value, (uint64_t)acxi_left_ns(deadline)}}; /* >= 1 ms, never 0 */
  return post(c, &cmd, NULL, 0, deadline, NULL);
}

/* Waits for the future of this rank's last command until the deadline, watching for a broken
 * coll (a rebuild, another thread's failure). */
static acx_status_t ordered_wait(acx_coll_t *c, acx_future_t *f, int64_t deadline) {
  for (;;) {
    int64_t left = deadline - acxi_now_ns();
    (void)acx_future_wait(f, left <= 0 ? 0 : left < 2000000 ? left : 2000000, NULL, 0, NULL);
    /* The future's own status: a slice that timed out as the future completed says TIMEOUT. */
    if (acxi_future_is_done(f)) return acx_future_result(f, NULL, 0, NULL);
    acx_status_t b = acxc_coll_broken(c);
    if (b != ACX_OK) return b;
    if (left <= 0) {
      ACX_WARN(COLL, "hierarchical all-reduce (ordered): this rank's last step did not complete by the operation's "
               "deadline (ACX_COLL_TIMEOUT)");
      return ACX_ERR_COLL_TIMEOUT;
    }
  }
}

/* The leader, before it enqueues a chunk's reduce: every member's input of chunk s is there. */
static acx_status_t ordered_gate(acx_coll_t *c, acxc_hier_t *h, uint32_t s, int64_t deadline) {
  const int64_t spin_until = acxi_now_ns() + HIER_SPIN_NS;
  int j = 1;
  for (;;) {
    while (j < h->gsize && fl_reached(atomic_load_explicit(&h->fl[FL_READY(j)], memory_order_acquire), s)) j++;
    if (flags_aborted(h)) return ACX_ERR_PEER_LOST; /* a member's flag may be pushed, not its input */
    if (j == h->gsize) return ACX_OK;
    acx_status_t b = acxc_coll_broken(c);
    if (b != ACX_OK) return b;
    if (acxi_now_ns() >= deadline) {
      ACX_WARN(COLL, "hierarchical all-reduce (ordered): member %d of the group did not deliver chunk %u by the "
               "operation's deadline (ACX_COLL_TIMEOUT)", j, s);
      return ACX_ERR_COLL_TIMEOUT;
    }
    if (acxi_now_ns() < spin_until) sched_yield();
    else nanosleep(&(struct timespec){0, 20000}, NULL);
  }
}

/* The staging buffers hold two slots: chunk s lives in slot s % 2 (its byte offset here). With
 * ACX_COLL_HIER_OVERLAP slot 1 is a buffer of its own (the engine orders streams per buffer: two
 * buffers let a chunk's copies run beside the previous chunk's leaders' step). */
static size_t slot_off(const acxc_hier_t *h, uint32_t s) { return h->overlap ? 0 : (s & 1u) * (h->stage / 2); }
static acx_buffer_t *slot_mine(const acxc_hier_t *h, uint32_t s) { return h->overlap && (s & 1u) ? h->mine2 : h->mine; }
static acx_buffer_t *slot_peer(const acxc_hier_t *h, int j, uint32_t s) {
  return h->overlap && (s & 1u) ? h->peer2[j] : h->peer[j];
}
/* The stream of the leader's local steps (its input in, the members' reduce): with
 * ACX_COLL_HIER_OVERLAP the engine stream after the operation's, else the operation's. */
static uint32_t local_stream(const acx_coll_t *c, const acxc_hier_t *h, uint32_t st) {
  return h->overlap && c->dev->streams > 1 ? (st + 1) % (uint32_t)c->dev->streams : st;
}

/* host kind: the leaders' all-reduce of a slot, MPI on host copies (the read waits for the
 * commands before it: the host executor runs them in order). */
static acx_status_t slot_mpi(acx_coll_t *c, acxc_hier_t *h, acx_buffer_t *slot, size_t at, size_t n, acx_dtype_t dt,
                             acx_redop_t op, uint32_t stream, int64_t deadline) {
  size_t bytes = n * acx_dtype_size(dt);
  unsigned char *sb = h->host, *rb = h->host + h->stage;
  ACXCHECK(acx_buffer_read(slot, at, sb, bytes, stream, acxi_left_ns(deadline)));
  MPI_Request req;
  if (MPI_Iallreduce(sb, rb, (int)n, acxc_mpi_dtype(dt), acxc_mpi_redop(c, dt, op), h->lcomm, &req) != MPI_SUCCESS) {
    ACX_WARN(COLL, "hierarchical all-reduce (ordered): posting the leaders' MPI step failed");
    return ACX_ERR_MPI;
  }
  acx_status_t st = mpi_wait(c, h, &req, h->host, deadline, "the leaders' MPI step");
  if (st != ACX_OK) {
    if (h->parked && h->parked_mem == h->host) h->host = NULL; /* MPI keeps it */
    return st;
  }
  return acx_buffer_write(slot, at, rb, bytes, stream, acxi_left_ns(deadline));
}

/* The leader's chunk after its gate: combine, the leaders' step, done, its own result out. */
static acx_status_t ordered_lead(acx_coll_t *c, acxc_hier_t *h, const acxc_opdesc_t *d, size_t o, size_t n,
                                 uint32_t s, int64_t deadline, int *stepped, acx_future_t **f) {
  size_t es = acx_dtype_size(d->dtype), bytes = n * es, at = slot_off(h, s);
  uint32_t st = d->stream, lst = local_stream(c, h, st);
  acx_buffer_t *mine = slot_mine(h, s);
  acx_redop_t op = d->redop == ACX_REDOP_AVG ? ACX_REDOP_SUM : d->redop;
  ACXCHECK(post_copy(c, mine, at, d->send, o * es, bytes, lst, deadline, NULL));
  for (int j = 1; j < h->gsize; j++) {
    acx_buffer_t *pj = slot_peer(h, j, s);
    acxi_cmd_t cmd = {.op = ACXI_OP_REDUCE, .stream = lst, .dtype = (uint32_t)d->dtype,
                      .buf = {mine->id, pj->id}, .off = {at, at}, .bytes = bytes, .arg = {(uint64_t)op}};
    acxi_bufarg_t ba[2] = {{mine, "staging"}, {pj, "staging"}};
    ACXCHECK(post(c, &cmd, ba, 2, deadline, NULL));
  }
  if (h->lsize > 1) {
    *stepped = 1;
    if (c->host_kind) {
      ACXCHECK(slot_mpi(c, h, mine, at, n, d->dtype, op, st, deadline));
    } else {
      acxi_cmd_t cmd = {.op = ACXC_OP_ALLREDUCE, .stream = st, .dtype = (uint32_t)d->dtype, .bytes = n,
                        .buf = {mine->id, mine->id}, .off = {at, at},
                        .arg = {h->comm_id, (uint64_t)op, 0, ++c->seq}};
      acxi_bufarg_t ba[1] = {{mine, "staging"}};
      ACXCHECK(post(c, &cmd, ba, 1, deadline, NULL));
    }
  }
  if (d->redop == ACX_REDOP_AVG) {
    acxi_cmd_t cmd = {.op = ACXI_OP_DIV, .stream = st, .dtype = (uint32_t)d->dtype, .buf = {mine->id},
                      .off = {at}, .bytes = bytes, .arg = {(uint64_t)c->size}};
    acxi_bufarg_t ba[1] = {{mine, "staging"}};
    ACXCHECK(post(c, &cmd, ba, 1, deadline, NULL));
  }
  if (h->gsize > 1) ACXCHECK(post_flag(c, h, ACXI_OP_WRITE_VALUE, FL_DONE, s, st, deadline));
  return post_copy(c, d->recv, o * es, mine, at, bytes, st, deadline, f);
}

/* A member's result of chunk s out of its leader's slot, once the leader is done with it. */
static acx_status_t member_out(acx_coll_t *c, acxc_hier_t *h, const acxc_opdesc_t *d, size_t o, size_t n, uint32_t s,
                               int64_t deadline, acx_future_t **f) {
  size_t es = acx_dtype_size(d->dtype);
  ACXCHECK(post_flag(c, h, ACXI_OP_WAIT_VALUE, FL_DONE, s, d->stream, deadline));
  return post_copy(c, d->recv, o * es, slot_peer(h, 0, s), slot_off(h, s), n * es, d->stream, deadline, f);
}

/* A member's chunk s: its input into its slot once the leader has read what chunk s - 2 left
 * there, ready := s; then the previous chunk's result out. Nothing is waited for here. */
static acx_status_t member_in(acx_coll_t *c, acxc_hier_t *h, const acxc_opdesc_t *d, size_t o, size_t n, uint32_t s,
                              int64_t deadline) {
  size_t es = acx_dtype_size(d->dtype);
  ACXCHECK(post_flag(c, h, ACXI_OP_WAIT_VALUE, FL_DONE, s - 2, d->stream, deadline));
  ACXCHECK(post_copy(c, slot_mine(h, s), slot_off(h, s), d->send, o * es, n * es, d->stream, deadline, NULL));
  return post_flag(c, h, ACXI_OP_WRITE_VALUE, FL_READY((uint32_t)h->grank), s, d->stream, deadline);
}

static acx_status_t ordered_allreduce(acx_coll_t *c, acxc_hier_t *h, const acxc_opdesc_t *d, int64_t deadline) {
  size_t es = acx_dtype_size(d->dtype), per = h->stage / 2 / es, total = d->count;
  if (flags_aborted(h)) return lost(c, ACX_ERR_PEER_LOST); /* an earlier operation's abort: rebuild */
  if (total == 0) return ACX_OK;
  acx_future_t *f = NULL;
  acx_status_t st = ACX_OK;
  int stepped = 0; /* the leaders' NCCL step was enqueued */
  size_t po = 0, pn = 0; /* a member's previous chunk, whose result is still to come out */
  for (size_t o = 0; o < total && st == ACX_OK; o += per) {
    size_t n = total - o < per ? total - o : per;
    uint32_t s = ++h->fseq;
    if (h->grank == 0) {
      /* Chunk s + 1's gate may pass while the GPU still works on s: the two slots pipeline. */
      if ((st = ordered_gate(c, h, s, deadline)) == ACX_OK)
        st = ordered_lead(c, h, d, o, n, s, deadline, &stepped, o + n == total ? &f : NULL);
    } else {
      st = member_in(c, h, d, o, n, s, deadline);
      if (st == ACX_OK && pn) st = member_out(c, h, d, po, pn, s - 1, deadline, NULL);
      po = o, pn = n;
      if (st == ACX_OK && o + n == total) st = member_out(c, h, d, o, n, s, deadline, &f);
    }
  }
  if (st == ACX_OK) st = ordered_wait(c, f, deadline);
  if (f) acx_future_release(f);
  if (st == ACX_OK && h->grank != 0 &&
      (flags_aborted(h) || !fl_reached(atomic_load_explicit(&h->fl[FL_DONE], memory_order_acquire), h->fseq)))
    st = ACX_ERR_PEER_LOST; /* released by an abort, or a host-kind wait that gave up */
  if (st == ACX_OK) return ACX_OK;
  flags_abort(h);
  if (stepped && !c->host_kind) {
    /* Our leaders' step may be waiting in NCCL for a leader that will not come. */
    acxi_cmd_t ab = {.op = ACXC_OP_ABORT, .arg = {h->comm_id, (uint64_t)ACX_ERR_COLL_TIMEOUT}};
    (void)acxi_device_call(c->dev, &ab, NULL, 0, 0, -1, 5000000000LL, NULL);
  }
  ACX_WARN(COLL, "hierarchical all-reduce (ordered, %zu elements) failed on rank %d: %s; the group's flags are "
           "aborted", d->count, c->rank, acx_status_name(st));
  return lost(c, st);
}

acx_status_t acxc_hier_run(acx_coll_t *c, const acxc_opdesc_t *d, int64_t deadline) {
  acxc_hier_t *h = c->hier;
  if (!h) return ACX_ERR_INVALID_STATE;
  size_t es = acx_dtype_size(d->dtype);
  /* The same choice on every rank: the count and dtype are the collective's, `direct` and the
   * ordered path agreed at creation. */
  if (d->op == ACXC_OP_ALLREDUCE && h->dhost && d->count <= h->direct / es) return direct_allreduce(c, h, d, deadline);
  if (d->op == ACXC_OP_ALLREDUCE && h->fl) return ordered_allreduce(c, h, d, deadline);
  size_t total = d->count;
  if (d->op == ACXC_OP_REDUCE_SCATTER) total = d->count * (size_t)c->size; /* reduced whole, then split */
  size_t per = chunk_elems(c, h, d, es);
  if (per == 0) {
    ACX_WARN(COLL, "hierarchical collective: %d ranks in %d groups of up to %d need more than the %zu-byte staging "
             "buffers (ACX_COLL_HIER_STAGE_KB) hold for one %zu-byte element", c->size, h->lsize, h->gmax, h->stage, es);
    return ACX_ERR_OUT_OF_RANGE;
  }
  acx_status_t result = ACX_OK, own = ACX_OK; /* own: this rank's first failed step */
  for (size_t o = 0; o < total; o += per) {
    chunk_t k = {.d = d, .es = es, .o = o, .n = total - o < per ? total - o : per};
    /* A member writes its input first; the leader only after the gather, which tells it that
     * every member has copied the last chunk's result out of the leader's staging buffer. */
    acx_status_t s = h->grank == 0 ? ACX_OK : step_in(c, h, &k, deadline), worst = ACX_OK;
    if (own == ACX_OK) own = s;
    acx_status_t m = exchange(c, h, X_GATHER, s, deadline, &worst);
    if (m != ACX_OK) return lost(c, m);
    if (h->grank == 0) {
      if (worst == ACX_OK && (worst = step_in(c, h, &k, deadline)) != ACX_OK) own = worst;
      if (worst == ACX_OK && (worst = step_combine(c, h, &k, deadline)) != ACX_OK) own = worst;
      if ((m = exchange(c, h, X_LEADERS, worst, deadline, &worst)) != ACX_OK) return lost(c, m);
      if (worst == ACX_OK) {
        worst = step_inner(c, h, &k, deadline);
        if (worst != ACX_OK) own = worst;
        if (worst != ACX_OK && h->lsize > 1) {
          /* The leaders ran a collective that failed on this one: the others may not know. */
          acxc_coll_break(c, worst, 0, "the leaders' step of a hierarchical collective failed");
          return worst;
        }
      }
    }
    if ((m = exchange(c, h, X_BCAST, worst, deadline, &worst)) != ACX_OK) return lost(c, m);
    if (worst != ACX_OK) {
      /* A rank whose own steps went well reports another's failure as a lost peer: its device
       * is fine (a peer's ACX_ERR_DEVICE_LOST must not send this rank into device recovery). */
      if (own == ACX_OK)
        ACX_WARN(COLL, "hierarchical collective (op %#x, %zu elements): another rank's step failed with %s: "
                 "ACX_ERR_PEER_LOST here", d->op, d->count, acx_status_name(worst));
      result = own != ACX_OK ? own : ACX_ERR_PEER_LOST;
      break;
    }
    if ((s = step_out(c, h, &k, deadline)) != ACX_OK) {
      /* This rank's copy failed; the others go on (their results are theirs). */
      result = s;
      break;
    }
  }
  if (result != ACX_OK && result != ACX_ERR_PEER_LOST)
    ACX_WARN(COLL, "hierarchical collective (op %#x, %zu elements) failed on this rank: %s", d->op, d->count,
             acx_status_name(result));
  return result;
}

/* ------------------------------------------------------------------------------------------ */
/* creation                                                                                    */

/* Which group this rank is in: the ranks of its GPU (the lowest is the leader), or on the host
 * kind the ranks of its node, ACX_COLL_HIER_GROUP consecutive ones at a time. */
static int group_color(const acx_coll_t *c) {
  const acx_world_t *w = c->world;
  if (!c->host_kind && w->n_gpu_peers > 0) return w->gpu_peers[0];
  int64_t per = acxi_param_int("ACX_COLL_HIER_GROUP");
  int block = per > 0 ? w->local_rank / (int)per : 0;
  return w->node * 65536 + block;
}

int acxc_hier_color(const acx_coll_t *c) { return group_color(c); }

/* A blocking MPI call that has no non-blocking form: only once every rank of `comm` has arrived
 * (the barrier, with a deadline), so it waits for no absent rank. */
static acx_status_t arrive(acx_coll_t *c, acxc_hier_t *h, MPI_Comm comm, int64_t deadline, const char *what) {
  MPI_Request req;
  if (MPI_Ibarrier(comm, &req) != MPI_SUCCESS) return ACX_ERR_MPI;
  return mpi_wait(c, h, &req, NULL, deadline, what);
}

/* A step of the set-up that can fail on one rank alone (an allocation, an export, an import):
 * every rank says how it went, so that none goes on to the next step's collectives without the
 * others, or waits in them for a rank that left (a rank's executor lost during a rebuild). Returns
 * this rank's own failure, else ACX_ERR_PEER_LOST when another rank's step failed. */
static acx_status_t agree_step(acx_coll_t *c, acxc_hier_t *h, MPI_Comm comm, acx_status_t st, int64_t deadline,
                               const char *what) {
  int *v = malloc(2 * sizeof *v);
  if (!v) return ACX_ERR_NO_MEMORY;
  v[0] = st == ACX_OK;
  MPI_Request req;
  if (MPI_Iallreduce(&v[0], &v[1], 1, MPI_INT, MPI_MIN, comm, &req) != MPI_SUCCESS) {
    free(v);
    return ACX_ERR_MPI;
  }
  acx_status_t w = mpi_wait(c, h, &req, v, deadline, what);
  if (w != ACX_OK) return st != ACX_OK ? st : w; /* v is parked with the request */
  int all = v[1];
  free(v);
  if (st != ACX_OK) return st;
  if (!all) {
    ACX_WARN(COLL, "acx_coll_create: another rank failed %s: this rank's set-up stops there", what);
    return ACX_ERR_PEER_LOST;
  }
  return ACX_OK;
}

/* Every member's staging handle to the leader, the leader's to every member. A rank whose export
 * fails still takes part in the exchange (with an empty handle); the ranks then agree. */
static acx_status_t exchange_handles(acx_coll_t *c, acxc_hier_t *h, acx_buffer_t *mine, acx_buffer_t **peer,
                                     int64_t deadline) {
  acxi_ipc_handle_t *all = calloc((size_t)h->gsize + 1, sizeof *all);
  if (!all) return ACX_ERR_NO_MEMORY;
  acx_status_t local = acxi_buffer_ipc_export(mine, &all[h->gsize], acxi_left_ns(deadline)), st;
  MPI_Request req;
  if (MPI_Igather(&all[h->gsize], (int)sizeof *all, MPI_BYTE, all, (int)sizeof *all, MPI_BYTE, 0, h->gcomm, &req) !=
      MPI_SUCCESS) {
    free(all);
    return ACX_ERR_MPI;
  }
  if ((st = mpi_wait(c, h, &req, all, deadline, "the staging handles' gather")) != ACX_OK) return st;
  if (MPI_Ibcast(&all[0], (int)sizeof *all, MPI_BYTE, 0, h->gcomm, &req) != MPI_SUCCESS) {
    free(all);
    return ACX_ERR_MPI;
  }
  if ((st = mpi_wait(c, h, &req, all, deadline, "the leader's staging handle")) != ACX_OK) return st;
  /* An empty handle (a peer's failed export) is not imported: the agreement below fails the step. */
  acxi_ipc_handle_t none;
  memset(&none, 0, sizeof none);
  for (int j = h->grank == 0 ? 1 : 0; local == ACX_OK && j < (h->grank == 0 ? h->gsize : 1); j++)
    if (memcmp(&all[j], &none, sizeof none) != 0)
      local = acxi_buffer_ipc_import(c->dev, &all[j], ACX_DTYPE_BYTE, acxi_left_ns(deadline), &peer[j]);
  free(all);
  return agree_step(c, h, acxc_mpi_comm(c), local, deadline, "the staging buffers' exchange");
}

/* The ordered path's flags: the leader's region, attached by its members, registered with every
 * executor of the group, tried once (a write and a wait) by each; the path is on only if every
 * rank of the coll has it on and got this far (otherwise every rank uses the step protocol, and
 * says why in its log). */
typedef struct flags_msg {
  acxi_host_share_t share;
  int32_t ok, pad;
} flags_msg_t;

static acx_status_t flags_setup(acx_coll_t *c, acxc_hier_t *h, int64_t deadline) {
  int ok = acxi_param_int("ACX_COLL_HIER_ORDERED") != 0;
  const char *why = ok ? NULL : "ACX_COLL_HIER_ORDERED=0";
  flags_msg_t *msg = calloc(1, sizeof *msg);
  if (!msg) return ACX_ERR_NO_MEMORY;
  if (h->grank == 0 && ok) {
    acx_status_t st = acx_host_alloc(c->dev, FL_BYTES(h->gsize), &h->flags);
    if (st == ACX_OK) st = acxi_host_share(h->flags, &msg->share);
    if (st != ACX_OK) {
      ok = 0;
      why = "the leader's flag region could not be made";
    }
  }
  msg->ok = ok;
  MPI_Request req;
  if (MPI_Ibcast(msg, (int)sizeof *msg, MPI_BYTE, 0, h->gcomm, &req) != MPI_SUCCESS) {
    free(msg);
    return ACX_ERR_MPI;
  }
  ACXCHECK(mpi_wait(c, h, &req, msg, deadline, "the group's flag region"));
  if (h->grank != 0 && ok && !msg->ok) {
    ok = 0;
    why = "the leader has it off or could not make its flag region";
  }
  if (h->grank != 0 && ok && acxi_host_attach(c->dev, &msg->share, &h->flags) != ACX_OK) {
    ok = 0;
    why = "the leader's flag region could not be attached";
  }
  free(msg);
  void *p = NULL;
  if (ok && acx_host_mem_ptr(h->flags, &p, NULL) != ACX_OK) ok = 0;
  if (ok) {
    /* The executor's own word, rewritten with its value (0: nothing ran yet), then waited for. */
    uint32_t w = h->grank == 0 ? FL_DONE : FL_READY((uint32_t)h->grank);
    for (uint32_t op = ACXI_OP_WRITE_VALUE; ok; op = ACXI_OP_WAIT_VALUE) {
      acxi_cmd_t cmd = {.op = op, .off = {4u * w}, .arg = {h->flags->id, 0, (uint64_t)acxi_left_ns(deadline)}};
      if (acxi_device_call(c->dev, &cmd, NULL, 0, 0, -1, acxi_left_ns(deadline), NULL) != ACX_OK) {
        ok = 0;
        why = "the executor cannot wait for or write flags in host memory";
      }
      if (op == ACXI_OP_WAIT_VALUE) break;
    }
  }
  int *all = malloc(2 * sizeof *all);
  if (!all) return ACX_ERR_NO_MEMORY;
  all[0] = ok;
  if (MPI_Iallreduce(&all[0], &all[1], 1, MPI_INT, MPI_MIN, acxc_mpi_comm(c), &req) != MPI_SUCCESS) {
    free(all);
    return ACX_ERR_MPI;
  }
  ACXCHECK(mpi_wait(c, h, &req, all, deadline, "the ordered path's agreement"));
  int every = all[1];
  free(all);
  if (every) {
    h->fl = p;
    return ACX_OK;
  }
  if (ok) why = "another rank cannot take it";
  ACX_INFO(COLL, "hierarchical coll: rank %d: all-reduces take the step protocol, not the ordered path: %s", c->rank,
           why);
  if (h->flags) acx_host_free(h->flags);
  h->flags = NULL;
  return ACX_OK;
}

int acxc_hier_mps(char *dir, size_t n) {
  const char *d = getenv("CUDA_MPS_PIPE_DIRECTORY");
  if (!d || !*d) d = "/tmp/nvidia-mps";
  if (dir && n) snprintf(dir, n, "%s", d);
  char path[PATH_MAX];
  if ((size_t)snprintf(path, sizeof path, "%s/control", d) >= sizeof path) return 0;
  struct stat st;
  return stat(path, &st) == 0;
}

/* cuda leaders: an NCCL communicator among the leaders (group 0's executor makes the id). */
static acx_status_t leaders_nccl(acx_coll_t *c, acxc_hier_t *h, int64_t init_timeout_ns, int64_t deadline) {
  ACXCHECK(acx_host_alloc(c->dev, sizeof(acxc_region_t), &h->region));
  void *p;
  size_t bytes;
  ACXCHECK(acx_host_mem_ptr(h->region, &p, &bytes));
  acxc_region_t *reg = p;
  memset(reg, 0, offsetof(acxc_region_t, slots));
  reg->magic = ACXC_REGION_MAGIC;
  /* The id and the maker's status travel together: no leader waits for an id that will not come. */
  unsigned char *msg = calloc(1, ACXC_NCCL_ID_BYTES + sizeof(int));
  if (!msg) return ACX_ERR_NO_MEMORY;
  acx_status_t made = ACX_OK;
  if (h->lrank == 0) {
    made = acxc_nccl_make_id(c->dev, h->region);
    memcpy(msg, reg->nccl_id, ACXC_NCCL_ID_BYTES);
    memcpy(msg + ACXC_NCCL_ID_BYTES, &(int){(int)made}, sizeof(int));
  }
  MPI_Request req;
  if (MPI_Ibcast(msg, ACXC_NCCL_ID_BYTES + (int)sizeof(int), MPI_BYTE, 0, h->lcomm, &req) != MPI_SUCCESS) {
    free(msg);
    return ACX_ERR_MPI;
  }
  acx_status_t st = mpi_wait(c, h, &req, msg, deadline, "the leaders' NCCL id");
  if (st != ACX_OK) return st;
  int root_status;
  memcpy(&root_status, msg + ACXC_NCCL_ID_BYTES, sizeof root_status);
  memcpy(reg->nccl_id, msg, ACXC_NCCL_ID_BYTES);
  free(msg);
  if (root_status != ACX_OK) return (acx_status_t)root_status;
  h->comm_id = acxc_next_comm_id();
  acxi_cmd_t cmd = {.op = ACXC_OP_INIT,
                    .arg = {h->comm_id, (uint64_t)h->lsize, (uint64_t)h->lrank, h->region->id,
                            (uint64_t)(init_timeout_ns / 1000000)},
                    /* Blocking when the ordered path is on: a non-blocking communicator may
                     * return ncclInProgress and enqueue the kernel later, behind the flag write
                     * that follows it on the stream (members would copy the result before it is
                     * there). */
                    .off = {c->world->nodes > 1 || h->fl ? ACXC_INIT_BLOCKING : 0}};
  acxi_cpl_t cpl = {0};
  st = acxc_coll_init_comm(c, &cmd, init_timeout_ns + 5000000000LL, &cpl);
  if (st != ACX_OK) {
    ACX_WARN(COLL, "hierarchical coll: the leaders' NCCL communicator (leader %d of %d) failed: %s (NCCL code %d)",
             h->lrank, h->lsize, acx_status_str(st), cpl.lib_code);
    h->comm_id = 0;
  }
  return st;
}

static acx_status_t build(acx_coll_t *c, acxc_hier_t *h, int64_t init_timeout_ns) {
  acx_world_t *w = c->world;
  int64_t deadline = acxi_deadline(w->timeout_ns);
  int64_t kb = acxi_param_int("ACX_COLL_HIER_STAGE_KB");
  if (kb <= 0 || kb > (int64_t)(SIZE_MAX / 2048)) {
    ACX_WARN(COLL, "acx_coll_create: ACX_COLL_HIER_STAGE_KB=%" PRId64 " is not a positive size", kb);
    return ACX_ERR_INVALID_ARG;
  }
  h->stage = (size_t)kb * 1024;
  /* The worker's own duplicate of the world's communicator: nothing else issues collectives on it. */
  MPI_Comm comm = acxc_mpi_comm(c);
  ACXCHECK(arrive(c, h, comm, deadline, "the hierarchical coll's arrival"));
  if (MPI_Comm_split(comm, group_color(c), w->rank, &h->gcomm) != MPI_SUCCESS) return ACX_ERR_MPI;
  MPI_Comm_set_errhandler(h->gcomm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(h->gcomm, &h->grank);
  MPI_Comm_size(h->gcomm, &h->gsize);
  if (MPI_Comm_split(comm, h->grank == 0 ? 0 : MPI_UNDEFINED, w->rank, &h->lcomm) != MPI_SUCCESS)
    return ACX_ERR_MPI;
  if (h->lcomm != MPI_COMM_NULL) {
    MPI_Comm_set_errhandler(h->lcomm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(h->lcomm, &h->lrank);
    MPI_Comm_size(h->lcomm, &h->lsize);
  }
  /* Every rank's group and place in it, and its direct-path limit; the leader count and index
   * reach the members. */
  int64_t dkb = acxi_param_int("ACX_COLL_HIER_DIRECT_KB");
  if (dkb < 0) {
    ACX_WARN(COLL, "acx_coll_create: ACX_COLL_HIER_DIRECT_KB=%" PRId64 " is negative (0 turns the direct path off)", dkb);
    return ACX_ERR_INVALID_ARG;
  }
  if (dkb > kb) dkb = kb; /* never more than a staging buffer */
  if (dkb > INT_MAX / 1024) dkb = INT_MAX / 1024; /* counts go to MPI as int */
  int ov = acxi_param_int("ACX_COLL_HIER_OVERLAP") > 0;
  int mine[6] = {h->lrank, h->grank, h->gsize, h->lsize, (int)dkb, ov};
  int *all = malloc((size_t)c->size * sizeof mine);
  if (!all) return ACX_ERR_NO_MEMORY;
  MPI_Request req;
  if (MPI_Iallgather(mine, 6, MPI_INT, all, 6, MPI_INT, comm, &req) != MPI_SUCCESS) {
    free(all);
    return ACX_ERR_MPI;
  }
  ACXCHECK(mpi_wait(c, h, &req, all, deadline, "the groups' layout"));
  h->group_of = malloc((size_t)c->size * sizeof *h->group_of);
  h->pos_of = malloc((size_t)c->size * sizeof *h->pos_of);
  h->peer = calloc((size_t)h->gsize, sizeof *h->peer);
  h->peer2 = calloc((size_t)h->gsize, sizeof *h->peer2);
  if (!h->group_of || !h->pos_of || !h->peer || !h->peer2) {
    free(all);
    return ACX_ERR_NO_MEMORY;
  }
  /* A member learns its group's index from its leader's entry (the lowest rank with grank 0 of
   * its group: the leader is the group's lowest rank, so the first leader entry at or below). */
  for (int r = 0; r < c->size; r++) {
    h->pos_of[r] = all[6 * r + 1];
    if (all[6 * r + 2] > h->gmax) h->gmax = all[6 * r + 2];
    if (all[6 * r + 1] == 0) h->lsize = all[6 * r + 3];
    if (all[6 * r + 4] < dkb) dkb = all[6 * r + 4];
    if (!all[6 * r + 5]) ov = 0; /* every rank's, or none's */
  }
  h->overlap = ov;
  free(all);
  h->direct = (size_t)dkb * 1024;
  if (h->direct && !(h->dhost = malloc(2 * h->direct + 2 * sizeof(int)))) return ACX_ERR_NO_MEMORY;
  /* Group indices: a leader's own lrank; members get it from their leader. */
  int *gi = malloc(sizeof *gi);
  if (!gi) return ACX_ERR_NO_MEMORY;
  *gi = h->lrank;
  if (MPI_Ibcast(gi, 1, MPI_INT, 0, h->gcomm, &req) != MPI_SUCCESS) {
    free(gi);
    return ACX_ERR_MPI;
  }
  ACXCHECK(mpi_wait(c, h, &req, gi, deadline, "the group's index"));
  h->lrank = *gi;
  free(gi);
  int *groups = malloc((size_t)c->size * sizeof *groups);
  if (!groups) return ACX_ERR_NO_MEMORY;
  if (MPI_Iallgather(&h->lrank, 1, MPI_INT, groups, 1, MPI_INT, comm, &req) != MPI_SUCCESS) {
    free(groups);
    return ACX_ERR_MPI;
  }
  ACXCHECK(mpi_wait(c, h, &req, groups, deadline, "the groups' indices"));
  memcpy(h->group_of, groups, (size_t)c->size * sizeof *groups);
  free(groups);

  acx_status_t st = acxi_buffer_alloc_shareable(c->dev, h->stage, ACX_DTYPE_BYTE, acxi_left_ns(deadline), &h->mine);
  if (st == ACX_OK && h->grank == 0) {
    st = acx_buffer_alloc(c->dev, h->stage, ACX_DTYPE_BYTE, ACX_MEM_DEVICE, acxi_left_ns(deadline), &h->pack);
    if (st == ACX_OK && c->host_kind && !(h->host = malloc(2 * h->stage))) st = ACX_ERR_NO_MEMORY;
  }
  if (st == ACX_OK && h->overlap)
    st = acxi_buffer_alloc_shareable(c->dev, h->stage / 2, ACX_DTYPE_BYTE, acxi_left_ns(deadline), &h->mine2);
  ACXCHECK(agree_step(c, h, comm, st, deadline, "the staging buffers' allocation"));
  ACXCHECK(exchange_handles(c, h, h->mine, h->peer, deadline));
  if (h->overlap) ACXCHECK(exchange_handles(c, h, h->mine2, h->peer2, deadline));
  ACXCHECK(flags_setup(c, h, deadline));
  if (h->grank == 0 && h->lsize > 1 && !c->host_kind) ACXCHECK(leaders_nccl(c, h, init_timeout_ns, deadline));
  char members[128] = "";
  size_t at = 0;
  for (int r = 0; r < c->size && at + 16 < sizeof members; r++)
    if (h->group_of[r] == h->lrank) at += (size_t)snprintf(members + at, sizeof members - at, "%s%d", at ? "," : "", r);
  acx_topo_binding_t b;
  acx_world_binding(w, &b);
  char where[sizeof c->hier_where];
  if (c->host_kind) snprintf(where, sizeof where, "host memory of node %d, ranks %s", w->node, members);
  else snprintf(where, sizeof where, "GPU %s of node %d, ranks %s", b.pci_bus_id[0] ? b.pci_bus_id : "(none)", w->node,
                members);
  /* Fixed at creation (a rebuild makes the same groups): validation reads it without a lock. */
  int first = !c->hier_where[0];
  if (first) memcpy(c->hier_where, where, sizeof where);
  char mps[PATH_MAX];
  if (first && !c->host_kind && h->grank == 0 && h->gsize > 1 && !acxc_hier_mps(mps, sizeof mps))
    ACX_WARN(COLL, "hierarchical coll: %s: shared without MPS (no control pipe in %s): the GPU time-slices its "
             "ranks' executor contexts, ~0.3 ms per collective at 2 ranks per GPU on the GPU host; start "
             "`nvidia-cuda-mps-control -d` on the node before the job (docs/collectives.md)", where, mps);
  if (h->fl)
    ACX_INFO(COLL, "hierarchical coll: rank %d is %s of group %d of %d (%s); staging %zu KiB; all-reduces ordered "
             "on the streams%s", c->rank, h->grank == 0 ? "the leader" : "a member", h->lrank, h->lsize, where,
             h->stage / 1024, h->overlap ? " (the second slot a buffer of its own, the leader's local steps on a "
             "second stream: ACX_COLL_HIER_OVERLAP)" : "");
  else
    ACX_INFO(COLL, "hierarchical coll: rank %d is %s of group %d of %d (%s); staging %zu KiB; all-reduces up to %zu "
             "KiB direct", c->rank, h->grank == 0 ? "the leader" : "a member", h->lrank, h->lsize, where,
             h->stage / 1024, h->direct / 1024);
  return ACX_OK;
}

void acxc_hier_destroy(acx_coll_t *c) {
  acxc_hier_t *h = c->hier;
  if (!h) return;
  c->hier = NULL;
  /* Mappings before the memory they map (a CUDA IPC export must outlive its imports). */
  for (int j = 0; h->peer && j < h->gsize; j++)
    if (h->peer[j]) acx_buffer_release(h->peer[j]);
  for (int j = 0; h->peer2 && j < h->gsize; j++)
    if (h->peer2[j]) acx_buffer_release(h->peer2[j]);
  if (h->comm_id && atomic_load_explicit(&c->dev->generation, memory_order_acquire) == c->generation) {
    acxi_cmd_t cmd = {.op = ACXC_OP_DESTROY, .arg = {h->comm_id, 0, 0, 0, 1000}};
    (void)acxi_device_call(c->dev, &cmd, NULL, 0, 0, -1, 5000000000LL, NULL);
  }
  if (h->region) acx_host_free(h->region);
  /* Every stream of the group is past its waits: the operations completed, or whoever failed
   * pushed the flags. An attached region only unmaps; the leader's outlives the mappings. */
  if (h->flags) acx_host_free(h->flags);
  if (h->pack) acx_buffer_release(h->pack);
  if (h->mine) acx_buffer_release(h->mine);
  if (h->mine2) acx_buffer_release(h->mine2);
  /* Host copies MPI may still write were handed over when their exchange was parked (NULL here). */
  free(h->host);
  free(h->dhost);
  if (!h->parked) {
    if (h->gcomm != MPI_COMM_NULL) MPI_Comm_free(&h->gcomm);
    if (h->lcomm != MPI_COMM_NULL) MPI_Comm_free(&h->lcomm);
  }
  free(h->peer);
  free(h->peer2);
  free(h->group_of);
  free(h->pos_of);
  free(h);
}

acx_status_t acxc_hier_create(acx_coll_t *c, int64_t init_timeout_ns) {
  acxc_hier_t *h = calloc(1, sizeof *h);
  if (!h) return ACX_ERR_NO_MEMORY;
  h->gcomm = h->lcomm = MPI_COMM_NULL;
  h->lsize = 1;
  c->hier = h;
  h->building = 1;
  acx_status_t st = build(c, h, init_timeout_ns);
  h->building = 0;
  if (st != ACX_OK) {
    ACX_WARN(COLL, "acx_coll_create: the hierarchical coll's set-up failed on rank %d: %s", c->rank,
             acx_status_name(st));
    acxc_hier_destroy(c);
  }
  return st;
}
