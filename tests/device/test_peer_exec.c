/* The extension "peer" (kernels/peer/, runtime/proto/peer_ops.h) driven directly, without MPI:
 * three devices (three executors) in one process stand for the ranks of one node. Each has an area
 * the others map and a control block; SETUP registers the set in every executor; all-reduces are
 * sent to the three at once and checked bit for bit against a reference computed here in the
 * documented order and arithmetic (ranks 0, 1, 2; integers wrapping through their unsigned type,
 * avg truncating; f16/bf16 accumulated in f32 and rounded once; f32/f64 in their own type), for the
 * ten dtypes and five ops, in place and out of place, with counts that split into several blocks
 * on a GPU. Then a withheld operation: the abort word ends the wait with its status, the deadline
 * with ACX_ERR_COLL_TIMEOUT; bad commands are refused with a log line. The set has big slots, so
 * all-reduces beyond a slot take the two-shot (in chunks, the last one short). Usage: test_peer_exec
 * process|inline (host kind) | test_peer_exec --cuda (three executors on GPU 0, through CUDA IPC:
 * the kernel; exits 77 without a GPU); --group: the three are one group of the two-shot and of the
 * one-shot with groups (as ranks of one GPU are). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acx/coll.h"
#include "acx/device.h"
#include "acx_test.h"
#include "runtime/actor/future.h"
#include "runtime/base/clock.h"
#include "runtime/base/half.h"
#include "runtime/base/param.h"
#include "runtime/device/device_internal.h"
#include "runtime/proto/peer_ops.h"

#define NR 3
#define T 60000000000LL
#define SLOT (64u * 1024u)
#define BIG ((uint64_t)ACXP_BIG_MIN)             /* the two-shot's chunks */
#define MAXB (4 * BIG)                           /* the largest all-reduce here, in bytes */

static acx_system_t *sys;
static acx_device_t *dev[NR];
static acx_buffer_t *area[NR], *imp[NR][NR];
static acx_host_mem_t *ctlmem[NR];
static acxp_ctl_t *ctl[NR];
static uint64_t seq; /* the operation number, the same for every "rank" */
static int inline_mode, cuda_mode;
/* --group: the three are one group of the two-shot and of the one-shot with groups
 * (runtime/proto/peer_ops.h: ranks of one GPU), so both sum within the group first; their
 * arithmetic differs only in rounding the group's sum of f16/bf16 to the type before avg divides
 * it. */
static int group_mode;
static const uint64_t SET = 77;
/* The push lines' limit: ACX_COLL_PEER_LL_KB KiB (64 by default, where every all-reduce up to a
 * slot pushes lines; the _ll16 variants take 16, where 32 KiB takes the one-shot). */
static uint64_t ll_bytes;

static void setup_set(void) {
  for (int r = 0; r < NR; r++) {
    ACX_ASSERT_STATUS(acxi_buffer_alloc_shareable(dev[r], ACXP_AREA_BYTES_SET(SLOT, BIG, group_mode ? 1 : 0),
                                                  ACX_DTYPE_BYTE, T, &area[r]),
                      ACX_OK);
    ACX_ASSERT_STATUS(acx_buffer_fill(area[r], 0, ACXP_FLAG_BYTES, 0, 4, 0, T), ACX_OK);
    ACX_ASSERT_STATUS(acx_buffer_fill(area[r], ACXP_LL_OFF(0, 0, SLOT), ACXP_LL_REGION_BYTES, 0, 4, 0, T), ACX_OK);
    ACX_ASSERT_STATUS(acx_buffer_fill(area[r], ACXP_BIG_OFF(SLOT),
                                      2 * ACXP_BIG_FLAG_BYTES + ACXP_BIG_PUB_BYTES + ACXP_BIG_REGTAB_BYTES, 0, 4, 0, T),
                      ACX_OK);
  }
  for (int r = 0; r < NR; r++) {
    acxi_ipc_handle_t h;
    ACX_ASSERT_STATUS(acxi_buffer_ipc_export(area[r], &h, T), ACX_OK);
    for (int q = 0; q < NR; q++)
      if (q != r) ACX_ASSERT_STATUS(acxi_buffer_ipc_import(dev[q], &h, ACX_DTYPE_BYTE, T, &imp[q][r]), ACX_OK);
  }
  for (int r = 0; r < NR; r++) {
    void *p = NULL;
    size_t bytes = 0;
    ACX_ASSERT_STATUS(acx_host_alloc(dev[r], sizeof(acxp_ctl_t), &ctlmem[r]), ACX_OK);
    ACX_ASSERT_STATUS(acx_host_mem_ptr(ctlmem[r], &p, &bytes), ACX_OK);
    ctl[r] = p;
    memset(ctl[r], 0, sizeof *ctl[r]);
    ctl[r]->magic = ACXP_CTL_MAGIC;
    ctl[r]->slot_bytes = SLOT;
    ctl[r]->ll_bytes = ll_bytes; /* push lines up to this size */
    ctl[r]->big_bytes = BIG;        /* beyond a slot the two-shot, in chunks of BIG */
    ctl[r]->big_blocks = 32;
    for (int q = 0; q < NR; q++) ctl[r]->area[q] = q == r ? area[r]->id : imp[r][q]->id;
    if (group_mode) {
      ctl[r]->groups = 1;
      ctl[r]->per_group = NR;
      for (int q = 0; q < NR; q++) ctl[r]->grp[q] = 0, ctl[r]->lane[q] = (int8_t)q, ctl[r]->at[q] = (int8_t)q;
      ctl[r]->small_groups = 1; /* the one-shot with groups above the lines (from 1 byte) */
      ctl[r]->ll_groups = 1;    /* and the lines with groups */
    }
    acxi_cmd_t cmd = {.op = ACXP_OP_SETUP, .arg = {SET, NR, (uint64_t)r, ctlmem[r]->id}};
    ACX_ASSERT_STATUS(acxi_device_call(dev[r], &cmd, NULL, 0, 0, -1, T, NULL), ACX_OK);
  }
}

/* One all-reduce on the given ranks (the others withhold it), each rank's registration slots of
 * send and recv in regs[r] (ACXP_OP_ALLREDUCE's arg[2]; NULL: none); their statuses in st[]. */
