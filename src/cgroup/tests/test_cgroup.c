/*
 * The cgroup backends against a fake tree in a temporary directory (file
 * formats: what is written where, in which order) and, as root, against
 * the real hierarchies: v1 limits and devices where v1 is mounted, the v2
 * device program where a cgroup2 is mounted (its controllers may be
 * absent, the program needs none).
 */
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/tests/testdir.h"
#include "base/tests/testmain.h"
#include "cgroup/cgroup.h"

/* An empty file the kernel would have made, directories above it too. */
static void touch(const char *dir, const char *file, const char *text)
{
	char *path = kn_asprintf("%s/%s", dir, file), *slash;

	slash = strrchr(path, '/');
	*slash = '\0';
	assert_int_equal(kn_mkdir_p(path, 0755), 0);
	*slash = '/';
	assert_int_equal(kn_write_file_replace(path, text, strlen(text), 0644),
			 0);
	free(path);
}

static char *slurp(const char *dir, const char *file)
{
	char *path = kn_asprintf("%s/%s", dir, file), *text = NULL;
	int rc = kn_read_file(path, 1 << 16, &text, NULL);
	free(path);
	return rc == 0 ? text : kn_xstrdup("(missing)");
}

static void assert_file(const char *dir, const char *file, const char *want)
{
	char *got = slurp(dir, file);
	assert_string_equal(got, want);
	free(got);
}

/* A fake hierarchy in a temporary directory, removed after the test;
   self stands for /proc/self/cgroup. */
struct tree {
	char *root, *self;
};

static int tree_empty(void **state)
{
	struct tree *t = kn_xcalloc(1, sizeof(*t));

	t->root = kn_test_dir("cgroup");
	t->self = kn_asprintf("%s/self", t->root);
	*state = t;
	return 0;
}

static int tree_remove(void **state)
{
	struct tree *t = *state;

	kn_rm_rf(t->root);
	KN_FREE_ALL(t->root, t->self, t);
	return 0;
}

static void test_detect(void **state)
{
	const char *root = ((struct tree *)*state)->root;

	assert_int_equal(kn_cgroup_detect(root), KN_CGROUP_NONE);
	/* A hybrid's empty cgroup2 at ROOT/unified does not make it v2. */
	touch(root, "unified/cgroup.controllers", "");
	touch(root, "memory/cgroup.procs", "");
	assert_int_equal(kn_cgroup_detect(root), KN_CGROUP_V1);
	touch(root, "cgroup.controllers", "cpu memory pids\n");
	assert_int_equal(kn_cgroup_detect(root), KN_CGROUP_V2);
	assert_string_equal(kn_cgroup_version_name(KN_CGROUP_V2), "v2");
}

/* A v1 tree: each controller's own cgroup from /proc/self/cgroup. */
static void fake_v1(const struct tree *t)
{
	static const char *const files[] = {
		"memory/cgroup.procs",
		"memory/srv/cgroup.procs",
		"memory/srv/kiln/t1/memory.limit_in_bytes",
		"memory/srv/kiln/t1/memory.memsw.limit_in_bytes",
		"memory/srv/kiln/t1/cgroup.procs",
		"cpu/cgroup.procs",
		"cpu/kiln/t1/cpu.cfs_period_us",
		"cpu/kiln/t1/cpu.cfs_quota_us",
		"cpu/kiln/t1/cgroup.procs",
		"pids/cgroup.procs",
		"pids/kiln/t1/pids.max",
		"pids/kiln/t1/cgroup.procs",
		"devices/cgroup.procs",
		"devices/kiln/t1/devices.deny",
		"devices/kiln/t1/devices.allow",
		"devices/kiln/t1/cgroup.procs",
		NULL,
	};
	const char *text = "5:devices:/\n4:memory:/srv\n3:pids:/\n"
			   "2:cpu,cpuacct:/\n0::/\n";

	for (int i = 0; files[i]; i++)
		touch(t->root, files[i], "");
	assert_int_equal(kn_write_file_replace(t->self, text, strlen(text),
					       0600),
			 0);
}

