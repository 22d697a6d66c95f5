/*
 * kiln logs: a task's output, copied to stdout as it arrives. With -f the
 * request has no time limit: the server ends the stream when the task has
 * ended and its log is drained; a job still queued is waited for first.
 * --all shows every rank, each line prefixed "[rank N] ": one after the
 * other, or with -f all at once, one process per rank (the CLI's client
 * blocks), each writing whole lines so that ranks never mix within one.
 *
 * A task's output is the task's to choose, so on a terminal it is shown
 * inert: escape sequences (clear the screen, set the window title, ...)
 * and other control characters but \n and \t appear escaped, as \x1b.
 * Into a pipe or a file the bytes pass unchanged, and --raw passes them
 * to a terminal too.
 *
 * --since and --timestamps are the server's: it knows when each line came
 * (the shim records it beside the log) and leads each line with its time,
 * so with --all the rank's prefix comes first.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "cmd/cli_client.h"

static cli_runner cmd_logs;

const struct cli_command cmd_logs_entry = {
	.name = "logs",
	.run = cmd_logs,
	.summary = "print or follow a task's output",
	.help = "usage: kiln logs ID|ID[K] [--task N | --all] [--attempt K] [--tail N]\n"
		"                 [--since DUR] [--timestamps] [-f] [--raw]\n"
		"\n"
		"Print the output (stdout and stderr) of one task of job ID (or of\n"
		"element K of job array ID) as it arrives. On a terminal, escape sequences and other control\n"
		"characters but newline and tab are shown escaped (\\x1b, \\r,\n"
		"\\u009b), so a task cannot drive the terminal; into a pipe or a\n"
		"file the bytes pass unchanged.\n"
		"\n"
		"  --task N     the task's rank (default 0)\n"
		"  --all        every rank, each line prefixed [rank N]\n"
		"  --attempt K  the attempt (default the latest)\n"
		"  --tail N     only the last N lines (then, with -f, what follows)\n"
		"  --since DUR  only lines that came in the last DUR (90s, 5m, 2h)\n"
		"  --timestamps each line led by when it came (UTC, ms)\n"
		"  -f, --follow keep printing until the task has ended; a queued job\n"
		"               is waited for\n"
		"  --raw        the bytes as they are, on a terminal too\n",
};

/* A line longer than this is written in pieces, each prefixed. */
#define PREFIX_LINE_MAX 65536

struct prefixer {
	char prefix[32];
	struct kn_buf line;
};

/* One write(2) per line, so that lines from other processes do not cut
   into it (whole for a pipe up to PIPE_BUF, and in practice beyond). */
static int emit_line(struct prefixer *p)
{
	if (kn_write_all(STDOUT_FILENO, p->line.data, p->line.len) < 0)
		return -1;
	p->line.len = 0;
	return 0;
}

static ssize_t prefix_write(void *cookie, const char *buf, size_t size)
{
	struct prefixer *p = cookie;

	for (size_t i = 0; i < size; i++) {
		if (!p->line.len)
			kn_buf_printf(&p->line, "%s", p->prefix);
		kn_buf_append(&p->line, &buf[i], 1);
		if ((buf[i] == '\n' || p->line.len >= PREFIX_LINE_MAX) &&
		    emit_line(p) < 0)
			return -1;
	}
	return (ssize_t)size;
}

static int prefix_close(void *cookie)
{
	struct prefixer *p = cookie;
	int rc = 0;

	/* A last line without its newline still ends one here. */
	if (p->line.len) {
		kn_buf_append(&p->line, "\n", 1);
		rc = emit_line(p);
	}
	kn_buf_release(&p->line);
	free(p);
	return rc;
}

/* A FILE that writes rank's lines to stdout, each prefixed. */
static FILE *prefixed_stdout(int rank)
{
	static const cookie_io_functions_t io = {
		.write = prefix_write,
		.close = prefix_close,
	};
	struct prefixer *p = kn_xcalloc(1, sizeof(*p));
	FILE *f;

	snprintf(p->prefix, sizeof(p->prefix), "[rank %d] ", rank);
	kn_buf_init(&p->line, SIZE_MAX);
	f = fopencookie(p, "w", io);
	if (!f) {
		kn_buf_release(&p->line);
		free(p);
		return NULL;
	}
	setvbuf(f, NULL, _IONBF, 0);
	return f;
}

