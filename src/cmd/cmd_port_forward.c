/*
 * kiln port-forward JOB [--task N] [--address A] LOCAL:REMOTE: listen on
 * A:LOCAL (127.0.0.1 unless told) and carry each connection made there
 * to port REMOTE of the job's task, over an API connection of its own
 * that the server upgrades to a byte pipe (GET /v1/jobs/ID/port-forward,
 * docs/devenv.md). A thread per connection copies bytes both ways.
 *
 * Rejected: one multiplexed API connection for every local connection:
 * its frames and credits would sit between the bytes and their peer, and
 * one busy connection would wait on another's window; a pipe of its own
 * is what `ssh -L` is measured against.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "cmd/cli_client.h"

static cli_runner cmd_port_forward;

const struct cli_command cmd_port_forward_entry = {
	.name = "port-forward",
	.run = cmd_port_forward,
	.summary = "forward a local port to a port a job's task listens on",
	.help = "usage: kiln port-forward ID|ID[K] LOCAL:REMOTE [--task N]\n"
		"                         [--address A]\n"
		"\n"
		"Listen on A:LOCAL and carry every connection made there to port\n"
		"REMOTE of the job's task (a notebook, TensorBoard, a model server\n"
		"under test), each over an API connection of its own: the task\n"
		"listens on loopback and nothing of it is exposed on the network.\n"
		"Waits for a queued job to start; runs until interrupted. LOCAL 0\n"
		"picks a free port; the first line printed names it. The job's\n"
		"owner and operators only.\n"
		"\n"
		"  --task N     the task's rank (default 0)\n"
		"  --address A  the local address to listen on (default 127.0.0.1)\n",
};

#define PROTOCOL "kiln-port-forward"
#define RELAY_BUF (256 * 1024)

struct relay {
	struct cli_client *c;
	char *path;
	int fd; /* the local connection */
};

/* One direction's bytes in flight. */
struct pipe_buf {
	char data[RELAY_BUF];
	size_t len, off;
};

/* Move what can move without waiting: 1 progress, 0 none, -1 ended. */
static int relay_step(int fd, CURL *api, struct pipe_buf *up,
		      struct pipe_buf *down)
{
	int moved = 0;
	size_t n = 0;
	ssize_t r;
	CURLcode cc;

	if (!up->len) {
		r = read(fd, up->data, sizeof(up->data));
		if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
			return -1;
		if (r > 0) {
			up->len = (size_t)r;
			up->off = 0;
			moved = 1;
		}
	}
	if (up->len) {
		cc = curl_easy_send(api, up->data + up->off, up->len - up->off,
				    &n);
		if (cc != CURLE_OK && cc != CURLE_AGAIN)
			return -1;
		if (cc == CURLE_OK && n) {
			up->off += n;
			if (up->off == up->len)
				up->len = 0;
			moved = 1;
		}
	}
	if (!down->len) {
		cc = curl_easy_recv(api, down->data, sizeof(down->data), &n);
		if ((cc == CURLE_OK && n == 0) ||
		    (cc != CURLE_OK && cc != CURLE_AGAIN))
			return -1;
		if (cc == CURLE_OK) {
			down->len = n;
			down->off = 0;
			moved = 1;
		}
	}
	if (down->len) {
		r = write(fd, down->data + down->off, down->len - down->off);
		if (r < 0 && errno != EAGAIN && errno != EINTR)
			return -1;
		if (r > 0) {
			down->off += (size_t)r;
			if (down->off == down->len)
				down->len = 0;
			moved = 1;
		}
	}
	return moved;
}

static void relay_loop(int fd, CURL *api)
{
	struct pipe_buf *up = kn_xcalloc(1, sizeof(*up));
	struct pipe_buf *down = kn_xcalloc(1, sizeof(*down));
	curl_socket_t sock = CURL_SOCKET_BAD;
	int step;

	curl_easy_getinfo(api, CURLINFO_ACTIVESOCKET, &sock);
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	while ((step = relay_step(fd, api, up, down)) >= 0) {
		struct pollfd p[2] = {
			{.fd = fd,
			 .events = (short)((up->len ? 0 : POLLIN) |
					   (down->len ? POLLOUT : 0))},
			{.fd = sock,
			 .events = (short)((down->len ? 0 : POLLIN) |
					   (up->len ? POLLOUT : 0))},
		};

		/* Wait only when nothing moved: TLS may hold bytes the
		   socket no longer shows. */
		if (!step && poll(p, 2, -1) < 0 && errno != EINTR)
			break;
	}
	KN_FREE_ALL(up, down);
}

/* The client has one error buffer: one upgrade at a time, while the
   relays of the connections already open run side by side. */
static pthread_mutex_t upgrade_lock = PTHREAD_MUTEX_INITIALIZER;

static void *relay_run(void *arg)
{
	struct relay *k = arg;
	char *early = NULL;
	size_t n_early = 0;
	void *api = NULL;
	int rc;

	pthread_mutex_lock(&upgrade_lock);
	rc = cli_client_upgrade(k->c, "GET", k->path, PROTOCOL, &api, &early,
				&n_early);
	pthread_mutex_unlock(&upgrade_lock);
	if (rc == 0 && kn_write_all(k->fd, early ? early : "", n_early) == 0)
		relay_loop(k->fd, api);
	if (api)
		curl_easy_cleanup(api);
	free(early);
	close(k->fd);
	free(k);
	return NULL;
}

