/*
 * store: kiln's state in one SQLite file (WAL), and every SQL statement.
 *
 * Statements are named constants prepared once on open. Writes that a user
 * caused take a struct kn_audit and write the audit row in the same
 * transaction, so there is never a change without its record. Every write
 * is committed (fsync'd, synchronous=FULL) before the call returns: the API
 * answers only after that.
 *
 * Rows are plain structs; strings in rows returned to the caller are
 * malloc'd and freed with the matching *_release / *_list_free.
 *
 * Errors: KN_ENOTFOUND for a missing row, KN_ECONFLICT for a unique
 * conflict, KN_EINVAL for a bad argument (an unknown state, a NULL where a
 * value is required), KN_EIO for SQLite failures (the message carries
 * SQLite's). A kn_store is one connection: use it from one thread at a
 * time.
 */
#ifndef KILN_STORE_H
#define KILN_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

struct kn_store;

/* The schema version this build writes; older files are migrated. */
#define KN_STORE_SCHEMA_VERSION 19

/*
 * Open (creating if needed) the database at path, set WAL and
 * synchronous=FULL, run migrations. A file from a newer kiln is refused
 * with a message naming both versions.
 * A new file is created with mode 0600; a file that is not a SQLite
 * database is refused with a message naming the path.
 */
int kn_store_open(const char *path, struct kn_store **out,
		  struct kn_error *err);
void kn_store_free(struct kn_store *st);
/*
 * A second, read-only connection to a database kn_store_open already
 * set up (same schema version, WAL): for reads on another thread, which
 * see one consistent moment per statement while the first connection
 * writes. Writes through it fail.
 */
int kn_store_open_reader(const char *path, struct kn_store **out,
			 struct kn_error *err);

/*
 * Group several writes into one transaction (the scheduler's tick binds
 * many jobs at once). A begin inside an open transaction opens a
 * savepoint: its commit folds what it did into the outer transaction
 * (nothing is durable before the outer commit) and its rollback undoes
 * only that. The write calls below start and commit their own
 * transaction when none is open.
 * Inside kn_store_begin a failing write call leaves what it did so far in
 * the open transaction: the caller rolls back. Commit on no open
 * transaction is an error; a failed commit rolls the transaction back.
 * Rollback with none open does nothing. Each self-committed write costs
 * one fsync (about a millisecond); a burst inside one transaction costs
 * one in all.
 */
int kn_store_begin(struct kn_store *st, struct kn_error *err);
int kn_store_commit(struct kn_store *st, struct kn_error *err);
void kn_store_rollback(struct kn_store *st);
/*
 * Called after each transaction's COMMIT (not a savepoint's) with how
 * long it took in seconds, failed or not: the fsync a write waits for.
 * Transactions are those of kn_store_begin and of the write calls that
 * open their own (those with an audit row); a single-statement write
 * SQLite commits by itself is not seen. cb NULL stops the calls.
 */
typedef void (*kn_store_commit_cb)(void *arg, double seconds);
void kn_store_on_commit(struct kn_store *st, kn_store_commit_cb cb,
			void *arg);

/*
 * Group commit: the writes of many requests share one COMMIT, one fsync.
 * kn_store_group_begin joins the group's transaction (opening it when
 * none is) as a member with a savepoint of its own; kn_store_group_end
 * keeps what the member wrote, or undoes only that. Nothing a member
 * wrote is durable, so nothing may be answered for it, before
 * kn_store_group_commit returns 0; a failed one rolled back every member.
 * Any write, kn_store_begin or write call from outside a member while
 * the group is open commits the group first, so that caller's own
 * promise (durable when its call returns) holds; that early commit's
 * result is kept for kn_store_group_commit, which then commits nothing.
 * A group may not start inside another transaction (KN_EINVAL).
 * kn_store_group_open: members may still join the group (false once it
 * was committed early: collect its result before a new group starts, or
 * the new one's commit answers for both). kn_store_free commits an open
 * group.
 */
int kn_store_group_begin(struct kn_store *st, struct kn_error *err);
void kn_store_group_end(struct kn_store *st, bool keep);
int kn_store_group_commit(struct kn_store *st, struct kn_error *err);
bool kn_store_group_open(const struct kn_store *st);

/* ---- audit ---- */

struct kn_audit {
	int64_t id;      /* set by the store */
	int64_t time_ms; /* set by the store when 0 */
	char *actor;     /* token name, or "system" */
	char *role;
	char *action;    /* "job.submit", "job.cancel", "token.create", ... */
	char *object;    /* "job/12", "token/alice"; NULL on a write call =
			    the object written, e.g. the new job's id */
	char *outcome;   /* "ok", "denied", "error" */
	char *detail;    /* free text, may be NULL */
	char *hash;      /* read only: the row's chain hash (hex), NULL
			    when unchained; ignored on insert */
};
void kn_audit_release(struct kn_audit *a);

/*
 * Insert an audit row on its own (denials, failures, reads worth
 * recording such as a model pull). Outside a transaction it runs in its
 * own, chained like every other row; inside kn_store_begin it joins it.
 */
int kn_store_audit_insert(struct kn_store *st, const struct kn_audit *a,
			  struct kn_error *err);

