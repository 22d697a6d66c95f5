/*
 * Opening an Azure store: its URL, its credential (the config's, a
 * connection string's, the environment's or the URL's SAS, in that order)
 * and its transfer tuning, each checked and named in errors now, before
 * any request.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "ckpt/azure_store.h"

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

static void curl_init_once(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

static const char *env_or(const char *value, bool use_env, const char *var)
{
	if (value && *value)
		return value;
	if (use_env) {
		const char *e = getenv(var);
		if (e && *e)
			return e;
	}
	return NULL;
}

static int decode_key(const char *b64, unsigned char *out, size_t cap,
		      size_t *out_len)
{
	size_t n = strlen(b64), pad = 0;
	unsigned char tmp[256];
	int got;

	if (n == 0 || n % 4 != 0 || n / 4 * 3 > sizeof(tmp))
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		char ch = b64[i];
		bool ok = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
			  (ch >= '0' && ch <= '9') || ch == '+' || ch == '/' ||
			  (ch == '=' && i >= n - 2);
		if (!ok)
			return -EINVAL;
	}
	got = EVP_DecodeBlock(tmp, (const unsigned char *)b64, (int)n);
	if (got < 0)
		return -EINVAL;
	if (b64[n - 1] == '=')
		pad++;
	if (b64[n - 2] == '=')
		pad++;
	if ((size_t)got - pad > cap || (size_t)got == pad)
		return -EINVAL;
	memcpy(out, tmp, (size_t)got - pad);
	*out_len = (size_t)got - pad;
	OPENSSL_cleanse(tmp, sizeof(tmp));
	return 0;
}

/*
 * azure://CONTAINER[/PREFIX]: the endpoint comes from the credentials
 * (BlobEndpoint, or the account's default); *out (malloc'd) is the URL.
 */
static int azure_url_expand(const struct kn_blob_store_config *cfg,
			    const struct kn_azure_conn *conn, char **out,
			    struct kn_error *err)
{
	const char *container = cfg->url + 8;
	const char *account = conn->account_name
		? conn->account_name
		: env_or(NULL, cfg->use_env, "AZURE_STORAGE_ACCOUNT");

	if (conn->blob_endpoint)
		*out = kn_asprintf("%s/%s", conn->blob_endpoint, container);
	else if (account)
		*out = kn_asprintf("https://%s.blob.core.windows.net/%s",
				   account, container);
	else
		return kn_errorf(err, KN_EINVAL, "url",
				 "store url: azure:// needs an account "
				 "(AZURE_STORAGE_ACCOUNT or a connection "
				 "string)");
	return 0;
}

/* a's key or SAS token: the config's, the connection string's, the
   environment's, then the URL's SAS. */
static int azure_credentials(struct azure *a,
			     const struct kn_blob_store_config *cfg,
			     const struct kn_azure_conn *conn,
			     const struct kn_azure_url *u,
			     struct kn_error *err)
{
	const char *key, *sas;

	key = cfg->account_key && *cfg->account_key ? cfg->account_key
						    : conn->account_key;
	if (!key)
		key = env_or(NULL, cfg->use_env, "AZURE_STORAGE_KEY");
	sas = cfg->sas_token && *cfg->sas_token ? cfg->sas_token : conn->sas;
	if (!sas)
		sas = env_or(NULL, cfg->use_env, "AZURE_STORAGE_SAS_TOKEN");
	if (!sas)
		sas = u->sas;
	if (!key && !sas && !cfg->anonymous)
		return kn_errorf(err, KN_EINVAL, "credentials",
				 "azure store %s: no credentials (account "
				 "key, SAS token or connection string; or "
				 "AZURE_STORAGE_KEY, AZURE_STORAGE_SAS_TOKEN, "
				 "AZURE_STORAGE_CONNECTION_STRING)",
				 u->container);
	if (key && decode_key(key, a->key, sizeof(a->key), &a->key_len) < 0)
		return kn_errorf(err, KN_EINVAL, "account_key",
				 "azure store: the account key is not valid "
				 "base64");
	if (sas) {
		while (*sas == '?')
			sas++;
		if (!strstr(sas, "sig="))
			return kn_errorf(err, KN_EINVAL, "sas_token",
					 "azure store: the SAS token has no "
					 "sig=");
		a->sas = kn_xstrdup(sas);
	}
	return 0;
}

