/*
 * A model blob sent in sized parts (docs/registry.md, Uploads) and read
 * once: this thread reads the file in order into part buffers and hashes
 * each as it is read, MODEL_UPLOAD_STREAMS sender threads, each with its
 * own connection, send the full buffers, and a buffer is read into again
 * once its part is sent. The digest is known when the last byte is read,
 * so the upload is named at its commit (/v1/model-uploads/ID), and the
 * server checks it against its own hash of the bytes. The upload's id
 * comes from the file's identity and state, so a push killed midway and
 * run again asks the server what it holds and sends only the rest (still
 * reading and hashing it all); a part whose answer is lost is sent
 * again, which the server answers from what it holds when it got there
 * after all. A file whose size or times changed while it was read or
 * sent is refused by name before the commit.
 */
#include "cmd/model_upload.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "base/base.h"
#include "ckpt/ckpt.h"
#include "cmd/cli_client.h"

/* Sends of one part or commit: the first and again after lost answers. */
#define PART_TRIES 4
/* Part buffers: one being read while each sender has one. */
#define BUFFERS (MODEL_UPLOAD_STREAMS + 1)

struct part {
	char *buf;
	int64_t offset, len;
};

struct push {
	struct cli_ctx *ctx;
	struct model_upload *u;
	char id[33];
	json_t *held; /* [[start, end], ...] the server had before */
	/* Under u->totals->lock: */
	pthread_cond_t moved;         /* a part queued or a buffer freed */
	char *free_bufs[BUFFERS];
	size_t n_free;
	struct part queue[BUFFERS];   /* read, to send, in order */
	size_t q_head, q_len;
	bool read_all;
	int rc; /* the first failure */
};

/* Whether ranges ([[start, end], ...]) hold all of [start, end). */
static bool ranges_hold(json_t *ranges, int64_t start, int64_t end)
{
	size_t i;
	json_t *r;

	json_array_foreach(ranges, i, r) {
		int64_t a = json_integer_value(json_array_get(r, 0));
		int64_t b = json_integer_value(json_array_get(r, 1));
		if (a <= start && end <= b)
			return true;
	}
	return false;
}

/* The same id for the same file in the same state: a push run again
   resumes it; a file written since is another upload. */
static void upload_id(const struct stat *st, char id[33])
{
	char *text = kn_asprintf("%llu %llu %lld %lld.%09ld %lld.%09ld",
				 (unsigned long long)st->st_dev,
				 (unsigned long long)st->st_ino,
				 (long long)st->st_size,
				 (long long)st->st_mtim.tv_sec,
				 st->st_mtim.tv_nsec,
				 (long long)st->st_ctim.tv_sec,
				 st->st_ctim.tv_nsec);
	char hex[KN_SHA256_HEX_LEN + 1];

	kn_sha256_hex(text, strlen(text), hex);
	snprintf(id, 33, "f%.31s", hex);
	free(text);
}

/* What the server holds of this upload: its ranges (a new reference,
   empty when it has none), or NULL after saying why. */
static json_t *ask_held(struct cli_client *c, const struct push *p)
{
	char *url = kn_asprintf("/v1/model-uploads/%s", p->id);
	json_t *answer = NULL, *ranges = NULL;
	int rc = cli_call_quiet(c, CLI_QUIET_NOT_FOUND, "GET", url, NULL, NULL,
				0, &answer);

	free(url);
	if (rc == CLI_NOT_FOUND)
		return json_array();
	if (rc)
		return NULL;
	if (json_integer_value(json_object_get(answer, "size")) ==
	    p->u->st.st_size)
		ranges = json_incref(json_object_get(answer, "ranges"));
	json_decref(answer);
	return json_is_array(ranges) ? ranges : json_array();
}

/* A call sent again while its answer is lost. 0, or an exit status. */
static int call_until_answered(struct push *p, struct cli_client *c,
			       const char *url, const char *type,
			       const char *body, size_t len, const char *what)
{
	int rc = CLI_LOST;

	for (int tries = 0; rc == CLI_LOST && tries < PART_TRIES; tries++) {
		json_t *answer = NULL;

		rc = cli_call_quiet(c, CLI_QUIET_LOST, "POST", url, type, body,
				    len, &answer);
		json_decref(answer);
		if (rc == CLI_LOST)
			usleep(200000u << tries);
	}
	if (rc == CLI_LOST)
		rc = cli_fail(p->ctx, "%s: the connection to the server broke "
			      "%d times sending %s; push again to send the "
			      "rest", p->u->path, PART_TRIES, what);
	return rc;
}

