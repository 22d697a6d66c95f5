/*
 * base/datapath.c: where the shipped data files are, found at run time,
 * and reading the config files an installation keeps beside them.
 *
 * A binary must work wherever it is installed and wherever its source tree
 * went, so no source path is compiled into a lookup that an installed
 * binary makes: the build tree is consulted only by a binary that is
 * itself inside it (the developer's build/ and the unit tests).
 */
#include "base/base.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* KN_BUILD_ROOT, KN_SOURCE_DATA_DIR and KN_INSTALL_DATA_DIR come from
   meson: the build tree, its source's data/, and the install's;
   KN_LIBEXEC_DIR is the prefix's libexec directory, relative to it. */

static bool is_dir(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The directory of the running executable, or "" when unknown. */
static void exe_dir(char *out, size_t size)
{
	char path[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
	char *slash;

	out[0] = '\0';
	if (n <= 0)
		return;
	path[n] = '\0';
	slash = strrchr(path, '/');
	if (!slash)
		return;
	*slash = '\0';
	kn_strlcpy(out, path, size);
}

static bool under(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	return !strncmp(path, dir, n) && (path[n] == '/' || path[n] == '\0');
}

char *kn_data_dir(void)
{
	const char *env = getenv("KILN_DATA_DIR");
	char dir[PATH_MAX];
	char *share;

	if (env && *env)
		return kn_xstrdup(env);
	exe_dir(dir, sizeof(dir));
	if (dir[0] && under(dir, KN_BUILD_ROOT) && is_dir(KN_SOURCE_DATA_DIR))
		return kn_xstrdup(KN_SOURCE_DATA_DIR);
	if (dir[0]) {
		char resolved[PATH_MAX];

		share = kn_asprintf("%s/../share/kiln", dir);
		/* Named without the "bin/..", as a person would write it. */
		if (is_dir(share) && realpath(share, resolved)) {
			free(share);
			return kn_xstrdup(resolved);
		}
		free(share);
	}
	return kn_xstrdup(KN_INSTALL_DATA_DIR);
}

char *kn_data_path(const char *name)
{
	char *dir = kn_data_dir();
	char *path = kn_asprintf("%s/%s", dir, name);

	free(dir);
	return path;
}

/* Run by a root server as root: only root's (or this user's) to change. */
static bool trusted_program(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode) &&
	       (st.st_uid == 0 || st.st_uid == geteuid()) &&
	       !(st.st_mode & (S_IWGRP | S_IWOTH)) && access(path, X_OK) == 0;
}

char *kn_libexec_path(const char *name)
{
	char dir[PATH_MAX];
	char *path;

	exe_dir(dir, sizeof(dir));
	if (!dir[0])
		return NULL;
	path = KN_LIBEXEC_DIR[0] == '/'
		       ? kn_asprintf("%s/kiln/%s", KN_LIBEXEC_DIR, name)
		       : kn_asprintf("%s/../%s/kiln/%s", dir, KN_LIBEXEC_DIR,
				     name);
	if (trusted_program(path))
		return path;
	free(path);
	path = kn_asprintf("%s/%s", dir, name);
	if (trusted_program(path))
		return path;
	free(path);
	return NULL;
}

/* Who may have written the file: only this user or root. */
static int check_file_owner(const char *path, const struct stat *st,
			    const char *why, struct kn_error *err)
{
	if (!S_ISREG(st->st_mode))
		return kn_errorf(err, KN_EINVAL, path, "%s: is %s, not a file",
				 path, kn_file_kind(st->st_mode));
	if (st->st_uid != geteuid() && st->st_uid != 0)
		return kn_errorf(err, KN_EPERM, path, "%s: owned by uid %u; a "
				 "config file must be owned by the user that "
				 "reads it (uid %u) or root", path,
				 (unsigned)st->st_uid, (unsigned)geteuid());
	if (st->st_mode & (S_IWGRP | S_IWOTH))
		return kn_errorf(err, KN_EPERM, path, "%s: mode %04o lets "
				 "others write it; a config file %s: chmod "
				 "go-w %s", path,
				 (unsigned)(st->st_mode & 07777), why, path);
	return 0;
}

int kn_config_file_read(const char *path, size_t max, const char *why,
			char **text, size_t *len, struct kn_error *err)
{
	struct stat st;
	int fd, rc;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		int e = errno;

		return kn_errorf(err, e == ENOENT ? KN_ENOTFOUND : KN_EIO, path,
				 "%s: %s", path, strerror(e));
	}
	rc = fstat(fd, &st) < 0 ? kn_errorf(err, KN_EIO, path, "%s: %s", path,
					    strerror(errno)) :
				  check_file_owner(path, &st, why, err);
	if (rc == 0 && kn_read_fd(fd, max, text, len) < 0)
		rc = kn_errorf(err, KN_EIO, path, "%s: cannot read it (at most "
			       "%zu bytes)", path, max);
	close(fd);
	return rc;
}
