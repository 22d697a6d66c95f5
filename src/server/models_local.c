/*
 * Blobs from a client on this machine (docs/registry.md, "On the same
 * machine"): the client opens its file itself and passes the open
 * descriptor over $KILN_HOME/registry/push.sock (SCM_RIGHTS) with its
 * token and the file's size; the server copies the bytes from that
 * descriptor into a staging file, hashing them as they pass, and links
 * the file into the store under the digest it found. No byte crosses a
 * TCP connection, and the client reads nothing.
 *
 * The server never opens a path for a client: the kernel checked the
 * client's right to read the file when the client opened it, and a
 * descriptor not open for reading (write-only, O_PATH) is refused, so
 * the server reads nothing the client could not read itself. The kernel
 * copies the bytes into the staging file (copy_file_range; pread into a
 * buffer of the server's from another file system), never a mapping of
 * the client's file: a file the client truncates meanwhile is a short
 * copy (refused), not a SIGBUS. A second thread hashes the staging
 * file, the server's own, as each span lands, so the digest is that of
 * the bytes stored; a file whose times moved during the copy is refused.
 * Copies run on the request workers, at most LOCAL_IN_FLIGHT at
 * once for all clients, each within the staging free-space reserve.
 * One request per connection: a message of at most LOCAL_MSG_MAX bytes,
 * {"token": T, "size": N}, with exactly one descriptor; one answer,
 * {"digest", "size", "stored": true, "existed"} or {"error": {...}}.
 */
#include "modelsvc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "server/access.h"

#define LOCAL_MSG_MAX 4096
#define LOCAL_IN_FLIGHT 4
/* Connections waiting for their request, and how long each may. */
#define LOCAL_WAITING_MAX 64
#define LOCAL_WAIT_MS 10000

struct model_local {
	int listen_fd;
	struct kn_fd_watch *watch;
	char *path;
	char boot_id[64];
	int in_flight;
	int waiting;
	struct local_conn *waiting_list;
};

struct local_conn {
	struct server *s;
	int fd;    /* the connection */
	int file;  /* the client's descriptor */
	struct kn_fd_watch *watch; /* while its request is awaited */
	struct kn_timer *deadline;  /* the same */
	struct caller caller;
	int64_t size;
	char *store_url;
	char *staging;
	char digest[KN_SHA256_HEX + 1];
	bool existed;
	int rc;
	struct kn_error err;
	struct local_conn *next; /* in waiting_list */
};

/* No longer waiting for its request. */
static void conn_heard(struct local_conn *c)
{
	struct model_local *l = models_state(c->s)->local;

	if (!c->watch)
		return;
	kn_fd_watch_free(c->watch);
	kn_timer_free(c->deadline);
	c->watch = NULL;
	c->deadline = NULL;
	KN_LIST_UNLINK(&l->waiting_list, c);
	l->waiting--;
}

static void conn_free(struct local_conn *c)
{
	conn_heard(c);
	if (c->file >= 0)
		close(c->file);
	if (c->fd >= 0)
		close(c->fd);
	KN_FREE_ALL(c->store_url, c->staging, c);
}

static void reply(struct local_conn *c, json_t *answer)
{
	char *text = json_dumps(answer, JSON_COMPACT);

	/* Small, into an empty socket buffer: it goes whole or not at all
	   (a client gone meanwhile). */
	if (text && send(c->fd, text, strlen(text), MSG_NOSIGNAL) < 0)
		kn_log(KN_LOG_INFO, "push.sock: the answer to %s was not sent: "
		       "%s", c->caller.name[0] ? c->caller.name : "a client",
		       strerror(errno));
	free(text);
	json_decref(answer);
}

static void reply_error(struct local_conn *c, const struct kn_error *err)
{
	const char *object = c->digest[0] ? c->digest : "local";

	if (c->caller.name[0])
		core_audit(c->s, &c->caller, "model.blob.put", object, "error",
			   err->message);
	reply(c, json_pack("{s:{s:s, s:s, s:s}}", "error", "code",
			   kn_errcode_name(err->code), "field", err->field,
			   "message", err->message));
}

