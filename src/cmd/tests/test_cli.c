/*
 * Unit tests for the CLI's shared pieces: the flag parser, the table
 * printer, text cleaning and truncation, number formatting, URL building.
 * The commands themselves are checked end to end against a server.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/tests/testmain.h"
#include "cmd/cli.h"
#include "cmd/cli_client.h"

static const struct cli_command test_cmd = {
	"ls", NULL, NULL, "list", "usage: kiln ls\n", false,
};

static void new_ctx(struct cli_ctx *ctx)
{
	memset(ctx, 0, sizeof(*ctx));
	ctx->cmd = &test_cmd;
	snprintf(ctx->prog, sizeof(ctx->prog), "kiln ls");
}

static void test_parse_flags(void **state)
{
	char *argv[] = {"ls", "--state", "queued", "--owner=alice", "-f",
			"--limit", "12", "7", NULL};
	const char *st = NULL, *owner = NULL, *pos = NULL;
	bool follow = false;
	int limit = -1;
	const struct cli_flag flags[] = {
		{"state", 0, CLI_FLAG_STRING, &st},
		{"owner", 0, CLI_FLAG_STRING, &owner},
		{"follow", 'f', CLI_FLAG_BOOL, &follow},
		{"limit", 0, CLI_FLAG_COUNT, &limit},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	struct cli_ctx ctx;

	(void)state;
	new_ctx(&ctx);
	assert_int_equal(cli_parse(&ctx, 8, argv, flags, "ID", &pos), CLI_GO);
	assert_string_equal(st, "queued");
	assert_string_equal(owner, "alice");
	assert_true(follow);
	assert_int_equal(limit, 12);
	assert_string_equal(pos, "7");
	assert_string_equal(ctx.output, "table");
}

static void test_parse_list_flag(void **state)
{
	char *argv[] = {"submit", "--env", "A=1", "f.yaml", "--env=B=2", NULL};
	struct cli_list env = {0};
	const char *pos = NULL;
	const struct cli_flag flags[] = {
		{"env", 0, CLI_FLAG_LIST, &env},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	struct cli_ctx ctx;

	(void)state;
	new_ctx(&ctx);
	assert_int_equal(cli_parse(&ctx, 5, argv, flags, "FILE", &pos), CLI_GO);
	assert_int_equal(env.n, 2);
	assert_string_equal(env.v[0], "A=1");
	assert_string_equal(env.v[1], "B=2");
	assert_string_equal(pos, "f.yaml");
	free(env.v);
}

static void test_parse_globals_anywhere(void **state)
{
	char *argv[] = {"ls", "-o", "json", "--server", "http://h:1",
			"--token=t", "--", "--not-a-flag", NULL};
	const char *pos = NULL;
	struct cli_ctx ctx;

	(void)state;
	new_ctx(&ctx);
	assert_int_equal(cli_parse(&ctx, 8, argv, NULL, "ARG", &pos), CLI_GO);
	assert_true(cli_want_json(&ctx));
	assert_string_equal(ctx.server, "http://h:1");
	assert_string_equal(ctx.token, "t");
	assert_string_equal(pos, "--not-a-flag");
}

static void test_parse_value_that_looks_global(void **state)
{
	/* A command's flag value stays a value even if it reads "--token". */
	char *argv[] = {"audit", "--actor", "--token", NULL};
	const char *actor = NULL;
	const struct cli_flag flags[] = {
		{"actor", 0, CLI_FLAG_STRING, &actor},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	struct cli_ctx ctx;

	(void)state;
	new_ctx(&ctx);
	assert_int_equal(cli_parse(&ctx, 3, argv, flags, NULL, NULL), CLI_GO);
	assert_string_equal(actor, "--token");
	assert_null(ctx.token);
}

