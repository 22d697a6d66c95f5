/*
 * MIG tables and placement: the shipped data/mig-profiles.csv (path given
 * as argv[1]) parsed, each GPU model's valid instance combinations
 * accepted and invalid ones refused, parse errors with file:line:column,
 * kn_sched_place binding MIG slices, and a property test that random
 * sequences never break the placement rules.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/tests/testmain.h"
#include "sched/sched.h"

static const char *data_path;
static const char *const models[] = {"A100-40GB", "A100-80GB", "H100-80GB",
				     "H200-141GB"};
/* Each model's profiles by size, in the data's order. */
static const char *const names[4][7] = {
	{"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb",
	 "7g.40gb"},
	{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb",
	 "7g.80gb"},
	{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb",
	 "7g.80gb"},
	{"1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb",
	 "7g.141gb"},
};
enum { P1G, P1G_ME, P1G_2M, P2G, P3G, P4G, P7G };

static struct kn_mig_table *load(void)
{
	FILE *f = fopen(data_path, "rb");
	char *buf = malloc(1 << 16);
	struct kn_mig_table *t = NULL;
	struct kn_error err = {0};
	size_t n;

	assert_non_null(f);
	n = fread(buf, 1, 1 << 16, f);
	fclose(f);
	if (kn_mig_parse(buf, n, data_path, &t, &err) < 0)
		fail_msg("%s", err.message);
	free(buf);
	return t;
}

/* Place the profiles in order (-1 ends); how many fit before one fails. */
static int place_all(const struct kn_mig_model *m, const int *seq,
		     struct kn_sched_mig_slice *used, int *starts)
{
	int n = 0;

	for (int i = 0; seq[i] >= 0; i++) {
		const struct kn_mig_profile *p = &m->profiles[seq[i]];
		int s;

		if (kn_mig_fit(m, used, n, p, &s) < 0)
			break;
		used[n].profile = p;
		used[n].start = s;
		if (starts)
			starts[n] = s;
		n++;
	}
	return n;
}

static void test_tables(void **state)
{
	struct kn_mig_table *t = load();

	assert_null(kn_mig_find(t, "V100-32GB"));
	for (int i = 0; i < 4; i++) {
		const struct kn_mig_model *m = kn_mig_find(t, models[i]);

		assert_non_null(m);
		assert_int_equal(m->compute, 7);
		assert_int_equal(m->memory, 8);
		assert_int_equal(m->n_profiles, 7);
		for (int p = 0; p < 7; p++)
			assert_string_equal(m->profiles[p].name, names[i][p]);
		assert_int_equal(m->profiles[P1G].max_instances, 7);
		assert_int_equal(m->profiles[P1G_ME].max_instances, 1);
		assert_int_equal(m->profiles[P3G].starts, 0x11u); /* {0,4} */
		assert_int_equal(m->profiles[P1G_2M].starts, 0x55u);
		assert_ptr_equal(kn_mig_profile(m, names[i][P2G]),
				 &m->profiles[P2G]);
	}
	assert_non_null(kn_mig_find(t, "h100-80gb"));
	assert_null(kn_mig_find(t, "V100"));
	kn_mig_free(t);
}

/* Combinations every model takes in full, and ones it must refuse. */
static void test_combinations(void **state)
{
	static const struct {
		int seq[10];
		int fits; /* how many of seq are placed */
	} cases[] = {
		{{P1G, P1G, P1G, P1G, P1G, P1G, P1G, -1}, 7},
		{{P1G, P1G, P1G, P1G, P1G, P1G, P1G, P1G, -1}, 7},
		{{P4G, P3G, -1}, 2},
		{{P3G, P3G, P1G, -1}, 2},
		{{P2G, P2G, P2G, P1G, -1}, 4},
		{{P1G_2M, P1G_2M, P1G_2M, P1G_2M, P1G, -1}, 4},
		{{P7G, P1G, -1}, 1},
		{{P4G, P4G, -1}, 1},
		{{P1G_ME, P1G_ME, -1}, 1},
		{{P1G_ME, P1G, P1G, P1G, P1G, P1G, P1G, -1}, 7},
		/* The start choice keeps the halves whole: a 1g first
		   goes to slice 6, so a 4g and a 2g still fit (7 compute
		   slices). Lowest-start-first would block the 4g. */
		{{P1G, P4G, P2G, P1G, -1}, 3},
		/* A 3g goes to slices 4-7, leaving four 1g starts. */
		{{P3G, P1G, P1G, P1G, P1G, P1G, -1}, 5},
		{{P3G, P4G, P1G, -1}, 2},
	};
	struct kn_mig_table *t = load();

	for (int i = 0; i < 4; i++) {
		const struct kn_mig_model *m = kn_mig_find(t, models[i]);

		for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
			struct kn_sched_mig_slice used[KN_MIG_MAX_SLICES];

			if (place_all(m, cases[c].seq, used, NULL) !=
			    cases[c].fits)
				fail_msg("%s case %zu", models[i], c);
		}
	}
	kn_mig_free(t);
}