static int tree_v1(void **state)
{
	tree_empty(state);
	fake_v1(*state);
	return 0;
}

static void test_v1_files(void **state)
{
	struct tree *tree = *state;
	const char *root = tree->root, *self = tree->self;
	char *mem, *dev;
	char *node = kn_asprintf("%s/nvidia2", root);
	char *missing = kn_asprintf("%s/nvidia3", root);
	char *devices[] = {node, missing, NULL};
	struct kn_cgroup_place place = {root, "kiln", self};
	struct kn_cgroup_limits lim = {.memory_bytes = 64LL << 20,
				       .cpu_milli = 1500, .pids_max = 100,
				       .devices = devices};
	struct kn_cgroup *cg = NULL;
	struct kn_error err;

	/* A regular file is no device: only a node of the given type counts. */
	touch(root, "nvidia2", "");
	assert_int_equal(kn_cgroup_new(&place, "t1", &cg, &err), 0);
	mem = kn_asprintf("%s/memory/srv/kiln/t1", root);
	assert_string_equal(kn_cgroup_path(cg), mem);
	assert_int_equal(kn_cgroup_create(cg, &lim, &err), 0);
	assert_file(mem, "memory.limit_in_bytes", "67108864");
	/* No swap beyond the limit. */
	assert_file(mem, "memory.memsw.limit_in_bytes", "67108864");
	free(mem);
	mem = kn_asprintf("%s/cpu/kiln/t1", root);
	assert_file(mem, "cpu.cfs_period_us", "100000");
	assert_file(mem, "cpu.cfs_quota_us", "150000");
	free(mem);
	mem = kn_asprintf("%s/pids/kiln/t1", root);
	assert_file(mem, "pids.max", "100");
	free(mem);
	dev = kn_asprintf("%s/devices/kiln/t1", root);
	assert_file(dev, "devices.deny", "a");
	{
		char *allow = slurp(dev, "devices.allow");
		/* The standard nodes, each its own write, never mknod. */
		assert_non_null(strstr(allow, "c 1:3 rw"));
		assert_non_null(strstr(allow, "c 1:9 rw"));
		assert_non_null(strstr(allow, "c 136:* rw"));
		assert_null(strstr(allow, "rwm"));
		free(allow);
	}
	/* Entering writes the pid into every hierarchy. */
	assert_int_equal(kn_cgroup_enter(cg, 4242, &err), 0);
	assert_file(dev, "cgroup.procs", "4242\n");
	free(dev);
	kn_cgroup_free(cg);
	KN_FREE_ALL(node, missing);
}

/* Make DIR (and its parents) with an old modification time. */
static void old_dir(const char *root, const char *dir, bool old)
{
	char *path = kn_asprintf("%s/%s", root, dir);
	struct timespec times[2] = {{1000, 0}, {1000, 0}};

	assert_int_equal(kn_mkdir_p(path, 0755), 0);
	if (old)
		assert_int_equal(utimensat(AT_FDCWD, path, times, 0), 0);
	free(path);
}

static bool dir_exists(const char *root, const char *dir)
{
	char *path = kn_asprintf("%s/%s", root, dir);
	bool yes = access(path, F_OK) == 0;
	free(path);
	return yes;
}

/*
 * In a fake tree a directory holding a file stands for a cgroup holding
 * a process: rmdir refuses both. Only old, empty "task-*" ones go.
 */
