/*
 * kiln cost: what the cluster's GPU time cost, from GET /v1/cost — by
 * job, user, deployment, node or day, with idle, unhealthy and lost cost,
 * goodput and efficiency — as a table, JSON or CSV, and --chart's SVG of
 * cost per day by category (a second request, by day, when --by is not
 * day). --reservations: reservation and spot advice from the same
 * history (GET /v1/cost/reservations). --rightsize: per job name, use
 * against requests and the suggested requests (GET /v1/cost/rightsize).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "cmd/cli_client.h"
#include "cmd/cost_report.h"

static cli_runner cmd_cost;

const struct cli_command cmd_cost_entry = {
	.name = "cost",
	.run = cmd_cost,
	.summary = "what GPU time cost: by job, user, deployment, node or day",
	.help = "usage: kiln cost [--by job|user|deployment|node|day]\n"
		"                 [--since DURATION|TIME] [--until DURATION|TIME]\n"
		"                 [-o table|json|csv] [--chart FILE.svg]\n"
		"       kiln cost --reservations [--since ...] [--until ...] [-o json]\n"
		"       kiln cost --rightsize [--since ...] [-o table|json|csv]\n"
		"\n"
		"The cost ledger (docs/cost.md): each node's GPU time, priced by its\n"
		"size and pricing model (labels sku= and pricing=, `kiln server\n"
		"--node-sku`), split into busy (allocated to a task: whole GPUs, GPU\n"
		"shares and MIG slices by their fraction), idle (not allocated while\n"
		"the node is up) and unhealthy; lost is busy time of a preempted or\n"
		"failed attempt after its last checkpoint (all of it without one).\n"
		"Columns: GPU-HOURS busy, COST busy, IDLE, UNHEALTHY, LOST (part of\n"
		"COST), TOTAL (busy + idle + unhealthy), GOODPUT (useful over busy)\n"
		"and EFFICIENCY (used over requested from per-task samples: GPU\n"
		"utilisation x share over GPU time held, CPU cores and resident\n"
		"memory over requested; the mean of those a row has, \"-\" when none\n"
		"was sampled; `kiln server --usage-interval`). The\n"
		"last row is the total; by job, user or deployment idle and\n"
		"unhealthy time belong to no row and are in the total only. A node\n"
		"whose size or price the catalog lacks is costed at $0 and marked *.\n"
		"\n"
		"  --by KEY              job (default), user, deployment, node or day\n"
		"                        (UTC days)\n"
		"  --since DURATION|TIME the window's start: 7d ago (default 30d), or\n"
		"                        a UTC time 2026-12-01 or 2026-12-01T08:00:00Z\n"
		"  --until DURATION|TIME the window's end (default now)\n"
		"  -o table|json|csv     json: the server's answer as is; csv: one\n"
		"                        line per row then the total, unrounded\n"
		"  --chart FILE.svg      also write cost per day, stacked useful,\n"
		"                        lost, idle and unhealthy, as an SVG file\n"
		"  --reservations        advice from the window's history instead:\n"
		"                        per VM size, its nodes' GPU utilisation (busy\n"
		"                        over up) against each reserved term's\n"
		"                        break-even (reserved / on-demand price), and\n"
		"                        which jobs could move to spot (preemptible,\n"
		"                        with checkpoints; the longest work an attempt\n"
		"                        had past its last checkpoint)\n"
		"  --rightsize           right-size advice instead: per job name\n"
		"                        (its runs in the window), the samples, p50,\n"
		"                        p95 and max of CPU, memory and GPU memory use\n"
		"                        against the request, and a suggested request\n"
		"                        (p95 x 1.15, rounded up) where that is below\n"
		"                        70% of it, from at least 10 samples\n",
};

/* GET base (/v1/cost with by, or one of its advice paths without). */
static int fetch(struct cli_client *c, const char *base, const char *by,
		 int64_t since, int64_t until, json_t **out)
{
	struct kn_buf path;
	char number[24];
	int rc;

	kn_buf_init(&path, SIZE_MAX);
	kn_buf_printf(&path, "%s", base);
	if (by)
		cli_query_add(&path, "by", by);
	snprintf(number, sizeof(number), "%" PRId64, since);
	cli_query_add(&path, "since", number);
	snprintf(number, sizeof(number), "%" PRId64, until);
	cli_query_add(&path, "until", number);
	rc = cli_get(c, path.data, out);
	kn_buf_release(&path);
	return rc;
}

