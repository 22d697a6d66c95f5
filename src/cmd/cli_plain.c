/*
 * Plain HTTP/1.1 to a kiln server on the loopback, without libcurl: the
 * CLI's commands that users run in loops (submit, ls, show, cancel) would
 * otherwise spend most of their CPU time loading and relocating libcurl
 * and the thirty-odd libraries it pulls in, for one request to
 * 127.0.0.1. Anything else (https, another host, a proxy's path prefix)
 * stays with libcurl.
 *
 * The answer is read strictly and bounded, as any input is hostile: a
 * status line "HTTP/1.x NNN", header lines ending in CRLF within 64 KiB
 * in all, one Content-Length of at most 18 digits or Transfer-Encoding
 * chunked (not both), chunk sizes of at most 15 hex digits; anything
 * else is CLI_PLAIN_BAD, never a guess. The body's size is the sink's to
 * bound (the CLI caps it). One connection per request, Connection:
 * close: a loopback connect costs microseconds, and no state outlives a
 * request.
 */
#include "cmd/cli_plain.h"

#include "base/base.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define HEAD_MAX 65536
#define CHUNK_LINE_MAX 1024
/* A body up to this size goes in one send with the head. */
#define BODY_BEHIND_HEAD_MAX (64 * 1024)

struct reader {
	int fd;
	long deadline; /* kn_mono_ms; 0: none */
	char buf[HEAD_MAX];
	size_t pos, len;
	bool eof;
	char *why;
	size_t why_len;
};

static enum cli_plain_result say(struct reader *r, enum cli_plain_result rc,
				 const char *what)
{
	snprintf(r->why, r->why_len, "%s", what);
	return rc;
}

/* Wait for fd to be ready for events before the deadline: 0, or -1. */
static int wait_fd(int fd, short events, long deadline)
{
	struct pollfd p = {.fd = fd, .events = events};
	int left, n;

	do {
		left = deadline ? (int)(deadline - kn_mono_ms()) : -1;
		if (deadline && left <= 0)
			return -1;
		n = poll(&p, 1, left);
	} while (n < 0 && errno == EINTR);
	return n > 0 ? 0 : -1;
}

/* More bytes into the buffer (compacted first): 0, or LOST on a
   timeout or error; at EOF r->eof. */
static enum cli_plain_result fill(struct reader *r)
{
	ssize_t n;

	if (r->pos) {
		memmove(r->buf, r->buf + r->pos, r->len - r->pos);
		r->len -= r->pos;
		r->pos = 0;
	}
	if (r->len == sizeof(r->buf))
		return CLI_PLAIN_OK;
	if (wait_fd(r->fd, POLLIN, r->deadline) < 0)
		return say(r, CLI_PLAIN_LOST, "timed out waiting for the answer");
	do
		n = read(r->fd, r->buf + r->len, sizeof(r->buf) - r->len);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return say(r, CLI_PLAIN_LOST, strerror(errno));
	r->eof = n == 0;
	r->len += (size_t)n;
	return CLI_PLAIN_OK;
}

/* One CRLF-ended line of at most max bytes, NUL-terminated in place. */
static enum cli_plain_result read_line(struct reader *r, size_t max,
				       char **line)
{
	for (;;) {
		char *start = r->buf + r->pos;
		char *crlf = memmem(start, r->len - r->pos, "\r\n", 2);
		enum cli_plain_result rc;

		if (crlf && (size_t)(crlf - start) <= max) {
			*crlf = '\0';
			*line = start;
			r->pos += (size_t)(crlf - start) + 2;
			return CLI_PLAIN_OK;
		}
		/* A CR at the end may be the start of the CRLF. */
		if (crlf || r->len - r->pos > max + 1)
			return say(r, CLI_PLAIN_BAD, "a line of the answer is "
						     "too long");
		if ((rc = fill(r)) != CLI_PLAIN_OK)
			return rc;
		if (r->eof)
			return say(r, CLI_PLAIN_LOST,
				   "the connection closed mid-answer");
	}
}

struct framing {
	long status;
	bool chunked;
	long long length; /* -1: until the connection closes */
};

static bool digits(const char *s, size_t max)
{
	size_t n = strspn(s, "0123456789");

	return n > 0 && n <= max && s[n] == '\0';
}

/* The status line and header fields, up to the empty line. */
static enum cli_plain_result read_head(struct reader *r, struct framing *f)
{
	size_t budget = HEAD_MAX;
	bool has_length = false;
	char *line, *colon;
	enum cli_plain_result rc = read_line(r, budget, &line);

