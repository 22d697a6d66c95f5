/*
 * Unit tests for exec: simulated device specs, and the shim run in-process
 * (it forks the task itself, so the test sees real exit codes, signals,
 * timeouts, log capture and rotation).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "exec/exec.h"

static void test_simulated_devices(void **state)
{
	struct kn_device_set set;
	struct kn_error err;
	(void)state;

	assert_int_equal(kn_devices_simulated("2xA100-80GB,4xT4-16GB", &set,
					      &err), 0);
	assert_int_equal(set.n, 6);
	assert_true(set.simulated);
	assert_string_equal(set.source, "simulated");
	assert_string_equal(set.devices[0].model, "A100-80GB");
	assert_int_equal(set.devices[0].memory_bytes, 80LL << 30);
	assert_string_equal(set.devices[5].model, "T4-16GB");
	assert_int_equal(set.devices[5].index, 5);
	assert_string_not_equal(set.devices[0].uuid, set.devices[1].uuid);
	assert_false(set.devices[0].mig);
	kn_device_set_release(&set);

	/* MIG mode per group. */
	assert_int_equal(kn_devices_simulated("2xA100-80GB:mig,1xT4-16GB", &set,
					      &err), 0);
	assert_int_equal(set.n, 3);
	assert_string_equal(set.devices[1].model, "A100-80GB");
	assert_true(set.devices[0].mig && set.devices[1].mig);
	assert_false(set.devices[2].mig);
	assert_null(strchr(set.devices[0].uuid, ':'));
	kn_device_set_release(&set);
}

static void test_simulated_devices_bad(void **state)
{
	static const char *bad[] = {
		"", "4", "xH100-80GB", "0xH100-80GB", "4xH100", "4xH100-80",
		"4xH100-80TB", "65xH100-80GB", "4x-80GB", "2xA100-80GB,,",
		"4xH 100-80GB", "2xA100-80GB:mps", "2xA100-80GB:", ":mig",
		"2x:mig",
	};
	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct kn_device_set set = {0};
		struct kn_error err = {0};
		assert_int_not_equal(kn_devices_simulated(bad[i], &set, &err), 0);
		assert_string_equal(err.field, "gpus");
		assert_non_null(strstr(err.message, "--gpus"));
		assert_null(set.devices);
	}
}

static void test_model_names(void **state)
{
	static const struct {
		const char *nvml;
		double gib;
		const char *want;
	} cases[] = {
		{"NVIDIA H100 80GB HBM3", 79.6, "H100-80GB"},
		{"NVIDIA A100-SXM4-80GB", 79.2, "A100-80GB"},
		{"NVIDIA A100-SXM4-40GB", 39.4, "A100-40GB"},
		{"NVIDIA H200", 140.4, "H200-141GB"},
		{"Tesla T4", 14.7, "T4-16GB"},
		{"Tesla V100-PCIE-16GB", 15.8, "V100-16GB"},
		{"NVIDIA H100 NVL", 93.6, "H100-94GB"},
		{"NVIDIA A10", 22.0, "A10-24GB"},
		{"NVIDIA B200", 179.0, "B200-179GB"},
		{"", 8.0, "GPU-8GB"},
	};
	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char out[64];
		kn_device_model_name(cases[i].nvml,
				     (int64_t)(cases[i].gib * (1 << 30)), out,
				     sizeof(out));
		assert_string_equal(out, cases[i].want);
	}
}

static void test_discover_without_nvml(void **state)
{
	struct kn_device_set set;
	struct kn_error err;
	(void)state;
	/* These test machines have no NVIDIA driver. */
	assert_int_equal(kn_devices_discover(&set, &err), 0);
	if (strcmp(set.source, "none") == 0)
		assert_int_equal(set.n, 0);
	kn_device_set_release(&set);
}

static char *make_task_dir(void)
{
	char tmpl[] = "/tmp/kn-shim-XXXXXX";
	assert_non_null(mkdtemp(tmpl));
	return kn_xstrdup(tmpl);
}

static void write_launch(const char *dir, const char *script, int64_t timeout,
			 int64_t log_max)
{
	json_t *doc = json_pack("{s:[s,s,s], s:[s], s:I, s:I, s:I, s:i}",
				"argv", "/bin/sh", "-c", script, "env",
				"KN_TEST_VALUE=from-env", "timeout_ms",
				(json_int_t)timeout, "grace_ms", (json_int_t)200,
				"log_max_bytes", (json_int_t)log_max, "log_keep", 2);
	char *path = kn_asprintf("%s/launch.json", dir);
	assert_int_equal(json_dump_file(doc, path, 0), 0);
	json_decref(doc);
	free(path);
}

