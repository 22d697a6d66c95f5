/*
 * Workflow runs: a `kind: Workflow` file's steps run as jobs, in the order
 * their needs give, with their failure policies, conditions and retries
 * (docs/workflows.md).
 *
 * The store is the engine's only state. A run row keeps the texts the
 * client sent (the workflow and its job files), each step row the job it
 * runs as now and each attempt row one job a step started (all of them,
 * across retries: a step's cost is theirs); advance() reads them, asks
 * wfplan.c what each step does next and writes the answer. It runs after
 * a step's job ends (one call from jobs.c), after an API call and for
 * every active run at start-up, so a server killed mid-DAG picks up where
 * the store says it was: the jobs themselves are re-adopted by jobs.c,
 * and a step whose job ended while the server was down is judged then. A
 * step's job is submitted in the same transaction that records it on the
 * step, so a crash never leaves a job the run does not know about (which
 * a restart would then start twice). The alternative, a run object in memory
 * mirrored to the store, would have to be rebuilt at start-up from the
 * same rows anyway.
 *
 * A step is a job submitted as the run's owner, so the queue, placement,
 * retries of the job itself, checkpoints and outputs are the jobs' own;
 * the step's on_failure retry submits a new job each time. What makes a
 * job a step, besides its row here, is what its tasks get at launch
 * (workflows_task_env): KILN_INPUTS, the earlier steps' outputs by store
 * URL and sha256, and KILN_REQUIRES, its prerequisites; the shim fetches
 * and checks them on the node (cmd/shim.c), so no file passes through
 * the server.
 */
#include "internal.h"
#include "server/wfplan.h"
#include "ckpt/ckpt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libfyaml.h>

/* metrics.json is a flat object of numbers: a few KiB at most. */
#define METRICS_MAX_BYTES (64 * 1024)
/* Job files sent with one workflow: one per step at most. */
#define FILES_MAX KN_SPEC_MAX_STEPS
/* A git revision: 40 (SHA-1) or 64 (SHA-256) hex digits. */
#define REVISION_MAX 64

/* A run read from the store, with its parsed workflow. */
struct wf_run {
	struct kn_wf_run_row row;
	struct kn_wf_step_row *steps; /* as spec->steps */
	size_t n;
	struct kn_workflow_spec *spec;
	json_t *files;           /* {relative path: text} */
	struct wf_step_view *v;  /* the steps' states for wfplan */
	struct kn_wf_attempt_row *att; /* every step's, oldest first */
	size_t n_att;
};

static bool run_ended(const char *state)
{
	return strcmp(state, "queued") != 0 && strcmp(state, "running") != 0;
}

static void wf_run_release(struct wf_run *r)
{
	for (size_t i = 0; r->v && i < r->n; i++)
		json_decref(r->v[i].metrics);
	free(r->v);
	kn_wf_attempt_list_free(r->att, r->n_att);
	kn_wf_step_list_free(r->steps, r->n);
	kn_workflow_spec_free(r->spec);
	json_decref(r->files);
	kn_wf_run_row_release(&r->row);
	memset(r, 0, sizeof(*r));
}

static void view_set(struct wf_run *r, size_t i)
{
	const struct kn_wf_step_row *p = &r->steps[i];
	int st = wf_step_state_parse(p->state);

	r->v[i].state = st < 0 ? WF_FAILED : (enum wf_step_state)st;
	r->v[i].by_condition = p->by_condition;
	json_decref(r->v[i].metrics);
	r->v[i].metrics = p->metrics_json ? json_loads(p->metrics_json, 0, NULL)
					  : NULL;
}

static int wf_run_load(struct server *s, int64_t id, struct wf_run *r,
		       struct kn_error *err)
{
	int rc;

	memset(r, 0, sizeof(*r));
	rc = kn_store_wf_run_get(s->store, id, &r->row, err);
	if (rc == 0)
		rc = kn_store_wf_step_list(s->store, id, &r->steps, &r->n, err);
	if (rc == 0)
		rc = kn_store_wf_attempt_list(s->store, id, &r->att, &r->n_att,
					      err);
	if (rc == 0)
		rc = kn_workflow_spec_parse(r->row.spec_yaml,
					    strlen(r->row.spec_yaml),
					    r->row.filename, &r->spec, err);
	if (rc == 0 && r->spec->n_steps != r->n)
		rc = kn_errorf(err, KN_EIO, NULL,
			       "workflow run %lld: %zu step rows for %zu steps",
			       (long long)id, r->n, r->spec->n_steps);
	if (rc < 0) {
		wf_run_release(r);
		return rc;
	}
	r->files = json_loads(r->row.files_json, 0, NULL);
	if (!json_is_object(r->files)) {
		json_decref(r->files);
		r->files = json_object();
	}
	r->v = kn_xcalloc(r->n ? r->n : 1, sizeof(*r->v));
	for (size_t i = 0; i < r->n; i++)
		view_set(r, i);
	return 0;
}

static void set_str(char **field, char *value)
{
	free(*field);
	*field = value;
}

static int step_save(struct server *s, struct wf_run *r, size_t i,
		     const char *state, struct kn_error *err)
{
	set_str(&r->steps[i].state, kn_xstrdup(state));
	view_set(r, i);
	return kn_store_wf_step_put(s->store, &r->steps[i], err);
}

/* Step i's newest attempt, or NULL before its first. */
static struct kn_wf_attempt_row *attempt_last(struct wf_run *r, size_t i)
{
	struct kn_wf_attempt_row *last = NULL;

	for (size_t k = 0; k < r->n_att; k++)
		if (r->att[k].index == (int)i &&
		    (!last || r->att[k].attempt > last->attempt))
			last = &r->att[k];
	return last;
}

/*
 * Record a new attempt of step i: job_id (0: none), outcome NULL while it
 * runs. Numbered after the step's newest, so `kiln workflow retry`, which
 * resets the step's attempts count, keeps the older ones listed.
 */
static int attempt_open(struct server *s, struct wf_run *r, size_t i,
			int64_t job_id, const char *outcome, int64_t ended_at,
			struct kn_error *err)
{
	const struct kn_wf_attempt_row *last = attempt_last(r, i);
	int number = last ? last->attempt + 1 : 1;
	struct kn_wf_attempt_row *a;

	r->att = kn_xrealloc(r->att, (r->n_att + 1) * sizeof(*r->att));
	a = &r->att[r->n_att++];
	memset(a, 0, sizeof(*a));
	a->run_id = r->row.id;
	a->index = (int)i;
	a->attempt = number;
	a->job_id = job_id;
	a->outcome = outcome ? kn_xstrdup(outcome) : NULL;
	a->started_at = kn_now_ms();
	a->ended_at = ended_at;
	return kn_store_wf_attempt_put(s->store, a, err);
}

