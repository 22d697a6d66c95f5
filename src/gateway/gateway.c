/*
 * The gateway object: where the route table comes from, where counters
 * are kept, and the workers' lifecycle.
 *
 * The main thread runs a kiln loop that only does slow things: polling
 * the server's GET /v1/gateway/config, writing the last good table to
 * $KILN_HOME/gateway/routes.json, saving the counters at most once a
 * second, and the signals. Workers pick up a new table by comparing a
 * sequence number on each request (one atomic load) and taking a
 * reference under cfg_lock only when it moved.
 *
 * Without the server at start the gateway serves the saved table; with
 * neither it starts empty (every model is unknown) and keeps polling, so
 * that starting the gateway before the server is not an error.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/thread.h>

#include "gateway/internal.h"

/* The first fetch at start waits at most this long for the server. */
#define FIRST_FETCH_TIMEOUT_MS 3000
#define FETCH_TIMEOUT_MS 5000
#define SAVE_INTERVAL_MS 1000
/* Traffic goes to the server with each poll, at most this often. */
#define REPORT_MIN_MS 1000
#define COUNTERS_MAX_BYTES (64 * 1024 * 1024)

struct kn_gw_config *gw_current_config(struct kn_gateway *gw)
{
	struct kn_gw_config *cfg;

	pthread_mutex_lock(&gw->cfg_lock);
	cfg = kn_gw_config_ref(gw->cfg);
	pthread_mutex_unlock(&gw->cfg_lock);
	return cfg;
}

static void install_config(struct kn_gateway *gw, struct kn_gw_config *cfg)
{
	struct kn_gw_config *old;

	pthread_mutex_lock(&gw->cfg_lock);
	old = gw->cfg;
	gw->cfg = cfg;
	pthread_mutex_unlock(&gw->cfg_lock);
	__atomic_add_fetch(&gw->cfg_seq, 1, __ATOMIC_RELEASE);
	kn_gw_config_unref(old);
}

/*
 * Take a fetched or read document: parse it, install it, and (from the
 * server) keep it on disk. A bad one leaves everything as it was.
 */
static int take_document(struct kn_gateway *gw, const char *text, size_t len,
			 bool save, struct kn_error *err)
{
	struct kn_gw_config *cfg;
	int rc;

	if (gw->last_text && strlen(gw->last_text) == len &&
	    !memcmp(gw->last_text, text, len))
		return 0;
	if ((rc = kn_gw_config_parse_text(text, len, &cfg, err)) < 0)
		return rc;
	install_config(gw, cfg);
	free(gw->last_text);
	gw->last_text = kn_xmalloc(len + 1);
	memcpy(gw->last_text, text, len);
	gw->last_text[len] = '\0';
	if (save && (rc = kn_write_file_atomic(gw->routes_path, text, len,
					       0600)) < 0)
		kn_log(KN_LOG_WARN, "gateway: cannot save %s: %s",
		       gw->routes_path, strerror(-rc));
	return 0;
}

/* ---- polling the server ---- */

static void poll_again(struct kn_gateway *gw)
{
	if (gw->poll_timer)
		kn_timer_arm(gw->poll_timer, gw->opts.refresh_ms);
}

static void fetched(int status, const char *body, size_t len,
		    const char *error, void *arg)
{
	struct kn_gateway *gw = arg;
	struct kn_error err;
	char why[1024];

	gw->poll_in_flight = false;
	why[0] = '\0';
	if (status == 200) {
		if (take_document(gw, body, len, true, &err) < 0)
			snprintf(why, sizeof(why),
				 "the server's gateway config is not usable, "
				 "keeping the previous one: %.700s",
				 err.message);
	} else if (status == 0) {
		snprintf(why, sizeof(why), "cannot reach %s: %s", gw->server,
			 error ? error : "no answer");
	} else {
		snprintf(why, sizeof(why),
			 "GET %s/v1/gateway/config answered %d: %.200s",
			 gw->server, status, body ? body : "");
	}
	/* Say it once when it starts and once when it ends, not every poll. */
	if (why[0] && strcmp(why, gw->poll_problem)) {
		kn_log(KN_LOG_WARN, "gateway: %s", why);
		kn_strlcpy(gw->poll_problem, why, sizeof(gw->poll_problem));
	} else if (!why[0] && gw->poll_problem[0]) {
		kn_log(KN_LOG_INFO, "gateway: config from %s again",
		       gw->server);
		gw->poll_problem[0] = '\0';
	}
	gw->first_fetch_done = true;
	if (gw->first_fetch_waiting)
		kn_loop_stop(gw->loop);
	else
		poll_again(gw);
}

