/*
 * The gateway's workers: each a thread with its own event base, its own
 * HTTP server (front.c) on its own SO_REUSEPORT listener, and its own
 * upstream pools, so that the request path takes no lock but the
 * limiter's and the metrics' (both well under a microsecond).
 *
 * A call: authenticate (sha256 of the bearer key against the table's
 * hashes), parse the body's "model", admit against the limits, pick a
 * replica (ready, breaker closed, the gateway's zone first, then fewest
 * outstanding requests), forward on a kept-alive connection. A failure
 * before the upstream answered anything is retried once on another
 * replica; when no replica is left the call goes to the deployment's
 * fallback. Streamed answers are passed on chunk by chunk as they arrive;
 * others are held (bounded) to read their usage before they are sent.
 *
 * Upstream connections (upstream.c) carry one request at a time, so a
 * pool holds as many connections as there are requests in flight to that
 * replica, up to POOL_MAX. Breakers are per worker: a replica that fails
 * is found out by each worker on its own, which costs at most
 * breaker_failures calls per worker.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <openssl/ssl.h>

#include "gateway/internal.h"

/* Connections per replica per worker: bounds sockets, not requests. */
#define POOL_MAX 512
/* A held (not streamed) answer larger than this is refused with 502. */
#define HELD_ANSWER_MAX (64 * 1024 * 1024)
/* An SSE line longer than this cannot carry usage we would read. */
#define SSE_LINE_MAX (1024 * 1024)
/* An access-log line is a few names and numbers; a worker's backlog. */
#define LOG_LINE_MAX (8 * 1024)
#define LOG_BACKLOG_MAX (256 * 1024)
/* Attempts on one deployment: the first and one retry. */
#define ATTEMPTS_MAX 2

struct gw_pool {
	char address[KN_GW_ADDRESS_MAX];
	struct gw_conn **conns; /* calls hold pointers: never moved */
	size_t n_conns;
	/* The connections no call holds, last freed on top: a call takes
	   one without scanning the pool, and the warmest. */
	struct gw_conn **idle;
	size_t n_idle;
	int outstanding;
	/* breaker */
	int failures;         /* consecutive */
	int64_t open_until_ms; /* monotonic; when it may be probed */
	bool probing;         /* a half-open trial is in flight */
};

struct gw_call;

struct gw_worker {
	struct kn_gateway *gw;
	struct event_base *base;
	struct kn_front *front;
	pthread_t thread;
	bool started;
	struct kn_gw_config *cfg;
	unsigned cfg_seq;
	struct gw_pool **pools;
	size_t n_pools, alloc_pools;
	unsigned rr; /* rotates the scan start among equal replicas */
	struct gw_call *calls; /* in flight, for the shutdown */
	struct kn_buf log;          /* access-log lines not written yet */
	struct event *log_event;    /* writes them after the turn's work */
	bool log_scheduled;         /* log_event is active */
	char stamp[32];             /* the access log's last time stamp */
	int64_t stamp_ms;
	/* https replicas' client contexts, one per CA file (ca NULL: the
	   system's CAs; ctx NULL: the file would not load). */
	struct gw_tls_ctx {
		char *ca;
		SSL_CTX *ctx;
	} *tls;
	size_t n_tls;
};

struct gw_call {
	struct gw_worker *w;
	struct gw_call *prev, *next;
	struct kn_front_req *req; /* the client's; NULL once answered or gone */
	struct kn_gw_config *cfg;   /* a reference for the call's life */
	const struct kn_gw_key *key;
	const struct kn_gw_deployment *dep;    /* asked for */
	const struct kn_gw_deployment *target; /* serving: dep or fallback */
	const char *path;
	char *body;
	size_t body_len;
	bool stream_asked;
	char accept[128]; /* the client's Accept, passed on; "" when none */
	int64_t t0_us; /* monotonic */
	int64_t charged_ms; /* wall clock when the limiter was charged, or 0 */
	struct kn_gw_verdict verdict;

	struct gw_pool *pool; /* current attempt */
	struct gw_conn *conn;
	const struct kn_gw_replica *replica;
	struct gw_pool *tried[ATTEMPTS_MAX];
	int attempts;
	bool got_headers, streaming, timed_out, upstream_error;
	const struct gw_headers *up_headers; /* the connection's, until done */
	int status;
	struct evbuffer *held;
	bool held_too_big;
	struct kn_buf sse_line;
	char *usage_line;
	/* What the anomaly detector wants of an answer. */
	struct kn_gw_usage usage;
	double score; /* the x-kiln-score header, NAN when none */
};

/* ---- replies ---- */

/* Put the literal at *p (the caller leaves room). */
static void put_lit(char **p, const char *s, size_t n)
{
	memcpy(*p, s, n);
	*p += n;
}
#define PUT_LIT(p, s) put_lit(p, s, sizeof(s) - 1)

static void put_int(char **p, int64_t v)
{
	if (v < 0)
		*(*p)++ = '-';
	*p = kn_put_uint(*p, v < 0 ? 0 - (uint64_t)v : (uint64_t)v);
}

