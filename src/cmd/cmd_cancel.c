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

int cmd_cancel(struct cli_ctx *ctx, int argc, char **argv)
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
