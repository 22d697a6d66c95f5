/*
 * What the gateway's files share: the gateway object, the workers, the
 * metrics. Not for use outside src/gateway/.
 */
#ifndef KILN_GATEWAY_INTERNAL_H
#define KILN_GATEWAY_INTERNAL_H

#include <pthread.h>

#include "gateway/gateway.h"
#include "loop/loop.h"

struct gw_worker;

/* ---- metrics (metrics.c) ---- */

struct gw_metrics;

/* What one answered request adds to the metrics. */
struct gw_observation {
	const char *deployment; /* "" when the request named none we know */
	int status;
	double latency_ms;
	int64_t tokens;
	bool fallback;
	bool upstream_error;
};

struct gw_metrics *gw_metrics_new(void);
void gw_metrics_free(struct gw_metrics *m);
/* Thread-safe. */
void gw_metrics_observe(struct gw_metrics *m, const struct gw_observation *o);
/* The Prometheus text of everything so far. Thread-safe. */
void gw_metrics_write(struct gw_metrics *m, struct kn_buf *out);

/* ---- the gateway (gateway.c) ---- */

struct kn_gateway {
	struct kn_gateway_options opts; /* strings point into owned copies */
	char *host, *zone, *routes_file, *server, *token;
	char *dir;          /* $KILN_HOME/gateway */
	char *routes_path;  /* dir/routes.json */
	char *counters_path;
	char *url_path;
	char url[320];
	int port;

	struct kn_loop *loop; /* the control loop: polling, saving, signals */
	struct kn_timer *poll_timer, *save_timer;
	bool poll_in_flight;
	bool first_fetch_waiting, first_fetch_done;
	char poll_problem[1024]; /* the last polling problem logged, or "" */
	char *last_text;        /* the document installed last */

	pthread_mutex_t cfg_lock;
	struct kn_gw_config *cfg; /* under cfg_lock */
	unsigned cfg_seq;         /* atomic: bumped at every swap */

	pthread_mutex_t lim_lock;
	struct kn_gw_limiter *limiter; /* under lim_lock */

	struct gw_metrics *metrics;
	struct kn_anomaly *anomaly;   /* per-deployment bands; locks itself */
	struct kn_timer *anomaly_timer;
	int log_fd;
	bool own_log_fd;
	pthread_mutex_t log_lock; /* workers' writes to log_fd, whole */

	struct gw_worker **workers;
	int n_workers;
};

/* The current table, one reference for the caller. */
struct kn_gw_config *gw_current_config(struct kn_gateway *gw);

/* ---- upstream connections (upstream.c) ---- */

struct evbuffer;
struct event_base;
struct gw_conn;

/* An answer's header fields, pointing into the connection's copy. */
#define GW_HEADERS_MAX 128
struct gw_headers {
	size_t n;
	const char *names[GW_HEADERS_MAX];
	const char *values[GW_HEADERS_MAX];
};
/* A field's value (case-insensitive name), or NULL. */
const char *gw_headers_get(const struct gw_headers *h, const char *name);

enum gw_up_result {
	GW_UP_OK,
	GW_UP_FAILED,  /* no answer (refused, reset, closed, not HTTP) */
	GW_UP_CUT,     /* the answer began and was cut short */
	GW_UP_TIMEOUT, /* nothing for the timeout */
};

/* What a connection reports, on the loop thread, for one request. */
struct gw_up_handler {
	/* The status and headers, once, before any body. */
	void (*headers)(void *arg, int status, const struct gw_headers *h);
	/* A piece of body as it arrives; take it (move or copy) at once. */
	void (*body)(void *arg, struct evbuffer *piece);
	/* The end, always called once; the connection is free again. */
	void (*done)(void *arg, enum gw_up_result result);
};

/* A connection to host:port (opened on the first request). */
struct gw_conn *gw_conn_new(struct event_base *base, const char *host,
			    int port, int64_t timeout_ms);
void gw_conn_free(struct gw_conn *c);
/*
 * POST body (which must outlive the request) to path. Returns 0, and the
 * handler is called with arg; or -errno when the connection cannot be
 * opened, and it is not.
 */
