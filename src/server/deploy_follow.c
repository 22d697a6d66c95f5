/*
 * Deployments that follow a registry alias: a moved alias rolls them to the version it names, once that version's signature is checked.
 */
#include "deploysvc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "registry/registry.h"

/* ---- following an alias ---- */

/* The alias a deployment follows (its model is NAME@ALIAS), or NULL. */
const char *deploy_followed_alias(const struct deployment *p,
				  struct kn_model_ref *ref)
{
	struct kn_error err;

	if (p->spec->model_job || strchr(p->spec->model, '/') ||
	    kn_model_ref_parse(p->spec->model, true, "model", ref, &err) < 0)
		return NULL;
	return ref->alias[0] ? ref->alias : NULL;
}

/*
 * The registry version a copy under $KILN_HOME/registry/models/N/V is
 * (models_deploy_dir names them so); 0 for a model that is not one.
 */
int64_t deploy_dir_version(const struct deployment *p, const char *dir)
{
	struct kn_model_ref ref;
	struct kn_error err;
	const char *slash = dir ? strrchr(dir, '/') : NULL;

	if (!slash || p->spec->model_job || strchr(p->spec->model, '/') ||
	    kn_model_ref_parse(p->spec->model, true, "model", &ref, &err) < 0)
		return 0;
	return strtoll(slash + 1, NULL, 10);
}

/*
 * deployment_model_refused: the alias moved to a version that cannot be
 * served. Fired again (with the new reason) on each refusal; resolved by
 * the next version that is rolled out.
 */
static void follow_alert(struct server *s, struct deployment *p,
			 const char *why)
{
	char fingerprint[96];
	struct kn_error err;
	json_t *labels = json_pack("{s:s, s:s}", "deployment", p->row.name,
				   "model", p->spec->model);
	char *summary = why ? kn_asprintf("deployment %s does not follow %s: "
					  "%s", p->row.name, p->spec->model, why)
			    : kn_asprintf("deployment %s follows %s again",
					  p->row.name, p->spec->model);
	struct server_alert a = server_alert_critical(
		"deployment_model_refused", fingerprint, summary, labels,
		kn_now_ms());
	int rc = 0;

	snprintf(fingerprint, sizeof(fingerprint), "deployment:%s:model",
		 p->row.name);
	if (p->model_refused)
		rc = monitor_server_alert(s, &a, false, &err);
	if (rc == 0)
		p->model_refused = false;
	if (rc == 0 && why)
		rc = monitor_server_alert(s, &a, true, &err);
	if (rc == 0 && why)
		p->model_refused = true;
	if (rc < 0)
		kn_log(KN_LOG_ERROR, "deployment %s alert: %s", p->row.name,
		       err.message);
	free(summary);
	json_decref(labels);
}

/* The version the alias p follows names now (0 when unknown). */
int64_t deploy_followed_version(struct server *s, const struct deployment *p)
{
	struct kn_model_ref ref;
	struct kn_error err;
	const char *alias = deploy_followed_alias(p, &ref);
	int64_t version = 0;

	if (!alias || kn_store_model_alias_get(core_store(s), ref.name, alias,
					       &version, &err) < 0)
		return 0;
	return version;
}

static void follow_refused(struct server *s, struct deployment *p,
			   const struct kn_error *err)
{
	kn_log(KN_LOG_WARN, "deployment %s: not rolled to %s: %s", p->row.name,
	       p->spec->model, err->message);
	feed_publish(s, "deployment.rollout",
		     json_pack("{s:s, s:s, s:s, s:I}", "deployment", p->row.name,
			       "state", "refused", "reason", err->message,
			       "version",
			       (json_int_t)deploy_dir_version(p, p->row.model_dir)));
	follow_alert(s, p, err->message);
}

