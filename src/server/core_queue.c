/*
 * The job core's queue: submitting a job (its spec parsed, resolved and
 * stored), the queue in memory, and the scheduler's turn (jobs_tick):
 * placement, preemption for a higher priority, and binding a turn's
 * placements in one transaction before any shim starts (core_launch.c).
 */
#include "core_internal.h"
#include "executors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The spec's terms for the scheduler; the strings stay the spec's. */
static struct kn_sched_affinity_term *
affinity_build(const struct kn_affinity_term *terms, size_t n)
{
	struct kn_sched_affinity_term *out;

	if (n == 0)
		return NULL;
	out = kn_xcalloc(n, sizeof(*out));
	for (size_t i = 0; i < n; i++) {
		out[i].key = terms[i].key;
		out[i].op = terms[i].op == KN_AFFINITY_IN ? KN_SCHED_IN
			    : terms[i].op == KN_AFFINITY_NOT_IN
				    ? KN_SCHED_NOT_IN
			    : terms[i].op == KN_AFFINITY_EXISTS
				    ? KN_SCHED_EXISTS
				    : KN_SCHED_DOES_NOT_EXIST;
		out[i].values = (const char *const *)terms[i].values;
		out[i].n_values = terms[i].n_values;
		out[i].weight = terms[i].weight;
	}
	return out;
}

void sreq_build(const struct server *s, const struct kn_job_spec *spec,
		       struct sreq *r)
{
	const struct kn_placement_spec *p = &spec->placement;
	const char *own_key = s->exec->ops->selector_key;
	size_t n_selector = 0;

	memset(r, 0, sizeof(*r));
	r->req.tasks = spec->tasks;
	/* An engine that runs arrays places their elements itself: kiln
	   hands them over whole and charges none of its nodes for them. */
	if (spec->array.count && s->exec->ops->runs_arrays)
		return;
	r->req.gpu_milli = spec->resources.gpu_milli;
	r->req.mig_profile = spec->resources.mig_profile;
	r->req.gpu_models = (const char *const *)spec->resources.gpu_models;
	r->req.n_gpu_models = spec->resources.n_gpu_models;
	r->req.cpu_milli = spec->resources.cpu_milli;
	r->req.memory_bytes = spec->resources.memory_bytes;
	/* Tasks the server runs count a default (limits.c gives them the
	   same memory limit); an engine with its own limits counts its own. */
	if (!s->exec->ops->limits)
		kn_sched_request_defaults(&r->req, &s->defaults);
	/* The cluster matches models and placement terms (kube.c). */
	if (s->exec->ops->places_tasks) {
		r->req.gpu_models = NULL;
		r->req.n_gpu_models = 0;
		return;
	}
	if (p->n_selector) {
		r->selector = kn_xcalloc(p->n_selector, sizeof(*r->selector));
		for (size_t i = 0; i < p->n_selector; i++) {
			/* The engine's own key (Slurm's pool) is not ours. */
			if (own_key && !strcmp(own_key, p->selector[i].key))
				continue;
			r->selector[n_selector].key = p->selector[i].key;
			r->selector[n_selector++].value = p->selector[i].value;
		}
	}
	if (p->n_tolerations) {
		r->tolerations =
			kn_xcalloc(p->n_tolerations, sizeof(*r->tolerations));
		for (size_t i = 0; i < p->n_tolerations; i++) {
			const struct kn_toleration *t = &p->tolerations[i];
			r->tolerations[i].key = t->key;
			r->tolerations[i].exists =
				t->operator_ && !strcmp(t->operator_, "Exists");
			r->tolerations[i].value = t->value;
			r->tolerations[i].effect = t->effect;
		}
	}
	r->req.selector = r->selector;
	r->req.n_selector = n_selector;
	r->req.tolerations = r->tolerations;
	r->req.n_tolerations = p->n_tolerations;
	r->required = affinity_build(p->required, p->n_required);
	r->preferred = affinity_build(p->preferred, p->n_preferred);
	r->req.required = r->required;
	r->req.n_required = p->n_required;
	r->req.preferred = r->preferred;
	r->req.n_preferred = p->n_preferred;
	/* The node label names spread reads (docs/scheduling.md). */
	r->req.spread_key = p->spread == KN_SPREAD_ZONE ? "zone"
			    : p->spread == KN_SPREAD_FAULT_DOMAIN
				    ? "fault_domain"
				    : NULL;
}

static void sreq_release(struct sreq *r)
{
	KN_FREE_ALL(r->selector, r->tolerations, r->required, r->preferred);
}

/* ---- audit helpers ---- */


/* ---- fair share ---- */

struct owner_usage {
	char *owner;
	double usage;
};

/* Below this an owner's usage is forgotten: a few CPU-milliseconds. */
#define USAGE_NEGLIGIBLE 1e-3

static struct owner_usage *usage_find(struct server *s, const char *owner)
{
	for (size_t i = 0; i < s->n_owner_usage; i++)
		if (!strcmp(s->owner_usage[i].owner, owner))
			return &s->owner_usage[i];
	return NULL;
}

