/*
 * Model blobs: which the store lacks, and their uploads (docs/registry.md,
 * Uploads).
 *
 * A blob arrives in parts into a staging file under
 * $KILN_HOME/registry/uploads, parts of up to MODEL_PART_MAX bytes, one
 * of two ways. In order: each appended. Or sized (the client gives the
 * blob's size with every part): parts at any offset within
 * MODEL_AHEAD_MAX of the bytes held from 0, several connections at once,
 * written where they belong, a part sent again answered from what is
 * held. Either way an EVP context hashes the bytes from 0 as they come:
 * a part that is the next straight from its body, parts that came early
 * from the staging file's pages once the gap before them is filled; no
 * byte is read back from disk to be hashed. Parts are written and
 * hashed on a request worker, one part of an upload at a time, so the
 * loop never waits on the disk for them. The digest must be the one
 * the upload is named by, and only then is the file put in the store
 * (create-only, so a blob is never overwritten): a file store on the
 * staging file's file system takes the file itself by a hard link, so
 * each byte is written once. A store that takes staged blocks (Azure)
 * is sent each part of a sized upload, once written and hashed, as a
 * block of a staging blob while the next part is written, so the store
 * holds the bytes soon after the last part lands: the commit names them
 * with one block list and a copy inside the service. Other stores, a
 * relay that failed, an empty blob and an upload in order get a copy of
 * the staging file at the commit, on a worker.
 * An upload may also be named only at its commit (/v1/model-uploads/ID,
 * then .../commit with the digest): a client that hashes a file as it
 * reads it to send learns the digest last. Uploads in progress live in
 * memory, one per digest (none yet, for those) and client-chosen
 * upload id (two pushes of one new blob stage apart; the second to finish
 * finds it stored), and a client asks what one holds (GET with its id) to
 * send only the rest after a lost connection; after a server restart a
 * client starts them again.
 */
#include "modelsvc.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "ckpt/ckpt.h"

/* Parts waiting their turn, in order: tail is the link the next one
   goes in (&head when none waits). */
struct part_line {
	struct part_job *head, **tail;
};

struct upload {
	char digest[KN_SHA256_HEX + 1];
	char id[MODEL_UPLOAD_ID_MAX + 1]; /* the client's name for this upload */
	char owner[128]; /* the token that started it: its caps count it */
	char *path; /* the staging file */
	int fd;
	EVP_MD_CTX *ctx;     /* the bytes from 0 to hashed */
	int64_t hashed;
	int64_t offset;      /* bytes staged (in order: where the next goes) */
	int64_t size;        /* sized: the blob's size; in order: -1 */
	struct model_ranges got; /* sized: the parts received */
	int64_t touched_ms;
	bool at_commit;      /* its commit is kept (struct commit_seen) */
	bool write_early;    /* bound for a file store, synced at its commit */
	/* Sized: the part a worker writes now (it alone touches fd, ctx
	   and hashed meanwhile), and those that came since, in order. */
	struct part_job *writing;
	struct part_line queued;
	bool dropped;        /* out of the list: freed when writing ends */
	/* The relay (sized uploads): the store the parts go on to, and the
	   offsets of the blocks it holds; NULL when the store takes no
	   staged blocks or a block failed (the commit copies the staging
	   file then). A part written and hashed waits in the relay's line
	   for its block to go, one at a time, while the next part is
	   written; it is answered once its block is in. */
	struct kn_blob_store *relay;
	char stage[48];
	int64_t *blocks;
	size_t n_blocks, blocks_cap;
	struct part_job *relaying;
	struct part_line relay_queued;
	struct upload *next;
};

/* A part of a sized upload: checked on the loop, written and hashed on
   a worker, answered on the loop. */
struct part_job {
	struct server *s; /* used on the loop only */
	struct kn_http_req *req;
	struct caller caller;
	struct upload *u;
	char object[96];
	int64_t offset, size; /* size -1: in order */
	bool final;           /* in order: the last part */
	const char *data; /* the request's body; body once taken */
	char *body;
	size_t len;
	int64_t hash_to;  /* the bytes held from 0 once this part is in */
	int rc;
	struct kn_error err;
	struct part_job *next;
};

static void part_free(struct part_job *j)
{
	KN_FREE_ALL(j->body, j);
}

static void line_push(struct part_line *line, struct part_job *j)
{
	*line->tail = j;
	line->tail = &j->next;
}

/* The first part of a line that has one, out of it. */
static struct part_job *line_pop(struct part_line *line)
{
	struct part_job *j = line->head;

	line->head = j->next;
	if (!line->head)
		line->tail = &line->head;
	j->next = NULL;
	return j;
}

static void part_fail(struct part_job *j, struct kn_error *err)
{
	models_fail(j->s, j->req, &j->caller, "model.blob.put", j->object,
		    err);
	part_free(j);
}

/* What messages call an upload: its blob, or (named at its commit) its
   id. */
static const char *upload_label(const struct upload *u)
{
	return u->digest[0] ? u->digest : u->id;
}

/* Out of the list of uploads in progress: no later request finds it,
   and the parts waiting their turn are refused. */
