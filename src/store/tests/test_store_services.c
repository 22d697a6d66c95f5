/*
 * Unit tests for the store's service tables: deployments and gateway
 * keys, the cost ledger's record, model re-validation and workflow runs.
 * Each test runs in its own temporary directory with a fresh database.
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

#include "base/base.h"
#include "base/tests/testmain.h"
#include "store_fixture.h"

static void test_deployments(void **state)
{
	struct fixture *fx = *state;
	struct kn_deployment_row d = {
		.name = (char *)"chat", .owner = (char *)"alice",
		.filename = (char *)"chat.yaml", .spec_yaml = (char *)"kind: x",
		.spec_json = (char *)"{}", .model_dir = (char *)"/m",
		.replicas = 2, .generation = 1, .rollout_next = -1,
		.created_at = 10, .updated_at = 10,
	};
	struct kn_audit a = sample_audit("alice", "deployment.create", NULL, 0);
	struct kn_deployment_row *rows = NULL;
	struct kn_replica_row *reps = NULL;
	struct kn_replica_row r;
	struct kn_error err = {0};
	size_t n = 0, nr = 0, before = audit_count(fx->st);
	int64_t job = insert_job(fx->st, "chat-0", "alice", KN_JOB_QUEUED);

	assert_int_equal(kn_store_deployment_put(fx->st, &d, &a, &err), 0);
	d.replicas = 3;
	d.generation = 2;
	d.rollout_next = 1;
	d.created_at = 99; /* not rewritten */
	assert_int_equal(kn_store_deployment_put(fx->st, &d, NULL, &err), 0);
	assert_int_equal(audit_count(fx->st), before + 1);
	assert_int_equal(kn_store_deployment_list(fx->st, &rows, &n, &err), 0);
	assert_int_equal(n, 1);
	assert_string_equal(rows[0].name, "chat");
	assert_string_equal(rows[0].model_dir, "/m");
	assert_int_equal(rows[0].replicas, 3);
	assert_int_equal(rows[0].generation, 2);
	assert_int_equal(rows[0].rollout_next, 1);
	assert_int_equal(rows[0].created_at, 10);
	kn_deployment_list_free(rows, n);

	r.deployment = (char *)"chat";
	r.replica = 0;
	r.job_id = job;
	assert_int_equal(kn_store_replica_put(fx->st, &r, &err), 0);
	r.replica = 1;
	assert_int_equal(kn_store_replica_put(fx->st, &r, &err), 0);
	/* A replica of no deployment is refused. */
	r.deployment = (char *)"nope";
	assert_int_not_equal(kn_store_replica_put(fx->st, &r, &err), 0);
	assert_int_equal(kn_store_replica_delete(fx->st, "chat", 1, &err), 0);
	assert_int_equal(kn_store_replica_list(fx->st, &reps, &nr, &err), 0);
	assert_int_equal(nr, 1);
	assert_int_equal(reps[0].job_id, job);
	kn_replica_list_free(reps, nr);

	a.action = (char *)"deployment.delete";
	assert_int_equal(kn_store_deployment_delete(fx->st, "chat", &a, &err),
			 0);
	assert_int_equal(kn_store_replica_list(fx->st, &reps, &nr, &err), 0);
	assert_int_equal(nr, 0);
	kn_replica_list_free(reps, nr);
	assert_int_equal(kn_store_deployment_delete(fx->st, "chat", &a, &err),
			 -ENOENT);
	assert_int_equal(err.code, KN_ENOTFOUND);
}