/*
 * ---- the audit hash chain (docs/audit.md) ----
 *
 * Once started, every audit row is chained as it is inserted, in the
 * same transaction: hash = HMAC-SHA256(key, prev || row), where prev is
 * the previous row's hash (32 zero bytes for the first row) and row is
 * the canonical encoding of id, time_ms (each 8 bytes big-endian), then
 * actor, role, action, object, outcome, detail, each as a 4-byte
 * big-endian length and its bytes (length 0xffffffff for NULL). Hashes
 * are stored as lowercase hex beside the previous row's (prev_hash).
 */
#define KN_AUDIT_KEY_LEN 32
#define KN_AUDIT_HASH_HEX_LEN 64

/* Told the newest row's (id, hash) after each commit that chained rows. */
typedef void (*kn_store_audit_head_cb)(void *arg, int64_t id,
				       const char *hash);

/*
 * Chain rows from now on with key, after chaining (in id order, one
 * transaction) the rows that have no hash yet: those written before
 * schema v5. *chained (may be NULL) gets how many that was. on_head (may
 * be NULL) is called after every commit that chained rows, this one
 * included.
 */
int kn_store_audit_chain_start(struct kn_store *st,
			       const unsigned char key[KN_AUDIT_KEY_LEN],
			       kn_store_audit_head_cb on_head, void *arg,
			       int64_t *chained, struct kn_error *err);
/*
 * Whether any row is chained (a key is then needed to go on); *out set.
 */
int kn_store_audit_has_chain(struct kn_store *st, bool *out,
			     struct kn_error *err);
/*
 * The newest row: its id and hash (hex, "" when unchained); id 0 and ""
 * for an empty log.
 */
int kn_store_audit_head(struct kn_store *st, int64_t *id,
			char hash[KN_AUDIT_HASH_HEX_LEN + 1],
			struct kn_error *err);
/* Row id's hash ("" when unchained); -ENOENT when there is no such row. */
int kn_store_audit_hash_of(struct kn_store *st, int64_t id,
			   char hash[KN_AUDIT_HASH_HEX_LEN + 1],
			   struct kn_error *err);

/* What kn_store_audit_verify found. */
enum kn_audit_problem {
	KN_AUDIT_OK,
	KN_AUDIT_EDITED,    /* a row's fields do not match its hash */
	KN_AUDIT_REORDERED, /* a row's hash matches another id's position */
	KN_AUDIT_DELETED,   /* an id is missing, or a link is broken */
	KN_AUDIT_TRUNCATED, /* rows up to the anchored head are missing */
	KN_AUDIT_UNCHAINED, /* a row has no hash */
};
/* "ok", "edited", "reordered", "deleted", "truncated", "unchained". */
const char *kn_audit_problem_name(enum kn_audit_problem p);

struct kn_audit_verify {
	enum kn_audit_problem problem;
	int64_t rows;     /* rows read */
	int64_t head_id;  /* the newest row, 0 for an empty log */
	char head_hash[KN_AUDIT_HASH_HEX_LEN + 1];
	int64_t bad_id;   /* the first bad row's id (or the first missing
			     one); 0 when ok */
	char message[256]; /* what is wrong, naming the row */
};

/*
 * Recompute the whole chain with key, oldest first, and stop at the first
 * bad row. anchor_id/anchor_hash (0/NULL = none) is the head recorded
 * outside the database: a log that ends before it, or whose row there has
 * another hash, was cut short. Rows after the anchor are checked like any
 * other. Fills *out; a broken chain is not an error (returns 0).
 */
int kn_store_audit_verify(struct kn_store *st,
			  const unsigned char key[KN_AUDIT_KEY_LEN],
			  int64_t anchor_id, const char *anchor_hash,
			  struct kn_audit_verify *out, struct kn_error *err);

/*
 * An online copy of the whole database into a new file at path (mode
 * 0600), one consistent moment (SQLite's backup API, in one step, so no
 * writer can interleave). The file must not exist.
 */
int kn_store_backup(struct kn_store *st, const char *path,
		    struct kn_error *err);

struct kn_audit_filter {
	const char *actor;  /* NULL = any */
	const char *action; /* prefix match, NULL = any */
	int64_t since_ms;   /* 0 = any */
	int limit;          /* 0 = 100 */
};
/* Newest first. f may be NULL (the newest 100 rows). */
int kn_store_audit_list(struct kn_store *st, const struct kn_audit_filter *f,
			struct kn_audit **out, size_t *n, struct kn_error *err);
void kn_audit_list_free(struct kn_audit *rows, size_t n);

/* ---- tokens (API credentials; only the hash is stored) ---- */

struct kn_token_row {
	int64_t id;
	char *name;     /* unique among unrevoked tokens */
	char *role;     /* "viewer", "user", "operator", "admin" */
	char *hash;     /* hex sha256 of the secret */
	char *created_by;
	int64_t created_at;
	int64_t revoked_at; /* 0 = active */
	int64_t last_used_at;
};
void kn_token_row_release(struct kn_token_row *t);

/* -EEXIST (KN_ECONFLICT) when an active token has that name. */
int kn_store_token_insert(struct kn_store *st, const struct kn_token_row *t,
			  const struct kn_audit *a, int64_t *out_id,
			  struct kn_error *err);
/*
 * Active tokens only; -ENOENT when none matches. Also records the use:
 * last_used_at is set to now when it is more than a minute old, so the
 * usual request costs one indexed read and no write.
 */
int kn_store_token_by_hash(struct kn_store *st, const char *hash,
			   struct kn_token_row *out, struct kn_error *err);
/* Every token, revoked ones included (revoked_at != 0), by id. */
int kn_store_token_list(struct kn_store *st, struct kn_token_row **out,
			size_t *n, struct kn_error *err);
