/*
 * Unit tests for the server's Kubernetes executor: a task's state from
 * recorded Job and Pod objects (tests/fixtures/kube/executor, the
 * fixtures directory is argv[1]) and the manifests of one attempt.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube/kube.h"
#include "fixture.h"

/* A pod fixture as the pod of index (its annotation rewritten). */
static json_t *pod_at(const char *name, int index)
{
	json_t *pod = fixture_load("executor", name);
	char idx[16];

	snprintf(idx, sizeof(idx), "%d", index);
	json_object_set_new(
		json_object_get(json_object_get(pod, "metadata"),
				"annotations"),
		"batch.kubernetes.io/job-completion-index", json_string(idx));
	return pod;
}

/* The state of rank from a Job fixture (or none) and pod fixtures. */
static void state_of(const char *job_file, bool stopping, int rank,
		     struct kn_kube_task_view *v, const char *pod0,
		     const char *pod1)
{
	json_t *job = job_file ? fixture_load("executor", job_file) : NULL;
	json_t *pods = json_array();

	if (pod0)
		json_array_append_new(pods, pod_at(pod0, 0));
	if (pod1)
		json_array_append_new(pods, pod_at(pod1, 1));
	kn_kube_task_state(job, pods, rank, stopping, v);
	json_decref(job);
	json_decref(pods);
}

/* Not looked at by a case. */
#define ANY INT_MIN

/* One rank's state from a Job fixture and pod fixtures (NULL: none) and
   what is expected of it: ended, running, preempted are 0, 1 or ANY. */
struct view_case {
	const char *what;
	const char *job, *pod0, *pod1;
	bool stopping;
	int rank;
	int ended, running, preempted, exit_code, signal;
	const char *reason;      /* the whole reason, NULL: not looked at */
	const char *reason_part; /* a part of it, NULL: not looked at */
};

static const struct view_case VIEWS[] = {
	/* what, job, pod0, pod1, stopping, rank,
	   ended, running, preempted, exit_code, signal, reason, part */
	{"running", "job-active.json", "pod-running.json", "pod-running.json",
	 false, 0, 0, 1, ANY, ANY, ANY, NULL, NULL},
	{"succeeded", "job-complete.json", "pod-succeeded.json",
	 "pod-succeeded.json", false, 1, 1, ANY, ANY, 0, 0, "", NULL},
	/* Pods gone (cleaned up), the Job complete: every rank exited 0. */
	{"complete, pods gone", "job-complete.json", NULL, NULL, false, 1,
	 1, ANY, ANY, 0, ANY, NULL, NULL},
	/* Rank 1's own pod failed with exit code 3; rank 0 still runs. */
	{"own pod failed", "job-active.json", "pod-running.json",
	 "pod-failed.json", false, 1, 1, ANY, 0, 3, ANY, "", NULL},
	{"another's pod failed", "job-active.json", "pod-running.json",
	 "pod-failed.json", false, 0, 0, ANY, ANY, ANY, ANY, NULL, NULL},
	/* The Job failed: rank 0, still terminating, ends with it. */
	{"job failed", "job-failed.json", "pod-running.json",
	 "pod-failed.json", false, 0, 1, ANY, ANY, -1, ANY,
	 "Job failed: BackoffLimitExceeded", NULL},
	{"oomkilled", "job-failed.json", "pod-oomkilled.json", NULL, false, 0,
	 ANY, ANY, ANY, 137, ANY, "OOMKilled, exit code 137", NULL},
	{"evicted", "job-failed.json", "pod-evicted.json", NULL, false, 0,
	 1, ANY, 0, 137, ANY, NULL,
	 "Evicted: The node was low on resource: memory"},
	{"deadline", "job-deadline.json", "pod-deadline.json", NULL, false, 0,
	 1, ANY, ANY, ANY, ANY, "timeout", NULL},
	/* The pods already deleted by the Job controller. */
	{"deadline, pods gone", "job-deadline.json", NULL, NULL, false, 1,
	 1, ANY, ANY, ANY, SIGKILL, "timeout", NULL},
	{"disrupted", "job-active.json", "pod-disrupted.json",
	 "pod-running.json", false, 0, 1, ANY, 1, ANY, ANY,
	 "disrupted: DeletionByTaintManager", NULL},
	{"another disrupted", "job-active.json", "pod-disrupted.json",
	 "pod-running.json", false, 1, 0, ANY, ANY, ANY, ANY, NULL, NULL},
	{"job gone", NULL, NULL, NULL, false, 0, 1, ANY, 0, -1, ANY,
	 "lost: the Kubernetes Job is gone", NULL},
	{"job deleted", NULL, NULL, NULL, true, 0, 1, ANY, ANY, ANY, SIGTERM,
	 "stopped: Job deleted", NULL},
	/* Deleted (foreground): the Job stays while a pod still runs. */
	{"deleted, pod runs", "job-active.json", "pod-running.json", NULL,
	 true, 0, 0, ANY, ANY, ANY, ANY, NULL, NULL},
	{"deleted, pod gone", "job-active.json", "pod-running.json", NULL,
	 true, 1, 1, ANY, ANY, ANY, ANY, NULL, NULL},
	/* Not deleted: a missing pod is the Job controller's to create. */
	{"pod not yet made", "job-active.json", "pod-running.json", NULL,
	 false, 1, 0, ANY, ANY, ANY, ANY, NULL, NULL},
};