static void test_parse_errors(void **state)
{
	static char *unknown[] = {"ls", "--sate", "x", NULL};
	static char *no_value[] = {"ls", "--state", NULL};
	static char *bool_value[] = {"ls", "--all=yes", NULL};
	static char *bad_count[] = {"ls", "--limit", "-3", NULL};
	static char *extra[] = {"ls", "a", "b", NULL};
	static char *missing[] = {"ls", NULL};
	static char *bad_output[] = {"ls", "-o", "xml", NULL};
	static char *help[] = {"ls", "--help", NULL};
	const char *st = NULL, *pos = NULL;
	bool all = false;
	int limit = -1;
	const struct cli_flag flags[] = {
		{"state", 0, CLI_FLAG_STRING, &st},
		{"all", 0, CLI_FLAG_BOOL, &all},
		{"limit", 0, CLI_FLAG_COUNT, &limit},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	struct cli_ctx ctx;

	(void)state;
	new_ctx(&ctx);
	assert_int_equal(cli_parse(&ctx, 3, unknown, flags, NULL, NULL),
			 CLI_EXIT_USAGE);
	assert_int_equal(cli_parse(&ctx, 2, no_value, flags, NULL, NULL),
			 CLI_EXIT_USAGE);
	assert_int_equal(cli_parse(&ctx, 2, bool_value, flags, NULL, NULL),
			 CLI_EXIT_USAGE);
	assert_int_equal(cli_parse(&ctx, 3, bad_count, flags, NULL, NULL),
			 CLI_EXIT_USAGE);
	assert_int_equal(cli_parse(&ctx, 3, extra, flags, "ID", &pos),
			 CLI_EXIT_USAGE);
	assert_int_equal(cli_parse(&ctx, 1, missing, flags, "ID", &pos),
			 CLI_EXIT_USAGE);
	assert_int_equal(cli_parse(&ctx, 3, bad_output, flags, NULL, NULL),
			 CLI_EXIT_USAGE);
	assert_int_equal(cli_parse(&ctx, 2, help, flags, NULL, NULL),
			 CLI_EXIT_OK);
}

static void test_closest(void **state)
{
	static const char *const names[] = {"state", "owner", "all", NULL};

	(void)state;
	assert_string_equal(cli_closest("sate", names), "state");
	assert_string_equal(cli_closest("ownr", names), "owner");
	assert_null(cli_closest("zzzzzz", names));
	/* One letter is too short to guess from. */
	assert_null(cli_closest("a", names));
}

static void test_check_choice(void **state)
{
	static const char *const names[] = {"state", "owner", "all", NULL};
	struct cli_ctx ctx;

	(void)state;
	new_ctx(&ctx);
	assert_int_equal(cli_check_choice(&ctx, "field", "fields", "all", names),
			 CLI_GO);
	assert_int_equal(cli_check_choice(&ctx, "field", "fields", "sate",
					  names),
			 CLI_EXIT_USAGE);
	assert_int_equal(cli_check_choice(&ctx, "field", "fields", "al", names),
			 CLI_EXIT_USAGE);
}

static void test_split_list(void **state)
{
	static const struct {
		const char *arg;
		bool paths;
		int rc;
		size_t n;
	} cases[] = {
		{"/a,/b,/c", true, CLI_GO, 3}, {"a,b,c", false, CLI_GO, 3},
		{"/a", true, CLI_GO, 1},       {"a,b", true, CLI_EXIT_USAGE, 0},
		{"a,,b", false, CLI_EXIT_USAGE, 0},
		{"/a,", true, CLI_EXIT_USAGE, 0},
		{"", false, CLI_EXIT_USAGE, 0},
		/* One more than the room for max - 1 items. */
		{"a,b,c,d", false, CLI_EXIT_USAGE, 0},
	};
	struct cli_ctx ctx;

	(void)state;
	new_ctx(&ctx);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *items[4];
		char *buf = NULL;
		size_t n = 0;
		int rc = cli_split_list(&ctx, "dir", cases[i].arg,
					cases[i].paths, &buf, items, 4);

		while (rc == CLI_GO && items[n])
			n++;
		if (rc != cases[i].rc || n != cases[i].n)
			fail_msg("case %zu (%s): rc %d, %zu items", i,
				 cases[i].arg, rc, n);
		free(buf);
	}
}