/* Milliseconds with three decimals, as "%.3f" would put them. */
static void put_ms(char **p, double ms)
{
	int64_t us = ms > 0 ? (int64_t)(ms * 1000.0 + 0.5) : 0;

	put_int(p, us / 1000);
	*(*p)++ = '.';
	*(*p)++ = (char)('0' + us / 100 % 10);
	*(*p)++ = (char)('0' + us / 10 % 10);
	*(*p)++ = (char)('0' + us % 10);
}

static void add_header(struct kn_front_req *req, const char *name,
		       const char *value)
{
	kn_front_req_add_header(req, name, value);
}

static void add_limit_headers(struct kn_front_req *req,
			      const struct kn_gw_verdict *v)
{
	char num[32], *p;

	if (v->limit_requests >= 0) {
		p = num;
		put_int(&p, v->limit_requests);
		*p = '\0';
		add_header(req, "x-ratelimit-limit-requests", num);
	}
	if (v->remaining_requests >= 0) {
		p = num;
		put_int(&p, v->remaining_requests);
		*p = '\0';
		add_header(req, "x-ratelimit-remaining-requests", num);
	}
	if (v->remaining_tokens >= 0) {
		p = num;
		put_int(&p, v->remaining_tokens);
		*p = '\0';
		add_header(req, "x-ratelimit-remaining-tokens", num);
	}
}

/* Send an OpenAI-shaped error: {"error":{"message","type","param","code"}}. */
static void send_error(struct kn_front_req *req, int status,
		       const char *type, const char *code, const char *param,
		       const char *fmt, ...) __attribute__((format(printf, 6, 7)));

static void send_error(struct kn_front_req *req, int status,
		       const char *type, const char *code, const char *param,
		       const char *fmt, ...)
{
	char message[1024];
	json_t *doc;
	char *text;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(message, sizeof(message), fmt, ap);
	va_end(ap);
	doc = json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", message,
			"type", type, "param",
			param ? json_string(param) : json_null(), "code",
			code ? json_string(code) : json_null());
	text = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	add_header(req, "Content-Type", "application/json");
	kn_front_req_reply(req, status, text, strlen(text));
	free(text);
}

/* ---- access log ---- */

/*
 * Put s as a JSON string (or null) at *p, never past end - 1; the line is
 * cut short rather than overflow (names and paths are bounded anyway).
 */
static void put_string(char **p, char *end, const char *s)
{
	char *q = *p;

	if (!s) {
		q += snprintf(q, (size_t)(end - q), "null");
		*p = q < end ? q : end - 1;
		return;
	}
	if (q < end - 1)
		*q++ = '"';
	for (; *s && q < end - 8; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\') {
			*q++ = '\\';
			*q++ = (char)c;
		} else if (c < 0x20) {
			q += snprintf(q, 7, "\\u%04x", c);
		} else {
			*q++ = (char)c;
		}
	}
	if (q < end - 1)
		*q++ = '"';
	*q = '\0';
	*p = q;
}

/* Write the worker's buffered access-log lines, whole, in one go. */
static void log_flush(struct gw_worker *w)
{
	struct kn_gateway *gw = w->gw;
	size_t off = 0;

	if (!w->log.len)
		return;
	pthread_mutex_lock(&gw->log_lock);
	while (off < w->log.len) {
		ssize_t n = write(gw->log_fd, w->log.data + off,
				  w->log.len - off);
		if (n <= 0 && errno != EINTR)
			break; /* nowhere left to say it: the log is where */
		if (n > 0)
			off += (size_t)n;
	}
	pthread_mutex_unlock(&gw->log_lock);
	w->log.len = 0;
	w->log.data[0] = '\0';
}

static void log_flush_cb(evutil_socket_t fd, short what, void *arg)
{
	struct gw_worker *w = arg;

	(void)fd;
	(void)what;
	w->log_scheduled = false;
	log_flush(w);
}

/*
 * One JSON line per request. Lines are gathered while the loop works
 * through what is ready and written by a lowest-priority event after it,
 * so a busy worker pays one write(2) per turn, not one per request.
 */
static void access_log(struct gw_worker *w, int64_t now, const char *key,
		       const char *deployment, const char *replica,
		       const char *path, int status, double latency_ms,
		       const struct kn_gw_usage *usage, double score,
		       const char *fallback)
{
	char line[LOG_LINE_MAX], *p = line, *end = line + sizeof(line) - 2;

	/* The stamp changes once a millisecond at most; format it then. */
	if (now != w->stamp_ms) {
		kn_format_time(now, w->stamp, sizeof(w->stamp));
		w->stamp_ms = now;
	}
	/* Pieces, not one printf: this runs for every request. The stamp
	   and the numbers are bounded; the strings are cut to fit. */
	PUT_LIT(&p, "{\"time\":\"");
	put_lit(&p, w->stamp, strlen(w->stamp));
	PUT_LIT(&p, "\",\"key\":");
	put_string(&p, end - 512, key);
	PUT_LIT(&p, ",\"deployment\":");
	put_string(&p, end - 384, deployment && *deployment ? deployment
							 : NULL);
	PUT_LIT(&p, ",\"replica\":");
	put_string(&p, end - 256, replica);
	PUT_LIT(&p, ",\"path\":");
	put_string(&p, end - 200, path);
	PUT_LIT(&p, ",\"status\":");
	put_int(&p, status);
	PUT_LIT(&p, ",\"latency_ms\":");
	put_ms(&p, latency_ms);
	PUT_LIT(&p, ",\"tokens\":");
	put_int(&p, usage->total_tokens);
	PUT_LIT(&p, ",\"output_tokens\":");
	put_int(&p, usage->completion_tokens);
	if (isnan(score))
		PUT_LIT(&p, ",\"score\":null");
	else
		p += snprintf(p, 48, ",\"score\":%.6g", score);
	if (fallback) {
		PUT_LIT(&p, ",\"fallback\":");
		put_string(&p, end, fallback);
	}
	*p++ = '}';
	*p++ = '\n';
	if (kn_buf_append(&w->log, line, (size_t)(p - line)) < 0) {
		log_flush(w);
		kn_buf_append(&w->log, line, (size_t)(p - line));
	}
	if (!w->log_scheduled) {
		w->log_scheduled = true;
		event_active(w->log_event, EV_TIMEOUT, 0);
	}
}