void kn_token_list_free(struct kn_token_row *rows, size_t n);
/* Revoke the active token with that name; -ENOENT when none. */
int kn_store_token_revoke(struct kn_store *st, const char *name,
			  const struct kn_audit *a, struct kn_error *err);
/* The number of active (unrevoked) tokens. */
int kn_store_token_count(struct kn_store *st, int *out,
			 struct kn_error *err);

/* ---- jobs, attempts, tasks ---- */

/* Job states; the strings are the API's. */
enum kn_job_state {
	KN_JOB_QUEUED,
	KN_JOB_RUNNING,
	KN_JOB_SUCCEEDED,
	KN_JOB_FAILED,
	KN_JOB_CANCELLED,
	KN_JOB_PREEMPTED,
};
/* "unknown" for a value outside the enum. */
const char *kn_job_state_name(enum kn_job_state s);
/* -1 when unknown. */
int kn_job_state_parse(const char *name);
/* Succeeded, failed, cancelled (a preempted job is queued again). */
bool kn_job_state_terminal(enum kn_job_state s);

struct kn_job_row {
	int64_t id;
	char *name;
	char *owner;        /* the submitting token's name */
	enum kn_job_state state;
	int priority;
	int tasks;
	char *filename;     /* as the client named it, for messages */
	char *spec_yaml;    /* the text as submitted */
	char *spec_json;    /* the normalized spec (spec/kn_job_spec_to_json) */
	int64_t submitted_at;
	int64_t started_at;   /* first attempt's start, 0 = never */
	int64_t ended_at;     /* 0 = not ended */
	int64_t not_before;   /* backoff: not to be placed before this time */
	int attempts;         /* attempts started so far */
	int retries_used;     /* failed attempts that consumed a retry */
	bool cancel_requested;
	char *reason;         /* why queued / why it ended, may be NULL */
	int exit_code;        /* of the last attempt, -1 = none */
	int64_t array_id;     /* an array's element: the array's (its first
				 element's) id; 0 = a single job */
	int array_index;      /* an element's index in its array */
};
void kn_job_row_release(struct kn_job_row *j);

/* Sets j->id on success (via out_id). */
int kn_store_job_insert(struct kn_store *st, const struct kn_job_row *j,
			const struct kn_audit *a, int64_t *out_id,
			struct kn_error *err);
/*
 * A job array: count rows like j, with array_index first .. first +
 * count - 1, consecutive ids, and array_id the first one's, which
 * *out_id receives; one audit row (a's) names the array. All or nothing.
 */
int kn_store_job_insert_array(struct kn_store *st, const struct kn_job_row *j,
			      int first, int count, const struct kn_audit *a,
			      int64_t *out_id, struct kn_error *err);
/* -ENOENT (KN_ENOTFOUND, "job N not found") when missing. */
int kn_store_job_get(struct kn_store *st, int64_t id, struct kn_job_row *out,
		     struct kn_error *err);
/*
 * Write every mutable column of j (state, started_at, ended_at, not_before,
 * attempts, retries_used, cancel_requested, reason, exit_code). a may be
 * NULL for changes the system made on its own.
 */
int kn_store_job_update(struct kn_store *st, const struct kn_job_row *j,
			const struct kn_audit *a, struct kn_error *err);

struct kn_job_filter {
	int state;          /* enum kn_job_state, or -1 = any */
	bool active_only;   /* queued or running */
	const char *owner;  /* NULL = any */
	const char *name;   /* NULL = any */
	int limit;          /* 0 = no limit */
	bool with_spec;     /* also read spec_yaml/spec_json */
	int64_t array_id;   /* only this array's elements; 0 = any job */
	int64_t before_id;  /* > 0: only jobs with a smaller id (a page) */
	bool newest_first;  /* by id descending */
};
/* Ordered by id ascending (f->newest_first: descending). f may be NULL
   (every job). */
int kn_store_job_list(struct kn_store *st, const struct kn_job_filter *f,
		      struct kn_job_row **out, size_t *n,
		      struct kn_error *err);
void kn_job_list_free(struct kn_job_row *rows, size_t n);

/* How many jobs are in each state, and every attempt's goodput summed. */
struct kn_job_totals {
	int64_t by_state[KN_JOB_PREEMPTED + 1]; /* by enum kn_job_state */
	int64_t useful_ms, lost_ms;             /* task-milliseconds */
};
int kn_store_job_totals(struct kn_store *st, struct kn_job_totals *out,
			struct kn_error *err);

struct kn_attempt_row {
	int64_t job_id;
	int number;          /* 1, 2, ... */
	enum kn_job_state state; /* running, succeeded, failed, cancelled,
				    preempted */
	int64_t started_at;
	int64_t ended_at;
	int exit_code;       /* -1 = none */
	int signal;          /* 0 = none */
	char *reason;
	char *checkpoint;    /* the last checkpoint synced, or NULL */
	int64_t checkpoint_at; /* when that checkpoint was taken, 0 = none */
	int64_t restore_ms;  /* time spent restoring before the tasks ran */
	int64_t useful_ms;   /* task-milliseconds kept (goodput) */
	int64_t lost_ms;     /* task-milliseconds lost: after the last
				checkpoint of a failed or preempted attempt,
				plus restore time */
};
void kn_attempt_row_release(struct kn_attempt_row *a);
/* Insert or replace by (job_id, number); -ENOENT when the job is missing. */
int kn_store_attempt_put(struct kn_store *st, const struct kn_attempt_row *a,
			 struct kn_error *err);
