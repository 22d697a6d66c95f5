/*
 * pack: the openb cluster model, its fragmentation measure and the
 * placement loop every packing policy shares (METHOD.md §2.2-2.5).
 *
 * Speed comes from a score cache rather than from cleverer policies: a
 * cacheable policy's score depends only on the node's state and the pod's
 * (CPU, GPU count, milli), a trace has few such shapes (91 in openb's
 * default), and a placement changes one node. So each node carries a
 * version, bumped on every change, and the cache keeps per shape one
 * (version, score, GPU) entry per node; a placement costs one feasibility
 * pass over the nodes plus a fresh score for the nodes that changed since
 * the shape was last seen. Versions come from one cluster-wide clock, so
 * a reset or a change of policy or typical set invalidates everything by
 * advancing every node's version.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sched/pack_internal.h"

static void touch(struct kn_pack *c, struct pack_node *n)
{
	n->version = ++c->clock;
}

static void touch_all(struct kn_pack *c)
{
	for (size_t i = 0; i < c->n; i++)
		touch(c, &c->nodes[i]);
}

/* Recompute the per-node summaries the filters read. */
static void summarize(struct pack_node *n)
{
	n->idle = 0;
	n->n_full = 0;
	n->max_free = 0;
	for (int i = 0; i < n->n_gpus; i++) {
		n->idle += n->gpu_free[i];
		if (n->gpu_free[i] == PACK_MILLI)
			n->n_full++;
		if (n->gpu_free[i] > n->max_free)
			n->max_free = n->gpu_free[i];
	}
}

static int model_id(struct kn_pack *c, const char *model)
{
	for (int i = 0; i < c->n_models; i++)
		if (!strcmp(c->models[i], model))
			return i;
	if (c->n_models == KN_PACK_MAX_MODELS)
		return -1;
	c->models[c->n_models] = kn_xstrdup(model);
	return c->n_models++;
}

int kn_pack_new(const struct kn_pack_node_spec *nodes, size_t n,
		struct kn_pack **out, struct kn_error *err)
{
	struct kn_pack *c = kn_xcalloc(1, sizeof(*c));
	int rc = 0;

	c->n = n;
	c->nodes = kn_xcalloc(n ? n : 1, sizeof(*c->nodes));
	c->order = kn_xcalloc(n ? n : 1, sizeof(*c->order));
	for (size_t i = 0; i < n; i++) {
		const struct kn_pack_node_spec *s = &nodes[i];
		struct pack_node *node = &c->nodes[i];
		const char *name = s->name ? s->name : "?";

		c->order[i] = i;
		if (s->cpu_milli < 0 || s->memory_mib < 0) {
			rc = kn_errorf(err, KN_EINVAL, name,
				       "node %s: negative CPU or memory", name);
			goto out;
		}
		if (s->n_gpus < 0 || s->n_gpus > KN_PACK_MAX_GPUS) {
			rc = kn_errorf(err, KN_EINVAL, name,
				       "node %s: %d GPUs (0..%d)", name,
				       s->n_gpus, KN_PACK_MAX_GPUS);
			goto out;
		}
		node->name = kn_xstrdup(name);
		node->cpu_total = s->cpu_milli;
		node->mem_total = s->memory_mib;
		node->n_gpus = s->n_gpus;
		node->model = -1;
		if (s->n_gpus > 0) {
			if (!s->model || !s->model[0]) {
				rc = kn_errorf(err, KN_EINVAL, name,
					       "node %s: GPUs without a model",
					       name);
				goto out;
			}
			node->model = model_id(c, s->model);
			if (node->model < 0) {
				rc = kn_errorf(err, KN_EINVAL, name,
					       "node %s: more than %d GPU models",
					       name, KN_PACK_MAX_MODELS);
				goto out;
			}
		}
	}
	kn_pack_reset(c);
out:
	if (rc < 0) {
		kn_pack_free(c);
		return rc;
	}
	*out = c;
	return 0;
}

void kn_pack_free(struct kn_pack *c)
{
	if (!c)
		return;
	KN_ROWS_RELEASE(c->nodes, c->n, name);
	for (int i = 0; i < c->n_models; i++)
		free(c->models[i]);
	KN_ROWS_RELEASE(c->shapes, c->n_shapes, entries);
	KN_FREE_ALL(c->typical, c->order, c);
}

size_t kn_pack_n_nodes(const struct kn_pack *c)
{
	return c->n;
}

