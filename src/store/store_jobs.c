/*
 * store jobs: jobs, their attempts and tasks, the outputs they left, the
 * code revision they were submitted at and the inputs they fetched.
 */
#include "internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JOB_COLUMNS                                                         \
	"id, name, owner, state, priority, tasks, filename, submitted_at,"  \
	" started_at, ended_at, not_before, attempts, retries_used,"        \
	" cancel_requested, reason, exit_code, array_id, array_index"

#define J(field) STORE_COL(struct kn_job_row, field)
/* JOB_COLUMNS, then the two spec columns. */
static const struct store_row JOB_ROW =
	STORE_ROW(struct kn_job_row, "job", J(id), J(name), J(owner), J(state),
		  J(priority), J(tasks), J(filename), J(submitted_at),
		  J(started_at), J(ended_at), J(not_before), J(attempts),
		  J(retries_used), J(cancel_requested), J(reason), J(exit_code),
		  J(array_id), J(array_index), J(spec_yaml), J(spec_json));
#undef J

/* An array's first element names the array: its own id. */
static const char SQL_JOB_ARRAY_HEAD[] =
	"UPDATE jobs SET array_id = id WHERE id = ?1";
static const char SQL_JOB_UPDATE[] =
	"UPDATE jobs SET state = :state, started_at = :started_at,"
	" ended_at = :ended_at, not_before = :not_before,"
	" attempts = :attempts, retries_used = :retries_used,"
	" cancel_requested = :cancel_requested, reason = :reason,"
	" exit_code = :exit_code WHERE id = :id";
/*
 * Five listings share their parameters so one binder serves them all:
 * ?1 owner, ?2 name, ?3 with_spec, ?4 limit (-1 = none), ?7 the id to
 * list below (INT64_MAX = none), ?8 one array's elements (0 = any job)
 * and ?5 (?6) the state(s). Each leads
 * with the condition its index serves: all jobs by id, one state through
 * jobs_by_state, the active states through the same index, one name
 * through jobs_by_name, one owner through jobs_by_owner; the other
 * filters follow as conditions on the rows read. Each comes oldest first
 * and newest first, so a page of the newest jobs (id < ?7, newest first)
 * reads that page's rows from the index and sorts nothing. The CASE
 * keeps the spec columns unread unless asked for.
 */
#define JOB_LIST_SELECT                                                  \
	"SELECT " JOB_COLUMNS ", CASE WHEN ?3 THEN spec_yaml END"          \
	" AS spec_yaml, CASE WHEN ?3 THEN spec_json END AS spec_json"     \
	" FROM jobs"
#define JOB_LIST_TAIL                                                    \
	" AND (?1 IS NULL OR owner = ?1) AND (?2 IS NULL OR name = ?2)"  \
	" AND id < ?7 AND (?8 = 0 OR array_id = ?8)"
#define JOB_LIST_ASC JOB_LIST_TAIL " ORDER BY id LIMIT ?4"
#define JOB_LIST_DESC JOB_LIST_TAIL " ORDER BY id DESC LIMIT ?4"
#define JOB_LIST_ALL JOB_LIST_SELECT " WHERE 1"
#define JOB_LIST_STATE JOB_LIST_SELECT " WHERE state = ?5"
#define JOB_LIST_ACTIVE JOB_LIST_SELECT " WHERE state IN (?5, ?6)"
#define JOB_LIST_NAME JOB_LIST_SELECT " WHERE name = ?2"
#define JOB_LIST_OWNER JOB_LIST_SELECT " WHERE owner = ?1"
static const char SQL_JOB_LIST_ALL[] = JOB_LIST_ALL JOB_LIST_ASC;
static const char SQL_JOB_LIST_STATE[] = JOB_LIST_STATE JOB_LIST_ASC;
static const char SQL_JOB_LIST_ACTIVE[] = JOB_LIST_ACTIVE JOB_LIST_ASC;
static const char SQL_JOB_LIST_NAME[] = JOB_LIST_NAME JOB_LIST_ASC;
static const char SQL_JOB_LIST_OWNER[] = JOB_LIST_OWNER JOB_LIST_ASC;
static const char SQL_JOB_LIST_ALL_DESC[] = JOB_LIST_ALL JOB_LIST_DESC;
static const char SQL_JOB_LIST_STATE_DESC[] = JOB_LIST_STATE JOB_LIST_DESC;
static const char SQL_JOB_LIST_ACTIVE_DESC[] = JOB_LIST_ACTIVE JOB_LIST_DESC;
static const char SQL_JOB_LIST_NAME_DESC[] = JOB_LIST_NAME JOB_LIST_DESC;
static const char SQL_JOB_LIST_OWNER_DESC[] = JOB_LIST_OWNER JOB_LIST_DESC;

