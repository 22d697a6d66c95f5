/*
 * Reading a request body's top-level "model" and "stream" in one pass
 * that builds nothing. A full jansson parse per call (every string,
 * number and object allocated, then freed) was the largest user-space
 * cost of the request path after the usage scan.
 *
 * It still validates the whole body, and refuses exactly what
 * json_loadb(text, len, 0, ...) refuses, so a body is answered 400 in the
 * same cases as before: a top level that is not an object or an array,
 * anything after it but white space, strings with control characters,
 * bad escapes, lone surrogates, \u0000 or bytes that are not UTF-8,
 * numbers outside the JSON grammar, integers outside int64 and reals that
 * overflow a double, and values nested deeper than 2048 (and, as jansson
 * does, it takes one NUL byte right after a number or literal). Keys are
 * compared unescaped and a repeated key's last value counts, as jansson's
 * object would hold it. tests/fuzz/fuzz_gateway.c checks the two agree.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/gateway.h"

/* jansson's JSON_PARSER_MAX_DEPTH: each value counts, containers or not. */
#define DEPTH_MAX 2048
/* A top-level key longer than this is neither "model" nor "stream". */
#define KEY_MAX 8

struct scan {
	const char *s, *p, *end;
	struct kn_gw_body *out;
};

/* Note where and why the body is not JSON; always -1. */
static int fail(struct scan *sc, const char *at, const char *why)
{
	struct kn_gw_body *o = sc->out;
	const char *line_start = sc->s;

	o->line = 1;
	for (const char *q = sc->s; q < at; q++)
		if (*q == '\n') {
			o->line++;
			line_start = q + 1;
		}
	o->column = (int)(at - line_start) + 1;
	kn_strlcpy(o->error, why, sizeof(o->error));
	return -1;
}

static void skip_space(struct scan *sc)
{
	while (sc->p < sc->end && (*sc->p == ' ' || *sc->p == '\n' ||
				   *sc->p == '\t' || *sc->p == '\r'))
		sc->p++;
}

/* Append the code point to buf (cap bytes) at *len; *cut when it does
   not fit. */
static void put_utf8(char *buf, size_t cap, size_t *len, bool *cut,
		     unsigned cp)
{
	char b[4];
	size_t n;

	if (cp < 0x80) {
		b[0] = (char)cp;
		n = 1;
	} else if (cp < 0x800) {
		b[0] = (char)(0xC0 | cp >> 6);
		b[1] = (char)(0x80 | (cp & 0x3F));
		n = 2;
	} else if (cp < 0x10000) {
		b[0] = (char)(0xE0 | cp >> 12);
		b[1] = (char)(0x80 | (cp >> 6 & 0x3F));
		b[2] = (char)(0x80 | (cp & 0x3F));
		n = 3;
	} else {
		b[0] = (char)(0xF0 | cp >> 18);
		b[1] = (char)(0x80 | (cp >> 12 & 0x3F));
		b[2] = (char)(0x80 | (cp >> 6 & 0x3F));
		b[3] = (char)(0x80 | (cp & 0x3F));
		n = 4;
	}
	if (*len + n >= cap) {
		*cut = true;
		return;
	}
	memcpy(buf + *len, b, n);
	*len += n;
}

