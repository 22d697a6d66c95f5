/*
 * The Slurm executor: kiln keeps its queue, attempts, checkpoints and
 * accounting; Slurm allocates and launches.
 *
 * One sbatch per attempt carries the whole gang (--ntasks), rather than
 * one per task: Slurm then allocates all ranks at once or none (a gang is
 * all-or-nothing in kiln too), one job id names the attempt for scancel,
 * and MASTER_ADDR is known only inside the allocation anyway. The batch
 * step is `srun kiln shim --slurm ATTEMPT_DIR`: srun starts one shim per
 * rank and each runs its task exactly as the local executor's shim does,
 * writing output.log and status.json into its task directory. The server
 * calls start for each rank in order; ranks before the last only write
 * their launch.json, the last writes the batch script and submits.
 *
 * Nothing here waits for Slurm. sbatch, scancel and scontrol are started
 * as children in their own sessions with their output going to files in
 * ATTEMPT_DIR.slurm, beside the attempt directory (the server's SIGCHLD
 * handler reaps them):
 *
 *   ATTEMPT_DIR.slurm/  the server's, mode 0700, made before sbatch runs
 *     sbatch.pid      "PID START" of the sbatch child (all ranks read it)
 *     sbatch.out      its --parsable answer: "JOBID" (or "JOBID;CLUSTER")
 *     sbatch.err      its complaints, the reason when no job id came back
 *     slurm.state     the last `scontrol show job -o JOBID`, at most one
 *                     query in flight (query.pid) and one a second
 *     sacct.out       the last sacct of the job (sacct.pid)
 *   ATTEMPT_DIR/      the task's user's (slurm.sh, task directories)
 *     slurm-JOBID.out what the batch step itself prints (srun's errors)
 *
 * The attempt directory is the task's user's, who could replace any file
 * in it: a job id there would be a scancel the server makes for them on
 * someone else's job. So what the server decides by (the job id, its
 * children's pids, Slurm's answers) lies where only the server writes,
 * in the job's directory, and is read only from regular files the server
 * owns. An attempt submitted before ATTEMPT_DIR.slurm existed has these
 * files in its attempt directory; they are read from there, under the
 * same owner check.
 *
 * Task state comes first from the shim's status.json, as locally. Slurm's
 * view matters only while no status.json exists: PENDING or RUNNING mean
 * wait; a final state (or a job Slurm has forgotten) with no status.json
 * means the shim never ran or was killed outright, and the task ended.
 * scontrol show job is used rather than squeue --json because 22.05's
 * squeue --json ignores --jobs and prints the whole cluster, and
 * scontrol has no --json there; -o gives one line of KEY=VALUE.
 * A task that failed without kiln asking it to stop is held as running
 * until Slurm has answered once more: if that answer has a PreemptTime,
 * Slurm preempted the job (its SIGTERM reached the task), and the task
 * ends preempted, which a preemptible job resumes from without a retry.
 * A task that succeeded takes the allocation's Start and End from sacct
 * (sacct.out, asked as slurm.state is), where the cluster keeps accounts.
 *
 * Stop writes stop.json into the task directory and the shim, which
 * looks for it four times a second, signals its task and kills it after
 * the grace, as locally. Slurm cannot deliver that signal itself: scancel
 * --signal reaches every process of the step, the task as well as its
 * shim, so the task would get SIGTERM rather than its checkpoint signal.
 * A job still pending is cancelled (`scancel --state=PENDING`); one whose
 * shim has not ended it a while after the grace is cancelled outright.
 * Both are sent again with each fresh answer from Slurm while needed, so
 * a stop that came before sbatch answered is not lost.
 *
 * Interactive sessions: the shim listens on TASK_DIR.sock on its node as
 * locally, after writing the node's name to TASK_DIR.node; both lie
 * beside the task's directory, in the attempt directory the task's mount
 * namespace hides. The server reaches the socket as Slurm users reach a
 * running job: `srun --jobid=J --overlap` on that node, run as the job's
 * user, starts `kiln shim --bridge TASK_DIR` there, which connects to the
 * socket and copies bytes between it and srun's stdio; srun's own stdin
 * and stdout are the server's end of a socket pair. So no port is opened
 * on the node and no secret handed out: Slurm (munge) authenticates the
 * step, the shim checks its peer is its own user, and only the server
 * and the job's user may start steps in the allocation. Rejected: the
 * shim listening on TCP with a per-task secret (a second credential to
 * keep from the task, and a port every node's users can reach).
 */
#include "exec.h"
#include "internal.h"
#include "spec/spec.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

extern char **environ;

/* How often Slurm is asked about one attempt while no status.json says. */
#define QUERY_INTERVAL_MS 1000
/* Caps on what the children write that kiln reads back. */
#define SBATCH_OUT_MAX 4096
#define STATE_MAX (64 * 1024)
/* How often a shim under Slurm looks for stop.json. */
#define STOP_POLL_MS 250
/* After a stop's grace, how long the shim has to end the task itself. */
#define STOP_BACKSTOP_MS 10000
/* How long an unasked failure waits for Slurm to say if it preempted. */
#define PREEMPT_ANSWER_WAIT_MS 15000
/* How long a task's end waits for its job's record in Slurm's accounting. */
#define ACCT_WAIT_MS 30000

/*
 * All a Slurm job gets of its submitter's environment (--export): a path
 * to find srun, the locale and what the batch script needs. Anything else
 * the server holds (store keys, tokens) stays with the server.
 */
#define SLURM_EXPORT                                                       \
	"--export=PATH,LANG,LC_ALL,TZ,KILN_SLURM_BIN,KILN_SLURM_ATTEMPT_DIR," \
	"KILN_SLURM_STOP_SIGNAL,KILN_SLURM_STOP,KILN_SLURM_ARRAY_DIR"
/* The bound on a node name read back (Slurm's HOST_NAME_MAX is 64). */
#define NODE_NAME_MAX 64

/* Beside an attempt directory: the server's files about its job. */
#define CONTROL_SUFFIX ".slurm"

/* The account a root server runs Slurm tasks as when none is named. */
#define SLURM_DEFAULT_USER "kiln-task"

/* Set from Slurm inside the allocation, never from the server's launch. */
static const char *const slurm_owned_env[] = {
	"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "RANK",
	"LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", NULL,
};

/* The batch step's srun of one shim per task, in the background. */
#define BATCH_SRUN \
	"# srun does not inherit --cpus-per-task from sbatch since 22.05.\n" \
	"srun --kill-on-bad-exit=0 " \
	"${SLURM_CPUS_PER_TASK:+--cpus-per-task=$SLURM_CPUS_PER_TASK} " \
	"\"$KILN_SLURM_BIN\" shim --slurm \"$KILN_SLURM_ATTEMPT_DIR\" &\n"