static int start_fetch(struct kn_gateway *gw, int64_t timeout_ms)
{
	char *url = kn_asprintf("%s/v1/gateway/config", gw->server);
	char *auth = gw->token ? kn_asprintf("Authorization: Bearer %s",
					     gw->token)
			       : NULL;
	const char *headers[] = {auth, NULL};
	int rc = kn_http_fetch(gw->loop, "GET", url, headers, NULL, timeout_ms,
			       fetched, gw);

	if (rc == 0)
		gw->poll_in_flight = true;
	KN_FREE_ALL(url, auth);
	return rc;
}

static void poll_tick(void *arg)
{
	struct kn_gateway *gw = arg;

	if (!gw->poll_in_flight && start_fetch(gw, FETCH_TIMEOUT_MS) < 0)
		poll_again(gw);
}

/* POST the JSON body to the server's path with the gateway's token:
   0, or -errno when it cannot be sent (done is not called then). */
static int post_to_server(struct kn_gateway *gw, const char *path,
			  const char *body, kn_http_fetch_cb done)
{
	char *url = kn_asprintf("%s%s", gw->server, path);
	char *auth = gw->token ? kn_asprintf("Authorization: Bearer %s",
					     gw->token)
			       : NULL;
	const char *headers[] = {"Content-Type: application/json", auth, NULL};
	int rc = kn_http_fetch(gw->loop, "POST", url, headers, body,
			       FETCH_TIMEOUT_MS, done, gw);

	KN_FREE_ALL(url, auth);
	return rc;
}

/* ---- traffic reports ---- */

static int64_t report_period_ms(const struct kn_gateway *gw)
{
	return gw->opts.refresh_ms > REPORT_MIN_MS ? gw->opts.refresh_ms
						   : REPORT_MIN_MS;
}

static void report_sent(int status, const char *body, size_t len,
			const char *error, void *arg)
{
	struct kn_gateway *gw = arg;

	(void)len;
	/* Once per change of problem, as for polling. */
	if ((status < 200 || status > 299) && !gw->report_problem) {
		kn_log(KN_LOG_WARN, "gateway: reporting traffic to %s failed: "
		       "%d %.200s", gw->server, status,
		       status ? (body ? body : "") : error ? error : "");
		gw->report_problem = true;
	} else if (status >= 200 && status <= 299) {
		gw->report_problem = false;
	}
	kn_timer_arm(gw->report_timer, report_period_ms(gw));
}

/*
 * Every deployment's counters and latency histogram to the server's
 * /v1/gateway/metrics, which keeps them over a window for the API and
 * the console; one report in flight at a time.
 */
static void report_tick(void *arg)
{
	struct kn_gateway *gw = arg;
	json_t *doc = gw_metrics_report(gw->metrics);
	char *body;

	json_object_set_new(doc, "instance", json_string(gw->instance));
	json_object_set_new(doc, "uptime_ms",
			    json_integer(kn_now_ms() - gw->started_ms));
	body = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	if (post_to_server(gw, "/v1/gateway/metrics", body, report_sent) < 0)
		kn_timer_arm(gw->report_timer, report_period_ms(gw));
	free(body);
}

/* ---- anomalies ---- */

static void alert_sent(int status, const char *body, size_t len,
		       const char *error, void *arg)
{
	(void)body;
	(void)len;
	(void)arg;
	if (status < 200 || status > 299)
		kn_log(KN_LOG_WARN, "gateway: reporting an anomaly to the "
		       "server failed: %s",
		       status ? "the server refused it" : error ? error : "");
}

/*
 * Each alert goes to the log and, with a server, to its
 * /v1/gateway/alerts: from there to `kiln alerts`, the event stream and
 * the alert webhook.
 */
