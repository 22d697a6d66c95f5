/*
 * Interactive sessions and port-forwards on a Kubernetes task: the
 * executor's session_connect and port_connect (batchjobs.c) hand the
 * server one end of a socket pair, exactly as the Slurm executor hands
 * it srun's pipe, and a thread of the session's own bridges the other
 * end to the API server's pods/exec, pods/attach or pods/portforward
 * subresource over a WebSocket (src/ws, wsconn.c).
 *
 * Sessions: the server's side speaks src/mux's frames as a task's shim
 * does (its first frame the SESSION request: exec or attach, argv, tty,
 * size). This bridge plays the shim: stdin DATA goes out on channel 0,
 * channels 1 and 2 come back as stdout and stderr DATA within the credit
 * the client granted, RESIZE becomes channel 4's {"Width","Height"},
 * END on stdin becomes v5's close of channel 0 (channel 255), and the
 * v1 Status on channel 3 becomes EXIT (its ExitCode cause for a non-zero
 * exit) or ERROR. Kubernetes' protocol has no signal channel: on a
 * terminal SIGINT and SIGQUIT go in as the Ctrl-C and Ctrl-\ bytes the
 * pod's terminal turns into them; without one a signal cannot be passed.
 *
 * Port-forwards: one status byte (KN_BRIDGE_PORT_*, as Slurm's bridge
 * sends), then raw bytes both ways over portforward.k8s.io's data
 * channel 0; its first frame on each channel starts with the port,
 * little-endian, and a message on error channel 1 ends the forward.
 *
 * The wire format follows the Kubernetes sources:
 * staging/src/k8s.io/apimachinery/pkg/util/remotecommand/constants.go
 * (the subprotocol names, v5's close channel), client-go's
 * tools/remotecommand/websocket.go (channels 0-4, the resize message,
 * the Status on the error channel) and the kubelet's
 * pkg/kubelet/cri/streaming/portforward/websocket.go (the channel pairs
 * and the little-endian port prefix). It has been checked against
 * recorded exchanges replayed by tests/e2e, never against a real
 * cluster.
 *
 * Back-pressure: the thread reads the API server only while the client's
 * credit for the stream it would feed lasts (the held message waits in
 * the WebSocket reader's buffer), and reads the server's side only when
 * it has sent the last frame on; every write is blocking in this thread,
 * never on the server's loop. A flooding pod fills the TCP window to the
 * API server; a client that stops reading stalls its own session.
 *
 * Rejected: proxying through `kubectl exec` (a process and a binary per
 * session, and the cluster's credentials on its command line or in a
 * file), and SPDY, which the API server is retiring for these
 * subresources.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <fcntl.h>

#include "kube/internal.h"
#include "mux/mux.h"
#include "ws/ws.h"

#define SESSION_PROTOCOLS "v5.channel.k8s.io,v4.channel.k8s.io"
#define PORT_PROTOCOL "portforward.k8s.io"
/* The server's SESSION request comes right after it connects. */
#define REQUEST_WAIT_MS 10000
/* How long a session waits for its task's pod to run (scheduling and
   an image pull), and how often it looks. */
#define POD_WAIT_MS (5 * 60 * 1000)
#define POD_RETRY_MS 1000
/* The longest message taken from the API server (the kubelet copies
   output in 32 KiB pieces). */
#define MAX_MESSAGE (256 * 1024)
#define READ_CHUNK (64 * 1024)
/* An exec's query: argv, each escaped, within this. */
#define MAX_PATH 16384

enum channel {
	CH_STDIN = 0,
	CH_STDOUT = 1,
	CH_STDERR = 2,
	CH_ERROR = 3,
	CH_RESIZE = 4,
	CH_CLOSE = 255, /* v5: its payload names the channel closed */
};

struct kube_bridges {
	pthread_mutex_t lock;
	pthread_cond_t ended;
	int alive;
	/* Closing stop[1] ends every bridge: each polls stop[0] beside its
	   sockets (the server's end may close only when its loop turns
	   again, which a stopping server's no longer does). */
	int stop[2];
};

