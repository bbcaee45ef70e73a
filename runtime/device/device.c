/* Devices, rank side: open (configuration resolved from the config and ACX_* parameters) and
 * close, the public getters, statistics and device-wide commands. The pieces: pend.c (request
 * table), submit.c (submission), poller.c (reply poller, liveness), incarnation.c (executor
 * incarnations), transport.c (process and inline executors), standby.c (hot standby), device_actor.c
 * (the DeviceActor, recovery). */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "acx_build_config.h"
#include "runtime/base/bind.h"
#include "runtime/base/clock.h"
#include "runtime/base/param.h"
#include "runtime/device/buffer.h"
#include "runtime/base/log.h"
#include "runtime/device/device_impl.h"

static _Atomic int device_counter;

static const char *state_name(int s) {
  static const char *names[] = {"starting", "running", "recovering", "unavailable", "fatal", "closing", "closed"};
  return s >= 0 && s <= ACXI_DEV_CLOSED ? names[s] : "?";
}

static void cond_init_monotonic(pthread_cond_t *c) {
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(c, &a);
  pthread_condattr_destroy(&a);
}

/* ------------------------------------------------------------------------------------------ */
/* open / close                                                                               */

void acxi_device_hold(acx_device_t *dev) { atomic_fetch_add_explicit(&dev->refs, 1, memory_order_relaxed); }

static void device_free(acx_device_t *dev) {
  pthread_mutex_lock(&dev->watch_lock);
  for (int i = 0; i < dev->n_watchers; i++) acx_ref_release(dev->watchers[i]);
  pthread_mutex_unlock(&dev->watch_lock);
  free(dev->watchers);
  free(dev->pend);
  free(dev->pend_free);
  free(dev->restart_times);
  free(dev->free_events);
  if (dev->cpuset_mask) {
    acxi_cpuset_fini(dev->cpuset_mask);
    free(dev->cpuset_mask);
  }
  pthread_mutex_destroy(&dev->pend_lock);
  pthread_cond_destroy(&dev->pend_cond);
  pthread_mutex_destroy(&dev->poll_lock);
  pthread_cond_destroy(&dev->poll_cond);
  pthread_mutex_destroy(&dev->sock_lock);
  pthread_mutex_destroy(&dev->host_lock);
  pthread_mutex_destroy(&dev->staging_lock);
  pthread_mutex_destroy(&dev->watch_lock);
  pthread_mutex_destroy(&dev->event_lock);
  pthread_mutex_destroy(&dev->restart_lock);
  free(dev);
}

void acxi_device_release(acx_device_t *dev) {
  /* acq_rel: the last releaser sees every other holder's writes before it frees. */
  if (dev && atomic_fetch_sub_explicit(&dev->refs, 1, memory_order_acq_rel) == 1) device_free(dev);
}

/* Part of a close's time kept for killing and reaping what did not leave on its own (a SIGKILLed
 * host process is reaped in a few ms): min(timeout / 4, 250 ms). */
static int64_t close_reserve(int64_t timeout_ns) {
  int64_t r = timeout_ns / 4;
  return r < 250000000 ? r : 250000000;
}

/* Shuts the executor down and stops the poller, by `deadline` (the executor gets until
 * deadline - close_reserve to leave on its own). Idempotent; serialised by the DeviceActor (or
 * run by the closer when the actor is gone). */