int64_t kn_pack_gpu_capacity(const struct kn_pack *c)
{
	int64_t total = 0;

	for (size_t i = 0; i < c->n; i++)
		total += (int64_t)c->nodes[i].n_gpus * PACK_MILLI;
	return total;
}

uint64_t kn_pack_models(const struct kn_pack *c, const char *spec,
			bool *constrained)
{
	uint64_t mask = 0;
	const char *p = spec;

	*constrained = spec && spec[0];
	while (p && *p) {
		const char *end = strchr(p, '|');
		size_t len = end ? (size_t)(end - p) : strlen(p);

		for (int i = 0; i < c->n_models; i++)
			if (strlen(c->models[i]) == len &&
			    !strncmp(c->models[i], p, len))
				mask |= (uint64_t)1 << i;
		p = end ? end + 1 : NULL;
	}
	return mask;
}

char *kn_pack_gpu_spec(const struct kn_pack_node_spec *nodes, size_t n,
		       const struct kn_sched_shape *shape)
{
	struct kn_buf b;
	char *out;

	kn_buf_init(&b, SIZE_MAX);
	for (size_t i = 0; i < n; i++) {
		const char *model = nodes[i].model;
		bool seen = false, accepted = false;

		if (!model || !*model)
			continue;
		for (size_t k = 0; k < i && !seen; k++)
			seen = nodes[k].model && !strcmp(nodes[k].model, model);
		for (size_t w = 0; w < shape->n_gpu_models && !accepted; w++)
			accepted = kn_sched_model_accepts(shape->gpu_models[w],
							  model);
		if (!seen && accepted)
			kn_buf_printf(&b, "%s%s", b.len ? "|" : "", model);
	}
	if (!b.len)
		for (size_t w = 0; w < shape->n_gpu_models; w++)
			kn_buf_printf(&b, "%s%s", b.len ? "|" : "",
				      shape->gpu_models[w]);
	out = kn_xstrdup(b.data ? b.data : "");
	kn_buf_release(&b);
	return out;
}

int kn_pack_check_pod(const struct kn_pack_pod *pod, struct kn_error *err)
{
	if (pod->cpu_milli < 0)
		return kn_errorf(err, KN_EINVAL, "cpu_milli",
				 "cpu_milli must be >= 0");
	if (pod->memory_mib < 0)
		return kn_errorf(err, KN_EINVAL, "memory_mib",
				 "memory_mib must be >= 0");
	if (pod->num_gpu < 0 || pod->num_gpu > KN_PACK_MAX_GPUS)
		return kn_errorf(err, KN_EINVAL, "num_gpu",
				 "num_gpu must be 0..%d", KN_PACK_MAX_GPUS);
	if (pod->num_gpu == 0 && pod->gpu_milli != 0)
		return kn_errorf(err, KN_EINVAL, "gpu_milli",
				 "gpu_milli must be 0 when num_gpu is 0");
	if (pod->num_gpu == 1 &&
	    (pod->gpu_milli < 1 || pod->gpu_milli > PACK_MILLI))
		return kn_errorf(err, KN_EINVAL, "gpu_milli",
				 "gpu_milli must be 1..1000 with one GPU");
	if (pod->num_gpu > 1 && pod->gpu_milli != PACK_MILLI)
		return kn_errorf(err, KN_EINVAL, "gpu_milli",
				 "gpu_milli must be 1000 with several GPUs");
	return 0;
}

/* The paper's key for the typical set; spec compares as a string. */
struct typical_count {
	int cpu, milli, num;
	const char *spec; /* "" when unconstrained */
	bool constrained;
	uint64_t models;
	size_t count;
};

static int typical_order(const void *pa, const void *pb)
{
	const struct typical_count *a = pa, *b = pb;
	int s;

	if (a->count != b->count)
		return a->count > b->count ? -1 : 1;
	if (a->cpu != b->cpu)
		return a->cpu > b->cpu ? -1 : 1;
	if (a->milli != b->milli)
		return a->milli > b->milli ? -1 : 1;
	if (a->num != b->num)
		return a->num > b->num ? -1 : 1;
	s = strcmp(a->spec, b->spec);
	return s > 0 ? -1 : s < 0 ? 1 : 0;
}

void kn_pack_set_typical(struct kn_pack *c, const struct kn_pack_pod *pods,
			 size_t n)
{
	kn_pack_set_typical_weighted(c, pods, NULL, n);
}