int gw_conn_request(struct gw_conn *c, const char *path,
		    const char *host_header, const char *accept,
		    const char *body, size_t len,
		    const struct gw_up_handler *h, void *arg);

/* ---- the HTTP server side (front.c) ---- */

struct gw_front;
struct gw_req;

/* Called once per request; the request lives until it is answered. */
typedef void (*gw_front_handler)(struct gw_req *r, void *arg);
/*
 * Called when a request with a body has its head in and its body is not
 * all read yet: true to read the body, false when it answered r itself
 * (then the connection closes and the body is never buffered).
 */
typedef bool (*gw_front_admit)(struct gw_req *r, void *arg);
/* The client went away before its answer was done; r is gone. */
typedef void (*gw_front_gone)(void *arg);

struct gw_front_options {
	size_t max_head, max_body; /* else 431, 413 */
	int64_t head_timeout_ms;   /* a whole head must come within this */
	int64_t body_idle_ms;      /* the most time between body bytes */
	int max_conns;             /* open connections, else 503 */
	int max_conns_per_client;  /* of one client address, else 503 */
	gw_front_handler handler;
	gw_front_admit admit;      /* or NULL */
	void *arg;                 /* for handler and admit */
};

/*
 * Serve the listening socket fd (taken over) on base. NULL when libevent
 * refuses.
 */
struct gw_front *gw_front_new(struct event_base *base, int fd,
			      const struct gw_front_options *opts);
/* Close every connection (calling their gone callbacks) and the socket. */
void gw_front_free(struct gw_front *f);

const char *gw_req_method(const struct gw_req *r);
const char *gw_req_target(const struct gw_req *r); /* path and query */
/* A request header (case-insensitive name), or NULL. */
const char *gw_req_header(const struct gw_req *r, const char *name);
/* The body, NUL-terminated (may hold NULs within len). */
const char *gw_req_body(const struct gw_req *r, size_t *len);
/* The body, malloc'd, for the caller to keep; the request has none after. */
char *gw_req_take_body(struct gw_req *r, size_t *len);
/* A header for the answer; one with a line break is dropped. */
void gw_req_add_header(struct gw_req *r, const char *name, const char *value);
/* When the client goes before the answer is done, call cb(arg) once. */
void gw_req_on_gone(struct gw_req *r, gw_front_gone cb, void *arg);
/* Answer whole; r is freed. */
void gw_req_reply(struct gw_req *r, int status, const void *body, size_t len);
void gw_req_reply_buffer(struct gw_req *r, int status, struct evbuffer *body);
/* Answer as a chunked stream: start, chunks (data is taken), end frees r. */
void gw_req_stream_start(struct gw_req *r, int status);
void gw_req_stream_chunk(struct gw_req *r, struct evbuffer *data);
void gw_req_stream_end(struct gw_req *r);
/* A stream whose source broke off: no last chunk, and the connection is
   closed, so the client sees a cut answer, never a complete one. */
void gw_req_stream_abort(struct gw_req *r);

/* The digits of v at p (no NUL); returns the end. No printf per call. */
char *gw_put_uint(char *p, uint64_t v);

/* ---- request framing (framing.c) ---- */

/* What a request head says of its body. */
struct gw_framing {
	bool has_length;   /* Content-Length was given */
	bool chunked;      /* Transfer-Encoding was given */
	uint64_t body_len; /* Content-Length, or 0 */
};

/*
 * Check a whole request head (request line to the empty line, CRLF CRLF
 * included) against the framing rules at the top of framing.c: 0 with
 * *out filled, or the status to refuse it with (400, 411, 505).
 */
int gw_framing_check(const char *head, size_t len, struct gw_framing *out);

/* ---- workers (proxy.c) ---- */

/*
 * A worker on its own thread, serving the listening socket fd (taken
 * over). Returns NULL with err set when libevent refuses.
 */
struct gw_worker *gw_worker_new(struct kn_gateway *gw, int index, int fd,
				struct kn_error *err);
/* Start its thread. 0 or -errno. */
int gw_worker_start(struct gw_worker *w);
/* Ask it to stop, wait for its thread, free everything it holds. */
void gw_worker_free(struct gw_worker *w);

#endif
