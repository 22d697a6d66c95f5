/*
 * The job core's recovery at start-up: the store says which attempts
 * were running and the task directories what became of them (status.json
 * from the shim, or a live shim to re-adopt and bind again); queued jobs
 * go back into the queue with their specs parsed again.
 */
#include "core_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- recovery ---- */

static struct kn_sched_device *node_device(struct server *s, size_t node,
					   int index)
{
	struct kn_sched_node *n = &s->cluster.nodes[node];

	for (size_t i = 0; i < n->n_devices; i++)
		if (n->devices[i].index == index)
			return &n->devices[i];
	return NULL;
}

/*
 * "0:mig=1g.10gb@6" -> a MIG binding, its instance put back on the device.
 * false when the text is not of that form. A device or profile this node
 * no longer has in MIG mode is logged and the task holds nothing.
 */
static bool rebind_mig(struct server *s, struct kn_sched_binding *b,
		       const char *text)
{
	struct kn_sched_device *dev;
	char profile[32];
	int index, start, used = 0;

	if (sscanf(text, "%d:mig=%31[^@]@%d%n", &index, profile, &start,
		   &used) != 3 || text[used] != '\0')
		return false;
	dev = node_device(s, b->node, index);
	if (!dev || !dev->mig || !kn_mig_profile(dev->mig, profile) ||
	    dev->n_mig_slices >= KN_MIG_MAX_SLICES) {
		kn_log(KN_LOG_WARN, "task's MIG instance %s is not on this "
		       "node now; not counted", text);
		return true;
	}
	b->n_devices = 1;
	b->devices[0] = index;
	b->mig_profile = kn_mig_profile(dev->mig, profile);
	b->mig_start = start;
	dev->mig_slices[dev->n_mig_slices].profile = b->mig_profile;
	dev->mig_slices[dev->n_mig_slices++].start = start;
	return true;
}

/*
 * "0,2" -> binding on the task row's node, charged to the snapshot. A
 * node this server no longer runs (renamed, or not in --sim-node now):
 * the first one, as a single-node server always did.
 */
static void rebind(struct server *s, struct run *r, int rank,
		  const struct kn_task_row *tr)
{
	struct kn_sched_binding *b = &r->bindings[rank];
	const char *p = tr->devices;
	int node = tr->node ? nodes_find(s, tr->node) : -1;
	struct kn_sched_node *sn;

	if (node < 0 && s->cluster.n_nodes > 1)
		kn_log(KN_LOG_WARN, "job %lld's task %d ran on node %s, which "
		       "this server does not run now; counted on %s",
		       (long long)r->job_id, rank, tr->node ? tr->node : "?",
		       s->nodes[0].name);
	memset(b, 0, sizeof(*b));
	b->node = node < 0 ? 0 : (size_t)node;
	sn = &s->cluster.nodes[b->node];
	b->mig_start = -1;
	b->milli_per_device = tr->gpu_milli;
	if (p && strstr(p, ":mig=") && rebind_mig(s, b, p))
		p = NULL;
	while (p && *p && b->n_devices < KN_SCHED_MAX_GPUS_PER_TASK) {
		char *end;
		long idx = strtol(p, &end, 10);
		if (end == p)
			break;
		b->devices[b->n_devices++] = (int)idx;
		p = *end == ',' ? end + 1 : end;
	}
	for (int d = 0; d < b->n_devices; d++) {
		struct kn_sched_device *dev =
			node_device(s, b->node, b->devices[d]);

		if (dev)
			dev->used_milli += b->milli_per_device;
	}
	sn->cpu_milli_used += r->req.cpu_milli;
	sn->memory_used += r->req.memory_bytes;
}

static int recover_running(struct server *s, const struct kn_job_row *j,
			   struct kn_error *err)
{
	struct kn_job_spec *spec = NULL;
	struct kn_task_row *tasks = NULL;
	struct kn_attempt_row *attempts = NULL;
	size_t nt = 0, na = 0;
	struct run *r;
	int rc;

