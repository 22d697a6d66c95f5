/*
 * The job core's finish path: task exits found (SIGCHLD, or a poll for
 * adopted tasks), committed together, and each attempt's outcome:
 * success, a retry after backoff, a requeue after an eviction, a
 * replica's restart, or the end, which the job hooks hear. Also the
 * verbs that stop a run: cancel, evict, restart.
 */
#include "core_internal.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A job whose start a full disk refused tries again after this long. */
#define LAUNCH_DISK_RETRY_MS 2000

/* ---- task exits and attempt outcomes ---- */

static const char *signal_label(int sig)
{
	const char *d = sigabbrev_np(sig);
	return d ? d : "?";
}

/* "rank 1: exit code 3", "rank 0: killed by SIGKILL", "rank 0: timeout". */
static void describe_failure(const struct run_task *t, char *buf, size_t len)
{
	const struct kn_task_status *st = &t->status;

	if (st->reason[0] && strcmp(st->reason, "timeout") != 0)
		snprintf(buf, len, "rank %d: %s", t->rank, st->reason);
	else if (st->signal)
		snprintf(buf, len, "rank %d: killed by SIG%s%s", t->rank,
			 signal_label(st->signal),
			 !strcmp(st->reason, "timeout") ? " after timeout" : "");
	else
		snprintf(buf, len, "rank %d: exit code %d", t->rank,
			 st->exit_code);
}

static bool task_failed(const struct run_task *t)
{
	return t->status.exit_code != 0 || t->status.signal != 0;
}

static int64_t backoff_ms(const struct kn_job_spec *spec, int retry)
{
	int64_t ms = spec->backoff_ms;

	for (int i = 1; i < retry && ms < spec->backoff_max_ms; i++)
		ms *= 2;
	return ms < spec->backoff_max_ms ? ms : spec->backoff_max_ms;
}

/*
 * Goodput of an attempt in task-milliseconds. A succeeded attempt kept all
 * its work but its restore; a failed, preempted or cancelled one kept only
 * what its last synced checkpoint holds, and the rest — with the restore —
 * is lost and will be done again.
 */
static void account_goodput(const struct run *r, struct kn_attempt_row *a)
{
	int64_t ran = a->ended_at - a->started_at, kept;

	if (ran < 0)
		ran = 0;
	a->checkpoint = r->checkpoint[0] ? (char *)r->checkpoint : NULL;
	a->checkpoint_at = r->checkpoint_at;
	a->restore_ms = r->restore_ms;
	if (a->state == KN_JOB_SUCCEEDED)
		kept = ran - r->restore_ms;
	else if (r->checkpoint_at > a->started_at + r->restore_ms)
		kept = r->checkpoint_at - a->started_at - r->restore_ms;
	else
		kept = 0;
	if (kept < 0)
		kept = 0;
	if (kept > ran)
		kept = ran;
	a->useful_ms = kept * r->n_tasks;
	a->lost_ms = (ran - kept) * r->n_tasks;
}

/*
 * The attempt's span as the engine accounted it: its tasks' first start
 * to their last end, when every task has both (one that never started
 * leaves the server's own times).
 */
static void span_from_tasks(const struct run *r, struct kn_attempt_row *a)
{
	int64_t first = 0, last = 0;

	for (int k = 0; k < r->n_tasks; k++) {
		const struct kn_task_status *st = &r->tasks[k].status;

		if (!r->tasks[k].ended || st->started_at_ms <= 0 ||
		    st->ended_at_ms < st->started_at_ms)
			return;
		if (!first || st->started_at_ms < first)
			first = st->started_at_ms;
		if (st->ended_at_ms > last)
			last = st->ended_at_ms;
	}
	if (first) {
		a->started_at = first;
		a->ended_at = last;
	}
}

/*
 * The job's reason once attempt a ended as a.reason says: when it
 * restarts or retries (a failure that was no timeout: retried), or how
 * many retries it used (malloc'd).
 */