void acxi_dev_close_device(acx_device_t *dev, int64_t deadline) {
  int s;
  /* The poller may move RUNNING to RECOVERING/FATAL concurrently: retry until our move sticks,
   * remembering the state we moved away from. */
  do {
    s = acxi_dev_load_state(dev);
    if (s == ACXI_DEV_CLOSED || s == ACXI_DEV_CLOSING) return;
  } while (!acxi_dev_cas_state(dev, s, ACXI_DEV_CLOSING));
  /* Bounds the supervision's own waits from here on (acx_device_close set it already). */
  int64_t by = atomic_load_explicit(&dev->close_by, memory_order_relaxed);
  if (!by || deadline < by) atomic_store_explicit(&dev->close_by, deadline > 0 ? deadline : 1, memory_order_relaxed);
  int gone = acxi_dev_wait_submitters_gone(dev, "the control block stays mapped") == ACX_OK;
  acxi_dev_standby_ask_leave(dev); /* it winds down while the active executor finishes */
  int64_t left = deadline - acxi_now_ns();
  int64_t leave_by = deadline - close_reserve(left > 0 ? left : 0);
  if (s == ACXI_DEV_RUNNING && dev->cv.ctrl && leave_by > acxi_now_ns()) {
    acxi_cmd_t cmd = {.op = ACXI_OP_SHUTDOWN, .stream = ACXI_STREAM_ALL};
    acx_status_t st =
        acxi_device_call(dev, &cmd, NULL, 0, ACXI_SUBMIT_INTERNAL, -1, leave_by - acxi_now_ns(), NULL);
    if (st != ACX_OK) ACX_WARN(DEVICE, "SHUTDOWN of the %s executor: %s; killing it", dev->kind, acx_status_name(st));
    if (st != ACX_OK) leave_by = 0;
  }
  atomic_store(&dev->state, ACXI_DEV_CLOSED);
  int64_t grace = leave_by - acxi_now_ns();
  acxi_dev_reap_executor(dev, grace > 0 ? grace : 0);
  grace = leave_by - acxi_now_ns(); /* the standby was asked to leave at the start */
  acxi_dev_standby_discard(dev, grace > 0 ? grace : 0, "the device closes");
  acxi_dev_pend_fail_all(dev, ACX_ERR_CANCELLED);
  acxi_dev_ctrl_swap(dev, NULL, gone);
  acxi_dev_stop_poller(dev, deadline);
  acxi_device_staging_destroy(dev);
}

static int gpu_visible(void) {
  const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
  if (cvd && (!*cvd || !strcmp(cvd, "-1") || !strcasecmp(cvd, "none"))) return 0;
  return access("/dev/nvidiactl", F_OK) == 0 && access("/dev/nvidia0", F_OK) == 0;
}

/* cfg->cpuset, else ACX_CPUSET; both empty: unbound. Whether the kernel accepts the set is known
 * when the poller is created bound to it (acx_device_open). */
static acx_status_t resolve_cpuset(acx_device_t *dev, const char *list) {
  const char *what = "argument 'cfg->cpuset'";
  acx_status_t bad = ACX_ERR_INVALID_ARG;
  if (!list) {
    list = acxi_param_str("ACX_CPUSET");
    if (!list || !*list) return ACX_OK;
    what = "ACX_CPUSET";
    bad = ACX_ERR_BAD_PARAM;
  }
  acxi_cpuset_t cs = ACXI_CPUSET_NONE;
  acx_status_t st = acxi_cpuset_parse(list, &cs);
  if (st == ACX_ERR_INVALID_ARG) {
    ACX_WARN(DEVICE, "acx_device_open: %s = '%s' is not a non-empty cpuset list (e.g. \"0-15,32-47\")", what, list);
    return bad;
  }
  if (st != ACX_OK) return st;
  dev->cpuset_mask = malloc(sizeof *dev->cpuset_mask);
  if (!dev->cpuset_mask) {
    acxi_cpuset_fini(&cs);
    return ACX_ERR_NO_MEMORY;
  }
  *dev->cpuset_mask = cs;
  snprintf(dev->cpuset, sizeof dev->cpuset, "%s", cs.list);
  return ACX_OK;
}

