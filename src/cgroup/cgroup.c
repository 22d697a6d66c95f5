/*
 * What both backends share: finding our own cgroup, writing interface
 * files, device rules, and the end of a task's cgroup (kill what is left,
 * remove the directories). A backend only knows its own file names.
 *
 * Files are opened O_APPEND and never created: on cgroupfs a missing file
 * means a missing controller, which must be an error, not a new file; a
 * test's fake tree holds the files the kernel would have made, and keeps
 * every write in order (devices.allow gets several).
 */
#include "internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

/* /proc/self/cgroup is a few lines per hierarchy. */
#define SELF_MAX 65536
/* A cgroup.procs of pid_max (4194304) pids of 8 bytes each. */
#define PROCS_MAX (32 * 1024 * 1024)
/* Killing what is left and removing the directories: 100 rounds of 20 ms. */
#define DESTROY_ROUNDS 100
#define DESTROY_PAUSE_NS (20 * 1000 * 1000)

const char *const cg_controller_names[CG_N] = {"memory", "cpu", "pids",
					      "devices"};

const char *kn_cgroup_version_name(enum kn_cgroup_version v)
{
	return v == KN_CGROUP_V1 ? "v1" : v == KN_CGROUP_V2 ? "v2" : "none";
}

bool cg_exists(const char *dir, const char *file)
{
	char *path = kn_asprintf("%s/%s", dir, file);
	bool yes = access(path, F_OK) == 0;

	free(path);
	return yes;
}

enum kn_cgroup_version kn_cgroup_detect(const char *root)
{
	if (cg_exists(root, "cgroup.controllers"))
		return KN_CGROUP_V2;
	if (cg_exists(root, "memory/cgroup.procs") ||
	    cg_exists(root, "pids/cgroup.procs"))
		return KN_CGROUP_V1;
	return KN_CGROUP_NONE;
}

/* One entry, one write: cgroupfs takes a write whole or refuses it. */
static int write_entry(int fd, const char *text)
{
	size_t len = strlen(text);
	ssize_t n = write(fd, text, len);

	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EIO;
}

static int open_file(const char *dir, const char *file)
{
	char *path = kn_asprintf("%s/%s", dir, file);
	int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);

	free(path);
	return fd < 0 ? -errno : fd;
}

int cg_write(const char *dir, const char *file, const char *text)
{
	int fd = open_file(dir, file), rc;

	if (fd < 0)
		return fd;
	rc = write_entry(fd, text);
	close(fd);
	return rc;
}

int cg_set_each(const char *dir, const char *file, const char *const *texts,
		size_t n, struct kn_error *err)
{
	int fd = open_file(dir, file), rc = fd < 0 ? fd : 0;
	size_t i = 0;

	for (; rc == 0 && i < n; i++)
		rc = write_entry(fd, texts[i]);
	if (fd >= 0)
		close(fd);
	if (rc < 0)
		return kn_errorf(err, KN_EIO, NULL, "cannot write \"%s\" to "
				 "%s/%s: %s", n ? texts[i ? i - 1 : 0] : "",
				 dir, file, strerror(-rc));
	return 0;
}

int cg_set(const char *dir, const char *file, const char *text,
	   struct kn_error *err)
{
	int rc = cg_write(dir, file, text);

	if (rc < 0)
		return kn_errorf(err, KN_EIO, NULL, "cannot write \"%s\" to "
				 "%s/%s: %s", text, dir, file, strerror(-rc));
	return 0;
}

int cg_mkdir(const char *dir, struct kn_error *err)
{
	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return kn_errorf(err, KN_EIO, NULL, "cannot create cgroup %s: %s",
				 dir, strerror(errno));
	return 0;
}

