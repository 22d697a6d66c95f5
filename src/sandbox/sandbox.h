/*
 * sandbox: what keeps a task away from the server, the shim and other
 * jobs (docs/security.md). The shim prepares a sandbox before it forks
 * (everything that allocates or reads files: the user, the environment,
 * the directories to show), forks into it (kn_sandbox_fork) and runs the
 * task there (kn_sandbox_exec):
 *
 * - identity: as root, the task runs as an unprivileged Unix user
 *   (KN_TASK_USER or the owner's mapped user) with no capabilities and
 *   no_new_privs; unprivileged, it runs in a new user namespace that maps
 *   the shim's uid to itself, so its capabilities end at exec;
 * - files: a private mount namespace hides $KILN_HOME, /tmp (a fresh
 *   tmpfs) and /dev (a minimal one), then shows again only the task's own
 *   directories, its workdir and the device nodes it was given;
 * - processes: a new pid namespace with a fresh /proc, so no other
 *   process can be seen, signalled or traced; when the task exits the
 *   namespace and all it left behind die with it;
 * - environment: built from the launch's entries and a short allow-list
 *   of the shim's own (kn_sandbox_env_build), never inherited whole.
 *
 * Under Slurm (KN_SANDBOX_PROCS) Slurm decides the user, /tmp and the
 * devices; the shim adds the process boundary (the pid namespace with its
 * fresh /proc and init, so the task neither outlives its shim nor sees
 * the shim or any other process of the job's user) and hides $KILN_HOME
 * but the task's own directories, which other jobs run as the same Unix
 * user could otherwise read.
 *
 * Rejected: running tasks under bubblewrap or a container runtime. Either
 * is one more program to install on every node, and the shim must keep
 * its process group, exit status and signal semantics, which a wrapper
 * process in between would have to relay anyway.
 */
#ifndef KILN_SANDBOX_H
#define KILN_SANDBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "base/base.h"

/* The Unix user tasks run as when the server runs as root. */
#define KN_TASK_USER "kiln-task"

/* Where the shim runs: it decides what the sandbox does. */
enum kn_sandbox_host {
	KN_SANDBOX_LOCAL, /* `kiln shim --dir`: the whole sandbox */
	KN_SANDBOX_SLURM, /* under srun: environment only (Slurm places it) */
	KN_SANDBOX_POD,   /* a pod's shim: environment only (the pod isolates) */
};

/* ---- the task's environment ---- */

/*
 * The environment a task gets, NULL-terminated and malloc'd (free with
 * kn_strv_free): from the shim's environment only PATH, LANG,
 * LC_*, TZ and TERM (under Slurm also SLURM_*, SLURMD_NODENAME,
 * CUDA_VISIBLE_DEVICES,
 * NVIDIA_VISIBLE_DEVICES and the rank variables the Slurm shim sets;
 * in a pod, whose environment the server rendered for the task, all but
 * the store's and the server's credentials: AZURE_* and KILN_TOKEN), then
 * every launch entry, which wins over one of the same name. HOME is home
 * and USER and LOGNAME are user (either may be NULL: left out) unless
 * the launch sets them; PATH gets a default when neither has one.
 */
char **kn_sandbox_env_build(enum kn_sandbox_host host,
			    char *const *launch_env, char *const *shim_env,
			    const char *home, const char *user);

/* ---- owners to Unix users ---- */

/*
 * The --task-user-map file: one "TOKEN-NAME: UNIX-USER" per line, blank
 * lines and '#' comments ignored; names are 1..64 of [A-Za-z0-9._-] (a
 * Unix user may not start with '-'), a token name at most once. A bad
 * line is an error "FILE:LINE:COLUMN: why".
 */
struct kn_user_map;
int kn_user_map_parse(const char *text, const char *file,
		      struct kn_user_map **out, struct kn_error *err);
int kn_user_map_load(const char *path, struct kn_user_map **out,
		     struct kn_error *err);