static void upload_detach(struct model_state *m, struct upload *u)
{
	struct part_line *lines[] = {&u->queued, &u->relay_queued};
	struct kn_error err;

	KN_LIST_UNLINK(&m->uploads, u);
	for (size_t i = 0; i < KN_LEN(lines); i++) {
		while (lines[i]->head) {
			struct part_job *j = line_pop(lines[i]);

			kn_errorf(&err, KN_ECONFLICT, "upload",
				  "upload %s of %s ended (stored, dropped or "
				  "started again) while this part waited; ask "
				  "what the server holds", u->id,
				  upload_label(u));
			part_fail(j, &err);
		}
	}
}

static void upload_release(struct upload *u)
{
	kn_blob_store_free(u->relay);
	free(u->blocks);
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
	if (u->writing || u->relaying)
		u->dropped = true;
	else
		upload_release(u);
}

/*
 * A commit of an upload named at its commit, kept from its start until
 * --upload-idle after its end: a client whose answer was lost (its
 * request timed out while a slow store took the blob) sends the commit
 * again, and gets the first one's answer, waiting for it while it runs.
 */
#define COMMIT_WAITERS_MAX 4
/* Per token: a client committing many small uploads cannot grow the
   server's memory without bound. */
#define COMMITS_KEPT_MAX 64

struct commit_seen {
	char id[MODEL_UPLOAD_ID_MAX + 1];
	char owner[128];
	char digest[KN_SHA256_HEX + 1];
	int64_t size;
	bool done;
	int rc;         /* done: 0, or the failure in err */
	struct kn_error err;
	json_t *answer; /* done and stored: the 201 answer */
	int64_t done_ms;
	struct kn_http_req *waiting[COMMIT_WAITERS_MAX]; /* sent again */
	size_t n_waiting;
	struct commit_seen *next;
};

static struct commit_seen *commit_seen_find(struct model_state *m,
					    const char *id, const char *owner)
{
	for (struct commit_seen *k = m->commits; k; k = k->next)
		if (strcmp(k->id, id) == 0 && strcmp(k->owner, owner) == 0)
			return k;
	return NULL;
}

static void commit_seen_reply(const struct commit_seen *k,
			      struct kn_http_req *req)
{
	if (k->rc < 0)
		kn_http_reply_error(req, &k->err);
	else
		kn_http_reply_json(req, 201, json_incref(k->answer));
}

static void commit_seen_drop(struct model_state *m, struct commit_seen *k)
{
	struct kn_error err;

	KN_LIST_UNLINK(&m->commits, k);
	kn_errorf(&err, KN_EUNAVAIL, NULL,
		  "the server stopped before upload %s was stored; send it "
		  "again", k->id);
	for (size_t i = 0; i < k->n_waiting; i++)
		kn_http_reply_error(k->waiting[i], &err);
	json_decref(k->answer);
	free(k);
}

static struct commit_seen *commit_seen_add(struct model_state *m,
					   const struct upload *u)
{
	struct commit_seen *k, *oldest_done = NULL;
	size_t kept = 0;

	/* Newest first: the last ended one of the owner's is the oldest. */
	for (k = m->commits; k; k = k->next) {
		if (strcmp(k->owner, u->owner) != 0)
			continue;
		kept++;
		if (k->done)
			oldest_done = k;
	}
	if (kept >= COMMITS_KEPT_MAX && oldest_done)
		commit_seen_drop(m, oldest_done);
	k = kn_xcalloc(1, sizeof(*k));

	kn_strlcpy(k->id, u->id, sizeof(k->id));
	kn_strlcpy(k->owner, u->owner, sizeof(k->owner));
	kn_strlcpy(k->digest, u->digest, sizeof(k->digest));
	k->size = u->size;
	k->next = m->commits;
	m->commits = k;
	return k;
}

/* The commit ended (answer: the 201 body, or NULL with err): every
   commit of it sent again meanwhile gets the same answer. */
static void commit_seen_end(struct commit_seen *k, int rc,
			    const struct kn_error *err, json_t *answer)
{
	k->done = true;
	k->done_ms = kn_mono_ms();
	k->rc = rc;
	if (rc < 0)
		k->err = *err;
	else
		k->answer = json_incref(answer);
	for (size_t i = 0; i < k->n_waiting; i++)
		commit_seen_reply(k, k->waiting[i]);
	k->n_waiting = 0;
}

/* The same commit sent again: the first one's answer, now or when it
   ends; another digest or size is refused by name. */
static int commit_seen_again(struct commit_seen *k, struct kn_http_req *req,
			     const char *digest, int64_t size,
			     struct kn_error *err)
{
	if (strcmp(digest, k->digest) != 0)
		return kn_errorf(err, KN_ECONFLICT, "digest",
				 "upload %s was committed as %s, not %s",
				 k->id, k->digest, digest);
	if (size >= 0 && size != k->size)
		return kn_errorf(err, KN_ECONFLICT, "size",
				 "upload %s was committed with %lld bytes, "
				 "not %lld", k->id, (long long)k->size,
				 (long long)size);
	if (k->done) {
		commit_seen_reply(k, req);
		return 0;
	}
	if (k->n_waiting == COMMIT_WAITERS_MAX)
		return kn_errorf(err, KN_ELIMIT, "upload",
				 "upload %s's commit is running and sent "
				 "again %d times already: wait for its answer",
				 k->id, COMMIT_WAITERS_MAX);
	k->waiting[k->n_waiting++] = req;
	kn_log(KN_LOG_INFO, "%s's commit of upload %s sent again while it "
	       "runs: answered when it ends", k->owner, k->id);
	return 0;
}

