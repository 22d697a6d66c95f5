/*
 * Unit tests for options tables (kn_option_set) and the server's config
 * file (kn_server_conf_parse): each kind of value with its bounds and
 * exact messages, lists, the sections signers: and stores:, and errors as
 * FILE:LINE:COLUMN: KEY.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "base/tests/testmain.h"
#include "spec/spec.h"

struct target {
	const char *name;
	const char *path;
	const char *mode;
	int64_t every_ms;
	int64_t size;
	int64_t count;
	int small;
	bool on;
	bool local;
	const char **items;
	size_t n_items;
};

static const char *const modes[] = {"fast", "safe", "slow", NULL};

#define T(f) offsetof(struct target, f)
static const struct kn_option opts[] = {
	{"name", KN_OPT_STRING, "NAME", T(name), .help = "a name"},
	{"path", KN_OPT_PATH, "DIR", T(path), .flags = KN_OPT_ABSOLUTE,
	 .help = "a path"},
	{"mode", KN_OPT_STRING, "MODE", T(mode), .choices = modes,
	 .help = "a choice"},
	{"every", KN_OPT_DURATION, "DURATION", T(every_ms), .min = 1000,
	 .flags = KN_OPT_ZERO_IS_NONE, .example = "5m", .help = "a period"},
	{"size", KN_OPT_SIZE, "SIZE", T(size), .min = 4096, .example = "64Mi",
	 .help = "a size"},
	{"count", KN_OPT_COUNT, "N", T(count), .min = 1, .max = 10,
	 .help = "a count"},
	{"small", KN_OPT_COUNT, "N", T(small), .min = 1, .max = 1000,
	 .flags = KN_OPT_INT, .help = "an int"},
	{"on", KN_OPT_BOOL, NULL, T(on), .help = "a switch"},
	{"no-local", KN_OPT_BOOL, NULL, T(local), .flags = KN_OPT_CLEARS,
	 .help = "a switch that clears"},
	{"item", KN_OPT_LIST, "ITEM", T(items), T(n_items), .help = "a list"},
};
#define N_OPTS (sizeof(opts) / sizeof(opts[0]))

static const struct kn_option *opt(const char *name)
{
	const struct kn_option *o = kn_option_find(opts, N_OPTS, name);

	assert_non_null(o);
	return o;
}

/* Setting name to text fails with exactly want. */
static void refused(const char *name, const char *text, const char *want)
{
	struct target t = {0};
	struct kn_strpool pool = {0};
	struct kn_error err;

	assert_int_equal(kn_option_set(opt(name), &t, text, &pool, &err),
			 -EINVAL);
	assert_string_equal(err.message, want);
	/* Out-parameters only on success. */
	assert_null(t.name);
	assert_int_equal(t.count, 0);
	assert_int_equal(t.small, 0);
	kn_strpool_release(&pool);
}

static void test_values_and_bounds(void **state)
{
	struct target t = {.local = true};
	struct kn_strpool pool = {0};
	struct kn_error err;

	(void)state;
	assert_int_equal(kn_option_set(opt("every"), &t, "5m", &pool, &err), 0);
	assert_int_equal(t.every_ms, 300000);
	assert_int_equal(kn_option_set(opt("every"), &t, "0", &pool, &err), 0);
	assert_int_equal(t.every_ms, 0);
	assert_int_equal(kn_option_set(opt("size"), &t, "2Mi", &pool, &err), 0);
	assert_int_equal(t.size, 2 << 20);
	assert_int_equal(kn_option_set(opt("small"), &t, "7", &pool, &err), 0);
	assert_int_equal(t.small, 7);
	assert_int_equal(kn_option_set(opt("mode"), &t, "safe", &pool, &err),
			 0);
	assert_string_equal(t.mode, "safe");
	assert_int_equal(kn_option_set(opt("no-local"), &t, "true", &pool,
				       &err), 0);
	assert_false(t.local);
	assert_int_equal(kn_option_set(opt("on"), &t, "true", &pool, &err), 0);
	assert_true(t.on);
	kn_strpool_release(&pool);

	refused("every", "500ms",
		"\"500ms\" is not 0 or a duration of at least 1s (e.g. 5m)");
	refused("every", "5", "\"5\" is not 0 or a duration of at least 1s "
		"(e.g. 5m)");
	refused("size", "1Ki", "\"1Ki\" is not a size of at least 4Ki "
		"(e.g. 64Mi)");
	refused("count", "11", "\"11\" is not a whole number in 1..10");
	refused("count", "-1", "\"-1\" is not a whole number in 1..10");
	refused("small", "2x", "\"2x\" is not a whole number in 1..1000");
	refused("mode", "quick", "\"quick\" is not fast, safe or slow");
	refused("path", "rel/dir", "\"rel/dir\" is not an absolute path");
	refused("name", "", "must not be empty");
	refused("on", "yes", "\"yes\" is not true or false");
}

