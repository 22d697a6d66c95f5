/*
 * Deployments and their replicas as the API shows them.
 */
#include "deploysvc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "registry/registry.h"

/* ---- JSON ---- */

static const char *replica_state(const struct replica *r,
				 const struct job_view *v, const char **reason)
{
	*reason = NULL;
	if (v->place == JOB_RUNNING)
		return v->stopping                  ? "stopping"
		       : deploy_replica_ready(r, v) ? "ready"
						    : "starting";
	if (v->place != JOB_QUEUED)
		return "pending";
	*reason = v->reason[0] ? v->reason : NULL;
	return v->not_before > kn_now_ms() ? "restarting" : "queued";
}

static json_t *replicas_json(struct server *s, const struct deployment *p,
			     int *ready_count)
{
	json_t *list = json_array();

	*ready_count = 0;
	for (int i = 0; i < p->row.replicas && i < p->n_reps; i++) {
		const struct replica *r = &p->reps[i];
		struct job_view v;
		struct kn_job_row j;
		struct kn_error err;
		const char *reason, *state;
		int restarts = 0;
		json_t *o;

		core_job_view(s, r->job_id, &v);
		state = replica_state(r, &v, &reason);

		memset(&j, 0, sizeof(j));
		if (r->job_id &&
		    kn_store_job_get(core_store(s), r->job_id, &j, &err) == 0) {
			restarts = j.attempts > 1 ? j.attempts - 1 : 0;
			/* Why it is waiting to come back: its last exit. */
			if (!strcmp(state, "restarting"))
				reason = j.reason;
		}
		o = json_pack("{s:i, s:I, s:s, s:b, s:i, s:o}", "replica", i,
			      "job", (json_int_t)r->job_id, "state", state,
			      "ready", deploy_replica_ready(r, &v), "restarts",
			      restarts, "model_dir",
			      r->model_dir ? json_string(r->model_dir)
					   : json_null());
		if (deploy_dir_version(p, p->row.model_dir))
			json_object_set_new(
				o, "model_version",
				r->model_dir
					? json_integer(deploy_dir_version(p, r->model_dir))
					: json_null());
		if (v.serving) {
			char addr[32];
			snprintf(addr, sizeof(addr), "127.0.0.1:%d",
				 v.master_port);
			json_object_set_new(o, "address", json_string(addr));
			json_object_set_new(o, "node",
					    json_string(core_node_name(s, v.node)));
			json_object_set_new(o, "zone",
					    json_string(deploy_node_zone(s, &v)));
			json_object_set_new(o, "attempt",
					    json_integer(v.attempt));
		} else {
			json_object_set_new(o, "address", json_null());
			json_object_set_new(o, "node", json_null());
			json_object_set_new(o, "zone", json_null());
		}
		json_object_set_new(o, "reason",
				    reason ? json_string(reason) : json_null());
		kn_job_row_release(&j);
		if (deploy_replica_ready(r, &v))
			(*ready_count)++;
		json_array_append_new(list, o);
	}
	return list;
}

json_t *deploy_deployment_json(struct server *s, const struct deployment *p)
{
	int ready = 0;
	json_t *reps, *st = NULL, *o, *traffic;
	struct kn_model_ref ref;
	const char *alias = deploy_followed_alias(p, &ref);
	int64_t version = deploy_dir_version(p, p->row.model_dir);

	if (deploy_engine(s)) {
		st = deploy_engine(s)->status(core_executor(s), p->row.name);
		reps = deploy_engine_replicas_json(st);
		ready = (int)json_integer_value(json_object_get(st, "ready"));
	} else {
		reps = replicas_json(s, p, &ready);
	}
	o = json_pack(
		"{s:s, s:s, s:s, s:s, s:i, s:i, s:o, s:I, s:o, s:{s:i, s:i}, "
		"s:o, s:I, s:I, s:o, s:o}",
		"name", p->row.name, "owner", p->row.owner, "model", p->spec->model,
		"model_dir", p->row.model_dir, "replicas_wanted", p->row.replicas,
		"replicas_ready", ready, "replicas", reps, "generation",
		(json_int_t)p->row.generation, "fallback",
		p->spec->fallback ? json_string(p->spec->fallback)
				  : json_null(),
		"limits", "rpm", p->spec->limit_rpm, "tpm", p->spec->limit_tpm,
		"preset",
		p->spec->preset ? json_string(p->spec->preset) : json_null(),
		"created_at_ms", (json_int_t)p->row.created_at, "updated_at_ms",
		(json_int_t)p->row.updated_at, "rollout",
		p->row.rollout_next >= 0
			? json_pack("{s:i}", "next_replica", p->row.rollout_next)
			: json_null(),
		"spec", json_loads(p->row.spec_json, 0, NULL));
	if (st) {
		json_object_del(st, "pods");
		json_object_set_new(o, "kubernetes", st);
	}
	json_object_set_new(o, "follows",
			    alias ? json_string(alias) : json_null());
	json_object_set_new(o, "model_version",
			    version ? json_integer(version) : json_null());
	traffic = kn_traffic_summary(deploy_state_of(s)->traffic, p->row.name, kn_now_ms());
	json_object_set_new(o, "traffic", traffic ? traffic : json_null());
	return o;
}

json_t *deploy_answer(struct server *s, const struct deployment *p)
{
	return json_pack("{s:o}", "deployment", deploy_deployment_json(s, p));
}

void deploy_reply_deployment(struct server *s, struct kn_http_req *req,
			     const struct deployment *p, int status)
{
	kn_http_reply_json(req, status, deploy_answer(s, p));
}
