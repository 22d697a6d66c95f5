/*
 * The task shim: `kiln shim --dir TASK_DIR`, one per task, in its own
 * session. It runs the task in a new process group, copies the group's
 * output into TASK_DIR/output.log (rotated by size) and when each line
 * came into TASK_DIR/output.times (logtimes.c), turns SIGTERM into
 * a signal-then-SIGKILL for the whole group (SIGTERM and the launch's grace,
 * or what TASK_DIR/stop.json asks for), passes SIGUSR1 and SIGUSR2 on to
 * the group, enforces the timeout (with the launch's timeout_signal,
 * SIGTERM unless set), takes TASK_DIR/stop.json appearing as a stop when
 * the launch sets stop_poll_ms (the Slurm executor), and last records
 * the exit: in place in TASK_DIR/exit.rec, written before the task
 * started so a full disk cannot refuse it, and in TASK_DIR/status.json.
 * It never talks to the server, so it behaves the same whether the
 * server is up, down or restarted.
 *
 * One poll loop over the output pipe, a signalfd and a timerfd: no signal
 * handlers, no races between them.
 */
#include "exec.h"
#include "internal.h"
#include "sandbox/sandbox.h"

#include "cgroup/cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

/* After the task ends, how long its leftover output may keep coming. */
#define DRAIN_MS 2000

struct shim {
	const char *dir;
	char **argv;
	char **env;
	char *workdir;
	char **devices;     /* nodes the task may open (launch "devices") */
	/* launch "limits": the task's cgroup, or limited false */
	bool limited;
	struct kn_cgroup_limits limits;
	char *cgroup_root, *cgroup_parent;
	struct kn_cgroup *cgroup;
	int64_t timeout_ms, grace_ms, log_max_bytes;
	int log_keep;
	int timeout_signal; /* sent when the timeout runs out */
	int stop_poll_ms;   /* look for stop.json this often; 0 = on SIGTERM */
	int stop_signal;    /* also a stop, passed on as itself; 0 = none */
	bool log_stdout;    /* output to our stdout, not TASK_DIR's log */
	char *run_as;       /* the task's Unix user (as root), or NULL */
	json_t *user_doc;   /* launch "user": run_as as the server found it */
	json_t *server_user_doc; /* launch "server_user": the shim's own */
	struct kn_sandbox_user user;
	char *home;         /* hidden from the task, or NULL */
	bool unisolated;    /* launch.json's "isolation": "none" */
	enum kn_sandbox_host host;

	char **task_env;    /* built before the fork */
	struct kn_sandbox *sandbox;
	bool tty;           /* launch "tty": the task runs on a terminal */
	struct shim_sessions *sessions; /* TASK_DIR.sock, or NULL */

	int log_fd;
	int64_t log_size;
	int times_fd;         /* output.times, or -1: no line times */
	int64_t times_last_ms; /* the last record's time; -1: none yet */
	bool line_start;      /* the log's next byte starts a line */
	int record_fd;      /* the exit record, written before the task */
	pid_t child;
	bool stopping;
	char reason[96];
};

static char **json_strings(json_t *a)
{
	size_t n = json_array_size(a), i;
	char **v = kn_xcalloc(n + 1, sizeof(char *));

	for (i = 0; i < n; i++) {
		const char *s = json_string_value(json_array_get(a, i));
		v[i] = kn_xstrdup(s ? s : "");
	}
	return v;
}

/* A copy of doc's string key, or NULL when it has none. */
static char *string_copy(json_t *doc, const char *key)
{
	const char *v = json_string_value(json_object_get(doc, key));

	return v ? kn_xstrdup(v) : NULL;
}

static void load_limits(struct shim *s, json_t *o)
{
	const char *root = json_string_value(json_object_get(o, "cgroup_root"));
	const char *parent =
		json_string_value(json_object_get(o, "cgroup_parent"));

	if (!json_is_object(o) || !root || !parent)
		return;
	s->limited = true;
	s->cgroup_root = kn_xstrdup(root);
	s->cgroup_parent = kn_xstrdup(parent);
	s->limits.memory_bytes =
		json_integer_value(json_object_get(o, "memory_bytes"));
	s->limits.cpu_milli =
		(int)json_integer_value(json_object_get(o, "cpu_milli"));
	s->limits.pids_max = json_integer_value(json_object_get(o, "pids_max"));
	/* Limited: only the launch's devices (none without "devices"). */
	s->limits.devices = s->devices;
}

