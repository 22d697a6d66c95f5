/*
 * The HTTP/1.1 server side of the gateway and of the API, on raw
 * non-blocking sockets.
 *
 * libevent's evhttp served the first version; per request it turned the
 * connection's reading off and on and deferred each answer to the next
 * turn of the loop (three epoll_ctl calls and an ioctl a request, a third
 * of the syscalls left after upstream.c). Here a connection's read event
 * is added once and stays, an answer is written when it is ready, and a
 * read is one read(2): a kept-alive request costs a read and a writev.
 * The read goes straight into the connection's flat input buffer, where
 * the head's end is searched for from where the last search stopped; the
 * request, its head buffer and its answer's fields stay with the
 * connection from request to request, so a request allocates only the
 * body it hands on.
 *
 * What it takes: requests with a Content-Length body (or none); chunked
 * request bodies get 411 (OpenAI clients send lengths). A head must meet
 * the strict framing rules of framing.c, else 400 (or 505) and close.
 * Expect: 100-continue is answered. A request whose body is not all in
 * is first shown to the admit callback (the key check), so a caller
 * without a key cannot make the gateway buffer bodies. Caps: the head
 * (request line and headers, else 431) and the body (else 413); a head
 * must come whole within the head timeout (from the connection's start
 * or its first byte), a body's bytes at most the body idle time apart; a
 * connection quiet for IDLE_TIMEOUT_S is closed. One request at a time
 * per connection: pipelined requests wait in the buffer until the answer
 * before them is out. Answers: whole (Content-Length) or chunked streams.
 *
 * With TLS (tls.c) the same connection runs over an OpenSSL session on
 * the socket: reads are SSL_read until OpenSSL holds nothing more, writes
 * are SSL_write of up to a record's worth at a time, and the handshake
 * happens inside them, bounded by the head timeout like a first head.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/listener.h>

#include <openssl/err.h>

#include "loop/internal.h"
#include "loop/loop.h"

#define IDLE_TIMEOUT_S 600
#define LISTEN_BACKLOG 4096
/* How long a closed-for-writing connection is read before it is dropped. */
#define LINGER_S 2
/* The input buffer: its first size, the least room a read is given, and
   the size past which an emptied one is let go (a large body grew it). */
#define IN_FIRST (4 * 1024)
#define IN_READ_MIN (2 * 1024)
#define IN_KEEP_MAX (64 * 1024)
#define HEADERS_MAX 128 /* fields in one request head */
/* An answer's fields: the model server's (at most 64 KiB) and ours. */
#define HEADERS_BYTES_MAX (256 * 1024)

struct kn_front {
	struct event_base *base;
	struct evconnlistener *listener;
	struct kn_front_options o;
	struct timeval head_timeout, body_idle;
	struct front_conn *conns; /* open connections, for the shutdown */
	int n_conns;
	size_t large_bytes; /* bodies over o.max_body held or coming */
	/* Out of descriptors, this one is closed to make room to take a
	   waiting connection off the queue (and close it); accepting pauses
	   a while, and the failures are logged at most once a second. */
	int reserve_fd;
	char busy[512]; /* the 503 a connection over a cap gets */
	int busy_len;
	struct event *resume;
	long long accept_failures;
	time_t failures_logged_s;
};

/*
 * A request being answered. Each connection has one, kept from request
 * to request with its buffers (one request at a time), so a kept-alive
 * request allocates nothing here but its body, which the call takes.
 */
struct kn_front_req {
	struct front_conn *conn;
	char *head;          /* the request head, NUL-split in place */
	size_t head_cap;
	const char *method, *target;
	const char *names[HEADERS_MAX], *values[HEADERS_MAX];
	size_t n_headers;
	/* The fields front.c itself reads, found while splitting. */
	const char *connection, *expect;
	char *body;
	char *body_base;  /* the allocation body lies in (body or before) */
	size_t body_len;
	size_t max_body; /* the front's cap, or what admit allowed */
	struct kn_buf headers; /* "Name: value\r\n" lines to send */
	kn_front_gone on_gone;
	void *gone_arg;
};

struct front_conn {
	struct kn_front *f;
	struct front_conn *prev, *next;
	int fd;
	struct sockaddr_storage peer; /* for the per-client cap */
	struct event *rev, *wev;
	struct event *head_timer; /* armed while a head is partly in */
	bool head_timing;         /* head_timer is armed */
	/* What the client sent and is not taken yet: one flat buffer read
	   into directly, searched from where the last search stopped. */
	char *in;
	size_t in_len, in_cap, scanned;
	struct evbuffer *out;
	SSL *ssl;             /* the TLS session, or NULL: plain */
	bool write_wants_read; /* SSL_write waits on the client's bytes */
	bool peer_named;      /* client_cert is filled in */
	char client_cert[128];
	struct kn_front_req *req;   /* &slot while a request is answered, or NULL */
	struct kn_front_req slot;
	bool closing;         /* close once out is written */
	bool lingering;       /* written and shut: reading until the end */
	bool keep_alive;      /* of the request being answered */
	bool admitted;        /* the request at hand may send its body */
	size_t large;         /* its body's bytes, when over o.max_body */
	bool body_wait;       /* rev's timeout is the body's idle bound */
	struct kn_tunnel *tunnel; /* upgraded: raw bytes both ways, or NULL */
};

