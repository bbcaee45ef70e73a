/* The control plane's internal interface (ctrl_plane.c), used by remote access (remote.c) and the
 * world rebuild (rebuild.c): typed control messages (runtime/proto/ctrl_msg.h) and bulk data between
 * ranks over one duplicated communicator, every MPI call of it made by one progress thread. */
#ifndef ACXC_CTRL_PLANE_H
#define ACXC_CTRL_PLANE_H

#include <stddef.h>
#include <stdint.h>

#include "acx/world.h"
#include "runtime/proto/ctrl_msg.h"

typedef struct acxc_ctrl acxc_ctrl_t;

/* A received control message, on the progress thread. `decoded` is acxi_ctrl_decode's status:
 * ACX_OK, or ACX_ERR_BAD_TOKEN for a GET/PUT request whose token is malformed (header, offset,
 * bytes and tag are filled in, so the owner can answer). Other malformed messages are logged and
 * dropped before any handler sees them. Handlers must not block for long: they hold up every
 * other message of the rank. */
typedef void (*acxc_ctrl_handler_fn)(acxc_ctrl_t *cp, void *arg, const acxi_ctrl_msg_t *m, acx_status_t decoded);
/* A data transfer or control send finished (ACX_OK, ACX_ERR_TIMEOUT at its deadline, ACX_ERR_MPI,
 * ACX_ERR_CANCELLED when the plane stops). Progress thread. */
typedef void (*acxc_ctrl_done_fn)(acxc_ctrl_t *cp, void *arg, acx_status_t st);
/* Called on every turn of the progress thread (deadlines of the users' own state). */
typedef void (*acxc_ctrl_tick_fn)(acxc_ctrl_t *cp, void *arg, int64_t now_ns);

/* The control plane of `world`, made on first acquire (collective over the world's ranks: the
 * communicator is duplicated, within ACX_WORLD_TIMEOUT) and counted; every acquire is matched by
 * a release, the last of which is collective too (a barrier so that no peer still talks to this
 * rank, then the thread stops and the communicator is freed). ACX_ERR_MPI, ACX_ERR_TIMEOUT,
 * ACX_ERR_SYSTEM (thread), ACX_ERR_NO_MEMORY. Not an actor worker thread. */
acx_status_t acxc_ctrl_acquire(acx_world_t *world, acxc_ctrl_t **cp);
acx_status_t acxc_ctrl_release(acxc_ctrl_t *cp, int64_t timeout_ns);
/* The live control plane of `world`, or NULL. Any thread; borrowed. */
acxc_ctrl_t *acxc_ctrl_of(const acx_world_t *world);

/* Returns once the progress thread has finished the turn it was in (and one more): handlers and
 * ticks replaced before the call are no longer running. ACX_ERR_TIMEOUT. Not the progress
 * thread. */
acx_status_t acxc_ctrl_quiesce(acxc_ctrl_t *cp, int64_t timeout_ns);

acx_world_t *acxc_ctrl_world(const acxc_ctrl_t *cp);
int acxc_ctrl_rank(const acxc_ctrl_t *cp);
int acxc_ctrl_size(const acxc_ctrl_t *cp);

/* One handler per message type (a later call replaces it; fn NULL removes it). A message of a
 * type without handler is logged and dropped. One tick function per user slot (0: remote,
 * 1: rebuild). get_handler reads the one set (tests put their own in and the old one back).
 * Any thread. */
void acxc_ctrl_set_handler(acxc_ctrl_t *cp, acxi_ctrl_type_t type, acxc_ctrl_handler_fn fn, void *arg);
void acxc_ctrl_get_handler(acxc_ctrl_t *cp, acxi_ctrl_type_t type, acxc_ctrl_handler_fn *fn, void **arg);
void acxc_ctrl_set_tick(acxc_ctrl_t *cp, int slot, acxc_ctrl_tick_fn fn, void *arg);

/* Sends m to rank dest: sender, seq and epoch are filled in here and m is encoded at once (its
 * errors return here); the Isend is posted by the progress thread. done (may be NULL) reports
 * the send. ACX_ERR_INVALID_ARG (dest), encode statuses, ACX_ERR_INVALID_STATE (stopping),
 * ACX_ERR_NO_MEMORY. Any thread.
 *
 * What a receiver delivers to its handlers: messages whose header names their MPI source as
 * sender, each (sender, seq) at most once. Sequence numbers are given in queue order, so one
 * sender's numbers only grow on the wire; a number at or below the last one received is dropped
 * (logged) unless it carries ACXI_CTRL_FLAG_RESEND and was not delivered yet (checked against the
 * last 16 received from that sender; an older RESEND is dropped too). A message announcing more
 * than ACXI_CTRL_MAX_BYTES is dropped unread, nothing allocated for it. */
acx_status_t acxc_ctrl_send(acxc_ctrl_t *cp, int dest, acxi_ctrl_msg_t *m, acxc_ctrl_done_fn done, void *arg);

/* Tests acting as a misbehaving peer: reserve_seq takes the next sequence number for a message
 * encoded by hand; send_raw sends len bytes as they are (copied) as a control message, in queue
 * order with acxc_ctrl_send's. ACX_ERR_INVALID_ARG, ACX_ERR_NO_MEMORY, ACX_ERR_INVALID_STATE.
 * Any thread. */
uint64_t acxc_ctrl_reserve_seq(acxc_ctrl_t *cp);
acx_status_t acxc_ctrl_send_raw(acxc_ctrl_t *cp, int dest, const void *bytes, size_t len);

/* Bulk data between two ranks on the plane's communicator, matched by (peer, data tag): the MPI
 * tag made from the requester's 64-bit request tag and the direction by acxc_ctrl_data_tag. buf must come from
 * malloc: once the call returned ACX_OK it is the plane's until done runs; on done(ACX_OK) it is
 * the caller's again, on any failure the plane keeps it and frees it when MPI lets go of it
 * (messages over 1 GiB travel as several). deadline_ns is absolute (CLOCK_MONOTONIC): then a
 * receive is cancelled and a send abandoned, and done gets ACX_ERR_TIMEOUT. Any thread; posted by
 * the progress thread. */
acx_status_t acxc_ctrl_data_send(acxc_ctrl_t *cp, int peer, int tag, const void *buf, size_t bytes,
                                 int64_t deadline_ns, acxc_ctrl_done_fn done, void *arg);
acx_status_t acxc_ctrl_data_recv(acxc_ctrl_t *cp, int peer, int tag, void *buf, size_t bytes, int64_t deadline_ns,
                                 acxc_ctrl_done_fn done, void *arg);
/* to_owner: 1 for bytes flowing from the requester to the owner (a put's data), 0 for bytes
 * toward the requester (a get's data, a put's status). */
int acxc_ctrl_data_tag(const acxc_ctrl_t *cp, uint64_t request_tag, int to_owner);

/* Counters (tests, stats). */
typedef struct acxc_ctrl_stats {
  uint64_t sent, received, rejected, unhandled, data_sent, data_received, timeouts;
  uint64_t duplicates; /* RESENDs of messages delivered already, dropped */
} acxc_ctrl_stats_t;
void acxc_ctrl_stats(acxc_ctrl_t *cp, acxc_ctrl_stats_t *st);

#endif