/* Ordered by number. */
int kn_store_attempt_list(struct kn_store *st, int64_t job_id,
			  struct kn_attempt_row **out, size_t *n,
			  struct kn_error *err);
void kn_attempt_list_free(struct kn_attempt_row *rows, size_t n);

/* Task states. */
enum kn_task_state {
	KN_TASK_STARTING, /* bound, shim not yet confirmed */
	KN_TASK_RUNNING,
	KN_TASK_EXITED,
};
/* "unknown" for a value outside the enum. */
const char *kn_task_state_name(enum kn_task_state s);
/* -1 when unknown. */
int kn_task_state_parse(const char *name);

struct kn_task_row {
	int64_t job_id;
	int attempt;
	int rank;
	char *node;
	char *devices;       /* "0,1" node-local indexes, "" = none */
	int gpu_milli;       /* per device */
	char *task_dir;
	enum kn_task_state state;
	int shim_pid;        /* 0 = not started */
	int64_t shim_start;  /* the shim's start time (/proc stat field 22) */
	int64_t started_at;
	int64_t ended_at;
	int exit_code;       /* -1 = none */
	int signal;          /* 0 = none */
	int master_port;
};
void kn_task_row_release(struct kn_task_row *t);
/*
 * Insert or replace by (job_id, attempt, rank); -ENOENT when the job is
 * missing. devices NULL is stored as "".
 */
int kn_store_task_put(struct kn_store *st, const struct kn_task_row *t,
		      struct kn_error *err);
/* attempt 0 = every attempt. Ordered by attempt, rank. */
int kn_store_task_list(struct kn_store *st, int64_t job_id, int attempt,
		       struct kn_task_row **out, size_t *n,
		       struct kn_error *err);
void kn_task_list_free(struct kn_task_row *rows, size_t n);

/* ---- outputs: the files a succeeded job left in its store ---- */

struct kn_output_row {
	int64_t job_id;
	char *name;    /* path relative to the job's output directory */
	int64_t size;
	char *sha256;  /* hex */
	char *url;     /* where the store keeps it */
};
void kn_output_row_release(struct kn_output_row *o);
/* Insert or replace by (job_id, name); -ENOENT when the job is missing. */
int kn_store_output_put(struct kn_store *st, const struct kn_output_row *o,
			struct kn_error *err);
/* Ordered by name. */
int kn_store_output_list(struct kn_store *st, int64_t job_id,
			 struct kn_output_row **out, size_t *n,
			 struct kn_error *err);
void kn_output_list_free(struct kn_output_row *rows, size_t n);

/* ---- dev environments: their runs, for idle accounting ---- */

struct kn_devenv_row {
	int64_t job_id;
	char *owner;
	char *name;
	int64_t gpu_milli;  /* GPUs its task holds, in thousandths */
	int64_t started_at;
	int64_t ended_at;   /* 0 while it runs */
	int64_t max_end_at; /* started_at + max_duration; 0 = none */
	int64_t idle_ms;    /* time it ran idle, every attempt's */
	char *stop;         /* "idle", "max_duration", or "" (anything else) */
};
void kn_devenv_row_release(struct kn_devenv_row *d);
void kn_devenv_rows_free(struct kn_devenv_row *rows, size_t n);
/* Record a run's start (job_id, owner, name, gpu_milli, started_at,
   max_end_at); once: a second call for the job changes nothing. */
int kn_store_devenv_start(struct kn_store *st, const struct kn_devenv_row *d,
			  struct kn_error *err);
/* An attempt ended: idle_ms is added to the run's, stop replaces its. */
int kn_store_devenv_end(struct kn_store *st, int64_t job_id, int64_t ended_at,
			int64_t idle_ms, const char *stop, struct kn_error *err);
/* The runs that overlap [since, until), by owner, name and start. */
int kn_store_devenv_list(struct kn_store *st, int64_t since, int64_t until,
			 struct kn_devenv_row **out, size_t *n,
			 struct kn_error *err);
/* The first run of owner's name started after after: 0 and *out, or
   -ENOENT. */
int kn_store_devenv_next(struct kn_store *st, const char *owner,
			 const char *name, int64_t after,
			 struct kn_devenv_row *out, struct kn_error *err);

/* ---- alerts: rules that fired, and when they resolved ---- */

struct kn_alert_row {
	int64_t id;
	char *fingerprint; /* rule name + label set: one alert's identity */
	char *rule;
	char *severity;    /* info, warning, critical */
	char *state;       /* firing, resolved */
	char *labels_json; /* {"gpu":"0",...} */
	char *summary;
	double value;      /* the expression's value when it fired */
	int64_t active_at; /* when the condition began to hold */
	int64_t fired_at;
	int64_t resolved_at; /* 0 while firing */
};
void kn_alert_row_release(struct kn_alert_row *a);
/* Record a firing alert (state is set to firing); *out_id may be NULL. */
int kn_store_alert_fire(struct kn_store *st, const struct kn_alert_row *a,
			int64_t *out_id, struct kn_error *err);
/*
 * The firing alert with this fingerprint is resolved at `at`; 0 also
 * when none is firing (nothing to do).
 */
int kn_store_alert_resolve(struct kn_store *st, const char *fingerprint,
			   int64_t at, struct kn_error *err);
/* Resolve every firing alert (a starting server has no state for them). */
int kn_store_alert_resolve_all(struct kn_store *st, int64_t at,
			       struct kn_error *err);
