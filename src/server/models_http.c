/*
 * The model registry's HTTP handlers (docs/registry.md); the registry
 * itself is models.c.
 *
 * A blob arrives in parts into a staging file under
 * $KILN_HOME/registry/uploads, parts of up to MODEL_PART_MAX bytes, one
 * of two ways. In order: each appended while an EVP context hashes it. Or
 * sized (the client gives the blob's size with every part): parts at any
 * offset, several connections at once, written
 * where they belong, a part sent again answered from what is held; the
 * whole file is hashed on a worker once every byte is in. Either way the
 * digest must be the one the upload is named by, and only then is the
 * file put in the store (create-only, so a blob is never overwritten).
 * Uploads in progress live in memory, one per digest and client-chosen
 * upload id (two pushes of one new blob stage apart; the second to finish
 * finds it stored), and a client asks what one holds (GET with its id) to
 * send only the rest after a lost connection; after a server restart a
 * client starts them again.
 */
#include "modelsvc.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/statvfs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "ckpt/ckpt.h"

struct upload {
	char digest[KN_SHA256_HEX + 1];
	char id[MODEL_UPLOAD_ID_MAX + 1]; /* the client's name for this upload */
	char owner[128]; /* the token that started it: its caps count it */
	char *path; /* the staging file */
	int fd;
	EVP_MD_CTX *ctx;     /* in order: the bytes so far */
	int64_t offset;      /* bytes staged (in order: where the next goes) */
	int64_t size;        /* sized: the blob's size; in order: -1 */
	struct model_ranges got; /* sized: the parts received */
	int64_t touched_ms;
	struct upload *next;
};

/* Out of the list of uploads in progress: no later request finds it. */
static void upload_detach(struct model_state *m, struct upload *u)
{
	for (struct upload **p = &m->uploads; *p; p = &(*p)->next) {
		if (*p == u) {
			*p = u->next;
			break;
		}
	}
}

static void upload_release(struct upload *u)
{
	if (u->fd >= 0)
		close(u->fd);
	unlink(u->path);
	free(u->path);
	EVP_MD_CTX_free(u->ctx);
	model_ranges_release(&u->got);
	free(u);
}

static void upload_drop(struct model_state *m, struct upload *u)
{
	upload_detach(m, u);
	upload_release(u);
}

void models_uploads_drop(struct model_state *m)
{
	while (m->uploads)
		upload_drop(m, m->uploads);
}

static void fail(struct server *s, struct kn_http_req *req,
		 const struct caller *c, const char *action, const char *object,
		 const struct kn_error *err)
{
	models_audit(s, c, action, object, "error", err->message);
	kn_http_reply_error(req, err);
}

static json_t *body_object(struct kn_http_req *req, struct kn_error *err)
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

/* ---- blobs ---- */

static void models_h_blobs_missing(struct server *s, struct kn_http_req *req,
			    const struct caller *c, const char *param)
{
	struct kn_blob_store *store = NULL;
	struct kn_error err;
	json_t *body = body_object(req, &err), *digests, *missing = NULL, *d;
	size_t i, present = 0;
	char detail[96];

	(void)param;
	if (!body)
		goto fail;
	digests = json_object_get(body, "digests");
	if (!json_is_array(digests)) {
		kn_errorf(&err, KN_EINVAL, "digests",
			  "must be an array of sha256 hex digests");
		goto fail;
	}
	if (models_open_store(s, &store, &err) < 0)
		goto fail;
	missing = json_array();
	json_array_foreach(digests, i, d) {
		const char *hex = json_string_value(d);
		struct kn_blob_info info = {0};
		char *name;
		int rc;

		if (!kn_sha256_hex_ok(hex)) {
			kn_errorf(&err, KN_EINVAL, "digests",
				  "digests[%zu] is not 64 lowercase hex digits",
				  i);
			goto fail;
		}
		name = kn_model_blob_name(hex);
		rc = kn_blob_stat(store, name, &info, &err);
		free(name);
		if (rc == -ENOENT)
			json_array_append_new(missing, json_string(hex));
		else if (rc < 0)
			goto fail;
		else
			present++;
	}
	snprintf(detail, sizeof(detail), "%zu present, %zu missing", present,
		 json_array_size(missing));
	models_audit(s, c, "model.blob.check", "blobs", "ok", detail);
	kn_http_reply_json(req, 200,
			   json_pack("{s:o, s:I, s:i}", "missing", missing,
				     "present", (json_int_t)present,
				     "part_max", MODEL_PART_MAX));
	missing = NULL;
	goto out;
fail:
	fail(s, req, c, "model.blob.check", "blobs", &err);
out:
	json_decref(missing);
	json_decref(body);
	kn_blob_store_free(store);
}

