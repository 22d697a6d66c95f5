/*
 * The secondary Kubernetes scheduler `kiln kube-scheduler` runs: pods
 * that ask for it (spec.schedulerName) are placed with kiln's packing
 * policies, GPU shares included, and bound through the API.
 *
 * The loop is the informer pattern without a library: list nodes and
 * pods, then watch pods from the list's resourceVersion; each event
 * updates the snapshot and pending pods are placed at once. A watch that
 * ends (the server's timeoutSeconds) is resumed from the last version seen
 * after a fresh node list; an ERROR event or HTTP 410 Gone (the version is
 * too old) starts over with a full relist. Decisions come from place.c
 * (kn_kube_place), which is pure; this file does the talking and logging.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "base/base.h"
#include "kube/kube.h"
#include "sched/sched.h"

/* After a failed list, wait this long, doubling up to the cap. */
#define RETRY_FIRST_MS 500
#define RETRY_MAX_MS 30000
/* Pending pods considered per round: far above any real queue. */
#define MAX_PENDING 4096

struct sched {
	struct kn_kube_client *client;
	struct kn_kube_cluster *cluster;
	const struct kn_pack_policy *policy;
	volatile int *stop;
	char *rv;         /* last resourceVersion seen on pods */
	json_t *reported; /* "ns/name" -> last reason logged */
	bool relist;      /* set by an ERROR event */
	bool failed;      /* ... that was not 410 Expired */
	long binds;
};

