/*
 * Deployments: model servers kept running as N replicas, their probes,
 * rollouts, gateway keys, and the configuration the gateway reads.
 *
 * A replica is a job. The deployment's spec is written out as a one-task
 * Job spec (kn_job_spec_to_input_text) and submitted like any other, so
 * the queue, placement, devices, the shim, logs and re-adoption after a
 * server restart are the jobs' own. What makes it a replica is the row
 * tying (deployment, index) to its current job, and its job hooks:
 * a replica's tasks get KILN_PORT (the attempt's port, chosen free on
 * loopback when it is bound) and KILN_MODEL_DIR, and an attempt that ends
 * for any reason but a cancel is queued again after backoff. The
 * alternative, a second supervisor beside the job machinery, would have
 * had to re-learn everything the job core knows about crashes and restarts.
 *
 * Probes run on the loop's HTTP client, at most one of each kind in
 * flight per replica; an answer about an attempt that is no longer the
 * replica's is dropped. Readiness decides `ready` in the gateway's
 * configuration; liveness failing failure_threshold times in a row stops
 * the attempt, which then restarts as any exit does. Liveness starts only
 * once the attempt has been ready, so a model that takes minutes to load
 * is not killed for it (what Kubernetes needs a startup probe for).
 *
 * A rollout (a restart, or a re-deploy with a new spec) replaces one
 * replica at a time: once every other replica is ready, the old job is
 * cancelled, a new one submitted, and the next replica waits until the new
 * one is ready. Its position is kept in the store, so a server restart
 * resumes it.
 *
 * None of this runs under an executor that runs deployments itself (its
 * ops' deployments: Kubernetes' Deployment and Service, which the
 * cluster runs, rolls out and probes); the store, the owner checks, the
 * audit and the gateway's keys are the same.
 *
 * Invariants: an API change is in the store before memory has it (and
 * before the answer); a replica's job belongs to its deployment's owner;
 * only this file knows which jobs are replicas.
 */
#include "deploysvc.h"
#include "service.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "registry/registry.h"

/*
 * A surge replica retires the old one only once the gateway routes to it
 * alone; a gateway that has not polled for this long is taken to be gone,
 * not waited for.
 */
#define GATEWAY_GONE_MS 60000


/* ---- small helpers ---- */

void deploy_reply_msg(struct kn_http_req *req, enum kn_errcode code,
		      const char *field, const char *msg)
{
	struct kn_error err;

	kn_errorf(&err, code, field, "%s", msg);
	kn_http_reply_error(req, &err);
}



struct deploy_state *deploy_state_of(struct server *s)
{
	return service_state(s, &deploy_service);
}

struct deployment *deploy_find(struct deploy_state *d, const char *name)
{
	for (struct deployment *p = d->list; p; p = p->next)
		if (!strcmp(p->row.name, name))
			return p;
	return NULL;
}

int64_t deploy_count_owned(struct server *s, const char *owner)
{
	int64_t n = 0;

	for (struct deployment *p = deploy_state_of(s)->list; p; p = p->next)
		n += !strcmp(p->row.owner, owner);
	return n;
}

static void deployment_free(struct deployment *p)
{
	if (!p)
		return;
	kn_deployment_row_release(&p->row);
	kn_deployment_spec_free(p->spec);
	for (int i = 0; i < p->n_reps; i++)
		free(p->reps[i].model_dir);
	KN_FREE_ALL(p->reps, p);
}

static void ensure_slots(struct deployment *p, int n)
{
	if (n <= p->n_reps)
		return;
	p->reps = kn_xrealloc(p->reps, (size_t)n * sizeof(*p->reps));
	memset(p->reps + p->n_reps, 0,
	       (size_t)(n - p->n_reps) * sizeof(*p->reps));
	p->n_reps = n;
}

/*
 * Ready as far as anyone outside is told: its run is up and the probe
 * verdict is about that very attempt (a new attempt starts not ready even
 * before the deploy_tick has noticed it).
 */
bool deploy_replica_ready(const struct replica *r, const struct job_view *v)
{
	return v->serving && r->ready && r->attempt == v->attempt;
}

/* deploy_replica_ready for the replica's job as it is now. */
static bool replica_ready_now(struct server *s, const struct replica *r)
{
	struct job_view v;

	core_job_view(s, r->job_id, &v);
	return deploy_replica_ready(r, &v);
}

/* Whether job id is queued or running. */
static bool job_active(struct server *s, int64_t id)
{
	struct job_view v;

	return id && core_job_view(s, id, &v) != JOB_GONE;
}

/* The zone label of the node the running job is bound to, or "". */
const char *deploy_node_zone(struct server *s, const struct job_view *v)
{
	const char *zone = core_node_label(s, v->node, "zone");

	return zone ? zone : "";
}

/* Jobs of a deployment act as its owner (see the header comment). */
static void owner_caller(const struct deployment *p, struct caller *c)
{
	memset(c, 0, sizeof(*c));
	kn_strlcpy(c->name, p->row.owner, sizeof(c->name));
	c->role = KN_ROLE_USER;
}

/* The owner, or an operator, may change a deployment. */
static int may_change(const struct deployment *p, const struct caller *c,
		      struct kn_error *err)
{
	if (caller_owns(c, p->row.owner))
		return 0;
	return kn_errorf(err, KN_EPERM, NULL,
			 "deployment %s belongs to %s; a user may change only "
			 "its own deployments",
			 p->row.name, p->row.owner);
}

void deploy_arm(struct deploy_state *d, int64_t ms)
{
	if (!kn_timer_pending(d->timer))
		kn_timer_arm(d->timer, ms);
}

/* ---- the store ---- */

int deploy_save(struct deploy_state *d, struct deployment *p,
		const struct kn_audit *a, struct kn_error *err)
{
	return kn_store_deployment_put(core_store(d->s), &p->row, a, err);
}

static int save_replica(struct deploy_state *d, struct deployment *p, int i,
			int64_t job_id, struct kn_error *err)
{
	struct kn_replica_row row = {
		.deployment = p->row.name, .replica = i, .job_id = job_id};

	return kn_store_replica_put(core_store(d->s), &row, err);
}

/* ---- replicas as jobs ---- */

