/*
 * The HTTP API: a route table (method, path pattern, least role, handler),
 * bearer-token checks, and the JSON shapes of docs/api.md. Handlers answer
 * synchronously except the log stream; anything a handler wrote to the
 * store is committed before the reply is sent.
 */
#include "openapi.h"
#include "internal.h"
#include "service.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static void reply_err(struct kn_http_req *req, enum kn_errcode code,
		      const char *field, const char *fmt, const char *arg)
{
	struct kn_error err;
	kn_errorf(&err, code, field, fmt, arg);
	kn_http_reply_error(req, &err);
}

/* ---- JSON shapes ---- */

static json_t *str_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

/* A new reference to o[key], or dflt (consumed either way) when absent. */
static json_t *get_or(json_t *o, const char *key, json_t *dflt)
{
	json_t *v = json_object_get(o, key);

	if (!v || json_is_null(v))
		return dflt;
	json_decref(dflt);
	return json_incref(v);
}

json_t *job_to_json(struct server *s, const struct kn_job_row *j)
{
	json_t *o, *spec = NULL, *res;
	const char *queue_reason = NULL;

	if (j->spec_json)
		spec = json_loads(j->spec_json, 0, NULL);
	if (j->state == KN_JOB_QUEUED)
		queue_reason = jobs_queue_reason(s, j->id);
	else if (j->state == KN_JOB_RUNNING)
		queue_reason = jobs_run_reason(s, j->id);
	res = spec ? json_object_get(spec, "resources") : NULL;
	o = json_pack("{s:I, s:s, s:s, s:s, s:i, s:i, s:b, s:I, s:I, s:I, s:I, "
		      "s:i, s:i, s:i, s:b, s:o, s:i}",
		      "id", (json_int_t)j->id, "name", j->name, "owner",
		      j->owner, "state", kn_job_state_name(j->state),
		      "priority", j->priority, "tasks", j->tasks,
		      "preemptible",
		      spec ? json_is_true(json_object_get(spec, "preemptible"))
			   : 0,
		      "submitted_at_ms", (json_int_t)j->submitted_at,
		      "started_at_ms", (json_int_t)j->started_at,
		      "ended_at_ms", (json_int_t)j->ended_at, "not_before_ms",
		      (json_int_t)j->not_before, "attempts", j->attempts,
		      "retries",
		      spec ? (int)json_integer_value(
				     json_object_get(spec, "retries"))
			   : 0,
		      "retries_used", j->retries_used, "cancel_requested",
		      j->cancel_requested, "reason",
		      str_or_null(queue_reason ? queue_reason : j->reason),
		      "exit_code", j->exit_code);
	if (j->array_id)
		json_object_set_new(o, "array", array_summary_json(j));
	if (res)
		json_object_set_new(
			o, "resources",
			json_pack("{s:o, s:o, s:o, s:o}", "gpus",
				  get_or(res, "gpus", json_integer(0)), "cpus",
				  get_or(res, "cpus", json_integer(0)),
				  "memory_bytes",
				  get_or(res, "memory_bytes", json_integer(0)),
				  "gpu_model",
				  get_or(res, "gpu_model", json_array())));
	json_decref(spec);
	return o;
}

static json_t *devices_json(const char *text)
{
	json_t *a = json_array();
	const char *p = text;

	while (p && *p) {
		char *end;
		long v = strtol(p, &end, 10);
		if (end == p)
			break;
		json_array_append_new(a, json_integer(v));
		p = *end == ',' ? end + 1 : end;
	}
	return a;
}

/*
 * A running attempt's checkpoints, from its run (its row gets them when
 * it ends): the newest synced, when the task committed it, and the one
 * being written with the bytes of it already sent ahead.
 */
static void running_checkpoints(struct server *s, int64_t job_id,
				json_t *attempt)
{
	int number = (int)json_integer_value(json_object_get(attempt, "number"));

	for (const struct run *r = s->runs; r; r = r->next) {
		if (r->job_id != job_id || r->attempt != number)
			continue;
		if (r->checkpoint[0]) {
			json_object_set_new(attempt, "checkpoint",
					    json_string(r->checkpoint));
			json_object_set_new(attempt, "checkpoint_at_ms",
					    json_integer(r->checkpoint_at));
		}
		if (r->checkpoint_next[0])
			json_object_set_new(
				attempt, "checkpoint_next",
				json_pack("{s:s, s:I}", "name",
					  r->checkpoint_next, "sent_bytes",
					  (json_int_t)r->checkpoint_next_sent));
		return;
	}
}

static json_t *output_json(const void *row)
{
	const struct kn_output_row *out = row;

	return json_pack("{s:s, s:I, s:s, s:s}", "name", out->name, "size",
			 (json_int_t)out->size, "sha256", out->sha256, "url",
			 out->url);
}

static json_t *job_detail_json(struct server *s, const struct kn_job_row *j,
			       struct kn_error *err)
{
	struct kn_attempt_row *att = NULL;
	struct kn_task_row *tasks = NULL;
	struct kn_output_row *outs = NULL;
	size_t na = 0, nt = 0, nout = 0;
	int64_t useful = 0, lost = 0;
	json_t *o, *list;