static void test_start_choice(void **state)
{
	struct kn_mig_table *t = load();
	const struct kn_mig_model *m = kn_mig_find(t, "H100-80GB");
	struct kn_sched_mig_slice used[KN_MIG_MAX_SLICES];
	int seq[] = {P1G, P4G, P2G, -1}, starts[3];

	assert_int_equal(place_all(m, seq, used, starts), 3);
	assert_int_equal(starts[0], 6);
	assert_int_equal(starts[1], 0);
	assert_int_equal(starts[2], 4);
	kn_mig_free(t);
}

static void expect_error(const char *text, const char *message)
{
	struct kn_mig_table *t = NULL;
	struct kn_error err = {0};

	assert_int_equal(kn_mig_parse(text, strlen(text), "m.csv", &t, &err),
			 -EINVAL);
	assert_null(t);
	assert_string_equal(err.message, message);
}

#define HEADER                                                             \
	"model,gpu_compute_slices,gpu_memory_slices,profile,profile_id,"  \
	"compute_slices,memory_slices,max_instances,starts\n"

static void test_parse_errors(void **state)
{
	expect_error("model,profile\n",
		     "m.csv:1:1: row: expected 9 comma-separated columns");
	expect_error("model,gpu_compute_slices,gpu_memory_slices,profil,"
		     "profile_id,compute_slices,memory_slices,max_instances,"
		     "starts\n",
		     "m.csv:1:44: profile: header column expected here");
	expect_error(HEADER "X,7,8,1g.10gb,15,1,2,4,0 2 4 7\n",
		     "m.csv:2:24: starts: not space-separated distinct slice "
		     "indexes leaving room for the instance");
	expect_error(HEADER "X,7,8,1g,19,9,1,7,0\n",
		     "m.csv:2:13: compute_slices: not a whole number in "
		     "1..gpu_compute_slices");
	expect_error(HEADER "X,7,8,1g,19,1,1,7,0\nX,7,8,1g,19,1,1,7,1\n",
		     "m.csv:3:7: profile: listed twice for this model");
	expect_error(HEADER "X,7,8,1g,19,1,1,7,0\r\nX,7,4,2g,14,2,2,3,0\r\n",
		     "m.csv:3:3: gpu_compute_slices: differs from an earlier "
		     "row of this model");
	expect_error(HEADER, "m.csv:1:1: row: no profiles");
	/* A quoted field is the same text: "1g" repeats 1g. */
	expect_error(HEADER "X,7,8,\"1g\",19,1,1,7,0\nX,7,8,1g,19,1,1,7,1\n",
		     "m.csv:3:7: profile: listed twice for this model");
	expect_error(HEADER "X,7,8,1g,19,\"1,1,7,0\n",
		     "m.csv:2:13: a quoted field is not closed");
	{
		static const char nul[] = HEADER "X,7,8,1g\0,19,1,1,7,0\n";
		struct kn_mig_table *t = NULL;
		struct kn_error err = {0};

		assert_int_equal(kn_mig_parse(nul, sizeof(nul) - 1, "m.csv",
					      &t, &err),
				 -EINVAL);
		assert_null(t);
		assert_string_equal(err.message,
				    "m.csv:2:9: row: a NUL byte");
	}
}

