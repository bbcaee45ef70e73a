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
/* acx_buffer_check for another public call: a rejection's line names fn (the function the user
 * called) and name (its parameter); fn NULL logs nothing. */
acx_status_t acxi_buffer_check(const char *fn, const char *name, acx_buffer_t *buf);
/* The device is closed and its executor reaped: release the staging region. */
void acxi_device_staging_destroy(acx_device_t *dev);
#endif