/* The rest of the batch step: stops, and waiting for the tasks. */
#define BATCH_BODY \
	"step=$!\n" \
	"# --signal=B:SIG@GRACE reaches this shell alone. It becomes a stop\n" \
	"# request for every shim (the signal to its task, SIGKILL after the\n" \
	"# grace), where srun would signal every process of the step.\n" \
	"if [ -n \"$KILN_SLURM_STOP_SIGNAL\" ]; then\n" \
	"  trap 'for d in \"$KILN_SLURM_ATTEMPT_DIR\"/*/; do\n" \
	"          [ -e \"${d}launch.json\" ] && [ ! -e \"${d}stop.json\" ] &&\n" \
	"            echo \"$KILN_SLURM_STOP\" > \"${d}stop.json\"\n" \
	"        done' \"$KILN_SLURM_STOP_SIGNAL\"\n" \
	"fi\n" \
	"while :; do\n" \
	"  wait $step\n" \
	"  rc=$?\n" \
	"  kill -0 $step 2>/dev/null || exit $rc\n" \
	"done\n"

const char exec_slurm_batch_script[] =
	"#!/bin/sh\n"
	"# Written by kiln: the batch step of one attempt. srun starts one\n"
	"# kiln shim per task; each picks its task directory by SLURM_PROCID.\n"
	BATCH_SRUN BATCH_BODY;

const char exec_slurm_array_script[] =
	"#!/bin/sh\n"
	"# Written by kiln: the batch step of one element of a job array.\n"
	"# Its attempt directory is the one kiln wrote down for its index.\n"
	"KILN_SLURM_ATTEMPT_DIR=$(cat "
	"\"$KILN_SLURM_ARRAY_DIR/e/$SLURM_ARRAY_TASK_ID\") || exit 1\n"
	"export KILN_SLURM_ATTEMPT_DIR\n"
	"# One task: its shim runs in this step, as sbatch --wrap would run\n"
	"# it, sparing slurmd a step launch per element (which times out\n"
	"# when many elements start at once on a busy node).\n"
	"if [ \"$SLURM_NTASKS\" = 1 ]; then\n"
	"  \"$KILN_SLURM_BIN\" shim --slurm \"$KILN_SLURM_ATTEMPT_DIR\" &\n"
	"else\n"
	BATCH_SRUN
	"fi\n"
	BATCH_BODY;

bool kn_slurm_state_final(const char *state)
{
	static const char *const live[] = {
		"PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING",
		"REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESIZING",
		"SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD", NULL,
	};

	for (const char *const *p = live; *p; p++)
		if (!strcmp(state, *p))
			return false;
	return true;
}

void kn_slurm_first_host(const char *nodelist, char *out, size_t len)
{
	size_t n = strcspn(nodelist, ",[");
	size_t digits;

	if (len == 0)
		return;
	if (n >= len)
		n = len - 1;
	memcpy(out, nodelist, n);
	out[n] = '\0';
	if (nodelist[n] != '[')
		return;
	/* "gpu[03-05,9]": the range's first number, zero padding kept. */
	digits = strspn(nodelist + n + 1, "0123456789");
	if (n + digits >= len)
		digits = len - 1 - n;
	memcpy(out + n, nodelist + n + 1, digits);
	out[n + digits] = '\0';
}

/* "a/b/7/2" -> "a/b/7": a task directory's attempt directory. */
static char *attempt_dir_of(const char *task_dir)
{
	const char *slash = strrchr(task_dir, '/');
	size_t n = slash ? (size_t)(slash - task_dir) : 0;
	char *d = kn_xmalloc(n + 2);

	if (n == 0) {
		strcpy(d, ".");
		return d;
	}
	memcpy(d, task_dir, n);
	d[n] = '\0';
	return d;
}

/*
 * Where the attempt's Slurm files are (see the top): ATTEMPT_DIR.slurm,
 * or the attempt directory itself for an attempt submitted before that.
 */
static char *control_dir_of(const char *attempt_dir)
{
	char *dir = kn_asprintf("%s" CONTROL_SUFFIX, attempt_dir);
	struct stat st;

	if (lstat(dir, &st) < 0 && errno == ENOENT) {
		free(dir);
		return kn_xstrdup(attempt_dir);
	}
	return dir;
}

/* ---- sbatch's command line ---- */

static void args_add(char ***v, size_t *n, char *arg)
{
	*v = kn_xrealloc(*v, (*n + 2) * sizeof(char *));
	(*v)[(*n)++] = arg;
	(*v)[*n] = NULL;
}

char **kn_slurm_sbatch_args(const struct kn_slurm_task *t,
			    int64_t timeout_ms, const char *attempt_dir)
{
	char **v = NULL;
	size_t n = 0;
	int grace_s = (int)((t->checkpoint_grace_ms + 999) / 1000);

	args_add(&v, &n, kn_xstrdup("sbatch"));
	args_add(&v, &n, kn_xstrdup("--parsable"));
	args_add(&v, &n, kn_asprintf("--job-name=%s", t->job_name));
	args_add(&v, &n, kn_asprintf("--ntasks=%d", t->ntasks));
	if (t->partition && *t->partition)
		args_add(&v, &n, kn_asprintf("--partition=%s", t->partition));
	if (t->gpus > 0)
		args_add(&v, &n, kn_asprintf("--gpus-per-task=%d", t->gpus));
	else if (t->mig_profile)
		/* One instance per task; gangs of MIG tasks are one per node. */
		args_add(&v, &n, kn_asprintf("--gres=gpu:%s:1", t->mig_profile));
	else if (t->shards > 0)
		args_add(&v, &n, kn_asprintf("--gres=shard:%d", t->shards));
	if (t->cpus > 0)
		args_add(&v, &n, kn_asprintf("--cpus-per-task=%d", t->cpus));
	if (t->memory_mb > 0) {
		int cpus = t->cpus > 0 ? t->cpus : 1;
		/* Slurm has no per-task memory; per CPU times CPUs is that. */
		args_add(&v, &n, kn_asprintf("--mem-per-cpu=%lldM",
					     (long long)((t->memory_mb + cpus - 1) /
							 cpus)));
	}
	if (timeout_ms > 0) {
		/*
		 * Slurm counts minutes; the shim enforces the timeout to the
		 * millisecond, so the limit is a backstop one minute after
		 * the timeout plus the grace.
		 */
		args_add(&v, &n, kn_asprintf("--time=%lld",
					     (long long)kn_slurm_time_minutes(
						     t, timeout_ms)));
	}
	if (grace_s > 0) {
		const char *sig = sigabbrev_np(t->checkpoint_signal > 0
						       ? t->checkpoint_signal
						       : SIGTERM);
		args_add(&v, &n, kn_asprintf("--signal=B:%s@%d",
					     sig ? sig : "TERM",
					     grace_s > 65535 ? 65535 : grace_s));
	}
	args_add(&v, &n, kn_xstrdup(t->requeue ? "--requeue" : "--no-requeue"));
	args_add(&v, &n, kn_xstrdup(SLURM_EXPORT));
	if (t->run_as_set) {
		args_add(&v, &n, kn_asprintf("--uid=%u", (unsigned)t->uid));
		args_add(&v, &n, kn_asprintf("--gid=%u", (unsigned)t->gid));
	}
	if (t->image && *t->image)
		args_add(&v, &n, kn_asprintf("--container-image=%s", t->image));
	if (t->array) {
		args_add(&v, &n, kn_asprintf("--array=%s", t->array));
		args_add(&v, &n, kn_asprintf("--output=%s/out/slurm-%%A_%%a.out",
					     attempt_dir));
		args_add(&v, &n, kn_asprintf("--chdir=%s/out", attempt_dir));
	} else {
		args_add(&v, &n, kn_asprintf("--output=%s/slurm-%%j.out",
					     attempt_dir));
		args_add(&v, &n, kn_asprintf("--chdir=%s", attempt_dir));
	}
	args_add(&v, &n, kn_asprintf("%s/slurm.sh", attempt_dir));
	return v;
}

