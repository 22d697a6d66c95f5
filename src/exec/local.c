/*
 * The local executor: one shim process per task, started with posix_spawn
 * in a new session so that neither a signal to the server's process group
 * nor the server's death reaches it. What the shim needs (argv, env,
 * limits) travels in TASK_DIR/launch.json rather than on its command line,
 * which keeps environment values out of `ps` and has no length limit.
 *
 * The shim is kiln-shim, installed beside kiln and linked with only what
 * a task start needs (loading the whole kiln binary and its libraries
 * was most of a shim's own CPU time), or `kiln shim` itself for a task
 * whose inputs must be fetched (blob stores, digests) or prerequisites
 * checked, and wherever no kiln-shim was installed. A kiln-shim
 * replaced since the server started (an upgrade) is not run: its
 * launch.json may not be this server's.
 */
#include "exec.h"
#include "internal.h"
#include "spec/spec.h"
#include "sandbox/sandbox.h"

#include "cgroup/cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

extern char **environ;

/* Start time (field 22 of /proc/PID/stat), to tell a reused pid apart. */
int exec_proc_start_time(int pid, int64_t *out)
{
	char path[64], *text = NULL, *p;
	unsigned long long start = 0;
	int rc;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	rc = kn_read_file(path, 4096, &text, NULL);
	if (rc < 0)
		return rc;
	/* The command name (field 2) may hold spaces; skip past its ')'. */
	p = strrchr(text, ')');
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u "
				"%*u %*u %*d %*d %*d %*d %*d %*d %llu",
			 &start) != 1) {
		free(text);
		return -EINVAL;
	}
	free(text);
	*out = (int64_t)start;
	return 0;
}

bool exec_proc_alive(const struct kn_task_proc *proc)
{
	int64_t start;

	if (proc->pid <= 0 || exec_proc_start_time(proc->pid, &start) < 0)
		return false;
	return start == proc->start;
}

static json_t *string_array(char *const *v)
{
	json_t *a = json_array();
	for (; v && *v; v++)
		json_array_append_new(a, json_string(*v));
	return a;
}

static bool dropped(const char *entry, const char *const *drop)
{
	size_t n = strcspn(entry, "=");

	for (; drop && *drop; drop++)
		if (strlen(*drop) == n && !strncmp(entry, *drop, n))
			return true;
	return false;
}

static json_t *env_array(char *const *v, const char *const *drop)
{
	json_t *a = json_array();
	for (; v && *v; v++)
		if (!dropped(*v, drop))
			json_array_append_new(a, json_string(*v));
	return a;
}

/* The task's user as the server looked it up: the shim checks it. */
static json_t *user_object(const struct kn_sandbox_user *u)
{
	json_t *groups = json_array();

	for (int i = 0; i < u->n_groups; i++)
		json_array_append_new(groups, json_integer(u->groups[i]));
	return json_pack("{s:s, s:I, s:I, s:o}", "name", u->name, "uid",
			 (json_int_t)u->uid, "gid", (json_int_t)u->gid,
			 "groups", groups);
}

int exec_write_launch(const struct kn_task_launch *l,
		      const char *const *drop, int timeout_signal,
		      int stop_poll_ms, struct kn_error *err)
{
	char *launch_path = kn_asprintf("%s/launch.json", l->task_dir);
	char *text;
	json_t *doc;
	int rc;

	doc = json_pack("{s:o, s:o, s:s?, s:I, s:I, s:I, s:i}", "argv",
			string_array(l->argv), "env", env_array(l->env, drop),
			"workdir", l->workdir, "timeout_ms",
			(json_int_t)l->timeout_ms, "grace_ms",
			(json_int_t)l->grace_ms, "log_max_bytes",
			(json_int_t)l->log_max_bytes, "log_keep", l->log_keep);
	if (l->devices)
		json_object_set_new(doc, "devices", string_array(l->devices));
	if (l->limits)
		json_object_set_new(
			doc, "limits",
			json_pack("{s:s, s:s, s:I, s:i, s:I}", "cgroup_root",
				  l->limits->cgroup_root, "cgroup_parent",
				  l->limits->cgroup_parent, "memory_bytes",
				  (json_int_t)l->limits->memory_bytes,
				  "cpu_milli", l->limits->cpu_milli, "pids_max",
				  (json_int_t)l->limits->pids_max));
	if (timeout_signal > 0)
		json_object_set_new(doc, "timeout_signal",
				    json_integer(timeout_signal));
	if (stop_poll_ms > 0)
		json_object_set_new(doc, "stop_poll_ms",
				    json_integer(stop_poll_ms));
	if (l->run_as)
		json_object_set_new(doc, "run_as", json_string(l->run_as));
	if (l->tty)
		json_object_set_new(doc, "tty", json_true());
	if (l->user)
		json_object_set_new(doc, "user", user_object(l->user));
	if (l->server_user)
		json_object_set_new(doc, "server_user",
				    json_pack("{s:s, s:I, s:s?}", "name",
					      l->server_user, "uid",
					      (json_int_t)getuid(), "home",
					      l->server_home));
	if (l->home)
		json_object_set_new(doc, "home", json_string(l->home));
	if (l->unisolated)
		json_object_set_new(doc, "isolation", json_string("none"));
	text = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	rc = kn_write_text_replace(launch_path, text, 0600, err);
	KN_FREE_ALL(text, launch_path);
	return rc;
}

