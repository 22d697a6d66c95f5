/*
 * A model blob sent in sized parts (docs/registry.md, Uploads): parts of
 * the server's part size, MODEL_UPLOAD_STREAMS in flight, each thread with
 * its own connection and its own descriptor of the file (pread: no shared
 * offset). The upload's id comes from the digest, so a push killed midway
 * and run again asks the server what it holds and sends only the rest; a
 * part whose answer is lost is sent again, which the server answers from
 * what it holds when it got there after all. The file is checked after:
 * one modified since it was hashed is refused by name (the server refuses
 * bytes that do not hash to the name anyway; this says which file).
 */
#include "cmd/model_upload.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "cmd/cli_client.h"

/* Sends of one part: the first and again after lost answers. */
#define PART_TRIES 4

struct push {
	struct cli_ctx *ctx;
	const struct model_upload *u;
	char id[33];
	json_t *held;         /* [[start, end], ...] the server had before */
	pthread_mutex_t lock; /* the fields below */
	int64_t next;         /* the next part's offset */
	bool stored;          /* an answer said the blob is stored */
	int rc;               /* the first failure */
};

static char *part_url(const struct push *p, int64_t offset)
{
	return kn_asprintf("/v1/model-blobs/%s?upload=%s&offset=%lld&size=%lld",
			   p->u->digest, p->id, (long long)offset,
			   (long long)p->u->size);
}

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

/* What the server holds of this upload: its ranges (a new reference,
   empty when it has none), or NULL after saying why. */
static json_t *ask_held(struct cli_client *c, const struct push *p)
{
	char *url = kn_asprintf("/v1/model-blobs/%s?upload=%s", p->u->digest,
				p->id);
	json_t *answer = NULL, *ranges = NULL;
	int rc = cli_call_quiet(c, CLI_QUIET_NOT_FOUND, "GET", url, NULL, NULL,
				0, &answer);

	free(url);
	if (rc == CLI_NOT_FOUND)
		return json_array();
	if (rc)
		return NULL;
	/* Parts of another size (another file of this digest, changed
	   since): start again rather than mix them. */
	if (json_integer_value(json_object_get(answer, "size")) == p->u->size)
		ranges = json_incref(json_object_get(answer, "ranges"));
	json_decref(answer);
	return json_is_array(ranges) ? ranges : json_array();
}