static void allreduce_reg(const int *on, acx_buffer_t **send, acx_buffer_t **recv, const uint64_t *regs, size_t count,
                          acx_dtype_t d, int op, uint64_t ms, acx_status_t *st) {
  acx_future_t *f[NR] = {0};
  seq++;
  for (int r = 0; r < NR; r++) {
    st[r] = ACX_OK;
    if (!on[r]) continue;
    acxi_cmd_t cmd = {.op = ACXP_OP_ALLREDUCE, .dtype = (uint32_t)d, .bytes = count,
                      .buf = {send[r]->id, recv[r]->id}, .arg = {SET, (uint64_t)op, regs ? regs[r] : 0, seq, ms}};
    acxi_bufarg_t ba[2] = {{send[r], "send"}, {recv[r], "recv"}};
    st[r] = acxi_device_submit(dev[r], &cmd, ba, send[r] == recv[r] ? 1 : 2, 0, -1, acxi_deadline(T), &f[r]);
  }
  for (int r = 0; r < NR; r++)
    if (f[r]) {
      st[r] = acx_future_wait(f[r], T, NULL, 0, NULL);
      acx_future_release(f[r]);
    }
}

static void allreduce_on(const int *on, acx_buffer_t **send, acx_buffer_t **recv, size_t count, acx_dtype_t d,
                         int op, uint64_t ms, acx_status_t *st) {
  allreduce_reg(on, send, recv, NULL, count, d, op, ms, st);
}

static acx_status_t fence_on(int r, acx_future_t **f) {
  acxi_cmd_t cmd = {.op = ACXP_OP_FENCE, .arg = {SET}};
  return acxi_device_submit(dev[r], &cmd, NULL, 0, 0, -1, acxi_deadline(T), f);
}

static acx_status_t fence_wait(int r) {
  acx_future_t *f = NULL;
  acx_status_t st = fence_on(r, &f);
  if (st != ACX_OK) return st;
  st = acx_future_wait(f, T, NULL, 0, NULL);
  acx_future_release(f);
  return st;
}

/* The input of rank r, element i, as 64 bits of the dtype's value (negative, large, fractional). */
static void fill_input(void *p, acx_dtype_t d, int r, size_t n) {
  for (size_t i = 0; i < n; i++) {
    int64_t iv = (int64_t)(r * 977) + (int64_t)(i * 131 % 1000) - 500 + (int64_t)((i % 7) == 0) * 100000;
    double fv = (r + 1) * 0.375 + (double)(i % 50) * 0.5 - 9.0;
    switch (d) {
    case ACX_DTYPE_I8: ((int8_t *)p)[i] = (int8_t)iv; break;
    case ACX_DTYPE_U8: ((uint8_t *)p)[i] = (uint8_t)iv; break;
    case ACX_DTYPE_I32: ((int32_t *)p)[i] = (int32_t)(iv * 40000); break;
    case ACX_DTYPE_U32: ((uint32_t *)p)[i] = (uint32_t)(iv * 40000); break;
    case ACX_DTYPE_I64: ((int64_t *)p)[i] = iv * 3000000000000LL; break;
    case ACX_DTYPE_U64: ((uint64_t *)p)[i] = (uint64_t)iv * 3000000000000ULL; break;
    case ACX_DTYPE_F16: ((uint16_t *)p)[i] = acxc_float_to_half((float)fv); break;
    case ACX_DTYPE_BF16: ((uint16_t *)p)[i] = acxc_float_to_bf16((float)fv); break;
    case ACX_DTYPE_F32: ((float *)p)[i] = (float)fv * 1.1f; break;
    default: ((double *)p)[i] = fv * 1.1; break;
    }
  }
}

/* The documented result of element i: ranks 0..NR-1 in order. */
#define REF_INT(T, U, SIGNED)                                                                     \
  do {                                                                                            \
    const T *a = in[0], *b = in[1], *c = in[2];                                                   \
    T *o = out;                                                                                   \
    for (size_t i = 0; i < n; i++) {                                                              \
      T v[NR] = {a[i], b[i], c[i]};                                                               \
      U acc = (U)v[0];                                                                            \
      T m = v[0];                                                                                 \
      for (int q = 1; q < NR; q++) {                                                              \
        if (op == ACX_REDOP_PROD) acc = (U)(acc * (U)v[q]);                                       \
        else acc = (U)(acc + (U)v[q]);                                                            \
        if (op == ACX_REDOP_MAX) m = v[q] > m ? v[q] : m;                                         \
        if (op == ACX_REDOP_MIN) m = v[q] < m ? v[q] : m;                                         \
      }                                                                                           \
      if (op == ACX_REDOP_MAX || op == ACX_REDOP_MIN) o[i] = m;                                   \
      else if (op == ACX_REDOP_AVG) o[i] = (T)((T)acc / (T)NR);                                   \
      else o[i] = (T)acc;                                                                         \
    }                                                                                             \
  } while (0)
#define REF_FLT(T, A, LD, ST)                                                                     \
  do {                                                                                            \
    T *o = out;                                                                                   \
    for (size_t i = 0; i < n; i++) {                                                              \
      A acc = LD(((const T *)in[0])[i]);                                                          \
      for (int q = 1; q < NR; q++) {                                                              \
        A x = LD(((const T *)in[q])[i]);                                                          \
        if (op == ACX_REDOP_PROD) acc = acc * x;                                                  \
        else if (op == ACX_REDOP_MAX) acc = x > acc ? x : acc;                                    \
        else if (op == ACX_REDOP_MIN) acc = x < acc ? x : acc;                                    \
        else acc = acc + x;                                                                       \
      }                                                                                           \
      if (group_mode) acc = LD(ST(acc)); /* the group's sum, rounded to the type */               \
      if (op == ACX_REDOP_AVG) acc = acc / (A)NR;                                                 \
      o[i] = ST(acc);                                                                             \
    }                                                                                             \
  } while (0)
#define SAME(x) (x)

/* With --group every size is summed in the group first (the lines, the one-shot and the two-shot
 * with groups). */
static void reference(void *const in[NR], void *out, acx_dtype_t d, int op, size_t n) {
  switch (d) {
  case ACX_DTYPE_I8: REF_INT(int8_t, uint8_t, 1); break;
  case ACX_DTYPE_U8: REF_INT(uint8_t, uint8_t, 0); break;
  case ACX_DTYPE_I32: REF_INT(int32_t, uint32_t, 1); break;
  case ACX_DTYPE_U32: REF_INT(uint32_t, uint32_t, 0); break;
  case ACX_DTYPE_I64: REF_INT(int64_t, uint64_t, 1); break;
  case ACX_DTYPE_U64: REF_INT(uint64_t, uint64_t, 0); break;
  case ACX_DTYPE_F16: REF_FLT(uint16_t, float, acxc_half_to_float, acxc_float_to_half); break;
  case ACX_DTYPE_BF16: REF_FLT(uint16_t, float, acxc_bf16_to_float, acxc_float_to_bf16); break;
  case ACX_DTYPE_F32: REF_FLT(float, float, SAME, SAME); break;
  default: REF_FLT(double, double, SAME, SAME); break;
  }
}

static const acx_dtype_t types[] = {ACX_DTYPE_I8,  ACX_DTYPE_U8,  ACX_DTYPE_I32,  ACX_DTYPE_U32, ACX_DTYPE_I64,
                                    ACX_DTYPE_U64, ACX_DTYPE_F16, ACX_DTYPE_BF16, ACX_DTYPE_F32, ACX_DTYPE_F64};