void kn_pack_set_typical_weighted(struct kn_pack *c,
				  const struct kn_pack_pod *pods,
				  const size_t *weights, size_t n)
{
	struct typical_count *counts = kn_xcalloc(n ? n : 1, sizeof(*counts));
	size_t n_counts = 0, covered = 0, kept = 0, n_pods = 0;
	double total = 0, cpu = 0, gpu = 0;

	for (size_t i = 0; i < n; i++) {
		const struct kn_pack_pod *p = &pods[i];
		const char *spec = p->gpu_spec ? p->gpu_spec : "";
		size_t j;

		for (j = 0; j < n_counts; j++)
			if (counts[j].cpu == p->cpu_milli &&
			    counts[j].milli == p->gpu_milli &&
			    counts[j].num == p->num_gpu &&
			    !strcmp(counts[j].spec, spec))
				break;
		if (j == n_counts) {
			counts[j].cpu = p->cpu_milli;
			counts[j].milli = p->gpu_milli;
			counts[j].num = p->num_gpu;
			counts[j].spec = spec;
			counts[j].constrained = p->constrained;
			counts[j].models = p->models;
			n_counts++;
		}
		counts[j].count += weights ? weights[i] : 1;
		n_pods += weights ? weights[i] : 1;
	}
	qsort(counts, n_counts, sizeof(*counts), typical_order);
	/* Stop once the kept shapes cover 95 % of the pods (integers: 20x). */
	while (kept < n_counts && covered * 20 < n_pods * 19)
		covered += counts[kept++].count;
	free(c->typical);
	c->typical = kn_xcalloc(kept ? kept : 1, sizeof(*c->typical));
	c->n_typical = kept;
	for (size_t i = 0; i < kept; i++)
		total += (double)counts[i].count;
	c->typical_cpu_per_gpu = 0;
	for (size_t i = 0; i < kept; i++) {
		c->typical[i].cpu = counts[i].cpu;
		c->typical[i].milli = counts[i].milli;
		c->typical[i].num = counts[i].num;
		c->typical[i].constrained = counts[i].constrained;
		c->typical[i].models = counts[i].models;
		c->typical[i].p = (double)counts[i].count / total;
		if (counts[i].milli > 0) {
			cpu += c->typical[i].p * counts[i].cpu;
			gpu += c->typical[i].p * counts[i].num *
			       counts[i].milli / PACK_MILLI;
		}
	}
	if (gpu > 0)
		c->typical_cpu_per_gpu = cpu / gpu;
	free(counts);
	touch_all(c);
}

size_t kn_pack_n_typical(const struct kn_pack *c)
{
	return c->n_typical;
}

int kn_pack_set_order(struct kn_pack *c, const size_t *order, size_t n)
{
	bool *seen;
	int rc = 0;

	if (n != c->n)
		return -EINVAL;
	seen = kn_xcalloc(n ? n : 1, sizeof(*seen));
	for (size_t i = 0; i < n; i++) {
		if (order[i] >= n || seen[order[i]]) {
			rc = -EINVAL;
			goto out;
		}
		seen[order[i]] = true;
	}
	memcpy(c->order, order, n * sizeof(*order));
out:
	free(seen);
	return rc;
}

void kn_pack_reset(struct kn_pack *c)
{
	for (size_t i = 0; i < c->n; i++) {
		struct pack_node *n = &c->nodes[i];

		n->cpu_free = n->cpu_total;
		n->mem_free = n->mem_total;
		for (int g = 0; g < n->n_gpus; g++)
			n->gpu_free[g] = PACK_MILLI;
		n->tags = 0;
		memset(n->kinds, 0, sizeof(n->kinds));
		summarize(n);
		touch(c, n);
	}
}

double pack_frag(const struct kn_pack *c, int cpu_free, const int *g, int n,
		 int model)
{
	double frag = 0;
	int idle = 0;

	for (int i = 0; i < n; i++)
		idle += g[i];
	if (idle == 0)
		return 0;
	for (size_t t = 0; t < c->n_typical; t++) {
		const struct pack_typical *m = &c->typical[t];
		int fits = 0, small = 0;

		/* CPU-only tasks and tasks barred from this model cannot use
		   any of the idle GPU. */
		if (m->milli == 0 ||
		    (m->constrained && !(m->models >> model & 1))) {
			frag += m->p * idle;
			continue;
		}
		for (int i = 0; i < n; i++) {
			if (g[i] >= m->milli)
				fits++;
			else
				small += g[i];
		}
		if (fits >= m->num && cpu_free >= m->cpu)
			frag += m->p * small;
		else
			frag += m->p * idle;
	}
	return frag;
}

