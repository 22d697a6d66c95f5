/*
 * spec: job specs read from YAML (or JSON) into struct kn_job_spec.
 *
 * libfyaml builds a document tree; we walk it with field tables (name,
 * type, where the value goes, bounds) so each section is data, not code,
 * and every error can point at the node: "job.yaml:7:9: resources.gpus:
 * must be ...; got "lots"". The alternative, an event-driven reader, loses
 * the tree we need for "missing field" positions and duplicate checks.
 *
 * Invariants: the input is refused before parsing if it is too big, holds a
 * NUL byte or is not UTF-8; aliases and tags are refused (no expansion
 * bombs, no surprises in typing); plain scalars are typed by the YAML 1.2
 * core schema, so `tasks: "4"` is a string and an error. The spec is built
 * on the heap as we go and freed on any error, so *out is written only on
 * success.
 */
#include "spec/spec.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>

#include <libfyaml.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Field paths are short; env names may be long and are cut in messages. */
#define PATH_MAX_LEN 256
/* A bad value is quoted back in the message up to this many bytes. */
#define GOT_MAX 48
/* Every section's field table fits in this. */
#define MAX_FIELDS 24
/* A "did you mean" only for near misses. */
#define SUGGEST_MAX_DISTANCE 2
/* Label keys (selector, tolerations) follow the Kubernetes length limit. */
#define LABEL_KEY_MAX 253
#define CHECKPOINT_MAX_KEEP 1000

#define DEFAULT_BACKOFF_MS (10 * 1000)
#define DEFAULT_BACKOFF_MAX_MS (10 * 60 * 1000)
#define DEFAULT_CKPT_EVERY_MS (10 * 60 * 1000)
#define DEFAULT_CKPT_KEEP 3
#define DEFAULT_CKPT_GRACE_MS (30 * 1000)

#define STRINGIFY(x) #x
#define NUMBER_TEXT(x) STRINGIFY(x)

static const char GPUS_ALLOWED[] =
	"must be an integer 0.." NUMBER_TEXT(KN_SPEC_MAX_GPUS)
	", a fraction between 0 and 1 (e.g. 0.5), or \"mig:<profile>\"";
static const char DURATION_ALLOWED[] =
	"a duration such as 90s, 5m or 1h30m";

/* Where the walk is: the file, the field path, the key being read. */
struct walk {
	const char *file;
	struct fy_diag *diag;
	struct kn_error *err;
	char path[PATH_MAX_LEN];
	size_t path_len;
	/* Key of the value being read: the place to point at for values
	 * that have no position of their own (an empty `workdir:`). */
	struct fy_node *key;
	const char *root_name; /* "deployment"; NULL = "job" */
};

enum value_kind { V_NULL, V_BOOL, V_INT, V_FLOAT, V_STRING, V_LIST, V_MAP };

/* A node seen through the YAML 1.2 core schema. */
struct value {
	enum value_kind kind;
	const char *text; /* scalars: NUL-terminated, owned by the document */
	size_t len;
	int count; /* lists and mappings: number of items */
};

/* --- text checks ------------------------------------------------------ */

/*
 * Append s to buf as it would appear in a message: escaped, cut after
 * GOT_MAX bytes on a character boundary, quoted when asked.
 */
static void quote_into(char *buf, size_t size, const char *s, size_t len,
		       bool quotes)
{
	size_t used = 0, i = 0;
	bool cut = false;

#define PUT(...)                                                          \
	do {                                                              \
		int put_n = snprintf(buf + used, size - used, __VA_ARGS__);  \
		if (put_n > 0)                                            \
			used += (size_t)put_n < size - used ?             \
					(size_t)put_n :                   \
					size - used - 1;                  \
	} while (0)

	if (size == 0)
		return;
	buf[0] = '\0';
	if (quotes)
		PUT("\"");
	while (i < len) {
		unsigned char c = (unsigned char)s[i];
		size_t n = kn_utf8_seq_len((const unsigned char *)s + i, len - i);

		if (i >= GOT_MAX) {
			cut = true;
			break;
		}
		if (c == '"' || c == '\\')
			PUT("\\%c", c);
		else if (c == '\n')
			PUT("\\n");
		else if (c == '\t')
			PUT("\\t");
		else if (c < 0x20 || c == 0x7f || n == 0)
			PUT("\\x%02x", c);
		else
			PUT("%.*s", (int)n, s + i);
		i += n ? n : 1;
	}
	if (cut)
		PUT("...");
	if (quotes)
		PUT("\"");
#undef PUT
}

/* --- positions and errors ---------------------------------------------- */

static bool scalar_position(struct fy_node *node, int *line, int *col)
{
	struct fy_token *tok;
	const struct fy_mark *mark;

	if (!node || !fy_node_is_scalar(node))
		return false;
	tok = fy_node_get_scalar_token(node);
	mark = tok ? fy_token_start_mark(tok) : NULL;
	if (!mark)
		return false;
	*line = mark->line + 1;
	*col = mark->column + 1;
	/* The token starts after an opening quote or '*'; point at those. */
	switch (fy_node_get_style(node)) {
	case FYNS_SINGLE_QUOTED:
	case FYNS_DOUBLE_QUOTED:
	case FYNS_ALIAS:
		if (*col > 1)
			(*col)--;
		break;
	default:
		break;
	}
	return true;
}

static void node_position(struct walk *w, struct fy_node *node, int *line,
			  int *col)
{
	if (scalar_position(node, line, col))
		return;
	if (node && !fy_node_is_scalar(node) &&
	    kn_yaml_node_position(w->diag, node, line, col))
		return;
	if (scalar_position(w->key, line, col))
		return;
	*line = 1;
	*col = 1;
}

/*
 * Fill w->err with "file:line:col: path: message" (or without "path: "
 * when with_path is false) and return -EINVAL. err->field is the path.
 */
static int vfail(struct walk *w, struct fy_node *node, bool with_path,
		 const char *fmt, va_list ap)
{
	char msg[640];
	int line, col;
	bool show_path = with_path && w->path_len > 0;

	vsnprintf(msg, sizeof(msg), fmt, ap);
	node_position(w, node, &line, &col);
	return kn_errorf(w->err, KN_EINVAL, w->path, "%s:%d:%d: %s%s%s",
			 w->file, line, col, show_path ? w->path : "",
			 show_path ? ": " : "", msg);
}

__attribute__((format(printf, 3, 4))) static int
fail(struct walk *w, struct fy_node *node, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = vfail(w, node, true, fmt, ap);
	va_end(ap);
	return rc;
}

__attribute__((format(printf, 3, 4))) static int
fail_bare(struct walk *w, struct fy_node *node, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = vfail(w, node, false, fmt, ap);
	va_end(ap);
	return rc;
}

/* Field paths: push returns the length to pop back to. */
static size_t path_push(struct walk *w, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static size_t path_push(struct walk *w, const char *fmt, ...)
{
	size_t old = w->path_len;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(w->path + old, sizeof(w->path) - old, fmt, ap);
	va_end(ap);
	if (n > 0)
		w->path_len = old + (size_t)n < sizeof(w->path) ?
				      old + (size_t)n :
				      sizeof(w->path) - 1;
	return old;
}

static size_t path_push_field(struct walk *w, const char *name)
{
	return path_push(w, "%s%s", w->path_len ? "." : "", name);
}

static size_t path_push_index(struct walk *w, int index)
{
	return path_push(w, "[%d]", index);
}

static void path_pop(struct walk *w, size_t old)
{
	w->path_len = old;
	w->path[old] = '\0';
}

/* The kind at the top, else the path: for "unknown field ... in X". */
static const char *section_name(const struct walk *w)
{
	return w->path_len ? w->path : w->root_name ? w->root_name : "job";
}

/* --- typing ------------------------------------------------------------ */

static bool all_digits(const char *s, const char *accept)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (!strchr(accept, *s))
			return false;
	return true;
}

static bool is_core_int(const char *s)
{
	if (strncmp(s, "0o", 2) == 0)
		return all_digits(s + 2, "01234567");
	if (strncmp(s, "0x", 2) == 0)
		return all_digits(s + 2, "0123456789abcdefABCDEF");
	if (*s == '-' || *s == '+')
		s++;
	return all_digits(s, "0123456789");
}

static bool is_core_float(const char *s)
{
	static const char *const specials[] = {
		".inf", ".Inf", ".INF", ".nan", ".NaN", ".NAN",
	};
	bool digits = false;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(specials); i++) {
		const char *t = s;
		if (i < 3 && (*t == '-' || *t == '+'))
			t++;
		if (strcmp(t, specials[i]) == 0)
			return true;
	}
	if (*s == '-' || *s == '+')
		s++;
	while (*s >= '0' && *s <= '9') {
		s++;
		digits = true;
	}
	if (*s == '.') {
		s++;
		while (*s >= '0' && *s <= '9') {
			s++;
			digits = true;
		}
	}
	if (!digits)
		return false;
	if (*s == 'e' || *s == 'E') {
		s++;
		if (*s == '-' || *s == '+')
			s++;
		if (!(*s >= '0' && *s <= '9'))
			return false;
		while (*s >= '0' && *s <= '9')
			s++;
	}
	return *s == '\0';
}

static enum value_kind plain_kind(const char *s)
{
	static const char *const nulls[] = {"", "~", "null", "Null", "NULL"};
	static const char *const bools[] = {"true",  "True",  "TRUE",
					    "false", "False", "FALSE"};
	size_t i;

	for (i = 0; i < ARRAY_SIZE(nulls); i++)
		if (strcmp(s, nulls[i]) == 0)
			return V_NULL;
	for (i = 0; i < ARRAY_SIZE(bools); i++)
		if (strcmp(s, bools[i]) == 0)
			return V_BOOL;
	if (is_core_int(s))
		return V_INT;
	if (is_core_float(s))
		return V_FLOAT;
	return V_STRING;
}

/*
 * Type a node. Refuses what a spec never needs and what could surprise:
 * aliases (also the expansion-bomb guard), tags, scalars holding NUL or
 * invalid UTF-8 after escapes are decoded.
 */
static int classify(struct walk *w, struct fy_node *node, struct value *v)
{
	bool is_nul = false;
	const char *text;
	size_t len = 0;

	memset(v, 0, sizeof(*v));
	v->text = "";
	if (!node) {
		v->kind = V_NULL;
		return 0;
	}
	if (fy_node_is_alias(node))
		return fail(w, node,
			    "aliases (*name) are not supported; write the "
			    "value out");
	if (fy_node_get_tag(node, NULL))
		return fail(w, node,
			    "YAML tags (!name) are not supported; quote "
			    "strings instead");
	if (fy_node_is_mapping(node)) {
		v->kind = V_MAP;
		v->count = fy_node_mapping_item_count(node);
		if (v->count < 0)
			v->count = 0;
		return 0;
	}
	if (fy_node_is_sequence(node)) {
		v->kind = V_LIST;
		v->count = fy_node_sequence_item_count(node);
		if (v->count < 0)
			v->count = 0;
		return 0;
	}
	if (!fy_node_get_scalar(node, &len)) {
		v->kind = V_NULL;
		return 0;
	}
	text = fy_node_get_scalar0(node);
	if (!text)
		return fail(w, node, "out of memory reading the value");
	if (kn_text_bad_byte(text, len, &is_nul) != len)
		return fail(w, node, "%s",
			    is_nul ? "value contains a NUL character" :
				     "value is not valid UTF-8");
	v->text = text;
	v->len = len;
	v->kind = fy_node_get_style(node) == FYNS_PLAIN ? plain_kind(text) :
							  V_STRING;
	return 0;
}

/* The "got ..." part of a message. */
static const char *describe(const struct value *v, char *buf, size_t size)
{
	switch (v->kind) {
	case V_NULL:
		return "null";
	case V_MAP:
		return v->count ? "a mapping" : "an empty mapping";
	case V_LIST:
		return v->count ? "a list" : "an empty list";
	case V_STRING:
		quote_into(buf, size, v->text, v->len, true);
		return buf;
	default:
		quote_into(buf, size, v->text, v->len, false);
		return buf;
	}
}

#define GOT_BUF (GOT_MAX * 4 + 16)

/* A value where text is wanted: strings, and numbers as written. */
static int want_text(struct walk *w, struct fy_node *node, bool allow_bool,
		     const char *allowed, struct value *v)
{
	char got[GOT_BUF];
	int rc = classify(w, node, v);

	if (rc)
		return rc;
	if (v->kind == V_STRING || v->kind == V_INT || v->kind == V_FLOAT ||
	    (allow_bool && v->kind == V_BOOL))
		return 0;
	return fail(w, node, "must be %s; got %s", allowed,
		    describe(v, got, sizeof(got)));
}

static int want_nonempty_text(struct walk *w, struct fy_node *node,
			      const char *allowed, struct value *v)
{
	int rc = want_text(w, node, false, allowed, v);

	if (rc)
		return rc;
	if (v->len == 0)
		return fail(w, node, "must be %s; got an empty string",
			    allowed);
	return 0;
}

/*
 * Decimal text ("2", "0.5", ".25") in thousandths, at most max_milli.
 * Trailing zeros past the third decimal are fine ("0.5000").
 */
enum milli_result { MILLI_OK, MILLI_SYNTAX, MILLI_TOO_FINE, MILLI_TOO_BIG };

static enum milli_result parse_milli(const char *s, int64_t max_milli,
				     int64_t *out)
{
	int64_t whole = 0, frac = 0;
	int frac_digits = 0;
	bool digits = false;

	for (; *s >= '0' && *s <= '9'; s++) {
		digits = true;
		whole = whole * 10 + (*s - '0');
		if (whole > max_milli / KN_MILLI)
			return MILLI_TOO_BIG;
	}
	if (*s == '.') {
		for (s++; *s >= '0' && *s <= '9'; s++) {
			digits = true;
			if (frac_digits < 3) {
				frac = frac * 10 + (*s - '0');
				frac_digits++;
			} else if (*s != '0') {
				return MILLI_TOO_FINE;
			}
		}
	}
	if (!digits || *s)
		return MILLI_SYNTAX;
	while (frac_digits++ < 3)
		frac *= 10;
	if (whole * KN_MILLI + frac > max_milli)
		return MILLI_TOO_BIG;
	*out = whole * KN_MILLI + frac;
	return MILLI_OK;
}

/* Decimal integer; false on syntax or overflow. */
static bool parse_int64(const char *s, int64_t *out)
{
	char *end;
	long long v;

	if (!*s || !(*s == '-' || (*s >= '0' && *s <= '9')))
		return false;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || *end)
		return false;
	*out = v;
	return true;
}

/* --- field tables -------------------------------------------------------- */

enum field_type {
	FT_INT,      /* int at offset, within min..max */
	FT_BOOL,     /* bool at offset */
	FT_DURATION, /* int64_t milliseconds at offset, at least min */
	FT_TEXT,     /* non-empty char * at offset */
	FT_CUSTOM,   /* read() fills the target */
};

struct field {
	const char *name;
	enum field_type type;
	size_t offset;
	int64_t min, max;
	/* FT_DURATION: a bare 0 is accepted and means "none". */
	bool zero_is_none;
	bool required;
	int (*read)(struct walk *w, struct fy_node *value, void *target);
};

static int read_int_field(struct walk *w, const struct field *f,
			  struct fy_node *node, void *target)
{
	char got[GOT_BUF];
	struct value v;
	int64_t n;
	int rc = classify(w, node, &v);

	if (rc)
		return rc;
	if (v.kind != V_INT || !parse_int64(v.text, &n) || n < f->min ||
	    n > f->max)
		return fail(w, node, "must be an integer %lld..%lld; got %s",
			    (long long)f->min, (long long)f->max,
			    describe(&v, got, sizeof(got)));
	*(int *)((char *)target + f->offset) = (int)n;
	return 0;
}

static int read_bool_field(struct walk *w, const struct field *f,
			   struct fy_node *node, void *target)
{
	char got[GOT_BUF];
	struct value v;
	int rc = classify(w, node, &v);

	if (rc)
		return rc;
	if (v.kind != V_BOOL)
		return fail(w, node, "must be true or false; got %s",
			    describe(&v, got, sizeof(got)));
	*(bool *)((char *)target + f->offset) =
		v.text[0] == 't' || v.text[0] == 'T';
	return 0;
}

static int read_duration_field(struct walk *w, const struct field *f,
			       struct fy_node *node, void *target)
{
	char got[GOT_BUF];
	struct value v;
	int64_t ms = 0;
	int rc = classify(w, node, &v);

	if (rc)
		return rc;
	if (f->zero_is_none && v.kind == V_INT && strcmp(v.text, "0") == 0)
		ms = 0;
	else if (v.kind != V_STRING || kn_parse_duration(v.text, &ms) < 0)
		return fail(w, node, "must be %s%s; got %s", DURATION_ALLOWED,
			    f->zero_is_none ? " (0 for none)" : "",
			    describe(&v, got, sizeof(got)));
	if (ms < f->min)
		return fail(w, node,
			    "must be a duration greater than 0 (e.g. 90s or "
			    "5m); got %s",
			    describe(&v, got, sizeof(got)));
	*(int64_t *)((char *)target + f->offset) = ms;
	return 0;
}

static int read_text_field(struct walk *w, const struct field *f,
			   struct fy_node *node, void *target)
{
	char **slot = (char **)((char *)target + f->offset);
	struct value v;
	int rc = want_nonempty_text(w, node, "a non-empty string", &v);

	if (rc)
		return rc;
	*slot = kn_xstrdup(v.text);
	return 0;
}

static int read_field(struct walk *w, const struct field *f,
		      struct fy_node *node, void *target)
{
	switch (f->type) {
	case FT_INT:
		return read_int_field(w, f, node, target);
	case FT_BOOL:
		return read_bool_field(w, f, node, target);
	case FT_DURATION:
		return read_duration_field(w, f, node, target);
	case FT_TEXT:
		return read_text_field(w, f, node, target);
	case FT_CUSTOM:
		break;
	}
	return f->read(w, node, target);
}

struct section {
	const char *path;
	const struct field *fields;
	size_t n_fields;
};

static const struct section *sections(size_t *n);

/* A known field name near key: in this table, else anywhere else. */
static bool suggest(const struct walk *w, const char *key,
		    const struct field *fields, size_t n_fields, char *buf,
		    size_t size)
{
	const struct section *all;
	int best = SUGGEST_MAX_DISTANCE + 1;
	size_t i, n_sections, key_len = strlen(key);

	/* Edit distance is quadratic; a name this long is no typo. */
	if (key_len > 64)
		return false;
	for (i = 0; i < n_fields; i++) {
		int d = kn_levenshtein(key, fields[i].name);
		if (d < best && (size_t)d < key_len) {
			best = d;
			snprintf(buf, size, "%s", fields[i].name);
		}
	}
	if (best <= SUGGEST_MAX_DISTANCE)
		return true;
	all = sections(&n_sections);
	for (i = 0; i < n_sections; i++) {
		size_t j;
		if (strcmp(all[i].path, w->path) == 0)
			continue;
		for (j = 0; j < all[i].n_fields; j++) {
			if (strcmp(all[i].fields[j].name, key) == 0) {
				snprintf(buf, size, "%s%s%s", all[i].path,
					 all[i].path[0] ? "." : "", key);
				return true;
			}
		}
	}
	return false;
}