static void expect_int(const char *what, const char *field, int want,
		       int got)
{
	if (want != ANY && got != want)
		fail_msg("%s: %s is %d, not %d", what, field, got, want);
}

static void test_views(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(VIEWS) / sizeof(VIEWS[0]); i++) {
		const struct view_case *c = &VIEWS[i];
		struct kn_kube_task_view v;

		state_of(c->job, c->stopping, c->rank, &v, c->pod0, c->pod1);
		expect_int(c->what, "ended", c->ended, v.ended);
		expect_int(c->what, "running", c->running, v.running);
		expect_int(c->what, "preempted", c->preempted, v.preempted);
		expect_int(c->what, "exit_code", c->exit_code, v.exit_code);
		expect_int(c->what, "signal", c->signal, v.signal);
		if (c->reason && strcmp(v.reason, c->reason))
			fail_msg("%s: reason \"%s\", not \"%s\"", c->what,
				 v.reason, c->reason);
		if (c->reason_part && !strstr(v.reason, c->reason_part))
			fail_msg("%s: reason \"%s\" lacks \"%s\"", c->what,
				 v.reason, c->reason_part);
	}
}

/* The pod's name and times; a pod not started yet (waiting for a node or
   its image) has not ended. */
static void test_pod_and_times(void **state)
{
	struct kn_kube_task_view v;
	json_t *pods = json_array(), *pod = pod_at("pod-running.json", 0);
	json_t *job = fixture_load("executor", "job-active.json");

	(void)state;
	state_of("job-active.json", false, 0, &v, "pod-running.json",
		 "pod-running.json");
	assert_string_equal(v.pod, "kiln-1-1-0-x7k2p");
	/* 2026-12-03T04:00:04Z */
	assert_int_equal(v.started_at_ms, 1796270404000LL);
	state_of("job-complete.json", false, 1, &v, "pod-succeeded.json",
		 "pod-succeeded.json");
	assert_int_equal(v.ended_at_ms, 1796270490000LL);
	json_object_set_new(json_object_get(pod, "status"), "phase",
			    json_string("Pending"));
	json_object_del(json_object_get(pod, "status"), "containerStatuses");
	json_array_append_new(pods, pod);
	kn_kube_task_state(job, pods, 0, false, &v);
	assert_false(v.ended);
	assert_false(v.running);
	json_decref(job);
	json_decref(pods);
}

/* The shim's termination message: the checkpoint report the server
   accounts with; a pod without one (the task's own) reports nothing. */
static void test_shim_report(void **state)
{
	struct kn_kube_task_view v;

	(void)state;
	state_of("job-active.json", false, 0, &v, "pod-disrupted-ended.json",
		 NULL);
	assert_true(v.ended);
	assert_true(v.preempted);
	assert_int_equal(v.exit_code, 0);
	assert_string_equal(v.checkpoint, "step-000120");
	assert_int_equal(v.checkpoint_at_ms, 1796270530000LL);
	assert_string_equal(v.restored, "step-000060");
	assert_int_equal(v.restore_ms, 850);
	state_of("job-active.json", false, 0, &v, "pod-failed.json", NULL);
	assert_true(v.ended);
	assert_string_equal(v.checkpoint, "");
	assert_int_equal(v.checkpoint_at_ms, 0);
	assert_string_equal(v.restored, "");
	assert_string_equal(v.inputs, "");
	assert_string_equal(v.outputs_manifest_sha256, "");
}

/* The inputs the shim fetched, its outputs' digest and its reason for a
   failure (here a refused input) come back from the message too. */
