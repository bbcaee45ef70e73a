/* The tests' blocking MPI calls, waited for with naps (through the MPI profiling interface).
 *
 * Open MPI waits in a blocking call by polling, and on an oversubscribed node (mpirun
 * --oversubscribe, as every CI test runs: 4 to 8 ranks on 2 cores) by polling with sched_yield.
 * On the 2-core CI machine a test's ranks that sat in MPI_Barrier took every core (measured: the
 * ranks' main threads used 100% of both cores, 77% of it in the kernel) while the threads they were
 * waiting for -- another rank's rebuild, an executor, a poller -- woke up seconds late: a
 * normal-priority thread that slept 50 ms saw gaps of up to 3.6 s (a real-time one beside it none),
 * every rank's device poller logged "not scheduled for 5.7 s" at once, and a world rebuild that
 * takes 0.1 s took 13 to 43 s (test_rebuild_peer_big_hier_np4, session 19; in CI it missed its
 * deadline). The test harness must not starve the runtime it tests: here each blocking call a
 * test makes becomes its non-blocking form, polled with MPI_Test and naps that grow to 1 ms, as
 * acx's own MPI waits are (runtime/base/clock.h, acxi_poll_nap).
 *
 * Collectives on MPI_COMM_WORLD run on a duplicate of it made in MPI_Init: a blocking collective
 * and a non-blocking one are matched apart in Open MPI, and some tests leave acx's non-blocking
 * exchanges on MPI_COMM_WORLD pending on purpose (test_world --late-rank: a timed-out world
 * creation's exchange stays parked); the test's own MPI_Barrier, made non-blocking on the same
 * communicator, was matched with it (MPI_ERR_TRUNCATE). Collectives on other communicators keep
 * the library's blocking calls; point-to-point calls keep their communicator (matching is as with
 * the blocking calls).
 *
 * These definitions win over the MPI library's because the test programs link this static library
 * before it (the PMPI mechanism of the MPI standard, section 15.2); an object of the archive is
 * linked only into programs that call MPI (libacx's own calls to MPI_Barrier and the others would
 * come here too; it makes none: it waits on non-blocking calls with naps). A wait that lasts long
 * says so on stderr every 30 s (which call, which rank): a hung test names where it hangs. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "runtime/base/clock.h"

/* MPI_COMM_WORLD's duplicate for the test's collectives (MPI_COMM_NULL before MPI_Init and after
 * MPI_Finalize: the library's blocking calls then). */
static MPI_Comm world_dup = MPI_COMM_NULL;

static void make_world_dup(void) {
  if (PMPI_Comm_dup(MPI_COMM_WORLD, &world_dup) != MPI_SUCCESS) world_dup = MPI_COMM_NULL;
}

int MPI_Init(int *argc, char ***argv) {
  int rc = PMPI_Init(argc, argv);
  if (rc == MPI_SUCCESS) make_world_dup();
  return rc;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
  int rc = PMPI_Init_thread(argc, argv, required, provided);
  if (rc == MPI_SUCCESS) make_world_dup();
  return rc;
}

/* The communicator a collective on `comm` runs on with naps; MPI_COMM_NULL: the blocking call. */
static MPI_Comm napping(MPI_Comm comm) { return comm == MPI_COMM_WORLD ? world_dup : MPI_COMM_NULL; }

/* Waits as long as the blocking call would (the test's ctest TIMEOUT bounds it), saying so. */
static int nap_wait(MPI_Request *req, MPI_Status *status, const char *call) {
  const int64_t start = acxi_now_ns();
  int64_t next_note = start + 30000000000LL;
  for (;;) {
    int flag = 0;
    int rc = PMPI_Test(req, &flag, status);
    if (rc != MPI_SUCCESS || flag) return rc;
    int64_t now = acxi_now_ns();
    if (now >= next_note) {
      int rank = -1;
      PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
      fprintf(stderr, "rank %d: %s has waited %.0f s (tests/common/acx_test_mpi.c)\n", rank, call, (now - start) / 1e9);
      next_note = now + 30000000000LL;
    }
    acxi_poll_nap(now - start, 50000);
  }
}

int MPI_Barrier(MPI_Comm comm) {
  MPI_Comm c = napping(comm);
  if (c == MPI_COMM_NULL) return PMPI_Barrier(comm);
  MPI_Request req;
  int rc = PMPI_Ibarrier(c, &req);
  return rc != MPI_SUCCESS ? rc : nap_wait(&req, MPI_STATUS_IGNORE, "MPI_Barrier");
}