static char *job_reason(const struct run *r, const struct kn_job_row *j,
			const struct kn_attempt_row *a, bool restart,
			bool retried, int64_t now)
{
	const char *why = a->reason;
	char in[32];

	if (restart) {
		kn_format_duration(j->not_before - now, in, sizeof(in));
		return kn_asprintf("restart in %s after %s", in, why);
	}
	if (a->state == KN_JOB_PREEMPTED)
		return kn_asprintf("%s; back in the queue", why);
	if (j->state == KN_JOB_QUEUED && j->retries_used && retried) {
		kn_format_duration(j->not_before - now, in, sizeof(in));
		return kn_asprintf("retry %d of %d in %s after %s",
				   j->retries_used, r->spec->retries, in, why);
	}
	if (j->state == KN_JOB_FAILED && j->retries_used)
		return kn_asprintf("%s (after %d retr%s)", why, j->retries_used,
				   j->retries_used == 1 ? "y" : "ies");
	return kn_xstrdup(why);
}

/* The first rank to fail (the cause: the rest were stopped), or NULL;
   *timeout when any task ran past the job's time limit. */
static const struct run_task *run_cause(const struct run *r, bool *timeout)
{
	const struct run_task *failed = NULL;

	*timeout = false;
	for (int i = 0; i < r->n_tasks; i++) {
		const struct run_task *t = &r->tasks[i];

		if (!strcmp(t->status.reason, "timeout"))
			*timeout = true;
		if (task_failed(t) &&
		    (!failed ||
		     t->status.ended_at_ms < failed->status.ended_at_ms))
			failed = t;
	}
	return failed;
}

/* What an attempt's end decides: the attempt's state, the job's next
   state and why (len bytes). */
struct run_end {
	const struct run_task *failed; /* the cause, or NULL */
	bool timeout;
	int64_t now;
	char *why;
	size_t len;
	bool requeue; /* the job goes back to the queue */
	bool restart; /* ... as a replica that serves again */
};

/* The job goes back to the queue without using a retry. */
static void end_requeue(struct run_end *e, struct kn_job_row *j,
			int64_t not_before)
{
	j->state = KN_JOB_QUEUED;
	j->not_before = not_before;
	e->requeue = true;
}

/* A replica serves until it is undeployed: whatever the exit, it comes
   back after backoff. One that had been up longer than backoff_max
   starts its crash count over. */
static void end_replica(const struct run *r, struct run_end *e,
			struct kn_job_row *j, struct kn_attempt_row *a)
{
	if (e->failed)
		describe_failure(e->failed, e->why, e->len);
	else
		snprintf(e->why, e->len, "exited 0");
	a->state = e->failed ? KN_JOB_FAILED : KN_JOB_SUCCEEDED;
	if (e->now - r->started_at >= r->spec->backoff_max_ms)
		j->retries_used = 0;
	j->retries_used++;
	end_requeue(e, j, e->now + backoff_ms(r->spec, j->retries_used));
	e->restart = true;
}

/* A failed attempt of any other job: retried after backoff unless it
   timed out, used its retries, or retrying is no use. */
static void end_failed(const struct run *r, struct run_end *e,
		       struct kn_job_row *j, struct kn_attempt_row *a)
{
	describe_failure(e->failed, e->why, e->len);
	a->state = KN_JOB_FAILED;
	if (e->timeout) {
		char limit[32];

		kn_format_duration(r->spec->timeout_ms, limit, sizeof(limit));
		snprintf(e->why, e->len, "timeout: ran past %s", limit);
	}
	/* A node without a step's prerequisites, or an input that changed
	   since the first attempt: retrying is no use. */
	if (!e->timeout && j->retries_used < r->spec->retries &&
	    !strstr(e->why, KN_PREREQUISITE_PREFIX) &&
	    !strstr(e->why, KN_INPUT_CHANGED_PREFIX)) {
		j->retries_used++;
		end_requeue(e, j, e->now + backoff_ms(r->spec, j->retries_used));
	} else {
		j->state = KN_JOB_FAILED;
		j->ended_at = e->now;
	}
}

/* Decide an attempt's end into j and a, by what stopped it. */
static void end_decide(struct server *s, const struct run *r,
		       struct run_end *e, struct kn_job_row *j,
		       struct kn_attempt_row *a)
{
	struct job_model model;