/*
 * An upgraded connection (kn_front_req_upgrade). Its end, when the peer
 * goes or a write fails, is reported on a later turn of the loop, never
 * from inside a call its owner made: an owner writing from its on_data
 * must not have its state freed under it.
 */
struct kn_tunnel {
	struct front_conn *conn;
	struct kn_tunnel_ops ops;
	void *arg;
	char owner[KN_HTTP_OWNER_MAX]; /* whose sessions it counts among */
	bool paused;   /* the owner stopped reading */
	bool draining; /* output went over KN_TUNNEL_LOW_WATER */
	bool ended;    /* end_ev is due: nothing more is read or written */
	bool released; /* the owner closed it: no on_closed */
	struct event *end_ev;
};

static void conn_free(struct front_conn *c);
static void tunnel_end(struct front_conn *c);
static void large_release(struct front_conn *c);
static bool same_client(const struct sockaddr_storage *a,
			const struct sockaddr *b);
static void process(struct front_conn *c);

/* ---- the socket, plain or TLS ---- */

/* errno for an SSL call that returned n: EAGAIN to wait, else ECONNRESET
   (a failed handshake or a broken session ends the connection). */
static int tls_errno(struct front_conn *c, int n, bool writing)
{
	int e = SSL_get_error(c->ssl, n);

	ERR_clear_error();
	if (e == SSL_ERROR_WANT_READ) {
		c->write_wants_read = writing;
		return EAGAIN;
	}
	if (e == SSL_ERROR_WANT_WRITE) {
		if (!writing)
			event_add(c->wev, NULL);
		return EAGAIN;
	}
	return e == SSL_ERROR_ZERO_RETURN ? 0 : ECONNRESET;
}

/* Like read(2): bytes, 0 at the end, or -1 with errno. */
static ssize_t conn_read(struct front_conn *c, char *buf, size_t cap)
{
	int n, e;

	if (!c->ssl)
		return read(c->fd, buf, cap);
	n = SSL_read(c->ssl, buf, cap > INT_MAX ? INT_MAX : (int)cap);
	if (n > 0)
		return n;
	if (!(e = tls_errno(c, n, false)))
		return 0; /* close_notify */
	errno = e;
	return -1;
}

/* Write from the output: bytes written, or -1 with errno. */
static int conn_write(struct front_conn *c)
{
	int n;

	if (!c->ssl)
		return evbuffer_write(c->out, c->fd);
	if ((n = kn_tls_write_buffer(c->ssl, c->out)) > 0)
		return n;
	errno = tls_errno(c, n, true);
	if (!errno)
		errno = ECONNRESET;
	return -1;
}

/* ---- writing ---- */

/*
 * Write what is waiting. A connection to close is shut for writing once
 * all is out and then read to its end (briefly): closing with unread
 * bytes would reset it and could destroy the answer before the client
 * read it (the 413 and 431 cases). false when the connection was freed.
 */
static bool flush(struct front_conn *c)
{
	c->write_wants_read = false;
	while (evbuffer_get_length(c->out) > 0) {
		int n = conn_write(c);
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				break;
			if (c->tunnel) {
				tunnel_end(c);
				return false;
			}
			conn_free(c); /* the client is gone */
			return false;
		}
	}
	if (evbuffer_get_length(c->out) > 0) {
		/* Waiting on a read: on_read flushes again. */
		if (!c->write_wants_read)
			event_add(c->wev, NULL);
		return true;
	}
	if (c->closing && !c->req && !c->lingering) {
		struct timeval linger = {LINGER_S, 0};
		if (c->ssl) /* close_notify: the answer is whole */
			SSL_shutdown(c->ssl);
		ERR_clear_error();
		shutdown(c->fd, SHUT_WR);
		c->lingering = true;
		event_add(c->rev, &linger);
	}
	return true;
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
	struct front_conn *c = arg;
	struct kn_tunnel *t = c->tunnel;

	(void)fd;
	(void)what;
	if (!flush(c) || !t || t->ended || t->released || !t->draining ||
	    evbuffer_get_length(c->out) > KN_TUNNEL_LOW_WATER)
		return;
	t->draining = false;
	if (t->ops.on_drain)
		t->ops.on_drain(t->arg);
}

static const char *reason(int status)
{
	switch (status) {
	case 100: return "Continue";
	case 101: return "Switching Protocols";
	case 200: return "OK";
	case 304: return "Not Modified";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 411: return "Length Required";
	case 413: return "Payload Too Large";
	case 429: return "Too Many Requests";
	case 431: return "Request Header Fields Too Large";
	case 500: return "Internal Server Error";
	case 502: return "Bad Gateway";
	case 503: return "Service Unavailable";
	case 504: return "Gateway Timeout";
	default: return "Status";
	}
}