static void test_every_dtype_and_op(void) {
  const int all[NR] = {1, 1, 1};
  /* 1 element; an odd count; the largest and the smallest count of the border between the lines
   * (up to ll_bytes) and the one-shot; a third of a slot and a bit (a GPU splits it into
   * blocks whose last one is short); a full slot of bytes; one element more (the two-shot, one
   * chunk, its parts uneven); three and a half chunks and an odd element (the two-shot's chunks
   * and both big slots twice, the last chunk short). */
  const size_t counts[] = {1, 1027, 0, 0};
  void *in[NR], *out = malloc(MAXB), *want = malloc(MAXB);
  for (int r = 0; r < NR; r++) in[r] = malloc(MAXB);
  size_t bad_cases = 0;
  for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
    for (int op = 0; op <= ACX_REDOP_AVG; op++)
      for (size_t k = 0; k < sizeof counts / sizeof counts[0] + 4; k++)
        for (int inplace = 0; inplace < 2; inplace++) {
          acx_dtype_t d = types[t];
          size_t es = acx_dtype_size(d), n = k < 2 ? counts[k] : k == 2 ? ll_bytes / es : k == 3 ? ll_bytes / es + 1
                                           : k == 4 ? SLOT / es / 3 + 5 : k == 5 ? SLOT / es : k == 6 ? SLOT / es + 1
                                           : (7 * BIG / 2) / es + 1;
          acx_buffer_t *s[NR], *o[NR];
          for (int r = 0; r < NR; r++) {
            fill_input(in[r], d, r, n);
            ACX_ASSERT_STATUS(acx_buffer_alloc(dev[r], n * es, d, ACX_MEM_DEVICE, T, &s[r]), ACX_OK);
            ACX_ASSERT_STATUS(acx_buffer_write(s[r], 0, in[r], n * es, 0, T), ACX_OK);
            if (inplace) o[r] = s[r];
            else ACX_ASSERT_STATUS(acx_buffer_alloc(dev[r], n * es, d, ACX_MEM_DEVICE, T, &o[r]), ACX_OK);
          }
          acx_status_t st[NR];
          allreduce_on(all, s, o, n, d, op, 10000, st);
          reference(in, want, d, op, n);
          for (int r = 0; r < NR; r++) {
            CU_ASSERT_EQUAL(st[r], ACX_OK);
            memset(out, 0x5a, n * es);
            ACX_ASSERT_STATUS(acx_buffer_read(o[r], 0, out, n * es, 0, T), ACX_OK);
            if (memcmp(out, want, n * es) != 0) {
              if (bad_cases++ < 8)
                printf("\n    %s %s, %zu elements, %s: rank %d differs from the reference", acx_dtype_name(d),
                       acx_redop_name((acx_redop_t)op), n, inplace ? "in place" : "out of place", r);
              CU_FAIL("result differs from the reference");
            }
            acx_buffer_release(s[r]);
            if (!inplace) acx_buffer_release(o[r]);
          }
        }
  for (int r = 0; r < NR; r++) ACX_ASSERT_STATUS(fence_wait(r), ACX_OK);
  for (int r = 0; r < NR; r++) free(in[r]);
  free(out);
  free(want);
}

/* An all-reduce waiting for its peers never holds up the executor's other commands (a peer may
 * need them to get to its own part: the resilient example deadlocked when the host kind waited
 * inside the command): rank 0's executor serves a write and a read of another buffer meanwhile;
 * then the others join and every rank gets the sum. */
static void test_executor_free_while_waiting(void) {
  acx_buffer_t *b[NR], *other = NULL;
  float v[16], o[16];
  for (int r = 0; r < NR; r++) {
    for (int i = 0; i < 16; i++) v[i] = (float)(r + 1);
    ACX_ASSERT_STATUS(acx_buffer_alloc(dev[r], sizeof v, ACX_DTYPE_F32, ACX_MEM_DEVICE, T, &b[r]), ACX_OK);
    ACX_ASSERT_STATUS(acx_buffer_write(b[r], 0, v, sizeof v, 0, T), ACX_OK);
  }
  ACX_ASSERT_STATUS(acx_buffer_alloc(dev[0], sizeof v, ACX_DTYPE_F32, ACX_MEM_DEVICE, T, &other), ACX_OK);
  seq++;
  acx_future_t *f[NR] = {0}, *fen = NULL;
  for (int r = 0; r < NR; r++) {
    acxi_cmd_t cmd = {.op = ACXP_OP_ALLREDUCE, .dtype = ACX_DTYPE_F32, .bytes = 16, .buf = {b[r]->id, b[r]->id},
                      .arg = {SET, ACX_REDOP_SUM, 0, seq, 30000}};
    acxi_bufarg_t ba[1] = {{b[r], "buf"}};
    ACX_ASSERT_STATUS(acxi_device_submit(dev[r], &cmd, ba, 1, 0, -1, acxi_deadline(T), &f[r]), ACX_OK);
    if (r == 0) {
      /* Only rank 0 is in: its executor must still serve these (on another stream: on a GPU the
       * all-reduce's stream is rightly held by its kernel). 20 s: well inside the all-reduce's 30 s
       * deadline, which an executor blocked in the all-reduce would wait out. */
      for (int i = 0; i < 16; i++) v[i] = 42.0f;
      ACX_ASSERT_STATUS(acx_buffer_write(other, 0, v, sizeof v, 1, 20000000000LL), ACX_OK);
      ACX_ASSERT_STATUS(acx_buffer_read(other, 0, o, sizeof o, 1, 20000000000LL), ACX_OK);
      CU_ASSERT_EQUAL(o[7], 42.0f);
      CU_ASSERT_FALSE(acxi_future_is_done(f[0]));
      /* A FENCE waits for the all-reduce before it. */
      ACX_ASSERT_STATUS(fence_on(0, &fen), ACX_OK);
      CU_ASSERT_FALSE(acxi_future_is_done(fen));
    }
  }
  for (int r = 0; r < NR; r++) {
    ACX_ASSERT_STATUS(acx_future_wait(f[r], T, NULL, 0, NULL), ACX_OK);
    acx_future_release(f[r]);
    ACX_ASSERT_STATUS(acx_buffer_read(b[r], 0, o, sizeof o, 0, T), ACX_OK);
    CU_ASSERT_EQUAL(o[0], 6.0f); /* 1 + 2 + 3 */
    acx_buffer_release(b[r]);
  }
  ACX_ASSERT_STATUS(acx_future_wait(fen, T, NULL, 0, NULL), ACX_OK);
  acx_future_release(fen);
  acx_buffer_release(other);
}

