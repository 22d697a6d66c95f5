/*
 * Re-validation: an evaluation job run on a schedule against the version a
 * model's alias names, with thresholds on the numbers it writes to
 * $KILN_OUTPUT_DIR/metrics.json (docs/registry.md).
 *
 * A run resolves the alias, checks that version as a deploy does and gets
 * its verified copy (models_deploy_dir_start: the hashing and copying on a
 * request worker, so the loop keeps serving), then submits the evaluation spec
 * as a job of the revalidation's owner with KILN_MODEL_DIR (the copy) and
 * KILN_MODEL (NAME@VERSION) added to its env. When the job ends for good
 * (its job_ended hook), its metrics are checked and the outcome stored per
 * version, on this file's timer rather than inside the job core's handling of
 * ended runs, since a rollback moves deployments, which cancel and submit
 * jobs. A failed or broken run fires model_revalidation_failed, which
 * stays firing until a run passes; with rollback, a failed threshold also
 * rolls the alias back (when it still names the version tested), which
 * moves deployments that follow it (deploy.c).
 *
 * A re-validation is set by hand (POST .../revalidation) or by a
 * deployment's revalidate: (deploy.c calls reval_for_deployment, then
 * reval_deployment_set once the deployment is stored); the latter is
 * marked with the deployment's name, which removes it when the deployment
 * is deleted or stops asking for it. One set by hand is only ever
 * replaced, by hand or by a deployment naming the same alias.
 *
 * A run is timed from when the previous one started; one run at a time per
 * (model, alias): a run due while one is in flight waits for it. A server
 * restart forgets a run in flight (its job still ends, unjudged) and starts
 * the schedule over from the restart.
 */
#include "server/access.h"
#include "server/core.h"
#include "server/feed.h"
#include "server/peers.h"
#include "server/server_alert.h"
#include "server/service.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "registry/registry.h"

/* Shortest interval: a run also needs a job slot and an evaluation. */
#define EVERY_MIN_MS 1000
/* Longest: a year; longer is a typo. */
#define EVERY_MAX_MS (366LL * 24 * 3600 * 1000)

struct reval {
	struct kn_revalidation_row *row; /* as stored; its own copy */
	json_t *thresholds;              /* row's, parsed */
	int64_t next_at;
	bool failing;    /* model_revalidation_failed is firing */
	int64_t job_id;  /* the run in flight; 0 = none */
	/* A run's model check is on a worker: the check_done that ends it
	   carries this number (0 = none in progress). */
	uint64_t checking;
	bool ended;      /* its job ended: judged on the next tick */
	int64_t version; /* the version that run tests */
	char *run_dir;   /* its verified copy: the job's KILN_MODEL_DIR */
	char run_ref[KN_MODEL_NAME_MAX + 24]; /* KILN_MODEL: NAME@VERSION */
	struct reval *next;
};

struct reval_state {
	struct kn_timer *timer;
	struct reval *list;
	uint64_t checks; /* the last check number given */
};

static struct reval_state *reval_state_of(struct server *s)
{
	return service_state(s, &reval_service);
}

static void reval_free_one(struct reval *r)
{
	if (!r)
		return;
	reval_row_free(r->row);
	free(r->run_dir);
	json_decref(r->thresholds);
	free(r);
}

static struct reval *find(struct reval_state *rs, const char *name,
			  const char *alias)
{
	for (struct reval *r = rs->list; r; r = r->next)
		if (!strcmp(r->row->name, name) && !strcmp(r->row->alias, alias))
			return r;
	return NULL;
}

static void unlink_reval(struct server *s, struct reval *r)
{
	KN_LIST_UNLINK(&reval_state_of(s)->list, r);
	reval_free_one(r);
}

/*
 * model_revalidation_failed: fired when a run of the alias fails (once,
 * until it passes again), resolved by the next run that passes.
 */
