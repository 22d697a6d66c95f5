/*
 * loop: the event loop (libevent underneath), timers, signals and the HTTP
 * server the API is served from; its HTTP/1.1 front (front.c, framing.c)
 * serves the gateway's workers too, each on its own event base.
 *
 * Everything here runs on the one loop thread: callbacks must not block.
 * The HTTP layer hands the server a request it can answer at once with a
 * JSON document, or turn into a chunked stream (log follow) that it feeds
 * from timers until it ends it.
 */
#ifndef KILN_LOOP_H
#define KILN_LOOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/base.h"

struct kn_loop;
struct kn_timer;
struct kn_http_server;
struct kn_http_req;
struct event_base;
struct evbuffer;

/* ---- loop ---- */

struct kn_loop *kn_loop_new(void);
void kn_loop_free(struct kn_loop *loop);
/* Run until kn_loop_stop. Returns 0, or -EIO when the loop broke. */
int kn_loop_run(struct kn_loop *loop);
void kn_loop_stop(struct kn_loop *loop);

typedef void (*kn_loop_cb)(void *arg);

/* A one-shot timer; re-arm it from its callback to repeat. */
struct kn_timer *kn_timer_new(struct kn_loop *loop, kn_loop_cb cb, void *arg);
/* (Re)arm to fire once after ms milliseconds (0 = on the next turn). */
void kn_timer_arm(struct kn_timer *t, int64_t ms);
bool kn_timer_pending(const struct kn_timer *t);
void kn_timer_free(struct kn_timer *t);

/*
 * Call cb on the loop thread whenever signo arrives (the signal is
 * delivered through the loop, so cb may do anything). Lives as long as the
 * loop. Returns 0 or -errno.
 */
int kn_loop_on_signal(struct kn_loop *loop, int signo, kn_loop_cb cb,
		      void *arg);

/* ---- descriptors ---- */

struct kn_fd_watch;

/* Call cb on the loop thread whenever fd is readable, until freed. */
struct kn_fd_watch *kn_fd_watch_new(struct kn_loop *loop, int fd,
				    kn_loop_cb cb, void *arg);
/* The same whenever fd is writable (a connect done, room to write). */
struct kn_fd_watch *kn_fd_watch_writable_new(struct kn_loop *loop, int fd,
					     kn_loop_cb cb, void *arg);
void kn_fd_watch_free(struct kn_fd_watch *w);

/* ---- work off the loop ---- */

struct kn_workers;

/*
 * Called on the loop thread when a piece of work is over: ran is false for
 * work that never started because the pool was freed first.
 */
typedef void (*kn_work_done)(void *arg, bool ran);

/* A pool of threads for slow work (uploads, hashing, downloads). */
struct kn_workers *kn_workers_new(struct kn_loop *loop, int threads);
/*
 * Run work(arg) on a pool thread, then done(arg, true) on the loop thread.
 * work gets its own copies of what it needs: it must not touch the
 * server's state.
 */
void kn_workers_submit(struct kn_workers *w, void (*work)(void *arg),
		       kn_work_done done, void *arg);
/* Work waiting or running. */
size_t kn_workers_pending(const struct kn_workers *w);
/*
 * Wait for the work in progress, call done(arg, false) for what never
 * started and done(arg, true) for what finished but was not delivered.
 */
void kn_workers_free(struct kn_workers *w);

/* ---- TLS for the HTTP front (tls.c, tls_gen.c) ---- */

/* A server's certificate: PEM files, read again on kn_tls_reload. */
struct kn_tls_files {
	const char *cert;      /* the chain, leaf first (ECDSA or RSA) */
	const char *key;       /* its private key */
	const char *client_ca; /* CAs client certificates must chain to, or
				  NULL: none asked for */
};
struct kn_tls;

/*
 * Load the files: 0 with *out, or a negative errno with err naming the
 * setting (tls-cert, tls-key, tls-client-ca) and the file.
 */
