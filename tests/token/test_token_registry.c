/* The owner side of tokens (collectives/remote/token_registry.c) on a host-kind device with a process
 * executor: export, encode/decode, resolve; and each way a token goes bad, with its own status:
 * another rank's token, stale generation (the executor crashes and restarts), stale epoch, wrong
 * key, forged fields, revoked export, freed buffer, read-only token used for a put, out-of-range
 * and misaligned ranges. Plus concurrent export/resolve/unexport from several threads, and
 * admissions: a request checked again when its bytes move (revoked or a new epoch since: stale),
 * and unexport / the epoch drain waiting for accesses under way, within their deadlines. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acx/device.h"
#include "acx/token.h"
#include "acx_test.h"
#include "runtime/base/clock.h"
#include "runtime/proto/token_internal.h"

#define T_LONG 20000000000LL /* 20 s: only reached when something hangs */
#define BUF_BYTES 4096

static acx_system_t *sys;
static acx_device_t *dev;

static uint64_t generation(void) {
  uint64_t g = 0;
  acx_device_generation(dev, &g);
  return g;
}

/* Waits until the device serves generation `gen` (a ping succeeds there). */
static int wait_generation(uint64_t gen) {
  for (int64_t dl = acxi_deadline(T_LONG); acxi_now_ns() < dl;) {
    if (generation() >= gen && acx_device_ping(dev, 1000000000) == ACX_OK) return generation() == gen;
    usleep(1000);
  }
  return 0;
}

static acx_buffer_t *alloc_f32(void) {
  acx_buffer_t *b = NULL;
  ACX_ASSERT_STATUS(acx_buffer_alloc(dev, BUF_BYTES, ACX_DTYPE_F32, ACX_MEM_DEVICE, T_LONG, &b), ACX_OK);
  return b;
}

/* What a peer sees: the token after a trip through the wire format. */
static acx_token_t over_the_wire(const acx_token_t *t) {
  uint8_t b[ACX_TOKEN_BYTES];
  acx_token_t d;
  memset(&d, 0, sizeof d);
  ACX_ASSERT_STATUS(acx_token_encode(t, b, sizeof b, NULL), ACX_OK);
  ACX_ASSERT_STATUS(acx_token_decode(b, sizeof b, &d), ACX_OK);
  return d;
}

/* resolve, releasing the buffer it hands out; returns the status. */
static acx_status_t resolve(const acx_token_t *t, unsigned access, uint64_t off, uint64_t bytes) {
  acx_buffer_t *b = (acx_buffer_t *)0x1;
  acx_status_t st = acxi_token_resolve(t, access, off, bytes, &b);
  if (st == ACX_OK) {
    CU_ASSERT(b != NULL);
    acx_buffer_release(b);
  } else {
    CU_ASSERT(b == NULL);
  }
  return st;
}

/* ---- tests ---- */

static void test_export_and_resolve(void) {
  acxi_token_set_identity(0, 0, 0);
  acx_buffer_t *buf = alloc_f32();
  acx_buffer_info_t info;
  ACX_ASSERT_STATUS(acx_buffer_query(buf, &info), ACX_OK);
  size_t before = acxi_token_export_count();
  acx_token_t tok;
  ACX_ASSERT_STATUS(acx_buffer_export(buf, ACX_TOKEN_RIGHTS_ALL, &tok), ACX_OK);
  CU_ASSERT_EQUAL(acxi_token_export_count(), before + 1);
  CU_ASSERT_EQUAL(tok.version, ACX_TOKEN_VERSION);
  CU_ASSERT_EQUAL(tok.owner_rank, 0);
  CU_ASSERT_EQUAL(tok.node, 0);
  CU_ASSERT_EQUAL(tok.epoch, 0);
  CU_ASSERT_EQUAL(tok.generation, info.generation);
  CU_ASSERT_EQUAL(tok.buffer_id, info.id);
  CU_ASSERT_EQUAL(tok.bytes, BUF_BYTES);
  CU_ASSERT_EQUAL(tok.dtype, ACX_DTYPE_F32);
  CU_ASSERT_EQUAL(tok.rights, ACX_TOKEN_RIGHTS_ALL);
  CU_ASSERT_EQUAL(tok.devid_type, ACX_TOKEN_DEVID_NONE); /* host kind */
  CU_ASSERT(tok.key != 0);

  acx_token_t peer = over_the_wire(&tok);
  acx_buffer_t *got = NULL;
  ACX_ASSERT_STATUS(acxi_token_resolve(&peer, ACX_TOKEN_READ, 0, BUF_BYTES, &got), ACX_OK);
  CU_ASSERT(got == buf);
  /* The handle resolve gives is usable and held: write through it, read through ours. */
  uint32_t v = 0xdeadbeef, r = 0;
  ACX_ASSERT_STATUS(acx_buffer_write(got, 128, &v, sizeof v, 0, T_LONG), ACX_OK);
  acx_buffer_release(got);
  ACX_ASSERT_STATUS(acx_buffer_read(buf, 128, &r, sizeof r, 0, T_LONG), ACX_OK);
  CU_ASSERT_EQUAL(r, v);
  ACX_ASSERT_STATUS(resolve(&peer, ACX_TOKEN_WRITE, 4, 8), ACX_OK);
  ACX_ASSERT_STATUS(resolve(&peer, ACX_TOKEN_READ | ACX_TOKEN_WRITE, BUF_BYTES, 0), ACX_OK); /* empty, at the end */

  ACX_ASSERT_STATUS(acx_buffer_unexport(buf), ACX_OK);
  CU_ASSERT_EQUAL(acxi_token_export_count(), before);
  acx_buffer_release(buf);
}

