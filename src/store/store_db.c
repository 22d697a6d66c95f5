/*
 * store: kiln's state in one SQLite file, and every SQL statement kiln runs.
 * This file is the shared layer: opening and migrating the file, the named
 * statements, transactions, bind helpers and the reader that turns result
 * rows into structs through their column tables (internal.h). The tables
 * themselves are served one family per file: store_jobs.c, store_nodes.c,
 * store_deploy.c, store_ledger.c, store_models.c, store_workflows.c,
 * store_alerts.c, store_tokens.c, store_audit.c.
 *
 * Shape (after flux's content-sqlite): each statement is a named constant,
 * prepared once in kn_store_open into st->stmt[] and then only bound,
 * stepped and reset, so the server's burst of a few thousand job inserts
 * never pays for parsing SQL. The alternative, sqlite3_prepare per call,
 * costs more than the insert itself for rows this small.
 *
 * Invariants:
 * - Every statement is reset and its bindings cleared before the function
 *   that used it returns, so no read transaction outlives a call and no
 *   binding points at caller memory afterwards.
 * - A write call that finds no transaction open runs in its own
 *   BEGIN IMMEDIATE ... COMMIT, audit row included, and rolls back on any
 *   error; inside kn_store_begin it only executes, and the caller owns the
 *   rollback. A single-statement write without an audit row relies on
 *   SQLite's own statement atomicity instead.
 * - The schema moves forward only, through store_migrations[]
 *   (store_schema.c), one entry per version, applied in one transaction;
 *   user_version records where a file stands.
 * - States are stored as their API names, not enum numbers, so the file
 *   reads the same under sqlite3(1) and survives reordering of the enums.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/*
 * How long a write waits for another connection's lock (a CLI tool reading
 * the file, a second server refused later) before failing with "database
 * is locked".
 */
#define STORE_BUSY_TIMEOUT_MS 5000

/* A one-value query's (or PRAGMA's) answer is its only column. */
#define STORE_ONLY_COLUMN 0

static const char SQL_BEGIN[] = "BEGIN IMMEDIATE";
static const char SQL_COMMIT[] = "COMMIT";
static const char SQL_ROLLBACK[] = "ROLLBACK";
/* A begin inside an open transaction: one name, as savepoints stack. */
static const char SQL_SAVEPOINT[] = "SAVEPOINT nested";
static const char SQL_RELEASE[] = "RELEASE nested";
static const char SQL_ROLLBACK_TO[] = "ROLLBACK TO nested";

const struct store_stmt store_db_stmts[] = {
	STORE_STMT(STMT_BEGIN, SQL_BEGIN, NULL),
	STORE_STMT(STMT_COMMIT, SQL_COMMIT, NULL),
	STORE_STMT(STMT_ROLLBACK, SQL_ROLLBACK, NULL),
	STORE_STMT(STMT_SAVEPOINT, SQL_SAVEPOINT, NULL),
	STORE_STMT(STMT_RELEASE, SQL_RELEASE, NULL),
	STORE_STMT(STMT_ROLLBACK_TO, SQL_ROLLBACK_TO, NULL),
	{0},
};

#define STORE_FAMILY(family) store_##family##_stmts,
const struct store_stmt *const store_families[] = {
	STORE_FAMILIES(STORE_FAMILY) NULL,
};
#undef STORE_FAMILY

/* ---- state names ---- */

static const char *const JOB_STATE_NAMES[] = {
	[KN_JOB_QUEUED] = "queued",       [KN_JOB_RUNNING] = "running",
	[KN_JOB_SUCCEEDED] = "succeeded", [KN_JOB_FAILED] = "failed",
	[KN_JOB_CANCELLED] = "cancelled", [KN_JOB_PREEMPTED] = "preempted",
};
#define N_JOB_STATES (sizeof(JOB_STATE_NAMES) / sizeof(JOB_STATE_NAMES[0]))

static const char *const TASK_STATE_NAMES[] = {
	[KN_TASK_STARTING] = "starting",
	[KN_TASK_RUNNING] = "running",
	[KN_TASK_EXITED] = "exited",
};
#define N_TASK_STATES (sizeof(TASK_STATE_NAMES) / sizeof(TASK_STATE_NAMES[0]))

bool store_job_state_valid(enum kn_job_state s)
{
	return (unsigned)s < N_JOB_STATES;
}

bool store_task_state_valid(enum kn_task_state s)
{
	return (unsigned)s < N_TASK_STATES;
}

const char *kn_job_state_name(enum kn_job_state s)
{
	return store_job_state_valid(s) ? JOB_STATE_NAMES[s] : "unknown";
}

/* The index of name in names[n], or -1. */
static int state_parse(const char *const *names, size_t n, const char *name)
{
	for (size_t i = 0; name && i < n; i++)
		if (strcmp(name, names[i]) == 0)
			return (int)i;
	return -1;
}

int kn_job_state_parse(const char *name)
{
	return state_parse(JOB_STATE_NAMES, N_JOB_STATES, name);
}

bool kn_job_state_terminal(enum kn_job_state s)
{
	return s == KN_JOB_SUCCEEDED || s == KN_JOB_FAILED ||
	       s == KN_JOB_CANCELLED;
}

const char *kn_task_state_name(enum kn_task_state s)
{
	return store_task_state_valid(s) ? TASK_STATE_NAMES[s] : "unknown";
}

int kn_task_state_parse(const char *name)
{
	return state_parse(TASK_STATE_NAMES, N_TASK_STATES, name);
}

/* ---- statement helpers ---- */

/*
 * Fill err from the connection's last error. Constraint failures map to
 * the API's codes so a caller that does not refine the message still
 * answers 409/404/400 rather than 500, and a full disk to 507.
 */
int store_db_fail(struct kn_store *st, int rc, const char *what,
		   struct kn_error *err)
{
	enum kn_errcode code = KN_EIO;