void fair_advance(struct server *s, int64_t now)
{
	int64_t elapsed = s->usage_at ? now - s->usage_at : 0;
	size_t k = 0;

	for (struct run *r = s->runs; r; r = r->next) {
		if (!r->owner || usage_find(s, r->owner))
			continue;
		s->owner_usage = kn_xrealloc(s->owner_usage,
					     (s->n_owner_usage + 1) *
						     sizeof(*s->owner_usage));
		s->owner_usage[s->n_owner_usage].owner = kn_xstrdup(r->owner);
		s->owner_usage[s->n_owner_usage++].usage = 0;
	}
	for (size_t i = 0; i < s->n_owner_usage; i++) {
		struct owner_usage *u = &s->owner_usage[i];
		double rate = 0;

		for (struct run *r = s->runs; r; r = r->next)
			if (r->owner && !strcmp(r->owner, u->owner))
				rate += kn_fair_rate(&r->req);
		u->usage = kn_fair_usage_advance(
			u->usage, rate, elapsed, s->cfg.fair_share_half_life_ms);
		/* Owners long idle leave the table, which stays as small as
		   the set of recent users. */
		if (rate == 0 && u->usage < USAGE_NEGLIGIBLE)
			free(u->owner);
		else
			s->owner_usage[k++] = *u;
	}
	s->n_owner_usage = k;
	s->usage_at = now;
}

/* An owner's usage as of the last fair_advance; 0 for none. */
static double owner_usage(struct server *s, const char *owner)
{
	const struct owner_usage *u = owner ? usage_find(s, owner) : NULL;
	return u ? u->usage : 0;
}

void fair_release(struct server *s)
{
	for (size_t i = 0; i < s->n_owner_usage; i++)
		free(s->owner_usage[i].owner);
	free(s->owner_usage);
	s->owner_usage = NULL;
	s->n_owner_usage = 0;
}

/* ---- queue ---- */

char *job_owner(struct server *s, int64_t id)
{
	struct kn_job_row j;
	struct kn_error err;
	char *owner = NULL;

	memset(&j, 0, sizeof(j));
	if (kn_store_job_get(s->store, id, &j, &err) == 0 && j.owner)
		owner = kn_xstrdup(j.owner);
	kn_job_row_release(&j);
	return owner;
}

static struct queued_job *queue_find(struct server *s, int64_t id,
				     struct queued_job ***link)
{
	for (struct queued_job **p = &s->queue; *p; p = &(*p)->next) {
		if ((*p)->id == id) {
			if (link)
				*link = p;
			return *p;
		}
	}
	return NULL;
}

static int by_id(const void *a, const void *b)
{
	int64_t x = (*(struct queued_job *const *)a)->id;
	int64_t y = (*(struct queued_job *const *)b)->id;

	return x < y ? -1 : x > y;
}

/* The queue by id, for a turn's lookups: an array fills it by thousands. */
static struct queued_job **queue_index(struct server *s)
{
	struct queued_job **ix =
		kn_xcalloc(s->queue_len ? s->queue_len : 1, sizeof(*ix));
	size_t n = 0;

	for (struct queued_job *q = s->queue; q; q = q->next)
		ix[n++] = q;
	qsort(ix, n, sizeof(*ix), by_id);
	return ix;
}

static struct queued_job *queue_lookup(struct server *s,
				       struct queued_job **ix, int64_t id)
{
	struct queued_job key = {.id = id}, *k = &key, **hit;

	hit = bsearch(&k, ix, s->queue_len, sizeof(*ix), by_id);
	return hit ? *hit : NULL;
}

/* owner: the job's owner (taken), or NULL to read it from the store. */
static struct queued_job *queued_new(struct server *s, int64_t id,
				      int priority, int64_t submitted_at,
				      int64_t not_before,
				      struct kn_job_spec *spec, char *owner)
{
	struct queued_job *q = kn_xcalloc(1, sizeof(*q));

	q->id = id;
	q->priority = priority;
	q->submitted_at = submitted_at;
	q->not_before = not_before;
	q->spec = spec;
	q->owner = owner ? owner : job_owner(s, id);
	return q;
}

static void queue_link(struct server *s, struct queued_job *q)
{
	q->next = s->queue;
	s->queue = q;
	s->queue_len++;
}

void queue_push(struct server *s, int64_t id, int priority,
		       int64_t submitted_at, int64_t not_before,
		       struct kn_job_spec *spec, char *owner)
{
	queue_link(s, queued_new(s, id, priority, submitted_at, not_before,
				 spec, owner));
}

void jobs_idem_settle(struct server *s, bool committed)
{
	struct queued_job *q = s->idem_queued;

	s->idem_open = false;
	s->idem_queued = NULL;
	jobs_held_settle(s, q, committed);
}

void jobs_held_settle(struct server *s, struct queued_job *q,
		      bool committed)
{
	struct queued_job *next;

	for (; q; q = next) {
		next = q->next;
		if (!committed) {
			queued_free(q);
			continue;
		}
		queue_link(s, q);
		feed_job(s, q->id, "queued", NULL);
		wake_scheduler(s);
	}
}

void queued_free(struct queued_job *q)
{
	kn_job_spec_free(q->spec);
	KN_FREE_ALL(q->owner, q);
}

void queue_remove(struct server *s, int64_t id)
{
	struct queued_job **link, *q = queue_find(s, id, &link);

	if (!q)
		return;
	*link = q->next;
	s->queue_len--;
	queued_free(q);
}