struct bridge {
	struct kube_bridges *all;
	struct kn_kube_auth auth;
	char *ns, *job;
	int rank, port;
	int fd;                 /* this thread's end of the pair */
	struct kube_ws *ws;
	bool v5, tty, done;
	/* The server's frames; what each side may still send per stream. */
	struct kn_mux_reader from_server;
	struct kn_mux_window win[KN_MUX_STREAM_STDERR + 1];
	/* The API server's bytes not yet fed to the reader. */
	struct kn_ws_reader from_api;
	uint8_t in[READ_CHUNK];
	size_t in_len, in_off;
	/* The rest of an output message that waits for the client's credit,
	   in from_api's buffer. */
	const uint8_t *held;
	size_t held_len;
	uint32_t held_stream;
	/* Port-forward: the port prefix seen on each channel. */
	bool prefix_seen[2];
};

static void bridge_free(struct bridge *b)
{
	kube_ws_close(b->ws);
	if (b->fd >= 0)
		close(b->fd);
	kn_ws_reader_release(&b->from_api);
	kn_kube_auth_release(&b->auth);
	KN_FREE_ALL(b->ns, b->job, b);
}

static int to_server(struct bridge *b, const void *data, size_t len)
{
	int rc = kn_send_all(b->fd, data, len);

	if (rc < 0)
		b->done = true;
	return rc;
}

/* The session ends with why (an ERROR frame), or silently (NULL). */
static void end_session(struct bridge *b, const char *why)
{
	uint8_t f[KN_MUX_MAX_FRAME];

	if (why && !b->done)
		to_server(b, f, kn_mux_encode_text(f, KN_MUX_ERROR,
						   KN_MUX_STREAM_CONTROL, why));
	b->done = true;
}

static void to_api(struct bridge *b, uint8_t channel, const void *data,
		   size_t len)
{
	if (!b->done &&
	    kube_ws_send(b->ws, KN_WS_BINARY, &channel, 1, data, len) < 0)
		end_session(b, "the API server's connection failed");
}

/* ---- finding the pod ---- */

/*
 * The running pod of the bridge's rank: 0 with its name in pod, or a
 * negative errno with err. A task is running for kiln from its Job's
 * submission, before its pod is scheduled, pulled and started: a pod
 * not there yet or not running yet is looked for again each second
 * until POD_WAIT_MS, unless the server's side goes away meanwhile.
 */
static int find_pod(struct bridge *b, char *pod, size_t cap,
		    struct kn_error *err)
{
	char *path = kn_asprintf("/api/v1/namespaces/%s/pods?labelSelector="
				 "kiln.dev%%2Fjob%%3D%s", b->ns, b->job);
	struct kn_kube_client *client = NULL;
	struct kn_kube_task_view v = {0};
	json_t *job = json_object();
	int64_t until = kn_mono_ms() + POD_WAIT_MS;
	int rc = kn_kube_client_new(&b->auth, &client, err);

	while (rc == 0) {
		struct pollfd p[2] = {{b->fd, POLLRDHUP, 0},
				      {b->all->stop[0], POLLIN, 0}};
		json_t *list = NULL;
		long status = 0;

		rc = kn_kube_get(client, path, &status, &list, err);
		if (rc == 0 && status != 200)
			rc = kn_errorf(err, KN_EUNAVAIL, NULL, "GET %s: HTTP %ld",
				       path, status);
		if (rc == 0)
			kn_kube_task_state(job, json_object_get(list, "items"),
					   b->rank, false, &v);
		json_decref(list);
		if (rc < 0 || (v.running && v.pod[0]))
			break;
		if (v.ended || kn_mono_ms() >= until) {
			rc = kn_errorf(err, KN_ECONFLICT, NULL,
				       "task %d's pod%s%s is not running%s",
				       b->rank, v.pod[0] ? " " : "", v.pod,
				       v.ended ? " (it ended)" : "");
			break;
		}
		if (poll(p, 2, POD_RETRY_MS) != 0) {
			rc = kn_errorf(err, KN_EUNAVAIL, NULL,
				       "the session was closed");
			break;
		}
	}
	if (rc == 0)
		kn_strlcpy(pod, v.pod, cap);
	json_decref(job);
	kn_kube_client_free(client);
	free(path);
	return rc;
}

