/* The executor loop shared by both transports, and the process's heartbeat thread. The loop
 * busy-polls while the engine has work in flight (with nap_ns set, it naps that long at a time on
 * the command doorbell once nothing happened for nap_ns) or was active within spin_ns, and
 * otherwise sleeps on the command ring's doorbell, never longer than one heartbeat period, so its
 * progress stamp keeps moving while idle; it stops moving only while one call blocks the loop. */
#define _GNU_SOURCE
#include "kernels/exec/exec_loop.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "runtime/base/clock.h"
#include "runtime/base/log.h"
#include "runtime/base/param.h"

typedef struct region {
  uint64_t id;
  acxi_shm_t shm; /* process mode: our mapping; inline: addr only, fd -1 */
} region_t;

typedef struct loop {
  const acxi_exec_loop_params_t *p;
  const acxi_ring_view_t *cmds, *cpls;
  acxi_engine_t *engine;
  region_t *regions;
  size_t n_regions, cap_regions;
  /* Unregistered regions the engine may still access (host_region_busy): mapped until it is done. */
  region_t *retiring;
  size_t n_retiring, cap_retiring;
  int64_t post_timeout_ns;
} loop_t;

/* The completion sink handed to the engine. Thread-safe (the ring is MPMC). */
static void post(void *sink, const acxi_cpl_t *cpl) {
  loop_t *l = sink;
  if (acxi_ring_push(l->cpls, cpl, acxi_deadline(l->post_timeout_ns)) != ACX_OK)
    ACX_WARN(EXEC, "reply ring stayed full for %" PRId64 " ms: completion of request %" PRIu64
             " dropped (is the rank still polling?)", l->post_timeout_ns / 1000000, cpl->req_id);
}

static void reply(loop_t *l, const acxi_cmd_t *cmd, acx_status_t st) {
  if (st == ACX_OK && (cmd->flags & ACXI_CMD_FLAG_NO_REPLY)) return;
  acxi_cpl_t c = {.req_id = cmd->req_id, .status = st};
  if (l->p->direct)
    l->p->direct(l->p->direct_sink, &c);
  else
    post(l, &c);
}

static region_t *region_find(loop_t *l, uint64_t id) {
  for (size_t i = 0; i < l->n_regions; i++)
    if (l->regions[i].id == id) return &l->regions[i];
  return NULL;
}

static acx_status_t region_register(loop_t *l, const acxi_cmd_t *cmd) {
  uint64_t id = cmd->arg[0];
  if (id == 0 || region_find(l, id)) {
    ACX_WARN(EXEC, "HOST_REGISTER: region id %" PRIu64 " is zero or already registered", id);
    return ACX_ERR_INVALID_ARG;
  }
  if (l->n_regions == l->cap_regions) {
    size_t cap = l->cap_regions ? 2 * l->cap_regions : 16;
    region_t *r = realloc(l->regions, cap * sizeof *r);
    if (!r) return ACX_ERR_NO_MEMORY;
    l->regions = r;
    l->cap_regions = cap;
  }
  region_t reg = {.id = id, .shm = {.fd = -1}};
  acx_status_t st;
  if (l->p->engine.inline_mode) {
    reg.shm.addr = (void *)(uintptr_t)cmd->arg[1];
    reg.shm.bytes = cmd->bytes;
    if (!reg.shm.addr || !reg.shm.bytes) {
      ACX_WARN(EXEC, "HOST_REGISTER: region %" PRIu64 " has no address or size", id);
      return ACX_ERR_INVALID_ARG;
    }
  } else {
    /* The rank sent the fd on the socket before it pushed this command, under one lock, so the
     * next message on the socket is this region's. */
    uint64_t msg[2];
    int fd = -1;
    st = acxi_fd_recv(l->p->sock_fd, &fd, msg, sizeof msg, acxi_deadline(5000000000LL));
    if (st != ACX_OK) return st;
    if (fd < 0 || msg[0] != id || msg[1] != cmd->bytes) {
      ACX_WARN(EXEC, "HOST_REGISTER: socket carried region %" PRIu64 " (%" PRIu64 " bytes, fd %d), command names %"
               PRIu64 " (%" PRIu64 " bytes)", msg[0], msg[1], fd, id, cmd->bytes);
      if (fd >= 0) close(fd);
      return ACX_ERR_INVALID_ARG;
    }
    st = acxi_shm_map(fd, cmd->bytes, &reg.shm);
    close(fd);
    if (st != ACX_OK) return st;
  }
  st = l->p->ops->host_region_add(l->engine, id, reg.shm.addr, reg.shm.bytes);
  if (st != ACX_OK) {
    if (reg.shm.fd >= 0) acxi_shm_destroy(&reg.shm);
    return st;
  }
  l->regions[l->n_regions++] = reg;
  return ACX_OK;
}

