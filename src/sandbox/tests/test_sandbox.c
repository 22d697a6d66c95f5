/*
 * Unit tests for the sandbox's pure parts: the task environment's
 * allow-list and the owner-to-user map's parser; and the process sandbox
 * Slurm tasks get, entered for real by a stand-in shim. The local
 * sandbox (namespaces, mounts, the user) is tested end to end in
 * tests/e2e/test_isolation.py, where a real shim runs real tasks.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/tests/testmain.h"
#include "sandbox/sandbox.h"

static const char *get(char **env, const char *name)
{
	size_t n = strlen(name);

	for (char **e = env; *e; e++)
		if (!strncmp(*e, name, n) && (*e)[n] == '=')
			return *e + n + 1;
	return NULL;
}

static char *const server_env[] = {
	"PATH=/opt/bin:/usr/bin",
	"LANG=C.UTF-8",
	"LC_ALL=C",
	"TZ=UTC",
	"TERM=xterm",
	"AZURE_STORAGE_KEY=secret-key",
	"AZURE_STORAGE_SAS_TOKEN=sv=secret",
	"KILN_TOKEN=kiln_secret",
	"KILN_HOME=/var/lib/kiln",
	"HOME=/root",
	"LD_PRELOAD=/evil.so",
	"SLURM_PROCID=3",
	"SLURMD_NODENAME=kn1",
	"CUDA_VISIBLE_DEVICES=0,1",
	"RANK=3",
	"LCX=not-a-locale-var-but-prefix",
	NULL,
};

/*
 * What a task's environment holds, by how the task runs: a local task
 * from the server's environment (allow-listed) and its launch's, a local
 * task whose server has next to nothing set, a Slurm task and a pod.
 */
static void test_env(void **state)
{
	enum { LOCAL, BARE, SLURM, POD, N_ENVS };
	char *const launch[] = {"KILN_JOB_ID=7", "CUDA_VISIBLE_DEVICES=2",
				"TZ=Europe/Paris", NULL};
	char *const bare_launch[] = {"HOME=/data", "USER=me", NULL};
	char *const bare[] = {"AZURE_CLIENT_SECRET=x", NULL};
	static const struct {
		int env;
		const char *name, *value; /* value NULL: not set */
	} cases[] = {
		{LOCAL, "PATH", "/opt/bin:/usr/bin"},
		{LOCAL, "LANG", "C.UTF-8"},
		{LOCAL, "LC_ALL", "C"},
		{LOCAL, "TERM", "xterm"},
		/* The launch wins over the shim's own. */
		{LOCAL, "TZ", "Europe/Paris"},
		{LOCAL, "KILN_JOB_ID", "7"},
		{LOCAL, "CUDA_VISIBLE_DEVICES", "2"},
		{LOCAL, "HOME", "/home/t/task"},
		{LOCAL, "USER", "kiln-task"},
		{LOCAL, "LOGNAME", "kiln-task"},
		{LOCAL, "AZURE_STORAGE_KEY", NULL},
		{LOCAL, "AZURE_STORAGE_SAS_TOKEN", NULL},
		{LOCAL, "KILN_TOKEN", NULL},
		{LOCAL, "KILN_HOME", NULL},
		{LOCAL, "LD_PRELOAD", NULL},
		{LOCAL, "SLURM_PROCID", NULL},
		{LOCAL, "RANK", NULL},
		/* "LC_*" is a prefix with its underscore. */
		{LOCAL, "LCX", NULL},
		/* The launch sets HOME; PATH has a default. */
		{BARE, "HOME", "/data"},
		{BARE, "USER", "me"},
		{BARE, "LOGNAME", "u"},
		{BARE, "PATH", "/usr/local/bin:/usr/bin:/bin"},
		{SLURM, "SLURM_PROCID", "3"},
		{SLURM, "SLURMD_NODENAME", "kn1"},
		{SLURM, "CUDA_VISIBLE_DEVICES", "0,1"},
		{SLURM, "RANK", "3"},
		{SLURM, "AZURE_STORAGE_KEY", NULL},
		{SLURM, "KILN_TOKEN", NULL},
		{SLURM, "USER", NULL},
		/* A pod drops the credentials only. */
		{POD, "KILN_HOME", "/var/lib/kiln"},
		{POD, "HOME", "/root"},
		{POD, "RANK", "3"},
		{POD, "AZURE_STORAGE_KEY", NULL},
		{POD, "AZURE_STORAGE_SAS_TOKEN", NULL},
		{POD, "KILN_TOKEN", NULL},
	};
	char **env[N_ENVS];
	size_t n = 0;
	(void)state;

	env[LOCAL] = kn_sandbox_env_build(KN_SANDBOX_LOCAL, launch, server_env,
					  "/home/t/task", "kiln-task");
	env[BARE] = kn_sandbox_env_build(KN_SANDBOX_LOCAL, bare_launch, bare,
					 "/t", "u");
	env[SLURM] = kn_sandbox_env_build(KN_SANDBOX_SLURM, NULL, server_env,
					  "/t", NULL);
	env[POD] = kn_sandbox_env_build(KN_SANDBOX_POD, NULL, server_env, NULL,
					NULL);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *got = get(env[cases[i].env], cases[i].name);

		if (cases[i].value)
			assert_string_equal(got, cases[i].value);
		else
			assert_null(got);
	}
	/* Nothing of the bare server's: the four above alone. */
	for (char **e = env[BARE]; *e; e++)
		n++;
	assert_int_equal(n, 4);
	for (int k = 0; k < N_ENVS; k++)
		kn_strv_free(env[k]);
}

