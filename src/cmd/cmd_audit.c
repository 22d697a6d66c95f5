/*
 * kiln audit: the audit log, newest first, filtered by the server
 * (`kiln audit` and `kiln audit ls` are the same list), and
 * `kiln audit verify`: the server recomputes the hash chain.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "cmd/cli_client.h"
#include "server/server.h"

static cli_runner cmd_audit;

const struct cli_command cmd_audit_entry = {
	.name = "audit",
	.run = cmd_audit,
	.summary = "list the audit log, newest first; verify its hash chain",
	.help = "usage: kiln audit [ls] [--actor A] [--action PREFIX] [--since WHEN]\n"
		"                  [--limit N] [-o json|table]\n"
		"       kiln audit verify [--home DIR] [-o json]\n"
		"\n"
		"kiln audit (or kiln audit ls) lists audit records, newest first:\n"
		"TIME ACTOR ROLE ACTION OBJECT OUTCOME. Every state-changing call is\n"
		"recorded (job.submit, job.cancel, token.create, key.create,\n"
		"backup.create, ...); requests refused for their role as `denied`.\n"
		"\n"
		"  --actor A          only records of the token named A\n"
		"  --action PREFIX    only actions starting with PREFIX (\"job.\")\n"
		"  --since WHEN       only records since WHEN: a duration back from\n"
		"                     now (30m, 2d) or a UTC time (2026-12-03T04:00Z)\n"
		"  --limit N          at most N records\n"
		"  -o json            print the server's JSON instead\n"
		"\n"
		"kiln audit verify (admin) has the server recompute the hash chain\n"
		"(docs/audit.md) and prints `audit log ok: N rows, head row ID HASH`,\n"
		"or the first bad row and what is wrong with it (edited, deleted,\n"
		"reordered, truncated, unchained) and exits 1. With --home DIR it\n"
		"checks that home's kiln.db, audit.key and audit.head itself, with no\n"
		"server (a stopped one, or a restored home).\n",
};

static int audit_ls(struct cli_ctx *ctx, int argc, char **argv)
{
	static const char *const headers[] = {
		"TIME", "ACTOR", "ROLE", "ACTION", "OBJECT", "OUTCOME", NULL,
	};
	const char *actor = NULL, *action = NULL, *since = NULL;
	int limit = -1;
	const struct cli_flag flags[] = {
		{"actor", 0, CLI_FLAG_STRING, &actor},
		{"action", 0, CLI_FLAG_STRING, &action},
		{"since", 0, CLI_FLAG_STRING, &since},
		{"limit", 0, CLI_FLAG_COUNT, &limit},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	struct cli_client *c = NULL;
	struct cli_table *t = NULL;
	struct kn_buf path;
	json_t *answer = NULL, *rows, *row;
	char when[40], number[24];
	int64_t since_ms = 0;
	size_t i;
	int rc;

	kn_buf_init(&path, SIZE_MAX);
	rc = cli_parse(ctx, argc, argv, flags, NULL, NULL);
	if (rc != CLI_GO)
		goto out;
	if (since && cli_parse_when(since, kn_now_ms(), &since_ms) < 0) {
		rc = cli_usage_error(ctx,
				     "--since: \"%s\" is neither a duration"
				     " (30m, 2d) nor a UTC time"
				     " (2026-12-03T04:00:00Z)",
				     since);
		goto out;
	}
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
	if (since) {
		snprintf(number, sizeof(number), "%lld",
			 (long long)(since_ms > 0 ? since_ms : 0));
		cli_query_add(&path, "since", number);
	}
	rc = cli_get_answer(ctx, c, path.data, &answer);
	if (rc != CLI_GO)
		goto out;
	rc = CLI_EXIT_OK;
	rows = json_object_get(answer, "audit");
	if (!json_array_size(rows)) {
		fputs(actor || action || since ? "no audit records match\n"
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
	cli_table_show(ctx, t, stdout, 0);
out:
	cli_table_free(t);
	json_decref(answer);
	kn_buf_release(&path);
	cli_client_free(c);
	return rc;
}

static int audit_verify(struct cli_ctx *ctx, int argc, char **argv)
{
	const char *home = NULL;
	const struct cli_flag flags[] = {
		{"home", 0, CLI_FLAG_STRING, &home},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	struct cli_client *c = NULL;
	struct kn_error err;
	json_t *answer = NULL, *head;
	char *text = NULL;
	bool ok;
	int rc;

	rc = cli_parse(ctx, argc, argv, flags, NULL, NULL);
	if (rc != CLI_GO)
		return rc;
	if (home) {
		/* No server: this process reads the home's files itself. */
		if (kn_server_audit_verify_home(home, &text, &err) < 0)
			return cli_fail(ctx, "%s", err.message);
		answer = json_loads(text, 0, NULL);
		free(text);
	} else {
		rc = cli_client_open(ctx, &c);
		if (rc)
			return rc;
		rc = cli_get(c, "/v1/audit/verify", &answer);
		if (rc)
			goto out;
	}
	ok = json_is_true(json_object_get(answer, "ok"));
	if (cli_want_json(ctx)) {
		cli_print_data(ctx, answer);
	} else if (ok) {
		head = json_object_get(answer, "head");
		printf("audit log ok: %lld rows, head row %lld %s\n",
		       (long long)cli_json_int(answer, "rows"),
		       (long long)cli_json_int(head, "id"),
		       cli_json_str(head, "hash"));
	} else {
		printf("audit log broken at row %lld (%s): %s\n",
		       (long long)cli_json_int(answer, "bad_row"),
		       cli_json_str(answer, "problem"),
		       cli_json_str(answer, "message"));
	}
	rc = ok ? CLI_EXIT_OK : CLI_EXIT_FAIL;
out:
	json_decref(answer);
	cli_client_free(c);
	return rc;
}

static int cmd_audit(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct cli_verb verbs[] = {
		{"ls", audit_ls},
		{"verify", audit_verify},
		{NULL, NULL},
	};

	/* Plain `kiln audit [flags]` stays the list it always was. */
	return cli_run_verb_or(ctx, argc, argv, verbs, audit_ls);
}
