/* Unit tests for preemption victim choice on hand-built snapshots. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

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

static void test_smallest_sufficient_set(void **state)
{
	struct world w;
	struct kn_sched_request want = {.tasks = 1, .gpu_milli = 2000};
	size_t victims[3], n = 99;
	(void)state;

	build(&w);
	/* B is cheapest (youngest) but alone frees too little; A suffices. */
	assert_int_equal(kn_sched_find_victims(&w.cluster, &want, 10, w.cands,
					       3, victims, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(victims[0], 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(w.devices[i].used_milli, 1000);
}

static void test_cheapest_when_one_is_enough(void **state)
{
	struct world w;
	struct kn_sched_request want = {.tasks = 1, .gpu_milli = 1000};
	size_t victims[3], n = 0;
	(void)state;

	build(&w);
	assert_int_equal(kn_sched_find_victims(&w.cluster, &want, 10, w.cands,
					       3, victims, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(victims[0], 1); /* B: youngest of the lowest */
}

static void test_only_lower_priority_and_preemptible(void **state)
{
	struct world w;
	struct kn_sched_request want = {.tasks = 1, .gpu_milli = 4000};
	size_t victims[3], n = 0;
	(void)state;

	build(&w);
	/* All four GPUs would need C, which is not preemptible. */
	assert_int_equal(kn_sched_find_victims(&w.cluster, &want, 10, w.cands,
					       3, victims, &n), -ENOSPC);
	/* Equal priority is not lower. */
	want.gpu_milli = 1000;
	assert_int_equal(kn_sched_find_victims(&w.cluster, &want, 0, w.cands,
					       3, victims, &n), -ENOSPC);
	w.cands[2].preemptible = true;
	want.gpu_milli = 4000;
	assert_int_equal(kn_sched_find_victims(&w.cluster, &want, 6, w.cands,
					       3, victims, &n), 0);
	assert_int_equal(n, 3);
}

static void test_gang_needs_two_victims(void **state)
{
	struct world w;
	struct kn_sched_request want = {.tasks = 3, .gpu_milli = 1000};
	size_t victims[3], n = 0;
	(void)state;

	build(&w);
	assert_int_equal(kn_sched_find_victims(&w.cluster, &want, 10, w.cands,
					       3, victims, &n), 0);
	assert_int_equal(n, 2);
	assert_true((victims[0] == 0 && victims[1] == 1) ||
		    (victims[0] == 1 && victims[1] == 0));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_smallest_sufficient_set),
		cmocka_unit_test(test_cheapest_when_one_is_enough),
		cmocka_unit_test(test_only_lower_priority_and_preemptible),
		cmocka_unit_test(test_gang_needs_two_victims),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