char *cg_self_path(const char *self, const char *controller)
{
	const char *line = self;

	while (line && *line) {
		const char *end = strchr(line, '\n');
		const char *c1 = strchr(line, ':'), *c2;
		size_t len = end ? (size_t)(end - line) : strlen(line);

		if (c1 && c1 < line + len && (c2 = strchr(c1 + 1, ':')) &&
		    c2 < line + len) {
			/* "4:memory:/a" or "2:cpu,cpuacct:/b" or "0::/c" */
			const char *list = c1 + 1;
			size_t llen = (size_t)(c2 - list), clen = strlen(controller);
			bool match = clen == 0 ? llen == 0 : false;

			for (const char *p = list; clen && p < c2;) {
				size_t n = strcspn(p, ",:");
				if (n == clen && !strncmp(p, controller, n))
					match = true;
				p += n + 1;
			}
			if (match)
				return kn_asprintf("%.*s",
						   (int)(line + len - c2 - 1),
						   c2 + 1);
		}
		line = end ? end + 1 : NULL;
	}
	return NULL;
}

char *cg_relative(const char *self_path, const char *parent, const char *name)
{
	const char *base = parent[0] == '/' ? "" : self_path;
	size_t blen = strlen(base);

	/* No doubled slashes: "/" + "kiln", "/a/" + "kiln". */
	while (blen > 0 && base[blen - 1] == '/')
		blen--;
	while (*parent == '/')
		parent++;
	return kn_asprintf("%.*s/%s/%s", (int)blen, base, parent, name);
}

static bool bad_component(const char *s)
{
	return strstr(s, "..") != NULL;
}

int kn_cgroup_new(const struct kn_cgroup_place *place, const char *name,
		  struct kn_cgroup **out, struct kn_error *err)
{
	enum kn_cgroup_version v = kn_cgroup_detect(place->root);
	struct kn_cgroup *cg;
	char *self = NULL;
	int rc;

	if (v == KN_CGROUP_NONE)
		return kn_errorf(err, KN_EUNAVAIL, NULL, "no cgroup hierarchy is "
				 "mounted at %s", place->root);
	if (!name[0] || strchr(name, '/') || bad_component(name) ||
	    bad_component(place->parent))
		return kn_errorf(err, KN_EINVAL, NULL, "cgroup: \"%s/%s\" is not "
				 "a cgroup path below the parent",
				 place->parent, name);
	rc = kn_read_file(place->self, SELF_MAX, &self, NULL);
	if (rc < 0)
		return kn_errorf(err, KN_EIO, NULL, "cannot read %s: %s",
				 place->self, strerror(-rc));
	cg = kn_xcalloc(1, sizeof(*cg));
	cg->ops = v == KN_CGROUP_V2 ? &cg_v2_ops : &cg_v1_ops;
	cg->root = kn_xstrdup(place->root);
	rc = cg->ops->locate(cg, place, self, name, err);
	free(self);
	if (rc < 0) {
		kn_cgroup_free(cg);
		return rc;
	}
	*out = cg;
	return 0;
}

void kn_cgroup_free(struct kn_cgroup *cg)
{
	if (!cg)
		return;
	for (int i = 0; i < CG_N; i++)
		free(cg->dirs[i]);
	KN_FREE_ALL(cg->root, cg);
}

const char *kn_cgroup_path(const struct kn_cgroup *cg)
{
	for (int i = 0; i < CG_N; i++)
		if (cg->dirs[i])
			return cg->dirs[i];
	return "";
}

int kn_cgroup_create(struct kn_cgroup *cg, const struct kn_cgroup_limits *lim,
		     struct kn_error *err)
{
	return cg->ops->create(cg, lim, err);
}

/* Write pid into each of dirs' cgroup.procs. */
static int move_to(char *const *dirs, int pid, struct kn_error *err)
{
	char text[32];

	snprintf(text, sizeof(text), "%d\n", pid);
	for (int i = 0; i < CG_N; i++) {
		int rc;
		if (!dirs[i])
			continue;
		rc = cg_set(dirs[i], "cgroup.procs", text, err);
		if (rc < 0)
			return rc;
	}
	return 0;
}

int kn_cgroup_enter(struct kn_cgroup *cg, int pid, struct kn_error *err)
{
	return move_to(cg->dirs, pid, err);
}

/* The value of "key N" among a flat-keyed file's lines; 0 if absent. */
static int64_t keyed_value(const char *text, const char *key)
{
	size_t klen = strlen(key);

	for (const char *line = text; line && *line;) {
		if (!strncmp(line, key, klen) && line[klen] == ' ')
			return strtoll(line + klen + 1, NULL, 10);
		line = strchr(line, '\n');
		if (line)
			line++;
	}
	return 0;
}

