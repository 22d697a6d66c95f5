/*
 * sim: replay openb-format traces through the packing policies the way
 * the FGD paper measures them (METHOD.md §2; docs/scheduling.md).
 *
 * A trace is a node list and a pod list (CSV with a header row, columns
 * found by name). One run, for a policy and a seed: the pods in name
 * order are shuffled, resampled with replacement until the GPU requested
 * reaches 130 % of the cluster's GPUs, and offered one at a time; nothing
 * ever leaves and a pod that fits nowhere is dropped. A per-seed random
 * node order breaks the policies' ties. After every pod the allocation
 * and the fragmentation are recorded, and binned by arrived workload
 * (GPU requested so far, failed pods included, in % of capacity).
 */
#ifndef KILN_SIM_H
#define KILN_SIM_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/base.h"
#include "sched/sched.h"

/* Arrived workload is binned to whole percents 0..KN_SIM_MAX_ARRIVED. */
#define KN_SIM_MAX_ARRIVED 130
#define KN_SIM_BINS (KN_SIM_MAX_ARRIVED + 1)

/* Traces larger than this are refused: openb's are under 1 MiB. */
#define KN_SIM_MAX_FILE (256u << 20)

struct kn_sim;

/*
 * Load a node list (columns sn, cpu_milli, memory_mib, gpu, model) and a
 * pod list. A pod list needs name, cpu_milli, memory_mib, num_gpu and
 * gpu_milli; every other column is optional: gpu_spec (default: any GPU
 * model), creation_time, deletion_time and scheduled_time (seconds; only
 * the replay with departures reads them, and needs the first two). Other
 * columns are ignored. Empty values and "nan" in model and gpu_spec mean
 * none. Errors: -ENOENT etc. when a file cannot be read, -EINVAL with
 * "FILE:LINE:COLUMN: column: message" for bad content.
 */
int kn_sim_load(const char *nodes_csv, const char *pods_csv,
		struct kn_sim **out, struct kn_error *err);
void kn_sim_free(struct kn_sim *sim);

size_t kn_sim_n_nodes(const struct kn_sim *sim);
size_t kn_sim_n_pods(const struct kn_sim *sim);
/* Cluster GPU capacity in milli-GPU. */
int64_t kn_sim_capacity(const struct kn_sim *sim);

/* One run's curves; NAN where no pod arrived near a bin. */
struct kn_sim_curve {
	double unallocated[KN_SIM_BINS]; /* % of GPU capacity idle */
	double frag[KN_SIM_BINS];        /* fragmentation, % of capacity */
	size_t offered;                  /* pods offered */
	size_t placed;                   /* of which placed */
};

/* Run policy once with seed. Returns 0 (runs cannot fail once loaded). */
int kn_sim_run(struct kn_sim *sim, const struct kn_pack_policy *policy,
	       uint64_t seed, struct kn_sim_curve *out);

/*
 * The q-quantile (0..1, linear interpolation) of v[0..n-1], ignoring NaN;
 * NAN when none. Reorders v.
 */
double kn_sim_quantile(double *v, size_t n, double q);

/* ---- figures over seeds (stats.c) ---- */

/* Mean, sample standard deviation and median of the values that are not
   NaN; n counts them. sd is 0 for one value; all NAN for none. */
struct kn_sim_stats {
	size_t n;
	double mean, sd, median;
};
void kn_sim_stats(const double *v, size_t n, struct kn_sim_stats *out);

/*
 * Two policies compared seed by seed: d = b[i] - a[i] over the seeds
 * where both are numbers. mean and sd of d, t = mean / (sd / sqrt(n))
 * (NAN with fewer than 2 pairs; +-INFINITY when every d is the same
 * non-zero value, 0 when all are 0), and how many seeds have b below,
 * above and equal to a.
 */
struct kn_sim_paired {
	size_t n;
	double mean, sd, t;
	size_t lower, higher, equal;
};
void kn_sim_paired(const double *a, const double *b, size_t n,
		   struct kn_sim_paired *out);