#define A(field) STORE_COL(struct kn_attempt_row, field)
static const struct store_row ATTEMPT_ROW =
	STORE_ROW(struct kn_attempt_row, "attempt of job", A(job_id), A(number),
		  A(state), A(started_at), A(ended_at), A(exit_code), A(signal),
		  A(reason), A(checkpoint), A(checkpoint_at), A(restore_ms),
		  A(useful_ms), A(lost_ms));
#undef A


#define T(field) STORE_COL(struct kn_task_row, field)
static const struct store_row TASK_ROW =
	STORE_ROW(struct kn_task_row, "task of job", T(job_id), T(attempt),
		  T(rank), T(node), T(devices), T(gpu_milli), T(task_dir),
		  T(state), T(shim_pid), T(shim_start), T(started_at),
		  T(ended_at), T(exit_code), T(signal), T(master_port));
#undef T

#define O(field) STORE_COL(struct kn_output_row, field)
static const struct store_row OUTPUT_ROW =
	STORE_ROW(struct kn_output_row, "output of job", O(job_id), O(name),
		  O(size), O(sha256), O(url));
#undef O

#define I(field) STORE_COL(struct kn_job_input_row, field)
static const struct store_row JOB_INPUT_ROW =
	STORE_ROW(struct kn_job_input_row, "input of job", I(job_id), I(name),
		  I(url), I(sha256), I(size), I(attempt), I(recorded_at));
#undef I

static const char SQL_JOB_REVISION_PUT[] =
	"INSERT OR REPLACE INTO job_revisions (job_id, revision) VALUES (?1, ?2)";
static const char SQL_JOB_REVISION_GET[] =
	"SELECT revision FROM job_revisions WHERE job_id = ?1";

/* How many jobs are in one state; -1 for a name kiln does not know. */
struct state_count {
	int state;
	int64_t count;
};
static const struct store_row STATE_COUNT_ROW =
	STORE_ROW(struct state_count, "job state count",
		  STORE_COL_AS(struct state_count, state, "state",
			       STORE_JOB_STATE_OR_NONE),
		  STORE_COL(struct state_count, count));
static const struct store_row GOODPUT_ROW =
	STORE_ROW(struct kn_job_totals, "goodput",
		  STORE_COL(struct kn_job_totals, useful_ms),
		  STORE_COL(struct kn_job_totals, lost_ms));

static const char SQL_JOB_STATE_COUNTS[] =
	"SELECT state, COUNT(*) AS count FROM jobs GROUP BY state";
static const char SQL_ATTEMPT_GOODPUT[] =
	"SELECT COALESCE(SUM(useful_ms), 0) AS useful_ms,"
	" COALESCE(SUM(lost_ms), 0) AS lost_ms FROM attempts";