/* An upload is its owner's: another token's same digest and id is not. */
static struct upload *upload_find(struct model_state *m, const char *digest,
				  const char *id, const char *owner)
{
	for (struct upload *u = m->uploads; u; u = u->next)
		if (!strcmp(u->digest, digest) && !strcmp(u->id, id) &&
		    !strcmp(u->owner, owner))
			return u;
	return NULL;
}

void models_uploads_expire(struct server *s)
{
	struct model_state *m = models_state(s);
	int64_t now = kn_mono_ms();
	struct upload *u, *next;

	for (u = m->uploads; u; u = next) {
		next = u->next;
		if (now - u->touched_ms <= core_config(s)->upload_idle_ms)
			continue;
		kn_log(KN_LOG_INFO, "dropping %s's upload of %s: idle for %llds",
		       u->owner, u->digest,
		       (long long)((now - u->touched_ms) / 1000));
		upload_drop(m, u);
	}
}

/* How many uploads owner has open, and the bytes they staged. */
static void owner_usage(const struct model_state *m, const char *owner,
			int64_t *open, int64_t *staged)
{
	*open = 0;
	*staged = 0;
	for (const struct upload *u = m->uploads; u; u = u->next) {
		if (strcmp(u->owner, owner) != 0)
			continue;
		(*open)++;
		*staged += u->offset;
	}
}

/*
 * Room to stage len more bytes: the owner's cap on bytes staged (429)
 * and the free-space reserve of the staging file system (507), checked
 * before the bytes are written, so a full disk is never reached through
 * uploads.
 */
static int staging_room(struct server *s, const char *owner, int64_t len,
			struct kn_error *err)
{
	struct model_state *m = models_state(s);
	int64_t open, staged;
	struct statvfs fs;

	owner_usage(m, owner, &open, &staged);
	if (staged + len > core_config(s)->upload_max_staged)
		return kn_errorf(err, KN_ELIMIT, "upload",
				 "%s's uploads would stage %lld bytes, over the "
				 "cap of %lld (--upload-max-staged): finish or "
				 "abandon one first",
				 owner, (long long)(staged + len),
				 (long long)core_config(s)->upload_max_staged);
	if (statvfs(m->staging, &fs) < 0)
		return kn_errorf(err, KN_EIO, NULL, "%s: %s", m->staging,
				 strerror(errno));
	/* In 1/100ths of a block, so a large file system cannot overflow. */
	if (((long double)fs.f_bavail * fs.f_frsize - (long double)len) * 100 <
	    (long double)fs.f_blocks * fs.f_frsize * core_config(s)->staging_reserve_pct)
		return kn_errorf(err, KN_ENOSPACE, NULL,
				 "insufficient storage: staging %lld more bytes "
				 "would leave less than %lld%% of the upload "
				 "file system free (--staging-reserve)",
				 (long long)len,
				 (long long)core_config(s)->staging_reserve_pct);
	return 0;
}

static int upload_begin(struct server *s, const char *digest,
			const char *id, const char *owner, struct upload **out,
			struct kn_error *err)
{
	struct model_state *m = models_state(s);
	int64_t now = kn_mono_ms(), open, staged;
	struct upload *u;
	int rc;

