/*
 * Upstream connections: one kept-alive HTTP/1.1 connection to a model
 * server, one request at a time, on raw non-blocking sockets.
 *
 * libevent's evhttp client was the first version: it turns reading and
 * writing on and off around every request (three epoll_ctl calls), sizes
 * every read with an ioctl and defers every write to the next turn of the
 * loop, which together cost a third of the gateway's time per request.
 * Here the read event is added once per connection and stays; a request
 * is written at once (the write event is only for connecting and for a
 * full socket buffer); a read is one read(2). So a proxied request costs
 * the upstream side one write and one read.
 *
 * Answers are parsed as they come: status line, headers (at most
 * HEAD_MAX bytes), then a body framed by Content-Length, chunked
 * encoding, or the end of the connection; each piece of body goes to the
 * handler as it arrives. A kept-alive connection the server closed while
 * idle is found out when the next request gets nothing back: that request
 * is sent again once on a fresh connection before anything is reported.
 *
 * To an https:// replica the same runs over an OpenSSL session: the
 * handshake happens inside the first write (the server's certificate and
 * name verified), reads take all OpenSSL holds, writes go a record at a
 * time.
 */
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "gateway/internal.h"

/* An answer's status line and headers; model servers send a handful. */
#define HEAD_MAX (64 * 1024)
/* One read(2); larger answers take more turns of the loop. */
#define READ_CHUNK (64 * 1024)

enum parse_state {
	P_HEAD,        /* status line and headers */
	P_LENGTH,      /* Content-Length body */
	P_CHUNK_SIZE,
	P_CHUNK_DATA,
	P_CHUNK_CRLF,
	P_TRAILERS,
	P_UNTIL_CLOSE, /* no framing: the body ends with the connection */
};

struct gw_conn {
	struct event_base *base;
	struct sockaddr_storage addr;
	socklen_t addr_len;
	char host[256];
	int port;
	struct timeval timeout;

	int fd; /* -1 when closed */
	SSL_CTX *tls;  /* https: the context sessions start from, or NULL */
	SSL *ssl;      /* the open connection's session */
	bool write_wants_read; /* SSL_write waits on the server's bytes */
	struct event *rev, *wev;
	bool connecting;
	int answers; /* answered on this connection since it opened */
	struct evbuffer *out, *in, *piece;

	/* the request in flight */
	const struct gw_up_handler *h;
	void *arg;
	const char *path, *host_header, *accept, *body;
	size_t body_len;
	bool resent;
	bool got_any; /* any byte of the answer */

	enum parse_state state;
	int status;
	bool keep_alive, chunked;
	int64_t left;
	char *head; /* the answer's head, split in place into hdrs */
	size_t head_alloc;
	struct gw_headers hdrs;
};

static void on_read(evutil_socket_t fd, short what, void *arg);
static void on_write(evutil_socket_t fd, short what, void *arg);

struct gw_conn *gw_conn_new(struct event_base *base, const char *host,
			    int port, int64_t timeout_ms, SSL_CTX *tls)
{
	struct gw_conn *c = kn_xcalloc(1, sizeof(*c));

	if (tls && SSL_CTX_up_ref(tls))
		c->tls = tls;
	c->base = base;
	c->fd = -1;
	kn_strlcpy(c->host, host, sizeof(c->host));
	c->port = port;
	c->timeout.tv_sec = (time_t)(timeout_ms / 1000);
	c->timeout.tv_usec = (suseconds_t)(timeout_ms % 1000) * 1000;
	c->out = evbuffer_new();
	c->in = evbuffer_new();
	c->piece = evbuffer_new();
	return c;
}

static void conn_close(struct gw_conn *c)
{
	if (c->rev)
		event_free(c->rev);
	if (c->wev)
		event_free(c->wev);
	c->rev = c->wev = NULL;
	SSL_free(c->ssl);
	c->ssl = NULL;
	c->write_wants_read = false;
	ERR_clear_error();
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->connecting = false;
	c->answers = 0;
	evbuffer_drain(c->out, evbuffer_get_length(c->out));
	evbuffer_drain(c->in, evbuffer_get_length(c->in));
}