static json_t *read_status(const char *dir)
{
	char *path = kn_asprintf("%s/status.json", dir);
	json_t *doc = json_load_file(path, 0, NULL);
	free(path);
	assert_non_null(doc);
	return doc;
}

static char *read_log(const char *dir, const char *name)
{
	char *path = kn_asprintf("%s/%s", dir, name), *text = NULL;
	size_t len;
	assert_int_equal(kn_read_file(path, 1 << 20, &text, &len), 0);
	free(path);
	return text;
}

static void test_shim_exit_code_and_output(void **state)
{
	char *dir = make_task_dir(), *log;
	struct kn_error err;
	json_t *st;
	(void)state;

	write_launch(dir, "echo out-$KN_TEST_VALUE; echo err >&2; exit 3", 0,
		     1 << 20);
	assert_int_equal(kn_shim_main(dir, &err), 0);
	st = read_status(dir);
	assert_int_equal(json_integer_value(json_object_get(st, "exit_code")), 3);
	assert_int_equal(json_integer_value(json_object_get(st, "signal")), 0);
	json_decref(st);
	log = read_log(dir, KN_LOG_FILE);
	assert_non_null(strstr(log, "out-from-env\n"));
	assert_non_null(strstr(log, "err\n"));
	free(log);
	kn_rm_rf(dir);
	free(dir);
}

static void test_shim_timeout_kills_group(void **state)
{
	char *dir = make_task_dir();
	struct kn_error err;
	json_t *st;
	(void)state;

	/* The shell ignores TERM, so only the SIGKILL after grace ends it. */
	write_launch(dir, "trap '' TERM; sleep 30 & sleep 30", 100, 1 << 20);
	assert_int_equal(kn_shim_main(dir, &err), 0);
	st = read_status(dir);
	assert_string_equal(json_string_value(json_object_get(st, "reason")),
			    "timeout");
	assert_int_equal(json_integer_value(json_object_get(st, "exit_code")), -1);
	assert_int_equal(json_integer_value(json_object_get(st, "signal")),
			 SIGKILL);
	json_decref(st);
	kn_rm_rf(dir);
	free(dir);
}

static void test_shim_rotates_log(void **state)
{
	char *dir = make_task_dir(), *log;
	struct kn_error err;
	struct stat sb;
	char *p;
	(void)state;

	write_launch(dir, "i=0; while [ $i -lt 400 ]; do echo line-$i; i=$((i+1)); done",
		     0, 1000);
	assert_int_equal(kn_shim_main(dir, &err), 0);
	log = read_log(dir, KN_LOG_FILE);
	assert_true(strlen(log) <= 1000);
	assert_non_null(strstr(log, "line-399\n"));
	free(log);
	p = kn_asprintf("%s/" KN_LOG_FILE ".2", dir);
	assert_int_equal(stat(p, &sb), 0);
	assert_true(sb.st_size <= 1000);
	free(p);
	p = kn_asprintf("%s/" KN_LOG_FILE ".3", dir);
	assert_int_equal(stat(p, &sb), -1); /* log_keep = 2 */
	free(p);
	kn_rm_rf(dir);
	free(dir);
}

static void test_shim_bad_command(void **state)
{
	char *dir = make_task_dir(), *log;
	struct kn_error err;
	json_t *st;
	(void)state;

	write_launch(dir, "exec /nonexistent/program", 0, 1 << 20);
	assert_int_equal(kn_shim_main(dir, &err), 0);
	st = read_status(dir);
	assert_int_equal(json_integer_value(json_object_get(st, "exit_code")), 127);
	json_decref(st);
	log = read_log(dir, KN_LOG_FILE);
	assert_non_null(strstr(log, "nonexistent"));
	free(log);
	kn_rm_rf(dir);
	free(dir);
}

static void test_shim_missing_launch(void **state)
{
	char *dir = make_task_dir();
	struct kn_error err;
	(void)state;
	assert_int_equal(kn_shim_main(dir, &err), 1);
	assert_non_null(strstr(err.message, "launch.json"));
	kn_rm_rf(dir);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_simulated_devices),
		cmocka_unit_test(test_simulated_devices_bad),
		cmocka_unit_test(test_model_names),
		cmocka_unit_test(test_discover_without_nvml),
		cmocka_unit_test(test_shim_exit_code_and_output),
		cmocka_unit_test(test_shim_timeout_kills_group),
		cmocka_unit_test(test_shim_rotates_log),
		cmocka_unit_test(test_shim_bad_command),
		cmocka_unit_test(test_shim_missing_launch),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
