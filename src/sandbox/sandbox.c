/*
 * Entering the sandbox: namespaces, mounts and the user, between the
 * shim's fork and the task's exec (see sandbox.h for what each gives).
 *
 * Processes: the shim's child is born in the new namespaces
 * (kn_sandbox_fork: one clone, not a fork that unshares and forks again)
 * as their pid 1, a small init that mounts the fresh /proc and forks the
 * task (pid 2). The task is not pid 1 itself because pid 1 ignores every
 * signal it has no handler for: a `sleep` there would not stop on
 * SIGTERM. Both stay in the shim's process group, so the shim's group
 * signals reach the task directly, and init, which has no handlers, is
 * spared them by the kernel (SIGKILL still takes it). When the task exits,
 * init passes its wait status up a pipe to the shim and exits, which
 * kills whatever the task left in the namespace; the shim reaps init and
 * takes the task's status from the pipe (kn_sandbox_task_status), so it
 * records what it always recorded.
 *
 * Files: mounts to show again are cloned (open_tree) before anything is
 * hidden, then moved onto the same paths in the fresh tmpfs's, so no
 * staging directory is needed and nothing hidden stays reachable.
 *
 * After fork only system calls and the prepared sandbox are used: the
 * parent may have had threads, so the child must not allocate.
 */
#include "sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <linux/capability.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* What the minimal /dev holds, from the host's. */
static const char *const dev_nodes[] = {
	"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom",
	"/dev/tty", NULL,
};

#define MAX_SHOWN 64

struct shown {
	const char *path;
	int fd;     /* its clone, from open_tree, in the child */
	bool dir;
	bool read_only;
};

struct kn_sandbox {
	enum kn_sandbox_mode mode;
	char *user;
	uid_t uid, outer_uid;
	gid_t gid, outer_gid;
	gid_t groups[KN_SANDBOX_MAX_GROUPS];
	int n_groups;
	char **hide;       /* tmpfs over each, in this order, if present */
	size_t n_hide;
	char **paths;      /* owned copies of every path below */
	size_t n_paths;
	struct shown shown[MAX_SHOWN];
	size_t n_shown;
	bool userns;      /* a user namespace: the ids below are mapped */
	char uid_map[64], gid_map[64];
	int status_fd[2]; /* init -> shim: the task's wait status */
};

/* ---- the parent: preparing ---- */

static const char *keep(struct kn_sandbox *sb, const char *path)
{
	sb->paths = kn_xrealloc(sb->paths, (sb->n_paths + 1) * sizeof(char *));
	sb->paths[sb->n_paths] = kn_xstrdup(path);
	return sb->paths[sb->n_paths++];
}

static int show(struct kn_sandbox *sb, const char *path, bool read_only,
		struct kn_error *err)
{
	struct stat st;

	if (path[0] != '/')
		return kn_errorf(err, KN_EINVAL, NULL,
				 "sandbox: %s is not an absolute path", path);
	/* The root stays; showing it again would bring back /dev. */
	if (stat(path, &st) < 0 || !strcmp(path, "/"))
		return 0;
	/* Once (a workdir that is the task directory): the stricter wins. */
	for (size_t i = 0; i < sb->n_shown; i++)
		if (!strcmp(sb->shown[i].path, path)) {
			sb->shown[i].read_only |= read_only;
			return 0;
		}
	if (sb->n_shown == MAX_SHOWN)
		return kn_errorf(err, KN_EINVAL, NULL,
				 "sandbox: more than %d paths to show", MAX_SHOWN);
	sb->shown[sb->n_shown++] = (struct shown){keep(sb, path), -1,
						  S_ISDIR(st.st_mode),
						  read_only};
	return 0;
}

static void take_user(struct kn_sandbox *sb, const struct kn_sandbox_user *u)
{
	sb->user = kn_xstrdup(u->name);
	sb->uid = u->uid;
	sb->gid = u->gid;
	memcpy(sb->groups, u->groups, (size_t)u->n_groups * sizeof(gid_t));
	sb->n_groups = u->n_groups;
}