static acx_status_t resolve_config(acx_device_t *dev, const acx_device_config_t *in) {
  acx_device_config_t cfg = ACX_DEVICE_CONFIG_INIT;
  if (in) {
    ACX_CHECK_ARG(in->size >= offsetof(acx_device_config_t, transport) && in->size <= sizeof cfg,
                  "acx_device_open: cfg->size=%zu; initialise the config with ACX_DEVICE_CONFIG_INIT", in->size);
    memcpy(&cfg, in, in->size);
  }
  switch (cfg.kind) {
  case ACX_DEVICE_KIND_HOST:
    dev->kind_id = ACXI_KIND_HOST;
    break;
  case ACX_DEVICE_KIND_CUDA:
    dev->kind_id = ACXI_KIND_CUDA;
    break;
  case ACX_DEVICE_KIND_DEFAULT: {
    const char *p = acxi_param_str("ACX_DEVICE_KIND");
    if (!strcmp(p, "auto")) {
      dev->kind_id = ACX_HAVE_CUDA && gpu_visible() ? ACXI_KIND_CUDA : ACXI_KIND_HOST;
    } else if (acxi_kind_parse(p, &dev->kind_id) != 0) {
      ACX_WARN(DEVICE, "ACX_DEVICE_KIND='%s': expected auto, cuda or host", p);
      return ACX_ERR_BAD_PARAM;
    }
    break;
  }
  default:
    ACX_WARN(DEVICE, "acx_device_open: cfg->kind=%d is not an acx_device_kind_t", (int)cfg.kind);
    return ACX_ERR_INVALID_ARG;
  }
  if (dev->kind_id == ACXI_KIND_CUDA && !ACX_HAVE_CUDA) {
    ACX_WARN(DEVICE, "device kind 'cuda' is not in this build of acx (CUDA off)");
    return ACX_ERR_NO_DEVICE;
  }
  snprintf(dev->kind, sizeof dev->kind, "%s", acxi_kind_name(dev->kind_id));
  switch (cfg.transport) {
  case ACX_TRANSPORT_PROCESS:
    dev->transport = &acxi_dev_transport_process;
    break;
  case ACX_TRANSPORT_INLINE:
    dev->transport = &acxi_dev_transport_inline;
    break;
  case ACX_TRANSPORT_DEFAULT: {
    const char *p = acxi_param_str("ACX_EXECUTOR");
    const acxi_dev_transport_t *const known[] = {&acxi_dev_transport_process, &acxi_dev_transport_inline};
    for (size_t i = 0; i < sizeof known / sizeof known[0] && !dev->transport; i++)
      if (!strcmp(p, known[i]->name)) dev->transport = known[i];
    if (!dev->transport) {
      ACX_WARN(DEVICE, "ACX_EXECUTOR='%s': expected process or inline", p);
      return ACX_ERR_BAD_PARAM;
    }
    break;
  }
  default:
    ACX_WARN(DEVICE, "acx_device_open: cfg->transport=%d is not an acx_transport_t", (int)cfg.transport);
    return ACX_ERR_INVALID_ARG;
  }
  dev->cuda_ordinal = cfg.cuda_ordinal >= 0 ? cfg.cuda_ordinal : (int)acxi_param_int("ACX_DEVICE");
  if (dev->cuda_ordinal < 0) dev->cuda_ordinal = 0;
  if (cfg.pci_bus_id) {
    ACX_CHECK_ARG(strlen(cfg.pci_bus_id) < sizeof dev->pci_bus_id, "acx_device_open: cfg->pci_bus_id '%s' is too long",
                  cfg.pci_bus_id);
    snprintf(dev->pci_bus_id, sizeof dev->pci_bus_id, "%s", cfg.pci_bus_id);
  }
  /* Checked here, before any executor starts: the executor refuses more streams than it has room
   * for, and would only say so once spawned. */
  if (cfg.streams > ACXI_MAX_STREAMS) {
    ACX_WARN(DEVICE, "acx_device_open: argument 'cfg->streams'=%d is not in [1, %d] (the executor's stream limit)",
             cfg.streams, ACXI_MAX_STREAMS);
    return ACX_ERR_INVALID_ARG;
  }
  int64_t streams = cfg.streams > 0 ? cfg.streams : acxi_param_int("ACX_DEVICE_STREAMS");
  if (streams < 1 || streams > ACXI_MAX_STREAMS) {
    ACX_WARN(DEVICE, "acx_device_open: cfg->streams=%d leaves it to ACX_DEVICE_STREAMS=%" PRId64 ", which is not in "
             "[1, %d] (the executor's stream limit)", cfg.streams, streams, ACXI_MAX_STREAMS);
    return ACX_ERR_BAD_PARAM;
  }
  dev->streams = (int)streams;
  dev->max_restarts = cfg.max_restarts >= 0 ? cfg.max_restarts : (int)acxi_param_int("ACX_MAX_RESTARTS");
  if (dev->max_restarts < 0) dev->max_restarts = 0;
  dev->restart_window_ns = cfg.restart_window_ns > 0 ? cfg.restart_window_ns
                                                     : acxi_param_int("ACX_RESTART_WINDOW_MS") * 1000000;
  dev->heartbeat_ns = cfg.heartbeat_ns > 0 ? cfg.heartbeat_ns : acxi_param_int("ACX_HEARTBEAT_MS") * 1000000;
  dev->exec_timeout_ns = acxi_param_int("ACX_EXEC_TIMEOUT_MS") * 1000000;
  dev->spin_ns = acxi_exec_spin_ns(dev->kind);
  int64_t slots = acxi_param_int("ACX_RING_SLOTS");
  if (slots < ACXI_RING_SLOTS_MIN || slots > ACXI_RING_SLOTS_MAX || (slots & (slots - 1))) {
    ACX_WARN(DEVICE, "ACX_RING_SLOTS=%" PRId64 " must be a power of two in [%u, %u]", slots, ACXI_RING_SLOTS_MIN,
             ACXI_RING_SLOTS_MAX);
    return ACX_ERR_BAD_PARAM;
  }
  dev->slots = (uint32_t)slots;
  if (dev->heartbeat_ns < 4000000 || dev->restart_window_ns <= 0 || dev->exec_timeout_ns <= 0 || dev->spin_ns < 0) {
    ACX_WARN(DEVICE, "heartbeat (%" PRId64 " ms, min 4), restart window, ACX_EXEC_TIMEOUT_MS and ACX_EXEC_SPIN_NS must "
             "be positive", dev->heartbeat_ns / 1000000);
    return ACX_ERR_BAD_PARAM;
  }
  int64_t nap = acxi_param_int("ACX_EXEC_NAP_NS");
  if (nap < 0 || nap > ACXI_EXEC_NAP_MAX_NS) {
    ACX_WARN(DEVICE, "ACX_EXEC_NAP_NS=%" PRId64 " is out of 0..%d ns", nap, ACXI_EXEC_NAP_MAX_NS);
    return ACX_ERR_BAD_PARAM;
  }
  int64_t staging = acxi_param_int("ACX_STAGING_BYTES");
  if (staging < 8192) {
    ACX_WARN(DEVICE, "ACX_STAGING_BYTES=%" PRId64 " is below 8192", staging);
    return ACX_ERR_BAD_PARAM;
  }
  dev->staging_bytes = (size_t)staging & ~(size_t)4095;
  const char *fi = acxi_param_str("ACX_FAULT_INJECT");
  uint64_t nth;
  if (strlen(fi) >= sizeof dev->fault_inject) {
    ACX_WARN(DEVICE, "ACX_FAULT_INJECT='%s' is too long", fi);
    return ACX_ERR_BAD_PARAM;
  }
  ACXCHECK(acxi_fault_schedule(fi, 1, &nth));
  snprintf(dev->fault_inject, sizeof dev->fault_inject, "%s", fi);
  const char *comp = acxi_param_str("ACX_COMPLETION");
  if (strcmp(comp, "auto") && strcmp(comp, "event") && strcmp(comp, "hostfn")) {
    ACX_WARN(DEVICE, "ACX_COMPLETION='%s': expected auto, event or hostfn", comp);
    return ACX_ERR_BAD_PARAM;
  }
  snprintf(dev->completion, sizeof dev->completion, "%s", comp);
  int64_t standby = acxi_param_int("ACX_EXECUTOR_STANDBY");
  if (standby != 0 && standby != 1) {
    ACX_WARN(DEVICE, "ACX_EXECUTOR_STANDBY=%" PRId64 ": expected 0 or 1", standby);
    return ACX_ERR_BAD_PARAM;
  }
  /* A standby replaces a lost executor: only one that can be replaced has any. */
  dev->standby_enabled = dev->transport->restartable && standby == 1;
  ACXCHECK(resolve_cpuset(dev, cfg.cpuset));
  return dev->transport->prepare(dev); /* the executable, or the executor library */
}

