/*
 * The event stream (feed.c): recent server events, streamed to
 * GET /v1/events followers; any service publishes to it.
 */
#ifndef KILN_SERVER_FEED_H
#define KILN_SERVER_FEED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/base.h"

struct server;
struct feed;
struct kn_http_req;

struct feed *feed_new(struct server *s);
/* End every follower's stream and free the ring. */
void feed_free(struct feed *f);
/* Publish one event (steals doc); adds "seq", "time_ms" and "type". */
void feed_publish(struct server *s, const char *type, json_t *doc);
void feed_job(struct server *s, int64_t job_id, const char *state,
	      const char *reason);
/*
 * A file a task wrote was refused (a link, a FIFO, a device): a warning
 * and a "task.file_refused" event, once per path.
 */
void server_task_file_refused(struct server *s, int64_t job_id,
			      const char *path, const struct kn_error *why);
/* GET /v1/events[?follow=1][&since=SEQ]: JSON lines. */
void feed_serve(struct server *s, struct kn_http_req *req, int64_t since,
		bool follow);

#endif
