/*
 * store/internal.h: what the store's files share and nothing outside
 * src/store includes: the connection, the named statements, the
 * transaction and bind helpers, and the column tables that read rows.
 *
 * Rows are read through a column table per row struct ({SQL name, type,
 * offset, size}) driving one reader, store_read_row, rather than one
 * hand-written loop per struct; a table names its fields, and each
 * column's type follows from its field's C type (STORE_COL), so the
 * two cannot disagree. Column i of a statement lands in the
 * field of entry i, and store_check_columns (run over every statement by
 * the unit tests) compares each statement's result columns, by
 * sqlite3_column_name, with its table, so a select list and its reader
 * cannot drift apart unnoticed. The alternative, an enum
 * of column numbers beside each select list, was kept in step by hand.
 *
 * Writes go the other way through the same tables: a statement's :name
 * parameters are bound from the row's fields of those names
 * (store_bind_row), and open refuses a :name that is no column, so an
 * INSERT's value list and its row struct cannot drift apart either.
 * Where a statement reads or writes every column of its table, open
 * writes its select list, or its insert and upsert, from the table
 * (enum store_sql_form), so those names are spelled once.
 */
#ifndef KN_STORE_INTERNAL_H
#define KN_STORE_INTERNAL_H

#include "store.h"

#include <stddef.h>

#include <openssl/evp.h>
#include <sqlite3.h>

/* Every statement the store prepares, by name. */
enum stmt_id {
	STMT_BEGIN,
	STMT_COMMIT,
	STMT_ROLLBACK,
	STMT_SAVEPOINT,
	STMT_RELEASE,
	STMT_ROLLBACK_TO,
	STMT_AUDIT_INSERT,
	STMT_AUDIT_LIST,
	STMT_AUDIT_PREV,
	STMT_AUDIT_SET_CHAIN,
	STMT_AUDIT_UNCHAINED,
	STMT_AUDIT_WALK,
	STMT_AUDIT_HEAD,
	STMT_AUDIT_HASH_OF,
	STMT_AUDIT_MAX_ID,
	STMT_TOKEN_INSERT,
	STMT_TOKEN_BY_HASH,
	STMT_TOKEN_TOUCH,
	STMT_TOKEN_LIST,
	STMT_TOKEN_REVOKE,
	STMT_TOKEN_COUNT,
	STMT_JOB_INSERT,
	STMT_JOB_GET,
	STMT_JOB_UPDATE,
	STMT_JOB_ARRAY_HEAD,
	STMT_JOB_LIST_ALL,
	STMT_JOB_LIST_STATE,
	STMT_JOB_LIST_ACTIVE,
	STMT_JOB_LIST_NAME,
	STMT_JOB_LIST_OWNER,
	/* The same five, newest first: in the order above. */
	STMT_JOB_LIST_ALL_DESC,
	STMT_JOB_LIST_STATE_DESC,
	STMT_JOB_LIST_ACTIVE_DESC,
	STMT_JOB_LIST_NAME_DESC,
	STMT_JOB_LIST_OWNER_DESC,
	STMT_ATTEMPT_PUT,
	STMT_ATTEMPT_LIST,
	STMT_TASK_PUT,
	STMT_TASK_LIST,
	STMT_NODE_PUT,
	STMT_NODE_LIST,
	STMT_DEVICE_DELETE_NODE,
	STMT_DEVICE_INSERT,
	STMT_DEVICE_LIST_NODE,
	STMT_OUTPUT_PUT,
	STMT_OUTPUT_LIST,
	STMT_ALERT_INSERT,
	STMT_ALERT_RESOLVE,
	STMT_ALERT_RESOLVE_ALL,
	STMT_ALERT_LIST,
	STMT_DEPLOYMENT_PUT,
	STMT_DEPLOYMENT_LIST,
	STMT_DEPLOYMENT_DELETE,
	STMT_REPLICA_PUT,
	STMT_REPLICA_DELETE,
	STMT_REPLICA_LIST,
	STMT_GWKEY_INSERT,
	STMT_GWKEY_LIST,
	STMT_GWKEY_REVOKE,
	STMT_NODE_STATE_CLOSE,
	STMT_NODE_STATE_CLOSE_ALL,
	STMT_NODE_STATE_OPEN,
	STMT_NODE_STATE_LIST,
	STMT_JOB_DEPLOYMENT_PUT,
	STMT_COST_TASK_LIST,
	STMT_MODEL_LIST,
	STMT_MODEL_CREATE,
	STMT_MODEL_NEXT,
	STMT_MODEL_VERSION_INSERT,
	STMT_MODEL_VERSION_DELETE,
	STMT_MODEL_VERSION_GET,
	STMT_MODEL_VERSION_LIST,
	STMT_MODEL_ALIAS_GET,
	STMT_MODEL_ALIAS_PUT,
	STMT_MODEL_ALIAS_LIST,
	STMT_MODEL_ALIAS_EVENT,
	STMT_MODEL_ALIAS_HISTORY,
	STMT_MODEL_SIGNATURE_INSERT,
	STMT_MODEL_SIGNATURE_LIST,
	STMT_WF_RUN_INSERT,
	STMT_WF_RUN_GET,
	STMT_WF_RUN_UPDATE,
	STMT_WF_RUN_LIST,
	STMT_WF_STEP_PUT,
	STMT_WF_STEP_LIST,
	STMT_WF_STEP_BY_JOB,
	STMT_WF_ATTEMPT_PUT,
	STMT_WF_ATTEMPT_LIST,
	STMT_REVAL_PUT,
	STMT_REVAL_LIST,
	STMT_REVAL_DELETE,
	STMT_EVAL_INSERT,
	STMT_EVAL_LIST,
	STMT_JOB_REVISION_PUT,
	STMT_JOB_REVISION_GET,
	STMT_COST_CPU_TASK_LIST,
	STMT_TASK_USAGE_GET,
	STMT_TASK_USAGE_PUT,
	STMT_TASK_USAGE_LIST,
	STMT_JOB_INPUT_PUT,
	STMT_JOB_INPUT_LIST,
	STMT_IDEM_GET,
	STMT_IDEM_PUT,
	STMT_DEVENV_START,
	STMT_DEVENV_END,
	STMT_DEVENV_LIST,
	STMT_DEVENV_NEXT,
	STMT_IDEM_EXPIRE,
	STMT_JOB_STATE_COUNTS,
	STMT_ATTEMPT_GOODPUT,
	STMT_COUNT,
};

