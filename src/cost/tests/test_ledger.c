/*
 * Unit tests for the cost ledger on one scripted timeline, every figure
 * worked out by hand in the comments (GPU-hours x the per-GPU price):
 *
 * Catalog: G4 has 4 GPUs at $8/h on demand ($2 per GPU-hour), $2/h spot
 * ($0.50), $4.80/h 1-year reserved ($1.20); G1 has 1 GPU at $2.40/h
 * 1-year reserved. T0 = 2026-12-01 00:00 UTC, H = one hour.
 *
 * Node a: G4 on demand, up T0..T0+26H (104 GPU-h of capacity).
 *   job 1 alice: 2 GPUs T0..2H (succeeded)        4 GPU-h  $8
 *   job 2 bob: 500 milli T0+1H..3H, util 40%      1 GPU-h  $2
 *   job 3 bob: 500 milli on the same GPU T0+1H..2H, preempted, last
 *     checkpoint T0+1.5H                        0.5 GPU-h  $1, lost
 *     0.5 x 0.5H = 0.25 GPU-h $0.50
 *   job 7 alice: 1 GPU T0+23H..25H (crosses midnight) 2 GPU-h $4
 *   idle: 104 - 7.5 = 96.5 GPU-h = $193 (day 1: 96 - 6.5 = 89.5 GPU-h
 *     $179; day 2: 8 - 1 = 7 GPU-h $14)
 * Node b: G4 spot, up T0..4H then unhealthy 4H..6H.
 *   job 4 carol, deployment chat: 1 GPU T0+2H..5H, failed without a
 *     checkpoint: 3 GPU-h $1.50, all lost $1.50
 *   idle: 16 - 2 = 14 GPU-h $7; unhealthy: 8 - 1 = 7 GPU-h $3.50
 * Node c: G1 1-year reserved, up T0..7H.
 *   job 5 alice: a MIG 1g slice (1/7 of the GPU: 143 milli) T0..7H:
 *     0.143 x 7 = 1.001 GPU-h x $2.40 = $2.4024
 *   idle: 7 - 1.001 = 5.999 GPU-h x $2.40 = $14.3976
 * Node d: size "Mystery" (not in the catalog), 2 GPUs, up T0..1H.
 *   job 6 dave: 1 GPU T0..1H: 1 GPU-h, unpriced $0; idle 1 GPU-h $0.
 *
 * Totals: busy 7.5 + 3 + 1.001 + 1 = 12.501 GPU-h, $8+2+1+4 + 1.5 +
 * 2.4024 + 0 = $18.9024; lost 3.25 GPU-h $2; idle 96.5 + 14 + 5.999 + 1 =
 * 117.499 GPU-h $214.3976; unhealthy 7 GPU-h $3.50.
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

#include "base/tests/testmain.h"
#include "cost/cost.h"

#define T0 1796083200000LL
#define H 3600000LL
#define GPU_H 3600000000LL /* milli-GPU-ms in one GPU-hour */

static const char CATALOG[] =
	"family,size,gpu_model,gpu_count,gpu_mem_per_gpu_gb,vcpus,ram_gib,"
	"infiniband,payg_linux_usd_hr,spot_usd_hr,ri_1y_usd_hr,ri_3y_usd_hr\n"
	"NC_A100,G4,NVIDIA A100 80GB PCIe,4,80,96,880,no,8,2,4.8,3.2\n"
	"NC_A100,G1,NVIDIA A100 80GB PCIe,1,80,24,220,no,3.6,0.9,2.4,1.6\n";

struct fixture {
	struct kn_catalog *catalog;
	struct kn_ledger *ledger;
};

static long long cents(double usd)
{
	return llround(usd * 100);
}

