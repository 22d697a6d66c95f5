/*
 * loop: libevent behind a small interface. The alternative, calling
 * libevent from every module, would spread its ownership rules (who frees
 * a request, when a connection's close callback runs) over the codebase;
 * here they are kept in one file.
 */
#include "loop/internal.h"
#include "loop.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/util.h>

struct fetch;

struct kn_loop {
	struct event_base *base;
	struct event **signals;
	size_t n_signals;
	struct fetch *fetches;   /* in flight, or done and awaiting free */
	SSL_CTX *client_tls;     /* https fetches' context, or NULL */
	struct event *reap_ev;   /* frees done fetches on the next turn */
};

static void fetches_free(struct kn_loop *loop, bool only_done);

struct kn_timer {
	struct event *ev;
	kn_loop_cb cb;
	void *arg;
};

struct kn_http_server {
	struct event_base *base;
	struct kn_front *front;
	kn_http_handler handler;
	kn_http_admit admit; /* or NULL */
	void *arg;
	struct kn_http_req *streams; /* open, for the caps per owner */
	struct kn_http_req *gone;    /* streams whose client went */
};

struct kn_http_req {
	struct kn_http_server *srv;
	struct kn_front_req *fr; /* NULL once the client is gone */
	char *path;
	struct evkeyvalq query;
	bool bad_query;
	char owner[KN_HTTP_OWNER_MAX]; /* who the streams are counted for */
	bool streaming;
	bool ended; /* the handler ended a stream whose client was gone */
	bool cut_queries; /* a JSON stream: its URLs lose their query */
	kn_loop_cb on_close;
	void *close_arg;
	struct kn_http_req *next_stream; /* in streams or gone */
	struct event *gone_ev;           /* calls on_close on a later turn */
};

struct signal_cb {
	kn_loop_cb cb;
	void *arg;
};

struct kn_loop *kn_loop_new(void)
{
	struct kn_loop *loop = kn_xcalloc(1, sizeof(*loop));

	loop->base = event_base_new();
	if (!loop->base) {
		free(loop);
		return NULL;
	}
	return loop;
}

void kn_loop_free(struct kn_loop *loop)
{
	if (!loop)
		return;
	for (size_t i = 0; i < loop->n_signals; i++) {
		free(event_get_callback_arg(loop->signals[i]));
		event_free(loop->signals[i]);
	}
	fetches_free(loop, false);
	if (loop->reap_ev)
		event_free(loop->reap_ev);
	/* A connection freed while a read it made still waits to be handed
	   on (a stop between the two) is released only when that hand-on
	   runs: give them their turns. Every other event is gone by now. */
	for (int turn = 0; turn < 8 && event_base_get_num_events(
					       loop->base,
					       EVENT_BASE_COUNT_ACTIVE) > 0;
	     turn++)
		event_base_loop(loop->base, EVLOOP_NONBLOCK);
	free(loop->signals);
	SSL_CTX_free(loop->client_tls);
	event_base_free(loop->base);
	free(loop);
}

SSL_CTX **loop_client_ctx(struct kn_loop *loop)
{
	return &loop->client_tls;
}

struct event_base *loop_base(struct kn_loop *loop)
{
	return loop->base;
}

int kn_loop_run(struct kn_loop *loop)
{
	return event_base_dispatch(loop->base) < 0 ? -EIO : 0;
}

void kn_loop_stop(struct kn_loop *loop)
{
	event_base_loopbreak(loop->base);
}

static void timer_fire(evutil_socket_t fd, short what, void *arg)
{
	struct kn_timer *t = arg;
	(void)fd;
	(void)what;
	t->cb(t->arg);
}

struct kn_timer *kn_timer_new(struct kn_loop *loop, kn_loop_cb cb, void *arg)
{
	struct kn_timer *t = kn_xcalloc(1, sizeof(*t));

	t->cb = cb;
	t->arg = arg;
	t->ev = evtimer_new(loop->base, timer_fire, t);
	if (!t->ev) {
		free(t);
		return NULL;
	}
	return t;
}

void kn_timer_arm(struct kn_timer *t, int64_t ms)
{
	struct timeval tv;

	if (ms < 0)
		ms = 0;
	tv.tv_sec = (time_t)(ms / 1000);
	tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
	evtimer_add(t->ev, &tv);
}

