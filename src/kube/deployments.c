/*
 * Deployments under the Kubernetes executor: kiln keeps the spec, the
 * replica count and the gateway's keys; Kubernetes runs the replicas, the
 * rolling update and the probes.
 *
 * The loop thread states what it wants (kn_kube_deploy_set, _remove)
 * under a lock; the executor's worker compares that with what the API
 * has each turn (a list of kiln's Deployments and one of their pods, the
 * same two requests whatever the number of deployments) and makes the
 * difference: POST what is missing, PUT a Deployment whose generation
 * label is older than a spec change, merge-PATCH spec.replicas for a
 * count change, DELETE what is no longer wanted. Being level-triggered,
 * a restarted server finds its Deployments by label and writes nothing
 * when the generation matches; a failed call is tried again next turn.
 *
 * `kiln rollout restart` is what `kubectl rollout restart` does: a
 * merge PATCH of the pod template's annotation
 * kubectl.kubernetes.io/restartedAt, a template change that the
 * Deployment controller rolls out as any other (maxUnavailable 0).
 *
 * The worker works on copies taken under the lock, so the loop may
 * replace a deployment while a call about it is in flight; the results
 * it writes back (status, error) are about the name, whatever version.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kube/internal.h"
#include "kube/kube.h"

#define DEPLOYMENTS_PATH "/apis/apps/v1/namespaces/%s/deployments"
#define SERVICES_PATH "/api/v1/namespaces/%s/services"
#define MANAGED_SELECTOR "labelSelector=app.kubernetes.io%%2Fmanaged-by%%3Dkiln"
#define POD_SELECTOR "labelSelector=kiln.dev%%2Fdeployment"
#define ERROR_MAX 300
#define ZONE_LABEL "topology.kubernetes.io/zone"
/* Nodes whose zone is remembered; past this the memory starts over. */
#define ZONES_MAX 512

struct wanted {
	char name[64];   /* kiln's */
	char kname[64];  /* the Deployment's and Service's */
	json_t *deployment, *service;
	int replicas;
	int64_t generation, spec_generation;
	bool removed;
	uint64_t version; /* bumped by each change from the loop */
	int64_t restart_at; /* a restart to send (ms since the epoch), or 0 */
	/* Written by the worker. */
	bool service_known;
	bool synced;
	char error[ERROR_MAX];
	json_t *view;
	struct wanted *next;
};

/* A node's zone label as read once ("" when it has none, or the node
   cannot be read: without RBAC on nodes, zones are simply not known). */
struct node_zone {
	char node[256];
	char zone[64];
};

struct kube_deploys {
	pthread_mutex_t lock;
	struct wanted *wanted_list;
	/* Set once every kept deployment has been set; cleared once the
	   worker has deleted the Deployments no kept one claims. */
	bool sweep_pending;
	/* The worker's alone. */
	struct node_zone *zones;
	size_t n_zones;
};

/* ---- rendering ---- */

int kn_kube_deploy_manifests(const struct kn_kube_exec_config *cfg,
			     const struct kn_deployment_spec *spec,
			     int replicas, int64_t generation, json_t **out,
			     struct kn_error *err)
{
	struct kn_kube_render_opts opts = {0};
	json_t *docs = NULL, *doc, *labels;
	char gen[32];
	size_t i;
	int rc;

	opts.image = cfg->image;
	opts.namespace_ = cfg->namespace_;
	opts.scheduler_name = cfg->scheduler_name;
	opts.products = cfg->products;
	rc = kn_kube_render_deployment(spec, &opts, &docs, err);
	if (rc < 0)
		return rc;
	snprintf(gen, sizeof(gen), "%lld", (long long)generation);
	json_array_foreach(docs, i, doc) {
		json_t *meta = json_object_get(doc, "metadata");
		json_object_set_new(meta, "annotations",
				    json_pack("{s:s}", "kiln.dev/name",
					      spec->job.name));
	}
	doc = json_array_get(docs, 0);
	/* A copy: the rendered documents share one labels object with the
	   pod template, which must not change on a scale. */
	labels = json_deep_copy(json_object_get(json_object_get(doc,
								"metadata"),
						"labels"));
	json_object_set_new(labels, KN_KUBE_LABEL_GENERATION, json_string(gen));
	json_object_set_new(json_object_get(doc, "metadata"), "labels", labels);
	json_object_set_new(json_object_get(doc, "spec"), "replicas",
			    json_integer(replicas));
	*out = docs;
	return 0;
}