/* shim.pid's reserved size: "PID START\n" fits, padded with spaces. */
#define SHIM_PID_SIZE 64

/*
 * The room the shim writes in before its task starts (its pid, the exit
 * record), taken here: a full disk refuses the start (the job waits in
 * the queue) rather than leave a shim that cannot say it lives, whose
 * task a restarted server would count as lost. The shim overwrites both
 * in place, which needs no free space.
 */
static int reserve_shim_files(const char *task_dir, struct kn_error *err)
{
	char *path = kn_asprintf("%s/shim.pid", task_dir);
	char blank[SHIM_PID_SIZE];
	int rc, fd = -1;

	memset(blank, ' ', sizeof(blank));
	blank[sizeof(blank) - 1] = '\n';
	rc = kn_write_file_replace(path, blank, sizeof(blank), 0600);
	if (rc == 0)
		rc = exec_exit_record_prepare(task_dir, &fd);
	if (fd >= 0)
		close(fd);
	if (rc < 0)
		rc = kn_errorf(err, kn_errcode_for_write(rc), NULL,
			       "cannot reserve the shim's files in %s: %s",
			       task_dir, strerror(-rc));
	free(path);
	return rc;
}

bool kn_shim_needs_prepare(char *const *env)
{
	return kn_env_get(env, "KILN_INPUTS") || kn_env_get(env, "KILN_REQUIRES");
}

/* The local executor's state: the lean shim found at its start. */
struct local {
	char *lean_shim; /* kiln-shim's path, or NULL: none installed */
	dev_t lean_dev;
	ino_t lean_ino;
};

/* The lean shim, if it is still the file the server started with. */
static const char *lean_shim(const struct local *lo)
{
	struct stat st;

	if (!lo->lean_shim || stat(lo->lean_shim, &st) < 0 ||
	    st.st_dev != lo->lean_dev || st.st_ino != lo->lean_ino)
		return NULL;
	return lo->lean_shim;
}

static int local_start(struct kn_executor *ex, const struct kn_task_launch *l,
		       struct kn_task_proc *out, struct kn_error *err)
{
	char *shim_log = kn_asprintf("%s/shim.log", l->task_dir);
	char *full[] = {"kiln", "shim", "--dir", (char *)l->task_dir, NULL};
	char *lean[] = {"kiln-shim", "--dir", (char *)l->task_dir, NULL};
	const char *path = NULL;
	pid_t pid;
	int rc;

	rc = exec_write_launch(l, NULL, 0, 0, err);
	if (rc == 0)
		rc = reserve_shim_files(l->task_dir, err);
	if (rc < 0)
		goto out;

	/* What only the whole binary can do: fetch, check prerequisites. */
	if (!kn_shim_needs_prepare(l->env))
		path = lean_shim(ex->impl);
	/* Detached: the shim outlives the server and its terminal. */
	rc = kn_spawn_detached(&(struct kn_spawn){.path = path ? path
							       : "/proc/self/exe",
						  .argv = path ? lean : full,
						  .envp = environ,
						  .out_path = shim_log,
						  .err_path = shim_log,
						  .append = true},
			       &pid);
	if (rc != 0) {
		rc = kn_errorf(err, KN_EIO, NULL, "cannot start the task shim: %s",
			       strerror(rc));
		goto out;
	}
	out->pid = pid;
	if (exec_proc_start_time(pid, &out->start) < 0)
		out->start = 0; /* exited already; status.json tells the rest */
	rc = 0;
out:
	free(shim_log);
	return rc;
}

/* The shim reads TASK_DIR/stop.json when SIGTERM arrives. */
static int local_stop(struct kn_executor *ex, const char *task_dir,
		      const struct kn_task_proc *proc, int signo,
		      int64_t grace_ms, struct kn_error *err)
{
	if (!exec_proc_alive(proc))
		return 0;
	if (signo > 0 || grace_ms >= 0) {
		int rc = kn_task_stop_request(task_dir, signo, grace_ms, err);

		if (rc < 0)
			return rc;
	}
	if (kill(proc->pid, SIGTERM) < 0 && errno != ESRCH)
		return kn_errorf(err, KN_EIO, NULL, "cannot signal shim %d: %s",
				 proc->pid, strerror(errno));
	return 0;
}