static void test_job_id(void **state)
{
	struct cli_ctx ctx;
	int64_t id = 0;

	(void)state;
	new_ctx(&ctx);
	assert_int_equal(cli_parse_job_id(&ctx, "42", &id), CLI_GO);
	assert_int_equal(id, 42);
	assert_int_equal(cli_parse_job_id(&ctx, "0", &id), CLI_EXIT_USAGE);
	assert_int_equal(cli_parse_job_id(&ctx, "-1", &id), CLI_EXIT_USAGE);
	assert_int_equal(cli_parse_job_id(&ctx, "7x", &id), CLI_EXIT_USAGE);
	assert_int_equal(cli_parse_job_id(&ctx, "", &id), CLI_EXIT_USAGE);
	assert_int_equal(id, 42);
}

static void test_clean(void **state)
{
	char buf[64];
	char small[5];

	(void)state;
	cli_clean(buf, "a\nb\x1b[31mc\x7f\xc2\x9b\xff\\", sizeof(buf));
	assert_string_equal(buf, "a\\nb\\x1b[31mc\\x7f\\u009b\\xff\\\\");
	/* "aé" is 3 bytes; a 4-byte buffer must not keep half of "é". */
	cli_clean(small, "abé", 4);
	assert_string_equal(small, "ab");
	cli_clean(small, "aé", 4);
	assert_string_equal(small, "aé");
}

static void test_formats(void **state)
{
	char buf[64];
	json_t *v;

	(void)state;
	cli_format_milli(1000, buf, sizeof(buf));
	assert_string_equal(buf, "1.0");
	cli_format_milli(500, buf, sizeof(buf));
	assert_string_equal(buf, "0.5");
	cli_format_milli(125, buf, sizeof(buf));
	assert_string_equal(buf, "0.125");
	cli_format_milli(2250, buf, sizeof(buf));
	assert_string_equal(buf, "2.25");

	v = json_integer(2);
	cli_format_gpus(v, buf, sizeof(buf));
	assert_string_equal(buf, "2");
	json_decref(v);
	v = json_real(0.5);
	cli_format_gpus(v, buf, sizeof(buf));
	assert_string_equal(buf, "0.5");
	json_decref(v);
	v = json_real(1.0);
	cli_format_gpus(v, buf, sizeof(buf));
	assert_string_equal(buf, "1");
	json_decref(v);
	v = json_string("mig:1g.10gb");
	cli_format_gpus(v, buf, sizeof(buf));
	assert_string_equal(buf, "mig:1g.10gb");
	json_decref(v);
	cli_format_gpus(NULL, buf, sizeof(buf));
	assert_string_equal(buf, "0");

	cli_format_ran(0, 0, 5000, buf, sizeof(buf));
	assert_string_equal(buf, "-");
	cli_format_ran(1000, 13000, 99999, buf, sizeof(buf));
	assert_string_equal(buf, "12s");
	cli_format_ran(1000, 0, 61000, buf, sizeof(buf));
	assert_string_equal(buf, "1m0s");
	cli_format_when(0, 1000, buf, sizeof(buf));
	assert_string_equal(buf, "-");
}

static void test_json_helpers(void **state)
{
	json_t *o = json_pack("{s:s, s:i, s:f, s:n}", "name", "x", "n", 7,
			      "r", 2.6, "z");

	(void)state;
	assert_string_equal(cli_json_str(o, "name"), "x");
	assert_string_equal(cli_json_str(o, "z"), "-");
	assert_string_equal(cli_json_str(o, "missing"), "-");
	assert_int_equal(cli_json_int(o, "n"), 7);
	assert_int_equal(cli_json_int(o, "r"), 3);
	assert_int_equal(cli_json_int(o, "missing"), 0);
	json_decref(o);
}

