/*
 * store: kiln's state in one SQLite file, and every SQL statement kiln runs.
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
 * - The schema moves forward only, through MIGRATIONS[], one entry per
 *   version, applied in one transaction; user_version records where a file
 *   stands.
 * - States are stored as their API names, not enum numbers, so the file
 *   reads the same under sqlite3(1) and survives reordering of the enums.
 */
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <sqlite3.h>

/*
 * How long a write waits for another connection's lock (a CLI tool reading
 * the file, a second server refused later) before failing with "database
 * is locked".
 */
#define STORE_BUSY_TIMEOUT_MS 5000

/*
 * last_used_at is informational ("used 3m ago"); writing it on every API
 * request would turn each read into an fsync'd write, so it is refreshed
 * only when older than this.
 */
#define TOKEN_LAST_USED_GRANULARITY_MS 60000

/* The audit list's page size when the filter names none. */
#define AUDIT_LIST_DEFAULT_LIMIT 100

/* ---- schema and migrations ---- */

static const char SQL_SCHEMA_V1[] =
	"CREATE TABLE audit ("
	" id INTEGER PRIMARY KEY AUTOINCREMENT,"
	" time_ms INTEGER NOT NULL,"
	" actor TEXT NOT NULL,"
	" role TEXT,"
	" action TEXT NOT NULL,"
	" object TEXT NOT NULL,"
	" outcome TEXT NOT NULL,"
	" detail TEXT);"
	"CREATE INDEX audit_by_time ON audit (time_ms);"

	"CREATE TABLE tokens ("
	" id INTEGER PRIMARY KEY AUTOINCREMENT,"
	" name TEXT NOT NULL,"
	" role TEXT NOT NULL,"
	" hash TEXT NOT NULL,"
	" created_by TEXT NOT NULL,"
	" created_at INTEGER NOT NULL,"
	" revoked_at INTEGER NOT NULL DEFAULT 0,"
	" last_used_at INTEGER NOT NULL DEFAULT 0);"
	/* A revoked token's name may be reused; an active one's may not. */
	"CREATE UNIQUE INDEX tokens_active_name ON tokens (name)"
	" WHERE revoked_at = 0;"
	"CREATE INDEX tokens_active_hash ON tokens (hash) WHERE revoked_at = 0;"

	/* spec_yaml and spec_json come last: they are the large columns and
	 * listings that skip them then never touch overflow pages. */
	"CREATE TABLE jobs ("
	" id INTEGER PRIMARY KEY AUTOINCREMENT,"
	" name TEXT NOT NULL,"
	" owner TEXT NOT NULL,"
	" state TEXT NOT NULL,"
	" priority INTEGER NOT NULL,"
	" tasks INTEGER NOT NULL,"
	" filename TEXT,"
	" submitted_at INTEGER NOT NULL,"
	" started_at INTEGER NOT NULL,"
	" ended_at INTEGER NOT NULL,"
	" not_before INTEGER NOT NULL,"
	" attempts INTEGER NOT NULL,"
	" retries_used INTEGER NOT NULL,"
	" cancel_requested INTEGER NOT NULL,"
	" reason TEXT,"
	" exit_code INTEGER NOT NULL,"
	" spec_yaml TEXT,"
	" spec_json TEXT);"
	"CREATE INDEX jobs_by_state ON jobs (state);"
	"CREATE INDEX jobs_by_owner ON jobs (owner);"

	"CREATE TABLE attempts ("
	" job_id INTEGER NOT NULL REFERENCES jobs (id),"
	" number INTEGER NOT NULL,"
	" state TEXT NOT NULL,"
	" started_at INTEGER NOT NULL,"
	" ended_at INTEGER NOT NULL,"
	" exit_code INTEGER NOT NULL,"
	" signal INTEGER NOT NULL,"
	" reason TEXT,"
	" PRIMARY KEY (job_id, number)) WITHOUT ROWID;"

	"CREATE TABLE tasks ("
	" job_id INTEGER NOT NULL REFERENCES jobs (id),"
	" attempt INTEGER NOT NULL,"
	" rank INTEGER NOT NULL,"
	" node TEXT NOT NULL,"
	" devices TEXT NOT NULL,"
	" gpu_milli INTEGER NOT NULL,"
	" task_dir TEXT,"
	" state TEXT NOT NULL,"
	" shim_pid INTEGER NOT NULL,"
	" shim_start INTEGER NOT NULL,"
	" started_at INTEGER NOT NULL,"
	" ended_at INTEGER NOT NULL,"
	" exit_code INTEGER NOT NULL,"
	" signal INTEGER NOT NULL,"
	" master_port INTEGER NOT NULL,"
	" PRIMARY KEY (job_id, attempt, rank)) WITHOUT ROWID;"
	"CREATE INDEX tasks_by_state ON tasks (state);"

	"CREATE TABLE nodes ("
	" name TEXT NOT NULL PRIMARY KEY,"
	" state TEXT NOT NULL,"
	" labels_json TEXT NOT NULL,"
	" taints_json TEXT NOT NULL,"
	" cpu_milli INTEGER NOT NULL,"
	" memory_bytes INTEGER NOT NULL,"
	" simulated INTEGER NOT NULL,"
	" updated_at INTEGER NOT NULL) WITHOUT ROWID;"

	/* idx is struct kn_device_row's index ("index" is an SQL keyword). */
	"CREATE TABLE devices ("
	" node TEXT NOT NULL REFERENCES nodes (name),"
	" idx INTEGER NOT NULL,"
	" uuid TEXT,"
	" model TEXT,"
	" memory_bytes INTEGER NOT NULL,"
	" simulated INTEGER NOT NULL,"
	" PRIMARY KEY (node, idx)) WITHOUT ROWID;";

/*
 * v2: goodput per attempt (the last synced checkpoint, restore time,
 * useful and lost task-milliseconds), why a node is not ready, and the
 * files a job left in its store.
 */
static const char SQL_SCHEMA_V2[] =
	"ALTER TABLE attempts ADD COLUMN checkpoint TEXT;"
	"ALTER TABLE attempts ADD COLUMN checkpoint_at INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE attempts ADD COLUMN restore_ms INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE attempts ADD COLUMN useful_ms INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE attempts ADD COLUMN lost_ms INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE nodes ADD COLUMN reason TEXT;"
	"CREATE TABLE outputs ("
	" job_id INTEGER NOT NULL REFERENCES jobs (id),"
	" name TEXT NOT NULL,"
	" size INTEGER NOT NULL,"
	" sha256 TEXT NOT NULL,"
	" url TEXT NOT NULL,"
	" PRIMARY KEY (job_id, name)) WITHOUT ROWID;";

/* v3: alerts that fired and resolved (the server's alert rules). */
static const char SQL_SCHEMA_V3[] =
	"CREATE TABLE alerts ("
	" id INTEGER PRIMARY KEY AUTOINCREMENT,"
	" fingerprint TEXT NOT NULL,"
	" rule TEXT NOT NULL,"
	" severity TEXT NOT NULL,"
	" state TEXT NOT NULL CHECK (state IN ('firing', 'resolved')),"
	" labels_json TEXT NOT NULL,"
	" summary TEXT NOT NULL,"
	" value REAL,"
	" active_at INTEGER NOT NULL,"
	" fired_at INTEGER NOT NULL,"
	" resolved_at INTEGER NOT NULL DEFAULT 0);"
	"CREATE INDEX alerts_state ON alerts (state, fingerprint);"
	"CREATE INDEX alerts_resolved ON alerts (resolved_at);";

/*
 * v4: deployments, the job each replica runs as, and gateway keys. Key
 * names are unique among active keys only, like tokens, so a revoked
 * name can be used again.
 */
static const char SQL_SCHEMA_V4[] =
	"CREATE TABLE deployments ("
	" name TEXT PRIMARY KEY,"
	" owner TEXT NOT NULL,"
	" filename TEXT NOT NULL,"
	" spec_yaml TEXT NOT NULL,"
	" spec_json TEXT NOT NULL,"
	" model_dir TEXT NOT NULL,"
	" replicas INTEGER NOT NULL,"
	" generation INTEGER NOT NULL,"
	" rollout_next INTEGER NOT NULL DEFAULT -1,"
	" created_at INTEGER NOT NULL,"
	" updated_at INTEGER NOT NULL) WITHOUT ROWID;"
	"CREATE TABLE deployment_replicas ("
	" deployment TEXT NOT NULL REFERENCES deployments (name)"
	"  ON DELETE CASCADE,"
	" replica INTEGER NOT NULL,"
	" job_id INTEGER NOT NULL REFERENCES jobs (id),"
	" PRIMARY KEY (deployment, replica)) WITHOUT ROWID;"
	"CREATE TABLE gateway_keys ("
	" id INTEGER PRIMARY KEY AUTOINCREMENT,"
	" name TEXT NOT NULL,"
	" hash TEXT NOT NULL,"
	" deployments_json TEXT NOT NULL,"
	" rpm INTEGER NOT NULL,"
	" tpm INTEGER NOT NULL,"
	" quota_day INTEGER NOT NULL,"
	" quota_month INTEGER NOT NULL,"
	" created_by TEXT NOT NULL,"
	" created_at INTEGER NOT NULL,"
	" revoked_at INTEGER NOT NULL DEFAULT 0);"
	"CREATE UNIQUE INDEX gateway_keys_active_name ON gateway_keys (name)"
	" WHERE revoked_at = 0;";

/*
 * v5: the audit hash chain. Each row keeps the previous row's hash and its
 * own, hash = HMAC-SHA256(key, prev || the row's fields); rows written
 * before v5 have NULL here until kn_store_audit_chain_start chains them.
 */
static const char SQL_SCHEMA_V5[] =
	"ALTER TABLE audit ADD COLUMN prev_hash TEXT;"
	"ALTER TABLE audit ADD COLUMN hash TEXT;";

/*
 * v6: the cost ledger's record: each node's state over time (an interval
 * per state, ended_at 0 while it holds), and which deployment a job ran
 * for (deployment_replicas keeps only each replica's current job).
 */
static const char SQL_SCHEMA_V6[] =
	"CREATE TABLE node_states ("
	" node TEXT NOT NULL,"
	" state TEXT NOT NULL,"
	" started_at INTEGER NOT NULL,"
	" ended_at INTEGER NOT NULL DEFAULT 0);"
	"CREATE INDEX node_states_by_end ON node_states (ended_at);"
	"CREATE TABLE job_deployments ("
	" job_id INTEGER PRIMARY KEY REFERENCES jobs (id),"
	" deployment TEXT NOT NULL);"
	"INSERT OR IGNORE INTO job_deployments (job_id, deployment)"
	" SELECT job_id, deployment FROM deployment_replicas;";

/*
 * v7: the model registry (src/registry): models with their next version
 * number (never reused), immutable versions holding their manifest's
 * canonical JSON, aliases with every move kept in a history, and the
 * signatures that verified when they were posted.
 */
static const char SQL_SCHEMA_V7[] =
	"CREATE TABLE models ("
	" name TEXT PRIMARY KEY,"
	" next_version INTEGER NOT NULL,"
	" created_at INTEGER NOT NULL) WITHOUT ROWID;"
	"CREATE TABLE model_versions ("
	" name TEXT NOT NULL REFERENCES models (name),"
	" version INTEGER NOT NULL,"
	" manifest TEXT NOT NULL,"
	" created_by TEXT NOT NULL,"
	" created_at INTEGER NOT NULL,"
	" PRIMARY KEY (name, version)) WITHOUT ROWID;"
	"CREATE TABLE model_aliases ("
	" name TEXT NOT NULL REFERENCES models (name),"
	" alias TEXT NOT NULL,"
	" version INTEGER NOT NULL,"
	" updated_by TEXT NOT NULL,"
	" updated_at INTEGER NOT NULL,"
	" PRIMARY KEY (name, alias)) WITHOUT ROWID;"
	"CREATE TABLE model_alias_history ("
	" id INTEGER PRIMARY KEY AUTOINCREMENT,"
	" name TEXT NOT NULL REFERENCES models (name),"
	" alias TEXT NOT NULL,"
	" action TEXT NOT NULL,"
	" from_version INTEGER NOT NULL,"
	" to_version INTEGER NOT NULL,"
	" actor TEXT NOT NULL,"
	" time_ms INTEGER NOT NULL);"
	"CREATE INDEX model_alias_history_name ON model_alias_history (name, id);"
	"CREATE TABLE model_signatures ("
	" name TEXT NOT NULL,"
	" version INTEGER NOT NULL,"
	" key_id TEXT NOT NULL,"
	" public_key TEXT NOT NULL,"
	" signature TEXT NOT NULL,"
	" signed_by TEXT NOT NULL,"
	" signed_at INTEGER NOT NULL,"
	" PRIMARY KEY (name, version, key_id),"
	" FOREIGN KEY (name, version) REFERENCES model_versions (name, version)"
	") WITHOUT ROWID;";

/*
 * v8: workflow runs and their steps. A run keeps the texts the client
 * sent (the workflow and its job files), so a restart or a retry starts
 * the same jobs; a step names the job it runs as now. Step states follow
 * the engine's (server/workflows.c); by_condition marks a step skipped by
 * a false `when` (directly or through a need skipped so), which does not
 * fail its run.
 */
static const char SQL_SCHEMA_V8[] =
	"CREATE TABLE workflow_runs ("
	" id INTEGER PRIMARY KEY AUTOINCREMENT,"
	" name TEXT NOT NULL,"
	" owner TEXT NOT NULL,"
	" filename TEXT NOT NULL,"
	" path TEXT NOT NULL,"
	" spec_yaml TEXT NOT NULL,"
	" files_json TEXT NOT NULL,"
	" digest TEXT NOT NULL,"
	" revision TEXT,"
	" state TEXT NOT NULL CHECK (state IN ('queued', 'running',"
	"  'succeeded', 'failed', 'cancelled')),"
	" reason TEXT,"
	" submitted_at INTEGER NOT NULL,"
	" started_at INTEGER NOT NULL DEFAULT 0,"
	" ended_at INTEGER NOT NULL DEFAULT 0);"
	"CREATE INDEX workflow_runs_state ON workflow_runs (state);"
	"CREATE TABLE workflow_steps ("
	" run_id INTEGER NOT NULL REFERENCES workflow_runs (id),"
	" idx INTEGER NOT NULL,"
	" name TEXT NOT NULL,"
	" state TEXT NOT NULL CHECK (state IN ('pending', 'running',"
	"  'succeeded', 'failed', 'skipped', 'cancelled')),"
	" by_condition INTEGER NOT NULL DEFAULT 0,"
	" job_id INTEGER NOT NULL DEFAULT 0,"
	" attempts INTEGER NOT NULL DEFAULT 0,"
	" started_at INTEGER NOT NULL DEFAULT 0,"
	" ended_at INTEGER NOT NULL DEFAULT 0,"
	" reason TEXT,"
	" metrics_json TEXT,"
	" PRIMARY KEY (run_id, idx)) WITHOUT ROWID;"
	"CREATE INDEX workflow_steps_job ON workflow_steps (job_id)"
	" WHERE job_id != 0;";

/*
 * v9: model re-validation (server/revalidate.c). A revalidation row says
 * which evaluation job spec runs against the version an alias names, how
 * often, and the thresholds (JSON {"max": {metric: n}, "min": {...}}) on
 * the metrics it writes; an evaluation row is one run's outcome, kept per
 * model version.
 */
static const char SQL_SCHEMA_V9[] =
	"CREATE TABLE model_revalidations ("
	" name TEXT NOT NULL,"
	" alias TEXT NOT NULL,"
	" owner TEXT NOT NULL,"
	" spec_yaml TEXT NOT NULL,"
	" filename TEXT NOT NULL,"
	" every_ms INTEGER NOT NULL,"
	" thresholds_json TEXT NOT NULL,"
	" rollback INTEGER NOT NULL,"
	" created_at INTEGER NOT NULL,"
	" PRIMARY KEY (name, alias)) WITHOUT ROWID;"
	"CREATE TABLE model_evaluations ("
	" id INTEGER PRIMARY KEY AUTOINCREMENT,"
	" name TEXT NOT NULL,"
	" version INTEGER NOT NULL,"
	" alias TEXT NOT NULL,"
	" job_id INTEGER NOT NULL,"
	" outcome TEXT NOT NULL,"
	" metrics_json TEXT,"
	" detail TEXT,"
	" time_ms INTEGER NOT NULL);"
	"CREATE INDEX model_evaluations_version ON model_evaluations"
	" (name, version, id);";

/*
 * v10: the git revision a job's workdir had checked out when it was
 * submitted (only jobs whose workdir was a repository have one): the
 * code part of a model's lineage.
 */
static const char SQL_SCHEMA_V10[] =
	"CREATE TABLE job_revisions ("
	" job_id INTEGER PRIMARY KEY REFERENCES jobs (id),"
	" revision TEXT NOT NULL);";

/*
 * v11: every attempt of a workflow step, kept across `kiln workflow
 * retry`: the job it ran as (0 for a register or deploy step, or a start
 * that queued nothing), its outcome (NULL while it runs) and its times,
 * so a step's cost sums all its jobs. A register step's attempt is
 * written before the version is made: one still open after a restart
 * says the version may exist already (server/workflows.c adopts it).
 */
static const char SQL_SCHEMA_V11[] =
	"CREATE TABLE workflow_attempts ("
	" run_id INTEGER NOT NULL REFERENCES workflow_runs (id),"
	" idx INTEGER NOT NULL,"
	" attempt INTEGER NOT NULL,"
	" job_id INTEGER NOT NULL DEFAULT 0,"
	" outcome TEXT,"
	" started_at INTEGER NOT NULL,"
	" ended_at INTEGER NOT NULL DEFAULT 0,"
	" PRIMARY KEY (run_id, idx, attempt)) WITHOUT ROWID;";

/*
 * v12: what each task used, one usage sketch (src/cost's histogram) per
 * task and resource, so a row's size is fixed however long the task
 * runs; efficiency and right-size advice read them.
 */
static const char SQL_SCHEMA_V12[] =
	"CREATE TABLE task_usage ("
	" job_id INTEGER NOT NULL REFERENCES jobs (id),"
	" attempt INTEGER NOT NULL,"
	" rank INTEGER NOT NULL,"
	" resource TEXT NOT NULL,"
	" samples INTEGER NOT NULL,"
	" sum REAL NOT NULL,"
	" max REAL NOT NULL,"
	" histogram TEXT NOT NULL,"
	" updated_at INTEGER NOT NULL,"
	" PRIMARY KEY (job_id, attempt, rank, resource));";

/*
 * v13: the digest and size of each of a job's `inputs:` as the shim
 * fetched them the first time (later attempts are checked against it),
 * for lineage and for refusing an input that changed under a retry.
 */
static const char SQL_SCHEMA_V13[] =
	"CREATE TABLE job_inputs ("
	" job_id INTEGER NOT NULL REFERENCES jobs (id),"
	" name TEXT NOT NULL,"
	" url TEXT NOT NULL,"
	" sha256 TEXT NOT NULL,"
	" size INTEGER NOT NULL,"
	" attempt INTEGER NOT NULL,"
	" recorded_at INTEGER NOT NULL,"
	" PRIMARY KEY (job_id, name)) WITHOUT ROWID;";

/*
 * v14: the deployment whose spec's revalidate: set a model re-validation
 * (NULL: set by hand), so deleting that deployment removes it.
 */
static const char SQL_SCHEMA_V14[] =
	"ALTER TABLE model_revalidations ADD COLUMN deployment TEXT;";

/* MIGRATIONS[v - 1] takes a file from version v - 1 to version v. */
static const char *const MIGRATIONS[] = {
	SQL_SCHEMA_V1,
	SQL_SCHEMA_V2,
	SQL_SCHEMA_V3,
	SQL_SCHEMA_V4,
	SQL_SCHEMA_V5,
	SQL_SCHEMA_V6,
	SQL_SCHEMA_V7,
	SQL_SCHEMA_V8,
	SQL_SCHEMA_V9,
	SQL_SCHEMA_V10,
	SQL_SCHEMA_V11,
	SQL_SCHEMA_V12,
	SQL_SCHEMA_V13,
	SQL_SCHEMA_V14,
};
_Static_assert(sizeof(MIGRATIONS) / sizeof(MIGRATIONS[0]) ==
		       KN_STORE_SCHEMA_VERSION,
	       "one migration per schema version");

/* ---- statements ---- */

static const char SQL_BEGIN[] = "BEGIN IMMEDIATE";
static const char SQL_COMMIT[] = "COMMIT";
static const char SQL_ROLLBACK[] = "ROLLBACK";

#define AUDIT_COLUMNS \
	"id, time_ms, actor, role, action, object, outcome, detail," \
	" prev_hash, hash"
enum {
	AUDIT_COL_ID,
	AUDIT_COL_TIME,
	AUDIT_COL_ACTOR,
	AUDIT_COL_ROLE,
	AUDIT_COL_ACTION,
	AUDIT_COL_OBJECT,
	AUDIT_COL_OUTCOME,
	AUDIT_COL_DETAIL,
	AUDIT_COL_PREV_HASH,
	AUDIT_COL_HASH,
};

static const char SQL_AUDIT_INSERT[] =
	"INSERT INTO audit (time_ms, actor, role, action, object, outcome,"
	" detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
