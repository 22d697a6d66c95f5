/*
 * sched: placement as pure functions over a cluster snapshot.
 *
 * No I/O, no clock, no store: the server (and later `kiln sim`) builds a
 * snapshot, asks for decisions and applies them itself. A gang is placed
 * all at once or not at all: kn_sched_place either binds every task and
 * charges the snapshot, or leaves the snapshot untouched and explains why.
 *
 * Resources are in thousandths of a GPU (milli-GPU) and of a CPU so whole
 * GPUs and shares share one data model; MIG instances are counted in
 * memory slices on devices in MIG mode (data/mig-profiles.csv).
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

/*
 * A node affinity term on one label: In and NotIn compare the node's
 * value with values; Exists and DoesNotExist look at the key alone. As in
 * Kubernetes, NotIn and DoesNotExist hold on a node without the label.
 */
enum kn_sched_affinity_op {
	KN_SCHED_IN,
	KN_SCHED_NOT_IN,
	KN_SCHED_EXISTS,
	KN_SCHED_DOES_NOT_EXIST,
};

struct kn_sched_affinity_term {
	const char *key;
	enum kn_sched_affinity_op op;
	const char *const *values; /* In, NotIn */
	size_t n_values;
	int weight;                /* preferred terms: 1..100 */
};

/* ---- MIG tables (data/mig-profiles.csv) ---- */

#define KN_MIG_MAX_PROFILES 16
#define KN_MIG_MAX_SLICES 8   /* memory slices of a GPU, at most */

struct kn_mig_profile {
	char name[32];        /* "1g.10gb", "1g.10gb+me" */
	int id;               /* NVIDIA's GPU instance profile ID */
	int compute;          /* compute slices */
	int memory;           /* memory slices an instance occupies */
	int max_instances;
	unsigned starts;      /* bit s: an instance may start at slice s */
};

/* One GPU model's MIG geometry. */
struct kn_mig_model {
	char name[32];        /* "A100-80GB" */
	int compute;          /* compute slices of the GPU (7) */
	int memory;           /* memory slices of the GPU (8) */
	struct kn_mig_profile profiles[KN_MIG_MAX_PROFILES];
	int n_profiles;
};

struct kn_mig_table;

/*
 * Parse a MIG table (CSV with the header of data/mig-profiles.csv) from
 * text[0..len-1]; file names it in errors. -EINVAL with
 * "FILE:LINE:COLUMN: column: message" on bad content (unknown or missing
 * column, a number out of range, a start that does not leave room for
 * the instance, one model with different GPU geometry, a profile twice).
 */
int kn_mig_parse(const char *text, size_t len, const char *file,
		 struct kn_mig_table **out, struct kn_error *err);
void kn_mig_free(struct kn_mig_table *t);
/* The model named name (exactly, ignoring case), or NULL. */
const struct kn_mig_model *kn_mig_find(const struct kn_mig_table *t,
				       const char *name);
/* The profile named name on model m, or NULL. */
const struct kn_mig_profile *kn_mig_profile(const struct kn_mig_model *m,
					    const char *name);

/* A GPU instance on a MIG GPU: the profile and its first memory slice. */
struct kn_sched_mig_slice {
	const struct kn_mig_profile *profile;
	int start;
};

/*
 * Whether profile p fits beside the n instances in used on model m, and
 * where: 0 and *start, or -ENOSPC. Of the allowed starts it takes the one
 * that leaves the most placements of every profile of m still possible
 * (then the lowest), so small instances pack to one side and the large
 * contiguous ranges stay open for large ones.
 */
int kn_mig_fit(const struct kn_mig_model *m,
	       const struct kn_sched_mig_slice *used, int n,
	       const struct kn_mig_profile *p, int *start);