/* Submit replica i's job from the deployment's spec. */
static int start_replica(struct deploy_state *d, struct deployment *p, int i,
			 struct kn_error *err)
{
	struct caller c;
	char name[80];
	char *text;
	int64_t id = 0;
	int rc;

	/* Job names are 63 characters at most: the index always fits. */
	snprintf(name, sizeof(name), "%.*s-%d", 59, p->row.name, i);
	text = kn_job_spec_to_input_text(&p->spec->job, name);
	owner_caller(p, &c);
	rc = jobs_submit(d->s, &c, text, strlen(text), p->row.filename,
			 p->row.filename[0] == '/' ? p->row.filename : NULL, &id, err);
	free(text);
	if (rc < 0)
		return rc;
	rc = save_replica(d, p, i, id, err);
	if (rc < 0) {
		struct kn_error cerr;
		jobs_cancel(d->s, &c, id, &cerr);
		return rc;
	}
	free(p->reps[i].model_dir);
	memset(&p->reps[i], 0, sizeof(p->reps[i]));
	p->reps[i].job_id = id;
	/* Its own copy: a later rollout must not change what it serves
	   when it restarts before its turn. */
	p->reps[i].model_dir = kn_xstrdup(p->row.model_dir);
	return 0;
}

/* Cancel replica i's job (it is no longer the replica's). */
static void stop_replica(struct deploy_state *d, struct deployment *p, int i)
{
	struct kn_error err;
	struct caller c;
	int64_t id = p->reps[i].job_id;

	if (!id)
		return;
	owner_caller(p, &c);
	p->reps[i].job_id = 0;
	p->reps[i].ready = false;
	if (job_active(d->s, id) && jobs_cancel(d->s, &c, id, &err) < 0)
		kn_log(KN_LOG_WARN, "deployment %s replica %d: %s", p->row.name, i,
		       err.message);
}


/*
 * Replicas beyond the wanted count: stopped and forgotten, but for surge
 * slots still meant for a wanted replica.
 */
static void trim(struct deploy_state *d, struct deployment *p)
{
	struct kn_error err;
	int keep = p->row.replicas;

	for (int i = p->row.replicas; i < p->n_reps; i++) {
		struct replica *r = &p->reps[i];

		if (r->surge && r->surge_for < p->row.replicas && r->job_id) {
			keep = i + 1;
			continue;
		}
		if (r->job_id) {
			stop_replica(d, p, i);
			if (kn_store_replica_delete(core_store(d->s), p->row.name, i,
						    &err) < 0)
				kn_log(KN_LOG_ERROR, "deployment %s: %s",
				       p->row.name, err.message);
		}
		free(r->model_dir);
		memset(r, 0, sizeof(*r));
	}
	if (p->n_reps > keep)
		p->n_reps = keep;
}

/* Replica i has a ready surge replica taking its place. */
bool deploy_retiring(const struct deployment *p, int i)
{
	for (int k = p->row.replicas; k < p->n_reps; k++)
		if (p->reps[k].surge && p->reps[k].surge_for == i &&
		    p->reps[k].surge_ready)
			return true;
	return false;
}

/* Probes in flight for slot from are about slot to now. */
static void probes_move(struct deploy_state *d, const struct deployment *p,
			int from, int to)
{
	for (struct probe *pr = d->probes; pr; pr = pr->next)
		if (pr->replica == from && !strcmp(pr->deployment, p->row.name))
			pr->replica = to;
}

/*
 * Surge slot k: once it is ready, the gateway config lists the replica it
 * is for as not ready (retiring), so calls go to the surge replica alone;
 * once a gateway has fetched that config and then fetched again (so it
 * has taken the first in: it polls one at a time), or no gateway polls,
 * the old replica is cancelled and slot k's job takes its place.
 */
static void surge_step(struct deploy_state *d, struct deployment *p, int k)
{
	struct replica *r = &p->reps[k];
	int t = r->surge_for;
	int64_t now = kn_now_ms(), old = p->reps[t].job_id;
	struct kn_error err;

	if (!replica_ready_now(d->s, r)) {
		r->surge_ready = false;
		return;
	}
	if (!r->surge_ready) {
		r->surge_ready = true;
		r->surge_mark = d->config_fetches;
	}
	if (d->config_fetches < r->surge_mark + 2 &&
	    now - d->config_fetched_at < GATEWAY_GONE_MS)
		return;
	if (save_replica(d, p, t, r->job_id, &err) < 0) {
		kn_log(KN_LOG_ERROR, "deployment %s replica %d: %s", p->row.name,
		       t, err.message);
		return;
	}
	stop_replica(d, p, t);
	free(p->reps[t].model_dir);
	p->reps[t] = *r;
	p->reps[t].surge = p->reps[t].surge_ready = false;
	memset(r, 0, sizeof(*r));
	probes_move(d, p, k, t);
	if (kn_store_replica_delete(core_store(d->s), p->row.name, k, &err) < 0)
		kn_log(KN_LOG_ERROR, "deployment %s: %s", p->row.name, err.message);
	while (p->n_reps > p->row.replicas && !p->reps[p->n_reps - 1].job_id)
		p->n_reps--;
	kn_log(KN_LOG_INFO, "deployment %s replica %d: job %lld took the "
	       "place of job %lld", p->row.name, t, (long long)p->reps[t].job_id,
	       (long long)old);
	feed_publish(d->s, "deployment.replica",
		     json_pack("{s:s, s:i, s:s, s:I, s:I}", "deployment",
			       p->row.name, "replica", t, "state", "replaced",
			       "job", (json_int_t)p->reps[t].job_id,
			       "retired_job", (json_int_t)old));
}

