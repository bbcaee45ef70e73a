/* Node-layout checks for tests that run under MPI, true on one machine, on a cluster and on the
 * simulated cluster of scripts/sim-cluster/run.sh: ranks share a node index exactly when they
 * share a host name, nodes are numbered by their lowest rank, local ranks are 0..local_size-1 in
 * rank order, and (under run.sh, which sets SIM_CLUSTER_*) the layout is the one launched.
 * Header-only: the test support library is built without MPI too. */
#ifndef ACX_TEST_NODES_H
#define ACX_TEST_NODES_H
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acx/world.h"
#include "acx_test.h"

typedef struct acx_test_where {
  int node, nodes, local_rank, local_size;
  char host[64];
} acx_test_where_t;

/* The value of an integer environment variable, or -1 when it is unset. */
static inline int acx_test_env_int(const char *name) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : -1;
}

/* Nodes of the simulated cluster this process runs in (SIM_CLUSTER_NODES), 0 outside one. */
static inline int acx_test_sim_nodes(void) {
  int n = acx_test_env_int("SIM_CLUSTER_NODES");
  return n > 0 ? n : 0;
}

/* Fills all[r] for every rank r of the world (collective). */
static inline void acx_test_where_all(acx_world_t *w, acx_test_where_t *all) {
  acx_test_where_t me;
  memset(&me, 0, sizeof me);
  ACX_ASSERT_STATUS(acx_world_node(w, &me.node, &me.nodes), ACX_OK);
  ACX_ASSERT_STATUS(acx_world_local_rank(w, &me.local_rank), ACX_OK);
  ACX_ASSERT_STATUS(acx_world_local_size(w, &me.local_size), ACX_OK);
  gethostname(me.host, sizeof me.host - 1);
  MPI_Comm c;
  ACX_ASSERT_STATUS(acx_world_comm(w, &c), ACX_OK);
  CU_ASSERT_EQUAL(MPI_Allgather(&me, sizeof me, MPI_BYTE, all, sizeof me, MPI_BYTE, c), MPI_SUCCESS);
}

/* Checks the world's node layout against the host names and the launcher; returns the node count.
 * Collective over the world. */
static inline int acx_test_check_nodes(acx_world_t *w) {
  int rank = -1, size = 0;
  ACX_ASSERT_STATUS(acx_world_rank(w, &rank), ACX_OK);
  ACX_ASSERT_STATUS(acx_world_size(w, &size), ACX_OK);
  acx_test_where_t *all = calloc((size_t)size, sizeof *all);
  CU_ASSERT_PTR_NOT_NULL_FATAL(all);
  acx_test_where_all(w, all);
  const acx_test_where_t *me = &all[rank];
  int next_node = 0;
  for (int r = 0; r < size; r++) {
    CU_ASSERT_EQUAL(all[r].nodes, me->nodes);
    CU_ASSERT(all[r].node >= 0 && all[r].node < me->nodes);
    /* One node per host name, both ways. */
    for (int q = 0; q < r; q++)
      CU_ASSERT_EQUAL(strcmp(all[q].host, all[r].host) == 0, all[q].node == all[r].node);
    /* Numbered by lowest rank; local ranks count up in rank order. */
    int before = 0, first = 1;
    for (int q = 0; q < r; q++)
      if (all[q].node == all[r].node) before++, first = 0;
    if (first) CU_ASSERT_EQUAL(all[r].node, next_node++);
    CU_ASSERT_EQUAL(all[r].local_rank, before);
  }
  CU_ASSERT_EQUAL(next_node, me->nodes);
  int on_my_node = 0;
  for (int r = 0; r < size; r++) on_my_node += all[r].node == me->node;
  CU_ASSERT_EQUAL(me->local_size, on_my_node);
  /* The launcher's own view of this rank, when it says. */
  int launcher_local = acx_test_env_int("OMPI_COMM_WORLD_LOCAL_RANK");
  if (launcher_local < 0) launcher_local = acx_test_env_int("SLURM_LOCALID");
  if (launcher_local >= 0) CU_ASSERT_EQUAL(me->local_rank, launcher_local);
  /* The simulated cluster: the layout run.sh launched, this rank on the node it was started on. */
  int sim = acx_test_sim_nodes();
  if (sim > 0) {
    CU_ASSERT_EQUAL(me->nodes, sim);
    CU_ASSERT_EQUAL(me->local_size, acx_test_env_int("SIM_CLUSTER_RANKS_PER_NODE"));
    CU_ASSERT_EQUAL(me->node, acx_test_env_int("SIM_CLUSTER_NODE_INDEX"));
    const char *name = getenv("SIM_CLUSTER_NODE");
    CU_ASSERT(name && strcmp(name, me->host) == 0);
  }
  int nodes = me->nodes;
  free(all);
  return nodes;
}
#endif