/* ---- the API server's messages ---- */

/* Sends what credit allows of the held output (a port's: all of it,
   blocking): true when all went. */
static bool flush_held(struct bridge *b)
{
	uint8_t f[KN_MUX_MAX_FRAME];

	if (b->port) { /* raw bytes: the socket's own back-pressure */
		to_server(b, b->held, b->held_len);
		b->held_len = 0;
		return true;
	}
	while (b->held_len && !b->done) {
		struct kn_mux_window *w = &b->win[b->held_stream];
		size_t n = b->held_len;
		if (w->send <= 0)
			return false;
		if ((int64_t)n > w->send)
			n = (size_t)w->send;
		if (n > KN_MUX_MAX_PAYLOAD)
			n = KN_MUX_MAX_PAYLOAD;
		to_server(b, f, kn_mux_encode(f, KN_MUX_DATA, b->held_stream,
					      b->held, n));
		kn_mux_window_spend(w, n);
		b->held += n;
		b->held_len -= n;
	}
	return true;
}

/* The v1 Status on the error channel: the exit, or why not. */
static void take_status(struct bridge *b, const uint8_t *data, size_t len)
{
	uint8_t f[KN_MUX_MAX_FRAME];
	json_t *st = json_loadb((const char *)data, len, 0, NULL), *cause;
	const char *status = json_string_value(json_object_get(st, "status"));
	const char *reason = json_string_value(json_object_get(st, "reason"));
	const char *msg = json_string_value(json_object_get(st, "message"));
	char why[KN_MUX_MAX_TEXT];
	int code = -1;
	size_t i;

	if (status && !strcmp(status, "Success"))
		code = 0;
	else if (reason && !strcmp(reason, "NonZeroExitCode"))
		json_array_foreach(json_object_get(json_object_get(st, "details"),
						   "causes"),
				   i, cause) {
			const char *r = json_string_value(
				json_object_get(cause, "reason"));
			const char *m = json_string_value(
				json_object_get(cause, "message"));
			char *end;
			long v = m ? strtol(m, &end, 10) : -1;
			if (r && !strcmp(r, "ExitCode") && m && *m && !*end &&
			    v >= 0 && v <= 255)
				code = (int)v;
		}
	if (code >= 0) {
		to_server(b, f, kn_mux_encode_exit(f, code, 0, ""));
		b->done = true;
		json_decref(st);
		return;
	}
	snprintf(why, sizeof(why), "the pod's session failed: %s",
		 msg ? msg : st ? "a Status without a message"
				: "the error channel's message is not a Status");
	json_decref(st);
	end_session(b, why);
}

static void take_session_message(struct bridge *b, const uint8_t *data,
				 size_t len)
{
	switch (data[0]) {
	case CH_STDOUT:
	case CH_STDERR:
		b->held = data + 1;
		b->held_len = len - 1;
		b->held_stream = data[0] == CH_STDOUT ? KN_MUX_STREAM_STDOUT
						      : KN_MUX_STREAM_STDERR;
		flush_held(b);
		break;
	case CH_ERROR:
		take_status(b, data + 1, len - 1);
		break;
	default: /* channels this client does not read: ignored */
		break;
	}
}

/* portforward.k8s.io: channel 0 data, channel 1 errors, each starting
   with the port. */
static void take_port_message(struct bridge *b, const uint8_t *data,
			      size_t len)
{
	unsigned ch = data[0];
	char why[256];

	data++;
	len--;
	if (ch > 1) {
		end_session(b, NULL);
		return;
	}
	if (!b->prefix_seen[ch]) {
		if (len < 2 || (data[0] | data[1] << 8) != b->port) {
			end_session(b, NULL);
			return;
		}
		b->prefix_seen[ch] = true;
		data += 2;
		len -= 2;
	}
	if (ch == 0 && len) {
		b->held = data;
		b->held_len = len;
	} else if (ch == 1 && len) {
		/* The kubelet could not reach the port: nothing more comes. */
		snprintf(why, sizeof(why), "%.*s", (int)len, (const char *)data);
		kn_log(KN_LOG_INFO, "port-forward to %s task %d port %d: %s",
		       b->job, b->rank, b->port, why);
		end_session(b, NULL);
	}
}