static int load_launch(struct shim *s, struct kn_error *err)
{
	char *path = kn_asprintf("%s/launch.json", s->dir), *text = NULL;
	json_t *doc;
	json_error_t jerr;
	int rc;

	rc = kn_read_file(path, 4 * 1024 * 1024, &text, NULL);
	if (rc < 0) {
		rc = kn_errorf(err, KN_EIO, NULL, "cannot read %s: %s", path,
			       strerror(-rc));
		free(path);
		return rc;
	}
	doc = json_loads(text, 0, &jerr);
	free(text);
	if (!json_is_object(doc) ||
	    json_array_size(json_object_get(doc, "argv")) == 0) {
		json_decref(doc);
		rc = kn_errorf(err, KN_EINVAL, NULL, "%s: not a launch file", path);
		free(path);
		return rc;
	}
	free(path);
	s->argv = json_strings(json_object_get(doc, "argv"));
	s->env = json_strings(json_object_get(doc, "env"));
	s->devices = json_strings(json_object_get(doc, "devices"));
	s->workdir = string_copy(doc, "workdir");
	s->timeout_ms = json_integer_value(json_object_get(doc, "timeout_ms"));
	s->grace_ms = json_integer_value(json_object_get(doc, "grace_ms"));
	s->log_max_bytes =
		json_integer_value(json_object_get(doc, "log_max_bytes"));
	s->log_keep = (int)json_integer_value(json_object_get(doc, "log_keep"));
	s->timeout_signal =
		(int)json_integer_value(json_object_get(doc, "timeout_signal"));
	if (s->timeout_signal <= 0 || s->timeout_signal >= 65)
		s->timeout_signal = SIGTERM;
	s->stop_poll_ms =
		(int)json_integer_value(json_object_get(doc, "stop_poll_ms"));
	s->stop_signal =
		(int)json_integer_value(json_object_get(doc, "stop_signal"));
	if (s->stop_signal < 0 || s->stop_signal >= 65)
		s->stop_signal = 0;
	s->log_stdout = json_is_true(json_object_get(doc, "log_stdout"));
	s->tty = json_is_true(json_object_get(doc, "tty"));
	s->run_as = string_copy(doc, "run_as");
	s->user_doc = json_incref(json_object_get(doc, "user"));
	s->server_user_doc = json_incref(json_object_get(doc, "server_user"));
	s->home = string_copy(doc, "home");
	s->unisolated = json_is_string(json_object_get(doc, "isolation")) &&
			!strcmp(json_string_value(json_object_get(doc, "isolation")),
				"none");
	load_limits(s, json_object_get(doc, "limits"));
	if (s->log_max_bytes <= 0)
		s->log_max_bytes = KN_LOG_MAX_BYTES;
	if (s->log_keep < 1)
		s->log_keep = KN_LOG_KEEP;
	json_decref(doc);
	return 0;
}

static int open_log(struct shim *s)
{
	char *path;
	off_t end;

	if (s->log_stdout) {
		/* The container runtime keeps and rotates this log. */
		s->log_fd = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
		s->log_max_bytes = INT64_MAX;
		return s->log_fd < 0 ? -errno : 0;
	}
	/* Before the log, so a reader that finds the log finds its times. */
	path = kn_asprintf("%s/" KN_LOG_TIMES_FILE, s->dir);
	s->times_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
			   0600);
	free(path);
	s->times_last_ms = -1;
	s->line_start = true;
	path = kn_asprintf("%s/" KN_LOG_FILE, s->dir);

	s->log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	free(path);
	if (s->log_fd < 0)
		return -errno;
	end = lseek(s->log_fd, 0, SEEK_END);
	s->log_size = end > 0 ? end : 0;
	return 0;
}

/* name -> name.1 -> ... -> name.KEEP (dropped). */
static void rotate_file(struct shim *s, const char *name)
{
	for (int i = s->log_keep; i >= 1; i--) {
		char *from = i == 1 ? kn_asprintf("%s/%s", s->dir, name)
				    : kn_asprintf("%s/%s.%d", s->dir, name,
						  i - 1);
		char *to = kn_asprintf("%s/%s.%d", s->dir, name, i);
		rename(from, to);
		KN_FREE_ALL(from, to);
	}
}

/* The log and its line times rotate together. */
static void rotate_log(struct shim *s)
{
	close(s->log_fd);
	if (s->times_fd >= 0)
		close(s->times_fd);
	rotate_file(s, KN_LOG_FILE);
	rotate_file(s, KN_LOG_TIMES_FILE);
	if (open_log(s) < 0)
		s->log_fd = -1;
}

/*
 * Record that the log's bytes from s->log_size on arrived at now_ms. A
 * record cut short (a full disk) is cut off whole and the times stop:
 * the task goes on, its later lines shown with the last time known.
 */
static void record_time(struct shim *s, int64_t now_ms)
{
	struct stat st;

	if (s->times_fd < 0 || now_ms == s->times_last_ms)
		return;
	if (kn_log_times_append(s->times_fd, s->log_size, now_ms) == 0) {
		s->times_last_ms = now_ms;
		return;
	}
	if (fstat(s->times_fd, &st) == 0 &&
	    ftruncate(s->times_fd, st.st_size - st.st_size % 16) < 0)
		kn_log(KN_LOG_WARN, "%s/" KN_LOG_TIMES_FILE ": %s", s->dir,
		       strerror(errno));
	close(s->times_fd);
	s->times_fd = -1;
}

static void write_log(struct shim *s, const char *buf, size_t len)
{
	/* A read that starts no line (the middle of a long one) needs no
	   time: its lines' times are in the record before it. */
	bool timed = len && (s->line_start || memchr(buf, '\n', len - 1));
	int64_t now = timed ? kn_now_ms() : 0;

	if (len)
		s->line_start = buf[len - 1] == '\n';
	while (len > 0 && s->log_fd >= 0) {
		ssize_t n;
		size_t room = (size_t)(s->log_max_bytes - s->log_size);

		if (s->log_size >= s->log_max_bytes) {
			rotate_log(s);
			/* The new file's first byte is a line's, to a reader. */
			timed = true;
			now = kn_now_ms();
			continue;
		}
		if (timed) {
			record_time(s, now);
			timed = false;
		}
		n = write(s->log_fd, buf, len < room ? len : room);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return; /* a full disk must not stop the task */
		}
		s->log_size += n;
		buf += n;
		len -= (size_t)n;
	}
}