int64_t kn_cgroup_oom_kills(struct kn_cgroup *cg)
{
	const char *dir = cg->dirs[cg->ops->oom_dir];
	char *path, *text = NULL;
	int64_t n = 0;

	if (!dir)
		return 0;
	path = kn_asprintf("%s/%s", dir, cg->ops->oom_file);
	if (kn_read_file(path, SELF_MAX, &text, NULL) == 0)
		n = keyed_value(text, "oom_kill");
	KN_FREE_ALL(text, path);
	return n;
}

/* SIGKILL to each pid in DIR/cgroup.procs. */
static void kill_listed(const char *dir)
{
	char *path = kn_asprintf("%s/cgroup.procs", dir), *text = NULL;

	if (kn_read_file(path, PROCS_MAX, &text, NULL) == 0) {
		for (char *p = text; *p;) {
			char *end;
			long pid = strtol(p, &end, 10);
			if (end == p)
				break;
			/* Never ourselves, should the caller have moved itself in. */
			if (pid > 0 && pid != getpid())
				kill((pid_t)pid, SIGKILL);
			p = end;
			while (*p == '\n')
				p++;
		}
	}
	KN_FREE_ALL(text, path);
}

int kn_cgroup_destroy(struct kn_cgroup *cg, struct kn_error *err)
{
	const struct timespec pause = {0, DESTROY_PAUSE_NS};
	const char *first = NULL;
	int left = 0;

	for (int i = 0; i < CG_N && !first; i++)
		if (cg->dirs[i] && access(cg->dirs[i], F_OK) == 0)
			first = cg->dirs[i];
	if (!first)
		return 0;
	if (cg->ops->kill_file && cg_exists(first, cg->ops->kill_file))
		cg_write(first, cg->ops->kill_file, "1");
	for (int round = 0; round < DESTROY_ROUNDS; round++) {
		left = 0;
		/* A process forking while we read is caught the next round. */
		kill_listed(first);
		for (int i = 0; i < CG_N; i++)
			if (cg->dirs[i] && rmdir(cg->dirs[i]) < 0 &&
			    errno != ENOENT)
				left++;
		if (!left)
			return 0;
		nanosleep(&pause, NULL);
	}
	return kn_errorf(err, KN_EIO, NULL, "cannot remove cgroup %s: %s",
			 first, "processes are still in it");
}

/* Whether PARENT/NAME is a leftover task cgroup old enough to remove. */
static bool stale_task(const char *parent, const char *name, time_t before)
{
	char *path;
	struct stat st;
	bool yes;

	if (strncmp(name, "task-", 5) != 0)
		return false;
	path = kn_asprintf("%s/%s", parent, name);
	yes = stat(path, &st) == 0 && S_ISDIR(st.st_mode) &&
	      st.st_mtime <= before;
	free(path);
	return yes;
}

/* rmdir NAME in every hierarchy's parent; true if any was removed. */
static bool remove_everywhere(char *const *parents, const char *name)
{
	bool any = false;

	for (int i = 0; i < CG_N; i++) {
		char *path;
		if (!parents[i])
			continue;
		path = kn_asprintf("%s/%s", parents[i], name);
		if (rmdir(path) == 0)
			any = true;
		free(path);
	}
	return any;
}

int kn_cgroup_sweep(const struct kn_cgroup_place *place, int64_t min_age_s,
		    size_t *removed, struct kn_error *err)
{
	struct kn_cgroup *cg = NULL;
	char *parents[CG_N] = {0};
	time_t before = time(NULL) - (time_t)min_age_s;
	int rc;

	*removed = 0;
	/* A name's dirs, less the name, are the parent in each hierarchy. */
	rc = kn_cgroup_new(place, "sweep", &cg, err);
	if (rc < 0)
		return rc;
	for (int i = 0; i < CG_N; i++)
		if (cg->dirs[i])
			parents[i] = kn_asprintf("%.*s", (int)(strlen(cg->dirs[i]) -
							       strlen("/sweep")),
						 cg->dirs[i]);
	/* v1 keeps one tree per controller and a leak may be in any. */
	for (int i = 0; i < CG_N; i++) {
		DIR *d = parents[i] ? opendir(parents[i]) : NULL;
		struct dirent *e;
		if (!d)
			continue;
		while ((e = readdir(d)))
			if (stale_task(parents[i], e->d_name, before) &&
			    remove_everywhere(parents, e->d_name))
				(*removed)++;
		closedir(d);
	}
	for (int i = 0; i < CG_N; i++)
		free(parents[i]);
	kn_cgroup_free(cg);
	return 0;
}

