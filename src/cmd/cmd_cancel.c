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
	struct cli_client *c = NULL;
	struct job_ref *ids = NULL;
	size_t n_args = 0, n = 0;
	int rc;

	rc = job_select_parse(ctx, argc, argv, flags, &sel, args, &n_args);
	if (rc != CLI_GO)
		goto out;
	rc = cli_client_open(ctx, &c);
	if (rc)
		goto out;
	rc = job_select(ctx, c, &sel, args, n_args, &ids, &n);
	if (rc != CLI_GO)
		goto out;
	rc = job_select_act(c, ids, n, "cancel", "", "cancel requested");
out:
	free(ids);
	free(args);
	cli_client_free(c);
	return rc;
}