const char *jobs_queue_reason(struct server *s, int64_t id)
{
	struct queued_job *q = queue_find(s, id, NULL);
	return q && q->reason[0] ? q->reason : NULL;
}

void jobs_queue_reasons(struct server *s, const struct kn_job_row *rows,
			size_t n, const char **why)
{
	struct queued_job **ix = queue_index(s);

	for (size_t i = 0; i < n; i++) {
		struct queued_job *q = queue_lookup(s, ix, rows[i].id);

		why[i] = q && q->reason[0] ? q->reason : NULL;
	}
	free(ix);
}

enum job_place core_job_view(struct server *s, int64_t id,
			     struct job_view *out)
{
	struct queued_job *q = queue_find(s, id, NULL);

	memset(out, 0, sizeof(*out));
	out->reason = "";
	if (q) {
		out->place = JOB_QUEUED;
		out->reason = q->reason;
		out->not_before = q->not_before;
		return out->place;
	}
	for (const struct run *r = s->runs; r; r = r->next) {
		if (r->job_id != id)
			continue;
		out->place = JOB_RUNNING;
		out->attempt = r->attempt;
		out->started_at = r->started_at;
		out->master_port = r->master_port;
		out->node = r->n_tasks > 0 ? r->bindings[0].node : 0;
		out->stopping = r->stopping;
		out->serving = !r->stopping && r->n_tasks > 0 &&
			       r->tasks[0].launched && !r->tasks[0].ended;
		break;
	}
	return out->place;
}

size_t jobs_pending(struct server *s, struct pending_job **out)
{
	int64_t now = kn_now_ms();
	struct kn_sched_queue_entry *order =
		kn_xcalloc(s->queue_len ? s->queue_len : 1, sizeof(*order));
	struct queued_job **ix;
	size_t n = 0, k = 0;

	fair_advance(s, now);
	for (struct queued_job *q = s->queue; q; q = q->next)
		if (q->reason[0] && q->not_before <= now && !q->preempting) {
			order[n].job_id = q->id;
			order[n].priority = q->priority;
			order[n].usage = owner_usage(s, q->owner);
			order[n++].submitted_at = q->submitted_at;
		}
	kn_sched_sort_queue(order, n);
	*out = kn_xcalloc(n ? n : 1, sizeof(**out));
	ix = queue_index(s);
	for (size_t i = 0; i < n; i++) {
		struct queued_job *q = queue_lookup(s, ix, order[i].job_id);
		struct sreq *r = kn_xcalloc(1, sizeof(*r));

		sreq_build(s, q->spec, r);
		(*out)[k].id = q->id;
		(*out)[k].preemptible = q->spec->preemptible;
		(*out)[k++].req = &r->req;
	}
	KN_FREE_ALL(ix, order);
	return k;
}

void jobs_pending_free(struct pending_job *jobs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		/* req is the first member of the sreq it was built in. */
		struct sreq *r = (struct sreq *)jobs[i].req;

		sreq_release(r);
		free(r);
	}
	free(jobs);
}

void wake_scheduler(struct server *s)
{
	if (!kn_timer_pending(s->tick_timer))
		kn_timer_arm(s->tick_timer, 0);
}

void jobs_wake(struct server *s)
{
	wake_scheduler(s);
}

/* ---- submit ---- */

/*
 * Tasks start in the spec's `workdir`, which may be relative to the spec
 * file; with none, in the spec file's directory (as `sbatch` starts in the
 * directory it was called from). Only an absolute file name tells where
 * that is; otherwise a task starts in its task directory.
 */
static void resolve_workdir(struct kn_job_spec *spec, const char *filename)
{
	const char *slash;
	char *dir;

	if (spec->workdir && spec->workdir[0] == '/')
		return;
	if (!filename || filename[0] != '/')
		return;
	slash = strrchr(filename, '/');
	dir = slash == filename ? kn_xstrdup("/")
				: kn_asprintf("%.*s", (int)(slash - filename),
					      filename);
	if (spec->workdir) {
		char *abs = kn_asprintf("%s/%s", dir, spec->workdir);
		KN_FREE_ALL(spec->workdir, dir);
		spec->workdir = abs;
	} else {
		spec->workdir = dir;
	}
}

/*
 * Paths in `inputs:` are relative to the spec file, like its workdir:
 * file:///ABSOLUTE URLs from here on. shown names the file in messages.
 */
static int resolve_inputs(struct kn_job_spec *spec, const char *filename,
			  const char *shown, struct kn_error *err)
{
	const char *slash = filename ? strrchr(filename, '/') : NULL;
	char *dir = NULL;
	int rc;

	if (filename && filename[0] == '/')
		dir = slash == filename ? kn_xstrdup("/")
					: kn_asprintf("%.*s",
						      (int)(slash - filename),
						      filename);
	rc = kn_job_spec_resolve_inputs(spec, dir, shown, err);
	free(dir);
	return rc;
}

int parse_spec(const struct server *s, const char *text, size_t len,
		      const char *filename, struct kn_job_spec **out,
		      struct kn_error *err)
{
	int rc = kn_job_spec_parse(text, len, filename, out, err);

	/* In a pod, a workdir is the container's, not the spec file's. */
	if (rc == 0 && !s->exec->ops->places_tasks)
		resolve_workdir(*out, filename);
	if (rc == 0 && (rc = resolve_inputs(*out, filename, filename, err)) < 0) {
		kn_job_spec_free(*out);
		*out = NULL;
	}
	return rc;
}

