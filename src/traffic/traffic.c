/*
 * The gateways' traffic reports, windowed (traffic.h).
 *
 * Per gateway instance, per deployment: a short list of samples, oldest
 * first. A new sample replaces the newest when that one is younger than
 * the spacing (a sixteenth of the window), so a gateway reporting every
 * second keeps about seventeen; samples older than the window are
 * dropped except the newest of them, which is where the window starts.
 */
#include "traffic/traffic.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define INSTANCE_MAX 64
#define NAME_MAX_LEN 63
#define SAMPLES_MAX 20

enum counter {
	C_REQUESTS,
	C_ERRORS,
	C_RATE_LIMITED,
	C_FALLBACKS,
	C_UPSTREAM_ERRORS,
	C_TOKENS,
	N_COUNTERS
};

static const char *const COUNTER_NAMES[N_COUNTERS] = {
	"requests",  "errors",          "rate_limited",
	"fallbacks", "upstream_errors", "tokens",
};

struct sample {
	int64_t at_ms;
	uint64_t c[N_COUNTERS];
	uint64_t buckets[KN_TRAFFIC_BUCKETS_MAX + 1];
};

struct series {
	char deployment[NAME_MAX_LEN + 1];
	size_t n_bounds;
	double bounds[KN_TRAFFIC_BUCKETS_MAX];
	struct sample samples[SAMPLES_MAX];
	size_t n_samples;
};

struct gateway {
	char instance[INSTANCE_MAX + 1];
	int64_t started_at_ms, last_ms;
	struct series **series; /* by deployment name: found by bisection */
	size_t n_series;
};

struct kn_traffic {
	int64_t window_ms;
	struct gateway gateways[KN_TRAFFIC_GATEWAYS_MAX];
	size_t n_gateways;
	size_t n_series; /* over every gateway */
};

struct kn_traffic *kn_traffic_new(int64_t window_ms)
{
	struct kn_traffic *t;

	if (window_ms <= 0)
		return NULL;
	t = kn_xcalloc(1, sizeof(*t));
	t->window_ms = window_ms;
	return t;
}

static void gateway_clear(struct kn_traffic *t, struct gateway *g)
{
	for (size_t i = 0; i < g->n_series; i++)
		free(g->series[i]);
	t->n_series -= g->n_series;
	free(g->series);
	memset(g, 0, sizeof(*g));
}

void kn_traffic_free(struct kn_traffic *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->n_gateways; i++)
		gateway_clear(t, &t->gateways[i]);
	free(t);
}

/* Drop what has said nothing for a window: whole gateways, then series. */
static void expire(struct kn_traffic *t, int64_t now)
{
	int64_t start = now - t->window_ms;

	for (size_t i = 0; i < t->n_gateways;) {
		struct gateway *g = &t->gateways[i];

		if (g->last_ms < start) {
			gateway_clear(t, g);
			t->gateways[i] = t->gateways[--t->n_gateways];
			memset(&t->gateways[t->n_gateways], 0, sizeof(*g));
			continue;
		}
		for (size_t j = 0; j < g->n_series;) {
			struct series *s = g->series[j];

			if (s->samples[s->n_samples - 1].at_ms < start) {
				free(s);
				memmove(&g->series[j], &g->series[j + 1],
					(--g->n_series - j) * sizeof(*g->series));
				t->n_series--;
				continue;
			}
			j++;
		}
		i++;
	}
}

/* s is 1..max of lowercase letters, digits, the characters of punct,
   and uppercase letters when upper. */
static bool word_ok(const char *s, size_t max, const char *punct, bool upper)
{
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n > max)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!(s[i] >= 'a' && s[i] <= 'z') &&
		    !(upper && s[i] >= 'A' && s[i] <= 'Z') &&
		    !(s[i] >= '0' && s[i] <= '9') && !strchr(punct, s[i]))
			return false;
	return true;
}

static bool instance_ok(const char *s)
{
	return word_ok(s, INSTANCE_MAX, "-_", true);
}

/* A deployment name's shape: lowercase letters, digits, '.', '_', '-'. */
static bool name_ok(const char *s)
{
	return word_ok(s, NAME_MAX_LEN, "._-", false);
}

static bool count_ok(const json_t *v, uint64_t *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return false;
	*out = (uint64_t)json_integer_value(v);
	return true;
}

/* One entry of "deployments" into a sample and its bounds. */
static int parse_entry(const json_t *e, size_t i, struct series *into,
		       struct sample *smp, struct kn_error *err)
{
	const json_t *bounds = json_object_get(e, "latency_bounds_s");
	const json_t *counts = json_object_get(e, "latency_counts");
	const char *name = json_string_value(json_object_get(e, "name"));
	size_t nb, k;