extern char **environ;

/* The shim's own files: the task may read them, not write or replace. */
static const char *const shim_files[] = {
	"launch.json", "shim.pid", "shim.log", KN_LOG_FILE, KN_LOG_TIMES_FILE,
	EXEC_EXIT_RECORD, NULL,
};

#define MAX_SHIM_PATHS 10

/* A uid or gid: (uid_t)-1 means "unchanged" to setresuid, never an id. */
static bool valid_id(json_t *v, unsigned *out)
{
	json_int_t n = json_integer_value(v);

	if (!json_is_integer(v) || n < 0 || n >= (json_int_t)UINT32_MAX)
		return false;
	*out = (unsigned)n;
	return true;
}

/*
 * launch.json's "user": {"name", "uid", "gid", "groups"}, which the
 * sandbox then checks (never root's ids or the server's own).
 */
static int parse_user(json_t *o, struct kn_sandbox_user *u,
		      struct kn_error *err)
{
	const char *name = json_string_value(json_object_get(o, "name"));
	json_t *groups = json_object_get(o, "groups");
	unsigned id;
	size_t i;

	memset(u, 0, sizeof(*u));
	if (!json_is_object(o))
		return kn_errorf(err, KN_EINVAL, "user",
				 "launch.json: user: not an object");
	if (!name || !name[0] || strlen(name) >= sizeof(u->name))
		return kn_errorf(err, KN_EINVAL, "user.name",
				 "launch.json: user.name: not a user name");
	kn_strlcpy(u->name, name, sizeof(u->name));
	if (!valid_id(json_object_get(o, "uid"), &id))
		return kn_errorf(err, KN_EINVAL, "user.uid",
				 "launch.json: user.uid: not a uid");
	u->uid = (uid_t)id;
	if (!valid_id(json_object_get(o, "gid"), &id))
		return kn_errorf(err, KN_EINVAL, "user.gid",
				 "launch.json: user.gid: not a gid");
	u->gid = (gid_t)id;
	if (!json_is_array(groups) ||
	    json_array_size(groups) > KN_SANDBOX_MAX_GROUPS)
		return kn_errorf(err, KN_EINVAL, "user.groups",
				 "launch.json: user.groups: not a list of at "
				 "most %d gids", KN_SANDBOX_MAX_GROUPS);
	for (i = 0; i < json_array_size(groups); i++) {
		if (!valid_id(json_array_get(groups, i), &id))
			return kn_errorf(err, KN_EINVAL, "user.groups",
					 "launch.json: user.groups[%zu]: not "
					 "a gid", i);
		u->groups[i] = (gid_t)id;
	}
	u->n_groups = (int)i;
	return 0;
}

/*
 * launch.json's "server_user": {"name", "uid", "home"}, the user this
 * shim runs as, as the server found it: taken only when it is.
 */
static int parse_server_user(json_t *o, struct kn_sandbox_config *cfg,
			     struct kn_error *err)
{
	const char *name = json_string_value(json_object_get(o, "name"));
	json_t *home = json_object_get(o, "home");
	unsigned uid;

	if (!json_is_object(o) || !name || !name[0])
		return kn_errorf(err, KN_EINVAL, "server_user",
				 "launch.json: server_user: not a user");
	if (!valid_id(json_object_get(o, "uid"), &uid) || uid != getuid())
		return kn_errorf(err, KN_EINVAL, "server_user.uid",
				 "launch.json: server_user.uid: not this "
				 "shim's uid %u", (unsigned)getuid());
	if (home && !json_is_string(home))
		return kn_errorf(err, KN_EINVAL, "server_user.home",
				 "launch.json: server_user.home: not a path");
	cfg->own_name = name;
	cfg->own_home = json_string_value(home);
	return 0;
}

/*
 * The task's environment and sandbox, built before the fork. The local
 * executor's shim isolates the task wholly; under Slurm, whose allocation
 * sets the user, /tmp and the devices, it gives the task a pid namespace
 * (so the task dies with the shim and sees no other process) and hides
 * $KILN_HOME but the task's own directories; in a pod the pod isolates
 * it. All three build its environment.
 */