void gw_conn_free(struct gw_conn *c)
{
	if (!c)
		return;
	conn_close(c);
	SSL_CTX_free(c->tls);
	free(c->head);
	evbuffer_free(c->out);
	evbuffer_free(c->in);
	evbuffer_free(c->piece);
	free(c);
}

static int resolve(struct gw_conn *c)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_NUMERICSERV};
	struct addrinfo *ai;
	char service[16];

	if (c->addr_len)
		return 0;
	snprintf(service, sizeof(service), "%d", c->port);
	/* Replica addresses are IP addresses; a name resolves, blocking,
	 * once per connection's life. */
	if (getaddrinfo(c->host, service, &hints, &ai) != 0)
		return -EHOSTUNREACH;
	memcpy(&c->addr, ai->ai_addr, ai->ai_addrlen);
	c->addr_len = ai->ai_addrlen;
	freeaddrinfo(ai);
	return 0;
}

static int conn_open(struct gw_conn *c)
{
	int one = 1, rc;

	if ((rc = resolve(c)) < 0)
		return rc;
	c->fd = socket(c->addr.ss_family,
		       SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return -errno;
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(c->fd, (struct sockaddr *)&c->addr, c->addr_len) < 0) {
		if (errno != EINPROGRESS) {
			rc = -errno;
			conn_close(c);
			return rc;
		}
		c->connecting = true;
	}
	c->rev = event_new(c->base, c->fd, EV_READ | EV_PERSIST, on_read, c);
	c->wev = event_new(c->base, c->fd, EV_WRITE, on_write, c);
	if (!c->rev || !c->wev) {
		conn_close(c);
		return -ENOMEM;
	}
	if (c->tls &&
	    (!(c->ssl = kn_tls_client_session(c->tls, c->host)) ||
	     SSL_set_fd(c->ssl, c->fd) != 1)) {
		conn_close(c);
		return -EPROTO;
	}
	if (c->ssl)
		SSL_set_connect_state(c->ssl);
	event_add(c->rev, NULL);
	if (c->connecting)
		event_add(c->wev, NULL);
	return 0;
}

/* A failed TLS call: -EAGAIN to wait (noting which way), else a
   negative errno, logging why a handshake failed. */
static int tls_failure(struct gw_conn *c, int n, bool writing)
{
	int e = SSL_get_error(c->ssl, n);
	long verify = SSL_get_verify_result(c->ssl);

	ERR_clear_error();
	if (e == SSL_ERROR_WANT_READ) {
		c->write_wants_read = writing;
		return -EAGAIN;
	}
	if (e == SSL_ERROR_WANT_WRITE) {
		event_add(c->wev, NULL);
		return -EAGAIN;
	}
	if (verify != X509_V_OK)
		kn_log(KN_LOG_WARN, "gateway: https://%s:%d: the certificate "
		       "is not trusted: %s", c->host, c->port,
		       X509_verify_cert_error_string(verify));
	return e == SSL_ERROR_ZERO_RETURN ? 0 : -ECONNRESET;
}

/* Write from the output: bytes, or a negative errno (-EAGAIN to wait). */
static int up_write(struct gw_conn *c)
{
	int n;

	if (!c->ssl) {
		n = evbuffer_write(c->out, c->fd);
		return n < 0 ? (errno == EINTR ? -EAGAIN : -errno) : n;
	}
	if ((n = kn_tls_write_buffer(c->ssl, c->out)) > 0)
		return n;
	n = tls_failure(c, n, true);
	return n ? n : -ECONNRESET;
}

/* Like read(2), into buf: bytes, 0 at the end, or a negative errno. */
static ssize_t up_read(struct gw_conn *c, char *buf, size_t cap)
{
	ssize_t n;

	if (!c->ssl) {
		n = read(c->fd, buf, cap);
		return n < 0 ? (errno == EINTR ? -EAGAIN : -errno) : n;
	}
	n = SSL_read(c->ssl, buf, (int)cap);
	return n > 0 ? n : tls_failure(c, (int)n, false);
}

