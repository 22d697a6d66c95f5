/*
 * Unit tests for the autoscaling replay (kiln sim --autoscale) on tiny
 * timed traces whose answers are worked out by hand in the comments.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/tests/testmain.h"
#include "sim/sim.h"

#define HEADER "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos," \
	       "pod_phase,creation_time,deletion_time,scheduled_time\n"

static char dir[] = "/tmp/kiln-test-sim-autoscale.XXXXXX";

#include "tests/tmpdir.h"

static const char *write_trace(const char *name, const char *text)
{
	static char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
	return path;
}

static struct kn_sim_trace *load(const char *name, const char *text)
{
	struct kn_sim_trace *t = NULL;
	struct kn_error err = {0};

	if (kn_sim_trace_load(write_trace(name, text), &t, &err) < 0)
		fail_msg("%s", err.message);
	return t;
}

static void pool(const char *text, double usd_hr, struct kn_sim_pool *p)
{
	struct kn_error err = {0};

	if (kn_sim_pool_parse(text, p, &err) < 0)
		fail_msg("%s", err.message);
	p->usd_hr = usd_hr;
}

/*
 * A burst then idle: four 1-GPU pods for an hour at t=0, one more at 3h.
 * Pool: 1-GPU nodes, min 1, max 4, 10 min scale-down delay, $2/h, and a
 * 3 min provisioning delay.
 *
 * t=0: the min node takes pod 0; pods 1-3 fit nothing, the plan asks for
 * exactly 3 nodes. 3m: they are up and take pods 1-3 (each waited 180 s).
 * 1h: pod 0 ends; 1h03m: pods 1-3 end. 1h10m: node 0 has idled 10 min and
 * goes (4 > min). 1h13m: nodes 1-3 have too; two go, one stays (min 1).
 * 3h: pod 4 runs on it at once, until 4h, the end.
 * Node time: 70 + 73 + 73 + 240 min = 456 min = 7.6 h, $15.20.
 */
static const char burst[] =
	HEADER "p0,1000,1024,1,1000,,LS,Succeeded,0,3600,0\n"
	       "p1,1000,1024,1,1000,,LS,Succeeded,0,3780,180\n"
	       "p2,1000,1024,1,1000,,LS,Succeeded,0,3780,180\n"
	       "p3,1000,1024,1,1000,,LS,Succeeded,0,3780,180\n"
	       "p4,1000,1024,1,1000,,LS,Succeeded,10800,14400,10800\n";

static void test_burst_scales_up_then_down_to_min(void **state)
{
	struct kn_sim_trace *t = load("burst.csv", burst);
	struct kn_sim_pool p;
	struct kn_sim_autoscale_opts opts = {.provision_delay_ms = 180000};
	struct kn_sim_autoscale_report r;
	const struct kn_sim_pool_report *a;

	(void)state;
	pool("a NC 1xA100-80GB min=1 max=4 scale-down-delay=10m", 2.0, &p);
	kn_sim_autoscale(t, &p, 1, &opts, &r);
	a = &r.pools[0];
	assert_int_equal(r.never_fit, 0);
	assert_float_equal(r.span_hours, 4.0, 1e-9);
	assert_int_equal(a->nodes_added, 3);
	assert_int_equal(a->nodes_removed, 3);
	assert_int_equal(a->peak_nodes, 4);
	assert_int_equal(a->pods, 5);
	assert_float_equal(a->node_hours, 7.6, 1e-9);
	assert_float_equal(a->cost_usd, 15.2, 1e-9);
	assert_float_equal(a->gpu_hours, 7.6, 1e-9);
	/* 4 pods x 1 h (the trace's run times) + 1 h. */
	assert_float_equal(a->gpu_hours_used, 5.0, 1e-9);
	assert_float_equal(a->wait_p50_s, 180.0, 1e-9);
	assert_float_equal(a->wait_max_s, 180.0, 1e-9);
	assert_float_equal(r.total.node_hours, a->node_hours, 1e-12);
	assert_float_equal(r.total.cost_usd, a->cost_usd, 1e-12);
	kn_sim_autoscale_report_release(&r);

	/* Fixed at max: 4 nodes for 4 h, nobody waits. */
	opts.fixed = true;
	kn_sim_autoscale(t, &p, 1, &opts, &r);
	assert_float_equal(r.pools[0].node_hours, 16.0, 1e-9);
	assert_float_equal(r.pools[0].cost_usd, 32.0, 1e-9);
	assert_float_equal(r.pools[0].wait_max_s, 0.0, 1e-9);
	assert_int_equal(r.pools[0].nodes_added, 0);
	assert_int_equal(r.pools[0].peak_nodes, 4);
	kn_sim_autoscale_report_release(&r);
	kn_sim_pool_release(&p);
	kn_sim_trace_free(t);
}