static void test_keys_are_per_export(void) {
  acxi_token_set_identity(0, 0, 0);
  acx_buffer_t *buf = alloc_f32();
  acx_token_t ro, rw;
  ACX_ASSERT_STATUS(acx_buffer_export(buf, ACX_TOKEN_READ, &ro), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_export(buf, ACX_TOKEN_RIGHTS_ALL, &rw), ACX_OK);
  CU_ASSERT(ro.key != rw.key);
  ACX_ASSERT_STATUS(resolve(&ro, ACX_TOKEN_READ, 0, 4), ACX_OK);
  ACX_ASSERT_STATUS(resolve(&rw, ACX_TOKEN_WRITE, 0, 4), ACX_OK);
  ACX_ASSERT_STATUS(resolve(&ro, ACX_TOKEN_WRITE, 0, 4), ACX_ERR_DENIED);
  ACX_ASSERT_STATUS(acx_buffer_unexport(buf), ACX_OK); /* revokes both */
  ACX_ASSERT_STATUS(resolve(&ro, ACX_TOKEN_READ, 0, 4), ACX_ERR_STALE_TOKEN);
  ACX_ASSERT_STATUS(resolve(&rw, ACX_TOKEN_READ, 0, 4), ACX_ERR_STALE_TOKEN);
  acx_buffer_release(buf);
}

static void test_other_rank(void) {
  acxi_token_set_identity(2, 1, 0);
  acx_buffer_t *buf = alloc_f32();
  acx_token_t tok;
  ACX_ASSERT_STATUS(acx_buffer_export(buf, ACX_TOKEN_READ, &tok), ACX_OK);
  CU_ASSERT_EQUAL(tok.owner_rank, 2);
  CU_ASSERT_EQUAL(tok.node, 1);
  acx_token_t t = tok;
  t.owner_rank = 3; /* a token for rank 3 arriving at rank 2: misrouted */
  ACX_ASSERT_STATUS(resolve(&t, ACX_TOKEN_READ, 0, 4), ACX_ERR_BAD_TOKEN);
  t = tok;
  t.node = 0;
  ACX_ASSERT_STATUS(resolve(&t, ACX_TOKEN_READ, 0, 4), ACX_ERR_BAD_TOKEN);
  ACX_ASSERT_STATUS(resolve(&tok, ACX_TOKEN_READ, 0, 4), ACX_OK);
  acxi_token_set_identity(0, 0, 0); /* this process now believes it is rank 0 */
  ACX_ASSERT_STATUS(resolve(&tok, ACX_TOKEN_READ, 0, 4), ACX_ERR_BAD_TOKEN);
  ACX_ASSERT_STATUS(acx_buffer_unexport(buf), ACX_OK);
  acx_buffer_release(buf);
}