/* The server's lookup, checked; or the shim's own when it sent none. */
static int find_user(struct kn_sandbox *sb, const struct kn_sandbox_config *cfg,
		     struct kn_error *err)
{
	struct kn_sandbox_user u;
	int rc;

	if (cfg->user) {
		rc = kn_sandbox_user_check(cfg->user, err);
		if (rc == 0)
			take_user(sb, cfg->user);
		return rc;
	}
	rc = kn_sandbox_user_resolve(cfg->run_as ? cfg->run_as : KN_TASK_USER,
				     &u, err);
	if (rc == 0)
		take_user(sb, &u);
	return rc;
}

static uid_t chown_uid;
static gid_t chown_gid;

/*
 * What the shim or the server made in a directory the task writes goes to
 * the task's user; a hard link to someone else's file (nlink > 1) or a
 * file of another owner is left alone.
 */
static int give(const char *path, const struct stat *st, int flag,
		struct FTW *ftw)
{
	(void)flag;
	(void)ftw;
	if (st->st_uid != 0 && st->st_uid != chown_uid)
		return 0;
	if (!S_ISDIR(st->st_mode) && st->st_nlink > 1)
		return 0;
	if (lchown(path, chown_uid, chown_gid) < 0)
		return -1;
	return 0;
}

static int prepare_writable(struct kn_sandbox *sb, const char *dir,
			    bool recursive, struct kn_error *err)
{
	/* Made here when the server did not (no checkpoint sync): hidden
	   in its home, the task could not make it itself. */
	int rc = kn_mkdir_p(dir, 0700);

	if (rc < 0)
		return kn_errorf(err, KN_EIO, NULL, "cannot create %s: %s", dir,
				 strerror(-rc));
	if (sb->mode == KN_SANDBOX_UID) {
		chown_uid = sb->uid;
		chown_gid = sb->gid;
		if (recursive ? nftw(dir, give, 16, FTW_PHYS | FTW_MOUNT) != 0
			      : lchown(dir, sb->uid, sb->gid) < 0)
			return kn_errorf(err, KN_EIO, NULL,
					 "cannot give %s to %s: %s", dir,
					 sb->user, strerror(errno));
	}
	return show(sb, dir, false, err);
}

static void add_hide(struct kn_sandbox *sb, const char *path)
{
	sb->hide = kn_xrealloc(sb->hide, (sb->n_hide + 1) * sizeof(char *));
	sb->hide[sb->n_hide++] = kn_xstrdup(path);
}

static bool in_groups(const struct kn_sandbox *sb, gid_t gid)
{
	for (int i = 0; i < sb->n_groups; i++)
		if (sb->groups[i] == gid)
			return true;
	return gid == sb->gid;
}

/* Whether the task's user may enter dir (search permission). */
static bool enterable(const struct kn_sandbox *sb, const struct stat *st)
{
	if (st->st_uid == sb->uid)
		return st->st_mode & S_IXUSR;
	if (in_groups(sb, st->st_gid))
		return st->st_mode & S_IXGRP;
	return st->st_mode & S_IXOTH;
}

/*
 * A directory the task's user cannot enter on the way to one it is shown
 * (the default home ~/.kiln of root is under /root, 0700) is hidden by a
 * tmpfs instead: the task could not see into it anyway, and what it is
 * shown there is mounted again with enterable directories above it.
 */
static bool in_list(char *const *list, size_t n, const char *path)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(list[i], path))
			return true;
	return false;
}