/* All-reduces sent back to back, waited for only at the end, as a solver's or a benchmark's loop
 * sends them: on a GPU the executor runs those up to a slot in batches (several per kernel launch,
 * ACX_COLL_PEER_BATCH), which is only right if every operation still sees the one before it
 * complete. The sequence chains its buffers: in place, A -> B and back, an input one element into
 * the buffer the operation before wrote (its bytes at other lines: the batch must end there), shorter
 * counts, a one-shot-sized and an f32 one in between (other kernels); more than a batch holds in
 * a row, and with ACX_COLL_PEER_LL_CLEAR small (its ctest variant) the lines are cleared between
 * batches; then 400 more, beyond the 256 operations a set keeps in flight in an executor (the
 * executor waits for the oldest rather than refusing the next). Every rank's A and B are
 * checked at the end against the same sequence run here. */
#define B2B_N 1500 /* u32: 6000 bytes, the small-message kernel; then (with _ll16) 40 KiB, the one-shot */
typedef struct b2b_op {
  int src, dst;           /* 0: A, 1: B */
  size_t src_off, count;  /* elements */
  int f32;                /* 1: on the f32 buffer F instead, in place */
  size_t big;             /* > 0: that many elements of buffer G, in place (one-shot) */
} b2b_op_t;

static void back_to_back(size_t n) {
  enum { NOPS = 64 + 400 }; /* then 400 more in place: more than the 256 a set keeps in flight */
  const size_t gn = 8192; /* 32 KiB: pushed lines by default, the one-shot in _ll16 */
  b2b_op_t ops[NOPS];
  for (int k = 0; k < NOPS; k++) {
    b2b_op_t o = {.src = 0, .dst = 0, .count = n};
    switch (k % 16) {
    case 3: o.dst = 1; break;                  /* A -> B */
    case 4: o.src = 1; break;                  /* B -> A */
    case 6: o.src = o.dst = 1; break;                        /* B in place */
    case 7: o.src = 1; o.src_off = 1; o.count = n - 1; break; /* B + 1 -> A: B's bytes at other lines */
    case 9: o.count = n / 3; break;
    case 11: o.f32 = 1; break;
    case 13: o.big = gn; break;
    default: break;
    }
    if ((k >= 32 && k < 52) || k >= 64) o = (b2b_op_t){.src = k & 1, .dst = k & 1, .count = n}; /* in a row */
    ops[k] = o;
  }
  uint32_t *ref[NR][2], *got = malloc(n * 4), *tmp = malloc(n * 4);
  acx_buffer_t *buf[NR][2], *fb[NR], *gb[NR];
  for (int r = 0; r < NR; r++) {
    for (int b = 0; b < 2; b++) {
      ref[r][b] = malloc(n * 4);
      for (size_t i = 0; i < n; i++) ref[r][b][i] = (uint32_t)(r * 100003u + b * 7919u + i * 2654435761u);
      ACX_ASSERT_STATUS(acx_buffer_alloc(dev[r], n * 4, ACX_DTYPE_U32, ACX_MEM_DEVICE, T, &buf[r][b]), ACX_OK);
      ACX_ASSERT_STATUS(acx_buffer_write(buf[r][b], 0, ref[r][b], n * 4, 0, T), ACX_OK);
    }
    float fv[64];
    for (int i = 0; i < 64; i++) fv[i] = 1.0f;
    ACX_ASSERT_STATUS(acx_buffer_alloc(dev[r], sizeof fv, ACX_DTYPE_F32, ACX_MEM_DEVICE, T, &fb[r]), ACX_OK);
    ACX_ASSERT_STATUS(acx_buffer_write(fb[r], 0, fv, sizeof fv, 0, T), ACX_OK);
    ACX_ASSERT_STATUS(acx_buffer_alloc(dev[r], gn * 4, ACX_DTYPE_U32, ACX_MEM_DEVICE, T, &gb[r]), ACX_OK);
    ACX_ASSERT_STATUS(acx_buffer_fill(gb[r], 0, gn * 4, (uint64_t)r + 1, 4, 0, T), ACX_OK);
  }
  acx_future_t *f[NOPS][NR] = {{0}};
  uint32_t gval = 0; /* G: rank r holds r + 1; after the first all-reduce 1 + 2 + 3 */
  float fval = 1.0f;
  for (int k = 0; k < NOPS; k++) {
    const b2b_op_t *o = &ops[k];
    seq++;
    for (int r = 0; r < NR; r++) {
      acxi_cmd_t cmd = {.op = ACXP_OP_ALLREDUCE, .arg = {SET, ACX_REDOP_SUM, 0, seq, 30000}};
      acxi_bufarg_t ba[2];
      int nba = 1;
      if (o->f32 || o->big) {
        acx_buffer_t *x = o->f32 ? fb[r] : gb[r];
        cmd.dtype = o->f32 ? ACX_DTYPE_F32 : ACX_DTYPE_U32;
        cmd.bytes = o->f32 ? 64 : o->big;
        cmd.buf[0] = cmd.buf[1] = x->id;
        ba[0] = (acxi_bufarg_t){x, "buf"};
      } else {
        cmd.dtype = ACX_DTYPE_U32;
        cmd.bytes = o->count;
        cmd.buf[0] = buf[r][o->src]->id;
        cmd.buf[1] = buf[r][o->dst]->id;
        cmd.off[0] = o->src_off * 4;
        ba[0] = (acxi_bufarg_t){buf[r][o->src], "send"};
        ba[1] = (acxi_bufarg_t){buf[r][o->dst], "recv"};
        nba = o->src == o->dst ? 1 : 2;
      }
      ACX_ASSERT_STATUS(acxi_device_submit(dev[r], &cmd, ba, nba, 0, -1, acxi_deadline(T), &f[k][r]), ACX_OK);
    }
    /* the reference: each operation reads its inputs as the one before it left them */
    if (o->f32) fval *= 3.0f;
    else if (o->big) gval = gval ? 3u * gval : 1 + 2 + 3;
    else {
      for (size_t i = 0; i < o->count; i++) {
        uint32_t v = 0;
        for (int r = 0; r < NR; r++) v += ref[r][o->src][o->src_off + i];
        tmp[i] = v;
      }
      for (int r = 0; r < NR; r++) memcpy(ref[r][o->dst], tmp, o->count * 4);
    }
  }
  int failed = 0;
  for (int k = 0; k < NOPS; k++)
    for (int r = 0; r < NR; r++) {
      acx_status_t st = acx_future_wait(f[k][r], T, NULL, 0, NULL);
      if (st != ACX_OK && failed++ < 4) printf("\n    operation %d, rank %d: %s", k, r, acx_status_str(st));
      acx_future_release(f[k][r]);
    }
  CU_ASSERT_EQUAL(failed, 0);
  for (int r = 0; r < NR; r++) {
    for (int b = 0; b < 2; b++) {
      ACX_ASSERT_STATUS(acx_buffer_read(buf[r][b], 0, got, n * 4, 0, T), ACX_OK);
      size_t bad = 0, first = 0;
      for (size_t i = n; i-- > 0;)
        if (got[i] != ref[r][b][i]) bad++, first = i;
      if (bad) printf("\n    rank %d, buffer %c: %zu of %zu elements differ (first %zu)", r, "AB"[b], bad, n, first);
      CU_ASSERT_EQUAL(bad, 0);
      acx_buffer_release(buf[r][b]);
      free(ref[r][b]);
    }
    float fv[64];
    uint32_t g[4];
    ACX_ASSERT_STATUS(acx_buffer_read(fb[r], 0, fv, sizeof fv, 0, T), ACX_OK);
    CU_ASSERT_EQUAL(fv[63], fval);
    ACX_ASSERT_STATUS(acx_buffer_read(gb[r], (gn - 4) * 4, g, sizeof g, 0, T), ACX_OK);
    CU_ASSERT_EQUAL(g[3], gval);
    acx_buffer_release(fb[r]);
    acx_buffer_release(gb[r]);
  }
  for (int r = 0; r < NR; r++) ACX_ASSERT_STATUS(fence_wait(r), ACX_OK);
  free(got);
  free(tmp);
}

