/*
 * Workflow runs: a `kind: Workflow` file's steps run as jobs, in the order
 * their needs give, with their failure policies, conditions and retries
 * (docs/workflows.md).
 *
 * The store is the engine's only state. A run row keeps the texts the
 * client sent (the workflow and its job files), each step row the job it
 * runs as now and each attempt row one job a step started (all of them,
 * across retries: a step's cost is theirs); wf_advance() reads them, asks
 * wfplan.c what each step does next and writes the answer. It runs after
 * a step's job ends (its job_ended hook), after an API call and for
 * every active run at start-up, so a server killed mid-DAG picks up where
 * the store says it was: the jobs themselves are re-adopted by the job core,
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
 * (its task_env hook): KILN_INPUTS, the earlier steps' outputs by store
 * URL and sha256, and KILN_REQUIRES, its prerequisites; the shim fetches
 * and checks them on the node (src/shimrt/prepare.c), so no file passes through
 * the server.
 */
#include "wfsvc.h"
#include "ckpt/ckpt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libfyaml.h>

bool wf_run_ended(const char *state)
{
	return strcmp(state, "queued") != 0 && strcmp(state, "running") != 0;
}

void wf_run_release(struct wf_run *r)
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

int wf_run_load(struct server *s, int64_t id, struct wf_run *r,
		       struct kn_error *err)
{
	int rc;

