/*
 * Unit and property tests for the packing model and policies. The policy
 * scores are checked against values worked out by hand in the comments
 * (METHOD.md §2.6 arithmetic); the property tests place random pods on
 * random clusters and check every invariant a placement must keep.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/tests/testmain.h"
#include "sched/sched.h"

static struct kn_pack *two_nodes(void)
{
	/* node 0: 8 GPUs, 96 CPUs; node 1: 2 GPUs, 64 CPUs. */
	const struct kn_pack_node_spec specs[] = {
		{"a", 96000, 393216, 8, "G2"},
		{"b", 64000, 262144, 2, "P100"},
	};
	struct kn_pack *c = NULL;

	assert_int_equal(kn_pack_new(specs, 2, &c, NULL), 0);
	return c;
}

static struct kn_pack_pod share(int milli, int cpu)
{
	struct kn_pack_pod p = {cpu, 1024, 1, milli, 0, false, NULL};

	return p;
}

static struct kn_pack_pod whole(int k, int cpu)
{
	struct kn_pack_pod p = {cpu, 1024, k, 1000, 0, false, NULL};

	return p;
}

/*
 * The snapshot every score test reads: a 500-milli share (8 CPUs) on GPU
 * 0 of node a, so a has GPUs [500, 1000 x 7] and 88 CPUs free, b is
 * untouched. Typical set: a 600-milli share and a whole GPU, 0.5 each.
 */
static struct kn_pack *snapshot(void)
{
	struct kn_pack *c = two_nodes();
	struct kn_pack_pod first = share(500, 8000);
	struct kn_pack_pod typical[2] = {share(600, 1000), whole(1, 1000)};
	int gpu0 = 0;

	kn_pack_set_typical(c, typical, 2);
	assert_int_equal(kn_pack_n_typical(c), 2);
	assert_int_equal(kn_pack_bind(c, 0, &first, &gpu0, 1), 0);
	return c;
}

static int64_t score(struct kn_pack *c, const char *policy, size_t node,
		     const struct kn_pack_pod *pod, int *gpu)
{
	const struct kn_pack_policy *p = kn_pack_policy_find(policy);
	struct kn_rng rng;

	assert_non_null(p);
	kn_rng_seed(&rng, 1);
	*gpu = -1;
	return p->score(c, node, pod, &rng, gpu);
}

/* The pods of the snapshot cases: a share of milli of a GPU, k whole
   GPUs, each with cpu milli-CPUs and 1 GiB. */
#define SHARE(milli, cpu) {cpu, 1024, 1, milli, 0, false, NULL}
#define WHOLE(k, cpu) {cpu, 1024, k, 1000, 0, false, NULL}
#define ANY_GPU (-2) /* the case does not check the GPU chosen */

