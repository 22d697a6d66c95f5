/*
 * Unit tests for `kiln server`'s options table (kn_server_options): every
 * row is a distinct, well-formed option; `kiln server --help` and the
 * server's section of docs/cli.md document each one; the config file is
 * read into the same fields the flags set, and refused when others could
 * have written it.
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
#include <sys/stat.h>
#include <unistd.h>

#include "base/tests/testmain.h"
#include "cmd/cli.h"
#include "server/server.h"

/* Whether text holds "--NAME" not followed by more of a flag's name. */
static bool mentions_flag(const char *text, const char *name)
{
	size_t len = strlen(name);

	for (const char *p = text; (p = strstr(p, "--")); p += 2) {
		char next = p[2 + len];

		if (!strncmp(p + 2, name, len) &&
		    !(next == '-' || (next >= 'a' && next <= 'z')))
			return true;
	}
	return false;
}

static void test_rows_are_distinct_and_well_formed(void **state)
{
	size_t n;
	const struct kn_option *opts = kn_server_options(&n);

	(void)state;
	assert_true(n >= 50);
	for (size_t i = 0; i < n; i++) {
		assert_non_null(opts[i].name);
		assert_non_null(opts[i].help);
		assert_true(opts[i].set || opts[i].offset <
			    sizeof(struct kn_server_config));
		if (opts[i].kind != KN_OPT_BOOL)
			assert_non_null(opts[i].arg);
		if (opts[i].kind == KN_OPT_COUNT)
			assert_true(opts[i].max > opts[i].min);
		if (opts[i].kind == KN_OPT_LIST)
			assert_true(opts[i].count_offset > 0);
		for (size_t j = 0; j < i; j++)
			assert_string_not_equal(opts[i].name, opts[j].name);
		/* Not keys of their own: the sections and the flag that
		   names the file. */
		assert_string_not_equal(opts[i].name, "config");
		assert_string_not_equal(opts[i].name, "signers");
		assert_string_not_equal(opts[i].name, "stores");
	}
}

static void test_help_documents_every_option(void **state)
{
	size_t n;
	const struct kn_option *opts = kn_server_options(&n);

	(void)state;
	for (size_t i = 0; i < n; i++)
		if (!mentions_flag(cmd_server_help, opts[i].name))
			fail_msg("--%s is missing from kiln server --help",
				 opts[i].name);
	assert_true(mentions_flag(cmd_server_help, "config"));
	assert_false(mentions_flag(cmd_server_help, "no-such-option"));
}

static void test_cli_md_documents_every_option(void **state)
{
	const char *path = KN_SOURCE_ROOT "/docs/cli.md";
	char *text = NULL, *start, *end;
	size_t n;
	const struct kn_option *opts = kn_server_options(&n);

	(void)state;
	assert_int_equal(kn_read_file(path, 4 << 20, &text, NULL), 0);
	start = strstr(text, "\n### kiln server\n");
	assert_non_null(start);
	end = strstr(start + 1, "\n### ");
	if (end)
		*end = '\0';
	for (size_t i = 0; i < n; i++)
		if (!mentions_flag(start, opts[i].name))
			fail_msg("--%s is missing from docs/cli.md's kiln "
				 "server section", opts[i].name);
	assert_true(mentions_flag(start, "config"));
	free(text);
}