/* Step i's newest attempt, when still open, ends with outcome. */
static int attempt_close(struct server *s, struct wf_run *r, size_t i,
			 const char *outcome, int64_t ended_at,
			 struct kn_error *err)
{
	struct kn_wf_attempt_row *a = attempt_last(r, i);

	/* None for a step started before attempts were recorded. */
	if (!a || a->outcome)
		return 0;
	a->outcome = kn_xstrdup(outcome);
	a->ended_at = ended_at;
	return kn_store_wf_attempt_put(s->store, a, err);
}

static void publish(struct server *s, const struct wf_run *r, size_t i)
{
	if (i < r->n)
		feed_publish(s, "workflow.step",
			     json_pack("{s:I, s:s, s:s, s:I, s:o}", "run",
				       (json_int_t)r->row.id, "step",
				       r->steps[i].name, "state",
				       r->steps[i].state, "job",
				       (json_int_t)r->steps[i].job_id,
				       "reason",
				       r->steps[i].reason
					       ? json_string(r->steps[i].reason)
					       : json_null()));
	else
		feed_publish(s, "workflow.state",
			     json_pack("{s:I, s:s, s:s, s:o}", "run",
				       (json_int_t)r->row.id, "workflow",
				       r->row.name, "state", r->row.state,
				       "reason",
				       r->row.reason ? json_string(r->row.reason)
						     : json_null()));
}

/* The directory part of a file name ("" for none), malloc'd. */
static char *dir_of(const char *path)
{
	const char *slash = path ? strrchr(path, '/') : NULL;

	if (!slash)
		return kn_xstrdup("");
	if (slash == path)
		return kn_xstrdup("/");
	return kn_asprintf("%.*s", (int)(slash - path), path);
}

/* A job file's name as messages give it, beside the workflow's file. */
static char *job_file_name(const char *workflow_file, const char *job_file)
{
	char *dir;
	char *out;

	if (job_file[0] == '/')
		return kn_xstrdup(job_file);
	dir = dir_of(workflow_file);
	out = dir[0] ? kn_asprintf("%s/%s", dir, job_file)
		     : kn_xstrdup(job_file);
	free(dir);
	return out;
}

/* ---- metrics ---- */

/*
 * The numbers the job left in KILN_OUTPUT_DIR/metrics.json (its last
 * attempt's task directory), as a JSON object text, or NULL with a note
 * in why when the file is there but not a JSON object.
 */
char *metrics_read(struct server *s, const struct kn_job_row *j, char *why,
		   size_t len)
{
	char *path = kn_asprintf("%s/tasks/%lld/%d/outputs", s->home,
				 (long long)j->id, j->attempts);
	char *text = NULL, *out = NULL;
	size_t n = 0;
	json_t *doc, *nums, *v;
	json_error_t jerr;
	const char *key;

	why[0] = '\0';
	if (kn_task_file_read(path, "metrics.json", METRICS_MAX_BYTES, &text, &n,
			      NULL) < 0)
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
	free(text);
	free(path);
	return out;
}

/* ---- starting a step ---- */

/*
 * KILN_INPUTS of step i: for STEP.outputs/PATH, the file in the producing
 * job's outputs manifest, {name: "STEP/PATH", input, url, store, blob,
 * sha256, size}, which the shim fetches and checks; for anything else,
 * {name, url} as written. -EINVAL naming the input when the producing job
 * left no such output.
 */
static int inputs_json(struct server *s, const struct wf_run *r, size_t i,
		       json_t **out, struct kn_error *err)
{
	const struct kn_workflow_step *st = &r->spec->steps[i];
	json_t *list = json_array();
	int rc = 0;

	for (size_t k = 0; rc == 0 && k < st->n_inputs; k++) {
		const struct kn_step_input *in = &st->inputs[k];
		const struct kn_workflow_step *from;
		struct kn_output_row *outs = NULL;
		size_t n_outs = 0, m;
		int64_t job_id;
		char *suffix;

		if (!in->step) {
			json_array_append_new(
				list, json_pack("{s:s, s:s}", "name", in->text,
						"url", in->text));
			continue;
		}
		from = kn_workflow_step_find(r->spec, in->step);
		job_id = from ? r->steps[from - r->spec->steps].job_id : 0;
		rc = kn_store_output_list(s->store, job_id, &outs, &n_outs,
					  err);
		if (rc < 0)
			break;
		for (m = 0; m < n_outs && strcmp(outs[m].name, in->path); m++)
			;
		suffix = kn_asprintf("/%lld/outputs/%s", (long long)job_id,
				     in->path);
		if (m == n_outs) {
			rc = kn_errorf(err, KN_EINVAL, "inputs",
				       "input %s: job %lld of step %s left no "
				       "output %s",
				       in->text, (long long)job_id, in->step,
				       in->path);
		} else if (strlen(outs[m].url) <= strlen(suffix) ||
			   strcmp(outs[m].url + strlen(outs[m].url) -
					  strlen(suffix),
				  suffix) != 0) {
			rc = kn_errorf(err, KN_EIO, "inputs",
				       "input %s: unexpected output URL %s",
				       in->text, outs[m].url);
		} else {
			const struct kn_output_row *o = &outs[m];
			char *name = kn_asprintf("%s/%s", in->step, in->path);

			json_array_append_new(
				list,
				json_pack("{s:s, s:s, s:s, s:s%, s:s, s:s, "
					  "s:I}",
					  "name", name, "input", in->text,
					  "url", o->url, "store", o->url,
					  strlen(o->url) - strlen(suffix),
					  "blob", suffix + 1, "sha256",
					  o->sha256, "size",
					  (json_int_t)o->size));
			free(name);
		}
		free(suffix);
		kn_output_list_free(outs, n_outs);
	}
	if (rc < 0) {
		json_decref(list);
		return rc;
	}
	*out = list;
	return 0;
}

/*
 * The text of step i's job: the job file as sent, or the inline job
 * written out (with its image, which the written-out form leaves out).
 */
static char *job_text(const struct wf_run *r, size_t i)
{
	const struct kn_workflow_step *st = &r->spec->steps[i];
	char *text;
	json_t *doc;

	if (st->job_file) {
		const char *body = json_string_value(
			json_object_get(r->files, st->job_file));
		return body ? kn_xstrdup(body) : NULL;
	}
	text = kn_job_spec_to_input_text(st->job, NULL);
	if (!st->job->image)
		return text;
	doc = json_loads(text, 0, NULL);
	free(text);
	json_object_set_new(doc, "image", json_string(st->job->image));
	text = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(doc);
	return text;
}

/*
 * KILN_REQUIRES of step i: its `requires:` (else the workflow's) as the
 * normalized JSON has it, with "store" the URL to reach when asked; NULL
 * when there are none.
 */
