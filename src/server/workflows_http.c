/*
 * Workflow runs' HTTP handlers (docs/workflows.md): run a workflow file
 * with its job files, list and read runs with their steps and costs,
 * cancel a run and retry its failed steps. The engine is workflows.c.
 */
#include "wfsvc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Job files sent with one workflow: one per step at most. */
#define FILES_MAX KN_SPEC_MAX_STEPS
/* A git revision: 40 (SHA-1) or 64 (SHA-256) hex digits. */
#define REVISION_MAX 64

static json_t *str_or_null(const char *v)
{
	return v ? json_string(v) : json_null();
}

/* What a step's or run's jobs cost, summed from the ledger's rows. */
struct cost_sum {
	double usd, gpu_seconds;
	bool unpriced;
};

static void cost_add(struct cost_sum *sum, const json_t *row)
{
	sum->usd += json_number_value(json_object_get(row, "cost_usd"));
	sum->gpu_seconds +=
		json_number_value(json_object_get(row, "gpu_seconds"));
	sum->unpriced |= json_is_true(json_object_get(row, "unpriced"));
}

static void cost_set(json_t *o, const struct cost_sum *sum, bool known)
{
	json_object_set_new(o, "cost_usd",
			    known ? json_real(sum->usd) : json_null());
	json_object_set_new(o, "gpu_seconds",
			    known ? json_real(sum->gpu_seconds) : json_null());
	json_object_set_new(o, "cost_unpriced", json_boolean(sum->unpriced));
}

/*
 * Step i's attempts, oldest first, each with its job's cost from costs
 * (cost_by_job; NULL when the ledger could not be read), summed into
 * *sum.
 */
static json_t *attempts_json(const struct wf_run *r, size_t i,
			     const json_t *costs, struct cost_sum *sum)
{
	json_t *list = json_array();

	for (size_t k = 0; k < r->n_att; k++) {
		const struct kn_wf_attempt_row *a = &r->att[k];
		json_t *o, *row;
		char key[24];

		if (a->index != (int)i)
			continue;
		o = json_pack("{s:i, s:o, s:o, s:I, s:I}", "attempt",
			      a->attempt, "job",
			      a->job_id ? json_integer(a->job_id) : json_null(),
			      "outcome", str_or_null(a->outcome),
			      "started_at_ms", (json_int_t)a->started_at,
			      "ended_at_ms", (json_int_t)a->ended_at);
		if (a->job_id) {
			struct cost_sum one = {0};

			snprintf(key, sizeof(key), "%lld", (long long)a->job_id);
			row = json_object_get(costs, key);
			cost_add(&one, row);
			cost_add(sum, row);
			cost_set(o, &one, costs != NULL);
		}
		json_array_append_new(list, o);
	}
	return list;
}

static json_t *step_json(const struct wf_run *r, size_t i, int64_t now,
			 const json_t *costs, struct cost_sum *run_sum)
{
	struct cost_sum sum = {0};
	const struct kn_workflow_step *st = &r->spec->steps[i];
	const struct kn_wf_step_row *p = &r->steps[i];
	static const char *const policies[] = {
		[KN_ON_FAILURE_STOP] = "stop",
		[KN_ON_FAILURE_CONTINUE] = "continue",
		[KN_ON_FAILURE_RETRY] = "retry",
	};
	json_t *needs = json_array(), *o;
	int64_t end = p->ended_at ? p->ended_at : now;
	json_t *version = json_object_get(r->v[i].metrics, "version");

	for (size_t k = 0; k < st->n_needs; k++)
		json_array_append_new(needs, json_string(st->needs[k]));
	o = json_pack(
		"{s:s, s:s, s:o, s:o, s:i, s:i, s:s, s:I, s:I, s:I, s:o, s:o, "
		"s:b}",
		"name", p->name, "state", p->state, "needs", needs, "job",
		p->job_id ? json_integer(p->job_id) : json_null(), "attempts",
		p->attempts, "retries",
		st->on_failure == KN_ON_FAILURE_RETRY ? st->retries : 0,
		"on_failure", policies[st->on_failure], "started_at_ms",
		(json_int_t)p->started_at, "ended_at_ms",
		(json_int_t)p->ended_at, "duration_ms",
		(json_int_t)(p->started_at ? end - p->started_at : 0),
		"reason", str_or_null(p->reason), "metrics",
		r->v[i].metrics ? json_incref(r->v[i].metrics) : json_null(),
		"skipped_by_condition", p->by_condition);
	json_object_set_new(o, "kind",
			    json_string(st->kind == KN_STEP_REGISTER ? "register"
					: st->kind == KN_STEP_DEPLOY ? "deploy"
								     : "job"));
	json_object_set_new(o, "attempt_history",
			    attempts_json(r, i, costs, &sum));
	/* Register and deploy steps run in the server: no GPU time. */
	if (st->kind == KN_STEP_JOB) {
		cost_set(o, &sum, costs != NULL);
		run_sum->usd += sum.usd;
		run_sum->gpu_seconds += sum.gpu_seconds;
		run_sum->unpriced |= sum.unpriced;
	} else {
		json_object_set_new(o, "cost_usd", json_null());
		json_object_set_new(o, "gpu_seconds", json_null());
		json_object_set_new(o, "cost_unpriced", json_false());
	}
	/* What a register step made: NAME@VERSION. */
	if (st->kind == KN_STEP_REGISTER && json_is_integer(version))
		json_object_set_new(o, "model",
				    json_sprintf("%s@%lld", st->model,
						 (long long)json_integer_value(
							 version)));
	return o;
}