/* ---- children ---- */

/*
 * Start argv[0] from PATH in its own session, stdin from /dev/null,
 * stdout to out_path, stderr to err_path (either may be NULL: /dev/null;
 * the same path: one file for both). Its environment is extra_env
 * ("NAME=value") and, of the server's, only what the Slurm commands need
 * (PATH, the locale, SLURM_*): nothing else of the server's reaches them
 * or, through sbatch, a job.
 */
static bool slurm_command_env(const char *entry)
{
	static const char *const names[] = {"PATH=", "LANG=", "LC_ALL=",
					    "TZ=", "SLURM_", NULL};

	for (const char *const *p = names; *p; p++)
		if (!strncmp(entry, *p, strlen(*p)))
			return true;
	return false;
}

static int spawn_child(char *const *argv, char *const *extra_env,
		       const char *out_path, const char *err_path,
		       struct kn_task_proc *out, struct kn_error *err)
{
	char **env = NULL;
	size_t n = 0;
	pid_t pid;
	int rc;

	for (char **e = environ; *e; e++)
		if (slurm_command_env(*e))
			args_add(&env, &n, *e);
	for (char *const *e = extra_env; e && *e; e++)
		args_add(&env, &n, *e);
	/* no_follow: the attempt directory may be the task user's. */
	rc = kn_spawn_detached(&(struct kn_spawn){.path = argv[0],
						  .argv = argv,
						  .envp = env,
						  .out_path = out_path,
						  .err_path = err_path,
						  .no_follow = true,
						  .search = true},
			       &pid);
	free(env);
	if (rc != 0)
		return kn_errorf(err, KN_EIO, NULL, "cannot run %s: %s", argv[0],
				 strerror(rc));
	out->pid = pid;
	if (exec_proc_start_time(pid, &out->start) < 0)
		out->start = 0; /* gone already; its files say how it went */
	return 0;
}

int exec_slurm_spawn(char *const *argv, char *const *extra_env,
		     const char *out_path, const char *err_path,
		     struct kn_task_proc *out, struct kn_error *err)
{
	return spawn_child(argv, extra_env, out_path, err_path, out, err);
}

int exec_slurm_write_proc(const char *path, const struct kn_task_proc *p)
{
	char line[64];

	snprintf(line, sizeof(line), "%d %lld\n", p->pid, (long long)p->start);
	return kn_write_file_replace(path, line, strlen(line), 0600);
}

/*
 * kn_read_file for the attempt's files: the task's user may own the
 * attempt directory, so none is read through a link, FIFO or device.
 */
static int read_attempt_file(const char *path, size_t max, char **out)
{
	char *dir = kn_xstrdup(path), *slash = strrchr(dir, '/');
	int rc;

	if (!slash) {
		free(dir);
		return -EINVAL;
	}
	*slash = '\0';
	rc = kn_task_file_read(dir, slash + 1, max, out, NULL, NULL);
	free(dir);
	return rc;
}

/*
 * dir/name, with its stat, as the server or its child wrote it: only a
 * regular file the server owns is read. Where the task's user can write
 * in dir, one they put there (a job id, a pid, an answer of Slurm's, or
 * one bent with a future time to look fresh) is not read, and the next
 * write of the server's replaces it.
 */
static int read_own_file(const char *dir, const char *name, size_t max,
			 char **text, size_t *len, struct stat *sb)
{
	struct kn_error err;
	int fd = kn_task_file_open(dir, name, O_RDONLY, geteuid(), &err);
	int rc;

	if (fd < 0)
		return fd;
	rc = fstat(fd, sb) < 0 ? -errno : kn_read_fd(fd, max, text, len);
	close(fd);
	return rc;
}

int exec_slurm_read_proc(const char *path, struct kn_task_proc *out)
{
	char *dir = kn_xstrdup(path), *slash = strrchr(dir, '/');
	char *text = NULL;
	long long pid, start;
	struct stat sb;
	int rc = -EINVAL;

	if (slash) {
		*slash = '\0';
		rc = read_own_file(dir, slash + 1, 256, &text, NULL, &sb);
	}
	free(dir);

	if (rc < 0)
		return rc;
	if (sscanf(text, "%lld %lld", &pid, &start) != 2 || pid <= 0) {
		free(text);
		return -EINVAL;
	}
	free(text);
	out->pid = (int)pid;
	out->start = start;
	return 0;
}

long long exec_slurm_job_id(const char *dir)
{
	char *text = NULL;
	size_t len = 0, n;
	int64_t id = 0;
	struct stat sb;

	if (read_own_file(dir, "sbatch.out", SBATCH_OUT_MAX, &text, &len,
			  &sb) == 0) {
		n = strcspn(text, ";\n");
		if ((text[n] != ';' && text[n] != '\n') ||
		    !exec_slurm_count(text, n, UINT32_MAX, &id) ||
		    text[len - 1] != '\n' || memchr(text, '\n', len) !=
						     text + len - 1)
			id = 0;
	}
	free(text);
	return id > 0 ? id : 0;
}

long long exec_slurm_submitted(const char *dir, const char *unsent,
			       struct kn_task_status *st)
{
	char *path, *text = NULL, why[256];
	struct kn_task_proc sbatch;
	long long job_id = exec_slurm_job_id(dir);
	struct stat sb;

	if (job_id > 0)
		return job_id;
	path = kn_asprintf("%s/sbatch.pid", dir);
	if (exec_slurm_read_proc(path, &sbatch) == 0 &&
	    exec_proc_alive(&sbatch)) {
		free(path);
		return 0; /* sbatch has not answered yet */
	}
	job_id = exec_slurm_job_id(dir);
	if (job_id == 0) {
		if (!unsent || access(path, F_OK) == 0)
			unsent = "sbatch gave no job id";
		read_own_file(dir, "sbatch.err", SBATCH_OUT_MAX, &text, NULL,
			      &sb);
		if (text)
			text[strcspn(text, "\n")] = '\0';
		snprintf(why, sizeof(why), "cannot submit: %s",
			 text && *text ? text : unsent);
		exec_ended_lost(st, why);
		job_id = -1;
	}
	KN_FREE_ALL(text, path);
	return job_id;
}

/*
 * scancel ID, restricted to a state when state is not NULL: a job still
 * pending is simply cancelled; a running one only when its shim did not
 * end it (see stop_backstop).
 */
