/* What the pieces of the rank-side device share, and nothing outside runtime/device/ sees: the
 * DeviceActor's messages, the loss reports, the executor transports, the state and clock helpers,
 * and the functions each piece (pend, submit, poller, incarnation, transport, standby,
 * device_actor, device) offers the others. buffer.c reads the transport's properties. */
#ifndef ACXI_DEVICE_IMPL_H
#define ACXI_DEVICE_IMPL_H

#include <signal.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "acx/actor.h"
#include "runtime/base/clock.h"
#include "runtime/device/device_internal.h"

/* DeviceActor messages: internal, from acx's own range (see ACX_MSG_DEVICE_BASE). */
#define DEV_MSG_START (ACX_MSG_DEVICE_BASE + 0x80) /* ask: start generation 1 */
#define DEV_MSG_LOST (ACX_MSG_DEVICE_BASE + 0x81)  /* tell, payload uint64_t generation lost */
#define DEV_MSG_FATAL (ACX_MSG_DEVICE_BASE + 0x82) /* tell, payload uint64_t generation */
#define DEV_MSG_CLOSE (ACX_MSG_DEVICE_BASE + 0x83) /* ask, payload int64_t deadline (CLOCK_MONOTONIC ns) */
#define DEV_MSG_STANDBY_LOST (ACX_MSG_DEVICE_BASE + 0x84) /* tell, payload acxi_dev_sb_loss_t */

/* What the poller saw when it declared the executor lost; travels to the DeviceActor by value. */
typedef struct acxi_dev_loss {
  uint64_t generation;
  int64_t detected_ns;
  acx_status_t cause;
  char reason[128];
} acxi_dev_loss_t;

/* What the poller saw when it declared the standby lost. */
typedef struct acxi_dev_sb_loss {
  pid_t pid;
  char reason[128];
} acxi_dev_sb_loss_t;

/* How long the supervision waits for the poller to park and for submitters to leave. Both only
 * finish a bounded step: the poller drains at most one ring's worth of replies and its loss path
 * waits for submitters at most SUBMITTERS_WAIT_NS; a submitter rechecks the state at least every
 * 10 ms in each of its waits (ring space, a request slot, socket space). Reaching either bound
 * means a thread is stuck (descheduled for seconds, or a bug): the caller logs it and takes the
 * safe way out (never unmapping memory the stuck thread may still touch). */
#define POLL_PAUSE_NS 10000000000LL
#define SUBMITTERS_WAIT_NS 5000000000LL

/* An executor transport: what differs between an executor that is a process of its own and one
 * that is a thread of the rank. One constant table per transport (transport.c); acx_device_open
 * picks one (dev->transport) and nothing else asks which one it is. */
typedef struct acxi_dev_transport {
  const char *name; /* ACX_EXECUTOR's spelling, for logs */
  /* The executor runs in the rank's process: it reads host memory at the rank's addresses (no fd
   * travels with HOST_REGISTER) and its device pointers are valid here (acx_buffer_device_ptr). */
  int in_rank;
  /* A lost executor can be killed and replaced: a loss is ACX_ERR_DEVICE_LOST (an executor's
   * DEVICE_FATAL included) and recovered (restarts, the hot standby, acxi_device_restart), and
   * the poller also declares it lost when it exits, goes silent or hangs. Otherwise only a sticky
   * fault ends it, and that is ACX_ERR_DEVICE_FATAL, for good (ACXI_DEV_FATAL). */
  int restartable;
  /* Completions come through the reply ring, which the poller drains, spinning while requests
   * wait; otherwise the executor completes the futures itself (acxi_dev_complete_direct). */
  int ring_replies;
  const char *pid_label; /* what pid() is, for the open's log line */
  /* At open, once the rest of the configuration is resolved: finds what the transport needs (the
   * acx-executor executable, the executor library). Logs and returns a status when it cannot. */
  acx_status_t (*prepare)(acx_device_t *dev);
  /* Starts generation gen's executor on the control block just installed (dev->shm, dev->cv); it
   * reports READY there (acxi_dev_finish_start waits for it). */
  acx_status_t (*start)(acx_device_t *dev, uint64_t gen);
  /* Stops the current executor: grace_ns to leave on its own, then it is made to; records its wait
   * status in dev->loss_exit_status where it has one. No executor: nothing happens. */
  void (*stop)(acx_device_t *dev, int64_t grace_ns);
  /* 1 when the current executor has died (not reaped yet); *si says how. */
  int (*exited)(acx_device_t *dev, siginfo_t *si);
  pid_t (*pid)(const acx_device_t *dev); /* the process the executor runs in */
} acxi_dev_transport_t;

extern const acxi_dev_transport_t acxi_dev_transport_process; /* acx-executor */
extern const acxi_dev_transport_t acxi_dev_transport_inline;  /* a thread of the rank */