/*
 * Firing alerts (newest first), then alerts resolved at or after
 * resolved_since (newest first); at most limit rows in all.
 */
int kn_store_alert_list(struct kn_store *st, int64_t resolved_since,
			int limit, struct kn_alert_row **out, size_t *n,
			struct kn_error *err);
void kn_alert_list_free(struct kn_alert_row *rows, size_t n);

/* ---- idempotency keys: a create's answer, by caller and key ---- */

struct kn_idem_row {
	char *owner;       /* the caller's token name */
	char *key;         /* the Idempotency-Key header as sent */
	char *route;       /* "POST /v1/jobs": a key names one kind of create */
	char *body_sha256; /* hex, of the request body */
	int status;        /* the answer's HTTP status */
	char *answer;      /* the answer's JSON body */
	int64_t created_at;
};
void kn_idem_row_release(struct kn_idem_row *r);
/*
 * The row for (owner, key) created at or after since: 1 with *out
 * filled, 0 when there is none (*out untouched).
 */
int kn_store_idem_get(struct kn_store *st, const char *owner, const char *key,
		      int64_t since, struct kn_idem_row *out,
		      struct kn_error *err);
/*
 * Record r, replacing an expired row with its owner and key; inside
 * kn_store_begin it commits with the object the answer names.
 */
int kn_store_idem_put(struct kn_store *st, const struct kn_idem_row *r,
		      struct kn_error *err);
/* Delete the rows created before `before`. */
int kn_store_idem_expire(struct kn_store *st, int64_t before,
			 struct kn_error *err);

/* ---- nodes and devices ---- */

struct kn_device_row {
	char *node;
	int index;
	char *uuid;
	char *model;
	int64_t memory_bytes;
	bool simulated;
};

struct kn_node_row {
	char *name;
	char *state;       /* "ready", "cordoned", "draining", "unhealthy" */
	char *labels_json; /* {"zone":"1",...} */
	char *taints_json; /* [{"key":..,"value":..,"effect":..}] */
	int cpu_milli;
	int64_t memory_bytes;
	bool simulated;
	int64_t updated_at;
	char *reason;      /* why it is not ready, or NULL */
	struct kn_device_row *devices;
	size_t n_devices;
};
void kn_node_row_release(struct kn_node_row *n);
/*
 * Insert or replace the node and replace its whole device list, in one
 * transaction. Each device's node field is ignored: the devices belong to
 * n. labels_json and taints_json NULL are stored as {} and [].
 */
int kn_store_node_put(struct kn_store *st, const struct kn_node_row *n,
		      struct kn_error *err);
/* Ordered by name, each with its devices ordered by index. */
int kn_store_node_list(struct kn_store *st, struct kn_node_row **out,
		       size_t *n, struct kn_error *err);
void kn_node_list_free(struct kn_node_row *rows, size_t n);

/* ---- deployments: long-running replicas, each one a job ---- */

struct kn_deployment_row {
	char *name;       /* primary key */
	char *owner;      /* the token that first deployed it */
	char *filename;   /* the spec file as the client named it */
	char *spec_yaml;  /* the text as deployed */
	char *spec_json;  /* spec/kn_deployment_spec_to_json */
	char *model_dir;  /* KILN_MODEL_DIR of every replica */
	int replicas;     /* wanted */
	int64_t generation; /* bumped by each change of spec or scale */
	int rollout_next; /* the replica a rollout restarts next, -1 = none */
	int64_t created_at;
	int64_t updated_at;
};
void kn_deployment_row_release(struct kn_deployment_row *d);
/* Insert, or replace every column but created_at, by name. */
int kn_store_deployment_put(struct kn_store *st,
			    const struct kn_deployment_row *d,
			    const struct kn_audit *a, struct kn_error *err);
/* Ordered by name. */
int kn_store_deployment_list(struct kn_store *st,
			     struct kn_deployment_row **out, size_t *n,
			     struct kn_error *err);
void kn_deployment_list_free(struct kn_deployment_row *rows, size_t n);
/* Delete it and its replica rows; -ENOENT when there is none. */
int kn_store_deployment_delete(struct kn_store *st, const char *name,
			       const struct kn_audit *a, struct kn_error *err);

struct kn_replica_row {
	char *deployment;
	int replica;    /* 0.. */
	int64_t job_id; /* the job it runs as now */
};
/* Insert or replace by (deployment, replica); both must exist. */
int kn_store_replica_put(struct kn_store *st, const struct kn_replica_row *r,
			 struct kn_error *err);
/* Nothing to delete is not an error. */
int kn_store_replica_delete(struct kn_store *st, const char *deployment,
			    int replica, struct kn_error *err);
/* Every replica, ordered by deployment and replica. */
int kn_store_replica_list(struct kn_store *st, struct kn_replica_row **out,
			  size_t *n, struct kn_error *err);
void kn_replica_list_free(struct kn_replica_row *rows, size_t n);

/* ---- gateway keys (data-plane credentials; only the hash is stored) ---- */

struct kn_gateway_key_row {
	int64_t id;
	char *name;             /* unique among active keys */
	char *hash;             /* hex sha256 of the whole key */
	char *deployments_json; /* ["chat", ...] */
	int64_t rpm, tpm;       /* per minute, 0 = no limit */
	int64_t quota_day, quota_month; /* tokens, 0 = no quota */
	char *created_by;
	int64_t created_at;
	int64_t revoked_at;     /* 0 = active */
};
void kn_gateway_key_row_release(struct kn_gateway_key_row *k);
/* KN_ECONFLICT when an active key has that name. */
int kn_store_gateway_key_insert(struct kn_store *st,
				const struct kn_gateway_key_row *k,
				const struct kn_audit *a, int64_t *out_id,
				struct kn_error *err);
