/*
 * Unit tests for `kind: DevEnvironment`: its defaults, its own fields,
 * the job fields it refuses with file:line:column, and the input text
 * that reads back as the same spec.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/tests/testmain.h"
#include "spec/spec.h"
#include "spec_cases.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define BASE "kind: DevEnvironment\nname: box\n"

static struct kn_job_spec *parse_ok(const char *yaml)
{
	struct kn_job_spec *spec = NULL;
	struct kn_error err;
	int rc = kn_job_spec_parse(yaml, strlen(yaml), "dev.yaml", &spec, &err);

	if (rc < 0)
		fail_msg("%s", err.message);
	return spec;
}

static void test_defaults(void **state)
{
	struct kn_job_spec *spec = parse_ok(BASE);

	(void)state;
	assert_true(spec->devenv.set);
	assert_int_equal(spec->devenv.idle_timeout_ms, 60 * 60 * 1000);
	assert_int_equal(spec->devenv.max_duration_ms, 0);
	assert_int_equal(spec->devenv.idle_gpu_milli, 50);
	assert_int_equal(spec->tasks, 1);
	assert_int_equal(spec->retries, 0);
	assert_int_equal(spec->n_command, 2);
	assert_string_equal(spec->command[0], "sleep");
	assert_string_equal(spec->command[1], "infinity");
	kn_job_spec_free(spec);
}

static void test_fields(void **state)
{
	struct kn_job_spec *spec = parse_ok(
		BASE "command: [jupyter, lab]\nimage: nvcr.io/x:1\n"
		     "resources:\n  gpus: 2\n  memory: 8Gi\n"
		     "env:\n  A: b\nidle_timeout: 30m\nmax_duration: 8h\n"
		     "idle_gpu_utilization: 0.1\npriority: 5\n");

	(void)state;
	assert_string_equal(spec->command[0], "jupyter");
	assert_string_equal(spec->image, "nvcr.io/x:1");
	assert_int_equal(spec->resources.gpu_milli, 2000);
	assert_int_equal(spec->devenv.idle_timeout_ms, 30 * 60 * 1000);
	assert_int_equal(spec->devenv.max_duration_ms, 8 * 3600 * 1000);
	assert_int_equal(spec->devenv.idle_gpu_milli, 100);
	assert_int_equal(spec->priority, 5);
	kn_job_spec_free(spec);
}

static const struct bad_case bad_cases[] = {
	{BASE "tasks: 2\n", "tasks",
	 "dev.yaml:3:1: unknown field \"tasks\" in dev environment"},
	{BASE "timeout: 1h\n", "timeout",
	 "dev.yaml:3:1: unknown field \"timeout\" in dev environment"},
	{BASE "array: 1-3\n", "array",
	 "dev.yaml:3:1: unknown field \"array\" in dev environment"},
	{BASE "idle_timout: 1h\n", "idle_timout",
	 "dev.yaml:3:1: unknown field \"idle_timout\" in dev environment; "
	 "did you mean \"idle_timeout\"?"},
	{BASE "idle_timeout: 0\n", "idle_timeout",
	 "dev.yaml:3:15: idle_timeout: must be a duration such as 90s, 5m or "
	 "1h30m, at most 3650d; got 0"},
	{BASE "max_duration: soon\n", "max_duration",
	 "dev.yaml:3:15: max_duration: must be a duration such as 90s, 5m or "
	 "1h30m, at most 3650d (0 for none); got \"soon\""},
	{BASE "idle_gpu_utilization: 1.5\n", "idle_gpu_utilization",
	 "dev.yaml:3:23: idle_gpu_utilization: must be a share of a GPU's "
	 "time between 0 and 1 in thousandths (e.g. 0.05); got 1.5"},
	{BASE "idle_gpu_utilization: 5%\n", "idle_gpu_utilization",
	 "dev.yaml:3:23: idle_gpu_utilization: must be a share of a GPU's "
	 "time between 0 and 1 in thousandths (e.g. 0.05); got \"5%\""},
	{"kind: DevEnvironment\n", "name",
	 "dev.yaml:1:1: missing required field \"name\" in dev environment"},
	{BASE "resources:\n  gpus: 9\n", "resources.gpus", NULL},
};

static void test_bad(void **state)
{
	(void)state;
	expect_refused(bad_cases, ARRAY_SIZE(bad_cases), "dev.yaml", parse_job);
}

static void test_json_and_input_text(void **state)
{
	struct kn_job_spec *spec = parse_ok(
		BASE "command: [bash]\nworkdir: /w\nidle_timeout: 90s\n"
		     "max_duration: 2h\nidle_gpu_utilization: 0.2\n");
	struct kn_job_spec *again;
	json_t *doc = kn_job_spec_to_json(spec), *d;
	char *text = kn_job_spec_to_input_text(spec, "box2");

	(void)state;
	assert_string_equal(json_string_value(json_object_get(doc, "kind")),
			    "DevEnvironment");
	d = json_object_get(doc, "devenv");
	assert_int_equal(json_integer_value(json_object_get(d,
							    "idle_timeout_ms")),
			 90000);
	assert_int_equal(
		json_integer_value(json_object_get(d, "max_duration_ms")),
		7200000);
	assert_true(json_real_value(json_object_get(
			    d, "idle_gpu_utilization")) == 0.2);
	again = parse_ok(text);
	assert_string_equal(again->name, "box2");
	assert_true(again->devenv.set);
	assert_int_equal(again->devenv.idle_timeout_ms, 90000);
	assert_int_equal(again->devenv.max_duration_ms, 7200000);
	assert_int_equal(again->devenv.idle_gpu_milli, 200);
	assert_string_equal(again->workdir, "/w");
	assert_string_equal(again->command[0], "bash");
	json_decref(doc);
	free(text);
	kn_job_spec_free(again);
	kn_job_spec_free(spec);
}

static void test_kind(void **state)
{
	static const char job[] = "kind: Job\nname: x\ncommand: [a]\n";
	struct kn_job_spec *spec = parse_ok(job);

	(void)state;
	assert_string_equal(kn_spec_kind(BASE, strlen(BASE)),
			    "DevEnvironment");
	/* A job stays a job: nothing of a dev environment is set. */
	assert_false(spec->devenv.set);
	kn_job_spec_free(spec);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_defaults),
	cmocka_unit_test(test_fields),
	cmocka_unit_test(test_bad),
	cmocka_unit_test(test_json_and_input_text),
	cmocka_unit_test(test_kind))