static void region_drop(loop_t *l, region_t *r) {
  if (r->shm.fd >= 0) acxi_shm_destroy(&r->shm);
  *r = l->regions[--l->n_regions];
}

/* The reply does not wait for work queued before the command that still uses the region (the
 * engine unpins it once that is done, and this loop keeps its mapping until then: retire_poll). */
static acx_status_t region_unregister(loop_t *l, const acxi_cmd_t *cmd) {
  region_t *r = region_find(l, cmd->arg[0]);
  if (!r) {
    ACX_WARN(EXEC, "HOST_UNREGISTER: no host region %" PRIu64, cmd->arg[0]);
    return ACX_ERR_INVALID_ARG;
  }
  acx_status_t st = l->p->ops->host_region_remove(l->engine, r->id);
  if (st == ACX_OK && l->p->ops->host_region_busy && l->p->ops->host_region_busy(l->engine, r->id)) {
    if (l->n_retiring == l->cap_retiring) {
      size_t cap = l->cap_retiring ? 2 * l->cap_retiring : 8;
      region_t *v = realloc(l->retiring, cap * sizeof *v);
      if (v) {
        l->retiring = v;
        l->cap_retiring = cap;
      }
    }
    if (l->n_retiring < l->cap_retiring) {
      l->retiring[l->n_retiring++] = *r;
      *r = l->regions[--l->n_regions];
      return ACX_OK;
    }
    /* No memory to remember it: the mapping stays for the process's life (never unmapped under a
     * copy). */
    ACX_WARN(EXEC, "HOST_UNREGISTER: region %" PRIu64 " stays mapped (no memory to track it)", r->id);
    *r = l->regions[--l->n_regions];
    return ACX_OK;
  }
  region_drop(l, r);
  return st;
}

/* Unmaps the retiring regions the engine is done with. */
static void retire_poll(loop_t *l) {
  for (size_t i = 0; i < l->n_retiring;) {
    region_t *r = &l->retiring[i];
    if (l->p->ops->host_region_busy(l->engine, r->id)) {
      i++;
      continue;
    }
    if (r->shm.fd >= 0) acxi_shm_destroy(&r->shm);
    *r = l->retiring[--l->n_retiring];
  }
}

/* ACXI_FAULT_BUSY: this thread blocks as in a long library call or collective. */
static acx_status_t fault_busy(const acxi_cmd_t *cmd) {
  uint64_t ns = cmd->arg[1] < ACXI_FAULT_BUSY_MAX_NS ? cmd->arg[1] : ACXI_FAULT_BUSY_MAX_NS;
  ACX_WARN(EXEC, "FAULT request %" PRIu64 ": the executor loop blocks for %" PRIu64 " ms (injected busy call)",
           cmd->req_id, ns / 1000000);
  struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u), .tv_nsec = (long)(ns % 1000000000u)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
  return ACX_OK;
}

static void handle(loop_t *l, acxi_cmd_t *cmd) {
  if (cmd->generation != l->p->view.ctrl->generation) {
    ACX_WARN(EXEC, "command op %u (request %" PRIu64 ") is for generation %" PRIu64 ", this executor is %" PRIu64,
             cmd->op, cmd->req_id, cmd->generation, l->p->view.ctrl->generation);
    reply(l, cmd, ACX_ERR_STALE_BUFFER);
    return;
  }
  switch (cmd->op) {
  case ACXI_OP_HOST_REGISTER:
    reply(l, cmd, region_register(l, cmd));
    break;
  case ACXI_OP_HOST_UNREGISTER:
    reply(l, cmd, region_unregister(l, cmd));
    break;
  case ACXI_OP_FAULT:
    if (cmd->arg[0] == ACXI_FAULT_BUSY) {
      reply(l, cmd, fault_busy(cmd));
      break;
    }
    l->p->ops->submit(l->engine, cmd);
    break;
  default:
    l->p->ops->submit(l->engine, cmd);
  }
}