/* Speed of a policy's runs: pods offered and placed over all runs, and
   each per second of the given wall time (0 when seconds <= 0). */
struct kn_sim_speed {
	size_t offered, placed;
	double seconds, offered_per_s, placed_per_s;
};
void kn_sim_speed(const struct kn_sim_curve *runs, size_t n, double seconds,
		  struct kn_sim_speed *out);

/* ---- replay with departures: kiln sim --departures (replay.c) ---- */

/* True when the pod list has creation_time and deletion_time. */
bool kn_sim_timed(const struct kn_sim *sim);

/*
 * One replay in time. A pod arrives at creation_time / load (load 1: as
 * recorded; 2: arrivals twice as dense) and queues; the queue is tried
 * oldest first after every arrival and departure (a pod that does not
 * fit does not block those behind it). A placed pod runs for
 * deletion_time - scheduled_time (deletion_time - creation_time without
 * a scheduled_time) and leaves; one that has waited its whole recorded
 * life (deletion_time - creation_time, not scaled by load) gives up and
 * is never placed. Rows with an empty scheduled_time never ran in the source and
 * are left out. The seed draws the node order that breaks ties, as in
 * kn_sim_run.
 */
struct kn_sim_replay {
	size_t pods, left_out;       /* replayed; without a scheduled_time */
	size_t gpu_pods;             /* of the replayed, asking for GPU */
	size_t never_placed, gpu_never_placed;
	double wait_p50_s, wait_p99_s; /* GPU pods placed: arrival -> start,
					  in source seconds; NAN without */
	double wait_mean_s;
	/* GPU-hours idle while GPU pods waited, up to the GPU they asked
	   for (at every moment min(idle GPU, GPU asked by the queue)). */
	double stranded_gpu_hours;
	/* The cluster's fragmentation (FGD's measure) integrated in time. */
	double frag_gpu_hours;
	double used_gpu_hours;       /* allocated to pods */
	double span_hours;           /* first arrival to last event */
};

/* -EINVAL (err naming the column) when the pod list lacks the times or a
   row ends before it starts, else 0. */
int kn_sim_replay_run(struct kn_sim *sim, const struct kn_pack_policy *policy,
		      uint64_t seed, double load, struct kn_sim_replay *out,
		      struct kn_error *err);

/* ---- autoscaling replay: kiln sim --autoscale (docs/scheduling.md) ---- */

/*
 * A node pool, in the grammar of `kiln server --pool` (docs/capacity.md),
 * read by the server's own parser (kn_pool_spec_parse): zones and labels
 * are checked and ignored, as no trace pod selects on them, and a
 * provider other than sim is refused, as a replay makes no real node.
 */
#define KN_SIM_POOL_NAME_MAX KN_POOL_NAME_MAX

struct kn_sim_pool {
	char name[KN_SIM_POOL_NAME_MAX + 1];
	char *sku;
	char *gpus;                  /* "1xA100-80GB", as given */
	bool spot;
	int min, max;
	int64_t scale_down_delay_ms;
	/* What one new node looks like; the caller may set its
	   cpu_milli_total and memory_total (0 = not tracked). */
	struct kn_sched_node shape;
	char (*models)[64];          /* the shape's device models */
	/* One node's price per hour in USD, < 0 unknown: the caller sets it
	   (kn_sim_pool_parse leaves -1). */
	double usd_hr;
};

/* Parse text (-EINVAL naming the pool text and the bad part). */
int kn_sim_pool_parse(const char *text, struct kn_sim_pool *out,
		      struct kn_error *err);
void kn_sim_pool_release(struct kn_sim_pool *p);

