/*
 * The Azure Blob backend (REST, Shared Key or SAS), over libcurl.
 *
 * Requests: Put Blob for bytes and for files up to single_put_max (64 MiB
 * by default, as Azure's SDKs do: one request is cheaper for the service
 * than eight blocks and a list, and against Azurite it measured faster
 * under load); Put Block + Put Block List for larger files, with up to
 * `parallel` blocks in flight
 * on one curl multi handle driven by the calling thread. Bodies are read
 * from the file as curl sends them (no block buffers: first touch of fresh
 * memory is slow here). The file's SHA-256 is taken from those same bytes
 * for a single Put Blob (the file is read once, and no hash is left to
 * finish after the last byte went out: against Azurite, a hash thread
 * finishing behind each file cost 10 %); for blocks, which go out of
 * order, a second thread reads the file for it through one reused buffer. Per-block
 * Content-MD5 is not sent: every download is checked against the
 * manifest's sha256, TLS protects the transfer, and MD5 would cost a
 * core-second per ~600 MB on the upload path. Downloads come back as
 * parallel Range GETs, resumed where a connection broke (see "downloads"
 * below).
 *
 * Failures: curl transport errors (connect, timeouts, resets, short
 * replies) and HTTP 408/429/5xx are transient and retried with exponential
 * backoff up to max_retries times; other statuses end the call with the
 * service's x-ms-error-code. A missing container is created on the first
 * write. Error messages carry the method, the container and blob name, the
 * status and the code - never the URL's query (a SAS) or any header.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/evp.h>

#include "ckpt/azure_store.h"
#include "httpc/httpc.h"

/* Replies read into memory (errors, lists) are capped: List Blobs pages
 * are at most 5000 entries, far below this. */
#define REPLY_MAX (32u << 20)
/* Azure's limit on blocks per blob. */
#define MAX_BLOCKS 50000
/* Longest backoff between retries. */
#define BACKOFF_MAX_MS 10000


static struct azure *az_of(struct kn_blob_store *s)
{
	return s->impl;
}

/* ---- one request ---- */

struct az_req {
	const char *method;
	const char *blob; /* full name (prefix included); NULL: the container */
	struct kn_kv query[6];
	size_t nq;
	struct kn_kv xms[6];
	size_t nx;
	const char *content_type;
	const char *if_match;
	const char *if_none_match;
	const char *range;
	const char *body;  /* memory, or NULL to read the body from body_fd */
	int body_fd;
	int64_t body_off;
	int64_t body_len; /* < 0: no body */
	struct body_hash *hash; /* hash the body's bytes as they are sent */
};

/*
 * A file body's SHA-256, taken from the bytes as they go into curl's
 * buffer: one read of the file, no second thread. Retries and rewinds
 * resend bytes already hashed; only bytes past `hashed` are added.
 */
struct body_hash {
	EVP_MD_CTX *ctx;
	int64_t hashed; /* bytes of the body hashed so far, in order */
};

struct az_body {
	const char *data;
	int fd;
	off_t off;
	size_t len, pos;
	struct body_hash *hash;
};

/* A reply: its status, the headers kiln reads, and a body kept in memory
 * (errors, lists) unless its request writes it elsewhere. */
struct az_reply {
	struct kn_azure_head h;
	struct kn_buf mem;
	int write_errno;
};

struct az_call {
	struct curl_slist *headers;
	char *url;
	struct az_body body;
	struct az_reply reply;
};

/* Bodies are copied once, into curl's buffer, as `curl -T` does. */
static size_t read_body(char *buf, size_t size, size_t n, void *arg)
{
	struct az_body *b = arg;
	size_t take = size * n;
	if (take > b->len - b->pos)
		take = b->len - b->pos;
	if (b->data) {
		memcpy(buf, b->data + b->pos, take);
	} else {
		size_t got = 0;
		while (got < take) {
			ssize_t r = kn_pread(b->fd, buf + got, take - got,
					     b->off + (off_t)(b->pos + got));
			if (r <= 0) /* the file shrank or failed: give up */
				return CURL_READFUNC_ABORT;
			got += (size_t)r;
		}
	}
	if (b->hash && b->pos <= (size_t)b->hash->hashed &&
	    b->pos + take > (size_t)b->hash->hashed) {
		size_t skip = (size_t)b->hash->hashed - b->pos;

		EVP_DigestUpdate(b->hash->ctx, buf + skip, take - skip);
		b->hash->hashed += (int64_t)(take - skip);
	}
	b->pos += take;
	return take;
}

static int seek_body(void *arg, curl_off_t offset, int origin)
{
	struct az_body *b = arg;
	if (origin != SEEK_SET || offset < 0 || (size_t)offset > b->len)
		return CURL_SEEKFUNC_FAIL;
	b->pos = (size_t)offset;
	return CURL_SEEKFUNC_OK;
}

static size_t on_header(char *buf, size_t size, size_t n, void *arg)
{
	struct az_reply *r = arg;

	kn_azure_head_line(&r->h, buf, size * n);
	return size * n;
}

static size_t on_data(char *buf, size_t size, size_t n, void *arg)
{
	struct az_call *c = arg;
	struct az_reply *r = &c->reply;
	size_t len = size * n;

	if (kn_buf_append(&r->mem, buf, len) < 0)
		return 0;
	return len;
}

static void call_release(struct az_call *c)
{
	curl_slist_free_all(c->headers);
	free(c->url);
	kn_buf_release(&c->reply.mem);
	c->headers = NULL;
	c->url = NULL;
}

static void http_date(char *buf, size_t len)
{
	time_t now = time(NULL);
	struct tm tm;
	gmtime_r(&now, &tm);
	strftime(buf, len, "%a, %d %b %Y %H:%M:%S GMT", &tm);
}

/* "Name: value" onto list for each pair that has a value. */
static void add_headers(struct curl_slist **list, const struct kn_kv *kv,
			size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (!kv[i].value)
			continue;
		char *line = kn_asprintf("%s: %s", kv[i].name, kv[i].value);

		*list = curl_slist_append(*list, line);
		free(line);
	}
}