	if (!json_is_object(e) || !name_ok(name))
		return kn_errorf(err, KN_EINVAL, "deployments",
				 "deployments[%zu].name must be a deployment "
				 "name (1-%d of lowercase letters, digits, "
				 "'.', '_', '-')",
				 i, NAME_MAX_LEN);
	kn_strlcpy(into->deployment, name, sizeof(into->deployment));
	for (k = 0; k < N_COUNTERS; k++)
		if (!count_ok(json_object_get(e, COUNTER_NAMES[k]),
			      &smp->c[k]))
			return kn_errorf(err, KN_EINVAL, "deployments",
					 "deployments[%zu].%s must be a "
					 "non-negative integer",
					 i, COUNTER_NAMES[k]);
	nb = json_array_size(bounds);
	if (!json_is_array(bounds) || nb > KN_TRAFFIC_BUCKETS_MAX)
		return kn_errorf(err, KN_EINVAL, "deployments",
				 "deployments[%zu].latency_bounds_s must be a "
				 "list of at most %d numbers",
				 i, KN_TRAFFIC_BUCKETS_MAX);
	for (k = 0; k < nb; k++) {
		const json_t *b = json_array_get(bounds, k);
		double v = json_number_value(b);

		if (!json_is_number(b) || !isfinite(v) || v <= 0 ||
		    (k > 0 && v <= into->bounds[k - 1]))
			return kn_errorf(err, KN_EINVAL, "deployments",
					 "deployments[%zu].latency_bounds_s "
					 "must be ascending positive numbers",
					 i);
		into->bounds[k] = v;
	}
	into->n_bounds = nb;
	if (!json_is_array(counts) || json_array_size(counts) != nb + 1)
		return kn_errorf(err, KN_EINVAL, "deployments",
				 "deployments[%zu].latency_counts must hold "
				 "one count per bound and one past the last",
				 i);
	for (k = 0; k <= nb; k++)
		if (!count_ok(json_array_get(counts, k), &smp->buckets[k]))
			return kn_errorf(err, KN_EINVAL, "deployments",
					 "deployments[%zu].latency_counts[%zu] "
					 "must be a non-negative integer",
					 i, k);
	return 0;
}

static struct gateway *gateway_for(struct kn_traffic *t, const char *instance)
{
	for (size_t i = 0; i < t->n_gateways; i++)
		if (!strcmp(t->gateways[i].instance, instance))
			return &t->gateways[i];
	return NULL;
}

/* Where deployment's series is in g, or would go: its index, *found
   whether it is there. */