struct kn_sched_device {
	int index;            /* the node-local index (CUDA_VISIBLE_DEVICES) */
	const char *model;    /* "H100-80GB" */
	int64_t memory_bytes;
	int used_milli;       /* 0..1000 already allocated; updated on place */
	/* In MIG mode: the model's geometry (else NULL) and the instances
	   placed; such a device takes MIG requests only. Updated on place. */
	const struct kn_mig_model *mig;
	struct kn_sched_mig_slice mig_slices[KN_MIG_MAX_SLICES];
	int n_mig_slices;
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
	const char *mig_profile;  /* one MIG instance of this profile per task
				     (gpu_milli then 0), or NULL */
	const char *const *gpu_models; /* acceptable models, or NULL = any */
	size_t n_gpu_models;
	int cpu_milli;
	int64_t memory_bytes;
	const struct kn_sched_label *selector;
	size_t n_selector;
	const struct kn_sched_toleration *tolerations;
	size_t n_tolerations;
	/* Every required term must hold on a node; the weights of the
	   preferred terms that hold add up to the node's affinity score. */
	const struct kn_sched_affinity_term *required;
	size_t n_required;
	const struct kn_sched_affinity_term *preferred;
	size_t n_preferred;
	/* Spread the gang over this label's values ("zone"), or NULL. */
	const char *spread_key;
	/* With spread_key: tasks of the same spread group placed before this
	   request (other replicas of a deployment), one count per node of
	   the cluster; they weigh like earlier tasks of the gang. NULL =
	   none. */
	const int *spread_placed;
	/* Rank nodes with a packing policy instead of best fit, or NULL. */
	const struct kn_sched_packing *packing;
};

/*
 * Packing: kn_sched_place may rank the nodes that pass every filter and
 * criterion above the GPU fit (taints, spread, affinity, the gang's own
 * nodes, room for the rest of the gang) with one of the packing policies
 * below (kn_pack_policies: fgd, kiln, best-fit, ...) instead of its
 * best-fit rule, and a share then takes the GPU that policy names. The
 * policy sees GPUs only: each node's usable, non-MIG devices (one pack
 * node per cluster node; a node's first usable device gives its model)
 * and the workload's GPU shapes; CPU and memory stay the filters'
 * business. CPU-only and MIG requests, and clusters with a node holding
 * more usable GPUs than KN_PACK_MAX_GPUS, are placed by best fit.
 */
struct kn_sched_shape {
	int gpu_milli;                 /* per task, as in a request */
	const char *const *gpu_models; /* acceptable models, or NULL = any */
	size_t n_gpu_models;
	/* How many jobs had this shape (0 counts as one): a workload of many
	   alike jobs is a few shapes, so a placement's cost does not grow
	   with the number of jobs. */
	size_t count;
};

struct kn_sched_packing {
	const struct kn_pack_policy *policy;
	/* The jobs whose shapes make the typical workload the fgd and kiln
	   policies measure fragmentation against (METHOD.md §2.5). */
	const struct kn_sched_shape *workload;
	size_t n_workload;
	uint64_t seed; /* the random policy's draws */
};

/* Where one task goes. */
struct kn_sched_binding {
	size_t node;  /* index into cluster->nodes */
	int n_devices;
	int devices[KN_SCHED_MAX_GPUS_PER_TASK]; /* device indexes (not array
						    positions) */
	int milli_per_device; /* 1000 for whole GPUs, the share otherwise */
	/* A MIG request: devices[0] holds the instance, which starts at
	   memory slice mig_start (-1 otherwise); with mig_profile it names
	   the slice (the server maps it to MIG-<uuid> or a synthetic id). */
	int mig_start;
	const struct kn_mig_profile *mig_profile;
};

/*
 * Whether a gpu_model constraint accepts a device model: equal ignoring
 * case, or the constraint followed by '-' ("H100" accepts "H100-80GB": a
 * family names its variants with a dash; "H10" does not). model may be
 * NULL (accepts nothing).
 */
bool kn_sched_model_accepts(const char *wanted, const char *model);