	switch (rc) {
	case SQLITE_CONSTRAINT_UNIQUE:
	case SQLITE_CONSTRAINT_PRIMARYKEY:
		code = KN_ECONFLICT;
		break;
	case SQLITE_CONSTRAINT_FOREIGNKEY:
		code = KN_ENOTFOUND;
		break;
	case SQLITE_CONSTRAINT_NOTNULL:
	case SQLITE_CONSTRAINT_CHECK:
		code = KN_EINVAL;
		break;
	default:
		break;
	}
	/* A full disk is the operator's to fix, not kiln's fault: 507, and
	   the write succeeds again by itself once there is room. */
	if ((rc & 0xff) == SQLITE_FULL ||
	    ((rc & 0xff) == SQLITE_IOERR &&
	     kn_errcode_for_write(-sqlite3_system_errno(st->db)) ==
		     KN_ENOSPACE))
		return kn_errorf(err, KN_ENOSPACE, NULL,
				 "store: %s: no space left on the disk that "
				 "holds the database (%s); free some and retry",
				 what, sqlite3_errmsg(st->db));
	return kn_errorf(err, code, NULL, "store: %s: %s", what,
			 sqlite3_errmsg(st->db));
}

void stmt_done(sqlite3_stmt *s)
{
	sqlite3_reset(s);
	sqlite3_clear_bindings(s);
}

int bind_fail(struct kn_store *st, sqlite3_stmt *s, const char *what,
		     struct kn_error *err)
{
	int rc = store_db_fail(st, sqlite3_extended_errcode(st->db), what, err);
	stmt_done(s);
	return rc;
}

static void group_yield(struct kn_store *st);

int store_run(struct kn_store *st, sqlite3_stmt *s, const char *what,
	       struct kn_error *err)
{
	int rc, ret = 0;

	if (!sqlite3_stmt_readonly(s))
		group_yield(st);
	rc = sqlite3_step(s);

	if (rc != SQLITE_DONE && rc != SQLITE_ROW)
		ret = store_db_fail(st, rc, what, err);
	stmt_done(s);
	return ret;
}

/*
 * Step a query: 1 with a row ready, 0 when done, or a negative errno with
 * err filled. The caller resets the statement.
 */
int step_row(struct kn_store *st, sqlite3_stmt *s, const char *what,
		    struct kn_error *err)
{
	int rc;

	if (!sqlite3_stmt_readonly(s))
		group_yield(st);
	rc = sqlite3_step(s);

	if (rc == SQLITE_ROW)
		return 1;
	if (rc == SQLITE_DONE)
		return 0;
	return store_db_fail(st, rc, what, err);
}

/*
 * Caller strings are bound SQLITE_STATIC: they outlive the step, and
 * stmt_done clears the bindings before the call returns.
 */
int bind_text(sqlite3_stmt *s, int i, const char *v)
{
	return v ? sqlite3_bind_text(s, i, v, -1, SQLITE_STATIC)
		 : sqlite3_bind_null(s, i);
}

int bind_i64(sqlite3_stmt *s, int i, int64_t v)
{
	return sqlite3_bind_int64(s, i, v);
}


/* ---- reading rows through column tables ---- */

/* A row with a bad state is named by its first column: id or job id. */
#define STORE_KEY_COLUMN 0

static void put_int(void *field, size_t size, int64_t v)
{
	if (size == sizeof(int64_t)) {
		int64_t w = v;
		memcpy(field, &w, sizeof(w));
	} else if (size == sizeof(int)) {
		int w = (int)v;
		memcpy(field, &w, sizeof(w));
	} else {
		bool w = v != 0;
		memcpy(field, &w, sizeof(w));
	}
}

/* A state column: its enum value, or -1 when the name is unknown. */
static int state_value(enum store_col_type type, const char *name)
{
	if (type == STORE_TASK_STATE)
		return kn_task_state_parse(name);
	return kn_job_state_parse(name);
}

int store_read_row(sqlite3_stmt *s, const struct store_row *def, void *row,
		   struct kn_error *err)
{
	memset(row, 0, def->size);
	for (size_t i = 0; i < def->n_cols; i++) {
		const struct store_col *c = &def->cols[i];
		void *field = (char *)row + c->offset;
		int col = (int)i;
		const char *text = NULL;
		char *copy;
		double real;
		int state;

		/* Text only where wanted: it would format every number. */
		if (c->type != STORE_INT && c->type != STORE_REAL)
			text = (const char *)sqlite3_column_text(s, col);
		switch (c->type) {
		case STORE_INT:
			put_int(field, c->size, sqlite3_column_int64(s, col));
			break;
		case STORE_REAL:
			real = sqlite3_column_double(s, col);
			memcpy(field, &real, sizeof(real));
			break;
		case STORE_TEXT:
			copy = text ? kn_xstrdup(text) : NULL;
			memcpy(field, &copy, sizeof(copy));
			break;
		case STORE_JOB_STATE_OR_NONE:
			put_int(field, c->size,
				text ? kn_job_state_parse(text) : -1);
			break;
		case STORE_JOB_STATE:
		case STORE_TASK_STATE:
			state = state_value(c->type, text);
			if (state < 0) {
				store_row_release(def, row);
				return kn_errorf(
					err, KN_EIO, "state",
					"store: %s %" PRId64
					" has unknown state '%s'",
					def->kind,
					(int64_t)sqlite3_column_int64(
						s, STORE_KEY_COLUMN),
					text ? text : "");
			}
			put_int(field, c->size, state);
			break;
		}
	}
	return 0;
}

void store_row_release(const struct store_row *def, void *row)
{
	if (!row)
		return;
	for (size_t i = 0; i < def->n_cols; i++) {
		char *text;

		if (def->cols[i].type != STORE_TEXT)
			continue;
		memcpy(&text, (char *)row + def->cols[i].offset, sizeof(text));
		free(text);
	}
	memset(row, 0, def->size);
}

void store_rows_free(const struct store_row *def, void *rows, size_t n)
{
	for (size_t i = 0; rows && i < n; i++)
		store_row_release(def, (char *)rows + i * def->size);
	free(rows);
}

