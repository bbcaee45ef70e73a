/* buffer.c's side of the device internals: the host regions the DeviceActor registers with every
 * new executor, and the staging region it drops at close. */
#ifndef ACXI_BUFFER_H
#define ACXI_BUFFER_H

#include "runtime/device/device_internal.h"

/* The device's staging region for acx_buffer_write/read and the state of its two halves
 * (dev->staging, under staging_lock). */
typedef struct acxi_staging acxi_staging_t;
/* HOST_REGISTER of one region (its fd travels on the socket in process mode). */
acx_status_t acxi_host_mem_register(acx_device_t *dev, acx_host_mem_t *mem, unsigned flags);
/* Registers every live host region with a new executor (the DeviceActor, state STARTING). */
acx_status_t acxi_host_mem_register_all(acx_device_t *dev);
/* The checks every public call makes of a buffer argument, written once: not NULL
 * (ACX_ERR_NULL_ARG), not freed (ACX_ERR_INVALID_STATE), of `dev` unless dev is NULL
 * (ACX_ERR_INVALID_ARG; `whose` says in the line whose device that is: "the coll's"), its device
 * not closed (ACX_ERR_INVALID_STATE), of its device's current generation (ACX_ERR_STALE_BUFFER;
 * acxi_device_submit checks again where a restart cannot interleave). A rejection is logged once,
 * naming fn (the public function the user called) and name (its parameter); fn NULL logs
 * nothing. Any thread. */
acx_status_t acxi_buffer_check_on(const char *fn, const char *name, acx_buffer_t *buf, acx_device_t *dev,
                                  const char *whose);
/* acxi_buffer_check_on for a buffer of any device (acx_buffer_check and the like). */
acx_status_t acxi_buffer_check(const char *fn, const char *name, acx_buffer_t *buf);
/* A new buffer handle of dev whose memory cmd makes (ALLOC, IPC_IMPORT; buf[0] := its id): sent,
 * then, with done, handed over unanswered, else waited for until timeout_ns (a failure logged
 * naming fn, the call the user made). bytes, dtype, kind, share: the handle's (share: ACXI_SHARE_*). */
acx_status_t acxi_buffer_make(acx_device_t *dev, const char *fn, acxi_cmd_t *cmd, size_t bytes, acx_dtype_t dtype,
                              acx_mem_kind_t kind, int share, int64_t timeout_ns, acx_buffer_t **out,
                              acx_future_t **done);
/* The device is closed and its executor reaped: release the staging region. */
void acxi_device_staging_destroy(acx_device_t *dev);
#endif
