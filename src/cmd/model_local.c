/*
 * A model blob handed to a server on this machine by descriptor
 * (docs/registry.md, "On the same machine"): the file is opened here,
 * with this user's rights, and the open descriptor passed over the
 * server's push.sock (SCM_RIGHTS) with the token and the file's size;
 * the server copies and hashes it and answers with the digest. Nothing
 * is read here, and no byte crosses TCP.
 */
#include "cmd/model_upload.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/base.h"
#include "cmd/cli_client.h"
#include "registry/registry.h"

/* The answer: {"digest", ...} or {"error": {"message"}}. */
#define ANSWER_MAX 4096

bool model_local_same_machine(json_t *local)
{
	const char *boot_id = json_string_value(json_object_get(local,
								"boot_id"));
	char *mine = NULL;
	size_t len = 0;
	bool same;

	if (!boot_id || !json_string_value(json_object_get(local, "socket")) ||
	    kn_read_file("/proc/sys/kernel/random/boot_id", 63, &mine,
			 &len) < 0)
		return false;
	same = strlen(boot_id) == strcspn(mine, "\n") &&
	       !strncmp(mine, boot_id, strlen(boot_id));
	free(mine);
	return same;
}

/* Connected to the socket: its descriptor, or -1 (use HTTP). */
static int connect_local(const char *path)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	int fd;

	if (strlen(path) >= sizeof(addr.sun_path))
		return -1;
	memcpy(addr.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

static int send_request(int sock, int file, const char *token, int64_t size)
{
	json_t *req = json_pack("{s:s, s:I}", "token", token ? token : "",
				"size", (json_int_t)size);
	char *text = json_dumps(req, JSON_COMPACT);
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} control;
	struct iovec iov = {.iov_base = text, .iov_len = strlen(text)};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = control.buf,
			     .msg_controllen = sizeof(control.buf)};
	struct cmsghdr *h = CMSG_FIRSTHDR(&msg);
	ssize_t n;

	memset(control.buf, 0, sizeof(control.buf));
	h->cmsg_level = SOL_SOCKET;
	h->cmsg_type = SCM_RIGHTS;
	h->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(h), &file, sizeof(file));
	n = sendmsg(sock, &msg, MSG_NOSIGNAL);
	free(text);
	json_decref(req);
	return n < 0 ? -errno : 0;
}

int model_upload_local(struct cli_ctx *ctx, const char *socket_path,
		       const char *token, struct model_upload *u)
{
	char answer_text[ANSWER_MAX + 1];
	json_t *answer = NULL, *error;
	const char *digest;
	int file = open(u->path, O_RDONLY | O_CLOEXEC), sock = -1, rc;
	ssize_t n;

	if (file < 0 || fstat(file, &u->st) < 0) {
		rc = cli_fail(ctx, "%s: %s", u->path, strerror(errno));
		goto out;
	}
	sock = connect_local(socket_path);
	if (sock < 0 || send_request(sock, file, token, u->st.st_size) < 0) {
		rc = MODEL_UPLOAD_OVER_HTTP;
		goto out;
	}
	do
		n = recv(sock, answer_text, ANSWER_MAX, 0);
	while (n < 0 && errno == EINTR);
	if (n <= 0) {
		/* The server went away mid-copy: HTTP says why, if it is. */
		rc = MODEL_UPLOAD_OVER_HTTP;
		goto out;
	}
	answer = json_loadb(answer_text, (size_t)n, 0, NULL);
	error = json_object_get(answer, "error");
	digest = json_string_value(json_object_get(answer, "digest"));
	if (error)
		rc = cli_fail(ctx, "%s: %s", u->path,
			      json_string_value(json_object_get(error,
								"message")));
	else if (!kn_sha256_hex_ok(digest))
		rc = cli_fail(ctx, "%s: the server's answer names no digest",
			      u->path);
	else if (!kn_fd_unchanged(file, &u->st))
		rc = cli_fail(ctx, "%s changed while it was pushed; push again "
			      "once it is written", u->path);
	else {
		memcpy(u->digest, digest, sizeof(u->digest));
		rc = 0;
	}
out:
	json_decref(answer);
	if (sock >= 0)
		close(sock);
	if (file >= 0)
		close(file);
	return rc;
}
