/*
 * The nccl backend: one rank per GPU of this process (GPUs 0..n-1), each
 * driven by its own thread with its own stream, through libnccl.so.2 and
 * the CUDA runtime opened with dlopen, so kiln builds and runs where there
 * is neither. Untested on hardware so far: no GPU was available where it
 * was written; see docs/bench.md.
 *
 * Communicators come from ncclCommInitAll (one process; ranks across
 * hosts use the mpi backend). Buffers are device memory. alltoall and
 * sendrecv are grouped ncclSend/ncclRecv calls; in place, the input is
 * first copied to a scratch buffer on the device, since a rank would
 * otherwise overwrite blocks its peers have not read yet. The local
 * barrier is a pthread barrier after each rank has drained its stream.
 */
#include "coll/internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define NCCL_LIBRARY "libnccl.so.2"
/* cudaMemcpyKind values. */
#define CUDA_HOST_TO_DEVICE 1
#define CUDA_DEVICE_TO_HOST 2
#define CUDA_DEVICE_TO_DEVICE 3

static const char *const cudart_names[] = {
	"libcudart.so",      "libcudart.so.13", "libcudart.so.12",
	"libcudart.so.11.0", NULL,
};

typedef void *nccl_comm;
typedef void *cuda_stream;

struct nccl_api {
	void *cudart, *nccl;
	int (*cudaGetDeviceCount)(int *);
	int (*cudaSetDevice)(int);
	int (*cudaMalloc)(void **, size_t);
	int (*cudaFree)(void *);
	int (*cudaMemcpy)(void *, const void *, size_t, int);
	int (*cudaMemcpyAsync)(void *, const void *, size_t, int, cuda_stream);
	int (*cudaStreamCreate)(cuda_stream *);
	int (*cudaStreamDestroy)(cuda_stream);
	int (*cudaStreamSynchronize)(cuda_stream);
	int (*cudaDeviceGetPCIBusId)(char *, int, int);
	const char *(*cudaGetErrorString)(int);
	int (*ncclGetVersion)(int *);
	int (*ncclCommInitAll)(nccl_comm *, int, const int *);
	int (*ncclCommDestroy)(nccl_comm);
	const char *(*ncclGetErrorString)(int);
	int (*ncclGroupStart)(void);
	int (*ncclGroupEnd)(void);
	int (*ncclAllReduce)(const void *, void *, size_t, int, int, nccl_comm,
			     cuda_stream);
	int (*ncclAllGather)(const void *, void *, size_t, int, nccl_comm,
			     cuda_stream);
	int (*ncclReduceScatter)(const void *, void *, size_t, int, int,
				 nccl_comm, cuda_stream);
	int (*ncclBroadcast)(const void *, void *, size_t, int, int,
			     nccl_comm, cuda_stream);
	int (*ncclReduce)(const void *, void *, size_t, int, int, int,
			  nccl_comm, cuda_stream);
	int (*ncclSend)(const void *, size_t, int, int, nccl_comm, cuda_stream);
	int (*ncclRecv)(void *, size_t, int, int, nccl_comm, cuda_stream);
};

struct nccl_rank {
	nccl_comm comm;
	cuda_stream stream;
	void *scratch;
	size_t scratch_bytes;
};

struct nccl_world {
	struct nccl_api api;
	struct nccl_rank *ranks;
	pthread_barrier_t barrier;
	int version;
};

static int cuda_failed(const struct nccl_api *api, int code, const char *what,
		       struct kn_error *err)
{
	return kn_errorf(err, KN_EIO, NULL, "%s failed: %s", what,
			 api->cudaGetErrorString(code));
}

static int nccl_failed(const struct nccl_api *api, int code,
		       const char *what, struct kn_error *err)
{
	return kn_errorf(err, KN_EIO, NULL, "%s failed: %s", what,
			 api->ncclGetErrorString(code));
}

#define SYM(lib, name) {lib, #name, (void **)&api->name}