/* ?2 is an action prefix; substr keeps "_" and "%" literal, unlike LIKE. */
static const char SQL_AUDIT_LIST[] =
	"SELECT " AUDIT_COLUMNS " FROM audit"
	" WHERE (?1 IS NULL OR actor = ?1)"
	" AND (?2 IS NULL OR substr(action, 1, length(?2)) = ?2)"
	" AND time_ms >= ?3"
	" ORDER BY time_ms DESC, id DESC LIMIT ?4";
/* The chain: the row before ?1, filling in a row's links, walking. */
static const char SQL_AUDIT_PREV[] =
	"SELECT hash FROM audit WHERE id < ?1 ORDER BY id DESC LIMIT 1";
static const char SQL_AUDIT_SET_CHAIN[] =
	"UPDATE audit SET prev_hash = ?1, hash = ?2 WHERE id = ?3";
static const char SQL_AUDIT_UNCHAINED[] =
	"SELECT " AUDIT_COLUMNS " FROM audit WHERE hash IS NULL ORDER BY id";
static const char SQL_AUDIT_WALK[] =
	"SELECT " AUDIT_COLUMNS " FROM audit ORDER BY id";
static const char SQL_AUDIT_HEAD[] =
	"SELECT id, hash FROM audit ORDER BY id DESC LIMIT 1";
static const char SQL_AUDIT_HASH_OF[] =
	"SELECT hash FROM audit WHERE id = ?1";
static const char SQL_AUDIT_MAX_ID[] = "SELECT coalesce(max(id), 0) FROM audit";

#define TOKEN_COLUMNS \
	"id, name, role, hash, created_by, created_at, revoked_at, last_used_at"
enum {
	TOKEN_COL_ID,
	TOKEN_COL_NAME,
	TOKEN_COL_ROLE,
	TOKEN_COL_HASH,
	TOKEN_COL_CREATED_BY,
	TOKEN_COL_CREATED_AT,
	TOKEN_COL_REVOKED_AT,
	TOKEN_COL_LAST_USED_AT,
};

static const char SQL_TOKEN_INSERT[] =
	"INSERT INTO tokens (name, role, hash, created_by, created_at,"
	" revoked_at, last_used_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
static const char SQL_TOKEN_BY_HASH[] =
	"SELECT " TOKEN_COLUMNS " FROM tokens"
	" WHERE hash = ?1 AND revoked_at = 0";
static const char SQL_TOKEN_TOUCH[] =
	"UPDATE tokens SET last_used_at = ?1 WHERE id = ?2";
static const char SQL_TOKEN_LIST[] =
	"SELECT " TOKEN_COLUMNS " FROM tokens ORDER BY id";
static const char SQL_TOKEN_REVOKE[] =
	"UPDATE tokens SET revoked_at = ?1 WHERE name = ?2 AND revoked_at = 0";
static const char SQL_TOKEN_COUNT[] =
	"SELECT count(*) FROM tokens WHERE revoked_at = 0";

/* The cost ledger's record (v5). */
static const char SQL_NODE_STATE_CLOSE[] =
	"UPDATE node_states SET ended_at = max(started_at, ?2)"
	" WHERE node = ?1 AND ended_at = 0";
static const char SQL_NODE_STATE_CLOSE_ALL[] =
	"UPDATE node_states SET ended_at = max(started_at, ?1)"
	" WHERE ended_at = 0";
static const char SQL_NODE_STATE_OPEN[] =
	"INSERT INTO node_states (node, state, started_at) VALUES (?1, ?2, ?3)";
static const char SQL_NODE_STATE_LIST[] =
	"SELECT node, state, started_at, ended_at FROM node_states"
	" WHERE ended_at = 0 OR ended_at > ?1 ORDER BY node, started_at";
static const char SQL_JOB_DEPLOYMENT_PUT[] =
	"INSERT OR IGNORE INTO job_deployments (job_id, deployment)"
	" VALUES (?1, ?2)";
/* Tasks that held a device, with their attempt's end, their job's owner
   and the deployment they ran for. */
static const char SQL_COST_TASK_LIST[] =
	"SELECT t.job_id, t.attempt, t.rank, t.node, t.devices, t.gpu_milli,"
	" t.started_at, t.ended_at, a.state, a.checkpoint_at, j.owner,"
	" d.deployment"
	" FROM tasks t JOIN jobs j ON j.id = t.job_id"
	" LEFT JOIN attempts a ON a.job_id = t.job_id AND a.number = t.attempt"
	" LEFT JOIN job_deployments d ON d.job_id = t.job_id"
	" WHERE t.devices != '' AND t.started_at > 0"
	" AND (t.ended_at = 0 OR t.ended_at > ?1)"
	" ORDER BY t.job_id, t.attempt, t.rank";

/* Tasks without devices, for the CPU and memory side of the ledger. */
static const char SQL_COST_CPU_TASK_LIST[] =
	"SELECT t.job_id, t.attempt, t.rank, t.node, t.devices, t.gpu_milli,"
	" t.started_at, t.ended_at, a.state, a.checkpoint_at, j.owner,"
	" d.deployment"
	" FROM tasks t JOIN jobs j ON j.id = t.job_id"
	" LEFT JOIN attempts a ON a.job_id = t.job_id AND a.number = t.attempt"
	" LEFT JOIN job_deployments d ON d.job_id = t.job_id"
	" WHERE t.devices = '' AND t.started_at > 0"
	" AND (t.ended_at = 0 OR t.ended_at > ?1)"
	" ORDER BY t.job_id, t.attempt, t.rank";

static const char SQL_TASK_USAGE_GET[] =
	"SELECT samples, sum, max, histogram FROM task_usage"
	" WHERE job_id = ?1 AND attempt = ?2 AND rank = ?3 AND resource = ?4";

static const char SQL_TASK_USAGE_PUT[] =
	"INSERT OR REPLACE INTO task_usage (job_id, attempt, rank, resource,"
	" samples, sum, max, histogram, updated_at)"
	" VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)";

static const char SQL_TASK_USAGE_LIST[] =
	"SELECT u.job_id, u.attempt, u.rank, u.resource, u.samples, u.sum,"
	" u.max, u.histogram, j.name, j.spec_json, t.node, t.devices,"
	" t.gpu_milli"
	" FROM task_usage u JOIN jobs j ON j.id = u.job_id"
	" JOIN tasks t ON t.job_id = u.job_id AND t.attempt = u.attempt"
	" AND t.rank = u.rank"
	" WHERE t.started_at > 0 AND (t.ended_at = 0 OR t.ended_at > ?1)"
	" ORDER BY u.job_id, u.attempt, u.rank, u.resource";

#define JOB_COLUMNS                                                         \
	"id, name, owner, state, priority, tasks, filename, submitted_at,"  \
	" started_at, ended_at, not_before, attempts, retries_used,"        \
	" cancel_requested, reason, exit_code"
enum {
	JOB_COL_ID,
	JOB_COL_NAME,
	JOB_COL_OWNER,
	JOB_COL_STATE,
	JOB_COL_PRIORITY,
	JOB_COL_TASKS,
	JOB_COL_FILENAME,
	JOB_COL_SUBMITTED_AT,
	JOB_COL_STARTED_AT,
	JOB_COL_ENDED_AT,
	JOB_COL_NOT_BEFORE,
	JOB_COL_ATTEMPTS,
	JOB_COL_RETRIES_USED,
	JOB_COL_CANCEL_REQUESTED,
	JOB_COL_REASON,
	JOB_COL_EXIT_CODE,
	JOB_COL_SPEC_YAML,
	JOB_COL_SPEC_JSON,
};

static const char SQL_JOB_INSERT[] =
	"INSERT INTO jobs (name, owner, state, priority, tasks, filename,"
	" submitted_at, started_at, ended_at, not_before, attempts,"
	" retries_used, cancel_requested, reason, exit_code, spec_yaml,"
	" spec_json) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11,"
	" ?12, ?13, ?14, ?15, ?16, ?17)";
static const char SQL_JOB_GET[] =
	"SELECT " JOB_COLUMNS ", spec_yaml, spec_json FROM jobs WHERE id = ?1";
static const char SQL_JOB_UPDATE[] =
	"UPDATE jobs SET state = ?1, started_at = ?2, ended_at = ?3,"
	" not_before = ?4, attempts = ?5, retries_used = ?6,"
	" cancel_requested = ?7, reason = ?8, exit_code = ?9 WHERE id = ?10";
/*
 * Three listings share their parameters so one binder serves them all:
 * ?1 owner, ?2 name, ?3 with_spec, ?4 limit (-1 = none), and ?5 (?6) the
 * state(s). Each leads with the condition its index serves: all jobs by
 * id, one state through jobs_by_state, the active states through the same
 * index. The CASE keeps the spec columns unread unless asked for.
 */
#define JOB_LIST_SELECT                                                  \
	"SELECT " JOB_COLUMNS ", CASE WHEN ?3 THEN spec_yaml END,"       \
	" CASE WHEN ?3 THEN spec_json END FROM jobs"
#define JOB_LIST_TAIL                                                    \
	" AND (?1 IS NULL OR owner = ?1) AND (?2 IS NULL OR name = ?2)"  \
	" ORDER BY id LIMIT ?4"
static const char SQL_JOB_LIST_ALL[] =
	JOB_LIST_SELECT " WHERE 1" JOB_LIST_TAIL;
static const char SQL_JOB_LIST_STATE[] =
	JOB_LIST_SELECT " WHERE state = ?5" JOB_LIST_TAIL;
static const char SQL_JOB_LIST_ACTIVE[] =
	JOB_LIST_SELECT " WHERE state IN (?5, ?6)" JOB_LIST_TAIL;

#define ATTEMPT_COLUMNS                                                    \
	"job_id, number, state, started_at, ended_at, exit_code, signal,"     \
	" reason, checkpoint, checkpoint_at, restore_ms, useful_ms, lost_ms"
enum {
	ATTEMPT_COL_JOB_ID,
	ATTEMPT_COL_NUMBER,
	ATTEMPT_COL_STATE,
	ATTEMPT_COL_STARTED_AT,
	ATTEMPT_COL_ENDED_AT,
	ATTEMPT_COL_EXIT_CODE,
	ATTEMPT_COL_SIGNAL,
	ATTEMPT_COL_REASON,
	ATTEMPT_COL_CHECKPOINT,
	ATTEMPT_COL_CHECKPOINT_AT,
	ATTEMPT_COL_RESTORE_MS,
	ATTEMPT_COL_USEFUL_MS,
	ATTEMPT_COL_LOST_MS,
};

/* An upsert, not INSERT OR REPLACE: REPLACE deletes the old row first. */
static const char SQL_ATTEMPT_PUT[] =
	"INSERT INTO attempts (" ATTEMPT_COLUMNS ")"
	" VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)"
	" ON CONFLICT (job_id, number) DO UPDATE SET state = excluded.state,"
	" started_at = excluded.started_at, ended_at = excluded.ended_at,"
	" exit_code = excluded.exit_code, signal = excluded.signal,"
	" reason = excluded.reason, checkpoint = excluded.checkpoint,"
	" checkpoint_at = excluded.checkpoint_at,"
	" restore_ms = excluded.restore_ms, useful_ms = excluded.useful_ms,"
	" lost_ms = excluded.lost_ms";
static const char SQL_ATTEMPT_LIST[] =
	"SELECT " ATTEMPT_COLUMNS " FROM attempts WHERE job_id = ?1"
	" ORDER BY number";

#define TASK_COLUMNS                                                       \
	"job_id, attempt, rank, node, devices, gpu_milli, task_dir, state,"  \
	" shim_pid, shim_start, started_at, ended_at, exit_code, signal,"    \
	" master_port"
enum {
	TASK_COL_JOB_ID,
	TASK_COL_ATTEMPT,
	TASK_COL_RANK,
	TASK_COL_NODE,
	TASK_COL_DEVICES,
	TASK_COL_GPU_MILLI,
	TASK_COL_TASK_DIR,
	TASK_COL_STATE,
	TASK_COL_SHIM_PID,
	TASK_COL_SHIM_START,
	TASK_COL_STARTED_AT,
	TASK_COL_ENDED_AT,
	TASK_COL_EXIT_CODE,
	TASK_COL_SIGNAL,
	TASK_COL_MASTER_PORT,
};

static const char SQL_TASK_PUT[] =
	"INSERT INTO tasks (" TASK_COLUMNS ")"
	" VALUES (?1, ?2, ?3, ?4, coalesce(?5, ''), ?6, ?7, ?8, ?9, ?10, ?11,"
	" ?12, ?13, ?14, ?15)"
	" ON CONFLICT (job_id, attempt, rank) DO UPDATE SET"
	" node = excluded.node, devices = excluded.devices,"
	" gpu_milli = excluded.gpu_milli, task_dir = excluded.task_dir,"
	" state = excluded.state, shim_pid = excluded.shim_pid,"
	" shim_start = excluded.shim_start, started_at = excluded.started_at,"
	" ended_at = excluded.ended_at, exit_code = excluded.exit_code,"
	" signal = excluded.signal, master_port = excluded.master_port";
static const char SQL_TASK_LIST[] =
	"SELECT " TASK_COLUMNS " FROM tasks"
	" WHERE job_id = ?1 AND (?2 = 0 OR attempt = ?2)"
	" ORDER BY attempt, rank";

#define NODE_COLUMNS                                                     \
	"name, state, labels_json, taints_json, cpu_milli, memory_bytes,"  \
	" simulated, updated_at, reason"
enum {
	NODE_COL_NAME,
	NODE_COL_STATE,
	NODE_COL_LABELS,
	NODE_COL_TAINTS,
	NODE_COL_CPU_MILLI,
	NODE_COL_MEMORY_BYTES,
	NODE_COL_SIMULATED,
	NODE_COL_UPDATED_AT,
	NODE_COL_REASON,
};

static const char SQL_NODE_PUT[] =
	"INSERT INTO nodes (" NODE_COLUMNS ")"
	" VALUES (?1, ?2, coalesce(?3, '{}'), coalesce(?4, '[]'), ?5, ?6, ?7,"
	" ?8, ?9) ON CONFLICT (name) DO UPDATE SET state = excluded.state,"
	" labels_json = excluded.labels_json,"
	" taints_json = excluded.taints_json, cpu_milli = excluded.cpu_milli,"
	" memory_bytes = excluded.memory_bytes,"
	" simulated = excluded.simulated, updated_at = excluded.updated_at,"
	" reason = excluded.reason";
static const char SQL_NODE_LIST[] =
	"SELECT " NODE_COLUMNS " FROM nodes ORDER BY name";

#define DEVICE_COLUMNS "node, idx, uuid, model, memory_bytes, simulated"
enum {
	DEVICE_COL_NODE,
	DEVICE_COL_INDEX,
	DEVICE_COL_UUID,
	DEVICE_COL_MODEL,
	DEVICE_COL_MEMORY_BYTES,
	DEVICE_COL_SIMULATED,
};

static const char SQL_DEVICE_DELETE_NODE[] =
	"DELETE FROM devices WHERE node = ?1";
static const char SQL_DEVICE_INSERT[] =
	"INSERT INTO devices (" DEVICE_COLUMNS ") VALUES (?1, ?2, ?3, ?4, ?5,"
	" ?6)";
static const char SQL_DEVICE_LIST_NODE[] =
	"SELECT " DEVICE_COLUMNS " FROM devices WHERE node = ?1 ORDER BY idx";

#define OUTPUT_COLUMNS "job_id, name, size, sha256, url"
enum {
	OUTPUT_COL_JOB_ID,
	OUTPUT_COL_NAME,
	OUTPUT_COL_SIZE,
	OUTPUT_COL_SHA256,
	OUTPUT_COL_URL,
};
static const char SQL_OUTPUT_PUT[] =
	"INSERT INTO outputs (" OUTPUT_COLUMNS ") VALUES (?1, ?2, ?3, ?4, ?5)"
	" ON CONFLICT (job_id, name) DO UPDATE SET size = excluded.size,"
	" sha256 = excluded.sha256, url = excluded.url";
static const char SQL_OUTPUT_LIST[] =
	"SELECT " OUTPUT_COLUMNS " FROM outputs WHERE job_id = ?1 ORDER BY name";

#define ALERT_COLUMNS                                                         \
	"id, fingerprint, rule, severity, state, labels_json, summary, value,"\
	" active_at, fired_at, resolved_at"
enum {
	ALERT_COL_ID,
	ALERT_COL_FINGERPRINT,
	ALERT_COL_RULE,
	ALERT_COL_SEVERITY,
	ALERT_COL_STATE,
	ALERT_COL_LABELS,
	ALERT_COL_SUMMARY,
	ALERT_COL_VALUE,
	ALERT_COL_ACTIVE_AT,
	ALERT_COL_FIRED_AT,
	ALERT_COL_RESOLVED_AT,
};
static const char SQL_ALERT_INSERT[] =
	"INSERT INTO alerts (fingerprint, rule, severity, state, labels_json,"
	" summary, value, active_at, fired_at) VALUES (?1, ?2, ?3, 'firing', ?4,"
	" ?5, ?6, ?7, ?8)";
static const char SQL_ALERT_RESOLVE[] =
	"UPDATE alerts SET state = 'resolved', resolved_at = ?2"
	" WHERE state = 'firing' AND fingerprint = ?1";
static const char SQL_ALERT_RESOLVE_ALL[] =
	"UPDATE alerts SET state = 'resolved', resolved_at = ?1"
	" WHERE state = 'firing'";
static const char SQL_ALERT_LIST[] =
	"SELECT " ALERT_COLUMNS " FROM alerts WHERE state = 'firing'"
	" OR resolved_at >= ?1"
	" ORDER BY state = 'firing' DESC, max(fired_at, resolved_at) DESC, id DESC"
	" LIMIT ?2";

#define DEPLOYMENT_COLUMNS                                                    \
	"name, owner, filename, spec_yaml, spec_json, model_dir, replicas,"   \
	" generation, rollout_next, created_at, updated_at"
enum {
	DEPLOYMENT_COL_NAME,
	DEPLOYMENT_COL_OWNER,
	DEPLOYMENT_COL_FILENAME,
	DEPLOYMENT_COL_SPEC_YAML,
	DEPLOYMENT_COL_SPEC_JSON,
	DEPLOYMENT_COL_MODEL_DIR,
	DEPLOYMENT_COL_REPLICAS,
	DEPLOYMENT_COL_GENERATION,
	DEPLOYMENT_COL_ROLLOUT_NEXT,
	DEPLOYMENT_COL_CREATED_AT,
	DEPLOYMENT_COL_UPDATED_AT,
};
static const char SQL_DEPLOYMENT_PUT[] =
	"INSERT INTO deployments (" DEPLOYMENT_COLUMNS ") VALUES (?1, ?2, ?3,"
	" ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) ON CONFLICT (name) DO UPDATE SET"
	" owner = excluded.owner, filename = excluded.filename,"
	" spec_yaml = excluded.spec_yaml, spec_json = excluded.spec_json,"
	" model_dir = excluded.model_dir, replicas = excluded.replicas,"
	" generation = excluded.generation,"
	" rollout_next = excluded.rollout_next,"
	" updated_at = excluded.updated_at";
static const char SQL_DEPLOYMENT_LIST[] =
	"SELECT " DEPLOYMENT_COLUMNS " FROM deployments ORDER BY name";
static const char SQL_DEPLOYMENT_DELETE[] =
	"DELETE FROM deployments WHERE name = ?1";
static const char SQL_REPLICA_PUT[] =
	"INSERT INTO deployment_replicas (deployment, replica, job_id)"
	" VALUES (?1, ?2, ?3) ON CONFLICT (deployment, replica) DO UPDATE SET"
	" job_id = excluded.job_id";
static const char SQL_REPLICA_DELETE[] =
	"DELETE FROM deployment_replicas WHERE deployment = ?1 AND replica = ?2";
static const char SQL_REPLICA_LIST[] =
	"SELECT deployment, replica, job_id FROM deployment_replicas"
	" ORDER BY deployment, replica";

#define GWKEY_COLUMNS                                                         \
	"id, name, hash, deployments_json, rpm, tpm, quota_day, quota_month," \
	" created_by, created_at, revoked_at"
enum {
	GWKEY_COL_ID,
	GWKEY_COL_NAME,
	GWKEY_COL_HASH,
	GWKEY_COL_DEPLOYMENTS,
	GWKEY_COL_RPM,
	GWKEY_COL_TPM,
	GWKEY_COL_QUOTA_DAY,
	GWKEY_COL_QUOTA_MONTH,
	GWKEY_COL_CREATED_BY,
	GWKEY_COL_CREATED_AT,
	GWKEY_COL_REVOKED_AT,
};
static const char SQL_GWKEY_INSERT[] =
	"INSERT INTO gateway_keys (name, hash, deployments_json, rpm, tpm,"
	" quota_day, quota_month, created_by, created_at) VALUES (?1, ?2, ?3,"
	" ?4, ?5, ?6, ?7, ?8, ?9)";
static const char SQL_GWKEY_LIST[] =
	"SELECT " GWKEY_COLUMNS " FROM gateway_keys"
	" WHERE ?1 = 0 OR revoked_at = 0 ORDER BY id";
static const char SQL_GWKEY_REVOKE[] =
	"UPDATE gateway_keys SET revoked_at = ?1 WHERE name = ?2"
	" AND revoked_at = 0";

static const char SQL_MODEL_LIST[] =
	"SELECT m.name, count(v.version), coalesce(max(v.version), 0),"
	" m.created_at, coalesce(max(v.created_at), m.created_at)"
	" FROM models m LEFT JOIN model_versions v ON v.name = m.name"
	" GROUP BY m.name ORDER BY m.name";