int store_list(struct kn_store *st, sqlite3_stmt *s,
	       const struct store_row *def, const char *what, void *out,
	       size_t *n, struct kn_error *err)
{
	char *rows = NULL;
	size_t count = 0, alloc = 0;
	int rc;

	while ((rc = step_row(st, s, what, err)) == 1) {
		rows = kn_xgrow(rows, &alloc, count, def->size);
		rc = store_read_row(s, def, rows + count * def->size, err);
		if (rc < 0)
			break;
		count++;
	}
	stmt_done(s);
	if (rc < 0) {
		store_rows_free(def, rows, count);
		return rc;
	}
	/* out is the caller's T **: store the array through it. */
	memcpy(out, &rows, sizeof(rows));
	*n = count;
	return 0;
}

int store_get(struct kn_store *st, sqlite3_stmt *s,
	      const struct store_row *def, const char *what, void *row,
	      struct kn_error *err)
{
	int rc = step_row(st, s, what, err);
	int read;

	if (rc == 1) {
		read = store_read_row(s, def, row, err);
		if (read < 0)
			rc = read;
	}
	stmt_done(s);
	return rc;
}

int store_one_i64(struct kn_store *st, enum stmt_id id,
		  const struct store_key *keys, size_t n_keys, const char *what,
		  int64_t *out, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[id];
	int rc = store_bind_keys(st, s, keys, n_keys, what, err);

	if (rc < 0)
		return rc;
	rc = step_row(st, s, what, err);
	if (rc == 1)
		*out = sqlite3_column_int64(s, STORE_ONLY_COLUMN);
	stmt_done(s);
	return rc;
}

int store_one_text(struct kn_store *st, enum stmt_id id,
		   const struct store_key *keys, size_t n_keys,
		   const char *what, char **out, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[id];
	int rc = store_bind_keys(st, s, keys, n_keys, what, err);

	if (rc < 0)
		return rc;
	rc = step_row(st, s, what, err);

	if (rc == 1) {
		const char *t =
			(const char *)sqlite3_column_text(s, STORE_ONLY_COLUMN);
		*out = t ? kn_xstrdup(t) : NULL;
	}
	stmt_done(s);
	return rc;
}

int store_found(int rc, struct kn_error *err, const char *field,
		const char *fmt, ...)
{
	char message[sizeof(((struct kn_error *)0)->message)];
	va_list ap;

	if (rc != 0)
		return rc < 0 ? rc : 0;
	va_start(ap, fmt);
	vsnprintf(message, sizeof(message), fmt, ap);
	va_end(ap);
	return kn_errorf(err, KN_ENOTFOUND, field, "%s", message);
}

/* ---- binding rows through column tables ---- */

/* put_int's inverse: an int64_t, int or bool field by its size. */
static int64_t get_int(const void *field, size_t size)
{
	int64_t wide;
	int narrow;
	bool flag;

	if (size == sizeof(int64_t)) {
		memcpy(&wide, field, sizeof(wide));
		return wide;
	}
	if (size == sizeof(int)) {
		memcpy(&narrow, field, sizeof(narrow));
		return narrow;
	}
	memcpy(&flag, field, sizeof(flag));
	return flag;
}

/* The column of def called name, or NULL. */
static const struct store_col *col_named(const struct store_row *def,
					 const char *name)
{
	for (size_t i = 0; i < def->n_cols; i++)
		if (strcmp(def->cols[i].name, name) == 0)
			return &def->cols[i];
	return NULL;
}

/* A state field's name, or NULL when its value names no state. */
static const char *state_name(const struct store_col *c, const void *field)
{
	int64_t value = get_int(field, c->size);

	if (c->type == STORE_TASK_STATE)
		return store_task_state_valid(value) ? kn_task_state_name(value)
						     : NULL;
	return store_job_state_valid(value) ? kn_job_state_name(value) : NULL;
}

/* Bind parameter i from c's field of row: an SQLite code. */
static int bind_col(sqlite3_stmt *s, int i, const struct store_col *c,
		    const void *row)
{
	const void *field = (const char *)row + c->offset;
	const char *text;
	double real;

	switch (c->type) {
	case STORE_INT:
		return bind_i64(s, i, get_int(field, c->size));
	case STORE_REAL:
		memcpy(&real, field, sizeof(real));
		return sqlite3_bind_double(s, i, real);
	case STORE_TEXT:
		memcpy(&text, field, sizeof(text));
		return bind_text(s, i, text);
	case STORE_JOB_STATE:
	case STORE_TASK_STATE:
	case STORE_JOB_STATE_OR_NONE:
		return bind_text(s, i, state_name(c, field));
	}
	return SQLITE_MISUSE;
}

int store_bind_row(struct kn_store *st, enum stmt_id id, const void *row,
		   const char *what, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[id];
	const struct store_row *def = st->row[id];
	int n = sqlite3_bind_parameter_count(s);

	for (int i = 1; i <= n; i++) {
		const char *name = sqlite3_bind_parameter_name(s, i);
		const struct store_col *c;
		const void *field;

		if (!name || name[0] != ':')
			continue; /* ?N: the caller's */
		/* store_check_params made every :name a column's. */
		c = col_named(def, name + 1);
		field = (const char *)row + c->offset;
		if ((c->type == STORE_JOB_STATE ||
		     c->type == STORE_TASK_STATE) &&
		    !state_name(c, field)) {
			stmt_done(s);
			return kn_errorf(
				err, KN_EINVAL, c->name, "unknown %s state %d",
				c->type == STORE_TASK_STATE ? "task" : "job",
				(int)get_int(field, c->size));
		}
		if (bind_col(s, i, c, row) != SQLITE_OK)
			return bind_fail(st, s, what, err);
	}
	return 0;
}