/* costs: cost_by_job's rows, for the detail (NULL: not known). */
static json_t *run_json(const struct wf_run *r, bool detail,
			const json_t *costs)
{
	json_t *o, *counts = json_object(), *steps = json_array();
	struct cost_sum sum = {0};
	int64_t now = kn_now_ms();

	for (size_t i = 0; i < r->n; i++) {
		json_t *c = json_object_get(counts, r->steps[i].state);
		json_object_set_new(counts, r->steps[i].state,
				    json_integer(c ? json_integer_value(c) + 1
						   : 1));
		if (detail)
			json_array_append_new(steps,
					      step_json(r, i, now, costs, &sum));
	}
	o = json_pack("{s:I, s:s, s:s, s:s, s:o, s:s, s:s, s:o, s:I, s:I, "
		      "s:I, s:i, s:o}",
		      "id", (json_int_t)r->row.id, "name", r->row.name,
		      "owner", r->row.owner, "state", r->row.state, "reason",
		      str_or_null(r->row.reason), "filename", r->row.filename,
		      "digest", r->row.digest, "revision",
		      str_or_null(r->row.revision), "submitted_at_ms",
		      (json_int_t)r->row.submitted_at, "started_at_ms",
		      (json_int_t)r->row.started_at, "ended_at_ms",
		      (json_int_t)r->row.ended_at, "steps_total", (int)r->n,
		      "steps_by_state", counts);
	if (detail) {
		json_t *order = json_array(), *files = json_array();
		const char *key;
		json_t *v;

		for (size_t k = 0; k < r->n; k++)
			json_array_append_new(
				order,
				json_string(r->spec->steps[r->spec->order[k]]
						    .name));
		json_object_foreach(r->files, key, v)
			json_array_append_new(files, json_string(key));
		json_object_set_new(o, "steps", steps);
		json_object_set_new(o, "order", order);
		json_object_set_new(o, "files", files);
		cost_set(o, &sum, costs != NULL);
	} else {
		json_decref(steps);
	}
	return o;
}

/* {"workflow": ...} for run id, or NULL and err. */
static json_t *run_answer(struct server *s, int64_t id, struct kn_error *err)
{
	struct wf_run r;
	struct kn_error cerr;
	json_t *costs = NULL, *o;

	if (wf_run_load(s, id, &r, err) < 0)
		return NULL;
	/* The run's jobs were all submitted after it was. */
	if (cost_by_job(s, r.row.submitted_at, &costs, &cerr) < 0)
		kn_log(KN_LOG_WARN, "workflow run %lld: its cost: %s",
		       (long long)id, cerr.message);
	o = json_pack("{s:o}", "workflow", run_json(&r, true, costs));
	json_decref(costs);
	wf_run_release(&r);
	return o;
}


static bool hex_text(const char *v, size_t min, size_t max)
{
	size_t n = strlen(v);

	if (n < min || n > max)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!strchr("0123456789abcdef", v[i]))
			return false;
	return true;
}