static void reval_alert(struct server *s, struct reval *r, const char *why)
{
	char fingerprint[160];
	struct kn_error err;
	json_t *labels;
	char *summary;

	if ((why != NULL) == r->failing)
		return;
	snprintf(fingerprint, sizeof(fingerprint), "revalidate:%s@%s", r->row->name,
		 r->row->alias);
	labels = json_pack("{s:s, s:s, s:I}", "model", r->row->name, "alias",
			   r->row->alias, "version", (json_int_t)r->version);
	summary = why ? kn_asprintf("re-validation of %s@%s (version %lld) "
				    "failed: %s", r->row->name, r->row->alias,
				    (long long)r->version, why)
		      : kn_asprintf("re-validation of %s@%s (version %lld) "
				    "passed", r->row->name, r->row->alias,
				    (long long)r->version);
	struct server_alert a = server_alert_critical(
		"model_revalidation_failed", fingerprint, summary, labels,
		kn_now_ms());

	if (monitor_server_alert(s, &a, why != NULL, &err) < 0)
		kn_log(KN_LOG_ERROR, "re-validation alert: %s", err.message);
	else
		r->failing = why != NULL;
	free(summary);
	json_decref(labels);
}

/* Store one run's outcome, then fire or resolve the alert. */
static void record(struct server *s, struct reval *r, int64_t job_id,
		   const char *outcome, const char *metrics, const char *why)
{
	struct kn_evaluation_row e = {
		.name = r->row->name,
		.version = r->version,
		.alias = r->row->alias,
		.job_id = job_id,
		.outcome = (char *)outcome,
		.metrics_json = (char *)metrics,
		.detail = (char *)why,
		.time_ms = kn_now_ms(),
	};
	struct kn_error err;

	if (kn_store_evaluation_add(core_store(s), &e, &err) < 0)
		kn_log(KN_LOG_ERROR, "re-validation of %s@%s: %s", r->row->name,
		       r->row->alias, err.message);
	kn_log(strcmp(outcome, "passed") ? KN_LOG_WARN : KN_LOG_INFO,
	       "re-validation of %s@%lld (%s): %s%s%s", r->row->name,
	       (long long)r->version, r->row->alias, outcome, why ? ": " : "",
	       why ? why : "");
	feed_publish(s, "model.evaluation",
		     json_pack("{s:s, s:I, s:s, s:I, s:s, s:o}", "model",
			       r->row->name, "version", (json_int_t)r->version,
			       "alias", r->row->alias, "job", (json_int_t)job_id,
			       "outcome", outcome, "detail",
			       why ? json_string(why) : json_null()));
	reval_alert(s, r, strcmp(outcome, "passed") ? why : NULL);
}

/*
 * A run whose model check is on a worker; req is a POST .../run waiting
 * for the job's id, or NULL. The reval is found again by its key and
 * check number: it may have been replaced or removed meanwhile.
 */
struct reval_check {
	char *name, *alias;
	uint64_t number;
	struct kn_http_req *req;
	struct caller caller;
};

static void reval_check_free(struct reval_check *k)
{
	KN_FREE_ALL(k->name, k->alias, k);
}

static void arm_next(struct server *s);

static void run_reply(struct server *s, const struct reval_check *k,
		      const struct reval *r, int rc,
		      const struct kn_error *err);