acx_status_t acx_device_open(acx_system_t *sys, const acx_device_config_t *cfg, acx_device_t **out) {
  ACX_CHECK_NULL(sys);
  ACX_CHECK_NULL_AS(out, "dev");
  *out = NULL;
  acx_status_t res;
  acx_device_t *dev = calloc(1, sizeof *dev);
  if (!dev) return ACX_ERR_NO_MEMORY;
  atomic_init(&dev->refs, 1);
  dev->sys = sys;
  dev->sock = -1;
  dev->shm.fd = -1;
  dev->sb_sock = -1;
  dev->sb_shm.fd = -1;
  atomic_init(&dev->state, ACXI_DEV_STARTING);
  atomic_init(&dev->next_buffer_id, 1);
  atomic_init(&dev->next_region_id, 1);
  dev->next_event_id = 1;
  pthread_mutex_init(&dev->pend_lock, NULL);
  cond_init_monotonic(&dev->pend_cond);
  pthread_mutex_init(&dev->poll_lock, NULL);
  cond_init_monotonic(&dev->poll_cond);
  pthread_mutex_init(&dev->sock_lock, NULL);
  pthread_mutex_init(&dev->host_lock, NULL);
  pthread_mutex_init(&dev->staging_lock, NULL);
  pthread_mutex_init(&dev->watch_lock, NULL);
  pthread_mutex_init(&dev->event_lock, NULL);
  pthread_mutex_init(&dev->restart_lock, NULL);
  atomic_init(&dev->ff_deadline, INT64_MIN);
  ACXCHECKGOTO(resolve_config(dev, cfg), res, err_free_dev);
  dev->restart_times = calloc((size_t)dev->max_restarts + 1, sizeof *dev->restart_times);
  if (!dev->restart_times) {
    res = ACX_ERR_NO_MEMORY;
    goto err_free_dev;
  }
  ACXCHECKGOTO(acxi_dev_pend_init(dev), res, err_free_dev);
  /* The poller is the device's first bound thread: a set the kernel refuses fails the open here,
   * before any executor is spawned with it. */
  acxi_device_hold(dev); /* the poller's own: released as it leaves (acxi_dev_stop_poller may detach it) */
  int rc = acxi_thread_create(&dev->poller, dev->cpuset_mask, acxi_dev_poller_main, dev);
  if (rc) atomic_fetch_sub_explicit(&dev->refs, 1, memory_order_relaxed); /* no thread: not shared yet */
  if (rc == EINVAL && dev->cpuset_mask) {
    ACX_WARN(DEVICE, "acx_device_open: cpuset '%s' (cfg->cpuset or ACX_CPUSET) holds no CPU this process may run "
             "on", dev->cpuset);
    res = ACX_ERR_INVALID_ARG;
    goto err_free_dev;
  }
  if (rc) {
    ACX_WARN(DEVICE, "pthread_create of the reply poller failed: %s", strerror(rc));
    res = ACX_ERR_SYSTEM;
    goto err_free_dev;
  }
  dev->poller_live = 1;

  acx_props_t props;
  acxi_dev_actor_props(dev, &props);
  char name[64];
  const char *nm = cfg && cfg->size > offsetof(acx_device_config_t, name) && cfg->name ? cfg->name : NULL;
  if (!nm) {
    snprintf(name, sizeof name, "device%d", atomic_fetch_add(&device_counter, 1));
    nm = name;
  }
  acx_ref_t parent = cfg && cfg->size > offsetof(acx_device_config_t, supervisor) ? cfg->supervisor : NULL;
  ACXCHECKGOTO(acx_spawn(sys, parent, &props, nm, &dev->actor), res, err_stop_poller);
  acx_future_t *f;
  ACXCHECKGOTO(acx_ask(dev->actor, DEV_MSG_START, NULL, 0, &f), res, err_stop_actor);
  res = acx_future_wait(f, dev->exec_timeout_ns + 10000000000LL, NULL, 0, NULL);
  acx_future_release(f);
  if (res != ACX_OK) goto err_stop_actor;
  char where[ACX_TOPO_CPUSET_STRLEN];
  ACX_INFO(DEVICE, "%s device open: %s transport, %d streams, generation 1, executor %s %d, cpuset %s, poller on %s",
           dev->kind, dev->transport->name, dev->streams, dev->transport->pid_label, (int)dev->transport->pid(dev),
           dev->cpuset[0] ? dev->cpuset : "unbound", acxi_thread_cpuset_str(dev->poller, where, sizeof where));
  *out = dev;
  return ACX_OK;

err_stop_actor:
  /* The actor's post_stop closes whatever was started and drops its device reference. */
  acx_stop(dev->actor);
  acx_ref_release(dev->actor);
  for (int64_t dl = acxi_deadline(dev->exec_timeout_ns);
       acxi_dev_load_state(dev) != ACXI_DEV_CLOSED && acxi_now_ns() < dl;)
    acxi_dev_sleep_ns(1000000);
  acxi_dev_close_device(dev, 0);
  acxi_device_release(dev);
  return res;
err_stop_poller:
  atomic_store_explicit(&dev->state, ACXI_DEV_CLOSED, memory_order_seq_cst);
  acxi_dev_stop_poller(dev, acxi_deadline(POLL_PAUSE_NS));
  acxi_device_release(dev); /* freed here, or by a detached poller as it leaves */
  return res;
err_free_dev:
  device_free(dev);
  return res;
}

