/*
 * Alert rules from YAML:
 *
 *     rules:
 *       - name: GpuXidErrors
 *         expr: DCGM_FI_DEV_XID_ERRORS
 *         op: "!="            # > >= < <= == != (or gt ge lt le eq ne)
 *         value: 0
 *         for: 0s
 *         severity: critical   # info | warning | critical
 *         summary: "GPU {{ $labels.gpu }}: XID {{ $value }}"
 *       - name: GpuTempAnomaly
 *         expr: DCGM_FI_DEV_GPU_TEMP
 *         band: {window: 30m, k: 4, min_samples: 20}
 *
 * libfyaml builds the tree and we walk it, so every error points at the
 * node: "rules.yaml:7:12: rules[1].band.k: must be a number > 0; got
 * "x"". Expression and summary errors point inside the scalar. Positions
 * of scalars come from their tokens; of mappings and sequences from a
 * node report collected (never printed) by a diagnostic object, the way
 * spec/ does it, since libfyaml has no public start mark for them.
 */
#include "internal.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libfyaml.h>

#define RULE_NAME_MAX 128
#define SUMMARY_MAX 1024
#define BAND_DEFAULT_MIN_SAMPLES 5

struct walk {
	const char *file;
	struct fy_diag *diag;
	struct kn_error *err;
	char path[128];
};

static void node_position(struct walk *w, struct fy_node *node, int *line,
			  int *col)
{
	if (kn_yaml_scalar_start(node, line, col)) {
		enum fy_node_style st = fy_node_get_style(node);
		if ((st == FYNS_SINGLE_QUOTED || st == FYNS_DOUBLE_QUOTED) &&
		    *col > 1)
			(*col)--; /* point at the quote */
		return;
	}
	if (node && kn_yaml_node_position(w->diag, node, line, col))
		return;
	*line = 1;
	*col = 1;
}

static int fail_at(struct walk *w, int line, int col, const char *fmt,
		   va_list ap)
{
	char msg[512];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	return kn_errorf(w->err, KN_EINVAL, w->path, "%s:%d:%d: %s%s%s",
			 w->file, line, col, w->path, w->path[0] ? ": " : "",
			 msg);
}

__attribute__((format(printf, 3, 4))) static int
fail(struct walk *w, struct fy_node *node, const char *fmt, ...)
{
	va_list ap;
	int line, col, rc;

	node_position(w, node, &line, &col);
	va_start(ap, fmt);
	rc = fail_at(w, line, col, fmt, ap);
	va_end(ap);
	return rc;
}

/* An error at byte offset off inside a scalar's text. */
__attribute__((format(printf, 4, 5))) static int
fail_inside(struct walk *w, struct fy_node *node, size_t off,
	    const char *fmt, ...)
{
	va_list ap;
	const char *text = fy_node_get_scalar0(node);
	int line, col, rc;

	if (!kn_yaml_scalar_start(node, &line, &col)) {
		line = 1;
		col = 1;
	} else if (text && !memchr(text, '\n', off)) {
		/* Single-line text: the offset is the column shift (exact
		 * for plain scalars and quoted ones without escapes). */
		for (size_t i = 0; i < off; i++)
			if (((unsigned char)text[i] & 0xc0) != 0x80)
				col++;
	}
	va_start(ap, fmt);
	rc = fail_at(w, line, col, fmt, ap);
	va_end(ap);
	return rc;
}

/* "got "x"" text for messages: short and printable. */
static void got(char *buf, size_t size, struct fy_node *node)
{
	const char *t = fy_node_is_scalar(node) ? fy_node_get_scalar0(node) : NULL;
	size_t i, k = 0;

	if (!t) {
		snprintf(buf, size, "%s",
			 fy_node_is_mapping(node) ? "a mapping" : "a list");
		return;
	}
	buf[k++] = '"';
	for (i = 0; t[i] && i < 40 && k + 5 < size; i++)
		buf[k++] = (unsigned char)t[i] < 0x20 ? '?' : t[i];
	if (t[i])
		k += (size_t)snprintf(buf + k, size - k, "...");
	if (k + 1 < size)
		buf[k++] = '"';
	buf[k] = '\0';
}

static const char *scalar_text(struct fy_node *node)
{
	return node && fy_node_is_scalar(node) ? fy_node_get_scalar0(node) : NULL;
}

static bool is_plain(struct fy_node *node)
{
	return fy_node_get_style(node) == FYNS_PLAIN;
}

static int want_string(struct walk *w, struct fy_node *node, const char **out)
{
	const char *t = scalar_text(node);
	char g[64];

	if (!t || (is_plain(node) && !*t)) {
		got(g, sizeof(g), node);
		return fail(w, node, "must be a string; got %s", t ? "nothing" : g);
	}
	*out = t;
	return 0;
}