/* The shown paths share most of their directories: each is looked at once. */
static void hide_unenterable(struct kn_sandbox *sb)
{
	char buf[4096], **seen = NULL;
	size_t n_seen = 0;
	struct stat st;

	for (size_t i = 0; i < sb->n_shown; i++) {
		if (strlen(sb->shown[i].path) >= sizeof(buf) ||
		    !strncmp(sb->shown[i].path, "/dev/", 5))
			continue;
		strcpy(buf, sb->shown[i].path);
		for (char *p = strchr(buf + 1, '/'); p; p = strchr(p + 1, '/')) {
			*p = '\0';
			if (in_list(sb->hide, sb->n_hide, buf))
				break;
			if (!in_list(seen, n_seen, buf)) {
				if (stat(buf, &st) == 0 && S_ISDIR(st.st_mode) &&
				    !enterable(sb, &st)) {
					add_hide(sb, buf);
					break;
				}
				seen = kn_xrealloc(seen, (n_seen + 1) *
								 sizeof(char *));
				seen[n_seen++] = kn_xstrdup(buf);
			}
			*p = '/';
		}
	}
	kn_strv_free_n(seen, n_seen);
}

/* Shorter paths first: a directory is shown before what lies in it. */
static int by_length(const void *a, const void *b)
{
	size_t la = strlen(((const struct shown *)a)->path);
	size_t lb = strlen(((const struct shown *)b)->path);

	return la < lb ? -1 : la > lb;
}

/* This process's ids map to themselves in the task's user namespace. */
static void identity_maps(struct kn_sandbox *sb)
{
	sb->outer_uid = getuid();
	sb->outer_gid = getgid();
	snprintf(sb->uid_map, sizeof(sb->uid_map), "%u %u 1\n",
		 (unsigned)sb->outer_uid, (unsigned)sb->outer_uid);
	snprintf(sb->gid_map, sizeof(sb->gid_map), "%u %u 1\n",
		 (unsigned)sb->outer_gid, (unsigned)sb->outer_gid);
}

static int sandbox_fill(struct kn_sandbox *sb,
			const struct kn_sandbox_config *cfg,
			struct kn_error *err)
{
	struct passwd *pw;
	int rc = 0;

	/* Nothing else is prepared for a user the task may not be. */
	if (sb->mode == KN_SANDBOX_UID && (rc = find_user(sb, cfg, err)) < 0)
		return rc;
	if (sb->mode == KN_SANDBOX_USERNS) {
		const char *name = cfg->own_name, *home = cfg->own_home;

		if (!name && (pw = getpwuid(getuid()))) {
			name = pw->pw_name;
			home = pw->pw_dir;
		}
		sb->user = kn_xstrdup(name ? name : "");
		/* The shim's own home holds its user's credentials. */
		if (home && home[0] == '/' && home[1])
			add_hide(sb, home);
	}
	identity_maps(sb);
	/* Under Slurm, /tmp and /dev are the allocation's to give. */
	if (sb->mode != KN_SANDBOX_PROCS)
		add_hide(sb, "/tmp");
	if (cfg->hide)
		add_hide(sb, cfg->hide);
	if (cfg->task_dir)
		rc = prepare_writable(sb, cfg->task_dir, false, err);
	for (const char *const *w = cfg->writable; rc == 0 && w && *w; w++)
		rc = prepare_writable(sb, *w, true, err);
	for (const char *const *v = cfg->visible; rc == 0 && v && *v; v++)
		rc = show(sb, *v, false, err);
	for (const char *const *d = dev_nodes;
	     rc == 0 && sb->mode != KN_SANDBOX_PROCS && *d; d++)
		rc = show(sb, *d, false, err);
	if (rc == 0 && sb->mode != KN_SANDBOX_PROCS)
		rc = show(sb, "/dev/pts", false, err);
	for (const char *const *d = cfg->devices;
	     rc == 0 && sb->mode != KN_SANDBOX_PROCS && d && *d; d++)
		rc = show(sb, *d, false, err);
	for (const char *const *f = cfg->read_only; rc == 0 && f && *f; f++)
		rc = show(sb, *f, true, err);
	qsort(sb->shown, sb->n_shown, sizeof(sb->shown[0]), by_length);
	if (rc == 0 && sb->mode == KN_SANDBOX_UID)
		hide_unenterable(sb);
	return rc;
}

