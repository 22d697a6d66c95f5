/*
 * Task logs over HTTP. A plain read and a follow are the same stream: read
 * what the file holds from the offset, send it in chunks; a follower then
 * keeps polling the file on a timer until the task has ended and nothing
 * is left. Polling (every 200 ms) rather than inotify keeps one code path
 * for local files now and for logs fetched from elsewhere later; the cost
 * is a stat per follower per tick.
 *
 * The log is the task's file: it may be a FIFO, a device or a link to a
 * server secret. Every read opens it afresh with kn_task_file_open on a
 * request worker, never on the loop, and a refusal answers with why (or
 * ends a stream already under way) and goes to the event feed once.
 *
 * ?since= and ?timestamps= read the shim's record of when each line came
 * (output.times, src/exec/logtimes.c) beside the log, which stays the
 * task's bytes: since moves the first read's start to the first line that
 * came at or after it, timestamps leads each line with its time as the
 * bytes go out. A log without that record (an executor whose shim does
 * not keep one) answers 409 naming the parameter, rather than lines
 * without times.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FOLLOW_POLL_MS 200
/* Bytes read per turn, so one big log cannot hog a worker or the socket. */
#define TURN_BYTES (1024 * 1024)

/*
 * One read of the log on a worker thread: the file is the task's, so it is
 * opened with kn_task_file_open (no links, no FIFOs, no devices) and never
 * on the loop. Only the worker touches this while the follower is busy.
 */
struct log_read {
	char *dir;
	int64_t offset;
	int64_t tail_lines; /* the first read starts this many lines from the
			       end; -1: at offset */
	int64_t since_ms;   /* and at the first line that came at or after
			       this; 0: not */
	bool timestamps;    /* data is the log's lines led by their times */
	bool mid_line;      /* the next byte continues a line already led */
	bool untimed;       /* times asked for, and the log has none */
	ino_t inode;
	char *data;
	size_t len;
	size_t raw_len;     /* how much of the log data holds */
	bool at_end;
	int rc;
	struct kn_error err;
};

struct log_follower {
	struct server *s;
	struct kn_http_req *req; /* NULL once the client or server is gone */
	struct kn_timer *timer;
	struct log_read rd;
	int64_t job_id;
	int attempt, rank;
	bool follow;
	bool started;    /* the 200 and headers are out */
	bool busy;       /* a read is on a worker */
	bool last_read;  /* the read after the task ended is under way */
	bool gone;       /* unlinked: free when the read comes back */
	struct log_follower *next;
};

static void follower_free(struct log_follower *f)
{
	KN_LIST_UNLINK(&f->s->followers, f);
	kn_timer_free(f->timer);
	KN_FREE_ALL(f->rd.dir, f->rd.data, f);
}

/* Free now, or when the read in flight comes back. */
static void follower_release(struct log_follower *f)
{
	f->req = NULL;
	if (!f->busy) {
		follower_free(f);
		return;
	}
	KN_LIST_UNLINK(&f->s->followers, f);
	kn_timer_free(f->timer);
	f->timer = NULL;
	f->gone = true;
}

/* The client went away: the request is already gone. */
static void follower_closed(void *arg)
{
	follower_release(arg);
}

/* Bytes scanned backwards per read when looking for a tail's start. */
#define TAIL_SCAN_BYTES 65536

/*
 * Where the last lines lines of fd's size bytes start: just after the
 * newline that ends the line before them (a final newline ends the last
 * line, it does not start another), or 0 when there are no more lines.
 */
static int64_t tail_offset(int fd, int64_t size, int64_t lines)
{
	char buf[TAIL_SCAN_BYTES];
	int64_t end = size, seen = 0;
	bool last_byte = true;

	if (lines == 0)
		return size;
	while (end > 0) {
		int64_t start = end > TAIL_SCAN_BYTES ? end - TAIL_SCAN_BYTES : 0;
		ssize_t n = pread(fd, buf, (size_t)(end - start), (off_t)start);

		if (n != end - start)
			return 0;
		for (ssize_t i = n - 1; i >= 0; i--, last_byte = false) {
			if (buf[i] != '\n' || last_byte)
				continue;
			if (++seen == lines)
				return start + i + 1;
		}
		end = start;
	}
	return 0;
}

