/*
 * Unit tests for store: open, transactions and their audit rows, and the
 * round trips and listing filters of jobs, attempts, tasks, outputs,
 * inputs, tokens, the audit log, nodes and alerts (the service tables are
 * in test_store_services.c). Each test runs in its own temporary
 * directory with a fresh database file.
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
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "base/base.h"
#include "base/tests/testmain.h"
#include "store_fixture.h"

/* ---- open ---- */

static void test_open_creates_private_wal_file(void **state)
{
	struct fixture *fx = *state;
	char wal[160];
	struct stat sb;
	sqlite3 *db = NULL;
	sqlite3_stmt *s = NULL;

	assert_int_equal(stat(fx->path, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0600);

	/* The WAL file exists while the store is open, as private. */
	insert_job(fx->st, "a", "alice", KN_JOB_QUEUED);
	snprintf(wal, sizeof(wal), "%s-wal", fx->path);
	assert_int_equal(stat(wal, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0600);

	assert_int_equal(sqlite3_open(fx->path, &db), SQLITE_OK);
	assert_int_equal(
		sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &s, NULL),
		SQLITE_OK);
	assert_int_equal(sqlite3_step(s), SQLITE_ROW);
	assert_string_equal((const char *)sqlite3_column_text(s, 0), "wal");
	sqlite3_finalize(s);
	assert_int_equal(
		sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &s, NULL),
		SQLITE_OK);
	assert_int_equal(sqlite3_step(s), SQLITE_ROW);
	assert_int_equal(sqlite3_column_int(s, 0), KN_STORE_SCHEMA_VERSION);
	sqlite3_finalize(s);
	sqlite3_close(db);
}

static void test_reopen_keeps_data(void **state)
{
	struct fixture *fx = *state;
	struct kn_job_row got = {0};
	struct kn_error err = {0};
	int64_t id = insert_job(fx->st, "keep", "alice", KN_JOB_QUEUED);

	kn_store_free(fx->st);
	fx->st = NULL;
	assert_int_equal(kn_store_open(fx->path, &fx->st, &err), 0);
	assert_int_equal(kn_store_job_get(fx->st, id, &got, &err), 0);
	assert_string_equal(got.name, "keep");
	kn_job_row_release(&got);
	/* Ids continue after a reopen. */
	assert_int_equal(insert_job(fx->st, "next", "alice", KN_JOB_QUEUED),
			 id + 1);
}

static void test_newer_version_refused(void **state)
{
	struct fixture *fx = *state;
	struct kn_store *st = NULL;
	struct kn_error err = {0};

	char sql[64], newer[32], want[16];

	/* One past what this build writes, whatever that is. */
	snprintf(sql, sizeof(sql), "PRAGMA user_version = %d",
		 KN_STORE_SCHEMA_VERSION + 1);
	snprintf(newer, sizeof(newer), "version %d",
		 KN_STORE_SCHEMA_VERSION + 1);
	snprintf(want, sizeof(want), "(%d)", KN_STORE_SCHEMA_VERSION);
	raw_exec(fx->path, sql);
	assert_int_equal(kn_store_open(fx->path, &st, &err), -EIO);
	assert_null(st);
	assert_int_equal(err.code, KN_EIO);
	assert_non_null(strstr(err.message, fx->path));
	assert_non_null(strstr(err.message, newer));
	assert_non_null(strstr(err.message, want));
}

static void test_not_a_database_refused(void **state)
{
	struct fixture *fx = *state;
	static const char junk[] = "this is not a database, just some text "
				   "that is long enough to fill a header....";
	struct kn_store *st = NULL;
	struct kn_error err = {0};

	assert_int_equal(kn_write_file_atomic(fx->path, junk, sizeof(junk) - 1,
					      0600),
			 0);
	assert_int_equal(kn_store_open(fx->path, &st, &err), -EIO);
	assert_null(st);
	assert_non_null(strstr(err.message, fx->path));
	assert_non_null(strstr(err.message, "not a SQLite database"));
}

static void test_open_missing_directory(void **state)
{
	struct fixture *fx = *state;
	char path[160];
	struct kn_store *st = NULL;
	struct kn_error err = {0};

	snprintf(path, sizeof(path), "%s/no/such/kiln.db", fx->dir);
	assert_true(kn_store_open(path, &st, &err) < 0);
	assert_null(st);
	assert_non_null(strstr(err.message, path));
}

/* ---- jobs ---- */

static void test_job_insert_writes_audit(void **state)
{
	struct fixture *fx = *state;
	struct kn_job_row j = sample_job("train", "alice");
	struct kn_audit a = sample_audit("alice", "job.submit", NULL, 0);
	struct kn_job_row got = {0};
	struct kn_audit *rows = NULL;
	struct kn_error err = {0};
	size_t n = 0;
	int64_t id = 0;
	int64_t before = kn_now_ms();

	assert_int_equal(kn_store_job_insert(fx->st, &j, &a, &id, &err), 0);
	assert_int_equal(id, 1);

	assert_int_equal(kn_store_job_get(fx->st, id, &got, &err), 0);
	assert_int_equal(got.id, 1);
	assert_string_equal(got.name, "train");
	assert_string_equal(got.owner, "alice");
	assert_int_equal(got.state, KN_JOB_QUEUED);
	assert_int_equal(got.priority, 10);
	assert_int_equal(got.tasks, 2);
	assert_string_equal(got.filename, "train.yaml");
	assert_string_equal(got.spec_yaml, "kind: Job\n");
	assert_string_equal(got.spec_json, "{\"kind\":\"Job\"}");
	assert_int_equal(got.submitted_at, 1000);
	assert_int_equal(got.exit_code, -1);
	assert_null(got.reason);
	kn_job_row_release(&got);
	assert_null(got.name);

	assert_int_equal(kn_store_audit_list(fx->st, NULL, &rows, &n, &err), 0);
	assert_int_equal(n, 1);
	assert_string_equal(rows[0].actor, "alice");
	assert_string_equal(rows[0].action, "job.submit");
	assert_string_equal(rows[0].object, "job/1"); /* filled in */
	assert_string_equal(rows[0].outcome, "ok");
	assert_null(rows[0].detail);
	assert_true(rows[0].time_ms >= before);
	kn_audit_list_free(rows, n);

	/* Ids are never reused and count up. */
	assert_int_equal(insert_job(fx->st, "b", "bob", KN_JOB_QUEUED), 2);
}