struct kn_store {
	sqlite3 *db;
	sqlite3_stmt *stmt[STMT_COUNT];
	const struct store_row *row[STMT_COUNT]; /* store_stmt's row */
	int nested; /* savepoints open inside the transaction */

	/* The audit chain (kn_store_audit_chain_start); unchained before. */
	EVP_MAC_CTX *audit_mac; /* HMAC-SHA256 keyed, copied per row */
	/* The newest row this transaction chained, reported on commit. */
	bool head_dirty;
	int64_t head_id;
	char head_hash[KN_AUDIT_HASH_HEX_LEN + 1];
	kn_store_audit_head_cb on_head;
	void *on_head_arg;
	kn_store_commit_cb on_commit; /* kn_store_on_commit, or NULL */
	void *on_commit_arg;

	/* Group commit (kn_store_group_begin): the shared transaction is
	   open; a member's savepoint is open inside it; the group was
	   committed early (for a write from outside it) with this result,
	   not yet collected by kn_store_group_commit. */
	bool group_open;
	bool group_member;
	bool group_done;
	int group_rc;
	struct kn_error group_err;
	/* The chain's head as the member found it, for its rollback. */
	bool member_head_dirty;
	int64_t member_head_id;
	char member_head_hash[KN_AUDIT_HASH_HEX_LEN + 1];
};

/* ---- column tables ---- */

enum store_col_type {
	STORE_INT,      /* into an int64_t, int or bool, by the field's size */
	STORE_REAL,     /* into a double */
	STORE_TEXT,     /* a char * the row owns; NULL stays NULL */
	STORE_JOB_STATE,  /* enum kn_job_state by name; unknown fails */
	STORE_TASK_STATE, /* enum kn_task_state by name; unknown fails */
	STORE_JOB_STATE_OR_NONE, /* int: a job state, -1 for NULL/unknown */
};