/* Where the first line starting at or after from does, or size. */
static int64_t next_line_start(int fd, int64_t from, int64_t size)
{
	char buf[TAIL_SCAN_BYTES];
	ssize_t n;

	if (from <= 0)
		return 0;
	/* from - 1 is the byte before: a newline there starts one at from. */
	for (int64_t at = from - 1; at < size; at += n) {
		const char *nl;

		n = pread(fd, buf, sizeof(buf), (off_t)at);
		if (n <= 0)
			break;
		nl = memchr(buf, '\n', (size_t)n);
		if (nl)
			return at + (nl - buf) + 1;
	}
	return size;
}

/* The log's line times, opened after the log was sized (the shim records
   a time before the bytes it covers), or NULL with rd->untimed set. */
static struct kn_log_times *times_open(struct log_read *rd)
{
	struct kn_error why;
	const char *field;
	int fd = kn_task_file_open(rd->dir, KN_LOG_TIMES_FILE, O_RDONLY,
				   KN_ANY_OWNER, &why);

	if (fd >= 0)
		return kn_log_times_new(fd);
	rd->untimed = true;
	field = rd->timestamps ? "timestamps" : "since";
	kn_errorf(&rd->err, KN_ECONFLICT, field,
		  "%s: this task's log has no record of when its lines came "
		  "(%s)", field, why.message);
	return NULL;
}

/* The first read's start: at offset, the tail's, or since's if later. */
static void first_offset(struct log_read *rd, int fd, int64_t size,
			 struct kn_log_times *times)
{
	int64_t from;

	if (rd->tail_lines >= 0)
		rd->offset = tail_offset(fd, size, rd->tail_lines);
	if (!rd->since_ms)
		return;
	from = kn_log_times_since(times, rd->since_ms);
	from = from < 0 ? size : next_line_start(fd, from, size);
	if (from > rd->offset)
		rd->offset = from;
}

/* rd->data as its lines, each led by "TIME " (when it came). */
static void stamp_lines(struct log_read *rd, struct kn_log_times *times)
{
	struct kn_buf out;

	kn_buf_init(&out, SIZE_MAX);
	for (size_t i = 0; i < rd->len;) {
		const char *nl = memchr(rd->data + i, '\n', rd->len - i);
		size_t end = nl ? (size_t)(nl - rd->data) + 1 : rd->len;

		if (!rd->mid_line) {
			char when[40] = "-";
			int64_t ms = kn_log_times_at(times,
						     rd->offset + (int64_t)i);

			if (ms > 0)
				kn_format_time(ms, when, sizeof(when));
			kn_buf_printf(&out, "%s ", when);
		}
		kn_buf_append(&out, rd->data + i, end - i);
		rd->mid_line = !nl;
		i = end;
	}
	free(rd->data);
	rd->data = out.data;
	rd->len = out.len;
}

static void read_work(void *arg)
{
	struct log_read *rd = arg;
	struct stat st = {0};
	struct kn_log_times *times = NULL;
	int fd = kn_task_file_open(rd->dir, KN_LOG_FILE, O_RDONLY,
				   KN_ANY_OWNER, &rd->err);
	ssize_t n = 0;
	size_t want = 0;

	rd->rc = fd < 0 ? fd : 0;
	rd->at_end = true;
	if (fd < 0)
		return;
	if (fstat(fd, &st) == 0) {
		bool first = rd->inode == 0;

		/* Rotated underneath us: start on the new file. */
		if (!first && st.st_ino != rd->inode)
			rd->offset = 0;
		rd->inode = st.st_ino;
		if (rd->timestamps || (first && rd->since_ms)) {
			times = times_open(rd);
			if (!times) {
				close(fd);
				return;
			}
		}
		if (first)
			first_offset(rd, fd, st.st_size, times);
		/* An offset= past the end asks for nothing (a follower goes
		   on from the end); later, a shorter file was truncated. */
		if (st.st_size < rd->offset)
			rd->offset = first ? st.st_size : 0;
		if (rd->offset == 0)
			rd->mid_line = false;
	}
	/* Sized to what is there: an idle follower's poll allocates nothing. */
	if (st.st_size > rd->offset)
		want = st.st_size - rd->offset < TURN_BYTES
			       ? (size_t)(st.st_size - rd->offset)
			       : TURN_BYTES;
	rd->data = want ? kn_xmalloc(want) : NULL;
	while (rd->len < want &&
	       (n = pread(fd, rd->data + rd->len, want - rd->len,
			  (off_t)(rd->offset + (int64_t)rd->len))) > 0)
		rd->len += (size_t)n;
	rd->at_end = n < 0 || rd->offset + (int64_t)rd->len >= st.st_size;
	rd->raw_len = rd->len;
	if (rd->timestamps && rd->len)
		stamp_lines(rd, times);
	kn_log_times_free(times);
	close(fd);
}

