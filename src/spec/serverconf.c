/*
 * spec/serverconf.c: options read from one table, by flag or by config
 * file, and the server's config file itself.
 *
 * A program describes each option once (struct kn_option: name, kind,
 * field, bounds, help); kn_option_set reads a value the same way whether
 * it came from argv or from YAML, so a flag and its file key can never
 * disagree on what they accept. The file is read with the spec walker,
 * so its errors carry file:line:column like every spec's. Sections that
 * are more than a value (signers:, stores:) are read here too: they are
 * lists of named entries with fields of their own.
 */
#include "spec/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A config file has a few dozen keys; this many is no config file. */
#define MAX_OPTIONS 128
/* Signers and stores are a handful each; bound what one file may ask. */
#define MAX_NAMED 64
#define SUGGEST_MAX 2

/* --- string pool ---------------------------------------------------------- */

static void *pool_adopt(struct kn_strpool *pool, void *p)
{
	pool->v = kn_xgrow(pool->v, &pool->cap, pool->n, sizeof(*pool->v));
	pool->v[pool->n++] = p;
	return p;
}

char *kn_strpool_keep(struct kn_strpool *pool, const char *s)
{
	return pool_adopt(pool, kn_xstrdup(s));
}

void kn_strpool_release(struct kn_strpool *pool)
{
	for (size_t i = 0; i < pool->n; i++)
		free(pool->v[i]);
	free(pool->v);
	memset(pool, 0, sizeof(*pool));
}

/* --- one value ------------------------------------------------------------ */

#define FIELD(target, o, type) ((type *)((char *)(target) + (o)->offset))

/* "a duration of at least 1s (e.g. 5m)": what o accepts, for messages. */
static void describe_number(const struct kn_option *o, const char *what,
			    char *buf, size_t size)
{
	char lo[32], hi[32];

	if (o->kind == KN_OPT_DURATION) {
		kn_format_duration(o->min, lo, sizeof(lo));
		kn_format_duration(o->max, hi, sizeof(hi));
	} else if (o->kind == KN_OPT_SIZE) {
		kn_format_size(o->min, lo, sizeof(lo));
		kn_format_size(o->max, hi, sizeof(hi));
	} else {
		snprintf(lo, sizeof(lo), "%lld", (long long)o->min);
		snprintf(hi, sizeof(hi), "%lld", (long long)o->max);
	}
	if (o->kind == KN_OPT_COUNT)
		snprintf(buf, size, "a whole number in %s..%s", lo, hi);
	else if (o->max)
		snprintf(buf, size, "%s%s between %s and %s",
			 o->flags & KN_OPT_ZERO_IS_NONE ? "0 or " : "", what,
			 lo, hi);
	else if (o->min)
		snprintf(buf, size, "%s%s of at least %s",
			 o->flags & KN_OPT_ZERO_IS_NONE ? "0 or " : "", what,
			 lo);
	else
		snprintf(buf, size, "%s%s",
			 o->flags & KN_OPT_ZERO_IS_NONE ? "0 or " : "", what);
}

static int bad_value(const struct kn_option *o, const char *text,
		     const char *allowed, struct kn_error *err)
{
	char quoted[GOT_BUF];

	spec_quote(quoted, sizeof(quoted), text, strlen(text), true);
	return kn_errorf(err, KN_EINVAL, o->name, "%s is not %s%s%s%s",
			 quoted, allowed, o->example ? " (e.g. " : "",
			 o->example ? o->example : "",
			 o->example ? ")" : "");
}

