/* kiln cancel: ask the server to cancel a job and say what it answered. */
#include <stdio.h>
#include <stdlib.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "cmd/cli_client.h"

int cmd_cancel(struct cli_ctx *ctx, int argc, char **argv)
{
	struct cli_client *c = NULL;
	const char *id_arg = NULL;
	char *path = NULL;
	char state[64];
	json_t *answer = NULL;
	int64_t id;
	int rc;

	rc = cli_parse(ctx, argc, argv, NULL, "ID", &id_arg);
	if (rc != CLI_GO)
		goto out;
	rc = cli_parse_job_id(ctx, id_arg, &id);
	if (rc != CLI_GO)
		goto out;
	rc = cli_client_open(ctx, &c);
	if (rc)
		goto out;
	path = kn_asprintf("/v1/jobs/%lld/cancel", (long long)id);
	rc = cli_call(c, "POST", path, NULL, NULL, 0, &answer);
	if (rc)
		goto out;
	cli_clean(state,
		  cli_json_str(json_object_get(answer, "job"), "state"),
		  sizeof(state));
	printf("job %lld: cancel requested (state %s)\n", (long long)id, state);
out:
	json_decref(answer);
	free(path);
	cli_client_free(c);
	return rc;
}