/* Copy c->size bytes of the client's file to out, hashing them: the
   digest is of what out holds, and a file written meanwhile (its times
   moved) is refused, as what was copied may mix old and new bytes. */
static int copy_hashing(struct local_conn *c, int out)
{
	const char *op = "";
	int64_t copied = 0;
	struct stat before;
	int rc = fstat(c->file, &before) < 0 ? -errno
		 : kn_copy_fd_hashed(c->file, out, c->size, c->digest,
				     &copied, &op);

	if (rc == 0 && !kn_fd_unchanged(c->file, &before))
		return kn_errorf(&c->err, KN_ECONFLICT, "file",
				 "changed while it was pushed; push again "
				 "once it is written");
	if (rc == -EIO && !strcmp(op, "source shrank while read"))
		return kn_errorf(&c->err, KN_ECONFLICT, "size",
				 "the file shrank while it was copied");
	if (rc < 0)
		return kn_errorf(&c->err, rc == -ENOSPC ? KN_ENOSPACE : KN_EIO,
				 NULL, "copying the file: %s: %s", op,
				 strerror(-rc));
	return 0;
}

static void copy_work(void *arg)
{
	struct local_conn *c = arg;
	struct kn_blob_store *store = NULL;
	char *name = NULL;
	int out = mkostemp(c->staging, O_CLOEXEC);
	int rc = out < 0 ? kn_errorf(&c->err, KN_EIO, NULL,
				     "cannot stage a copy: %s", strerror(errno))
			 : copy_hashing(c, out);

	if (out >= 0)
		close(out);
	if (rc == 0)
		rc = models_open_store(c->store_url, &store, &c->err);
	if (rc == 0) {
		name = kn_model_blob_name(c->digest);
		rc = kn_blob_put_link(store, name, c->staging, &c->err);
		if (rc == -EXDEV)
			rc = kn_blob_put_file(store, name, c->staging,
					      KN_BLOB_CREATE_ONLY, NULL, NULL,
					      &c->err);
		/* Only the store's "already there" is a blob that existed;
		   a refused copy is a conflict too, and stays an error. */
		c->existed = rc == -EEXIST;
	}
	c->rc = c->existed ? 0 : rc;
	if (out >= 0)
		unlink(c->staging);
	free(name);
	kn_blob_store_free(store);
}

static void copy_done(void *arg, bool ran)
{
	struct local_conn *c = arg;
	struct model_state *m = models_state(c->s);
	char object[96], detail[64];

	/* After a stop the service's state is gone, the count with it. */
	if (m && m->local)
		m->local->in_flight--;
	if (!ran)
		c->rc = kn_errorf(&c->err, KN_EUNAVAIL, NULL,
				  "the server stopped before the copy ended");
	if (c->rc < 0) {
		reply_error(c, &c->err);
	} else {
		snprintf(object, sizeof(object), "blob/sha256/%s", c->digest);
		snprintf(detail, sizeof(detail), "%lld bytes%s, local",
			 (long long)c->size,
			 c->existed ? ", already stored" : "");
		core_audit(c->s, &c->caller, "model.blob.put", object, "ok",
			   detail);
		reply(c, json_pack("{s:s, s:I, s:b, s:b}", "digest", c->digest,
				   "size", (json_int_t)c->size, "stored", 1,
				   "existed", c->existed));
	}
	conn_free(c);
}

/* The request's fields: exactly token and size. */
static int request_read(struct local_conn *c, const char *text, size_t len,
			char *header, size_t header_len)
{
	json_t *o = json_loadb(text, len, 0, NULL), *v;
	const char *key;
	int rc = 0;

	if (!json_is_object(o))
		rc = kn_errorf(&c->err, KN_EINVAL, NULL,
			       "a request is a JSON object");
	json_object_foreach(o, key, v) {
		if (rc)
			break;
		if (!strcmp(key, "token") && json_is_string(v))
			snprintf(header, header_len, "Bearer %s",
				 json_string_value(v));
		else if (!strcmp(key, "size") && json_is_integer(v) &&
			 json_integer_value(v) >= 0)
			c->size = json_integer_value(v);
		else
			rc = kn_errorf(&c->err, KN_EINVAL, key,
				       "%s: not a field of a request here (token: "
				       "a string, size: bytes; the file comes "
				       "as an open descriptor, never a path)",
				       key);
	}
	if (!rc && (!header[0] || c->size < 0))
		rc = kn_errorf(&c->err, KN_EINVAL, header[0] ? "size" : "token",
			       "token and size are required");
	json_decref(o);
	return rc;
}

