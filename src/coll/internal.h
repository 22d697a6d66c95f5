/*
 * coll internals: the backend ops table (one per backend, like curl's
 * vtls) and the world and rank structures the backends fill in.
 */
#ifndef KILN_COLL_INTERNAL_H
#define KILN_COLL_INTERNAL_H

#include "coll/coll.h"

struct kn_coll_backend {
	const char *name;
	/*
	 * Start the backend with local_ranks ranks here: set w->size,
	 * w->first_rank and w->priv, and each w->comms[i].priv. On failure
	 * leave nothing to close.
	 */
	int (*open)(struct kn_coll_world *w, int local_ranks,
		    struct kn_error *err);
	void (*close)(struct kn_coll_world *w);
	/* Called on a rank's own thread before its function runs. */
	int (*rank_start)(struct kn_coll_comm *c, struct kn_error *err);
	/* Arguments already checked for ranges by coll.c. */
	int (*call)(struct kn_coll_comm *c, const struct kn_coll_args *a,
		    struct kn_error *err);
	int (*barrier)(struct kn_coll_comm *c, struct kn_error *err);
	void (*describe)(const struct kn_coll_comm *c, char *buf, size_t len);
	/* Device memory; NULL for backends working on host memory. */
	int (*mem_alloc)(struct kn_coll_comm *c, size_t bytes, void **out,
			 struct kn_error *err);
	void (*mem_free)(struct kn_coll_comm *c, void *p, size_t bytes);
	int (*mem_copy)(struct kn_coll_comm *c, void *dst, const void *src,
			size_t bytes, bool to_device, struct kn_error *err);
	int (*sync)(struct kn_coll_comm *c, struct kn_error *err);
};

extern const struct kn_coll_backend kn_coll_cpu_backend;
extern const struct kn_coll_backend kn_coll_mpi_backend;
extern const struct kn_coll_backend kn_coll_nccl_backend;

struct kn_coll_comm {
	struct kn_coll_world *world;
	int rank;        /* in the world */
	int local_index; /* in this process */
	void *priv;
};

struct kn_coll_world {
	const struct kn_coll_backend *backend;
	int size;
	int local;
	int first_rank; /* world rank of comms[0] */
	struct kn_coll_comm *comms;
	void *priv;
};

/*
 * Host memory for buffers: anonymous pages, huge pages asked for when
 * large, every page touched here so that first-touch faults are paid once
 * at allocation and never inside a timed collective.
 */
int kn_coll_host_alloc(size_t bytes, void **out, struct kn_error *err);
void kn_coll_host_free(void *p, size_t bytes);

/* The reduction of a slice of n input buffers into dst, in place safe. */
void kn_coll_reduce_many(void *dst, const void *const *src, int n,
			 size_t count, enum kn_coll_type t,
			 enum kn_coll_op op);

#endif