static void test_sweep_fake(void **state)
{
	static const struct {
		const char *dir;
		bool old, busy, swept;
	} dirs[] = {
		{"memory/srv/kiln/task-left", true, false, true},
		{"cpu/kiln/task-left", true, false, true},
		{"pids/kiln/task-left", true, false, true},
		{"devices/kiln/task-only-devices", true, false, true},
		{"memory/srv/kiln/task-new", false, false, false},
		{"memory/srv/kiln/other-old", true, false, false},
		{"memory/srv/kiln/task-busy", true, true, false},
	};
	const size_t n = sizeof(dirs) / sizeof(dirs[0]);
	struct tree *tree = *state;
	const char *root = tree->root, *self = tree->self;
	struct kn_cgroup_place place = {root, "kiln", self};
	struct kn_error err;
	size_t removed = 9;

	for (size_t i = 0; i < n; i++) {
		if (dirs[i].busy) {
			char *procs = kn_asprintf("%s/cgroup.procs",
						  dirs[i].dir);

			touch(root, procs, "42\n");
			free(procs);
		}
		old_dir(root, dirs[i].dir, dirs[i].old);
	}
	assert_int_equal(kn_cgroup_sweep(&place, 60, &removed, &err), 0);
	assert_int_equal(removed, 2);
	for (size_t i = 0; i < n; i++)
		if (dir_exists(root, dirs[i].dir) == dirs[i].swept)
			fail_msg("%s: %s", dirs[i].dir,
				 dirs[i].swept ? "not swept" : "swept");
	/* A parent not made yet (no task ran) is nothing to sweep. */
	place.parent = "never";
	assert_int_equal(kn_cgroup_sweep(&place, 60, &removed, &err), 0);
	assert_int_equal(removed, 0);
}

/* A v1 hierarchy whose controller limits nothing is not joined. */
static void test_v1_unlimited_not_joined(void **state)
{
	/* No CPU quota, no device list: the task stays where it was there. */
	static const struct {
		const char *dir, *procs, *file, *want;
	} each[] = {
		{"memory/srv/kiln/t1", "4242\n", "memory.limit_in_bytes",
		 "67108864"},
		{"pids/kiln/t1", "4242\n", "pids.max", "100"},
		{"cpu/kiln/t1", "", "cpu.cfs_quota_us", ""},
		{"devices/kiln/t1", "", "devices.deny", ""},
	};
	struct tree *tree = *state;
	const char *root = tree->root, *self = tree->self;
	struct kn_cgroup_place place = {root, "kiln", self};
	struct kn_cgroup_limits lim = {.memory_bytes = 64LL << 20,
				       .pids_max = 100};
	struct kn_cgroup *cg = NULL;
	struct kn_error err;

	assert_int_equal(kn_cgroup_new(&place, "t1", &cg, &err), 0);
	assert_int_equal(kn_cgroup_create(cg, &lim, &err), 0);
	assert_int_equal(kn_cgroup_enter(cg, 4242, &err), 0);
	for (size_t i = 0; i < sizeof(each) / sizeof(each[0]); i++) {
		char *dir = kn_asprintf("%s/%s", root, each[i].dir);
		assert_file(dir, "cgroup.procs", each[i].procs);
		assert_file(dir, each[i].file, each[i].want);
		free(dir);
	}
	kn_cgroup_free(cg);
}

static void test_v1_missing_controller(void **state)
{
	struct tree *tree = *state;
	const char *root = tree->root, *self = tree->self;
	char *pids;
	struct kn_cgroup_place place = {root, "kiln", self};
	struct kn_cgroup_limits lim = {.pids_max = 10};
	struct kn_cgroup *cg = NULL;
	struct kn_error err;

	pids = kn_asprintf("%s/pids", root);
	kn_rm_rf(pids);
	assert_int_equal(kn_cgroup_new(&place, "t1", &cg, &err), 0);
	assert_true(kn_cgroup_create(cg, &lim, &err) < 0);
	assert_non_null(strstr(err.message, "the pids cgroup controller is not "
					    "mounted"));
	kn_cgroup_free(cg);
	free(pids);
}

static void test_bad_names(void **state)
{
	struct tree *tree = *state;
	const char *root = tree->root, *self = tree->self;
	struct kn_cgroup_place place = {root, "kiln", self};
	struct kn_cgroup_place up = {root, "kiln/../..", self};
	struct kn_cgroup *cg = NULL;
	struct kn_error err;

	assert_true(kn_cgroup_new(&place, "a/b", &cg, &err) < 0);
	assert_true(kn_cgroup_new(&place, "..", &cg, &err) < 0);
	assert_true(kn_cgroup_new(&up, "t1", &cg, &err) < 0);
	assert_null(cg);
	place.root = "/nonexistent-kiln-root";
	assert_true(kn_cgroup_new(&place, "t1", &cg, &err) < 0);
	assert_non_null(strstr(err.message, "no cgroup hierarchy"));
	assert_null(cg);
}