/* Write what is waiting; arm the write event for what the socket refused. */
static int flush_out(struct gw_conn *c)
{
	c->write_wants_read = false;
	while (evbuffer_get_length(c->out) > 0) {
		int n = up_write(c);
		if (n == -EAGAIN || n == -EWOULDBLOCK)
			break;
		if (n < 0)
			return n;
	}
	/* Waiting on the server's bytes: on_read writes again. */
	if (evbuffer_get_length(c->out) > 0 && !c->write_wants_read)
		event_add(c->wev, NULL);
	return 0;
}

const char *gw_headers_get(const struct gw_headers *h, const char *name)
{
	int first = tolower((unsigned char)name[0]);

	for (size_t i = 0; i < h->n; i++)
		if (tolower((unsigned char)h->names[i][0]) == first &&
		    !strcasecmp(h->names[i], name))
			return h->values[i];
	return NULL;
}

static char *put(char *p, const char *s, size_t n)
{
	memcpy(p, s, n);
	return p + n;
}
#define PUT_LIT(p, s) put(p, s, sizeof(s) - 1)

/*
 * The request line and fields, written straight into the output's own
 * space: no printf, no copy from pieces. 0, or -1 when libevent has no
 * memory.
 */
static int put_request_head(struct gw_conn *c)
{
	static const char LINE_END[] = " HTTP/1.1\r\nHost: ";
	static const char TYPE[] = "\r\nContent-Type: application/json\r\n"
				   "Content-Length: ";
	size_t path_len = strlen(c->path), host_len = strlen(c->host_header),
	       accept_len = c->accept ? strlen(c->accept) : 0;
	size_t need = 5 + path_len + sizeof(LINE_END) + host_len +
		      sizeof(TYPE) + 20 + 10 + accept_len + 4;
	struct evbuffer_iovec space;
	char *p;

	if (evbuffer_reserve_space(c->out, (ev_ssize_t)need, &space, 1) < 1)
		return -1;
	p = space.iov_base;
	p = PUT_LIT(p, "POST ");
	p = put(p, c->path, path_len);
	p = PUT_LIT(p, LINE_END);
	p = put(p, c->host_header, host_len);
	p = PUT_LIT(p, TYPE);
	p = kn_put_uint(p, c->body_len);
	if (c->accept) {
		p = PUT_LIT(p, "\r\nAccept: ");
		p = put(p, c->accept, accept_len);
	}
	p = PUT_LIT(p, "\r\n\r\n");
	space.iov_len = (size_t)(p - (char *)space.iov_base);
	return evbuffer_commit_space(c->out, &space, 1);
}

static int send_request(struct gw_conn *c)
{
	int rc;

	if (c->fd < 0 && (rc = conn_open(c)) < 0)
		return rc;
	if (put_request_head(c) < 0)
		return -ENOMEM;
	evbuffer_add(c->out, c->body, c->body_len);
	c->state = P_HEAD;
	c->status = 0;
	c->keep_alive = true;
	c->chunked = false;
	c->left = -1;
	c->got_any = false;
	c->hdrs.n = 0;
	/* The answer's deadline: the timeout counts from now and from each
	 * read (a persistent event's timeout restarts when it fires). */
	event_add(c->rev, &c->timeout);
	return c->connecting ? 0 : flush_out(c);
}

int gw_conn_request(struct gw_conn *c, const char *path,
		    const char *host_header, const char *accept,
		    const char *body, size_t len,
		    const struct gw_up_handler *h, void *arg)
{
	int rc;

	c->path = path;
	c->host_header = host_header;
	c->accept = accept;
	c->body = body;
	c->body_len = len;
	c->resent = false;
	if ((rc = send_request(c)) < 0) {
		conn_close(c);
		return rc;
	}
	c->h = h;
	c->arg = arg;
	return 0;
}

/* The request is over: report it, leaving the connection ready first. */
static void finish(struct gw_conn *c, enum gw_up_result result)
{
	const struct gw_up_handler *h = c->h;
	void *arg = c->arg;

	c->h = NULL;
	c->arg = NULL;
	/* Answered before the request was all written (an early error):
	 * the rest of it must not be taken for the next request. */
	if (evbuffer_get_length(c->out))
		c->keep_alive = false;
	/* An idle connection's read event keeps its deadline; on_read
	 * ignores it when nothing is in flight. */
	if (result != GW_UP_OK || !c->keep_alive)
		conn_close(c);
	else
		c->answers++;
	h->done(arg, result);
}

