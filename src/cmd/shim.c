/*
 * kiln shim --dir TASK_DIR: internal, started by the local executor for
 * each task (see src/exec/shim.c); kiln shim --slurm ATTEMPT_DIR: the
 * same, started by srun inside a Slurm allocation (src/exec/slurm.c).
 * Not listed in `kiln --help`.
 */
#include "cmd/cli.h"

#include <stdio.h>
#include <string.h>

#include "exec/exec.h"

int cmd_shim(int argc, char **argv)
{
	struct kn_error err;
	int rc;

	if (argc != 3 || (strcmp(argv[1], "--dir") != 0 &&
			  strcmp(argv[1], "--slurm") != 0)) {
		fputs("usage: kiln shim --dir TASK_DIR | --slurm ATTEMPT_DIR "
		      "(internal: started by kiln server)\n", stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--slurm"))
		rc = kn_slurm_shim_main(argv[2], &err);
	else
		rc = kn_shim_main(argv[2], &err);
	if (rc != 0)
		fprintf(stderr, "kiln shim: %s\n", err.message);
	return rc;
}