static const char SQL_MODEL_CREATE[] =
	"INSERT OR IGNORE INTO models (name, next_version, created_at)"
	" VALUES (?1, 1, ?2)";
static const char SQL_MODEL_NEXT[] =
	"UPDATE models SET next_version = next_version + 1 WHERE name = ?1"
	" RETURNING next_version - 1";
static const char SQL_MODEL_VERSION_INSERT[] =
	"INSERT INTO model_versions (name, version, manifest, created_by,"
	" created_at) VALUES (?1, ?2, ?3, ?4, ?5)";
static const char SQL_MODEL_VERSION_DELETE[] =
	"DELETE FROM model_versions WHERE name = ?1 AND version = ?2";
static const char SQL_MODEL_VERSION_GET[] =
	"SELECT name, version, manifest, created_by, created_at"
	" FROM model_versions WHERE name = ?1 AND version = ?2";
static const char SQL_MODEL_VERSION_LIST[] =
	"SELECT name, version, manifest, created_by, created_at"
	" FROM model_versions WHERE name = ?1 ORDER BY version";
static const char SQL_REVAL_PUT[] =
	"INSERT OR REPLACE INTO model_revalidations (name, alias, owner,"
	" spec_yaml, filename, every_ms, thresholds_json, rollback, created_at,"
	" deployment) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";
static const char SQL_REVAL_LIST[] =
	"SELECT name, alias, owner, spec_yaml, filename, every_ms,"
	" thresholds_json, rollback, created_at, deployment"
	" FROM model_revalidations ORDER BY name, alias";
static const char SQL_REVAL_DELETE[] =
	"DELETE FROM model_revalidations WHERE name = ?1 AND alias = ?2";
static const char SQL_EVAL_INSERT[] =
	"INSERT INTO model_evaluations (name, version, alias, job_id, outcome,"
	" metrics_json, detail, time_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";
static const char SQL_EVAL_LIST[] =
	"SELECT id, name, version, alias, job_id, outcome, metrics_json, detail,"
	" time_ms FROM model_evaluations WHERE name = ?1 AND version = ?2"
	" ORDER BY id";
static const char SQL_MODEL_ALIAS_GET[] =
	"SELECT version FROM model_aliases WHERE name = ?1 AND alias = ?2";
static const char SQL_MODEL_ALIAS_PUT[] =
	"INSERT INTO model_aliases (name, alias, version, updated_by,"
	" updated_at) VALUES (?1, ?2, ?3, ?4, ?5)"
	" ON CONFLICT (name, alias) DO UPDATE SET version = ?3,"
	" updated_by = ?4, updated_at = ?5";
static const char SQL_MODEL_ALIAS_LIST[] =
	"SELECT alias, version, 'current', 0, updated_by, updated_at"
	" FROM model_aliases WHERE name = ?1 ORDER BY alias";
static const char SQL_MODEL_ALIAS_EVENT[] =
	"INSERT INTO model_alias_history (name, alias, action, from_version,"
	" to_version, actor, time_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
static const char SQL_MODEL_ALIAS_HISTORY[] =
	"SELECT alias, to_version, action, from_version, actor, time_ms"
	" FROM model_alias_history WHERE name = ?1 ORDER BY id";
static const char SQL_MODEL_SIGNATURE_INSERT[] =
	"INSERT INTO model_signatures (name, version, key_id, public_key,"
	" signature, signed_by, signed_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
static const char SQL_MODEL_SIGNATURE_LIST[] =
	"SELECT key_id, public_key, signature, signed_by, signed_at"
	" FROM model_signatures WHERE name = ?1 AND version = ?2"
	" ORDER BY signed_at, key_id";

#define WF_RUN_COLUMNS                                                      \
	"id, name, owner, filename, path, spec_yaml, files_json, digest,"   \
	" revision, state, reason, submitted_at, started_at, ended_at"
enum {
	WF_RUN_COL_ID,
	WF_RUN_COL_NAME,
	WF_RUN_COL_OWNER,
	WF_RUN_COL_FILENAME,
	WF_RUN_COL_PATH,
	WF_RUN_COL_SPEC_YAML,
	WF_RUN_COL_FILES_JSON,
	WF_RUN_COL_DIGEST,
	WF_RUN_COL_REVISION,
	WF_RUN_COL_STATE,
	WF_RUN_COL_REASON,
	WF_RUN_COL_SUBMITTED_AT,
	WF_RUN_COL_STARTED_AT,
	WF_RUN_COL_ENDED_AT,
};
static const char SQL_WF_RUN_INSERT[] =
	"INSERT INTO workflow_runs (name, owner, filename, path, spec_yaml,"
	" files_json, digest, revision, state, reason, submitted_at,"
	" started_at, ended_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9,"
	" ?10, ?11, ?12, ?13)";
static const char SQL_WF_RUN_GET[] =
	"SELECT " WF_RUN_COLUMNS " FROM workflow_runs WHERE id = ?1";
static const char SQL_WF_RUN_UPDATE[] =
	"UPDATE workflow_runs SET state = ?2, reason = ?3, started_at = ?4,"
	" ended_at = ?5 WHERE id = ?1";
static const char SQL_WF_RUN_LIST[] =
	"SELECT " WF_RUN_COLUMNS " FROM workflow_runs"
	" WHERE ?1 = 0 OR state IN ('queued', 'running') ORDER BY id";
#define WF_STEP_COLUMNS                                                    \
	"run_id, idx, name, state, by_condition, job_id, attempts,"        \
	" started_at, ended_at, reason, metrics_json"
static const char SQL_WF_STEP_PUT[] =
	"INSERT INTO workflow_steps (" WF_STEP_COLUMNS ") VALUES (?1, ?2, ?3,"
	" ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) ON CONFLICT (run_id, idx) DO"
	" UPDATE SET state = excluded.state,"
	" by_condition = excluded.by_condition, job_id = excluded.job_id,"
	" attempts = excluded.attempts, started_at = excluded.started_at,"
	" ended_at = excluded.ended_at, reason = excluded.reason,"
	" metrics_json = excluded.metrics_json";
static const char SQL_WF_STEP_LIST[] =
	"SELECT " WF_STEP_COLUMNS " FROM workflow_steps WHERE run_id = ?1"
	" ORDER BY idx";
static const char SQL_WF_STEP_BY_JOB[] =
	"SELECT run_id FROM workflow_steps WHERE job_id = ?1";
#define WF_ATTEMPT_COLUMNS \
	"run_id, idx, attempt, job_id, outcome, started_at, ended_at"
static const char SQL_WF_ATTEMPT_PUT[] =
	"INSERT OR REPLACE INTO workflow_attempts (" WF_ATTEMPT_COLUMNS ")"
	" VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
static const char SQL_WF_ATTEMPT_LIST[] =
	"SELECT " WF_ATTEMPT_COLUMNS " FROM workflow_attempts"
	" WHERE run_id = ?1 ORDER BY idx, attempt";
static const char SQL_JOB_REVISION_PUT[] =
	"INSERT OR REPLACE INTO job_revisions (job_id, revision) VALUES (?1, ?2)";
static const char SQL_JOB_REVISION_GET[] =
	"SELECT revision FROM job_revisions WHERE job_id = ?1";
/* The first recording of an input stays: later ones are checked against
   it, never written over it. */
static const char SQL_JOB_INPUT_PUT[] =
	"INSERT OR IGNORE INTO job_inputs (job_id, name, url, sha256, size,"
	" attempt, recorded_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
static const char SQL_JOB_INPUT_LIST[] =
	"SELECT job_id, name, url, sha256, size, attempt, recorded_at"
	" FROM job_inputs WHERE job_id = ?1 ORDER BY name";

enum stmt_id {
	STMT_BEGIN,
	STMT_COMMIT,
	STMT_ROLLBACK,
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
	STMT_JOB_LIST_ALL,
	STMT_JOB_LIST_STATE,
	STMT_JOB_LIST_ACTIVE,
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
	STMT_COUNT,
};

static const char *const STATEMENTS[STMT_COUNT] = {
	[STMT_BEGIN] = SQL_BEGIN,
	[STMT_COMMIT] = SQL_COMMIT,
	[STMT_ROLLBACK] = SQL_ROLLBACK,
	[STMT_AUDIT_INSERT] = SQL_AUDIT_INSERT,
	[STMT_AUDIT_LIST] = SQL_AUDIT_LIST,
	[STMT_AUDIT_PREV] = SQL_AUDIT_PREV,
	[STMT_AUDIT_SET_CHAIN] = SQL_AUDIT_SET_CHAIN,
	[STMT_AUDIT_UNCHAINED] = SQL_AUDIT_UNCHAINED,
	[STMT_AUDIT_WALK] = SQL_AUDIT_WALK,
	[STMT_AUDIT_HEAD] = SQL_AUDIT_HEAD,
	[STMT_AUDIT_HASH_OF] = SQL_AUDIT_HASH_OF,
	[STMT_AUDIT_MAX_ID] = SQL_AUDIT_MAX_ID,
	[STMT_TOKEN_INSERT] = SQL_TOKEN_INSERT,
	[STMT_TOKEN_BY_HASH] = SQL_TOKEN_BY_HASH,
	[STMT_TOKEN_TOUCH] = SQL_TOKEN_TOUCH,
	[STMT_TOKEN_LIST] = SQL_TOKEN_LIST,
	[STMT_TOKEN_REVOKE] = SQL_TOKEN_REVOKE,
	[STMT_TOKEN_COUNT] = SQL_TOKEN_COUNT,
	[STMT_JOB_INSERT] = SQL_JOB_INSERT,
	[STMT_JOB_GET] = SQL_JOB_GET,
	[STMT_JOB_UPDATE] = SQL_JOB_UPDATE,
	[STMT_JOB_LIST_ALL] = SQL_JOB_LIST_ALL,
	[STMT_JOB_LIST_STATE] = SQL_JOB_LIST_STATE,
	[STMT_JOB_LIST_ACTIVE] = SQL_JOB_LIST_ACTIVE,
	[STMT_ATTEMPT_PUT] = SQL_ATTEMPT_PUT,
	[STMT_ATTEMPT_LIST] = SQL_ATTEMPT_LIST,
	[STMT_TASK_PUT] = SQL_TASK_PUT,
	[STMT_TASK_LIST] = SQL_TASK_LIST,
	[STMT_NODE_PUT] = SQL_NODE_PUT,
	[STMT_NODE_LIST] = SQL_NODE_LIST,
	[STMT_OUTPUT_PUT] = SQL_OUTPUT_PUT,
	[STMT_OUTPUT_LIST] = SQL_OUTPUT_LIST,
	[STMT_ALERT_INSERT] = SQL_ALERT_INSERT,
	[STMT_ALERT_RESOLVE] = SQL_ALERT_RESOLVE,
	[STMT_ALERT_RESOLVE_ALL] = SQL_ALERT_RESOLVE_ALL,
	[STMT_ALERT_LIST] = SQL_ALERT_LIST,
	[STMT_DEVICE_DELETE_NODE] = SQL_DEVICE_DELETE_NODE,
	[STMT_DEVICE_INSERT] = SQL_DEVICE_INSERT,
	[STMT_DEVICE_LIST_NODE] = SQL_DEVICE_LIST_NODE,
	[STMT_DEPLOYMENT_PUT] = SQL_DEPLOYMENT_PUT,
	[STMT_DEPLOYMENT_LIST] = SQL_DEPLOYMENT_LIST,
	[STMT_DEPLOYMENT_DELETE] = SQL_DEPLOYMENT_DELETE,
	[STMT_REPLICA_PUT] = SQL_REPLICA_PUT,
	[STMT_REPLICA_DELETE] = SQL_REPLICA_DELETE,
	[STMT_REPLICA_LIST] = SQL_REPLICA_LIST,
	[STMT_GWKEY_INSERT] = SQL_GWKEY_INSERT,
	[STMT_GWKEY_LIST] = SQL_GWKEY_LIST,
	[STMT_GWKEY_REVOKE] = SQL_GWKEY_REVOKE,
	[STMT_NODE_STATE_CLOSE] = SQL_NODE_STATE_CLOSE,
	[STMT_NODE_STATE_CLOSE_ALL] = SQL_NODE_STATE_CLOSE_ALL,
	[STMT_NODE_STATE_OPEN] = SQL_NODE_STATE_OPEN,
	[STMT_NODE_STATE_LIST] = SQL_NODE_STATE_LIST,
	[STMT_JOB_DEPLOYMENT_PUT] = SQL_JOB_DEPLOYMENT_PUT,
	[STMT_COST_TASK_LIST] = SQL_COST_TASK_LIST,
	[STMT_MODEL_LIST] = SQL_MODEL_LIST,
	[STMT_MODEL_CREATE] = SQL_MODEL_CREATE,
	[STMT_MODEL_NEXT] = SQL_MODEL_NEXT,
	[STMT_MODEL_VERSION_INSERT] = SQL_MODEL_VERSION_INSERT,
	[STMT_MODEL_VERSION_DELETE] = SQL_MODEL_VERSION_DELETE,
	[STMT_MODEL_VERSION_GET] = SQL_MODEL_VERSION_GET,
	[STMT_MODEL_VERSION_LIST] = SQL_MODEL_VERSION_LIST,
	[STMT_REVAL_PUT] = SQL_REVAL_PUT,
	[STMT_REVAL_LIST] = SQL_REVAL_LIST,
	[STMT_REVAL_DELETE] = SQL_REVAL_DELETE,
	[STMT_EVAL_INSERT] = SQL_EVAL_INSERT,
	[STMT_EVAL_LIST] = SQL_EVAL_LIST,
	[STMT_MODEL_ALIAS_GET] = SQL_MODEL_ALIAS_GET,
	[STMT_MODEL_ALIAS_PUT] = SQL_MODEL_ALIAS_PUT,
	[STMT_MODEL_ALIAS_LIST] = SQL_MODEL_ALIAS_LIST,
	[STMT_MODEL_ALIAS_EVENT] = SQL_MODEL_ALIAS_EVENT,
	[STMT_MODEL_ALIAS_HISTORY] = SQL_MODEL_ALIAS_HISTORY,
	[STMT_MODEL_SIGNATURE_INSERT] = SQL_MODEL_SIGNATURE_INSERT,
	[STMT_MODEL_SIGNATURE_LIST] = SQL_MODEL_SIGNATURE_LIST,
	[STMT_WF_RUN_INSERT] = SQL_WF_RUN_INSERT,
	[STMT_WF_RUN_GET] = SQL_WF_RUN_GET,
	[STMT_WF_RUN_UPDATE] = SQL_WF_RUN_UPDATE,
	[STMT_WF_RUN_LIST] = SQL_WF_RUN_LIST,
	[STMT_WF_STEP_PUT] = SQL_WF_STEP_PUT,
	[STMT_WF_STEP_LIST] = SQL_WF_STEP_LIST,
	[STMT_WF_STEP_BY_JOB] = SQL_WF_STEP_BY_JOB,
	[STMT_WF_ATTEMPT_PUT] = SQL_WF_ATTEMPT_PUT,
	[STMT_WF_ATTEMPT_LIST] = SQL_WF_ATTEMPT_LIST,
	[STMT_JOB_REVISION_PUT] = SQL_JOB_REVISION_PUT,
	[STMT_JOB_REVISION_GET] = SQL_JOB_REVISION_GET,
	[STMT_COST_CPU_TASK_LIST] = SQL_COST_CPU_TASK_LIST,
	[STMT_TASK_USAGE_GET] = SQL_TASK_USAGE_GET,
	[STMT_TASK_USAGE_PUT] = SQL_TASK_USAGE_PUT,
	[STMT_TASK_USAGE_LIST] = SQL_TASK_USAGE_LIST,
	[STMT_JOB_INPUT_PUT] = SQL_JOB_INPUT_PUT,
	[STMT_JOB_INPUT_LIST] = SQL_JOB_INPUT_LIST,
};

struct kn_store {
	sqlite3 *db;
	sqlite3_stmt *stmt[STMT_COUNT];

	/* The audit chain (kn_store_audit_chain_start); unchained before. */
	EVP_MAC_CTX *audit_mac; /* HMAC-SHA256 keyed, copied per row */
	/* The newest row this transaction chained, reported on commit. */
	bool head_dirty;
	int64_t head_id;
	char head_hash[KN_AUDIT_HASH_HEX_LEN + 1];
	kn_store_audit_head_cb on_head;
	void *on_head_arg;
};

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

static bool job_state_valid(enum kn_job_state s)
{
	return (unsigned)s < N_JOB_STATES;
}

static bool task_state_valid(enum kn_task_state s)
{
	return (unsigned)s < N_TASK_STATES;
}

const char *kn_job_state_name(enum kn_job_state s)
{
	return job_state_valid(s) ? JOB_STATE_NAMES[s] : "unknown";
}

int kn_job_state_parse(const char *name)
{
	for (size_t i = 0; name && i < N_JOB_STATES; i++)
		if (strcmp(name, JOB_STATE_NAMES[i]) == 0)
			return (int)i;
	return -1;
}

bool kn_job_state_terminal(enum kn_job_state s)
{
	return s == KN_JOB_SUCCEEDED || s == KN_JOB_FAILED ||
	       s == KN_JOB_CANCELLED;
}

const char *kn_task_state_name(enum kn_task_state s)
{
	return task_state_valid(s) ? TASK_STATE_NAMES[s] : "unknown";
}

int kn_task_state_parse(const char *name)
{
	for (size_t i = 0; name && i < N_TASK_STATES; i++)
		if (strcmp(name, TASK_STATE_NAMES[i]) == 0)
			return (int)i;
	return -1;
}

/* ---- statement helpers ---- */

/*
 * Fill err from the connection's last error. Constraint failures map to
 * the API's codes so a caller that does not refine the message still
 * answers 409/404/400 rather than 500.
 */
static int db_fail(struct kn_store *st, int rc, const char *what,
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
	return kn_errorf(err, code, NULL, "store: %s: %s", what,
			 sqlite3_errmsg(st->db));
}

static void stmt_done(sqlite3_stmt *s)
{
	sqlite3_reset(s);
	sqlite3_clear_bindings(s);
}

/* A bind failed (too big, out of memory): report it and reset. */
static int bind_fail(struct kn_store *st, sqlite3_stmt *s, const char *what,
		     struct kn_error *err)
{
	int rc = db_fail(st, sqlite3_extended_errcode(st->db), what, err);
	stmt_done(s);
	return rc;
}

/* Step a statement that returns no rows, then reset it. */
static int run(struct kn_store *st, sqlite3_stmt *s, const char *what,
	       struct kn_error *err)
{
	int rc = sqlite3_step(s);
	int ret = 0;

	if (rc != SQLITE_DONE && rc != SQLITE_ROW)
		ret = db_fail(st, rc, what, err);
	stmt_done(s);
	return ret;
}

/*
 * Step a query: 1 with a row ready, 0 when done, or a negative errno with
 * err filled. The caller resets the statement.
 */
static int step_row(struct kn_store *st, sqlite3_stmt *s, const char *what,
		    struct kn_error *err)
{
	int rc = sqlite3_step(s);

	if (rc == SQLITE_ROW)
		return 1;
	if (rc == SQLITE_DONE)
		return 0;
	return db_fail(st, rc, what, err);
}

/*
 * Caller strings are bound SQLITE_STATIC: they outlive the step, and
 * stmt_done clears the bindings before the call returns.
 */
static int bind_text(sqlite3_stmt *s, int i, const char *v)
{
	return v ? sqlite3_bind_text(s, i, v, -1, SQLITE_STATIC)
		 : sqlite3_bind_null(s, i);
}

static int bind_i64(sqlite3_stmt *s, int i, int64_t v)
{
	return sqlite3_bind_int64(s, i, v);
}

static char *col_str(sqlite3_stmt *s, int i)
{
	const unsigned char *t = sqlite3_column_text(s, i);
	return t ? kn_xstrdup((const char *)t) : NULL;
}

static int64_t col_i64(sqlite3_stmt *s, int i)
{
	return sqlite3_column_int64(s, i);
}

static int col_int(sqlite3_stmt *s, int i)
{
	return sqlite3_column_int(s, i);
}

static bool col_bool(sqlite3_stmt *s, int i)
{
	return sqlite3_column_int(s, i) != 0;
}

/* Room for one more element in a list being read. */
static void *grow(void *arr, size_t *alloc, size_t used, size_t elem)
{
	if (used < *alloc)
		return arr;
	*alloc = *alloc ? *alloc * 2 : 16;
	return kn_xrealloc(arr, *alloc * elem);
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
static int write_begin(struct kn_store *st, bool *own, struct kn_error *err)
{
	*own = sqlite3_get_autocommit(st->db) != 0;
	if (!*own)
		return 0;
	return run(st, st->stmt[STMT_BEGIN], "starting a transaction", err);
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

/* Finish what write_begin started: commit on success, else roll back. */
static int write_end(struct kn_store *st, bool own, int rc,
		     struct kn_error *err)
{
	if (!own)
		return rc;
	if (rc == 0)
		rc = run(st, st->stmt[STMT_COMMIT], "committing", err);
	if (rc < 0)
		rollback_open(st);
	committed(st, rc);
	return rc;
}

int kn_store_begin(struct kn_store *st, struct kn_error *err)
{
	if (!sqlite3_get_autocommit(st->db))
		return kn_errorf(err, KN_EINVAL, NULL,
				 "store: a transaction is already open");
	return run(st, st->stmt[STMT_BEGIN], "starting a transaction", err);
}

int kn_store_commit(struct kn_store *st, struct kn_error *err)
{
	int rc;

	if (sqlite3_get_autocommit(st->db))
		return kn_errorf(err, KN_EINVAL, NULL,
				 "store: no transaction is open");
	rc = run(st, st->stmt[STMT_COMMIT], "committing", err);
	if (rc < 0)
		rollback_open(st);
	committed(st, rc);
	return rc;
}

void kn_store_rollback(struct kn_store *st)
{
	rollback_open(st);
	st->head_dirty = false;
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
			*out = sqlite3_column_int(s, 0);
			rc = SQLITE_OK;
		}
	}
	sqlite3_finalize(s);
	return rc;
}

