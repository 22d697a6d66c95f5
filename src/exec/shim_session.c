/*
 * The shim's interactive sessions: TASK_DIR.sock, a Unix socket beside
 * the task's directory (where the sandbox hides it from every task, its
 * own included), on which the server relays a client's session in the
 * frames of src/mux. The first frame is the server's SESSION request:
 *
 *   {"op": "attach"}: the task's own terminal (a launch with "tty"): its
 *   output since the last 64 KiB, then as it comes; stdin, resizes and
 *   signals go to it. One client at a time: a new one takes it over.
 *   Closing the connection detaches; the task runs on.
 *
 *   {"op": "exec", "argv": [...], "tty": bool, "rows": R, "cols": C}: a
 *   new process in the task's sandbox (kn_sandbox_join: its namespaces,
 *   cgroup, user and environment, so it can do no more than the task),
 *   on a terminal of its own or on pipes (stdout and stderr apart). It
 *   is killed when its connection closes.
 *
 * Everything here runs in the shim's one poll loop: every descriptor is
 * non-blocking and every buffer bounded by the protocol's credit, so a
 * client that stops reading only stops its own process's output. The
 * peer is checked to be the server's user (SO_PEERCRED) and its frames
 * are decoded as hostile all the same.
 */
#include "internal.h"

#include "cgroup/cgroup.h"
#include "mux/mux.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <jansson.h>

/* Sessions open on one task at a time. */
#define SESSIONS_MAX 8
/* The task's terminal output kept for the next client to attach. */
#define RING_BYTES (64 * 1024)
/* A session's queued output: its streams' credit and control frames. */
#define OUT_MAX (3 * KN_MUX_WINDOW)
/* Processes of closed exec sessions still to reap. */
#define ORPHANS_MAX 64
/* How long the task's end waits for its EXIT frames to go out. */
#define FINISH_MS 2000
#define EXEC_ARGS_MAX 256

struct sess {
	int fd;
	struct kn_mux_reader rd;
	uint8_t *out;
	size_t out_len;
	bool started; /* its SESSION request came */
	bool attach;  /* relays the task's terminal */
	bool closing; /* closed once out is written */
	bool tty;
	pid_t pid;    /* exec: its process, 0 before and after */
	bool reaped;
	int wstatus;
	int in_fd;    /* where stdin goes, or -1 */
	int out_fd, err_fd; /* exec: its output, -1 at its end */
	uint8_t *pend; /* stdin the process has not taken yet */
	size_t pend_len;
	bool stdin_end;
	struct kn_mux_window win[4]; /* by stream: stdin, stdout, stderr */
};

struct shim_sessions {
	struct shim_session_cfg cfg;
	bool ready;    /* the task runs: cfg is whole */
	bool view_built; /* the sandbox's mounts are in place: joinable */
	char *workdir; /* absolute: joining a mount namespace loses the cwd */
	char *path;
	int listen_fd;
	struct sess *s[SESSIONS_MAX];
	uint8_t ring[RING_BYTES];
	size_t ring_start, ring_len;
	pid_t orphans[ORPHANS_MAX];
	size_t n_orphans;
};

/* ---- output ---- */

static void queue(struct sess *x, const uint8_t *frame, size_t n)
{
	if (x->out_len + n > OUT_MAX) { /* the peer does not keep to credit */
		x->closing = true;
		return;
	}
	if (!x->out)
		x->out = kn_xmalloc(OUT_MAX);
	memcpy(x->out + x->out_len, frame, n);
	x->out_len += n;
}

static void queue_text(struct sess *x, enum kn_mux_type type,
		       uint32_t stream, const char *text)
{
	uint8_t f[KN_MUX_MAX_FRAME];

	queue(x, f, kn_mux_encode_text(f, type, stream, text));
}

/* Send ERROR and close once it is out. */
static void refuse(struct sess *x, const char *why)
{
	queue_text(x, KN_MUX_ERROR, KN_MUX_STREAM_CONTROL, why);
	x->closing = true;
}

static void queue_data(struct sess *x, uint32_t stream, const uint8_t *buf,
		       size_t n)
{
	uint8_t f[KN_MUX_MAX_FRAME];

	while (n) {
		size_t part = n < KN_MUX_MAX_PAYLOAD ? n : KN_MUX_MAX_PAYLOAD;
		queue(x, f, kn_mux_encode(f, KN_MUX_DATA, stream, buf, part));
		kn_mux_window_spend(&x->win[stream], part);
		buf += part;
		n -= part;
	}
}

