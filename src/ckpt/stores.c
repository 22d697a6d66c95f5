/*
 * The stores a server may use, and whose credential goes where.
 *
 * A store's credential (an account key, a SAS or a connection string) is
 * the server's, lent to no one: it goes only with requests to the store it
 * was configured for. Every URL a user names (a checkpoint store, an
 * input, a backup target) is matched here against the configured stores
 * by kn_store_url_covers, one function that compares scheme, host, port
 * and path prefix (for Azure: account, container and prefix) after
 * refusing what could make two readers disagree on them: userinfo,
 * fragments, backslashes, percent-encoding, "." and ".." segments. A URL
 * no store covers is opened without any credential, or refused.
 *
 * file:// URLs are where the server's own process reads and creates
 * files, so one no store covers must lie in an allowed root directory,
 * checked both as written and after resolving the links on the part of
 * the path that exists (realpath): a link inside a root cannot lead out.
 *
 * Redirects are never followed (httpc's shared settings), so a store
 * cannot bounce a signed request elsewhere.
 *
 * The rejected alternative was a list of allowed hosts for the global
 * AZURE_STORAGE_* credential: one credential for every store is what let
 * a user's URL borrow it.
 */
#include "ckpt/internal.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/crypto.h>

/* A credential is a key, a SAS or a connection string: a line or two. */
#define CREDENTIAL_MAX (64 * 1024)
/* Stores and roots come from one config file: a handful each. */
#define STORES_MAX 64

enum cred_kind {
	CRED_NONE = 0,
	CRED_SECRET,      /* secret holds a key, a SAS or a connection string */
	CRED_ENVIRONMENT, /* the AZURE_STORAGE_* environment (the default) */
};

struct store_entry {
	char *name;
	char *url;
	enum cred_kind kind;
	char *secret;
	char *cred_env;  /* where secret came from, for the shim */
	char *cred_file;
};

struct kn_stores {
	struct store_entry items[STORES_MAX];
	size_t n;
	char *roots[STORES_MAX]; /* resolved directories */
	size_t n_roots;
	bool allow_unconfigured;
	bool any_file; /* the shim's: the server checked the file URLs */
};

/* ---- the scoping rule ---- */

struct url_parts {
	char scheme[8]; /* "http", "https", "file" */
	const char *host;
	size_t host_len;
	long port;
	const char *path; /* "" or starting with '/' */
	size_t path_len;  /* without a trailing '/' */
};

static bool path_is_plain(const char *p, size_t n)
{
	size_t i = 0;

	while (i < n) {
		size_t seg;

		if (p[i] != '/')
			return false;
		i++;
		seg = 0;
		while (i + seg < n && p[i + seg] != '/')
			seg++;
		if (seg == 0 && i + seg < n)
			return false; /* an empty segment: "//" */
		if ((seg == 1 && p[i] == '.') ||
		    (seg == 2 && p[i] == '.' && p[i + 1] == '.'))
			return false;
		i += seg;
	}
	return true;
}

/*
 * Split an http(s) or file URL; false for anything that two parsers
 * might read differently (those are never inside a store).
 */
