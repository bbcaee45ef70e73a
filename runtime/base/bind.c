/* Cpuset list strings to kernel CPU masks, and threads created already bound to them: the one
 * place where acx's workers, pollers and executor threads get their cores (runtime/base/bind.h). */
#define _GNU_SOURCE
#include "runtime/base/bind.h"

#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

acx_status_t acxi_cpuset_parse(const char *list, acxi_cpuset_t *cs) {
  *cs = (acxi_cpuset_t)ACXI_CPUSET_NONE;
  if (!list) return ACX_OK;
  hwloc_bitmap_t b = hwloc_bitmap_alloc();
  if (!b) return ACX_ERR_NO_MEMORY;
  acx_status_t res = ACX_ERR_INVALID_ARG;
  /* hwloc accepts "" as the empty set and "0-" as infinite: neither binds anywhere useful. */
  if (hwloc_bitmap_list_sscanf(b, list) != 0 || hwloc_bitmap_iszero(b) || hwloc_bitmap_last(b) < 0 ||
      hwloc_bitmap_list_snprintf(cs->list, sizeof cs->list, b) >= (int)sizeof cs->list)
    goto err_free_bitmap;
  int ncpu = hwloc_bitmap_last(b) + 1;
  res = ACX_ERR_NO_MEMORY;
  cs->set = CPU_ALLOC((size_t)ncpu);
  if (!cs->set) goto err_free_bitmap;
  cs->setsize = CPU_ALLOC_SIZE((size_t)ncpu);
  CPU_ZERO_S(cs->setsize, cs->set);
  int i;
  hwloc_bitmap_foreach_begin(i, b) CPU_SET_S((size_t)i, cs->setsize, cs->set);
  hwloc_bitmap_foreach_end();
  hwloc_bitmap_free(b);
  return ACX_OK;

err_free_bitmap:
  hwloc_bitmap_free(b);
  cs->list[0] = '\0';
  return res;
}

void acxi_cpuset_fini(acxi_cpuset_t *cs) {
  if (cs->set) CPU_FREE(cs->set);
  *cs = (acxi_cpuset_t)ACXI_CPUSET_NONE;
}

acx_status_t acxi_cpuset_copy(acxi_cpuset_t *dst, const acxi_cpuset_t *src) {
  *dst = (acxi_cpuset_t)ACXI_CPUSET_NONE;
  if (!src->set) return ACX_OK;
  /* CPU_ALLOC rounds up to whole words: setsize * 8 CPUs fit the same allocation size */
  dst->set = CPU_ALLOC(src->setsize * 8);
  if (!dst->set) return ACX_ERR_NO_MEMORY;
  memcpy(dst->set, src->set, src->setsize);
  dst->setsize = src->setsize;
  memcpy(dst->list, src->list, sizeof dst->list);
  return ACX_OK;
}

int acxi_thread_create(pthread_t *thread, const acxi_cpuset_t *cs, void *(*fn)(void *), void *arg) {
  if (!cs || !cs->set) return pthread_create(thread, NULL, fn, arg);
  pthread_attr_t attr;
  int rc = pthread_attr_init(&attr);
  if (rc) return rc;
  rc = pthread_attr_setaffinity_np(&attr, cs->setsize, cs->set);
  if (!rc) rc = pthread_create(thread, &attr, fn, arg);
  pthread_attr_destroy(&attr);
  return rc;
}

int acxi_thread_bind(pthread_t thread, const acxi_cpuset_t *cs) {
  if (!cs || !cs->set) return 0;
  return pthread_setaffinity_np(thread, cs->setsize, cs->set);
}

const char *acxi_thread_cpuset_str(pthread_t thread, char *buf, size_t len) {
  if (!buf || !len) return buf;
  snprintf(buf, len, "?");
  cpu_set_t mask;
  if (pthread_getaffinity_np(thread, sizeof mask, &mask) != 0) return buf;
  size_t off = 0;
  buf[0] = '\0';
  for (int c = 0; c < CPU_SETSIZE && off < len; c++) {
    if (!CPU_ISSET(c, &mask)) continue;
    int e = c;
    while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, &mask)) e++;
    int n = e > c ? snprintf(buf + off, len - off, "%s%d-%d", off ? "," : "", c, e)
                  : snprintf(buf + off, len - off, "%s%d", off ? "," : "", c);
    if (n < 0) break;
    off += (size_t)n;
    c = e;
  }
  return buf;
}