static int want_number(struct walk *w, struct fy_node *node, double *out)
{
	const char *t = scalar_text(node);
	char *end, g[64];
	double v;

	if (t && is_plain(node) && *t) {
		v = strtod(t, &end);
		if (!*end && strspn(t, "0123456789+-.eE") == strlen(t) &&
		    isfinite(v)) {
			*out = v;
			return 0;
		}
	}
	got(g, sizeof(g), node);
	return fail(w, node, "must be a number; got %s", g);
}

static int want_duration(struct walk *w, struct fy_node *node, int64_t *out)
{
	const char *t = scalar_text(node);
	char g[64];

	if (t && !strcmp(t, "0")) {
		*out = 0;
		return 0;
	}
	if (t && kn_parse_duration(t, out) == 0 && *out >= 0)
		return 0;
	got(g, sizeof(g), node);
	return fail(w, node, "must be a duration such as 30s, 5m or 1h; got %s",
		    g);
}

/* The fields a mapping may hold: refuse others with a suggestion. */
static int check_keys(struct walk *w, struct fy_node *map,
		      const char *const *allowed)
{
	struct fy_node_pair *pair;
	void *iter = NULL;
	char g[64];

	while ((pair = fy_node_mapping_iterate(map, &iter))) {
		struct fy_node *key = fy_node_pair_key(pair);
		const char *k = scalar_text(key);
		const char *best = NULL;
		int best_d = 3;
		bool ok = false;

		for (size_t i = 0; k && allowed[i]; i++) {
			int d = kn_levenshtein(k, allowed[i]);
			if (d == 0)
				ok = true;
			if (d < best_d) {
				best_d = d;
				best = allowed[i];
			}
		}
		if (ok)
			continue;
		got(g, sizeof(g), key);
		if (best)
			return fail(w, key, "unknown field %s; did you mean "
					    "\"%s\"?", g, best);
		return fail(w, key, "unknown field %s", g);
	}
	return 0;
}

static void path_set(struct walk *w, size_t index, const char *field)
{
	snprintf(w->path, sizeof(w->path), "rules[%zu]%s%s", index,
		 field ? "." : "", field ? field : "");
}

static int read_op(struct walk *w, struct fy_node *node, enum kn_alert_op *out)
{
	static const char *const syms[] = {">", ">=", "<", "<=", "==", "!="};
	static const char *const words[] = {"gt", "ge", "lt", "le", "eq", "ne"};
	const char *t = scalar_text(node);
	char g[64];

	for (int i = 0; t && i < 6; i++)
		if (!strcmp(t, syms[i]) || !strcmp(t, words[i])) {
			*out = (enum kn_alert_op)i;
			return 0;
		}
	got(g, sizeof(g), node);
	return fail(w, node, "must be one of > >= < <= == != (quote them in "
			     "YAML: \">\") or gt ge lt le eq ne; got %s",
		    g);
}

static int read_band(struct walk *w, size_t index, struct fy_node *node,
		     struct kn_alert_rule *r)
{
	static const char *const fields[] = {"window", "k", "min_samples", NULL};
	struct fy_node *v;
	double d;
	int rc;

	path_set(w, index, "band");
	if (!fy_node_is_mapping(node))
		return fail(w, node, "must be a mapping {window, k, min_samples}");
	if ((rc = check_keys(w, node, fields)) < 0)
		return rc;
	r->dynamic = true;
	r->band_min_samples = BAND_DEFAULT_MIN_SAMPLES;
	if (!(v = fy_node_mapping_lookup_by_string(node, "window", -1)))
		return fail(w, node, "window is required (e.g. 30m)");
	path_set(w, index, "band.window");
	if ((rc = want_duration(w, v, &r->band_window_ms)) < 0)
		return rc;
	if (r->band_window_ms <= 0)
		return fail(w, v, "must be longer than 0");
	path_set(w, index, "band");
	if (!(v = fy_node_mapping_lookup_by_string(node, "k", -1)))
		return fail(w, node, "k (standard deviations) is required");
	path_set(w, index, "band.k");
	if ((rc = want_number(w, v, &r->band_k)) < 0)
		return rc;
	if (!(r->band_k > 0))
		return fail(w, v, "must be a number > 0");
	if ((v = fy_node_mapping_lookup_by_string(node, "min_samples", -1))) {
		path_set(w, index, "band.min_samples");
		if ((rc = want_number(w, v, &d)) < 0)
			return rc;
		if (d != floor(d) || d < 2 || d > KN_HISTORY_MAX_POINTS)
			return fail(w, v, "must be a whole number 2..%d",
				    KN_HISTORY_MAX_POINTS);
		r->band_min_samples = (int)d;
	}
	return 0;
}