static void test_lists_append_and_clear(void **state)
{
	struct target t = {0};
	struct kn_strpool pool = {0};
	struct kn_error err;

	(void)state;
	assert_int_equal(kn_option_set(opt("item"), &t, "a", &pool, &err), 0);
	assert_int_equal(kn_option_set(opt("item"), &t, "b", &pool, &err), 0);
	assert_int_equal(t.n_items, 2);
	assert_string_equal(t.items[0], "a");
	assert_string_equal(t.items[1], "b");
	kn_option_clear(opt("item"), &t);
	assert_int_equal(t.n_items, 0);
	assert_int_equal(kn_option_set(opt("item"), &t, "c", &pool, &err), 0);
	assert_int_equal(t.n_items, 1);
	assert_string_equal(t.items[0], "c");
	kn_strpool_release(&pool);
}

/* A config file read: its options, its sections, the strings they keep. */
struct conf_file {
	struct target t;
	struct kn_server_conf conf;
	struct kn_strpool pool;
	struct kn_error err;
};

/* Parse text as "s.yaml" into f; on failure f->err holds the message. */
static int parse(struct conf_file *f, const char *text)
{
	return kn_server_conf_parse(text, strlen(text), "s.yaml", opts, N_OPTS,
				    &f->t, &f->pool, &f->conf, NULL, &f->err);
}

static void test_file_reads_every_kind(void **state)
{
	struct conf_file f = {.t.local = true};

	(void)state;
	assert_int_equal(parse(&f, "# options\nname: n1\nevery: 0\n"
				   "count: 3\nsize: 1Mi\non: true\n"
				   "no-local: true\nitem: [x, y]\n"), 0);
	assert_string_equal(f.t.name, "n1");
	assert_int_equal(f.t.every_ms, 0);
	assert_int_equal(f.t.count, 3);
	assert_int_equal(f.t.size, 1 << 20);
	assert_true(f.t.on);
	assert_false(f.t.local);
	assert_int_equal(f.t.n_items, 2);
	assert_string_equal(f.t.items[1], "y");
	assert_int_equal(f.conf.n_signers, 0);
	kn_strpool_release(&f.pool);

	/* Comments only: no options, no error. */
	assert_int_equal(parse(&f, "# nothing yet\n"), 0);
	kn_strpool_release(&f.pool);
}

static void file_refused(const char *text, const char *want)
{
	struct conf_file f = {.conf.n_signers = 99};

	assert_int_equal(parse(&f, text), -EINVAL);
	assert_string_equal(f.err.message, want);
	assert_int_equal(f.conf.n_signers, 99);
	kn_strpool_release(&f.pool);
}

static void test_file_errors_name_the_key(void **state)
{
	(void)state;
	file_refused("name: a\ncuont: 3\n",
		     "s.yaml:2:1: unknown key \"cuont\"; did you mean "
		     "\"count\"?");
	file_refused("count: 30\n",
		     "s.yaml:1:8: count: \"30\" is not a whole number in 1..10");
	file_refused("on: 1\n", "s.yaml:1:5: on: must be true or false; got 1");
	file_refused("every: 5m\nevery: 6m\n",
		     "s.yaml:2:1: every: given twice (first at 1:1)");
	file_refused("item: x\n", "s.yaml:1:7: item: must be a list of "
		     "strings; got \"x\"");
	file_refused("item: [a, '']\n",
		     "s.yaml:1:11: item[1]: must be a non-empty string; got "
		     "an empty string");
	file_refused("- name\n", "s.yaml:1:1: a config file is a mapping of "
		     "option names to values; got a list");
	file_refused("name: [a\n", "s.yaml:2:1: invalid YAML: flow sequence "
		     "without a closing bracket");
}