/* The descriptor is a regular file of the size said, open for reading. */
static int file_checked(struct local_conn *c)
{
	int flags = fcntl(c->file, F_GETFL);
	struct stat st;

	if (flags < 0 || (flags & O_PATH) ||
	    (flags & O_ACCMODE) == O_WRONLY)
		return kn_errorf(&c->err, KN_EPERM, "file",
				 "the descriptor is not open for reading");
	if (fstat(c->file, &st) < 0 || !S_ISREG(st.st_mode))
		return kn_errorf(&c->err, KN_EINVAL, "file",
				 "the descriptor is not a regular file");
	if (st.st_size != c->size)
		return kn_errorf(&c->err, KN_ECONFLICT, "size",
				 "the file holds %lld bytes, not %lld",
				 (long long)st.st_size, (long long)c->size);
	return 0;
}

/* One message and at most one descriptor: -1 when nothing came yet. */
static int receive(struct local_conn *c, char *text, size_t *len)
{
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} control;
	struct iovec iov = {.iov_base = text, .iov_len = LOCAL_MSG_MAX};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = control.buf,
			     .msg_controllen = sizeof(control.buf)};
	ssize_t n = recvmsg(c->fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	int fds = 0;

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return -1;
	for (struct cmsghdr *h = CMSG_FIRSTHDR(&msg); n >= 0 && h;
	     h = CMSG_NXTHDR(&msg, h)) {
		if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
			continue;
		for (size_t i = 0; i < (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		     i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(h) + i * sizeof(int), sizeof(fd));
			if (fds++ == 0)
				c->file = fd;
			else
				close(fd);
		}
	}
	if (n <= 0)
		return kn_errorf(&c->err, KN_EINVAL, NULL,
				 "no request: %s", n < 0 ? strerror(errno)
							 : "the client left");
	if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || fds != 1)
		return kn_errorf(&c->err, KN_EINVAL, "file",
				 "a request is one message of at most %d bytes "
				 "with exactly one open descriptor",
				 LOCAL_MSG_MAX);
	*len = (size_t)n;
	return 0;
}

static void on_request(void *arg)
{
	struct local_conn *c = arg;
	struct model_local *l = models_state(c->s)->local;
	char text[LOCAL_MSG_MAX + 1], header[LOCAL_MSG_MAX + 16] = "";
	size_t len = 0;
	int rc = receive(c, text, &len);

	if (rc == -1)
		return;
	if (rc == 0)
		rc = request_read(c, text, len, header, sizeof(header));
	if (rc == 0)
		rc = auth_check(c->s, header, &c->caller, &c->err);
	if (rc == 0 && c->caller.role < KN_ROLE_USER)
		rc = kn_errorf(&c->err, KN_EPERM, NULL,
			       "%s may not upload blobs (a user's role is "
			       "needed)", c->caller.name);
	if (rc == 0)
		rc = file_checked(c);
	if (rc == 0 && l->in_flight >= LOCAL_IN_FLIGHT)
		rc = kn_errorf(&c->err, KN_EUNAVAIL, NULL,
			       "%d local copies are running, the most at once: "
			       "send again shortly, or over HTTP",
			       LOCAL_IN_FLIGHT);
	if (rc == 0)
		rc = models_staging_room(c->s, c->caller.name, c->size,
					 &c->err);
	conn_heard(c);
	if (rc < 0) {
		reply_error(c, &c->err);
		conn_free(c);
		return;
	}
	l->in_flight++;
	c->store_url = kn_xstrdup(core_blob_url(c->s));
	c->staging = kn_asprintf("%s/local.XXXXXX", models_state(c->s)->staging);
	kn_workers_submit(core_request_workers(c->s), copy_work, copy_done, c);
}