static void test_table(void **state)
{
	static const char *const headers[] = {"ID", "NAME", "REASON", NULL};
	struct cli_table *t = cli_table_new(headers);
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);

	(void)state;
	cli_table_cellf(t, "%d", 7);
	cli_table_cell(t, "héllo");
	cli_table_cell(t, "");
	cli_table_cell(t, "12");
	cli_table_cell(t, "a\tb");
	cli_table_cell(t, "why");
	cli_table_print(t, f, 2);
	fclose(f);
	assert_string_equal(out, "  ID  NAME   REASON\n"
				 "  7   héllo\n"
				 "  12  a\\tb   why\n");
	free(out);
	cli_table_free(t);
}

/* Print t as ctx asks into *out (malloc'd). */
static void show(const struct cli_ctx *ctx, struct cli_table *t, char **out)
{
	size_t len = 0;
	FILE *f = open_memstream(out, &len);

	cli_table_show(ctx, t, f, 0);
	fclose(f);
}

static void test_table_fits_80_columns(void **state)
{
	static const char *const headers[] = {"ID", "NAME", "STATE", "REASON",
					      NULL};
	struct cli_ctx ctx = {.output = "table"};
	struct cli_table *t = cli_table_new(headers);
	char name[61], reason[71], *out = NULL, *nl;

	(void)state;
	memset(name, 'n', 60);
	name[60] = '\0';
	memset(reason, 'r', 70);
	reason[70] = '\0';
	cli_table_cuttable(t, 1);
	cli_table_cuttable(t, 3);
	cli_table_cell(t, "7");
	cli_table_cell(t, name);
	cli_table_cell(t, "queued");
	cli_table_cell(t, reason);
	show(&ctx, t, &out);
	/* Second line: 1 + 2 + NAME + 2 + 6 + 2 + REASON = 80 characters,
	   the widest free-text column narrowed first, both ending in "…". */
	nl = strchr(out, '\n');
	assert_non_null(nl);
	assert_non_null(strstr(nl, "nnnn\u2026  queued  rrrr"));
	assert_non_null(strstr(nl, "r\u2026\n"));
	assert_int_equal(strlen(nl + 1) - 1 - 2 * (strlen("\u2026") - 1), 80);
	free(out);
	cli_table_free(t);

	/* -o wide and --no-headers: nothing cut, no header row. */
	t = cli_table_new(headers);
	cli_table_cuttable(t, 1);
	cli_table_cell(t, "7");
	cli_table_cell(t, name);
	ctx.output = "wide";
	ctx.no_headers = true;
	show(&ctx, t, &out);
	/* "ID" is the first column's width: three spaces after "7". */
	assert_int_equal(strncmp(out, "7   nnn", 7), 0);
	assert_int_equal(strlen(out), 1 + 3 + 60 + 1);
	free(out);
	cli_table_free(t);
}

static void test_query(void **state)
{
	struct kn_buf path;

	(void)state;
	kn_buf_init(&path, SIZE_MAX);
	kn_buf_printf(&path, "/v1/jobs");
	cli_query_add(&path, "file", "my job.yaml");
	cli_query_add(&path, "owner", NULL);
	cli_query_add(&path, "state", "a&b=c/é");
	assert_string_equal(path.data,
			    "/v1/jobs?file=my%20job.yaml&state=a%26b%3Dc%2F%C3%A9");
	kn_buf_release(&path);
	kn_buf_init(&path, SIZE_MAX);
	kn_buf_printf(&path, "/v1/tokens");
	cli_path_add(&path, "x/../y");
	assert_string_equal(path.data, "/v1/tokens/x%2F..%2Fy");
	kn_buf_release(&path);
}

