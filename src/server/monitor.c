/*
 * Alerts in the server: every scrape interval, one round reads this
 * node's metrics in-process (src/telemetry, on the worker pool: procfs,
 * sysfs and NVML reads may be slow) and fetches each --scrape exporter
 * on the loop; when every source has answered or failed, the samples go
 * into the history (src/alert keeps only the metrics rules use, for a
 * bounded window) under an instance label (the node name, or the
 * exporter's host:port), a synthetic up{instance} says which sources
 * answered, and the rules are evaluated at the round's time. Each firing
 * or resolved alert is written to the store, published on the event
 * stream, logged, and, with --alert-webhook, POSTed as JSON.
 *
 * Rounds never overlap: a round still waiting on a slow exporter when the
 * next one is due is simply followed by the next tick (fetches time out
 * before the interval ends). Webhook deliveries go one at a time, in
 * order, with a bounded queue and bounded retries, so a dead receiver
 * costs memory for at most WEBHOOK_QUEUE_MAX alerts.
 */
#include "internal.h"

#include "alert/alert.h"
#include "telemetry/telemetry.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The history window: an hour, enough for bands over tens of minutes. */
#define HISTORY_RETENTION_MS (60 * 60 * 1000)
#define MAX_TARGETS 32
#define FETCH_TIMEOUT_MAX_MS 10000
#define WEBHOOK_QUEUE_MAX 256
#define WEBHOOK_ATTEMPTS 3
#define WEBHOOK_TIMEOUT_MS 5000
#define WEBHOOK_BACKOFF_MS 1000

struct target {
	struct monitor *m;
	char *url;
	char instance[128];
	struct kn_expo_sample *samples;
	size_t n;
	bool up;
};

/* One in-process read of this node, handed to a worker. */
struct local_job {
	struct monitor *m;
	struct kn_nvml *nvml;     /* the monitor's; one job at a time */
	unsigned *last_xid;
	struct kn_gpu_sample *gpus;
	char hostname[64];
	struct kn_expo_sample *samples;
	size_t n;
	char error[256];
};

struct hook {
	char *body;
	int attempts;
	struct hook *next;
};

struct monitor {
	struct server *s;
	struct kn_alert_rules *rules;
	struct kn_alert_history *history;
	struct kn_alert_eval *eval;
	struct kn_timer *timer;
	struct target targets[MAX_TARGETS];
	size_t n_targets;
	int outstanding;         /* sources of the current round not back */
	int64_t round_at;

	bool local;
	struct local_job local_job;
	bool local_up;

	char *webhook;
	struct hook *hooks, *hooks_tail;
	size_t n_hooks;
	bool hook_busy;
	struct kn_timer *hook_timer;
};

/* ---- webhook ---- */

static void hook_free(struct hook *h)
{
	KN_FREE_ALL(h->body, h);
}

static void hook_next(void *arg);

static void hook_done(int status, const char *body, size_t len,
		      const char *error, void *arg)
{
	struct monitor *m = arg;
	struct hook *h = m->hooks;

	(void)body;
	(void)len;
	m->hook_busy = false;
	if (status < 200 || status >= 300) {
		if (h->attempts < WEBHOOK_ATTEMPTS) {
			/* 1 s, then 2 s: a receiver restarting gets a
			   moment. */
			kn_timer_arm(m->hook_timer,
				     WEBHOOK_BACKOFF_MS << (h->attempts - 1));
			return;
		}
		kn_log(KN_LOG_WARN, "alert webhook %s: giving up on an alert "
		       "after %d attempts: %s", m->webhook, h->attempts,
		       error ? error : "refused");
	}
	/* Delivered, or given up: the next one goes now. */
	m->hooks = h->next;
	if (!m->hooks)
		m->hooks_tail = NULL;
	m->n_hooks--;
	hook_free(h);
	kn_timer_arm(m->hook_timer, 0);
}

