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

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "base/tests/testmain.h"
#include "exec/exec.h"
#include "exec/internal.h"
#include "sandbox/sandbox.h"
#include "spec/spec.h"

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

/* As the NVIDIA driver lists them: two instances on GPU 0, one on 1. */
static const char mig_minors[] = "config 1\n"
				 "monitor 2\n"
				 "gpu0/gi1/access 12\n"
				 "gpu0/gi1/ci0/access 13\n"
				 "gpu0/gi2/access 21\n"
				 "gpu0/gi2/ci0/access 22\n"
				 "gpu1/gi1/access 147\n"
				 "gpu1/gi1/ci0/access 148\n"
				 "gpu0/gi3/access x\n";

static void test_device_mig_nodes(void **state)
{
	int gpu0[] = {0};
	char **nodes = kn_device_nodes("/dev", gpu0, 1);
	struct kn_error err;
	size_t k = 0;
	(void)state;

	/* Only its own instance's two nodes, after the GPU's. */
	assert_int_equal(kn_device_mig_nodes(nodes, "/dev/nvidia-caps",
					     mig_minors, "mig-minors", 0, 2, 0,
					     &err),
			 0);
	while (nodes[k])
		k++;
	assert_string_equal(nodes[0], "/dev/nvidia0");
	assert_string_equal(nodes[k - 2], "/dev/nvidia-caps/nvidia-cap21");
	assert_string_equal(nodes[k - 1], "/dev/nvidia-caps/nvidia-cap22");
	kn_strv_free(nodes);

	/* An instance the driver does not list: refused, nothing added. */
	nodes = kn_device_nodes("/dev", gpu0, 1);
	assert_true(kn_device_mig_nodes(nodes, "/dev/nvidia-caps", mig_minors,
					"mig-minors", 0, 4, 0, &err) < 0);
	assert_string_equal(err.field, "mig");
	assert_non_null(strstr(err.message, "no minor for gpu0/gi4/access in "
					    "mig-minors"));
	/* gpu1's gi1 is not gpu0's; a compute instance not listed fails. */
	assert_true(kn_device_mig_nodes(nodes, "/dev/nvidia-caps", mig_minors,
					"mig-minors", 0, 1, 1, &err) < 0);
	assert_non_null(strstr(err.message, "gpu0/gi1/ci1/access"));
	assert_true(kn_device_mig_nodes(nodes, "/dev/nvidia-caps", mig_minors,
					"mig-minors", 0, 3, 0, &err) < 0);
	assert_non_null(strstr(err.message, "mig-minors:9: the minor of "
					    "gpu0/gi3/access is not a number"));
	assert_true(kn_device_mig_nodes(nodes, "/dev/nvidia-caps", "",
					"mig-minors", 1, 1, 0, &err) < 0);
	for (k = 0; nodes[k]; k++)
		assert_null(strstr(nodes[k], "nvidia-cap"));
	kn_strv_free(nodes);
}