static void test_signers(void **state)
{
	struct conf_file f = {0};

	(void)state;
	assert_int_equal(parse(&f, "signers:\n"
				   "  - name: release\n"
				   "    key-file: /etc/kiln/release.pem\n"
				   "    roles: [admin, operator]\n"
				   "  - name: nightly\n"
				   "    key-file: /etc/kiln/nightly.pem\n"
				   "    tokens: [ci]\n"), 0);
	assert_int_equal(f.conf.n_signers, 2);
	assert_string_equal(f.conf.signers[0].name, "release");
	assert_string_equal(f.conf.signers[0].key_file,
			    "/etc/kiln/release.pem");
	assert_int_equal(f.conf.signers[0].n_roles, 2);
	assert_string_equal(f.conf.signers[0].roles[1], "operator");
	assert_int_equal(f.conf.signers[1].n_tokens, 1);
	assert_string_equal(f.conf.signers[1].tokens[0], "ci");
	kn_server_conf_release(&f.conf);

	file_refused("signers:\n  - name: r\n    key-file: /k\n",
		     "s.yaml:2:5: signers[0]: grants no one: give roles: or "
		     "tokens: (or both)");
	file_refused("signers:\n  - {name: r, key-file: /k, roles: [root]}\n",
		     "s.yaml:2:37: signers[0].roles[0]: \"root\" is not a role: "
		     "viewer, user, operator or admin");
	file_refused("signers:\n  - {name: r, key-file: /k, tokens: ci}\n",
		     "s.yaml:2:37: signers[0].tokens: must be a list of token "
		     "names; got \"ci\"");
	file_refused("signers:\n  - {name: r, roles: [admin]}\n",
		     "s.yaml:2:5: missing required field "
		     "\"key-file\" in signers[0]");
	file_refused("signers:\n  - {name: r, key-file: /a, tokens: [x]}\n"
		     "  - {name: r, key-file: /b, tokens: [y]}\n",
		     "s.yaml:3:5: signers[1]: a second entry named \"r\"");
}

static void test_stores(void **state)
{
	struct conf_file f = {0};

	(void)state;
	assert_int_equal(parse(&f,
			       "stores:\n"
			       "  - name: archive\n"
			       "    url: https://acct.blob.core.windows.net/c\n"
			       "    credential: {env: ARCHIVE_SAS}\n"
			       "  - name: scratch\n"
			       "    url: file:///var/kiln/scratch\n"
			       "  - name: keyed\n"
			       "    url: https://b.blob.core.windows.net/c\n"
			       "    credential: {file: /etc/kiln/b.key}\n"),
			 0);
	assert_int_equal(f.conf.n_stores, 3);
	assert_string_equal(f.conf.stores[0].credential_env, "ARCHIVE_SAS");
	assert_null(f.conf.stores[0].credential_file);
	assert_null(f.conf.stores[1].credential_env);
	assert_string_equal(f.conf.stores[2].credential_file,
			    "/etc/kiln/b.key");
	kn_server_conf_release(&f.conf);

	file_refused("stores:\n  - {name: a, url: ftp://x}\n",
		     "s.yaml:2:20: stores[0].url: must be file:///DIR or an "
		     "Azure Blob https:// URL; got \"ftp://x\"");
	file_refused("stores:\n  - name: a\n    url: file:///d\n"
		     "    credential: {env: A, file: /f}\n",
		     "s.yaml:4:17: stores[0].credential: give exactly one of "
		     "env: (a variable's name) or file: (a 0600 file)");
	file_refused("stores:\n  - name: a\n    url: file:///d\n"
		     "    credential: {env: A-B}\n",
		     "s.yaml:4:17: stores[0].credential: env: \"A-B\" is not a "
		     "variable name");
	file_refused("stores:\n  - name: a\n    url: file:///d\n"
		     "    credential: {file: rel}\n",
		     "s.yaml:4:17: stores[0].credential: file: \"rel\" is not an "
		     "absolute path");
}