/* Read a mapping key as a name. */
static int read_key(struct walk *w, struct fy_node *key, struct value *v)
{
	char got[GOT_BUF];
	int rc = classify(w, key, v);

	if (rc)
		return rc;
	if (v->kind == V_MAP || v->kind == V_LIST || v->kind == V_NULL)
		return fail(w, key, "keys must be names; got %s",
			    describe(v, got, sizeof(got)));
	return 0;
}

static int duplicate_key(struct walk *w, struct fy_node *key,
			 struct fy_node *first, const char *name)
{
	char quoted[GOT_BUF], where[PATH_MAX_LEN];
	int line, col;

	node_position(w, first, &line, &col);
	quote_into(quoted, sizeof(quoted), name, strlen(name), true);
	snprintf(where, sizeof(where), "%s", section_name(w));
	path_push_field(w, name);
	return fail_bare(w, key, "duplicate key %s in %s (first at %d:%d)",
			 quoted, where, line, col);
}

/* A table's field names, "a, b, c", for "must be a mapping with fields". */
static void field_list(const struct field *fields, size_t n, char *buf,
		       size_t size)
{
	size_t used = 0, i;

	buf[0] = '\0';
	for (i = 0; i < n && used < size; i++) {
		int k = snprintf(buf + used, size - used, "%s%s",
				 i ? ", " : "", fields[i].name);
		if (k < 0)
			break;
		used += (size_t)k;
	}
}

/*
 * Read a mapping through a field table into target. seen (n_fields
 * entries, may be NULL) receives each field's pair, NULL when absent.
 */
static int walk_mapping(struct walk *w, struct fy_node *node,
			const struct field *fields, size_t n_fields,
			void *target, struct fy_node_pair **seen)
{
	struct fy_node_pair *found[MAX_FIELDS] = {0};
	struct fy_node_pair *pair;
	char got[GOT_BUF], names[256];
	struct fy_node *saved_key = w->key;
	struct value v;
	void *iter = NULL;
	size_t i;
	int rc;

	rc = classify(w, node, &v);
	if (rc)
		return rc;
	if (v.kind != V_MAP) {
		field_list(fields, n_fields, names, sizeof(names));
		return fail(w, node, "must be a mapping with fields %s; got %s",
			    names, describe(&v, got, sizeof(got)));
	}
	while ((pair = fy_node_mapping_iterate(node, &iter))) {
		struct fy_node *key = fy_node_pair_key(pair);
		size_t mark;

		rc = read_key(w, key, &v);
		if (rc)
			return rc;
		for (i = 0; i < n_fields; i++)
			if (strcmp(fields[i].name, v.text) == 0)
				break;
		if (i == n_fields) {
			char quoted[GOT_BUF], hint[128], where[PATH_MAX_LEN];
			bool has_hint = suggest(w, v.text, fields, n_fields,
						hint, sizeof(hint));

			quote_into(quoted, sizeof(quoted), v.text, v.len,
				   true);
			snprintf(where, sizeof(where), "%s", section_name(w));
			path_push_field(w, v.text);
			return fail_bare(w, key, "unknown field %s in %s%s%s%s",
					 quoted, where,
					 has_hint ? "; did you mean \"" : "",
					 has_hint ? hint : "",
					 has_hint ? "\"?" : "");
		}
		if (found[i])
			return duplicate_key(w, key, fy_node_pair_key(found[i]),
					     fields[i].name);
		found[i] = pair;
		mark = path_push_field(w, fields[i].name);
		w->key = key;
		rc = read_field(w, &fields[i], fy_node_pair_value(pair),
				target);
		w->key = saved_key;
		if (rc)
			return rc;
		path_pop(w, mark);
	}
	for (i = 0; i < n_fields; i++) {
		char where[PATH_MAX_LEN];

		if (!fields[i].required || found[i])
			continue;
		snprintf(where, sizeof(where), "%s", section_name(w));
		path_push_field(w, fields[i].name);
		return fail_bare(w, node, "missing required field \"%s\" in %s",
				 fields[i].name, where);
	}
	if (seen)
		memcpy(seen, found, n_fields * sizeof(found[0]));
	return 0;
}

/* --- string maps: env and placement.selector ----------------------------- */

/* What is wrong with a map key, or NULL when it is fine. */
typedef const char *(*key_problem_fn)(const char *key);

static const char *const RESERVED_ENV[] = {
	"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "RANK",
	"LOCAL_RANK",           "WORLD_SIZE",             "MASTER_ADDR",
	"MASTER_PORT",
};

static const char *env_name_problem(const char *name)
{
	const char *p = name;
	size_t i;

	if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
	      *p == '_'))
		return "is not a valid variable name (letters, digits and _, "
		       "not starting with a digit)";
	for (p++; *p; p++)
		if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
		      (*p >= '0' && *p <= '9') || *p == '_'))
			return "is not a valid variable name (letters, digits "
			       "and _, not starting with a digit)";
	for (i = 0; i < ARRAY_SIZE(RESERVED_ENV); i++)
		if (strcmp(name, RESERVED_ENV[i]) == 0)
			break;
	if (i < ARRAY_SIZE(RESERVED_ENV) || strncmp(name, "KILN_", 5) == 0)
		return "is set by kiln for each task and cannot be set in a "
		       "spec (reserved: CUDA_VISIBLE_DEVICES, "
		       "NVIDIA_VISIBLE_DEVICES, RANK, LOCAL_RANK, WORLD_SIZE, "
		       "MASTER_ADDR, MASTER_PORT, KILN_*)";
	return NULL;
}

static bool is_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9');
}

static const char *label_key_problem(const char *key)
{
	size_t len = strlen(key), i;

	if (len == 0 || len > LABEL_KEY_MAX || !is_alnum(key[0]))
		goto bad;
	for (i = 1; i < len; i++)
		if (!is_alnum(key[i]) && !strchr("._-/", key[i]))
			goto bad;
	return NULL;
bad:
	return "is not a valid label name (letters, digits, '.', '_', '-' "
	       "and '/', starting with a letter or digit, at most 253 "
	       "characters)";
}

struct key_ref {
	const char *key;
	struct fy_node *node;
	size_t index;
};

static int key_ref_cmp(const void *a, const void *b)
{
	const struct key_ref *x = a, *y = b;
	int c = strcmp(x->key, y->key);

	if (c)
		return c;
	return x->index < y->index ? -1 : x->index > y->index;
}

/*
 * The first key (in document order) that repeats an earlier one, by
 * sorting: maps may hold thousands of entries.
 */
static int check_duplicates(struct walk *w, const struct kn_kv *kvs,
			    struct fy_node **nodes, size_t n)
{
	struct key_ref *refs;
	size_t i, run = 0, dup = SIZE_MAX, first = 0;
	int rc = 0;

	if (n < 2)
		return 0;
	refs = kn_xcalloc(n, sizeof(*refs));
	for (i = 0; i < n; i++)
		refs[i] = (struct key_ref){kvs[i].key, nodes[i], i};
	qsort(refs, n, sizeof(*refs), key_ref_cmp);
	for (i = 1; i < n; i++) {
		if (strcmp(refs[i].key, refs[i - 1].key) != 0) {
			run = i;
			continue;
		}
		if (dup == SIZE_MAX || refs[i].index < refs[dup].index) {
			dup = i;
			first = run;
		}
	}
	if (dup != SIZE_MAX)
		rc = duplicate_key(w, refs[dup].node, refs[first].node,
				   refs[dup].key);
	free(refs);
	return rc;
}

/* A mapping of names to text (numbers and booleans become their text). */
static int read_string_map(struct walk *w, struct fy_node *node,
			   const char *what, key_problem_fn key_problem,
			   struct kn_kv **out, size_t *n_out)
{
	struct fy_node *saved_key = w->key;
	struct fy_node **key_nodes = NULL;
	struct fy_node_pair *pair;
	char got[GOT_BUF];
	struct kn_kv *kvs;
	struct value v;
	void *iter = NULL;
	size_t n = 0, count;
	int rc;

	rc = classify(w, node, &v);
	if (rc)
		return rc;
	if (v.kind != V_MAP)
		return fail(w, node, "must be a mapping of %s; got %s", what,
			    describe(&v, got, sizeof(got)));
	count = (size_t)v.count;
	/* Owned by the spec from here, so an error frees what was read. */
	kvs = kn_xcalloc(count + 1, sizeof(*kvs));
	*out = kvs;
	*n_out = 0;
	key_nodes = kn_xcalloc(count + 1, sizeof(*key_nodes));
	while (n < count && (pair = fy_node_mapping_iterate(node, &iter))) {
		struct fy_node *key = fy_node_pair_key(pair);
		const char *problem;
		size_t mark;

		rc = read_key(w, key, &v);
		if (rc)
			goto out;
		problem = key_problem(v.text);
		if (problem) {
			char quoted[GOT_BUF];

			quote_into(quoted, sizeof(quoted), v.text, v.len, true);
			rc = fail(w, key, "%s %s", quoted, problem);
			goto out;
		}
		mark = path_push_field(w, v.text);
		kvs[n].key = kn_xstrdup(v.text);
		key_nodes[n] = key;
		w->key = key;
		rc = want_text(w, fy_node_pair_value(pair), true,
			       "a string, number or boolean", &v);
		w->key = saved_key;
		if (rc) {
			free(kvs[n].key);
			kvs[n].key = NULL;
			goto out;
		}
		kvs[n].value = kn_xstrdup(v.text);
		*n_out = ++n;
		path_pop(w, mark);
	}
	rc = check_duplicates(w, kvs, key_nodes, n);
out:
	w->key = saved_key;
	free(key_nodes);
	return rc;
}

/* --- job fields ---------------------------------------------------------- */

/* node is the text kind ("Job", "Deployment"). */
static int check_kind(struct walk *w, struct fy_node *node, const char *kind)
{
	char got[GOT_BUF], quoted[32];
	struct value v;
	int rc;

	snprintf(quoted, sizeof(quoted), "\"%s\"", kind);
	rc = want_text(w, node, false, quoted, &v);
	if (rc)
		return rc;
	if (strcmp(v.text, kind) != 0)
		return fail(w, node, "must be %s; got %s", quoted,
			    describe(&v, got, sizeof(got)));
	return 0;
}

static int read_kind(struct walk *w, struct fy_node *node, void *target)
{
	(void)target;
	return check_kind(w, node, "Job");
}

/*
 * kind before every other field: in a spec of another kind, each of its
 * fields would otherwise be reported as unknown. root_name names the
 * mapping in the message for a missing kind ("job").
 */
static int check_kind_first(struct walk *w, struct fy_node *root,
			    const char *kind, const char *root_name)
{
	struct fy_node_pair *pair;
	void *iter = NULL;
	int rc;

	while ((pair = fy_node_mapping_iterate(root, &iter))) {
		struct fy_node *key = fy_node_pair_key(pair);
		const char *text = fy_node_is_scalar(key) ?
					   fy_node_get_scalar0(key) :
					   NULL;

		if (text && strcmp(text, "kind") == 0) {
			size_t mark = path_push_field(w, "kind");

			w->key = key;
			rc = check_kind(w, fy_node_pair_value(pair), kind);
			w->key = NULL;
			if (rc)
				return rc;
			path_pop(w, mark);
			return 0;
		}
	}
	path_push_field(w, "kind");
	return fail_bare(w, root,
			 "missing required field \"kind\" in %s (kind: %s)",
			 root_name, kind);
}

static int read_api_version(struct walk *w, struct fy_node *node,
			    void *target)
{
	char got[GOT_BUF];
	struct value v;
	int rc = want_text(w, node, false, "\"kiln/v1\"", &v);

	if (rc)
		return rc;
	if (strcmp(v.text, "kiln/v1") != 0)
		return fail(w, node, "must be \"kiln/v1\"; got %s",
			    describe(&v, got, sizeof(got)));
	return 0;
}

static bool valid_name(const char *s)
{
	size_t len = strlen(s), i;

	if (len == 0 || len > 63)
		return false;
	for (i = 0; i < len; i++) {
		char c = s[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
			  (i > 0 && (c == '.' || c == '_' || c == '-'));
		if (!ok)
			return false;
	}
	return true;
}

static int read_name(struct walk *w, struct fy_node *node, void *target)
{
	static const char allowed[] =
		"1 to 63 characters: lowercase letters, digits, '.', '_' and "
		"'-', starting with a letter or digit";
	struct kn_job_spec *spec = target;
	char got[GOT_BUF];
	struct value v;
	int rc = want_text(w, node, false, allowed, &v);

	if (rc)
		return rc;
	if (!valid_name(v.text))
		return fail(w, node, "must be %s; got %s", allowed,
			    describe(&v, got, sizeof(got)));
	spec->name = kn_xstrdup(v.text);
	return 0;
}

/*
 * A non-empty list of text into a NULL-terminated array. Items must not be
 * empty, except after the first when rest_may_be_empty (argv).
 */
static int read_text_list(struct walk *w, struct fy_node *node,
			  const char *allowed, bool rest_may_be_empty,
			  char ***out, size_t *n_out)
{
	struct fy_node *item;
	char got[GOT_BUF];
	struct value v;
	void *iter = NULL;
	char **list;
	size_t n = 0, count;
	int rc = classify(w, node, &v);

	if (rc)
		return rc;
	if (v.kind != V_LIST || v.count <= 0)
		return fail(w, node, "must be %s; got %s", allowed,
			    describe(&v, got, sizeof(got)));
	count = (size_t)v.count;
	list = kn_xcalloc(count + 1, sizeof(*list));
	*out = list;
	*n_out = 0;
	while (n < count && (item = fy_node_sequence_iterate(node, &iter))) {
		size_t mark = path_push_index(w, (int)n);

		if (n > 0 && rest_may_be_empty)
			rc = want_text(w, item, false, "a string", &v);
		else
			rc = want_nonempty_text(w, item, "a non-empty string",
						&v);
		if (rc)
			return rc;
		list[n] = kn_xstrdup(v.text);
		*n_out = ++n;
		path_pop(w, mark);
	}
	return 0;
}

static int read_command(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_job_spec *spec = target;

	return read_text_list(w, node,
			      "a non-empty list of strings (the program and "
			      "its arguments), e.g. [\"python\", \"train.py\"]",
			      true, &spec->command, &spec->n_command);
}

static int read_env(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_job_spec *spec = target;

	return read_string_map(w, node, "variable names to values",
			       env_name_problem, &spec->env, &spec->n_env);
}

/* --- resources ----------------------------------------------------------- */

/* "1g.10gb", "3g.40gb", "1g.10gb+me": checked by shape only. */
static bool valid_mig_profile(const char *p)
{
	size_t n;

	n = strspn(p, "0123456789");
	if (n < 1 || n > 2 || p[0] == '0' || p[n] != 'g' || p[n + 1] != '.')
		return false;
	p += n + 2;
	n = strspn(p, "0123456789");
	if (n < 1 || n > 4 || p[0] == '0' || strncmp(p + n, "gb", 2) != 0)
		return false;
	p += n + 2;
	if (*p == '\0')
		return true;
	if (*p != '+' || !(p[1] >= 'a' && p[1] <= 'z'))
		return false;
	for (p += 2; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
		      *p == '.'))
			return false;
	return true;
}

static int read_gpus(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_resources *res = target;
	char got[GOT_BUF];
	struct value v;
	int64_t milli = 0;
	int rc = classify(w, node, &v);

	if (rc)
		return rc;
	if (v.kind == V_STRING && strncmp(v.text, "mig:", 4) == 0) {
		if (!valid_mig_profile(v.text + 4))
			return fail(w, node,
				    "MIG profile must look like \"mig:1g.10gb\" "
				    "(<n>g.<m>gb, optionally with a suffix "
				    "such as \"+me\"); got %s",
				    describe(&v, got, sizeof(got)));
		res->mig_profile = kn_xstrdup(v.text + 4);
		res->gpu_milli = 0;
		return 0;
	}
	if (v.kind == V_INT || v.kind == V_FLOAT) {
		switch (parse_milli(v.text, KN_SPEC_MAX_GPUS * KN_MILLI,
				    &milli)) {
		case MILLI_OK:
			if (milli < KN_MILLI || milli % KN_MILLI == 0) {
				res->gpu_milli = (int)milli;
				return 0;
			}
			break;
		case MILLI_TOO_FINE:
			return fail(w, node,
				    "a share of a GPU is counted in "
				    "thousandths (0.001 steps); got %s",
				    describe(&v, got, sizeof(got)));
		case MILLI_SYNTAX:
		case MILLI_TOO_BIG:
			break;
		}
	}
	return fail(w, node, "%s; got %s", GPUS_ALLOWED,
		    describe(&v, got, sizeof(got)));
}

static int read_gpu_model(struct walk *w, struct fy_node *node, void *target)
{
	static const char allowed[] =
		"a GPU model name or a non-empty list of names, e.g. "
		"[\"H100\", \"A100\"]";
	struct kn_resources *res = target;
	char got[GOT_BUF];
	struct value v;
	int rc = classify(w, node, &v);

	if (rc)
		return rc;
	if (v.kind == V_LIST)
		return read_text_list(w, node, allowed, false,
				      &res->gpu_models, &res->n_gpu_models);
	if ((v.kind != V_STRING && v.kind != V_INT && v.kind != V_FLOAT) ||
	    v.len == 0)
		return fail(w, node, "must be %s; got %s", allowed,
			    describe(&v, got, sizeof(got)));
	res->gpu_models = kn_xcalloc(2, sizeof(char *));
	res->gpu_models[0] = kn_xstrdup(v.text);
	res->n_gpu_models = 1;
	return 0;
}

static int read_cpus(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_resources *res = target;
	char got[GOT_BUF];
	struct value v;
	int64_t milli = 0;
	int rc = classify(w, node, &v);

	if (rc)
		return rc;
	if (v.kind == V_INT || v.kind == V_FLOAT) {
		switch (parse_milli(v.text, KN_SPEC_MAX_CPUS * KN_MILLI,
				    &milli)) {
		case MILLI_OK:
			if (milli > 0) {
				res->cpu_milli = (int)milli;
				return 0;
			}
			break;
		case MILLI_TOO_FINE:
			return fail(w, node,
				    "CPUs are counted in thousandths (0.001 "
				    "steps); got %s",
				    describe(&v, got, sizeof(got)));
		case MILLI_SYNTAX:
		case MILLI_TOO_BIG:
			break;
		}
	}
	return fail(w, node,
		    "must be a number of CPUs greater than 0 and at most %d "
		    "(e.g. 0.5 or 4); got %s",
		    KN_SPEC_MAX_CPUS, describe(&v, got, sizeof(got)));
}

static int read_memory(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_resources *res = target;
	char got[GOT_BUF];
	struct value v;
	int64_t bytes = 0;
	int rc = classify(w, node, &v);

	if (rc)
		return rc;
	if ((v.kind != V_STRING && v.kind != V_INT) ||
	    kn_parse_size(v.text, &bytes) < 0 || bytes <= 0)
		return fail(w, node,
			    "must be a size greater than 0 such as 512Mi, 2Gi "
			    "or 1G; got %s",
			    describe(&v, got, sizeof(got)));
	res->memory_bytes = bytes;
	return 0;
}

static int read_choice(struct walk *w, struct fy_node *node,
		       const char *const *choices, const char *allowed,
		       const char **out);

