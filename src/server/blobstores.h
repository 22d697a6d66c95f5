/*
 * The stores jobs may name, and whose credential goes where
 * (blobstores.c). Not a public header of the server module.
 */
#ifndef KILN_SERVER_BLOBSTORES_H
#define KILN_SERVER_BLOBSTORES_H

#include "base/base.h"

struct server;
struct kn_job_spec;
struct kn_blob_store;
struct kn_blob_store_config;
/* s->stores and s->blob_url from the config; exports the shims' scopes. */
int blobstores_init(struct server *s, struct kn_error *err);
void blobstores_free(struct server *s);
/*
 * Open ref (a store's name or a URL; NULL = the default store) with the
 * credential of the store it is in, none otherwise; what no store or
 * root allows is refused, err naming field. tuning may be NULL.
 */
int blobstores_open(const struct server *s, const char *ref,
		    const char *field, const struct kn_blob_store_config *tuning,
		    struct kn_blob_store **out, struct kn_error *err);
/* The URL of ref (a store's name or a URL; NULL = the default); ref
   itself when the stores refuse it. malloc'd. */
char *blobstores_url(const struct server *s, const char *ref);
/*
 * A job's checkpoint.store and inputs, as the stores allow them: 0, or
 * the refusal naming the field after "FILENAME: ".
 */
int blobstores_check_job(const struct server *s,
			 const struct kn_job_spec *spec, const char *filename,
			 struct kn_error *err);

#endif
