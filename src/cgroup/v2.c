/*
 * cgroup v2: one unified hierarchy. A controller works in a cgroup only
 * when every ancestor lists it in cgroup.subtree_control, so creating the
 * task's cgroup enables what its limits need from the hierarchy's root
 * down to the parent. The kernel forbids that in a cgroup that holds
 * processes (other than the root): the parent must be a cgroup of its own
 * (a relative parent under a server that is not in the root cgroup fails
 * with a message saying so).
 *
 * Devices have no interface file in v2: a BPF program of type
 * CGROUP_DEVICE, attached to the cgroup, answers each open and mknod
 * (bpf.c).
 */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int v2_locate(struct kn_cgroup *cg, const struct kn_cgroup_place *place,
		     const char *self, const char *name, struct kn_error *err)
{
	char *own = cg_self_path(self, "");
	char *rel = cg_relative(own ? own : "/", place->parent, name);

	cg->dirs[0] = kn_asprintf("%s%s", place->root, rel);
	KN_FREE_ALL(rel, own);
	return 0;
}

/* Whether word is one of text's space-separated words. */
static bool listed(const char *text, const char *word)
{
	size_t wlen = strlen(word);

	for (const char *p = text; p && *p;) {
		size_t n = strcspn(p, " \n");
		if (n == wlen && !strncmp(p, word, n))
			return true;
		p += n;
		p += strspn(p, " \n");
	}
	return false;
}

static char *read_list(const char *dir, const char *file)
{
	char *path = kn_asprintf("%s/%s", dir, file), *text = NULL;

	if (kn_read_file(path, 4096, &text, NULL) < 0)
		text = kn_xstrdup("");
	free(path);
	return text;
}

/* Let dir's children use controller; dir already has it. */
static int enable(const char *dir, const char *controller, struct kn_error *err)
{
	char *have = read_list(dir, "cgroup.controllers");
	char *on = read_list(dir, "cgroup.subtree_control");
	char *plus = kn_asprintf("+%s", controller);
	int rc = 0;

	if (!listed(have, controller))
		rc = kn_errorf(err, KN_EUNAVAIL, NULL, "the %s cgroup controller "
			       "is not available in %s (enable it in its "
			       "parent's cgroup.subtree_control)", controller,
			       dir);
	else if (!listed(on, controller) &&
		 (rc = cg_write(dir, "cgroup.subtree_control", plus)) < 0)
		rc = kn_errorf(err, KN_EIO, NULL, "cannot enable %s in "
			       "%s/cgroup.subtree_control: %s%s", controller, dir,
			       strerror(-rc),
			       rc == -EBUSY ? " (it holds processes: give the "
					      "tasks' parent a cgroup of its "
					      "own, e.g. an absolute "
					      "--cgroup-parent)" : "");
	KN_FREE_ALL(plus, on, have);
	return rc;
}

/* Each cgroup from the root down to the task's parent, made and opened. */
static int open_path(const struct kn_cgroup *cg,
		     const struct kn_cgroup_limits *lim, struct kn_error *err)
{
	const char *wanted[3];
	size_t n = 0, rlen = strlen(cg->root);
	char *dir = kn_xstrdup(cg->dirs[0]), *slash = dir + rlen;
	int rc = 0;

	if (lim->memory_bytes > 0)
		wanted[n++] = "memory";
	if (lim->cpu_milli > 0)
		wanted[n++] = "cpu";
	if (lim->pids_max > 0)
		wanted[n++] = "pids";
	/* dir = the root, then each ancestor in turn, cut at a '/'. */
	while (rc == 0 && slash) {
		char keep = *slash;

		*slash = '\0';
		if (slash > dir + rlen)
			rc = cg_mkdir(dir, err);
		for (size_t i = 0; i < n && rc == 0; i++)
			rc = enable(dir, wanted[i], err);
		*slash = keep;
		slash = strchr(slash + 1, '/');
	}
	free(dir);
	return rc;
}

static int v2_create(struct kn_cgroup *cg, const struct kn_cgroup_limits *lim,
		     struct kn_error *err)
{
	const char *dir = cg->dirs[0];
	char num[64];
	int rc = open_path(cg, lim, err);

	if (rc == 0)
		rc = cg_mkdir(dir, err);
	if (rc == 0 && lim->memory_bytes > 0) {
		snprintf(num, sizeof(num), "%lld", (long long)lim->memory_bytes);
		rc = cg_set(dir, "memory.max", num, err);
		if (rc == 0 && cg_exists(dir, "memory.swap.max"))
			rc = cg_set(dir, "memory.swap.max", "0", err);
	}
	if (rc == 0 && lim->cpu_milli > 0) {
		snprintf(num, sizeof(num), "%lld %d",
			 (long long)cg_cpu_quota_us(lim->cpu_milli),
			 CG_CPU_PERIOD_US);
		rc = cg_set(dir, "cpu.max", num, err);
	}
	if (rc == 0 && lim->pids_max > 0) {
		snprintf(num, sizeof(num), "%lld", (long long)lim->pids_max);
		rc = cg_set(dir, "pids.max", num, err);
	}
	if (rc == 0 && lim->devices) {
		struct cg_dev_rule rules[CG_MAX_DEV_RULES];
		size_t n = cg_device_rules(lim->devices, rules,
					   CG_MAX_DEV_RULES);
		rc = cg_bpf_devices(dir, rules, n, err);
	}
	return rc;
}

const struct cg_ops cg_v2_ops = {
	.locate = v2_locate,
	.create = v2_create,
	.oom_file = "memory.events",
	.oom_dir = 0,
	.kill_file = "cgroup.kill",
};
