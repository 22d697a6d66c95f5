/*
 * kiln workflow run | ls | show | retry | cancel: workflow runs
 * (docs/workflows.md).
 *
 * run reads the workflow file and each job file it names (beside it), so
 * the server runs exactly the texts this machine has, and sends them with
 * the workflow's sha256 and the git revision of its directory: what a run
 * needs to be reproduced. The server parses everything again with the
 * parsers `kiln validate` uses; the local parse only finds the job files.
 *
 * --wait polls like `kiln submit --wait`: a pipeline may run for days and
 * the server may restart meanwhile.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "cmd/cli_client.h"
#include "cmd/cli_watch.h"
#include "spec/spec.h"
#include "ckpt/ckpt.h"

static cli_runner cmd_workflow;

const struct cli_command cmd_workflow_entry = {
	.name = "workflow",
	.run = cmd_workflow,
	.summary = "run a workflow file's steps as jobs; list, show, retry, cancel runs",
	.help = "usage: kiln workflow run FILE [--wait]\n"
		"       kiln workflow ls [-o json|table]\n"
		"       kiln workflow show RUN [-w] [-o json|yaml|table]\n"
		"       kiln workflow retry RUN\n"
		"       kiln workflow cancel RUN\n"
		"\n"
		"Run a `kind: Workflow` file (docs/workflows.md): each step is a job,\n"
		"started when the steps it needs have succeeded, with its on_failure\n"
		"policy, retries and `when:` conditions.\n"
		"\n"
		"  run     send FILE, the job files it names (read beside it), its\n"
		"          sha256 and the git revision of its directory; print the\n"
		"          run's id\n"
		"          --wait  follow the run until it ends; exit 0 only when it\n"
		"                  succeeded (4 failed, 5 cancelled)\n"
		"  ls      list runs: ID NAME STATE STEPS (succeeded/all) OWNER\n"
		"          SUBMITTED RAN REASON\n"
		"  show    a run, its cost and its steps: STEP STATE NEEDS DURATION\n"
		"          ATTEMPTS JOBS (every job it ran, retries' too) COST (of\n"
		"          those jobs' GPU time as `kiln cost --by job` prices it,\n"
		"          lost work included; - for register and deploy) REASON;\n"
		"          -w, --watch draws it again on each change (the server's\n"
		"          event stream, no polling)\n"
		"  retry   run a failed or cancelled run again: its failed,\n"
		"          cancelled and thereby skipped steps only; succeeded\n"
		"          steps and their outputs are kept\n"
		"  cancel  cancel a run: its running step jobs are cancelled\n",
};

/* "dir" of "dir/w.yaml"; "." without a slash. Malloc'd. */
static char *dir_of(const char *path)
{
	const char *slash = strrchr(path, '/');

	if (!slash)
		return kn_xstrdup(".");
	if (slash == path)
		return kn_xstrdup("/");
	return kn_asprintf("%.*s", (int)(slash - path), path);
}

/*
 * The request body of a run: the workflow's text, its name and absolute
 * path, each job file it names (read beside it), its digest and the git
 * revision of its directory. Returns CLI_GO or an exit status after
 * printing why.
 */