static void flush_out(struct sess *x)
{
	while (x->out_len) {
		ssize_t n = send(x->fd, x->out, x->out_len, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno != EAGAIN && errno != EINTR) {
				x->out_len = 0;
				x->closing = true;
			}
			return;
		}
		x->out_len -= (size_t)n;
		memmove(x->out, x->out + n, x->out_len);
	}
}

/* Bytes a process's output stream may send now. */
static size_t room(const struct sess *x, uint32_t stream)
{
	int64_t r = x->win[stream].send;

	if (x->out_len + KN_MUX_MAX_FRAME * 2 > OUT_MAX)
		return 0;
	return r > 0 ? (size_t)(r < KN_MUX_MAX_PAYLOAD ? r : KN_MUX_MAX_PAYLOAD)
		     : 0;
}

/* ---- the listening socket ---- */

/* A path through a descriptor of its directory: a Unix socket's path is
   at most 108 bytes, a task directory's may be longer. */
static int short_path(const char *path, char *buf, size_t cap, int *dirfd)
{
	const char *slash = strrchr(path, '/');
	char *dir;

	if (!slash)
		return -EINVAL;
	dir = kn_xstrdup(path);
	dir[slash - path] = '\0';
	*dirfd = open(dir[0] ? dir : "/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	free(dir);
	if (*dirfd < 0)
		return -errno;
	if ((size_t)snprintf(buf, cap, "/proc/self/fd/%d%s", *dirfd, slash) >=
	    cap) {
		close(*dirfd);
		return -ENAMETOOLONG;
	}
	return 0;
}

int kn_session_socket_connect(const char *task_dir, struct kn_error *err)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char *path = kn_asprintf("%s" KN_SESSION_SOCKET_SUFFIX, task_dir);
	int fd = -1, dirfd = -1, rc;
	struct ucred peer;
	socklen_t len = sizeof(peer);

	rc = short_path(path, sa.sun_path, sizeof(sa.sun_path), &dirfd);
	if (rc == 0) {
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0 ||
		    connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
		    getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) < 0)
			rc = -errno;
		else if (peer.uid != geteuid())
			rc = -EPERM; /* not this server's shim */
		close(dirfd);
	}
	if (rc == 0 && fcntl(fd, F_SETFL, O_NONBLOCK) < 0)
		rc = -errno;
	if (rc < 0) {
		if (fd >= 0)
			close(fd);
		kn_errorf(err, KN_EUNAVAIL, NULL,
			  "the task's shim takes no session (%s): the task "
			  "ended, or its shim predates sessions",
			  strerror(-rc));
	}
	free(path);
	return rc < 0 ? rc : fd;
}

/* ---- the bridge on a Slurm node ---- */

/* How long the bridge waits for the shim to listen, and how often it
   looks: srun may start it a moment after the task. */
#define BRIDGE_WAIT_MS 10000
#define BRIDGE_RETRY_MS 50

/* Copy bytes between fd and stdin/stdout until either side ends. */
static void bridge_copy(int fd)
{
	uint8_t buf[KN_MUX_MAX_FRAME];

	for (;;) {
		struct pollfd p[2] = {{0, POLLIN, 0}, {fd, POLLIN, 0}};
		ssize_t n;

		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		if (p[0].revents) {
			n = read(0, buf, sizeof(buf));
			if (n <= 0 || kn_write_all(fd, buf, (size_t)n) < 0)
				return;
		}
		if (p[1].revents) {
			n = read(fd, buf, sizeof(buf));
			if (n <= 0 || kn_write_all(1, buf, (size_t)n) < 0)
				return;
		}
	}
}

