/*
 * Local tasks' resource limits: at start the server probes once whether
 * it can make cgroups under --cgroup-parent (a probe cgroup made and
 * removed), and from then on each local task's launch carries its
 * memory, CPUs and the pid cap for its shim to enforce. A server that
 * cannot enforce them refuses to start unless --no-limits says to run
 * tasks without; either way GET /v1/nodes says what is enforced.
 *
 * At start it also removes the empty task cgroups that killed shims left
 * behind: each costs the kernel memory and slows every later cgroup
 * operation under the same parent.
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

/* Older than any task start between making its cgroup and entering it. */
#define SWEEP_MIN_AGE_S 60

int limits_start(struct server *s, struct kn_error *err)
{
	struct kn_cgroup_place place = {s->cfg.cgroup_root,
					s->cfg.cgroup_parent,
					"/proc/self/cgroup"};
	struct kn_error why;
	int rc;

	memset(&s->limits, 0, sizeof(s->limits));
	if (s->exec->ops->limits) {
		snprintf(s->limits.why, sizeof(s->limits.why), "%s",
			 s->exec->ops->limits);
		return 0;
	}
	rc = kn_cgroup_probe(&place, &s->limits, &why);
	if (rc == 0) {
		size_t swept = 0;
		if (kn_cgroup_sweep(&place, SWEEP_MIN_AGE_S, &swept, &why) < 0)
			kn_log(KN_LOG_WARN, "leftover task cgroups stay: %s",
			       why.message);
		else if (swept)
			kn_log(KN_LOG_INFO, "removed %zu empty task cgroups "
			       "left by killed shims", swept);
		return 0;
	}
	if (s->cfg.no_limits) {
		kn_log(KN_LOG_WARN, "tasks run without resource limits "
		       "(--no-limits): %s", why.message);
		memset(&s->limits, 0, sizeof(s->limits));
		snprintf(s->limits.why, sizeof(s->limits.why),
			 "--no-limits: %.200s", why.message);
		return 0;
	}
	return kn_errorf(err, KN_EUNAVAIL, "cgroup-parent",
			 "cannot enforce task limits: %s. Run as root where "
			 "cgroups are mounted, give --cgroup-parent a cgroup "
			 "delegated to this user, or pass --no-limits to run "
			 "tasks without memory, CPU, process and device limits",
			 why.message);
}

const struct kn_task_limits *limits_for(const struct server *s,
					const struct kn_job_spec *spec,
					struct kn_task_limits *out)
{
	if (s->limits.version == KN_CGROUP_NONE)
		return NULL;
	memset(out, 0, sizeof(*out));
	out->cgroup_root = s->cfg.cgroup_root;
	out->cgroup_parent = s->cfg.cgroup_parent;
	/* The memory a task was counted at is its limit; a CPU default is
	   counted but not a quota, which at a fraction of a CPU would
	   starve a task that named none on an otherwise idle node. */
	out->memory_bytes = spec->resources.memory_bytes
				    ? spec->resources.memory_bytes
				    : s->defaults.memory_bytes;
	out->cpu_milli = spec->resources.cpu_milli;
	out->pids_max = spec->resources.pids ? spec->resources.pids
					     : s->cfg.pids_max;
	return out;
}

json_t *limits_json(const struct server *s)
{
	const struct kn_cgroup_support *l = &s->limits;
	json_t *o = json_pack("{s:b, s:s, s:b, s:b, s:I, s:b}", "enforced",
			      l->version != KN_CGROUP_NONE, "cgroup",
			      kn_cgroup_version_name(l->version), "memory",
			      l->memory, "cpu", l->cpu, "pids_max",
			      (json_int_t)(l->pids ? s->cfg.pids_max : 0),
			      "devices", l->devices);

	if (l->version == KN_CGROUP_NONE)
		json_object_set_new(o, "why", json_string(l->why));
	return o;
}