static bool split_url(const char *url, struct url_parts *out)
{
	const char *sep = strstr(url, "://"), *auth, *auth_end, *path, *colon;
	size_t scheme_len;

	memset(out, 0, sizeof(*out));
	if (!sep || sep == url || (size_t)(sep - url) >= sizeof(out->scheme))
		return false;
	for (const char *c = url; *c; c++)
		if ((unsigned char)*c <= ' ' || *c == 0x7f || *c == '\\' ||
		    *c == '#' || *c == '%')
			return false;
	scheme_len = (size_t)(sep - url);
	for (size_t i = 0; i < scheme_len; i++)
		out->scheme[i] = (char)tolower((unsigned char)url[i]);
	auth = sep + 3;
	auth_end = auth + strcspn(auth, "/?");
	path = auth_end;
	out->path = path;
	out->path_len = strcspn(path, "?");
	while (out->path_len && path[out->path_len - 1] == '/')
		out->path_len--;
	if (memchr(auth, '@', (size_t)(auth_end - auth)))
		return false;
	if (!strcmp(out->scheme, "file")) {
		/* file:///PATH only: a host would be another machine. */
		return auth == auth_end && *path == '/' &&
		       path_is_plain(path, out->path_len) && !strchr(path, '?');
	}
	if (strcmp(out->scheme, "http") && strcmp(out->scheme, "https"))
		return false;
	out->port = strcmp(out->scheme, "https") ? 80 : 443;
	colon = NULL;
	if (*auth == '[') {
		const char *close = memchr(auth, ']', (size_t)(auth_end - auth));
		if (!close)
			return false;
		if (close + 1 < auth_end) {
			if (close[1] != ':')
				return false;
			colon = close + 1;
		}
	} else {
		colon = memchr(auth, ':', (size_t)(auth_end - auth));
	}
	out->host = auth;
	out->host_len = (size_t)((colon ? colon : auth_end) - auth);
	if (out->host_len == 0)
		return false;
	if (colon) {
		long port = 0;
		const char *d = colon + 1;

		if (d == auth_end || auth_end - d > 5)
			return false;
		for (; d < auth_end; d++) {
			if (!isdigit((unsigned char)*d))
				return false;
			port = port * 10 + (*d - '0');
		}
		if (port < 1 || port > 65535)
			return false;
		out->port = port;
	}
	return path_is_plain(path, out->path_len);
}

bool kn_store_url_covers(const char *store_url, const char *url)
{
	struct url_parts s, u;
	char *plain = NULL;
	bool ok;

	if (!store_url || !url)
		return false;
	/* The store's own URL may carry its SAS; that is not its path. */
	if (strchr(store_url, '?'))
		store_url = plain = strndup(store_url, strcspn(store_url, "?"));
	ok = split_url(store_url, &s) && split_url(url, &u) &&
	     !strcmp(s.scheme, u.scheme) && s.port == u.port &&
	     s.host_len == u.host_len &&
	     strncasecmp(s.host ? s.host : "", u.host ? u.host : "",
			 s.host_len) == 0 &&
	     u.path_len >= s.path_len &&
	     memcmp(s.path, u.path, s.path_len) == 0 &&
	     (u.path_len == s.path_len || u.path[s.path_len] == '/');
	free(plain);
	return ok;
}

/* ---- credentials ---- */

static void entry_release(struct store_entry *e)
{
	KN_FREE_ALL(e->name, e->url);
	if (e->secret) {
		OPENSSL_cleanse(e->secret, strlen(e->secret));
		free(e->secret);
	}
	KN_FREE_ALL(e->cred_env, e->cred_file);
	memset(e, 0, sizeof(*e));
}

/* A credential file: a regular file of ours that no one else may read. */
static int read_credential_file(const char *path, const char *field,
				char **out, struct kn_error *err)
{
	struct stat st;
	size_t len = 0;
	char *text = NULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY |
				    O_NONBLOCK);
	int rc = 0;

	if (fd < 0)
		return kn_errorf(err, errno == ENOENT ? KN_ENOTFOUND : KN_EIO,
				 field, "%s: %s: %s", field, path,
				 strerror(errno));
	if (fstat(fd, &st) < 0)
		rc = kn_errorf(err, KN_EIO, field, "%s: %s: %s", field, path,
			       strerror(errno));
	else if (!S_ISREG(st.st_mode))
		rc = kn_errorf(err, KN_EINVAL, field, "%s: %s is %s, not a "
			       "file", field, path, kn_file_kind(st.st_mode));
	else if (st.st_uid != geteuid())
		rc = kn_errorf(err, KN_EPERM, field, "%s: %s is owned by uid "
			       "%u; a credential file must be owned by the "
			       "server's user (uid %u)", field, path,
			       (unsigned)st.st_uid, (unsigned)geteuid());
	else if (st.st_mode & 077)
		rc = kn_errorf(err, KN_EPERM, field, "%s: %s has mode %04o; a "
			       "credential file must be readable by its owner "
			       "only: chmod 600 %s", field, path,
			       (unsigned)(st.st_mode & 07777), path);
	else if (kn_read_fd(fd, CREDENTIAL_MAX, &text, &len) < 0)
		rc = kn_errorf(err, KN_EIO, field, "%s: cannot read %s (at "
			       "most %d bytes)", field, path, CREDENTIAL_MAX);
	close(fd);
	if (rc == 0)
		*out = text;
	return rc;
}

