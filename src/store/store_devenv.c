/*
 * store devenv: each dev environment job's run as its idle accounting
 * sees it (server/devenv.c): when it started and ended, how long it sat
 * idle and what stopped it, for `kiln cost`.
 */
#include "internal.h"

#include <errno.h>

#define D(field) STORE_COL(struct kn_devenv_row, field)
static const struct store_row DEVENV_ROW =
	STORE_ROW(struct kn_devenv_row, "devenv run", D(job_id), D(owner),
		  D(name), D(gpu_milli), D(started_at), D(ended_at),
		  D(max_end_at), D(idle_ms), D(stop));
#undef D

/* A run is added once; a restart that sees it again changes nothing. */
static const char SQL_DEVENV_START[] =
	"INSERT INTO devenv_runs (job_id, owner, name, gpu_milli, started_at,"
	" ended_at, max_end_at, idle_ms, stop) VALUES (:job_id, :owner, :name,"
	" :gpu_milli, :started_at, 0, :max_end_at, 0, '')"
	" ON CONFLICT (job_id) DO NOTHING";
/* Each attempt's idle time adds up; the last end and stop stand. */
static const char SQL_DEVENV_END[] =
	"UPDATE devenv_runs SET ended_at = ?2, idle_ms = idle_ms + ?3,"
	" stop = ?4 WHERE job_id = ?1";

const struct store_stmt store_devenv_stmts[] = {
	STORE_STMT(STMT_DEVENV_START, SQL_DEVENV_START, &DEVENV_ROW),
	STORE_STMT(STMT_DEVENV_END, SQL_DEVENV_END, NULL),
	/* Runs that overlap [?1, ?2), by environment and start. */
	STORE_SELECT(STMT_DEVENV_LIST, &DEVENV_ROW,
		     "FROM devenv_runs WHERE started_at < ?2"
		     " AND (ended_at = 0 OR ended_at >= ?1)"
		     " ORDER BY owner, name, started_at, job_id"),
	/* The first start of owner's name after ?3: what ended an idle
	   gap. */
	STORE_SELECT(STMT_DEVENV_NEXT, &DEVENV_ROW,
		     "FROM devenv_runs"
		     " WHERE owner = ?1 AND name = ?2 AND started_at > ?3"
		     " ORDER BY started_at, job_id LIMIT 1"),
	{0},
};

STORE_RELEASE_FN(kn_devenv_row_release, struct kn_devenv_row, DEVENV_ROW)

STORE_PUT_FN(kn_store_devenv_start, struct kn_devenv_row, STMT_DEVENV_START,
	     "recording a dev environment's start")

int kn_store_devenv_end(struct kn_store *st, int64_t job_id, int64_t ended_at,
			int64_t idle_ms, const char *stop, struct kn_error *err)
{
	const struct store_key keys[] = {
		KEY_I64(job_id),
		KEY_I64(ended_at),
		KEY_I64(idle_ms),
		KEY_TEXT(stop),
	};

	return store_run_keyed(st, STMT_DEVENV_END, keys, N_KEYS(keys),
			       "recording a dev environment's end", err);
}

int kn_store_devenv_list(struct kn_store *st, int64_t since, int64_t until,
			 struct kn_devenv_row **out, size_t *n,
			 struct kn_error *err)
{
	const struct store_key keys[] = {KEY_I64(since), KEY_I64(until)};

	return store_list_keyed(st, STMT_DEVENV_LIST, keys, N_KEYS(keys),
				"listing dev environments", out, n, err);
}

int kn_store_devenv_next(struct kn_store *st, const char *owner,
			 const char *name, int64_t after,
			 struct kn_devenv_row *out, struct kn_error *err)
{
	const struct store_key keys[] = {KEY_TEXT(owner), KEY_TEXT(name),
					 KEY_I64(after)};
	int rc = store_get_keyed(st, STMT_DEVENV_NEXT, keys, N_KEYS(keys),
				 "finding a dev environment's next start", out,
				 err);

	return rc == 0 ? -ENOENT : rc < 0 ? rc : 0;
}

STORE_LIST_FREE_FN(kn_devenv_rows_free, struct kn_devenv_row, DEVENV_ROW)
