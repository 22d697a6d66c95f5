/*
 * watch: `-w` on listings. The listing is drawn, then drawn again each
 * time the server's event stream (GET /v1/events?follow=1) says
 * something changed (a job's or a node's state, an alert), rather than
 * polling: an idle cluster costs one open connection and no requests.
 * On a terminal each drawing replaces the last; into a pipe they follow
 * one another, a blank line apart.
 */
#ifndef KILN_CMD_WATCH_H
#define KILN_CMD_WATCH_H

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

#endif