static int set_number(const struct kn_option *o, void *target,
		      const char *text, struct kn_error *err)
{
	char allowed[160];
	int64_t n = 0;
	int rc = 0;

	if (o->kind == KN_OPT_DURATION) {
		describe_number(o, "a duration", allowed, sizeof(allowed));
		if (!((o->flags & KN_OPT_ZERO_IS_NONE) && !strcmp(text, "0")))
			rc = kn_parse_duration(text, &n);
	} else if (o->kind == KN_OPT_SIZE) {
		describe_number(o, "a size", allowed, sizeof(allowed));
		rc = kn_parse_size(text, &n);
	} else {
		describe_number(o, "a number", allowed, sizeof(allowed));
		rc = spec_all_digits(text, "0123456789") &&
				     spec_parse_int64(text, &n) ?
			     0 :
			     -EINVAL;
	}
	if (rc < 0)
		return bad_value(o, text, allowed, err);
	if (n != 0 || !(o->flags & KN_OPT_ZERO_IS_NONE))
		if (n < o->min || (o->max && n > o->max))
			return bad_value(o, text, allowed, err);
	if (o->flags & KN_OPT_INT)
		*FIELD(target, o, int) = (int)n;
	else
		*FIELD(target, o, int64_t) = n;
	return 0;
}

static int set_text(const struct kn_option *o, void *target, const char *text,
		    struct kn_strpool *pool, struct kn_error *err)
{
	if (!text[0] && !(o->flags & KN_OPT_EMPTY_OK))
		return kn_errorf(err, KN_EINVAL, o->name,
				 "must not be empty");
	if (o->kind == KN_OPT_PATH && (o->flags & KN_OPT_ABSOLUTE) &&
	    text[0] != '/')
		return bad_value(o, text, "an absolute path", err);
	if (o->choices) {
		const char *const *c;
		char allowed[256];
		size_t used = 0;

		for (c = o->choices; *c; c++)
			if (!strcmp(*c, text)) {
				*FIELD(target, o, const char *) = *c;
				return 0;
			}
		allowed[0] = '\0';
		for (c = o->choices; *c && used < sizeof(allowed); c++) {
			int k = snprintf(allowed + used, sizeof(allowed) - used,
					 "%s%s", c == o->choices ? "" :
					 c[1] ? ", " : " or ", *c);
			if (k > 0)
				used += (size_t)k;
		}
		return bad_value(o, text, allowed, err);
	}
	*FIELD(target, o, const char *) = kn_strpool_keep(pool, text);
	return 0;
}

/* Lists grow by copy: the pool frees the old arrays with the rest. */
static void list_append(const struct kn_option *o, void *target,
			const char *text, struct kn_strpool *pool)
{
	const char ***items = FIELD(target, o, const char **);
	size_t *n = (size_t *)((char *)target + o->count_offset);
	const char **grown = kn_xcalloc(*n + 2, sizeof(*grown));

	if (*n)
		memcpy(grown, *items, *n * sizeof(*grown));
	grown[*n] = kn_strpool_keep(pool, text);
	*items = pool_adopt(pool, grown);
	(*n)++;
}

int kn_option_set(const struct kn_option *o, void *target, const char *text,
		  struct kn_strpool *pool, struct kn_error *err)
{
	if (o->set)
		return o->set(o, target, text, pool, err);
	switch (o->kind) {
	case KN_OPT_STRING:
	case KN_OPT_PATH:
		return set_text(o, target, text, pool, err);
	case KN_OPT_DURATION:
	case KN_OPT_SIZE:
	case KN_OPT_COUNT:
		return set_number(o, target, text, err);
	case KN_OPT_BOOL: {
		bool on;

		if (!strcmp(text, "true"))
			on = true;
		else if (!strcmp(text, "false"))
			on = false;
		else
			return bad_value(o, text, "true or false", err);
		*FIELD(target, o, bool) = (o->flags & KN_OPT_CLEARS) ? !on : on;
		return 0;
	}
	case KN_OPT_LIST:
		if (!text[0])
			return kn_errorf(err, KN_EINVAL, o->name,
					 "must not be empty");
		list_append(o, target, text, pool);
		return 0;
	}
	return kn_errorf(err, KN_EINVAL, o->name, "unknown option kind");
}

/* A string as YAML reads it back: JSON's quoting is YAML's too. */
static void show_string(const char *text, struct kn_buf *out)
{
	json_t *j = json_string(text);
	char *quoted = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;

	kn_buf_printf(out, "%s", quoted ? quoted : "~");
	free(quoted);
	json_decref(j);
}