/* Send one part until the server has it. 0, or an exit status. */
static int send_part(struct push *p, struct cli_client *c, const char *buf,
		     int64_t offset, int64_t len)
{
	char *url = part_url(p, offset);
	int rc = CLI_LOST;

	for (int tries = 0; rc == CLI_LOST && tries < PART_TRIES; tries++) {
		json_t *answer = NULL;

		rc = cli_call_quiet(c, CLI_QUIET_LOST, "POST", url,
				    "application/octet-stream", buf,
				    (size_t)len, &answer);
		if (rc == 0 && json_is_true(json_object_get(answer, "stored"))) {
			pthread_mutex_lock(&p->lock);
			p->stored = true;
			pthread_mutex_unlock(&p->lock);
		}
		json_decref(answer);
		if (rc == CLI_LOST)
			usleep(200000u << tries);
	}
	free(url);
	if (rc == CLI_LOST)
		rc = cli_fail(p->ctx, "%s: the connection to the server broke "
			      "%d times sending bytes %lld-%lld; push again to "
			      "send the rest", p->u->path, PART_TRIES,
			      (long long)offset, (long long)(offset + len));
	return rc;
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

/* The next part not yet held by the server: its offset, or -1. */
static int64_t claim(struct push *p, int64_t *len)
{
	int64_t off = -1;

	pthread_mutex_lock(&p->lock);
	while (!p->rc && p->next < p->u->size) {
		int64_t at = p->next, n = p->u->size - at;
		if (n > p->u->part_max)
			n = p->u->part_max;
		p->next += n;
		if (!ranges_hold(p->held, at, at + n)) {
			off = at;
			*len = n;
			break;
		}
		*p->u->resumed += n; /* the server had it from a push before */
	}
	/* An empty blob is one empty part. */
	if (!p->rc && p->u->size == 0 && p->next == 0) {
		p->next = 1;
		off = 0;
		*len = 0;
	}
	pthread_mutex_unlock(&p->lock);
	return off;
}

struct worker {
	struct push *p;
	struct cli_client *c;
	pthread_t thread;
	bool started;
};

static void *work(void *arg)
{
	struct worker *w = arg;
	struct push *p = w->p;
	int fd = open(p->u->path, O_RDONLY | O_CLOEXEC);
	char *buf = kn_xmalloc((size_t)p->u->part_max + 1);
	int64_t off, len = 0;
	int rc = fd < 0 ? cli_fail(p->ctx, "%s: %s", p->u->path,
				   strerror(errno))
			: 0;

	while (!rc && (off = claim(p, &len)) >= 0) {
		rc = read_part(p, fd, buf, off, len);
		if (!rc)
			rc = send_part(p, w->c, buf, off, len);
		if (!rc && p->u->progress) {
			pthread_mutex_lock(&p->lock);
			*p->u->sent += len;
			p->u->progress(*p->u->sent + *p->u->resumed,
				       p->u->progress_arg);
			pthread_mutex_unlock(&p->lock);
		}
	}
	if (rc) {
		pthread_mutex_lock(&p->lock);
		if (!p->rc)
			p->rc = rc;
		pthread_mutex_unlock(&p->lock);
	}
	free(buf);
	if (fd >= 0)
		close(fd);
	return NULL;
}

/* Whether the file is still the one hashed: same size, not modified
   since. */
static bool unchanged(const struct model_upload *u)
{
	struct stat st;

	if (stat(u->path, &st) < 0 || st.st_size != u->size)
		return false;
	return st.st_mtim.tv_sec < u->hashed_at.tv_sec ||
	       (st.st_mtim.tv_sec == u->hashed_at.tv_sec &&
		st.st_mtim.tv_nsec <= u->hashed_at.tv_nsec);
}

/* No answer said stored (the one that did was lost): ask the store. */
static int check_stored(struct push *p, struct cli_client *c)
{
	json_t *req = json_pack("{s:[s]}", "digests", p->u->digest);
	char *body = json_dumps(req, JSON_COMPACT);
	json_t *answer = NULL;
	int rc = cli_call(c, "POST", "/v1/model-blobs/missing",
			  "application/json", body, strlen(body), &answer);

	if (!rc && json_array_size(json_object_get(answer, "missing")))
		rc = cli_fail(p->ctx, "%s: every part was sent but the server "
			      "did not store the blob; push again",
			      p->u->path);
	json_decref(answer);
	free(body);
	json_decref(req);
	return rc;
}

static int run_workers(struct push *p, struct worker *w, size_t n)
{
	int rc = 0;

	for (size_t i = 0; i < n && !rc; i++) {
		w[i].p = p;
		if (!w[i].c)
			rc = cli_client_open(p->ctx, &w[i].c);
	}
	for (size_t i = 0; i < n && !rc; i++) {
		if (pthread_create(&w[i].thread, NULL, work, &w[i]) != 0) {
			rc = cli_fail(p->ctx, "cannot start a thread: %s",
				      strerror(errno));
			pthread_mutex_lock(&p->lock);
			p->rc = rc;
			pthread_mutex_unlock(&p->lock);
			break;
		}
		w[i].started = true;
	}
	for (size_t i = 0; i < n; i++)
		if (w[i].started)
			pthread_join(w[i].thread, NULL);
	return rc ? rc : p->rc;
}

int model_upload_blob(struct cli_ctx *ctx, const struct model_upload *u)
{
	struct push p = {.ctx = ctx, .u = u, .lock = PTHREAD_MUTEX_INITIALIZER};
	struct worker w[MODEL_UPLOAD_STREAMS] = {0};
	int64_t parts = u->size ? (u->size + u->part_max - 1) / u->part_max : 1;
	size_t n = parts < MODEL_UPLOAD_STREAMS ? (size_t)parts
						: MODEL_UPLOAD_STREAMS;
	int rc = 0;

	/* The same id for the same blob: a push run again resumes it. */
	snprintf(p.id, sizeof(p.id), "p%.31s", u->digest);
	if (cli_client_open(ctx, &w[0].c))
		return CLI_EXIT_FAIL;
	p.held = ask_held(w[0].c, &p);
	if (!p.held)
		rc = CLI_EXIT_FAIL;
	if (!rc)
		rc = run_workers(&p, w, n);
	if (!rc && !p.stored)
		rc = check_stored(&p, w[0].c);
	if (!unchanged(u))
		rc = cli_fail(ctx, "%s changed while it was pushed; push again "
			      "once it is written", u->path);
	for (size_t i = 0; i < n; i++)
		cli_client_free(w[i].c);
	json_decref(p.held);
	pthread_mutex_destroy(&p.lock);
	return rc;
}
