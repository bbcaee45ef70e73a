/* A plain MPI program (no acx) with the MPI pattern of tests/world/test_world across simulated nodes, then
 * MPI_Finalize: it tells an MPI library's own teardown problems from acx's (docs/multinode.md, "MPICH").
 *   mpicc -O1 -o mpi-finalize-check scripts/sim-cluster/mpi-finalize-check.c
 *   SIM_CLUSTER_MPIRUN=mpiexec.mpich scripts/sim-cluster/run.sh -q -N 2 -r 2 -- ./mpi-finalize-check
 * It prints "plain: N ranks done" after its last barrier; a run that prints it and does not exit
 * hangs in MPI_Finalize. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
  int provided, rank, size;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm dup, shared;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  MPI_Barrier(dup);
  MPI_Comm_split_type(dup, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &shared);
  char host[64] = "", *all = malloc(64 * (size_t)size);
  size_t n = 1 << 20;
  char *s = malloc(n), *r = malloc(n);
  if (!all || !s || !r) {
    fprintf(stderr, "rank %d: out of memory\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  gethostname(host, sizeof host);
  MPI_Allgather(host, 64, MPI_CHAR, all, 64, MPI_CHAR, dup);
  memset(s, rank, n);
  for (int it = 0; it < 20; it++) {
    MPI_Request q[2];
    int to = (rank + 1) % size, from = (rank + size - 1) % size;
    MPI_Irecv(r, (int)n, MPI_CHAR, from, it, dup, &q[0]);
    MPI_Isend(s, (int)n, MPI_CHAR, to, it, dup, &q[1]);
    int done = 0;
    MPI_Status sts[2];
    const double deadline = MPI_Wtime() + 30.0; /* a 1 MiB exchange on loopback takes milliseconds */
    while (!done) {
      MPI_Testall(2, q, &done, sts);
      if (!done && MPI_Wtime() > deadline) {
        fprintf(stderr, "rank %d: exchange %d not done within 30 s\n", rank, it);
        MPI_Abort(MPI_COMM_WORLD, 3);
      }
      if (!done) nanosleep(&(struct timespec){0, 100000}, NULL);
    }
    int x = rank, y = 0;
    MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, dup);
  }
  MPI_Barrier(shared);
  MPI_Comm_free(&shared);
  MPI_Comm_free(&dup);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("plain: %d ranks done\n", size);
  free(s); free(r); free(all);
  MPI_Finalize();
  return 0;
}