static char *requires_text(struct server *s, const struct wf_run *r,
			   size_t i, const struct kn_sched_binding *b)
{
	json_t *doc = kn_workflow_spec_to_json(r->spec), *req, *gpus;
	char *text = NULL;

	req = json_object_get(json_array_get(json_object_get(doc, "steps"), i),
			      "requires");
	if (!json_is_object(req))
		req = json_object_get(doc, "requires");
	if (json_is_object(req) && json_object_size(req)) {
		if (json_is_true(json_object_get(req, "store")))
			json_object_set_new(req, "store",
					    json_string(s->blob_url));
		/* The models of the GPUs the task was given, for gpus.model:
		   the node's devices as this server found them. */
		gpus = json_object_get(req, "gpus");
		if (json_is_string(json_object_get(gpus, "model")) && b) {
			const struct kn_device_set *set =
				&s->nodes[b->node].devices;
			json_t *models = json_array();

			for (int k = 0; k < b->n_devices; k++)
				for (size_t d = 0; d < set->n; d++)
					if (set->devices[d].index ==
					    b->devices[k])
						json_array_append_new(
							models,
							json_string(
								set->devices[d]
									.model));
			json_object_set_new(gpus, "task_models", models);
		}
		text = json_dumps(req, JSON_COMPACT | JSON_SORT_KEYS);
	}
	json_decref(doc);
	return text;
}

json_t *workflows_task_env(struct server *s, int64_t job_id,
			   const struct kn_sched_binding *b)
{
	struct kn_error err;
	struct wf_run r;
	int64_t run_id;
	json_t *env = NULL, *inputs = NULL;
	char *text;

	if (kn_store_wf_run_of_job(s->store, job_id, &run_id, &err) < 0)
		return NULL;
	if (wf_run_load(s, run_id, &r, &err) < 0) {
		kn_log(KN_LOG_ERROR, "job %lld: workflow run %lld: %s",
		       (long long)job_id, (long long)run_id, err.message);
		return NULL;
	}
	for (size_t i = 0; i < r.n; i++) {
		if (r.steps[i].job_id != job_id)
			continue;
		env = json_object();
		if (r.spec->steps[i].n_inputs &&
		    inputs_json(s, &r, i, &inputs, &err) < 0) {
			kn_log(KN_LOG_ERROR, "job %lld: %s", (long long)job_id,
			       err.message);
		} else if (inputs) {
			text = json_dumps(inputs, JSON_COMPACT);
			json_object_set_new(env, "KILN_INPUTS",
					    json_string(text));
			free(text);
		}
		json_decref(inputs);
		if ((text = requires_text(s, &r, i, b))) {
			json_object_set_new(env, "KILN_REQUIRES",
					    json_string(text));
			free(text);
		}
		break;
	}
	wf_run_release(&r);
	return env;
}

/* ---- register and deploy steps ---- */

/* The deployment named name, or -ENOENT (KN_ENOTFOUND) naming it. */
static int deployment_get(struct server *s, const char *name,
			  struct kn_deployment_row *out, struct kn_error *err)
{
	struct kn_deployment_row *rows = NULL;
	size_t n = 0;
	int rc = kn_store_deployment_list(s->store, &rows, &n, err);

	for (size_t i = 0; rc == 0 && i < n; i++) {
		if (strcmp(rows[i].name, name) != 0)
			continue;
		*out = rows[i];
		memset(&rows[i], 0, sizeof(rows[i]));
		kn_deployment_list_free(rows, n);
		return 0;
	}
	kn_deployment_list_free(rows, n);
	if (rc < 0)
		return rc;
	return kn_errorf(err, KN_ENOTFOUND, "deployment",
			 "no deployment named %s: deploy it first (kiln deploy "
			 "FILE)", name);
}

static bool deployment_exists(struct server *s, const char *name)
{
	struct kn_deployment_row row;
	struct kn_error err;

	memset(&row, 0, sizeof(row));
	if (deployment_get(s, name, &row, &err) < 0)
		return false;
	kn_deployment_row_release(&row);
	return true;
}

/*
 * The deployment's spec text as deployed, with its top-level model: set
 * to model (the rest as libfyaml writes it back), malloc'd; NULL when the
 * text is not a YAML mapping.
 */
static char *spec_with_model(const char *text, const char *model)
{
	struct fy_document *fyd = fy_document_build_from_string(NULL, text,
								 FY_NT);
	struct fy_node *root = fyd ? fy_document_root(fyd) : NULL;
	struct fy_node_pair *pair;
	struct fy_node *value;
	char *out = NULL;

	if (!root || !fy_node_is_mapping(root))
		goto out;
	value = fy_node_create_scalar_copy(fyd, model, FY_NT);
	pair = fy_node_mapping_lookup_pair_by_string(root, "model", FY_NT);
	if (pair ? fy_node_pair_set_value(pair, value) != 0
		 : fy_node_mapping_append(
			   root, fy_node_create_scalar(fyd, "model", FY_NT),
			   value) != 0)
		goto out;
	out = fy_emit_document_to_string(fyd, FYECF_MODE_BLOCK);
out:
	fy_document_destroy(fyd);
	return out;
}

/*
 * The version of model that owner made from job_id's outputs at since_ms
 * or later (its lineage names the job), newest first; 0 when none. What a
 * register step interrupted by a crash may have left.
 */
static int64_t version_made_since(struct server *s, const char *model,
				  const char *owner, int64_t job_id,
				  int64_t since_ms)
{
	struct kn_model_version_row *rows = NULL;
	struct kn_error err;
	int64_t found = 0;
	size_t n = 0;

	if (kn_store_model_version_list(s->store, model, &rows, &n, &err) < 0)
		return 0;
	for (size_t k = n; k-- > 0 && !found;) {
		json_t *m;

		if (rows[k].created_at < since_ms ||
		    strcmp(rows[k].created_by, owner) != 0)
			continue;
		m = json_loads(rows[k].manifest, 0, NULL);
		if (json_integer_value(json_object_get(
			    json_object_get(m, "lineage"), "job")) == job_id)
			found = rows[k].version;
		json_decref(m);
	}
	kn_model_version_list_free(rows, n);
	return found;
}

/* The id of a key that owner signed model@version with since since_ms. */
static bool signed_since(struct server *s, const char *model,
			 int64_t version, const char *owner, int64_t since_ms,
			 char key_id[KN_SHA256_HEX + 1])
{
	struct kn_model_signature_row *rows = NULL;
	struct kn_error err;
	bool found = false;
	size_t n = 0;

	if (kn_store_model_signature_list(s->store, model, version, &rows, &n,
					  &err) < 0)
		return false;
	for (size_t k = 0; k < n && !found; k++)
		if (rows[k].signed_at >= since_ms &&
		    !strcmp(rows[k].signed_by, owner)) {
			kn_strlcpy(key_id, rows[k].key_id, KN_SHA256_HEX + 1);
			found = true;
		}
	kn_model_signature_list_free(rows, n);
	return found;
}

/*
 * A register or deploy step whose work (a from-job copy, a deployment's
 * model check) is on a request worker: the step is "running" until
 * act_done, which ends it if it still waits for that attempt. A server
 * stopped first leaves it running; the next start finds it in no list
 * and does it again (step_act), the register step adopting what the
 * earlier go made.
 */