	if (kn_store_attempt_list(s->store, j->id, &att, &na, err) < 0 ||
	    kn_store_task_list(s->store, j->id, 0, &tasks, &nt, err) < 0 ||
	    kn_store_output_list(s->store, j->id, &outs, &nout, err) < 0) {
		kn_attempt_list_free(att, na);
		kn_task_list_free(tasks, nt);
		return NULL;
	}
	o = job_to_json(s, j);
	if (j->array_id == j->id &&
	    array_elements_json(s, j, json_object_get(o, "array"), err) < 0) {
		json_decref(o);
		o = NULL;
	}
	if (!o) {
		kn_attempt_list_free(att, na);
		kn_task_list_free(tasks, nt);
		kn_output_list_free(outs, nout);
		return NULL;
	}
	json_object_set_new(o, "spec",
			    j->spec_json ? json_loads(j->spec_json, 0, NULL)
					 : json_null());
	json_object_set_new(o, "spec_yaml", str_or_null(j->spec_yaml));
	json_object_set_new(o, "filename", str_or_null(j->filename));
	list = json_array();
	for (size_t i = 0; i < na; i++) {
		useful += att[i].useful_ms;
		lost += att[i].lost_ms;
	}
	json_object_set_new(
		o, "goodput",
		json_pack("{s:f, s:f, s:o}", "useful_task_seconds",
			  useful / 1000.0, "lost_task_seconds", lost / 1000.0,
			  "percent",
			  useful + lost > 0
				  ? json_real(100.0 * (double)useful /
					      (double)(useful + lost))
				  : json_null()));
	for (size_t i = 0; i < na; i++) {
		json_t *ta = json_array();
		for (size_t k = 0; k < nt; k++) {
			const struct kn_task_row *t = &tasks[k];
			if (t->attempt != att[i].number)
				continue;
			json_array_append_new(
				ta,
				json_pack("{s:i, s:s, s:o, s:i, s:s, s:i, s:i, "
					  "s:I, s:I, s:s}",
					  "rank", t->rank, "node", t->node,
					  "devices", devices_json(t->devices),
					  "gpu_milli", t->gpu_milli, "state",
					  kn_task_state_name(t->state),
					  "exit_code", t->exit_code, "signal",
					  t->signal, "started_at_ms",
					  (json_int_t)t->started_at,
					  "ended_at_ms", (json_int_t)t->ended_at,
					  "task_dir", t->task_dir));
		}
		json_array_append_new(
			list,
			json_pack("{s:i, s:s, s:I, s:I, s:i, s:i, s:o, s:o, s:I, "
				  "s:I, s:I, s:I, s:o}",
				  "number", att[i].number, "state",
				  kn_job_state_name(att[i].state),
				  "started_at_ms", (json_int_t)att[i].started_at,
				  "ended_at_ms", (json_int_t)att[i].ended_at,
				  "exit_code", att[i].exit_code, "signal",
				  att[i].signal, "reason",
				  str_or_null(att[i].reason), "checkpoint",
				  str_or_null(att[i].checkpoint),
				  "checkpoint_at_ms",
				  (json_int_t)att[i].checkpoint_at, "restore_ms",
				  (json_int_t)att[i].restore_ms, "useful_task_ms",
				  (json_int_t)att[i].useful_ms, "lost_task_ms",
				  (json_int_t)att[i].lost_ms, "tasks", ta));
		if (att[i].state == KN_JOB_RUNNING)
			running_checkpoints(s, j->id,
					    json_array_get(list, i));
	}
	json_object_set_new(o, "attempts_detail", list);
	json_object_set_new(o, "outputs",
			    rows_json(outs, nout, sizeof(*outs), output_json));
	/* A job spec's inputs: with their digests once fetched. */
	if ((list = jobs_inputs_json(s, j->id, j->spec_json)))
		json_object_set_new(o, "inputs", list);
	kn_attempt_list_free(att, na);
	kn_task_list_free(tasks, nt);
	kn_output_list_free(outs, nout);
	return o;
}

static json_t *token_json(const void *row)
{
	const struct kn_token_row *t = row;

	return json_pack("{s:I, s:s, s:s, s:s, s:I, s:I, s:I}", "id",
			 (json_int_t)t->id, "name", t->name, "role", t->role,
			 "created_by", t->created_by ? t->created_by : "",
			 "created_at_ms", (json_int_t)t->created_at,
			 "revoked_at_ms", (json_int_t)t->revoked_at,
			 "last_used_at_ms", (json_int_t)t->last_used_at);
}

/* ---- handlers ---- */

static void h_healthz(struct server *s, struct kn_http_req *req,
		      const struct caller *c, const char *param)
{
	(void)s;
	(void)c;
	(void)param;
	kn_http_reply_json(req, 200,
			   json_pack("{s:b, s:s}", "ok", 1, "version",
				     KN_VERSION));
}

static void h_whoami(struct server *s, struct kn_http_req *req,
		     const struct caller *c, const char *param)
{
	(void)s;
	(void)param;
	kn_http_reply_json(req, 200,
			   json_pack("{s:s, s:s}", "name", c->name, "role",
				     role_name(c->role)));
}

/* {"job": ...} for job id as the store has it now, or NULL and err. */
static json_t *job_answer(struct server *s, int64_t id, struct kn_error *err)
{
	struct kn_job_row j;
	json_t *o;

	if (kn_store_job_get(s->store, id, &j, err) < 0)
		return NULL;
	o = json_pack("{s:o}", "job", job_to_json(s, &j));
	kn_job_row_release(&j);
	return o;
}

/* A user acting on another user's job: refused, and on the record. */
static void audit_denied(struct server *s, const struct caller *c,
			 const char *action, int64_t id,
			 const struct kn_error *err)
{
	char object[48];

	snprintf(object, sizeof(object), "job/%lld", (long long)id);
	core_audit(s, c, action, object, "denied", err->message);
}

