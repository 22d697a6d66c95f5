/*
 * sched: placement as pure functions over a cluster snapshot.
 *
 * No I/O, no clock, no store: the server (and later `kiln sim`) builds a
 * snapshot, asks for decisions and applies them itself. A gang is placed
 * all at once or not at all: kn_sched_place either binds every task and
 * charges the snapshot, or leaves the snapshot untouched and explains why.
 *
 * Resources are in thousandths of a GPU (milli-GPU) and of a CPU so whole
 * GPUs, shares and (later) MIG slices share one data model.
 */
#ifndef KILN_SCHED_H
#define KILN_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

#define KN_SCHED_MAX_GPUS_PER_TASK 8

/* Starts a reason when the request cannot fit even the empty cluster. */
#define KN_SCHED_NEVER "can never fit: "

struct kn_sched_label {
	const char *key;
	const char *value;
};

struct kn_sched_taint {
	const char *key;
	const char *value;  /* may be NULL */
	const char *effect; /* "NoSchedule" or "PreferNoSchedule" */
};

struct kn_sched_toleration {
	const char *key;    /* NULL with Exists = tolerate every taint */
	bool exists;        /* operator Exists (else Equal) */
	const char *value;  /* for Equal */
	const char *effect; /* NULL = any effect */
};

struct kn_sched_device {
	int index;            /* the node-local index (CUDA_VISIBLE_DEVICES) */
	const char *model;    /* "H100-80GB" */
	int64_t memory_bytes;
	int used_milli;       /* 0..1000 already allocated; updated on place */
};

struct kn_sched_node {
	const char *name;
	bool schedulable;     /* false when cordoned, draining or unhealthy */
	const struct kn_sched_label *labels;
	size_t n_labels;
	const struct kn_sched_taint *taints;
	size_t n_taints;
	int cpu_milli_total;  /* 0 = not tracked */
	int cpu_milli_used;   /* updated on place */
	int64_t memory_total; /* 0 = not tracked */
	int64_t memory_used;  /* updated on place */
	struct kn_sched_device *devices;
	size_t n_devices;
};

struct kn_sched_cluster {
	struct kn_sched_node *nodes;
	size_t n_nodes;
};

/* What one job asks for; every task asks for the same. */
struct kn_sched_request {
	int tasks;                /* gang size >= 1 */
	int gpu_milli;            /* per task: 1000*n whole GPUs, or 1..999 */
	const char *mig_profile;  /* not placed yet: refused with a reason */
	const char *const *gpu_models; /* acceptable models, or NULL = any */
	size_t n_gpu_models;
	int cpu_milli;
	int64_t memory_bytes;
	const struct kn_sched_label *selector;
	size_t n_selector;
	const struct kn_sched_toleration *tolerations;
	size_t n_tolerations;
};

/* Where one task goes. */
struct kn_sched_binding {
	size_t node;  /* index into cluster->nodes */
	int n_devices;
	int devices[KN_SCHED_MAX_GPUS_PER_TASK]; /* device indexes (not array
						    positions) */
	int milli_per_device; /* 1000 for whole GPUs, the share otherwise */
};

/*
 * Place every task of req, or none. On success returns 0, fills
 * bindings[0..req->tasks-1], charges the snapshot (device used_milli, node
 * cpu and memory where the node tracks them and the request asks) and
 * empties reason. When it cannot fit returns -ENOSPC and writes a one-line
 * reason a person can act on ("needs 2 tasks x 2 GPUs; 1 of 4 GPUs free on
 * local"), leaving the snapshot and bindings unchanged. A request that
 * cannot fit even the empty cluster (all nodes, cordoned ones included,
 * with nothing allocated) has a reason starting with KN_SCHED_NEVER; any
 * other may fit later. A request for MIG slices gets -ENOSPC and "MIG
 * slices are not placed yet (mig:<profile>)". A malformed request (tasks
 * < 1, gpu_milli neither 1..999 nor 1000..8000 in steps of 1000, negative
 * cpu or memory) gets -EINVAL and a reason starting "invalid request: ".
 * reason may be NULL.
 *
 * Filters: a node must be schedulable, carry every selector label, and
 * have no taint the request does not tolerate other than PreferNoSchedule
 * ones (unknown effects count as NoSchedule). With gpu_models, a device is
 * usable when its model equals one of them or starts with one followed by
 * '-' ("H100" accepts "H100-80GB"), ignoring case. Whole GPUs need idle
 * devices (used_milli 0) on one node, lowest indexes first; a share takes
 * the fullest device with room. Each task goes to the node that is best by,
 * in order: no untolerated PreferNoSchedule taint, already used by this
 * gang, able to hold all tasks still to place, fewest free GPU milli, node
 * order. A CPU-only task (gpu_milli 0) binds no devices and has
 * milli_per_device 0.
 */
int kn_sched_place(struct kn_sched_cluster *cluster,
		   const struct kn_sched_request *req,
		   struct kn_sched_binding *bindings, char *reason,
		   size_t reason_len);

/*
 * Give back what kn_sched_place took for req->tasks bindings (e.g. to undo
 * a tentative placement), found by node and device index. Counters never
 * drop below zero.
 */
void kn_sched_release(struct kn_sched_cluster *cluster,
		      const struct kn_sched_request *req,
		      const struct kn_sched_binding *bindings);

/*
 * Queue order: higher priority first, then earlier submission, then lower
 * id. A total order, so the result does not depend on the input order.
 */
struct kn_sched_queue_entry {
	int64_t job_id;
	int priority;
	int64_t submitted_at;
};
void kn_sched_sort_queue(struct kn_sched_queue_entry *entries, size_t n);

/* ---- preemption ---- */

/* A running job that might be preempted for a more important one. */
struct kn_sched_victim {
	int64_t job_id;
	int priority;
	bool preemptible;
	int64_t started_at;                     /* the younger goes first */
	const struct kn_sched_request *req;
	const struct kn_sched_binding *bindings; /* req->tasks of them */
};

/*
 * The smallest set of running jobs whose eviction lets req (of priority
 * `priority`) fit: only preemptible jobs of lower priority qualify, the
 * lowest priority and then the youngest first, and any victim the others
 * make unnecessary is dropped. On success returns 0 and writes the chosen
 * indexes into cands to victims[0..*n_victims-1] (victims must hold n);
 * -ENOSPC when no such set exists. The cluster is not changed.
 */
int kn_sched_find_victims(const struct kn_sched_cluster *cluster,
			  const struct kn_sched_request *req, int priority,
			  const struct kn_sched_victim *cands, size_t n,
			  size_t *victims, size_t *n_victims);

#endif