/* Bring a deployment to its wanted replicas and move its rollout on. */
void deploy_reconcile(struct deploy_state *d, struct deployment *p)
{
	struct kn_error err;

	trim(d, p);
	ensure_slots(p, p->row.replicas);
	for (int i = p->row.replicas; i < p->n_reps; i++)
		if (p->reps[i].surge)
			surge_step(d, p, i);
	for (int i = 0; i < p->row.replicas; i++) {
		/* Scaled up over a surge slot: it is a replica now. */
		p->reps[i].surge = false;
		if (job_active(d->s, p->reps[i].job_id))
			continue;
		/* No job yet, or its job ended for good (cancelled by hand). */
		if (start_replica(d, p, i, &err) < 0)
			kn_log(KN_LOG_ERROR, "deployment %s replica %d: %s",
			       p->row.name, i, err.message);
	}
	while (p->row.rollout_next >= 0) {
		struct replica *r;
		int i = p->row.rollout_next;

		if (i >= p->row.replicas) {
			p->row.rollout_next = -1;
		} else {
			r = &p->reps[i];
			if (r->replacing &&
			    !replica_ready_now(d->s, r))
				return; /* the new one is not serving yet */
			if (!r->replacing) {
				/* One unavailable at a time: the others must
				 * be serving before this one stops. */
				for (int k = 0; k < p->row.replicas; k++)
					if (k != i &&
					    !replica_ready_now(d->s, &p->reps[k]))
						return;
				stop_replica(d, p, i);
				if (start_replica(d, p, i, &err) < 0) {
					kn_log(KN_LOG_ERROR,
					       "deployment %s replica %d: %s",
					       p->row.name, i, err.message);
					return;
				}
				p->reps[i].replacing = true;
				kn_log(KN_LOG_INFO,
				       "deployment %s: rolling replica %d",
				       p->row.name, i);
				return;
			}
			r->replacing = false;
			p->row.rollout_next = i + 1 < p->row.replicas ? i + 1 : -1;
		}
		if (deploy_save(d, p, NULL, &err) < 0)
			kn_log(KN_LOG_ERROR, "deployment %s: %s", p->row.name,
			       err.message);
		if (p->row.rollout_next < 0)
			feed_publish(d->s, "deployment.rollout",
				     json_pack("{s:s, s:s}", "deployment",
					       p->row.name, "state", "done"));
	}
}

/* ---- under an executor that runs deployments itself ---- */

const struct kn_deploy_ops *deploy_engine(struct server *s)
{
	return core_executor(s)->ops->deployments;
}

/*
 * The engine runs the deployment (for Kubernetes, src/kube/deployments.c):
 * no jobs, no probes, no rollout of kiln's; the executor writes what
 * differs and reads the status back.
 */
static void engine_want(struct server *s, struct deployment *p,
			bool spec_changed)
{
	struct kn_error err;

	if (deploy_engine(s)->set(core_executor(s), p->spec, p->row.replicas,
				  p->row.generation, spec_changed, &err) < 0)
		kn_log(KN_LOG_ERROR, "deployment %s: %s", p->row.name, err.message);
}

/* p changed (spec_changed: its spec, else its count or position): the
   engine is told, or the replicas are reconciled on the next turn. */
static void deploy_changed(struct server *s, struct deployment *p,
			   bool spec_changed)
{
	if (deploy_engine(s)) {
		engine_want(s, p, spec_changed);
	} else {
		deploy_reconcile(deploy_state_of(s), p);
		deploy_arm(deploy_state_of(s), 0);
	}
}

static const char *pod_state(json_t *pod)
{
	const char *reason = json_string_value(json_object_get(pod, "reason"));
	const char *phase = json_string_value(json_object_get(pod, "phase"));

	if (json_is_true(json_object_get(pod, "ready")))
		return "ready";
	if (reason && !strcmp(reason, "terminating"))
		return "stopping";
	if (phase && !strcmp(phase, "Pending"))
		return "pending";
	return "starting";
}

/* A new reference to v, or null when v is absent. */
static json_t *ref_or_null(json_t *v)
{
	return v ? json_incref(v) : json_null();
}

/* kiln's replica view of the Deployment's pods (st: its status). */
json_t *deploy_engine_replicas_json(json_t *st)
{
	json_t *list = json_array(), *pod;
	size_t i;

	json_array_foreach(json_object_get(st, "pods"), i, pod)
		json_array_append_new(
			list,
			json_pack("{s:i, s:O, s:s, s:O, s:O, s:O, s:o, s:n, "
				  "s:O}",
				  "replica", (int)i, "pod",
				  json_object_get(pod, "name"), "state",
				  pod_state(pod), "ready",
				  json_object_get(pod, "ready"), "restarts",
				  json_object_get(pod, "restarts"), "node",
				  json_object_get(pod, "node"), "zone",
				  ref_or_null(json_object_get(pod,
								      "zone")),
				  "address", "reason",
				  json_object_get(pod, "reason")));
	return list;
}

/* ---- start, stop, the job hooks ---- */

/* The deployment of a stored row, which it takes: row is left empty. */
static struct deployment *deployment_from_row(struct kn_deployment_row *row,
					      struct kn_model_presets *presets,
					      struct kn_error *err)
{
	struct deployment *p;
	struct kn_deployment_spec *spec = NULL;

	if (kn_deployment_spec_parse(row->spec_yaml, strlen(row->spec_yaml),
				     row->filename, presets, &spec, err) < 0)
		return NULL;
	p = kn_xcalloc(1, sizeof(*p));
	p->row = *row;
	memset(row, 0, sizeof(*row));
	if (!p->row.filename)
		p->row.filename = kn_xstrdup("");
	p->spec = spec;
	return p;
}