static void fail(struct gw_conn *c, enum gw_up_result result)
{
	/* A kept-alive connection closed while idle: once more, afresh. */
	if (result == GW_UP_FAILED && c->answers > 0 && !c->resent &&
	    !c->got_any) {
		conn_close(c);
		c->resent = true;
		if (send_request(c) == 0)
			return;
	}
	finish(c, c->got_any && c->state != P_HEAD ? GW_UP_CUT : result);
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
	struct gw_conn *c = arg;
	int err = 0;
	socklen_t len = sizeof(err);

	(void)what;
	if (c->connecting) {
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 ||
		    err) {
			fail(c, GW_UP_FAILED);
			return;
		}
		c->connecting = false;
	}
	if (flush_out(c) < 0)
		fail(c, GW_UP_FAILED);
}

/* Hand n bytes of body (n < 0: all there is) to the handler. */
static void pass_body(struct gw_conn *c, int64_t n)
{
	size_t have = evbuffer_get_length(c->in);
	size_t take = n < 0 || (size_t)n > have ? have : (size_t)n;

	if (take == 0)
		return;
	evbuffer_remove_buffer(c->in, c->piece, take);
	c->h->body(c->arg, c->piece);
	evbuffer_drain(c->piece, evbuffer_get_length(c->piece));
	if (c->left > 0)
		c->left -= (int64_t)take;
}

/* "HTTP/1.<minor> <status>": 0, or -1 when it is not that. */
static int status_line(const char *p, int *minor, int *status)
{
	if (strncmp(p, "HTTP/1.", 7) || !isdigit((unsigned char)p[7]))
		return -1;
	*minor = p[7] - '0';
	for (p += 8; isdigit((unsigned char)*p); p++)
		*minor = *minor > 9 ? 10 : *minor * 10 + (*p - '0');
	if (*p != ' ')
		return -1;
	while (*p == ' ')
		p++;
	if (!isdigit((unsigned char)p[0]) || !isdigit((unsigned char)p[1]) ||
	    !isdigit((unsigned char)p[2]) || isdigit((unsigned char)p[3]) ||
	    p[0] == '0')
		return -1;
	*status = (p[0] - '0') * 100 + (p[1] - '0') * 10 + (p[2] - '0');
	return 0;
}

/*
 * Split the head (len bytes at c->head) into the status and fields, and
 * note the framing. 0, or -1 when it is not an HTTP/1.x answer.
 */
static int split_head(struct gw_conn *c, size_t len)
{
	char *p = c->head, *end = c->head + len, *name, *v;
	int minor = 1, rc;

	c->hdrs.n = 0;
	c->left = -1;
	c->chunked = false;
	if (status_line(p, &minor, &c->status) < 0)
		return -1;
	c->keep_alive = minor >= 1;
	p = memchr(p, '\n', len);
	if (!p)
		return -1;
	for (p++; (rc = kn_http_field_next(&p, end, &name, &v)) > 0;) {
		if (c->hdrs.n == GW_HEADERS_MAX)
			return -1;
		if (!strcasecmp(name, "Content-Length")) {
			/* One, and digits only: a replica that frames its
			   answer two ways is refused, not guessed at. */
			if (c->left >= 0 ||
			    kn_http_content_length(v, strlen(v), &c->left) < 0)
				return -1;
		}
		else if (!strcasecmp(name, "Transfer-Encoding") &&
			 strcasestr(v, "chunked"))
			c->chunked = true;
		else if (!strcasecmp(name, "Connection"))
			c->keep_alive = strcasecmp(v, "close") &&
					(minor >= 1 ||
					 !strcasecmp(v, "keep-alive"));
		c->hdrs.names[c->hdrs.n] = name;
		c->hdrs.values[c->hdrs.n++] = v;
	}
	return rc;
}