int kn_store_credential_read(const char *env, const char *file,
			     const char *field, char **out,
			     struct kn_error *err)
{
	char *text = NULL;
	size_t n;
	int rc = 0;

	if (env) {
		const char *v = getenv(env);
		if (!v || !*v)
			return kn_errorf(err, KN_EINVAL, field, "%s: the "
					 "variable %s is not set", field, env);
		text = kn_xstrdup(v);
	} else if (file) {
		rc = read_credential_file(file, field, &text, err);
		if (rc < 0)
			return rc;
	} else {
		return kn_errorf(err, KN_EINVAL, field, "%s: no credential "
				 "given", field);
	}
	n = strlen(text);
	while (n && isspace((unsigned char)text[n - 1]))
		text[--n] = '\0';
	if (!n) {
		free(text);
		return kn_errorf(err, KN_EINVAL, field, "%s: the credential "
				 "is empty", field);
	}
	*out = text;
	return 0;
}

/* A secret is a connection string, a SAS or an account key: by its look. */
static void apply_secret(const char *secret, struct kn_blob_store_config *c)
{
	if (strstr(secret, "AccountKey=") || strstr(secret, "AccountName=") ||
	    strstr(secret, "SharedAccessSignature="))
		c->connection_string = secret;
	else if (strstr(secret, "sig="))
		c->sas_token = secret;
	else
		c->account_key = secret;
}

/* ---- the set ---- */

struct kn_stores *kn_stores_new(void)
{
	return kn_xcalloc(1, sizeof(struct kn_stores));
}

void kn_stores_free(struct kn_stores *stores)
{
	if (!stores)
		return;
	for (size_t i = 0; i < stores->n; i++)
		entry_release(&stores->items[i]);
	for (size_t i = 0; i < stores->n_roots; i++)
		free(stores->roots[i]);
	free(stores);
}

void kn_stores_allow_unconfigured(struct kn_stores *stores, bool allow)
{
	stores->allow_unconfigured = allow;
}

static const struct store_entry *find_name(const struct kn_stores *stores,
					   const char *name)
{
	for (size_t i = 0; i < stores->n; i++)
		if (!strcmp(stores->items[i].name, name))
			return &stores->items[i];
	return NULL;
}

int kn_stores_add(struct kn_stores *stores, const char *name,
		  const char *url, const char *cred_env, const char *cred_file,
		  bool from_environment, struct kn_error *err)
{
	struct store_entry e = {0};
	struct url_parts parts;
	char *field = kn_asprintf("stores[%s].credential", name);
	int rc = 0;

	if (stores->n == STORES_MAX)
		rc = kn_errorf(err, KN_EINVAL, "stores", "stores: at most %d",
			       STORES_MAX);
	else if (find_name(stores, name))
		rc = kn_errorf(err, KN_EINVAL, "stores", "stores: a second "
			       "store named \"%s\"", name);
	else if (strncmp(url, "azure://", 8) != 0 && !split_url(url, &parts))
		rc = kn_errorf(err, KN_EINVAL, "stores", "stores[%s].url: "
			       "not a plain file:///, http:// or https:// URL "
			       "(no user@, #, %%-escapes, \".\" or \"..\")",
			       name);
	if (rc == 0 && (cred_env || cred_file)) {
		rc = kn_store_credential_read(cred_env, cred_file, field,
					      &e.secret, err);
		e.kind = CRED_SECRET;
	} else if (from_environment) {
		e.kind = CRED_ENVIRONMENT;
	}
	free(field);
	if (rc < 0) {
		entry_release(&e);
		return rc;
	}
	e.name = kn_xstrdup(name);
	e.url = kn_xstrdup(url);
	e.cred_env = cred_env ? kn_xstrdup(cred_env) : NULL;
	e.cred_file = cred_file ? kn_xstrdup(cred_file) : NULL;
	stores->items[stores->n++] = e;
	return 0;
}

