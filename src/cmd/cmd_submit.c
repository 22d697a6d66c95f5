/*
 * kiln submit: send a spec as written and print the new job's id.
 *
 * The text goes to the server unparsed: the server validates it with the
 * same parser as `kiln validate`, and the name given on the command line
 * travels as ?file= so its messages point at FILE:LINE:COLUMN; its absolute
 * path travels as ?path= so the task starts in the spec's directory (or
 * its workdir relative to it) and the relative paths of its `inputs:`
 * are found there. Only the size is checked here, so a huge file is
 * refused before it is sent.
 *
 * Overrides (--name, --env, --gpus, --tasks, --priority, --preemptible,
 * --array) travel as one JSON object, ?overrides=, which the server
 * applies and validates with the same parser as the file.
 *
 * --wait polls (cli_wait_done) until the job ends. --follow streams every
 * rank's output meanwhile, attempt after attempt, and exits with the job's
 * own exit status. For an array both wait until every element has ended
 * (its elements' logs are each their own: kiln logs ID[K]).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "cmd/cli_client.h"
#include "spec/spec.h"

static cli_runner cmd_submit;

const struct cli_command cmd_submit_entry = {
	.name = "submit",
	.run = cmd_submit,
	.summary = "submit a job spec and print its id",
	.help = "usage: kiln submit FILE [--wait | -f] [--hold] [--name N]\n"
		"                   [--env K=V]... [--gpus G] [--tasks N]\n"
		"                   [--priority P] [--preemptible] [--array A-B[%P]]\n"
		"\n"
		"Submit the job spec in FILE (YAML or JSON; - reads standard input)\n"
		"and print the new job's id alone on standard output, so scripts can\n"
		"capture it: id=$(kiln submit job.yaml). Specs larger than 256 KiB\n"
		"are refused before anything is sent. A job no node could ever hold\n"
		"(more GPUs per task than the largest node has) is refused, with why.\n"
		"\n"
		"  --hold  queue it anyway, for a node that may join\n"
		"  --name N, --env K=V (repeatable), --gpus G, --tasks N,\n"
		"  --priority P, --preemptible\n"
		"          override the file's field for this job; checked as the\n"
		"          file is, and listed by `kiln show` as overrides\n"
		"  --array A-B[%P]\n"
		"          a job array: one job per index A..B (at most P at once),\n"
		"          each with KILN_ARRAY_INDEX and SLURM_ARRAY_TASK_ID set;\n"
		"          the id printed is the array's (its first element's)\n"
		"  --wait  wait for the job to end, print its final state on standard\n"
		"          error, and exit 0 if it succeeded, 4 if it failed, 5 if it\n"
		"          was cancelled; for an array, until every element has ended\n"
		"  -f, --follow\n"
		"          as --wait, printing every rank's output meanwhile (lines\n"
		"          prefixed [rank N]); exit with the job's exit code when it\n"
		"          failed with one\n",
};

static void print_final(int64_t id, json_t *job)
{
	const char *reason = json_string_value(json_object_get(job, "reason"));
	char ran[32], line[1024], clean[1024];

	cli_format_ran(cli_json_int(job, "started_at_ms"),
		       cli_json_int(job, "ended_at_ms"), kn_now_ms(), ran,
		       sizeof(ran));
	snprintf(line, sizeof(line), "job %lld: %s", (long long)id,
		 cli_json_str(job, "state"));
	if (strcmp(ran, "-"))
		snprintf(line + strlen(line), sizeof(line) - strlen(line),
			 " after %s", ran);
	if (reason && *reason)
		snprintf(line + strlen(line), sizeof(line) - strlen(line),
			 ": %s", reason);
	cli_clean(clean, line, sizeof(clean));
	fprintf(stderr, "%s\n", clean);
}

static int wait_for_job(struct cli_client *c, int64_t id, json_t *job)
{
	char *path = kn_asprintf("/v1/jobs/%lld", (long long)id);
	json_t *last = NULL;
	int rc = cli_wait_done(c, path, "job", "job", job, &last);

	if (last)
		print_final(id, last);
	json_decref(last);
	free(path);
	return rc;
}

/* An array has ended when none of its elements is queued or running. */
static int array_ended(json_t *job, void *arg)
{
	json_t *counts = json_object_get(json_object_get(job, "array"),
					 "counts");

	(void)arg;
	if (!json_is_object(counts) ||
	    json_object_get(counts, "queued") ||
	    json_object_get(counts, "running") ||
	    json_object_get(counts, "preempted"))
		return CLI_GO;
	if (json_object_get(counts, "failed"))
		return CLI_EXIT_JOB_FAILED;
	if (json_object_get(counts, "cancelled"))
		return CLI_EXIT_JOB_CANCELLED;
	return CLI_EXIT_OK;
}

