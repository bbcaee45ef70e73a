/* Registry of engines (one per device kind) and extensions (op ranges >= ACXI_OP_EXT_BASE).
 * kernels/ and collectives/ register from constructors, before main; lookups happen later from
 * any thread, so the tables are written under a lock and read through an acquire count. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "kernels/exec/engine.h"
#include "runtime/base/log.h"

#define MAX_ENGINES 8

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static const acxi_engine_ops_t *engines[MAX_ENGINES];
static _Atomic int n_engines;
static const acxi_ext_ops_t *exts[ACXI_EXT_MAX];
static _Atomic int n_exts;

void acxi_engine_register(const acxi_engine_ops_t *ops) {
  if (!ops || !ops->kind || !ops->create) {
    ACX_WARN(EXEC, "acxi_engine_register: incomplete engine ops ignored");
    return;
  }
  pthread_mutex_lock(&reg_lock);
  int n = atomic_load_explicit(&n_engines, memory_order_relaxed);
  int dup = 0;
  for (int i = 0; i < n; i++) dup |= strcmp(engines[i]->kind, ops->kind) == 0;
  if (dup) {
    ACX_WARN(EXEC, "engine kind '%s' registered twice; keeping the first", ops->kind);
  } else if (n == MAX_ENGINES) {
    ACX_WARN(EXEC, "engine table full; '%s' ignored", ops->kind);
  } else {
    engines[n] = ops;
    /* release: the slot is written before readers can count it. */
    atomic_store_explicit(&n_engines, n + 1, memory_order_release);
  }
  pthread_mutex_unlock(&reg_lock);
}

const acxi_engine_ops_t *acxi_engine_find(const char *kind) {
  if (!kind) return NULL;
  int n = atomic_load_explicit(&n_engines, memory_order_acquire); /* pairs with the release above */
  for (int i = 0; i < n; i++)
    if (strcmp(engines[i]->kind, kind) == 0) return engines[i];
  return NULL;
}

void acxi_ext_register(const acxi_ext_ops_t *ops) {
  if (!ops || !ops->name || !ops->submit || ops->op_first < ACXI_OP_EXT_BASE || ops->op_last < ops->op_first ||
      ops->slot < 0 || ops->slot >= ACXI_EXT_MAX) {
    ACX_WARN(EXEC, "acxi_ext_register: extension '%s' has invalid ops, op range or slot; ignored",
             ops && ops->name ? ops->name : "(null)");
    return;
  }
  pthread_mutex_lock(&reg_lock);
  int n = atomic_load_explicit(&n_exts, memory_order_relaxed);
  const char *clash = NULL;
  for (int i = 0; i < n; i++)
    if (exts[i]->slot == ops->slot || !(ops->op_last < exts[i]->op_first || ops->op_first > exts[i]->op_last))
      clash = exts[i]->name;
  if (clash) {
    ACX_WARN(EXEC, "extension '%s' clashes with '%s' (op range or slot); ignored", ops->name, clash);
  } else if (n == ACXI_EXT_MAX) {
    ACX_WARN(EXEC, "extension table full; '%s' ignored", ops->name);
  } else {
    exts[n] = ops;
    atomic_store_explicit(&n_exts, n + 1, memory_order_release); /* as for engines */
  }
  pthread_mutex_unlock(&reg_lock);
}

const acxi_ext_ops_t *acxi_ext_find(uint32_t op) {
  int n = atomic_load_explicit(&n_exts, memory_order_acquire);
  for (int i = 0; i < n; i++)
    if (op >= exts[i]->op_first && op <= exts[i]->op_last) return exts[i];
  return NULL;
}

int acxi_ext_count(void) { return atomic_load_explicit(&n_exts, memory_order_acquire); }

const acxi_ext_ops_t *acxi_ext_at(int i) {
  return i >= 0 && i < acxi_ext_count() ? exts[i] : NULL;
}