/* Load the deployments and deploy_arm their deploy_reconcile. */
static int deploy_start(struct server *s, struct kn_error *err)
{
	struct deploy_state *d = kn_xcalloc(1, sizeof(*d));
	struct kn_deployment_row *rows = NULL;
	struct kn_replica_row *reps = NULL;
	size_t n = 0, nr = 0;
	int rc;

	d->s = s;
	service_state_set(s, &deploy_service, d);
	d->timer = kn_timer_new(core_loop(s), deploy_tick, d);
	d->traffic = kn_traffic_new(KN_TRAFFIC_DEFAULT_WINDOW_MS);
	rc = kn_model_presets_load_shipped(&d->presets, err);
	if (rc == 0)
		rc = kn_store_deployment_list(core_store(s), &rows, &n, err);
	if (rc == 0)
		rc = kn_store_replica_list(core_store(s), &reps, &nr, err);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		struct kn_error perr;
		struct deployment *p =
			deployment_from_row(&rows[i], d->presets, &perr);

		if (!p) {
			kn_log(KN_LOG_ERROR, "deployment %s: stored spec no "
			       "longer parses: %s", rows[i].name, perr.message);
			continue;
		}
		for (size_t k = 0; k < nr; k++) {
			if (strcmp(reps[k].deployment, p->row.name) != 0)
				continue;
			ensure_slots(p, reps[k].replica + 1);
			p->reps[reps[k].replica].job_id = reps[k].job_id;
			/* A rollout under way: if the replica it reached runs
			 * a job newer than the rollout, wait for that one
			 * rather than replace it again. */
			if (reps[k].replica == p->row.rollout_next) {
				struct kn_job_row j;
				struct kn_error jerr;

				memset(&j, 0, sizeof(j));
				if (kn_store_job_get(core_store(s), reps[k].job_id, &j,
						     &jerr) == 0 &&
				    j.submitted_at >= p->row.updated_at)
					p->reps[reps[k].replica].replacing = true;
				kn_job_row_release(&j);
			}
			/* Replicas a rollout has reached serve the current
			   model; which one the others were given is not
			   kept across a restart. */
			if (p->row.rollout_next < 0 ||
			    reps[k].replica < p->row.rollout_next ||
			    p->reps[reps[k].replica].replacing)
				p->reps[reps[k].replica].model_dir =
					kn_xstrdup(p->row.model_dir);
		}
		p->next = d->list;
		d->list = p;
	}
	kn_deployment_list_free(rows, n);
	kn_replica_list_free(reps, nr);
	if (rc == 0 && deploy_engine(s)) {
		/* Found again by label: only what differs is written. */
		for (struct deployment *p = d->list; p; p = p->next)
			engine_want(s, p, true);
		deploy_engine(s)->loaded(core_executor(s));
		return 0;
	}
	if (rc == 0 && d->list) {
		kn_log(KN_LOG_INFO, "%zu deployment%s to keep running", n,
		       n == 1 ? "" : "s");
		deploy_arm(d, 0);
	}
	return rc;
}

static void deploy_free(struct server *s)
{
	struct deploy_state *d = deploy_state_of(s);

	if (!d)
		return;
	/* The loop is not running: no answer can come for these. */
	KN_LIST_FREE(d->probes, free);
	KN_LIST_FREE(d->list, deployment_free);
	kn_timer_free(d->timer);
	kn_model_presets_free(d->presets);
	kn_traffic_free(d->traffic);
	free(d);
}

/* The deployment whose replica job_id is, or NULL. */
static const struct deployment *deploy_of(struct server *s, int64_t job_id)
{
	if (!deploy_state_of(s))
		return NULL;
	for (struct deployment *p = deploy_state_of(s)->list; p; p = p->next)
		for (int i = 0; i < p->n_reps; i++)
			if (p->reps[i].job_id == job_id)
				return p;
	return NULL;
}

/* The deployment and slot whose job is job_id, or NULL. */
static struct deployment *slot_of(struct server *s, int64_t job_id, int *slot)
{
	for (struct deployment *p = deploy_state_of(s) ? deploy_state_of(s)->list : NULL; p;
	     p = p->next)
		for (int i = 0; job_id && i < p->n_reps; i++)
			if (p->reps[i].job_id == job_id) {
				*slot = i;
				return p;
			}
	return NULL;
}

int deploy_surge(struct server *s, int64_t job_id, int64_t *surge_job,
		 struct kn_error *err)
{
	int t = -1, k;
	struct deployment *p = slot_of(s, job_id, &t);
	int rc;

	if (!p || t >= p->row.replicas)
		return kn_errorf(err, KN_ENOTFOUND, NULL,
				 "job %lld is no deployment's replica",
				 (long long)job_id);
	for (k = p->row.replicas; k < p->n_reps; k++)
		if (p->reps[k].surge && p->reps[k].surge_for == t) {
			*surge_job = p->reps[k].job_id;
			return 0; /* one is on its way already */
		}
	k = p->n_reps;
	ensure_slots(p, k + 1);
	rc = start_replica(deploy_state_of(s), p, k, err);
	if (rc < 0) {
		p->n_reps = k;
		return rc;
	}
	p->reps[k].surge = true;
	p->reps[k].surge_for = t;
	*surge_job = p->reps[k].job_id;
	kn_log(KN_LOG_INFO, "deployment %s replica %d: surge job %lld to take "
	       "the place of job %lld", p->row.name, t, (long long)*surge_job,
	       (long long)job_id);
	deploy_arm(deploy_state_of(s), 0);
	return 0;
}

int deploy_surge_state(struct server *s, int64_t surge_job, char *why,
		       size_t len)
{
	int k = -1;
	struct deployment *p = slot_of(s, surge_job, &k);
	struct replica *r;
	struct job_view v;

	if (!p || (k >= p->row.replicas && !p->reps[k].surge)) {
		snprintf(why, len, "the surge replica (job %lld) is gone: its "
			 "deployment was deleted or scaled down",
			 (long long)surge_job);
		return -1;
	}
	if (k < p->row.replicas)
		return 1;
	r = &p->reps[k];
	if (core_job_view(s, surge_job, &v) == JOB_GONE) {
		snprintf(why, len, "the surge replica of deployment %s (job "
			 "%lld) ended", p->row.name, (long long)surge_job);
		return -1;
	}
	if (v.place == JOB_QUEUED)
		snprintf(why, len, "the surge replica of deployment %s (job "
			 "%lld) is queued: %s", p->row.name, (long long)surge_job,
			 v.reason[0] ? v.reason : "waiting to be placed");
	else if (!deploy_replica_ready(r, &v))
		snprintf(why, len, "the surge replica of deployment %s (job "
			 "%lld) is starting on %s: not ready yet", p->row.name,
			 (long long)surge_job, core_node_name(s, v.node));
	else
		snprintf(why, len, "the surge replica of deployment %s (job "
			 "%lld) is ready on %s; waiting for the gateway to "
			 "route to it", p->row.name, (long long)surge_job,
			 core_node_name(s, v.node));
	return 0;
}

void deploy_surge_cancel(struct server *s, int64_t surge_job)
{
	int k = -1;
	struct deployment *p = slot_of(s, surge_job, &k);
	struct kn_error err;

	if (!p || k < p->row.replicas || !p->reps[k].surge)
		return;
	stop_replica(deploy_state_of(s), p, k);
	if (kn_store_replica_delete(core_store(s), p->row.name, k, &err) < 0)
		kn_log(KN_LOG_ERROR, "deployment %s: %s", p->row.name, err.message);
	free(p->reps[k].model_dir);
	memset(&p->reps[k], 0, sizeof(p->reps[k]));
	while (p->n_reps > p->row.replicas && !p->reps[p->n_reps - 1].job_id)
		p->n_reps--;
}