struct wf_acting {
	struct server *s;
	int64_t run_id;
	size_t index;
	int attempt;          /* the attempt it ends */
	struct caller owner;
	char *detail;         /* deploy: the step's reason when it succeeds */
	struct wf_acting *next;
};

static struct wf_acting *acting_find(struct server *s, int64_t run_id,
				     size_t index)
{
	for (struct wf_acting *a = s->wf_acting; a; a = a->next)
		if (a->run_id == run_id && a->index == index)
			return a;
	return NULL;
}

static void acting_free(struct server *s, struct wf_acting *a)
{
	for (struct wf_acting **q = &s->wf_acting; *q; q = &(*q)->next)
		if (*q == a) {
			*q = a->next;
			break;
		}
	free(a->detail);
	free(a);
}

/*
 * The rest of register step i, once version exists: its alias (when
 * adopted: the first go may have died before moving it), its signature,
 * and the step's metrics ({"version": K}, which a deploy step reads) and
 * reason.
 */
static int register_finish(struct server *s, struct wf_run *r, size_t i,
			   const struct caller *owner, int64_t version,
			   int64_t resumed_since, struct kn_error *err)
{
	const struct kn_workflow_step *st = &r->spec->steps[i];
	const struct kn_workflow_step *from =
		kn_workflow_step_find(r->spec, st->from);
	int64_t job_id = from ? r->steps[from - r->spec->steps].job_id : 0;
	char key_id[KN_SHA256_HEX + 1], sign_note[160] = "";
	bool trusted = false, adopted = resumed_since != 0;
	int rc = 0;

	if (adopted && st->alias)
		rc = models_alias_point(s, owner, st->model, st->alias,
					version, err);
	if (rc < 0)
		return rc;
	set_str(&r->steps[i].metrics_json,
		kn_asprintf("{\"version\":%lld}", (long long)version));
	if (st->sign_key && adopted &&
	    signed_since(s, st->model, version, owner->name, resumed_since,
			 key_id)) {
		snprintf(sign_note, sizeof(sign_note),
			 "; signed by key %.16s... (%s)", key_id,
			 models_key_trusted(s, key_id)
				 ? "trusted"
				 : "not trusted: deploys will refuse it");
	} else if (st->sign_key) {
		rc = models_sign_file(s, owner, st->model, version,
				      st->sign_key, key_id, &trusted, err);
		if (rc < 0) {
			char *why = kn_asprintf("%s@%lld registered but not "
						"signed: %s", st->model,
						(long long)version,
						err->message);
			kn_errorf(err, KN_EINVAL, "sign_key", "%s", why);
			free(why);
			return rc;
		}
		snprintf(sign_note, sizeof(sign_note),
			 "; signed by key %.16s... (%s)", key_id,
			 trusted ? "trusted"
				 : "not trusted: deploys will refuse it");
	}
	set_str(&r->steps[i].reason,
		kn_asprintf("registered %s@%lld from job %lld of step %s%s%s%s%s",
			    st->model, (long long)version, (long long)job_id,
			    st->from, st->alias ? "; alias " : "",
			    st->alias ? st->alias : "", sign_note,
			    adopted ? "; adopted after a server restart" : ""));
	return 0;
}

static void act_done(struct wf_acting *a, int rc, const struct kn_error *why,
		     int64_t version);

static void registered(struct server *s, int rc, json_t *reply,
		       const struct kn_error *err, void *arg)
{
	(void)s;
	act_done(arg, rc, err,
		 json_integer_value(json_object_get(reply, "version")));
}

static void deployed(struct server *s, int rc, const struct kn_error *err,
		     void *arg)
{
	(void)s;
	act_done(arg, rc, err, 0);
}

/*
 * Register step i: a new version of its model from the outputs of its
 * `from` step's job, with lineage, alias moved and signed with sign_key.
 * The copy runs on a worker (a returns 1; act_done ends the step). Fails
 * the step (returns < 0 with err) when any part fails.
 *
 * resumed_since (0: a first go) is when a go the server did not live to
 * record began: a version made since then from the same job is adopted,
 * its alias and signature completed here (returns 0), so a crash never
 * registers twice.
 */
static int step_register(struct server *s, struct wf_run *r, size_t i,
			 struct wf_acting *a, int64_t resumed_since,
			 struct kn_error *err)
{
	const struct kn_workflow_step *st = &r->spec->steps[i];
	const struct kn_workflow_step *from =
		kn_workflow_step_find(r->spec, st->from);
	int64_t job_id = from ? r->steps[from - r->spec->steps].job_id : 0;
	int64_t version = 0;
	int rc;

	if (resumed_since)
		version = version_made_since(s, st->model, a->owner.name,
					     job_id, resumed_since);
	if (version > 0) {
		kn_log(KN_LOG_INFO, "workflow run %lld: step %s: adopting "
		       "%s@%lld, made before the server restarted",
		       (long long)r->row.id, st->name, st->model,
		       (long long)version);
		return register_finish(s, r, i, &a->owner, version,
				       resumed_since, err);
	}
	rc = models_from_job_start(s, &a->owner, st->model, job_id, st->alias,
				   registered, a, err);
	return rc < 0 ? rc : 1;
}

/*
 * Deploy step i: its deployment rolled to the version `from` made, its
 * check and copy on a worker (returns 1; act_done ends the step).
 */
static int step_deploy(struct server *s, struct wf_run *r, size_t i,
		       struct wf_acting *a, struct kn_error *err)
{
	const struct kn_workflow_step *st = &r->spec->steps[i];
	const struct kn_workflow_step *reg =
		kn_workflow_step_find(r->spec, st->from);
	struct kn_deployment_row row;
	json_t *version = NULL;
	char *model = NULL, *text = NULL;
	int rc;

	memset(&row, 0, sizeof(row));
	if (reg)
		version = json_object_get(r->v[reg - r->spec->steps].metrics,
					  "version");
	if (!json_is_integer(version))
		return kn_errorf(err, KN_EINVAL, "from",
				 "step %s registered no version", st->from);
	model = kn_asprintf("%s@%lld", reg->model,
			    (long long)json_integer_value(version));
	rc = deployment_get(s, st->deployment, &row, err);
	if (rc < 0)
		goto out;
	text = spec_with_model(row.spec_yaml, model);
	if (!text) {
		rc = kn_errorf(err, KN_EIO, "deployment",
			       "deployment %s: its spec is not a YAML mapping",
			       st->deployment);
		goto out;
	}
	a->detail = kn_asprintf("deployment %s rolled to %s", st->deployment,
				model);
	/* Through the path `kiln deploy` takes, as the file it came from. */
	rc = deploy_apply_start(s, &a->owner, text, strlen(text), row.filename,
				row.filename[0] == '/' ? row.filename : NULL,
				deployed, a, err);
	if (rc == 0)
		set_str(&r->steps[i].reason, kn_xstrdup(a->detail));
out:
	free(text);
	free(model);
	kn_deployment_row_release(&row);
	return rc;
}