int kn_sandbox_new(const struct kn_sandbox_config *cfg,
		   struct kn_sandbox **out, struct kn_error *err)
{
	struct kn_sandbox *sb = kn_xcalloc(1, sizeof(*sb));
	int rc = 0;

	sb->mode = cfg->mode;
	sb->status_fd[0] = sb->status_fd[1] = -1;
	/* Without root, only a user namespace lets it make the others. */
	sb->userns = sb->mode == KN_SANDBOX_USERNS ||
		     (sb->mode == KN_SANDBOX_PROCS && geteuid() != 0);
	if (sb->mode != KN_SANDBOX_NONE)
		rc = sandbox_fill(sb, cfg, err);
	if (rc < 0) {
		kn_sandbox_free(sb);
		return rc;
	}
	*out = sb;
	return 0;
}

const char *kn_sandbox_user(const struct kn_sandbox *sb)
{
	return sb && sb->mode != KN_SANDBOX_NONE ? sb->user : NULL;
}

void kn_sandbox_free(struct kn_sandbox *sb)
{
	if (!sb)
		return;
	kn_strv_free_n(sb->hide, sb->n_hide);
	kn_strv_free_n(sb->paths, sb->n_paths);
	for (int i = 0; i < 2; i++)
		if (sb->status_fd[i] >= 0)
			close(sb->status_fd[i]);
	KN_FREE_ALL(sb->user, sb);
}

/* ---- the child: entering ---- */

#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef OPEN_TREE_CLOEXEC
#define OPEN_TREE_CLOEXEC O_CLOEXEC
#endif
#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif

static int clone_tree(const char *path)
{
	return (int)syscall(SYS_open_tree, AT_FDCWD, path,
			    OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
}

static int move_tree(int fd, const char *to)
{
	return (int)syscall(SYS_move_mount, fd, "", AT_FDCWD, to,
			    MOVE_MOUNT_F_EMPTY_PATH);
}

static int fail(char *why, size_t len, const char *what, const char *path)
{
	snprintf(why, len, "sandbox: %s %s: %s", what, path ? path : "",
		 strerror(errno));
	return -1;
}

static int write_text(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = write(fd, text, strlen(text));
	close(fd);
	return n == (ssize_t)strlen(text) ? 0 : -1;
}

/*
 * mkdir -p, from the end: most of a path exists already, and each
 * directory that does then costs no call (one for the deepest).
 */
static int make_dirs(char *path)
{
	char *slash;
	int rc;

	if (mkdir(path, 0755) == 0 || errno == EEXIST)
		return 0;
	if (errno != ENOENT || !(slash = strrchr(path, '/')) || slash == path)
		return -1;
	*slash = '\0';
	rc = make_dirs(path);
	*slash = '/';
	if (rc < 0)
		return -1;
	return mkdir(path, 0755) < 0 && errno != EEXIST ? -1 : 0;
}

/* The file a non-directory moves onto: 0 when made or already there. */
static int make_file(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);

	if (fd < 0)
		return errno == EEXIST ? 0 : -1;
	close(fd);
	return 0;
}

/*
 * mkdir -p in the new tmpfs's, and the file a non-directory moves onto;
 * a file's directory is made only when it is missing (the shim's files
 * lie in the task directory, shown before them; /dev's nodes in /dev).
 */
static int make_target(const char *path, bool dir)
{
	char buf[4096], *slash;
	size_t len = strlen(path);

	if (len >= sizeof(buf))
		return -1;
	memcpy(buf, path, len + 1);
	if (dir)
		return make_dirs(buf);
	if (make_file(buf) == 0)
		return 0;
	if (errno != ENOENT)
		return -1;
	slash = strrchr(buf, '/');
	if (slash != buf) {
		*slash = '\0';
		if (make_dirs(buf) < 0)
			return -1;
		*slash = '/';
	}
	return make_file(buf);
}

