/*
 * Unit tests for the packing experiment's inputs and figures: optional
 * pod-list columns, the placed-pods rate, the statistics over seeds, the
 * replay with departures on a trace worked out by hand, and a server's
 * history as a trace.
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

static char dir[] = "/tmp/kiln-test-sim.XXXXXX";

#include "tests/tmpdir.h"

static const char *write_file(int slot, const char *name, const char *text)
{
	static char paths[2][256];
	FILE *f;

	snprintf(paths[slot], sizeof(paths[slot]), "%s/%s", dir, name);
	f = fopen(paths[slot], "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
	return paths[slot];
}

static struct kn_sim *load(const char *nodes, const char *pods)
{
	struct kn_sim *sim = NULL;
	struct kn_error err = {0};

	if (kn_sim_load(write_file(0, "nodes.csv", nodes),
			write_file(1, "pods.csv", pods), &sim, &err) < 0)
		fail_msg("%s", err.message);
	return sim;
}

#define NODE_HEADER "sn,cpu_milli,memory_mib,gpu,model\n"

/* The five required columns only: gpu_spec absent means any model, and
   with no times a replay with departures is refused by name. */
static void test_five_columns(void **state)
{
	struct kn_sim *sim = load(NODE_HEADER "n0,8000,65536,2,T4\n"
					      "n1,8000,65536,2,V100\n",
				  "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
				  "p0,1000,1024,1,1000\n"
				  "p1,1000,1024,1,1000\n"
				  "p2,1000,1024,0,0\n"
				  "p3,1000,1024,1,500\n");
	struct kn_sim_curve c;
	struct kn_sim_replay r;
	struct kn_error err = {0};

	(void)state;
	assert_int_equal(kn_sim_n_pods(sim), 4);
	assert_false(kn_sim_timed(sim));
	kn_sim_run(sim, kn_pack_policy_find("fgd"), 1, &c);
	/* 2.5 GPUs of 4 per pass, resampled to 130 %: nothing is refused
	   for a model, so the first pass fits whole. */
	assert_true(c.placed >= 4);
	assert_int_equal(kn_sim_replay_run(sim, kn_pack_policy_find("fgd"), 1,
					   1.0, &r, &err),
			 -EINVAL);
	assert_string_equal(err.field, "creation_time");
	kn_sim_free(sim);
}

/* A required column missing is named; an optional one is not needed. */
static void test_required_columns(void **state)
{
	struct kn_sim *sim = NULL;
	struct kn_error err = {0};

	(void)state;
	assert_int_equal(
		kn_sim_load(write_file(0, "n.csv", NODE_HEADER "n0,8000,1,1,T4\n"),
			    write_file(1, "p.csv",
				       "name,cpu_milli,memory_mib,num_gpu\n"
				       "p0,1,1,0\n"),
			    &sim, &err),
		-EINVAL);
	assert_non_null(strstr(err.message, "no column 'gpu_milli'"));
	/* Times present but a deletion before the creation. */
	assert_int_equal(
		kn_sim_load(write_file(0, "n.csv", NODE_HEADER "n0,8000,1,1,T4\n"),
			    write_file(1, "p.csv",
				       "name,cpu_milli,memory_mib,num_gpu,"
				       "gpu_milli,creation_time,deletion_time\n"
				       "p0,1,1,0,0,50,40\n"),
			    &sim, &err),
		-EINVAL);
	assert_non_null(strstr(err.message, ":2:"));
	assert_non_null(strstr(err.message, "deletion_time"));
}

/* One GPU, one-GPU pods: the first fits, every other is refused, and
   the rate counts what was placed. */
static void test_placed_rate(void **state)
{
	struct kn_sim *sim = load(NODE_HEADER "n0,64000,65536,1,T4\n",
				  "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
				  "p0,1000,1024,1,1000\n"
				  "p1,1000,1024,1,1000\n");
	struct kn_sim_curve runs[2];
	struct kn_sim_speed s;

	(void)state;
	kn_sim_run(sim, kn_pack_policy_find("kiln"), 7, &runs[0]);
	kn_sim_run(sim, kn_pack_policy_find("kiln"), 8, &runs[1]);
	assert_int_equal(runs[0].placed, 1);
	assert_int_equal(runs[0].offered, 2);
	kn_sim_speed(runs, 2, 4.0, &s);
	assert_int_equal(s.placed, 2);
	assert_int_equal(s.offered, 4);
	assert_true(s.placed_per_s == 0.5);
	assert_true(s.offered_per_s == 1.0);
	kn_sim_speed(runs, 2, 0.0, &s);
	assert_true(s.placed_per_s == 0.0);
	kn_sim_free(sim);
}