/*
 * The end of register or deploy step i (rc < 0: failed with why): its
 * attempt and the step's state, in one transaction.
 */
static int act_end(struct server *s, struct wf_run *r, size_t i, int rc,
		   const struct kn_error *why, struct kn_error *err)
{
	const struct kn_workflow_step *st = &r->spec->steps[i];
	struct kn_wf_step_row *p = &r->steps[i];
	const char *outcome = rc < 0 ? "failed" : "succeeded";

	p->ended_at = kn_now_ms();
	if (rc < 0)
		set_str(&p->reason, kn_asprintf("%s", why->message));
	kn_log(rc < 0 ? KN_LOG_ERROR : KN_LOG_INFO,
	       "workflow run %lld: step %s: %s", (long long)r->row.id,
	       st->name, p->reason);
	rc = kn_store_begin(s->store, err);
	if (rc == 0)
		rc = attempt_close(s, r, i, outcome, p->ended_at, err);
	if (rc == 0)
		rc = step_save(s, r, i, outcome, err);
	if (rc == 0)
		rc = kn_store_commit(s->store, err);
	if (rc < 0) {
		kn_store_rollback(s->store);
		return rc;
	}
	publish(s, r, i);
	return 0;
}

static void advance_logged(struct server *s, int64_t id);

/* A step's work on a worker ended: the step ends, the run moves on. */
static void act_done(struct wf_acting *a, int rc, const struct kn_error *why,
		     int64_t version)
{
	struct server *s = a->s;
	const struct kn_wf_attempt_row *last;
	struct kn_error err, failed;
	struct wf_run r;
	int64_t run_id = a->run_id;
	size_t i = a->index;

	/* Stopping: the step stays running, to be done again at start. */
	if (s->closing) {
		acting_free(s, a);
		return;
	}
	if (wf_run_load(s, run_id, &r, &err) < 0) {
		kn_log(KN_LOG_ERROR, "workflow run %lld: %s", (long long)run_id,
		       err.message);
		acting_free(s, a);
		return;
	}
	last = attempt_last(&r, i);
	if (run_ended(r.row.state) || r.v[i].state != WF_RUNNING || !last ||
	    last->attempt != a->attempt || last->outcome) {
		/* Cancelled while it ran: what it did stays, unrecorded. */
		kn_log(KN_LOG_WARN, "workflow run %lld: step %s ended (%s) "
		       "after the run stopped waiting for it",
		       (long long)run_id, r.steps[i].name,
		       rc < 0 ? why->message : "ok");
		goto out;
	}
	if (rc < 0)
		failed = *why;
	if (rc == 0 && r.spec->steps[i].kind == KN_STEP_REGISTER)
		rc = register_finish(s, &r, i, &a->owner, version, 0, &failed);
	else if (rc == 0)
		set_str(&r.steps[i].reason, kn_xstrdup(a->detail));
	if (act_end(s, &r, i, rc, &failed, &err) < 0)
		kn_log(KN_LOG_ERROR, "workflow run %lld: step %s: %s",
		       (long long)run_id, r.steps[i].name, err.message);
out:
	wf_run_release(&r);
	acting_free(s, a);
	advance_logged(s, run_id);
}

/*
 * A register or deploy step's work. Its attempt is recorded first, open,
 * and the step saved running: if the server dies before the step's end
 * is saved, the step is still running at the next start with that
 * attempt open, which tells step_register to look for the version it may
 * have made rather than make another. A step whose work is on a worker
 * (in s->wf_acting) is left to it.
 */
static int step_act(struct server *s, struct wf_run *r, size_t i,
		    const struct caller *owner, struct kn_error *err)
{
	const struct kn_workflow_step *st = &r->spec->steps[i];
	struct kn_wf_step_row *p = &r->steps[i];
	const struct kn_wf_attempt_row *last = attempt_last(r, i);
	int64_t resumed_since = 0;
	struct wf_acting *a;
	struct kn_error why;
	int rc;

	if (acting_find(s, r->row.id, i))
		return 0;
	if (last && !last->outcome && !last->job_id)
		resumed_since = last->started_at;
	else if ((rc = attempt_open(s, r, i, 0, NULL, 0, err)) < 0)
		return rc;
	last = attempt_last(r, i);
	p->attempts = last->attempt;
	if (!resumed_since || !p->started_at)
		p->started_at = kn_now_ms();
	p->ended_at = 0;
	set_str(&p->reason, NULL);
	if (r->v[i].state != WF_RUNNING) {
		rc = step_save(s, r, i, "running", err);
		if (rc < 0)
			return rc;
		publish(s, r, i);
	}
	a = kn_xcalloc(1, sizeof(*a));
	a->s = s;
	a->run_id = r->row.id;
	a->index = i;
	a->attempt = last->attempt;
	a->owner = *owner;
	rc = st->kind == KN_STEP_REGISTER
		     ? step_register(s, r, i, a, resumed_since, &why)
		     : step_deploy(s, r, i, a, &why);
	if (rc > 0) {
		a->next = s->wf_acting;
		s->wf_acting = a;
		return 0;
	}
	free(a->detail);
	free(a);
	return act_end(s, r, i, rc, &why, err);
}

/*
 * Submit step i's job as the run's owner and record it on the step, in
 * one transaction. A job that cannot be submitted fails the step.
 */
