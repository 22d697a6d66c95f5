/*
 * Interactive sessions: `kiln attach` and `kiln exec` (and `kiln run
 * -it`, which attaches) upgrade their request to the frames of src/mux
 * (docs/api.md, "Interactive sessions"); this service checks who may,
 * writes the audit record (the command line for an exec), connects to
 * the task's shim (its session socket, src/exec/shim_session.c), sends
 * the shim the session's request and then relays frames both ways.
 *
 * The relay decodes every frame on each side and passes only what that
 * side may send: a client could otherwise start an unaudited exec with a
 * SESSION frame of its own, and a task that replaced its shim's socket
 * could send the client what no shim sends. Credit is end to end
 * (client and shim); the relay bounds what it queues for either side by
 * pausing the other when RELAY_HIGH waits, so a client that stops
 * reading stalls its own session and nothing else on the loop.
 *
 * Rejected: proxying bytes without decoding them (the two holes above),
 * and terminating credit here (a window per stream held in the server,
 * for no gain: the shim and the client already keep one).
 */
#include "internal.h"
#include "server/devenvsvc.h"
#include "server/service.h"

#include "exec/exec.h"
#include "loop/loop.h"
#include "mux/mux.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <jansson.h>

/* What one side may have queued before the other side is paused. */
#define RELAY_HIGH (1024 * 1024)
/* How long a session waits for a task's shim to listen, and how often it
   looks: the shim listens a moment after the task is running. */
#define SHIM_WAIT_MS 10000
#define SHIM_RETRY_MS 50
/* The audit detail of an exec: its command line, cut to this. */
#define COMMAND_LINE_MAX 1024

#define CLIENT_SENDS                                                         \
	(KN_MUX_BIT(KN_MUX_DATA) | KN_MUX_BIT(KN_MUX_WINDOW_UPDATE) |         \
	 KN_MUX_BIT(KN_MUX_OPEN) | KN_MUX_BIT(KN_MUX_END) |                   \
	 KN_MUX_BIT(KN_MUX_RESET) | KN_MUX_BIT(KN_MUX_RESIZE) |               \
	 KN_MUX_BIT(KN_MUX_SIGNAL) | KN_MUX_BIT(KN_MUX_PING))
#define SHIM_SENDS                                                           \
	(KN_MUX_BIT(KN_MUX_DATA) | KN_MUX_BIT(KN_MUX_WINDOW_UPDATE) |         \
	 KN_MUX_BIT(KN_MUX_END) | KN_MUX_BIT(KN_MUX_RESET) |                  \
	 KN_MUX_BIT(KN_MUX_EXIT) | KN_MUX_BIT(KN_MUX_ERROR) |                 \
	 KN_MUX_BIT(KN_MUX_PING))

struct session {
	struct sessions *all;
	struct server *core;
	int64_t job_id;
	struct kn_tunnel *client;
	struct kn_fd_stream *shim;
	struct kn_mux_reader from_client, from_shim;
	struct session *prev, *next;
};

struct opening;

struct sessions {
	struct session *list;
	struct opening *openings; /* waiting for their shim's socket */
};

static void session_free(struct session *x)
{
	struct sessions *all = x->all;

	/* A dev environment with a session open is in use. */
	devenv_session(x->core, x->job_id, -1);
	KN_DLIST_UNLINK(all->list, x);
	free(x);
}

/* Tell the client why and close both sides. shim_too: the shim stream
   is still open (not inside its own on_closed). */
static void session_end(struct session *x, const char *why, bool shim_too)
{
	uint8_t f[KN_MUX_MAX_FRAME];

	if (why)
		kn_tunnel_write(x->client, f,
				kn_mux_encode_text(f, KN_MUX_ERROR,
						   KN_MUX_STREAM_CONTROL, why));
	kn_tunnel_close(x->client);
	if (shim_too)
		kn_fd_stream_free(x->shim);
	session_free(x);
}

/*
 * Frames in data from one side, each checked against what that side may
 * send, written whole to the other: 0, 1 when the shim's EXIT or ERROR
 * ended the session, -1 when the bytes broke the protocol (why says how).
 */