static void test_shim_inputs_outputs_reason(void **state)
{
	static const char digest[] = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b"
				     "2b0b822cd15d6c15b0f00a08";
	struct kn_kube_task_view v;
	json_t *pods = json_array(), *pod = pod_at("pod-failed.json", 0);
	json_t *term = json_object_get(json_object_get(json_array_get(
		json_object_get(json_object_get(pod, "status"),
				"containerStatuses"), 0), "state"),
		"terminated");
	char *message = kn_asprintf(
		"{\"restore_ms\":0,\"inputs\":[{\"name\":\"a.bin\","
		"\"sha256\":\"%s\",\"size\":4}],\"outputs\":{\"files\":2,"
		"\"bytes\":9,\"manifest_sha256\":\"%s\"},\"reason\":"
		"\"input changed: a.bin is sha256:0123\"}", digest, digest);

	(void)state;
	json_object_set_new(term, "message", json_string(message));
	json_array_append_new(pods, pod);
	kn_kube_task_state(NULL, pods, 0, false, &v);
	assert_true(v.ended);
	assert_int_equal(v.exit_code, 3);
	assert_string_equal(v.reason, "input changed: a.bin is sha256:0123");
	assert_non_null(strstr(v.inputs, "\"name\":\"a.bin\""));
	assert_non_null(strstr(v.inputs, digest));
	assert_int_equal(v.outputs_files, 2);
	assert_string_equal(v.outputs_manifest_sha256, digest);
	json_decref(pods);
	free(message);
}

/* A one-task Job's pods have no index: rank 0 is theirs. */
static void test_single_task(void **state)
{
	struct kn_kube_task_view v;
	json_t *pod = fixture_load("executor", "pod-failed.json"),
	       *pods = json_array();

	(void)state;
	json_object_del(json_object_get(json_object_get(pod, "metadata"),
					"annotations"),
			"batch.kubernetes.io/job-completion-index");
	json_array_append_new(pods, pod);
	kn_kube_task_state(NULL, pods, 0, false, &v);
	assert_true(v.ended);
	assert_int_equal(v.exit_code, 3);
	json_decref(pods);
}

static const char *env_value(json_t *env, const char *name)
{
	json_t *e;
	size_t i;

	json_array_foreach(env, i, e)
		if (!strcmp(json_string_value(json_object_get(e, "name")), name))
			return json_string_value(json_object_get(e, "value"));
	return NULL;
}

/* The executor's configuration the manifests are rendered with. */
static const struct kn_kube_exec_config ML_CONFIG = {
	.namespace_ = "ml",
	.image = "img:1",
	.store_url = "file:///srv/kiln/blobs",
};

/* The manifests of one attempt of task, which must render. */
static json_t *manifests_of(const struct kn_kube_exec_config *cfg,
			    const struct kn_kube_task *task)
{
	struct kn_error err = {0};
	json_t *docs = NULL;

	if (kn_kube_attempt_manifests(cfg, task, &docs, &err) != 0)
		fail_msg("manifests: %s", err.message);
	return docs;
}

static void test_attempt_manifests(void **state)
{
	struct kn_job_spec *spec = fixture_job_spec(
		"kind: Job\nname: train_big\ncommand: [python, train.py]\n"
		"tasks: 2\nretries: 3\nresources: {gpus: 1}\n"
		"checkpoint: {every: 10m, grace: 45s}\n");
	struct kn_kube_exec_config cfg = ML_CONFIG;
	struct kn_kube_task task = {.job_id = 12, .attempt = 2, .spec = spec};
	struct kn_error err = {0};
	json_t *docs = manifests_of(&cfg, &task), *job, *tmpl, *c;

	(void)state;
	assert_int_equal(json_array_size(docs), 2);
	job = json_array_get(docs, 0);
	assert_string_equal(json_string_value(json_object_get(
		json_object_get(job, "metadata"), "name")), "kiln-12-2");
	assert_string_equal(json_string_value(json_object_get(
		json_object_get(json_object_get(job, "metadata"), "labels"),
		KN_KUBE_LABEL_ATTEMPT)), "2");
	assert_int_equal(json_integer_value(json_object_get(
		json_object_get(job, "spec"), "backoffLimit")), 0);
	tmpl = json_object_get(json_object_get(job, "spec"), "template");
	assert_string_equal(json_string_value(json_object_get(
		json_object_get(json_object_get(tmpl, "metadata"), "labels"),
		KN_KUBE_LABEL_JOB_ID)), "12");
	c = json_array_get(json_object_get(json_object_get(tmpl, "spec"),
					   "containers"), 0);
	assert_string_equal(json_string_value(json_object_get(c, "image")),
			    "img:1");
	assert_string_equal(env_value(json_object_get(c, "env"), "KILN_JOB_ID"),
			    "12");
	assert_string_equal(env_value(json_object_get(c, "env"),
				      "KILN_JOB_NAME"), "train_big");
	assert_string_equal(env_value(json_object_get(c, "env"), "MASTER_ADDR"),
			    "kiln-12-2-0.kiln-12-2");
	/* Under the shim, kiln from the task's image (no --kube-shim-image)
	   and the server's store for a job with a checkpoint section. */
	assert_string_equal(json_string_value(json_array_get(
		json_object_get(c, "command"), 3)), "/kiln/bin/kiln");
	assert_string_equal(json_string_value(json_array_get(
		json_object_get(c, "command"), 7)), "python");
	assert_string_equal(json_string_value(json_object_get(json_array_get(
		json_object_get(json_object_get(tmpl, "spec"), "initContainers"),
		0), "image")), "img:1");
	assert_string_equal(env_value(json_object_get(c, "env"), "KILN_STORE"),
			    "file:///srv/kiln/blobs");
	assert_string_equal(env_value(json_object_get(c, "env"),
				      "KILN_CHECKPOINT_GRACE_MS"), "45000");
	json_decref(docs);
	cfg.shim_image = "reg/kiln:0.1";
	docs = manifests_of(&cfg, &task);
	tmpl = json_object_get(json_object_get(json_array_get(docs, 0), "spec"),
			       "template");
	assert_string_equal(json_string_value(json_object_get(json_array_get(
		json_object_get(json_object_get(tmpl, "spec"), "initContainers"),
		0), "image")), "reg/kiln:0.1");
	json_decref(docs);
	cfg.shim_image = NULL;
	/* No image anywhere: the error names the flag. */
	cfg.image = NULL;
	assert_int_equal(kn_kube_attempt_manifests(&cfg, &task, &docs, &err),
			 -EINVAL);
	assert_non_null(strstr(err.message, "--image"));
	kn_job_spec_free(spec);
}