static void h_job_submit(struct server *s, struct kn_http_req *req,
			 const struct caller *c, const char *param)
{
	struct kn_error err;
	size_t len;
	const char *body = kn_http_body(req, &len);
	const char *file = kn_http_query(req, "file");
	const char *path = kn_http_query(req, "path");
	json_t *answer;
	char *stored;
	int64_t id, hold = 0;

	(void)param;
	if (path && path[0] != '/') {
		reply_err(req, KN_EINVAL, "path",
			  "path must be absolute; got \"%s\"", path);
		return;
	}
	if (kn_http_query_int(req, "hold", 0, 1, &hold) < 0) {
		reply_err(req, KN_EINVAL, "hold", "hold must be 0 or 1%s", "");
		return;
	}
	if (idem_replayed(s, req, c))
		return;
	/* Submits share a commit, a key's row with its job (submit_group.c). */
	if (submit_group_join(s, &err) < 0) {
		kn_http_reply_error(req, &err);
		return;
	}
	if (jobs_submit_fit(s, c, body, len, file, path, hold != 0,
			    kn_http_query(req, "overrides"), &id, &err) < 0 ||
	    !(answer = job_answer(s, id, &err))) {
		submit_group_leave(s, req, NULL, NULL);
		kn_http_reply_error(req, &err);
		return;
	}
	if (idem_record(s, req, c, 201, answer, &stored, &err) < 0) {
		json_decref(answer);
		submit_group_leave(s, req, NULL, NULL);
		kn_http_reply_error(req, &err);
		return;
	}
	submit_group_leave(s, req, answer, stored);
}

static void h_job_list(struct server *s, struct kn_http_req *req,
		       const struct caller *c, const char *param)
{
	struct kn_job_filter f;
	struct kn_job_row *rows = NULL;
	struct kn_error err;
	const char *state = kn_http_query(req, "state");
	const char *order = kn_http_query(req, "order");
	int64_t limit = 0, elements = 0, before = 0;
	size_t n = 0;
	json_t *list;

	(void)c;
	(void)param;
	memset(&f, 0, sizeof(f));
	f.state = -1;
	f.with_spec = true;
	if (state && (f.state = kn_job_state_parse(state)) < 0) {
		reply_err(req, KN_EINVAL, "state",
			  "unknown state \"%s\" (queued, running, succeeded, "
			  "failed, cancelled, preempted)",
			  state);
		return;
	}
	if (kn_http_query_int(req, "limit", 1, 100000, &limit) < 0) {
		reply_err(req, KN_EINVAL, "limit", "limit must be 1..100000%s", "");
		return;
	}
	if (kn_http_query_int(req, "elements", 0, 1, &elements) < 0 ||
	    kn_http_query_int(req, "array", 1, INT64_MAX, &f.array_id) < 0) {
		reply_err(req, KN_EINVAL, "elements",
			  "elements must be 0 or 1 and array a job id%s", "");
		return;
	}
	/* A page: the jobs below the last id of the one before. */
	if (kn_http_query_int(req, "before", 1, INT64_MAX, &before) < 0) {
		reply_err(req, KN_EINVAL, "before", "before must be a job id%s",
			  "");
		return;
	}
	if (order && strcmp(order, "asc") != 0 && strcmp(order, "desc") != 0) {
		reply_err(req, KN_EINVAL, "order",
			  "order must be asc or desc, not \"%s\"", order);
		return;
	}
	f.before_id = before;
	f.newest_first = order && !strcmp(order, "desc");
	f.limit = (int)limit;
	f.owner = kn_http_query(req, "owner");
	f.name = kn_http_query(req, "name");
	if (kn_store_job_list(s->store, &f, &rows, &n, &err) < 0) {
		kn_http_reply_error(req, &err);
		return;
	}
	list = jobs_list_json(s, rows, n, elements || f.array_id);
	kn_job_list_free(rows, n);
	kn_http_reply_json(req, 200, json_pack("{s:o}", "jobs", list));
}

static void h_job_get(struct server *s, struct kn_http_req *req,
		      const struct caller *c, const char *param)
{
	struct kn_job_row j;
	struct kn_error err;
	json_t *o;
	int64_t id, index = -1;

	(void)c;
	if (!route_id_or_reply(req, param, "job", &id))
		return;
	if (kn_http_query_int(req, "index", 0, INT32_MAX, &index) < 0) {
		reply_err(req, KN_EINVAL, "index",
			  "index must be an array element's index%s", "");
		return;
	}
	if ((index >= 0 && jobs_array_element(s, id, index, &id, &err) < 0) ||
	    kn_store_job_get(s->store, id, &j, &err) < 0) {
		kn_http_reply_error(req, &err);
		return;
	}
	o = job_detail_json(s, &j, &err);
	kn_job_row_release(&j);
	if (!o) {
		kn_http_reply_error(req, &err);
		return;
	}
	kn_http_reply_json(req, 200, json_pack("{s:o}", "job", o));
}

/* ?array=1: the verb reaches every element when the id is an array's. */
static int array_query(struct kn_http_req *req, int64_t *array)
{
	*array = 0;
	if (kn_http_query_int(req, "array", 0, 1, array) >= 0)
		return 0;
	reply_err(req, KN_EINVAL, "array", "array must be 0 or 1%s", "");
	return -1;
}