/* The task's port: a status byte on stdout, and the connection or -1. */
static int bridge_port(const char *task_dir, int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((uint16_t)port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	char *dir = kn_xstrdup(task_dir), *text = NULL;
	uint8_t status = KN_BRIDGE_PORT_OK;
	int fd = -1, pid = 0;

	if (kn_task_file_read(dir, "shim.pid", 64, &text, NULL, NULL) < 0 ||
	    sscanf(text, "%d", &pid) != 1 || pid <= 0)
		status = KN_BRIDGE_PORT_NO_TASK;
	else if (!kn_task_port_listening(pid, port))
		status = KN_BRIDGE_PORT_NOT_THE_TASKS;
	else if ((fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
		 connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		status = KN_BRIDGE_PORT_NO_ANSWER;
	KN_FREE_ALL(text, dir);
	if (status != KN_BRIDGE_PORT_OK && fd >= 0) {
		close(fd);
		fd = -1;
	}
	if (kn_write_all(1, &status, 1) < 0 && fd >= 0) {
		close(fd);
		fd = -1;
	}
	if (fd >= 0)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &(int){1},
			   sizeof(int));
	return fd;
}

int kn_session_bridge(const char *task_dir, int port)
{
	int64_t deadline = kn_mono_ms() + BRIDGE_WAIT_MS;
	uint8_t buf[KN_MUX_MAX_FRAME];
	struct kn_error err;
	int fd;

	if (port > 0) {
		fd = bridge_port(task_dir, port);
		if (fd < 0)
			return 1;
		bridge_copy(fd);
		close(fd);
		return 0;
	}
	while ((fd = kn_session_socket_connect(task_dir, &err)) == -ENOENT ||
	       fd == -ECONNREFUSED) {
		if (kn_mono_ms() >= deadline)
			break;
		usleep(BRIDGE_RETRY_MS * 1000);
	}
	if (fd < 0) {
		kn_write_all(1, buf, kn_mux_encode_text(buf, KN_MUX_ERROR,
						     KN_MUX_STREAM_CONTROL,
						     err.message));
		return 1;
	}
	/* Blocking: this process carries one session and nothing else. */
	fcntl(fd, F_SETFL, 0);
	bridge_copy(fd);
	/* Closing the socket detaches from the task (or ends an exec). */
	close(fd);
	return 0;
}

void shim_sessions_task(struct shim_sessions *ss,
			const struct shim_session_cfg *cfg)
{
	if (!ss)
		return;
	ss->cfg = *cfg;
	ss->workdir = realpath(cfg->workdir, NULL);
	if (!ss->workdir)
		ss->workdir = kn_xstrdup(cfg->workdir);
	ss->cfg.workdir = ss->workdir;
	ss->ready = true;
}

struct shim_sessions *shim_sessions_new(const char *task_dir,
					struct kn_error *err)
{
	struct shim_sessions *ss = kn_xcalloc(1, sizeof(*ss));
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int dirfd = -1, rc;
	mode_t old;

	ss->path = kn_asprintf("%s" KN_SESSION_SOCKET_SUFFIX, task_dir);
	ss->listen_fd = -1;
	rc = short_path(ss->path, sa.sun_path, sizeof(sa.sun_path), &dirfd);
	if (rc == 0) {
		unlink(ss->path); /* a shim run again for the same task */
		ss->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC |
							SOCK_NONBLOCK, 0);
		old = umask(077); /* the server's user alone connects */
		if (ss->listen_fd < 0 ||
		    bind(ss->listen_fd, (struct sockaddr *)&sa, sizeof(sa)) <
			    0 ||
		    listen(ss->listen_fd, SESSIONS_MAX) < 0)
			rc = -errno;
		umask(old);
		close(dirfd);
	}
	if (rc < 0) {
		kn_errorf(err, KN_EIO, NULL, "cannot listen on %s: %s",
			  ss->path, strerror(-rc));
		shim_sessions_free(ss);
		return NULL;
	}
	return ss;
}

/* ---- exec ---- */

/* A terminal pair: 0 with the master (non-blocking) and the slave. */
static int open_pty(int *master, int *slave, unsigned rows, unsigned cols)
{
	struct winsize ws = {.ws_row = (unsigned short)rows,
			     .ws_col = (unsigned short)cols};
	int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC), s = -1;
	char name[64];

	if (m < 0 || grantpt(m) < 0 || unlockpt(m) < 0 ||
	    ptsname_r(m, name, sizeof(name)) != 0 ||
	    (s = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0 ||
	    fcntl(m, F_SETFL, O_NONBLOCK) < 0) {
		int e = errno;
		if (m >= 0)
			close(m);
		return -e;
	}
	if (rows && cols)
		ioctl(m, TIOCSWINSZ, &ws);
	*master = m;
	*slave = s;
	return 0;
}

int exec_open_pty(int *master, int *slave)
{
	return open_pty(master, slave, 0, 0);
}

/* In the forked child: the command's stdio, then the sandbox. */
_Noreturn static void exec_child(struct shim_sessions *ss, char **argv,
				 bool tty, const int stdio[3], int go,
				 int report)
{
	char why[256], b;
	pid_t pid;

	for (int i = 0; i < 3; i++)
		if (dup2(stdio[i], i) < 0)
			_exit(127);
	if (read(go, &b, 1) != 1)
		_exit(127);
	pid = kn_sandbox_join(ss->cfg.sandbox, ss->cfg.init_pid,
			      ss->cfg.workdir, argv, ss->cfg.env, tty, why,
			      sizeof(why));
	if (pid < 0)
		dprintf(2, "kiln: %s\n", why);
	if (write(report, &pid, sizeof(pid)) != sizeof(pid))
		_exit(127);
	_exit(0);
}

/*
 * Start argv for x: 0, or -1 with why. The child that joins the sandbox
 * is put in the task's cgroup before it does anything, and reports the
 * command's pid (a child of the shim) before it exits.
 */
static int exec_start(struct shim_sessions *ss, struct sess *x, char **argv,
		      bool tty, unsigned rows, unsigned cols, char *why,
		      size_t len)
{
	int stdio[3] = {-1, -1, -1}, mine[3] = {-1, -1, -1};
	int go[2] = {-1, -1}, report[2] = {-1, -1}, rc = -1;
	struct kn_error err;
	pid_t child, pid = -1;

	if (tty) {
		if (open_pty(&mine[0], &stdio[0], rows, cols) < 0)
			goto out;
		stdio[1] = stdio[2] = stdio[0];
	} else {
		int p[3][2];
		for (int i = 0; i < 3; i++)
			if (pipe2(p[i], O_CLOEXEC) < 0)
				goto out;
		stdio[0] = p[0][0], mine[0] = p[0][1];
		stdio[1] = p[1][1], mine[1] = p[1][0];
		stdio[2] = p[2][1], mine[2] = p[2][0];
		for (int i = 0; i < 3; i++)
			fcntl(mine[i], F_SETFL, O_NONBLOCK);
	}
	if (pipe2(go, O_CLOEXEC) < 0 || pipe2(report, O_CLOEXEC) < 0)
		goto out;
	child = fork();
	if (child == 0)
		exec_child(ss, argv, tty, stdio, go[0], report[1]);
	if (child < 0)
		goto out;
	if (ss->cfg.cgroup &&
	    kn_cgroup_enter(ss->cfg.cgroup, (int)child, &err) < 0) {
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
		snprintf(why, len, "cannot limit the command: %.200s",
			 err.message);
		goto out;
	}
	close(report[1]);
	report[1] = -1;
	if (write(go[1], "g", 1) != 1 ||
	    read(report[0], &pid, sizeof(pid)) != sizeof(pid))
		pid = -1;
	waitpid(child, NULL, 0);
	rc = 0;
	x->tty = tty;
	x->in_fd = mine[0];
	x->out_fd = tty ? mine[0] : mine[1];
	x->err_fd = tty ? -1 : mine[2];
	mine[0] = mine[1] = mine[2] = -1;
	/* A command that could not start said why on its stderr. */
	x->pid = pid > 0 ? pid : 0;
	x->reaped = pid <= 0;
	x->wstatus = W_EXITCODE(127, 0);
out:
	if (rc < 0 && !why[0])
		snprintf(why, len, "cannot start the command: %s",
			 strerror(errno));
	for (int i = 0; i < 3; i++) {
		if (mine[i] >= 0)
			close(mine[i]);
		if (stdio[i] >= 0 && (i == 0 || stdio[i] != stdio[0]))
			close(stdio[i]);
	}
	for (int i = 0; i < 2; i++) {
		if (go[i] >= 0)
			close(go[i]);
		if (report[i] >= 0)
			close(report[i]);
	}
	return rc;
}

/* ---- the SESSION request ---- */

static void attach_take(struct shim_sessions *ss, struct sess *x)
{
	size_t first;

	for (size_t i = 0; i < SESSIONS_MAX; i++)
		if (ss->s[i] && ss->s[i] != x && ss->s[i]->attach &&
		    !ss->s[i]->closing)
			refuse(ss->s[i], "another client attached to the task");
	x->attach = true;
	x->tty = true;
	x->in_fd = ss->cfg.tty_master;
	/* What the terminal showed last, oldest first. */
	first = RING_BYTES - ss->ring_start;
	if (first > ss->ring_len)
		first = ss->ring_len;
	queue_data(x, KN_MUX_STREAM_STDOUT, ss->ring + ss->ring_start, first);
	queue_data(x, KN_MUX_STREAM_STDOUT, ss->ring, ss->ring_len - first);
}

static void resize(int fd, unsigned rows, unsigned cols)
{
	struct winsize ws = {.ws_row = (unsigned short)rows,
			     .ws_col = (unsigned short)cols};

	if (fd >= 0 && rows && cols)
		ioctl(fd, TIOCSWINSZ, &ws);
}

static unsigned dim(json_t *doc, const char *key)
{
	json_int_t v = json_integer_value(json_object_get(doc, key));

	return v >= 1 && v <= KN_MUX_MAX_DIM ? (unsigned)v : 0;
}

static void session_request(struct shim_sessions *ss, struct sess *x,
			    const struct kn_mux_frame *f)
{
	json_t *doc = json_loadb((const char *)f->payload, f->len, 0, NULL);
	const char *op = json_string_value(json_object_get(doc, "op"));
	json_t *args = json_object_get(doc, "argv");
	char *argv[EXEC_ARGS_MAX + 1], why[320] = "";
	size_t n = json_array_size(args);

	x->started = true;
	if (op && !strcmp(op, "attach")) {
		if (ss->cfg.tty_master < 0)
			refuse(x, "the task has no terminal (not started with "
				  "-it): use kiln exec, or kiln logs");
		else {
			attach_take(ss, x);
			resize(ss->cfg.tty_master, dim(doc, "rows"),
			       dim(doc, "cols"));
		}
	} else if (op && !strcmp(op, "exec") && n >= 1 &&
		   n <= EXEC_ARGS_MAX) {
		for (size_t i = 0; i < n; i++) {
			const char *a = json_string_value(json_array_get(args, i));
			argv[i] = (char *)(a ? a : "");
		}
		argv[n] = NULL;
		if (exec_start(ss, x, argv,
			       json_is_true(json_object_get(doc, "tty")),
			       dim(doc, "rows"), dim(doc, "cols"), why,
			       sizeof(why)) < 0)
			refuse(x, why);
	} else {
		refuse(x, "not a session request");
	}
	json_decref(doc);
}

/* ---- frames from the server ---- */

static void write_stdin(struct sess *x)
{
	uint8_t f[KN_MUX_MAX_FRAME];
	size_t taken = 0;
	uint32_t grant;

	while (x->in_fd >= 0 && taken < x->pend_len) {
		ssize_t n = write(x->in_fd, x->pend + taken,
				  x->pend_len - taken);
		if (n <= 0)
			break;
		taken += (size_t)n;
	}
	if (!taken)
		return;
	x->pend_len -= taken;
	memmove(x->pend, x->pend + taken, x->pend_len);
	if ((grant = kn_mux_window_consume(&x->win[KN_MUX_STREAM_STDIN],
					   taken)))
		queue(x, f, kn_mux_encode_window(f, KN_MUX_STREAM_STDIN,
						 grant));
}

/* An exec's stdin ends after what is pending: its pipe closed. */
static void end_stdin(struct sess *x)
{
	if (x->stdin_end && !x->pend_len && !x->tty && x->in_fd >= 0) {
		close(x->in_fd);
		x->in_fd = -1;
	}
}

static void take_data(struct sess *x, const struct kn_mux_frame *f)
{
	struct kn_error err;

	if (f->stream != KN_MUX_STREAM_STDIN || x->stdin_end) {
		refuse(x, "DATA on a stream that takes none");
		return;
	}
	if (kn_mux_window_take(&x->win[KN_MUX_STREAM_STDIN], f->len, &err) <
	    0) {
		refuse(x, err.message);
		return;
	}
	if (!x->pend)
		x->pend = kn_xmalloc(KN_MUX_WINDOW);
	memcpy(x->pend + x->pend_len, f->payload, f->len);
	x->pend_len += f->len;
	write_stdin(x);
}

/* The process group a signal is for: the terminal's foreground one. */
static pid_t signal_group(const struct shim_sessions *ss,
			  const struct sess *x)
{
	pid_t fg = x->tty && x->in_fd >= 0 ? tcgetpgrp(x->in_fd) : -1;

	if (fg > 0)
		return fg;
	return x->attach ? ss->cfg.init_pid : x->pid;
}

static void take_frame(struct shim_sessions *ss, struct sess *x,
		       const struct kn_mux_frame *f)
{
	struct kn_error err;
	unsigned rows, cols;
	pid_t group;

	if (!x->started) {
		if (f->type == KN_MUX_SESSION)
			session_request(ss, x, f);
		else
			refuse(x, "the session has no request");
		return;
	}
	switch (f->type) {
	case KN_MUX_DATA:
		take_data(x, f);
		break;
	case KN_MUX_WINDOW_UPDATE:
		if (kn_mux_window_update(x->win, f, &err) < 0)
			refuse(x, "WINDOW on a stream it cannot be for");
		break;
	case KN_MUX_END:
		x->stdin_end |= f->stream == KN_MUX_STREAM_STDIN;
		end_stdin(x);
		break;
	case KN_MUX_RESIZE:
		kn_mux_resize_size(f, &rows, &cols);
		if (x->tty)
			resize(x->in_fd, rows, cols);
		break;
	case KN_MUX_SIGNAL:
		group = signal_group(ss, x);
		if (group > 0)
			kill(-group, kn_mux_signal_number(f));
		break;
	case KN_MUX_PING:
	case KN_MUX_RESET:
		break;
	case KN_MUX_OPEN:
		queue_text(x, KN_MUX_RESET, f->stream,
			   "this task's shim opens no streams");
		break;
	default:
		refuse(x, "a frame the server does not send");
	}
}

static void read_session(struct shim_sessions *ss, struct sess *x)
{
	uint8_t buf[KN_MUX_MAX_FRAME];
	struct kn_mux_frame f;
	struct kn_error err;
	ssize_t n = recv(x->fd, buf, sizeof(buf), 0);
	size_t off = 0;
	int rc = 0;

	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
		x->closing = true;
		x->out_len = 0; /* the server is gone: nothing to send */
		return;
	}
	while (n > 0 && off < (size_t)n && !x->closing) {
		off += kn_mux_reader_fill(&x->rd, buf + off, (size_t)n - off);
		while (!x->closing &&
		       (rc = kn_mux_reader_next(&x->rd, &f, &err)) == 1)
			take_frame(ss, x, &f);
		if (rc < 0)
			refuse(x, err.message);
	}
}