int kn_tls_new(const struct kn_tls_files *files, struct kn_tls **out,
	       struct kn_error *err);
/*
 * Read the files again. Connections start on the new certificate from
 * now; open ones keep theirs. On failure the old one stays in use.
 * Safe while other threads' fronts accept connections.
 */
int kn_tls_reload(struct kn_tls *t, struct kn_error *err);
/* Whether a file changed (replaced, rewritten, touched) since the load. */
bool kn_tls_files_changed(struct kn_tls *t);
/*
 * Reload t on SIGHUP and when its files change (looked at every every_ms)
 * on loop, logging each reload under name; t must outlive the watch.
 * NULL when libevent refuses.
 */
struct kn_tls_watch;
struct kn_tls_watch *kn_tls_watch_new(struct kn_loop *loop,
				      struct kn_tls *t, const char *name,
				      int64_t every_ms);
void kn_tls_watch_free(struct kn_tls_watch *w);
/* How often servers look at their certificate files. */
#define KN_TLS_WATCH_MS 2000
/* Whether client certificates are asked for (a client CA is set). */
bool kn_tls_verifies_clients(const struct kn_tls *t);
void kn_tls_free(struct kn_tls *t);

/*
 * Write a private CA (dir/ca.pem, its key dir/ca.key, kept when already
 * there) and a server certificate it signs for host, localhost and the
 * loopback addresses (dir/server.pem, dir/server.key). Creates dir 0700.
 */
int kn_tls_self_signed(const char *dir, const char *host,
		       struct kn_error *err);

/* Whether every address host names is a loopback one (127/8, ::1). */
bool kn_host_is_loopback(const char *host);
/*
 * The rule every kiln listener keeps: plain HTTP only on loopback. 0, or
 * -EINVAL with err naming the listen setting and the way out (TLS, or
 * insecure).
 */
int kn_tls_listen_check(const char *host, bool tls, bool insecure,
			struct kn_error *err);

/* ---- HTTP/1.1 server on raw sockets (front.c) ---- */

struct kn_front;
struct kn_front_req;

/* Called once per request; the request lives until it is answered. */
typedef void (*kn_front_handler)(struct kn_front_req *r, void *arg);
/*
 * Called when a request with a body has its head in and its body is not
 * all read yet or is over max_body (kn_front_req_allow_body may raise it
 * for this request): true to read the body, false when it answered r itself
 * (then the connection closes and the body is never buffered).
 */
typedef bool (*kn_front_admit)(struct kn_front_req *r, void *arg);
/* The client went away before its answer was done; r is gone. */
typedef void (*kn_front_gone)(void *arg);

struct kn_front_options {
	const char *name;          /* for the log: "gateway", "server" */
	/* The front's own refusals as {"error":{"code","message","field"}}
	   (the API's shape) instead of OpenAI's. */
	bool kiln_errors;
	size_t max_head, max_body; /* else 431, 413 */
	int64_t head_timeout_ms;   /* a whole head must come within this */
	int64_t body_idle_ms;      /* the most time between body bytes */
	int max_conns;             /* open connections, else 503 */
	int max_conns_per_client;  /* of one client address, else 503 */
	/* Bytes of bodies over max_body (kn_front_req_allow_body) held or
	   coming, in all and of one client address, else 503; 0: no bound. */
	size_t max_large_bytes, max_large_bytes_per_client;
	struct kn_tls *tls;        /* speak TLS with it, or NULL: plain */
	kn_front_handler handler;
	kn_front_admit admit;      /* or NULL */
	void *arg;                 /* for handler and admit */
};

/*
 * A listening TCP socket on host:port (port 0 picks a free one; *port gets
 * the bound port), non-blocking. reuse_port lets several sockets share the
 * address (one per worker thread). The fd, or a negative errno with err
 * naming the address.
 */
int kn_http_listen(const char *host, int *port, bool reuse_port,
		   struct kn_error *err);