static int step_start(struct server *s, struct wf_run *r, size_t i,
		      const char *why, struct kn_error *err)
{
	const struct kn_workflow_step *st = &r->spec->steps[i];
	struct kn_wf_step_row *p = &r->steps[i];
	struct caller owner = {.role = KN_ROLE_USER};
	char *text = NULL, *name = NULL, *path = NULL;
	int64_t job_id = 0;
	int rc;

	kn_strlcpy(owner.name, r->row.owner, sizeof(owner.name));
	if (st->kind != KN_STEP_JOB)
		return step_act(s, r, i, &owner, err);
	if (st->job_file) {
		name = job_file_name(r->row.filename, st->job_file);
		if (st->job_file[0] == '/')
			path = kn_xstrdup(st->job_file);
		else if (r->row.path[0])
			path = job_file_name(r->row.path, st->job_file);
	} else {
		name = kn_xstrdup(r->row.filename);
		if (r->row.path[0])
			path = kn_xstrdup(r->row.path);
	}
	text = job_text(r, i);
	if (!text) {
		rc = kn_errorf(err, KN_EIO, NULL, "%s was not stored with the "
			       "run", name);
		goto fail;
	}
	/* Every input is there before the job is: else the step fails. */
	if (st->n_inputs) {
		json_t *inputs = NULL;

		rc = inputs_json(s, r, i, &inputs, err);
		json_decref(inputs);
		if (rc < 0)
			goto fail;
	}
	rc = kn_store_begin(s->store, err);
	if (rc < 0)
		goto out;
	rc = jobs_submit(s, &owner, text, strlen(text), name, path, &job_id,
			 err);
	if (rc < 0) {
		kn_store_rollback(s->store);
		goto fail;
	}
	p->job_id = job_id;
	p->attempts++;
	if (!p->started_at)
		p->started_at = kn_now_ms();
	p->ended_at = 0;
	set_str(&p->reason, why ? kn_xstrdup(why) : NULL);
	rc = attempt_open(s, r, i, job_id, NULL, 0, err);
	if (rc == 0)
		rc = step_save(s, r, i, "running", err);
	if (rc == 0)
		rc = kn_store_commit(s->store, err);
	if (rc < 0) {
		kn_store_rollback(s->store);
		kn_log(KN_LOG_ERROR, "workflow run %lld: step %s: job %lld "
		       "queued but not recorded: %s", (long long)r->row.id,
		       st->name, (long long)job_id, err->message);
		goto out;
	}
	publish(s, r, i);
	goto out;
fail:
	/* Nothing was queued: the step fails with the reason. */
	p->attempts++;
	p->started_at = p->started_at ? p->started_at : kn_now_ms();
	p->ended_at = kn_now_ms();
	set_str(&p->reason, kn_asprintf("cannot start: %s", err->message));
	rc = attempt_open(s, r, i, 0, "failed", p->ended_at, err);
	if (rc == 0)
		rc = step_save(s, r, i, "failed", err);
	if (rc == 0)
		publish(s, r, i);
out:
	free(text);
	free(name);
	free(path);
	return rc;
}

/* ---- the engine ---- */

/* Judge a running step whose job has ended; retry it when it may. */
static int step_judge(struct server *s, struct wf_run *r, size_t i,
		      struct kn_error *err)
{
	const struct kn_workflow_step *st = &r->spec->steps[i];
	struct kn_wf_step_row *p = &r->steps[i];
	struct kn_job_row j;
	const char *state;
	char note[160];
	int rc;

	memset(&j, 0, sizeof(j));
	rc = kn_store_job_get(s->store, p->job_id, &j, err);
	if (rc < 0)
		return rc;
	if (!kn_job_state_terminal(j.state))
		goto out;
	rc = attempt_close(s, r, i, kn_job_state_name(j.state),
			   j.ended_at ? j.ended_at : kn_now_ms(), err);
	if (rc < 0)
		goto out;
	if (j.state == KN_JOB_SUCCEEDED) {
		state = "succeeded";
		set_str(&p->metrics_json, metrics_read(s, &j, note,
						       sizeof(note)));
		set_str(&p->reason, kn_asprintf("job %lld succeeded%s",
						(long long)j.id, note));
	} else if (j.state == KN_JOB_CANCELLED) {
		state = "cancelled";
		set_str(&p->reason, kn_asprintf("job %lld: %s", (long long)j.id,
						j.reason ? j.reason
							 : "cancelled"));
	} else if (st->on_failure == KN_ON_FAILURE_RETRY &&
		   p->attempts <= st->retries &&
		   !(j.reason && strstr(j.reason, KN_PREREQUISITE_PREFIX))) {
		char *why = kn_asprintf("retry %d of %d after job %lld failed: "
					"%s", p->attempts, st->retries,
					(long long)j.id,
					j.reason ? j.reason : "failed");
		rc = step_start(s, r, i, why, err);
		free(why);
		goto out;
	} else {
		state = "failed";
		set_str(&p->reason,
			kn_asprintf("job %lld failed: %s%s", (long long)j.id,
				    j.reason ? j.reason : "failed",
				    p->attempts > 1 ? " (last of its attempts)"
						    : ""));
	}
	p->ended_at = j.ended_at ? j.ended_at : kn_now_ms();
	rc = step_save(s, r, i, state, err);
	if (rc == 0)
		publish(s, r, i);
out:
	kn_job_row_release(&j);
	return rc;
}

/* A failed or cancelled step whose policy stops the run, or -1. */
static int stopper(const struct wf_run *r)
{
	for (size_t i = 0; i < r->n; i++)
		if ((r->v[i].state == WF_FAILED ||
		     r->v[i].state == WF_CANCELLED) &&
		    r->spec->steps[i].on_failure != KN_ON_FAILURE_CONTINUE)
			return (int)i;
	return -1;
}

static int run_save(struct server *s, struct wf_run *r, const char *state,
		    const struct kn_audit *a, struct kn_error *err)
{
	set_str(&r->row.state, kn_xstrdup(state));
	return kn_store_wf_run_update(s->store, &r->row, a, err);
}

/* Every step has ended: the run succeeds or fails. */
static int run_finish(struct server *s, struct wf_run *r,
		      struct kn_error *err)
{
	int culprit = -1, skipped = 0, rc;
	bool ok = wf_run_succeeded(r->spec, r->v, &culprit);

	for (size_t i = 0; i < r->n; i++)
		skipped += r->v[i].state == WF_SKIPPED;
	r->row.ended_at = kn_now_ms();
	if (ok)
		set_str(&r->row.reason,
			kn_asprintf("%zu of %zu steps succeeded, %d skipped by "
				    "a condition", r->n - (size_t)skipped, r->n,
				    skipped));
	else if (culprit >= 0)
		set_str(&r->row.reason,
			kn_asprintf("step %s %s: %s", r->steps[culprit].name,
				    r->steps[culprit].state,
				    r->steps[culprit].reason
					    ? r->steps[culprit].reason
					    : ""));
	else
		set_str(&r->row.reason, kn_xstrdup("a step was skipped"));
	rc = run_save(s, r, ok ? "succeeded" : "failed", NULL, err);
	if (rc == 0) {
		kn_log(KN_LOG_INFO, "workflow run %lld (%s) %s: %s",
		       (long long)r->row.id, r->row.name, r->row.state,
		       r->row.reason);
		publish(s, r, r->n);
	}
	return rc;
}

/*
 * Move run id forward as far as its steps allow: judge ended jobs, skip
 * or start pending steps, and end the run when nothing is left to run.
 */