static int prepare_sandbox(struct shim *s, struct kn_error *err)
{
	static const char *const dir_vars[] = {
		"KILN_INPUT_DIR", "KILN_OUTPUT_DIR", "KILN_CHECKPOINT_DIR",
		"KILN_DEVENV_HOME", NULL,
	};
	const char *writable[MAX_SHIM_PATHS] = {NULL}, *visible[3] = {NULL};
	char *read_only[MAX_SHIM_PATHS] = {NULL}, *real[2] = {NULL};
	const char *mps = kn_env_get(s->env, "CUDA_MPS_PIPE_DIRECTORY");
	struct kn_sandbox_config cfg;
	size_t n = 0, nv = 0;
	int rc = 0;

	memset(&cfg, 0, sizeof(cfg));
	if (s->host == KN_SANDBOX_LOCAL && !s->unisolated)
		cfg.mode = geteuid() == 0 ? KN_SANDBOX_UID : KN_SANDBOX_USERNS;
	else if (s->host == KN_SANDBOX_SLURM)
		cfg.mode = KN_SANDBOX_PROCS;
	for (const char *const *v = dir_vars; *v; v++)
		if (kn_env_get(s->env, *v))
			writable[n++] = kn_env_get(s->env, *v);
	/* Relative names resolve against the shim's directory, as chdir's. */
	if ((real[0] = realpath(s->workdir ? s->workdir : s->dir, NULL)))
		visible[nv++] = real[0];
	if ((real[1] = realpath(mps ? mps : "/tmp/nvidia-mps", NULL)))
		visible[nv++] = real[1];
	for (n = 0; shim_files[n]; n++)
		read_only[n] = kn_asprintf("%s/%s", s->dir, shim_files[n]);
	/* A deployment's or an evaluation's verified model copy. */
	if (kn_env_get(s->env, "KILN_MODEL_DIR"))
		read_only[n] = kn_xstrdup(kn_env_get(s->env, "KILN_MODEL_DIR"));
	cfg.run_as = s->run_as;
	if (cfg.mode == KN_SANDBOX_UID && s->user_doc) {
		rc = parse_user(s->user_doc, &s->user, err);
		cfg.user = &s->user;
	}
	if (cfg.mode == KN_SANDBOX_USERNS && s->server_user_doc)
		rc = parse_server_user(s->server_user_doc, &cfg, err);
	cfg.hide = s->home;
	cfg.task_dir = s->dir;
	cfg.writable = writable;
	cfg.visible = visible;
	cfg.devices = (const char *const *)s->devices;
	cfg.read_only = (const char *const *)read_only;
	if (rc == 0)
		rc = kn_sandbox_new(&cfg, &s->sandbox, err);
	for (size_t i = 0; read_only[i]; i++)
		free(read_only[i]);
	KN_FREE_ALL(real[0], real[1]);
	if (rc < 0)
		return rc;
	s->task_env = kn_sandbox_env_build(
		s->host, s->env, environ,
		s->host == KN_SANDBOX_POD ? NULL : s->dir,
		kn_sandbox_user(s->sandbox));
	return 0;
}

/*
 * The child waits on go until the parent has it in its process group
 * and its cgroup: the child's sandbox, its namespaces' processes and the
 * task all come after the byte, inside the task's limits. Moving the
 * child, not the shim in and out around the fork, is one migration per
 * hierarchy instead of two. A child that cannot be limited is killed
 * before it runs anything: -1 and err.
 */
static int release_child(struct shim *s, int go, struct kn_error *err)
{
	int rc = 0;

	/* On a terminal the child makes its own session (and group). */
	if (!s->tty)
		setpgid(s->child, s->child); /* also done by the child */
	if (s->cgroup)
		rc = kn_cgroup_enter(s->cgroup, (int)s->child, err);
	if (rc == 0 && write(go, "g", 1) == 1)
		return 0;
	kill(s->child, SIGKILL); /* unlimited, or it would wait forever */
	if (rc == 0)
		return 0;
	waitpid(s->child, NULL, 0);
	s->child = 0;
	return rc;
}

/*
 * In the child: die with the shim (a shim killed outright must not leave
 * its task running, holding its GPUs unseen). In a sandbox the child is
 * the namespace's init, whose end ends the namespace. shim_fd (a pidfd,
 * or -1 where the kernel has none) catches a shim gone before the prctl.
 */
static void die_with_shim(int shim_fd)
{
	struct pollfd gone = {shim_fd, POLLIN, 0};

	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 ||
	    (shim_fd >= 0 && poll(&gone, 1, 0) != 0))
		_exit(127);
	if (shim_fd >= 0)
		close(shim_fd);
}

/*
 * Forks the task's first process (s->child, -1 when the fork failed);
 * -1 and err only when its cgroup refused it (see release_child).
 */
static int start_child(struct shim *s, int out_fd, struct kn_error *err)
{
	char why[256], b;
	int go[2], shim_fd, rc = 0;
	pid_t pid;

	if (pipe2(go, O_CLOEXEC) < 0) {
		s->child = -1;
		return 0;
	}
	shim_fd = (int)syscall(SYS_pidfd_open, getpid(), 0);
	pid = kn_sandbox_fork(s->sandbox);
	if (pid != 0) {
		s->child = pid;
		close(go[0]);
		if (shim_fd >= 0)
			close(shim_fd);
		if (pid > 0)
			rc = release_child(s, go[1], err);
		close(go[1]);
		return rc;
	}
	die_with_shim(shim_fd);
	/* Child: its own process group, so a stop reaches all it starts;
	   on a terminal, its own session, whose terminal it is. */
	close(go[1]);
	if (s->tty) {
		if (setsid() < 0 || ioctl(out_fd, TIOCSCTTY, 0) < 0)
			_exit(127);
	} else {
		setpgid(0, 0);
	}
	/* Every signal stays blocked, so none sent to the group is lost
	   before the task can take it: the task's process unblocks them
	   just before its exec, and a sandbox's init passes on to the task
	   what came before the task was there (kn_sandbox_exec). */
	{
		sigset_t all;
		sigfillset(&all);
		sigprocmask(SIG_SETMASK, &all, NULL);
	}
	/* Slurm signals every process of the step, the task too: a task
	   whose checkpoint signal is another gets it from this shim
	   instead, and ignoring SIGTERM keeps Slurm's from killing it. */
	if (s->stop_poll_ms > 0 && s->timeout_signal != SIGTERM)
		signal(SIGTERM, SIG_IGN);
	int devnull = s->tty ? dup(out_fd) : open("/dev/null", O_RDONLY);
	if (devnull >= 0) {
		dup2(devnull, 0);
		close(devnull);
	}
	dup2(out_fd, 1);
	dup2(out_fd, 2);
	if (read(go[0], &b, 1) != 1)
		_exit(127);
	close(go[0]);
	kn_sandbox_exec(s->sandbox, s->workdir ? s->workdir : s->dir, s->argv,
			s->task_env, why, sizeof(why));
	dprintf(2, "kiln: %s\n", why);
	_exit(127);
}