int kn_stores_add_root(struct kn_stores *stores, const char *dir,
		       struct kn_error *err)
{
	char *real;

	if (stores->n_roots == STORES_MAX)
		return kn_errorf(err, KN_EINVAL, "file-root", "file-root: at "
				 "most %d", STORES_MAX);
	if (dir[0] != '/')
		return kn_errorf(err, KN_EINVAL, "file-root", "file-root: %s "
				 "is not an absolute path", dir);
	real = realpath(dir, NULL);
	if (!real)
		return kn_errorf(err, KN_EINVAL, "file-root", "file-root: %s: "
				 "%s", dir, strerror(errno));
	stores->roots[stores->n_roots++] = real;
	return 0;
}

/* The store whose URL covers url, the most specific first. */
static const struct store_entry *covering(const struct kn_stores *stores,
					  const char *url)
{
	const struct store_entry *best = NULL;

	for (size_t i = 0; i < stores->n; i++) {
		const struct store_entry *e = &stores->items[i];
		if (kn_store_url_covers(e->url, url) &&
		    (!best || strlen(e->url) > strlen(best->url)))
			best = e;
	}
	return best;
}

/* Whether dir (absolute, plain) is root or below it. */
static bool under(const char *root, const char *dir)
{
	size_t n = strlen(root);

	if (n == 1)
		return true; /* "/" */
	return !strncmp(root, dir, n) && (dir[n] == '\0' || dir[n] == '/');
}

/*
 * Whether the file path lies in an allowed root, as written and once
 * the links on its existing part are resolved.
 */
static bool file_in_roots(const struct kn_stores *stores, const char *path)
{
	char *probe = kn_xstrdup(path), *real = NULL;
	bool ok = false;

	/* The deepest part that exists is what links could redirect. */
	while (!(real = realpath(probe, NULL))) {
		char *slash = strrchr(probe, '/');
		if ((errno != ENOENT && errno != ENOTDIR) || !slash)
			break;
		if (slash == probe)
			slash[1] = '\0';
		else
			*slash = '\0';
	}
	for (size_t i = 0; real && !ok && i < stores->n_roots; i++)
		ok = under(stores->roots[i], path) &&
		     under(stores->roots[i], real);
	KN_FREE_ALL(real, probe);
	return ok;
}

int kn_stores_resolve(const struct kn_stores *stores, const char *ref,
		      const char *field, char **url_out, struct kn_error *err)
{
	const struct store_entry *e;
	struct url_parts parts;

	if (!ref || !*ref)
		return kn_errorf(err, KN_EINVAL, field, "%s: empty", field);
	if (!strstr(ref, "://")) {
		e = find_name(stores, ref);
		if (!e)
			return kn_errorf(err, KN_EINVAL, field, "%s: no store "
					 "is named \"%s\" in the server's "
					 "configuration", field, ref);
		*url_out = kn_xstrdup(e->url);
		return 0;
	}
	if (covering(stores, ref)) {
		*url_out = kn_xstrdup(ref);
		return 0;
	}
	if (!split_url(ref, &parts))
		return kn_errorf(err, KN_EINVAL, field, "%s: not a plain "
				 "file:///, http:// or https:// URL (no user@, "
				 "#, %%-escapes, \".\", \"..\" or empty parts)",
				 field);
	if (!strcmp(parts.scheme, "file")) {
		if (stores->any_file || file_in_roots(stores, parts.path)) {
			*url_out = kn_xstrdup(ref);
			return 0;
		}
		return kn_errorf(err, KN_EPERM, field, "%s: %s is outside the "
				 "directories the server allows (its stores "
				 "and --file-root)", field, ref);
	}
	if (!stores->allow_unconfigured)
		return kn_errorf(err, KN_EPERM, field, "%s: %s is in none of "
				 "the server's stores; name one (or the "
				 "server may allow other stores with "
				 "--allow-unconfigured-stores)", field, ref);
	*url_out = kn_xstrdup(ref);
	return 0;
}