/* ---- a process's output ---- */

/* Reads per turn of the loop: a bulk stream moves in fewer turns,
   and the other sessions still get theirs. */
#define READS_PER_TURN 8

static void read_output(struct sess *x, int *fd, uint32_t stream)
{
	uint8_t buf[KN_MUX_MAX_PAYLOAD];
	size_t can;
	ssize_t n = 0;

	for (int i = 0; i < READS_PER_TURN; i++) {
		if (*fd < 0 || !(can = room(x, stream)))
			return;
		n = read(*fd, buf, can);
		if (n <= 0)
			break;
		queue_data(x, stream, buf, (size_t)n);
	}
	if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR)))
		return;
	/* The end (a terminal says EIO once no one holds its other side). */
	if (x->tty && *fd == x->in_fd)
		x->in_fd = -1;
	close(*fd);
	*fd = -1;
}

static void exit_frame(struct sess *x, int wstatus, const char *reason)
{
	uint8_t f[KN_MUX_MAX_FRAME];
	int code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 0;
	int sig = WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : 0;

	queue(x, f, kn_mux_encode_exit(f, code, sig, reason));
	x->closing = true;
}

/* ---- the set ---- */

static void sess_free(struct shim_sessions *ss, struct sess *x)
{
	if (x->pid > 0 && !x->reaped) {
		/* An exec lives as long as its connection. */
		kill(-x->pid, SIGKILL);
		kill(x->pid, SIGKILL);
		if (ss->n_orphans < ORPHANS_MAX)
			ss->orphans[ss->n_orphans++] = x->pid;
	}
	if (x->out_fd >= 0)
		close(x->out_fd);
	if (x->err_fd >= 0)
		close(x->err_fd);
	if (!x->attach && x->in_fd >= 0 && x->in_fd != x->out_fd)
		close(x->in_fd);
	if (x->fd >= 0)
		close(x->fd);
	KN_FREE_ALL(x->out, x->pend, x);
}