/* By id; revoked keys too unless active_only. */
int kn_store_gateway_key_list(struct kn_store *st, bool active_only,
			      struct kn_gateway_key_row **out, size_t *n,
			      struct kn_error *err);
void kn_gateway_key_list_free(struct kn_gateway_key_row *rows, size_t n);
/* Revoke the active key with that name; -ENOENT when none. */
int kn_store_gateway_key_revoke(struct kn_store *st, const char *name,
				const struct kn_audit *a,
				struct kn_error *err);


/* ---- the cost ledger's record (docs/cost.md) ---- */

/*
 * The node is in state from `at`: its open interval (if any) ends at
 * `at` and a new one starts. One transaction (or the caller's).
 */
int kn_store_node_state_open(struct kn_store *st, const char *node,
			     const char *state, int64_t at,
			     struct kn_error *err);
/* End the node's open interval at `at`: it is gone (a pool scaled it
   down). One transaction (or the caller's). */
int kn_store_node_state_close(struct kn_store *st, const char *node,
			      int64_t at, struct kn_error *err);
/* End every open interval at `at` (a clean stop). */
int kn_store_node_state_close_all(struct kn_store *st, int64_t at,
				  struct kn_error *err);

struct kn_node_state_row {
	char *node;
	char *state;        /* as struct kn_node_row's */
	int64_t started_at;
	int64_t ended_at;   /* 0 while it holds */
};
/* Intervals open or ended after since, by node and start. */
int kn_store_node_state_list(struct kn_store *st, int64_t since,
			     struct kn_node_state_row **out, size_t *n,
			     struct kn_error *err);
void kn_node_state_list_free(struct kn_node_state_row *rows, size_t n);

/* A task that held devices, as the ledger prices it. */
struct kn_cost_task_row {
	int64_t job_id;
	int attempt;
	int rank;
	char *node;
	char *devices;       /* as struct kn_task_row's, never "" */
	int gpu_milli;       /* per device; 0 for a MIG instance */
	int64_t started_at;
	int64_t ended_at;    /* 0 while it runs */
	int attempt_state;   /* enum kn_job_state, -1 when no attempt row */
	int64_t checkpoint_at; /* the attempt's last checkpoint, 0 = none */
	char *owner;         /* the job's */
	char *deployment;    /* the deployment it ran for, or NULL */
};
/* Tasks with devices, started, and running or ended after since; by
   job, attempt and rank. Replica jobs are tied to their deployment by
   kn_store_replica_put (kept after the replica moves on). */
int kn_store_cost_task_list(struct kn_store *st, int64_t since,
			    struct kn_cost_task_row **out, size_t *n,
			    struct kn_error *err);
void kn_cost_task_list_free(struct kn_cost_task_row *rows, size_t n);
/* The same for tasks without devices (CPU and memory only). */
int kn_store_cost_cpu_task_list(struct kn_store *st, int64_t since,
				struct kn_cost_task_row **out, size_t *n,
				struct kn_error *err);

/* ---- task usage: one sketch per task and resource (src/cost) ---- */

struct kn_task_usage_row {
	int64_t job_id;
	int attempt;
	int rank;
	char *resource;   /* "cpu", "memory", "gpu_memory", "gpu_util" */
	int64_t samples;
	double sum, max;
	char *histogram;  /* kn_usage_hist_encode's text */
	/* Listed rows only (NULL / 0 from get): */
	char *job_name;
	char *spec_json;  /* the job's normalized spec */
	char *node;
	char *devices;    /* the task's, "" without GPUs */
	int gpu_milli;
};
void kn_task_usage_row_release(struct kn_task_usage_row *u);
/* One task's sketch of a resource; -ENOENT (KN_ENOTFOUND) when none yet. */
int kn_store_task_usage_get(struct kn_store *st, int64_t job_id, int attempt,
			    int rank, const char *resource,
			    struct kn_task_usage_row *out, struct kn_error *err);
/* Insert or replace the sketch (its identity and counts from u). */
int kn_store_task_usage_put(struct kn_store *st,
			    const struct kn_task_usage_row *u, int64_t now_ms,
			    struct kn_error *err);
/* The sketches of tasks started and running or ended after since, by
   job, attempt, rank and resource, with their job and task. */
int kn_store_task_usage_list(struct kn_store *st, int64_t since,
			     struct kn_task_usage_row **out, size_t *n,
			     struct kn_error *err);
void kn_task_usage_list_free(struct kn_task_usage_row *rows, size_t n);

/* ---- models (src/registry: versions, aliases, signatures) ---- */

struct kn_model_row {
	char *name;
	int64_t versions;   /* how many exist */
	int64_t latest;     /* the highest, 0 when none */
	int64_t created_at;
	int64_t updated_at; /* the newest version's time */
};
int kn_store_model_list(struct kn_store *st, struct kn_model_row **out,
			size_t *n, struct kn_error *err);
void kn_model_list_free(struct kn_model_row *rows, size_t n);

struct kn_model_version_row {
	char *name;
	int64_t version;
	char *manifest; /* the canonical JSON, as signed */
	char *created_by;
	int64_t created_at;
};
void kn_model_version_row_release(struct kn_model_version_row *v);
/*
 * Take the next version number of model name, creating the model on its
 * first push. Numbers are never given twice, even when the version is
 * then deleted (its store copy could not be written).
 */
