/*
 * The gateway's route table: the document GET /v1/gateway/config answers
 * (and --routes files and the saved routes.json hold), parsed into plain
 * arrays the workers read without locks.
 *
 * Validation is strict and names the field, because a half-understood
 * table would send traffic to the wrong place; a bad refresh keeps the
 * previous table. Keys are stored as sha256 hashes only and matched by
 * comparing every hash in constant time, so neither the secret nor which
 * key matched leaks through timing.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/sha.h>

#include "gateway/gateway.h"

static int bad(struct kn_error *err, const char *field, const char *what)
{
	return kn_errorf(err, KN_EINVAL, field, "%s: %s", field, what);
}

/*
 * Member name of obj, its path (prefix then name) in field: 1 with *v
 * set; 0 when absent or null and optional; an error when required.
 */
static int member(json_t *obj, const char *name, const char *prefix,
		  bool required, json_t **v, char field[static 256],
		  struct kn_error *err)
{
	*v = json_object_get(obj, name);
	snprintf(field, 256, "%s%s", prefix, name);
	if (*v && !json_is_null(*v))
		return 1;
	return required ? bad(err, field, "missing") : 0;
}

/* A non-negative integer member; absent or null is 0 when optional. */
static int get_count(json_t *obj, const char *name, const char *prefix,
		     bool required, int64_t *out, struct kn_error *err)
{
	char field[256];
	json_t *v;
	int rc = member(obj, name, prefix, required, &v, field, err);

	*out = 0;
	if (rc <= 0)
		return rc;
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return bad(err, field, "must be a whole number >= 0");
	*out = json_integer_value(v);
	return 0;
}

/* A string member of at most max-1 bytes, copied into dst. */
static int get_name(json_t *obj, const char *name, const char *prefix,
		    bool required, char *dst, size_t max, struct kn_error *err)
{
	char field[256];
	json_t *v;
	int rc = member(obj, name, prefix, required, &v, field, err);

	dst[0] = '\0';
	if (rc <= 0)
		return rc;
	if (!json_is_string(v))
		return bad(err, field, "must be a string");
	if (json_string_length(v) >= max)
		return kn_errorf(err, KN_EINVAL, field,
				 "%s: longer than %zu bytes", field, max - 1);
	if (required && json_string_length(v) == 0)
		return bad(err, field, "must not be empty");
	memcpy(dst, json_string_value(v), json_string_length(v) + 1);
	return 0;
}

/*
 * Deployment and key names end up in metric labels and headers: printable
 * ASCII without quotes, backslashes or spaces.
 */
static int check_label(const char *name, const char *field,
		       struct kn_error *err)
{
	for (const char *p = name; *p; p++)
		if (*p <= ' ' || *p > '~' || *p == '"' || *p == '\\')
			return bad(err, field, "must be printable ASCII without "
					       "spaces, quotes or backslashes");
	return 0;
}

static int parse_address(struct kn_gw_replica *r, const char *field,
			 struct kn_error *err)
{
	const char *colon = strrchr(r->address, ':');
	const char *host = r->address;
	size_t hlen;
	char *end;
	long port;

	/* A model server that speaks TLS is named with its scheme. */
	r->tls = !strncmp(host, "https://", 8);
	if (r->tls)
		host += 8;
	if (!colon || colon <= host)
		return bad(err, field, "must be HOST:PORT or https://HOST:PORT");
	hlen = (size_t)(colon - host);
	/* [::1]:8000 */
	if (host[0] == '[' && colon[-1] == ']') {
		host++;
		hlen -= 2;
	}
	if (hlen == 0 || hlen >= sizeof(r->host))
		return bad(err, field, "must be HOST:PORT");
	errno = 0;
	port = strtol(colon + 1, &end, 10);
	if (errno || end == colon + 1 || *end || port < 1 || port > 65535)
		return bad(err, field, "port must be 1..65535");
	memcpy(r->host, host, hlen);
	r->host[hlen] = '\0';
	r->port = (int)port;
	return 0;
}