/* o's value shown, as text. */
static void expect_shown(const struct target *t, const char *name,
			 const char *want)
{
	struct kn_buf out;

	kn_buf_init(&out, SIZE_MAX);
	kn_option_show(opt(name), t, &out);
	assert_string_equal(out.data, want);
	kn_buf_release(&out);
}

/* What --print-config shows reads back to the same value. */
static void test_show_reads_back(void **state)
{
	struct conf_file f = {.t.local = true}, back = {.t.local = true};
	struct kn_buf file;
	const char *const names[] = {"name", "every", "size", "count", "small",
				     "on", "no-local", "item"};

	(void)state;
	expect_shown(&f.t, "name", "~");
	expect_shown(&f.t, "every", "0");
	expect_shown(&f.t, "no-local", "false");
	expect_shown(&f.t, "item", "[]");
	/* An unset string is shown as ~, which reads back as unset. */
	assert_int_equal(parse(&f, "name: ~\n"), 0);
	assert_null(f.t.name);
	kn_server_conf_release(&f.conf);
	assert_int_equal(parse(&f, "name: 'say \"hi\"'\nevery: 90s\n"
				   "size: 2Mi\ncount: 3\nsmall: 7\non: true\n"
				   "no-local: true\nitem: [a, 'b c']\n"), 0);
	expect_shown(&f.t, "name", "\"say \\\"hi\\\"\"");
	expect_shown(&f.t, "every", "90s");
	expect_shown(&f.t, "size", "2Mi");
	expect_shown(&f.t, "small", "7");
	expect_shown(&f.t, "no-local", "true");
	expect_shown(&f.t, "item", "[\"a\", \"b c\"]");
	kn_buf_init(&file, SIZE_MAX);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		kn_buf_printf(&file, "%s: ", names[i]);
		kn_option_show(opt(names[i]), &f.t, &file);
		kn_buf_printf(&file, "\n");
	}
	assert_int_equal(parse(&back, file.data), 0);
	assert_string_equal(back.t.name, f.t.name);
	assert_int_equal(back.t.every_ms, 90000);
	assert_int_equal(back.t.size, f.t.size);
	assert_int_equal(back.t.small, 7);
	assert_true(back.t.on);
	assert_false(back.t.local);
	assert_int_equal(back.t.n_items, 2);
	assert_string_equal(back.t.items[1], "b c");
	kn_buf_release(&file);
	kn_server_conf_release(&f.conf);
	kn_server_conf_release(&back.conf);
	kn_strpool_release(&f.pool);
	kn_strpool_release(&back.pool);
}

/* A file of options alone has no sections: signers: is an unknown key. */
static void test_options_file_has_no_sections(void **state)
{
	struct target t = {0};
	struct kn_strpool pool = {0};
	struct kn_error err;
	const char *text = "count: 2\nsigners: []\n";

	(void)state;
	assert_int_equal(kn_option_conf_parse(text, strlen(text), "g.yaml",
					      opts, N_OPTS, &t, &pool, NULL,
					      &err),
			 -EINVAL);
	assert_non_null(strstr(err.message, "g.yaml:2:1: unknown key "
					    "\"signers\""));
	kn_strpool_release(&pool);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_values_and_bounds),
	cmocka_unit_test(test_lists_append_and_clear),
	cmocka_unit_test(test_file_reads_every_kind),
	cmocka_unit_test(test_file_errors_name_the_key),
	cmocka_unit_test(test_signers),
	cmocka_unit_test(test_stores),
	cmocka_unit_test(test_show_reads_back),
	cmocka_unit_test(test_options_file_has_no_sections))