static int parent_gone(const acxi_exec_loop_params_t *p) {
  return p->parent_pid > 0 && getppid() != p->parent_pid;
}

/* A standby with its engine created: sleeps on ctrl->promote (no spinning: it may wait for hours),
 * stamping its progress (its process's heartbeat thread beats too). Returns -1 once promoted, else
 * why it leaves. */
static int standby_wait(const acxi_exec_loop_params_t *p) {
  acxi_ctrl_t *ctrl = p->view.ctrl;
  atomic_store_explicit(&ctrl->progress_ns, acxi_now_ns(), memory_order_relaxed);
  /* release: the rank may promote us once it sees STANDBY; the engine is complete. */
  atomic_store_explicit(&ctrl->state, ACXI_EXEC_STANDBY, memory_order_release);
  acxi_ring_wake(&p->view.cpls);
  ACX_INFO(EXEC, "%s executor standing by (pid %d)", p->ops->kind, (int)getpid());
  for (;;) {
    /* acquire: pairs with the rank's release store of PROMOTE; ctrl->generation is set. Read
     * before the checks below so that a promotion after them makes the futex wait return. */
    uint32_t cmd = atomic_load_explicit(&ctrl->promote, memory_order_acquire);
    if (cmd == ACXI_STANDBY_PROMOTE) return -1;
    if (cmd == ACXI_STANDBY_LEAVE) return ACXI_LOOP_STOPPED;
    int64_t now = acxi_now_ns();
    atomic_store_explicit(&ctrl->progress_ns, now, memory_order_relaxed); /* a lone timestamp */
    if (parent_gone(p)) {
      ACX_WARN(EXEC, "the rank (pid %d) is gone: standby executor leaves", p->parent_pid);
      return ACXI_LOOP_ORPHANED;
    }
    /* relaxed: a request, as in the main loop. */
    if (p->stop && atomic_load_explicit(p->stop, memory_order_relaxed)) return ACXI_LOOP_STOPPED;
    acxi_futex_wait(&ctrl->promote, cmd, now + p->heartbeat_period_ns);
  }
}