static int parse_replica(json_t *v, const char *prefix,
			 struct kn_gw_replica *r, struct kn_error *err)
{
	char field[300];
	json_t *ready;
	int rc;

	if (!json_is_object(v))
		return bad(err, prefix, "must be an object");
	snprintf(field, sizeof(field), "%s.", prefix);
	if ((rc = get_count(v, "replica", field, false, &r->replica, err)) < 0 ||
	    (rc = get_name(v, "address", field, true, r->address,
			   sizeof(r->address), err)) < 0 ||
	    (rc = get_name(v, "zone", field, false, r->zone, sizeof(r->zone),
			   err)) < 0)
		return rc;
	snprintf(field, sizeof(field), "%s.address", prefix);
	if ((rc = parse_address(r, field, err)) < 0)
		return rc;
	ready = json_object_get(v, "ready");
	snprintf(field, sizeof(field), "%s.ready", prefix);
	if (!ready)
		return bad(err, field, "missing");
	if (!json_is_boolean(ready))
		return bad(err, field, "must be true or false");
	r->ready = json_is_true(ready);
	return 0;
}

/*
 * Element i of the list named list: it must be an object with a name
 * that can be a metric label (deployment and key names label the
 * kiln_gateway_* series). name gets it, prefix the element's path
 * ("keys[3]"), field the start of its members' ("keys[3].").
 */
static int element_open(json_t *v, const char *list, size_t i, char *name,
			size_t name_size, char prefix[static 64],
			char field[static 128], struct kn_error *err)
{
	char name_field[192];
	int rc;

	snprintf(prefix, 64, "%s[%zu]", list, i);
	if (!json_is_object(v))
		return bad(err, prefix, "must be an object");
	snprintf(field, 128, "%s.", prefix);
	if ((rc = get_name(v, "name", field, true, name, name_size, err)) < 0)
		return rc;
	snprintf(name_field, sizeof(name_field), "%sname", field);
	return check_label(name, name_field, err);
}

static int parse_deployment(json_t *v, size_t i, struct kn_gw_deployment *d,
			    struct kn_error *err)
{
	char prefix[64], field[128];
	json_t *model, *limits, *replicas, *r;
	size_t j;
	int rc;

	if ((rc = element_open(v, "deployments", i, d->name, sizeof(d->name),
			       prefix, field, err)) < 0)
		return rc;
	if ((rc = get_name(v, "fallback", field, false, d->fallback,
			   sizeof(d->fallback), err)) < 0 ||
	    (rc = get_name(v, "ca", field, false, d->ca, sizeof(d->ca),
			   err)) < 0)
		return rc;
	model = json_object_get(v, "model");
	snprintf(field, sizeof(field), "%s.model", prefix);
	if (model && !json_is_null(model) && !json_is_string(model))
		return bad(err, field, "must be a string");
	d->model = kn_xstrdup(json_is_string(model) ? json_string_value(model)
						    : "");
	limits = json_object_get(v, "limits");
	snprintf(field, sizeof(field), "%s.limits", prefix);
	if (limits && !json_is_null(limits)) {
		if (!json_is_object(limits))
			return bad(err, field, "must be an object");
		snprintf(field, sizeof(field), "%s.limits.", prefix);
		if ((rc = get_count(limits, "rpm", field, false, &d->rpm,
				    err)) < 0 ||
		    (rc = get_count(limits, "tpm", field, false, &d->tpm,
				    err)) < 0)
			return rc;
	}
	replicas = json_object_get(v, "replicas");
	snprintf(field, sizeof(field), "%s.replicas", prefix);
	if (!replicas || json_is_null(replicas))
		return 0;
	if (!json_is_array(replicas))
		return bad(err, field, "must be a list");
	d->replicas = kn_xcalloc(json_array_size(replicas) + 1,
				 sizeof(*d->replicas));
	json_array_foreach(replicas, j, r)
	{
		snprintf(field, sizeof(field), "%s.replicas[%zu]", prefix, j);
		if ((rc = parse_replica(r, field, &d->replicas[j], err)) < 0)
			return rc;
		d->replicas[j].ca = d->ca[0] ? d->ca : NULL;
		d->n_replicas++;
	}
	return 0;
}