const struct store_stmt store_job_stmts[] = {
	/* The database assigns the id. */
	STORE_INSERT(STMT_JOB_INSERT, &JOB_ROW, "INSERT INTO jobs", 1),
	STORE_SELECT(STMT_JOB_GET, &JOB_ROW, "FROM jobs WHERE id = ?1"),
	STORE_STMT(STMT_JOB_UPDATE, SQL_JOB_UPDATE, &JOB_ROW),
	STORE_STMT(STMT_JOB_ARRAY_HEAD, SQL_JOB_ARRAY_HEAD, NULL),
	STORE_STMT(STMT_JOB_LIST_ALL, SQL_JOB_LIST_ALL, &JOB_ROW),
	STORE_STMT(STMT_JOB_LIST_STATE, SQL_JOB_LIST_STATE, &JOB_ROW),
	STORE_STMT(STMT_JOB_LIST_ACTIVE, SQL_JOB_LIST_ACTIVE, &JOB_ROW),
	STORE_STMT(STMT_JOB_LIST_NAME, SQL_JOB_LIST_NAME, &JOB_ROW),
	STORE_STMT(STMT_JOB_LIST_OWNER, SQL_JOB_LIST_OWNER, &JOB_ROW),
	STORE_STMT(STMT_JOB_LIST_ALL_DESC, SQL_JOB_LIST_ALL_DESC, &JOB_ROW),
	STORE_STMT(STMT_JOB_LIST_STATE_DESC, SQL_JOB_LIST_STATE_DESC, &JOB_ROW),
	STORE_STMT(STMT_JOB_LIST_ACTIVE_DESC, SQL_JOB_LIST_ACTIVE_DESC,
		   &JOB_ROW),
	STORE_STMT(STMT_JOB_LIST_NAME_DESC, SQL_JOB_LIST_NAME_DESC, &JOB_ROW),
	STORE_STMT(STMT_JOB_LIST_OWNER_DESC, SQL_JOB_LIST_OWNER_DESC, &JOB_ROW),
	/* Upserts, not INSERT OR REPLACE: REPLACE deletes the old row
	   first. */
	STORE_UPSERT(STMT_ATTEMPT_PUT, &ATTEMPT_ROW, "attempts", 2),
	STORE_SELECT(STMT_ATTEMPT_LIST, &ATTEMPT_ROW,
		     "FROM attempts WHERE job_id = ?1 ORDER BY number"),
	STORE_UPSERT(STMT_TASK_PUT, &TASK_ROW, "tasks", 3),
	STORE_SELECT(STMT_TASK_LIST, &TASK_ROW,
		     "FROM tasks WHERE job_id = ?1 AND (?2 = 0 OR attempt = ?2)"
		     " ORDER BY attempt, rank"),
	STORE_UPSERT(STMT_OUTPUT_PUT, &OUTPUT_ROW, "outputs", 2),
	STORE_SELECT(STMT_OUTPUT_LIST, &OUTPUT_ROW,
		     "FROM outputs WHERE job_id = ?1 ORDER BY name"),
	STORE_STMT(STMT_JOB_REVISION_PUT, SQL_JOB_REVISION_PUT, NULL),
	STORE_STMT(STMT_JOB_REVISION_GET, SQL_JOB_REVISION_GET, NULL),
	/* The first recording of an input stays: later ones are checked
	   against it, never written over it. */
	STORE_INSERT(STMT_JOB_INPUT_PUT, &JOB_INPUT_ROW,
		     "INSERT OR IGNORE INTO job_inputs", 0),
	STORE_SELECT(STMT_JOB_INPUT_LIST, &JOB_INPUT_ROW,
		     "FROM job_inputs WHERE job_id = ?1 ORDER BY name"),
	STORE_STMT(STMT_JOB_STATE_COUNTS, SQL_JOB_STATE_COUNTS,
		   &STATE_COUNT_ROW),
	STORE_STMT(STMT_ATTEMPT_GOODPUT, SQL_ATTEMPT_GOODPUT, &GOODPUT_ROW),
	{0},
};

/* ---- jobs ---- */

STORE_RELEASE_FN(kn_job_row_release, struct kn_job_row, JOB_ROW)

int kn_store_job_insert(struct kn_store *st, const struct kn_job_row *j,
			const struct kn_audit *a, int64_t *out_id,
			struct kn_error *err)
{
	static const struct store_write w = {.what = "inserting a job",
					     .object_kind = "job"};

	return store_write_row(st, STMT_JOB_INSERT, j, &w, a, out_id, err);
}

int kn_store_job_insert_array(struct kn_store *st, const struct kn_job_row *j,
			      int first, int count, const struct kn_audit *a,
			      int64_t *out_id, struct kn_error *err)
{
	struct kn_job_row e = *j;
	int64_t head = 0, id = 0;
	bool own;
	int rc = write_begin(st, &own, err);

	for (int i = 0; rc == 0 && i < count; i++) {
		e.array_id = head;
		e.array_index = first + i;
		/* The audit row, once, names the array by its first id. */
		rc = kn_store_job_insert(st, &e, NULL, &id, err);
		if (rc == 0 && i == 0)
			head = id;
	}
	if (rc == 0) {
		const struct store_key keys[] = {KEY_I64(head)};
		char object[32];
		struct kn_audit row = a ? *a : (struct kn_audit){0};

		rc = store_run_keyed(st, STMT_JOB_ARRAY_HEAD, keys, N_KEYS(keys),
				     "naming a job array", err);
		snprintf(object, sizeof(object), "job/%" PRId64, head);
		row.object = object;
		if (rc == 0)
			rc = audit_write(st, a ? &row : NULL, NULL, err);
	}
	rc = write_end(st, own, rc, err);
	if (rc == 0)
		*out_id = head;
	return rc;
}