/* The check of a run's version ended: submit its evaluation job. */
static void check_done(struct server *s, int rc, const char *dir,
		       int64_t version, const struct kn_error *check_err,
		       void *arg)
{
	struct reval_check *k = arg;
	struct reval *r = NULL;
	struct kn_error err;
	struct caller c;
	char at[KN_MODEL_NAME_MAX + 24];
	int64_t id = 0;

	if (core_closing(s)) {
		/* Not judged: the schedule starts over at the next start. */
		kn_errorf(&err, KN_EUNAVAIL, NULL,
			  "the server is stopping; run it again");
		rc = -1;
		goto reply;
	}
	for (r = reval_state_of(s)->list; r; r = r->next)
		if (!strcmp(r->row->name, k->name) && !strcmp(r->row->alias, k->alias))
			break;
	if (!r || r->checking != k->number) {
		r = NULL;
		rc = kn_errorf(&err, KN_ECONFLICT, "alias",
			       "the re-validation of %s@%s was replaced or "
			       "removed while its run started", k->name,
			       k->alias);
		goto reply;
	}
	r->checking = 0;
	r->version = version;
	snprintf(at, sizeof(at), "%s@%lld", r->row->name, (long long)version);
	if (rc < 0) {
		err = *check_err;
		record(s, r, 0, "error", NULL, err.message);
		goto reply;
	}
	memset(&c, 0, sizeof(c));
	kn_strlcpy(c.name, r->row->owner, sizeof(c.name));
	c.role = KN_ROLE_USER;
	rc = jobs_submit(s, &c, r->row->spec_yaml, strlen(r->row->spec_yaml),
			 r->row->filename,
			 r->row->filename[0] == '/' ? r->row->filename : NULL, &id, &err);
	if (rc < 0) {
		record(s, r, 0, "error", NULL, err.message);
		goto reply;
	}
	r->job_id = id;
	free(r->run_dir);
	r->run_dir = kn_xstrdup(dir);
	snprintf(r->run_ref, sizeof(r->run_ref), "%s", at);
	kn_log(KN_LOG_INFO, "re-validation of %s (%s@%s): job %lld", at,
	       r->row->name, r->row->alias, (long long)id);
reply:
	if (k->req)
		run_reply(s, k, r, rc, &err);
	else if (rc < 0 && !core_closing(s))
		kn_log(KN_LOG_WARN, "re-validation of %s@%s: %s", k->name,
		       k->alias, err.message);
	if (!core_closing(s))
		arm_next(s);
	reval_check_free(k);
}

/*
 * Start one run of r now: its model check goes to a worker and check_done
 * submits the job. req (or NULL) is answered when that is known. A run
 * that cannot start is recorded as such; < 0 when it ended here.
 */
static int run_now(struct server *s, struct reval *r, struct kn_http_req *req,
		   const struct caller *c, struct kn_error *err)
{
	struct reval_check *k;
	char at[KN_MODEL_NAME_MAX + 24];
	int64_t version = 0;
	int rc;

	r->next_at = kn_now_ms() + r->row->every_ms;
	rc = kn_store_model_alias_get(core_store(s), r->row->name, r->row->alias, &version,
				      err);
	if (rc < 0)
		return rc;
	r->version = version;
	snprintf(at, sizeof(at), "%s@%lld", r->row->name, (long long)version);
	k = kn_xcalloc(1, sizeof(*k));
	k->name = kn_xstrdup(r->row->name);
	k->alias = kn_xstrdup(r->row->alias);
	k->number = ++reval_state_of(s)->checks;
	k->req = req;
	if (c)
		k->caller = *c;
	rc = models_deploy_dir_start(s, at, check_done, k, err);
	if (rc < 0) {
		reval_check_free(k);
		record(s, r, 0, "error", NULL, err->message);
		return rc;
	}
	r->checking = k->number;
	return 0;
}

static void arm_next(struct server *s)
{
	struct reval_state *rs = reval_state_of(s);
	int64_t now = kn_now_ms(), due = -1;

	for (struct reval *r = rs->list; r; r = r->next)
		if (!r->job_id && !r->checking &&
		    (due < 0 || r->next_at < due))
			due = r->next_at;
	if (due >= 0)
		kn_timer_arm(rs->timer, due > now ? due - now : 0);
}

static void judge(struct server *s, struct reval *r);

static void tick(void *arg)
{
	struct server *s = arg;
	int64_t now = kn_now_ms();
	struct kn_error err;

	for (struct reval *r = reval_state_of(s)->list; r; r = r->next)
		if (r->ended)
			judge(s, r);
	for (struct reval *r = reval_state_of(s)->list; r; r = r->next)
		if (!r->job_id && !r->checking && r->next_at <= now &&
		    run_now(s, r, NULL, NULL, &err) < 0)
			kn_log(KN_LOG_WARN, "re-validation of %s@%s: %s",
			       r->row->name, r->row->alias, err.message);
	arm_next(s);
}

/* An evaluation job gets the version it tests: its directory and
   NAME@VERSION. */