static void hook_next(void *arg)
{
	static const char *const headers[] = {
		"Content-Type: application/json", NULL};
	struct monitor *m = arg;
	struct hook *h = m->hooks;

	if (!h || m->hook_busy)
		return;
	h->attempts++;
	if (kn_http_fetch(m->s->loop, "POST", m->webhook, headers, h->body,
			  WEBHOOK_TIMEOUT_MS, hook_done, m) == 0)
		m->hook_busy = true;
	else
		hook_done(0, NULL, 0, "cannot send", m);
}

static void hook_queue(struct monitor *m, json_t *doc)
{
	struct hook *h;

	if (!m->webhook)
		return;
	if (m->n_hooks >= WEBHOOK_QUEUE_MAX) {
		kn_log(KN_LOG_WARN, "alert webhook %s: %d alerts waiting; "
		       "dropping this one", m->webhook, WEBHOOK_QUEUE_MAX);
		return;
	}
	h = kn_xcalloc(1, sizeof(*h));
	h->body = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS);
	if (m->hooks_tail)
		m->hooks_tail->next = h;
	else
		m->hooks = h;
	m->hooks_tail = h;
	m->n_hooks++;
	if (!m->hook_busy && !kn_timer_pending(m->hook_timer))
		kn_timer_arm(m->hook_timer, 0);
}

/* ---- transitions ---- */

static json_t *num_or_null(double v)
{
	return isfinite(v) ? json_real(v) : json_null();
}

static json_t *labels_json(const struct kn_label *l, size_t n)
{
	json_t *o = json_object();

	for (size_t i = 0; i < n; i++)
		json_object_set_new(o, l[i].name, json_string(l[i].value));
	return o;
}

/*
 * Send an alert body (its reference is taken) where every transition
 * goes: the webhook, when one is set, and the event stream.
 */
static void alert_send(struct server *s, json_t *alert, bool firing)
{
	if (s->monitor) {
		json_t *hook = json_pack("{s:s, s:O}", "status",
					 firing ? "firing" : "resolved",
					 "alert", alert);
		hook_queue(s->monitor, hook);
		json_decref(hook);
	}
	feed_publish(s, firing ? "alert.firing" : "alert.resolved",
		     json_pack("{s:o}", "alert", alert));
}

static void announce(struct monitor *m, const struct kn_alert_transition *t)
{
	const char *state = kn_alert_state_name(t->state);
	json_t *alert;
	struct kn_error err;
	char *labels_text;
	int rc;

	alert = json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:o, s:I}", "rule",
			  t->rule->name, "severity",
			  kn_alert_severity_name(t->rule->severity), "state",
			  state, "fingerprint", t->fingerprint, "labels",
			  labels_json(t->labels, t->n_labels), "summary",
			  t->summary, "value", num_or_null(t->value),
			  "active_at_ms", (json_int_t)t->active_at_ms);
	json_object_set_new(alert, t->state == KN_ALERT_FIRING ? "fired_at_ms"
							       : "resolved_at_ms",
			    json_integer(t->at_ms));
	labels_text = json_dumps(json_object_get(alert, "labels"),
				 JSON_COMPACT | JSON_SORT_KEYS);
	if (t->state == KN_ALERT_FIRING) {
		struct kn_alert_row row = {
			.fingerprint = t->fingerprint,
			.rule = t->rule->name,
			.severity = (char *)kn_alert_severity_name(t->rule->severity),
			.labels_json = labels_text,
			.summary = t->summary,
			.value = t->value,
			.active_at = t->active_at_ms,
			.fired_at = t->at_ms,
		};
		rc = kn_store_alert_fire(m->s->store, &row, NULL, &err);
		kn_log(KN_LOG_WARN, "alert %s firing (%s): %s", t->rule->name,
		       kn_alert_severity_name(t->rule->severity), t->summary);
	} else {
		rc = kn_store_alert_resolve(m->s->store, t->fingerprint,
					    t->at_ms, &err);
		kn_log(KN_LOG_INFO, "alert %s resolved: %s", t->rule->name,
		       t->summary);
	}
	if (rc < 0)
		kn_log(KN_LOG_ERROR, "recording alert %s: %s", t->rule->name,
		       err.message);
	free(labels_text);
	alert_send(m->s, alert, t->state == KN_ALERT_FIRING);
}