static const struct {
	const char *policy;
	size_t node; /* 0: a, 1: b */
	struct kn_pack_pod pod;
	int64_t score;
	int gpu;
} SNAPSHOT_SCORES[] = {
	/* a: 88/128*4/128 + 7500/8000*300/8000 = 0.056640625;
	   100 * (1 - 0.0283203125) = 97.17 -> 97. */
	{"dot-product", 0, SHARE(300, 4000), 97, ANY_GPU},
	/* b: 0.5*0.03125 + 0.25*0.0375 = 0.025 -> 98.75 -> 98. */
	{"dot-product", 1, SHARE(300, 4000), 98, ANY_GPU},
	/* a holds only sharing pods: 25*500/8000 = 1, + 75. */
	{"gpu-clustering", 0, SHARE(300, 4000), 76, ANY_GPU},
	/* b holds nothing: 25*6000/8000 = 18, + 25. */
	{"gpu-clustering", 1, SHARE(300, 4000), 43, ANY_GPU},
	/* a holds only other kinds for a 2-GPU pod: base alone. */
	{"gpu-clustering", 0, WHOLE(2, 4000), 1, ANY_GPU},
	{"gpu-clustering", 0, {1000, 1, 0, 0, 0, false, NULL}, 0, ANY_GPU},
	/* a: the 500-free GPU is taken: 100 - (500*100/1000)/10 = 95. */
	{"gpu-packing", 0, SHARE(300, 4000), 95, ANY_GPU},
	/* b: all GPUs free: 33 - 2. */
	{"gpu-packing", 1, SHARE(300, 4000), 31, ANY_GPU},
	/* a, 600 milli: only idle GPUs fit: max(50 - 1, 33). */
	{"gpu-packing", 0, SHARE(600, 4000), 49, ANY_GPU},
	{"gpu-packing", 0, WHOLE(2, 4000), 48, ANY_GPU},
	/* a: 1 - (0.5*84000/128000 + 0.5*7200/8000) = 0.221875 -> 22. */
	{"best-fit", 0, SHARE(300, 4000), 22, ANY_GPU},
	/* b: 1 - (0.5*60000/128000 + 0.5*1700/8000) = 0.659375 -> 65. */
	{"best-fit", 1, SHARE(300, 4000), 65, ANY_GPU},
	/* a, GPU 0 -> 200 free: F' = 200, 100*sigmoid(0.3) = 57.4 -> 57;
	   GPU 1 -> 700: F' = 0.5*500 + 0.5*1200 = 850, sigmoid(-0.35)
	   -> 41. The best GPU is 0. */
	{"fgd", 0, SHARE(300, 4000), 57, 0},
	/* b: [700, 1000]: F' = 0.5*700 = 350 -> 41, on GPU 0. */
	{"fgd", 1, SHARE(300, 4000), 41, 0},
	/* kiln: 4 * fgd, + 2 on a node already in use, + 1 on a GPU
	   already shared: a is used and GPU 0 shared, b neither. */
	{"kiln", 0, SHARE(300, 4000), 4 * 57 + 2 + 1, 0},
	{"kiln", 1, SHARE(300, 4000), 4 * 41, ANY_GPU},
};

static void test_snapshot_scores(void **state)
{
	struct kn_pack *c = snapshot();

	/* a before: both shapes see the 500-free GPU as too small:
	   0.5*500 + 0.5*500 = 500. */
	assert_true(kn_pack_node_frag(c, 0) == 500.0);
	assert_true(kn_pack_node_frag(c, 1) == 0.0);
	for (size_t i = 0; i < sizeof(SNAPSHOT_SCORES) / sizeof(*SNAPSHOT_SCORES);
	     i++) {
		int gpu;
		int64_t got = score(c, SNAPSHOT_SCORES[i].policy,
				    SNAPSHOT_SCORES[i].node,
				    &SNAPSHOT_SCORES[i].pod, &gpu);

		if (got != SNAPSHOT_SCORES[i].score ||
		    (SNAPSHOT_SCORES[i].gpu != ANY_GPU &&
		     gpu != SNAPSHOT_SCORES[i].gpu))
			fail_msg("case %zu (%s on node %zu): %lld on GPU %d", i,
				 SNAPSHOT_SCORES[i].policy,
				 SNAPSHOT_SCORES[i].node, (long long)got, gpu);
	}
	kn_pack_free(c);
}

/*
 * kiln's tie-breaks: where FGD scores two GPUs alike, the share goes to
 * the GPU already shared, and where it scores two nodes alike, to the
 * node in use. Typical set: one 600-milli share, so a 10-milli share
 * changes fragmentation by at most 10 (100 * sigmoid(0.01) -> 50).
 */