static void test_back_to_back(void) {
  back_to_back(B2B_N);
  /* Where the lines end below a slot (the _ll16 variants), the same sequence at a size between:
   * the one-shot's batches (and with --group the one-shot with groups'). */
  if (ll_bytes < SLOT) back_to_back((ll_bytes + SLOT) / 8);
}

/* The host kind runs every command at once on its executor thread, a write behind a waiting
 * all-reduce on its stream included: the all-reduce's own part is the input as it was when the
 * all-reduce started, the same that its peers get (both protocols: 16 floats take the
 * small-message one, 16 Ki floats the one-shot). Rank 0 starts, its input is overwritten, then
 * the others join: every rank must get 1 + 2 + 3. */
static void test_input_read_at_start(void) {
  const size_t counts[] = {16, 16384};
  for (size_t k = 0; k < 2; k++) {
    size_t n = counts[k];
    float *v = malloc(n * sizeof *v), *o = malloc(n * sizeof *o);
    acx_buffer_t *b[NR];
    for (int r = 0; r < NR; r++) {
      for (size_t i = 0; i < n; i++) v[i] = (float)(r + 1);
      ACX_ASSERT_STATUS(acx_buffer_alloc(dev[r], n * sizeof *v, ACX_DTYPE_F32, ACX_MEM_DEVICE, T, &b[r]), ACX_OK);
      ACX_ASSERT_STATUS(acx_buffer_write(b[r], 0, v, n * sizeof *v, 0, T), ACX_OK);
    }
    seq++;
    acx_future_t *f[NR] = {0};
    for (int r = 0; r < NR; r++) {
      acxi_cmd_t cmd = {.op = ACXP_OP_ALLREDUCE, .dtype = ACX_DTYPE_F32, .bytes = n, .buf = {b[r]->id, b[r]->id},
                        .arg = {SET, ACX_REDOP_SUM, 0, seq, 30000}};
      acxi_bufarg_t ba[1] = {{b[r], "buf"}};
      ACX_ASSERT_STATUS(acxi_device_submit(dev[r], &cmd, ba, 1, 0, -1, acxi_deadline(T), &f[r]), ACX_OK);
      if (r == 0) {
        for (size_t i = 0; i < n; i++) v[i] = 100.0f;
        ACX_ASSERT_STATUS(acx_buffer_write(b[0], 0, v, n * sizeof *v, 0, 20000000000LL), ACX_OK);
        CU_ASSERT_FALSE(acxi_future_is_done(f[0])); /* the peers are not in yet */
      }
    }
    for (int r = 0; r < NR; r++) {
      ACX_ASSERT_STATUS(acx_future_wait(f[r], T, NULL, 0, NULL), ACX_OK);
      acx_future_release(f[r]);
      ACX_ASSERT_STATUS(acx_buffer_read(b[r], 0, o, n * sizeof *o, 0, T), ACX_OK);
      CU_ASSERT_EQUAL(o[0], 6.0f);
      CU_ASSERT_EQUAL(o[n - 1], 6.0f);
      acx_buffer_release(b[r]);
    }
    free(v);
    free(o);
  }
}

/* Rank 2 withholds an operation: the others' wait ends at the abort word (with its status), or
 * without it at the deadline; afterwards the set answers with its failure at once. */
static void test_withheld(void) {
  const int two[NR] = {1, 1, 0};
  acx_buffer_t *b[NR];
  for (int r = 0; r < NR; r++) {
    ACX_ASSERT_STATUS(acx_buffer_alloc(dev[r], 64, ACX_DTYPE_F32, ACX_MEM_DEVICE, T, &b[r]), ACX_OK);
    ACX_ASSERT_STATUS(acx_buffer_fill(b[r], 0, 64, 0, 4, 0, T), ACX_OK);
  }
  acx_status_t st[NR];
  int64_t t0 = acxi_now_ns();
  allreduce_on(two, b, b, 16, ACX_DTYPE_F32, ACX_REDOP_SUM, 300, st);
  int64_t dt = acxi_now_ns() - t0;
  CU_ASSERT_EQUAL(st[0], ACX_ERR_COLL_TIMEOUT);
  CU_ASSERT_EQUAL(st[1], ACX_ERR_COLL_TIMEOUT);
  CU_ASSERT(dt >= 300000000);
  /* The set failed: the next operation fails at once with the same status, and a FENCE (how
   * acx_coll_synchronize learns of a failure nobody waited for) reports it. */
  allreduce_on(two, b, b, 16, ACX_DTYPE_F32, ACX_REDOP_SUM, 300, st);
  CU_ASSERT_EQUAL(st[0], ACX_ERR_COLL_TIMEOUT);
  ACX_ASSERT_STATUS(fence_wait(0), ACX_ERR_COLL_TIMEOUT);
  for (int r = 0; r < NR; r++) acx_buffer_release(b[r]);
}

