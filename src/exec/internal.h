/* Shared between the executors' files; not a public header. */
#ifndef KILN_EXEC_INTERNAL_H
#define KILN_EXEC_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "exec.h"
#include "sandbox/sandbox.h"

/*
 * The shim's body for each executor: kn_shim_main_prepared (local),
 * kn_slurm_shim_main and kn_kube_shim_run differ only in host.
 */
int exec_shim_main(const char *task_dir, const struct kn_shim_prepare *prep,
		   enum kn_sandbox_host host, struct kn_error *err);

/*
 * Write TASK_DIR/launch.json, what the shim runs. Environment entries
 * whose names are in drop (NULL-terminated, or NULL) are left out: the
 * Slurm shim sets those from Slurm's variables. timeout_signal is what the
 * shim sends when the timeout runs out (0 = SIGTERM); stop_poll_ms > 0 has
 * the shim look for TASK_DIR/stop.json that often instead of waiting for
 * SIGTERM.
 */
int exec_write_launch(const struct kn_task_launch *l,
		      const char *const *drop, int timeout_signal,
		      int stop_poll_ms, struct kn_error *err);

/*
 * TASK_DIR/status.json, the shim's record of the exit: 0 and *st (ended;
 * what the record does not say, zero), -ENOENT while there is none,
 * another -errno when unreadable or not a regular file (err says why;
 * the task can write its directory).
 */
int exec_read_status(const char *task_dir, struct kn_task_status *st,
		     struct kn_error *err);
/* *st: ended now, lost, with why as its reason. */
void exec_ended_lost(struct kn_task_status *st, const char *why);

/*
 * TASK_DIR/exit.rec (exitrec.c), the shim's exit record of a fixed size,
 * written whole before the task starts and overwritten in place when it
 * ends, so a full disk cannot keep the exit from being recorded.
 *
 * prepare creates it saying "no exit yet", unsynced, and gives its open
 * descriptor; write overwrites it with payload (the status JSON, not
 * empty) and syncs it and task_dir; read gives the payload (malloc'd): -ENOENT while
 * there is none or no record, -EBADMSG when torn or not a record, or the
 * errors of kn_task_file_read.
 */
#define EXEC_EXIT_RECORD "exit.rec"
#define EXEC_EXIT_RECORD_SIZE 4096
int exec_exit_record_prepare(const char *task_dir, int *fd_out);
int exec_exit_record_write(const char *task_dir, int fd, const char *payload,
			   size_t len);
int exec_exit_record_read(const char *task_dir, char **payload,
			  struct kn_error *err);

/*
 * The name of a task's cgroup, "task-" and FNV-1a of its directory, so a
 * shim run again for the same task, or a server cleaning up after a shim
 * that died, finds the same one.
 */
void exec_task_cgroup_name(const char *task_dir, char *name, size_t len);

/* Whether pid is alive and still the process that started at start. */
bool exec_proc_alive(const struct kn_task_proc *proc);
/* Its start time (field 22 of /proc/PID/stat), in clock ticks. */
int exec_proc_start_time(int pid, int64_t *out);

/* ---- interactive sessions (shim_session.c) ---- */

#include <poll.h>

struct kn_cgroup;

/* What the shim's sessions need of the task it runs. */
struct shim_session_cfg {
	const char *task_dir;
	const struct kn_sandbox *sandbox;
	int init_pid;          /* the sandbox's init (the shim's child) */
	const char *workdir;
	char **env;            /* the task's environment */
	struct kn_cgroup *cgroup; /* the task's, or NULL */
	int tty_master;        /* the task's terminal, or -1 */
};
struct shim_sessions;

/* pollfd entries shim_sessions_poll_fill takes. */
#define SHIM_SESSIONS_POLL_MAX (1 + 8 * 4)

/*
 * Listen on TASK_DIR.sock, before the task starts (connections wait in
 * the backlog until shim_sessions_task): NULL and err when it cannot.
 */