static int parse_key(const struct kn_gw_config *cfg, json_t *v, size_t i,
		     struct kn_gw_key *k, struct kn_error *err)
{
	char prefix[64], field[128];
	json_t *deps, *d;
	size_t j;
	int rc;

	if ((rc = element_open(v, "keys", i, k->name, sizeof(k->name), prefix,
			       field, err)) < 0)
		return rc;
	if ((rc = get_name(v, "hash", field, true, k->hash_hex,
			   sizeof(k->hash_hex), err)) < 0 ||
	    (rc = get_count(v, "rpm", field, false, &k->rpm, err)) < 0 ||
	    (rc = get_count(v, "tpm", field, false, &k->tpm, err)) < 0 ||
	    (rc = get_count(v, "quota_day", field, false, &k->quota_day,
			    err)) < 0 ||
	    (rc = get_count(v, "quota_month", field, false, &k->quota_month,
			    err)) < 0)
		return rc;
	snprintf(field, sizeof(field), "%s.hash", prefix);
	if (!kn_unhex(k->hash_hex, sizeof(k->hash), k->hash))
		return bad(err, field, "must be 64 lowercase hex digits "
				       "(sha256 of the key)");
	deps = json_object_get(v, "deployments");
	snprintf(field, sizeof(field), "%s.deployments", prefix);
	if (!json_is_array(deps))
		return bad(err, field, deps ? "must be a list of names"
					    : "missing");
	k->deployments = kn_xcalloc(json_array_size(deps) + 1,
				    sizeof(*k->deployments));
	json_array_foreach(deps, j, d)
	{
		snprintf(field, sizeof(field), "%s.deployments[%zu]", prefix, j);
		if (!json_is_string(d))
			return bad(err, field, "must be a string");
		if (!kn_gw_config_deployment(cfg, json_string_value(d)))
			return kn_errorf(err, KN_EINVAL, field,
					 "%s: no deployment named \"%s\"",
					 field, json_string_value(d));
		k->deployments[j] = kn_xstrdup(json_string_value(d));
		k->n_deployments++;
	}
	return 0;
}

static void config_free(struct kn_gw_config *cfg)
{
	for (size_t i = 0; i < cfg->n_deployments; i++) {
		KN_FREE_ALL(cfg->deployments[i].model,
			    cfg->deployments[i].replicas);
	}
	for (size_t i = 0; i < cfg->n_keys; i++) {
		for (size_t j = 0; j < cfg->keys[i].n_deployments; j++)
			free(cfg->keys[i].deployments[j]);
		free(cfg->keys[i].deployments);
	}
	KN_FREE_ALL(cfg->deployments, cfg->keys);
	EVP_MD_free(cfg->sha256);
	free(cfg);
}

int kn_gw_config_parse(json_t *doc, struct kn_gw_config **out,
		       struct kn_error *err)
{
	struct kn_gw_config *cfg = kn_xcalloc(1, sizeof(*cfg));
	json_t *deps, *keys, *v;
	char field[128];
	size_t i;
	int rc = 0;

