/*
 * base/datapath.c: where the shipped data files are, found at run time.
 *
 * A binary must work wherever it is installed and wherever its source tree
 * went, so no source path is compiled into a lookup that an installed
 * binary makes: the build tree is consulted only by a binary that is
 * itself inside it (the developer's build/ and the unit tests).
 */
#include "base/base.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* KN_BUILD_ROOT, KN_SOURCE_DATA_DIR and KN_INSTALL_DATA_DIR come from
   meson: the build tree, its source's data/, and the install's. */

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
		share = kn_asprintf("%s/../share/kiln", dir);
		if (is_dir(share))
			return share;
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
