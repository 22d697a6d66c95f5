/*
 * Rule expressions: a small PromQL subset, enough for the rules kiln
 * ships and for ratios between metrics.
 *
 *     expr     := sum ('&' sum)*
 *     sum      := product (('+' | '-') product)*
 *     product  := unary (('*' | '/') unary)*
 *     unary    := '-' unary | atom
 *     atom     := NUMBER | selector | '(' expr ')'
 *     selector := NAME ('{' matcher (',' matcher)* ','? '}')?
 *     matcher  := LABEL ('=' | '!=' | '=~' | '!~') STRING
 *
 * Between two vectors an operator pairs elements with identical label
 * sets (PromQL's default one-to-one matching); between a vector and a
 * number it applies to every element. '&' is a bitwise AND of values read
 * as unsigned integers, for bitmask gauges such as throttle reasons
 * (PromQL has none; NaN when a value is negative or not whole). Regular
 * expressions are POSIX extended and anchored at both ends, as in PromQL.
 *
 * A recursive-descent parser over the text; errors carry the byte offset
 * so the rules reader can point at the line and column in the file.
 */
#include "internal.h"

#include <errno.h>
#include <math.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Deep nesting would only exhaust the stack. */
#define EXPR_MAX_DEPTH 32
#define SELECTOR_MAX_MATCHERS 32

enum match_op { M_EQ, M_NE, M_RE, M_NRE };

struct matcher {
	char *label;
	enum match_op op;
	char *value;
	regex_t re;
	bool re_ready;
};

enum node_kind { N_NUMBER, N_SELECTOR, N_BINARY };

struct kn_alert_expr {
	enum node_kind kind;
	double number;
	char *metric;
	struct matcher *matchers;
	size_t n_matchers;
	char op; /* + - * / & */
	struct kn_alert_expr *l, *r;
};

struct parser {
	const char *text, *p;
	int depth;
	size_t err_off;
	char *msg;
	size_t msg_len;
};

