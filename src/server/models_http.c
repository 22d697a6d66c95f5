/*
 * The model registry's HTTP handlers (docs/registry.md); the registry
 * itself is models.c, blobs and their uploads models_blobs.c.
 */
#include "modelsvc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/ckpt.h"

void models_fail(struct server *s, struct kn_http_req *req,
		 const struct caller *c, const char *action, const char *object,
		 const struct kn_error *err)
{
	core_audit(s, c, action, object, "error", err->message);
	kn_http_reply_error(req, err);
}

json_t *models_body_object(struct kn_http_req *req, struct kn_error *err)
{
	size_t len;
	const char *text = kn_http_body(req, &len);
	json_t *body = json_loadb(text, len, 0, NULL);

	if (!json_is_object(body)) {
		json_decref(body);
		kn_errorf(err, KN_EINVAL, NULL, "body must be a JSON object");
		return NULL;
	}
	return body;
}

const char *models_body_alias(json_t *body, struct kn_error *err)
{
	const char *alias = json_string_value(json_object_get(body, "alias"));

	if (!kn_model_alias_ok(alias)) {
		kn_errorf(err, KN_EINVAL, "alias",
			  "alias must be a name that is not all digits");
		return NULL;
	}
	return alias;
}

static bool alias_checked(json_t *body, const char **alias,
			  struct kn_error *err)
{
	*alias = json_string_value(json_object_get(body, "alias"));
	if (json_object_get(body, "alias") && !kn_model_alias_ok(*alias)) {
		kn_errorf(err, KN_EINVAL, "alias",
			  "an alias is a name that is not all digits");
		return false;
	}
	return true;
}

/*
 * POST .../versions: the check that every blob is in the store and
 * durable (a sync of the store's file system, which may flush a large
 * upload) runs on a worker; the version is recorded on the loop after.
 */
struct version_push {
	struct server *s; /* loop only */
	struct kn_http_req *req;
	struct caller caller;
	char *name, *alias, *store_url;
	struct kn_model_files files;
	int rc;
	struct kn_error err;
};

static void version_push_work(void *arg)
{
	struct version_push *w = arg;
	struct kn_blob_store *store = NULL;

	w->rc = models_open_store(w->store_url, &store, &w->err);
	if (w->rc == 0)
		w->rc = models_check_blobs(store, &w->files, &w->err);
	kn_blob_store_free(store);
}

static void version_push_done(void *arg, bool ran)
{
	struct version_push *w = arg;
	json_t *reply = NULL;
	char object[96];

	snprintf(object, sizeof(object), "model/%s", w->name);
	if (!ran)
		w->rc = kn_errorf(&w->err, KN_EUNAVAIL, NULL,
				  "the server stopped before the blobs of %s "
				  "were checked; push again", w->name);
	if (w->rc == 0 && idem_begin(w->s, w->req, &w->caller))
		goto out;
	if (w->rc == 0)
		w->rc = models_version_create(w->s, &w->caller, w->name, &w->files,
				       NULL, NULL, w->alias, &reply, &w->err);
	if (w->rc < 0) {
		idem_abort(w->s, w->req);
		models_fail(w->s, w->req, &w->caller, "model.push", object, &w->err);
	} else {
		idem_reply(w->s, w->req, &w->caller, 201, reply);
	}
out:
	KN_FREE_ALL(w->name, w->alias, w->store_url);
	kn_model_files_release(&w->files);
	free(w);
}

