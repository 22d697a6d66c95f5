/*
 * kiln shim --install DIR: a pod's initContainer, which puts this kiln
 * binary and the shared libraries it loaded under DIR (DIR/bin/kiln,
 * DIR/lib) so a task image without kiln can run its shim.
 */
#include "shimrt/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "base/base.h"
#include "ckpt/ckpt.h"
#include "exec/exec.h"
#include "sched/sched.h"
#include "spec/spec.h"

static int copy_file(const char *from, const char *to, mode_t mode)
{
	char buf[65536], *tmp = kn_asprintf("%s.tmp", to);
	int in = open(from, O_RDONLY | O_CLOEXEC), out = -1, rc = 0;
	ssize_t n;

	if (in >= 0)
		out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	if (in < 0 || out < 0)
		rc = -errno;
	while (rc == 0 && (n = read(in, buf, sizeof(buf))) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || write(out, buf, (size_t)n) != n)
			rc = n < 0 ? -errno : -EIO;
	}
	if (out >= 0 && (close(out) < 0 && rc == 0))
		rc = -errno;
	if (in >= 0)
		close(in);
	if (rc == 0 && (fchmodat(AT_FDCWD, tmp, mode, 0) < 0 ||
			rename(tmp, to) < 0))
		rc = -errno;
	if (rc < 0)
		unlink(tmp);
	free(tmp);
	return rc;
}

struct install {
	const char *lib_dir;
	const char *interp; /* the dynamic loader's path */
	int rc;
	char failed[512];
};

static int install_lib(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct install *in = arg;
	const char *base;
	char *dest;
	int rc;

	(void)size;
	/* The executable itself has no name here; the vDSO no file. */
	if (!info->dlpi_name || info->dlpi_name[0] != '/' || in->rc < 0)
		return 0;
	base = strrchr(info->dlpi_name, '/') + 1;
	/* The loader under one fixed name: the pod's command names it. */
	if (in->interp && !strcmp(info->dlpi_name, in->interp))
		dest = kn_asprintf("%s/ld.so", in->lib_dir);
	else
		dest = kn_asprintf("%s/%s", in->lib_dir, base);
	rc = copy_file(info->dlpi_name, dest, 0755);
	if (rc < 0) {
		in->rc = rc;
		snprintf(in->failed, sizeof(in->failed), "%s: %s",
			 info->dlpi_name, strerror(-rc));
	}
	free(dest);
	return 0;
}

/* The PT_INTERP of the running executable, or NULL (static). */
static const char *interpreter(void)
{
	const ElfW(Phdr) *ph = (const ElfW(Phdr) *)getauxval(AT_PHDR);
	size_t n = getauxval(AT_PHNUM);
	uintptr_t bias = 0;

	for (size_t i = 0; ph && i < n; i++)
		if (ph[i].p_type == PT_PHDR)
			bias = (uintptr_t)ph - ph[i].p_vaddr;
	for (size_t i = 0; ph && i < n; i++)
		if (ph[i].p_type == PT_INTERP)
			return (const char *)(bias + ph[i].p_vaddr);
	return NULL;
}

/*
 * kiln and every shared library it runs with into DIR/bin and DIR/lib,
 * the loader as DIR/lib/ld.so: the task's image need not have kiln's
 * libraries (nor the same C library), since the pod runs
 * DIR/lib/ld.so --library-path DIR/lib DIR/bin/kiln.
 */
int kn_shimrt_install(const char *dir)
{
	struct install in = {0};
	char *bin = kn_asprintf("%s/bin", dir), *lib = kn_asprintf("%s/lib", dir);
	char *exe = kn_asprintf("%s/kiln", bin);
	int rc;

	rc = kn_mkdir_p(bin, 0755);
	if (rc == 0)
		rc = kn_mkdir_p(lib, 0755);
	if (rc < 0) {
		fprintf(stderr, "kiln shim --install: %s: %s\n", dir,
			strerror(-rc));
		goto out;
	}
	rc = copy_file("/proc/self/exe", exe, 0755);
	if (rc < 0) {
		fprintf(stderr, "kiln shim --install: %s: %s\n", exe,
			strerror(-rc));
		goto out;
	}
	in.lib_dir = lib;
	in.interp = interpreter();
	dl_iterate_phdr(install_lib, &in);
	rc = in.rc;
	if (rc < 0)
		fprintf(stderr, "kiln shim --install: %s\n", in.failed);
out:
	KN_FREE_ALL(exe, lib, bin);
	return rc < 0 ? 1 : 0;
}
