/*
 * kiln token create | ls | revoke: API tokens, for admins.
 *
 * A new token's secret is printed alone on stdout, once, so it can be
 * piped into a file or a secret store; the note that it will not be shown
 * again goes to stderr where it cannot end up in that file.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "cmd/cli_client.h"

static cli_runner cmd_token;

const struct cli_command cmd_token_entry = {
	.name = "token",
	.run = cmd_token,
	.summary = "create, list and revoke API tokens",
	.help = "usage: kiln token create --name NAME --role ROLE\n"
		"       kiln token ls [-o json|table]\n"
		"       kiln token revoke NAME\n"
		"\n"
		"Manage API tokens (admins only). Roles: viewer (read), user (+ submit\n"
		"and cancel own jobs), operator (+ cancel any job, node operations),\n"
		"admin (+ tokens).\n"
		"\n"
		"  create  make a token; its secret is printed alone on standard\n"
		"          output, once: the server keeps only a hash\n"
		"  ls      list tokens: NAME ROLE CREATED_BY CREATED LAST_USED REVOKED\n"
		"  revoke  revoke the token named NAME; it stops working at once\n",
};

static const char *const roles[] = {
	"viewer", "user", "operator", "admin", NULL,
};

static int token_create(struct cli_ctx *ctx, int argc, char **argv)
{
	const char *name = NULL, *role = NULL;
	const struct cli_flag flags[] = {
		{"name", 0, CLI_FLAG_STRING, &name},
		{"role", 0, CLI_FLAG_STRING, &role},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	json_t *request;
	int rc;

	rc = cli_parse(ctx, argc, argv, flags, NULL, NULL);
	if (rc != CLI_GO)
		return rc;
	if (!name || !role)
		return cli_usage_error(ctx, "needs --name NAME and --role ROLE");
	rc = cli_check_choice(ctx, "role", "roles", role, roles);
	if (rc != CLI_GO)
		return rc;
	request = json_pack("{s:s, s:s}", "name", name, "role", role);
	rc = cli_create_secret(ctx, "/v1/tokens", request,
			       "the name must be UTF-8 text",
			       "token '%s' (role %s) created", name, role);
	json_decref(request);
	return rc;
}

static void token_row(struct cli_table *t, json_t *token, int64_t now)
{
	cli_table_cell(t, cli_json_str(token, "name"));
	cli_table_cell(t, cli_json_str(token, "role"));
	cli_table_cell(t, cli_json_str(token, "created_by"));
	cli_table_ago(t, token, "created_at_ms", now);
	cli_table_ago(t, token, "last_used_at_ms", now);
	cli_table_ago(t, token, "revoked_at_ms", now);
}

static int token_ls(struct cli_ctx *ctx, int argc, char **argv)
{
	static const char *const headers[] = {
		"NAME", "ROLE", "CREATED_BY", "CREATED", "LAST_USED", "REVOKED",
		NULL,
	};

	return cli_list_table(ctx, argc, argv, "/v1/tokens", "tokens", headers,
			      token_row);
}

static int token_revoke(struct cli_ctx *ctx, int argc, char **argv)
{
	return cli_delete_named(ctx, argc, argv, "/v1/tokens",
				"token '%s' revoked\n");
}

static int cmd_token(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct cli_verb verbs[] = {
		{"create", token_create},
		{"ls", token_ls},
		{"revoke", token_revoke},
		{NULL, NULL},
	};

	return cli_run_verb(ctx, argc, argv, verbs);
}