/* The task's cgroup (exec_task_cgroup_name). */
static int limits_begin(struct shim *s, struct kn_error *err)
{
	struct kn_cgroup_place place = {s->cgroup_root, s->cgroup_parent,
					"/proc/self/cgroup"};
	char name[32];
	int rc;

	exec_task_cgroup_name(s->dir, name, sizeof(name));
	rc = kn_cgroup_new(&place, name, &s->cgroup, err);
	if (rc == 0)
		rc = kn_cgroup_create(s->cgroup, &s->limits, err);
	return rc;
}

/*
 * After the task: the OOM killer's work becomes the reason, then what
 * is left in the cgroup is killed and the cgroup removed.
 */
static void limits_end(struct shim *s, int wstatus)
{
	struct kn_error err;
	bool ok = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;

	if (!s->cgroup)
		return;
	if (!ok && !s->reason[0] && kn_cgroup_oom_kills(s->cgroup) > 0) {
		char limit[32];

		kn_format_size(s->limits.memory_bytes, limit, sizeof(limit));
		if (s->limits.memory_bytes > 0)
			snprintf(s->reason, sizeof(s->reason),
				 "out of memory (limit %s)", limit);
		else
			kn_strlcpy(s->reason, "out of memory", sizeof(s->reason));
	}
	if (kn_cgroup_destroy(s->cgroup, &err) < 0)
		kn_log(KN_LOG_WARN, "%s", err.message);
	kn_cgroup_free(s->cgroup);
	s->cgroup = NULL;
}

static void arm_timer(int tfd, int64_t ms)
{
	struct itimerspec its;

	memset(&its, 0, sizeof(its));
	its.it_value.tv_sec = ms / 1000;
	its.it_value.tv_nsec = (ms % 1000) * 1000000;
	if (ms <= 0)
		its.it_value.tv_nsec = 1; /* fire at once, 0 would disarm */
	timerfd_settime(tfd, 0, &its, NULL);
}

/* A stop request's signal and grace from TASK_DIR/stop.json, if any. */
static void read_stop_request(struct shim *s, int *signo, int64_t *grace_ms)
{
	char *path = kn_asprintf("%s/stop.json", s->dir), *text = NULL;
	json_t *doc;

	if (kn_read_file(path, 4096, &text, NULL) == 0 &&
	    (doc = json_loads(text, 0, NULL)) != NULL) {
		json_int_t sig = json_integer_value(json_object_get(doc, "signal"));
		json_t *g = json_object_get(doc, "grace_ms");
		if (sig > 0 && sig < 65)
			*signo = (int)sig;
		if (json_is_integer(g) && json_integer_value(g) >= 0)
			*grace_ms = json_integer_value(g);
		json_decref(doc);
	}
	KN_FREE_ALL(text, path);
}

/*
 * First stop: a signal to the group, SIGKILL when the grace runs out.
 * signo 0: the timeout's signal with a reason, else stop.json's or SIGTERM.
 */
static void begin_stop(struct shim *s, int tfd, const char *reason,
		       int signo_given)
{
	int signo = SIGTERM;
	int64_t grace = s->grace_ms;

	if (s->stopping)
		return;
	s->stopping = true;
	if (reason) {
		kn_strlcpy(s->reason, reason, sizeof(s->reason));
		signo = s->timeout_signal;
	} else if (signo_given) {
		signo = signo_given;
	} else {
		/* Under Slurm a SIGTERM without stop.json is Slurm's own
		   (preemption, its time limit): the task gets its job's
		   checkpoint signal, the launch's timeout_signal there. */
		if (s->stop_poll_ms > 0)
			signo = s->timeout_signal;
		read_stop_request(s, &signo, &grace);
	}
	kill(-s->child, signo);
	arm_timer(tfd, grace > 0 ? grace : 1);
}

/* The exit as status.json and the exit record hold it (malloc'd). */
static char *status_text(const struct shim *s, int wstatus, int64_t started,
			 int64_t ended)
{
	json_t *doc;
	char *text;
	int exit_code = -1, sig = 0;

	if (WIFEXITED(wstatus))
		exit_code = WEXITSTATUS(wstatus);
	else if (WIFSIGNALED(wstatus))
		sig = WTERMSIG(wstatus);
	doc = json_pack("{s:i, s:i, s:s, s:I, s:I}", "exit_code", exit_code,
			"signal", sig, "reason", s->reason, "started_at_ms",
			(json_int_t)started, "ended_at_ms", (json_int_t)ended);
	text = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	return text;
}