static void test_stale_epoch(void) {
  acxi_token_set_identity(0, 0, 5);
  acx_buffer_t *buf = alloc_f32();
  acx_token_t old, fresh;
  ACX_ASSERT_STATUS(acx_buffer_export(buf, ACX_TOKEN_READ, &old), ACX_OK);
  CU_ASSERT_EQUAL(old.epoch, 5);
  ACX_ASSERT_STATUS(resolve(&old, ACX_TOKEN_READ, 0, 4), ACX_OK);
  acxi_token_set_identity(0, 0, 6); /* the world was rebuilt */
  ACX_ASSERT_STATUS(resolve(&old, ACX_TOKEN_READ, 0, 4), ACX_ERR_STALE_TOKEN);
  ACX_ASSERT_STATUS(acx_buffer_export(buf, ACX_TOKEN_READ, &fresh), ACX_OK);
  CU_ASSERT_EQUAL(fresh.epoch, 6);
  ACX_ASSERT_STATUS(resolve(&fresh, ACX_TOKEN_READ, 0, 4), ACX_OK);
  ACX_ASSERT_STATUS(resolve(&old, ACX_TOKEN_READ, 0, 4), ACX_ERR_STALE_TOKEN);
  /* Re-stamping the old token with the new epoch is a forgery: its key names the old export. */
  acx_token_t forged = old;
  forged.epoch = 6;
  ACX_ASSERT_STATUS(resolve(&forged, ACX_TOKEN_READ, 0, 4), ACX_ERR_DENIED);
  ACX_ASSERT_STATUS(acx_buffer_unexport(buf), ACX_OK);
  acx_buffer_release(buf);
  acxi_token_set_identity(0, 0, 0);
}

static void test_wrong_key_and_forged_fields(void) {
  acxi_token_set_identity(0, 0, 0);
  acx_buffer_t *a = alloc_f32(), *b = alloc_f32();
  acx_token_t ta, tb;
  ACX_ASSERT_STATUS(acx_buffer_export(a, ACX_TOKEN_READ, &ta), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_export(b, ACX_TOKEN_RIGHTS_ALL, &tb), ACX_OK);
  acx_token_t t = ta;
  t.key ^= 1; /* a guessed key for a live export */
  acx_token_t wire = over_the_wire(&t);
  ACX_ASSERT_STATUS(resolve(&wire, ACX_TOKEN_READ, 0, 4), ACX_ERR_DENIED);
  t = ta;
  t.key = tb.key; /* b's key on a's token */
  ACX_ASSERT_STATUS(resolve(&t, ACX_TOKEN_READ, 0, 4), ACX_ERR_DENIED);
  t = ta;
  t.rights = ACX_TOKEN_RIGHTS_ALL; /* widened rights */
  ACX_ASSERT_STATUS(resolve(&t, ACX_TOKEN_READ, 0, 4), ACX_ERR_DENIED);
  t = ta;
  t.bytes = 2 * BUF_BYTES; /* widened bounds */
  ACX_ASSERT_STATUS(resolve(&t, ACX_TOKEN_READ, BUF_BYTES, 4), ACX_ERR_DENIED);
  t = ta;
  t.dtype = ACX_DTYPE_BYTE;
  ACX_ASSERT_STATUS(resolve(&t, ACX_TOKEN_READ, 0, 4), ACX_ERR_DENIED);
  t = ta;
  t.generation += 1;
  ACX_ASSERT_STATUS(resolve(&t, ACX_TOKEN_READ, 0, 4), ACX_ERR_DENIED);
  ACX_ASSERT_STATUS(resolve(&ta, ACX_TOKEN_READ, 0, 4), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_unexport(a), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_unexport(b), ACX_OK);
  acx_buffer_release(a);
  acx_buffer_release(b);
}

static void test_revoked(void) {
  acxi_token_set_identity(0, 0, 0);
  acx_buffer_t *buf = alloc_f32();
  acx_token_t tok;
  ACX_ASSERT_STATUS(acx_buffer_export(buf, ACX_TOKEN_READ, &tok), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_unexport(buf), ACX_OK);
  ACX_ASSERT_STATUS(resolve(&tok, ACX_TOKEN_READ, 0, 4), ACX_ERR_STALE_TOKEN);
  ACX_ASSERT_STATUS(acx_buffer_unexport(buf), ACX_ERR_NOT_FOUND);
  /* A re-export is a new export: the old token stays dead (its key is not the new one's). */
  acx_token_t again;
  ACX_ASSERT_STATUS(acx_buffer_export(buf, ACX_TOKEN_READ, &again), ACX_OK);
  ACX_ASSERT_STATUS(resolve(&again, ACX_TOKEN_READ, 0, 4), ACX_OK);
  ACX_ASSERT_STATUS(resolve(&tok, ACX_TOKEN_READ, 0, 4), ACX_ERR_DENIED); /* wrong key for a live export */
  ACX_ASSERT_STATUS(acx_buffer_unexport(buf), ACX_OK);
  acx_buffer_release(buf);
}