static int advance(struct server *s, int64_t id, struct kn_error *err)
{
	struct wf_run r;
	bool running = false, pending = false;
	int stop, rc;

	rc = wf_run_load(s, id, &r, err);
	if (rc < 0)
		return rc;
	if (run_ended(r.row.state))
		goto out;
	/* A running register or deploy step is on a worker, or (after a
	   restart) not yet done again. */
	for (size_t i = 0; rc == 0 && i < r.n; i++)
		if (r.v[i].state == WF_RUNNING)
			rc = r.spec->steps[i].kind == KN_STEP_JOB
				     ? step_judge(s, &r, i, err)
				     : step_start(s, &r, i, NULL, err);
	/* In the needs' order, so a skip reaches the steps after it now. */
	for (size_t k = 0; rc == 0 && k < r.n; k++) {
		size_t i = r.spec->order[k];
		bool by_condition = false;
		char why[512];
		enum wf_decision d;

		if (r.v[i].state != WF_PENDING)
			continue;
		d = wf_plan_step(r.spec, i, r.v, stopper(&r) >= 0,
				 &by_condition, why, sizeof(why));
		if (d == WF_START) {
			rc = step_start(s, &r, i, NULL, err);
		} else if (d == WF_SKIP) {
			r.steps[i].by_condition = by_condition;
			r.steps[i].ended_at = kn_now_ms();
			set_str(&r.steps[i].reason, kn_xstrdup(why));
			rc = step_save(s, &r, i, "skipped", err);
			if (rc == 0)
				publish(s, &r, i);
		}
	}
	if (rc < 0)
		goto out;
	for (size_t i = 0; i < r.n; i++) {
		running |= r.v[i].state == WF_RUNNING;
		pending |= r.v[i].state == WF_PENDING;
	}
	if (running) {
		if (!strcmp(r.row.state, "queued")) {
			r.row.started_at = kn_now_ms();
			rc = run_save(s, &r, "running", NULL, err);
		}
		goto out;
	}
	/* Only a stop leaves steps pending with nothing running. */
	stop = stopper(&r);
	for (size_t i = 0; rc == 0 && pending && stop >= 0 && i < r.n; i++) {
		if (r.v[i].state != WF_PENDING)
			continue;
		r.steps[i].by_condition = false;
		r.steps[i].ended_at = kn_now_ms();
		set_str(&r.steps[i].reason,
			kn_asprintf("not started: step %s %s and its "
				    "on_failure stops the run",
				    r.steps[stop].name, r.steps[stop].state));
		rc = step_save(s, &r, i, "skipped", err);
		if (rc == 0)
			publish(s, &r, i);
	}
	if (rc == 0)
		rc = run_finish(s, &r, err);
out:
	wf_run_release(&r);
	return rc;
}

static void advance_logged(struct server *s, int64_t id)
{
	struct kn_error err;

	if (advance(s, id, &err) < 0)
		kn_log(KN_LOG_ERROR, "workflow run %lld: %s", (long long)id,
		       err.message);
}

void workflows_job_ended(struct server *s, int64_t job_id)
{
	struct kn_error err;
	int64_t run_id;

	if (kn_store_wf_run_of_job(s->store, job_id, &run_id, &err) == 0)
		advance_logged(s, run_id);
}

int workflows_start(struct server *s, struct kn_error *err)
{
	struct kn_wf_run_row *rows = NULL;
	size_t n = 0;
	int rc;

	rc = kn_store_wf_run_list(s->store, true, &rows, &n, err);
	if (rc < 0)
		return rc;
	for (size_t i = 0; i < n; i++)
		advance_logged(s, rows[i].id);
	if (n)
		kn_log(KN_LOG_INFO, "workflows: %zu run%s resumed", n,
		       n == 1 ? "" : "s");
	kn_wf_run_list_free(rows, n);
	return 0;
}

/* ---- API ---- */

static void audit_fill(struct kn_audit *a, const struct caller *c,
		       const char *action, const char *detail)
{
	memset(a, 0, sizeof(*a));
	a->actor = (char *)c->name;
	a->role = (char *)role_name(c->role);
	a->action = (char *)action;
	a->outcome = "ok";
	a->detail = (char *)detail;
}

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