	if (j->cancel_requested) {
		a->state = KN_JOB_CANCELLED;
		snprintf(e->why, e->len, "%s",
			 j->reason ? j->reason : "cancelled");
		j->state = KN_JOB_CANCELLED;
		j->ended_at = e->now;
	} else if (r->evicting) {
		/* Preemption is not the job's failure: no retry is used. */
		a->state = KN_JOB_PREEMPTED;
		snprintf(e->why, e->len, "%s", r->stop_reason);
		end_requeue(e, j, e->now);
	} else if (r->stop_reason[0] &&
		   !strncmp(r->stop_reason, "interrupted", 11)) {
		/* Lost to a server crash before it started: not the job's
		   fault. */
		a->state = KN_JOB_FAILED;
		snprintf(e->why, e->len, "%s", r->stop_reason);
		end_requeue(e, j, e->now);
	} else if (r->launch_no_space) {
		/* The disk, not the job: back in the queue, no retry used. */
		a->state = KN_JOB_FAILED;
		snprintf(e->why, e->len, "waiting for disk space (%s)",
			 e->failed ? e->failed->status.reason : "cannot start");
		end_requeue(e, j, e->now + LAUNCH_DISK_RETRY_MS);
	} else if (job_hooks_model(s->hooks, r->job_id, &model) &&
		   model.serves) {
		end_replica(r, e, j, a);
	} else if (!e->failed) {
		a->state = KN_JOB_SUCCEEDED;
		j->state = KN_JOB_SUCCEEDED;
		j->ended_at = e->now;
		snprintf(e->why, e->len, "all %d task%s exited 0", r->n_tasks,
			 r->n_tasks == 1 ? "" : "s");
	} else {
		end_failed(r, e, j, a);
	}
}

/*
 * Write an attempt's end and the job's next state; requeues go back into
 * the queue once the transaction has committed (the caller's).
 */
static int finish_run(struct server *s, struct run *r, int64_t now,
		      bool *requeue, struct kn_error *err)
{
	struct kn_job_row j;
	struct kn_attempt_row a;
	char why[256] = "";
	struct run_end e = {.now = now, .why = why, .len = sizeof(why)};
	int rc;

	*requeue = false;
	e.failed = run_cause(r, &e.timeout);
	memset(&j, 0, sizeof(j));
	rc = kn_store_job_get(s->store, r->job_id, &j, err);
	if (rc < 0)
		return rc;
	memset(&a, 0, sizeof(a));
	a.job_id = r->job_id;
	a.number = r->attempt;
	a.started_at = r->started_at;
	a.ended_at = now;
	if (s->exec->ops->times_from_engine)
		span_from_tasks(r, &a);
	a.exit_code = e.failed ? e.failed->status.exit_code : 0;
	a.signal = e.failed ? e.failed->status.signal : 0;
	j.exit_code = a.exit_code;
	end_decide(s, r, &e, &j, &a);
	*requeue = e.requeue;
	a.reason = why;
	account_goodput(r, &a);
	free(j.reason);
	j.reason = job_reason(r, &j, &a, e.restart,
			      e.failed && !e.timeout && !r->launch_no_space,
			      now);
	rc = kn_store_attempt_put(s->store, &a, err);
	if (rc == 0)
		rc = kn_store_job_update(s->store, &j, NULL, err);
	if (rc == 0) { /* announced by settle once committed */
		kn_strlcpy(r->end_state, kn_job_state_name(j.state),
			   sizeof(r->end_state));
		kn_strlcpy(r->end_reason, j.reason ? j.reason : "",
			   sizeof(r->end_reason));
	}
	if (rc == 0 && *requeue)
		r->requeue_at = j.not_before;
	kn_job_row_release(&j);
	return rc;
}

void stop_run(struct server *s, struct run *r, const char *reason)
{
	struct kn_error err;

	if (r->stopping)
		return;
	r->stopping = true;
	if (reason && !r->stop_reason[0])
		kn_strlcpy(r->stop_reason, reason, sizeof(r->stop_reason));
	for (int i = 0; i < r->n_tasks; i++) {
		struct run_task *t = &r->tasks[i];
		if (t->ended)
			continue;
		if (s->exec->ops->stop(s->exec, t->task_dir, &t->proc,
				       r->stop_signal, r->stop_grace_ms,
				       &err) < 0)
			kn_log(KN_LOG_WARN, "job %lld rank %d: %s",
			       (long long)r->job_id, t->rank, err.message);
	}
}

/*
 * The store refused the exits. A full disk keeps each job running with
 * the reason until the poll stores them (jobs_poll tries again); the
 * log says so once, not on every try.
 */
