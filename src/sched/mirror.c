/*
 * mirror: a kn_sched cluster seen as a kn_pack cluster, for one request.
 *
 * The packing policies (policy.c) score pack nodes; kn_sched_place keeps
 * its own model (labels, taints, MIG, CPU and memory, gangs). Rather than
 * teach every policy the richer model, each placement builds a pack
 * cluster that mirrors the GPUs this request could use, charged with what
 * the snapshot already holds, and keeps it charged as the gang's tasks are
 * placed. Building costs O(nodes x devices + workload) per placement,
 * small next to a job's start.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/mirror_internal.h"

#define MILLI 1000

/* Whole GPUs per task, or 1 for a share, 0 without GPUs. */
static int gpus_of(int gpu_milli)
{
	return gpu_milli >= MILLI ? gpu_milli / MILLI : gpu_milli > 0;
}

static bool usable(const struct kn_sched_request *req,
		   const struct kn_sched_device *dev)
{
	if (dev->mig)
		return false;
	if (!req->gpu_models || req->n_gpu_models == 0 || req->gpu_milli == 0)
		return true;
	for (size_t m = 0; m < req->n_gpu_models; m++)
		if (kn_sched_model_accepts(req->gpu_models[m], dev->model))
			return true;
	return false;
}

/* The workload's GPU shapes as the pack cluster's typical set. */
static void set_typical(struct kn_pack *pack,
			const struct kn_pack_node_spec *specs, size_t n_nodes,
			const struct kn_sched_packing *packing)
{
	size_t n = 0;
	struct kn_pack_pod *pods =
		kn_xcalloc(packing->n_workload + 1, sizeof(*pods));
	size_t *weights = kn_xcalloc(packing->n_workload + 1, sizeof(*weights));
	char **names = kn_xcalloc(packing->n_workload + 1, sizeof(*names));

	for (size_t i = 0; i < packing->n_workload; i++) {
		const struct kn_sched_shape *shape = &packing->workload[i];
		struct kn_pack_pod *p = &pods[n];
		int num = gpus_of(shape->gpu_milli);

		if (num == 0 || num > KN_PACK_MAX_GPUS)
			continue;
		p->num_gpu = num;
		p->gpu_milli = shape->gpu_milli >= MILLI ? MILLI
							 : shape->gpu_milli;
		weights[n] = shape->count ? shape->count : 1;
		if (shape->gpu_models && shape->n_gpu_models) {
			names[n] = kn_pack_gpu_spec(specs, n_nodes, shape);
			p->gpu_spec = names[n];
			p->models = kn_pack_models(pack, p->gpu_spec,
						   &p->constrained);
		}
		n++;
	}
	kn_pack_set_typical_weighted(pack, pods, weights, n);
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	KN_FREE_ALL(names, weights, pods);
}

/* Charge the devices' current use to pack node i. */
static void charge_node(struct mirror *m, const struct kn_sched_node *node,
			size_t i, int n_pos)
{
	for (int p = 0; p < n_pos; p++) {
		const struct kn_sched_device *dev =
			&node->devices[m->pos_device[i][p]];
		struct kn_pack_pod used = {.num_gpu = 1};
		int pos = p;

		used.gpu_milli = dev->used_milli > MILLI ? MILLI
							 : dev->used_milli;
		if (used.gpu_milli > 0)
			(void)kn_pack_bind(m->pack, i, &used, &pos, 1);
	}
}

int mirror_build(const struct kn_sched_cluster *cluster,
		 const struct kn_sched_request *req, struct mirror *m)
{
	const struct kn_sched_packing *packing = req->packing;
	struct kn_pack_node_spec *specs = NULL;
	int *n_pos = NULL;
	struct kn_error err;
	int rc = -1;

	memset(m, 0, sizeof(*m));
	if (!packing || !packing->policy || req->mig_profile ||
	    req->gpu_milli <= 0 || cluster->n_nodes == 0)
		return -1;
	specs = kn_xcalloc(cluster->n_nodes, sizeof(*specs));
	n_pos = kn_xcalloc(cluster->n_nodes, sizeof(*n_pos));
	m->pos_device = kn_xcalloc(cluster->n_nodes, sizeof(*m->pos_device));
	m->share_pos = kn_xcalloc(cluster->n_nodes, sizeof(*m->share_pos));
	for (size_t i = 0; i < cluster->n_nodes; i++) {
		const struct kn_sched_node *node = &cluster->nodes[i];

		m->share_pos[i] = -1;
		specs[i].name = node->name;
		/* GPUs only (see sched.h): a fixed CPU capacity nothing
		   charges, so CPU terms never decide. */
		specs[i].cpu_milli = 128000;
		for (size_t d = 0; d < node->n_devices; d++) {
			if (!usable(req, &node->devices[d]))
				continue;
			if (n_pos[i] == KN_PACK_MAX_GPUS)
				goto out;
			if (!specs[i].model)
				specs[i].model = node->devices[d].model
							 ? node->devices[d].model
							 : "unknown";
			m->pos_device[i][n_pos[i]++] = (int)d;
		}
		specs[i].n_gpus = n_pos[i];
	}
	if (kn_pack_new(specs, cluster->n_nodes, &m->pack, &err) < 0)
		goto out;
	set_typical(m->pack, specs, cluster->n_nodes, packing);
	for (size_t i = 0; i < cluster->n_nodes; i++)
		charge_node(m, &cluster->nodes[i], i, n_pos[i]);
	m->pod.num_gpu = gpus_of(req->gpu_milli);
	m->pod.gpu_milli = req->gpu_milli >= MILLI ? MILLI : req->gpu_milli;
	m->policy = packing->policy;
	kn_rng_seed(&m->rng, packing->seed);
	rc = 0;
out:
	KN_FREE_ALL(specs, n_pos);
	if (rc < 0)
		mirror_release(m);
	return rc;
}

void mirror_release(struct mirror *m)
{
	kn_pack_free(m->pack);
	KN_FREE_ALL(m->pos_device, m->share_pos);
	memset(m, 0, sizeof(*m));
}

int64_t mirror_score(struct mirror *m, size_t node)
{
	int gpu = -1;
	int64_t score = m->policy->score(m->pack, node, &m->pod, &m->rng, &gpu);

	m->share_pos[node] =
		m->policy->gpu_choice == KN_PACK_GPU_SCORED ? gpu : -1;
	return score;
}

void mirror_charge(struct mirror *m, const struct kn_sched_cluster *cluster,
		   const struct kn_sched_binding *b)
{
	const struct kn_sched_node *node = &cluster->nodes[b->node];
	struct kn_pack_node_state st;
	int pos[KN_PACK_MAX_GPUS], n = 0;

	kn_pack_node_state(m->pack, b->node, &st);
	for (int k = 0; k < b->n_devices; k++)
		for (int p = 0; p < st.n_gpus; p++)
			if (node->devices[m->pos_device[b->node][p]].index ==
				    b->devices[k] &&
			    n < KN_PACK_MAX_GPUS)
				pos[n++] = p;
	if (n == m->pod.num_gpu)
		(void)kn_pack_bind(m->pack, b->node, &m->pod, pos, n);
}