double kn_pack_node_frag(const struct kn_pack *c, size_t node)
{
	const struct pack_node *n = &c->nodes[node];

	if (n->frag_version == n->version)
		return n->frag;
	return pack_frag(c, n->cpu_free, n->gpu_free, n->n_gpus, n->model);
}

double kn_pack_frag_milli(struct kn_pack *c)
{
	double total = 0;

	for (size_t i = 0; i < c->n; i++) {
		struct pack_node *n = &c->nodes[i];

		if (n->frag_version != n->version) {
			n->frag = pack_frag(c, n->cpu_free, n->gpu_free,
					    n->n_gpus, n->model);
			n->frag_version = n->version;
		}
		total += n->frag;
	}
	return total;
}

int64_t kn_pack_used_milli(const struct kn_pack *c)
{
	return kn_pack_gpu_capacity(c) - kn_pack_idle_milli(c);
}

int64_t kn_pack_idle_milli(const struct kn_pack *c)
{
	int64_t idle = 0;

	for (size_t i = 0; i < c->n; i++)
		idle += c->nodes[i].idle;
	return idle;
}

void kn_pack_node_state(const struct kn_pack *c, size_t node,
			struct kn_pack_node_state *out)
{
	const struct pack_node *n = &c->nodes[node];

	memset(out, 0, sizeof(*out));
	out->cpu_free = n->cpu_free;
	out->memory_free = n->mem_free;
	out->n_gpus = n->n_gpus;
	out->model = n->model;
	memcpy(out->gpu_free, n->gpu_free, sizeof(out->gpu_free));
	out->tags = n->tags;
}

static bool feasible(const struct pack_node *n, const struct kn_pack_pod *pod)
{
	if (n->cpu_free < pod->cpu_milli || n->mem_free < pod->memory_mib)
		return false;
	if (pod->num_gpu == 0)
		return true;
	if (n->n_gpus == 0)
		return false;
	if (pod->constrained && !(pod->models >> n->model & 1))
		return false;
	if (pod->num_gpu == 1)
		return n->max_free >= pod->gpu_milli;
	return n->n_full >= pod->num_gpu;
}

static struct pack_cache_shape *cache_shape(struct kn_pack *c,
					    const struct kn_pack_pod *pod)
{
	struct pack_cache_shape *s;

	for (size_t i = 0; i < c->n_shapes; i++) {
		s = &c->shapes[i];
		if (s->cpu == pod->cpu_milli && s->num == pod->num_gpu &&
		    s->milli == pod->gpu_milli)
			return s;
	}
	c->shapes = kn_xgrow(c->shapes, &c->cap_shapes, c->n_shapes,
			     sizeof(*c->shapes));
	s = &c->shapes[c->n_shapes++];
	s->cpu = pod->cpu_milli;
	s->num = pod->num_gpu;
	s->milli = pod->gpu_milli;
	/* Version 0 is never a node's, so every entry starts stale. */
	s->entries = kn_xcalloc(c->n ? c->n : 1, sizeof(*s->entries));
	return s;
}

/* The GPU positions a pod takes on node n under the policy's choice. */
static int choose_gpus(const struct pack_node *n,
		       const struct kn_pack_pod *pod,
		       enum kn_pack_gpu_choice choice, int scored_gpu,
		       struct kn_rng *rng, int *gpus)
{
	int k = 0, best = -1;

	if (pod->num_gpu == 0)
		return 0;
	if (pod->gpu_milli == PACK_MILLI) {
		for (int i = 0; i < n->n_gpus && k < pod->num_gpu; i++)
			if (n->gpu_free[i] == PACK_MILLI)
				gpus[k++] = i;
		return k;
	}
	if (choice == KN_PACK_GPU_SCORED && scored_gpu >= 0) {
		gpus[0] = scored_gpu;
		return 1;
	}
	if (choice == KN_PACK_GPU_RANDOM) {
		int fit = 0;

		/* Reservoir sampling: each fitting GPU kept with 1/fit. */
		for (int i = 0; i < n->n_gpus; i++)
			if (n->gpu_free[i] >= pod->gpu_milli &&
			    kn_rng_below(rng, (uint64_t)++fit) == 0)
				best = i;
	} else {
		for (int i = 0; i < n->n_gpus; i++)
			if (n->gpu_free[i] >= pod->gpu_milli &&
			    (best < 0 || n->gpu_free[i] < n->gpu_free[best]))
				best = i;
	}
	gpus[0] = best;
	return 1;
}

/* The pod's kind as a tag bit: 0 for a share, k for k whole GPUs. */
static int kind(const struct kn_pack_pod *pod)
{
	return pod->gpu_milli < PACK_MILLI ? 0 : pod->num_gpu;
}

