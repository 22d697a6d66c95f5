/*
 * kiln evict: preempt a running job through its checkpoint path; and the
 * node verbs drain, cordon and uncordon, which share its shape (one POST,
 * one line of answer).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "cmd/client.h"

int cmd_evict(struct cli_ctx *ctx, int argc, char **argv)
{
	const char *grace = NULL, *reason = NULL;
	const struct cli_flag flags[] = {
		{"grace", 0, CLI_FLAG_STRING, &grace},
		{"reason", 0, CLI_FLAG_STRING, &reason},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	struct cli_client *c = NULL;
	const char *id_arg = NULL;
	struct kn_buf path;
	char state[64];
	json_t *answer = NULL;
	int64_t id, ms;
	int rc;

	kn_buf_init(&path, SIZE_MAX);
	rc = cli_parse(ctx, argc, argv, flags, "ID", &id_arg);
	if (rc != CLI_GO)
		goto out;
	rc = cli_parse_job_id(ctx, id_arg, &id);
	if (rc != CLI_GO)
		goto out;
	if (grace && kn_parse_duration(grace, &ms) < 0) {
		rc = cli_usage_error(ctx, "--grace: \"%s\" is not a duration "
				     "(e.g. 30s)", grace);
		goto out;
	}
	rc = cli_client_open(ctx, &c);
	if (rc)
		goto out;
	kn_buf_printf(&path, "/v1/jobs/%lld/evict", (long long)id);
	if (grace)
		cli_query_add(&path, "grace", grace);
	if (reason)
		cli_query_add(&path, "reason", reason);
	rc = cli_call(c, "POST", path.data, NULL, NULL, 0, &answer);
	if (rc)
		goto out;
	cli_clean(state,
		  cli_json_str(json_object_get(answer, "job"), "state"),
		  sizeof(state));
	printf("job %lld: eviction started (state %s); it returns to the "
	       "queue when its tasks have stopped\n", (long long)id, state);
out:
	json_decref(answer);
	kn_buf_release(&path);
	cli_client_free(c);
	return rc;
}

static int node_verb(struct cli_ctx *ctx, int argc, char **argv,
		     const char *verb)
{
	const char *reason = NULL;
	const struct cli_flag flags[] = {
		{"reason", 0, CLI_FLAG_STRING, &reason},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	struct cli_client *c = NULL;
	const char *name = NULL;
	struct kn_buf path;
	char state[64];
	json_t *answer = NULL;
	int rc;

	kn_buf_init(&path, SIZE_MAX);
	rc = cli_parse(ctx, argc, argv, flags, "NODE", &name);
	if (rc != CLI_GO)
		goto out;
	rc = cli_client_open(ctx, &c);
	if (rc)
		goto out;
	kn_buf_printf(&path, "/v1/nodes");
	cli_path_add(&path, name);
	kn_buf_printf(&path, "/%s", verb);
	if (reason)
		cli_query_add(&path, "reason", reason);
	rc = cli_call(c, "POST", path.data, NULL, NULL, 0, &answer);
	if (rc)
		goto out;
	cli_clean(state,
		  cli_json_str(json_object_get(answer, "node"), "state"),
		  sizeof(state));
	printf("node %s: %s\n", name, state);
out:
	json_decref(answer);
	kn_buf_release(&path);
	cli_client_free(c);
	return rc;
}

int cmd_drain(struct cli_ctx *ctx, int argc, char **argv)
{
	return node_verb(ctx, argc, argv, "drain");
}

int cmd_cordon(struct cli_ctx *ctx, int argc, char **argv)
{
	return node_verb(ctx, argc, argv, "cordon");
}

int cmd_uncordon(struct cli_ctx *ctx, int argc, char **argv)
{
	return node_verb(ctx, argc, argv, "uncordon");
}
