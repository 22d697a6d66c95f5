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
