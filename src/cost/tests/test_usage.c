/*
 * Unit tests for usage sketches, the right-size rule and the ledger's
 * CPU and memory efficiency. Expected figures are worked out in the
 * comments from the rule in cost.h.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/tests/testmain.h"
#include "cost/cost.h"

#define MIB (1024.0 * 1024.0)
#define GIB (1024.0 * MIB)
#define H (3600LL * 1000)

/* 1..1000 MiB, one sample each: the true p50 is 500 MiB, p95 950 MiB; a
   sketch answers the bucket's upper edge, at most 5% above. */
static void test_percentiles(void **state)
{
	struct kn_usage_hist h;

	(void)state;
	kn_usage_hist_init(&h, KN_USAGE_MEMORY);
	for (int i = 1; i <= 1000; i++)
		kn_usage_hist_add(&h, i * MIB);
	assert_int_equal(h.samples, 1000);
	assert_true(kn_usage_hist_percentile(&h, 0.5) >= 500 * MIB);
	assert_true(kn_usage_hist_percentile(&h, 0.5) <= 500 * MIB * 1.05);
	assert_true(kn_usage_hist_percentile(&h, 0.95) >= 950 * MIB);
	assert_true(kn_usage_hist_percentile(&h, 0.95) <= 950 * MIB * 1.05);
	/* Never above the exact maximum. */
	assert_true(kn_usage_hist_percentile(&h, 1.0) == 1000 * MIB);
	assert_true(h.max == 1000 * MIB);
	assert_true(kn_usage_hist_mean(&h) == 500.5 * MIB);

	/* Zero and negative samples land in bucket 0; an empty sketch is 0. */
	kn_usage_hist_init(&h, KN_USAGE_CPU);
	assert_true(kn_usage_hist_percentile(&h, 0.5) == 0);
	kn_usage_hist_add(&h, -3);
	kn_usage_hist_add(&h, 0);
	assert_int_equal(h.counts[0], 2);
	assert_true(kn_usage_hist_percentile(&h, 0.95) == 0);
	/* Past the last bucket: the last bucket, the exact maximum. */
	kn_usage_hist_add(&h, 1e18);
	assert_int_equal(h.counts[KN_USAGE_BUCKETS - 1], 1);
	assert_true(kn_usage_hist_percentile(&h, 1.0) == 1e18);
}

static void test_encode_merge(void **state)
{
	struct kn_usage_hist a, b, all, back;
	struct kn_error err;
	char *text;

	(void)state;
	kn_usage_hist_init(&a, KN_USAGE_CPU);
	kn_usage_hist_init(&b, KN_USAGE_CPU);
	kn_usage_hist_init(&all, KN_USAGE_CPU);
	for (int i = 0; i < 50; i++) {
		kn_usage_hist_add(&a, 100 + i);
		kn_usage_hist_add(&all, 100 + i);
		kn_usage_hist_add(&b, 4000 - i);
		kn_usage_hist_add(&all, 4000 - i);
	}
	kn_usage_hist_merge(&a, &b);
	assert_memory_equal(a.counts, all.counts, sizeof(a.counts));
	assert_int_equal(a.samples, 100);
	assert_true(a.max == 4000 && a.sum == all.sum);

	text = kn_usage_hist_encode(&a);
	kn_usage_hist_init(&back, KN_USAGE_CPU);
	assert_int_equal(kn_usage_hist_decode(&back, text, &err), 0);
	assert_memory_equal(back.counts, a.counts, sizeof(a.counts));
	free(text);

	/* Bad text: refused, the sketch unchanged. */
	assert_int_equal(kn_usage_hist_decode(&back, "3:1,400:2", &err),
			 -EINVAL);
	assert_string_equal(err.field, "histogram");
	assert_true(kn_usage_hist_decode(&back, "3:x", &err) < 0);
	assert_true(kn_usage_hist_decode(&back, "3", &err) < 0);
	assert_memory_equal(back.counts, a.counts, sizeof(a.counts));
	assert_int_equal(kn_usage_hist_decode(&back, "", &err), 0);
	assert_int_equal(back.counts[0], 0);
}

/* h holds n samples of one value. */
static void steady(struct kn_usage_hist *h, enum kn_usage_resource r, int n,
		   double value)
{
	kn_usage_hist_init(h, r);
	for (int i = 0; i < n; i++)
		kn_usage_hist_add(h, value);
}