/* The Unix user for a token's name, or NULL when the map has none. */
const char *kn_user_map_lookup(const struct kn_user_map *map,
			       const char *token_name);
size_t kn_user_map_count(const struct kn_user_map *map);
/* The i-th entry's Unix user (i < kn_user_map_count), in file order. */
const char *kn_user_map_user_at(const struct kn_user_map *map, size_t i);
void kn_user_map_free(struct kn_user_map *map);

/* ---- the task's Unix user, resolved once ---- */

#define KN_SANDBOX_MAX_GROUPS 256

/*
 * A Unix user as the server looked it up (getpwnam, getgrouplist) and
 * passes to the shim in launch.json, so that no shim reads the user
 * databases: its name, ids and supplementary groups (the primary among
 * them).
 */
struct kn_sandbox_user {
	char name[65];
	uid_t uid;
	gid_t gid;
	gid_t groups[KN_SANDBOX_MAX_GROUPS];
	int n_groups;
};

/*
 * Looks name up: 0 and *out, or a negative errno and err (field
 * "run_as") when there is no such user or it may not run tasks (see
 * kn_sandbox_user_check).
 */
int kn_sandbox_user_resolve(const char *name, struct kn_sandbox_user *out,
			    struct kn_error *err);
/*
 * Whether tasks may run as u, in the process that will become it: never
 * uid or gid 0, never this process's own uid or gid (the server's, whose
 * files it would then own), never in group 0. 0, or -EINVAL and err
 * (field "user") naming what is wrong.
 */
int kn_sandbox_user_check(const struct kn_sandbox_user *u,
			  struct kn_error *err);

/*
 * The server's lookups, kept: an entry is looked up again when
 * /etc/passwd or /etc/group changed (inode, size or mtime) or after
 * KN_USER_CACHE_TTL_MS (users from other sources: LDAP, sssd). passwd
 * and group name the files to watch (NULL: the real ones).
 */
#define KN_USER_CACHE_TTL_MS 60000
struct kn_user_cache;
struct kn_user_cache *kn_user_cache_new(const char *passwd, const char *group);
void kn_user_cache_free(struct kn_user_cache *c);
int kn_user_cache_get(struct kn_user_cache *c, const char *name,
		      struct kn_sandbox_user *out, struct kn_error *err);
/* How many lookups the cache made (each a getpwnam and getgrouplist). */
size_t kn_user_cache_lookups(const struct kn_user_cache *c);

/* ---- the sandbox ---- */

enum kn_sandbox_mode {
	KN_SANDBOX_NONE,   /* the operator's --unisolated */
	KN_SANDBOX_UID,    /* root: another user, plus namespaces */
	KN_SANDBOX_USERNS, /* unprivileged: a user namespace, plus the rest */
	/* Under Slurm: a pid namespace (in a user namespace when not root),
	   $KILN_HOME hidden but the task's own directories, no_new_privs;
	   the user, /tmp and /dev stay Slurm's. */
	KN_SANDBOX_PROCS,
};

/*
 * Which sandbox this process can give tasks: KN_SANDBOX_UID as root
 * (run_as, NULL = KN_TASK_USER, must exist and not be root), else
 * KN_SANDBOX_USERNS; a child process tries the namespaces first. 0 and
 * *mode, with what nodes report in desc (e.g. "uid kiln-task,
 * namespaces"), or a negative errno and err saying why not.
 */
int kn_sandbox_probe(const char *run_as, enum kn_sandbox_mode *mode,
		     char *desc, size_t len, struct kn_error *err);

