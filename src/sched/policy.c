/*
 * policy: the scoring rules of the FGD paper's simulator (METHOD.md §2.6)
 * and kiln's own, behind struct kn_pack_policy.
 *
 * The paper's rules are copied in their arithmetic, not just in spirit:
 * Go's int64() truncation toward zero, integer division where the Go code
 * divides integers, float64 where it uses floats. That truncation is what
 * makes most of their ties, and ties go to the per-seed node order, so a
 * rounding difference would change the published curves.
 *
 * Best-fit's min-max normalisation over the feasible nodes is left out:
 * with nodes of at most 128 CPUs and 8 GPUs the raw score lies in 0..100,
 * the mapping (s - lo) * 100 / (hi - lo) is then strictly increasing, and
 * the argmax and its ties are those of the raw score.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sched/pack_internal.h"

#define MAX_NODE_SCORE 100
#define MAX_SPEC_CPU 128000.0
#define MAX_SPEC_GPU 8000.0

static int64_t random_score(const struct kn_pack *c, size_t node,
			    const struct kn_pack_pod *pod, struct kn_rng *rng,
			    int *gpu)
{
	/* The argmax of independent uniform draws is a uniform choice
	   among the feasible nodes, as the paper's PreScore makes. */
	return (int64_t)(kn_rng_next(rng) >> 1);
}

static int64_t dot_product_score(const struct kn_pack *c, size_t node,
				 const struct kn_pack_pod *pod,
				 struct kn_rng *rng, int *gpu)
{
	const struct pack_node *n = &c->nodes[node];
	double dot = (n->cpu_free / MAX_SPEC_CPU) *
			     (pod->cpu_milli / MAX_SPEC_CPU) +
		     (n->idle / MAX_SPEC_GPU) *
			     ((double)pod->num_gpu * pod->gpu_milli /
			      MAX_SPEC_GPU);

	return (int64_t)(MAX_NODE_SCORE * (1 - dot / 2));
}

static int64_t gpu_clustering_score(const struct kn_pack *c, size_t node,
				    const struct kn_pack_pod *pod,
				    struct kn_rng *rng, int *gpu)
{
	const struct pack_node *n = &c->nodes[node];
	unsigned tag;
	int64_t base;

	if (pod->num_gpu == 0)
		return 0;
	tag = pod->gpu_milli < PACK_MILLI ? 1u : 1u << pod->num_gpu;
	base = 25 * (8000 - (int64_t)n->idle) / 8000;
	if (n->tags == tag)
		return base + 75;
	if (n->tags & tag)
		return base + 50;
	if (n->tags == 0)
		return base + 25;
	return base;
}

/* GPU positions sorted by free milli, ascending; equal ones by position. */
static void sort_by_free(const struct pack_node *n, int *idx)
{
	for (int i = 0; i < n->n_gpus; i++) {
		int j = i;

		while (j > 0 && n->gpu_free[idx[j - 1]] > n->gpu_free[i]) {
			idx[j] = idx[j - 1];
			j--;
		}
		idx[j] = i;
	}
}

static int64_t gpu_packing_score(const struct kn_pack *c, size_t node,
				 const struct kn_pack_pod *pod,
				 struct kn_rng *rng, int *gpu)
{
	const struct pack_node *n = &c->nodes[node];
	int idx[KN_PACK_MAX_GPUS];
	int taken = 0, full_taken = 0;
	int64_t sum = 0;

	if (pod->num_gpu == 0)
		return 0;
	if (n->n_full == n->n_gpus)
		return 33 - n->n_gpus;
	sort_by_free(n, idx);
	for (int i = 0; i < n->n_gpus && taken < pod->num_gpu; i++) {
		int g = n->gpu_free[idx[i]];

		if (g < pod->gpu_milli)
			continue;
		taken++;
		if (g == PACK_MILLI)
			full_taken++;
		sum += (int64_t)g * 100 / PACK_MILLI;
	}
	if (full_taken > 0)
		return 50 - full_taken > 33 ? 50 - full_taken : 33;
	return 100 - sum / 10 > 50 ? 100 - sum / 10 : 50;
}