/* Gateway keys: unique active names, revoke, a revoked name reused. */
static void test_gateway_keys(void **state)
{
	struct fixture *fx = *state;
	struct kn_gateway_key_row k = {
		.name = (char *)"app1", .hash = (char *)"ab",
		.deployments_json = (char *)"[\"chat\"]", .rpm = 600,
		.tpm = 100000, .quota_day = 1000000, .created_by = (char *)"op",
		.created_at = 5,
	};
	struct kn_audit a = sample_audit("op", "key.create", NULL, 0);
	struct kn_gateway_key_row *rows = NULL;
	struct kn_error err = {0};
	size_t n = 0;
	int64_t id = 0;

	assert_int_equal(kn_store_gateway_key_insert(fx->st, &k, &a, &id, &err),
			 0);
	assert_true(id > 0);
	assert_int_equal(kn_store_gateway_key_insert(fx->st, &k, &a, NULL, &err),
			 -EEXIST);
	assert_int_equal(err.code, KN_ECONFLICT);
	assert_int_equal(kn_store_gateway_key_list(fx->st, true, &rows, &n, &err),
			 0);
	assert_int_equal(n, 1);
	assert_string_equal(rows[0].hash, "ab");
	assert_int_equal(rows[0].tpm, 100000);
	assert_int_equal(rows[0].quota_month, 0);
	kn_gateway_key_list_free(rows, n);
	assert_int_equal(kn_store_gateway_key_revoke(fx->st, "app1", &a, &err),
			 0);
	assert_int_equal(kn_store_gateway_key_revoke(fx->st, "app1", &a, &err),
			 -ENOENT);
	assert_int_equal(kn_store_gateway_key_list(fx->st, true, &rows, &n, &err),
			 0);
	assert_int_equal(n, 0);
	kn_gateway_key_list_free(rows, n);
	assert_int_equal(kn_store_gateway_key_insert(fx->st, &k, &a, NULL, &err),
			 0);
	assert_int_equal(kn_store_gateway_key_list(fx->st, false, &rows, &n,
						   &err),
			 0);
	assert_int_equal(n, 2);
	assert_true(rows[0].revoked_at > 0);
	assert_int_equal(rows[1].revoked_at, 0);
	kn_gateway_key_list_free(rows, n);
}

/* The cost ledger's record: node state intervals open, close and list by
   window; tasks with devices joined to their attempt, owner and the
   deployment they ran for, kept after the replica moves on. */