static void test_kiln_ties(void **state)
{
	struct kn_pack *c = two_nodes();
	struct kn_pack_pod first = share(500, 8000), pod = share(10, 1000);
	struct kn_pack_pod typical = share(600, 1000);
	struct kn_pack_placement where;
	struct kn_rng rng;
	int gpu3 = 3, gpu;

	kn_pack_set_typical(c, &typical, 1);
	assert_int_equal(kn_pack_bind(c, 0, &first, &gpu3, 1), 0);
	/* a: GPU 0 -> 990, F stays 500 (GPU 3); GPU 3 -> 490, F = 490:
	   both 50, fgd keeps the first. */
	assert_int_equal(score(c, "fgd", 0, &pod, &gpu), 50);
	assert_int_equal(gpu, 0);
	assert_int_equal(score(c, "kiln", 0, &pod, &gpu), 4 * 50 + 2 + 1);
	assert_int_equal(gpu, 3);
	/* b: untouched, F 0 -> 0: 50 for fgd as well. */
	assert_int_equal(score(c, "fgd", 1, &pod, &gpu), 50);
	assert_int_equal(score(c, "kiln", 1, &pod, &gpu), 4 * 50);
	/* Placed with b first in the tie order, kiln still takes a's
	   shared GPU. */
	assert_int_equal(kn_pack_set_order(c, (size_t[]){1, 0}, 2), 0);
	kn_rng_seed(&rng, 1);
	assert_int_equal(kn_pack_place(c, kn_pack_policy_find("kiln"), &pod,
				       &rng, &where),
			 0);
	assert_int_equal(where.node, 0);
	assert_int_equal(where.gpus[0], 3);
	kn_pack_free(c);
}

/*
 * kiln's tie-break for a CPU-only task: among FGD's ties, a node where
 * the task leaves the idle GPUs the CPU the typical workload asks with
 * them, before a node in use. Typical set: a whole GPU with 16 CPUs, so
 * each idle GPU needs 16 CPUs.
 */
static void test_kiln_cpu_only(void **state)
{
	struct kn_pack *c = two_nodes();
	struct kn_pack_pod first = whole(4, 4000), pod = {30000, 1024, 0, 0,
							  0, false, NULL};
	struct kn_pack_pod typical = whole(1, 16000);
	struct kn_pack_placement where;
	struct kn_rng rng;
	int gpus[4] = {0, 1, 2, 3}, gpu;

	kn_pack_set_typical(c, &typical, 1);
	assert_int_equal(kn_pack_bind(c, 0, &first, gpus, 4), 0);
	/* a: 4 idle GPUs need 64 CPUs; 92 free, 62 after the task: short.
	   b: 2 idle GPUs need 32 CPUs; 64 free, 34 after: enough. Either
	   way every idle GPU still fits the typical shape: F 0 -> 0, 50. */
	assert_int_equal(score(c, "fgd", 0, &pod, &gpu), 50);
	assert_int_equal(score(c, "fgd", 1, &pod, &gpu), 50);
	assert_int_equal(score(c, "kiln", 0, &pod, &gpu), 8 * 50 + 2);
	assert_int_equal(score(c, "kiln", 1, &pod, &gpu), 8 * 50 + 4);
	/* With a first in the tie order, fgd takes a and kiln b. */
	kn_rng_seed(&rng, 1);
	assert_int_equal(kn_pack_place(c, kn_pack_policy_find("kiln"), &pod,
				       &rng, &where),
			 0);
	assert_int_equal(where.node, 1);
	assert_int_equal(kn_pack_unbind(c, &where, &pod), 0);
	assert_int_equal(kn_pack_place(c, kn_pack_policy_find("fgd"), &pod,
				       &rng, &where),
			 0);
	assert_int_equal(where.node, 0);
	kn_pack_free(c);
}

/*
 * The CPU per GPU of kiln's CPU rule: the typical GPU shapes' CPU over
 * the GPU they ask (a share as its fraction), CPU-only shapes left out.
 * Typical set, one of each: a whole GPU with 16 CPUs, a half-GPU share
 * with 4 CPUs, a CPU-only task with 8: (16 + 4) / 1.5 = 13.33 CPUs per
 * GPU, so b's two idle GPUs need 26.67 of its 64 CPUs. (With the CPU-only
 * shape counted it would be 37.33; with the share as a whole GPU, 20.)
 */