static int read_sharing(struct walk *w, struct fy_node *node, void *target)
{
	static const char *const modes[] = {"time-slicing", "mps", NULL};
	struct kn_resources *res = target;
	const char *mode;
	int rc = read_choice(w, node, modes, "time-slicing or mps", &mode);

	if (rc)
		return rc;
	res->sharing = strcmp(mode, "mps") == 0 ? KN_SHARING_MPS
						: KN_SHARING_TIME_SLICING;
	return 0;
}

enum { RF_GPUS, RF_GPU_MODEL, RF_CPUS, RF_MEMORY, RF_SHARING, RF_PIDS,
       RF_COUNT };

static const struct field resource_fields[RF_COUNT] = {
	[RF_GPUS] = {.name = "gpus", .type = FT_CUSTOM, .read = read_gpus},
	[RF_GPU_MODEL] = {.name = "gpu_model", .type = FT_CUSTOM,
			  .read = read_gpu_model},
	[RF_CPUS] = {.name = "cpus", .type = FT_CUSTOM, .read = read_cpus},
	[RF_MEMORY] = {.name = "memory", .type = FT_CUSTOM,
		       .read = read_memory},
	[RF_SHARING] = {.name = "sharing", .type = FT_CUSTOM,
			.read = read_sharing},
	/* Fewer than 16 and an ordinary shell pipeline cannot start. */
	[RF_PIDS] = {.name = "pids", .type = FT_INT,
		     .offset = offsetof(struct kn_resources, pids), .min = 16,
		     .max = KN_SPEC_MAX_PIDS},
};

_Static_assert(RF_COUNT <= MAX_FIELDS, "MAX_FIELDS");

static int read_resources(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_job_spec *spec = target;
	struct fy_node_pair *seen[RF_COUNT], *pair;
	int gpu_milli;
	int rc = walk_mapping(w, node, resource_fields, RF_COUNT,
			      &spec->resources, seen);

	if (rc || !seen[RF_SHARING])
		return rc;
	/* Sharing is how a share of a GPU is enforced; nothing else has one. */
	gpu_milli = spec->resources.gpu_milli;
	if (!spec->resources.mig_profile && gpu_milli > 0 &&
	    gpu_milli < KN_MILLI)
		return 0;
	pair = seen[RF_SHARING];
	path_push_field(w, "sharing");
	w->key = fy_node_pair_key(pair);
	rc = fail(w, fy_node_pair_value(pair),
		  "applies only to a fraction of a GPU (resources.gpus "
		  "between 0 and 1, e.g. 0.5); resources.gpus is %s",
		  spec->resources.mig_profile ? "a MIG profile"
		  : gpu_milli == 0	      ? "not set"
					      : "a whole number");
	w->key = NULL;
	return rc;
}

/* --- checkpoint ---------------------------------------------------------- */

static int read_store(struct walk *w, struct fy_node *node, void *target)
{
	static const char *const schemes[] = {"file://", "https://",
					      "http://"};
	struct kn_checkpoint_policy *ckpt = target;
	char got[GOT_BUF];
	struct value v;
	size_t i;
	int rc = want_text(w, node, false, "a URL", &v);

	if (rc)
		return rc;
	for (i = 0; i < ARRAY_SIZE(schemes); i++) {
		size_t n = strlen(schemes[i]);
		if (strncmp(v.text, schemes[i], n) == 0 && v.text[n]) {
			ckpt->store = kn_xstrdup(v.text);
			return 0;
		}
	}
	return fail(w, node,
		    "must be a URL starting with file://, https:// or "
		    "http://; got %s",
		    describe(&v, got, sizeof(got)));
}

static int read_signal(struct walk *w, struct fy_node *node, void *target)
{
	static const char allowed[] =
		"a signal name such as SIGTERM, SIGUSR1 or INT";
	struct kn_checkpoint_policy *ckpt = target;
	char got[GOT_BUF];
	struct value v;
	int sig;
	int rc = want_text(w, node, false, allowed, &v);

	if (rc)
		return rc;
	sig = kn_signal_from_name(v.text);
	if (sig < 0)
		return fail(w, node, "must be %s; got %s", allowed,
			    describe(&v, got, sizeof(got)));
	/* The task must be able to catch it to write a last checkpoint. */
	if (sig == SIGKILL || sig == SIGSTOP)
		return fail(w, node,
			    "must be a signal the task can catch (not SIGKILL "
			    "or SIGSTOP); got %s",
			    describe(&v, got, sizeof(got)));
	ckpt->signal = sig;
	return 0;
}

static const struct field checkpoint_fields[] = {
	{.name = "every", .type = FT_DURATION,
	 .offset = offsetof(struct kn_checkpoint_policy, every_ms), .min = 1},
	{.name = "keep", .type = FT_INT,
	 .offset = offsetof(struct kn_checkpoint_policy, keep), .min = 1,
	 .max = CHECKPOINT_MAX_KEEP},
	{.name = "store", .type = FT_CUSTOM, .read = read_store},
	{.name = "grace", .type = FT_DURATION,
	 .offset = offsetof(struct kn_checkpoint_policy, grace_ms)},
	{.name = "signal", .type = FT_CUSTOM, .read = read_signal},
};

_Static_assert(ARRAY_SIZE(checkpoint_fields) <= MAX_FIELDS, "MAX_FIELDS");

static int read_checkpoint(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_job_spec *spec = target;

	spec->checkpoint.set = true;
	return walk_mapping(w, node, checkpoint_fields,
			    ARRAY_SIZE(checkpoint_fields), &spec->checkpoint,
			    NULL);
}

/* --- placement ----------------------------------------------------------- */

static int read_selector(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_placement_spec *placement = target;

	return read_string_map(w, node, "node label names to values",
			       label_key_problem, &placement->selector,
			       &placement->n_selector);
}

static int read_toleration_key(struct walk *w, struct fy_node *node,
			       void *target)
{
	struct kn_toleration *tol = target;
	const char *problem;
	struct value v;
	int rc = want_nonempty_text(w, node, "a taint name", &v);

	if (rc)
		return rc;
	problem = label_key_problem(v.text);
	if (problem) {
		char quoted[GOT_BUF];

		quote_into(quoted, sizeof(quoted), v.text, v.len, true);
		return fail(w, node, "%s %s", quoted, problem);
	}
	tol->key = kn_xstrdup(v.text);
	return 0;
}

/* Read text that must be one of choices (a NULL-terminated list). */
static int read_choice(struct walk *w, struct fy_node *node,
		       const char *const *choices, const char *allowed,
		       const char **out)
{
	char got[GOT_BUF];
	struct value v;
	int rc = classify(w, node, &v);

	if (rc)
		return rc;
	for (; v.kind == V_STRING && *choices; choices++)
		if (strcmp(v.text, *choices) == 0) {
			*out = *choices;
			return 0;
		}
	return fail(w, node, "must be %s; got %s", allowed,
		    describe(&v, got, sizeof(got)));
}

static int read_toleration_operator(struct walk *w, struct fy_node *node,
				    void *target)
{
	static const char *const operators[] = {"Equal", "Exists", NULL};
	struct kn_toleration *tol = target;
	const char *op;
	int rc = read_choice(w, node, operators, "Equal or Exists", &op);

	if (rc)
		return rc;
	tol->operator_ = kn_xstrdup(op);
	return 0;
}

static int read_toleration_value(struct walk *w, struct fy_node *node,
				 void *target)
{
	struct kn_toleration *tol = target;
	struct value v;
	int rc = want_text(w, node, true, "a string", &v);

	if (rc)
		return rc;
	tol->value = kn_xstrdup(v.text);
	return 0;
}

static int read_toleration_effect(struct walk *w, struct fy_node *node,
				  void *target)
{
	static const char *const effects[] = {"NoSchedule",
					      "PreferNoSchedule", NULL};
	struct kn_toleration *tol = target;
	const char *effect;
	int rc = read_choice(w, node, effects,
			     "NoSchedule or PreferNoSchedule (or absent for "
			     "any effect)",
			     &effect);

	if (rc)
		return rc;
	tol->effect = kn_xstrdup(effect);
	return 0;
}

enum { TF_KEY, TF_OPERATOR, TF_VALUE, TF_EFFECT, TF_COUNT };

static const struct field toleration_fields[TF_COUNT] = {
	[TF_KEY] = {.name = "key", .type = FT_CUSTOM,
		    .read = read_toleration_key, .required = true},
	[TF_OPERATOR] = {.name = "operator", .type = FT_CUSTOM,
			 .read = read_toleration_operator},
	[TF_VALUE] = {.name = "value", .type = FT_CUSTOM,
		      .read = read_toleration_value},
	[TF_EFFECT] = {.name = "effect", .type = FT_CUSTOM,
		       .read = read_toleration_effect},
};

_Static_assert(TF_COUNT <= MAX_FIELDS, "MAX_FIELDS");

static int read_tolerations(struct walk *w, struct fy_node *node,
			    void *target)
{
	struct kn_placement_spec *placement = target;
	struct fy_node *item;
	char got[GOT_BUF];
	struct value v;
	void *iter = NULL;
	size_t n = 0, count;
	int rc = classify(w, node, &v);

	if (rc)
		return rc;
	if (v.kind != V_LIST)
		return fail(w, node,
			    "must be a list of {key, operator, value, effect} "
			    "mappings; got %s",
			    describe(&v, got, sizeof(got)));
	count = (size_t)v.count;
	placement->tolerations =
		kn_xcalloc(count + 1, sizeof(struct kn_toleration));
	while (n < count && (item = fy_node_sequence_iterate(node, &iter))) {
		struct kn_toleration *tol = &placement->tolerations[n];
		struct fy_node_pair *seen[TF_COUNT];
		size_t mark = path_push_index(w, (int)n);

		placement->n_tolerations = ++n;
		rc = walk_mapping(w, item, toleration_fields, TF_COUNT, tol,
				  seen);
		if (rc)
			return rc;
		if (!tol->operator_)
			tol->operator_ = kn_xstrdup("Equal");
		if (strcmp(tol->operator_, "Exists") == 0 && tol->value) {
			struct fy_node *saved_key = w->key;

			path_push_field(w, "value");
			w->key = fy_node_pair_key(seen[TF_VALUE]);
			rc = fail(w, fy_node_pair_value(seen[TF_VALUE]),
				  "must be absent when operator is Exists");
			w->key = saved_key;
			return rc;
		}
		/* Equal without a value matches taints with an empty one. */
		if (!tol->value && strcmp(tol->operator_, "Equal") == 0)
			tol->value = kn_xstrdup("");
		path_pop(w, mark);
	}
	return 0;
}

static int read_spread(struct walk *w, struct fy_node *node, void *target)
{
	static const char *const spreads[] = {"zone", "fault_domain", NULL};
	struct kn_placement_spec *placement = target;
	const char *spread;
	int rc = read_choice(w, node, spreads, "zone or fault_domain", &spread);

	if (rc)
		return rc;
	placement->spread = strcmp(spread, "zone") == 0 ?
				    KN_SPREAD_ZONE :
				    KN_SPREAD_FAULT_DOMAIN;
	return 0;
}

/* --- placement.affinity --- */

static const char *const AFFINITY_OPS[] = {
	[KN_AFFINITY_IN] = "In",
	[KN_AFFINITY_NOT_IN] = "NotIn",
	[KN_AFFINITY_EXISTS] = "Exists",
	[KN_AFFINITY_DOES_NOT_EXIST] = "DoesNotExist",
	NULL,
};

static int read_term_key(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_affinity_term *term = target;
	const char *problem;
	struct value v;
	int rc = want_nonempty_text(w, node, "a node label name", &v);

	if (rc)
		return rc;
	problem = label_key_problem(v.text);
	if (problem) {
		char quoted[GOT_BUF];

		quote_into(quoted, sizeof(quoted), v.text, v.len, true);
		return fail(w, node, "%s %s", quoted, problem);
	}
	term->key = kn_xstrdup(v.text);
	return 0;
}

static int read_term_operator(struct walk *w, struct fy_node *node,
			      void *target)
{
	struct kn_affinity_term *term = target;
	const char *op;
	int rc = read_choice(w, node, AFFINITY_OPS,
			     "In, NotIn, Exists or DoesNotExist", &op);

	if (rc)
		return rc;
	for (int i = 0; AFFINITY_OPS[i]; i++)
		if (AFFINITY_OPS[i] == op)
			term->op = (enum kn_affinity_op)i;
	return 0;
}

static int read_term_values(struct walk *w, struct fy_node *node,
			    void *target)
{
	struct kn_affinity_term *term = target;

	return read_text_list(w, node,
			      "a non-empty list of label values, e.g. "
			      "[eastus-1, eastus-2]",
			      false, &term->values, &term->n_values);
}

enum { AF_KEY, AF_OPERATOR, AF_VALUES, AF_WEIGHT, AF_COUNT };

static const struct field preferred_fields[AF_COUNT] = {
	[AF_KEY] = {.name = "key", .type = FT_CUSTOM, .read = read_term_key,
		    .required = true},
	[AF_OPERATOR] = {.name = "operator", .type = FT_CUSTOM,
			 .read = read_term_operator, .required = true},
	[AF_VALUES] = {.name = "values", .type = FT_CUSTOM,
		       .read = read_term_values},
	[AF_WEIGHT] = {.name = "weight", .type = FT_INT,
		       .offset = offsetof(struct kn_affinity_term, weight),
		       .min = 1, .max = 100, .required = true},
};

/* A required term has no weight: the table stops before it. */
#define REQUIRED_TERM_FIELDS AF_WEIGHT

_Static_assert(AF_COUNT <= MAX_FIELDS, "MAX_FIELDS");

/* values go with In and NotIn, and only with them. */
static int check_term(struct walk *w, struct fy_node *item,
		      const struct kn_affinity_term *term,
		      struct fy_node_pair **seen)
{
	bool wants_values =
		term->op == KN_AFFINITY_IN || term->op == KN_AFFINITY_NOT_IN;
	int rc;

	if (wants_values && !seen[AF_VALUES]) {
		char where[PATH_MAX_LEN];

		snprintf(where, sizeof(where), "%s", section_name(w));
		path_push_field(w, "values");
		return fail_bare(w, item,
				 "missing required field \"values\" in %s "
				 "(operator %s compares the label with a "
				 "list of values)",
				 where, AFFINITY_OPS[term->op]);
	}
	if (wants_values || !seen[AF_VALUES])
		return 0;
	path_push_field(w, "values");
	w->key = fy_node_pair_key(seen[AF_VALUES]);
	rc = fail(w, fy_node_pair_value(seen[AF_VALUES]),
		  "must be absent when operator is %s (it looks at the label "
		  "name only)",
		  AFFINITY_OPS[term->op]);
	w->key = NULL;
	return rc;
}

static int read_terms(struct walk *w, struct fy_node *node, size_t n_fields,
		      struct kn_affinity_term **out, size_t *n_out)
{
	struct fy_node *item;
	char got[GOT_BUF];
	struct value v;
	void *iter = NULL;
	size_t n = 0, count;
	int rc = classify(w, node, &v);

	if (rc)
		return rc;
	if (v.kind != V_LIST)
		return fail(w, node,
			    "must be a list of {key, operator, values%s} "
			    "mappings; got %s",
			    n_fields == AF_COUNT ? ", weight" : "",
			    describe(&v, got, sizeof(got)));
	count = (size_t)v.count;
	*out = kn_xcalloc(count + 1, sizeof(struct kn_affinity_term));
	while (n < count && (item = fy_node_sequence_iterate(node, &iter))) {
		struct kn_affinity_term *term = &(*out)[n];
		struct fy_node_pair *seen[AF_COUNT] = {0};
		size_t mark = path_push_index(w, (int)n);

		*n_out = ++n;
		rc = walk_mapping(w, item, preferred_fields, n_fields, term,
				  seen);
		if (rc == 0)
			rc = check_term(w, item, term, seen);
		if (rc)
			return rc;
		path_pop(w, mark);
	}
	return 0;
}

static int read_required(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_placement_spec *placement = target;

	return read_terms(w, node, REQUIRED_TERM_FIELDS, &placement->required,
			  &placement->n_required);
}

static int read_preferred(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_placement_spec *placement = target;

	return read_terms(w, node, AF_COUNT, &placement->preferred,
			  &placement->n_preferred);
}

static const struct field affinity_fields[] = {
	{.name = "required", .type = FT_CUSTOM, .read = read_required},
	{.name = "preferred", .type = FT_CUSTOM, .read = read_preferred},
};

_Static_assert(ARRAY_SIZE(affinity_fields) <= MAX_FIELDS, "MAX_FIELDS");

static int read_affinity(struct walk *w, struct fy_node *node, void *target)
{
	return walk_mapping(w, node, affinity_fields,
			    ARRAY_SIZE(affinity_fields), target, NULL);
}

static const struct field placement_fields[] = {
	{.name = "selector", .type = FT_CUSTOM, .read = read_selector},
	{.name = "tolerations", .type = FT_CUSTOM, .read = read_tolerations},
	{.name = "spread", .type = FT_CUSTOM, .read = read_spread},
	{.name = "affinity", .type = FT_CUSTOM, .read = read_affinity},
};

_Static_assert(ARRAY_SIZE(placement_fields) <= MAX_FIELDS, "MAX_FIELDS");

static int read_placement(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_job_spec *spec = target;

	return walk_mapping(w, node, placement_fields,
			    ARRAY_SIZE(placement_fields), &spec->placement,
			    NULL);
}

/* --- inputs -------------------------------------------------------------- */

static void free_strv(char **v, size_t n);

static const char INPUTS_ALLOWED[] =
	"a non-empty list of file paths (relative to the spec's directory) "
	"or file://, http:// or https:// store URLs";

/*
 * The problem with one input, or NULL; *name_at is where its file name
 * (the last path segment) starts.
 */
static const char *input_problem(const char *t, const char **name_at)
{
	const char *scheme_end = strstr(t, "://"), *last;

	if (scheme_end) {
		size_t n = (size_t)(scheme_end - t);
		const char *rest = scheme_end + 3;

		if (n == 4 && !strncmp(t, "file", 4)) {
			if (rest[0] != '/')
				return "a file:// URL names an absolute path "
				       "(file:///DIR/NAME)";
		} else if ((n == 4 && !strncmp(t, "http", 4)) ||
			   (n == 5 && !strncmp(t, "https", 5))) {
			size_t host = strcspn(rest, "/");

			if (host == 0 || !rest[host])
				return "an http(s) URL names the store's host "
				       "and a blob (https://HOST/CONTAINER/"
				       "NAME)";
		} else {
			return "is neither a path nor a file://, http:// or "
			       "https:// URL";
		}
		/* Credentials come from the server's store configuration,
		   never from a URL that is shown and recorded. */
		if (strpbrk(rest, "?#"))
			return "a URL may not carry a query or fragment (the "
			       "store's credentials come from the server's "
			       "environment)";
	}
	last = strrchr(t, '/');
	*name_at = last ? last + 1 : t;
	if (!**name_at || !strcmp(*name_at, ".") || !strcmp(*name_at, ".."))
		return "must name a file (its last path segment is its name "
		       "in $KILN_INPUT_DIR)";
	return NULL;
}

