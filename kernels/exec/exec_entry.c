/* libacx_exec's one exported function: the table through which the rank's inline transport runs
 * an executor loop on one of its threads (runtime/proto/exec_api.h). */
#include "acx/config.h"
#include "kernels/exec/engine.h"
#include "kernels/exec/exec_loop.h"

static const acxi_exec_entry_t entry = {
    .abi = ACXI_EXEC_ABI,
    .engine_find = acxi_engine_find,
    .loop_run = acxi_exec_loop_run,
    .log_set_rank = acx_log_set_rank,
};

__attribute__((visibility("default"))) const acxi_exec_entry_t *acx_exec_entry(uint32_t abi) {
  return abi == ACXI_EXEC_ABI ? &entry : NULL;
}