static void read_done(void *arg, bool ran);

static void read_submit(struct log_follower *f)
{
	f->busy = true;
	kn_workers_submit(f->s->request_workers, read_work, read_done, &f->rd);
}

static void follower_tick(void *arg)
{
	struct log_follower *f = arg;

	if (!f->busy)
		read_submit(f);
}

/* A log that is not a plain file: say so once, and answer with why. */
static void read_refused(struct log_follower *f)
{
	char *path = kn_asprintf("%s/" KN_LOG_FILE, f->rd.dir);

	server_task_file_refused(f->s, f->job_id, path, &f->rd.err);
	free(path);
	if (f->started)
		kn_http_stream_end(f->req);
	else
		kn_http_reply_error(f->req, &f->rd.err);
	follower_release(f);
}

static void read_done(void *arg, bool ran)
{
	struct log_follower *f =
		(struct log_follower *)((char *)arg -
					offsetof(struct log_follower, rd));
	struct log_read *rd = &f->rd;
	bool drained, active;

	f->busy = false;
	if (f->gone || !ran) {
		if (f->gone)
			follower_free(f);
		return;
	}
	if (rd->untimed) {
		if (f->started)
			kn_http_stream_end(f->req);
		else
			kn_http_reply_error(f->req, &rd->err);
		follower_release(f);
		return;
	}
	if (rd->rc < 0 && rd->rc != -ENOENT) { /* missing: not created yet */
		read_refused(f);
		return;
	}
	if (!f->started) {
		kn_http_stream_start(f->req, 200, "text/plain; charset=utf-8",
				     follower_closed, f);
		f->started = true;
	}
	if (rd->len)
		kn_http_stream_chunk(f->req, rd->data, rd->len);
	rd->offset += (int64_t)rd->raw_len;
	drained = rd->at_end;
	free(rd->data);
	rd->data = NULL;
	rd->len = 0;
	rd->raw_len = 0;
	active = f->follow &&
		 jobs_task_active(f->s, f->job_id, f->attempt, f->rank);
	if (drained && !active) {
		/* One last read: the task may have written just before ending. */
		if (!f->last_read) {
			f->last_read = true;
			read_submit(f);
			return;
		}
		kn_http_stream_end(f->req);
		follower_release(f);
		return;
	}
	kn_timer_arm(f->timer, drained ? FOLLOW_POLL_MS : 0);
}

void logs_serve(struct server *s, struct kn_http_req *req, int64_t job_id,
		const char *task_dir, int attempt, int rank,
		const struct logs_query *q)
{
	struct log_follower *f = kn_xcalloc(1, sizeof(*f));

	f->s = s;
	f->req = req;
	f->rd.dir = kn_xstrdup(task_dir);
	f->rd.offset = q->offset;
	f->rd.tail_lines = q->tail_lines;
	f->rd.since_ms = q->since_ms;
	f->rd.timestamps = q->timestamps;
	f->job_id = job_id;
	f->attempt = attempt;
	f->rank = rank;
	f->follow = q->follow;
	f->timer = kn_timer_new(s->loop, follower_tick, f);
	f->next = s->followers;
	s->followers = f;
	read_submit(f);
}

void logs_free_all(struct server *s)
{
	while (s->followers) {
		struct log_follower *f = s->followers;
		struct kn_error err;

		if (f->started) {
			kn_http_stream_end(f->req);
		} else {
			kn_errorf(&err, KN_EUNAVAIL, NULL,
				  "the server is stopping");
			kn_http_reply_error(f->req, &err);
		}
		follower_release(f);
	}
}