static int read_inputs(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_job_spec *spec = target;
	struct fy_node *item;
	void *iter = NULL;
	char **texts = NULL;
	size_t n = 0;
	int rc = read_text_list(w, node, INPUTS_ALLOWED, false, &texts, &n);

	if (rc == 0 && n > KN_SPEC_MAX_INPUTS)
		rc = fail(w, node, "has %zu inputs; at most %d", n,
			  KN_SPEC_MAX_INPUTS);
	if (rc) {
		free_strv(texts, n);
		return rc;
	}
	spec->inputs = kn_xcalloc(n, sizeof(*spec->inputs));
	for (size_t i = 0; i < n && rc == 0; i++) {
		struct kn_job_input *in = &spec->inputs[i];
		const char *name = texts[i], *problem;
		size_t mark = path_push_index(w, (int)i);

		item = fy_node_sequence_iterate(node, &iter);
		spec->n_inputs = i + 1;
		in->text = texts[i];
		texts[i] = NULL;
		if (!scalar_position(item, &in->line, &in->column)) {
			in->line = 1;
			in->column = 1;
		}
		problem = input_problem(in->text, &name);
		if (problem) {
			rc = fail(w, item, "%s; got \"%s\"", problem, in->text);
			break;
		}
		in->name = kn_xstrdup(name);
		if (strstr(in->text, "://"))
			in->url = kn_xstrdup(in->text);
		for (size_t k = 0; k < i && rc == 0; k++)
			if (!strcmp(spec->inputs[k].name, in->name))
				rc = fail(w, item,
					  "lands in $KILN_INPUT_DIR as %s, as "
					  "inputs[%zu] does; inputs need "
					  "different file names",
					  in->name, k);
		if (rc == 0)
			path_pop(w, mark);
	}
	free_strv(texts, n);
	return rc;
}

int kn_job_spec_resolve_inputs(struct kn_job_spec *spec, const char *dir,
			       const char *filename, struct kn_error *err)
{
	for (size_t i = 0; i < spec->n_inputs; i++) {
		struct kn_job_input *in = &spec->inputs[i];

		if (in->url)
			continue;
		if (in->text[0] == '/')
			in->url = kn_asprintf("file://%s", in->text);
		else if (dir)
			in->url = kn_asprintf("file://%s%s%s", dir,
					      dir[strlen(dir) - 1] == '/' ? ""
									 : "/",
					      in->text);
		else
			return kn_errorf(err, KN_EINVAL, "inputs",
					 "%s:%d:%d: inputs[%zu]: \"%s\" is "
					 "relative, and the spec file's "
					 "directory is unknown (submit it "
					 "from a file, or give an absolute "
					 "path)",
					 filename ? filename : "<spec>",
					 in->line, in->column, i, in->text);
	}
	return 0;
}

char *kn_job_inputs_for_shim(json_t *inputs)
{
	json_t *in;
	size_t i;

	json_array_foreach(inputs, i, in) {
		const char *url = json_string_value(json_object_get(in, "url"));
		const char *slash = url ? strrchr(url, '/') : NULL;
		size_t n;

		if (!slash)
			continue;
		n = (size_t)(slash - url);
		/* "file:///x" is the blob x of the store "file:///". */
		if (n >= 3 && !strncmp(slash - 3, "://", 3))
			n++;
		json_object_set_new(in, "store", json_stringn(url, n));
		json_object_set_new(in, "blob", json_string(slash + 1));
	}
	return json_dumps(inputs, JSON_COMPACT);
}

int kn_job_spec_check_step_job(const struct kn_job_spec *job,
			       const char *filename, size_t step,
			       const char *workflow, struct kn_error *err)
{
	/* As an inline job's (refuse_step_job_inputs): one list per step. */
	if (!job->n_inputs)
		return 0;
	return kn_errorf(err, KN_EINVAL, "inputs",
			 "%s:%d:%d: inputs: a step's inputs go in the step's "
			 "inputs: list (steps[%zu] of %s), not in its job",
			 filename, job->inputs[0].line, job->inputs[0].column,
			 step, workflow);
}

/* --- the job ------------------------------------------------------------- */

enum {
	JF_KIND,
	JF_API_VERSION,
	JF_NAME,
	JF_COMMAND,
	JF_ENV,
	JF_WORKDIR,
	JF_RESOURCES,
	JF_TASKS,
	JF_RETRIES,
	JF_BACKOFF,
	JF_BACKOFF_MAX,
	JF_PRIORITY,
	JF_PREEMPTIBLE,
	JF_TIMEOUT,
	JF_CHECKPOINT,
	JF_PLACEMENT,
	JF_IMAGE,
	JF_INPUTS,
	JF_COUNT
};

static const struct field job_fields[JF_COUNT] = {
	[JF_KIND] = {.name = "kind", .type = FT_CUSTOM, .read = read_kind,
		     .required = true},
	[JF_API_VERSION] = {.name = "apiVersion", .type = FT_CUSTOM,
			    .read = read_api_version},
	[JF_NAME] = {.name = "name", .type = FT_CUSTOM, .read = read_name,
		     .required = true},
	[JF_COMMAND] = {.name = "command", .type = FT_CUSTOM,
			.read = read_command, .required = true},
	[JF_ENV] = {.name = "env", .type = FT_CUSTOM, .read = read_env},
	[JF_WORKDIR] = {.name = "workdir", .type = FT_TEXT,
			.offset = offsetof(struct kn_job_spec, workdir)},
	[JF_RESOURCES] = {.name = "resources", .type = FT_CUSTOM,
			  .read = read_resources},
	[JF_TASKS] = {.name = "tasks", .type = FT_INT,
		      .offset = offsetof(struct kn_job_spec, tasks), .min = 1,
		      .max = KN_SPEC_MAX_TASKS},
	[JF_RETRIES] = {.name = "retries", .type = FT_INT,
			.offset = offsetof(struct kn_job_spec, retries),
			.min = 0, .max = KN_SPEC_MAX_RETRIES},
	[JF_BACKOFF] = {.name = "backoff", .type = FT_DURATION,
			.offset = offsetof(struct kn_job_spec, backoff_ms)},
	[JF_BACKOFF_MAX] = {.name = "backoff_max", .type = FT_DURATION,
			    .offset = offsetof(struct kn_job_spec,
					       backoff_max_ms)},
	[JF_PRIORITY] = {.name = "priority", .type = FT_INT,
			 .offset = offsetof(struct kn_job_spec, priority),
			 .min = 0, .max = KN_SPEC_MAX_PRIORITY},
	[JF_PREEMPTIBLE] = {.name = "preemptible", .type = FT_BOOL,
			    .offset = offsetof(struct kn_job_spec,
					       preemptible)},
	[JF_TIMEOUT] = {.name = "timeout", .type = FT_DURATION,
			.offset = offsetof(struct kn_job_spec, timeout_ms),
			.zero_is_none = true},
	[JF_CHECKPOINT] = {.name = "checkpoint", .type = FT_CUSTOM,
			   .read = read_checkpoint},
	[JF_PLACEMENT] = {.name = "placement", .type = FT_CUSTOM,
			  .read = read_placement},
	[JF_IMAGE] = {.name = "image", .type = FT_TEXT,
		      .offset = offsetof(struct kn_job_spec, image)},
	[JF_INPUTS] = {.name = "inputs", .type = FT_CUSTOM,
		       .read = read_inputs},
};

_Static_assert(JF_COUNT <= MAX_FIELDS, "MAX_FIELDS");

static const struct section *sections(size_t *n)
{
	static const struct section all[] = {
		{"", job_fields, ARRAY_SIZE(job_fields)},
		{"resources", resource_fields, ARRAY_SIZE(resource_fields)},
		{"checkpoint", checkpoint_fields,
		 ARRAY_SIZE(checkpoint_fields)},
		{"placement", placement_fields, ARRAY_SIZE(placement_fields)},
		{"placement.affinity", affinity_fields,
		 ARRAY_SIZE(affinity_fields)},
	};

	*n = ARRAY_SIZE(all);
	return all;
}

static void set_defaults(struct kn_job_spec *spec)
{
	spec->tasks = 1;
	spec->backoff_ms = DEFAULT_BACKOFF_MS;
	spec->backoff_max_ms = DEFAULT_BACKOFF_MAX_MS;
	spec->checkpoint.every_ms = DEFAULT_CKPT_EVERY_MS;
	spec->checkpoint.keep = DEFAULT_CKPT_KEEP;
	spec->checkpoint.grace_ms = DEFAULT_CKPT_GRACE_MS;
	spec->checkpoint.signal = SIGTERM;
}

/* backoff doubles up to backoff_max, so the first must not exceed it. */
/* backoff at most backoff_max; the pairs are where they were given. */
static int check_backoff(struct walk *w, const struct kn_job_spec *spec,
			 struct fy_node_pair *backoff,
			 struct fy_node_pair *backoff_max)
{
	char first[32], cap[32];
	struct fy_node_pair *pair;
	int rc;

	if (spec->backoff_ms <= spec->backoff_max_ms)
		return 0;
	kn_format_duration(spec->backoff_ms, first, sizeof(first));
	kn_format_duration(spec->backoff_max_ms, cap, sizeof(cap));
	if (backoff_max) {
		pair = backoff_max;
		path_push_field(w, "backoff_max");
		w->key = fy_node_pair_key(pair);
		rc = fail(w, fy_node_pair_value(pair),
			  "must be at least backoff (%s); got %s", first, cap);
	} else {
		pair = backoff;
		path_push_field(w, "backoff");
		w->key = fy_node_pair_key(pair);
		rc = fail(w, fy_node_pair_value(pair),
			  "must be at most backoff_max (%s); got %s", cap,
			  first);
	}
	return rc;
}

static int read_job(struct walk *w, struct fy_node *root,
		    struct kn_job_spec *spec)
{
	struct fy_node_pair *seen[JF_COUNT];
	char got[GOT_BUF], names[256];
	struct value v;
	int rc = classify(w, root, &v);

	if (rc)
		return rc;
	if (v.kind != V_MAP) {
		field_list(job_fields, JF_COUNT, names, sizeof(names));
		return fail(w, root,
			    "a job spec must be a mapping with fields %s; "
			    "got %s",
			    names, describe(&v, got, sizeof(got)));
	}
	rc = check_kind_first(w, root, "Job", "job");
	if (rc)
		return rc;
	rc = walk_mapping(w, root, job_fields, JF_COUNT, spec, seen);
	if (rc)
		return rc;
	return check_backoff(w, spec, seen[JF_BACKOFF], seen[JF_BACKOFF_MAX]);
}

static int parse_failed(struct walk *w)
{
	struct fy_diag_error *e;
	void *iter = NULL;

	while ((e = fy_diag_errors_iterate(w->diag, &iter)))
		if (e->type >= FYET_ERROR && e->line > 0 && e->column > 0)
			return kn_errorf(w->err, KN_EINVAL, NULL,
					 "%s:%d:%d: invalid YAML: %s", w->file,
					 e->line, e->column,
					 e->msg ? e->msg : "syntax error");
	return kn_errorf(w->err, KN_EINVAL, NULL, "%s: invalid YAML",
			 w->file);
}

static int check_text(struct walk *w, const char *text, size_t len)
{
	return kn_yaml_text_check(text, len, w->file, "spec", w->err);
}

/* Reads the document's root into the object being built. */
typedef int (*read_root_fn)(struct walk *w, struct fy_node *root, void *obj);

/*
 * Check the text, load its one YAML document and hand the root to read.
 * Errors (too big, not UTF-8, bad YAML, two documents, empty) carry
 * file:line:column; what is wrong inside the mapping is read's to say.
 * empty_hint completes "spec is empty; expected ...".
 */
static int parse_document(const char *text, size_t len, const char *filename,
			  const char *empty_hint, read_root_fn read, void *obj,
			  struct kn_error *err)
{
	struct walk w = {.file = filename ? filename : "<spec>", .err = err};
	struct fy_parse_cfg parse_cfg = {0};
	struct fy_document *doc = NULL, *extra = NULL;
	struct fy_parser *parser = NULL;
	struct fy_diag_cfg diag_cfg;
	struct fy_node *root;
	int rc;

	if (len > KN_SPEC_MAX_BYTES)
		return kn_errorf(err, KN_ETOOBIG, NULL,
				 "%s: spec is %zu bytes; the limit is %d",
				 w.file, len, KN_SPEC_MAX_BYTES);
	if (!text && len)
		return kn_errorf(err, KN_EINVAL, NULL, "%s: no spec text",
				 w.file);
	if (!text)
		text = "";
	rc = check_text(&w, text, len);
	if (rc)
		return rc;

	/* Diagnostics are collected, never printed: libraries do not print. */
	fy_diag_cfg_default(&diag_cfg);
	diag_cfg.fp = NULL;
	diag_cfg.colorize = false;
	w.diag = fy_diag_create(&diag_cfg);
	if (!w.diag)
		return kn_errorf(err, KN_EIO, NULL,
				 "%s: cannot start the YAML parser", w.file);
	fy_diag_set_collect_errors(w.diag, true);
	/* Duplicate keys are found by the walk, which knows the field path. */
	parse_cfg.flags = FYPCF_QUIET | FYPCF_ALLOW_DUPLICATE_KEYS;
	parse_cfg.diag = w.diag;
	parser = fy_parser_create(&parse_cfg);
	if (!parser || fy_parser_set_string(parser, text, len) != 0) {
		rc = kn_errorf(err, KN_EIO, NULL,
			       "%s: cannot start the YAML parser", w.file);
		goto out;
	}
	doc = fy_parse_load_document(parser);
	if (!fy_diag_got_error(w.diag) && doc)
		extra = fy_parse_load_document(parser);
	if (fy_diag_got_error(w.diag)) {
		rc = parse_failed(&w);
		goto out;
	}
	if (extra) {
		const struct fy_mark *mark = fy_document_state_start_mark(
			fy_document_get_document_state(extra));

		rc = kn_errorf(err, KN_EINVAL, NULL,
			       "%s:%d:%d: a spec is one YAML document; a "
			       "second one starts here",
			       w.file, mark ? mark->line + 1 : 1,
			       mark ? mark->column + 1 : 1);
		goto out;
	}
	root = doc ? fy_document_root(doc) : NULL;
	if (!root) {
		rc = kn_errorf(err, KN_EINVAL, NULL,
			       "%s:1:1: spec is empty; expected %s", w.file,
			       empty_hint);
		goto out;
	}
	rc = read(&w, root, obj);
out:
	if (extra)
		fy_parse_document_destroy(parser, extra);
	if (doc)
		fy_parse_document_destroy(parser, doc);
	if (parser)
		fy_parser_destroy(parser);
	fy_diag_destroy(w.diag);
	return rc;
}

static int read_job_root(struct walk *w, struct fy_node *root, void *obj)
{
	return read_job(w, root, obj);
}

int kn_job_spec_parse(const char *text, size_t len, const char *filename,
		      struct kn_job_spec **out, struct kn_error *err)
{
	struct kn_job_spec *spec = kn_xcalloc(1, sizeof(*spec));
	int rc;

	set_defaults(spec);
	rc = parse_document(text, len, filename,
			    "a mapping with kind: Job, name and command",
			    read_job_root, spec, err);
	if (rc < 0) {
		kn_job_spec_free(spec);
		return rc;
	}
	*out = spec;
	return 0;
}

/* --- free, JSON, signals ------------------------------------------------- */

static void free_kvs(struct kn_kv *kvs, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		free(kvs[i].key);
		free(kvs[i].value);
	}
	free(kvs);
}

static void free_strv(char **v, size_t n)
{
	size_t i;

	for (i = 0; v && i < n; i++)
		free(v[i]);
	free(v);
}

static void free_terms(struct kn_affinity_term *terms, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(terms[i].key);
		free_strv(terms[i].values, terms[i].n_values);
	}
	free(terms);
}

void kn_job_spec_free(struct kn_job_spec *spec)
{
	size_t i;

	if (!spec)
		return;
	free(spec->name);
	free_strv(spec->command, spec->n_command);
	free_kvs(spec->env, spec->n_env);
	free(spec->workdir);
	free(spec->image);
	for (i = 0; i < spec->n_inputs; i++) {
		free(spec->inputs[i].text);
		free(spec->inputs[i].name);
		free(spec->inputs[i].url);
	}
	free(spec->inputs);
	free(spec->resources.mig_profile);
	free_strv(spec->resources.gpu_models, spec->resources.n_gpu_models);
	free(spec->checkpoint.store);
	free_kvs(spec->placement.selector, spec->placement.n_selector);
	for (i = 0; i < spec->placement.n_tolerations; i++) {
		struct kn_toleration *t = &spec->placement.tolerations[i];
		free(t->key);
		free(t->operator_);
		free(t->value);
		free(t->effect);
	}
	free(spec->placement.tolerations);
	free_terms(spec->placement.required, spec->placement.n_required);
	free_terms(spec->placement.preferred, spec->placement.n_preferred);
	free(spec);
}

static json_t *string_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

static json_t *strv_json(char *const *v, size_t n)
{
	json_t *arr = json_array();
	size_t i;

	for (i = 0; v && i < n; i++)
		json_array_append_new(arr, string_or_null(v[i]));
	return arr;
}

static json_t *kvs_json(const struct kn_kv *kvs, size_t n)
{
	json_t *obj = json_object();
	size_t i;

	for (i = 0; i < n; i++)
		if (kvs[i].key)
			json_object_set_new(obj, kvs[i].key,
					    string_or_null(kvs[i].value));
	return obj;
}

/* Whole numbers as integers, shares as reals: 2, 0.5. */
static json_t *milli_json(int milli)
{
	if (milli % KN_MILLI == 0)
		return json_integer(milli / KN_MILLI);
	return json_real((double)milli / KN_MILLI);
}

static json_t *gpus_json(const struct kn_resources *res)
{
	if (res->mig_profile) {
		char *s = kn_asprintf("mig:%s", res->mig_profile);
		json_t *j = json_string(s);
		free(s);
		return j;
	}
	return milli_json(res->gpu_milli);
}

static json_t *terms_json(const struct kn_affinity_term *terms, size_t n,
			  bool weighted)
{
	json_t *arr = json_array();

	for (size_t i = 0; i < n; i++) {
		json_t *t = json_pack("{s:o, s:s}", "key",
				      string_or_null(terms[i].key), "operator",
				      AFFINITY_OPS[terms[i].op]);

		if (terms[i].values)
			json_object_set_new(t, "values",
					    strv_json(terms[i].values,
						      terms[i].n_values));
		if (weighted)
			json_object_set_new(t, "weight",
					    json_integer(terms[i].weight));
		json_array_append_new(arr, t);
	}
	return arr;
}

/* Only a share is shared: null otherwise. */
static json_t *sharing_json(const struct kn_resources *res)
{
	if (res->mig_profile || res->gpu_milli <= 0 ||
	    res->gpu_milli >= KN_MILLI)
		return json_null();
	return json_string(res->sharing == KN_SHARING_MPS ? "mps"
							  : "time-slicing");
}

static const struct {
	const char *name;
	int number;
} SIGNALS[] = {
	{"HUP", SIGHUP},       {"INT", SIGINT},     {"QUIT", SIGQUIT},
	{"ILL", SIGILL},       {"TRAP", SIGTRAP},   {"ABRT", SIGABRT},
	{"BUS", SIGBUS},       {"FPE", SIGFPE},     {"KILL", SIGKILL},
	{"USR1", SIGUSR1},     {"SEGV", SIGSEGV},   {"USR2", SIGUSR2},
	{"PIPE", SIGPIPE},     {"ALRM", SIGALRM},   {"TERM", SIGTERM},
	{"CHLD", SIGCHLD},     {"CONT", SIGCONT},   {"STOP", SIGSTOP},
	{"TSTP", SIGTSTP},     {"TTIN", SIGTTIN},   {"TTOU", SIGTTOU},
	{"URG", SIGURG},       {"XCPU", SIGXCPU},   {"XFSZ", SIGXFSZ},
	{"VTALRM", SIGVTALRM}, {"PROF", SIGPROF},   {"WINCH", SIGWINCH},
	{"IO", SIGIO},         {"PWR", SIGPWR},     {"SYS", SIGSYS},
};

