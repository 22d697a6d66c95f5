/*
 * Opening files a task can write. A task owns its task, checkpoint and
 * output directories, so anything in them may be a symbolic link to a
 * server secret, a FIFO that blocks open(2) forever, or a device node.
 * Every such file is opened here and nowhere else.
 *
 * The path is resolved beneath a trusted directory with openat2(2)
 * (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS) as an
 * O_PATH descriptor, which opens nothing: a FIFO does not block and a
 * device driver is never called. Only after fstat says it is a regular
 * file (or a directory, when asked) and belongs to the expected owner is
 * it reopened for reading through /proc/self/fd, which reaches that very
 * inode, so a rename in between cannot swap in something else. Where
 * openat2 is missing (kernels before 5.6) or refuses a symbolic link, the
 * path is walked one component at a time with O_NOFOLLOW, which does the
 * same job and names the offending component in the error.
 */
#include "base/base.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Deeper paths than any task file the server reads. */
#define MAX_COMPONENTS 32

bool kn_task_file_refused(const struct kn_error *err)
{
	return err->code == KN_EPERM &&
	       strcmp(err->field, KN_TASK_FILE_REFUSED) == 0;
}

const char *kn_file_kind(mode_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG:
		return "a regular file";
	case S_IFDIR:
		return "a directory";
	case S_IFLNK:
		return "a symbolic link";
	case S_IFIFO:
		return "a FIFO";
	case S_IFSOCK:
		return "a socket";
	case S_IFCHR:
		return "a character device";
	case S_IFBLK:
		return "a block device";
	default:
		return "an unknown kind of file";
	}
}

static int open_beneath(int dirfd, const char *name)
{
	struct open_how how = {
		.flags = O_PATH | O_CLOEXEC | O_NOFOLLOW,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
			   RESOLVE_NO_MAGICLINKS,
	};
	long fd = syscall(SYS_openat2, dirfd, name, &how, sizeof(how));

	return fd < 0 ? -errno : (int)fd;
}

/*
 * The same one component at a time: an O_PATH descriptor for name, or a
 * negative errno with err naming the first component that is a link.
 */
static int open_walk(int dirfd, const char *name, struct kn_error *err)
{
	char *copy = kn_xstrdup(name), *save = NULL;
	int cur = dirfd, rc = 0, depth = 0;

	for (char *part = strtok_r(copy, "/", &save); part;
	     part = strtok_r(NULL, "/", &save)) {
		struct stat st;
		int next = openat(cur, part, O_PATH | O_CLOEXEC | O_NOFOLLOW);

		if (next < 0) {
			rc = errno == ENOENT ? kn_errorf(err, KN_ENOTFOUND, NULL,
							 "%s does not exist", name)
					     : kn_errorf(err, KN_EIO, NULL,
							 "%s: %s", name,
							 strerror(errno));
			break;
		}
		if (cur != dirfd)
			close(cur);
		cur = next;
		if (fstat(cur, &st) < 0 || S_ISLNK(st.st_mode)) {
			rc = kn_errorf(err, KN_EPERM, KN_TASK_FILE_REFUSED,
				       "%.*s is a symbolic link, and links in "
				       "task files are never followed",
				       (int)(part - copy + strlen(part)), name);
			break;
		}
		if (++depth > MAX_COMPONENTS) {
			rc = kn_errorf(err, KN_EINVAL, NULL,
				       "%s is nested too deeply", name);
			break;
		}
	}
	free(copy);
	if (rc < 0) {
		if (cur != dirfd)
			close(cur);
		return rc;
	}
	return cur;
}

/* A name with no absolute start and no ".." can only stay beneath. */
static int check_name(const char *name, struct kn_error *err)
{
	const char *p = name;

	if (!*name || *name == '/')
		return kn_errorf(err, KN_EINVAL, NULL,
				 "task file name \"%s\" must be a relative path",
				 name);
	while (*p) {
		size_t n = strcspn(p, "/");
		if (n == 2 && p[0] == '.' && p[1] == '.')
			return kn_errorf(err, KN_EINVAL, NULL,
					 "task file name \"%s\" may not hold ..",
					 name);
		p += n;
		p += strspn(p, "/");
	}
	return 0;
}

static int check_kind(int pathfd, const char *name, int flags, uid_t owner,
		      struct kn_error *err)
{
	struct stat st;
	bool want_dir = (flags & O_DIRECTORY) != 0;

	if (fstat(pathfd, &st) < 0)
		return kn_errorf(err, KN_EIO, NULL, "%s: %s", name,
				 strerror(errno));
	if (want_dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))
		return kn_errorf(err, KN_EPERM, KN_TASK_FILE_REFUSED,
				 "%s is %s, not %s", name,
				 kn_file_kind(st.st_mode),
				 want_dir ? "a directory" : "a regular file");
	if (owner != KN_ANY_OWNER && st.st_uid != owner)
		return kn_errorf(err, KN_EPERM, KN_TASK_FILE_REFUSED,
				 "%s belongs to uid %u, not the expected %u",
				 name, (unsigned)st.st_uid, (unsigned)owner);
	return 0;
}

int kn_task_file_openat(int dirfd, const char *name, int flags, uid_t owner,
			struct kn_error *err)
{
	char proc[64];
	int pathfd, fd, rc;

	rc = check_name(name, err);
	if (rc < 0)
		return rc;
	pathfd = open_beneath(dirfd, name);
	if (pathfd == -ENOENT)
		return kn_errorf(err, KN_ENOTFOUND, NULL, "%s does not exist",
				 name);
	if (pathfd < 0)
		pathfd = open_walk(dirfd, name, err);
	if (pathfd < 0)
		return pathfd;
	rc = check_kind(pathfd, name, flags, owner, err);
	if (rc < 0)
		goto out;
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", pathfd);
	fd = open(proc, (flags & ~(O_CREAT | O_TRUNC | O_EXCL | O_NOFOLLOW)) |
				O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		rc = kn_errorf(err, KN_EIO, NULL, "%s: %s", name,
			       strerror(errno));
		goto out;
	}
	rc = fd;
out:
	close(pathfd);
	return rc;
}

int kn_task_file_open(const char *dir, const char *name, int flags,
		      uid_t owner, struct kn_error *err)
{
	/* Its last component may be the task's doing too (a checkpoint). */
	int dirfd = open(dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int rc;

	if (dirfd < 0 && (errno == ELOOP || errno == ENOTDIR))
		return kn_errorf(err, KN_EPERM, KN_TASK_FILE_REFUSED,
				 "%s is not a directory (a symbolic link?)",
				 dir);
	if (dirfd < 0)
		return errno == ENOENT
			       ? kn_errorf(err, KN_ENOTFOUND, NULL,
					   "%s does not exist", dir)
			       : kn_errorf(err, KN_EIO, NULL, "%s: %s", dir,
					   strerror(errno));
	rc = kn_task_file_openat(dirfd, name, flags, owner, err);
	close(dirfd);
	return rc;
}

int kn_task_file_read(const char *dir, const char *name, size_t max,
		      char **out, size_t *out_len, struct kn_error *err)
{
	int fd = kn_task_file_open(dir, name, O_RDONLY, KN_ANY_OWNER, err);
	int rc;

	if (fd < 0)
		return fd;
	rc = kn_read_fd(fd, max, out, out_len);
	close(fd);
	if (rc == -EFBIG)
		kn_errorf(err, KN_ETOOBIG, NULL, "%s is larger than %zu bytes",
			  name, max);
	else if (rc < 0)
		kn_errorf(err, KN_EIO, NULL, "%s: %s", name, strerror(-rc));
	return rc;
}