static int64_t best_fit_score(const struct kn_pack *c, size_t node,
			      const struct kn_pack_pod *pod,
			      struct kn_rng *rng, int *gpu)
{
	const struct pack_node *n = &c->nodes[node];
	double cpu_left = (n->cpu_free - pod->cpu_milli) / MAX_SPEC_CPU;
	double gpu_left = (n->idle - (double)pod->num_gpu * pod->gpu_milli) /
			  MAX_SPEC_GPU;

	return (int64_t)(MAX_NODE_SCORE *
			 (1 - (0.5 * cpu_left + 0.5 * gpu_left)));
}

static double sigmoid(double x)
{
	return 1 / (1 + exp(-x));
}

/*
 * The node's state after taking pod: CPU, and GPUs taken in ascending
 * free order among those that fit (whole GPUs: the lowest-indexed idle
 * ones), or GPU position share for a sharing pod.
 */
static void after(const struct pack_node *n, const struct kn_pack_pod *pod,
		  int share, int *cpu, int *g)
{
	int idx[KN_PACK_MAX_GPUS], taken = 0;

	*cpu = n->cpu_free - pod->cpu_milli;
	for (int i = 0; i < n->n_gpus; i++)
		g[i] = n->gpu_free[i];
	if (pod->num_gpu == 0)
		return;
	if (share >= 0) {
		g[share] -= pod->gpu_milli;
		return;
	}
	sort_by_free(n, idx);
	for (int i = 0; i < n->n_gpus && taken < pod->num_gpu; i++) {
		if (g[idx[i]] < pod->gpu_milli)
			continue;
		g[idx[i]] -= pod->gpu_milli;
		taken++;
	}
}

static bool is_share(const struct kn_pack_pod *pod)
{
	return pod->num_gpu == 1 && pod->gpu_milli < PACK_MILLI;
}

/* FGD's score for pod on n (on its GPU gpu, or -1 as after() spreads
   it): how much the fragmentation, before there, drops. */
static int64_t frag_drop_score(const struct kn_pack *c,
			       const struct pack_node *n,
			       const struct kn_pack_pod *pod, int gpu,
			       double before)
{
	int g[KN_PACK_MAX_GPUS], cpu;

	after(n, pod, gpu, &cpu, g);
	return (int64_t)(MAX_NODE_SCORE *
			 sigmoid((before - pack_frag(c, cpu, g, n->n_gpus,
						     n->model)) /
				 1000));
}

static int64_t fgd_score(const struct kn_pack *c, size_t node,
			 const struct kn_pack_pod *pod, struct kn_rng *rng,
			 int *gpu)
{
	const struct pack_node *n = &c->nodes[node];
	double before = pack_frag(c, n->cpu_free, n->gpu_free, n->n_gpus,
				  n->model);
	int64_t best = -1;

	if (!is_share(pod))
		return frag_drop_score(c, n, pod, -1, before);
	for (int i = 0; i < n->n_gpus; i++) {
		int64_t s;

		if (n->gpu_free[i] < pod->gpu_milli)
			continue;
		s = frag_drop_score(c, n, pod, i, before);
		if (s > best) {
			best = s;
			*gpu = i;
		}
	}
	return best;
}

static const struct kn_pack_policy kn_pack_random = {
	"random", "a uniformly random feasible node and GPU", false,
	KN_PACK_GPU_RANDOM, random_score,
};
static const struct kn_pack_policy kn_pack_dot_product = {
	"dot-product", "Tetris: least free resource along the pod's vector",
	true, KN_PACK_GPU_BEST, dot_product_score,
};
static const struct kn_pack_policy kn_pack_gpu_clustering = {
	"gpu-clustering", "nodes that already hold pods of the same kind",
	true, KN_PACK_GPU_BEST, gpu_clustering_score,
};
static const struct kn_pack_policy kn_pack_gpu_packing = {
	"gpu-packing", "shared GPUs, then used nodes, then untouched nodes",
	true, KN_PACK_GPU_BEST, gpu_packing_score,
};
static const struct kn_pack_policy kn_pack_best_fit = {
	"best-fit", "least CPU and GPU left after placing", true,
	KN_PACK_GPU_BEST, best_fit_score,
};
static const struct kn_pack_policy kn_pack_fgd = {
	"fgd", "fragmentation gradient descent (Weng et al., ATC'23)", true,
	KN_PACK_GPU_SCORED, fgd_score,
};