static void test_cost_record(void **state)
{
	struct fixture *fx = *state;
	struct kn_node_state_row *st = NULL;
	struct kn_cost_task_row *tasks = NULL;
	struct kn_deployment_row d = {
		.name = (char *)"chat", .owner = (char *)"alice",
		.filename = (char *)"chat.yaml", .spec_yaml = (char *)"kind: x",
		.spec_json = (char *)"{}", .model_dir = (char *)"/m",
		.replicas = 1, .generation = 1, .rollout_next = -1,
	};
	struct kn_replica_row r = { .deployment = (char *)"chat" };
	struct kn_attempt_row a = {0};
	struct kn_task_row t = {0};
	struct kn_error err = {0};
	size_t n = 0;
	int64_t first = insert_job(fx->st, "chat-0", "alice", KN_JOB_RUNNING);
	int64_t second = insert_job(fx->st, "chat-0", "alice", KN_JOB_RUNNING);
	int64_t plain = insert_job(fx->st, "train", "bob", KN_JOB_FAILED);

	assert_int_equal(kn_store_node_state_open(fx->st, "n1", "ready", 100,
						  &err), 0);
	assert_int_equal(kn_store_node_state_open(fx->st, "n2", "ready", 100,
						  &err), 0);
	assert_int_equal(kn_store_node_state_open(fx->st, "n1", "unhealthy",
						  250, &err), 0);
	assert_int_equal(kn_store_node_state_list(fx->st, 0, &st, &n, &err), 0);
	assert_int_equal(n, 3);
	assert_string_equal(st[0].node, "n1");
	assert_string_equal(st[0].state, "ready");
	assert_int_equal(st[0].started_at, 100);
	assert_int_equal(st[0].ended_at, 250);
	assert_string_equal(st[1].state, "unhealthy");
	assert_int_equal(st[1].ended_at, 0);
	assert_string_equal(st[2].node, "n2");
	kn_node_state_list_free(st, n);
	/* A node a pool scaled down: its interval alone ends. */
	assert_int_equal(kn_store_node_state_close(fx->st, "n2", 300, &err), 0);
	assert_int_equal(kn_store_node_state_close_all(fx->st, 400, &err), 0);
	/* Ended at or before 250: left out of a window from 250. */
	assert_int_equal(kn_store_node_state_list(fx->st, 250, &st, &n, &err),
			 0);
	assert_int_equal(n, 2);
	assert_int_equal(st[0].ended_at, 400);
	assert_string_equal(st[1].node, "n2");
	assert_int_equal(st[1].ended_at, 300);
	kn_node_state_list_free(st, n);

	assert_int_equal(kn_store_deployment_put(fx->st, &d, NULL, &err), 0);
	r.job_id = first;
	assert_int_equal(kn_store_replica_put(fx->st, &r, &err), 0);
	r.job_id = second; /* the replica restarted as another job */
	assert_int_equal(kn_store_replica_put(fx->st, &r, &err), 0);

	a = (struct kn_attempt_row){ .job_id = plain, .number = 1,
				     .state = KN_JOB_FAILED, .started_at = 10,
				     .ended_at = 90, .exit_code = 3,
				     .checkpoint_at = 40 };
	assert_int_equal(kn_store_attempt_put(fx->st, &a, &err), 0);
	t = (struct kn_task_row){ .job_id = plain, .attempt = 1, .rank = 0,
				  .node = (char *)"n1", .devices = (char *)"0,1",
				  .gpu_milli = 1000, .state = KN_TASK_EXITED,
				  .started_at = 10, .ended_at = 90,
				  .exit_code = 3 };
	assert_int_equal(kn_store_task_put(fx->st, &t, &err), 0);
	t.rank = 1;
	t.devices = NULL; /* CPU only: nothing to price */
	assert_int_equal(kn_store_task_put(fx->st, &t, &err), 0);
	t = (struct kn_task_row){ .job_id = first, .attempt = 1,
				  .node = (char *)"n2", .devices = (char *)"1",
				  .gpu_milli = 500, .state = KN_TASK_EXITED,
				  .started_at = 20, .ended_at = 60 };
	assert_int_equal(kn_store_task_put(fx->st, &t, &err), 0);
	t.job_id = second;
	t.started_at = 70;
	t.ended_at = 0;
	assert_int_equal(kn_store_task_put(fx->st, &t, &err), 0);

	assert_int_equal(kn_store_cost_task_list(fx->st, 0, &tasks, &n, &err),
			 0);
	assert_int_equal(n, 3);
	assert_int_equal(tasks[0].job_id, first);
	assert_string_equal(tasks[0].deployment, "chat");
	assert_int_equal(tasks[0].gpu_milli, 500);
	assert_int_equal(tasks[0].attempt_state, -1); /* no attempt row */
	assert_int_equal(tasks[1].job_id, second);
	assert_string_equal(tasks[1].deployment, "chat");
	assert_int_equal(tasks[1].ended_at, 0);
	assert_int_equal(tasks[2].job_id, plain);
	assert_null(tasks[2].deployment);
	assert_string_equal(tasks[2].owner, "bob");
	assert_string_equal(tasks[2].devices, "0,1");
	assert_int_equal(tasks[2].attempt_state, KN_JOB_FAILED);
	assert_int_equal(tasks[2].checkpoint_at, 40);
	kn_cost_task_list_free(tasks, n);
	/* From 60: the first job's task ended then, the others run later. */
	assert_int_equal(kn_store_cost_task_list(fx->st, 60, &tasks, &n, &err),
			 0);
	assert_int_equal(n, 2);
	assert_int_equal(tasks[0].job_id, second);
	kn_cost_task_list_free(tasks, n);
}

/*
 * Workflow runs: a run and its steps in one insert, audited; step
 * updates; the run a job belongs to; the active-only list; states the
 * schema refuses.
 */