static void alloc(struct kn_ledger *l, const char *node, int64_t job,
		  const char *user, const char *deployment, int n_devices,
		  int milli, int64_t start, int64_t end, bool lost,
		  int64_t checkpoint, double util)
{
	struct kn_ledger_alloc a = {
		.node = node, .job_id = job, .attempt = 1, .user = user,
		.deployment = deployment, .n_devices = n_devices,
		.milli_per_device = milli, .start_ms = start, .end_ms = end,
		.lost = lost, .checkpoint_ms = checkpoint, .gpu_util = util,
	};
	struct kn_error err;

	assert_int_equal(kn_ledger_add_alloc(l, &a, &err), 0);
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct kn_error err;
	struct kn_ledger *l;

	f->catalog = kn_catalog_new();
	assert_int_equal(kn_catalog_parse(f->catalog, CATALOG, strlen(CATALOG),
					  "ledger.csv", &err), 0);
	l = f->ledger = kn_ledger_new(f->catalog);
	assert_int_equal(kn_ledger_add_node(l, "a", "G4", KN_PRICING_ON_DEMAND,
					    4, &err), 0);
	assert_int_equal(kn_ledger_add_node(l, "b", "g4", KN_PRICING_SPOT, 4,
					    &err), 0);
	assert_int_equal(kn_ledger_add_node(l, "c", "G1",
					    KN_PRICING_RESERVED_1Y, 1, &err), 0);
	assert_int_equal(kn_ledger_add_node(l, "d", "Mystery",
					    KN_PRICING_ON_DEMAND, 2, &err), 0);
	assert_int_equal(kn_ledger_add_state(l, "a", KN_LEDGER_UP, T0,
					     T0 + 26 * H, &err), 0);
	assert_int_equal(kn_ledger_add_state(l, "b", KN_LEDGER_UP, T0,
					     T0 + 4 * H, &err), 0);
	assert_int_equal(kn_ledger_add_state(l, "b", KN_LEDGER_UNHEALTHY,
					     T0 + 4 * H, T0 + 6 * H, &err), 0);
	assert_int_equal(kn_ledger_add_state(l, "c", KN_LEDGER_UP, T0,
					     T0 + 7 * H, &err), 0);
	assert_int_equal(kn_ledger_add_state(l, "d", KN_LEDGER_UP, T0,
					     T0 + H, &err), 0);
	alloc(l, "a", 1, "alice", NULL, 2, 1000, T0, T0 + 2 * H, false, 0, -1);
	alloc(l, "a", 2, "bob", NULL, 1, 500, T0 + H, T0 + 3 * H, false, 0,
	      0.4);
	alloc(l, "a", 3, "bob", NULL, 1, 500, T0 + H, T0 + 2 * H, true,
	      T0 + H + H / 2, -1);
	alloc(l, "b", 4, "carol", "chat", 1, 1000, T0 + 2 * H, T0 + 5 * H, true,
	      0, -1);
	alloc(l, "c", 5, "alice", NULL, 1, 143, T0, T0 + 7 * H, false, 0, -1);
	alloc(l, "d", 6, "dave", NULL, 1, 1000, T0, T0 + H, false, 0, -1);
	alloc(l, "a", 7, "alice", NULL, 1, 1000, T0 + 23 * H, T0 + 25 * H,
	      false, 0, -1);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	kn_ledger_free(f->ledger);
	kn_catalog_free(f->catalog);
	free(f);
	return 0;
}

static struct kn_ledger_report *report(void **state, enum kn_ledger_by by)
{
	struct fixture *f = *state;
	struct kn_ledger_report *r;
	struct kn_error err;

	assert_int_equal(kn_ledger_report(f->ledger, by, T0, T0 + 48 * H, &r,
					  &err), 0);
	return r;
}

static const struct kn_ledger_row *find(const struct kn_ledger_report *r,
					const char *key)
{
	for (size_t i = 0; i < r->n_rows; i++)
		if (!strcmp(r->rows[i].key, key))
			return &r->rows[i];
	fail_msg("no row %s", key);
	return NULL;
}