static void accept_one(struct shim_sessions *ss)
{
	struct ucred peer;
	socklen_t len = sizeof(peer);
	struct sess *x;
	size_t slot;
	int fd = accept4(ss->listen_fd, NULL, NULL,
			 SOCK_NONBLOCK | SOCK_CLOEXEC);

	if (fd < 0)
		return;
	for (slot = 0; slot < SESSIONS_MAX && ss->s[slot]; slot++)
		;
	if (slot == SESSIONS_MAX ||
	    getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) < 0 ||
	    (peer.uid != geteuid() && peer.uid != 0)) {
		close(fd);
		return;
	}
	x = kn_xcalloc(1, sizeof(*x));
	x->fd = fd;
	x->in_fd = x->out_fd = x->err_fd = -1;
	kn_mux_reader_init(&x->rd);
	for (int i = 0; i < 4; i++)
		kn_mux_window_init(&x->win[i]);
	ss->s[slot] = x;
}

/*
 * Whether the sandbox's init has started the task, which it does once
 * it has built the task's view of the files: a command that joined its
 * mount namespace before would see it half built. Its children are
 * listed by /proc/PID/task/PID/children where the kernel has it, else
 * found by their parent in /proc.
 */
static bool init_has_child(int init_pid)
{
	char path[64], buf[32];
	ssize_t n;
	int fd;
	DIR *d;
	struct dirent *e;
	bool found = false;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", init_pid,
		 init_pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0) {
		n = read(fd, buf, sizeof(buf));
		close(fd);
		return n > 0;
	}
	if (!(d = opendir("/proc")))
		return true;
	while (!found && (e = readdir(d))) {
		char stat[512], *close_paren;
		int ppid = 0;
		snprintf(path, sizeof(path), "/proc/%.20s/stat", e->d_name);
		if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
			continue;
		n = read(fd, stat, sizeof(stat) - 1);
		close(fd);
		stat[n > 0 ? n : 0] = '\0';
		close_paren = strrchr(stat, ')');
		found = close_paren &&
			sscanf(close_paren + 1, " %*c %d", &ppid) == 1 &&
			ppid == init_pid;
	}
	closedir(d);
	return found;
}