int kn_store_job_get(struct kn_store *st, int64_t id, struct kn_job_row *out,
		     struct kn_error *err)
{
	const struct store_key keys[] = {KEY_I64(id)};
	struct kn_job_row j;
	int rc = store_get_keyed(st, STMT_JOB_GET, keys, N_KEYS(keys),
				 "reading a job", &j, err);

	rc = store_found(rc, err, "id", "job %" PRId64 " not found", id);
	if (rc == 0)
		*out = j;
	return rc;
}

int kn_store_job_update(struct kn_store *st, const struct kn_job_row *j,
			const struct kn_audit *a, struct kn_error *err)
{
	char object[32], missing[48];
	struct store_write w = {.what = "updating a job", .object = object,
				.missing_field = "id", .missing = missing};

	snprintf(object, sizeof(object), "job/%" PRId64, j->id);
	snprintf(missing, sizeof(missing), "job %" PRId64 " not found", j->id);
	return store_write_row(st, STMT_JOB_UPDATE, j, &w, a, NULL, err);
}

int kn_store_job_list(struct kn_store *st, const struct kn_job_filter *f,
		      struct kn_job_row **out, size_t *n,
		      struct kn_error *err)
{
	static const struct kn_job_filter none = {.state = -1};
	const char *state = NULL, *state_too = NULL; /* ?5, ?6 */
	enum stmt_id id = STMT_JOB_LIST_ALL;

	if (!f)
		f = &none;
	if (f->state >= 0 &&
	    !store_job_state_valid((enum kn_job_state)f->state))
		return kn_errorf(err, KN_EINVAL, "state",
				 "unknown job state %d", f->state);
	if (f->state >= 0 && f->active_only && f->state != KN_JOB_QUEUED &&
	    f->state != KN_JOB_RUNNING) {
		*out = NULL; /* no job is both */
		*n = 0;
		return 0;
	}
	if (f->state >= 0) {
		id = STMT_JOB_LIST_STATE;
		state = kn_job_state_name(f->state);
	} else if (f->active_only) {
		id = STMT_JOB_LIST_ACTIVE;
		state = kn_job_state_name(KN_JOB_QUEUED);
		state_too = kn_job_state_name(KN_JOB_RUNNING);
	} else if (f->name) {
		id = STMT_JOB_LIST_NAME;
	} else if (f->owner) {
		id = STMT_JOB_LIST_OWNER;
	}
	if (f->newest_first)
		id += STMT_JOB_LIST_ALL_DESC - STMT_JOB_LIST_ALL;

	/* The five share their parameters: a listing ignores those it has
	   no condition on. */
	const struct store_key keys[] = {
		KEY_TEXT(f->owner),
		KEY_TEXT(f->name),
		KEY_I64(f->with_spec),
		KEY_I64(f->limit > 0 ? f->limit : -1),
		KEY_TEXT(state),
		KEY_TEXT(state_too),
		KEY_I64(f->before_id > 0 ? f->before_id : INT64_MAX),
		KEY_I64(f->array_id),
	};

	return store_list_keyed(st, id, keys, N_KEYS(keys), "listing jobs", out,
				n, err);
}

STORE_LIST_FREE_FN(kn_job_list_free, struct kn_job_row, JOB_ROW)

/* ---- attempts ---- */

STORE_RELEASE_FN(kn_attempt_row_release, struct kn_attempt_row, ATTEMPT_ROW)

int store_job_missing(int rc, int64_t job_id, struct kn_error *err)
{
	if (rc == -ENOENT)
		return kn_errorf(err, KN_ENOTFOUND, "job_id",
				 "job %" PRId64 " not found", job_id);
	return rc;
}

STORE_JOB_PUT_FN(kn_store_attempt_put, struct kn_attempt_row, STMT_ATTEMPT_PUT,
		 "writing an attempt")

STORE_LIST_BY_FN(kn_store_attempt_list, int64_t, struct kn_attempt_row,
		 STMT_ATTEMPT_LIST, "listing attempts")