/* KILN_MODEL_DIR when job_id is a deployment's replica, else NULL. */
static const char *deploy_model_dir(struct server *s, int64_t job_id)
{
	const struct deployment *p = deploy_of(s, job_id);

	if (!p)
		return NULL;
	for (int i = 0; i < p->n_reps; i++)
		if (p->reps[i].job_id == job_id && p->reps[i].model_dir)
			return p->reps[i].model_dir;
	return p->row.model_dir;
}

/* A replica serves on its attempt's port and comes back after any exit. */
static bool hook_model(void *arg, int64_t job_id, struct job_model *out)
{
	const char *dir = deploy_model_dir(arg, job_id);

	if (!dir)
		return false;
	out->dir = dir;
	out->serves = true;
	return true;
}

/* Replicas of one deployment are one spread group. */
static const void *hook_spread_group(void *arg, int64_t job_id)
{
	return deploy_of(arg, job_id);
}

static const struct job_hook_ops deploy_job_hooks = {
	.name = "deployments",
	.model = hook_model,
	.spread_group = hook_spread_group,
};

/* ---- deploy, scale, restart, undeploy ---- */

/* checked_dir: the model's directory, already checked (NULL: check it). */
static int spec_from_body(struct server *s, const char *body, size_t len,
			  const char *file, const char *path,
			  const char *checked_dir,
			  struct kn_deployment_spec **spec, char **model_dir,
			  const char **filename, struct kn_error *err)
{
	int rc;

	if (path && path[0] != '/')
		return kn_errorf(err, KN_EINVAL, "path",
				 "path must be absolute; got \"%s\"", path);
	rc = kn_deployment_spec_parse(body, len, file ? file : "deployment",
				      deploy_state_of(s)->presets, spec, err);
	if (rc < 0)
		return rc;
	if (checked_dir)
		*model_dir = kn_xstrdup(checked_dir);
	else
		rc = deploy_resolve_model_dir(s, *spec, path, model_dir, err);
	if (rc < 0) {
		kn_deployment_spec_free(*spec);
		*spec = NULL;
		return rc;
	}
	/* Stored as the file name, so replicas resolve workdir the same. */
	*filename = path ? path : file ? file : "";
	return 0;
}

/* A normalized spec without its replica count: what a rollout compares. */
static char *spec_identity(const char *spec_json)
{
	json_t *j = json_loads(spec_json, 0, NULL);
	char *text;

	json_object_del(j, "replicas");
	/* Re-validation is the registry's business, not the replicas'. */
	json_object_del(j, "revalidate");
	text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(j);
	return text;
}

/* Whether a spec (normalized JSON) and model differ from p's in more
   than the replica count. */
static bool spec_changed(const struct deployment *p, const char *json_text,
			 const char *model_dir)
{
	char *old = spec_identity(p->row.spec_json);
	char *now_id = spec_identity(json_text);
	bool changed = strcmp(old, now_id) != 0 ||
		       strcmp(p->row.model_dir, model_dir) != 0;

	KN_FREE_ALL(old, now_id);
	return changed;
}

/* The stored spec becomes p's: its texts, model and parsed spec move
   into p (the pointers are left NULL). */
static void deploy_take_spec(struct deployment *p, const char *filename,
			     char **yaml, char **json_text, char **model_dir,
			     struct kn_deployment_spec **spec)
{
	free(p->row.filename);
	p->row.filename = kn_xstrdup(filename);
	free(p->row.spec_yaml);
	p->row.spec_yaml = *yaml;
	*yaml = NULL;
	free(p->row.spec_json);
	p->row.spec_json = *json_text;
	*json_text = NULL;
	free(p->row.model_dir);
	p->row.model_dir = *model_dir;
	*model_dir = NULL;
	kn_deployment_spec_free(p->spec);
	p->spec = *spec;
	*spec = NULL;
}

/* reval_job: the text of the job file revalidate: names, when sent. */
static int apply(struct server *s, const struct caller *c, const char *body,
		 size_t len, const char *file, const char *path,
		 const char *checked_dir, const char *reval_job,
		 struct deployment **out, struct kn_error *err)
{
	struct kn_revalidation_row *reval = NULL;
	struct deploy_state *d = deploy_state_of(s);
	struct kn_deployment_spec *spec = NULL;
	struct kn_deployment_row row;
	struct deployment *p;
	struct kn_audit a;
	const char *filename = NULL;
	char *model_dir = NULL, *json_text = NULL, *yaml = NULL, object[96];
	json_t *norm;
	bool changed = true;
	int64_t now = kn_now_ms();
	int rc;