static void test_device_nodes(void **state)
{
	char dir[] = "/tmp/kiln-devnodes-XXXXXX", *ctl;
	int gpus[] = {3, 1};
	char **nodes;
	(void)state;

	assert_non_null(mkdtemp(dir));
	ctl = kn_asprintf("%s/nvidiactl", dir);
	assert_int_equal(kn_write_file_replace(ctl, "", 0, 0600), 0);
	nodes = kn_device_nodes(dir, gpus, 2);
	/* Its own GPUs first, then only the control nodes that exist. */
	assert_string_equal(strrchr(nodes[0], '/'), "/nvidia3");
	assert_string_equal(strrchr(nodes[1], '/'), "/nvidia1");
	assert_string_equal(nodes[2], ctl);
	assert_null(nodes[3]);
	kn_strv_free(nodes);
	/* No GPU: nothing, not even the control nodes. */
	nodes = kn_device_nodes(dir, gpus, 0);
	assert_null(nodes[0]);
	kn_strv_free(nodes);
	unlink(ctl);
	free(ctl);
	rmdir(dir);
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

/* cmocka setup and teardown: a task directory of the test's own, as
   *state, removed after it whether it passed, failed or skipped. */
static int task_dir(void **state)
{
	*state = make_task_dir();
	return 0;
}

static int remove_task_dir(void **state)
{
	kn_rm_rf(*state);
	free(*state);
	return 0;
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

/*
 * The device nodes travel to the shim in launch.json's "devices", the
 * server's lookup of the task's user in "user".
 */
/* The shim run on dir's launch.json, which must see the task end; the
   status it wrote. */
static json_t *shim_status(const char *dir)
{
	struct kn_error err;

	assert_int_equal(kn_shim_main_prepared(dir, NULL, &err), 0);
	return read_status(dir);
}

/* The integer at key of a status. */
static json_int_t status_int(json_t *st, const char *key)
{
	return json_integer_value(json_object_get(st, key));
}

/* dir's task log holds text. */
static void log_has(const char *dir, const char *text)
{
	char *log = read_log(dir, KN_LOG_FILE);

	if (!strstr(log, text))
		fail_msg("the log lacks \"%s\": %s", text, log);
	free(log);
}

static void test_launch_carries_devices_and_user(void **state)
{
	char *dir = *state, *path = kn_asprintf("%s/launch.json", dir);
	char *argv[] = {"/bin/true", NULL};
	char *devices[] = {"/dev/nvidia2", "/dev/nvidiactl", NULL};
	const struct kn_sandbox_user u = {"kiln-task", 999, 995, {995, 44}, 2};
	struct kn_task_launch l = {.task_dir = dir, .argv = argv,
				   .devices = devices, .user = &u};
	struct kn_error err;
	json_t *doc, *got;

	assert_int_equal(exec_write_launch(&l, NULL, 0, 0, &err), 0);
	doc = json_load_file(path, 0, NULL);
	got = json_object_get(doc, "devices");
	assert_int_equal(json_array_size(got), 2);
	assert_string_equal(json_string_value(json_array_get(got, 0)),
			    "/dev/nvidia2");
	assert_string_equal(json_string_value(json_array_get(got, 1)),
			    "/dev/nvidiactl");
	got = json_object_get(doc, "user");
	assert_string_equal(json_string_value(json_object_get(got, "name")),
			    "kiln-task");
	assert_int_equal(json_integer_value(json_object_get(got, "uid")), 999);
	assert_int_equal(json_integer_value(json_object_get(got, "gid")), 995);
	got = json_object_get(got, "groups");
	assert_int_equal(json_array_size(got), 2);
	assert_int_equal(json_integer_value(json_array_get(got, 1)), 44);
	json_decref(doc);
	free(path);
}

static void test_shim_exit_code_and_output(void **state)
{
	char *dir = *state;
	json_t *st;

	write_launch(dir, "echo out-$KN_TEST_VALUE; echo err >&2; exit 3", 0,
		     1 << 20);
	st = shim_status(dir);
	assert_int_equal(status_int(st, "exit_code"), 3);
	assert_int_equal(status_int(st, "signal"), 0);
	json_decref(st);
	log_has(dir, "out-from-env\n");
	log_has(dir, "err\n");
}

/*
 * The exit record: written whole before the task, overwritten in the same
 * blocks of the same file at its end, read back; a torn one is refused.
 */
static void test_exit_record_in_place(void **state)
{
	static const char exit_json[] = "{\"exit_code\":0,\"signal\":0}";
	char *dir = make_task_dir(), *path, *text = NULL;
	struct kn_error err;
	struct stat before, after;
	int fd = -1, rw;
	(void)state;

	path = kn_asprintf("%s/" EXEC_EXIT_RECORD, dir);
	assert_int_equal(exec_exit_record_read(dir, &text, &err), -ENOENT);
	assert_int_equal(exec_exit_record_prepare(dir, &fd), 0);
	assert_int_equal(exec_exit_record_read(dir, &text, &err), -ENOENT);
	assert_int_equal(stat(path, &before), 0);
	assert_int_equal(before.st_size, EXEC_EXIT_RECORD_SIZE);
	assert_int_equal(exec_exit_record_write(dir, fd, exit_json,
						strlen(exit_json)), 0);
	assert_int_equal(stat(path, &after), 0);
	assert_int_equal(after.st_ino, before.st_ino);
	assert_int_equal(after.st_size, before.st_size);
	assert_int_equal(after.st_blocks, before.st_blocks);
	assert_int_equal(exec_exit_record_read(dir, &text, &err), 0);
	assert_string_equal(text, exit_json);
	free(text);
	text = NULL;
	/* One byte of the payload changed: the checksum no longer holds. */
	rw = open(path, O_WRONLY);
	assert_true(rw >= 0);
	assert_int_equal(pwrite(rw, "1", 1, 24 + 13), 1);
	assert_int_equal(exec_exit_record_read(dir, &text, &err), -EBADMSG);
	assert_non_null(strstr(err.message, "torn"));
	/* Cut short: the length is wrong. */
	assert_int_equal(ftruncate(rw, 100), 0);
	assert_int_equal(exec_exit_record_read(dir, &text, &err), -EBADMSG);
	assert_null(text);
	close(rw);
	close(fd);
	free(path);
	kn_rm_rf(dir);
	free(dir);
}

/*
 * Without status.json (a full disk refused it), or with one a crash of
 * the machine left empty or cut short (it is not synced: the record is),
 * the record says the exit.
 */
static void test_shim_exit_read_from_record(void **state)
{
	char *dir = *state, *path;
	struct kn_task_status st;
	struct kn_error err;
	int fd;

	write_launch(dir, "exit 5", 0, 1 << 20);
	assert_int_equal(kn_shim_main_prepared(dir, NULL, &err), 0);
	path = kn_asprintf("%s/status.json", dir);
	for (off_t cut = 5; cut >= 0; cut -= 5) {
		fd = open(path, O_WRONLY);
		assert_true(fd >= 0);
		assert_int_equal(ftruncate(fd, cut), 0);
		close(fd);
		memset(&st, 0, sizeof(st));
		assert_int_equal(exec_read_status(dir, &st, &err), 0);
		assert_true(st.ended);
		assert_int_equal(st.exit_code, 5);
	}
	assert_int_equal(unlink(path), 0);
	memset(&st, 0, sizeof(st));
	assert_int_equal(exec_read_status(dir, &st, &err), 0);
	assert_true(st.ended);
	assert_int_equal(st.exit_code, 5);
	assert_true(st.ended_at_ms > 0);
	free(path);
}

static void test_shim_timeout_kills_group(void **state)
{
	char *dir = *state;
	struct kn_error err;
	json_t *st;

	/*
	 * The task ignores TERM from its first instruction (an ignored
	 * signal stays ignored across fork and exec; a trap set by the
	 * shell could come after the timeout on a busy machine), so only
	 * the SIGKILL after grace ends it.
	 */
	write_launch(dir, "sleep 30 & sleep 30", 100, 1 << 20);
	signal(SIGTERM, SIG_IGN);
	assert_int_equal(kn_shim_main_prepared(dir, NULL, &err), 0);
	signal(SIGTERM, SIG_DFL);
	st = read_status(dir);
	assert_string_equal(json_string_value(json_object_get(st, "reason")),
			    "timeout");
	assert_int_equal(status_int(st, "exit_code"), -1);
	assert_int_equal(status_int(st, "signal"),
			 SIGKILL);
	json_decref(st);
}

static void test_shim_rotates_log(void **state)
{
	char *dir = *state, *log;
	struct kn_error err;
	struct stat sb;
	char *p;

	write_launch(dir, "i=0; while [ $i -lt 400 ]; do echo line-$i; i=$((i+1)); done",
		     0, 1000);
	assert_int_equal(kn_shim_main_prepared(dir, NULL, &err), 0);
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
	/* The line times rotate with the log, each file's offsets its own. */
	for (int i = 0; i <= 2; i++) {
		char *log_path = i ? kn_asprintf("%s/" KN_LOG_FILE ".%d", dir, i)
				   : kn_asprintf("%s/" KN_LOG_FILE, dir);
		p = i ? kn_asprintf("%s/" KN_LOG_TIMES_FILE ".%d", dir, i)
		      : kn_asprintf("%s/" KN_LOG_TIMES_FILE, dir);
		struct stat lb;
		int fd = open(p, O_RDONLY);
		struct kn_log_times *lt;

		assert_true(fd >= 0);
		assert_int_equal(stat(log_path, &lb), 0);
		lt = kn_log_times_new(fd);
		assert_true(kn_log_times_count(lt) >= 1);
		/* A rotated file starts with a record of its first byte. */
		assert_int_equal(kn_log_times_since(lt, 0), 0);
		assert_true(kn_log_times_since(lt, 0) < lb.st_size);
		kn_log_times_free(lt);
		KN_FREE_ALL(p, log_path);
	}
	p = kn_asprintf("%s/" KN_LOG_TIMES_FILE ".3", dir);
	assert_int_equal(stat(p, &sb), -1);
	free(p);
}

static struct kn_log_times *times_file(const char *path,
				       const int64_t (*recs)[2], size_t n,
				       const char *tail)
{
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);

	assert_true(fd >= 0);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(kn_log_times_append(fd, recs[i][0], recs[i][1]),
				 0);
	if (tail)
		assert_int_equal(write(fd, tail, strlen(tail)),
				 (ssize_t)strlen(tail));
	return kn_log_times_new(fd);
}

/* A line's time is the record at or before its first byte; since finds
   the first read at or after a time; a torn last record is not one. */
static void test_log_times_lookup(void **state)
{
	static const int64_t recs[][2] = {
		{0, 100}, {5, 200}, {20, 300}, {40, 400},
	};
	char *dir = make_task_dir();
	char *path = kn_asprintf("%s/times", dir);
	struct kn_log_times *lt = times_file(path, recs, 4, "torn");
	int64_t (*many)[2] = kn_xcalloc(1000, sizeof(*many));
	(void)state;

	assert_int_equal(kn_log_times_count(lt), 4);
	assert_int_equal(kn_log_times_at(lt, 0), 100);
	assert_int_equal(kn_log_times_at(lt, 4), 100);
	assert_int_equal(kn_log_times_at(lt, 5), 200);
	assert_int_equal(kn_log_times_at(lt, 19), 200);
	assert_int_equal(kn_log_times_at(lt, 20), 300);
	assert_int_equal(kn_log_times_at(lt, 1000000), 400);
	/* Out of order: looked up again from the start. */
	assert_int_equal(kn_log_times_at(lt, 6), 200);
	assert_int_equal(kn_log_times_since(lt, 0), 0);
	assert_int_equal(kn_log_times_since(lt, 150), 5);
	assert_int_equal(kn_log_times_since(lt, 300), 20);
	assert_int_equal(kn_log_times_since(lt, 401), -1);
	kn_log_times_free(lt);

	lt = times_file(path, NULL, 0, NULL);
	assert_int_equal(kn_log_times_at(lt, 0), 0);
	assert_int_equal(kn_log_times_since(lt, 0), -1);
	kn_log_times_free(lt);

	/* More records than one block: forward walks and jumps agree. */
	for (int i = 0; i < 1000; i++) {
		many[i][0] = 3 * i;
		many[i][1] = 5000 + i;
	}
	lt = times_file(path, (const int64_t(*)[2])many, 1000, NULL);
	for (int i = 0; i < 1000; i++)
		assert_int_equal(kn_log_times_at(lt, 3 * i + 2), 5000 + i);
	for (int i = 999; i >= 0; i -= 7)
		assert_int_equal(kn_log_times_at(lt, 3 * i + 1), 5000 + i);
	assert_int_equal(kn_log_times_since(lt, 5700), 2100);
	kn_log_times_free(lt);
	KN_FREE_ALL(many, path);
	kn_rm_rf(dir);
	free(dir);
}

/* The shim records when lines came beside the log, which stays exactly
   the task's bytes. */
static void test_shim_records_line_times(void **state)
{
	char *dir = *state, *log, *path;
	struct kn_error err;
	struct kn_log_times *lt;
	int64_t before = kn_now_ms(), after;
	int fd;

	write_launch(dir, "echo first; sleep 0.3; printf 'sec'; sleep 0.1; echo ond",
		     0, 1 << 20);
	assert_int_equal(kn_shim_main_prepared(dir, NULL, &err), 0);
	after = kn_now_ms();
	log = read_log(dir, KN_LOG_FILE);
	assert_string_equal(log, "first\nsecond\n");
	free(log);
	path = kn_asprintf("%s/" KN_LOG_TIMES_FILE, dir);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	lt = kn_log_times_new(fd);
	/* The second line's rest ("ond\n") starts no line and needs no
	   record (two, or one if the shim read both lines at once). */
	assert_true(kn_log_times_count(lt) >= 1);
	assert_true(kn_log_times_count(lt) <= 2);
	assert_true(kn_log_times_at(lt, 0) >= before);
	assert_true(kn_log_times_at(lt, 6) >= kn_log_times_at(lt, 0));
	assert_true(kn_log_times_at(lt, 6) <= after);
	assert_true(kn_log_times_since(lt, kn_log_times_at(lt, 6)) <= 6);
	kn_log_times_free(lt);
	free(path);
}

static void test_shim_bad_command(void **state)
{
	char *dir = *state;
	json_t *st;

	write_launch(dir, "exec /nonexistent/program", 0, 1 << 20);
	st = shim_status(dir);
	assert_int_equal(status_int(st, "exit_code"), 127);
	json_decref(st);
	log_has(dir, "nonexistent");
}

static void test_shim_missing_launch(void **state)
{
	char *dir = *state;
	struct kn_error err;
	assert_int_equal(kn_shim_main_prepared(dir, NULL, &err), 1);
	assert_non_null(strstr(err.message, "launch.json"));
}

/* Rewrite a launch.json field (value is taken), as the executors' writer
   adds them. */
static void launch_set_json(const char *dir, const char *key, json_t *value)
{
	char *path = kn_asprintf("%s/launch.json", dir);
	json_t *doc = json_load_file(path, 0, NULL);
	assert_non_null(doc);
	json_object_set_new(doc, key, value);
	assert_int_equal(json_dump_file(doc, path, 0), 0);
	json_decref(doc);
	free(path);
}

static void launch_set(const char *dir, const char *key, json_int_t value)
{
	launch_set_json(dir, key, json_integer(value));
}

/*
 * A shim whose launch.json has key set to value (taken) must end its
 * task unstarted, with code and a reason holding reason.
 */
static void shim_refuses(const char *key, json_t *value, int code,
			 const char *reason)
{
	char *dir = make_task_dir(), *marker = kn_asprintf("%s/ran", dir);
	char *script = kn_asprintf("touch %s", marker);
	json_t *st;

	write_launch(dir, script, 0, 1 << 20);
	launch_set_json(dir, key, value);
	st = shim_status(dir);
	assert_int_equal(status_int(st, "exit_code"),
			 code);
	assert_non_null(strstr(json_string_value(json_object_get(st, "reason")),
			       reason));
	assert_int_equal(access(marker, F_OK), -1);
	json_decref(st);
	KN_FREE_ALL(script, marker);
	kn_rm_rf(dir);
	free(dir);
}

/* A "user" of root's or the shim's own ids, or malformed. */
static void shim_refuses_user(json_t *user, const char *reason)
{
	shim_refuses("user", user, 127, reason);
}

static void test_shim_refuses_launch_user(void **state)
{
	(void)state;
	/* Unprivileged, the shim gives tasks its own uid in a namespace. */
	if (geteuid() != 0)
		skip();
	shim_refuses_user(json_pack("{s:s, s:i, s:i, s:[i]}", "name", "root",
				    "uid", 0, "gid", 0, "groups", 0),
			  "may not run as uid 0");
	shim_refuses_user(json_pack("{s:s, s:i, s:i, s:[i]}", "name", "x",
				    "uid", (int)getuid(), "gid", 54321,
				    "groups", 54321),
			  "the server's own");
	shim_refuses_user(json_pack("{s:s, s:i, s:i, s:[i]}", "name", "x",
				    "uid", 54321, "gid", (int)getgid(),
				    "groups", 54321),
			  "the server's own");
	shim_refuses_user(json_pack("{s:s, s:i, s:i, s:[i,i]}", "name", "x",
				    "uid", 54321, "gid", 54321, "groups",
				    54321, 0),
			  "in group 0");
	shim_refuses_user(json_pack("{s:s, s:i, s:i, s:[]}", "name", "x",
				    "uid", -1, "gid", 54321, "groups"),
			  "user.uid: not a uid");
	shim_refuses_user(json_pack("{s:s, s:i, s:s, s:[]}", "name", "x",
				    "uid", 54321, "gid", "0", "groups"),
			  "user.gid: not a gid");
	shim_refuses_user(json_pack("{s:s, s:i, s:i, s:[s]}", "name", "x",
				    "uid", 54321, "gid", 54321, "groups", "0"),
			  "user.groups[0]: not a gid");
	shim_refuses_user(json_string("kiln-task"), "user: not an object");
}

/* Limits that cannot be set stop the task before it runs, with a reason. */
static void test_shim_limits_refused(void **state)
{
	(void)state;
	shim_refuses("limits",
		     json_pack("{s:s, s:s, s:I}", "cgroup_root",
			       "/nonexistent-cgroup-root", "cgroup_parent",
			       "kiln", "memory_bytes", (json_int_t)1 << 30),
		     1, "cannot set limits: no cgroup hierarchy");
}

/* An empty file at root/rel, with the directories above it. */
static void fake_cgroup_file(const char *root, const char *rel)
{
	char *path = kn_asprintf("%s/%s", root, rel);
	char *slash = strrchr(path, '/');

	*slash = '\0';
	assert_int_equal(kn_mkdir_p(path, 0755), 0);
	*slash = '/';
	assert_int_equal(kn_write_file_replace(path, "", 0, 0600), 0);
	free(path);
}

/*
 * The task's first process is moved into its cgroup before it may go on;
 * one the cgroup refuses is killed first. Here the device cgroup (a fake
 * v1 tree) takes the limits but has no cgroup.procs to move it with.
 */
static void test_shim_child_refused_by_cgroup(void **state)
{
	char *dir = *state, *root = make_task_dir(), name[32];
	char *marker = kn_asprintf("%s/ran", dir), *rel;
	char *script = kn_asprintf("touch %s", marker);
	json_t *st;

	exec_task_cgroup_name(dir, name, sizeof(name));
	fake_cgroup_file(root, "devices/cgroup.procs");
	rel = kn_asprintf("devices/kiln/%s/devices.deny", name);
	fake_cgroup_file(root, rel);
	free(rel);
	rel = kn_asprintf("devices/kiln/%s/devices.allow", name);
	fake_cgroup_file(root, rel);
	free(rel);
	write_launch(dir, script, 0, 1 << 20);
	launch_set_json(dir, "devices", json_array());
	launch_set_json(dir, "limits",
			json_pack("{s:s, s:s}", "cgroup_root", root,
				  "cgroup_parent", "kiln"));
	st = shim_status(dir);
	assert_int_equal(status_int(st, "exit_code"), 1);
	assert_non_null(strstr(json_string_value(json_object_get(st, "reason")),
			       "cannot set limits"));
	assert_int_equal(access(marker, F_OK), -1);
	json_decref(st);
	KN_FREE_ALL(script, marker);
	kn_rm_rf(root);
	free(root);
}

/*
 * As root on cgroup v1: a task over its memory limit ends with the OOM
 * reason in the limit's own units, and its cgroup is gone afterwards.
 */
static void test_shim_oom_reason(void **state)
{
	char *dir = *state, *log, *parent, *mem;
	json_t *st;

	if (geteuid() != 0 || access("/sys/fs/cgroup/memory/cgroup.procs",
				     F_OK) != 0)
		skip();
	parent = kn_asprintf("/kiln-unit-shim-%d", (int)getpid());
	/* The task prints its memory cgroup, then touches 256 MiB. */
	write_launch(dir,
		     "grep :memory: /proc/self/cgroup; "
		     "exec /usr/bin/python3 -c \"b = b'a' * (256 << 20)\"",
		     0, 1 << 20);
	launch_set_json(dir, "limits",
			json_pack("{s:s, s:s, s:I, s:I}", "cgroup_root",
				  "/sys/fs/cgroup", "cgroup_parent", parent,
				  "memory_bytes", (json_int_t)32 << 20,
				  "pids_max", (json_int_t)64));
	st = shim_status(dir);
	assert_int_equal(status_int(st, "signal"),
			 SIGKILL);
	assert_string_equal(json_string_value(json_object_get(st, "reason")),
			    "out of memory (limit 32Mi)");
	json_decref(st);
	log = read_log(dir, KN_LOG_FILE);
	assert_non_null(strstr(log, parent));
	/* The task's cgroup is gone; only the parent this test made is left. */
	mem = kn_asprintf("/sys/fs/cgroup/memory%s", parent);
	assert_int_equal(rmdir(mem), 0);
	free(mem);
	for (const char *c = "cpu\0pids\0devices\0"; *c; c += strlen(c) + 1) {
		mem = kn_asprintf("/sys/fs/cgroup/%s%s", c, parent);
		rmdir(mem);
		free(mem);
	}
	KN_FREE_ALL(log, parent);
}

static void test_shim_timeout_signal_and_usr1(void **state)
{
	char *dir = *state;
	json_t *st;

	/*
	 * USR1 sent to the shim itself reaches the task (Slurm's --signal
	 * lands on the shim); the timeout then sends USR2, not SIGTERM.
	 * Without the sandbox, whose pid namespace would hide the shim
	 * from the task.
	 */
	write_launch(dir, "trap 'echo got-usr1' USR1; trap 'echo got-usr2; "
			  "exit 7' USR2; kill -USR1 $PPID; "
			  "while :; do sleep 0.05; done", 1000, 1 << 20);
	launch_set(dir, "timeout_signal", SIGUSR2);
	launch_set_json(dir, "isolation", json_string("none"));
	st = shim_status(dir);
	assert_string_equal(json_string_value(json_object_get(st, "reason")),
			    "timeout");
	assert_int_equal(status_int(st, "exit_code"), 7);
	json_decref(st);
	log_has(dir, "got-usr1\n");
	log_has(dir, "got-usr2\n");
}

static void test_shim_polls_for_stop(void **state)
{
	char *dir = *state;
	json_t *st;

	/* The task asks for its own stop through the file, with USR1,
	   written whole: the shim may look between a create and a write. */
	write_launch(dir, "trap 'echo stopped; exit 9' USR1; "
			  "echo '{\"signal\":10,\"grace_ms\":5000}' > stop.tmp; "
			  "mv stop.tmp stop.json; "
			  "while :; do sleep 0.05; done", 0, 1 << 20);
	launch_set(dir, "stop_poll_ms", 50);
	st = shim_status(dir);
	assert_int_equal(status_int(st, "exit_code"), 9);
	json_decref(st);
	log_has(dir, "stopped\n");
}

/* kn_kube_shim_run with stdout in DIR/stdout; returns what it wrote. */
static char *kube_shim_prepared(const char *dir, const char *script,
				int signo, int64_t grace_ms,
				const struct kn_shim_prepare *prep, int *code,
				char *reason, size_t len)
{
	char *const argv[] = {"/bin/sh", "-c", (char *)script, NULL};
	char *path = kn_asprintf("%s/stdout", dir), *text;
	int saved = dup(STDOUT_FILENO);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	struct kn_error err;

	assert_true(saved >= 0 && fd >= 0);
	fflush(stdout);
	dup2(fd, STDOUT_FILENO);
	close(fd);
	assert_int_equal(kn_kube_shim_run(dir, argv, signo, grace_ms, prep, code,
					  reason, len, &err), 0);
	dup2(saved, STDOUT_FILENO);
	close(saved);
	free(path);
	text = read_log(dir, "stdout");
	return text;
}

static char *kube_shim(const char *dir, const char *script, int signo,
		       int64_t grace_ms, int *code)
{
	char reason[96];

	return kube_shim_prepared(dir, script, signo, grace_ms, NULL, code,
				  reason, sizeof(reason));
}

static int refuse_to_start(void *arg, char *const *env, int log_fd,
			   char *why, size_t len)
{
	(void)arg;
	(void)env;
	(void)log_fd;
	snprintf(why, len, "input changed: data.bin");
	return -EIO;
}

static void test_kube_shim(void **state)
{
	char *dir = *state, *out, *log, cwd[4096];
	int code = -1;

	/* The stop signal reaches the task, which exits on its own; its
	   output is the container's (stdout), in the container's workdir. */
	out = kube_shim(dir, "pwd; trap 'echo checkpointed; exit 0' USR2; "
			     "kill -USR2 $PPID; while :; do sleep 0.05; done",
			SIGUSR2, 5000, &code);
	assert_int_equal(code, 0);
	assert_non_null(getcwd(cwd, sizeof(cwd)));
	assert_non_null(strstr(out, cwd));
	assert_non_null(strstr(out, "checkpointed\n"));
	free(out);
	/* Nothing went to the task directory's log. */
	log = kn_asprintf("%s/" KN_LOG_FILE, dir);
	assert_int_not_equal(access(log, F_OK), 0);
	free(log);
	/* One that ignores it is killed when the grace runs out; the exit
	   code is a shell's for that signal. */
	out = kube_shim(dir, "trap '' USR2; kill -USR2 $PPID; "
			     "while :; do sleep 0.05; done", SIGUSR2, 200,
			&code);
	assert_int_equal(code, 128 + SIGKILL);
	free(out);
	out = kube_shim(dir, "exit 5", SIGUSR2, 200, &code);
	assert_int_equal(code, 5);
	free(out);
	/* A task its preparation refused never runs; the reason comes back
	   for the pod's termination message. */
	{
		const struct kn_shim_prepare prep = {refuse_to_start, NULL};
		char reason[96];

		out = kube_shim_prepared(dir, "echo ran", SIGUSR2, 200, &prep,
					 &code, reason, sizeof(reason));
		assert_int_equal(code, 1);
		assert_string_equal(reason, "input changed: data.bin");
		assert_null(strstr(out, "ran"));
		free(out);
	}
}

static bool has_arg(char **args, const char *want)
{
	for (char **p = args; *p; p++)
		if (!strcmp(*p, want))
			return true;
	return false;
}

static void test_slurm_sbatch_args(void **state)
{
	static const char *const want[] = {
		"--parsable", "--job-name=train", "--ntasks=2",
		"--partition=gpu", "--gpus-per-task=2", "--cpus-per-task=4",
		"--mem-per-cpu=2500M",
		/* 90 s + 30.5 s grace -> 3 minutes, rounded up, plus one. */
		"--time=4", "--signal=B:USR1@31", "--requeue",
		"--container-image=nvcr.io/nvidia/pytorch:24.01-py3",
		"--output=/k/tasks/7/1/slurm-%j.out",
		/* Only named variables reach the job; the submitter's user. */
		"--export=PATH,LANG,LC_ALL,TZ,KILN_SLURM_BIN,"
		"KILN_SLURM_ATTEMPT_DIR,KILN_SLURM_STOP_SIGNAL,"
		"KILN_SLURM_STOP,KILN_SLURM_ARRAY_DIR",
	};
	struct kn_slurm_task t = {
		.rank = 1, .ntasks = 2, .gpus = 2, .cpus = 4,
		.memory_mb = 10000, .partition = "gpu", .requeue = true,
		.checkpoint_signal = SIGUSR1, .checkpoint_grace_ms = 30500,
		.image = "nvcr.io/nvidia/pytorch:24.01-py3", .job_name = "train",
	};
	char **a;
	int n = 0;
	(void)state;

	a = kn_slurm_sbatch_args(&t, 90000, "/k/tasks/7/1");
	assert_string_equal(a[0], "sbatch");
	while (a[n])
		n++;
	assert_string_equal(a[n - 1], "/k/tasks/7/1/slurm.sh");
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		if (!has_arg(a, want[i]))
			fail_msg("sbatch lacks %s", want[i]);
	for (char **p = a; *p; p++)
		assert_null(strstr(*p, "--uid"));
	kn_strv_free(a);
	t.run_as_set = true;
	t.uid = 999;
	t.gid = 995;
	a = kn_slurm_sbatch_args(&t, 90000, "/k/tasks/7/1");
	assert_true(has_arg(a, "--uid=999"));
	assert_true(has_arg(a, "--gid=995"));
	kn_strv_free(a);

	/* A share, no limits, not preemptible, no checkpoint. */
	memset(&t, 0, sizeof(t));
	t.ntasks = 1;
	t.shards = 25;
	t.job_name = "infer";
	a = kn_slurm_sbatch_args(&t, 0, "/k/tasks/8/1");
	assert_true(has_arg(a, "--gres=shard:25"));
	assert_true(has_arg(a, "--no-requeue"));
	for (char **p = a; *p; p++) {
		assert_null(strstr(*p, "--time"));
		assert_null(strstr(*p, "--signal"));
		assert_null(strstr(*p, "--partition"));
		assert_null(strstr(*p, "--mem"));
	}
	kn_strv_free(a);

	t.shards = 0;
	t.mig_profile = "1g.10gb";
	a = kn_slurm_sbatch_args(&t, 0, "/k/tasks/9/1");
	assert_true(has_arg(a, "--gres=gpu:1g.10gb:1"));
	kn_strv_free(a);
}

/* What each engine does itself, which the server asks instead of which
   executor it has. */
static void test_executor_instances(void **state)
{
	struct kn_slurm_config cfg = {100, "default=batch", NULL};
	struct kn_executor *local = kn_local_executor_new();
	struct kn_executor *slurm = kn_slurm_executor_new(&cfg);

	(void)state;
	assert_string_equal(local->ops->name, "local");
	assert_null(local->ops->selector_key);
	assert_null(local->ops->isolation);
	assert_null(local->ops->limits);
	assert_false(local->ops->home_searchable);
	assert_string_equal(slurm->ops->name, "slurm");
	assert_null(slurm->ops->check);
	assert_string_equal(slurm->ops->selector_key, "pool");
	assert_string_equal(slurm->ops->isolation,
			    "slurm executor: its own; pid namespace, home "
			    "hidden, environment built");
	assert_string_equal(slurm->ops->limits,
			    "tasks run under the slurm executor");
	assert_true(slurm->ops->home_searchable);
	assert_true(slurm->ops->times_from_engine);
	assert_false(local->ops->times_from_engine);
	assert_false(slurm->ops->places_tasks || local->ops->places_tasks);
	assert_false(slurm->ops->syncs_checkpoints ||
		     local->ops->syncs_checkpoints);
	kn_executor_free(local);
	kn_executor_free(slurm);
	kn_executor_free(NULL);
}

static struct kn_job_spec *slurm_spec(const char *text)
{
	struct kn_job_spec *spec = NULL;
	struct kn_error err = {0};

	assert_int_equal(kn_job_spec_parse(text, strlen(text), "j.yaml", &spec,
					   &err), 0);
	return spec;
}

/* The local executor refuses an image it cannot run, naming the field. */
static void test_local_check(void **state)
{
	struct kn_executor *local = kn_local_executor_new();
	struct kn_job_spec *spec;
	struct kn_error err = {0};

	(void)state;
	spec = slurm_spec("kind: Job\nname: tr\ncommand: [x]\n");
	assert_int_equal(local->ops->check(local, spec, &err), 0);
	kn_job_spec_free(spec);
	spec = slurm_spec("kind: Job\nname: tr\ncommand: [x]\nimage: a:1\n");
	assert_int_equal(local->ops->check(local, spec, &err), -EINVAL);
	assert_string_equal(err.field, "image");
	assert_non_null(strstr(err.message, "runs no containers"));
	kn_job_spec_free(spec);
	kn_executor_free(local);
}

/* sbatch options come from the task's spec and the partition map. */
static void test_slurm_task_fill(void **state)
{
	struct kn_slurm_config cfg = {
		100, "default=batch,spot=cheap,pool:a100=big", NULL};
	struct kn_task_launch l = {.rank = 1, .ntasks = 2};
	struct kn_slurm_task t;
	char partition[16];

	(void)state;
	l.spec = slurm_spec("kind: Job\nname: tr\ncommand: [x]\n"
			    "resources: {gpus: 0.25, cpus: 1.5, memory: 3Gi}\n"
			    "preemptible: true\n"
			    "checkpoint: {every: 10m, grace: 45s}\n");
	kn_slurm_task_fill(&cfg, &l, &t, partition, sizeof(partition));
	assert_int_equal(t.rank, 1);
	assert_int_equal(t.ntasks, 2);
	assert_string_equal(t.job_name, "tr");
	assert_int_equal(t.gpus, 0);
	assert_int_equal(t.shards, 25); /* a quarter of 100 shards */
	assert_int_equal(t.cpus, 2);    /* rounded up */
	assert_int_equal(t.memory_mb, 3072);
	assert_true(t.requeue);
	assert_int_equal(t.checkpoint_grace_ms, 45000);
	assert_string_equal(t.partition, "cheap"); /* spot before default */
	kn_job_spec_free((struct kn_job_spec *)l.spec);

	l.spec = slurm_spec("kind: Job\nname: tr\ncommand: [x]\n"
			    "resources: {gpus: 2}\npreemptible: true\n"
			    "placement: {selector: {pool: a100}}\n");
	kn_slurm_task_fill(&cfg, &l, &t, partition, sizeof(partition));
	assert_int_equal(t.gpus, 2);
	assert_int_equal(t.shards, 0);
	assert_string_equal(t.partition, "big"); /* pool before spot */
	kn_job_spec_free((struct kn_job_spec *)l.spec);

	/* No key the map has: Slurm's default partition. */
	cfg.partitions = NULL;
	l.spec = slurm_spec("kind: Job\nname: tr\ncommand: [x]\n");
	kn_slurm_task_fill(&cfg, &l, &t, partition, sizeof(partition));
	assert_null(t.partition);
	assert_false(t.requeue);
	kn_job_spec_free((struct kn_job_spec *)l.spec);
}

/* The partition map's entries and the shard count, each refused by
   name; a good map and no map pass. */
static void test_slurm_config_check(void **state)
{
	static const char *const bad[] = {
		"batch", "=batch", "default=", "gpu=batch", "pool:=batch",
		"default=batch,,spot", NULL,
	};
	struct kn_slurm_config cfg = {100, "default=batch,spot=c,pool:a=b",
				      NULL};
	struct kn_error err;

	(void)state;
	assert_int_equal(kn_slurm_config_check(&cfg, &err), 0);
	cfg.partitions = NULL;
	assert_int_equal(kn_slurm_config_check(&cfg, &err), 0);
	for (size_t i = 0; bad[i]; i++) {
		cfg.partitions = bad[i];
		assert_int_equal(kn_slurm_config_check(&cfg, &err), -EINVAL);
		assert_string_equal(err.field, "slurm_partitions");
	}
	cfg.partitions = NULL;
	cfg.shards_per_gpu = 0;
	assert_int_equal(kn_slurm_config_check(&cfg, &err), -EINVAL);
	assert_string_equal(err.field, "slurm_shards_per_gpu");
	cfg.shards_per_gpu = 1001;
	assert_int_equal(kn_slurm_config_check(&cfg, &err), -EINVAL);
}

static void test_slurm_host_list_and_states(void **state)
{
	char host[16];
	(void)state;

	kn_slurm_first_host("gpu[03-05,9],cpu1", host, sizeof(host));
	assert_string_equal(host, "gpu03");
	kn_slurm_first_host("vm", host, sizeof(host));
	assert_string_equal(host, "vm");
	kn_slurm_first_host("a,b", host, sizeof(host));
	assert_string_equal(host, "a");
	kn_slurm_first_host("", host, sizeof(host));
	assert_string_equal(host, "");
	kn_slurm_first_host("averyveryverylongname[1-2]", host, sizeof(host));
	assert_string_equal(host, "averyveryverylo");

	/* A shim's node file: one name, what srun's --nodelist gets. */
	static const char *const bad_nodes[] = {
		"", "\n", "-w\n", "--help", ".hidden", "a b\n", "vm\nvm2\n",
		"vm\n\n", "gpu[1-2]\n", "a,b", "vm\0x", "averyveryverylongname",
	};
	assert_int_equal(kn_slurm_node_file_parse("vm\n", 3, host,
						  sizeof(host)), 0);
	assert_string_equal(host, "vm");
	assert_int_equal(kn_slurm_node_file_parse("gpu-03.x_1", 10, host,
						  sizeof(host)), 0);
	assert_string_equal(host, "gpu-03.x_1");
	for (size_t i = 0; i < sizeof(bad_nodes) / sizeof(bad_nodes[0]); i++) {
		size_t n = strlen(bad_nodes[i]) + (i == 10 ? 2 : 0);
		strcpy(host, "untouched");
		assert_int_equal(kn_slurm_node_file_parse(bad_nodes[i], n, host,
							  sizeof(host)),
				 -EINVAL);
		assert_string_equal(host, "untouched");
	}

	/* Which job states sacct reports as final. */
	static const char *const running[] = {"PENDING", "RUNNING",
					      "COMPLETING"};
	static const char *const final[] = {"COMPLETED", "CANCELLED",
					    "NODE_FAIL", "GONE"};
	for (size_t i = 0; i < sizeof(running) / sizeof(running[0]); i++)
		if (kn_slurm_state_final(running[i]))
			fail_msg("%s is taken as final", running[i]);
	for (size_t i = 0; i < sizeof(final) / sizeof(final[0]); i++)
		if (!kn_slurm_state_final(final[i]))
			fail_msg("%s is not taken as final", final[i]);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_simulated_devices),
	cmocka_unit_test(test_simulated_devices_bad),
	cmocka_unit_test(test_device_nodes),
	cmocka_unit_test(test_device_mig_nodes),
	cmocka_unit_test_setup_teardown(
		test_launch_carries_devices_and_user, task_dir,
		remove_task_dir),
	cmocka_unit_test(test_shim_limits_refused),
	cmocka_unit_test_setup_teardown(
		test_shim_child_refused_by_cgroup, task_dir,
		remove_task_dir),
	cmocka_unit_test(test_shim_refuses_launch_user),
	cmocka_unit_test_setup_teardown(test_shim_oom_reason, task_dir,
					remove_task_dir),
	cmocka_unit_test(test_model_names),
	cmocka_unit_test(test_discover_without_nvml),
	cmocka_unit_test_setup_teardown(
		test_shim_exit_code_and_output, task_dir,
		remove_task_dir),
	cmocka_unit_test_setup_teardown(
		test_shim_timeout_kills_group, task_dir,
		remove_task_dir),
	cmocka_unit_test_setup_teardown(test_shim_rotates_log, task_dir,
					remove_task_dir),
	cmocka_unit_test_setup_teardown(test_shim_bad_command, task_dir,
					remove_task_dir),
	cmocka_unit_test_setup_teardown(
		test_shim_missing_launch, task_dir, remove_task_dir),
	cmocka_unit_test_setup_teardown(
		test_shim_timeout_signal_and_usr1, task_dir,
		remove_task_dir),
	cmocka_unit_test_setup_teardown(
		test_shim_polls_for_stop, task_dir, remove_task_dir),
	cmocka_unit_test_setup_teardown(test_kube_shim, task_dir,
					remove_task_dir),
	cmocka_unit_test(test_slurm_sbatch_args),
	cmocka_unit_test(test_slurm_host_list_and_states),
	cmocka_unit_test(test_executor_instances),
	cmocka_unit_test(test_slurm_task_fill),
	cmocka_unit_test(test_local_check),
	cmocka_unit_test(test_slurm_config_check),
	cmocka_unit_test(test_exit_record_in_place),
	cmocka_unit_test(test_log_times_lookup),
	cmocka_unit_test_setup_teardown(
		test_shim_records_line_times, task_dir,
		remove_task_dir),
	cmocka_unit_test_setup_teardown(
		test_shim_exit_read_from_record, task_dir,
		remove_task_dir))