/*
 * Place every task of req, or none. On success returns 0, fills
 * bindings[0..req->tasks-1], charges the snapshot (device used_milli, node
 * cpu and memory where the node tracks them and the request asks) and
 * empties reason. When it cannot fit returns -ENOSPC and writes a one-line
 * reason a person can act on ("needs 2 tasks x 2 GPUs; 1 of 4 GPUs free on
 * local"), leaving the snapshot and bindings unchanged. A request that
 * cannot fit even the empty cluster (all nodes, cordoned ones included,
 * with nothing allocated) has a reason starting with KN_SCHED_NEVER; any
 * other may fit later. A MIG request places one instance of its profile
 * per task on devices in MIG mode (device->mig) whose model has that
 * profile, following the model's placement rules (kn_mig_fit); other
 * requests never use a MIG device. A malformed request (tasks
 * < 1, gpu_milli neither 1..999 nor 1000..8000 in steps of 1000, negative
 * cpu or memory) gets -EINVAL and a reason starting "invalid request: ".
 * reason may be NULL.
 *
 * Filters: a node must be schedulable, carry every selector label, satisfy
 * every required affinity term, and have no taint the request does not
 * tolerate other than PreferNoSchedule ones (unknown effects count as
 * NoSchedule). With gpu_models, a device is
 * usable when its model equals one of them or starts with one followed by
 * '-' ("H100" accepts "H100-80GB"), ignoring case. Whole GPUs need idle
 * devices (used_milli 0) on one node, lowest indexes first; a share takes
 * the fullest device with room. Each task goes to the node that is best by,
 * in order: no untolerated PreferNoSchedule taint; with spread_key, fewest
 * tasks of this gang already on nodes with the same value of that label
 * (nodes without it share one "none" value); highest sum of the weights of
 * the preferred affinity terms it satisfies; already used by this gang;
 * able to hold all tasks still to place; fewest free GPU milli; node
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
 * Charge req->tasks bindings to cluster as kn_sched_place would have,
 * even where that fills a device, a node's CPUs or its memory past its
 * total: what was promised to a job still waiting (kn_sched_place_after)
 * then counts as taken, and a device or node so overfilled has no room
 * for anyone. kn_sched_release gives it back.
 */
void kn_sched_charge(struct kn_sched_cluster *cluster,
		     const struct kn_sched_request *req,
		     const struct kn_sched_binding *bindings);

/*
 * Whether a and b ask for the same (tasks, GPUs, MIG profile, models,
 * CPU, memory, selector, tolerations, affinity terms, spread key;
 * strings compared by content): one that did not fit a cluster does not
 * fit it while nothing is released (but for a gang over several nodes
 * under a packing policy that draws at random, which another draw might
 * place), so a queue of many alike jobs is tried once per shape, not
 * once per job. Requests that spread
 * (spread_key) count as different from every other: where their
 * gang's earlier tasks are is their own.
 */
bool kn_sched_request_same(const struct kn_sched_request *a,
			   const struct kn_sched_request *b);

/*
 * What a task that names no CPUs or memory counts: the server's
 * --default-task-cpus and --default-task-memory. Every task then counts
 * against its node, so a gang of tasks that ask for nothing cannot be
 * placed beyond the node's CPUs and memory.
 */
struct kn_sched_defaults {
	int cpu_milli;        /* 0 = count nothing */
	int64_t memory_bytes; /* 0 = count nothing */
};

/* Give req's unset (zero) CPU and memory the defaults. */
void kn_sched_request_defaults(struct kn_sched_request *req,
			       const struct kn_sched_defaults *defaults);

/*
 * Queue order: higher priority first, then (fair share) the owner with
 * the least decayed usage, then earlier submission, then lower id. A
 * total order, so the result does not depend on the input order.
 */