/* ---- pools and breakers ---- */

static struct gw_pool *pool_find(struct gw_worker *w, const char *address)
{
	for (size_t i = 0; i < w->n_pools; i++)
		if (!strcmp(w->pools[i]->address, address))
			return w->pools[i];
	return NULL;
}

static struct gw_pool *pool_get(struct gw_worker *w, const char *address)
{
	struct gw_pool *p = pool_find(w, address);

	if (p)
		return p;
	if (w->n_pools == w->alloc_pools) {
		w->alloc_pools = w->alloc_pools ? w->alloc_pools * 2 : 8;
		w->pools = kn_xrealloc(w->pools,
				       w->alloc_pools * sizeof(*w->pools));
	}
	p = kn_xcalloc(1, sizeof(*p));
	kn_strlcpy(p->address, address, sizeof(p->address));
	w->pools[w->n_pools++] = p;
	return p;
}

static void pool_free(struct gw_pool *p)
{
	for (size_t i = 0; i < p->n_conns; i++)
		gw_conn_free(p->conns[i]);
	KN_FREE_ALL(p->conns, p->idle, p);
}

static bool breaker_allows(const struct kn_gateway *gw,
			   const struct gw_pool *p, int64_t now)
{
	if (p->failures < gw->opts.breaker_failures)
		return true;
	return now >= p->open_until_ms && !p->probing;
}

static void breaker_success(struct gw_pool *p)
{
	p->failures = 0;
	p->probing = false;
}

/* A failure of c's call to pool p; at the threshold the breaker opens
   (again, when a half-open trial failed), counted for c's target. */
static void breaker_failure(const struct gw_call *c, struct gw_pool *p)
{
	const struct kn_gateway *gw = c->w->gw;

	p->probing = false;
	if (++p->failures >= gw->opts.breaker_failures) {
		p->open_until_ms = kn_mono_ms() + gw->opts.breaker_cooldown_ms;
		gw_metrics_breaker_opened(gw->metrics,
					  c->target ? c->target->name : "");
	}
}

/* The client context for replicas whose certificates chain to ca (NULL:
   the system's CAs), made once per worker; NULL when it cannot load. */
static SSL_CTX *worker_tls(struct gw_worker *w, const char *ca)
{
	struct kn_error err;
	SSL_CTX *ctx;

	for (size_t i = 0; i < w->n_tls; i++)
		if (!ca ? !w->tls[i].ca : w->tls[i].ca && !strcmp(ca, w->tls[i].ca))
			return w->tls[i].ctx;
	ctx = kn_tls_client_ctx(ca, NULL, NULL, &err);
	if (!ctx) /* once per worker: the entry remembers it */
		kn_log(KN_LOG_ERROR, "gateway: ca: %s", err.message);
	w->tls = kn_xrealloc(w->tls, (w->n_tls + 1) * sizeof(*w->tls));
	w->tls[w->n_tls].ca = ca ? kn_xstrdup(ca) : NULL;
	w->tls[w->n_tls++].ctx = ctx;
	return ctx;
}

static struct gw_conn *pool_conn(struct gw_worker *w, struct gw_pool *p,
				 const struct kn_gw_replica *r)
{
	SSL_CTX *tls = NULL;
	struct gw_conn *c;

	if (p->n_idle)
		return p->idle[--p->n_idle];
	if (p->n_conns == POOL_MAX)
		return NULL;
	if (r->tls && !(tls = worker_tls(w, r->ca)))
		return NULL;
	c = gw_conn_new(w->base, r->host, r->port,
			w->gw->opts.upstream_timeout_ms, tls);
	p->conns = kn_xrealloc(p->conns, (p->n_conns + 1) * sizeof(*p->conns));
	p->idle = kn_xrealloc(p->idle, (p->n_conns + 1) * sizeof(*p->idle));
	p->conns[p->n_conns++] = c;
	return c;
}

/* A call is done with conn (it carries no request now). */
static void pool_release(struct gw_pool *p, struct gw_conn *conn)
{
	p->idle[p->n_idle++] = conn;
}

/*
 * Drop pools of addresses no longer in the table once nothing is in
 * flight to them; the rest keep their connections and breakers.
 */