static void report_anomaly(struct kn_gateway *gw,
			   const struct kn_anomaly_alert *a)
{
	char *body;
	json_t *doc;

	if (a->resolved)
		kn_log(KN_LOG_INFO,
		       "gateway: anomaly resolved: deployment %s: %s %.4g back "
		       "in its band [%.4g, %.4g]",
		       a->deployment, a->signal, a->value, a->low, a->high);
	else
		kn_log(KN_LOG_WARN,
		       "gateway: anomaly: deployment %s: %s %.4g outside its "
		       "band [%.4g, %.4g] for %d windows of %lld ms",
		       a->deployment, a->signal, a->value, a->low, a->high,
		       a->windows, (long long)a->window_ms);
	if (!gw->server)
		return;
	doc = json_pack("{s:s, s:s, s:f, s:f, s:f, s:f, s:I, s:s}",
			"deployment", a->deployment, "signal", a->signal,
			"value", a->value, "low", a->low, "high", a->high,
			"window_s", (double)a->window_ms / 1000.0,
			"started_at_ms", (json_int_t)a->started_at_ms, "state",
			a->resolved ? "resolved" : "firing");
	body = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	if (post_to_server(gw, "/v1/gateway/alerts", body, alert_sent) < 0)
		kn_log(KN_LOG_WARN, "gateway: cannot report an anomaly to %s",
		       gw->server);
	free(body);
}

static int64_t anomaly_period_ms(const struct kn_gateway *gw)
{
	int64_t w = gw->opts.anomaly_window_ms;

	return w / 2 < 50 ? 50 : w / 2 > 1000 ? 1000 : w / 2;
}

static void anomaly_tick(void *arg)
{
	struct kn_gateway *gw = arg;
	struct kn_anomaly_alert alerts[16];
	size_t n;

	do {
		n = kn_anomaly_poll(gw->anomaly, kn_now_ms(), alerts, 16);
		for (size_t i = 0; i < n; i++)
			report_anomaly(gw, &alerts[i]);
	} while (n == 16);
	kn_timer_arm(gw->anomaly_timer, anomaly_period_ms(gw));
}

/* Put "path: " before err's message (err must be set). */
static int prefix_error(struct kn_error *err, const char *path)
{
	struct kn_error inner = *err;

	return kn_errorf(err, inner.code, inner.field[0] ? inner.field : NULL,
			 "%s: %s", path, inner.message);
}

/* ---- counters ---- */

static void save_counters(struct kn_gateway *gw)
{
	json_t *doc;
	char *text;
	int rc;

	pthread_mutex_lock(&gw->lim_lock);
	doc = kn_gw_limiter_dirty(gw->limiter) ? kn_gw_limiter_save(gw->limiter)
					       : NULL;
	pthread_mutex_unlock(&gw->lim_lock);
	if (!doc)
		return;
	text = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	if ((rc = kn_write_file_atomic(gw->counters_path, text, strlen(text),
				       0600)) < 0)
		kn_log(KN_LOG_WARN, "gateway: cannot save %s: %s",
		       gw->counters_path, strerror(-rc));
	free(text);
}

static void save_tick(void *arg)
{
	struct kn_gateway *gw = arg;

	save_counters(gw);
	kn_timer_arm(gw->save_timer, SAVE_INTERVAL_MS);
}

static int load_counters(struct kn_gateway *gw, struct kn_error *err)
{
	char *text = NULL;
	size_t len;
	json_error_t jerr;
	json_t *doc;
	int rc = kn_read_file(gw->counters_path, COUNTERS_MAX_BYTES, &text,
			      &len);

	if (rc == -ENOENT)
		return 0;
	if (rc < 0)
		return kn_errorf(err, KN_EIO, NULL, "%s: %s", gw->counters_path,
				 strerror(-rc));
	doc = json_loadb(text, len, 0, &jerr);
	free(text);
	if (!doc)
		return kn_errorf(err, KN_EINVAL, NULL, "%s:%d:%d: %s",
				 gw->counters_path, jerr.line, jerr.column,
				 jerr.text);
	rc = kn_gw_limiter_load(gw->limiter, doc, err);
	json_decref(doc);
	return rc < 0 ? prefix_error(err, gw->counters_path) : 0;
}