static int relay(struct session *x, bool from_client, const char *data,
		 size_t len, char *why, size_t cap)
{
	struct kn_mux_reader *r = from_client ? &x->from_client : &x->from_shim;
	unsigned allowed = from_client ? CLIENT_SENDS : SHIM_SENDS;
	struct kn_mux_frame f;
	struct kn_error err;
	size_t off = 0;
	int rc = 0;

	while (off < len) {
		off += kn_mux_reader_fill(r, data + off, len - off);
		while ((rc = kn_mux_reader_next(r, &f, &err)) == 1) {
			const uint8_t *raw = f.payload - KN_MUX_HEAD;
			size_t n = KN_MUX_HEAD + f.len;
			if (!(allowed & KN_MUX_BIT(f.type))) {
				snprintf(why, cap, "frame: type %u may not "
					 "come from the %s", f.type,
					 from_client ? "client" : "task");
				return -1;
			}
			if (from_client)
				kn_fd_stream_write(x->shim, raw, n);
			else
				kn_tunnel_write(x->client, raw, n);
			if (f.type == KN_MUX_EXIT || f.type == KN_MUX_ERROR)
				return 1;
		}
		if (rc < 0) {
			kn_strlcpy(why, err.message, cap);
			return -1;
		}
	}
	return 0;
}

static bool client_data(void *arg, const char *data, size_t len)
{
	struct session *x = arg;
	char why[KN_MUX_MAX_TEXT];

	if (relay(x, true, data, len, why, sizeof(why)) < 0) {
		session_end(x, why, true);
		return true; /* closed: the tunnel reads no more */
	}
	if (kn_fd_stream_pending(x->shim) > RELAY_HIGH)
		kn_tunnel_pause(x->client, true);
	return true;
}

static void client_drain(void *arg)
{
	struct session *x = arg;

	kn_fd_stream_pause(x->shim, false);
}

/* The client went (detached, or its connection was lost): closing the
   shim's side detaches from the task, or ends an exec's process. */
static void client_closed(void *arg)
{
	struct session *x = arg;

	kn_fd_stream_free(x->shim);
	session_free(x);
}

static bool shim_data(void *arg, const char *data, size_t len)
{
	struct session *x = arg;
	char why[KN_MUX_MAX_TEXT];
	int rc = relay(x, false, data, len, why, sizeof(why));

	if (rc != 0) {
		session_end(x, rc < 0 ? why : NULL, true);
		return false; /* the shim's stream is freed */
	}
	if (kn_tunnel_pending(x->client) > RELAY_HIGH)
		kn_fd_stream_pause(x->shim, true);
	return true;
}

static void shim_drain(void *arg)
{
	struct session *x = arg;

	kn_tunnel_pause(x->client, false);
}

static void shim_closed(void *arg)
{
	session_end(arg, "the task's session ended (the task ended or its "
			 "shim went away)",
		    false);
}

/* ---- the routes ---- */

static const struct kn_tunnel_ops client_ops = {client_data, client_drain,
						client_closed};
static const struct kn_tunnel_ops shim_ops = {shim_data, shim_drain,
					      shim_closed};

static bool upgrade_asked(struct kn_http_req *req)
{
	const char *up = kn_http_header(req, "Upgrade");
	const char *conn = kn_http_header(req, "Connection");

	return up && !strcasecmp(up, KN_MUX_PROTOCOL) && conn &&
	       strcasestr(conn, "upgrade");
}

/* The exec's argv from the query's command (a JSON array of strings). */
static json_t *exec_argv(struct kn_http_req *req, struct kn_error *err)
{
	const char *text = kn_http_query(req, "command");
	json_t *argv = text ? json_loads(text, 0, NULL) : NULL;
	size_t i, n = json_array_size(argv);

	for (i = 0; i < n; i++)
		if (!json_is_string(json_array_get(argv, i)) ||
		    strlen(json_string_value(json_array_get(argv, i))) !=
			    json_string_length(json_array_get(argv, i)))
			break;
	if (!json_is_array(argv) || n == 0 || n > 256 || i < n) {
		json_decref(argv);
		kn_errorf(err, KN_EINVAL, "command",
			  "command must be a JSON array of 1..256 strings "
			  "without NUL bytes (the argv to run)");
		return NULL;
	}
	return argv;
}

/* "arg arg ...", for the audit record (cut to COMMAND_LINE_MAX). */
static char *command_line(json_t *argv)
{
	struct kn_buf b;
	size_t i;
	json_t *a;

	kn_buf_init(&b, COMMAND_LINE_MAX);
	json_array_foreach(argv, i, a) {
		if (i)
			kn_buf_append(&b, " ", 1);
		kn_buf_append(&b, json_string_value(a),
			      strlen(json_string_value(a)));
	}
	kn_buf_append(&b, "", 1);
	return b.data ? b.data : kn_xstrdup("");
}

/*
 * The running task the session is for: its directory (malloc'd), or
 * NULL with err. Owners and operators only; a refusal is audited.
 */