static void test_freed_buffer(void) {
  acxi_token_set_identity(0, 0, 0);
  acx_buffer_t *buf = alloc_f32();
  acx_token_t tok;
  ACX_ASSERT_STATUS(acx_buffer_export(buf, ACX_TOKEN_READ, &tok), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_free(buf, T_LONG), ACX_OK);
  ACX_ASSERT_STATUS(resolve(&tok, ACX_TOKEN_READ, 0, 4), ACX_ERR_STALE_TOKEN);
  acx_token_t t2;
  ACX_ASSERT_STATUS(acx_buffer_export(buf, ACX_TOKEN_READ, &t2), ACX_ERR_INVALID_STATE);
  ACX_ASSERT_STATUS(acx_buffer_unexport(buf), ACX_OK);
  acx_buffer_release(buf);
}

static void test_read_only_put_denied(void) {
  acxi_token_set_identity(0, 0, 0);
  acx_buffer_t *buf = alloc_f32();
  acx_token_t ro, wo;
  ACX_ASSERT_STATUS(acx_buffer_export(buf, ACX_TOKEN_READ, &ro), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_export(buf, ACX_TOKEN_WRITE, &wo), ACX_OK);
  ACX_ASSERT_STATUS(resolve(&ro, ACX_TOKEN_WRITE, 0, 4), ACX_ERR_DENIED);
  ACX_ASSERT_STATUS(resolve(&ro, ACX_TOKEN_READ | ACX_TOKEN_WRITE, 0, 4), ACX_ERR_DENIED);
  ACX_ASSERT_STATUS(resolve(&ro, ACX_TOKEN_READ, 0, 4), ACX_OK);
  ACX_ASSERT_STATUS(resolve(&wo, ACX_TOKEN_READ, 0, 4), ACX_ERR_DENIED);
  ACX_ASSERT_STATUS(resolve(&wo, ACX_TOKEN_WRITE, 0, 4), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_unexport(buf), ACX_OK);
  acx_buffer_release(buf);
}

static void test_ranges(void) {
  acxi_token_set_identity(0, 0, 0);
  acx_buffer_t *buf = alloc_f32();
  acx_token_t tok;
  ACX_ASSERT_STATUS(acx_buffer_export(buf, ACX_TOKEN_RIGHTS_ALL, &tok), ACX_OK);
  ACX_ASSERT_STATUS(resolve(&tok, ACX_TOKEN_READ, 0, BUF_BYTES), ACX_OK);
  ACX_ASSERT_STATUS(resolve(&tok, ACX_TOKEN_READ, BUF_BYTES - 4, 4), ACX_OK);
  ACX_ASSERT_STATUS(resolve(&tok, ACX_TOKEN_READ, 0, BUF_BYTES + 4), ACX_ERR_OUT_OF_RANGE);
  ACX_ASSERT_STATUS(resolve(&tok, ACX_TOKEN_WRITE, BUF_BYTES, 4), ACX_ERR_OUT_OF_RANGE);
  ACX_ASSERT_STATUS(resolve(&tok, ACX_TOKEN_WRITE, BUF_BYTES + 4, 0), ACX_ERR_OUT_OF_RANGE);
  ACX_ASSERT_STATUS(resolve(&tok, ACX_TOKEN_READ, 4, UINT64_MAX - 3), ACX_ERR_OUT_OF_RANGE); /* wraps */
  ACX_ASSERT_STATUS(resolve(&tok, ACX_TOKEN_READ, UINT64_MAX, 1), ACX_ERR_OUT_OF_RANGE);
  ACX_ASSERT_STATUS(resolve(&tok, ACX_TOKEN_READ, 2, 4), ACX_ERR_INVALID_ARG); /* f32: misaligned */
  ACX_ASSERT_STATUS(resolve(&tok, ACX_TOKEN_READ, 0, 6), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_buffer_unexport(buf), ACX_OK);
  acx_buffer_release(buf);
}

