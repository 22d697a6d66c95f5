/*
 * store schema: the tables, one migration per schema version.
 *
 * The schema moves forward only: store_migrations[v - 1] takes a file
 * from version v - 1 to v, and store_db.c applies what a file lacks in
 * one transaction, recording where it stands in user_version. A released
 * migration is never edited; a change is a new version.
 */
#include "internal.h"

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

/*
 * v15: the answer each create request with an Idempotency-Key got, by
 * caller and key, kept a day so a retry gets it again (store_idem.c).
 */
static const char SQL_SCHEMA_V15[] =
	"CREATE TABLE idempotency_keys ("
	" owner TEXT NOT NULL,"
	" key TEXT NOT NULL,"
	" route TEXT NOT NULL,"
	" body_sha256 TEXT NOT NULL,"
	" status INTEGER NOT NULL,"
	" answer TEXT NOT NULL,"
	" created_at INTEGER NOT NULL,"
	" PRIMARY KEY (owner, key)) WITHOUT ROWID;"
	"CREATE INDEX idempotency_keys_created ON idempotency_keys"
	" (created_at);";

/*
 * v16: job arrays. Each element is a job; array_id is its array's first
 * element's id (0 for a single job), array_index its index.
 */
static const char SQL_SCHEMA_V16[] =
	"ALTER TABLE jobs ADD COLUMN array_id INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE jobs ADD COLUMN array_index INTEGER NOT NULL DEFAULT 0;"
	"CREATE INDEX jobs_by_array ON jobs (array_id) WHERE array_id != 0;";

/*
 * v17: jobs by name, so a listing of one name (the console's filter)
 * reads that name's rows and not the whole table.
 */
static const char SQL_SCHEMA_V17[] =
	"CREATE INDEX jobs_by_name ON jobs (name);";

/*
 * v18: dev environments' runs as their idle accounting sees them
 * (store_devenv.c): started and ended, idle time, what stopped them.
 */
static const char SQL_SCHEMA_V18[] =
	"CREATE TABLE devenv_runs ("
	" job_id INTEGER PRIMARY KEY,"
	" owner TEXT NOT NULL,"
	" name TEXT NOT NULL,"
	" gpu_milli INTEGER NOT NULL,"
	" started_at INTEGER NOT NULL,"
	" ended_at INTEGER NOT NULL,"
	" max_end_at INTEGER NOT NULL,"
	" idle_ms INTEGER NOT NULL,"
	" stop TEXT NOT NULL);"
	"CREATE INDEX devenv_runs_by_name ON devenv_runs"
	" (owner, name, started_at);";

/*
 * v19: each node's open state interval by name. Opening one closes the
 * node's last (node = ? AND ended_at = 0), which by the end-time index
 * alone read every open interval: quadratic in the nodes at start-up.
 * Partial, so listing the intervals keeps its plan.
 */
static const char SQL_SCHEMA_V19[] =
	"CREATE INDEX node_states_open ON node_states (node)"
	" WHERE ended_at = 0;";

const char *const store_migrations[] = {
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
	SQL_SCHEMA_V15,
	SQL_SCHEMA_V16,
	SQL_SCHEMA_V17,
	SQL_SCHEMA_V18,
	SQL_SCHEMA_V19,
};
_Static_assert(sizeof(store_migrations) / sizeof(store_migrations[0]) ==
		       KN_STORE_SCHEMA_VERSION,
	       "one migration per schema version");