/* The largest unit that keeps the value whole: 90s, 5m, 6h, 250ms. */
static void show_duration(int64_t ms, struct kn_buf *out)
{
	static const struct { int64_t ms; const char *unit; } units[] = {
		{86400000, "d"}, {3600000, "h"}, {60000, "m"}, {1000, "s"},
	};

	for (size_t i = 0; ms && i < sizeof(units) / sizeof(units[0]); i++)
		if (ms % units[i].ms == 0) {
			kn_buf_printf(out, "%lld%s",
				      (long long)(ms / units[i].ms),
				      units[i].unit);
			return;
		}
	kn_buf_printf(out, ms ? "%lldms" : "0", (long long)ms);
}

void kn_option_show(const struct kn_option *o, const void *target,
		    struct kn_buf *out)
{
	void *t = (void *)target;
	char size[32];

	if (o->show) {
		o->show(o, target, out);
		return;
	}
	switch (o->kind) {
	case KN_OPT_STRING:
	case KN_OPT_PATH:
		if (*FIELD(t, o, const char *))
			show_string(*FIELD(t, o, const char *), out);
		else
			kn_buf_printf(out, "~");
		break;
	case KN_OPT_DURATION:
		show_duration(*FIELD(t, o, int64_t), out);
		break;
	case KN_OPT_SIZE:
		kn_format_size(*FIELD(t, o, int64_t), size, sizeof(size));
		kn_buf_printf(out, "%s", size);
		break;
	case KN_OPT_COUNT:
		kn_buf_printf(out, "%lld", (o->flags & KN_OPT_INT) ?
				   (long long)*FIELD(t, o, int) :
				   (long long)*FIELD(t, o, int64_t));
		break;
	case KN_OPT_BOOL:
		kn_buf_printf(out, "%s", *FIELD(t, o, bool) !=
				   !!(o->flags & KN_OPT_CLEARS) ? "true" :
								  "false");
		break;
	case KN_OPT_LIST: {
		const char **items = *FIELD(t, o, const char **);
		size_t n = *(size_t *)((char *)t + o->count_offset);

		kn_buf_printf(out, "[");
		for (size_t i = 0; i < n; i++) {
			kn_buf_printf(out, i ? ", " : "");
			show_string(items[i], out);
		}
		kn_buf_printf(out, "]");
		break;
	}
	}
}

void kn_option_clear(const struct kn_option *o, void *target)
{
	if (o->kind != KN_OPT_LIST)
		return;
	*FIELD(target, o, const char **) = NULL;
	*(size_t *)((char *)target + o->count_offset) = 0;
}

const struct kn_option *kn_option_find(const struct kn_option *opts,
				       size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(opts[i].name, name))
			return &opts[i];
	return NULL;
}

/* --- signers: and stores: ------------------------------------------------- */

/* Token roles, weakest first: who a signer may grant. */
static const char *const signer_roles[] = {"viewer", "user", "operator",
					   "admin", NULL};

static int read_entry_name(struct walk *w, struct fy_node *node,
			   void *target)
{
	return spec_read_name_into(w, node, NULL, (char **)target);
}

static int read_roles(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_signer_conf *s = target;
	char **roles = NULL;
	size_t n = 0;
	int rc = spec_read_text_list(w, node, "a list of roles", false, &roles,
				     &n);

	s->roles = roles;
	s->n_roles = n;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		const char *const *r = signer_roles;

		while (*r && strcmp(*r, roles[i]))
			r++;
		if (!*r) {
			size_t mark = spec_path_push_index(w, (int)i);

			rc = spec_fail(w, fy_node_sequence_get_by_index(
					       node, (int)i),
				       "\"%s\" is not a role: "
				       "viewer, user, operator or admin",
				       roles[i]);
			spec_path_pop(w, mark);
		}
	}
	return rc;
}

