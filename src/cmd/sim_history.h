/*
 * sim_history: the trace behind `kiln sim --from-history`, from the
 * server's API (src/cmd only; the mapping is src/sim/history_trace.c).
 */
#ifndef KILN_CMD_SIM_HISTORY_H
#define KILN_CMD_SIM_HISTORY_H

#include <stdbool.h>
#include <stddef.h>

#include "cmd/cli.h"
#include "sim/sim.h"

/*
 * Write DIR/pods.csv from the server's ended jobs and, when with_nodes,
 * DIR/nodes.csv from its nodes (otherwise the caller has its own node
 * list, and gpu_model constraints are written as they are). Returns
 * CLI_GO or an exit status after printing why.
 */
int sim_history_write(const struct cli_ctx *ctx, const char *dir,
		      bool with_nodes, struct kn_sim_history *out);

#endif