static bool hook_model(void *arg, int64_t job_id, struct job_model *out)
{
	struct server *s = arg;

	if (!reval_state_of(s))
		return false;
	for (struct reval *r = reval_state_of(s)->list; r; r = r->next)
		if (r->job_id == job_id) {
			if (!r->run_dir)
				return false;
			out->dir = r->run_dir;
			out->ref = r->run_ref;
			return true;
		}
	return false;
}

/* A job ended for good: a re-validation's run is judged. */
static void hook_job_ended(void *arg, int64_t job_id)
{
	struct server *s = arg;

	if (!reval_state_of(s))
		return;
	for (struct reval *r = reval_state_of(s)->list; r; r = r->next)
		if (r->job_id == job_id) {
			r->ended = true;
			kn_timer_arm(reval_state_of(s)->timer, 0);
		}
}

static const struct job_hook_ops reval_job_hooks = {
	.name = "re-validation",
	.job_ended = hook_job_ended,
	.model = hook_model,
};

/* Judge r's run, whose job has ended: store, alert, maybe roll back. */
static void judge(struct server *s, struct reval *r)
{
	struct kn_job_row j;
	struct kn_error err;
	int64_t job_id = r->job_id;
	char why[256], note[160];
	char *metrics = NULL;
	json_t *doc = NULL;

	r->job_id = 0;
	r->ended = false;
	memset(&j, 0, sizeof(j));
	if (kn_store_job_get(core_store(s), job_id, &j, &err) < 0) {
		record(s, r, job_id, "error", NULL, err.message);
		goto out;
	}
	if (j.state != KN_JOB_SUCCEEDED) {
		snprintf(why, sizeof(why), "evaluation job %lld %s: %s",
			 (long long)job_id, kn_job_state_name(j.state),
			 j.reason ? j.reason : "");
		record(s, r, job_id, "error", NULL, why);
		goto out;
	}
	metrics = jobs_metrics_read(s, &j, note, sizeof(note));
	doc = metrics ? json_loads(metrics, 0, NULL) : NULL;
	if (kn_model_thresholds_pass(r->thresholds, doc, why, sizeof(why))) {
		record(s, r, job_id, "passed", metrics, NULL);
		goto out;
	}
	record(s, r, job_id, "failed", metrics, why);
	if (r->row->rollback) {
		struct caller c = {.name = "system", .role = KN_ROLE_ADMIN};
		int64_t now_at = 0, to, from;

		/* Only the version tested is rolled back, not a newer one
		   promoted while the evaluation ran. */
		if (kn_store_model_alias_get(core_store(s), r->row->name, r->row->alias,
					     &now_at, &err) == 0 &&
		    now_at == r->version &&
		    models_alias_rollback(s, &c, r->row->name, r->row->alias, &to, &from,
					  &err) == 0)
			kn_log(KN_LOG_WARN, "re-validation rolled %s@%s back: "
			       "%lld -> %lld", r->row->name, r->row->alias,
			       (long long)from, (long long)to);
		else if (now_at == r->version)
			kn_log(KN_LOG_ERROR, "re-validation of %s@%s: no "
			       "rollback: %s", r->row->name, r->row->alias, err.message);
	}
out:
	json_decref(doc);
	free(metrics);
	kn_job_row_release(&j);
}

static struct reval *reval_from_row(const struct kn_revalidation_row *row,
				    int64_t now)
{
	struct reval *r = kn_xcalloc(1, sizeof(*r));
	struct kn_revalidation_row *own = kn_xmalloc(sizeof(*own));

	*own = *row; /* the numbers; each text is copied below */
	own->name = kn_xstrdup(row->name);
	own->alias = kn_xstrdup(row->alias);
	own->owner = kn_xstrdup(row->owner);
	own->spec_yaml = kn_xstrdup(row->spec_yaml);
	own->filename = kn_xstrdup(row->filename);
	own->thresholds_json =
		row->thresholds_json ? kn_xstrdup(row->thresholds_json) : NULL;
	own->deployment = row->deployment ? kn_xstrdup(row->deployment) : NULL;
	r->row = own;
	r->thresholds = json_loads(row->thresholds_json, 0, NULL);
	r->next_at = now + row->every_ms;
	return r;
}

