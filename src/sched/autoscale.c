/*
 * The autoscaler's decision: which pools grow, which idle nodes go. Pure:
 * the server (pools.c) gathers the queue, the pools and the nodes' idle
 * times, and applies the plan through a provider.
 *
 * Scale-up works on a scratch cluster of the nodes still coming (being
 * provisioned, or added earlier in this round), so jobs that a coming
 * node will hold ask for nothing more: the autoscaler never overshoots
 * while providers are slow.
 */
#include "sched/sched.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The scratch cluster of nodes coming up. */
struct coming {
	struct kn_sched_cluster cluster;
	size_t cap;
	/* Per node: its pool, or -1 for one already being provisioned. */
	long *added_to;
};

static void coming_push(struct coming *c, const struct kn_sched_node *shape,
			long added_to)
{
	struct kn_sched_node *n;

	if (c->cluster.n_nodes == c->cap) {
		c->cap = c->cap ? 2 * c->cap : 8;
		c->cluster.nodes = kn_xrealloc(c->cluster.nodes,
					       c->cap * sizeof(*n));
		c->added_to = kn_xrealloc(c->added_to,
					  c->cap * sizeof(*c->added_to));
	}
	c->added_to[c->cluster.n_nodes] = added_to;
	n = &c->cluster.nodes[c->cluster.n_nodes++];
	*n = *shape;
	n->schedulable = true;
	n->cpu_milli_used = 0;
	n->memory_used = 0;
	n->devices = kn_xcalloc(shape->n_devices ? shape->n_devices : 1,
				sizeof(*n->devices));
	for (size_t d = 0; d < shape->n_devices; d++) {
		n->devices[d] = shape->devices[d];
		n->devices[d].used_milli = 0;
		n->devices[d].n_mig_slices = 0;
	}
}

static void coming_truncate(struct coming *c, size_t n)
{
	while (c->cluster.n_nodes > n)
		free(c->cluster.nodes[--c->cluster.n_nodes].devices);
}

/* Lower ranks first: the pools a job tries, in order. */
static int pool_rank(const struct kn_autoscale_pool *p, bool preemptible)
{
	/* Spot suits work that survives an eviction; the rest would lose
	   it, so it goes on demand while it can. */
	return p->spot == preemptible ? 0 : 1;
}

static bool pool_before(const struct kn_autoscale_pool *a, size_t ia,
			const struct kn_autoscale_pool *b, size_t ib,
			bool preemptible)
{
	int ra = pool_rank(a, preemptible), rb = pool_rank(b, preemptible);
	bool pa = a->gpu_hour_price >= 0, pb = b->gpu_hour_price >= 0;

	if (ra != rb)
		return ra < rb;
	if (pa != pb)
		return pa;
	if (pa && a->gpu_hour_price != b->gpu_hour_price)
		return a->gpu_hour_price < b->gpu_hour_price;
	return ia < ib;
}

static void describe(const struct kn_sched_request *req, char *buf,
		     size_t len)
{
	if (req->mig_profile)
		snprintf(buf, len, "%d task%s x MIG %s", req->tasks,
			 req->tasks == 1 ? "" : "s", req->mig_profile);
	else if (req->gpu_milli >= 1000)
		snprintf(buf, len, "%d task%s x %d GPU%s", req->tasks,
			 req->tasks == 1 ? "" : "s", req->gpu_milli / 1000,
			 req->gpu_milli == 1000 ? "" : "s");
	else if (req->gpu_milli > 0)
		snprintf(buf, len, "%d task%s x %d milli-GPU", req->tasks,
			 req->tasks == 1 ? "" : "s", req->gpu_milli);
	else
		snprintf(buf, len, "%d CPU task%s", req->tasks,
			 req->tasks == 1 ? "" : "s");
}

/* Try pool p for job j: 0 and the nodes added, or -1 with none kept. */
static int grow_for(struct coming *c, const struct kn_autoscale_pool *p,
		    long pool, int room, const struct kn_autoscale_job *j,
		    struct kn_sched_binding *bindings)
{
	size_t before = c->cluster.n_nodes;

	for (int k = 1; k <= room; k++) {
		coming_push(c, p->shape, pool);
		if (kn_sched_place(&c->cluster, j->req, bindings, NULL, 0) == 0)
			return k;
	}
	coming_truncate(c, before);
	return -1;
}