static int mount_tmpfs(const char *path, const char *opts)
{
	return mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, opts);
}

/* /dev: a tmpfs with only the nodes shown, a private /dev/shm. */
static int make_dev(char *why, size_t len)
{
	static const char *const links[][2] = {
		{"/dev/ptmx", "pts/ptmx"}, {"/dev/fd", "/proc/self/fd"},
		{"/dev/stdin", "/proc/self/fd/0"},
		{"/dev/stdout", "/proc/self/fd/1"},
		{"/dev/stderr", "/proc/self/fd/2"},
	};

	if (mount("tmpfs", "/dev", "tmpfs", MS_NOSUID, "mode=0755") < 0)
		return fail(why, len, "cannot mount a tmpfs on", "/dev");
	if (mkdir("/dev/shm", 01777) < 0 ||
	    mount_tmpfs("/dev/shm", "mode=1777") < 0)
		return fail(why, len, "cannot mount", "/dev/shm");
	for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++)
		if (symlink(links[i][1], links[i][0]) < 0)
			return fail(why, len, "cannot link", links[i][0]);
	return 0;
}

/* Bind the clone back on its own path, read-only when asked. */
static int show_again(const struct shown *sh, char *why, size_t len)
{
	if (make_target(sh->path, sh->dir) < 0)
		return fail(why, len, "cannot make", sh->path);
	if (move_tree(sh->fd, sh->path) < 0)
		return fail(why, len, "cannot show", sh->path);
	if (sh->read_only &&
	    mount(NULL, sh->path, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY,
		  NULL) < 0)
		return fail(why, len, "cannot make read-only", sh->path);
	return 0;
}

/*
 * A tmpfs over each hidden directory under prefix ("" for all) that is
 * there to hide: one under a directory hidden before is gone already.
 */
static int hide_under(const struct kn_sandbox *sb, const char *prefix,
		      char *why, size_t len)
{
	size_t n = strlen(prefix);
	struct stat st;

	for (size_t i = 0; i < sb->n_hide; i++) {
		const char *h = sb->hide[i];

		if (n && (strncmp(h, prefix, n) != 0 || h[n] != '/'))
			continue;
		if (stat(h, &st) < 0 || !S_ISDIR(st.st_mode))
			continue;
		if (mount_tmpfs(h, !strcmp(h, "/tmp") ? "mode=1777"
						      : "mode=0755") < 0)
			return fail(why, len, "cannot hide", h);
	}
	return 0;
}

/*
 * Clones first, while everything is in view; then the tmpfs's; then each
 * clone back, shorter paths first, hiding again what a shown directory
 * holds (a workdir that contains $KILN_HOME must not bring it back).
 */
static int build_view(const struct kn_sandbox *sb, char *why, size_t len)
{
	struct shown shown[MAX_SHOWN];
	mode_t old = umask(0);
	int rc = 0;

	memcpy(shown, sb->shown, sizeof(shown));
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return fail(why, len, "cannot make mounts private", "/");
	for (size_t i = 0; i < sb->n_shown; i++)
		if ((shown[i].fd = clone_tree(shown[i].path)) < 0)
			return fail(why, len, "cannot clone", shown[i].path);
	if (hide_under(sb, "", why, len) < 0 ||
	    (sb->mode != KN_SANDBOX_PROCS && make_dev(why, len) < 0))
		return -1;
	for (size_t i = 0; rc == 0 && i < sb->n_shown; i++) {
		rc = show_again(&shown[i], why, len);
		if (rc == 0 && shown[i].dir)
			rc = hide_under(sb, shown[i].path, why, len);
	}
	for (size_t i = 0; i < sb->n_shown; i++)
		close(shown[i].fd);
	umask(old);
	return rc;
}

/*
 * Under Slurm the IPC namespace stays the host's: ranks of a job that
 * share a node may use System V shared memory with each other.
 */
