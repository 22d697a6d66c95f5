/*
 * Unit tests for detached children: their own session, output where asked,
 * no inherited descriptors, no output through a planted link.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "base/tests/testmain.h"

static char root[] = "/tmp/kn-spawn-XXXXXX";

static int setup(void **state)
{
	(void)state;
	return mkdtemp(root) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	return kn_rm_rf(root);
}

/* Runs script under sh with out and err, waits, returns its exit status. */
static int run_sh(const char *script, const char *out, const char *err,
		  bool no_follow, int *spawn_rc)
{
	char *argv[] = {"sh", "-c", (char *)script, NULL};
	char *envp[] = {"PATH=/usr/bin:/bin", NULL};
	pid_t pid;
	int status;

	*spawn_rc = kn_spawn_detached(&(struct kn_spawn){.path = "sh",
							 .argv = argv,
							 .envp = envp,
							 .out_path = out,
							 .err_path = err,
							 .no_follow = no_follow,
							 .search = true},
				      &pid);
	if (*spawn_rc != 0)
		return -1;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_one_file_for_both_and_own_session(void **state)
{
	char *log = kn_asprintf("%s/both.log", root), *text = NULL;
	char script[128];
	int rc;

	(void)state;
	/* Exit 0 only when the child leads a session other than ours. */
	snprintf(script, sizeof(script),
		 "echo out; echo err >&2; "
		 "[ \"$(cut -d' ' -f6 /proc/$$/stat)\" -ne %d ]",
		 (int)getsid(0));
	assert_int_equal(run_sh(script, log, log, false, &rc), 0);
	assert_int_equal(kn_read_file(log, 4096, &text, NULL), 0);
	assert_string_equal(text, "out\nerr\n");
	KN_FREE_ALL(text, log);
}

static void test_no_descriptor_is_inherited(void **state)
{
	int fd = open("/dev/null", O_RDONLY); /* no O_CLOEXEC on purpose */
	char script[64];
	int rc;

	(void)state;
	assert_true(fd > 2);
	snprintf(script, sizeof(script), "[ ! -e /proc/self/fd/%d ]", fd);
	assert_int_equal(run_sh(script, NULL, NULL, false, &rc), 0);
	close(fd);
}

static void test_no_output_through_a_link(void **state)
{
	char *secret = kn_asprintf("%s/secret", root);
	char *link = kn_asprintf("%s/out.log", root), *text = NULL;
	int rc;

	(void)state;
	assert_int_equal(kn_write_file_replace(secret, "key", 3, 0600), 0);
	assert_int_equal(symlink(secret, link), 0);
	assert_int_equal(run_sh("echo overwritten", link, NULL, true, &rc), -1);
	assert_int_not_equal(rc, 0);
	assert_int_equal(kn_read_file(secret, 64, &text, NULL), 0);
	assert_string_equal(text, "key");
	KN_FREE_ALL(text, link, secret);
}

KN_TEST_MAIN(setup, teardown,
	cmocka_unit_test(test_one_file_for_both_and_own_session),
	cmocka_unit_test(test_no_descriptor_is_inherited),
	cmocka_unit_test(test_no_output_through_a_link))