static void models_h_version_create(struct server *s, struct kn_http_req *req,
			     const struct caller *c, const char *param)
{
	struct kn_model_files files = {0};
	struct version_push *w;
	struct kn_error err;
	json_t *body = NULL;
	const char *alias = NULL;
	char object[96];

	snprintf(object, sizeof(object), "model/%.64s", param);
	if (idem_replayed(s, req, c))
		return;
	if (!models_name_checked(param, &err))
		goto fail;
	body = models_body_object(req, &err);
	if (!body || !alias_checked(body, &alias, &err))
		goto fail;
	if (kn_model_files_from_json(json_object_get(body, "files"), "files",
				     &files, &err) < 0)
		goto fail;
	if (files.n == 0) {
		kn_errorf(&err, KN_EINVAL, "files", "a version needs a file");
		goto fail;
	}
	w = kn_xcalloc(1, sizeof(*w));
	w->s = s;
	w->req = req;
	w->caller = *c;
	w->name = kn_xstrdup(param);
	w->alias = alias ? kn_xstrdup(alias) : NULL;
	w->store_url = kn_xstrdup(core_blob_url(s));
	w->files = files;
	kn_workers_submit(core_request_workers(s), version_push_work,
			  version_push_done, w);
	json_decref(body);
	return;
fail:
	models_fail(s, req, c, "model.push", object, &err);
	json_decref(body);
	kn_model_files_release(&files);
}

/* ---- reads ---- */


static void models_h_list(struct server *s, struct kn_http_req *req,
		   const struct caller *c, const char *param)
{
	struct kn_model_row *rows = NULL;
	struct kn_error err;
	size_t n = 0;
	json_t *list;

	(void)param;
	if (kn_store_model_list(core_store(s), &rows, &n, &err) < 0) {
		models_fail(s, req, c, "model.list", "models", &err);
		return;
	}
	list = json_array();
	for (size_t i = 0; i < n; i++) {
		struct kn_model_alias_row *al = NULL;
		size_t na = 0;
		json_t *aliases = json_object();
		if (kn_store_model_alias_list(core_store(s), rows[i].name, &al, &na,
					      &err) == 0)
			for (size_t k = 0; k < na; k++)
				json_object_set_new(aliases, al[k].alias,
						    json_integer(al[k].version));
		kn_model_alias_list_free(al, na);
		json_array_append_new(
			list,
			json_pack("{s:s, s:I, s:I, s:o, s:I, s:I}", "name",
				  rows[i].name, "versions",
				  (json_int_t)rows[i].versions, "latest",
				  (json_int_t)rows[i].latest, "aliases", aliases,
				  "created_at_ms", (json_int_t)rows[i].created_at,
				  "updated_at_ms",
				  (json_int_t)rows[i].updated_at));
	}
	kn_model_list_free(rows, n);
	core_audit(s, c, "model.list", "models", "ok", NULL);
	kn_http_reply_json(req, 200, json_pack("{s:o}", "models", list));
}

static json_t *model_json(struct server *s, const char *name,
			  struct kn_error *err)
{
	struct kn_model_version_row *vs = NULL;
	struct kn_model_alias_row *al = NULL, *hist = NULL;
	size_t nv = 0, na = 0, nh = 0;
	json_t *o = NULL, *versions;

	if (kn_store_model_version_list(core_store(s), name, &vs, &nv, err) < 0 ||
	    kn_store_model_alias_list(core_store(s), name, &al, &na, err) < 0 ||
	    kn_store_model_alias_history(core_store(s), name, &hist, &nh, err) < 0)
		goto out;
	if (nv == 0 && nh == 0) {
		kn_errorf(err, KN_ENOTFOUND, NULL, "no model named %s", name);
		goto out;
	}
	versions = json_array();
	for (size_t i = 0; i < nv; i++) {
		json_t *m = json_loads(vs[i].manifest, 0, NULL);
		json_t *files = json_object_get(m, "files"), *f;
		int64_t bytes = 0;
		size_t k;
		json_array_foreach(files, k, f)
			bytes += json_integer_value(json_object_get(f, "size"));
		json_array_append_new(
			versions,
			json_pack("{s:I, s:s, s:I, s:I, s:I}", "version",
				  (json_int_t)vs[i].version, "created_by",
				  vs[i].created_by, "created_at_ms",
				  (json_int_t)vs[i].created_at, "files",
				  (json_int_t)json_array_size(files), "bytes",
				  (json_int_t)bytes));
		json_decref(m);
	}
	o = json_pack("{s:s, s:o, s:o, s:o}", "name", name, "versions",
		      versions, "aliases", model_aliases_json(al, na, false),
		      "alias_history", model_aliases_json(hist, nh, true));
out:
	kn_model_version_list_free(vs, nv);
	kn_model_alias_list_free(al, na);
	kn_model_alias_list_free(hist, nh);
	return o;
}