static void settle_failed(struct run **changed, size_t n,
			  const struct kn_error *err)
{
	bool told = false;

	if (err->code != KN_ENOSPACE) {
		kn_log(KN_LOG_ERROR, "recording task exits failed: %s",
		       err->message);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		struct run *r = changed[i];
		int rank = 0;

		told = told || r->disk_wait[0];
		while (rank < r->n_tasks - 1 && !r->tasks[rank].ended)
			rank++;
		snprintf(r->disk_wait, sizeof(r->disk_wait),
			 "exit of rank %d recorded on the node; waiting for "
			 "disk space to store it", rank);
		r->disk_retry_at = kn_mono_ms() + POLL_MS;
	}
	if (!told)
		kn_log(KN_LOG_ERROR, "recording task exits waits for disk "
		       "space: %s", err->message);
}

/*
 * Write the tasks that ended since the last call, end the attempts whose
 * tasks have all ended, and release their devices. One transaction.
 */
void settle(struct server *s, struct run **changed, size_t n)
{
	struct kn_error err;
	struct run **done = kn_xcalloc(n ? n : 1, sizeof(*done));
	bool *requeue = kn_xcalloc(n ? n : 1, sizeof(*requeue));
	size_t nd = 0;
	int64_t now = kn_now_ms();
	int rc;

	rc = kn_store_begin(s->store, &err);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		struct run *r = changed[i];
		int ended = 0;

		for (int k = 0; rc == 0 && k < r->n_tasks; k++) {
			struct run_task *t = &r->tasks[k];
			struct kn_task_row tr;
			char devs[256];

			if (!t->ended)
				continue;
			ended++;
			if (t->recorded)
				continue;
			devices_text(&r->bindings[k], devs, sizeof(devs));
			memset(&tr, 0, sizeof(tr));
			tr.job_id = r->job_id;
			tr.attempt = r->attempt;
			tr.rank = t->rank;
			tr.node = s->nodes[r->bindings[k].node].name;
			tr.devices = devs;
			tr.gpu_milli = r->bindings[k].milli_per_device;
			tr.task_dir = t->task_dir;
			tr.state = KN_TASK_EXITED;
			tr.shim_pid = t->proc.pid;
			tr.shim_start = t->proc.start;
			tr.started_at = t->status.started_at_ms
						? t->status.started_at_ms
						: r->started_at;
			tr.ended_at = t->status.ended_at_ms ? t->status.ended_at_ms
							    : now;
			tr.exit_code = t->status.exit_code;
			tr.signal = t->status.signal;
			tr.master_port = r->master_port;
			rc = kn_store_task_put(s->store, &tr, &err);
		}
		if (rc == 0 && ended == r->n_tasks) {
			bool ok = !r->evicting;
			for (int k = 0; k < r->n_tasks; k++)
				if (task_failed(&r->tasks[k]))
					ok = false;
			if (!sync_finish_ready(s, r, ok))
				continue;
			rc = finish_run(s, r, now, &requeue[nd], &err);
			done[nd++] = r;
		}
	}
	rc = core_store_end(s->store, rc, &err);
	if (rc < 0) {
		/* Nothing is lost: the next poll finds the same exits again. */
		settle_failed(changed, n, &err);
		KN_FREE_ALL(done, requeue);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		/* An outputs upload tried again keeps its reason until done. */
		if (changed[i]->disk_wait[0] && !changed[i]->sync_busy) {
			kn_log(KN_LOG_INFO, "job %lld: disk space is back; its "
			       "attempt's end is stored",
			       (long long)changed[i]->job_id);
			changed[i]->disk_wait[0] = '\0';
		}
		for (int k = 0; k < changed[i]->n_tasks; k++)
			if (changed[i]->tasks[k].ended)
				changed[i]->tasks[k].recorded = true;
	}
	for (size_t i = 0; i < nd; i++) {
		struct run *r = done[i];
		int64_t job_id = r->job_id;

		feed_job(s, r->job_id, r->end_state, r->end_reason);
		kn_sched_release(&s->cluster, &r->req, r->bindings);
		run_unlink(s, r);
		if (requeue[i]) {
			queue_push(s, r->job_id, r->spec->priority,
				   r->submitted_at, r->requeue_at, r->spec,
				   r->owner);
			s->queue->disk_wait = r->launch_no_space; /* pushed first */
			r->spec = NULL;
			r->owner = NULL;
		}
		run_free(r);
		if (!requeue[i])
			job_hooks_job_ended(s->hooks, job_id);
	}
	KN_FREE_ALL(done, requeue);
	if (nd)
		wake_scheduler(s);
}

