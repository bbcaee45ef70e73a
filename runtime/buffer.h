/* buffer.c's side of the device internals: the host regions the DeviceActor registers with every
 * new executor, and the staging region it drops at close. */
#ifndef ACXI_BUFFER_H
#define ACXI_BUFFER_H

#include "runtime/device_internal.h"

/* Creates a host region and registers it with the current executor (internal: the device's own
 * staging region, which holds no device reference). */
acx_status_t acxi_host_mem_create(acx_device_t *dev, size_t bytes, int internal, acx_host_mem_t **mem);
/* HOST_REGISTER of one region (its fd travels on the socket in process mode). */
acx_status_t acxi_host_mem_register(acx_device_t *dev, acx_host_mem_t *mem, unsigned flags);
/* Registers every live host region with a new executor (the DeviceActor, state STARTING). */
acx_status_t acxi_host_mem_register_all(acx_device_t *dev);
/* The device is closing: release the staging region. */
void acxi_device_staging_destroy(acx_device_t *dev);
#endif