static void test_abort_word(void) {
  /* A fresh set (the last one failed): new areas, a long deadline; the abort ends the wait. */
  for (int r = 0; r < NR; r++) {
    acxi_cmd_t cmd = {.op = ACXP_OP_DESTROY, .arg = {SET, 0, 0, 0, 1000}};
    ACX_ASSERT_STATUS(acxi_device_call(dev[r], &cmd, NULL, 0, 0, -1, T, NULL), ACX_OK);
    for (int q = 0; q < NR; q++)
      if (imp[r][q]) acx_buffer_release(imp[r][q]), imp[r][q] = NULL;
    acx_buffer_release(area[r]);
    acx_host_free(ctlmem[r]);
  }
  seq = 0;
  setup_set();
  const int one[NR] = {1, 0, 0};
  acx_buffer_t *b[NR];
  for (int r = 0; r < NR; r++) ACX_ASSERT_STATUS(acx_buffer_alloc(dev[r], 64, ACX_DTYPE_F32, ACX_MEM_DEVICE, T, &b[r]), ACX_OK);
  atomic_store(&ctl[0]->abort, ACX_ERR_WORLD_REBUILDING);
  acx_status_t st[NR];
  int64_t t0 = acxi_now_ns();
  allreduce_on(one, b, b, 16, ACX_DTYPE_F32, ACX_REDOP_SUM, 50000, st);
  CU_ASSERT_EQUAL(st[0], ACX_ERR_WORLD_REBUILDING);
  CU_ASSERT(acxi_now_ns() - t0 < 20000000000LL); /* not the 50 s deadline */
  for (int r = 0; r < NR; r++) acx_buffer_release(b[r]);
}

static void test_setup(void) { setup_set(); }

/* Registered buffers (peer_ops.h, "Registered buffers"): every rank's executor maps the others'
 * shareable buffers and takes them into its table (ACXP_OP_REG: entry [rank][slot] of its area
 * becomes the mapping's address; cleared again with no buffer); all-reduces beyond a slot then name
 * registered inputs and outputs (arg[2]) in every mix: all, in place, rank 0 its input only, rank 1
 * its output only, nobody. Results equal the reference bit for bit whoever registered what, and an
 * out-of-place input comes back untouched. With --cuda --group the kernel reads and stores through
 * the table (the host kind publishes nothing and stages; the results are the same). Bad REG
 * commands are refused. */
static uint64_t regtab_entry(int r, int q, int slot) {
  uint64_t v = 0;
  ACX_ASSERT_STATUS(acx_buffer_read(area[r], ACXP_BIG_REGTAB_OFF(SLOT) + (uint64_t)(q * ACXP_REG_MAX + slot) * 8, &v,
                                    8, 0, T), ACX_OK);
  return v;
}

static acx_status_t reg_cmd(int r, uint64_t set, uint64_t slot, uint64_t q, acx_buffer_t *b) {
  acxi_cmd_t cmd = {.op = ACXP_OP_REG, .buf = {b ? b->id : 0}, .arg = {set, slot, q, 0, 10000}};
  acxi_bufarg_t ba = {b, "mapping"};
  return acxi_device_call(dev[r], &cmd, b ? &ba : NULL, b ? 1 : 0, 0, -1, T, NULL);
}