__attribute__((format(printf, 3, 4))) static int
perr(struct parser *ps, const char *at, const char *fmt, ...)
{
	va_list ap;

	ps->err_off = (size_t)(at - ps->text);
	va_start(ap, fmt);
	vsnprintf(ps->msg, ps->msg_len, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static void skip_ws(struct parser *ps)
{
	while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' ||
	       *ps->p == '\r')
		ps->p++;
}

static bool is_name_start(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
	       c == ':';
}

static bool is_name_char(char c)
{
	return is_name_start(c) || (c >= '0' && c <= '9');
}

void expr_free(struct kn_alert_expr *e)
{
	if (!e)
		return;
	for (size_t i = 0; i < e->n_matchers; i++) {
		KN_FREE_ALL(e->matchers[i].label, e->matchers[i].value);
		if (e->matchers[i].re_ready)
			regfree(&e->matchers[i].re);
	}
	KN_FREE_ALL(e->matchers, e->metric);
	expr_free(e->l);
	expr_free(e->r);
	free(e);
}

static int parse_expr(struct parser *ps, struct kn_alert_expr **out);

static int parse_string(struct parser *ps, char **out)
{
	struct kn_buf b;
	const char *start = ps->p;

	if (*ps->p != '"')
		return perr(ps, ps->p, "expected a quoted label value");
	ps->p++;
	kn_buf_init(&b, KN_ALERT_EXPR_MAX);
	kn_buf_append(&b, "", 0);
	while (*ps->p != '"') {
		char c = *ps->p;
		if (!c) {
			kn_buf_release(&b);
			return perr(ps, start, "label value not closed with '\"'");
		}
		if (c == '\\') {
			ps->p++;
			if (*ps->p == 'n')
				c = '\n';
			else if (*ps->p == '\\' || *ps->p == '"')
				c = *ps->p;
			else {
				kn_buf_release(&b);
				return perr(ps, ps->p - 1, "unknown escape (only "
							   "\\\\, \\\" and \\n)");
			}
		}
		kn_buf_append(&b, &c, 1);
		ps->p++;
	}
	ps->p++;
	*out = b.data;
	return 0;
}

static int parse_matcher(struct parser *ps, struct matcher *m)
{
	const char *start = ps->p, *value_at;
	int rc;

	if (!is_name_start(*ps->p) || *ps->p == ':')
		return perr(ps, ps->p, "expected a label name");
	while (is_name_char(*ps->p) && *ps->p != ':')
		ps->p++;
	m->label = strndup(start, (size_t)(ps->p - start));
	if (!m->label)
		abort();
	skip_ws(ps);
	if (ps->p[0] == '=' && ps->p[1] == '~') {
		m->op = M_RE;
		ps->p += 2;
	} else if (ps->p[0] == '!' && ps->p[1] == '~') {
		m->op = M_NRE;
		ps->p += 2;
	} else if (ps->p[0] == '!' && ps->p[1] == '=') {
		m->op = M_NE;
		ps->p += 2;
	} else if (ps->p[0] == '=') {
		m->op = M_EQ;
		ps->p++;
	} else {
		return perr(ps, ps->p, "expected =, !=, =~ or !~ after label "
				       "\"%s\"", m->label);
	}
	skip_ws(ps);
	value_at = ps->p;
	if ((rc = parse_string(ps, &m->value)) < 0)
		return rc;
	if (m->op == M_RE || m->op == M_NRE) {
		char *anchored = kn_asprintf("^(%s)$", m->value);
		int rrc = regcomp(&m->re, anchored, REG_EXTENDED | REG_NOSUB);
		free(anchored);
		if (rrc != 0) {
			char why[128];
			regerror(rrc, &m->re, why, sizeof(why));
			return perr(ps, value_at, "bad regular expression: %s",
				    why);
		}
		m->re_ready = true;
	}
	return 0;
}

static int parse_selector(struct parser *ps, struct kn_alert_expr *e)
{
	const char *start = ps->p;
	int rc;

	while (is_name_char(*ps->p))
		ps->p++;
	e->kind = N_SELECTOR;
	e->metric = strndup(start, (size_t)(ps->p - start));
	if (!e->metric)
		abort();
	skip_ws(ps);
	if (*ps->p != '{')
		return 0;
	ps->p++;
	for (;;) {
		skip_ws(ps);
		if (*ps->p == '}')
			break;
		if (e->n_matchers == SELECTOR_MAX_MATCHERS)
			return perr(ps, ps->p, "more than %d label matchers",
				    SELECTOR_MAX_MATCHERS);
		e->matchers = kn_xrealloc(e->matchers, (e->n_matchers + 1) *
							       sizeof(*e->matchers));
		memset(&e->matchers[e->n_matchers], 0, sizeof(*e->matchers));
		rc = parse_matcher(ps, &e->matchers[e->n_matchers++]);
		if (rc < 0)
			return rc;
		skip_ws(ps);
		if (*ps->p == ',') {
			ps->p++;
			continue;
		}
		if (*ps->p != '}')
			return perr(ps, ps->p, "expected ',' or '}' in the label "
					       "matchers");
	}
	ps->p++;
	return 0;
}

static int parse_atom(struct parser *ps, struct kn_alert_expr **out)
{
	struct kn_alert_expr *e;
	int rc;

	skip_ws(ps);
	if (*ps->p == '(') {
		const char *open = ps->p++;
		if ((rc = parse_expr(ps, out)) < 0)
			return rc;
		skip_ws(ps);
		if (*ps->p != ')') {
			expr_free(*out);
			*out = NULL;
			return perr(ps, *ps->p ? ps->p : open,
				    *ps->p ? "expected ')'"
					   : "'(' is never closed");
		}
		ps->p++;
		return 0;
	}
	e = kn_xcalloc(1, sizeof(*e));
	if ((*ps->p >= '0' && *ps->p <= '9') || *ps->p == '.') {
		char *end;
		e->kind = N_NUMBER;
		errno = 0;
		e->number = strtod(ps->p, &end);
		if (end == ps->p || errno || is_name_char(*end)) {
			expr_free(e);
			return perr(ps, ps->p, "not a number");
		}
		ps->p = end;
	} else if (is_name_start(*ps->p)) {
		if ((rc = parse_selector(ps, e)) < 0) {
			expr_free(e);
			return rc;
		}
	} else {
		expr_free(e);
		return perr(ps, ps->p, *ps->p ? "expected a metric name, a "
						"number or '('"
					      : "expression ends too soon");
	}
	*out = e;
	return 0;
}

static struct kn_alert_expr *binary(char op, struct kn_alert_expr *l,
				    struct kn_alert_expr *r)
{
	struct kn_alert_expr *e = kn_xcalloc(1, sizeof(*e));

	e->kind = N_BINARY;
	e->op = op;
	e->l = l;
	e->r = r;
	return e;
}

static int parse_unary(struct parser *ps, struct kn_alert_expr **out)
{
	int rc;

	skip_ws(ps);
	if (*ps->p != '-')
		return parse_atom(ps, out);
	ps->p++;
	if (++ps->depth > EXPR_MAX_DEPTH)
		return perr(ps, ps->p, "expression nested too deeply");
	rc = parse_unary(ps, out);
	ps->depth--;
	if (rc == 0) {
		struct kn_alert_expr *zero = kn_xcalloc(1, sizeof(*zero));
		zero->kind = N_NUMBER;
		*out = binary('-', zero, *out);
	}
	return rc;
}

/* One precedence level: operand (ops operand)*. */
static int parse_level(struct parser *ps, const char *ops,
		       int (*operand)(struct parser *, struct kn_alert_expr **),
		       struct kn_alert_expr **out)
{
	struct kn_alert_expr *l = NULL, *r = NULL;
	int rc = operand(ps, &l);

	while (rc == 0) {
		char op;
		skip_ws(ps);
		op = *ps->p;
		if (!op || !strchr(ops, op))
			break;
		ps->p++;
		if ((rc = operand(ps, &r)) < 0)
			break;
		l = binary(op, l, r);
	}
	if (rc < 0) {
		expr_free(l);
		return rc;
	}
	*out = l;
	return 0;
}

static int parse_product(struct parser *ps, struct kn_alert_expr **out)
{
	return parse_level(ps, "*/", parse_unary, out);
}

static int parse_sum(struct parser *ps, struct kn_alert_expr **out)
{
	return parse_level(ps, "+-", parse_product, out);
}

static int parse_expr(struct parser *ps, struct kn_alert_expr **out)
{
	int rc;

	if (++ps->depth > EXPR_MAX_DEPTH)
		return perr(ps, ps->p, "expression nested too deeply");
	rc = parse_level(ps, "&", parse_sum, out);
	ps->depth--;
	return rc;
}

int expr_parse(const char *text, struct kn_alert_expr **out, size_t *err_off,
	       char *msg, size_t msg_len)
{
	struct parser ps = {.text = text, .p = text, .msg = msg,
			    .msg_len = msg_len};
	struct kn_alert_expr *e = NULL;
	int rc;

	if (strlen(text) > KN_ALERT_EXPR_MAX) {
		*err_off = 0;
		snprintf(msg, msg_len, "longer than %d bytes", KN_ALERT_EXPR_MAX);
		return -EINVAL;
	}
	rc = parse_expr(&ps, &e);
	if (rc == 0) {
		skip_ws(&ps);
		if (*ps.p) {
			expr_free(e);
			rc = perr(&ps, ps.p, "unexpected \"%c\"; expected an "
					     "operator (+ - * / &) or the end",
				  *ps.p);
		}
	}
	if (rc < 0) {
		*err_off = ps.err_off;
		return rc;
	}
	*out = e;
	return 0;
}

bool expr_uses(const struct kn_alert_expr *e, const char *metric)
{
	if (!e)
		return false;
	if (e->kind == N_SELECTOR)
		return !strcmp(e->metric, metric);
	return expr_uses(e->l, metric) || expr_uses(e->r, metric);
}

/* ---- evaluation ---- */

static const char *label_value(const struct series *s, const char *name)
{
	for (size_t i = 0; i < s->n_labels; i++)
		if (!strcmp(s->labels[i].name, name))
			return s->labels[i].value;
	return ""; /* absent reads as empty, as in PromQL */
}

static bool matches(const struct kn_alert_expr *e, const struct series *s)
{
	for (size_t i = 0; i < e->n_matchers; i++) {
		const struct matcher *m = &e->matchers[i];
		const char *v = label_value(s, m->label);
		bool ok;

		switch (m->op) {
		case M_EQ:
			ok = !strcmp(v, m->value);
			break;
		case M_NE:
			ok = strcmp(v, m->value) != 0;
			break;
		case M_RE:
			ok = regexec(&m->re, v, 0, NULL, 0) == 0;
			break;
		default:
			ok = regexec(&m->re, v, 0, NULL, 0) != 0;
			break;
		}
		if (!ok)
			return false;
	}
	return true;
}

static void vec_push(struct vec *v, const struct series *s, double x)
{
	v->e = kn_xrealloc(v->e, (v->n + 1) * sizeof(*v->e));
	v->e[v->n].s = s;
	v->e[v->n].v = x;
	v->n++;
}

void vec_release(struct vec *v)
{
	free(v->e);
	v->e = NULL;
	v->n = 0;
}

const char *vec_elem_key(const struct vec_elem *e)
{
	return e->s ? e->s->lkey : "";
}

static double apply(char op, double a, double b)
{
	switch (op) {
	case '+':
		return a + b;
	case '-':
		return a - b;
	case '*':
		return a * b;
	case '/':
		return a / b; /* IEEE: x/0 is ±Inf, 0/0 NaN, as in PromQL */
	default:
		if (!(a >= 0 && b >= 0 && a < 18446744073709551616.0 &&
		      b < 18446744073709551616.0) ||
		    a != floor(a) || b != floor(b))
			return NAN;
		return (double)((uint64_t)a & (uint64_t)b);
	}
}

void expr_eval(const struct kn_alert_expr *e, const struct kn_alert_history *h,
	       int64_t t, struct vec *out)
{
	struct vec l = {0}, r = {0};

	memset(out, 0, sizeof(*out));
	switch (e->kind) {
	case N_NUMBER:
		vec_push(out, NULL, e->number);
		return;
	case N_SELECTOR:
		for (const struct series *s = strmap_get(&h->metrics, e->metric);
		     s; s = s->mnext) {
			double x;
			if (matches(e, s) && series_at(h, s, t, &x))
				vec_push(out, s, x);
		}
		return;
	case N_BINARY:
		break;
	}
	expr_eval(e->l, h, t, &l);
	expr_eval(e->r, h, t, &r);
	if (l.n == 1 && !l.e[0].s) { /* number op vector (or number) */
		for (size_t i = 0; i < r.n; i++)
			vec_push(out, r.e[i].s, apply(e->op, l.e[0].v, r.e[i].v));
	} else if (r.n == 1 && !r.e[0].s) {
		for (size_t i = 0; i < l.n; i++)
			vec_push(out, l.e[i].s, apply(e->op, l.e[i].v, r.e[0].v));
	} else {
		for (size_t i = 0; i < l.n; i++)
			for (size_t k = 0; k < r.n; k++)
				if (!strcmp(l.e[i].s->lkey, r.e[k].s->lkey)) {
					vec_push(out, l.e[i].s,
						 apply(e->op, l.e[i].v, r.e[k].v));
					break;
				}
	}
	vec_release(&l);
	vec_release(&r);
}

/* ---- summary templates: {{ $labels.NAME }} and {{ $value }} ---- */

/* Parse one "{{ ... }}" at p; *label set for $labels.X (NULL: $value). */
static int placeholder(const char *p, const char **end, const char **label,
		       size_t *label_len)
{
	const char *q = p + 2;

	while (*q == ' ')
		q++;
	if (!strncmp(q, "$value", 6) && !is_name_char(q[6])) {
		*label = NULL;
		q += 6;
	} else if (!strncmp(q, "$labels.", 8) && is_name_start(q[8]) &&
		   q[8] != ':') {
		q += 8;
		*label = q;
		while (is_name_char(*q) && *q != ':')
			q++;
		*label_len = (size_t)(q - *label);
	} else {
		return -EINVAL;
	}
	while (*q == ' ')
		q++;
	if (strncmp(q, "}}", 2))
		return -EINVAL;
	*end = q + 2;
	return 0;
}

int template_check(const char *text, size_t *err_off, char *msg,
		   size_t msg_len)
{
	for (const char *p = text; (p = strstr(p, "{{")) != NULL;) {
		const char *end, *label;
		size_t len;
		if (placeholder(p, &end, &label, &len) < 0) {
			*err_off = (size_t)(p - text);
			snprintf(msg, msg_len, "a placeholder is {{ $labels.NAME }} "
					       "or {{ $value }}");
			return -EINVAL;
		}
		p = end;
	}
	return 0;
}

char *template_render(const char *text, const struct kn_label *labels,
		      size_t n_labels, double value)
{
	struct kn_buf b;
	const char *p = text, *q;

	kn_buf_init(&b, SIZE_MAX);
	kn_buf_append(&b, "", 0);
	while ((q = strstr(p, "{{")) != NULL) {
		const char *end, *label;
		size_t len = 0;

		kn_buf_append(&b, p, (size_t)(q - p));
		if (placeholder(q, &end, &label, &len) < 0) {
			kn_buf_append(&b, "{{", 2);
			p = q + 2;
			continue;
		}
		if (!label) {
			kn_buf_printf(&b, "%g", value);
		} else {
			for (size_t i = 0; i < n_labels; i++)
				if (strlen(labels[i].name) == len &&
				    !strncmp(labels[i].name, label, len))
					kn_buf_printf(&b, "%s", labels[i].value);
		}
		p = end;
	}
	kn_buf_printf(&b, "%s", p);
	return b.data;
}