	rc = spec_from_body(s, body, len, file, path, checked_dir, &spec,
			    &model_dir, &filename, err);
	if (rc < 0)
		return rc;
	/* What cannot render (no image, a GPU model without a product
	   label) is refused before anything is stored. */
	if (deploy_engine(s) &&
	    (rc = deploy_engine(s)->check(core_executor(s), spec, err)) < 0)
		goto out;
	norm = kn_deployment_spec_to_json(spec);
	json_text = json_dumps(norm, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(norm);
	yaml = kn_asprintf("%.*s", (int)len, body);
	snprintf(object, sizeof(object), "deployment/%s", spec->job.name);
	p = deploy_find(d, spec->job.name);
	if (!p && (rc = caps_check(s, c, CAP_DEPLOYMENT, 0, err)) < 0)
		goto out;
	if (p && (rc = may_change(p, c, err)) < 0) {
		core_audit(s, c, "deployment.update", object, "denied",
			   err->message);
		goto out;
	}
	if (p)
		changed = spec_changed(p, json_text, model_dir);
	rc = reval_for_deployment(s, spec->job.name, p ? p->row.owner : c->name,
				  spec, filename, reval_job, &reval, err);
	if (rc < 0)
		goto out;
	memset(&row, 0, sizeof(row));
	row.name = spec->job.name;
	row.owner = p ? p->row.owner : (char *)c->name;
	row.filename = (char *)filename;
	row.spec_yaml = yaml;
	row.spec_json = json_text;
	row.model_dir = model_dir;
	row.replicas = spec->replicas;
	row.generation = p ? p->row.generation + 1 : 1;
	/* A new spec reaches running replicas one at a time. */
	if (!p || deploy_engine(s))
		row.rollout_next = -1;
	else
		row.rollout_next = changed && spec->replicas > 0
					   ? 0
					   : p->row.rollout_next;
	row.created_at = p ? p->row.created_at : now;
	row.updated_at = now;
	caller_audit(&a, c, p ? "deployment.update" : "deployment.create",
		     object, "ok", changed ? NULL : "replicas only");
	rc = kn_store_deployment_put(core_store(s), &row, &a, err);
	if (rc < 0)
		goto out;
	if (!p) {
		p = kn_xcalloc(1, sizeof(*p));
		p->row.name = kn_xstrdup(row.name);
		p->row.owner = kn_xstrdup(c->name);
		p->row.created_at = now;
		p->next = d->list;
		d->list = p;
	}
	deploy_take_spec(p, filename, &yaml, &json_text, &model_dir, &spec);
	p->row.replicas = row.replicas;
	p->row.generation = row.generation;
	p->row.updated_at = now;
	if (row.rollout_next != p->row.rollout_next) {
		for (int i = 0; i < p->n_reps; i++)
			p->reps[i].replacing = false;
		p->row.rollout_next = row.rollout_next;
	}
	reval_deployment_set(s, p->row.name, c, reval);
	reval = NULL;
	feed_publish(s, "deployment.state",
		     json_pack("{s:s, s:s, s:i}", "deployment", p->row.name,
			       "state", row.generation == 1 ? "created"
							    : "updated",
			       "replicas", p->row.replicas));
	deploy_changed(s, p, changed || row.generation == 1);
	*out = p;
out:
	reval_row_free(reval);
	KN_FREE_ALL(yaml, json_text, model_dir);
	kn_deployment_spec_free(spec);
	return rc;
}

int deploy_apply(struct server *s, const struct caller *c, const char *body,
		 size_t len, const char *file, const char *path,
		 const struct deployment **out, struct kn_error *err)
{
	struct deployment *p = NULL;
	int rc = apply(s, c, body, len, file, path, NULL, NULL, &p, err);

	*out = p;
	return rc;
}

/* A deploy of a registry version waits for its check, off the loop. */
struct deploy_wait {
	struct kn_http_req *req; /* the request waiting, or NULL: */
	deploy_applied_cb cb;    /* who waits (deploy_apply_start) */
	void *arg;
	struct caller caller;
	char *body, *file, *path, *reval_job;
	size_t len;
};

/* A copy of what was asked, to apply once the model's files are in. */
static struct deploy_wait *deploy_wait_new(const struct caller *c,
					   const char *body, size_t len,
					   const char *file, const char *path)
{
	struct deploy_wait *w = kn_xcalloc(1, sizeof(*w));

	w->caller = *c;
	w->body = kn_xmalloc(len + 1);
	memcpy(w->body, body, len);
	w->body[len] = '\0';
	w->len = len;
	w->file = file ? kn_xstrdup(file) : NULL;
	w->path = path ? kn_xstrdup(path) : NULL;
	return w;
}

static void deploy_wait_free(struct deploy_wait *w)
{
	KN_FREE_ALL(w->body, w->file, w->path, w->reval_job, w);
}

static void deploy_checked(struct server *s, int rc, const char *dir,
			   int64_t version, const struct kn_error *err,
			   void *arg)
{
	struct deploy_wait *w = arg;
	struct deployment *p = NULL;
	struct kn_error e;

	if (rc == 0 && core_closing(s))
		rc = kn_errorf(&e, KN_EUNAVAIL, NULL,
			       "the server is stopping; deploy again");
	else if (rc < 0)
		e = *err;
	/* An HTTP create (no cb) joins its Idempotency-Key's transaction. */
	if (rc == 0 && !w->cb && idem_begin(s, w->req, &w->caller)) {
		deploy_wait_free(w);
		return;
	}
	if (rc == 0)
		rc = apply(s, &w->caller, w->body, w->len, w->file, w->path,
			   dir, w->reval_job, &p, &e);
	if (rc == 0) {
		/* The alias it follows moved while the check ran. */
		int64_t now = deploy_followed_version(s, p);

		if (now && now != version)
			deploy_follow(s, p);
	}
	if (w->cb) {
		w->cb(s, rc, &e, w->arg);
	} else if (rc < 0) {
		idem_abort(s, w->req);
		kn_http_reply_error(w->req, &e);
	} else {
		idem_reply(s, w->req, &w->caller, p->row.generation == 1 ? 201 : 200,
			   deploy_answer(s, p));
	}
	deploy_wait_free(w);
}

int deploy_apply_start(struct server *s, const struct caller *c,
		       const char *body, size_t len, const char *file,
		       const char *path, deploy_applied_cb cb, void *arg,
		       struct kn_error *err)
{
	const struct deployment *p = NULL;
	struct kn_deployment_spec *spec = NULL;
	struct deploy_wait *w;
	int rc;