static void test_by_node(void **state)
{
	struct kn_ledger_report *r = report(state, KN_LEDGER_BY_NODE);
	const struct kn_ledger_row *a, *b, *c, *d, *t = &r->total;
	double eff;

	assert_int_equal(r->n_rows, 4);
	a = find(r, "a");
	assert_int_equal(a->busy_mms, 7500 * GPU_H / 1000);
	assert_int_equal(cents(a->busy_usd), 1500);
	assert_int_equal(a->lost_mms, GPU_H / 4);
	assert_int_equal(cents(a->lost_usd), 50);
	assert_int_equal(a->idle_mms, 96500 * GPU_H / 1000);
	assert_int_equal(cents(a->idle_usd), 19300);
	assert_int_equal(a->unhealthy_mms, 0);
	assert_false(a->unpriced);
	/* Only job 2's hour was sampled, at 40 %. */
	assert_true(kn_ledger_efficiency(a, &eff));
	assert_true(fabs(eff - 0.4) < 1e-9);

	b = find(r, "b");
	assert_int_equal(b->busy_mms, 3 * GPU_H);
	assert_int_equal(cents(b->busy_usd), 150);
	assert_int_equal(cents(b->lost_usd), 150);
	assert_int_equal(b->idle_mms, 14 * GPU_H);
	assert_int_equal(cents(b->idle_usd), 700);
	assert_int_equal(b->unhealthy_mms, 7 * GPU_H);
	assert_int_equal(cents(b->unhealthy_usd), 350);
	assert_true(fabs(kn_ledger_goodput(b)) < 1e-12);
	assert_false(kn_ledger_efficiency(b, &eff));

	c = find(r, "c");
	assert_int_equal(c->busy_mms, 1001 * GPU_H / 1000);
	assert_int_equal(cents(c->busy_usd), 240);        /* $2.4024 */
	assert_int_equal(cents(c->idle_usd), 1440);       /* $14.3976 */

	d = find(r, "d");
	assert_true(d->unpriced);
	assert_int_equal(d->busy_mms, GPU_H);
	assert_int_equal(d->idle_mms, GPU_H);
	assert_int_equal(cents(kn_ledger_total_usd(d)), 0);
	assert_int_equal(r->n_unpriced_nodes, 1);
	assert_string_equal(r->unpriced_nodes[0], "d");

	assert_int_equal(t->busy_mms, 12501 * GPU_H / 1000);
	assert_int_equal(cents(t->busy_usd), 1890);       /* $18.9024 */
	assert_int_equal(t->lost_mms, 3250 * GPU_H / 1000);
	assert_int_equal(cents(t->lost_usd), 200);
	assert_int_equal(t->idle_mms, 117499 * GPU_H / 1000);
	assert_int_equal(cents(t->idle_usd), 21440);      /* $214.3976 */
	assert_int_equal(cents(t->unhealthy_usd), 350);
	/* 18.9024 + 214.3976 + 3.50 */
	assert_int_equal(cents(kn_ledger_total_usd(t)), 23680);
	assert_true(t->unpriced);
	assert_true(fabs(kn_ledger_goodput(t) - (12.501 - 3.25) / 12.501) <
		    1e-12);
	assert_true(fabs(kn_ledger_gpu_seconds(t->busy_mms) - 45003.6) < 1e-6);
	kn_ledger_report_free(r);
}

static void test_by_user_job_deployment(void **state)
{
	struct kn_ledger_report *r = report(state, KN_LEDGER_BY_USER);

	/* alice: 4 + 1.001 + 2 GPU-h = $8 + $2.4024 + $4. */
	assert_int_equal(r->n_rows, 4);
	assert_string_equal(r->rows[0].key, "alice");
	assert_int_equal(r->rows[0].busy_mms, 7001 * GPU_H / 1000);
	assert_int_equal(cents(r->rows[0].busy_usd), 1440);
	assert_int_equal(r->rows[0].idle_mms, 0); /* idle has no owner */
	assert_int_equal(cents(find(r, "bob")->busy_usd), 300);
	assert_int_equal(cents(find(r, "bob")->lost_usd), 50);
	assert_int_equal(cents(find(r, "carol")->lost_usd), 150);
	assert_true(find(r, "dave")->unpriced);
	assert_false(find(r, "bob")->unpriced);
	assert_int_equal(cents(r->total.idle_usd), 21440);
	kn_ledger_report_free(r);

	r = report(state, KN_LEDGER_BY_JOB);
	assert_int_equal(r->n_rows, 7);
	for (size_t i = 0; i < r->n_rows; i++) {
		char key[24];

		snprintf(key, sizeof(key), "%zu", i + 1);
		assert_string_equal(r->rows[i].key, key); /* numeric order */
	}
	/* job 3: 0.5 GPU-h $1, lost from the checkpoint: $0.50, goodput .5 */
	assert_int_equal(cents(r->rows[2].busy_usd), 100);
	assert_int_equal(cents(r->rows[2].lost_usd), 50);
	assert_true(fabs(kn_ledger_goodput(&r->rows[2]) - 0.5) < 1e-12);
	kn_ledger_report_free(r);

	r = report(state, KN_LEDGER_BY_DEPLOYMENT);
	assert_int_equal(r->n_rows, 2);
	assert_string_equal(r->rows[0].key, "");
	assert_string_equal(r->rows[1].key, "chat");
	assert_int_equal(cents(r->rows[1].busy_usd), 150);
	/* $18.9024 - $1.50 */
	assert_int_equal(cents(r->rows[0].busy_usd), 1740);
	kn_ledger_report_free(r);
}

