/*
 * Unit tests for the sandbox's pure parts: the task environment's
 * allow-list and the owner-to-user map's parser. Entering the sandbox
 * (namespaces, mounts, the user) is tested end to end in
 * tests/e2e/test_isolation.py, where a real shim runs real tasks.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "sandbox/sandbox.h"

static const char *get(char **env, const char *name)
{
	size_t n = strlen(name);

	for (char **e = env; *e; e++)
		if (!strncmp(*e, name, n) && (*e)[n] == '=')
			return *e + n + 1;
	return NULL;
}

static char *const server_env[] = {
	"PATH=/opt/bin:/usr/bin",
	"LANG=C.UTF-8",
	"LC_ALL=C",
	"TZ=UTC",
	"TERM=xterm",
	"AZURE_STORAGE_KEY=secret-key",
	"AZURE_STORAGE_SAS_TOKEN=sv=secret",
	"KILN_TOKEN=kiln_secret",
	"KILN_HOME=/var/lib/kiln",
	"HOME=/root",
	"LD_PRELOAD=/evil.so",
	"SLURM_PROCID=3",
	"SLURMD_NODENAME=kn1",
	"CUDA_VISIBLE_DEVICES=0,1",
	"RANK=3",
	"LCX=not-a-locale-var-but-prefix",
	NULL,
};

static void test_env_local_allow_list(void **state)
{
	char *const launch[] = {"KILN_JOB_ID=7", "CUDA_VISIBLE_DEVICES=2",
				"TZ=Europe/Paris", NULL};
	char **env;
	(void)state;

	env = kn_sandbox_env_build(KN_SANDBOX_LOCAL, launch, server_env,
				   "/home/t/task", "kiln-task");
	assert_string_equal(get(env, "PATH"), "/opt/bin:/usr/bin");
	assert_string_equal(get(env, "LANG"), "C.UTF-8");
	assert_string_equal(get(env, "LC_ALL"), "C");
	assert_string_equal(get(env, "TERM"), "xterm");
	/* The launch wins over the shim's own. */
	assert_string_equal(get(env, "TZ"), "Europe/Paris");
	assert_string_equal(get(env, "KILN_JOB_ID"), "7");
	assert_string_equal(get(env, "CUDA_VISIBLE_DEVICES"), "2");
	assert_string_equal(get(env, "HOME"), "/home/t/task");
	assert_string_equal(get(env, "USER"), "kiln-task");
	assert_string_equal(get(env, "LOGNAME"), "kiln-task");
	assert_null(get(env, "AZURE_STORAGE_KEY"));
	assert_null(get(env, "AZURE_STORAGE_SAS_TOKEN"));
	assert_null(get(env, "KILN_TOKEN"));
	assert_null(get(env, "KILN_HOME"));
	assert_null(get(env, "LD_PRELOAD"));
	assert_null(get(env, "SLURM_PROCID"));
	assert_null(get(env, "RANK"));
	/* "LC_*" is a prefix with its underscore. */
	assert_null(get(env, "LCX"));
	kn_sandbox_strings_free(env);
}

static void test_env_launch_sets_home_and_default_path(void **state)
{
	char *const launch[] = {"HOME=/data", "USER=me", NULL};
	char *const bare[] = {"AZURE_CLIENT_SECRET=x", NULL};
	char **env;
	size_t n = 0;
	(void)state;

	env = kn_sandbox_env_build(KN_SANDBOX_LOCAL, launch, bare, "/t", "u");
	assert_string_equal(get(env, "HOME"), "/data");
	assert_string_equal(get(env, "USER"), "me");
	assert_string_equal(get(env, "LOGNAME"), "u");
	assert_string_equal(get(env, "PATH"), "/usr/local/bin:/usr/bin:/bin");
	for (char **e = env; *e; e++)
		n++;
	assert_int_equal(n, 4);
	kn_sandbox_strings_free(env);
}

static void test_env_slurm_keeps_its_variables(void **state)
{
	char **env;
	(void)state;

	env = kn_sandbox_env_build(KN_SANDBOX_SLURM, NULL, server_env, "/t",
				   NULL);
	assert_string_equal(get(env, "SLURM_PROCID"), "3");
	assert_string_equal(get(env, "SLURMD_NODENAME"), "kn1");
	assert_string_equal(get(env, "CUDA_VISIBLE_DEVICES"), "0,1");
	assert_string_equal(get(env, "RANK"), "3");
	assert_null(get(env, "AZURE_STORAGE_KEY"));
	assert_null(get(env, "KILN_TOKEN"));
	assert_null(get(env, "USER"));
	kn_sandbox_strings_free(env);
}