/*
 * verb on job id, or on each of its elements when array is set; answers
 * the job, or the refusal (a user's act on another's job audited as
 * action).
 */
static void job_verb_reply(struct server *s, struct kn_http_req *req,
			   const struct caller *c, int64_t id, bool array,
			   const char *action, array_verb_fn verb, void *arg)
{
	struct kn_error err;

	if ((array ? jobs_array_each(s, id, verb, arg, &err)
		   : verb(s, id, arg, &err)) < 0) {
		if (err.code == KN_EPERM)
			audit_denied(s, c, action, id, &err);
		kn_http_reply_error(req, &err);
		return;
	}
	route_reply(req, 200, job_answer(s, id, &err), &err);
}

static int cancel_one(struct server *s, int64_t id, void *arg,
		      struct kn_error *err)
{
	return jobs_cancel(s, arg, id, err);
}

static void h_job_cancel(struct server *s, struct kn_http_req *req,
			 const struct caller *c, const char *param)
{
	int64_t id, array;

	if (route_id_or_reply(req, param, "job", &id) &&
	    array_query(req, &array) == 0)
		job_verb_reply(s, req, c, id, array != 0, "job.cancel",
			       cancel_one, (void *)c);
}

struct evict_args {
	const struct caller *c;
	int64_t grace_ms;
	const char *reason;
};

static int evict_one(struct server *s, int64_t id, void *arg,
		     struct kn_error *err)
{
	const struct evict_args *e = arg;

	return jobs_evict(s, e->c, id, e->grace_ms, e->reason, err);
}

static void h_job_evict(struct server *s, struct kn_http_req *req,
			const struct caller *c, const char *param)
{
	const char *grace = kn_http_query(req, "grace");
	const char *why = kn_http_query(req, "reason");
	char reason[160];
	int64_t id, grace_ms = -1, array;
	struct evict_args e = {.c = c, .reason = reason};

	if (!route_id_or_reply(req, param, "job", &id) ||
	    array_query(req, &array) < 0)
		return;
	if (grace && kn_parse_duration(grace, &grace_ms) < 0) {
		reply_err(req, KN_EINVAL, "grace",
			  "grace must be a duration like 30s; got \"%s\"", grace);
		return;
	}
	snprintf(reason, sizeof(reason), "evicted by %s%s%s", c->name,
		 why ? ": " : "", why ? why : "");
	e.grace_ms = grace_ms;
	job_verb_reply(s, req, c, id, array != 0, "job.evict", evict_one, &e);
}

/* {"node": {name, state, reason}} of the node called name, which exists. */
static void node_reply(struct server *s, struct kn_http_req *req,
		       const char *name)
{
	const struct server_node *node = &s->nodes[nodes_find(s, name)];

	kn_http_reply_json(req, 200,
			   json_pack("{s:{s:s, s:s, s:o}}", "node", "name", name,
				     "state", node->state, "reason",
				     node->reason[0] ? json_string(node->reason)
						     : json_null()));
}

static void node_state_change(struct server *s, struct kn_http_req *req,
			      const struct caller *c, const char *name,
			      const char *state)
{
	struct kn_error err;
	const char *why = kn_http_query(req, "reason");
	char reason[192];

	snprintf(reason, sizeof(reason), "%s by %s%s%s",
		 !strcmp(state, "draining") ? "drained" : "cordoned", c->name,
		 why ? ": " : "", why ? why : "");
	if (nodes_set_state(s, c, name, state,
			    strcmp(state, "ready") ? reason : "", &err) < 0) {
		kn_http_reply_error(req, &err);
		return;
	}
	node_reply(s, req, name);
}

static void h_node_cordon(struct server *s, struct kn_http_req *req,
			  const struct caller *c, const char *param)
{
	node_state_change(s, req, c, param, "cordoned");
}

static void h_node_drain(struct server *s, struct kn_http_req *req,
			 const struct caller *c, const char *param)
{
	node_state_change(s, req, c, param, "draining");
}

static void h_node_uncordon(struct server *s, struct kn_http_req *req,
			    const struct caller *c, const char *param)
{
	node_state_change(s, req, c, param, "ready");
	jobs_wake(s);
}

static void h_node_health(struct server *s, struct kn_http_req *req,
			  const struct caller *c, const char *param)
{
	struct kn_error err;
	json_error_t jerr;
	size_t len;
	const char *text = kn_http_body(req, &len);
	json_t *body = json_loadb(text, len, 0, &jerr);
	json_t *healthy = json_object_get(body, "healthy");
	const char *why = json_string_value(json_object_get(body, "reason"));
	char reason[192];
	int i = nodes_find(s, param), rc;

	if (!json_is_boolean(healthy)) {
		json_decref(body);
		reply_err(req, KN_EINVAL, "healthy",
			  "body must be {\"healthy\": true|false, \"reason\": "
			  "\"...\"}%s", "");
		return;
	}
	/* Not the prefix of the server's own checks: theirs passing must
	   not clear what someone else saw (checks.c). */
	snprintf(reason, sizeof(reason), "reported by %s: %s", c->name,
		 why && *why ? why : "(no reason given)");
	if (json_is_true(healthy)) {
		/* A repaired node comes back only from unhealthy, not from a
		 * cordon or drain an operator set. */
		rc = i < 0 ? kn_errorf(&err, KN_ENOTFOUND, "name",
				       "node %s not found", param)
		     : strcmp(s->nodes[i].state, "unhealthy") == 0
			     ? nodes_set_state(s, c, param, "ready", "", &err)
			     : 0;
	} else {
		rc = nodes_set_state(s, c, param, "unhealthy", reason, &err);
	}
	json_decref(body);
	if (rc < 0) {
		kn_http_reply_error(req, &err);
		return;
	}
	jobs_wake(s);
	node_reply(s, req, param);
}