/* An array: consecutive ids, each row its element, one audit row. */
static void test_job_insert_array(void **state)
{
	struct fixture *fx = *state;
	struct kn_job_row j = sample_job("sweep", "alice");
	struct kn_audit a = sample_audit("alice", "job.submit", NULL, 0);
	struct kn_job_filter f = {.state = -1};
	struct kn_job_row *rows = NULL;
	struct kn_audit *audit = NULL;
	struct kn_error err = {0};
	size_t n = 0;
	int64_t id = 0;

	assert_int_equal(insert_job(fx->st, "single", "bob", KN_JOB_QUEUED),
			 1);
	assert_int_equal(kn_store_job_insert_array(fx->st, &j, 5, 3, &a, &id,
						   &err),
			 0);
	assert_int_equal(id, 2);
	f.array_id = id;
	assert_int_equal(kn_store_job_list(fx->st, &f, &rows, &n, &err), 0);
	assert_int_equal(n, 3);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(rows[i].id, 2 + (int64_t)i);
		assert_int_equal(rows[i].array_id, 2);
		assert_int_equal(rows[i].array_index, 5 + (int)i);
		assert_string_equal(rows[i].name, "sweep");
	}
	kn_job_list_free(rows, n);
	/* Every job when no array is asked for; a single job is in none. */
	f.array_id = 0;
	assert_int_equal(kn_store_job_list(fx->st, &f, &rows, &n, &err), 0);
	assert_int_equal(n, 4);
	assert_int_equal(rows[0].array_id, 0);
	kn_job_list_free(rows, n);
	assert_int_equal(kn_store_audit_list(fx->st, NULL, &audit, &n, &err),
			 0);
	assert_int_equal(n, 1);
	assert_string_equal(audit[0].object, "job/2");
	kn_audit_list_free(audit, n);
}

static void test_job_get_not_found(void **state)
{
	struct fixture *fx = *state;
	struct kn_job_row got = {.id = 99};
	struct kn_error err = {0};

	assert_int_equal(kn_store_job_get(fx->st, 12, &got, &err), -ENOENT);
	assert_int_equal(err.code, KN_ENOTFOUND);
	assert_string_equal(err.field, "id");
	assert_string_equal(err.message, "job 12 not found");
	assert_int_equal(got.id, 99); /* untouched */
}

static void test_job_update_round_trip(void **state)
{
	struct fixture *fx = *state;
	struct kn_audit a = sample_audit("bob", "job.cancel", NULL, 5);
	struct kn_job_row j = {0};
	struct kn_job_row got = {0};
	struct kn_audit *rows = NULL;
	struct kn_error err = {0};
	size_t n = 0;
	int64_t id = insert_job(fx->st, "u", "bob", KN_JOB_QUEUED);

	assert_int_equal(kn_store_job_get(fx->st, id, &j, &err), 0);
	free(j.reason);
	j.state = KN_JOB_FAILED;
	j.started_at = 2000;
	j.ended_at = 3000;
	j.not_before = 2500;
	j.attempts = 3;
	j.retries_used = 2;
	j.cancel_requested = true;
	j.reason = kn_xstrdup("exit code 3");
	j.exit_code = 3;
	assert_int_equal(kn_store_job_update(fx->st, &j, &a, &err), 0);

	assert_int_equal(kn_store_job_get(fx->st, id, &got, &err), 0);
	assert_int_equal(got.state, KN_JOB_FAILED);
	assert_int_equal(got.started_at, 2000);
	assert_int_equal(got.ended_at, 3000);
	assert_int_equal(got.not_before, 2500);
	assert_int_equal(got.attempts, 3);
	assert_int_equal(got.retries_used, 2);
	assert_true(got.cancel_requested);
	assert_string_equal(got.reason, "exit code 3");
	assert_int_equal(got.exit_code, 3);
	/* Immutable columns stay. */
	assert_string_equal(got.name, "u");
	assert_int_equal(got.priority, 10);
	kn_job_row_release(&got);

	/* Back to NULL reason and cleared flag. */
	free(j.reason);
	j.reason = NULL;
	j.cancel_requested = false;
	j.state = KN_JOB_QUEUED;
	assert_int_equal(kn_store_job_update(fx->st, &j, NULL, &err), 0);
	assert_int_equal(kn_store_job_get(fx->st, id, &got, &err), 0);
	assert_null(got.reason);
	assert_false(got.cancel_requested);
	assert_int_equal(got.state, KN_JOB_QUEUED);
	kn_job_row_release(&got);

	assert_int_equal(kn_store_audit_list(fx->st, NULL, &rows, &n, &err), 0);
	assert_int_equal(n, 1);
	assert_string_equal(rows[0].object, "job/1");
	assert_int_equal(rows[0].time_ms, 5);
	kn_audit_list_free(rows, n);

	/* A missing job: not found, and its audit row is not written. */
	j.id = 40;
	assert_int_equal(kn_store_job_update(fx->st, &j, &a, &err), -ENOENT);
	assert_string_equal(err.message, "job 40 not found");
	assert_int_equal(audit_count(fx->st), 1);
	kn_job_row_release(&j);

	/* A state outside the enum is refused before any write. */
	j = sample_job("bad", "bob");
	j.state = (enum kn_job_state)42;
	assert_int_equal(kn_store_job_insert(fx->st, &j, NULL, NULL, &err),
			 -EINVAL);
	assert_string_equal(err.field, "state");
}

static void check_job_names(struct kn_store *st,
			    const struct kn_job_filter *f,
			    const char *const *want, size_t n_want)
{
	struct kn_job_row *rows = NULL;
	struct kn_error err = {0};
	size_t n = 99;

	assert_int_equal(kn_store_job_list(st, f, &rows, &n, &err), 0);
	assert_int_equal(n, n_want);
	if (n_want == 0)
		assert_null(rows);
	for (size_t i = 0; i < n; i++) {
		assert_string_equal(rows[i].name, want[i]);
		if (i > 0)
			assert_true(rows[i].id > rows[i - 1].id);
		if (f && f->with_spec) {
			assert_non_null(rows[i].spec_yaml);
			assert_non_null(rows[i].spec_json);
		} else {
			assert_null(rows[i].spec_yaml);
			assert_null(rows[i].spec_json);
		}
		/* The rest of the row is read either way. */
		assert_string_equal(rows[i].filename, "train.yaml");
	}
	kn_job_list_free(rows, n);
}

static void test_job_list_filters(void **state)
{
	struct fixture *fx = *state;
	struct kn_job_filter f = {.state = -1};
	struct kn_job_row *rows = NULL;
	struct kn_error err = {0};
	size_t n = 0;

	insert_job(fx->st, "j1", "alice", KN_JOB_QUEUED);
	insert_job(fx->st, "j2", "bob", KN_JOB_RUNNING);
	insert_job(fx->st, "j3", "alice", KN_JOB_SUCCEEDED);
	insert_job(fx->st, "j4", "alice", KN_JOB_RUNNING);
	insert_job(fx->st, "j5", "bob", KN_JOB_FAILED);
	insert_job(fx->st, "j1", "bob", KN_JOB_QUEUED);

	check_job_names(fx->st, NULL,
			(const char *const[]){"j1", "j2", "j3", "j4", "j5",
					      "j1"},
			6);
	check_job_names(fx->st, &f,
			(const char *const[]){"j1", "j2", "j3", "j4", "j5",
					      "j1"},
			6);
	f.with_spec = true;
	check_job_names(fx->st, &f,
			(const char *const[]){"j1", "j2", "j3", "j4", "j5",
					      "j1"},
			6);
	f.with_spec = false;

	f.state = KN_JOB_RUNNING;
	check_job_names(fx->st, &f, (const char *const[]){"j2", "j4"}, 2);
	f.state = KN_JOB_CANCELLED;
	check_job_names(fx->st, &f, NULL, 0);

	f.state = -1;
	f.active_only = true;
	check_job_names(fx->st, &f,
			(const char *const[]){"j1", "j2", "j4", "j1"}, 4);
	f.owner = "alice";
	check_job_names(fx->st, &f, (const char *const[]){"j1", "j4"}, 2);
	f.state = KN_JOB_QUEUED;
	check_job_names(fx->st, &f, (const char *const[]){"j1"}, 1);
	f.state = KN_JOB_SUCCEEDED; /* not active: nothing */
	check_job_names(fx->st, &f, NULL, 0);

	f = (struct kn_job_filter){.state = -1, .owner = "bob"};
	check_job_names(fx->st, &f, (const char *const[]){"j2", "j5", "j1"},
			3);
	f = (struct kn_job_filter){.state = -1, .name = "j1"};
	check_job_names(fx->st, &f, (const char *const[]){"j1", "j1"}, 2);
	f.owner = "bob";
	check_job_names(fx->st, &f, (const char *const[]){"j1"}, 1);

	f = (struct kn_job_filter){.state = -1, .limit = 2, .with_spec = true};
	check_job_names(fx->st, &f, (const char *const[]){"j1", "j2"}, 2);
	f = (struct kn_job_filter){.state = -1, .limit = 2,
				   .active_only = true};
	check_job_names(fx->st, &f, (const char *const[]){"j1", "j2"}, 2);

	f = (struct kn_job_filter){.state = 17};
	assert_int_equal(kn_store_job_list(fx->st, &f, &rows, &n, &err),
			 -EINVAL);
}