static json_t *pod_of(json_t *docs)
{
	return json_object_get(json_object_get(json_object_get(
		json_array_get(docs, 0), "spec"), "template"), "spec");
}

/* The run's pod template is the single Job's but for the container's
   variables and the deadline moved onto the pod. */
static void assert_pod_no_wider(json_t *single, json_t *run)
{
	json_t *a = json_deep_copy(pod_of(single));
	json_t *b = json_deep_copy(pod_of(run));

	json_object_del(b, "activeDeadlineSeconds");
	json_object_del(json_array_get(json_object_get(a, "containers"), 0),
			"env");
	json_object_del(json_array_get(json_object_get(b, "containers"), 0),
			"env");
	assert_true(json_equal(a, b));
	/* The store's credentials by reference, as a single Job's. */
	assert_non_null(json_object_get(json_array_get(json_object_get(
		b, "containers"), 0), "envFrom"));
	assert_true(json_is_false(json_object_get(
		b, "automountServiceAccountToken")));
	json_decref(a);
	json_decref(b);
}

/* A job array's run of elements 3-6 (kiln jobs 43-46) as one Indexed
   Job; a gang's manifests are no run's. */
static void test_array_run(void **state)
{
	struct kn_job_spec *spec = fixture_job_spec(
		"kind: Job\nname: sweep\ncommand: [python, s.py]\n"
		"array: 0-9%2\ntimeout: 1h\nretries: 2\n");
	struct kn_kube_exec_config cfg = ML_CONFIG;
	struct kn_kube_task task = {.job_id = 43, .attempt = 1, .spec = spec};
	struct kn_error err = {0};
	json_t *docs, *single, *js, *pod, *env;

	(void)state;
	spec->array.job_id = 40;
	spec->array.index = 3;
	docs = manifests_of(&cfg, &task);
	single = json_deep_copy(docs);
	assert_int_equal(kn_kube_array_run(docs, 40, 3, 43, 4, 2, &err), 0);
	js = json_object_get(json_array_get(docs, 0), "spec");
	assert_pod_no_wider(single, docs);
	json_decref(single);
	assert_string_equal(json_string_value(json_object_get(
		js, "completionMode")), "Indexed");
	assert_int_equal(json_integer_value(json_object_get(js, "completions")),
			 4);
	assert_int_equal(json_integer_value(json_object_get(js, "parallelism")),
			 2);
	assert_null(json_object_get(js, "backoffLimit"));
	assert_int_equal(json_integer_value(json_object_get(
		js, "backoffLimitPerIndex")), 0);
	assert_null(json_object_get(js, "activeDeadlineSeconds"));
	pod = json_object_get(json_object_get(js, "template"), "spec");
	assert_int_equal(json_integer_value(json_object_get(
		pod, "activeDeadlineSeconds")), 3600);
	assert_string_equal(json_string_value(json_object_get(
		json_object_get(json_object_get(json_array_get(docs, 0),
						"metadata"), "labels"),
		KN_KUBE_LABEL_ARRAY_ID)), "40");
	env = json_object_get(json_array_get(json_object_get(pod, "containers"),
					     0), "env");
	assert_null(env_value(env, "KILN_JOB_ID"));
	assert_null(env_value(env, "KILN_ARRAY_INDEX"));
	assert_null(env_value(env, "SLURM_ARRAY_TASK_ID"));
	assert_string_equal(env_value(env, "KILN_ARRAY_RUN_INDEX"), "3");
	assert_string_equal(env_value(env, "KILN_ARRAY_RUN_JOB_ID"), "43");
	assert_string_equal(env_value(env, "KILN_ARRAY_RUN_SIZE"), "4");
	assert_string_equal(env_value(env, "KILN_ARRAY_COUNT"), "10");
	json_decref(docs);
	/* A parallel limit above the run's size is the run's size. */
	docs = manifests_of(&cfg, &task);
	assert_int_equal(kn_kube_array_run(docs, 40, 3, 43, 1, 2, &err), 0);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(
		json_array_get(docs, 0), "spec"), "parallelism")), 1);
	json_decref(docs);
	kn_job_spec_free(spec);
	spec = fixture_job_spec(
		"kind: Job\nname: gang\ncommand: [x]\ntasks: 2\n");
	task.spec = spec;
	docs = manifests_of(&cfg, &task);
	assert_int_equal(kn_kube_array_run(docs, 40, 0, 43, 2, 0, &err),
			 -EINVAL);
	json_decref(docs);
	kn_job_spec_free(spec);
}

