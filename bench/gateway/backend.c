/*
 * The model server stand-in of bench/gateway/run.py: an HTTP/1.1 server
 * that answers every request with the same small OpenAI chat completion
 * (with usage and an x-kiln-score header), as fast as one thread can, so
 * that what the benchmark measures is the proxy in front of it.
 *
 *   gateway-backend [PORT]     listen on 127.0.0.1:PORT (default 0: any)
 *
 * It prints "listening on 127.0.0.1:PORT" on stdout once it accepts
 * connections, and exits 0 on SIGTERM or SIGINT. One thread, epoll,
 * non-blocking sockets, keep-alive; requests are read whole (headers, then
 * Content-Length bytes of body) before the answer is written, the way a
 * real model server reads its JSON. Chunked request bodies are refused
 * (411): neither nginx nor kiln's gateway sends one for a sized request.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

/* A request larger than this is refused: the benchmark's body is ~150
 * bytes, and a bound keeps a broken client from growing the buffer. */
#define MAX_REQUEST 65536
#define MAX_EVENTS 256

static const char BODY[] =
	"{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion\",\"created\":0,"
	"\"model\":\"bench\",\"choices\":[{\"index\":0,\"message\":{\"role\":"
	"\"assistant\",\"content\":\"Hello from the benchmark backend.\"},"
	"\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":8,"
	"\"completion_tokens\":7,\"total_tokens\":15}}";

struct conn {
	struct conn *prev, *next; /* every open connection, freed on exit */
	int fd;
	char in[MAX_REQUEST];
	size_t in_len;
	char *out;
	size_t out_len, out_sent;
	bool closing; /* close once out is sent */
};

static char ok_reply[512];
static size_t ok_reply_len;

static const char TOO_BIG[] =
	"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\n"
	"Connection: close\r\n\r\n";
static const char NO_LENGTH[] =
	"HTTP/1.1 411 Length Required\r\nContent-Length: 0\r\n"
	"Connection: close\r\n\r\n";

static struct conn *conns;

static void conn_free(struct conn *c)
{
	if (!c)
		return;
	if (c->prev)
		c->prev->next = c->next;
	else
		conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	close(c->fd);
	free(c->out);
	free(c);
}

/* Value of header name in the header block [start, end), or NULL. */
static const char *header(const char *start, const char *end,
			  const char *name, size_t *len)
{
	size_t n = strlen(name);
	const char *line = memchr(start, '\n', (size_t)(end - start));

	while (line && line + 1 < end) {
		const char *next = memchr(line + 1, '\n', (size_t)(end - line - 1));
		const char *stop = next ? next : end;
		const char *p = line + 1;

		if ((size_t)(stop - p) > n && strncasecmp(p, name, n) == 0 &&
		    p[n] == ':') {
			p += n + 1;
			while (p < stop && (*p == ' ' || *p == '\t'))
				p++;
			*len = (size_t)(stop - p);
			if (*len && p[*len - 1] == '\r')
				(*len)--;
			return p;
		}
		line = next;
	}
	return NULL;
}

static int queue(struct conn *c, const char *data, size_t len)
{
	char *grown = realloc(c->out, c->out_len + len);

	if (!grown)
		return -1;
	memcpy(grown + c->out_len, data, len);
	c->out = grown;
	c->out_len += len;
	return 0;
}

/* Answer every whole request in c->in; 0, or -1 to drop the connection. */
static int serve_requests(struct conn *c)
{
	for (;;) {
		char *end = memmem(c->in, c->in_len, "\r\n\r\n", 4);
		const char *v;
		size_t vlen, head, body = 0, used;

		if (!end) {
			if (c->in_len == sizeof(c->in)) {
				c->closing = true;
				return queue(c, TOO_BIG, sizeof(TOO_BIG) - 1);
			}
			return 0;
		}
		head = (size_t)(end - c->in) + 4;
		if (header(c->in, end, "Transfer-Encoding", &vlen)) {
			c->closing = true;
			return queue(c, NO_LENGTH, sizeof(NO_LENGTH) - 1);
		}
		v = header(c->in, end, "Content-Length", &vlen);
		if (v)
			body = strtoul(v, NULL, 10);
		if (body > sizeof(c->in) - head) {
			c->closing = true;
			return queue(c, TOO_BIG, sizeof(TOO_BIG) - 1);
		}
		used = head + body;
		if (c->in_len < used)
			return 0;
		v = header(c->in, end, "Connection", &vlen);
		if (v && vlen == 5 && strncasecmp(v, "close", 5) == 0)
			c->closing = true;
		if (queue(c, ok_reply, ok_reply_len) != 0)
			return -1;
		memmove(c->in, c->in + used, c->in_len - used);
		c->in_len -= used;
		if (c->closing)
			return 0;
	}
}