/* How long a shim that cannot record the exit waits before trying again. */
#define RECORD_RETRY_S 1

/*
 * The exit, in the record written in place (which a full disk cannot
 * refuse) and in status.json. The record is synced; status.json, the same
 * text, is synced only when the record could not be written, so one
 * durable copy is made, not two (a status.json a crash left empty is
 * read past, to the record). A shim that can write neither for lack of
 * space stays alive and tries again: while it lives its task counts as
 * running, so the exit is recorded late but never lost or invented.
 */
static int write_status(struct shim *s, int wstatus, int64_t started,
			int64_t ended)
{
	char *path = kn_asprintf("%s/status.json", s->dir);
	char *text = status_text(s, wstatus, started, ended);
	bool told = false;
	int rc, rc_rec;

	for (;;) {
		if (s->record_fd < 0)
			exec_exit_record_prepare(s->dir, &s->record_fd);
		rc_rec = s->record_fd < 0 ? -ENOSPC
					  : exec_exit_record_write(
						    s->dir, s->record_fd, text,
						    strlen(text));
		rc = rc_rec == 0 ? kn_write_file_replace(path, text,
							 strlen(text), 0600)
				 : kn_write_file_atomic(path, text,
							strlen(text), 0600);
		if (rc == 0 || rc_rec == 0 ||
		    kn_errcode_for_write(rc) != KN_ENOSPACE)
			break;
		if (!told)
			kn_log(KN_LOG_WARN, "no space to record the task's "
			       "exit in %s; trying again every %ds",
			       s->dir, RECORD_RETRY_S);
		told = true;
		sleep(RECORD_RETRY_S);
	}
	KN_FREE_ALL(text, path);
	return rc_rec == 0 ? 0 : rc;
}

/* Recorded like any exit, so the server judges it the same. */
static int end_unstarted(struct shim *s, int code, const char *why,
			 int64_t started, struct kn_error *err)
{
	int rc;

	if (why != s->reason)
		kn_strlcpy(s->reason, why, sizeof(s->reason));
	rc = write_status(s, W_EXITCODE(code, 0), started, kn_now_ms());
	if (rc < 0)
		rc = kn_errorf(err, KN_EIO, NULL,
			       "cannot write %s/status.json: %s", s->dir,
			       strerror(-rc));
	return rc;
}

/*
 * The task's sessions (shim_session.c), locally and under Slurm (a
 * pod's go through the API server): listened for before the task
 * starts, so a client that sees it running finds the socket, and taken
 * once it runs. Without them the task still runs, and the server says
 * no session can be had.
 */
static void sessions_listen(struct shim *s)
{
	struct kn_error err;

	s->sessions = shim_sessions_new(s->dir, &err);
	if (!s->sessions)
		kn_log(KN_LOG_WARN, "no interactive sessions: %s",
		       err.message);
}

static void sessions_start(struct shim *s, int tty_master)
{
	struct shim_session_cfg cfg = {
		.task_dir = s->dir,
		.sandbox = s->sandbox,
		.init_pid = (int)s->child,
		.workdir = s->workdir ? s->workdir : s->dir,
		.env = s->task_env,
		.cgroup = s->cgroup,
		.tty_master = s->tty ? tty_master : -1,
	};

	shim_sessions_task(s->sessions, &cfg);
}

int kn_shim_main_prepared(const char *task_dir,
			  const struct kn_shim_prepare *prep,
			  struct kn_error *err)
{
	return exec_shim_main(task_dir, prep, KN_SANDBOX_LOCAL, err);
}

void kn_shim_signals_block(int stop_signal, sigset_t *mask)
{
	sigemptyset(mask);
	sigaddset(mask, SIGCHLD);
	sigaddset(mask, SIGTERM);
	sigaddset(mask, SIGINT);
	sigaddset(mask, SIGHUP);
	/* Passed on to the task: Slurm's --signal before the time limit. */
	sigaddset(mask, SIGUSR1);
	sigaddset(mask, SIGUSR2);
	if (stop_signal > 0)
		sigaddset(mask, stop_signal);
	sigprocmask(SIG_BLOCK, mask, NULL);
}

/* The signals the shim handles, blocked and read from a signalfd. */
static int signals_open(const struct shim *s)
{
	sigset_t mask;

	kn_shim_signals_block(s->stop_signal, &mask);
	return signalfd(-1, &mask, SFD_CLOEXEC);
}

/* What supervise follows of the task. */
struct watch {
	bool child_done; /* reaped: wstatus holds its end */
	bool out_open;   /* its output may still come */
	int64_t drain_deadline;
	int wstatus;
};

/*
 * Under Slurm the server cannot signal the shim alone (Slurm signals
 * every process of the step), so it leaves stop.json in the shared task
 * directory.
 */
static bool stop_asked(const struct shim *s)
{
	char *stop = kn_asprintf("%s/stop.json", s->dir);
	bool asked = access(stop, F_OK) == 0;

	free(stop);
	return asked;
}