	rc = parse_spec(s, j->spec_yaml, strlen(j->spec_yaml), j->filename,
			&spec, err);
	if (rc < 0)
		return rc;
	spec->array.job_id = j->array_id;
	spec->array.index = j->array_index;
	rc = kn_store_task_list(s->store, j->id, j->attempts, &tasks, &nt, err);
	if (rc == 0)
		rc = kn_store_attempt_list(s->store, j->id, &attempts, &na, err);
	if (rc < 0) {
		kn_job_spec_free(spec);
		return rc;
	}
	r = run_new(s, j->id, j->attempts, spec,
		    j->owner ? kn_xstrdup(j->owner) : NULL);
	r->submitted_at = j->submitted_at;
	r->started_at = na ? attempts[na - 1].started_at : j->started_at;
	for (size_t i = 0; i < nt && (int)tasks[i].rank < r->n_tasks; i++) {
		struct run_task *t = &r->tasks[tasks[i].rank];
		struct kn_error aerr;

		r->master_port = tasks[i].master_port;
		rebind(s, r, tasks[i].rank, &tasks[i]);
		if (tasks[i].state == KN_TASK_EXITED) {
			t->ended = t->recorded = true;
			t->status.ended = true;
			t->status.exit_code = tasks[i].exit_code;
			t->status.signal = tasks[i].signal;
			t->status.started_at_ms = tasks[i].started_at;
			t->status.ended_at_ms = tasks[i].ended_at;
			continue;
		}
		if (s->exec->ops->adopt(s->exec, t->task_dir, &t->proc,
					&aerr) < 0) {
			/* Bound but never started: the crash came first. */
			task_end_unstarted(t, "never started");
			snprintf(r->stop_reason, sizeof(r->stop_reason),
				 "interrupted: the server stopped while starting "
				 "attempt %d",
				 r->attempt);
			continue;
		}
		t->launched = true;
		check_task(s, r, t);
	}
	kn_task_list_free(tasks, nt);
	kn_attempt_list_free(attempts, na);
	/* An eviction that was under way when the server stopped goes on. */
	for (int i = 0; i < r->n_tasks && !r->stop_reason[0]; i++) {
		char *stop = kn_asprintf("%s/stop.json", r->tasks[i].task_dir);
		if (access(stop, F_OK) == 0 && !j->cancel_requested) {
			r->evicting = true;
			r->stopping = true;
			snprintf(r->stop_reason, sizeof(r->stop_reason),
				 "preempted: eviction under way when the server "
				 "restarted");
		}
		free(stop);
	}
	if (r->stop_reason[0] && !r->stopping) {
		char reason[128];
		kn_strlcpy(reason, r->stop_reason, sizeof(reason));
		stop_run(s, r, reason);
	}
	sync_run_started(s, r);
	return 0;
}

int jobs_recover(struct server *s, struct kn_error *err)
{
	struct kn_job_filter f;
	struct kn_job_row *jobs = NULL;
	struct run **changed = NULL;
	size_t n = 0, nc = 0;
	int rc, adopted = 0, queued = 0;

	memset(&f, 0, sizeof(f));
	f.state = -1;
	f.active_only = true;
	f.with_spec = true;
	rc = kn_store_job_list(s->store, &f, &jobs, &n, err);
	if (rc < 0)
		return rc;
	for (size_t i = 0; i < n; i++) {
		struct kn_job_spec *spec = NULL;
		struct kn_error perr;

		if (jobs[i].state == KN_JOB_RUNNING) {
			if (recover_running(s, &jobs[i], &perr) < 0) {
				kn_log(KN_LOG_ERROR, "job %lld: cannot recover: %s",
				       (long long)jobs[i].id, perr.message);
				continue;
			}
			adopted++;
			continue;
		}
		if (parse_spec(s, jobs[i].spec_yaml, strlen(jobs[i].spec_yaml),
			       jobs[i].filename, &spec, &perr) < 0) {
			kn_log(KN_LOG_ERROR, "job %lld: stored spec no longer "
			       "parses: %s", (long long)jobs[i].id, perr.message);
			continue;
		}
		spec->array.job_id = jobs[i].array_id;
		spec->array.index = jobs[i].array_index;
		queue_push(s, jobs[i].id, jobs[i].priority, jobs[i].submitted_at,
			   jobs[i].not_before, spec,
			   jobs[i].owner ? kn_xstrdup(jobs[i].owner) : NULL);
		queued++;
	}
	kn_job_list_free(jobs, n);
	for (struct run *r = s->runs; r; r = r->next)
		changed_add(&changed, &nc, r);
	after_exits(s, changed, nc);
	free(changed);
	if (adopted || queued)
		kn_log(KN_LOG_INFO, "recovered %d running and %d queued job%s",
		       adopted, queued, adopted + queued == 1 ? "" : "s");
	wake_scheduler(s);
	return 0;
}

void jobs_free_all(struct server *s)
{
	KN_LIST_FREE(s->queue, queued_free);
	s->queue_len = 0;
	KN_LIST_FREE(s->runs, run_free);
}
