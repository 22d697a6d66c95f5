/*
 * Credentials for the Kubernetes API: a kubeconfig file or the pod's own
 * service account.
 *
 * The kubeconfig is YAML; libfyaml parses it and emits it as JSON, which
 * jansson reads, so the lookups (contexts by name, then the cluster and
 * user they name) are plain JSON walks. Only what a static credential
 * needs is read: exec and auth-provider plugins run programs kiln does not
 * ship and are refused by name rather than ignored.
 */
#include <errno.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>

#include <libfyaml.h>
#include <openssl/evp.h>

#include "kube/kube.h"

/* A kubeconfig with a few embedded certificates is tens of KiB. */
#define KUBECONFIG_MAX_BYTES (1024 * 1024)
#define TOKEN_MAX_BYTES (64 * 1024)

void kn_kube_auth_release(struct kn_kube_auth *a)
{
	if (!a)
		return;
	KN_FREE_ALL(a->server, a->token, a->token_file, a->ca_file, a->ca_pem,
		    a->cert_pem, a->key_pem, a->cert_file, a->key_file);
	memset(a, 0, sizeof(*a));
}

/* YAML text as JSON; errors carry file:line:column from libfyaml. */
static int yaml_to_json(const char *text, size_t len, const char *file,
			json_t **out, struct kn_error *err)
{
	struct fy_parse_cfg cfg = {.flags = FYPCF_QUIET};
	struct fy_diag_cfg dcfg;
	struct fy_diag *diag;
	struct fy_document *doc = NULL;
	char *js = NULL;
	json_t *root;
	int rc = kn_yaml_text_check(text, len, file, "kubeconfig", err);

	if (rc < 0)
		return rc;
	fy_diag_cfg_default(&dcfg);
	dcfg.fp = NULL;
	dcfg.colorize = false;
	diag = fy_diag_create(&dcfg);
	if (!diag)
		return kn_errorf(err, KN_EIO, NULL,
				 "%s: cannot start the YAML parser", file);
	fy_diag_set_collect_errors(diag, true);
	cfg.diag = diag;
	doc = fy_document_build_from_string(&cfg, text, len);
	if (!doc || fy_diag_got_error(diag)) {
		rc = kn_yaml_parse_error(diag, file, err);
		goto out;
	}
	js = fy_emit_document_to_string(doc, FYECF_MODE_JSON);
	root = js ? json_loads(js, 0, NULL) : NULL;
	if (!json_is_object(root)) {
		json_decref(root);
		rc = kn_errorf(err, KN_EINVAL, NULL,
			       "%s: a kubeconfig is a YAML mapping", file);
		goto out;
	}
	*out = root;
out:
	free(js);
	fy_document_destroy(doc);
	fy_diag_destroy(diag);
	return rc;
}

/* The entry of list (clusters, users, contexts) named name, its inner
   object (under key), or NULL. */
static json_t *named(json_t *root, const char *list, const char *name,
		     const char *key)
{
	size_t i;
	json_t *item;

	json_array_foreach(json_object_get(root, list), i, item) {
		const char *n = json_string_value(json_object_get(item, "name"));
		if (n && !strcmp(n, name))
			return json_object_get(item, key);
	}
	return NULL;
}

static char *base64_decode(const char *in, size_t *out_len)
{
	size_t len = strlen(in), n = 0;
	char *clean = kn_xmalloc(len + 1);
	unsigned char *out;
	int got;

	/* EVP_DecodeBlock wants no whitespace and counts padding as data. */
	for (size_t i = 0; i < len; i++)
		if (in[i] != '\n' && in[i] != '\r' && in[i] != ' ')
			clean[n++] = in[i];
	clean[n] = '\0';
	if (n == 0 || n % 4) {
		free(clean);
		return NULL;
	}
	out = kn_xmalloc(n / 4 * 3 + 1);
	got = EVP_DecodeBlock(out, (unsigned char *)clean, (int)n);
	if (got >= 0)
		got -= (clean[n - 1] == '=') + (clean[n - 2] == '=');
	free(clean);
	if (got < 0) {
		free(out);
		return NULL;
	}
	out[got] = '\0';
	*out_len = (size_t)got;
	return (char *)out;
}