static int namespace_flags(const struct kn_sandbox *sb)
{
	int flags = CLONE_NEWNS | CLONE_NEWPID;

	if (sb->mode != KN_SANDBOX_PROCS)
		flags |= CLONE_NEWIPC;
	return sb->userns ? flags | CLONE_NEWUSER : flags;
}

/* The shim's ids map to themselves: inside, the task is no root. */
static int map_ids(const struct kn_sandbox *sb, char *why, size_t len)
{
	if (!sb->userns)
		return 0;
	if (write_text("/proc/self/uid_map", sb->uid_map) < 0 ||
	    write_text("/proc/self/setgroups", "deny") < 0 ||
	    write_text("/proc/self/gid_map", sb->gid_map) < 0)
		return fail(why, len, "cannot map ids in the user namespace",
			    NULL);
	return 0;
}

/* What the probe tries: the same namespaces, unshared. */
static int enter_namespaces(const struct kn_sandbox *sb, char *why,
			    size_t len)
{
	if (unshare(namespace_flags(sb)) < 0)
		return fail(why, len, "cannot unshare namespaces", NULL);
	return map_ids(sb, why, len);
}

/* No capability survives: the bounding and ambient sets go first. */
static int drop_privileges(const struct kn_sandbox *sb, char *why, size_t len)
{
	prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
	for (int cap = 0; cap <= 63; cap++)
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno == EINVAL)
			break;
	if (sb->mode == KN_SANDBOX_UID) {
		if (setgroups((size_t)sb->n_groups, sb->groups) < 0 ||
		    setresgid(sb->gid, sb->gid, sb->gid) < 0 ||
		    setresuid(sb->uid, sb->uid, sb->uid) < 0)
			return fail(why, len, "cannot become", sb->user);
		if (geteuid() == 0 || getuid() == 0)
			return fail(why, len, "still root after becoming",
				    sb->user);
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return fail(why, len, "cannot set no_new_privs", NULL);
	return 0;
}

/* pid 1: reaps everything, ends the namespace when the task ends. */
_Noreturn static void init_wait(pid_t task, int status_fd)
{
	int wstatus;
	pid_t pid;

	for (;;) {
		pid = waitpid(-1, &wstatus, 0);
		if (pid == task) {
			if (write(status_fd, &wstatus, sizeof(wstatus)) < 0)
				_exit(1);
			_exit(0);
		}
		if (pid < 0 && errno != EINTR)
			_exit(1);
	}
}

pid_t kn_sandbox_fork(struct kn_sandbox *sb)
{
	pid_t pid;

	if (sb->mode == KN_SANDBOX_NONE)
		return fork();
	if (pipe2(sb->status_fd, O_CLOEXEC) < 0)
		return -1;
	/* fork(), but into the new namespaces, as their pid 1. */
	pid = (pid_t)syscall(SYS_clone, namespace_flags(sb) | SIGCHLD, NULL,
			     NULL, NULL, NULL);
	if (pid == 0) {
		close(sb->status_fd[0]);
		sb->status_fd[0] = -1;
		return 0;
	}
	close(sb->status_fd[1]);
	sb->status_fd[1] = -1;
	if (pid < 0) {
		close(sb->status_fd[0]);
		sb->status_fd[0] = -1;
	}
	return pid;
}

void kn_sandbox_task_status(struct kn_sandbox *sb, int *wstatus)
{
	int task_status;

	if (!sb || sb->status_fd[0] < 0)
		return;
	/* init wrote it before exiting, or died first: no wait either way. */
	if (read(sb->status_fd[0], &task_status, sizeof(task_status)) ==
	    sizeof(task_status))
		*wstatus = task_status;
	close(sb->status_fd[0]);
	sb->status_fd[0] = -1;
}

extern char **environ;