static void test_registered(void) {
  const acx_dtype_t dts[] = {ACX_DTYPE_F32, ACX_DTYPE_BF16, ACX_DTYPE_I32};
  const int ops[] = {ACX_REDOP_SUM, ACX_REDOP_AVG, ACX_REDOP_MAX};
  acx_buffer_t *sb[NR], *rb[NR], *ms[NR][NR] = {{0}}, *mr[NR][NR] = {{0}};
  for (int r = 0; r < NR; r++) {
    ACX_ASSERT_STATUS(acxi_buffer_alloc_shareable(dev[r], MAXB, ACX_DTYPE_BYTE, T, &sb[r]), ACX_OK);
    ACX_ASSERT_STATUS(acxi_buffer_alloc_shareable(dev[r], MAXB, ACX_DTYPE_BYTE, T, &rb[r]), ACX_OK);
  }
  /* Every executor maps the others' buffers: slot 0 the inputs, slot 1 the outputs. */
  for (int r = 0; r < NR; r++) {
    acxi_ipc_handle_t hs, hr;
    ACX_ASSERT_STATUS(acxi_buffer_ipc_export(sb[r], &hs, T), ACX_OK);
    ACX_ASSERT_STATUS(acxi_buffer_ipc_export(rb[r], &hr, T), ACX_OK);
    for (int q = 0; q < NR; q++)
      if (q != r) {
        ACX_ASSERT_STATUS(acxi_buffer_ipc_import(dev[q], &hs, ACX_DTYPE_BYTE, T, &ms[q][r]), ACX_OK);
        ACX_ASSERT_STATUS(acxi_buffer_ipc_import(dev[q], &hr, ACX_DTYPE_BYTE, T, &mr[q][r]), ACX_OK);
        ACX_ASSERT_STATUS(reg_cmd(q, SET, 0, (uint64_t)r, ms[q][r]), ACX_OK);
        ACX_ASSERT_STATUS(reg_cmd(q, SET, 1, (uint64_t)r, mr[q][r]), ACX_OK);
      }
  }
  for (int r = 0; r < NR; r++)
    for (int q = 0; q < NR; q++) {
      uint64_t e0 = regtab_entry(r, q, 0), e1 = regtab_entry(r, q, 1);
      CU_ASSERT_EQUAL(e0 != 0, q != r);
      CU_ASSERT_EQUAL(e1 != 0, q != r);
      if (q != r) CU_ASSERT(e0 != e1);
    }
  /* Refused: no such set, a slot past the table, the rank's own, no such rank, an unknown buffer. */
  CU_ASSERT_NOT_EQUAL(reg_cmd(0, SET + 9, 0, 1, ms[0][1]), ACX_OK);
  CU_ASSERT_NOT_EQUAL(reg_cmd(0, SET, ACXP_REG_MAX, 1, ms[0][1]), ACX_OK);
  CU_ASSERT_NOT_EQUAL(reg_cmd(0, SET, 2, 0, ms[0][1]), ACX_OK);
  CU_ASSERT_NOT_EQUAL(reg_cmd(0, SET, 2, NR, ms[0][1]), ACX_OK);
  acxi_cmd_t unknown = {.op = ACXP_OP_REG, .buf = {987654}, .arg = {SET, 2, 1, 0, 10000}};
  CU_ASSERT_NOT_EQUAL(acxi_device_call(dev[0], &unknown, NULL, 0, 0, -1, T, NULL), ACX_OK);
  CU_ASSERT_EQUAL(regtab_entry(0, 1, 2), 0);
  void *in[NR], *out = malloc(MAXB), *want = malloc(MAXB);
  for (int r = 0; r < NR; r++) in[r] = malloc(MAXB);
  size_t bad_cases = 0;
  for (size_t t = 0; t < sizeof dts / sizeof dts[0]; t++)
    for (int k = 0; k < 2; k++)
      for (int mode = 0; mode < 4; mode++) {
        const acx_dtype_t d = dts[t];
        const size_t es = acx_dtype_size(d), n = k == 0 ? SLOT / es + 1 : (7 * BIG / 2) / es + 1;
        acx_buffer_t *s[NR], *o[NR];
        acx_status_t st[NR];
        uint64_t regs[NR];
        for (int r = 0; r < NR; r++) {
          fill_input(in[r], d, r, n);
          ACX_ASSERT_STATUS(acx_buffer_write(sb[r], 0, in[r], n * es, 0, T), ACX_OK);
          ACX_ASSERT_STATUS(acx_buffer_fill(rb[r], 0, n * es, 0x5a, 1, 0, T), ACX_OK);
          s[r] = sb[r];
          o[r] = mode == 1 ? sb[r] : rb[r]; /* mode 1: in place */
          /* mode 0: all registered; 1: in place, registered; 2: rank 0 its input, rank 1 its output,
           * rank 2 nothing; 3: nobody */
          uint64_t si = mode <= 1 || (mode == 2 && r == 0) ? 1 : 0;
          uint64_t ri = mode == 0 || (mode == 2 && r == 1) ? 2 : mode == 1 ? 1 : 0;
          regs[r] = si | ri << 8;
        }
        int all[NR];
        for (int r = 0; r < NR; r++) all[r] = 1;
        allreduce_reg(all, s, o, regs, n, d, ops[t], 10000, st);
        reference(in, want, d, ops[t], n);
        for (int r = 0; r < NR; r++) {
          CU_ASSERT_EQUAL(st[r], ACX_OK);
          ACX_ASSERT_STATUS(acx_buffer_read(o[r], 0, out, n * es, 0, T), ACX_OK);
          if (memcmp(out, want, n * es) != 0) {
            if (bad_cases++ < 8)
              printf("\n    %s %s, %zu elements, mode %d: rank %d differs from the reference", acx_dtype_name(d),
                     acx_redop_name((acx_redop_t)ops[t]), n, mode, r);
            CU_FAIL("result differs from the reference");
          }
          if (mode != 1) { /* the input, read where it is by the others, untouched */
            ACX_ASSERT_STATUS(acx_buffer_read(s[r], 0, out, n * es, 0, T), ACX_OK);
            CU_ASSERT(memcmp(out, in[r], n * es) == 0);
          }
        }
      }
  /* A REG while an operation of the set is in flight waits for it, within its deadline, and writes
   * nothing at the deadline: here rank 0's all-reduce waits for peers that join only after the REG
   * has given up (on GPUs the kernel waits alike). Then the peers join and the REG goes through. */
  {
    const size_t n = SLOT / 4 + 1;
    acx_future_t *f[NR] = {0};
    acx_status_t st[NR];
    seq++;
    for (int r = 0; r < NR; r++) {
      fill_input(in[r], ACX_DTYPE_F32, r, n);
      ACX_ASSERT_STATUS(acx_buffer_write(sb[r], 0, in[r], n * 4, 0, T), ACX_OK);
    }
    for (int r = 0; r < NR; r++) {
      if (r == 1) { /* rank 0's operation is in flight (its peers withhold theirs): the REG times out */
        acxi_cmd_t cmd = {.op = ACXP_OP_REG, .buf = {ms[0][1]->id}, .arg = {SET, 5, 1, 0, 200}};
        acxi_bufarg_t ba = {ms[0][1], "mapping"};
        CU_ASSERT_EQUAL(acxi_device_call(dev[0], &cmd, &ba, 1, 0, -1, T, NULL), ACX_ERR_TIMEOUT);
        /* (The entry is read once the all-reduce is done: on a GPU the read is a copy on the
         * kernel's stream, behind it, and the kernel waits for peers not yet sent.) */
      }
      acxi_cmd_t cmd = {.op = ACXP_OP_ALLREDUCE, .dtype = ACX_DTYPE_F32, .bytes = n, .buf = {sb[r]->id, rb[r]->id},
                        .arg = {SET, ACX_REDOP_SUM, 0, seq, 20000}};
      acxi_bufarg_t ba[2] = {{sb[r], "send"}, {rb[r], "recv"}};
      st[r] = acxi_device_submit(dev[r], &cmd, ba, 2, 0, -1, acxi_deadline(T), &f[r]);
    }
    for (int r = 0; r < NR; r++)
      if (f[r]) {
        st[r] = acx_future_wait(f[r], T, NULL, 0, NULL);
        acx_future_release(f[r]);
      }
    reference(in, want, ACX_DTYPE_F32, ACX_REDOP_SUM, n);
    for (int r = 0; r < NR; r++) {
      CU_ASSERT_EQUAL(st[r], ACX_OK);
      ACX_ASSERT_STATUS(acx_buffer_read(rb[r], 0, out, n * 4, 0, T), ACX_OK);
      CU_ASSERT(memcmp(out, want, n * 4) == 0);
    }
    CU_ASSERT_EQUAL(regtab_entry(0, 1, 5), 0); /* the REG that gave up wrote nothing */
    ACX_ASSERT_STATUS(reg_cmd(0, SET, 5, 1, ms[0][1]), ACX_OK);
    CU_ASSERT_EQUAL(regtab_entry(0, 1, 5), regtab_entry(0, 1, 0));
    ACX_ASSERT_STATUS(reg_cmd(0, SET, 5, 1, NULL), ACX_OK);
  }
  /* Cleared entries (the executor waits for the set's operations first), then the mappings close. */
  for (int q = 0; q < NR; q++)
    for (int r = 0; r < NR; r++)
      if (q != r) {
        ACX_ASSERT_STATUS(reg_cmd(q, SET, 0, (uint64_t)r, NULL), ACX_OK);
        ACX_ASSERT_STATUS(reg_cmd(q, SET, 1, (uint64_t)r, NULL), ACX_OK);
        CU_ASSERT_EQUAL(regtab_entry(q, r, 0), 0);
        CU_ASSERT_EQUAL(regtab_entry(q, r, 1), 0);
        ACX_ASSERT_STATUS(acx_buffer_free(ms[q][r], T), ACX_OK);
        ACX_ASSERT_STATUS(acx_buffer_free(mr[q][r], T), ACX_OK);
        acx_buffer_release(ms[q][r]);
        acx_buffer_release(mr[q][r]);
      }
  for (int r = 0; r < NR; r++) {
    ACX_ASSERT_STATUS(acx_buffer_free(sb[r], T), ACX_OK);
    ACX_ASSERT_STATUS(acx_buffer_free(rb[r], T), ACX_OK);
    acx_buffer_release(sb[r]);
    acx_buffer_release(rb[r]);
    free(in[r]);
  }
  free(out);
  free(want);
}