struct log_query {
	int64_t id;
	int attempt; /* 0: the latest */
	int tail;    /* -1: the whole log */
	const char *since; /* a duration, or NULL */
	bool timestamps;
	bool follow;
	unsigned stream;
};

static char *log_path(const struct log_query *q, int rank)
{
	struct kn_buf path;
	char number[24];

	kn_buf_init(&path, SIZE_MAX);
	kn_buf_printf(&path, "/v1/jobs/%lld/logs", (long long)q->id);
	snprintf(number, sizeof(number), "%d", rank);
	cli_query_add(&path, "task", number);
	if (q->attempt > 0) {
		snprintf(number, sizeof(number), "%d", q->attempt);
		cli_query_add(&path, "attempt", number);
	}
	if (q->tail >= 0) {
		snprintf(number, sizeof(number), "%d", q->tail);
		cli_query_add(&path, "tail", number);
	}
	if (q->since)
		cli_query_add(&path, "since", q->since);
	if (q->timestamps)
		cli_query_add(&path, "timestamps", "1");
	if (q->follow)
		cli_query_add(&path, "follow", "1");
	return path.data;
}

static int stream_rank(struct cli_client *c, const struct log_query *q,
		       int rank, bool prefixed)
{
	char *path = log_path(q, rank);
	FILE *sink = prefixed ? prefixed_stdout(rank) : stdout;
	int rc;

	if (!sink) {
		free(path);
		fprintf(stderr, "kiln: %s\n", strerror(errno));
		return CLI_EXIT_FAIL;
	}
	rc = cli_stream(c, path, sink, q->stream);
	if (prefixed && fclose(sink) != 0 && !rc)
		rc = CLI_EXIT_FAIL;
	free(path);
	return rc;
}

/* Every rank at once, each from its own process and connection. */
static int follow_ranks(const struct cli_ctx *ctx, const struct log_query *q,
			int tasks)
{
	pid_t *pids = kn_xcalloc((size_t)tasks, sizeof(pid_t));
	int worst = CLI_EXIT_OK, status;

	fflush(stdout);
	for (int r = 0; r < tasks; r++) {
		pids[r] = fork();
		if (pids[r] == 0) {
			struct cli_client *own = NULL;
			int rc = cli_client_open(ctx, &own);

			if (!rc)
				rc = stream_rank(own, q, r, true);
			cli_client_free(own);
			_exit(rc);
		}
		if (pids[r] < 0) {
			fprintf(stderr, "kiln: cannot follow rank %d: %s\n", r,
				strerror(errno));
			worst = CLI_EXIT_FAIL;
		}
	}
	for (int r = 0; r < tasks; r++) {
		if (pids[r] <= 0)
			continue;
		while (waitpid(pids[r], &status, 0) < 0 && errno == EINTR)
			;
		if (!WIFEXITED(status) || WEXITSTATUS(status))
			worst = WIFEXITED(status) ? WEXITSTATUS(status)
						  : CLI_EXIT_FAIL;
	}
	free(pids);
	return worst;
}

/* Every rank's lines, prefixed: followed at once, or one after another. */
static int stream_all(const struct cli_ctx *ctx, struct cli_client *c,
		      const struct log_query *q, int tasks)
{
	int worst = CLI_EXIT_OK;

	if (q->follow && tasks > 1)
		return follow_ranks(ctx, q, tasks);
	for (int r = 0; r < tasks; r++) {
		int rc = stream_rank(c, q, r, true);
		if (rc)
			worst = rc;
	}
	return worst;
}

int cli_logs_follow(const struct cli_ctx *ctx, struct cli_client *c,
		    int64_t id, int attempt, int tasks, unsigned stream)
{
	struct log_query q = {.id = id, .attempt = attempt, .tail = -1,
			      .follow = true,
			      .stream = stream | CLI_STREAM_UNBOUNDED};

	return stream_all(ctx, c, &q, tasks);
}

/* cli_wait_until: a job has started an attempt after *after (0), or
   ended without (1). */