acxi_loop_exit_t acxi_exec_loop_run(const acxi_exec_loop_params_t *p) {
  loop_t l = {.p = p, .cmds = &p->view.cmds, .cpls = &p->view.cpls};
  acxi_ctrl_t *ctrl = p->view.ctrl;
  l.post_timeout_ns = acxi_param_int("ACX_EXEC_TIMEOUT_MS") * 1000000;
  acx_status_t st = p->direct ? p->ops->create(&p->engine, p->direct, p->direct_sink, &l.engine)
                              : p->ops->create(&p->engine, post, &l, &l.engine);
  if (st != ACX_OK) {
    acxi_ctrl_set_sticky(&p->view, st, 0, "the %s engine could not start: %s", p->ops->kind, acx_status_str(st));
    return ACXI_LOOP_START_FAILED;
  }
  acxi_loop_exit_t why;
  if (p->standby) {
    int w = standby_wait(p);
    if (w >= 0) {
      why = (acxi_loop_exit_t)w;
      goto out_destroy;
    }
    ACX_INFO(EXEC, "standby %s executor (pid %d) promoted to generation %" PRIu64, p->ops->kind, (int)getpid(),
             ctrl->generation);
    p->ops->set_generation(l.engine, ctrl->generation);
  }
  uint64_t fault_nth = 0, count = 0;
  if (acxi_fault_schedule(p->engine.fault_inject, ctrl->generation, &fault_nth) != ACX_OK) fault_nth = 0;

  /* release: the rank may read anything the engine set up once it sees READY. */
  atomic_store_explicit(&ctrl->progress_ns, acxi_now_ns(), memory_order_relaxed);
  atomic_store_explicit(&ctrl->state, ACXI_EXEC_READY, memory_order_release);
  acxi_ring_wake(l.cpls); /* a rank waiting for READY may sleep on the reply doorbell */
  ACX_INFO(EXEC, "%s executor generation %" PRIu64 " ready (%s)", p->ops->kind, ctrl->generation,
           p->engine.inline_mode ? "inline" : "process");

  int shutting_down = 0;
  /* Naps as short as asked: the kernel's default timer slack (50 us) would add itself to each. Per
   * thread: only this loop's timed sleeps. */
  if (p->nap_ns > 0 && prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0) != 0)
    ACX_INFO(EXEC, "prctl(PR_SET_TIMERSLACK) failed: %s; naps may run ~50 us long", strerror(errno));
  int64_t now = acxi_now_ns(), last_beat = now, last_active = now, last_event = now;
  for (;;) {
    acxi_cmd_t cmd;
    int n = 0, got = ACXI_RING_WAIT;
    while (n < 64 && !shutting_down && (got = acxi_ring_try_pop(l.cmds, &cmd)) == ACXI_RING_DONE) {
      n++;
      if (fault_nth && ++count == fault_nth) {
        ACX_WARN(EXEC, "ACX_FAULT_INJECT='%s': command %" PRIu64 " (op %u) replaced by a fault",
                 p->engine.fault_inject, count, cmd.op);
        cmd.op = ACXI_OP_FAULT;
        cmd.flags &= ~ACXI_CMD_FLAG_NO_REPLY;
        cmd.arg[0] = ACXI_FAULT_CRASH;
      }
      if (cmd.op == ACXI_OP_SHUTDOWN) shutting_down = 1;
      handle(&l, &cmd);
      /* A poisoned engine takes no more: what is still queued is the rank's to fail (with
       * ACX_ERR_DEVICE_LOST in the process transport) once it sees the sticky error. */
      if (p->ops->poisoned(l.engine)) break;
    }
    if (got == ACXI_RING_BROKEN) {
      /* Only a bug in the rank can do this (it is the trusted side): stop serving, say so. */
      acxi_ctrl_set_sticky(&p->view, ACX_ERR_DEVICE_LOST, 0, "the command ring of generation %" PRIu64 " is corrupt",
                           ctrl->generation);
      why = ACXI_LOOP_POISONED;
      break;
    }
    n += p->ops->progress(l.engine);
    if (l.n_retiring) retire_poll(&l);
    if (p->ops->poisoned(l.engine)) {
      acxi_ctrl_set_sticky(&p->view, p->engine.inline_mode ? ACX_ERR_DEVICE_FATAL : ACX_ERR_DEVICE_LOST, 0,
                           "the %s engine of generation %" PRIu64 " hit a sticky error; its context is poisoned",
                           p->ops->kind, ctrl->generation);
      ACX_WARN(EXEC, "%s", ctrl->sticky_msg);
      why = ACXI_LOOP_POISONED;
      break;
    }
    uint64_t busy = p->ops->in_flight(l.engine);
    if (shutting_down && busy == 0) {
      why = ACXI_LOOP_SHUTDOWN;
      break;
    }
    now = acxi_now_ns();
    if (now - last_beat >= p->heartbeat_period_ns) {
      /* relaxed: a lone timestamp; the rank only compares it with its clock. Once a period, so
       * the line stays in this core's cache between the rank's reads. */
      atomic_store_explicit(&ctrl->progress_ns, now, memory_order_relaxed);
      last_beat = now;
      if (parent_gone(p)) {
        ACX_WARN(EXEC, "the rank (pid %d) is gone: executor generation %" PRIu64 " leaves", p->parent_pid,
                 ctrl->generation);
        why = ACXI_LOOP_ORPHANED;
        break;
      }
    }
    /* relaxed: the stop flag is a request; the ring wake that follows it does the ordering. */
    if (p->stop && atomic_load_explicit(p->stop, memory_order_relaxed)) {
      why = ACXI_LOOP_STOPPED;
      break;
    }
    if (n > 0 || busy > 0) {
      last_active = now;
      /* Work in flight and nothing new for nap_ns: leave the core to the threads that the work
       * waits for (NCCL's proxy, other executors) for one nap; a command ends it at once, and the
       * progress stamp is never later than its period. Work shorter than nap_ns is busy-polled. */
      if (n > 0) {
        last_event = now;
      } else if (p->nap_ns > 0 && now - last_event >= p->nap_ns) {
        int64_t until = now + p->nap_ns, beat = last_beat + p->heartbeat_period_ns;
        acxi_ring_consumer_wait(l.cmds, until < beat ? until : beat);
      }
      continue;
    }
    if (now - last_active < p->spin_ns) {
      acxi_cpu_relax();
      continue;
    }
    acxi_ring_consumer_wait(l.cmds, last_beat + p->heartbeat_period_ns);
  }