	/* Starting over from 0 replaces the owner's upload of that id. */
	u = upload_find(m, digest, id, owner);
	if (u)
		upload_drop(m, u);
	models_uploads_expire(s);
	owner_usage(m, owner, &open, &staged);
	if (open >= core_config(s)->upload_max_open)
		return kn_errorf(err, KN_ELIMIT, "upload",
				 "%s has %lld uploads open, the cap "
				 "(--upload-max-open): finish one, or wait "
				 "for an idle one to expire",
				 owner, (long long)open);
	rc = staging_room(s, owner, 0, err);
	if (rc < 0)
		return rc;
	u = kn_xcalloc(1, sizeof(*u));
	kn_strlcpy(u->digest, digest, sizeof(u->digest));
	kn_strlcpy(u->id, id, sizeof(u->id));
	kn_strlcpy(u->owner, owner, sizeof(u->owner));
	/* A file of its own: one being stored by a worker may have the same
	   digest and id (a client that sent the last part again). */
	u->path = kn_asprintf("%s/%s.%s.XXXXXX", m->staging, digest, id);
	u->fd = mkostemp(u->path, O_CLOEXEC);
	u->ctx = EVP_MD_CTX_new();
	u->size = -1;
	u->touched_ms = now;
	u->next = m->uploads;
	m->uploads = u;
	if (u->fd < 0 || EVP_DigestInit_ex(u->ctx, EVP_sha256(), NULL) != 1) {
		int e = errno;
		upload_drop(m, u);
		return kn_errorf(err, KN_EIO, NULL, "cannot stage an upload: %s",
				 strerror(e));
	}
	*out = u;
	return 0;
}

/*
 * A finished upload's copy into the store (every byte read and hashed
 * again) runs on a worker; the request is answered when it ends. The
 * upload is out of the list by then, so a restart of it stages apart.
 */
struct upload_commit {
	struct server *s; /* used on the loop only */
	struct kn_http_req *req;
	struct caller caller;
	struct upload *u;
	char *store_url;
	bool existed;
	int rc;
	struct kn_error err;
};

/* A sized upload's bytes, whole, hash to its name (on the worker: a
   large file's hash would stall the loop). */
static int staged_digest_check(const struct upload *u, struct kn_error *err)
{
	struct kn_hash_item item = {.path = u->path};

	if (u->size < 0)
		return 0; /* in order: hashed as it came */
	kn_hash_files(&item, 1, 1, u->size, NULL, NULL);
	if (item.error)
		return kn_errorf(err, KN_EIO, NULL, "hashing the staged %s: %s",
				 u->digest, strerror(-item.error));
	if (strcmp(item.sha256, u->digest) != 0)
		return kn_errorf(err, KN_EINVAL, "sha256",
				 "blob %s: the %lld bytes sent hash to %s; "
				 "refused", u->digest, (long long)item.size,
				 item.sha256);
	return 0;
}

static void upload_commit_work(void *arg)
{
	struct upload_commit *w = arg;
	struct kn_blob_store_config cfg = {.url = w->store_url,
					   .use_env = true};
	struct kn_blob_store *store = NULL;
	char *name = kn_model_blob_name(w->u->digest);
	char sent[KN_SHA256_HEX + 1];
	int rc = staged_digest_check(w->u, &w->err);

	if (rc == 0)
		rc = kn_blob_store_open(&cfg, &store, &w->err);
	if (rc == 0)
		rc = kn_blob_put_file(store, name, w->u->path,
				      KN_BLOB_CREATE_ONLY, sent, NULL, &w->err);
	w->existed = rc == -EEXIST;
	if (rc == -EEXIST)
		rc = 0;
	else if (rc == 0 && strcmp(sent, w->u->digest) != 0) {
		/* The staging file changed under us: never keep a blob whose
		   name lies about its bytes. */
		kn_blob_delete(store, name, NULL);
		rc = kn_errorf(&w->err, KN_EIO, NULL,
			       "blob %s: staged bytes changed while stored",
			       w->u->digest);
	}
	w->rc = rc;
	free(name);
	kn_blob_store_free(store);
}