static void test_revalidations_and_evaluations(void **state)
{
	struct fixture *fx = *state;
	struct kn_revalidation_row r = {
		.name = (char *)"gpt", .alias = (char *)"prod",
		.owner = (char *)"ops", .spec_yaml = (char *)"kind: Job",
		.filename = (char *)"eval.yaml", .every_ms = 60000,
		.thresholds_json = (char *)"{\"max\":{\"loss\":1.8}}",
		.rollback = true, .created_at = 7,
	};
	struct kn_evaluation_row e = {
		.name = (char *)"gpt", .version = 2, .alias = (char *)"prod",
		.job_id = 9, .outcome = (char *)"failed",
		.metrics_json = (char *)"{\"loss\":2.5}",
		.detail = (char *)"loss 2.5 > max 1.8", .time_ms = 11,
	};
	struct kn_revalidation_row *rows = NULL;
	struct kn_evaluation_row *evs = NULL;
	struct kn_error err;
	size_t n = 0;

	assert_int_equal(kn_store_revalidation_put(fx->st, &r, NULL, &err), 0);
	/* Same (name, alias): replaced, not added. */
	r.every_ms = 1000;
	r.rollback = false;
	assert_int_equal(kn_store_revalidation_put(fx->st, &r, NULL, &err), 0);
	assert_int_equal(kn_store_revalidation_list(fx->st, &rows, &n, &err), 0);
	assert_int_equal(n, 1);
	assert_string_equal(rows[0].alias, "prod");
	assert_string_equal(rows[0].owner, "ops");
	assert_int_equal(rows[0].every_ms, 1000);
	assert_false(rows[0].rollback);
	assert_string_equal(rows[0].thresholds_json, "{\"max\":{\"loss\":1.8}}");
	assert_null(rows[0].deployment);
	kn_revalidation_list_free(rows, n);

	/* One set by a deployment says which; a delete removes only its own
	   (name, alias). */
	r.alias = (char *)"stable";
	r.deployment = (char *)"chat";
	assert_int_equal(kn_store_revalidation_put(fx->st, &r, NULL, &err), 0);
	assert_int_equal(kn_store_revalidation_list(fx->st, &rows, &n, &err), 0);
	assert_int_equal(n, 2);
	assert_string_equal(rows[1].alias, "stable");
	assert_string_equal(rows[1].deployment, "chat");
	kn_revalidation_list_free(rows, n);
	assert_int_equal(kn_store_revalidation_delete(fx->st, "gpt", "stable",
						      NULL, &err), 0);
	assert_int_equal(kn_store_revalidation_list(fx->st, &rows, &n, &err), 0);
	assert_int_equal(n, 1);
	assert_string_equal(rows[0].alias, "prod");
	kn_revalidation_list_free(rows, n);
	r.alias = (char *)"prod";
	r.deployment = NULL;

	assert_int_equal(kn_store_evaluation_add(fx->st, &e, &err), 0);
	e.version = 1;
	e.outcome = (char *)"passed";
	e.detail = NULL;
	e.metrics_json = NULL;
	assert_int_equal(kn_store_evaluation_add(fx->st, &e, &err), 0);
	/* Per version: version 2 has only its own run. */
	assert_int_equal(kn_store_evaluation_list(fx->st, "gpt", 2, &evs, &n,
						  &err), 0);
	assert_int_equal(n, 1);
	assert_string_equal(evs[0].outcome, "failed");
	assert_string_equal(evs[0].metrics_json, "{\"loss\":2.5}");
	assert_string_equal(evs[0].detail, "loss 2.5 > max 1.8");
	assert_int_equal(evs[0].job_id, 9);
	kn_evaluation_list_free(evs, n);
	assert_int_equal(kn_store_evaluation_list(fx->st, "gpt", 1, &evs, &n,
						  &err), 0);
	assert_int_equal(n, 1);
	assert_string_equal(evs[0].outcome, "passed");
	assert_null(evs[0].detail);
	assert_null(evs[0].metrics_json);
	kn_evaluation_list_free(evs, n);
	assert_int_equal(kn_store_evaluation_list(fx->st, "gpt", 3, &evs, &n,
						  &err), 0);
	assert_int_equal(n, 0);
	kn_evaluation_list_free(evs, n);
}