static void pools_prune(struct gw_worker *w)
{
	size_t kept = 0;

	for (size_t i = 0; i < w->n_pools; i++) {
		struct gw_pool *p = w->pools[i];
		bool listed = false;
		for (size_t d = 0; d < w->cfg->n_deployments && !listed; d++) {
			const struct kn_gw_deployment *dep =
				&w->cfg->deployments[d];
			for (size_t r = 0; r < dep->n_replicas && !listed; r++)
				listed = !strcmp(dep->replicas[r].address,
						 p->address);
		}
		if (listed || p->outstanding > 0)
			w->pools[kept++] = p;
		else
			pool_free(p);
	}
	w->n_pools = kept;
}

static void refresh_config(struct gw_worker *w)
{
	unsigned seq = __atomic_load_n(&w->gw->cfg_seq, __ATOMIC_ACQUIRE);

	if (w->cfg && seq == w->cfg_seq)
		return;
	kn_gw_config_unref(w->cfg);
	w->cfg = gw_current_config(w->gw);
	w->cfg_seq = seq;
	pools_prune(w);
}

/* ---- calls ---- */

static void call_free(struct gw_call *c)
{
	KN_DLIST_UNLINK(c->w->calls, c);
	if (c->req)
		kn_front_req_on_gone(c->req, NULL, NULL);
	kn_gw_config_unref(c->cfg);
	free(c->body);
	if (c->held)
		evbuffer_free(c->held);
	kn_buf_release(&c->sse_line);
	KN_FREE_ALL(c->usage_line, c);
}

static void client_gone(void *arg)
{
	struct gw_call *c = arg;

	/* The upstream call runs on and its answer is dropped. */
	c->req = NULL;
}

static int64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static double elapsed_ms(const struct gw_call *c)
{
	return (double)(now_us() - c->t0_us) / 1000.0;
}

/* Log, count and free a call whose answer has gone out (or cannot). */
static void call_finish(struct gw_call *c)
{
	struct kn_gateway *gw = c->w->gw;
	bool fell_back = c->target && c->target != c->dep;
	double ms = elapsed_ms(c);
	/* One reading of the wall clock for the counters, bands and log. */
	int64_t now = c->charged_ms ? c->charged_ms : kn_now_ms();
	struct gw_observation o = {
		.deployment = c->dep ? c->dep->name : "",
		.key = c->key ? c->key->name : "",
		.status = c->status,
		.latency_ms = ms,
		.tokens = c->usage.total_tokens,
		.fallback = fell_back,
		.upstream_error = c->upstream_error,
	};

	gw_metrics_observe(gw->metrics, &o);
	/* What the model did, for its deployment's bands: only calls that
	 * reached a replica (the gateway's own refusals say nothing of it). */
	if (c->target && (c->replica || c->upstream_error))
		kn_anomaly_observe(gw->anomaly, c->target->name, now, ms,
				   c->status >= 500 || c->upstream_error,
				   (double)c->usage.completion_tokens,
				   c->score);
	access_log(c->w, now, c->key ? c->key->name : NULL, o.deployment,
		   c->replica ? c->replica->address : NULL, c->path, c->status,
		   ms, &c->usage, c->score,
		   fell_back ? c->target->name : NULL);
	call_free(c);
}

static void decorate_req(struct gw_call *c, struct kn_front_req *req)
{
	add_limit_headers(req, &c->verdict);
	if (c->target != c->dep)
		add_header(req, "x-kiln-fallback", c->target->name);
}

/* Answer the client with an error and finish the call. */
static void call_fail(struct gw_call *c, int status, const char *type,
		      const char *code, const char *message)
{
	c->status = status;
	if (c->req) {
		struct kn_front_req *req = c->req;
		c->req = NULL;
		decorate_req(c, req);
		send_error(req, status, type, code, NULL, "%s", message);
	}
	call_finish(c);
}

/*
 * The replica of c->target to try next: ready, breaker letting calls
 * through, not tried yet; the gateway's zone first, then the fewest
 * outstanding calls. NULL when none.
 */
static const struct kn_gw_replica *pick(struct gw_call *c,
					struct gw_pool **out_pool)
{
	struct gw_worker *w = c->w;
	const struct kn_gw_deployment *d = c->target;
	const char *zone = w->gw->opts.zone;
	const struct kn_gw_replica *best = NULL;
	struct gw_pool *best_pool = NULL;
	bool best_local = false;
	int64_t now = kn_mono_ms();
	size_t n = d->n_replicas, start = n ? w->rr++ % n : 0;

	for (size_t k = 0; k < n; k++) {
		const struct kn_gw_replica *r = &d->replicas[(start + k) % n];
		struct gw_pool *p;
		bool local, seen = false;

		if (!r->ready)
			continue;
		p = pool_get(w, r->address);
		for (int t = 0; t < c->attempts; t++)
			seen |= c->tried[t] == p;
		if (seen || !breaker_allows(w->gw, p, now))
			continue;
		local = zone && *zone && !strcmp(r->zone, zone);
		if (!best || (local && !best_local) ||
		    (local == best_local &&
		     p->outstanding < best_pool->outstanding)) {
			best = r;
			best_pool = p;
			best_local = local;
		}
	}
	*out_pool = best_pool;
	return best;
}

