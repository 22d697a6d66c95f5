/*
 * sim_autoscale: `kiln sim --autoscale` (src/cmd only; the replay itself
 * is src/sim/autoscale_replay.c).
 */
#ifndef KILN_CMD_SIM_AUTOSCALE_H
#define KILN_CMD_SIM_AUTOSCALE_H

#include <stdint.h>

#include "cmd/cli.h"

struct sim_autoscale_args {
	const char *pools;           /* "POOL; POOL" or "@FILE" */
	const char *pods;            /* the timed pod CSV */
	const char *policy;          /* one packing policy, or NULL: kiln */
	const char *provision_delay; /* a duration, or NULL = 0 */
	uint64_t seed;
};

/* Replay, print; a CLI exit status. */
int sim_autoscale_run(const struct cli_ctx *ctx,
		      const struct sim_autoscale_args *a);

#endif