static void scale_up(const struct kn_autoscale_pool *pools, size_t n_pools,
		     const struct kn_autoscale_job *jobs, size_t n_jobs,
		     int *add, char (*why)[KN_AUTOSCALE_WHY_LEN],
		     char *blocked)
{
	struct coming c = {0};
	size_t *order = kn_xcalloc(n_pools ? n_pools : 1, sizeof(*order));
	/* Per pool: the jobs it grows for, and the first one in words. */
	int *n_for = kn_xcalloc(n_pools ? n_pools : 1, sizeof(*n_for));
	char (*first)[96] = kn_xcalloc(n_pools ? n_pools : 1, sizeof(*first));

	for (size_t p = 0; p < n_pools; p++) {
		int have = pools[p].current + pools[p].provisioning;

		for (int k = 0; k < pools[p].provisioning; k++)
			coming_push(&c, pools[p].shape, -1);
		if (have < pools[p].min) {
			add[p] = pools[p].min - have;
			for (int k = 0; k < add[p]; k++)
				coming_push(&c, pools[p].shape, -1);
			snprintf(why[p], KN_AUTOSCALE_WHY_LEN,
				 "+%d: %d up or coming, below min %d", add[p],
				 have, pools[p].min);
		}
	}
	for (size_t i = 0; i < n_jobs; i++) {
		const struct kn_autoscale_job *j = &jobs[i];
		struct kn_sched_binding *bindings =
			kn_xcalloc((size_t)j->req->tasks, sizeof(*bindings));
		bool placed;
		char what[64];

		placed = kn_sched_place(&c.cluster, j->req, bindings, NULL, 0) ==
			 0;
		/* On a node added for an earlier job: one more it grows for. */
		if (placed && c.added_to[bindings[0].node] >= 0)
			n_for[c.added_to[bindings[0].node]]++;
		/* Insertion sort of the pools by this job's preference. */
		for (size_t p = 0; p < n_pools; p++) {
			size_t k = p;

			while (k > 0 && pool_before(&pools[p], p,
						    &pools[order[k - 1]],
						    order[k - 1], j->preemptible)) {
				order[k] = order[k - 1];
				k--;
			}
			order[k] = p;
		}
		for (size_t o = 0; !placed && o < n_pools; o++) {
			size_t p = order[o];
			int room = pools[p].max - pools[p].current -
				   pools[p].provisioning - add[p];
			int k = room > 0 ? grow_for(&c, &pools[p], (long)p,
						    room, j, bindings)
					 : -1;

			if (k < 0)
				continue;
			add[p] += k;
			placed = true;
			if (n_for[p]++ == 0) {
				describe(j->req, what, sizeof(what));
				snprintf(first[p], sizeof(first[p]),
					 "job %lld (%s%s)", (long long)j->id,
					 what,
					 j->preemptible ? ", preemptible" : "");
			}
		}
		if (!placed && !blocked[0]) {
			describe(j->req, what, sizeof(what));
			snprintf(blocked, KN_AUTOSCALE_WHY_LEN,
				 "job %lld (%s) fits no pool's new node within "
				 "its max",
				 (long long)j->id, what);
		}
		free(bindings);
	}
	for (size_t p = 0; p < n_pools; p++) {
		if (n_for[p] == 1)
			snprintf(why[p], KN_AUTOSCALE_WHY_LEN,
				 "+%d: %s fits no node up or coming", add[p],
				 first[p]);
		else if (n_for[p] > 1)
			snprintf(why[p], KN_AUTOSCALE_WHY_LEN,
				 "+%d: %d queued jobs fit no node up or coming, "
				 "the first %s",
				 add[p], n_for[p], first[p]);
	}
	coming_truncate(&c, 0);
	KN_FREE_ALL(c.cluster.nodes, c.added_to, order, n_for, first);
}

static void scale_down(const struct kn_autoscale_pool *pools, size_t n_pools,
		       const struct kn_autoscale_node *nodes, size_t n_nodes,
		       int64_t now, const int *add, bool *remove,
		       char (*why)[KN_AUTOSCALE_WHY_LEN])
{
	for (size_t p = 0; p < n_pools; p++) {
		int left = pools[p].current, removed = 0;

		if (add[p] > 0)
			continue;
		while (left > pools[p].min) {
			size_t oldest = n_nodes;

			for (size_t i = 0; i < n_nodes; i++)
				if (nodes[i].pool == p && !remove[i] &&
				    nodes[i].idle_since > 0 &&
				    now - nodes[i].idle_since >=
					    pools[p].scale_down_delay_ms &&
				    (oldest == n_nodes ||
				     nodes[i].idle_since <
					     nodes[oldest].idle_since))
					oldest = i;
			if (oldest == n_nodes)
				break;
			remove[oldest] = true;
			removed++;
			left--;
		}
		if (removed)
			snprintf(why[p], KN_AUTOSCALE_WHY_LEN,
				 "-%d: idle longer than %llds, %d left (min %d)",
				 removed,
				 (long long)(pools[p].scale_down_delay_ms / 1000),
				 left, pools[p].min);
	}
}

void kn_autoscale_plan(const struct kn_autoscale_pool *pools, size_t n_pools,
		       const struct kn_autoscale_job *jobs, size_t n_jobs,
		       const struct kn_autoscale_node *nodes, size_t n_nodes,
		       int64_t now, int *add, bool *remove,
		       char (*why)[KN_AUTOSCALE_WHY_LEN],
		       char blocked[KN_AUTOSCALE_WHY_LEN])
{
	for (size_t p = 0; p < n_pools; p++) {
		add[p] = 0;
		why[p][0] = '\0';
	}
	for (size_t i = 0; i < n_nodes; i++)
		remove[i] = false;
	blocked[0] = '\0';
	scale_up(pools, n_pools, jobs, n_jobs, add, why, blocked);
	scale_down(pools, n_pools, nodes, n_nodes, now, add, remove, why);
}
