/*
 * Unit tests for the store's shared layer: every statement's result
 * columns match the column table its rows are read through (by name and
 * order), a drifted table is caught, and a file at any older schema
 * version upgrades on open with its rows intact.
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
#include <unistd.h>

#include <sqlite3.h>

#include "base/base.h"
#include "base/tests/testmain.h"
#include "store/internal.h"
#include "store_fixture.h"

/* ---- column tables ---- */

static void test_every_statement_matches_its_table(void **state)
{
	struct fixture *fx = *state;
	struct kn_store *st = NULL;
	struct kn_error err = {0};
	size_t checked = 0;

	assert_int_equal(kn_store_open(fx->path, &st, &err), 0);
	assert_int_equal(store_check_columns(st, &err), 0);
	/* The same, spelled out: each result column is its table's entry. */
	for (size_t f = 0; store_families[f]; f++) {
		for (const struct store_stmt *d = store_families[f]; d->sql;
		     d++) {
			sqlite3_stmt *s = st->stmt[d->id];

			/* A write binds from its table and returns nothing. */
			if (!d->row || sqlite3_column_count(s) == 0)
				continue;
			assert_int_equal(sqlite3_column_count(s),
					 (int)d->row->n_cols);
			for (size_t i = 0; i < d->row->n_cols; i++)
				assert_string_equal(
					sqlite3_column_name(s, (int)i),
					d->row->cols[i].name);
			checked++;
		}
	}
	/* Every list and get reads through a table: about 35 of them. */
	assert_true(checked >= 30);
	kn_store_free(st);
}

struct pair {
	int64_t id;
	char *name;
	int small;
};

/* Tables over struct pair, right and drifted (file scope: a table's
   columns are a compound literal, constant only here). */
#define PAIR_ID STORE_COL_AS(struct pair, id, "id", STORE_INT)
#define PAIR_NAME STORE_COL_AS(struct pair, name, "name", STORE_TEXT)
static const struct store_row good_row =
	STORE_ROW(struct pair, "pair", PAIR_ID, PAIR_NAME);
static const struct store_row swapped_row =
	STORE_ROW(struct pair, "pair", PAIR_NAME, PAIR_ID);
static const struct store_row short_row =
	STORE_ROW(struct pair, "pair", PAIR_ID);
static const struct store_row size_row =
	STORE_ROW(struct pair, "pair", PAIR_ID,
		  STORE_COL_AS(struct pair, small, "name", STORE_TEXT));

/* store_check_row or store_check_params: a statement against a table. */
typedef int (*stmt_check)(sqlite3_stmt *s, const struct store_row *row,
			  struct kn_error *err);

/* check's answer on sql, prepared over a table t (id, name). */
static void check_stmt(stmt_check check, const char *sql,
		       const struct store_row *row, int want,
		       const char *want_message)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *s = NULL;
	struct kn_error err = {0};

	assert_int_equal(sqlite3_open(":memory:", &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, "CREATE TABLE t (id, name)", NULL,
				      NULL, NULL),
			 SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
	assert_int_equal(check(s, row, &err), want);
	if (want_message)
		assert_non_null(strstr(err.message, want_message));
	sqlite3_finalize(s);
	sqlite3_close(db);
}

static void test_drifted_table_caught(void **state)
{
	(void)state;
	check_stmt(store_check_row, "SELECT id, name FROM t", &good_row, 0,
		   NULL);
	/* A select list reordered under its table. */
	check_stmt(store_check_row, "SELECT name, id FROM t", &good_row, -EIO,
		   "column 0 is name, its pair table reads id there");
	check_stmt(store_check_row, "SELECT id, name FROM t", &swapped_row,
		   -EIO, "column 0 is id");
	/* A column added to the select list and not to the table. */
	check_stmt(store_check_row, "SELECT id, name FROM t", &short_row, -EIO,
		   "returns 2 columns, its pair table reads 1");
	/* An expression without a name. */
	check_stmt(store_check_row, "SELECT id, upper(name) FROM t", &good_row,
		   -EIO, "column 1 is upper(name)");
	/* A field whose size is not its type's (text into an int). */
	check_stmt(store_check_row, "SELECT id, name FROM t", &size_row, -EIO,
		   "name has a field of 4 bytes");
}

/* A :name parameter binds from the field of that name, or open fails. */
static void test_drifted_params_caught(void **state)
{
	(void)state;
	check_stmt(store_check_params,
		   "INSERT INTO t (id, name) VALUES (:id, :name)", &good_row,
		   0, NULL);
	/* ?N parameters are the caller's, with or without a table. */
	check_stmt(store_check_params,
		   "UPDATE t SET name = :name WHERE id = ?1", &good_row, 0,
		   NULL);
	check_stmt(store_check_params, "DELETE FROM t WHERE id = ?1", NULL, 0,
		   NULL);
	/* A misspelt parameter would bind NULL unnoticed. */
	check_stmt(store_check_params,
		   "INSERT INTO t (id, name) VALUES (:id, :nmae)", &good_row, -EIO,
		   "parameter :nmae is no column of its pair table");
	check_stmt(store_check_params, "DELETE FROM t WHERE id = :id", NULL,
		   -EIO, "names parameter :id but has no table");
}