struct server_alert server_alert_critical(const char *rule,
					  const char *fingerprint,
					  const char *summary, json_t *labels,
					  int64_t active_at_ms)
{
	return (struct server_alert){
		.rule = rule,
		.severity = "critical",
		.fingerprint = fingerprint,
		.summary = summary,
		.labels = labels,
		.value = 1,
		.active_at_ms = active_at_ms,
	};
}

int monitor_server_alert(struct server *s, const struct server_alert *a,
			 bool firing, struct kn_error *err)
{
	char *labels_text = json_dumps(a->labels, JSON_COMPACT | JSON_SORT_KEYS);
	int64_t now = kn_now_ms();
	json_t *alert;
	int rc;

	if (firing) {
		struct kn_alert_row row = {
			.fingerprint = (char *)a->fingerprint,
			.rule = (char *)a->rule,
			.severity = (char *)a->severity,
			.labels_json = labels_text,
			.summary = (char *)a->summary,
			.value = a->value,
			.active_at = a->active_at_ms,
			.fired_at = now,
		};
		rc = kn_store_alert_fire(s->store, &row, NULL, err);
	} else {
		rc = kn_store_alert_resolve(s->store, a->fingerprint, now, err);
	}
	free(labels_text);
	if (rc < 0)
		return rc;
	alert = json_pack("{s:s, s:s, s:s, s:s, s:O, s:s, s:o, s:I, s:I}",
			  "rule", a->rule, "severity", a->severity, "state",
			  firing ? "firing" : "resolved", "fingerprint",
			  a->fingerprint, "labels", a->labels, "summary",
			  a->summary, "value", num_or_null(a->value),
			  "active_at_ms", (json_int_t)a->active_at_ms,
			  firing ? "fired_at_ms" : "resolved_at_ms",
			  (json_int_t)now);
	if (a->extra)
		json_object_update(alert, a->extra);
	kn_log(firing ? KN_LOG_WARN : KN_LOG_INFO, "alert %s %s (%s): %s",
	       a->rule, firing ? "firing" : "resolved", a->severity,
	       a->summary);
	alert_send(s, alert, firing);
	return 0;
}

static void finish_round(struct monitor *m)
{
	struct kn_alert_transition *tr = NULL;
	struct kn_expo_sample up = {.metric = "up"};
	size_t n = 0;

	if (m->local) {
		up.value = m->local_up;
		kn_alert_history_add(m->history, m->rules, m->local_job.samples,
				     m->local_job.n, m->s->nodes[0].name, m->round_at);
		kn_alert_history_add(m->history, m->rules, &up, 1,
				     m->s->nodes[0].name, m->round_at);
		kn_expo_free(m->local_job.samples, m->local_job.n);
		m->local_job.samples = NULL;
		m->local_job.n = 0;
	}
	for (size_t i = 0; i < m->n_targets; i++) {
		struct target *t = &m->targets[i];
		up.value = t->up;
		kn_alert_history_add(m->history, m->rules, t->samples, t->n,
				     t->instance, m->round_at);
		kn_alert_history_add(m->history, m->rules, &up, 1, t->instance,
				     m->round_at);
		kn_expo_free(t->samples, t->n);
		t->samples = NULL;
		t->n = 0;
	}
	kn_alert_eval_run(m->eval, m->history, m->round_at, &tr, &n);
	for (size_t i = 0; i < n; i++)
		if (tr[i].state != KN_ALERT_PENDING)
			announce(m, &tr[i]);
	kn_alert_transitions_free(tr, n);
}

static void source_back(struct monitor *m)
{
	if (--m->outstanding == 0)
		finish_round(m);
}

/* ---- sources ---- */

static void target_done(int status, const char *body, size_t len,
			const char *error, void *arg)
{
	struct target *t = arg;
	struct kn_error err;

	t->up = false;
	if (status == 200) {
		if (kn_expo_parse(body, len, &t->samples, &t->n, &err) == 0)
			t->up = true;
		else
			kn_log(KN_LOG_WARN, "scrape %s: %s", t->url, err.message);
	} else {
		kn_log(KN_LOG_DEBUG, "scrape %s: %s", t->url,
		       error ? error : "unexpected status");
	}
	source_back(t->m);
}

