/*
 * Prometheus text exposition (format 0.0.4) read back into samples: the
 * subset exporters emit, which is every line kind the format has — HELP
 * and TYPE comments, other comments, blank lines and samples.
 *
 * A hand-written scanner over the whole text, one line at a time; a
 * regex-based reader would not give the column of a bad escape. Every
 * name and label value is copied out, so the samples outlive the text.
 * On any error everything built so far is freed and *out is untouched.
 */
#include "alert/alert.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct scan {
	const char *p;     /* current position */
	const char *line;  /* start of the current line */
	const char *end;   /* end of the current line */
	int lineno;
	struct kn_error *err;
};

static int scan_fail(struct scan *s, const char *at, const char *what)
{
	return kn_errorf(s->err, KN_EINVAL, NULL, "line %d:%d: %s", s->lineno,
			 (int)(at - s->line) + 1, what);
}

static bool name_start(char c, bool colon)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
	       (colon && c == ':');
}

static bool name_char(char c, bool colon)
{
	return name_start(c, colon) || (c >= '0' && c <= '9');
}

static void skip_blanks(struct scan *s)
{
	while (s->p < s->end && (*s->p == ' ' || *s->p == '\t'))
		s->p++;
}

/* A metric name (colon allowed) or label name; malloc'd copy in *out. */
static int read_name(struct scan *s, bool colon, const char *what, char **out)
{
	const char *start = s->p;

	if (s->p >= s->end || !name_start(*s->p, colon))
		return scan_fail(s, s->p, what);
	while (s->p < s->end && name_char(*s->p, colon))
		s->p++;
	if (s->p - start > KN_EXPO_MAX_NAME)
		return scan_fail(s, start, "name longer than 256 characters");
	*out = strndup(start, (size_t)(s->p - start));
	if (!*out)
		abort();
	return 0;
}

/* A quoted label value with \\ \" \n escapes. */
static int read_label_value(struct scan *s, char **out)
{
	struct kn_buf b;
	int rc = 0;

	if (s->p >= s->end || *s->p != '"')
		return scan_fail(s, s->p, "expected '\"' to start a label value");
	s->p++;
	kn_buf_init(&b, KN_EXPO_MAX_VALUE);
	kn_buf_append(&b, "", 0);
	while (rc == 0) {
		char c;

		if (s->p >= s->end) {
			rc = scan_fail(s, s->p, "label value not closed with '\"'");
			break;
		}
		c = *s->p;
		if (c == '"') {
			s->p++;
			break;
		}
		if (c == '\\') {
			const char *at = s->p;
			s->p++;
			if (s->p >= s->end) {
				rc = scan_fail(s, at, "label value not closed "
						      "with '\"'");
				break;
			}
			c = *s->p == 'n' ? '\n' : *s->p;
			if (*s->p != 'n' && *s->p != '\\' && *s->p != '"') {
				rc = scan_fail(s, at, "unknown escape in a label "
						      "value (only \\\\, \\\" and "
						      "\\n)");
				break;
			}
		}
		if (kn_buf_append(&b, &c, 1) < 0)
			rc = scan_fail(s, s->p, "label value longer than 4096 "
						"bytes");
		s->p++;
	}
	if (rc == 0)
		*out = kn_xrealloc(b.data, b.len + 1); /* give back the slack */
	else
		kn_buf_release(&b);
	return rc;
}

static int label_cmp(const void *a, const void *b)
{
	return strcmp(((const struct kn_label *)a)->name,
		      ((const struct kn_label *)b)->name);
}

void kn_labels_free(struct kn_label *labels, size_t n)
{
	for (size_t i = 0; labels && i < n; i++) {
		KN_FREE_ALL(labels[i].name, labels[i].value);
	}
	free(labels);
}

static void sample_release(struct kn_expo_sample *smp)
{
	kn_labels_free(smp->labels, smp->n_labels);
	free(smp->metric);
	memset(smp, 0, sizeof(*smp));
}