/* Wait for every element; print how many ended in each state. */
static int wait_for_array(struct cli_client *c, int64_t id, json_t *job)
{
	char *path = kn_asprintf("/v1/jobs/%lld", (long long)id);
	json_t *last = NULL, *n;
	const char *state;
	int rc = cli_wait_until(c, path, "job", "job", job, array_ended, NULL,
				&last);

	if (last) {
		printf("job %lld:", (long long)id);
		json_object_foreach(json_object_get(json_object_get(last,
								    "array"),
						    "counts"),
				    state, n)
			printf(" %lld %s", (long long)json_integer_value(n),
			       state);
		putchar('\n');
	}
	json_decref(last);
	free(path);
	return rc;
}

/* The CLI's exit status for a job that ended: the job's own. */
static int job_exit_status(json_t *job)
{
	const char *state = cli_json_str(job, "state");
	int64_t code = cli_json_int(job, "exit_code");

	if (!strcmp(state, "succeeded"))
		return CLI_EXIT_OK;
	if (!strcmp(state, "cancelled"))
		return CLI_EXIT_JOB_CANCELLED;
	return code > 0 && code < 256 ? (int)code : CLI_EXIT_JOB_FAILED;
}

/* Each attempt's output as it runs, until the job ends. */
static int follow_job(const struct cli_ctx *ctx, struct cli_client *c,
		      int64_t id)
{
	unsigned stream = isatty(STDOUT_FILENO) ? CLI_STREAM_INERT : 0;
	json_t *job = NULL;
	int attempt = 0, rc;

	for (;;) {
		json_decref(job);
		rc = cli_wait_started(c, id, attempt, &job);
		if (rc == CLI_EXIT_FAIL && job)
			break; /* ended: no attempt after the last one */
		if (rc)
			goto out;
		attempt = (int)cli_json_int(job, "attempts");
		rc = cli_logs_follow(ctx, c, id, attempt,
				     (int)cli_json_int(job, "tasks"), stream);
		if (rc)
			goto out;
	}
	print_final(id, job);
	rc = job_exit_status(job);
out:
	json_decref(job);
	return rc;
}

struct overrides {
	const char *name, *gpus;
	struct cli_list env;
	int tasks, priority; /* -1: not given */
	bool preemptible;
	const char *array;
};

/* "2" and "0.5" as numbers; "mig:1g.10gb" as it is. */
static json_t *gpus_json(const char *text)
{
	char *end;
	double v = strtod(text, &end);

	if (end == text || *end)
		return json_string(text);
	if (v == (double)(long long)v)
		return json_integer((json_int_t)v);
	return json_real(v);
}

/*
 * The overrides given, as JSON object text (malloc'd) in *out, or NULL
 * when there are none. CLI_GO, or a usage error.
 */