bool kn_timer_pending(const struct kn_timer *t)
{
	return evtimer_pending(t->ev, NULL) != 0;
}

void kn_timer_free(struct kn_timer *t)
{
	if (!t)
		return;
	event_free(t->ev);
	free(t);
}

static void signal_fire(evutil_socket_t fd, short what, void *arg)
{
	struct signal_cb *s = arg;
	(void)fd;
	(void)what;
	s->cb(s->arg);
}

int kn_loop_on_signal(struct kn_loop *loop, int signo, kn_loop_cb cb,
		      void *arg)
{
	struct signal_cb *s = kn_xcalloc(1, sizeof(*s));
	struct event *ev;

	s->cb = cb;
	s->arg = arg;
	ev = evsignal_new(loop->base, signo, signal_fire, s);
	if (!ev || evsignal_add(ev, NULL) < 0) {
		if (ev)
			event_free(ev);
		free(s);
		return -EIO;
	}
	loop->signals = kn_xrealloc(loop->signals,
				    (loop->n_signals + 1) * sizeof(ev));
	loop->signals[loop->n_signals++] = ev;
	return 0;
}

/* ---- descriptors ---- */

struct kn_fd_watch {
	struct event *ev;
	kn_loop_cb cb;
	void *arg;
};

static void fd_ready(evutil_socket_t fd, short what, void *arg)
{
	struct kn_fd_watch *w = arg;
	(void)fd;
	(void)what;
	w->cb(w->arg);
}

static struct kn_fd_watch *fd_watch_new(struct kn_loop *loop, int fd,
					short what, kn_loop_cb cb, void *arg)
{
	struct kn_fd_watch *w = kn_xcalloc(1, sizeof(*w));

	w->cb = cb;
	w->arg = arg;
	w->ev = event_new(loop->base, fd, what | EV_PERSIST, fd_ready, w);
	if (!w->ev || event_add(w->ev, NULL) < 0) {
		if (w->ev)
			event_free(w->ev);
		free(w);
		return NULL;
	}
	return w;
}

struct kn_fd_watch *kn_fd_watch_new(struct kn_loop *loop, int fd,
				    kn_loop_cb cb, void *arg)
{
	return fd_watch_new(loop, fd, EV_READ, cb, arg);
}

struct kn_fd_watch *kn_fd_watch_writable_new(struct kn_loop *loop, int fd,
					     kn_loop_cb cb, void *arg)
{
	return fd_watch_new(loop, fd, EV_WRITE, cb, arg);
}

void kn_fd_watch_free(struct kn_fd_watch *w)
{
	if (!w)
		return;
	event_free(w->ev);
	free(w);
}

/* ---- workers ---- */

/*
 * A mutex-guarded queue in, a mutex-guarded queue out, and an eventfd
 * that wakes the loop to deliver finished work: the loop thread never
 * waits on a worker, and workers never touch loop state.
 */
struct work_item {
	void (*work)(void *arg);
	kn_work_done done;
	void *arg;
	struct work_item *next;
};

struct kn_workers {
	pthread_mutex_t lock;
	pthread_cond_t wake;
	struct work_item *todo, **todo_tail;
	struct work_item *finished;
	size_t pending; /* queued + running + finished undelivered */
	bool stopping;
	pthread_t *threads;
	int n_threads;
	int efd;
	struct event *ev;
};

