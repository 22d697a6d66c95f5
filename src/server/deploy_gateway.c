/*
 * The deployments' gateway side: the keys callers of `kiln gateway` hold
 * (stored as hashes, shown once) and the configuration and alerts the
 * gateway exchanges with the server.
 */
#include "deploysvc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* Gateway key caps: a minute's requests or tokens, a quota's tokens. */
#define KEY_LIMIT_MAX 1000000000000LL
#define KEY_MAX_DEPLOYMENTS 64
#define KEY_PREFIX "kgw_"

/* ---- gateway keys ---- */

static json_t *key_json(const struct kn_gateway_key_row *k, bool with_hash)
{
	json_t *deps = json_loads(k->deployments_json, 0, NULL);
	json_t *o = json_pack("{s:s, s:o, s:I, s:I, s:I, s:I}", "name",
			      k->name, "deployments",
			      deps ? deps : json_array(), "rpm",
			      (json_int_t)k->rpm, "tpm", (json_int_t)k->tpm,
			      "quota_day", (json_int_t)k->quota_day,
			      "quota_month", (json_int_t)k->quota_month);

	if (with_hash) {
		json_object_set_new(o, "hash", json_string(k->hash));
		return o;
	}
	json_object_set_new(o, "created_by", json_string(k->created_by));
	json_object_set_new(o, "created_at_ms", json_integer(k->created_at));
	return o;
}

/* A key as its list shows it: who made it, not its hash. */
static json_t *key_listed_json(const void *row)
{
	return key_json(row, false);
}

/* body[field]: absent = 0, else an integer 0..KEY_LIMIT_MAX. */
static int limit_field(json_t *body, const char *field, int64_t *out,
		       struct kn_error *err)
{
	json_t *v = json_object_get(body, field);

	*out = 0;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    json_integer_value(v) > KEY_LIMIT_MAX)
		return kn_errorf(err, KN_EINVAL, field,
				 "%s must be an integer 0..%lld (0 = no limit)",
				 field, KEY_LIMIT_MAX);
	*out = json_integer_value(v);
	return 0;
}

void deploy_h_key_create(struct server *s, struct kn_http_req *req,
			 const struct caller *c, const char *param)
{
	struct kn_gateway_key_row k;
	struct kn_error err;
	struct kn_audit a;
	json_error_t jerr;
	size_t len, i;
	const char *text = kn_http_body(req, &len);
	json_t *body = json_loadb(text, len, 0, &jerr), *deps, *item;
	char secret[64], hash[65], object[96];
	const char *name;
	int rc = 0;

	(void)param;
	memset(&k, 0, sizeof(k));
	name = json_string_value(json_object_get(body, "name"));
	deps = json_object_get(body, "deployments");
	if (!json_is_object(body))
		rc = kn_errorf(&err, KN_EINVAL, NULL,
			       "body must be a JSON object {\"name\": ..., "
			       "\"deployments\": [...], \"rpm\": ..., ...}");
	else if (!credential_name_ok(name))
		rc = kn_errorf(&err, KN_EINVAL, "name",
			       "name must be 1-64 characters of letters, "
			       "digits, '-', '_', '.' or '@'");
	else if (!json_is_array(deps) || json_array_size(deps) == 0 ||
		 json_array_size(deps) > KEY_MAX_DEPLOYMENTS)
		rc = kn_errorf(&err, KN_EINVAL, "deployments",
			       "deployments must be a list of 1..%d "
			       "deployment names",
			       KEY_MAX_DEPLOYMENTS);
	json_array_foreach(rc == 0 ? deps : NULL, i, item) {
		/* A key may name a deployment before it exists. */
		if (!kn_spec_name_valid(json_string_value(item))) {
			rc = kn_errorf(&err, KN_EINVAL, "deployments",
				       "deployments[%zu] must be a deployment "
				       "name (lowercase letters, digits, '.', "
				       "'_' and '-')",
				       i);
			break;
		}
	}
	if (rc == 0)
		rc = limit_field(body, "rpm", &k.rpm, &err);
	if (rc == 0)
		rc = limit_field(body, "tpm", &k.tpm, &err);
	if (rc == 0)
		rc = limit_field(body, "quota_day", &k.quota_day, &err);
	if (rc == 0)
		rc = limit_field(body, "quota_month", &k.quota_month, &err);
	if (rc == 0)
		rc = caps_check(s, c, CAP_GATEWAY_KEY, 0, &err);
	if (rc < 0) {
		kn_http_reply_error(req, &err);
		goto out;
	}
	key_generate(secret, hash);
	k.name = (char *)name;
	k.hash = hash;
	k.deployments_json = json_dumps(deps, JSON_COMPACT);
	k.created_by = (char *)c->name;
	k.created_at = kn_now_ms();
	snprintf(object, sizeof(object), "key/%s", name);
	caller_audit(&a, c, "key.create", object, "ok",
		     k.deployments_json);
	if (kn_store_gateway_key_insert(core_store(s), &k, &a, &k.id, &err) < 0) {
		kn_http_reply_error(req, &err);
		free(k.deployments_json);
		goto out;
	}
	kn_http_reply_json(req, 201,
			   json_pack("{s:o, s:s}", "key", key_json(&k, false),
				     "secret", secret));
	free(k.deployments_json);
out:
	json_decref(body);
}