static void h_job_logs(struct server *s, struct kn_http_req *req,
		       const struct caller *c, const char *param)
{
	struct kn_job_row j;
	struct kn_task_row *tasks = NULL;
	struct kn_error err;
	struct logs_query q = {.tail_lines = -1};
	const char *since = kn_http_query(req, "since");
	int64_t id, rank = 0, attempt = 0, follow = 0, stamps = 0, ago;
	size_t nt = 0;
	const struct kn_task_row *t = NULL;

	(void)c;
	if (!route_id_or_reply(req, param, "job", &id))
		return;
	if (kn_http_query_int(req, "task", 0, KN_SPEC_MAX_TASKS, &rank) < 0 ||
	    kn_http_query_int(req, "attempt", 1, 1000000, &attempt) < 0 ||
	    kn_http_query_int(req, "offset", 0, INT64_MAX, &q.offset) < 0 ||
	    kn_http_query_int(req, "follow", 0, 1, &follow) < 0) {
		reply_err(req, KN_EINVAL, NULL,
			  "task, attempt, offset and follow must be "
			  "non-negative integers (follow 0 or 1)%s", "");
		return;
	}
	if (kn_http_query_int(req, "tail", 0, LOGS_TAIL_MAX, &q.tail_lines) < 0) {
		reply_err(req, KN_EINVAL, "tail",
			  "tail must be a number of lines, 0..1000000%s", "");
		return;
	}
	if (since && kn_parse_duration(since, &ago) < 0) {
		reply_err(req, KN_EINVAL, "since",
			  "since must be a duration such as 90s, 5m or 2h; "
			  "got \"%s\"", since);
		return;
	}
	if (kn_http_query_int(req, "timestamps", 0, 1, &stamps) < 0) {
		reply_err(req, KN_EINVAL, "timestamps",
			  "timestamps must be 0 or 1%s", "");
		return;
	}
	/* At least 1: 0 means "every line", and since=0s asks for now on. */
	q.since_ms = since ? kn_now_ms() - ago : 0;
	if (since && q.since_ms < 1)
		q.since_ms = 1;
	q.timestamps = stamps != 0;
	q.follow = follow != 0;
	if (follow && !api_follow_admitted(s, req))
		return;
	if (kn_store_job_get(s->store, id, &j, &err) < 0) {
		kn_http_reply_error(req, &err);
		return;
	}
	if (!attempt)
		attempt = j.attempts;
	kn_job_row_release(&j);
	if (!attempt) {
		reply_err(req, KN_ENOTFOUND, "attempt",
			  "job has not started yet: no logs%s", "");
		return;
	}
	if (kn_store_task_list(s->store, id, (int)attempt, &tasks, &nt, &err) < 0) {
		kn_http_reply_error(req, &err);
		return;
	}
	for (size_t i = 0; i < nt; i++)
		if (tasks[i].rank == rank)
			t = &tasks[i];
	if (!t) {
		kn_task_list_free(tasks, nt);
		reply_err(req, KN_ENOTFOUND, "task",
			  "no such task in that attempt%s", "");
		return;
	}
	logs_serve(s, req, id, t->task_dir, (int)attempt, (int)rank, &q);
	kn_task_list_free(tasks, nt);
}

static json_t *node_json(struct server *s, size_t n)
{
	const struct server_node *nd = &s->nodes[n];
	const struct kn_sched_node *sn = &s->cluster.nodes[n];
	json_t *devs = json_array(), *labels = json_object(), *node, *slurm;

	for (size_t i = 0; i < nd->devices.n; i++) {
		const struct kn_device_info *d = &nd->devices.devices[i];
		const struct kn_sched_device *sd = &sn->devices[i];
		json_t *dev = json_pack(
			"{s:i, s:s, s:s, s:I, s:b, s:i, s:o}", "index",
			d->index, "uuid", d->uuid, "model", d->model,
			"memory_bytes", (json_int_t)d->memory_bytes,
			"simulated", nd->devices.simulated, "allocated_milli",
			sd->used_milli, "allocations",
			jobs_device_allocations(s, n, d->index));

		/* MIG mode: memory slices in use of the GPU's total. */
		json_object_set_new(dev, "mig", json_boolean(sd->mig != NULL));
		if (sd->mig) {
			int used = 0;

			for (int k = 0; k < sd->n_mig_slices; k++)
				used += sd->mig_slices[k].profile->memory;
			json_object_set_new(dev, "mig_slices_used",
					    json_integer(used));
			json_object_set_new(dev, "mig_slices",
					    json_integer(sd->mig->memory));
		}
		json_array_append_new(devs, dev);
	}
	for (size_t i = 0; i < sn->n_labels; i++)
		json_object_set_new(labels, sn->labels[i].key,
				    json_string(sn->labels[i].value));
	node = json_pack("{s:s, s:s, s:o, s:b, s:s, s:o, s:[], s:f, s:I, s:f, "
			 "s:I, s:o}",
			 "name", nd->name, "state", nd->state, "reason",
			 nd->reason[0] ? json_string(nd->reason) : json_null(),
			 "simulated", nd->devices.simulated, "device_source",
			 nd->devices.source, "labels", labels, "taints", "cpus",
			 sn->cpu_milli_total / 1000.0, "memory_bytes",
			 (json_int_t)sn->memory_total, "cpus_allocated",
			 sn->cpu_milli_used / 1000.0,
			 "memory_allocated_bytes",
			 (json_int_t)sn->memory_used, "devices", devs);
	json_object_set_new(node, "fragmentation", nodes_fragmentation(s, n));
	json_object_set_new(node, "isolation", json_string(s->isolation));
	json_object_set_new(node, "limits", limits_json(s));
	/* Under Slurm: Slurm's own state, reason and resources. */
	slurm = slurm_nodes_json(s, n);
	json_object_set_new(node, "slurm", slurm ? slurm : json_null());
	return node;
}

