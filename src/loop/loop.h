/*
 * loop: the event loop (libevent underneath), timers, signals and the HTTP
 * server the API is served from.
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

/* ---- HTTP server ---- */

/* Caps with their reasons: bodies are specs and small JSON documents. */
#define KN_HTTP_MAX_BODY (1024 * 1024)
#define KN_HTTP_MAX_HEADERS (16 * 1024)

typedef void (*kn_http_handler)(struct kn_http_req *req, void *arg);

/*
 * Listen on host:port (port 0 picks a free one) and call handler for every
 * request. *out_port gets the bound port. Returns 0 or a negative errno
 * with err naming the address.
 */
int kn_http_server_new(struct kn_loop *loop, const char *host, int port,
		       kn_http_handler handler, void *arg,
		       struct kn_http_server **out, int *out_port,
		       struct kn_error *err);
void kn_http_server_free(struct kn_http_server *srv);

/* Request accessors; strings live as long as the request. */
const char *kn_http_method(const struct kn_http_req *req); /* "GET", ... */
const char *kn_http_path(const struct kn_http_req *req);   /* decoded path */
/* A query parameter, or NULL. */
const char *kn_http_query(const struct kn_http_req *req, const char *name);
/* A header, or NULL. */
const char *kn_http_header(const struct kn_http_req *req, const char *name);
/* The body (NUL-terminated; may contain NULs within len). */
const char *kn_http_body(const struct kn_http_req *req, size_t *len);
/*
 * An integer query parameter: 0 and *out set when present and valid, 1 when
 * absent, -EINVAL when malformed or outside [min, max].
 */
int kn_http_query_int(const struct kn_http_req *req, const char *name,
		      int64_t min, int64_t max, int64_t *out);

/* Answer with a JSON document (steals the reference). Ends the request. */
void kn_http_reply_json(struct kn_http_req *req, int status, json_t *doc);
/* Answer with a body of any type in one write. Ends the request. */
void kn_http_reply_text(struct kn_http_req *req, int status,
			const char *content_type, const void *data,
			size_t len);
/* Answer with {"error":{...}} built from err. Ends the request. */
void kn_http_reply_error(struct kn_http_req *req, const struct kn_error *err);

/*
 * Streams. start sends the status line and headers with chunked encoding;
 * chunk sends bytes; end finishes and frees the request. on_close (may be
 * NULL) is called at most once if the client goes away before end, and then
 * the request is freed after on_close returns: the caller must stop using
 * it (chunk and end are then never to be called for it).
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
 * One HTTP/1.1 request on the loop (plain http:// only: it talks to
 * services on the machine or its link-local metadata endpoint). headers
 * is a NULL-terminated list of "Name: value" strings, body may be NULL.
 * Answers over 1 MiB are refused. Returns 0, or -EINVAL for a URL it
 * cannot use (cb is then never called).
 */
int kn_http_fetch(struct kn_loop *loop, const char *method, const char *url,
		  const char *const *headers, const char *body,
		  int64_t timeout_ms, kn_http_fetch_cb cb, void *arg);

#endif