static char *session_task(struct server *s, const struct caller *c,
			  int64_t id, int64_t rank, const char *action,
			  int64_t *started_at, struct kn_error *err)
{
	struct kn_job_row j;
	struct kn_task_row *tasks = NULL;
	char object[48], *dir = NULL;
	size_t nt = 0;

	if (kn_store_job_get(s->store, id, &j, err) < 0)
		return NULL;
	snprintf(object, sizeof(object), "job/%lld", (long long)id);
	if (!caller_owns(c, j.owner)) {
		kn_errorf(err, KN_EPERM, NULL,
			  "job %lld belongs to %s: only its owner and "
			  "operators may open a session on it",
			  (long long)id, j.owner);
		core_audit(s, c, action, object, "denied", err->message);
	} else if (!s->exec->ops->session_connect) {
		kn_errorf(err, KN_ECONFLICT, NULL,
			  "the %s executor takes no interactive sessions",
			  s->exec->ops->name);
	} else if (j.state != KN_JOB_RUNNING) {
		kn_errorf(err, KN_ECONFLICT, NULL, "job %lld is %s, not running",
			  (long long)id, kn_job_state_name(j.state));
	} else if (kn_store_task_list(s->store, id, j.attempts, &tasks, &nt,
				      err) == 0) {
		for (size_t i = 0; i < nt && !dir; i++)
			if (tasks[i].rank == rank &&
			    tasks[i].state == KN_TASK_RUNNING) {
				dir = kn_xstrdup(tasks[i].task_dir);
				*started_at = tasks[i].started_at;
			}
		if (!dir)
			kn_errorf(err, KN_ENOTFOUND, "task",
				  "job %lld has no running task %lld",
				  (long long)id, (long long)rank);
		kn_task_list_free(tasks, nt);
	}
	kn_job_row_release(&j);
	return dir;
}

/* A session asked for, until its shim's socket answers. */
struct opening {
	struct server *s;
	struct kn_http_req *req;
	struct caller c;
	bool exec, tty;
	int64_t id, rank, rows, cols;
	json_t *argv;
	char *dir;
	int64_t deadline_ms;
	struct kn_timer *retry;
	struct opening *next; /* in sessions.openings while waiting */
};

static void opening_free(struct opening *o)
{
	struct sessions *all = service_state(o->s, &sessions_service);

	KN_LIST_UNLINK(&all->openings, o);
	kn_timer_free(o->retry);
	json_decref(o->argv);
	KN_FREE_ALL(o->dir, o);
}

/* The audit record of a session that starts. */
static void audit_session(const struct opening *o)
{
	char object[48], detail[COMMAND_LINE_MAX + 32];
	char *line = o->exec ? command_line(o->argv) : NULL;

	snprintf(object, sizeof(object), "job/%lld", (long long)o->id);
	snprintf(detail, sizeof(detail), "task %lld%s%s%s",
		 (long long)o->rank, line ? ": " : "", line ? line : "",
		 o->exec && o->tty ? " (tty)" : "");
	core_audit(o->s, &o->c, o->exec ? "job.exec" : "job.attach", object,
		   "ok", detail);
	free(line);
}

/* Upgrade o's request and relay it to the shim on fd. */
static void session_start(struct opening *o, int fd)
{
	struct sessions *all = service_state(o->s, &sessions_service);
	uint8_t f[KN_MUX_MAX_FRAME];
	struct kn_error err;
	struct session *x = kn_xcalloc(1, sizeof(*x));
	json_t *request;
	char *text;

	x->all = all;
	x->core = o->s;
	x->job_id = o->id;
	kn_mux_reader_init(&x->from_client);
	kn_mux_reader_init(&x->from_shim);
	if (!(x->shim = kn_fd_stream_new(o->s->loop, fd, &shim_ops, x))) {
		free(x);
		kn_errorf(&err, KN_EIO, NULL, "cannot watch the shim's socket");
		kn_http_reply_error(o->req, &err);
		return;
	}
	audit_session(o);
	request = json_pack("{s:s, s:b, s:I, s:I}", "op",
			    o->exec ? "exec" : "attach", "tty", o->tty,
			    "rows", (json_int_t)o->rows, "cols",
			    (json_int_t)o->cols);
	if (o->argv)
		json_object_set(request, "argv", o->argv);
	text = json_dumps(request, JSON_COMPACT);
	json_decref(request);
	kn_fd_stream_write(x->shim, f,
			   kn_mux_encode(f, KN_MUX_SESSION,
					 KN_MUX_STREAM_CONTROL, text,
					 strlen(text)));
	free(text);
	x->client = kn_http_upgrade(o->req, KN_MUX_PROTOCOL, &client_ops, x);
	if (!x->client) { /* the client went meanwhile */
		kn_fd_stream_free(x->shim);
		free(x);
		return;
	}
	x->next = all->list;
	if (all->list)
		all->list->prev = x;
	all->list = x;
	devenv_session(o->s, o->id, 1);
}