/* Write what is queued; 1 when all is sent, 0 when the socket is full,
 * -1 on error. */
static int flush_out(struct conn *c)
{
	while (c->out_sent < c->out_len) {
		ssize_t n = send(c->fd, c->out + c->out_sent,
				 c->out_len - c->out_sent, MSG_NOSIGNAL);

		if (n < 0)
			return errno == EAGAIN ? 0 : -1;
		c->out_sent += (size_t)n;
	}
	c->out_len = c->out_sent = 0;
	return 1;
}

/* Read and answer; 0 to keep the connection, -1 to close it. */
static int on_ready(int ep, struct conn *c, uint32_t events)
{
	int sent;

	if (events & (EPOLLERR | EPOLLHUP))
		return -1;
	while (!c->closing && c->in_len < sizeof(c->in)) {
		ssize_t n = recv(c->fd, c->in + c->in_len,
				 sizeof(c->in) - c->in_len, 0);

		if (n == 0)
			return -1;
		if (n < 0) {
			if (errno == EAGAIN)
				break;
			return -1;
		}
		c->in_len += (size_t)n;
		if (serve_requests(c) != 0)
			return -1;
	}
	sent = flush_out(c);
	if (sent < 0)
		return -1;
	if (sent == 1 && c->closing)
		return -1;
	struct epoll_event ev = {
		.events = EPOLLIN | (sent == 0 ? EPOLLOUT : 0),
		.data.ptr = c,
	};
	return epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
}

static void accept_all(int ep, int lfd)
{
	for (;;) {
		int one = 1, fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
		struct conn *c;
		struct epoll_event ev;

		if (fd < 0)
			return;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		c = calloc(1, sizeof(*c));
		if (!c) {
			close(fd);
			continue;
		}
		c->fd = fd;
		c->next = conns;
		if (conns)
			conns->prev = c;
		conns = c;
		ev.events = EPOLLIN;
		ev.data.ptr = c;
		if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0)
			conn_free(c);
	}
}

int main(int argc, char **argv)
{
	struct sockaddr_in addr = { .sin_family = AF_INET };
	socklen_t alen = sizeof(addr);
	struct epoll_event events[MAX_EVENTS], ev;
	sigset_t mask;
	int lfd = -1, ep = -1, sfd = -1, one = 1, status = 1;
	bool running = true;

	if (argc > 2) {
		fprintf(stderr, "usage: gateway-backend [PORT]\n");
		return 2;
	}
	ok_reply_len = (size_t)snprintf(ok_reply, sizeof(ok_reply),
		"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
		"x-kiln-score: -1.25\r\nContent-Length: %zu\r\n\r\n%s",
		sizeof(BODY) - 1, BODY);
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	addr.sin_port = htons((uint16_t)(argc == 2 ? atoi(argv[1]) : 0));

	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	sfd = signalfd(-1, &mask, SFD_NONBLOCK);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	ep = epoll_create1(0);
	if (sfd < 0 || lfd < 0 || ep < 0) {
		perror("gateway-backend: setup");
		goto out;
	}
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) != 0 ||
	    listen(lfd, 4096) != 0 ||
	    getsockname(lfd, (struct sockaddr *)&addr, &alen) != 0) {
		perror("gateway-backend: listen");
		goto out;
	}
	/* The listener and the signal fd are told apart from connections by
	 * their data.ptr: NULL and &sfd. */
	ev.events = EPOLLIN;
	ev.data.ptr = NULL;
	epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
	ev.data.ptr = &sfd;
	epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &ev);
	printf("listening on 127.0.0.1:%d\n", ntohs(addr.sin_port));
	fflush(stdout);

	while (running) {
		int n = epoll_wait(ep, events, MAX_EVENTS, -1);

		if (n < 0 && errno != EINTR) {
			perror("gateway-backend: epoll_wait");
			goto out;
		}
		for (int i = 0; i < n; i++) {
			struct conn *c = events[i].data.ptr;

			if (!c)
				accept_all(ep, lfd);
			else if ((void *)c == &sfd)
				running = false;
			else if (on_ready(ep, c, events[i].events) != 0)
				conn_free(c);
		}
	}
	status = 0;
out:
	while (conns)
		conn_free(conns);
	if (ep >= 0)
		close(ep);
	if (lfd >= 0)
		close(lfd);
	if (sfd >= 0)
		close(sfd);
	return status;
}
