/*
 * shimrt: what `kiln shim` does around a task beyond the shim's body in
 * src/exec (its process group, logs, timeout and exit record): the work
 * that needs blob stores, which the executors do without.
 *
 *   - before any task (local, Slurm or a pod): its prerequisites
 *     (KILN_REQUIRES), then its inputs (KILN_INPUTS) fetched into
 *     $KILN_INPUT_DIR with their digests checked (prepare.c);
 *   - in a Kubernetes pod (`kiln shim --kube`): the checkpoints restored,
 *     synced while the task runs and after it, its outputs uploaded, and
 *     the termination message the executor reads back (pod.c);
 *   - a pod's initContainer (`kiln shim --install DIR`): this binary and
 *     its libraries copied for a task image without kiln (install.c).
 */
#ifndef KILN_SHIMRT_H
#define KILN_SHIMRT_H

#include <stddef.h>

/*
 * A kn_shim_prepare function (exec.h; arg unused): the task's
 * prerequisites, then its inputs, from env. 0, or a negative errno with
 * why (len bytes) and a line in the task's log (log_fd).
 */
int kn_shimrt_prepare(void *arg, char *const *env, int log_fd, char *why,
		      size_t len);
/*
 * `kiln shim --kube -- argv...` with the pod's environment (KILN_TASK_DIR,
 * KILN_STORE, KILN_CHECKPOINT_*, KILN_OUTPUT_*, KILN_TERMINATION_LOG):
 * the exit code the container should end with.
 */
int kn_shimrt_kube(char **argv);
/* `kiln shim --install DIR`: 0, or 1 with why on stderr. */
int kn_shimrt_install(const char *dir);

#endif