static struct run *run_find_pid(struct server *s, int pid, int *rank)
{
	for (struct run *r = s->runs; r; r = r->next)
		for (int i = 0; i < r->n_tasks; i++)
			if (r->tasks[i].proc.pid == pid && !r->tasks[i].ended) {
				*rank = i;
				return r;
			}
	return NULL;
}

/* Read one task's state; true when it has just been found ended. */
bool check_task(struct server *s, struct run *r, struct run_task *t)
{
	struct kn_task_status st;
	struct kn_error err;

	/* A task waiting for its restore has no process to look at yet. */
	if (t->ended || !t->launched)
		return false;
	if (t->rank == 0 && r->spec->n_inputs && !r->inputs_recorded)
		record_inputs(s, r, t);
	if (s->exec->ops->status(s->exec, t->task_dir, &t->proc, &st,
				 &err) < 0) {
		if (kn_task_file_refused(&err)) {
			char *path = kn_asprintf("%s/status.json", t->task_dir);
			server_task_file_refused(s, r->job_id, path, &err);
			free(path);
		} else
			kn_log(KN_LOG_WARN, "job %lld rank %d: %s",
			       (long long)r->job_id, t->rank, err.message);
		return false;
	}
	if (!st.ended)
		return false;
	t->ended = true;
	t->status = st;
	/* A pod's inputs are known with its end (kube/batchjobs.c). */
	if (t->rank == 0 && r->spec->n_inputs && !r->inputs_recorded)
		record_inputs(s, r, t);
	/* A task that synced its own checkpoints (a Kubernetes pod's shim):
	   the newest any rank reports counts, as the server's sync would. */
	if (st.checkpoint[0] && st.checkpoint_at_ms > r->checkpoint_at) {
		kn_strlcpy(r->checkpoint, st.checkpoint, sizeof(r->checkpoint));
		r->checkpoint_at = st.checkpoint_at_ms;
	}
	if (st.restored[0] && !r->restored[0])
		kn_strlcpy(r->restored, st.restored, sizeof(r->restored));
	if (st.restore_ms > r->restore_ms)
		r->restore_ms = st.restore_ms;
	/* Taken away by the platform (a spot eviction): a preemptible job
	   goes back to the queue as an eviction would send it. */
	if (st.preempted && r->spec->preemptible && !r->stopping &&
	    !r->evicting) {
		r->evicting = true;
		snprintf(r->stop_reason, sizeof(r->stop_reason),
			 "preempted: rank %d %s", t->rank, st.reason);
	}
	return true;
}

/* After exits: stop the rest of a gang whose member failed, then settle. */
void after_exits(struct server *s, struct run **changed, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct run *r = changed[i];
		for (int k = 0; k < r->n_tasks; k++) {
			char why[160];
			if (!r->tasks[k].ended || !task_failed(&r->tasks[k]) ||
			    r->stopping)
				continue;
			describe_failure(&r->tasks[k], why, sizeof(why));
			stop_run(s, r, why);
		}
	}
	if (n)
		settle(s, changed, n);
}

void changed_add(struct run ***v, size_t *n, struct run *r)
{
	for (size_t i = 0; i < *n; i++)
		if ((*v)[i] == r)
			return;
	*v = kn_xrealloc(*v, (*n + 1) * sizeof(**v));
	(*v)[(*n)++] = r;
}

void jobs_on_sigchld(void *arg)
{
	struct server *s = arg;
	struct run **changed = NULL;
	size_t n = 0;
	int status, pid, rank;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		struct run *r = run_find_pid(s, pid, &rank);
		if (r && check_task(s, r, &r->tasks[rank]))
			changed_add(&changed, &n, r);
	}
	after_exits(s, changed, n);
	free(changed);
}