	if (!json_is_object(doc)) {
		rc = kn_errorf(err, KN_EINVAL, NULL,
			       "the gateway config must be a JSON object");
		goto out;
	}
	if ((rc = get_count(doc, "generation", "", true, &cfg->generation,
			    err)) < 0)
		goto out;
	deps = json_object_get(doc, "deployments");
	keys = json_object_get(doc, "keys");
	if (!json_is_array(deps)) {
		rc = bad(err, "deployments", deps ? "must be a list" : "missing");
		goto out;
	}
	if (!json_is_array(keys)) {
		rc = bad(err, "keys", keys ? "must be a list" : "missing");
		goto out;
	}
	cfg->deployments = kn_xcalloc(json_array_size(deps) + 1,
				      sizeof(*cfg->deployments));
	json_array_foreach(deps, i, v)
	{
		struct kn_gw_deployment *d = &cfg->deployments[i];
		rc = parse_deployment(v, i, d, err);
		cfg->n_deployments++;
		if (rc < 0)
			goto out;
		for (size_t j = 0; j < i; j++)
			if (!strcmp(cfg->deployments[j].name, d->name)) {
				snprintf(field, sizeof(field),
					 "deployments[%zu].name", i);
				rc = kn_errorf(err, KN_EINVAL, field,
					       "%s: \"%s\" is listed twice",
					       field, d->name);
				goto out;
			}
	}
	for (i = 0; i < cfg->n_deployments; i++) {
		const char *fb = cfg->deployments[i].fallback;
		if (!fb[0])
			continue;
		snprintf(field, sizeof(field), "deployments[%zu].fallback", i);
		if (!kn_gw_config_deployment(cfg, fb)) {
			rc = kn_errorf(err, KN_EINVAL, field,
				       "%s: no deployment named \"%s\"", field,
				       fb);
			goto out;
		}
		if (!strcmp(fb, cfg->deployments[i].name)) {
			rc = bad(err, field, "a deployment cannot fall back "
					     "to itself");
			goto out;
		}
	}
	cfg->keys = kn_xcalloc(json_array_size(keys) + 1, sizeof(*cfg->keys));
	json_array_foreach(keys, i, v)
	{
		rc = parse_key(cfg, v, i, &cfg->keys[i], err);
		cfg->n_keys++;
		if (rc < 0)
			goto out;
	}
	if (!(cfg->sha256 = EVP_MD_fetch(NULL, "SHA256", NULL))) {
		rc = kn_errorf(err, KN_EIO, NULL,
			       "OpenSSL has no SHA256 to match keys with");
		goto out;
	}
	cfg->refs = 1;
	*out = cfg;
	cfg = NULL;
out:
	if (cfg)
		config_free(cfg);
	return rc;
}

int kn_gw_config_parse_text(const char *text, size_t len,
			    struct kn_gw_config **out, struct kn_error *err)
{
	json_error_t jerr;
	json_t *doc = json_loadb(text, len, 0, &jerr);
	int rc;

	if (!doc)
		return kn_errorf(err, KN_EINVAL, NULL,
				 "%d:%d: not valid JSON: %s", jerr.line,
				 jerr.column, jerr.text);
	rc = kn_gw_config_parse(doc, out, err);
	json_decref(doc);
	return rc;
}

struct kn_gw_config *kn_gw_config_ref(struct kn_gw_config *cfg)
{
	__atomic_add_fetch(&cfg->refs, 1, __ATOMIC_RELAXED);
	return cfg;
}

void kn_gw_config_unref(struct kn_gw_config *cfg)
{
	if (cfg && __atomic_sub_fetch(&cfg->refs, 1, __ATOMIC_ACQ_REL) == 0)
		config_free(cfg);
}

const struct kn_gw_deployment *
kn_gw_config_deployment(const struct kn_gw_config *cfg, const char *name)
{
	for (size_t i = 0; i < cfg->n_deployments; i++)
		if (!strcmp(cfg->deployments[i].name, name))
			return &cfg->deployments[i];
	return NULL;
}

const struct kn_gw_key *kn_gw_config_key(const struct kn_gw_config *cfg,
					 const char *secret, size_t len)
{
	unsigned char digest[SHA256_DIGEST_LENGTH];
	const struct kn_gw_key *found = NULL;

	if (!EVP_Digest(secret, len, digest, NULL, cfg->sha256, NULL))
		return NULL;
	for (size_t i = 0; i < cfg->n_keys; i++)
		if (CRYPTO_memcmp(digest, cfg->keys[i].hash, sizeof(digest)) ==
			    0 &&
		    !found)
			found = &cfg->keys[i];
	return found;
}

bool kn_gw_key_allows(const struct kn_gw_key *key, const char *deployment)
{
	for (size_t i = 0; i < key->n_deployments; i++)
		if (!strcmp(key->deployments[i], deployment))
			return true;
	return false;
}
