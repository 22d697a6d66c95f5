/*
 * The pack cluster's insides, shared by pack.c (model, cache, placement)
 * and policy.c (scoring rules). Not part of the module's interface.
 */
#ifndef KILN_SCHED_PACK_INTERNAL_H
#define KILN_SCHED_PACK_INTERNAL_H

#include "sched/sched.h"

#define PACK_MILLI 1000

struct pack_node {
	char *name;
	int cpu_total, cpu_free;
	int64_t mem_total, mem_free;
	int n_gpus;
	int model; /* -1 without GPUs */
	int gpu_free[KN_PACK_MAX_GPUS];
	int idle;        /* sum of gpu_free */
	int n_full;      /* GPUs with all 1000 milli free */
	int max_free;    /* largest gpu_free */
	unsigned tags;   /* bit 0: a sharing pod; bit k: a k-GPU pod */
	/* Pods of each kind (index as the tag bits), so a departure knows
	   when a tag goes. */
	int kinds[KN_PACK_MAX_GPUS + 1];
	uint32_t version;/* changes whenever the node does */
	uint32_t frag_version;
	double frag;     /* valid when frag_version == version */
};

/* One shape of the typical workload, with its renormalised weight. */
struct pack_typical {
	int cpu, milli, num;
	bool constrained;
	uint64_t models;
	double p;
};

struct pack_cache_entry {
	uint32_t version;
	int8_t gpu;
	int64_t score;
};

/* The scores of every node for one pod shape (CPU, GPU count, milli). */
struct pack_cache_shape {
	int cpu, num, milli;
	struct pack_cache_entry *entries; /* one per node */
};

struct kn_pack {
	struct pack_node *nodes;
	size_t n;
	size_t *order;
	char *models[KN_PACK_MAX_MODELS];
	int n_models;
	struct pack_typical *typical;
	size_t n_typical;
	/* CPU (milli) the typical workload asks per GPU it asks for: the
	   typical GPU shapes' CPU over their GPU, both weighted by p; 0
	   without GPU shapes. */
	double typical_cpu_per_gpu;
	uint32_t clock;
	const struct kn_pack_policy *cache_policy;
	struct pack_cache_shape *shapes;
	size_t n_shapes, cap_shapes;
};

/*
 * Fragmentation (milli-GPU) of a node with cpu_free and the GPUs' free
 * milli g[0..n-1] of the given model, against the typical set.
 */
double pack_frag(const struct kn_pack *c, int cpu_free, const int *g, int n,
		 int model);

#endif