static void take_api_message(struct bridge *b, const struct kn_ws_message *m)
{
	switch (m->opcode) {
	case KN_WS_PING:
		if (kube_ws_send(b->ws, KN_WS_PONG, "", 0, m->data, m->len) < 0)
			end_session(b, "the API server's connection failed");
		break;
	case KN_WS_PONG:
		break;
	case KN_WS_CLOSE:
		end_session(b, b->port ? NULL
				       : "the API server closed the session");
		break;
	case KN_WS_TEXT:
		end_session(b, "the API server sent text where the channel "
			    "protocol sends binary messages");
		break;
	default:
		if (m->len == 0)
			break;
		if (b->port)
			take_port_message(b, m->data, m->len);
		else if (m->len > 1)
			take_session_message(b, m->data, m->len);
	}
}

/* Feeds what was read from the API server while output can go on. */
static void pump_api(struct bridge *b)
{
	struct kn_ws_message m;
	struct kn_error err;

	while (!b->done) {
		size_t used = 0;
		int rc;
		if (b->held_len && !flush_held(b))
			return;
		if (b->in_off == b->in_len)
			return;
		rc = kn_ws_reader_feed(&b->from_api, b->in + b->in_off,
				       b->in_len - b->in_off, &used, &m, &err);
		b->in_off += used;
		if (rc < 0) {
			/* Close 1002 (protocol error), and end this session
			   only. */
			kube_ws_send(b->ws, KN_WS_CLOSE, "\x03\xea", 2, NULL, 0);
			end_session(b, b->port ? NULL : err.message);
			return;
		}
		if (rc == 1)
			take_api_message(b, &m);
	}
}

static void read_api(struct bridge *b)
{
	ssize_t n = kube_ws_read(b->ws, b->in, sizeof(b->in));

	if (n <= 0) {
		end_session(b, b->port ? NULL
				       : "the API server closed the connection");
		return;
	}
	b->in_len = (size_t)n;
	b->in_off = 0;
}

/* ---- the server's side ---- */

/* A session's frame from the server (the client's, relayed). */
static void take_frame(struct bridge *b, const struct kn_mux_frame *f)
{
	uint8_t w[KN_MUX_MAX_FRAME];
	struct kn_error err;
	unsigned rows, cols;
	uint32_t grant;
	char json[64];
	int sig;

	switch (f->type) {
	case KN_MUX_DATA:
		if (f->stream != KN_MUX_STREAM_STDIN ||
		    kn_mux_window_take(&b->win[KN_MUX_STREAM_STDIN], f->len,
				       &err) < 0) {
			end_session(b, "DATA past its credit or not on stdin");
			return;
		}
		to_api(b, CH_STDIN, f->payload, f->len);
		grant = kn_mux_window_consume(&b->win[KN_MUX_STREAM_STDIN],
					      f->len);
		if (grant)
			to_server(b, w, kn_mux_encode_window(
						w, KN_MUX_STREAM_STDIN, grant));
		break;
	case KN_MUX_WINDOW_UPDATE:
		if (kn_mux_window_update(b->win, f, &err) < 0)
			end_session(b, "WINDOW on a stream it cannot be for");
		break;
	case KN_MUX_END:
		/* Only v5 can close stdin and keep the session. */
		if (f->stream == KN_MUX_STREAM_STDIN && b->v5)
			to_api(b, CH_CLOSE, "\0", 1);
		break;
	case KN_MUX_RESIZE:
		kn_mux_resize_size(f, &rows, &cols);
		if (b->tty)
			to_api(b, CH_RESIZE, json,
			       (size_t)snprintf(json, sizeof(json),
						"{\"Width\":%u,\"Height\":%u}",
						cols, rows));
		break;
	case KN_MUX_SIGNAL:
		sig = kn_mux_signal_number(f);
		if (b->tty && (sig == SIGINT || sig == SIGQUIT))
			to_api(b, CH_STDIN, sig == SIGINT ? "\x03" : "\x1c", 1);
		break;
	case KN_MUX_OPEN:
		to_server(b, w, kn_mux_encode_text(w, KN_MUX_RESET, f->stream,
						   "a pod's session opens no "
						   "streams"));
		break;
	case KN_MUX_PING:
	case KN_MUX_RESET:
		break;
	default:
		end_session(b, "a frame the server does not send");
	}
}

