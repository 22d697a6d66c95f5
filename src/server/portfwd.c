/*
 * Port-forward (`kiln port-forward`, docs/devenv.md): one connection to
 * a port a running task listens on, carried by an API request that the
 * server upgrades (HTTP/1.1 Upgrade: kiln-port-forward, answered 101)
 * into a byte pipe.
 *
 * GET /v1/jobs/{id}/port-forward?port=P[&task=N] is the job's owner's or
 * an operator's (a viewer's is refused by its least role, another user's
 * here, both audited); the job must be running with task N started, and
 * a process of that task must hold the socket listening on P (found on
 * a worker from the kernel's socket diagnostics and the descriptors of
 * the shim's descendants):
 * tasks share the machine's loopback, and without that check a forward
 * would reach any service listening there. The server then connects to
 * 127.0.0.1:P without blocking (a task whose listen backlog is full
 * cannot stall the loop), answers 101 once connected, and copies bytes
 * both ways. Nothing in the task is exposed on the network: the task
 * listens on loopback and only the API reaches it.
 *
 * Back-pressure: a side that cannot take more stops the other's reading
 * (kn_tunnel_pause; the socket's read watch freed until the tunnel has
 * drained), so a client that floods a port, or one that never reads,
 * holds at most PENDING_MAX bytes here and never stalls the loop or
 * another session. Each connection counts among its owner's streams
 * (--max-follows-per-token) and, on a dev environment, as a session.
 *
 * Tasks share the server's network namespace today (docs/security.md);
 * a task in one of its own would need the connect made inside it.
 *
 * A task on another machine (Slurm) is reached through its engine's
 * bridge (port_connect: srun and `kiln shim --bridge --port` on the
 * task's node), which makes the same listener check there and connects
 * to the node's loopback; its first byte says how that went, and the
 * rest flows as from a local connection. A Kubernetes pod's port is
 * reached the same way through the API server's pods/portforward
 * (src/kube/session.c), inside the pod's own network namespace.
 */
#include "internal.h"

#include "devenvsvc.h"
#include "service.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define PROTOCOL "kiln-port-forward"
#define CONNECT_TIMEOUT_MS 5000
/* An engine's bridge starts a process on the task's node first (srun). */
#define BRIDGE_TIMEOUT_MS 30000
#define READ_CHUNK (256 * 1024)
/* Bytes kept here for either side before the other's reading pauses;
   reading goes on when the client's side is back at the tunnel's low
   mark. */
#define PENDING_MAX (1024 * 1024)

struct forward {
	struct server *s;
	struct kn_http_req *req; /* until answered */
	struct kn_tunnel *tunnel;
	int fd;                  /* the connection to the task's port */
	struct kn_fd_watch *readable, *writable;
	struct kn_timer *timer;  /* the connect's limit */
	struct caller caller;
	int64_t job_id;
	int rank, port;
	char *out;               /* for the task, not yet written */
	size_t out_len, out_cap;
	bool session;            /* counted as a dev environment's session */
	int shim_pid;            /* the task's: whose listener the port is */
	bool listens;            /* the worker found the task's listener */
};

static void forward_free(struct forward *f)
{
	kn_fd_watch_free(f->readable);
	kn_fd_watch_free(f->writable);
	kn_timer_free(f->timer);
	if (f->fd >= 0)
		close(f->fd);
	if (f->session)
		devenv_session(f->s, f->job_id, -1);
	KN_FREE_ALL(f->out, f);
}

/* The tunnel is ended (by us or the peer): nothing more is written. */
static void forward_end(struct forward *f)
{
	if (f->tunnel)
		kn_tunnel_close(f->tunnel);
	forward_free(f);
}

static void task_readable(void *arg);

static void watch_task(struct forward *f, bool on)
{
	if (on && !f->readable)
		f->readable = kn_fd_watch_new(f->s->loop, f->fd, task_readable,
					      f);
	else if (!on && f->readable) {
		kn_fd_watch_free(f->readable);
		f->readable = NULL;
	}
}