/*
 * Serve the listening socket fd (taken over) on base. NULL when libevent
 * refuses.
 */
struct kn_front *kn_front_new(struct event_base *base, int fd,
			      const struct kn_front_options *opts);
/* Close every connection (calling their gone callbacks) and the socket. */
void kn_front_free(struct kn_front *f);

const char *kn_front_req_method(const struct kn_front_req *r);
const char *kn_front_req_target(const struct kn_front_req *r); /* path and query */
/* A request header (case-insensitive name), or NULL. */
const char *kn_front_req_header(const struct kn_front_req *r, const char *name);
/* The body, NUL-terminated (may hold NULs within len). */
const char *kn_front_req_body(const struct kn_front_req *r, size_t *len);
/*
 * From an admit callback: this request's body may be up to max_body bytes
 * (the front's max_body otherwise). The body is still held whole in
 * memory, so allow more only to a caller the route already trusts.
 */
void kn_front_req_allow_body(struct kn_front_req *r, size_t max_body);
/* The body, malloc'd, for the caller to keep; the request has none after. */
char *kn_front_req_take_body(struct kn_front_req *r, size_t *len);
/* The same without moving it: the allocation to free is returned, the
   body's bytes (NUL-terminated) start at *data within it. */
char *kn_front_req_take_body_at(struct kn_front_req *r, const char **data,
				size_t *len);
/*
 * The common name of the client certificate the connection verified
 * against the front's client CAs, or NULL (no TLS, no certificate).
 */
const char *kn_front_req_client_cert(const struct kn_front_req *r);
/* A header for the answer; one with a line break is dropped. */
void kn_front_req_add_header(struct kn_front_req *r, const char *name, const char *value);
/* When the client goes before the answer is done, call cb(arg) once. */
void kn_front_req_on_gone(struct kn_front_req *r, kn_front_gone cb, void *arg);
/* Answer whole; r is freed. */
void kn_front_req_reply(struct kn_front_req *r, int status, const void *body, size_t len);
void kn_front_req_reply_buffer(struct kn_front_req *r, int status, struct evbuffer *body);
/* Answer as a chunked stream: start, chunks (data is taken), end frees r. */
void kn_front_req_stream_start(struct kn_front_req *r, int status);
void kn_front_req_stream_chunk(struct kn_front_req *r, struct evbuffer *data);
void kn_front_req_stream_end(struct kn_front_req *r);
/* A stream whose source broke off: no last chunk, and the connection is
   closed, so the client sees a cut answer, never a complete one. */
void kn_front_req_stream_abort(struct kn_front_req *r);

/* ---- upgraded connections (front.c) ---- */

/*
 * A connection a request turned into a two-way byte pipe (HTTP/1.1
 * Upgrade, answered 101): interactive sessions (src/mux) run on one.
 * It lives until the peer goes, a write fails, the peer is silent for
 * ten minutes, or its owner closes it.
 */
struct kn_tunnel;

/* Output above this many bytes waiting is "full": on_drain says when it
   fell back to it. */
#define KN_TUNNEL_LOW_WATER (64 * 1024)

struct kn_tunnel_ops {
	/* Bytes from the peer, to take whole (the owner bounds what it
	   keeps, or pauses): false ends the tunnel. */
	bool (*on_data)(void *arg, const char *data, size_t len);
	/* The output was over KN_TUNNEL_LOW_WATER and is at it again. May
	   be NULL. */
	void (*on_drain)(void *arg);
	/* The tunnel ended by itself (peer gone, write failed, silent):
	   called on a later turn than any call of the owner's, never
	   after kn_tunnel_close; the tunnel is freed when it returns and
	   must not be used in it. */
	void (*on_closed)(void *arg);
};

/*
 * Answer r with 101 Switching Protocols to protocol (and the headers
 * added to r) and turn its connection into a tunnel counted among
 * owner's (kn_front_tunnels_of). r is gone; bytes the client sent behind
 * the request come to on_data on a later turn.
 */