/* Bind k to parameter at: an SQLite code. */
static int bind_key(sqlite3_stmt *s, int at, const struct store_key *k)
{
	switch (k->type) {
	case STORE_TEXT:
		return bind_text(s, at, k->text);
	case STORE_REAL:
		return sqlite3_bind_double(s, at, k->real);
	default:
		return bind_i64(s, at, k->i64);
	}
}

int store_bind_keys(struct kn_store *st, sqlite3_stmt *s,
		    const struct store_key *keys, size_t n_keys,
		    const char *what, struct kn_error *err)
{
	for (size_t i = 0; i < n_keys; i++)
		if (bind_key(s, (int)i + 1, &keys[i]) != SQLITE_OK)
			return bind_fail(st, s, what, err);
	return 0;
}

int store_run_keyed(struct kn_store *st, enum stmt_id id,
		    const struct store_key *keys, size_t n_keys,
		    const char *what, struct kn_error *err)
{
	int rc = store_bind_keys(st, st->stmt[id], keys, n_keys, what, err);

	return rc < 0 ? rc : store_run(st, st->stmt[id], what, err);
}

int store_list_keyed(struct kn_store *st, enum stmt_id id,
		     const struct store_key *keys, size_t n_keys,
		     const char *what, void *out, size_t *n,
		     struct kn_error *err)
{
	int rc = store_bind_keys(st, st->stmt[id], keys, n_keys, what, err);

	return rc < 0 ? rc
		      : store_list(st, st->stmt[id], st->row[id], what, out,
				   n, err);
}

int store_get_keyed(struct kn_store *st, enum stmt_id id,
		    const struct store_key *keys, size_t n_keys,
		    const char *what, void *row, struct kn_error *err)
{
	int rc = store_bind_keys(st, st->stmt[id], keys, n_keys, what, err);

	return rc < 0 ? rc
		      : store_get(st, st->stmt[id], st->row[id], what, row,
				  err);
}

int store_put(struct kn_store *st, enum stmt_id id, const void *row,
	      const char *what, struct kn_error *err)
{
	int rc = store_bind_row(st, id, row, what, err);

	return rc < 0 ? rc : store_run(st, st->stmt[id], what, err);
}

int store_check_params(sqlite3_stmt *s, const struct store_row *row,
		       struct kn_error *err)
{
	int n = sqlite3_bind_parameter_count(s);

	for (int i = 1; i <= n; i++) {
		const char *name = sqlite3_bind_parameter_name(s, i);

		if (!name || name[0] != ':')
			continue;
		if (!row)
			return kn_errorf(err, KN_EIO, NULL,
					 "store: \"%s\" names parameter %s"
					 " but has no table to bind it from",
					 sqlite3_sql(s), name);
		if (!col_named(row, name + 1))
			return kn_errorf(err, KN_EIO, NULL,
					 "store: \"%s\" parameter %s is no"
					 " column of its %s table",
					 sqlite3_sql(s), name, row->kind);
	}
	return 0;
}

/* The field sizes each column type may fill. */
static bool col_size_fits(const struct store_col *c)
{
	switch (c->type) {
	case STORE_INT:
		return c->size == sizeof(int64_t) || c->size == sizeof(int) ||
		       c->size == sizeof(bool);
	case STORE_REAL:
		return c->size == sizeof(double);
	case STORE_TEXT:
		return c->size == sizeof(char *);
	case STORE_JOB_STATE:
	case STORE_TASK_STATE:
	case STORE_JOB_STATE_OR_NONE:
		return c->size == sizeof(int);
	}
	return false;
}

int store_check_row(sqlite3_stmt *s, const struct store_row *row,
		    struct kn_error *err)
{
	int n = sqlite3_column_count(s);

	if (n != (int)row->n_cols)
		return kn_errorf(err, KN_EIO, NULL,
				 "store: \"%s\" returns %d columns, its %s"
				 " table reads %zu",
				 sqlite3_sql(s), n, row->kind, row->n_cols);
	for (int i = 0; i < n; i++) {
		const char *name = sqlite3_column_name(s, i);

		if (!name || strcmp(name, row->cols[i].name) != 0)
			return kn_errorf(err, KN_EIO, NULL,
					 "store: \"%s\" column %d is %s, its"
					 " %s table reads %s there",
					 sqlite3_sql(s), i, name ? name : "?",
					 row->kind, row->cols[i].name);
		if (!col_size_fits(&row->cols[i]))
			return kn_errorf(err, KN_EIO, NULL,
					 "store: the %s table's %s has a field"
					 " of %zu bytes, not its type's",
					 row->kind, row->cols[i].name,
					 row->cols[i].size);
	}
	return 0;
}

int store_check_columns(struct kn_store *st, struct kn_error *err)
{
	for (size_t f = 0; store_families[f]; f++) {
		for (const struct store_stmt *d = store_families[f]; d->sql;
		     d++) {
			sqlite3_stmt *s = st->stmt[d->id];
			int rc = d->row && sqlite3_column_count(s) > 0
					 ? store_check_row(s, d->row, err)
					 : 0;
			if (rc < 0)
				return rc;
		}
	}
	return 0;
}

/* ---- transactions ---- */

static void rollback_open(struct kn_store *st)
{
	/* SQLite may already have rolled back on its own (disk full, I/O). */
	if (!sqlite3_get_autocommit(st->db)) {
		sqlite3_step(st->stmt[STMT_ROLLBACK]);
		sqlite3_reset(st->stmt[STMT_ROLLBACK]);
	}
}

/* Start a transaction for a write call unless the caller has one open. */
int write_begin(struct kn_store *st, bool *own, struct kn_error *err)
{
	group_yield(st);
	*own = sqlite3_get_autocommit(st->db) != 0;
	if (!*own)
		return 0;
	return store_run(st, st->stmt[STMT_BEGIN], "starting a transaction", err);
}

/*
 * A commit happened: tell the chain's watcher the new head. A rolled-back
 * transaction's rows are gone, and so is its head.
 */
static void committed(struct kn_store *st, int rc)
{
	if (rc == 0 && st->head_dirty && st->on_head)
		st->on_head(st->on_head_arg, st->head_id, st->head_hash);
	st->head_dirty = false;
}