/* A path relative to the kubeconfig's directory. */
static char *resolve(const char *file, const char *path)
{
	char *copy, *dir, *full;

	if (path[0] == '/')
		return kn_xstrdup(path);
	copy = kn_xstrdup(file);
	dir = dirname(copy);
	full = kn_asprintf("%s/%s", dir, path);
	free(copy);
	return full;
}

/*
 * key (a file path) or key-data (base64) of obj into *file or *pem.
 * -EINVAL naming where when the data is not base64.
 */
static int file_or_data(json_t *obj, const char *key, const char *file,
			const char *where, char **path_out, char **pem_out,
			struct kn_error *err)
{
	char data_key[64];
	const char *path = json_string_value(json_object_get(obj, key));
	const char *data;
	size_t len;

	snprintf(data_key, sizeof(data_key), "%s-data", key);
	data = json_string_value(json_object_get(obj, data_key));
	if (data) {
		*pem_out = base64_decode(data, &len);
		if (!*pem_out)
			return kn_errorf(err, KN_EINVAL, data_key,
					 "%s: %s.%s: not base64", file, where,
					 data_key);
	} else if (path) {
		*path_out = resolve(file, path);
	}
	return 0;
}

int kn_kube_kubeconfig_parse(const char *text, size_t len, const char *file,
			     const char *context, struct kn_kube_auth *out,
			     struct kn_error *err)
{
	struct kn_kube_auth a = {0};
	json_t *root = NULL, *ctx, *cluster, *user, *v;
	const char *cluster_name, *user_name, *s;
	char where[320];
	int rc;

	rc = yaml_to_json(text, len, file, &root, err);
	if (rc < 0)
		return rc;
	if (!context)
		context = json_string_value(
			json_object_get(root, "current-context"));
	if (!context || !*context) {
		rc = kn_errorf(err, KN_EINVAL, "current-context",
			       "%s: current-context: none is set; name one "
			       "with --context", file);
		goto out;
	}
	ctx = named(root, "contexts", context, "context");
	if (!json_is_object(ctx)) {
		rc = kn_errorf(err, KN_EINVAL, "contexts",
			       "%s: contexts: no context named \"%s\"", file,
			       context);
		goto out;
	}
	cluster_name = json_string_value(json_object_get(ctx, "cluster"));
	user_name = json_string_value(json_object_get(ctx, "user"));
	cluster = cluster_name ?
		named(root, "clusters", cluster_name, "cluster") : NULL;
	if (!json_is_object(cluster)) {
		rc = kn_errorf(err, KN_EINVAL, "clusters",
			       "%s: contexts[%s].context.cluster: no cluster "
			       "named \"%s\"", file, context,
			       cluster_name ? cluster_name : "");
		goto out;
	}
	snprintf(where, sizeof(where), "clusters[%s].cluster", cluster_name);
	s = json_string_value(json_object_get(cluster, "server"));
	if (!s || (strncmp(s, "https://", 8) && strncmp(s, "http://", 7))) {
		rc = kn_errorf(err, KN_EINVAL, "server",
			       "%s: %s.server: want an https:// URL", file,
			       where);
		goto out;
	}
	a.server = kn_xstrdup(s);
	/* The API wants paths after the host: no trailing slash. */
	while (strlen(a.server) > 8 && a.server[strlen(a.server) - 1] == '/')
		a.server[strlen(a.server) - 1] = '\0';
	a.insecure = json_is_true(
		json_object_get(cluster, "insecure-skip-tls-verify"));
	rc = file_or_data(cluster, "certificate-authority", file, where,
			  &a.ca_file, &a.ca_pem, err);
	if (rc < 0)
		goto out;
	user = user_name ? named(root, "users", user_name, "user") : NULL;
	snprintf(where, sizeof(where), "users[%s].user",
		 user_name ? user_name : "");
	if (user_name && !user) {
		rc = kn_errorf(err, KN_EINVAL, "users",
			       "%s: contexts[%s].context.user: no user named "
			       "\"%s\"", file, context, user_name);
		goto out;
	}
	if (json_object_get(user, "exec") ||
	    json_object_get(user, "auth-provider")) {
		rc = kn_errorf(err, KN_EINVAL, "user",
			       "%s: %s: exec and auth-provider credentials "
			       "are not supported; use a token or a client "
			       "certificate (e.g. a service account's)",
			       file, where);
		goto out;
	}
	if ((v = json_object_get(user, "token")) && json_string_value(v))
		a.token = kn_xstrdup(json_string_value(v));
	if ((v = json_object_get(user, "tokenFile")) && json_string_value(v))
		a.token_file = resolve(file, json_string_value(v));
	rc = file_or_data(user, "client-certificate", file, where,
			  &a.cert_file, &a.cert_pem, err);
	if (rc == 0)
		rc = file_or_data(user, "client-key", file, where, &a.key_file,
				  &a.key_pem, err);
	if (rc < 0)
		goto out;
	if (!!(a.cert_file || a.cert_pem) != !!(a.key_file || a.key_pem)) {
		rc = kn_errorf(err, KN_EINVAL, "client-key",
			       "%s: %s: a client certificate needs its key "
			       "and a key its certificate", file, where);
		goto out;
	}
	*out = a;
	memset(&a, 0, sizeof(a));
out:
	kn_kube_auth_release(&a);
	json_decref(root);
	return rc;
}