acx_status_t acx_device_close(acx_device_t *dev, int64_t timeout_ns) {
  ACX_CHECK_NULL(dev);
  int64_t deadline = acxi_deadline(acxi_device_timeout(dev, timeout_ns));
  /* A restart under way gives up at its next step (it would delay the DeviceActor's close). */
  atomic_store_explicit(&dev->close_requested, 1, memory_order_relaxed);
  atomic_store_explicit(&dev->close_by, deadline, memory_order_relaxed); /* the supervision's waits end by then */
  int s = acxi_dev_load_state(dev);
  if (s == ACXI_DEV_STARTING || s == ACXI_DEV_RECOVERING) acxi_dev_pend_fail_all(dev, ACX_ERR_CANCELLED);
  acx_future_t *f = NULL;
  acx_status_t st = acx_ask(dev->actor, DEV_MSG_CLOSE, &deadline, sizeof deadline, &f);
  if (st == ACX_OK) {
    int64_t left = deadline - acxi_now_ns();
    st = acx_future_wait(f, left > 0 ? left : 0, NULL, 0, NULL);
    acx_future_release(f);
    if (st != ACX_OK)
      ACX_WARN(DEVICE, "acx_device_close: the DeviceActor did not finish closing the %s device within timeout_ns "
               "(%s); it goes on in the background", dev->kind, acx_status_name(st));
  } else {
    /* The DeviceActor is gone (stopped by its supervisor): its post_stop closes the device. */
    while (acxi_dev_load_state(dev) != ACXI_DEV_CLOSED && acxi_now_ns() < deadline) acxi_dev_sleep_ns(1000000);
    if (acxi_dev_load_state(dev) != ACXI_DEV_CLOSED) acxi_dev_close_device(dev, deadline);
    st = acxi_dev_load_state(dev) == ACXI_DEV_CLOSED ? ACX_OK : ACX_ERR_TIMEOUT;
  }
  if (st != ACX_OK) {
    acx_stop(dev->actor); /* its post_stop finishes the close and drops its device reference */
    st = ACX_ERR_TIMEOUT;
  }
  acx_ref_release(dev->actor);
  acxi_device_release(dev);
  return st;
}