int kn_store_model_version_next(struct kn_store *st, const char *name,
				int64_t now_ms, int64_t *out,
				struct kn_error *err);
int kn_store_model_version_insert(struct kn_store *st,
				  const struct kn_model_version_row *v,
				  const struct kn_audit *a,
				  struct kn_error *err);
int kn_store_model_version_delete(struct kn_store *st, const char *name,
				  int64_t version, struct kn_error *err);
/* -ENOENT when there is no such version. */
int kn_store_model_version_get(struct kn_store *st, const char *name,
			       int64_t version,
			       struct kn_model_version_row *out,
			       struct kn_error *err);
/* Oldest first. */
int kn_store_model_version_list(struct kn_store *st, const char *name,
				struct kn_model_version_row **out, size_t *n,
				struct kn_error *err);
void kn_model_version_list_free(struct kn_model_version_row *rows, size_t n);

/*
 * An alias as it is now (action "current", from_version 0), or one move
 * of its history (action "promote" or "rollback", from_version 0 when
 * the alias was new).
 */
struct kn_model_alias_row {
	char *alias;
	int64_t version; /* where it points (after the move) */
	char *action;
	int64_t from_version;
	char *actor;
	int64_t time_ms;
};
/* -ENOENT when name has no such alias. */
int kn_store_model_alias_get(struct kn_store *st, const char *name,
			     const char *alias, int64_t *version,
			     struct kn_error *err);
/* Point alias at ev->version and append ev to its history. */
int kn_store_model_alias_move(struct kn_store *st, const char *name,
			      const struct kn_model_alias_row *ev,
			      const struct kn_audit *a, struct kn_error *err);
/* The aliases now, by name. */
int kn_store_model_alias_list(struct kn_store *st, const char *name,
			      struct kn_model_alias_row **out, size_t *n,
			      struct kn_error *err);
/* Every move of every alias of name, oldest first. */
int kn_store_model_alias_history(struct kn_store *st, const char *name,
				 struct kn_model_alias_row **out, size_t *n,
				 struct kn_error *err);
void kn_model_alias_list_free(struct kn_model_alias_row *rows, size_t n);

struct kn_model_signature_row {
	char *key_id;     /* sha256 hex of the raw public key */
	char *public_key; /* base64 of the raw 32 bytes */
	char *signature;  /* base64 of the 64 bytes */
	char *signed_by;
	int64_t signed_at;
};
/* KN_ECONFLICT when that key already signed that version. */
int kn_store_model_signature_insert(struct kn_store *st, const char *name,
				    int64_t version,
				    const struct kn_model_signature_row *sig,
				    const struct kn_audit *a,
				    struct kn_error *err);
int kn_store_model_signature_list(struct kn_store *st, const char *name,
				  int64_t version,
				  struct kn_model_signature_row **out,
				  size_t *n, struct kn_error *err);
void kn_model_signature_list_free(struct kn_model_signature_row *rows,
				  size_t n);

/* ---- model re-validation (server/revalidate.c) ---- */

struct kn_revalidation_row {
	char *name, *alias; /* the key: the version alias names is tested */
	char *owner;        /* its evaluation jobs run as this user */
	char *spec_yaml;    /* the evaluation job spec, as sent */
	char *filename;     /* the spec's name or absolute path */
	int64_t every_ms;
	char *thresholds_json; /* {"max": {metric: n}, "min": {metric: n}} */
	bool rollback;      /* a failing run rolls the alias back */
	int64_t created_at;
	char *deployment;   /* set by this deployment's spec; NULL: by hand */
};
/* Insert or replace by (name, alias); a may be NULL. */
int kn_store_revalidation_put(struct kn_store *st,
			      const struct kn_revalidation_row *r,
			      const struct kn_audit *a, struct kn_error *err);
/* Ordered by name, alias. */
int kn_store_revalidation_list(struct kn_store *st,
			       struct kn_revalidation_row **out, size_t *n,
			       struct kn_error *err);
void kn_revalidation_list_free(struct kn_revalidation_row *rows, size_t n);
/* Remove (name, alias)'s, if any; a may be NULL. */
int kn_store_revalidation_delete(struct kn_store *st, const char *name,
				 const char *alias, const struct kn_audit *a,
				 struct kn_error *err);

struct kn_evaluation_row {
	int64_t id; /* set by the store */
	char *name;
	int64_t version;
	char *alias;   /* the alias that named the version */
	int64_t job_id; /* 0 when no job ran (the version was refused) */
	char *outcome; /* "passed", "failed" (a threshold), "error" */
	char *metrics_json; /* the numbers of metrics.json; may be NULL */
	char *detail;       /* why it failed; NULL when it passed */
	int64_t time_ms;
};
int kn_store_evaluation_add(struct kn_store *st,
			    const struct kn_evaluation_row *e,
			    struct kn_error *err);
/* One version's evaluations, oldest first. */
int kn_store_evaluation_list(struct kn_store *st, const char *name,
			     int64_t version, struct kn_evaluation_row **out,
			     size_t *n, struct kn_error *err);
void kn_evaluation_list_free(struct kn_evaluation_row *rows, size_t n);

/* ---- workflow runs and their steps (server/workflows.c) ---- */