static void up_headers(void *arg, int status, const struct gw_headers *h);
static void up_body(void *arg, struct evbuffer *piece);
static void up_done(void *arg, enum gw_up_result result);

static const struct gw_up_handler UP_HANDLER = {up_headers, up_body,
						up_done};

/* Send the call's request to its replica on c->conn. 0 or -errno. */
static int send_upstream(struct gw_call *c)
{
	const char *accept = c->accept[0] ? c->accept : NULL;
	int rc;

	c->pool->outstanding++;
	/* Host: the address without its scheme. */
	rc = gw_conn_request(c->conn, c->path,
			     c->replica->address + (c->replica->tls ? 8 : 0),
			     accept, c->body, c->body_len, &UP_HANDLER, c);
	if (rc < 0)
		c->pool->outstanding--;
	return rc;
}

/*
 * Start the next attempt: another replica of the target, else the
 * fallback's, else answer 502 (something failed) or 503 (nothing to try).
 */
static void attempt(struct gw_call *c)
{
	for (;;) {
		struct gw_pool *p = NULL;
		const struct kn_gw_replica *r = NULL;
		char msg[512];

		if (c->attempts < ATTEMPTS_MAX)
			r = pick(c, &p);
		if (r) {
			c->replica = r;
			c->pool = p;
			c->tried[c->attempts++] = p;
			c->got_headers = c->timed_out = false;
			if (p->failures >= c->w->gw->opts.breaker_failures)
				p->probing = true;
			c->conn = pool_conn(c->w, p, r);
			if (!c->conn) /* POOL_MAX in flight: not its fault */
				continue;
			if (send_upstream(c) == 0)
				return;
			pool_release(p, c->conn);
			c->upstream_error = true;
			breaker_failure(c, p);
			continue;
		}
		if (c->target == c->dep && c->dep->fallback[0]) {
			const struct kn_gw_deployment *fb =
				kn_gw_config_deployment(c->cfg,
							c->dep->fallback);
			c->target = fb;
			c->attempts = 0;
			c->replica = NULL;
			continue;
		}
		if (c->upstream_error) {
			snprintf(msg, sizeof(msg),
				 "no replica of deployment \"%s\" answered",
				 c->target->name);
			call_fail(c, 502, "server_error", "upstream_error", msg);
		} else {
			snprintf(msg, sizeof(msg),
				 "deployment \"%s\" has no healthy replica%s",
				 c->dep->name,
				 c->target != c->dep ? ", nor has its fallback"
						     : "");
			call_fail(c, 503, "server_error", "no_healthy_replica",
				  msg);
		}
		return;
	}
}

/* Fields the gateway does not pass on: its own framing and identity. */
static bool hop_by_hop(const char *name)
{
	switch (strlen(name)) {
	case 2: return !strcasecmp(name, "TE");
	case 4: return !strcasecmp(name, "Date");
	case 6: return !strcasecmp(name, "Server");
	case 7: return !strcasecmp(name, "Trailer") ||
		       !strcasecmp(name, "Upgrade");
	case 10: return !strcasecmp(name, "Connection") ||
			!strcasecmp(name, "Keep-Alive");
	case 14: return !strcasecmp(name, "Content-Length");
	case 16: return !strcasecmp(name, "Proxy-Connection");
	case 17: return !strcasecmp(name, "Transfer-Encoding");
	default: return false;
	}
}

static void copy_headers(struct gw_call *c)
{
	const struct gw_headers *h = c->up_headers;

	for (size_t i = 0; i < h->n; i++)
		if (!hop_by_hop(h->names[i]) &&
		    strncasecmp(h->names[i], "x-ratelimit-", 12))
			add_header(c->req, h->names[i], h->values[i]);
}

static void up_headers(void *arg, int status, const struct gw_headers *h)
{
	struct gw_call *c = arg;
	const char *type = gw_headers_get(h, "Content-Type");

	const char *score = gw_headers_get(h, "x-kiln-score");
	char *end;

	c->got_headers = true;
	c->status = status;
	c->up_headers = h;
	if (score) {
		double v = strtod(score, &end);
		c->score = end != score && !*end && isfinite(v) ? v : NAN;
	}
	if (c->status >= 500)
		breaker_failure(c, c->pool);
	else
		breaker_success(c->pool);
	if (c->status == 200 &&
	    (c->stream_asked ||
	     (type && !strncasecmp(type, "text/event-stream", 17)))) {
		c->streaming = true;
		kn_buf_init(&c->sse_line, SSE_LINE_MAX);
		if (c->req) {
			copy_headers(c);
			decorate_req(c, c->req);
			kn_front_req_stream_start(c->req, c->status);
		}
	} else {
		c->held = evbuffer_new();
	}
}

