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
 * pod list (name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec;
 * other columns ignored). Empty values and "nan" in model and gpu_spec
 * mean none. Errors: -ENOENT etc. when a file cannot be read, -EINVAL with
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

#endif