static bool joinable(struct shim_sessions *ss)
{
	if (!ss->view_built)
		ss->view_built = !kn_sandbox_user(ss->cfg.sandbox) ||
				 init_has_child(ss->cfg.init_pid);
	return ss->view_built;
}

size_t shim_sessions_poll_fill(struct shim_sessions *ss, struct pollfd *fds,
			       size_t cap)
{
	size_t n = 0;

	if (!ss || !ss->ready || !joinable(ss) ||
	    cap < SHIM_SESSIONS_POLL_MAX)
		return 0;
	fds[n++] = (struct pollfd){ss->listen_fd, POLLIN, 0};
	for (size_t i = 0; i < SESSIONS_MAX; i++) {
		struct sess *x = ss->s[i];
		if (!x) {
			for (int k = 0; k < 4; k++)
				fds[n++] = (struct pollfd){-1, 0, 0};
			continue;
		}
		fds[n++] = (struct pollfd){
			x->fd, (short)((x->closing ? 0 : POLLIN) |
				       (x->out_len ? POLLOUT : 0)),
			0};
		fds[n++] = (struct pollfd){
			room(x, KN_MUX_STREAM_STDOUT) && !x->closing ? x->out_fd
								     : -1,
			POLLIN, 0};
		fds[n++] = (struct pollfd){
			room(x, KN_MUX_STREAM_STDERR) && !x->closing ? x->err_fd
								     : -1,
			POLLIN, 0};
		fds[n++] = (struct pollfd){x->pend_len ? x->in_fd : -1,
					   POLLOUT, 0};
	}
	return n;
}

