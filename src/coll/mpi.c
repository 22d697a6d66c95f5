/*
 * The mpi backend: one rank per process, started by mpirun, across
 * processes and hosts, through OpenMPI's libmpi.so.40 opened with dlopen.
 *
 * dlopen keeps the one kiln binary free of MPI: machines without OpenMPI
 * run every other command, and this backend says what is missing. The
 * price is the ABI: OpenMPI's handles are the addresses of its exported
 * objects (MPI_COMM_WORLD is &ompi_mpi_comm_world, MPI_FLOAT is
 * &ompi_mpi_float), looked up here by name; MPICH's integer handles are
 * not supported. The library is opened RTLD_GLOBAL because OpenMPI's own
 * plugins resolve their symbols against it.
 *
 * Mapping to MPI: native operators on native types; half and bfloat16
 * travel as 16-bit types of their own with user operators running kiln's
 * kernels; average is a sum divided locally. NCCL's in-place layouts
 * become MPI_IN_PLACE (reduce-scatter's result is then moved to the
 * rank's block). MPI state is process-wide, and MPI's user operators get
 * no context pointer, so the loaded library lives in one static.
 */
#include "coll/internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MPI_LIBRARY "libmpi.so.40"
/* OpenMPI's MPI_IN_PLACE, MPI_STATUS_IGNORE and name lengths. */
#define OMPI_IN_PLACE ((void *)1)
#define OMPI_MAX_STRING 256

typedef void *mpi_handle;
typedef void(mpi_user_fn)(void *in, void *inout, int *len, mpi_handle *dt);

struct mpi_api {
	void *lib;
	int (*Init)(int *, char ***);
	int (*Initialized)(int *);
	int (*Finalize)(void);
	int (*Comm_rank)(mpi_handle, int *);
	int (*Comm_size)(mpi_handle, int *);
	int (*Get_processor_name)(char *, int *);
	int (*Error_string)(int, char *, int *);
	int (*Barrier)(mpi_handle);
	int (*Allreduce)(const void *, void *, int, mpi_handle, mpi_handle,
			 mpi_handle);
	int (*Allgather)(const void *, int, mpi_handle, void *, int,
			 mpi_handle, mpi_handle);
	int (*Reduce_scatter_block)(const void *, void *, int, mpi_handle,
				    mpi_handle, mpi_handle);
	int (*Bcast)(void *, int, mpi_handle, int, mpi_handle);
	int (*Reduce)(const void *, void *, int, mpi_handle, mpi_handle, int,
		      mpi_handle);
	int (*Alltoall)(const void *, int, mpi_handle, void *, int,
			mpi_handle, mpi_handle);
	int (*Sendrecv)(const void *, int, mpi_handle, int, int, void *, int,
			mpi_handle, int, int, mpi_handle, void *);
	int (*Sendrecv_replace)(void *, int, mpi_handle, int, int, int, int,
				mpi_handle, void *);
	int (*Op_create)(mpi_user_fn *, int, mpi_handle *);
	int (*Op_free)(mpi_handle *);
	int (*Type_contiguous)(int, mpi_handle, mpi_handle *);
	int (*Type_commit)(mpi_handle *);
	int (*Type_free)(mpi_handle *);
	mpi_handle comm_world;
	mpi_handle types[KN_COLL_N_TYPES];
	/* Native operators, then user operators for the 16-bit floats. */
	mpi_handle ops[KN_COLL_N_OPS];
	mpi_handle user_ops[KN_COLL_N_OPS];
	char host[OMPI_MAX_STRING];
};

static struct mpi_api mpi;

struct symbol {
	const char *name;
	void **dest;
};

static int load_symbols(const struct symbol *syms, struct kn_error *err)
{
	for (; syms->name; syms++) {
		*syms->dest = dlsym(mpi.lib, syms->name);
		if (!*syms->dest)
			return kn_errorf(err, KN_EIO, "backend",
					 "%s has no %s: is it OpenMPI 4?",
					 MPI_LIBRARY, syms->name);
	}
	return 0;
}