/* ---- the loop's side ---- */

static struct wanted *find(struct kube_deploys *d, const char *name)
{
	for (struct wanted *w = d->wanted_list; w; w = w->next)
		if (!strcmp(w->name, name))
			return w;
	return NULL;
}

/* ex's state, or NULL with err when ex is another executor. */
static struct kube_exec *kube_of(struct kn_executor *ex, struct kn_error *err)
{
	struct kube_exec *ke = kube_exec_of(ex);

	if (!ke)
		kn_errorf(err, KN_EINVAL, "executor", "deployments on "
			  "Kubernetes need --executor kubernetes");
	return ke;
}

int kn_kube_deploy_set(struct kn_executor *ex,
		       const struct kn_deployment_spec *spec, int replicas,
		       int64_t generation, bool spec_changed,
		       struct kn_error *err)
{
	struct kube_exec *ke = kube_of(ex, err);
	const struct kn_kube_exec_config *cfg;
	struct kube_deploys *d;
	json_t *docs = NULL;
	struct wanted *w;
	const char *kname;
	int rc;

	if (!ke)
		return -EINVAL;
	cfg = kube_exec_config(ke);
	d = kube_exec_deploys(ke);
	rc = kn_kube_deploy_manifests(cfg, spec, replicas, generation, &docs,
				      err);
	if (rc < 0)
		return rc;
	kname = json_string_value(json_object_get(
		json_object_get(json_array_get(docs, 0), "metadata"), "name"));
	pthread_mutex_lock(&d->lock);
	w = find(d, spec->job.name);
	if (!w) {
		w = kn_xcalloc(1, sizeof(*w));
		kn_strlcpy(w->name, spec->job.name, sizeof(w->name));
		w->next = d->wanted_list;
		d->wanted_list = w;
		spec_changed = true;
	}
	kn_strlcpy(w->kname, kname, sizeof(w->kname));
	json_decref(w->deployment);
	json_decref(w->service);
	w->deployment = json_incref(json_array_get(docs, 0));
	w->service = json_incref(json_array_get(docs, 1));
	w->replicas = replicas;
	w->generation = generation;
	if (spec_changed || w->removed)
		w->spec_generation = generation;
	w->removed = false;
	w->synced = false;
	w->version++;
	pthread_mutex_unlock(&d->lock);
	json_decref(docs);
	kube_exec_wake(ke);
	return 0;
}

int kn_kube_deploy_check(struct kn_executor *ex,
			 const struct kn_deployment_spec *spec,
			 struct kn_error *err)
{
	struct kube_exec *ke = kube_of(ex, err);
	json_t *docs = NULL;
	int rc;

	if (!ke)
		return -EINVAL;
	rc = kn_kube_deploy_manifests(kube_exec_config(ke), spec,
				      spec->replicas, 1, &docs, err);
	json_decref(docs);
	return rc;
}

int kn_kube_deploy_restart(struct kn_executor *ex, const char *name,
			   int64_t at_ms, struct kn_error *err)
{
	struct kube_exec *ke = kube_of(ex, err);
	struct kube_deploys *d;
	struct wanted *w;

	if (!ke)
		return -EINVAL;
	d = kube_exec_deploys(ke);
	pthread_mutex_lock(&d->lock);
	w = find(d, name);
	if (w && !w->removed)
		w->restart_at = at_ms;
	pthread_mutex_unlock(&d->lock);
	if (!w)
		return kn_errorf(err, KN_ENOTFOUND, "name", "deployment %s is "
				 "not kept on Kubernetes", name);
	kube_exec_wake(ke);
	return 0;
}

void kn_kube_deploy_remove(struct kn_executor *ex, const char *name)
{
	struct kube_exec *ke = kube_exec_of(ex);
	struct kube_deploys *d;
	struct wanted *w;

	if (!ke)
		return;
	d = kube_exec_deploys(ke);
	pthread_mutex_lock(&d->lock);
	w = find(d, name);
	if (w) {
		w->removed = true;
		w->version++;
	}
	pthread_mutex_unlock(&d->lock);
	kube_exec_wake(ke);
}

void kn_kube_deploy_loaded(struct kn_executor *ex)
{
	struct kube_exec *ke = kube_exec_of(ex);
	struct kube_deploys *d;

	if (!ke)
		return;
	d = kube_exec_deploys(ke);
	pthread_mutex_lock(&d->lock);
	d->sweep_pending = true;
	pthread_mutex_unlock(&d->lock);
	kube_exec_wake(ke);
}