static void *worker_main(void *arg)
{
	struct kn_workers *w = arg;

	pthread_mutex_lock(&w->lock);
	for (;;) {
		struct work_item *it;
		uint64_t one = 1;

		while (!w->todo && !w->stopping)
			pthread_cond_wait(&w->wake, &w->lock);
		if (w->stopping)
			break;
		it = w->todo;
		w->todo = it->next;
		if (!w->todo)
			w->todo_tail = &w->todo;
		pthread_mutex_unlock(&w->lock);
		it->work(it->arg);
		pthread_mutex_lock(&w->lock);
		it->next = w->finished;
		w->finished = it;
		if (write(w->efd, &one, sizeof(one)) < 0) {
			/* The counter cannot overflow here; nothing to do. */
		}
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

static void deliver(struct kn_workers *w, bool ran)
{
	struct work_item *it;

	pthread_mutex_lock(&w->lock);
	it = w->finished;
	w->finished = NULL;
	pthread_mutex_unlock(&w->lock);
	while (it) {
		struct work_item *next = it->next;
		pthread_mutex_lock(&w->lock);
		w->pending--;
		pthread_mutex_unlock(&w->lock);
		it->done(it->arg, ran);
		free(it);
		it = next;
	}
}

static void workers_ready(evutil_socket_t fd, short what, void *arg)
{
	uint64_t count;

	(void)what;
	if (read(fd, &count, sizeof(count)) < 0 && errno != EAGAIN)
		return;
	deliver(arg, true);
}

struct kn_workers *kn_workers_new(struct kn_loop *loop, int threads)
{
	struct kn_workers *w = kn_xcalloc(1, sizeof(*w));

	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->wake, NULL);
	w->todo_tail = &w->todo;
	w->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	w->ev = event_new(loop->base, w->efd, EV_READ | EV_PERSIST,
			  workers_ready, w);
	event_add(w->ev, NULL);
	w->threads = kn_xcalloc((size_t)threads, sizeof(*w->threads));
	for (int i = 0; i < threads; i++)
		if (pthread_create(&w->threads[i], NULL, worker_main, w) == 0)
			w->n_threads++;
	return w;
}

void kn_workers_submit(struct kn_workers *w, void (*work)(void *arg),
		       kn_work_done done, void *arg)
{
	struct work_item *it = kn_xcalloc(1, sizeof(*it));

	it->work = work;
	it->done = done;
	it->arg = arg;
	pthread_mutex_lock(&w->lock);
	*w->todo_tail = it;
	w->todo_tail = &it->next;
	w->pending++;
	pthread_cond_signal(&w->wake);
	pthread_mutex_unlock(&w->lock);
}

size_t kn_workers_pending(const struct kn_workers *w)
{
	size_t n;

	pthread_mutex_lock((pthread_mutex_t *)&w->lock);
	n = w->pending;
	pthread_mutex_unlock((pthread_mutex_t *)&w->lock);
	return n;
}

void kn_workers_free(struct kn_workers *w)
{
	struct work_item *it;

	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	w->stopping = true;
	pthread_cond_broadcast(&w->wake);
	pthread_mutex_unlock(&w->lock);
	for (int i = 0; i < w->n_threads; i++)
		pthread_join(w->threads[i], NULL);
	deliver(w, true);
	it = w->todo;
	while (it) {
		struct work_item *next = it->next;
		it->done(it->arg, false);
		free(it);
		it = next;
	}
	event_free(w->ev);
	close(w->efd);
	pthread_cond_destroy(&w->wake);
	pthread_mutex_destroy(&w->lock);
	KN_FREE_ALL(w->threads, w);
}

/* ---- HTTP ---- */

/*
 * The server is front.c underneath; a kn_http_req wraps one of its
 * requests for as long as a handler holds it. When the client goes first,
 * the wrapper stays (fr NULL) until the handler answers into nothing or,
 * for a stream, until on_close has run on a later turn: a handler may be
 * inside a chunk write when the connection drops, and must not have its
 * state freed under it.
 */
static void req_free(struct kn_http_req *req)
{
	evhttp_clear_headers(&req->query);
	KN_FREE_ALL(req->path, req);
}

static void stream_unlink(struct kn_http_req *req)
{
	struct kn_http_req **p = &req->srv->streams;

	for (; *p; p = &(*p)->next_stream)
		if (*p == req) {
			*p = req->next_stream;
			return;
		}
}

static void gone_unlink(struct kn_http_req *req)
{
	struct kn_http_req **p = &req->srv->gone;

	for (; *p; p = &(*p)->next_stream)
		if (*p == req) {
			*p = req->next_stream;
			break;
		}
	event_free(req->gone_ev);
}

/* A stream whose client went: on_close (unless the handler ended it
   first), then the request is freed. */
static void stream_gone(struct kn_http_req *req)
{
	kn_loop_cb cb = req->ended ? NULL : req->on_close;
	void *cb_arg = req->close_arg;

	gone_unlink(req);
	req_free(req);
	if (cb)
		cb(cb_arg);
}

static void stream_gone_later(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	stream_gone(arg);
}

static void req_gone(void *arg)
{
	struct kn_http_req *req = arg;
	struct timeval now = {0, 0};

	req->fr = NULL;
	if (!req->streaming)
		return; /* the handler's answer frees it */
	stream_unlink(req);
	req->gone_ev = evtimer_new(req->srv->base, stream_gone_later, req);
	req->next_stream = req->srv->gone;
	req->srv->gone = req;
	evtimer_add(req->gone_ev, &now);
}

static struct kn_http_req *req_new(struct kn_http_server *srv,
				   struct kn_front_req *fr)
{
	struct kn_http_req *req = kn_xcalloc(1, sizeof(*req));
	struct evhttp_uri *uri = evhttp_uri_parse(kn_front_req_target(fr));
	const char *raw_path = uri ? evhttp_uri_get_path(uri) : NULL;
	const char *raw_query = uri ? evhttp_uri_get_query(uri) : NULL;

	req->srv = srv;
	req->fr = fr;
	req->query.tqh_first = NULL;
	req->query.tqh_last = &req->query.tqh_first;
	req->path = evhttp_uridecode(raw_path && *raw_path ? raw_path : "/", 0,
				     NULL);
	if (!req->path)
		req->path = kn_xstrdup("/");
	if (!uri || (raw_query &&
		     evhttp_parse_query_str(raw_query, &req->query) < 0))
		req->bad_query = true;
	if (uri)
		evhttp_uri_free(uri);
	kn_front_req_on_gone(fr, req_gone, req);
	return req;
}

/* A request the loop itself refuses: a target it cannot read. */
static bool req_target_ok(struct kn_http_req *req)
{
	struct kn_error err;

	if (!req->bad_query)
		return true;
	kn_errorf(&err, KN_EINVAL, NULL, "malformed request target or query");
	kn_http_reply_error(req, &err);
	return false;
}

static void http_dispatch(struct kn_front_req *fr, void *arg)
{
	struct kn_http_server *srv = arg;
	struct kn_http_req *req = req_new(srv, fr);

	if (req_target_ok(req))
		srv->handler(req, srv->arg);
}

static bool http_admit(struct kn_front_req *fr, void *arg)
{
	struct kn_http_server *srv = arg;
	struct kn_http_req *req;

	if (!srv->admit)
		return true;
	req = req_new(srv, fr);
	if (!req_target_ok(req) || !srv->admit(req, srv->arg))
		return false; /* answered */
	kn_front_req_on_gone(fr, NULL, NULL);
	req_free(req);
	return true;
}

int kn_http_server_new(struct kn_loop *loop, const char *host, int port,
		       const struct kn_http_limits *limits, struct kn_tls *tls,
		       kn_http_handler handler, void *arg,
		       struct kn_http_server **out, int *out_port,
		       struct kn_error *err)
{
	struct kn_http_server *srv;
	struct kn_front_options fo = {
		.name = "server",
		.kiln_errors = true,
		.max_head = KN_HTTP_MAX_HEADERS,
		.max_body = KN_HTTP_MAX_BODY,
		.head_timeout_ms = KN_HTTP_HEAD_TIMEOUT_MS,
		.body_idle_ms = KN_HTTP_BODY_IDLE_MS,
		.max_conns = KN_HTTP_MAX_CONNS,
		.max_conns_per_client = KN_HTTP_MAX_CONNS_PER_CLIENT,
		.max_large_bytes = KN_HTTP_MAX_LARGE_BYTES,
		.max_large_bytes_per_client = KN_HTTP_MAX_LARGE_BYTES_PER_CLIENT,
		.tls = tls,
		.handler = http_dispatch,
		.admit = http_admit,
	};
	int fd = kn_http_listen(host, &port, false, err);

	if (fd < 0)
		return fd;
	if (limits) {
		fo.head_timeout_ms = limits->head_timeout_ms;
		fo.body_idle_ms = limits->body_idle_ms;
		fo.max_conns = limits->max_conns;
		fo.max_conns_per_client = limits->max_conns_per_client;
	}
	srv = kn_xcalloc(1, sizeof(*srv));
	srv->base = loop->base;
	srv->handler = handler;
	srv->arg = arg;
	fo.arg = srv;
	srv->front = kn_front_new(loop->base, fd, &fo);
	if (!srv->front) {
		free(srv);
		return kn_errorf(err, KN_EIO, NULL, "cannot serve %s:%d", host,
				 port);
	}
	*out = srv;
	*out_port = port;
	return 0;
}

void kn_http_server_set_admit(struct kn_http_server *srv,
			      kn_http_admit admit)
{
	srv->admit = admit;
}

void kn_http_server_free(struct kn_http_server *srv)
{
	if (!srv)
		return;
	kn_front_free(srv->front);
	while (srv->gone)
		stream_gone(srv->gone);
	free(srv);
}

const char *kn_http_method(const struct kn_http_req *req)
{
	return req->fr ? kn_front_req_method(req->fr) : "";
}

const char *kn_http_path(const struct kn_http_req *req)
{
	return req->path;
}

const char *kn_http_query(const struct kn_http_req *req, const char *name)
{
	return evhttp_find_header(&req->query, name);
}

const char *kn_http_header(const struct kn_http_req *req, const char *name)
{
	return req->fr ? kn_front_req_header(req->fr, name) : NULL;
}

const char *kn_http_client_cert(const struct kn_http_req *req)
{
	return req->fr ? kn_front_req_client_cert(req->fr) : NULL;
}

const char *kn_http_body(const struct kn_http_req *req, size_t *len)
{
	size_t n = 0;
	const char *body = req->fr ? kn_front_req_body(req->fr, &n) : "";

	if (len)
		*len = n;
	return body;
}

char *kn_http_take_body(struct kn_http_req *req, const char **data,
			size_t *len)
{
	char *none;

	if (req->fr)
		return kn_front_req_take_body_at(req->fr, data, len);
	none = kn_xstrdup("");
	*data = none;
	*len = 0;
	return none;
}

void kn_http_allow_body(struct kn_http_req *req, size_t max_body)
{
	if (req->fr)
		kn_front_req_allow_body(req->fr, max_body);
}

int kn_http_query_int(const struct kn_http_req *req, const char *name,
		      int64_t min, int64_t max, int64_t *out)
{
	const char *s = kn_http_query(req, name);
	char *end;
	long long v;

	if (!s)
		return 1;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || end == s || *end || v < min || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

void kn_http_add_header(struct kn_http_req *req, const char *name,
			const char *value)
{
	if (req->fr)
		kn_front_req_add_header(req->fr, name, value);
}

void kn_http_reply_json(struct kn_http_req *req, int status, json_t *doc)
{
	char *text = json_dumps(doc, JSON_COMPACT);
	size_t len = text ? strlen(text) : 0;

	json_decref(doc);
	if (text) {
		text = kn_xrealloc(text, len + 2);
		text[len++] = '\n';
		text[len] = '\0';
	}
	kn_http_reply_text(req, status, "application/json", text ? text : "",
			   len);
	free(text);
}

/*
 * JSON answers and streams name store URLs (outputs, backups, events);
 * their queries, which may carry a SAS, are cut here, where every one
 * passes. Plain text is a task's own output, passed as it is.
 */
static bool shows_urls(const char *content_type)
{
	return !strncmp(content_type, "application/json", 16) ||
	       !strncmp(content_type, "application/x-ndjson", 20);
}

void kn_http_reply_text(struct kn_http_req *req, int status,
			const char *content_type, const void *data,
			size_t len)
{
	struct kn_front_req *fr = req->fr;
	char *cut = NULL;

	req_free(req);
	if (!fr)
		return; /* the client is gone */
	if (shows_urls(content_type))
		cut = kn_url_queries_cut(data, len, &len);
	kn_front_req_on_gone(fr, NULL, NULL);
	kn_front_req_add_header(fr, "Content-Type", content_type);
	kn_front_req_reply(fr, status, cut ? cut : data, len);
	free(cut);
}

void kn_http_reply_error(struct kn_http_req *req, const struct kn_error *err)
{
	json_t *e = json_pack("{s:s, s:s, s:o}", "code",
			      kn_errcode_name(err->code), "message",
			      err->message, "field",
			      err->field[0] ? json_string(err->field)
					    : json_null());
	kn_http_reply_json(req, kn_errcode_http(err->code),
			   json_pack("{s:o}", "error", e));
}

void kn_http_set_owner(struct kn_http_req *req, const char *owner)
{
	kn_strlcpy(req->owner, owner, sizeof(req->owner));
}

size_t kn_http_streams_of(const struct kn_http_req *req)
{
	size_t n = 0;

	for (const struct kn_http_req *s = req->srv->streams; s;
	     s = s->next_stream)
		n += !strcmp(s->owner, req->owner);
	return n + kn_front_tunnels_of(req->srv->front, req->owner);
}

struct kn_tunnel *kn_http_upgrade(struct kn_http_req *req,
				  const char *protocol,
				  const struct kn_tunnel_ops *ops, void *arg)
{
	struct kn_front_req *fr = req->fr;
	char owner[KN_HTTP_OWNER_MAX];

	kn_strlcpy(owner, req->owner, sizeof(owner));
	req_free(req);
	if (!fr)
		return NULL;
	kn_front_req_on_gone(fr, NULL, NULL);
	return kn_front_req_upgrade(fr, protocol, owner, ops, arg);
}

void kn_http_stream_start(struct kn_http_req *req, int status,
			  const char *content_type, kn_loop_cb on_close,
			  void *arg)
{
	req->streaming = true;
	req->cut_queries = shows_urls(content_type);
	req->on_close = on_close;
	req->close_arg = arg;
	if (!req->fr) {
		/* Gone before it started: on_close on the next turn. */
		req_gone(req);
		return;
	}
	req->next_stream = req->srv->streams;
	req->srv->streams = req;
	kn_front_req_add_header(req->fr, "Content-Type", content_type);
	kn_front_req_stream_start(req->fr, status);
}

void kn_http_stream_chunk(struct kn_http_req *req, const void *data,
			  size_t len)
{
	struct evbuffer *out;
	char *cut;

	if (len == 0 || !req->fr)
		return;
	cut = req->cut_queries ? kn_url_queries_cut(data, len, &len) : NULL;
	out = evbuffer_new();
	evbuffer_add(out, cut ? cut : data, len);
	kn_front_req_stream_chunk(req->fr, out);
	evbuffer_free(out);
	free(cut);
}

void kn_http_stream_end(struct kn_http_req *req)
{
	struct kn_front_req *fr = req->fr;

	if (!fr) {
		req->ended = true; /* stream_gone_later frees it */
		return;
	}
	stream_unlink(req);
	req_free(req);
	kn_front_req_on_gone(fr, NULL, NULL);
	kn_front_req_stream_end(fr);
}

/* ---- a socket of the server's own ---- */

struct kn_fd_stream {
	struct bufferevent *bev;
	struct kn_tunnel_ops ops;
	void *arg;
	bool write_broken; /* the peer reads no more: output is dropped */
};

static void fd_stream_read(struct bufferevent *bev, void *arg)
{
	struct kn_fd_stream *s = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	struct evbuffer_iovec v;

	while (evbuffer_peek(in, -1, NULL, &v, 1) > 0 && v.iov_len) {
		size_t n = v.iov_len;
		bool go_on = s->ops.on_data(s->arg, v.iov_base, n);
		if (!go_on)
			return; /* freed */
		evbuffer_drain(in, n);
	}
}

static void fd_stream_write(struct bufferevent *bev, void *arg)
{
	struct kn_fd_stream *s = arg;

	(void)bev;
	if (s->ops.on_drain)
		s->ops.on_drain(s->arg);
}

static void fd_stream_event(struct bufferevent *bev, short what, void *arg)
{
	struct kn_fd_stream *s = arg;

	(void)bev;
	if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
		return;
	/* A peer that closed may have sent its last bytes first: they are
	   read (as the owner wants them) until the end of its side. */
	if (what & BEV_EVENT_WRITING) {
		s->write_broken = true;
		bufferevent_disable(s->bev, EV_WRITE);
		evbuffer_drain(bufferevent_get_output(s->bev),
			       evbuffer_get_length(
				       bufferevent_get_output(s->bev)));
		return;
	}
	if (s->ops.on_closed)
		s->ops.on_closed(s->arg);
	kn_fd_stream_free(s);
}

struct kn_fd_stream *kn_fd_stream_new(struct kn_loop *loop, int fd,
				      const struct kn_tunnel_ops *ops,
				      void *arg)
{
	struct kn_fd_stream *s = kn_xcalloc(1, sizeof(*s));

	s->bev = bufferevent_socket_new(loop->base, fd,
					BEV_OPT_CLOSE_ON_FREE |
						BEV_OPT_DEFER_CALLBACKS);
	if (!s->bev) {
		close(fd);
		free(s);
		return NULL;
	}
	s->ops = *ops;
	s->arg = arg;
	bufferevent_setcb(s->bev, fd_stream_read, fd_stream_write,
			  fd_stream_event, s);
	bufferevent_setwatermark(s->bev, EV_WRITE, KN_TUNNEL_LOW_WATER, 0);
	bufferevent_enable(s->bev, EV_READ | EV_WRITE);
	return s;
}

void kn_fd_stream_write(struct kn_fd_stream *s, const void *data,
			size_t len)
{
	if (!s->write_broken)
		bufferevent_write(s->bev, data, len);
}

size_t kn_fd_stream_pending(const struct kn_fd_stream *s)
{
	return evbuffer_get_length(bufferevent_get_output(s->bev));
}

void kn_fd_stream_pause(struct kn_fd_stream *s, bool paused)
{
	if (paused)
		bufferevent_disable(s->bev, EV_READ);
	else
		bufferevent_enable(s->bev, EV_READ);
}

void kn_fd_stream_free(struct kn_fd_stream *s)
{
	if (!s)
		return;
	bufferevent_free(s->bev);
	free(s);
}

/* ---- HTTP client ---- */

#define FETCH_MAX_BODY (1024 * 1024)

/*
 * A connection cannot be freed from inside its own callback, so finished
 * fetches are freed on the next turn of the loop; whatever is left when
 * the loop goes is freed with it.
 */
struct fetch {
	struct kn_loop *loop;
	struct evhttp_connection *conn;
	SSL *ssl;                /* https: the session (the connection's) */
	kn_http_fetch_cb cb;
	void *arg;
	bool done;
	struct fetch *next;
};

static void fetches_free(struct kn_loop *loop, bool only_done)
{
	struct fetch **p = &loop->fetches;

	while (*p) {
		struct fetch *f = *p;
		if (only_done && !f->done) {
			p = &f->next;
			continue;
		}
		*p = f->next;
		evhttp_connection_free(f->conn);
		free(f);
	}
}

static void reap_fetches(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	fetches_free(arg, true);
}

static void fetch_done(struct evhttp_request *ev, void *arg)
{
	struct fetch *f = arg;
	struct evbuffer *in;
	size_t len;
	char *body;
	struct timeval now = {0, 0};

	f->done = true;
	evtimer_add(f->loop->reap_ev, &now);
	if (!ev || evhttp_request_get_response_code(ev) == 0) {
		char why[512] = "";
		if (f->ssl)
			tls_client_failure(
				f->ssl,
				bufferevent_get_openssl_error(
					evhttp_connection_get_bufferevent(
						f->conn)),
				why, sizeof(why));
		f->cb(0, NULL, 0, why[0] ? why : "no answer (connection "
						 "failed or timed out)",
		      f->arg);
		return;
	}
	in = evhttp_request_get_input_buffer(ev);
	len = evbuffer_get_length(in);
	if (len > FETCH_MAX_BODY) {
		f->cb(0, NULL, 0, "answer over 1 MiB", f->arg);
		return;
	}
	body = kn_xmalloc(len + 1);
	evbuffer_remove(in, body, len);
	body[len] = '\0';
	f->cb(evhttp_request_get_response_code(ev), body, len, NULL, f->arg);
	free(body);
}

/* A connection to host:port for f, over TLS when tls; NULL on failure. */
static struct evhttp_connection *fetch_connection(struct kn_loop *loop,
						  struct fetch *f,
						  const char *host, int port,
						  bool tls)
{
	struct evhttp_connection *conn;
	struct bufferevent *bev;

	if (!tls)
		return evhttp_connection_base_new(
			loop->base, NULL, host,
			(ev_uint16_t)(port > 0 ? port : 80));
	if (!(f->ssl = tls_client_session(loop, host)))
		return NULL;
	bev = bufferevent_openssl_socket_new(loop->base, -1, f->ssl,
					     BUFFEREVENT_SSL_CONNECTING,
					     BEV_OPT_CLOSE_ON_FREE |
						     BEV_OPT_DEFER_CALLBACKS);
	if (!bev) {
		SSL_free(f->ssl);
		f->ssl = NULL;
		return NULL;
	}
	/* Servers that close after the answer without close_notify are
	   common; the answer's length still frames it. */
	bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
	conn = evhttp_connection_base_bufferevent_new(
		loop->base, NULL, bev, host,
		(ev_uint16_t)(port > 0 ? port : 443));
	if (!conn) {
		bufferevent_free(bev); /* and the session with it */
		f->ssl = NULL;
	}
	return conn;
}

int kn_http_fetch(struct kn_loop *loop, const char *method, const char *url,
		  const char *const *headers, const char *body,
		  int64_t timeout_ms, kn_http_fetch_cb cb, void *arg)
{
	struct evhttp_uri *uri = evhttp_uri_parse(url);
	struct evhttp_request *req;
	struct evkeyvalq *out;
	struct fetch *f;
	const char *host, *path, *query;
	char *target;
	enum evhttp_cmd_type cmd;
	int port;

	if (!uri || !evhttp_uri_get_scheme(uri) ||
	    (strcmp(evhttp_uri_get_scheme(uri), "http") != 0 &&
	     strcmp(evhttp_uri_get_scheme(uri), "https") != 0) ||
	    !(host = evhttp_uri_get_host(uri))) {
		if (uri)
			evhttp_uri_free(uri);
		return -EINVAL;
	}
	cmd = !strcmp(method, "POST") ? EVHTTP_REQ_POST : EVHTTP_REQ_GET;
	port = evhttp_uri_get_port(uri);
	path = evhttp_uri_get_path(uri);
	query = evhttp_uri_get_query(uri);
	target = kn_asprintf("%s%s%s", path && *path ? path : "/",
			     query ? "?" : "", query ? query : "");
	if (!loop->reap_ev)
		loop->reap_ev = evtimer_new(loop->base, reap_fetches, loop);
	f = kn_xcalloc(1, sizeof(*f));
	f->loop = loop;
	f->cb = cb;
	f->arg = arg;
	f->conn = fetch_connection(loop, f, host, port,
				   !strcmp(evhttp_uri_get_scheme(uri), "https"));
	if (!f->conn) {
		KN_FREE_ALL(target, f);
		evhttp_uri_free(uri);
		return -EIO;
	}
	{
		struct timeval tv = {(time_t)(timeout_ms / 1000),
				     (suseconds_t)(timeout_ms % 1000) * 1000};
		evhttp_connection_set_timeout_tv(f->conn, &tv);
	}
	evhttp_connection_set_retries(f->conn, 0);
	req = evhttp_request_new(fetch_done, f);
	out = evhttp_request_get_output_headers(req);
	evhttp_add_header(out, "Host", host);
	evhttp_add_header(out, "Connection", "close");
	for (const char *const *h = headers; h && *h; h++) {
		const char *colon = strchr(*h, ':');
		char *name;
		if (!colon)
			continue;
		name = kn_asprintf("%.*s", (int)(colon - *h), *h);
		evhttp_add_header(out, name, colon[1] == ' ' ? colon + 2 : colon + 1);
		free(name);
	}
	if (body) {
		evhttp_add_header(out, "Content-Type", "application/json");
		evbuffer_add(evhttp_request_get_output_buffer(req), body,
			     strlen(body));
	}
	if (evhttp_make_request(f->conn, req, cmd, target) < 0) {
		/* make_request frees req on failure. */
		evhttp_connection_free(f->conn);
		KN_FREE_ALL(f, target);
		evhttp_uri_free(uri);
		return -EIO;
	}
	f->next = loop->fetches;
	loop->fetches = f;
	free(target);
	evhttp_uri_free(uri);
	return 0;
}