/* Load the re-validations and schedule their runs. */
static int reval_start(struct server *s, struct kn_error *err)
{
	struct reval_state *rs = kn_xcalloc(1, sizeof(*rs));
	struct kn_revalidation_row *rows = NULL;
	size_t n = 0;
	int rc;

	service_state_set(s, &reval_service, rs);
	rs->timer = kn_timer_new(core_loop(s), tick, s);
	rc = kn_store_revalidation_list(core_store(s), &rows, &n, err);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		struct reval *r = reval_from_row(&rows[i], kn_now_ms());
		r->next = rs->list;
		rs->list = r;
	}
	kn_revalidation_list_free(rows, n);
	if (rc == 0)
		arm_next(s);
	return rc;
}

static void reval_free(struct server *s)
{
	struct reval_state *rs = reval_state_of(s);

	if (!rs)
		return;
	KN_LIST_FREE(rs->list, reval_free_one);
	kn_timer_free(rs->timer);
	free(rs);
}

/*
 * Make row's the re-validation of its (name, alias) in memory, replacing
 * the one there: a run in flight and the alert's state carry over.
 */
static struct reval *install(struct server *s,
			     const struct kn_revalidation_row *row)
{
	struct reval *r = reval_from_row(row, kn_now_ms());
	struct reval *old = find(reval_state_of(s), row->name, row->alias);

	if (old) {
		r->job_id = old->job_id;
		r->checking = old->checking;
		r->ended = old->ended;
		r->version = old->version;
		r->run_dir = old->run_dir;
		old->run_dir = NULL;
		memcpy(r->run_ref, old->run_ref, sizeof(r->run_ref));
		r->failing = old->failing;
		unlink_reval(s, old);
	}
	r->next = reval_state_of(s)->list;
	reval_state_of(s)->list = r;
	arm_next(s);
	return r;
}

/* ---- set by a deployment's spec (deploy.c) ---- */

/* A job file's name as messages give it, beside the deployment's file. */
static char *job_file_name(const char *deployment_file, const char *job_file)
{
	const char *slash = strrchr(deployment_file, '/');

	if (job_file[0] == '/' || !slash)
		return kn_xstrdup(job_file);
	return kn_asprintf("%.*s/%s", (int)(slash - deployment_file),
			   deployment_file, job_file);
}

/* The inline job as job text, with its image (which that form leaves out). */
static char *inline_job_text(const struct kn_job_spec *job)
{
	char *text = kn_job_spec_to_input_text(job, NULL);
	json_t *doc;

	if (!job->image)
		return text;
	doc = json_loads(text, 0, NULL);
	free(text);
	json_object_set_new(doc, "image", json_string(job->image));
	text = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(doc);
	return text;
}

void reval_row_free(struct kn_revalidation_row *row)
{
	if (row)
		kn_revalidation_list_free(row, 1);
}

int reval_for_deployment(struct server *s, const char *deployment,
			 const char *owner,
			 const struct kn_deployment_spec *spec,
			 const char *filename, const char *job_text,
			 struct kn_revalidation_row **out,
			 struct kn_error *err)
{
	const struct kn_deployment_revalidate *rv = spec->revalidate;
	struct kn_revalidation_row *row;
	struct kn_job_spec *job = NULL;
	const char *at = strchr(spec->model, '@');
	struct reval *cur;
	int64_t version;
	int rc;