json_t *kn_kube_deploy_status(struct kn_executor *ex, const char *name)
{
	struct kube_exec *ke = kube_exec_of(ex);
	const char *ns;
	struct kube_deploys *d;
	struct wanted *w;
	json_t *out = NULL;
	char svc[256];

	if (!ke)
		return NULL;
	d = kube_exec_deploys(ke);
	ns = kube_exec_config(ke)->namespace_;
	pthread_mutex_lock(&d->lock);
	w = find(d, name);
	if (w && !w->removed) {
		out = w->view ? json_deep_copy(w->view)
			      : kn_kube_deployment_view(NULL, NULL);
		if (!w->view)
			json_object_set_new(out, "desired",
					    json_integer(w->replicas));
		snprintf(svc, sizeof(svc), "%s.%s.svc." KN_KUBE_CLUSTER_DOMAIN
			 ":%lld", w->kname, ns,
			 (long long)json_integer_value(json_object_get(
				 json_array_get(json_object_get(
					 json_object_get(w->service, "spec"),
					 "ports"), 0), "port")));
		json_object_set_new(out, "deployment", json_string(w->kname));
		json_object_set_new(out, "namespace", json_string(ns));
		json_object_set_new(out, "service", json_string(svc));
		json_object_set_new(out, "synced", json_boolean(w->synced));
		json_object_set_new(out, "error", w->error[0] ?
				    json_string(w->error) : json_null());
	}
	pthread_mutex_unlock(&d->lock);
	return out;
}

static void wanted_free(struct wanted *w)
{
	json_decref(w->deployment);
	json_decref(w->service);
	json_decref(w->view);
	free(w);
}

struct kube_deploys *kube_deploys_new(void)
{
	struct kube_deploys *d = kn_xcalloc(1, sizeof(*d));

	pthread_mutex_init(&d->lock, NULL);
	return d;
}

void kube_deploys_free(struct kube_deploys *d)
{
	if (!d)
		return;
	while (d->wanted_list) {
		struct wanted *w = d->wanted_list;
		d->wanted_list = w->next;
		wanted_free(w);
	}
	free(d->zones);
	pthread_mutex_destroy(&d->lock);
	free(d);
}

/* ---- the status view (pure) ---- */

static json_int_t int_at(json_t *obj, const char *a, const char *b)
{
	return json_integer_value(json_object_get(json_object_get(obj, a), b));
}

static json_t *condition(json_t *obj, const char *type)
{
	json_t *c;
	size_t i;

	json_array_foreach(json_object_get(json_object_get(obj, "status"),
					   "conditions"), i, c) {
		const char *t = json_string_value(json_object_get(c, "type"));
		if (t && !strcmp(t, type))
			return c;
	}
	return NULL;
}

static bool is_true(json_t *cond)
{
	const char *s = json_string_value(json_object_get(cond, "status"));

	return s && !strcmp(s, "True");
}

static json_t *str_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

/* "Reason: message", or either alone; NULL when neither is there. */
static json_t *why(const char *reason, const char *message)
{
	if (reason && message)
		return json_sprintf("%s: %s", reason, message);
	return str_or_null(reason ? reason : message);
}

/* Why a pod is not ready, or null when it is. */
static json_t *pod_reason(json_t *pod, bool ready)
{
	json_t *cs, *sched = condition(pod, "PodScheduled");
	json_t *rc = condition(pod, "Ready");
	size_t i;

	if (json_object_get(json_object_get(pod, "metadata"),
			    "deletionTimestamp"))
		return json_string("terminating");
	if (ready)
		return json_null();
	if (sched && !is_true(sched))
		return why(kube_str_at(sched, "reason", NULL),
			   kube_str_at(sched, "message", NULL));
	json_array_foreach(json_object_get(json_object_get(pod, "status"),
					   "containerStatuses"), i, cs) {
		json_t *waiting = json_object_get(json_object_get(cs, "state"),
						  "waiting");
		json_t *term = json_object_get(json_object_get(cs, "state"),
					       "terminated");
		if (waiting)
			return why(kube_str_at(waiting, "reason", NULL),
				   kube_str_at(waiting, "message", NULL));
		if (term)
			return why(kube_str_at(term, "reason", NULL),
				   kube_str_at(term, "message", NULL));
	}
	if (rc)
		return why(kube_str_at(rc, "reason", NULL),
			   kube_str_at(rc, "message", NULL));
	return why(kube_str_at(pod, "status", "phase"), NULL);
}