/* Bytes from the server: frames of a session, or a port's raw bytes. */
static void read_server(struct bridge *b)
{
	uint8_t buf[READ_CHUNK];
	struct kn_mux_frame f;
	struct kn_error err;
	ssize_t n = recv(b->fd, buf, sizeof(buf), 0);
	size_t off = 0;
	int rc = 0;

	if (n < 0 && errno == EINTR)
		return;
	if (n <= 0) { /* the client went: the API's side is closed too */
		kube_ws_send(b->ws, KN_WS_CLOSE, "\x03\xe8", 2, NULL, 0);
		b->done = true;
		return;
	}
	if (b->port) {
		to_api(b, 0, buf, (size_t)n);
		return;
	}
	while (off < (size_t)n && !b->done) {
		off += kn_mux_reader_fill(&b->from_server, buf + off,
					  (size_t)n - off);
		while (!b->done &&
		       (rc = kn_mux_reader_next(&b->from_server, &f, &err)) == 1)
			take_frame(b, &f);
		if (rc < 0)
			end_session(b, err.message);
	}
}

/* Relays until either side ends. */
static void relay(struct bridge *b)
{
	while (!b->done) {
		bool want_api = !b->held_len && b->in_off == b->in_len;
		struct pollfd p[3] = {{b->fd, POLLIN, 0},
				      {kube_ws_fd(b->ws), want_api ? POLLIN : 0,
				       0},
				      {b->all->stop[0], POLLIN, 0}};

		if (want_api && kube_ws_buffered(b->ws)) {
			read_api(b);
		} else {
			if ((poll(p, 3, -1) < 0 && errno != EINTR) ||
			    p[2].revents)
				break;
			if (p[0].revents)
				read_server(b);
			if (!b->done && want_api && p[1].revents)
				read_api(b);
		}
		pump_api(b);
	}
}

/* ---- a session ---- */

/* Exactly n bytes from the server's side before until: 0, or -1. */
static int read_exactly(struct bridge *b, uint8_t *buf, size_t n,
			int64_t until)
{
	while (n) {
		struct pollfd p[2] = {{b->fd, POLLIN, 0},
				      {b->all->stop[0], POLLIN, 0}};
		int64_t left = until - kn_mono_ms();
		ssize_t got;

		if (left <= 0 || poll(p, 2, (int)left) < 1 || p[1].revents)
			return -1;
		got = recv(b->fd, buf, n, 0);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return -1;
		buf += got;
		n -= (size_t)got;
	}
	return 0;
}

/*
 * The server's SESSION request: its JSON, or NULL when none came. Only
 * that frame is read, so what the client sent right behind it stays in
 * the socket for the relay.
 */
static json_t *session_request(struct bridge *b)
{
	uint8_t buf[KN_MUX_MAX_FRAME];
	struct kn_mux_frame f;
	struct kn_error err;
	int64_t until = kn_mono_ms() + REQUEST_WAIT_MS;
	size_t len, used;

	if (read_exactly(b, buf, KN_MUX_HEAD, until) < 0)
		return NULL;
	len = (size_t)buf[2] << 8 | buf[3];
	if (len > KN_MUX_MAX_PAYLOAD ||
	    read_exactly(b, buf + KN_MUX_HEAD, len, until) < 0 ||
	    kn_mux_decode(buf, KN_MUX_HEAD + len, &f, &used, &err) != 1 ||
	    f.type != KN_MUX_SESSION)
		return NULL;
	return json_loadb((const char *)f.payload, f.len, 0, NULL);
}