static int set_wal(sqlite3 *db, const char *path, struct kn_error *err)
{
	sqlite3_stmt *s = NULL;
	int rc = sqlite3_prepare_v2(db, "PRAGMA journal_mode = WAL", -1, &s,
				    NULL);
	int ret = 0;

	if (rc == SQLITE_OK)
		rc = sqlite3_step(s);
	if (rc != SQLITE_ROW) {
		ret = kn_errorf(err, KN_EIO, NULL,
				"%s: setting WAL journal mode: %s", path,
				sqlite3_errmsg(db));
	} else {
		const char *mode = (const char *)sqlite3_column_text(s, 0);

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
		return kn_errorf(err, KN_EIO, NULL, "%s: %s", path,
				 sqlite3_errmsg(db));
	if (pragma_int(db, "PRAGMA user_version", &version) != SQLITE_OK) {
		ret = kn_errorf(err, KN_EIO, NULL, "%s: %s", path,
				sqlite3_errmsg(db));
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
		if (sqlite3_exec(db, MIGRATIONS[v], NULL, NULL, NULL) !=
		    SQLITE_OK) {
			ret = kn_errorf(err, KN_EIO, NULL,
					"%s: migrating to schema version %d:"
					" %s",
					path, v + 1, sqlite3_errmsg(db));
			goto out;
		}
	}
	sql = kn_asprintf("PRAGMA user_version = %d; COMMIT",
			  KN_STORE_SCHEMA_VERSION);
	if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
		ret = kn_errorf(err, KN_EIO, NULL, "%s: %s", path,
				sqlite3_errmsg(db));
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
		return kn_errorf(err, KN_EIO, NULL, "%s: %s", path,
				 sqlite3_errmsg(db));
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
		return kn_errorf(err, KN_EIO, NULL, "%s: %s", path,
				 sqlite3_errmsg(db));
	return migrate(db, path, err);
}

/* Every statement the store runs, prepared once per connection. */
static int prepare_statements(struct kn_store *st, const char *path,
			      struct kn_error *err)
{
	for (int i = 0; i < STMT_COUNT; i++)
		if (sqlite3_prepare_v3(st->db, STATEMENTS[i], -1,
				       SQLITE_PREPARE_PERSISTENT, &st->stmt[i],
				       NULL) != SQLITE_OK)
			return kn_errorf(err, KN_EIO, NULL,
					 "%s: preparing \"%s\": %s", path,
					 STATEMENTS[i], sqlite3_errmsg(st->db));
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
	if (sqlite3_open_v2(path, &st->db, SQLITE_OPEN_READWRITE, NULL) !=
	    SQLITE_OK) {
		ret = kn_errorf(err, KN_EIO, NULL, "%s: %s", path,
				st->db ? sqlite3_errmsg(st->db)
				       : "out of memory");
		goto out;
	}
	ret = setup_connection(st->db, path, err);
	if (ret < 0)
		goto out;
	ret = prepare_statements(st, path, err);
out:
	if (ret < 0) {
		kn_store_free(st);
		return ret;
	}
	*out = st;
	return 0;
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

	if (sqlite3_open_v2(path, &st->db, SQLITE_OPEN_READONLY, NULL) !=
	    SQLITE_OK) {
		ret = kn_errorf(err, KN_EIO, NULL, "%s: %s", path,
				st->db ? sqlite3_errmsg(st->db)
				       : "out of memory");
		goto out;
	}
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
	if (ret < 0) {
		kn_store_free(st);
		return ret;
	}
	*out = st;
	return 0;
}

void kn_store_free(struct kn_store *st)
{
	if (!st)
		return;
	for (int i = 0; i < STMT_COUNT; i++)
		sqlite3_finalize(st->stmt[i]);
	sqlite3_close(st->db);
	EVP_MAC_CTX_free(st->audit_mac);
	free(st);
}

/* ---- audit ---- */

void kn_audit_release(struct kn_audit *a)
{
	if (!a)
		return;
	free(a->actor);
	free(a->role);
	free(a->action);
	free(a->object);
	free(a->outcome);
	free(a->detail);
	free(a->hash);
	memset(a, 0, sizeof(*a));
}

/* ---- the audit chain ---- */

static void put_u64(unsigned char *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (unsigned char)v;
}

/* A string field: 4-byte big-endian length, 0xffffffff for NULL. */
static void mac_field(EVP_MAC_CTX *ctx, const char *v)
{
	unsigned char len[4];
	uint32_t n = v ? (uint32_t)strlen(v) : UINT32_MAX;

	for (int i = 3; i >= 0; i--, n >>= 8)
		len[i] = (unsigned char)n;
	EVP_MAC_update(ctx, len, sizeof(len));
	if (v)
		EVP_MAC_update(ctx, (const unsigned char *)v, strlen(v));
}

/*
 * An HMAC-SHA256 context keyed once; chain_hash copies it per row, so
 * the key schedule is not redone for every row a verify reads.
 */
static EVP_MAC_CTX *mac_new(const unsigned char key[KN_AUDIT_KEY_LEN])
{
	EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
	EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
	OSSL_PARAM params[] = {
		OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST,
						 (char *)"SHA256", 0),
		OSSL_PARAM_construct_end(),
	};

	EVP_MAC_free(mac);
	if (ctx && EVP_MAC_init(ctx, key, KN_AUDIT_KEY_LEN, params) != 1) {
		EVP_MAC_CTX_free(ctx);
		ctx = NULL;
	}
	return ctx;
}

static int hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* 64 lowercase hex digits into 32 bytes; false when it is not that. */
static bool hash_from_hex(const char *hex, unsigned char out[32])
{
	if (!hex || strlen(hex) != KN_AUDIT_HASH_HEX_LEN)
		return false;
	for (int i = 0; i < 32; i++) {
		int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return false;
		out[i] = (unsigned char)(hi << 4 | lo);
	}
	return true;
}

static void hash_to_hex(const unsigned char in[32],
			char out[KN_AUDIT_HASH_HEX_LEN + 1])
{
	static const char digits[] = "0123456789abcdef";

	for (int i = 0; i < 32; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 15];
	}
	out[KN_AUDIT_HASH_HEX_LEN] = '\0';
}

/*
 * hash = HMAC-SHA256(key, prev || id || time || fields), as store.h
 * spells out; keyed is mac_new's context. The id is a parameter so verify
 * can ask whether a row's hash belongs to another position.
 */
static void chain_hash(EVP_MAC_CTX *keyed, const unsigned char prev[32],
		       int64_t id, const struct kn_audit *a,
		       char out[KN_AUDIT_HASH_HEX_LEN + 1])
{
	unsigned char num[16], mac[EVP_MAX_MD_SIZE];
	size_t len = 0;
	EVP_MAC_CTX *ctx = EVP_MAC_CTX_dup(keyed);

	if (!ctx)
		abort(); /* out of memory, as kn_xmalloc */
	put_u64(num, (uint64_t)id);
	put_u64(num + 8, (uint64_t)a->time_ms);
	EVP_MAC_update(ctx, prev, 32);
	EVP_MAC_update(ctx, num, sizeof(num));
	mac_field(ctx, a->actor);
	mac_field(ctx, a->role);
	mac_field(ctx, a->action);
	mac_field(ctx, a->object);
	mac_field(ctx, a->outcome);
	mac_field(ctx, a->detail);
	EVP_MAC_final(ctx, mac, &len, sizeof(mac));
	EVP_MAC_CTX_free(ctx);
	hash_to_hex(mac, out);
}

/* The hash of the row before id (32 zero bytes when there is none). */
static int chain_prev(struct kn_store *st, int64_t id, unsigned char prev[32],
		      char prev_hex[KN_AUDIT_HASH_HEX_LEN + 1],
		      struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_AUDIT_PREV];
	const char *what = "reading the audit chain";
	int rc;

	memset(prev, 0, 32);
	hash_to_hex(prev, prev_hex);
	if (bind_i64(s, 1, id))
		return bind_fail(st, s, what, err);
	rc = step_row(st, s, what, err);
	if (rc == 1) {
		const char *h = (const char *)sqlite3_column_text(s, 0);

		if (!hash_from_hex(h, prev))
			rc = kn_errorf(err, KN_EIO, NULL,
				       "store: audit row before %lld has no"
				       " valid chain hash",
				       (long long)id);
		else
			hash_to_hex(prev, prev_hex);
	}
	stmt_done(s);
	return rc < 0 ? rc : 0;
}

/* Link row a (already inserted, a->id set) to the row before it. */
static int chain_row(struct kn_store *st, const struct kn_audit *a,
		     struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_AUDIT_SET_CHAIN];
	unsigned char prev[32];
	char prev_hex[KN_AUDIT_HASH_HEX_LEN + 1];
	char hash[KN_AUDIT_HASH_HEX_LEN + 1];
	int rc = chain_prev(st, a->id, prev, prev_hex, err);

	if (rc < 0)
		return rc;
	chain_hash(st->audit_mac, prev, a->id, a, hash);
	if (bind_text(s, 1, prev_hex) || bind_text(s, 2, hash) ||
	    bind_i64(s, 3, a->id))
		return bind_fail(st, s, "chaining an audit row", err);
	rc = run(st, s, "chaining an audit row", err);
	if (rc == 0) {
		st->head_dirty = true;
		st->head_id = a->id;
		memcpy(st->head_hash, hash, sizeof(hash));
	}
	return rc;
}

/*
 * Insert a's row (nothing when a is NULL) and chain it. object stands in
 * for a->object when that is NULL, so a caller can audit a job before it
 * has an id. Runs inside the caller's transaction.
 */
static int audit_write(struct kn_store *st, const struct kn_audit *a,
		       const char *object, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_AUDIT_INSERT];
	const char *what = "writing an audit row";
	struct kn_audit row;
	int rc;

	if (!a)
		return 0;
	row = *a;
	row.time_ms = a->time_ms ? a->time_ms : kn_now_ms();
	row.object = a->object ? a->object : (char *)object;
	if (bind_i64(s, 1, row.time_ms) || bind_text(s, 2, row.actor) ||
	    bind_text(s, 3, row.role) || bind_text(s, 4, row.action) ||
	    bind_text(s, 5, row.object) || bind_text(s, 6, row.outcome) ||
	    bind_text(s, 7, row.detail))
		return bind_fail(st, s, what, err);
	rc = run(st, s, what, err);
	if (rc < 0 || !st->audit_mac)
		return rc;
	row.id = sqlite3_last_insert_rowid(st->db);
	return chain_row(st, &row, err);
}

int kn_store_audit_insert(struct kn_store *st, const struct kn_audit *a,
			  struct kn_error *err)
{
	bool own;
	int rc = write_begin(st, &own, err);

	if (rc < 0)
		return rc;
	rc = audit_write(st, a, NULL, err);
	return write_end(st, own, rc, err);
}

static void read_audit(sqlite3_stmt *s, struct kn_audit *a)
{
	a->id = col_i64(s, AUDIT_COL_ID);
	a->time_ms = col_i64(s, AUDIT_COL_TIME);
	a->actor = col_str(s, AUDIT_COL_ACTOR);
	a->role = col_str(s, AUDIT_COL_ROLE);
	a->action = col_str(s, AUDIT_COL_ACTION);
	a->object = col_str(s, AUDIT_COL_OBJECT);
	a->outcome = col_str(s, AUDIT_COL_OUTCOME);
	a->detail = col_str(s, AUDIT_COL_DETAIL);
	a->hash = col_str(s, AUDIT_COL_HASH);
}

int kn_store_audit_list(struct kn_store *st, const struct kn_audit_filter *f,
			struct kn_audit **out, size_t *n, struct kn_error *err)
{
	static const struct kn_audit_filter none = {0};
	sqlite3_stmt *s = st->stmt[STMT_AUDIT_LIST];
	const char *what = "listing the audit log";
	struct kn_audit *rows = NULL;
	size_t count = 0, alloc = 0;
	int rc;

	if (!f)
		f = &none;
	if (bind_text(s, 1, f->actor) || bind_text(s, 2, f->action) ||
	    bind_i64(s, 3, f->since_ms) ||
	    bind_i64(s, 4, f->limit > 0 ? f->limit : AUDIT_LIST_DEFAULT_LIMIT))
		return bind_fail(st, s, what, err);
	while ((rc = step_row(st, s, what, err)) == 1) {
		rows = grow(rows, &alloc, count, sizeof(*rows));
		read_audit(s, &rows[count++]);
	}
	stmt_done(s);
	if (rc < 0) {
		kn_audit_list_free(rows, count);
		return rc;
	}
	*out = rows;
	*n = count;
	return 0;
}

void kn_audit_list_free(struct kn_audit *rows, size_t n)
{
	for (size_t i = 0; rows && i < n; i++)
		kn_audit_release(&rows[i]);
	free(rows);
}

int kn_store_audit_chain_start(struct kn_store *st,
			       const unsigned char key[KN_AUDIT_KEY_LEN],
			       kn_store_audit_head_cb on_head, void *arg,
			       int64_t *chained, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_AUDIT_UNCHAINED];
	const char *what = "chaining the audit log";
	struct kn_audit *rows = NULL;
	size_t count = 0, alloc = 0;
	bool own;
	int rc;

	EVP_MAC_CTX_free(st->audit_mac);
	st->audit_mac = mac_new(key);
	if (!st->audit_mac)
		return kn_errorf(err, KN_EIO, NULL,
				 "store: OpenSSL has no HMAC-SHA256");
	st->on_head = on_head;
	st->on_head_arg = arg;
	rc = write_begin(st, &own, err);
	if (rc < 0)
		return rc;
	/* Read them all first: one statement steps while another updates. */
	while ((rc = step_row(st, s, what, err)) == 1) {
		rows = grow(rows, &alloc, count, sizeof(*rows));
		read_audit(s, &rows[count++]);
	}
	stmt_done(s);
	for (size_t i = 0; rc == 0 && i < count; i++)
		rc = chain_row(st, &rows[i], err);
	kn_audit_list_free(rows, count);
	rc = write_end(st, own, rc, err);
	if (rc == 0 && chained)
		*chained = (int64_t)count;
	return rc;
}

int kn_store_audit_has_chain(struct kn_store *st, bool *out,
			     struct kn_error *err)
{
	int64_t id;
	char hash[KN_AUDIT_HASH_HEX_LEN + 1];
	int rc = kn_store_audit_head(st, &id, hash, err);

	if (rc == 0)
		*out = hash[0] != '\0';
	return rc;
}

int kn_store_audit_head(struct kn_store *st, int64_t *id,
			char hash[KN_AUDIT_HASH_HEX_LEN + 1],
			struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_AUDIT_HEAD];
	const unsigned char *h;
	int rc = step_row(st, s, "reading the audit head", err);

	if (rc >= 0) {
		h = rc == 1 ? sqlite3_column_text(s, 1) : NULL;
		*id = rc == 1 ? col_i64(s, 0) : 0;
		kn_strlcpy(hash, h ? (const char *)h : "",
			   KN_AUDIT_HASH_HEX_LEN + 1);
	}
	stmt_done(s);
	return rc < 0 ? rc : 0;
}

int kn_store_audit_hash_of(struct kn_store *st, int64_t id,
			   char hash[KN_AUDIT_HASH_HEX_LEN + 1],
			   struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_AUDIT_HASH_OF];
	const char *what = "reading an audit row";
	int rc;

	if (bind_i64(s, 1, id))
		return bind_fail(st, s, what, err);
	rc = step_row(st, s, what, err);
	if (rc == 1) {
		const unsigned char *h = sqlite3_column_text(s, 0);

		kn_strlcpy(hash, h ? (const char *)h : "",
			   KN_AUDIT_HASH_HEX_LEN + 1);
		rc = 0;
	} else if (rc == 0) {
		rc = kn_errorf(err, KN_ENOTFOUND, NULL,
			       "audit row %lld not found", (long long)id);
	}
	stmt_done(s);
	return rc;
}

static const char *const AUDIT_PROBLEM_NAMES[] = {
	[KN_AUDIT_OK] = "ok",
	[KN_AUDIT_EDITED] = "edited",
	[KN_AUDIT_REORDERED] = "reordered",
	[KN_AUDIT_DELETED] = "deleted",
	[KN_AUDIT_TRUNCATED] = "truncated",
	[KN_AUDIT_UNCHAINED] = "unchained",
};

const char *kn_audit_problem_name(enum kn_audit_problem p)
{
	if ((unsigned)p >= sizeof(AUDIT_PROBLEM_NAMES) /
				   sizeof(AUDIT_PROBLEM_NAMES[0]))
		return "unknown";
	return AUDIT_PROBLEM_NAMES[p];
}

static void verify_bad(struct kn_audit_verify *v, enum kn_audit_problem p,
		       int64_t id, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void verify_bad(struct kn_audit_verify *v, enum kn_audit_problem p,
		       int64_t id, const char *fmt, ...)
{
	va_list ap;

	v->problem = p;
	v->bad_id = id;
	va_start(ap, fmt);
	vsnprintf(v->message, sizeof(v->message), fmt, ap);
	va_end(ap);
}

/*
 * Row a's fields do not match its hash: was it written at another id
 * (rows swapped or moved)? Tried for every id the log has ever used, so
 * this costs one more pass, and only once, at the first bad row.
 */
static int64_t written_as(struct kn_store *st, EVP_MAC_CTX *keyed,
			  const struct kn_audit *a, const unsigned char prev[32],
			  struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_AUDIT_MAX_ID];
	char hash[KN_AUDIT_HASH_HEX_LEN + 1];
	int64_t max_id = 0;
	int rc = step_row(st, s, "reading the audit log", err);

	if (rc == 1)
		max_id = col_i64(s, 0);
	stmt_done(s);
	for (int64_t id = 1; id <= max_id; id++) {
		if (id == a->id)
			continue;
		chain_hash(keyed, prev, id, a, hash);
		if (!strcmp(hash, a->hash))
			return id;
	}
	return 0;
}

/* One row of the walk; false when it is bad (v filled). */
static bool verify_row(struct kn_store *st, EVP_MAC_CTX *keyed,
		       const struct kn_audit *a, const char *prev_hash_col,
		       int64_t last_id, const char *last_hash,
		       struct kn_audit_verify *v, struct kn_error *err)
{
	unsigned char prev[32];
	char hash[KN_AUDIT_HASH_HEX_LEN + 1];
	int64_t other;

	if (!a->hash) {
		verify_bad(v, KN_AUDIT_UNCHAINED, a->id,
			   "row %lld has no chain hash (written without the"
			   " chain, or its hash was removed)",
			   (long long)a->id);
		return false;
	}
	if (a->id != last_id + 1) {
		verify_bad(v, KN_AUDIT_DELETED, last_id + 1,
			   last_id + 1 == a->id - 1
				   ? "row %lld is missing (deleted): the log"
				     " goes from row %lld to row %lld"
				   : "rows %lld.. are missing (deleted): the log"
				     " goes from row %lld to row %lld",
			   (long long)(last_id + 1), (long long)last_id,
			   (long long)a->id);
		return false;
	}
	if (!hash_from_hex(prev_hash_col, prev)) {
		verify_bad(v, KN_AUDIT_EDITED, a->id,
			   "row %lld: its link to the previous row is not a"
			   " hash (edited)",
			   (long long)a->id);
		return false;
	}
	chain_hash(keyed, prev, a->id, a, hash);
	if (strcmp(hash, a->hash) != 0) {
		other = written_as(st, keyed, a, prev, err);
		if (other)
			verify_bad(v, KN_AUDIT_REORDERED, a->id,
				   "row %lld holds the row written as row"
				   " %lld (rows were reordered)",
				   (long long)a->id, (long long)other);
		else
			verify_bad(v, KN_AUDIT_EDITED, a->id,
				   "row %lld (%s %s by %s) does not match its"
				   " hash (edited)",
				   (long long)a->id, a->action ? a->action : "",
				   a->object ? a->object : "",
				   a->actor ? a->actor : "");
		return false;
	}
	if (strcmp(prev_hash_col, last_hash) != 0) {
		verify_bad(v, KN_AUDIT_DELETED, a->id,
			   "row %lld does not follow row %lld (a row between"
			   " them was deleted or replaced)",
			   (long long)a->id, (long long)last_id);
		return false;
	}
	return true;
}