static const struct field signer_fields[] = {
	{.name = "name", .type = FT_CUSTOM, .required = true,
	 .offset = offsetof(struct kn_signer_conf, name),
	 .read = read_entry_name},
	{.name = "key-file", .type = FT_TEXT, .required = true,
	 .offset = offsetof(struct kn_signer_conf, key_file)},
	{.name = "roles", .type = FT_CUSTOM, .read = read_roles},
	{.name = "tokens", .type = FT_TEXT_LIST,
	 .offset = offsetof(struct kn_signer_conf, tokens),
	 .count_offset = offsetof(struct kn_signer_conf, n_tokens),
	 .allowed = "a list of token names"},
};

/* credential: {env: NAME} or {file: PATH}, exactly one. */
static int read_credential(struct walk *w, struct fy_node *node,
			   void *target)
{
	static const struct field fields[] = {
		{.name = "env", .type = FT_TEXT,
		 .offset = offsetof(struct kn_store_conf, credential_env)},
		{.name = "file", .type = FT_TEXT,
		 .offset = offsetof(struct kn_store_conf, credential_file)},
	};
	struct kn_store_conf *st = target;
	int rc = spec_walk_mapping(w, node, fields, ARRAY_SIZE(fields), st,
				   NULL);

	if (rc)
		return rc;
	if (!!st->credential_env == !!st->credential_file)
		return spec_fail(w, node, "give exactly one of env: (a "
				 "variable's name) or file: (a 0600 file)");
	if (st->credential_env &&
	    !spec_all_digits(st->credential_env,
			     "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
			     "0123456789_"))
		return spec_fail(w, node, "env: \"%s\" is not a variable "
				 "name", st->credential_env);
	if (st->credential_file && st->credential_file[0] != '/')
		return spec_fail(w, node, "file: \"%s\" is not an absolute "
				 "path", st->credential_file);
	return 0;
}

static int read_store_url(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_store_conf *st = target;
	struct value v;
	int rc = spec_want_nonempty_text(w, node, "a store URL", &v);

	if (rc)
		return rc;
	if (strncmp(v.text, "file:///", 8) != 0 &&
	    strncmp(v.text, "https://", 8) != 0 &&
	    strncmp(v.text, "http://", 7) != 0)
		return spec_fail(w, node, "must be file:///DIR or an Azure "
				 "Blob https:// URL; got \"%s\"", v.text);
	st->url = kn_xstrdup(v.text);
	return 0;
}

static const struct field store_fields[] = {
	{.name = "name", .type = FT_CUSTOM, .required = true,
	 .offset = offsetof(struct kn_store_conf, name),
	 .read = read_entry_name},
	{.name = "url", .type = FT_CUSTOM, .required = true,
	 .read = read_store_url},
	{.name = "credential", .type = FT_CUSTOM, .read = read_credential},
};

/* Where the items of one section go. */
struct named_list {
	const struct field *fields;
	size_t n_fields;
	size_t item_size;
	char *items; /* n * item_size */
	size_t *n;
};

/* Each entry's name is its first member. */
static const char *entry_name(const struct named_list *l, size_t i)
{
	return *(char **)(l->items + i * l->item_size);
}

static int read_named_item(struct walk *w, struct fy_node *item, size_t i,
			   void *ctx)
{
	struct named_list *l = ctx;
	void *entry = l->items + i * l->item_size;
	int rc = spec_walk_mapping(w, item, l->fields, l->n_fields, entry,
				   NULL);

	*l->n = i + 1;
	if (rc)
		return rc;
	if (l->fields == signer_fields) {
		const struct kn_signer_conf *s = entry;

		if (!s->n_roles && !s->n_tokens)
			return spec_fail(w, item, "grants no one: give roles: "
					 "or tokens: (or both)");
	}
	for (size_t j = 0; j < i; j++)
		if (!strcmp(entry_name(l, j), entry_name(l, i)))
			return spec_fail(w, item, "a second entry named \"%s\"",
					 entry_name(l, i));
	return 0;
}

static int read_named_list(struct walk *w, struct fy_node *node,
			   struct named_list *l)
{
	char allowed[80];
	size_t count;
	int rc;

