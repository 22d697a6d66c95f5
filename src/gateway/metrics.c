/*
 * The gateway's Prometheus metrics, per deployment: requests by status,
 * a latency histogram, tokens, 429s, fallbacks, upstream errors and
 * breaker openings; per key: requests, a latency histogram, tokens, 429s
 * and fallbacks.
 *
 * One mutex around plain counters: an uncontended lock costs less than
 * the per-worker copies and merging it would replace, and a scrape sees
 * one consistent snapshot.
 */
#include <stdlib.h>
#include <string.h>

#include "gateway/internal.h"

/* Upper bounds of the latency buckets, seconds (+Inf implied). */
static const double LATENCY_BOUNDS[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
					0.5,   1,    2.5,   5,    10,  30,
					60};
#define N_BOUNDS (sizeof(LATENCY_BOUNDS) / sizeof(LATENCY_BOUNDS[0]))
/* Distinct status codes kept per deployment; the rest count as "other". */
#define STATUS_SLOTS 24
/* Deployments and keys tracked; a bound on memory whatever the tables
   hold. */
#define DEPLOYMENTS_MAX 4096
#define KEYS_MAX 4096

/* A latency histogram: counts per bucket (not cumulative), sum, count. */
struct latency {
	uint64_t buckets[N_BOUNDS + 1];
	double sum_s;
	uint64_t count;
};

/* A deployment's or a key's row starts with its name (struct rows). */
struct dep_metrics {
	char name[KN_GW_NAME_MAX];
	int codes[STATUS_SLOTS];
	uint64_t by_code[STATUS_SLOTS];
	size_t n_codes;
	uint64_t other_codes;
	struct latency latency;
	uint64_t tokens, rate_limited, fallbacks, upstream_errors;
	uint64_t breaker_opens;
};

struct key_metrics {
	char name[KN_GW_NAME_MAX];
	struct latency latency;
	uint64_t requests, tokens, rate_limited, fallbacks;
};

static void latency_observe(struct latency *l, double secs)
{
	size_t i = 0;

	while (i < N_BOUNDS && secs > LATENCY_BOUNDS[i])
		i++;
	l->buckets[i]++;
	l->sum_s += secs;
	l->count++;
}

/* name's _bucket, _sum and _count samples of l, labelled label="value". */
static void latency_write(struct kn_buf *out, const char *name,
			  const char *label, const char *value,
			  const struct latency *l)
{
	uint64_t cum = 0;

	for (size_t j = 0; j < N_BOUNDS; j++) {
		cum += l->buckets[j];
		kn_buf_printf(out, "%s_bucket{%s=\"%s\",le=\"%g\"} %llu\n",
			      name, label, value, LATENCY_BOUNDS[j],
			      (unsigned long long)cum);
	}
	kn_buf_printf(out,
		      "%s_bucket{%s=\"%s\",le=\"+Inf\"} %llu\n"
		      "%s_sum{%s=\"%s\"} %.6f\n%s_count{%s=\"%s\"} %llu\n",
		      name, label, value, (unsigned long long)l->count, name,
		      label, value, l->sum_s, name, label, value,
		      (unsigned long long)l->count);
}

_Static_assert(offsetof(struct dep_metrics, name) == 0 &&
		       offsetof(struct key_metrics, name) == 0,
	       "a row starts with its name");

/*
 * The rows of one kind, deployments or keys: up to max of size bytes
 * each, in the order first seen. Samples name a row by label="name".
 */
struct rows {
	char *at;
	size_t n, alloc;
	size_t size, max;
	const char *label;
	size_t latency; /* where a row's struct latency is */
};

struct gw_metrics {
	pthread_mutex_t lock;
	struct rows deps, keys;
	uint64_t dropped; /* observations past DEPLOYMENTS_MAX or KEYS_MAX */
};

struct gw_metrics *gw_metrics_new(void)
{
	struct gw_metrics *m = kn_xcalloc(1, sizeof(*m));

	pthread_mutex_init(&m->lock, NULL);
	m->deps = (struct rows){
		.size = sizeof(struct dep_metrics),
		.max = DEPLOYMENTS_MAX,
		.label = "deployment",
		.latency = offsetof(struct dep_metrics, latency),
	};
	m->keys = (struct rows){
		.size = sizeof(struct key_metrics),
		.max = KEYS_MAX,
		.label = "key",
		.latency = offsetof(struct key_metrics, latency),
	};
	return m;
}