static void upload_commit_done(void *arg, bool ran)
{
	struct upload_commit *w = arg;
	char object[96], detail[64];

	/* Stored or refused, its staging file is done with: gone before
	   the answer, so a client never sees it after. */
	unlink(w->u->path);
	snprintf(object, sizeof(object), "blob/sha256/%s", w->u->digest);
	if (!ran)
		w->rc = kn_errorf(&w->err, KN_EUNAVAIL, NULL,
				  "the server stopped before blob %s was "
				  "stored; send it again", w->u->digest);
	if (w->rc < 0) {
		fail(w->s, w->req, &w->caller, "model.blob.put", object,
		     &w->err);
	} else {
		snprintf(detail, sizeof(detail), "%lld bytes%s",
			 (long long)w->u->offset,
			 w->existed ? ", already stored" : "");
		models_audit(w->s, &w->caller, "model.blob.put", object, "ok", detail);
		kn_http_reply_json(w->req, 201,
				   json_pack("{s:s, s:I, s:b, s:b}", "digest",
					     w->u->digest, "received",
					     (json_int_t)w->u->offset, "stored",
					     1, "existed", w->existed));
	}
	upload_release(w->u);
	free(w->store_url);
	free(w);
}

/*
 * The staged file is whole: check that it hashes to u->digest (in order:
 * here; sized: on the worker), then hand it (out of the list) to a worker
 * that puts it in the store.
 */
static int upload_commit(struct server *s, struct kn_http_req *req,
			 const struct caller *c, struct upload *u,
			 struct kn_error *err)
{
	unsigned char md[32];
	unsigned int mdlen = 0;
	char hex[KN_SHA256_HEX + 1];
	struct upload_commit *w;

	if (u->size < 0) {
		EVP_DigestFinal_ex(u->ctx, md, &mdlen);
		for (unsigned i = 0; i < mdlen; i++)
			snprintf(hex + 2 * i, 3, "%02x", md[i]);
	}
	if (u->size < 0 && strcmp(hex, u->digest) != 0)
		return kn_errorf(err, KN_EINVAL, "sha256",
				 "blob %s: the %lld bytes sent hash to %s; "
				 "refused", u->digest, (long long)u->offset,
				 hex);
	upload_detach(models_state(s), u);
	close(u->fd);
	u->fd = -1;
	w = kn_xcalloc(1, sizeof(*w));
	w->s = s;
	w->req = req;
	w->caller = *c;
	w->u = u;
	w->store_url = kn_xstrdup(core_blob_url(s));
	kn_workers_submit(core_request_workers(s), upload_commit_work,
			  upload_commit_done, w);
	return 0;
}

static int pwrite_all(int fd, const char *data, size_t len, int64_t at)
{
	while (len) {
		ssize_t n = pwrite(fd, data, len, (off_t)at);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		data += n;
		len -= (size_t)n;
		at += n;
	}
	return 0;
}