static int load_api(struct nccl_api *api, struct kn_error *err)
{
	const struct {
		int lib; /* 0 cudart, 1 nccl */
		const char *name;
		void **dest;
	} syms[] = {
		SYM(0, cudaGetDeviceCount),    SYM(0, cudaSetDevice),
		SYM(0, cudaMalloc),            SYM(0, cudaFree),
		SYM(0, cudaMemcpy),            SYM(0, cudaMemcpyAsync),
		SYM(0, cudaStreamCreate),      SYM(0, cudaStreamDestroy),
		SYM(0, cudaStreamSynchronize), SYM(0, cudaDeviceGetPCIBusId),
		SYM(0, cudaGetErrorString),    SYM(1, ncclGetVersion),
		SYM(1, ncclCommInitAll),       SYM(1, ncclCommDestroy),
		SYM(1, ncclGetErrorString),    SYM(1, ncclGroupStart),
		SYM(1, ncclGroupEnd),          SYM(1, ncclAllReduce),
		SYM(1, ncclAllGather),         SYM(1, ncclReduceScatter),
		SYM(1, ncclBroadcast),         SYM(1, ncclReduce),
		SYM(1, ncclSend),              SYM(1, ncclRecv),
	};

	for (int i = 0; cudart_names[i] && !api->cudart; i++)
		api->cudart = dlopen(cudart_names[i], RTLD_NOW | RTLD_LOCAL);
	if (!api->cudart)
		return kn_errorf(err, KN_ENOTFOUND, "backend",
				 "cannot load the CUDA runtime (libcudart.so, "
				 ".so.13, .so.12 or .so.11.0): the nccl backend "
				 "needs "
				 "an NVIDIA GPU with CUDA and NCCL installed");
	api->nccl = dlopen(NCCL_LIBRARY, RTLD_NOW | RTLD_LOCAL);
	if (!api->nccl)
		return kn_errorf(err, KN_ENOTFOUND, "backend",
				 "cannot load %s: %s", NCCL_LIBRARY,
				 dlerror());
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		*syms[i].dest = dlsym(syms[i].lib ? api->nccl : api->cudart,
				      syms[i].name);
		if (!*syms[i].dest)
			return kn_errorf(err, KN_EIO, "backend",
					 "%s has no %s",
					 syms[i].lib ? NCCL_LIBRARY
						     : "libcudart",
					 syms[i].name);
	}
	return 0;
}

static void unload(struct nccl_world *nw)
{
	if (nw->api.nccl)
		dlclose(nw->api.nccl);
	if (nw->api.cudart)
		dlclose(nw->api.cudart);
	KN_FREE_ALL(nw->ranks, nw);
}

static int nccl_open(struct kn_coll_world *w, int local_ranks,
		     struct kn_error *err)
{
	struct nccl_world *nw = kn_xcalloc(1, sizeof(*nw));
	nccl_comm *comms = NULL;
	int rc, devices = 0;

	nw->ranks = kn_xcalloc((size_t)local_ranks, sizeof(*nw->ranks));
	rc = load_api(&nw->api, err);
	if (rc < 0)
		goto fail;
	rc = nw->api.cudaGetDeviceCount(&devices);
	if (rc) {
		rc = cuda_failed(&nw->api, rc, "cudaGetDeviceCount", err);
		goto fail;
	}
	if (devices == 0 || local_ranks > devices) {
		rc = kn_errorf(err, KN_EINVAL, "ranks",
			       "ranks: %d GPUs asked for, %d present",
			       local_ranks, devices);
		goto fail;
	}
	comms = kn_xcalloc((size_t)local_ranks, sizeof(*comms));
	rc = nw->api.ncclCommInitAll(comms, local_ranks, NULL);
	if (rc) {
		rc = nccl_failed(&nw->api, rc, "ncclCommInitAll", err);
		goto fail;
	}
	for (int i = 0; i < local_ranks; i++)
		nw->ranks[i].comm = comms[i];
	free(comms);
	nw->api.ncclGetVersion(&nw->version);
	pthread_barrier_init(&nw->barrier, NULL, (unsigned)local_ranks);
	w->size = local_ranks;
	w->first_rank = 0;
	w->priv = nw;
	return 0;
fail:
	free(comms);
	unload(nw);
	return rc;
}

