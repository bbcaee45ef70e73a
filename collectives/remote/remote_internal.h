/* Remote access's counters that the public acx_remote_stats_t does not carry, for tests: how many
 * requests moved their bytes on the device path (docs/resilience.md "Remote access through
 * tokens"). */
#ifndef ACXC_REMOTE_INTERNAL_H
#define ACXC_REMOTE_INTERNAL_H

#include <stdint.h>

#include "acx/world.h"

/* *requested: this rank's requests whose bytes moved through its staging buffers; *served: other
 * ranks' requests this rank served by copying between their staging and its buffers. Both 0 when
 * remote access is not running on w. Either may be NULL. Any thread. */
void acxc_remote_ipc_counts(const acx_world_t *w, uint64_t *requested, uint64_t *served);

#endif