static void test_user_map_parses(void **state)
{
	struct kn_user_map *m = NULL;
	struct kn_error err;
	(void)state;

	assert_int_equal(kn_user_map_parse("# owners\n"
					   "alice: alice\n"
					   "\n"
					   "  ci-bot :svc_ci   # the robot\r\n"
					   "team.b:\tbob",
					   "map", &m, &err),
			 0);
	assert_int_equal(kn_user_map_count(m), 3);
	assert_string_equal(kn_user_map_lookup(m, "alice"), "alice");
	assert_string_equal(kn_user_map_lookup(m, "ci-bot"), "svc_ci");
	assert_string_equal(kn_user_map_lookup(m, "team.b"), "bob");
	assert_null(kn_user_map_lookup(m, "carol"));
	assert_null(kn_user_map_lookup(m, NULL));
	kn_user_map_free(m);
}

static void test_user_map_errors(void **state)
{
	static const struct {
		const char *text, *message;
	} cases[] = {
		{"alice alice\n", "users.map:1:7: expected ':' after the token "
				  "name"},
		{"ok: ok\n:bob\n", "users.map:2:1: expected a token name"},
		{"alice:\n", "users.map:1:7: expected a Unix user name"},
		{"alice: -rf\n", "users.map:1:8: expected a Unix user name"},
		{"alice: bob carol\n", "users.map:1:12: unexpected text after "
				       "the user name"},
		{"a: b\na: c\n", "users.map:2:1: token name a mapped twice"},
		{"al/ice: bob\n", "users.map:1:3: expected ':' after the token "
				  "name"},
		{"alice: b$b\n", "users.map:1:9: unexpected text after the user "
				 "name"},
		{"x: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
		 "users.map:1:4: Unix user name longer than 32"},
	};
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct kn_user_map *m = (struct kn_user_map *)&cases;
		struct kn_error err;

		assert_true(kn_user_map_parse(cases[i].text, "users.map", &m,
					      &err) < 0);
		assert_string_equal(err.message, cases[i].message);
		assert_string_equal(err.field, "task-user-map");
		/* Not written on failure. */
		assert_ptr_equal(m, (struct kn_user_map *)&cases);
	}
}

static void test_sandbox_unknown_user(void **state)
{
	const struct kn_sandbox_config cfg = {
		.mode = KN_SANDBOX_UID,
		.run_as = "no-such-user-kiln-test",
	};
	struct kn_sandbox *sb = NULL;
	struct kn_error err;
	(void)state;

	assert_true(kn_sandbox_new(&cfg, &sb, &err) < 0);
	assert_null(sb);
	assert_string_equal(err.field, "run_as");
	assert_non_null(strstr(err.message, "no Unix user no-such-user-kiln-test"));
	assert_true(kn_sandbox_new(&(struct kn_sandbox_config){
					   .mode = KN_SANDBOX_UID,
					   .run_as = "root"},
				   &sb, &err) < 0);
	assert_non_null(strstr(err.message, "may not run as root"));
}