static int run_scancel(long long job_id, const char *state,
		       struct kn_error *err)
{
	char id[32], filter[48];
	char *argv[] = {"scancel", id, state ? filter : NULL, NULL};
	struct kn_task_proc p;

	snprintf(id, sizeof(id), "%lld", job_id);
	snprintf(filter, sizeof(filter), "--state=%s", state ? state : "");
	return spawn_child(argv, NULL, NULL, NULL, &p, err);
}

/* ---- the task's Unix user ---- */

/*
 * The user a root server submits as (--uid/--gid), into t: the launch's
 * run_as, else SLURM_DEFAULT_USER when that account exists. A server not
 * running as root submits as itself, as Slurm does for any user.
 */
static int resolve_run_as(const char *run_as, struct kn_slurm_task *t,
			  struct kn_error *err)
{
	const char *name = run_as ? run_as : SLURM_DEFAULT_USER;
	struct passwd pw, *found = NULL;
	char buf[4096];

	if (geteuid() != 0)
		return 0;
	if (getpwnam_r(name, &pw, buf, sizeof(buf), &found) != 0 || !found) {
		if (!run_as)
			return 0; /* no such account here: as the server */
		return kn_errorf(err, KN_EINVAL, "run_as",
				 "run_as: there is no Unix user \"%s\" to run "
				 "the task as", name);
	}
	if (pw.pw_uid == 0)
		return 0;
	t->run_as_set = true;
	t->uid = pw.pw_uid;
	t->gid = pw.pw_gid;
	return 0;
}

/* chown -R without following links: the tree is about to be the task's. */
static int chown_tree(int dirfd, uid_t uid, gid_t gid)
{
	int fd = dup(dirfd), rc = 0;
	DIR *d = fd < 0 ? NULL : fdopendir(fd);
	struct dirent *e;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return -errno;
	}
	if (fchown(dirfd, uid, gid) < 0)
		rc = -errno;
	while (rc == 0 && (e = readdir(d))) {
		int sub;

		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		sub = openat(dirfd, e->d_name,
			     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub >= 0) {
			rc = chown_tree(sub, uid, gid);
			close(sub);
		} else if (fchownat(dirfd, e->d_name, uid, gid,
				    AT_SYMLINK_NOFOLLOW) < 0) {
			rc = -errno;
		}
	}
	closedir(d);
	return rc;
}

/*
 * Hand the attempt directory (task directories, launch.json, checkpoints,
 * outputs) to the task's user, and let that user pass through the
 * directories above it: search permission (o+x) only, never listing or
 * reading, on each one the server owns that lacks it.
 */
static int give_attempt_dir(const char *attempt_dir,
			    const struct kn_slurm_task *t,
			    struct kn_error *err)
{
	int fd = open(attempt_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
					   O_CLOEXEC);
	char *up = kn_xstrdup(attempt_dir), *slash;
	int rc = fd < 0 ? -errno : chown_tree(fd, t->uid, t->gid);

	if (fd >= 0)
		close(fd);
	while (rc == 0 && (slash = strrchr(up, '/')) && slash != up) {
		struct stat st;

		*slash = '\0';
		if (stat(up, &st) < 0)
			break;
		if (st.st_uid == geteuid() && !(st.st_mode & S_IXOTH) &&
		    chmod(up, (st.st_mode & 07777) | S_IXOTH) < 0)
			rc = -errno;
	}
	if (rc < 0)
		kn_errorf(err, KN_EIO, NULL,
			  "cannot give %s to uid %u: %s", attempt_dir,
			  (unsigned)t->uid, strerror(-rc));
	free(up);
	return rc;
}

/*
 * A file the server wrote into a task directory goes to the directory's
 * owner, the task's user, whose shim reads it.
 */
static int give_like_dir(const char *dir, const char *path)
{
	struct stat st;

	if (stat(dir, &st) < 0)
		return -errno;
	if (st.st_uid == geteuid())
		return 0;
	return lchown(path, st.st_uid, st.st_gid) < 0 ? -errno : 0;
}

/*
 * ATTEMPT_DIR.slurm, the server's alone: in the job's directory, where
 * the task's user cannot write, so nothing there is theirs. One already
 * there (a start tried again) must be the server's own directory.
 */
static int make_control_dir(const char *dir, struct kn_error *err)
{
	struct stat st;

	if (mkdir(dir, 0700) == 0)
		return 0;
	if (errno == EEXIST && lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) &&
	    st.st_uid == geteuid() && !(st.st_mode & 077))
		return 0;
	return kn_errorf(err, KN_EIO, NULL, "cannot make %s, the server's own "
			 "directory for the attempt: %s", dir,
			 errno == EEXIST ? "it is there and not the server's "
					   "own" : strerror(errno));
}

/* ---- the task's sbatch options ---- */

/* The partition for key from the map, copied into out; false if absent. */
static bool partition_lookup(const char *map, const char *key, char *out,
			     size_t len)
{
	size_t klen = strlen(key);
	const char *p = map;

	while (p && *p) {
		size_t n = strcspn(p, ",");
		const char *eq = memchr(p, '=', n);

		if (eq && (size_t)(eq - p) == klen && !strncmp(p, key, klen)) {
			size_t v = n - klen - 1;
			if (v >= len)
				v = len - 1;
			memcpy(out, eq + 1, v);
			out[v] = '\0';
			return true;
		}
		p += n;
		if (*p == ',')
			p++;
	}
	return false;
}

void kn_slurm_task_fill(const struct kn_slurm_config *cfg,
			const struct kn_task_launch *l,
			struct kn_slurm_task *out, char *partition, size_t len)
{
	const struct kn_job_spec *spec = l->spec;
	const struct kn_resources *res = &spec->resources;
	const char *pool = NULL;
	char key[KN_SLURM_PARTITION_KEY_MAX];

	memset(out, 0, sizeof(*out));
	out->rank = l->rank;
	out->ntasks = l->ntasks;
	out->job_name = spec->name;
	if (res->mig_profile)
		out->mig_profile = res->mig_profile;
	else if (res->gpu_milli >= KN_MILLI)
		out->gpus = res->gpu_milli / KN_MILLI;
	else if (res->gpu_milli > 0)
		out->shards = (res->gpu_milli * cfg->shards_per_gpu + KN_MILLI -
			       1) / KN_MILLI;
	out->cpus = (res->cpu_milli + KN_MILLI - 1) / KN_MILLI;
	out->memory_mb = (res->memory_bytes + (1 << 20) - 1) >> 20;
	out->requeue = spec->preemptible;
	out->image = spec->image;
	if (spec->checkpoint.set) {
		out->checkpoint_signal = spec->checkpoint.signal;
		out->checkpoint_grace_ms = spec->checkpoint.grace_ms;
	}
	for (size_t i = 0; i < spec->placement.n_selector; i++)
		if (!strcmp(spec->placement.selector[i].key, "pool"))
			pool = spec->placement.selector[i].value;
	partition[0] = '\0';
	snprintf(key, sizeof(key), "pool:%s", pool ? pool : "");
	if ((pool && partition_lookup(cfg->partitions, key, partition, len)) ||
	    (spec->preemptible &&
	     partition_lookup(cfg->partitions, "spot", partition, len)) ||
	    partition_lookup(cfg->partitions, "default", partition, len))
		out->partition = partition;
}