static int mpi_failed(int code, const char *what, struct kn_error *err)
{
	char text[OMPI_MAX_STRING] = "";
	int len = 0;

	if (mpi.Error_string)
		mpi.Error_string(code, text, &len);
	return kn_errorf(err, KN_EIO, NULL, "%s failed: %s", what,
			 text[0] ? text : "unknown MPI error");
}

/* The 16-bit floating types: which one a user operator got. */
static enum kn_coll_type user_type(mpi_handle *dt)
{
	return *dt == mpi.types[KN_COLL_HALF] ? KN_COLL_HALF
					      : KN_COLL_BFLOAT16;
}

#define USER_OP(NAME, OP)                                                   \
	static void user_##NAME(void *in, void *inout, int *len,            \
				mpi_handle *dt)                             \
	{                                                                   \
		kn_coll_reduce_pair(inout, inout, in, (size_t)*len,         \
				    user_type(dt), OP);                     \
	}
USER_OP(sum, KN_COLL_SUM)
USER_OP(prod, KN_COLL_PROD)
USER_OP(min, KN_COLL_MIN)
USER_OP(max, KN_COLL_MAX)

static int make_types_and_ops(struct kn_error *err)
{
	static const char *const type_syms[KN_COLL_N_TYPES] = {
		"ompi_mpi_int8_t",  "ompi_mpi_uint8_t", "ompi_mpi_int32_t",
		"ompi_mpi_uint32_t", "ompi_mpi_int64_t", "ompi_mpi_uint64_t",
		NULL,               "ompi_mpi_float",   "ompi_mpi_double",
		NULL,
	};
	static const char *const op_syms[KN_COLL_N_OPS] = {
		"ompi_mpi_op_sum", "ompi_mpi_op_prod", "ompi_mpi_op_min",
		"ompi_mpi_op_max", NULL,
	};
	static mpi_user_fn *const user_fns[KN_COLL_N_OPS] = {
		user_sum, user_prod, user_min, user_max, NULL,
	};
	mpi_handle u16;
	int rc;

	u16 = dlsym(mpi.lib, "ompi_mpi_uint16_t");
	if (!u16)
		return kn_errorf(err, KN_EIO, "backend",
				 "%s has no ompi_mpi_uint16_t", MPI_LIBRARY);
	for (int t = 0; t < KN_COLL_N_TYPES; t++) {
		if (type_syms[t]) {
			mpi.types[t] = dlsym(mpi.lib, type_syms[t]);
			if (!mpi.types[t])
				return kn_errorf(err, KN_EIO, "backend",
						 "%s has no %s", MPI_LIBRARY,
						 type_syms[t]);
			continue;
		}
		/* A type of its own, so user operators can tell half from
		 * bfloat16. */
		rc = mpi.Type_contiguous(1, u16, &mpi.types[t]);
		if (!rc)
			rc = mpi.Type_commit(&mpi.types[t]);
		if (rc)
			return mpi_failed(rc, "MPI_Type_contiguous", err);
	}
	for (int o = 0; o < KN_COLL_N_OPS; o++) {
		if (!op_syms[o])
			continue;
		mpi.ops[o] = dlsym(mpi.lib, op_syms[o]);
		if (!mpi.ops[o])
			return kn_errorf(err, KN_EIO, "backend", "%s has no %s",
					 MPI_LIBRARY, op_syms[o]);
		rc = mpi.Op_create(user_fns[o], 1, &mpi.user_ops[o]);
		if (rc)
			return mpi_failed(rc, "MPI_Op_create", err);
	}
	return 0;
}