	*out = NULL;
	if (!rv)
		return 0;
	row = kn_xcalloc(1, sizeof(*row));
	row->name = kn_asprintf("%.*s", (int)(at - spec->model), spec->model);
	row->alias = kn_xstrdup(at + 1);
	cur = find(reval_state_of(s), row->name, row->alias);
	if (cur && cur->row->deployment && strcmp(cur->row->deployment, deployment)) {
		rc = kn_errorf(err, KN_ECONFLICT, "revalidate",
			       "revalidate: %s is re-validated by deployment "
			       "%s's spec; remove it there first", spec->model,
			       cur->row->deployment);
		goto out;
	}
	rc = kn_store_model_alias_get(core_store(s), row->name, row->alias,
				      &version, err);
	if (rc < 0)
		goto out;
	if (rv->job) {
		row->filename = kn_xstrdup(filename[0] ? filename
						       : "deployment");
		row->spec_yaml = inline_job_text(rv->job);
	} else {
		row->filename = job_file_name(filename, rv->job_file);
		/* Not sent (a workflow's deploy step re-applies the stored
		   spec): the text this deployment set before for that file. */
		if (job_text)
			row->spec_yaml = kn_xstrdup(job_text);
		else if (cur && cur->row->deployment &&
			 !strcmp(cur->row->filename, row->filename))
			row->spec_yaml = kn_xstrdup(cur->row->spec_yaml);
		if (!row->spec_yaml) {
			rc = kn_errorf(err, KN_EINVAL, "revalidate.job",
				       "revalidate.job: %s was not sent with "
				       "the deployment; kiln deploy sends the "
				       "job file its spec names",
				       rv->job_file);
			goto out;
		}
	}
	/* Checked now, so a bad job is the deployer's error, not a run's. */
	rc = kn_job_spec_parse(row->spec_yaml, strlen(row->spec_yaml),
			       row->filename, &job, err);
	kn_job_spec_free(job);
	if (rc < 0)
		goto out;
	row->owner = kn_xstrdup(owner);
	row->every_ms = rv->every_ms;
	row->thresholds_json = json_dumps(rv->thresholds,
					  JSON_COMPACT | JSON_SORT_KEYS);
	row->rollback = rv->rollback;
	row->created_at = kn_now_ms();
	row->deployment = kn_xstrdup(deployment);
out:
	if (rc < 0) {
		reval_row_free(row);
		return rc;
	}
	*out = row;
	return 0;
}

void reval_deployment_set(struct server *s, const char *deployment,
			  const struct caller *c,
			  struct kn_revalidation_row *row)
{
	struct kn_error err;
	struct reval *r, *next;
	char object[160];

	for (r = reval_state_of(s)->list; r; r = next) {
		next = r->next;
		if (!r->row->deployment || strcmp(r->row->deployment, deployment) ||
		    (row && !strcmp(r->row->name, row->name) &&
		     !strcmp(r->row->alias, row->alias)))
			continue;
		snprintf(object, sizeof(object), "model/%.64s@%.64s", r->row->name,
			 r->row->alias);
		struct kn_audit a;

		caller_audit(&a, c, "model.revalidate.remove", object,
			     "ok", deployment);
		if (kn_store_revalidation_delete(core_store(s), r->row->name, r->row->alias,
						 &a, &err) < 0) {
			kn_log(KN_LOG_ERROR, "re-validation of %s@%s: %s",
			       r->row->name, r->row->alias, err.message);
			continue;
		}
		kn_log(KN_LOG_INFO, "re-validation of %s@%s removed with "
		       "deployment %s's revalidate:", r->row->name, r->row->alias,
		       deployment);
		reval_alert(s, r, NULL);
		unlink_reval(s, r);
	}
	if (!row)
		return;
	snprintf(object, sizeof(object), "model/%.64s@%.64s", row->name,
		 row->alias);
	struct kn_audit a;

	caller_audit(&a, c, "model.revalidate", object,
		     "ok", row->thresholds_json);
	if (kn_store_revalidation_put(core_store(s), row, &a, &err) < 0)
		kn_log(KN_LOG_ERROR, "re-validation of %s@%s for deployment "
		       "%s: %s", row->name, row->alias, deployment,
		       err.message);
	else
		install(s, row);
	reval_row_free(row);
}

/* ---- the API ---- */

static json_t *reval_json(const struct reval *r)
{
	return json_pack("{s:s, s:s, s:s, s:o, s:o, s:s, s:I, s:O, s:b, s:I, "
			 "s:b, s:o}",
			 "name", r->row->name, "alias", r->row->alias, "owner", r->row->owner,
			 "deployment",
			 r->row->deployment ? json_string(r->row->deployment)
				       : json_null(),
			 "source",
			 r->row->deployment ? json_sprintf("deployment %s",
						      r->row->deployment)
				       : json_string("hand"),
			 "filename", r->row->filename, "every_ms",
			 (json_int_t)r->row->every_ms, "thresholds", r->thresholds,
			 "rollback", r->row->rollback, "next_at_ms",
			 (json_int_t)r->next_at, "failing", r->failing, "job",
			 r->job_id ? json_integer(r->job_id) : json_null());
}

