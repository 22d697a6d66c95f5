/*
 * Whose is a port (kn_task_port_listening): a listening socket held by
 * one of a task's processes, for port-forward, which must reach the
 * task's service and no other on the machine's loopback. The server
 * asks on a worker for its local tasks; on a Slurm node the bridge asks
 * for its task. Listeners come from the kernel's socket diagnostics
 * (sock_diag: only listeners are dumped, not every connection
 * /proc/net/tcp would list), their holders from /proc/PID/fd.
 */
#include "exec.h"

#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <sys/socket.h>
#include <unistd.h>

#define LISTENERS_MAX 16

/*
 * The inodes of the TCP sockets of family listening on port, appended
 * to inodes, asked of the kernel's socket diagnostics (sock_diag): only
 * listeners are dumped, not every connection /proc/net/tcp would list.
 */
static void listeners_of(int family, int port, unsigned long *inodes,
			 size_t *n)
{
	struct {
		struct nlmsghdr nlh;
		struct inet_diag_req_v2 r;
	} req = {
		.nlh = {.nlmsg_len = sizeof(req),
			.nlmsg_type = SOCK_DIAG_BY_FAMILY,
			.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP},
		.r = {.sdiag_family = (uint8_t)family,
		      .sdiag_protocol = IPPROTO_TCP,
		      .idiag_states = 1u << 10 /* TCP_LISTEN */},
	};
	char buf[32768]; /* on a worker: its own */
	int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC,
			NETLINK_SOCK_DIAG);
	bool done = false;

	if (fd < 0)
		return;
	if (send(fd, &req, sizeof(req), 0) != (ssize_t)sizeof(req))
		done = true;
	while (!done) {
		ssize_t len = recv(fd, buf, sizeof(buf), 0);
		struct nlmsghdr *h = (struct nlmsghdr *)buf;

		if (len <= 0)
			break;
		for (; NLMSG_OK(h, (size_t)len); h = NLMSG_NEXT(h, len)) {
			const struct inet_diag_msg *m = NLMSG_DATA(h);

			if (h->nlmsg_type == NLMSG_DONE ||
			    h->nlmsg_type == NLMSG_ERROR) {
				done = true;
				break;
			}
			if (ntohs(m->id.idiag_sport) == port &&
			    *n < LISTENERS_MAX)
				inodes[(*n)++] = m->idiag_inode;
		}
	}
	close(fd);
}

static size_t listening_inodes(int port, unsigned long *inodes)
{
	size_t n = 0;

	listeners_of(AF_INET, port, inodes, &n);
	listeners_of(AF_INET6, port, inodes, &n);
	return n;
}

/* Whether process pid holds a socket whose inode is in inodes. */
static bool holds_socket(int pid, const unsigned long *inodes, size_t n)
{
	char path[64], link[64];
	struct dirent *e;
	bool found = false;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/fd", pid);
	d = opendir(path);
	while (d && !found && (e = readdir(d))) {
		unsigned long inode;
		ssize_t len = readlinkat(dirfd(d), e->d_name, link,
					 sizeof(link) - 1);

		if (len <= 0)
			continue;
		link[len] = '\0';
		if (sscanf(link, "socket:[%lu]", &inode) != 1)
			continue;
		for (size_t i = 0; i < n && !found; i++)
			found = inodes[i] == inode;
	}
	if (d)
		closedir(d);
	return found;
}

/* The task's processes looked at, at most: a bound, not a size limit
   on tasks (one with more is refused with its listener unfound). */
#define TREE_MAX 4096

/* Append pid's children (those of each of its threads) to tree. */
static void add_children(int pid, int *tree, size_t *n)
{
	char path[64], buf[4096];
	struct dirent *e;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	d = opendir(path);
	while (d && (e = readdir(d))) {
		char *p = buf, *end;
		ssize_t len;
		int fd;

		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%.16s/children",
			 pid, e->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		len = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
		if (fd >= 0)
			close(fd);
		if (len <= 0)
			continue;
		buf[len] = '\0';
		for (long child = strtol(p, &end, 10); end != p && *n < TREE_MAX;
		     child = strtol(p, &end, 10)) {
			tree[(*n)++] = (int)child;
			p = end;
		}
	}
	if (d)
		closedir(d);
}

/*
 * The task's processes are the shim's descendants, walked through each
 * thread's children: an orphan inside the task is adopted by its pid
 * namespace's init, itself the shim's child, so none leaves the tree.
 */
bool kn_task_port_listening(int shim_pid, int port)
{
	unsigned long inodes[LISTENERS_MAX];
	size_t n = listening_inodes(port, inodes), head = 0, tail = 0;
	bool listens = false;
	int *tree;

	if (!n)
		return false;
	tree = kn_xcalloc(TREE_MAX, sizeof(*tree));
	add_children(shim_pid, tree, &tail);
	while (head < tail && !listens) {
		int pid = tree[head++];

		listens = holds_socket(pid, inodes, n);
		add_children(pid, tree, &tail);
	}
	free(tree);
	return listens;
}