/* 1: the answer is complete; 0: more is needed; -1: not HTTP. */
static int parse(struct gw_conn *c)
{
	for (;;) {
		char *line;
		size_t len;

		switch (c->state) {
		case P_HEAD: {
			struct evbuffer_ptr eoh =
				evbuffer_search(c->in, "\r\n\r\n", 4, NULL);
			size_t n;
			if (eoh.pos < 0)
				return evbuffer_get_length(c->in) > HEAD_MAX ? -1
									     : 0;
			n = (size_t)eoh.pos + 4;
			if (n > HEAD_MAX)
				return -1;
			if (n + 1 > c->head_alloc) {
				c->head_alloc = n + 1 > 1024 ? n + 1 : 1024;
				c->head = kn_xrealloc(c->head, c->head_alloc);
			}
			evbuffer_remove(c->in, c->head, n);
			c->head[n] = '\0';
			if (split_head(c, n) < 0)
				return -1;
			if (c->status < 200) /* 100 Continue: the real one follows */
				continue;
			c->h->headers(c->arg, c->status, &c->hdrs);
			if (c->status == 204 || c->status == 304)
				return 1;
			if (c->chunked)
				c->state = P_CHUNK_SIZE;
			else if (c->left >= 0)
				c->state = P_LENGTH;
			else {
				c->state = P_UNTIL_CLOSE;
				c->keep_alive = false;
			}
			continue;
		}
		case P_CHUNK_SIZE:
		case P_TRAILERS:
			line = evbuffer_readln(c->in, &len, EVBUFFER_EOL_CRLF);
			if (!line)
				return evbuffer_get_length(c->in) > HEAD_MAX ? -1
									     : 0;
			if (c->state == P_CHUNK_SIZE) {
				char *end;
				c->left = strtoll(line, &end, 16);
				if (end == line || c->left < 0) {
					free(line);
					return -1;
				}
				c->state = c->left ? P_CHUNK_DATA : P_TRAILERS;
			} else if (!len) { /* P_TRAILERS: the blank line ends */
				free(line);
				return 1;
			}
			free(line);
			break;
		case P_LENGTH:
			pass_body(c, c->left);
			return c->left == 0 ? 1 : 0;
		case P_CHUNK_DATA:
			pass_body(c, c->left);
			if (c->left > 0)
				return 0;
			c->state = P_CHUNK_CRLF;
			break;
		case P_CHUNK_CRLF:
			if (evbuffer_get_length(c->in) < 2)
				return 0;
			evbuffer_drain(c->in, 2);
			c->state = P_CHUNK_SIZE;
			break;
		case P_UNTIL_CLOSE:
			pass_body(c, -1);
			return 0;
		}
	}
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
	struct gw_conn *c = arg;
	char buf[READ_CHUNK];
	bool got = false;
	ssize_t n;
	int rc;

	if (what & EV_TIMEOUT) {
		if (c->h)
			finish(c, GW_UP_TIMEOUT);
		return;
	}
	(void)fd;
	if (c->write_wants_read && flush_out(c) < 0) {
		if (c->h)
			fail(c, GW_UP_FAILED);
		else
			conn_close(c);
		return;
	}
	/* OpenSSL may hold decrypted bytes the socket no longer signals. */
	do {
		n = up_read(c, buf, sizeof(buf));
		if (n == -EAGAIN || n == -EWOULDBLOCK)
			break;
		if (!c->h) {
			/* Idle: the server closed it, or spoke out of turn. */
			conn_close(c);
			return;
		}
		if (n <= 0) {
			if (n == 0 && c->state == P_UNTIL_CLOSE)
				finish(c, GW_UP_OK);
			else
				fail(c, GW_UP_FAILED);
			return;
		}
		c->got_any = got = true;
		evbuffer_add(c->in, buf, (size_t)n);
	} while (c->ssl && SSL_pending(c->ssl) > 0);
	if (!got)
		return;
	rc = parse(c);
	if (rc < 0)
		finish(c, c->state != P_HEAD ? GW_UP_CUT : GW_UP_FAILED);
	else if (rc > 0) {
		/* Bytes past the answer were never asked for: do not reuse. */
		if (evbuffer_get_length(c->in))
			c->keep_alive = false;
		finish(c, GW_UP_OK);
	}
}