/*
 * Whether a CPU-only pod on n still leaves the node's idle GPUs the CPU
 * the typical workload asks with that much GPU. FGD cannot see that
 * CPU: it counts a GPU as lost only once some typical shape no longer
 * fits, and CPU taken above every shape's need scores as a tie, so
 * CPU-only tasks (which any node with CPU can run) used to spend the
 * CPU that a node's last GPUs needed and leave them idle for good.
 */
static bool leaves_gpus_their_cpu(const struct kn_pack *c,
				  const struct pack_node *n,
				  const struct kn_pack_pod *pod)
{
	return n->cpu_free - pod->cpu_milli >=
	       n->idle / (double)PACK_MILLI * c->typical_cpu_per_gpu;
}

/*
 * kiln: FGD's score, then tie-breaks, each keeping for later what only
 * some later task can use.
 *
 * FGD's integer score leaves many ties (every change of expected
 * fragmentation under about 40 milli-GPU scores the same), and the paper
 * hands them to the random node order. Among FGD's ties kiln prefers
 * (1) for a CPU-only task, a node where it leaves the idle GPUs the CPU
 * the typical workload needs to use them (above); then (2) a node that
 * already holds work over an untouched one: an untouched node is the
 * only place an 8-GPU task fits and the safest home for whole-GPU
 * tasks; then (3) for a GPU share, a GPU that is already shared over an
 * idle one: an idle GPU is the only place a whole-GPU task (most of the
 * GPU requested in a typical trace) can go. Within a node the share
 * takes the best-scoring GPU, an already shared one on ties. Nothing
 * else is ranked: what FGD and these rules leave equal stays with the
 * random node order, which measured better than the finer deterministic
 * orders tried (docs/scheduling.md). It uses what FGD uses, the node's
 * state and the typical workload, and has no constant of its own.
 */
static int64_t kiln_score(const struct kn_pack *c, size_t node,
			  const struct kn_pack_pod *pod, struct kn_rng *rng,
			  int *gpu)
{
	const struct pack_node *n = &c->nodes[node];
	int used = !(n->n_full == n->n_gpus && n->cpu_free == n->cpu_total);
	double before;
	int64_t best = -1;

	if (pod->num_gpu == 0)
		return 8 * fgd_score(c, node, pod, rng, gpu) +
		       4 * leaves_gpus_their_cpu(c, n, pod) + 2 * used;
	if (!is_share(pod))
		return 4 * fgd_score(c, node, pod, rng, gpu) + 2 * used;
	before = pack_frag(c, n->cpu_free, n->gpu_free, n->n_gpus, n->model);
	for (int i = 0; i < n->n_gpus; i++) {
		int shared = n->gpu_free[i] < PACK_MILLI;
		int64_t key;

		if (n->gpu_free[i] < pod->gpu_milli)
			continue;
		key = 4 * frag_drop_score(c, n, pod, i, before) + shared;
		if (key > best) {
			best = key;
			*gpu = i;
		}
	}
	/* best is 4 * fgd + shared: put used between the two. */
	return best - best % 4 + 2 * used + best % 4;
}

static const struct kn_pack_policy kn_pack_kiln = {
	"kiln",
	"FGD; ties: CPU the idle GPUs need, used nodes, shared GPUs (default)",
	true,
	KN_PACK_GPU_SCORED, kiln_score,
};

const struct kn_pack_policy *const kn_pack_policies[] = {
	&kn_pack_random,     &kn_pack_dot_product, &kn_pack_gpu_clustering,
	&kn_pack_gpu_packing, &kn_pack_best_fit,   &kn_pack_fgd,
	&kn_pack_kiln,       NULL,
};

const struct kn_pack_policy *kn_pack_policy_find(const char *name)
{
	for (size_t i = 0; kn_pack_policies[i]; i++)
		if (!strcmp(kn_pack_policies[i]->name, name))
			return kn_pack_policies[i];
	return NULL;
}