/* ---- ops ---- */

static int slurm_start(struct kn_executor *ex, const struct kn_task_launch *l,
		       struct kn_task_proc *out, struct kn_error *err)
{
	struct kn_slurm_task tu;
	const struct kn_slurm_task *t = &tu;
	struct kn_task_launch own;
	char partition[128];
	char *attempt_dir = NULL, *script = NULL, *pid_path = NULL,
	     *out_path = NULL, *err_path = NULL, *bin = NULL, *ctl = NULL;
	char **args = NULL, *env[5] = {NULL, NULL, NULL, NULL, NULL};
	struct kn_task_proc p = {0, 0};
	size_t n_env = 0;
	int rc;

	if (!l->spec)
		return kn_errorf(err, KN_EINVAL, NULL,
				 "the Slurm executor needs the task's job "
				 "spec");
	kn_slurm_task_fill(ex->impl, l, &tu, partition, sizeof(partition));
	rc = resolve_run_as(l->run_as, &tu, err);
	if (rc < 0)
		return rc;
	/* A timeout is the checkpoint signal with the checkpoint's grace. */
	own = *l;
	if (t->checkpoint_grace_ms > 0)
		own.grace_ms = t->checkpoint_grace_ms;
	rc = exec_write_launch(&own, slurm_owned_env, t->checkpoint_signal,
			       STOP_POLL_MS, err);
	if (rc < 0)
		return rc;
	if (t->rank != t->ntasks - 1) {
		/* The last rank submits, once every launch.json is there. */
		out->pid = 0;
		out->start = 0;
		return 0;
	}
	attempt_dir = attempt_dir_of(l->task_dir);
	if (t->run_as_set) {
		rc = give_attempt_dir(attempt_dir, t, err);
		if (rc < 0)
			goto out;
	}
	/* The shim on the nodes is this same binary at the same path. */
	bin = realpath("/proc/self/exe", NULL);
	if (!bin) {
		rc = kn_errorf(err, KN_EIO, NULL, "cannot find kiln's own path: %s",
			       strerror(errno));
		goto out;
	}
	env[n_env++] = kn_asprintf("KILN_SLURM_BIN=%s", bin);
	if (t->checkpoint_grace_ms > 0) {
		int sig = t->checkpoint_signal > 0 ? t->checkpoint_signal
						   : SIGTERM;
		const char *name = sigabbrev_np(sig);

		env[n_env++] = kn_asprintf("KILN_SLURM_STOP_SIGNAL=%s",
					   name ? name : "TERM");
		env[n_env++] = kn_asprintf("KILN_SLURM_STOP={\"signal\":%d,"
					   "\"grace_ms\":%lld}",
					   sig, (long long)t->checkpoint_grace_ms);
	}
	if (l->spec->array.count) {
		/* Submitted with its array's other new elements at flush. */
		struct slurm_exec *se = ex->impl;

		rc = slurm_array_add(se->batches, l, t,
				     (const char *const *)env, err);
		if (rc == 0)
			*out = p;
		goto out;
	}
	env[n_env++] = kn_asprintf("KILN_SLURM_ATTEMPT_DIR=%s", attempt_dir);
	script = kn_asprintf("%s/slurm.sh", attempt_dir);
	rc = kn_write_text_replace(script, exec_slurm_batch_script, 0700, err);
	if (rc < 0)
		goto out;
	ctl = kn_asprintf("%s" CONTROL_SUFFIX, attempt_dir);
	rc = make_control_dir(ctl, err);
	if (rc < 0)
		goto out;
	args = kn_slurm_sbatch_args(t, l->timeout_ms, attempt_dir);
	out_path = kn_asprintf("%s/sbatch.out", ctl);
	err_path = kn_asprintf("%s/sbatch.err", ctl);
	rc = spawn_child(args, env, out_path, err_path, &p, err);
	if (rc < 0)
		goto out;
	pid_path = kn_asprintf("%s/sbatch.pid", ctl);
	rc = exec_slurm_write_proc(pid_path, &p);
	if (rc < 0) {
		rc = kn_errorf(err, KN_EIO, NULL, "cannot write %s: %s",
			       pid_path, strerror(-rc));
		goto out;
	}
	*out = p;
out:
	kn_strv_free(args);
	for (size_t i = 0; env[i]; i++)
		free(env[i]);
	KN_FREE_ALL(bin, out_path, err_path, pid_path, script, ctl,
		    attempt_dir);
	return rc;
}

static int slurm_stop(struct kn_executor *ex, const char *task_dir,
		      const struct kn_task_proc *proc, int signo,
		      int64_t grace_ms, struct kn_error *err)
{
	char *path = kn_asprintf("%s/stop.json", task_dir);
	char *attempt_dir = attempt_dir_of(task_dir);
	char *ctl = control_dir_of(attempt_dir);
	long long job_id;
	int rc;

	(void)proc;
	/* Always written: it also marks the stop for a resend. */
	rc = kn_task_stop_request(task_dir, signo, grace_ms, err);
	if (rc < 0)
		goto out;
	rc = give_like_dir(task_dir, path);
	if (rc < 0) {
		rc = kn_errorf(err, KN_EIO, NULL, "cannot write %s: %s", path,
			       strerror(-rc));
		goto out;
	}
	if (slurm_array_element(task_dir)) {
		slurm_array_stop(((struct slurm_exec *)ex->impl)->batches,
				 task_dir, grace_ms);
		goto out;
	}
	job_id = exec_slurm_job_id(ctl);
	if (job_id > 0)
		rc = run_scancel(job_id, "PENDING", err);
out:
	KN_FREE_ALL(path, ctl, attempt_dir);
	return rc;
}

int exec_slurm_read_status_json(const char *task_dir, struct kn_task_status *st,
			    struct kn_error *err)
{
	int rc = exec_read_status(task_dir, st, err);

	if (rc == 0)
		return 1;
	return rc == -ENOENT ? 0 : rc;
}

/* "JobState=RUNNING Reason=None ..." -> "RUNNING"; "" when absent. */
static void field(const char *line, const char *key, char *out, size_t len)
{
	const char *p = line;
	size_t klen = strlen(key);

	out[0] = '\0';
	while ((p = strstr(p, key)) != NULL) {
		if ((p == line || p[-1] == ' ') && p[klen] == '=') {
			size_t n = strcspn(p + klen + 1, " \n");
			if (n >= len)
				n = len - 1;
			memcpy(out, p + klen + 1, n);
			out[n] = '\0';
			return;
		}
		p += klen;
	}
}

/* What Slurm last said of one job (slurm_state). */
struct slurm_answer {
	char state[32];    /* "PENDING", ..., "GONE" when forgotten, "" none */
	char reason[96];   /* Reason=, or why Slurm could not be asked */
	char preempt[32];  /* PreemptTime=: a time once Slurm preempted it */
	int64_t at_ms;     /* when the answer was written; 0 when none */
	bool fresh;        /* taken in on this call */
};