/* Build URL and headers for r on handle h; the reply goes into c. */
static void prepare(struct azure *a, CURL *h, const struct az_req *r,
		    struct az_call *c)
{
	char date[64], auth[256];
	char *enc_blob = r->blob ? kn_url_encode(r->blob, 1) : NULL;
	char *path = kn_asprintf("%s/%s%s%s", a->path_base, a->container,
				 enc_blob ? "/" : "", enc_blob ? enc_blob : "");
	struct kn_buf url;
	struct kn_kv xms[8];
	const struct kn_kv plain[] = {
		{"Content-Type", r->content_type},
		{"If-Match", r->if_match},
		{"If-None-Match", r->if_none_match},
		{"Range", r->range},
	};
	size_t nx = 0;

	kn_buf_init(&url, SIZE_MAX);
	kn_buf_printf(&url, "%s%s", a->origin, path);
	for (size_t i = 0; i < r->nq; i++) {
		char *k = kn_url_encode(r->query[i].name, 0);
		char *v = kn_url_encode(r->query[i].value, 0);
		kn_buf_printf(&url, "%c%s=%s", i ? '&' : '?', k, v);
		KN_FREE_ALL(k, v);
	}
	if (a->sas && a->key_len == 0)
		kn_buf_printf(&url, "%c%s", r->nq ? '&' : '?', a->sas);

	http_date(date, sizeof(date));
	xms[nx++] = (struct kn_kv){"x-ms-date", date};
	xms[nx++] = (struct kn_kv){"x-ms-version", a->version};
	for (size_t i = 0; i < r->nx; i++)
		xms[nx++] = r->xms[i];
	add_headers(&c->headers, xms, nx);
	add_headers(&c->headers, plain, sizeof(plain) / sizeof(plain[0]));
	/* No 100-continue round trip before each block. */
	c->headers = curl_slist_append(c->headers, "Expect:");
	if (a->key_len > 0) {
		struct kn_azure_sign_input in = {
			.method = r->method,
			.content_length = r->body_len,
			.content_type = r->content_type,
			.if_match = r->if_match,
			.if_none_match = r->if_none_match,
			.range = r->range,
			.headers = xms,
			.n_headers = nx,
			.account = a->account,
			.path = path,
			.query = r->query,
			.n_query = r->nq,
		};
		char *text = kn_azure_string_to_sign(&in);
		char sig[64];
		kn_azure_sign(a->key, a->key_len, text, sig, sizeof(sig));
		snprintf(auth, sizeof(auth), "Authorization: SharedKey %s:%s",
			 a->account, sig);
		c->headers = curl_slist_append(c->headers, auth);
		OPENSSL_cleanse(text, strlen(text));
		free(text);
		OPENSSL_cleanse(auth, sizeof(auth));
	}
	c->url = url.data;
	KN_FREE_ALL(path, enc_blob);

	curl_easy_reset(h);
	kn_httpc_defaults(h, 10000);
	curl_easy_setopt(h, CURLOPT_URL, c->url);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, c->headers);
	/* A transfer that moves nothing for 30 s is stalled: retry it. */
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 30L);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, &c->reply);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, c);
	curl_easy_setopt(h, CURLOPT_PRIVATE, c);
	curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 512L * 1024);
	curl_easy_setopt(h, CURLOPT_UPLOAD_BUFFERSIZE, 2L * 1024 * 1024);
	if (strcmp(r->method, "PUT") == 0) {
		c->body = (struct az_body){
			.data = r->body,
			.fd = r->body_fd,
			.off = (off_t)r->body_off,
			.len = (size_t)(r->body_len > 0 ? r->body_len : 0),
			.hash = r->hash,
		};
		curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(h, CURLOPT_READFUNCTION, read_body);
		curl_easy_setopt(h, CURLOPT_READDATA, &c->body);
		curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, seek_body);
		curl_easy_setopt(h, CURLOPT_SEEKDATA, &c->body);
		curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE,
				 (curl_off_t)c->body.len);
	} else if (strcmp(r->method, "HEAD") == 0) {
		curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
	} else if (strcmp(r->method, "DELETE") == 0) {
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
	}
}

static bool transient_curl(CURLcode cc)
{
	switch (cc) {
	case CURLE_COULDNT_CONNECT:
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
	case CURLE_SSL_CONNECT_ERROR:
		return true;
	default:
		return false;
	}
}

static bool transient_status(long status)
{
	return status == 408 || status == 429 || status >= 500;
}

static int64_t backoff_ms(struct azure *a, int attempt)
{
	int64_t ms = a->retry_base_ms;
	for (int i = 0; i < attempt && ms < BACKOFF_MAX_MS; i++)
		ms *= 2;
	return ms < BACKOFF_MAX_MS ? ms : BACKOFF_MAX_MS;
}

