/* The rank side's table of requests waiting for their reply: req_id = (sequence << pend_bits) |
 * slot. Submitters add, the poller (or the inline executor) takes, every loss fails them all. */
#include <stdlib.h>

#include "runtime/base/log.h"
#include "runtime/device/device_impl.h"

acx_status_t acxi_dev_pend_init(acx_device_t *dev) {
  uint32_t bits = 1;
  while ((1u << bits) < 4 * dev->slots && bits < 20) bits++;
  dev->pend_bits = bits;
  dev->pend_cap = 1u << bits;
  dev->pend = calloc(dev->pend_cap, sizeof *dev->pend);
  dev->pend_free = malloc(dev->pend_cap * sizeof *dev->pend_free);
  if (!dev->pend || !dev->pend_free) return ACX_ERR_NO_MEMORY;
  for (uint32_t i = 0; i < dev->pend_cap; i++) dev->pend_free[i] = dev->pend_cap - 1 - i;
  dev->n_pend_free = dev->pend_cap;
  return ACX_OK;
}

/* Takes a slot for `future` (the table holds its own reference). Waits for a free slot until
 * the deadline, giving up early when the device leaves `ok_state` conditions. */
acx_status_t acxi_dev_pend_add(acx_device_t *dev, acx_future_t *future, unsigned flags, int64_t deadline,
                               uint64_t *req_id) {
  pthread_mutex_lock(&dev->pend_lock);
  while (dev->n_pend_free == 0) {
    int s = acxi_dev_load_state(dev);
    if (!acxi_dev_state_accepts(s, flags)) {
      pthread_mutex_unlock(&dev->pend_lock);
      return acxi_dev_refusal_status(s);
    }
    if (acxi_now_ns() >= deadline) {
      pthread_mutex_unlock(&dev->pend_lock);
      ACX_WARN(DEVICE, "%u requests already outstanding on the device: no slot before the deadline", dev->pend_cap);
      return ACX_ERR_QUEUE_FULL;
    }
    int64_t slice = acxi_now_ns() + 10000000;
    acxi_dev_cond_wait_until(&dev->pend_cond, &dev->pend_lock, slice < deadline ? slice : deadline);
  }
  uint32_t idx = dev->pend_free[--dev->n_pend_free];
  uint64_t id = (++dev->req_seq << dev->pend_bits) | idx;
  dev->pend[idx].req_id = id;
  dev->pend[idx].future = future;
  dev->pend[idx].deadline = deadline;
  atomic_fetch_add_explicit(&dev->n_outstanding, 1, memory_order_relaxed); /* a statistic */
  /* relaxed: a hint that restarts the poller's busy-poll window (acxi_dev_poller_main). */
  atomic_store_explicit(&dev->submitted, dev->req_seq, memory_order_relaxed);
  pthread_mutex_unlock(&dev->pend_lock);
  *req_id = id;
  return ACX_OK;
}

/* Removes req_id; returns its future (the table's reference passes to the caller) or NULL. */
acx_future_t *acxi_dev_pend_take(acx_device_t *dev, uint64_t req_id) {
  uint32_t idx = (uint32_t)(req_id & (dev->pend_cap - 1));
  acx_future_t *f = NULL;
  pthread_mutex_lock(&dev->pend_lock);
  if (req_id && dev->pend[idx].req_id == req_id) {
    f = dev->pend[idx].future;
    dev->pend[idx].req_id = 0;
    dev->pend[idx].future = NULL;
    dev->pend_free[dev->n_pend_free++] = idx;
    atomic_fetch_sub_explicit(&dev->n_outstanding, 1, memory_order_relaxed);
    pthread_cond_signal(&dev->pend_cond);
  }
  pthread_mutex_unlock(&dev->pend_lock);
  return f;
}

uint64_t acxi_dev_pend_outstanding(acx_device_t *dev) {
  /* relaxed: a hint for the poller's busy-poll decision and a statistic. */
  return atomic_load_explicit(&dev->n_outstanding, memory_order_relaxed);
}

/* Fails every outstanding request with `status`; returns how many. */
uint64_t acxi_dev_pend_fail_all(acx_device_t *dev, acx_status_t status) {
  uint64_t n = 0;
  for (;;) {
    acx_future_t *batch[64];
    int k = 0;
    pthread_mutex_lock(&dev->pend_lock);
    for (uint32_t i = 0; i < dev->pend_cap && k < 64; i++) {
      if (!dev->pend[i].req_id) continue;
      batch[k++] = dev->pend[i].future;
      dev->pend[i].req_id = 0;
      dev->pend[i].future = NULL;
      dev->pend_free[dev->n_pend_free++] = i;
      atomic_fetch_sub_explicit(&dev->n_outstanding, 1, memory_order_relaxed);
    }
    pthread_cond_broadcast(&dev->pend_cond);
    pthread_mutex_unlock(&dev->pend_lock);
    if (k == 0) return n;
    for (int i = 0; i < k; i++) {
      acx_future_complete(batch[i], status, NULL, 0);
      acx_future_release(batch[i]);
    }
    n += (uint64_t)k;
  }
}

/* Records that every request outstanding with generation `gen` has been failed. */
void acxi_dev_mark_failed(acx_device_t *dev, uint64_t gen) {
  /* release: the failed futures are complete before acxi_device_restart's acquire load sees it. */
  uint64_t cur = atomic_load_explicit(&dev->failed_gen, memory_order_relaxed);
  while (cur < gen && !atomic_compare_exchange_weak_explicit(&dev->failed_gen, &cur, gen, memory_order_release,
                                                             memory_order_relaxed)) {
  }
}