static void local_work(void *arg)
{
	struct local_job *j = arg;
	struct kn_node_options opt = {.root = "/"};
	struct kn_error err;
	struct kn_buf out;
	unsigned n;
	int rc;

	kn_buf_init(&out, KN_PROM_MAX_BYTES);
	rc = kn_node_collect(&opt, &out, &err);
	if (rc == 0 && j->nvml) {
		n = kn_nvml_count(j->nvml);
		rc = kn_nvml_poll_xids(j->nvml, j->last_xid, &err);
		for (unsigned i = 0; rc == 0 && i < n; i++)
			rc = kn_nvml_sample(j->nvml, i, &j->gpus[i], &err);
		if (rc == 0)
			rc = kn_gpu_write(j->gpus, j->last_xid, n, j->hostname,
					  &out, &err);
	}
	if (rc == 0)
		rc = kn_expo_parse(out.data ? out.data : "", out.len,
				   &j->samples, &j->n, &err);
	if (rc < 0)
		kn_strlcpy(j->error, err.message, sizeof(j->error));
	kn_buf_release(&out);
}

static void local_done(void *arg, bool ran)
{
	struct local_job *j = arg;
	struct monitor *m = j->m;

	if (m->s->closing)
		return;
	m->local_up = ran && !j->error[0];
	if (j->error[0])
		kn_log(KN_LOG_WARN, "reading this node's metrics: %s", j->error);
	source_back(m);
}

static void round_start(void *arg)
{
	struct monitor *m = arg;
	int64_t timeout = m->s->cfg.scrape_interval_ms < FETCH_TIMEOUT_MAX_MS
				  ? m->s->cfg.scrape_interval_ms
				  : FETCH_TIMEOUT_MAX_MS;

	kn_timer_arm(m->timer, m->s->cfg.scrape_interval_ms);
	if (m->outstanding > 0)
		return; /* the last round is still out */
	m->round_at = kn_now_ms();
	/* Counted first, so a source that fails at once cannot finish the
	 * round before the others have started. */
	m->outstanding = 1 + (int)m->n_targets + (m->local ? 1 : 0);
	for (size_t i = 0; i < m->n_targets; i++) {
		struct target *t = &m->targets[i];
		if (kn_http_fetch(m->s->loop, "GET", t->url, NULL, NULL, timeout,
				  target_done, t) < 0)
			target_done(0, NULL, 0, "bad URL", t);
	}
	if (m->local) {
		m->local_job.error[0] = '\0';
		kn_workers_submit(m->s->workers, local_work, local_done,
				  &m->local_job);
	}
	source_back(m);
}

/* The part after http:// or https://, or NULL for another URL. */
static const char *after_scheme(const char *url)
{
	if (!strncmp(url, "http://", 7))
		return url + 7;
	if (!strncmp(url, "https://", 8))
		return url + 8;
	return NULL;
}

/* "http://host:port/path" -> "host:port" */
static void url_instance(const char *url, char *out, size_t len)
{
	const char *p = after_scheme(url);
	size_t n = strcspn(p, "/?#");

	snprintf(out, len, "%.*s", (int)n, p);
}

static int add_targets(struct monitor *m, const char *list,
		       struct kn_error *err)
{
	char *copy = kn_xstrdup(list), *rest = copy, *u;
	int rc = 0;

	while ((u = strsep(&rest, ",")) != NULL) {
		struct target *t;
		if (!*u)
			continue;
		if (!after_scheme(u) || !*after_scheme(u)) {
			rc = kn_errorf(err, KN_EINVAL, "scrape",
				       "--scrape: \"%s\" is not an http:// or "
				       "https:// URL", u);
			break;
		}
		if (m->n_targets == MAX_TARGETS) {
			rc = kn_errorf(err, KN_EINVAL, "scrape",
				       "--scrape: at most %d exporters",
				       MAX_TARGETS);
			break;
		}
		t = &m->targets[m->n_targets++];
		t->m = m;
		t->url = kn_xstrdup(u);
		url_instance(u, t->instance, sizeof(t->instance));
	}
	free(copy);
	return rc;
}