static void sleep_ms(int64_t ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static enum kn_errcode status_code(long status)
{
	switch (status) {
	case 400:
	case 416:
		return KN_EINVAL;
	case 401:
	case 403:
		return KN_EPERM;
	case 404:
		return KN_ENOTFOUND;
	case 409:
	case 412:
		return KN_ECONFLICT;
	case 413:
		return KN_ETOOBIG;
	default:
		return status >= 500 || status == 408 || status == 429
			       ? KN_EUNAVAIL
			       : KN_EIO;
	}
}

/* The error for a finished call that did not succeed. */
static int call_error(struct azure *a, const struct az_req *r, CURLcode cc,
		      const struct az_reply *reply, int attempts,
		      struct kn_error *err)
{
	const char *blob = r->blob ? r->blob : "";
	const char *sep = r->blob ? "/" : "";
	char tries[48] = "";

	if (attempts > 1)
		snprintf(tries, sizeof(tries), " (after %d attempts)", attempts);
	if (reply->write_errno)
		return kn_errorf(err, KN_EIO, NULL, "azure %s %s%s%s: write: %s",
				 r->method, a->container, sep, blob,
				 strerror(reply->write_errno));
	if (cc != CURLE_OK)
		return kn_errorf(err, KN_EUNAVAIL, NULL,
				 "azure %s %s%s%s: %s%s", r->method,
				 a->container, sep, blob, curl_easy_strerror(cc),
				 tries);
	return kn_errorf(err, status_code(reply->h.status), NULL,
			 "azure %s %s%s%s: HTTP %ld %s%s", r->method,
			 a->container, sep, blob, reply->h.status,
			 reply->h.error_code[0] ? reply->h.error_code : "(no code)",
			 tries);
}

/*
 * Run r on the store's easy handle with retries. A 2xx reply succeeds;
 * its body is in c->reply.mem.
 */
static int perform(struct azure *a, const struct az_req *r, struct az_call *c,
		   struct kn_error *err)
{
	CURLcode cc = CURLE_OK;
	int attempt;

	for (attempt = 0;; attempt++) {
		call_release(c);
		memset(&c->reply, 0, sizeof(c->reply));
		kn_buf_init(&c->reply.mem, REPLY_MAX);
		prepare(a, a->easy, r, c);
		cc = curl_easy_perform(a->easy);
		curl_easy_getinfo(a->easy, CURLINFO_RESPONSE_CODE,
				  &c->reply.h.status);
		if (cc == CURLE_OK && c->reply.h.status >= 200 &&
		    c->reply.h.status < 300)
			return 0;
		if (c->reply.write_errno || attempt >= a->max_retries ||
		    !(cc != CURLE_OK ? transient_curl(cc)
				     : transient_status(c->reply.h.status)))
			break;
		sleep_ms(backoff_ms(a, attempt));
	}
	return call_error(a, r, cc, &c->reply, attempt + 1, err);
}

static char *full_name(struct azure *a, const char *name)
{
	return kn_asprintf("%s%s", a->prefix, name);
}

static bool container_missing(const struct az_call *c)
{
	return c->reply.h.status == 404 &&
	       strcmp(c->reply.h.error_code, "ContainerNotFound") == 0;
}

static int create_container(struct azure *a, struct kn_error *err)
{
	struct az_req r = {.method = "PUT", .body = "", .body_len = 0,
			   .query = {{"restype", "container"}}, .nq = 1};
	struct az_call c = {0};
	int rc = perform(a, &r, &c, err);
	if (rc < 0 && c.reply.h.status == 409)
		rc = 0; /* created meanwhile by someone else */
	call_release(&c);
	return rc;
}

/* ---- ops ---- */

/*
 * Put Blob of data (or, when data is NULL, of fd's first len bytes, hashed
 * into hash on the way when it is not NULL).
 */
static int put_blob(struct azure *a, const char *full, const void *data,
		    int fd, size_t len, unsigned flags, struct body_hash *hash,
		    struct az_call *c, struct kn_error *err)
{
	struct az_req r = {
		.method = "PUT",
		.blob = full,
		.xms = {{"x-ms-blob-type", "BlockBlob"}},
		.nx = 1,
		.content_type = "application/octet-stream",
		.if_none_match = (flags & KN_BLOB_CREATE_ONLY) ? "*" : NULL,
		.body = data,
		.body_fd = fd,
		.body_len = (int64_t)len,
		.hash = hash,
	};
	return perform(a, &r, c, err);
}

static int conflict_or(int rc, const struct az_call *c, const char *name,
		       struct kn_error *err)
{
	if (rc < 0 && c->reply.h.status == 409 &&
	    strcmp(c->reply.h.error_code, "BlobAlreadyExists") == 0)
		return kn_errorf(err, KN_ECONFLICT, "name",
				 "blob %s: already exists", name);
	return rc;
}

static int az_put_bytes(struct kn_blob_store *s, const char *name,
			const void *data, size_t len, unsigned flags,
			struct kn_error *err)
{
	struct azure *a = az_of(s);
	char *full = full_name(a, name);
	struct az_call c = {0};
	int rc = put_blob(a, full, data ? data : "", -1, len, flags, NULL, &c,
			  err);

	if (rc < 0 && container_missing(&c)) {
		rc = create_container(a, err);
		if (rc == 0)
			rc = put_blob(a, full, data ? data : "", -1, len, flags, NULL,
				      &c, err);
	}
	rc = conflict_or(rc, &c, name, err);
	call_release(&c);
	free(full);
	return rc;
}

/* A block's id: a number (a block's index, or a staged block's offset,
   below 256 TiB) in 12 hex digits, base64 as Azure wants; one length
   for every block of a blob, as it also wants. */
#define BLOCK_ID_LEN 17
static void block_id(uint64_t n, char out[BLOCK_ID_LEN])
{
	char raw[13];
	snprintf(raw, sizeof(raw), "%012llx", (unsigned long long)n);
	EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)raw, 12);
}

/*
 * SHA-256 of a file on its own thread, reading it with pread into one
 * reused buffer up to a mark the caller raises as bytes become final:
 * the whole file at once for an upload, whose wire reads the same pages
 * from the page cache (committed checkpoint files do not change; one
 * that did would fail verification at restore), or, for a download whose
 * ranges land out of order, the prefix already complete. The hash never
 * holds the transfer up.
 */
struct file_hash {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t more;
	int fd;
	char *buf;
	size_t buf_len;
	int64_t ready; /* bytes below this are final; guarded by lock */
	bool last;     /* ready will not rise again; guarded by lock */
	int64_t bytes;
	int rc;
	char hex[KN_SHA256_HEX_LEN + 1];
};

/* How far the thread may read: waits until ready passes bytes or is last. */
static int64_t file_hash_limit(struct file_hash *h)
{
	int64_t limit;

	pthread_mutex_lock(&h->lock);
	while (!h->last && h->ready <= h->bytes)
		pthread_cond_wait(&h->more, &h->lock);
	limit = h->ready;
	pthread_mutex_unlock(&h->lock);
	return limit;
}

static void *file_hash_main(void *arg)
{
	struct file_hash *h = arg;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	unsigned char md[32];
	unsigned int mdlen = 0;

	if (!ctx || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL))
		abort();
	for (;;) {
		int64_t limit = file_hash_limit(h);
		size_t want = h->buf_len;

		if (limit <= h->bytes)
			break;
		if ((int64_t)want > limit - h->bytes)
			want = (size_t)(limit - h->bytes);
		ssize_t n = kn_pread(h->fd, h->buf, want, h->bytes);
		if (n < 0) {
			h->rc = (int)n;
			break;
		}
		if (n == 0)
			break;
		EVP_DigestUpdate(ctx, h->buf, (size_t)n);
		h->bytes += n;
	}
	EVP_DigestFinal_ex(ctx, md, &mdlen);
	kn_hex(md, 32, h->hex);
	EVP_MD_CTX_free(ctx);
	return NULL;
}

/*
 * Start hashing fd through buf up to ready; last when ready is final
 * (INT64_MAX and last: to the end of the file).
 */