acx_status_t acx_device_generation(acx_device_t *dev, uint64_t *generation) {
  ACX_CHECK_NULL(dev);
  ACX_CHECK_NULL(generation);
  *generation = atomic_load_explicit(&dev->generation, memory_order_relaxed);
  return ACX_OK;
}

acx_status_t acx_device_actor(acx_device_t *dev, acx_ref_t *actor) {
  ACX_CHECK_NULL(dev);
  ACX_CHECK_NULL(actor);
  *actor = dev->actor;
  return ACX_OK;
}

acx_status_t acx_device_watch(acx_device_t *dev, acx_ref_t watcher) {
  ACX_CHECK_NULL(dev);
  ACX_CHECK_NULL(watcher);
  ACXCHECK(acx_ref_hold(watcher));
  pthread_mutex_lock(&dev->watch_lock);
  if (dev->n_watchers == dev->cap_watchers) {
    int cap = dev->cap_watchers ? 2 * dev->cap_watchers : 4;
    acx_ref_t *w = realloc(dev->watchers, (size_t)cap * sizeof *w);
    if (!w) {
      pthread_mutex_unlock(&dev->watch_lock);
      acx_ref_release(watcher);
      return ACX_ERR_NO_MEMORY;
    }
    dev->watchers = w;
    dev->cap_watchers = cap;
  }
  dev->watchers[dev->n_watchers++] = watcher;
  pthread_mutex_unlock(&dev->watch_lock);
  return ACX_OK;
}

