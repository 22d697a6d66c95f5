/*
 * store workflows: workflow runs, their steps, and every attempt of a
 * step kept across retries.
 */
#include "internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#define R(field) STORE_COL(struct kn_wf_run_row, field)
static const struct store_row WF_RUN_ROW =
	STORE_ROW(struct kn_wf_run_row, "workflow run", R(id), R(name),
		  R(owner), R(filename), R(path), R(spec_yaml), R(files_json),
		  R(digest), R(revision), R(state), R(reason), R(submitted_at),
		  R(started_at), R(ended_at));
#undef R

#define P(field) STORE_COL(struct kn_wf_step_row, field)
static const struct store_row WF_STEP_ROW =
	STORE_ROW(struct kn_wf_step_row, "workflow step", P(run_id),
		  STORE_COL_AS(struct kn_wf_step_row, index, "idx", STORE_INT),
		  P(name), P(state), P(by_condition), P(job_id), P(attempts),
		  P(started_at), P(ended_at), P(reason), P(metrics_json));
#undef P

#define A(field) STORE_COL(struct kn_wf_attempt_row, field)
static const struct store_row WF_ATTEMPT_ROW =
	STORE_ROW(struct kn_wf_attempt_row, "workflow step attempt", A(run_id),
		  STORE_COL_AS(struct kn_wf_attempt_row, index, "idx",
			       STORE_INT),
		  A(attempt), A(job_id), A(outcome), A(started_at),
		  A(ended_at));
#undef A

static const char SQL_WF_RUN_UPDATE[] =
	"UPDATE workflow_runs SET state = :state, reason = :reason,"
	" started_at = :started_at, ended_at = :ended_at WHERE id = :id";
static const char SQL_WF_STEP_BY_JOB[] =
	"SELECT run_id FROM workflow_steps WHERE job_id = ?1";

const struct store_stmt store_workflow_stmts[] = {
	/* The database assigns the id. */
	STORE_INSERT(STMT_WF_RUN_INSERT, &WF_RUN_ROW,
		     "INSERT INTO workflow_runs", 1),
	STORE_SELECT(STMT_WF_RUN_GET, &WF_RUN_ROW,
		     "FROM workflow_runs WHERE id = ?1"),
	STORE_STMT(STMT_WF_RUN_UPDATE, SQL_WF_RUN_UPDATE, &WF_RUN_ROW),
	STORE_SELECT(STMT_WF_RUN_LIST, &WF_RUN_ROW,
		     "FROM workflow_runs"
		     " WHERE ?1 = 0 OR state IN ('queued', 'running')"
		     " ORDER BY id"),
	/* A step keeps the name it was first written with. */
	STORE_UPSERT_KEEP(STMT_WF_STEP_PUT, &WF_STEP_ROW, "workflow_steps", 2,
			  "name"),
	STORE_SELECT(STMT_WF_STEP_LIST, &WF_STEP_ROW,
		     "FROM workflow_steps WHERE run_id = ?1 ORDER BY idx"),
	STORE_STMT(STMT_WF_STEP_BY_JOB, SQL_WF_STEP_BY_JOB, NULL),
	STORE_INSERT(STMT_WF_ATTEMPT_PUT, &WF_ATTEMPT_ROW,
		     "INSERT OR REPLACE INTO workflow_attempts", 0),
	STORE_SELECT(STMT_WF_ATTEMPT_LIST, &WF_ATTEMPT_ROW,
		     "FROM workflow_attempts WHERE run_id = ?1"
		     " ORDER BY idx, attempt"),
	{0},
};

/* ---- workflow runs and their steps ---- */

STORE_RELEASE_FN(kn_wf_run_row_release, struct kn_wf_run_row, WF_RUN_ROW)

STORE_RELEASE_FN(kn_wf_step_row_release, struct kn_wf_step_row, WF_STEP_ROW)

int kn_store_wf_run_insert(struct kn_store *st, const struct kn_wf_run_row *r,
			   const struct kn_wf_step_row *steps, size_t n,
			   const struct kn_audit *a, int64_t *out_id,
			   struct kn_error *err)
{
	const char *what = "inserting a workflow run";
	char object[40];
	int64_t id = 0;
	bool own;
	int rc;

	rc = write_begin(st, &own, err);
	if (rc < 0)
		return rc;
	rc = store_put(st, STMT_WF_RUN_INSERT, r, what, err);
	if (rc < 0)
		goto out;
	id = sqlite3_last_insert_rowid(st->db);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		struct kn_wf_step_row p = steps[i];

		p.run_id = id;
		rc = kn_store_wf_step_put(st, &p, err);
	}
	if (rc < 0)
		goto out;
	snprintf(object, sizeof(object), "workflow/%" PRId64, id);
	rc = audit_write(st, a, object, err);
out:
	rc = write_end(st, own, rc, err);
	if (rc == 0 && out_id)
		*out_id = id;
	return rc;
}

int kn_store_wf_run_get(struct kn_store *st, int64_t id,
			struct kn_wf_run_row *out, struct kn_error *err)
{
	const struct store_key keys[] = {KEY_I64(id)};
	int rc = store_get_keyed(st, STMT_WF_RUN_GET, keys, N_KEYS(keys),
				 "reading a workflow run", out, err);

	return store_found(rc, err, NULL, "workflow run %" PRId64 " not found",
			   id);
}

int kn_store_wf_run_update(struct kn_store *st, const struct kn_wf_run_row *r,
			   const struct kn_audit *a, struct kn_error *err)
{
	char object[40];
	struct store_write w = {.what = "updating a workflow run",
				.object = object};

	snprintf(object, sizeof(object), "workflow/%" PRId64, r->id);
	return store_write_row(st, STMT_WF_RUN_UPDATE, r, &w, a, NULL, err);
}

STORE_LIST_BY_FN(kn_store_wf_run_list, bool, struct kn_wf_run_row,
		 STMT_WF_RUN_LIST, "listing workflow runs")

STORE_LIST_FREE_FN(kn_wf_run_list_free, struct kn_wf_run_row, WF_RUN_ROW)

STORE_PUT_FN(kn_store_wf_step_put, struct kn_wf_step_row, STMT_WF_STEP_PUT,
	     "writing a workflow step")

STORE_LIST_BY_FN(kn_store_wf_step_list, int64_t, struct kn_wf_step_row,
		 STMT_WF_STEP_LIST, "listing workflow steps")

STORE_LIST_FREE_FN(kn_wf_step_list_free, struct kn_wf_step_row, WF_STEP_ROW)

int kn_store_wf_run_of_job(struct kn_store *st, int64_t job_id,
			   int64_t *run_id, struct kn_error *err)
{
	const struct store_key keys[] = {KEY_I64(job_id)};
	int rc = store_one_i64(st, STMT_WF_STEP_BY_JOB, keys, N_KEYS(keys),
			       "finding a job's workflow run", run_id, err);

	return store_found(rc, err, NULL, "job %" PRId64 " is no workflow step",
			   job_id);
}

/* ---- workflow step attempts ---- */

STORE_LIST_FREE_FN(kn_wf_attempt_list_free, struct kn_wf_attempt_row,
		   WF_ATTEMPT_ROW)

STORE_PUT_FN(kn_store_wf_attempt_put, struct kn_wf_attempt_row,
	     STMT_WF_ATTEMPT_PUT, "writing a workflow step attempt")

STORE_LIST_BY_FN(kn_store_wf_attempt_list, int64_t, struct kn_wf_attempt_row,
		 STMT_WF_ATTEMPT_LIST, "listing workflow step attempts")