int kn_store_audit_verify(struct kn_store *st,
			  const unsigned char key[KN_AUDIT_KEY_LEN],
			  int64_t anchor_id, const char *anchor_hash,
			  struct kn_audit_verify *out, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_AUDIT_WALK];
	const char *what = "reading the audit log";
	EVP_MAC_CTX *keyed = mac_new(key);
	struct kn_audit_verify v;
	char last_hash[KN_AUDIT_HASH_HEX_LEN + 1];
	char anchor_row_hash[KN_AUDIT_HASH_HEX_LEN + 1] = "";
	unsigned char zero[32] = {0};
	int64_t last_id = 0;
	bool good = true;
	int rc;

	if (!keyed)
		return kn_errorf(err, KN_EIO, NULL,
				 "store: OpenSSL has no HMAC-SHA256");
	memset(&v, 0, sizeof(v));
	hash_to_hex(zero, last_hash);
	while (good && (rc = step_row(st, s, what, err)) == 1) {
		struct kn_audit a;
		char *prev_col = col_str(s, AUDIT_COL_PREV_HASH);

		memset(&a, 0, sizeof(a));
		read_audit(s, &a);
		v.rows++;
		good = verify_row(st, keyed, &a, prev_col ? prev_col : "",
				  last_id, last_hash, &v, err);
		if (good) {
			last_id = a.id;
			kn_strlcpy(last_hash, a.hash, sizeof(last_hash));
			if (a.id == anchor_id)
				kn_strlcpy(anchor_row_hash, a.hash,
					   sizeof(anchor_row_hash));
		}
		free(prev_col);
		kn_audit_release(&a);
	}
	stmt_done(s);
	EVP_MAC_CTX_free(keyed);
	if (rc < 0)
		return rc;
	if (good && anchor_id > last_id)
		verify_bad(&v, KN_AUDIT_TRUNCATED, last_id + 1,
			   "row %lld is missing: the log ends at row %lld but"
			   " its recorded head is row %lld (rows were deleted"
			   " from the end)",
			   (long long)(last_id + 1), (long long)last_id,
			   (long long)anchor_id);
	else if (good && anchor_id > 0 && anchor_hash &&
		 strcmp(anchor_row_hash, anchor_hash) != 0)
		verify_bad(&v, KN_AUDIT_TRUNCATED, anchor_id,
			   "row %lld is not the row recorded as the head"
			   " (rows were deleted from the end and others"
			   " written in their place)",
			   (long long)anchor_id);
	v.head_id = last_id;
	kn_strlcpy(v.head_hash, last_id ? last_hash : "", sizeof(v.head_hash));
	*out = v;
	return 0;
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
		return kn_errorf(err, KN_EIO, NULL, "%s: %s", path,
				 strerror(errno));
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
		ret = kn_errorf(err, KN_EIO, NULL, "%s: backup: %s", path,
				sqlite3_errstr(rc));
		goto out;
	}
	/* A single file: the copy is read without its WAL. */
	if (sqlite3_exec(dest, "PRAGMA journal_mode = DELETE", NULL, NULL,
			 NULL) != SQLITE_OK)
		ret = kn_errorf(err, KN_EIO, NULL, "%s: %s", path,
				sqlite3_errmsg(dest));
out:
	sqlite3_close(dest);
	if (ret < 0)
		unlink(path);
	return ret;
}

/* ---- tokens ---- */

void kn_token_row_release(struct kn_token_row *t)
{
	if (!t)
		return;
	free(t->name);
	free(t->role);
	free(t->hash);
	free(t->created_by);
	memset(t, 0, sizeof(*t));
}

static void read_token(sqlite3_stmt *s, struct kn_token_row *t)
{
	t->id = col_i64(s, TOKEN_COL_ID);
	t->name = col_str(s, TOKEN_COL_NAME);
	t->role = col_str(s, TOKEN_COL_ROLE);
	t->hash = col_str(s, TOKEN_COL_HASH);
	t->created_by = col_str(s, TOKEN_COL_CREATED_BY);
	t->created_at = col_i64(s, TOKEN_COL_CREATED_AT);
	t->revoked_at = col_i64(s, TOKEN_COL_REVOKED_AT);
	t->last_used_at = col_i64(s, TOKEN_COL_LAST_USED_AT);
}

int kn_store_token_insert(struct kn_store *st, const struct kn_token_row *t,
			  const struct kn_audit *a, int64_t *out_id,
			  struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_TOKEN_INSERT];
	const char *what = "inserting a token";
	char *object = NULL;
	int64_t id = 0;
	bool own;
	int rc;

	rc = write_begin(st, &own, err);
	if (rc < 0)
		return rc;
	if (bind_text(s, 1, t->name) || bind_text(s, 2, t->role) ||
	    bind_text(s, 3, t->hash) || bind_text(s, 4, t->created_by) ||
	    bind_i64(s, 5, t->created_at) || bind_i64(s, 6, t->revoked_at) ||
	    bind_i64(s, 7, t->last_used_at)) {
		rc = bind_fail(st, s, what, err);
		goto out;
	}
	rc = run(st, s, what, err);
	/* The only unique key on tokens is the active name. */
	if (rc == -EEXIST)
		rc = kn_errorf(err, KN_ECONFLICT, "name",
			       "a token named %s already exists", t->name);
	if (rc < 0)
		goto out;
	id = sqlite3_last_insert_rowid(st->db);
	object = kn_asprintf("token/%s", t->name);
	rc = audit_write(st, a, object, err);
out:
	free(object);
	rc = write_end(st, own, rc, err);
	if (rc == 0 && out_id)
		*out_id = id;
	return rc;
}

int kn_store_token_by_hash(struct kn_store *st, const char *hash,
			   struct kn_token_row *out, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_TOKEN_BY_HASH];
	sqlite3_stmt *touch = st->stmt[STMT_TOKEN_TOUCH];
	const char *what = "looking up a token";
	struct kn_token_row t = {0};
	int64_t now;
	int rc;

	if (bind_text(s, 1, hash))
		return bind_fail(st, s, what, err);
	rc = step_row(st, s, what, err);
	if (rc == 1)
		read_token(s, &t);
	stmt_done(s);
	if (rc == 0)
		return kn_errorf(err, KN_ENOTFOUND, "token",
				 "no active token matches");
	if (rc < 0)
		return rc;

	now = kn_now_ms();
	if (now - t.last_used_at >= TOKEN_LAST_USED_GRANULARITY_MS) {
		what = "recording a token's use";
		if (bind_i64(touch, 1, now) || bind_i64(touch, 2, t.id)) {
			rc = bind_fail(st, touch, what, err);
			goto out;
		}
		rc = run(st, touch, what, err);
		if (rc < 0)
			goto out;
		t.last_used_at = now;
	}
out:
	if (rc < 0) {
		kn_token_row_release(&t);
		return rc;
	}
	*out = t;
	return 0;
}

int kn_store_token_list(struct kn_store *st, struct kn_token_row **out,
			size_t *n, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_TOKEN_LIST];
	struct kn_token_row *rows = NULL;
	size_t count = 0, alloc = 0;
	int rc;

	while ((rc = step_row(st, s, "listing tokens", err)) == 1) {
		rows = grow(rows, &alloc, count, sizeof(*rows));
		read_token(s, &rows[count++]);
	}
	stmt_done(s);
	if (rc < 0) {
		kn_token_list_free(rows, count);
		return rc;
	}
	*out = rows;
	*n = count;
	return 0;
}

void kn_token_list_free(struct kn_token_row *rows, size_t n)
{
	for (size_t i = 0; rows && i < n; i++)
		kn_token_row_release(&rows[i]);
	free(rows);
}

int kn_store_token_revoke(struct kn_store *st, const char *name,
			  const struct kn_audit *a, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_TOKEN_REVOKE];
	const char *what = "revoking a token";
	char *object = NULL;
	bool own;
	int rc;

	rc = write_begin(st, &own, err);
	if (rc < 0)
		return rc;
	if (bind_i64(s, 1, kn_now_ms()) || bind_text(s, 2, name)) {
		rc = bind_fail(st, s, what, err);
		goto out;
	}
	rc = run(st, s, what, err);
	if (rc < 0)
		goto out;
	if (sqlite3_changes(st->db) == 0) {
		rc = kn_errorf(err, KN_ENOTFOUND, "name",
			       "no active token named %s", name ? name : "");
		goto out;
	}
	object = kn_asprintf("token/%s", name);
	rc = audit_write(st, a, object, err);
out:
	free(object);
	return write_end(st, own, rc, err);
}

int kn_store_token_count(struct kn_store *st, int *out, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_TOKEN_COUNT];
	int count = 0;
	int rc = step_row(st, s, "counting tokens", err);

	if (rc == 1)
		count = col_int(s, 0);
	stmt_done(s);
	if (rc < 0)
		return rc;
	*out = count;
	return 0;
}

/* ---- jobs ---- */

void kn_job_row_release(struct kn_job_row *j)
{
	if (!j)
		return;
	free(j->name);
	free(j->owner);
	free(j->filename);
	free(j->spec_yaml);
	free(j->spec_json);
	free(j->reason);
	memset(j, 0, sizeof(*j));
}

static int bad_state(const char *kind, int64_t id, const unsigned char *name,
		     struct kn_error *err)
{
	return kn_errorf(err, KN_EIO, "state",
			 "store: %s %" PRId64 " has unknown state '%s'", kind,
			 id, name ? (const char *)name : "");
}

/* Read a jobs row in JOB_COLUMNS order plus the two spec columns. */
static int read_job(sqlite3_stmt *s, struct kn_job_row *j,
		    struct kn_error *err)
{
	const unsigned char *state = sqlite3_column_text(s, JOB_COL_STATE);
	int parsed = kn_job_state_parse((const char *)state);

	if (parsed < 0)
		return bad_state("job", col_i64(s, JOB_COL_ID), state, err);
	j->id = col_i64(s, JOB_COL_ID);
	j->name = col_str(s, JOB_COL_NAME);
	j->owner = col_str(s, JOB_COL_OWNER);
	j->state = (enum kn_job_state)parsed;
	j->priority = col_int(s, JOB_COL_PRIORITY);
	j->tasks = col_int(s, JOB_COL_TASKS);
	j->filename = col_str(s, JOB_COL_FILENAME);
	j->spec_yaml = col_str(s, JOB_COL_SPEC_YAML);
	j->spec_json = col_str(s, JOB_COL_SPEC_JSON);
	j->submitted_at = col_i64(s, JOB_COL_SUBMITTED_AT);
	j->started_at = col_i64(s, JOB_COL_STARTED_AT);
	j->ended_at = col_i64(s, JOB_COL_ENDED_AT);
	j->not_before = col_i64(s, JOB_COL_NOT_BEFORE);
	j->attempts = col_int(s, JOB_COL_ATTEMPTS);
	j->retries_used = col_int(s, JOB_COL_RETRIES_USED);
	j->cancel_requested = col_bool(s, JOB_COL_CANCEL_REQUESTED);
	j->reason = col_str(s, JOB_COL_REASON);
	j->exit_code = col_int(s, JOB_COL_EXIT_CODE);
	return 0;
}

int kn_store_job_insert(struct kn_store *st, const struct kn_job_row *j,
			const struct kn_audit *a, int64_t *out_id,
			struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_JOB_INSERT];
	const char *what = "inserting a job";
	char object[32];
	int64_t id = 0;
	bool own;
	int rc;

	if (!job_state_valid(j->state))
		return kn_errorf(err, KN_EINVAL, "state",
				 "unknown job state %d", (int)j->state);
	rc = write_begin(st, &own, err);
	if (rc < 0)
		return rc;
	if (bind_text(s, 1, j->name) || bind_text(s, 2, j->owner) ||
	    bind_text(s, 3, kn_job_state_name(j->state)) ||
	    bind_i64(s, 4, j->priority) || bind_i64(s, 5, j->tasks) ||
	    bind_text(s, 6, j->filename) || bind_i64(s, 7, j->submitted_at) ||
	    bind_i64(s, 8, j->started_at) || bind_i64(s, 9, j->ended_at) ||
	    bind_i64(s, 10, j->not_before) || bind_i64(s, 11, j->attempts) ||
	    bind_i64(s, 12, j->retries_used) ||
	    bind_i64(s, 13, j->cancel_requested) ||
	    bind_text(s, 14, j->reason) || bind_i64(s, 15, j->exit_code) ||
	    bind_text(s, 16, j->spec_yaml) || bind_text(s, 17, j->spec_json)) {
		rc = bind_fail(st, s, what, err);
		goto out;
	}
	rc = run(st, s, what, err);
	if (rc < 0)
		goto out;
	id = sqlite3_last_insert_rowid(st->db);
	snprintf(object, sizeof(object), "job/%" PRId64, id);
	rc = audit_write(st, a, object, err);
out:
	rc = write_end(st, own, rc, err);
	if (rc == 0 && out_id)
		*out_id = id;
	return rc;
}

int kn_store_job_get(struct kn_store *st, int64_t id, struct kn_job_row *out,
		     struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_JOB_GET];
	const char *what = "reading a job";
	struct kn_job_row j = {0};
	int rc;

	if (bind_i64(s, 1, id))
		return bind_fail(st, s, what, err);
	rc = step_row(st, s, what, err);
	if (rc == 1)
		rc = read_job(s, &j, err);
	else if (rc == 0)
		rc = kn_errorf(err, KN_ENOTFOUND, "id",
			       "job %" PRId64 " not found", id);
	stmt_done(s);
	if (rc < 0)
		return rc;
	*out = j;
	return 0;
}

int kn_store_job_update(struct kn_store *st, const struct kn_job_row *j,
			const struct kn_audit *a, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_JOB_UPDATE];
	const char *what = "updating a job";
	char object[32];
	bool own;
	int rc;

	if (!job_state_valid(j->state))
		return kn_errorf(err, KN_EINVAL, "state",
				 "unknown job state %d", (int)j->state);
	rc = write_begin(st, &own, err);
	if (rc < 0)
		return rc;
	if (bind_text(s, 1, kn_job_state_name(j->state)) ||
	    bind_i64(s, 2, j->started_at) || bind_i64(s, 3, j->ended_at) ||
	    bind_i64(s, 4, j->not_before) || bind_i64(s, 5, j->attempts) ||
	    bind_i64(s, 6, j->retries_used) ||
	    bind_i64(s, 7, j->cancel_requested) || bind_text(s, 8, j->reason) ||
	    bind_i64(s, 9, j->exit_code) || bind_i64(s, 10, j->id)) {
		rc = bind_fail(st, s, what, err);
		goto out;
	}
	rc = run(st, s, what, err);
	if (rc < 0)
		goto out;
	if (sqlite3_changes(st->db) == 0) {
		rc = kn_errorf(err, KN_ENOTFOUND, "id",
			       "job %" PRId64 " not found", j->id);
		goto out;
	}
	snprintf(object, sizeof(object), "job/%" PRId64, j->id);
	rc = audit_write(st, a, object, err);
out:
	return write_end(st, own, rc, err);
}

int kn_store_job_list(struct kn_store *st, const struct kn_job_filter *f,
		      struct kn_job_row **out, size_t *n,
		      struct kn_error *err)
{
	static const struct kn_job_filter none = {.state = -1};
	const char *what = "listing jobs";
	struct kn_job_row *rows = NULL;
	size_t count = 0, alloc = 0;
	sqlite3_stmt *s;
	int brc, rc;

	if (!f)
		f = &none;
	if (f->state >= 0 && !job_state_valid((enum kn_job_state)f->state))
		return kn_errorf(err, KN_EINVAL, "state",
				 "unknown job state %d", f->state);
	if (f->state >= 0 && f->active_only && f->state != KN_JOB_QUEUED &&
	    f->state != KN_JOB_RUNNING)
		goto done; /* no job is both */

	if (f->state >= 0) {
		s = st->stmt[STMT_JOB_LIST_STATE];
		brc = bind_text(s, 5, JOB_STATE_NAMES[f->state]);
	} else if (f->active_only) {
		s = st->stmt[STMT_JOB_LIST_ACTIVE];
		brc = bind_text(s, 5, JOB_STATE_NAMES[KN_JOB_QUEUED]) ||
		      bind_text(s, 6, JOB_STATE_NAMES[KN_JOB_RUNNING]);
	} else {
		s = st->stmt[STMT_JOB_LIST_ALL];
		brc = SQLITE_OK;
	}
	if (brc || bind_text(s, 1, f->owner) || bind_text(s, 2, f->name) ||
	    bind_i64(s, 3, f->with_spec) ||
	    bind_i64(s, 4, f->limit > 0 ? f->limit : -1))
		return bind_fail(st, s, what, err);
	while ((rc = step_row(st, s, what, err)) == 1) {
		rows = grow(rows, &alloc, count, sizeof(*rows));
		rc = read_job(s, &rows[count], err);
		if (rc < 0)
			break;
		count++;
	}
	stmt_done(s);
	if (rc < 0) {
		kn_job_list_free(rows, count);
		return rc;
	}
done:
	*out = rows;
	*n = count;
	return 0;
}

void kn_job_list_free(struct kn_job_row *rows, size_t n)
{
	for (size_t i = 0; rows && i < n; i++)
		kn_job_row_release(&rows[i]);
	free(rows);
}

/* ---- attempts ---- */

void kn_attempt_row_release(struct kn_attempt_row *a)
{
	if (!a)
		return;
	free(a->reason);
	free(a->checkpoint);
	memset(a, 0, sizeof(*a));
}

/* A foreign-key failure on attempts or tasks can only mean the job. */
static int job_missing(int rc, int64_t job_id, struct kn_error *err)
{
	if (rc == -ENOENT)
		return kn_errorf(err, KN_ENOTFOUND, "job_id",
				 "job %" PRId64 " not found", job_id);
	return rc;
}

int kn_store_attempt_put(struct kn_store *st, const struct kn_attempt_row *a,
			 struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_ATTEMPT_PUT];
	const char *what = "writing an attempt";

	if (!job_state_valid(a->state))
		return kn_errorf(err, KN_EINVAL, "state",
				 "unknown attempt state %d", (int)a->state);
	if (bind_i64(s, 1, a->job_id) || bind_i64(s, 2, a->number) ||
	    bind_text(s, 3, kn_job_state_name(a->state)) ||
	    bind_i64(s, 4, a->started_at) || bind_i64(s, 5, a->ended_at) ||
	    bind_i64(s, 6, a->exit_code) || bind_i64(s, 7, a->signal) ||
	    bind_text(s, 8, a->reason) || bind_text(s, 9, a->checkpoint) ||
	    bind_i64(s, 10, a->checkpoint_at) ||
	    bind_i64(s, 11, a->restore_ms) || bind_i64(s, 12, a->useful_ms) ||
	    bind_i64(s, 13, a->lost_ms))
		return bind_fail(st, s, what, err);
	return job_missing(run(st, s, what, err), a->job_id, err);
}

static int read_attempt(sqlite3_stmt *s, struct kn_attempt_row *a,
			struct kn_error *err)
{
	const unsigned char *state = sqlite3_column_text(s, ATTEMPT_COL_STATE);
	int parsed = kn_job_state_parse((const char *)state);

	if (parsed < 0)
		return bad_state("attempt of job",
				 col_i64(s, ATTEMPT_COL_JOB_ID), state, err);
	a->job_id = col_i64(s, ATTEMPT_COL_JOB_ID);
	a->number = col_int(s, ATTEMPT_COL_NUMBER);
	a->state = (enum kn_job_state)parsed;
	a->started_at = col_i64(s, ATTEMPT_COL_STARTED_AT);
	a->ended_at = col_i64(s, ATTEMPT_COL_ENDED_AT);
	a->exit_code = col_int(s, ATTEMPT_COL_EXIT_CODE);
	a->signal = col_int(s, ATTEMPT_COL_SIGNAL);
	a->reason = col_str(s, ATTEMPT_COL_REASON);
	a->checkpoint = col_str(s, ATTEMPT_COL_CHECKPOINT);
	a->checkpoint_at = col_i64(s, ATTEMPT_COL_CHECKPOINT_AT);
	a->restore_ms = col_i64(s, ATTEMPT_COL_RESTORE_MS);
	a->useful_ms = col_i64(s, ATTEMPT_COL_USEFUL_MS);
	a->lost_ms = col_i64(s, ATTEMPT_COL_LOST_MS);
	return 0;
}

int kn_store_attempt_list(struct kn_store *st, int64_t job_id,
			  struct kn_attempt_row **out, size_t *n,
			  struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_ATTEMPT_LIST];
	const char *what = "listing attempts";
	struct kn_attempt_row *rows = NULL;
	size_t count = 0, alloc = 0;
	int rc;

	if (bind_i64(s, 1, job_id))
		return bind_fail(st, s, what, err);
	while ((rc = step_row(st, s, what, err)) == 1) {
		rows = grow(rows, &alloc, count, sizeof(*rows));
		rc = read_attempt(s, &rows[count], err);
		if (rc < 0)
			break;
		count++;
	}
	stmt_done(s);
	if (rc < 0) {
		kn_attempt_list_free(rows, count);
		return rc;
	}
	*out = rows;
	*n = count;
	return 0;
}

void kn_attempt_list_free(struct kn_attempt_row *rows, size_t n)
{
	for (size_t i = 0; rows && i < n; i++)
		kn_attempt_row_release(&rows[i]);
	free(rows);
}

/* ---- outputs ---- */

void kn_output_row_release(struct kn_output_row *o)
{
	if (!o)
		return;
	free(o->name);
	free(o->sha256);
	free(o->url);
	memset(o, 0, sizeof(*o));
}