/* The wall-clock time of a file's last change, in ms. */
static int64_t mtime_ms(const struct stat *sb)
{
	return (int64_t)sb->st_mtim.tv_sec * 1000 +
	       sb->st_mtim.tv_nsec / 1000000;
}


int exec_slurm_ask(const char *dir, long long job_id,
		   const struct exec_slurm_query *q, char **text, size_t *len,
		   int64_t *at_ms, bool *fresh, char *why, size_t why_len)
{
	char *qpid = kn_asprintf("%s/%s", dir, q->pid_name);
	char *tmp = kn_asprintf("%s/%s.tmp", dir, q->name);
	char *final = kn_asprintf("%s/%s", dir, q->name);
	struct kn_task_proc p;
	struct stat sb;
	bool busy = false, answered;

	*text = NULL;
	*at_ms = 0;
	*fresh = false;
	if (exec_slurm_read_proc(qpid, &p) == 0) {
		if (exec_proc_alive(&p)) {
			busy = true;
		} else {
			rename(tmp, final);
			unlink(qpid);
			*fresh = true;
		}
	}
	answered = read_own_file(dir, q->name,
				 q->max ? q->max : STATE_MAX, text, len,
				 &sb) == 0;
	if (answered)
		*at_ms = mtime_ms(&sb);
	if (!busy && (!answered || kn_now_ms() - *at_ms >= QUERY_INTERVAL_MS)) {
		struct kn_error err;

		/* Made afresh by the child, so the server's own. */
		unlink(tmp);
		if (spawn_child(q->argv, q->env, tmp, tmp, &p, &err) == 0) {
			exec_slurm_write_proc(qpid, &p);
		} else {
			/* The caller sees no answer and keeps the task
			 * running: say why, once a minute at most. */
			static int64_t warned_at;
			int64_t now = kn_mono_ms();

			kn_strlcpy(why, err.message, why_len);
			if (!warned_at || now - warned_at >= 60000) {
				warned_at = now;
				kn_log(KN_LOG_WARN, "slurm: cannot ask Slurm "
				       "about job %lld: %s", job_id,
				       err.message);
			}
		}
	}
	KN_FREE_ALL(qpid, tmp, final);
	return answered ? 1 : 0;
}

/* What Slurm last said of the job (scontrol show job), into *a. */
static void slurm_state(const char *control_dir, long long job_id,
			struct slurm_answer *a)
{
	char id[32], *text;
	char *argv[] = {"scontrol", "show", "job", "-o", id, NULL};
	const struct exec_slurm_query q = {"query.pid", "slurm.state", argv,
					   NULL, 0};

	memset(a, 0, sizeof(*a));
	snprintf(id, sizeof(id), "%lld", job_id);
	if (exec_slurm_ask(control_dir, job_id, &q, &text, NULL, &a->at_ms,
			   &a->fresh, a->reason, sizeof(a->reason)) == 1) {
		field(text, "JobState", a->state, sizeof(a->state));
		field(text, "Reason", a->reason, sizeof(a->reason));
		field(text, "PreemptTime", a->preempt, sizeof(a->preempt));
		if (!a->state[0] && strstr(text, "Invalid job id"))
			kn_strlcpy(a->state, "GONE", sizeof(a->state));
	}
	free(text);
}

/*
 * A stop is under way (stop.json) and Slurm still has the job: cancel it
 * if it is pending, or if it runs on well after the stop's grace.
 */
static void stop_backstop(const char *task_dir, long long job_id,
			  const char *state)
{
	char *path = kn_asprintf("%s/stop.json", task_dir), *text = NULL;
	struct kn_error err;
	struct stat sb;
	int64_t grace = 0, age;
	json_t *doc;

	if (stat(path, &sb) < 0)
		goto out;
	if (!strcmp(state, "PENDING")) {
		/* A failure is tried again at the next answer. */
		(void)run_scancel(job_id, "PENDING", &err);
		goto out;
	}
	if (read_attempt_file(path, 4096, &text) == 0 &&
	    (doc = json_loads(text, 0, NULL)) != NULL) {
		grace = json_integer_value(json_object_get(doc, "grace_ms"));
		json_decref(doc);
	}
	if (grace < 0) {
		/* No grace asked for: the launch's applies. */
		free(text);
		text = NULL;
		free(path);
		path = kn_asprintf("%s/launch.json", task_dir);
		if (read_attempt_file(path, 4 * 1024 * 1024, &text) == 0 &&
		    (doc = json_loads(text, 0, NULL)) != NULL) {
			grace = json_integer_value(
				json_object_get(doc, "grace_ms"));
			json_decref(doc);
		}
	}
	age = kn_now_ms() - (int64_t)sb.st_mtim.tv_sec * 1000 -
	      sb.st_mtim.tv_nsec / 1000000;
	if (age > (grace > 0 ? grace : 0) + STOP_BACKSTOP_MS)
		(void)run_scancel(job_id, NULL, &err);
out:
	KN_FREE_ALL(text, path);
}

void exec_slurm_ended_unrecorded(struct kn_task_status *st, const char *id,
				 const char *state, const char *reason)
{
	bool said = reason[0] && strcmp(reason, "None");
	char why[256];

	/* Cut to the status's reason by ended_lost. */
	snprintf(why, sizeof(why), "lost: Slurm job %s is %s%s%s with no "
		 "exit recorded", id, state, said ? " " : "",
		 said ? reason : "");
	exec_ended_lost(st, why);
}

/*
 * A task that ended unsuccessfully and unasked by kiln may have been
 * preempted by Slurm: Slurm (22.05, PreemptMode=REQUEUE with a GraceTime)
 * sends SIGTERM to every process of the job and sets the job's
 * PreemptTime. Such an end is told only from an answer Slurm gave after
 * it; false while one is awaited (at most PREEMPT_ANSWER_WAIT_MS). A
 * preempted task is marked so, with Slurm's time, and the job Slurm
 * requeued is cancelled: kiln resumes it as a new attempt of its own.
 */
static bool ended_slurm_checked(const char *task_dir, const char *control_dir,
				struct kn_task_status *st)
{
	char *stop = kn_asprintf("%s/stop.json", task_dir);
	bool asked = access(stop, F_OK) == 0;
	struct slurm_answer a;
	struct kn_error err;
	long long job_id;

	free(stop);
	if (asked || st->reason[0] || (st->exit_code == 0 && st->signal == 0))
		return true;
	job_id = exec_slurm_job_id(control_dir);
	if (job_id == 0)
		return true;
	slurm_state(control_dir, job_id, &a);
	if (a.at_ms < st->ended_at_ms)
		return kn_now_ms() - st->ended_at_ms >= PREEMPT_ANSWER_WAIT_MS;
	if (!a.preempt[0] || !strcmp(a.preempt, "None") ||
	    !strcmp(a.preempt, "Unknown"))
		return true;
	st->preempted = true;
	/* Slurm's Reason, cut to fit after its time. */
	snprintf(st->reason, sizeof(st->reason), "by Slurm at %s%s%.40s",
		 a.preempt, strcmp(a.reason, "None") ? ": " : "",
		 strcmp(a.reason, "None") ? a.reason : "");
	if (!kn_slurm_state_final(a.state))
		(void)run_scancel(job_id, NULL, &err);
	return true;
}

