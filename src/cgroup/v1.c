/*
 * cgroup v1: one hierarchy per controller (ROOT/memory, ROOT/cpu,
 * ROOT/pids, ROOT/devices), the task's cgroup made in each that is
 * mounted. Swap is capped with the memory (memory.memsw, where the kernel
 * accounts swap) so a task cannot page its way past its limit; devices
 * are denied as a whole and the allowed nodes listed one by one.
 */
#include "internal.h"

#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int v1_locate(struct kn_cgroup *cg, const struct kn_cgroup_place *place,
		     const char *self, const char *name, struct kn_error *err)
{
	for (int i = 0; i < CG_N; i++) {
		char *mount = kn_asprintf("%s/%s", place->root,
					  cg_controller_names[i]);
		char *own = cg_self_path(self, cg_controller_names[i]);
		char *rel = cg_relative(own ? own : "/", place->parent, name);

		if (cg_exists(mount, "cgroup.procs"))
			cg->dirs[i] = kn_asprintf("%s%s", mount, rel);
		KN_FREE_ALL(rel, own, mount);
	}
	return 0;
}

static int need(const struct kn_cgroup *cg, enum cg_controller c,
		struct kn_error *err)
{
	if (cg->dirs[c])
		return 0;
	return kn_errorf(err, KN_EUNAVAIL, NULL, "the %s cgroup controller is "
			 "not mounted at %s/%s", cg_controller_names[c],
			 cg->root, cg_controller_names[c]);
}

static int v1_devices(const char *dir, char *const *devices,
		      struct kn_error *err)
{
	struct cg_dev_rule rules[CG_MAX_DEV_RULES];
	size_t n = cg_device_rules(devices, rules, CG_MAX_DEV_RULES);
	char text[CG_MAX_DEV_RULES][32];
	const char *each[CG_MAX_DEV_RULES];
	int rc = cg_set(dir, "devices.deny", "a", err);

	for (size_t i = 0; i < n; i++) {
		if (rules[i].minor < 0)
			snprintf(text[i], sizeof(text[i]), "%c %u:* rw",
				 rules[i].type, rules[i].major);
		else
			snprintf(text[i], sizeof(text[i]), "%c %u:%d rw",
				 rules[i].type, rules[i].major, rules[i].minor);
		each[i] = text[i];
	}
	/* The kernel parses one rule per write, not per open. */
	if (rc == 0)
		rc = cg_set_each(dir, "devices.allow", each, n, err);
	return rc;
}

/* Whether lim asks anything of controller c. */
static bool limited(const struct kn_cgroup_limits *lim, enum cg_controller c)
{
	switch (c) {
	case CG_MEMORY:
		return lim->memory_bytes > 0;
	case CG_CPU:
		return lim->cpu_milli > 0;
	case CG_PIDS:
		return lim->pids_max > 0;
	default:
		return lim->devices != NULL;
	}
}

static int v1_create(struct kn_cgroup *cg, const struct kn_cgroup_limits *lim,
		     struct kn_error *err)
{
	char num[32];
	int rc = 0;

	for (int i = 0; i < CG_N; i++)
		if (limited(lim, (enum cg_controller)i) &&
		    (rc = need(cg, (enum cg_controller)i, err)) < 0)
			return rc;
	for (int i = 0; i < CG_N; i++) {
		char *parent;
		/*
		 * A hierarchy the task has no limit in is not joined: a task
		 * without a CPU quota stays in the server's cpu cgroup, as
		 * the kernel shares CPU time anyway, and one mkdir, one
		 * migration and one rmdir fewer (each a kernel object made
		 * and torn down) go with it.
		 */
		if (cg->dirs[i] && !limited(lim, (enum cg_controller)i)) {
			free(cg->dirs[i]);
			cg->dirs[i] = NULL;
		}
		/* The parent is there after the first task: one mkdir. */
		if (!cg->dirs[i] || mkdir(cg->dirs[i], 0755) == 0 ||
		    errno == EEXIST)
			continue;
		parent = kn_xstrdup(cg->dirs[i]);
		rc = kn_mkdir_p(dirname(parent), 0755);
		free(parent);
		if (rc < 0)
			return kn_errorf(err, KN_EIO, NULL, "cannot create the "
					 "parent of cgroup %s: %s", cg->dirs[i],
					 strerror(-rc));
		if ((rc = cg_mkdir(cg->dirs[i], err)) < 0)
			return rc;
	}
	if (lim->memory_bytes > 0) {
		snprintf(num, sizeof(num), "%lld", (long long)lim->memory_bytes);
		rc = cg_set(cg->dirs[CG_MEMORY], "memory.limit_in_bytes", num,
			    err);
		if (rc == 0 &&
		    cg_exists(cg->dirs[CG_MEMORY], "memory.memsw.limit_in_bytes"))
			rc = cg_set(cg->dirs[CG_MEMORY],
				    "memory.memsw.limit_in_bytes", num, err);
		if (rc < 0)
			return rc;
	}
	if (lim->cpu_milli > 0) {
		snprintf(num, sizeof(num), "%d", CG_CPU_PERIOD_US);
		rc = cg_set(cg->dirs[CG_CPU], "cpu.cfs_period_us", num, err);
		snprintf(num, sizeof(num), "%lld",
			 (long long)cg_cpu_quota_us(lim->cpu_milli));
		if (rc == 0)
			rc = cg_set(cg->dirs[CG_CPU], "cpu.cfs_quota_us", num, err);
		if (rc < 0)
			return rc;
	}
	if (lim->pids_max > 0) {
		snprintf(num, sizeof(num), "%lld", (long long)lim->pids_max);
		if ((rc = cg_set(cg->dirs[CG_PIDS], "pids.max", num, err)) < 0)
			return rc;
	}
	if (lim->devices)
		rc = v1_devices(cg->dirs[CG_DEVICES], lim->devices, err);
	return rc;
}

const struct cg_ops cg_v1_ops = {
	.locate = v1_locate,
	.create = v1_create,
	.oom_file = "memory.oom_control",
	.oom_dir = CG_MEMORY,
	.kill_file = NULL,
};