/*
 * Check a run request the way `kiln validate` checks the files: the
 * workflow, then each step's job file as the client sent it, each error
 * naming its file. A deploy step's deployment must exist already, and a
 * register step's signer must be granted to the caller (refused and
 * audited here, before any job runs; checked again when it signs).
 */
static int check_request(struct server *s, const struct caller *c,
			 const char *text,
			 const char *filename, json_t *files,
			 struct kn_workflow_spec **out, struct kn_error *err)
{
	struct kn_workflow_spec *w = NULL;
	const char *kind = kn_spec_kind(text, strlen(text));
	int rc;

	if (!kind || strcmp(kind, "Workflow") != 0)
		return kn_errorf(err, KN_EINVAL, "spec",
				 "%s: kind: a workflow run needs a `kind: "
				 "Workflow` file%s%s",
				 filename, kind ? "; this one is a " : "",
				 kind ? kind : "");
	rc = kn_workflow_spec_parse(text, strlen(text), filename, &w, err);
	if (rc < 0)
		return rc;
	for (size_t i = 0; rc == 0 && i < w->n_steps; i++) {
		const struct kn_workflow_step *st = &w->steps[i];
		struct kn_job_spec *job = NULL;
		const char *body;
		char *name;

		if (st->kind == KN_STEP_DEPLOY &&
		    !wf_deployment_exists(s, st->deployment)) {
			rc = kn_errorf(err, KN_EINVAL, "spec",
				       "%s: steps[%zu] (%s): deploy: no "
				       "deployment named %s: deploy it first "
				       "(kiln deploy FILE); the step rolls an "
				       "existing one to the registered version",
				       filename, i, st->name, st->deployment);
			break;
		}
		if (st->kind == KN_STEP_REGISTER && st->signer) {
			const struct kn_signer_conf *sg;
			char *object = kn_asprintf("workflow/%s", w->name);

			rc = models_signer_check(s, c, st->signer, object, &sg,
						 err);
			free(object);
			if (rc < 0)
				break;
		}
		if (!st->job_file)
			continue;
		body = json_string_value(json_object_get(files, st->job_file));
		name = wf_job_file_name(filename, st->job_file);
		if (!body)
			rc = kn_errorf(err, KN_EINVAL, "files",
				       "%s: steps[%zu].job: %s was not sent "
				       "with the workflow (files[\"%s\"])",
				       filename, i, name, st->job_file);
		else
			rc = kn_job_spec_parse(body, strlen(body), name, &job,
					       err);
		if (rc == 0)
			rc = kn_job_spec_check_step_job(job, name, i, filename,
							err);
		kn_job_spec_free(job);
		free(name);
	}
	if (rc < 0) {
		kn_workflow_spec_free(w);
		return rc;
	}
	*out = w;
	return 0;
}

/* POST /v1/workflows's body, its fields checked (they point into it). */
struct run_request {
	const char *text, *filename, *path, *revision;
	json_t *files; /* {relative path: text}, or NULL */
	char digest[KN_SHA256_HEX_LEN + 1]; /* the text's */
};

static const char *doc_string(json_t *doc, const char *key, const char *dflt)
{
	json_t *v = json_object_get(doc, key);

	return json_is_string(v) ? json_string_value(v) : dflt;
}

/* Read and check the body's fields into *r (doc: the parsed body, or
   NULL with jerr saying why it does not parse). */
static int run_request_read(json_t *doc, const json_error_t *jerr,
			    struct run_request *r, struct kn_error *err)
{
	const char *digest, *key;
	json_t *v;