static int send_part(struct push *p, struct cli_client *c,
		     const struct part *part)
{
	char *url = kn_asprintf("/v1/model-uploads/%s?offset=%lld&size=%lld",
				p->id, (long long)part->offset,
				(long long)p->u->st.st_size);
	char *what = kn_asprintf("bytes %lld-%lld", (long long)part->offset,
				 (long long)(part->offset + part->len));
	int rc = call_until_answered(p, c, url, "application/octet-stream",
				     part->buf, (size_t)part->len, what);

	KN_FREE_ALL(what, url);
	return rc;
}

static void fail_push(struct push *p, int rc)
{
	if (!p->rc)
		p->rc = rc;
	pthread_cond_broadcast(&p->moved);
}

struct sender {
	struct push *p;
	struct cli_client *c;
	pthread_t thread;
	bool started;
};

static void *send_parts(void *arg)
{
	struct sender *w = arg;
	struct push *p = w->p;
	struct model_push_totals *t = p->u->totals;

	pthread_mutex_lock(&t->lock);
	for (;;) {
		struct part part;
		int rc;

		while (!p->rc && !p->q_len && !p->read_all)
			pthread_cond_wait(&p->moved, &t->lock);
		if (p->rc || !p->q_len)
			break;
		part = p->queue[p->q_head];
		p->q_head = (p->q_head + 1) % BUFFERS;
		p->q_len--;
		pthread_mutex_unlock(&t->lock);
		rc = send_part(p, w->c, &part);
		pthread_mutex_lock(&t->lock);
		p->free_bufs[p->n_free++] = part.buf;
		pthread_cond_broadcast(&p->moved);
		if (rc) {
			fail_push(p, rc);
			break;
		}
		t->sent += part.len;
		if (t->progress)
			t->progress(t->sent + t->resumed, t->progress_arg);
	}
	pthread_mutex_unlock(&t->lock);
	return NULL;
}

static int read_part(const struct push *p, int fd, char *buf, int64_t offset,
		     int64_t len)
{
	int64_t got = 0;

	while (got < len) {
		ssize_t n = pread(fd, buf + got, (size_t)(len - got),
				  (off_t)(offset + got));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return cli_fail(p->ctx, "%s: %s", p->u->path,
					strerror(errno));
		if (n == 0)
			return cli_fail(p->ctx, "%s changed while it was pushed "
					"(it shrank); push again",
					p->u->path);
		got += n;
	}
	return 0;
}

/* Hand a part read to the senders, or (held by the server) count it. */
static void queue_part(struct push *p, const struct part *part)
{
	struct model_push_totals *t = p->u->totals;

	pthread_mutex_lock(&t->lock);
	if (part->len && ranges_hold(p->held, part->offset,
				     part->offset + part->len)) {
		p->free_bufs[p->n_free++] = part->buf;
		t->resumed += part->len;
		if (t->progress)
			t->progress(t->sent + t->resumed, t->progress_arg);
	} else {
		p->queue[(p->q_head + p->q_len) % BUFFERS] = *part;
		p->q_len++;
	}
	pthread_cond_broadcast(&p->moved);
	pthread_mutex_unlock(&t->lock);
}

/* Read the file in order, hashing it, handing its parts to the senders:
   0, or an exit status. An empty file is one empty part. */
static int read_parts(struct push *p, int fd, EVP_MD_CTX *md)
{
	struct model_push_totals *t = p->u->totals;
	int64_t size = p->u->st.st_size, off = 0;
	int rc = 0;

	do {
		struct part part = {.offset = off, .len = size - off};

		if (part.len > p->u->part_max)
			part.len = p->u->part_max;
		pthread_mutex_lock(&t->lock);
		while (!p->rc && !p->n_free)
			pthread_cond_wait(&p->moved, &t->lock);
		rc = p->rc;
		if (!rc)
			part.buf = p->free_bufs[--p->n_free];
		pthread_mutex_unlock(&t->lock);
		if (!rc)
			rc = read_part(p, fd, part.buf, off, part.len);
		if (rc) {
			if (part.buf) {
				pthread_mutex_lock(&t->lock);
				p->free_bufs[p->n_free++] = part.buf;
				pthread_mutex_unlock(&t->lock);
			}
			break;
		}
		EVP_DigestUpdate(md, part.buf, (size_t)part.len);
		queue_part(p, &part);
		off += part.len;
	} while (off < size);
	pthread_mutex_lock(&t->lock);
	p->read_all = true;
	if (rc)
		fail_push(p, rc);
	pthread_cond_broadcast(&p->moved);
	pthread_mutex_unlock(&t->lock);
	return rc;
}