void gw_metrics_free(struct gw_metrics *m)
{
	if (!m)
		return;
	pthread_mutex_destroy(&m->lock);
	KN_FREE_ALL(m->deps.at, m->keys.at, m);
}

static void *row_at(const struct rows *r, size_t i)
{
	return r->at + i * r->size;
}

/* The row called name, a new zeroed one if none is; NULL when r holds
   its max already. */
static void *row_for(struct rows *r, const char *name)
{
	char *row;

	for (size_t i = 0; i < r->n; i++)
		if (!strcmp(row_at(r, i), name))
			return row_at(r, i);
	if (r->n == r->max)
		return NULL;
	if (r->n == r->alloc) {
		r->alloc = r->alloc ? r->alloc * 2 : 8;
		r->at = kn_xrealloc(r->at, r->alloc * r->size);
	}
	row = row_at(r, r->n++);
	memset(row, 0, r->size);
	kn_strlcpy(row, name, KN_GW_NAME_MAX);
	return row;
}

/* The key's share of o; the lock is held. A request without a key is
   no key's traffic. */
static void observe_key(struct gw_metrics *m, const struct gw_observation *o)
{
	struct key_metrics *k;

	if (!o->key || !o->key[0])
		return;
	if (!(k = row_for(&m->keys, o->key))) {
		m->dropped++;
		return;
	}
	k->requests++;
	latency_observe(&k->latency, o->latency_ms / 1000.0);
	if (o->tokens > 0)
		k->tokens += (uint64_t)o->tokens;
	if (o->status == 429)
		k->rate_limited++;
	if (o->fallback)
		k->fallbacks++;
}

void gw_metrics_breaker_opened(struct gw_metrics *m, const char *deployment)
{
	struct dep_metrics *d;

	pthread_mutex_lock(&m->lock);
	if ((d = row_for(&m->deps, deployment)))
		d->breaker_opens++;
	else
		m->dropped++;
	pthread_mutex_unlock(&m->lock);
}

void gw_metrics_observe(struct gw_metrics *m, const struct gw_observation *o)
{
	struct dep_metrics *d;
	size_t i;

	pthread_mutex_lock(&m->lock);
	observe_key(m, o);
	d = row_for(&m->deps, o->deployment);
	if (!d) {
		m->dropped++;
		goto out;
	}
	for (i = 0; i < d->n_codes && d->codes[i] != o->status; i++)
		;
	if (i == d->n_codes && d->n_codes < STATUS_SLOTS)
		d->codes[d->n_codes++] = o->status;
	if (i < d->n_codes)
		d->by_code[i]++;
	else
		d->other_codes++;
	latency_observe(&d->latency, o->latency_ms / 1000.0);
	if (o->tokens > 0)
		d->tokens += (uint64_t)o->tokens;
	if (o->status == 429)
		d->rate_limited++;
	if (o->fallback)
		d->fallbacks++;
	if (o->upstream_error)
		d->upstream_errors++;
out:
	pthread_mutex_unlock(&m->lock);
}

static void counter(struct kn_buf *out, const char *name, const char *help)
{
	kn_buf_printf(out, "# HELP %s %s\n# TYPE %s counter\n", name, help,
		      name);
}

/* A counter family of a kind of row: its name, its help, and where a
   row's count is. */
struct counter_family {
	const char *name, *help;
	size_t offset;
};

static const struct counter_family DEPLOYMENT_COUNTERS[] = {
	{"kiln_gateway_tokens_total", "Tokens reported in answers' usage.",
	 offsetof(struct dep_metrics, tokens)},
	{"kiln_gateway_rate_limited_total", "Requests refused with 429.",
	 offsetof(struct dep_metrics, rate_limited)},
	{"kiln_gateway_fallbacks_total",
	 "Requests served by the fallback deployment.",
	 offsetof(struct dep_metrics, fallbacks)},
	{"kiln_gateway_upstream_errors_total",
	 "Upstream connections or answers that failed.",
	 offsetof(struct dep_metrics, upstream_errors)},
	{"kiln_gateway_breaker_opens_total",
	 "Times a replica's circuit breaker opened (or opened again after a "
	 "failed trial) on a call for the deployment.",
	 offsetof(struct dep_metrics, breaker_opens)},
	{NULL, NULL, 0},
};

