/* Shared between the cgroup backends; not a public header. */
#ifndef KILN_CGROUP_INTERNAL_H
#define KILN_CGROUP_INTERNAL_H

#include <stddef.h>

#include "cgroup.h"

/* v1 hierarchies kiln uses, in this order in cg->dirs; v2 uses dirs[0]. */
enum cg_controller { CG_MEMORY = 0, CG_CPU, CG_PIDS, CG_DEVICES, CG_N };

extern const char *const cg_controller_names[CG_N];

/* One device rule: type 'c' or 'b', minor -1 = any. */
struct cg_dev_rule {
	char type;
	unsigned major;
	int minor;
};

/* The standard nodes plus InfiniBand's plus those given. */
#define CG_MAX_DEV_RULES 256

struct cg_ops {
	/* Fill cg->dirs from the place and /proc/self/cgroup's text. */
	int (*locate)(struct kn_cgroup *cg, const struct kn_cgroup_place *place,
		      const char *self, const char *name, struct kn_error *err);
	int (*create)(struct kn_cgroup *cg, const struct kn_cgroup_limits *lim,
		      struct kn_error *err);
	/* Where the OOM kill count is, relative to its dir; which dir. */
	const char *oom_file;
	enum cg_controller oom_dir;
	/* Kills everything at once where the kernel can (v2 cgroup.kill). */
	const char *kill_file;
};

struct kn_cgroup {
	const struct cg_ops *ops;
	char *root;       /* where the hierarchies are mounted */
	char *dirs[CG_N]; /* NULL: that controller is not mounted (v1) */
};

extern const struct cg_ops cg_v1_ops, cg_v2_ops;

/* Append text to an existing cgroup file (never creates one). */
int cg_write(const char *dir, const char *file, const char *text);
/* The same, an error naming the file on failure. */
int cg_set(const char *dir, const char *file, const char *text,
	   struct kn_error *err);
/*
 * Each of texts[0..n) as its own write, through one open of the file:
 * a file that takes one entry per write (devices.allow) gets them all.
 */
int cg_set_each(const char *dir, const char *file, const char *const *texts,
		size_t n, struct kn_error *err);
/* mkdir that is fine with an existing directory. */
int cg_mkdir(const char *dir, struct kn_error *err);
bool cg_exists(const char *dir, const char *file);
/*
 * The cgroup path of the line of /proc/self/cgroup whose controller list
 * holds controller ("" for v2's "0::" line); NULL when none.
 */
char *cg_self_path(const char *self, const char *controller);
/* BASE/PARENT/NAME below a hierarchy's mount: see cgroup.h. */
char *cg_relative(const char *self_path, const char *parent, const char *name);
/* The quota per 100 ms period for milli CPUs, at least the kernel's 1 ms. */
#define CG_CPU_PERIOD_US 100000
int64_t cg_cpu_quota_us(int milli);
/* Rules for lim->devices: the standard nodes first. */
size_t cg_device_rules(char *const *devices, struct cg_dev_rule *rules,
		       size_t max);
/*
 * v2 only: attach a BPF_PROG_TYPE_CGROUP_DEVICE program that allows
 * rules[0..n) (read, write; never mknod) to the cgroup at dir.
 */
int cg_bpf_devices(const char *dir, const struct cg_dev_rule *rules,
		   size_t n, struct kn_error *err);

#endif