struct kn_sched_queue_entry {
	int64_t job_id;
	int priority;
	int64_t submitted_at;
	double usage; /* the owner's decayed usage (kn_fair_usage_advance);
			 0 for an owner with none, or without fair share */
};
void kn_sched_sort_queue(struct kn_sched_queue_entry *entries, size_t n);

/*
 * Fair share (docs/scheduling.md): an owner's usage is the charge of its
 * running tasks, in CPU-seconds plus KN_FAIR_GPU_WEIGHT per GPU-second,
 * decayed with a half-life, so an hour of use counts half as much one
 * half-life later. A GPU weighs as the CPUs a GPU machine has per GPU
 * (96 vCPUs for 8 GPUs on an ND H100 v5), so a GPU-hour is not buried
 * under cheap CPU-hours.
 */
#define KN_FAIR_GPU_WEIGHT 12.0

/*
 * What one running gang charges per second: tasks x (CPUs +
 * KN_FAIR_GPU_WEIGHT x GPUs), with a MIG instance counted as its compute
 * slices over the GPU's seven.
 */
double kn_fair_rate(const struct kn_sched_request *req);

/*
 * usage after elapsed_ms more, charged rate per second meanwhile: usage
 * decays by 2^(-elapsed/half_life) and the charge accrues decaying too
 * (the exact integral, so the result does not depend on how often it is
 * called). half_life_ms <= 0: no decay. Negative elapsed counts as 0.
 */
double kn_fair_usage_advance(double usage, double rate, int64_t elapsed_ms,
			     int64_t half_life_ms);

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

/*
 * Where req would go once the running jobs going[0..n_going-1] have
 * stopped (the victims being preempted for it): 0 with bindings filled
 * (req->tasks of them), or -ENOSPC. The cluster is not changed. While
 * the victims stop, the server charges these bindings (kn_sched_charge)
 * so that jobs behind req start only on what req does not need, where
 * holding every job behind it would keep, say, a CPU-only job waiting
 * for GPUs it never asked for.
 */
int kn_sched_place_after(const struct kn_sched_cluster *cluster,
			 const struct kn_sched_request *req,
			 const struct kn_sched_victim *going, size_t n_going,
			 struct kn_sched_binding *bindings);

/*
 * Packing: the openb cluster model and the scoring policies of the FGD
 * paper (Weng et al., ATC'23), used by `kiln sim` (docs/scheduling.md).
 *
 * A pack cluster holds, per node, free CPU and memory, each GPU's free
 * milli-GPU (0..1000) and the GPU model; a pod asks for CPU, memory and
 * either nothing, a share of one GPU (1..999 milli) or num_gpu whole GPUs
 * on one node, optionally of some models only. kn_pack_place filters the
 * nodes, asks a policy (an ops table) to score each feasible one, takes
 * the highest score with ties going to the earliest node in the cluster's
 * tie order, picks the GPUs and charges the node. Randomness comes only
 * from the struct kn_rng the caller passes in.
 */

/* xoshiro256**, seeded through splitmix64: small, fast and reproducible. */
struct kn_rng {
	uint64_t s[4];
};
void kn_rng_seed(struct kn_rng *rng, uint64_t seed);
uint64_t kn_rng_next(struct kn_rng *rng);
/* Uniform in [0, n) without modulo bias; n >= 1. */
uint64_t kn_rng_below(struct kn_rng *rng, uint64_t n);

#define KN_PACK_MAX_GPUS 8
/* GPU models are kept as bits of a mask. */
#define KN_PACK_MAX_MODELS 64

struct kn_pack;

struct kn_pack_node_spec {
	const char *name;
	int cpu_milli;
	int64_t memory_mib;
	int n_gpus;         /* 0..KN_PACK_MAX_GPUS */
	const char *model;  /* GPU model, or NULL/"" without GPUs */
};

