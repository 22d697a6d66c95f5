/*
 * Unit and property tests for node affinity and spread in kn_sched_place.
 * Nodes here carry several labels (zone, fault_domain, gpu), which the
 * fixture of test_sched.c does not; the property test draws random
 * clusters and requests from the scheduler's own RNG so a failure is
 * reproducible from its seed.
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

#define MAX_NODES 8
#define MAX_LABELS 3
#define MAX_TASKS 16
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

struct node_spec {
	const char *name;
	int n_gpus;
	const char *zone; /* NULL: no zone label */
	const char *fault_domain;
	const char *gpu;  /* the "gpu" label */
};

struct fixture {
	struct kn_sched_node nodes[MAX_NODES];
	struct kn_sched_label labels[MAX_NODES][MAX_LABELS];
	struct kn_sched_device devices[MAX_NODES][KN_SCHED_MAX_GPUS_PER_TASK];
	struct kn_sched_cluster cluster;
};

static void add_label(struct fixture *f, size_t i, const char *key,
		      const char *value)
{
	if (value)
		f->labels[i][f->nodes[i].n_labels++] =
			(struct kn_sched_label){key, value};
}

static struct kn_sched_cluster *build(struct fixture *f,
				      const struct node_spec *specs, size_t n)
{
	memset(f, 0, sizeof(*f));
	assert_true(n <= MAX_NODES);
	for (size_t i = 0; i < n; i++) {
		struct kn_sched_node *node = &f->nodes[i];

		node->name = specs[i].name;
		node->schedulable = true;
		node->labels = f->labels[i];
		add_label(f, i, "zone", specs[i].zone);
		add_label(f, i, "fault_domain", specs[i].fault_domain);
		add_label(f, i, "gpu", specs[i].gpu);
		node->devices = f->devices[i];
		node->n_devices = (size_t)specs[i].n_gpus;
		for (int d = 0; d < specs[i].n_gpus; d++) {
			f->devices[i][d].index = d;
			f->devices[i][d].model = "H100-80GB";
		}
	}
	f->cluster.nodes = f->nodes;
	f->cluster.n_nodes = n;
	return &f->cluster;
}

/* req placed on a fresh cluster of specs: task t on node want[t]. */
static void expect_placed(struct fixture *f, const struct node_spec *specs,
			  size_t n, const struct kn_sched_request *req,
			  const int *want)
{
	struct kn_sched_binding b[MAX_TASKS];

	assert_true(req->tasks <= MAX_TASKS);
	assert_int_equal(kn_sched_place(build(f, specs, n), req, b, NULL, 0),
			 0);
	for (int t = 0; t < req->tasks; t++)
		assert_int_equal(b[t].node, want[t]);
}

static const char *const ZONE_B[] = {"b"};
static const char *const ZONES_AC[] = {"a", "c"};

static void test_required_terms(void **state)
{
	static const struct node_spec specs[] = {
		{"n0", 4, "a", NULL, NULL},
		{"n1", 4, "b", NULL, "h100"},
		{"n2", 4, NULL, NULL, NULL},
	};
	static const struct {
		struct kn_sched_affinity_term term;
		int tasks, gpu_milli;
		int nodes[2];
	} cases[] = {
		{{"zone", KN_SCHED_IN, ZONE_B, 1, 0}, 1, 1000, {1}},
		/* NotIn holds on the node without the label too. */
		{{"zone", KN_SCHED_NOT_IN, ZONES_AC, 2, 0}, 2, 4000, {1, 2}},
		{{"gpu", KN_SCHED_EXISTS, NULL, 0, 0}, 1, 1000, {1}},
		{{"gpu", KN_SCHED_DOES_NOT_EXIST, NULL, 0, 0}, 1, 1000, {0}},
	};
	struct fixture f;

	(void)state;
	for (size_t i = 0; i < COUNT(cases); i++) {
		struct kn_sched_request req = {.tasks = cases[i].tasks,
					       .gpu_milli = cases[i].gpu_milli,
					       .required = &cases[i].term,
					       .n_required = 1};

		expect_placed(&f, specs, COUNT(specs), &req, cases[i].nodes);
	}
}

static void test_required_never_fits(void **state)
{
	static const struct node_spec specs[] = {
		{"n0", 2, "a", NULL, NULL},
	};
	struct kn_sched_affinity_term in = {"zone", KN_SCHED_IN, ZONE_B, 1, 0};
	struct kn_sched_request req = {.tasks = 1, .gpu_milli = 1000,
				       .required = &in, .n_required = 1};
	struct kn_sched_binding b[1];
	struct fixture f;
	char reason[256];

	(void)state;
	assert_int_equal(kn_sched_place(build(&f, specs, COUNT(specs)), &req,
					b, reason, sizeof(reason)),
			 -ENOSPC);
	assert_string_equal(reason, KN_SCHED_NEVER
			    "no node matches required affinity zone In (b)");
	assert_int_equal(f.devices[0][0].used_milli, 0);
}