	if (rc != CLI_PLAIN_OK)
		return rc;
	if (strncmp(line, "HTTP/1.", 7) || (line[7] != '0' && line[7] != '1') ||
	    line[8] != ' ' || strspn(line + 9, "0123456789") != 3 ||
	    (line[12] != ' ' && line[12] != '\0'))
		return say(r, CLI_PLAIN_BAD, "the answer is not HTTP/1.x");
	f->status = strtol(line + 9, NULL, 10);
	f->length = -1;
	budget -= strlen(line);
	for (;;) {
		if ((rc = read_line(r, budget, &line)) != CLI_PLAIN_OK)
			return rc;
		if (!*line)
			break;
		if (strlen(line) + 2 > budget)
			return say(r, CLI_PLAIN_BAD, "the answer's head is too "
						     "long");
		budget -= strlen(line) + 2;
		colon = strchr(line, ':');
		if (!colon || colon == line)
			return say(r, CLI_PLAIN_BAD, "a header line of the "
						     "answer has no name");
		*colon++ = '\0';
		colon += strspn(colon, " \t");
		colon[strcspn(colon, " \t")] = '\0';
		if (!strcasecmp(line, "Content-Length")) {
			if (has_length || !digits(colon, 18))
				return say(r, CLI_PLAIN_BAD, "the answer's "
					   "Content-Length is not one number");
			has_length = true;
			f->length = strtoll(colon, NULL, 10);
		} else if (!strcasecmp(line, "Transfer-Encoding")) {
			if (strcasecmp(colon, "chunked"))
				return say(r, CLI_PLAIN_BAD, "the answer's "
					   "Transfer-Encoding is not chunked");
			f->chunked = true;
		}
	}
	if (f->chunked && has_length)
		return say(r, CLI_PLAIN_BAD, "the answer has both a length and "
					     "chunks");
	/* No body, whatever the fields say (RFC 9112 §6.3). */
	if (f->status == 204 || f->status == 304 || f->status < 200)
		f->length = 0;
	return CLI_PLAIN_OK;
}

struct out {
	cli_plain_sink sink;
	void *arg;
	long status;
};

/* Up to want bytes (-1: until EOF) of the body to the sink. */
static enum cli_plain_result copy_body(struct reader *r, struct out *o,
				       long long want)
{
	enum cli_plain_result rc;

	while (want != 0) {
		size_t have = r->len - r->pos;

		if (!have) {
			if ((rc = fill(r)) != CLI_PLAIN_OK)
				return rc;
			if (r->eof && want < 0)
				return CLI_PLAIN_OK;
			if (r->eof)
				return say(r, CLI_PLAIN_LOST, "the connection "
					   "closed mid-answer");
			continue;
		}
		if (want > 0 && (long long)have > want)
			have = (size_t)want;
		if (o->sink(o->arg, o->status, r->buf + r->pos, have) < 0)
			return say(r, CLI_PLAIN_STOPPED, "stopped");
		r->pos += have;
		if (want > 0)
			want -= (long long)have;
	}
	return CLI_PLAIN_OK;
}

static enum cli_plain_result copy_chunks(struct reader *r, struct out *o)
{
	enum cli_plain_result rc;
	char *line, *end;

	for (;;) {
		long long size;

		if ((rc = read_line(r, CHUNK_LINE_MAX, &line)) != CLI_PLAIN_OK)
			return rc;
		line[strcspn(line, "; \t")] = '\0';
		if (strspn(line, "0123456789abcdefABCDEF") != strlen(line) ||
		    !*line || strlen(line) > 15)
			return say(r, CLI_PLAIN_BAD, "a chunk of the answer "
						     "has no size");
		size = strtoll(line, &end, 16);
		if (size == 0)
			break;
		if ((rc = copy_body(r, o, size)) != CLI_PLAIN_OK)
			return rc;
		if ((rc = read_line(r, 0, &line)) != CLI_PLAIN_OK)
			return rc;
	}
	/* Trailer fields, ignored, up to the empty line. */
	do
		if ((rc = read_line(r, CHUNK_LINE_MAX, &line)) != CLI_PLAIN_OK)
			return rc;
	while (*line);
	return CLI_PLAIN_OK;
}

enum cli_plain_result cli_plain_read_answer(int fd, long deadline_ms,
					    cli_plain_sink sink, void *arg,
					    long *status, char *why,
					    size_t why_len)
{
	struct reader *r = kn_xcalloc(1, sizeof(*r));
	struct framing f = {0};
	struct out o = {.sink = sink, .arg = arg};
	enum cli_plain_result rc;

	r->fd = fd;
	r->deadline = deadline_ms;
	r->why = why;
	r->why_len = why_len;
	*status = 0;
	rc = read_head(r, &f);
	if (rc == CLI_PLAIN_OK) {
		*status = o.status = f.status;
		rc = f.chunked ? copy_chunks(r, &o) : copy_body(r, &o, f.length);
	}
	free(r);
	return rc;
}

