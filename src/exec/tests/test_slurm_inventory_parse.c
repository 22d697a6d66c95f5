/*
 * Unit tests for Slurm's inventory (slurm_inventory_parse.c), on what this machine's
 * slurm-wlm 22.05 printed (tests/fixtures/slurm, the directory in argv[1]):
 * a node idle, running a job, draining, drained and full; a cluster with
 * typed GPUs, MIG instances and shards whose nodes are down and drained;
 * the partitions of both. Then what admission makes of them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/tests/testmain.h"
#include "exec/exec.h"

static const char *fixtures;

static void load(struct kn_slurm_inventory *inv, const char *nodes,
		 const char *partitions)
{
	char path[4096], *text = NULL;
	size_t len = 0;
	struct kn_error err;

	snprintf(path, sizeof(path), "%s/%s", fixtures, nodes);
	assert_int_equal(kn_read_file(path, 1 << 20, &text, &len), 0);
	assert_int_equal(kn_slurm_nodes_parse(text, len, inv, &err), 0);
	free(text);
	if (!partitions)
		return;
	snprintf(path, sizeof(path), "%s/%s", fixtures, partitions);
	assert_int_equal(kn_read_file(path, 1 << 20, &text, &len), 0);
	assert_int_equal(kn_slurm_partitions_parse(text, len, inv, &err), 0);
	free(text);
}

static void test_node_states(void **state)
{
	static const struct {
		const char *file, *state, *reason;
		bool schedulable;
		int cpus_alloc;
		int64_t gpus_used;
	} cases[] = {
		{"sinfo-idle.json", "idle", "", true, 0, 0},
		{"sinfo-mixed.json", "mixed", "", true, 1, 2},
		{"sinfo-allocated.json", "allocated", "", true, 64, 0},
		{"sinfo-draining.json", "draining",
		 "kiln health: disk_free: / has 1.2 GiB free, below 10 GiB",
		 false, 1, 2},
		{"sinfo-drained.json", "drained",
		 "kiln health: disk_free: / has 1.2 GiB free, below 10 GiB",
		 false, 0, 0},
	};
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct kn_slurm_inventory inv = {0};
		const struct kn_slurm_node *n;

		load(&inv, cases[i].file, NULL);
		assert_int_equal(inv.n_nodes, 1);
		n = &inv.nodes[0];
		assert_string_equal(n->name, "vm");
		assert_string_equal(n->state, cases[i].state);
		assert_string_equal(n->reason, cases[i].reason);
		assert_int_equal(n->schedulable, cases[i].schedulable);
		assert_int_equal(n->cpus, 64);
		assert_int_equal(n->cpus_alloc, cases[i].cpus_alloc);
		assert_int_equal(n->memory_mb, 21694);
		assert_string_equal(n->partitions, "kiln,small");
		assert_string_equal(n->features, "fast,ib");
		assert_int_equal(kn_slurm_node_gpus(n), 8);
		assert_string_equal(kn_slurm_node_gpu_type(n), "");
		assert_int_equal(n->n_gres, 1);
		assert_int_equal(n->gres[0].used, cases[i].gpus_used);
		kn_slurm_inventory_release(&inv);
	}
}

static void test_typed_gres_down_and_drained(void **state)
{
	struct kn_slurm_inventory inv = {0};
	const struct kn_slurm_node *cpu, *gpu01, *gpu02;
	(void)state;

	load(&inv, "sinfo-typed.json", NULL);
	assert_int_equal(inv.n_nodes, 3);
	cpu = &inv.nodes[0];
	gpu01 = &inv.nodes[1];
	gpu02 = &inv.nodes[2];
	/* Drained while its slurmd never answered. */
	assert_string_equal(cpu->state, "drained");
	assert_string_equal(cpu->flags, "DRAIN,NOT_RESPONDING");
	assert_string_equal(cpu->reason, "kiln cordon by alice: disk swap");
	assert_false(cpu->schedulable);
	assert_int_equal(cpu->n_gres, 0);
	assert_string_equal(gpu01->state, "unknown");
	assert_false(gpu01->schedulable);
	assert_string_equal(gpu01->partitions, "gpu,off");
	assert_string_equal(gpu02->state, "down");
	assert_string_equal(gpu02->reason, "power supply failed");
	/* gpu:a100:4,gpu:1g.10gb:2,shard:a100:64 */
	assert_int_equal(gpu02->n_gres, 3);
	assert_int_equal(kn_slurm_node_gpus(gpu02), 4);
	assert_string_equal(kn_slurm_node_gpu_type(gpu02), "a100");
	assert_true(gpu02->gres[1].mig);
	assert_string_equal(gpu02->gres[1].type, "1g.10gb");
	assert_int_equal(gpu02->gres[1].count, 2);
	assert_string_equal(kn_slurm_gres_mig_profile(&gpu02->gres[1]),
			    "1g.10gb");
	{
		/* With the GPU's model in front, as AutoDetect=nvml may
		   name it. */
		struct kn_slurm_gres g = {.name = "gpu", .type =
						  "a100_3g.40gb", .mig = true};

		assert_string_equal(kn_slurm_gres_mig_profile(&g), "3g.40gb");
	}
	assert_false(gpu02->gres[2].mig);
	assert_string_equal(gpu02->gres[2].name, "shard");
	assert_int_equal(gpu02->gres[2].count, 64);
	assert_int_equal(gpu02->cpus, 32);
	assert_int_equal(gpu02->memory_mb, 256000);
	kn_slurm_inventory_release(&inv);
}