/*
 * A timed trace: an openb pod list with creation_time and deletion_time
 * (seconds). A pod arrives at creation_time and runs for deletion_time -
 * scheduled_time (deletion_time - creation_time without a scheduled_time
 * column); a row whose scheduled_time is empty never ran in the source
 * cluster and is left out. A pod is preemptible when its preemptible
 * column says true or 1, or, without that column, when its qos is BE.
 * gpu_spec is ignored: it names the source cluster's GPU models, and
 * the pools give the hardware. Errors as kn_sim_load's; a missing time
 * column names the file and the column.
 */
struct kn_sim_trace;

int kn_sim_trace_load(const char *pods_csv, struct kn_sim_trace **out,
		      struct kn_error *err);
void kn_sim_trace_free(struct kn_sim_trace *t);
size_t kn_sim_trace_n_pods(const struct kn_sim_trace *t);
/* Rows left out because they never ran (empty scheduled_time). */
size_t kn_sim_trace_n_unscheduled(const struct kn_sim_trace *t);

struct kn_sim_autoscale_opts {
	const struct kn_pack_policy *policy; /* as kiln server --policy; NULL:
						kn_sched_place's best fit */
	uint64_t seed;                       /* the random policy's draws */
	int64_t provision_delay_ms;          /* asked for -> ready */
	bool fixed;   /* every pool at max from the start, never scaled */
};

/* A pool's (or all pools') account of one run. */
struct kn_sim_pool_report {
	double node_hours;       /* billed: from asked for to removed */
	double cost_usd;         /* node_hours x usd_hr; < 0 unknown */
	double gpu_hours;        /* provisioned: node_hours x its GPUs */
	double gpu_hours_used;   /* allocated to pods */
	int peak_nodes;          /* at once, ready or coming */
	int nodes_added, nodes_removed; /* by the autoscaler */
	size_t pods;             /* placed on this pool's nodes */
	double wait_p50_s, wait_p95_s, wait_max_s; /* arrival -> placed;
						      NAN without pods */
};

struct kn_sim_autoscale_report {
	size_t n_pools;
	struct kn_sim_pool_report *pools; /* per pool, in the given order */
	struct kn_sim_pool_report total;
	size_t never_fit;   /* pods no pool's empty node holds: left out */
	double span_hours;  /* first arrival to the last pod's end */
};

/*
 * Replay t on pools, event by event, with no clock but the trace's: pods
 * arrive into a queue, the queue is placed (oldest first) on the nodes
 * that are up, kn_autoscale_plan (the server's) decides after every
 * event which pools grow and which idle nodes go, asked-for nodes join
 * after the provisioning delay, pods leave at their end. Pools start at
 * min nodes (max with opts->fixed). Returns 0 (a loaded trace cannot
 * fail); free the report with kn_sim_autoscale_report_release.
 */
int kn_sim_autoscale(const struct kn_sim_trace *t,
		     const struct kn_sim_pool *pools, size_t n_pools,
		     const struct kn_sim_autoscale_opts *opts,
		     struct kn_sim_autoscale_report *out);
void kn_sim_autoscale_report_release(struct kn_sim_autoscale_report *r);

/* ---- a server's history as a trace (history_trace.c) ---- */

struct kn_sim_history {
	size_t jobs;        /* ended jobs seen */
	size_t pods;        /* pod rows written: one per task */
	size_t skipped_mig; /* jobs left out: MIG has no openb form */
	size_t nodes;       /* node rows written */
};

/*
 * The ended jobs of jobs (GET /v1/jobs's answer) as an openb pod list
 * in pods, each pod with its job's times and preemptible flag; with
 * nodes (GET /v1/nodes's answer) the nodes as an openb node list in
 * node_list and each gpu_model constraint as the nodes' models it
 * accepts, without (NULL: the user brings the node list) node_list
 * untouched and the constraints as written. Names are made safe as CSV
 * cells (no commas, quotes or line breaks; no formula start).
 */
void kn_sim_history_csv(json_t *jobs, json_t *nodes, struct kn_buf *pods,
			struct kn_buf *node_list, struct kn_sim_history *out);

#endif