/* COMMIT the open transaction, timed for the commit watcher. */
static int run_commit(struct kn_store *st, struct kn_error *err)
{
	struct timespec a, b;
	int rc;

	clock_gettime(CLOCK_MONOTONIC, &a);
	rc = store_run(st, st->stmt[STMT_COMMIT], "committing", err);
	clock_gettime(CLOCK_MONOTONIC, &b);
	if (st->on_commit)
		st->on_commit(st->on_commit_arg,
			      (double)(b.tv_sec - a.tv_sec) +
				      (double)(b.tv_nsec - a.tv_nsec) / 1e9);
	return rc;
}

void kn_store_on_commit(struct kn_store *st, kn_store_commit_cb cb,
			void *arg)
{
	st->on_commit = cb;
	st->on_commit_arg = arg;
}

/* Finish what write_begin started: commit on success, else roll back. */
int write_end(struct kn_store *st, bool own, int rc,
		     struct kn_error *err)
{
	if (!own)
		return rc;
	if (rc == 0)
		rc = run_commit(st, err);
	if (rc < 0)
		rollback_open(st);
	committed(st, rc);
	return rc;
}

int store_write(struct kn_store *st, sqlite3_stmt *s,
		const struct store_write *w, const struct kn_audit *a,
		int64_t *out_id, struct kn_error *err)
{
	char object[64];
	int64_t id = 0;
	bool own;
	int rc = write_begin(st, &own, err);

	if (rc < 0) {
		stmt_done(s);
		return rc;
	}
	rc = store_run(st, s, w->what, err);
	if (rc == -EEXIST && w->conflict)
		rc = kn_errorf(err, KN_ECONFLICT, "name", "%s", w->conflict);
	if (rc == 0 && w->missing && sqlite3_changes(st->db) == 0)
		rc = kn_errorf(err, KN_ENOTFOUND, w->missing_field, "%s",
			       w->missing);
	if (rc < 0)
		goto out;
	id = sqlite3_last_insert_rowid(st->db);
	if (w->object_kind)
		snprintf(object, sizeof(object), "%s/%" PRId64, w->object_kind,
			 id);
	rc = audit_write(st, a, w->object_kind ? object : w->object, err);
out:
	rc = write_end(st, own, rc, err);
	if (rc == 0 && out_id)
		*out_id = id;
	return rc;
}

int store_write_row(struct kn_store *st, enum stmt_id id, const void *row,
		    const struct store_write *w, const struct kn_audit *a,
		    int64_t *out_id, struct kn_error *err)
{
	int rc = store_bind_row(st, id, row, w->what, err);

	return rc < 0 ? rc
		      : store_write(st, st->stmt[id], w, a, out_id, err);
}

int store_write_keyed(struct kn_store *st, enum stmt_id id,
		      const struct store_key *keys, size_t n_keys,
		      const struct store_write *w, const struct kn_audit *a,
		      struct kn_error *err)
{
	int rc = store_bind_keys(st, st->stmt[id], keys, n_keys, w->what, err);

	return rc < 0 ? rc : store_write(st, st->stmt[id], w, a, NULL, err);
}

int store_write_named(struct kn_store *st, enum stmt_id id,
		      const struct store_key *keys, size_t n_keys,
		      const struct store_named *named, const char *name,
		      const struct kn_audit *a, struct kn_error *err)
{
	const char *shown = name ? name : "";
	struct store_write w = {.what = named->what, .missing_field = "name"};
	int rc;

	w.object = kn_asprintf("%s/%s", named->object_kind, shown);
	w.missing = kn_asprintf("%s %s", named->missing, shown);
	rc = store_write_keyed(st, id, keys, n_keys, &w, a, err);
	KN_FREE_ALL((char *)w.object, (char *)w.missing);
	return rc;
}

int kn_store_begin(struct kn_store *st, struct kn_error *err)
{
	int rc;

	group_yield(st);
	if (sqlite3_get_autocommit(st->db)) {
		st->nested = 0;
		return store_run(st, st->stmt[STMT_BEGIN],
				 "starting a transaction", err);
	}
	rc = store_run(st, st->stmt[STMT_SAVEPOINT], "starting a savepoint",
		       err);
	if (rc == 0)
		st->nested++;
	return rc;
}

/* Undo and close the innermost savepoint (SQLite may have dropped it). */
static void rollback_nested(struct kn_store *st)
{
	st->nested--;
	if (sqlite3_get_autocommit(st->db))
		return;
	sqlite3_step(st->stmt[STMT_ROLLBACK_TO]);
	sqlite3_reset(st->stmt[STMT_ROLLBACK_TO]);
	sqlite3_step(st->stmt[STMT_RELEASE]);
	sqlite3_reset(st->stmt[STMT_RELEASE]);
}

int kn_store_commit(struct kn_store *st, struct kn_error *err)
{
	int rc;

	if (sqlite3_get_autocommit(st->db))
		return kn_errorf(err, KN_EINVAL, NULL,
				 "store: no transaction is open");
	if (st->nested > 0) {
		rc = store_run(st, st->stmt[STMT_RELEASE],
			       "releasing a savepoint", err);
		if (rc < 0)
			rollback_nested(st);
		else
			st->nested--;
		return rc;
	}
	rc = run_commit(st, err);
	if (rc < 0)
		rollback_open(st);
	committed(st, rc);
	return rc;
}

void kn_store_rollback(struct kn_store *st)
{
	if (st->nested > 0) {
		rollback_nested(st);
		return;
	}
	rollback_open(st);
	st->head_dirty = false;
}

/* ---- group commit ---- */

/* Commit the open group now, keeping the result for its collector. */
static void group_close(struct kn_store *st)
{
	struct kn_error err = {0};
	int rc;

	st->group_open = false;
	st->nested = 0;
	rc = run_commit(st, &err);
	if (rc < 0)
		rollback_open(st);
	committed(st, rc);
	/* An earlier group's failure not yet collected stays the answer. */
	if (!st->group_done || st->group_rc == 0) {
		st->group_rc = rc;
		st->group_err = err;
	}
	st->group_done = true;
}