/* v2: controllers enabled from the root down, limits in the leaf. */
static void test_v2_files(void **state)
{
	struct tree *tree = *state;
	const char *root = tree->root, *self = tree->self;
	char *task;
	struct kn_cgroup_place place = {root, "/kiln.slice/tasks", self};
	struct kn_cgroup_limits lim = {.memory_bytes = 1LL << 30,
				       .cpu_milli = 250, .pids_max = 64};
	struct kn_cgroup *cg = NULL;
	struct kn_error err;

	touch(root, "cgroup.controllers", "cpuset cpu io memory pids\n");
	touch(root, "cgroup.subtree_control", "cpu\n");
	touch(root, "kiln.slice/cgroup.controllers", "cpu memory pids\n");
	touch(root, "kiln.slice/cgroup.subtree_control", "");
	touch(root, "kiln.slice/tasks/cgroup.controllers", "cpu memory pids\n");
	touch(root, "kiln.slice/tasks/cgroup.subtree_control", "");
	touch(root, "kiln.slice/tasks/t1/memory.max", "");
	touch(root, "kiln.slice/tasks/t1/memory.swap.max", "");
	touch(root, "kiln.slice/tasks/t1/cpu.max", "");
	touch(root, "kiln.slice/tasks/t1/pids.max", "");
	touch(root, "kiln.slice/tasks/t1/memory.events",
	      "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n");
	touch(root, "self", "0::/\n");
	/* An absolute parent is not below our own cgroup. */
	assert_int_equal(kn_cgroup_new(&place, "t1", &cg, &err), 0);
	assert_int_equal(kn_cgroup_create(cg, &lim, &err), 0);
	/* Only what was not already on; each controller its own write. */
	assert_file(root, "cgroup.subtree_control", "cpu\n+memory+pids");
	assert_file(root, "kiln.slice/cgroup.subtree_control",
		    "+memory+cpu+pids");
	assert_file(root, "kiln.slice/tasks/cgroup.subtree_control",
		    "+memory+cpu+pids");
	task = kn_asprintf("%s/kiln.slice/tasks/t1", root);
	assert_string_equal(kn_cgroup_path(cg), task);
	assert_file(task, "memory.max", "1073741824");
	assert_file(task, "memory.swap.max", "0");
	/* A quarter CPU: 25 ms of every 100 ms. */
	assert_file(task, "cpu.max", "25000 100000");
	assert_file(task, "pids.max", "64");
	assert_int_equal(kn_cgroup_oom_kills(cg), 2);
	free(task);
	kn_cgroup_free(cg);

	/* A controller the parent does not offer is named. */
	touch(root, "kiln.slice/tasks/cgroup.controllers", "cpu pids\n");
	assert_int_equal(kn_cgroup_new(&place, "t1", &cg, &err), 0);
	assert_true(kn_cgroup_create(cg, &lim, &err) < 0);
	assert_non_null(strstr(err.message, "the memory cgroup controller is "
					    "not available in"));
	kn_cgroup_free(cg);
}

/* A relative parent goes below our own cgroup, found in the "0::" line. */
static void test_v2_relative_parent(void **state)
{
	struct tree *tree = *state;
	const char *root = tree->root, *self = tree->self;
	char *want;
	const char *text = "1:name=systemd:/x\n0::/system.slice/kiln.service\n";
	struct kn_cgroup_place place = {root, "tasks", self};
	struct kn_cgroup *cg = NULL;
	struct kn_error err;

	touch(root, "cgroup.controllers", "memory\n");
	assert_int_equal(kn_write_file_replace(self, text, strlen(text), 0600),
			 0);
	assert_int_equal(kn_cgroup_new(&place, "t9", &cg, &err), 0);
	want = kn_asprintf("%s/system.slice/kiln.service/tasks/t9", root);
	assert_string_equal(kn_cgroup_path(cg), want);
	free(want);
	kn_cgroup_free(cg);
}