struct kn_pack_pod {
	int cpu_milli;
	int64_t memory_mib;
	int num_gpu;        /* 0..8 */
	int gpu_milli;      /* per GPU: 0 with num_gpu 0, 1..1000 with 1 GPU,
			       1000 with more */
	/* Acceptable models as a mask of model ids (kn_pack_models); only
	   meaningful when constrained. */
	uint64_t models;
	bool constrained;
	const char *gpu_spec; /* the constraint as written ("A|B"), or NULL;
				 orders equal shapes in the typical set */
};

/*
 * A new empty cluster of n nodes, all GPUs free. Fails with -EINVAL (err
 * naming the node) on a negative amount, more than KN_PACK_MAX_GPUS GPUs,
 * GPUs without a model, or more than KN_PACK_MAX_MODELS models.
 */
int kn_pack_new(const struct kn_pack_node_spec *nodes, size_t n,
		struct kn_pack **out, struct kn_error *err);
void kn_pack_free(struct kn_pack *c);
size_t kn_pack_n_nodes(const struct kn_pack *c);
/* Total GPUs in milli-GPU (1000 per GPU). */
int64_t kn_pack_gpu_capacity(const struct kn_pack *c);

/*
 * The mask of models named in spec ("A|B", exact names); names the cluster
 * has no GPUs of add nothing. Sets *constrained when spec is non-empty.
 */
uint64_t kn_pack_models(const struct kn_pack *c, const char *spec,
			bool *constrained);
/*
 * A workload shape's GPU constraint on nodes (n of them) as a spec for
 * the above: "A|B", the nodes' models its gpu_models accept, each once,
 * in node order. A shape that accepts none of them keeps its names as
 * given, so it stays a shape of its own and fits nowhere. Caller frees.
 */
char *kn_pack_gpu_spec(const struct kn_pack_node_spec *nodes, size_t n,
		       const struct kn_sched_shape *shape);

/*
 * Check a pod's shape: -EINVAL and a reason in err otherwise (negative
 * amounts, num_gpu outside 0..8, gpu_milli inconsistent with num_gpu).
 */
int kn_pack_check_pod(const struct kn_pack_pod *pod, struct kn_error *err);

/*
 * The target workload that fragmentation is measured against, as the
 * paper computes it: the pods' shapes (CPU, per-GPU milli, GPU count, GPU
 * constraint) counted, sorted by count (ties: more CPU, more milli, more
 * GPUs, larger constraint string first), kept until they cover 95 % of
 * the pods and renormalised. Replaces any earlier set; clears the cluster's
 * score cache. Without one, fragmentation is 0 everywhere.
 */
void kn_pack_set_typical(struct kn_pack *c, const struct kn_pack_pod *pods,
			 size_t n);
/* The same, pod i standing for weights[i] pods (weights NULL: one each). */
void kn_pack_set_typical_weighted(struct kn_pack *c,
				  const struct kn_pack_pod *pods,
				  const size_t *weights, size_t n);
/* How many shapes the typical set kept. */
size_t kn_pack_n_typical(const struct kn_pack *c);

/*
 * The order in which ties are broken: order[0] first. Must be a
 * permutation of 0..n-1 (else -EINVAL). The default is the node order.
 */
int kn_pack_set_order(struct kn_pack *c, const size_t *order, size_t n);

/* Free everything: every GPU idle, CPU and memory back to capacity. */
void kn_pack_reset(struct kn_pack *c);

/* How a policy picks the GPU(s) of a placement (METHOD.md §2.3). */
enum kn_pack_gpu_choice {
	KN_PACK_GPU_BEST,   /* share: fullest GPU that fits (lowest index on
			       ties); whole: lowest-indexed idle GPUs */
	KN_PACK_GPU_RANDOM, /* share: uniform among those that fit */
	KN_PACK_GPU_SCORED, /* share: the GPU the score function names */
};