/*
 * The code revision of a job whose workdir is in a git repository, for
 * the lineage of models made from it (docs/registry.md). A pod's workdir
 * is the container's: nothing to read here.
 */
static void record_revision(struct server *s, int64_t id,
			    const struct kn_job_spec *spec)
{
	struct kn_error err;
	char rev[65];

	if (s->exec->ops->places_tasks || !spec->workdir ||
	    spec->workdir[0] != '/' || kn_git_revision(spec->workdir, rev) < 0)
		return;
	/* The job runs without it; only its lineage will lack it. */
	if (kn_store_job_revision_put(s->store, id, rev, &err) < 0)
		kn_log(KN_LOG_ERROR, "job %lld: code revision %s not recorded: "
		       "%s", (long long)id, rev, err.message);
}

/* Whether the executor can run spec: its refusal names the file. */
static int executor_check(struct server *s, const struct kn_job_spec *spec,
			  const char *filename, struct kn_error *err)
{
	struct kn_error why;

	/* A terminal nobody could attach to is refused. */
	if (spec->tty && !s->exec->ops->session_connect)
		return kn_errorf(err, KN_EINVAL, "tty",
				 "%s: tty: the %s executor takes no "
				 "interactive sessions",
				 filename, s->exec->ops->name);
	if (!s->exec->ops->check ||
	    s->exec->ops->check(s->exec, spec, &why) == 0)
		return 0;
	return kn_errorf(err, KN_EINVAL, why.field, "%s: %s", filename,
			 why.message);
}

/*
 * A job the cluster could not hold even empty is refused (409) rather
 * than queued for ever, as sbatch refuses it. Not where the engine places
 * tasks itself, nor while a pool may add nodes: the autoscaler judges
 * those. An engine with limits of its own (a Slurm partition's) judges
 * first.
 */
static int fit_check(struct server *s, const struct kn_job_spec *spec,
		     const char *filename, struct kn_error *err)
{
	struct kn_sched_binding *bindings;
	struct kn_error why;
	struct sreq sr;
	char reason[512];
	int rc;

	/* An engine that knows its own limits (Slurm's partitions). */
	if (s->exec->ops->admit && s->exec->ops->admit(s->exec, spec, &why) < 0)
		return kn_errorf(err, KN_ECONFLICT, why.field[0] ? why.field
								 : "resources",
				 "%s: %s (hold=1 queues it anyway, for nodes "
				 "to come)", filename ? filename : "job",
				 why.message);
	if (s->exec->ops->places_tasks || s->cfg.n_pools)
		return 0;
	sreq_build(s, spec, &sr);
	bindings = kn_xcalloc((size_t)spec->tasks, sizeof(*bindings));
	rc = kn_sched_place(&s->cluster, &sr.req, bindings, reason,
			    sizeof(reason));
	if (rc == 0)
		kn_sched_release(&s->cluster, &sr.req, bindings);
	free(bindings);
	sreq_release(&sr);
	if (rc == 0 || strncmp(reason, KN_SCHED_NEVER, strlen(KN_SCHED_NEVER)))
		return 0;
	return kn_errorf(err, KN_ECONFLICT, "resources",
			 "%s: %s (hold=1 queues it anyway, for nodes to come)",
			 filename ? filename : "job", reason);
}

/* A job just stored joins the queue, or waits for its key's commit. */
static void queue_submitted(struct server *s, struct queued_job *q)
{
	if (s->group_member) {
		/* Queued once the group's commit is on disk. */
		q->next = s->group_queued;
		s->group_queued = q;
		return;
	}
	if (s->idem_open) {
		/* Queued only if the key's transaction commits: its rollback
		   must leave no job behind, nor an id the next one reuses. */
		q->next = s->idem_queued;
		s->idem_queued = q;
		return;
	}
	queue_link(s, q);
	feed_job(s, q->id, "queued", NULL);
	wake_scheduler(s);
}

/*
 * An array's elements after its first (spec, already queued as id): each
 * is its own job with its own copy of the spec, read again from the
 * stored text as a restart would, so no element shares memory.
 */
static void queue_elements(struct server *s, int64_t id,
			   const struct kn_job_row *j, struct kn_job_spec *spec)
{
	spec->array.job_id = id;
	spec->array.index = spec->array.first;
	for (int i = 1; i < spec->array.count; i++) {
		struct kn_job_spec *copy = NULL;
		struct kn_error perr;

		if (parse_spec(s, j->spec_yaml, strlen(j->spec_yaml),
			       j->filename, &copy, &perr) < 0) {
			kn_log(KN_LOG_ERROR, "job %lld: element %d: %s",
			       (long long)(id + i), spec->array.first + i,
			       perr.message);
			continue;
		}
		copy->array.job_id = id;
		copy->array.index = spec->array.first + i;
		workload_add(s, copy);
		queue_submitted(s, queued_new(s, id + i, copy->priority,
					      j->submitted_at, 0, copy,
					      kn_xstrdup(j->owner)));
	}
}