/* Highest signal number accepted as digits. */
#define SIGNAL_NUMBER_MAX 64

int kn_signal_from_name(const char *name)
{
	size_t i;

	if (!name || !*name)
		return -1;
	if (name[0] >= '0' && name[0] <= '9') {
		int n = 0;
		for (i = 0; name[i]; i++) {
			if (name[i] < '0' || name[i] > '9')
				return -1;
			n = n * 10 + (name[i] - '0');
			if (n > SIGNAL_NUMBER_MAX)
				return -1;
		}
		return n >= 1 ? n : -1;
	}
	if (strncasecmp(name, "SIG", 3) == 0)
		name += 3;
	for (i = 0; i < ARRAY_SIZE(SIGNALS); i++)
		if (strcasecmp(name, SIGNALS[i].name) == 0)
			return SIGNALS[i].number;
	return -1;
}

/* "SIGTERM", or the number as text for signals without a name here. */
static json_t *signal_json(int sig)
{
	char buf[16];
	size_t i;

	for (i = 0; i < ARRAY_SIZE(SIGNALS); i++)
		if (SIGNALS[i].number == sig) {
			snprintf(buf, sizeof(buf), "SIG%s", SIGNALS[i].name);
			return json_string(buf);
		}
	snprintf(buf, sizeof(buf), "%d", sig);
	return json_string(buf);
}

json_t *kn_job_spec_to_json(const struct kn_job_spec *spec)
{
	static const char *const spreads[] = {
		[KN_SPREAD_NONE] = NULL,
		[KN_SPREAD_ZONE] = "zone",
		[KN_SPREAD_FAULT_DOMAIN] = "fault_domain",
	};
	const struct kn_resources *res = &spec->resources;
	const struct kn_checkpoint_policy *ckpt = &spec->checkpoint;
	const struct kn_placement_spec *pl = &spec->placement;
	json_t *tolerations = json_array();
	json_t *checkpoint = json_null(), *doc;
	size_t i;

	for (i = 0; i < pl->n_tolerations; i++) {
		const struct kn_toleration *t = &pl->tolerations[i];
		json_array_append_new(
			tolerations,
			json_pack("{s:o, s:o, s:o, s:o}", "key",
				  string_or_null(t->key), "operator",
				  string_or_null(t->operator_), "value",
				  string_or_null(t->value), "effect",
				  string_or_null(t->effect)));
	}
	if (ckpt->set) {
		json_decref(checkpoint);
		checkpoint = json_pack(
			"{s:I, s:i, s:o, s:I, s:o}", "every_ms",
			(json_int_t)ckpt->every_ms, "keep", ckpt->keep, "store",
			string_or_null(ckpt->store), "grace_ms",
			(json_int_t)ckpt->grace_ms, "signal",
			signal_json(ckpt->signal));
	}
	doc = json_pack(
		"{s:s, s:o, s:o, s:o, s:o,"
		" s:{s:o, s:i, s:o, s:o, s:i, s:I, s:o},"
		" s:i, s:i, s:I, s:I, s:i, s:b, s:I, s:o,"
		" s:{s:o, s:o, s:o, s:{s:o, s:o}}}",
		"kind", "Job", "name", string_or_null(spec->name), "command",
		strv_json(spec->command, spec->n_command), "env",
		kvs_json(spec->env, spec->n_env), "workdir",
		string_or_null(spec->workdir), "resources", "gpus",
		gpus_json(res), "gpu_milli", res->gpu_milli, "gpu_model",
		strv_json(res->gpu_models, res->n_gpu_models), "cpus",
		milli_json(res->cpu_milli), "cpu_milli", res->cpu_milli,
		"memory_bytes", (json_int_t)res->memory_bytes, "sharing",
		sharing_json(res), "tasks",
		spec->tasks, "retries", spec->retries, "backoff_ms",
		(json_int_t)spec->backoff_ms, "backoff_max_ms",
		(json_int_t)spec->backoff_max_ms, "priority", spec->priority,
		"preemptible", spec->preemptible, "timeout_ms",
		(json_int_t)spec->timeout_ms, "checkpoint", checkpoint,
		"placement", "selector", kvs_json(pl->selector, pl->n_selector),
		"tolerations", tolerations, "spread",
		string_or_null(pl->spread <= KN_SPREAD_FAULT_DOMAIN ?
				       spreads[pl->spread] :
				       NULL),
		"affinity", "required",
		terms_json(pl->required, pl->n_required, false), "preferred",
		terms_json(pl->preferred, pl->n_preferred, true));
	if (spec->image)
		json_object_set_new(doc, "image", json_string(spec->image));
	if (res->pids)
		json_object_set_new(json_object_get(doc, "resources"), "pids",
				    json_integer(res->pids));
	if (spec->n_inputs) {
		json_t *inputs = json_array();

		for (i = 0; i < spec->n_inputs; i++)
			json_array_append_new(
				inputs,
				json_pack("{s:s, s:s, s:o}", "input",
					  spec->inputs[i].text, "name",
					  spec->inputs[i].name, "url",
					  string_or_null(spec->inputs[i].url)));
		json_object_set_new(doc, "inputs", inputs);
	}
	return doc;
}

/* --- the input form of a job spec ---------------------------------------- */

static json_t *duration_text(int64_t ms)
{
	char buf[32];

	snprintf(buf, sizeof(buf), "%lldms", (long long)ms);
	return json_string(buf);
}

static json_t *input_terms(const struct kn_affinity_term *terms, size_t n,
			   bool weighted)
{
	json_t *arr = json_array();

	for (size_t i = 0; i < n; i++) {
		json_t *t = json_pack("{s:s, s:s}", "key", terms[i].key,
				      "operator", AFFINITY_OPS[terms[i].op]);

		if (terms[i].values)
			json_object_set_new(t, "values",
					    strv_json(terms[i].values,
						      terms[i].n_values));
		if (weighted)
			json_object_set_new(t, "weight",
					    json_integer(terms[i].weight));
		json_array_append_new(arr, t);
	}
	return arr;
}

static json_t *input_resources(const struct kn_resources *res)
{
	json_t *o = json_object(), *sharing = sharing_json(res);

	if (res->mig_profile || res->gpu_milli)
		json_object_set_new(o, "gpus", gpus_json(res));
	if (res->n_gpu_models)
		json_object_set_new(o, "gpu_model",
				    strv_json(res->gpu_models,
					      res->n_gpu_models));
	if (res->cpu_milli)
		json_object_set_new(o, "cpus", milli_json(res->cpu_milli));
	if (res->memory_bytes)
		json_object_set_new(o, "memory",
				    json_integer(res->memory_bytes));
	if (res->pids)
		json_object_set_new(o, "pids", json_integer(res->pids));
	if (json_is_null(sharing))
		json_decref(sharing);
	else
		json_object_set_new(o, "sharing", sharing);
	return o;
}

static json_t *input_placement(const struct kn_placement_spec *pl)
{
	static const char *const spreads[] = {
		[KN_SPREAD_ZONE] = "zone",
		[KN_SPREAD_FAULT_DOMAIN] = "fault_domain",
	};
	json_t *o = json_object(), *tol = json_array();

	json_object_set_new(o, "selector",
			    kvs_json(pl->selector, pl->n_selector));
	for (size_t i = 0; i < pl->n_tolerations; i++) {
		const struct kn_toleration *t = &pl->tolerations[i];
		json_t *jt = json_pack("{s:s, s:s}", "key", t->key, "operator",
				       t->operator_);

		if (t->value && strcmp(t->operator_, "Exists") != 0)
			json_object_set_new(jt, "value", json_string(t->value));
		if (t->effect)
			json_object_set_new(jt, "effect",
					    json_string(t->effect));
		json_array_append_new(tol, jt);
	}
	json_object_set_new(o, "tolerations", tol);
	if (pl->spread == KN_SPREAD_ZONE || pl->spread == KN_SPREAD_FAULT_DOMAIN)
		json_object_set_new(o, "spread",
				    json_string(spreads[pl->spread]));
	if (pl->n_required || pl->n_preferred) {
		json_t *aff = json_object();
		if (pl->n_required)
			json_object_set_new(aff, "required",
					    input_terms(pl->required,
							pl->n_required, false));
		if (pl->n_preferred)
			json_object_set_new(aff, "preferred",
					    input_terms(pl->preferred,
							pl->n_preferred, true));
		json_object_set_new(o, "affinity", aff);
	}
	return o;
}

char *kn_job_spec_to_input_text(const struct kn_job_spec *spec,
				const char *name)
{
	json_t *o, *env = kvs_json(spec->env, spec->n_env);
	char *text;

	o = json_pack("{s:s, s:s, s:o, s:o, s:o, s:i, s:i, s:o, s:o, s:i, s:b,"
		      " s:o, s:o}",
		      "kind", "Job", "name", name ? name : spec->name,
		      "command", strv_json(spec->command, spec->n_command),
		      "env", env, "resources", input_resources(&spec->resources),
		      "tasks", spec->tasks, "retries", spec->retries,
		      "backoff", duration_text(spec->backoff_ms), "backoff_max",
		      duration_text(spec->backoff_max_ms), "priority",
		      spec->priority, "preemptible", spec->preemptible,
		      "timeout",
		      spec->timeout_ms ? duration_text(spec->timeout_ms)
				       : json_integer(0),
		      "placement", input_placement(&spec->placement));
	if (spec->workdir)
		json_object_set_new(o, "workdir", json_string(spec->workdir));
	if (spec->n_inputs) {
		json_t *inputs = json_array();

		for (size_t i = 0; i < spec->n_inputs; i++)
			json_array_append_new(inputs,
					      json_string(spec->inputs[i].text));
		json_object_set_new(o, "inputs", inputs);
	}
	if (spec->checkpoint.set) {
		const struct kn_checkpoint_policy *c = &spec->checkpoint;
		json_t *ck = json_pack("{s:o, s:i, s:o, s:o}", "every",
				       duration_text(c->every_ms), "keep",
				       c->keep, "grace",
				       duration_text(c->grace_ms), "signal",
				       signal_json(c->signal));
		if (c->store)
			json_object_set_new(ck, "store", json_string(c->store));
		json_object_set_new(o, "checkpoint", ck);
	}
	/* Shares are thousandths: ten digits print them exactly (0.1, not
	 * 0.10000000000000001, which the parser would refuse). */
	text = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS |
				     JSON_REAL_PRECISION(10));
	json_decref(o);
	return text;
}

/* --- deployments ---------------------------------------------------------- */

#define DEFAULT_DEPLOY_BACKOFF_MS 1000
#define DEFAULT_DEPLOY_BACKOFF_MAX_MS (60 * 1000)
#define DEFAULT_PROBE_PERIOD_MS 5000
#define DEFAULT_PROBE_FAILURES 3
/* Probes faster than this would be load, not health checks. */
#define PROBE_MIN_PERIOD_MS 50
#define PROBE_MAX_FAILURES 100
/* Seconds fields (period_s, initial_delay_s): up to a day. */
#define PROBE_MAX_SECONDS (24 * 3600)
#define LIMIT_MAX 1000000000

static int read_deployment_kind(struct walk *w, struct fy_node *node,
				void *target)
{
	(void)target;
	return check_kind(w, node, "Deployment");
}

static int read_model(struct walk *w, struct fy_node *node, void *target)
{
	static const char allowed[] =
		"a path to the model's files, job:<id> (a job's outputs), or "
		"NAME@VERSION or NAME@ALIAS (a registry version)";
	struct kn_deployment_spec *d = target;
	char got[GOT_BUF];
	struct value v;
	int64_t id;
	int rc = want_nonempty_text(w, node, allowed, &v);

	if (rc)
		return rc;
	if (strncmp(v.text, "job:", 4) == 0) {
		if (!all_digits(v.text + 4, "0123456789") ||
		    !parse_int64(v.text + 4, &id) || id <= 0)
			return fail(w, node,
				    "must be job:<id> with a job id such as "
				    "job:12; got %s",
				    describe(&v, got, sizeof(got)));
		d->model_job = id;
	}
	d->model = kn_xstrdup(v.text);
	return 0;
}

static int read_top_spread(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_deployment_spec *d = target;

	return read_spread(w, node, &d->job.placement);
}

/* Seconds as a number (0.5, 2) into milliseconds, at least min_ms. */
static int read_seconds(struct walk *w, struct fy_node *node, int64_t min_ms,
			int64_t *out)
{
	char got[GOT_BUF];
	struct value v;
	int64_t ms = 0;
	int rc = classify(w, node, &v);

	if (rc)
		return rc;
	if ((v.kind != V_INT && v.kind != V_FLOAT) ||
	    parse_milli(v.text, PROBE_MAX_SECONDS * 1000LL, &ms) != MILLI_OK ||
	    ms < min_ms)
		return fail(w, node,
			    "must be a number of seconds %g..%d (e.g. 0.5 or "
			    "10); got %s",
			    (double)min_ms / 1000, PROBE_MAX_SECONDS,
			    describe(&v, got, sizeof(got)));
	*out = ms;
	return 0;
}

static int read_probe_path(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_probe *p = target;
	char got[GOT_BUF];
	struct value v;
	int rc = want_nonempty_text(w, node, "an HTTP path such as /health",
				    &v);

	if (rc)
		return rc;
	if (v.text[0] != '/' || strpbrk(v.text, " \t\r\n"))
		return fail(w, node,
			    "must be an HTTP path starting with '/', without "
			    "spaces (e.g. /health); got %s",
			    describe(&v, got, sizeof(got)));
	free(p->path);
	p->path = kn_xstrdup(v.text);
	return 0;
}

static int read_probe_period(struct walk *w, struct fy_node *node,
			     void *target)
{
	struct kn_probe *p = target;

	return read_seconds(w, node, PROBE_MIN_PERIOD_MS, &p->period_ms);
}

static int read_probe_delay(struct walk *w, struct fy_node *node,
			    void *target)
{
	struct kn_probe *p = target;

	return read_seconds(w, node, 0, &p->initial_delay_ms);
}

static const struct field probe_fields[] = {
	{.name = "path", .type = FT_CUSTOM, .read = read_probe_path,
	 .required = true},
	{.name = "period_s", .type = FT_CUSTOM, .read = read_probe_period},
	{.name = "failure_threshold", .type = FT_INT,
	 .offset = offsetof(struct kn_probe, failure_threshold), .min = 1,
	 .max = PROBE_MAX_FAILURES},
	{.name = "initial_delay_s", .type = FT_CUSTOM,
	 .read = read_probe_delay},
};

static void probe_defaults(struct kn_probe *p)
{
	p->set = true;
	p->period_ms = DEFAULT_PROBE_PERIOD_MS;
	p->failure_threshold = DEFAULT_PROBE_FAILURES;
}

static int read_readiness(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_deployment_spec *d = target;

	probe_defaults(&d->readiness);
	return walk_mapping(w, node, probe_fields, ARRAY_SIZE(probe_fields),
			    &d->readiness, NULL);
}

static int read_liveness(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_deployment_spec *d = target;

	probe_defaults(&d->liveness);
	return walk_mapping(w, node, probe_fields, ARRAY_SIZE(probe_fields),
			    &d->liveness, NULL);
}

static int read_fallback(struct walk *w, struct fy_node *node, void *target)
{
	static const char allowed[] =
		"another deployment's name (1 to 63 characters: lowercase "
		"letters, digits, '.', '_' and '-')";
	struct kn_deployment_spec *d = target;
	char got[GOT_BUF];
	struct value v;
	int rc = want_text(w, node, false, allowed, &v);

	if (rc)
		return rc;
	if (!valid_name(v.text))
		return fail(w, node, "must be %s; got %s", allowed,
			    describe(&v, got, sizeof(got)));
	d->fallback = kn_xstrdup(v.text);
	return 0;
}

static const struct field limit_fields[] = {
	{.name = "rpm", .type = FT_INT,
	 .offset = offsetof(struct kn_deployment_spec, limit_rpm), .min = 0,
	 .max = LIMIT_MAX},
	{.name = "tpm", .type = FT_INT,
	 .offset = offsetof(struct kn_deployment_spec, limit_tpm), .min = 0,
	 .max = LIMIT_MAX},
};

static int read_limits(struct walk *w, struct fy_node *node, void *target)
{
	return walk_mapping(w, node, limit_fields, ARRAY_SIZE(limit_fields),
			    target, NULL);
}

/* Re-validation: every from 1s (a run needs a job slot) to 366 days. */
#define REVALIDATE_EVERY_MIN_MS 1000
#define REVALIDATE_EVERY_MAX_MS (366LL * 24 * 3600 * 1000)

/*
 * A job given by its file (relative to the owner's file, read by the
 * client) or inline, where kind and name may be left out. inputs_reader,
 * when set, replaces how an inline job's inputs: is read.
 */
static int read_job_or_file(struct walk *w, struct fy_node *node,
			    const char *owner,
			    int (*inputs_reader)(struct walk *, struct fy_node *,
					       void *),
			    char **job_file, struct kn_job_spec **job)
{
	struct field fields[JF_COUNT];
	struct fy_node_pair *seen[JF_COUNT];
	struct value v;
	int rc = classify(w, node, &v);

	if (rc)
		return rc;
	if (v.kind == V_STRING) {
		if (v.len == 0)
			return fail(w, node,
				    "must be a job spec's file or an inline "
				    "job; got an empty string");
		*job_file = kn_xstrdup(v.text);
		return 0;
	}
	if (v.kind != V_MAP)
		return fail(w, node,
			    "must be a job spec's file (relative to the "
			    "%s's) or an inline job mapping", owner);
	memcpy(fields, job_fields, sizeof(fields));
	fields[JF_KIND].required = false;
	fields[JF_NAME].required = false;
	if (inputs_reader)
		fields[JF_INPUTS].read = inputs_reader;
	*job = kn_xcalloc(1, sizeof(**job));
	set_defaults(*job);
	rc = walk_mapping(w, node, fields, JF_COUNT, *job, seen);
	if (rc)
		return rc;
	return check_backoff(w, *job, seen[JF_BACKOFF], seen[JF_BACKOFF_MAX]);
}

/* kind and name may be left out: the name is the deployment's. */
static int read_revalidate_job(struct walk *w, struct fy_node *node,
			       void *target)
{
	struct kn_deployment_revalidate *r = target;

	return read_job_or_file(w, node, "deployment", NULL, &r->job_file,
				&r->job);
}

static int read_revalidate_every(struct walk *w, struct fy_node *node,
				 void *target)
{
	struct kn_deployment_revalidate *r = target;
	char got[GOT_BUF];
	struct value v;
	int rc = classify(w, node, &v);

	if (rc)
		return rc;
	if (v.kind != V_STRING || kn_parse_duration(v.text, &r->every_ms) < 0 ||
	    r->every_ms < REVALIDATE_EVERY_MIN_MS ||
	    r->every_ms > REVALIDATE_EVERY_MAX_MS)
		return fail(w, node,
			    "must be a duration from 1s to 366d (e.g. 6h); "
			    "got %s",
			    describe(&v, got, sizeof(got)));
	return 0;
}