static int overrides_text(const struct cli_ctx *ctx, const struct overrides *o,
			  char **out)
{
	json_t *doc = json_object(), *env = json_object();

	*out = NULL;
	for (size_t i = 0; i < o->env.n; i++) {
		const char *eq = strchr(o->env.v[i], '=');
		char *key;

		if (!eq || eq == o->env.v[i]) {
			json_decref(doc);
			json_decref(env);
			return cli_usage_error(ctx, "--env wants NAME=VALUE, got "
						    "'%s'",
					       o->env.v[i]);
		}
		key = kn_asprintf("%.*s", (int)(eq - o->env.v[i]), o->env.v[i]);
		json_object_set_new(env, key, json_string(eq + 1));
		free(key);
	}
	if (o->name)
		json_object_set_new(doc, "name", json_string(o->name));
	if (json_object_size(env))
		json_object_set(doc, "env", env);
	if (o->gpus)
		json_object_set_new(doc, "gpus", gpus_json(o->gpus));
	if (o->tasks >= 0)
		json_object_set_new(doc, "tasks", json_integer(o->tasks));
	if (o->priority >= 0)
		json_object_set_new(doc, "priority", json_integer(o->priority));
	if (o->preemptible)
		json_object_set_new(doc, "preemptible", json_true());
	if (o->array) {
		struct kn_job_array a;
		char why[160];

		if (kn_job_array_parse(o->array, &a, why, sizeof(why)) < 0) {
			json_decref(doc);
			json_decref(env);
			return cli_usage_error(ctx, "--array: %s; got '%s'", why,
					       o->array);
		}
		json_object_set_new(doc, "array", json_string(o->array));
	}
	if (json_object_size(doc))
		*out = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	json_decref(env);
	return CLI_GO;
}

static int cmd_submit(struct cli_ctx *ctx, int argc, char **argv)
{
	bool wait = false, follow = false, hold = false;
	struct overrides o = {.tasks = -1, .priority = -1};
	const struct cli_flag flags[] = {
		{"wait", 0, CLI_FLAG_BOOL, &wait},
		{"follow", 'f', CLI_FLAG_BOOL, &follow},
		{"hold", 0, CLI_FLAG_BOOL, &hold},
		{"name", 0, CLI_FLAG_STRING, &o.name},
		{"env", 0, CLI_FLAG_LIST, &o.env},
		{"gpus", 0, CLI_FLAG_STRING, &o.gpus},
		{"tasks", 0, CLI_FLAG_COUNT, &o.tasks},
		{"priority", 0, CLI_FLAG_COUNT, &o.priority},
		{"preemptible", 0, CLI_FLAG_BOOL, &o.preemptible},
		{"array", 0, CLI_FLAG_STRING, &o.array},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	struct cli_client *c = NULL;
	const char *file = NULL, *name;
	char *text = NULL, *changes = NULL;
	struct kn_buf path;
	size_t len;
	json_t *answer = NULL, *job;
	int64_t id;
	int rc;

	kn_buf_init(&path, SIZE_MAX);
	rc = cli_parse(ctx, argc, argv, flags, "FILE", &file);
	if (rc == CLI_GO)
		rc = overrides_text(ctx, &o, &changes);
	if (rc != CLI_GO)
		goto out;
	rc = cli_read_spec(ctx, file, &text, &len, &name);
	if (rc != CLI_GO)
		goto out;
	rc = cli_client_open(ctx, &c);
	if (rc)
		goto out;
	kn_buf_printf(&path, "/v1/jobs");
	cli_query_add(&path, "hold", hold ? "1" : NULL);
	cli_query_add(&path, "overrides", changes);
	rc = cli_post_spec(c, path.data, file, name, text, len, &answer);
	if (rc)
		goto out;
	job = json_object_get(answer, "job");
	if (!json_is_integer(json_object_get(job, "id"))) {
		fputs("kiln: the server's answer has no job id\n", stderr);
		rc = CLI_EXIT_FAIL;
		goto out;
	}
	id = cli_json_int(job, "id");
	printf("%lld\n", (long long)id);
	/* A script reading the id should have it before the wait ends. */
	fflush(stdout);
	if ((follow || wait) && json_object_get(job, "array"))
		rc = wait_for_array(c, id, job);
	else if (follow)
		rc = follow_job(ctx, c, id);
	else if (wait)
		rc = wait_for_job(c, id, job);
out:
	json_decref(answer);
	cli_client_free(c);
	kn_buf_release(&path);
	KN_FREE_ALL(o.env.v, changes, text);
	return rc;
}