acx_status_t acx_device_stats(acx_device_t *dev, acx_device_stats_t *stats) {
  ACX_CHECK_NULL(dev);
  ACX_CHECK_NULL(stats);
  ACX_CHECK_ARG(stats->size == sizeof *stats, "acx_device_stats: stats->size=%zu, expected %zu", stats->size,
                sizeof *stats);
  /* relaxed: statistics, each counter on its own. */
  stats->generation = atomic_load_explicit(&dev->generation, memory_order_relaxed);
  stats->restarts = atomic_load_explicit(&dev->restarts, memory_order_relaxed);
  stats->last_recovery_ns = atomic_load_explicit(&dev->last_recovery_ns, memory_order_relaxed);
  stats->commands = atomic_load_explicit(&dev->commands, memory_order_relaxed);
  stats->outstanding = acxi_dev_pend_outstanding(dev);
  stats->buffers_live = atomic_load_explicit(&dev->buffers_live, memory_order_relaxed);
  stats->device_bytes = atomic_load_explicit(&dev->device_bytes, memory_order_relaxed);
  stats->managed_bytes = atomic_load_explicit(&dev->managed_bytes, memory_order_relaxed);
  stats->host_bytes = atomic_load_explicit(&dev->host_bytes, memory_order_relaxed);
  stats->standby_promotions = atomic_load_explicit(&dev->standby_promotions, memory_order_relaxed);
  stats->standby_spawns = atomic_load_explicit(&dev->standby_spawns, memory_order_relaxed);
  stats->async_failures = atomic_load_explicit(&dev->ff_failures, memory_order_relaxed);
  stats->standby_ready = atomic_load_explicit(&dev->sb_ready, memory_order_relaxed);
  int s = acxi_dev_load_state(dev);
  stats->available = s == ACXI_DEV_RUNNING || s == ACXI_DEV_STARTING || s == ACXI_DEV_RECOVERING;
  ACX_TRACE(DEVICE, "stats: state %s", state_name(s));
  return ACX_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* device-wide commands                                                                       */

static acx_status_t check_stream(acx_device_t *dev, const char *fn, uint32_t stream, int allow_all) {
  if (stream < (uint32_t)dev->streams || (allow_all && stream == ACX_STREAM_ALL)) return ACX_OK;
  ACX_WARN(DEVICE, "%s: argument 'stream'=%u is not in [0, %d)%s", fn, stream, dev->streams,
           allow_all ? " or ACX_STREAM_ALL" : "");
  return ACX_ERR_INVALID_ARG;
}

acx_status_t acx_device_synchronize(acx_device_t *dev, uint32_t stream, int64_t timeout_ns) {
  ACX_CHECK_NULL(dev);
  ACXCHECK(check_stream(dev, __func__, stream, 1));
  /* relaxed: counted before our SYNC is pushed, so every launch it counts is ahead of the SYNC. */
  uint64_t sent = atomic_load_explicit(&dev->ff_sent, memory_order_relaxed);
  acxi_cmd_t cmd = {.op = ACXI_OP_SYNC, .stream = stream};
  ACXCHECK(acxi_device_call(dev, &cmd, NULL, 0, 0, -1, timeout_ns, NULL));
  if (stream == ACX_STREAM_ALL) {
    /* relaxed: a watermark; a racing loss at worst reports one DEVICE_LOST too many. */
    uint64_t fenced = atomic_load_explicit(&dev->ff_fenced, memory_order_relaxed);
    while (fenced < sent && !atomic_compare_exchange_weak_explicit(&dev->ff_fenced, &fenced, sent,
                                                                   memory_order_relaxed, memory_order_relaxed)) {
    }
  }
  /* relaxed: the failure was noted before the SYNC's reply completed our future (same poller or
   * executor thread, in reply order), and that completion is a release our wait acquired. */
  int err = atomic_exchange_explicit(&dev->ff_error, 0, memory_order_relaxed);
  return (acx_status_t)err;
}

acx_status_t acx_device_synchronize_async(acx_device_t *dev, uint32_t stream, acx_future_t **done) {
  ACX_CHECK_NULL(dev);
  ACX_CHECK_NULL(done);
  ACXCHECK(check_stream(dev, __func__, stream, 1));
  acxi_cmd_t cmd = {.op = ACXI_OP_SYNC, .stream = stream};
  return acxi_device_submit(dev, &cmd, NULL, 0, 0, -1, acxi_deadline(dev->exec_timeout_ns), done);
}

acx_status_t acx_device_mem_info(acx_device_t *dev, uint64_t *free_bytes, uint64_t *total_bytes,
                                 int64_t timeout_ns) {
  ACX_CHECK_NULL(dev);
  ACX_CHECK_NULL(free_bytes);
  ACX_CHECK_NULL(total_bytes);
  acxi_cmd_t cmd = {.op = ACXI_OP_MEM_INFO};
  acxi_cpl_t c;
  ACXCHECK(acxi_device_call(dev, &cmd, NULL, 0, 0, -1, timeout_ns, &c));
  *free_bytes = c.value[0];
  *total_bytes = c.value[1];
  return ACX_OK;
}

acx_status_t acx_device_ping(acx_device_t *dev, int64_t timeout_ns) {
  ACX_CHECK_NULL(dev);
  acxi_cmd_t cmd = {.op = ACXI_OP_NOP};
  return acxi_device_call(dev, &cmd, NULL, 0, 0, -1, timeout_ns, NULL);
}

acx_status_t acx_device_launch_empty(acx_device_t *dev, uint32_t stream, int64_t timeout_ns) {
  ACX_CHECK_NULL(dev);
  ACXCHECK(check_stream(dev, __func__, stream, 0));
  acxi_cmd_t cmd = {.op = ACXI_OP_KERNEL_EMPTY, .stream = stream};
  return acxi_device_call(dev, &cmd, NULL, 0, 0, -1, timeout_ns, NULL);
}

acx_status_t acx_device_launch_empty_async(acx_device_t *dev, uint32_t stream, acx_future_t **done) {
  ACX_CHECK_NULL(dev);
  ACXCHECK(check_stream(dev, __func__, stream, 0));
  acxi_cmd_t cmd = {.op = ACXI_OP_KERNEL_EMPTY, .stream = stream};
  acx_status_t st = acxi_device_submit(dev, &cmd, NULL, 0, 0, -1, acxi_deadline(dev->exec_timeout_ns), done);
  /* relaxed: a counter compared at the next loss and all-stream synchronize. */
  if (st == ACX_OK && !done) atomic_fetch_add_explicit(&dev->ff_sent, 1, memory_order_relaxed);
  return st;
}

acx_status_t acx_device_inject_fault(acx_device_t *dev, int sticky, int64_t timeout_ns) {
  ACX_CHECK_NULL(dev);
  ACX_CHECK_ARG(sticky == 0 || sticky == 1, "acx_device_inject_fault: argument 'sticky'=%d must be 0 or 1", sticky);
  ACX_WARN(DEVICE, "injecting a %s fault into the %s executor (generation %" PRIu64 ")", sticky ? "sticky" : "crash",
           dev->kind, atomic_load_explicit(&dev->generation, memory_order_relaxed));
  acxi_cmd_t cmd = {.op = ACXI_OP_FAULT, .arg = {sticky ? ACXI_FAULT_STICKY : ACXI_FAULT_CRASH}};
  return acxi_device_call(dev, &cmd, NULL, 0, 0, -1, timeout_ns, NULL);
}