/*
 * Connect to the shim, or wait for its socket: a task is running as soon
 * as its shim is spawned, a moment before the shim listens.
 */
static void opening_try(void *arg)
{
	struct opening *o = arg;
	struct kn_error err;
	int fd = o->s->exec->ops->session_connect(o->s->exec, o->dir, &err);

	if (fd < 0 && (fd == -ENOENT || fd == -ECONNREFUSED) &&
	    kn_mono_ms() < o->deadline_ms) {
		struct sessions *all = service_state(o->s, &sessions_service);
		if (!o->retry) {
			o->retry = kn_timer_new(o->s->loop, opening_try, o);
			o->next = all->openings;
			all->openings = o;
		}
		kn_timer_arm(o->retry, SHIM_RETRY_MS);
		return;
	}
	if (fd < 0)
		kn_http_reply_error(o->req, &err);
	else
		session_start(o, fd);
	opening_free(o);
}

static void session_open(struct server *s, struct kn_http_req *req,
			 const struct caller *c, const char *param, bool exec)
{
	struct opening *o = kn_xcalloc(1, sizeof(*o));
	int64_t tty = 0, started_at = 0;
	struct kn_error err;

	o->s = s;
	o->req = req;
	o->c = *c;
	o->exec = exec;
	if (!upgrade_asked(req)) {
		kn_errorf(&err, KN_EINVAL, NULL,
			  "this route upgrades the connection: send "
			  "Connection: Upgrade and Upgrade: %s",
			  KN_MUX_PROTOCOL);
		goto refuse;
	}
	if (!route_param_id(param, &o->id)) {
		kn_errorf(&err, KN_EINVAL, "id", "not a job id: \"%s\"", param);
		goto refuse;
	}
	if (kn_http_query_int(req, "task", 0, KN_SPEC_MAX_TASKS, &o->rank) <
		    0 ||
	    kn_http_query_int(req, "rows", 1, KN_MUX_MAX_DIM, &o->rows) < 0 ||
	    kn_http_query_int(req, "cols", 1, KN_MUX_MAX_DIM, &o->cols) < 0 ||
	    kn_http_query_int(req, "tty", 0, 1, &tty) < 0) {
		kn_errorf(&err, KN_EINVAL, NULL,
			  "task must be a rank, rows and cols 1..4096, tty 0 "
			  "or 1");
		goto refuse;
	}
	o->tty = tty != 0;
	if (exec && !(o->argv = exec_argv(req, &err)))
		goto refuse;
	if (!api_follow_admitted(s, req)) {
		opening_free(o);
		return;
	}
	o->dir = session_task(s, c, o->id, o->rank,
			      exec ? "job.exec" : "job.attach", &started_at,
			      &err);
	if (!o->dir)
		goto refuse;
	/* Only a task that just started may have a shim not listening yet
	   (one from before sessions never will). */
	if (kn_now_ms() - started_at < SHIM_WAIT_MS)
		o->deadline_ms = kn_mono_ms() + SHIM_WAIT_MS;
	opening_try(o);
	return;
refuse:
	kn_http_reply_error(req, &err);
	opening_free(o);
}

static void h_attach(struct server *s, struct kn_http_req *req,
		     const struct caller *c, const char *param)
{
	session_open(s, req, c, param, false);
}

static void h_exec(struct server *s, struct kn_http_req *req,
		   const struct caller *c, const char *param)
{
	session_open(s, req, c, param, true);
}

static int sessions_start(struct server *s, struct kn_error *err)
{
	(void)err;
	service_state_set(s, &sessions_service,
			  kn_xcalloc(1, sizeof(struct sessions)));
	return 0;
}

static void sessions_stop(struct server *s)
{
	struct sessions *all = service_state(s, &sessions_service);

	struct kn_error err;

	kn_errorf(&err, KN_EUNAVAIL, NULL, "the server is stopping");
	while (all && all->openings) {
		kn_http_reply_error(all->openings->req, &err);
		opening_free(all->openings);
	}
	while (all && all->list)
		session_end(all->list, "the server is stopping", true);
	free(all);
}

static const struct route sessions_routes[] = {
	{"GET", "/v1/jobs/{id}/attach", KN_ROLE_USER, false, "job.attach",
	 h_attach},
	{"POST", "/v1/jobs/{id}/exec", KN_ROLE_USER, false, "job.exec",
	 h_exec},
	{0},
};

const struct service sessions_service = {
	.name = "sessions",
	.phase = SERVICE_PHASE_LOOP,
	.start = sessions_start,
	.stop = sessions_stop,
	.routes = sessions_routes,
};