	if (!json_is_object(doc))
		return kn_errorf(err, KN_EINVAL, NULL,
				 "the body must be a JSON object {spec, "
				 "filename, files, digest, revision}%s%s",
				 doc ? "" : ": ", doc ? "" : jerr->text);
	r->text = json_string_value(json_object_get(doc, "spec"));
	r->filename = doc_string(doc, "filename", "workflow");
	r->path = doc_string(doc, "path", "");
	digest = doc_string(doc, "digest", NULL);
	r->revision = doc_string(doc, "revision", NULL);
	r->files = json_object_get(doc, "files");
	if (!r->text)
		return kn_errorf(err, KN_EINVAL, "spec",
				 "spec: the workflow file's text is required");
	if (r->path[0] && r->path[0] != '/')
		return kn_errorf(err, KN_EINVAL, "path",
				 "path must be absolute; got \"%s\"", r->path);
	if (r->files && !json_is_object(r->files))
		return kn_errorf(err, KN_EINVAL, "files",
				 "files must be an object {relative path: "
				 "text}");
	if (json_object_size(r->files) > FILES_MAX)
		return kn_errorf(err, KN_EINVAL, "files",
				 "files: at most %d job files per workflow; "
				 "got %zu",
				 FILES_MAX, json_object_size(r->files));
	json_object_foreach(r->files, key, v) {
		if (!json_is_string(v))
			return kn_errorf(err, KN_EINVAL, "files",
					 "files[\"%s\"] must be the file's "
					 "text",
					 key);
	}
	if (r->revision && !hex_text(r->revision, 7, REVISION_MAX))
		return kn_errorf(err, KN_EINVAL, "revision",
				 "revision must be a git revision (7 to %d "
				 "hex digits) or null",
				 REVISION_MAX);
	kn_sha256_hex(r->text, strlen(r->text), r->digest);
	if (digest && strcmp(digest, r->digest) != 0)
		return kn_errorf(err, KN_EINVAL, "digest",
				 "digest: the workflow text's sha256 is %s, "
				 "not the digest sent (%.64s)",
				 r->digest, digest);
	return 0;
}

/* The run's row, queued now, and its steps' (pending; free them). */
static struct kn_wf_step_row *run_rows(const struct run_request *r,
				       const struct kn_workflow_spec *w,
				       const struct caller *c,
				       char *files_text,
				       struct kn_wf_run_row *row)
{
	struct kn_wf_step_row *steps = kn_xcalloc(w->n_steps, sizeof(*steps));

	memset(row, 0, sizeof(*row));
	row->name = w->name;
	row->owner = (char *)c->name;
	row->filename = (char *)r->filename;
	row->path = (char *)r->path;
	row->spec_yaml = (char *)r->text;
	row->files_json = files_text;
	row->digest = (char *)r->digest;
	row->revision = (char *)r->revision;
	row->state = "queued";
	row->submitted_at = kn_now_ms();
	for (size_t i = 0; i < w->n_steps; i++) {
		steps[i].index = (int)i;
		steps[i].name = w->steps[i].name;
		steps[i].state = "pending";
	}
	return steps;
}

static void workflows_h_run(struct server *s, struct kn_http_req *req,
			    const struct caller *c, const char *param)
{
	struct kn_workflow_spec *w = NULL;
	struct kn_wf_step_row *steps = NULL;
	struct kn_wf_run_row row;
	struct run_request r;
	struct kn_audit a;
	struct kn_error err;
	json_error_t jerr;
	size_t len;
	const char *body = kn_http_body(req, &len);
	json_t *doc, *answer;
	char *files_text = NULL;
	int64_t id = 0;

	(void)param;
	memset(&r, 0, sizeof(r));
	doc = json_loadb(body, len, 0, &jerr);
	if (run_request_read(doc, &jerr, &r, &err) < 0 ||
	    check_request(s, c, r.text, r.filename, r.files, &w, &err) < 0)
		goto fail;
	files_text = r.files ? json_dumps(r.files,
					  JSON_COMPACT | JSON_SORT_KEYS)
			     : kn_xstrdup("{}");
	steps = run_rows(&r, w, c, files_text, &row);
	caller_audit(&a, c, "workflow.run", NULL, "ok", w->name);
	if (idem_begin(s, req, c))
		goto out;
	if (kn_store_wf_run_insert(core_store(s), &row, steps, w->n_steps, &a, &id,
				   &err) < 0)
		goto fail;
	kn_log(KN_LOG_INFO, "workflow run %lld (%s, %zu steps) by %s",
	       (long long)id, w->name, w->n_steps, c->name);
	wf_advance_logged(s, id);
	answer = run_answer(s, id, &err);
	if (!answer)
		goto fail;
	idem_reply(s, req, c, 201, answer);
	goto out;
fail:
	idem_abort(s, req);
	kn_http_reply_error(req, &err);
out:
	KN_FREE_ALL(steps, files_text);
	kn_workflow_spec_free(w);
	json_decref(doc);
}