static int pod_cmp(const void *a, const void *b)
{
	json_t *const *x = a, *const *y = b;
	const char *nx = kube_str_at(*x, "name", NULL), *ny = kube_str_at(*y, "name", NULL);

	return strcmp(nx ? nx : "", ny ? ny : "");
}

static json_t *pods_view(json_t *pods)
{
	size_t n = json_array_size(pods), i;
	json_t **v = kn_xcalloc(n ? n : 1, sizeof(*v)), *pod, *out;

	json_array_foreach(pods, i, pod) {
		bool ready = is_true(condition(pod, "Ready")) &&
			     !json_object_get(json_object_get(pod, "metadata"),
					      "deletionTimestamp");
		json_int_t restarts = 0;
		json_t *cs;
		size_t k;

		json_array_foreach(json_object_get(json_object_get(pod,
								   "status"),
						   "containerStatuses"), k, cs)
			restarts += json_integer_value(
				json_object_get(cs, "restartCount"));
		v[i] = json_pack("{s:o, s:o, s:o, s:b, s:I, s:o}", "name",
				 str_or_null(kube_str_at(pod, "metadata", "name")),
				 "node",
				 str_or_null(kube_str_at(pod, "spec", "nodeName")),
				 "phase",
				 str_or_null(kube_str_at(pod, "status", "phase")),
				 "ready", ready, "restarts", restarts,
				 "reason", pod_reason(pod, ready));
	}
	qsort(v, n, sizeof(*v), pod_cmp);
	out = json_array();
	for (i = 0; i < n; i++)
		json_array_append_new(out, v[i]);
	free(v);
	return out;
}

json_t *kn_kube_deployment_view(json_t *d, json_t *pods)
{
	json_t *progressing = condition(d, "Progressing");
	json_t *available = condition(d, "Available");
	json_t *conds = json_array(), *c;
	json_int_t desired = int_at(d, "spec", "replicas");
	json_int_t ready = int_at(d, "status", "readyReplicas");
	json_int_t updated = int_at(d, "status", "updatedReplicas");
	json_int_t avail = int_at(d, "status", "availableReplicas");
	json_int_t total = int_at(d, "status", "replicas");
	const char *preason = kube_str_at(progressing, "reason", NULL);
	const char *rollout;
	json_t *reason = json_null(), *message = json_null();
	size_t i;

	json_array_foreach(json_object_get(json_object_get(d, "status"),
					   "conditions"), i, c)
		json_array_append_new(
			conds, json_pack("{s:o, s:o, s:o, s:o}", "type",
					 str_or_null(kube_str_at(c, "type", NULL)),
					 "status",
					 str_or_null(kube_str_at(c, "status", NULL)),
					 "reason",
					 str_or_null(kube_str_at(c, "reason", NULL)),
					 "message",
					 str_or_null(kube_str_at(c, "message", NULL))));
	if (!d) {
		rollout = "pending";
	} else if (preason && !strcmp(preason, "ProgressDeadlineExceeded")) {
		/* The controller gave up waiting (progressDeadlineSeconds):
		   the new pods never became available. */
		rollout = "failed";
		reason = json_string(preason);
		message = str_or_null(kube_str_at(progressing, "message", NULL));
	} else if (int_at(d, "status", "observedGeneration") <
		   int_at(d, "metadata", "generation")) {
		rollout = "pending"; /* the controller has not seen it yet */
	} else if (updated == desired && avail == desired && ready == desired &&
		   total == desired) {
		rollout = "complete";
	} else {
		rollout = "progressing";
	}
	if (d && json_is_null(reason) && available && !is_true(available)) {
		reason = str_or_null(kube_str_at(available, "reason", NULL));
		message = str_or_null(kube_str_at(available, "message", NULL));
	} else if (d && json_is_null(reason) && preason) {
		reason = json_string(preason);
		message = str_or_null(kube_str_at(progressing, "message", NULL));
	}
	return json_pack("{s:I, s:I, s:I, s:I, s:s, s:o, s:o, s:o, s:o}",
			 "desired", desired, "ready", ready, "updated", updated,
			 "available", avail, "rollout", rollout, "reason",
			 reason, "message", message, "conditions", conds,
			 "pods", pods_view(pods));
}