/* The exit's text as a JSON object, or NULL. */
static json_t *exit_doc(char *text)
{
	json_t *doc = json_loads(text, 0, NULL);

	free(text);
	if (json_is_object(doc))
		return doc;
	json_decref(doc);
	return NULL;
}

/*
 * status.json, or the exit record the shim wrote in place where
 * status.json is missing (a full disk refused it) or not whole (it is
 * not synced where the record is, so a crash of the machine can leave it
 * empty): the exit as a JSON object, or -ENOENT.
 */
static int read_exit_doc(const char *task_dir, json_t **out,
			 struct kn_error *err)
{
	struct kn_error why;
	char *text = NULL;
	int rc;

	/* The task can write its directory: no links, FIFOs or devices. */
	rc = kn_task_file_read(task_dir, "status.json", 65536, &text, NULL,
			       &why);
	if (rc == 0 && (*out = exit_doc(text)) != NULL)
		return 0;
	if (rc == 0 || rc == -ENOENT) {
		text = NULL;
		rc = exec_exit_record_read(task_dir, &text, &why);
		/* Torn: the shim is still writing it, or died doing so. */
		if (rc == -EBADMSG)
			rc = -ENOENT;
		if (rc == 0 && (*out = exit_doc(text)) == NULL)
			rc = kn_errorf(&why, KN_EIO, NULL, "not a JSON object");
	}
	if (rc < 0)
		kn_errorf(err, why.code, why.field, "cannot read the exit in "
			  "%s: %s", task_dir, why.message);
	return rc;
}

int exec_read_status(const char *task_dir, struct kn_task_status *st,
		     struct kn_error *err)
{
	json_t *doc = NULL, *v;
	int rc;

	rc = read_exit_doc(task_dir, &doc, err);
	if (rc < 0)
		return rc; /* -ENOENT (no exit recorded yet) is the caller's */
	*st = (struct kn_task_status){
		.ended = true,
		.exit_code = (int)json_integer_value(
			json_object_get(doc, "exit_code")),
		.signal = (int)json_integer_value(json_object_get(doc, "signal")),
		.started_at_ms = json_integer_value(
			json_object_get(doc, "started_at_ms")),
		.ended_at_ms = json_integer_value(
			json_object_get(doc, "ended_at_ms")),
	};
	v = json_object_get(doc, "reason");
	kn_strlcpy(st->reason, json_is_string(v) ? json_string_value(v) : "",
		   sizeof(st->reason));
	json_decref(doc);
	return 0;
}

void exec_ended_lost(struct kn_task_status *st, const char *why)
{
	memset(st, 0, sizeof(*st));
	st->ended = true;
	st->exit_code = -1;
	st->ended_at_ms = kn_now_ms();
	kn_strlcpy(st->reason, why, sizeof(st->reason));
}