static void test_stats(void **state)
{
	double v[] = {1, NAN, 2, 4, 5};
	struct kn_sim_stats s;

	(void)state;
	kn_sim_stats(v, 5, &s);
	assert_int_equal(s.n, 4);
	assert_true(s.mean == 3.0);
	/* sum of squares 4 + 1 + 1 + 4 = 10 over 3 */
	assert_true(fabs(s.sd - sqrt(10.0 / 3.0)) < 1e-12);
	assert_true(s.median == 3.0);
	kn_sim_stats(v, 1, &s);
	assert_true(s.n == 1 && s.sd == 0.0 && s.median == 1.0);
	kn_sim_stats(v + 1, 1, &s);
	assert_true(s.n == 0 && isnan(s.mean) && isnan(s.sd));
}

static void test_paired(void **state)
{
	/* b - a = -1, -2, 0, -1, (skipped), +1 */
	double a[] = {5, 6, 7, 8, 9, 3};
	double b[] = {4, 4, 7, 7, NAN, 4};
	struct kn_sim_paired d;
	double sd;

	(void)state;
	kn_sim_paired(a, b, 6, &d);
	assert_int_equal(d.n, 5);
	assert_int_equal(d.lower, 3);
	assert_int_equal(d.higher, 1);
	assert_int_equal(d.equal, 1);
	assert_true(fabs(d.mean - (-0.6)) < 1e-12);
	/* deviations -0.4 -1.4 0.6 -0.4 1.6: squares sum 5.2, over 4 */
	sd = sqrt(5.2 / 4);
	assert_true(fabs(d.sd - sd) < 1e-12);
	assert_true(fabs(d.t - (-0.6 / (sd / sqrt(5.0)))) < 1e-12);
	/* A constant difference: infinitely sure of its sign. */
	kn_sim_paired(a, a, 3, &d);
	assert_true(d.t == 0.0 && d.equal == 3);
	kn_sim_paired(a, a + 1, 3, &d);
	assert_true(isinf(d.t) && d.t > 0 && d.higher == 3);
	kn_sim_paired(a, b, 1, &d);
	assert_true(isnan(d.t));
}

/*
 * One node of 2 GPUs and 8 CPUs. Times are creation, deletion, schedule.
 *   a: 600-milli share, 0..100 (ran 100 s), placed at once on one GPU.
 *   b: 2 GPUs, created 10, ran 190 s: only one GPU is whole until a
 *      leaves at 100; waits 90 s, runs 100..290.
 *   c: 500-milli share, 20..30: fits the whole GPU, runs 20..30.
 *   d: 2 GPUs, 40..50: waits behind nothing (b does not block it) but
 *      never fits; gives up at 50 having waited its recorded life.
 *   f: CPU only, 5..15, placed at once.
 *   e: never ran in the source (no scheduled_time): left out.
 * GPU waits {0, 90, 0}: p50 0, p99 0 + 0.98 x 90 = 88.2, mean 30.
 * Stranded: while b (and from 40 to 50 d) waits, the idle GPU is below
 * what they ask: 10..20 1400, 20..30 900, 30..100 1400 milli = 121 GPU-s.
 * Used: 600 x 100 + 500 x 10 + 2000 x 190 milli-s = 445 GPU-s.
 */
static const char replay_pods[] =
	"name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,"
	"deletion_time,scheduled_time\n"
	"a,1000,1024,1,600,0,100,0\n"
	"b,1000,1024,2,1000,10,200,10\n"
	"c,1000,1024,1,500,20,30,20\n"
	"d,1000,1024,2,1000,40,50,40\n"
	"e,1000,1024,0,0,0,1000,\n"
	"f,1000,1024,0,0,5,15,5\n";

static void test_replay_by_hand(void **state)
{
	const char *policies[] = {"fgd", "kiln", "best-fit", "random"};
	struct kn_sim *sim = load(NODE_HEADER "n0,8000,65536,2,T4\n",
				  replay_pods);

	(void)state;
	assert_true(kn_sim_timed(sim));
	for (size_t i = 0; i < sizeof(policies) / sizeof(*policies); i++) {
		struct kn_sim_replay r;
		struct kn_error err = {0};

		assert_int_equal(kn_sim_replay_run(
					 sim, kn_pack_policy_find(policies[i]),
					 42 + i, 1.0, &r, &err),
				 0);
		assert_int_equal(r.pods, 5);
		assert_int_equal(r.left_out, 1);
		assert_int_equal(r.gpu_pods, 4);
		assert_int_equal(r.never_placed, 1);
		assert_int_equal(r.gpu_never_placed, 1);
		assert_true(fabs(r.wait_p50_s - 0.0) < 1e-9);
		assert_true(fabs(r.wait_p99_s - 88.2) < 1e-9);
		assert_true(fabs(r.wait_mean_s - 30.0) < 1e-9);
		assert_true(fabs(r.stranded_gpu_hours - 121.0 / 3600) < 1e-9);
		assert_true(fabs(r.used_gpu_hours - 445.0 / 3600) < 1e-9);
		assert_true(fabs(r.span_hours - 290.0 / 3600) < 1e-9);
		assert_true(r.frag_gpu_hours >= 0);
	}
	kn_sim_free(sim);
}