char *kn_put_uint(char *p, uint64_t v)
{
	char digits[20];
	size_t n = 0;

	do {
		digits[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (n)
		*p++ = digits[--n];
	return p;
}

#define PUT_LIT(p, s) (memcpy(p, s, sizeof(s) - 1), (p) + sizeof(s) - 1)

/* The answer's head: built whole, then two copies into the output (no
   printf, no evbuffer chain handed from buffer to buffer). */
static void put_head(struct kn_front_req *r, int status, bool chunked,
		     size_t length)
{
	struct front_conn *c = r->conn;
	const char *why = reason(status);
	size_t why_len = strlen(why);
	char line[128], *p = line;

	p = PUT_LIT(p, "HTTP/1.1 ");
	p = kn_put_uint(p, (uint64_t)status);
	*p++ = ' ';
	memcpy(p, why, why_len);
	p += why_len;
	if (chunked) {
		p = PUT_LIT(p, "\r\nTransfer-Encoding: chunked\r\n");
	} else {
		p = PUT_LIT(p, "\r\nContent-Length: ");
		p = kn_put_uint(p, length);
		p = PUT_LIT(p, "\r\n");
	}
	evbuffer_add(c->out, line, (size_t)(p - line));
	if (!c->keep_alive)
		kn_buf_append(&r->headers, "Connection: close\r\n", 19);
	kn_buf_append(&r->headers, "\r\n", 2);
	evbuffer_add(c->out, r->headers.data, r->headers.len);
	r->headers.len = 0;
}

/* The request is answered: free it, then go on with the connection. */
static void req_done(struct kn_front_req *r)
{
	struct front_conn *c = r->conn;

	c->req = NULL;
	free(r->body_base);
	r->body = r->body_base = NULL;
	large_release(c);
	r->on_gone = NULL;
	r->headers.len = 0;
	if (!c->keep_alive) {
		/* Nothing more is taken: what waits is let go now. */
		c->closing = true;
		free(c->in);
		c->in = NULL;
		c->in_len = c->in_cap = c->scanned = 0;
	}
	if (flush(c))
		process(c); /* a pipelined request may be waiting */
}

void kn_front_req_reply(struct kn_front_req *r, int status, const void *body, size_t len)
{
	put_head(r, status, false, len);
	evbuffer_add(r->conn->out, body, len);
	req_done(r);
}

void kn_front_req_reply_buffer(struct kn_front_req *r, int status, struct evbuffer *body)
{
	put_head(r, status, false, evbuffer_get_length(body));
	evbuffer_add_buffer(r->conn->out, body);
	req_done(r);
}

void kn_front_req_stream_start(struct kn_front_req *r, int status)
{
	put_head(r, status, true, 0);
	flush(r->conn);
}

void kn_front_req_stream_chunk(struct kn_front_req *r, struct evbuffer *data)
{
	size_t len = evbuffer_get_length(data);

	if (!len)
		return;
	evbuffer_add_printf(r->conn->out, "%zx\r\n", len);
	evbuffer_add_buffer(r->conn->out, data);
	evbuffer_add(r->conn->out, "\r\n", 2);
	flush(r->conn);
}

void kn_front_req_stream_end(struct kn_front_req *r)
{
	evbuffer_add(r->conn->out, "0\r\n\r\n", 5);
	req_done(r);
}

void kn_front_req_stream_abort(struct kn_front_req *r)
{
	r->conn->keep_alive = false;
	req_done(r);
}

void kn_front_req_add_header(struct kn_front_req *r, const char *name, const char *value)
{
	/* Values come from model servers too: no line breaks get through. */
	size_t name_len = strcspn(name, "\r\n:"),
	       value_len = strcspn(value, "\r\n");

	if (name[name_len] || value[value_len])
		return;
	/* Past the cap (HEADERS_BYTES_MAX) a field is dropped whole. */
	if (r->headers.len + name_len + value_len + 4 + 21 >
	    HEADERS_BYTES_MAX)
		return;
	kn_buf_append(&r->headers, name, name_len);
	kn_buf_append(&r->headers, ": ", 2);
	kn_buf_append(&r->headers, value, value_len);
	kn_buf_append(&r->headers, "\r\n", 2);
}

const char *kn_front_req_client_cert(const struct kn_front_req *r)
{
	struct front_conn *c = r->conn;

	if (!c->ssl)
		return NULL;
	if (!c->peer_named) {
		tls_peer_name(c->ssl, c->client_cert, sizeof(c->client_cert));
		c->peer_named = true;
	}
	return c->client_cert[0] ? c->client_cert : NULL;
}

void kn_front_req_on_gone(struct kn_front_req *r, kn_front_gone cb, void *arg)
{
	r->on_gone = cb;
	r->gone_arg = arg;
}

/* ---- reading ---- */

const char *kn_front_req_method(const struct kn_front_req *r)
{
	return r->method;
}

const char *kn_front_req_target(const struct kn_front_req *r)
{
	return r->target;
}

const char *kn_front_req_header(const struct kn_front_req *r, const char *name)
{
	return kn_header_value(r->names, r->values, r->n_headers, name);
}

/* Note a field front.c reads itself (the first of a repeated one, as
   kn_front_req_header finds). */
static void note_field(struct kn_front_req *r, const char *name, size_t len,
		       const char *value)
{
	const char **field = NULL;

	if (len == 6 && !strcasecmp(name, "Expect"))
		field = &r->expect;
	else if (len == 10 && !strcasecmp(name, "Connection"))
		field = &r->connection;
	if (field && !*field)
		*field = value;
}

void kn_front_req_allow_body(struct kn_front_req *r, size_t max_body)
{
	r->max_body = max_body;
}

const char *kn_front_req_body(const struct kn_front_req *r, size_t *len)
{
	*len = r->body_len;
	return r->body ? r->body : "";
}

char *kn_front_req_take_body_at(struct kn_front_req *r, const char **data,
				 size_t *len)
{
	char *base = r->body_base ? r->body_base : kn_xstrdup("");

	*data = r->body ? r->body : base;
	*len = r->body_len;
	r->body = r->body_base = NULL;
	r->body_len = 0;
	return base;
}

char *kn_front_req_take_body(struct kn_front_req *r, size_t *len)
{
	const char *data;
	char *base = kn_front_req_take_body_at(r, &data, len);

	memmove(base, data, *len + 1);
	return base;
}

/* An error document in the shape the server's clients read: OpenAI's
   (the gateway) or kiln's own (the API). */
static int error_doc(const struct kn_front *f, char *buf, size_t cap,
		     int status, const char *type, const char *code,
		     const char *message)
{
	/* kiln's codes (docs/api.md) go by the status alone. */
	if (f->o.kiln_errors)
		return snprintf(buf, cap,
				"{\"error\":{\"code\":\"%s\",\"message\":"
				"\"%s\",\"field\":null}}\n",
				status == 503	? "unavailable"
				: status == 413 || status == 431
					? "too_large"
					: "invalid_argument",
				message);
	return snprintf(buf, cap,
			"{\"error\":{\"message\":\"%s\",\"type\":\"%s\","
			"\"param\":null,\"code\":\"%s\"}}\n",
			message, type, code);
}

/* The whole answer to a request refused before it was parsed. */
static int refusal(const struct kn_front *f, char *buf, size_t cap,
		   int status, const char *type, const char *code,
		   const char *message)
{
	char body[256];
	int n = error_doc(f, body, sizeof(body), status, type, code, message);

	return snprintf(buf, cap,
			"HTTP/1.1 %d %s\r\nContent-Type: application/json"
			"\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
			"%s",
			status, reason(status), n, body);
}

/* Refuse the request at hand before it was parsed whole, and close. */
static void refuse(struct front_conn *c, int status, const char *code,
		   const char *message)
{
	char answer[512];
	int n = refusal(c->f, answer, sizeof(answer), status,
			"invalid_request_error", code, message);

	evbuffer_add(c->out, answer, (size_t)n);
	c->in_len = c->scanned = 0;
	c->closing = true;
	flush(c);
}

/*
 * Split the head in place: request line, then "Name: value" fields.
 * 0, or -1 when it is not HTTP/1.x.
 */
static int split_head(struct kn_front_req *r, size_t len, bool *http10)
{
	char *p = r->head, *end = r->head + len, *line, *sp, *name, *value;
	int rc;

	r->n_headers = 0;
	r->connection = r->expect = NULL;
	line = p;
	p = memchr(p, '\n', (size_t)(end - p));
	if (!p)
		return -1;
	*p++ = '\0';
	if (p - 2 >= line && p[-2] == '\r')
		p[-2] = '\0';
	r->method = line;
	if (!(sp = strchr(line, ' ')))
		return -1;
	*sp++ = '\0';
	r->target = sp;
	if (!(sp = strchr(sp, ' ')))
		return -1;
	*sp++ = '\0';
	if (strncmp(sp, "HTTP/1.", 7))
		return -1;
	*http10 = sp[7] == '0';
	while ((rc = kn_http_field_next(&p, end, &name, &value)) > 0) {
		if (r->n_headers == HEADERS_MAX)
			return -1;
		note_field(r, name, strlen(name), value);
		r->names[r->n_headers] = name;
		r->values[r->n_headers++] = value;
	}
	return rc;
}

/* Drop the first n bytes of the input (a request taken). */
static void consume(struct front_conn *c, size_t n)
{
	c->in_len -= n;
	if (c->in_len)
		memmove(c->in, c->in + n, c->in_len);
	c->scanned = 0;
	if (!c->in_len && c->in_cap > IN_KEEP_MAX) {
		free(c->in);
		c->in = NULL;
		c->in_cap = 0;
	}
}

/*
 * A body larger than the input buffer keeps is read into a buffer of its
 * own size (not one doubled past it), which the request then takes whole
 * when nothing follows it: one copy of a large part, not two.
 */
/*
 * Room for a body over o.max_body that admit allowed: such bodies are
 * held whole, so their bytes are bounded in all and per client address
 * (0: no bound), and one over either is answered 503.
 */
static bool large_room(struct front_conn *c, size_t body_len)
{
	const struct kn_front *f = c->f;
	size_t same = 0;

	if (f->o.max_large_bytes &&
	    f->large_bytes + body_len > f->o.max_large_bytes)
		return false;
	if (!f->o.max_large_bytes_per_client)
		return true;
	for (const struct front_conn *o = f->conns; o; o = o->next)
		if (same_client(&o->peer, (const struct sockaddr *)&c->peer))
			same += o->large;
	return same + body_len <= f->o.max_large_bytes_per_client;
}

static void large_release(struct front_conn *c)
{
	c->f->large_bytes -= c->large;
	c->large = 0;
}

static void in_room_for(struct front_conn *c, size_t request_len)
{
	size_t cap = request_len + IN_READ_MIN;

	if (request_len <= IN_KEEP_MAX || c->in_cap >= cap)
		return;
	c->in = kn_xrealloc(c->in, cap);
	c->in_cap = cap;
}

static void take_body(struct front_conn *c, struct kn_front_req *r,
		      size_t head_len, size_t body_len)
{
	if (body_len > IN_KEEP_MAX && c->in_len == head_len + body_len &&
	    c->in_cap > c->in_len) {
		/* Left where it was read: moving megabytes costs more than
		   the head before them. Only with room for the NUL after
		   it: a read may have filled the buffer to the byte. */
		r->body_base = c->in;
		r->body = c->in + head_len;
		c->in = NULL;
		c->in_cap = 0;
		c->in_len = 0;
		c->scanned = 0;
	} else {
		r->body = r->body_base = kn_xmalloc(body_len + 1);
		memcpy(r->body, c->in + head_len, body_len);
		consume(c, head_len + body_len);
	}
	r->body[body_len] = '\0';
	r->body_len = body_len;
}

/* Refuse a head that breaks the framing rules (framing.c). */
static void refuse_framing(struct front_conn *c, int status)
{
	if (status == 505)
		refuse(c, 505, "http_version_not_supported",
		       "This server speaks HTTP/1.0 and HTTP/1.1.");
	else if (status == 411)
		refuse(c, 411, "length_required",
		       "Send the body with a Content-Length.");
	else
		refuse(c, 400, "invalid_request",
		       "The request head breaks HTTP/1.1 framing.");
}

/* A bare LF in the part of a head not searched yet: refused at once
   rather than waited on (the head's end is searched as CRLF CRLF). */
static bool bare_lf(const struct front_conn *c)
{
	for (size_t i = c->scanned; i < c->in_len; i++)
		if (c->in[i] == '\n' && (!i || c->in[i - 1] != '\r'))
			return true;
	return false;
}

/*
 * The body of r is still coming: the admit callback may refuse it before
 * any of it is kept (and before its size is judged: a caller without a
 * key learns nothing of the limits). false when it did (c may be gone).
 */
static bool admit(struct front_conn *c, struct kn_front_req *r)
{
	struct kn_front *f = c->f;

	if (c->admitted || !f->o.admit)
		return true;
	c->keep_alive = false; /* a refusal closes */
	c->req = r;
	if (!f->o.admit(r, f->o.arg))
		return false;
	c->req = NULL;
	c->admitted = true;
	return true;
}

/* Wait for the rest of r's body: say go on if asked, and bound the wait
   between its bytes. */
static void wait_body(struct front_conn *c, struct kn_front_req *r,
		      size_t head_len)
{
	struct kn_front *f = c->f;

	if (!c->body_wait) {
		event_add(c->rev, &f->body_idle);
		c->body_wait = true;
	}
	if (r->expect && !strcasecmp(r->expect, "100-continue") &&
	    c->in_len == head_len) {
		evbuffer_add(c->out, "HTTP/1.1 100 Continue\r\n\r\n", 25);
		flush(c);
	}
}

static const struct timeval IDLE = {IDLE_TIMEOUT_S, 0};

/* Take the next request off the buffer if it is all there. */
static void process(struct front_conn *c)
{
	const char *eoh;
	struct kn_front_req *r;
	struct kn_http_framing fr;
	size_t head_len, body_len;
	bool http10 = false;
	int status;

	if (c->req || c->closing || !c->in_len)
		return;
	eoh = memmem(c->in + c->scanned, c->in_len - c->scanned, "\r\n\r\n",
		     4);
	if (!eoh) {
		if (bare_lf(c)) {
			refuse_framing(c, 400);
			return;
		}
		/* The next search starts where this one could not match. */
		c->scanned = c->in_len > 3 ? c->in_len - 3 : 0;
		if (c->in_len > c->f->o.max_head)
			refuse(c, 431, "headers_too_large",
			       "The request head is too large.");
		else if (!c->head_timing)
			c->head_timing =
				!evtimer_add(c->head_timer, &c->f->head_timeout);
		return;
	}
	if (c->head_timing) {
		evtimer_del(c->head_timer);
		c->head_timing = false;
	}
	c->scanned = (size_t)(eoh - c->in);
	head_len = c->scanned + 4;
	if (head_len > c->f->o.max_head) {
		refuse(c, 431, "headers_too_large",
			       "The request head is too large.");
		return;
	}
	if ((status = kn_http_framing_check(c->in, head_len, &fr))) {
		refuse_framing(c, status);
		return;
	}
	body_len = (size_t)fr.body_len;
	r = &c->slot;
	if (head_len + 1 > r->head_cap) {
		r->head_cap = head_len + 1 > 1024 ? head_len + 1 : 1024;
		r->head = kn_xrealloc(r->head, r->head_cap);
	}
	memcpy(r->head, c->in, head_len);
	r->head[head_len] = '\0';
	if (split_head(r, head_len, &http10) < 0) {
		refuse(c, 431, "headers_too_large",
		       "The request has too many header fields.");
		return;
	}
	if (!c->admitted)
		r->max_body = c->f->o.max_body;
	if ((c->in_len < head_len + body_len || body_len > r->max_body) &&
	    !admit(c, r))
		return; /* answered, and c may be gone */
	if (body_len > r->max_body) {
		refuse(c, 413, "request_too_large",
		       "The request body is over this server's limit.");
		return;
	}
	if (body_len > c->f->o.max_body && !c->large) {
		if (!large_room(c, body_len)) {
			refuse(c, 503, "busy",
			       "Too many large request bodies are in flight "
			       "from this client or in all; send it again "
			       "later.");
			return;
		}
		c->large = body_len;
		c->f->large_bytes += body_len;
	}
	if (c->in_len < head_len + body_len) {
		in_room_for(c, head_len + body_len);
		wait_body(c, r, head_len);
		return;
	}
	if (c->body_wait) {
		event_add(c->rev, &IDLE);
		c->body_wait = false;
	}
	c->admitted = false;
	take_body(c, r, head_len, body_len);
	c->keep_alive = http10 ? (r->connection &&
				  !strcasecmp(r->connection, "keep-alive"))
			       : !(r->connection &&
				   !strcasecmp(r->connection, "close"));
	if (http10 && c->keep_alive)
		kn_front_req_add_header(r, "Connection", "keep-alive");
	c->req = r;
	c->f->o.handler(r, c->f->o.arg);
}

/* A head did not come whole in time: drop the connection. */
static void on_head_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct front_conn *c = arg;

	(void)fd;
	(void)what;
	c->head_timing = false;
	if (!c->req)
		conn_free(c);
}

/* Room for a read of at least IN_READ_MIN at the input's end. */
static void in_reserve(struct front_conn *c)
{
	size_t cap;

	if (c->in_cap - c->in_len >= IN_READ_MIN)
		return;
	cap = c->in_cap ? c->in_cap * 2 : IN_FIRST;
	while (cap - c->in_len < IN_READ_MIN)
		cap *= 2;
	c->in = kn_xrealloc(c->in, cap);
	c->in_cap = cap;
}

/* ---- upgraded connections ---- */

static void on_tunnel_end(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	conn_free(arg);
}

/* The tunnel is over: freed (and on_closed called) on the next turn. */
static void tunnel_end(struct front_conn *c)
{
	struct kn_tunnel *t = c->tunnel;

	if (t->ended)
		return;
	t->ended = true;
	event_del(c->rev);
	event_del(c->wev);
	event_active(t->end_ev, EV_TIMEOUT, 1);
}

/* Hand what was read to the owner: false when the tunnel is over. */
static bool tunnel_deliver(struct front_conn *c)
{
	struct kn_tunnel *t = c->tunnel;
	size_t n = c->in_len;

	c->in_len = c->scanned = 0;
	if (n && !t->ops.on_data(t->arg, c->in, n))
		tunnel_end(c);
	return !t->ended && !t->released;
}

/* Read until the socket has nothing more or the owner pauses. */
static void tunnel_read(struct front_conn *c, short what)
{
	struct kn_tunnel *t = c->tunnel;
	ssize_t n;

	if (what & EV_TIMEOUT) { /* silent for IDLE_TIMEOUT_S */
		tunnel_end(c);
		return;
	}
	if (c->write_wants_read && !flush(c))
		return;
	if (!tunnel_deliver(c))
		return;
	while (!t->paused) {
		in_reserve(c);
		n = conn_read(c, c->in, c->in_cap);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n <= 0) {
			tunnel_end(c);
			return;
		}
		c->in_len = (size_t)n;
		if (!tunnel_deliver(c))
			return;
		/* A plain socket is read again on its next event. */
		if (!c->ssl || SSL_pending(c->ssl) <= 0)
			return;
	}
}