int jobs_submit(struct server *s, const struct caller *c, const char *text,
		size_t len, const char *filename, const char *path,
		int64_t *out_id, struct kn_error *err)
{
	return jobs_submit_fit(s, c, text, len, filename, path, true, NULL,
			       out_id, err);
}

int jobs_submit_fit(struct server *s, const struct caller *c,
		    const char *text, size_t len, const char *filename,
		    const char *path, bool hold, const char *overrides,
		    int64_t *out_id, struct kn_error *err)
{
	struct kn_job_spec *spec = NULL;
	struct kn_job_row j;
	struct kn_audit a;
	json_t *norm, *applied = NULL;
	char *norm_text, *effective = NULL;
	int64_t id = 0;
	int rc;

	rc = kn_job_spec_parse(text, len, filename, &spec, err);
	if (rc == 0 && overrides)
		rc = job_overrides_apply(&spec, overrides, filename,
					 &effective, &applied, err);
	if (rc < 0) {
		kn_job_spec_free(spec);
		return rc;
	}
	rc = executor_check(s, spec, filename, err);
	if (rc == 0)
		rc = caps_check_jobs(s, c,
				     spec->array.count ? spec->array.count : 1,
				     spec->tasks, err);
	if (rc == 0)
		rc = resolve_inputs(spec, path ? path : filename, filename, err);
	if (rc == 0)
		rc = executor_check_inputs(s, spec, filename, err);
	if (rc == 0)
		rc = blobstores_check_job(s, spec, filename, err);
	if (rc == 0 && !hold)
		rc = fit_check(s, spec, filename, err);
	if (rc < 0) {
		kn_job_spec_free(spec);
		free(effective);
		json_decref(applied);
		return rc;
	}
	/* Stored as the file name, so a restart resolves it the same way. */
	if (path)
		filename = path;
	if (!s->exec->ops->places_tasks)
		resolve_workdir(spec, filename);
	norm = kn_job_spec_to_json(spec);
	/* What the submitter changed from the file, for `kiln show`. */
	if (applied)
		json_object_set_new(norm, "overrides", applied);
	norm_text = json_dumps(norm, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(norm);

	memset(&j, 0, sizeof(j));
	j.name = spec->name;
	j.owner = (char *)c->name;
	j.state = KN_JOB_QUEUED;
	j.priority = spec->priority;
	j.tasks = spec->tasks;
	j.filename = (char *)(filename ? filename : "");
	/* Recovery parses this again: with overrides, the spec as applied. */
	j.spec_yaml = effective ? effective : (char *)text;
	j.spec_json = norm_text;
	j.submitted_at = kn_now_ms();
	j.exit_code = -1;
	caller_audit(&a, c, "job.submit", NULL, "ok", NULL); /* the store names job/ID */
	a.detail = spec->name;
	rc = spec->array.count
		     ? kn_store_job_insert_array(s->store, &j, spec->array.first,
						 spec->array.count, &a, &id,
						 err)
		     : kn_store_job_insert(s->store, &j, &a, &id, err);
	free(norm_text);
	if (rc == 0)
		record_revision(s, id, spec);
	if (rc < 0) {
		free(effective);
		kn_job_spec_free(spec);
		return rc;
	}
	workload_add(s, spec);
	queue_submitted(s, queued_new(s, id, spec->priority, j.submitted_at,
				      0, spec, kn_xstrdup(c->name)));
	if (spec->array.count)
		queue_elements(s, id, &j, spec);
	free(effective);
	*out_id = id;
	return 0;
}

struct placed {
	struct queued_job *q;
	struct kn_sched_binding *bindings;
	struct sreq sr;
	int attempt; /* the number the bind gives the new attempt */
};

/*
 * For a replica of a deployment with spread: per node, the tasks of its
 * other replicas, running or placed earlier this turn (pl[0..np)), so the
 * scheduler spreads replicas and not only one gang's tasks. NULL for any
 * other job.
 */
static int *spread_group_placed(struct server *s, const struct queued_job *q,
				const struct kn_sched_request *req,
				const struct placed *pl, size_t np)
{
	const void *group;
	int *counts;

	if (!req->spread_key)
		return NULL;
	group = job_hooks_spread_group(s->hooks, q->id);
	if (!group)
		return NULL;
	counts = kn_xcalloc(s->cluster.n_nodes, sizeof(*counts));
	for (const struct run *r = s->runs; r; r = r->next)
		if (r->job_id != q->id && !r->stopping &&
		    job_hooks_spread_group(s->hooks, r->job_id) == group)
			for (int t = 0; t < r->n_tasks; t++)
				counts[r->bindings[t].node]++;
	for (size_t k = 0; k < np; k++)
		if (job_hooks_spread_group(s->hooks, pl[k].q->id) == group)
			for (int t = 0; t < pl[k].q->spec->tasks; t++)
				counts[pl[k].bindings[t].node]++;
	return counts;
}

/* Commit the bindings of one turn, then start the shims. */
static int bind_placed(struct server *s, struct placed *pl, size_t n,
		       int64_t now)
{
	struct kn_error err;
	int *ports = kn_xcalloc(n ? n : 1, sizeof(int));
	int rc;

	rc = kn_store_begin(s->store, &err);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		struct queued_job *q = pl[i].q;
		struct kn_job_row j;
		struct kn_attempt_row a;

		memset(&j, 0, sizeof(j));
		rc = kn_store_job_get(s->store, q->id, &j, &err);
		if (rc < 0)
			break;
		j.state = KN_JOB_RUNNING;
		j.attempts++;
		if (!j.started_at)
			j.started_at = now;
		free(j.reason);
		j.reason = NULL;
		rc = kn_store_job_update(s->store, &j, NULL, &err);
		memset(&a, 0, sizeof(a));
		a.job_id = q->id;
		a.number = j.attempts;
		a.state = KN_JOB_RUNNING;
		a.started_at = now;
		a.exit_code = -1;
		if (rc == 0)
			rc = kn_store_attempt_put(s->store, &a, &err);
		ports[i] = free_port();
		for (int t = 0; rc == 0 && t < q->spec->tasks; t++) {
			struct kn_task_row tr;
			char devs[256];
			char *dir = task_dir_path(s, q->id, j.attempts, t);

			devices_text(&pl[i].bindings[t], devs, sizeof(devs));
			memset(&tr, 0, sizeof(tr));
			tr.job_id = q->id;
			tr.attempt = j.attempts;
			tr.rank = t;
			tr.node = s->nodes[pl[i].bindings[t].node].name;
			tr.devices = devs;
			tr.gpu_milli = pl[i].bindings[t].milli_per_device;
			tr.task_dir = dir;
			tr.state = KN_TASK_RUNNING;
			tr.started_at = now;
			tr.exit_code = -1;
			tr.master_port = ports[i];
			rc = kn_store_task_put(s->store, &tr, &err);
			free(dir);
		}
		pl[i].attempt = j.attempts;
		kn_job_row_release(&j);
	}
	rc = core_store_end(s->store, rc, &err);
	if (rc < 0) {
		kn_log(KN_LOG_ERROR, "binding jobs failed: %s", err.message);
		for (size_t i = 0; i < n; i++)
			kn_sched_release(&s->cluster, &pl[i].sr.req,
					 pl[i].bindings);
		free(ports);
		return rc;
	}
	for (size_t i = 0; i < n; i++) {
		struct queued_job *q = pl[i].q, **link = NULL;
		struct run *r;
		/* The run takes over the spec from the queue entry. */
		r = run_new(s, q->id, pl[i].attempt, q->spec, q->owner);
		q->spec = NULL;
		q->owner = NULL;
		r->submitted_at = q->submitted_at;
		r->started_at = now;
		r->master_port = ports[i];
		feed_job(s, q->id, "running", NULL);
		metrics_job_placed(s, q->priority, now - q->submitted_at);
		memcpy(r->bindings, pl[i].bindings,
		       (size_t)r->n_tasks * sizeof(*r->bindings));
		sync_restore_then_launch(s, r);
		queue_find(s, q->id, &link);
		*link = q->next;
		s->queue_len--;
		queued_free(q);
	}
	free(ports);
	return 0;
}