/* The ids of f's listing, in its order, as "1,2,3". */
static void check_job_ids(struct kn_store *st, const struct kn_job_filter *f,
			  const char *want)
{
	struct kn_job_row *rows = NULL;
	struct kn_error err = {0};
	char got[128] = "";
	size_t n = 0, len = 0;

	assert_int_equal(kn_store_job_list(st, f, &rows, &n, &err), 0);
	for (size_t i = 0; i < n; i++)
		len += (size_t)snprintf(got + len, sizeof(got) - len, "%s%lld",
					i ? "," : "", (long long)rows[i].id);
	assert_string_equal(got, want);
	kn_job_list_free(rows, n);
}

/* Pages newest first: each page's last id is the next one's before. Each
   filter leads its own listing (an index), with the others applied. */
static void test_job_list_pages(void **state)
{
	struct fixture *fx = *state;
	struct kn_job_filter f = {.state = -1, .newest_first = true,
				  .limit = 2};

	insert_job(fx->st, "j1", "alice", KN_JOB_QUEUED);
	insert_job(fx->st, "j2", "bob", KN_JOB_FAILED);
	insert_job(fx->st, "j3", "alice", KN_JOB_SUCCEEDED);
	insert_job(fx->st, "j1", "alice", KN_JOB_FAILED);
	insert_job(fx->st, "j5", "bob", KN_JOB_RUNNING);

	check_job_ids(fx->st, &f, "5,4");
	f.before_id = 4;
	check_job_ids(fx->st, &f, "3,2");
	f.before_id = 2;
	check_job_ids(fx->st, &f, "1");
	f.before_id = 1;
	check_job_ids(fx->st, &f, "");
	f = (struct kn_job_filter){.state = KN_JOB_FAILED, .newest_first = true};
	check_job_ids(fx->st, &f, "4,2");
	f.before_id = 4;
	check_job_ids(fx->st, &f, "2");
	f = (struct kn_job_filter){.state = -1, .active_only = true,
				   .newest_first = true};
	check_job_ids(fx->st, &f, "5,1");
	f = (struct kn_job_filter){.state = -1, .owner = "alice",
				   .newest_first = true, .before_id = 4};
	check_job_ids(fx->st, &f, "3,1");
	f = (struct kn_job_filter){.state = -1, .name = "j1",
				   .newest_first = true};
	check_job_ids(fx->st, &f, "4,1");
	f.owner = "bob";
	check_job_ids(fx->st, &f, "");
	f = (struct kn_job_filter){.state = -1, .name = "j1", .before_id = 4};
	check_job_ids(fx->st, &f, "1");
	f = (struct kn_job_filter){.state = -1, .owner = "bob"};
	check_job_ids(fx->st, &f, "2,5");
	/* Oldest first, below an id. */
	f = (struct kn_job_filter){.state = -1, .before_id = 3};
	check_job_ids(fx->st, &f, "1,2");
}

/* ---- attempts and tasks ---- */

static void test_attempt_put_and_list(void **state)
{
	struct fixture *fx = *state;
	struct kn_attempt_row a = {
		.number = 2, .state = KN_JOB_RUNNING, .started_at = 50,
		.exit_code = -1,
	};
	struct kn_attempt_row *rows = NULL;
	struct kn_error err = {0};
	size_t n = 0;
	int64_t id = insert_job(fx->st, "a", "alice", KN_JOB_RUNNING);

	a.job_id = id;
	assert_int_equal(kn_store_attempt_put(fx->st, &a, &err), 0);
	a.number = 1;
	a.state = KN_JOB_PREEMPTED;
	a.ended_at = 40;
	a.signal = 15;
	a.reason = (char *)"spot eviction";
	assert_int_equal(kn_store_attempt_put(fx->st, &a, &err), 0);
	/* Replace attempt 2 with its end. */
	a = (struct kn_attempt_row){
		.job_id = id, .number = 2, .state = KN_JOB_SUCCEEDED,
		.started_at = 50, .ended_at = 90, .exit_code = 0,
	};
	assert_int_equal(kn_store_attempt_put(fx->st, &a, &err), 0);

	assert_int_equal(kn_store_attempt_list(fx->st, id, &rows, &n, &err),
			 0);
	assert_int_equal(n, 2);
	assert_int_equal(rows[0].number, 1);
	assert_int_equal(rows[0].state, KN_JOB_PREEMPTED);
	assert_int_equal(rows[0].signal, 15);
	assert_string_equal(rows[0].reason, "spot eviction");
	assert_int_equal(rows[1].number, 2);
	assert_int_equal(rows[1].state, KN_JOB_SUCCEEDED);
	assert_int_equal(rows[1].started_at, 50);
	assert_int_equal(rows[1].ended_at, 90);
	assert_int_equal(rows[1].exit_code, 0);
	assert_null(rows[1].reason);
	kn_attempt_list_free(rows, n);

	assert_int_equal(kn_store_attempt_list(fx->st, 77, &rows, &n, &err),
			 0);
	assert_int_equal(n, 0);
	assert_null(rows);

	a.job_id = 77;
	assert_int_equal(kn_store_attempt_put(fx->st, &a, &err), -ENOENT);
	assert_string_equal(err.message, "job 77 not found");
	assert_string_equal(err.field, "job_id");
}

static void test_attempt_goodput_round_trip(void **state)
{
	struct fixture *fx = *state;
	struct kn_attempt_row a = {
		.number = 1, .state = KN_JOB_PREEMPTED, .started_at = 10,
		.ended_at = 100, .exit_code = -1, .signal = 15,
		.checkpoint = (char *)"step-000120", .checkpoint_at = 80,
		.restore_ms = 7, .useful_ms = 140, .lost_ms = 54,
	};
	struct kn_attempt_row *rows = NULL;
	struct kn_error err = {0};
	size_t n = 0;

	a.job_id = insert_job(fx->st, "g", "alice", KN_JOB_QUEUED);
	assert_int_equal(kn_store_attempt_put(fx->st, &a, &err), 0);
	assert_int_equal(kn_store_attempt_list(fx->st, a.job_id, &rows, &n,
					       &err), 0);
	assert_int_equal(n, 1);
	assert_string_equal(rows[0].checkpoint, "step-000120");
	assert_int_equal(rows[0].checkpoint_at, 80);
	assert_int_equal(rows[0].restore_ms, 7);
	assert_int_equal(rows[0].useful_ms, 140);
	assert_int_equal(rows[0].lost_ms, 54);
	kn_attempt_list_free(rows, n);
}