/* ---- start ---- */

static int load_file(struct kn_gateway *gw, const char *path, bool save,
		     struct kn_error *err)
{
	char *text = NULL;
	size_t len;
	int rc = kn_read_file(path, KN_GW_CONFIG_MAX_BYTES, &text, &len);

	if (rc < 0)
		return kn_errorf(err, rc == -ENOENT ? KN_ENOTFOUND : KN_EIO,
				 NULL, "%s: %s", path, strerror(-rc));
	rc = take_document(gw, text, len, save, err);
	free(text);
	return rc < 0 ? prefix_error(err, path) : 0;
}

/*
 * TLS both ways: the front's certificate (plain HTTP only on loopback,
 * unless insecure), and what the route fetch trusts and shows.
 */
static int tls_start(struct kn_gateway *gw,
		     const struct kn_gateway_options *opts,
		     struct kn_error *err)
{
	struct kn_tls_files files = {.cert = opts->tls_cert,
				     .key = opts->tls_key};
	int rc;

	if (!opts->tls_cert != !opts->tls_key)
		return kn_errorf(err, KN_EINVAL, "tls-cert",
				 "tls-cert and tls-key go together");
	rc = kn_tls_listen_check(gw->host, opts->tls_cert, opts->insecure,
				 err);
	if (rc == 0 && opts->tls_cert)
		rc = kn_tls_new(&files, &gw->tls, err);
	if (rc == 0 && gw->tls &&
	    !(gw->tls_watch = kn_tls_watch_new(gw->loop, gw->tls, "gateway",
					       KN_TLS_WATCH_MS)))
		rc = kn_errorf(err, KN_EIO, NULL,
			       "cannot watch the TLS certificate");
	if (rc == 0 && (opts->server_ca || opts->client_cert))
		rc = kn_loop_client_tls(gw->loop, opts->server_ca,
					opts->client_cert, opts->client_key,
					err);
	return rc;
}

/* The table served before any is known: no deployments, no keys. */
#define EMPTY_ROUTES "{\"generation\":0,\"deployments\":[],\"keys\":[]}"

static int first_config(struct kn_gateway *gw, struct kn_error *err)
{
	struct kn_gw_config *empty;
	int rc;

	if (gw->routes_file)
		return load_file(gw, gw->routes_file, false, err);
	gw->first_fetch_waiting = true;
	if (start_fetch(gw, FIRST_FETCH_TIMEOUT_MS) < 0)
		return kn_errorf(err, KN_EINVAL, "server",
				 "server: \"%s\" is not an http:// or "
				 "https:// URL",
				 gw->server);
	while (!gw->first_fetch_done)
		if (kn_loop_run(gw->loop) < 0)
			return kn_errorf(err, KN_EIO, NULL,
					 "the control loop broke");
	gw->first_fetch_waiting = false;
	if (gw->cfg)
		return 0;
	rc = load_file(gw, gw->routes_path, false, err);
	if (rc == 0) {
		kn_log(KN_LOG_WARN,
		       "gateway: serving the saved routes in %s until the "
		       "server answers",
		       gw->routes_path);
		return 0;
	}
	if (rc != -ENOENT)
		return rc;
	kn_log(KN_LOG_WARN, "gateway: no routes yet (no server answer, no "
			    "saved copy); polling");
	rc = kn_gw_config_parse_text(EMPTY_ROUTES, sizeof(EMPTY_ROUTES) - 1,
				     &empty, err);
	if (rc < 0)
		return rc;
	install_config(gw, empty);
	return 0;
}

static void on_stop(void *arg)
{
	kn_loop_stop(arg);
}

static char *dup_or_null(const char *s)
{
	return s ? kn_xstrdup(s) : NULL;
}

/* The options with their defaults, the files under the home, and the
   counters' instance name. */