static json_t *version_json(struct server *s,
			    const struct kn_model_version_row *v,
			    struct kn_error *err)
{
	struct kn_model_signature_row *sigs = NULL;
	struct kn_model_alias_row *al = NULL;
	struct kn_model_keyring ring = {0};
	size_t ns = 0, na = 0;
	json_t *o = NULL, *list, *aliases;
	bool trusted = false;

	if (kn_store_model_signature_list(core_store(s), v->name, v->version, &sigs,
					  &ns, err) < 0 ||
	    kn_store_model_alias_list(core_store(s), v->name, &al, &na, err) < 0 ||
	    kn_model_keyring_load(models_state(s)->trusted_keys, &ring, err) < 0)
		goto out;
	list = json_array();
	for (size_t i = 0; i < ns; i++) {
		bool t = kn_model_keyring_has(&ring, sigs[i].key_id);
		trusted |= t;
		json_array_append_new(
			list,
			json_pack("{s:s, s:s, s:s, s:s, s:I, s:b}", "key_id",
				  sigs[i].key_id, "public_key",
				  sigs[i].public_key, "signature",
				  sigs[i].signature, "signed_by",
				  sigs[i].signed_by, "signed_at_ms",
				  (json_int_t)sigs[i].signed_at, "trusted", t));
	}
	aliases = json_array();
	for (size_t i = 0; i < na; i++)
		if (al[i].version == v->version)
			json_array_append_new(aliases, json_string(al[i].alias));
	o = json_pack("{s:s, s:I, s:s, s:I, s:o, s:o, s:b, s:o, s:s}", "name",
		      v->name, "version", (json_int_t)v->version, "created_by",
		      v->created_by, "created_at_ms", (json_int_t)v->created_at,
		      "manifest", json_loads(v->manifest, 0, NULL), "signatures",
		      list, "trusted", trusted, "aliases", aliases, "store",
		      core_blob_url(s));
	json_object_set_new(o, "evaluations",
			    models_evaluations_json(s, v->name, v->version));
out:
	kn_model_signature_list_free(sigs, ns);
	kn_model_alias_list_free(al, na);
	kn_model_keyring_release(&ring);
	return o;
}

static void models_h_get(struct server *s, struct kn_http_req *req,
		  const struct caller *c, const char *param)
{
	const char *purpose = kn_http_query(req, "purpose");
	const char *action = "model.read";
	struct kn_model_version_row v = {0};
	struct kn_model_ref ref;
	struct kn_error err;
	char object[160];
	json_t *o = NULL;

	if (purpose && !strcmp(purpose, "pull"))
		action = "model.pull";
	else if (purpose && !strcmp(purpose, "verify"))
		action = "model.verify";
	else if (purpose && strcmp(purpose, "read") != 0) {
		kn_errorf(&err, KN_EINVAL, "purpose",
			  "purpose must be read, pull or verify");
		models_fail(s, req, c, action, "model", &err);
		return;
	}
	snprintf(object, sizeof(object), "model/%.140s", param);
	if (kn_model_ref_parse(param, false, "model", &ref, &err) < 0)
		goto fail;
	if (!kn_model_ref_has_at(&ref)) {
		o = model_json(s, ref.name, &err);
	} else if (models_resolve(s, &ref, &v, &err) == 0) {
		snprintf(object, sizeof(object), "model/%s@%lld", v.name,
			 (long long)v.version);
		o = version_json(s, &v, &err);
	}
	if (!o)
		goto fail;
	core_audit(s, c, action, object, "ok", NULL);
	kn_http_reply_json(req, 200, o);
	kn_model_version_row_release(&v);
	return;
fail:
	kn_model_version_row_release(&v);
	models_fail(s, req, c, action, object, &err);
}