static void file_hash_start(struct file_hash *h, int fd, char *buf,
			    size_t buf_len, int64_t ready, bool last)
{
	*h = (struct file_hash){.fd = fd, .buf = buf, .buf_len = buf_len,
				.ready = ready, .last = last};
	pthread_mutex_init(&h->lock, NULL);
	pthread_cond_init(&h->more, NULL);
	if (pthread_create(&h->thread, NULL, file_hash_main, h) != 0)
		abort();
}

/* Let the thread read up to ready. */
static void file_hash_raise(struct file_hash *h, int64_t ready)
{
	pthread_mutex_lock(&h->lock);
	if (ready > h->ready) {
		h->ready = ready;
		pthread_cond_signal(&h->more);
	}
	pthread_mutex_unlock(&h->lock);
}

/* Let the thread finish at ready (or where it is) and join it. */
static void file_hash_finish(struct file_hash *h, int64_t ready)
{
	pthread_mutex_lock(&h->lock);
	if (ready > h->ready)
		h->ready = ready;
	h->last = true;
	pthread_cond_signal(&h->more);
	pthread_mutex_unlock(&h->lock);
	pthread_join(h->thread, NULL);
	pthread_mutex_destroy(&h->lock);
	pthread_cond_destroy(&h->more);
}

/* Handle i of those that carry blocks or ranges in parallel, kept open
 * (with its connection) from one call to the next. */
static CURL *block_handle(struct azure *a, int i)
{
	if (!a->block_easy[i])
		a->block_easy[i] = curl_easy_init();
	if (!a->block_easy[i])
		abort();
	return a->block_easy[i];
}

struct slot {
	CURL *h;
	uint32_t block;
	char id[BLOCK_ID_LEN];
	int attempts;
	int64_t retry_at;
	bool busy, in_multi;
	struct az_req req;
	struct az_call call;
};

static void slot_start(struct azure *a, struct slot *sl)
{
	call_release(&sl->call);
	memset(&sl->call.reply, 0, sizeof(sl->call.reply));
	kn_buf_init(&sl->call.reply.mem, REPLY_MAX);
	prepare(a, sl->h, &sl->req, &sl->call);
	curl_multi_add_handle(a->multi, sl->h);
	sl->in_multi = true;
}

/* Give idle slot sl block number block of fd (size bytes) to put. */
static void slot_put_block(struct azure *a, struct slot *sl, uint32_t block,
			   const char *full, int fd, int64_t size)
{
	int64_t off = (int64_t)block * (int64_t)a->block_size;

	sl->block = block;
	block_id(sl->block, sl->id);
	sl->attempts = 0;
	sl->busy = true;
	sl->req = (struct az_req){
		.method = "PUT",
		.blob = full,
		.query = {{"comp", "block"}, {"blockid", sl->id}},
		.nq = 2,
		.content_type = "application/octet-stream",
		.body_fd = fd,
		.body_off = off,
		.body_len = size - off < (int64_t)a->block_size
				    ? size - off
				    : (int64_t)a->block_size,
	};
	slot_start(a, sl);
}

/*
 * Take in the calls curl finished: a success frees its slot (*done
 * counts it), a transient failure waits for its retry, any other fails
 * the put (its status and error code copied to list_call, where the
 * caller looks for ContainerNotFound).
 */
static int slots_reap(struct azure *a, struct slot *slots, uint32_t *done,
		      struct az_call *list_call, struct kn_error *err)
{
	CURLMsg *msg;
	int left, rc = 0;

	while ((msg = curl_multi_info_read(a->multi, &left))) {
		struct slot *sl = NULL;
		CURLcode cc = msg->data.result;
		long status = 0;

		if (msg->msg != CURLMSG_DONE)
			continue;
		for (int i = 0; i < a->parallel; i++)
			if (slots[i].h == msg->easy_handle)
				sl = &slots[i];
		curl_multi_remove_handle(a->multi, msg->easy_handle);
		sl->in_multi = false;
		curl_easy_getinfo(sl->h, CURLINFO_RESPONSE_CODE, &status);
		sl->call.reply.h.status = status;
		if (cc == CURLE_OK && status >= 200 && status < 300) {
			sl->busy = false;
			(*done)++;
		} else if (sl->attempts < a->max_retries &&
			   (cc != CURLE_OK ? transient_curl(cc)
					   : transient_status(status))) {
			sl->retry_at = kn_mono_ms() + backoff_ms(a, sl->attempts);
			sl->attempts++;
		} else if (rc == 0) {
			list_call->reply.h.status = status;
			memcpy(list_call->reply.h.error_code,
			       sl->call.reply.h.error_code,
			       sizeof(list_call->reply.h.error_code));
			rc = call_error(a, &sl->req, cc, &sl->call.reply,
					sl->attempts + 1, err);
		}
	}
	return rc;
}

/* Put Block List: the blob is blocks 0 to nblocks - 1, in order, or
   (offsets not NULL) the blocks staged at those offsets, in order. */
static int put_block_list(struct azure *a, const char *full,
			  uint32_t nblocks, const int64_t *offsets,
			  unsigned flags, struct az_call *list_call,
			  struct kn_error *err)
{
	struct kn_buf xml;
	int rc;

	kn_buf_init(&xml, SIZE_MAX);
	kn_buf_printf(&xml, "<?xml version=\"1.0\" encoding=\"utf-8\"?>"
			    "<BlockList>");
	for (uint32_t i = 0; i < nblocks; i++) {
		char id[BLOCK_ID_LEN];

		block_id(offsets ? (uint64_t)offsets[i] : i, id);
		kn_buf_printf(&xml, "<Latest>%s</Latest>", id);
	}
	kn_buf_printf(&xml, "</BlockList>");
	struct az_req r = {
		.method = "PUT",
		.blob = full,
		.query = {{"comp", "blocklist"}},
		.nq = 1,
		.xms = {{"x-ms-blob-content-type", "application/octet-stream"}},
		.nx = 1,
		.content_type = "application/xml",
		.if_none_match = (flags & KN_BLOB_CREATE_ONLY) ? "*" : NULL,
		.body = xml.data,
		.body_len = (int64_t)xml.len,
	};
	rc = perform(a, &r, list_call, err);
	kn_buf_release(&xml);
	return rc;
}

/*
 * Put Block for every block of fd (size bytes), up to `parallel` in
 * flight, then Put Block List. Each block's body is read from the file as
 * curl sends it.
 */