/* The transfer tuning's bounds; 0 stands for the default. */
static int azure_tuning_check(const struct kn_blob_store_config *cfg,
			      struct kn_error *err)
{
	if (cfg->block_size && (cfg->block_size < (64u << 10) ||
				cfg->block_size > KN_BLOB_MAX_BLOCK))
		return kn_errorf(err, KN_EINVAL, "block_size",
				 "block_size: must be 64 KiB..%u MiB",
				 KN_BLOB_MAX_BLOCK >> 20);
	if (cfg->single_put_max > KN_BLOB_MAX_SINGLE_PUT)
		return kn_errorf(err, KN_EINVAL, "single_put_max",
				 "single_put_max: at most %zu MiB (Put Blob's "
				 "limit)",
				 KN_BLOB_MAX_SINGLE_PUT >> 20);
	if (cfg->parallel < 0 || cfg->parallel > KN_BLOB_MAX_PARALLEL)
		return kn_errorf(err, KN_EINVAL, "parallel",
				 "parallel: must be 1..%d",
				 KN_BLOB_MAX_PARALLEL);
	return 0;
}

/* a's place (taken from u), API version, tuning and curl handles. */
static void azure_setup(struct azure *a, const struct kn_blob_store_config *cfg,
			struct kn_azure_url *u)
{
	a->origin = strndup(u->endpoint,
			    strlen(u->endpoint) - strlen(u->path_base));
	a->path_base = u->path_base;
	a->account = u->account;
	a->container = u->container;
	a->prefix = u->prefix;
	u->path_base = u->account = u->container = u->prefix = NULL;
	a->version = kn_xstrdup(cfg->api_version && *cfg->api_version
					? cfg->api_version
					: KN_BLOB_DEFAULT_API_VERSION);
	a->block_size = cfg->block_size ? cfg->block_size : (8u << 20);
	a->single_put_max = cfg->single_put_max ? cfg->single_put_max
						: (64u << 20);
	a->parallel = cfg->parallel ? cfg->parallel : 6;
	a->max_retries = cfg->max_retries == 0 ? 5
			 : cfg->max_retries < 0 ? 0 : cfg->max_retries;
	a->retry_base_ms = cfg->retry_base_ms > 0 ? cfg->retry_base_ms : 200;
	pthread_once(&curl_once, curl_init_once);
	a->easy = curl_easy_init();
	a->multi = curl_multi_init();
	if (!a->easy || !a->multi)
		abort();
	curl_multi_setopt(a->multi, CURLMOPT_MAX_HOST_CONNECTIONS,
			  (long)a->parallel);
}

int kn_azure_store_open(const struct kn_blob_store_config *cfg,
			struct kn_blob_store *store, struct kn_error *err)
{
	struct kn_azure_conn conn = {0};
	struct kn_azure_url u = {0};
	struct azure *a = NULL;
	const char *cs;
	char *built = NULL;
	int rc = 0;

	cs = env_or(cfg->connection_string, cfg->use_env,
		    "AZURE_STORAGE_CONNECTION_STRING");
	if (cs)
		rc = kn_azure_parse_connection_string(cs, &conn, err);
	if (rc == 0 && strncmp(cfg->url, "azure://", 8) == 0)
		rc = azure_url_expand(cfg, &conn, &built, err);
	if (rc == 0)
		rc = kn_azure_parse_url(built ? built : cfg->url, &u, err);
	if (rc < 0)
		goto out;
	a = kn_xcalloc(1, sizeof(*a));
	rc = azure_credentials(a, cfg, &conn, &u, err);
	if (rc == 0)
		rc = azure_tuning_check(cfg, err);
	if (rc < 0)
		goto out;
	azure_setup(a, cfg, &u);
	store->ops = &kn_azure_store_ops;
	store->impl = a;
	store->pool.size = a->block_size;
	store->url = kn_asprintf("%s/%s%s%s", u.endpoint, a->container,
				 a->prefix[0] ? "/" : "", a->prefix);
	if (store->url[strlen(store->url) - 1] == '/')
		store->url[strlen(store->url) - 1] = '\0';
	a = NULL;
out:
	if (a) {
		struct kn_blob_store tmp = {.impl = a};
		kn_azure_store_ops.free(&tmp);
	}
	kn_azure_url_release(&u);
	kn_azure_conn_release(&conn);
	free(built);
	return rc;
}