/*
 * POST /v1/models/{name}/revalidation: {"alias", "job" (spec text),
 * "filename", "every" ("6h"), "thresholds", "rollback"}. Sets or replaces
 * the re-validation of NAME@ALIAS; the first run is one interval away.
 */
static void reval_h_put(struct server *s, struct kn_http_req *req,
		 const struct caller *c, const char *param)
{
	struct kn_revalidation_row row;
	struct kn_job_spec *spec = NULL;
	struct kn_error err;
	struct kn_audit a;
	struct reval *r;
	const char *alias, *job, *every, *filename;
	json_t *body, *th;
	char object[160], *th_text = NULL;
	int64_t every_ms = 0, v;

	snprintf(object, sizeof(object), "model/%.140s", param);
	if (!(body = models_body_object(req, &err)) ||
	    !models_name_checked(param, &err) ||
	    !(alias = models_body_alias(body, &err)))
		goto fail;
	snprintf(object, sizeof(object), "model/%s@%s", param, alias);
	if (kn_store_model_alias_get(core_store(s), param, alias, &v, &err) < 0)
		goto fail;
	job = json_string_value(json_object_get(body, "job"));
	filename = json_string_value(json_object_get(body, "filename"));
	if (!filename)
		filename = "eval.yaml";
	if (!job) {
		kn_errorf(&err, KN_EINVAL, "job",
			  "job (the evaluation job spec's text) is required");
		goto fail;
	}
	/* Checked now, so a bad spec is the caller's error, not a run's. */
	if (kn_job_spec_parse(job, strlen(job), filename, &spec, &err) < 0)
		goto fail;
	kn_job_spec_free(spec);
	every = json_string_value(json_object_get(body, "every"));
	if (!every || kn_parse_duration(every, &every_ms) < 0 ||
	    every_ms < EVERY_MIN_MS || every_ms > EVERY_MAX_MS) {
		kn_errorf(&err, KN_EINVAL, "every",
			  "every must be a duration from 1s to 366d (\"6h\")");
		goto fail;
	}
	th = json_object_get(body, "thresholds");
	if (kn_model_thresholds_validate(th, &err) < 0)
		goto fail;
	th_text = json_dumps(th, JSON_COMPACT | JSON_SORT_KEYS);
	memset(&row, 0, sizeof(row));
	row.name = (char *)param;
	row.alias = (char *)alias;
	row.owner = (char *)c->name;
	row.spec_yaml = (char *)job;
	row.filename = (char *)filename;
	row.every_ms = every_ms;
	row.thresholds_json = th_text;
	row.rollback = json_is_true(json_object_get(body, "rollback"));
	row.created_at = kn_now_ms();
	caller_audit(&a, c, "model.revalidate", object,
		     "ok", th_text);
	if (kn_store_revalidation_put(core_store(s), &row, &a, &err) < 0)
		goto fail;
	r = install(s, &row);
	kn_http_reply_json(req, 200, json_pack("{s:o}", "revalidation",
					       reval_json(r)));
	goto out;
fail:
	models_fail(s, req, c, "model.revalidate", object, &err);
out:
	free(th_text);
	json_decref(body);
}

/* GET /v1/models/{name}/revalidation: this model's re-validations. */
static void reval_h_list(struct server *s, struct kn_http_req *req,
		  const struct caller *c, const char *param)
{
	json_t *list = json_array();

	(void)c;
	for (struct reval *r = reval_state_of(s)->list; r; r = r->next)
		if (!strcmp(r->row->name, param))
			json_array_append_new(list, reval_json(r));
	kn_http_reply_json(req, 200, json_pack("{s:o}", "revalidations", list));
}