/* chdir and exec: returns only when either failed, with why. */
static int exec_task(const char *workdir, char *const *argv, char **envp,
		     char *why, size_t len)
{
	if (chdir(workdir) < 0) {
		snprintf(why, len, "cannot enter workdir %s: %s", workdir,
			 strerror(errno));
		return -1;
	}
	/* execvp searches the task's PATH, not the shim's. */
	environ = envp;
	execvp(argv[0], argv);
	snprintf(why, len, "cannot run %s: %s", argv[0], strerror(errno));
	return -1;
}

/*
 * The task, vforked by init: until its exec it shares init's memory (init
 * waits), so it only makes system calls and writes on its own stack.
 */
_Noreturn static void run_task(const struct kn_sandbox *sb,
			       const char *workdir, char *const *argv,
			       char **envp)
{
	char why[256];
	sigset_t none;

	close(sb->status_fd[1]);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (drop_privileges(sb, why, sizeof(why)) == 0)
		exec_task(workdir, argv, envp, why, sizeof(why));
	dprintf(2, "kiln: %s\n", why);
	_exit(127);
}

/*
 * What was sent to init's process group before the task was in it (a
 * stop that came while the sandbox was being built): init, blocking
 * every signal, kept it pending, since a namespace's init drops an
 * unblocked signal it has no handler for. The task gets it now, as it
 * would have had it been there. A signal sent after the task was forked
 * reached it too; it comes again only before the task's program could
 * have set a handler, where the first one already ended it.
 */
static void pass_on_pending(pid_t task)
{
	sigset_t pending;

	if (sigpending(&pending) < 0)
		return;
	for (int sig = 1; sig < NSIG; sig++)
		if (sig != SIGCHLD && sigismember(&pending, sig) == 1)
			kill(task, sig);
}

int kn_sandbox_exec(const struct kn_sandbox *sb, const char *workdir,
		    char *const *argv, char **envp, char *why, size_t len)
{
	sigset_t all;
	pid_t pid;

	if (sb->mode == KN_SANDBOX_NONE) {
		sigemptyset(&all);
		sigprocmask(SIG_SETMASK, &all, NULL);
		return exec_task(workdir, argv, envp, why, len);
	}
	/* Blocked, not dropped: pass_on_pending gives them to the task. */
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	if (map_ids(sb, why, len) < 0 || build_view(sb, why, len) < 0)
		return -1;
	if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
		  NULL) < 0)
		return fail(why, len, "cannot mount", "/proc");
	/* No copy of this address space: the task only needs its exec. */
	pid = vfork();
	if (pid == 0)
		run_task(sb, workdir, argv, envp);
	if (pid < 0)
		return fail(why, len, "cannot start the task", NULL);
	pass_on_pending(pid);
	init_wait(pid, sb->status_fd[1]);
}

/* ---- joining a running task's sandbox ---- */

/* A task's namespaces, in the order they are joined: the user namespace
   first, which gives the rights to join the others. */
static const struct {
	const char *name;
	int flag;
} joined[] = {
	{"user", CLONE_NEWUSER},
	{"ipc", CLONE_NEWIPC},
	{"mnt", CLONE_NEWNS},
	{"pid", CLONE_NEWPID},
};

#define N_JOINED (sizeof(joined) / sizeof(joined[0]))

/* All are opened first: once in the task's mount namespace, /proc is
   the task's, where init has another pid. */
static int enter_task(const struct kn_sandbox *sb, pid_t init_pid,
		      char *why, size_t len)
{
	int flags = namespace_flags(sb), fds[N_JOINED], rc = 0;
	char path[64];
	size_t i;

	for (i = 0; i < N_JOINED; i++) {
		fds[i] = -1;
		if (!(flags & joined[i].flag) || rc)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/ns/%s", (int)init_pid,
			 joined[i].name);
		if ((fds[i] = open(path, O_RDONLY | O_CLOEXEC)) < 0)
			rc = fail(why, len, "cannot open the task's namespace",
				  joined[i].name);
	}
	for (i = 0; i < N_JOINED && !rc; i++)
		if (fds[i] >= 0 && setns(fds[i], joined[i].flag) < 0)
			rc = fail(why, len, "cannot enter the task's namespace",
				  joined[i].name);
	for (i = 0; i < N_JOINED; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	return rc;
}