	if (kn_deployment_spec_parse(body, len, file ? file : "deployment",
				     deploy_state_of(s)->presets, &spec, err) < 0 ||
	    !deploy_registry_model(spec)) {
		kn_deployment_spec_free(spec);
		return deploy_apply(s, c, body, len, file, path, &p, err);
	}
	w = deploy_wait_new(c, body, len, file, path);
	w->cb = cb;
	w->arg = arg;
	rc = models_deploy_dir_start(s, spec->model, deploy_checked, w, err);
	kn_deployment_spec_free(spec);
	if (rc < 0) {
		deploy_wait_free(w);
		return rc;
	}
	return 1;
}

/*
 * The body of POST /v1/deployments: the spec as written, or (Content-Type
 * application/json, what kiln deploy sends when revalidate.job names a
 * file) {"spec": text, "files": {name as written: text}}; *doc then
 * holds the texts (else NULL).
 */
static int create_body(struct kn_http_req *req, json_t **doc,
		       const char **body, size_t *len, struct kn_error *err)
{
	const char *type = kn_http_header(req, "content-type");
	json_t *spec;

	*doc = NULL;
	*body = kn_http_body(req, len);
	if (!type || strncmp(type, "application/json", 16) != 0)
		return 0;
	*doc = json_loadb(*body, *len, 0, NULL);
	spec = json_object_get(*doc, "spec");
	if (!json_is_string(spec))
		return kn_errorf(err, KN_EINVAL, "spec",
				 "a JSON body is {\"spec\": the deployment's "
				 "text, \"files\": {name: text}}");
	if (json_object_get(*doc, "files") &&
	    !json_is_object(json_object_get(*doc, "files")))
		return kn_errorf(err, KN_EINVAL, "files",
				 "files must be an object {name: text}");
	*body = json_string_value(spec);
	*len = json_string_length(spec);
	return 0;
}

/* The shipped text of the job file spec's revalidate: names, or NULL. */
static const char *reval_job_sent(json_t *doc,
				  const struct kn_deployment_spec *spec,
				  struct kn_error *err, int *rc)
{
	json_t *v;

