/*
 * coll: collective operations (all-reduce, all-gather, reduce-scatter,
 * broadcast, reduce, all-to-all, send/receive) over interchangeable
 * backends, with the data types and reduction operators nccl-tests names.
 *
 * A world is a set of ranks reached through one backend:
 *   - "cpu": N threads of this process over shared memory (the default);
 *   - "mpi": one rank per process, across processes and hosts, through
 *     OpenMPI's libmpi.so.40 opened with dlopen (start with mpirun);
 *   - "nccl": one rank per GPU of this process, through libnccl.so.2 and
 *     libcudart opened with dlopen.
 * Backends the machine lacks fail kn_coll_world_new with a message saying
 * what is missing; the kiln binary never links them.
 *
 * Ranks run on their own threads: kn_coll_run calls a function once per
 * rank of this process, each with its kn_coll_comm, and every rank of the
 * world must issue the same collectives in the same order with the same
 * count, type, operator and root (as with MPI and NCCL).
 *
 * Buffers come from kn_coll_mem_alloc, since a GPU backend's live on the
 * device; kn_coll_mem_write/read move bytes between them and the host.
 * In place follows NCCL: all_reduce, broadcast, reduce, alltoall and
 * sendrecv with send == recv; all_gather with send == recv + rank * count;
 * reduce_scatter with recv == send + rank * count.
 */
#ifndef KILN_COLL_H
#define KILN_COLL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

enum kn_coll_type {
	KN_COLL_INT8,
	KN_COLL_UINT8,
	KN_COLL_INT32,
	KN_COLL_UINT32,
	KN_COLL_INT64,
	KN_COLL_UINT64,
	KN_COLL_HALF,     /* IEEE 754 binary16 */
	KN_COLL_FLOAT,
	KN_COLL_DOUBLE,
	KN_COLL_BFLOAT16, /* the top 16 bits of a float */
	KN_COLL_N_TYPES,
};

enum kn_coll_op {
	KN_COLL_SUM,
	KN_COLL_PROD,
	KN_COLL_MIN,
	KN_COLL_MAX,
	KN_COLL_AVG, /* sum divided by the rank count (integers truncate) */
	KN_COLL_N_OPS,
};

enum kn_coll_kind {
	KN_COLL_ALL_REDUCE,
	KN_COLL_ALL_GATHER,
	KN_COLL_REDUCE_SCATTER,
	KN_COLL_BROADCAST,
	KN_COLL_REDUCE,
	KN_COLL_ALLTOALL,
	KN_COLL_SENDRECV, /* rank r sends to r+1 and receives from r-1 */
	KN_COLL_N_KINDS,
};

/* nccl-tests' names: "int8" ... "bfloat16", "sum" ... "avg". */
const char *kn_coll_type_name(enum kn_coll_type t);
size_t kn_coll_type_size(enum kn_coll_type t);
const char *kn_coll_op_name(enum kn_coll_op op);
/* "all_reduce", "all_gather", ..., "sendrecv". */
const char *kn_coll_kind_name(enum kn_coll_kind kind);
/* Name to value; -EINVAL (err names the field and the choices) if none. */
int kn_coll_type_parse(const char *name, enum kn_coll_type *out,
		       struct kn_error *err);
int kn_coll_op_parse(const char *name, enum kn_coll_op *out,
		     struct kn_error *err);
int kn_coll_kind_parse(const char *name, enum kn_coll_kind *out,
		       struct kn_error *err);
/* Whether the collective combines values with an operator. */
bool kn_coll_kind_reduces(enum kn_coll_kind kind);
/* Whether it has a root rank (broadcast, reduce). */
bool kn_coll_kind_rooted(enum kn_coll_kind kind);

/*
 * Element counts of a collective whose per-rank count is count:
 * *send_count and *recv_count are what each rank's buffers hold.
 */
void kn_coll_counts(enum kn_coll_kind kind, size_t count, int nranks,
		    size_t *send_count, size_t *recv_count);

/* ---- worlds and ranks ---- */

struct kn_coll_world;
struct kn_coll_comm;

/*
 * Open a world on backend "cpu", "mpi" or "nccl" with local_ranks ranks
 * in this process (cpu: threads; nccl: GPUs 0..local_ranks-1; mpi: must be
 * 1, the world being every process mpirun started). -EINVAL for a bad
 * backend or rank count, -ENOENT when the backend's library is missing,
 * -EIO when it refuses to start; err says which.
 */
int kn_coll_world_new(const char *backend, int local_ranks,
		      struct kn_coll_world **out, struct kn_error *err);
/* Ends the backend (MPI_Finalize, NCCL communicators). NULL is fine. */
void kn_coll_world_free(struct kn_coll_world *w);
/* Ranks in the whole world. */
int kn_coll_world_size(const struct kn_coll_world *w);