static void h_nodes(struct server *s, struct kn_http_req *req,
		    const struct caller *c, const char *param)
{
	json_t *list = json_array();

	(void)c;
	(void)param;
	for (size_t i = 0; i < s->cluster.n_nodes; i++)
		json_array_append_new(list, node_json(s, i));
	kn_http_reply_json(req, 200, json_pack("{s:o}", "nodes", list));
}

static json_t *audit_json(const void *row)
{
	const struct kn_audit *a = row;

	return json_pack("{s:I, s:I, s:s, s:s, s:s, s:s, s:s, s:o, s:o}",
			 "id", (json_int_t)a->id, "time_ms",
			 (json_int_t)a->time_ms, "actor", a->actor, "role",
			 a->role, "action", a->action, "object", a->object,
			 "outcome", a->outcome, "detail",
			 str_or_null(a->detail), "hash", str_or_null(a->hash));
}

static void h_audit(struct server *s, struct kn_http_req *req,
		    const struct caller *c, const char *param)
{
	struct kn_audit_filter f;
	struct kn_audit *rows = NULL;
	struct kn_error err;
	int64_t limit = 100, since = 0;
	size_t n = 0;
	json_t *list;

	(void)c;
	(void)param;
	if (kn_http_query_int(req, "limit", 1, 10000, &limit) < 0) {
		reply_err(req, KN_EINVAL, "limit", "limit must be 1..10000%s", "");
		return;
	}
	if (kn_http_query_int(req, "since", 0, INT64_MAX, &since) < 0) {
		reply_err(req, KN_EINVAL, "since",
			  "since must be a time in epoch milliseconds%s", "");
		return;
	}
	memset(&f, 0, sizeof(f));
	f.since_ms = since;
	f.actor = kn_http_query(req, "actor");
	f.action = kn_http_query(req, "action");
	f.limit = (int)limit;
	if (kn_store_audit_list(s->store, &f, &rows, &n, &err) < 0) {
		kn_http_reply_error(req, &err);
		return;
	}
	list = rows_json(rows, n, sizeof(*rows), audit_json);
	kn_audit_list_free(rows, n);
	kn_http_reply_json(req, 200, json_pack("{s:o}", "audit", list));
}

static void h_token_list(struct server *s, struct kn_http_req *req,
			 const struct caller *c, const char *param)
{
	struct kn_token_row *rows = NULL;
	struct kn_error err;
	size_t n = 0;
	json_t *list;

	(void)c;
	(void)param;
	if (kn_store_token_list(s->store, &rows, &n, &err) < 0) {
		kn_http_reply_error(req, &err);
		return;
	}
	list = rows_json(rows, n, sizeof(*rows), token_json);
	kn_token_list_free(rows, n);
	kn_http_reply_json(req, 200, json_pack("{s:o}", "tokens", list));
}

static void h_token_create(struct server *s, struct kn_http_req *req,
			   const struct caller *c, const char *param)
{
	struct kn_token_row t;
	struct kn_audit a;
	struct kn_error err;
	json_error_t jerr;
	json_t *body;
	const char *name, *role;
	char secret[64], hash[65], object[96];
	enum kn_role r;
	int64_t id = 0;
	size_t len;
	const char *text = kn_http_body(req, &len);

	(void)param;
	body = json_loadb(text, len, 0, &jerr);
	if (!json_is_object(body)) {
		json_decref(body);
		reply_err(req, KN_EINVAL, NULL,
			  "body must be a JSON object {\"name\": ..., \"role\": "
			  "...}%s", "");
		return;
	}
	name = json_string_value(json_object_get(body, "name"));
	role = json_string_value(json_object_get(body, "role"));
	if (!name || !credential_name_ok(name)) {
		json_decref(body);
		reply_err(req, KN_EINVAL, "name",
			  "name must be 1-64 characters of letters, digits, "
			  "'-', '_', '.' or '@'%s", "");
		return;
	}
	if (credential_name_reserved(name)) {
		reply_err(req, KN_EINVAL, "name",
			  "name \"%s\" is reserved: the audit log uses it for "
			  "the server's own actions", name);
		json_decref(body);
		return;
	}
	if (!role || role_parse(role, &r) < 0) {
		reply_err(req, KN_EINVAL, "role",
			  "role must be viewer, user, operator or admin; got "
			  "\"%s\"", role ? role : "(none)");
		json_decref(body);
		return;
	}
	token_generate(secret, hash);
	memset(&t, 0, sizeof(t));
	t.name = (char *)name;
	t.role = (char *)role_name(r);
	t.hash = hash;
	t.created_by = (char *)c->name;
	t.created_at = kn_now_ms();
	snprintf(object, sizeof(object), "token/%s", name);
	caller_audit(&a, c, "token.create", object, "ok", role_name(r));
	if (kn_store_token_insert(s->store, &t, &a, &id, &err) < 0) {
		json_decref(body);
		kn_http_reply_error(req, &err);
		return;
	}
	t.id = id;
	kn_http_reply_json(req, 201,
			   json_pack("{s:o, s:s}", "token", token_json(&t),
				     "secret", secret));
	json_decref(body);
}