/* The version the alias names verified, in dir: roll to it. */
static void follow_to(struct server *s, struct deployment *p,
		      const char *dir)
{
	struct kn_audit a;
	struct kn_error err;
	char object[96], detail[160];
	int64_t from = deploy_dir_version(p, p->row.model_dir), to;

	follow_alert(s, p, NULL);
	if (!strcmp(dir, p->row.model_dir))
		return;
	to = deploy_dir_version(p, dir);
	snprintf(object, sizeof(object), "deployment/%s", p->row.name);
	snprintf(detail, sizeof(detail), "%s: %lld -> %lld", p->spec->model,
		 (long long)from, (long long)to);
	memset(&a, 0, sizeof(a));
	a.actor = "system";
	a.role = "system";
	a.action = "deployment.follow";
	a.object = object;
	a.outcome = "ok";
	a.detail = detail;
	free(p->row.model_dir);
	p->row.model_dir = kn_xstrdup(dir);
	p->row.generation++;
	p->row.updated_at = kn_now_ms();
	for (int i = 0; i < p->n_reps; i++)
		p->reps[i].replacing = false;
	p->row.rollout_next = p->row.replicas > 0 ? 0 : -1;
	if (deploy_save(deploy_state_of(s), p, &a, &err) < 0)
		kn_log(KN_LOG_ERROR, "deployment %s: %s", p->row.name, err.message);
	kn_log(KN_LOG_INFO, "deployment %s: rolling to %s (version %lld)",
	       p->row.name, p->spec->model, (long long)to);
	feed_publish(s, "deployment.rollout",
		     json_pack("{s:s, s:s, s:I, s:I}", "deployment", p->row.name,
			       "state", "started", "from", (json_int_t)from,
			       "to", (json_int_t)to));
	deploy_reconcile(deploy_state_of(s), p);
	deploy_arm(deploy_state_of(s), 0);
}

/* A deploy_follow whose check runs on a worker: names, not pointers. */
struct follow_check {
	char *deployment, *model;
};

static void follow_checked(struct server *s, int rc, const char *dir,
			   int64_t version, const struct kn_error *err,
			   void *arg)
{
	struct follow_check *w = arg;
	struct deployment *p = core_closing(s) ? NULL : deploy_find(deploy_state_of(s),
							 w->deployment);

	/* Gone, given another model, or its alias moved again meanwhile
	   (the check of that move decides). */
	if (p && !strcmp(p->spec->model, w->model) &&
	    deploy_followed_version(s, p) == version) {
		if (rc < 0)
			follow_refused(s, p, err);
		else
			follow_to(s, p, dir);
	}
	KN_FREE_ALL(w->deployment, w->model, w);
}

/*
 * The alias moved: roll the deployment to the version it now names, one
 * replica at a time, once that version verifies (signature, trust, every
 * file's digest, the copy replicas read: the files on a worker);
 * otherwise keep serving the current one, and say why in an alert and an
 * event.
 */
void deploy_follow(struct server *s, struct deployment *p)
{
	struct follow_check *w = kn_xcalloc(1, sizeof(*w));
	struct kn_error err;

	w->deployment = kn_xstrdup(p->row.name);
	w->model = kn_xstrdup(p->spec->model);
	if (models_deploy_dir_start(s, p->spec->model, follow_checked, w,
				    &err) < 0) {
		follow_refused(s, p, &err);
		KN_FREE_ALL(w->deployment, w->model, w);
	}
}

/*
 * Alias `alias` of `model` moved: deployments following it roll to the
 * version it names, or keep theirs and fire an alert saying why.
 */
void deploy_alias_moved(struct server *s, const char *model,
			       const char *alias)
{
	struct kn_model_ref ref;
	const char *a;

	if (!deploy_state_of(s))
		return;
	for (struct deployment *p = deploy_state_of(s)->list; p; p = p->next)
		if ((a = deploy_followed_alias(p, &ref)) && !strcmp(a, alias) &&
		    !strcmp(ref.name, model))
			deploy_follow(s, p);
}