/* ---- signatures ---- */

static void models_h_sign(struct server *s, struct kn_http_req *req,
		   const struct caller *c, const char *param)
{
	struct kn_model_version_row v = {0};
	struct kn_model_signature_row row;
	struct kn_model_keyring ring = {0};
	struct kn_model_ref ref;
	struct kn_error err;
	struct kn_audit a;
	unsigned char pub[KN_ED25519_PUB_LEN], sig[KN_ED25519_SIG_LEN];
	char key_id[KN_SHA256_HEX + 1], object[160];
	const char *pub_b64, *sig_b64;
	json_t *body = NULL;
	int rc;

	snprintf(object, sizeof(object), "model/%.140s", param);
	if (kn_model_ref_parse(param, true, "model", &ref, &err) < 0 ||
	    models_resolve(s, &ref, &v, &err) < 0)
		goto fail;
	snprintf(object, sizeof(object), "model/%s@%lld", v.name,
		 (long long)v.version);
	body = models_body_object(req, &err);
	if (!body)
		goto fail;
	pub_b64 = json_string_value(json_object_get(body, "public_key"));
	sig_b64 = json_string_value(json_object_get(body, "signature"));
	if (kn_base64_decode(pub_b64, pub, sizeof(pub)) != KN_ED25519_PUB_LEN) {
		kn_errorf(&err, KN_EINVAL, "public_key",
			  "must be the base64 of a raw 32-byte Ed25519 key");
		goto fail;
	}
	if (kn_base64_decode(sig_b64, sig, sizeof(sig)) != KN_ED25519_SIG_LEN) {
		kn_errorf(&err, KN_EINVAL, "signature",
			  "must be the base64 of a 64-byte Ed25519 signature");
		goto fail;
	}
	kn_model_key_id(pub, key_id);
	if (kn_model_sig_check(pub, v.manifest, strlen(v.manifest), sig) < 0) {
		kn_errorf(&err, KN_EINVAL, "signature",
			  "does not verify: not key %.16s...'s signature of the "
			  "canonical manifest of %s@%lld", key_id, v.name,
			  (long long)v.version);
		goto fail;
	}
	if (kn_model_keyring_load(models_state(s)->trusted_keys, &ring, &err) < 0)
		goto fail;
	memset(&row, 0, sizeof(row));
	row.key_id = key_id;
	row.public_key = (char *)pub_b64;
	row.signature = (char *)sig_b64;
	row.signed_by = (char *)c->name;
	row.signed_at = kn_now_ms();
	caller_audit(&a, c, "model.sign", object,
		     "ok", key_id);
	rc = kn_store_model_signature_insert(core_store(s), v.name, v.version, &row,
					     &a, &err);
	if (rc == -EEXIST)
		kn_errorf(&err, KN_ECONFLICT, "public_key",
			  "key %s has already signed %s@%lld", key_id, v.name,
			  (long long)v.version);
	if (rc < 0)
		goto fail;
	kn_http_reply_json(req, 201,
			   json_pack("{s:s, s:I, s:s, s:b}", "name", v.name,
				     "version", (json_int_t)v.version, "key_id",
				     key_id, "trusted",
				     kn_model_keyring_has(&ring, key_id)));
	goto out;
fail:
	models_fail(s, req, c, "model.sign", object, &err);
out:
	kn_model_keyring_release(&ring);
	kn_model_version_row_release(&v);
	json_decref(body);
}

/* ---- aliases ---- */

static const char *body_alias(struct kn_http_req *req, json_t **body,
			      struct kn_error *err)
{
	*body = models_body_object(req, err);
	return *body ? models_body_alias(*body, err) : NULL;
}