struct kn_tunnel *kn_front_req_upgrade(struct kn_front_req *r,
				       const char *protocol, const char *owner,
				       const struct kn_tunnel_ops *ops,
				       void *arg);
/* Queue bytes for the peer (written as the socket takes them). */
void kn_tunnel_write(struct kn_tunnel *t, const void *data, size_t len);
/* Bytes queued and not yet written. */
size_t kn_tunnel_pending(const struct kn_tunnel *t);
/* Stop (true) or go on (false) reading from the peer: the owner's
   back-pressure when what it forwards to cannot take more. */
void kn_tunnel_pause(struct kn_tunnel *t, bool paused);
/* End it: what is queued is still sent, then the connection closes; no
   on_closed follows and t must not be used again. */
void kn_tunnel_close(struct kn_tunnel *t);
/* Open tunnels of owner on f. */
size_t kn_front_tunnels_of(const struct kn_front *f, const char *owner);

/*
 * A connected non-blocking socket of the server's own (a task shim's
 * session socket) with the same callbacks as a tunnel, each on a later
 * turn of the loop than the call that caused it; on_drain may also come
 * when nothing was held back. When writing fails, what the peer sent
 * before it closed is still read; on_closed comes at the end of that. The owner frees it (kn_fd_stream_free),
 * from any callback but on_closed, after which it must not touch it: an
 * on_data that freed it returns false.
 */
struct kn_fd_stream;
/* Takes fd (closed with the stream); NULL when libevent refuses (fd is
   closed then too). */
struct kn_fd_stream *kn_fd_stream_new(struct kn_loop *loop, int fd,
				      const struct kn_tunnel_ops *ops,
				      void *arg);
void kn_fd_stream_write(struct kn_fd_stream *s, const void *data,
			size_t len);
size_t kn_fd_stream_pending(const struct kn_fd_stream *s);
void kn_fd_stream_pause(struct kn_fd_stream *s, bool paused);
/* Close it now, dropping what is queued. NULL is fine. */
void kn_fd_stream_free(struct kn_fd_stream *s);

/* The digits of v at p (no NUL); returns the end. No printf per call. */
char *kn_put_uint(char *p, uint64_t v);

/* ---- request framing (framing.c) ---- */

/* What a request head says of its body. */
struct kn_http_framing {
	bool has_length;   /* Content-Length was given */
	bool chunked;      /* Transfer-Encoding was given */
	uint64_t body_len; /* Content-Length, or 0 */
};

/*
 * Check a whole request head (request line to the empty line, CRLF CRLF
 * included) against the framing rules at the top of framing.c: 0 with
 * *out filled, or the status to refuse it with (400, 411, 505).
 */
int kn_http_framing_check(const char *head, size_t len, struct kn_http_framing *out);

/*
 * The next "Name: value" line of an HTTP/1.x head at *p (before end),
 * split in place: *name and *value NUL-terminated, the value without the
 * blanks around it, *p moved past the line. 1 with a field; 0 at the
 * empty line that ends the head, or where no whole line is left; -1 for
 * a line without a colon.
 */
int kn_http_field_next(char **p, char *end, char **name, char **value);

/*
 * A Content-Length value (len bytes at v, blanks already cut): digits
 * only, at most 18 of them, so no sign, list or overflow; 0 with *out,
 * or -EINVAL.
 */
int kn_http_content_length(const char *v, size_t len, int64_t *out);

/* ---- HTTP server ---- */

/*
 * Caps with their reasons. Bodies are specs, small JSON documents and
 * model-blob parts (a blob is sent in parts of at most this size). A head
 * is a request line and a few fields. The rest bound what a client that
 * never finishes can hold: a head must come whole within the head
 * timeout, a body's bytes at most the body timeout apart, and open
 * connections are capped in all and per client address (503).
 */