struct kn_tunnel *kn_front_req_upgrade(struct kn_front_req *r,
				       const char *protocol, const char *owner,
				       const struct kn_tunnel_ops *ops,
				       void *arg)
{
	struct front_conn *c = r->conn;
	struct kn_tunnel *t = kn_xcalloc(1, sizeof(*t));

	t->conn = c;
	t->ops = *ops;
	t->arg = arg;
	kn_strlcpy(t->owner, owner ? owner : "", sizeof(t->owner));
	t->end_ev = event_new(c->f->base, -1, 0, on_tunnel_end, c);
	evbuffer_add_printf(c->out,
			    "HTTP/1.1 101 Switching Protocols\r\n"
			    "Connection: Upgrade\r\nUpgrade: %s\r\n",
			    protocol);
	kn_buf_append(&r->headers, "\r\n", 2);
	evbuffer_add(c->out, r->headers.data, r->headers.len);
	r->headers.len = 0;
	c->req = NULL;
	free(r->body_base);
	r->body = r->body_base = NULL;
	large_release(c);
	r->on_gone = NULL;
	c->tunnel = t;
	event_add(c->rev, &IDLE);
	/* Bytes that came behind the request head are the tunnel's. */
	if (c->in_len)
		event_active(c->rev, EV_READ, 1);
	flush(c);
	return t;
}