static bool evictions_in_flight(struct server *s)
{
	for (struct run *r = s->runs; r; r = r->next)
		if (r->evicting)
			return true;
	return false;
}

/*
 * q does not fit: evict the cheapest set of lower-priority preemptible
 * jobs that makes room, if there is one. Returns true when it did.
 */
static bool preempt_for(struct server *s, struct queued_job *q,
			const struct kn_sched_request *req)
{
	struct kn_sched_victim *cands;
	size_t n = 0, *victims, n_victims = 0;
	bool done = false;

	for (struct run *r = s->runs; r; r = r->next)
		n++;
	cands = kn_xcalloc(n ? n : 1, sizeof(*cands));
	victims = kn_xcalloc(n ? n : 1, sizeof(*victims));
	n = 0;
	for (struct run *r = s->runs; r; r = r->next) {
		if (r->stopping)
			continue;
		cands[n].job_id = r->job_id;
		cands[n].priority = r->spec->priority;
		cands[n].preemptible = r->spec->preemptible;
		cands[n].started_at = r->started_at;
		cands[n].req = &r->req;
		cands[n].bindings = r->bindings;
		n++;
	}
	if (kn_sched_find_victims(&s->cluster, req, q->priority, cands, n,
				  victims, &n_victims) == 0) {
		char why[128];
		snprintf(why, sizeof(why),
			 "preempted for job %lld (priority %d)", (long long)q->id,
			 q->priority);
		for (size_t i = 0; i < n_victims; i++) {
			struct kn_error err;
			if (jobs_evict(s, NULL, cands[victims[i]].job_id, -1, why,
				       &err) < 0)
				kn_log(KN_LOG_WARN, "%s", err.message);
		}
		snprintf(q->reason, sizeof(q->reason),
			 "waiting for %zu lower-priority job%s to be preempted",
			 n_victims, n_victims == 1 ? "" : "s");
		done = true;
	}
	KN_FREE_ALL(cands, victims);
	return done;
}

/*
 * Arrays with a parallel limit: how many of each one's elements run or
 * were placed this turn. A turn sees few arrays, so a list will do.
 */
struct array_slots {
	int64_t *ids;
	int *used;
	size_t n;
};

static int *array_used(struct array_slots *a, int64_t id)
{
	for (size_t i = 0; i < a->n; i++)
		if (a->ids[i] == id)
			return &a->used[i];
	a->ids = kn_xrealloc(a->ids, (a->n + 1) * sizeof(*a->ids));
	a->used = kn_xrealloc(a->used, (a->n + 1) * sizeof(*a->used));
	a->ids[a->n] = id;
	a->used[a->n] = 0;
	return &a->used[a->n++];
}

