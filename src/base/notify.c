/*
 * base/notify.c: the service manager's readiness protocol, by hand.
 *
 * systemd's Type=notify passes a datagram socket in $NOTIFY_SOCKET; a
 * service says "READY=1" on it once it serves. The protocol is one
 * sendto(), so kiln speaks it itself rather than link libsystemd into a
 * binary that must also run where there is no systemd (Slurm nodes,
 * containers).
 */
#include "base/base.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int kn_notify(const char *state)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	size_t len;
	socklen_t addr_len;
	ssize_t sent;
	int fd, e;

	if (!path || !*path)
		return 0;
	len = strlen(path);
	/* A path, or an abstract name that '@' stands for. */
	if ((path[0] != '/' && path[0] != '@') || len >= sizeof(addr.sun_path))
		return -EINVAL;
	memcpy(addr.sun_path, path, len);
	if (path[0] == '@')
		addr.sun_path[0] = '\0';
	addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	sent = sendto(fd, state, strlen(state), MSG_NOSIGNAL,
		      (const struct sockaddr *)&addr, addr_len);
	e = errno;
	close(fd);
	return sent < 0 ? -e : 0;
}