/*
 * A placement policy. score() rates a feasible node for a pod (higher is
 * better) on the node's state before placement; with KN_PACK_GPU_SCORED
 * it also writes the chosen GPU position for a sharing pod to *gpu.
 * cacheable: the score is a function of the node's state and the pod's
 * (CPU, GPU count, milli) alone, so the cluster may reuse it until that
 * node changes.
 */
struct kn_pack_policy {
	const char *name;
	const char *summary;
	bool cacheable;
	enum kn_pack_gpu_choice gpu_choice;
	int64_t (*score)(const struct kn_pack *c, size_t node,
			 const struct kn_pack_pod *pod, struct kn_rng *rng,
			 int *gpu);
};

/* The policies, NULL-terminated: random, dot-product, gpu-clustering,
   gpu-packing, best-fit, fgd, kiln. */
extern const struct kn_pack_policy *const kn_pack_policies[];
/* By name, or NULL. */
const struct kn_pack_policy *kn_pack_policy_find(const char *name);

struct kn_pack_placement {
	size_t node;
	int n_gpus;
	int gpus[KN_PACK_MAX_GPUS]; /* GPU positions on the node */
	int milli_per_gpu;
};

/*
 * Place pod with policy: 0 with *out filled and the node charged, or
 * -ENOSPC when no node can hold it (cluster untouched). rng is used by
 * the random policy and random GPU choice only.
 */
int kn_pack_place(struct kn_pack *c, const struct kn_pack_policy *policy,
		  const struct kn_pack_pod *pod, struct kn_rng *rng,
		  struct kn_pack_placement *out);

/*
 * Charge pod to node on the given GPU positions, as a placement would (to
 * rebuild a snapshot from known allocations). -EINVAL when the positions
 * do not suit the pod (wrong count, out of range, repeated, or not fully
 * free for a whole-GPU pod), -ENOSPC when the node lacks the CPU, memory,
 * model or GPU room; the cluster is untouched on error.
 */
int kn_pack_bind(struct kn_pack *c, size_t node,
		 const struct kn_pack_pod *pod, const int *gpus, int n_gpus);

/*
 * Give back what a placement of pod took (a pod leaving): -EINVAL, the
 * cluster untouched, when the node could not be holding it (more free
 * than its capacity afterwards, or no pod of its kind there).
 */
int kn_pack_unbind(struct kn_pack *c, const struct kn_pack_placement *where,
		   const struct kn_pack_pod *pod);

/* Node state, for reports, tests and policies. */
struct kn_pack_node_state {
	int cpu_free;
	int64_t memory_free;
	int n_gpus;
	int model;                          /* model id, -1 without GPUs */
	int gpu_free[KN_PACK_MAX_GPUS];     /* milli, 0..1000 */
	unsigned tags;                      /* GPU pod kinds on the node:
					       bit 0 sharing, bit k k-GPU */
};
void kn_pack_node_state(const struct kn_pack *c, size_t node,
			struct kn_pack_node_state *out);

/* Allocated milli-GPU over the whole cluster. */
int64_t kn_pack_used_milli(const struct kn_pack *c);
/* Idle milli-GPU over the whole cluster. */
int64_t kn_pack_idle_milli(const struct kn_pack *c);
/*
 * The cluster's fragmentation in milli-GPU: the sum over nodes of the
 * expected idle GPU the typical workload cannot use (METHOD.md §2.5).
 */
double kn_pack_frag_milli(struct kn_pack *c);
/* One node's fragmentation for the typical set, in milli-GPU. */
double kn_pack_node_frag(const struct kn_pack *c, size_t node);

/* ---- autoscaling node pools (docs/capacity.md) ---- */

#define KN_AUTOSCALE_WHY_LEN 256

/* A node pool as the autoscaler sees it. */
struct kn_autoscale_pool {
	const char *name;
	bool spot;
	double gpu_hour_price;  /* per GPU, from the catalog; < 0 = unpriced */
	int min, max;
	int current;            /* nodes up */
	int provisioning;       /* asked for, not up yet: counted as coming */
	int64_t scale_down_delay_ms;
	/* What one new node looks like: devices, CPU, memory and labels,
	   nothing used. */
	const struct kn_sched_node *shape;
};

