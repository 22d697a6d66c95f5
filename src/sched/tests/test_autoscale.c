/* Unit tests for the autoscaler's decisions (kn_autoscale_plan). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "base/tests/testmain.h"
#include "sched/sched.h"

/* Two pools of 2-GPU nodes: "od" (on demand, $3/GPU-h) and "spot"
   ($1/GPU-h), each min 0 max 4, 10 s scale-down delay. */
struct world {
	struct kn_sched_device devices[2];
	struct kn_sched_node shape;
	struct kn_autoscale_pool pools[2];
	struct kn_sched_request one_gpu, two_gpus, gang4, huge;
	struct kn_autoscale_job burst[5]; /* jobs 1-5, one GPU each */
	int add[2];
	bool remove[8];
	char why[2][KN_AUTOSCALE_WHY_LEN];
	char blocked[KN_AUTOSCALE_WHY_LEN];
};

static void build(struct world *w)
{
	memset(w, 0, sizeof(*w));
	for (int i = 0; i < 2; i++) {
		w->devices[i].index = i;
		w->devices[i].model = "A100-80GB";
	}
	w->shape.name = "new";
	w->shape.devices = w->devices;
	w->shape.n_devices = 2;
	w->pools[0] = (struct kn_autoscale_pool){
		.name = "od", .gpu_hour_price = 3.0, .min = 0, .max = 4,
		.scale_down_delay_ms = 10000, .shape = &w->shape};
	w->pools[1] = w->pools[0];
	w->pools[1].name = "spot";
	w->pools[1].spot = true;
	w->pools[1].gpu_hour_price = 1.0;
	w->one_gpu = (struct kn_sched_request){.tasks = 1, .gpu_milli = 1000};
	w->two_gpus = (struct kn_sched_request){.tasks = 1, .gpu_milli = 2000};
	w->gang4 = (struct kn_sched_request){.tasks = 4, .gpu_milli = 1000};
	w->huge = (struct kn_sched_request){.tasks = 1, .gpu_milli = 4000};
	for (int i = 0; i < 5; i++)
		w->burst[i] = (struct kn_autoscale_job){i + 1, false,
							&w->one_gpu};
}

static void plan(struct world *w, const struct kn_autoscale_job *jobs,
		 size_t n_jobs, const struct kn_autoscale_node *nodes,
		 size_t n_nodes, int64_t now)
{
	kn_autoscale_plan(w->pools, 2, jobs, n_jobs, nodes, n_nodes, now,
			  w->add, w->remove, w->why, w->blocked);
}

/* Plan as plan does and check how many nodes each pool is to add. */
static void plan_adds(struct world *w, const struct kn_autoscale_job *jobs,
		      size_t n_jobs, const struct kn_autoscale_node *nodes,
		      size_t n_nodes, int64_t now, int add0, int add1)
{
	plan(w, jobs, n_jobs, nodes, n_nodes, now);
	assert_int_equal(w->add[0], add0);
	assert_int_equal(w->add[1], add1);
}

/* Five 1-GPU jobs need three 2-GPU nodes: the burst asks for what fits. */
static void test_burst_scales_up_by_what_fits(void **state)
{
	struct world w;

	(void)state;
	build(&w);
	plan_adds(&w, w.burst, 5, NULL, 0, 0, 3, 0);
	assert_string_equal(w.why[0], "+3: 5 queued jobs fit no node up or "
				      "coming, the first job 1 (1 task x 1 GPU)");
	assert_string_equal(w.blocked, "");
}

/* A gang of 4 tasks needs two nodes of one pool at once. */
static void test_gang_gets_enough_nodes(void **state)
{
	struct world w;
	struct kn_autoscale_job job = {7, false, NULL};

	(void)state;
	build(&w);
	job.req = &w.gang4;
	plan(&w, &job, 1, NULL, 0, 0);
	assert_int_equal(w.add[0], 2);
}

/* Max bounds the growth; what fits nowhere is named. */
static void test_max_and_blocked(void **state)
{
	struct world w;
	struct kn_autoscale_job jobs[2];

	(void)state;
	build(&w);
	w.pools[0].max = 1;
	w.pools[1].max = 1;
	jobs[0] = (struct kn_autoscale_job){1, false, &w.huge};
	jobs[1] = (struct kn_autoscale_job){2, false, &w.two_gpus};
	plan_adds(&w, jobs, 2, NULL, 0, 0, 1, 0);
	assert_non_null(strstr(w.blocked, "job 1 "));
}