/* host as an address: 127.0.0.1, ::1, or localhost (as 127.0.0.1). */
static int loopback_addr(const char *host, int port,
			 struct sockaddr_storage *sa, socklen_t *len)
{
	struct sockaddr_in *v4 = (struct sockaddr_in *)sa;
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)sa;

	memset(sa, 0, sizeof(*sa));
	if (!strcmp(host, "localhost"))
		host = "127.0.0.1";
	if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
		v4->sin_family = AF_INET;
		v4->sin_port = htons((uint16_t)port);
		*len = sizeof(*v4);
		return (ntohl(v4->sin_addr.s_addr) >> 24) == 127 ? 0 : -1;
	}
	if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
		v6->sin6_family = AF_INET6;
		v6->sin6_port = htons((uint16_t)port);
		*len = sizeof(*v6);
		return IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr) ? 0 : -1;
	}
	return -1;
}

bool cli_plain_url(const char *url, char *host, size_t host_len, int *port)
{
	struct sockaddr_storage sa;
	socklen_t len;
	const char *h, *end;
	char *tail;
	long p;

	if (strncmp(url, "http://", 7))
		return false;
	h = url + 7;
	if (*h == '[') {
		end = strchr(++h, ']');
		if (!end || end[1] != ':')
			return false;
	} else {
		end = strchr(h, ':');
		if (!end)
			return false;
	}
	if ((size_t)(end - h) >= host_len)
		return false;
	memcpy(host, h, (size_t)(end - h));
	host[end - h] = '\0';
	end += *end == ']' ? 2 : 1;
	errno = 0;
	p = strtol(end, &tail, 10);
	/* Nothing after the port: a path prefix is a proxy's, for libcurl. */
	if (errno || tail == end || (*tail && strcmp(tail, "/")) || p < 1 ||
	    p > 65535)
		return false;
	*port = (int)p;
	return loopback_addr(host, *port, &sa, &len) == 0;
}

/*
 * The whole request out: its head, then a large body from the caller's
 * own buffer (a model's part is 16 MiB: copying it behind the head cost
 * a fresh buffer and a copy of every byte), a small one behind the head
 * in one send. The head goes at once (TCP_NODELAY): the body follows it
 * without waiting for an acknowledgement. A send that makes no progress
 * for the timeout fails (SO_SNDTIMEO): a server that stops reading
 * cannot hold the CLI. 0, or -errno.
 */
static int send_request(int fd, struct kn_buf *head, const char *body,
			size_t body_len, int timeout_ms)
{
	struct timeval tv = {.tv_sec = timeout_ms / 1000,
			     .tv_usec = (timeout_ms % 1000) * 1000};
	int one = 1, rc;

	if (timeout_ms &&
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0)
		return -errno;
	if (body_len <= BODY_BEHIND_HEAD_MAX) {
		kn_buf_append(head, body, body_len);
		body_len = 0;
	} else {
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
	rc = kn_send_all(fd, head->data, head->len);
	if (rc == 0 && body_len)
		rc = kn_send_all(fd, body, body_len);
	return rc == -EAGAIN ? -ETIMEDOUT : rc;
}

enum cli_plain_result cli_plain_request(const char *host, int port,
					const char *method, const char *target,
					const char *headers, const char *body,
					size_t body_len, int timeout_ms,
					cli_plain_sink sink, void *arg,
					long *status, char *why, size_t why_len)
{
	struct sockaddr_storage sa;
	socklen_t sa_len;
	struct kn_buf req;
	long deadline = timeout_ms ? kn_mono_ms() + timeout_ms : 0;
	enum cli_plain_result rc;
	int fd, err;

	*status = 0;
	if (loopback_addr(host, port, &sa, &sa_len) < 0) {
		snprintf(why, why_len, "%s is not a loopback address", host);
		return CLI_PLAIN_REFUSED;
	}
	fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sa_len) < 0) {
		snprintf(why, why_len, "%s", strerror(errno));
		if (fd >= 0)
			close(fd);
		return CLI_PLAIN_REFUSED;
	}
	kn_buf_init(&req, SIZE_MAX);
	kn_buf_printf(&req,
		      "%s %s HTTP/1.1\r\nHost: %s%s%s:%d\r\n"
		      "Connection: close\r\nContent-Length: %zu\r\n%s\r\n",
		      method, target, strchr(host, ':') ? "[" : "", host,
		      strchr(host, ':') ? "]" : "", port, body ? body_len : 0,
		      headers ? headers : "");
	err = send_request(fd, &req, body, body ? body_len : 0, timeout_ms);
	kn_buf_release(&req);
	/* A server that answers before reading it all (an error) may have
	   closed its side: its answer is still worth reading. */
	if (err < 0 && err != -EPIPE && err != -ECONNRESET) {
		snprintf(why, why_len, "%s", strerror(-err));
		close(fd);
		return CLI_PLAIN_LOST;
	}
	rc = cli_plain_read_answer(fd, deadline, sink, arg, status, why,
				   why_len);
	close(fd);
	return rc;
}