/* --since and --until: a duration back from now, a UTC time (seconds
   and the Z optional) or a date; anything else, or more after it, is
   refused. */
static void test_parse_when(void **state)
{
	static const struct {
		const char *text;
		int64_t want; /* -1: refused */
	} cases[] = {
		{"2d", 1000LL * 86400 * 8},
		{"2026-12-01", 1796083200000LL},
		{"2026-12-01Z", 1796083200000LL},
		{"2026-12-01T01:00:00Z", 1796083200000LL + 3600000},
		{"2026-12-01T01:00:30", 1796083200000LL + 3630000},
		{"2026-12-01T01:30Z", 1796083200000LL + 5400000},
		{"yesterday", -1},
		{"2026-12-01x", -1},
		{"2026-12-01T01:00:00ZZ", -1},
		{"", -1},
	};

	(void)state;
	for (size_t i = 0; i < KN_LEN(cases); i++) {
		int64_t ms = -1;
		int rc = cli_parse_when(cases[i].text, 1000LL * 86400 * 10,
					&ms);

		if (cases[i].want < 0 ? rc != -EINVAL
				      : rc != 0 || ms != cases[i].want)
			fail_msg("\"%s\": rc %d, %lld ms", cases[i].text, rc,
				 (long long)ms);
	}
}

static int ran_ls(struct cli_ctx *ctx, int argc, char **argv)
{
	return 10;
}

static int ran_verify(struct cli_ctx *ctx, int argc, char **argv)
{
	return 11;
}

static int ran_otherwise(struct cli_ctx *ctx, int argc, char **argv)
{
	return 12;
}

/* A verb is found past global flags in every form; anything else runs
   the command's own default with every argument. */
static void test_run_verb_or(void **state)
{
	static const struct cli_verb verbs[] = {
		{"ls", ran_ls},
		{"verify", ran_verify},
		{NULL, NULL},
	};
	static const struct {
		const char *args[5];
		int want;
	} cases[] = {
		{{"verify"}, 11},
		{{"--server=http://h:1", "verify"}, 11},
		{{"--server", "http://h:1", "ls"}, 10},
		{{"--no-headers", "verify"}, 11},
		{{"-ojson", "verify"}, 11},
		{{"-o", "json", "--token=t", "verify"}, 11},
		{{"--actor", "verify"}, 12},
		{{"--no-headers"}, 12},
		{{"--server", "verify"}, 12},
		{{0}, 12},
	};

	(void)state;
	for (size_t i = 0; i < KN_LEN(cases); i++) {
		char *argv[7] = {"audit"};
		struct cli_ctx ctx;
		int argc = 1, rc;

		for (; argc <= 5 && cases[i].args[argc - 1]; argc++)
			argv[argc] = (char *)cases[i].args[argc - 1];
		new_ctx(&ctx);
		rc = cli_run_verb_or(&ctx, argc, argv, verbs, ran_otherwise);
		if (rc != cases[i].want)
			fail_msg("case %zu (%s ...): ran %d, not %d", i,
				 argc > 1 ? argv[1] : "none", rc,
				 cases[i].want);
	}
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_run_verb_or),
	cmocka_unit_test(test_parse_when),
	cmocka_unit_test(test_parse_flags),
	cmocka_unit_test(test_parse_list_flag),
	cmocka_unit_test(test_parse_globals_anywhere),
	cmocka_unit_test(test_parse_value_that_looks_global),
	cmocka_unit_test(test_parse_errors),
	cmocka_unit_test(test_closest),
	cmocka_unit_test(test_check_choice),
	cmocka_unit_test(test_split_list),
	cmocka_unit_test(test_job_id),
	cmocka_unit_test(test_clean),
	cmocka_unit_test(test_formats),
	cmocka_unit_test(test_json_helpers),
	cmocka_unit_test(test_table),
	cmocka_unit_test(test_table_fits_80_columns),
	cmocka_unit_test(test_query))