	snprintf(allowed, sizeof(allowed),
		 "a list of at most %d entries, each a mapping with name:",
		 MAX_NAMED);
	rc = spec_want_list(w, node, 0, MAX_NAMED, allowed, &count);
	if (rc)
		return rc;
	l->items = kn_xcalloc(count + 1, l->item_size);
	return spec_walk_items(w, node, count, read_named_item, l);
}

void kn_server_conf_release(struct kn_server_conf *conf)
{
	for (size_t i = 0; i < conf->n_signers; i++) {
		struct kn_signer_conf *s = &conf->signers[i];

		KN_FREE_ALL(s->name, s->key_file);
		spec_free_strv(s->roles, s->n_roles);
		spec_free_strv(s->tokens, s->n_tokens);
	}
	for (size_t i = 0; i < conf->n_stores; i++) {
		struct kn_store_conf *st = &conf->stores[i];

		KN_FREE_ALL(st->name, st->url, st->credential_env,
			    st->credential_file);
	}
	KN_FREE_ALL(conf->signers, conf->stores);
	memset(conf, 0, sizeof(*conf));
}

/* --- the document ---------------------------------------------------------- */

struct conf_read {
	const struct kn_option *opts;
	size_t n_opts;
	void *target;
	struct kn_strpool *pool;
	bool sections; /* signers: and stores: are keys too */
	struct kn_server_conf conf;
	struct fy_node *seen[MAX_OPTIONS + 3]; /* options, signers, stores,
						  tls */
	struct kn_option_origin where[MAX_OPTIONS]; /* the options' keys */
};

/* The key for slot is given: remember where, for twice() and origins. */
static void mark_seen(struct conf_read *c, size_t slot, struct fy_node *key)
{
	c->seen[slot] = key;
	if (slot < c->n_opts &&
	    !spec_scalar_position(key, &c->where[slot].line,
				  &c->where[slot].column))
		c->where[slot] = (struct kn_option_origin){1, 1};
}

/* One option's value: scalars as text, lists item by item. */
static int read_option(struct walk *w, struct conf_read *c,
		       const struct kn_option *o, struct fy_node *node)
{
	struct kn_error verr;
	struct value v;
	int rc;

	if (o->kind == KN_OPT_LIST) {
		char **items = NULL;
		size_t n = 0;

		rc = spec_read_text_list(w, node, "a list of strings", false,
					 &items, &n);
		if (rc == 0)
			kn_option_clear(o, c->target);
		for (size_t i = 0; rc == 0 && i < n; i++) {
			if (kn_option_set(o, c->target, items[i], c->pool,
					  &verr) < 0) {
				spec_path_push_index(w, (int)i);
				rc = spec_fail(w, node, "%s", verr.message);
			}
		}
		spec_free_strv(items, n);
		return rc;
	}
	rc = spec_classify(w, node, &v);
	if (rc)
		return rc;
	/* ~ is how a string without a value is shown: the default holds. */
	if (v.kind == V_NULL &&
	    (o->kind == KN_OPT_STRING || o->kind == KN_OPT_PATH))
		return 0;
	if (o->kind == KN_OPT_BOOL && v.kind != V_BOOL) {
		char got[GOT_BUF];

		return spec_fail(w, node, "must be true or false; got %s",
				 spec_describe(&v, got, sizeof(got)));
	}
	rc = spec_want_text(w, node, o->kind == KN_OPT_BOOL, "a value", &v);
	if (rc)
		return rc;
	if (kn_option_set(o, c->target, v.text, c->pool, &verr) < 0)
		return spec_fail(w, node, "%s", verr.message);
	return 0;
}

static int unknown_key(struct walk *w, struct conf_read *c,
		       struct fy_node *key, const char *name)
{
	const char *hint = NULL;
	int best = SUGGEST_MAX + 1;