/* Keep the last "data: {...}" line that mentions usage. */
static void sse_scan(struct gw_call *c, const char *p, size_t len)
{
	while (len > 0) {
		const char *nl = memchr(p, '\n', len);
		size_t take = nl ? (size_t)(nl - p) : len;

		if (kn_buf_append(&c->sse_line, p, take) < 0) {
			/* Too long to be a usage line; skip to its end. */
			c->sse_line.len = 0;
			c->sse_line.cap_limit = 0;
		}
		if (nl) {
			const char *line = c->sse_line.data;
			if (line && c->sse_line.cap_limit &&
			    !strncmp(line, "data:", 5) &&
			    strstr(line, "\"usage\"")) {
				free(c->usage_line);
				c->usage_line = kn_xstrdup(line + 5);
			}
			c->sse_line.len = 0;
			if (c->sse_line.data)
				c->sse_line.data[0] = '\0';
			c->sse_line.cap_limit = SSE_LINE_MAX;
			take++;
		}
		p += take;
		len -= take;
	}
}

static void up_body(void *arg, struct evbuffer *piece)
{
	struct gw_call *c = arg;
	size_t len = evbuffer_get_length(piece);

	if (c->streaming) {
		sse_scan(c, (const char *)evbuffer_pullup(piece, -1), len);
		if (c->req)
			kn_front_req_stream_chunk(c->req, piece);
	} else if (c->held && !c->held_too_big) {
		if (evbuffer_get_length(c->held) + len > HELD_ANSWER_MAX)
			c->held_too_big = true;
		else
			evbuffer_add_buffer(c->held, piece);
	}
}

static void up_done(void *arg, enum gw_up_result result)
{
	struct gw_call *c = arg;
	struct kn_gateway *gw = c->w->gw;
	bool failed = result != GW_UP_OK;
	int64_t tokens;

	c->pool->outstanding--;
	pool_release(c->pool, c->conn);
	c->timed_out = result == GW_UP_TIMEOUT;
	if (failed && !c->got_headers) {
		c->upstream_error = true;
		breaker_failure(c, c->pool);
		if (c->timed_out) {
			call_fail(c, 504, "server_error", "upstream_timeout",
				  "the model server did not answer in time");
			return;
		}
		attempt(c);
		return;
	}
	if (c->streaming) {
		if (failed)
			c->upstream_error = true;
		else if (c->usage_line)
			kn_gw_usage_read(c->usage_line, strlen(c->usage_line),
					 &c->usage);
	} else if (!failed && !c->held_too_big) {
		kn_gw_usage_read((const char *)evbuffer_pullup(c->held, -1),
				 evbuffer_get_length(c->held), &c->usage);
	}
	tokens = c->usage.total_tokens;
	/* Streams sent their headers already; others report the charge. */
	if (tokens > 0 || !c->streaming) {
		c->charged_ms = kn_now_ms();
		pthread_mutex_lock(&gw->lim_lock);
		kn_gw_limiter_charge(gw->limiter, c->key, c->dep, tokens,
				     c->charged_ms,
				     c->streaming ? NULL : &c->verdict);
		pthread_mutex_unlock(&gw->lim_lock);
	}
	if (c->streaming) {
		if (c->req) {
			struct kn_front_req *req = c->req;
			c->req = NULL;
			if (failed)
				kn_front_req_stream_abort(req);
			else
				kn_front_req_stream_end(req);
		}
		call_finish(c);
		return;
	}
	if (failed || c->held_too_big) {
		c->upstream_error = true;
		call_fail(c, c->timed_out ? 504 : 502, "server_error",
			  c->timed_out ? "upstream_timeout" : "upstream_error",
			  c->held_too_big ? "the model server's answer is too "
					    "large to pass on"
					  : "the model server's answer was "
					    "cut short");
		return;
	}
	if (c->req) {
		struct kn_front_req *req = c->req;
		/* The connection's headers last until its next request. */
		copy_headers(c);
		decorate_req(c, req);
		c->req = NULL;
		kn_front_req_reply_buffer(req, c->status, c->held);
	}
	call_finish(c);
}

/* ---- the front ---- */

/* The bearer key's entry, or NULL after answering 401. */
static const struct kn_gw_key *authenticate(struct gw_worker *w,
					    struct kn_front_req *req)
{
	const char *h = kn_front_req_header(req, "Authorization");
	const struct kn_gw_key *key = NULL;

	if (h && !strncasecmp(h, "Bearer ", 7)) {
		const char *k = h + 7;
		while (*k == ' ')
			k++;
		key = kn_gw_config_key(w->cfg, k, strlen(k));
	}
	if (!key)
		send_error(req, 401, "invalid_request_error", "invalid_api_key",
			   NULL, h ? "Incorrect API key provided."
				   : "You didn't provide an API key: send "
				     "Authorization: Bearer <key>.");
	return key;
}

static void serve_models(struct gw_worker *w, struct kn_front_req *req,
			 const struct kn_gw_key *key)
{
	json_t *data = json_array(), *doc;
	char *text;

	for (size_t i = 0; i < w->cfg->n_deployments; i++) {
		const struct kn_gw_deployment *d = &w->cfg->deployments[i];
		if (kn_gw_key_allows(key, d->name))
			json_array_append_new(
				data, json_pack("{s:s, s:s, s:i, s:s}", "id",
						d->name, "object", "model",
						"created", 0, "owned_by",
						"kiln"));
	}
	doc = json_pack("{s:s, s:o}", "object", "list", "data", data);
	text = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	add_header(req, "Content-Type", "application/json");
	kn_front_req_reply(req, 200, text, strlen(text));
	free(text);
}