/* Charge the pod (sign 1) or give its resources back (sign -1). */
static void charge(struct kn_pack *c, struct pack_node *n,
		   const struct kn_pack_pod *pod, const int *gpus, int n_gpus,
		   int sign)
{
	n->cpu_free -= sign * pod->cpu_milli;
	n->mem_free -= sign * pod->memory_mib;
	for (int g = 0; g < n_gpus; g++)
		n->gpu_free[gpus[g]] -= sign * pod->gpu_milli;
	if (pod->num_gpu > 0) {
		int k = kind(pod);

		n->kinds[k] += sign;
		if (n->kinds[k] > 0)
			n->tags |= 1u << k;
		else
			n->tags &= ~(1u << k);
	}
	summarize(n);
	touch(c, n);
}

int kn_pack_place(struct kn_pack *c, const struct kn_pack_policy *policy,
		  const struct kn_pack_pod *pod, struct kn_rng *rng,
		  struct kn_pack_placement *out)
{
	struct pack_cache_shape *shape = NULL;
	struct pack_node *n;
	int64_t best_score = 0;
	size_t best = SIZE_MAX;
	int best_gpu = -1;

	if (policy->cacheable) {
		if (c->cache_policy != policy) {
			c->cache_policy = policy;
			touch_all(c);
		}
		shape = cache_shape(c, pod);
	}
	for (size_t o = 0; o < c->n; o++) {
		size_t i = c->order[o];
		int64_t score;
		int gpu = -1;

		n = &c->nodes[i];
		if (!feasible(n, pod))
			continue;
		if (shape) {
			struct pack_cache_entry *e = &shape->entries[i];

			if (e->version != n->version) {
				e->score = policy->score(c, i, pod, rng, &gpu);
				e->gpu = (int8_t)gpu;
				e->version = n->version;
			}
			score = e->score;
			gpu = e->gpu;
		} else {
			score = policy->score(c, i, pod, rng, &gpu);
		}
		/* Strictly greater: ties stay with the earlier node. */
		if (best == SIZE_MAX || score > best_score) {
			best = i;
			best_score = score;
			best_gpu = gpu;
		}
	}
	if (best == SIZE_MAX)
		return -ENOSPC;
	n = &c->nodes[best];
	memset(out, 0, sizeof(*out));
	out->node = best;
	out->n_gpus = choose_gpus(n, pod, policy->gpu_choice, best_gpu, rng,
				  out->gpus);
	out->milli_per_gpu = pod->gpu_milli;
	charge(c, n, pod, out->gpus, out->n_gpus, 1);
	return 0;
}

int kn_pack_bind(struct kn_pack *c, size_t node,
		 const struct kn_pack_pod *pod, const int *gpus, int n_gpus)
{
	struct pack_node *n;

	if (node >= c->n || n_gpus != pod->num_gpu)
		return -EINVAL;
	n = &c->nodes[node];
	for (int i = 0; i < n_gpus; i++) {
		if (gpus[i] < 0 || gpus[i] >= n->n_gpus)
			return -EINVAL;
		for (int j = 0; j < i; j++)
			if (gpus[j] == gpus[i])
				return -EINVAL;
		if (pod->gpu_milli == PACK_MILLI &&
		    n->gpu_free[gpus[i]] != PACK_MILLI)
			return -EINVAL;
		if (n->gpu_free[gpus[i]] < pod->gpu_milli)
			return -ENOSPC;
	}
	if (!feasible(n, pod))
		return -ENOSPC;
	charge(c, n, pod, gpus, n_gpus, 1);
	return 0;
}

int kn_pack_unbind(struct kn_pack *c, const struct kn_pack_placement *where,
		   const struct kn_pack_pod *pod)
{
	struct pack_node *n;

	if (where->node >= c->n || where->n_gpus != pod->num_gpu)
		return -EINVAL;
	n = &c->nodes[where->node];
	if (n->cpu_free + pod->cpu_milli > n->cpu_total ||
	    n->mem_free + pod->memory_mib > n->mem_total ||
	    (pod->num_gpu > 0 && n->kinds[kind(pod)] == 0))
		return -EINVAL;
	for (int i = 0; i < where->n_gpus; i++) {
		int g = where->gpus[i];

		if (g < 0 || g >= n->n_gpus ||
		    n->gpu_free[g] + pod->gpu_milli > PACK_MILLI)
			return -EINVAL;
	}
	charge(c, n, pod, where->gpus, where->n_gpus, -1);
	return 0;
}