/* A pod places itself and its shim syncs checkpoints: the server's own
   placement and sync step aside for them. Each instance carries its own
   configuration (its check renders with its default image) and its own
   worker and deployments; another executor has none. No attempt and no
   deployment: the workers make no request, so the API server's address
   is never dialled. */
static void test_executor_instance(void **state)
{
	struct kn_kube_auth auth = {.server = "https://127.0.0.1:1"};
	struct kn_kube_exec_config cfg = {.auth = &auth, .namespace_ = "ns"};
	struct kn_executor *ex = NULL, *second = NULL;
	struct kn_executor *local = kn_local_executor_new();
	struct kn_job_spec *spec =
		fixture_job_spec("kind: Job\nname: x\ncommand: [\"true\"]\n");
	struct kn_error err = {0};

	(void)state;
	assert_int_equal(kn_kube_executor_new(&cfg, &ex, &err), 0);
	assert_string_equal(ex->ops->name, "kubernetes");
	assert_true(ex->ops->places_tasks);
	assert_true(ex->ops->syncs_checkpoints);
	assert_null(ex->ops->selector_key);
	assert_string_equal(ex->ops->isolation,
			    "kubernetes executor: its own; environment built");
	assert_non_null(ex->ops->limits);
	cfg.image = "img:1";
	assert_int_equal(kn_kube_executor_new(&cfg, &second, &err), 0);
	/* No image in the spec nor the first instance's configuration. */
	assert_int_equal(ex->ops->check(ex, spec, &err), -EINVAL);
	assert_non_null(strstr(err.message, "--image"));
	assert_int_equal(second->ops->check(second, spec, &err), 0);
	/* Deployments: each instance's own; none under another executor. */
	assert_int_equal(kn_kube_deploy_restart(ex, "d", 1, &err), -ENOENT);
	assert_null(kn_kube_deploy_status(ex, "d"));
	assert_int_equal(kn_kube_deploy_restart(local, "d", 1, &err), -EINVAL);
	assert_string_equal(err.field, "executor");
	assert_null(kn_kube_deploy_status(local, "d"));
	kn_executor_free(second);
	kn_executor_free(ex);
	kn_executor_free(local);
	cfg.namespace_ = "";
	assert_int_equal(kn_kube_executor_new(&cfg, &ex, &err), -EINVAL);
	assert_string_equal(err.field, "namespace");
	kn_job_spec_free(spec);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_executor_instance),
		cmocka_unit_test(test_views),
		cmocka_unit_test(test_pod_and_times),
		cmocka_unit_test(test_shim_report),
		cmocka_unit_test(test_shim_inputs_outputs_reason),
		cmocka_unit_test(test_single_task),
		cmocka_unit_test(test_attempt_manifests),
		cmocka_unit_test(test_array_run),
	};

	kube_fixtures = argc > 1 ? argv[1] : "tests/fixtures/kube";
	return cmocka_run_group_tests(tests, NULL, NULL);
}