/* What the shim checks in the user the server sends it. */
static void test_user_check_refuses_root_and_server(void **state)
{
	struct kn_sandbox_user ok = {"t", 54321, 54321, {54321, 54322}, 2};
	struct kn_sandbox_user u;
	struct kn_error err;
	(void)state;

	if (getuid() == ok.uid || getgid() == ok.gid)
		ok.uid = ok.gid = ok.groups[0] = 54323;
	assert_int_equal(kn_sandbox_user_check(&ok, &err), 0);
	u = ok;
	u.uid = 0;
	assert_int_equal(kn_sandbox_user_check(&u, &err), -EINVAL);
	assert_string_equal(err.field, "user");
	assert_non_null(strstr(err.message, "uid 0"));
	u = ok;
	u.uid = getuid();
	assert_int_equal(kn_sandbox_user_check(&u, &err), -EINVAL);
	u = ok;
	u.gid = 0;
	assert_int_equal(kn_sandbox_user_check(&u, &err), -EINVAL);
	assert_non_null(strstr(err.message, "gid 0"));
	u = ok;
	u.gid = getgid();
	assert_int_equal(kn_sandbox_user_check(&u, &err), -EINVAL);
	u = ok;
	u.groups[1] = 0;
	assert_int_equal(kn_sandbox_user_check(&u, &err), -EINVAL);
	assert_non_null(strstr(err.message, "in group 0"));
	/* Given, the user is taken as it is: no lookup of its name. */
	u = ok;
	if (getuid() == 0) {
		struct kn_sandbox *sb = NULL;
		u.uid = 0;
		assert_true(kn_sandbox_new(&(struct kn_sandbox_config){
						   .mode = KN_SANDBOX_UID,
						   .user = &u,
						   .task_dir = "/nonexistent"},
					   &sb, &err) < 0);
		assert_null(sb);
		assert_non_null(strstr(err.message, "uid 0"));
	}
}