int monitor_start(struct server *s, struct monitor **out,
		  struct kn_error *err)
{
	const char *path = s->cfg.alert_rules;
	struct monitor *m;
	int rc;

	*out = NULL;
	if (!*path)
		return 0; /* --alert-rules "": alerts are off */
	if (s->cfg.alert_webhook && strncmp(s->cfg.alert_webhook, "http://", 7))
		return kn_errorf(err, KN_EINVAL, "alert-webhook",
				 "--alert-webhook must be an http:// URL; got "
				 "\"%s\"", s->cfg.alert_webhook);
	m = kn_xcalloc(1, sizeof(*m));
	m->s = s;
	rc = kn_alert_rules_load(path, &m->rules, err);
	if (rc == 0 && s->cfg.scrape_urls)
		rc = add_targets(m, s->cfg.scrape_urls, err);
	if (rc < 0) {
		monitor_free(m);
		return rc;
	}
	/* A series is current for two missed scrapes, then it is gone. */
	m->history = kn_alert_history_new(HISTORY_RETENTION_MS,
					  2 * s->cfg.scrape_interval_ms + 1000);
	m->eval = kn_alert_eval_new(m->rules);
	m->local = s->cfg.scrape_local;
	m->local_job.m = m;
	/* This machine's metrics, under the first node's name (the only one
	   without --sim-node). */
	kn_strlcpy(m->local_job.hostname, s->nodes[0].name,
		   sizeof(m->local_job.hostname));
	/* Real GPUs only: simulated ones have no metrics to read. */
	if (m->local && !s->cfg.gpus && !s->cfg.n_sim_nodes &&
	    kn_nvml_open(&m->local_job.nvml, err) == 0) {
		unsigned n = kn_nvml_count(m->local_job.nvml);
		m->local_job.last_xid = kn_xcalloc(n ? n : 1, sizeof(unsigned));
		m->local_job.gpus = kn_xcalloc(n ? n : 1,
					       sizeof(*m->local_job.gpus));
	}
	m->webhook = s->cfg.alert_webhook ? kn_xstrdup(s->cfg.alert_webhook)
					  : NULL;
	m->timer = kn_timer_new(s->loop, round_start, m);
	m->hook_timer = kn_timer_new(s->loop, hook_next, m);
	/* Alerts left firing by the last run: this run has no state for
	 * them; those still true fire again after their for:. */
	if (kn_store_alert_resolve_all(s->store, kn_now_ms(), err) < 0) {
		monitor_free(m);
		return -EIO;
	}
	kn_timer_arm(m->timer, 0);
	kn_log(KN_LOG_INFO, "alerts: %zu rule%s from %s; scraping %s%zu "
	       "exporter%s every %lldms", m->rules->n,
	       m->rules->n == 1 ? "" : "s", path,
	       m->local ? "this node and " : "", m->n_targets,
	       m->n_targets == 1 ? "" : "s",
	       (long long)s->cfg.scrape_interval_ms);
	*out = m;
	return 0;
}

void monitor_free(struct monitor *m)
{
	if (!m)
		return;
	kn_timer_free(m->timer);
	kn_timer_free(m->hook_timer);
	for (size_t i = 0; i < m->n_targets; i++) {
		free(m->targets[i].url);
		kn_expo_free(m->targets[i].samples, m->targets[i].n);
	}
	kn_expo_free(m->local_job.samples, m->local_job.n);
	kn_nvml_close(m->local_job.nvml);
	KN_FREE_ALL(m->local_job.last_xid, m->local_job.gpus);
	KN_LIST_FREE(m->hooks, hook_free);
	free(m->webhook);
	kn_alert_eval_free(m->eval);
	kn_alert_history_free(m->history);
	kn_alert_rules_free(m->rules);
	free(m);
}
