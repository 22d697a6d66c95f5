/*
 * io: writing a whole buffer, and reading past signals. write(2),
 * pwrite(2) and send(2) may each take less than they are given or stop
 * at a signal; every caller needs the same loop around them, so it lives
 * here once, with the call it makes as a parameter rather than three
 * copies that drift apart. pread(2) too may stop at a signal.
 */
#include "base/base.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

enum io_call { IO_WRITE, IO_PWRITE, IO_SEND };

static ssize_t io_once(enum io_call call, int fd, const char *p, size_t len,
		       int64_t at)
{
	switch (call) {
	case IO_PWRITE:
		return pwrite(fd, p, len, (off_t)at);
	case IO_SEND:
		return send(fd, p, len, MSG_NOSIGNAL);
	case IO_WRITE:
		break;
	}
	return write(fd, p, len);
}

static int io_all(enum io_call call, int fd, const void *data, size_t len,
		  int64_t at)
{
	const char *p = data;

	while (len) {
		ssize_t n = io_once(call, fd, p, len, at);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
		at += n;
	}
	return 0;
}

int kn_write_all(int fd, const void *data, size_t len)
{
	return io_all(IO_WRITE, fd, data, len, 0);
}

int kn_pwrite_all(int fd, const void *data, size_t len, int64_t at)
{
	return io_all(IO_PWRITE, fd, data, len, at);
}

int kn_send_all(int fd, const void *data, size_t len)
{
	return io_all(IO_SEND, fd, data, len, 0);
}

ssize_t kn_pread(int fd, void *buf, size_t len, int64_t at)
{
	ssize_t n;

	do
		n = pread(fd, buf, len, (off_t)at);
	while (n < 0 && errno == EINTR);
	return n < 0 ? -errno : n;
}