static int build_request(const struct cli_ctx *ctx, const char *file,
			 const char *name, const char *text, size_t len,
			 json_t **out)
{
	struct kn_workflow_spec *w = NULL;
	struct kn_error err = {0};
	char *dir = NULL, *abs = NULL, digest[65];
	char revision[KN_SHA256_HEX + 1];
	bool has_revision;
	json_t *files = json_object();
	int rc = CLI_GO;

	if (kn_workflow_spec_parse(text, len, name, &w, &err) < 0) {
		fprintf(stderr, "%s\n", err.message);
		rc = CLI_EXIT_FAIL;
		goto out;
	}
	dir = dir_of(strcmp(file, "-") ? file : "./-");
	for (size_t i = 0; i < w->n_steps; i++) {
		const char *job = w->steps[i].job_file;
		char *path, *job_text = NULL;
		size_t job_len = 0;
		int read_rc;

		if (!job || json_object_get(files, job))
			continue;
		path = job[0] == '/' ? kn_xstrdup(job)
				     : kn_asprintf("%s/%s", dir, job);
		read_rc = kn_read_file(path, KN_SPEC_MAX_BYTES, &job_text,
				       &job_len);
		if (read_rc < 0) {
			rc = cli_fail(ctx, "%s: steps[%zu].job: cannot read %s: "
				      "%s", name, i, path, strerror(-read_rc));
			free(path);
			goto out;
		}
		json_object_set_new(files, job,
				    json_stringn(job_text, job_len));
		KN_FREE_ALL(job_text, path);
	}
	kn_sha256_hex(text, len, digest);
	/* As the server reads a job's: from the repository's files. */
	has_revision = kn_git_revision(dir, revision) == 0;
	if (strcmp(file, "-") != 0)
		abs = realpath(file, NULL);
	*out = json_pack("{s:s%, s:s, s:O, s:s, s:o, s:o}", "spec", text, len,
			 "filename", name, "files", files, "digest", digest,
			 "revision",
			 has_revision ? json_string(revision) : json_null(),
			 "path", abs ? json_string(abs) : json_null());
out:
	KN_FREE_ALL(abs, dir);
	json_decref(files);
	kn_workflow_spec_free(w);
	return rc;
}

static int wait_for_run(struct cli_client *c, int64_t id, json_t *run)
{
	char *path = kn_asprintf("/v1/workflows/%lld", (long long)id);
	json_t *last = NULL;
	char line[1024], clean[1024];
	int rc = cli_wait_done(c, path, "workflow", "workflow run", run, &last);

	if (last) {
		snprintf(line, sizeof(line), "workflow run %lld: %s: %s",
			 (long long)id, cli_json_str(last, "state"),
			 cli_json_str(last, "reason"));
		cli_clean(clean, line, sizeof(clean));
		fprintf(stderr, "%s\n", clean);
	}
	json_decref(last);
	free(path);
	return rc;
}

static int wf_run(struct cli_ctx *ctx, int argc, char **argv)
{
	bool wait = false;
	const struct cli_flag flags[] = {
		{"wait", 0, CLI_FLAG_BOOL, &wait},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	struct cli_client *c = NULL;
	const char *file = NULL, *name;
	char *text = NULL, *body = NULL;
	size_t len;
	json_t *req = NULL, *answer = NULL, *run;
	int64_t id = 0;
	int rc;

	rc = cli_parse_spec(ctx, argc, argv, flags, &file, &text, &len, &name);
	if (rc != CLI_GO)
		goto out;
	rc = build_request(ctx, file, name, text, len, &req);
	if (rc != CLI_GO)
		goto out;
	rc = cli_client_open(ctx, &c);
	if (rc)
		goto out;
	body = json_dumps(req, JSON_COMPACT);
	rc = cli_create(c, "/v1/workflows", "application/json", body,
			strlen(body), &answer);
	if (rc)
		goto out;
	run = json_object_get(answer, "workflow");
	if (!json_is_integer(json_object_get(run, "id"))) {
		rc = cli_fail(ctx, "the server's answer has no run id");
		goto out;
	}
	id = cli_json_int(run, "id");
	printf("%lld\n", (long long)id);
	fflush(stdout);
	if (wait)
		rc = wait_for_run(c, id, run);
out:
	free(body);
	json_decref(req);
	json_decref(answer);
	cli_client_free(c);
	free(text);
	return rc;
}

static void print_list(json_t *runs)
{
	static const char *const headers[] = {
		"ID", "NAME", "STATE", "STEPS", "OWNER", "SUBMITTED", "RAN",
		"REASON", NULL,
	};
	struct cli_table *t = cli_table_new(headers);
	int64_t now = kn_now_ms();
	json_t *r;
	size_t i;

	json_array_foreach(runs, i, r) {
		json_t *by = json_object_get(r, "steps_by_state");
		char ran[32];

		cli_table_int(t, r, "id");
		cli_table_cell(t, cli_json_str(r, "name"));
		cli_table_cell(t, cli_json_str(r, "state"));
		cli_table_cellf(t, "%lld/%lld",
				(long long)cli_json_int(by, "succeeded"),
				(long long)cli_json_int(r, "steps_total"));
		cli_table_cell(t, cli_json_str(r, "owner"));
		cli_table_ago(t, r, "submitted_at_ms", now);
		cli_format_ran(cli_json_int(r, "started_at_ms"),
			       cli_json_int(r, "ended_at_ms"), now, ran,
			       sizeof(ran));
		cli_table_cell(t, ran);
		cli_table_cell(t, cli_json_str(r, "reason"));
	}
	cli_table_print(t, stdout, 0);
	cli_table_free(t);
}

/*
 * A cost as `kiln cost` writes it ("$1.25", "*" when some of it ran on a
 * node without a price), or "-" when there is none to tell (a register
 * or deploy step runs no job).
 */
static void cost_text(const json_t *o, char *buf, size_t len)
{
	const json_t *usd = json_object_get(o, "cost_usd");

	if (!json_is_number(usd))
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "$%.2f%s", json_number_value(usd),
			 json_is_true(json_object_get(o, "cost_unpriced")) ? "*"
									   : "");
}