static int run_senders(struct push *p, struct sender *w, int fd,
		       EVP_MD_CTX *md)
{
	struct model_push_totals *t = p->u->totals;
	int rc = 0;

	for (size_t i = 0; i < MODEL_UPLOAD_STREAMS && !rc; i++) {
		w[i].p = p;
		if (!w[i].c)
			rc = cli_client_open(p->ctx, &w[i].c);
	}
	for (size_t i = 0; i < MODEL_UPLOAD_STREAMS && !rc; i++) {
		if (pthread_create(&w[i].thread, NULL, send_parts, &w[i]) != 0)
			rc = cli_fail(p->ctx, "cannot start a thread: %s",
				      strerror(errno));
		else
			w[i].started = true;
	}
	if (rc) {
		pthread_mutex_lock(&t->lock);
		fail_push(p, rc);
		pthread_mutex_unlock(&t->lock);
	} else {
		read_parts(p, fd, md);
	}
	for (size_t i = 0; i < MODEL_UPLOAD_STREAMS; i++)
		if (w[i].started)
			pthread_join(w[i].thread, NULL);
	return p->rc;
}

static int commit(struct push *p, struct cli_client *c)
{
	char *url = kn_asprintf("/v1/model-uploads/%s/commit", p->id);
	json_t *req = json_pack("{s:s, s:I}", "digest", p->u->digest, "size",
				(json_int_t)p->u->st.st_size);
	char *body = json_dumps(req, JSON_COMPACT);
	int rc = call_until_answered(p, c, url, "application/json", body,
				     strlen(body), "its commit");

	free(body);
	json_decref(req);
	free(url);
	return rc;
}

static void digest_hex(EVP_MD_CTX *md, char hex[65])
{
	unsigned char sum[32];
	unsigned int n = 0;

	EVP_DigestFinal_ex(md, sum, &n);
	for (unsigned i = 0; i < n; i++)
		snprintf(hex + 2 * i, 3, "%02x", sum[i]);
}

int model_upload_file(struct cli_ctx *ctx, struct model_upload *u)
{
	struct push p = {.ctx = ctx, .u = u};
	struct sender w[MODEL_UPLOAD_STREAMS] = {0};
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	int fd = open(u->path, O_RDONLY | O_CLOEXEC);
	int rc = 0;

	if (fd < 0 || fstat(fd, &u->st) < 0) {
		rc = cli_fail(ctx, "%s: %s", u->path, strerror(errno));
		goto out;
	}
	if (!md || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1)
		abort();
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	pthread_cond_init(&p.moved, NULL);
	for (size_t i = 0; i < BUFFERS; i++)
		p.free_bufs[p.n_free++] = kn_xmalloc((size_t)u->part_max + 1);
	upload_id(&u->st, p.id);
	if (cli_client_open(ctx, &w[0].c)) {
		rc = CLI_EXIT_FAIL;
		goto done;
	}
	p.held = ask_held(w[0].c, &p);
	rc = p.held ? run_senders(&p, w, fd, md) : CLI_EXIT_FAIL;
	if (!rc && !kn_fd_unchanged(fd, &u->st))
		rc = cli_fail(ctx, "%s changed while it was pushed; push again "
			      "once it is written", u->path);
	if (!rc) {
		digest_hex(md, u->digest);
		rc = commit(&p, w[0].c);
	}
done:
	for (size_t i = 0; i < MODEL_UPLOAD_STREAMS; i++)
		cli_client_free(w[i].c);
	/* The senders have stopped: each buffer is free or still queued. */
	for (size_t i = 0; i < p.n_free; i++)
		free(p.free_bufs[i]);
	for (size_t i = 0; i < p.q_len; i++)
		free(p.queue[(p.q_head + i) % BUFFERS].buf);
	json_decref(p.held);
	pthread_cond_destroy(&p.moved);
out:
	EVP_MD_CTX_free(md);
	if (fd >= 0)
		close(fd);
	return rc;
}