static void test_kiln_cpu_per_gpu(void **state)
{
	struct kn_pack *c = two_nodes();
	struct kn_pack_pod typical[3] = {whole(1, 16000), share(500, 4000),
					 {8000, 1024, 0, 0, 0, false, NULL}};
	struct kn_pack_pod fits = {37000, 1024, 0, 0, 0, false, NULL};
	struct kn_pack_pod over = {37500, 1024, 0, 0, 0, false, NULL};
	int gpu;

	kn_pack_set_typical(c, typical, 3);
	assert_int_equal(kn_pack_n_typical(c), 3);
	/* 27 CPUs left >= 26.67; 26.5 left is short. FGD sees neither:
	   every GPU shape still fits, 50 both times. */
	assert_int_equal(score(c, "fgd", 1, &fits, &gpu), 50);
	assert_int_equal(score(c, "fgd", 1, &over, &gpu), 50);
	assert_int_equal(score(c, "kiln", 1, &fits, &gpu), 8 * 50 + 4);
	assert_int_equal(score(c, "kiln", 1, &over, &gpu), 8 * 50);
	kn_pack_free(c);
}

/* A pod leaving gives back exactly what it took, tags included, and a
   departure the node could not hold is refused without a change. */
static void test_unbind(void **state)
{
	struct kn_pack *c = two_nodes();
	struct kn_pack_pod s1 = share(300, 4000), s2 = share(200, 2000);
	struct kn_pack_pod w2 = whole(2, 8000);
	struct kn_pack_placement a, b, d;
	struct kn_pack_node_state st;
	struct kn_rng rng;

	(void)state;
	kn_rng_seed(&rng, 1);
	assert_int_equal(kn_pack_place(c, kn_pack_policy_find("best-fit"),
				       &s1, &rng, &a), 0);
	assert_int_equal(kn_pack_place(c, kn_pack_policy_find("best-fit"),
				       &s2, &rng, &b), 0);
	assert_int_equal(kn_pack_place(c, kn_pack_policy_find("best-fit"),
				       &w2, &rng, &d), 0);
	kn_pack_node_state(c, a.node, &st);
	assert_true(st.tags & 1u);
	assert_int_equal(kn_pack_unbind(c, &a, &s1), 0);
	kn_pack_node_state(c, a.node, &st);
	/* b's share still holds the sharing tag. */
	assert_true(st.tags & 1u);
	assert_int_equal(kn_pack_unbind(c, &b, &s2), 0);
	assert_int_equal(kn_pack_unbind(c, &d, &w2), 0);
	for (size_t i = 0; i < 2; i++) {
		kn_pack_node_state(c, i, &st);
		assert_int_equal(st.tags, 0);
		for (int g = 0; g < st.n_gpus; g++)
			assert_int_equal(st.gpu_free[g], 1000);
	}
	assert_int_equal(kn_pack_idle_milli(c), kn_pack_gpu_capacity(c));
	/* Leaving twice would free more than the node has. */
	assert_int_equal(kn_pack_unbind(c, &d, &w2), -EINVAL);
	assert_int_equal(kn_pack_idle_milli(c), kn_pack_gpu_capacity(c));
	kn_pack_free(c);
}

/* The paper's cut: shapes by count until 95 % of pods are covered. */
static void test_typical_cut(void **state)
{
	struct kn_pack *c = two_nodes();
	struct kn_pack_pod pods[20];

	for (int i = 0; i < 19; i++)
		pods[i] = share(500, 1000);
	pods[19] = whole(1, 1000);
	kn_pack_set_typical(c, pods, 20);
	assert_int_equal(kn_pack_n_typical(c), 1); /* 19/20 = 95 % */
	/* 18 + 1 + 1: 90 % needs one more shape, and that reaches 95 %. */
	pods[18] = whole(2, 1000);
	kn_pack_set_typical(c, pods, 20);
	assert_int_equal(kn_pack_n_typical(c), 2);
	pods[17] = whole(4, 1000);
	kn_pack_set_typical(c, pods, 20);
	assert_int_equal(kn_pack_n_typical(c), 3); /* 17 + 1 + 1 */
	kn_pack_free(c);
}