/*
 * A task that succeeded takes its times from Slurm's accounting when the
 * cluster keeps it: the allocation's Start and End as sacct has them, so
 * that the cost ledger and goodput count what Slurm counted. False while
 * the run's record is not over yet (slurmdbd hears of a job's end a
 * moment after it), for at most ACCT_WAIT_MS; a cluster without
 * accounting answers at once, and the shim's times stand. A task that
 * failed is not held: the rest of its gang must be stopped at once.
 */
static bool ended_with_accounting(const char *control_dir,
				  struct kn_task_status *st)
{
	char id[32], *text = NULL, why[96];
	char *argv[] = {"sacct", "-n", "-P", "-X", "-D", "-j", id, "-o",
			KN_SACCT_FORMAT, NULL};
	/* %s: seconds since the epoch, whatever the server's time zone. */
	char *env[] = {"SLURM_TIME_FORMAT=%s", NULL};
	const struct exec_slurm_query q = {"sacct.pid", "sacct.out", argv, env,
					   0};
	long long job_id = exec_slurm_job_id(control_dir);
	bool late = kn_now_ms() - st->ended_at_ms >= ACCT_WAIT_MS, fresh;
	struct kn_sacct_job j;
	struct kn_error err;
	int64_t at_ms;
	int rc;

	if (job_id == 0 || st->exit_code != 0 || st->signal != 0)
		return true;
	snprintf(id, sizeof(id), "%lld", job_id);
	if (exec_slurm_ask(control_dir, job_id, &q, &text, NULL, &at_ms, &fresh,
			   why, sizeof(why)) == 0 ||
	    at_ms < st->ended_at_ms) {
		free(text);
		return late;
	}
	if (strstr(text, "accounting storage is disabled")) {
		free(text);
		return true;
	}
	rc = kn_sacct_parse(text, job_id, &j, &err);
	free(text);
	if (rc < 0) {
		kn_log(KN_LOG_WARN, "slurm: job %lld: %s", job_id,
		       err.message);
		return true;
	}
	if (rc == 0 || j.start_s == 0 || j.end_s < j.start_s)
		return late;
	st->started_at_ms = j.start_s * 1000;
	st->ended_at_ms = j.end_s * 1000;
	return true;
}

/*
 * The shim's record of the task's end, as exec_slurm_read_status_json,
 * or -EAGAIN while Slurm's word on that end is awaited (a preemption,
 * the accounting's times): until then the task runs for the server.
 */
static int ended_record(const char *task_dir, const char *ctl,
			struct kn_task_status *st, struct kn_error *err)
{
	int rc = exec_slurm_read_status_json(task_dir, st, err);

	if (rc == 1 && (!ended_slurm_checked(task_dir, ctl, st) ||
			!ended_with_accounting(ctl, st)))
		return -EAGAIN;
	return rc;
}

static int slurm_status(struct kn_executor *ex, const char *task_dir,
			const struct kn_task_proc *proc,
			struct kn_task_status *out, struct kn_error *err)
{
	char *attempt_dir = attempt_dir_of(task_dir), why[32],
	     *ctl = control_dir_of(attempt_dir);
	struct kn_task_status st;
	struct slurm_answer a;
	long long job_id;
	int rc;

	(void)proc;
	if (slurm_array_element(task_dir)) {
		KN_FREE_ALL(attempt_dir, ctl);
		return slurm_array_status(((struct slurm_exec *)ex->impl)->batches,
					  task_dir, out, err);
	}
	memset(&st, 0, sizeof(st));
	rc = ended_record(task_dir, ctl, &st, err);
	if (rc == -EAGAIN)
		goto running;
	if (rc != 0)
		goto done;
	job_id = exec_slurm_submitted(ctl, NULL, &st);
	if (job_id == 0)
		goto running;
	if (job_id < 0)
		goto done;
	slurm_state(ctl, job_id, &a);
	if (!a.state[0])
		goto running;
	if (!kn_slurm_state_final(a.state)) {
		if (a.fresh)
			stop_backstop(task_dir, job_id, a.state);
		goto running;
	}
	/* Over in Slurm: the shim's record may have landed meanwhile. */
	rc = ended_record(task_dir, ctl, &st, err);
	if (rc == -EAGAIN)
		goto running;
	if (rc != 0)
		goto done;
	snprintf(why, sizeof(why), "%lld", job_id);
	exec_slurm_ended_unrecorded(&st, why, a.state, a.reason);
	goto done;
running:
	memset(&st, 0, sizeof(st));
	rc = 1;
done:
	if (rc >= 0)
		*out = st;
	KN_FREE_ALL(ctl, attempt_dir);
	return rc < 0 ? rc : 0;
}

static int slurm_adopt(struct kn_executor *ex, const char *task_dir,
		       struct kn_task_proc *out, struct kn_error *err)
{
	char *path = kn_asprintf("%s/launch.json", task_dir);
	char *attempt_dir = attempt_dir_of(task_dir);
	char *ctl = control_dir_of(attempt_dir);
	struct kn_task_proc p = {0, 0};
	int rc = access(path, F_OK) == 0 ? 0 : -ENOENT;

	(void)err;
	free(path);
	if (rc == 0) {
		path = kn_asprintf("%s/sbatch.pid", ctl);
		if (exec_slurm_read_proc(path, &p) < 0)
			p.pid = p.start = 0;
		free(path);
		*out = p;
	}
	KN_FREE_ALL(ctl, attempt_dir);
	return rc;
}

static void slurm_release(struct kn_executor *ex)
{
	struct slurm_exec *se = ex->impl;

	slurm_poll_free(se->poll);
	slurm_batches_free(se->batches);
	KN_FREE_ALL((char *)se->cfg.partitions, (char *)se->cfg.state_dir, se);
}

/* ---- sessions ---- */

/* The node task_dir's shim runs on, from TASK_DIR.node: 0, -ENOENT while
   it has not written it, -EINVAL when it is not a node name. */
static int session_node(const char *attempt_dir, const char *task_dir,
			char *node, size_t len)
{
	const char *slash = strrchr(task_dir, '/');
	char *name = kn_asprintf("%s" SESSION_NODE_SUFFIX,
				 slash ? slash + 1 : task_dir);
	char *text = NULL;
	size_t text_len = 0;
	int rc = kn_task_file_read(attempt_dir, name, NODE_NAME_MAX + 2, &text,
				   &text_len, NULL);

	free(name);
	if (rc == 0)
		rc = kn_slurm_node_file_parse(text, text_len, node, len);
	free(text);
	return rc == -EFBIG ? -EINVAL : rc;
}

/*
 * In the forked child: srun as the job's user (uid, gid) with stdin and
 * stdout on fd, stderr to /dev/null, its own session and no signal
 * blocked or ignored. Only async-signal-safe calls (and execvpe).
 */
