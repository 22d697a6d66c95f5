/* Unit tests for base/datapath.c and base/notify.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/base.h"
#include "base/tests/testmain.h"

/* A binary inside the build tree reads the source tree's tables. */
static void test_build_tree(void **state)
{
	char *dir, *path;

	(void)state;
	unsetenv("KILN_DATA_DIR");
	dir = kn_data_dir();
	assert_string_equal(dir, KN_TEST_DATA_DIR);
	path = kn_data_path("gpu-products.csv");
	assert_string_equal(path, KN_TEST_DATA_DIR "/gpu-products.csv");
	assert_int_equal(access(path, R_OK), 0);
	KN_FREE_ALL(path, dir);
}

static void test_env_overrides(void **state)
{
	char *path;

	(void)state;
	setenv("KILN_DATA_DIR", "/nowhere/kiln", 1);
	path = kn_data_path("mig-profiles.csv");
	assert_string_equal(path, "/nowhere/kiln/mig-profiles.csv");
	free(path);
	/* Empty is unset, not the current directory. */
	setenv("KILN_DATA_DIR", "", 1);
	path = kn_data_path("mig-profiles.csv");
	assert_string_equal(path, KN_TEST_DATA_DIR "/mig-profiles.csv");
	free(path);
	unsetenv("KILN_DATA_DIR");
}

/* A datagram socket bound at name ('@' for the abstract namespace). */
static int listen_at(const char *name)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	size_t len = strlen(name);
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	memcpy(addr.sun_path, name, len);
	if (name[0] == '@')
		addr.sun_path[0] = '\0';
	assert_int_equal(bind(fd, (struct sockaddr *)&addr,
			      (socklen_t)(offsetof(struct sockaddr_un,
						   sun_path) + len)), 0);
	return fd;
}

static void expect_datagram(int fd, const char *want)
{
	char buf[64];
	ssize_t n = recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);

	assert_true(n >= 0);
	buf[n] = '\0';
	assert_string_equal(buf, want);
}

static void test_notify(void **state)
{
	char dir[] = "/tmp/kn-notify-XXXXXX", *path, abstract[64];
	int fd;

	(void)state;
	unsetenv("NOTIFY_SOCKET");
	assert_int_equal(kn_notify("READY=1"), 0); /* no manager: nothing */

	assert_non_null(mkdtemp(dir));
	path = kn_asprintf("%s/notify", dir);
	fd = listen_at(path);
	setenv("NOTIFY_SOCKET", path, 1);
	assert_int_equal(kn_notify("READY=1"), 0);
	expect_datagram(fd, "READY=1");
	close(fd);
	unlink(path);
	/* The manager gone: the service is told, and carries on. */
	assert_int_equal(kn_notify("STOPPING=1"), -ENOENT);

	snprintf(abstract, sizeof(abstract), "@kn-notify-test-%d", getpid());
	fd = listen_at(abstract);
	setenv("NOTIFY_SOCKET", abstract, 1);
	assert_int_equal(kn_notify("STOPPING=1"), 0);
	expect_datagram(fd, "STOPPING=1");
	close(fd);

	setenv("NOTIFY_SOCKET", "relative/socket", 1);
	assert_int_equal(kn_notify("READY=1"), -EINVAL);
	unsetenv("NOTIFY_SOCKET");
	rmdir(dir);
	free(path);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_build_tree),
	cmocka_unit_test(test_env_overrides),
	cmocka_unit_test(test_notify))