/* Twice as dense: arrivals at half their times, runs as recorded. b
   arrives at 5 and waits for a until 100 (95 s); c at 10 fits; d at 20
   gives up at 30. */
static void test_replay_load(void **state)
{
	struct kn_sim *sim = load(NODE_HEADER "n0,8000,65536,2,T4\n",
				  replay_pods);
	struct kn_sim_replay r;
	struct kn_error err = {0};

	(void)state;
	assert_int_equal(kn_sim_replay_run(sim, kn_pack_policy_find("kiln"),
					   1, 2.0, &r, &err),
			 0);
	assert_int_equal(r.gpu_never_placed, 1);
	assert_true(fabs(r.wait_mean_s - 95.0 / 3) < 1e-9);
	assert_int_equal(kn_sim_replay_run(sim, kn_pack_policy_find("kiln"),
					   1, 0.0, &r, &err),
			 -EINVAL);
	assert_string_equal(err.field, "load");
	kn_sim_free(sim);
}

/* Ended jobs become one pod per task, shares 500 milli, a model
   constraint the nodes' models it accepts; MIG and live jobs stay out, a
   node of two models splits, and names are made safe as CSV cells. */
static void test_history_csv(void **state)
{
	json_t *jobs = json_loads(
		"{\"jobs\": ["
		"{\"id\": 1, \"state\": \"succeeded\", \"tasks\": 2,"
		" \"submitted_at_ms\": 1000, \"started_at_ms\": 3000,"
		" \"ended_at_ms\": 9000, \"preemptible\": true,"
		" \"resources\": {\"gpus\": 0.5, \"cpus\": 2,"
		" \"memory_bytes\": 1048576, \"gpu_model\": [\"h100\"]}},"
		"{\"id\": 2, \"state\": \"failed\", \"tasks\": 1,"
		" \"resources\": {\"gpus\": \"mig:1g.10gb\"}},"
		"{\"id\": 3, \"state\": \"running\", \"tasks\": 1,"
		" \"resources\": {\"gpus\": 1}}]}", 0, NULL);
	json_t *nodes = json_loads(
		"{\"nodes\": [{\"name\": \"=n,1\", \"cpus\": 8,"
		" \"memory_bytes\": 8589934592, \"devices\": ["
		"{\"model\": \"H100-80GB\"}, {\"model\": \"T4-16GB\"},"
		"{\"model\": \"A100-80GB\", \"mig\": true}]}]}", 0, NULL);
	struct kn_sim_history h;
	struct kn_buf pods, node_list;

	(void)state;
	assert_non_null(jobs);
	assert_non_null(nodes);
	kn_buf_init(&pods, KN_SIM_MAX_FILE);
	kn_buf_init(&node_list, KN_SIM_MAX_FILE);
	kn_sim_history_csv(jobs, nodes, &pods, &node_list, &h);
	assert_int_equal(h.jobs, 2);
	assert_int_equal(h.pods, 2);
	assert_int_equal(h.skipped_mig, 1);
	assert_int_equal(h.nodes, 2);
	assert_string_equal(node_list.data,
			    "sn,cpu_milli,memory_mib,gpu,model\n"
			    "'=n_1/H100-80GB,4000,4096,1,H100-80GB\n"
			    "'=n_1/T4-16GB,4000,4096,1,T4-16GB\n");
	assert_non_null(strstr(pods.data,
			       "job-1-0,2000,1,1,500,H100-80GB,1,9,3,true\n"
			       "job-1-1,2000,1,1,500,H100-80GB,1,9,3,true\n"));
	kn_buf_release(&pods);
	kn_buf_release(&node_list);

	/* The user's node list: constraints as written, no node rows. */
	kn_buf_init(&pods, KN_SIM_MAX_FILE);
	kn_buf_init(&node_list, KN_SIM_MAX_FILE);
	kn_sim_history_csv(jobs, NULL, &pods, &node_list, &h);
	assert_int_equal(h.nodes, 0);
	assert_int_equal(node_list.len, 0);
	assert_non_null(strstr(pods.data, ",500,h100,1,9,3,true\n"));
	kn_buf_release(&pods);
	kn_buf_release(&node_list);
	json_decref(jobs);
	json_decref(nodes);
}

KN_TEST_MAIN(setup, teardown,
	cmocka_unit_test(test_five_columns),
	cmocka_unit_test(test_required_columns),
	cmocka_unit_test(test_placed_rate),
	cmocka_unit_test(test_stats),
	cmocka_unit_test(test_paired),
	cmocka_unit_test(test_replay_by_hand),
	cmocka_unit_test(test_replay_load),
	cmocka_unit_test(test_history_csv))