static int put_blocks(struct azure *a, const char *full, int fd, int64_t size,
		      unsigned flags, struct az_call *list_call,
		      struct kn_error *err)
{
	uint32_t nblocks = (uint32_t)((size + (int64_t)a->block_size - 1) /
				      (int64_t)a->block_size);
	struct slot slots[KN_BLOB_MAX_PARALLEL];
	uint32_t next = 0, done = 0;
	int rc = 0;

	memset(slots, 0, sizeof(slots));
	for (int i = 0; i < a->parallel; i++)
		slots[i].h = block_handle(a, i);
	while (rc == 0 && done < nblocks) {
		int64_t now = kn_mono_ms();
		int running = 0;

		for (int i = 0; i < a->parallel && next < nblocks; i++)
			if (!slots[i].busy)
				slot_put_block(a, &slots[i], next++, full, fd,
					       size);
		for (int i = 0; i < a->parallel; i++)
			if (slots[i].busy && !slots[i].in_multi &&
			    slots[i].retry_at <= now)
				slot_start(a, &slots[i]);
		curl_multi_perform(a->multi, &running);
		rc = slots_reap(a, slots, &done, list_call, err);
		if (rc == 0 && done < nblocks)
			curl_multi_poll(a->multi, NULL, 0, 50, NULL);
	}
	for (int i = 0; i < a->parallel; i++) {
		if (slots[i].in_multi)
			curl_multi_remove_handle(a->multi, slots[i].h);
		call_release(&slots[i].call);
	}
	if (rc < 0)
		return rc;
	return put_block_list(a, full, nblocks, NULL, flags, list_call, err);
}

static int put_file_once(struct azure *a, const char *full, int fd,
			 int64_t size, unsigned flags, struct body_hash *hash,
			 struct az_call *c, struct kn_error *err)
{
	if (size > (int64_t)a->single_put_max)
		return put_blocks(a, full, fd, size, flags, c, err);
	return put_blob(a, full, NULL, fd, (size_t)size, flags, hash, c, err);
}

static int az_put_file(struct kn_blob_store *s, const char *name,
		       const char *path, unsigned flags, char *sha256_hex,
		       int64_t *size_out, struct kn_error *err)
{
	struct azure *a = az_of(s);
	char *full = full_name(a, name);
	struct file_hash hash = {0};
	struct body_hash inline_hash = {0};
	bool hashing = false, single;
	struct az_call c = {0};
	struct stat st;
	int fd, rc;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0) {
		rc = kn_errorf(err, errno == ENOENT ? KN_ENOTFOUND : KN_EIO,
			       "path", "%s: %s", path, strerror(errno));
		goto out;
	}
	if (st.st_size > (int64_t)a->block_size * MAX_BLOCKS) {
		rc = kn_errorf(err, KN_ETOOBIG, "path",
			       "%s: larger than %d blocks of %zu bytes", path,
			       MAX_BLOCKS, a->block_size);
		goto out;
	}
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	/* One Put Blob hashes the bytes it sends (in order, read once);
	 * parallel blocks go out of order, so a thread reads the file for
	 * the hash beside them. */
	single = st.st_size <= (int64_t)a->single_put_max;
	if (single) {
		inline_hash.ctx = EVP_MD_CTX_new();
		if (!inline_hash.ctx ||
		    !EVP_DigestInit_ex(inline_hash.ctx, EVP_sha256(), NULL))
			abort();
	} else {
		file_hash_start(&hash, fd, kn_bufpool_get(&s->pool, 0),
				s->pool.size, INT64_MAX, true);
		hashing = true;
	}
	rc = put_file_once(a, full, fd, st.st_size, flags,
			   single ? &inline_hash : NULL, &c, err);
	if (rc < 0 && container_missing(&c)) {
		call_release(&c);
		rc = create_container(a, err);
		if (rc == 0)
			rc = put_file_once(a, full, fd, st.st_size, flags,
					   single ? &inline_hash : NULL, &c,
					   err);
	}
	rc = conflict_or(rc, &c, name, err);
	if (hashing) {
		file_hash_finish(&hash, INT64_MAX);
		hashing = false;
	} else if (rc == 0) {
		unsigned char md[32];
		unsigned int mdlen = 0;

		hash.bytes = inline_hash.hashed;
		EVP_DigestFinal_ex(inline_hash.ctx, md, &mdlen);
		kn_hex(md, 32, hash.hex);
	}
	if (rc == 0 && (hash.rc < 0 || hash.bytes != st.st_size))
		rc = kn_errorf(err, KN_EIO, "path", "%s: %s", path,
			       hash.rc < 0 ? strerror(-hash.rc)
					   : "changed while it was uploaded");
	if (rc == 0) {
		if (sha256_hex)
			memcpy(sha256_hex, hash.hex, sizeof(hash.hex));
		if (size_out)
			*size_out = st.st_size;
	}
out:
	EVP_MD_CTX_free(inline_hash.ctx);
	if (hashing)
		file_hash_finish(&hash, INT64_MAX);
	if (fd >= 0)
		close(fd);
	call_release(&c);
	free(full);
	return rc;
}

/* ---- downloads: parallel ranges ---- */

/*
 * Get Blob Properties: the blob's size and (when etag is not NULL) its
 * ETag, "" when the service sent none that fits.
 */
static int head_blob(struct azure *a, const char *full, const char *name,
		     int64_t *size, char etag[128], struct kn_error *err)
{
	struct az_req r = {.method = "HEAD", .blob = full, .body_len = -1};
	struct az_call c = {0};
	int rc = perform(a, &r, &c, err);

	if (rc < 0 && c.reply.h.status == 404)
		rc = kn_errorf(err, KN_ENOTFOUND, "name", "blob %s: not found",
			       name);
	if (rc == 0 && c.reply.h.content_length < 0)
		rc = kn_errorf(err, KN_EIO, "name",
			       "blob %s: the service's Content-Length is not "
			       "a byte count",
			       name);
	if (rc == 0) {
		*size = c.reply.h.content_length;
		if (etag)
			memcpy(etag, c.reply.h.etag, sizeof(c.reply.h.etag));
	}
	call_release(&c);
	return rc;
}