out_destroy:
  p->ops->destroy(l.engine);
  while (l.n_regions) region_drop(&l, &l.regions[l.n_regions - 1]);
  free(l.regions);
  /* The engine is gone (it drained its streams, or leaves a hung GPU's memory pinned). */
  for (size_t i = 0; i < l.n_retiring; i++)
    if (l.retiring[i].shm.fd >= 0) acxi_shm_destroy(&l.retiring[i].shm);
  free(l.retiring);
  if (why != ACXI_LOOP_POISONED) atomic_store_explicit(&ctrl->state, ACXI_EXEC_STOPPED, memory_order_release);
  acxi_ring_wake(l.cpls);
  return why;
}

static void *heartbeat_main(void *arg) {
  acxi_heartbeat_t *hb = arg;
  int64_t orphaned_at = 0;
  pthread_mutex_lock(&hb->lock);
  while (!hb->stop) {
    int64_t now = acxi_now_ns();
    /* relaxed: a lone timestamp; the rank only compares it with its clock. */
    atomic_store_explicit(&hb->ctrl->heartbeat_ns, now, memory_order_relaxed);
    if (hb->parent_pid > 0 && getppid() != hb->parent_pid) {
      if (!orphaned_at) orphaned_at = now;
      if (now - orphaned_at >= hb->orphan_grace_ns) {
        ACX_WARN(EXEC, "the rank (pid %d) is gone and the executor loop did not leave within %" PRId64 " ms (it is "
                 "blocked in a call): executor pid %d exits", hb->parent_pid, hb->orphan_grace_ns / 1000000,
                 (int)getpid());
        _exit(5);
      }
    }
    struct timespec ts = acxi_ts_from_ns(now + hb->period_ns);
    pthread_cond_timedwait(&hb->cond, &hb->lock, &ts);
  }
  pthread_mutex_unlock(&hb->lock);
  return NULL;
}

acx_status_t acxi_heartbeat_start(acxi_heartbeat_t *hb, acxi_ctrl_t *ctrl, int64_t period_ns, int parent_pid,
                                  int64_t orphan_grace_ns) {
  ACX_CHECK_NULL(hb);
  ACX_CHECK_NULL(ctrl);
  ACX_CHECK_ARG(period_ns > 0, "acxi_heartbeat_start: period_ns=%" PRId64 " must be > 0", period_ns);
  *hb = (acxi_heartbeat_t){.ctrl = ctrl, .period_ns = period_ns, .orphan_grace_ns = orphan_grace_ns,
                           .parent_pid = parent_pid};
  atomic_store_explicit(&ctrl->heartbeat_ns, acxi_now_ns(), memory_order_relaxed);
  pthread_mutex_init(&hb->lock, NULL);
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(&hb->cond, &a);
  pthread_condattr_destroy(&a);
  int rc = pthread_create(&hb->th, NULL, heartbeat_main, hb);
  if (rc) {
    ACX_WARN(EXEC, "pthread_create of the executor heartbeat thread failed: %s", strerror(rc));
    pthread_cond_destroy(&hb->cond);
    pthread_mutex_destroy(&hb->lock);
    return ACX_ERR_SYSTEM;
  }
  hb->live = 1;
  return ACX_OK;
}

void acxi_heartbeat_stop(acxi_heartbeat_t *hb) {
  if (!hb || !hb->live) return;
  pthread_mutex_lock(&hb->lock);
  hb->stop = 1;
  pthread_cond_signal(&hb->cond);
  pthread_mutex_unlock(&hb->lock);
  pthread_join(hb->th, NULL);
  pthread_cond_destroy(&hb->cond);
  pthread_mutex_destroy(&hb->lock);
  hb->live = 0;
}
