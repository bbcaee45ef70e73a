/* resilient_allreduce: an iterative, solver-like loop that survives the loss of a rank's GPU
 * executor with nothing lost. Every rank keeps three versions of its state, a replica of its right
 * neighbour's (fetched with acx_token_get), and all-reduces a residual each iteration. At
 * iteration --fault-at rank 1's executor is killed (--fault kill: SIGKILL of its executor
 * processes; --fault inject: acx_device_inject_fault); the world is rebuilt, the ranks agree on the
 * last iteration every rank completed, rank 1 restores its state from the replica its left
 * neighbour holds, and the run finishes with the result a fault-free run gives, bit for bit
 * (docs/resilience.md). --fault-ranks R1,R2,... faults those ranks instead of rank 1: when two
 * neighbours lose their state at once no replica survives and every rank starts over from
 * iteration 0, which still gives the fault-free result. Usage: mpirun -np N resilient_allreduce
 * [--iters K] [--n ELEMS] [--fault-at K] [--fault kill|inject] [--fault-ranks LIST] [--cuda] */
#define _GNU_SOURCE
#include <dirent.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "acx/coll.h"
#include "acx/rebuild.h"
#include "acx/remote.h"
#include "acx/token.h"
#include "acx/world.h"

#define SLOTS 3 /* ranks differ by at most one completed iteration and write one ahead */
#define TMO 60000000000LL

static int rank, nranks, n = 4096, iters = 40, fault_at = -1, use_cuda, fault_kill = 1;
static const char *fault_ranks = "1"; /* --fault-ranks: a comma list of ranks */

/* 1 when this rank is in the --fault-ranks list. */
static int faults_here(void) {
  char *list = strdup(fault_ranks), *save = NULL;
  int here = 0;
  for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) here |= atoi(t) == rank;
  free(list);
  return here;
}
static acx_world_t *world;
static acx_system_t *sys;
static acx_device_t *dev;
static acx_coll_t *coll;
static acx_buffer_t *state[SLOTS], *replica[SLOTS], *scalar, *agree;
/* Tokens of every rank: [rank][0..2] its state slots, [rank][3..5] its replica slots. */
static acx_token_t (*toks)[2 * SLOTS];
static double *res; /* res[k]: the all-reduced residual of iteration k, kept on the host */

static double wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

