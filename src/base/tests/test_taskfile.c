/*
 * Unit tests for opening task files: only regular files (or directories
 * when asked) beneath the directory, never through a link, never blocking.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/base.h"
#include "base/tests/testmain.h"

static char root[] = "/tmp/kn-taskfile-XXXXXX";

static char *at(const char *rel)
{
	return kn_asprintf("%s/%s", root, rel);
}

static void write_text(const char *rel, const char *text)
{
	char *path = at(rel);

	assert_int_equal(kn_write_file_replace(path, text, strlen(text), 0600),
			 0);
	free(path);
}

static int setup(void **state)
{
	char *task, *secret, *link;

	(void)state;
	assert_non_null(mkdtemp(root));
	task = at("task");
	assert_int_equal(kn_mkdir_p(task, 0700), 0);
	free(task);
	write_text("secret", "admin-token-bytes");
	write_text("task/output.log", "hello\n");
	secret = at("secret");
	link = at("task/leak.log");
	assert_int_equal(symlink(secret, link), 0);
	free(link);
	/* A link in a middle component: task/ckpt -> .. */
	link = at("task/ckpt");
	assert_int_equal(symlink(root, link), 0);
	KN_FREE_ALL(link, secret);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	kn_rm_rf(root);
	return 0;
}

static void expect_refused(const char *name, int flags, int rc_want,
			   const char *msg)
{
	struct kn_error err = {0};
	char *dir = at("task");
	int fd = kn_task_file_open(dir, name, flags, KN_ANY_OWNER, &err);

	if (fd >= 0)
		close(fd);
	assert_int_equal(fd, rc_want);
	assert_non_null(strstr(err.message, msg));
	free(dir);
}

static void test_regular_file(void **state)
{
	struct kn_error err = {0};
	char *dir = at("task"), *text = NULL;
	size_t len = 0;

	(void)state;
	assert_int_equal(kn_task_file_read(dir, "output.log", 64, &text, &len,
					   &err),
			 0);
	assert_string_equal(text, "hello\n");
	assert_int_equal(len, 6);
	free(text);
	text = NULL;
	assert_int_equal(kn_task_file_read(dir, "output.log", 3, &text, &len,
					   &err),
			 -EFBIG);
	assert_null(text);
	free(dir);
}

static void test_links_refused(void **state)
{
	struct kn_error err = {0};
	char *dir = at("task"), *text = NULL;

	(void)state;
	expect_refused("leak.log", O_RDONLY, -EPERM, "leak.log is a symbolic link");
	expect_refused("ckpt/secret", O_RDONLY, -EPERM,
		       "ckpt is a symbolic link");
	expect_refused("ckpt/task/output.log", O_RDONLY, -EPERM,
		       "ckpt is a symbolic link");
	/* Out-parameters stay as they were on failure. */
	assert_int_equal(kn_task_file_read(dir, "leak.log", 64, &text, NULL,
					   &err),
			 -EPERM);
	assert_null(text);
	free(dir);
}

static void test_names_stay_beneath(void **state)
{
	(void)state;
	expect_refused("../secret", O_RDONLY, -EINVAL, "may not hold ..");
	expect_refused("/etc/passwd", O_RDONLY, -EINVAL, "relative path");
	expect_refused("", O_RDONLY, -EINVAL, "relative path");
	expect_refused("missing.log", O_RDONLY, -ENOENT,
		       "missing.log does not exist");
}

static void test_fifo_does_not_block(void **state)
{
	char *path = at("task/fifo.log");

	(void)state;
	assert_int_equal(mkfifo(path, 0600), 0);
	/* A blocking open would hang here: no writer ever comes. */
	expect_refused("fifo.log", O_RDONLY, -EPERM,
		       "fifo.log is a FIFO, not a regular file");
	expect_refused("fifo.log", O_WRONLY, -EPERM, "is a FIFO");
	free(path);
}

static void test_device_and_socket(void **state)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char *dev = at("task/null.log"), *sock = at("task/sock.log");
	int s = socket(AF_UNIX, SOCK_STREAM, 0);

	(void)state;
	if (mknod(dev, S_IFCHR | 0600, makedev(1, 3)) == 0)
		expect_refused("null.log", O_RDONLY, -EPERM,
			       "null.log is a character device, not a "
			       "regular file");
	else
		assert_int_equal(errno, EPERM); /* not root: cannot make one */
	assert_true(s >= 0);
	kn_strlcpy(sa.sun_path, sock, sizeof(sa.sun_path));
	assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
	expect_refused("sock.log", O_RDONLY, -EPERM, "sock.log is a socket");
	close(s);
	KN_FREE_ALL(dev, sock);
}

static void test_directories(void **state)
{
	struct kn_error err = {0};
	char *dir = at("task");
	int fd;

	(void)state;
	expect_refused(".", O_RDONLY, -EPERM, "is a directory, not a regular");
	expect_refused("output.log", O_RDONLY | O_DIRECTORY, -EPERM,
		       "output.log is a regular file, not a directory");
	fd = kn_task_file_open(root, "task", O_RDONLY | O_DIRECTORY,
			       KN_ANY_OWNER, &err);
	assert_true(fd >= 0);
	/* Relative to a descriptor, as directory walks do. */
	{
		int f = kn_task_file_openat(fd, "output.log", O_RDONLY,
					    KN_ANY_OWNER, &err);
		assert_true(f >= 0);
		close(f);
	}
	close(fd);
	free(dir);
}

static void test_owner(void **state)
{
	struct kn_error err = {0};
	char *dir = at("task"), *path = at("task/output.log");
	int fd;

	(void)state;
	fd = kn_task_file_open(dir, "output.log", O_RDONLY, getuid(), &err);
	assert_true(fd >= 0);
	close(fd);
	fd = kn_task_file_open(dir, "output.log", O_RDONLY, getuid() + 1,
			       &err);
	assert_int_equal(fd, -EPERM);
	assert_non_null(strstr(err.message, "belongs to uid"));
	if (getuid() == 0) {
		assert_int_equal(chown(path, 4242, 4242), 0);
		fd = kn_task_file_open(dir, "output.log", O_RDONLY, 0, &err);
		assert_int_equal(fd, -EPERM);
		assert_non_null(strstr(err.message, "uid 4242"));
	}
	KN_FREE_ALL(path, dir);
}

/* A link planted under a writer's temporary name is not written through. */
static void test_write_does_not_follow_a_planted_link(void **state)
{
	char *secret = at("secret"), *tmp, *path = at("task/stop.json");
	char *text = NULL;

	(void)state;
	tmp = kn_asprintf("%s.tmp.%d", path, getpid());
	assert_int_equal(symlink(secret, tmp), 0);
	assert_int_equal(kn_write_file_replace(path, "{}", 2, 0600), 0);
	assert_int_equal(kn_read_file(secret, 64, &text, NULL), 0);
	assert_string_equal(text, "admin-token-bytes");
	free(text);
	assert_int_equal(kn_read_file(path, 64, &text, NULL), 0);
	assert_string_equal(text, "{}");
	KN_FREE_ALL(text, tmp, path, secret);
}

KN_TEST_MAIN(setup, teardown,
	cmocka_unit_test(test_regular_file),
	cmocka_unit_test(test_links_refused),
	cmocka_unit_test(test_names_stay_beneath),
	cmocka_unit_test(test_fifo_does_not_block),
	cmocka_unit_test(test_device_and_socket),
	cmocka_unit_test(test_directories),
	cmocka_unit_test(test_owner),
	cmocka_unit_test(test_write_does_not_follow_a_planted_link))