/*
 * A download is a HEAD (size and ETag), then the window cut in parts of
 * block_size, up to `parallel` Range GETs in flight on the multi handle
 * (as the SDKs' max_concurrency), each written with pwrite where it
 * belongs in the temporary file. Every GET carries If-Match with the
 * HEAD's ETag: a blob replaced meanwhile is refused with its name, never
 * stitched from two versions. A part whose connection dies is asked for
 * again from its first missing byte (resumed, not restarted); its
 * retries count only while it makes no progress. A reply must be a 206
 * whose Content-Range is exactly the range asked for, with no byte more:
 * anything else is refused, naming the blob and the range. The SHA-256
 * follows the complete prefix on the hashing thread, so the file is
 * written once and read back from the page cache, never from the disk.
 */
struct az_get {
	struct azure *a;
	const char *full, *name;
	int fd;
	int64_t base;  /* the window's first byte in the blob */
	int64_t total; /* the blob's size */
	char etag[128];
};

struct part {
	CURL *h;
	struct az_get *get;
	int64_t start, len; /* in the window */
	int64_t got;        /* bytes written; kept across retries */
	int64_t got_before; /* got when this attempt began */
	int attempts;       /* in a row without progress */
	int64_t retry_at;
	bool busy, in_multi, checked;
	const char *refused; /* why a reply was refused, or NULL */
	char range[64], expect[96];
	struct az_req req;
	struct az_call call;
};

static size_t on_part_data(char *buf, size_t size, size_t n, void *arg)
{
	struct part *p = arg;
	struct az_reply *r = &p->call.reply;
	size_t len = size * n, done = 0;

	if (r->h.status < 200 || r->h.status >= 300) /* an error's body */
		return kn_buf_append(&r->mem, buf, len) < 0 ? 0 : len;
	if (r->h.status != 206) {
		p->refused = "the whole blob came where a range was asked for";
		return 0;
	}
	if (!p->checked && strcmp(r->h.content_range, p->expect) != 0) {
		p->refused = "the reply's Content-Range is not the range "
			     "asked for";
		return 0;
	}
	p->checked = true;
	if ((int64_t)len > p->len - p->got) {
		p->refused = "more bytes came than the range asked for";
		return 0;
	}
	while (done < len) {
		ssize_t w = pwrite(p->get->fd, buf + done, len - done,
				   (off_t)(p->start + p->got));
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			r->write_errno = errno;
			return 0;
		}
		done += (size_t)w;
		p->got += w;
	}
	return len;
}

/* Send part p's GET for the bytes it still lacks. */
static void part_start(struct part *p)
{
	struct az_get *g = p->get;
	long long first = (long long)(g->base + p->start + p->got);
	long long last = (long long)(g->base + p->start + p->len - 1);

	snprintf(p->range, sizeof(p->range), "bytes=%lld-%lld", first, last);
	snprintf(p->expect, sizeof(p->expect), "bytes %lld-%lld/%lld", first,
		 last, (long long)g->total);
	p->req = (struct az_req){
		.method = "GET",
		.blob = g->full,
		.xms = {{"x-ms-range", p->range}},
		.nx = 1,
		.if_match = g->etag[0] ? g->etag : NULL,
		.body_len = -1,
	};
	call_release(&p->call);
	memset(&p->call.reply, 0, sizeof(p->call.reply));
	kn_buf_init(&p->call.reply.mem, REPLY_MAX);
	p->checked = false;
	p->refused = NULL;
	p->got_before = p->got;
	prepare(g->a, p->h, &p->req, &p->call);
	curl_easy_setopt(p->h, CURLOPT_WRITEFUNCTION, on_part_data);
	curl_easy_setopt(p->h, CURLOPT_WRITEDATA, p);
	curl_multi_add_handle(g->a->multi, p->h);
	p->in_multi = true;
}

/*
 * What a finished attempt of part p means: 1 done, 0 retry later, or
 * the error that ends the download.
 */
static int part_end(struct part *p, CURLcode cc, long status,
		    struct kn_error *err)
{
	struct az_get *g = p->get;
	bool short_reply = cc == CURLE_OK && status == 206;

	p->call.reply.h.status = status;
	if (short_reply && p->got == p->len)
		return 1;
	if (p->refused)
		return kn_errorf(err, KN_EIO, "name", "blob %s: %s: %s",
				 g->name, p->range, p->refused);
	if (cc == CURLE_OK && status >= 200 && status < 300)
		return kn_errorf(err, KN_EIO, "name",
				 "blob %s: %s: HTTP %ld where 206 was due",
				 g->name, p->range, status);
	if (status == 412)
		return kn_errorf(err, KN_ECONFLICT, "name",
				 "blob %s: changed while it was downloaded",
				 g->name);
	if (status == 404)
		return kn_errorf(err, KN_ENOTFOUND, "name",
				 "blob %s: deleted while it was downloaded",
				 g->name);
	if (p->got > p->got_before)
		p->attempts = 0;
	if (!p->call.reply.write_errno && p->attempts < g->a->max_retries &&
	    (short_reply || (cc != CURLE_OK ? transient_curl(cc)
					    : transient_status(status)))) {
		p->retry_at = kn_mono_ms() + backoff_ms(g->a, p->attempts);
		p->attempts++;
		return 0;
	}
	if (short_reply)
		return kn_errorf(err, KN_EUNAVAIL, "name",
				 "blob %s: %s: the reply ended short (after "
				 "%d attempts)",
				 g->name, p->range, p->attempts + 1);
	return call_error(g->a, &p->req, cc, &p->call.reply, p->attempts + 1,
			  err);
}

/* Take in the attempts curl finished; *done counts the parts complete. */
static int parts_reap(struct az_get *g, struct part *parts, int64_t *done,
		      struct kn_error *err)
{
	CURLMsg *msg;
	int left, rc = 0;

	while ((msg = curl_multi_info_read(g->a->multi, &left))) {
		struct part *p = NULL;
		long status = 0;
		int end;

		if (msg->msg != CURLMSG_DONE)
			continue;
		for (int i = 0; i < g->a->parallel; i++)
			if (parts[i].h == msg->easy_handle)
				p = &parts[i];
		curl_multi_remove_handle(g->a->multi, msg->easy_handle);
		p->in_multi = false;
		curl_easy_getinfo(p->h, CURLINFO_RESPONSE_CODE, &status);
		end = part_end(p, msg->data.result, status,
			       rc == 0 ? err : NULL);
		if (end == 1) {
			p->busy = false;
			(*done)++;
		} else if (end < 0 && rc == 0) {
			rc = end;
		}
	}
	return rc;
}

