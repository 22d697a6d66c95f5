/*
 * kiln logs: a task's output, copied to stdout as it arrives. With -f the
 * request has no time limit: the server ends the stream when the task has
 * ended and its log is drained.
 *
 * A task's output is the task's to choose, so on a terminal it is shown
 * inert: escape sequences (clear the screen, set the window title, ...)
 * and other control characters but \n and \t appear escaped, as \x1b.
 * Into a pipe or a file the bytes pass unchanged, and --raw passes them
 * to a terminal too.
 */
#include <stdio.h>
#include <unistd.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "cmd/cli_client.h"

int cmd_logs(struct cli_ctx *ctx, int argc, char **argv)
{
	int task = 0, attempt = -1;
	bool follow = false, raw = false;
	const struct cli_flag flags[] = {
		{"raw", 0, CLI_FLAG_BOOL, &raw},
		{"task", 0, CLI_FLAG_COUNT, &task},
		{"attempt", 0, CLI_FLAG_COUNT, &attempt},
		{"follow", 'f', CLI_FLAG_BOOL, &follow},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	struct cli_client *c = NULL;
	const char *id_arg = NULL;
	struct kn_buf path;
	char number[24];
	unsigned stream = 0;
	int64_t id;
	int rc;

	kn_buf_init(&path, SIZE_MAX);
	rc = cli_parse(ctx, argc, argv, flags, "ID", &id_arg);
	if (rc != CLI_GO)
		goto out;
	rc = cli_parse_job_id(ctx, id_arg, &id);
	if (rc != CLI_GO)
		goto out;
	if (attempt == 0) {
		rc = cli_usage_error(ctx, "attempts are numbered from 1");
		goto out;
	}
	rc = cli_client_open(ctx, &c);
	if (rc)
		goto out;
	kn_buf_printf(&path, "/v1/jobs/%lld/logs", (long long)id);
	snprintf(number, sizeof(number), "%d", task);
	cli_query_add(&path, "task", number);
	if (attempt > 0) {
		snprintf(number, sizeof(number), "%d", attempt);
		cli_query_add(&path, "attempt", number);
	}
	if (follow) {
		cli_query_add(&path, "follow", "1");
		stream |= CLI_STREAM_UNBOUNDED;
	}
	if (!raw && isatty(STDOUT_FILENO))
		stream |= CLI_STREAM_INERT;
	rc = cli_stream(c, path.data, stdout, stream);
out:
	kn_buf_release(&path);
	cli_client_free(c);
	return rc;
}
