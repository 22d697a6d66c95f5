/*
 * spec walk: YAML documents read through field tables, with errors that
 * point at the node.
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
 * core schema, so `tasks: "4"` is a string and an error. Every kind of
 * spec is read with this walk; each builds its object on the heap as it
 * goes and frees it on any error, so *out is written only on success.
 */
#include "spec/internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A "did you mean" only for near misses. */
#define SUGGEST_MAX_DISTANCE 2

static const char DURATION_ALLOWED[] =
	"a duration such as 90s, 5m or 1h30m, at most 3650d";

/* --- text checks ------------------------------------------------------ */

/*
 * Append s to buf as it would appear in a message: escaped, cut after
 * GOT_MAX bytes on a character boundary, quoted when asked.
 */
void spec_quote(char *buf, size_t size, const char *s, size_t len,
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
		size_t n =
			kn_utf8_seq_len((const unsigned char *)s + i, len - i);

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

bool spec_scalar_position(struct fy_node *node, int *line, int *col)
{
	if (!kn_yaml_scalar_start(node, line, col))
		return false;
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
	if (spec_scalar_position(node, line, col))
		return;
	if (node && !fy_node_is_scalar(node) &&
	    kn_yaml_node_position(w->diag, node, line, col))
		return;
	if (spec_scalar_position(w->key, line, col))
		return;
	*line = 1;
	*col = 1;
}

/*
 * Fill w->err with "file:line:col: path: message" (or without "path: "
 * when with_path is false) and return -EINVAL. err->field is the path.
 */
int spec_vfail(struct walk *w, struct fy_node *node, bool with_path,
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

int
spec_fail(struct walk *w, struct fy_node *node, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = spec_vfail(w, node, true, fmt, ap);
	va_end(ap);
	return rc;
}

int
spec_fail_bare(struct walk *w, struct fy_node *node, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = spec_vfail(w, node, false, fmt, ap);
	va_end(ap);
	return rc;
}

/* Field paths: push returns the length to pop back to. */
size_t spec_path_push(struct walk *w, const char *fmt, ...)
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

size_t spec_path_push_field(struct walk *w, const char *name)
{
	return spec_path_push(w, "%s%s", w->path_len ? "." : "", name);
}

size_t spec_path_push_index(struct walk *w, int index)
{
	return spec_path_push(w, "[%d]", index);
}

void spec_path_pop(struct walk *w, size_t old)
{
	w->path_len = old;
	w->path[old] = '\0';
}

/* The kind at the top, else the path: for "unknown field ... in X". */
const char *spec_section_name(const struct walk *w)
{
	return w->path_len ? w->path : w->root_name ? w->root_name : "job";
}

/* --- typing ------------------------------------------------------------ */

bool spec_all_digits(const char *s, const char *accept)
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
		return spec_all_digits(s + 2, "01234567");
	if (strncmp(s, "0x", 2) == 0)
		return spec_all_digits(s + 2, "0123456789abcdefABCDEF");
	if (*s == '-' || *s == '+')
		s++;
	return spec_all_digits(s, "0123456789");
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
int spec_classify(struct walk *w, struct fy_node *node, struct value *v)
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
		return spec_fail(w, node,
				 "aliases (*name) are not supported; write the "
				 "value out");
	if (fy_node_get_tag(node, NULL))
		return spec_fail(w, node,
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
		return spec_fail(w, node, "out of memory reading the value");
	if (kn_text_bad_byte(text, len, &is_nul) != len)
		return spec_fail(w, node, "%s",
				 is_nul ? "value contains a NUL character" :
				     "value is not valid UTF-8");
	v->text = text;
	v->len = len;
	v->kind = fy_node_get_style(node) == FYNS_PLAIN ? plain_kind(text) :
							  V_STRING;
	return 0;
}

/* The "got ..." part of a message. */
const char *spec_describe(const struct value *v, char *buf, size_t size)
{
	switch (v->kind) {
	case V_NULL:
		return "null";
	case V_MAP:
		return v->count ? "a mapping" : "an empty mapping";
	case V_LIST:
		return v->count ? "a list" : "an empty list";
	case V_STRING:
		spec_quote(buf, size, v->text, v->len, true);
		return buf;
	default:
		spec_quote(buf, size, v->text, v->len, false);
		return buf;
	}
}

/* A value where text is wanted: strings, and numbers as written. */
int spec_want_text(struct walk *w, struct fy_node *node, bool allow_bool,
		     const char *allowed, struct value *v)
{
	char got[GOT_BUF];
	int rc = spec_classify(w, node, v);

	if (rc)
		return rc;
	if (v->kind == V_STRING || v->kind == V_INT || v->kind == V_FLOAT ||
	    (allow_bool && v->kind == V_BOOL))
		return 0;
	return spec_fail(w, node, "must be %s; got %s", allowed,
			 spec_describe(v, got, sizeof(got)));
}

int spec_want_list(struct walk *w, struct fy_node *node, int min, int max,
		   const char *allowed, size_t *count)
{
	char got[GOT_BUF];
	struct value v;
	int rc = spec_classify(w, node, &v);

	if (rc)
		return rc;
	if (v.kind != V_LIST || v.count < min || (max >= 0 && v.count > max))
		return spec_fail(w, node, "must be %s; got %s", allowed,
				 spec_describe(&v, got, sizeof(got)));
	*count = (size_t)v.count;
	return 0;
}

int spec_want_nonempty_text(struct walk *w, struct fy_node *node,
			      const char *allowed, struct value *v)
{
	int rc = spec_want_text(w, node, false, allowed, v);

	if (rc)
		return rc;
	if (v->len == 0)
		return spec_fail(w, node, "must be %s; got an empty string",
				 allowed);
	return 0;
}

/*
 * Decimal text ("2", "0.5", ".25") in thousandths, at most max_milli.
 * Trailing zeros past the third decimal are fine ("0.5000").
 */
enum milli_result spec_parse_milli(const char *s, int64_t max_milli,
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

int spec_read_thousandths(struct walk *w, struct fy_node *node,
			  int64_t max_milli, const char *counted,
			  struct value *v, int64_t *milli)
{
	char got[GOT_BUF];
	int rc = spec_classify(w, node, v);

	if (rc)
		return rc;
	if (v->kind != V_INT && v->kind != V_FLOAT)
		return 1;
	switch (spec_parse_milli(v->text, max_milli, milli)) {
	case MILLI_OK:
		return 0;
	case MILLI_TOO_FINE:
		if (!counted)
			break;
		return spec_fail(w, node,
				 "%s counted in thousandths (0.001 steps); "
				 "got %s",
				 counted, spec_describe(v, got, sizeof(got)));
	case MILLI_SYNTAX:
	case MILLI_TOO_BIG:
		break;
	}
	return 1;
}

/* Decimal integer; false on syntax or overflow. */
bool spec_parse_int64(const char *s, int64_t *out)
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

int spec_read_int_field(struct walk *w, const struct field *f,
			  struct fy_node *node, void *target)
{
	char got[GOT_BUF];
	struct value v;
	int64_t n;
	int rc = spec_classify(w, node, &v);

	if (rc)
		return rc;
	if (v.kind != V_INT || !spec_parse_int64(v.text, &n) || n < f->min ||
	    n > f->max)
		return spec_fail(w, node,
				 "must be an integer %lld..%lld; got %s",
				 (long long)f->min, (long long)f->max,
				 spec_describe(&v, got, sizeof(got)));
	*(int *)((char *)target + f->offset) = (int)n;
	return 0;
}

int spec_read_bool_field(struct walk *w, const struct field *f,
			   struct fy_node *node, void *target)
{
	char got[GOT_BUF];
	struct value v;
	int rc = spec_classify(w, node, &v);

	if (rc)
		return rc;
	if (v.kind != V_BOOL)
		return spec_fail(w, node, "must be true or false; got %s",
				 spec_describe(&v, got, sizeof(got)));
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
	bool parsed, in_range;
	int rc = spec_classify(w, node, &v);

	if (rc)
		return rc;
	parsed = (f->zero_is_none && v.kind == V_INT &&
		  strcmp(v.text, "0") == 0) ||
		 (v.kind == V_STRING && kn_parse_duration(v.text, &ms) == 0);
	in_range = ms >= f->min && (f->max == 0 || ms <= f->max);
	if (f->allowed && !(parsed && in_range))
		return spec_fail(w, node, "must be %s; got %s", f->allowed,
				 spec_describe(&v, got, sizeof(got)));
	if (!parsed)
		return spec_fail(w, node, "must be %s%s; got %s",
				 DURATION_ALLOWED,
				 f->zero_is_none ? " (0 for none)" : "",
				 spec_describe(&v, got, sizeof(got)));
	if (!in_range)
		return spec_fail(
			w, node,
			"must be a duration greater than 0 (e.g. 90s or "
			"5m); got %s",
			spec_describe(&v, got, sizeof(got)));
	*(int64_t *)((char *)target + f->offset) = ms;
	return 0;
}

static int read_text_field(struct walk *w, const struct field *f,
			   struct fy_node *node, void *target)
{
	char **slot = (char **)((char *)target + f->offset);
	struct value v;
	int rc = spec_want_nonempty_text(
		w, node, f->allowed ? f->allowed : "a non-empty string", &v);

	if (rc)
		return rc;
	*slot = kn_xstrdup(v.text);
	return 0;
}

static int read_text_list_field(struct walk *w, const struct field *f,
				struct fy_node *node, void *target)
{
	char ***list = (char ***)((char *)target + f->offset);
	size_t *n = (size_t *)((char *)target + f->count_offset);

	return spec_read_text_list(w, node, f->allowed, false, list, n);
}

static int read_field(struct walk *w, const struct field *f,
		      struct fy_node *node, void *target)
{
	switch (f->type) {
	case FT_INT:
		return spec_read_int_field(w, f, node, target);
	case FT_BOOL:
		return spec_read_bool_field(w, f, node, target);
	case FT_DURATION:
		return read_duration_field(w, f, node, target);
	case FT_TEXT:
		return read_text_field(w, f, node, target);
	case FT_TEXT_LIST:
		return read_text_list_field(w, f, node, target);
	case FT_CUSTOM:
		break;
	}
	return f->read(w, node, target);
}

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
	all = spec_job_sections(&n_sections);
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
int spec_read_key(struct walk *w, struct fy_node *key, struct value *v)
{
	char got[GOT_BUF];
	int rc = spec_classify(w, key, v);

	if (rc)
		return rc;
	if (v->kind == V_MAP || v->kind == V_LIST || v->kind == V_NULL)
		return spec_fail(w, key, "keys must be names; got %s",
				 spec_describe(v, got, sizeof(got)));
	return 0;
}

static int duplicate_key(struct walk *w, struct fy_node *key,
			 struct fy_node *first, const char *name)
{
	char quoted[GOT_BUF], where[PATH_MAX_LEN];
	int line, col;

	node_position(w, first, &line, &col);
	spec_quote(quoted, sizeof(quoted), name, strlen(name), true);
	snprintf(where, sizeof(where), "%s", spec_section_name(w));
	spec_path_push_field(w, name);
	return spec_fail_bare(w, key, "duplicate key %s in %s (first at %d:%d)",
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
int spec_walk_mapping(struct walk *w, struct fy_node *node,
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

	rc = spec_classify(w, node, &v);
	if (rc)
		return rc;
	if (v.kind != V_MAP) {
		field_list(fields, n_fields, names, sizeof(names));
		return spec_fail(w, node,
				 "must be a mapping with fields %s; got %s",
				 names, spec_describe(&v, got, sizeof(got)));
	}
	while ((pair = fy_node_mapping_iterate(node, &iter))) {
		struct fy_node *key = fy_node_pair_key(pair);
		size_t mark;

		rc = spec_read_key(w, key, &v);
		if (rc)
			return rc;
		for (i = 0; i < n_fields; i++)
			if (strcmp(fields[i].name, v.text) == 0)
				break;
		if (i == n_fields) {
			char quoted[GOT_BUF], hint[128], where[PATH_MAX_LEN];
			bool has_hint = suggest(w, v.text, fields, n_fields,
						hint, sizeof(hint));

			spec_quote(quoted, sizeof(quoted), v.text, v.len,
				   true);
			snprintf(where, sizeof(where), "%s",
				 spec_section_name(w));
			spec_path_push_field(w, v.text);
			return spec_fail_bare(
				w, key, "unknown field %s in %s%s%s%s", quoted,
				where, has_hint ? "; did you mean \"" : "",
				has_hint ? hint : "", has_hint ? "\"?" : "");
		}
		if (found[i])
			return duplicate_key(w, key, fy_node_pair_key(found[i]),
					     fields[i].name);
		found[i] = pair;
		mark = spec_path_push_field(w, fields[i].name);
		w->key = key;
		rc = read_field(w, &fields[i], fy_node_pair_value(pair),
				target);
		w->key = saved_key;
		if (rc)
			return rc;
		spec_path_pop(w, mark);
	}
	for (i = 0; i < n_fields; i++) {
		char where[PATH_MAX_LEN];

		if (!fields[i].required || found[i])
			continue;
		snprintf(where, sizeof(where), "%s", spec_section_name(w));
		spec_path_push_field(w, fields[i].name);
		return spec_fail_bare(w, node,
				      "missing required field \"%s\" in %s",
				      fields[i].name, where);
	}
	if (seen)
		memcpy(seen, found, n_fields * sizeof(found[0]));
	return 0;
}

/* --- string maps: env and placement.selector ----------------------------- */


/* A map key and where it stands, for finding repeats. */
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
int spec_read_string_map(struct walk *w, struct fy_node *node,
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

	rc = spec_classify(w, node, &v);
	if (rc)
		return rc;
	if (v.kind != V_MAP)
		return spec_fail(w, node, "must be a mapping of %s; got %s",
				 what, spec_describe(&v, got, sizeof(got)));
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

		rc = spec_read_key(w, key, &v);
		if (rc)
			goto out;
		problem = key_problem(v.text);
		if (problem) {
			char quoted[GOT_BUF];

			spec_quote(quoted, sizeof(quoted), v.text, v.len, true);
			rc = spec_fail(w, key, "%s %s", quoted, problem);
			goto out;
		}
		mark = spec_path_push_field(w, v.text);
		kvs[n].key = kn_xstrdup(v.text);
		key_nodes[n] = key;
		w->key = key;
		rc = spec_want_text(w, fy_node_pair_value(pair), true,
				    "a string, number or boolean", &v);
		w->key = saved_key;
		if (rc) {
			free(kvs[n].key);
			kvs[n].key = NULL;
			goto out;
		}
		kvs[n].value = kn_xstrdup(v.text);
		*n_out = ++n;
		spec_path_pop(w, mark);
	}
	rc = check_duplicates(w, kvs, key_nodes, n);
out:
	w->key = saved_key;
	free(key_nodes);
	return rc;
}

/* --- fields every kind has ---------------------------------------------- */

/* node is the text kind ("Job", "Deployment"). */
int spec_check_kind(struct walk *w, struct fy_node *node, const char *kind)
{
	char got[GOT_BUF], quoted[32];
	struct value v;
	int rc;

	snprintf(quoted, sizeof(quoted), "\"%s\"", kind);
	rc = spec_want_text(w, node, false, quoted, &v);
	if (rc)
		return rc;
	if (strcmp(v.text, kind) != 0)
		return spec_fail(w, node, "must be %s; got %s", quoted,
				 spec_describe(&v, got, sizeof(got)));
	return 0;
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
			size_t mark = spec_path_push_field(w, "kind");

			w->key = key;
			rc = spec_check_kind(w, fy_node_pair_value(pair), kind);
			w->key = NULL;
			if (rc)
				return rc;
			spec_path_pop(w, mark);
			return 0;
		}
	}
	spec_path_push_field(w, "kind");
	return spec_fail_bare(
		w, root, "missing required field \"kind\" in %s (kind: %s)",
		root_name, kind);
}

int spec_read_root(struct walk *w, struct fy_node *root,
		   const struct spec_kind *kind, void *target,
		   struct fy_node_pair **seen)
{
	char got[GOT_BUF], names[320];
	struct value v;
	int rc = spec_classify(w, root, &v);

	if (rc)
		return rc;
	if (v.kind != V_MAP) {
		field_list(kind->fields, kind->n_fields, names, sizeof(names));
		return spec_fail(w, root,
				 "%s must be a mapping with fields %s; got %s",
				 kind->what, names,
				 spec_describe(&v, got, sizeof(got)));
	}
	rc = check_kind_first(w, root, kind->kind, kind->root_name);
	if (rc)
		return rc;
	return spec_walk_mapping(w, root, kind->fields, kind->n_fields, target,
				 seen);
}

int spec_read_api_version(struct walk *w, struct fy_node *node,
			    void *target)
{
	char got[GOT_BUF];
	struct value v;
	int rc = spec_want_text(w, node, false, "\"kiln/v1\"", &v);

	if (rc)
		return rc;
	if (strcmp(v.text, "kiln/v1") != 0)
		return spec_fail(w, node, "must be \"kiln/v1\"; got %s",
				 spec_describe(&v, got, sizeof(got)));
	return 0;
}

bool spec_valid_name(const char *s)
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

int spec_read_name_into(struct walk *w, struct fy_node *node,
			const char *allowed, char **out)
{
	char got[GOT_BUF];
	struct value v;
	int rc;

	if (!allowed)
		allowed = "1 to 63 characters: lowercase letters, digits, "
			  "'.', '_' and '-', starting with a letter or digit";
	rc = spec_want_text(w, node, false, allowed, &v);
	if (rc)
		return rc;
	if (!spec_valid_name(v.text))
		return spec_fail(w, node, "must be %s; got %s", allowed,
				 spec_describe(&v, got, sizeof(got)));
	*out = kn_xstrdup(v.text);
	return 0;
}

int spec_read_name(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_job_spec *spec = target;

	return spec_read_name_into(w, node, NULL, &spec->name);
}

int spec_walk_items(struct walk *w, struct fy_node *node, size_t count,
		    spec_item_fn read_item, void *ctx)
{
	struct fy_node *item;
	void *iter = NULL;

	for (size_t i = 0;
	     i < count && (item = fy_node_sequence_iterate(node, &iter)); i++) {
		size_t mark = spec_path_push_index(w, (int)i);
		int rc = read_item(w, item, i, ctx);

		if (rc)
			return rc;
		spec_path_pop(w, mark);
	}
	return 0;
}

/* Where spec_read_text_list's items go. */
struct text_list {
	char **items;
	size_t *n;
	bool rest_may_be_empty;
};

static int read_text_item(struct walk *w, struct fy_node *item, size_t i,
			  void *target)
{
	struct text_list *list = target;
	struct value v;
	int rc;

	if (i > 0 && list->rest_may_be_empty)
		rc = spec_want_text(w, item, false, "a string", &v);
	else
		rc = spec_want_nonempty_text(w, item, "a non-empty string", &v);
	if (rc)
		return rc;
	list->items[i] = kn_xstrdup(v.text);
	*list->n = i + 1;
	return 0;
}

int spec_read_text_list(struct walk *w, struct fy_node *node,
			const char *allowed, bool rest_may_be_empty,
			char ***out, size_t *n_out)
{
	struct text_list list = {.n = n_out,
				 .rest_may_be_empty = rest_may_be_empty};
	size_t count;
	int rc = spec_want_list(w, node, 1, -1, allowed, &count);

	if (rc)
		return rc;
	list.items = kn_xcalloc(count + 1, sizeof(*list.items));
	*out = list.items;
	*n_out = 0;
	return spec_walk_items(w, node, count, read_text_item, &list);
}

/* Read text that must be one of choices (a NULL-terminated list). */
int spec_read_choice(struct walk *w, struct fy_node *node,
		       const char *const *choices, const char *allowed,
		       const char **out)
{
	char got[GOT_BUF];
	struct value v;
	int rc = spec_classify(w, node, &v);

	if (rc)
		return rc;
	for (; v.kind == V_STRING && *choices; choices++)
		if (strcmp(v.text, *choices) == 0) {
			*out = *choices;
			return 0;
		}
	return spec_fail(w, node, "must be %s; got %s", allowed,
			 spec_describe(&v, got, sizeof(got)));
}

/* Point at pair's value with path name pushed, and fail with msg. */
int
spec_fail_at_pair(struct walk *w, struct fy_node_pair *pair, const char *name,
		  const char *fmt, ...)
{
	va_list ap;
	int rc;

	spec_path_push_field(w, name);
	w->key = fy_node_pair_key(pair);
	va_start(ap, fmt);
	rc = spec_vfail(w, fy_node_pair_value(pair), true, fmt, ap);
	va_end(ap);
	w->key = NULL;
	return rc;
}

/* --- documents ---------------------------------------------------------- */

static int check_text(struct walk *w, const char *text, size_t len)
{
	return kn_yaml_text_check(text, len, w->file, "spec", w->err);
}

/*
 * Check the text, load its one YAML document and hand the root to read.
 * Errors (too big, not UTF-8, bad YAML, two documents, empty) carry
 * file:line:column; what is wrong inside the mapping is read's to say.
 * empty_hint completes "spec is empty; expected ..."; NULL: an empty
 * document is allowed and read gets a NULL root.
 */
int spec_parse_document(const char *text, size_t len, const char *filename,
			const char *empty_hint, spec_read_root_fn read,
			void *obj, struct kn_error *err)
{
	struct walk w = {.file = filename ? filename : "<spec>", .err = err};
	struct fy_document *doc = NULL, *extra = NULL;
	struct fy_parser *parser;
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

	/* Duplicate keys are found by the walk, which knows the field path. */
	rc = kn_yaml_parser_new(text, len, w.file, FYPCF_ALLOW_DUPLICATE_KEYS,
				&w.diag, &parser, err);
	if (rc)
		return rc;
	doc = fy_parse_load_document(parser);
	if (!fy_diag_got_error(w.diag) && doc)
		extra = fy_parse_load_document(parser);
	if (fy_diag_got_error(w.diag)) {
		rc = kn_yaml_parse_error(w.diag, w.file, w.err);
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
	if (!root && !empty_hint) {
		rc = read(&w, NULL, obj);
		goto out;
	}
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
	fy_parser_destroy(parser);
	fy_diag_destroy(w.diag);
	return rc;
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
	else if (k && !strcmp(k, "DevEnvironment"))
		found = "DevEnvironment";
	fy_document_destroy(doc);
	fy_diag_destroy(cfg.diag);
	return found;
}

bool kn_spec_name_valid(const char *s)
{
	return s && spec_valid_name(s);
}