static void h_token_revoke(struct server *s, struct kn_http_req *req,
			   const struct caller *c, const char *param)
{
	credential_revoke_reply(s, req, c, "token", param,
				kn_store_token_revoke);
}

/* Without ?all=1, alerts resolved longer ago than this are left out. */
#define ALERTS_RECENT_MS (24 * 60 * 60 * 1000LL)
#define ALERTS_LIST_MAX 1000

static json_t *alert_json(const void *row)
{
	const struct kn_alert_row *a = row;
	json_t *labels = json_loads(a->labels_json, 0, NULL);

	return json_pack("{s:I, s:s, s:s, s:s, s:s, s:o, s:s, s:f, s:I, s:I, "
			 "s:I}",
			 "id", (json_int_t)a->id, "rule", a->rule, "severity",
			 a->severity, "state", a->state, "fingerprint",
			 a->fingerprint, "labels",
			 labels ? labels : json_object(), "summary",
			 a->summary, "value", a->value, "active_at_ms",
			 (json_int_t)a->active_at, "fired_at_ms",
			 (json_int_t)a->fired_at, "resolved_at_ms",
			 (json_int_t)a->resolved_at);
}

static void h_alerts(struct server *s, struct kn_http_req *req,
		     const struct caller *c, const char *param)
{
	struct kn_alert_row *rows = NULL;
	struct kn_error err;
	int64_t all = 0;
	size_t n = 0;
	json_t *list;

	(void)c;
	(void)param;
	if (kn_http_query_int(req, "all", 0, 1, &all) < 0) {
		reply_err(req, KN_EINVAL, "all", "all must be 0 or 1%s", "");
		return;
	}
	if (kn_store_alert_list(s->store, all ? 0 : kn_now_ms() - ALERTS_RECENT_MS,
				ALERTS_LIST_MAX, &rows, &n, &err) < 0) {
		kn_http_reply_error(req, &err);
		return;
	}
	list = rows_json(rows, n, sizeof(*rows), alert_json);
	kn_alert_list_free(rows, n);
	kn_http_reply_json(req, 200,
			   json_pack("{s:o, s:b}", "alerts", list, "enabled",
				     s->monitor != NULL));
}

static void h_events(struct server *s, struct kn_http_req *req,
		     const struct caller *c, const char *param)
{
	int64_t follow = 0, since = 0;

	(void)c;
	(void)param;
	if (kn_http_query_int(req, "follow", 0, 1, &follow) < 0 ||
	    kn_http_query_int(req, "since", 0, INT64_MAX, &since) < 0) {
		reply_err(req, KN_EINVAL, NULL,
			  "follow must be 0 or 1 and since a sequence number%s",
			  "");
		return;
	}
	if (follow && !api_follow_admitted(s, req))
		return;
	feed_serve(s, req, since, follow != 0);
}

/* The job core's routes and the server's own; each service has its own
   table (service.h). */
static const struct route routes[] = {
	{"GET", "/healthz", KN_ROLE_VIEWER, true, NULL, h_healthz},
	{"GET", "/v1/openapi.json", KN_ROLE_VIEWER, true, NULL,
	 openapi_h_document},
	{"GET", "/v1/whoami", KN_ROLE_VIEWER, false, NULL, h_whoami},
	{"POST", "/v1/jobs", KN_ROLE_USER, false, "job.submit", h_job_submit},
	{"GET", "/v1/jobs", KN_ROLE_VIEWER, false, NULL, h_job_list},
	{"GET", "/v1/jobs/{id}", KN_ROLE_VIEWER, false, NULL, h_job_get},
	{"POST", "/v1/jobs/{id}/cancel", KN_ROLE_USER, false, "job.cancel",
	 h_job_cancel},
	{"POST", "/v1/jobs/{id}/evict", KN_ROLE_USER, false, "job.evict",
	 h_job_evict},
	{"GET", "/v1/jobs/{id}/logs", KN_ROLE_VIEWER, false, NULL, h_job_logs},
	{"GET", "/v1/nodes", KN_ROLE_VIEWER, false, NULL, h_nodes},
	{"POST", "/v1/nodes/{name}/cordon", KN_ROLE_OPERATOR, false,
	 "node.cordon", h_node_cordon},
	{"POST", "/v1/nodes/{name}/drain", KN_ROLE_OPERATOR, false,
	 "node.drain", h_node_drain},
	{"POST", "/v1/nodes/{name}/uncordon", KN_ROLE_OPERATOR, false,
	 "node.uncordon", h_node_uncordon},
	{"POST", "/v1/nodes/{name}/health", KN_ROLE_OPERATOR, false,
	 "node.health", h_node_health},
	{"GET", "/v1/audit", KN_ROLE_VIEWER, false, NULL, h_audit},
	{"GET", "/v1/audit/verify", KN_ROLE_ADMIN, false, "audit.verify",
	 audit_h_verify},
	{"GET", "/v1/alerts", KN_ROLE_VIEWER, false, NULL, h_alerts},
	{"GET", "/v1/events", KN_ROLE_VIEWER, false, NULL, h_events},
	{"GET", "/v1/tokens", KN_ROLE_ADMIN, false, "token.list", h_token_list},
	{"POST", "/v1/tokens", KN_ROLE_ADMIN, false, "token.create",
	 h_token_create},
	{"DELETE", "/v1/tokens/{name}", KN_ROLE_ADMIN, false, "token.revoke",
	 h_token_revoke},
	{0},
};