static void append(const char *path, const char *text)
{
	FILE *f = fopen(path, "a");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* Looked up once; again when the watched files change; failures kept not. */
static void test_user_cache(void **state)
{
	char dir[] = "/tmp/kn-users-XXXXXX", passwd[64], group[64];
	struct kn_sandbox_user u, again;
	struct kn_user_cache *c;
	struct kn_error err;
	(void)state;

	if (!getpwnam("nobody"))
		skip();
	assert_non_null(mkdtemp(dir));
	snprintf(passwd, sizeof(passwd), "%s/passwd", dir);
	snprintf(group, sizeof(group), "%s/group", dir);
	append(passwd, "a\n");
	append(group, "a\n");
	c = kn_user_cache_new(passwd, group);
	assert_int_equal(kn_user_cache_get(c, "nobody", &u, &err), 0);
	assert_string_equal(u.name, "nobody");
	assert_int_equal(u.uid, getpwnam("nobody")->pw_uid);
	assert_true(u.n_groups >= 1);
	assert_int_equal(kn_user_cache_get(c, "nobody", &again, &err), 0);
	assert_int_equal(kn_user_cache_lookups(c), 1);
	assert_memory_equal(&u, &again, sizeof(u));
	append(passwd, "b\n");
	assert_int_equal(kn_user_cache_get(c, "nobody", &again, &err), 0);
	assert_int_equal(kn_user_cache_lookups(c), 2);
	append(group, "b\n");
	assert_int_equal(kn_user_cache_get(c, "nobody", &again, &err), 0);
	assert_int_equal(kn_user_cache_lookups(c), 3);
	assert_true(kn_user_cache_get(c, "no-such-user-kiln-test", &u, &err) <
		    0);
	assert_string_equal(err.field, "run_as");
	assert_true(kn_user_cache_get(c, "no-such-user-kiln-test", &u, &err) <
		    0);
	assert_int_equal(kn_user_cache_lookups(c), 5);
	assert_true(kn_user_cache_get(c, "root", &u, &err) < 0);
	assert_non_null(strstr(err.message, "may not run as root"));
	kn_user_cache_free(c);
	unlink(passwd);
	unlink(group);
	rmdir(dir);
}

/* ---- the process sandbox (Slurm) ---- */

#define SHIM_NO_NAMESPACES 77

/* Live (not zombie) processes whose environment holds mark. */
static int marked_pids(const char *mark, pid_t *out, int max)
{
	DIR *proc = opendir("/proc");
	struct dirent *d;
	int n = 0;

	assert_non_null(proc);
	while ((d = readdir(proc)) != NULL && n < max) {
		char path[300], buf[8192], state = 'Z', *p;
		FILE *f;
		size_t len;

		if (d->d_name[0] < '0' || d->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/environ", d->d_name);
		if (!(f = fopen(path, "r")))
			continue;
		len = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[len] = '\0';
		for (p = buf; p < buf + len; p += strlen(p) + 1)
			if (!strcmp(p, mark))
				break;
		if (p >= buf + len)
			continue;
		snprintf(path, sizeof(path), "/proc/%s/stat", d->d_name);
		if ((f = fopen(path, "r"))) {
			if (fread(buf, 1, sizeof(buf) - 1, f) > 0 &&
			    (p = strrchr(buf, ')')))
				state = p[2];
			fclose(f);
		}
		if (state != 'Z')
			out[n++] = (pid_t)atoi(d->d_name);
	}
	closedir(proc);
	return n;
}

/*
 * In a stand-in shim's process (as_nobody: unprivileged, as Slurm runs
 * it): the process sandbox it starts its task in. The shim ends with
 * status 1 where it cannot have one.
 */
static struct kn_sandbox *stand_in_sandbox(bool as_nobody)
{
	const struct kn_sandbox_config cfg = {.mode = KN_SANDBOX_PROCS};
	struct kn_sandbox *sb = NULL;
	struct kn_error err;

	if (as_nobody && (setresgid(65534, 65534, 65534) < 0 ||
			  setresuid(65534, 65534, 65534) < 0 ||
			  /* as a shim exec'd as that user is: its /proc/self
			     files its own, to write its user namespace's maps */
			  prctl(PR_SET_DUMPABLE, 1) < 0))
		_exit(1);
	if (kn_sandbox_new(&cfg, &sb, &err) < 0)
		_exit(1);
	return sb;
}

/* The sandbox's init, forked; the shim ends with SHIM_NO_NAMESPACES
 * where this kernel refuses them. */
static pid_t stand_in_fork(struct kn_sandbox *sb)
{
	pid_t pid = kn_sandbox_fork(sb);

	if (pid < 0)
		_exit(errno == EPERM || errno == EINVAL ? SHIM_NO_NAMESPACES : 1);
	return pid;
}

/* A stand-in shim starts a task in the process sandbox as kiln's shim
 * does: dying with it. */
_Noreturn static void stand_in_shim(bool as_nobody, const char *dir,
				    char *const *argv, char **envp)
{
	struct kn_sandbox *sb = stand_in_sandbox(as_nobody);
	char why[256];
	pid_t pid = stand_in_fork(sb);

	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		kn_sandbox_exec(sb, dir, argv, envp, why, sizeof(why));
		fprintf(stderr, "%s\n", why);
		_exit(127);
	}
	for (;;)
		pause();
}

static void procs_case(bool as_nobody)
{
	char dir[] = "/tmp/kn-sandbox-test-XXXXXX", *script, *done, mark[64];
	char seen[16] = "", line[256] = "";
	pid_t shim, pids[16];
	int n = 0, left, inner = 0, procs = 0, wstatus;
	FILE *f = NULL;

	assert_non_null(mkdtemp(dir));
	assert_int_equal(chmod(dir, 0777), 0);
	done = kn_asprintf("%s/done", dir);
	snprintf(mark, sizeof(mark), "KN_PROCS_MARK=%d", (int)getpid());
	/* Its own pid, whether the test's process is there to signal, how
	   many processes its /proc shows; then a child left running. */
	script = kn_asprintf("sleep 300 & echo $$ $(kill -0 %d 2>/dev/null "
			     "&& echo seen || echo unseen) $(ls /proc | grep "
			     "-c '^[0-9]') > %s.tmp && mv %s.tmp %s; wait",
			     (int)getpid(), done, done, done);
	char *argv[] = {"/bin/sh", "-c", script, NULL};
	char *envp[] = {"PATH=/usr/bin:/bin", mark, NULL};

	shim = fork();
	assert_true(shim >= 0);
	if (shim == 0)
		stand_in_shim(as_nobody, dir, argv, envp);
	for (int i = 0; i < 3000 && !(f = fopen(done, "r")); i++) {
		if (waitpid(shim, &wstatus, WNOHANG) == shim) {
			if (WIFEXITED(wstatus) &&
			    WEXITSTATUS(wstatus) == SHIM_NO_NAMESPACES)
				skip(); /* this kernel refuses the namespaces */
			fail_msg("the shim ended first: status %d", wstatus);
		}
		usleep(10000);
	}
	if (!f) {
		kill(shim, SIGKILL);
		waitpid(shim, &wstatus, 0);
		fail_msg("the task never wrote %s", done);
	}
	if (!fgets(line, sizeof(line), f))
		line[0] = '\0';
	fclose(f);
	n = marked_pids(mark, pids, 16); /* sh and sleep, seen from outside */

	kill(shim, SIGKILL);
	assert_int_equal(waitpid(shim, &wstatus, 0), shim);
	for (int i = 0; i < 3000 && marked_pids(mark, pids, 16) > 0; i++)
		usleep(10000);
	left = marked_pids(mark, pids, 16);
	for (int i = 0; i < left; i++)
		kill(pids[i], SIGKILL); /* leave nothing behind, then fail */
	assert_true(n >= 2);
	assert_int_equal(left, 0);
	assert_int_equal(sscanf(line, "%d %15s %d", &inner, seen, &procs), 3);
	assert_int_equal(inner, 2); /* under the namespace's init */
	assert_string_equal(seen, "unseen");
	/* Its own few (init, sh, sleep, the subshells), not the host's. */
	assert_true(procs < 10);
	unlink(done);
	rmdir(dir);
	KN_FREE_ALL(done, script);
}


/*
 * A stop sent to the task's process group before the task exists (the
 * sandbox's init still building its view) reaches the task: init keeps
 * it pending and passes it on, rather than the task running unstopped
 * until a later SIGKILL. The stand-in sends SIGTERM before init even
 * starts to build, so without that hand-over the task would run on.
 */
static void early_stop_case(bool as_nobody)
{
	char dir[] = "/tmp/kn-sandbox-test-XXXXXX", why[256], b;
	/* Ends by itself (status 7) if the stop is lost, so a failing
	   run fails rather than hangs. */
	char *argv[] = {"/bin/sh", "-c", "sleep 5; exit 7", NULL};
	char *envp[] = {"PATH=/usr/bin:/bin", NULL};
	struct kn_sandbox *sb;
	sigset_t all;
	int go[2], wstatus, task_status = 0;
	pid_t shim, init;

	assert_non_null(mkdtemp(dir));
	assert_int_equal(chmod(dir, 0777), 0);
	shim = fork();
	assert_true(shim >= 0);
	if (shim == 0) {
		sb = stand_in_sandbox(as_nobody);
		if (pipe(go) < 0)
			_exit(1);
		/* As the shim's child: every signal blocked from the fork. */
		sigfillset(&all);
		sigprocmask(SIG_SETMASK, &all, NULL);
		init = stand_in_fork(sb);
		if (init == 0) {
			close(go[1]);
			if (read(go[0], &b, 1) != 1)
				_exit(1);
			kn_sandbox_exec(sb, dir, argv, envp, why, sizeof(why));
			_exit(127);
		}
		close(go[0]);
		setpgid(init, init);
		kill(-init, SIGTERM);
		if (write(go[1], "g", 1) != 1 ||
		    waitpid(init, &wstatus, 0) != init)
			_exit(1);
		task_status = wstatus;
		kn_sandbox_task_status(sb, &task_status);
		/* 100 + the signal that ended the task, or its exit code. */
		_exit(WIFSIGNALED(task_status) ? 100 + WTERMSIG(task_status)
					       : WEXITSTATUS(task_status));
	}
	assert_int_equal(waitpid(shim, &wstatus, 0), shim);
	rmdir(dir);
	assert_true(WIFEXITED(wstatus));
	if (WEXITSTATUS(wstatus) == SHIM_NO_NAMESPACES)
		skip(); /* this kernel refuses the namespaces */
	assert_int_equal(WEXITSTATUS(wstatus), 100 + SIGTERM);
}

/* A stand-in shim's case, run by a root shim or by an unprivileged one. */
struct shim_case {
	void (*run)(bool as_nobody);
	bool as_root;
};

static void test_shim_case(void **state)
{
	const struct shim_case *c = *state;

	if (c->as_root && geteuid() != 0)
		skip(); /* the root case needs root */
	/* As root the stand-in becomes nobody; else it already is not root. */
	c->run(!c->as_root && geteuid() == 0);
}

/* A cmocka test named NAME: the shim case RUN_CASE, by a root shim or not. */
#define SHIM_TEST(name, run_case, root)                                   \
	{#name, test_shim_case, NULL, NULL,                               \
	 &(struct shim_case){.run = run_case, .as_root = root}}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_env),
	cmocka_unit_test(test_user_map_parses),
	cmocka_unit_test(test_user_map_errors),
	cmocka_unit_test(test_sandbox_unknown_user),
	cmocka_unit_test(test_user_check_refuses_root_and_server),
	cmocka_unit_test(test_user_cache),
	SHIM_TEST(test_procs_task_dies_with_its_shim, procs_case, true),
	SHIM_TEST(test_procs_unprivileged_task_dies_with_its_shim,
		  procs_case, false),
	SHIM_TEST(test_stop_before_the_task_reaches_it, early_stop_case,
		  true),
	SHIM_TEST(test_unprivileged_stop_before_the_task_reaches_it,
		  early_stop_case, false))