/* The bytes of the window before the first one still missing. */
static int64_t parts_complete(const struct part *parts, int n, int64_t next)
{
	int64_t low = next;

	for (int i = 0; i < n; i++)
		if (parts[i].busy && parts[i].start + parts[i].got < low)
			low = parts[i].start + parts[i].got;
	return low;
}

/* Every part of the window's len bytes, up to `parallel` at once. */
static int get_parts(struct az_get *g, int64_t len, struct file_hash *hash,
		     struct kn_error *err)
{
	struct azure *a = g->a;
	int64_t bs = (int64_t)a->block_size, next = 0, done = 0;
	int64_t nparts = (len + bs - 1) / bs;
	struct part parts[KN_BLOB_MAX_PARALLEL];
	int rc = 0;

	memset(parts, 0, sizeof(parts));
	for (int i = 0; i < a->parallel; i++) {
		parts[i].h = block_handle(a, i);
		parts[i].get = g;
	}
	while (rc == 0 && done < nparts) {
		int64_t now = kn_mono_ms();
		int running = 0;

		for (int i = 0; i < a->parallel && next < len; i++) {
			struct part *p = &parts[i];

			if (p->busy)
				continue;
			p->start = next;
			p->len = len - next < bs ? len - next : bs;
			p->got = 0;
			p->attempts = 0;
			p->busy = true;
			next += p->len;
			part_start(p);
		}
		for (int i = 0; i < a->parallel; i++)
			if (parts[i].busy && !parts[i].in_multi &&
			    parts[i].retry_at <= now)
				part_start(&parts[i]);
		curl_multi_perform(a->multi, &running);
		rc = parts_reap(g, parts, &done, err);
		file_hash_raise(hash, parts_complete(parts, a->parallel, next));
		if (rc == 0 && done < nparts)
			curl_multi_poll(a->multi, NULL, 0, 50, NULL);
	}
	for (int i = 0; i < a->parallel; i++) {
		if (parts[i].in_multi)
			curl_multi_remove_handle(a->multi, parts[i].h);
		call_release(&parts[i].call);
	}
	return rc;
}

/* A temporary file beside path (its directory made): the fd, or -errno. */
static int open_download_temp(const char *path, char **tmp_out)
{
	char *dir = kn_xstrdup(path), *slash = strrchr(dir, '/');
	int fd;

	if (slash && slash != dir) {
		*slash = '\0';
		kn_mkdir_p(dir, 0755);
	}
	free(dir);
	*tmp_out = kn_asprintf("%s.kiln-tmp-XXXXXX", path);
	fd = mkostemp(*tmp_out, O_CLOEXEC);
	if (fd < 0)
		return -errno;
	fchmod(fd, 0644);
	return fd;
}

static int az_get_file(struct kn_blob_store *s, const char *name,
		       const char *path, int64_t offset, int64_t length,
		       char *sha256_hex, struct kn_error *err)
{
	struct azure *a = az_of(s);
	struct az_get g = {.a = a, .name = name, .fd = -1, .base = offset};
	struct file_hash hash;
	char *full = full_name(a, name), *tmp = NULL;
	int64_t len;
	int rc;

	g.full = full;
	rc = head_blob(a, full, name, &g.total, g.etag, err);
	if (rc < 0)
		goto out;
	if (offset > g.total || (offset == g.total && offset > 0)) {
		rc = kn_errorf(err, KN_EINVAL, "offset",
			       "blob %s: range starts past its end", name);
		goto out;
	}
	len = length > 0 && length < g.total - offset ? length
						      : g.total - offset;
	g.fd = open_download_temp(path, &tmp);
	if (g.fd < 0) {
		rc = kn_errorf(err, KN_EIO, "path", "%s: %s", path,
			       strerror(-g.fd));
		goto out;
	}
	file_hash_start(&hash, g.fd, kn_bufpool_get(&s->pool, 0),
			s->pool.size, 0, false);
	rc = len > 0 ? get_parts(&g, len, &hash, err) : 0;
	file_hash_finish(&hash, rc == 0 ? len : 0);
	if (rc == 0 && (hash.rc < 0 || hash.bytes != len))
		rc = kn_errorf(err, KN_EIO, "path", "%s: reading it back: %s",
			       path,
			       hash.rc < 0 ? strerror(-hash.rc) : "short");
	if (rc == 0 && rename(tmp, path) < 0)
		rc = kn_errorf(err, KN_EIO, "path", "%s: %s", path,
			       strerror(errno));
	if (rc == 0 && sha256_hex)
		memcpy(sha256_hex, hash.hex, sizeof(hash.hex));
out:
	if (g.fd >= 0) {
		close(g.fd);
		if (rc < 0)
			unlink(tmp);
	}
	KN_FREE_ALL(tmp, full);
	return rc;
}

static int az_list(struct kn_blob_store *s, const char *prefix,
		   struct kn_blob_list *out, struct kn_error *err)
{
	struct azure *a = az_of(s);
	char *full = full_name(a, prefix), *marker = NULL;
	int rc = 0;

	do {
		struct az_req r = {
			.method = "GET",
			.body_len = -1,
			.query = {{"restype", "container"}, {"comp", "list"}},
			.nq = 2,
		};
		struct az_call c = {0};
		char *next = NULL;

		if (full[0])
			r.query[r.nq++] = (struct kn_kv){"prefix", full};
		if (marker)
			r.query[r.nq++] = (struct kn_kv){"marker", marker};
		rc = perform(a, &r, &c, err);
		if (rc < 0 && container_missing(&c))
			rc = 0; /* no container yet: nothing in it */
		else if (rc == 0)
			rc = kn_azure_parse_list(c.reply.mem.data ? c.reply.mem.data : "",
						 c.reply.mem.len, a->prefix, out,
						 &next, err);
		call_release(&c);
		free(marker);
		marker = next;
	} while (rc == 0 && marker);
	KN_FREE_ALL(marker, full);
	return rc;
}

static int az_del(struct kn_blob_store *s, const char *name,
		  struct kn_error *err)
{
	struct azure *a = az_of(s);
	char *full = full_name(a, name);
	struct az_req r = {.method = "DELETE", .blob = full, .body_len = -1};
	struct az_call c = {0};
	int rc = perform(a, &r, &c, err);