/*
 * Call fn(comm, arg) once for each rank of this process, each on its own
 * thread, and wait for all. Returns 0, or the first non-zero value a rank
 * returned. A rank that fails must still make the calls the other ranks
 * expect, or they wait for it forever.
 */
typedef int (*kn_coll_rank_fn)(struct kn_coll_comm *comm, void *arg);
int kn_coll_run(struct kn_coll_world *w, kn_coll_rank_fn fn, void *arg);

int kn_coll_rank(const struct kn_coll_comm *c);
int kn_coll_size(const struct kn_coll_comm *c);
/* The rank's place among this process's ranks, 0 first. */
int kn_coll_local_index(const struct kn_coll_comm *c);
/* What carries this rank, for humans: "cpu thread", "GPU 0 [0000:1b:00.0]". */
void kn_coll_describe(const struct kn_coll_comm *c, char *buf, size_t len);

/*
 * Memory for buffers: host pages touched up front (huge pages when large)
 * on cpu and mpi, device memory on nccl. *out is set only on success.
 */
int kn_coll_mem_alloc(struct kn_coll_comm *c, size_t bytes, void **out,
		      struct kn_error *err);
void kn_coll_mem_free(struct kn_coll_comm *c, void *p, size_t bytes);
/* Copy between a host buffer and one from kn_coll_mem_alloc. */
int kn_coll_mem_write(struct kn_coll_comm *c, void *dst, const void *src,
		      size_t bytes, struct kn_error *err);
int kn_coll_mem_read(struct kn_coll_comm *c, void *dst, const void *src,
		     size_t bytes, struct kn_error *err);
/* Wait until this rank's collectives so far have completed (GPU streams). */
int kn_coll_sync(struct kn_coll_comm *c, struct kn_error *err);
/* Wait until every rank has reached this call. */
int kn_coll_barrier(struct kn_coll_comm *c, struct kn_error *err);

/* ---- collectives ---- */

/*
 * count is per rank as in NCCL: all_gather sends count and receives
 * count * size; reduce_scatter sends count * size and receives count;
 * alltoall sends and receives count * size, count to and from each rank.
 * root matters only to broadcast and reduce, op only to reducing
 * collectives. -EINVAL when ranks disagree on the arguments or the
 * backend cannot take them (err says why); -EIO on backend failure.
 */
struct kn_coll_args {
	enum kn_coll_kind kind;
	const void *send;
	void *recv;
	size_t count;
	enum kn_coll_type type;
	enum kn_coll_op op;
	int root;
};

int kn_coll_call(struct kn_coll_comm *c, const struct kn_coll_args *a,
		 struct kn_error *err);

int kn_coll_all_reduce(struct kn_coll_comm *c, const void *send, void *recv,
		       size_t count, enum kn_coll_type type,
		       enum kn_coll_op op, struct kn_error *err);
int kn_coll_all_gather(struct kn_coll_comm *c, const void *send, void *recv,
		       size_t count, enum kn_coll_type type,
		       struct kn_error *err);
int kn_coll_broadcast(struct kn_coll_comm *c, const void *send, void *recv,
		      size_t count, enum kn_coll_type type, int root,
		      struct kn_error *err);

/* ---- test data ---- */

/*
 * The input rank `rank` of nranks gives to collective a (a->count per
 * rank): kn_coll_counts' send_count elements into host buffer buf. Values
 * are small and chosen so that every operator's result is exact in every
 * type (products stay at 1 or 2).
 */
void kn_coll_fill(const struct kn_coll_args *a, int rank, int nranks,
		  void *buf);
/*
 * How many of the recv_count elements in result (a host copy of rank
 * `rank`'s output) differ from what kn_coll_fill's inputs must give.
 * Integers must match exactly, floating types within their precision.
 * Ranks other than the root of a reduce have no output: 0.
 */
size_t kn_coll_count_wrong(const struct kn_coll_args *a, int rank,
			   int nranks, const void *result);

/* ---- elementwise kernels (exposed for their tests) ---- */

/* dst[i] = a[i] op b[i]; dst may alias a or b. AVG sums here. */
void kn_coll_reduce_pair(void *dst, const void *a, const void *b, size_t n,
			 enum kn_coll_type t, enum kn_coll_op op);
/* dst[i] /= divisor: the last step of AVG. */
void kn_coll_divide(void *dst, size_t n, enum kn_coll_type t, int divisor);
/* IEEE binary16 and bfloat16 conversions, rounding to nearest even. */
float kn_coll_half_to_float(uint16_t h);
uint16_t kn_coll_float_to_half(float f);
float kn_coll_bf16_to_float(uint16_t h);
uint16_t kn_coll_float_to_bf16(float f);

#endif