/* POST /v1/models/{name}/revalidation/run {"alias"}: one run at once. */
static void reval_h_run(struct server *s, struct kn_http_req *req,
		 const struct caller *c, const char *param)
{
	struct kn_error err;
	struct reval *r;
	const char *alias;
	json_t *body;
	char object[160];

	snprintf(object, sizeof(object), "model/%.140s", param);
	if (!(body = models_body_object(req, &err)) ||
	    !(alias = models_body_alias(body, &err)))
		goto fail;
	snprintf(object, sizeof(object), "model/%.64s@%.64s", param, alias);
	r = find(reval_state_of(s), param, alias);
	if (!r) {
		kn_errorf(&err, KN_ENOTFOUND, "alias",
			  "%s@%s has no re-validation: set one with kiln model "
			  "revalidate %s --alias %s --job FILE --every DURATION "
			  "--max METRIC=N", param, alias, param, alias);
		goto fail;
	}
	if (r->job_id || r->checking) {
		if (r->job_id)
			kn_errorf(&err, KN_ECONFLICT, "alias",
				  "a re-validation of %s@%s is running (job "
				  "%lld)", param, alias, (long long)r->job_id);
		else
			kn_errorf(&err, KN_ECONFLICT, "alias",
				  "a re-validation of %s@%s is starting (its "
				  "model is being checked)", param, alias);
		goto fail;
	}
	/* Answered by check_done, once the job is submitted. */
	if (run_now(s, r, req, c, &err) < 0) {
		arm_next(s);
		goto fail;
	}
	goto out;
fail:
	models_fail(s, req, c, "model.revalidate.run", object, &err);
out:
	json_decref(body);
}

/* POST .../run's answer, once its run's job is submitted (or is not). */
static void run_reply(struct server *s, const struct reval_check *k,
		      const struct reval *r, int rc,
		      const struct kn_error *err)
{
	char object[160];

	snprintf(object, sizeof(object), "model/%.64s@%.64s", k->name,
		 k->alias);
	core_audit(s, &k->caller, "model.revalidate.run", object,
		   rc < 0 ? "error" : "ok", rc < 0 ? err->message : NULL);
	if (rc < 0) {
		kn_http_reply_error(k->req, err);
		return;
	}
	kn_http_reply_json(k->req, 202,
			   json_pack("{s:I, s:I}", "job", (json_int_t)r->job_id,
				     "version", (json_int_t)r->version));
}

/* GET /v1/models/{name}/evaluations, {name} being NAME@VERSION|@ALIAS. */
static void reval_h_evaluations(struct server *s, struct kn_http_req *req,
			 const struct caller *c, const char *param)
{
	struct kn_model_ref ref;
	struct kn_error err;
	int64_t version;

	(void)c;
	if (kn_model_ref_parse(param, true, "model", &ref, &err) < 0) {
		kn_http_reply_error(req, &err);
		return;
	}
	version = ref.version;
	if (ref.alias[0] && kn_store_model_alias_get(core_store(s), ref.name,
						     ref.alias, &version,
						     &err) < 0) {
		kn_http_reply_error(req, &err);
		return;
	}
	kn_http_reply_json(req, 200,
			   json_pack("{s:s, s:I, s:o}", "name", ref.name,
				     "version", (json_int_t)version,
				     "evaluations",
				     models_evaluations_json(s, ref.name,
							    version)));
}

static const struct route routes[] = {
	/* Re-validation (revalidate.c). */
	{"POST", "/v1/models/{name}/revalidation", KN_ROLE_OPERATOR, false,
	 "model.revalidate", reval_h_put},
	{"GET", "/v1/models/{name}/revalidation", KN_ROLE_VIEWER, false, NULL,
	 reval_h_list},
	{"POST", "/v1/models/{name}/revalidation/run", KN_ROLE_OPERATOR, false,
	 "model.revalidate.run", reval_h_run},
	{"GET", "/v1/models/{name}/evaluations", KN_ROLE_VIEWER, false, NULL,
	 reval_h_evaluations},
	{0},
};

const struct service reval_service = {
	.name = "re-validation",
	.phase = SERVICE_PHASE_RECOVERED,
	.start = reval_start,
	.stop = reval_free,
	.hooks = &reval_job_hooks,
	.routes = routes,
};