/* max: or min: a mapping of metric names to finite numbers. */
static int read_thresholds(struct walk *w, struct fy_node *node,
			   json_t *thresholds, const char *side_name)
{
	json_t *side = json_object();
	struct fy_node_pair *pair;
	char got[GOT_BUF];
	struct value v;
	void *iter = NULL;
	int rc = classify(w, node, &v);

	json_object_set_new(thresholds, side_name, side);
	if (rc)
		return rc;
	if (v.kind != V_MAP)
		return fail(w, node,
			    "must be a mapping of metric names to numbers "
			    "(loss: 1.8); got %s",
			    describe(&v, got, sizeof(got)));
	while ((pair = fy_node_mapping_iterate(node, &iter))) {
		struct fy_node *key = fy_node_pair_key(pair);
		struct fy_node *value = fy_node_pair_value(pair);
		char metric[KN_REVALIDATE_METRIC_MAX + 1];
		size_t mark;
		double limit;

		rc = read_key(w, key, &v);
		if (rc)
			return rc;
		if (v.len == 0 || v.len > KN_REVALIDATE_METRIC_MAX) {
			path_push_field(w, v.text);
			return fail_bare(w, key,
					 "a metric name is 1 to %d characters",
					 KN_REVALIDATE_METRIC_MAX);
		}
		kn_strlcpy(metric, v.text, sizeof(metric));
		mark = path_push_field(w, metric);
		if (json_object_get(side, metric))
			return fail_bare(w, key, "metric \"%s\" is given twice",
					 metric);
		rc = classify(w, value, &v);
		if (rc)
			return rc;
		if ((v.kind != V_INT && v.kind != V_FLOAT) ||
		    !isfinite(limit = strtod(v.text, NULL)))
			return fail(w, value, "must be a finite number; got %s",
				    describe(&v, got, sizeof(got)));
		json_object_set_new(side, metric, json_real(limit));
		path_pop(w, mark);
	}
	return 0;
}

static int read_revalidate_max(struct walk *w, struct fy_node *node,
			       void *target)
{
	struct kn_deployment_revalidate *r = target;

	return read_thresholds(w, node, r->thresholds, "max");
}

static int read_revalidate_min(struct walk *w, struct fy_node *node,
			       void *target)
{
	struct kn_deployment_revalidate *r = target;

	return read_thresholds(w, node, r->thresholds, "min");
}

enum { RV_JOB, RV_EVERY, RV_MAX, RV_MIN, RV_ROLLBACK, RV_COUNT };

static const struct field revalidate_fields[RV_COUNT] = {
	[RV_JOB] = {.name = "job", .type = FT_CUSTOM,
		    .read = read_revalidate_job, .required = true},
	[RV_EVERY] = {.name = "every", .type = FT_CUSTOM,
		      .read = read_revalidate_every, .required = true},
	[RV_MAX] = {.name = "max", .type = FT_CUSTOM,
		    .read = read_revalidate_max},
	[RV_MIN] = {.name = "min", .type = FT_CUSTOM,
		    .read = read_revalidate_min},
	[RV_ROLLBACK] = {.name = "rollback", .type = FT_BOOL,
			 .offset = offsetof(struct kn_deployment_revalidate,
					    rollback)},
};

static void revalidate_free(struct kn_deployment_revalidate *r)
{
	if (!r)
		return;
	free(r->job_file);
	kn_job_spec_free(r->job);
	json_decref(r->thresholds);
	free(r);
}

static int read_revalidate(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_deployment_spec *d = target;
	struct kn_deployment_revalidate *r = kn_xcalloc(1, sizeof(*r));
	struct fy_node_pair *seen[RV_COUNT];
	size_t n = 0;
	const char *side;
	json_t *limits;
	int rc;

	r->thresholds = json_object();
	d->revalidate = r;
	rc = walk_mapping(w, node, revalidate_fields, RV_COUNT, r, seen);
	if (rc)
		return rc;
	json_object_foreach(r->thresholds, side, limits)
		n += json_object_size(limits);
	if (n == 0)
		return fail(w, node,
			    "needs at least one threshold: max: {METRIC: N} "
			    "or min: {METRIC: N}");
	return 0;
}

struct deploy_ctx {
	struct kn_deployment_spec *spec;
	const struct kn_model_presets *presets;
};

static int read_preset(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_deployment_spec *d = target;
	struct value v;
	int rc = want_nonempty_text(w, node, "a model preset's name", &v);

	if (rc)
		return rc;
	d->preset = kn_xstrdup(v.text);
	return 0;
}

enum {
	DF_KIND,
	DF_API_VERSION,
	DF_NAME,
	DF_MODEL,
	DF_PRESET,
	DF_COMMAND,
	DF_ENV,
	DF_WORKDIR,
	DF_RESOURCES,
	DF_PLACEMENT,
	DF_SPREAD,
	DF_PRIORITY,
	DF_REPLICAS,
	DF_READINESS,
	DF_LIVENESS,
	DF_FALLBACK,
	DF_LIMITS,
	DF_BACKOFF,
	DF_BACKOFF_MAX,
	DF_REVALIDATE,
	DF_COUNT
};

static const struct field deployment_fields[DF_COUNT] = {
	[DF_KIND] = {.name = "kind", .type = FT_CUSTOM,
		     .read = read_deployment_kind, .required = true},
	[DF_API_VERSION] = {.name = "apiVersion", .type = FT_CUSTOM,
			    .read = read_api_version},
	[DF_NAME] = {.name = "name", .type = FT_CUSTOM, .read = read_name,
		     .required = true},
	[DF_MODEL] = {.name = "model", .type = FT_CUSTOM, .read = read_model,
		      .required = true},
	[DF_PRESET] = {.name = "preset", .type = FT_CUSTOM,
		       .read = read_preset},
	[DF_COMMAND] = {.name = "command", .type = FT_CUSTOM,
			.read = read_command, .required = true},
	[DF_ENV] = {.name = "env", .type = FT_CUSTOM, .read = read_env},
	[DF_WORKDIR] = {.name = "workdir", .type = FT_TEXT,
			.offset = offsetof(struct kn_deployment_spec,
					   job.workdir)},
	[DF_RESOURCES] = {.name = "resources", .type = FT_CUSTOM,
			  .read = read_resources},
	[DF_PLACEMENT] = {.name = "placement", .type = FT_CUSTOM,
			  .read = read_placement},
	[DF_SPREAD] = {.name = "spread", .type = FT_CUSTOM,
		       .read = read_top_spread},
	[DF_PRIORITY] = {.name = "priority", .type = FT_INT,
			 .offset = offsetof(struct kn_deployment_spec,
					    job.priority),
			 .min = 0, .max = KN_SPEC_MAX_PRIORITY},
	[DF_REPLICAS] = {.name = "replicas", .type = FT_INT,
			 .offset = offsetof(struct kn_deployment_spec,
					    replicas),
			 .min = 0, .max = KN_SPEC_MAX_REPLICAS},
	[DF_READINESS] = {.name = "readiness", .type = FT_CUSTOM,
			  .read = read_readiness},
	[DF_LIVENESS] = {.name = "liveness", .type = FT_CUSTOM,
			 .read = read_liveness},
	[DF_FALLBACK] = {.name = "fallback", .type = FT_CUSTOM,
			 .read = read_fallback},
	[DF_LIMITS] = {.name = "limits", .type = FT_CUSTOM,
		       .read = read_limits},
	[DF_BACKOFF] = {.name = "backoff", .type = FT_DURATION,
			.offset = offsetof(struct kn_deployment_spec,
					   job.backoff_ms),
			.min = 1},
	[DF_BACKOFF_MAX] = {.name = "backoff_max", .type = FT_DURATION,
			    .offset = offsetof(struct kn_deployment_spec,
					       job.backoff_max_ms),
			    .min = 1},
	[DF_REVALIDATE] = {.name = "revalidate", .type = FT_CUSTOM,
			   .read = read_revalidate},
};

_Static_assert(DF_COUNT <= MAX_FIELDS, "MAX_FIELDS");
/* The Job field readers take the deployment as the job it begins with. */
_Static_assert(offsetof(struct kn_deployment_spec, job) == 0, "job first");

/* Point at pair's value with path name pushed, and fail with msg. */
__attribute__((format(printf, 4, 5))) static int
fail_at_pair(struct walk *w, struct fy_node_pair *pair, const char *name,
	     const char *fmt, ...)
{
	va_list ap;
	int rc;

	path_push_field(w, name);
	w->key = fy_node_pair_key(pair);
	va_start(ap, fmt);
	rc = vfail(w, fy_node_pair_value(pair), true, fmt, ap);
	va_end(ap);
	w->key = NULL;
	return rc;
}

/* The preset's resources, where the spec's own resources say nothing. */
static int apply_preset(struct walk *w, struct deploy_ctx *ctx,
			struct fy_node_pair **seen)
{
	struct kn_deployment_spec *d = ctx->spec;
	struct kn_resources *res = &d->job.resources;
	const struct kn_model_preset *p;
	struct fy_node *given = seen[DF_RESOURCES]
					? fy_node_pair_value(seen[DF_RESOURCES])
					: NULL;

	if (!ctx->presets)
		return fail_at_pair(w, seen[DF_PRESET], "preset",
				    "no preset table is loaded here");
	p = kn_model_preset_find(ctx->presets, d->preset);
	if (!p) {
		char names[256] = "";
		size_t used = 0;
		const struct kn_model_preset *q;

		for (size_t i = 0;
		     (q = kn_model_preset_at(ctx->presets, i)) &&
		     used < sizeof(names);
		     i++)
			used += (size_t)snprintf(names + used,
						 sizeof(names) - used, "%s%s",
						 i ? ", " : "", q->name);
		return fail_at_pair(w, seen[DF_PRESET], "preset",
				    "unknown preset \"%s\" (known: %s)",
				    d->preset, names);
	}
	if (!given || !fy_node_mapping_lookup_by_string(given, "gpus", -1)) {
		free(res->mig_profile);
		res->mig_profile = NULL;
		res->gpu_milli = p->gpus * KN_MILLI;
	}
	if (p->gpu_model && res->gpu_milli > 0 &&
	    (!given ||
	     !fy_node_mapping_lookup_by_string(given, "gpu_model", -1)) &&
	    !res->n_gpu_models) {
		res->gpu_models = kn_xcalloc(2, sizeof(char *));
		res->gpu_models[0] = kn_xstrdup(p->gpu_model);
		res->n_gpu_models = 1;
	}
	if (!p->gpu_model &&
	    (!given || !fy_node_mapping_lookup_by_string(given, "memory", -1)))
		res->memory_bytes = p->memory_bytes;
	return 0;
}

/*
 * revalidate: re-validates a registry alias, so model: must name one
 * (NAME@ALIAS: not a path, not job:<id>, not a fixed version). An inline
 * job without a name takes the deployment's, with -eval when it fits.
 */
static int check_revalidate(struct walk *w, struct kn_deployment_spec *d,
			    struct fy_node_pair *pair)
{
	const char *at = strchr(d->model, '@');
	struct kn_job_spec *job = d->revalidate->job;

	if (!at || strchr(d->model, '/') || d->model_job || !at[1] ||
	    all_digits(at + 1, "0123456789"))
		return fail_at_pair(w, pair, "revalidate",
				    "needs model: NAME@ALIAS (a registry "
				    "alias to re-validate); model is \"%s\"",
				    d->model);
	if (job && !job->name) {
		char *eval = kn_asprintf("%s-eval", d->job.name);

		job->name = valid_name(eval) ? eval : kn_xstrdup(d->job.name);
		if (job->name != eval)
			free(eval);
	}
	return 0;
}

static int read_deployment(struct walk *w, struct fy_node *root, void *obj)
{
	struct deploy_ctx *ctx = obj;
	struct kn_deployment_spec *d = ctx->spec;
	struct fy_node_pair *seen[DF_COUNT];
	char got[GOT_BUF], names[320];
	struct value v;
	int rc = classify(w, root, &v);

	w->root_name = "deployment";
	if (rc)
		return rc;
	if (v.kind != V_MAP) {
		field_list(deployment_fields, DF_COUNT, names, sizeof(names));
		return fail(w, root,
			    "a deployment spec must be a mapping with fields "
			    "%s; got %s",
			    names, describe(&v, got, sizeof(got)));
	}
	rc = check_kind_first(w, root, "Deployment", "deployment");
	if (rc)
		return rc;
	rc = walk_mapping(w, root, deployment_fields, DF_COUNT, d, seen);
	if (rc)
		return rc;
	if (seen[DF_SPREAD] && d->job.placement.spread != KN_SPREAD_NONE &&
	    seen[DF_PLACEMENT] &&
	    fy_node_mapping_lookup_by_string(
		    fy_node_pair_value(seen[DF_PLACEMENT]), "spread", -1))
		return fail_at_pair(w, seen[DF_SPREAD], "spread",
				    "is given twice (also as "
				    "placement.spread); keep one");
	if (d->fallback && !strcmp(d->fallback, d->job.name))
		return fail_at_pair(w, seen[DF_FALLBACK], "fallback",
				    "must name another deployment, not this "
				    "one (%s)",
				    d->fallback);
	rc = check_backoff(w, &d->job, seen[DF_BACKOFF], seen[DF_BACKOFF_MAX]);
	if (rc)
		return rc;
	if (d->revalidate) {
		rc = check_revalidate(w, d, seen[DF_REVALIDATE]);
		if (rc)
			return rc;
	}
	if (d->preset)
		return apply_preset(w, ctx, seen);
	return 0;
}

int kn_deployment_spec_parse(const char *text, size_t len,
			     const char *filename,
			     const struct kn_model_presets *presets,
			     struct kn_deployment_spec **out,
			     struct kn_error *err)
{
	struct kn_deployment_spec *d = kn_xcalloc(1, sizeof(*d));
	struct deploy_ctx ctx = {.spec = d, .presets = presets};
	int rc;

	set_defaults(&d->job);
	d->job.backoff_ms = DEFAULT_DEPLOY_BACKOFF_MS;
	d->job.backoff_max_ms = DEFAULT_DEPLOY_BACKOFF_MAX_MS;
	d->replicas = 1;
	rc = parse_document(text, len, filename,
			    "a mapping with kind: Deployment, name, model and "
			    "command",
			    read_deployment, &ctx, err);
	if (rc < 0) {
		kn_deployment_spec_free(d);
		return rc;
	}
	*out = d;
	return 0;
}

void kn_deployment_spec_free(struct kn_deployment_spec *spec)
{
	if (!spec)
		return;
	free(spec->model);
	free(spec->readiness.path);
	free(spec->liveness.path);
	free(spec->fallback);
	free(spec->preset);
	revalidate_free(spec->revalidate);
	/* The job part last: it is the allocation itself. */
	kn_job_spec_free(&spec->job);
}

static json_t *probe_json(const struct kn_probe *p)
{
	if (!p->set)
		return json_null();
	return json_pack("{s:s, s:I, s:i, s:I}", "path", p->path, "period_ms",
			 (json_int_t)p->period_ms, "failure_threshold",
			 p->failure_threshold, "initial_delay_ms",
			 (json_int_t)p->initial_delay_ms);
}

static json_t *revalidate_json(const struct kn_deployment_revalidate *r)
{
	if (!r)
		return json_null();
	return json_pack("{s:o, s:o, s:I, s:O, s:b}", "job_file",
			 string_or_null(r->job_file), "job",
			 r->job ? kn_job_spec_to_json(r->job) : json_null(),
			 "every_ms", (json_int_t)r->every_ms, "thresholds",
			 r->thresholds, "rollback", r->rollback);
}

json_t *kn_deployment_spec_to_json(const struct kn_deployment_spec *spec)
{
	json_t *o = kn_job_spec_to_json(&spec->job);

	json_object_set_new(o, "kind", json_string("Deployment"));
	json_object_del(o, "tasks");
	json_object_del(o, "retries");
	json_object_del(o, "checkpoint");
	json_object_del(o, "timeout_ms");
	json_object_del(o, "preemptible");
	json_object_set_new(o, "model", json_string(spec->model));
	json_object_set_new(o, "replicas", json_integer(spec->replicas));
	json_object_set_new(o, "readiness", probe_json(&spec->readiness));
	json_object_set_new(o, "liveness", probe_json(&spec->liveness));
	json_object_set_new(o, "fallback", string_or_null(spec->fallback));
	json_object_set_new(o, "limits",
			    json_pack("{s:i, s:i}", "rpm", spec->limit_rpm,
				      "tpm", spec->limit_tpm));
	json_object_set_new(o, "preset", string_or_null(spec->preset));
	json_object_set_new(o, "revalidate", revalidate_json(spec->revalidate));
	return o;
}

/* --- workflows ------------------------------------------------------------ */

#define DEFAULT_STEP_RETRIES 1
#define STEP_MAX_RETRIES 100
/* Each when: and inputs: list, and a requires: list, stays small. */
#define STEP_MAX_ITEMS 64

static char *xstrndup(const char *s, size_t n)
{
	char *out = kn_xcalloc(n + 1, 1);

	memcpy(out, s, n);
	return out;
}

/* Positions of what is checked across steps, while the document lives. */
struct step_nodes {
	struct fy_node *step;
	struct fy_node *needs[KN_SPEC_MAX_STEPS];
	struct fy_node *when[STEP_MAX_ITEMS];
	struct fy_node *inputs[STEP_MAX_ITEMS];
	struct fy_node *from;
};

struct workflow_ctx {
	struct kn_workflow_spec *spec;
	struct kn_workflow_step *step; /* being read */
	struct step_nodes *nodes;      /* one per step */
	struct step_nodes *cur;
};

static const char *const ON_FAILURE_CHOICES[] = {"stop", "continue", "retry",
						 NULL};

static int read_on_failure_into(struct walk *w, struct fy_node *node,
				enum kn_on_failure *out)
{
	const char *c;
	int rc = read_choice(w, node, ON_FAILURE_CHOICES,
			     "one of retry, continue or stop", &c);

	if (rc)
		return rc;
	*out = !strcmp(c, "retry")      ? KN_ON_FAILURE_RETRY
	       : !strcmp(c, "continue") ? KN_ON_FAILURE_CONTINUE
					: KN_ON_FAILURE_STOP;
	return 0;
}

static int read_wf_kind(struct walk *w, struct fy_node *node, void *target)
{
	(void)target;
	return check_kind(w, node, "Workflow");
}

static int read_wf_name(struct walk *w, struct fy_node *node, void *target)
{
	struct workflow_ctx *ctx = target;
	struct kn_job_spec named = {0};
	int rc = read_name(w, node, &named);

	ctx->spec->name = named.name;
	return rc;
}

static int read_wf_on_failure(struct walk *w, struct fy_node *node,
			      void *target)
{
	struct workflow_ctx *ctx = target;

	return read_on_failure_into(w, node, &ctx->spec->on_failure);
}

/* --- requires: --- */

static int read_version_text(struct walk *w, struct fy_node *node,
			     char **out)
{
	static const char allowed[] =
		"a version such as \"535.104\" or \"12.2\" (numbers and dots)";
	char got[GOT_BUF];
	struct value v;
	int rc = want_nonempty_text(w, node, allowed, &v);

	if (rc)
		return rc;
	if (!all_digits(v.text, "0123456789.") || v.text[0] == '.' ||
	    v.text[v.len - 1] == '.' || strstr(v.text, ".."))
		return fail(w, node, "must be %s; got %s", allowed,
			    describe(&v, got, sizeof(got)));
	free(*out);
	*out = kn_xstrdup(v.text);
	return 0;
}

