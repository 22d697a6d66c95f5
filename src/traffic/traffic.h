/*
 * traffic: what the gateways report of each deployment's requests,
 * kept over a sliding window so the API can say how much traffic a
 * deployment had, its latency percentiles, its errors, 429s and
 * fallbacks, whatever number of gateways front it.
 *
 * A gateway sends its cumulative counters and latency histogram per
 * deployment (they start at zero when it starts, under an instance id
 * it draws then, and it says how long ago that was). The table keeps a
 * few samples per gateway and deployment, at least a sixteenth of the
 * window apart, and answers the difference between the newest and the
 * one at the window's start, summed over gateways (histograms merged
 * bucket by bucket). It holds
 * bounded memory whatever is reported, and is pure: the time is passed
 * in, so its rules are unit-tested without a server or a gateway.
 */
#ifndef KILN_TRAFFIC_TRAFFIC_H
#define KILN_TRAFFIC_TRAFFIC_H

#include <stdint.h>

#include <jansson.h>

#include "base/base.h"

/* Bounds on what one table holds. */
#define KN_TRAFFIC_GATEWAYS_MAX 32
#define KN_TRAFFIC_SERIES_MAX 4096 /* gateway × deployment pairs */
#define KN_TRAFFIC_BUCKETS_MAX 32  /* finite latency bounds */
#define KN_TRAFFIC_DEFAULT_WINDOW_MS (5 * 60 * 1000)

struct kn_traffic;

/* A table answering over the last window_ms (> 0). */
struct kn_traffic *kn_traffic_new(int64_t window_ms);
void kn_traffic_free(struct kn_traffic *t);

/*
 * Take a gateway's report at now:
 *   {"instance": "1-64 of [A-Za-z0-9_-]", "uptime_ms": INT,
 *    "deployments": [{"name": S, "requests": N, "errors": N,
 *      "rate_limited": N, "fallbacks": N, "upstream_errors": N,
 *      "tokens": N, "latency_bounds_s": [ascending > 0],
 *      "latency_counts": [len(bounds) + 1 counts, the last past them]}]}
 * Counters are non-negative integers; a counter smaller than the last
 * report's means the gateway restarted under the same instance, and
 * that series starts again. Gateways and series silent for a window
 * are dropped first. 0, or -EINVAL with err naming the field, or
 * -ENOSPC (KN_ELIMIT) when a new gateway or series passes the bounds.
 */
int kn_traffic_report(struct kn_traffic *t, const json_t *doc, int64_t now,
		      struct kn_error *err);

/*
 * deployment's traffic over the window ending at now, summed over the
 * gateways that reported it within the window, or NULL when none did:
 *   {"window_s", "requests", "requests_per_s", "errors", "rate_limited",
 *    "fallbacks", "upstream_errors", "tokens", "latency_p50_ms",
 *    "latency_p99_ms" (null without requests), "gateways",
 *    "reported_at_ms"}
 * window_s is the longest span a gateway's numbers cover (shorter than
 * the window for one that started inside it).
 */
json_t *kn_traffic_summary(const struct kn_traffic *t, const char *deployment,
			   int64_t now);

/*
 * The q-quantile (0..1) of a histogram: counts[i] observations at or
 * below bounds[i] (above bounds[i-1]), counts[n] above bounds[n-1]. The
 * value is interpolated linearly inside its bucket (from 0 for the
 * first), and is bounds[n-1] when it falls past the last bound. -1 when
 * the histogram is empty.
 */
double kn_traffic_quantile(const double *bounds, const uint64_t *counts,
			   size_t n, double q);

#endif