static int read_labels(struct scan *s, struct kn_expo_sample *smp)
{
	int rc;

	s->p++; /* '{' */
	for (;;) {
		struct kn_label l = {0};
		const char *at;

		skip_blanks(s);
		if (s->p < s->end && *s->p == '}') {
			s->p++;
			break;
		}
		if (smp->n_labels == KN_EXPO_MAX_LABELS)
			return scan_fail(s, s->p, "more than 64 labels");
		at = s->p;
		if ((rc = read_name(s, false, "expected a label name", &l.name)) < 0)
			return rc;
		skip_blanks(s);
		if (s->p >= s->end || *s->p != '=') {
			free(l.name);
			return scan_fail(s, s->p, "expected '=' after a label "
						  "name");
		}
		s->p++;
		skip_blanks(s);
		if ((rc = read_label_value(s, &l.value)) < 0) {
			free(l.name);
			return rc;
		}
		for (size_t i = 0; i < smp->n_labels; i++)
			if (!strcmp(smp->labels[i].name, l.name)) {
				KN_FREE_ALL(l.name, l.value);
				return scan_fail(s, at, "label given twice");
			}
		smp->labels = kn_xrealloc(smp->labels, (smp->n_labels + 1) *
							       sizeof(l));
		smp->labels[smp->n_labels++] = l;
		skip_blanks(s);
		if (s->p < s->end && *s->p == ',') {
			s->p++;
			continue;
		}
		if (s->p < s->end && *s->p == '}') {
			s->p++;
			break;
		}
		return scan_fail(s, s->p, "expected ',' or '}' after a label");
	}
	if (smp->n_labels > 1)
		qsort(smp->labels, smp->n_labels, sizeof(*smp->labels),
		      label_cmp);
	return 0;
}

/* The token up to the next blank or the end of the line. */
static size_t token_len(struct scan *s)
{
	const char *q = s->p;

	while (q < s->end && *q != ' ' && *q != '\t')
		q++;
	return (size_t)(q - s->p);
}

/* Go's ParseFloat forms, as Prometheus reads them. */
static int read_value(struct scan *s, double *out)
{
	size_t n = token_len(s);
	char buf[64], *end;
	double v;

	if (n == 0)
		return scan_fail(s, s->p, "expected a value");
	if (n >= sizeof(buf))
		return scan_fail(s, s->p, "value is not a number");
	memcpy(buf, s->p, n);
	buf[n] = '\0';
	if (!strcasecmp(buf, "nan")) {
		v = NAN;
	} else if (!strcasecmp(buf, "+inf") || !strcasecmp(buf, "inf")) {
		v = INFINITY;
	} else if (!strcasecmp(buf, "-inf")) {
		v = -INFINITY;
	} else {
		/* strtod would take "infinity", hex floats and "nan(...)";
		 * exporters write plain decimals. */
		if (strspn(buf, "0123456789+-.eE") != n)
			return scan_fail(s, s->p, "value is not a number");
		v = strtod(buf, &end);
		if (*end)
			return scan_fail(s, s->p, "value is not a number");
	}
	s->p += n;
	*out = v;
	return 0;
}

static int read_timestamp(struct scan *s, int64_t *out)
{
	size_t n = token_len(s);
	char buf[24], *end;
	long long v;

	if (n == 0 || n >= sizeof(buf))
		return scan_fail(s, s->p, "timestamp is not an integer (ms)");
	memcpy(buf, s->p, n);
	buf[n] = '\0';
	errno = 0;
	v = strtoll(buf, &end, 10);
	if (*end || errno)
		return scan_fail(s, s->p, "timestamp is not an integer (ms)");
	s->p += n;
	*out = v;
	return 0;
}