static void reply_run(struct server *s, struct kn_http_req *req, int64_t id,
		      int status)
{
	struct wf_run r;
	struct kn_error err;
	json_t *costs = NULL;

	if (wf_run_load(s, id, &r, &err) < 0) {
		kn_http_reply_error(req, &err);
		return;
	}
	/* The run's jobs were all submitted after it was. */
	if (cost_by_job(s, r.row.submitted_at, &costs, &err) < 0)
		kn_log(KN_LOG_WARN, "workflow run %lld: its cost: %s",
		       (long long)id, err.message);
	kn_http_reply_json(req, status,
			   json_pack("{s:o}", "workflow",
				     run_json(&r, true, costs)));
	json_decref(costs);
	wf_run_release(&r);
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
 * naming its file. A deploy step's deployment must exist already.
 */
static int check_request(struct server *s, const char *text,
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
		    !deployment_exists(s, st->deployment)) {
			rc = kn_errorf(err, KN_EINVAL, "spec",
				       "%s: steps[%zu] (%s): deploy: no "
				       "deployment named %s: deploy it first "
				       "(kiln deploy FILE); the step rolls an "
				       "existing one to the registered version",
				       filename, i, st->name, st->deployment);
			break;
		}
		if (!st->job_file)
			continue;
		body = json_string_value(json_object_get(files, st->job_file));
		name = job_file_name(filename, st->job_file);
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

void workflows_h_run(struct server *s, struct kn_http_req *req,
		     const struct caller *c, const char *param)
{
	struct kn_workflow_spec *w = NULL;
	struct kn_wf_step_row *steps = NULL;
	struct kn_wf_run_row row;
	struct kn_audit a;
	struct kn_error err;
	json_error_t jerr;
	size_t len;
	const char *body = kn_http_body(req, &len);
	const char *text, *filename, *path, *digest, *revision, *key;
	json_t *doc, *files, *v;
	char digest_now[65], *files_text = NULL;
	int64_t id = 0;
	int rc;

	(void)param;
	doc = json_loadb(body, len, 0, &jerr);
	if (!json_is_object(doc)) {
		kn_errorf(&err, KN_EINVAL, NULL,
			  "the body must be a JSON object {spec, filename, "
			  "files, digest, revision}%s%s",
			  doc ? "" : ": ", doc ? "" : jerr.text);
		goto fail;
	}
	text = json_string_value(json_object_get(doc, "spec"));
	v = json_object_get(doc, "filename");
	filename = json_is_string(v) ? json_string_value(v) : "workflow";
	v = json_object_get(doc, "path");
	path = json_is_string(v) ? json_string_value(v) : "";
	v = json_object_get(doc, "digest");
	digest = json_is_string(v) ? json_string_value(v) : NULL;
	v = json_object_get(doc, "revision");
	revision = json_is_string(v) ? json_string_value(v) : NULL;
	files = json_object_get(doc, "files");
	if (!text) {
		kn_errorf(&err, KN_EINVAL, "spec",
			  "spec: the workflow file's text is required");
		goto fail;
	}
	if (path[0] && path[0] != '/') {
		kn_errorf(&err, KN_EINVAL, "path",
			  "path must be absolute; got \"%s\"", path);
		goto fail;
	}
	if (files && !json_is_object(files)) {
		kn_errorf(&err, KN_EINVAL, "files",
			  "files must be an object {relative path: text}");
		goto fail;
	}
	if (json_object_size(files) > FILES_MAX) {
		kn_errorf(&err, KN_EINVAL, "files",
			  "files: at most %d job files per workflow; got %zu",
			  FILES_MAX, json_object_size(files));
		goto fail;
	}
	json_object_foreach(files, key, v) {
		if (!json_is_string(v)) {
			kn_errorf(&err, KN_EINVAL, "files",
				  "files[\"%s\"] must be the file's text", key);
			goto fail;
		}
	}
	if (revision && !hex_text(revision, 7, REVISION_MAX)) {
		kn_errorf(&err, KN_EINVAL, "revision",
			  "revision must be a git revision (7 to %d hex "
			  "digits) or null",
			  REVISION_MAX);
		goto fail;
	}
	kn_sha256_hex(text, strlen(text), digest_now);
	if (digest && strcmp(digest, digest_now) != 0) {
		kn_errorf(&err, KN_EINVAL, "digest",
			  "digest: the workflow text's sha256 is %s, not the "
			  "digest sent (%.64s)",
			  digest_now, digest);
		goto fail;
	}
	if (check_request(s, text, filename, files, &w, &err) < 0)
		goto fail;

	files_text = json_dumps(files ? files : json_object(),
				JSON_COMPACT | JSON_SORT_KEYS);
	memset(&row, 0, sizeof(row));
	row.name = w->name;
	row.owner = (char *)c->name;
	row.filename = (char *)filename;
	row.path = (char *)path;
	row.spec_yaml = (char *)text;
	row.files_json = files_text;
	row.digest = digest_now;
	row.revision = (char *)revision;
	row.state = "queued";
	row.submitted_at = kn_now_ms();
	steps = kn_xcalloc(w->n_steps, sizeof(*steps));
	for (size_t i = 0; i < w->n_steps; i++) {
		steps[i].index = (int)i;
		steps[i].name = w->steps[i].name;
		steps[i].state = "pending";
	}
	audit_fill(&a, c, "workflow.run", w->name);
	rc = kn_store_wf_run_insert(s->store, &row, steps, w->n_steps, &a, &id,
				    &err);
	if (rc < 0)
		goto fail;
	kn_log(KN_LOG_INFO, "workflow run %lld (%s, %zu steps) by %s",
	       (long long)id, w->name, w->n_steps, c->name);
	advance_logged(s, id);
	reply_run(s, req, id, 201);
	goto out;
fail:
	kn_http_reply_error(req, &err);
out:
	free(steps);
	free(files_text);
	kn_workflow_spec_free(w);
	json_decref(doc);
}

void workflows_h_list(struct server *s, struct kn_http_req *req,
		      const struct caller *c, const char *param)
{
	struct kn_wf_run_row *rows = NULL;
	struct kn_error err;
	size_t n = 0;
	json_t *list = json_array();

	(void)c;
	(void)param;
	if (kn_store_wf_run_list(s->store, false, &rows, &n, &err) < 0) {
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

static int parse_run_id(struct kn_http_req *req, const char *param,
			int64_t *id)
{
	struct kn_error err;
	char *end;
	long long v = strtoll(param, &end, 10);

	if (*end || v <= 0) {
		kn_errorf(&err, KN_EINVAL, "id", "not a workflow run id: \"%s\"",
			  param);
		kn_http_reply_error(req, &err);
		return -EINVAL;
	}
	*id = v;
	return 0;
}

void workflows_h_get(struct server *s, struct kn_http_req *req,
		     const struct caller *c, const char *param)
{
	int64_t id = 0;

	(void)c;
	if (parse_run_id(req, param, &id) == 0)
		reply_run(s, req, id, 200);
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

	if (parse_run_id(req, param, &id) < 0)
		return -1;
	if (wf_run_load(s, id, r, &err) < 0) {
		kn_http_reply_error(req, &err);
		return -1;
	}
	if (c->role < KN_ROLE_OPERATOR && strcmp(r->row.owner, c->name)) {
		struct kn_audit a;
		char object[40];

		kn_errorf(&err, KN_EPERM, NULL,
			  "workflow run %lld belongs to %s; a user may change "
			  "only its own runs",
			  (long long)id, r->row.owner);
		snprintf(object, sizeof(object), "workflow/%lld",
			 (long long)id);
		audit_fill(&a, c, action, err.message);
		a.object = object;
		a.outcome = "denied";
		kn_store_audit_insert(s->store, &a, NULL);
		kn_http_reply_error(req, &err);
		wf_run_release(r);
		return -1;
	}
	return 0;
}

void workflows_h_cancel(struct server *s, struct kn_http_req *req,
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
	if (run_ended(r.row.state)) {
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
	set_str(&r.row.reason, kn_asprintf("cancelled by %s", c->name));
	audit_fill(&a, c, "workflow.cancel", NULL);
	rc = kn_store_begin(s->store, &err);
	if (rc == 0)
		rc = run_save(s, &r, "cancelled", &a, &err);
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
		set_str(&r.steps[i].reason,
			kn_asprintf("run cancelled by %s", c->name));
		rc = attempt_close(s, &r, i, "cancelled", r.row.ended_at, &err);
		if (rc == 0)
			rc = step_save(s, &r, i, "cancelled", &err);
	}
	if (rc == 0)
		rc = kn_store_commit(s->store, &err);
	if (rc < 0) {
		kn_store_rollback(s->store);
		goto fail;
	}
	for (size_t i = 0; i < r.n; i++)
		if (r.steps[i].ended_at == r.row.ended_at &&
		    r.v[i].state == WF_CANCELLED)
			publish(s, &r, i);
	publish(s, &r, r.n);
	wf_run_release(&r);
	reply_run(s, req, id, 200);
	return;
fail:
	kn_http_reply_error(req, &err);
	wf_run_release(&r);
}

void workflows_h_retry(struct server *s, struct kn_http_req *req,
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
	rc = kn_store_begin(s->store, &err);
	for (size_t i = 0; rc == 0 && i < r.n; i++) {
		struct kn_wf_step_row *p = &r.steps[i];

		if (!again[i])
			continue;
		p->by_condition = false;
		p->attempts = 0;
		p->started_at = p->ended_at = 0;
		set_str(&p->reason, NULL);
		set_str(&p->metrics_json, NULL);
		rc = step_save(s, &r, i, "pending", &err);
	}
	if (rc == 0) {
		snprintf(detail, sizeof(detail), "%zu step%s again", n_again,
			 n_again == 1 ? "" : "s");
		audit_fill(&a, c, "workflow.retry", detail);
		r.row.ended_at = 0;
		set_str(&r.row.reason, NULL);
		rc = run_save(s, &r, "running", &a, &err);
	}
	if (rc == 0)
		rc = kn_store_commit(s->store, &err);
	if (rc < 0) {
		kn_store_rollback(s->store);
		goto fail;
	}
	publish(s, &r, r.n);
	wf_run_release(&r);
	free(again);
	advance_logged(s, id);
	reply_run(s, req, id, 200);
	return;
fail:
	free(again);
	kn_http_reply_error(req, &err);
	wf_run_release(&r);
}
