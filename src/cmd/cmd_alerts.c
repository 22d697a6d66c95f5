/*
 * kiln alerts: the alerts firing now, then those resolved in the last day
 * (--all: every one the server recorded). kiln events: the server's event
 * stream (job and node state changes, alerts), one JSON document per
 * line so it pipes into jq; -f keeps following.
 */
#include <stdio.h>
#include <unistd.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "cmd/cli_client.h"
#include "cmd/cli_watch.h"

static cli_runner cmd_alerts;

const struct cli_command cmd_alerts_entry = {
	.name = "alerts",
	.run = cmd_alerts,
	.summary = "list firing and recently resolved alerts",
	.help = "usage: kiln alerts [--all] [-w] [-o table|wide|json|yaml]\n"
		"\n"
		"List the alerts the server's rules raised: those firing now, then\n"
		"those resolved in the last day, newest first: STATE SEVERITY RULE\n"
		"SINCE (fired) RESOLVED SUMMARY. Rules, scraping and the webhook are\n"
		"set on `kiln server` (--alert-rules, --scrape, --alert-webhook); see\n"
		"docs/alerts.md.\n"
		"\n"
		"  --all         every alert recorded, however long ago it resolved\n"
		"  -w, --watch   draw again whenever the server's event stream says\n"
		"                something changed (no polling); until interrupted\n"
		"  -o json|yaml  print the server's answer instead\n",
};

static cli_runner cmd_events;

const struct cli_command cmd_events_entry = {
	.name = "events",
	.run = cmd_events,
	.summary = "print or follow the server's event stream",
	.help = "usage: kiln events [-f] [--since SEQ]\n"
		"\n"
		"Print the server's recent events, one JSON document per line (for\n"
		"jq): job state changes (job.state), node state changes (node.state)\n"
		"and alerts (alert.firing, alert.resolved). Each has seq, time_ms and\n"
		"type. The server keeps the last 1024 in memory; seq starts over when\n"
		"it restarts. On a terminal, control characters in names are shown\n"
		"escaped as `kiln logs` does; a pipe gets the JSON unchanged.\n"
		"\n"
		"  -f, --follow  keep printing new events as they happen\n"
		"  --since SEQ   only events after sequence number SEQ\n",
};

static void print_alerts(const struct cli_ctx *ctx, json_t *answer,
			 void *all)
{
	static const char *const headers[] = {
		"STATE", "SEVERITY", "RULE", "SINCE", "RESOLVED", "SUMMARY", NULL,
	};
	json_t *rows = json_object_get(answer, "alerts"), *row;
	int64_t now = kn_now_ms();
	struct cli_table *t;
	size_t i;

	if (!json_is_true(json_object_get(answer, "enabled")))
		fputs("alert rules are off on this server (--alert-rules \"\")\n",
		      stderr);
	if (!json_array_size(rows)) {
		fputs(*(bool *)all ? "no alerts recorded\n"
				   : "no alert firing or resolved in the last "
				     "day\n",
		      stderr);
		return;
	}
	t = cli_table_new(headers);
	cli_table_cuttable(t, 5);
	json_array_foreach(rows, i, row) {
		cli_table_cell(t, cli_json_str(row, "state"));
		cli_table_cell(t, cli_json_str(row, "severity"));
		cli_table_cell(t, cli_json_str(row, "rule"));
		cli_table_ago(t, row, "fired_at_ms", now);
		cli_table_ago(t, row, "resolved_at_ms", now);
		cli_table_cell(t, cli_json_str(row, "summary"));
	}
	cli_table_show(ctx, t, stdout, 0);
	cli_table_free(t);
}

static int cmd_alerts(struct cli_ctx *ctx, int argc, char **argv)
{
	bool all = false, watch = false;
	const struct cli_flag flags[] = {
		{"all", 0, CLI_FLAG_BOOL, &all},
		{"watch", 'w', CLI_FLAG_BOOL, &watch},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	struct watch_listing alerts = {NULL, print_alerts, &all, NULL, NULL};
	int rc = cli_parse(ctx, argc, argv, flags, NULL, NULL);

	if (rc != CLI_GO)
		return rc;
	alerts.path = all ? "/v1/alerts?all=1" : "/v1/alerts";
	return watch_listing(ctx, watch, &alerts);
}

static int cmd_events(struct cli_ctx *ctx, int argc, char **argv)
{
	bool follow = false;
	int since = 0;
	const struct cli_flag flags[] = {
		{"follow", 'f', CLI_FLAG_BOOL, &follow},
		{"since", 0, CLI_FLAG_COUNT, &since},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	struct cli_client *c = NULL;
	struct kn_buf path;
	char number[24];
	int rc;

	kn_buf_init(&path, SIZE_MAX);
	rc = cli_parse_open(ctx, argc, argv, flags, NULL, NULL, &c);
	if (rc != CLI_GO)
		goto out;
	kn_buf_printf(&path, "/v1/events");
	snprintf(number, sizeof(number), "%d", since);
	cli_query_add(&path, "since", number);
	if (follow)
		cli_query_add(&path, "follow", "1");
	/* Events quote names users chose: inert on a terminal, as logs. */
	rc = cli_stream(c, path.data, stdout,
			(follow ? CLI_STREAM_UNBOUNDED : 0) |
				(isatty(STDOUT_FILENO) ? CLI_STREAM_INERT : 0));
out:
	kn_buf_release(&path);
	cli_client_free(c);
	return rc;
}
