/*
 * The gateway's Prometheus metrics, per deployment: requests by status,
 * a latency histogram, tokens, 429s, fallbacks, upstream errors.
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
/* Deployments tracked; a bound on memory whatever the tables hold. */
#define DEPLOYMENTS_MAX 4096

struct dep_metrics {
	char name[KN_GW_NAME_MAX];
	int codes[STATUS_SLOTS];
	uint64_t by_code[STATUS_SLOTS];
	size_t n_codes;
	uint64_t other_codes;
	uint64_t buckets[N_BOUNDS + 1];
	double latency_sum_s;
	uint64_t count;
	uint64_t tokens, rate_limited, fallbacks, upstream_errors;
};

struct gw_metrics {
	pthread_mutex_t lock;
	struct dep_metrics *deps;
	size_t n, alloc;
	uint64_t dropped; /* observations past DEPLOYMENTS_MAX */
};

struct gw_metrics *gw_metrics_new(void)
{
	struct gw_metrics *m = kn_xcalloc(1, sizeof(*m));

	pthread_mutex_init(&m->lock, NULL);
	return m;
}

void gw_metrics_free(struct gw_metrics *m)
{
	if (!m)
		return;
	pthread_mutex_destroy(&m->lock);
	free(m->deps);
	free(m);
}

static struct dep_metrics *dep_for(struct gw_metrics *m, const char *name)
{
	for (size_t i = 0; i < m->n; i++)
		if (!strcmp(m->deps[i].name, name))
			return &m->deps[i];
	if (m->n == DEPLOYMENTS_MAX)
		return NULL;
	if (m->n == m->alloc) {
		m->alloc = m->alloc ? m->alloc * 2 : 8;
		m->deps = kn_xrealloc(m->deps, m->alloc * sizeof(*m->deps));
	}
	memset(&m->deps[m->n], 0, sizeof(m->deps[m->n]));
	kn_strlcpy(m->deps[m->n].name, name, sizeof(m->deps[m->n].name));
	return &m->deps[m->n++];
}

void gw_metrics_observe(struct gw_metrics *m, const struct gw_observation *o)
{
	struct dep_metrics *d;
	double secs = o->latency_ms / 1000.0;
	size_t i;

	pthread_mutex_lock(&m->lock);
	d = dep_for(m, o->deployment);
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
	for (i = 0; i < N_BOUNDS && secs > LATENCY_BOUNDS[i]; i++)
		;
	d->buckets[i]++;
	d->latency_sum_s += secs;
	d->count++;
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

void gw_metrics_write(struct gw_metrics *m, struct kn_buf *out)
{
	size_t i, j;

	pthread_mutex_lock(&m->lock);
	counter(out, "kiln_gateway_requests_total",
		"Requests answered, by deployment and HTTP status.");
	for (i = 0; i < m->n; i++) {
		const struct dep_metrics *d = &m->deps[i];
		for (j = 0; j < d->n_codes; j++)
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
	kn_buf_printf(out, "# HELP kiln_gateway_request_duration_seconds "
			   "Time from request to the end of the answer.\n"
			   "# TYPE kiln_gateway_request_duration_seconds "
			   "histogram\n");
	for (i = 0; i < m->n; i++) {
		const struct dep_metrics *d = &m->deps[i];
		uint64_t cum = 0;
		for (j = 0; j < N_BOUNDS; j++) {
			cum += d->buckets[j];
			kn_buf_printf(out,
				      "kiln_gateway_request_duration_seconds_"
				      "bucket{deployment=\"%s\",le=\"%g\"} "
				      "%llu\n",
				      d->name, LATENCY_BOUNDS[j],
				      (unsigned long long)cum);
		}
		kn_buf_printf(out,
			      "kiln_gateway_request_duration_seconds_bucket{"
			      "deployment=\"%s\",le=\"+Inf\"} %llu\n"
			      "kiln_gateway_request_duration_seconds_sum{"
			      "deployment=\"%s\"} %.6f\n"
			      "kiln_gateway_request_duration_seconds_count{"
			      "deployment=\"%s\"} %llu\n",
			      d->name, (unsigned long long)d->count, d->name,
			      d->latency_sum_s, d->name,
			      (unsigned long long)d->count);
	}
	{
		static const struct {
			const char *name, *help;
			size_t offset;
		} totals[] = {
			{"kiln_gateway_tokens_total",
			 "Tokens reported in answers' usage.",
			 offsetof(struct dep_metrics, tokens)},
			{"kiln_gateway_rate_limited_total",
			 "Requests refused with 429.",
			 offsetof(struct dep_metrics, rate_limited)},
			{"kiln_gateway_fallbacks_total",
			 "Requests served by the fallback deployment.",
			 offsetof(struct dep_metrics, fallbacks)},
			{"kiln_gateway_upstream_errors_total",
			 "Upstream connections or answers that failed.",
			 offsetof(struct dep_metrics, upstream_errors)},
		};
		for (j = 0; j < sizeof(totals) / sizeof(totals[0]); j++) {
			counter(out, totals[j].name, totals[j].help);
			for (i = 0; i < m->n; i++)
				kn_buf_printf(
					out, "%s{deployment=\"%s\"} %llu\n",
					totals[j].name, m->deps[i].name,
					*(const unsigned long long
						  *)((const char *)&m->deps[i] +
						     totals[j].offset));
		}
	}
	pthread_mutex_unlock(&m->lock);
}
