/*
 * The Slurm executor inside the allocation: `kiln shim --slurm
 * ATTEMPT_DIR`, one per rank as srun starts them, picks its task
 * directory by SLURM_PROCID, sets the rank variables from Slurm's and
 * runs its task as the local executor's shim does (slurm.c has the rest).
 */
#include "exec.h"
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * TASK_DIR.node: where the server's srun finds this task's shim for a
 * session. Without it the task runs and takes no session.
 */
static void session_node_record(const char *task_dir)
{
	const char *node = getenv("SLURMD_NODENAME");
	char *path = kn_asprintf("%s" SESSION_NODE_SUFFIX, task_dir);
	char *line = kn_asprintf("%s\n", node ? node : "");

	if (node && *node)
		kn_write_file_replace(path, line, strlen(line), 0600);
	KN_FREE_ALL(line, path);
}

int kn_slurm_shim_main(const char *attempt_dir,
		       const struct kn_shim_prepare *prep, int *task_exit,
		       struct kn_error *err)
{
	const char *procid = getenv("SLURM_PROCID");
	const char *ntasks = getenv("SLURM_NTASKS");
	const char *localid = getenv("SLURM_LOCALID");
	const char *nodeid = getenv("SLURM_NODEID");
	const char *nodelist = getenv("SLURM_JOB_NODELIST");
	const char *cuda = getenv("CUDA_VISIBLE_DEVICES");
	char master[256], *task_dir, *status, *recorded = NULL;
	int rc;

	if (!procid || !ntasks || !nodelist) {
		kn_errorf(err, KN_EINVAL, NULL,
			  "SLURM_PROCID, SLURM_NTASKS or SLURM_JOB_NODELIST "
			  "is not set: run under srun");
		return 1;
	}
	task_dir = kn_asprintf("%s/%s", attempt_dir, procid);
	status = kn_asprintf("%s/status.json", task_dir);
	session_node_record(task_dir);
	if (access(status, F_OK) == 0 ||
	    exec_exit_record_read(task_dir, &recorded, NULL) == 0) {
		/* Slurm restarted an attempt that kiln has already seen end. */
		fprintf(stderr, "kiln shim: %s has already ended; not run "
			"again\n", task_dir);
		KN_FREE_ALL(recorded, status, task_dir);
		return 0;
	}
	kn_slurm_first_host(nodelist, master, sizeof(master));
	setenv("RANK", procid, 1);
	setenv("WORLD_SIZE", ntasks, 1);
	setenv("LOCAL_RANK", localid ? localid : "0", 1);
	setenv("NODE_RANK", nodeid ? nodeid : "0", 1);
	setenv("MASTER_ADDR", master, 1);
	/* No GPU in the allocation: hide them all, as the local executor. */
	setenv("CUDA_VISIBLE_DEVICES", cuda ? cuda : "", 1);
	setenv("NVIDIA_VISIBLE_DEVICES", cuda && *cuda ? cuda : "void", 1);
	*task_exit = 0;
	rc = exec_shim_main(task_dir, prep, KN_SANDBOX_SLURM, err);
	if (rc == 0) {
		struct kn_task_status st;
		struct kn_error ignored;

		if (exec_read_status(task_dir, &st, &ignored) == 0)
			*task_exit = st.signal ? 128 + st.signal
					       : st.exit_code & 255;
	}
	KN_FREE_ALL(status, task_dir);
	return rc;
}