int kn_store_output_put(struct kn_store *st, const struct kn_output_row *o,
			struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_OUTPUT_PUT];
	const char *what = "writing an output";

	if (bind_i64(s, 1, o->job_id) || bind_text(s, 2, o->name) ||
	    bind_i64(s, 3, o->size) || bind_text(s, 4, o->sha256) ||
	    bind_text(s, 5, o->url))
		return bind_fail(st, s, what, err);
	return job_missing(run(st, s, what, err), o->job_id, err);
}

int kn_store_output_list(struct kn_store *st, int64_t job_id,
			 struct kn_output_row **out, size_t *n,
			 struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_OUTPUT_LIST];
	const char *what = "listing outputs";
	struct kn_output_row *rows = NULL;
	size_t count = 0, alloc = 0;
	int rc;

	if (bind_i64(s, 1, job_id))
		return bind_fail(st, s, what, err);
	while ((rc = step_row(st, s, what, err)) == 1) {
		rows = grow(rows, &alloc, count, sizeof(*rows));
		rows[count].job_id = col_i64(s, OUTPUT_COL_JOB_ID);
		rows[count].name = col_str(s, OUTPUT_COL_NAME);
		rows[count].size = col_i64(s, OUTPUT_COL_SIZE);
		rows[count].sha256 = col_str(s, OUTPUT_COL_SHA256);
		rows[count].url = col_str(s, OUTPUT_COL_URL);
		count++;
	}
	stmt_done(s);
	if (rc < 0) {
		kn_output_list_free(rows, count);
		return rc;
	}
	*out = rows;
	*n = count;
	return 0;
}

void kn_output_list_free(struct kn_output_row *rows, size_t n)
{
	for (size_t i = 0; rows && i < n; i++)
		kn_output_row_release(&rows[i]);
	free(rows);
}

/* ---- alerts ---- */

void kn_alert_row_release(struct kn_alert_row *a)
{
	if (!a)
		return;
	free(a->fingerprint);
	free(a->rule);
	free(a->severity);
	free(a->state);
	free(a->labels_json);
	free(a->summary);
	memset(a, 0, sizeof(*a));
}

int kn_store_alert_fire(struct kn_store *st, const struct kn_alert_row *a,
			int64_t *out_id, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_ALERT_INSERT];
	const char *what = "recording an alert";
	int rc;

	if (bind_text(s, 1, a->fingerprint) || bind_text(s, 2, a->rule) ||
	    bind_text(s, 3, a->severity) || bind_text(s, 4, a->labels_json) ||
	    bind_text(s, 5, a->summary) ||
	    sqlite3_bind_double(s, 6, a->value) ||
	    bind_i64(s, 7, a->active_at) || bind_i64(s, 8, a->fired_at))
		return bind_fail(st, s, what, err);
	rc = run(st, s, what, err);
	if (rc == 0 && out_id)
		*out_id = sqlite3_last_insert_rowid(st->db);
	return rc;
}

int kn_store_alert_resolve(struct kn_store *st, const char *fingerprint,
			   int64_t at, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_ALERT_RESOLVE];
	const char *what = "resolving an alert";

	if (bind_text(s, 1, fingerprint) || bind_i64(s, 2, at))
		return bind_fail(st, s, what, err);
	return run(st, s, what, err);
}

int kn_store_alert_resolve_all(struct kn_store *st, int64_t at,
			       struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_ALERT_RESOLVE_ALL];
	const char *what = "resolving alerts";

	if (bind_i64(s, 1, at))
		return bind_fail(st, s, what, err);
	return run(st, s, what, err);
}

int kn_store_alert_list(struct kn_store *st, int64_t resolved_since,
			int limit, struct kn_alert_row **out, size_t *n,
			struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_ALERT_LIST];
	const char *what = "listing alerts";
	struct kn_alert_row *rows = NULL;
	size_t count = 0, alloc = 0;
	int rc;

	if (bind_i64(s, 1, resolved_since) || bind_i64(s, 2, limit))
		return bind_fail(st, s, what, err);
	while ((rc = step_row(st, s, what, err)) == 1) {
		struct kn_alert_row *a;
		rows = grow(rows, &alloc, count, sizeof(*rows));
		a = &rows[count++];
		a->id = col_i64(s, ALERT_COL_ID);
		a->fingerprint = col_str(s, ALERT_COL_FINGERPRINT);
		a->rule = col_str(s, ALERT_COL_RULE);
		a->severity = col_str(s, ALERT_COL_SEVERITY);
		a->state = col_str(s, ALERT_COL_STATE);
		a->labels_json = col_str(s, ALERT_COL_LABELS);
		a->summary = col_str(s, ALERT_COL_SUMMARY);
		a->value = sqlite3_column_double(s, ALERT_COL_VALUE);
		a->active_at = col_i64(s, ALERT_COL_ACTIVE_AT);
		a->fired_at = col_i64(s, ALERT_COL_FIRED_AT);
		a->resolved_at = col_i64(s, ALERT_COL_RESOLVED_AT);
	}
	stmt_done(s);
	if (rc < 0) {
		kn_alert_list_free(rows, count);
		return rc;
	}
	*out = rows;
	*n = count;
	return 0;
}

void kn_alert_list_free(struct kn_alert_row *rows, size_t n)
{
	for (size_t i = 0; rows && i < n; i++)
		kn_alert_row_release(&rows[i]);
	free(rows);
}

/* ---- tasks ---- */

void kn_task_row_release(struct kn_task_row *t)
{
	if (!t)
		return;
	free(t->node);
	free(t->devices);
	free(t->task_dir);
	memset(t, 0, sizeof(*t));
}

int kn_store_task_put(struct kn_store *st, const struct kn_task_row *t,
		      struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_TASK_PUT];
	const char *what = "writing a task";

	if (!task_state_valid(t->state))
		return kn_errorf(err, KN_EINVAL, "state",
				 "unknown task state %d", (int)t->state);
	if (bind_i64(s, 1, t->job_id) || bind_i64(s, 2, t->attempt) ||
	    bind_i64(s, 3, t->rank) || bind_text(s, 4, t->node) ||
	    bind_text(s, 5, t->devices) || bind_i64(s, 6, t->gpu_milli) ||
	    bind_text(s, 7, t->task_dir) ||
	    bind_text(s, 8, kn_task_state_name(t->state)) ||
	    bind_i64(s, 9, t->shim_pid) || bind_i64(s, 10, t->shim_start) ||
	    bind_i64(s, 11, t->started_at) || bind_i64(s, 12, t->ended_at) ||
	    bind_i64(s, 13, t->exit_code) || bind_i64(s, 14, t->signal) ||
	    bind_i64(s, 15, t->master_port))
		return bind_fail(st, s, what, err);
	return job_missing(run(st, s, what, err), t->job_id, err);
}

static int read_task(sqlite3_stmt *s, struct kn_task_row *t,
		     struct kn_error *err)
{
	const unsigned char *state = sqlite3_column_text(s, TASK_COL_STATE);
	int parsed = kn_task_state_parse((const char *)state);

	if (parsed < 0)
		return bad_state("task of job", col_i64(s, TASK_COL_JOB_ID),
				 state, err);
	t->job_id = col_i64(s, TASK_COL_JOB_ID);
	t->attempt = col_int(s, TASK_COL_ATTEMPT);
	t->rank = col_int(s, TASK_COL_RANK);
	t->node = col_str(s, TASK_COL_NODE);
	t->devices = col_str(s, TASK_COL_DEVICES);
	t->gpu_milli = col_int(s, TASK_COL_GPU_MILLI);
	t->task_dir = col_str(s, TASK_COL_TASK_DIR);
	t->state = (enum kn_task_state)parsed;
	t->shim_pid = col_int(s, TASK_COL_SHIM_PID);
	t->shim_start = col_i64(s, TASK_COL_SHIM_START);
	t->started_at = col_i64(s, TASK_COL_STARTED_AT);
	t->ended_at = col_i64(s, TASK_COL_ENDED_AT);
	t->exit_code = col_int(s, TASK_COL_EXIT_CODE);
	t->signal = col_int(s, TASK_COL_SIGNAL);
	t->master_port = col_int(s, TASK_COL_MASTER_PORT);
	return 0;
}

/* Run a bound task query to the end; resets s. */
static int read_tasks(struct kn_store *st, sqlite3_stmt *s,
		      struct kn_task_row **out, size_t *n,
		      struct kn_error *err)
{
	const char *what = "listing tasks";
	struct kn_task_row *rows = NULL;
	size_t count = 0, alloc = 0;
	int rc;

	while ((rc = step_row(st, s, what, err)) == 1) {
		rows = grow(rows, &alloc, count, sizeof(*rows));
		rc = read_task(s, &rows[count], err);
		if (rc < 0)
			break;
		count++;
	}
	stmt_done(s);
	if (rc < 0) {
		kn_task_list_free(rows, count);
		return rc;
	}
	*out = rows;
	*n = count;
	return 0;
}

int kn_store_task_list(struct kn_store *st, int64_t job_id, int attempt,
		       struct kn_task_row **out, size_t *n,
		       struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_TASK_LIST];

	if (bind_i64(s, 1, job_id) || bind_i64(s, 2, attempt))
		return bind_fail(st, s, "listing tasks", err);
	return read_tasks(st, s, out, n, err);
}

void kn_task_list_free(struct kn_task_row *rows, size_t n)
{
	for (size_t i = 0; rows && i < n; i++)
		kn_task_row_release(&rows[i]);
	free(rows);
}

/* ---- nodes and devices ---- */

static void device_row_release(struct kn_device_row *d)
{
	free(d->node);
	free(d->uuid);
	free(d->model);
	memset(d, 0, sizeof(*d));
}

void kn_node_row_release(struct kn_node_row *n)
{
	if (!n)
		return;
	free(n->name);
	free(n->state);
	free(n->labels_json);
	free(n->taints_json);
	free(n->reason);
	for (size_t i = 0; n->devices && i < n->n_devices; i++)
		device_row_release(&n->devices[i]);
	free(n->devices);
	memset(n, 0, sizeof(*n));
}

int kn_store_node_put(struct kn_store *st, const struct kn_node_row *n,
		      struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_NODE_PUT];
	sqlite3_stmt *del = st->stmt[STMT_DEVICE_DELETE_NODE];
	sqlite3_stmt *ins = st->stmt[STMT_DEVICE_INSERT];
	const char *what = "writing a node";
	bool own;
	int rc;

	rc = write_begin(st, &own, err);
	if (rc < 0)
		return rc;
	if (bind_text(s, 1, n->name) || bind_text(s, 2, n->state) ||
	    bind_text(s, 3, n->labels_json) || bind_text(s, 4, n->taints_json) ||
	    bind_i64(s, 5, n->cpu_milli) || bind_i64(s, 6, n->memory_bytes) ||
	    bind_i64(s, 7, n->simulated) || bind_i64(s, 8, n->updated_at) ||
	    bind_text(s, 9, n->reason)) {
		rc = bind_fail(st, s, what, err);
		goto out;
	}
	rc = run(st, s, what, err);
	if (rc < 0)
		goto out;
	if (bind_text(del, 1, n->name)) {
		rc = bind_fail(st, del, what, err);
		goto out;
	}
	rc = run(st, del, what, err);
	for (size_t i = 0; rc == 0 && i < n->n_devices; i++) {
		const struct kn_device_row *d = &n->devices[i];

		/* The device belongs to the node it is put with. */
		if (bind_text(ins, 1, n->name) || bind_i64(ins, 2, d->index) ||
		    bind_text(ins, 3, d->uuid) || bind_text(ins, 4, d->model) ||
		    bind_i64(ins, 5, d->memory_bytes) ||
		    bind_i64(ins, 6, d->simulated)) {
			rc = bind_fail(st, ins, what, err);
			goto out;
		}
		rc = run(st, ins, what, err);
		if (rc == -EEXIST)
			rc = kn_errorf(err, KN_ECONFLICT, "devices",
				       "node %s lists device %d twice",
				       n->name, d->index);
	}
out:
	return write_end(st, own, rc, err);
}

static void read_device(sqlite3_stmt *s, struct kn_device_row *d)
{
	d->node = col_str(s, DEVICE_COL_NODE);
	d->index = col_int(s, DEVICE_COL_INDEX);
	d->uuid = col_str(s, DEVICE_COL_UUID);
	d->model = col_str(s, DEVICE_COL_MODEL);
	d->memory_bytes = col_i64(s, DEVICE_COL_MEMORY_BYTES);
	d->simulated = col_bool(s, DEVICE_COL_SIMULATED);
}

/* The node's devices, by index, into n->devices. */
static int read_devices(struct kn_store *st, struct kn_node_row *n,
			struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_DEVICE_LIST_NODE];
	const char *what = "listing devices";
	size_t alloc = 0;
	int rc;

	if (bind_text(s, 1, n->name))
		return bind_fail(st, s, what, err);
	while ((rc = step_row(st, s, what, err)) == 1) {
		n->devices = grow(n->devices, &alloc, n->n_devices,
				  sizeof(*n->devices));
		read_device(s, &n->devices[n->n_devices++]);
	}
	stmt_done(s);
	return rc;
}

/*
 * The node query stays open while each node's devices are read, which
 * keeps one read transaction (one snapshot) across all of them.
 */
int kn_store_node_list(struct kn_store *st, struct kn_node_row **out,
		       size_t *n, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_NODE_LIST];
	struct kn_node_row *rows = NULL;
	size_t count = 0, alloc = 0;
	int rc;

	while ((rc = step_row(st, s, "listing nodes", err)) == 1) {
		struct kn_node_row *row;

		rows = grow(rows, &alloc, count, sizeof(*rows));
		row = &rows[count++];
		memset(row, 0, sizeof(*row));
		row->name = col_str(s, NODE_COL_NAME);
		row->state = col_str(s, NODE_COL_STATE);
		row->labels_json = col_str(s, NODE_COL_LABELS);
		row->taints_json = col_str(s, NODE_COL_TAINTS);
		row->reason = col_str(s, NODE_COL_REASON);
		row->cpu_milli = col_int(s, NODE_COL_CPU_MILLI);
		row->memory_bytes = col_i64(s, NODE_COL_MEMORY_BYTES);
		row->simulated = col_bool(s, NODE_COL_SIMULATED);
		row->updated_at = col_i64(s, NODE_COL_UPDATED_AT);
		rc = read_devices(st, row, err);
		if (rc < 0)
			break;
	}
	stmt_done(s);
	if (rc < 0) {
		kn_node_list_free(rows, count);
		return rc;
	}
	*out = rows;
	*n = count;
	return 0;
}

void kn_node_list_free(struct kn_node_row *rows, size_t n)
{
	for (size_t i = 0; rows && i < n; i++)
		kn_node_row_release(&rows[i]);
	free(rows);
}

/* ---- deployments and their replicas ---- */

void kn_deployment_row_release(struct kn_deployment_row *d)
{
	if (!d)
		return;
	free(d->name);
	free(d->owner);
	free(d->filename);
	free(d->spec_yaml);
	free(d->spec_json);
	free(d->model_dir);
	memset(d, 0, sizeof(*d));
}

int kn_store_deployment_put(struct kn_store *st,
			    const struct kn_deployment_row *d,
			    const struct kn_audit *a, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_DEPLOYMENT_PUT];
	const char *what = "writing a deployment";
	char *object = NULL;
	bool own;
	int rc;

	rc = write_begin(st, &own, err);
	if (rc < 0)
		return rc;
	if (bind_text(s, 1, d->name) || bind_text(s, 2, d->owner) ||
	    bind_text(s, 3, d->filename ? d->filename : "") ||
	    bind_text(s, 4, d->spec_yaml) || bind_text(s, 5, d->spec_json) ||
	    bind_text(s, 6, d->model_dir) || bind_i64(s, 7, d->replicas) ||
	    bind_i64(s, 8, d->generation) || bind_i64(s, 9, d->rollout_next) ||
	    bind_i64(s, 10, d->created_at) || bind_i64(s, 11, d->updated_at)) {
		rc = bind_fail(st, s, what, err);
		goto out;
	}
	rc = run(st, s, what, err);
	if (rc < 0)
		goto out;
	object = kn_asprintf("deployment/%s", d->name);
	rc = audit_write(st, a, object, err);
out:
	free(object);
	return write_end(st, own, rc, err);
}

int kn_store_deployment_list(struct kn_store *st,
			     struct kn_deployment_row **out, size_t *n,
			     struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_DEPLOYMENT_LIST];
	struct kn_deployment_row *rows = NULL;
	size_t count = 0, alloc = 0;
	int rc;

	while ((rc = step_row(st, s, "listing deployments", err)) == 1) {
		struct kn_deployment_row *d;

		rows = grow(rows, &alloc, count, sizeof(*rows));
		d = &rows[count++];
		d->name = col_str(s, DEPLOYMENT_COL_NAME);
		d->owner = col_str(s, DEPLOYMENT_COL_OWNER);
		d->filename = col_str(s, DEPLOYMENT_COL_FILENAME);
		d->spec_yaml = col_str(s, DEPLOYMENT_COL_SPEC_YAML);
		d->spec_json = col_str(s, DEPLOYMENT_COL_SPEC_JSON);
		d->model_dir = col_str(s, DEPLOYMENT_COL_MODEL_DIR);
		d->replicas = col_int(s, DEPLOYMENT_COL_REPLICAS);
		d->generation = col_i64(s, DEPLOYMENT_COL_GENERATION);
		d->rollout_next = col_int(s, DEPLOYMENT_COL_ROLLOUT_NEXT);
		d->created_at = col_i64(s, DEPLOYMENT_COL_CREATED_AT);
		d->updated_at = col_i64(s, DEPLOYMENT_COL_UPDATED_AT);
	}
	stmt_done(s);
	if (rc < 0) {
		kn_deployment_list_free(rows, count);
		return rc;
	}
	*out = rows;
	*n = count;
	return 0;
}

void kn_deployment_list_free(struct kn_deployment_row *rows, size_t n)
{
	for (size_t i = 0; rows && i < n; i++)
		kn_deployment_row_release(&rows[i]);
	free(rows);
}

int kn_store_deployment_delete(struct kn_store *st, const char *name,
			       const struct kn_audit *a, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_DEPLOYMENT_DELETE];
	const char *what = "deleting a deployment";
	char *object = NULL;
	bool own;
	int rc;

	rc = write_begin(st, &own, err);
	if (rc < 0)
		return rc;
	if (bind_text(s, 1, name)) {
		rc = bind_fail(st, s, what, err);
		goto out;
	}
	rc = run(st, s, what, err);
	if (rc < 0)
		goto out;
	if (sqlite3_changes(st->db) == 0) {
		rc = kn_errorf(err, KN_ENOTFOUND, "name",
			       "no deployment named %s", name ? name : "");
		goto out;
	}
	object = kn_asprintf("deployment/%s", name);
	rc = audit_write(st, a, object, err);
out:
	free(object);
	return write_end(st, own, rc, err);
}

int kn_store_replica_put(struct kn_store *st, const struct kn_replica_row *r,
			 struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_REPLICA_PUT];
	const char *what = "writing a replica";

	bool own;
	int rc = write_begin(st, &own, err);

	if (rc < 0)
		return rc;
	if (bind_text(s, 1, r->deployment) || bind_i64(s, 2, r->replica) ||
	    bind_i64(s, 3, r->job_id)) {
		rc = bind_fail(st, s, what, err);
		goto out;
	}
	rc = run(st, s, what, err);
	if (rc < 0)
		goto out;
	/* The ledger's: which deployment the job ran for, kept after the
	   replica moves on to another job. */
	s = st->stmt[STMT_JOB_DEPLOYMENT_PUT];
	if (bind_i64(s, 1, r->job_id) || bind_text(s, 2, r->deployment)) {
		rc = bind_fail(st, s, what, err);
		goto out;
	}
	rc = run(st, s, what, err);
out:
	return write_end(st, own, rc, err);
}

int kn_store_replica_delete(struct kn_store *st, const char *deployment,
			    int replica, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_REPLICA_DELETE];
	const char *what = "deleting a replica";

	if (bind_text(s, 1, deployment) || bind_i64(s, 2, replica))
		return bind_fail(st, s, what, err);
	return run(st, s, what, err);
}

int kn_store_replica_list(struct kn_store *st, struct kn_replica_row **out,
			  size_t *n, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_REPLICA_LIST];
	struct kn_replica_row *rows = NULL;
	size_t count = 0, alloc = 0;
	int rc;

	while ((rc = step_row(st, s, "listing replicas", err)) == 1) {
		rows = grow(rows, &alloc, count, sizeof(*rows));
		rows[count].deployment = col_str(s, 0);
		rows[count].replica = col_int(s, 1);
		rows[count].job_id = col_i64(s, 2);
		count++;
	}
	stmt_done(s);
	if (rc < 0) {
		kn_replica_list_free(rows, count);
		return rc;
	}
	*out = rows;
	*n = count;
	return 0;
}

void kn_replica_list_free(struct kn_replica_row *rows, size_t n)
{
	for (size_t i = 0; rows && i < n; i++)
		free(rows[i].deployment);
	free(rows);
}

/* ---- gateway keys ---- */

void kn_gateway_key_row_release(struct kn_gateway_key_row *k)
{
	if (!k)
		return;
	free(k->name);
	free(k->hash);
	free(k->deployments_json);
	free(k->created_by);
	memset(k, 0, sizeof(*k));
}