/* ---- the worker's side ---- */


static const char *zone_of(struct kube_deploys *d, struct kn_kube_client *c,
			   const char *node)
{
	struct node_zone *z;
	struct kn_error err;
	const char *label;
	json_t *answer = NULL;
	long status = 0;
	char *path;

	for (size_t i = 0; i < d->n_zones; i++)
		if (!strcmp(d->zones[i].node, node))
			return d->zones[i].zone;
	path = kn_asprintf("/api/v1/nodes/%s", node);
	if (kn_kube_get(c, path, &status, &answer, &err) < 0) {
		free(path);
		return ""; /* asked again next turn */
	}
	free(path);
	if (d->n_zones == ZONES_MAX)
		d->n_zones = 0;
	if (!d->zones)
		d->zones = kn_xcalloc(ZONES_MAX, sizeof(*d->zones));
	z = &d->zones[d->n_zones++];
	kn_strlcpy(z->node, node, sizeof(z->node));
	label = status == 200 ? json_string_value(json_object_get(
			json_object_get(json_object_get(answer, "metadata"),
					"labels"),
			ZONE_LABEL)) : NULL;
	kn_strlcpy(z->zone, label ? label : "", sizeof(z->zone));
	if (status != 200 && status != 404)
		kn_log(KN_LOG_INFO, "kubernetes: node %s: HTTP %ld; replicas "
		       "there have no zone", node, status);
	json_decref(answer);
	return z->zone;
}

/* Each pod of a view with its node's zone, null when not known. */
static void add_zones(struct kube_deploys *d, struct kn_kube_client *c,
		      json_t *view)
{
	json_t *pod;
	size_t i;

	json_array_foreach(json_object_get(view, "pods"), i, pod) {
		const char *node = kube_str_at(pod, "node", NULL);
		const char *zone = node ? zone_of(d, c, node) : "";

		json_object_set_new(pod, "zone",
				    *zone ? json_string(zone) : json_null());
	}
}

/* What one turn works on: copies, so the loop may change the list. */
struct item {
	char name[64], kname[64];
	json_t *deployment, *service;
	int replicas;
	int64_t generation, spec_generation;
	bool removed, service_known;
	uint64_t version;
	int64_t restart_at;
	/* Results. */
	bool restarted;
	bool done_removing, synced;
	char error[ERROR_MAX];
	json_t *view;
};

/* "POST deployments: HTTP 403 Forbidden: deployments.apps is ..." */
static void api_error(char *out, const char *what, long status,
		      json_t *answer, const struct kn_error *err)
{
	const char *reason = kube_str_at(answer, "reason", NULL);
	const char *msg = kube_str_at(answer, "message", NULL);

	if (err)
		snprintf(out, ERROR_MAX, "%s: %.200s", what, err->message);
	else
		snprintf(out, ERROR_MAX, "%s: HTTP %ld%s%s%s%s", what, status,
			 reason ? " " : "", reason ? reason : "",
			 msg ? ": " : "", msg ? msg : "");
}

enum call { CALL_POST, CALL_PUT, CALL_PATCH, CALL_DELETE };

/*
 * One request; 0 when it answered one of the accepted statuses (0-ended
 * list ok), else the error in it->error. *answer (may be NULL) gets the
 * body.
 */
static int call(struct kn_kube_client *c, enum call kind, const char *path,
		json_t *body, const long *ok, const char *what,
		struct item *it, json_t **answer)
{
	struct kn_error err;
	json_t *got = NULL;
	long status = 0;
	int rc;

	switch (kind) {
	case CALL_POST:
		rc = kn_kube_post(c, path, body, &status, &got, &err);
		break;
	case CALL_PUT:
		rc = kn_kube_put(c, path, body, &status, &got, &err);
		break;
	case CALL_PATCH:
		rc = kn_kube_patch(c, path, KN_KUBE_MERGE_PATCH, body, &status,
				   &got, &err);
		break;
	default:
		rc = kn_kube_delete(c, path, body, &status, &got, &err);
		break;
	}
	if (rc == 0) {
		rc = -EIO;
		for (const long *s = ok; *s; s++)
			if (status == *s)
				rc = 0;
		if (rc < 0)
			api_error(it->error, what, status, got, NULL);
	} else {
		api_error(it->error, what, 0, NULL, &err);
	}
	if (answer)
		*answer = got;
	else
		json_decref(got);
	if (rc < 0)
		kn_log(KN_LOG_WARN, "kubernetes: deployment %s: %s", it->name,
		       it->error);
	return rc;
}