static int commits_seen;
static void count_commit(void *arg, double seconds)
{
	(void)arg;
	assert_true(seconds >= 0);
	commits_seen++;
}

static void test_job_totals_and_commit_watch(void **state)
{
	struct fixture *fx = *state;
	struct kn_attempt_row a = {.number = 1, .state = KN_JOB_FAILED,
				   .exit_code = 1, .useful_ms = 300,
				   .lost_ms = 100};
	struct kn_job_totals t;
	struct kn_error err = {0};

	assert_int_equal(kn_store_job_totals(fx->st, &t, &err), 0);
	assert_int_equal(t.by_state[KN_JOB_QUEUED], 0);
	assert_int_equal(t.useful_ms, 0);
	kn_store_on_commit(fx->st, count_commit, NULL);
	commits_seen = 0;
	insert_job(fx->st, "q1", "alice", KN_JOB_QUEUED);
	insert_job(fx->st, "q2", "alice", KN_JOB_QUEUED);
	a.job_id = insert_job(fx->st, "f", "bob", KN_JOB_FAILED);
	assert_int_equal(kn_store_attempt_put(fx->st, &a, &err), 0);
	a.number = 2;
	a.useful_ms = 50;
	a.lost_ms = 0;
	assert_int_equal(kn_store_attempt_put(fx->st, &a, &err), 0);
	/* Each job insert was a transaction of its own (an attempt's put is
	   one statement SQLite commits by itself, not seen). */
	assert_int_equal(commits_seen, 3);
	/* A savepoint's release is not a commit; the outer one is. */
	commits_seen = 0;
	assert_int_equal(kn_store_begin(fx->st, &err), 0);
	assert_int_equal(kn_store_begin(fx->st, &err), 0);
	assert_int_equal(kn_store_commit(fx->st, &err), 0);
	assert_int_equal(commits_seen, 0);
	assert_int_equal(kn_store_commit(fx->st, &err), 0);
	assert_int_equal(commits_seen, 1);
	kn_store_on_commit(fx->st, NULL, NULL);

	assert_int_equal(kn_store_job_totals(fx->st, &t, &err), 0);
	assert_int_equal(t.by_state[KN_JOB_QUEUED], 2);
	assert_int_equal(t.by_state[KN_JOB_FAILED], 1);
	assert_int_equal(t.by_state[KN_JOB_RUNNING], 0);
	assert_int_equal(t.useful_ms, 350);
	assert_int_equal(t.lost_ms, 100);
}

static void test_outputs(void **state)
{
	struct fixture *fx = *state;
	struct kn_output_row o = {
		.name = (char *)"final_weights.bin", .size = 4096,
		.sha256 = (char *)"ab12", .url = (char *)"file:///b/1/outputs/x",
	};
	struct kn_output_row *rows = NULL;
	struct kn_error err = {0};
	size_t n = 0;

	o.job_id = insert_job(fx->st, "o", "alice", KN_JOB_SUCCEEDED);
	assert_int_equal(kn_store_output_put(fx->st, &o, &err), 0);
	o.name = (char *)"metrics.json";
	o.size = 12;
	assert_int_equal(kn_store_output_put(fx->st, &o, &err), 0);
	o.sha256 = (char *)"cd34"; /* replaced, not duplicated */
	assert_int_equal(kn_store_output_put(fx->st, &o, &err), 0);
	assert_int_equal(kn_store_output_list(fx->st, o.job_id, &rows, &n,
					      &err), 0);
	assert_int_equal(n, 2);
	assert_string_equal(rows[0].name, "final_weights.bin");
	assert_int_equal(rows[0].size, 4096);
	assert_string_equal(rows[1].name, "metrics.json");
	assert_string_equal(rows[1].sha256, "cd34");
	kn_output_list_free(rows, n);
	o.job_id = 999;
	assert_int_equal(kn_store_output_put(fx->st, &o, &err), -ENOENT);
}

/* The first recording of an input stays; a later one does not replace it. */
static void test_job_inputs(void **state)
{
	struct fixture *fx = *state;
	struct kn_job_input_row r = {
		.name = (char *)"train.bin", .url = (char *)"file:///d/train.bin",
		.sha256 = (char *)"ab12", .size = 4096, .attempt = 1,
		.recorded_at = 1000,
	};
	struct kn_job_input_row *rows = NULL;
	struct kn_error err = {0};
	size_t n = 0;

	r.job_id = insert_job(fx->st, "in", "alice", KN_JOB_RUNNING);
	assert_int_equal(kn_store_job_input_list(fx->st, r.job_id, &rows, &n,
						 &err), 0);
	assert_int_equal(n, 0);
	kn_job_input_list_free(rows, n);
	assert_int_equal(kn_store_job_input_put(fx->st, &r, &err), 0);
	r.sha256 = (char *)"cd34";
	r.attempt = 2;
	assert_int_equal(kn_store_job_input_put(fx->st, &r, &err), 0);
	r.name = (char *)"a.txt";
	r.size = 3;
	assert_int_equal(kn_store_job_input_put(fx->st, &r, &err), 0);
	assert_int_equal(kn_store_job_input_list(fx->st, r.job_id, &rows, &n,
						 &err), 0);
	assert_int_equal(n, 2);
	assert_string_equal(rows[0].name, "a.txt");
	assert_int_equal(rows[0].size, 3);
	assert_string_equal(rows[1].name, "train.bin");
	assert_string_equal(rows[1].sha256, "ab12");
	assert_int_equal(rows[1].size, 4096);
	assert_int_equal(rows[1].attempt, 1);
	assert_string_equal(rows[1].url, "file:///d/train.bin");
	kn_job_input_list_free(rows, n);
	r.job_id = 999;
	assert_int_equal(kn_store_job_input_put(fx->st, &r, &err), -ENOENT);
}

static void put_task(struct kn_store *st, int64_t job, int attempt, int rank,
		     enum kn_task_state s)
{
	char dir[64];
	struct kn_task_row t = {
		.job_id = job, .attempt = attempt, .rank = rank,
		.node = (char *)"gpu-1", .devices = (char *)"0,1",
		.gpu_milli = 1000, .task_dir = dir, .state = s,
		.exit_code = -1, .master_port = 29500,
	};
	struct kn_error err = {0};

	snprintf(dir, sizeof(dir), "/tasks/%lld.%d.%d", (long long)job,
		 attempt, rank);
	assert_int_equal(kn_store_task_put(st, &t, &err), 0);
}