/* A shape given once with its count is the same typical set, and the
   same fragmentation, as the shape given that many times. */
static void test_typical_weighted(void **state)
{
	struct kn_pack *listed = two_nodes(), *counted = two_nodes();
	struct kn_pack_pod pods[20], shapes[3] = {
		share(500, 1000), whole(2, 1000), whole(4, 1000)};
	const size_t weights[3] = {17, 2, 1};
	struct kn_pack_pod held = share(300, 1000);
	int pos = 0;

	for (int i = 0; i < 20; i++)
		pods[i] = shapes[i < 17 ? 0 : i < 19 ? 1 : 2];
	kn_pack_set_typical(listed, pods, 20);
	kn_pack_set_typical_weighted(counted, shapes, weights, 3);
	assert_int_equal(kn_pack_n_typical(counted), kn_pack_n_typical(listed));
	assert_int_equal(kn_pack_bind(listed, 0, &held, &pos, 1), 0);
	assert_int_equal(kn_pack_bind(counted, 0, &held, &pos, 1), 0);
	for (size_t n = 0; n < 2; n++)
		assert_true(kn_pack_node_frag(counted, n) ==
			    kn_pack_node_frag(listed, n));
	/* NULL weights: one pod each. */
	kn_pack_set_typical_weighted(counted, pods, NULL, 20);
	assert_int_equal(kn_pack_n_typical(counted), kn_pack_n_typical(listed));
	kn_pack_free(listed);
	kn_pack_free(counted);
}

/* Ties go to the earliest node of the tie order. */
static void test_tie_order(void **state)
{
	struct kn_pack *c = two_nodes();
	const struct kn_pack_policy *p = kn_pack_policy_find("gpu-packing");
	struct kn_pack_pod cpu_only = {1000, 1, 0, 0, 0, false, NULL};
	struct kn_pack_placement where;
	const size_t order[2] = {1, 0};
	const size_t bad[2] = {1, 1};
	struct kn_rng rng;

	kn_rng_seed(&rng, 7);
	assert_int_equal(kn_pack_place(c, p, &cpu_only, &rng, &where), 0);
	assert_int_equal(where.node, 0);
	assert_int_equal(kn_pack_set_order(c, bad, 2), -EINVAL);
	assert_int_equal(kn_pack_set_order(c, order, 2), 0);
	assert_int_equal(kn_pack_place(c, p, &cpu_only, &rng, &where), 0);
	assert_int_equal(where.node, 1);
	kn_pack_free(c);
}

/* GPU choice: best (fullest that fits), whole GPUs lowest index first. */
static void test_gpu_choice(void **state)
{
	struct kn_pack *c = snapshot();
	const struct kn_pack_policy *p = kn_pack_policy_find("best-fit");
	struct kn_pack_pod pod = share(300, 4000), two = whole(2, 1000);
	struct kn_pack_placement where;
	struct kn_pack_node_state st;
	struct kn_rng rng;

	kn_rng_seed(&rng, 7);
	/* b scores higher (65 against 22), so fill b first to make the
	   share go to a. */
	assert_int_equal(kn_pack_place(c, p, &two, &rng, &where), 0);
	assert_int_equal(where.node, 1);
	assert_int_equal(kn_pack_place(c, p, &pod, &rng, &where), 0);
	assert_int_equal(where.node, 0);
	assert_int_equal(where.gpus[0], 0);
	kn_pack_node_state(c, 0, &st);
	assert_int_equal(st.gpu_free[0], 200);
	assert_int_equal(st.cpu_free, 84000);
	assert_int_equal(kn_pack_used_milli(c), 2000 + 800);
	kn_pack_free(c);
}