static void test_bad_arguments(void) {
  acxi_token_set_identity(0, 0, 0);
  acx_buffer_t *buf = alloc_f32();
  acx_token_t tok;
  ACX_ASSERT_STATUS(acx_buffer_export(NULL, ACX_TOKEN_READ, &tok), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_buffer_export(buf, ACX_TOKEN_READ, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_buffer_export(buf, 0, &tok), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_buffer_export(buf, 4, &tok), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_buffer_unexport(NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_buffer_unexport(buf), ACX_ERR_NOT_FOUND);
  ACX_ASSERT_STATUS(acx_buffer_export(buf, ACX_TOKEN_READ, &tok), ACX_OK);
  acx_buffer_t *out = NULL;
  ACX_ASSERT_STATUS(acxi_token_resolve(NULL, ACX_TOKEN_READ, 0, 4, &out), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acxi_token_resolve(&tok, ACX_TOKEN_READ, 0, 4, NULL), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acxi_token_resolve(&tok, 0, 0, 4, &out), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acxi_token_resolve(&tok, 8, 0, 4, &out), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_buffer_unexport(buf), ACX_OK);
  acx_buffer_release(buf);
}

/* Last of the device tests: the executor crashes, the DeviceActor restarts it, generation + 1. */
static void test_stale_generation(void) {
  acxi_token_set_identity(0, 0, 0);
  acx_buffer_t *buf = alloc_f32();
  uint64_t g = generation();
  acx_token_t tok;
  ACX_ASSERT_STATUS(acx_buffer_export(buf, ACX_TOKEN_RIGHTS_ALL, &tok), ACX_OK);
  CU_ASSERT_EQUAL(tok.generation, g);
  ACX_ASSERT_STATUS(resolve(&tok, ACX_TOKEN_READ, 0, 4), ACX_OK);
  ACX_ASSERT_STATUS(acx_device_inject_fault(dev, 0, T_LONG), ACX_ERR_DEVICE_LOST);
  CU_ASSERT_FATAL(wait_generation(g + 1));
  ACX_ASSERT_STATUS(resolve(&tok, ACX_TOKEN_READ, 0, 4), ACX_ERR_STALE_TOKEN);
  acx_token_t t2;
  ACX_ASSERT_STATUS(acx_buffer_export(buf, ACX_TOKEN_READ, &t2), ACX_ERR_STALE_BUFFER);
  /* A buffer of the new incarnation exports and resolves. */
  acx_buffer_t *fresh = alloc_f32();
  ACX_ASSERT_STATUS(acx_buffer_export(fresh, ACX_TOKEN_READ, &t2), ACX_OK);
  CU_ASSERT_EQUAL(t2.generation, g + 1);
  ACX_ASSERT_STATUS(resolve(&t2, ACX_TOKEN_READ, 0, 4), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_unexport(buf), ACX_OK);
  ACX_ASSERT_STATUS(acx_buffer_unexport(fresh), ACX_OK);
  acx_buffer_release(buf);
  acx_buffer_release(fresh);
}

/* Threads exporting, resolving and revoking at once: the table grows past its first size, every
 * token resolves while its export lives and goes stale after. */
#define N_THREADS 4
#define N_PER_THREAD 100
static void *hammer(void *arg) {
  acx_buffer_t **bufs = arg;
  acx_token_t *toks = calloc(N_PER_THREAD, sizeof *toks);
  long bad = 0;
  for (int i = 0; i < N_PER_THREAD; i++)
    if (acx_buffer_export(bufs[i % 4], ACX_TOKEN_READ, &toks[i]) != ACX_OK) bad++;
  for (int round = 0; round < 5; round++)
    for (int i = 0; i < N_PER_THREAD; i++)
      if (resolve(&toks[i], ACX_TOKEN_READ, 0, 4) != ACX_OK) bad++;
  free(toks);
  return (void *)bad;
}

static void test_concurrent(void) {
  acxi_token_set_identity(0, 0, 0);
  acx_buffer_t *bufs[N_THREADS][4];
  pthread_t th[N_THREADS];
  size_t before = acxi_token_export_count();
  for (int t = 0; t < N_THREADS; t++) {
    for (int i = 0; i < 4; i++) bufs[t][i] = alloc_f32();
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th[t], NULL, hammer, bufs[t]), 0);
  }
  long bad = 0;
  for (int t = 0; t < N_THREADS; t++) {
    void *r;
    pthread_join(th[t], &r);
    bad += (long)r;
  }
  CU_ASSERT_EQUAL(bad, 0);
  CU_ASSERT_EQUAL(acxi_token_export_count(), before + N_THREADS * N_PER_THREAD);
  for (int t = 0; t < N_THREADS; t++)
    for (int i = 0; i < 4; i++) {
      ACX_ASSERT_STATUS(acx_buffer_unexport(bufs[t][i]), ACX_OK);
      acx_buffer_release(bufs[t][i]);
    }
  CU_ASSERT_EQUAL(acxi_token_export_count(), before);
}