/* A connection silent past LOCAL_WAIT_MS holds nothing longer. */
static void on_silence(void *arg)
{
	conn_free(arg);
}

/* Past LOCAL_WAITING_MAX connections waiting, more are closed at once:
   whoever holds them all denies only this path, never HTTP, which the
   client falls back to. */
static void on_accept(void *arg)
{
	struct server *s = arg;
	struct model_local *l = models_state(s)->local;
	int fd;

	while ((fd = accept4(l->listen_fd, NULL, NULL,
			     SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
		struct local_conn *c;

		if (l->waiting >= LOCAL_WAITING_MAX) {
			close(fd);
			continue;
		}
		c = kn_xcalloc(1, sizeof(*c));
		c->s = s;
		c->fd = fd;
		c->file = -1;
		c->watch = kn_fd_watch_new(core_loop(s), fd, on_request, c);
		c->deadline = kn_timer_new(core_loop(s), on_silence, c);
		kn_timer_arm(c->deadline, LOCAL_WAIT_MS);
		c->next = l->waiting_list;
		l->waiting_list = c;
		l->waiting++;
	}
}

static bool store_is_local(struct server *s)
{
	struct kn_blob_store_config cfg = {.url = core_blob_url(s)};
	struct kn_blob_store *store = NULL;
	char *probe = NULL;
	struct kn_error err;

	if (kn_blob_store_open(&cfg, &store, &err) == 0)
		probe = kn_blob_local_path(store, "sha256/probe");
	kn_blob_store_free(store);
	free(probe);
	return probe != NULL;
}

int models_local_start(struct server *s, struct kn_error *err)
{
	struct model_state *m = models_state(s);
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	struct model_local *l;
	char *boot = NULL;
	size_t boot_len = 0;

	/* A remote store is written over the network anyway. */
	if (!store_is_local(s))
		return 0;
	l = kn_xcalloc(1, sizeof(*l));
	l->path = kn_asprintf("%s/registry/push.sock", core_home(s));
	l->listen_fd = -1;
	m->local = l;
	if (strlen(l->path) >= sizeof(addr.sun_path)) {
		kn_log(KN_LOG_INFO, "%s: too long a path for a socket; pushes "
		       "from this machine go over HTTP", l->path);
		return 0;
	}
	if (kn_read_file("/proc/sys/kernel/random/boot_id", 63, &boot,
			 &boot_len) == 0)
		snprintf(l->boot_id, sizeof(l->boot_id), "%.*s",
			 (int)strcspn(boot, "\n"), boot);
	free(boot);
	memcpy(addr.sun_path, l->path, strlen(l->path) + 1);
	unlink(l->path);
	l->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK |
					       SOCK_CLOEXEC, 0);
	if (l->listen_fd < 0 ||
	    bind(l->listen_fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 ||
	    chmod(l->path, 0666) < 0 || listen(l->listen_fd, 64) < 0)
		return kn_errorf(err, KN_EIO, NULL, "%s: %s", l->path,
				 strerror(errno));
	l->watch = kn_fd_watch_new(core_loop(s), l->listen_fd, on_accept, s);
	return 0;
}

json_t *models_local_json(struct server *s)
{
	struct model_local *l = models_state(s)->local;

	if (!l || !l->watch || !l->boot_id[0])
		return NULL;
	return json_pack("{s:s, s:s}", "socket", l->path, "boot_id",
			 l->boot_id);
}

void models_local_stop(struct model_state *m)
{
	struct model_local *l = m->local;

	if (!l)
		return;
	while (l->waiting_list)
		conn_free(l->waiting_list);
	kn_fd_watch_free(l->watch);
	if (l->listen_fd >= 0) {
		close(l->listen_fd);
		unlink(l->path);
	}
	KN_FREE_ALL(l->path, l);
	m->local = NULL;
}