int kn_store_gateway_key_insert(struct kn_store *st,
				const struct kn_gateway_key_row *k,
				const struct kn_audit *a, int64_t *out_id,
				struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_GWKEY_INSERT];
	const char *what = "inserting a gateway key";
	char *object = NULL;
	int64_t id = 0;
	bool own;
	int rc;

	rc = write_begin(st, &own, err);
	if (rc < 0)
		return rc;
	if (bind_text(s, 1, k->name) || bind_text(s, 2, k->hash) ||
	    bind_text(s, 3, k->deployments_json) || bind_i64(s, 4, k->rpm) ||
	    bind_i64(s, 5, k->tpm) || bind_i64(s, 6, k->quota_day) ||
	    bind_i64(s, 7, k->quota_month) || bind_text(s, 8, k->created_by) ||
	    bind_i64(s, 9, k->created_at)) {
		rc = bind_fail(st, s, what, err);
		goto out;
	}
	rc = run(st, s, what, err);
	/* The only unique key is the active name. */
	if (rc == -EEXIST)
		rc = kn_errorf(err, KN_ECONFLICT, "name",
			       "a gateway key named %s already exists",
			       k->name);
	if (rc < 0)
		goto out;
	id = sqlite3_last_insert_rowid(st->db);
	object = kn_asprintf("key/%s", k->name);
	rc = audit_write(st, a, object, err);
out:
	free(object);
	rc = write_end(st, own, rc, err);
	if (rc == 0 && out_id)
		*out_id = id;
	return rc;
}

int kn_store_gateway_key_list(struct kn_store *st, bool active_only,
			      struct kn_gateway_key_row **out, size_t *n,
			      struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_GWKEY_LIST];
	const char *what = "listing gateway keys";
	struct kn_gateway_key_row *rows = NULL;
	size_t count = 0, alloc = 0;
	int rc;

	if (bind_i64(s, 1, active_only))
		return bind_fail(st, s, what, err);
	while ((rc = step_row(st, s, what, err)) == 1) {
		struct kn_gateway_key_row *k;

		rows = grow(rows, &alloc, count, sizeof(*rows));
		k = &rows[count++];
		k->id = col_i64(s, GWKEY_COL_ID);
		k->name = col_str(s, GWKEY_COL_NAME);
		k->hash = col_str(s, GWKEY_COL_HASH);
		k->deployments_json = col_str(s, GWKEY_COL_DEPLOYMENTS);
		k->rpm = col_i64(s, GWKEY_COL_RPM);
		k->tpm = col_i64(s, GWKEY_COL_TPM);
		k->quota_day = col_i64(s, GWKEY_COL_QUOTA_DAY);
		k->quota_month = col_i64(s, GWKEY_COL_QUOTA_MONTH);
		k->created_by = col_str(s, GWKEY_COL_CREATED_BY);
		k->created_at = col_i64(s, GWKEY_COL_CREATED_AT);
		k->revoked_at = col_i64(s, GWKEY_COL_REVOKED_AT);
	}
	stmt_done(s);
	if (rc < 0) {
		kn_gateway_key_list_free(rows, count);
		return rc;
	}
	*out = rows;
	*n = count;
	return 0;
}

void kn_gateway_key_list_free(struct kn_gateway_key_row *rows, size_t n)
{
	for (size_t i = 0; rows && i < n; i++)
		kn_gateway_key_row_release(&rows[i]);
	free(rows);
}

int kn_store_gateway_key_revoke(struct kn_store *st, const char *name,
				const struct kn_audit *a, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_GWKEY_REVOKE];
	const char *what = "revoking a gateway key";
	char *object = NULL;
	bool own;
	int rc;

	rc = write_begin(st, &own, err);
	if (rc < 0)
		return rc;
	if (bind_i64(s, 1, kn_now_ms()) || bind_text(s, 2, name)) {
		rc = bind_fail(st, s, what, err);
		goto out;
	}
	rc = run(st, s, what, err);
	if (rc < 0)
		goto out;
	if (sqlite3_changes(st->db) == 0) {
		rc = kn_errorf(err, KN_ENOTFOUND, "name",
			       "no active gateway key named %s",
			       name ? name : "");
		goto out;
	}
	object = kn_asprintf("key/%s", name);
	rc = audit_write(st, a, object, err);
out:
	free(object);
	return write_end(st, own, rc, err);
}

/* ---- the cost ledger's record ---- */

int kn_store_node_state_open(struct kn_store *st, const char *node,
			     const char *state, int64_t at,
			     struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_NODE_STATE_CLOSE];
	const char *what = "recording a node state";
	bool own;
	int rc = write_begin(st, &own, err);

	if (rc < 0)
		return rc;
	if (bind_text(s, 1, node) || bind_i64(s, 2, at)) {
		rc = bind_fail(st, s, what, err);
		goto out;
	}
	rc = run(st, s, what, err);
	if (rc < 0)
		goto out;
	s = st->stmt[STMT_NODE_STATE_OPEN];
	if (bind_text(s, 1, node) || bind_text(s, 2, state) ||
	    bind_i64(s, 3, at)) {
		rc = bind_fail(st, s, what, err);
		goto out;
	}
	rc = run(st, s, what, err);
out:
	return write_end(st, own, rc, err);
}

int kn_store_node_state_close(struct kn_store *st, const char *node,
			      int64_t at, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_NODE_STATE_CLOSE];
	const char *what = "closing a node state";
	bool own;
	int rc = write_begin(st, &own, err);

	if (rc < 0)
		return rc;
	if (bind_text(s, 1, node) || bind_i64(s, 2, at))
		rc = bind_fail(st, s, what, err);
	else
		rc = run(st, s, what, err);
	return write_end(st, own, rc, err);
}

int kn_store_node_state_close_all(struct kn_store *st, int64_t at,
				  struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_NODE_STATE_CLOSE_ALL];
	const char *what = "closing node states";

	if (bind_i64(s, 1, at))
		return bind_fail(st, s, what, err);
	return run(st, s, what, err);
}

int kn_store_node_state_list(struct kn_store *st, int64_t since,
			     struct kn_node_state_row **out, size_t *n,
			     struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_NODE_STATE_LIST];
	struct kn_node_state_row *rows = NULL;
	size_t count = 0, alloc = 0;
	int rc;

	if (bind_i64(s, 1, since))
		return bind_fail(st, s, "listing node states", err);
	while ((rc = step_row(st, s, "listing node states", err)) == 1) {
		rows = grow(rows, &alloc, count, sizeof(*rows));
		rows[count].node = col_str(s, 0);
		rows[count].state = col_str(s, 1);
		rows[count].started_at = col_i64(s, 2);
		rows[count].ended_at = col_i64(s, 3);
		count++;
	}
	stmt_done(s);
	if (rc < 0) {
		kn_node_state_list_free(rows, count);
		return rc;
	}
	*out = rows;
	*n = count;
	return 0;
}

void kn_node_state_list_free(struct kn_node_state_row *rows, size_t n)
{
	for (size_t i = 0; rows && i < n; i++) {
		free(rows[i].node);
		free(rows[i].state);
	}
	free(rows);
}

static int cost_task_list(struct kn_store *st, sqlite3_stmt *s,
			  int64_t since, struct kn_cost_task_row **out,
			  size_t *n, struct kn_error *err)
{
	const char *what = "listing tasks for the ledger";
	struct kn_cost_task_row *rows = NULL;
	size_t count = 0, alloc = 0;
	int rc;

	if (bind_i64(s, 1, since))
		return bind_fail(st, s, what, err);
	while ((rc = step_row(st, s, what, err)) == 1) {
		struct kn_cost_task_row *r;
		char *state;

		rows = grow(rows, &alloc, count, sizeof(*rows));
		r = &rows[count++];
		r->job_id = col_i64(s, 0);
		r->attempt = col_int(s, 1);
		r->rank = col_int(s, 2);
		r->node = col_str(s, 3);
		r->devices = col_str(s, 4);
		r->gpu_milli = col_int(s, 5);
		r->started_at = col_i64(s, 6);
		r->ended_at = col_i64(s, 7);
		state = col_str(s, 8);
		r->attempt_state = state ? kn_job_state_parse(state) : -1;
		free(state);
		r->checkpoint_at = col_i64(s, 9);
		r->owner = col_str(s, 10);
		r->deployment = col_str(s, 11);
	}
	stmt_done(s);
	if (rc < 0) {
		kn_cost_task_list_free(rows, count);
		return rc;
	}
	*out = rows;
	*n = count;
	return 0;
}

int kn_store_cost_task_list(struct kn_store *st, int64_t since,
			    struct kn_cost_task_row **out, size_t *n,
			    struct kn_error *err)
{
	return cost_task_list(st, st->stmt[STMT_COST_TASK_LIST], since, out, n,
			      err);
}

int kn_store_cost_cpu_task_list(struct kn_store *st, int64_t since,
				struct kn_cost_task_row **out, size_t *n,
				struct kn_error *err)
{
	return cost_task_list(st, st->stmt[STMT_COST_CPU_TASK_LIST], since, out,
			      n, err);
}

/* ---- task usage ---- */

int kn_store_task_usage_get(struct kn_store *st, int64_t job_id, int attempt,
			    int rank, const char *resource,
			    struct kn_task_usage_row *out, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_TASK_USAGE_GET];
	const char *what = "reading a task's usage";
	int rc;

	if (bind_i64(s, 1, job_id) || bind_i64(s, 2, attempt) ||
	    bind_i64(s, 3, rank) || bind_text(s, 4, resource))
		return bind_fail(st, s, what, err);
	rc = step_row(st, s, what, err);
	if (rc == 1) {
		memset(out, 0, sizeof(*out));
		out->job_id = job_id;
		out->attempt = attempt;
		out->rank = rank;
		out->resource = kn_xstrdup(resource);
		out->samples = col_i64(s, 0);
		out->sum = sqlite3_column_double(s, 1);
		out->max = sqlite3_column_double(s, 2);
		out->histogram = col_str(s, 3);
	}
	stmt_done(s);
	if (rc == 0)
		return kn_errorf(err, KN_ENOTFOUND, NULL,
				 "no usage of job %" PRId64 " task %d %s",
				 job_id, rank, resource);
	return rc < 0 ? rc : 0;
}

int kn_store_task_usage_put(struct kn_store *st,
			    const struct kn_task_usage_row *u, int64_t now_ms,
			    struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_TASK_USAGE_PUT];
	const char *what = "recording a task's usage";

	if (bind_i64(s, 1, u->job_id) || bind_i64(s, 2, u->attempt) ||
	    bind_i64(s, 3, u->rank) || bind_text(s, 4, u->resource) ||
	    bind_i64(s, 5, u->samples) || sqlite3_bind_double(s, 6, u->sum) ||
	    sqlite3_bind_double(s, 7, u->max) ||
	    bind_text(s, 8, u->histogram ? u->histogram : "") ||
	    bind_i64(s, 9, now_ms))
		return bind_fail(st, s, what, err);
	return run(st, s, what, err);
}

int kn_store_task_usage_list(struct kn_store *st, int64_t since,
			     struct kn_task_usage_row **out, size_t *n,
			     struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_TASK_USAGE_LIST];
	const char *what = "listing task usage";
	struct kn_task_usage_row *rows = NULL;
	size_t count = 0, alloc = 0;
	int rc;

	if (bind_i64(s, 1, since))
		return bind_fail(st, s, what, err);
	while ((rc = step_row(st, s, what, err)) == 1) {
		struct kn_task_usage_row *r;

		rows = grow(rows, &alloc, count, sizeof(*rows));
		r = &rows[count++];
		memset(r, 0, sizeof(*r));
		r->job_id = col_i64(s, 0);
		r->attempt = col_int(s, 1);
		r->rank = col_int(s, 2);
		r->resource = col_str(s, 3);
		r->samples = col_i64(s, 4);
		r->sum = sqlite3_column_double(s, 5);
		r->max = sqlite3_column_double(s, 6);
		r->histogram = col_str(s, 7);
		r->job_name = col_str(s, 8);
		r->spec_json = col_str(s, 9);
		r->node = col_str(s, 10);
		r->devices = col_str(s, 11);
		r->gpu_milli = col_int(s, 12);
	}
	stmt_done(s);
	if (rc < 0) {
		kn_task_usage_list_free(rows, count);
		return rc;
	}
	*out = rows;
	*n = count;
	return 0;
}

void kn_task_usage_row_release(struct kn_task_usage_row *u)
{
	free(u->resource);
	free(u->histogram);
	free(u->job_name);
	free(u->spec_json);
	free(u->node);
	free(u->devices);
	memset(u, 0, sizeof(*u));
}

void kn_task_usage_list_free(struct kn_task_usage_row *rows, size_t n)
{
	for (size_t i = 0; rows && i < n; i++)
		kn_task_usage_row_release(&rows[i]);
	free(rows);
}

void kn_cost_task_list_free(struct kn_cost_task_row *rows, size_t n)
{
	for (size_t i = 0; rows && i < n; i++) {
		free(rows[i].node);
		free(rows[i].devices);
		free(rows[i].owner);
		free(rows[i].deployment);
	}
	free(rows);
}

/* ---- models ---- */

int kn_store_model_list(struct kn_store *st, struct kn_model_row **out,
			size_t *n, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_MODEL_LIST];
	struct kn_model_row *rows = NULL;
	size_t used = 0, alloc = 0;
	int rc;

	while ((rc = step_row(st, s, "listing models", err)) == 1) {
		struct kn_model_row *m;
		rows = grow(rows, &alloc, used, sizeof(*rows));
		m = &rows[used++];
		m->name = col_str(s, 0);
		m->versions = col_i64(s, 1);
		m->latest = col_i64(s, 2);
		m->created_at = col_i64(s, 3);
		m->updated_at = col_i64(s, 4);
	}
	stmt_done(s);
	if (rc < 0) {
		kn_model_list_free(rows, used);
		return rc;
	}
	*out = rows;
	*n = used;
	return 0;
}

void kn_model_list_free(struct kn_model_row *rows, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(rows[i].name);
	free(rows);
}

void kn_model_version_row_release(struct kn_model_version_row *v)
{
	free(v->name);
	free(v->manifest);
	free(v->created_by);
	memset(v, 0, sizeof(*v));
}

int kn_store_model_version_next(struct kn_store *st, const char *name,
				int64_t now_ms, int64_t *out,
				struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_MODEL_CREATE];
	const char *what = "numbering a model version";
	bool own;
	int rc = write_begin(st, &own, err);

	if (rc < 0)
		return rc;
	if (bind_text(s, 1, name) || bind_i64(s, 2, now_ms)) {
		rc = bind_fail(st, s, what, err);
		goto out;
	}
	rc = run(st, s, what, err);
	if (rc < 0)
		goto out;
	s = st->stmt[STMT_MODEL_NEXT];
	if (bind_text(s, 1, name)) {
		rc = bind_fail(st, s, what, err);
		goto out;
	}
	rc = step_row(st, s, what, err);
	if (rc == 1) {
		*out = col_i64(s, 0);
		rc = 0;
	} else if (rc == 0) {
		rc = kn_errorf(err, KN_EIO, NULL, "store: %s: no row", what);
	}
	stmt_done(s);
out:
	return write_end(st, own, rc, err);
}

int kn_store_model_version_insert(struct kn_store *st,
				  const struct kn_model_version_row *v,
				  const struct kn_audit *a,
				  struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_MODEL_VERSION_INSERT];
	const char *what = "inserting a model version";
	bool own;
	int rc = write_begin(st, &own, err);

	if (rc < 0)
		return rc;
	if (bind_text(s, 1, v->name) || bind_i64(s, 2, v->version) ||
	    bind_text(s, 3, v->manifest) || bind_text(s, 4, v->created_by) ||
	    bind_i64(s, 5, v->created_at))
		rc = bind_fail(st, s, what, err);
	else
		rc = run(st, s, what, err);
	if (rc == 0)
		rc = audit_write(st, a, NULL, err);
	return write_end(st, own, rc, err);
}

int kn_store_model_version_delete(struct kn_store *st, const char *name,
				  int64_t version, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_MODEL_VERSION_DELETE];
	const char *what = "deleting a model version";

	if (bind_text(s, 1, name) || bind_i64(s, 2, version))
		return bind_fail(st, s, what, err);
	return run(st, s, what, err);
}

static void read_model_version(sqlite3_stmt *s,
			       struct kn_model_version_row *v)
{
	v->name = col_str(s, 0);
	v->version = col_i64(s, 1);
	v->manifest = col_str(s, 2);
	v->created_by = col_str(s, 3);
	v->created_at = col_i64(s, 4);
}

int kn_store_model_version_get(struct kn_store *st, const char *name,
			       int64_t version,
			       struct kn_model_version_row *out,
			       struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_MODEL_VERSION_GET];
	const char *what = "reading a model version";
	int rc;

	memset(out, 0, sizeof(*out));
	if (bind_text(s, 1, name) || bind_i64(s, 2, version))
		return bind_fail(st, s, what, err);
	rc = step_row(st, s, what, err);
	if (rc == 1) {
		read_model_version(s, out);
		rc = 0;
	} else if (rc == 0) {
		rc = kn_errorf(err, KN_ENOTFOUND, NULL, "model %s has no version %lld",
			       name, (long long)version);
	}
	stmt_done(s);
	return rc;
}

int kn_store_model_version_list(struct kn_store *st, const char *name,
				struct kn_model_version_row **out, size_t *n,
				struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_MODEL_VERSION_LIST];
	struct kn_model_version_row *rows = NULL;
	size_t used = 0, alloc = 0;
	int rc;

	if (bind_text(s, 1, name))
		return bind_fail(st, s, "listing model versions", err);
	while ((rc = step_row(st, s, "listing model versions", err)) == 1) {
		rows = grow(rows, &alloc, used, sizeof(*rows));
		read_model_version(s, &rows[used++]);
	}
	stmt_done(s);
	if (rc < 0) {
		kn_model_version_list_free(rows, used);
		return rc;
	}
	*out = rows;
	*n = used;
	return 0;
}

void kn_model_version_list_free(struct kn_model_version_row *rows, size_t n)
{
	for (size_t i = 0; i < n; i++)
		kn_model_version_row_release(&rows[i]);
	free(rows);
}

int kn_store_model_alias_get(struct kn_store *st, const char *name,
			     const char *alias, int64_t *version,
			     struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_MODEL_ALIAS_GET];
	const char *what = "reading a model alias";
	int rc;

	if (bind_text(s, 1, name) || bind_text(s, 2, alias))
		return bind_fail(st, s, what, err);
	rc = step_row(st, s, what, err);
	if (rc == 1) {
		*version = col_i64(s, 0);
		rc = 0;
	} else if (rc == 0) {
		rc = kn_errorf(err, KN_ENOTFOUND, NULL, "model %s has no alias %s",
			       name, alias);
	}
	stmt_done(s);
	return rc;
}

int kn_store_model_alias_move(struct kn_store *st, const char *name,
			      const struct kn_model_alias_row *ev,
			      const struct kn_audit *a, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_MODEL_ALIAS_PUT];
	const char *what = "moving a model alias";
	bool own;
	int rc = write_begin(st, &own, err);

	if (rc < 0)
		return rc;
	if (bind_text(s, 1, name) || bind_text(s, 2, ev->alias) ||
	    bind_i64(s, 3, ev->version) || bind_text(s, 4, ev->actor) ||
	    bind_i64(s, 5, ev->time_ms)) {
		rc = bind_fail(st, s, what, err);
		goto out;
	}
	rc = run(st, s, what, err);
	if (rc < 0)
		goto out;
	s = st->stmt[STMT_MODEL_ALIAS_EVENT];
	if (bind_text(s, 1, name) || bind_text(s, 2, ev->alias) ||
	    bind_text(s, 3, ev->action) || bind_i64(s, 4, ev->from_version) ||
	    bind_i64(s, 5, ev->version) || bind_text(s, 6, ev->actor) ||
	    bind_i64(s, 7, ev->time_ms)) {
		rc = bind_fail(st, s, what, err);
		goto out;
	}
	rc = run(st, s, what, err);
	if (rc == 0)
		rc = audit_write(st, a, NULL, err);
out:
	return write_end(st, own, rc, err);
}

static int alias_rows(struct kn_store *st, enum stmt_id id, const char *name,
		      struct kn_model_alias_row **out, size_t *n,
		      struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[id];
	struct kn_model_alias_row *rows = NULL;
	size_t used = 0, alloc = 0;
	int rc;

	if (bind_text(s, 1, name))
		return bind_fail(st, s, "listing model aliases", err);
	while ((rc = step_row(st, s, "listing model aliases", err)) == 1) {
		struct kn_model_alias_row *r;
		rows = grow(rows, &alloc, used, sizeof(*rows));
		r = &rows[used++];
		r->alias = col_str(s, 0);
		r->version = col_i64(s, 1);
		r->action = col_str(s, 2);
		r->from_version = col_i64(s, 3);
		r->actor = col_str(s, 4);
		r->time_ms = col_i64(s, 5);
	}
	stmt_done(s);
	if (rc < 0) {
		kn_model_alias_list_free(rows, used);
		return rc;
	}
	*out = rows;
	*n = used;
	return 0;
}

int kn_store_model_alias_list(struct kn_store *st, const char *name,
			      struct kn_model_alias_row **out, size_t *n,
			      struct kn_error *err)
{
	return alias_rows(st, STMT_MODEL_ALIAS_LIST, name, out, n, err);
}

int kn_store_model_alias_history(struct kn_store *st, const char *name,
				 struct kn_model_alias_row **out, size_t *n,
				 struct kn_error *err)
{
	return alias_rows(st, STMT_MODEL_ALIAS_HISTORY, name, out, n, err);
}