/* "LOCAL:REMOTE" (LOCAL 0: any free port) into the two ports. */
static bool parse_ports(const char *text, int *local, int *remote)
{
	char *end = NULL;
	long l, r;

	l = strtol(text, &end, 10);
	if (end == text || *end != ':' || l < 0 || l > 65535)
		return false;
	text = end + 1;
	r = strtol(text, &end, 10);
	if (end == text || *end || r < 1 || r > 65535)
		return false;
	*local = (int)l;
	*remote = (int)r;
	return true;
}

static int listen_on(const char *address, int port, int *fd_out,
		     int *port_out)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((uint16_t)port)};
	socklen_t len = sizeof(a);
	int one = 1, fd;

	if (inet_pton(AF_INET, address, &a.sin_addr) != 1)
		return -EINVAL;
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    listen(fd, 64) < 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	*fd_out = fd;
	*port_out = ntohs(a.sin_port);
	return 0;
}

static void serve(struct cli_client *c, int lfd, const char *path)
{
	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		struct relay *k;
		pthread_t t;

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED ||
			    errno == EMFILE || errno == ENFILE)
				continue;
			return;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &(int){1}, sizeof(int));
		k = kn_xcalloc(1, sizeof(*k));
		k->c = c;
		k->path = (char *)path;
		k->fd = fd;
		if (pthread_create(&t, NULL, relay_run, k) != 0) {
			close(fd);
			free(k);
			continue;
		}
		pthread_detach(t);
	}
}

struct listener {
	struct cli_client *c;
	int fd;
	char *path;
};

static void *listener_run(void *arg)
{
	struct listener *l = arg;

	serve(l->c, l->fd, l->path);
	return NULL;
}

int cli_port_forward_start(const struct cli_ctx *ctx, struct cli_client *c,
			   int64_t id, int task, const char *ports,
			   const char *address)
{
	struct listener *l;
	int local, remote, bound, fd, rc;
	pthread_t t;

	if (!parse_ports(ports, &local, &remote))
		return cli_usage_error(ctx, "--port %s: want LOCAL:REMOTE, two "
					    "TCP ports (LOCAL 0: any free one)",
				       ports);
	rc = listen_on(address, local, &fd, &bound);
	if (rc < 0)
		return cli_fail(ctx, "cannot listen on %s:%d: %s", address,
				local, strerror(-rc));
	l = kn_xcalloc(1, sizeof(*l));
	l->c = c;
	l->fd = fd;
	l->path = kn_asprintf("/v1/jobs/%lld/port-forward?port=%d&task=%d",
			      (long long)id, remote, task);
	signal(SIGPIPE, SIG_IGN);
	/* It lives as long as the process: the command's end ends it. */
	if (pthread_create(&t, NULL, listener_run, l) != 0) {
		close(fd);
		KN_FREE_ALL(l->path, l);
		return cli_fail(ctx, "cannot start the port-forward");
	}
	pthread_detach(t);
	fprintf(stderr, "forwarding %s:%d to job %lld task %d port %d\n",
		address, bound, (long long)id, task, remote);
	return 0;
}

static int cmd_port_forward(struct cli_ctx *ctx, int argc, char **argv)
{
	int task = 0, local = 0, remote = 0, lfd = -1, bound = 0;
	const char *address = "127.0.0.1";
	const struct cli_flag flags[] = {
		{"task", 0, CLI_FLAG_COUNT, &task},
		{"address", 0, CLI_FLAG_STRING, &address},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	const char *args[2] = {NULL, NULL};
	struct cli_client *c = NULL;
	json_t *job = NULL;
	char *path = NULL;
	int64_t id, index;
	size_t n = 0;
	int rc;

	rc = cli_parse_positionals(ctx, argc, argv, flags, args, 2, &n);
	if (rc != CLI_GO)
		return rc;
	if (n != 2)
		return cli_usage_error(ctx, "want a job and LOCAL:REMOTE "
					    "(e.g. 8888:8888)");
	rc = cli_parse_job_ref(ctx, args[0], &id, &index);
	if (rc != CLI_GO)
		return rc;
	if (!parse_ports(args[1], &local, &remote))
		return cli_usage_error(ctx, "%s: want LOCAL:REMOTE, two TCP "
					    "ports (LOCAL 0: any free one)",
				       args[1]);
	rc = cli_client_open(ctx, &c);
	if (rc == 0 && index >= 0)
		rc = cli_job_element(c, id, index, &id);
	if (rc == 0)
		rc = cli_wait_started(c, id, 0, &job);
	if (rc)
		goto out;
	rc = listen_on(address, local, &lfd, &bound);
	if (rc < 0) {
		rc = cli_fail(ctx, "cannot listen on %s:%d: %s", address,
			      local, strerror(-rc));
		goto out;
	}
	path = kn_asprintf("/v1/jobs/%lld/port-forward?port=%d&task=%d",
			   (long long)id, remote, task);
	/* A local client that goes mid-write must not end the forward. */
	signal(SIGPIPE, SIG_IGN);
	printf("forwarding %s:%d to job %lld task %d port %d\n", address,
	       bound, (long long)id, task, remote);
	fflush(stdout);
	serve(c, lfd, path);
	rc = cli_fail(ctx, "the listening socket failed: %s",
		      strerror(errno));
out:
	if (lfd >= 0)
		close(lfd);
	json_decref(job);
	free(path);
	cli_client_free(c);
	return rc;
}
