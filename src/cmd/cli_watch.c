/*
 * watch: redraw a listing on each burst of events.
 *
 * The client blocks, so the event stream and the listing use one
 * connection each: the stream's bytes go to a FILE whose writer draws
 * the listing through the other. One drawing per piece of the stream,
 * however many events it holds: a burst of changes costs one request.
 */
#include "cmd/cli_watch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"

struct watcher {
	struct cli_ctx *ctx;
	struct cli_client *lister;
	watch_draw_fn draw;
	void *arg;
	bool tty;
	int rc; /* the last drawing's, when it failed */
};

static int redraw(struct watcher *w)
{
	int rc;

	if (w->tty)
		fputs("\x1b[H\x1b[2J", stdout); /* home, clear the screen */
	else
		putchar('\n');
	rc = w->draw(w->ctx, w->lister, w->arg);
	fflush(stdout);
	return rc;
}

static ssize_t on_events(void *cookie, const char *buf, size_t size)
{
	struct watcher *w = cookie;

	if (!memchr(buf, '\n', size))
		return (ssize_t)size; /* an event not yet whole */
	w->rc = redraw(w);
	if (w->rc) {
		errno = EIO;
		return -1; /* ends the stream: the listing cannot be had */
	}
	return (ssize_t)size;
}

/* The sequence number of the newest event the server holds (0: none),
   from its JSON lines. */
static int latest_seq(struct cli_client *c, int64_t *seq)
{
	char *text = NULL, *line, *next;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	int rc;

	*seq = 0;
	if (!f)
		return CLI_EXIT_FAIL;
	rc = cli_stream(c, "/v1/events", f, 0);
	fclose(f);
	for (line = text; !rc && line && *line; line = next) {
		json_t *event;

		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		event = json_loads(line, 0, NULL);
		if (cli_json_int(event, "seq") > *seq)
			*seq = cli_json_int(event, "seq");
		json_decref(event);
	}
	free(text);
	return rc;
}

int watch_run(struct cli_ctx *ctx, watch_draw_fn draw, void *arg)
{
	static const cookie_io_functions_t io = {.write = on_events};
	struct watcher w = {.ctx = ctx, .draw = draw, .arg = arg,
			    .tty = isatty(STDOUT_FILENO)};
	struct cli_client *events = NULL;
	char *path = NULL;
	FILE *sink = NULL;
	int64_t seq;
	int rc;

	rc = cli_client_open(ctx, &w.lister);
	if (!rc)
		rc = cli_client_open(ctx, &events);
	/* Events after this one redraw; one between it and the first
	   drawing only redraws once more. */
	if (!rc)
		rc = latest_seq(events, &seq);
	if (rc)
		goto out;
	if (w.tty)
		fputs("\x1b[H\x1b[2J", stdout);
	rc = draw(ctx, w.lister, arg);
	fflush(stdout);
	if (rc)
		goto out;
	sink = fopencookie(&w, "w", io);
	if (!sink) {
		rc = cli_fail(ctx, "%s", strerror(errno));
		goto out;
	}
	setvbuf(sink, NULL, _IONBF, 0);
	path = kn_asprintf("/v1/events?follow=1&since=%lld", (long long)seq);
	rc = cli_stream(events, path, sink, CLI_STREAM_UNBOUNDED);
	if (w.rc)
		rc = w.rc;
	else if (!rc) {
		cli_fail(ctx, "the server ended the event stream");
		rc = CLI_EXIT_UNREACHABLE;
	}
out:
	if (sink)
		fclose(sink);
	free(path);
	cli_client_free(events);
	cli_client_free(w.lister);
	return rc;
}

/* -o name: each item's id member alone, a line each, cleaned. */
static void print_names(json_t *items, const char *id)
{
	json_t *item;
	size_t i;

	json_array_foreach(items, i, item) {
		json_t *v = json_object_get(item, id);
		char clean[512];

		if (json_is_integer(v)) {
			printf("%lld\n", (long long)json_integer_value(v));
			continue;
		}
		cli_clean(clean, json_string_value(v) ? json_string_value(v) : "",
			  sizeof(clean));
		printf("%s\n", clean);
	}
}

int watch_listing_draw(struct cli_ctx *ctx, struct cli_client *c, void *l)
{
	const struct watch_listing *listing = l;
	json_t *answer = NULL;
	int rc = cli_get(c, listing->path, &answer);

	if (rc)
		return rc;
	if (cli_want_json(ctx))
		cli_print_data(ctx, answer);
	else if (cli_want_name(ctx) && listing->list)
		print_names(json_object_get(answer, listing->list),
			    listing->id);
	else
		listing->print(ctx, answer, listing->arg);
	json_decref(answer);
	return 0;
}

int watch_listing(struct cli_ctx *ctx, bool watch,
		  const struct watch_listing *l)
{
	struct cli_client *c = NULL;
	int rc;

	if (watch)
		return watch_run(ctx, watch_listing_draw, (void *)l);
	rc = cli_client_open(ctx, &c);
	if (!rc)
		rc = watch_listing_draw(ctx, c, (void *)l);
	cli_client_free(c);
	return rc;
}

int watch_listing_command(struct cli_ctx *ctx, int argc, char **argv,
			  const struct watch_listing *l)
{
	bool watch = false;
	const struct cli_flag flags[] = {
		{"watch", 'w', CLI_FLAG_BOOL, &watch},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	int rc;

	ctx->name_ok = l->list != NULL;
	rc = cli_parse(ctx, argc, argv, flags, NULL, NULL);
	return rc != CLI_GO ? rc : watch_listing(ctx, watch, l);
}
