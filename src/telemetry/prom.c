/*
 * Prometheus text exposition 0.0.4: HELP/TYPE lines and samples, with the
 * format's escaping rules (HELP: \\ and \n; label values: \\, \" and \n)
 * and names checked against its grammar, so no caller can emit a line a
 * scraper rejects.
 */
#include "telemetry.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool valid_name(const char *s, bool colon_ok)
{
	if (!*s || (*s >= '0' && *s <= '9'))
		return false;
	for (; *s; s++) {
		char c = *s;
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '_' || (colon_ok && c == ':')))
			return false;
	}
	return true;
}

/* Append s with \\ and \n escaped, and \" too when quoted. */
static int append_escaped(struct kn_buf *out, const char *s, bool quoted)
{
	const char *run = s;
	int rc;

	for (; *s; s++) {
		const char *esc = NULL;
		if (*s == '\\')
			esc = "\\\\";
		else if (*s == '\n')
			esc = "\\n";
		else if (quoted && *s == '"')
			esc = "\\\"";
		if (!esc)
			continue;
		if ((rc = kn_buf_append(out, run, (size_t)(s - run))) < 0 ||
		    (rc = kn_buf_append(out, esc, 2)) < 0)
			return rc;
		run = s + 1;
	}
	return kn_buf_append(out, run, (size_t)(s - run));
}

int kn_prom_family(struct kn_buf *out, const char *name, const char *type,
		   const char *help)
{
	int rc;

	if (!valid_name(name, true))
		return -EINVAL;
	if ((rc = kn_buf_printf(out, "# HELP %s ", name)) < 0 ||
	    (rc = append_escaped(out, help, false)) < 0 ||
	    (rc = kn_buf_printf(out, "\n# TYPE %s %s\n", name, type)) < 0)
		return rc;
	return 0;
}

static int append_value(struct kn_buf *out, double v)
{
	if (isnan(v))
		return kn_buf_printf(out, "NaN");
	if (isinf(v))
		return kn_buf_printf(out, v > 0 ? "+Inf" : "-Inf");
	/* Whole numbers up to 2^53 are exact in a double: print every digit. */
	if (v == floor(v) && fabs(v) < 9007199254740992.0)
		return kn_buf_printf(out, "%.0f", v);
	/* The shortest text that reads back as v, as Go's formatter writes. */
	for (int digits = 15; digits < 17; digits++) {
		char text[40];
		snprintf(text, sizeof(text), "%.*g", digits, v);
		if (strtod(text, NULL) == v)
			return kn_buf_printf(out, "%s", text);
	}
	return kn_buf_printf(out, "%.17g", v);
}

int kn_prom_sample(struct kn_buf *out, const char *name,
		   const char *const *labels, double value)
{
	int rc;

	if (!valid_name(name, true))
		return -EINVAL;
	if ((rc = kn_buf_append(out, name, strlen(name))) < 0)
		return rc;
	if (labels && labels[0]) {
		for (size_t i = 0; labels[i]; i += 2) {
			if (!labels[i + 1] || !valid_name(labels[i], false) ||
			    !strncmp(labels[i], "__", 2))
				return -EINVAL;
			if ((rc = kn_buf_printf(out, "%s%s=\"", i ? "," : "{",
						labels[i])) < 0 ||
			    (rc = append_escaped(out, labels[i + 1], true)) < 0 ||
			    (rc = kn_buf_append(out, "\"", 1)) < 0)
				return rc;
		}
		if ((rc = kn_buf_append(out, "}", 1)) < 0)
			return rc;
	}
	if ((rc = kn_buf_append(out, " ", 1)) < 0 ||
	    (rc = append_value(out, value)) < 0)
		return rc;
	return kn_buf_append(out, "\n", 1);
}

void kn_prom_histogram_init(struct kn_prom_histogram *h,
			    const double *bounds, size_t n)
{
	memset(h, 0, sizeof(*h));
	h->bounds = bounds;
	h->n_bounds = n < KN_PROM_BOUNDS_MAX ? n : KN_PROM_BOUNDS_MAX;
}

void kn_prom_histogram_observe(struct kn_prom_histogram *h, double v)
{
	size_t i = 0;

	while (i < h->n_bounds && v > h->bounds[i])
		i++;
	h->counts[i]++;
	h->sum += v;
	h->count++;
}

int kn_prom_histogram_write(struct kn_buf *out, const char *name,
			    const char *const *labels,
			    const struct kn_prom_histogram *h)
{
	enum { PAIRS_MAX = 6 };
	const char *with_le[2 * (PAIRS_MAX + 1) + 1];
	char le[32], series[160];
	size_t n = 0;
	uint64_t cum = 0;
	int rc;

	while (labels && labels[n] && n < 2 * PAIRS_MAX) {
		with_le[n] = labels[n];
		n++;
	}
	if (labels && labels[n])
		return -EINVAL;
	with_le[n] = "le";
	with_le[n + 1] = le;
	with_le[n + 2] = NULL;
	if (snprintf(series, sizeof(series), "%s_bucket", name) >=
	    (int)sizeof(series))
		return -EINVAL;
	for (size_t i = 0; i <= h->n_bounds; i++) {
		cum += h->counts[i];
		if (i < h->n_bounds)
			snprintf(le, sizeof(le), "%.17g", h->bounds[i]);
		else
			kn_strlcpy(le, "+Inf", sizeof(le));
		/* The shortest text that reads back as the bound. */
		for (int d = 1; i < h->n_bounds && d < 17; d++) {
			char t[32];
			snprintf(t, sizeof(t), "%.*g", d, h->bounds[i]);
			if (strtod(t, NULL) == h->bounds[i]) {
				kn_strlcpy(le, t, sizeof(le));
				break;
			}
		}
		if ((rc = kn_prom_sample(out, series, with_le,
					 (double)cum)) < 0)
			return rc;
	}
	snprintf(series, sizeof(series), "%s_sum", name);
	if ((rc = kn_prom_sample(out, series, labels, h->sum)) < 0)
		return rc;
	snprintf(series, sizeof(series), "%s_count", name);
	return kn_prom_sample(out, series, labels, (double)h->count);
}