/* A write from outside the group's members: the group goes first. */
static void group_yield(struct kn_store *st)
{
	if (st->group_open && !st->group_member)
		group_close(st);
}

int kn_store_group_begin(struct kn_store *st, struct kn_error *err)
{
	int rc;

	if (st->group_member ||
	    (!st->group_open && !sqlite3_get_autocommit(st->db)))
		return kn_errorf(err, KN_EINVAL, NULL,
				 "store: a group cannot start inside a "
				 "transaction");
	if (!st->group_open) {
		rc = store_run(st, st->stmt[STMT_BEGIN],
			       "starting a transaction", err);
		if (rc < 0)
			return rc;
		st->nested = 0;
		st->group_open = true;
	}
	rc = store_run(st, st->stmt[STMT_SAVEPOINT], "starting a savepoint",
		       err);
	if (rc < 0)
		return rc;
	st->nested++;
	st->group_member = true;
	st->member_head_dirty = st->head_dirty;
	st->member_head_id = st->head_id;
	memcpy(st->member_head_hash, st->head_hash, sizeof(st->head_hash));
	return 0;
}

void kn_store_group_end(struct kn_store *st, bool keep)
{
	struct kn_error err;

	if (!st->group_member)
		return;
	st->group_member = false;
	if (keep && store_run(st, st->stmt[STMT_RELEASE],
			      "releasing a savepoint", &err) == 0) {
		st->nested--;
		return;
	}
	rollback_nested(st);
	st->head_dirty = st->member_head_dirty;
	st->head_id = st->member_head_id;
	memcpy(st->head_hash, st->member_head_hash, sizeof(st->head_hash));
	/* SQLite gave up the whole transaction (a full disk): every
	   member's writes are gone, and the group's commit must say so. */
	if (st->group_open && sqlite3_get_autocommit(st->db)) {
		st->group_open = false;
		st->group_done = true;
		st->group_rc = kn_errorf(&st->group_err, KN_EIO, NULL,
					 "store: the group's transaction was "
					 "rolled back");
	}
}

int kn_store_group_commit(struct kn_store *st, struct kn_error *err)
{
	if (st->group_member)
		kn_store_group_end(st, false);
	if (st->group_open)
		group_close(st);
	if (!st->group_done)
		return 0;
	st->group_done = false;
	if (st->group_rc < 0)
		*err = st->group_err;
	return st->group_rc;
}

bool kn_store_group_open(const struct kn_store *st)
{
	return st->group_open;
}

/* ---- open, migrate, free ---- */

/* Read one integer from a one-off PRAGMA; returns the SQLite code. */
static int pragma_int(sqlite3 *db, const char *sql, int *out)
{
	sqlite3_stmt *s = NULL;
	int rc = sqlite3_prepare_v2(db, sql, -1, &s, NULL);

	if (rc == SQLITE_OK) {
		rc = sqlite3_step(s);
		if (rc == SQLITE_ROW) {
			*out = sqlite3_column_int(s, STORE_ONLY_COLUMN);
			rc = SQLITE_OK;
		}
	}
	sqlite3_finalize(s);
	return rc;
}

static bool disk_full(sqlite3 *db)
{
	return (sqlite3_errcode(db) & 0xff) == SQLITE_FULL ||
	       kn_errcode_for_write(-sqlite3_system_errno(db)) == KN_ENOSPACE;
}

/* Opening failed: say so plainly when its disk is full. */
static int open_failed(sqlite3 *db, const char *path, struct kn_error *err)
{
	if (disk_full(db))
		return kn_errorf(err, KN_ENOSPACE, NULL,
				 "%s: no space left on its disk (%s); free "
				 "some and start again", path,
				 sqlite3_errmsg(db));
	return kn_errorf(err, KN_EIO, NULL, "%s: %s", path,
			 sqlite3_errmsg(db));
}

static int set_wal(sqlite3 *db, const char *path, struct kn_error *err)
{
	sqlite3_stmt *s = NULL;
	int rc = sqlite3_prepare_v2(db, "PRAGMA journal_mode = WAL", -1, &s,
				    NULL);
	int ret = 0;

	if (rc == SQLITE_OK)
		rc = sqlite3_step(s);
	/* A new file on a full disk fails here first, as SQLITE_FULL. */
	if (rc != SQLITE_ROW && disk_full(db)) {
		ret = open_failed(db, path, err);
	} else if (rc != SQLITE_ROW) {
		ret = kn_errorf(err, KN_EIO, NULL,
				"%s: setting WAL journal mode: %s", path,
				sqlite3_errmsg(db));
	} else {
		const char *mode =
			(const char *)sqlite3_column_text(s, STORE_ONLY_COLUMN);

		if (!mode || strcasecmp(mode, "wal") != 0)
			ret = kn_errorf(err, KN_EIO, NULL,
					"%s: the file system refused WAL"
					" journal mode (got %s)",
					path, mode ? mode : "nothing");
	}
	sqlite3_finalize(s);
	return ret;
}

/*
 * Bring the file to KN_STORE_SCHEMA_VERSION in one transaction. The
 * version is read again under the write lock: two processes opening a new
 * file at once must not both create the tables.
 */
