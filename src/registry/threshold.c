/*
 * Thresholds on the numbers an evaluation job writes to metrics.json:
 * {"max": {"loss": 1.8}, "min": {"acc": 0.9}}. A run passes when every
 * named metric is present, finite and on the right side of its limit (a
 * limit itself passes); a missing metric fails, so a broken evaluation
 * cannot pass by writing nothing.
 */
#include "registry/registry.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_side(json_t *side, const char *kind, struct kn_error *err)
{
	const char *metric;
	json_t *v;

	if (!json_is_object(side))
		return kn_errorf(err, KN_EINVAL, kind,
				 "%s must be an object of metric: number", kind);
	json_object_foreach(side, metric, v) {
		if (!metric[0] || strlen(metric) > KN_MODEL_METRIC_MAX)
			return kn_errorf(err, KN_EINVAL, kind,
					 "%s: a metric name is 1 to %d "
					 "characters", kind, KN_MODEL_METRIC_MAX);
		if (!json_is_number(v) || !isfinite(json_number_value(v)))
			return kn_errorf(err, KN_EINVAL, kind,
					 "%s.%s must be a finite number", kind,
					 metric);
	}
	return 0;
}

int kn_model_thresholds_validate(json_t *doc, struct kn_error *err)
{
	const char *key;
	json_t *v;
	size_t n = 0;
	int rc;

	if (!json_is_object(doc))
		return kn_errorf(err, KN_EINVAL, "thresholds",
				 "thresholds must be an object with max and/or "
				 "min");
	json_object_foreach(doc, key, v) {
		if (strcmp(key, "max") != 0 && strcmp(key, "min") != 0)
			return kn_errorf(err, KN_EINVAL, "thresholds",
					 "thresholds: unknown key \"%s\" (max, "
					 "min)", key);
		rc = check_side(v, key, err);
		if (rc < 0)
			return rc;
		n += json_object_size(v);
	}
	if (n == 0)
		return kn_errorf(err, KN_EINVAL, "thresholds",
				 "at least one threshold (--max or --min) is "
				 "needed");
	return 0;
}

int kn_model_threshold_add(json_t *doc, const char *kind, const char *text,
			   struct kn_error *err)
{
	const char *eq = strchr(text, '=');
	char metric[KN_MODEL_METRIC_MAX + 1], *end;
	json_t *side;
	double limit;

	if (!eq || eq == text || (size_t)(eq - text) > KN_MODEL_METRIC_MAX)
		return kn_errorf(err, KN_EINVAL, kind,
				 "--%s wants METRIC=NUMBER, got \"%s\"", kind,
				 text);
	errno = 0;
	limit = strtod(eq + 1, &end);
	if (eq[1] == '\0' || *end != '\0' || errno || !isfinite(limit))
		return kn_errorf(err, KN_EINVAL, kind,
				 "--%s %s: \"%s\" is not a finite number", kind,
				 text, eq + 1);
	snprintf(metric, sizeof(metric), "%.*s", (int)(eq - text), text);
	side = json_object_get(doc, kind);
	if (!side) {
		side = json_object();
		json_object_set_new(doc, kind, side);
	}
	json_object_set_new(side, metric, json_real(limit));
	return 0;
}

/* The first threshold of one side that metrics break, into why. */
static bool side_broken(json_t *side, bool is_max, json_t *metrics,
			char *why, size_t len)
{
	const char *metric;
	json_t *limit;

	json_object_foreach(side, metric, limit) {
		json_t *v = json_object_get(metrics, metric);
		double lim = json_number_value(limit), x;

		if (!json_is_number(v) || !isfinite(json_number_value(v))) {
			snprintf(why, len, "%s is missing from metrics.json or "
				 "not a finite number", metric);
			return true;
		}
		x = json_number_value(v);
		if (is_max ? x > lim : x < lim) {
			snprintf(why, len, "%s %g %s %s %g", metric, x,
				 is_max ? ">" : "<", is_max ? "max" : "min",
				 lim);
			return true;
		}
	}
	return false;
}

bool kn_model_thresholds_pass(json_t *thresholds, json_t *metrics, char *why,
			      size_t len)
{
	why[0] = '\0';
	if (!json_is_object(metrics)) {
		snprintf(why, len, "no metrics.json object");
		return false;
	}
	return !side_broken(json_object_get(thresholds, "max"), true, metrics,
			    why, len) &&
	       !side_broken(json_object_get(thresholds, "min"), false, metrics,
			    why, len);
}