pid_t kn_sandbox_join(const struct kn_sandbox *sb, pid_t init_pid,
		      const char *workdir, char *const *argv, char **envp,
		      bool tty, char *why, size_t len)
{
	sigset_t none;
	pid_t pid;

	if (sb->mode != KN_SANDBOX_NONE &&
	    enter_task(sb, init_pid, why, len) < 0)
		return -1;
	/* The shim's child, so the shim waits for it and sees its status;
	   born in the task's pid namespace, which it dies with. */
	pid = (pid_t)syscall(SYS_clone, CLONE_PARENT | SIGCHLD, NULL, NULL,
			     NULL, NULL);
	if (pid != 0) {
		if (pid < 0)
			fail(why, len, "cannot start the command", NULL);
		return pid;
	}
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	/* Its own session, so its group is signalled alone, and the
	   terminal on its stdin is its controlling one. */
	if (setsid() < 0 || (tty && ioctl(0, TIOCSCTTY, 0) < 0))
		fail(why, len, "cannot take the terminal", NULL);
	else if (sb->mode == KN_SANDBOX_NONE ||
		 drop_privileges(sb, why, len) == 0)
		exec_task(workdir, argv, envp, why, len);
	dprintf(2, "kiln: %s\n", why);
	_exit(127);
}

/* ---- what this machine allows ---- */

/*
 * A user namespace cannot drop supplementary groups (setgroups is denied
 * there so that none escapes a group-denied file): the server's reach
 * its tasks, and nodes say which.
 */
static void kept_groups(char *desc, size_t len)
{
	gid_t groups[KN_SANDBOX_MAX_GROUPS];
	int n = getgroups(KN_SANDBOX_MAX_GROUPS, groups);
	size_t o = (size_t)snprintf(desc, len, "user namespace");

	for (int i = 0, k = 0; i < n && o < len; i++) {
		if (groups[i] == getgid())
			continue;
		o += (size_t)snprintf(desc + o, len - o, "%s%u",
				      k++ ? "," : "; supplementary groups "
						  "kept: ",
				      (unsigned)groups[i]);
	}
}

int kn_sandbox_probe(const char *run_as, enum kn_sandbox_mode *mode,
		     char *desc, size_t len, struct kn_error *err)
{
	enum kn_sandbox_mode m = geteuid() == 0 ? KN_SANDBOX_UID
						: KN_SANDBOX_USERNS;
	struct kn_sandbox sb;
	int wstatus = 0;
	pid_t pid;

	memset(&sb, 0, sizeof(sb));
	sb.mode = m;
	sb.userns = m == KN_SANDBOX_USERNS;
	if (m == KN_SANDBOX_UID) {
		struct kn_sandbox_user u;
		int rc = kn_sandbox_user_resolve(run_as ? run_as : KN_TASK_USER,
						 &u, err);
		if (rc < 0)
			return rc;
	}
	identity_maps(&sb);
	pid = fork();
	if (pid < 0)
		return kn_errorf(err, KN_EIO, NULL, "cannot fork: %s",
				 strerror(errno));
	if (pid == 0) {
		char why[256];
		_exit(enter_namespaces(&sb, why, sizeof(why)) < 0 ? 1 : 0);
	}
	while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0)
		return kn_errorf(err, KN_EIO, NULL,
				 "this machine refuses new %snamespaces",
				 m == KN_SANDBOX_USERNS ? "user " : "");
	if (m == KN_SANDBOX_UID)
		snprintf(desc, len, "uid %s, namespaces",
			 run_as ? run_as : KN_TASK_USER);
	else
		kept_groups(desc, len);
	*mode = m;
	return 0;
}