void deploy_h_key_list(struct server *s, struct kn_http_req *req,
		       const struct caller *c, const char *param)
{
	struct kn_gateway_key_row *rows = NULL;
	struct kn_error err;
	size_t n = 0;
	json_t *list;

	(void)c;
	(void)param;
	if (kn_store_gateway_key_list(core_store(s), true, &rows, &n, &err) < 0) {
		kn_http_reply_error(req, &err);
		return;
	}
	list = rows_json(rows, n, sizeof(*rows), key_listed_json);
	kn_gateway_key_list_free(rows, n);
	kn_http_reply_json(req, 200, json_pack("{s:o}", "keys", list));
}

void deploy_h_key_revoke(struct server *s, struct kn_http_req *req,
			 const struct caller *c, const char *param)
{
	credential_revoke_reply(s, req, c, "key", param,
				kn_store_gateway_key_revoke);
}

/* ---- what the gateway reads ---- */

static int name_cmp(const void *a, const void *b)
{
	const struct deployment *const *x = a, *const *y = b;

	return strcmp((*x)->row.name, (*y)->row.name);
}

/* The deployments ordered by name (an array the caller frees). */
static struct deployment **by_name(struct deploy_state *d, size_t *n)
{
	struct deployment **v;
	size_t count = 0;

	for (struct deployment *p = d->list; p; p = p->next)
		count++;
	v = kn_xcalloc(count ? count : 1, sizeof(*v));
	count = 0;
	for (struct deployment *p = d->list; p; p = p->next)
		v[count++] = p;
	qsort(v, count, sizeof(*v), name_cmp);
	*n = count;
	return v;
}

/*
 * Under an executor that runs deployments itself (Kubernetes) every
 * ready pod is a replica at the Service's cluster DNS name: kube-proxy
 * spreads connections over the ready pods, and pod
 * addresses are only routable inside the cluster anyway. A gateway must
 * therefore run in the cluster (or reach it through an ingress that
 * resolves that name); nothing here pretends to reach the pods.
 */
static void engine_gateway_replicas(struct server *s,
				    const struct deployment *p, json_t *reps)
{
	json_t *st = deploy_engine(s)->status(core_executor(s), p->row.name), *pod;
	const char *svc = json_string_value(json_object_get(st, "service"));
	size_t i;

	json_array_foreach(json_object_get(st, "pods"), i, pod) {
		if (!svc || !json_is_true(json_object_get(pod, "ready")))
			continue;
		json_array_append_new(reps,
				      json_pack("{s:i, s:s, s:s, s:b}",
						"replica", (int)i, "address",
						svc, "zone", "", "ready", 1));
	}
	json_decref(st);
}