static int hex4(const char *p, const char *end, unsigned *v)
{
	*v = 0;
	if (end - p < 4)
		return -1;
	for (int i = 0; i < 4; i++) {
		char c = p[i];
		unsigned d;
		if (c >= '0' && c <= '9')
			d = (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			d = (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			d = (unsigned)(c - 'A' + 10);
		else
			return -1;
		*v = *v << 4 | d;
	}
	return 0;
}

/*
 * The string at sc->p (its opening quote). With buf, its value goes
 * there unescaped and NUL-terminated, cut short (and *cut set) past cap.
 */
static int scan_string(struct scan *sc, char *buf, size_t cap, size_t *len,
		       bool *cut)
{
	const char *p = sc->p + 1, *end = sc->end;

	if (buf) {
		*len = 0;
		*cut = false;
	}
	for (;;) {
		const char *run = p;
		while (p < end && (unsigned char)*p >= 0x20 &&
		       (unsigned char)*p < 0x80 && *p != '"' && *p != '\\')
			p++;
		if (buf && p > run) {
			size_t n = (size_t)(p - run);
			if (*len + n >= cap) {
				n = *len + 1 < cap ? cap - 1 - *len : 0;
				*cut = true;
			}
			memcpy(buf + *len, run, n);
			*len += n;
		}
		if (p >= end)
			return fail(sc, p, "premature end of input");
		if (*p == '"')
			break;
		if ((unsigned char)*p < 0x20)
			return fail(sc, p, "control character in a string");
		if ((unsigned char)*p >= 0x80) {
			size_t n = kn_utf8_seq_len((const unsigned char *)p,
						   (size_t)(end - p));
			if (!n)
				return fail(sc, p, "invalid UTF-8");
			if (buf) {
				if (*len + n >= cap)
					*cut = true;
				else {
					memcpy(buf + *len, p, n);
					*len += n;
				}
			}
			p += n;
			continue;
		}
		/* a backslash */
		if (p + 1 >= end)
			return fail(sc, p, "premature end of input");
		unsigned cp;
		switch (p[1]) {
		case '"': cp = '"'; break;
		case '\\': cp = '\\'; break;
		case '/': cp = '/'; break;
		case 'b': cp = '\b'; break;
		case 'f': cp = '\f'; break;
		case 'n': cp = '\n'; break;
		case 'r': cp = '\r'; break;
		case 't': cp = '\t'; break;
		case 'u':
			if (hex4(p + 2, end, &cp) < 0)
				return fail(sc, p, "invalid \\u escape");
			if (cp == 0)
				return fail(sc, p, "\\u0000 is not allowed");
			if (cp >= 0xDC00 && cp <= 0xDFFF)
				return fail(sc, p, "lone low surrogate");
			if (cp >= 0xD800 && cp <= 0xDBFF) {
				unsigned lo;
				if (end - p < 12 || p[6] != '\\' || p[7] != 'u' ||
				    hex4(p + 8, end, &lo) < 0 || lo < 0xDC00 ||
				    lo > 0xDFFF)
					return fail(sc, p,
						    "high surrogate without a "
						    "low one");
				cp = 0x10000 + ((cp - 0xD800) << 10) +
				     (lo - 0xDC00);
				p += 6;
			}
			p += 4;
			break;
		default:
			return fail(sc, p, "invalid escape");
		}
		if (buf)
			put_utf8(buf, cap, len, cut, cp);
		p += 2;
	}
	if (buf)
		buf[*len] = '\0';
	sc->p = p + 1;
	return 0;
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static int scan_number(struct scan *sc)
{
	const char *start = sc->p, *p = sc->p, *end = sc->end;
	bool real = false;

	if (p < end && *p == '-')
		p++;
	if (p < end && *p == '0') {
		p++;
		if (p < end && is_digit(*p))
			return fail(sc, start, "invalid number");
	} else if (p < end && is_digit(*p)) {
		while (p < end && is_digit(*p))
			p++;
	} else {
		return fail(sc, start, "invalid number");
	}
	if (p < end && *p == '.') {
		real = true;
		if (++p >= end || !is_digit(*p))
			return fail(sc, start, "invalid number");
		while (p < end && is_digit(*p))
			p++;
	}
	if (p < end && (*p == 'e' || *p == 'E')) {
		real = true;
		p++;
		if (p < end && (*p == '+' || *p == '-'))
			p++;
		if (p >= end || !is_digit(*p))
			return fail(sc, start, "invalid number");
		while (p < end && is_digit(*p))
			p++;
	}
	sc->p = p;
	/* Most numbers are short integers: no copy, no strto*. */
	if (!real && p - start <= 18)
		return 0;
	{
		size_t n = (size_t)(p - start);
		char small[64], *copy = n < sizeof(small) ? small
							  : kn_xmalloc(n + 1);
		int rc = 0;
		memcpy(copy, start, n);
		copy[n] = '\0';
		errno = 0;
		if (real) {
			double v = strtod(copy, NULL);
			if (errno == ERANGE && isinf(v))
				rc = fail(sc, start, "real number overflow");
		} else {
			(void)strtoll(copy, NULL, 10);
			if (errno == ERANGE)
				rc = fail(sc, start, "too big integer");
		}
		if (copy != small)
			free(copy);
		return rc;
	}
}

static int scan_literal(struct scan *sc, const char *word, size_t n)
{
	if ((size_t)(sc->end - sc->p) < n || memcmp(sc->p, word, n))
		return fail(sc, sc->p, "invalid token");
	sc->p += n;
	return 0;
}

static int scan_value(struct scan *sc, int depth);

/* Past the '{' or '[' at sc->p: true, and past close too, when nothing
   stands between them. */
static bool scan_open(struct scan *sc, char close)
{
	sc->p++;
	skip_space(sc);
	if (sc->p < sc->end && *sc->p == close) {
		sc->p++;
		return true;
	}
	return false;
}

/* After a member or an element: 1 past a ',' (another one follows), 0
   past close (the object or array ended), else -1 as fail says. */
static int scan_next(struct scan *sc, char close)
{
	skip_space(sc);
	if (sc->p < sc->end && *sc->p == ',') {
		sc->p++;
		skip_space(sc);
		return 1;
	}
	if (sc->p < sc->end && *sc->p == close) {
		sc->p++;
		return 0;
	}
	return fail(sc, sc->p, close == '}' ? "',' or '}' expected"
					    : "',' or ']' expected");
}

/* The object at sc->p ('{'); at depth 1, its "model" and "stream" are read. */
static int scan_object(struct scan *sc, int depth)
{
	struct kn_gw_body *o = sc->out;
	bool top = depth == 1;
	int rc;

	if (scan_open(sc, '}'))
		return 0;
	for (;;) {
		char key[KEY_MAX];
		size_t key_len = 0;
		bool key_cut = false;
		const char *value;

		if (sc->p >= sc->end || *sc->p != '"')
			return fail(sc, sc->p, "string or '}' expected");
		if (scan_string(sc, top ? key : NULL, sizeof(key), &key_len,
				&key_cut) < 0)
			return -1;
		skip_space(sc);
		if (sc->p >= sc->end || *sc->p != ':')
			return fail(sc, sc->p, "':' expected");
		sc->p++;
		skip_space(sc);
		value = sc->p;
		if (top && !key_cut && key_len == 5 && !memcmp(key, "model", 5)) {
			o->has_model = true;
			o->model_string = value < sc->end && *value == '"';
			if (o->model_string) {
				if (scan_string(sc, o->model, sizeof(o->model),
						&o->model_len, &o->model_cut) < 0)
					return -1;
			} else if (scan_value(sc, depth + 1) < 0) {
				return -1;
			}
		} else {
			if (scan_value(sc, depth + 1) < 0)
				return -1;
			if (top && !key_cut && key_len == 6 &&
			    !memcmp(key, "stream", 6))
				o->stream = sc->p - value == 4 &&
					    !memcmp(value, "true", 4);
		}
		rc = scan_next(sc, '}');
		if (rc <= 0)
			return rc;
	}
}

static int scan_array(struct scan *sc, int depth)
{
	int rc;

	if (scan_open(sc, ']'))
		return 0;
	do {
		if (scan_value(sc, depth + 1) < 0)
			return -1;
		rc = scan_next(sc, ']');
	} while (rc > 0);
	return rc;
}

/* The value at sc->p (no white space before it), at depth (top: 1). */
static int scan_value(struct scan *sc, int depth)
{
	int rc;

	if (depth > DEPTH_MAX)
		return fail(sc, sc->p, "maximum parsing depth reached");
	if (sc->p >= sc->end)
		return fail(sc, sc->p, "premature end of input");
	switch (*sc->p) {
	case '{': return scan_object(sc, depth);
	case '[': return scan_array(sc, depth);
	case '"': return scan_string(sc, NULL, 0, NULL, NULL);
	case 't': rc = scan_literal(sc, "true", 4); break;
	case 'f': rc = scan_literal(sc, "false", 5); break;
	case 'n': rc = scan_literal(sc, "null", 4); break;
	default: rc = scan_number(sc); break;
	}
	/* jansson's lexer reads one byte past a number or a literal and puts
	   it back; a NUL put back is taken for the end of its buffer and
	   skipped. Skipped here too, so the two refuse the same bodies. */
	if (rc == 0 && sc->p < sc->end && *sc->p == '\0')
		sc->p++;
	return rc;
}

int kn_gw_body_scan(const char *text, size_t len, struct kn_gw_body *out)
{
	struct scan sc = {.s = text, .p = text, .end = text + len, .out = out};

	/* Not the model buffer: 1 KiB cleared per call for nothing. */
	out->object = out->has_model = out->model_string = false;
	out->model[0] = '\0';
	out->model_len = 0;
	out->model_cut = out->stream = false;
	out->line = out->column = 0;
	out->error[0] = '\0';
	skip_space(&sc);
	if (sc.p >= sc.end || (*sc.p != '{' && *sc.p != '['))
		return fail(&sc, sc.p, "'[' or '{' expected");
	out->object = *sc.p == '{';
	if (scan_value(&sc, 1) < 0)
		return -1;
	skip_space(&sc);
	if (sc.p != sc.end)
		return fail(&sc, sc.p, "end of file expected");
	return 0;
}