/* The task sent bytes: to the client, unless it is behind. */
static void task_readable(void *arg)
{
	/* The loop is one thread: one buffer serves every forward. */
	static char buf[READ_CHUNK];
	struct forward *f = arg;
	ssize_t n = read(f->fd, buf, sizeof(buf));

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		forward_end(f);
		return;
	}
	kn_tunnel_write(f->tunnel, buf, (size_t)n);
	if (kn_tunnel_pending(f->tunnel) > PENDING_MAX)
		watch_task(f, false);
}

static void tunnel_drained(void *arg)
{
	watch_task(arg, true);
}

/* Write what waits for the task; false when the connection broke. */
static bool flush_to_task(struct forward *f)
{
	while (f->out_len) {
		ssize_t n = write(f->fd, f->out, f->out_len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break;
		if (n <= 0)
			return false;
		memmove(f->out, f->out + n, f->out_len - (size_t)n);
		f->out_len -= (size_t)n;
	}
	return true;
}

static void task_writable(void *arg)
{
	struct forward *f = arg;

	if (!flush_to_task(f)) {
		forward_end(f);
		return;
	}
	if (f->out_len)
		return;
	kn_fd_watch_free(f->writable);
	f->writable = NULL;
	kn_tunnel_pause(f->tunnel, false);
}

/* Bytes from the client, taken whole: written, or kept for later. */
static bool tunnel_data(void *arg, const char *data, size_t len)
{
	struct forward *f = arg;

	if (f->out_len + len > f->out_cap) {
		f->out_cap = f->out_len + len;
		f->out = kn_xrealloc(f->out, f->out_cap);
	}
	memcpy(f->out + f->out_len, data, len);
	f->out_len += len;
	if (!flush_to_task(f))
		return false;
	if (f->out_len && !f->writable)
		f->writable = kn_fd_watch_writable_new(f->s->loop, f->fd,
						       task_writable, f);
	if (f->out_len > PENDING_MAX)
		kn_tunnel_pause(f->tunnel, true);
	return true;
}

static void tunnel_closed(void *arg)
{
	struct forward *f = arg;

	f->tunnel = NULL; /* freed by the loop when this returns */
	forward_free(f);
}

static const struct kn_tunnel_ops tunnel_ops = {
	.on_data = tunnel_data,
	.on_drain = tunnel_drained,
	.on_closed = tunnel_closed,
};

static void audit_opened(const struct forward *f)
{
	char object[48], detail[64];

	snprintf(object, sizeof(object), "job/%lld", (long long)f->job_id);
	snprintf(detail, sizeof(detail), "task %d port %d", f->rank, f->port);
	core_audit(f->s, &f->caller, "job.port_forward", object, "ok", detail);
}

/* The connect ended: upgrade the request, or answer why not. */
static void connected(struct forward *f, int error)
{
	struct kn_error err;

	kn_fd_watch_free(f->writable);
	f->writable = NULL;
	kn_timer_free(f->timer);
	f->timer = NULL;
	if (error) {
		kn_errorf(&err, KN_EUNAVAIL, "port",
			  "job %lld: nothing answers on port %d in the task: "
			  "%s",
			  (long long)f->job_id, f->port, strerror(error));
		kn_http_reply_error(f->req, &err);
		forward_free(f);
		return;
	}
	f->tunnel = kn_http_upgrade(f->req, PROTOCOL, &tunnel_ops, f);
	f->req = NULL;
	if (!f->tunnel) {
		forward_free(f);
		return;
	}
	f->session = true;
	devenv_session(f->s, f->job_id, 1);
	audit_opened(f);
	watch_task(f, true);
}

static void connect_writable(void *arg)
{
	struct forward *f = arg;
	int error = 0;
	socklen_t len = sizeof(error);

	if (getsockopt(f->fd, SOL_SOCKET, SO_ERROR, &error, &len) < 0)
		error = errno;
	connected(f, error);
}

static void connect_timeout(void *arg)
{
	connected(arg, ETIMEDOUT);
}

static void start_connect(struct forward *f)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((uint16_t)f->port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};

	f->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (f->fd < 0) {
		connected(f, errno);
		return;
	}
	setsockopt(f->fd, IPPROTO_TCP, TCP_NODELAY, &(int){1}, sizeof(int));
	if (connect(f->fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
		connected(f, 0);
		return;
	}
	if (errno != EINPROGRESS) {
		connected(f, errno);
		return;
	}
	f->writable = kn_fd_watch_writable_new(f->s->loop, f->fd,
					       connect_writable, f);
	f->timer = kn_timer_new(f->s->loop, connect_timeout, f);
	kn_timer_arm(f->timer, CONNECT_TIMEOUT_MS);
}

/* ---- whose is the port: a listening socket of the task's ---- */

/* On a worker: whether a process of the task listens on the port. */
static void find_listener(void *arg)
{
	struct forward *f = arg;

	f->listens = kn_task_port_listening(f->shim_pid, f->port);
}

static void not_listening(struct forward *f)
{
	struct kn_error err;

	kn_errorf(&err, KN_ECONFLICT, "port",
		  "job %lld task %d does not listen on port %d",
		  (long long)f->job_id, f->rank, f->port);
	kn_http_reply_error(f->req, &err);
	forward_free(f);
}

static void listener_found(void *arg, bool ran)
{
	struct forward *f = arg;

	if (!ran) {
		forward_free(f);
		return;
	}
	if (f->listens)
		start_connect(f);
	else
		not_listening(f);
}

/* ---- a task on another machine: the engine's bridge ---- */

/* The bridge's status byte came (or it ended first, or timed out). */
static void bridge_answered(struct forward *f, int status)
{
	kn_fd_watch_free(f->readable);
	f->readable = NULL;
	if (status == KN_BRIDGE_PORT_NOT_THE_TASKS) {
		kn_timer_free(f->timer);
		f->timer = NULL;
		not_listening(f);
		return;
	}
	connected(f, status == KN_BRIDGE_PORT_OK      ? 0
		     : status == KN_BRIDGE_PORT_NO_ANSWER ? ECONNREFUSED
		     : status == -ETIMEDOUT               ? ETIMEDOUT
							  : EPIPE);
}

static void bridge_readable(void *arg)
{
	struct forward *f = arg;
	uint8_t status;
	ssize_t n = read(f->fd, &status, 1);

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	bridge_answered(f, n == 1 ? status : -EPIPE);
}

static void bridge_timeout(void *arg)
{
	bridge_answered(arg, -ETIMEDOUT);
}

/* The engine checks the listener and connects on the task's node. */
static void start_bridge(struct forward *f, const char *task_dir)
{
	struct server *s = f->s;
	struct kn_error err;

	f->fd = s->exec->ops->port_connect(s->exec, task_dir, f->port, &err);
	if (f->fd < 0) {
		kn_http_reply_error(f->req, &err);
		forward_free(f);
		return;
	}
	f->readable = kn_fd_watch_new(s->loop, f->fd, bridge_readable, f);
	f->timer = kn_timer_new(s->loop, bridge_timeout, f);
	kn_timer_arm(f->timer, BRIDGE_TIMEOUT_MS);
}

/* The running task rank of job id, or an error naming why not. */
static int find_task(struct server *s, int64_t id, int64_t rank,
		     int *shim_pid, const char **task_dir,
		     struct kn_error *err)
{
	/* An engine's task may have no process of this machine. */
	bool remote = s->exec->ops->port_connect != NULL;

	for (struct run *r = s->runs; r; r = r->next) {
		if (r->job_id != id || r->stopping)
			continue;
		if (rank >= r->n_tasks)
			return kn_errorf(err, KN_EINVAL, "task",
					 "job %lld has %d task%s (0..%d)",
					 (long long)id, r->n_tasks,
					 r->n_tasks == 1 ? "" : "s",
					 r->n_tasks - 1);
		if (!r->tasks[rank].launched || r->tasks[rank].ended ||
		    (!remote && r->tasks[rank].proc.pid <= 0))
			break;
		*shim_pid = r->tasks[rank].proc.pid;
		*task_dir = r->tasks[rank].task_dir;
		return 0;
	}
	return kn_errorf(err, KN_ECONFLICT, "state",
			 "job %lld task %lld is not running", (long long)id,
			 (long long)rank);
}

/* Whether c may forward to job id's ports: its owner, or an operator;
   a refusal is audited. */
static int check_caller(struct server *s, const struct caller *c,
			int64_t id, struct kn_error *err)
{
	struct kn_job_row j;
	char object[48];
	int rc = jobs_get_for(s, c, id, "forward to the ports of", &j, err);

	if (rc == -EPERM) {
		snprintf(object, sizeof(object), "job/%lld", (long long)id);
		core_audit(s, c, "job.port_forward", object, "denied",
			   err->message);
	}
	if (rc == 0)
		kn_job_row_release(&j);
	return rc;
}

static void h_port_forward(struct server *s, struct kn_http_req *req,
			   const struct caller *c, const char *param)
{
	const char *upgrade = kn_http_header(req, "Upgrade");
	struct forward *f;
	struct kn_error err;
	int64_t id = 0, port = 0, rank = 0;
	int shim_pid = 0;
	const char *task_dir = NULL;

	if (!route_param_id(param, &id)) {
		kn_errorf(&err, KN_ENOTFOUND, NULL, "no job %s", param);
		goto fail;
	}
	if (kn_http_query_int(req, "port", 1, 65535, &port) != 0) {
		kn_errorf(&err, KN_EINVAL, "port",
			  "port must be a TCP port, 1 to 65535");
		goto fail;
	}
	if (kn_http_query_int(req, "task", 0, KN_SPEC_MAX_TASKS - 1, &rank) <
	    0) {
		kn_errorf(&err, KN_EINVAL, "task", "task must be a task index");
		goto fail;
	}
	if (!upgrade || strcasecmp(upgrade, PROTOCOL) != 0) {
		kn_errorf(&err, KN_EINVAL, "Upgrade",
			  "port-forward is an upgraded connection: send "
			  "Connection: Upgrade and Upgrade: " PROTOCOL);
		goto fail;
	}
	/* Its tasks' ports are on this machine's loopback only when they
	   are this machine's processes, or the engine bridges to them. */
	if (s->exec->ops->isolation && !s->exec->ops->port_connect) {
		kn_errorf(&err, KN_EINVAL, NULL,
			  "port-forward reaches tasks this server runs itself; "
			  "the %s executor's run elsewhere",
			  s->exec->ops->name);
		goto fail;
	}
	if (check_caller(s, c, id, &err) < 0 ||
	    find_task(s, id, rank, &shim_pid, &task_dir, &err) < 0)
		goto fail;
	if (!api_follow_admitted(s, req))
		return;
	f = kn_xcalloc(1, sizeof(*f));
	f->s = s;
	f->req = req;
	f->fd = -1;
	f->caller = *c;
	f->job_id = id;
	f->rank = (int)rank;
	f->port = (int)port;
	f->shim_pid = shim_pid;
	if (s->exec->ops->port_connect)
		start_bridge(f, task_dir);
	else
		kn_workers_submit(s->request_workers, find_listener,
				  listener_found, f);
	return;
fail:
	kn_http_reply_error(req, &err);
}

static const struct route routes[] = {
	{"GET", "/v1/jobs/{id}/port-forward", KN_ROLE_USER, false,
	 "job.port_forward", h_port_forward},
	{0},
};

const struct service portfwd_service = {
	.name = "port-forward",
	.phase = SERVICE_PHASE_RECOVERED,
	.routes = routes,
};