static void models_h_promote(struct server *s, struct kn_http_req *req,
		      const struct caller *c, const char *param)
{
	struct kn_model_version_row v = {0};
	struct kn_model_ref ref;
	struct kn_error err;
	json_t *body = NULL;
	const char *alias = NULL;
	char object[160];
	int64_t from;

	snprintf(object, sizeof(object), "model/%.140s", param);
	if (kn_model_ref_parse(param, true, "model", &ref, &err) < 0 ||
	    models_resolve(s, &ref, &v, &err) < 0)
		goto fail;
	alias = body_alias(req, &body, &err);
	if (!alias)
		goto fail;
	if (models_alias_move(s, c, v.name, alias, "promote", v.version, &from,
		       &err) < 0)
		goto fail;
	kn_http_reply_json(req, 200,
			   json_pack("{s:s, s:s, s:I, s:o}", "name", v.name,
				     "alias", alias, "version",
				     (json_int_t)v.version, "from",
				     from ? json_integer(from) : json_null()));
	goto out;
fail:
	models_fail(s, req, c, "model.promote", object, &err);
out:
	kn_model_version_row_release(&v);
	json_decref(body);
}

static void models_h_rollback(struct server *s, struct kn_http_req *req,
		       const struct caller *c, const char *param)
{
	struct kn_error err;
	json_t *body = NULL;
	const char *alias = NULL;
	char object[160];
	int64_t target, from;

	snprintf(object, sizeof(object), "model/%.64s", param);
	if (!models_name_checked(param, &err))
		goto fail;
	alias = body_alias(req, &body, &err);
	if (!alias)
		goto fail;
	snprintf(object, sizeof(object), "model/%s@%s", param, alias);
	if (models_alias_rollback(s, c, param, alias, &target, &from, &err) < 0)
		goto fail;
	kn_http_reply_json(req, 200,
			   json_pack("{s:s, s:s, s:I, s:I}", "name", param,
				     "alias", alias, "version",
				     (json_int_t)target, "from",
				     (json_int_t)from));
	goto out;
fail:
	models_fail(s, req, c, "model.rollback", object, &err);
out:
	json_decref(body);
}

/* Who waits for a version from a job: the request. */
struct from_job_reply {
	struct kn_http_req *req;
	struct caller caller;
	char object[96];
};

static void from_job_replied(struct server *s, int rc, json_t *reply,
			     const struct kn_error *err, void *arg)
{
	struct from_job_reply *r = arg;

	if (rc < 0)
		models_fail(s, r->req, &r->caller, "model.push", r->object, err);
	else
		kn_http_reply_json(r->req, 201, json_incref(reply));
	free(r);
}

static void models_h_from_job(struct server *s, struct kn_http_req *req,
			      const struct caller *c, const char *param)
{
	struct from_job_reply *r;
	struct kn_error err;
	json_t *body = NULL, *job;
	const char *alias = NULL;
	char object[96];

	snprintf(object, sizeof(object), "model/%.64s", param);
	body = models_body_object(req, &err);
	if (!body || !alias_checked(body, &alias, &err))
		goto fail;
	job = json_object_get(body, "job");
	if (!json_is_integer(job) || json_integer_value(job) <= 0) {
		kn_errorf(&err, KN_EINVAL, "job", "job must be a job id");
		goto fail;
	}
	r = kn_xcalloc(1, sizeof(*r));
	r->req = req;
	r->caller = *c;
	snprintf(r->object, sizeof(r->object), "model/%s", param);
	if (models_from_job_start(s, c, param, json_integer_value(job), alias,
				  from_job_replied, r, &err) < 0) {
		free(r);
		goto fail;
	}
	json_decref(body);
	return;
fail:
	json_decref(body);
	models_fail(s, req, c, "model.push", object, &err);
}