/* A queued job that found no room on the nodes that are up. */
struct kn_autoscale_job {
	int64_t id;
	bool preemptible;
	const struct kn_sched_request *req;
};

/* A node of some pool. */
struct kn_autoscale_node {
	size_t pool;            /* index into the pools */
	int64_t idle_since;     /* ms since when it has run nothing, 0 = busy
				   (or not ready: never shut down) */
};

/*
 * One autoscaling round, pure. Scale up: a pool below its min gets the
 * difference; then each job, in the order given (queue order), is placed
 * on the nodes being provisioned and those already added this round (so
 * a burst asks once, not once per round); when it does not fit there, it
 * gets the fewest new nodes of the first pool, by preference, whose room
 * (max - current - provisioning - added) lets the whole gang fit:
 * preemptible jobs prefer spot pools, other jobs prefer on-demand pools,
 * then the lowest price per GPU (unpriced last), then the pool order.
 * Scale down: nodes idle at least their pool's delay, the longest idle
 * first, while the pool stays at or above min and is not scaling up.
 *
 * add[n_pools] gets the nodes to ask each pool for, remove[n_nodes] the
 * nodes to delete, why[n_pools] each pool's decision in words ("" when
 * nothing changes) and blocked the first job no pool can hold, or "".
 */
void kn_autoscale_plan(const struct kn_autoscale_pool *pools, size_t n_pools,
		       const struct kn_autoscale_job *jobs, size_t n_jobs,
		       const struct kn_autoscale_node *nodes, size_t n_nodes,
		       int64_t now, int *add, bool *remove,
		       char (*why)[KN_AUTOSCALE_WHY_LEN],
		       char blocked[KN_AUTOSCALE_WHY_LEN]);

/* ---- a node pool's definition: `--pool "NAME SKU GPUS [OPTION ...]"` ---- */

#define KN_POOL_NAME_MAX 40

/* Where a pool's nodes come from (docs/capacity.md). */
enum kn_pool_provider {
	KN_POOL_PROVIDER_SIM,
	KN_POOL_PROVIDER_COMMAND,
	KN_POOL_PROVIDER_AZURE,
};

/*
 * One pool as written, checked as far as text alone allows. What needs
 * the world (GPUS against the device table, the command being
 * executable, Azure's credentials) is the caller's to check.
 */
struct kn_pool_spec {
	char name[KN_POOL_NAME_MAX + 1];
	char *sku;
	char *gpus;                /* "1xA100-80GB", as given */
	char **zones;              /* zones=a,b; may be empty */
	size_t n_zones;
	char *labels;              /* the extra " K=V K=V", or "" */
	bool spot;
	int min, max;              /* default 1 and max(10, min) */
	int64_t scale_down_delay_ms; /* default 10 minutes */
	enum kn_pool_provider provider;
	char *command;             /* provider=command's script */
	/* provider=azure: the scale set's id and how to reach it; NULL when
	   not given. azure_identity is "managed" or "service-principal". */
	char *vmss;
	char *azure_identity;
	char *azure_client_id;
	char *azure_arm_url, *azure_imds_url, *azure_login_url;
};

/*
 * Parse text, the grammar of docs/capacity.md, into out. An error is
 * -EINVAL with a message `FLAG "TEXT": OPTION: why` (flag is "--pool"
 * for the server, "pool" for a file of them); out is left empty then.
 */
int kn_pool_spec_parse(const char *text, const char *flag,
		       struct kn_pool_spec *out, struct kn_error *err);
void kn_pool_spec_release(struct kn_pool_spec *p);
/* "sim", "command" or "azure". */
const char *kn_pool_provider_name(enum kn_pool_provider provider);

#endif