static int started(json_t *job, void *after)
{
	const char *state = cli_json_str(job, "state");

	if (cli_json_int(job, "attempts") > *(int *)after)
		return CLI_EXIT_OK;
	if (strcmp(state, "queued") && strcmp(state, "running"))
		return CLI_EXIT_FAIL;
	return CLI_GO;
}

int cli_wait_started(struct cli_client *c, int64_t id, int after,
		     json_t **job)
{
	char *path = kn_asprintf("/v1/jobs/%lld", (long long)id);
	json_t *answer = NULL, *last = NULL;
	int rc = cli_get(c, path, &answer);

	if (!rc && started(json_object_get(answer, "job"), &after) == CLI_GO &&
	    !strcmp(cli_json_str(json_object_get(answer, "job"), "state"),
		    "queued"))
		fprintf(stderr, "kiln: job %lld is queued; waiting for it to "
				"start\n",
			(long long)id);
	if (!rc)
		rc = cli_wait_until(c, path, "job", "job",
				    json_object_get(answer, "job"), started,
				    &after, &last);
	json_decref(answer);
	free(path);
	*job = last;
	return rc;
}

static int cmd_logs(struct cli_ctx *ctx, int argc, char **argv)
{
	struct log_query q = {.tail = -1};
	int task = 0, attempt = -1;
	int64_t index;
	bool raw = false, all = false;
	const struct cli_flag flags[] = {
		{"raw", 0, CLI_FLAG_BOOL, &raw},
		{"task", 0, CLI_FLAG_COUNT, &task},
		{"attempt", 0, CLI_FLAG_COUNT, &attempt},
		{"follow", 'f', CLI_FLAG_BOOL, &q.follow},
		{"all", 0, CLI_FLAG_BOOL, &all},
		{"tail", 0, CLI_FLAG_COUNT, &q.tail},
		{"since", 0, CLI_FLAG_STRING, &q.since},
		{"timestamps", 0, CLI_FLAG_BOOL, &q.timestamps},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	struct cli_client *c = NULL;
	const char *id_arg = NULL;
	json_t *job = NULL;
	int64_t since_ms;
	int rc, tasks;

	rc = cli_parse(ctx, argc, argv, flags, "ID", &id_arg);
	if (rc != CLI_GO)
		goto out;
	rc = cli_parse_job_ref(ctx, id_arg, &q.id, &index);
	if (rc != CLI_GO)
		goto out;
	if (attempt == 0) {
		rc = cli_usage_error(ctx, "attempts are numbered from 1");
		goto out;
	}
	if (q.since && kn_parse_duration(q.since, &since_ms) < 0) {
		rc = cli_usage_error(ctx, "--since: not a duration such as 90s, "
					  "5m or 2h: \"%s\"", q.since);
		goto out;
	}
	q.attempt = attempt > 0 ? attempt : 0;
	rc = cli_client_open(ctx, &c);
	if (rc == 0 && index >= 0)
		rc = cli_job_element(c, q.id, index, &q.id);
	if (rc)
		goto out;
	if (q.follow)
		q.stream |= CLI_STREAM_UNBOUNDED;
	if (!raw && isatty(STDOUT_FILENO))
		q.stream |= CLI_STREAM_INERT;
	/* A job followed before it starts is waited for; --all needs to
	   know how many ranks it has. */
	if (q.follow || all) {
		rc = q.follow ? cli_wait_started(c, q.id, 0, &job) : 0;
		if (rc == CLI_EXIT_FAIL && job && !cli_json_int(job, "attempts"))
			fprintf(stderr, "kiln: job %lld ended (%s) without "
					"starting: no logs\n",
				(long long)q.id, cli_json_str(job, "state"));
		if (!rc && !job) {
			char *path = kn_asprintf("/v1/jobs/%lld", (long long)q.id);
			json_t *answer = NULL;

			rc = cli_get(c, path, &answer);
			job = rc ? NULL
				 : json_incref(json_object_get(answer, "job"));
			json_decref(answer);
			free(path);
		}
		if (rc)
			goto out;
	}
	if (!all) {
		rc = stream_rank(c, &q, task, false);
		goto out;
	}
	tasks = (int)cli_json_int(job, "tasks");
	rc = stream_all(ctx, c, &q, tasks);
out:
	json_decref(job);
	cli_client_free(c);
	return rc;
}