static int mpi_open(struct kn_coll_world *w, int local_ranks,
		    struct kn_error *err)
{
	const struct symbol syms[] = {
		{"MPI_Init", (void **)&mpi.Init},
		{"MPI_Initialized", (void **)&mpi.Initialized},
		{"MPI_Finalize", (void **)&mpi.Finalize},
		{"MPI_Comm_rank", (void **)&mpi.Comm_rank},
		{"MPI_Comm_size", (void **)&mpi.Comm_size},
		{"MPI_Get_processor_name", (void **)&mpi.Get_processor_name},
		{"MPI_Error_string", (void **)&mpi.Error_string},
		{"MPI_Barrier", (void **)&mpi.Barrier},
		{"MPI_Allreduce", (void **)&mpi.Allreduce},
		{"MPI_Allgather", (void **)&mpi.Allgather},
		{"MPI_Reduce_scatter_block", (void **)&mpi.Reduce_scatter_block},
		{"MPI_Bcast", (void **)&mpi.Bcast},
		{"MPI_Reduce", (void **)&mpi.Reduce},
		{"MPI_Alltoall", (void **)&mpi.Alltoall},
		{"MPI_Sendrecv", (void **)&mpi.Sendrecv},
		{"MPI_Sendrecv_replace", (void **)&mpi.Sendrecv_replace},
		{"MPI_Op_create", (void **)&mpi.Op_create},
		{"MPI_Op_free", (void **)&mpi.Op_free},
		{"MPI_Type_contiguous", (void **)&mpi.Type_contiguous},
		{"MPI_Type_commit", (void **)&mpi.Type_commit},
		{"MPI_Type_free", (void **)&mpi.Type_free},
		{"ompi_mpi_comm_world", &mpi.comm_world},
		{NULL, NULL},
	};
	int rc, initialized = 0, len = 0;

	if (local_ranks != 1)
		return kn_errorf(err, KN_EINVAL, "ranks",
				 "ranks: the mpi backend runs one rank per "
				 "process (got %d); start more with "
				 "mpirun -np N",
				 local_ranks);
	if (mpi.lib)
		return kn_errorf(err, KN_ECONFLICT, "backend",
				 "MPI is already open in this process");
	mpi.lib = dlopen(MPI_LIBRARY, RTLD_NOW | RTLD_GLOBAL);
	if (!mpi.lib)
		return kn_errorf(err, KN_ENOTFOUND, "backend",
				 "cannot load %s (install OpenMPI: Debian "
				 "packages openmpi-bin libopenmpi3): %s",
				 MPI_LIBRARY, dlerror());
	rc = load_symbols(syms, err);
	if (rc < 0)
		goto fail;
	mpi.Initialized(&initialized);
	if (!initialized) {
		rc = mpi.Init(NULL, NULL);
		if (rc) {
			rc = mpi_failed(rc, "MPI_Init", err);
			goto fail;
		}
	}
	rc = make_types_and_ops(err);
	if (rc < 0) {
		mpi.Finalize();
		goto fail;
	}
	mpi.Comm_size(mpi.comm_world, &w->size);
	mpi.Comm_rank(mpi.comm_world, &w->first_rank);
	mpi.Get_processor_name(mpi.host, &len);
	return 0;
fail:
	dlclose(mpi.lib);
	memset(&mpi, 0, sizeof(mpi));
	return rc < 0 ? rc : -EIO;
}

static void mpi_close(struct kn_coll_world *w)
{
	for (int o = 0; o < KN_COLL_N_OPS; o++)
		if (mpi.user_ops[o])
			mpi.Op_free(&mpi.user_ops[o]);
	mpi.Type_free(&mpi.types[KN_COLL_HALF]);
	mpi.Type_free(&mpi.types[KN_COLL_BFLOAT16]);
	mpi.Finalize();
	/* OpenMPI cannot be initialised twice in a process, and unloading
	 * it while its threads wind down is unsafe: the library stays. */
}

static mpi_handle op_for(const struct kn_coll_args *a)
{
	enum kn_coll_op op = a->op == KN_COLL_AVG ? KN_COLL_SUM : a->op;

	if (a->type == KN_COLL_HALF || a->type == KN_COLL_BFLOAT16)
		return mpi.user_ops[op];
	return mpi.ops[op];
}

