/*
 * kn_sched_place with a packing policy (req->packing) against the packing
 * model itself: on random GPU clusters, a one-task request must land on
 * the node and GPUs that kn_pack_place picks with the same policy on the
 * same state and typical workload, and the filters above the policy
 * (taints, gangs) must still hold. A hand-built case checks that kiln and
 * best fit really choose differently where the tests of the server rely
 * on it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/tests/testmain.h"
#include "sched/sched.h"

#define MAX_NODES 10
#define MAX_SHAPES 12

static const char *const MODELS[] = {"H100-80GB", "A100-80GB"};

struct world {
	struct kn_sched_node nodes[MAX_NODES];
	struct kn_sched_device devices[MAX_NODES][KN_PACK_MAX_GPUS];
	char names[MAX_NODES][24];
	struct kn_sched_cluster cluster;
	struct kn_pack_node_spec specs[MAX_NODES];
	struct kn_pack *pack;
	struct kn_sched_shape shapes[MAX_SHAPES];
	const char *const *shape_models[MAX_SHAPES];
	size_t n_shapes;
};

static int draw_milli(struct kn_rng *rng)
{
	static const int shares[] = {100, 250, 300, 500, 600, 750, 900};

	if (kn_rng_below(rng, 2))
		return shares[kn_rng_below(rng, 7)];
	return 1000 * (int)(1 + kn_rng_below(rng, kn_rng_below(rng, 4) ? 2 : 8));
}

/* A random cluster in both models, charged alike. */
static void world_build(struct world *w, struct kn_rng *rng)
{
	size_t n = 1 + kn_rng_below(rng, MAX_NODES);

	memset(w, 0, sizeof(*w));
	for (size_t i = 0; i < n; i++) {
		int g = (int)kn_rng_below(rng, KN_PACK_MAX_GPUS + 1);
		const char *model = MODELS[kn_rng_below(rng, 2)];

		snprintf(w->names[i], sizeof(w->names[i]), "n%zu", i);
		w->nodes[i].name = w->names[i];
		w->nodes[i].schedulable = true;
		w->nodes[i].devices = w->devices[i];
		w->nodes[i].n_devices = (size_t)g;
		for (int d = 0; d < g; d++) {
			w->devices[i][d].index = d;
			w->devices[i][d].model = model;
		}
		w->specs[i].name = w->names[i];
		w->specs[i].cpu_milli = 128000;
		w->specs[i].n_gpus = g;
		w->specs[i].model = g ? model : NULL;
	}
	w->cluster.nodes = w->nodes;
	w->cluster.n_nodes = n;
	assert_int_equal(kn_pack_new(w->specs, n, &w->pack, NULL), 0);

	/* The workload: some shapes, a few held to one model. */
	w->n_shapes = 1 + kn_rng_below(rng, MAX_SHAPES);
	for (size_t k = 0; k < w->n_shapes; k++) {
		w->shapes[k].gpu_milli = draw_milli(rng);
		if (kn_rng_below(rng, 4) == 0) {
			w->shape_models[k] = &MODELS[kn_rng_below(rng, 2)];
			w->shapes[k].gpu_models = w->shape_models[k];
			w->shapes[k].n_gpu_models = 1;
		}
	}
	{
		struct kn_pack_pod typical[MAX_SHAPES];

		memset(typical, 0, sizeof(typical));
		for (size_t k = 0; k < w->n_shapes; k++) {
			int milli = w->shapes[k].gpu_milli;

			typical[k].num_gpu = milli >= 1000 ? milli / 1000 : 1;
			typical[k].gpu_milli = milli >= 1000 ? 1000 : milli;
			if (w->shapes[k].n_gpu_models) {
				typical[k].gpu_spec = w->shapes[k].gpu_models[0];
				typical[k].models = kn_pack_models(
					w->pack, typical[k].gpu_spec,
					&typical[k].constrained);
			}
		}
		kn_pack_set_typical(w->pack, typical, w->n_shapes);
	}

	/* Use: whole GPUs and shares, the same in both. */
	for (size_t i = 0; i < n; i++)
		for (size_t d = 0; d < w->nodes[i].n_devices; d++) {
			static const int uses[] = {0, 0, 1000, 200, 500, 700};
			int used = uses[kn_rng_below(rng, 6)];
			struct kn_pack_pod pod = {.num_gpu = 1};
			int pos = (int)d;

			if (!used)
				continue;
			pod.gpu_milli = used;
			w->devices[i][d].used_milli = used;
			assert_int_equal(kn_pack_bind(w->pack, i, &pod, &pos, 1),
					 0);
		}
}

