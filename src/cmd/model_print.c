/*
 * What `kiln model show` and `kiln model aliases` print: a model's
 * versions, aliases and their moves; one version's signatures, files and
 * re-validation runs.
 */
#include <stdio.h>
#include <stdlib.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "cmd/model_cli.h"

void model_print_history(json_t *model)
{
	static const char *const headers[] = {"ALIAS", "ACTION", "FROM", "TO",
					      "BY", "WHEN", NULL};
	struct cli_table *t = cli_table_new(headers);
	int64_t now = kn_now_ms();
	json_t *h;
	size_t i;

	json_array_foreach(json_object_get(model, "alias_history"), i, h) {
		char when[80];
		cli_table_cell(t, cli_json_str(h, "alias"));
		cli_table_cell(t, cli_json_str(h, "action"));
		if (json_is_integer(json_object_get(h, "from")))
			cli_table_int(t, h, "from");
		else
			cli_table_cell(t, "-");
		cli_table_int(t, h, "version");
		cli_table_cell(t, cli_json_str(h, "by"));
		cli_format_when(cli_json_int(h, "time_ms"), now, when,
				sizeof(when));
		cli_table_cell(t, when);
	}
	cli_table_print(t, stdout, 0);
	cli_table_free(t);
}

void model_print(json_t *m)
{
	static const char *const headers[] = {"VERSION", "FILES", "SIZE",
					      "CREATED_BY", "CREATED", NULL};
	struct cli_table *t = cli_table_new(headers);
	int64_t now = kn_now_ms();
	json_t *v;
	size_t i;

	printf("model %s\n\n", cli_json_str(m, "name"));
	json_array_foreach(json_object_get(m, "versions"), i, v) {
		char size[32], when[80];
		kn_format_bytes(cli_json_int(v, "bytes"), size, sizeof(size));
		cli_format_when(cli_json_int(v, "created_at_ms"), now, when,
				sizeof(when));
		cli_table_int(t, v, "version");
		cli_table_int(t, v, "files");
		cli_table_cell(t, size);
		cli_table_cell(t, cli_json_str(v, "created_by"));
		cli_table_cell(t, when);
	}
	cli_table_print(t, stdout, 0);
	cli_table_free(t);
	printf("\naliases:");
	json_array_foreach(json_object_get(m, "aliases"), i, v)
		printf(" %s=%lld", cli_json_str(v, "alias"),
		       (long long)cli_json_int(v, "version"));
	printf(json_array_size(json_object_get(m, "aliases")) ? "\n" : " -\n");
	if (json_array_size(json_object_get(m, "alias_history"))) {
		printf("\nalias history:\n");
		model_print_history(m);
	}
}

/* A version's re-validation runs, oldest first. */
static void print_evaluations(json_t *list, int64_t now)
{
	static const char *const eh[] = {"WHEN", "ALIAS", "JOB", "OUTCOME",
					 "METRICS", "DETAIL", NULL};
	struct cli_table *t;
	json_t *it;
	size_t i;

	if (!json_array_size(list))
		return;
	printf("\nevaluations:\n");
	t = cli_table_new(eh);
	json_array_foreach(list, i, it) {
		char when[80], *metrics = NULL;
		json_t *m = json_object_get(it, "metrics");

		cli_format_when(cli_json_int(it, "time_ms"), now, when,
				sizeof(when));
		if (json_is_object(m))
			metrics = json_dumps(m, JSON_COMPACT | JSON_SORT_KEYS);
		cli_table_cell(t, when);
		cli_table_cell(t, cli_json_str(it, "alias"));
		if (json_is_integer(json_object_get(it, "job")))
			cli_table_int(t, it, "job");
		else
			cli_table_cell(t, "-");
		cli_table_cell(t, cli_json_str(it, "outcome"));
		cli_table_cell(t, metrics ? metrics : "-");
		cli_table_cell(t, cli_json_str(it, "detail"));
		free(metrics);
	}
	cli_table_print(t, stdout, 2);
	cli_table_free(t);
}

void model_print_version(json_t *v)
{
	static const char *const fh[] = {"PATH", "SIZE", "SHA256", NULL};
	static const char *const sh[] = {"KEY_ID", "SIGNED_BY", "SIGNED",
					 "TRUSTED", NULL};
	json_t *manifest = json_object_get(v, "manifest"), *it;
	struct cli_table *t;
	int64_t now = kn_now_ms();
	char when[80];
	size_t i;

	cli_format_when(cli_json_int(v, "created_at_ms"), now, when,
			sizeof(when));
	printf("model:    %s@%lld\n", cli_json_str(v, "name"),
	       (long long)cli_json_int(v, "version"));
	printf("created:  %s by %s\n", when, cli_json_str(v, "created_by"));
	printf("aliases: ");
	json_array_foreach(json_object_get(v, "aliases"), i, it)
		printf(" %s", json_string_value(it));
	printf(json_array_size(json_object_get(v, "aliases")) ? "\n" : " -\n");
	printf("trusted:  %s\n", json_is_true(json_object_get(v, "trusted"))
					 ? "yes (signed by a trusted key)"
					 : "no");
	printf("store:    %s\n\nsignatures:\n", cli_json_str(v, "store"));
	t = cli_table_new(sh);
	json_array_foreach(json_object_get(v, "signatures"), i, it) {
		cli_format_when(cli_json_int(it, "signed_at_ms"), now, when,
				sizeof(when));
		cli_table_cell(t, cli_json_str(it, "key_id"));
		cli_table_cell(t, cli_json_str(it, "signed_by"));
		cli_table_cell(t, when);
		cli_table_cell(t, json_is_true(json_object_get(it, "trusted"))
					  ? "yes"
					  : "no");
	}
	cli_table_print(t, stdout, 2);
	cli_table_free(t);
	printf("\nfiles:\n");
	t = cli_table_new(fh);
	json_array_foreach(json_object_get(manifest, "files"), i, it) {
		char size[32];
		kn_format_bytes(cli_json_int(it, "size"), size, sizeof(size));
		cli_table_cell(t, cli_json_str(it, "path"));
		cli_table_cell(t, size);
		cli_table_cell(t, cli_json_str(it, "sha256"));
	}
	cli_table_print(t, stdout, 2);
	cli_table_free(t);
	print_evaluations(json_object_get(v, "evaluations"), now);
}
