/*
 * Choosing preemption victims. Greedy then pruned: release the cheapest
 * candidates (lowest priority, then youngest: least work lost) one by one
 * on a private copy of the cluster until the request fits, then drop every
 * victim the rest make unnecessary. The exact minimum is a set-cover
 * problem; the greedy order already prefers the victims that cost least,
 * and the pruning removes what was over-taken. kn_sched_place_after
 * places the request for which the victims stop on the same kind of
 * copy, so what it will take is known before they are gone.
 */
#include "sched.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct copy {
	struct kn_sched_cluster cluster;
	struct kn_sched_node *nodes;
	struct kn_sched_device *devices;
};

static void copy_cluster(const struct kn_sched_cluster *src, struct copy *c)
{
	size_t total = 0, off = 0;

	for (size_t i = 0; i < src->n_nodes; i++)
		total += src->nodes[i].n_devices;
	c->nodes = kn_xcalloc(src->n_nodes ? src->n_nodes : 1,
			      sizeof(*c->nodes));
	c->devices = kn_xcalloc(total ? total : 1, sizeof(*c->devices));
	for (size_t i = 0; i < src->n_nodes; i++) {
		c->nodes[i] = src->nodes[i];
		memcpy(c->devices + off, src->nodes[i].devices,
		       src->nodes[i].n_devices * sizeof(*c->devices));
		c->nodes[i].devices = c->devices + off;
		off += src->nodes[i].n_devices;
	}
	c->cluster.nodes = c->nodes;
	c->cluster.n_nodes = src->n_nodes;
}

static void free_copy(struct copy *c)
{
	KN_FREE_ALL(c->nodes, c->devices);
}

/*
 * Place req on a copy of cluster without the chosen candidates (chosen
 * NULL: cands[0..n_chosen-1]; skip excepted): 0 with b, or -ENOSPC.
 */
static int place_without(const struct kn_sched_cluster *cluster,
			 const struct kn_sched_request *req,
			 const struct kn_sched_victim *cands,
			 const size_t *chosen, size_t n_chosen, size_t skip,
			 struct kn_sched_binding *b)
{
	struct copy c;
	int rc;

	copy_cluster(cluster, &c);
	for (size_t i = 0; i < n_chosen; i++) {
		const struct kn_sched_victim *v = &cands[chosen ? chosen[i] : i];

		if (i != skip)
			kn_sched_release(&c.cluster, v->req, v->bindings);
	}
	rc = kn_sched_place(&c.cluster, req, b, NULL, 0) == 0 ? 0 : -ENOSPC;
	free_copy(&c);
	return rc;
}

/* Does req fit once the chosen candidates (skip excepted) are gone? */
static bool fits_without(const struct kn_sched_cluster *cluster,
			 const struct kn_sched_request *req,
			 const struct kn_sched_victim *cands,
			 const size_t *chosen, size_t n_chosen, size_t skip)
{
	struct kn_sched_binding *b =
		kn_xcalloc((size_t)(req->tasks > 0 ? req->tasks : 1), sizeof(*b));
	bool ok = place_without(cluster, req, cands, chosen, n_chosen, skip,
				b) == 0;

	free(b);
	return ok;
}

int kn_sched_place_after(const struct kn_sched_cluster *cluster,
			 const struct kn_sched_request *req,
			 const struct kn_sched_victim *going, size_t n_going,
			 struct kn_sched_binding *bindings)
{
	return place_without(cluster, req, going, NULL, n_going, SIZE_MAX,
			     bindings);
}

static int cheaper_first(const void *a, const void *b, void *arg)
{
	const struct kn_sched_victim *cands = arg;
	const struct kn_sched_victim *x = &cands[*(const size_t *)a];
	const struct kn_sched_victim *y = &cands[*(const size_t *)b];

	if (x->priority != y->priority)
		return x->priority < y->priority ? -1 : 1;
	if (x->started_at != y->started_at)
		return x->started_at > y->started_at ? -1 : 1;
	return x->job_id > y->job_id ? -1 : x->job_id < y->job_id;
}

int kn_sched_find_victims(const struct kn_sched_cluster *cluster,
			  const struct kn_sched_request *req, int priority,
			  const struct kn_sched_victim *cands, size_t n,
			  size_t *victims, size_t *n_victims)
{
	size_t *order = kn_xcalloc(n ? n : 1, sizeof(*order));
	size_t n_order = 0, n_chosen = 0;
	bool fit = false;
	int rc = -ENOSPC;

	for (size_t i = 0; i < n; i++)
		if (cands[i].preemptible && cands[i].priority < priority)
			order[n_order++] = i;
	qsort_r(order, n_order, sizeof(*order), cheaper_first, (void *)cands);
	for (size_t i = 0; i < n_order && !fit; i++) {
		victims[n_chosen++] = order[i];
		fit = fits_without(cluster, req, cands, victims, n_chosen,
				   SIZE_MAX);
	}
	if (!fit)
		goto out;
	/* Prune, the most expensive first: keep the cheap victims. */
	for (size_t i = n_chosen; i-- > 0;) {
		if (!fits_without(cluster, req, cands, victims, n_chosen, i))
			continue;
		memmove(&victims[i], &victims[i + 1],
			(n_chosen - i - 1) * sizeof(*victims));
		n_chosen--;
	}
	*n_victims = n_chosen;
	rc = 0;
out:
	free(order);
	return rc;
}