static void array_slots_count(struct server *s, struct array_slots *a)
{
	memset(a, 0, sizeof(*a));
	for (struct run *r = s->runs; r; r = r->next)
		if (r->spec->array.parallel)
			(*array_used(a, r->spec->array.job_id))++;
}

/* Whether q is an element its array's limit holds back this turn. */
static bool array_full(const struct server *s, struct array_slots *a,
		       struct queued_job *q)
{
	const struct kn_job_array *arr = &q->spec->array;

	/* Its engine keeps the limit (sbatch --array=...%P). */
	if (s->exec->ops->runs_arrays)
		return false;
	if (!arr->parallel || *array_used(a, arr->job_id) < arr->parallel)
		return false;
	snprintf(q->reason, sizeof(q->reason),
		 "waiting: array %lld runs %d elements at once, its limit",
		 (long long)arr->job_id, arr->parallel);
	return true;
}

/*
 * The shapes that found no room this turn: a job asking for the same as
 * one of them (kn_sched_request_same), at the same priority (which
 * preemption depends on), waits for the same reason without being tried
 * again. A queue of thousands of alike jobs behind full GPUs so costs a
 * turn one placement per shape, not one per job: each start, which
 * comes with a turn, no longer tries the whole queue. Capped so that a
 * queue of all different shapes costs no more than trying each.
 */
#define TURN_SHAPES_MAX 32

struct no_room {
	struct sreq sr;
	int priority;
	char reason[256];
};

/*
 * What a job waiting for its victims to stop is promised this turn
 * (kn_sched_place_after), charged to the cluster until the turn's
 * placements are made: the jobs behind it start on what it does not
 * need, and none takes what it does.
 */
struct promise {
	struct queued_job *q;
	struct sreq sr;
	struct kn_sched_binding *bindings;
};

struct turn {
	int64_t now, next_wake;
	struct kn_sched_packing packing;
	struct placed *pl;
	size_t np;
	struct array_slots slots;
	struct no_room shapes[TURN_SHAPES_MAX];
	size_t n_shapes;
	struct promise promise;
};

/* q waits while lower-priority jobs are preempted for the job holder. */
static void say_behind(struct queued_job *q, int64_t holder)
{
	snprintf(q->reason, sizeof(q->reason),
		 "waiting behind job %lld, for which lower-priority jobs are "
		 "being preempted",
		 (long long)holder);
}

static const struct no_room *no_room_find(const struct turn *t,
					  const struct queued_job *q,
					  const struct kn_sched_request *req)
{
	if (q->preempting)
		return NULL;
	for (size_t i = 0; i < t->n_shapes; i++)
		if (t->shapes[i].priority == q->priority &&
		    kn_sched_request_same(&t->shapes[i].sr.req, req))
			return &t->shapes[i];
	return NULL;
}

/* Keep q's request (taken from *sr) as a shape without room. */
static bool no_room_keep(struct turn *t, const struct queued_job *q,
			 struct sreq *sr)
{
	struct no_room *n;

	if (t->n_shapes == TURN_SHAPES_MAX || q->preempting)
		return false;
	n = &t->shapes[t->n_shapes++];
	n->sr = *sr;
	n->priority = q->priority;
	snprintf(n->reason, sizeof(n->reason), "%s", q->reason);
	return true;
}

/* The running jobs being evicted: what a promise counts as gone. */
static size_t evicting_runs(struct server *s, struct kn_sched_victim **out)
{
	size_t n = 0;

	for (struct run *r = s->runs; r; r = r->next)
		n += r->evicting;
	*out = kn_xcalloc(n ? n : 1, sizeof(**out));
	n = 0;
	for (struct run *r = s->runs; r; r = r->next)
		if (r->evicting) {
			(*out)[n].job_id = r->job_id;
			(*out)[n].req = &r->req;
			(*out)[n++].bindings = r->bindings;
		}
	return n;
}

/* Promise q, whose victims are stopping, what it will take (p's request
   and bindings move to the promise); false when none can be made. */
static bool promise_make(struct server *s, struct turn *t,
			 struct queued_job *q, struct placed *p)
{
	struct kn_sched_victim *going;
	size_t n = evicting_runs(s, &going);
	int rc = kn_sched_place_after(&s->cluster, &p->sr.req, going, n,
				      p->bindings);

	free(going);
	if (rc < 0)
		return false;
	kn_sched_charge(&s->cluster, &p->sr.req, p->bindings);
	t->promise.q = q;
	t->promise.sr = p->sr;
	t->promise.bindings = p->bindings;
	return true;
}

static void promise_release(struct server *s, struct turn *t)
{
	if (!t->promise.q)
		return;
	kn_sched_release(&s->cluster, &t->promise.sr.req, t->promise.bindings);
	free(t->promise.bindings);
	sreq_release(&t->promise.sr);
}

/* q found no room; whether it must hold every job behind it. */
static bool turn_no_room(struct server *s, struct turn *t,
			 struct queued_job *q, struct placed *p)
{
	bool hold = false;