static void nccl_close(struct kn_coll_world *w)
{
	struct nccl_world *nw = w->priv;

	for (int i = 0; i < w->size; i++) {
		struct nccl_rank *nr = &nw->ranks[i];

		nw->api.cudaSetDevice(i);
		if (nr->scratch)
			nw->api.cudaFree(nr->scratch);
		if (nr->stream)
			nw->api.cudaStreamDestroy(nr->stream);
		nw->api.ncclCommDestroy(nr->comm);
	}
	pthread_barrier_destroy(&nw->barrier);
	unload(nw);
}

static int nccl_rank_start(struct kn_coll_comm *c, struct kn_error *err)
{
	struct nccl_world *nw = c->world->priv;
	struct nccl_rank *nr = &nw->ranks[c->local_index];
	int rc;

	rc = nw->api.cudaSetDevice(c->local_index);
	if (rc)
		return cuda_failed(&nw->api, rc, "cudaSetDevice", err);
	if (!nr->stream) {
		rc = nw->api.cudaStreamCreate(&nr->stream);
		if (rc)
			return cuda_failed(&nw->api, rc, "cudaStreamCreate",
					   err);
	}
	return 0;
}

/* NCCL's ncclRedOp_t: sum, prod, max, min, avg. */
static int nccl_op(enum kn_coll_op op)
{
	static const int map[KN_COLL_N_OPS] = {0, 1, 3, 2, 4};

	return map[op];
}

/* alltoall and sendrecv in place: the input, copied where no peer writes. */
static int stage_input(struct nccl_world *nw, struct nccl_rank *nr,
		       size_t bytes, const void **src, struct kn_error *err)
{
	int rc;

	if (bytes > nr->scratch_bytes) {
		void *p;

		rc = nw->api.cudaMalloc(&p, bytes);
		if (rc)
			return cuda_failed(&nw->api, rc, "cudaMalloc", err);
		if (nr->scratch)
			nw->api.cudaFree(nr->scratch);
		nr->scratch = p;
		nr->scratch_bytes = bytes;
	}
	rc = nw->api.cudaMemcpyAsync(nr->scratch, *src, bytes,
				     CUDA_DEVICE_TO_DEVICE, nr->stream);
	if (rc)
		return cuda_failed(&nw->api, rc, "cudaMemcpyAsync", err);
	*src = nr->scratch;
	return 0;
}

static int point_to_point(struct nccl_world *nw, struct nccl_rank *nr,
			  const struct kn_coll_args *a, int r, int n,
			  struct kn_error *err)
{
	const struct nccl_api *api = &nw->api;
	size_t size = kn_coll_type_size(a->type), bytes = a->count * size;
	const char *send = a->send;
	char *recv = a->recv;
	int rc = 0;

	if (a->send == a->recv && a->count) {
		const void *src = send;

		rc = stage_input(nw, nr,
				 a->kind == KN_COLL_ALLTOALL ? bytes * (size_t)n
							     : bytes,
				 &src, err);
		if (rc < 0)
			return rc;
		send = src;
	}
	api->ncclGroupStart();
	if (a->kind == KN_COLL_ALLTOALL) {
		for (int j = 0; j < n && !rc; j++) {
			rc = api->ncclSend(send + (size_t)j * bytes, a->count,
					   (int)a->type, j, nr->comm,
					   nr->stream);
			if (!rc)
				rc = api->ncclRecv(recv + (size_t)j * bytes,
						   a->count, (int)a->type, j,
						   nr->comm, nr->stream);
		}
	} else {
		rc = api->ncclSend(send, a->count, (int)a->type, (r + 1) % n,
				   nr->comm, nr->stream);
		if (!rc)
			rc = api->ncclRecv(recv, a->count, (int)a->type,
					   (r + n - 1) % n, nr->comm,
					   nr->stream);
	}
	if (api->ncclGroupEnd() && !rc)
		return kn_errorf(err, KN_EIO, NULL, "ncclGroupEnd failed");
	return rc ? nccl_failed(api, rc, kn_coll_kind_name(a->kind), err) : 0;
}

static int nccl_call(struct kn_coll_comm *c, const struct kn_coll_args *a,
		     struct kn_error *err)
{
	struct nccl_world *nw = c->world->priv;
	struct nccl_rank *nr = &nw->ranks[c->local_index];
	const struct nccl_api *api = &nw->api;
	int dt = (int)a->type, rc = 0;