	*rc = 0;
	if (!spec->revalidate || !spec->revalidate->job_file || !doc)
		return NULL;
	v = json_object_get(json_object_get(doc, "files"),
			    spec->revalidate->job_file);
	if (v && !json_is_string(v))
		*rc = kn_errorf(err, KN_EINVAL, "files",
				"files[\"%s\"] must be the file's text",
				spec->revalidate->job_file);
	return json_string_value(v);
}

static void deploy_h_create(struct server *s, struct kn_http_req *req,
		     const struct caller *c, const char *param)
{
	const struct deployment *p = NULL;
	struct kn_deployment_spec *spec = NULL;
	struct deploy_wait *w;
	struct kn_error err;
	json_t *doc = NULL;
	size_t len;
	const char *body, *reval_job;
	const char *file = kn_http_query(req, "file");
	const char *path = kn_http_query(req, "path");
	int rc;

	(void)param;
	if (idem_replayed(s, req, c))
		goto out;
	if (create_body(req, &doc, &body, &len, &err) < 0) {
		kn_http_reply_error(req, &err);
		goto out;
	}
	/* A spec that does not parse is refused by deploy_apply below. */
	if (kn_deployment_spec_parse(body, len, file ? file : "deployment",
				     deploy_state_of(s)->presets, &spec, &err) < 0 ||
	    !deploy_registry_model(spec)) {
		if (idem_begin(s, req, c))
			goto out;
		if (deploy_apply(s, c, body, len, file, path, &p, &err) < 0) {
			idem_abort(s, req);
			kn_http_reply_error(req, &err);
		} else {
			idem_reply(s, req, c, p->row.generation == 1 ? 201 : 200,
				   deploy_answer(s, p));
		}
		goto out;
	}
	reval_job = reval_job_sent(doc, spec, &err, &rc);
	if (rc < 0) {
		kn_http_reply_error(req, &err);
		goto out;
	}
	w = deploy_wait_new(c, body, len, file, path);
	w->req = req;
	w->reval_job = reval_job ? kn_xstrdup(reval_job) : NULL;
	if (models_deploy_dir_start(s, spec->model, deploy_checked, w,
				    &err) < 0) {
		kn_http_reply_error(req, &err);
		deploy_wait_free(w);
	}
out:
	kn_deployment_spec_free(spec);
	json_decref(doc);
}

static void deploy_h_list(struct server *s, struct kn_http_req *req,
		   const struct caller *c, const char *param)
{
	json_t *list = json_array();

	(void)c;
	(void)param;
	for (struct deployment *p = deploy_state_of(s)->list; p; p = p->next) {
		json_t *o = deploy_deployment_json(s, p);
		json_object_del(o, "spec");
		json_array_append_new(list, o);
	}
	kn_http_reply_json(req, 200, json_pack("{s:o}", "deployments", list));
}

static struct deployment *lookup(struct server *s, struct kn_http_req *req,
				 const char *name)
{
	struct deployment *p = deploy_find(deploy_state_of(s), name);
	char msg[160];

	if (!p) {
		snprintf(msg, sizeof(msg), "no deployment named %s", name);
		deploy_reply_msg(req, KN_ENOTFOUND, "name", msg);
	}
	return p;
}

static void deploy_h_get(struct server *s, struct kn_http_req *req,
		  const struct caller *c, const char *param)
{
	struct deployment *p = lookup(s, req, param);

	(void)c;
	if (p)
		deploy_reply_deployment(s, req, p, 200);
}

/* Check the caller may change p; on refusal answer and audit. */
static bool change_allowed(struct server *s, struct kn_http_req *req,
			   const struct caller *c, struct deployment *p,
			   const char *action)
{
	struct kn_error err;
	char object[96];

	if (may_change(p, c, &err) == 0)
		return true;
	snprintf(object, sizeof(object), "deployment/%s", p->row.name);
	core_audit(s, c, action, object, "denied", err.message);
	kn_http_reply_error(req, &err);
	return false;
}

static void deploy_h_scale(struct server *s, struct kn_http_req *req,
		    const struct caller *c, const char *param)
{
	struct deployment *p = lookup(s, req, param);
	struct kn_error err;
	struct kn_audit a;
	json_error_t jerr;
	size_t len;
	const char *text = kn_http_body(req, &len);
	json_t *body, *n;
	char object[96], detail[64];
	int64_t old_updated;
	int old;

	if (!p || !change_allowed(s, req, c, p, "deployment.scale"))
		return;
	body = json_loadb(text, len, 0, &jerr);
	n = json_object_get(body, "replicas");
	if (!json_is_integer(n) || json_integer_value(n) < 0 ||
	    json_integer_value(n) > KN_SPEC_MAX_REPLICAS) {
		char msg[80];

		snprintf(msg, sizeof(msg),
			 "body must be {\"replicas\": N} with N 0..%d",
			 KN_SPEC_MAX_REPLICAS);
		json_decref(body);
		deploy_reply_msg(req, KN_EINVAL, "replicas", msg);
		return;
	}
	old = p->row.replicas;
	old_updated = p->row.updated_at;
	p->row.replicas = (int)json_integer_value(n);
	json_decref(body);
	p->row.generation++;
	p->row.updated_at = kn_now_ms();
	snprintf(object, sizeof(object), "deployment/%s", p->row.name);
	snprintf(detail, sizeof(detail), "%d -> %d replicas", old, p->row.replicas);
	caller_audit(&a, c, "deployment.scale", object, "ok", detail);
	/* Written with the new count; put back if the store refused it. */
	if (deploy_save(deploy_state_of(s), p, &a, &err) < 0) {
		p->row.replicas = old;
		p->row.generation--;
		p->row.updated_at = old_updated;
		kn_http_reply_error(req, &err);
		return;
	}
	feed_publish(s, "deployment.state",
		     json_pack("{s:s, s:s, s:i}", "deployment", p->row.name,
			       "state", "scaled", "replicas", p->row.replicas));
	deploy_changed(s, p, false);
	deploy_reply_deployment(s, req, p, 200);
}

static void deploy_h_restart(struct server *s, struct kn_http_req *req,
			     const struct caller *c, const char *param)
{
	const struct kn_deploy_ops *engine = deploy_engine(s);
	struct deployment *p = lookup(s, req, param);
	struct kn_error err;
	struct kn_audit a;
	char object[96];
	int64_t old_updated, old_generation;
	int old;

	if (!p || !change_allowed(s, req, c, p, "deployment.restart"))
		return;
	old = p->row.rollout_next;
	old_generation = p->row.generation;
	old_updated = p->row.updated_at;
	/* An engine's own rollout replaces its replicas; kiln's replaces
	   them one at a time from the first. */
	if (!engine) {
		p->row.rollout_next = p->row.replicas > 0 ? 0 : -1;
		p->row.generation++;
		/* Jobs submitted from now on are the rollout's (see
		   deploy_start). */
		p->row.updated_at = kn_now_ms();
	}
	snprintf(object, sizeof(object), "deployment/%s", p->row.name);
	caller_audit(&a, c, "deployment.restart", object, "ok", NULL);
	/* Written with the new position; put back if the store refused. */
	if (deploy_save(deploy_state_of(s), p, &a, &err) < 0 ||
	    (engine &&
	     engine->restart(core_executor(s), p->row.name, kn_now_ms(), &err) < 0)) {
		p->row.rollout_next = old;
		p->row.generation = old_generation;
		p->row.updated_at = old_updated;
		kn_http_reply_error(req, &err);
		return;
	}
	for (int i = 0; !engine && i < p->n_reps; i++)
		p->reps[i].replacing = false;
	feed_publish(s, "deployment.rollout",
		     json_pack("{s:s, s:s}", "deployment", p->row.name, "state",
			       "started"));
	if (!engine)
		deploy_changed(s, p, false);
	deploy_reply_deployment(s, req, p, 200);
}

static void deploy_h_delete(struct server *s, struct kn_http_req *req,
		     const struct caller *c, const char *param)
{
	struct deployment *p = lookup(s, req, param);
	struct kn_error err;
	struct kn_audit a;
	char object[96];

	if (!p || !change_allowed(s, req, c, p, "deployment.delete"))
		return;
	snprintf(object, sizeof(object), "deployment/%s", p->row.name);
	caller_audit(&a, c, "deployment.delete", object, "ok", NULL);
	if (kn_store_deployment_delete(core_store(s), p->row.name, &a, &err) < 0) {
		kn_http_reply_error(req, &err);
		return;
	}
	if (deploy_engine(s))
		deploy_engine(s)->remove(core_executor(s), p->row.name);
	/* The re-validation its revalidate: set goes with it. */
	reval_deployment_set(s, p->row.name, c, NULL);
	for (int i = 0; i < p->n_reps; i++)
		stop_replica(deploy_state_of(s), p, i);
	KN_LIST_UNLINK(&deploy_state_of(s)->list, p);
	feed_publish(s, "deployment.state",
		     json_pack("{s:s, s:s}", "deployment", p->row.name, "state",
			       "deleted"));
	kn_http_reply_json(req, 200,
			   json_pack("{s:{s:s, s:b}}", "deployment", "name",
				     p->row.name, "deleted", 1));
	deployment_free(p);
}

static const struct route routes[] = {
	/* Deployments (deploy.c): users deploy; operators hold the keys. */
	{"POST", "/v1/deployments", KN_ROLE_USER, false, "deployment.create",
	 deploy_h_create},
	{"GET", "/v1/deployments", KN_ROLE_VIEWER, false, NULL, deploy_h_list},
	{"GET", "/v1/deployments/{name}", KN_ROLE_VIEWER, false, NULL,
	 deploy_h_get},
	{"POST", "/v1/deployments/{name}/scale", KN_ROLE_USER, false,
	 "deployment.scale", deploy_h_scale},
	{"POST", "/v1/deployments/{name}/restart", KN_ROLE_USER, false,
	 "deployment.restart", deploy_h_restart},
	{"DELETE", "/v1/deployments/{name}", KN_ROLE_USER, false,
	 "deployment.delete", deploy_h_delete},
	{"POST", "/v1/keys", KN_ROLE_OPERATOR, false, "key.create",
	 deploy_h_key_create},
	{"GET", "/v1/keys", KN_ROLE_OPERATOR, false, "key.list",
	 deploy_h_key_list},
	{"DELETE", "/v1/keys/{name}", KN_ROLE_OPERATOR, false, "key.revoke",
	 deploy_h_key_revoke},
	/* Key hashes and every replica's address: the gateway's operator
	 * token, not a viewer's. */
	{"GET", "/v1/gateway/config", KN_ROLE_OPERATOR, false,
	 "gateway.config", deploy_h_gateway_config},
	{"POST", "/v1/gateway/alerts", KN_ROLE_OPERATOR, false,
	 "gateway.alert", deploy_h_gateway_alert},
	{"POST", "/v1/gateway/metrics", KN_ROLE_OPERATOR, false,
	 "gateway.metrics", deploy_h_gateway_metrics},
	{0},
};

const struct service deploy_service = {
	.name = "deployments",
	.phase = SERVICE_PHASE_LOOP,
	.start = deploy_start,
	.stop = deploy_free,
	.hooks = &deploy_job_hooks,
	.alias_moved = deploy_alias_moved,
	.routes = routes,
};