/* Run fn(arg) in a child placed in cg before it starts; its wait status. */
static int run_in(struct kn_cgroup *cg, int (*fn)(const void *),
		  const void *arg)
{
	int gate[2], wstatus;
	struct kn_error err;
	pid_t pid;

	assert_int_equal(pipe(gate), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char c;
		close(gate[1]);
		if (read(gate[0], &c, 1) != 1)
			_exit(255);
		_exit(fn(arg));
	}
	close(gate[0]);
	assert_int_equal(kn_cgroup_enter(cg, pid, &err), 0);
	assert_int_equal(write(gate[1], "x", 1), 1);
	close(gate[1]);
	assert_int_equal(waitpid(pid, &wstatus, 0), pid);
	return wstatus;
}

/* Opens nodes[0] and nodes[1]: 1 = ENXIO for the first, 2 = EPERM for
   the second. */
static int open_both(const void *arg)
{
	char *const *nodes = arg;
	int a = open(nodes[0], O_RDWR) < 0 ? errno : 0;
	int d = open(nodes[1], O_RDWR) < 0 ? errno : 0;

	return (a == ENXIO ? 1 : 0) | (d == EPERM ? 2 : 0);
}

/* Touches 128 MiB. */
static int hog(const void *arg)
{
	(void)arg;
	for (size_t i = 0; i < 128; i++) {
		char *p = malloc(1 << 20);
		if (p)
			memset(p, 1, 1 << 20);
	}
	return 0;
}

/* Remove the parent cgroup a test made, in each hierarchy. */
static void remove_parent(const char *root, enum kn_cgroup_version v,
			  const char *parent)
{
	static const char *const v1[] = {"/memory", "/cpu", "/pids",
					 "/devices", NULL};
	static const char *const v2[] = {"", NULL};

	for (const char *const *c = v == KN_CGROUP_V1 ? v1 : v2; *c; c++) {
		char *p = kn_asprintf("%s%s%s", root, *c, parent);
		/* A v1 hierarchy the test limited nothing in has none. */
		if (rmdir(p) < 0)
			assert_int_equal(errno, ENOENT);
		free(p);
	}
}

/*
 * A parent cgroup for a test under the real hierarchy at root, named
 * after what and this process; the test is skipped unless it runs as
 * root and root holds version v.
 */
static char *real_parent(const char *root, enum kn_cgroup_version v,
			 const char *what)
{
	if (geteuid() != 0 || kn_cgroup_detect(root) != v)
		skip();
	return kn_asprintf("/kiln-unit-%s%d", what, (int)getpid());
}

/* A hog run in cg is killed by the kernel's OOM killer, and counted. */
static void expect_oom_kill(struct kn_cgroup *cg)
{
	int wstatus = run_in(cg, hog, NULL);

	assert_true(WIFSIGNALED(wstatus));
	assert_int_equal(WTERMSIG(wstatus), SIGKILL);
	assert_true(kn_cgroup_oom_kills(cg) >= 1);
}

/*
 * Under the real hierarchy at root (skipped unless root and version v):
 * two GPU nodes without a driver, the first allowed. Opening the allowed
 * one reaches the (missing) driver, ENXIO; the other is refused, EPERM.
 * The cgroup is gone after destroy. lim's devices are filled here.
 */
static void device_case(const char *root, enum kn_cgroup_version v,
			struct kn_cgroup_limits *lim)
{
	char *parent = real_parent(root, v, "");
	struct kn_cgroup_place place = {root, parent, "/proc/self/cgroup"};
	char *dir = kn_test_dir("cgroup"), *nodes[3] = {NULL}, *path;
	struct kn_cgroup *cg = NULL;
	struct kn_error err;
	int wstatus;