static void test_task_put_and_list(void **state)
{
	struct fixture *fx = *state;
	struct kn_task_row t = {0};
	struct kn_task_row *rows = NULL;
	struct kn_error err = {0};
	size_t n = 0;
	int64_t id = insert_job(fx->st, "t", "alice", KN_JOB_RUNNING);

	put_task(fx->st, id, 2, 1, KN_TASK_STARTING);
	put_task(fx->st, id, 1, 1, KN_TASK_EXITED);
	put_task(fx->st, id, 2, 0, KN_TASK_STARTING);
	put_task(fx->st, id, 1, 0, KN_TASK_EXITED);

	/* Replace (2, 0) with its running state. */
	t = (struct kn_task_row){
		.job_id = id, .attempt = 2, .rank = 0, .node = (char *)"gpu-2",
		.devices = NULL, .gpu_milli = 500, .task_dir = (char *)"/t/x",
		.state = KN_TASK_RUNNING, .shim_pid = 4242,
		.shim_start = 123456789, .started_at = 70, .ended_at = 0,
		.exit_code = -1, .signal = 0, .master_port = 29501,
	};
	assert_int_equal(kn_store_task_put(fx->st, &t, &err), 0);

	assert_int_equal(kn_store_task_list(fx->st, id, 0, &rows, &n, &err),
			 0);
	assert_int_equal(n, 4);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(rows[i].attempt, 1 + (int)i / 2);
		assert_int_equal(rows[i].rank, (int)i % 2);
	}
	assert_string_equal(rows[0].node, "gpu-1");
	assert_string_equal(rows[0].devices, "0,1");
	assert_string_equal(rows[0].task_dir, "/tasks/1.1.0");
	assert_int_equal(rows[0].state, KN_TASK_EXITED);
	assert_string_equal(rows[2].node, "gpu-2");
	assert_string_equal(rows[2].devices, "");
	assert_int_equal(rows[2].gpu_milli, 500);
	assert_string_equal(rows[2].task_dir, "/t/x");
	assert_int_equal(rows[2].state, KN_TASK_RUNNING);
	assert_int_equal(rows[2].shim_pid, 4242);
	assert_int_equal(rows[2].shim_start, 123456789);
	assert_int_equal(rows[2].started_at, 70);
	assert_int_equal(rows[2].exit_code, -1);
	assert_int_equal(rows[2].master_port, 29501);
	kn_task_list_free(rows, n);

	assert_int_equal(kn_store_task_list(fx->st, id, 2, &rows, &n, &err),
			 0);
	assert_int_equal(n, 2);
	assert_int_equal(rows[0].attempt, 2);
	assert_int_equal(rows[1].attempt, 2);
	kn_task_list_free(rows, n);

	t.job_id = 555;
	assert_int_equal(kn_store_task_put(fx->st, &t, &err), -ENOENT);
	assert_string_equal(err.message, "job 555 not found");
}

/* ---- tokens ---- */

static void test_tokens(void **state)
{
	struct fixture *fx = *state;
	struct kn_token_row t = {
		.name = (char *)"alice", .role = (char *)"user",
		.hash = (char *)"aaaa", .created_by = (char *)"admin",
		.created_at = 100,
	};
	struct kn_audit a = sample_audit("admin", "token.create", NULL, 0);
	struct kn_token_row got = {0};
	struct kn_token_row *rows = NULL;
	struct kn_error err = {0};
	size_t n = 0;
	int64_t id = 0, id2 = 0;
	int count = -1;
	int64_t now = kn_now_ms();

	assert_int_equal(kn_store_token_count(fx->st, &count, &err), 0);
	assert_int_equal(count, 0);
	assert_int_equal(kn_store_token_insert(fx->st, &t, &a, &id, &err), 0);
	assert_int_equal(id, 1);

	/* Duplicate active name: conflict. */
	t.hash = (char *)"bbbb";
	assert_int_equal(kn_store_token_insert(fx->st, &t, &a, &id2, &err),
			 -EEXIST);
	assert_int_equal(err.code, KN_ECONFLICT);
	assert_string_equal(err.field, "name");
	assert_string_equal(err.message, "a token named alice already exists");
	assert_int_equal(id2, 0);

	/* by_hash: found, and last_used_at recorded. */
	assert_int_equal(kn_store_token_by_hash(fx->st, "aaaa", &got, &err), 0);
	assert_int_equal(got.id, 1);
	assert_string_equal(got.name, "alice");
	assert_string_equal(got.role, "user");
	assert_string_equal(got.created_by, "admin");
	assert_int_equal(got.created_at, 100);
	assert_int_equal(got.revoked_at, 0);
	assert_true(got.last_used_at >= now);
	kn_token_row_release(&got);
	assert_int_equal(kn_store_token_by_hash(fx->st, "bbbb", &got, &err),
			 -ENOENT);
	assert_int_equal(err.code, KN_ENOTFOUND);

	assert_int_equal(kn_store_token_count(fx->st, &count, &err), 0);
	assert_int_equal(count, 1);

	/* Revoke: by_hash fails, and the name is free again. */
	assert_int_equal(kn_store_token_revoke(fx->st, "alice", &a, &err), 0);
	assert_int_equal(kn_store_token_by_hash(fx->st, "aaaa", &got, &err),
			 -ENOENT);
	assert_int_equal(kn_store_token_revoke(fx->st, "alice", &a, &err),
			 -ENOENT);
	assert_string_equal(err.field, "name");
	assert_int_equal(kn_store_token_count(fx->st, &count, &err), 0);
	assert_int_equal(count, 0);
	assert_int_equal(kn_store_token_insert(fx->st, &t, NULL, &id2, &err),
			 0);
	assert_int_equal(id2, 2);
	assert_int_equal(kn_store_token_count(fx->st, &count, &err), 0);
	assert_int_equal(count, 1);

	/* The list has both, the revoked one marked. */
	assert_int_equal(kn_store_token_list(fx->st, &rows, &n, &err), 0);
	assert_int_equal(n, 2);
	assert_string_equal(rows[0].hash, "aaaa");
	assert_true(rows[0].revoked_at >= now);
	assert_string_equal(rows[1].hash, "bbbb");
	assert_int_equal(rows[1].revoked_at, 0);
	kn_token_list_free(rows, n);

	/* create, (no row for the conflict), revoke; not the failed revoke. */
	assert_int_equal(audit_count(fx->st), 2);
}

static void test_token_last_used_throttled(void **state)
{
	struct fixture *fx = *state;
	int64_t now = kn_now_ms();
	struct kn_token_row t = {
		.name = (char *)"recent", .role = (char *)"user",
		.hash = (char *)"r", .created_by = (char *)"admin",
		.created_at = 1, .last_used_at = now - 30000,
	};
	struct kn_token_row got = {0};
	struct kn_error err = {0};

	assert_int_equal(kn_store_token_insert(fx->st, &t, NULL, NULL, &err),
			 0);
	t = (struct kn_token_row){
		.name = (char *)"stale", .role = (char *)"user",
		.hash = (char *)"s", .created_by = (char *)"admin",
		.created_at = 1, .last_used_at = now - 120000,
	};
	assert_int_equal(kn_store_token_insert(fx->st, &t, NULL, NULL, &err),
			 0);

	/* Used 30 s ago: left as is (no write). */
	assert_int_equal(kn_store_token_by_hash(fx->st, "r", &got, &err), 0);
	assert_int_equal(got.last_used_at, now - 30000);
	kn_token_row_release(&got);

	/* Used 2 min ago: refreshed, in the row and in the file. */
	assert_int_equal(kn_store_token_by_hash(fx->st, "s", &got, &err), 0);
	assert_true(got.last_used_at >= now);
	kn_token_row_release(&got);
	assert_int_equal(kn_store_token_by_hash(fx->st, "s", &got, &err), 0);
	assert_true(got.last_used_at >= now);
	kn_token_row_release(&got);
}