static int read_req_driver(struct walk *w, struct fy_node *node, void *target)
{
	return read_version_text(w, node,
				 &((struct kn_requirements *)target)->driver_min);
}

static int read_req_cuda(struct walk *w, struct fy_node *node, void *target)
{
	return read_version_text(w, node,
				 &((struct kn_requirements *)target)->cuda_min);
}

static int read_req_gpu_model(struct walk *w, struct fy_node *node,
			      void *target)
{
	struct kn_requirements *r = target;
	struct value v;
	int rc = want_nonempty_text(w, node, "a GPU model such as H100", &v);

	if (rc)
		return rc;
	free(r->gpu_model);
	r->gpu_model = kn_xstrdup(v.text);
	return 0;
}

static const struct field req_gpu_fields[] = {
	{.name = "model", .type = FT_CUSTOM, .read = read_req_gpu_model},
	{.name = "count", .type = FT_INT,
	 .offset = offsetof(struct kn_requirements, gpu_count), .min = 1,
	 .max = KN_SPEC_MAX_GPUS},
};

static int read_req_gpus(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_requirements *r = target;
	int rc = walk_mapping(w, node, req_gpu_fields,
			      ARRAY_SIZE(req_gpu_fields), r, NULL);

	if (rc == 0 && r->gpu_count == 0)
		r->gpu_count = 1;
	return rc;
}

static int read_name_list(struct walk *w, struct fy_node *node,
			  const char *allowed, char ***list, size_t *n)
{
	if (*list) {
		free_strv(*list, *n);
		*list = NULL;
		*n = 0;
	}
	return read_text_list(w, node, allowed, false, list, n);
}

static int read_req_commands(struct walk *w, struct fy_node *node,
			     void *target)
{
	struct kn_requirements *r = target;

	return read_name_list(w, node, "a list of command names such as "
				       "[nvidia-smi, torchrun]",
			      &r->commands, &r->n_commands);
}

static int read_req_modules(struct walk *w, struct fy_node *node,
			    void *target)
{
	struct kn_requirements *r = target;

	return read_name_list(w, node, "a list of Python modules such as "
				       "[torch, numpy]",
			      &r->python_modules, &r->n_python_modules);
}

static int read_req_scratch_path(struct walk *w, struct fy_node *node,
				 void *target)
{
	struct kn_requirements *r = target;
	struct value v;
	int rc = want_nonempty_text(w, node, "an absolute path", &v);

	if (rc)
		return rc;
	if (v.text[0] != '/')
		return fail(w, node, "must be an absolute path; got \"%s\"",
			    v.text);
	free(r->scratch_path);
	r->scratch_path = kn_xstrdup(v.text);
	return 0;
}

static int read_req_scratch_free(struct walk *w, struct fy_node *node,
				 void *target)
{
	struct kn_requirements *r = target;
	struct kn_resources res = {0};
	int rc = read_memory(w, node, &res);

	r->scratch_bytes = res.memory_bytes;
	return rc;
}

static const struct field req_scratch_fields[] = {
	{.name = "path", .type = FT_CUSTOM, .read = read_req_scratch_path,
	 .required = true},
	{.name = "free", .type = FT_CUSTOM, .read = read_req_scratch_free,
	 .required = true},
};

static int read_req_scratch(struct walk *w, struct fy_node *node,
			    void *target)
{
	return walk_mapping(w, node, req_scratch_fields,
			    ARRAY_SIZE(req_scratch_fields), target, NULL);
}

static int read_req_store(struct walk *w, struct fy_node *node, void *target)
{
	static const struct field f = {
		.name = "store", .type = FT_BOOL,
		.offset = offsetof(struct kn_requirements, store)};

	return read_bool_field(w, &f, node, target);
}

static const struct field requires_fields[] = {
	{.name = "gpus", .type = FT_CUSTOM, .read = read_req_gpus},
	{.name = "driver", .type = FT_CUSTOM, .read = read_req_driver},
	{.name = "cuda", .type = FT_CUSTOM, .read = read_req_cuda},
	{.name = "commands", .type = FT_CUSTOM, .read = read_req_commands},
	{.name = "python_modules", .type = FT_CUSTOM,
	 .read = read_req_modules},
	{.name = "scratch", .type = FT_CUSTOM, .read = read_req_scratch},
	{.name = "store", .type = FT_CUSTOM, .read = read_req_store},
};

static int read_requires_into(struct walk *w, struct fy_node *node,
			      struct kn_requirements *r)
{
	r->set = true;
	return walk_mapping(w, node, requires_fields,
			    ARRAY_SIZE(requires_fields), r, NULL);
}

static int read_wf_requires(struct walk *w, struct fy_node *node,
			    void *target)
{
	struct workflow_ctx *ctx = target;

	return read_requires_into(w, node, &ctx->spec->requires);
}

/* --- a step --- */

static int read_step_name(struct walk *w, struct fy_node *node, void *target)
{
	struct workflow_ctx *ctx = target;
	struct kn_job_spec named = {0};
	int rc = read_name(w, node, &named);

	ctx->step->name = named.name;
	return rc;
}

static int read_step_needs(struct walk *w, struct fy_node *node,
			   void *target)
{
	struct workflow_ctx *ctx = target;
	struct fy_node *item;
	void *iter = NULL;
	size_t i = 0;
	int rc = read_name_list(w, node, "a list of earlier steps' names",
				&ctx->step->needs, &ctx->step->n_needs);

	if (rc)
		return rc;
	while ((item = fy_node_sequence_iterate(node, &iter)) &&
	       i < KN_SPEC_MAX_STEPS)
		ctx->cur->needs[i++] = item;
	if (ctx->step->n_needs > KN_SPEC_MAX_STEPS)
		return fail(w, node, "names %zu steps; a workflow has at most %d",
			    ctx->step->n_needs, KN_SPEC_MAX_STEPS);
	return 0;
}

static int read_step_on_failure(struct walk *w, struct fy_node *node,
				void *target)
{
	struct workflow_ctx *ctx = target;

	ctx->step->on_failure_set = true;
	return read_on_failure_into(w, node, &ctx->step->on_failure);
}

static int read_step_retries(struct walk *w, struct fy_node *node,
			     void *target)
{
	static const struct field f = {
		.name = "retries", .type = FT_INT,
		.offset = offsetof(struct kn_workflow_step, retries), .min = 0,
		.max = STEP_MAX_RETRIES};
	struct workflow_ctx *ctx = target;

	return read_int_field(w, &f, node, ctx->step);
}

static const char WHEN_ALLOWED[] =
	"a condition such as \"eval.metrics.loss < 1.8\" or \"train.outcome "
	"== succeeded\", or a list of them (all must hold)";

/* "STEP.metrics.NAME OP NUMBER" or "STEP.outcome ==|!= OUTCOME". */
static int parse_condition(struct walk *w, struct fy_node *node,
			   const char *text, struct kn_condition *c)
{
	static const struct {
		const char *text;
		enum kn_compare op;
	} ops[] = {
		{"<=", KN_CMP_LE}, {">=", KN_CMP_GE}, {"==", KN_CMP_EQ},
		{"!=", KN_CMP_NE}, {"<", KN_CMP_LT},  {">", KN_CMP_GT},
	};
	char lhs[160], rhs[96], op[8];
	const char *dot, *p = text;
	size_t n = 0;
	char *end;

	while (*p == ' ')
		p++;
	while (*p && !strchr("<>=! ", *p) && n + 1 < sizeof(lhs))
		lhs[n++] = *p++;
	lhs[n] = '\0';
	while (*p == ' ')
		p++;
	/* The operator: the run of punctuation after the left side. */
	n = 0;
	while (*p && *p != ' ' && *p != '"' && *p != '.' && *p != '-' &&
	       !isalnum((unsigned char)*p) && n + 1 < sizeof(op))
		op[n++] = *p++;
	op[n] = '\0';
	while (*p == ' ')
		p++;
	n = 0;
	while (*p && *p != ' ' && n + 1 < sizeof(rhs))
		rhs[n++] = *p++;
	rhs[n] = '\0';
	while (*p == ' ')
		p++;
	if (*p || !lhs[0] || !op[0] || !rhs[0])
		return fail(w, node, "must be %s; got \"%s\"", WHEN_ALLOWED,
			    text);
	for (n = 0; n < ARRAY_SIZE(ops) && strcmp(ops[n].text, op); n++)
		;
	if (n == ARRAY_SIZE(ops))
		return fail(w, node,
			    "\"%s\" is not a comparison: use <, <=, >, >=, == "
			    "or !=",
			    op);
	c->op = ops[n].op;
	dot = strchr(lhs, '.');
	if (!dot)
		return fail(w, node, "must be %s; got \"%s\"", WHEN_ALLOWED,
			    text);
	c->step = xstrndup(lhs, (size_t)(dot - lhs));
	if (!strcmp(dot + 1, "outcome")) {
		if (c->op != KN_CMP_EQ && c->op != KN_CMP_NE)
			return fail(w, node,
				    "an outcome is compared with == or != "
				    "only; got \"%s\"",
				    text);
		if (strcmp(rhs, "succeeded") && strcmp(rhs, "failed") &&
		    strcmp(rhs, "skipped"))
			return fail(w, node,
				    "an outcome is succeeded, failed or "
				    "skipped; got \"%s\"",
				    rhs);
		c->outcome = kn_xstrdup(rhs);
		return 0;
	}
	if (strncmp(dot + 1, "metrics.", 8) != 0 || !dot[9])
		return fail(w, node,
			    "\"%s\": a condition reads STEP.outcome or "
			    "STEP.metrics.NAME",
			    lhs);
	c->metric = kn_xstrdup(dot + 9);
	c->number = strtod(rhs, &end);
	if (end == rhs || *end)
		return fail(w, node,
			    "a metric is compared with a number; got \"%s\"",
			    rhs);
	return 0;
}

static int read_step_when(struct walk *w, struct fy_node *node, void *target)
{
	struct workflow_ctx *ctx = target;
	struct kn_workflow_step *st = ctx->step;
	struct fy_node *items[STEP_MAX_ITEMS];
	size_t n = 0;
	struct value v;
	int rc = classify(w, node, &v);

	if (rc)
		return rc;
	if (v.kind == V_LIST) {
		struct fy_node *item;
		void *iter = NULL;

		if (v.count < 1 || v.count > STEP_MAX_ITEMS)
			return fail(w, node, "must be %s (1 to %d)",
				    WHEN_ALLOWED, STEP_MAX_ITEMS);
		while ((item = fy_node_sequence_iterate(node, &iter)))
			items[n++] = item;
	} else {
		items[n++] = node;
	}
	st->when = kn_xcalloc(n, sizeof(*st->when));
	for (size_t i = 0; i < n; i++) {
		size_t mark = v.kind == V_LIST ? path_push_index(w, (int)i)
					       : w->path_len;
		struct value item;

		rc = want_nonempty_text(w, items[i], WHEN_ALLOWED, &item);
		if (rc)
			return rc;
		st->n_when = i + 1;
		rc = parse_condition(w, items[i], item.text, &st->when[i]);
		if (rc)
			return rc;
		ctx->cur->when[i] = items[i];
		path_pop(w, mark);
	}
	return 0;
}

static int read_step_requires(struct walk *w, struct fy_node *node,
			      void *target)
{
	struct workflow_ctx *ctx = target;

	return read_requires_into(w, node, &ctx->step->requires);
}

static int read_step_inputs(struct walk *w, struct fy_node *node,
			    void *target)
{
	struct workflow_ctx *ctx = target;
	struct kn_workflow_step *st = ctx->step;
	struct fy_node *item;
	void *iter = NULL;
	char **texts = NULL;
	size_t n = 0;
	int rc = read_text_list(w, node,
				"a list of inputs: STEP.outputs/PATH, a path "
				"or a store URL",
				false, &texts, &n);

	if (rc) {
		free_strv(texts, n);
		return rc;
	}
	if (n > STEP_MAX_ITEMS) {
		free_strv(texts, n);
		return fail(w, node, "has %zu inputs; at most %d", n,
			    STEP_MAX_ITEMS);
	}
	st->inputs = kn_xcalloc(n, sizeof(*st->inputs));
	for (size_t i = 0; i < n; i++) {
		const char *t = texts[i], *mark = strstr(t, ".outputs/");

		item = fy_node_sequence_iterate(node, &iter);
		ctx->cur->inputs[i] = item;
		st->inputs[i].text = kn_xstrdup(t);
		/* "train.outputs/w.bin" names a step; a URL or path with a
		   ".outputs/" inside it (scheme, slash first) does not. */
		if (mark && mark > t && !memchr(t, '/', (size_t)(mark - t)) &&
		    !memchr(t, ':', (size_t)(mark - t))) {
			size_t mark_path = path_push_index(w, (int)i);

			st->inputs[i].step = xstrndup(t, (size_t)(mark - t));
			st->inputs[i].path = kn_xstrdup(mark + 9);
			if (!st->inputs[i].path[0] ||
			    strstr(st->inputs[i].path, "..")) {
				st->n_inputs = i + 1;
				rc = fail(w, item,
					  "must name a file under the step's "
					  "outputs (STEP.outputs/PATH, no "
					  "\"..\"); got \"%s\"",
					  t);
				free_strv(texts, n);
				return rc;
			}
			path_pop(w, mark_path);
		}
		st->n_inputs = i + 1;
	}
	free_strv(texts, n);
	return 0;
}

/*
 * A step's inputs are the step's own `inputs:`, which may name earlier
 * steps' outputs; one list per step keeps what lands in $KILN_INPUT_DIR
 * and what its lineage records in one place.
 */
static int refuse_step_job_inputs(struct walk *w, struct fy_node *node,
				  void *target)
{
	(void)target;
	return fail(w, node, "a step's inputs go in the step's inputs: list, "
			     "not in its job");
}

/* An inline job: kind and name may be left out (name: the step's). */
static int read_step_job(struct walk *w, struct fy_node *node, void *target)
{
	struct workflow_ctx *ctx = target;

	return read_job_or_file(w, node, "workflow", refuse_step_job_inputs,
				&ctx->step->job_file, &ctx->step->job);
}

static int read_step_from(struct walk *w, struct fy_node *node, void *target)
{
	struct workflow_ctx *ctx = target;
	struct value v;
	int rc = want_nonempty_text(w, node, "the job step whose outputs are "
					     "the model",
				    &v);

	if (rc)
		return rc;
	/* Both register and deploy take one: a step with both is refused
	   later, and keeps only the last. */
	free(ctx->step->from);
	ctx->step->from = kn_xstrdup(v.text);
	ctx->cur->from = node;
	return 0;
}

static int read_register_model(struct walk *w, struct fy_node *node,
			       void *target)
{
	struct workflow_ctx *ctx = target;
	struct kn_job_spec named = {0};
	int rc = read_name(w, node, &named);

	ctx->step->model = named.name;
	return rc;
}

static int read_register_alias(struct walk *w, struct fy_node *node,
			       void *target)
{
	struct workflow_ctx *ctx = target;
	struct kn_job_spec named = {0};
	int rc = read_name(w, node, &named);

	ctx->step->alias = named.name;
	return rc;
}

static int read_register_key(struct walk *w, struct fy_node *node,
			     void *target)
{
	struct workflow_ctx *ctx = target;
	struct value v;
	int rc = want_nonempty_text(w, node, "a private key file's path", &v);

	if (rc)
		return rc;
	ctx->step->sign_key = kn_xstrdup(v.text);
	return 0;
}

static const struct field register_fields[] = {
	{.name = "from", .type = FT_CUSTOM, .read = read_step_from,
	 .required = true},
	{.name = "model", .type = FT_CUSTOM, .read = read_register_model,
	 .required = true},
	{.name = "alias", .type = FT_CUSTOM, .read = read_register_alias},
	{.name = "sign_key", .type = FT_CUSTOM, .read = read_register_key},
};

static int read_step_register(struct walk *w, struct fy_node *node,
			      void *target)
{
	struct workflow_ctx *ctx = target;

	ctx->step->kind = KN_STEP_REGISTER;
	return walk_mapping(w, node, register_fields,
			    ARRAY_SIZE(register_fields), target, NULL);
}

static int read_deploy_deployment(struct walk *w, struct fy_node *node,
				  void *target)
{
	struct workflow_ctx *ctx = target;
	struct kn_job_spec named = {0};
	int rc = read_name(w, node, &named);

	ctx->step->deployment = named.name;
	return rc;
}

static const struct field deploy_fields[] = {
	{.name = "deployment", .type = FT_CUSTOM,
	 .read = read_deploy_deployment, .required = true},
	{.name = "from", .type = FT_CUSTOM, .read = read_step_from,
	 .required = true},
};

static int read_step_deploy(struct walk *w, struct fy_node *node,
			    void *target)
{
	struct workflow_ctx *ctx = target;

	ctx->step->kind = KN_STEP_DEPLOY;
	return walk_mapping(w, node, deploy_fields, ARRAY_SIZE(deploy_fields),
			    target, NULL);
}

enum {
	SF_NAME,
	SF_NEEDS,
	SF_ON_FAILURE,
	SF_RETRIES,
	SF_WHEN,
	SF_REQUIRES,
	SF_INPUTS,
	SF_JOB,
	SF_REGISTER,
	SF_DEPLOY,
	SF_COUNT
};

static const struct field step_fields[SF_COUNT] = {
	[SF_NAME] = {.name = "name", .type = FT_CUSTOM, .read = read_step_name,
		     .required = true},
	[SF_NEEDS] = {.name = "needs", .type = FT_CUSTOM,
		      .read = read_step_needs},
	[SF_ON_FAILURE] = {.name = "on_failure", .type = FT_CUSTOM,
			   .read = read_step_on_failure},
	[SF_RETRIES] = {.name = "retries", .type = FT_CUSTOM,
			.read = read_step_retries},
	[SF_WHEN] = {.name = "when", .type = FT_CUSTOM, .read = read_step_when},
	[SF_REQUIRES] = {.name = "requires", .type = FT_CUSTOM,
			 .read = read_step_requires},
	[SF_INPUTS] = {.name = "inputs", .type = FT_CUSTOM,
		       .read = read_step_inputs},
	[SF_JOB] = {.name = "job", .type = FT_CUSTOM, .read = read_step_job},
	[SF_REGISTER] = {.name = "register", .type = FT_CUSTOM,
			 .read = read_step_register},
	[SF_DEPLOY] = {.name = "deploy", .type = FT_CUSTOM,
		       .read = read_step_deploy},
};
_Static_assert(SF_COUNT <= MAX_FIELDS, "MAX_FIELDS");

static int read_step(struct walk *w, struct fy_node *node,
		     struct workflow_ctx *ctx)
{
	struct fy_node_pair *seen[SF_COUNT];
	int rc, kinds;

	ctx->step->retries = DEFAULT_STEP_RETRIES;
	ctx->cur->step = node;
	rc = walk_mapping(w, node, step_fields, SF_COUNT, ctx, seen);
	if (rc)
		return rc;
	kinds = !!seen[SF_JOB] + !!seen[SF_REGISTER] + !!seen[SF_DEPLOY];
	if (kinds != 1)
		return fail(w, kinds ? fy_node_pair_key(seen[SF_REGISTER]
								? seen[SF_REGISTER]
								: seen[SF_DEPLOY])
				     : node,
			    "step \"%s\" must have exactly one of job, register "
			    "or deploy",
			    ctx->step->name);
	if (ctx->step->job && !ctx->step->job->name)
		ctx->step->job->name = kn_xstrdup(ctx->step->name);
	if (seen[SF_INPUTS] && !seen[SF_JOB])
		return fail(w, fy_node_pair_key(seen[SF_INPUTS]),
			    "inputs are for job steps (register and deploy "
			    "read their from step)");
	return 0;
}