/*
 * The same burst with min 2: the two start nodes take pods 0 and 1, the
 * plan asks for 2; at 1h10m nodes 0 and 1 go, at 1h13m nodes 2 and 3
 * stay (min 2) until 4h: 70 + 70 + 240 + 240 min.
 */
static void test_never_below_min(void **state)
{
	struct kn_sim_trace *t = load("burst.csv", burst);
	struct kn_sim_pool p;
	struct kn_sim_autoscale_opts opts = {.provision_delay_ms = 180000};
	struct kn_sim_autoscale_report r;

	(void)state;
	pool("a NC 1xA100-80GB min=2 max=4 scale-down-delay=10m", 1.0, &p);
	kn_sim_autoscale(t, &p, 1, &opts, &r);
	assert_int_equal(r.pools[0].nodes_added, 2);
	assert_int_equal(r.pools[0].nodes_removed, 2);
	assert_float_equal(r.pools[0].node_hours, 620.0 / 60.0, 1e-9);
	/* Pods 2 and 3 waited; 0, 1 and 4 did not. */
	assert_float_equal(r.pools[0].wait_p50_s, 0.0, 1e-9);
	assert_float_equal(r.pools[0].wait_max_s, 180.0, 1e-9);
	kn_sim_autoscale_report_release(&r);
	kn_sim_pool_release(&p);
	kn_sim_trace_free(t);
}

/* No provisioning delay: nodes are asked for and used at once, and the
   max caps the burst (4 pods, max 2: two wait an hour). */
static void test_max_caps_the_burst(void **state)
{
	struct kn_sim_trace *t = load("burst.csv", burst);
	struct kn_sim_pool p;
	struct kn_sim_autoscale_opts opts = {0};
	struct kn_sim_autoscale_report r;

	(void)state;
	pool("a NC 1xA100-80GB min=0 max=2 scale-down-delay=10m", -1, &p);
	kn_sim_autoscale(t, &p, 1, &opts, &r);
	assert_int_equal(r.pools[0].peak_nodes, 2);
	/* p0, p1 and (at 3h) p4 at once; p2 and p3 when p0 and p1 end at
	   1h. */
	assert_float_equal(r.pools[0].wait_max_s, 3600.0, 1e-9);
	assert_float_equal(r.pools[0].wait_p50_s, 0.0, 1e-9);
	assert_true(r.pools[0].cost_usd < 0);
	assert_true(r.total.cost_usd < 0);
	kn_sim_autoscale_report_release(&r);
	kn_sim_pool_release(&p);
	kn_sim_trace_free(t);
}

/* Preemptible pods grow the spot pool, the others the on-demand one. */
static void test_spot_for_preemptible(void **state)
{
	struct kn_sim_trace *marked = load(
		"marked.csv",
		"name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,"
		"deletion_time,preemptible\n"
		"a,0,0,1,1000,0,600,0\n"
		"b,0,0,1,1000,0,600,true\n");
	struct kn_sim_trace *be = load("be.csv",
				       HEADER "c,0,0,1,1000,,BE,Running,0,600,"
					      "0\n");
	struct kn_sim_pool p[2];
	struct kn_sim_autoscale_opts opts = {.provision_delay_ms = 60000};
	struct kn_sim_autoscale_report r;

	(void)state;
	pool("od NC 1xA100-80GB min=0 max=2", 3.0, &p[0]);
	pool("sp NC 1xA100-80GB min=0 max=2 spot", 1.0, &p[1]);
	kn_sim_autoscale(marked, p, 2, &opts, &r);
	assert_int_equal(r.pools[0].nodes_added, 1);
	assert_int_equal(r.pools[1].nodes_added, 1);
	assert_int_equal(r.pools[0].pods, 1);
	assert_int_equal(r.pools[1].pods, 1);
	kn_sim_autoscale_report_release(&r);

	/* Without a preemptible column, qos BE marks it. */
	kn_sim_autoscale(be, p, 2, &opts, &r);
	assert_int_equal(r.pools[0].nodes_added, 0);
	assert_int_equal(r.pools[1].nodes_added, 1);
	assert_int_equal(r.pools[0].peak_nodes, 0);
	/* Asked at 0, up at 1m, pod ends at 11m. */
	assert_float_equal(r.pools[1].node_hours, 11.0 / 60.0, 1e-9);
	assert_float_equal(r.total.cost_usd, 11.0 / 60.0, 1e-9);
	kn_sim_autoscale_report_release(&r);
	kn_sim_pool_release(&p[0]);
	kn_sim_pool_release(&p[1]);
	kn_sim_trace_free(marked);
	kn_sim_trace_free(be);
}