static int migrate(sqlite3 *db, const char *path, struct kn_error *err)
{
	int version = 0;
	int ret = 0;
	char *sql = NULL;

	if (sqlite3_exec(db, SQL_BEGIN, NULL, NULL, NULL) != SQLITE_OK)
		return open_failed(db, path, err);
	if (pragma_int(db, "PRAGMA user_version", &version) != SQLITE_OK) {
		ret = open_failed(db, path, err);
		goto out;
	}
	if (version > KN_STORE_SCHEMA_VERSION) {
		ret = kn_errorf(err, KN_EIO, NULL,
				"%s: schema version %d is newer than this kiln"
				" supports (%d); use a newer kiln",
				path, version, KN_STORE_SCHEMA_VERSION);
		goto out;
	}
	for (int v = version; v < KN_STORE_SCHEMA_VERSION; v++) {
		if (sqlite3_exec(db, store_migrations[v], NULL, NULL, NULL) !=
		    SQLITE_OK) {
			ret = kn_errorf(err, KN_EIO, NULL,
					"%s: migrating to schema version %d:"
					" %s",
					path, v + 1, sqlite3_errmsg(db));
			goto out;
		}
	}
	/* Written only when it moved: an open writes nothing else, so a
	   full disk does not refuse it. */
	sql = version < KN_STORE_SCHEMA_VERSION
		      ? kn_asprintf("PRAGMA user_version = %d; COMMIT",
				    KN_STORE_SCHEMA_VERSION)
		      : kn_xstrdup("COMMIT");
	if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
		ret = open_failed(db, path, err);
out:
	free(sql);
	if (ret < 0 && !sqlite3_get_autocommit(db))
		sqlite3_exec(db, SQL_ROLLBACK, NULL, NULL, NULL);
	return ret;
}

/*
 * Everything on the connection before statements are prepared. Refuses
 * what is not a kiln database before changing anything in it.
 */
static int setup_connection(sqlite3 *db, const char *path,
			    struct kn_error *err)
{
	int version = 0;
	int rc;

	sqlite3_extended_result_codes(db, 1);
	sqlite3_busy_timeout(db, STORE_BUSY_TIMEOUT_MS);
	rc = pragma_int(db, "PRAGMA user_version", &version);
	if ((rc & 0xff) == SQLITE_NOTADB)
		return kn_errorf(err, KN_EIO, NULL,
				 "%s: not a SQLite database (%s)", path,
				 sqlite3_errmsg(db));
	if (rc != SQLITE_OK)
		return open_failed(db, path, err);
	if (version > KN_STORE_SCHEMA_VERSION)
		return kn_errorf(err, KN_EIO, NULL,
				 "%s: schema version %d is newer than this"
				 " kiln supports (%d); use a newer kiln",
				 path, version, KN_STORE_SCHEMA_VERSION);
	rc = set_wal(db, path, err);
	if (rc < 0)
		return rc;
	if (sqlite3_exec(db, "PRAGMA synchronous = FULL;"
			     " PRAGMA foreign_keys = ON",
			 NULL, NULL, NULL) != SQLITE_OK)
		return open_failed(db, path, err);
	return migrate(db, path, err);
}

/*
 * The row's columns [from, to) as "<pre><name>, ...", or with set as
 * "<name> = excluded.<name>, ...", but the one called skip (NULL: none).
 * The buffer is unbounded: an append cannot fail (running out of memory
 * aborts).
 */
static void write_cols(struct kn_buf *b, const struct store_row *row,
		       size_t from, size_t to, const char *pre, bool set,
		       const char *skip)
{
	const char *sep = "";

	for (size_t i = from; i < to; i++) {
		const char *name = row->cols[i].name;

		if (skip && strcmp(name, skip) == 0)
			continue;
		kn_buf_printf(b, "%s%s%s", sep, pre, name);
		if (set)
			kn_buf_printf(b, " = excluded.%s", name);
		sep = ", ";
	}
}

/* d's statement as SQLite reads it: as written, or from its table. */
static void write_sql(struct kn_buf *b, const struct store_stmt *d)
{
	const struct store_row *r = d->row;
	size_t from = d->form == STORE_SQL_INSERT ? d->n_auto : 0;

	if (d->form == STORE_SQL_AS_WRITTEN) {
		kn_buf_printf(b, "%s", d->sql);
		return;
	}
	if (d->form == STORE_SQL_SELECT) {
		kn_buf_printf(b, "SELECT ");
		write_cols(b, r, 0, r->n_cols, "", false, NULL);
		kn_buf_printf(b, " %s", d->sql);
		return;
	}
	kn_buf_printf(b, "%s%s (",
		      d->form == STORE_SQL_UPSERT ? "INSERT INTO " : "",
		      d->sql);
	write_cols(b, r, from, r->n_cols, "", false, NULL);
	kn_buf_printf(b, ") VALUES (");
	write_cols(b, r, from, r->n_cols, ":", false, NULL);
	kn_buf_printf(b, ")");
	if (d->form != STORE_SQL_UPSERT)
		return;
	kn_buf_printf(b, " ON CONFLICT (");
	write_cols(b, r, 0, d->n_key, "", false, NULL);
	kn_buf_printf(b, ") DO UPDATE SET ");
	write_cols(b, r, d->n_key, r->n_cols, "", true, d->keep);
}

/* Prepare one statement into its slot; a slot named twice is a bug. */
static int prepare_one(struct kn_store *st, const char *path,
		       const struct store_stmt *d, struct kn_error *err)
{
	struct kn_buf sql;
	int rc = 0;

	if (st->stmt[d->id])
		return kn_errorf(err, KN_EIO, NULL,
				 "%s: statement %d is defined twice", path,
				 (int)d->id);
	/* A misspelt kept column would be overwritten unnoticed. */
	if (d->keep && !col_named(d->row, d->keep))
		return kn_errorf(err, KN_EIO, NULL,
				 "%s: statement %d keeps %s, no column of its"
				 " %s table",
				 path, (int)d->id, d->keep, d->row->kind);
	kn_buf_init(&sql, SIZE_MAX);
	write_sql(&sql, d);
	if (sqlite3_prepare_v3(st->db, sql.data, -1, SQLITE_PREPARE_PERSISTENT,
			       &st->stmt[d->id], NULL) != SQLITE_OK)
		rc = kn_errorf(err, KN_EIO, NULL, "%s: preparing \"%s\": %s",
			       path, sql.data, sqlite3_errmsg(st->db));
	kn_buf_release(&sql);
	if (rc < 0)
		return rc;
	st->row[d->id] = d->row;
	return store_check_params(st->stmt[d->id], d->row, err);
}

