/*
 * store ledger: what the cost ledger and right-size advice read: the
 * tasks that held devices (or only CPU and memory) with their attempt's
 * end, and each task's usage sketches.
 */
#include "internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define C(field) STORE_COL(struct kn_cost_task_row, field)
static const struct store_row COST_TASK_ROW =
	STORE_ROW(struct kn_cost_task_row, "ledger task", C(job_id), C(attempt),
		  C(rank), C(node), C(devices), C(gpu_milli), C(started_at),
		  C(ended_at),
		  STORE_COL_AS(struct kn_cost_task_row, attempt_state, "state",
			       STORE_JOB_STATE_OR_NONE),
		  C(checkpoint_at), C(owner), C(deployment));
#undef C

#define U(field) STORE_COL(struct kn_task_usage_row, field)
static const struct store_row USAGE_ROW =
	STORE_ROW(struct kn_task_usage_row, "task usage", U(job_id), U(attempt),
		  U(rank), U(resource), U(samples), U(sum), U(max),
		  U(histogram),
		  STORE_COL_AS(struct kn_task_usage_row, job_name, "name",
			       STORE_TEXT),
		  U(spec_json), U(node), U(devices), U(gpu_milli));

/* One task's sketch of one resource, its key given by the caller. */
static const struct store_row USAGE_SKETCH_ROW =
	STORE_ROW(struct kn_task_usage_row, "task usage", U(samples), U(sum),
		  U(max), U(histogram));
#undef U

/*
 * Tasks that ran since ?1 with their attempt's end, their job's owner and
 * the deployment they ran for: those that held a device, and those
 * without (the CPU and memory side of the ledger).
 */
#define COST_TASK_SELECT                                                    \
	"SELECT t.job_id, t.attempt, t.rank, t.node, t.devices, t.gpu_milli," \
	" t.started_at, t.ended_at, a.state, a.checkpoint_at, j.owner,"      \
	" d.deployment"                                                      \
	" FROM tasks t JOIN jobs j ON j.id = t.job_id"                       \
	" LEFT JOIN attempts a ON a.job_id = t.job_id"                       \
	" AND a.number = t.attempt"                                          \
	" LEFT JOIN job_deployments d ON d.job_id = t.job_id"
#define COST_TASK_TAIL                                                      \
	" AND t.started_at > 0 AND (t.ended_at = 0 OR t.ended_at > ?1)"      \
	" ORDER BY t.job_id, t.attempt, t.rank"
static const char SQL_COST_TASK_LIST[] =
	COST_TASK_SELECT " WHERE t.devices != ''" COST_TASK_TAIL;
static const char SQL_COST_CPU_TASK_LIST[] =
	COST_TASK_SELECT " WHERE t.devices = ''" COST_TASK_TAIL;

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

const struct store_stmt store_ledger_stmts[] = {
	STORE_STMT(STMT_COST_TASK_LIST, SQL_COST_TASK_LIST, &COST_TASK_ROW),
	STORE_STMT(STMT_COST_CPU_TASK_LIST, SQL_COST_CPU_TASK_LIST,
		   &COST_TASK_ROW),
	STORE_STMT(STMT_TASK_USAGE_GET, SQL_TASK_USAGE_GET, &USAGE_SKETCH_ROW),
	STORE_STMT(STMT_TASK_USAGE_PUT, SQL_TASK_USAGE_PUT, NULL),
	STORE_STMT(STMT_TASK_USAGE_LIST, SQL_TASK_USAGE_LIST, &USAGE_ROW),
	{0},
};

/* ---- tasks for the ledger ---- */

static int cost_task_list(struct kn_store *st, enum stmt_id id,
			  int64_t since, struct kn_cost_task_row **out,
			  size_t *n, struct kn_error *err)
{
	const struct store_key keys[] = {KEY_I64(since)};

	return store_list_keyed(st, id, keys, N_KEYS(keys),
				"listing tasks for the ledger", out, n, err);
}

int kn_store_cost_task_list(struct kn_store *st, int64_t since,
			    struct kn_cost_task_row **out, size_t *n,
			    struct kn_error *err)
{
	return cost_task_list(st, STMT_COST_TASK_LIST, since, out, n, err);
}

int kn_store_cost_cpu_task_list(struct kn_store *st, int64_t since,
				struct kn_cost_task_row **out, size_t *n,
				struct kn_error *err)
{
	return cost_task_list(st, STMT_COST_CPU_TASK_LIST, since, out, n, err);
}

STORE_LIST_FREE_FN(kn_cost_task_list_free, struct kn_cost_task_row,
		   COST_TASK_ROW)

/* ---- task usage ---- */

int kn_store_task_usage_get(struct kn_store *st, int64_t job_id, int attempt,
			    int rank, const char *resource,
			    struct kn_task_usage_row *out, struct kn_error *err)
{
	const struct store_key keys[] = {KEY_I64(job_id), KEY_I64(attempt),
					 KEY_I64(rank), KEY_TEXT(resource)};
	int rc = store_get_keyed(st, STMT_TASK_USAGE_GET, keys, N_KEYS(keys),
				 "reading a task's usage", out, err);

	rc = store_found(rc, err, NULL, "no usage of job %" PRId64 " task %d %s",
			 job_id, rank, resource);
	if (rc < 0)
		return rc;
	out->job_id = job_id;
	out->attempt = attempt;
	out->rank = rank;
	out->resource = kn_xstrdup(resource);
	return 0;
}

int kn_store_task_usage_put(struct kn_store *st,
			    const struct kn_task_usage_row *u, int64_t now_ms,
			    struct kn_error *err)
{
	const struct store_key keys[] = {
		KEY_I64(u->job_id), KEY_I64(u->attempt), KEY_I64(u->rank),
		KEY_TEXT(u->resource), KEY_I64(u->samples), KEY_REAL(u->sum),
		KEY_REAL(u->max), KEY_TEXT(u->histogram ? u->histogram : ""),
		KEY_I64(now_ms),
	};

	return store_run_keyed(st, STMT_TASK_USAGE_PUT, keys, N_KEYS(keys),
			       "recording a task's usage", err);
}

STORE_LIST_BY_FN(kn_store_task_usage_list, int64_t, struct kn_task_usage_row,
		 STMT_TASK_USAGE_LIST, "listing task usage")

STORE_RELEASE_FN(kn_task_usage_row_release, struct kn_task_usage_row, USAGE_ROW)

STORE_LIST_FREE_FN(kn_task_usage_list_free, struct kn_task_usage_row, USAGE_ROW)