static void test_bad_commands(void) {
  acx_buffer_t *b = NULL, *big = NULL;
  ACX_ASSERT_STATUS(acx_buffer_alloc(dev[0], 64, ACX_DTYPE_F32, ACX_MEM_DEVICE, T, &b), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_alloc(dev[0], SLOT + 4, ACX_DTYPE_F32, ACX_MEM_DEVICE, T, &big), ACX_OK);
  acxi_bufarg_t ba[1] = {{b, "buf"}}, bb[1] = {{big, "buf"}};
  struct {
    acxi_cmd_t cmd;
    acxi_bufarg_t *ba;
    const char *what;
  } bad[] = {
      {{.op = ACXP_OP_ALLREDUCE, .dtype = ACX_DTYPE_F32, .bytes = 4, .buf = {b->id, b->id}, .arg = {999, 0, 0, 1, 100}},
       ba, "unknown set"},
      {{.op = ACXP_OP_ALLREDUCE, .dtype = ACX_DTYPE_F8E4M3, .bytes = 4, .buf = {b->id, b->id}, .arg = {SET, 0, 0, 1, 100}},
       ba, "fp8"},
      {{.op = ACXP_OP_ALLREDUCE, .dtype = ACX_DTYPE_F32, .bytes = 4, .buf = {b->id, b->id}, .arg = {SET, 9, 0, 1, 100}},
       ba, "op 9"},
      {{.op = ACXP_OP_ALLREDUCE, .dtype = ACX_DTYPE_F32, .bytes = UINT64_MAX / 4, .buf = {big->id, big->id},
        .arg = {SET, 0, 0, 1, 100}}, bb, "a count whose bytes overflow"},
      {{.op = ACXP_OP_ALLREDUCE, .dtype = ACX_DTYPE_F32, .bytes = 17, .buf = {b->id, b->id}, .arg = {SET, 0, 0, 1, 100}},
       ba, "beyond the buffer"},
      {{.op = ACXP_OP_SETUP, .arg = {SET, NR, 0, ctlmem[0]->id}}, NULL, "a set id in use"},
      {{.op = ACXP_OP_SETUP, .arg = {SET + 1, 1, 0, ctlmem[0]->id}}, NULL, "one rank"},
      {{.op = ACXP_OP_SETUP, .arg = {SET + 1, NR, 0, 123456}}, NULL, "an unknown control block"},
      {{.op = ACXP_OP_DESTROY, .arg = {SET + 5}}, NULL, "DESTROY of an unknown set"},
      {{.op = ACXP_OP_FENCE, .arg = {SET + 5}}, NULL, "FENCE of an unknown set"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    acx_status_t st = acxi_device_call(dev[0], &bad[i].cmd, bad[i].ba, bad[i].ba ? 1 : 0, 0, -1, T, NULL);
    if (st == ACX_OK) printf("\n    %s: accepted", bad[i].what);
    CU_ASSERT(st != ACX_OK);
  }
  /* A control block whose two-shot has no blocks, or more than the flags have room for. */
  acx_host_mem_t *hm = NULL;
  void *p = NULL;
  size_t nb = 0;
  ACX_ASSERT_STATUS(acx_host_alloc(dev[0], sizeof(acxp_ctl_t), &hm), ACX_OK);
  ACX_ASSERT_STATUS(acx_host_mem_ptr(hm, &p, &nb), ACX_OK);
  const uint64_t blocks[] = {0, ACXP_BIG_MAX_BLOCKS + 1};
  for (int i = 0; i < 2; i++) {
    memcpy(p, ctl[0], sizeof(acxp_ctl_t));
    ((acxp_ctl_t *)p)->big_blocks = blocks[i];
    acxi_cmd_t cmd = {.op = ACXP_OP_SETUP, .arg = {SET + 2, NR, 0, hm->id}};
    CU_ASSERT_EQUAL(acxi_device_call(dev[0], &cmd, NULL, 0, 0, -1, T, NULL), ACX_ERR_INVALID_ARG);
  }
  ACX_ASSERT_STATUS(acx_host_free(hm), ACX_OK);
  acx_buffer_release(b);
  acx_buffer_release(big);
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "inline")) inline_mode = 1;
    else if (!strcmp(argv[i], "--cuda")) cuda_mode = 1;
    else if (!strcmp(argv[i], "--group")) group_mode = 1;
    else if (strcmp(argv[i], "process")) {
      fprintf(stderr, "usage: test_peer_exec process|inline | --cuda [--group]\n");
      return 2;
    }
  }
  int64_t llkb = acxi_param_int("ACX_COLL_PEER_LL_KB");
  ll_bytes = (uint64_t)(llkb < 1 ? 1 : llkb > ACXP_LL_MAX / 1024 ? ACXP_LL_MAX / 1024 : llkb) * 1024;
  if (ll_bytes > SLOT) ll_bytes = SLOT;
  if (acx_system_create(NULL, &sys) != ACX_OK) return 1;
  for (int r = 0; r < NR; r++) {
    acx_device_config_t cfg = ACX_DEVICE_CONFIG_INIT;
    cfg.kind = cuda_mode ? ACX_DEVICE_KIND_CUDA : ACX_DEVICE_KIND_HOST;
    cfg.transport = inline_mode ? ACX_TRANSPORT_INLINE : ACX_TRANSPORT_PROCESS;
    cfg.streams = 2;
    acx_status_t st = acx_device_open(sys, &cfg, &dev[r]);
    if (st != ACX_OK) {
      if (cuda_mode && st == ACX_ERR_NO_DEVICE) {
        printf("test_peer_exec: no GPU: skipped\n");
        return ACX_TEST_SKIP;
      }
      fprintf(stderr, "acx_device_open: %s\n", acx_status_str(st));
      return 1;
    }
  }
  static const acx_test_case_t cases[] = {ACX_TEST(test_setup), ACX_TEST(test_every_dtype_and_op), ACX_TEST(test_registered), ACX_TEST(test_bad_commands),
                                          ACX_TEST(test_back_to_back), ACX_TEST(test_executor_free_while_waiting), ACX_TEST(test_withheld), ACX_TEST(test_abort_word), ACX_TEST_END};
  /* On a GPU a write on the all-reduce's stream runs after it: test_input_read_at_start is the host
   * kind's (its commands run at once). */
  static const acx_test_case_t host_cases[] = {ACX_TEST(test_setup), ACX_TEST(test_every_dtype_and_op), ACX_TEST(test_registered), ACX_TEST(test_bad_commands),
                                               ACX_TEST(test_back_to_back), ACX_TEST(test_executor_free_while_waiting), ACX_TEST(test_input_read_at_start),
                                               ACX_TEST(test_withheld), ACX_TEST(test_abort_word), ACX_TEST_END};
  int rc = acx_test_run("peer_exec", cuda_mode ? cases : host_cases, NULL, NULL);
  for (int r = 0; r < NR; r++) {
    for (int q = 0; q < NR; q++)
      if (imp[r][q]) acx_buffer_release(imp[r][q]);
    acx_buffer_release(area[r]);
    acx_host_free(ctlmem[r]);
  }
  for (int r = 0; r < NR; r++) acx_device_close(dev[r], T);
  acx_system_destroy(sys, T);
  return rc;
}