/* A config file in a fresh directory, mode as given. */
static char *write_config(const char *text, mode_t mode)
{
	char dir[] = "/tmp/kn_server_options_XXXXXX";
	char *path;
	FILE *f;

	assert_non_null(mkdtemp(dir));
	path = kn_asprintf("%s/server.yaml", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	assert_int_equal(chmod(path, mode), 0);
	return path;
}

static void remove_config(char *path)
{
	unlink(path);
	*strrchr(path, '/') = '\0';
	rmdir(path);
	free(path);
}

static void test_file_sets_the_flags_fields(void **state)
{
	char *path = write_config("listen: '[::1]:7171'\n"
				  "health-interval: 0\n"
				  "no-local-metrics: true\n"
				  "backup-keep: 3\n"
				  "pool: [\"p A100 1xA100-80GB\"]\n"
				  "executor: local\n"
				  "signers:\n"
				  "  - {name: release, key-file: /k.pem, "
				  "roles: [admin]}\n",
				  0600);
	struct kn_server_config cfg;
	struct kn_error err;

	(void)state;
	kn_server_config_init(&cfg);
	assert_int_equal(kn_server_config_load(&cfg, path, NULL, &err), 0);
	assert_string_equal(cfg.listen_host, "::1");
	assert_int_equal(cfg.listen_port, 7171);
	assert_int_equal(cfg.health_interval_ms, 0);
	assert_false(cfg.scrape_local);
	assert_int_equal(cfg.backup_keep, 3);
	assert_int_equal(cfg.n_pools, 1);
	assert_string_equal(cfg.pools[0], "p A100 1xA100-80GB");
	assert_int_equal(cfg.sections.n_signers, 1);
	assert_string_equal(cfg.sections.signers[0].key_file, "/k.pem");
	assert_int_equal(kn_server_config_check(&cfg, &err), 0);
	kn_server_config_release(&cfg);
	remove_config(path);
}

static void test_file_others_may_write_is_refused(void **state)
{
	char *path = write_config("listen: 127.0.0.1:0\n", 0620);
	struct kn_server_config cfg;
	struct kn_error err;

	(void)state;
	kn_server_config_init(&cfg);
	assert_int_equal(kn_server_config_load(&cfg, path, NULL, &err), -EPERM);
	assert_non_null(strstr(err.message, "mode 0620 lets others write"));
	assert_int_equal(cfg.listen_port, 7070);
	kn_server_config_release(&cfg);
	remove_config(path);

	kn_server_config_init(&cfg);
	assert_int_equal(kn_server_config_load(&cfg, "/nonexistent/kiln.yaml", NULL,
					       &err), -ENOENT);
	kn_server_config_release(&cfg);
}

static void test_checks_span_file_and_flags(void **state)
{
	char *path = write_config("sim-node: [\"a 1xH100-80GB\"]\n"
				  "gpus: 2xH100-80GB\n", 0600);
	struct kn_server_config cfg;
	struct kn_error err;

	(void)state;
	kn_server_config_init(&cfg);
	assert_int_equal(kn_server_config_load(&cfg, path, NULL, &err), 0);
	assert_int_equal(kn_server_config_check(&cfg, &err), -EINVAL);
	assert_non_null(strstr(err.message, "--sim-node cannot be combined"));
	kn_server_config_release(&cfg);
	remove_config(path);
}

/* Another executor's options are refused naming the one they need; an
   unknown executor names the option. */
static void test_executor_options_checked(void **state)
{
	struct kn_server_config cfg;
	struct kn_error err;

	(void)state;
	kn_server_config_init(&cfg);
	cfg.executor = "slurm";
	assert_int_equal(kn_server_config_check(&cfg, &err), 0);
	cfg.kube_namespace = "ns";
	assert_int_equal(kn_server_config_check(&cfg, &err), -EINVAL);
	assert_non_null(strstr(err.message, "need --executor kubernetes"));
	cfg.executor = "kubernetes";
	assert_int_equal(kn_server_config_check(&cfg, &err), 0);
	cfg.executor = "nomad";
	assert_int_equal(kn_server_config_check(&cfg, &err), -EINVAL);
	assert_string_equal(err.field, "executor");
	kn_server_config_release(&cfg);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_rows_are_distinct_and_well_formed),
	cmocka_unit_test(test_help_documents_every_option),
	cmocka_unit_test(test_executor_options_checked),
	cmocka_unit_test(test_cli_md_documents_every_option),
	cmocka_unit_test(test_file_sets_the_flags_fields),
	cmocka_unit_test(test_file_others_may_write_is_refused),
	cmocka_unit_test(test_checks_span_file_and_flags))