static void test_env_pod_drops_credentials_only(void **state)
{
	char **env;
	(void)state;

	env = kn_sandbox_env_build(KN_SANDBOX_POD, NULL, server_env, NULL,
				   NULL);
	assert_string_equal(get(env, "KILN_HOME"), "/var/lib/kiln");
	assert_string_equal(get(env, "HOME"), "/root");
	assert_string_equal(get(env, "RANK"), "3");
	assert_null(get(env, "AZURE_STORAGE_KEY"));
	assert_null(get(env, "AZURE_STORAGE_SAS_TOKEN"));
	assert_null(get(env, "KILN_TOKEN"));
	kn_sandbox_strings_free(env);
}

static void test_user_map_parses(void **state)
{
	struct kn_user_map *m = NULL;
	struct kn_error err;
	(void)state;

	assert_int_equal(kn_user_map_parse("# owners\n"
					   "alice: alice\n"
					   "\n"
					   "  ci-bot :svc_ci   # the robot\r\n"
					   "team.b:\tbob",
					   "map", &m, &err),
			 0);
	assert_int_equal(kn_user_map_count(m), 3);
	assert_string_equal(kn_user_map_lookup(m, "alice"), "alice");
	assert_string_equal(kn_user_map_lookup(m, "ci-bot"), "svc_ci");
	assert_string_equal(kn_user_map_lookup(m, "team.b"), "bob");
	assert_null(kn_user_map_lookup(m, "carol"));
	assert_null(kn_user_map_lookup(m, NULL));
	kn_user_map_free(m);
}

static void test_user_map_errors(void **state)
{
	static const struct {
		const char *text, *message;
	} cases[] = {
		{"alice alice\n", "users.map:1:7: expected ':' after the token "
				  "name"},
		{"ok: ok\n:bob\n", "users.map:2:1: expected a token name"},
		{"alice:\n", "users.map:1:7: expected a Unix user name"},
		{"alice: -rf\n", "users.map:1:8: expected a Unix user name"},
		{"alice: bob carol\n", "users.map:1:12: unexpected text after "
				       "the user name"},
		{"a: b\na: c\n", "users.map:2:1: token name a mapped twice"},
		{"al/ice: bob\n", "users.map:1:3: expected ':' after the token "
				  "name"},
		{"alice: b$b\n", "users.map:1:9: unexpected text after the user "
				 "name"},
		{"x: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
		 "users.map:1:4: Unix user name longer than 32"},
	};
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct kn_user_map *m = (struct kn_user_map *)&cases;
		struct kn_error err;

		assert_true(kn_user_map_parse(cases[i].text, "users.map", &m,
					      &err) < 0);
		assert_string_equal(err.message, cases[i].message);
		assert_string_equal(err.field, "task-user-map");
		/* Not written on failure. */
		assert_ptr_equal(m, (struct kn_user_map *)&cases);
	}
}

static void test_sandbox_unknown_user(void **state)
{
	const struct kn_sandbox_config cfg = {
		.mode = KN_SANDBOX_UID,
		.run_as = "no-such-user-kiln-test",
	};
	struct kn_sandbox *sb = NULL;
	struct kn_error err;
	(void)state;

	assert_true(kn_sandbox_new(&cfg, &sb, &err) < 0);
	assert_null(sb);
	assert_string_equal(err.field, "run_as");
	assert_non_null(strstr(err.message, "no Unix user no-such-user-kiln-test"));
	assert_true(kn_sandbox_new(&(struct kn_sandbox_config){
					   .mode = KN_SANDBOX_UID,
					   .run_as = "root"},
				   &sb, &err) < 0);
	assert_non_null(strstr(err.message, "may not run as root"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_env_local_allow_list),
		cmocka_unit_test(test_env_launch_sets_home_and_default_path),
		cmocka_unit_test(test_env_slurm_keeps_its_variables),
		cmocka_unit_test(test_env_pod_drops_credentials_only),
		cmocka_unit_test(test_user_map_parses),
		cmocka_unit_test(test_user_map_errors),
		cmocka_unit_test(test_sandbox_unknown_user),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