struct kn_wf_run_row {
	int64_t id;
	char *name;       /* the workflow's name */
	char *owner;      /* the token that ran it */
	char *filename;   /* the workflow file as the client named it */
	char *path;       /* its absolute path, or "" */
	char *spec_yaml;  /* the workflow's text as sent */
	char *files_json; /* {"jobs/a.yaml": "text", ...}: job files as sent */
	char *digest;     /* sha256 hex of the workflow file */
	char *revision;   /* git revision of its directory, or NULL */
	char *state;      /* queued, running, succeeded, failed, cancelled */
	char *reason;     /* why it ended, or NULL */
	int64_t submitted_at, started_at, ended_at; /* 0 = not yet */
};
void kn_wf_run_row_release(struct kn_wf_run_row *r);

struct kn_wf_step_row {
	int64_t run_id;
	int index;          /* the step's place in the workflow file */
	char *name;
	char *state;        /* pending, running, succeeded, failed, skipped,
			       cancelled */
	bool by_condition;  /* skipped by a false `when` */
	int64_t job_id;     /* the job it runs as now, 0 = none yet */
	int attempts;       /* jobs started for it */
	int64_t started_at, ended_at;
	char *reason;       /* may be NULL */
	char *metrics_json; /* the job's metrics.json object, or NULL */
};
void kn_wf_step_row_release(struct kn_wf_step_row *p);

/* The run and its steps (run_id taken from the new run); sets *out_id. */
int kn_store_wf_run_insert(struct kn_store *st, const struct kn_wf_run_row *r,
			   const struct kn_wf_step_row *steps, size_t n,
			   const struct kn_audit *a, int64_t *out_id,
			   struct kn_error *err);
/* -ENOENT (KN_ENOTFOUND) when missing. */
int kn_store_wf_run_get(struct kn_store *st, int64_t id,
			struct kn_wf_run_row *out, struct kn_error *err);
/* Write state, reason, started_at and ended_at; a may be NULL. */
int kn_store_wf_run_update(struct kn_store *st, const struct kn_wf_run_row *r,
			   const struct kn_audit *a, struct kn_error *err);
/* Ordered by id; active_only: queued or running. */
int kn_store_wf_run_list(struct kn_store *st, bool active_only,
			 struct kn_wf_run_row **out, size_t *n,
			 struct kn_error *err);
void kn_wf_run_list_free(struct kn_wf_run_row *rows, size_t n);
/* Insert or replace by (run_id, index). */
int kn_store_wf_step_put(struct kn_store *st, const struct kn_wf_step_row *p,
			 struct kn_error *err);
/* Ordered by index. */
int kn_store_wf_step_list(struct kn_store *st, int64_t run_id,
			  struct kn_wf_step_row **out, size_t *n,
			  struct kn_error *err);
void kn_wf_step_list_free(struct kn_wf_step_row *rows, size_t n);
/* The run whose step runs as job_id; -ENOENT when none does. */
int kn_store_wf_run_of_job(struct kn_store *st, int64_t job_id,
			   int64_t *run_id, struct kn_error *err);

/*
 * One attempt of a workflow step: a job it started, or one go of a
 * register or deploy step (job_id 0, as for a start that queued nothing).
 * Attempts count on across `kiln workflow retry`; outcome is NULL while
 * the attempt runs, else the job's end state ("succeeded", "failed",
 * "cancelled") or the step's.
 */
struct kn_wf_attempt_row {
	int64_t run_id;
	int index;       /* the step's */
	int attempt;     /* 1, 2, ... per step */
	int64_t job_id;
	char *outcome;
	int64_t started_at, ended_at; /* ended_at 0: not yet */
};
/* Insert or replace by (run_id, index, attempt). */
int kn_store_wf_attempt_put(struct kn_store *st,
			    const struct kn_wf_attempt_row *a,
			    struct kn_error *err);
/* The run's attempts, ordered by step index then attempt. */
int kn_store_wf_attempt_list(struct kn_store *st, int64_t run_id,
			     struct kn_wf_attempt_row **out, size_t *n,
			     struct kn_error *err);
void kn_wf_attempt_list_free(struct kn_wf_attempt_row *rows, size_t n);

/* ---- job code revisions (the git revision of a job's workdir) ---- */

/* -ENOENT when the job is missing. */
int kn_store_job_revision_put(struct kn_store *st, int64_t job_id,
			      const char *revision, struct kn_error *err);
/* *out malloc'd; -ENOENT (KN_ENOTFOUND) when none was recorded. */
int kn_store_job_revision_get(struct kn_store *st, int64_t job_id,
			      char **out, struct kn_error *err);

/* ---- job inputs: a job spec's inputs as its first fetch found them ---- */

struct kn_job_input_row {
	int64_t job_id;
	char *name;   /* the file's name in $KILN_INPUT_DIR */
	char *url;    /* where it was fetched from */
	char *sha256; /* hex */
	int64_t size;
	int attempt;  /* the attempt whose fetch recorded it */
	int64_t recorded_at;
};
void kn_job_input_row_release(struct kn_job_input_row *r);
/* Recorded once per (job_id, name): a second put of the same name keeps
   the first. -ENOENT when the job is missing. */
int kn_store_job_input_put(struct kn_store *st,
			   const struct kn_job_input_row *r,
			   struct kn_error *err);
/* Ordered by name. */
int kn_store_job_input_list(struct kn_store *st, int64_t job_id,
			    struct kn_job_input_row **out, size_t *n,
			    struct kn_error *err);
void kn_job_input_list_free(struct kn_job_input_row *rows, size_t n);

#endif