static void pause_ms(struct sched *s, int64_t ms)
{
	int64_t until = kn_mono_ms() + ms;

	while (!*s->stop && kn_mono_ms() < until) {
		struct timespec ts = {0, 50 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
}

static void set_rv(struct sched *s, json_t *obj)
{
	const char *rv = json_string_value(json_object_get(
		json_object_get(obj, "metadata"), "resourceVersion"));

	if (rv && *rv) {
		free(s->rv);
		s->rv = kn_xstrdup(rv);
	}
}

/* The message of an API Status object, or dflt. */
static const char *status_message(json_t *status, const char *dflt)
{
	const char *s =
		json_string_value(json_object_get(status, "message"));

	return s ? s : dflt;
}

static int list(struct sched *s, const char *path, json_t **out)
{
	struct kn_error err = {0};
	long status = 0;
	json_t *body = NULL;
	int rc = kn_kube_get(s->client, path, &status, &body, &err);

	if (rc < 0) {
		if (rc != -EINTR)
			kn_log(KN_LOG_ERROR, "%s", err.message);
		return rc;
	}
	if (status != 200) {
		kn_log(KN_LOG_ERROR, "GET %s: HTTP %ld: %s", path, status,
		       status_message(body, "no message"));
		json_decref(body);
		return -EIO;
	}
	*out = body;
	return 0;
}

/* Log why a pod waits, once per reason. */
static void report(struct sched *s, json_t *now, const char *key,
		   const char *reason)
{
	const char *before =
		json_string_value(json_object_get(s->reported, key));

	if (!before || strcmp(before, reason))
		kn_log(KN_LOG_INFO, "%s", reason);
	json_object_set_new(now, key, json_string(reason));
}

static void bind_one(struct sched *s, const struct kn_kube_placement *pl,
		     json_t *now)
{
	const struct kn_kube_pod_ref ref = {pl->namespace_, pl->name};
	const struct kn_kube_pod_ref *p = &ref;
	const struct kn_kube_decision *d = &pl->d;
	struct kn_error err = {0};
	json_t *binding = kn_kube_binding(p->namespace_, p->name, d);
	json_t *answer = NULL;
	char *ns = curl_easy_escape(NULL, p->namespace_, 0);
	char *name = curl_easy_escape(NULL, p->name, 0);
	char *path = kn_asprintf("/api/v1/namespaces/%s/pods/%s/binding", ns,
				 name);
	char key[600];
	long status = 0;
	int rc;

	snprintf(key, sizeof(key), "%s/%s", p->namespace_, p->name);
	rc = kn_kube_post(s->client, path, binding, &status, &answer, &err);
	if (rc < 0) {
		if (rc != -EINTR)
			report(s, now, key, err.message);
	} else if (status == 200 || status == 201 || status == 202) {
		if (d->gpu_milli < 1000 && d->n_gpus == 1)
			kn_log(KN_LOG_INFO, "bound %s to %s (GPU %d, %d milli)",
			       key, d->node, d->gpus[0], d->gpu_milli);
		else
			kn_log(KN_LOG_INFO, "bound %s to %s", key, d->node);
		kn_kube_cluster_assume(s->cluster, p->namespace_, p->name, d);
		s->binds++;
	} else if (status == 409) {
		/* Bound by someone else meanwhile: the watch will say so. */
		kn_log(KN_LOG_DEBUG, "%s: already bound", key);
	} else {
		char *reason = kn_asprintf(
			"POST %s: HTTP %ld: %s", path, status,
			status_message(answer, "no message"));
		report(s, now, key, reason);
		free(reason);
	}
	json_decref(answer);
	json_decref(binding);
	curl_free(ns);
	curl_free(name);
	free(path);
}

static void schedule_pending(struct sched *s)
{
	struct kn_kube_pod_ref *pending =
		kn_xcalloc(MAX_PENDING, sizeof(*pending));
	json_t *now = json_object();
	size_t n = kn_kube_cluster_pending(s->cluster, pending, MAX_PENDING);
	struct kn_kube_placement *gang =
		kn_xcalloc(KN_SPEC_MAX_TASKS, sizeof(*gang));
	char (*keys)[600];

	if (n > MAX_PENDING)
		n = MAX_PENDING;
	/* Copy the names: binding changes the cluster the refs point into. */
	keys = kn_xcalloc(n + 1, sizeof(*keys));
	for (size_t i = 0; i < n; i++)
		snprintf(keys[i], sizeof(keys[i]), "%s%c%s",
			 pending[i].namespace_, '\0', pending[i].name);
	for (size_t i = 0; i < n && !*s->stop; i++) {
		struct kn_kube_pod_ref ref = {
			keys[i], keys[i] + strlen(keys[i]) + 1};
		struct kn_error err = {0};
		char key[600];
		size_t placed = 0;
		int rc = kn_kube_place_gang(s->cluster, s->policy,
					    ref.namespace_, ref.name, gang,
					    KN_SPEC_MAX_TASKS, &placed, &err);

		snprintf(key, sizeof(key), "%s/%s", ref.namespace_, ref.name);
		/* A gang's other pods are bound here too and then no longer
		   pending: their turn in this loop finds -ENOENT. */
		for (size_t k = 0; rc == 0 && k < placed && !*s->stop; k++)
			bind_one(s, &gang[k], now);
		if (rc < 0 && rc != -ENOENT)
			report(s, now, key, err.message);
	}
	json_decref(s->reported);
	s->reported = now;
	KN_FREE_ALL(keys, gang, pending);
}

static int on_event(void *arg, const char *type, json_t *object)
{
	struct sched *s = arg;
	struct kn_error err = {0};

	if (!strcmp(type, "ERROR")) {
		/* 410 Expired: our version is compacted away, a normal turn
		   that relists at once. Any other error: relist after the
		   back-off. */
		bool expired =
			json_integer_value(json_object_get(object, "code")) == 410;

		kn_log(expired ? KN_LOG_INFO : KN_LOG_WARN,
		       "watch: %s; listing again",
		       status_message(object, "error event"));
		s->relist = true;
		s->failed = !expired;
		return 1;
	}
	set_rv(s, object);
	if (!strcmp(type, "BOOKMARK"))
		return 0;
	if (kn_kube_cluster_pod_event(s->cluster, type, object, &err) < 0) {
		kn_log(KN_LOG_WARN, "watch: %s", err.message);
		return 0;
	}
	schedule_pending(s);
	return 0;
}

/* List nodes into the snapshot. */
static int refresh_nodes(struct sched *s)
{
	struct kn_error err = {0};
	json_t *nodes = NULL;
	int rc = list(s, "/api/v1/nodes", &nodes);

	if (rc == 0 && kn_kube_cluster_set_nodes(s->cluster, nodes, &err) < 0) {
		kn_log(KN_LOG_ERROR, "%s", err.message);
		rc = -EINVAL;
	}
	json_decref(nodes);
	return rc;
}

static int relist(struct sched *s)
{
	struct kn_error err = {0};
	json_t *pods = NULL;
	int rc = refresh_nodes(s);

	if (rc == 0)
		rc = list(s, "/api/v1/pods", &pods);
	if (rc == 0 && kn_kube_cluster_set_pods(s->cluster, pods, &err) < 0) {
		kn_log(KN_LOG_ERROR, "%s", err.message);
		rc = -EINVAL;
	}
	if (rc == 0) {
		free(s->rv);
		s->rv = NULL;
		set_rv(s, pods);
	}
	json_decref(pods);
	return rc;
}

enum watch_end {
	WATCH_ENDED,   /* the server closed it: resume from s->rv */
	WATCH_EXPIRED, /* 410: list again at once */
	WATCH_FAILED,  /* list again after the back-off */
};

/* Watch pods until the stream ends. */
static enum watch_end watch(struct sched *s, int seconds)
{
	struct kn_error err = {0};
	char *rv = curl_easy_escape(NULL, s->rv ? s->rv : "", 0);
	char *path = kn_asprintf("/api/v1/pods?watch=1&resourceVersion=%s"
				 "&allowWatchBookmarks=true&timeoutSeconds=%d",
				 rv, seconds);
	long status = 0;
	int rc;

	s->relist = false;
	s->failed = false;
	rc = kn_kube_watch(s->client, path, on_event, s, &status, &err);
	curl_free(rv);
	free(path);
	if (rc < 0) {
		if (rc != -EINTR)
			kn_log(KN_LOG_ERROR, "watch: %s", err.message);
		return WATCH_FAILED;
	}
	if (s->relist)
		return s->failed ? WATCH_FAILED : WATCH_EXPIRED;
	if (status == 410) {
		kn_log(KN_LOG_INFO, "watch: HTTP 410 Gone; listing again");
		return WATCH_EXPIRED;
	}
	if (status != 200) {
		kn_log(KN_LOG_ERROR, "watch: HTTP %ld; listing again", status);
		return WATCH_FAILED;
	}
	return WATCH_ENDED;
}

static int64_t backoff(int64_t ms)
{
	return ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : ms * 2;
}

int kn_kube_scheduler_run(const struct kn_kube_scheduler_config *cfg,
			  volatile int *stop, long *binds,
			  struct kn_error *err)
{
	struct sched s = {.policy = cfg->policy, .stop = stop};
	int64_t retry_ms = RETRY_FIRST_MS;
	bool need_list = true;
	enum watch_end end;
	int rc;

	*binds = 0;
	rc = kn_kube_client_new(cfg->auth, &s.client, err);
	if (rc < 0)
		return rc;
	kn_kube_client_stop_on(s.client, stop);
	s.cluster = kn_kube_cluster_new(cfg->scheduler_name, cfg->products);
	s.reported = json_object();
	while (!*stop) {
		if (need_list) {
			if (relist(&s) < 0) {
				pause_ms(&s, retry_ms);
				retry_ms = backoff(retry_ms);
				continue;
			}
			schedule_pending(&s);
		} else if (refresh_nodes(&s) == 0) {
			schedule_pending(&s);
		}
		if (*stop)
			break;
		end = watch(&s, cfg->watch_seconds);
		need_list = end != WATCH_ENDED;
		/* A watch that keeps failing would spin: back off. */
		if (end == WATCH_FAILED) {
			pause_ms(&s, retry_ms);
			retry_ms = backoff(retry_ms);
		} else {
			retry_ms = RETRY_FIRST_MS;
		}
	}
	*binds = s.binds;
	kn_kube_cluster_free(s.cluster);
	kn_kube_client_free(s.client);
	json_decref(s.reported);
	free(s.rv);
	return 0;
}