struct shim_sessions *shim_sessions_new(const char *task_dir,
					struct kn_error *err);
/* The task runs: what its sessions need of it. NULL ss is fine. */
void shim_sessions_task(struct shim_sessions *ss,
			const struct shim_session_cfg *cfg);
/* The entries to poll (cap >= SHIM_SESSIONS_POLL_MAX): how many. */
size_t shim_sessions_poll_fill(struct shim_sessions *ss, struct pollfd *fds,
			       size_t cap);
/* After poll, on the same entries. */
void shim_sessions_poll_done(struct shim_sessions *ss,
			     const struct pollfd *fds, size_t n);
/* wait_ms (-1: none), shortened to what the sessions need: a turn at
   once for an exec whose end waits on it, a look at the sandbox while
   it is being built. */
int shim_sessions_wait_ms(const struct shim_sessions *ss, int wait_ms);
/* How much of the task's terminal output may be read now. */
size_t shim_sessions_task_room(const struct shim_sessions *ss);
/* The task's terminal output: to the attached client and the replay. */
void shim_sessions_task_output(struct shim_sessions *ss, const void *buf,
			       size_t n);
/* SIGCHLD came: wait for the sessions' processes that ended. */
void shim_sessions_reap(struct shim_sessions *ss);
/* The task ended: EXIT to the attached client, sent within a bound. */
void shim_sessions_finish(struct shim_sessions *ss, int wstatus,
			  const char *reason);
/* Close every session and the socket (removed). NULL is fine. */
void shim_sessions_free(struct shim_sessions *ss);
/* A terminal pair for the task: 0 with the master (non-blocking) and
   the slave, or -errno. */
int exec_open_pty(int *master, int *slave);

/* ---- the Slurm executor's files ---- */

/*
 * A Slurm command as a detached child (slurm.c): its own session, only
 * PATH, the locale and SLURM_* of the server's environment plus
 * extra_env, stdout and stderr to files (NULL: /dev/null). *out is the
 * child; the server's SIGCHLD handler reaps it.
 */
int exec_slurm_spawn(char *const *argv, char *const *extra_env,
		     const char *out_path, const char *err_path,
		     struct kn_task_proc *out, struct kn_error *err);

/*
 * A node or partition name kiln passes on (to scontrol's and srun's
 * argv, into labels and the API): 1..len-1 bytes of letters, digits,
 * '.', '_', '-', the first a letter or digit (never read as an option).
 */
bool exec_slurm_name_ok(const char *name, size_t n, size_t len);

/* "123" (n bytes), within 0..max: true and *out; false for anything
   else, a sign, a space or a value past max included (sacct.c). */
bool exec_slurm_count(const char *s, size_t n, int64_t max, int64_t *out);

/* Where a Slurm task's shim writes its node's name, beside TASK_DIR, for
   the server's srun of an interactive session to find (slurm.c). */
#define SESSION_NODE_SUFFIX ".node"

/* The batch steps sbatch runs (slurm.c): one attempt's gang, and one
   element of a job array (its attempt directory from its index). */
extern const char exec_slurm_batch_script[];
extern const char exec_slurm_array_script[];
/* "PID START" files of the Slurm commands' children (slurm.c). */
int exec_slurm_write_proc(const char *path, const struct kn_task_proc *p);
/* 0 and *out from such a file, or -errno. */
int exec_slurm_read_proc(const char *path, struct kn_task_proc *out);
/* 1 and *st when the shim has recorded the exit, 0 when not yet. */
int exec_slurm_read_status_json(const char *task_dir,
				struct kn_task_status *st,
				struct kn_error *err);
/*
 * The Slurm job id sbatch gave in dir (an attempt's control directory or
 * an array's batch directory), from its sbatch.out, or 0 when none (yet).
 * Only sbatch's exact answer, "JOBID" or "JOBID;CLUSTER" and a newline,
 * in a regular file the server owns, counts: none of the server's other
 * files (a "PID START" one renamed there in an older attempt's
 * directory) reads as a job id.
 */