void kn_tunnel_write(struct kn_tunnel *t, const void *data, size_t len)
{
	struct front_conn *c = t->conn;

	if (t->ended || t->released || !len)
		return;
	evbuffer_add(c->out, data, len);
	if (flush(c) && evbuffer_get_length(c->out) > KN_TUNNEL_LOW_WATER)
		t->draining = true;
}

size_t kn_tunnel_pending(const struct kn_tunnel *t)
{
	return evbuffer_get_length(t->conn->out);
}

void kn_tunnel_pause(struct kn_tunnel *t, bool paused)
{
	struct front_conn *c = t->conn;

	if (t->ended || t->released || t->paused == paused)
		return;
	t->paused = paused;
	if (paused) {
		event_del(c->rev);
		return;
	}
	event_add(c->rev, &IDLE);
	/* TLS may hold decrypted bytes the socket will not signal again. */
	if (c->ssl && SSL_pending(c->ssl) > 0)
		event_active(c->rev, EV_READ, 1);
}

void kn_tunnel_close(struct kn_tunnel *t)
{
	struct front_conn *c = t->conn;

	t->released = true;
	if (t->ended)
		return;
	/* Read and dropped until the peer closes too (on_read). */
	event_add(c->rev, &IDLE);
	c->closing = true;
	flush(c);
}