static void test_preferred_weights(void **state)
{
	static const struct node_spec specs[] = {
		{"n0", 2, "a", NULL, NULL},
		{"n1", 2, "b", NULL, "h100"},
		{"n2", 2, "c", NULL, NULL},
	};
	/* zone b alone (30) loses to zones a or c (50): n0, the first. */
	struct kn_sched_affinity_term prefs[] = {
		{"zone", KN_SCHED_IN, ZONE_B, 1, 30},
		{"zone", KN_SCHED_IN, ZONES_AC, 2, 50},
	};
	struct kn_sched_request req = {.tasks = 1, .gpu_milli = 1000,
				       .preferred = prefs, .n_preferred = 2};
	struct kn_sched_binding b[1];
	struct fixture f;

	(void)state;
	expect_placed(&f, specs, COUNT(specs), &req, (const int[]){0});
	/* Weights add up: zone b (30) and gpu Exists (40) beat 50. */
	struct kn_sched_affinity_term more[] = {
		prefs[0], prefs[1], {"gpu", KN_SCHED_EXISTS, NULL, 0, 40}};
	req.preferred = more;
	req.n_preferred = 3;
	expect_placed(&f, specs, COUNT(specs), &req, (const int[]){1});
	/* A preference never overrides a full node: n1 has no room left. */
	f.devices[1][0].used_milli = 1000;
	f.devices[1][1].used_milli = 1000;
	assert_int_equal(kn_sched_place(&f.cluster, &req, b, NULL, 0), 0);
	assert_int_equal(b[0].node, 0);
}

static void test_spread_zones(void **state)
{
	static const struct node_spec specs[] = {
		{"n0", 8, "a", NULL, NULL},
		{"n1", 8, "a", NULL, NULL},
		{"n2", 8, "b", NULL, NULL},
		{"n3", 8, NULL, NULL, NULL},
	};
	struct kn_sched_request req = {.tasks = 4, .gpu_milli = 1000};
	struct fixture f;

	(void)state;
	/* Without spread the whole gang stays on n0. */
	expect_placed(&f, specs, COUNT(specs), &req, (const int[]){0, 0, 0, 0});
	/* With it: zone a, zone b, no zone, then zone a again on n0. */
	req.spread_key = "zone";
	expect_placed(&f, specs, COUNT(specs), &req, (const int[]){0, 2, 3, 0});
}

static void test_spread_fault_domains_with_full_domain(void **state)
{
	static const struct node_spec specs[] = {
		{"n0", 1, NULL, "fd0", NULL},
		{"n1", 4, NULL, "fd1", NULL},
	};
	struct kn_sched_request req = {.tasks = 3, .gpu_milli = 1000,
				       .spread_key = "fault_domain"};
	struct fixture f;

	(void)state;
	/*
	 * The first task goes where the whole gang would fit (fd1), the
	 * second to the unused domain fd0, and the third back to fd1 since
	 * fd0 is full: spread is a preference, never a reason to fail.
	 */
	expect_placed(&f, specs, COUNT(specs), &req, (const int[]){1, 0, 1});
}

static void test_spread_placed_replicas(void **state)
{
	static const struct node_spec specs[] = {
		{"n0", 4, "a", NULL, NULL},
		{"n1", 4, "a", NULL, NULL},
		{"n2", 4, "b", NULL, NULL},
		{"n3", 4, "c", NULL, NULL},
	};
	/* Earlier replicas: two in zone a (n0, n1), one in zone b (n2). */
	static const int placed[] = {1, 1, 1, 0};
	struct kn_sched_request req = {.tasks = 1, .gpu_milli = 1000,
				       .spread_key = "zone"};
	struct kn_sched_binding b[1];
	struct fixture f;

	(void)state;
	/* Alone it takes the first node, as before. */
	expect_placed(&f, specs, COUNT(specs), &req, (const int[]){0});
	/* The group's other tasks count: zone c is the one still empty. */
	req.spread_placed = placed;
	expect_placed(&f, specs, COUNT(specs), &req, (const int[]){3});
	/* Without a spread key the counts are ignored. */
	req.spread_key = NULL;
	expect_placed(&f, specs, COUNT(specs), &req, (const int[]){0});
	/* A full zone c: the next least used zone, b's n2 before a. */
	req.spread_key = "zone";
	build(&f, specs, COUNT(specs));
	for (int d = 0; d < 4; d++)
		f.devices[3][d].used_milli = 1000;
	assert_int_equal(kn_sched_place(&f.cluster, &req, b, NULL, 0), 0);
	assert_int_equal(b[0].node, 2);
}

/* ---- property test ---------------------------------------------------- */

static const char *const ZONES[] = {"a", "b", "c"};

static const char *maybe(struct kn_rng *rng, const char *const *values,
			 size_t n)
{
	uint64_t k = kn_rng_below(rng, n + 1);

	return k == n ? NULL : values[k];
}