static int write_chart(struct cli_ctx *ctx, const char *file, json_t *days)
{
	int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;

	if (!f) {
		if (fd >= 0)
			close(fd);
		return cli_fail(ctx, "--chart: cannot write %s: %s", file,
				strerror(errno));
	}
	cost_report_svg(days, f);
	if (fclose(f) != 0)
		return cli_fail(ctx, "--chart: cannot write %s: %s", file,
				strerror(errno));
	return 0;
}

static const char *time_wanted(const char *got)
{
	static char why[160];

	snprintf(why, sizeof(why), "\"%.60s\" is neither a duration (7d, "
		 "12h) nor a UTC time (2026-12-01, 2026-12-01T08:00:00Z)", got);
	return why;
}

static int cmd_cost(struct cli_ctx *ctx, int argc, char **argv)
{
	const char *by = NULL, *since_text = "30d", *until_text = NULL,
		   *chart = NULL;
	bool reservations = false, rightsize = false;
	const struct cli_flag flags[] = {
		{"by", 0, CLI_FLAG_STRING, &by},
		{"since", 0, CLI_FLAG_STRING, &since_text},
		{"until", 0, CLI_FLAG_STRING, &until_text},
		{"chart", 0, CLI_FLAG_STRING, &chart},
		{"reservations", 0, CLI_FLAG_BOOL, &reservations},
		{"rightsize", 0, CLI_FLAG_BOOL, &rightsize},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	static const char *const bys[] = {
		"job", "user", "deployment", "node", "day", NULL,
	};
	struct cli_client *c = NULL;
	json_t *answer = NULL, *days = NULL;
	int64_t now = kn_now_ms(), since, until = now;
	bool known = false;
	int rc;

	ctx->csv_ok = true;
	rc = cli_parse(ctx, argc, argv, flags, NULL, NULL);
	if (rc != CLI_GO)
		goto out;
	if (rightsize && (reservations || chart || by)) {
		rc = cli_usage_error(ctx, "--rightsize takes no --by, --chart "
				     "or --reservations");
		goto out;
	}
	if (!by)
		by = "job";
	for (size_t i = 0; bys[i]; i++)
		known = known || !strcmp(by, bys[i]);
	if (!known) {
		rc = cli_usage_error(ctx, "--by: \"%s\" is not job, user, "
				     "deployment, node or day", by);
		goto out;
	}
	if (cli_parse_when(since_text, now, &since) < 0) {
		rc = cli_usage_error(ctx, "--since: %s", time_wanted(since_text));
		goto out;
	}
	if (until_text && cli_parse_when(until_text, now, &until) < 0) {
		rc = cli_usage_error(ctx, "--until: %s", time_wanted(until_text));
		goto out;
	}
	if (until <= since) {
		rc = cli_usage_error(ctx, "--since must come before --until");
		goto out;
	}
	if (reservations && (chart || !strcmp(ctx->output, "csv"))) {
		rc = cli_usage_error(ctx, "--reservations takes -o table or "
				     "json, and no --chart");
		goto out;
	}
	rc = cli_client_open(ctx, &c);
	if (rc)
		goto out;
	if (rightsize)
		rc = fetch(c, "/v1/cost/rightsize", NULL, since, until, &answer);
	else if (reservations)
		rc = fetch(c, "/v1/cost/reservations", NULL, since, until,
			   &answer);
	else
		rc = fetch(c, "/v1/cost", by, since, until, &answer);
	if (rc)
		goto out;
	if (chart) {
		if (!strcmp(by, "day"))
			days = json_incref(answer);
		else if ((rc = fetch(c, "/v1/cost", "day", since, until,
				     &days)))
			goto out;
		rc = write_chart(ctx, chart, days);
		if (rc)
			goto out;
	}
	if (cli_want_json(ctx))
		cli_print_data(ctx, answer);
	else if (rightsize && !strcmp(ctx->output, "csv"))
		cost_report_rightsize_csv(answer, stdout);
	else if (rightsize)
		cost_report_rightsize(answer, stdout);
	else if (reservations)
		cost_report_reservations(answer, stdout);
	else if (!strcmp(ctx->output, "csv"))
		cost_report_csv(answer, stdout);
	else
		cost_report_table(answer, stdout);
out:
	json_decref(answer);
	json_decref(days);
	cli_client_free(c);
	return rc;
}