	nodes[0] = kn_asprintf("%s/nvidia0", dir);
	nodes[1] = kn_asprintf("%s/nvidia1", dir);
	assert_int_equal(mknod(nodes[0], S_IFCHR | 0600, makedev(195, 0)), 0);
	assert_int_equal(mknod(nodes[1], S_IFCHR | 0600, makedev(195, 1)), 0);
	{
		char *allowed[] = {nodes[0], NULL};
		lim->devices = allowed;
		assert_int_equal(kn_cgroup_new(&place, "t1", &cg, &err), 0);
		if (kn_cgroup_create(cg, lim, &err) < 0)
			fail_msg("%s", err.message);
		lim->devices = NULL;
	}
	wstatus = run_in(cg, open_both, nodes);
	assert_true(WIFEXITED(wstatus));
	assert_int_equal(WEXITSTATUS(wstatus), 3);
	path = kn_xstrdup(kn_cgroup_path(cg));
	assert_int_equal(kn_cgroup_destroy(cg, &err), 0);
	assert_int_equal(access(path, F_OK), -1);
	remove_parent(root, v, parent);
	free(path);
	kn_cgroup_free(cg);
	for (int i = 0; i < 2; i++) {
		unlink(nodes[i]);
		free(nodes[i]);
	}
	kn_rm_rf(dir);
	KN_FREE_ALL(dir, parent);
}

static void test_real_v1(void **state)
{
	struct kn_cgroup_limits lim = {.memory_bytes = 32LL << 20,
				       .cpu_milli = 500, .pids_max = 16};
	(void)state;
	device_case(KN_CGROUP_ROOT, KN_CGROUP_V1, &lim);
}

/* A cgroup2 without controllers still runs the device program. */
static void test_real_v2_devices(void **state)
{
	struct kn_cgroup_limits lim = {0};
	(void)state;
	device_case(KN_CGROUP_ROOT "/unified", KN_CGROUP_V2, &lim);
}

static int wait_for_gate(const void *arg)
{
	char c;
	return read(*(const int *)arg, &c, 1) == 1 ? 0 : 1;
}

/*
 * The real v1 hierarchy (as root): a task cgroup left empty is removed;
 * one with a process in it is refused by the kernel and stays.
 */
static void test_real_v1_sweep(void **state)
{
	char *parent = real_parent(KN_CGROUP_ROOT, KN_CGROUP_V1, "sweep-");
	struct kn_cgroup_place place = {KN_CGROUP_ROOT, parent,
					"/proc/self/cgroup"};
	struct kn_cgroup_limits lim = {.memory_bytes = 32LL << 20,
				       .pids_max = 16};
	struct kn_cgroup *left = NULL, *busy = NULL;
	struct kn_error err;
	size_t removed = 0;
	int gate[2], wstatus;
	pid_t pid;
	(void)state;

	assert_int_equal(kn_cgroup_new(&place, "task-left", &left, &err), 0);
	assert_int_equal(kn_cgroup_create(left, &lim, &err), 0);
	assert_int_equal(kn_cgroup_new(&place, "task-busy", &busy, &err), 0);
	assert_int_equal(kn_cgroup_create(busy, &lim, &err), 0);
	assert_int_equal(pipe(gate), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(gate[1]);
		_exit(wait_for_gate(&gate[0]));
	}
	close(gate[0]);
	assert_int_equal(kn_cgroup_enter(busy, pid, &err), 0);
	assert_int_equal(kn_cgroup_sweep(&place, 0, &removed, &err), 0);
	assert_int_equal(removed, 1);
	assert_int_equal(access(kn_cgroup_path(left), F_OK), -1);
	assert_int_equal(access(kn_cgroup_path(busy), F_OK), 0);
	assert_int_equal(write(gate[1], "x", 1), 1);
	close(gate[1]);
	assert_int_equal(waitpid(pid, &wstatus, 0), pid);
	assert_int_equal(kn_cgroup_destroy(busy, &err), 0);
	remove_parent(KN_CGROUP_ROOT, KN_CGROUP_V1, parent);
	kn_cgroup_free(left);
	kn_cgroup_free(busy);
	free(parent);
}