	switch (a->kind) {
	case KN_COLL_ALL_REDUCE:
		rc = api->ncclAllReduce(a->send, a->recv, a->count, dt,
					nccl_op(a->op), nr->comm, nr->stream);
		break;
	case KN_COLL_ALL_GATHER:
		rc = api->ncclAllGather(a->send, a->recv, a->count, dt,
					nr->comm, nr->stream);
		break;
	case KN_COLL_REDUCE_SCATTER:
		rc = api->ncclReduceScatter(a->send, a->recv, a->count, dt,
					    nccl_op(a->op), nr->comm,
					    nr->stream);
		break;
	case KN_COLL_BROADCAST:
		rc = api->ncclBroadcast(a->send, a->recv, a->count, dt,
					a->root, nr->comm, nr->stream);
		break;
	case KN_COLL_REDUCE:
		rc = api->ncclReduce(a->send, a->recv, a->count, dt,
				     nccl_op(a->op), a->root, nr->comm,
				     nr->stream);
		break;
	case KN_COLL_ALLTOALL:
	case KN_COLL_SENDRECV:
		return point_to_point(nw, nr, a, c->rank, c->world->size, err);
	case KN_COLL_N_KINDS:
		break;
	}
	return rc ? nccl_failed(api, rc, kn_coll_kind_name(a->kind), err) : 0;
}

static int nccl_sync(struct kn_coll_comm *c, struct kn_error *err)
{
	struct nccl_world *nw = c->world->priv;
	int rc = nw->api.cudaStreamSynchronize(
		nw->ranks[c->local_index].stream);

	return rc ? cuda_failed(&nw->api, rc, "cudaStreamSynchronize", err)
		  : 0;
}

static int nccl_barrier(struct kn_coll_comm *c, struct kn_error *err)
{
	struct nccl_world *nw = c->world->priv;
	int rc = nccl_sync(c, err);

	/* Every rank reaches the barrier, failed or not. */
	pthread_barrier_wait(&nw->barrier);
	return rc;
}

static void nccl_describe(const struct kn_coll_comm *c, char *buf, size_t len)
{
	struct nccl_world *nw = c->world->priv;
	char bus[64] = "?";

	nw->api.cudaDeviceGetPCIBusId(bus, (int)sizeof(bus), c->local_index);
	snprintf(buf, len, "GPU %d [%s] NCCL %d", c->local_index, bus,
		 nw->version);
}

static int nccl_mem_alloc(struct kn_coll_comm *c, size_t bytes, void **out,
			  struct kn_error *err)
{
	struct nccl_world *nw = c->world->priv;
	void *p;
	int rc = nw->api.cudaMalloc(&p, bytes ? bytes : 1);

	if (rc)
		return cuda_failed(&nw->api, rc, "cudaMalloc", err);
	*out = p;
	return 0;
}

static void nccl_mem_free(struct kn_coll_comm *c, void *p, size_t bytes)
{
	struct nccl_world *nw = c->world->priv;

	if (p)
		nw->api.cudaFree(p);
}

static int nccl_mem_copy(struct kn_coll_comm *c, void *dst, const void *src,
			 size_t bytes, bool to_device, struct kn_error *err)
{
	struct nccl_world *nw = c->world->priv;
	int rc = nw->api.cudaMemcpy(dst, src, bytes,
				    to_device ? CUDA_HOST_TO_DEVICE
					      : CUDA_DEVICE_TO_HOST);

	return rc ? cuda_failed(&nw->api, rc, "cudaMemcpy", err) : 0;
}

const struct kn_coll_backend kn_coll_nccl_backend = {
	.name = "nccl",
	.open = nccl_open,
	.close = nccl_close,
	.rank_start = nccl_rank_start,
	.call = nccl_call,
	.barrier = nccl_barrier,
	.describe = nccl_describe,
	.mem_alloc = nccl_mem_alloc,
	.mem_free = nccl_mem_free,
	.mem_copy = nccl_mem_copy,
	.sync = nccl_sync,
};