static void test_partitions(void **state)
{
	struct kn_slurm_inventory inv = {0};
	const struct kn_slurm_partition *p;
	(void)state;

	load(&inv, "sinfo-typed.json", "partitions-typed.txt");
	assert_int_equal(inv.n_partitions, 3);
	p = &inv.partitions[0];
	assert_string_equal(p->name, "gpu");
	assert_true(p->is_default);
	assert_true(p->up);
	assert_int_equal(p->max_time_min, 24 * 60);
	assert_int_equal(p->max_nodes, -1);
	p = &inv.partitions[1];
	assert_string_equal(p->name, "cpu");
	assert_false(p->is_default);
	assert_int_equal(p->max_time_min, 60);
	assert_int_equal(p->max_nodes, 1);
	assert_int_equal(p->max_cpus_per_node, 8);
	assert_int_equal(p->max_mem_per_node_mb, 32000);
	assert_false(inv.partitions[2].up);
	kn_slurm_inventory_release(&inv);

	load(&inv, "sinfo-idle.json", "partitions.txt");
	assert_int_equal(inv.n_partitions, 2);
	assert_int_equal(inv.partitions[0].max_time_min, -1);
	assert_int_equal(inv.partitions[1].max_time_min, 30);
	assert_int_equal(inv.partitions[1].max_cpus_per_node, 4);
	kn_slurm_inventory_release(&inv);
}

static void test_bad_documents(void **state)
{
	static const char *const nodes[] = {
		"", "[]", "{\"nodes\": 3}", "{\"nodes\": [{}]}",
		"{\"nodes\": [{\"name\": \"\"}]}", "{\"nodes\": [1]}",
		"{\"nodes\": [{\"name\": \"a b\"}]}",
		"{\"nodes\": [{\"name\": \"--help\"}]}",
	};
	struct kn_slurm_inventory inv = {0};
	struct kn_error err;
	const char *bad = "PartitionName=a MaxTime=soon\n";
	(void)state;

	for (size_t i = 0; i < sizeof(nodes) / sizeof(nodes[0]); i++)
		assert_int_equal(kn_slurm_nodes_parse(nodes[i],
						      strlen(nodes[i]), &inv,
						      &err),
				 -EINVAL);
	assert_int_equal(kn_slurm_partitions_parse(bad, strlen(bad), &inv,
						   &err),
			 -EINVAL);
	assert_string_equal(err.field, "MaxTime");
	assert_non_null(strstr(err.message, ":1: MaxTime=soon"));
	bad = "PartitionName=a\nNodes=x\n";
	assert_int_equal(kn_slurm_partitions_parse(bad, strlen(bad), &inv,
						   &err),
			 -EINVAL);
	assert_non_null(strstr(err.message, "partition:2:"));
	bad = "PartitionName=a\001b\n";
	assert_int_equal(kn_slurm_partitions_parse(bad, strlen(bad), &inv,
						   &err),
			 -EINVAL);
	/* Odd GRES words are skipped, not misread. */
	bad = "{\"nodes\": [{\"name\": \"n\", \"gres\": \"gpu,gpu:x:y,"
	      "gpu:(S:0),:4,gpu:99999999999999999999,gpu:2K\"}]}";
	assert_int_equal(kn_slurm_nodes_parse(bad, strlen(bad), &inv, &err),
			 0);
	assert_int_equal(kn_slurm_node_gpus(&inv.nodes[0]), 2048);
	assert_false(inv.nodes[0].schedulable);
	kn_slurm_inventory_release(&inv);
}