static void test_rightsize(void **state)
{
	struct kn_usage_hist mem, cpu;
	struct kn_rightsize r;

	(void)state;
	/* 200 MiB resident throughout, 4 GiB asked: p95 = max = 200 MiB,
	   target 230 MiB rounded up to 64 MiB steps = 256 MiB. */
	steady(&mem, KN_USAGE_MEMORY, 20, 200 * MIB);
	kn_rightsize(&mem, 4 * GIB, &r);
	assert_int_equal(r.samples, 20);
	assert_true(r.p50 == 200 * MIB && r.p95 == 200 * MIB);
	assert_true(r.target == 256 * MIB);
	assert_true(r.over);

	/* One core (1000 milli) used, 4 asked: target 1150 -> 1200. */
	steady(&cpu, KN_USAGE_CPU, 20, 1000);
	kn_rightsize(&cpu, 4000, &r);
	assert_true(r.target == 1200 && r.over);
	/* 1.3 cores asked: 1200 is above 70% of 1300 (910): keep it. */
	kn_rightsize(&cpu, 1300, &r);
	assert_false(r.over);
	/* Not requested: nothing to right-size. */
	kn_rightsize(&cpu, 0, &r);
	assert_false(r.over);

	/* Too few samples to judge. */
	steady(&cpu, KN_USAGE_CPU, KN_RIGHTSIZE_MIN_SAMPLES - 1, 1000);
	kn_rightsize(&cpu, 4000, &r);
	assert_false(r.over);
	/* An idle task: the target is one step, never 0. */
	steady(&cpu, KN_USAGE_CPU, 20, 0);
	kn_rightsize(&cpu, 4000, &r);
	assert_true(r.target == 100 && r.over);
}

/*
 * Node n: 2 GPUs. Job 1: no GPU, 4 cores and 4 GiB asked for 1 h, 1 core
 * and 1 GiB used: CPU and memory efficiency 0.25. Job 2: 1 GPU for 1 h at
 * 50% utilisation, 2 cores asked and 1.5 used (0.75), memory not asked.
 * Total: GPU 0.5; CPU (1000 + 1500) / (4000 + 2000) = 0.4167; memory
 * 0.25; the headline is their mean, 0.3889.
 */
static void test_efficiency(void **state)
{
	struct kn_ledger *l = kn_ledger_new(NULL);
	struct kn_ledger_report *rep;
	struct kn_error err;
	struct kn_ledger_alloc a = {
		.node = "n", .job_id = 1, .attempt = 1, .user = "u",
		.n_devices = 0, .milli_per_device = 0, .start_ms = 0,
		.end_ms = H, .gpu_util = -1, .cpu_milli = 4000,
		.cpu_milli_used = 1000, .memory_bytes = (int64_t)(4 * GIB),
		.memory_bytes_used = GIB,
	};
	double e;

	(void)state;
	assert_int_equal(kn_ledger_add_node(l, "n", NULL, KN_PRICING_ON_DEMAND,
					    2, &err), 0);
	assert_int_equal(kn_ledger_add_state(l, "n", KN_LEDGER_UP, 0, H, &err),
			 0);
	assert_int_equal(kn_ledger_add_alloc(l, &a, &err), 0);
	a.job_id = 2;
	a.n_devices = 1;
	a.milli_per_device = 1000;
	a.gpu_util = 0.5;
	a.cpu_milli = 2000;
	a.cpu_milli_used = 1500;
	a.memory_bytes = 0;
	assert_int_equal(kn_ledger_add_alloc(l, &a, &err), 0);
	/* Devices without a share is still refused. */
	a.milli_per_device = 0;
	assert_int_equal(kn_ledger_add_alloc(l, &a, &err), -EINVAL);
	assert_string_equal(err.field, "milli_per_device");

	assert_int_equal(kn_ledger_report(l, KN_LEDGER_BY_JOB, 0, H, &rep, &err),
			 0);
	assert_int_equal(rep->n_rows, 2);
	assert_string_equal(rep->rows[0].key, "1");
	assert_int_equal(rep->rows[0].busy_mms, 0);
	assert_false(kn_ledger_resource_efficiency(&rep->rows[0], KN_EFF_GPU,
						   &e));
	assert_true(kn_ledger_resource_efficiency(&rep->rows[0], KN_EFF_CPU,
						  &e));
	assert_float_equal(e, 0.25, 1e-9);
	assert_true(kn_ledger_resource_efficiency(&rep->rows[0],
						  KN_EFF_MEMORY, &e));
	assert_float_equal(e, 0.25, 1e-9);
	assert_true(kn_ledger_efficiency(&rep->rows[0], &e));
	assert_float_equal(e, 0.25, 1e-9);

	assert_true(kn_ledger_efficiency(&rep->rows[1], &e));
	assert_float_equal(e, (0.5 + 0.75) / 2, 1e-9);
	assert_false(kn_ledger_resource_efficiency(&rep->rows[1],
						   KN_EFF_MEMORY, &e));

	assert_true(kn_ledger_resource_efficiency(&rep->total, KN_EFF_CPU, &e));
	assert_float_equal(e, 2500.0 / 6000.0, 1e-9);
	assert_true(kn_ledger_efficiency(&rep->total, &e));
	assert_float_equal(e, (0.5 + 2500.0 / 6000.0 + 0.25) / 3, 1e-9);
	/* The GPU-less job leaves the idle GPU time as it was: 2 GPU-h of
	   capacity, 1 busy. */
	assert_int_equal(rep->total.busy_mms, 1000 * H);
	assert_int_equal(rep->total.idle_mms, 1000 * H);
	kn_ledger_report_free(rep);
	kn_ledger_free(l);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_percentiles),
	cmocka_unit_test(test_encode_merge),
	cmocka_unit_test(test_rightsize),
	cmocka_unit_test(test_efficiency))