#define KN_HTTP_MAX_BODY (1024 * 1024)
#define KN_HTTP_MAX_HEADERS (16 * 1024)
#define KN_HTTP_HEAD_TIMEOUT_MS 10000
#define KN_HTTP_BODY_IDLE_MS 30000
#define KN_HTTP_MAX_CONNS 4096
#define KN_HTTP_MAX_CONNS_PER_CLIENT 256
/* Bodies a route allows above KN_HTTP_MAX_BODY (model-blob parts): held
   whole, so bounded in bytes, in all and per client address. */
#define KN_HTTP_MAX_LARGE_BYTES ((size_t)1 << 30)
#define KN_HTTP_MAX_LARGE_BYTES_PER_CLIENT ((size_t)128 << 20)
/* The longest owner name streams are counted under (a token's name). */
#define KN_HTTP_OWNER_MAX 80

struct kn_http_limits {
	int64_t head_timeout_ms; /* a whole request head within this */
	int64_t body_idle_ms;    /* the most time between body bytes */
	int max_conns;           /* open connections in all */
	int max_conns_per_client; /* from one client address */
};

typedef void (*kn_http_handler)(struct kn_http_req *req, void *arg);
/*
 * Called when a request's head is in and its body is not all read yet or
 * is over the body cap (which admit may raise): true to read the body, false when it answered req itself (the body is
 * then never read and the connection closes). Headers, method, path and
 * query are there; the body is not.
 */
typedef bool (*kn_http_admit)(struct kn_http_req *req, void *arg);

/*
 * Listen on host:port (port 0 picks a free one) and call handler for every
 * request. limits NULL takes the defaults above; tls (kept by the caller,
 * who may reload it) makes it HTTPS, NULL plain. *out_port gets the bound
 * port. Returns 0 or a negative errno with err naming the address.
 */
int kn_http_server_new(struct kn_loop *loop, const char *host, int port,
		       const struct kn_http_limits *limits, struct kn_tls *tls,
		       kn_http_handler handler, void *arg,
		       struct kn_http_server **out, int *out_port,
		       struct kn_error *err);
/* Check requests whose bodies are still coming with admit (same arg). */
void kn_http_server_set_admit(struct kn_http_server *srv,
			      kn_http_admit admit);
void kn_http_server_free(struct kn_http_server *srv);

/* Request accessors; strings live as long as the request. */
const char *kn_http_method(const struct kn_http_req *req); /* "GET", ... */
const char *kn_http_path(const struct kn_http_req *req);   /* decoded path */
/* A query parameter, or NULL. */
const char *kn_http_query(const struct kn_http_req *req, const char *name);
/* A header, or NULL. */
const char *kn_http_header(const struct kn_http_req *req, const char *name);
/* The verified client certificate's common name, or NULL (see
   kn_front_req_client_cert). */
const char *kn_http_client_cert(const struct kn_http_req *req);
/* The body (NUL-terminated; may contain NULs within len). */
const char *kn_http_body(const struct kn_http_req *req, size_t *len);
/* The body, the caller's from now on (kn_http_body then has none): for
   work that outlives the request's client, who may go before the
   answer. Returns the allocation to free; the bytes start at *data. */
char *kn_http_take_body(struct kn_http_req *req, const char **data,
			size_t *len);
/* From the admit callback: see kn_front_req_allow_body. */
void kn_http_allow_body(struct kn_http_req *req, size_t max_body);
/*
 * An integer query parameter: 0 and *out set when present and valid, 1 when
 * absent, -EINVAL when malformed or outside [min, max].
 */
int kn_http_query_int(const struct kn_http_req *req, const char *name,
		      int64_t min, int64_t max, int64_t *out);

/* Add a header to the answer or stream not yet sent (Name, value). */
void kn_http_add_header(struct kn_http_req *req, const char *name,
			const char *value);

/* Answer with a JSON document (steals the reference). Ends the request. */
void kn_http_reply_json(struct kn_http_req *req, int status, json_t *doc);
/* Answer with a body of any type in one write. Ends the request. */
void kn_http_reply_text(struct kn_http_req *req, int status,
			const char *content_type, const void *data,
			size_t len);
