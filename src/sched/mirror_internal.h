/*
 * The packing mirror: a request's view of a kn_sched cluster as a kn_pack
 * cluster, so kn_sched_place can rank nodes with a packing policy
 * (req->packing) instead of its own best-fit rule. Shared by sched.c and
 * mirror.c only; not part of the module's interface.
 */
#ifndef KILN_SCHED_MIRROR_INTERNAL_H
#define KILN_SCHED_MIRROR_INTERNAL_H

#include "sched/sched.h"

struct mirror {
	struct kn_pack *pack;   /* node i of the cluster is pack node i */
	/* pos_device[i][p]: the position in nodes[i].devices of pack GPU p */
	int (*pos_device)[KN_PACK_MAX_GPUS];
	int *share_pos;         /* per node: the GPU position a share's
				   score chose, -1 for none */
	struct kn_pack_pod pod; /* the request, one task */
	const struct kn_pack_policy *policy;
	struct kn_rng rng;
};

/*
 * Build the mirror of cluster for req: 0, or -1 when req asks for no
 * packing, for no GPU, or cannot be mirrored (a MIG request, a node with
 * more usable GPUs than a pack node holds); the caller then ranks by best
 * fit.
 */
int mirror_build(const struct kn_sched_cluster *cluster,
		 const struct kn_sched_request *req, struct mirror *m);
void mirror_release(struct mirror *m);

/* The policy's score of node i (higher is better); sets share_pos[i]. */
int64_t mirror_score(struct mirror *m, size_t node);

/* Charge one placed task to the mirror as the snapshot was charged. */
void mirror_charge(struct mirror *m, const struct kn_sched_cluster *cluster,
		   const struct kn_sched_binding *b);

#endif