/* Each input that came from a job gets that job's lineage, recursively. */
static void models_h_lineage(struct server *s, struct kn_http_req *req,
		      const struct caller *c, const char *param)
{
	struct kn_model_version_row v = {0};
	struct kn_blob_store *store = NULL;
	struct kn_model_ref ref;
	struct kn_error err;
	json_t *manifest = NULL, *lineage;
	char object[160];

	snprintf(object, sizeof(object), "model/%.140s", param);
	if (kn_model_ref_parse(param, true, "model", &ref, &err) < 0 ||
	    models_resolve(s, &ref, &v, &err) < 0 ||
	    models_open_store(core_blob_url(s), &store, &err) < 0)
		goto fail;
	snprintf(object, sizeof(object), "model/%s@%lld", v.name,
		 (long long)v.version);
	manifest = json_loads(v.manifest, 0, NULL);
	lineage = json_object_get(manifest, "lineage");
	if (json_is_object(lineage) &&
	    models_lineage_expand(s, store, lineage, 0, &err) < 0)
		goto fail;
	core_audit(s, c, "model.read", object, "ok", "lineage");
	kn_http_reply_json(req, 200,
			   json_pack("{s:s, s:I, s:O, s:O}", "name", v.name,
				     "version", (json_int_t)v.version,
				     "lineage", lineage ? lineage : json_null(),
				     "metrics",
				     json_object_get(manifest, "metrics")
					     ? json_object_get(manifest,
							       "metrics")
					     : json_null()));
	goto out;
fail:
	models_fail(s, req, c, "model.read", object, &err);
out:
	json_decref(manifest);
	kn_blob_store_free(store);
	kn_model_version_row_release(&v);
}

static const struct route routes[] = {
	/* The model registry (models.c); {name} is NAME, NAME@VERSION or
	   NAME@ALIAS. "missing" comes before the digest it would match. */
	{"POST", "/v1/model-blobs/missing", KN_ROLE_USER, false,
	 "model.blob.check", models_h_blobs_missing},
	{"POST", "/v1/model-blobs/{name}", KN_ROLE_USER, false,
	 "model.blob.put", models_h_blob_put},
	{"GET", "/v1/model-blobs/{name}", KN_ROLE_USER, false, NULL,
	 models_h_blob_status},
	{"POST", "/v1/model-uploads/{name}", KN_ROLE_USER, false,
	 "model.blob.put", models_h_upload_part},
	{"GET", "/v1/model-uploads/{name}", KN_ROLE_USER, false, NULL,
	 models_h_upload_status},
	{"POST", "/v1/model-uploads/{name}/commit", KN_ROLE_USER, false,
	 "model.blob.put", models_h_upload_commit},
	{"GET", "/v1/models", KN_ROLE_VIEWER, false, "model.list",
	 models_h_list},
	{"GET", "/v1/models/{name}", KN_ROLE_VIEWER, false, "model.read",
	 models_h_get},
	{"POST", "/v1/models/{name}/versions", KN_ROLE_USER, false,
	 "model.push", models_h_version_create},
	{"POST", "/v1/models/{name}/signatures", KN_ROLE_USER, false,
	 "model.sign", models_h_sign},
	{"POST", "/v1/models/{name}/promote", KN_ROLE_OPERATOR, false,
	 "model.promote", models_h_promote},
	{"POST", "/v1/models/{name}/rollback", KN_ROLE_OPERATOR, false,
	 "model.rollback", models_h_rollback},
	{"POST", "/v1/models/{name}/from-job", KN_ROLE_USER, false,
	 "model.push", models_h_from_job},
	{"GET", "/v1/models/{name}/lineage", KN_ROLE_VIEWER, false,
	 "model.read", models_h_lineage},
	{0},
};

/* A blob's parts are the registry's large bodies. */
static size_t models_body_cap(const struct route *r)
{
	return r->fn == models_h_blob_put || r->fn == models_h_upload_part
		       ? MODEL_PART_MAX
		       : 0;
}

const struct service models_service = {
	.name = "models",
	.phase = SERVICE_PHASE_LOOP,
	.start = models_start,
	.stop = models_stop,
	.routes = routes,
	.body_cap = models_body_cap,
};