int kn_stores_open(const struct kn_stores *stores, const char *ref,
		   const char *field, const struct kn_blob_store_config *tuning,
		   struct kn_blob_store **out, struct kn_error *err)
{
	struct kn_blob_store_config cfg = {0};
	const struct store_entry *e;
	char *url = NULL;
	int rc = kn_stores_resolve(stores, ref, field, &url, err);

	if (rc < 0)
		return rc;
	if (tuning)
		cfg = *tuning;
	cfg.url = url;
	cfg.account_key = cfg.sas_token = cfg.connection_string = NULL;
	cfg.use_env = false;
	cfg.anonymous = true;
	e = strstr(ref, "://") ? covering(stores, ref) : find_name(stores, ref);
	if (e && e->kind == CRED_SECRET) {
		apply_secret(e->secret, &cfg);
		cfg.anonymous = false;
	} else if (e && e->kind == CRED_ENVIRONMENT) {
		cfg.use_env = true;
		cfg.anonymous = false;
	}
	rc = kn_blob_store_open(&cfg, out, err);
	free(url);
	return rc;
}

/* ---- the shim's copy ---- */

char *kn_stores_scopes_json(const struct kn_stores *stores)
{
	json_t *list = json_array();
	char *text;

	for (size_t i = 0; i < stores->n; i++) {
		const struct store_entry *e = &stores->items[i];
		json_t *o = json_pack("{s:s, s:s}", "name", e->name, "url",
				      e->url);

		if (e->cred_env)
			json_object_set_new(o, "env", json_string(e->cred_env));
		else if (e->cred_file)
			json_object_set_new(o, "file",
					    json_string(e->cred_file));
		else if (e->kind == CRED_ENVIRONMENT)
			json_object_set_new(o, "environment", json_true());
		json_array_append_new(list, o);
	}
	text = json_dumps(list, JSON_COMPACT);
	json_decref(list);
	return text;
}

int kn_stores_from_scopes_json(const char *text, struct kn_stores **out,
			       struct kn_error *err)
{
	struct kn_stores *stores = kn_stores_new();
	json_t *list = text ? json_loads(text, 0, NULL) : json_array(), *o;
	size_t i;
	int rc = 0;

	if (!json_is_array(list))
		rc = kn_errorf(err, KN_EINVAL, KN_STORE_SCOPES_ENV,
			       KN_STORE_SCOPES_ENV ": not a JSON list");
	json_array_foreach(list, i, o) {
		const char *name = json_string_value(json_object_get(o, "name"));
		const char *url = json_string_value(json_object_get(o, "url"));

		if (rc < 0)
			break;
		if (!name || !url) {
			rc = kn_errorf(err, KN_EINVAL, KN_STORE_SCOPES_ENV,
				       KN_STORE_SCOPES_ENV ": an entry "
				       "without name or url");
			break;
		}
		rc = kn_stores_add(
			stores, name, url,
			json_string_value(json_object_get(o, "env")),
			json_string_value(json_object_get(o, "file")),
			json_is_true(json_object_get(o, "environment")), err);
	}
	json_decref(list);
	if (rc < 0) {
		kn_stores_free(stores);
		return rc;
	}
	/* The server checked every URL it handed out. */
	stores->allow_unconfigured = true;
	stores->any_file = true;
	*out = stores;
	return 0;
}