static void test_by_day(void **state)
{
	struct kn_ledger_report *r = report(state, KN_LEDGER_BY_DAY);

	/* Day 1: busy 6.5 GPU-h on a ($13) + $1.50 + $2.4024; idle $179 +
	   $7 + $14.3976. Day 2: job 7's second hour ($2), a's 7 idle GPU-h
	   ($14). */
	assert_int_equal(r->n_rows, 2);
	assert_string_equal(r->rows[0].key, "2026-12-01");
	assert_string_equal(r->rows[1].key, "2026-12-02");
	assert_int_equal(cents(r->rows[0].busy_usd), 1690);
	assert_int_equal(cents(r->rows[0].idle_usd), 20040);
	assert_int_equal(cents(r->rows[0].unhealthy_usd), 350);
	assert_int_equal(cents(r->rows[1].busy_usd), 200);
	assert_int_equal(r->rows[1].idle_mms, 7 * GPU_H);
	assert_int_equal(cents(r->rows[1].idle_usd), 1400);
	kn_ledger_report_free(r);
}

/* A window from T0+1.5H to T0+2.5H on node a: job 1 (2 GPUs to 2H) 1
   GPU-h, job 2 0.5 GPU-h, job 3 0.25 GPU-h, all lost (after its
   checkpoint): busy 1.75 GPU-h. Idle: to 2H 4 - 3 = 1 GPU x 0.5 h, then
   4 - 0.5 = 3.5 GPUs x 0.5 h: 2.25 GPU-h, $4.50. */
static void test_window(void **state)
{
	struct fixture *f = *state;
	struct kn_ledger_report *r;
	struct kn_error err;
	const struct kn_ledger_row *a;

	assert_int_equal(kn_ledger_report(f->ledger, KN_LEDGER_BY_NODE,
					  T0 + H + H / 2, T0 + 2 * H + H / 2,
					  &r, &err), 0);
	a = find(r, "a");
	assert_int_equal(a->busy_mms, 1750 * GPU_H / 1000);
	assert_int_equal(a->lost_mms, GPU_H / 4);
	assert_int_equal(a->idle_mms, 2250 * GPU_H / 1000);
	assert_int_equal(cents(a->idle_usd), 450);
	kn_ledger_report_free(r);
}

/* An allocation still running (end 0) ends at the report's end. */
static void test_open_ended(void **state)
{
	struct kn_catalog *c = ((struct fixture *)*state)->catalog;
	struct kn_ledger *l = kn_ledger_new(c);
	struct kn_ledger_report *r;
	struct kn_error err;

	assert_int_equal(kn_ledger_add_node(l, "n", "G1", KN_PRICING_ON_DEMAND,
					    1, &err), 0);
	assert_int_equal(kn_ledger_add_state(l, "n", KN_LEDGER_UP, T0, 0, &err),
			 0);
	alloc(l, "n", 9, "eve", NULL, 1, 1000, T0 + H, 0, false, 0, 1.0);
	assert_int_equal(kn_ledger_report(l, KN_LEDGER_BY_NODE, T0, T0 + 3 * H,
					  &r, &err), 0);
	/* 2 busy GPU-h at $3.60, 1 idle. */
	assert_int_equal(cents(r->rows[0].busy_usd), 720);
	assert_int_equal(cents(r->rows[0].idle_usd), 360);
	kn_ledger_report_free(r);
	kn_ledger_free(l);
}

static void test_errors(void **state)
{
	struct kn_ledger *l = ((struct fixture *)*state)->ledger;
	struct kn_ledger_report *r;
	struct kn_ledger_alloc a = { .node = "a", .n_devices = 1,
				     .milli_per_device = 1001, .start_ms = 1,
				     .end_ms = 2 };
	enum kn_ledger_by by;
	struct kn_error err;

	assert_int_equal(kn_ledger_add_alloc(l, &a, &err), -EINVAL);
	assert_string_equal(err.field, "milli_per_device");
	a.milli_per_device = 10;
	a.node = "zz";
	assert_int_equal(kn_ledger_add_alloc(l, &a, &err), -EINVAL);
	assert_string_equal(err.field, "node");
	a.node = "a";
	a.end_ms = -5;
	assert_int_equal(kn_ledger_add_alloc(l, &a, &err), -EINVAL);
	assert_string_equal(err.field, "end");
	assert_int_equal(kn_ledger_add_node(l, "a", "G1", KN_PRICING_SPOT, 1,
					    &err), -EINVAL);
	assert_int_equal(kn_ledger_add_state(l, "a", KN_LEDGER_UP, 5, 4, &err),
			 -EINVAL);
	assert_int_equal(kn_ledger_report(l, KN_LEDGER_BY_DAY, 5, 5, &r, &err),
			 -EINVAL);
	assert_string_equal(err.field, "since");
	assert_int_equal(kn_ledger_by_parse("team", &by, &err), -EINVAL);
	assert_string_equal(err.field, "by");
	assert_int_equal(kn_ledger_by_parse("deployment", &by, &err), 0);
	assert_int_equal(by, KN_LEDGER_BY_DEPLOYMENT);
	assert_string_equal(kn_ledger_by_name(KN_LEDGER_BY_DAY), "day");
}

