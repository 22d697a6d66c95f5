/*
 * Unit tests for whole-buffer writes: bytes arrive in order through a
 * pipe and a socket, pwrite leaves the file offset alone, a full
 * non-blocking pipe stops with -EAGAIN after what it took, a closed peer
 * is -EPIPE without killing the process.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/base.h"
#include "base/tests/testmain.h"

#define BIG (1u << 20) /* beyond a pipe's or socket's buffer */

struct drain {
	int fd;
	char *got;
	size_t len;
};

/* Reads fd to its end in small pieces, so the writer fills and waits. */
static void *drain_run(void *arg)
{
	struct drain *d = arg;
	ssize_t n;

	while ((n = read(d->fd, d->got + d->len, 4096)) > 0)
		d->len += (size_t)n;
	return NULL;
}

static char *pattern(size_t len)
{
	char *p = malloc(len);

	for (size_t i = 0; i < len; i++)
		p[i] = (char)(i * 7 + i / 251);
	return p;
}

static void whole_buffer_through(int (*write_all)(int, const void *, size_t),
				 int fds[2])
{
	char *data = pattern(BIG);
	struct drain d = {.fd = fds[0], .got = malloc(BIG + 4096)};
	pthread_t t;

	assert_int_equal(pthread_create(&t, NULL, drain_run, &d), 0);
	assert_int_equal(write_all(fds[1], data, BIG), 0);
	close(fds[1]);
	pthread_join(t, NULL);
	close(fds[0]);
	assert_int_equal(d.len, BIG);
	assert_memory_equal(d.got, data, BIG);
	KN_FREE_ALL(d.got, data);
}

static void test_write_all_pipe(void **state)
{
	int fds[2];

	(void)state;
	assert_int_equal(pipe(fds), 0);
	whole_buffer_through(kn_write_all, fds);
}

static void test_send_all_socket(void **state)
{
	int fds[2];

	(void)state;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
	whole_buffer_through(kn_send_all, fds);
}

static void test_pwrite_all_keeps_offset(void **state)
{
	char path[] = "/tmp/kn-io-XXXXXX";
	char got[16] = {0};
	int fd = mkstemp(path);

	(void)state;
	assert_true(fd >= 0);
	unlink(path);
	assert_int_equal(kn_pwrite_all(fd, "world", 5, 10), 0);
	assert_int_equal(kn_pwrite_all(fd, "hello", 5, 0), 0);
	assert_int_equal(lseek(fd, 0, SEEK_CUR), 0);
	assert_int_equal(pread(fd, got, sizeof(got), 0), 15);
	assert_memory_equal(got, "hello\0\0\0\0\0world", 15);
	close(fd);
}

static void test_full_nonblocking_pipe_is_eagain(void **state)
{
	char *data = pattern(BIG);
	char *got = malloc(BIG);
	int fds[2];
	ssize_t n;

	(void)state;
	assert_int_equal(pipe2(fds, O_NONBLOCK), 0);
	assert_int_equal(kn_write_all(fds[1], data, BIG), -EAGAIN);
	/* What it took is the start of the buffer, in order. */
	n = read(fds[0], got, BIG);
	assert_true(n > 0 && (size_t)n < BIG);
	assert_memory_equal(got, data, (size_t)n);
	close(fds[0]);
	close(fds[1]);
	KN_FREE_ALL(got, data);
}

static void test_closed_peer_is_epipe(void **state)
{
	int fds[2];

	(void)state;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
	close(fds[0]);
	assert_int_equal(kn_send_all(fds[1], "x", 1), -EPIPE);
	close(fds[1]);
}

static void test_bad_descriptor(void **state)
{
	int fd = open("/dev/null", O_RDONLY);

	(void)state;
	assert_int_equal(kn_write_all(fd, "x", 1), -EBADF);
	assert_int_equal(kn_pwrite_all(fd, "x", 1, 0), -EBADF);
	close(fd);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_write_all_pipe),
	cmocka_unit_test(test_send_all_socket),
	cmocka_unit_test(test_pwrite_all_keeps_offset),
	cmocka_unit_test(test_full_nonblocking_pipe_is_eagain),
	cmocka_unit_test(test_closed_peer_is_epipe),
	cmocka_unit_test(test_bad_descriptor))