STORE_LIST_FREE_FN(kn_attempt_list_free, struct kn_attempt_row, ATTEMPT_ROW)

/* ---- tasks ---- */

STORE_RELEASE_FN(kn_task_row_release, struct kn_task_row, TASK_ROW)

int kn_store_task_put(struct kn_store *st, const struct kn_task_row *t,
		      struct kn_error *err)
{
	struct kn_task_row row = *t;

	/* '' is a task that holds no device: the ledger's CPU side. */
	if (!row.devices)
		row.devices = "";
	return store_job_missing(
		store_put(st, STMT_TASK_PUT, &row, "writing a task", err),
		t->job_id, err);
}

int kn_store_task_list(struct kn_store *st, int64_t job_id, int attempt,
		       struct kn_task_row **out, size_t *n,
		       struct kn_error *err)
{
	const struct store_key keys[] = {KEY_I64(job_id), KEY_I64(attempt)};

	return store_list_keyed(st, STMT_TASK_LIST, keys, N_KEYS(keys),
				"listing tasks", out, n, err);
}

STORE_LIST_FREE_FN(kn_task_list_free, struct kn_task_row, TASK_ROW)

/* ---- outputs ---- */

STORE_RELEASE_FN(kn_output_row_release, struct kn_output_row, OUTPUT_ROW)

STORE_JOB_PUT_FN(kn_store_output_put, struct kn_output_row, STMT_OUTPUT_PUT,
		 "writing an output")

STORE_LIST_BY_FN(kn_store_output_list, int64_t, struct kn_output_row,
		 STMT_OUTPUT_LIST, "listing outputs")

STORE_LIST_FREE_FN(kn_output_list_free, struct kn_output_row, OUTPUT_ROW)

/* ---- job code revisions ---- */

int kn_store_job_revision_put(struct kn_store *st, int64_t job_id,
			      const char *revision, struct kn_error *err)
{
	const struct store_key keys[] = {KEY_I64(job_id), KEY_TEXT(revision)};

	return store_job_missing(
		store_run_keyed(st, STMT_JOB_REVISION_PUT, keys, N_KEYS(keys),
				"recording a job's code revision", err),
		job_id, err);
}

int kn_store_job_revision_get(struct kn_store *st, int64_t job_id,
			      char **out, struct kn_error *err)
{
	const struct store_key keys[] = {KEY_I64(job_id)};
	int rc = store_one_text(st, STMT_JOB_REVISION_GET, keys, N_KEYS(keys),
				"reading a job's code revision", out, err);

	return store_found(rc, err, NULL, "job %" PRId64 " has no code revision",
			   job_id);
}

/* ---- job inputs (digests recorded at the first fetch) ---- */

STORE_RELEASE_FN(kn_job_input_row_release, struct kn_job_input_row,
		 JOB_INPUT_ROW)

STORE_JOB_PUT_FN(kn_store_job_input_put, struct kn_job_input_row,
		 STMT_JOB_INPUT_PUT, "recording a job's input")

STORE_LIST_BY_FN(kn_store_job_input_list, int64_t, struct kn_job_input_row,
		 STMT_JOB_INPUT_LIST, "listing a job's inputs")

STORE_LIST_FREE_FN(kn_job_input_list_free, struct kn_job_input_row,
		   JOB_INPUT_ROW)

/* ---- totals ---- */

int kn_store_job_totals(struct kn_store *st, struct kn_job_totals *out,
			struct kn_error *err)
{
	struct state_count *counts = NULL;
	struct kn_job_totals goodput;
	size_t n = 0;
	int rc = store_list_keyed(st, STMT_JOB_STATE_COUNTS, NULL, 0,
				  "counting jobs by state", &counts, &n, err);

	if (rc < 0)
		return rc;
	memset(out, 0, sizeof(*out));
	for (size_t i = 0; i < n; i++)
		if (counts[i].state >= 0)
			out->by_state[counts[i].state] = counts[i].count;
	store_rows_free(&STATE_COUNT_ROW, counts, n);
	rc = store_get_keyed(st, STMT_ATTEMPT_GOODPUT, NULL, 0,
			     "summing goodput", &goodput, err);
	if (rc == 1) {
		out->useful_ms = goodput.useful_ms;
		out->lost_ms = goodput.lost_ms;
	}
	return rc < 0 ? rc : 0;
}