static void test_workflow_runs(void **state)
{
	struct fixture *fx = *state;
	struct kn_wf_run_row r = {
		.name = (char *)"pipe", .owner = (char *)"alice",
		.filename = (char *)"w.yaml", .path = (char *)"",
		.spec_yaml = (char *)"kind: Workflow", .files_json = (char *)"{}",
		.digest = (char *)"ab", .revision = NULL,
		.state = (char *)"queued", .submitted_at = 5,
	};
	struct kn_wf_step_row steps[2] = {
		{.index = 0, .name = (char *)"a", .state = (char *)"pending"},
		{.index = 1, .name = (char *)"b", .state = (char *)"pending"},
	};
	struct kn_audit a = sample_audit("alice", "workflow.run", NULL, 0);
	struct kn_wf_run_row got = {0}, *runs = NULL;
	struct kn_wf_step_row *rows = NULL, p;
	struct kn_error err = {0};
	size_t n = 0, before = audit_count(fx->st);
	int64_t id = 0, run_id = 0;
	int64_t job = insert_job(fx->st, "a", "alice", KN_JOB_QUEUED);

	assert_int_equal(kn_store_wf_run_insert(fx->st, &r, steps, 2, &a, &id,
						&err),
			 0);
	assert_true(id > 0);
	assert_int_equal(audit_count(fx->st), before + 1);
	assert_int_equal(kn_store_wf_run_of_job(fx->st, job, &run_id, &err),
			 -ENOENT);

	p = steps[0];
	p.run_id = id;
	p.state = (char *)"running";
	p.job_id = job;
	p.attempts = 1;
	p.metrics_json = (char *)"{\"loss\":1.5}";
	p.name = (char *)"renamed"; /* a step keeps its first name */
	assert_int_equal(kn_store_wf_step_put(fx->st, &p, &err), 0);
	assert_int_equal(kn_store_wf_run_of_job(fx->st, job, &run_id, &err), 0);
	assert_int_equal(run_id, id);
	p.state = (char *)"done"; /* not a step state */
	assert_int_not_equal(kn_store_wf_step_put(fx->st, &p, &err), 0);

	assert_int_equal(kn_store_wf_step_list(fx->st, id, &rows, &n, &err), 0);
	assert_int_equal(n, 2);
	assert_string_equal(rows[0].state, "running");
	assert_int_equal(rows[0].job_id, job);
	assert_string_equal(rows[0].metrics_json, "{\"loss\":1.5}");
	assert_string_equal(rows[0].name, "a");
	assert_string_equal(rows[1].name, "b");
	assert_null(rows[1].reason);
	kn_wf_step_list_free(rows, n);

	r.id = id;
	r.state = (char *)"failed";
	r.reason = (char *)"step a failed";
	r.ended_at = 9;
	assert_int_equal(kn_store_wf_run_update(fx->st, &r, NULL, &err), 0);
	assert_int_equal(kn_store_wf_run_get(fx->st, id, &got, &err), 0);
	assert_string_equal(got.state, "failed");
	assert_string_equal(got.reason, "step a failed");
	assert_null(got.revision);
	assert_int_equal(got.ended_at, 9);
	kn_wf_run_row_release(&got);
	assert_int_equal(kn_store_wf_run_list(fx->st, true, &runs, &n, &err), 0);
	assert_int_equal(n, 0);
	kn_wf_run_list_free(runs, n);
	assert_int_equal(kn_store_wf_run_list(fx->st, false, &runs, &n, &err), 0);
	assert_int_equal(n, 1);
	kn_wf_run_list_free(runs, n);
	assert_int_equal(kn_store_wf_run_get(fx->st, id + 1, &got, &err),
			 -ENOENT);
	assert_int_equal(err.code, KN_ENOTFOUND);
}