static int read_sample(struct scan *s, struct kn_expo_sample *smp)
{
	int rc;

	if ((rc = read_name(s, true, "expected a metric name", &smp->metric)) < 0)
		return rc;
	if (s->p < s->end && *s->p == '{' && (rc = read_labels(s, smp)) < 0)
		return rc;
	if (s->p < s->end && *s->p != ' ' && *s->p != '\t')
		return scan_fail(s, s->p, "expected a blank before the value");
	skip_blanks(s);
	if ((rc = read_value(s, &smp->value)) < 0)
		return rc;
	skip_blanks(s);
	if (s->p < s->end && (rc = read_timestamp(s, &smp->timestamp_ms)) < 0)
		return rc;
	skip_blanks(s);
	if (s->p < s->end)
		return scan_fail(s, s->p, "unexpected text after the sample");
	return 0;
}

/* "# HELP name ..." and "# TYPE name type"; other comments are free. */
static int read_comment(struct scan *s)
{
	char *name = NULL;
	bool help, type;
	int rc = 0;

	s->p++; /* '#' */
	skip_blanks(s);
	help = s->end - s->p >= 4 && !memcmp(s->p, "HELP", 4);
	type = s->end - s->p >= 4 && !memcmp(s->p, "TYPE", 4);
	if (!help && !type)
		return 0;
	s->p += 4;
	if (s->p < s->end && *s->p != ' ' && *s->p != '\t')
		return 0; /* "# HELPFUL" is a comment */
	skip_blanks(s);
	if ((rc = read_name(s, true, "expected a metric name", &name)) < 0)
		return rc;
	free(name);
	if (type) {
		static const char *const types[] = {
			"counter", "gauge", "histogram", "summary", "untyped",
			"gaugehistogram", "stateset", "info", NULL};
		size_t n;
		bool known = false;

		skip_blanks(s);
		n = token_len(s);
		for (size_t i = 0; types[i]; i++)
			if (strlen(types[i]) == n && !memcmp(s->p, types[i], n))
				known = true;
		if (!known)
			return scan_fail(s, s->p, "unknown metric type (counter, "
						  "gauge, histogram, summary or "
						  "untyped)");
		s->p += n;
		skip_blanks(s);
		if (s->p < s->end)
			return scan_fail(s, s->p, "unexpected text after the type");
	}
	return 0;
}

int kn_expo_parse(const char *text, size_t len, struct kn_expo_sample **out,
		  size_t *n, struct kn_error *err)
{
	struct kn_expo_sample *samples = NULL;
	size_t count = 0, alloc = 0;
	const char *p = text, *stop = text + len;
	struct scan s = {.err = err};
	int rc = 0;

	while (p < stop && rc == 0) {
		const char *nl = memchr(p, '\n', (size_t)(stop - p));

		s.line = s.p = p;
		s.end = nl ? nl : stop;
		s.lineno++;
		p = nl ? nl + 1 : stop;
		if (memchr(s.line, '\0', (size_t)(s.end - s.line))) {
			rc = scan_fail(&s, memchr(s.line, '\0',
						  (size_t)(s.end - s.line)),
				       "NUL byte");
			break;
		}
		skip_blanks(&s);
		if (s.p == s.end)
			continue;
		if (*s.p == '#') {
			rc = read_comment(&s);
			continue;
		}
		if (count == KN_EXPO_MAX_SAMPLES) {
			rc = scan_fail(&s, s.p, "more than 100000 samples");
			break;
		}
		if (count == alloc) {
			alloc = alloc ? alloc * 2 : 64;
			samples = kn_xrealloc(samples, alloc * sizeof(*samples));
		}
		memset(&samples[count], 0, sizeof(samples[count]));
		rc = read_sample(&s, &samples[count]);
		if (rc < 0)
			sample_release(&samples[count]);
		else
			count++;
	}
	if (rc < 0) {
		kn_expo_free(samples, count);
		return rc;
	}
	*out = samples;
	*n = count;
	return 0;
}

void kn_expo_free(struct kn_expo_sample *samples, size_t n)
{
	for (size_t i = 0; samples && i < n; i++)
		sample_release(&samples[i]);
	free(samples);
}