/* First in kn_services: its routes are tried before any service's. It
   starts nothing; the server itself sets up what they serve. */
const struct service core_api_service = {
	.name = "core",
	.phase = SERVICE_PHASE_NODES,
	.routes = routes,
};

/*
 * Match path against pattern; a "{...}" segment captures into param.
 * Returns true on a match.
 */
static bool match(const char *pattern, const char *path, char *param,
		  size_t plen)
{
	param[0] = '\0';
	while (*pattern && *path) {
		if (*pattern == '{') {
			const char *pend = strchr(pattern, '}');
			const char *seg_end = strchr(path, '/');
			size_t n = seg_end ? (size_t)(seg_end - path) : strlen(path);
			if (!pend || n == 0 || n >= plen)
				return false;
			memcpy(param, path, n);
			param[n] = '\0';
			pattern = pend + 1;
			path += n;
			continue;
		}
		if (*pattern != *path)
			return false;
		pattern++;
		path++;
	}
	return *pattern == '\0' && *path == '\0';
}

/*
 * Who may call route r: the token from the headers (else the client
 * certificate's name, api_tls.c), and the route's least
 * role. true with *c filled, or false when req was answered (401, or 403
 * on the audit record).
 */
static bool authorize(struct server *s, struct kn_http_req *req,
		      const struct route *r, struct caller *c)
{
	const char *method = kn_http_method(req), *path = kn_http_path(req);
	const char *authz, *cert;
	struct kn_error err;
	char object[96];

	memset(c, 0, sizeof(*c));
	if (r && r->public_route)
		return true;
	authz = kn_http_header(req, "Authorization");
	cert = authz ? NULL : kn_http_client_cert(req);
	if ((cert ? api_tls_caller(s, cert, c, &err)
		  : auth_check(s, authz, c, &err)) < 0) {
		kn_http_reply_error(req, &err);
		return false;
	}
	kn_http_set_owner(req, c->name);
	if (!r || c->role >= r->least)
		return true;
	kn_errorf(&err, KN_EPERM, NULL, "role %s may not %s %s (needs %s)",
		  role_name(c->role), method, path, role_name(r->least));
	snprintf(object, sizeof(object), "%s %s", method, path);
	core_audit(s, c, r->action ? r->action : "request", object, "denied",
		   err.message);
	kn_http_reply_error(req, &err);
	return false;
}

/*
 * The route for req, with its path parameter and the service whose
 * table holds it (in *svc, unless svc is NULL); NULL when none has its
 * method and path (*path_known says whether one has the path).
 */
static const struct route *route_find(struct kn_http_req *req, char *param,
				      size_t plen, bool *path_known,
				      const struct service **svc)
{
	const char *method = kn_http_method(req), *path = kn_http_path(req);

	*path_known = false;
	for (size_t k = 0; kn_services[k]; k++) {
		for (const struct route *r = kn_services[k]->routes;
		     r && r->method; r++) {
			if (!match(r->pattern, path, param, plen))
				continue;
			*path_known = true;
			if (strcmp(r->method, method))
				continue;
			if (svc)
				*svc = kn_services[k];
			return r;
		}
	}
	return NULL;
}

bool api_admit(struct kn_http_req *req, void *arg)
{
	struct server *s = arg;
	char param[256];
	bool path_known;
	struct caller c;
	const struct route *r;
	const struct service *svc = NULL;

	if (console_serve(s, req))
		return false;
	r = route_find(req, param, sizeof(param), &path_known, &svc);
	/* A body is read only for a caller the route would serve: checked
	   from the headers alone, before any of it is kept. */
	if (!authorize(s, req, r, &c))
		return false;
	if (r && svc->body_cap && svc->body_cap(r))
		kn_http_allow_body(req, svc->body_cap(r));
	return true;
}

bool api_follow_admitted(struct server *s, struct kn_http_req *req)
{
	struct kn_error err;
	size_t open = kn_http_streams_of(req);

	if (open < (size_t)s->cfg.max_follows_per_token)
		return true;
	kn_errorf(&err, KN_ELIMIT, "follow",
		  "this token already has %zu streams open (events and log "
		  "follows, at most %d per token): close one first",
		  open, s->cfg.max_follows_per_token);
	kn_http_reply_error(req, &err);
	return false;
}

void api_handle(struct kn_http_req *req, void *arg)
{
	struct server *s = arg;
	const char *path = kn_http_path(req);
	char param[256];
	bool path_known;
	const struct route *r = route_find(req, param, sizeof(param),
					   &path_known, NULL);
	struct caller c;

	/* The console's page and files: public, outside the API. */
	if (console_serve(s, req))
		return;
	if (!r) {
		if (path_known)
			reply_err(req, KN_EINVAL, NULL,
				  "method not allowed on %s", path);
		else
			reply_err(req, KN_ENOTFOUND, NULL, "no such route: %s",
				  path);
		return;
	}
	if (authorize(s, req, r, &c))
		r->fn(s, req, &c, param);
}
