/* kiln audit: the audit log, newest first, filtered by the server. */
#include <stdio.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "cmd/client.h"

int cmd_audit(struct cli_ctx *ctx, int argc, char **argv)
{
	static const char *const headers[] = {
		"TIME", "ACTOR", "ROLE", "ACTION", "OBJECT", "OUTCOME", NULL,
	};
	const char *actor = NULL, *action = NULL;
	int limit = -1;
	const struct cli_flag flags[] = {
		{"actor", 0, CLI_FLAG_STRING, &actor},
		{"action", 0, CLI_FLAG_STRING, &action},
		{"limit", 0, CLI_FLAG_COUNT, &limit},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	struct cli_client *c = NULL;
	struct cli_table *t = NULL;
	struct kn_buf path;
	json_t *answer = NULL, *rows, *row;
	char when[40], number[24];
	size_t i;
	int rc;

	kn_buf_init(&path, SIZE_MAX);
	rc = cli_parse(ctx, argc, argv, flags, NULL, NULL);
	if (rc != CLI_GO)
		goto out;
	rc = cli_client_open(ctx, &c);
	if (rc)
		goto out;
	kn_buf_printf(&path, "/v1/audit");
	cli_query_add(&path, "actor", actor);
	cli_query_add(&path, "action", action);
	if (limit >= 0) {
		snprintf(number, sizeof(number), "%d", limit);
		cli_query_add(&path, "limit", number);
	}
	rc = cli_get(c, path.data, &answer);
	if (rc)
		goto out;
	if (cli_want_json(ctx)) {
		cli_print_json(answer);
		goto out;
	}
	rows = json_object_get(answer, "audit");
	if (!json_array_size(rows)) {
		fputs(actor || action ? "no audit records match\n"
				      : "no audit records\n",
		      stderr);
		goto out;
	}
	t = cli_table_new(headers);
	json_array_foreach(rows, i, row) {
		kn_format_time(cli_json_int(row, "time_ms"), when,
			       sizeof(when));
		cli_table_cell(t, when);
		cli_table_cell(t, cli_json_str(row, "actor"));
		cli_table_cell(t, cli_json_str(row, "role"));
		cli_table_cell(t, cli_json_str(row, "action"));
		cli_table_cell(t, cli_json_str(row, "object"));
		cli_table_cell(t, cli_json_str(row, "outcome"));
	}
	cli_table_print(t, stdout, 0);
out:
	cli_table_free(t);
	json_decref(answer);
	kn_buf_release(&path);
	cli_client_free(c);
	return rc;
}
