/*
 * sim_departures: `kiln sim --departures` (src/cmd only; the replay
 * itself is src/sim/replay.c).
 */
#ifndef KILN_CMD_SIM_DEPARTURES_H
#define KILN_CMD_SIM_DEPARTURES_H

#include <stdint.h>

#include "cmd/cli.h"
#include "sim/sim.h"

struct sim_departures_args {
	struct kn_sim *sim;
	const struct kn_pack_policy *const *policies;
	size_t n_policies;
	const uint64_t *seeds;
	size_t n_seeds;
	int baseline;      /* index into policies, -1: no comparison */
	const char *load;  /* "--load" as given, or NULL: 1 */
	const char *csv;   /* per policy and seed, or NULL */
};

/* The cells MEAN DIFF, SD, T, BETTER, WORSE, EQUAL of a paired
   comparison (better: lower). */
void sim_paired_cells(struct cli_table *t, const struct kn_sim_paired *d);

/* Replay every policy with every seed, print; a CLI exit status. */
int sim_departures_run(const struct cli_ctx *ctx,
		       const struct sim_departures_args *a);

#endif