void kn_model_alias_list_free(struct kn_model_alias_row *rows, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(rows[i].alias);
		free(rows[i].action);
		free(rows[i].actor);
	}
	free(rows);
}

int kn_store_model_signature_insert(struct kn_store *st, const char *name,
				    int64_t version,
				    const struct kn_model_signature_row *sig,
				    const struct kn_audit *a,
				    struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_MODEL_SIGNATURE_INSERT];
	const char *what = "inserting a model signature";
	bool own;
	int rc = write_begin(st, &own, err);

	if (rc < 0)
		return rc;
	if (bind_text(s, 1, name) || bind_i64(s, 2, version) ||
	    bind_text(s, 3, sig->key_id) || bind_text(s, 4, sig->public_key) ||
	    bind_text(s, 5, sig->signature) || bind_text(s, 6, sig->signed_by) ||
	    bind_i64(s, 7, sig->signed_at))
		rc = bind_fail(st, s, what, err);
	else
		rc = run(st, s, what, err);
	if (rc == 0)
		rc = audit_write(st, a, NULL, err);
	return write_end(st, own, rc, err);
}

int kn_store_model_signature_list(struct kn_store *st, const char *name,
				  int64_t version,
				  struct kn_model_signature_row **out,
				  size_t *n, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_MODEL_SIGNATURE_LIST];
	const char *what = "listing model signatures";
	struct kn_model_signature_row *rows = NULL;
	size_t used = 0, alloc = 0;
	int rc;

	if (bind_text(s, 1, name) || bind_i64(s, 2, version))
		return bind_fail(st, s, what, err);
	while ((rc = step_row(st, s, what, err)) == 1) {
		struct kn_model_signature_row *r;
		rows = grow(rows, &alloc, used, sizeof(*rows));
		r = &rows[used++];
		r->key_id = col_str(s, 0);
		r->public_key = col_str(s, 1);
		r->signature = col_str(s, 2);
		r->signed_by = col_str(s, 3);
		r->signed_at = col_i64(s, 4);
	}
	stmt_done(s);
	if (rc < 0) {
		kn_model_signature_list_free(rows, used);
		return rc;
	}
	*out = rows;
	*n = used;
	return 0;
}

void kn_model_signature_list_free(struct kn_model_signature_row *rows,
				  size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(rows[i].key_id);
		free(rows[i].public_key);
		free(rows[i].signature);
		free(rows[i].signed_by);
	}
	free(rows);
}

/* ---- model re-validation ---- */

int kn_store_revalidation_put(struct kn_store *st,
			      const struct kn_revalidation_row *r,
			      const struct kn_audit *a, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_REVAL_PUT];
	const char *what = "saving a model re-validation";
	bool own;
	int rc = write_begin(st, &own, err);

	if (rc < 0)
		return rc;
	if (bind_text(s, 1, r->name) || bind_text(s, 2, r->alias) ||
	    bind_text(s, 3, r->owner) || bind_text(s, 4, r->spec_yaml) ||
	    bind_text(s, 5, r->filename) || bind_i64(s, 6, r->every_ms) ||
	    bind_text(s, 7, r->thresholds_json) ||
	    bind_i64(s, 8, r->rollback) || bind_i64(s, 9, r->created_at) ||
	    bind_text(s, 10, r->deployment)) {
		rc = bind_fail(st, s, what, err);
		goto out;
	}
	rc = run(st, s, what, err);
	if (rc == 0 && a)
		rc = audit_write(st, a, NULL, err);
out:
	return write_end(st, own, rc, err);
}

int kn_store_revalidation_list(struct kn_store *st,
			       struct kn_revalidation_row **out, size_t *n,
			       struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_REVAL_LIST];
	const char *what = "listing model re-validations";
	struct kn_revalidation_row *rows = NULL;
	size_t used = 0, alloc = 0;
	int rc;

	while ((rc = step_row(st, s, what, err)) == 1) {
		struct kn_revalidation_row *r;
		rows = grow(rows, &alloc, used, sizeof(*rows));
		r = &rows[used++];
		r->name = col_str(s, 0);
		r->alias = col_str(s, 1);
		r->owner = col_str(s, 2);
		r->spec_yaml = col_str(s, 3);
		r->filename = col_str(s, 4);
		r->every_ms = col_i64(s, 5);
		r->thresholds_json = col_str(s, 6);
		r->rollback = col_bool(s, 7);
		r->created_at = col_i64(s, 8);
		r->deployment = col_str(s, 9);
	}
	stmt_done(s);
	if (rc < 0) {
		kn_revalidation_list_free(rows, used);
		return rc;
	}
	*out = rows;
	*n = used;
	return 0;
}

void kn_revalidation_list_free(struct kn_revalidation_row *rows, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(rows[i].name);
		free(rows[i].alias);
		free(rows[i].owner);
		free(rows[i].spec_yaml);
		free(rows[i].filename);
		free(rows[i].thresholds_json);
		free(rows[i].deployment);
	}
	free(rows);
}

int kn_store_revalidation_delete(struct kn_store *st, const char *name,
				 const char *alias, const struct kn_audit *a,
				 struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_REVAL_DELETE];
	const char *what = "removing a model re-validation";
	bool own;
	int rc = write_begin(st, &own, err);

	if (rc < 0)
		return rc;
	if (bind_text(s, 1, name) || bind_text(s, 2, alias)) {
		rc = bind_fail(st, s, what, err);
		goto out;
	}
	rc = run(st, s, what, err);
	if (rc == 0 && a)
		rc = audit_write(st, a, NULL, err);
out:
	return write_end(st, own, rc, err);
}

int kn_store_evaluation_add(struct kn_store *st,
			    const struct kn_evaluation_row *e,
			    struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_EVAL_INSERT];
	const char *what = "recording a model evaluation";

	if (bind_text(s, 1, e->name) || bind_i64(s, 2, e->version) ||
	    bind_text(s, 3, e->alias) || bind_i64(s, 4, e->job_id) ||
	    bind_text(s, 5, e->outcome) || bind_text(s, 6, e->metrics_json) ||
	    bind_text(s, 7, e->detail) || bind_i64(s, 8, e->time_ms))
		return bind_fail(st, s, what, err);
	return run(st, s, what, err);
}

int kn_store_evaluation_list(struct kn_store *st, const char *name,
			     int64_t version, struct kn_evaluation_row **out,
			     size_t *n, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_EVAL_LIST];
	const char *what = "listing model evaluations";
	struct kn_evaluation_row *rows = NULL;
	size_t used = 0, alloc = 0;
	int rc;

	if (bind_text(s, 1, name) || bind_i64(s, 2, version))
		return bind_fail(st, s, what, err);
	while ((rc = step_row(st, s, what, err)) == 1) {
		struct kn_evaluation_row *r;
		rows = grow(rows, &alloc, used, sizeof(*rows));
		r = &rows[used++];
		r->id = col_i64(s, 0);
		r->name = col_str(s, 1);
		r->version = col_i64(s, 2);
		r->alias = col_str(s, 3);
		r->job_id = col_i64(s, 4);
		r->outcome = col_str(s, 5);
		r->metrics_json = col_str(s, 6);
		r->detail = col_str(s, 7);
		r->time_ms = col_i64(s, 8);
	}
	stmt_done(s);
	if (rc < 0) {
		kn_evaluation_list_free(rows, used);
		return rc;
	}
	*out = rows;
	*n = used;
	return 0;
}

void kn_evaluation_list_free(struct kn_evaluation_row *rows, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(rows[i].name);
		free(rows[i].alias);
		free(rows[i].outcome);
		free(rows[i].metrics_json);
		free(rows[i].detail);
	}
	free(rows);
}

/* ---- workflow runs and their steps ---- */

void kn_wf_run_row_release(struct kn_wf_run_row *r)
{
	if (!r)
		return;
	free(r->name);
	free(r->owner);
	free(r->filename);
	free(r->path);
	free(r->spec_yaml);
	free(r->files_json);
	free(r->digest);
	free(r->revision);
	free(r->state);
	free(r->reason);
	memset(r, 0, sizeof(*r));
}

void kn_wf_step_row_release(struct kn_wf_step_row *p)
{
	if (!p)
		return;
	free(p->name);
	free(p->state);
	free(p->reason);
	free(p->metrics_json);
	memset(p, 0, sizeof(*p));
}

static int wf_step_write(struct kn_store *st, const struct kn_wf_step_row *p,
			 struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_WF_STEP_PUT];
	const char *what = "writing a workflow step";

	if (bind_i64(s, 1, p->run_id) || bind_i64(s, 2, p->index) ||
	    bind_text(s, 3, p->name) || bind_text(s, 4, p->state) ||
	    bind_i64(s, 5, p->by_condition) || bind_i64(s, 6, p->job_id) ||
	    bind_i64(s, 7, p->attempts) || bind_i64(s, 8, p->started_at) ||
	    bind_i64(s, 9, p->ended_at) || bind_text(s, 10, p->reason) ||
	    bind_text(s, 11, p->metrics_json))
		return bind_fail(st, s, what, err);
	return run(st, s, what, err);
}

int kn_store_wf_run_insert(struct kn_store *st, const struct kn_wf_run_row *r,
			   const struct kn_wf_step_row *steps, size_t n,
			   const struct kn_audit *a, int64_t *out_id,
			   struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_WF_RUN_INSERT];
	const char *what = "inserting a workflow run";
	char object[40];
	int64_t id = 0;
	bool own;
	int rc;

	rc = write_begin(st, &own, err);
	if (rc < 0)
		return rc;
	if (bind_text(s, 1, r->name) || bind_text(s, 2, r->owner) ||
	    bind_text(s, 3, r->filename) || bind_text(s, 4, r->path) ||
	    bind_text(s, 5, r->spec_yaml) || bind_text(s, 6, r->files_json) ||
	    bind_text(s, 7, r->digest) || bind_text(s, 8, r->revision) ||
	    bind_text(s, 9, r->state) || bind_text(s, 10, r->reason) ||
	    bind_i64(s, 11, r->submitted_at) || bind_i64(s, 12, r->started_at) ||
	    bind_i64(s, 13, r->ended_at)) {
		rc = bind_fail(st, s, what, err);
		goto out;
	}
	rc = run(st, s, what, err);
	if (rc < 0)
		goto out;
	id = sqlite3_last_insert_rowid(st->db);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		struct kn_wf_step_row p = steps[i];

		p.run_id = id;
		rc = wf_step_write(st, &p, err);
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

static void read_wf_run(sqlite3_stmt *s, struct kn_wf_run_row *r)
{
	r->id = col_i64(s, WF_RUN_COL_ID);
	r->name = col_str(s, WF_RUN_COL_NAME);
	r->owner = col_str(s, WF_RUN_COL_OWNER);
	r->filename = col_str(s, WF_RUN_COL_FILENAME);
	r->path = col_str(s, WF_RUN_COL_PATH);
	r->spec_yaml = col_str(s, WF_RUN_COL_SPEC_YAML);
	r->files_json = col_str(s, WF_RUN_COL_FILES_JSON);
	r->digest = col_str(s, WF_RUN_COL_DIGEST);
	r->revision = col_str(s, WF_RUN_COL_REVISION);
	r->state = col_str(s, WF_RUN_COL_STATE);
	r->reason = col_str(s, WF_RUN_COL_REASON);
	r->submitted_at = col_i64(s, WF_RUN_COL_SUBMITTED_AT);
	r->started_at = col_i64(s, WF_RUN_COL_STARTED_AT);
	r->ended_at = col_i64(s, WF_RUN_COL_ENDED_AT);
}

int kn_store_wf_run_get(struct kn_store *st, int64_t id,
			struct kn_wf_run_row *out, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_WF_RUN_GET];
	const char *what = "reading a workflow run";
	int rc;

	if (bind_i64(s, 1, id))
		return bind_fail(st, s, what, err);
	rc = step_row(st, s, what, err);
	if (rc == 1)
		read_wf_run(s, out);
	stmt_done(s);
	if (rc == 0)
		return kn_errorf(err, KN_ENOTFOUND, NULL,
				 "workflow run %" PRId64 " not found", id);
	return rc < 0 ? rc : 0;
}

int kn_store_wf_run_update(struct kn_store *st, const struct kn_wf_run_row *r,
			   const struct kn_audit *a, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_WF_RUN_UPDATE];
	const char *what = "updating a workflow run";
	char object[40];
	bool own;
	int rc;

	rc = write_begin(st, &own, err);
	if (rc < 0)
		return rc;
	if (bind_i64(s, 1, r->id) || bind_text(s, 2, r->state) ||
	    bind_text(s, 3, r->reason) || bind_i64(s, 4, r->started_at) ||
	    bind_i64(s, 5, r->ended_at)) {
		rc = bind_fail(st, s, what, err);
		goto out;
	}
	rc = run(st, s, what, err);
	if (rc < 0)
		goto out;
	snprintf(object, sizeof(object), "workflow/%" PRId64, r->id);
	rc = audit_write(st, a, object, err);
out:
	return write_end(st, own, rc, err);
}

int kn_store_wf_run_list(struct kn_store *st, bool active_only,
			 struct kn_wf_run_row **out, size_t *n,
			 struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_WF_RUN_LIST];
	struct kn_wf_run_row *rows = NULL;
	size_t count = 0, alloc = 0;
	int rc;

	if (bind_i64(s, 1, active_only))
		return bind_fail(st, s, "listing workflow runs", err);
	while ((rc = step_row(st, s, "listing workflow runs", err)) == 1) {
		rows = grow(rows, &alloc, count, sizeof(*rows));
		memset(&rows[count], 0, sizeof(rows[count]));
		read_wf_run(s, &rows[count++]);
	}
	stmt_done(s);
	if (rc < 0) {
		kn_wf_run_list_free(rows, count);
		return rc;
	}
	*out = rows;
	*n = count;
	return 0;
}

void kn_wf_run_list_free(struct kn_wf_run_row *rows, size_t n)
{
	for (size_t i = 0; rows && i < n; i++)
		kn_wf_run_row_release(&rows[i]);
	free(rows);
}

int kn_store_wf_step_put(struct kn_store *st, const struct kn_wf_step_row *p,
			 struct kn_error *err)
{
	return wf_step_write(st, p, err);
}

int kn_store_wf_step_list(struct kn_store *st, int64_t run_id,
			  struct kn_wf_step_row **out, size_t *n,
			  struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_WF_STEP_LIST];
	struct kn_wf_step_row *rows = NULL;
	size_t count = 0, alloc = 0;
	int rc;

	if (bind_i64(s, 1, run_id))
		return bind_fail(st, s, "listing workflow steps", err);
	while ((rc = step_row(st, s, "listing workflow steps", err)) == 1) {
		struct kn_wf_step_row *p;

		rows = grow(rows, &alloc, count, sizeof(*rows));
		p = &rows[count++];
		p->run_id = col_i64(s, 0);
		p->index = col_int(s, 1);
		p->name = col_str(s, 2);
		p->state = col_str(s, 3);
		p->by_condition = col_bool(s, 4);
		p->job_id = col_i64(s, 5);
		p->attempts = col_int(s, 6);
		p->started_at = col_i64(s, 7);
		p->ended_at = col_i64(s, 8);
		p->reason = col_str(s, 9);
		p->metrics_json = col_str(s, 10);
	}
	stmt_done(s);
	if (rc < 0) {
		kn_wf_step_list_free(rows, count);
		return rc;
	}
	*out = rows;
	*n = count;
	return 0;
}

void kn_wf_step_list_free(struct kn_wf_step_row *rows, size_t n)
{
	for (size_t i = 0; rows && i < n; i++)
		kn_wf_step_row_release(&rows[i]);
	free(rows);
}

int kn_store_wf_run_of_job(struct kn_store *st, int64_t job_id,
			   int64_t *run_id, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_WF_STEP_BY_JOB];
	const char *what = "finding a job's workflow run";
	int rc;

	if (bind_i64(s, 1, job_id))
		return bind_fail(st, s, what, err);
	rc = step_row(st, s, what, err);
	if (rc == 1)
		*run_id = col_i64(s, 0);
	stmt_done(s);
	if (rc == 0)
		return kn_errorf(err, KN_ENOTFOUND, NULL,
				 "job %" PRId64 " is no workflow step", job_id);
	return rc < 0 ? rc : 0;
}

/* ---- workflow step attempts ---- */

void kn_wf_attempt_list_free(struct kn_wf_attempt_row *rows, size_t n)
{
	for (size_t i = 0; rows && i < n; i++)
		free(rows[i].outcome);
	free(rows);
}

int kn_store_wf_attempt_put(struct kn_store *st,
			    const struct kn_wf_attempt_row *a,
			    struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_WF_ATTEMPT_PUT];
	const char *what = "writing a workflow step attempt";

	if (bind_i64(s, 1, a->run_id) || bind_i64(s, 2, a->index) ||
	    bind_i64(s, 3, a->attempt) || bind_i64(s, 4, a->job_id) ||
	    bind_text(s, 5, a->outcome) || bind_i64(s, 6, a->started_at) ||
	    bind_i64(s, 7, a->ended_at))
		return bind_fail(st, s, what, err);
	return run(st, s, what, err);
}

int kn_store_wf_attempt_list(struct kn_store *st, int64_t run_id,
			     struct kn_wf_attempt_row **out, size_t *n,
			     struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_WF_ATTEMPT_LIST];
	const char *what = "listing workflow step attempts";
	struct kn_wf_attempt_row *rows = NULL;
	size_t count = 0, alloc = 0;
	int rc;

	if (bind_i64(s, 1, run_id))
		return bind_fail(st, s, what, err);
	while ((rc = step_row(st, s, what, err)) == 1) {
		struct kn_wf_attempt_row *a;

		rows = grow(rows, &alloc, count, sizeof(*rows));
		a = &rows[count++];
		a->run_id = col_i64(s, 0);
		a->index = col_int(s, 1);
		a->attempt = col_int(s, 2);
		a->job_id = col_i64(s, 3);
		a->outcome = col_str(s, 4);
		a->started_at = col_i64(s, 5);
		a->ended_at = col_i64(s, 6);
	}
	stmt_done(s);
	if (rc < 0) {
		kn_wf_attempt_list_free(rows, count);
		return rc;
	}
	*out = rows;
	*n = count;
	return 0;
}

/* ---- job code revisions ---- */

int kn_store_job_revision_put(struct kn_store *st, int64_t job_id,
			      const char *revision, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_JOB_REVISION_PUT];
	const char *what = "recording a job's code revision";

	if (bind_i64(s, 1, job_id) || bind_text(s, 2, revision))
		return bind_fail(st, s, what, err);
	return job_missing(run(st, s, what, err), job_id, err);
}

int kn_store_job_revision_get(struct kn_store *st, int64_t job_id,
			      char **out, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_JOB_REVISION_GET];
	const char *what = "reading a job's code revision";
	int rc;

	if (bind_i64(s, 1, job_id))
		return bind_fail(st, s, what, err);
	rc = step_row(st, s, what, err);
	if (rc == 1)
		*out = col_str(s, 0);
	stmt_done(s);
	if (rc == 0)
		return kn_errorf(err, KN_ENOTFOUND, NULL,
				 "job %" PRId64 " has no code revision", job_id);
	return rc < 0 ? rc : 0;
}

/* ---- job inputs (digests recorded at the first fetch) ---- */

void kn_job_input_row_release(struct kn_job_input_row *r)
{
	free(r->name);
	free(r->url);
	free(r->sha256);
	memset(r, 0, sizeof(*r));
}

int kn_store_job_input_put(struct kn_store *st,
			   const struct kn_job_input_row *r,
			   struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_JOB_INPUT_PUT];
	const char *what = "recording a job's input";

	if (bind_i64(s, 1, r->job_id) || bind_text(s, 2, r->name) ||
	    bind_text(s, 3, r->url) || bind_text(s, 4, r->sha256) ||
	    bind_i64(s, 5, r->size) || bind_i64(s, 6, r->attempt) ||
	    bind_i64(s, 7, r->recorded_at))
		return bind_fail(st, s, what, err);
	return job_missing(run(st, s, what, err), r->job_id, err);
}

int kn_store_job_input_list(struct kn_store *st, int64_t job_id,
			    struct kn_job_input_row **out, size_t *n,
			    struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_JOB_INPUT_LIST];
	const char *what = "listing a job's inputs";
	struct kn_job_input_row *rows = NULL;
	size_t count = 0, alloc = 0;
	int rc;

	if (bind_i64(s, 1, job_id))
		return bind_fail(st, s, what, err);
	while ((rc = step_row(st, s, what, err)) == 1) {
		rows = grow(rows, &alloc, count, sizeof(*rows));
		rows[count].job_id = col_i64(s, 0);
		rows[count].name = col_str(s, 1);
		rows[count].url = col_str(s, 2);
		rows[count].sha256 = col_str(s, 3);
		rows[count].size = col_i64(s, 4);
		rows[count].attempt = (int)col_i64(s, 5);
		rows[count].recorded_at = col_i64(s, 6);
		count++;
	}
	stmt_done(s);
	if (rc < 0) {
		kn_job_input_list_free(rows, count);
		return rc;
	}
	*out = rows;
	*n = count;
	return 0;
}

void kn_job_input_list_free(struct kn_job_input_row *rows, size_t n)
{
	for (size_t i = 0; rows && i < n; i++)
		kn_job_input_row_release(&rows[i]);
	free(rows);
}
