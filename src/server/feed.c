/*
 * The event stream: job state changes, node state changes and alerts
 * firing or resolved, as JSON lines with a sequence number. The server
 * keeps the most recent FEED_RING of them in memory (the store holds the
 * truth for jobs and alerts; this is for watching), answers GET
 * /v1/events with what it has after `since`, and with follow=1 keeps the
 * chunked response open and writes each new event to it as it happens.
 *
 * A ring rather than a table: events are a view for people and scripts
 * watching now, and a restart starting the numbering over is said in the
 * API docs (a client that sees seq go down knows the server restarted).
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* A few hours of a busy server's events; ~200 bytes each. */
#define FEED_RING 1024
/* Followers at once: each is an open connection. */
#define FEED_MAX_FOLLOWERS 64
/*
 * Refused task files remembered, so a log polled every 200 ms is reported
 * once rather than on every poll; the oldest is forgotten first.
 */
#define FEED_REFUSED_REMEMBERED 256

struct follower {
	struct feed *f;
	struct kn_http_req *req;
	struct follower *next;
};

struct feed {
	struct server *s;
	char *lines[FEED_RING]; /* JSON text with a trailing newline */
	int64_t seqs[FEED_RING];
	size_t start, count;
	int64_t next_seq;
	struct follower *followers;
	size_t n_followers;
	char *refused[FEED_REFUSED_REMEMBERED]; /* paths already reported */
	size_t next_refused;
};

struct feed *feed_new(struct server *s)
{
	struct feed *f = kn_xcalloc(1, sizeof(*f));

	f->s = s;
	f->next_seq = 1;
	return f;
}

static void follower_unlink(struct follower *fl)
{
	struct feed *f = fl->f;

	for (struct follower **p = &f->followers; *p; p = &(*p)->next)
		if (*p == fl) {
			*p = fl->next;
			f->n_followers--;
			break;
		}
	free(fl);
}

/* The client went away: the request is already gone. */
static void follower_closed(void *arg)
{
	follower_unlink(arg);
}

void feed_free(struct feed *f)
{
	if (!f)
		return;
	while (f->followers) {
		struct follower *fl = f->followers;
		kn_http_stream_end(fl->req);
		follower_unlink(fl);
	}
	for (size_t i = 0; i < f->count; i++)
		free(f->lines[(f->start + i) % FEED_RING]);
	for (size_t i = 0; i < FEED_REFUSED_REMEMBERED; i++)
		free(f->refused[i]);
	free(f);
}

void feed_publish(struct server *s, const char *type, json_t *doc)
{
	struct feed *f = s->feed;
	char *text, *line;
	size_t at;

	if (!f) {
		json_decref(doc);
		return;
	}
	json_object_set_new(doc, "seq", json_integer(f->next_seq));
	json_object_set_new(doc, "time_ms", json_integer(kn_now_ms()));
	json_object_set_new(doc, "type", json_string(type));
	text = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(doc);
	if (!text)
		return;
	line = kn_asprintf("%s\n", text);
	free(text);
	if (f->count == FEED_RING) {
		free(f->lines[f->start]);
		f->start = (f->start + 1) % FEED_RING;
		f->count--;
	}
	at = (f->start + f->count) % FEED_RING;
	f->lines[at] = line;
	f->seqs[at] = f->next_seq++;
	f->count++;
	for (struct follower *fl = f->followers; fl; fl = fl->next)
		kn_http_stream_chunk(fl->req, line, strlen(line));
}

void feed_job(struct server *s, int64_t job_id, const char *state,
	      const char *reason)
{
	feed_publish(s, "job.state",
		     json_pack("{s:I, s:s, s:o}", "job", (json_int_t)job_id,
			       "state", state, "reason",
			       reason && *reason ? json_string(reason)
						 : json_null()));
}

void server_task_file_refused(struct server *s, int64_t job_id,
			      const char *path, const struct kn_error *why)
{
	struct feed *f = s->feed;

	if (!f)
		return;
	for (size_t i = 0; i < FEED_REFUSED_REMEMBERED; i++)
		if (f->refused[i] && !strcmp(f->refused[i], path))
			return;
	free(f->refused[f->next_refused]);
	f->refused[f->next_refused] = kn_xstrdup(path);
	f->next_refused = (f->next_refused + 1) % FEED_REFUSED_REMEMBERED;
	kn_log(KN_LOG_WARN, "job %lld: refused to read %s: %s",
	       (long long)job_id, path, why->message);
	feed_publish(s, "task.file_refused",
		     json_pack("{s:I, s:s, s:s}", "job", (json_int_t)job_id,
			       "file", path, "reason", why->message));
}

void feed_serve(struct server *s, struct kn_http_req *req, int64_t since,
		bool follow)
{
	struct feed *f = s->feed;
	struct follower *fl = NULL;

	if (follow && f->n_followers >= FEED_MAX_FOLLOWERS) {
		struct kn_error err;
		kn_errorf(&err, KN_EUNAVAIL, "follow",
			  "%d clients already follow the event stream; try "
			  "again later", FEED_MAX_FOLLOWERS);
		kn_http_reply_error(req, &err);
		return;
	}
	if (follow) {
		fl = kn_xcalloc(1, sizeof(*fl));
		fl->f = f;
		fl->req = req;
	}
	kn_http_stream_start(req, 200, "application/x-ndjson",
			     follow ? follower_closed : NULL, fl);
	for (size_t i = 0; i < f->count; i++) {
		size_t k = (f->start + i) % FEED_RING;
		if (f->seqs[k] > since)
			kn_http_stream_chunk(req, f->lines[k], strlen(f->lines[k]));
	}
	if (!follow) {
		kn_http_stream_end(req);
		return;
	}
	fl->next = f->followers;
	f->followers = fl;
	f->n_followers++;
}