void jobs_poll(void *arg)
{
	struct server *s = arg;
	struct run **changed = NULL;
	size_t n = 0;

	/* Children are reaped here too, in case a SIGCHLD was coalesced. */
	jobs_on_sigchld(s);
	/* What starts and stops since the last turn left for the engine
	   (launches after a restore, cancels from the API). */
	if (s->exec->ops->flush)
		s->exec->ops->flush(s->exec);
	for (struct run *r = s->runs; r; r = r->next)
		for (int k = 0; k < r->n_tasks; k++) {
			struct run_task *t = &r->tasks[k];
			/* An exit whose write failed earlier is tried again. */
			if (check_task(s, r, t) || (t->ended && !t->recorded))
				changed_add(&changed, &n, r);
		}
	/* ... and an end that waits for disk space, when its time comes. */
	for (struct run *r = s->runs; r; r = r->next)
		if (r->disk_wait[0] && kn_mono_ms() >= r->disk_retry_at)
			changed_add(&changed, &n, r);
	after_exits(s, changed, n);
	free(changed);
	kn_timer_arm(s->poll_timer, POLL_MS);
}

/* ---- cancel ---- */

/* A running job's stop asked for, with reason (taken), audited as a. */
static int request_stop(struct server *s, struct kn_job_row *j, char *reason,
			const struct kn_audit *a, struct kn_error *err)
{
	int rc;

	j->cancel_requested = true;
	j->reason = reason;
	rc = kn_store_job_update(s->store, j, a, err);
	if (rc < 0)
		return rc;
	for (struct run *r = s->runs; r; r = r->next)
		if (r->job_id == j->id)
			stop_run(s, r, j->reason);
	return 0;
}

int jobs_get_for(struct server *s, const struct caller *c, int64_t id,
		 const char *verb, struct kn_job_row *j, struct kn_error *err)
{
	int rc = kn_store_job_get(s->store, id, j, err);

	if (rc < 0 || !c || c->role >= KN_ROLE_OPERATOR ||
	    strcmp(j->owner, c->name) == 0)
		return rc;
	rc = kn_errorf(err, KN_EPERM, NULL,
		       "job %lld belongs to %s; a user may %s only its own "
		       "jobs",
		       (long long)id, j->owner, verb);
	kn_job_row_release(j);
	return rc;
}

int jobs_cancel(struct server *s, const struct caller *c, int64_t id,
		struct kn_error *err)
{
	struct kn_job_row j;
	struct kn_audit a;
	char object[48];
	int rc;

	rc = jobs_get_for(s, c, id, "cancel", &j, err);
	if (rc < 0)
		return rc;
	if (kn_job_state_terminal(j.state)) {
		rc = kn_errorf(err, KN_ECONFLICT, "state",
			       "job %lld has already %s", (long long)id,
			       kn_job_state_name(j.state));
		goto out;
	}
	if (j.cancel_requested)
		goto out; /* asked twice: the first request stands */
	snprintf(object, sizeof(object), "job/%lld", (long long)id);
	caller_audit(&a, c, "job.cancel", object, "ok", NULL);
	free(j.reason);
	if (j.state == KN_JOB_QUEUED) {
		j.state = KN_JOB_CANCELLED;
		j.ended_at = kn_now_ms();
		j.cancel_requested = true;
		j.reason = kn_asprintf("cancelled by %s while queued", c->name);
		rc = kn_store_job_update(s->store, &j, &a, err);
		if (rc == 0) {
			queue_remove(s, id);
			feed_job(s, id, "cancelled", j.reason);
			job_hooks_job_ended(s->hooks, id);
		}
		goto out;
	}
	rc = request_stop(s, &j, kn_asprintf("cancelled by %s", c->name), &a,
			  err);
out:
	kn_job_row_release(&j);
	return rc;
}

int jobs_stop_system(struct server *s, int64_t id, const char *action,
		     const char *why, struct kn_error *err)
{
	struct kn_job_row j;
	struct kn_audit a;
	char object[48];
	int rc;

	memset(&j, 0, sizeof(j));
	rc = kn_store_job_get(s->store, id, &j, err);
	if (rc < 0)
		return rc;
	if (kn_job_state_terminal(j.state) || j.state == KN_JOB_QUEUED) {
		rc = kn_errorf(err, KN_ECONFLICT, "state", "job %lld is %s",
			       (long long)id, kn_job_state_name(j.state));
		goto out;
	}
	if (j.cancel_requested)
		goto out;
	snprintf(object, sizeof(object), "job/%lld", (long long)id);
	memset(&a, 0, sizeof(a));
	a.actor = "system";
	a.role = "system";
	a.action = (char *)action;
	a.object = object;
	a.outcome = "ok";
	a.detail = (char *)why;
	free(j.reason);
	rc = request_stop(s, &j, kn_xstrdup(why), &a, err);
out:
	kn_job_row_release(&j);
	return rc;
}

