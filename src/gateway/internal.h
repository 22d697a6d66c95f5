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
	const char *key;        /* the caller's key's name, "" without one */
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
/* A replica's breaker opened on a call for deployment. Thread-safe. */
void gw_metrics_breaker_opened(struct gw_metrics *m, const char *deployment);
/* The Prometheus text of everything so far. Thread-safe. */
void gw_metrics_write(struct gw_metrics *m, struct kn_buf *out);
/* {"deployments": [...]}: each deployment's counters and latency
   histogram so far, as the server's /v1/gateway/metrics takes them.
   Thread-safe. */
json_t *gw_metrics_report(struct gw_metrics *m);

/* ---- the gateway (gateway.c) ---- */

struct kn_gateway {
	struct kn_gateway_options opts; /* strings point into owned copies */
	char *host, *zone, *routes_file, *server, *token;
	char *dir;          /* $KILN_HOME/gateway */
	int lock_fd;        /* dir/gateway.lock, held while it runs */
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
	char instance[17];  /* random hex: this run's counters on the server */
	int64_t started_ms; /* when this run started */
	struct kn_timer *report_timer;
	bool report_problem; /* the last report failed (logged once) */
	struct kn_anomaly *anomaly;   /* per-deployment bands; locks itself */
	struct kn_timer *anomaly_timer;
	int log_fd;
	bool own_log_fd;
	pthread_mutex_t log_lock; /* workers' writes to log_fd, whole */

	struct gw_worker **workers;
	int n_workers;

	struct kn_tls *tls;             /* the front's certificate, or NULL */
	struct kn_tls_watch *tls_watch; /* reloads it */
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

/* A connection to host:port (opened on the first request); over TLS
   from tls (a client context, kn_tls_client_ctx) when not NULL. */
struct ssl_ctx_st;
struct gw_conn *gw_conn_new(struct event_base *base, const char *host,
			    int port, int64_t timeout_ms,
			    struct ssl_ctx_st *tls);
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
