/*
 * kiln key create | ls | revoke: gateway keys, for operators.
 *
 * Like `kiln token create`, the new key's secret is printed alone on
 * stdout, once; the reminder that it will not be shown again goes to
 * stderr. The server keeps only its sha256.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "cmd/cli_client.h"

static cli_runner cmd_key;

const struct cli_command cmd_key_entry = {
	.name = "key",
	.run = cmd_key,
	.summary = "create, list and revoke gateway keys",
	.help = "usage: kiln key create --name NAME --deployments A[,B...] [--rpm N]\n"
		"                       [--tpm N] [--quota-day N] [--quota-month N]\n"
		"       kiln key ls [-o json|table]\n"
		"       kiln key revoke NAME\n"
		"\n"
		"Manage the keys `kiln gateway` accepts (operators and admins). A key\n"
		"reaches only the deployments it names; 0 or no flag means no limit.\n"
		"\n"
		"  create  make a key (kgw_...); its secret is printed alone on\n"
		"          standard output, once: the server keeps only its sha256\n"
		"          --rpm N          requests per minute\n"
		"          --tpm N          tokens per minute\n"
		"          --quota-day N    tokens per day\n"
		"          --quota-month N  tokens per month\n"
		"  ls      list active keys: NAME DEPLOYMENTS RPM TPM QUOTA_DAY\n"
		"          QUOTA_MONTH CREATED_BY CREATED\n"
		"  revoke  revoke the key named NAME\n",
};

/* A limit flag: absent = 0 (none); else a whole number. */
static int limit_value(const struct cli_ctx *ctx, const char *flag,
		       const char *text, json_int_t *out)
{
	char *end;
	long long v;

	*out = 0;
	if (!text)
		return CLI_GO;
	v = strtoll(text, &end, 10);
	if (*end || end == text || v < 0)
		return cli_usage_error(ctx, "--%s must be a whole number >= 0 "
				       "(0 = no limit); got '%s'", flag, text);
	*out = v;
	return CLI_GO;
}

static int key_create(struct cli_ctx *ctx, int argc, char **argv)
{
	const char *name = NULL, *deps = NULL, *rpm = NULL, *tpm = NULL,
		   *day = NULL, *month = NULL;
	const struct cli_flag flags[] = {
		{"name", 0, CLI_FLAG_STRING, &name},
		{"deployments", 0, CLI_FLAG_STRING, &deps},
		{"rpm", 0, CLI_FLAG_STRING, &rpm},
		{"tpm", 0, CLI_FLAG_STRING, &tpm},
		{"quota-day", 0, CLI_FLAG_STRING, &day},
		{"quota-month", 0, CLI_FLAG_STRING, &month},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	json_t *request = NULL, *list;
	json_int_t v_rpm, v_tpm, v_day, v_month;
	char *copy = NULL, *item, *save = NULL;
	int rc;

	rc = cli_parse(ctx, argc, argv, flags, NULL, NULL);
	if (rc != CLI_GO)
		goto out;
	if (!name || !deps) {
		rc = cli_usage_error(ctx, "needs --name NAME and --deployments "
				     "A[,B...]");
		goto out;
	}
	rc = limit_value(ctx, "rpm", rpm, &v_rpm);
	if (rc == CLI_GO)
		rc = limit_value(ctx, "tpm", tpm, &v_tpm);
	if (rc == CLI_GO)
		rc = limit_value(ctx, "quota-day", day, &v_day);
	if (rc == CLI_GO)
		rc = limit_value(ctx, "quota-month", month, &v_month);
	if (rc != CLI_GO)
		goto out;
	list = json_array();
	copy = kn_xstrdup(deps);
	for (item = strtok_r(copy, ",", &save); item;
	     item = strtok_r(NULL, ",", &save))
		json_array_append_new(list, json_string(item));
	request = json_pack("{s:s, s:o, s:I, s:I, s:I, s:I}", "name", name,
			    "deployments", list, "rpm", v_rpm, "tpm", v_tpm,
			    "quota_day", v_day, "quota_month", v_month);
	rc = cli_create_secret(ctx, "/v1/keys", request,
			       "names must be UTF-8 text",
			       "gateway key '%s' created for %s", name, deps);
out:
	free(copy);
	json_decref(request);
	return rc;
}

static void limit_cell(struct cli_table *t, json_t *key, const char *field)
{
	int64_t v = cli_json_int(key, field);

	if (v)
		cli_table_cellf(t, "%lld", (long long)v);
	else
		cli_table_cell(t, "-");
}

static void key_row(struct cli_table *t, json_t *key, int64_t now)
{
	cli_table_cell(t, cli_json_str(key, "name"));
	cli_table_list(t, key, "deployments", "-");
	limit_cell(t, key, "rpm");
	limit_cell(t, key, "tpm");
	limit_cell(t, key, "quota_day");
	limit_cell(t, key, "quota_month");
	cli_table_cell(t, cli_json_str(key, "created_by"));
	cli_table_ago(t, key, "created_at_ms", now);
}

static int key_ls(struct cli_ctx *ctx, int argc, char **argv)
{
	static const char *const headers[] = {
		"NAME", "DEPLOYMENTS", "RPM", "TPM", "QUOTA_DAY", "QUOTA_MONTH",
		"CREATED_BY", "CREATED", NULL,
	};

	return cli_list_table(ctx, argc, argv, "/v1/keys", "keys", headers,
			      key_row);
}

static int key_revoke(struct cli_ctx *ctx, int argc, char **argv)
{
	return cli_delete_named(ctx, argc, argv, "/v1/keys",
				"gateway key '%s' revoked\n");
}

static int cmd_key(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct cli_verb verbs[] = {
		{"create", key_create},
		{"ls", key_ls},
		{"revoke", key_revoke},
		{NULL, NULL},
	};

	return cli_run_verb(ctx, argc, argv, verbs);
}
