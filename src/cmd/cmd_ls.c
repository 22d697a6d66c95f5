/*
 * kiln ls: the jobs as a table, the server's JSON with -o json (or YAML),
 * their ids alone with -o name. Filters go to the server as query
 * parameters; the table is built here, its names and reasons cut to fit
 * 80 columns unless -o wide. A job array is one row (the server folds
 * its elements): ID[FIRST-LAST], and its elements' counts by state.
 */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "cmd/cli_client.h"
#include "cmd/cli_watch.h"

static cli_runner cmd_ls;

const struct cli_command cmd_ls_entry = {
	.name = "ls",
	.run = cmd_ls,
	.summary = "list jobs",
	.help = "usage: kiln ls [--state S] [--owner O] [--all] [-w]\n"
		"               [-o table|wide|json|yaml|name] [--no-headers]\n"
		"\n"
		"List jobs, oldest first: ID NAME STATE TASKS GPUS (per task) OWNER\n"
		"AGE (since submission) DURATION (running so far, or in total)\n"
		"REASON (why queued, or why it ended). Names and reasons are cut,\n"
		"ending in \u2026, so that rows fit 80 columns. A job array is one row,\n"
		"ID[FIRST-LAST], its state its busiest element's and its REASON how\n"
		"many elements are in each state.\n"
		"\n"
		"  --state S     only jobs in state S: queued, running, succeeded,\n"
		"                failed, cancelled or preempted\n"
		"  --owner O     only jobs submitted with the token named O\n"
		"  --all         every job; this is the default, spelled out\n"
		"  -w, --watch   draw again whenever the server's event stream says\n"
		"                a job or node changed (no polling); until\n"
		"                interrupted\n"
		"  -o wide       the table with nothing cut\n"
		"  -o json|yaml  print the server's answer instead of a table\n"
		"  -o name       the job ids alone, one a line\n"
		"  --no-headers  the table without its header row\n",
};

static const char *const job_states[] = {
	"queued", "running", "succeeded", "failed", "cancelled", "preempted",
	NULL,
};

static void add_job_row(struct cli_table *t, json_t *job, int64_t now)
{
	const char *reason = json_string_value(json_object_get(job, "reason"));
	json_t *array = json_object_get(job, "array");
	char buf[64], counts[160];

	if (json_is_object(array)) {
		/* One row for the array: its indexes, and in place of one
		   job's reason, how many elements are in each state. */
		cli_table_cellf(t, "%lld[%lld-%lld]",
				(long long)cli_json_int(job, "id"),
				(long long)cli_json_int(array, "first"),
				(long long)(cli_json_int(array, "first") +
					    cli_json_int(array, "count") - 1));
		cli_format_array_counts(json_object_get(array, "counts"),
					counts, sizeof(counts));
		reason = counts;
	} else {
		cli_table_int(t, job, "id");
	}
	cli_table_cell(t, cli_json_str(job, "name"));
	cli_table_cell(t, cli_json_str(job, "state"));
	cli_table_int(t, job, "tasks");
	cli_format_gpus(json_object_get(json_object_get(job, "resources"),
					"gpus"),
			buf, sizeof(buf));
	cli_table_cell(t, buf);
	cli_table_cell(t, cli_json_str(job, "owner"));
	cli_table_ago(t, job, "submitted_at_ms", now);
	cli_format_ran(cli_json_int(job, "started_at_ms"),
		       cli_json_int(job, "ended_at_ms"), now, buf, sizeof(buf));
	cli_table_cell(t, buf);
	cli_table_cell(t, reason ? reason : "");
}

static void print_jobs(const struct cli_ctx *ctx, json_t *answer,
		       void *filtered)
{
	static const char *const headers[] = {
		"ID", "NAME", "STATE", "TASKS", "GPUS", "OWNER", "AGE",
		"DURATION", "REASON", NULL,
	};
	json_t *jobs = json_object_get(answer, "jobs"), *job;
	int64_t now = kn_now_ms();
	struct cli_table *t;
	size_t i;

	if (!json_array_size(jobs)) {
		fputs(*(bool *)filtered ? "no jobs match\n" : "no jobs\n",
		      stderr);
		return;
	}
	t = cli_table_new(headers);
	cli_table_cuttable(t, 1);
	cli_table_cuttable(t, 8);
	json_array_foreach(jobs, i, job)
		add_job_row(t, job, now);
	cli_table_show(ctx, t, stdout, 0);
	cli_table_free(t);
}

static int cmd_ls(struct cli_ctx *ctx, int argc, char **argv)
{
	const char *state = NULL, *owner = NULL;
	bool all = false, watch = false, filtered;
	const struct cli_flag flags[] = {
		{"state", 0, CLI_FLAG_STRING, &state},
		{"owner", 0, CLI_FLAG_STRING, &owner},
		{"all", 0, CLI_FLAG_BOOL, &all},
		{"watch", 'w', CLI_FLAG_BOOL, &watch},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	struct watch_listing jobs = {NULL, print_jobs, &filtered, "jobs", "id"};
	struct kn_buf path;
	int rc;

	kn_buf_init(&path, SIZE_MAX);
	ctx->name_ok = true;
	rc = cli_parse(ctx, argc, argv, flags, NULL, NULL);
	if (rc != CLI_GO)
		goto out;
	if (state) {
		rc = cli_check_choice(ctx, "job state", "states", state,
				      job_states);
		if (rc != CLI_GO)
			goto out;
	}
	filtered = state || owner;
	kn_buf_printf(&path, "/v1/jobs");
	cli_query_add(&path, "state", state);
	cli_query_add(&path, "owner", owner);
	jobs.path = path.data;
	rc = watch_listing(ctx, watch, &jobs);
out:
	kn_buf_release(&path);
	return rc;
}