/* G4: $8/h on demand, $4.80 1-year ($4.80 / $8 = 60 % break-even), $3.20
   3-year (40 %). At 50 % busy only the 3-year term pays off; at 70 % both;
   a size without a 3-year price says so (break-even < 0). */
static void test_reservations(void **state)
{
	struct fixture *f = *state;
	const struct kn_vm_size *g4 = kn_catalog_find(f->catalog, "G4");
	struct kn_reservation_advice r;
	struct kn_catalog *c = kn_catalog_new();
	static const char PARTIAL[] =
		"family,size,gpu_model,gpu_count,gpu_mem_per_gpu_gb,vcpus,"
		"ram_gib,infiniband,payg_linux_usd_hr,spot_usd_hr,ri_1y_usd_hr,"
		"ri_3y_usd_hr\nNC,P1,NVIDIA T4,1,16,4,28,no,1,,0.7,\n";
	struct kn_error err;

	kn_reservation_advise(g4, 0.5, &r);
	assert_true(fabs(r.break_even[0] - 0.6) < 1e-12);
	assert_true(fabs(r.break_even[1] - 0.4) < 1e-12);
	assert_false(r.pays_off[0]);
	assert_true(r.pays_off[1]);
	assert_true(r.on_demand_usd_hr == 8 && r.reserved_usd_hr[0] == 4.8);
	kn_reservation_advise(g4, 0.7, &r);
	assert_true(r.pays_off[0] && r.pays_off[1]);
	kn_reservation_advise(g4, 1.5, &r);
	assert_true(r.utilisation == 1);
	assert_int_equal(kn_catalog_parse(c, PARTIAL, strlen(PARTIAL), "p.csv",
					  &err), 0);
	kn_reservation_advise(kn_catalog_find(c, "P1"), 0.9, &r);
	assert_true(fabs(r.break_even[0] - 0.7) < 1e-12 && r.pays_off[0]);
	assert_true(r.break_even[1] < 0 && !r.pays_off[1]);
	kn_reservation_advise(NULL, 0.9, &r);
	assert_true(r.on_demand_usd_hr < 0 && !r.pays_off[0]);
	kn_catalog_free(c);
}

/* Thousands of jobs: each its own row, in numeric order, and a job's
   second attempt adds to its row (rows are found through an index that
   grows as they come). */
static void test_many_rows(void **state)
{
	struct kn_catalog *c = ((struct fixture *)*state)->catalog;
	struct kn_ledger *l = kn_ledger_new(c);
	struct kn_ledger_report *r;
	struct kn_error err;
	enum { JOBS = 3000 };

	assert_int_equal(kn_ledger_add_node(l, "n", "G1", KN_PRICING_ON_DEMAND,
					    1, &err), 0);
	for (int i = JOBS; i >= 1; i--)
		alloc(l, "n", i, "u", NULL, 1, 1000, T0 + i * 1000LL,
		      T0 + i * 1000LL + 1000, false, 0, -1);
	alloc(l, "n", 1, "u", NULL, 1, 500, T0, T0 + 1000, false, 0, -1);
	assert_int_equal(kn_ledger_report(l, KN_LEDGER_BY_JOB, T0, T0 + H, &r,
					  &err), 0);
	assert_int_equal(r->n_rows, JOBS);
	for (size_t i = 0; i < r->n_rows; i++) {
		char key[24];

		snprintf(key, sizeof(key), "%zu", i + 1);
		assert_string_equal(r->rows[i].key, key);
		assert_int_equal(r->rows[i].busy_mms, i ? 1000000 : 1500000);
	}
	/* 3000.5 GPU-seconds at $3.60 per GPU-hour: $3.0005. */
	assert_int_equal(cents(r->total.busy_usd), 300);
	assert_int_equal(r->total.busy_mms, 3000500000LL);
	kn_ledger_report_free(r);
	kn_ledger_free(l);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test_setup_teardown(test_by_node, setup, teardown),
	cmocka_unit_test_setup_teardown(test_by_user_job_deployment,
					setup, teardown),
	cmocka_unit_test_setup_teardown(test_by_day, setup, teardown),
	cmocka_unit_test_setup_teardown(test_window, setup, teardown),
	cmocka_unit_test_setup_teardown(test_open_ended, setup,
					teardown),
	cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
	cmocka_unit_test_setup_teardown(test_reservations, setup,
					teardown),
	cmocka_unit_test_setup_teardown(test_many_rows, setup,
					teardown))
