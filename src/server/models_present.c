/*
 * Which blobs the store holds (docs/registry.md, Uploads): the
 * missing-blobs check a push starts with, and the answer to a commit
 * for an upload that is gone. Each asks the store a question per blob
 * (a HEAD for Azure), on a request worker: a slow or unreachable store
 * must not hold the loop, and with it every other client.
 */
#include "modelsvc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"

struct present_ask {
	struct server *s; /* used on the loop only */
	struct kn_http_req *req;
	struct caller caller;
	char *store_url;
	json_t *digests;  /* missing-blobs: the digests asked about */
	json_t *missing;  /* ... and those the store lacks */
	size_t present;
	char id[MODEL_UPLOAD_ID_MAX + 1]; /* a gone upload's commit */
	char digest[KN_SHA256_HEX + 1];
	char object[96];
	int64_t size;
	int rc;
	struct kn_error err;
};

static struct present_ask *ask_new(struct server *s, struct kn_http_req *req,
				   const struct caller *c)
{
	struct present_ask *w = kn_xcalloc(1, sizeof(*w));

	w->s = s;
	w->req = req;
	w->caller = *c;
	w->store_url = kn_xstrdup(core_blob_url(s));
	return w;
}

static void ask_free(struct present_ask *w)
{
	json_decref(w->digests);
	json_decref(w->missing);
	KN_FREE_ALL(w->store_url, w);
}

/* The size of blob hex, -ENOENT when the store lacks it. */
static int blob_size(struct kn_blob_store *store, const char *hex,
		     int64_t *size, struct kn_error *err)
{
	struct kn_blob_info info = {0};
	char *name = kn_model_blob_name(hex);
	int rc = kn_blob_stat(store, name, &info, err);

	free(name);
	*size = info.size;
	return rc;
}

static void missing_work(void *arg)
{
	struct present_ask *w = arg;
	struct kn_blob_store *store = NULL;
	size_t i;
	json_t *d;

	w->rc = models_open_store(w->store_url, &store, &w->err);
	w->missing = json_array();
	json_array_foreach(w->digests, i, d) {
		const char *hex = json_string_value(d);
		int64_t size;
		int rc;

		if (w->rc < 0)
			break;
		rc = blob_size(store, hex, &size, &w->err);
		if (rc == -ENOENT)
			json_array_append_new(w->missing, json_string(hex));
		else if (rc < 0)
			w->rc = rc;
		else
			w->present++;
	}
	kn_blob_store_free(store);
}

static void missing_done(void *arg, bool ran)
{
	struct present_ask *w = arg;
	json_t *answer, *local;
	char detail[96];

	if (!ran)
		w->rc = kn_errorf(&w->err, KN_EUNAVAIL, NULL,
				  "the server is stopping");
	if (w->rc < 0) {
		models_fail(w->s, w->req, &w->caller, "model.blob.check",
			    "blobs", &w->err);
		ask_free(w);
		return;
	}
	snprintf(detail, sizeof(detail), "%zu present, %zu missing",
		 w->present, json_array_size(w->missing));
	core_audit(w->s, &w->caller, "model.blob.check", "blobs", "ok", detail);
	answer = json_pack("{s:O, s:I, s:i}", "missing", w->missing,
			   "present", (json_int_t)w->present, "part_max",
			   MODEL_PART_MAX);
	local = models_local_json(w->s);
	if (local)
		json_object_set_new(answer, "local", local);
	kn_http_reply_json(w->req, 200, answer);
	ask_free(w);
}

void models_h_blobs_missing(struct server *s, struct kn_http_req *req,
			    const struct caller *c, const char *param)
{
	struct kn_error err;
	json_t *body = models_body_object(req, &err), *digests, *d;
	struct present_ask *w;
	size_t i;

	(void)param;
	if (!body)
		goto fail;
	digests = json_object_get(body, "digests");
	if (!json_is_array(digests)) {
		kn_errorf(&err, KN_EINVAL, "digests",
			  "must be an array of sha256 hex digests");
		goto fail;
	}
	json_array_foreach(digests, i, d) {
		if (!kn_sha256_hex_ok(json_string_value(d))) {
			kn_errorf(&err, KN_EINVAL, "digests",
				  "digests[%zu] is not 64 lowercase hex digits",
				  i);
			goto fail;
		}
	}
	w = ask_new(s, req, c);
	w->digests = json_incref(digests);
	kn_workers_submit(core_request_workers(s), missing_work, missing_done,
			  w);
	json_decref(body);
	return;
fail:
	models_fail(s, req, c, "model.blob.check", "blobs", &err);
	json_decref(body);
}

static void gone_work(void *arg)
{
	struct present_ask *w = arg;
	struct kn_blob_store *store = NULL;

	w->rc = models_open_store(w->store_url, &store, &w->err);
	if (w->rc == 0)
		w->rc = blob_size(store, w->digest, &w->size, &w->err);
	kn_blob_store_free(store);
}

static void gone_done(void *arg, bool ran)
{
	struct present_ask *w = arg;

	if (!ran)
		w->rc = kn_errorf(&w->err, KN_EUNAVAIL, NULL,
				  "the server is stopping");
	else if (w->rc == -ENOENT)
		kn_errorf(&w->err, KN_ENOTFOUND, "upload",
			  "no upload %s in progress for %s (never begun, "
			  "dropped, or expired after --upload-idle)", w->id,
			  w->caller.name);
	if (w->rc == 0)
		kn_http_reply_json(w->req, 200,
				   json_pack("{s:s, s:I, s:b, s:b}", "digest",
					     w->digest, "received",
					     (json_int_t)w->size, "stored", 1,
					     "existed", 1));
	else
		models_fail(w->s, w->req, &w->caller, "model.blob.put",
			    w->object, &w->err);
	ask_free(w);
}

/* Whether the blob a gone upload's commit names is stored: its answer
   is what POST /v1/model-blobs/missing tells any user anyway. */
void models_commit_gone(struct server *s, struct kn_http_req *req,
			const struct caller *c, const char *id,
			const char *digest, const char *object)
{
	struct present_ask *w = ask_new(s, req, c);

	kn_strlcpy(w->id, id, sizeof(w->id));
	kn_strlcpy(w->digest, digest, sizeof(w->digest));
	kn_strlcpy(w->object, object, sizeof(w->object));
	kn_workers_submit(core_request_workers(s), gone_work, gone_done, w);
}