static void gateway_fill(struct kn_gateway *gw,
			 const struct kn_gateway_options *opts)
{
	unsigned char id[8];

	gw->opts = *opts;
	gw->lock_fd = -1;
	gw->host = kn_xstrdup(opts->host);
	gw->zone = dup_or_null(opts->zone);
	gw->routes_file = dup_or_null(opts->routes_file);
	gw->server = dup_or_null(opts->server);
	gw->token = dup_or_null(opts->token);
	gw->opts.zone = gw->zone;
	if (gw->opts.head_timeout_ms <= 0)
		gw->opts.head_timeout_ms = 10000;
	if (gw->opts.body_idle_ms <= 0)
		gw->opts.body_idle_ms = 30000;
	if (gw->opts.max_conns <= 0)
		gw->opts.max_conns = 4096;
	if (gw->opts.max_conns_per_client <= 0)
		gw->opts.max_conns_per_client = 256;
	gw->log_fd = STDERR_FILENO;
	gw->dir = kn_asprintf("%s/gateway", opts->home);
	gw->routes_path = kn_asprintf("%s/routes.json", gw->dir);
	gw->counters_path = kn_asprintf("%s/counters.json", gw->dir);
	gw->url_path = kn_asprintf("%s/gateway.url", gw->dir);
	pthread_mutex_init(&gw->cfg_lock, NULL);
	pthread_mutex_init(&gw->lim_lock, NULL);
	pthread_mutex_init(&gw->log_lock, NULL);
	gw->limiter = kn_gw_limiter_new();
	gw->metrics = gw_metrics_new();
	gw->started_ms = kn_now_ms();
	/* Counters start at zero under a new name at each start. */
	if (kn_random_bytes(id, sizeof(id)) < 0)
		memcpy(id, &gw->started_ms, sizeof(id));
	for (size_t i = 0; i < sizeof(id); i++)
		snprintf(gw->instance + 2 * i, 3, "%02x", id[i]);
}

static int anomaly_start(struct kn_gateway *gw,
			 const struct kn_gateway_options *opts,
			 struct kn_error *err)
{
	struct kn_anomaly_config acfg;

	kn_anomaly_config_default(&acfg);
	if (opts->anomaly_window_ms > 0)
		acfg.window_ms = opts->anomaly_window_ms;
	gw->opts.anomaly_window_ms = acfg.window_ms;
	gw->anomaly = kn_anomaly_new(&acfg);
	return gw->anomaly ? 0 : kn_anomaly_config_check(&acfg, err);
}

static int access_log_open(struct kn_gateway *gw, const char *path,
			   struct kn_error *err)
{
	if (!path)
		return 0;
	gw->log_fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC,
			  0600);
	if (gw->log_fd < 0) {
		gw->log_fd = STDERR_FILENO;
		return kn_errorf(err, KN_EIO, "access-log", "%s: %s", path,
				 strerror(errno));
	}
	gw->own_log_fd = true;
	return 0;
}

/* One listening socket per worker on the same address, each worker
   started; then the address the gateway serves, in gateway.url. */
static int workers_start(struct kn_gateway *gw, int workers, int port,
			 struct kn_error *err)
{
	char *line;
	int rc, fd;

	gw->workers = kn_xcalloc((size_t)workers, sizeof(*gw->workers));
	for (int i = 0; i < workers; i++) {
		if ((fd = kn_http_listen(gw->host, &port, true, err)) < 0)
			return fd;
		if (!(gw->workers[i] = gw_worker_new(gw, i, fd, err)))
			return -EIO;
		gw->n_workers++;
	}
	for (int i = 0; i < gw->n_workers; i++)
		if ((rc = gw_worker_start(gw->workers[i])) < 0)
			return kn_errorf(err, KN_EIO, NULL,
					 "cannot start worker %d: %s", i,
					 strerror(-rc));
	gw->port = port;
	snprintf(gw->url, sizeof(gw->url), "%s://%s%s%s:%d",
		 gw->tls ? "https" : "http", strchr(gw->host, ':') ? "[" : "",
		 gw->host,
		 strchr(gw->host, ':') ? "]" : "", port);
	line = kn_asprintf("%s\n", gw->url);
	rc = kn_write_file_replace(gw->url_path, line, strlen(line), 0644);
	free(line);
	if (rc < 0)
		return kn_errorf(err, KN_EIO, NULL, "%s: %s", gw->url_path,
				 strerror(-rc));
	return 0;
}

