/*
 * sim's figures over seeds: quantiles, mean and spread, paired
 * comparisons of two policies, and speed. A policy comparison is paired
 * because both policies see the same pods and node order per seed, so
 * the seed-to-seed spread of the trace cancels in the difference.
 */
#include <math.h>
#include <stdlib.h>

#include "sim/internal.h"

static int cmp_double(const void *pa, const void *pb)
{
	double a = *(const double *)pa, b = *(const double *)pb;

	return a < b ? -1 : a > b;
}

double kn_sim_quantile(double *v, size_t n, double q)
{
	size_t k = 0;
	double pos;
	size_t lo;

	for (size_t i = 0; i < n; i++)
		if (!isnan(v[i]))
			v[k++] = v[i];
	if (k == 0)
		return NAN;
	qsort(v, k, sizeof(*v), cmp_double);
	pos = q * (double)(k - 1);
	lo = (size_t)pos;
	if (lo + 1 >= k)
		return v[k - 1];
	return v[lo] + (pos - (double)lo) * (v[lo + 1] - v[lo]);
}

void kn_sim_stats(const double *v, size_t n, struct kn_sim_stats *out)
{
	double *copy = kn_xcalloc(n ? n : 1, sizeof(*copy));
	double sum = 0, sq = 0;
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		if (!isnan(v[i])) {
			copy[k++] = v[i];
			sum += v[i];
		}
	out->n = k;
	out->mean = k ? sum / (double)k : NAN;
	for (size_t i = 0; i < k; i++)
		sq += (copy[i] - out->mean) * (copy[i] - out->mean);
	out->sd = k == 0 ? NAN : k == 1 ? 0.0 : sqrt(sq / (double)(k - 1));
	out->median = kn_sim_quantile(copy, k, 0.5);
	free(copy);
}

void kn_sim_paired(const double *a, const double *b, size_t n,
		   struct kn_sim_paired *out)
{
	double *d = kn_xcalloc(n ? n : 1, sizeof(*d));
	struct kn_sim_stats s;

	out->lower = out->higher = out->equal = 0;
	for (size_t i = 0; i < n; i++) {
		d[i] = isnan(a[i]) || isnan(b[i]) ? NAN : b[i] - a[i];
		if (isnan(d[i]))
			continue;
		if (d[i] < 0)
			out->lower++;
		else if (d[i] > 0)
			out->higher++;
		else
			out->equal++;
	}
	kn_sim_stats(d, n, &s);
	free(d);
	out->n = s.n;
	out->mean = s.mean;
	out->sd = s.sd;
	if (s.n < 2)
		out->t = NAN;
	else if (s.sd > 0)
		out->t = s.mean / (s.sd / sqrt((double)s.n));
	else
		out->t = s.mean > 0 ? INFINITY : s.mean < 0 ? -INFINITY : 0.0;
}

void kn_sim_speed(const struct kn_sim_curve *runs, size_t n, double seconds,
		  struct kn_sim_speed *out)
{
	out->offered = out->placed = 0;
	for (size_t i = 0; i < n; i++) {
		out->offered += runs[i].offered;
		out->placed += runs[i].placed;
	}
	out->seconds = seconds;
	out->offered_per_s = seconds > 0 ? (double)out->offered / seconds : 0;
	out->placed_per_s = seconds > 0 ? (double)out->placed / seconds : 0;
}