/* An exec whose process ended and whose output is all read: EXIT. */
static void exec_maybe_done(struct sess *x, const struct pollfd *out,
			    const struct pollfd *err)
{
	if (x->attach || !x->started || !x->reaped || x->closing)
		return;
	/* Ended, and nothing left in its pipes on this turn. */
	if (x->out_fd >= 0 && (out->fd < 0 || out->revents))
		return;
	if (x->err_fd >= 0 && (err->fd < 0 || err->revents))
		return;
	exit_frame(x, x->wstatus, "");
}

void shim_sessions_poll_done(struct shim_sessions *ss,
			     const struct pollfd *fds, size_t n)
{
	if (!ss || !ss->ready || !ss->view_built ||
	    n < SHIM_SESSIONS_POLL_MAX)
		return;
	if (fds[0].revents & POLLIN)
		accept_one(ss);
	for (size_t i = 0; i < SESSIONS_MAX; i++) {
		const struct pollfd *p = fds + 1 + i * 4;
		struct sess *x = ss->s[i];
		if (!x || p[0].fd != x->fd)
			continue; /* accepted on this turn */
		if (p[0].revents & (POLLIN | POLLHUP | POLLERR))
			read_session(ss, x);
		if (p[1].revents && !x->closing)
			read_output(x, &x->out_fd, KN_MUX_STREAM_STDOUT);
		if (p[2].revents && !x->closing)
			read_output(x, &x->err_fd, KN_MUX_STREAM_STDERR);
		if (p[3].revents && !x->closing) {
			write_stdin(x);
			end_stdin(x);
		}
		exec_maybe_done(x, &p[1], &p[2]);
		flush_out(x);
		if (x->closing && !x->out_len) {
			sess_free(ss, x);
			ss->s[i] = NULL;
		}
	}
}