#define CHECK(call)                                                                                   \
  do {                                                                                                \
    acx_status_t st_ = (call);                                                                        \
    if (st_ != ACX_OK) {                                                                              \
      fprintf(stderr, "rank %d: %s: %s\n", rank, #call, acx_status_str(st_));                        \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                                   \
    }                                                                                                 \
  } while (0)

/* ---- the fault: SIGKILL of this rank's executor processes (the children named acx-executor) ---- */
static int kill_executors(void) {
  DIR *d = opendir("/proc");
  int killed = 0;
  struct dirent *e;
  while (d && (e = readdir(d))) {
    char path[300], buf[512];
    snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = '\0';
    char *open = strchr(buf, '('), *close = strrchr(buf, ')');
    if (!open || !close) continue;
    int ppid = 0;
    char state_c;
    if (sscanf(close + 1, " %c %d", &state_c, &ppid) != 2 || ppid != getpid()) continue;
    if (strncmp(open + 1, "acx-executor", (size_t)(close - open - 1)) != 0) continue;
    if (kill(atoi(e->d_name), SIGKILL) == 0) killed++;
  }
  if (d) closedir(d);
  return killed;
}

static void inject_fault(void) {
  if (fault_kill) {
    int k = kill_executors();
    fprintf(stderr, "rank %d: fault: SIGKILL to %d executor process(es)\n", rank, k);
  } else {
    acx_status_t st = acx_device_inject_fault(dev, 0, TMO);
    fprintf(stderr, "rank %d: fault: injected (%s)\n", rank, acx_status_name(st));
  }
}

/* ---- buffers and tokens ---- */
/* Which state (0..SLOTS-1) and replica (SLOTS..) buffers hold an export: it is withdrawn before
 * the buffer goes (an export keeps its buffer alive) or is made again. */
static int exported[2 * SLOTS];

static void unexport_slot(int s) {
  if (!exported[s]) return;
  acx_buffer_unexport(s < SLOTS ? state[s] : replica[s - SLOTS]);
  exported[s] = 0;
}

static void alloc_all(int fresh) {
  for (int s = 0; s < SLOTS; s++) {
    if (fresh || acx_buffer_check(state[s]) != ACX_OK) {
      unexport_slot(s);
      acx_buffer_release(state[s]);
      CHECK(acx_buffer_alloc(dev, (size_t)n * 8, ACX_DTYPE_F64, ACX_MEM_DEVICE, TMO, &state[s]));
    }
    if (fresh || acx_buffer_check(replica[s]) != ACX_OK) {
      unexport_slot(SLOTS + s);
      acx_buffer_release(replica[s]);
      CHECK(acx_buffer_alloc(dev, (size_t)n * 8, ACX_DTYPE_F64, ACX_MEM_DEVICE, TMO, &replica[s]));
    }
  }
  if (fresh || acx_buffer_check(scalar) != ACX_OK) {
    acx_buffer_release(scalar);
    CHECK(acx_buffer_alloc(dev, 8, ACX_DTYPE_F64, ACX_MEM_DEVICE, TMO, &scalar));
  }
  if (fresh || acx_buffer_check(agree) != ACX_OK) {
    acx_buffer_release(agree);
    CHECK(acx_buffer_alloc(dev, 8, ACX_DTYPE_I64, ACX_MEM_DEVICE, TMO, &agree));
  }
}

/* Exports made in this epoch, exchanged with every rank (tokens of an earlier epoch are stale). */
static void export_all(void) {
  unsigned char mine[2 * SLOTS][ACX_TOKEN_BYTES];
  for (int s = 0; s < 2 * SLOTS; s++) {
    acx_buffer_t *b = s < SLOTS ? state[s] : replica[s - SLOTS];
    unexport_slot(s); /* an export of an earlier epoch */
    acx_token_t t;
    CHECK(acx_buffer_export(b, ACX_TOKEN_READ, &t));
    exported[s] = 1;
    CHECK(acx_token_encode(&t, mine[s], ACX_TOKEN_BYTES, NULL));
  }
  unsigned char *all = malloc((size_t)nranks * sizeof mine);
  MPI_Allgather(mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, MPI_COMM_WORLD);
  for (int r = 0; r < nranks; r++)
    for (int s = 0; s < 2 * SLOTS; s++)
      CHECK(acx_token_decode(all + ((size_t)r * 2 * SLOTS + (size_t)s) * ACX_TOKEN_BYTES, ACX_TOKEN_BYTES, &toks[r][s]));
  free(all);
}

/* Iteration 0: every rank's initial state (a function of its rank) and its replica of its right
 * neighbour's, exported in this epoch. At the start, and when no replica survives a fault. */
static void start_over(void) {
  double *x0 = malloc((size_t)n * 8);
  for (int i = 0; i < n; i++) x0[i] = rank + 1e-3 * i;
  CHECK(acx_buffer_write(state[0], 0, x0, (size_t)n * 8, 0, TMO));
  free(x0);
  export_all();
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(acx_token_get_sync(world, &toks[(rank + 1) % nranks][0], 0, (uint64_t)n * 8, replica[0], 0, -1));
  MPI_Barrier(MPI_COMM_WORLD);
}

/* ---- one iteration; ACX_OK or the first failure (the caller recovers) ---- */
static acx_status_t iterate(int k, int *faulted) {
  double *x = malloc((size_t)n * 8), *y = malloc((size_t)n * 8), *z = malloc((size_t)n * 8);
  int prev = (k - 1) % SLOTS, cur = k % SLOTS, right = (rank + 1) % nranks;
  acx_status_t st = acx_buffer_read(state[prev], 0, x, (size_t)n * 8, 0, TMO);
  if (st == ACX_OK) st = acx_buffer_read(replica[prev], 0, y, (size_t)n * 8, 0, TMO);
  double local = 0;
  if (st == ACX_OK) {
    for (int i = 0; i < n; i++) {
      z[i] = 0.5 * x[i] + 0.25 * y[(i + 1) % n] + 0.125 * res[k - 1] / (n * (double)nranks) + 1e-3 * k;
      local += z[i] > x[i] ? z[i] - x[i] : x[i] - z[i];
    }
    /* The state goes out before the all-reduce: a neighbour that completes it may fetch it. */
    st = acx_buffer_write(state[cur], 0, z, (size_t)n * 8, 0, TMO);
  }
  if (st == ACX_OK && k == fault_at && faults_here() && !*faulted) {
    *faulted = 1;
    inject_fault();
  }
  if (st == ACX_OK) st = acx_buffer_write(scalar, 0, &local, 8, 0, TMO);
  if (st == ACX_OK) st = acx_allreduce_sync(coll, scalar, scalar, 1, ACX_DTYPE_F64, ACX_REDOP_SUM, 0, -1);
  double r = 0;
  if (st == ACX_OK) st = acx_buffer_read(scalar, 0, &r, 8, 0, TMO);
  /* The neighbour wrote S(k) before entering the all-reduce that just finished. */
  if (st == ACX_OK) st = acx_token_get_sync(world, &toks[right][cur], 0, (uint64_t)n * 8, replica[cur], 0, -1);
  if (st == ACX_OK) res[k] = r;
  free(x);
  free(y);
  free(z);
  return st;
}

/* After a failure: wait for the rebuilt world, agree on the last iteration every rank completed,
 * restore what this rank lost from its neighbours. Returns the iteration to resume after. */
static int recover(uint64_t epoch_before, int completed, acx_status_t why) {
  /* Sticky across attempts: a second fault during recovery (e.g. the old communicator's late NCCL
   * error starting another rebuild) finds freshly allocated buffers, yet the state is still lost. */
  int lost = 0;
  for (;;) {
    acx_status_t st = acx_world_wait_epoch(world, epoch_before, TMO);
    if (st != ACX_OK) {
      fprintf(stderr, "rank %d: the world did not come back (%s) after %s\n", rank, acx_status_str(st),
              acx_status_name(why));
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    acx_world_epoch(world, &epoch_before);
    lost |= acx_buffer_check(state[0]) != ACX_OK;
    alloc_all(0);
    int64_t c = completed;
    st = acx_buffer_write(agree, 0, &c, 8, 0, TMO);
    if (st == ACX_OK) st = acx_allreduce_sync(coll, agree, agree, 1, ACX_DTYPE_I64, ACX_REDOP_MIN, 0, -1);
    if (st == ACX_OK) st = acx_buffer_read(agree, 0, &c, 8, 0, TMO);
    if (st != ACX_OK) {
      why = st;
      continue; /* another fault: wait for the next epoch */
    }
    int t = (int)c, left = (rank + nranks - 1) % nranks, right = (rank + 1) % nranks;
    /* A rank's state survives in its left neighbour's replica only: when both lost theirs (two
     * neighbours' executors went at once), no copy is left anywhere. Every rank then starts over
     * from iteration 0, whose state is a function of the rank: still the fault-free computation,
     * never a silently different one. */
    int *lost_by = malloc((size_t)nranks * sizeof *lost_by), gone = -1;
    MPI_Allgather(&lost, 1, MPI_INT, lost_by, 1, MPI_INT, MPI_COMM_WORLD);
    for (int r = 0; r < nranks && gone < 0; r++)
      if (lost_by[r] && lost_by[(r + nranks - 1) % nranks]) gone = r;
    free(lost_by);
    if (gone >= 0) {
      start_over();
      fprintf(stderr, "rank %d: recovered at epoch %llu after %s: ranks %d and %d both lost their state, so no "
              "replica of rank %d's survives: every rank starts again from iteration 0 (this rank had completed %d)\n",
              rank, (unsigned long long)epoch_before, acx_status_name(why), (gone + nranks - 1) % nranks, gone, gone,
              completed);
      return 0;
    }
    export_all();
    /* This rank's state of iteration t lives on in the replica its left neighbour holds. */
    if (lost) CHECK(acx_token_get_sync(world, &toks[left][SLOTS + t % SLOTS], 0, (uint64_t)n * 8, state[t % SLOTS], 0, -1));
    MPI_Barrier(MPI_COMM_WORLD);
    if (lost) CHECK(acx_token_get_sync(world, &toks[right][t % SLOTS], 0, (uint64_t)n * 8, replica[t % SLOTS], 0, -1));
    MPI_Barrier(MPI_COMM_WORLD);
    char from[64] = "";
    if (lost) snprintf(from, sizeof from, "; its state was restored from rank %d's replica", left);
    fprintf(stderr, "rank %d: recovered at epoch %llu after %s: resuming after iteration %d (this rank had completed %d%s)\n",
            rank, (unsigned long long)epoch_before, acx_status_name(why), t, completed, from);
    return t;
  }
}

static uint64_t fnv1a(const void *p, size_t len, uint64_t h) {
  const unsigned char *b = p;
  for (size_t i = 0; i < len; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

int main(int argc, char **argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--n") && i + 1 < argc) n = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--fault-at") && i + 1 < argc) fault_at = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--fault") && i + 1 < argc) fault_kill = strcmp(argv[++i], "inject") != 0;
    else if (!strcmp(argv[i], "--fault-ranks") && i + 1 < argc) fault_ranks = argv[++i];
    else if (!strcmp(argv[i], "--cuda")) use_cuda = 1;
    else {
      if (rank == 0) fprintf(stderr, "usage: %s [--iters K] [--n ELEMS] [--fault-at K] [--fault kill|inject] [--fault-ranks LIST] [--cuda]\n", argv[0]);
      MPI_Finalize();
      return 2;
    }
  }
  if (nranks < 2 || iters < 1 || n < 1) {
    if (rank == 0) fprintf(stderr, "resilient_allreduce: needs 2 ranks or more, --iters >= 1, --n >= 1\n");
    MPI_Finalize();
    return 2;
  }
  CHECK(acx_world_init(MPI_COMM_WORLD, NULL, &world));
  /* The world chose this rank's GPU and the cores near it: the actor workers, the device's
   * executor (restarted ones included) and its poller go there. */
  acx_topo_binding_t bind;
  CHECK(acx_world_binding(world, &bind));
  acx_system_config_t scfg = ACX_SYSTEM_CONFIG_INIT;
  scfg.cpuset = bind.cpuset[0] ? bind.cpuset : NULL;
  CHECK(acx_system_create(&scfg, &sys));
  acx_device_config_t cfg = ACX_DEVICE_CONFIG_INIT;
  cfg.kind = use_cuda ? ACX_DEVICE_KIND_CUDA : ACX_DEVICE_KIND_HOST;
  cfg.cpuset = scfg.cpuset;
  if (use_cuda && bind.pci_bus_id[0]) cfg.pci_bus_id = bind.pci_bus_id;
  acx_status_t st = acx_device_open(sys, &cfg, &dev);
  int ok = st == ACX_OK, all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all_ok) {
    /* Said before any rank leaves: a launcher may kill the others as soon as one exits non-zero. */
    if (rank == 0) {
      printf("resilient_allreduce: no %s device on every rank: skipped\n", use_cuda ? "cuda" : "host");
      fflush(stdout);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (dev) acx_device_close(dev, TMO);
    acx_system_destroy(sys, TMO);
    acx_world_finalize(world);
    MPI_Finalize();
    return use_cuda ? 77 : 1;
  }
  CHECK(acx_coll_create(world, dev, sys, NULL, &coll));
  CHECK(acx_remote_start(world));
  CHECK(acx_world_supervise(world, sys, dev, coll, NULL));

  toks = calloc((size_t)nranks, sizeof *toks);
  res = calloc((size_t)iters + 1, sizeof *res);
  alloc_all(1);
  start_over();

  int completed = 0, faulted = 0;
  for (int k = 1; k <= iters;) {
    uint64_t epoch = 0;
    acx_world_epoch(world, &epoch);
    st = iterate(k, &faulted);
    if (st == ACX_OK) {
      completed = k++;
      continue;
    }
    /* A peer's fault reaches this rank as ACX_ERR_WORLD_REBUILDING (also when the transport notices
     * first: NCCL over sockets sees the peer's connection close), as this rank's own lost device,
     * or as an error of a buffer that went with it: the supervisor rebuilds the world either way. */
    if (!ACX_IS_RETRYABLE(st) && !ACX_IS_BUFFER_ERROR(st) && !ACX_IS_WORLD_ERROR(st) && !ACX_IS_DEVICE_LOST(st)) {
      fprintf(stderr, "rank %d: iteration %d failed: %s\n", rank, k, acx_status_str(st));
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    completed = recover(epoch, completed, st);
    k = completed + 1;
  }

  /* The result: every rank's final state and the last residual, hashed bit for bit. */
  double *x = malloc((size_t)n * 8);
  CHECK(acx_buffer_read(state[iters % SLOTS], 0, x, (size_t)n * 8, 0, TMO));
  uint64_t h = fnv1a(x, (size_t)n * 8, 0xcbf29ce484222325ull), *hs = malloc((size_t)nranks * 8);
  MPI_Gather(&h, 1, MPI_UINT64_T, hs, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  acx_rebuild_stats_t rs = {.size = sizeof rs};
  CHECK(acx_world_rebuild_stats(world, &rs));
  fprintf(stderr, "rank %d: %llu rebuild(s); last fault to ready %.1f ms (executor restart %.1f ms)\n", rank,
          (unsigned long long)rs.rebuilds, rs.last_fault_to_ready_ns / 1e6, rs.last_device_recovery_ns / 1e6);
  /* Collectives of the epoch a rebuild ended that not every rank submitted: their results are wrong,
   * and a success among them was a wrong result reported as right. recover() redoes every iteration
   * after the last one all ranks completed, so none of them reaches the result. */
  acx_coll_rebuild_report_t rr = {.size = sizeof rr};
  CHECK(acx_coll_rebuild_report(coll, &rr));
  if (rr.rebuilds)
    fprintf(stderr, "rank %d: last rebuild: %llu of this rank's %llu collectives not joined by every rank, %llu of them "
            "reported as success\n", rank, (unsigned long long)(rr.submitted - rr.joined),
            (unsigned long long)rr.submitted, (unsigned long long)rr.unjoined_ok);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    uint64_t rbits;
    memcpy(&rbits, &res[iters], 8);
    /* One write of one line: the launcher forwards every rank's output, and a line printed in pieces
       can be interleaved with another rank's. Progress lines go to stderr; stdout carries only this. */
    size_t cap = 128 + (size_t)nranks * 17, len = 0;
    char *line = malloc(cap);
    len += (size_t)snprintf(line + len, cap - len, "result: iters %d n %d ranks %d residual %.17g (0x%016llx) states",
                            iters, n, nranks, res[iters], (unsigned long long)rbits);
    for (int r = 0; r < nranks; r++) len += (size_t)snprintf(line + len, cap - len, " %016llx", (unsigned long long)hs[r]);
    snprintf(line + len, cap - len, "\n");
    fputs(line, stdout);
    fflush(stdout);
    free(line);
  }
  free(x);
  free(hs);

  /* The teardown's steps, timed: one that takes long (a transfer left in an executor after a
   * recovery, a communicator's destroy waiting for a peer) is named on stderr. */
  double td[5], t0 = wall_ms();
  CHECK(acx_world_unsupervise(world, TMO));
  td[0] = wall_ms();
  CHECK(acx_remote_stop(world, TMO));
  td[1] = wall_ms();
  for (int s = 0; s < SLOTS; s++) {
    unexport_slot(s);
    unexport_slot(SLOTS + s);
    acx_buffer_release(state[s]);
    acx_buffer_release(replica[s]);
  }
  acx_buffer_release(scalar);
  acx_buffer_release(agree);
  acx_coll_destroy(coll, TMO);
  td[2] = wall_ms();
  acx_device_close(dev, TMO);
  td[3] = wall_ms();
  acx_system_destroy(sys, TMO);
  acx_world_finalize(world);
  td[4] = wall_ms();
  if (td[4] - t0 > 2000)
    fprintf(stderr, "rank %d: teardown took %.0f ms: unsupervise %.0f, remote stop %.0f, buffers and coll %.0f, device "
            "close %.0f, system and world %.0f\n", rank, td[4] - t0, td[0] - t0, td[1] - td[0], td[2] - td[1],
            td[3] - td[2], td[4] - td[3]);
  free(toks);
  free(res);
  MPI_Finalize();
  return 0;
}