static void test_constraints_and_errors(void **state)
{
	struct kn_pack *c = two_nodes();
	const struct kn_pack_policy *p = kn_pack_policy_find("fgd");
	struct kn_pack_pod pod = whole(1, 1000), bad = share(0, 1000);
	struct kn_pack_placement where;
	struct kn_error err = {0};
	struct kn_rng rng;
	int gpus[2] = {0, 0};
	const struct kn_pack_node_spec nine = {"x", 1000, 1, 9, "G2"};
	struct kn_pack *none = NULL;

	kn_rng_seed(&rng, 7);
	pod.models = kn_pack_models(c, "V100|P100", &pod.constrained);
	assert_true(pod.constrained);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(kn_pack_place(c, p, &pod, &rng, &where), 0);
		assert_int_equal(where.node, 1);
	}
	assert_int_equal(kn_pack_place(c, p, &pod, &rng, &where), -ENOSPC);
	pod.models = kn_pack_models(c, "H100", &pod.constrained);
	assert_int_equal(kn_pack_place(c, p, &pod, &rng, &where), -ENOSPC);
	assert_int_equal(kn_pack_check_pod(&bad, &err), -EINVAL);
	assert_string_equal(err.field, "gpu_milli");
	pod = whole(2, 1000);
	assert_int_equal(kn_pack_bind(c, 0, &pod, gpus, 2), -EINVAL);
	assert_int_equal(kn_pack_new(&nine, 1, &none, &err), -EINVAL);
	assert_null(none);
	kn_pack_free(c);
}

static void test_rng(void **state)
{
	struct kn_rng a, b;
	int seen[5] = {0};

	kn_rng_seed(&a, 42);
	kn_rng_seed(&b, 42);
	for (int i = 0; i < 100; i++)
		assert_true(kn_rng_next(&a) == kn_rng_next(&b));
	kn_rng_seed(&b, 43);
	assert_true(kn_rng_next(&a) != kn_rng_next(&b));
	for (int i = 0; i < 1000; i++) {
		uint64_t x = kn_rng_below(&a, 5);

		assert_true(x < 5);
		seen[x]++;
	}
	for (int i = 0; i < 5; i++)
		assert_true(seen[i] > 0);
}

/* A pod fits node n by the filter rules, recomputed independently. */
static bool fits(const struct kn_pack_node_state *st,
		 const struct kn_pack_pod *pod)
{
	int full = 0, room = 0;

	if (st->cpu_free < pod->cpu_milli || st->memory_free < pod->memory_mib)
		return false;
	if (pod->num_gpu == 0)
		return true;
	if (st->n_gpus == 0 ||
	    (pod->constrained && !(pod->models >> st->model & 1)))
		return false;
	for (int i = 0; i < st->n_gpus; i++) {
		full += st->gpu_free[i] == 1000;
		room += st->gpu_free[i] >= pod->gpu_milli;
	}
	return pod->gpu_milli == 1000 ? full >= pod->num_gpu : room >= 1;
}