static void random_term(struct kn_rng *rng,
			struct kn_sched_affinity_term *term,
			const char **values)
{
	size_t n = 0;

	term->key = kn_rng_below(rng, 2) ? "zone" : "fault_domain";
	term->op = (enum kn_sched_affinity_op)kn_rng_below(rng, 4);
	for (size_t v = 0; v < COUNT(ZONES); v++)
		if (kn_rng_below(rng, 2))
			values[n++] = ZONES[v];
	term->values = values;
	term->n_values = n;
	term->weight = 1 + (int)kn_rng_below(rng, 100);
}

static bool holds(const struct kn_sched_node *node,
		  const struct kn_sched_affinity_term *term)
{
	const char *value = NULL;
	bool listed = false;

	for (size_t l = 0; l < node->n_labels; l++)
		if (strcmp(node->labels[l].key, term->key) == 0)
			value = node->labels[l].value;
	for (size_t v = 0; value && v < term->n_values; v++)
		listed |= strcmp(term->values[v], value) == 0;
	/* Written apart from sched.c's switch, so the two check each other. */
	if (term->op == KN_SCHED_EXISTS || term->op == KN_SCHED_DOES_NOT_EXIST)
		return (value != NULL) == (term->op == KN_SCHED_EXISTS);
	return listed == (term->op == KN_SCHED_IN);
}

static bool has_label(const struct kn_sched_node *node,
		      const struct kn_sched_label *want)
{
	for (size_t l = 0; l < node->n_labels; l++)
		if (strcmp(node->labels[l].key, want->key) == 0 &&
		    strcmp(node->labels[l].value, want->value) == 0)
			return true;
	return false;
}

static void test_random_snapshots_respect_constraints(void **state)
{
	struct kn_rng rng;
	int placed_some = 0, refused_some = 0;

	(void)state;
	kn_rng_seed(&rng, 4242);
	for (int round = 0; round < 2000; round++) {
		struct node_spec specs[MAX_NODES];
		struct kn_sched_affinity_term req_terms[2], pref_terms[2];
		const char *values[4][COUNT(ZONES)];
		struct kn_sched_label selector = {"zone",
						  ZONES[kn_rng_below(&rng, 3)]};
		struct kn_sched_binding b[MAX_TASKS];
		struct kn_sched_request req = {0};
		size_t n = 1 + kn_rng_below(&rng, MAX_NODES);
		struct fixture f;
		char reason[256];
		int rc;

		for (size_t i = 0; i < n; i++)
			specs[i] = (struct node_spec){
				"n", (int)kn_rng_below(&rng, 5),
				maybe(&rng, ZONES, 3), maybe(&rng, ZONES, 3),
				NULL};
		build(&f, specs, n);
		for (size_t i = 0; i < n; i++)
			for (size_t d = 0; d < f.nodes[i].n_devices; d++)
				f.devices[i][d].used_milli =
					(int)kn_rng_below(&rng, 3) * 500;
		req.tasks = 1 + (int)kn_rng_below(&rng, 4);
		req.gpu_milli = kn_rng_below(&rng, 2) ? 500 : 1000;
		req.n_required = kn_rng_below(&rng, 3);
		req.n_preferred = kn_rng_below(&rng, 3);
		for (size_t t = 0; t < 2; t++) {
			random_term(&rng, &req_terms[t], values[t]);
			random_term(&rng, &pref_terms[t], values[2 + t]);
		}
		req.required = req_terms;
		req.preferred = pref_terms;
		if (kn_rng_below(&rng, 2)) {
			req.selector = &selector;
			req.n_selector = 1;
		}
		if (kn_rng_below(&rng, 2))
			req.spread_key = "zone";
		rc = kn_sched_place(&f.cluster, &req, b, reason,
				    sizeof(reason));
		if (rc != 0) {
			assert_int_equal(rc, -ENOSPC);
			refused_some++;
			continue;
		}
		placed_some++;
		for (int t = 0; t < req.tasks; t++) {
			const struct kn_sched_node *node =
				&f.nodes[b[t].node];

			for (size_t k = 0; k < req.n_required; k++)
				assert_true(holds(node, &req.required[k]));
			if (req.n_selector)
				assert_true(has_label(node, &selector));
		}
		for (size_t i = 0; i < n; i++)
			for (size_t d = 0; d < f.nodes[i].n_devices; d++)
				assert_true(f.devices[i][d].used_milli <=
					    1000);
	}
	/* Both outcomes occur, so neither branch above is vacuous. */
	assert_true(placed_some > 100);
	assert_true(refused_some > 100);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_required_terms),
	cmocka_unit_test(test_required_never_fits),
	cmocka_unit_test(test_preferred_weights),
	cmocka_unit_test(test_spread_zones),
	cmocka_unit_test(test_spread_fault_domains_with_full_domain),
	cmocka_unit_test(test_spread_placed_replicas),
	cmocka_unit_test(test_random_snapshots_respect_constraints))