long long exec_slurm_job_id(const char *dir);
/*
 * Where the sbatch of dir stands: the job id it gave; 0 while it still
 * runs; or -1 when it ended without one, and *st ended with why: the
 * first line of its sbatch.err, else unsent (when not NULL) if sbatch
 * never ran there (no sbatch.pid), else "sbatch gave no job id".
 */
long long exec_slurm_submitted(const char *dir, const char *unsent,
			       struct kn_task_status *st);
/* The same for job id that Slurm says is over in state (reason) or has
   forgotten, with no exit the shim recorded. */
void exec_slurm_ended_unrecorded(struct kn_task_status *st, const char *id,
				 const char *state, const char *reason);

/* One kind of question to Slurm, answered into a file of a directory. */
struct exec_slurm_query {
	const char *pid_name; /* the child in flight: "PID START" */
	const char *name;     /* its answer; NAME.tmp while it is written */
	char *const *argv;
	char *const *env;     /* more of the child's environment, or NULL */
	size_t max;           /* the answer's cap; 0: 64 KiB */
};
/*
 * Ask Slurm q at most once a second, one child in flight, the answer in
 * dir: 1 and *text (malloc'd), *len (may be NULL) and *at_ms, its time,
 * when there is an answer, read only from a regular file the server owns;
 * 0 when none yet. *fresh is set when an answer was taken in on this
 * call; *why says why the child could not be started, if it could not.
 */
int exec_slurm_ask(const char *dir, long long job_id,
		   const struct exec_slurm_query *q, char **text, size_t *len,
		   int64_t *at_ms, bool *fresh, char *why, size_t why_len);

/* ---- job arrays (slurm_array.c) ---- */

struct kn_slurm_task;
struct slurm_batches;
struct slurm_batches *slurm_batches_new(void);
void slurm_batches_free(struct slurm_batches *b);
/*
 * Whether the attempt of task_dir is an element of a Slurm job array
 * (the server wrote ATTEMPT_DIR.slurm-array beside it).
 */
bool slurm_array_element(const char *task_dir);
/*
 * Keep launch l's element (its last rank; every launch.json written) for
 * the next flush, which submits it with its array's other new elements
 * as one sbatch --array under t's options. 0, or -errno with err.
 */
int slurm_array_add(struct slurm_batches *b, const struct kn_task_launch *l,
		    const struct kn_slurm_task *t, const char *const *env,
		    struct kn_error *err);
/* The executor's flush: submit what was added, cancel what was stopped. */
void slurm_array_flush(struct kn_executor *ex);
/* An element's stop after its stop.json: while Slurm has it, it is
   cancelled if pending, and outright grace_ms (-1: a default) and a
   backstop after. */
void slurm_array_stop(struct slurm_batches *b, const char *task_dir,
		      int64_t grace_ms);
/* An element's state, as slurm.c's status for a whole attempt. */
int slurm_array_status(struct slurm_batches *b, const char *task_dir,
		       struct kn_task_status *out, struct kn_error *err);

struct slurm_poll;
/* The Slurm executor's state: its options first, so impl is both. */
struct slurm_exec {
	struct kn_slurm_config cfg;
	struct slurm_poll *poll; /* NULL: no inventory (no state_dir) */
	struct slurm_batches *batches; /* job arrays' elements */
};

/* The inventory's readings (slurm_inventory.c), into dir. */
struct slurm_poll *slurm_poll_new(const char *dir);
void slurm_poll_free(struct slurm_poll *p);
const struct kn_slurm_inventory *slurm_inventory(struct kn_executor *ex,
						 bool refresh);
int slurm_admit(struct kn_executor *ex, const struct kn_job_spec *spec,
		struct kn_error *err);
int slurm_set_node(struct kn_executor *ex, const char *name, bool drain,
		   const char *reason, struct kn_error *err);

#endif