	if (rc < 0 && c.reply.h.status == 404)
		rc = kn_errorf(err, KN_ENOTFOUND, "name", "blob %s: not found",
			       name);
	call_release(&c);
	free(full);
	return rc;
}

static int az_stat(struct kn_blob_store *s, const char *name,
		   struct kn_blob_info *out, struct kn_error *err)
{
	struct azure *a = az_of(s);
	char *full = full_name(a, name);
	int64_t size = 0;
	int rc = head_blob(a, full, name, &size, NULL, err);

	if (rc == 0) {
		out->name = NULL;
		out->size = size;
	}
	free(full);
	return rc;
}

/* ---- staged blocks ---- */

/*
 * A relay's parts go out as blocks of a staging blob as they arrive;
 * at the end one Put Block List commits them and a copy inside the
 * service gives the blob its name: Azure binds uncommitted blocks to
 * the name they were put under, and the final name (a digest) is known
 * only once every byte is in. A staging blob never committed is not
 * listed and the service drops its blocks after a week; one committed
 * is deleted once copied.
 */
static int az_stage_block(struct kn_blob_store *s, const char *stage,
			  int64_t offset, const void *data, size_t len,
			  struct kn_error *err)
{
	struct azure *a = az_of(s);
	char *full = full_name(a, stage);
	char id[BLOCK_ID_LEN];
	struct az_req r = {
		.method = "PUT",
		.blob = full,
		.query = {{"comp", "block"}, {"blockid", id}},
		.nq = 2,
		.content_type = "application/octet-stream",
		.body = data,
		.body_len = (int64_t)len,
	};
	struct az_call c = {0};
	int rc;

	block_id((uint64_t)offset, id);
	rc = perform(a, &r, &c, err);
	if (rc < 0 && container_missing(&c)) {
		rc = create_container(a, err);
		if (rc == 0)
			rc = perform(a, &r, &c, err);
	}
	call_release(&c);
	free(full);
	return rc;
}

/* Longest wait between two looks at a copy the service still runs. */
#define COPY_POLL_MAX_MS 5000

/*
 * Copy Blob of the staging blob `from` to `full`, then Get Blob
 * Properties until the service says the copy ended (within one account
 * it usually has by its answer). The source is named by URL: with
 * Shared Key the request's own signature covers it (same account);
 * with a SAS the source carries the SAS, which must allow reading.
 */
static int copy_blob(struct azure *a, const char *from, const char *full,
		     unsigned flags, struct az_call *c, struct kn_error *err)
{
	char *enc = kn_url_encode(from, 1);
	bool sas = a->sas && a->key_len == 0;
	char *source = kn_asprintf("%s%s/%s/%s%s%s", a->origin, a->path_base,
				   a->container, enc, sas ? "?" : "",
				   sas ? a->sas : "");
	struct az_req r = {
		.method = "PUT",
		.blob = full,
		.xms = {{"x-ms-copy-source", source}},
		.nx = 1,
		.if_none_match = (flags & KN_BLOB_CREATE_ONLY) ? "*" : NULL,
		.body = "",
		.body_len = 0,
	};
	struct az_req look = {.method = "HEAD", .blob = full, .body_len = -1};
	int64_t wait_ms = 100;
	int rc = perform(a, &r, c, err);

	while (rc == 0 && strcmp(c->reply.h.copy_status, "pending") == 0) {
		sleep_ms(wait_ms);
		wait_ms = wait_ms * 2 > COPY_POLL_MAX_MS ? COPY_POLL_MAX_MS
							 : wait_ms * 2;
		rc = perform(a, &look, c, err);
	}
	if (rc == 0 && strcmp(c->reply.h.copy_status, "success") != 0)
		rc = kn_errorf(err, KN_EIO, "name",
			       "the service's copy of staged blocks ended "
			       "\"%s\"", c->reply.h.copy_status);
	OPENSSL_cleanse(source, strlen(source));
	KN_FREE_ALL(source, enc);
	return rc;
}

static int az_stage_commit(struct kn_blob_store *s, const char *stage,
			   const int64_t *offsets, size_t n, const char *name,
			   unsigned flags, struct kn_error *err)
{
	struct azure *a = az_of(s);
	char *from = full_name(a, stage), *full = full_name(a, name);
	struct az_call c = {0};
	struct kn_error left;
	int rc;

	if (n > MAX_BLOCKS) {
		rc = kn_errorf(err, KN_ETOOBIG, "name",
			       "blob %s: %zu staged blocks, more than the %d "
			       "of a blob", name, n, MAX_BLOCKS);
		goto out;
	}
	rc = put_block_list(a, from, (uint32_t)n, offsets, 0, &c, err);
	if (rc < 0)
		goto out;
	rc = conflict_or(copy_blob(a, from, full, flags, &c, err), &c, name,
			 err);
	/* Copied or not, the staging blob has done its work. */
	if (az_del(s, stage, &left) < 0)
		kn_log(KN_LOG_WARN, "staging blob %s left in the store: %s",
		       stage, left.message);
out:
	call_release(&c);
	KN_FREE_ALL(from, full);
	return rc;
}

static void az_free(struct kn_blob_store *s)
{
	struct azure *a = s->impl;
	if (!a)
		return;
	for (int i = 0; i < KN_BLOB_MAX_PARALLEL; i++)
		if (a->block_easy[i])
			curl_easy_cleanup(a->block_easy[i]);
	if (a->multi)
		curl_multi_cleanup(a->multi);
	if (a->easy)
		curl_easy_cleanup(a->easy);
	OPENSSL_cleanse(a->key, sizeof(a->key));
	if (a->sas)
		OPENSSL_cleanse(a->sas, strlen(a->sas));
	KN_FREE_ALL(a->sas, a->origin, a->path_base, a->account, a->container,
		    a->prefix, a->version, a);
}

const struct kn_blob_store_ops kn_azure_store_ops = {
	.scheme = "azure",
	/* One file at a time: its blocks already go in parallel, and the
	 * store's handles and buffers serve one call at a time. */
	.concurrency = 1,
	.put_file = az_put_file,
	.put_bytes = az_put_bytes,
	.get_file = az_get_file,
	.list = az_list,
	.del = az_del,
	.stat = az_stat,
	.stage_block = az_stage_block,
	.stage_commit = az_stage_commit,
	.local_path = NULL, /* blobs live in the service */
	.sync = NULL, /* a write is durable once the service answers it */
	.free = az_free,
};