static void workflows_h_list(struct server *s, struct kn_http_req *req,
		      const struct caller *c, const char *param)
{
	struct kn_wf_run_row *rows = NULL;
	struct kn_error err;
	size_t n = 0;
	json_t *list = json_array();

	(void)c;
	(void)param;
	if (kn_store_wf_run_list(core_store(s), false, &rows, &n, &err) < 0) {
		json_decref(list);
		kn_http_reply_error(req, &err);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		struct wf_run r;

		if (wf_run_load(s, rows[i].id, &r, &err) < 0) {
			kn_log(KN_LOG_WARN, "workflow run %lld: %s",
			       (long long)rows[i].id, err.message);
			continue;
		}
		json_array_append_new(list, run_json(&r, false, NULL));
		wf_run_release(&r);
	}
	kn_wf_run_list_free(rows, n);
	kn_http_reply_json(req, 200, json_pack("{s:o}", "workflows", list));
}

static void workflows_h_get(struct server *s, struct kn_http_req *req,
		     const struct caller *c, const char *param)
{
	struct kn_error err;
	int64_t id = 0;

	(void)c;
	if (route_id_or_reply(req, param, "workflow run", &id))
		route_reply(req, 200, run_answer(s, id, &err), &err);
}

/*
 * Load run id for a change by c: a user changes only its own runs. On
 * refusal the answer is sent (and audited) and -1 returned.
 */
static int load_for_change(struct server *s, struct kn_http_req *req,
			   const struct caller *c, const char *param,
			   const char *action, struct wf_run *r)
{
	struct kn_error err;
	int64_t id = 0;

	if (!route_id_or_reply(req, param, "workflow run", &id))
		return -1;
	if (wf_run_load(s, id, r, &err) < 0) {
		kn_http_reply_error(req, &err);
		return -1;
	}
	if (!caller_owns(c, r->row.owner)) {
		char object[40];

		kn_errorf(&err, KN_EPERM, NULL,
			  "workflow run %lld belongs to %s; a user may change "
			  "only its own runs",
			  (long long)id, r->row.owner);
		snprintf(object, sizeof(object), "workflow/%lld",
			 (long long)id);
		core_audit(s, c, action, object, "denied", err.message);
		kn_http_reply_error(req, &err);
		wf_run_release(r);
		return -1;
	}
	return 0;
}

static void workflows_h_cancel(struct server *s, struct kn_http_req *req,
			const struct caller *c, const char *param)
{
	struct wf_run r;
	struct kn_audit a;
	struct kn_error err;
	int64_t id = 0;
	int rc;

	if (load_for_change(s, req, c, param, "workflow.cancel", &r) < 0)
		return;
	id = r.row.id;
	if (wf_run_ended(r.row.state)) {
		kn_errorf(&err, KN_ECONFLICT, "state",
			  "workflow run %lld has already %s",
			  (long long)r.row.id, r.row.state);
		goto fail;
	}
	/*
	 * One transaction: the run ends first, so the ends of its jobs (a
	 * queued one ends inside jobs_cancel) find nothing to advance, and a
	 * crash leaves either the whole cancel or none of it.
	 */
	r.row.ended_at = kn_now_ms();
	wf_set_str(&r.row.reason, kn_asprintf("cancelled by %s", c->name));
	caller_audit(&a, c, "workflow.cancel", NULL, "ok", NULL);
	rc = kn_store_begin(core_store(s), &err);
	if (rc == 0)
		rc = wf_run_save(s, &r, "cancelled", &a, &err);
	for (size_t i = 0; rc == 0 && i < r.n; i++) {
		struct kn_error jerr;

		if (r.v[i].state == WF_RUNNING && r.steps[i].job_id &&
		    jobs_cancel(s, c, r.steps[i].job_id, &jerr) < 0 &&
		    jerr.code != KN_ECONFLICT)
			kn_log(KN_LOG_WARN, "workflow run %lld: cancelling job "
			       "%lld: %s", (long long)r.row.id,
			       (long long)r.steps[i].job_id, jerr.message);
		if (r.v[i].state != WF_RUNNING && r.v[i].state != WF_PENDING)
			continue;
		r.steps[i].ended_at = r.row.ended_at;
		wf_set_str(&r.steps[i].reason,
			kn_asprintf("run cancelled by %s", c->name));
		rc = wf_attempt_close(s, &r, i, "cancelled", r.row.ended_at, &err);
		if (rc == 0)
			rc = wf_step_save(s, &r, i, "cancelled", &err);
	}
	rc = core_store_end(core_store(s), rc, &err);
	if (rc < 0) {
		goto fail;
	}
	for (size_t i = 0; i < r.n; i++)
		if (r.steps[i].ended_at == r.row.ended_at &&
		    r.v[i].state == WF_CANCELLED)
			wf_publish(s, &r, i);
	wf_publish(s, &r, r.n);
	wf_run_release(&r);
	route_reply(req, 200, run_answer(s, id, &err), &err);
	return;
fail:
	kn_http_reply_error(req, &err);
	wf_run_release(&r);
}

