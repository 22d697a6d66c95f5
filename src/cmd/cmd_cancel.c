/*
 * kiln cancel: cancel the jobs named, or those the filters match
 * (job_select), and say what the server answered for each.
 */
#include <stdio.h>
#include <stdlib.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "cmd/cli_client.h"
#include "cmd/job_select.h"

static cli_runner cmd_cancel;

const struct cli_command cmd_cancel_entry = {
	.name = "cancel",
	.run = cmd_cancel,
	.summary = "cancel jobs",
	.help = "usage: kiln cancel ID|ID[K]...\n"
		"       kiln cancel [--state S] [--name N] [--owner O] | --all [--yes]\n"
		"\n"
		"Ask the server to cancel the jobs named, or the queued and running\n"
		"jobs the filters match (the filters combine). A job array's ID\n"
		"cancels every element not ended; ID[K] element K alone. A queued job is\n"
		"cancelled at once; a running job's tasks are signalled and the job\n"
		"ends `cancelled`. One line per job; a job that cannot be cancelled\n"
		"is said on standard error and the others still are (exit 1).\n"
		"Users may cancel their own jobs; operators and admins any job.\n"
		"\n"
		"  --state S   the jobs in state S\n"
		"  --name N    the jobs named N\n"
		"  --owner O   the jobs submitted with the token named O\n"
		"  --all       every job not ended (asks first, at a terminal)\n"
		"  -y, --yes   no question for --all\n",
};

static int cmd_cancel(struct cli_ctx *ctx, int argc, char **argv)
{
	static const char *const not_ended[] = {"queued", "running", NULL};
	struct job_select sel = {.acting_states = not_ended,
				 .verb = "cancel"};
	const struct cli_flag flags[] = {
		JOB_SELECT_FLAGS(&sel),
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	const char **args = kn_xcalloc((size_t)argc, sizeof(char *));
	size_t n_args = 0;
	int rc;

	rc = job_select_parse(ctx, argc, argv, flags, &sel, args, &n_args);
	if (rc == CLI_GO)
		rc = job_select_run(ctx, &sel, args, n_args, "cancel", "",
				    "cancel requested");
	free(args);
	return rc;
}
