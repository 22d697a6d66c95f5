/*
 * watch: `-w` on listings. The listing is drawn, then drawn again each
 * time the server's event stream (GET /v1/events?follow=1) says
 * something changed (a job's or a node's state, an alert), rather than
 * polling: an idle cluster costs one open connection and no requests.
 * On a terminal each drawing replaces the last; into a pipe they follow
 * one another, a blank line apart.
 */
#ifndef KILN_CMD_CLI_WATCH_H
#define KILN_CMD_CLI_WATCH_H

#include "cmd/cli.h"
#include "cmd/cli_client.h"

/* Print the listing once through c; 0 or an exit status. */
typedef int (*watch_draw_fn)(struct cli_ctx *ctx, struct cli_client *c,
			     void *arg);

/*
 * Draw, then redraw on every burst of events until the stream ends (the
 * server went away: exit 3) or the process is interrupted. Returns the
 * exit status.
 */
int watch_run(struct cli_ctx *ctx, watch_draw_fn draw, void *arg);

/* A listing that is one GET: path's answer, printed for a person by
   print (-o json and yaml are printed for it; -o name too, when list
   names the answer's array and id the member that names each item). */
struct watch_listing {
	const char *path;
	void (*print)(const struct cli_ctx *ctx, json_t *answer, void *arg);
	void *arg;
	const char *list, *id;
};

/* watch_draw_fn for a struct watch_listing. */
int watch_listing_draw(struct cli_ctx *ctx, struct cli_client *c, void *l);

/*
 * Draw the listing once, or with watch until interrupted (watch_run).
 * Returns the exit status.
 */
int watch_listing(struct cli_ctx *ctx, bool watch,
		  const struct watch_listing *l);

/*
 * A command that is such a listing and takes only -w (and the global
 * flags): parse argv and draw or watch. Returns the exit status.
 */
int watch_listing_command(struct cli_ctx *ctx, int argc, char **argv,
			  const struct watch_listing *l);

#endif