static int read_wf_steps(struct walk *w, struct fy_node *node, void *target)
{
	struct workflow_ctx *ctx = target;
	struct kn_workflow_spec *spec = ctx->spec;
	struct fy_node *item;
	char got[GOT_BUF];
	void *iter = NULL;
	struct value v;
	int rc = classify(w, node, &v);

	if (rc)
		return rc;
	if (v.kind == V_LIST && v.count > KN_SPEC_MAX_STEPS)
		return fail(w, node, "must be a list of 1 to %d steps; got %d",
			    KN_SPEC_MAX_STEPS, v.count);
	if (v.kind != V_LIST || v.count < 1)
		return fail(w, node, "must be a list of 1 to %d steps; got %s",
			    KN_SPEC_MAX_STEPS, describe(&v, got, sizeof(got)));
	spec->steps = kn_xcalloc((size_t)v.count, sizeof(*spec->steps));
	ctx->nodes = kn_xcalloc((size_t)v.count, sizeof(*ctx->nodes));
	while ((item = fy_node_sequence_iterate(node, &iter))) {
		size_t mark = path_push_index(w, (int)spec->n_steps);

		ctx->step = &spec->steps[spec->n_steps];
		ctx->cur = &ctx->nodes[spec->n_steps];
		spec->n_steps++;
		rc = read_step(w, item, ctx);
		if (rc)
			return rc;
		path_pop(w, mark);
	}
	return 0;
}

enum {
	WF_KIND,
	WF_API_VERSION,
	WF_NAME,
	WF_ON_FAILURE,
	WF_REQUIRES,
	WF_STEPS,
	WF_COUNT
};

static const struct field workflow_fields[WF_COUNT] = {
	[WF_KIND] = {.name = "kind", .type = FT_CUSTOM, .read = read_wf_kind,
		     .required = true},
	[WF_API_VERSION] = {.name = "apiVersion", .type = FT_CUSTOM,
			    .read = read_api_version},
	[WF_NAME] = {.name = "name", .type = FT_CUSTOM, .read = read_wf_name,
		     .required = true},
	[WF_ON_FAILURE] = {.name = "on_failure", .type = FT_CUSTOM,
			   .read = read_wf_on_failure},
	[WF_REQUIRES] = {.name = "requires", .type = FT_CUSTOM,
			 .read = read_wf_requires},
	[WF_STEPS] = {.name = "steps", .type = FT_CUSTOM, .read = read_wf_steps,
		      .required = true},
};

static ssize_t step_index(const struct kn_workflow_spec *spec,
			  const char *name)
{
	for (size_t i = 0; i < spec->n_steps; i++)
		if (!strcmp(spec->steps[i].name, name))
			return (ssize_t)i;
	return -1;
}

/* Point the path at steps[i].FIELD[k] (k < 0: no index) and fail. */
__attribute__((format(printf, 6, 7))) static int
step_fail(struct walk *w, struct fy_node *node, size_t i, const char *field,
	  int k, const char *fmt, ...)
{
	va_list ap;
	int rc;

	path_pop(w, 0);
	path_push(w, "steps[%zu]", i);
	if (field)
		path_push_field(w, field);
	if (k >= 0)
		path_push_index(w, k);
	va_start(ap, fmt);
	rc = vfail(w, node, true, fmt, ap);
	va_end(ap);
	return rc;
}

/* Names resolve, and names are unique. */
static int check_step_names(struct walk *w, struct workflow_ctx *ctx)
{
	const struct kn_workflow_spec *spec = ctx->spec;

	for (size_t i = 0; i < spec->n_steps; i++) {
		const struct kn_workflow_step *st = &spec->steps[i];
		ssize_t first = step_index(spec, st->name);

		if (first >= 0 && (size_t)first < i)
			return step_fail(w, ctx->nodes[i].step, i, "name", -1,
					 "two steps are named \"%s\" (the "
					 "first is steps[%zd])",
					 st->name, first);
		for (size_t k = 0; k < st->n_needs; k++) {
			ssize_t j = step_index(spec, st->needs[k]);

			if (j < 0)
				return step_fail(w, ctx->nodes[i].needs[k], i,
						 "needs", (int)k,
						 "step \"%s\" needs \"%s\", "
						 "which is no step of this "
						 "workflow",
						 st->name, st->needs[k]);
			if ((size_t)j == i)
				return step_fail(w, ctx->nodes[i].needs[k], i,
						 "needs", (int)k,
						 "step \"%s\" needs itself",
						 st->name);
		}
	}
	return 0;
}

/*
 * Kahn's order, file order among ready steps; a step left over sits on a
 * cycle, which is followed from it and named.
 */
static int order_steps(struct walk *w, struct workflow_ctx *ctx)
{
	struct kn_workflow_spec *spec = ctx->spec;
	size_t n = spec->n_steps, done = 0;
	bool *placed = kn_xcalloc(n, sizeof(*placed));
	int rc = 0;

	spec->order = kn_xcalloc(n, sizeof(*spec->order));
	while (done < n) {
		size_t i;

		for (i = 0; i < n; i++) {
			bool ready = !placed[i];

			for (size_t k = 0; ready && k < spec->steps[i].n_needs;
			     k++)
				ready = placed[step_index(
					spec, spec->steps[i].needs[k])];
			if (ready)
				break;
		}
		if (i == n)
			break;
		placed[i] = true;
		spec->order[done++] = i;
	}
	if (done < n) {
		/* Walk needs among unplaced steps until one repeats. */
		size_t *seen_at = kn_xcalloc(n, sizeof(*seen_at));
		size_t *trail = kn_xcalloc(n + 1, sizeof(*trail));
		size_t len = 0, at = 0, start;
		struct kn_buf b;

		while (placed[at])
			at++;
		for (size_t i = 0; i < n; i++)
			seen_at[i] = SIZE_MAX;
		while (seen_at[at] == SIZE_MAX) {
			const struct kn_workflow_step *st = &spec->steps[at];

			seen_at[at] = len;
			trail[len++] = at;
			for (size_t k = 0; k < st->n_needs; k++) {
				size_t j = (size_t)step_index(spec,
							      st->needs[k]);
				if (!placed[j]) {
					at = j;
					break;
				}
			}
		}
		start = seen_at[at];
		kn_buf_init(&b, SIZE_MAX);
		for (size_t k = start; k < len; k++)
			kn_buf_printf(&b, "%s -> ",
				      spec->steps[trail[k]].name);
		kn_buf_printf(&b, "%s", spec->steps[at].name);
		rc = step_fail(w, ctx->nodes[trail[start]].step, trail[start],
			       "needs", -1, "the steps' needs form a cycle: %s",
			       b.data);
		kn_buf_release(&b);
		free(seen_at);
		free(trail);
	}
	free(placed);
	return rc;
}

/* Depth-first over needs, each step visited once (a diamond-shaped DAG
   would make plain recursion exponential). */
static bool depends_from(const struct kn_workflow_spec *spec, size_t a,
			 size_t b, uint64_t *visited)
{
	const struct kn_workflow_step *st = &spec->steps[a];

	for (size_t k = 0; k < st->n_needs; k++) {
		ssize_t j = step_index(spec, st->needs[k]);

		if (j < 0 || (*visited >> j & 1))
			continue;
		*visited |= (uint64_t)1 << j;
		if ((size_t)j == b || depends_from(spec, (size_t)j, b, visited))
			return true;
	}
	return false;
}

bool kn_workflow_depends(const struct kn_workflow_spec *spec, size_t a,
			 size_t b)
{
	uint64_t visited = 0;

	_Static_assert(KN_SPEC_MAX_STEPS <= 64, "visited is one bit a step");
	return a < spec->n_steps && b < spec->n_steps &&
	       depends_from(spec, a, b, &visited);
}

/* What a step reads comes from a step it needs. */
static int check_reads(struct walk *w, struct workflow_ctx *ctx, size_t i,
		       const char *what, const char *field, int k,
		       struct fy_node *node, const char *name, bool job_only)
{
	const struct kn_workflow_spec *spec = ctx->spec;
	ssize_t j = step_index(spec, name);

	if (j < 0)
		return step_fail(w, node, i, field, k,
				 "%s names \"%s\", which is no step of this "
				 "workflow",
				 what, name);
	if (!kn_workflow_depends(spec, i, (size_t)j))
		return step_fail(w, node, i, field, k,
				 "%s reads step \"%s\", which step \"%s\" does "
				 "not need (add it to needs)",
				 what, name, spec->steps[i].name);
	if (job_only && spec->steps[j].kind != KN_STEP_JOB)
		return step_fail(w, node, i, field, k,
				 "%s reads step \"%s\", which is not a job "
				 "step",
				 what, name);
	return 0;
}

static int check_step_reads(struct walk *w, struct workflow_ctx *ctx)
{
	const struct kn_workflow_spec *spec = ctx->spec;
	int rc = 0;

	for (size_t i = 0; i < spec->n_steps && !rc; i++) {
		const struct kn_workflow_step *st = &spec->steps[i];
		const struct step_nodes *sn = &ctx->nodes[i];

		for (size_t k = 0; k < st->n_when && !rc; k++)
			rc = check_reads(w, ctx, i, "the condition", "when",
					 st->n_when > 1 ? (int)k : -1,
					 sn->when[k], st->when[k].step, false);
		for (size_t k = 0; k < st->n_inputs && !rc; k++)
			if (st->inputs[k].step)
				rc = check_reads(w, ctx, i, "the input",
						 "inputs", (int)k,
						 sn->inputs[k],
						 st->inputs[k].step, true);
		if (!rc && st->kind == KN_STEP_REGISTER)
			rc = check_reads(w, ctx, i, "register.from",
					 "register.from", -1, sn->from,
					 st->from, true);
		if (!rc && st->kind == KN_STEP_DEPLOY) {
			rc = check_reads(w, ctx, i, "deploy.from",
					 "deploy.from", -1, sn->from, st->from,
					 false);
			if (!rc && spec->steps[step_index(spec, st->from)]
						   .kind != KN_STEP_REGISTER)
				rc = step_fail(w, sn->from, i, "deploy.from",
					       -1,
					       "deploy.from must name a "
					       "register step; \"%s\" is not one",
					       st->from);
		}
	}
	return rc;
}

static int read_workflow_root(struct walk *w, struct fy_node *root, void *obj)
{
	struct workflow_ctx ctx = {.spec = obj};
	char got[GOT_BUF], names[256];
	struct value v;
	int rc = classify(w, root, &v);

	if (rc)
		return rc;
	if (v.kind != V_MAP) {
		field_list(workflow_fields, WF_COUNT, names, sizeof(names));
		return fail(w, root,
			    "a workflow must be a mapping with fields %s; "
			    "got %s",
			    names, describe(&v, got, sizeof(got)));
	}
	rc = check_kind_first(w, root, "Workflow", "workflow");
	if (rc == 0)
		rc = walk_mapping(w, root, workflow_fields, WF_COUNT, &ctx,
				  NULL);
	if (rc == 0)
		rc = check_step_names(w, &ctx);
	if (rc == 0)
		rc = order_steps(w, &ctx);
	if (rc == 0)
		rc = check_step_reads(w, &ctx);
	if (rc == 0)
		for (size_t i = 0; i < ctx.spec->n_steps; i++) {
			struct kn_workflow_step *st = &ctx.spec->steps[i];

			if (!st->on_failure_set)
				st->on_failure = ctx.spec->on_failure;
		}
	free(ctx.nodes);
	return rc;
}

int kn_workflow_spec_parse(const char *text, size_t len, const char *filename,
			   struct kn_workflow_spec **out, struct kn_error *err)
{
	struct kn_workflow_spec *spec = kn_xcalloc(1, sizeof(*spec));
	int rc = parse_document(text, len, filename,
				"a mapping with kind: Workflow, name and steps",
				read_workflow_root, spec, err);

	if (rc < 0) {
		kn_workflow_spec_free(spec);
		return rc;
	}
	*out = spec;
	return 0;
}

static void requirements_release(struct kn_requirements *r)
{
	free(r->gpu_model);
	free(r->driver_min);
	free(r->cuda_min);
	free_strv(r->commands, r->n_commands);
	free_strv(r->python_modules, r->n_python_modules);
	free(r->scratch_path);
}

void kn_workflow_spec_free(struct kn_workflow_spec *spec)
{
	if (!spec)
		return;
	for (size_t i = 0; i < spec->n_steps; i++) {
		struct kn_workflow_step *st = &spec->steps[i];

		free(st->name);
		free_strv(st->needs, st->n_needs);
		for (size_t k = 0; k < st->n_when; k++) {
			free(st->when[k].step);
			free(st->when[k].metric);
			free(st->when[k].outcome);
		}
		free(st->when);
		requirements_release(&st->requires);
		for (size_t k = 0; k < st->n_inputs; k++) {
			free(st->inputs[k].text);
			free(st->inputs[k].step);
			free(st->inputs[k].path);
		}
		free(st->inputs);
		free(st->job_file);
		kn_job_spec_free(st->job);
		free(st->from);
		free(st->model);
		free(st->alias);
		free(st->sign_key);
		free(st->deployment);
	}
	free(spec->steps);
	requirements_release(&spec->requires);
	free(spec->order);
	free(spec->name);
	free(spec);
}

const struct kn_workflow_step *kn_workflow_step_find(
	const struct kn_workflow_spec *spec, const char *name)
{
	ssize_t i = step_index(spec, name);

	return i < 0 ? NULL : &spec->steps[i];
}

static const char *on_failure_name(enum kn_on_failure f)
{
	return f == KN_ON_FAILURE_RETRY	     ? "retry"
	       : f == KN_ON_FAILURE_CONTINUE ? "continue"
					     : "stop";
}

static json_t *requirements_json(const struct kn_requirements *r)
{
	json_t *o;

	if (!r->set)
		return json_null();
	o = json_object();
	if (r->gpu_count)
		json_object_set_new(o, "gpus",
				    json_pack("{s:o, s:i}", "model",
					      string_or_null(r->gpu_model),
					      "count", r->gpu_count));
	if (r->driver_min)
		json_object_set_new(o, "driver", json_string(r->driver_min));
	if (r->cuda_min)
		json_object_set_new(o, "cuda", json_string(r->cuda_min));
	if (r->n_commands)
		json_object_set_new(o, "commands",
				    strv_json(r->commands, r->n_commands));
	if (r->n_python_modules)
		json_object_set_new(o, "python_modules",
				    strv_json(r->python_modules,
					      r->n_python_modules));
	if (r->scratch_path)
		json_object_set_new(o, "scratch",
				    json_pack("{s:s, s:I}", "path",
					      r->scratch_path, "free_bytes",
					      (json_int_t)r->scratch_bytes));
	if (r->store)
		json_object_set_new(o, "store", json_true());
	return o;
}

json_t *kn_workflow_spec_to_json(const struct kn_workflow_spec *spec)
{
	static const char *const CMP[] = {"<", "<=", ">", ">=", "==", "!="};
	json_t *steps = json_array(), *order = json_array();

	for (size_t i = 0; i < spec->n_steps; i++) {
		const struct kn_workflow_step *st = &spec->steps[i];
		json_t *when = json_array(), *inputs = json_array();
		json_t *o;

		for (size_t k = 0; k < st->n_when; k++) {
			const struct kn_condition *c = &st->when[k];
			json_t *text = c->metric
				? json_sprintf("%s.metrics.%s %s %.17g",
					       c->step, c->metric, CMP[c->op],
					       c->number)
				: json_sprintf("%s.outcome %s %s", c->step,
					       CMP[c->op], c->outcome);
			json_array_append_new(when, text);
		}
		for (size_t k = 0; k < st->n_inputs; k++)
			json_array_append_new(inputs,
					      json_string(st->inputs[k].text));
		o = json_pack("{s:s, s:s, s:o, s:s, s:i, s:o, s:o, s:o}",
			      "name", st->name, "kind",
			      st->kind == KN_STEP_JOB	     ? "job"
			      : st->kind == KN_STEP_REGISTER ? "register"
							     : "deploy",
			      "needs", strv_json(st->needs, st->n_needs),
			      "on_failure", on_failure_name(st->on_failure),
			      "retries", st->retries, "when", when, "inputs",
			      inputs, "requires",
			      requirements_json(&st->requires));
		if (st->job_file)
			json_object_set_new(o, "job_file",
					    json_string(st->job_file));
		if (st->job)
			json_object_set_new(o, "job",
					    kn_job_spec_to_json(st->job));
		if (st->kind == KN_STEP_REGISTER)
			json_object_set_new(
				o, "register",
				json_pack("{s:s, s:s, s:o, s:o}", "from",
					  st->from, "model", st->model,
					  "alias", string_or_null(st->alias),
					  "sign_key",
					  string_or_null(st->sign_key)));
		if (st->kind == KN_STEP_DEPLOY)
			json_object_set_new(o, "deploy",
					    json_pack("{s:s, s:s}",
						      "deployment",
						      st->deployment, "from",
						      st->from));
		json_array_append_new(steps, o);
	}
	for (size_t i = 0; i < spec->n_steps; i++)
		json_array_append_new(
			order, json_string(spec->steps[spec->order[i]].name));
	return json_pack("{s:s, s:s, s:o, s:o, s:o}", "name", spec->name,
			 "on_failure", on_failure_name(spec->on_failure),
			 "requires", requirements_json(&spec->requires),
			 "steps", steps, "order", order);
}

const char *kn_spec_kind(const char *text, size_t len)
{
	struct fy_document *doc;
	struct fy_node *root, *kind;
	const char *found = NULL, *k;

	bool is_nul;

	if (!text || len > KN_SPEC_MAX_BYTES ||
	    kn_text_bad_byte(text, len, &is_nul) != len)
		return NULL; /* and never to libfyaml: kn_yaml_text_check */
	struct fy_parse_cfg cfg = {.flags = FYPCF_QUIET};
	struct fy_diag_cfg diag_cfg;

	/* Silent: a broken spec is the real parser's to report. */
	fy_diag_cfg_default(&diag_cfg);
	diag_cfg.fp = NULL;
	cfg.diag = fy_diag_create(&diag_cfg);
	if (!cfg.diag)
		return NULL;
	doc = fy_document_build_from_string(&cfg, text, len);
	if (!doc) {
		fy_diag_destroy(cfg.diag);
		return NULL;
	}
	root = fy_document_root(doc);
	kind = root && fy_node_is_mapping(root)
		       ? fy_node_mapping_lookup_by_string(root, "kind", -1)
		       : NULL;
	k = kind && fy_node_is_scalar(kind) ? fy_node_get_scalar0(kind) : NULL;
	if (k && !strcmp(k, "Job"))
		found = "Job";
	else if (k && !strcmp(k, "Deployment"))
		found = "Deployment";
	else if (k && !strcmp(k, "Workflow"))
		found = "Workflow";
	fy_document_destroy(doc);
	fy_diag_destroy(cfg.diag);
	return found;
}

bool kn_spec_name_valid(const char *s)
{
	return s && valid_name(s);
}