static void test_matches_pack_place(void **state)
{
	struct kn_rng rng;
	int compared = 0, differed_from_builtin = 0;

	(void)state;
	kn_rng_seed(&rng, 2026);
	for (int round = 0; round < 400; round++) {
		for (size_t p = 0; kn_pack_policies[p]; p++) {
			const struct kn_pack_policy *policy = kn_pack_policies[p];
			struct world w;
			struct kn_sched_packing packing;
			struct kn_sched_request req = {.tasks = 1};
			struct kn_sched_binding got, builtin;
			struct kn_pack_placement want;
			struct kn_pack_pod pod = {0};
			struct kn_rng pack_rng;
			int rc_sched, rc_pack, rc_builtin;

			if (!strcmp(policy->name, "random"))
				continue; /* draws per node: checked below */
			world_build(&w, &rng);
			packing = (struct kn_sched_packing){
				policy, w.shapes, w.n_shapes, 7};
			req.gpu_milli = draw_milli(&rng);
			pod.num_gpu = req.gpu_milli >= 1000
					      ? req.gpu_milli / 1000
					      : 1;
			pod.gpu_milli = req.gpu_milli >= 1000 ? 1000
							      : req.gpu_milli;
			kn_rng_seed(&pack_rng, 7);
			rc_pack = kn_pack_place(w.pack, policy, &pod, &pack_rng,
						&want);

			rc_builtin = kn_sched_place(&w.cluster, &req, &builtin,
						    NULL, 0);
			if (rc_builtin == 0)
				kn_sched_release(&w.cluster, &req, &builtin);
			req.packing = &packing;
			rc_sched = kn_sched_place(&w.cluster, &req, &got, NULL,
						  0);
			assert_int_equal(rc_sched == 0, rc_pack == 0);
			assert_int_equal(rc_sched == 0, rc_builtin == 0);
			if (rc_sched == 0) {
				compared++;
				assert_int_equal(got.node, want.node);
				assert_int_equal(got.n_devices, want.n_gpus);
				for (int k = 0; k < got.n_devices; k++)
					assert_int_equal(got.devices[k],
							 want.gpus[k]);
				assert_int_equal(got.milli_per_device,
						 req.gpu_milli >= 1000
							 ? 1000
							 : req.gpu_milli);
				differed_from_builtin +=
					got.node != builtin.node ||
					got.devices[0] != builtin.devices[0];
			}
			kn_pack_free(w.pack);
		}
	}
	/* Enough placements compared, and the policies are not all the
	   built-in rule under another name. */
	assert_true(compared > 1000);
	assert_true(differed_from_builtin > 50);
}

/* The random policy: some feasible node, the same one for the same seed. */
static void test_random_is_seeded(void **state)
{
	struct kn_rng rng;

	(void)state;
	kn_rng_seed(&rng, 99);
	for (int round = 0; round < 200; round++) {
		struct world w;
		struct kn_sched_packing packing;
		struct kn_sched_request req = {.tasks = 1};
		struct kn_sched_binding a, b;
		int rc;

		world_build(&w, &rng);
		packing = (struct kn_sched_packing){
			kn_pack_policy_find("random"), w.shapes, w.n_shapes,
			(uint64_t)round};
		req.gpu_milli = draw_milli(&rng);
		req.packing = &packing;
		rc = kn_sched_place(&w.cluster, &req, &a, NULL, 0);
		if (rc == 0) {
			kn_sched_release(&w.cluster, &req, &a);
			assert_int_equal(
				kn_sched_place(&w.cluster, &req, &b, NULL, 0), 0);
			assert_int_equal(a.node, b.node);
			assert_int_equal(a.devices[0], b.devices[0]);
		}
		kn_pack_free(w.pack);
	}
}