static int64_t generation_of(json_t *d)
{
	const char *g = json_string_value(json_object_get(
		json_object_get(json_object_get(d, "metadata"), "labels"),
		KN_KUBE_LABEL_GENERATION));

	return g ? strtoll(g, NULL, 10) : 0;
}

static void remove_both(struct kn_kube_client *c, const char *ns,
			const char *kname, struct item *it)
{
	static const long ok[] = {200, 202, 404, 0};
	json_t *opts = json_pack("{s:s, s:s, s:s}", "kind", "DeleteOptions",
				 "apiVersion", "v1", "propagationPolicy",
				 "Background");
	char *dpath = kn_asprintf(DEPLOYMENTS_PATH "/%s", ns, kname);
	char *spath = kn_asprintf(SERVICES_PATH "/%s", ns, kname);

	if (call(c, CALL_DELETE, dpath, opts, ok, "DELETE deployment", it,
		 NULL) == 0 &&
	    call(c, CALL_DELETE, spath, opts, ok, "DELETE service", it,
		 NULL) == 0) {
		it->done_removing = true;
		kn_log(KN_LOG_INFO, "kubernetes: deleted Deployment and "
		       "Service %s/%s", ns, kname);
	}
	json_decref(opts);
	KN_FREE_ALL(dpath, spath);
}

/* Bring one wanted deployment to what the loop asked. */
static void apply(struct kn_kube_client *c, const char *ns, struct item *it,
		  json_t *observed, json_t **current)
{
	static const long created[] = {200, 201, 0};
	static const long svc_ok[] = {200, 201, 409, 0};
	char *path = NULL;
	json_t *answer = NULL, *body;

	*current = json_incref(observed);
	if (!observed) {
		path = kn_asprintf(DEPLOYMENTS_PATH, ns);
		if (call(c, CALL_POST, path, it->deployment, created,
			 "POST deployment", it, &answer) < 0)
			goto out;
		kn_log(KN_LOG_INFO, "kubernetes: created Deployment %s/%s",
		       ns, it->kname);
		json_decref(*current);
		*current = json_incref(answer);
	} else if (generation_of(observed) != it->generation) {
		path = kn_asprintf(DEPLOYMENTS_PATH "/%s", ns, it->kname);
		/* A newer label than kiln's is an earlier deployment of
		   that name (deleted and created again): written whole. */
		if (generation_of(observed) >= it->spec_generation &&
		    generation_of(observed) < it->generation) {
			/* Only the count changed: the template stays, no
			   rollout. */
			char gen[32];

			snprintf(gen, sizeof(gen), "%lld",
				 (long long)it->generation);
			body = json_pack("{s:{s:{s:s}}, s:{s:i}}", "metadata",
					 "labels", KN_KUBE_LABEL_GENERATION, gen,
					 "spec", "replicas", it->replicas);
			if (call(c, CALL_PATCH, path, body, created,
				 "PATCH deployment", it, &answer) < 0) {
				json_decref(body);
				goto out;
			}
			json_decref(body);
		} else {
			/* The whole object, so what the new spec dropped
			   goes too; resourceVersion makes it conditional on
			   what this turn read (409 Conflict: next turn). */
			body = json_deep_copy(it->deployment);
			json_object_set(json_object_get(body, "metadata"),
					"resourceVersion",
					json_object_get(json_object_get(
						observed, "metadata"),
						"resourceVersion"));
			if (call(c, CALL_PUT, path, body, created,
				 "PUT deployment", it, &answer) < 0) {
				json_decref(body);
				goto out;
			}
			json_decref(body);
		}
		kn_log(KN_LOG_INFO, "kubernetes: updated Deployment %s/%s to "
		       "generation %lld", ns, it->kname,
		       (long long)it->generation);
		json_decref(*current);
		*current = json_incref(answer);
	}
	if (!it->service_known && observed) {
		/* Found again (a restart): look before posting. */
		struct kn_error err;
		long status = 0;

		free(path);
		path = kn_asprintf(SERVICES_PATH "/%s", ns, it->kname);
		json_decref(answer);
		answer = NULL;
		if (kn_kube_get(c, path, &status, &answer, &err) == 0 &&
		    status == 200)
			it->service_known = true;
	}
	if (!it->service_known) {
		free(path);
		path = kn_asprintf(SERVICES_PATH, ns);
		json_decref(answer);
		answer = NULL;
		if (call(c, CALL_POST, path, it->service, svc_ok,
			 "POST service", it, NULL) < 0)
			goto out;
		it->service_known = true;
	}
	if (it->restart_at && *current) {
		char at[32];
		time_t secs = (time_t)(it->restart_at / 1000);
		struct tm tm;

		gmtime_r(&secs, &tm);
		strftime(at, sizeof(at), "%Y-%m-%dT%H:%M:%SZ", &tm);
		free(path);
		path = kn_asprintf(DEPLOYMENTS_PATH "/%s", ns, it->kname);
		json_decref(answer);
		answer = NULL;
		body = json_pack("{s:{s:{s:{s:{s:s}}}}}", "spec", "template",
				 "metadata", "annotations",
				 KN_KUBE_RESTARTED_AT, at);
		if (call(c, CALL_PATCH, path, body, created,
			 "PATCH deployment (restart)", it, &answer) < 0) {
			json_decref(body);
			goto out;
		}
		json_decref(body);
		it->restarted = true;
		kn_log(KN_LOG_INFO, "kubernetes: restarted Deployment %s/%s "
		       "(%s)", ns, it->kname, at);
		json_decref(*current);
		*current = json_incref(answer);
	} else if (it->restart_at) {
		it->restarted = true; /* created just now: new pods anyway */
	}
	it->synced = true;
	it->error[0] = '\0';
out:
	json_decref(answer);
	free(path);
}