/* Answer with {"error":{...}} built from err. Ends the request. */
void kn_http_reply_error(struct kn_http_req *req, const struct kn_error *err);

/*
 * Who the request is for (a token's name), and how many streams of that
 * owner are open on the server (follows and tunnels): the caps on them
 * are per owner.
 */
void kn_http_set_owner(struct kn_http_req *req, const char *owner);
size_t kn_http_streams_of(const struct kn_http_req *req);

/*
 * Turn req into a tunnel (see kn_front_req_upgrade) counted among its
 * owner's streams (kn_http_streams_of): req is gone. NULL when the
 * client already went (req is gone then too).
 */
struct kn_tunnel *kn_http_upgrade(struct kn_http_req *req,
				  const char *protocol,
				  const struct kn_tunnel_ops *ops, void *arg);

/*
 * Streams. start sends the status line and headers with chunked encoding;
 * chunk sends bytes; end finishes and frees the request. on_close (may be
 * NULL) is called at most once, on a later turn of the loop, if the client
 * goes away before end; the request is freed after on_close returns, and
 * the caller must stop using it then (chunk and end before it are
 * harmless).
 */
void kn_http_stream_start(struct kn_http_req *req, int status,
			  const char *content_type, kn_loop_cb on_close,
			  void *arg);
void kn_http_stream_chunk(struct kn_http_req *req, const void *data,
			  size_t len);
void kn_http_stream_end(struct kn_http_req *req);

/* ---- HTTP client ---- */

/*
 * Called once with the answer: status 0 and body NULL when the request
 * failed (connection refused, timeout); error then says why.
 */
typedef void (*kn_http_fetch_cb)(int status, const char *body, size_t len,
				 const char *error, void *arg);

/*
 * The CAs https:// fetches on loop trust (a PEM file; NULL: the system's)
 * and the client certificate they show (cert and key PEM files; key NULL
 * when it is in cert's file; cert NULL: none). 0, or -EINVAL with err
 * naming the file.
 */
int kn_loop_client_tls(struct kn_loop *loop, const char *ca_file,
		       const char *cert, const char *key,
		       struct kn_error *err);

/*
 * For clients that run their own sockets (the gateway's upstreams): a
 * client context trusting ca_file (NULL: the system's CAs) and showing
 * cert and key (NULL: none), TLS 1.2 at least, the peer verified; NULL
 * with err naming the file. Free it with SSL_CTX_free.
 */
struct ssl_ctx_st;
struct ssl_st;
struct ssl_ctx_st *kn_tls_client_ctx(const char *ca_file, const char *cert,
				     const char *key, struct kn_error *err);
/* A client session on ctx for host, verifying that the certificate names
   it (a DNS name, or an IP address); NULL when OpenSSL refuses. */
struct ssl_st *kn_tls_client_session(struct ssl_ctx_st *ctx,
				     const char *host);

/*
 * Write the start of out (at most one TLS record) on ssl, draining what
 * went: SSL_write's return, for SSL_get_error when it is not above 0.
 * Safe to call again after WANT_WRITE or WANT_READ as OpenSSL wants,
 * as long as out only grows at its end meanwhile.
 */
int kn_tls_write_buffer(struct ssl_st *ssl, struct evbuffer *out);

/*
 * One HTTP/1.1 request on the loop, http:// or https:// (the server's
 * certificate and host name verified, see kn_loop_client_tls). headers
 * is a NULL-terminated list of "Name: value" strings, body may be NULL.
 * Answers over 1 MiB are refused. Returns 0, or -EINVAL for a URL it
 * cannot use (cb is then never called).
 */
int kn_http_fetch(struct kn_loop *loop, const char *method, const char *url,
		  const char *const *headers, const char *body,
		  int64_t timeout_ms, kn_http_fetch_cb cb, void *arg);

#endif
