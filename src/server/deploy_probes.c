/*
 * The replicas' readiness and liveness probes, on the loop's HTTP client.
 */
#include "deploysvc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "registry/registry.h"

/* ---- probes ---- */

static struct replica *probe_target(struct deploy_state *d,
				    const struct probe *pr,
				    struct deployment **out)
{
	struct deployment *p = deploy_find(d, pr->deployment);
	struct replica *r;

	if (!p || pr->replica >= p->n_reps)
		return NULL;
	r = &p->reps[pr->replica];
	if (r->job_id != pr->job_id || r->attempt != pr->attempt)
		return NULL;
	*out = p;
	return r;
}

static void probe_done(int status, const char *body, size_t len,
		       const char *error, void *arg)
{
	struct probe *pr = arg;
	struct deploy_state *d = pr->d;
	struct deployment *p = NULL;
	struct replica *r;
	bool ok = status >= 200 && status < 400;

	(void)body;
	(void)len;
	(void)error;
	KN_LIST_UNLINK(&d->probes, pr);
	r = probe_target(d, pr, &p);
	if (r && pr->kind == PROBE_READY) {
		r->ready_in_flight = false;
		if (ok) {
			r->ready_failures = 0;
			r->ready = r->was_ready = true;
		} else if (++r->ready_failures >=
			   p->spec->readiness.failure_threshold) {
			r->ready = false;
		}
	} else if (r) {
		r->live_in_flight = false;
		if (ok) {
			r->live_failures = 0;
		} else if (++r->live_failures >=
			   p->spec->liveness.failure_threshold) {
			char why[160];
			struct kn_error err;

			snprintf(why, sizeof(why),
				 "liveness probe %s failed %d times in a row",
				 p->spec->liveness.path, r->live_failures);
			kn_log(KN_LOG_WARN, "deployment %s replica %d: %s; "
			       "restarting it", p->row.name, pr->replica, why);
			r->live_failures = 0;
			r->ready = false;
			if (jobs_restart(d->s, r->job_id, why, &err) < 0)
				kn_log(KN_LOG_WARN, "%s", err.message);
			feed_publish(d->s, "deployment.replica",
				     json_pack("{s:s, s:i, s:s, s:s}",
					       "deployment", p->row.name, "replica",
					       pr->replica, "state",
					       "restarting", "reason", why));
		}
	}
	free(pr);
}

static void probe_send(struct deploy_state *d, struct deployment *p, int i,
		       const struct job_view *run, enum probe_kind kind)
{
	const struct kn_probe *spec =
		kind == PROBE_READY ? &p->spec->readiness : &p->spec->liveness;
	struct probe *pr = kn_xcalloc(1, sizeof(*pr));
	int64_t timeout = spec->period_ms < PROBE_TIMEOUT_MAX_MS
				  ? spec->period_ms
				  : PROBE_TIMEOUT_MAX_MS;
	char *url = kn_asprintf("http://127.0.0.1:%d%s", run->master_port,
				spec->path);

	pr->d = d;
	kn_strlcpy(pr->deployment, p->row.name, sizeof(pr->deployment));
	pr->replica = i;
	pr->job_id = p->reps[i].job_id;
	pr->attempt = run->attempt;
	pr->kind = kind;
	pr->next = d->probes;
	d->probes = pr;
	if (kind == PROBE_READY)
		p->reps[i].ready_in_flight = true;
	else
		p->reps[i].live_in_flight = true;
	if (kn_http_fetch(core_loop(d->s), "GET", url, NULL, NULL, timeout,
			  probe_done, pr) < 0)
		probe_done(0, NULL, 0, "bad URL", pr);
	free(url);
}

/* Probe what is due; returns the next time something is due. */
static int64_t probe_replicas(struct deploy_state *d, struct deployment *p,
			      int64_t now)
{
	const struct kn_deployment_spec *spec = p->spec;
	int64_t next = now + RECONCILE_MS;

	for (int i = 0; i < p->n_reps; i++) {
		struct replica *r = &p->reps[i];
		struct job_view view, *run = &view;

		core_job_view(d->s, r->job_id, run);
		if (!run->serving) {
			r->ready = false;
			continue;
		}
		if (run->attempt != r->attempt) {
			/* A new attempt: its probes start over. */
			r->attempt = run->attempt;
			r->ready = r->was_ready = false;
			r->ready_failures = r->live_failures = 0;
			r->next_ready_at =
				run->started_at + spec->readiness.initial_delay_ms;
			r->next_live_at =
				run->started_at + spec->liveness.initial_delay_ms;
		}
		if (!spec->readiness.set)
			r->ready = true;
		if (spec->readiness.set && !r->ready_in_flight) {
			if (r->next_ready_at <= now) {
				r->next_ready_at = now + spec->readiness.period_ms;
				probe_send(d, p, i, run, PROBE_READY);
			}
			if (r->next_ready_at < next)
				next = r->next_ready_at;
		}
		/* A model still loading is not dead: liveness counts from the
		 * first time the attempt is ready (when it is probed for that). */
		if (spec->liveness.set && !r->live_in_flight &&
		    (r->was_ready || !spec->readiness.set)) {
			if (r->next_live_at <= now) {
				r->next_live_at = now + spec->liveness.period_ms;
				probe_send(d, p, i, run, PROBE_LIVE);
			}
			if (r->next_live_at < next)
				next = r->next_live_at;
		}
	}
	return next;
}

void deploy_tick(void *arg)
{
	struct deploy_state *d = arg;
	int64_t now = kn_now_ms(), next = now + RECONCILE_MS;

	if (core_closing(d->s) || deploy_engine(d->s))
		return;
	for (struct deployment *p = d->list; p; p = p->next) {
		int64_t due;

		deploy_reconcile(d, p);
		due = probe_replicas(d, p, now);
		if (due < next)
			next = due;
	}
	if (d->list)
		kn_timer_arm(d->timer, next - now > TICK_MIN_MS ? next - now
								: TICK_MIN_MS);
}