static size_t series_index(const struct gateway *g, const char *deployment,
			   bool *found)
{
	size_t lo = 0, hi = g->n_series;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(g->series[mid]->deployment, deployment);

		if (c == 0) {
			*found = true;
			return mid;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = false;
	return lo;
}

static struct series *series_for(const struct gateway *g,
				 const char *deployment)
{
	bool found;
	size_t i = series_index(g, deployment, &found);

	return found ? g->series[i] : NULL;
}

/* Whether s went backwards from last (or changed its buckets): a
   restart under the same instance. */
static bool went_back(const struct series *s, const struct series *in,
		      const struct sample *last, const struct sample *now)
{
	if (s->n_bounds != in->n_bounds ||
	    memcmp(s->bounds, in->bounds, s->n_bounds * sizeof(double)))
		return true;
	for (size_t k = 0; k < N_COUNTERS; k++)
		if (now->c[k] < last->c[k])
			return true;
	for (size_t k = 0; k <= s->n_bounds; k++)
		if (now->buckets[k] < last->buckets[k])
			return true;
	return false;
}

/* Keep smp as s's newest sample (see the top of this file). */
static void add_sample(struct series *s, const struct sample *smp,
		       int64_t window_ms)
{
	int64_t spacing = window_ms / 16, start = smp->at_ms - window_ms;
	size_t drop = 0;

	if (s->n_samples >= 2 &&
	    smp->at_ms - s->samples[s->n_samples - 2].at_ms < spacing)
		s->samples[s->n_samples - 1] = *smp;
	else if (s->n_samples < SAMPLES_MAX)
		s->samples[s->n_samples++] = *smp;
	else {
		memmove(&s->samples[0], &s->samples[1],
			(SAMPLES_MAX - 1) * sizeof(s->samples[0]));
		s->samples[SAMPLES_MAX - 1] = *smp;
	}
	/* Keep one sample at or before the window's start, none older. */
	while (drop + 1 < s->n_samples && s->samples[drop + 1].at_ms <= start)
		drop++;
	if (drop) {
		memmove(&s->samples[0], &s->samples[drop],
			(s->n_samples - drop) * sizeof(s->samples[0]));
		s->n_samples -= drop;
	}
}

/* Check every entry before taking any, so a bad report changes nothing. */
static int check_report(const json_t *doc, struct kn_error *err)
{
	const json_t *deps = json_object_get(doc, "deployments");
	struct series scratch;
	struct sample smp;
	size_t i;

	if (!json_is_object(doc))
		return kn_errorf(err, KN_EINVAL, NULL,
				 "body must be a JSON object {\"instance\", "
				 "\"uptime_ms\", \"deployments\"}");
	if (!instance_ok(json_string_value(json_object_get(doc, "instance"))))
		return kn_errorf(err, KN_EINVAL, "instance",
				 "instance must be 1-%d of letters, digits, "
				 "'-' and '_'",
				 INSTANCE_MAX);
	if (!json_is_integer(json_object_get(doc, "uptime_ms")) ||
	    json_integer_value(json_object_get(doc, "uptime_ms")) < 0)
		return kn_errorf(err, KN_EINVAL, "uptime_ms",
				 "uptime_ms must be a non-negative integer "
				 "(ms since the gateway started)");
	if (!json_is_array(deps) || json_array_size(deps) > KN_TRAFFIC_SERIES_MAX)
		return kn_errorf(err, KN_EINVAL, "deployments",
				 "deployments must be a list of at most %d "
				 "entries",
				 KN_TRAFFIC_SERIES_MAX);
	for (i = 0; i < json_array_size(deps); i++) {
		memset(&smp, 0, sizeof(smp));
		if (parse_entry(json_array_get(deps, i), i, &scratch, &smp,
				err) < 0)
			return -EINVAL;
	}
	return 0;
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* How many series deps adds to g (NULL: a new gateway): its distinct
   names g does not hold yet. */
static size_t new_series(const struct gateway *g, const json_t *deps)
{
	size_t n = json_array_size(deps), adds = 0;
	const char **names = kn_xcalloc(n ? n : 1, sizeof(*names));

	for (size_t i = 0; i < n; i++)
		names[i] = json_string_value(
			json_object_get(json_array_get(deps, i), "name"));
	qsort(names, n, sizeof(*names), name_cmp);
	for (size_t i = 0; i < n; i++)
		if ((i == 0 || strcmp(names[i - 1], names[i])) &&
		    !(g && series_for(g, names[i])))
			adds++;
	free(names);
	return adds;
}

static void take_entry(struct kn_traffic *t, struct gateway *g,
		       const json_t *e, int64_t now)
{
	struct series in;
	struct sample smp;
	struct series *s;
	bool found;
	size_t at;

	memset(&in, 0, sizeof(in));
	memset(&smp, 0, sizeof(smp));
	parse_entry(e, 0, &in, &smp, NULL);
	smp.at_ms = now;
	at = series_index(g, in.deployment, &found);
	s = found ? g->series[at] : NULL;
	if (!s) {
		s = kn_xcalloc(1, sizeof(*s));
		g->series = kn_xrealloc(g->series,
					(g->n_series + 1) * sizeof(*g->series));
		memmove(&g->series[at + 1], &g->series[at],
			(g->n_series - at) * sizeof(*g->series));
		g->series[at] = s;
		g->n_series++;
		t->n_series++;
	} else if (went_back(s, &in, &s->samples[s->n_samples - 1], &smp)) {
		s->n_samples = 0;
	}
	kn_strlcpy(s->deployment, in.deployment, sizeof(s->deployment));
	s->n_bounds = in.n_bounds;
	memcpy(s->bounds, in.bounds, sizeof(s->bounds));
	add_sample(s, &smp, t->window_ms);
}

int kn_traffic_report(struct kn_traffic *t, const json_t *doc, int64_t now,
		      struct kn_error *err)
{
	const json_t *deps;
	const char *instance;
	struct gateway *g;
	size_t adds;

	if (check_report(doc, err) < 0)
		return -EINVAL;
	expire(t, now);
	deps = json_object_get(doc, "deployments");
	instance = json_string_value(json_object_get(doc, "instance"));
	g = gateway_for(t, instance);
	if (!g && t->n_gateways == KN_TRAFFIC_GATEWAYS_MAX)
		return kn_errorf(err, KN_ELIMIT, "instance",
				 "%d gateways already report traffic; a new "
				 "one is taken once one has been silent for "
				 "%lld s",
				 KN_TRAFFIC_GATEWAYS_MAX,
				 (long long)(t->window_ms / 1000));
	adds = new_series(g, deps);
	if (t->n_series + adds > KN_TRAFFIC_SERIES_MAX)
		return kn_errorf(err, KN_ELIMIT, "deployments",
				 "the gateways' reports would cover more than "
				 "%d gateway and deployment pairs",
				 KN_TRAFFIC_SERIES_MAX);
	if (!g) {
		g = &t->gateways[t->n_gateways++];
		kn_strlcpy(g->instance, instance, sizeof(g->instance));
	}
	/* From the gateway's uptime, not its clock: the two machines'
	   clocks need not agree. */
	g->started_at_ms =
		now - json_integer_value(json_object_get(doc, "uptime_ms"));
	g->last_ms = now;
	for (size_t i = 0; i < json_array_size(deps); i++)
		take_entry(t, g, json_array_get(deps, i), now);
	return 0;
}

double kn_traffic_quantile(const double *bounds, const uint64_t *counts,
			   size_t n, double q)
{
	uint64_t total = 0, below = 0;
	double rank;

	for (size_t i = 0; i <= n; i++)
		total += counts[i];
	if (total == 0)
		return -1;
	rank = q * (double)total;
	for (size_t i = 0; i < n; i++) {
		if (counts[i] && (double)(below + counts[i]) >= rank) {
			double lo = i ? bounds[i - 1] : 0;

			return lo + (bounds[i] - lo) * (rank - (double)below) /
					    (double)counts[i];
		}
		below += counts[i];
	}
	return n ? bounds[n - 1] : -1;
}

/* What one series adds to a summary: the difference over the window. */
struct sum {
	uint64_t c[N_COUNTERS];
	size_t n_bounds;
	double bounds[KN_TRAFFIC_BUCKETS_MAX];
	uint64_t buckets[KN_TRAFFIC_BUCKETS_MAX + 1];
	int64_t span_ms, reported_at_ms;
	int gateways;
};

/* The bucket of sum that holds observations at or below bound: the
   first whose bound is not smaller (the overflow bucket past them). */
static size_t merged_bucket(const struct sum *sum, double bound)
{
	size_t k = 0;

	while (k < sum->n_bounds && sum->bounds[k] < bound)
		k++;
	return k;
}

static void add_series(struct sum *sum, const struct gateway *g,
		       const struct series *s, int64_t now, int64_t window_ms)
{
	const struct sample *last = &s->samples[s->n_samples - 1];
	struct sample zero;
	const struct sample *base = &s->samples[0];
	int64_t start = now - window_ms;

	/* A gateway that started inside the window counted from zero then;
	   otherwise the window starts at the oldest sample kept. */
	if (base->at_ms > start && g->started_at_ms >= start &&
	    g->started_at_ms <= base->at_ms) {
		memset(&zero, 0, sizeof(zero));
		zero.at_ms = g->started_at_ms;
		base = &zero;
	} else if (s->n_samples == 1) {
		return;
	}
	if (!sum->gateways) {
		sum->n_bounds = s->n_bounds;
		memcpy(sum->bounds, s->bounds, sizeof(sum->bounds));
	}
	for (size_t k = 0; k < N_COUNTERS; k++)
		sum->c[k] += last->c[k] - base->c[k];
	for (size_t k = 0; k <= s->n_bounds; k++) {
		size_t into = k < s->n_bounds
				      ? merged_bucket(sum, s->bounds[k])
				      : sum->n_bounds;
		sum->buckets[into] += last->buckets[k] - base->buckets[k];
	}
	if (last->at_ms - base->at_ms > sum->span_ms)
		sum->span_ms = last->at_ms - base->at_ms;
	if (last->at_ms > sum->reported_at_ms)
		sum->reported_at_ms = last->at_ms;
	sum->gateways++;
}

static json_t *latency_ms(const struct sum *sum, double q)
{
	double v = kn_traffic_quantile(sum->bounds, sum->buckets,
				       sum->n_bounds, q);

	return v < 0 ? json_null() : json_real(v * 1000.0);
}

json_t *kn_traffic_summary(const struct kn_traffic *t, const char *deployment,
			   int64_t now)
{
	struct sum sum;
	double span_s;
	json_t *o;

	memset(&sum, 0, sizeof(sum));
	for (size_t i = 0; i < t->n_gateways; i++) {
		const struct gateway *g = &t->gateways[i];
		const struct series *s;

		if (g->last_ms < now - t->window_ms)
			continue;
		s = series_for(g, deployment);
		if (s && s->samples[s->n_samples - 1].at_ms >= now - t->window_ms)
			add_series(&sum, g, s, now, t->window_ms);
	}
	if (!sum.gateways)
		return NULL;
	span_s = (double)sum.span_ms / 1000.0;
	o = json_pack("{s:f, s:f, s:o, s:o, s:i, s:I}", "window_s", span_s,
		      "requests_per_s",
		      span_s > 0 ? (double)sum.c[C_REQUESTS] / span_s : 0.0,
		      "latency_p50_ms", latency_ms(&sum, 0.5), "latency_p99_ms",
		      latency_ms(&sum, 0.99), "gateways", sum.gateways,
		      "reported_at_ms", (json_int_t)sum.reported_at_ms);
	for (size_t k = 0; k < N_COUNTERS; k++)
		json_object_set_new(o, COUNTER_NAMES[k],
				    json_integer((json_int_t)sum.c[k]));
	return o;
}
