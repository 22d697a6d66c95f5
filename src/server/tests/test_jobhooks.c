/*
 * Unit tests for the job hooks' dispatch (server/jobhooks.c): a job's end
 * reaches every service in registration order; task variables merge, an
 * earlier service's value standing; the first service that claims a
 * job's model or spread group answers; a service without a callback is
 * passed over; the table is bounded.
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
#include "server/jobhooks.h"

/* A service that owns the jobs whose ids it is given. */
struct fake_service {
	const char *name;
	int64_t owns;
	const char *dir;
	bool serves;
};

static char ended_log[256];

static void fake_job_ended(void *arg, int64_t job_id)
{
	const struct fake_service *f = arg;
	size_t len = strlen(ended_log);

	snprintf(ended_log + len, sizeof(ended_log) - len, "%s:%lld,",
		 f->name, (long long)job_id);
}

static void fake_task_env(void *arg, const struct job_task *t, json_t *env)
{
	const struct fake_service *f = arg;
	char value[64];

	if (t->job_id != f->owns)
		return;
	snprintf(value, sizeof(value), "%s/rank%d", f->name, t->rank);
	json_object_set_new(env, "KILN_SHARED", json_string(value));
	json_object_set_new(env, f->name, json_string("yes"));
}

static bool fake_model(void *arg, int64_t job_id, struct job_model *out)
{
	const struct fake_service *f = arg;

	if (job_id != f->owns)
		return false;
	out->dir = f->dir;
	out->serves = f->serves;
	return true;
}

static const void *fake_spread_group(void *arg, int64_t job_id)
{
	const struct fake_service *f = arg;

	return job_id == f->owns ? f : NULL;
}

static const struct job_hook_ops FULL = {
	.name = "full",
	.job_ended = fake_job_ended,
	.task_env = fake_task_env,
	.model = fake_model,
	.spread_group = fake_spread_group,
};

static const struct job_hook_ops ENDED_ONLY = {
	.name = "ended-only",
	.job_ended = fake_job_ended,
};

static void test_job_ended_in_order(void **state)
{
	struct job_hooks *h = job_hooks_new();
	struct fake_service a = { .name = "a" }, b = { .name = "b" };

	(void)state;
	ended_log[0] = '\0';
	assert_int_equal(job_hooks_add(h, &FULL, &a), 0);
	assert_int_equal(job_hooks_add(h, &ENDED_ONLY, &b), 0);
	job_hooks_job_ended(h, 7);
	job_hooks_job_ended(h, 9);
	assert_string_equal(ended_log, "a:7,b:7,a:9,b:9,");
	job_hooks_free(h);
}

static void test_task_env_merges(void **state)
{
	struct job_hooks *h = job_hooks_new();
	struct fake_service a = { .name = "A", .owns = 3 },
			    b = { .name = "B", .owns = 3 },
			    c = { .name = "C", .owns = 4 };
	struct job_task t = { .job_id = 3, .rank = 1 };
	json_t *env;

	(void)state;
	job_hooks_add(h, &FULL, &a);
	job_hooks_add(h, &ENDED_ONLY, &c); /* no task_env: passed over */
	job_hooks_add(h, &FULL, &b);
	job_hooks_add(h, &FULL, &c);
	env = job_hooks_task_env(h, &t);
	assert_non_null(env);
	assert_int_equal(json_object_size(env), 3);
	assert_string_equal(json_string_value(json_object_get(env, "A")), "yes");
	assert_string_equal(json_string_value(json_object_get(env, "B")), "yes");
	/* The first service's value stands. */
	assert_string_equal(
		json_string_value(json_object_get(env, "KILN_SHARED")),
		"A/rank1");
	json_decref(env);
	/* A job no service owns gets nothing. */
	t.job_id = 5;
	assert_null(job_hooks_task_env(h, &t));
	job_hooks_free(h);
}

static void test_model_first_claim(void **state)
{
	struct job_hooks *h = job_hooks_new();
	struct fake_service a = { .name = "a", .owns = 1, .dir = "/a" },
			    b = { .name = "b", .owns = 2, .dir = "/b",
				  .serves = true },
			    c = { .name = "c", .owns = 2, .dir = "/c" };
	struct job_model m = { .dir = "untouched" };

	(void)state;
	job_hooks_add(h, &ENDED_ONLY, &a);
	job_hooks_add(h, &FULL, &a);
	job_hooks_add(h, &FULL, &b);
	job_hooks_add(h, &FULL, &c);
	assert_true(job_hooks_model(h, 2, &m));
	assert_string_equal(m.dir, "/b");
	assert_true(m.serves);
	assert_null(m.ref);
	assert_true(job_hooks_model(h, 1, &m));
	assert_string_equal(m.dir, "/a");
	assert_false(m.serves);
	/* Unclaimed: *out is left as it was. */
	m.dir = "untouched";
	assert_false(job_hooks_model(h, 3, &m));
	assert_string_equal(m.dir, "untouched");
	job_hooks_free(h);
}

static void test_spread_group(void **state)
{
	struct job_hooks *h = job_hooks_new();
	struct fake_service a = { .name = "a", .owns = 1 },
			    b = { .name = "b", .owns = 2 };

	(void)state;
	assert_null(job_hooks_spread_group(h, 1));
	job_hooks_add(h, &ENDED_ONLY, &a);
	job_hooks_add(h, &FULL, &a);
	job_hooks_add(h, &FULL, &b);
	assert_ptr_equal(job_hooks_spread_group(h, 1), &a);
	assert_ptr_equal(job_hooks_spread_group(h, 2), &b);
	assert_null(job_hooks_spread_group(h, 3));
	job_hooks_free(h);
}

static void test_table_bounded(void **state)
{
	struct job_hooks *h = job_hooks_new();
	struct fake_service a = { .name = "a" };

	(void)state;
	for (int i = 0; i < JOB_HOOKS_MAX; i++)
		assert_int_equal(job_hooks_add(h, &ENDED_ONLY, &a), 0);
	assert_int_equal(job_hooks_add(h, &ENDED_ONLY, &a), -ENOSPC);
	ended_log[0] = '\0';
	job_hooks_job_ended(h, 1);
	assert_int_equal(strlen(ended_log), JOB_HOOKS_MAX * strlen("a:1,"));
	job_hooks_free(h);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_job_ended_in_order),
	cmocka_unit_test(test_task_env_merges),
	cmocka_unit_test(test_model_first_claim),
	cmocka_unit_test(test_spread_group),
	cmocka_unit_test(test_table_bounded))