static void test_workflow_attempts(void **state)
{
	struct fixture *fx = *state;
	struct kn_wf_run_row r = {
		.name = (char *)"pipe", .owner = (char *)"alice",
		.filename = (char *)"w.yaml", .path = (char *)"",
		.spec_yaml = (char *)"kind: Workflow", .files_json = (char *)"{}",
		.digest = (char *)"ab", .state = (char *)"running",
		.submitted_at = 5,
	};
	struct kn_wf_step_row steps[2] = {
		{.index = 0, .name = (char *)"a", .state = (char *)"pending"},
		{.index = 1, .name = (char *)"b", .state = (char *)"pending"},
	};
	struct kn_wf_attempt_row *rows = NULL;
	struct kn_wf_attempt_row at = {.index = 1, .attempt = 1, .job_id = 7,
				       .started_at = 10};
	struct kn_error err = {0};
	size_t n = 9;
	int64_t id = 0;

	assert_int_equal(kn_store_wf_run_insert(fx->st, &r, steps, 2, NULL, &id,
						&err),
			 0);
	assert_int_equal(kn_store_wf_attempt_list(fx->st, id, &rows, &n, &err),
			 0);
	assert_int_equal(n, 0);
	kn_wf_attempt_list_free(rows, n);

	at.run_id = id;
	assert_int_equal(kn_store_wf_attempt_put(fx->st, &at, &err), 0);
	/* The same attempt again replaces it: its end is recorded. */
	at.outcome = (char *)"failed";
	at.ended_at = 20;
	assert_int_equal(kn_store_wf_attempt_put(fx->st, &at, &err), 0);
	at.attempt = 2;
	at.job_id = 8;
	at.outcome = NULL;
	at.started_at = 21;
	at.ended_at = 0;
	assert_int_equal(kn_store_wf_attempt_put(fx->st, &at, &err), 0);
	at.index = 0;
	at.attempt = 1;
	at.job_id = 0;
	assert_int_equal(kn_store_wf_attempt_put(fx->st, &at, &err), 0);

	assert_int_equal(kn_store_wf_attempt_list(fx->st, id, &rows, &n, &err),
			 0);
	assert_int_equal(n, 3);
	assert_int_equal(rows[0].index, 0);
	assert_int_equal(rows[0].job_id, 0);
	assert_int_equal(rows[1].index, 1);
	assert_int_equal(rows[1].attempt, 1);
	assert_int_equal(rows[1].job_id, 7);
	assert_string_equal(rows[1].outcome, "failed");
	assert_int_equal(rows[1].ended_at, 20);
	assert_int_equal(rows[2].attempt, 2);
	assert_int_equal(rows[2].job_id, 8);
	assert_null(rows[2].outcome);
	kn_wf_attempt_list_free(rows, n);
	/* Another run's attempts are not listed. */
	assert_int_equal(kn_store_wf_attempt_list(fx->st, id + 1, &rows, &n,
						  &err),
			 0);
	assert_int_equal(n, 0);
	kn_wf_attempt_list_free(rows, n);
}

/*
 * An idempotency key is found by its owner and key within the window,
 * committed or rolled back with its transaction (or savepoint), replaced
 * once expired, and expired by age.
 */