static void test_admission(void **state)
{
	struct kn_slurm_inventory inv = {0};
	struct kn_slurm_task t = {.ntasks = 1, .gpus = 4, .cpus = 8};
	char why[512];
	(void)state;

	load(&inv, "sinfo-typed.json", "partitions-typed.txt");
	/* The default partition, gpu: two nodes of 4 a100, down or not. */
	assert_int_equal(kn_slurm_admit(&inv, &t, 0, why, sizeof(why)), 0);
	t.ntasks = 2;
	assert_int_equal(kn_slurm_admit(&inv, &t, 0, why, sizeof(why)), 0);
	t.ntasks = 3;
	assert_int_equal(kn_slurm_admit(&inv, &t, 0, why, sizeof(why)),
			 -ENOSPC);
	assert_string_equal(why, "can never fit in Slurm partition gpu: needs "
			    "3 tasks x (4 GPUs, 8 CPUs) but it holds at most 2 "
			    "(2 nodes, the largest with 4 GPUs, 64 shards, 32 "
			    "CPUs, 256000 MiB)");
	/* MIG instances and shards by their GRES. */
	t.ntasks = 4;
	t.gpus = 0;
	t.mig_profile = "1g.10gb";
	assert_int_equal(kn_slurm_admit(&inv, &t, 0, why, sizeof(why)), 0);
	t.mig_profile = "3g.40gb";
	assert_int_equal(kn_slurm_admit(&inv, &t, 0, why, sizeof(why)),
			 -ENOSPC);
	t.mig_profile = NULL;
	t.shards = 64;
	t.ntasks = 2;
	assert_int_equal(kn_slurm_admit(&inv, &t, 0, why, sizeof(why)), 0);
	t.shards = 65;
	assert_int_equal(kn_slurm_admit(&inv, &t, 0, why, sizeof(why)),
			 -ENOSPC);
	/* The cpu partition's limits: 8 CPUs and 32000 MiB a node, one
	   node, an hour. */
	t = (struct kn_slurm_task){.ntasks = 1, .cpus = 8, .partition = "cpu"};
	assert_int_equal(kn_slurm_admit(&inv, &t, 0, why, sizeof(why)), 0);
	t.cpus = 9;
	assert_int_equal(kn_slurm_admit(&inv, &t, 0, why, sizeof(why)),
			 -ENOSPC);
	assert_non_null(strstr(why, "MaxNodes=1; MaxCPUsPerNode=8; "
				    "MaxMemPerNode=32000M"));
	t.cpus = 1;
	t.memory_mb = 32001;
	assert_int_equal(kn_slurm_admit(&inv, &t, 0, why, sizeof(why)),
			 -ENOSPC);
	t.memory_mb = 0;
	t.ntasks = 9;
	assert_int_equal(kn_slurm_admit(&inv, &t, 0, why, sizeof(why)),
			 -ENOSPC);
	t.ntasks = 1;
	assert_int_equal(kn_slurm_admit(&inv, &t, 59 * 60000, why,
					sizeof(why)), 0);
	assert_int_equal(kn_slurm_admit(&inv, &t, 60 * 60000, why,
					sizeof(why)), -ENOSPC);
	assert_string_equal(why, "can never fit in Slurm partition cpu: its "
			    "MaxTime is 60 min, the job's limit 61 min (its "
			    "timeout, checkpoint grace and a minute)");
	t.partition = "nope";
	assert_int_equal(kn_slurm_admit(&inv, &t, 0, why, sizeof(why)),
			 -ENOENT);
	assert_string_equal(why, "Slurm has no partition nope (it has: gpu "
			    "cpu off)");
	kn_slurm_inventory_release(&inv);
	/* Nothing known of partitions: no judgement. */
	t.partition = NULL;
	t.ntasks = 1000;
	assert_int_equal(kn_slurm_admit(&inv, &t, 0, why, sizeof(why)), 0);
}

KN_TEST_MAIN_WITH_PATH(fixtures, "FIXTURES_DIR", NULL, NULL,
	cmocka_unit_test(test_node_states),
	cmocka_unit_test(test_typed_gres_down_and_drained),
	cmocka_unit_test(test_partitions),
	cmocka_unit_test(test_bad_documents),
	cmocka_unit_test(test_admission))