void deploy_h_gateway_config(struct server *s, struct kn_http_req *req,
			     const struct caller *c, const char *param)
{
	struct deploy_state *d = deploy_state_of(s);
	struct kn_gateway_key_row *rows = NULL;
	struct kn_error err;
	json_t *deps = json_array(), *keys = json_array(), *doc;
	struct deployment **sorted;
	char *text, hash[65];
	size_t n = 0, n_sorted;

	(void)c;
	(void)param;
	if (kn_store_gateway_key_list(core_store(s), true, &rows, &n, &err) < 0) {
		json_decref(deps);
		json_decref(keys);
		kn_http_reply_error(req, &err);
		return;
	}
	/* By name, so the document is the same whenever nothing changed. */
	sorted = by_name(d, &n_sorted);
	/* The document names only deployments it lists (the gateway refuses
	 * one that does not): a key's deployments or a fallback not deployed
	 * (yet, or any more) are left out until they are. */
	for (size_t i = 0; i < n; i++) {
		json_t *key = key_json(&rows[i], true), *all, *v, *listed;
		size_t j;

		all = json_object_get(key, "deployments");
		listed = json_array();
		json_array_foreach(all, j, v)
			if (json_string_value(v) &&
			    deploy_find(d, json_string_value(v)))
				json_array_append(listed, v);
		json_object_set_new(key, "deployments", listed);
		json_array_append_new(keys, key);
	}
	kn_gateway_key_list_free(rows, n);
	for (size_t k = 0; k < n_sorted; k++) {
		const struct deployment *p = sorted[k];
		json_t *reps = json_array();

		if (deploy_engine(s))
			engine_gateway_replicas(s, p, reps);
		/* Surge slots too: a replica being replaced keeps serving
		 * beside its replacement until the gateway knows both. */
		for (int i = 0; !deploy_engine(s) && i < p->n_reps; i++) {
			struct job_view v;
			char addr[32];

			core_job_view(s, p->reps[i].job_id, &v);
			if ((i >= p->row.replicas && !p->reps[i].surge) ||
			    !v.serving)
				continue;
			snprintf(addr, sizeof(addr), "127.0.0.1:%d",
				 v.master_port);
			json_array_append_new(
				reps, json_pack("{s:i, s:s, s:s, s:b}",
						"replica", i, "address", addr,
						"zone", deploy_node_zone(s, &v), "ready",
						deploy_replica_ready(&p->reps[i], &v) &&
							!deploy_retiring(p, i)));
		}
		json_array_append_new(
			deps,
			json_pack("{s:s, s:s, s:o, s:{s:i, s:i}, s:o}", "name",
				  p->row.name, "model", p->spec->model, "fallback",
				  p->spec->fallback &&
						  deploy_find(d, p->spec->fallback)
					  ? json_string(p->spec->fallback)
					  : json_null(),
				  "limits", "rpm", p->spec->limit_rpm, "tpm",
				  p->spec->limit_tpm, "replicas", reps));
	}
	free(sorted);
	doc = json_pack("{s:o, s:o}", "deployments", deps, "keys", keys);
	text = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS);
	token_hash(text, hash);
	free(text);
	/* The generation moves whenever the document does; a clock reading
	 * keeps it increasing across server restarts too. */
	if (strcmp(hash, d->config_hash) != 0) {
		int64_t now = kn_now_ms();
		d->config_generation = now > d->config_generation
					       ? now
					       : d->config_generation + 1;
		memcpy(d->config_hash, hash, sizeof(hash));
	}
	json_object_set_new(doc, "generation",
			    json_integer(d->config_generation));
	d->config_fetched_at = kn_now_ms();
	d->config_fetches++;
	kn_http_reply_json(req, 200, doc);
}

/*
 * The gateway's anomaly report as an alert: rule gateway_anomaly_SIGNAL,
 * one per deployment and signal, with the band and window in its body.
 */