/* ---- audit ---- */

static void test_audit_list(void **state)
{
	struct fixture *fx = *state;
	static const struct {
		const char *actor;
		const char *action;
		int64_t time_ms;
	} in[] = {
		{"alice", "job.submit", 100}, {"bob", "job.cancel", 300},
		{"alice", "token.create", 200}, {"alice", "job.cancel", 400},
		{"system", "jobx.odd", 500},  {"bob", "job.submit", 300},
	};
	struct kn_audit_filter f = {0};
	struct kn_audit *rows = NULL;
	struct kn_error err = {0};
	size_t n = 0;

	for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
		struct kn_audit a = sample_audit(in[i].actor, in[i].action,
						 "x", in[i].time_ms);
		a.detail = (char *)"d";
		assert_int_equal(kn_store_audit_insert(fx->st, &a, &err), 0);
	}

	/* Newest first; equal times by insertion, newest first. */
	assert_int_equal(kn_store_audit_list(fx->st, &f, &rows, &n, &err), 0);
	assert_int_equal(n, 6);
	assert_int_equal(rows[0].time_ms, 500);
	assert_int_equal(rows[1].time_ms, 400);
	assert_string_equal(rows[2].action, "job.submit");
	assert_int_equal(rows[2].time_ms, 300);
	assert_string_equal(rows[3].action, "job.cancel");
	assert_int_equal(rows[3].time_ms, 300);
	assert_true(rows[2].id > rows[3].id);
	assert_int_equal(rows[5].time_ms, 100);
	assert_string_equal(rows[0].detail, "d");
	assert_string_equal(rows[0].role, "user");
	kn_audit_list_free(rows, n);

	f.actor = "alice";
	assert_int_equal(kn_store_audit_list(fx->st, &f, &rows, &n, &err), 0);
	assert_int_equal(n, 3);
	assert_int_equal(rows[0].time_ms, 400);
	assert_int_equal(rows[2].time_ms, 100);
	kn_audit_list_free(rows, n);

	f = (struct kn_audit_filter){.action = "job."};
	assert_int_equal(kn_store_audit_list(fx->st, &f, &rows, &n, &err), 0);
	assert_int_equal(n, 4); /* not "jobx.odd" nor "token.create" */
	for (size_t i = 0; i < n; i++)
		assert_int_equal(strncmp(rows[i].action, "job.", 4), 0);
	kn_audit_list_free(rows, n);

	f = (struct kn_audit_filter){.action = "job_"}; /* "_" is literal */
	assert_int_equal(kn_store_audit_list(fx->st, &f, &rows, &n, &err), 0);
	assert_int_equal(n, 0);
	assert_null(rows);

	f = (struct kn_audit_filter){.since_ms = 300};
	assert_int_equal(kn_store_audit_list(fx->st, &f, &rows, &n, &err), 0);
	assert_int_equal(n, 4);
	kn_audit_list_free(rows, n);

	f = (struct kn_audit_filter){.since_ms = 200, .action = "job",
				     .actor = "bob", .limit = 1};
	assert_int_equal(kn_store_audit_list(fx->st, &f, &rows, &n, &err), 0);
	assert_int_equal(n, 1);
	assert_string_equal(rows[0].action, "job.submit");
	assert_string_equal(rows[0].actor, "bob");
	kn_audit_list_free(rows, n);

	/* A required field missing is a bad argument, not a crash. */
	struct kn_audit bad = sample_audit("alice", NULL, "x", 1);
	assert_int_equal(kn_store_audit_insert(fx->st, &bad, &err), -EINVAL);
	assert_non_null(strstr(err.message, "audit.action"));
}

/* ---- nodes ---- */

static void test_node_put_replaces_devices(void **state)
{
	struct fixture *fx = *state;
	struct kn_device_row devs[4];
	struct kn_node_row node = {
		.name = (char *)"gpu-b", .state = (char *)"ready",
		.labels_json = (char *)"{\"zone\":\"1\"}", .taints_json = NULL,
		.cpu_milli = 96000, .memory_bytes = 1LL << 40,
		.simulated = true, .updated_at = 10, .devices = devs,
		.n_devices = 4,
	};
	struct kn_node_row other = {
		.name = (char *)"gpu-a", .state = (char *)"cordoned",
		.cpu_milli = 8000, .updated_at = 11,
	};
	struct kn_node_row *rows = NULL;
	struct kn_error err = {0};
	char uuids[4][16];
	size_t n = 0;

	/* Given in reverse order; listed by index. */
	for (int i = 0; i < 4; i++) {
		snprintf(uuids[i], sizeof(uuids[i]), "GPU-%d", 3 - i);
		devs[i] = (struct kn_device_row){
			.node = (char *)"ignored", .index = 3 - i,
			.uuid = uuids[i], .model = (char *)"H100-80GB",
			.memory_bytes = 80LL << 30, .simulated = true,
		};
	}
	assert_int_equal(kn_store_node_put(fx->st, &node, &err), 0);
	assert_int_equal(kn_store_node_put(fx->st, &other, &err), 0);

	assert_int_equal(kn_store_node_list(fx->st, &rows, &n, &err), 0);
	assert_int_equal(n, 2);
	assert_string_equal(rows[0].name, "gpu-a");
	assert_string_equal(rows[0].state, "cordoned");
	assert_string_equal(rows[0].labels_json, "{}");
	assert_string_equal(rows[0].taints_json, "[]");
	assert_int_equal(rows[0].n_devices, 0);
	assert_null(rows[0].devices);
	assert_string_equal(rows[1].name, "gpu-b");
	assert_string_equal(rows[1].labels_json, "{\"zone\":\"1\"}");
	assert_int_equal(rows[1].cpu_milli, 96000);
	assert_int_equal(rows[1].memory_bytes, 1LL << 40);
	assert_true(rows[1].simulated);
	assert_int_equal(rows[1].n_devices, 4);
	for (int i = 0; i < 4; i++) {
		char want[16];
		snprintf(want, sizeof(want), "GPU-%d", i);
		assert_int_equal(rows[1].devices[i].index, i);
		assert_string_equal(rows[1].devices[i].uuid, want);
		assert_string_equal(rows[1].devices[i].node, "gpu-b");
		assert_string_equal(rows[1].devices[i].model, "H100-80GB");
		assert_int_equal(rows[1].devices[i].memory_bytes, 80LL << 30);
	}
	kn_node_list_free(rows, n);

	/* Put again with two devices and a new state: both replaced. */
	node.state = (char *)"draining";
	node.n_devices = 2;
	node.updated_at = 20;
	assert_int_equal(kn_store_node_put(fx->st, &node, &err), 0);
	assert_int_equal(kn_store_node_list(fx->st, &rows, &n, &err), 0);
	assert_int_equal(n, 2);
	assert_string_equal(rows[1].state, "draining");
	assert_int_equal(rows[1].updated_at, 20);
	assert_int_equal(rows[1].n_devices, 2);
	assert_int_equal(rows[1].devices[0].index, 2);
	assert_int_equal(rows[1].devices[1].index, 3);
	kn_node_row_release(&rows[1]);
	assert_null(rows[1].name);
	kn_node_list_free(rows, n);

	/* A device listed twice: conflict, and the node is left as it was. */
	devs[1].index = devs[0].index;
	node.state = (char *)"unhealthy";
	assert_int_equal(kn_store_node_put(fx->st, &node, &err), -EEXIST);
	assert_string_equal(err.field, "devices");
	assert_int_equal(kn_store_node_list(fx->st, &rows, &n, &err), 0);
	assert_string_equal(rows[1].state, "draining");
	assert_int_equal(rows[1].n_devices, 2);
	kn_node_list_free(rows, n);
}