/* A signal to the shim: the task's end, passed on, or a stop. */
static void on_signal(struct shim *s, int sfd, int tfd, struct watch *w)
{
	struct signalfd_siginfo si;

	if (read(sfd, &si, sizeof(si)) != sizeof(si))
		return;
	if (si.ssi_signo == SIGCHLD) {
		shim_sessions_reap(s->sessions);
		if (!w->child_done &&
		    waitpid(s->child, &w->wstatus, WNOHANG) == s->child) {
			w->child_done = true;
			kn_sandbox_task_status(s->sandbox, &w->wstatus);
			/* Leftovers of the group go with it. */
			kill(-s->child, SIGKILL);
			w->drain_deadline = kn_mono_ms() + DRAIN_MS;
		}
	} else if (s->stop_signal && (int)si.ssi_signo == s->stop_signal &&
		   !w->child_done) {
		begin_stop(s, tfd, NULL, s->stop_signal);
	} else if ((si.ssi_signo == SIGUSR1 || si.ssi_signo == SIGUSR2) &&
		   !w->child_done) {
		kill(-s->child, (int)si.ssi_signo);
	} else if (si.ssi_signo != SIGHUP && !w->child_done) {
		begin_stop(s, tfd, NULL, 0);
	}
}

/* The timeout, or the stop's grace, ran out. */
static void on_timer(struct shim *s, int tfd, const struct watch *w)
{
	uint64_t ticks;

	if (read(tfd, &ticks, sizeof(ticks)) < 0 || w->child_done)
		return;
	if (!s->stopping)
		begin_stop(s, tfd, "timeout", 0);
	else
		kill(-s->child, SIGKILL);
}

/* The task's output to the log (and its sessions, on a terminal). */
static void on_output(struct shim *s, int out_fd, size_t room,
		      struct watch *w)
{
	char buf[65536];
	ssize_t n = read(out_fd, buf, room < sizeof(buf) ? room : sizeof(buf));

	if (n > 0) {
		write_log(s, buf, (size_t)n);
		if (s->tty)
			shim_sessions_task_output(s->sessions, buf, (size_t)n);
	} else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
		w->out_open = false;
	}
}

/*
 * Until the task has ended and its output is drained: its output, the
 * sessions, signals passed on or turned into a stop, the timeout and the
 * stop's grace. Returns the task's wait status.
 */
