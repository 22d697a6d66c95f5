/* Unit tests for preemption victim choice on hand-built snapshots. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "base/tests/testmain.h"
#include "sched/sched.h"

/* One node, 4 GPUs: A holds 0-1 (prio 0), B holds 2 (prio 0, younger),
 * C holds 3 (prio 5, not preemptible). */
struct world {
	struct kn_sched_device devices[4];
	struct kn_sched_node node;
	struct kn_sched_cluster cluster;
	struct kn_sched_request req_a, req_b, req_c;
	struct kn_sched_binding bind_a, bind_b, bind_c;
	struct kn_sched_victim cands[3];
};

static void build(struct world *w)
{
	memset(w, 0, sizeof(*w));
	for (int i = 0; i < 4; i++) {
		w->devices[i].index = i;
		w->devices[i].model = "H100-80GB";
		w->devices[i].used_milli = 1000;
	}
	w->node.name = "n1";
	w->node.schedulable = true;
	w->node.devices = w->devices;
	w->node.n_devices = 4;
	w->cluster.nodes = &w->node;
	w->cluster.n_nodes = 1;
	w->req_a = (struct kn_sched_request){.tasks = 1, .gpu_milli = 2000};
	w->req_b = (struct kn_sched_request){.tasks = 1, .gpu_milli = 1000};
	w->req_c = w->req_b;
	w->bind_a = (struct kn_sched_binding){.node = 0, .n_devices = 2,
					      .devices = {0, 1},
					      .milli_per_device = 1000};
	w->bind_b = (struct kn_sched_binding){.node = 0, .n_devices = 1,
					      .devices = {2},
					      .milli_per_device = 1000};
	w->bind_c = (struct kn_sched_binding){.node = 0, .n_devices = 1,
					      .devices = {3},
					      .milli_per_device = 1000};
	w->cands[0] = (struct kn_sched_victim){1, 0, true, 100, &w->req_a,
					       &w->bind_a};
	w->cands[1] = (struct kn_sched_victim){2, 0, true, 200, &w->req_b,
					       &w->bind_b};
	w->cands[2] = (struct kn_sched_victim){3, 5, false, 50, &w->req_c,
					       &w->bind_c};
}

/* Which of A, B and C a request evicts; the snapshot stays as it was. */
static void test_victim_choice(void **state)
{
	static const struct {
		int tasks, gpu_milli, priority;
		bool c_preemptible;
		int rc;
		bool evicted[3]; /* A, B, C */
	} cases[] = {
		/* B is cheapest (youngest) but alone frees too little; A
		   suffices. */
		{1, 2000, 10, false, 0, {true, false, false}},
		/* B: youngest of the lowest. */
		{1, 1000, 10, false, 0, {false, true, false}},
		/* All four GPUs would need C, which is not preemptible. */
		{1, 4000, 10, false, -ENOSPC, {false, false, false}},
		/* Equal priority is not lower. */
		{1, 1000, 0, false, -ENOSPC, {false, false, false}},
		{1, 4000, 6, true, 0, {true, true, true}},
		/* A gang of three: A and B, in either order. */
		{3, 1000, 10, false, 0, {true, true, false}},
	};
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct kn_sched_request want = {.tasks = cases[i].tasks,
						.gpu_milli = cases[i].gpu_milli};
		struct world w;
		bool evicted[3] = {false, false, false};
		size_t victims[3], n = 0;

		build(&w);
		w.cands[2].preemptible = cases[i].c_preemptible;
		assert_int_equal(kn_sched_find_victims(&w.cluster, &want,
						       cases[i].priority,
						       w.cands, 3, victims, &n),
				 cases[i].rc);
		for (size_t k = 0; cases[i].rc == 0 && k < n; k++)
			evicted[victims[k]] = true;
		for (int c = 0; c < 3; c++)
			assert_int_equal(evicted[c], cases[i].evicted[c]);
		for (int d = 0; d < 4; d++)
			assert_int_equal(w.devices[d].used_milli, 1000);
	}
}

/*
 * A job that waits for its victims to stop holds only what it will get:
 * B (GPU 2) is evicted for a 1-GPU job of priority 10 while C keeps GPU
 * 3; a CPU-only job behind it may start now, a GPU job may not take the
 * GPU promised to it, and once the promise is given back the cluster is
 * as it was.
 */