/* The kernel's OOM killer in a real v1 cgroup is counted. */
static void test_real_v1_oom(void **state)
{
	const char *root = KN_CGROUP_ROOT;
	char *parent = real_parent(root, KN_CGROUP_V1, "oom-");
	struct kn_cgroup_place place = {root, parent, "/proc/self/cgroup"};
	struct kn_cgroup_limits lim = {.memory_bytes = 16LL << 20};
	struct kn_cgroup *cg = NULL;
	struct kn_error err;
	(void)state;

	assert_int_equal(kn_cgroup_new(&place, "t1", &cg, &err), 0);
	assert_int_equal(kn_cgroup_create(cg, &lim, &err), 0);
	{
		/* A memory limit alone: no cgroup in the other hierarchies. */
		char *cpu = kn_asprintf("%s/cpu%s", root, parent);
		assert_int_equal(access(cpu, F_OK), -1);
		free(cpu);
	}
	assert_int_equal(kn_cgroup_oom_kills(cg), 0);
	expect_oom_kill(cg);
	assert_int_equal(kn_cgroup_destroy(cg, &err), 0);
	kn_cgroup_free(cg);
	remove_parent(root, KN_CGROUP_V1, parent);
	free(parent);
}

/*
 * Where /sys/fs/cgroup is itself a cgroup2 with its controllers (current
 * Ubuntu and Azure HPC images; not this project's test machines): the
 * limits land in memory.max, cpu.max and pids.max, the OOM killer is
 * counted in memory.events, and devices are fenced as on the hybrid.
 */
static void test_real_v2_limits(void **state)
{
	const char *root = KN_CGROUP_ROOT;
	char *parent = real_parent(root, KN_CGROUP_V2, "v2-");
	struct kn_cgroup_place place = {root, parent, "/proc/self/cgroup"};
	struct kn_cgroup_limits lim = {.memory_bytes = 16LL << 20,
				       .cpu_milli = 500, .pids_max = 16};
	struct kn_cgroup *cg = NULL;
	struct kn_error err;
	(void)state;

	assert_int_equal(kn_cgroup_new(&place, "t1", &cg, &err), 0);
	if (kn_cgroup_create(cg, &lim, &err) < 0)
		fail_msg("%s", err.message);
	assert_file(kn_cgroup_path(cg), "memory.max", "16777216\n");
	assert_file(kn_cgroup_path(cg), "cpu.max", "50000 100000\n");
	assert_file(kn_cgroup_path(cg), "pids.max", "16\n");
	expect_oom_kill(cg);
	assert_int_equal(kn_cgroup_destroy(cg, &err), 0);
	kn_cgroup_free(cg);
	remove_parent(root, KN_CGROUP_V2, parent);
	free(parent);
	/* The device program on the unified root itself. */
	memset(&lim, 0, sizeof(lim));
	device_case(root, KN_CGROUP_V2, &lim);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test_setup_teardown(test_detect, tree_empty,
					tree_remove),
	cmocka_unit_test_setup_teardown(test_v1_files, tree_v1,
					tree_remove),
	cmocka_unit_test_setup_teardown(test_sweep_fake, tree_v1,
					tree_remove),
	cmocka_unit_test_setup_teardown(test_v1_unlimited_not_joined,
					tree_v1, tree_remove),
	cmocka_unit_test_setup_teardown(test_v1_missing_controller, tree_v1,
					tree_remove),
	cmocka_unit_test_setup_teardown(test_bad_names, tree_v1,
					tree_remove),
	cmocka_unit_test_setup_teardown(test_v2_files, tree_empty,
					tree_remove),
	cmocka_unit_test_setup_teardown(test_v2_relative_parent, tree_empty,
					tree_remove),
	cmocka_unit_test(test_real_v1),
	cmocka_unit_test(test_real_v2_devices),
	cmocka_unit_test(test_real_v1_sweep),
	cmocka_unit_test(test_real_v1_oom),
	cmocka_unit_test(test_real_v2_limits))
