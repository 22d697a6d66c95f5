/*
 * Per-owner caps: how much of the queue one token name may hold. One
 * user's flood of jobs, or one job of thousands of tasks, would otherwise
 * take the scheduler's turns and the store from everyone else. The caps
 * are the operator's (kiln server flags) and generous by default; over
 * one, a request gets 429 with the cap and the flag that sets it.
 *
 * Counted from the server's memory (its queue and its runs), which hold
 * every job not yet finished: no store query on the submit path.
 */
#include "internal.h"
#include "core_internal.h"

#include <string.h>

int caps_check_job(struct server *s, const struct caller *c, int tasks,
		   struct kn_error *err)
{
	int64_t queued = 0, in_flight = tasks;

	for (const struct queued_job *q = s->queue; q; q = q->next)
		if (q->owner && !strcmp(q->owner, c->name)) {
			queued++;
			in_flight += q->spec ? q->spec->tasks : 0;
		}
	for (const struct run *r = s->runs; r; r = r->next)
		if (r->owner && !strcmp(r->owner, c->name))
			in_flight += r->n_tasks;
	if (queued >= s->cfg.max_queued_jobs)
		return kn_errorf(err, KN_ELIMIT, NULL,
				 "%s has %lld queued jobs, the most one user "
				 "may have (kiln server "
				 "--max-queued-jobs-per-user %lld): wait for "
				 "some to start, or cancel some",
				 c->name, (long long)queued,
				 (long long)s->cfg.max_queued_jobs);
	if (in_flight > s->cfg.max_tasks)
		return kn_errorf(err, KN_ELIMIT, "tasks",
				 "%s would have %lld tasks queued or running "
				 "with this job's %d, more than one user may "
				 "have (kiln server --max-tasks-per-user "
				 "%lld)",
				 c->name, (long long)in_flight, tasks,
				 (long long)s->cfg.max_tasks);
	return 0;
}