int MPI_Bcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  MPI_Comm c = napping(comm);
  if (c == MPI_COMM_NULL) return PMPI_Bcast(buf, count, type, root, comm);
  MPI_Request req;
  int rc = PMPI_Ibcast(buf, count, type, root, c, &req);
  return rc != MPI_SUCCESS ? rc : nap_wait(&req, MPI_STATUS_IGNORE, "MPI_Bcast");
}

int MPI_Allreduce(const void *sbuf, void *rbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  MPI_Comm c = napping(comm);
  if (c == MPI_COMM_NULL) return PMPI_Allreduce(sbuf, rbuf, count, type, op, comm);
  MPI_Request req;
  int rc = PMPI_Iallreduce(sbuf, rbuf, count, type, op, c, &req);
  return rc != MPI_SUCCESS ? rc : nap_wait(&req, MPI_STATUS_IGNORE, "MPI_Allreduce");
}

int MPI_Allgather(const void *sbuf, int scount, MPI_Datatype stype, void *rbuf, int rcount, MPI_Datatype rtype,
                  MPI_Comm comm) {
  MPI_Comm c = napping(comm);
  if (c == MPI_COMM_NULL) return PMPI_Allgather(sbuf, scount, stype, rbuf, rcount, rtype, comm);
  MPI_Request req;
  int rc = PMPI_Iallgather(sbuf, scount, stype, rbuf, rcount, rtype, c, &req);
  return rc != MPI_SUCCESS ? rc : nap_wait(&req, MPI_STATUS_IGNORE, "MPI_Allgather");
}

int MPI_Gather(const void *sbuf, int scount, MPI_Datatype stype, void *rbuf, int rcount, MPI_Datatype rtype, int root,
               MPI_Comm comm) {
  MPI_Comm c = napping(comm);
  if (c == MPI_COMM_NULL) return PMPI_Gather(sbuf, scount, stype, rbuf, rcount, rtype, root, comm);
  MPI_Request req;
  int rc = PMPI_Igather(sbuf, scount, stype, rbuf, rcount, rtype, root, c, &req);
  return rc != MPI_SUCCESS ? rc : nap_wait(&req, MPI_STATUS_IGNORE, "MPI_Gather");
}

int MPI_Gatherv(const void *sbuf, int scount, MPI_Datatype stype, void *rbuf, const int rcounts[], const int displs[],
                MPI_Datatype rtype, int root, MPI_Comm comm) {
  MPI_Comm c = napping(comm);
  if (c == MPI_COMM_NULL) return PMPI_Gatherv(sbuf, scount, stype, rbuf, rcounts, displs, rtype, root, comm);
  MPI_Request req;
  int rc = PMPI_Igatherv(sbuf, scount, stype, rbuf, rcounts, displs, rtype, root, c, &req);
  return rc != MPI_SUCCESS ? rc : nap_wait(&req, MPI_STATUS_IGNORE, "MPI_Gatherv");
}

int MPI_Send(const void *buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  MPI_Request req;
  int rc = PMPI_Isend(buf, count, type, dest, tag, comm, &req);
  return rc != MPI_SUCCESS ? rc : nap_wait(&req, MPI_STATUS_IGNORE, "MPI_Send");
}

int MPI_Recv(void *buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Status *status) {
  MPI_Request req;
  int rc = PMPI_Irecv(buf, count, type, source, tag, comm, &req);
  return rc != MPI_SUCCESS ? rc : nap_wait(&req, status, "MPI_Recv");
}

int MPI_Wait(MPI_Request *req, MPI_Status *status) { return nap_wait(req, status, "MPI_Wait"); }

/* MPI_Finalize is collective and waits for every rank: the ranks meet in a napping barrier
 * first, so that the last one to arrive does not find the others polling; then in the library's
 * blocking barrier, which every rank leaves at once, as before this file. Without it MPICH 4.0.2
 * over UCX hung in MPI_Finalize across simulated nodes in 6 of 6 runs of multinode_world_2x2 (one
 * rank still closing its endpoints while the others sat in the launcher's barrier, which does not
 * progress the network; the nap had spread the ranks' arrivals); with it 4 of 6 passed, as
 * without this file (3 of 4): docs/status.md, known problems. */
int MPI_Finalize(void) {
  if (world_dup != MPI_COMM_NULL) {
    MPI_Request req;
    if (PMPI_Ibarrier(world_dup, &req) == MPI_SUCCESS) nap_wait(&req, MPI_STATUS_IGNORE, "MPI_Finalize");
    PMPI_Comm_free(&world_dup);
    world_dup = MPI_COMM_NULL;
    PMPI_Barrier(MPI_COMM_WORLD);
  }
  return PMPI_Finalize();
}