void exec_task_cgroup_name(const char *task_dir, char *name, size_t len)
{
	uint64_t h = 14695981039346656037ULL;

	for (const char *p = task_dir; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ULL;
	snprintf(name, len, "task-%016llx", (unsigned long long)h);
}

/*
 * A shim killed outright took its task with it but left the task's
 * cgroup: removed here. Only the parent comes from launch.json, which
 * the task may have touched when unsandboxed: the hierarchies are always
 * the real ones, and the name is this task directory's own.
 */
static void remove_lost_cgroup(const char *task_dir)
{
	struct kn_cgroup_place place = {KN_CGROUP_ROOT, NULL,
					"/proc/self/cgroup"};
	struct kn_cgroup *cg = NULL;
	struct kn_error why;
	char *text = NULL, name[32];
	json_t *doc;

	if (kn_task_file_read(task_dir, "launch.json", 4 * 1024 * 1024, &text,
			      NULL, &why) < 0)
		return;
	doc = json_loads(text, 0, NULL);
	free(text);
	place.parent = json_string_value(json_object_get(
		json_object_get(doc, "limits"), "cgroup_parent"));
	exec_task_cgroup_name(task_dir, name, sizeof(name));
	if (place.parent && kn_cgroup_new(&place, name, &cg, &why) == 0 &&
	    kn_cgroup_destroy(cg, &why) < 0)
		kn_log(KN_LOG_WARN, "%s", why.message);
	kn_cgroup_free(cg);
	json_decref(doc);
}

static int local_status(struct kn_executor *ex, const char *task_dir,
			const struct kn_task_proc *proc,
			struct kn_task_status *out, struct kn_error *err)
{
	int rc = exec_read_status(task_dir, out, err);

	if (rc == 0)
		return 0;
	if (exec_proc_alive(proc)) {
		if (rc != -ENOENT)
			return rc; /* the shim replaces it when the task ends */
		memset(out, 0, sizeof(*out)); /* running */
		return 0;
	}
	/*
	 * The shim records the exit before it exits (and stays alive until
	 * it can), so a dead shim without one was killed itself; read once
	 * more in case it just finished.
	 */
	if (exec_read_status(task_dir, out, NULL) == 0)
		return 0;
	remove_lost_cgroup(task_dir);
	exec_ended_lost(out, "lost: the task shim died without recording an "
			"exit");
	return 0;
}

static int local_adopt(struct kn_executor *ex, const char *task_dir,
		       struct kn_task_proc *out, struct kn_error *err)
{
	struct kn_error why;
	char *path, *text = NULL;
	long long pid = 0, start = 0;
	int rc;

	rc = kn_task_file_read(task_dir, "shim.pid", 256, &text, NULL, &why);
	if (rc == 0 && text[strspn(text, " \n")] == '\0') {
		rc = -ENOENT; /* reserved by the start, not yet written */
		free(text);
		text = NULL;
	}
	if (rc == -ENOENT) {
		/* Spawned but not yet recorded, or never spawned: shim.log is
		   made by the spawn itself, after launch.json was written and
		   the sandbox and limits were prepared, so only it says the
		   shim was started. */
		path = kn_asprintf("%s/shim.log", task_dir);
		rc = access(path, F_OK) == 0 ? 0 : -ENOENT;
		free(path);
		if (rc < 0)
			return rc;
		out->pid = 0;
		out->start = 0;
		return 0;
	}
	if (rc < 0)
		return kn_errorf(err, KN_EIO, NULL, "cannot read %s/shim.pid: %s",
				 task_dir, why.message);
	if (sscanf(text, "%lld %lld", &pid, &start) != 2 || pid <= 0) {
		free(text);
		return kn_errorf(err, KN_EIO, NULL, "%s/shim.pid is malformed",
				 task_dir);
	}
	free(text);
	out->pid = (int)pid;
	out->start = start;
	return 0;
}

/*
 * Called by the shim itself, so a restarted server can find it: over the
 * room local_start reserved when there is some (a full disk cannot
 * refuse that), else as a new file (a Slurm task's shim). Not synced: a
 * pid means something only while the machine that ran it is up.
 */
int kn_shim_record_pid(const char *task_dir)
{
	struct kn_task_proc self = {getpid(), 0};
	char *path, line[SHIM_PID_SIZE];
	int rc, fd;

	if (exec_proc_start_time(self.pid, &self.start) < 0)
		return -EIO;
	path = kn_asprintf("%s/shim.pid", task_dir);
	memset(line, ' ', sizeof(line));
	rc = snprintf(line, sizeof(line), "%d %lld", self.pid,
		      (long long)self.start);
	line[rc] = ' ';
	line[sizeof(line) - 1] = '\n';
	fd = open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd >= 0) {
		rc = pwrite(fd, line, sizeof(line), 0) == (ssize_t)sizeof(line)
			     ? 0
			     : -EIO;
		close(fd);
	} else {
		rc = kn_write_file_replace(path, line, sizeof(line), 0600);
	}
	free(path);
	return rc;
}

/* A spec's image needs an engine that runs containers. */
static int local_check(struct kn_executor *ex, const struct kn_job_spec *spec,
		       struct kn_error *err)
{
	if (!spec->image)
		return 0;
	return kn_errorf(err, KN_EINVAL, "image",
			 "image: the local executor runs no containers "
			 "(--executor slurm does, with pyxis, and "
			 "--executor kubernetes)");
}

static int local_session_connect(struct kn_executor *ex, const char *task_dir,
				 struct kn_error *err)
{
	(void)ex;
	return kn_session_socket_connect(task_dir, err);
}

static void local_release(struct kn_executor *ex)
{
	struct local *lo = ex->impl;

	KN_FREE_ALL(lo->lean_shim, lo);
}

static const struct kn_executor_ops local_ops = {
	.name = "local",
	.start = local_start,
	.stop = local_stop,
	.status = local_status,
	.adopt = local_adopt,
	.check = local_check,
	.session_connect = local_session_connect,
	.release = local_release,
};

struct kn_executor *kn_local_executor_new(void)
{
	struct local *lo = kn_xcalloc(1, sizeof(*lo));
	struct stat st;

	lo->lean_shim = kn_libexec_path("kiln-shim");
	if (lo->lean_shim && stat(lo->lean_shim, &st) == 0) {
		lo->lean_dev = st.st_dev;
		lo->lean_ino = st.st_ino;
	} else {
		free(lo->lean_shim);
		lo->lean_shim = NULL;
	}
	return kn_executor_new(&local_ops, lo);
}