static bool valid_name(const char *n)
{
	if (!((*n >= 'a' && *n <= 'z') || (*n >= 'A' && *n <= 'Z') || *n == '_'))
		return false;
	for (; *n; n++)
		if (!((*n >= 'a' && *n <= 'z') || (*n >= 'A' && *n <= 'Z') ||
		      (*n >= '0' && *n <= '9') || *n == '_'))
			return false;
	return true;
}

static int read_rule(struct walk *w, size_t index, struct fy_node *node,
		     struct kn_alert_rule *r)
{
	static const char *const fields[] = {"name", "expr", "op", "value",
					     "band", "for", "severity",
					     "summary", NULL};
	struct fy_node *v, *op, *value, *band;
	const char *t;
	char msg[256];
	size_t off;
	int rc;

	path_set(w, index, NULL);
	if (!fy_node_is_mapping(node))
		return fail(w, node, "must be a mapping with name, expr and a "
				     "condition");
	if ((rc = check_keys(w, node, fields)) < 0)
		return rc;

	if (!(v = fy_node_mapping_lookup_by_string(node, "name", -1)))
		return fail(w, node, "name is required");
	path_set(w, index, "name");
	if ((rc = want_string(w, v, &t)) < 0)
		return rc;
	if (strlen(t) > RULE_NAME_MAX || !valid_name(t))
		return fail(w, v, "must be letters, digits and '_' (at most %d, "
				  "not starting with a digit)",
			    RULE_NAME_MAX);
	r->name = kn_xstrdup(t);

	path_set(w, index, NULL);
	if (!(v = fy_node_mapping_lookup_by_string(node, "expr", -1)))
		return fail(w, node, "expr is required");
	path_set(w, index, "expr");
	if ((rc = want_string(w, v, &t)) < 0)
		return rc;
	r->expr_text = kn_xstrdup(t);
	if (expr_parse(t, &r->expr, &off, msg, sizeof(msg)) < 0)
		return fail_inside(w, v, off, "%s", msg);

	op = fy_node_mapping_lookup_by_string(node, "op", -1);
	value = fy_node_mapping_lookup_by_string(node, "value", -1);
	band = fy_node_mapping_lookup_by_string(node, "band", -1);
	path_set(w, index, NULL);
	if (band && (op || value))
		return fail(w, op ? op : value, "a rule has either op and value "
						"(a static threshold) or band (a "
						"dynamic one), not both");
	if (!band && !op)
		return fail(w, node, "a condition is required: op and value, or "
				     "band");
	if (band) {
		if ((rc = read_band(w, index, band, r)) < 0)
			return rc;
	} else {
		path_set(w, index, "op");
		if ((rc = read_op(w, op, &r->op)) < 0)
			return rc;
		path_set(w, index, NULL);
		if (!value)
			return fail(w, node, "value is required with op");
		path_set(w, index, "value");
		if ((rc = want_number(w, value, &r->value)) < 0)
			return rc;
	}

	if ((v = fy_node_mapping_lookup_by_string(node, "for", -1))) {
		path_set(w, index, "for");
		if ((rc = want_duration(w, v, &r->for_ms)) < 0)
			return rc;
	}
	r->severity = KN_ALERT_WARNING;
	if ((v = fy_node_mapping_lookup_by_string(node, "severity", -1))) {
		char g[64];
		path_set(w, index, "severity");
		t = scalar_text(v);
		if (t && !strcmp(t, "info"))
			r->severity = KN_ALERT_INFO;
		else if (t && !strcmp(t, "warning"))
			r->severity = KN_ALERT_WARNING;
		else if (t && !strcmp(t, "critical"))
			r->severity = KN_ALERT_CRITICAL;
		else {
			got(g, sizeof(g), v);
			return fail(w, v, "must be info, warning or critical; "
					  "got %s", g);
		}
	}
	r->summary = kn_xstrdup("");
	if ((v = fy_node_mapping_lookup_by_string(node, "summary", -1))) {
		path_set(w, index, "summary");
		if ((rc = want_string(w, v, &t)) < 0)
			return rc;
		if (strlen(t) > SUMMARY_MAX)
			return fail(w, v, "longer than %d bytes", SUMMARY_MAX);
		if (template_check(t, &off, msg, sizeof(msg)) < 0)
			return fail_inside(w, v, off, "%s", msg);
		free(r->summary);
		r->summary = kn_xstrdup(t);
	}
	return 0;
}

static int read_rules(struct walk *w, struct fy_node *root,
		      struct kn_alert_rules *rules)
{
	static const char *const fields[] = {"rules", NULL};
	struct fy_node *list, *item;
	void *iter = NULL;
	size_t i = 0;
	int rc;