/* The exec's or attach's path on pod, or NULL with why. */
static char *session_path(struct bridge *b, const char *pod, json_t *req,
			  char *why, size_t cap)
{
	const char *op = json_string_value(json_object_get(req, "op"));
	bool exec = op && !strcmp(op, "exec");
	json_t *argv = json_object_get(req, "argv"), *a;
	struct kn_buf path;
	size_t i;
	int rc;

	if (!op || (!exec && strcmp(op, "attach") != 0) ||
	    (exec && !json_array_size(argv))) {
		snprintf(why, cap, "the session's request is neither an exec "
			 "with a command nor an attach");
		return NULL;
	}
	kn_buf_init(&path, MAX_PATH);
	rc = kn_buf_printf(&path, "/api/v1/namespaces/%s/pods/%s/%s?container="
			   "task&stdin=true&stdout=true&stderr=%s&tty=%s",
			   b->ns, pod, exec ? "exec" : "attach",
			   b->tty ? "false" : "true", b->tty ? "true" : "false");
	json_array_foreach(argv, i, a) {
		if (!exec || rc < 0)
			break;
		rc = kn_buf_append(&path, "&command=", 9);
		if (rc == 0)
			rc = kn_buf_append_url_encoded(
				&path,
				json_string_value(a) ? json_string_value(a)
						     : "",
				false);
	}
	if (rc < 0 || !path.data) {
		kn_buf_release(&path);
		snprintf(why, cap, "the command is too long for the API "
			 "server's query (%d bytes)", MAX_PATH);
		return NULL;
	}
	return path.data;
}

static void run_session(struct bridge *b)
{
	char pod[256], chosen[32], why[KN_MUX_MAX_TEXT], *path = NULL;
	json_t *req = session_request(b);
	const char *op = json_string_value(json_object_get(req, "op"));
	struct kn_error err;
	int64_t rows, cols;

	if (!req) {
		end_session(b, "the session has no request");
		return;
	}
	/* kiln gives a pod's container a terminal exactly when its job has
	   one (render.c), and attach is to that terminal. */
	b->tty = json_is_true(json_object_get(req, "tty")) ||
		 (op && !strcmp(op, "attach"));
	rows = json_integer_value(json_object_get(req, "rows"));
	cols = json_integer_value(json_object_get(req, "cols"));
	if (find_pod(b, pod, sizeof(pod), &err) < 0) {
		end_session(b, err.message);
	} else if (!(path = session_path(b, pod, req, why, sizeof(why)))) {
		end_session(b, why);
	} else if (kube_ws_open(&b->auth, path, SESSION_PROTOCOLS, &b->ws,
				chosen, sizeof(chosen), &err) < 0) {
		end_session(b, err.message);
	} else {
		b->v5 = !strcmp(chosen, "v5.channel.k8s.io");
		if (b->tty && rows > 0 && cols > 0) {
			char size[64];
			to_api(b, CH_RESIZE, size,
			       (size_t)snprintf(size, sizeof(size),
						"{\"Width\":%lld,\"Height\":%lld}",
						(long long)cols, (long long)rows));
		}
		relay(b);
	}
	free(path);
	json_decref(req);
}

/* ---- a port ---- */

static void run_port(struct bridge *b)
{
	char pod[256], chosen[32], *path;
	struct kn_error err;
	uint8_t status;

	if (find_pod(b, pod, sizeof(pod), &err) < 0) {
		status = KN_BRIDGE_PORT_NO_TASK;
		to_server(b, &status, 1);
		return;
	}
	path = kn_asprintf("/api/v1/namespaces/%s/pods/%s/portforward?"
			   "ports=%d", b->ns, pod, b->port);
	status = kube_ws_open(&b->auth, path, PORT_PROTOCOL, &b->ws, chosen,
			      sizeof(chosen), &err) < 0
			 ? KN_BRIDGE_PORT_NO_ANSWER
			 : KN_BRIDGE_PORT_OK;
	if (status != KN_BRIDGE_PORT_OK)
		kn_log(KN_LOG_INFO, "port-forward to %s task %d port %d: %s",
		       b->job, b->rank, b->port, err.message);
	free(path);
	if (to_server(b, &status, 1) == 0 && status == KN_BRIDGE_PORT_OK)
		relay(b);
}

