/* Internal interface of collectives/ for tools and tests. */
#ifndef ACXC_COLLECTIVES_H
#define ACXC_COLLECTIVES_H
int acxc_have_mpi(void);
int acxc_have_nccl(void);
#endif