int64_t cg_cpu_quota_us(int milli)
{
	int64_t q = (int64_t)milli * CG_CPU_PERIOD_US / 1000;

	return q < 1000 ? 1000 : q;
}

/* The standard nodes every program may need, by major:minor. */
static const struct cg_dev_rule standard_rules[] = {
	{'c', 1, 3},   /* null */
	{'c', 1, 5},   /* zero */
	{'c', 1, 7},   /* full */
	{'c', 1, 8},   /* random */
	{'c', 1, 9},   /* urandom */
	{'c', 5, 0},   /* tty */
	{'c', 5, 2},   /* ptmx */
	{'c', 136, -1}, /* pts */
};

static size_t add_node(const char *path, struct cg_dev_rule *rules, size_t n,
		       size_t max)
{
	struct stat st;

	if (n >= max || stat(path, &st) < 0 ||
	    !(S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)))
		return n;
	rules[n].type = S_ISCHR(st.st_mode) ? 'c' : 'b';
	rules[n].major = major(st.st_rdev);
	rules[n].minor = (int)minor(st.st_rdev);
	return n + 1;
}

size_t cg_device_rules(char *const *devices, struct cg_dev_rule *rules,
		       size_t max)
{
	size_t n = 0;
	DIR *d;
	struct dirent *e;

	for (size_t i = 0; i < sizeof(standard_rules) / sizeof(standard_rules[0]) &&
			   n < max; i++)
		rules[n++] = standard_rules[i];
	/* RDMA (uverbs, rdma_cm): multi-node NCCL over InfiniBand needs it. */
	if ((d = opendir("/dev/infiniband"))) {
		while ((e = readdir(d))) {
			char *path;
			if (e->d_name[0] == '.')
				continue;
			path = kn_asprintf("/dev/infiniband/%s", e->d_name);
			n = add_node(path, rules, n, max);
			free(path);
		}
		closedir(d);
	}
	for (; devices && *devices; devices++)
		n = add_node(*devices, rules, n, max);
	return n;
}

/* The name of a probe cgroup, unique to this process. */
static char *probe_name(void)
{
	return kn_asprintf("probe-%d", (int)getpid());
}

int kn_cgroup_probe(const struct kn_cgroup_place *place,
		    struct kn_cgroup_support *out, struct kn_error *err)
{
	char *const no_devices[] = {NULL};
	struct kn_cgroup_limits lim = {
		.memory_bytes = 1LL << 40, .cpu_milli = 1000,
		.pids_max = KN_CGROUP_PIDS_DEFAULT, .devices = no_devices};
	struct kn_cgroup *cg = NULL;
	char *name = probe_name();
	struct kn_error ignored;
	int rc;

	memset(out, 0, sizeof(*out));
	out->version = kn_cgroup_detect(place->root);
	rc = kn_cgroup_new(place, name, &cg, err);
	if (rc == 0)
		rc = kn_cgroup_create(cg, &lim, err);
	if (rc == 0) {
		bool v2 = out->version == KN_CGROUP_V2;
		/* v1: what is mounted was written; v2: create enabled all. */
		out->memory = v2 || cg->dirs[CG_MEMORY];
		out->cpu = v2 || cg->dirs[CG_CPU];
		out->pids = v2 || cg->dirs[CG_PIDS];
		out->devices = v2 || cg->dirs[CG_DEVICES];
	} else {
		kn_strlcpy(out->why, err->message, sizeof(out->why));
	}
	if (cg)
		kn_cgroup_destroy(cg, &ignored);
	kn_cgroup_free(cg);
	free(name);
	return rc;
}