struct kube_bridges *kube_bridges_new(void)
{
	struct kube_bridges *bs = kn_xcalloc(1, sizeof(*bs));

	pthread_mutex_init(&bs->lock, NULL);
	pthread_cond_init(&bs->ended, NULL);
	/* Without the pipe (poll skips a negative descriptor) a stop waits
	   for the server's ends to close instead. */
	if (pipe2(bs->stop, O_CLOEXEC) < 0)
		bs->stop[0] = bs->stop[1] = -1;
	return bs;
}

static void bridges_add(struct kube_bridges *bs, int n)
{
	pthread_mutex_lock(&bs->lock);
	bs->alive += n;
	if (bs->alive == 0)
		pthread_cond_broadcast(&bs->ended);
	pthread_mutex_unlock(&bs->lock);
}

void kube_bridges_free(struct kube_bridges *bs, int wait_ms)
{
	struct timespec until;
	int alive;

	if (!bs)
		return;
	if (bs->stop[1] >= 0)
		close(bs->stop[1]);
	until = kn_realtime_in(wait_ms);
	pthread_mutex_lock(&bs->lock);
	while (bs->alive > 0 &&
	       pthread_cond_timedwait(&bs->ended, &bs->lock, &until) == 0)
		;
	alive = bs->alive;
	pthread_mutex_unlock(&bs->lock);
	if (alive > 0) {
		kn_log(KN_LOG_WARN, "kubernetes: %d session bridge%s still "
		       "running at the stop", alive, alive == 1 ? "" : "s");
		return;
	}
	if (bs->stop[0] >= 0)
		close(bs->stop[0]);
	pthread_mutex_destroy(&bs->lock);
	pthread_cond_destroy(&bs->ended);
	free(bs);
}

static void *bridge_main(void *arg)
{
	struct bridge *b = arg;
	struct kube_bridges *all = b->all;

	if (b->port)
		run_port(b);
	else
		run_session(b);
	bridge_free(b);
	bridges_add(all, -1);
	return NULL;
}

int kube_session_start(struct kube_bridges *bs,
		       const struct kn_kube_auth *auth, const char *ns,
		       const char *job, int rank, int port,
		       struct kn_error *err)
{
	struct bridge *b = kn_xcalloc(1, sizeof(*b));
	pthread_attr_t attr;
	pthread_t thread;
	int sv[2], rc;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		free(b);
		return kn_errorf(err, KN_EIO, NULL, "socketpair: %s",
				 strerror(errno));
	}
	b->all = bs;
	kn_kube_auth_copy(&b->auth, auth);
	b->ns = kn_xstrdup(ns);
	b->job = kn_xstrdup(job);
	b->rank = rank;
	b->port = port;
	b->fd = sv[1];
	kn_mux_reader_init(&b->from_server);
	kn_ws_reader_init(&b->from_api, MAX_MESSAGE);
	for (int i = 0; i <= KN_MUX_STREAM_STDERR; i++)
		kn_mux_window_init(&b->win[i]);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	bridges_add(bs, 1);
	rc = pthread_create(&thread, &attr, bridge_main, b);
	pthread_attr_destroy(&attr);
	if (rc != 0) {
		bridges_add(bs, -1);
		close(sv[0]);
		bridge_free(b);
		return kn_errorf(err, KN_EIO, NULL, "cannot start a session's "
				 "thread: %s", strerror(rc));
	}
	if (fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK) < 0) {
		/* The thread sees the end and goes. */
		close(sv[0]);
		return kn_errorf(err, KN_EIO, NULL, "fcntl: %s",
				 strerror(errno));
	}
	return sv[0];
}
