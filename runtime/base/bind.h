/* Binding acx's own threads and the executor process to a cpuset list string ("0-15,32-47", the
 * hwloc list syntax acx/topo.h produces): the actor workers and timer, a device's reply poller and
 * inline executor thread, and the acx-executor process. Threads are created already bound (the
 * kernel applies the mask before they run a line), so a refused set is an error at creation. */
#ifndef ACXI_BIND_H
#define ACXI_BIND_H

#ifndef _GNU_SOURCE
#error "runtime/base/bind.h needs _GNU_SOURCE (cpu_set_t) defined before the first system header"
#endif
#include <pthread.h>
#include <sched.h>

#include "acx/status.h"
#include "acx/topo.h"

typedef struct acxi_cpuset {
  cpu_set_t *set; /* NULL: no binding */
  size_t setsize; /* bytes of set (CPU_ALLOC_SIZE) */
  char list[ACX_TOPO_CPUSET_STRLEN]; /* normalised list for logs and command lines; "" unbound */
} acxi_cpuset_t;

#define ACXI_CPUSET_NONE {NULL, 0, ""}

/* Parses a list string into *cs. NULL gives the unbound set. ACX_ERR_INVALID_ARG for a malformed,
 * empty or infinite ("0-") list, not logged: the caller names its argument. ACX_ERR_NO_MEMORY.
 * Any thread. Release with acxi_cpuset_fini. */
acx_status_t acxi_cpuset_parse(const char *list, acxi_cpuset_t *cs);
void acxi_cpuset_fini(acxi_cpuset_t *cs);
/* Deep copy (dst must not hold a set). ACX_ERR_NO_MEMORY. */
acx_status_t acxi_cpuset_copy(acxi_cpuset_t *dst, const acxi_cpuset_t *src);

/* pthread_create of a thread bound to cs from its first instruction (cs NULL or unbound: it
 * inherits the creator's mask, as usual). Returns pthread_create's error number: EINVAL when cs
 * holds no CPU this process may run on (outside its cgroup, offline). */
int acxi_thread_create(pthread_t *thread, const acxi_cpuset_t *cs, void *(*fn)(void *), void *arg);
/* Binds an existing thread (pthread_setaffinity_np); 0 or the error number. Unbound cs: 0. */
int acxi_thread_bind(pthread_t thread, const acxi_cpuset_t *cs);

/* The affinity of thread (a list string) into buf; "?" when it cannot be read. Returns buf. */
const char *acxi_thread_cpuset_str(pthread_t thread, char *buf, size_t len);
#endif