static void serve_metrics(struct gw_worker *w, struct kn_front_req *req)
{
	struct kn_buf text;

	kn_buf_init(&text, 64 * 1024 * 1024);
	gw_metrics_write(w->gw->metrics, &text);
	add_header(req, "Content-Type", "text/plain; version=0.0.4");
	kn_front_req_reply(req, 200, text.data ? text.data : "", text.len);
	kn_buf_release(&text);
}

/* Count and log a request answered without a call upstream. */
static void log_front(struct gw_worker *w, const char *target,
		      const char *key, const char *deployment, int status,
		      int64_t t0_us)
{
	double ms = (double)(now_us() - t0_us) / 1000.0;
	struct gw_observation o = {.deployment = deployment ? deployment : "",
				   .key = key ? key : "",
				   .status = status,
				   .latency_ms = ms};

	gw_metrics_observe(w->gw->metrics, &o);
	struct kn_gw_usage none = {0, 0};

	access_log(w, kn_now_ms(), key, deployment, NULL, target, status, ms,
		   &none, NAN, NULL);
}

static const char *const MODEL_PATHS[] = {"/v1/chat/completions",
					  "/v1/completions", "/v1/embeddings"};

/*
 * A call that passed its checks: kept on the worker's list, admitted by
 * the key's and the deployment's limits (else answered 429 with
 * Retry-After), then sent to a replica.
 */
static void call_start(struct gw_worker *w, struct kn_front_req *req,
		       const struct kn_gw_key *key,
		       const struct kn_gw_deployment *dep, const char *path,
		       bool stream, int64_t t0)
{
	struct kn_gateway *gw = w->gw;
	struct gw_call *c = kn_xcalloc(1, sizeof(*c));
	const char *accept;

	c->w = w;
	c->req = req;
	c->cfg = kn_gw_config_ref(w->cfg);
	c->key = key;
	c->dep = c->target = dep;
	c->path = path;
	c->stream_asked = stream;
	c->score = NAN;
	c->t0_us = t0;
	accept = kn_front_req_header(req, "Accept");
	if (accept)
		kn_strlcpy(c->accept, accept, sizeof(c->accept));
	c->next = w->calls;
	if (w->calls)
		w->calls->prev = c;
	w->calls = c;
	pthread_mutex_lock(&gw->lim_lock);
	kn_gw_limiter_admit(gw->limiter, key, dep, kn_now_ms(), &c->verdict);
	pthread_mutex_unlock(&gw->lim_lock);
	if (!c->verdict.allowed) {
		char retry[32], msg[256];
		bool quota = !strncmp(c->verdict.limit, "quota", 5);
		snprintf(retry, sizeof(retry), "%lld",
			 (long long)c->verdict.retry_after_s);
		add_header(req, "Retry-After", retry);
		snprintf(msg, sizeof(msg),
			 "Rate limit reached for %s (%s); retry after %s s.",
			 dep->name, c->verdict.limit, retry);
		call_fail(c, 429, quota ? "insufficient_quota" : "requests",
			  quota ? "insufficient_quota" : "rate_limit_exceeded",
			  msg);
		return;
	}
	c->body = kn_front_req_take_body(req, &c->body_len);
	kn_front_req_on_gone(req, client_gone, c);
	attempt(c);
}

static void handle(struct kn_front_req *req, void *arg)
{
	struct gw_worker *w = arg;
	const char *method = kn_front_req_method(req);
	char target[256]; /* for the log: the request is freed by its answer */
	size_t qlen, len;
	const char *path = NULL, *body;
	const struct kn_gw_key *key;
	const struct kn_gw_deployment *dep;
	struct kn_gw_body fields;
	int64_t t0 = now_us();
	bool get = !strcmp(method, "GET");

	kn_strlcpy(target, kn_front_req_target(req), sizeof(target));
	qlen = strcspn(target, "?#");
	refresh_config(w);
	if (qlen == 8 && !strncmp(target, "/metrics", 8) && get) {
		/* The metrics name deployments: only for a caller with a key. */
		if (authenticate(w, req))
			serve_metrics(w, req);
		return;
	}
	if (qlen == 10 && !strncmp(target, "/v1/models", 10) && get) {
		key = authenticate(w, req);
		if (key)
			serve_models(w, req, key);
		log_front(w, target, key ? key->name : NULL, NULL,
			  key ? 200 : 401, t0);
		return;
	}
	for (size_t i = 0; i < sizeof(MODEL_PATHS) / sizeof(*MODEL_PATHS); i++)
		if (qlen == strlen(MODEL_PATHS[i]) &&
		    !strncmp(target, MODEL_PATHS[i], qlen))
			path = MODEL_PATHS[i];
	if (!path) {
		send_error(req, 404, "invalid_request_error", "not_found", NULL,
			   "Unknown path: the gateway serves /v1/models, "
			   "/v1/chat/completions, /v1/completions, "
			   "/v1/embeddings and /metrics.");
		log_front(w, target, NULL, NULL, 404, t0);
		return;
	}
	if (strcmp(method, "POST")) {
		send_error(req, 405, "invalid_request_error",
			   "method_not_allowed", NULL, "%s takes POST.", path);
		log_front(w, target, NULL, NULL, 405, t0);
		return;
	}
	if (!(key = authenticate(w, req))) {
		log_front(w, target, NULL, NULL, 401, t0);
		return;
	}
	/* front.c refused bodies over gw->opts.max_body with 413 already. */
	body = kn_front_req_body(req, &len);
	if (kn_gw_body_scan(body, len, &fields) < 0 || !fields.object) {
		if (fields.error[0])
			send_error(req, 400, "invalid_request_error",
				   "invalid_json", NULL,
				   "The request body is not valid JSON: %d:%d: "
				   "%s.",
				   fields.line, fields.column, fields.error);
		else
			send_error(req, 400, "invalid_request_error",
				   "invalid_json", NULL,
				   "The request body must be a JSON object.");
		log_front(w, target, key->name, NULL, 400, t0);
		return;
	}
	if (!fields.model_string) {
		send_error(req, 400, "invalid_request_error", "missing_model",
			   "model",
			   fields.has_model ? "model: must be a string naming a "
					      "deployment."
					    : "model: missing; name the deployment "
					      "to call.");
		log_front(w, target, key->name, NULL, 400, t0);
		return;
	}
	dep = fields.model_cut ? NULL
			       : kn_gw_config_deployment(w->cfg, fields.model);
	if (!dep || !kn_gw_key_allows(key, dep->name)) {
		send_error(req, 404, "invalid_request_error", "model_not_found",
			   "model",
			   "The model `%s%s` does not exist or you do not have "
			   "access to it.",
			   fields.model, fields.model_cut ? "..." : "");
		log_front(w, target, key->name, NULL, 404, t0);
		return;
	}
	call_start(w, req, key, dep, path, fields.stream, t0);
}