struct store_col {
	const char *name; /* the result column's name, as SQLite reports it */
	enum store_col_type type;
	size_t offset;    /* of the field in the row struct */
	size_t size;      /* of the field, checked against the type */
};

/* A row struct as a statement's result: column i fills cols[i]. */
struct store_row {
	const char *kind; /* names a row with a bad state: "job 12 has..." */
	size_t size;      /* of the row struct */
	const struct store_col *cols;
	size_t n_cols;
};

#define STORE_COL_AS(row_type, field, sql_name, col_type)                 \
	{ .name = sql_name, .type = col_type,                                  \
	  .offset = offsetof(row_type, field),                                 \
	  .size = sizeof(((row_type *)0)->field) }
/*
 * A column's type from its field's C type, so that the two cannot
 * disagree: text for a char *, real for a double, a job's or a task's
 * state by its name, an integer for the rest (int64_t, int, bool).
 */
#define STORE_TYPE_OF(row_type, field)                                    \
	_Generic(((row_type *)0)->field,                                     \
		char *: STORE_TEXT,                                          \
		double: STORE_REAL,                                          \
		enum kn_job_state: STORE_JOB_STATE,                          \
		enum kn_task_state: STORE_TASK_STATE,                        \
		default: STORE_INT)
/* A column named as its field, of the field's type. */
#define STORE_COL(row_type, field)                                         \
	STORE_COL_AS(row_type, field, #field, STORE_TYPE_OF(row_type, field))
/* A row struct and its columns, given as STORE_COL or STORE_COL_AS. */
#define STORE_ROW(row_type, kind_, ...)                                     \
	{ .kind = kind_, .size = sizeof(row_type),                             \
	  .cols = (const struct store_col[]){__VA_ARGS__},                     \
	  .n_cols = sizeof((const struct store_col[]){__VA_ARGS__}) /          \
		    sizeof(struct store_col) }

/*
 * How a statement's SQL is written. A select list or an insert that
 * names every column of the row is written from its table at open,
 * so the column names are spelled once, in the table.
 */
enum store_sql_form {
	STORE_SQL_AS_WRITTEN, /* sql is the whole statement */
	STORE_SQL_SELECT,     /* "SELECT <every column> " sql ("FROM ...") */
	/* sql ("INSERT INTO t") " (<columns>) VALUES (:<columns>)", from
	   column n_auto on: the leading ones the database assigns (an id) */
	STORE_SQL_INSERT,
	/* sql ("t"): the insert of every column, and on a clash of the
	   first n_key columns the others but keep overwrite the row's */
	STORE_SQL_UPSERT,
};

/*
 * A named statement and the row struct it serves, NULL for none: the
 * columns it returns are read into one (store_read_row), and its :name
 * parameters bound from one (store_bind_row); ?N parameters are the
 * caller's to bind.
 */
struct store_stmt {
	enum stmt_id id;
	const char *sql;
	const struct store_row *row;
	enum store_sql_form form;
	size_t n_key;  /* STORE_SQL_UPSERT's key columns */
	const char *keep; /* STORE_SQL_UPSERT's column a clash leaves, or NULL */
	size_t n_auto; /* STORE_SQL_INSERT's columns the database assigns */
};
#define STORE_STMT(id_, sql_, row_) { .id = id_, .sql = sql_, .row = row_ }
#define STORE_SELECT(id_, row_, from)                                      \
	{ .id = id_, .sql = from, .row = row_, .form = STORE_SQL_SELECT }
#define STORE_INSERT(id_, row_, into, n_auto_)                             \
	{ .id = id_, .sql = into, .row = row_, .form = STORE_SQL_INSERT,     \
	  .n_auto = n_auto_ }
#define STORE_UPSERT(id_, row_, table, n_key_)                             \
	STORE_UPSERT_KEEP(id_, row_, table, n_key_, NULL)
#define STORE_UPSERT_KEEP(id_, row_, table, n_key_, keep_)                 \
	{ .id = id_, .sql = table, .row = row_, .form = STORE_SQL_UPSERT,    \
	  .n_key = n_key_, .keep = keep_ }

/*
 * Each file's statements, store_<family>_stmts, ended by an entry whose
 * sql is NULL; store_db.c prepares them all at open and refuses a gap or
 * a double. A new family is named here once.
 */
#define STORE_FAMILIES(X)                                                  \
	X(db) X(audit) X(token) X(job) X(node) X(deploy) X(ledger) X(model) \
	X(workflow) X(alert) X(idem) X(devenv)
#define STORE_FAMILY_DECLARE(family)                                       \
	extern const struct store_stmt store_##family##_stmts[];
STORE_FAMILIES(STORE_FAMILY_DECLARE)
#undef STORE_FAMILY_DECLARE

/* The families above, NULL-terminated: what open prepares and tests walk. */
extern const struct store_stmt *const store_families[];

/* store_migrations[v - 1] takes a file from version v - 1 to version v. */
extern const char *const store_migrations[KN_STORE_SCHEMA_VERSION];

/*
 * Every statement with a column table that returns columns returns
 * exactly those, by name and in order, and every field's size fits its
 * type. -EIO naming the statement and column otherwise.
 */
int store_check_columns(struct kn_store *st, struct kn_error *err);

/* One statement's result against one table (store_check_columns' step). */
int store_check_row(sqlite3_stmt *s, const struct store_row *row,
		    struct kn_error *err);

/* ---- reading rows ---- */

/*
 * Read the current result row into row (zeroed first). A state column
 * with an unknown name fails with -EIO naming the row by its first
 * column (its id or job id); row then holds nothing.
 */
int store_read_row(sqlite3_stmt *s, const struct store_row *def, void *row,
		   struct kn_error *err);

/*
 * Step a bound query to its end, reading each row; resets s. On success
 * *(T **)out is the array (NULL when empty) and *n its length; on failure
 * neither is written.
 */
int store_list(struct kn_store *st, sqlite3_stmt *s,
	       const struct store_row *def, const char *what, void *out,
	       size_t *n, struct kn_error *err);

/* Room for one more element of elem bytes in a list being read. */

/* Free a row's text columns and zero it; NULL is fine. */
void store_row_release(const struct store_row *def, void *row);

/* Release n rows and free the array. */
void store_rows_free(const struct store_row *def, void *rows, size_t n);

/*
 * Step a bound query once: 1 with its row read into row, 0 when there is
 * none (row untouched), or a negative errno. Resets s.
 */
int store_get(struct kn_store *st, sqlite3_stmt *s,
	      const struct store_row *def, const char *what, void *row,
	      struct kn_error *err);

/* ---- statements ---- */

int store_db_fail(struct kn_store *st, int rc, const char *what,
		  struct kn_error *err);
/* Reset a statement and clear its bindings. */
void stmt_done(sqlite3_stmt *s);
/* A bind failed (too big, out of memory): report it and reset. */
int bind_fail(struct kn_store *st, sqlite3_stmt *s, const char *what,
	      struct kn_error *err);
/* Step a statement that returns no rows, then reset it. */
int store_run(struct kn_store *st, sqlite3_stmt *s, const char *what,
	      struct kn_error *err);
/* Step a query: 1 with a row ready, 0 when done, or a negative errno. */
int step_row(struct kn_store *st, sqlite3_stmt *s, const char *what,
	     struct kn_error *err);
/*
 * Caller strings are bound SQLITE_STATIC: they outlive the step, and
 * stmt_done clears the bindings before the call returns.
 */
int bind_text(sqlite3_stmt *s, int i, const char *v);
int bind_i64(sqlite3_stmt *s, int i, int64_t v);

/*
 * Bind every :name parameter of statement id from the field of its
 * table's column of that name in row (a state by its name); ?N
 * parameters are left to the caller. A state out of range fails with
 * KN_EINVAL on the column's field ("unknown job state 9"), a failed bind
 * as bind_fail; nothing stays bound on failure.
 */
int store_bind_row(struct kn_store *st, enum stmt_id id, const void *row,
		   const char *what, struct kn_error *err);

/* A value for a query's ?N parameter, N its place in a list of them. */
struct store_key {
	enum store_col_type type; /* STORE_INT, STORE_REAL or STORE_TEXT */
	int64_t i64;
	double real;
	const char *text; /* NULL binds NULL */
};
#define KEY_I64(v) ((struct store_key){.type = STORE_INT, .i64 = (v)})
#define KEY_REAL(v) ((struct store_key){.type = STORE_REAL, .real = (v)})
#define KEY_TEXT(v) ((struct store_key){.type = STORE_TEXT, .text = (v)})
#define N_KEYS(keys) (sizeof(keys) / sizeof((keys)[0]))

/* Bind keys[i] to ?i+1 of s; bind_fail's answer when one fails. */
int store_bind_keys(struct kn_store *st, sqlite3_stmt *s,
		    const struct store_key *keys, size_t n_keys,
		    const char *what, struct kn_error *err);

/*
 * store_bind_keys on statement id, then: store_run; store_list or
 * store_get through the statement's table.
 */
int store_run_keyed(struct kn_store *st, enum stmt_id id,
		    const struct store_key *keys, size_t n_keys,
		    const char *what, struct kn_error *err);
int store_list_keyed(struct kn_store *st, enum stmt_id id,
		     const struct store_key *keys, size_t n_keys,
		     const char *what, void *out, size_t *n,
		     struct kn_error *err);
int store_get_keyed(struct kn_store *st, enum stmt_id id,
		    const struct store_key *keys, size_t n_keys,
		    const char *what, void *row, struct kn_error *err);

/*
 * A lookup's answer as its caller returns it: 0 when rc is 1 (found),
 * KN_ENOTFOUND on field (may be NULL) with the message when rc is 0 (no
 * row), a failure (rc < 0) as it is.
 */
__attribute__((format(printf, 4, 5))) int
store_found(int rc, struct kn_error *err, const char *field, const char *fmt,
	    ...);

/*
 * store_bind_keys on statement id, a query whose answer is one value in
 * its only column: 1 with *out set, 0 when no row, or a negative errno.
 */
int store_one_i64(struct kn_store *st, enum stmt_id id,
		  const struct store_key *keys, size_t n_keys, const char *what,
		  int64_t *out, struct kn_error *err);
int store_one_text(struct kn_store *st, enum stmt_id id,
		   const struct store_key *keys, size_t n_keys,
		   const char *what, char **out, struct kn_error *err);

/* store_bind_row, then store_run: a write without an audit row. */
int store_put(struct kn_store *st, enum stmt_id id, const void *row,
	      const char *what, struct kn_error *err);

/*
 * A statement's parameters against its table: every :name parameter
 * names one of its columns, and one without a table has none. -EIO
 * naming the statement and parameter otherwise (checked at open).
 */
int store_check_params(sqlite3_stmt *s, const struct store_row *row,
		       struct kn_error *err);

/* ---- the functions alike for every row type ---- */

/*
 * Definitions of the functions store.h declares for a row type that are
 * the same for every one: release a row, free a list of rows, and list
 * rows by a statement with no key or one integer key (?1), put a row,
 * each through the row's table. Each row type's are then one line apiece.
 */
#define STORE_RELEASE_FN(fn, row_type, def)                                \
	void fn(row_type *row)                                              \
	{                                                                   \
		store_row_release(&(def), row);                             \
	}
#define STORE_LIST_FREE_FN(fn, row_type, def)                              \
	void fn(row_type *rows, size_t n)                                   \
	{                                                                   \
		store_rows_free(&(def), rows, n);                           \
	}
#define STORE_LIST_FN(fn, row_type, id, what)                              \
	int fn(struct kn_store *st, row_type **out, size_t *n,              \
	       struct kn_error *err)                                        \
	{                                                                   \
		return store_list_keyed(st, id, NULL, 0, what, out, n, err); \
	}
/* A put of one row through store_put. */
#define STORE_PUT_FN(fn, row_type, id, what)                               \
	int fn(struct kn_store *st, const row_type *row,                    \
	       struct kn_error *err)                                        \
	{                                                                   \
		return store_put(st, id, row, what, err);                   \
	}
/* The same for a row of a job: a job that is not there is named. */
#define STORE_JOB_PUT_FN(fn, row_type, id, what)                           \
	int fn(struct kn_store *st, const row_type *row,                    \
	       struct kn_error *err)                                        \
	{                                                                   \
		return store_job_missing(store_put(st, id, row, what, err), \
					 row->job_id, err);                 \
	}
/* key_type: an int64_t or a bool, bound as an integer. */
#define STORE_LIST_BY_FN(fn, key_type, row_type, id, what)                 \
	int fn(struct kn_store *st, key_type key, row_type **out,           \
	       size_t *n, struct kn_error *err)                             \
	{                                                                   \
		const struct store_key keys[] = {KEY_I64(key)};             \
									    \
		return store_list_keyed(st, id, keys, N_KEYS(keys), what,   \
					out, n, err);                       \
	}

/* ---- transactions ---- */

/* Start a transaction for a write call unless the caller has one open. */
int write_begin(struct kn_store *st, bool *own, struct kn_error *err);
/* Finish what write_begin started: commit on success, else roll back. */
int write_end(struct kn_store *st, bool own, int rc, struct kn_error *err);

/* One write statement as the API sees it: its audit object and errors. */
struct store_write {
	const char *what;        /* "revoking a token": names a failure */
	const char *object;      /* the audit object; NULL: a->object */
	const char *object_kind; /* instead of object: "job" audits the
				    inserted row as "job/<its id>" */
	const char *missing_field; /* with missing: the field a */
	const char *missing;     /* no row changed: KN_ENOTFOUND, this text */
	const char *conflict;    /* a unique key hit: KN_ECONFLICT on "name" */
};

/*
 * Run s, bound by the caller, and write a's audit row in one transaction,
 * the caller's or its own; *out_id (may be NULL) is the row inserted.
 * Resets s.
 */
int store_write(struct kn_store *st, sqlite3_stmt *s,
		const struct store_write *w, const struct kn_audit *a,
		int64_t *out_id, struct kn_error *err);

/* store_bind_row, then store_write. */
int store_write_row(struct kn_store *st, enum stmt_id id, const void *row,
		    const struct store_write *w, const struct kn_audit *a,
		    int64_t *out_id, struct kn_error *err);

/* store_bind_keys on statement id, then store_write. */
int store_write_keyed(struct kn_store *st, enum stmt_id id,
		      const struct store_key *keys, size_t n_keys,
		      const struct store_write *w, const struct kn_audit *a,
		      struct kn_error *err);

/* A write on the row called name, as store_write_named names it. */
struct store_named {
	const char *what;        /* "revoking a token" */
	const char *object_kind; /* audited as "<object_kind>/<name>" */
	const char *missing;     /* changed nothing: "<missing> <name>" */
};

/*
 * store_write_keyed for a statement on the row called name: audited as
 * "<object_kind>/<name>", and KN_ENOTFOUND "<missing> <name>" on field
 * "name" when it changed nothing.
 */
int store_write_named(struct kn_store *st, enum stmt_id id,
		      const struct store_key *keys, size_t n_keys,
		      const struct store_named *named, const char *name,
		      const struct kn_audit *a, struct kn_error *err);

/*
 * Insert a's audit row (nothing when a is NULL) and chain it; object
 * stands in for a->object when that is NULL. Inside the caller's
 * transaction.
 */
int audit_write(struct kn_store *st, const struct kn_audit *a,
		const char *object, struct kn_error *err);

/* ---- shared by the families ---- */

bool store_job_state_valid(enum kn_job_state s);
bool store_task_state_valid(enum kn_task_state s);
/* A foreign-key failure on a job's rows can only mean the job. */
int store_job_missing(int rc, int64_t job_id, struct kn_error *err);

#endif