	if (!fy_node_is_mapping(root))
		return fail(w, root, "a rules file is a mapping with a \"rules\" "
				     "list");
	if ((rc = check_keys(w, root, fields)) < 0)
		return rc;
	list = fy_node_mapping_lookup_by_string(root, "rules", -1);
	if (!list)
		return fail(w, root, "a rules file is a mapping with a \"rules\" "
				     "list");
	snprintf(w->path, sizeof(w->path), "rules");
	if (!fy_node_is_sequence(list))
		return fail(w, list, "must be a list of rules");
	if (fy_node_sequence_item_count(list) > KN_ALERT_MAX_RULES)
		return fail(w, list, "more than %d rules", KN_ALERT_MAX_RULES);
	rules->rules = kn_xcalloc((size_t)fy_node_sequence_item_count(list) + 1,
				  sizeof(*rules->rules));
	while ((item = fy_node_sequence_iterate(list, &iter))) {
		struct kn_alert_rule *r = &rules->rules[i];
		rules->n = i + 1; /* freed with the rest on failure */
		if ((rc = read_rule(w, i, item, r)) < 0)
			return rc;
		for (size_t k = 0; k < i; k++)
			if (!strcmp(rules->rules[k].name, r->name)) {
				path_set(w, i, "name");
				return fail(w, fy_node_mapping_lookup_by_string(
						       item, "name", -1),
					    "rule %s is defined twice (first as "
					    "rules[%zu])",
					    r->name, k);
			}
		i++;
	}
	return 0;
}

int kn_alert_rules_parse(const char *text, size_t len, const char *filename,
			 struct kn_alert_rules **out, struct kn_error *err)
{
	struct walk w = {.file = filename ? filename : "<rules>", .err = err};
	struct fy_parser *parser;
	struct fy_document *doc = NULL;
	struct kn_alert_rules *rules = NULL;
	struct fy_node *root;
	int rc;

	if (len > KN_ALERT_RULES_MAX_BYTES)
		return kn_errorf(err, KN_ETOOBIG, NULL,
				 "%s: %zu bytes; the limit is %d", w.file, len,
				 KN_ALERT_RULES_MAX_BYTES);
	if ((rc = kn_yaml_text_check(text, len, w.file, "rules file", err)) < 0)
		return rc;
	if ((rc = kn_yaml_parser_new(text, len, w.file, 0, &w.diag, &parser,
				     err)) < 0)
		return rc;
	doc = fy_parse_load_document(parser);
	if (fy_diag_got_error(w.diag)) {
		rc = kn_yaml_parse_error(w.diag, w.file, w.err);
		goto out;
	}
	root = doc ? fy_document_root(doc) : NULL;
	if (!root) {
		rc = kn_errorf(err, KN_EINVAL, NULL, "%s:1:1: empty; expected a "
			       "mapping with a \"rules\" list", w.file);
		goto out;
	}
	rules = kn_xcalloc(1, sizeof(*rules));
	rc = read_rules(&w, root, rules);
	if (rc == 0) {
		*out = rules;
		rules = NULL;
	}
out:
	kn_alert_rules_free(rules);
	if (doc)
		fy_parse_document_destroy(parser, doc);
	fy_parser_destroy(parser);
	fy_diag_destroy(w.diag);
	return rc;
}

int kn_alert_rules_load(const char *path, struct kn_alert_rules **out,
			struct kn_error *err)
{
	char *text = NULL;
	size_t len = 0;
	int rc = kn_read_file(path, KN_ALERT_RULES_MAX_BYTES, &text, &len);

	if (rc == -EFBIG)
		return kn_errorf(err, KN_ETOOBIG, NULL, "%s: larger than %d bytes",
				 path, KN_ALERT_RULES_MAX_BYTES);
	if (rc < 0)
		return kn_errorf(err, KN_EINVAL, NULL, "%s: %s", path,
				 strerror(-rc));
	rc = kn_alert_rules_parse(text, len, path, out, err);
	free(text);
	return rc;
}

void kn_alert_rules_free(struct kn_alert_rules *rules)
{
	if (!rules)
		return;
	for (size_t i = 0; i < rules->n; i++) {
		KN_FREE_ALL(rules->rules[i].name, rules->rules[i].expr_text);
		expr_free(rules->rules[i].expr);
		free(rules->rules[i].summary);
	}
	KN_FREE_ALL(rules->rules, rules);
}

bool kn_alert_rules_use(const struct kn_alert_rules *rules, const char *metric)
{
	for (size_t i = 0; i < rules->n; i++)
		if (expr_uses(rules->rules[i].expr, metric))
			return true;
	return false;
}

const char *kn_alert_severity_name(enum kn_alert_severity s)
{
	return s == KN_ALERT_INFO ? "info"
	       : s == KN_ALERT_CRITICAL ? "critical" : "warning";
}