/* A request with a body still coming: without a valid key it gets 401
   now, before the gateway keeps any of the body. */
static bool admit(struct kn_front_req *req, void *arg)
{
	struct gw_worker *w = arg;
	char target[256]; /* for the log: the request is freed by its answer */
	int64_t t0 = now_us();

	kn_strlcpy(target, kn_front_req_target(req), sizeof(target));
	refresh_config(w);
	if (authenticate(w, req))
		return true;
	log_front(w, target, NULL, NULL, 401, t0);
	return false;
}

/* ---- lifecycle ---- */

static void *worker_main(void *arg)
{
	struct gw_worker *w = arg;

	event_base_dispatch(w->base);
	return NULL;
}

struct gw_worker *gw_worker_new(struct kn_gateway *gw, int index, int fd,
				struct kn_error *err)
{
	struct gw_worker *w = kn_xcalloc(1, sizeof(*w));
	struct kn_front_options fo = {
		.name = "gateway",
		.max_head = (size_t)gw->opts.max_headers,
		.max_body = (size_t)gw->opts.max_body,
		.head_timeout_ms = gw->opts.head_timeout_ms,
		.body_idle_ms = gw->opts.body_idle_ms,
		.max_conns = gw->opts.max_conns,
		.max_conns_per_client = gw->opts.max_conns_per_client,
		.tls = gw->tls,
		.handler = handle,
		.admit = admit,
		.arg = w,
	};

	w->gw = gw;
	w->base = event_base_new();
	/* Three priorities: connections' events get the middle one, the
	 * access-log writer the last. */
	kn_buf_init(&w->log, LOG_BACKLOG_MAX);
	kn_buf_append(&w->log, "", 0);
	if (w->base && event_base_priority_init(w->base, 3) == 0) {
		w->log_event = event_new(w->base, -1, 0, log_flush_cb, w);
		if (w->log_event)
			event_priority_set(w->log_event, 2);
	}
	if (!w->log_event ||
	    !(w->front = kn_front_new(w->base, fd, &fo))) {
		if (!w->log_event)
			close(fd);
		gw_worker_free(w);
		kn_errorf(err, KN_EIO, NULL,
			  "cannot set up the HTTP server of worker %d", index);
		return NULL;
	}
	refresh_config(w);
	return w;
}

int gw_worker_start(struct gw_worker *w)
{
	int rc = pthread_create(&w->thread, NULL, worker_main, w);

	if (rc)
		return -rc;
	w->started = true;
	return 0;
}

void gw_worker_free(struct gw_worker *w)
{
	if (!w)
		return;
	if (w->started) {
		event_base_loopexit(w->base, NULL);
		pthread_join(w->thread, NULL);
	}
	/* Clients first: their gone callbacks let go of the calls. */
	kn_front_free(w->front);
	for (size_t i = 0; i < w->n_pools; i++)
		pool_free(w->pools[i]);
	free(w->pools);
	while (w->calls) {
		w->calls->req = NULL;
		call_free(w->calls);
	}
	kn_gw_config_unref(w->cfg);
	for (size_t i = 0; i < w->n_tls; i++) {
		SSL_CTX_free(w->tls[i].ctx);
		free(w->tls[i].ca);
	}
	free(w->tls);
	if (w->log.data)
		log_flush(w);
	kn_buf_release(&w->log);
	if (w->log_event)
		event_free(w->log_event);
	if (w->base)
		event_base_free(w->base);
	free(w);
}