static void test_idempotency_keys(void **state)
{
	struct fixture *fx = *state;
	struct kn_idem_row r = {
		.owner = (char *)"alice", .key = (char *)"k1",
		.route = (char *)"POST /v1/jobs", .body_sha256 = (char *)"ab",
		.status = 201, .answer = (char *)"{\"id\":1}",
		.created_at = 1000,
	};
	struct kn_idem_row got;
	struct kn_error err = {0};

	assert_int_equal(kn_store_begin(fx->st, &err), 0);
	assert_int_equal(kn_store_idem_put(fx->st, &r, &err), 0);
	kn_store_rollback(fx->st);
	assert_int_equal(kn_store_idem_get(fx->st, "alice", "k1", 0, &got,
					   &err), 0);

	/* A savepoint rolled back undoes its rows, not the outer ones'. */
	assert_int_equal(kn_store_begin(fx->st, &err), 0);
	assert_int_equal(kn_store_begin(fx->st, &err), 0);
	assert_int_equal(kn_store_idem_put(fx->st, &r, &err), 0);
	kn_store_rollback(fx->st);
	assert_int_equal(kn_store_commit(fx->st, &err), 0);
	assert_int_equal(kn_store_idem_get(fx->st, "alice", "k1", 0, &got,
					   &err), 0);
	/* A savepoint released commits with the outer transaction. */
	assert_int_equal(kn_store_begin(fx->st, &err), 0);
	assert_int_equal(kn_store_begin(fx->st, &err), 0);
	assert_int_equal(kn_store_idem_put(fx->st, &r, &err), 0);
	assert_int_equal(kn_store_commit(fx->st, &err), 0);
	assert_int_equal(kn_store_commit(fx->st, &err), 0);
	assert_int_equal(kn_store_idem_get(fx->st, "alice", "k1", 500, &got,
					   &err), 1);
	assert_string_equal(got.answer, "{\"id\":1}");
	assert_int_equal(got.status, 201);
	kn_idem_row_release(&got);
	/* Another caller's key of the same text is another key. */
	assert_int_equal(kn_store_idem_get(fx->st, "bob", "k1", 0, &got, &err),
			 0);
	/* Past the window it is not found, and may be reused. */
	assert_int_equal(kn_store_idem_get(fx->st, "alice", "k1", 1001, &got,
					   &err), 0);
	r.created_at = 2000;
	r.status = 200;
	assert_int_equal(kn_store_idem_put(fx->st, &r, &err), 0);
	assert_int_equal(kn_store_idem_get(fx->st, "alice", "k1", 1500, &got,
					   &err), 1);
	assert_int_equal(got.status, 200);
	kn_idem_row_release(&got);
	assert_int_equal(kn_store_idem_expire(fx->st, 2001, &err), 0);
	assert_int_equal(kn_store_idem_get(fx->st, "alice", "k1", 0, &got,
					   &err), 0);
}

/* A task's usage sketch: written, replaced, and read back to the bit. */
static void test_task_usage(void **state)
{
	struct fixture *fx = *state;
	struct kn_task_usage_row u = {
		.attempt = 1, .rank = 0, .resource = (char *)"gpu_util",
		.samples = 3, .sum = 1.5, .max = 0.875,
	};
	struct kn_task_usage_row got = {0};
	struct kn_error err = {0};

	u.job_id = insert_job(fx->st, "u", "alice", KN_JOB_RUNNING);
	assert_int_equal(kn_store_task_usage_get(fx->st, u.job_id, 1, 0,
						 "gpu_util", &got, &err),
			 -ENOENT);
	/* No histogram yet: stored as empty text, not NULL. */
	assert_int_equal(kn_store_task_usage_put(fx->st, &u, 10, &err), 0);
	assert_int_equal(kn_store_task_usage_get(fx->st, u.job_id, 1, 0,
						 "gpu_util", &got, &err),
			 0);
	assert_int_equal(got.samples, 3);
	assert_true(got.sum == 1.5 && got.max == 0.875);
	assert_string_equal(got.histogram, "");
	assert_string_equal(got.resource, "gpu_util");
	kn_task_usage_row_release(&got);
	u.samples = 4;
	u.max = 0.9375;
	u.histogram = (char *)"h1";
	assert_int_equal(kn_store_task_usage_put(fx->st, &u, 20, &err), 0);
	assert_int_equal(kn_store_task_usage_get(fx->st, u.job_id, 1, 0,
						 "gpu_util", &got, &err),
			 0);
	assert_int_equal(got.samples, 4);
	assert_true(got.max == 0.9375);
	assert_string_equal(got.histogram, "h1");
	kn_task_usage_row_release(&got);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test_setup_teardown(test_deployments, setup_store,
					teardown),
	cmocka_unit_test_setup_teardown(test_gateway_keys, setup_store,
					teardown),
	cmocka_unit_test_setup_teardown(test_cost_record, setup_store,
					teardown),
	cmocka_unit_test_setup_teardown(test_workflow_runs, setup_store,
					teardown),
	cmocka_unit_test_setup_teardown(test_workflow_attempts,
					setup_store, teardown),
	cmocka_unit_test_setup_teardown(
		test_revalidations_and_evaluations, setup_store,
		teardown),
	cmocka_unit_test_setup_teardown(test_idempotency_keys,
					setup_store, teardown),
	cmocka_unit_test_setup_teardown(test_task_usage, setup_store,
					teardown))