static const struct counter_family KEY_COUNTERS[] = {
	{"kiln_gateway_key_requests_total", "Requests made with the key.",
	 offsetof(struct key_metrics, requests)},
	{"kiln_gateway_key_tokens_total",
	 "Tokens reported in the answers to the key's requests.",
	 offsetof(struct key_metrics, tokens)},
	{"kiln_gateway_key_rate_limited_total",
	 "The key's requests refused with 429.",
	 offsetof(struct key_metrics, rate_limited)},
	{"kiln_gateway_key_fallbacks_total",
	 "The key's requests served by a fallback deployment.",
	 offsetof(struct key_metrics, fallbacks)},
	{NULL, NULL, 0},
};

/* The histogram family name of r's rows; the lock is held. */
static void histogram_write(struct kn_buf *out, const struct rows *r,
			    const char *name, const char *help)
{
	kn_buf_printf(out, "# HELP %s %s\n# TYPE %s histogram\n", name, help,
		      name);
	for (size_t i = 0; i < r->n; i++) {
		const char *row = row_at(r, i);

		latency_write(out, name, r->label, row,
			      (const struct latency *)(row + r->latency));
	}
}

/* Each counter family of r's rows (families ends with a NULL name); the
   lock is held. */
static void counters_write(struct kn_buf *out, const struct rows *r,
			   const struct counter_family *families)
{
	for (const struct counter_family *f = families; f->name; f++) {
		counter(out, f->name, f->help);
		for (size_t i = 0; i < r->n; i++) {
			const char *row = row_at(r, i);
			uint64_t count;

			memcpy(&count, row + f->offset, sizeof(count));
			kn_buf_printf(out, "%s{%s=\"%s\"} %llu\n", f->name,
				      r->label, row, (unsigned long long)count);
		}
	}
}

void gw_metrics_write(struct gw_metrics *m, struct kn_buf *out)
{
	pthread_mutex_lock(&m->lock);
	counter(out, "kiln_gateway_requests_total",
		"Requests answered, by deployment and HTTP status.");
	for (size_t i = 0; i < m->deps.n; i++) {
		const struct dep_metrics *d = row_at(&m->deps, i);

		for (size_t j = 0; j < d->n_codes; j++)
			kn_buf_printf(out,
				      "kiln_gateway_requests_total{deployment="
				      "\"%s\",code=\"%d\"} %llu\n",
				      d->name, d->codes[j],
				      (unsigned long long)d->by_code[j]);
		if (d->other_codes)
			kn_buf_printf(out,
				      "kiln_gateway_requests_total{deployment="
				      "\"%s\",code=\"other\"} %llu\n",
				      d->name,
				      (unsigned long long)d->other_codes);
	}
	histogram_write(out, &m->deps, "kiln_gateway_request_duration_seconds",
			"Time from request to the end of the answer.");
	counters_write(out, &m->deps, DEPLOYMENT_COUNTERS);
	histogram_write(out, &m->keys,
			"kiln_gateway_key_request_duration_seconds",
			"Time from a key's request to the end of the answer.");
	counters_write(out, &m->keys, KEY_COUNTERS);
	pthread_mutex_unlock(&m->lock);
}

/* d's entry of gw_metrics_report; the lock is held. */
static json_t *dep_report(const struct dep_metrics *d)
{
	json_t *bounds = json_array(), *counts = json_array();
	uint64_t requests = d->other_codes, errors = 0;

	for (size_t j = 0; j < d->n_codes; j++) {
		requests += d->by_code[j];
		if (d->codes[j] >= 500)
			errors += d->by_code[j];
	}
	for (size_t j = 0; j < N_BOUNDS; j++)
		json_array_append_new(bounds, json_real(LATENCY_BOUNDS[j]));
	for (size_t j = 0; j <= N_BOUNDS; j++)
		json_array_append_new(
			counts, json_integer((json_int_t)d->latency.buckets[j]));
	return json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:o}",
			 "name", d->name, "requests", (json_int_t)requests,
			 "errors", (json_int_t)errors, "rate_limited",
			 (json_int_t)d->rate_limited, "fallbacks",
			 (json_int_t)d->fallbacks, "upstream_errors",
			 (json_int_t)d->upstream_errors, "tokens",
			 (json_int_t)d->tokens, "latency_bounds_s", bounds,
			 "latency_counts", counts);
}

json_t *gw_metrics_report(struct gw_metrics *m)
{
	json_t *deps = json_array();

	pthread_mutex_lock(&m->lock);
	/* Requests that named no deployment we know are no deployment's. */
	for (size_t i = 0; i < m->deps.n; i++) {
		const struct dep_metrics *d = row_at(&m->deps, i);

		if (d->name[0])
			json_array_append_new(deps, dep_report(d));
	}
	pthread_mutex_unlock(&m->lock);
	return json_pack("{s:o}", "deployments", deps);
}
