/*
 * cgroup: one task's control group, which enforces what its spec asked for:
 * a memory limit (no swap beyond it), a CPU quota, a cap on its processes
 * and the device nodes it may open. Two backends behind one ops table:
 * cgroup v1 (one hierarchy per controller, /sys/fs/cgroup/memory, ...) and
 * cgroup v2 (one unified hierarchy, controllers enabled through each
 * ancestor's cgroup.subtree_control, devices through a BPF program).
 *
 * Where: ROOT/[CONTROLLER/]BASE/PARENT/NAME, where BASE is the cgroup the
 * calling process is in (read from /proc/self/cgroup) when PARENT is
 * relative, or nothing when PARENT starts with '/'. Nesting under our own
 * cgroup keeps tasks inside whatever limits the operator (or systemd's
 * delegation) gave the server.
 */
#ifndef KILN_CGROUP_H
#define KILN_CGROUP_H

#include <stdbool.h>
#include <stdint.h>

#include "base/base.h"

#define KN_CGROUP_ROOT "/sys/fs/cgroup"
/* A fork bomb stops here; a large data loader with many workers does not. */
#define KN_CGROUP_PIDS_DEFAULT 4096

enum kn_cgroup_version { KN_CGROUP_NONE = 0, KN_CGROUP_V1, KN_CGROUP_V2 };

struct kn_cgroup_place {
	const char *root;   /* where the hierarchies are mounted:
			       KN_CGROUP_ROOT, or a test's tree */
	const char *parent; /* "kiln", or "/kiln.slice/tasks" */
	const char *self;   /* /proc/self/cgroup, or a test's copy */
};

struct kn_cgroup_limits {
	int64_t memory_bytes;  /* 0 = no limit */
	int cpu_milli;         /* 0 = no quota */
	int64_t pids_max;      /* 0 = no limit */
	/* Device nodes allowed besides the standard ones (null, zero, full,
	   random, urandom, tty, ptmx, pts), NULL-terminated; every other
	   device is denied. Nodes missing here are skipped. */
	char *const *devices;
};

/* What a backend can enforce under a place (kn_cgroup_probe). */
struct kn_cgroup_support {
	enum kn_cgroup_version version;
	bool memory, cpu, pids, devices;
	char why[256]; /* why not, when nothing is enforced */
};

struct kn_cgroup;

/* "v1", "v2" or "none". */
const char *kn_cgroup_version_name(enum kn_cgroup_version v);

/*
 * Which version is mounted at root: v2 when root itself is a cgroup2
 * (ROOT/cgroup.controllers), v1 when ROOT/memory or ROOT/pids is a
 * hierarchy (a hybrid's empty ROOT/unified is ignored), else NONE.
 */
enum kn_cgroup_version kn_cgroup_detect(const char *root);

/*
 * The cgroup NAME (one path component) under place; nothing is created
 * yet. Errors: no cgroup hierarchy mounted at place->root (KN_EUNAVAIL),
 * a name with '/' or a name or parent with ".." (KN_EINVAL), place->self
 * unreadable (KN_EIO). *out is written only on success.
 */
int kn_cgroup_new(const struct kn_cgroup_place *place, const char *name,
		  struct kn_cgroup **out, struct kn_error *err);
/* Forgets cg (its directories stay); NULL is fine. */
void kn_cgroup_free(struct kn_cgroup *cg);

/*
 * Create the cgroup (an existing one is reused) and write lim into it.
 * A controller that is not mounted or enabled is an error naming it.
 */
int kn_cgroup_create(struct kn_cgroup *cg, const struct kn_cgroup_limits *lim,
		     struct kn_error *err);
/* Move process pid (all its threads) into the cgroup. */
int kn_cgroup_enter(struct kn_cgroup *cg, int pid, struct kn_error *err);
/*
 * How many times the kernel's OOM killer killed a process of the cgroup
 * (v1 memory.oom_control, v2 memory.events "oom_kill"); 0 when unknown.
 */
int64_t kn_cgroup_oom_kills(struct kn_cgroup *cg);
/*
 * Kill every process left in the cgroup and remove its directories,
 * waiting up to ~2 s for the dying to go. A cgroup already gone is fine.
 */
int kn_cgroup_destroy(struct kn_cgroup *cg, struct kn_error *err);
/*
 * Remove the task cgroups ("task-*") left empty under place's parent by
 * shims that were killed before they could remove their own (SIGKILL,
 * the OOM killer, a machine's power). Only cgroups at least min_age_s
 * old are touched, so a task being started by another server under the
 * same parent is never raced; one still holding a process is left to
 * the kernel, which refuses to remove it. *removed counts the cgroups
 * removed (each once, however many hierarchies it was in).
 */
int kn_cgroup_sweep(const struct kn_cgroup_place *place, int64_t min_age_s,
		    size_t *removed, struct kn_error *err);
/* The cgroup's directory in its first hierarchy (v1: memory's). */
const char *kn_cgroup_path(const struct kn_cgroup *cg);

/*
 * What limits a task under place would get: creates and removes a probe
 * cgroup. Always fills *out; returns 0 when the limits can be enforced,
 * else a negative errno with out->why and err saying why (not root, no
 * writable delegated cgroup, nothing mounted, a controller missing).
 */
int kn_cgroup_probe(const struct kn_cgroup_place *place,
		    struct kn_cgroup_support *out, struct kn_error *err);

#endif