static inline int acxi_dev_load_state(acx_device_t *dev) {
  /* seq_cst: pairs with the submitters counter (Dekker, see acxi_device_submit). */
  return atomic_load_explicit(&dev->state, memory_order_seq_cst);
}

/* Moves from `from` to `to`; 1 when this caller made the move. */
static inline int acxi_dev_cas_state(acx_device_t *dev, int from, int to) {
  return atomic_compare_exchange_strong_explicit(&dev->state, &from, to, memory_order_seq_cst,
                                                 memory_order_seq_cst);
}

/* now + ns, but never past a close's deadline (dev->close_by, set by acx_device_close). */
static inline int64_t acxi_dev_supervision_deadline(acx_device_t *dev, int64_t ns) {
  int64_t dl = acxi_deadline(ns);
  /* relaxed: a bound read again at every slice of the waits that use it. */
  int64_t by = atomic_load_explicit(&dev->close_by, memory_order_relaxed);
  return by && by < dl ? by : dl;
}

static inline void acxi_dev_cond_wait_until(pthread_cond_t *c, pthread_mutex_t *m, int64_t deadline_ns) {
  struct timespec ts = acxi_ts_from_ns(deadline_ns);
  pthread_cond_timedwait(c, m, &ts);
}

static inline void acxi_dev_sleep_ns(int64_t ns) {
  struct timespec ts = acxi_ts_from_ns(ns);
  nanosleep(&ts, NULL);
}

/* pend.c: the table of outstanding requests. */
acx_status_t acxi_dev_pend_init(acx_device_t *dev);
acx_status_t acxi_dev_pend_add(acx_device_t *dev, acx_future_t *future, unsigned flags, int64_t deadline,
                               uint64_t *req_id);
acx_future_t *acxi_dev_pend_take(acx_device_t *dev, uint64_t req_id);
uint64_t acxi_dev_pend_outstanding(acx_device_t *dev);
uint64_t acxi_dev_pend_fail_all(acx_device_t *dev, acx_status_t status);
void acxi_dev_mark_failed(acx_device_t *dev, uint64_t gen);

/* submit.c: who may submit, and waiting for submitters to leave. */
int acxi_dev_state_accepts(int s, unsigned flags);
acx_status_t acxi_dev_refusal_status(int s);
acx_status_t acxi_dev_wait_submitters_gone(acx_device_t *dev, const char *why);

/* poller.c: the reply poller, its pause handshake, the liveness rule and loss detection. */
acx_status_t acxi_dev_poll_pause(acx_device_t *dev, const char *why);
void acxi_dev_poll_resume(acx_device_t *dev);
void acxi_dev_set_state(acx_device_t *dev, int s);
void acxi_dev_ring_broken(acx_device_t *dev, const char *which);
acx_status_t acxi_dev_executor_status(const acx_device_t *dev, acx_status_t st);
void acxi_dev_complete_direct(void *sink, const acxi_cpl_t *c);
void *acxi_dev_poller_main(void *arg);
void acxi_dev_stop_poller(acx_device_t *dev, int64_t deadline);

/* incarnation.c: executor incarnations (spawn, start, end, the control-block swap, reaping). */
void acxi_dev_describe_wait_status(int ws, char *buf, size_t cap);
acx_status_t acxi_dev_ctrl_swap(acx_device_t *dev, acxi_shm_t *next, int submitters_gone);
acx_status_t acxi_dev_spawn_executor(acx_device_t *dev, uint64_t gen, int shm_fd, int sock_fd, pid_t *out_pid);
int acxi_dev_reap_pid(pid_t pid, int64_t grace_ns);
void acxi_dev_reap_executor(acx_device_t *dev, int64_t grace_ns);
acx_status_t acxi_dev_start_incarnation(acx_device_t *dev, uint64_t gen);
acx_status_t acxi_dev_finish_start(acx_device_t *dev, uint64_t gen, int64_t deadline);
void acxi_dev_end_incarnation(acx_device_t *dev, int64_t grace_ns);
pid_t acxi_dev_end_incarnation_kill(acx_device_t *dev);

/* standby.c: the hot standby executor (process transport). */
void acxi_dev_standby_watch(acx_device_t *dev, int64_t now);
void acxi_dev_standby_spawn(acx_device_t *dev);
void acxi_dev_standby_ask_leave(acx_device_t *dev);
void acxi_dev_standby_discard(acx_device_t *dev, int64_t grace_ns, const char *why);
void acxi_dev_standby_lost(acx_device_t *dev, const char *reason);
acx_status_t acxi_dev_standby_promote(acx_device_t *dev, uint64_t gen);

/* device_actor.c: the DeviceActor. */
void acxi_dev_actor_props(acx_device_t *dev, acx_props_t *out);

/* device.c: open / close. */
void acxi_dev_close_device(acx_device_t *dev, int64_t deadline);

#endif