/* A column's type follows its field's C type. */
static void test_column_type_from_field(void **state)
{
	static const struct {
		struct store_col col;
		enum store_col_type want;
	} cases[] = {
		{STORE_COL(struct kn_job_row, id), STORE_INT},
		{STORE_COL(struct kn_job_row, priority), STORE_INT},
		{STORE_COL(struct kn_job_row, cancel_requested), STORE_INT},
		{STORE_COL(struct kn_job_row, name), STORE_TEXT},
		{STORE_COL(struct kn_job_row, state), STORE_JOB_STATE},
		{STORE_COL(struct kn_task_row, state), STORE_TASK_STATE},
		{STORE_COL(struct kn_alert_row, value), STORE_REAL},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_int_equal(cases[i].col.type, cases[i].want);
	assert_string_equal(cases[0].col.name, "id");
}

/* A state outside its enum is refused by name before anything is bound. */
static void test_bad_state_not_written(void **state)
{
	struct fixture *fx = *state;
	struct kn_store *st = NULL;
	struct kn_error err = {0};
	struct kn_job_row j = {.name = "j", .owner = "alice", .tasks = 1};
	struct kn_task_row t = {.job_id = 1, .attempt = 1};
	int64_t id = 0;

	assert_int_equal(kn_store_open(fx->path, &st, &err), 0);
	assert_int_equal(kn_store_job_insert(st, &j, NULL, &id, &err), 0);
	j.id = id;
	j.state = (enum kn_job_state)-1;
	assert_int_equal(kn_store_job_update(st, &j, NULL, &err), -EINVAL);
	assert_string_equal(err.field, "state");
	assert_string_equal(err.message, "unknown job state -1");
	t.state = (enum kn_task_state)7;
	assert_int_equal(kn_store_task_put(st, &t, &err), -EINVAL);
	assert_string_equal(err.message, "unknown task state 7");
	/* Nothing stayed bound: the next write of the statement is whole. */
	t.state = KN_TASK_RUNNING;
	t.node = "n1";
	assert_int_equal(kn_store_task_put(st, &t, &err), 0);
	kn_store_free(st);
}

/* An unknown state names the row by its key and leaves nothing behind. */
static void test_bad_state_names_row(void **state)
{
	struct fixture *fx = *state;
	struct kn_store *st = NULL;
	struct kn_error err = {0};
	struct kn_job_row j = {0};
	sqlite3 *db = NULL;

	assert_int_equal(kn_store_open(fx->path, &st, &err), 0);
	assert_int_equal(sqlite3_open(fx->path, &db), SQLITE_OK);
	assert_int_equal(
		sqlite3_exec(db,
			     "INSERT INTO jobs (id, name, owner, state,"
			     " priority, tasks, submitted_at, started_at,"
			     " ended_at, not_before, attempts, retries_used,"
			     " cancel_requested, exit_code) VALUES (7, 'x',"
			     " 'alice', 'bogus', 0, 1, 0, 0, 0, 0, 0, 0, 0,"
			     " -1)",
			     NULL, NULL, NULL),
		SQLITE_OK);
	sqlite3_close(db);
	assert_int_equal(kn_store_job_get(st, 7, &j, &err), -EIO);
	assert_string_equal(err.message,
			    "store: job 7 has unknown state 'bogus'");
	assert_null(j.name);
	kn_store_free(st);
}

/* ---- migrations ---- */

/* A file as a kiln of schema version v left it, with one job in it. */
static void write_old_file(const char *path, int v)
{
	sqlite3 *db = NULL;
	char *sql;

	unlink(path);
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	for (int i = 0; i < v; i++)
		assert_int_equal(sqlite3_exec(db, store_migrations[i], NULL,
					      NULL, NULL),
				 SQLITE_OK);
	sql = kn_asprintf(
		"INSERT INTO jobs (name, owner, state, priority, tasks,"
		" filename, submitted_at, started_at, ended_at, not_before,"
		" attempts, retries_used, cancel_requested, reason,"
		" exit_code, spec_yaml, spec_json) VALUES ('old-%d', 'alice',"
		" 'succeeded', 5, 1, 'a.yaml', 100, 110, 120, 0, 1, 0, 0,"
		" NULL, 0, 'kind: Job', '{}');"
		"INSERT INTO attempts (job_id, number, state, started_at,"
		" ended_at, exit_code, signal, reason) VALUES (1, 1,"
		" 'succeeded', 110, 120, 0, 0, NULL);"
		"PRAGMA user_version = %d",
		v, v);
	assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
	free(sql);
	sqlite3_close(db);
}

static void test_old_files_upgrade(void **state)
{
	struct fixture *fx = *state;

	for (int v = 1; v < KN_STORE_SCHEMA_VERSION; v++) {
		struct kn_store *st = NULL;
		struct kn_error err = {0};
		struct kn_job_row j = {0};
		struct kn_attempt_row *attempts = NULL;
		struct kn_job_input_row in = {
			.job_id = 1, .name = "data", .url = "file:///d",
			.sha256 = "00", .size = 1, .attempt = 1,
		};
		struct kn_revalidation_row *revals = NULL;
		size_t n = 0;
		char want[16];

		write_old_file(fx->path, v);
		assert_int_equal(kn_store_open(fx->path, &st, &err), 0);
		/* The job written at version v reads the same now. */
		assert_int_equal(kn_store_job_get(st, 1, &j, &err), 0);
		snprintf(want, sizeof(want), "old-%d", v);
		assert_string_equal(j.name, want);
		assert_int_equal(j.state, KN_JOB_SUCCEEDED);
		assert_int_equal(j.priority, 5);
		assert_string_equal(j.spec_yaml, "kind: Job");
		kn_job_row_release(&j);
		/* Columns added later read as their defaults. */
		assert_int_equal(kn_store_attempt_list(st, 1, &attempts, &n,
						       &err),
				 0);
		assert_int_equal(n, 1);
		assert_null(attempts[0].checkpoint);
		assert_int_equal(attempts[0].useful_ms, 0);
		kn_attempt_list_free(attempts, n);
		/* The newest tables are there and every statement prepared. */
		assert_int_equal(kn_store_job_input_put(st, &in, &err), 0);
		assert_int_equal(kn_store_revalidation_list(st, &revals, &n,
							    &err),
				 0);
		assert_int_equal(n, 0);
		kn_revalidation_list_free(revals, n);
		assert_int_equal(store_check_columns(st, &err), 0);
		kn_store_free(st);
	}
}

/* ---- plans ---- */

/*
 * Opening a node's state interval closes its last one by the node's
 * name: a search of one node's open interval, not of every open one
 * (which made start-up with thousands of nodes quadratic).
 */
static void test_node_state_close_searches_one_node(void **state)
{
	struct fixture *fx = *state;
	char *sql = kn_asprintf(
		"EXPLAIN QUERY PLAN %s",
		sqlite3_sql(fx->st->stmt[STMT_NODE_STATE_CLOSE]));
	sqlite3_stmt *s = NULL;
	bool by_node = false;

	assert_int_equal(sqlite3_prepare_v2(fx->st->db, sql, -1, &s, NULL),
			 SQLITE_OK);
	while (sqlite3_step(s) == SQLITE_ROW) {
		const char *detail = (const char *)sqlite3_column_text(s, 3);

		assert_null(strstr(detail, "SCAN"));
		if (strstr(detail, "node_states_open (node=?)"))
			by_node = true;
	}
	assert_true(by_node);
	sqlite3_finalize(s);
	free(sql);
}

/* ---- a full disk ---- */

/*
 * SQLITE_FULL (here from max_page_count, as from a full disk) is a 507
 * insufficient_storage naming the cause, and writes go on once there is
 * room, on the same connection.
 */
static void test_full_database_is_insufficient_storage(void **state)
{
	struct fixture *fx = *state;
	struct kn_job_row j = sample_job("filler", "alice");
	struct kn_error err = {0};
	char *big = kn_xcalloc(64 * 1024 + 1, 1);
	int64_t id = 0;
	int rc = 0;

	memset(big, 'x', 64 * 1024);
	j.spec_yaml = big;
	/* No more pages than it has now (SQLite keeps at least those). */
	assert_int_equal(sqlite3_exec(fx->st->db, "PRAGMA max_page_count = 1",
				      NULL, NULL, NULL), SQLITE_OK);
	for (int i = 0; i < 4 && rc == 0; i++)
		rc = kn_store_job_insert(fx->st, &j, NULL, &id, &err);
	assert_int_equal(rc, -ENOSPC);
	assert_int_equal(err.code, KN_ENOSPACE);
	assert_int_equal(kn_errcode_http(err.code), 507);
	assert_string_equal(kn_errcode_name(err.code), "insufficient_storage");
	assert_non_null(strstr(err.message, "no space left"));
	assert_int_equal(sqlite3_exec(fx->st->db,
				      "PRAGMA max_page_count = 1000000", NULL,
				      NULL, NULL), SQLITE_OK);
	assert_int_equal(kn_store_job_insert(fx->st, &j, NULL, &id, &err), 0);
	free(big);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test_setup_teardown(
		test_every_statement_matches_its_table, setup_dir,
		teardown),
	cmocka_unit_test(test_drifted_table_caught),
	cmocka_unit_test(test_drifted_params_caught),
	cmocka_unit_test(test_column_type_from_field),
	cmocka_unit_test_setup_teardown(test_bad_state_not_written,
					setup_dir, teardown),
	cmocka_unit_test_setup_teardown(test_bad_state_names_row,
					setup_dir, teardown),
	cmocka_unit_test_setup_teardown(test_old_files_upgrade,
					setup_dir, teardown),
	cmocka_unit_test_setup_teardown(
		test_node_state_close_searches_one_node, setup_store,
		teardown),
	cmocka_unit_test_setup_teardown(
		test_full_database_is_insufficient_storage,
		setup_store, teardown))