size_t kn_front_tunnels_of(const struct kn_front *f, const char *owner)
{
	size_t n = 0;

	for (const struct front_conn *c = f->conns; c; c = c->next)
		n += c->tunnel && !c->tunnel->released &&
		     !strcmp(c->tunnel->owner, owner);
	return n;
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
	struct front_conn *c = arg;
	char drop[4096];
	bool got = false;
	ssize_t n;

	if (what & EV_TIMEOUT) {
		if (!c->req)
			conn_free(c);
		return;
	}
	if (c->tunnel && !c->closing) {
		tunnel_read(c, what);
		return;
	}
	if (c->write_wants_read && !flush(c))
		return;
	if (c->closing) {
		/* Refused or ending: what follows is read and dropped (raw,
		   under TLS too: it is never looked at). */
		n = read(fd, drop, sizeof(drop));
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
			conn_free(c);
		return;
	}
	/* OpenSSL may hold decrypted bytes the socket no longer signals. */
	do {
		in_reserve(c);
		n = conn_read(c, c->in + c->in_len, c->in_cap - c->in_len);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			break;
		if (n <= 0) {
			conn_free(c);
			return;
		}
		got = true;
		c->in_len += (size_t)n;
		/* Do not hoard a client's pipeline beyond one request's
		   worth. */
		if (c->req &&
		    c->in_len > c->f->o.max_head + c->f->o.max_body) {
			c->closing = true;
			return;
		}
	} while (c->ssl && SSL_pending(c->ssl) > 0);
	if (got)
		process(c);
}