size_t shim_sessions_task_room(const struct shim_sessions *ss)
{
	size_t can = RING_BYTES;

	for (size_t i = 0; ss && i < SESSIONS_MAX; i++)
		if (ss->s[i] && ss->s[i]->attach && !ss->s[i]->closing)
			can = room(ss->s[i], KN_MUX_STREAM_STDOUT);
	return can;
}

void shim_sessions_task_output(struct shim_sessions *ss, const void *buf,
			       size_t n)
{
	const uint8_t *p = buf;

	if (!ss)
		return;
	for (size_t i = 0; i < SESSIONS_MAX; i++)
		if (ss->s[i] && ss->s[i]->attach && !ss->s[i]->closing) {
			queue_data(ss->s[i], KN_MUX_STREAM_STDOUT, p, n);
			flush_out(ss->s[i]);
		}
	/* The ring keeps the last RING_BYTES. */
	if (n >= RING_BYTES) {
		memcpy(ss->ring, p + n - RING_BYTES, RING_BYTES);
		ss->ring_start = 0;
		ss->ring_len = RING_BYTES;
		return;
	}
	for (size_t k = 0; k < n; k++) {
		size_t at = (ss->ring_start + ss->ring_len) % RING_BYTES;
		ss->ring[at] = p[k];
		if (ss->ring_len < RING_BYTES)
			ss->ring_len++;
		else
			ss->ring_start = (ss->ring_start + 1) % RING_BYTES;
	}
}

/* While the sandbox is being built, sessions wait: looked at this often. */
#define VIEW_POLL_MS 20

/* poll's timeout while sessions wait on a turn or on the sandbox, else
   -1. */
static int shim_sessions_timeout(const struct shim_sessions *ss)
{
	if (ss && ss->ready && !ss->view_built)
		return VIEW_POLL_MS;
	for (size_t i = 0; ss && i < SESSIONS_MAX; i++) {
		const struct sess *x = ss->s[i];
		if (x && !x->attach && x->started && x->reaped &&
		    !x->closing &&
		    (x->out_fd < 0 || room(x, KN_MUX_STREAM_STDOUT)) &&
		    (x->err_fd < 0 || room(x, KN_MUX_STREAM_STDERR)))
			return 0;
	}
	return -1;
}

int shim_sessions_wait_ms(const struct shim_sessions *ss, int wait_ms)
{
	int mine = shim_sessions_timeout(ss);

	return mine >= 0 && (wait_ms < 0 || mine < wait_ms) ? mine : wait_ms;
}

void shim_sessions_reap(struct shim_sessions *ss)
{
	int st;

	for (size_t i = 0; ss && i < SESSIONS_MAX; i++) {
		struct sess *x = ss->s[i];
		if (x && x->pid > 0 && !x->reaped &&
		    waitpid(x->pid, &st, WNOHANG) == x->pid) {
			x->reaped = true;
			x->wstatus = st;
		}
	}
	for (size_t i = 0; ss && i < ss->n_orphans;)
		if (waitpid(ss->orphans[i], &st, WNOHANG) != 0)
			ss->orphans[i] = ss->orphans[--ss->n_orphans];
		else
			i++;
}

void shim_sessions_finish(struct shim_sessions *ss, int wstatus,
			  const char *reason)
{
	int64_t deadline = kn_mono_ms() + FINISH_MS;

	if (!ss)
		return;
	for (size_t i = 0; i < SESSIONS_MAX; i++)
		if (ss->s[i] && ss->s[i]->attach && !ss->s[i]->closing)
			exit_frame(ss->s[i], wstatus, reason);
	for (size_t i = 0; i < SESSIONS_MAX; i++) {
		struct sess *x = ss->s[i];
		while (x && x->out_len && kn_mono_ms() < deadline) {
			struct pollfd p = {x->fd, POLLOUT, 0};
			if (poll(&p, 1, (int)(deadline - kn_mono_ms())) <= 0)
				break;
			flush_out(x);
		}
	}
}

void shim_sessions_free(struct shim_sessions *ss)
{
	if (!ss)
		return;
	for (size_t i = 0; i < SESSIONS_MAX; i++)
		if (ss->s[i])
			sess_free(ss, ss->s[i]);
	if (ss->listen_fd >= 0) {
		close(ss->listen_fd);
		unlink(ss->path);
	}
	KN_FREE_ALL(ss->path, ss->workdir, ss);
}