struct kn_sandbox_config {
	enum kn_sandbox_mode mode;
	const char *run_as;        /* KN_SANDBOX_UID: NULL = KN_TASK_USER */
	/* KN_SANDBOX_UID: run_as as the server resolved it (checked with
	   kn_sandbox_user_check, not looked up again), or NULL. */
	const struct kn_sandbox_user *user;
	/* KN_SANDBOX_USERNS: the shim's own user's name and home (hidden
	   from the task) as the server, run as the same user, looked them
	   up; NULL: looked up here. */
	const char *own_name, *own_home;
	const char *hide;          /* $KILN_HOME, or NULL */
	/* The task's directory: it writes there, but only the directory
	   itself is given to its user; the shim's files in it stay the
	   shim's (and are read_only below). */
	const char *task_dir;
	/* Other directories the task reads and writes (KILN_INPUT_DIR,
	   KILN_OUTPUT_DIR, ...): created if missing and, as root, given to
	   the task's user with what they hold; NULL-terminated. */
	const char *const *writable;
	/* Shown as they are (the workdir, the MPS pipe directory);
	   NULL-terminated. */
	const char *const *visible;
	const char *const *devices;/* device nodes to show; NULL-terminated */
	/* Files the task may read but not write or replace (the shim's own
	   in its task directory); NULL-terminated. */
	const char *const *read_only;
};

struct kn_sandbox;
/*
 * Everything the child will need, in the parent (it allocates, looks the
 * user up and changes owners): 0 and *out, or a negative errno and err.
 */
int kn_sandbox_new(const struct kn_sandbox_config *cfg,
		   struct kn_sandbox **out, struct kn_error *err);
/* The user the task runs as, or NULL (KN_SANDBOX_NONE). */
const char *kn_sandbox_user(const struct kn_sandbox *sb);
void kn_sandbox_free(struct kn_sandbox *sb);

/*
 * fork() for the task's first process: with a sandbox, a clone straight
 * into its new namespaces (mount, pid, IPC; user when unprivileged; for
 * KN_SANDBOX_PROCS mount and pid, and user when unprivileged),
 * where the child is pid 1. As fork: the child's pid, 0 in the child, -1
 * and errno.
 */
pid_t kn_sandbox_fork(struct kn_sandbox *sb);

/*
 * In that child: enter the sandbox and run the task there, argv (found
 * on envp's PATH) with the environment envp, in workdir; without a
 * sandbox, only the latter. With one, this process becomes the
 * namespace's init (it reaps, exits when the task does, and never
 * returns) and the task is pid 2, with all signals unblocked and its user
 * dropped; a task that cannot start there says why on its stderr and
 * exits 127. The caller keeps signals blocked from the fork on: then a
 * signal sent to the child's process group before the task exists is
 * not lost but passed on to the task once it does. Returns only when
 * nothing was started: -1 and why (len bytes), and the caller must
 * _exit without running the task.
 */
int kn_sandbox_exec(const struct kn_sandbox *sb, const char *workdir,
		    char *const *argv, char **envp, char *why, size_t len);

/*
 * In a child of the shim forked after the task started (and already put
 * in the task's cgroup): join the task's sandbox, whose init is init_pid
 * (its namespaces; a process the task's user cannot reach from outside
 * them), and start argv there with envp in workdir, the task's user
 * dropped as for the task itself. The command is the shim's child, not
 * this process's (so the shim waits for it), in its own session, with
 * this process's stdin, stdout and stderr; tty: stdin becomes its
 * controlling terminal. Returns its pid (for the caller to pass to the
 * shim, then _exit), or -1 and why when nothing was started.
 */
pid_t kn_sandbox_join(const struct kn_sandbox *sb, pid_t init_pid,
		      const char *workdir, char *const *argv, char **envp,
		      bool tty, char *why, size_t len);

/*
 * After waitpid reaped kn_sandbox_fork's child with *wstatus: the task's
 * own wait status, which init passed on, replaces init's (an exit code or
 * the signal that killed the task); left as it is when init died before
 * (killed itself) or without a sandbox.
 */
void kn_sandbox_task_status(struct kn_sandbox *sb, int *wstatus);

#endif