static void test_place_after_holds_only_what_the_waiting_job_needs(void **state)
{
	struct world w;
	struct kn_sched_request held = {.tasks = 1, .gpu_milli = 1000,
					.cpu_milli = 1000};
	struct kn_sched_request cpu_only = {.tasks = 1, .cpu_milli = 2000};
	struct kn_sched_request gpu = {.tasks = 1, .gpu_milli = 1000};
	struct kn_sched_binding plan, b;
	size_t victims[3], n = 0;
	char reason[256];
	(void)state;

	build(&w);
	w.node.cpu_milli_total = 8000;
	assert_int_equal(kn_sched_find_victims(&w.cluster, &held, 10, w.cands,
					       3, victims, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(victims[0], 1);
	/* B has not stopped yet: nothing is free for the held job now. */
	assert_int_equal(kn_sched_place(&w.cluster, &held, &b, NULL, 0),
			 -ENOSPC);
	assert_int_equal(kn_sched_place_after(&w.cluster, &held, &w.cands[1],
					      1, &plan), 0);
	assert_int_equal(plan.n_devices, 1);
	assert_int_equal(plan.devices[0], 2);
	assert_int_equal(w.devices[2].used_milli, 1000); /* unchanged */
	kn_sched_charge(&w.cluster, &held, &plan);
	assert_int_equal(w.node.cpu_milli_used, 1000);
	assert_int_equal(kn_sched_place(&w.cluster, &cpu_only, &b, reason,
					sizeof(reason)), 0);
	assert_int_equal(b.n_devices, 0);
	assert_int_equal(w.node.cpu_milli_used, 3000);
	kn_sched_release(&w.cluster, &cpu_only, &b);
	/* B's GPU is promised: when B stops, it is still not free. */
	kn_sched_release(&w.cluster, w.cands[1].req, w.cands[1].bindings);
	assert_int_equal(kn_sched_place(&w.cluster, &gpu, &b, reason,
					sizeof(reason)), -ENOSPC);
	kn_sched_release(&w.cluster, &held, &plan);
	assert_int_equal(w.node.cpu_milli_used, 0);
	assert_int_equal(w.devices[2].used_milli, 0);
	assert_int_equal(kn_sched_place(&w.cluster, &held, &b, NULL, 0), 0);
	assert_int_equal(b.devices[0], 2);
}

/* Victims that would not make room: no promise. */
static void test_place_after_without_room(void **state)
{
	struct world w;
	struct kn_sched_request big = {.tasks = 1, .gpu_milli = 4000};
	struct kn_sched_binding plan = {.node = 7};
	(void)state;

	build(&w);
	assert_int_equal(kn_sched_place_after(&w.cluster, &big, w.cands, 2,
					      &plan), -ENOSPC);
	assert_int_equal(plan.node, 7); /* written only on success */
	for (int i = 0; i < 4; i++)
		assert_int_equal(w.devices[i].used_milli, 1000);
}

static void test_request_same(void **state)
{
	const char *h100[] = {"H100"}, *a100[] = {"A100"}, *h100b[] = {"H100"};
	struct kn_sched_label zone_a = {"zone", "a"}, zone_b = {"zone", "b"};
	struct kn_sched_request x = {.tasks = 2, .gpu_milli = 1000,
				     .cpu_milli = 500, .gpu_models = h100,
				     .n_gpu_models = 1, .selector = &zone_a,
				     .n_selector = 1};
	struct kn_sched_request y = x;
	(void)state;

	y.gpu_models = h100b; /* equal by content, not by pointer */
	assert_true(kn_sched_request_same(&x, &y));
	y.gpu_models = a100;
	assert_false(kn_sched_request_same(&x, &y));
	y = x;
	y.selector = &zone_b;
	assert_false(kn_sched_request_same(&x, &y));
	y = x;
	y.tasks = 1;
	assert_false(kn_sched_request_same(&x, &y));
	y = x;
	y.memory_bytes = 1;
	assert_false(kn_sched_request_same(&x, &y));
	y = x;
	y.mig_profile = "1g.10gb";
	assert_false(kn_sched_request_same(&x, &y));
	/* A spreading request is never the same as another, nor itself. */
	y = x;
	x.spread_key = y.spread_key = "zone";
	assert_false(kn_sched_request_same(&x, &y));
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_victim_choice),
	cmocka_unit_test(test_place_after_holds_only_what_the_waiting_job_needs),
	cmocka_unit_test(test_place_after_without_room),
	cmocka_unit_test(test_request_same))