/* kn_sched_place: MIG devices take MIG requests only, packed. */
static void test_place(void **state)
{
	struct kn_mig_table *t = load();
	const struct kn_mig_model *m = kn_mig_find(t, "H100-80GB");
	struct kn_sched_device devs[3] = {
		{.index = 0, .model = "H100-80GB", .mig = m},
		{.index = 1, .model = "H100-80GB", .mig = m},
		{.index = 2, .model = "H100-80GB"},
	};
	struct kn_sched_node node = {.name = "n", .schedulable = true,
				     .devices = devs, .n_devices = 3};
	struct kn_sched_cluster c = {&node, 1};
	struct kn_sched_request mig = {.tasks = 3, .mig_profile = "3g.40gb"};
	struct kn_sched_request whole = {.tasks = 1, .gpu_milli = 1000};
	struct kn_sched_binding b[3], w;
	char reason[256];

	assert_int_equal(kn_sched_place(&c, &mig, b, reason, sizeof(reason)),
			 0);
	/* A 3g takes slices 4-7 first (a 4g or four 1g still fit in 0-3),
	   then 0-3; the third opens device 1. */
	assert_int_equal(b[0].devices[0], 0);
	assert_int_equal(b[0].mig_start, 4);
	assert_ptr_equal(b[0].mig_profile, &m->profiles[P3G]);
	assert_int_equal(b[1].devices[0], 0);
	assert_int_equal(b[1].mig_start, 0);
	assert_int_equal(b[2].devices[0], 1);
	assert_int_equal(b[2].mig_start, 4);
	assert_int_equal(devs[0].n_mig_slices, 2);
	/* The whole GPU goes to the one device not in MIG mode. */
	assert_int_equal(kn_sched_place(&c, &whole, &w, reason,
					sizeof(reason)),
			 0);
	assert_int_equal(w.devices[0], 2);
	assert_int_equal(w.mig_start, -1);
	/* Two more 3g instances: only one placement is left. */
	mig.tasks = 2;
	assert_int_equal(kn_sched_place(&c, &mig, b, reason, sizeof(reason)),
			 -ENOSPC);
	assert_string_equal(reason,
			    "needs 2 tasks x a MIG 3g.40gb instance; most "
			    "free on one node is 1 such instance (n); room "
			    "for 1 of 2 tasks now");
	assert_int_equal(devs[1].n_mig_slices, 1);
	/* A profile of another model never fits. */
	mig.mig_profile = "1g.5gb";
	assert_int_equal(kn_sched_place(&c, &mig, b, reason, sizeof(reason)),
			 -ENOSPC);
	assert_string_equal(reason, KN_SCHED_NEVER
			    "no GPU in MIG mode offers profile 1g.5gb");
	/* Release gives the slices back. */
	mig.mig_profile = "3g.40gb";
	mig.tasks = 1;
	assert_int_equal(kn_sched_place(&c, &mig, b, reason, sizeof(reason)),
			 0);
	kn_sched_release(&c, &mig, b);
	assert_int_equal(devs[1].n_mig_slices, 1);
	kn_mig_free(t);
}

/*
 * An instance promised where a victim's still is (kn_sched_charge: both
 * start at slice 0 until the victim stops) is given back as itself: the
 * victim's instance stays, with its own profile.
 */
static void test_promise_over_a_victim(void **state)
{
	struct kn_mig_table *t = load();
	const struct kn_mig_model *m = kn_mig_find(t, "H100-80GB");
	struct kn_sched_device dev = {.index = 0, .model = "H100-80GB",
				      .mig = m};
	struct kn_sched_node node = {.name = "n", .schedulable = true,
				     .devices = &dev, .n_devices = 1};
	struct kn_sched_cluster c = {&node, 1};
	struct kn_sched_request small = {.tasks = 1, .mig_profile = "4g.40gb"};
	struct kn_sched_request big = {.tasks = 1, .mig_profile = "7g.80gb"};
	struct kn_sched_victim victim = {.job_id = 1, .preemptible = true,
					 .req = &small};
	struct kn_sched_binding held, promised;
	(void)state;

	assert_int_equal(kn_sched_place(&c, &small, &held, NULL, 0), 0);
	assert_int_equal(held.mig_start, 0);
	victim.bindings = &held;
	assert_int_equal(kn_sched_place_after(&c, &big, &victim, 1,
					      &promised), 0);
	assert_int_equal(promised.mig_start, 0);
	kn_sched_charge(&c, &big, &promised);
	assert_int_equal(dev.n_mig_slices, 2);
	kn_sched_release(&c, &big, &promised);
	assert_int_equal(dev.n_mig_slices, 1);
	assert_ptr_equal(dev.mig_slices[0].profile, held.mig_profile);
	assert_int_equal(dev.mig_slices[0].start, held.mig_start);
	kn_mig_free(t);
}