int kn_gateway_new(const struct kn_gateway_options *opts,
		   struct kn_gateway **out, struct kn_error *err)
{
	struct kn_gateway *gw = kn_xcalloc(1, sizeof(*gw));
	int rc;

	evthread_use_pthreads();
	/* A client or model server that went away must cost a write's
	 * EPIPE, not the process. */
	signal(SIGPIPE, SIG_IGN);
	gateway_fill(gw, opts);
	if ((rc = anomaly_start(gw, opts, err)) < 0)
		goto fail;
	gw->loop = kn_loop_new();
	if (!gw->routes_file && !gw->server) {
		rc = kn_errorf(err, KN_EINVAL, "server",
			       "no route table: pass --routes FILE or a "
			       "server to poll");
		goto fail;
	}
	/* Before its counters and routes are read: two gateways on one
	   home would overwrite each other's. */
	if ((gw->lock_fd = kn_dir_lock(gw->dir, "gateway.lock", "gateway",
				       "the gateway's --home", err)) < 0) {
		rc = gw->lock_fd;
		goto fail;
	}
	if ((rc = access_log_open(gw, opts->access_log, err)) < 0 ||
	    (rc = tls_start(gw, opts, err)) < 0 ||
	    (rc = load_counters(gw, err)) < 0 ||
	    (rc = first_config(gw, err)) < 0 ||
	    (rc = workers_start(gw, opts->workers, opts->port, err)) < 0)
		goto fail;
	if (gw->server) {
		gw->poll_timer = kn_timer_new(gw->loop, poll_tick, gw);
		poll_again(gw);
		gw->report_timer = kn_timer_new(gw->loop, report_tick, gw);
		kn_timer_arm(gw->report_timer, report_period_ms(gw));
	}
	gw->save_timer = kn_timer_new(gw->loop, save_tick, gw);
	kn_timer_arm(gw->save_timer, SAVE_INTERVAL_MS);
	gw->anomaly_timer = kn_timer_new(gw->loop, anomaly_tick, gw);
	kn_timer_arm(gw->anomaly_timer, anomaly_period_ms(gw));
	kn_loop_on_signal(gw->loop, SIGTERM, on_stop, gw->loop);
	kn_loop_on_signal(gw->loop, SIGINT, on_stop, gw->loop);
	*out = gw;
	return 0;
fail:
	kn_gateway_free(gw);
	return rc;
}

const char *kn_gateway_url(const struct kn_gateway *gw)
{
	return gw->url;
}

int kn_gateway_run(struct kn_gateway *gw)
{
	int rc = kn_loop_run(gw->loop);

	/* Stop serving before the last save, so no count is lost. */
	for (int i = 0; i < gw->n_workers; i++) {
		gw_worker_free(gw->workers[i]);
		gw->workers[i] = NULL;
	}
	gw->n_workers = 0;
	save_counters(gw);
	unlink(gw->url_path);
	return rc < 0 ? -EIO : 0;
}

void kn_gateway_free(struct kn_gateway *gw)
{
	if (!gw)
		return;
	for (int i = 0; i < gw->n_workers; i++)
		gw_worker_free(gw->workers[i]);
	free(gw->workers);
	kn_timer_free(gw->poll_timer);
	kn_timer_free(gw->save_timer);
	kn_timer_free(gw->anomaly_timer);
	kn_timer_free(gw->report_timer);
	kn_tls_watch_free(gw->tls_watch);
	if (gw->loop)
		kn_loop_free(gw->loop);
	kn_tls_free(gw->tls);
	kn_gw_config_unref(gw->cfg);
	kn_gw_limiter_free(gw->limiter);
	gw_metrics_free(gw->metrics);
	kn_anomaly_free(gw->anomaly);
	pthread_mutex_destroy(&gw->cfg_lock);
	pthread_mutex_destroy(&gw->lim_lock);
	pthread_mutex_destroy(&gw->log_lock);
	if (gw->own_log_fd)
		close(gw->log_fd);
	KN_FREE_ALL(gw->last_text, gw->host, gw->zone, gw->routes_file,
		    gw->server, gw->token, gw->dir, gw->routes_path,
		    gw->counters_path, gw->url_path);
	if (gw->lock_fd >= 0)
		close(gw->lock_fd);
	free(gw);
}