int kn_kube_kubeconfig_load(const char *path, const char *context,
			    struct kn_kube_auth *out, struct kn_error *err)
{
	char *text;
	size_t len;
	int rc = kn_read_file(path, KUBECONFIG_MAX_BYTES, &text, &len);

	if (rc < 0)
		return kn_errorf(err, rc == -EFBIG ? KN_ETOOBIG : KN_EIO, NULL,
				 "%s: %s", path, strerror(-rc));
	rc = kn_kube_kubeconfig_parse(text, len, path, context, out, err);
	free(text);
	return rc;
}

int kn_kube_in_cluster(const char *sa_dir, struct kn_kube_auth *out,
		       struct kn_error *err)
{
	const char *host = getenv("KUBERNETES_SERVICE_HOST");
	const char *port = getenv("KUBERNETES_SERVICE_PORT");
	struct kn_kube_auth a = {0};
	char *probe;
	size_t len;
	int rc;

	if (!host || !*host || !port || !*port)
		return kn_errorf(err, KN_EINVAL, "KUBERNETES_SERVICE_HOST",
				 "not in a cluster: KUBERNETES_SERVICE_HOST "
				 "and KUBERNETES_SERVICE_PORT are not set; "
				 "give --kubeconfig");
	a.token_file = kn_asprintf("%s/token", sa_dir);
	a.ca_file = kn_asprintf("%s/ca.crt", sa_dir);
	/* Both must be readable now; the token is read again per request. */
	rc = kn_read_file(a.token_file, TOKEN_MAX_BYTES, &probe, &len);
	if (rc == 0) {
		free(probe);
		rc = kn_read_file(a.ca_file, KUBECONFIG_MAX_BYTES, &probe,
				  &len);
		if (rc == 0)
			free(probe);
		else
			kn_errorf(err, KN_EIO, NULL, "%s: %s", a.ca_file,
				  strerror(-rc));
	} else {
		kn_errorf(err, KN_EIO, NULL, "%s: %s", a.token_file,
			  strerror(-rc));
	}
	if (rc < 0) {
		kn_kube_auth_release(&a);
		return -ENOENT;
	}
	/* An IPv6 service address needs brackets in a URL. */
	a.server = strchr(host, ':') ?
		kn_asprintf("https://[%s]:%s", host, port) :
		kn_asprintf("https://%s:%s", host, port);
	*out = a;
	return 0;
}

int kn_kube_auth_load(const char *kubeconfig, const char *context,
		      const char *sa_dir, struct kn_kube_auth *out,
		      struct kn_error *err)
{
	const char *env = getenv("KUBECONFIG");
	char *first = NULL;
	int rc;

	if (!kubeconfig && env && *env) {
		first = kn_xstrdup(env);
		first[strcspn(first, ":")] = '\0';
		kubeconfig = first;
	}
	rc = kubeconfig ? kn_kube_kubeconfig_load(kubeconfig, context, out, err)
			: kn_kube_in_cluster(sa_dir, out, err);
	free(first);
	return rc;
}