	for (size_t i = 0; strlen(name) <= 64 && i < c->n_opts; i++) {
		int d = kn_levenshtein(name, c->opts[i].name);

		if (d < best) {
			best = d;
			hint = c->opts[i].name;
		}
	}
	spec_path_push_field(w, name);
	return spec_fail_bare(w, key, "unknown key \"%s\"%s%s%s", name,
			      hint ? "; did you mean \"" : "",
			      hint ? hint : "", hint ? "\"?" : "");
}

/* The key for slot was given before (at seen[slot]): refused. */
static int twice(struct walk *w, struct conf_read *c, size_t slot,
		 struct fy_node *key, const char *name)
{
	int line, col;

	spec_scalar_position(c->seen[slot], &line, &col);
	spec_path_push_field(w, name);
	return spec_fail_bare(w, key, "%s: given twice (first at %d:%d)", name,
			      line, col);
}

/* The keys of a tls: mapping and the options they stand for. */
static const struct {
	const char *key, *option;
} tls_keys[] = {
	{"cert", "tls-cert"},
	{"key", "tls-key"},
	{"client_ca", "tls-client-ca"},
	{"client_roles", "tls-client-role"},
	{"self_signed", "tls-self-signed"},
	{"insecure", "insecure"},
};

/* "cert, key, ...": the tls: keys this program's options have. */
static void tls_key_names(const struct conf_read *c, char *buf, size_t size)
{
	size_t used = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < ARRAY_SIZE(tls_keys) && used < size; i++)
		if (kn_option_find(c->opts, c->n_opts, tls_keys[i].option))
			used += (size_t)snprintf(buf + used, size - used,
						 "%s%s", used ? ", " : "",
						 tls_keys[i].key);
}

/* The option a tls: key stands for in this program, or NULL. */
static const struct kn_option *tls_option(const struct conf_read *c,
					  const char *key)
{
	for (size_t i = 0; i < ARRAY_SIZE(tls_keys); i++)
		if (!strcmp(key, tls_keys[i].key))
			return kn_option_find(c->opts, c->n_opts,
					      tls_keys[i].option);
	return NULL;
}

/*
 * tls: {cert, key, client_ca, client_roles, self_signed, insecure}: the
 * tls-* options (and insecure) grouped, each read as that option; one
 * given both ways is given twice. A program offers the keys whose
 * options it has.
 */
static int read_tls(struct walk *w, struct conf_read *c, struct fy_node *node)
{
	struct fy_node_pair *pair;
	void *iter = NULL;
	char keys[128];
	struct value v;
	int rc = spec_classify(w, node, &v);

	if (rc)
		return rc;
	tls_key_names(c, keys, sizeof(keys));
	if (v.kind != V_MAP)
		return spec_fail(w, node, "a mapping of %s", keys);
	while ((pair = fy_node_mapping_iterate(node, &iter))) {
		struct fy_node *key = fy_node_pair_key(pair);
		const struct kn_option *o;
		size_t mark;

		if ((rc = spec_read_key(w, key, &v)))
			return rc;
		o = tls_option(c, v.text);
		if (!o) {
			spec_path_push_field(w, v.text);
			return spec_fail_bare(w, key, "unknown key \"%s\" (%s)",
					      v.text, keys);
		}
		if (c->seen[o - c->opts])
			return twice(w, c, (size_t)(o - c->opts), key, v.text);
		mark_seen(c, (size_t)(o - c->opts), key);
		mark = spec_path_push_field(w, v.text);
		if ((rc = read_option(w, c, o, fy_node_pair_value(pair))))
			return rc;
		spec_path_pop(w, mark);
	}
	return 0;
}

static int read_pair(struct walk *w, struct conf_read *c,
		     struct fy_node_pair *pair)
{
	struct fy_node *key = fy_node_pair_key(pair);
	struct fy_node *value = fy_node_pair_value(pair);
	const struct kn_option *o;
	struct value v;
	size_t slot, mark;
	int rc = spec_read_key(w, key, &v);