static int supervise(struct shim *s, int out_fd, int sfd, int tfd)
{
	struct watch w = {.out_open = true};

	while (!w.child_done || w.out_open) {
		struct pollfd fds[3 + SHIM_SESSIONS_POLL_MAX] = {
			{out_fd, POLLIN, 0},
			{sfd, POLLIN, 0},
			{tfd, POLLIN, 0},
		};
		size_t nfds = 3 + shim_sessions_poll_fill(
					  s->sessions, fds + 3,
					  SHIM_SESSIONS_POLL_MAX);
		size_t room = s->tty && s->sessions
				      ? shim_sessions_task_room(s->sessions)
				      : SIZE_MAX;
		int wait_ms = -1;

		if (w.child_done) {
			wait_ms = (int)(w.drain_deadline - kn_mono_ms());
			if (wait_ms <= 0)
				break;
		} else if (s->stop_poll_ms > 0 && !s->stopping) {
			if (stop_asked(s)) {
				begin_stop(s, tfd, NULL, 0);
				continue;
			}
			wait_ms = s->stop_poll_ms;
		}
		if (!w.out_open || !room)
			fds[0].fd = -1;
		wait_ms = shim_sessions_wait_ms(s->sessions, wait_ms);
		if (poll(fds, nfds, wait_ms) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (fds[0].revents)
			on_output(s, out_fd, room, &w);
		shim_sessions_poll_done(s->sessions, fds + 3, nfds - 3);
		if (fds[1].revents & POLLIN)
			on_signal(s, sfd, tfd, &w);
		if (fds[2].revents & POLLIN)
			on_timer(s, tfd, &w);
	}
	return w.wstatus;
}

static void shim_release(struct shim *s)
{
	kn_strv_free(s->argv);
	kn_strv_free(s->env);
	kn_strv_free(s->devices);
	kn_strv_free(s->task_env);
	kn_sandbox_free(s->sandbox);
	free(s->run_as);
	json_decref(s->user_doc);
	json_decref(s->server_user_doc);
	KN_FREE_ALL(s->home, s->cgroup_root, s->cgroup_parent, s->workdir);
}

int exec_shim_main(const char *task_dir, const struct kn_shim_prepare *prep,
		   enum kn_sandbox_host host, struct kn_error *err)
{
	char why[256];
	struct kn_error limit_err;
	struct shim s;
	int pipefd[2] = {-1, -1}, sfd = -1, tfd = -1, rc, wstatus = 0;
	int64_t started;

	memset(&s, 0, sizeof(s));
	s.dir = task_dir;
	s.log_fd = -1;
	s.times_fd = -1;
	s.record_fd = -1;
	s.host = host;
	rc = load_launch(&s, err);
	if (rc < 0)
		goto out;
	if ((rc = open_log(&s)) < 0) {
		rc = kn_errorf(err, KN_EIO, NULL, "cannot open the task log in %s: %s",
			       task_dir, strerror(-rc));
		goto out;
	}
	sfd = signals_open(&s);
	tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
	if (sfd < 0 || tfd < 0 ||
	    (s.tty && host != KN_SANDBOX_POD
		     ? exec_open_pty(&pipefd[0], &pipefd[1])
		     : pipe2(pipefd, O_CLOEXEC)) < 0) {
		rc = kn_errorf(err, KN_EIO, NULL, "shim set-up failed: %s",
			       strerror(errno));
		goto out;
	}

	rc = kn_shim_record_pid(task_dir);
	if (rc < 0) {
		rc = kn_errorf(err, KN_EIO, NULL, "cannot write %s/shim.pid: %s",
			       task_dir, strerror(-rc));
		goto out;
	}
	started = kn_now_ms();
	if (host != KN_SANDBOX_POD)
		sessions_listen(&s);
	/* Room for the exit is taken now; a task is not started without. */
	rc = exec_exit_record_prepare(task_dir, &s.record_fd);
	if (rc < 0) {
		snprintf(why, sizeof(why), "cannot write the exit record: %s",
			 strerror(-rc));
		rc = end_unstarted(&s, 1, why, started, err);
		goto out;
	}
	if (prep && prep->fn &&
	    prep->fn(prep->arg, s.env, s.log_fd, why, sizeof(why)) < 0) {
		rc = end_unstarted(&s, 1, why, started, err);
		goto out;
	}
	if (prepare_sandbox(&s, err) < 0) {
		/* Never run unisolated by mistake: the task ends unstarted. */
		snprintf(why, sizeof(why), "sandbox: %.200s", err->message);
		write_log(&s, "kiln: ", 6);
		write_log(&s, why, strlen(why));
		write_log(&s, "\n", 1);
		rc = end_unstarted(&s, 127, why, started, err);
		goto out;
	}
	if (s.limited)
		rc = limits_begin(&s, &limit_err);
	if (rc == 0)
		rc = start_child(&s, pipefd[1], &limit_err);
	if (rc < 0) {
		/* Never run unlimited what was meant to be limited. */
		snprintf(s.reason, sizeof(s.reason), "cannot set limits: %.70s",
			 limit_err.message);
		limits_end(&s, W_EXITCODE(1, 0));
		rc = end_unstarted(&s, 1, s.reason, started, err);
		goto out;
	}
	close(pipefd[1]);
	pipefd[1] = -1;
	if (s.child < 0) {
		rc = kn_errorf(err, KN_EIO, NULL, "fork failed: %s",
			       strerror(errno));
		goto out;
	}
	if (s.timeout_ms > 0)
		arm_timer(tfd, s.timeout_ms);
	sessions_start(&s, pipefd[0]);

	wstatus = supervise(&s, pipefd[0], sfd, tfd);
	shim_sessions_finish(s.sessions, wstatus, s.reason);
	limits_end(&s, wstatus);
	rc = write_status(&s, wstatus, started, kn_now_ms());
	if (rc < 0)
		rc = kn_errorf(err, KN_EIO, NULL, "cannot write %s/status.json: %s",
			       task_dir, strerror(-rc));
out:
	shim_sessions_free(s.sessions);
	limits_end(&s, wstatus);
	if (pipefd[0] >= 0)
		close(pipefd[0]);
	if (pipefd[1] >= 0)
		close(pipefd[1]);
	if (sfd >= 0)
		close(sfd);
	if (tfd >= 0)
		close(tfd);
	if (s.log_fd >= 0)
		close(s.log_fd);
	if (s.times_fd >= 0)
		close(s.times_fd);
	if (s.record_fd >= 0)
		close(s.record_fd);
	shim_release(&s);
	return rc < 0 ? 1 : 0;
}

int kn_kube_shim_run(const char *task_dir, char *const *argv,
		     int stop_signal, int64_t grace_ms,
		     const struct kn_shim_prepare *prep, int *exit_code,
		     char *reason, size_t len, struct kn_error *err)
{
	char cwd[4096], *path = kn_asprintf("%s/launch.json", task_dir), *text;
	struct kn_task_status st;
	json_t *doc, *args = json_array();
	int rc;

	*exit_code = 1;
	reason[0] = '\0';
	for (char *const *a = argv; a && *a; a++)
		json_array_append_new(args, json_string(*a));
	/* The container's workingDir, not the task directory. */
	if (!getcwd(cwd, sizeof(cwd)))
		kn_strlcpy(cwd, "/", sizeof(cwd));
	doc = json_pack("{s:o, s:[], s:s, s:I, s:b, s:i}", "argv", args,
			"env", "workdir", cwd, "grace_ms", (json_int_t)grace_ms,
			"log_stdout", 1, "stop_signal", stop_signal);
	text = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	rc = kn_mkdir_p(task_dir, 0700);
	if (rc < 0)
		rc = kn_errorf(err, KN_EIO, NULL, "cannot create %s: %s",
			       task_dir, strerror(-rc));
	else
		rc = kn_write_text_replace(path, text, 0600, err);
	KN_FREE_ALL(text, path);
	if (rc < 0)
		return rc;
	if (exec_shim_main(task_dir, prep, KN_SANDBOX_POD, err) != 0)
		return -EIO;
	rc = exec_read_status(task_dir, &st, err);
	if (rc < 0)
		return rc;
	/* As a shell reports it, so the pod's exit code says the same. */
	*exit_code = st.signal ? 128 + st.signal : st.exit_code;
	kn_strlcpy(reason, st.reason, len);
	return 0;
}
