/*
 * Usage sketches and the right-size rule (declared in cost.h).
 *
 * A sketch is a histogram with exponentially growing buckets, as the
 * Kubernetes vertical pod autoscaler keeps: its size does not depend on
 * how long a task ran, two sketches merge by adding counts, and the error
 * of a percentile is bounded by the growth (5%). Rejected: keeping the
 * samples (a month-long job would grow the store without bound) and
 * running quantile estimators such as P-square (they do not merge across
 * a job's runs).
 */
#include "cost/cost.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB (1024.0 * 1024.0)
#define GIB (1024.0 * MIB)

static const struct {
	const char *name;
	double first; /* bucket 1's lower edge */
	double step;  /* right-size suggestions are multiples of it */
} RESOURCES[KN_USAGE_RESOURCES] = {
	[KN_USAGE_CPU] = { "cpu", 10, 100 },
	[KN_USAGE_MEMORY] = { "memory", MIB, 64 * MIB },
	[KN_USAGE_GPU_MEMORY] = { "gpu_memory", MIB, GIB },
	[KN_USAGE_GPU_UTIL] = { "gpu_util", 1, 10 },
};

const char *kn_usage_resource_name(enum kn_usage_resource r)
{
	return (unsigned)r < KN_USAGE_RESOURCES ? RESOURCES[r].name : "unknown";
}

int kn_usage_resource_parse(const char *s, enum kn_usage_resource *out,
			    struct kn_error *err)
{
	for (int i = 0; i < KN_USAGE_RESOURCES; i++)
		if (s && !strcmp(s, RESOURCES[i].name)) {
			*out = (enum kn_usage_resource)i;
			return 0;
		}
	return kn_errorf(err, KN_EINVAL, "resource",
			 "resource: unknown \"%s\" (cpu, memory, gpu_memory or "
			 "gpu_util)", s ? s : "");
}

void kn_usage_hist_init(struct kn_usage_hist *h, enum kn_usage_resource r)
{
	memset(h, 0, sizeof(*h));
	h->resource = r;
}

/* The upper edge of bucket i. */
static double bucket_top(const struct kn_usage_hist *h, int i)
{
	return RESOURCES[h->resource].first * pow(KN_USAGE_GROWTH, i);
}

static int bucket_of(const struct kn_usage_hist *h, double v)
{
	double first = RESOURCES[h->resource].first;
	int i;

	if (v < first)
		return 0;
	i = 1 + (int)floor(log(v / first) / log(KN_USAGE_GROWTH));
	/* log's rounding may put an edge value one bucket off. */
	while (i > 1 && v < bucket_top(h, i - 1))
		i--;
	while (i < KN_USAGE_BUCKETS - 1 && v >= bucket_top(h, i))
		i++;
	return i < KN_USAGE_BUCKETS ? i : KN_USAGE_BUCKETS - 1;
}

void kn_usage_hist_add(struct kn_usage_hist *h, double value)
{
	if (!(value > 0))
		value = 0;
	h->counts[bucket_of(h, value)]++;
	h->samples++;
	h->sum += value;
	if (value > h->max)
		h->max = value;
}

void kn_usage_hist_merge(struct kn_usage_hist *h,
			 const struct kn_usage_hist *from)
{
	for (int i = 0; i < KN_USAGE_BUCKETS; i++)
		h->counts[i] += from->counts[i];
	h->samples += from->samples;
	h->sum += from->sum;
	if (from->max > h->max)
		h->max = from->max;
}

double kn_usage_hist_percentile(const struct kn_usage_hist *h, double q)
{
	int64_t total = 0, need, seen = 0;

	for (int i = 0; i < KN_USAGE_BUCKETS; i++)
		total += h->counts[i];
	if (total <= 0)
		return 0;
	need = (int64_t)ceil(q * (double)total);
	if (need < 1)
		need = 1;
	for (int i = 0; i < KN_USAGE_BUCKETS; i++) {
		seen += h->counts[i];
		if (seen >= need) {
			double top = bucket_top(h, i);

			return i == KN_USAGE_BUCKETS - 1 || top > h->max ? h->max
									 : top;
		}
	}
	return h->max;
}

double kn_usage_hist_mean(const struct kn_usage_hist *h)
{
	return h->samples > 0 ? h->sum / (double)h->samples : 0;
}

char *kn_usage_hist_encode(const struct kn_usage_hist *h)
{
	/* "399:4294967295," is 15 bytes at most per bucket. */
	size_t cap = KN_USAGE_BUCKETS * 16 + 1, len = 0;
	char *text = kn_xcalloc(cap, 1);

	for (int i = 0; i < KN_USAGE_BUCKETS; i++)
		if (h->counts[i])
			len += (size_t)snprintf(text + len, cap - len, "%s%d:%u",
						len ? "," : "", i,
						(unsigned)h->counts[i]);
	return text;
}

int kn_usage_hist_decode(struct kn_usage_hist *h, const char *text,
			 struct kn_error *err)
{
	uint32_t counts[KN_USAGE_BUCKETS] = { 0 };
	const char *p = text ? text : "";

	while (*p) {
		char *end;
		long i;
		unsigned long long c;

		i = strtol(p, &end, 10);
		if (end == p || *end != ':' || i < 0 || i >= KN_USAGE_BUCKETS)
			goto bad;
		p = end + 1;
		errno = 0;
		c = strtoull(p, &end, 10);
		if (end == p || errno || c > UINT32_MAX || (*end && *end != ','))
			goto bad;
		counts[i] = (uint32_t)c;
		p = *end ? end + 1 : end;
	}
	memcpy(h->counts, counts, sizeof(counts));
	return 0;
bad:
	return kn_errorf(err, KN_EINVAL, "histogram",
			 "histogram: \"%.64s\" is not INDEX:COUNT pairs "
			 "(index below %d)", text, KN_USAGE_BUCKETS);
}

void kn_rightsize(const struct kn_usage_hist *h, double requested,
		  struct kn_rightsize *out)
{
	double step = RESOURCES[h->resource].step;

	memset(out, 0, sizeof(*out));
	out->samples = h->samples;
	out->p50 = kn_usage_hist_percentile(h, 0.5);
	out->p95 = kn_usage_hist_percentile(h, KN_RIGHTSIZE_PERCENTILE);
	out->max = h->max;
	out->requested = requested > 0 ? requested : 0;
	out->target = ceil(out->p95 * KN_RIGHTSIZE_HEADROOM / step) * step;
	if (out->target < step)
		out->target = step;
	out->over = out->samples >= KN_RIGHTSIZE_MIN_SAMPLES &&
		    out->requested > 0 &&
		    out->target < out->requested * KN_RIGHTSIZE_MARGIN;
}