static void print_detail(json_t *r)
{
	static const char *const headers[] = {
		"STEP", "STATE", "NEEDS", "DURATION", "ATTEMPTS", "JOBS",
		"COST", "REASON", NULL,
	};
	struct cli_table *t = cli_table_new(headers);
	int64_t now = kn_now_ms();
	json_t *st;
	size_t i;
	char cost[48];

	printf("run:       %lld (%s)\n", (long long)cli_json_int(r, "id"),
	       cli_json_str(r, "name"));
	printf("state:     %s\n", cli_json_str(r, "state"));
	printf("reason:    %s\n", cli_json_str(r, "reason"));
	printf("owner:     %s\n", cli_json_str(r, "owner"));
	printf("file:      %s\n", cli_json_str(r, "filename"));
	printf("digest:    sha256:%s\n", cli_json_str(r, "digest"));
	printf("revision:  %s\n", cli_json_str(r, "revision"));
	cost_text(r, cost, sizeof(cost));
	printf("cost:      %s (GPU time of every step's jobs, lost work "
	       "included%s)\n", cost,
	       json_is_true(json_object_get(r, "cost_unpriced"))
		       ? "; *: some ran on a node without a price"
		       : "");
	printf("\n");
	json_array_foreach(json_object_get(r, "steps"), i, st) {
		struct kn_buf jobs;
		json_t *a;
		size_t k;
		char ran[32];

		/* Every job the step ran, earlier attempts' too. */
		kn_buf_init(&jobs, SIZE_MAX);
		json_array_foreach(json_object_get(st, "attempt_history"), k, a)
			if (json_is_integer(json_object_get(a, "job")))
				kn_buf_printf(&jobs, "%s%lld",
					      jobs.len ? "," : "",
					      (long long)cli_json_int(a, "job"));
		cli_table_cell(t, cli_json_str(st, "name"));
		cli_table_cell(t, cli_json_str(st, "state"));
		cli_table_list(t, st, "needs", "-");
		cli_format_ran(cli_json_int(st, "started_at_ms"),
			       cli_json_int(st, "ended_at_ms"), now, ran,
			       sizeof(ran));
		cli_table_cell(t, ran);
		cli_table_int(t, st, "attempts");
		cli_table_cell(t, jobs.len ? jobs.data : "-");
		cost_text(st, cost, sizeof(cost));
		cli_table_cell(t, cost);
		cli_table_cell(t, cli_json_str(st, "reason"));
		kn_buf_release(&jobs);
	}
	cli_table_print(t, stdout, 0);
	cli_table_free(t);
}