/*
 * An instance already made (a Slurm node's gres/gpu:1g.10gb): a device
 * whose geometry is one slice holding one instance of its profile takes
 * exactly one request of that profile, and nothing else.
 */
static void test_instance_already_made(void **state)
{
	struct kn_mig_model one = {
		.name = "slurm:1g.10gb", .compute = 1, .memory = 1,
		.profiles = {{.name = "1g.10gb", .compute = 1, .memory = 1,
			      .max_instances = 1, .starts = 1}},
		.n_profiles = 1,
	};
	struct kn_sched_device devs[2] = {
		{.index = 0, .model = "1g.10gb", .mig = &one},
		{.index = 1, .model = "1g.10gb", .mig = &one},
	};
	struct kn_sched_node node = {.name = "n", .schedulable = true,
				     .devices = devs, .n_devices = 2};
	struct kn_sched_cluster c = {&node, 1};
	struct kn_sched_request mig = {.tasks = 2, .mig_profile = "1g.10gb"};
	struct kn_sched_request whole = {.tasks = 1, .gpu_milli = 1000};
	struct kn_sched_binding b[2], w;
	char reason[256];
	(void)state;

	assert_int_equal(kn_sched_place(&c, &whole, &w, reason,
					sizeof(reason)),
			 -ENOSPC);
	assert_int_equal(kn_sched_place(&c, &mig, b, reason, sizeof(reason)),
			 0);
	assert_int_equal(b[0].devices[0] + b[1].devices[0], 1);
	assert_int_equal(b[0].mig_start, 0);
	assert_int_equal(devs[0].n_mig_slices, 1);
	assert_int_equal(devs[1].n_mig_slices, 1);
	/* Both instances are held: a third waits, it does not share. */
	mig.tasks = 1;
	assert_int_equal(kn_sched_place(&c, &mig, &w, reason, sizeof(reason)),
			 -ENOSPC);
	assert_null(strstr(reason, KN_SCHED_NEVER));
	kn_sched_release(&c, &mig, &b[1]);
	assert_int_equal(kn_sched_place(&c, &mig, &w, reason, sizeof(reason)),
			 0);
	assert_int_equal(w.devices[0], b[1].devices[0]);
}

/* Random profiles in random order never break a rule of the model. */
static void test_random_sequences(void **state)
{
	struct kn_mig_table *t = load();
	struct kn_rng rng;

	kn_rng_seed(&rng, 7);
	for (int round = 0; round < 2000; round++) {
		const struct kn_mig_model *m =
			kn_mig_find(t, models[kn_rng_below(&rng, 4)]);
		struct kn_sched_mig_slice used[KN_MIG_MAX_SLICES];
		int n = 0;

		for (int step = 0; step < 12; step++) {
			const struct kn_mig_profile *p =
				&m->profiles[kn_rng_below(&rng, 7)];
			unsigned mask = 0;
			int compute = 0, s;

			if (kn_mig_fit(m, used, n, p, &s) < 0)
				continue;
			assert_true(p->starts >> s & 1);
			used[n].profile = p;
			used[n++].start = s;
			for (int i = 0; i < n; i++) {
				unsigned r = ((1u << used[i].profile->memory) -
					      1)
					     << used[i].start;
				int same = 0;

				assert_int_equal(mask & r, 0);
				mask |= r;
				compute += used[i].profile->compute;
				for (int j = 0; j < n; j++)
					same += used[j].profile ==
						used[i].profile;
				assert_true(same <=
					    used[i].profile->max_instances);
			}
			assert_true(mask < 1u << m->memory);
			assert_true(compute <= m->compute);
		}
	}
	kn_mig_free(t);
}

KN_TEST_MAIN_WITH_PATH(data_path, "data/mig-profiles.csv", NULL, NULL,
	cmocka_unit_test(test_tables),
	cmocka_unit_test(test_combinations),
	cmocka_unit_test(test_start_choice),
	cmocka_unit_test(test_parse_errors),
	cmocka_unit_test(test_place),
	cmocka_unit_test(test_instance_already_made),
	cmocka_unit_test(test_promise_over_a_victim),
	cmocka_unit_test(test_random_sequences))
