/*
 * libFuzzer harness for what the Slurm executor reads from Slurm's
 * commands (exec/slurm_inventory_parse.c): the input is tried as `sinfo --json` and as
 * `scontrol show partition -o`. What parses must hold to its bounds (a
 * node's allocated CPUs within its CPUs, GRES counts not negative, names
 * terminated), and admission over it must answer without a fault for a
 * few gangs. It is also tried as a shim's node file (TASK_DIR.node),
 * which must give a node name or nothing.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_nodes(const struct kn_slurm_inventory *inv)
{
	for (size_t i = 0; i < inv->n_nodes; i++) {
		const struct kn_slurm_node *n = &inv->nodes[i];

		if (!n->name[0] || memchr(n->name, '\0', sizeof(n->name)) ==
					   NULL ||
		    n->cpus_alloc > n->cpus || n->n_gres > KN_SLURM_GRES_MAX ||
		    kn_slurm_node_gpus(n) < 0)
			abort();
		for (size_t k = 0; k < n->n_gres; k++)
			if (n->gres[k].count <= 0 || n->gres[k].used < 0)
				abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct kn_slurm_task gangs[] = {
		{.ntasks = 1},
		{.ntasks = 2, .gpus = 1, .cpus = 4, .memory_mb = 1024},
		{.ntasks = 3, .mig_profile = "1g.10gb", .partition = "gpu"},
		{.ntasks = 1, .shards = 25, .checkpoint_grace_ms = 30000},
	};
	struct kn_slurm_inventory inv = {0};
	struct kn_error err;
	char why[512];

	if (size > 65536)
		return 0;
	if (kn_slurm_nodes_parse((const char *)data, size, &inv, &err) == 0)
		check_nodes(&inv);
	if (kn_slurm_partitions_parse((const char *)data, size, &inv, &err) ==
	    0)
		for (size_t i = 0; i < inv.n_partitions; i++)
			if (!inv.partitions[i].name[0])
				abort();
	for (size_t i = 0; i < sizeof(gangs) / sizeof(gangs[0]); i++) {
		int rc = kn_slurm_admit(&inv, &gangs[i], 3600000, why,
					sizeof(why));

		if (rc != 0 && rc != -ENOSPC && rc != -ENOENT)
			abort();
		if (rc != 0 && !why[0])
			abort();
	}
	kn_slurm_inventory_release(&inv);
	/* The input as a shim's node file: a name, terminated, or refused. */
	if (kn_slurm_node_file_parse((const char *)data, size, why, 65) == 0 &&
	    (strlen(why) > 64 || !why[0] || why[0] == '-'))
		abort();
	return 0;
}