	memset(r, 0, sizeof(*r));
	rc = kn_store_wf_run_get(core_store(s), id, &r->row, err);
	if (rc == 0)
		rc = kn_store_wf_step_list(core_store(s), id, &r->steps, &r->n, err);
	if (rc == 0)
		rc = kn_store_wf_attempt_list(core_store(s), id, &r->att, &r->n_att,
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

void wf_set_str(char **field, char *value)
{
	free(*field);
	*field = value;
}

int wf_step_save(struct server *s, struct wf_run *r, size_t i,
		     const char *state, struct kn_error *err)
{
	wf_set_str(&r->steps[i].state, kn_xstrdup(state));
	view_set(r, i);
	return kn_store_wf_step_put(core_store(s), &r->steps[i], err);
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
	return kn_store_wf_attempt_put(core_store(s), a, err);
}

/* Step i's newest attempt, when still open, ends with outcome. */
int wf_attempt_close(struct server *s, struct wf_run *r, size_t i,
			 const char *outcome, int64_t ended_at,
			 struct kn_error *err)
{
	struct kn_wf_attempt_row *a = attempt_last(r, i);

	/* None for a step started before attempts were recorded. */
	if (!a || a->outcome)
		return 0;
	a->outcome = kn_xstrdup(outcome);
	a->ended_at = ended_at;
	return kn_store_wf_attempt_put(core_store(s), a, err);
}

void wf_publish(struct server *s, const struct wf_run *r, size_t i)
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
char *wf_job_file_name(const char *workflow_file, const char *job_file)
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
		rc = kn_store_output_list(core_store(s), job_id, &outs, &n_outs,
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
					    json_string(core_blob_url(s)));
		/* The models of the GPUs the task was given, for gpus.model:
		   the node's devices as this server found them. */
		gpus = json_object_get(req, "gpus");
		if (json_is_string(json_object_get(gpus, "model")) && b) {
			const struct kn_device_set *set =
				core_node_devices(s, b->node);
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

/* {"KILN_INPUTS", "KILN_REQUIRES"} for a task of step job_id bound as b
   (NULL: not in a launch), each only when the step has some; NULL for a
   job that is no step. */
static json_t *step_env(struct server *s, int64_t job_id,
			const struct kn_sched_binding *b)
{
	struct kn_error err;
	struct wf_run r;
	int64_t run_id;
	json_t *env = NULL, *inputs = NULL;
	char *text;

	if (kn_store_wf_run_of_job(core_store(s), job_id, &run_id, &err) < 0)
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

static void hook_task_env(void *arg, const struct job_task *t, json_t *env)
{
	json_t *vars = step_env(arg, t->job_id, t->binding);

	if (vars)
		json_object_update(env, vars);
	json_decref(vars);
}

/* ---- register and deploy steps ---- */

/* The deployment named name, or -ENOENT (KN_ENOTFOUND) naming it. */
static int deployment_get(struct server *s, const char *name,
			  struct kn_deployment_row *out, struct kn_error *err)
{
	struct kn_deployment_row *rows = NULL;
	size_t n = 0;
	int rc = kn_store_deployment_list(core_store(s), &rows, &n, err);

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

bool wf_deployment_exists(struct server *s, const char *name)
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

	if (kn_store_model_version_list(core_store(s), model, &rows, &n, &err) < 0)
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

	if (kn_store_model_signature_list(core_store(s), model, version, &rows, &n,
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

/* The service's state, in its slot: from workflows_start to
   workflows_stop. */
struct wf_state {
	/* Register and deploy steps whose work is on a request worker;
	   each leaves the list when it ends. */
	struct wf_acting *acting;
};

static struct wf_state *wf_state_of(struct server *s)
{
	return service_state(s, &workflows_service);
}

static struct wf_acting *acting_find(struct server *s, int64_t run_id,
				     size_t index)
{
	for (struct wf_acting *a = wf_state_of(s)->acting; a; a = a->next)
		if (a->run_id == run_id && a->index == index)
			return a;
	return NULL;
}

static void acting_free(struct server *s, struct wf_acting *a)
{
	KN_LIST_UNLINK(&wf_state_of(s)->acting, a);
	KN_FREE_ALL(a->detail, a);
}

/*
 * The run's owner as they are now, for signing: steps act with role user,
 * but a signer may be granted to a role, so the owner's active token says
 * which. A revoked owner signs with nothing (-EPERM).
 */
static int owner_now(struct server *s, const struct caller *owner,
		     struct caller *out, struct kn_error *err)
{
	struct kn_token_row *rows = NULL;
	size_t n = 0;
	int rc = kn_store_token_list(core_store(s), &rows, &n, err);

	if (rc < 0)
		return rc;
	rc = kn_errorf(err, KN_EPERM, "signer", "the run's owner %s has no "
		       "active token", owner->name);
	for (size_t i = 0; i < n; i++)
		if (!rows[i].revoked_at && !strcmp(rows[i].name, owner->name) &&
		    role_parse(rows[i].role, &out->role) == 0) {
			kn_strlcpy(out->name, owner->name, sizeof(out->name));
			rc = 0;
			break;
		}
	kn_token_list_free(rows, n);
	return rc;
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
	wf_set_str(&r->steps[i].metrics_json,
		kn_asprintf("{\"version\":%lld}", (long long)version));
	if (st->signer && adopted &&
	    signed_since(s, st->model, version, owner->name, resumed_since,
			 key_id)) {
		snprintf(sign_note, sizeof(sign_note),
			 "; signed by %s, key %.16s... (%s)", st->signer,
			 key_id, models_key_trusted(s, key_id)
				 ? "trusted"
				 : "not trusted: deploys will refuse it");
	} else if (st->signer) {
		struct caller signer_caller;

		rc = owner_now(s, owner, &signer_caller, err);
		if (rc == 0)
			rc = models_sign(s, &signer_caller, st->model, version,
					 st->signer, key_id, &trusted, err);
		if (rc < 0) {
			char *why = kn_asprintf("%s@%lld registered but not "
						"signed: %s", st->model,
						(long long)version,
						err->message);
			kn_errorf(err, err->code, "signer", "%s", why);
			free(why);
			return rc;
		}
		snprintf(sign_note, sizeof(sign_note),
			 "; signed by %s, key %.16s... (%s)", st->signer,
			 key_id, trusted ? "trusted"
				 : "not trusted: deploys will refuse it");
	}
	wf_set_str(&r->steps[i].reason,
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
 * `from` step's job, with lineage, alias moved and signed by its signer.
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
		wf_set_str(&r->steps[i].reason, kn_xstrdup(a->detail));
out:
	KN_FREE_ALL(text, model);
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
		wf_set_str(&p->reason, kn_asprintf("%s", why->message));
	kn_log(rc < 0 ? KN_LOG_ERROR : KN_LOG_INFO,
	       "workflow run %lld: step %s: %s", (long long)r->row.id,
	       st->name, p->reason);
	rc = kn_store_begin(core_store(s), err);
	if (rc == 0)
		rc = wf_attempt_close(s, r, i, outcome, p->ended_at, err);
	if (rc == 0)
		rc = wf_step_save(s, r, i, outcome, err);
	rc = core_store_end(core_store(s), rc, err);
	if (rc < 0) {
		return rc;
	}
	wf_publish(s, r, i);
	return 0;
}

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
	if (core_closing(s)) {
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
	if (wf_run_ended(r.row.state) || r.v[i].state != WF_RUNNING || !last ||
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
		wf_set_str(&r.steps[i].reason, kn_xstrdup(a->detail));
	if (act_end(s, &r, i, rc, &failed, &err) < 0)
		kn_log(KN_LOG_ERROR, "workflow run %lld: step %s: %s",
		       (long long)run_id, r.steps[i].name, err.message);
out:
	wf_run_release(&r);
	acting_free(s, a);
	wf_advance_logged(s, run_id);
}

/*
 * A register or deploy step's work. Its attempt is recorded first, open,
 * and the step saved running: if the server dies before the step's end
 * is saved, the step is still running at the next start with that
 * attempt open, which tells step_register to look for the version it may
 * have made rather than make another. A step whose work is on a worker
 * (in the service's acting list) is left to it.
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
	wf_set_str(&p->reason, NULL);
	if (r->v[i].state != WF_RUNNING) {
		rc = wf_step_save(s, r, i, "running", err);
		if (rc < 0)
			return rc;
		wf_publish(s, r, i);
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
		a->next = wf_state_of(s)->acting;
		wf_state_of(s)->acting = a;
		return 0;
	}
	KN_FREE_ALL(a->detail, a);
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
		name = wf_job_file_name(r->row.filename, st->job_file);
		if (st->job_file[0] == '/')
			path = kn_xstrdup(st->job_file);
		else if (r->row.path[0])
			path = wf_job_file_name(r->row.path, st->job_file);
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
	rc = kn_store_begin(core_store(s), err);
	if (rc < 0)
		goto out;
	rc = jobs_submit(s, &owner, text, strlen(text), name, path, &job_id,
			 err);
	if (rc < 0) {
		kn_store_rollback(core_store(s));
		goto fail;
	}
	p->job_id = job_id;
	p->attempts++;
	if (!p->started_at)
		p->started_at = kn_now_ms();
	p->ended_at = 0;
	wf_set_str(&p->reason, why ? kn_xstrdup(why) : NULL);
	rc = attempt_open(s, r, i, job_id, NULL, 0, err);
	if (rc == 0)
		rc = wf_step_save(s, r, i, "running", err);
	rc = core_store_end(core_store(s), rc, err);
	if (rc < 0) {
		kn_log(KN_LOG_ERROR, "workflow run %lld: step %s: job %lld "
		       "queued but not recorded: %s", (long long)r->row.id,
		       st->name, (long long)job_id, err->message);
		goto out;
	}
	wf_publish(s, r, i);
	goto out;
fail:
	/* Nothing was queued: the step fails with the reason. */
	p->attempts++;
	p->started_at = p->started_at ? p->started_at : kn_now_ms();
	p->ended_at = kn_now_ms();
	wf_set_str(&p->reason, kn_asprintf("cannot start: %s", err->message));
	rc = attempt_open(s, r, i, 0, "failed", p->ended_at, err);
	if (rc == 0)
		rc = wf_step_save(s, r, i, "failed", err);
	if (rc == 0)
		wf_publish(s, r, i);
out:
	KN_FREE_ALL(text, name, path);
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
	rc = kn_store_job_get(core_store(s), p->job_id, &j, err);
	if (rc < 0)
		return rc;
	if (!kn_job_state_terminal(j.state))
		goto out;
	rc = wf_attempt_close(s, r, i, kn_job_state_name(j.state),
			   j.ended_at ? j.ended_at : kn_now_ms(), err);
	if (rc < 0)
		goto out;
	if (j.state == KN_JOB_SUCCEEDED) {
		state = "succeeded";
		wf_set_str(&p->metrics_json, jobs_metrics_read(s, &j, note,
						       sizeof(note)));
		wf_set_str(&p->reason, kn_asprintf("job %lld succeeded%s",
						(long long)j.id, note));
	} else if (j.state == KN_JOB_CANCELLED) {
		state = "cancelled";
		wf_set_str(&p->reason, kn_asprintf("job %lld: %s", (long long)j.id,
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
		wf_set_str(&p->reason,
			kn_asprintf("job %lld failed: %s%s", (long long)j.id,
				    j.reason ? j.reason : "failed",
				    p->attempts > 1 ? " (last of its attempts)"
						    : ""));
	}
	p->ended_at = j.ended_at ? j.ended_at : kn_now_ms();
	rc = wf_step_save(s, r, i, state, err);
	if (rc == 0)
		wf_publish(s, r, i);
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

int wf_run_save(struct server *s, struct wf_run *r, const char *state,
		    const struct kn_audit *a, struct kn_error *err)
{
	wf_set_str(&r->row.state, kn_xstrdup(state));
	return kn_store_wf_run_update(core_store(s), &r->row, a, err);
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
		wf_set_str(&r->row.reason,
			kn_asprintf("%zu of %zu steps succeeded, %d skipped by "
				    "a condition", r->n - (size_t)skipped, r->n,
				    skipped));
	else if (culprit >= 0)
		wf_set_str(&r->row.reason,
			kn_asprintf("step %s %s: %s", r->steps[culprit].name,
				    r->steps[culprit].state,
				    r->steps[culprit].reason
					    ? r->steps[culprit].reason
					    : ""));
	else
		wf_set_str(&r->row.reason, kn_xstrdup("a step was skipped"));
	rc = wf_run_save(s, r, ok ? "succeeded" : "failed", NULL, err);
	if (rc == 0) {
		kn_log(KN_LOG_INFO, "workflow run %lld (%s) %s: %s",
		       (long long)r->row.id, r->row.name, r->row.state,
		       r->row.reason);
		wf_publish(s, r, r->n);
	}
	return rc;
}

/*
 * Move run id forward as far as its steps allow: judge ended jobs, skip
 * or start pending steps, and end the run when nothing is left to run.
 */
int wf_advance(struct server *s, int64_t id, struct kn_error *err)
{
	struct wf_run r;
	bool running = false, pending = false;
	int stop, rc;

	rc = wf_run_load(s, id, &r, err);
	if (rc < 0)
		return rc;
	if (wf_run_ended(r.row.state))
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
			wf_set_str(&r.steps[i].reason, kn_xstrdup(why));
			rc = wf_step_save(s, &r, i, "skipped", err);
			if (rc == 0)
				wf_publish(s, &r, i);
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
			rc = wf_run_save(s, &r, "running", NULL, err);
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
		wf_set_str(&r.steps[i].reason,
			kn_asprintf("not started: step %s %s and its "
				    "on_failure stops the run",
				    r.steps[stop].name, r.steps[stop].state));
		rc = wf_step_save(s, &r, i, "skipped", err);
		if (rc == 0)
			wf_publish(s, &r, i);
	}
	if (rc == 0)
		rc = run_finish(s, &r, err);
out:
	wf_run_release(&r);
	return rc;
}

void wf_advance_logged(struct server *s, int64_t id)
{
	struct kn_error err;

	if (wf_advance(s, id, &err) < 0)
		kn_log(KN_LOG_ERROR, "workflow run %lld: %s", (long long)id,
		       err.message);
}

/* A step's job ended for good (not requeued): its run moves on. */
static void hook_job_ended(void *arg, int64_t job_id)
{
	struct server *s = arg;
	struct kn_error err;
	int64_t run_id;

	/* A job that ends while jobs are recovered, before the service
	   starts: workflows_start advances every active run. */
	if (!wf_state_of(s))
		return;
	if (kn_store_wf_run_of_job(core_store(s), job_id, &run_id, &err) == 0)
		wf_advance_logged(s, run_id);
}

const struct job_hook_ops workflows_job_hooks = {
	.name = "workflows",
	.job_ended = hook_job_ended,
	.task_env = hook_task_env,
};

/* Advance every active run (its steps' jobs are recovered by then). */
int workflows_start(struct server *s, struct kn_error *err)
{
	struct kn_wf_run_row *rows = NULL;
	size_t n = 0;
	int rc;

	service_state_set(s, &workflows_service,
			  kn_xcalloc(1, sizeof(struct wf_state)));
	rc = kn_store_wf_run_list(core_store(s), true, &rows, &n, err);
	if (rc < 0)
		return rc;
	for (size_t i = 0; i < n; i++)
		wf_advance_logged(s, rows[i].id);
	if (n)
		kn_log(KN_LOG_INFO, "workflows: %zu run%s resumed", n,
		       n == 1 ? "" : "s");
	kn_wf_run_list_free(rows, n);
	return 0;
}

/* After the worker pools: every step's work has ended (a stop leaves the
   step running, done again at the next start). */
void workflows_stop(struct server *s)
{
	struct wf_state *w = wf_state_of(s);

	if (!w)
		return;
	while (w->acting)
		acting_free(s, w->acting);
	free(w);
}