	if (!strncmp(q->reason, KN_SCHED_NEVER, strlen(KN_SCHED_NEVER))) {
		/* It says why better than a wait behind another would. */
	} else if (t->promise.q) {
		say_behind(q, t->promise.q->id);
	} else {
		if (q->preempting && evictions_in_flight(s)) {
			snprintf(q->reason, sizeof(q->reason),
				 "waiting for preempted jobs to stop");
			hold = true;
		} else {
			q->preempting = preempt_for(s, q, &p->sr.req);
			hold = q->preempting;
		}
	}
	if (hold && promise_make(s, t, q, p)) {
		memset(p, 0, sizeof(*p));
		return false;
	}
	free(p->bindings);
	if (hold || !no_room_keep(t, q, &p->sr))
		sreq_release(&p->sr);
	memset(p, 0, sizeof(*p));
	return hold;
}

/* Try q this turn: placed into t->pl, or its reason says why not.
   Returns true when every job behind q must wait for it. */
static bool turn_try(struct server *s, struct turn *t, struct queued_job *q)
{
	struct placed *p = &t->pl[t->np];
	const struct no_room *same;
	int *spread_placed;
	double decide_began;
	int rc;

	if (q->not_before > t->now) {
		char in[32];
		kn_format_duration(q->not_before - t->now, in, sizeof(in));
		snprintf(q->reason, sizeof(q->reason),
			 q->disk_wait ? "waiting for disk space to start "
					"(next try in %s)"
				      : "waiting for retry backoff (%s left)",
			 in);
		if (!t->next_wake || q->not_before < t->next_wake)
			t->next_wake = q->not_before;
		return false;
	}
	if (array_full(s, &t->slots, q))
		return false;
	sreq_build(s, q->spec, &p->sr);
	same = no_room_find(t, q, &p->sr.req);
	if (same) {
		snprintf(q->reason, sizeof(q->reason), "%s", same->reason);
		if (t->promise.q && strncmp(same->reason, KN_SCHED_NEVER,
					    strlen(KN_SCHED_NEVER)))
			say_behind(q, t->promise.q->id);
		sreq_release(&p->sr);
		memset(p, 0, sizeof(*p));
		return false;
	}
	p->bindings = kn_xcalloc((size_t)q->spec->tasks, sizeof(*p->bindings));
	spread_placed = spread_group_placed(s, q, &p->sr.req, t->pl, t->np);
	p->sr.req.spread_placed = spread_placed;
	t->packing.seed = (uint64_t)q->id;
	p->sr.req.packing = &t->packing;
	decide_began = metrics_clock();
	rc = kn_sched_place(&s->cluster, &p->sr.req, p->bindings, q->reason,
			    sizeof(q->reason));
	metrics_placement_decided(s, metrics_clock() - decide_began, rc == 0);
	/* Of this turn only: the run keeps no pointer to them. */
	p->sr.req.spread_placed = NULL;
	p->sr.req.packing = NULL;
	free(spread_placed);
	if (rc < 0)
		return turn_no_room(s, t, q, p);
	p->q = q;
	q->reason[0] = '\0';
	q->preempting = false;
	if (q->spec->array.parallel)
		(*array_used(&t->slots, q->spec->array.job_id))++;
	t->np++;
	return false;
}

void jobs_tick(void *arg)
{
	struct server *s = arg;
	struct kn_sched_queue_entry *order;
	struct queued_job **ix;
	struct turn *t;
	size_t n = 0;

	if (!s->queue)
		return;
	t = kn_xcalloc(1, sizeof(*t));
	t->now = kn_now_ms();
	t->packing.policy = s->policy;
	t->packing.workload = s->shapes;
	t->packing.n_workload = s->n_shapes;
	array_slots_count(s, &t->slots);
	ix = queue_index(s);
	order = kn_xcalloc(s->queue_len, sizeof(*order));
	t->pl = kn_xcalloc(s->queue_len, sizeof(*t->pl));
	fair_advance(s, t->now);
	for (struct queued_job *q = s->queue; q; q = q->next) {
		order[n].job_id = q->id;
		order[n].priority = q->priority;
		order[n].usage = owner_usage(s, q->owner);
		order[n].submitted_at = q->submitted_at;
		n++;
	}
	kn_sched_sort_queue(order, n);
	for (size_t i = 0; i < n; i++) {
		struct queued_job *q = queue_lookup(s, ix, order[i].job_id);

		if (!turn_try(s, t, q))
			continue;
		/* No promise could be made: what the victims free is for
		   q, and nothing behind it jumps in. */
		for (size_t k = i + 1; k < n; k++)
			say_behind(queue_lookup(s, ix, order[k].job_id), q->id);
		break;
	}
	promise_release(s, t);
	if (t->np)
		bind_placed(s, t->pl, t->np, t->now);
	if (s->exec->ops->flush)
		s->exec->ops->flush(s->exec);
	for (size_t i = 0; i < t->np; i++) {
		free(t->pl[i].bindings);
		sreq_release(&t->pl[i].sr);
	}
	for (size_t i = 0; i < t->n_shapes; i++)
		sreq_release(&t->shapes[i].sr);
	if (t->next_wake)
		kn_timer_arm(s->tick_timer, t->next_wake - t->now);
	KN_FREE_ALL(t->pl, t->slots.ids, t->slots.used, t, order, ix);
}