static int list(struct kn_kube_client *c, const char *path, json_t **out,
		char *error)
{
	struct kn_error err;
	long status = 0;

	*out = NULL;
	if (kn_kube_get(c, path, &status, out, &err) < 0) {
		snprintf(error, ERROR_MAX, "GET %.80s: %.200s", path,
			 err.message);
		return -1;
	}
	if (status != 200) {
		const char *reason = kube_str_at(*out, "reason", NULL);
		const char *msg = kube_str_at(*out, "message", NULL);

		snprintf(error, ERROR_MAX, "GET %s: HTTP %ld%s%s%s%s", path,
			 status, reason ? " " : "", reason ? reason : "",
			 msg ? ": " : "", msg ? msg : "");
		json_decref(*out);
		*out = NULL;
		return -1;
	}
	return 0;
}

/* Copies of the wanted deployments, taken under the lock; *sweep: the
   Deployments no kept one claims are to go. */
static struct item *items_take(struct kube_deploys *deploys, size_t *n,
			       bool *sweep)
{
	struct item *items;
	size_t k = 0;

	pthread_mutex_lock(&deploys->lock);
	*sweep = deploys->sweep_pending;
	*n = 0;
	for (struct wanted *w = deploys->wanted_list; w; w = w->next)
		(*n)++;
	items = kn_xcalloc(*n ? *n : 1, sizeof(*items));
	for (struct wanted *w = deploys->wanted_list; w; w = w->next, k++) {
		struct item *it = &items[k];
		memcpy(it->name, w->name, sizeof(it->name));
		memcpy(it->kname, w->kname, sizeof(it->kname));
		it->deployment = json_deep_copy(w->deployment);
		it->service = json_deep_copy(w->service);
		it->replicas = w->replicas;
		it->generation = w->generation;
		it->spec_generation = w->spec_generation;
		it->removed = w->removed;
		it->service_known = w->service_known;
		it->version = w->version;
		it->restart_at = w->restart_at;
	}
	pthread_mutex_unlock(&deploys->lock);
	return items;
}

/* Delete the Deployments labelled as kiln's deployments that no item
   claims; true when every one went (or none was left). */
static bool sweep_orphans(struct kn_kube_client *c, const char *ns,
			  json_t *deps, const struct item *items, size_t n,
			  volatile const int *stop)
{
	bool swept = !*stop;
	json_t *d;
	size_t i;

	json_array_foreach(json_object_get(deps, "items"), i, d) {
		struct item orphan = {0};
		const char *kname = kube_str_at(d, "metadata", "name");
		const char *label = json_string_value(json_object_get(
			json_object_get(json_object_get(d, "metadata"),
					"labels"),
			KN_KUBE_LABEL_DEPLOYMENT));
		bool kept = false;

		/* kiln's Jobs share the managed-by label; only deployments
		   carry kiln.dev/deployment. */
		if (!label || !kname || *stop)
			continue;
		for (size_t k = 0; k < n; k++)
			if (!strcmp(items[k].kname, kname))
				kept = true;
		if (kept)
			continue;
		kn_strlcpy(orphan.name, kname, sizeof(orphan.name));
		kn_log(KN_LOG_INFO, "kubernetes: Deployment %s/%s is no kiln "
		       "deployment's any more", ns, kname);
		remove_both(c, ns, kname, &orphan);
		swept = swept && orphan.done_removing;
	}
	return swept;
}