static int mpi_call(struct kn_coll_comm *c, const struct kn_coll_args *a,
		    struct kn_error *err)
{
	mpi_handle dt = mpi.types[a->type];
	mpi_handle op = kn_coll_kind_reduces(a->kind) ? op_for(a) : NULL;
	mpi_handle comm = mpi.comm_world;
	size_t size = kn_coll_type_size(a->type);
	int n = c->world->size, r = c->rank;
	int count = (int)a->count, rc = 0;
	char *recv = a->recv;
	const void *send = a->send;
	bool in_place;

	if (a->count > (size_t)INT_MAX / (size_t)n)
		return kn_errorf(err, KN_EINVAL, "count",
				 "count: the mpi backend takes at most %d "
				 "elements per rank",
				 INT_MAX / n);
	switch (a->kind) {
	case KN_COLL_ALL_REDUCE:
		rc = mpi.Allreduce(send == recv ? OMPI_IN_PLACE : send, recv,
				   count, dt, op, comm);
		break;
	case KN_COLL_ALL_GATHER:
		in_place = send == recv + (size_t)r * a->count * size;
		rc = mpi.Allgather(in_place ? OMPI_IN_PLACE : send, count, dt,
				   recv, count, dt, comm);
		break;
	case KN_COLL_REDUCE_SCATTER:
		in_place = recv == (const char *)send + (size_t)r * a->count * size;
		if (!in_place) {
			rc = mpi.Reduce_scatter_block(send, recv, count, dt,
						      op, comm);
			break;
		}
		/* MPI leaves the result at the start of the buffer. */
		rc = mpi.Reduce_scatter_block(OMPI_IN_PLACE, (void *)send,
					      count, dt, op, comm);
		if (!rc && r)
			memmove(recv, send, a->count * size);
		break;
	case KN_COLL_BROADCAST:
		if (r == a->root && send != recv)
			memcpy(recv, send, a->count * size);
		rc = mpi.Bcast(recv, count, dt, a->root, comm);
		break;
	case KN_COLL_REDUCE:
		rc = mpi.Reduce(r == a->root && send == recv ? OMPI_IN_PLACE
							      : send,
				recv, count, dt, op, a->root, comm);
		break;
	case KN_COLL_ALLTOALL:
		rc = mpi.Alltoall(send == recv ? OMPI_IN_PLACE : send, count,
				  dt, recv, count, dt, comm);
		break;
	case KN_COLL_SENDRECV:
		if (send == recv)
			rc = mpi.Sendrecv_replace(recv, count, dt, (r + 1) % n,
						  0, (r + n - 1) % n, 0, comm,
						  NULL);
		else
			rc = mpi.Sendrecv(send, count, dt, (r + 1) % n, 0,
					  recv, count, dt, (r + n - 1) % n, 0,
					  comm, NULL);
		break;
	case KN_COLL_N_KINDS:
		break;
	}
	if (rc)
		return mpi_failed(rc, kn_coll_kind_name(a->kind), err);
	if (a->op == KN_COLL_AVG && kn_coll_kind_reduces(a->kind) &&
	    (a->kind != KN_COLL_REDUCE || r == a->root))
		kn_coll_divide(recv, a->count, a->type, n);
	return 0;
}

static int mpi_barrier(struct kn_coll_comm *c, struct kn_error *err)
{
	int rc = mpi.Barrier(mpi.comm_world);

	return rc ? mpi_failed(rc, "MPI_Barrier", err) : 0;
}

static void mpi_describe(const struct kn_coll_comm *c, char *buf, size_t len)
{
	snprintf(buf, len, "cpu process on %s", mpi.host);
}

const struct kn_coll_backend kn_coll_mpi_backend = {
	.name = "mpi",
	.open = mpi_open,
	.close = mpi_close,
	.call = mpi_call,
	.barrier = mpi_barrier,
	.describe = mpi_describe,
};
