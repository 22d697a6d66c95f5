/*
 * kiln-shim --dir TASK_DIR: the local executor's task shim (src/exec/shim.c)
 * as a program of its own, started by the server for each task that has
 * nothing to fetch or check before it runs. It links the shim, the
 * sandbox and the cgroups and nothing else of kiln (no libcrypto, event
 * loop, SQLite or YAML), so a task start no longer loads and relocates the
 * whole kiln binary: that was most of a shim's own CPU time. `kiln shim
 * --dir` stays the same shim with the blob stores, for tasks with inputs
 * or prerequisites and where kiln-shim is not installed.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "exec/exec.h"

/* Never run a task whose inputs were not fetched: refuse it, named. */
static int refuse_prepare(void *arg, char *const *env, int log_fd, char *why,
			  size_t len)
{
	(void)arg;
	if (!kn_shim_needs_prepare(env))
		return 0;
	snprintf(why, len, "kiln-shim fetches no inputs and checks no "
		 "prerequisites; `kiln shim --dir` does");
	dprintf(log_fd, "kiln: %s\n", why);
	return -ENOTSUP;
}

int main(int argc, char **argv)
{
	const struct kn_shim_prepare prep = {refuse_prepare, NULL};
	struct kn_error err;

	if (argc != 3 || strcmp(argv[1], "--dir") != 0) {
		fputs("usage: kiln-shim --dir TASK_DIR\n(internal: started by "
		      "kiln server for each task)\n", stderr);
		return 2;
	}
	if (kn_shim_main_prepared(argv[2], &prep, &err) != 0) {
		fprintf(stderr, "kiln-shim: %s\n", err.message);
		return 1;
	}
	return 0;
}