static int gateway_alert(struct server *s, const char *source,
			 const char *deployment, const char *signal,
			 double value, double low, double high, double window_s,
			 int64_t started_at_ms, bool firing,
			 struct kn_error *err)
{
	char *fingerprint = kn_asprintf("gateway:%s:%s", deployment, signal);
	char *rule = kn_asprintf("gateway_anomaly_%s", signal);
	char *summary = kn_asprintf(
		"%s of deployment %s is %g, outside its band %g..%g over %gs",
		signal, deployment, value, low, high, window_s);
	json_t *labels = json_pack("{s:s, s:s, s:s}", "deployment", deployment,
				   "signal", signal, "source", source);
	json_t *extra = json_pack("{s:f, s:f, s:f}", "low", low, "high", high,
				  "window_s", window_s);
	struct server_alert a = server_alert_critical(rule, fingerprint, summary,
						      labels, started_at_ms);
	int rc;

	/* Not a failure: a measure outside its band, and by how much. */
	a.severity = "warning";
	a.value = value;
	a.extra = extra;
	rc = monitor_server_alert(s, &a, firing, err);

	json_decref(extra);
	json_decref(labels);
	KN_FREE_ALL(summary, rule, fingerprint);
	return rc;
}

void deploy_h_gateway_alert(struct server *s, struct kn_http_req *req,
			    const struct caller *c, const char *param)
{
	struct kn_error err;
	json_error_t jerr;
	size_t len;
	const char *text = kn_http_body(req, &len);
	json_t *body = json_loadb(text, len, 0, &jerr);
	const char *dep = json_string_value(json_object_get(body, "deployment"));
	const char *signal = json_string_value(json_object_get(body, "signal"));
	const char *state = json_string_value(json_object_get(body, "state"));
	json_t *value = json_object_get(body, "value");
	json_t *low = json_object_get(body, "low");
	json_t *high = json_object_get(body, "high");
	json_t *window = json_object_get(body, "window_s");
	json_t *started = json_object_get(body, "started_at_ms");

	(void)param;
	if (!dep || !*dep || !signal || !*signal || !json_is_number(value) ||
	    !json_is_number(low) || !json_is_number(high) ||
	    !json_is_number(window) || !json_is_integer(started) ||
	    (state && strcmp(state, "firing") && strcmp(state, "resolved")) ||
	    strlen(dep) > 63 || strlen(signal) > 63) {
		json_decref(body);
		deploy_reply_msg(req, KN_EINVAL, NULL,
			  "body must be {\"deployment\", \"signal\", \"value\", "
			  "\"low\", \"high\", \"window_s\", \"started_at_ms\"} "
			  "with an optional \"state\": \"firing\" | "
			  "\"resolved\"");
		return;
	}
	if (gateway_alert(s, c->name, dep, signal, json_number_value(value),
			  json_number_value(low), json_number_value(high),
			  json_number_value(window),
			  json_integer_value(started),
			  !state || !strcmp(state, "firing"), &err) < 0) {
		json_decref(body);
		kn_http_reply_error(req, &err);
		return;
	}
	{
		char object[160];

		snprintf(object, sizeof(object), "deployment/%s", dep);
		core_audit(s, c, "gateway.alert", object, "ok", signal);
	}
	json_decref(body);
	kn_http_reply_json(req, 202, json_pack("{s:b}", "accepted", 1));
}

/*
 * The gateway's counters and latency histogram per deployment, kept
 * over a window (src/traffic) for the deployments' `traffic`. Not
 * audited: a gateway reports every second or so.
 */
void deploy_h_gateway_metrics(struct server *s, struct kn_http_req *req,
			      const struct caller *c, const char *param)
{
	size_t len;
	const char *text = kn_http_body(req, &len);
	/* Not JSON: NULL, which the table refuses as not an object. */
	json_t *report = json_loadb(text, len, 0, NULL);
	struct kn_error err;
	int rc;

	(void)c;
	(void)param;
	rc = kn_traffic_report(deploy_state_of(s)->traffic, report, kn_now_ms(), &err);
	json_decref(report);
	if (rc < 0)
		kn_http_reply_error(req, &err);
	else
		kn_http_reply_json(req, 202, json_pack("{s:b}", "accepted", 1));
}