static int wf_ls(struct cli_ctx *ctx, int argc, char **argv)
{
	json_t *answer;
	int rc = cli_get_listing(ctx, argc, argv, "/v1/workflows", &answer);

	if (rc != CLI_GO)
		return rc;
	print_list(json_object_get(answer, "workflows"));
	json_decref(answer);
	return CLI_EXIT_OK;
}

/*
 * argv parsed with flags and one argument, RUN: a run id, a whole number
 * >= 1 (one past 64 bits is refused, not clamped). CLI_GO with *out and
 * the run's path in path ("/v1/workflows/ID", then "/action" when action
 * is not NULL), or an exit status after saying why.
 */
static int parse_run(struct cli_ctx *ctx, int argc, char **argv,
		     const struct cli_flag *flags, const char *action,
		     int64_t *out, char *path, size_t path_len)
{
	const char *arg = NULL;
	char *end;
	long long v;
	int rc = cli_parse(ctx, argc, argv, flags, "RUN", &arg);

	if (rc != CLI_GO)
		return rc;
	errno = 0;
	v = strtoll(arg, &end, 10);
	if (*end || end == arg || v < 1 || errno)
		return cli_usage_error(ctx, "RUN must be a run id (a whole "
				       "number >= 1); got '%s'", arg);
	*out = v;
	snprintf(path, path_len, "/v1/workflows/%lld%s%s", v,
		 action ? "/" : "", action ? action : "");
	return CLI_GO;
}

static void print_run(const struct cli_ctx *ctx, json_t *answer, void *arg)
{
	(void)ctx;
	(void)arg;
	print_detail(json_object_get(answer, "workflow"));
}

static int wf_show(struct cli_ctx *ctx, int argc, char **argv)
{
	bool watch = false;
	const struct cli_flag flags[] = {
		{"watch", 'w', CLI_FLAG_BOOL, &watch},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	struct watch_listing run = {NULL, print_run, NULL, NULL, NULL};
	char path[64];
	int64_t id = 0;
	int rc;

	rc = parse_run(ctx, argc, argv, flags, NULL, &id, path, sizeof(path));
	if (rc != CLI_GO)
		return rc;
	run.path = path;
	return watch_listing(ctx, watch, &run);
}

/* POST /v1/workflows/RUN/<action> and say what happened. */
static int change(struct cli_ctx *ctx, int argc, char **argv,
		  const char *action, const char *done)
{
	struct cli_client *c = NULL;
	char path[80];
	int64_t id = 0;
	int rc;

	rc = parse_run(ctx, argc, argv, NULL, action, &id, path,
		       sizeof(path));
	if (rc != CLI_GO)
		return rc;
	rc = cli_client_open(ctx, &c);
	if (rc == 0)
		rc = cli_post_json(c, path, NULL, NULL);
	if (rc == 0)
		fprintf(stderr, "workflow run %lld %s\n", (long long)id, done);
	cli_client_free(c);
	return rc;
}

static int wf_retry(struct cli_ctx *ctx, int argc, char **argv)
{
	return change(ctx, argc, argv, "retry",
		      "runs again from its failed steps");
}

static int wf_cancel(struct cli_ctx *ctx, int argc, char **argv)
{
	return change(ctx, argc, argv, "cancel",
		      "cancelled; its running jobs are stopping");
}

static int cmd_workflow(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct cli_verb verbs[] = {
		{"run", wf_run},     {"ls", wf_ls},
		{"show", wf_show},   {"retry", wf_retry},
		{"cancel", wf_cancel}, {NULL, NULL},
	};

	return cli_run_verb(ctx, argc, argv, verbs);
}