/* ---- transactions ---- */

static void test_explicit_rollback(void **state)
{
	struct fixture *fx = *state;
	struct kn_job_row j = sample_job("gone", "alice");
	struct kn_audit a = sample_audit("alice", "job.submit", NULL, 0);
	struct kn_token_row t = {
		.name = (char *)"gone", .role = (char *)"user",
		.hash = (char *)"h", .created_by = (char *)"admin",
	};
	struct kn_job_row *rows = NULL;
	struct kn_error err = {0};
	size_t n = 0;
	int64_t id = 0;
	int count = -1;

	assert_int_equal(kn_store_begin(fx->st, &err), 0);
	assert_int_equal(kn_store_job_insert(fx->st, &j, &a, &id, &err), 0);
	/* A savepoint released into the transaction goes with it. */
	assert_int_equal(kn_store_begin(fx->st, &err), 0);
	assert_int_equal(kn_store_token_insert(fx->st, &t, &a, NULL, &err), 0);
	put_task(fx->st, id, 1, 0, KN_TASK_STARTING);
	assert_int_equal(kn_store_commit(fx->st, &err), 0);
	kn_store_rollback(fx->st);
	kn_store_rollback(fx->st); /* none open: nothing to do */

	assert_int_equal(kn_store_job_list(fx->st, NULL, &rows, &n, &err), 0);
	assert_int_equal(n, 0);
	assert_int_equal(audit_count(fx->st), 0);
	assert_int_equal(kn_store_token_count(fx->st, &count, &err), 0);
	assert_int_equal(count, 0);
	assert_int_equal(kn_store_commit(fx->st, &err), -EINVAL);
}

static void test_explicit_commit_burst(void **state)
{
	struct fixture *fx = *state;
	struct kn_job_filter f = {.state = -1, .active_only = true};
	struct kn_job_row *rows = NULL;
	struct kn_error err = {0};
	size_t n = 0;
	enum { BURST = 2000 };

	assert_int_equal(kn_store_begin(fx->st, &err), 0);
	for (int i = 0; i < BURST; i++) {
		struct kn_job_row j = sample_job("burst", "alice");
		struct kn_audit a = sample_audit("alice", "job.submit", NULL,
						 0);
		int64_t id = 0;

		assert_int_equal(kn_store_job_insert(fx->st, &j, &a, &id, &err),
				 0);
		assert_int_equal(id, i + 1);
	}
	assert_int_equal(kn_store_commit(fx->st, &err), 0);

	/* And update them all, one transaction each (the scheduler's way
	 * when it is not batching). */
	assert_int_equal(kn_store_job_list(fx->st, &f, &rows, &n, &err), 0);
	assert_int_equal(n, BURST);
	for (size_t i = 0; i < n; i += 10) {
		rows[i].state = KN_JOB_RUNNING;
		rows[i].started_at = 5;
		assert_int_equal(
			kn_store_job_update(fx->st, &rows[i], NULL, &err), 0);
	}
	kn_job_list_free(rows, n);

	f = (struct kn_job_filter){.state = KN_JOB_RUNNING};
	assert_int_equal(kn_store_job_list(fx->st, &f, &rows, &n, &err), 0);
	assert_int_equal(n, BURST / 10);
	kn_job_list_free(rows, n);
	assert_int_equal(audit_count(fx->st), BURST);
}

static void test_implicit_error_writes_no_audit(void **state)
{
	struct fixture *fx = *state;
	struct kn_token_row t = {
		.name = (char *)"alice", .role = (char *)"user",
		.hash = (char *)"h1", .created_by = (char *)"admin",
	};
	struct kn_audit a = sample_audit("admin", "token.create", NULL, 0);
	struct kn_audit *rows = NULL;
	struct kn_error err = {0};
	size_t n = 0;

	assert_int_equal(kn_store_token_insert(fx->st, &t, &a, NULL, &err), 0);
	t.hash = (char *)"h2";
	assert_int_equal(kn_store_token_insert(fx->st, &t, &a, NULL, &err),
			 -EEXIST);
	assert_int_equal(kn_store_audit_list(fx->st, NULL, &rows, &n, &err), 0);
	assert_int_equal(n, 1);
	assert_string_equal(rows[0].object, "token/alice");
	kn_audit_list_free(rows, n);

	/* An audit row that cannot be written undoes the change with it. */
	struct kn_job_row j = sample_job("x", "alice");
	struct kn_audit bad = sample_audit(NULL, "job.submit", NULL, 0);
	struct kn_job_row *jobs = NULL;
	int64_t id = 0;

	assert_int_equal(kn_store_job_insert(fx->st, &j, &bad, &id, &err),
			 -EINVAL);
	assert_int_equal(id, 0);
	assert_int_equal(kn_store_job_list(fx->st, NULL, &jobs, &n, &err), 0);
	assert_int_equal(n, 0);
	/* The store is usable afterwards, no transaction left open. */
	assert_int_equal(kn_store_begin(fx->st, &err), 0);
	kn_store_rollback(fx->st);
}

/* ---- names ---- */

static void test_state_names(void **state)
{
	static const char *const jobs[] = {"queued",    "running",
					   "succeeded", "failed",
					   "cancelled", "preempted"};
	(void)state;
	for (int i = 0; i < 6; i++) {
		assert_string_equal(kn_job_state_name((enum kn_job_state)i),
				    jobs[i]);
		assert_int_equal(kn_job_state_parse(jobs[i]), i);
	}
	assert_int_equal(kn_job_state_parse("paused"), -1);
	assert_int_equal(kn_job_state_parse(NULL), -1);
	assert_string_equal(kn_job_state_name((enum kn_job_state)9),
			    "unknown");
	assert_false(kn_job_state_terminal(KN_JOB_QUEUED));
	assert_false(kn_job_state_terminal(KN_JOB_RUNNING));
	assert_false(kn_job_state_terminal(KN_JOB_PREEMPTED));
	assert_true(kn_job_state_terminal(KN_JOB_SUCCEEDED));
	assert_true(kn_job_state_terminal(KN_JOB_FAILED));
	assert_true(kn_job_state_terminal(KN_JOB_CANCELLED));

	assert_string_equal(kn_task_state_name(KN_TASK_STARTING), "starting");
	assert_string_equal(kn_task_state_name(KN_TASK_RUNNING), "running");
	assert_string_equal(kn_task_state_name(KN_TASK_EXITED), "exited");
	assert_int_equal(kn_task_state_parse("exited"), KN_TASK_EXITED);
	assert_int_equal(kn_task_state_parse("queued"), -1);
}

