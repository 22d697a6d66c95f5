/*
 * kiln model revalidate NAME [--alias A --job SPEC --every DUR ...]:
 * the model's scheduled re-validations, set, listed and run now
 * (docs/registry.md).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "cmd/cli_client.h"
#include "cmd/model_cli.h"
#include "registry/registry.h"

/* kiln model revalidate NAME: the model's re-validations and who set them. */
static int revalidations_print(struct cli_ctx *ctx, struct cli_client *c,
			       const char *name)
{
	static const char *const headers[] = {
		"ALIAS", "EVERY", "THRESHOLDS", "ROLLBACK", "SOURCE", NULL,
	};
	char *path = model_path(name, "/revalidation");
	json_t *answer = NULL, *list, *r;
	struct cli_table *t;
	size_t i;
	int rc = cli_get(c, path, &answer);

	free(path);
	if (rc)
		return rc;
	list = json_object_get(answer, "revalidations");
	if (cli_want_json(ctx)) {
		cli_print_data(ctx, list);
		json_decref(answer);
		return 0;
	}
	t = cli_table_new(headers);
	json_array_foreach(list, i, r) {
		char every[32], *limits;
		json_t *dep = json_object_get(r, "deployment");

		kn_format_duration(cli_json_int(r, "every_ms"), every,
				   sizeof(every));
		limits = json_dumps(json_object_get(r, "thresholds"),
				    JSON_COMPACT | JSON_SORT_KEYS);
		cli_table_cell(t, cli_json_str(r, "alias"));
		cli_table_cell(t, every);
		cli_table_cell(t, limits);
		cli_table_cell(t, json_is_true(json_object_get(r, "rollback"))
					  ? "yes"
					  : "no");
		if (json_is_string(dep))
			cli_table_cell(t, cli_json_str(r, "source"));
		else
			cli_table_cellf(t, "by hand (%s)",
					cli_json_str(r, "owner"));
		free(limits);
	}
	cli_table_show(ctx, t, stdout, 0);
	cli_table_free(t);
	json_decref(answer);
	return 0;
}

/*
 * kiln model revalidate NAME --alias A --job FILE --every DUR --max M=N
 * [--min M=N] [--rollback], or NAME --alias A --now, or NAME alone (the
 * list). --max and --min may repeat, so this command reads its own flags.
 */
int model_revalidate(struct cli_ctx *ctx, int argc, char **argv)
{
	const char *alias = NULL, *job = NULL, *every = NULL, *name = NULL,
		   *spec_name = NULL;
	bool now = false, rollback = false;
	const struct cli_flag flags[] = {
		{"alias", 0, CLI_FLAG_STRING, &alias},
		{"job", 0, CLI_FLAG_STRING, &job},
		{"every", 0, CLI_FLAG_STRING, &every},
		{"now", 0, CLI_FLAG_BOOL, &now},
		{"rollback", 0, CLI_FLAG_BOOL, &rollback},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	struct cli_client *c = NULL;
	struct kn_error err;
	json_t *thresholds = json_object(), *req = NULL, *answer = NULL;
	char *path = NULL, *text = NULL, *abs = NULL;
	size_t len;
	int rc = CLI_GO;

	for (int i = 1; rc == CLI_GO && i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			fputs(ctx->cmd->help, stdout);
			rc = CLI_EXIT_OK;
		} else if (!strcmp(argv[i], "--max") ||
			   !strcmp(argv[i], "--min")) {
			if (i + 1 >= argc)
				rc = cli_usage_error(ctx, "%s needs METRIC=N",
						     argv[i]);
			else if (kn_model_threshold_add(thresholds, argv[i] + 2,
							argv[i + 1], &err) < 0)
				rc = cli_usage_error(ctx, "%s", err.message);
			i++;
		} else if (argv[i][0] == '-' && argv[i][1]) {
			rc = cli_take_flag(ctx, flags, argc, argv, &i);
		} else if (!name) {
			name = argv[i];
		} else {
			rc = cli_usage_error(ctx, "too many arguments");
		}
	}
	if (rc == CLI_GO && name && !alias && !job && !every && !now &&
	    !rollback && !json_object_size(thresholds)) {
		rc = cli_check_output(ctx);
		if (rc == CLI_GO && kn_model_name_ok(name))
			rc = cli_client_open(ctx, &c);
		else if (rc == CLI_GO)
			rc = cli_usage_error(ctx, "\"%s\" is not a model name",
					     name);
		if (rc == 0)
			rc = revalidations_print(ctx, c, name);
		goto out;
	}
	if (rc == CLI_GO && (!name || !alias))
		rc = cli_usage_error(ctx, "usage: %s revalidate NAME [--alias "
				     "ALIAS (--job FILE --every DURATION --max "
				     "METRIC=N ... | --now)]", ctx->prog);
	if (rc == CLI_GO && !kn_model_name_ok(name))
		rc = cli_usage_error(ctx, "\"%s\" is not a model name", name);
	if (rc == CLI_GO && !now && (!job || !every))
		rc = cli_usage_error(ctx, "--job FILE and --every DURATION are "
				     "needed (or --now to run it at once)");
	if (rc == CLI_GO && now && (job || every || rollback ||
				    json_object_size(thresholds)))
		rc = cli_usage_error(ctx, "--now runs the re-validation already "
				     "set; it takes no other flag but --alias");
	if (rc == CLI_GO)
		rc = cli_check_output(ctx);
	if (rc == CLI_GO && job)
		rc = cli_read_spec(ctx, job, &text, &len, &spec_name);
	if (rc != CLI_GO)
		goto out;
	if (now) {
		req = json_pack("{s:s}", "alias", alias);
		path = model_path(name, "/revalidation/run");
	} else {
		/* The absolute path, so the spec's workdir resolves as for a
		   job submitted from here. */
		abs = strcmp(job, "-") ? realpath(job, NULL) : NULL;
		req = json_pack("{s:s, s:s, s:s, s:s, s:O, s:b}", "alias", alias,
				"job", text, "filename", abs ? abs : spec_name,
				"every", every, "thresholds", thresholds,
				"rollback", rollback);
		path = model_path(name, "/revalidation");
	}
	rc = cli_client_open(ctx, &c);
	if (!rc)
		rc = cli_post_json(c, path, req, &answer);
	if (!rc && cli_want_json(ctx))
		cli_print_data(ctx, answer);
	else if (!rc && now)
		printf("%lld\n", (long long)cli_json_int(answer, "job"));
	else if (!rc)
		fprintf(stderr, "%s@%s: re-validated every %s\n", name, alias,
			every);
out:
	KN_FREE_ALL(abs, text, path);
	json_decref(thresholds);
	json_decref(req);
	json_decref(answer);
	cli_client_free(c);
	return rc;
}