/* A part sent again: the same bytes as those held, or a conflict. */
static int part_matches(const struct upload *u, const char *data,
			size_t len, int64_t at, struct kn_error *err)
{
	char buf[65536];
	size_t done = 0;

	while (done < len) {
		size_t want = len - done < sizeof(buf) ? len - done
						       : sizeof(buf);
		ssize_t n = pread(u->fd, buf, want, (off_t)(at + (int64_t)done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return kn_errorf(err, KN_EIO, NULL,
					 "reading the staged %s: %s", u->digest,
					 n < 0 ? strerror(errno) : "short");
		if (memcmp(buf, data + done, (size_t)n) != 0)
			return kn_errorf(err, KN_ECONFLICT, "offset",
					 "bytes %lld-%lld of %s were received "
					 "before with other contents",
					 (long long)at,
					 (long long)(at + (int64_t)len),
					 u->digest);
		done += (size_t)n;
	}
	return 0;
}

static json_t *part_answer(const struct upload *u)
{
	return json_pack("{s:s, s:I, s:I, s:b}", "digest", u->digest,
			 "received", (json_int_t)u->offset, "size",
			 (json_int_t)u->size, "stored", 0);
}

/* The checks of a sized part before its bytes are written. */
static int part_check(struct server *s, const struct caller *c,
		      struct upload *u, int64_t offset, size_t len,
		      int64_t size, struct kn_error *err)
{
	if (u->size != size)
		return kn_errorf(err, KN_ECONFLICT, "size",
				 u->size < 0 ? "upload %s of %s is sent in "
					       "order, without a size"
					     : "upload %s of %s is of %lld "
					       "bytes, not %lld",
				 u->id, u->digest, (long long)u->size,
				 (long long)size);
	switch (model_ranges_fit(&u->got, offset, offset + (int64_t)len)) {
	case MODEL_RANGE_OVERLAP:
		return kn_errorf(err, KN_ECONFLICT, "offset",
				 "bytes %lld-%lld of %s overlap bytes the "
				 "upload holds; ask what it holds (GET with "
				 "upload=%s) and send the rest",
				 (long long)offset,
				 (long long)(offset + (int64_t)len), u->digest,
				 u->id);
	case MODEL_RANGE_HELD:
		return 1;
	case MODEL_RANGE_NEW:
		break;
	}
	if (u->got.n >= MODEL_RANGES_MAX)
		return kn_errorf(err, KN_ELIMIT, "offset",
				 "upload %s of %s holds %d separate ranges, "
				 "the most it may: send the parts between them "
				 "first", u->id, u->digest, MODEL_RANGES_MAX);
	return staging_room(s, c->name, (int64_t)len, err);
}

/*
 * A part of a blob whose size the client gives (see the top of this
 * file). The request whose part completes the blob is answered when it
 * is stored; the others at once, with what the upload holds.
 */
static void blob_put_part(struct server *s, struct kn_http_req *req,
			  const struct caller *c, const char *digest,
			  const char *id, int64_t offset, int64_t size,
			  const char *object)
{
	struct model_state *m = models_state(s);
	struct upload *u = upload_find(m, digest, id, c->name);
	struct kn_error err;
	size_t len;
	const char *data = kn_http_body(req, &len);
	int rc;

	if (offset > size || (int64_t)len > size - offset ||
	    (len == 0 && size != 0)) {
		kn_errorf(&err, KN_EINVAL, "offset",
			  "a part of %lld bytes at offset %lld is not within "
			  "a blob of %lld bytes", (long long)len,
			  (long long)offset, (long long)size);
		goto fail;
	}
	if (!u) {
		if (upload_begin(s, digest, id, c->name, &u, &err) < 0)
			goto fail;
		u->size = size;
	}
	rc = part_check(s, c, u, offset, len, size, &err);
	if (rc < 0)
		goto fail;
	if (rc == 1 && part_matches(u, data, len, offset, &err) < 0)
		goto fail;
	if (rc == 0 && len) {
		rc = pwrite_all(u->fd, data, len, offset);
		if (rc < 0) {
			kn_errorf(&err, rc == -ENOSPC ? KN_ENOSPACE : KN_EIO,
				  NULL, "staging %s: %s", digest,
				  strerror(-rc));
			upload_drop(m, u);
			goto fail;
		}
		model_ranges_add(&u->got, offset, offset + (int64_t)len);
	}
	u->offset = model_ranges_total(&u->got);
	u->touched_ms = kn_mono_ms();
	if (u->offset < size) {
		kn_http_reply_json(req, 200, part_answer(u));
		return;
	}
	if (upload_commit(s, req, c, u, &err) == 0)
		return;
	upload_drop(m, u);
fail:
	fail(s, req, c, "model.blob.put", object, &err);
}

static void models_h_blob_put(struct server *s, struct kn_http_req *req,
		       const struct caller *c, const char *param)
{
	struct model_state *m = models_state(s);
	struct upload *u;
	struct kn_error err;
	int64_t offset = -1, final = 0, size = -1;
	size_t len;
	const char *data = kn_http_body(req, &len);
	const char *id = kn_http_query(req, "upload");
	char object[96];
	int rc;

	snprintf(object, sizeof(object), "blob/sha256/%.64s", param);
	if (!kn_sha256_hex_ok(param)) {
		kn_errorf(&err, KN_EINVAL, "digest",
			  "\"%s\" is not 64 lowercase hex digits", param);
		fail(s, req, c, "model.blob.put", object, &err);
		return;
	}
	if (kn_http_query_int(req, "offset", 0, INT64_MAX, &offset) != 0 ||
	    kn_http_query_int(req, "final", 0, 1, &final) < 0) {
		kn_errorf(&err, KN_EINVAL, "offset",
			  "offset (bytes already sent) is required, final is "
			  "0 or 1");
		fail(s, req, c, "model.blob.put", object, &err);
		return;
	}
	if (!model_upload_id_ok(id)) {
		kn_errorf(&err, KN_EINVAL, "upload",
			  "upload (the client's id for this upload) must be "
			  "1-%d letters and digits", MODEL_UPLOAD_ID_MAX);
		fail(s, req, c, "model.blob.put", object, &err);
		return;
	}
	rc = kn_http_query_int(req, "size", 0, INT64_MAX, &size);
	if (rc < 0) {
		kn_errorf(&err, KN_EINVAL, "size",
			  "size (the blob's bytes) is a number");
		fail(s, req, c, "model.blob.put", object, &err);
		return;
	}
	if (rc == 0) {
		blob_put_part(s, req, c, param, id, offset, size, object);
		return;
	}
	u = upload_find(m, param, id, c->name);
	if (u && u->size >= 0) {
		kn_errorf(&err, KN_ECONFLICT, "size",
			  "upload %s of %s is sized: send size with each part",
			  id, param);
		fail(s, req, c, "model.blob.put", object, &err);
		return;
	}
	if (offset == 0) {
		if (upload_begin(s, param, id, c->name, &u, &err) < 0) {
			fail(s, req, c, "model.blob.put", object, &err);
			return;
		}
	} else if (!u || u->offset != offset) {
		kn_errorf(&err, KN_ECONFLICT, "offset",
			  "upload of %s is at byte %lld, not %lld: start again "
			  "from offset 0", param, u ? (long long)u->offset : 0LL,
			  (long long)offset);
		if (u)
			upload_drop(m, u);
		fail(s, req, c, "model.blob.put", object, &err);
		return;
	}
	if (staging_room(s, c->name, (int64_t)len, &err) < 0) {
		upload_drop(m, u);
		fail(s, req, c, "model.blob.put", object, &err);
		return;
	}
	rc = pwrite_all(u->fd, data, len, u->offset);
	if (rc < 0) {
		kn_errorf(&err, rc == -ENOSPC ? KN_ENOSPACE : KN_EIO, NULL,
			  "staging %s: %s", param, strerror(-rc));
		upload_drop(m, u);
		fail(s, req, c, "model.blob.put", object, &err);
		return;
	}
	EVP_DigestUpdate(u->ctx, data, len);
	u->offset += (int64_t)len;
	u->touched_ms = kn_mono_ms();
	offset = u->offset;
	if (!final) {
		kn_http_reply_json(req, 200,
				   json_pack("{s:s, s:I, s:b}", "digest", param,
					     "received", (json_int_t)offset,
					     "stored", 0));
		return;
	}
	if (upload_commit(s, req, c, u, &err) < 0) {
		upload_drop(m, u);
		fail(s, req, c, "model.blob.put", object, &err);
	}
}

/* What an upload in progress holds, for a client that lost a part's
   answer: the parts to send again are the ones outside "ranges". */
static void models_h_blob_status(struct server *s, struct kn_http_req *req,
				 const struct caller *c, const char *param)
{
	const char *id = kn_http_query(req, "upload");
	struct upload *u;
	struct kn_error err;
	json_t *o;

	if (!kn_sha256_hex_ok(param) || !model_upload_id_ok(id)) {
		kn_errorf(&err, KN_EINVAL, "upload",
			  "GET /v1/model-blobs/DIGEST?upload=ID: a sha256 hex "
			  "digest and the upload's id (1-%d letters and "
			  "digits)", MODEL_UPLOAD_ID_MAX);
		kn_http_reply_error(req, &err);
		return;
	}
	u = upload_find(models_state(s), param, id, c->name);
	if (!u) {
		kn_errorf(&err, KN_ENOTFOUND, "upload",
			  "no upload %s of %s in progress for %s (never begun, "
			  "stored, dropped, or expired after --upload-idle)",
			  id, param, c->name);
		kn_http_reply_error(req, &err);
		return;
	}
	o = part_answer(u);
	json_object_set_new(o, "ranges",
			    u->size >= 0 ? model_ranges_json(&u->got)
					 : json_pack("[[I, I]]", (json_int_t)0,
						     (json_int_t)u->offset));
	json_object_set_new(o, "part_max", json_integer(MODEL_PART_MAX));
	kn_http_reply_json(req, 200, o);
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
	struct kn_blob_store_config cfg = {.url = w->store_url,
					   .use_env = true};
	struct kn_blob_store *store = NULL;

	w->rc = kn_blob_store_open(&cfg, &store, &w->err);
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
		fail(w->s, w->req, &w->caller, "model.push", object, &w->err);
	} else {
		idem_reply(w->s, w->req, &w->caller, 201, reply);
	}
out:
	free(w->name);
	free(w->alias);
	free(w->store_url);
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
	body = body_object(req, &err);
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
	fail(s, req, c, "model.push", object, &err);
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
		fail(s, req, c, "model.list", "models", &err);
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
	models_audit(s, c, "model.list", "models", "ok", NULL);
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
		fail(s, req, c, action, "model", &err);
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
	models_audit(s, c, action, object, "ok", NULL);
	kn_http_reply_json(req, 200, o);
	kn_model_version_row_release(&v);
	return;
fail:
	kn_model_version_row_release(&v);
	fail(s, req, c, action, object, &err);
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
	body = body_object(req, &err);
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
	memset(&a, 0, sizeof(a));
	a.actor = (char *)c->name;
	a.role = (char *)role_name(c->role);
	a.action = "model.sign";
	a.object = object;
	a.outcome = "ok";
	a.detail = key_id;
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
	fail(s, req, c, "model.sign", object, &err);
out:
	kn_model_keyring_release(&ring);
	kn_model_version_row_release(&v);
	json_decref(body);
}

/* ---- aliases ---- */

static const char *body_alias(struct kn_http_req *req, json_t **body,
			      struct kn_error *err)
{
	const char *alias;

	*body = body_object(req, err);
	if (!*body)
		return NULL;
	alias = json_string_value(json_object_get(*body, "alias"));
	if (!kn_model_alias_ok(alias)) {
		kn_errorf(err, KN_EINVAL, "alias",
			  "alias must be a name that is not all digits");
		return NULL;
	}
	return alias;
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
	fail(s, req, c, "model.promote", object, &err);
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
	if (!kn_model_name_ok(param)) {
		kn_errorf(&err, KN_EINVAL, "name", "\"%s\" is not a model name",
			  param);
		goto fail;
	}
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
	fail(s, req, c, "model.rollback", object, &err);
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
		fail(s, r->req, &r->caller, "model.push", r->object, err);
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
	body = body_object(req, &err);
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
	fail(s, req, c, "model.push", object, &err);
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
	    models_resolve(s, &ref, &v, &err) < 0 || models_open_store(s, &store, &err) < 0)
		goto fail;
	snprintf(object, sizeof(object), "model/%s@%lld", v.name,
		 (long long)v.version);
	manifest = json_loads(v.manifest, 0, NULL);
	lineage = json_object_get(manifest, "lineage");
	if (json_is_object(lineage) &&
	    models_lineage_expand(s, store, lineage, 0, &err) < 0)
		goto fail;
	models_audit(s, c, "model.read", object, "ok", "lineage");
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
	fail(s, req, c, "model.read", object, &err);
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
};

/* A blob's parts are the registry's large bodies. */
static size_t models_body_cap(const struct route *r)
{
	return r->fn == models_h_blob_put ? MODEL_PART_MAX : 0;
}

const struct service models_service = {
	.name = "models",
	.phase = SERVICE_PHASE_LOOP,
	.start = models_start,
	.stop = models_stop,
	.routes = routes,
	.n_routes = sizeof(routes) / sizeof(routes[0]),
	.body_cap = models_body_cap,
};