void models_uploads_drop(struct model_state *m)
{
	while (m->uploads)
		upload_drop(m, m->uploads);
	while (m->commits)
		commit_seen_drop(m, m->commits);
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
	struct commit_seen *k, *next_k;

	for (u = m->uploads; u; u = next) {
		next = u->next;
		if (u->writing || u->relaying ||
		    now - u->touched_ms <= core_config(s)->upload_idle_ms)
			continue;
		kn_log(KN_LOG_INFO, "dropping %s's upload %s: idle for %llds",
		       u->owner, upload_label(u),
		       (long long)((now - u->touched_ms) / 1000));
		upload_drop(m, u);
	}
	for (k = m->commits; k; k = next_k) {
		next_k = k->next;
		if (k->done && now - k->done_ms > core_config(s)->upload_idle_ms)
			commit_seen_drop(m, k);
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
int models_staging_room(struct server *s, const char *owner, int64_t len,
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

/* The store as the relay of a sized upload's parts, when it takes
   staged blocks, under a staging name of the server's choosing. An
   upload in order (the older way, whose last part may come empty while
   parts wait in the relay's line) is copied at its commit instead. */
static void relay_open(struct server *s, struct upload *u)
{
	unsigned char nonce[16];
	char hex[2 * sizeof(nonce) + 1];

	if (u->write_early || models_open_store(core_blob_url(s), &u->relay, NULL) < 0 ||
	    !kn_blob_can_stage(u->relay) ||
	    kn_random_bytes(nonce, sizeof(nonce)) < 0) {
		kn_blob_store_free(u->relay);
		u->relay = NULL;
		return;
	}
	kn_hex(nonce, sizeof(nonce), hex);
	snprintf(u->stage, sizeof(u->stage), "staging/%s", hex);
}

/* No more parts go on to the store: the commit copies the staging
   file, which holds every byte. */
static void relay_end(struct upload *u, const char *why)
{
	kn_log(KN_LOG_WARN, "upload of %s: the store refused a part (%s); "
	       "the whole blob is copied at its commit", upload_label(u),
	       why);
	kn_blob_store_free(u->relay);
	u->relay = NULL;
}

/* The block of a part that went on to the store. */
static void relay_add(struct upload *u, int64_t at)
{
	if (u->n_blocks == u->blocks_cap) {
		u->blocks_cap = u->blocks_cap ? 2 * u->blocks_cap : 64;
		u->blocks = kn_xrealloc(u->blocks,
					u->blocks_cap * sizeof(*u->blocks));
	}
	u->blocks[u->n_blocks++] = at;
}

/* On a worker: the part on to the store as a block. */
static void relay_work(void *arg)
{
	struct part_job *j = arg;

	j->rc = kn_blob_stage_block(j->u->relay, j->u->stage, j->offset,
				    j->data, j->len, &j->err);
}

static int offset_order(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

/* On the commit's worker: the relay's blocks made blob name in store.
   0 or -EEXIST; -EXDEV when the staging file is to be copied instead. */
static int relay_commit(struct upload *u, struct kn_blob_store *store,
			const char *name)
{
	struct kn_error err;
	int rc;

	/* An empty blob went nowhere: it is put whole, as for any store. */
	if (!u->relay || !u->n_blocks)
		return -EXDEV;
	qsort(u->blocks, u->n_blocks, sizeof(*u->blocks), offset_order);
	rc = kn_blob_stage_commit(store, u->stage, u->blocks, u->n_blocks,
				  name, KN_BLOB_CREATE_ONLY, &err);
	if (rc == 0 || rc == -EEXIST)
		return rc;
	kn_log(KN_LOG_WARN, "upload of %s: the store did not take its "
	       "staged blocks (%s); copying the blob instead",
	       upload_label(u), err.message);
	return -EXDEV;
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
	rc = models_staging_room(s, owner, 0, err);
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
	u->write_early = !strncmp(core_blob_url(s), "file://", 7);
	u->touched_ms = now;
	u->queued.tail = &u->queued.head;
	u->relay_queued.tail = &u->relay_queued.head;
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
 * A finished upload goes into the store on a worker (a link, or a copy
 * to a remote store); the request is answered when it ends. The upload
 * is out of the list by then, so a restart of it stages apart.
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

static void upload_commit_work(void *arg)
{
	struct upload_commit *w = arg;
	struct kn_blob_store *store = NULL;
	char *name = kn_model_blob_name(w->u->digest);
	char sent[KN_SHA256_HEX + 1];
	int rc = models_open_store(w->store_url, &store, &w->err);

	if (rc == 0)
		rc = relay_commit(w->u, store, name);
	if (rc == -EXDEV)
		rc = kn_blob_put_link(store, name, w->u->path, &w->err);
	if (rc == 0)
		memcpy(sent, w->u->digest, sizeof(sent));
	else if (rc == -EXDEV)
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
	struct model_state *m = models_state(w->s);
	struct commit_seen *k = NULL;
	json_t *answer = NULL;
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
		models_fail(w->s, w->req, &w->caller, "model.blob.put", object,
		     &w->err);
	} else {
		snprintf(detail, sizeof(detail), "%lld bytes%s",
			 (long long)w->u->offset,
			 w->existed ? ", already stored" : "");
		core_audit(w->s, &w->caller, "model.blob.put", object, "ok", detail);
		answer = json_pack("{s:s, s:I, s:b, s:b}", "digest",
				   w->u->digest, "received",
				   (json_int_t)w->u->offset, "stored", 1,
				   "existed", w->existed);
		kn_http_reply_json(w->req, 201, json_incref(answer));
	}
	if (m && w->u->at_commit)
		k = commit_seen_find(m, w->u->id, w->u->owner);
	if (k && !k->done)
		commit_seen_end(k, w->rc, &w->err, answer);
	json_decref(answer);
	upload_release(w->u);
	KN_FREE_ALL(w->store_url, w);
}

static void parts_answer_held(struct upload *u);

/*
 * The staged file is whole and hashed: check that it hashes to
 * u->digest, then hand it (out of the list) to a worker that puts it in
 * the store.
 */
static int upload_commit(struct server *s, struct kn_http_req *req,
			 const struct caller *c, struct upload *u,
			 struct kn_error *err)
{
	unsigned char md[32];
	unsigned int mdlen = 0;
	char hex[KN_SHA256_HEX + 1];
	struct upload_commit *w;

	EVP_DigestFinal_ex(u->ctx, md, &mdlen);
	kn_hex(md, mdlen, hex);
	if (strcmp(hex, u->digest) != 0)
		return kn_errorf(err, KN_EINVAL, "sha256",
				 "blob %s: the %lld bytes sent hash to %s; "
				 "refused", u->digest, (long long)u->offset,
				 hex);
	parts_answer_held(u);
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

/*
 * Hash on from u->hashed to end, the end of the bytes held from 0: the
 * part just written (len bytes of data at at) from its body when it is
 * the next, parts that came before their turn from the staging file's
 * pages, mapped (in the page cache since they were written: not read
 * again).
 */
static int upload_hash_on(struct upload *u, const char *data, int64_t at,
			  size_t len, int64_t end, struct kn_error *err)
{
	long page = sysconf(_SC_PAGESIZE);

	if (at == u->hashed && len) {
		EVP_DigestUpdate(u->ctx, data, len);
		u->hashed += (int64_t)len;
	}
	while (u->hashed < end) {
		int64_t base = u->hashed - u->hashed % page;
		size_t span = (size_t)(end - base);
		char *map;

		if (span > MODEL_PART_MAX)
			span = MODEL_PART_MAX;
		map = mmap(NULL, span, PROT_READ, MAP_SHARED, u->fd, base);
		if (map == MAP_FAILED)
			return kn_errorf(err, KN_EIO, NULL,
					 "hashing the staged %s: %s", upload_label(u),
					 strerror(errno));
		EVP_DigestUpdate(u->ctx, map + (u->hashed - base),
				 span - (size_t)(u->hashed - base));
		munmap(map, span);
		u->hashed = base + (int64_t)span;
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
					 "reading the staged %s: %s", upload_label(u),
					 n < 0 ? strerror(errno) : "short");
		if (memcmp(buf, data + done, (size_t)n) != 0)
			return kn_errorf(err, KN_ECONFLICT, "offset",
					 "bytes %lld-%lld of %s were received "
					 "before with other contents",
					 (long long)at,
					 (long long)(at + (int64_t)len),
					 upload_label(u));
		done += (size_t)n;
	}
	return 0;
}

static json_t *part_answer(const struct upload *u)
{
	json_t *o = json_pack("{s:s, s:I, s:I, s:b}", "upload", u->id,
			      "received", (json_int_t)u->offset, "size",
			      (json_int_t)u->size, "stored", 0);

	if (u->digest[0])
		json_object_set_new(o, "digest", json_string(u->digest));
	return o;
}

/* The checks of a sized part before its bytes are written. */
static int part_check(struct server *s, const struct caller *c,
		      struct upload *u, int64_t offset, size_t len,
		      int64_t size, struct kn_error *err)
{
	int64_t end = offset + (int64_t)len;

	if (u->size != size)
		return kn_errorf(err, KN_ECONFLICT, "size",
				 u->size < 0 ? "upload %s of %s is sent in "
					       "order, without a size"
					     : "upload %s of %s is of %lld "
					       "bytes, not %lld",
				 u->id, upload_label(u), (long long)u->size,
				 (long long)size);
	switch (model_ranges_fit(&u->got, offset, end)) {
	case MODEL_RANGE_OVERLAP:
		return kn_errorf(err, KN_ECONFLICT, "offset",
				 "bytes %lld-%lld of %s overlap bytes the "
				 "upload holds; ask what it holds (GET with "
				 "upload=%s) and send the rest",
				 (long long)offset, (long long)end,
				 upload_label(u), u->id);
	case MODEL_RANGE_HELD:
		return 1;
	case MODEL_RANGE_NEW:
		break;
	}
	if (end - u->hashed > MODEL_AHEAD_MAX)
		return kn_errorf(err, KN_ECONFLICT, "offset",
				 "bytes %lld-%lld of %s are more than %lld "
				 "bytes past the %lld held from the start: "
				 "send the parts before them first",
				 (long long)offset, (long long)end,
				 upload_label(u), (long long)MODEL_AHEAD_MAX,
				 (long long)u->hashed);
	if (u->got.n >= MODEL_RANGES_MAX)
		return kn_errorf(err, KN_ELIMIT, "offset",
				 "upload %s of %s holds %d separate ranges, "
				 "the most it may: send the parts between them "
				 "first", u->id, upload_label(u),
				 MODEL_RANGES_MAX);
	return models_staging_room(s, c->name, (int64_t)len, err);
}

/*
 * The upload is whole, so a sized part still waiting its turn repeats
 * bytes it holds: sent again by a client that asked what was held while
 * parts whose clients had gone were still being written. Each is
 * compared with what is held and answered as a part held before; the
 * rest are left to the upload's end.
 */
static void parts_answer_held(struct upload *u)
{
	struct part_job **p = &u->queued.head;

	while (*p) {
		struct part_job *j = *p;
		struct kn_error err;
		size_t len;
		int rc = -1;

		j->data = kn_http_body(j->req, &len);
		if (j->size >= 0 && len == j->len)
			rc = part_check(j->s, &j->caller, u, j->offset, j->len,
					j->size, &err);
		if (rc != 1) {
			p = &j->next;
			continue;
		}
		*p = j->next;
		if (part_matches(u, j->data, j->len, j->offset, &err) < 0) {
			part_fail(j, &err);
			continue;
		}
		kn_http_reply_json(j->req, 200, part_answer(u));
		part_free(j);
	}
	u->queued.tail = p;
}

/* On a worker: the part written where it belongs, then hashed on. */
static void part_work(void *arg)
{
	struct part_job *j = arg;
	struct upload *u = j->u;
	int rc = kn_pwrite_all(u->fd, j->data, j->len, j->offset);

	/* The part's writeback starts now, beside the next parts, so a
	   file store's sync at the commit finds little left to write; for
	   a remote store the staging file is read back and deleted, and
	   writing it out would be wasted. */
	if (rc == 0 && u->write_early)
		sync_file_range(u->fd, j->offset, (off_t)j->len,
				SYNC_FILE_RANGE_WRITE);
	if (rc < 0)
		j->rc = kn_errorf(&j->err,
				  rc == -ENOSPC ? KN_ENOSPACE : KN_EIO, NULL,
				  "staging %s: %s", upload_label(u),
				  strerror(-rc));
	else
		j->rc = upload_hash_on(u, j->data, j->offset, j->len,
				       j->hash_to, &j->err);
}

/*
 * A part is in (or was held already): answered with what the upload
 * holds, or, the last of one whose digest is known, stored. False when
 * the upload is over.
 */
static bool part_finish(struct part_job *j)
{
	struct model_state *m = models_state(j->s);
	struct upload *u = j->u;
	struct kn_error err;

	u->touched_ms = kn_mono_ms();
	if (j->size < 0 && !j->final) {
		kn_http_reply_json(j->req, 200,
				   json_pack("{s:s, s:I, s:b}", "digest",
					     u->digest, "received",
					     (json_int_t)u->offset, "stored", 0));
		part_free(j);
		return true;
	}
	/* One named at its commit waits for it, whole; the part that
	   completes one named by its digest stores it once no other part
	   is written or relayed. */
	if (j->size >= 0 &&
	    (u->offset < u->size || !u->digest[0] || u->writing ||
	     u->relaying || u->relay_queued.head)) {
		kn_http_reply_json(j->req, 200, part_answer(u));
		part_free(j);
		return true;
	}
	if (upload_commit(j->s, j->req, &j->caller, u, &err) == 0) {
		part_free(j);
		return false;
	}
	upload_drop(m, u);
	part_fail(j, &err);
	return false;
}

static void parts_run(struct upload *u);
static bool relays_run(struct upload *u);
static void part_next(struct part_job *j);

/* A part whose upload was dropped (started again, or the server
   stopping) while a worker had it: refused, and the upload freed by
   the last worker out. */
static void part_dropped(struct part_job *j, const char *doing)
{
	struct upload *u = j->u;
	struct kn_error err;

	if (!u->writing && !u->relaying)
		upload_release(u);
	kn_errorf(&err, KN_ECONFLICT, "upload",
		  "the upload was dropped (started again, or the server "
		  "stopping) while this part %s", doing);
	part_fail(j, &err);
}

static void part_done(void *arg, bool ran)
{
	struct part_job *j = arg;
	struct upload *u = j->u;
	struct server *s = j->s;

	u->writing = NULL;
	if (u->dropped) {
		part_dropped(j, "was written");
		return;
	}
	if (!ran)
		j->rc = kn_errorf(&j->err, KN_EUNAVAIL, NULL,
				  "the server stopped before the part was "
				  "staged; send it again");
	if (j->rc < 0) {
		upload_drop(models_state(s), u);
		part_fail(j, &j->err);
		return;
	}
	if (u->relay && !core_closing(s)) {
		line_push(&u->relay_queued, j);
		if (relays_run(u))
			parts_run(u);
		return;
	}
	part_next(j);
}

/* A part written (and relayed): answered, then the next. */
static void part_next(struct part_job *j)
{
	struct upload *u = j->u;
	struct server *s = j->s;

	/* j is gone after this. */
	if (!part_finish(j))
		return;
	if (core_closing(s)) {
		upload_drop(models_state(s), u);
		return;
	}
	if (relays_run(u))
		parts_run(u);
}

static void relay_done(void *arg, bool ran)
{
	struct part_job *j = arg;
	struct upload *u = j->u;

	u->relaying = NULL;
	if (u->dropped) {
		part_dropped(j, "went to the store");
		return;
	}
	if (!ran) {
		kn_errorf(&j->err, KN_EUNAVAIL, NULL, "the server stopped "
			  "before the part went to the store; send it again");
		upload_drop(models_state(j->s), u);
		part_fail(j, &j->err);
		return;
	}
	if (j->rc < 0)
		relay_end(u, j->err.message);
	else
		relay_add(u, j->offset);
	j->rc = 0;
	part_next(j);
}

/* The next part in the relay's line to a worker, or, once the relay
   ended, each answered as written. False when the upload is over. */
static bool relays_run(struct upload *u)
{
	while (!u->relaying && u->relay_queued.head) {
		struct part_job *j = line_pop(&u->relay_queued);

		if (!u->relay) {
			if (!part_finish(j))
				return false;
			continue;
		}
		u->relaying = j;
		kn_workers_submit(core_request_workers(j->s), relay_work,
				  relay_done, j);
	}
	return true;
}

/* To a worker, with its own copy of the bytes: the client may go
   first. */
static void part_submit(struct part_job *j)
{
	size_t len;

	j->body = kn_http_take_body(j->req, &j->data, &len);
	j->u->writing = j;
	kn_workers_submit(core_request_workers(j->s), part_work, part_done, j);
}

static bool part_start_in_order(struct part_job *j);

/*
 * Check the part against what the upload holds, then: one held already
 * is compared and answered; a new one is counted as held (the caps see
 * its bytes; a write that fails drops the upload) and goes to a worker.
 * False when the upload is over.
 */
static bool part_start(struct part_job *j)
{
	struct upload *u = j->u;
	struct kn_error err;
	size_t len;
	int rc;
	bool fresh;

	/* A client gone while its part waited took the body with it. */
	j->data = kn_http_body(j->req, &len);
	if (len != j->len) {
		kn_errorf(&err, KN_EUNAVAIL, NULL, "the client went away");
		part_fail(j, &err);
		return true;
	}
	if (j->size < 0)
		return part_start_in_order(j);
	rc = part_check(j->s, &j->caller, u, j->offset, j->len, j->size, &err);
	fresh = rc == 0 && j->len;
	if (rc == 1)
		rc = part_matches(u, j->data, j->len, j->offset, &err);
	if (rc < 0) {
		part_fail(j, &err);
		return true;
	}
	if (fresh)
		model_ranges_add(&u->got, j->offset,
				 j->offset + (int64_t)j->len);
	u->offset = model_ranges_total(&u->got);
	if (!fresh)
		return part_finish(j);
	j->hash_to = model_ranges_prefix(&u->got);
	part_submit(j);
	return true;
}

/* A part of an in-order upload: the next bytes, or the upload is
   dropped (the client starts again from 0). */
static bool part_start_in_order(struct part_job *j)
{
	struct model_state *m = models_state(j->s);
	struct upload *u = j->u;
	struct kn_error err;

	if (u->offset != j->offset)
		kn_errorf(&err, KN_ECONFLICT, "offset",
			  "upload of %s is at byte %lld, not %lld: start again "
			  "from offset 0", u->digest, (long long)u->offset,
			  (long long)j->offset);
	if (u->offset != j->offset ||
	    models_staging_room(j->s, j->caller.name, (int64_t)j->len,
				&err) < 0) {
		upload_drop(m, u);
		part_fail(j, &err);
		return false;
	}
	u->offset += (int64_t)j->len;
	if (!j->len)
		return part_finish(j);
	j->hash_to = u->offset;
	part_submit(j);
	return true;
}


/* The parts waiting their turn, in order, until one is being written. */
static void parts_run(struct upload *u)
{
	while (!u->writing && u->queued.head) {
		struct part_job *j = line_pop(&u->queued);

		if (!part_start(j))
			return;
	}
}

/* A part into u's line, started at once when it is the first. */
static void part_queue(struct server *s, struct kn_http_req *req,
		       const struct caller *c, struct upload *u,
		       const char *object, int64_t offset, int64_t size,
		       bool final)
{
	struct part_job *j = kn_xcalloc(1, sizeof(*j));

	j->s = s;
	j->req = req;
	j->caller = *c;
	j->u = u;
	kn_strlcpy(j->object, object, sizeof(j->object));
	j->offset = offset;
	j->size = size;
	j->final = final;
	kn_http_body(req, &j->len);
	line_push(&u->queued, j);
	parts_run(u);
}

/*
 * A part of a blob whose size the client gives (see the top of this
 * file). The request whose part completes the blob is answered when it
 * is stored; the others once their bytes are written, with what the
 * upload holds. The loop only checks and counts: a worker writes and
 * hashes, one part of an upload at a time, so the parts of one upload
 * are checked and written in the order they came and the loop goes on
 * reading other connections meanwhile.
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

	kn_http_body(req, &len);
	if (offset > size || (int64_t)len > size - offset ||
	    (len == 0 && size != 0)) {
		kn_errorf(&err, KN_EINVAL, "offset",
			  "a part of %lld bytes at offset %lld is not within "
			  "a blob of %lld bytes", (long long)len,
			  (long long)offset, (long long)size);
		models_fail(s, req, c, "model.blob.put", object, &err);
		return;
	}
	if (!u) {
		if (upload_begin(s, digest, id, c->name, &u, &err) < 0) {
			models_fail(s, req, c, "model.blob.put", object, &err);
			return;
		}
		u->size = size;
		relay_open(s, u);
	}
	part_queue(s, req, c, u, object, offset, size, false);
}

void models_h_blob_put(struct server *s, struct kn_http_req *req,
		       const struct caller *c, const char *param)
{
	struct model_state *m = models_state(s);
	struct upload *u;
	struct kn_error err;
	int64_t offset = -1, final = 0, size = -1;
	const char *id = kn_http_query(req, "upload");
	char object[96];
	int rc;

	snprintf(object, sizeof(object), "blob/sha256/%.64s", param);
	if (!kn_sha256_hex_ok(param)) {
		kn_errorf(&err, KN_EINVAL, "digest",
			  "\"%s\" is not 64 lowercase hex digits", param);
		models_fail(s, req, c, "model.blob.put", object, &err);
		return;
	}
	if (kn_http_query_int(req, "offset", 0, INT64_MAX, &offset) != 0 ||
	    kn_http_query_int(req, "final", 0, 1, &final) < 0) {
		kn_errorf(&err, KN_EINVAL, "offset",
			  "offset (bytes already sent) is required, final is "
			  "0 or 1");
		models_fail(s, req, c, "model.blob.put", object, &err);
		return;
	}
	if (!model_upload_id_ok(id)) {
		kn_errorf(&err, KN_EINVAL, "upload",
			  "upload (the client's id for this upload) must be "
			  "1-%d letters and digits", MODEL_UPLOAD_ID_MAX);
		models_fail(s, req, c, "model.blob.put", object, &err);
		return;
	}
	rc = kn_http_query_int(req, "size", 0, INT64_MAX, &size);
	if (rc < 0) {
		kn_errorf(&err, KN_EINVAL, "size",
			  "size (the blob's bytes) is a number");
		models_fail(s, req, c, "model.blob.put", object, &err);
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
		models_fail(s, req, c, "model.blob.put", object, &err);
		return;
	}
	if (offset == 0) {
		if (upload_begin(s, param, id, c->name, &u, &err) < 0) {
			models_fail(s, req, c, "model.blob.put", object, &err);
			return;
		}
	} else if (!u) {
		kn_errorf(&err, KN_ECONFLICT, "offset",
			  "upload of %s is at byte 0, not %lld: start again "
			  "from offset 0", param, (long long)offset);
		models_fail(s, req, c, "model.blob.put", object, &err);
		return;
	}
	part_queue(s, req, c, u, object, offset, -1, final);
}

/* What the caller's upload (digest "": one named at its commit) holds,
   for a client that lost a part's answer: the parts to send again are
   the ones outside "ranges". */
static void upload_status(struct server *s, struct kn_http_req *req,
			  const struct caller *c, const char *digest,
			  const char *id)
{
	struct upload *u = upload_find(models_state(s), digest, id, c->name);
	struct kn_error err;
	json_t *o;

	if (!u) {
		kn_errorf(&err, KN_ENOTFOUND, "upload",
			  "no upload %s%s%s in progress for %s (never begun, "
			  "stored, dropped, or expired after --upload-idle)",
			  id, digest[0] ? " of " : "", digest, c->name);
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

void models_h_blob_status(struct server *s, struct kn_http_req *req,
				 const struct caller *c, const char *param)
{
	const char *id = kn_http_query(req, "upload");
	struct kn_error err;

	if (!kn_sha256_hex_ok(param) || !model_upload_id_ok(id)) {
		kn_errorf(&err, KN_EINVAL, "upload",
			  "GET /v1/model-blobs/DIGEST?upload=ID: a sha256 hex "
			  "digest and the upload's id (1-%d letters and "
			  "digits)", MODEL_UPLOAD_ID_MAX);
		kn_http_reply_error(req, &err);
		return;
	}
	upload_status(s, req, c, param, id);
}

/*
 * Uploads named at their commit: a client that hashes a file as it
 * reads it to send (one read) learns the digest only at the end. Parts
 * as for a sized upload, under the client's id alone; the commit names
 * the digest, which the server's own hash of the bytes must match.
 */
static int upload_id_checked(const char *id, struct kn_error *err)
{
	if (model_upload_id_ok(id))
		return 0;
	return kn_errorf(err, KN_EINVAL, "upload",
			 "an upload's id is 1-%d letters and digits",
			 MODEL_UPLOAD_ID_MAX);
}

void models_h_upload_part(struct server *s, struct kn_http_req *req,
				 const struct caller *c, const char *param)
{
	struct kn_error err;
	int64_t offset = -1, size = -1;
	char object[64];

	snprintf(object, sizeof(object), "upload/%.32s", param);
	if (upload_id_checked(param, &err) < 0)
		goto fail;
	if (kn_http_query_int(req, "offset", 0, INT64_MAX, &offset) != 0 ||
	    kn_http_query_int(req, "size", 0, INT64_MAX, &size) != 0) {
		kn_errorf(&err, KN_EINVAL, "offset",
			  "offset (where the part goes) and size (the blob's "
			  "bytes) are required numbers");
		goto fail;
	}
	blob_put_part(s, req, c, "", param, offset, size, object);
	return;
fail:
	models_fail(s, req, c, "model.blob.put", object, &err);
}

void models_h_upload_status(struct server *s,
				   struct kn_http_req *req,
				   const struct caller *c, const char *param)
{
	struct kn_error err;

	if (upload_id_checked(param, &err) < 0) {
		kn_http_reply_error(req, &err);
		return;
	}
	upload_status(s, req, c, "", param);
}

/* A commit whose upload is gone: its answer was lost and it is sent
   again, the blob stored; else there is nothing to commit. */

void models_h_upload_commit(struct server *s,
				   struct kn_http_req *req,
				   const struct caller *c, const char *param)
{
	struct model_state *m = models_state(s);
	struct kn_error err;
	json_t *body = NULL, *size_field;
	const char *digest;
	struct upload *u;
	struct commit_seen *k;
	int64_t size = -1;
	char object[96];
	int rc;

	snprintf(object, sizeof(object), "upload/%.32s", param);
	if (upload_id_checked(param, &err) < 0)
		goto fail;
	body = models_body_object(req, &err);
	if (!body)
		goto fail;
	digest = json_string_value(json_object_get(body, "digest"));
	if (!kn_sha256_hex_ok(digest)) {
		kn_errorf(&err, KN_EINVAL, "digest",
			  "digest: the blob's sha256, 64 lowercase hex digits");
		goto fail;
	}
	size_field = json_object_get(body, "size");
	if (size_field && (!json_is_integer(size_field) ||
			   json_integer_value(size_field) < 0)) {
		kn_errorf(&err, KN_EINVAL, "size",
			  "size: the blob's bytes, a number (optional)");
		goto fail;
	}
	if (size_field)
		size = json_integer_value(size_field);
	snprintf(object, sizeof(object), "blob/sha256/%s", digest);
	u = upload_find(m, "", param, c->name);
	k = commit_seen_find(m, param, c->name);
	if (!u && k) {
		if (commit_seen_again(k, req, digest, size, &err) < 0)
			goto fail;
		goto out;
	}
	if (!u) {
		models_commit_gone(s, req, c, param, digest, object);
		goto out;
	}
	if (k && !k->done) {
		kn_errorf(&err, KN_ECONFLICT, "upload",
			  "upload %s's earlier commit is still running: wait "
			  "for it before committing the upload begun since",
			  param);
		goto fail;
	}
	if (u->writing || u->queued.head || u->relaying ||
	    u->relay_queued.head) {
		kn_errorf(&err, KN_ECONFLICT, "upload",
			  "upload %s still has parts being written: commit "
			  "once every part is answered", param);
		goto fail;
	}
	if (k)
		commit_seen_drop(m, k);
	if (u->offset < u->size) {
		kn_errorf(&err, KN_ECONFLICT, "upload",
			  "upload %s holds %lld of its %lld bytes: send the "
			  "rest first (GET /v1/model-uploads/%s says what it "
			  "holds)", param, (long long)u->offset,
			  (long long)u->size, param);
		goto fail;
	}
	if (size >= 0 && size != u->size) {
		kn_errorf(&err, KN_ECONFLICT, "size",
			  "upload %s holds %lld bytes, not %lld", param,
			  (long long)u->size, (long long)size);
		goto fail;
	}
	kn_strlcpy(u->digest, digest, sizeof(u->digest));
	u->at_commit = true;
	k = commit_seen_add(m, u);
	rc = upload_commit(s, req, c, u, &err);
	if (rc == 0)
		goto out;
	commit_seen_end(k, rc, &err, NULL);
	upload_drop(m, u);
fail:
	models_fail(s, req, c, "model.blob.put", object, &err);
out:
	json_decref(body);
}