/* Preemptible work goes to the spot pool, the rest on demand, even
   though spot is cheaper; among equals the cheaper pool wins. */
static void test_spot_preferred_for_preemptible(void **state)
{
	struct world w;
	struct kn_autoscale_job pre = {1, true, NULL}, firm = {2, false, NULL};

	(void)state;
	build(&w);
	pre.req = &w.two_gpus;
	firm.req = &w.two_gpus;
	plan_adds(&w, &pre, 1, NULL, 0, 0, 0, 1);
	plan_adds(&w, &firm, 1, NULL, 0, 0, 1, 0);
	/* Both on demand: the cheaper one. */
	w.pools[1].spot = false;
	plan_adds(&w, &firm, 1, NULL, 0, 0, 0, 1);
	/* A full preferred pool spills to the other. */
	w.pools[1].spot = true;
	w.pools[1].current = 4;
	plan_adds(&w, &pre, 1, NULL, 0, 0, 1, 0);
}

/* Nodes being provisioned hold the burst: no second ask. */
static void test_no_overshoot_while_provisioning(void **state)
{
	struct world w;

	(void)state;
	build(&w);
	w.pools[0].provisioning = 3;
	plan_adds(&w, w.burst, 5, NULL, 0, 0, 0, 0);
	/* Two of the three came up and took four jobs; one still comes. */
	w.pools[0].provisioning = 1;
	w.pools[0].current = 2;
	plan(&w, w.burst + 4, 1, NULL, 0, 0);
	assert_int_equal(w.add[0], 0);
	/* One more job than the coming node holds: one more node. */
	plan(&w, w.burst + 2, 3, NULL, 0, 0);
	assert_int_equal(w.add[0], 1);
}

/* Idle shutdown after the delay, the longest idle first, never below
   min; busy nodes stay. */
static void test_idle_shutdown_after_delay_min_kept(void **state)
{
	struct world w;
	struct kn_autoscale_node nodes[4] = {
		{0, 5000}, {0, 1000}, {0, 0}, {0, 3000},
	};

	(void)state;
	build(&w);
	w.pools[0].current = 4;
	w.pools[0].min = 2;
	/* At 12 s only node 1 has been idle 10 s. */
	plan(&w, NULL, 0, nodes, 4, 12000);
	assert_false(w.remove[0]);
	assert_true(w.remove[1]);
	assert_false(w.remove[2]);
	assert_false(w.remove[3]);
	assert_non_null(strstr(w.why[0], "-1"));
	/* Much later all idle ones qualify, but min 2 keeps two. */
	plan(&w, NULL, 0, nodes, 4, 100000);
	assert_true(w.remove[1]);
	assert_true(w.remove[3]);
	assert_false(w.remove[0]);
	assert_false(w.remove[2]);
	/* Before the delay nothing goes. */
	plan(&w, NULL, 0, nodes, 4, 10999);
	for (int i = 0; i < 4; i++)
		assert_false(w.remove[i]);
	assert_string_equal(w.why[0], "");
}

/* Below min: grow to it, and do not shut down while growing. */
static void test_min_respected(void **state)
{
	struct world w;
	struct kn_autoscale_node node = {1, 1};

	(void)state;
	build(&w);
	w.pools[1].min = 2;
	w.pools[1].current = 1;
	plan(&w, NULL, 0, &node, 1, 1000000);
	assert_int_equal(w.add[1], 1);
	assert_false(w.remove[0]);
	assert_non_null(strstr(w.why[1], "below min 2"));
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_burst_scales_up_by_what_fits),
	cmocka_unit_test(test_gang_gets_enough_nodes),
	cmocka_unit_test(test_max_and_blocked),
	cmocka_unit_test(test_spot_preferred_for_preemptible),
	cmocka_unit_test(test_no_overshoot_while_provisioning),
	cmocka_unit_test(test_idle_shutdown_after_delay_min_kept),
	cmocka_unit_test(test_min_respected))
