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
#include "cmd/client.h"

static const char *const roles[] = {
	"viewer", "user", "operator", "admin", NULL,
};

static int check_role(const struct cli_ctx *ctx, const char *role)
{
	const char *near;
	size_t i;

	for (i = 0; roles[i]; i++)
		if (!strcmp(role, roles[i]))
			return CLI_GO;
	near = cli_closest(role, roles);
	if (near)
		return cli_usage_error(ctx, "no role '%s'; did you mean '%s'?",
				       role, near);
	return cli_usage_error(ctx,
			       "no role '%s'; roles are viewer, user, "
			       "operator and admin",
			       role);
}

static int token_create(struct cli_ctx *ctx, int argc, char **argv)
{
	const char *name = NULL, *role = NULL;
	const struct cli_flag flags[] = {
		{"name", 0, CLI_FLAG_STRING, &name},
		{"role", 0, CLI_FLAG_STRING, &role},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	struct cli_client *c = NULL;
	json_t *request = NULL, *answer = NULL;
	const char *secret;
	char *body = NULL;
	int rc;

	rc = cli_parse(ctx, argc, argv, flags, NULL, NULL);
	if (rc != CLI_GO)
		goto out;
	if (!name || !role) {
		rc = cli_usage_error(ctx, "needs --name NAME and --role ROLE");
		goto out;
	}
	rc = check_role(ctx, role);
	if (rc != CLI_GO)
		goto out;
	rc = cli_client_open(ctx, &c);
	if (rc)
		goto out;
	request = json_pack("{s:s, s:s}", "name", name, "role", role);
	body = request ? json_dumps(request, JSON_COMPACT) : NULL;
	if (!body) {
		/* json_pack refuses text that is not UTF-8. */
		rc = cli_usage_error(ctx, "the name must be UTF-8 text");
		goto out;
	}
	rc = cli_call(c, "POST", "/v1/tokens", "application/json", body,
		      strlen(body), &answer);
	if (rc)
		goto out;
	secret = json_string_value(json_object_get(answer, "secret"));
	if (!secret) {
		fputs("kiln: the server's answer has no secret\n", stderr);
		rc = CLI_EXIT_FAIL;
		goto out;
	}
	printf("%s\n", secret);
	fflush(stdout);
	fprintf(stderr,
		"token '%s' (role %s) created; keep the secret above: it will "
		"not be shown again\n",
		name, role);
out:
	free(body);
	json_decref(request);
	json_decref(answer);
	cli_client_free(c);
	return rc;
}

static int token_ls(struct cli_ctx *ctx, int argc, char **argv)
{
	static const char *const headers[] = {
		"NAME", "ROLE", "CREATED_BY", "CREATED", "LAST_USED", "REVOKED",
		NULL,
	};
	struct cli_client *c = NULL;
	struct cli_table *t = NULL;
	json_t *answer = NULL, *tokens, *token;
	int64_t now = kn_now_ms();
	char ago[32];
	size_t i;
	int rc;

	rc = cli_parse(ctx, argc, argv, NULL, NULL, NULL);
	if (rc != CLI_GO)
		goto out;
	rc = cli_client_open(ctx, &c);
	if (rc)
		goto out;
	rc = cli_get(c, "/v1/tokens", &answer);
	if (rc)
		goto out;
	if (cli_want_json(ctx)) {
		cli_print_json(answer);
		goto out;
	}
	tokens = json_object_get(answer, "tokens");
	t = cli_table_new(headers);
	json_array_foreach(tokens, i, token) {
		cli_table_cell(t, cli_json_str(token, "name"));
		cli_table_cell(t, cli_json_str(token, "role"));
		cli_table_cell(t, cli_json_str(token, "created_by"));
		kn_format_ago(cli_json_int(token, "created_at_ms"), now, ago,
			      sizeof(ago));
		cli_table_cell(t, ago);
		kn_format_ago(cli_json_int(token, "last_used_at_ms"), now, ago,
			      sizeof(ago));
		cli_table_cell(t, ago);
		kn_format_ago(cli_json_int(token, "revoked_at_ms"), now, ago,
			      sizeof(ago));
		cli_table_cell(t, ago);
	}
	cli_table_print(t, stdout, 0);
out:
	cli_table_free(t);
	json_decref(answer);
	cli_client_free(c);
	return rc;
}

static int token_revoke(struct cli_ctx *ctx, int argc, char **argv)
{
	struct cli_client *c = NULL;
	const char *name = NULL;
	struct kn_buf path;
	int rc;

	kn_buf_init(&path, SIZE_MAX);
	rc = cli_parse(ctx, argc, argv, NULL, "NAME", &name);
	if (rc != CLI_GO)
		goto out;
	rc = cli_client_open(ctx, &c);
	if (rc)
		goto out;
	kn_buf_printf(&path, "/v1/tokens");
	cli_path_add(&path, name);
	rc = cli_call(c, "DELETE", path.data, NULL, NULL, 0, NULL);
	if (rc)
		goto out;
	printf("token '%s' revoked\n", name);
out:
	kn_buf_release(&path);
	cli_client_free(c);
	return rc;
}

int cmd_token(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*run)(struct cli_ctx *ctx, int argc, char **argv);
	} subs[] = {
		{"create", token_create},
		{"ls", token_ls},
		{"revoke", token_revoke},
	};
	static const char *const names[] = {"create", "ls", "revoke", NULL};
	const char *near;
	int i;

	/* Global flags may come before the verb: kiln token -o json ls. */
	for (i = 1; i < argc && argv[i][0] == '-' && argv[i][1]; i++) {
		int rc;

		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			fputs(ctx->cmd->help, stdout);
			return CLI_EXIT_OK;
		}
		rc = cli_take_flag(ctx, NULL, argc, argv, &i);
		if (rc != CLI_GO)
			return rc;
	}
	if (i == argc)
		return cli_usage_error(ctx,
				       "missing what to do: create, ls or revoke");
	for (size_t s = 0; s < sizeof(subs) / sizeof(subs[0]); s++) {
		if (strcmp(argv[i], subs[s].name))
			continue;
		snprintf(ctx->prog, sizeof(ctx->prog), "kiln token %s",
			 subs[s].name);
		return subs[s].run(ctx, argc - i, argv + i);
	}
	near = cli_closest(argv[i], names);
	if (near)
		return cli_usage_error(ctx, "no '%s'; did you mean '%s'?",
				       argv[i], near);
	return cli_usage_error(ctx, "no '%s'; choose create, ls or revoke",
			       argv[i]);
}