/* ---- admissions ---- */

static acxi_token_adm_t *admit(const acx_token_t *t, unsigned access, acx_buffer_t **b) {
  acxi_token_adm_t *a = NULL;
  ACX_ASSERT_STATUS(acxi_token_admit(t, access, 0, 16, b, &a), ACX_OK);
  return a;
}

/* An admitted request whose export is revoked, or whose epoch the world left, before its bytes
 * move: the access is refused as stale. Re-exporting does not revive it (a new key). */
static void test_admission_checked_again(void) {
  acxi_token_set_identity(0, 0, 3);
  acx_buffer_t *buf = alloc_f32(), *b = NULL;
  acx_token_t tok;
  ACX_ASSERT_STATUS(acx_buffer_export(buf, ACX_TOKEN_RIGHTS_ALL, &tok), ACX_OK);
  acxi_token_adm_t *a = admit(&tok, ACX_TOKEN_WRITE, &b);
  ACX_ASSERT_STATUS(acxi_token_access_begin(a, acxi_deadline(T_LONG)), ACX_OK);
  acxi_token_access_end(a);
  ACX_ASSERT_STATUS(acx_buffer_unexport(buf), ACX_OK);
  acx_token_t again;
  ACX_ASSERT_STATUS(acx_buffer_export(buf, ACX_TOKEN_RIGHTS_ALL, &again), ACX_OK);
  ACX_ASSERT_STATUS(acxi_token_access_begin(a, acxi_deadline(T_LONG)), ACX_ERR_STALE_TOKEN);
  acxi_token_adm_free(a);
  acx_buffer_release(b);

  a = admit(&again, ACX_TOKEN_READ, &b);
  acxi_token_set_identity(0, 0, 4); /* the world was rebuilt */
  ACX_ASSERT_STATUS(acxi_token_access_begin(a, acxi_deadline(T_LONG)), ACX_ERR_STALE_TOKEN);
  acxi_token_adm_free(a);
  acx_buffer_release(b);
  ACX_ASSERT_STATUS(acx_buffer_unexport(buf), ACX_OK);
  acx_buffer_release(buf);
  acxi_token_set_identity(0, 0, 0);
}

static acx_buffer_t *revoking;
static _Atomic int access_ended, ended_at_return;
static _Atomic acx_status_t unexport_status;

static void *unexport_thread(void *arg) {
  (void)arg;
  acx_status_t st = acx_buffer_unexport(revoking);
  atomic_store(&ended_at_return, atomic_load(&access_ended));
  atomic_store(&unexport_status, st);
  return NULL;
}

/* acx_buffer_unexport returns only once the access under way has ended. */
static void test_unexport_waits_for_access(void) {
  acxi_token_set_identity(0, 0, 0);
  acx_buffer_t *b = NULL;
  revoking = alloc_f32();
  acx_token_t tok;
  size_t before = acxi_token_export_count();
  ACX_ASSERT_STATUS(acx_buffer_export(revoking, ACX_TOKEN_RIGHTS_ALL, &tok), ACX_OK);
  acxi_token_adm_t *a = admit(&tok, ACX_TOKEN_WRITE, &b);
  ACX_ASSERT_STATUS(acxi_token_access_begin(a, acxi_deadline(T_LONG)), ACX_OK);
  atomic_store(&access_ended, 0);
  atomic_store(&ended_at_return, -1);
  pthread_t t;
  CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, unexport_thread, NULL), 0);
  /* The export is gone once unexport took it out; then it waits for this access. */
  int64_t dl = acxi_deadline(T_LONG);
  while (acxi_token_export_count() != before && acxi_now_ns() < dl) usleep(1000);
  CU_ASSERT_EQUAL(acxi_token_export_count(), before);
  atomic_store(&access_ended, 1);
  acxi_token_access_end(a);
  pthread_join(t, NULL);
  CU_ASSERT_EQUAL(atomic_load(&ended_at_return), 1);
  CU_ASSERT_EQUAL(atomic_load(&unexport_status), ACX_OK);
  acxi_token_adm_free(a);
  acx_buffer_release(b);
  acx_buffer_release(revoking);
}