/* What the turn found, back into the wanted list under the lock: a
   removal done and not asked again forgets the deployment. */
static void items_write_back(struct kube_deploys *deploys,
			     struct item *items, size_t n)
{
	pthread_mutex_lock(&deploys->lock);
	for (struct wanted **p = &deploys->wanted_list; *p;) {
		struct wanted *w = *p;
		struct item *it = NULL;

		for (size_t k = 0; k < n; k++)
			if (!strcmp(items[k].name, w->name))
				it = &items[k];
		if (it && it->removed && it->done_removing &&
		    w->version == it->version) {
			*p = w->next;
			wanted_free(w);
			continue;
		}
		if (it) {
			memcpy(w->error, it->error, sizeof(w->error));
			if (it->view) {
				json_decref(w->view);
				w->view = it->view;
				it->view = NULL;
			}
			if (w->version == it->version) {
				w->service_known = it->service_known;
				w->synced = it->synced;
			}
			/* Sent: unless another was asked for meanwhile. */
			if (it->restarted && w->restart_at == it->restart_at)
				w->restart_at = 0;
		}
		p = &w->next;
	}
	pthread_mutex_unlock(&deploys->lock);
}

void kube_deploy_turn(struct kube_deploys *deploys, struct kn_kube_client *c,
		      const char *ns, volatile const int *stop)
{
	struct item *items = NULL;
	size_t n = 0, k;
	bool sweep;
	char *dpath = NULL, *ppath = NULL, error[ERROR_MAX] = "";
	json_t *deps = NULL, *pods = NULL;

	items = items_take(deploys, &n, &sweep);
	/* Nothing wanted and nothing left to sweep: no request. */
	if (n == 0 && !sweep)
		goto out;
	dpath = kn_asprintf(DEPLOYMENTS_PATH "?" MANAGED_SELECTOR, ns);
	ppath = kn_asprintf("/api/v1/namespaces/%s/pods?" POD_SELECTOR, ns);
	/* The pods only when some deployment's status needs them. */
	if (list(c, dpath, &deps, error) < 0 ||
	    (n > 0 && list(c, ppath, &pods, error) < 0)) {
		kn_log(KN_LOG_WARN, "kubernetes: deployments: %s", error);
		for (k = 0; k < n; k++)
			kn_strlcpy(items[k].error, error, ERROR_MAX);
		goto write_back;
	}
	for (k = 0; k < n && !*stop; k++) {
		struct item *it = &items[k];
		json_t *current = NULL, *mine;

		if (it->removed) {
			remove_both(c, ns, it->kname, it);
			continue;
		}
		apply(c, ns, it, kube_item_named(deps, it->kname), &current);
		mine = kube_items_labelled(pods, KN_KUBE_LABEL_DEPLOYMENT,
					   it->kname);
		it->view = kn_kube_deployment_view(current, mine);
		add_zones(deploys, c, it->view);
		json_decref(mine);
		json_decref(current);
	}
	if (sweep && sweep_orphans(c, ns, deps, items, n, stop)) {
		pthread_mutex_lock(&deploys->lock);
		deploys->sweep_pending = false;
		pthread_mutex_unlock(&deploys->lock);
	}
write_back:
	items_write_back(deploys, items, n);
out:
	for (k = 0; k < n; k++) {
		json_decref(items[k].deployment);
		json_decref(items[k].service);
		json_decref(items[k].view);
	}
	free(items);
	json_decref(deps);
	json_decref(pods);
	KN_FREE_ALL(dpath, ppath);
}

const struct kn_deploy_ops kube_deploy_ops = {
	.set = kn_kube_deploy_set,
	.check = kn_kube_deploy_check,
	.restart = kn_kube_deploy_restart,
	.remove = kn_kube_deploy_remove,
	.loaded = kn_kube_deploy_loaded,
	.status = kn_kube_deploy_status,
};