/* Every statement the store runs, prepared once per connection. */
static int prepare_statements(struct kn_store *st, const char *path,
			      struct kn_error *err)
{
	for (size_t f = 0; store_families[f]; f++) {
		for (const struct store_stmt *d = store_families[f]; d->sql;
		     d++) {
			int rc = prepare_one(st, path, d, err);
			if (rc < 0)
				return rc;
		}
	}
	for (int i = 0; i < STMT_COUNT; i++)
		if (!st->stmt[i])
			return kn_errorf(err, KN_EIO, NULL,
					 "%s: statement %d has no SQL", path,
					 i);
	return 0;
}

static int open_db(const char *path, int flags, struct kn_store *st,
		   struct kn_error *err)
{
	if (sqlite3_open_v2(path, &st->db, flags, NULL) == SQLITE_OK)
		return 0;
	return kn_errorf(err, KN_EIO, NULL, "%s: %s", path,
			 st->db ? sqlite3_errmsg(st->db) : "out of memory");
}

/* The end of an open: *out set on success, st freed on failure. */
static int opened(struct kn_store *st, int ret, struct kn_store **out)
{
	if (ret < 0) {
		kn_store_free(st);
		return ret;
	}
	*out = st;
	return 0;
}

int kn_store_open(const char *path, struct kn_store **out,
		  struct kn_error *err)
{
	struct kn_store *st = kn_xcalloc(1, sizeof(*st));
	int ret = 0;
	int fd;

	/* Create it ourselves: SQLite would use 0644 less the umask. */
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		ret = kn_errorf(err, KN_EIO, NULL, "%s: %s", path,
				strerror(errno));
		goto out;
	}
	close(fd);
	ret = open_db(path, SQLITE_OPEN_READWRITE, st, err);
	if (ret < 0)
		goto out;
	ret = setup_connection(st->db, path, err);
	if (ret < 0)
		goto out;
	ret = prepare_statements(st, path, err);
out:
	return opened(st, ret, out);
}

/*
 * Read-only: no WAL switch and no migration (both write), so opening it
 * never takes the write lock the server's own connection may hold.
 */
int kn_store_open_reader(const char *path, struct kn_store **out,
			 struct kn_error *err)
{
	struct kn_store *st = kn_xcalloc(1, sizeof(*st));
	int version = 0;
	int ret = 0;

	ret = open_db(path, SQLITE_OPEN_READONLY, st, err);
	if (ret < 0)
		goto out;
	sqlite3_extended_result_codes(st->db, 1);
	sqlite3_busy_timeout(st->db, STORE_BUSY_TIMEOUT_MS);
	if (pragma_int(st->db, "PRAGMA user_version", &version) !=
	    SQLITE_OK) {
		ret = kn_errorf(err, KN_EIO, NULL, "%s: %s", path,
				sqlite3_errmsg(st->db));
		goto out;
	}
	if (version != KN_STORE_SCHEMA_VERSION) {
		ret = kn_errorf(err, KN_EIO, NULL,
				"%s: schema version %d, not %d: open it"
				" with kn_store_open first",
				path, version, KN_STORE_SCHEMA_VERSION);
		goto out;
	}
	ret = prepare_statements(st, path, err);
out:
	return opened(st, ret, out);
}

void kn_store_free(struct kn_store *st)
{
	if (!st)
		return;
	if (st->group_open)
		group_close(st);
	for (int i = 0; i < STMT_COUNT; i++)
		sqlite3_finalize(st->stmt[i]);
	sqlite3_close(st->db);
	EVP_MAC_CTX_free(st->audit_mac);
	free(st);
}

/* ---- backup ---- */

/* A copy the disk refused is a 507 (no space), anything else a 500. */
static enum kn_errcode copy_code(sqlite3 *dest, int rc)
{
	if ((rc & 0xff) == SQLITE_FULL ||
	    ((rc & 0xff) == SQLITE_IOERR &&
	     kn_errcode_for_write(-sqlite3_system_errno(dest)) == KN_ENOSPACE))
		return KN_ENOSPACE;
	return KN_EIO;
}

int kn_store_backup(struct kn_store *st, const char *path,
		    struct kn_error *err)
{
	sqlite3 *dest = NULL;
	sqlite3_backup *b;
	int ret = 0, fd, rc;

	/* Create it ourselves: 0600, and refuse to overwrite anything. */
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return kn_errorf(err, kn_errcode_for_write(-errno), NULL,
				 "%s: %s", path, strerror(errno));
	close(fd);
	if (sqlite3_open_v2(path, &dest, SQLITE_OPEN_READWRITE, NULL) !=
	    SQLITE_OK) {
		ret = kn_errorf(err, KN_EIO, NULL, "%s: %s", path,
				dest ? sqlite3_errmsg(dest) : "out of memory");
		goto out;
	}
	b = sqlite3_backup_init(dest, "main", st->db, "main");
	if (!b) {
		ret = kn_errorf(err, KN_EIO, NULL, "%s: backup: %s", path,
				sqlite3_errmsg(dest));
		goto out;
	}
	/* -1: every page in one step, under one read transaction. */
	rc = sqlite3_backup_step(b, -1);
	sqlite3_backup_finish(b);
	if (rc != SQLITE_DONE) {
		ret = kn_errorf(err, copy_code(dest, rc), NULL,
				"%s: backup: %s", path, sqlite3_errstr(rc));
		goto out;
	}
	/* A single file: the copy is read without its WAL. */
	rc = sqlite3_exec(dest, "PRAGMA journal_mode = DELETE", NULL, NULL,
			  NULL);
	if (rc != SQLITE_OK)
		ret = kn_errorf(err, copy_code(dest, rc), NULL, "%s: %s", path,
				sqlite3_errmsg(dest));
out:
	sqlite3_close(dest);
	if (ret < 0)
		unlink(path);
	return ret;
}