/* An access that outlives its deadline does not hold unexport or the epoch drain forever: they
 * give up about a second after it (ACX_ERR_TIMEOUT), the export revoked all the same. */
static void test_revocation_waits_are_bounded(void) {
  acxi_token_set_identity(0, 0, 7);
  acx_buffer_t *buf = alloc_f32(), *b = NULL;
  acx_token_t tok;
  ACX_ASSERT_STATUS(acx_buffer_export(buf, ACX_TOKEN_RIGHTS_ALL, &tok), ACX_OK);
  acxi_token_adm_t *a = admit(&tok, ACX_TOKEN_WRITE, &b);
  ACX_ASSERT_STATUS(acxi_token_access_begin(a, acxi_deadline(50000000)), ACX_OK);
  acxi_token_set_identity(0, 0, 8);
  int64_t t0 = acxi_now_ns();
  ACX_ASSERT_STATUS(acxi_token_drain_epoch(8, acxi_deadline(100000000)), ACX_ERR_TIMEOUT);
  CU_ASSERT(acxi_now_ns() - t0 >= 100000000);
  ACX_ASSERT_STATUS(acxi_token_drain_epoch(7, acxi_deadline(100000000)), ACX_OK); /* not older than 7 */
  t0 = acxi_now_ns();
  ACX_ASSERT_STATUS(acx_buffer_unexport(buf), ACX_ERR_TIMEOUT);
  int64_t took = acxi_now_ns() - t0;
  CU_ASSERT(took >= 500000000 && took < 5000000000LL);
  CU_ASSERT_EQUAL(resolve(&tok, ACX_TOKEN_WRITE, 0, 16), ACX_ERR_STALE_TOKEN);
  acxi_token_access_end(a);
  ACX_ASSERT_STATUS(acxi_token_drain_epoch(8, acxi_deadline(T_LONG)), ACX_OK);
  acxi_token_adm_free(a);
  acx_buffer_release(b);
  acx_buffer_release(buf);
  acxi_token_set_identity(0, 0, 0);
}

static int setup(void) {
  if (acx_system_create(NULL, &sys) != ACX_OK) return 1;
  acx_device_config_t cfg = ACX_DEVICE_CONFIG_INIT;
  cfg.kind = ACX_DEVICE_KIND_HOST;
  cfg.transport = ACX_TRANSPORT_PROCESS;
  cfg.streams = 1;
  cfg.max_restarts = 3;
  return acx_device_open(sys, &cfg, &dev) == ACX_OK ? 0 : 1;
}

static int teardown(void) {
  int bad = acxi_token_export_count() != 0;
  if (acx_device_close(dev, T_LONG) != ACX_OK) bad = 1;
  if (acx_system_destroy(sys, T_LONG) != ACX_OK) bad = 1;
  return bad;
}

int main(void) {
  static const acx_test_case_t cases[] = {ACX_TEST(test_export_and_resolve),
                                          ACX_TEST(test_keys_are_per_export),
                                          ACX_TEST(test_other_rank),
                                          ACX_TEST(test_stale_epoch),
                                          ACX_TEST(test_wrong_key_and_forged_fields),
                                          ACX_TEST(test_revoked),
                                          ACX_TEST(test_freed_buffer),
                                          ACX_TEST(test_read_only_put_denied),
                                          ACX_TEST(test_ranges),
                                          ACX_TEST(test_bad_arguments),
                                          ACX_TEST(test_concurrent),
                                          ACX_TEST(test_admission_checked_again),
                                          ACX_TEST(test_unexport_waits_for_access),
                                          ACX_TEST(test_revocation_waits_are_bounded),
                                          ACX_TEST(test_stale_generation),
                                          ACX_TEST_END};
  return acx_test_run("token-registry", cases, setup, teardown);
}