static void conn_free(struct front_conn *c)
{
	struct kn_front_req *r = c->req;
	struct kn_tunnel *t = c->tunnel;

	if (t) {
		c->tunnel = NULL;
		if (!t->released && t->ops.on_closed)
			t->ops.on_closed(t->arg);
		event_free(t->end_ev);
		free(t);
	}
	large_release(c);
	if (r) {
		c->req = NULL;
		if (r->on_gone)
			r->on_gone(r->gone_arg);
	}
	KN_FREE_ALL(c->slot.head, c->slot.body_base);
	kn_buf_release(&c->slot.headers);
	KN_DLIST_UNLINK(c->f->conns, c);
	event_free(c->rev);
	event_free(c->wev);
	event_free(c->head_timer);
	c->f->n_conns--;
	SSL_free(c->ssl);
	close(c->fd);
	free(c->in);
	evbuffer_free(c->out);
	free(c);
}

static bool same_client(const struct sockaddr_storage *a,
			const struct sockaddr *b)
{
	if (a->ss_family != b->sa_family)
		return false;
	if (b->sa_family == AF_INET)
		return !memcmp(&((const struct sockaddr_in *)a)->sin_addr,
			       &((const struct sockaddr_in *)b)->sin_addr,
			       sizeof(struct in_addr));
	if (b->sa_family == AF_INET6)
		return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
			       &((const struct sockaddr_in6 *)b)->sin6_addr,
			       sizeof(struct in6_addr));
	return true;
}

/* Whether a connection from sa is over a cap (the scan is short: at
   most max_conns, and accepting is rare next to requests). */
static bool over_cap(const struct kn_front *f, const struct sockaddr *sa)
{
	int same = 0;

	if (f->n_conns >= f->o.max_conns)
		return true;
	for (const struct front_conn *c = f->conns; c; c = c->next)
		if (same_client(&c->peer, sa) &&
		    ++same >= f->o.max_conns_per_client)
			return true;
	return false;
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd,
		      struct sockaddr *sa, int socklen, void *arg)
{
	struct kn_front *f = arg;
	struct front_conn *c;
	int one = 1;

	(void)l;
	if (over_cap(f, sa)) {
		/* Under TLS no plain answer can be read: just closed. */
		if (!f->o.tls) {
			ssize_t n = send(fd, f->busy, (size_t)f->busy_len,
					 MSG_NOSIGNAL);
			(void)n; /* best effort: closed either way */
		}
		close(fd);
		return;
	}
	c = kn_xcalloc(1, sizeof(*c));
	if (f->o.tls && !(c->ssl = tls_session_new(f->o.tls, fd))) {
		kn_log(KN_LOG_WARN, "%s: cannot start a TLS session",
		       f->o.name);
		free(c);
		close(fd);
		return;
	}
	if (socklen > 0 && (size_t)socklen <= sizeof(c->peer))
		memcpy(&c->peer, sa, (size_t)socklen);
	f->n_conns++;
	/* An answer is one writev: never held back waiting for an ACK. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c->f = f;
	c->fd = fd;
	c->out = evbuffer_new();
	c->slot.conn = c;
	kn_buf_init(&c->slot.headers, HEADERS_BYTES_MAX);
	c->rev = event_new(f->base, fd, EV_READ | EV_PERSIST, on_read, c);
	c->wev = event_new(f->base, fd, EV_WRITE, on_write, c);
	c->head_timer = evtimer_new(f->base, on_head_timeout, c);
	c->next = f->conns;
	if (f->conns)
		f->conns->prev = c;
	f->conns = c;
	event_add(c->rev, &IDLE);
	/* The first head is due within the head timeout too. */
	c->head_timing = !evtimer_add(c->head_timer, &f->head_timeout);
}