static void test_random_snapshots(void **state)
{
	static const char *models[] = {"A", "B", "C"};
	static const char *specs[] = {"", "A", "B|C", "D"};
	struct kn_rng rng;

	kn_rng_seed(&rng, 2024);
	for (int round = 0; round < 30; round++) {
		struct kn_pack_node_spec nodes[12];
		size_t n = 1 + kn_rng_below(&rng, 12);
		struct kn_pack *c = NULL;
		const struct kn_pack_policy *p =
			kn_pack_policies[round % 7];

		for (size_t i = 0; i < n; i++) {
			nodes[i].name = "n";
			nodes[i].cpu_milli = 1000 * (int)(1 + kn_rng_below(&rng, 64));
			nodes[i].memory_mib = 1024 * (1 + (int64_t)kn_rng_below(&rng, 64));
			nodes[i].n_gpus = (int)kn_rng_below(&rng, 9);
			nodes[i].model = models[kn_rng_below(&rng, 3)];
		}
		assert_int_equal(kn_pack_new(nodes, n, &c, NULL), 0);
		for (int k = 0; k < 200; k++) {
			struct kn_pack_pod pod = {0};
			struct kn_pack_node_state before[12], st;
			struct kn_pack_placement w;
			int64_t used = kn_pack_used_milli(c);
			int rc;

			pod.cpu_milli = 500 * (int)kn_rng_below(&rng, 8);
			pod.memory_mib = 256 * (int64_t)kn_rng_below(&rng, 16);
			pod.num_gpu = (int)kn_rng_below(&rng, 4);
			pod.gpu_milli = pod.num_gpu == 0 ? 0
					: pod.num_gpu > 1 ? 1000
					: 50 * (int)(1 + kn_rng_below(&rng, 20));
			pod.models = kn_pack_models(
				c, specs[kn_rng_below(&rng, 4)], &pod.constrained);
			for (size_t i = 0; i < n; i++)
				kn_pack_node_state(c, i, &before[i]);
			rc = kn_pack_place(c, p, &pod, &rng, &w);
			if (rc == -ENOSPC) {
				for (size_t i = 0; i < n; i++)
					assert_false(fits(&before[i], &pod));
				assert_true(kn_pack_used_milli(c) == used);
				continue;
			}
			assert_int_equal(rc, 0);
			assert_true(fits(&before[w.node], &pod));
			assert_int_equal(w.n_gpus, pod.num_gpu);
			for (int g = 0; g < w.n_gpus; g++) {
				assert_true(before[w.node].gpu_free[w.gpus[g]] >=
					    pod.gpu_milli);
				for (int h = 0; h < g; h++)
					assert_int_not_equal(w.gpus[g], w.gpus[h]);
			}
			assert_true(kn_pack_used_milli(c) ==
				    used + (int64_t)pod.num_gpu * pod.gpu_milli);
			for (size_t i = 0; i < n; i++) {
				kn_pack_node_state(c, i, &st);
				assert_true(st.cpu_free >= 0);
				assert_true(st.memory_free >= 0);
				for (int g = 0; g < st.n_gpus; g++)
					assert_true(st.gpu_free[g] >= 0 &&
						    st.gpu_free[g] <= 1000);
			}
		}
		kn_pack_free(c);
	}
}

/* A shape's constraint names the nodes' models it accepts, each once, in
   node order; one that accepts none keeps its own names. */
static void test_gpu_spec(void **state)
{
	static const struct kn_pack_node_spec nodes[] = {
		{"a", 8000, 65536, 8, "H100-80GB"},
		{"b", 8000, 65536, 8, "A100-80GB"},
		{"c", 8000, 65536, 8, "H100-80GB"},
		{"d", 8000, 65536, 0, NULL},
	};
	static const char *const h100[] = {"h100"};
	static const char *const both[] = {"A100", "H100"};
	static const char *const absent[] = {"MI300X", "L40S"};
	static const struct {
		const char *const *models;
		size_t n;
		const char *want;
	} cases[] = {
		{h100, 1, "H100-80GB"},
		{both, 2, "H100-80GB|A100-80GB"},
		{absent, 2, "MI300X|L40S"},
	};
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct kn_sched_shape shape = {.gpu_milli = 1000,
					       .gpu_models = cases[i].models,
					       .n_gpu_models = cases[i].n};
		char *spec = kn_pack_gpu_spec(nodes, 4, &shape);

		assert_string_equal(spec, cases[i].want);
		free(spec);
	}
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_snapshot_scores),
	cmocka_unit_test(test_gpu_spec),
	cmocka_unit_test(test_kiln_ties),
	cmocka_unit_test(test_kiln_cpu_only),
	cmocka_unit_test(test_kiln_cpu_per_gpu),
	cmocka_unit_test(test_unbind),
	cmocka_unit_test(test_typical_cut),
	cmocka_unit_test(test_tie_order),
	cmocka_unit_test(test_gpu_choice),
	cmocka_unit_test(test_constraints_and_errors),
	cmocka_unit_test(test_rng),
	cmocka_unit_test(test_typical_weighted),
	cmocka_unit_test(test_random_snapshots))
