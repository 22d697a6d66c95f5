/*
 * Unit tests for what every task counts (the defaults for tasks that name
 * no CPUs or memory), the reason a gang that can never fit gets, and the
 * fair-share order between owners' queued jobs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/tests/testmain.h"
#include "sched/sched.h"

#define GIB ((int64_t)1 << 30)
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* A 2-CPU, 8 GiB node without GPUs, nothing used. */
static void small_node(struct kn_sched_node *node,
		       struct kn_sched_cluster *cluster)
{
	memset(node, 0, sizeof(*node));
	node->name = "local";
	node->schedulable = true;
	node->cpu_milli_total = 2000;
	node->memory_total = 8 * GIB;
	cluster->nodes = node;
	cluster->n_nodes = 1;
}

static void test_defaults_fill_only_what_is_unset(void **state)
{
	const struct kn_sched_defaults d = {.cpu_milli = 1000,
					    .memory_bytes = GIB};
	struct kn_sched_request unset = {.tasks = 1};
	struct kn_sched_request set = {.tasks = 1, .cpu_milli = 250,
				       .memory_bytes = 64 << 20};

	(void)state;
	kn_sched_request_defaults(&unset, &d);
	assert_int_equal(unset.cpu_milli, 1000);
	assert_int_equal(unset.memory_bytes, GIB);
	kn_sched_request_defaults(&set, &d);
	assert_int_equal(set.cpu_milli, 250);
	assert_int_equal(set.memory_bytes, 64 << 20);
}

/* req can never fit on a small node, for reason; the node is untouched. */
static void expect_never_fits(const struct kn_sched_request *req,
			      struct kn_sched_binding *b, const char *reason)
{
	struct kn_sched_cluster cluster;
	struct kn_sched_node node;
	char got[512];

	small_node(&node, &cluster);
	assert_int_equal(kn_sched_place(&cluster, req, b, got, sizeof(got)),
			 -ENOSPC);
	assert_string_equal(got, reason);
	assert_int_equal(node.cpu_milli_used, 0);
	assert_int_equal(node.memory_used, 0);
}

/*
 * A gang of CPU-only tasks that ask for nothing: without defaults the
 * whole gang lands on a 2-CPU node; with them it can never fit, and the
 * reason says how far off it is.
 */
static void test_cpu_gang_counts_defaults(void **state)
{
	const struct kn_sched_defaults d = {.cpu_milli = 1000,
					    .memory_bytes = GIB};
	struct kn_sched_request req = {.tasks = 1024};
	struct kn_sched_binding *b = calloc(1024, sizeof(*b));
	struct kn_sched_cluster cluster;
	struct kn_sched_node node;

	(void)state;
	small_node(&node, &cluster);
	assert_int_equal(kn_sched_place(&cluster, &req, b, NULL, 0), 0);
	kn_sched_request_defaults(&req, &d);
	expect_never_fits(&req, b,
			  "can never fit: needs 1024 tasks x 1 CPU and "
			  "1024 MiB memory but the cluster holds at most 2 "
			  "such tasks; 1024 CPUs in all, the largest node "
			  "has 2 CPUs (local)");

	/* Two such tasks fit, and use the whole node. */
	req.tasks = 2;
	small_node(&node, &cluster);
	assert_int_equal(kn_sched_place(&cluster, &req, b, NULL, 0), 0);
	assert_int_equal(node.cpu_milli_used, 2000);
	assert_int_equal(node.memory_used, 2 * GIB);
	free(b);
}

/* Memory holds the gang back: the total is in memory. */
static void test_never_fits_names_memory(void **state)
{
	struct kn_sched_request req = {.tasks = 20, .cpu_milli = 1,
				       .memory_bytes = GIB};
	struct kn_sched_binding b[20];

	(void)state;
	expect_never_fits(&req, b,
			  "can never fit: needs 20 tasks x 0.001 CPU and "
			  "1024 MiB memory but the cluster holds at most 8 "
			  "such tasks; 20480 MiB memory in all, the largest "
			  "node has 8192 MiB (local)");
}

/* ---- fair share ------------------------------------------------------ */

static void test_fair_order(void **state)
{
	/* Owner A flooded first (jobs 1-3) and has used the cluster; owner
	   B (job 4) has not; job 5 is A's at a higher priority. */
	struct kn_sched_queue_entry q[] = {
		{.job_id = 1, .priority = 0, .submitted_at = 10, .usage = 50},
		{.job_id = 2, .priority = 0, .submitted_at = 11, .usage = 50},
		{.job_id = 3, .priority = 0, .submitted_at = 12, .usage = 50},
		{.job_id = 4, .priority = 0, .submitted_at = 20, .usage = 0},
		{.job_id = 5, .priority = 5, .submitted_at = 30, .usage = 50},
		{.job_id = 6, .priority = 0, .submitted_at = 15, .usage = 8},
	};
	static const int64_t order[] = {5, 4, 6, 1, 2, 3};

	(void)state;
	kn_sched_sort_queue(q, COUNT(q));
	for (size_t i = 0; i < COUNT(q); i++)
		assert_int_equal(q[i].job_id, order[i]);
}

static void test_fair_rate(void **state)
{
	struct kn_sched_request cpu = {.tasks = 4, .cpu_milli = 500};
	struct kn_sched_request gpu = {.tasks = 2, .gpu_milli = 1000,
				       .cpu_milli = 1000};
	struct kn_sched_request mig = {.tasks = 1, .mig_profile = "3g.40gb"};

	(void)state;
	assert_true(fabs(kn_fair_rate(&cpu) - 2.0) < 1e-9);
	assert_true(fabs(kn_fair_rate(&gpu) -
			 2 * (1 + KN_FAIR_GPU_WEIGHT)) < 1e-9);
	assert_true(fabs(kn_fair_rate(&mig) - KN_FAIR_GPU_WEIGHT * 3 / 7) <
		    1e-9);
}

static void test_fair_usage_decays(void **state)
{
	const int64_t hour = 3600 * 1000;
	double once, stepped = 0;

	(void)state;
	/* Idle for one half-life: half is left; for two: a quarter. */
	assert_true(fabs(kn_fair_usage_advance(100, 0, hour, hour) - 50) <
		    1e-9);
	assert_true(fabs(kn_fair_usage_advance(100, 0, 2 * hour, hour) -
			 25) < 1e-9);
	/* Without decay the charge simply adds up. */
	assert_true(fabs(kn_fair_usage_advance(1, 2, 10 * 1000, 0) - 21) <
		    1e-9);
	/* One call or many: the same usage. */
	once = kn_fair_usage_advance(0, 3, 2 * hour, hour);
	for (int i = 0; i < 120; i++)
		stepped = kn_fair_usage_advance(stepped, 3, 60 * 1000, hour);
	assert_true(fabs(once - stepped) < 1e-6 * once);
	/* A constant rate approaches rate x half-life / ln 2, never more. */
	assert_true(once < 3 * 3600 / M_LN2);
	assert_true(once > 3 * 3600);
	assert_true(kn_fair_usage_advance(5, 1, -10, hour) == 5);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_defaults_fill_only_what_is_unset),
	cmocka_unit_test(test_cpu_gang_counts_defaults),
	cmocka_unit_test(test_never_fits_names_memory),
	cmocka_unit_test(test_fair_order),
	cmocka_unit_test(test_fair_rate),
	cmocka_unit_test(test_fair_usage_decays))