static void session_srun_child(int fd, uid_t uid, gid_t gid,
			       char *const *argv, char *const *env)
{
	sigset_t none;
	int null = open("/dev/null", O_WRONLY | O_CLOEXEC);

	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGPIPE, SIG_DFL);
	if (setsid() < 0 || dup2(fd, 0) < 0 || dup2(fd, 1) < 0 || null < 0 ||
	    dup2(null, 2) < 0)
		_exit(127);
	if (geteuid() == 0 && uid != 0 &&
	    (setgroups(0, NULL) < 0 || setgid(gid) < 0 || setuid(uid) < 0))
		_exit(127);
	execvpe(argv[0], argv, env);
	_exit(127);
}

/* srun running `kiln shim --bridge TASK_DIR [--port P]` on the task's
   node: the server's end of its stdin and stdout, or -errno with err. */
static int srun_bridge(const char *task_dir, int port, struct kn_error *err)
{
	char *attempt_dir = attempt_dir_of(task_dir), *bin = NULL;
	char *ctl = control_dir_of(attempt_dir);
	char node[NODE_NAME_MAX + 1], **args = NULL, **env = NULL;
	long long job_id = exec_slurm_job_id(ctl);
	int sv[2] = {-1, -1}, rc;
	size_t n = 0;
	struct stat st;
	pid_t pid;

	rc = job_id > 0 ? session_node(attempt_dir, task_dir, node,
				       sizeof(node))
			: -ENOENT;
	if (slurm_array_element(task_dir))
		/* srun --jobid needs the element's own id, not kept. */
		rc = kn_errorf(err, KN_EUNAVAIL, NULL,
			       "a job array's element under Slurm takes no "
			       "session");
	else if (rc == -EINVAL)
		kn_errorf(err, KN_EUNAVAIL, NULL,
			  "the task's node file is not a node name");
	else if (rc < 0)
		kn_errorf(err, KN_EUNAVAIL, NULL,
			  "the task's shim has not started on its node yet");
	else if (stat(attempt_dir, &st) < 0 ||
		 !(bin = realpath("/proc/self/exe", NULL)) ||
		 socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		rc = kn_errorf(err, KN_EUNAVAIL, NULL,
			       "cannot start srun for the session: %s",
			       strerror(errno));
	if (rc < 0)
		goto out;
	args_add(&args, &n, kn_xstrdup("srun"));
	args_add(&args, &n, kn_asprintf("--jobid=%lld", job_id));
	args_add(&args, &n, kn_xstrdup("--overlap"));
	args_add(&args, &n, kn_xstrdup("--nodes=1"));
	args_add(&args, &n, kn_xstrdup("--ntasks=1"));
	args_add(&args, &n, kn_asprintf("--nodelist=%s", node));
	args_add(&args, &n, kn_xstrdup("--unbuffered"));
	args_add(&args, &n, kn_xstrdup("--quiet"));
	args_add(&args, &n, kn_xstrdup(bin));
	args_add(&args, &n, kn_xstrdup("shim"));
	args_add(&args, &n, kn_xstrdup("--bridge"));
	args_add(&args, &n, kn_xstrdup(task_dir));
	if (port > 0) {
		args_add(&args, &n, kn_xstrdup("--port"));
		args_add(&args, &n, kn_asprintf("%d", port));
	}
	n = 0;
	for (char **e = environ; *e; e++)
		if (slurm_command_env(*e))
			args_add(&env, &n, *e);
	/* The server's SIGCHLD handler reaps it; it ends with its stdin. */
	pid = fork();
	if (pid == 0)
		session_srun_child(sv[1], st.st_uid, st.st_gid, args, env);
	if (pid < 0 || fcntl(sv[0], F_SETFL, O_NONBLOCK) < 0) {
		rc = kn_errorf(err, KN_EUNAVAIL, NULL,
			       "cannot start srun for the session: %s",
			       strerror(errno));
		goto out;
	}
	rc = sv[0];
	sv[0] = -1;
out:
	for (int i = 0; i < 2; i++)
		if (sv[i] >= 0)
			close(sv[i]);
	kn_strv_free(args);
	KN_FREE_ALL(env, bin, ctl, attempt_dir);
	return rc;
}

static int slurm_session_connect(struct kn_executor *ex, const char *task_dir,
				 struct kn_error *err)
{
	(void)ex;
	return srun_bridge(task_dir, 0, err);
}

static int slurm_port_connect(struct kn_executor *ex, const char *task_dir,
			      int port, struct kn_error *err)
{
	(void)ex;
	return srun_bridge(task_dir, port, err);
}

static const struct kn_executor_ops slurm_ops = {
	.name = "slurm",
	.selector_key = "pool",
	.home_searchable = true,
	.times_from_engine = true,
	.runs_arrays = true,
	.flush = slurm_array_flush,
	.isolation = "slurm executor: its own; pid namespace, home hidden, "
		     "environment built",
	.limits = "tasks run under the slurm executor",
	.start = slurm_start,
	.stop = slurm_stop,
	.status = slurm_status,
	.adopt = slurm_adopt,
	.release = slurm_release,
	.inventory = slurm_inventory,
	.admit = slurm_admit,
	.set_node = slurm_set_node,
	.session_connect = slurm_session_connect,
	.port_connect = slurm_port_connect,
};

int kn_slurm_config_check(const struct kn_slurm_config *cfg,
			  struct kn_error *err)
{
	const char *p = cfg->partitions;

	if (cfg->shards_per_gpu < 1 || cfg->shards_per_gpu > 1000)
		return kn_errorf(err, KN_EINVAL, "slurm_shards_per_gpu",
				 "--slurm-shards-per-gpu: %d is not in 1..1000",
				 cfg->shards_per_gpu);
	while (p && *p) {
		size_t n = strcspn(p, ",");
		const char *eq = memchr(p, '=', n);
		size_t klen = eq ? (size_t)(eq - p) : 0;

		if (!eq || klen == 0 || klen + 1 == n ||
		    klen >= KN_SLURM_PARTITION_KEY_MAX ||
		    !((klen == 7 && !strncmp(p, "default", 7)) ||
		      (klen == 4 && !strncmp(p, "spot", 4)) ||
		      (klen > 5 && !strncmp(p, "pool:", 5))))
			return kn_errorf(err, KN_EINVAL, "slurm_partitions",
					 "--slurm-partitions: \"%.*s\" is not "
					 "default=P, spot=P or pool:NAME=P",
					 (int)n, p);
		p += n;
		if (*p == ',')
			p++;
	}
	return 0;
}

struct kn_executor *kn_slurm_executor_new(const struct kn_slurm_config *cfg)
{
	struct slurm_exec *own = kn_xcalloc(1, sizeof(*own));

	own->cfg.shards_per_gpu = cfg->shards_per_gpu;
	own->batches = slurm_batches_new();
	own->cfg.partitions = cfg->partitions ? kn_xstrdup(cfg->partitions)
					      : NULL;
	if (cfg->state_dir) {
		own->cfg.state_dir = kn_xstrdup(cfg->state_dir);
		own->poll = slurm_poll_new(cfg->state_dir);
	}
	return kn_executor_new(&slurm_ops, own);
}