static void test_alerts_fire_list_resolve(void **state)
{
	struct fixture *fx = *state;
	struct kn_alert_row a = {0}, *rows = NULL;
	struct kn_error err = {0};
	int64_t id1 = 0, id2 = 0;
	size_t n = 0;

	a.fingerprint = "Hot{gpu=\"0\"}";
	a.rule = "Hot";
	a.severity = "warning";
	a.labels_json = "{\"gpu\":\"0\"}";
	a.summary = "GPU 0 is hot";
	a.value = 91.5;
	a.active_at = 1000;
	a.fired_at = 2000;
	assert_int_equal(kn_store_alert_fire(fx->st, &a, &id1, &err), 0);
	a.fingerprint = "Hot{gpu=\"1\"}";
	a.fired_at = 3000;
	assert_int_equal(kn_store_alert_fire(fx->st, &a, &id2, &err), 0);
	assert_int_equal(id2, id1 + 1);
	assert_int_equal(kn_store_alert_resolve(fx->st, "Hot{gpu=\"0\"}", 5000,
						&err), 0);
	/* Resolving what is not firing does nothing and is no error. */
	assert_int_equal(kn_store_alert_resolve(fx->st, "nope", 5000, &err), 0);
	assert_int_equal(kn_store_alert_list(fx->st, 0, 10, &rows, &n, &err), 0);
	assert_int_equal(n, 2);
	assert_string_equal(rows[0].state, "firing"); /* firing first */
	assert_int_equal(rows[0].id, id2);
	assert_string_equal(rows[1].state, "resolved");
	assert_int_equal(rows[1].resolved_at, 5000);
	assert_true(rows[1].value == 91.5);
	assert_string_equal(rows[1].summary, "GPU 0 is hot");
	kn_alert_list_free(rows, n);
	/* Resolved before the window: only the firing one is listed. */
	assert_int_equal(kn_store_alert_list(fx->st, 6000, 10, &rows, &n, &err), 0);
	assert_int_equal(n, 1);
	kn_alert_list_free(rows, n);
	assert_int_equal(kn_store_alert_resolve_all(fx->st, 7000, &err), 0);
	assert_int_equal(kn_store_alert_list(fx->st, 6000, 10, &rows, &n, &err), 0);
	assert_int_equal(n, 1);
	assert_string_equal(rows[0].state, "resolved");
	assert_int_equal(rows[0].resolved_at, 7000);
	kn_alert_list_free(rows, n);
}

/* Dev environments' runs: started once, ends add up, listed by window. */
static void test_devenv_runs(void **state)
{
	struct fixture *fx = *state;
	struct kn_devenv_row d = {0}, next, *rows = NULL;
	struct kn_error err = {0};
	size_t n = 0;

	d.job_id = 7;
	d.owner = "alice";
	d.name = "box";
	d.gpu_milli = 1000;
	d.started_at = 1000;
	assert_int_equal(kn_store_devenv_start(fx->st, &d, &err), 0);
	/* Seen again after a restart: the first start stands. */
	d.started_at = 1500;
	assert_int_equal(kn_store_devenv_start(fx->st, &d, &err), 0);
	assert_int_equal(kn_store_devenv_end(fx->st, 7, 4000, 300, "", &err), 0);
	assert_int_equal(kn_store_devenv_end(fx->st, 7, 5000, 200, "idle",
					     &err), 0);
	d.job_id = 9;
	d.started_at = 9000;
	assert_int_equal(kn_store_devenv_start(fx->st, &d, &err), 0);
	assert_int_equal(kn_store_devenv_list(fx->st, 0, 10000, &rows, &n,
					      &err), 0);
	assert_int_equal(n, 2);
	assert_int_equal(rows[0].job_id, 7);
	assert_int_equal(rows[0].started_at, 1000);
	assert_int_equal(rows[0].ended_at, 5000);
	assert_int_equal(rows[0].idle_ms, 500);
	assert_string_equal(rows[0].stop, "idle");
	assert_int_equal(rows[1].ended_at, 0); /* still running */
	kn_devenv_rows_free(rows, n);
	/* Ended before the window: only the running one overlaps it. */
	assert_int_equal(kn_store_devenv_list(fx->st, 6000, 10000, &rows, &n,
					      &err), 0);
	assert_int_equal(n, 1);
	kn_devenv_rows_free(rows, n);
	assert_int_equal(kn_store_devenv_next(fx->st, "alice", "box", 1000,
					      &next, &err), 0);
	assert_int_equal(next.job_id, 9);
	kn_devenv_row_release(&next);
	assert_int_equal(kn_store_devenv_next(fx->st, "bob", "box", 0, &next,
					      &err), -ENOENT);
}

/* Deployments: put replaces, replicas follow, delete cascades, audited. */
KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test_setup_teardown(
		test_open_creates_private_wal_file, setup_store,
		teardown),
	cmocka_unit_test_setup_teardown(test_devenv_runs, setup_store,
					teardown),
	cmocka_unit_test_setup_teardown(test_alerts_fire_list_resolve,
					setup_store, teardown),
	cmocka_unit_test_setup_teardown(test_reopen_keeps_data,
					setup_store, teardown),
	cmocka_unit_test_setup_teardown(test_newer_version_refused,
					setup_dir, teardown),
	cmocka_unit_test_setup_teardown(test_not_a_database_refused,
					setup_dir, teardown),
	cmocka_unit_test_setup_teardown(test_open_missing_directory,
					setup_dir, teardown),
	cmocka_unit_test_setup_teardown(test_job_insert_writes_audit,
					setup_store, teardown),
	cmocka_unit_test_setup_teardown(test_job_get_not_found,
					setup_store, teardown),
	cmocka_unit_test_setup_teardown(test_job_update_round_trip,
					setup_store, teardown),
	cmocka_unit_test_setup_teardown(test_job_insert_array, setup_store,
					teardown),
	cmocka_unit_test_setup_teardown(test_job_list_filters,
					setup_store, teardown),
	cmocka_unit_test_setup_teardown(test_job_list_pages,
					setup_store, teardown),
	cmocka_unit_test_setup_teardown(test_attempt_put_and_list,
					setup_store, teardown),
	cmocka_unit_test_setup_teardown(test_job_totals_and_commit_watch,
					setup_store, teardown),
	cmocka_unit_test_setup_teardown(test_attempt_goodput_round_trip,
					setup_store, teardown),
	cmocka_unit_test_setup_teardown(test_outputs, setup_store,
					teardown),
	cmocka_unit_test_setup_teardown(test_task_put_and_list,
					setup_store, teardown),
	cmocka_unit_test_setup_teardown(test_tokens, setup_store,
					teardown),
	cmocka_unit_test_setup_teardown(test_token_last_used_throttled,
					setup_store, teardown),
	cmocka_unit_test_setup_teardown(test_audit_list, setup_store,
					teardown),
	cmocka_unit_test_setup_teardown(test_node_put_replaces_devices,
					setup_store, teardown),
	cmocka_unit_test_setup_teardown(test_explicit_rollback,
					setup_store, teardown),
	cmocka_unit_test_setup_teardown(test_explicit_commit_burst,
					setup_store, teardown),
	cmocka_unit_test_setup_teardown(
		test_implicit_error_writes_no_audit, setup_store,
		teardown),
	cmocka_unit_test(test_state_names),
	cmocka_unit_test_setup_teardown(test_job_inputs, setup_store,
					teardown))