	if (rc)
		return rc;
	o = kn_option_find(c->opts, c->n_opts, v.text);
	if (o)
		slot = (size_t)(o - c->opts);
	else if (c->sections && !strcmp(v.text, "signers"))
		slot = c->n_opts;
	else if (c->sections && !strcmp(v.text, "stores"))
		slot = c->n_opts + 1;
	else if (!strcmp(v.text, "tls"))
		slot = c->n_opts + 2;
	else
		return unknown_key(w, c, key, v.text);
	if (c->seen[slot])
		return twice(w, c, slot, key, v.text);
	mark_seen(c, slot, key);
	mark = spec_path_push_field(w, v.text);
	w->key = key;
	if (o) {
		rc = read_option(w, c, o, value);
	} else if (slot == c->n_opts + 2) {
		rc = read_tls(w, c, value);
	} else if (slot == c->n_opts) {
		struct named_list l = {signer_fields, ARRAY_SIZE(signer_fields),
				       sizeof(struct kn_signer_conf), NULL,
				       &c->conf.n_signers};

		rc = read_named_list(w, value, &l);
		c->conf.signers = (struct kn_signer_conf *)l.items;
	} else {
		struct named_list l = {store_fields, ARRAY_SIZE(store_fields),
				       sizeof(struct kn_store_conf), NULL,
				       &c->conf.n_stores};

		rc = read_named_list(w, value, &l);
		c->conf.stores = (struct kn_store_conf *)l.items;
	}
	w->key = NULL;
	if (rc == 0)
		spec_path_pop(w, mark);
	return rc;
}

static int read_conf_root(struct walk *w, struct fy_node *root, void *obj)
{
	struct conf_read *c = obj;
	struct fy_node_pair *pair;
	void *iter = NULL;
	char got[GOT_BUF];
	struct value v;
	int rc;

	w->root_name = "config";
	if (!root)
		return 0;
	rc = spec_classify(w, root, &v);
	if (rc)
		return rc;
	if (v.kind != V_MAP)
		return spec_fail(w, root, "a config file is a mapping of "
				 "option names to values; got %s",
				 spec_describe(&v, got, sizeof(got)));
	while ((pair = fy_node_mapping_iterate(root, &iter)))
		if ((rc = read_pair(w, c, pair)))
			return rc;
	return 0;
}

/* The options, and with out the sections signers: and stores:. */
static int conf_parse(const char *text, size_t len, const char *filename,
		      const struct kn_option *opts, size_t n_opts,
		      void *target, struct kn_strpool *pool,
		      struct kn_server_conf *out,
		      struct kn_option_origin *origins, struct kn_error *err)
{
	struct conf_read *c;
	int rc;

	if (n_opts > MAX_OPTIONS)
		return kn_errorf(err, KN_EINVAL, NULL, "%zu options; at most %d",
				 n_opts, MAX_OPTIONS);
	c = kn_xcalloc(1, sizeof(*c));
	c->opts = opts;
	c->n_opts = n_opts;
	c->target = target;
	c->pool = pool;
	c->sections = out != NULL;
	rc = spec_parse_document(text, len, filename, NULL, read_conf_root, c,
				 err);
	if (rc == 0 && origins)
		memcpy(origins, c->where, n_opts * sizeof(*origins));
	if (rc == 0 && out)
		*out = c->conf;
	else
		kn_server_conf_release(&c->conf);
	free(c);
	return rc;
}

int kn_server_conf_parse(const char *text, size_t len, const char *filename,
			 const struct kn_option *opts, size_t n_opts,
			 void *target, struct kn_strpool *pool,
			 struct kn_server_conf *out,
			 struct kn_option_origin *origins, struct kn_error *err)
{
	return conf_parse(text, len, filename, opts, n_opts, target, pool,
			  out, origins, err);
}

int kn_option_conf_parse(const char *text, size_t len, const char *filename,
			 const struct kn_option *opts, size_t n_opts,
			 void *target, struct kn_strpool *pool,
			 struct kn_option_origin *origins,
			 struct kn_error *err)
{
	return conf_parse(text, len, filename, opts, n_opts, target, pool,
			  NULL, origins, err);
}
