/*
 * kiln shim --dir TASK_DIR: internal, started by the local executor for
 * each task (src/exec/shim.c); kiln shim --slurm ATTEMPT_DIR: the same,
 * started by srun inside a Slurm allocation (src/exec/slurm.c); kiln
 * shim --kube -- CMD...: the same as a Kubernetes pod's first process,
 * kiln shim --install DIR, the pod's initContainer that puts kiln
 * there, and kiln shim --bridge TASK_DIR [--port P], what the server's
 * srun runs on a Slurm task's node to reach its shim's sessions (or a
 * port the task listens on). Not listed in `kiln --help`. What the shim does beyond the
 * task's process (prerequisites, inputs, a pod's checkpoints and
 * outputs) is src/shimrt's; this file picks the mode.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "exec/exec.h"
#include "shimrt/shimrt.h"

static int cmd_shim(int argc, char **argv);

const struct cli_command cmd_shim_entry = {
	.name = "shim",
	.run_raw = cmd_shim,
	.summary = "run one task (internal: started by the server)",
	.help = "usage: kiln shim --dir TASK_DIR | --slurm ATTEMPT_DIR |\n"
		"                 --kube -- CMD... | --install DIR |\n"
		"                 --bridge TASK_DIR [--port P]\n"
		"\n"
		"Internal: the server starts one shim per task; in a Kubernetes pod\n"
		"the initContainer runs --install and the task container --kube\n"
		"(docs/kubernetes.md, \"The shim in the pod\"); the server's srun\n"
		"runs --bridge on a Slurm task's node for an interactive session or\n"
		"a port-forward.\n",
	.hidden = true,
};

static int cmd_shim(int argc, char **argv)
{
	const struct kn_shim_prepare prep = {kn_shimrt_prepare, NULL};
	struct kn_error err;
	int rc, task_exit = 0;
	char *end;

	if (argc >= 2 && !strcmp(argv[1], "--kube"))
		return kn_shimrt_kube(argv + 2 + (argc > 2 &&
					     !strcmp(argv[2], "--")));
	if (argc == 3 && !strcmp(argv[1], "--install"))
		return kn_shimrt_install(argv[2]);
	if ((argc == 3 || (argc == 5 && !strcmp(argv[3], "--port"))) &&
	    !strcmp(argv[1], "--bridge")) {
		long port = argc == 5 ? strtol(argv[4], &end, 10) : 0;
		if (argc == 5 && (*end || port < 1 || port > 65535)) {
			fprintf(stderr, "kiln shim: --port: not a port: %s\n",
				argv[4]);
			return 2;
		}
		return kn_session_bridge(argv[2], (int)port);
	}
	if (argc != 3 || (strcmp(argv[1], "--dir") != 0 &&
			  strcmp(argv[1], "--slurm") != 0)) {
		fputs("usage: kiln shim --dir TASK_DIR | --slurm ATTEMPT_DIR | "
		      "--kube -- CMD... | --install DIR |\n"
		      "       --bridge TASK_DIR [--port P]\n"
		      "(internal: started by kiln server and in its pods)\n",
		      stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--slurm"))
		rc = kn_slurm_shim_main(argv[2], &prep, &task_exit, &err);
	else
		rc = kn_shim_main_prepared(argv[2], &prep, &err);
	if (rc != 0)
		fprintf(stderr, "kiln shim: %s\n", err.message);
	return rc != 0 ? rc : task_exit;
}
