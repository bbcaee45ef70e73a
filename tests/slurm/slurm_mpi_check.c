/* Launched by slurm_test.sh through `srun -n N` (or `-N nodes`): proves that Slurm's PMIx (or
 * PMI2) plugin wired up the MPI world, i.e. MPI's rank and size are Slurm's task id and task
 * count, that the ranks can talk (an all-reduce) and use libacx, and that acx's world sees Slurm's
 * nodes: its node index and local rank are Slurm's (block distribution), one node per host name. */
#define _GNU_SOURCE /* dladdr, REG_RIP */
#include <dlfcn.h>
#include <execinfo.h>
#include <mpi.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

#include "acx/config.h"
#include "acx/version.h"
#include "acx/world.h"
#include "acx_test.h"
#include "acx_test_nodes.h"

static int rank = -1, size = -1;

/* A crash names its site, so that slurm_test.sh can tell a crash in the MPI library's wire-up from
 * one in acx or this program (once in ~25 CI runs a rank died in a call through a null pointer
 * with nothing on the stack for Open MPI's own handler to print). For a jump to address 0 the
 * site is the caller: the return address on top of the stack. Runs in a dying process, so it
 * uses what works there in practice (snprintf without floats, dladdr, backtrace). */
static void crash_line(const char *what, void *addr) {
  char line[640];
  Dl_info dl;
  int n;
  if (addr && dladdr(addr, &dl) && dl.dli_fname)
    n = snprintf(line, sizeof line, "slurm_mpi_check: crash %s: %p in %s (%s+%#lx)\n", what, addr, dl.dli_fname,
                 dl.dli_sname ? dl.dli_sname : "?",
                 (unsigned long)((uintptr_t)addr - (uintptr_t)(dl.dli_sname ? dl.dli_saddr : dl.dli_fbase)));
  else
    n = snprintf(line, sizeof line, "slurm_mpi_check: crash %s: %p (in no loaded object)\n", what, addr);
  if (n > 0) (void)!write(STDERR_FILENO, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

static void on_crash(int sig, siginfo_t *si, void *context) {
  char head[160];
  void *pc = NULL, *caller = NULL;
#if defined(__x86_64__)
  const ucontext_t *uc = context;
  pc = (void *)uc->uc_mcontext.gregs[REG_RIP];
  if (!pc || !dladdr(pc, &(Dl_info){0})) caller = *(void **)uc->uc_mcontext.gregs[REG_RSP];
#elif defined(__aarch64__)
  const ucontext_t *uc = context;
  pc = (void *)uc->uc_mcontext.pc;
  caller = (void *)uc->uc_mcontext.regs[30];
#else
  (void)context;
#endif
  int n = snprintf(head, sizeof head, "slurm_mpi_check: crash: signal %d (address %p), rank %d, pid %d\n", sig,
                   si->si_addr, rank, (int)getpid());
  if (n > 0) (void)!write(STDERR_FILENO, head, (size_t)n);
  crash_line("pc", pc);
  if (caller) crash_line("caller", caller);
  void *frames[48];
  backtrace_symbols_fd(frames, backtrace(frames, 48), STDERR_FILENO);
  signal(sig, SIG_DFL);
  raise(sig);
}

static void catch_crashes(void) {
  /* Installed before MPI_Init: Open MPI leaves a handler it finds in place (opal_signal). */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_crash;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  static const int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaction(sigs[i], &sa, NULL);
}

static int env_int(const char *name) {
  const char *v = getenv(name);
  return v ? atoi(v) : -1;
}

static void test_world_matches_slurm(void) {
  CU_ASSERT_PTR_NOT_NULL_FATAL(getenv("SLURM_JOB_ID"));
  CU_ASSERT_EQUAL(rank, env_int("SLURM_PROCID"));
  CU_ASSERT_EQUAL(size, env_int("SLURM_NTASKS"));
  CU_ASSERT(size >= 2);
}

static void test_allreduce(void) {
  long mine = rank + 1, sum = 0;
  CU_ASSERT_EQUAL_FATAL(MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  CU_ASSERT_EQUAL(sum, (long)size * (size + 1) / 2);
}

static void test_acx_in_rank(void) {
  int code = 0;
  acx_log_set_rank(rank);
  CU_ASSERT_STRING_EQUAL(acx_version(&code), ACX_VERSION_STRING);
  CU_ASSERT_EQUAL(code, ACX_VERSION);
  /* Every rank must see the same library: compare version codes across the world. */
  int min = 0, max = 0;
  MPI_Allreduce(&code, &min, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&code, &max, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  CU_ASSERT_EQUAL(min, max);
}

static void test_nodes_match_slurm(void) {
  acx_world_t *w = NULL;
  ACX_ASSERT_STATUS(acx_world_init(MPI_COMM_WORLD, NULL, &w), ACX_OK);
  int nodes = acx_test_check_nodes(w), node = -1, local = -1;
  ACX_ASSERT_STATUS(acx_world_node(w, &node, NULL), ACX_OK);
  ACX_ASSERT_STATUS(acx_world_local_rank(w, &local), ACX_OK);
  CU_ASSERT_EQUAL(nodes, env_int("SLURM_NNODES"));
  CU_ASSERT_EQUAL(node, env_int("SLURM_NODEID"));
  CU_ASSERT_EQUAL(local, env_int("SLURM_LOCALID"));
  if (rank == 0) printf("slurm_mpi_check: %d nodes (acx_world_node agrees with SLURM_NODEID)\n", nodes);
  ACX_ASSERT_STATUS(acx_world_finalize(w), ACX_OK);
}

int main(int argc, char **argv) {
  if (!getenv("SLURM_JOB_ID")) acx_test_skip("not launched by srun (slurm_test.sh starts it)");
  catch_crashes();
  int provided = 0;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    fprintf(stderr, "slurm_mpi_check: MPI_Init_thread failed\n");
    return 1;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  static const acx_test_case_t cases[] = {ACX_TEST(test_world_matches_slurm), ACX_TEST(test_allreduce),
                                          ACX_TEST(test_acx_in_rank), ACX_TEST(test_nodes_match_slurm),
                                          ACX_TEST_END};
  int rc = acx_test_run("slurm_mpi", cases, NULL, NULL);
  /* One rank's failure fails the step: agree on the result before leaving. */
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  if (rank == 0) printf("slurm_mpi_check: %d ranks, %s\n", size, worst ? "FAILED" : "ok");
  return worst ? 1 : 0;
}
