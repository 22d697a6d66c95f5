/*
 * Task logs over HTTP. A plain read and a follow are the same stream: read
 * what the file holds from the offset, send it in chunks; a follower then
 * keeps polling the file on a timer until the task has ended and nothing
 * is left. Polling (every 200 ms) rather than inotify keeps one code path
 * for local files now and for logs fetched from elsewhere later; the cost
 * is a stat per follower per tick.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FOLLOW_POLL_MS 200
/* Bytes sent per turn, so one big log cannot hog the loop. */
#define CHUNK_BYTES (256 * 1024)

struct log_follower {
	struct server *s;
	struct kn_http_req *req;
	struct kn_timer *timer;
	char *path;
	int64_t job_id;
	int attempt, rank;
	int64_t offset;
	ino_t inode;
	bool follow;
	struct log_follower *next;
};

static void follower_free(struct log_follower *f)
{
	struct server *s = f->s;

	for (struct log_follower **p = &s->followers; *p; p = &(*p)->next) {
		if (*p == f) {
			*p = f->next;
			break;
		}
	}
	kn_timer_free(f->timer);
	free(f->path);
	free(f);
}

/* The client went away: the request is already gone. */
static void follower_closed(void *arg)
{
	follower_free(arg);
}

/* Send what is new; returns true when everything was sent (EOF reached). */
static bool pump(struct log_follower *f)
{
	char *buf;
	struct stat st = {0};
	int fd = open(f->path, O_RDONLY | O_CLOEXEC);
	bool at_end = true;

	if (fd < 0)
		return true; /* not created yet */
	if (fstat(fd, &st) == 0) {
		/* Rotated underneath us: start on the new file. */
		if (f->inode && st.st_ino != f->inode)
			f->offset = 0;
		f->inode = st.st_ino;
		if (st.st_size < f->offset)
			f->offset = 0;
	}
	buf = kn_xmalloc(CHUNK_BYTES);
	for (int turns = 0; turns < 4; turns++) {
		ssize_t n = pread(fd, buf, CHUNK_BYTES, (off_t)f->offset);
		if (n <= 0)
			break;
		kn_http_stream_chunk(f->req, buf, (size_t)n);
		f->offset += n;
		if (n < CHUNK_BYTES)
			break;
		at_end = false;
	}
	if (!at_end && (off_t)f->offset >= st.st_size)
		at_end = true;
	free(buf);
	close(fd);
	return at_end;
}

static void follower_tick(void *arg)
{
	struct log_follower *f = arg;
	bool drained = pump(f);
	bool active = f->follow && jobs_task_active(f->s, f->job_id, f->attempt,
						    f->rank);

	if (drained && !active) {
		/* One last read: the task may have written just before ending. */
		pump(f);
		kn_http_stream_end(f->req);
		follower_free(f);
		return;
	}
	kn_timer_arm(f->timer, drained ? FOLLOW_POLL_MS : 0);
}

void logs_serve(struct server *s, struct kn_http_req *req, int64_t job_id,
		const char *task_dir, int attempt, int rank, int64_t offset,
		bool follow)
{
	struct log_follower *f = kn_xcalloc(1, sizeof(*f));

	f->s = s;
	f->req = req;
	f->path = kn_asprintf("%s/" KN_LOG_FILE, task_dir);
	f->job_id = job_id;
	f->attempt = attempt;
	f->rank = rank;
	f->offset = offset;
	f->follow = follow;
	f->timer = kn_timer_new(s->loop, follower_tick, f);
	f->next = s->followers;
	s->followers = f;
	kn_http_stream_start(req, 200, "text/plain; charset=utf-8",
			     follower_closed, f);
	follower_tick(f);
}

void logs_free_all(struct server *s)
{
	while (s->followers) {
		struct log_follower *f = s->followers;
		kn_http_stream_end(f->req);
		follower_free(f);
	}
}
