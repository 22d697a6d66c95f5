/*
 * Per-owner caps: how much one token name may hold of what every user
 * shares. One user's flood of jobs, one job of thousands of tasks, or
 * endless deployments and gateway keys would otherwise take the
 * scheduler's turns, the nodes and the store from everyone else. The caps
 * are the operator's (kiln server flags) and generous by default; over
 * one, a request gets 429 naming the cap and the flag that sets it.
 *
 * Jobs are counted from the server's memory (its queue and its runs hold
 * every job not yet finished), deployments from the deployment list, and
 * gateway keys from the store's active keys: each is what the cap means,
 * without a second count kept beside it that could drift.
 */
#include "internal.h"
#include "core_internal.h"

#include <errno.h>
#include <string.h>

/* Queued jobs, and tasks queued or running, of owner. */
static void count_jobs(struct server *s, const char *owner, int64_t *queued,
		       int64_t *tasks)
{
	*queued = 0;
	*tasks = 0;
	for (const struct queued_job *q = s->queue; q; q = q->next)
		if (q->owner && !strcmp(q->owner, owner)) {
			(*queued)++;
			*tasks += q->spec ? q->spec->tasks : 0;
		}
	for (const struct run *r = s->runs; r; r = r->next)
		if (r->owner && !strcmp(r->owner, owner))
			*tasks += r->n_tasks;
}

/* Active gateway keys owner created; -1 when the store cannot say. */
static int64_t count_keys(struct server *s, const char *owner,
			  struct kn_error *err)
{
	struct kn_gateway_key_row *rows = NULL;
	size_t n = 0;
	int64_t mine = 0;

	if (kn_store_gateway_key_list(s->store, true, &rows, &n, err) < 0)
		return -1;
	for (size_t i = 0; i < n; i++)
		mine += rows[i].created_by && !strcmp(rows[i].created_by, owner);
	kn_gateway_key_list_free(rows, n);
	return mine;
}

static int over(struct kn_error *err, const struct caller *c, int64_t have,
		const char *what, const char *flag, int64_t cap)
{
	return kn_errorf(err, KN_ELIMIT, NULL,
			 "%s has %lld %s, the most one user may have (kiln "
			 "server %s %lld)",
			 c->name, (long long)have, what, flag, (long long)cap);
}

int caps_check_jobs(struct server *s, const struct caller *c, int jobs,
		    int tasks_each, struct kn_error *err)
{
	int64_t queued, in_flight, tasks = (int64_t)jobs * tasks_each;

	count_jobs(s, c->name, &queued, &in_flight);
	if (queued + jobs > s->cfg.max_queued_jobs)
		return jobs == 1 ? over(err, c, queued, "queued jobs",
					"--max-queued-jobs-per-user",
					s->cfg.max_queued_jobs)
				 : kn_errorf(err, KN_ELIMIT, "array",
					     "%s has %lld queued jobs and this "
					     "array adds %d, more than one "
					     "user may have (kiln server "
					     "--max-queued-jobs-per-user %lld)",
					     c->name, (long long)queued, jobs,
					     (long long)s->cfg.max_queued_jobs);
	if (in_flight + tasks > s->cfg.max_tasks)
		return kn_errorf(err, KN_ELIMIT, "tasks",
				 "%s has %lld tasks queued or running and this "
				 "%s adds %lld, more than one user may have "
				 "(kiln server --max-tasks-per-user %lld)",
				 c->name, (long long)in_flight,
				 jobs == 1 ? "job" : "array", (long long)tasks,
				 (long long)s->cfg.max_tasks);
	return 0;
}

int caps_check(struct server *s, const struct caller *c, enum cap what,
	       int tasks, struct kn_error *err)
{
	int64_t have;

	switch (what) {
	case CAP_JOB:
		return caps_check_jobs(s, c, 1, tasks, err);
	case CAP_DEPLOYMENT:
		have = deploy_count_owned(s, c->name);
		return have >= s->cfg.max_deployments
			       ? over(err, c, have, "deployments",
				      "--max-deployments-per-user",
				      s->cfg.max_deployments)
			       : 0;
	case CAP_GATEWAY_KEY:
		have = count_keys(s, c->name, err);
		if (have < 0)
			return -EIO;
		return have >= s->cfg.max_gateway_keys
			       ? over(err, c, have, "active gateway keys",
				      "--max-keys-per-user",
				      s->cfg.max_gateway_keys)
			       : 0;
	}
	return 0;
}