static void on_accept_error(struct evconnlistener *l, void *arg)
{
	struct kn_front *f = arg;
	int err = EVUTIL_SOCKET_ERROR();
	struct timeval pause = {0, 100 * 1000};
	time_t now = time(NULL);

	f->accept_failures++;
	if ((err == EMFILE || err == ENFILE) && f->reserve_fd >= 0) {
		int fd;
		close(f->reserve_fd);
		fd = accept(evconnlistener_get_fd(l), NULL, NULL);
		if (fd >= 0)
			close(fd);
		f->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	}
	/* Level-triggered: left enabled, the listener would fail again at
	   once and spin. */
	evconnlistener_disable(l);
	evtimer_add(f->resume, &pause);
	if (now != f->failures_logged_s) {
		kn_log(KN_LOG_WARN,
		       "%s: cannot accept connections: %s (%lld times "
		       "since the last report)",
		       f->o.name, strerror(err), f->accept_failures);
		f->accept_failures = 0;
		f->failures_logged_s = now;
	}
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
	struct kn_front *f = arg;

	(void)fd;
	(void)what;
	evconnlistener_enable(f->listener);
}

static struct timeval ms_timeval(int64_t ms)
{
	return (struct timeval){(time_t)(ms / 1000),
				(suseconds_t)(ms % 1000 * 1000)};
}

bool kn_host_is_loopback(const char *host)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC,
				 .ai_socktype = SOCK_STREAM};
	struct addrinfo *ai = NULL;
	bool loopback = true;

	/* Resolved as listening does, so a name cannot hide an address. */
	if (getaddrinfo(host, NULL, &hints, &ai) != 0)
		return false;
	for (const struct addrinfo *a = ai; a && loopback; a = a->ai_next) {
		if (a->ai_family == AF_INET)
			loopback = (ntohl(((const struct sockaddr_in *)
						   a->ai_addr)
						  ->sin_addr.s_addr) >>
				    24) == 127;
		else if (a->ai_family == AF_INET6)
			loopback = IN6_IS_ADDR_LOOPBACK(
				&((const struct sockaddr_in6 *)a->ai_addr)
					 ->sin6_addr);
		else
			loopback = false;
	}
	freeaddrinfo(ai);
	return loopback;
}

int kn_http_listen(const char *host, int *port, bool reuse_port,
		   struct kn_error *err)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC,
				 .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
	struct addrinfo *ai = NULL;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char service[16];
	int fd = -1, one = 1, rc;

	snprintf(service, sizeof(service), "%d", *port);
	if ((rc = getaddrinfo(host, service, &hints, &ai)) != 0)
		return kn_errorf(err, KN_EINVAL, "listen", "listen: %s: %s",
				 host, gai_strerror(rc));
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
		    0);
	if (fd < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    (reuse_port && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one,
				      sizeof(one)) < 0) ||
	    /* Accepted sockets inherit it: answers go out whole, without
	     * waiting for a delayed ACK (~40 ms on kept-alive connections). */
	    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0 ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 ||
	    listen(fd, LISTEN_BACKLOG) < 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
		rc = kn_errorf(err, KN_EUNAVAIL, "listen",
			       "cannot listen on %s:%d: %s", host, *port,
			       strerror(errno));
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return rc;
	}
	freeaddrinfo(ai);
	*port = ntohs(ss.ss_family == AF_INET6
			      ? ((struct sockaddr_in6 *)&ss)->sin6_port
			      : ((struct sockaddr_in *)&ss)->sin_port);
	return fd;
}

struct kn_front *kn_front_new(struct event_base *base, int fd,
			      const struct kn_front_options *opts)
{
	struct kn_front *f = kn_xcalloc(1, sizeof(*f));

	f->base = base;
	f->o = *opts;
	f->head_timeout = ms_timeval(opts->head_timeout_ms);
	f->busy_len = refusal(f, f->busy, sizeof(f->busy), 503, "server_error",
			      "too_many_connections",
			      "Too many open connections.");
	f->body_idle = ms_timeval(opts->body_idle_ms);
	f->listener = evconnlistener_new(base, on_accept, f,
					 LEV_OPT_CLOSE_ON_FREE |
						 LEV_OPT_CLOSE_ON_EXEC,
					 -1, fd);
	if (!f->listener) {
		close(fd);
		free(f);
		return NULL;
	}
	evconnlistener_set_error_cb(f->listener, on_accept_error);
	f->resume = evtimer_new(base, on_resume, f);
	f->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	return f;
}

void kn_front_free(struct kn_front *f)
{
	if (!f)
		return;
	evconnlistener_free(f->listener);
	while (f->conns)
		conn_free(f->conns);
	if (f->resume)
		event_free(f->resume);
	if (f->reserve_fd >= 0)
		close(f->reserve_fd);
	free(f);
}