/* A pod no pool can hold is left out and counted; unscheduled rows too. */
static void test_left_out(void **state)
{
	struct kn_sim_trace *t =
		load("big.csv", HEADER "a,0,0,8,1000,,LS,Running,0,60,0\n"
				       "b,0,0,1,1000,,LS,Running,0,60,0\n"
				       "c,0,0,1,1000,,LS,Pending,0,60,\n");
	struct kn_sim_pool p;
	struct kn_sim_autoscale_opts opts = {0};
	struct kn_sim_autoscale_report r;

	(void)state;
	assert_int_equal(kn_sim_trace_n_pods(t), 2);
	assert_int_equal(kn_sim_trace_n_unscheduled(t), 1);
	pool("a NC 2xA100-80GB min=0 max=3", 1.0, &p);
	kn_sim_autoscale(t, &p, 1, &opts, &r);
	assert_int_equal(r.never_fit, 1);
	assert_int_equal(r.total.pods, 1);
	kn_sim_autoscale_report_release(&r);
	kn_sim_pool_release(&p);
	kn_sim_trace_free(t);
}

static void expect_pool_error(const char *text, const char *needle)
{
	struct kn_sim_pool p;
	struct kn_error err = {0};

	assert_int_equal(kn_sim_pool_parse(text, &p, &err), -EINVAL);
	if (!strstr(err.message, needle))
		fail_msg("pool \"%s\": \"%s\" lacks \"%s\"", text, err.message,
			 needle);
}

static void test_bad_pools(void **state)
{
	(void)state;
	expect_pool_error("a NC", "want \"NAME SKU GPUS");
	expect_pool_error("a/b NC 1xA100-80GB", "name: \"a/b\"");
	expect_pool_error("a NC 1xnothing", "GPUS:");
	expect_pool_error("a NC 1xA100-80GB min=x", "min: \"x\"");
	expect_pool_error("a NC 1xA100-80GB max=2000", "max: \"2000\"");
	expect_pool_error("a NC 1xA100-80GB min=3 max=2", "below min 3");
	expect_pool_error("a NC 1xA100-80GB scale-down-delay=5",
			  "scale-down-delay: \"5\"");
	expect_pool_error("a NC 1xA100-80GB bogus", "\"bogus\" is not KEY");
	expect_pool_error("a NC 1xA100-80GB provider=command command=/bin/x",
			  "provider: \"command\": a replay makes its nodes");
	expect_pool_error("a NC 1xA100-80GB sku=x", "label sku=");
}

static void expect_trace_error(const char *text, const char *needle)
{
	struct kn_sim_trace *t = NULL;
	struct kn_error err = {0};
	const char *path = write_trace("bad.csv", text);

	assert_int_equal(kn_sim_trace_load(path, &t, &err), -EINVAL);
	assert_null(t);
	if (!strstr(err.message, path) || !strstr(err.message, needle))
		fail_msg("\"%s\" lacks the file or \"%s\"", err.message,
			 needle);
}

static void test_bad_traces(void **state)
{
	(void)state;
	/* An openb packing trace, without times. */
	expect_trace_error("name,cpu_milli,memory_mib,num_gpu,gpu_milli,"
			   "gpu_spec\np,0,0,1,1000,\n",
			   ":1:1: no column 'creation_time'");
	expect_trace_error("name,cpu_milli,memory_mib,num_gpu,gpu_milli,"
			   "creation_time\np,0,0,1,1000,5\n",
			   ":1:1: no column 'deletion_time'");
	expect_trace_error(HEADER "p,0,0,1,1000,,LS,Running,100,50,60\n",
			   ":2:30: deletion_time: 50 is before");
	expect_trace_error(HEADER "p,0,0,2,500,,LS,Running,0,50,0\n",
			   ":2:9: gpu_milli: 500 does not suit");
	expect_trace_error(HEADER "p,0,0,1,1000,,LS,Running,x,50,0\n",
			   ":2:26: creation_time: 'x'");
	expect_trace_error("name,cpu_milli,memory_mib,num_gpu,gpu_milli,"
			   "creation_time,deletion_time,preemptible\n"
			   "p,0,0,1,1000,0,5,maybe\n",
			   ":2:18: preemptible: 'maybe'");
	expect_trace_error(HEADER "p,0,0,1,1000,,LS,Pending,0,5,\n",
			   "no pod that ran");
	/* Quoted fields and CRLF: columns count the quotes as written. */
	expect_trace_error(HEADER "\"p,1\",0,0,1,1000,,LS,Running,x,50,0\r\n",
			   ":2:30: creation_time: 'x'");
	expect_trace_error(HEADER "p,0,0,1,1000,\"x,LS\r\n",
			   ":2:14: a quoted field is not closed");
}

KN_TEST_MAIN(setup, teardown,
	cmocka_unit_test(test_burst_scales_up_then_down_to_min),
	cmocka_unit_test(test_never_below_min),
	cmocka_unit_test(test_max_caps_the_burst),
	cmocka_unit_test(test_spot_for_preemptible),
	cmocka_unit_test(test_left_out),
	cmocka_unit_test(test_bad_pools),
	cmocka_unit_test(test_bad_traces))
