/* Shared segments between a rank and its executor: memfd-backed mappings, the control block of
 * one executor incarnation (identity, heartbeat, state, sticky error, both rings), and passing
 * file descriptors over a unix socket (SCM_RIGHTS) so host regions can be mapped by both. */
#ifndef ACXI_SHM_H
#define ACXI_SHM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "acx/status.h"
#include "runtime/proto/cmd.h"
#include "runtime/proto/ring.h"

typedef struct acxi_shm {
  void *addr;
  size_t bytes;
  int fd; /* -1 once closed */
} acxi_shm_t;

/* Creates an anonymous shared segment of `bytes` (memfd, close-on-exec) mapped read-write. */
acx_status_t acxi_shm_create(const char *name, size_t bytes, acxi_shm_t *shm);
/* Maps an existing segment; bytes 0 means the file's size. Takes no ownership of fd: it is
 * dup'ed. */
acx_status_t acxi_shm_map(int fd, size_t bytes, acxi_shm_t *shm);
/* Opens another process's segment through /proc/<pid>/fd/<fd> (the same user's), checking that
 * the descriptor still names the file it named (device, inode) and that the file holds `bytes`:
 * its owner may have freed it, and the number may name another file by now. *out: a new
 * close-on-exec descriptor. ACX_ERR_PEER_LOST (logged, the line starting with `who`) when the
 * segment is gone or another file; ACX_ERR_SYSTEM when fstat fails. */
acx_status_t acxi_shm_open_peer(const char *who, int32_t pid, int32_t fd, uint64_t dev, uint64_t ino, uint64_t bytes,
                                int *out);
/* Unmaps and closes; safe on a zeroed or already destroyed segment. */
void acxi_shm_destroy(acxi_shm_t *shm);

#define ACXI_SHM_CTRL_MAGIC 0x6163786374726c31ull /* "acxctrl1" */

/* What the executor says about itself (acxi_ctrl_t.state). */
typedef enum acxi_exec_state {
  ACXI_EXEC_STARTING = 0, /* mapped by the rank, the executor has not created its engine yet */
  ACXI_EXEC_READY = 1,    /* engine created; commands are served */
  ACXI_EXEC_STOPPED = 2,  /* left its loop after SHUTDOWN */
  ACXI_EXEC_FAILED = 3,   /* could not start, or a sticky error: see sticky_* */
  ACXI_EXEC_STANDBY = 4   /* a hot standby: engine created, idle until promoted (acxi_ctrl_t.promote) */
} acxi_exec_state_t;

/* acxi_ctrl_t.promote: what the rank asks of a standby executor. Also the futex word it sleeps on. */
#define ACXI_STANDBY_WAIT 0u    /* stay idle */
#define ACXI_STANDBY_PROMOTE 1u /* serve: `generation` is set, commands follow */
#define ACXI_STANDBY_LEAVE 2u   /* exit without serving (device closing, standby replaced) */

/* The control block of one executor incarnation: written once by the rank, then the executor
 * owns heartbeat/state/sticky_*. Both rings follow it in the same mapping. */
typedef struct acxi_ctrl {
  uint64_t magic;
  uint32_t version; /* ACXI_PROTOCOL_VERSION */
  uint32_t slots;
  uint64_t total_bytes;
  uint64_t generation;
  uint64_t cmd_ring_off; /* from the start of the block */
  uint64_t cpl_ring_off;
  _Atomic int32_t executor_pid;
  _Atomic uint32_t state;        /* acxi_exec_state_t */
  /* Liveness, both CLOCK_MONOTONIC (system-wide, so comparable across processes). heartbeat_ns:
   * stamped by the executor process's heartbeat thread (acxi_heartbeat_start) every period, even
   * while the loop is blocked in a long call: the process is alive and scheduled. progress_ns:
   * stamped by the loop's thread at least every period while it runs its loop (idle or busy), not
   * while one command blocks it. The rule that reads them: docs/fault-model.md. */
  _Atomic int64_t heartbeat_ns;
  _Atomic int64_t progress_ns;
  _Atomic uint32_t sticky;       /* 1 once sticky_status/msg are written */
  int32_t sticky_status;         /* acx_status_t */
  int32_t sticky_lib_code;
  char sticky_msg[256];
  /* Standby executors only: ACXI_STANDBY_*. The rank writes `generation` before it stores
   * PROMOTE (release) and wakes this word; the standby reads generation after its acquire load. */
  _Atomic uint32_t promote;
} acxi_ctrl_t;

/* A control block as one side uses it: the block, and a private view of each ring computed from
 * the slot count this side trusts (the rank: its own configuration; the executor: the header it
 * checked when it attached). Rings are never reached through the header's offsets again. */
typedef struct acxi_ctrl_view {
  acxi_ctrl_t *ctrl;
  acxi_ring_view_t cmds; /* rank -> executor */
  acxi_ring_view_t cpls; /* executor -> rank */
} acxi_ctrl_view_t;

/* Creates the control block with both rings (`slots` each). */
acx_status_t acxi_ctrl_create(uint32_t slots, uint64_t generation, acxi_shm_t *shm);
/* Maps a control block received as an fd and checks magic, version and ring layout. */
acx_status_t acxi_ctrl_attach(int fd, acxi_shm_t *shm);
static inline acxi_ctrl_t *acxi_ctrl(const acxi_shm_t *shm) { return (acxi_ctrl_t *)shm->addr; }
/* Fills *v for a control block mapped at addr laid out for `slots` (acxi_ctrl_create's layout),
 * reading nothing from the block. ACX_ERR_INVALID_ARG for a bad slot count. */
acx_status_t acxi_ctrl_view_init(acxi_ctrl_view_t *v, void *addr, uint32_t slots);
/* Records a sticky error once (first writer wins), marks the incarnation failed and wakes the
 * rank's poller. Executor side. */
void acxi_ctrl_set_sticky(const acxi_ctrl_view_t *v, acx_status_t status, int lib_code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Sends fd plus `len` bytes of data over a unix socket (SCM_RIGHTS), waiting for buffer space
 * until deadline_ns (ACX_ERR_TIMEOUT). */
acx_status_t acxi_fd_send(int sock, int fd, const void *data, size_t len, int64_t deadline_ns);
/* Receives one message sent by acxi_fd_send, waiting until deadline_ns. *fd is -1 when the
 * message carried none. ACX_ERR_TIMEOUT, or ACX_ERR_SYSTEM when the peer closed. */
acx_status_t acxi_fd_recv(int sock, int *fd, void *data, size_t len, int64_t deadline_ns);
#endif