static void workflows_h_retry(struct server *s, struct kn_http_req *req,
		       const struct caller *c, const char *param)
{
	struct wf_run r;
	struct kn_audit a;
	struct kn_error err;
	bool *again = NULL;
	char detail[64];
	size_t n_again;
	int64_t id;
	int rc;

	if (load_for_change(s, req, c, param, "workflow.retry", &r) < 0)
		return;
	id = r.row.id;
	if (strcmp(r.row.state, "failed") != 0 &&
	    strcmp(r.row.state, "cancelled") != 0) {
		kn_errorf(&err, KN_ECONFLICT, "state",
			  "workflow run %lld is %s; only a failed or cancelled "
			  "run is retried",
			  (long long)id, r.row.state);
		goto fail;
	}
	again = kn_xcalloc(r.n ? r.n : 1, sizeof(*again));
	n_again = wf_retry_plan(r.spec, r.v, again);
	rc = kn_store_begin(core_store(s), &err);
	for (size_t i = 0; rc == 0 && i < r.n; i++) {
		struct kn_wf_step_row *p = &r.steps[i];

		if (!again[i])
			continue;
		p->by_condition = false;
		p->attempts = 0;
		p->started_at = p->ended_at = 0;
		wf_set_str(&p->reason, NULL);
		wf_set_str(&p->metrics_json, NULL);
		rc = wf_step_save(s, &r, i, "pending", &err);
	}
	if (rc == 0) {
		snprintf(detail, sizeof(detail), "%zu step%s again", n_again,
			 n_again == 1 ? "" : "s");
		caller_audit(&a, c, "workflow.retry", NULL, "ok", detail);
		r.row.ended_at = 0;
		wf_set_str(&r.row.reason, NULL);
		rc = wf_run_save(s, &r, "running", &a, &err);
	}
	rc = core_store_end(core_store(s), rc, &err);
	if (rc < 0) {
		goto fail;
	}
	wf_publish(s, &r, r.n);
	wf_run_release(&r);
	free(again);
	wf_advance_logged(s, id);
	route_reply(req, 200, run_answer(s, id, &err), &err);
	return;
fail:
	free(again);
	kn_http_reply_error(req, &err);
	wf_run_release(&r);
}

static const struct route routes[] = {
	/* Workflow runs (workflows.c): a user runs and changes its own. */
	{"POST", "/v1/workflows", KN_ROLE_USER, false, "workflow.run",
	 workflows_h_run},
	{"GET", "/v1/workflows", KN_ROLE_VIEWER, false, NULL, workflows_h_list},
	{"GET", "/v1/workflows/{id}", KN_ROLE_VIEWER, false, NULL,
	 workflows_h_get},
	{"POST", "/v1/workflows/{id}/cancel", KN_ROLE_USER, false,
	 "workflow.cancel", workflows_h_cancel},
	{"POST", "/v1/workflows/{id}/retry", KN_ROLE_USER, false,
	 "workflow.retry", workflows_h_retry},
	{0},
};

const struct service workflows_service = {
	.name = "workflows",
	.phase = SERVICE_PHASE_RECOVERED,
	.start = workflows_start,
	.stop = workflows_stop,
	.hooks = &workflows_job_hooks,
	.routes = routes,
};