void jobs_end_resume(struct server *s, int64_t id, int attempt)
{
	for (struct run *r = s->runs; r; r = r->next)
		if (r->job_id == id && r->attempt == attempt) {
			jobs_sync_settled(s, r);
			return;
		}
}

int jobs_evict(struct server *s, const struct caller *c, int64_t id,
	       int64_t grace_ms, const char *why, struct kn_error *err)
{
	struct kn_job_row j;
	struct kn_audit a;
	struct run *r = NULL;
	char object[48];
	int rc;

	rc = jobs_get_for(s, c, id, "evict", &j, err);
	if (rc < 0)
		return rc;
	for (struct run *p = s->runs; p; p = p->next)
		if (p->job_id == id)
			r = p;
	if (!r || j.state != KN_JOB_RUNNING) {
		rc = kn_errorf(err, KN_ECONFLICT, "state",
			       "job %lld is %s, not running: nothing to evict",
			       (long long)id, kn_job_state_name(j.state));
		goto out;
	}
	if (!r->spec->preemptible) {
		rc = kn_errorf(err, KN_ECONFLICT, "preemptible",
			       "job %lld is not preemptible (its spec does not "
			       "say preemptible: true)",
			       (long long)id);
		goto out;
	}
	if (r->stopping)
		goto out; /* already on its way out */
	if (c) {
		snprintf(object, sizeof(object), "job/%lld", (long long)id);
		caller_audit(&a, c, "job.evict", object, "ok", why);
		rc = kn_store_audit_insert(s->store, &a, err);
		if (rc < 0)
			goto out;
	}
	r->evicting = true;
	if (r->spec->checkpoint.set) {
		r->stop_signal = r->spec->checkpoint.signal;
		r->stop_grace_ms = r->spec->checkpoint.grace_ms;
	}
	if (grace_ms >= 0)
		r->stop_grace_ms = grace_ms;
	{
		char reason[128];
		snprintf(reason, sizeof(reason), "preempted: %s", why);
		stop_run(s, r, reason);
	}
out:
	kn_job_row_release(&j);
	return rc;
}

int jobs_restart(struct server *s, int64_t id, const char *why,
		 struct kn_error *err)
{
	for (struct run *r = s->runs; r; r = r->next) {
		if (r->job_id != id)
			continue;
		stop_run(s, r, why);
		return 0;
	}
	return kn_errorf(err, KN_ENOTFOUND, NULL, "job %lld is not running",
			 (long long)id);
}

const char *jobs_run_reason(struct server *s, int64_t id)
{
	for (struct run *r = s->runs; r; r = r->next)
		if (r->job_id == id && r->disk_wait[0])
			return r->disk_wait;
	return NULL;
}

void jobs_sync_settled(struct server *s, struct run *r)
{
	settle(s, &r, 1);
}

/* ---- a job's metrics ---- */

/* metrics.json is a few numbers; more is a task's mistake. */
#define METRICS_MAX_BYTES (64 * 1024)

/*
 * The numbers the job left in KILN_OUTPUT_DIR/metrics.json (its last
 * attempt's task directory), as a JSON object text, or NULL with a note
 * in why when the file is there but not a JSON object.
 */
char *jobs_metrics_read(struct server *s, const struct kn_job_row *j,
			char *why, size_t len)
{
	char *path = kn_asprintf("%s/tasks/%lld/%d/outputs", s->home,
				 (long long)j->id, j->attempts);
	char *text = NULL, *out = NULL;
	size_t n = 0;
	json_t *doc, *nums, *v;
	json_error_t jerr;
	const char *key;

	why[0] = '\0';
	if (kn_task_file_read(path, "metrics.json", METRICS_MAX_BYTES, &text,
			      &n, NULL) < 0)
		goto out;
	doc = json_loadb(text, n, 0, &jerr);
	if (!json_is_object(doc)) {
		snprintf(why, len, "; metrics.json is not a JSON object: %.80s",
			 doc ? "another value" : jerr.text);
		json_decref(doc);
		goto out;
	}
	nums = json_object();
	json_object_foreach(doc, key, v)
		if (json_is_number(v))
			json_object_set(nums, key, v);
	out = json_dumps(nums, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(nums);
	json_decref(doc);
out:
	KN_FREE_ALL(text, path);
	return out;
}