/*
 * Two idle nodes, a with 2 GPUs and b with 1, and a 500-milli share
 * whose own shape is the whole workload. Built-in best fit and the
 * best-fit policy take b (least GPU left); for kiln both nodes score
 * the same (a half-used GPU still holds the typical share) and node
 * order gives a, keeping b's single GPU whole.
 */
static void test_kiln_and_best_fit_differ(void **state)
{
	struct kn_sched_device da[2] = {{.index = 0, .model = "H100-80GB"},
					{.index = 1, .model = "H100-80GB"}};
	struct kn_sched_device db[1] = {{.index = 0, .model = "H100-80GB"}};
	struct kn_sched_node nodes[2] = {
		{.name = "a", .schedulable = true, .devices = da, .n_devices = 2},
		{.name = "b", .schedulable = true, .devices = db, .n_devices = 1},
	};
	struct kn_sched_cluster cluster = {nodes, 2};
	struct kn_sched_shape shape = {.gpu_milli = 500};
	struct kn_sched_packing packing = {NULL, &shape, 1, 1};
	struct kn_sched_request req = {.tasks = 1, .gpu_milli = 500};
	struct kn_sched_binding b;

	(void)state;
	assert_int_equal(kn_sched_place(&cluster, &req, &b, NULL, 0), 0);
	assert_int_equal(b.node, 1);
	kn_sched_release(&cluster, &req, &b);

	req.packing = &packing;
	packing.policy = kn_pack_policy_find("best-fit");
	assert_int_equal(kn_sched_place(&cluster, &req, &b, NULL, 0), 0);
	assert_int_equal(b.node, 1);
	kn_sched_release(&cluster, &req, &b);

	packing.policy = kn_pack_policy_find("kiln");
	assert_int_equal(kn_sched_place(&cluster, &req, &b, NULL, 0), 0);
	assert_int_equal(b.node, 0);
	assert_int_equal(da[0].used_milli, 500);
	kn_sched_release(&cluster, &req, &b);
	assert_int_equal(da[0].used_milli, 0);
}

/* Filters come first: a taint keeps kiln's choice off a node, and a
   gang still lands whole. */
static void test_filters_and_gangs_hold(void **state)
{
	struct kn_sched_taint taint = {"sku", "gpu", "NoSchedule"};
	struct kn_sched_device da[2] = {{.index = 0, .model = "H100-80GB"},
					{.index = 1, .model = "H100-80GB"}};
	struct kn_sched_device db[1] = {{.index = 0, .model = "H100-80GB"}};
	struct kn_sched_node nodes[2] = {
		{.name = "a", .schedulable = true, .devices = da, .n_devices = 2,
		 .taints = &taint, .n_taints = 1},
		{.name = "b", .schedulable = true, .devices = db, .n_devices = 1},
	};
	struct kn_sched_cluster cluster = {nodes, 2};
	struct kn_sched_shape shape = {.gpu_milli = 500};
	struct kn_sched_packing packing = {kn_pack_policy_find("kiln"), &shape,
					   1, 1};
	struct kn_sched_request req = {.tasks = 1, .gpu_milli = 500,
				       .packing = &packing};
	struct kn_sched_binding b[3];

	(void)state;
	assert_int_equal(kn_sched_place(&cluster, &req, b, NULL, 0), 0);
	assert_int_equal(b[0].node, 1);
	kn_sched_release(&cluster, &req, b);

	/* Three whole-GPU tasks need both nodes once the taint is gone. */
	nodes[0].n_taints = 0;
	req.tasks = 3;
	req.gpu_milli = 1000;
	assert_int_equal(kn_sched_place(&cluster, &req, b, NULL, 0), 0);
	assert_int_equal(da[0].used_milli + da[1].used_milli + db[0].used_milli,
			 3000);
	req.tasks = 1;
	assert_int_equal(kn_sched_place(&cluster, &req, b, NULL, 0), -ENOSPC);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_matches_pack_place),
	cmocka_unit_test(test_random_is_seeded),
	cmocka_unit_test(test_kiln_and_best_fit_differ),
	cmocka_unit_test(test_filters_and_gangs_hold))
