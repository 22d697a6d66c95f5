/*
 * server/blobstores.c: which blob stores the server uses on a user's
 * behalf, and with whose credential.
 *
 * The stores are those its operator configured: "default" (--blob-store,
 * credentials from AZURE_STORAGE_*, or file://$KILN_HOME/blobs) and each
 * entry of the config file's stores:, with its own credential, read once
 * here. Whatever a request names (a job's checkpoint.store and inputs, a
 * backup's target) is checked against them when it arrives, and every
 * open goes through kn_stores_open, which lends a store's credential
 * only to URLs inside that store (src/ckpt/stores.c). The shims that
 * fetch inputs learn the stores (names, URLs and where each credential
 * comes from, never the secrets) from KILN_STORE_SCOPES in the
 * environment they inherit; a task's environment is built from an
 * allow-list and never carries it.
 */
#include "server/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"

int blobstores_init(struct server *s, struct kn_error *err)
{
	const struct kn_server_conf *conf = &s->cfg.sections;
	struct kn_stores *stores = kn_stores_new();
	char *blobs = kn_asprintf("%s/blobs", s->home), *scopes;
	int rc;

	s->blob_url = s->cfg.blob_store ? kn_xstrdup(s->cfg.blob_store)
					: kn_blob_default_url(s->home);
	rc = kn_stores_add(stores, KN_DEFAULT_STORE, s->blob_url, NULL, NULL,
			   true, err);
	for (size_t i = 0; rc == 0 && i < conf->n_stores; i++) {
		const struct kn_store_conf *st = &conf->stores[i];

		if (!strcmp(st->name, KN_DEFAULT_STORE))
			rc = kn_errorf(err, KN_EINVAL, "stores", "stores: "
				       "\"%s\" is the --blob-store's name; "
				       "give this one another",
				       KN_DEFAULT_STORE);
		else
			rc = kn_stores_add(stores, st->name, st->url,
					   st->credential_env,
					   st->credential_file, false, err);
		/* A bad URL or credential: said now, naming the store. */
		if (rc == 0) {
			struct kn_blob_store *probe = NULL;
			char *field = kn_asprintf("stores[%s]", st->name);
			struct kn_error why;

			rc = kn_stores_open(stores, st->name, field, NULL,
					    &probe, &why);
			if (rc < 0)
				rc = kn_errorf(err, why.code, field, "%s: %s",
					       field, why.message);
			kn_blob_store_free(probe);
			free(field);
		}
	}
	/* $KILN_HOME/blobs is always a root, made now (as the file store
	   makes its directories) so it resolves. */
	if (rc == 0 && kn_mkdir_p(blobs, 0755) < 0)
		rc = kn_errorf(err, KN_EIO, NULL, "%s: cannot create it",
			       blobs);
	if (rc == 0)
		rc = kn_stores_add_root(stores, blobs, err);
	for (size_t i = 0; rc == 0 && i < s->cfg.n_file_roots; i++)
		rc = kn_stores_add_root(stores, s->cfg.file_roots[i], err);
	kn_stores_allow_unconfigured(stores, s->cfg.allow_unconfigured_stores);
	if (rc == 0 && s->cfg.backup_to && !strstr(s->cfg.backup_to, "://")) {
		char *url = NULL;

		rc = kn_stores_resolve(stores, s->cfg.backup_to, "backup-to",
				       &url, err);
		free(url);
	}
	free(blobs);
	if (rc < 0) {
		kn_stores_free(stores);
		return rc;
	}
	/* Before any thread or shim starts: they inherit it. */
	scopes = kn_stores_scopes_json(stores);
	setenv(KN_STORE_SCOPES_ENV, scopes, 1);
	free(scopes);
	s->stores = stores;
	return 0;
}

void blobstores_free(struct server *s)
{
	kn_stores_free(s->stores);
	s->stores = NULL;
}

int blobstores_open(const struct server *s, const char *ref,
		    const char *field, const struct kn_blob_store_config *tuning,
		    struct kn_blob_store **out, struct kn_error *err)
{
	return kn_stores_open(s->stores, ref ? ref : KN_DEFAULT_STORE, field,
			      tuning, out, err);
}

char *blobstores_url(const struct server *s, const char *ref)
{
	char *url = NULL;

	if (!ref)
		return kn_xstrdup(s->blob_url);
	/* One the stores refuse stays as it is, for the open to refuse
	   with its reason: never the default store instead. */
	if (kn_stores_resolve(s->stores, ref, "store", &url, NULL) < 0)
		return kn_xstrdup(ref);
	return url;
}

int blobstores_check_job(const struct server *s,
			 const struct kn_job_spec *spec, const char *filename,
			 struct kn_error *err)
{
	struct kn_error why;
	char *url = NULL;
	int rc = 0;

	/* A pod reaches one store, with the kiln-store-credentials Secret. */
	if (spec->checkpoint.store && s->exec->ops->places_tasks &&
	    !strstr(spec->checkpoint.store, "://"))
		rc = kn_errorf(&why, KN_EINVAL, "checkpoint.store",
			       "checkpoint.store: pods reach their store by "
			       "URL with the kiln-store-credentials Secret; "
			       "give the URL, not the name \"%s\"",
			       spec->checkpoint.store);
	else if (spec->checkpoint.store)
		rc = kn_stores_resolve(s->stores, spec->checkpoint.store,
				       "checkpoint.store", &url, &why);
	free(url);
	for (size_t i = 0; rc == 0 && i < spec->n_inputs; i++) {
		char field[32];

		if (!spec->inputs[i].url)
			continue; /* a path not resolved: refused elsewhere */
		snprintf(field, sizeof(field), "inputs[%zu]", i);
		url = NULL;
		rc = kn_stores_resolve(s->stores, spec->inputs[i].url, field,
				       &url, &why);
		free(url);
	}
	if (rc < 0)
		return kn_errorf(err, why.code, why.field, "%s: %s", filename,
				 why.message);
	return 0;
}
