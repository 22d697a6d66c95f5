/*
 * coll: names, worlds, rank threads, argument checks, host memory, and the
 * test data every backend is checked against.
 *
 * Argument ranges are checked here once, so a backend's call sees only
 * valid kinds, types, operators and roots. Agreement between ranks is the
 * backend's to check, since only it sees the other ranks.
 */
#include "coll/internal.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static const char *const type_names[KN_COLL_N_TYPES] = {
	"int8", "uint8", "int32",  "uint32", "int64",
	"uint64", "half", "float", "double", "bfloat16",
};
static const size_t type_sizes[KN_COLL_N_TYPES] = {1, 1, 4, 4, 8,
						   8, 2, 4, 8, 2};
static const char *const op_names[KN_COLL_N_OPS] = {"sum", "prod", "min",
						    "max", "avg"};
static const char *const kind_names[KN_COLL_N_KINDS] = {
	"all_reduce", "all_gather", "reduce_scatter", "broadcast",
	"reduce",     "alltoall",   "sendrecv",
};

const char *kn_coll_type_name(enum kn_coll_type t)
{
	return (unsigned)t < KN_COLL_N_TYPES ? type_names[t] : "?";
}

size_t kn_coll_type_size(enum kn_coll_type t)
{
	return (unsigned)t < KN_COLL_N_TYPES ? type_sizes[t] : 1;
}

const char *kn_coll_op_name(enum kn_coll_op op)
{
	return (unsigned)op < KN_COLL_N_OPS ? op_names[op] : "?";
}

const char *kn_coll_kind_name(enum kn_coll_kind kind)
{
	return (unsigned)kind < KN_COLL_N_KINDS ? kind_names[kind] : "?";
}

static int parse_name(const char *name, const char *const *names, int n,
		      const char *field, struct kn_error *err)
{
	char choices[256] = "";

	for (int i = 0; i < n; i++)
		if (!strcmp(name, names[i]))
			return i;
	for (int i = 0; i < n; i++) {
		strncat(choices, i ? ", " : "",
			sizeof(choices) - strlen(choices) - 1);
		strncat(choices, names[i],
			sizeof(choices) - strlen(choices) - 1);
	}
	return kn_errorf(err, KN_EINVAL, field, "%s: unknown %s '%s'; one of %s",
			 field, field, name, choices);
}

/* kn_coll_X_parse: the value of enum type whose name (in names, n of
   them) is name; errors name field. */
#define NAME_PARSER(fn, type, names, n, field)                               \
	int fn(const char *name, type *out, struct kn_error *err)             \
	{                                                                     \
		int i = parse_name(name, names, n, field, err);               \
                                                                              \
		if (i < 0)                                                    \
			return i;                                             \
		*out = (type)i;                                               \
		return 0;                                                     \
	}

NAME_PARSER(kn_coll_type_parse, enum kn_coll_type, type_names,
	    KN_COLL_N_TYPES, "datatype")
NAME_PARSER(kn_coll_op_parse, enum kn_coll_op, op_names, KN_COLL_N_OPS, "op")
NAME_PARSER(kn_coll_kind_parse, enum kn_coll_kind, kind_names,
	    KN_COLL_N_KINDS, "collective")

bool kn_coll_kind_reduces(enum kn_coll_kind kind)
{
	return kind == KN_COLL_ALL_REDUCE || kind == KN_COLL_REDUCE_SCATTER ||
	       kind == KN_COLL_REDUCE;
}

bool kn_coll_kind_rooted(enum kn_coll_kind kind)
{
	return kind == KN_COLL_BROADCAST || kind == KN_COLL_REDUCE;
}

void kn_coll_counts(enum kn_coll_kind kind, size_t count, int nranks,
		    size_t *send_count, size_t *recv_count)
{
	size_t n = (size_t)nranks;

	*send_count = count;
	*recv_count = count;
	if (kind == KN_COLL_ALL_GATHER)
		*recv_count = count * n;
	else if (kind == KN_COLL_REDUCE_SCATTER)
		*send_count = count * n;
	else if (kind == KN_COLL_ALLTOALL)
		*send_count = *recv_count = count * n;
}

/* ---- worlds ---- */

static const struct kn_coll_backend *const backends[] = {
	&kn_coll_cpu_backend,
	&kn_coll_mpi_backend,
	&kn_coll_nccl_backend,
};

/* More threads than this is a typo, not a machine. */
#define MAX_LOCAL_RANKS 1024

int kn_coll_world_new(const char *backend, int local_ranks,
		      struct kn_coll_world **out, struct kn_error *err)
{
	const struct kn_coll_backend *be = NULL;
	struct kn_coll_world *w;
	int rc;

	for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++)
		if (!strcmp(backend, backends[i]->name))
			be = backends[i];
	if (!be)
		return kn_errorf(err, KN_EINVAL, "backend",
				 "backend: unknown backend '%s'; one of cpu, "
				 "mpi, nccl",
				 backend);
	if (local_ranks < 1 || local_ranks > MAX_LOCAL_RANKS)
		return kn_errorf(err, KN_EINVAL, "ranks",
				 "ranks: %d ranks in one process; 1 to %d",
				 local_ranks, MAX_LOCAL_RANKS);
	w = kn_xcalloc(1, sizeof(*w));
	w->backend = be;
	w->local = local_ranks;
	w->comms = kn_xcalloc((size_t)local_ranks, sizeof(*w->comms));
	for (int i = 0; i < local_ranks; i++) {
		w->comms[i].world = w;
		w->comms[i].local_index = i;
	}
	rc = be->open(w, local_ranks, err);
	if (rc < 0) {
		KN_FREE_ALL(w->comms, w);
		return rc;
	}
	for (int i = 0; i < local_ranks; i++)
		w->comms[i].rank = w->first_rank + i;
	*out = w;
	return 0;
}

void kn_coll_world_free(struct kn_coll_world *w)
{
	if (!w)
		return;
	w->backend->close(w);
	KN_FREE_ALL(w->comms, w);
}

int kn_coll_world_size(const struct kn_coll_world *w)
{
	return w->size;
}

struct rank_thread {
	pthread_t thread;
	struct kn_coll_comm *comm;
	kn_coll_rank_fn fn;
	void *arg;
	int result;
};

static int start_and_run(struct rank_thread *t)
{
	struct kn_coll_comm *c = t->comm;
	struct kn_error err = {0};

	if (c->world->backend->rank_start &&
	    c->world->backend->rank_start(c, &err) < 0) {
		kn_log(KN_LOG_ERROR, "rank %d: %s", c->rank, err.message);
		return -EIO;
	}
	return t->fn(c, t->arg);
}

static void *rank_main(void *p)
{
	struct rank_thread *t = p;

	t->result = start_and_run(t);
	return NULL;
}

int kn_coll_run(struct kn_coll_world *w, kn_coll_rank_fn fn, void *arg)
{
	struct rank_thread *threads;
	int started = 0, rc = 0;

	threads = kn_xcalloc((size_t)w->local, sizeof(*threads));
	for (int i = 0; i < w->local; i++) {
		threads[i].comm = &w->comms[i];
		threads[i].fn = fn;
		threads[i].arg = arg;
	}
	if (w->local == 1) {
		rc = start_and_run(&threads[0]);
		goto out;
	}
	for (; started < w->local; started++) {
		if (pthread_create(&threads[started].thread, NULL, rank_main,
				   &threads[started]) != 0) {
			/* The ranks already started would wait forever for
			 * the missing one: nothing sane is left to do. */
			kn_log(KN_LOG_ERROR, "cannot start rank thread %d",
			       started);
			abort();
		}
	}
	for (int i = 0; i < started; i++) {
		pthread_join(threads[i].thread, NULL);
		if (!rc && threads[i].result)
			rc = threads[i].result;
	}
out:
	free(threads);
	return rc;
}

int kn_coll_rank(const struct kn_coll_comm *c)
{
	return c->rank;
}

int kn_coll_size(const struct kn_coll_comm *c)
{
	return c->world->size;
}

int kn_coll_local_index(const struct kn_coll_comm *c)
{
	return c->local_index;
}

void kn_coll_describe(const struct kn_coll_comm *c, char *buf, size_t len)
{
	c->world->backend->describe(c, buf, len);
}

/* ---- memory ---- */

/* From here on transparent huge pages pay off (one 2 MiB page). */
#define HUGE_PAGE_BYTES ((size_t)2 << 20)

int kn_coll_host_alloc(size_t bytes, void **out, struct kn_error *err)
{
	void *p;

	if (bytes == 0)
		bytes = 1;
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return kn_errorf(err, KN_EIO, NULL,
				 "cannot map %zu bytes: %s", bytes,
				 strerror(errno));
	/* Faulting 4 KiB pages costs far more than copying them on small
	 * virtual machines; huge pages make the first touch cheap. Advice
	 * only: a kernel without THP just ignores it. */
	if (bytes >= HUGE_PAGE_BYTES)
		madvise(p, bytes, MADV_HUGEPAGE);
	memset(p, 0, bytes);
	*out = p;
	return 0;
}

void kn_coll_host_free(void *p, size_t bytes)
{
	if (p)
		munmap(p, bytes ? bytes : 1);
}

int kn_coll_mem_alloc(struct kn_coll_comm *c, size_t bytes, void **out,
		      struct kn_error *err)
{
	if (c->world->backend->mem_alloc)
		return c->world->backend->mem_alloc(c, bytes, out, err);
	return kn_coll_host_alloc(bytes, out, err);
}

void kn_coll_mem_free(struct kn_coll_comm *c, void *p, size_t bytes)
{
	if (c->world->backend->mem_free)
		c->world->backend->mem_free(c, p, bytes);
	else
		kn_coll_host_free(p, bytes);
}

/* The backend's copy to the device (to_device) or from it; host memory
   where the backend has no device memory of its own. */
static int mem_copy(struct kn_coll_comm *c, void *dst, const void *src,
		    size_t bytes, bool to_device, struct kn_error *err)
{
	if (c->world->backend->mem_copy)
		return c->world->backend->mem_copy(c, dst, src, bytes,
						   to_device, err);
	memmove(dst, src, bytes);
	return 0;
}

int kn_coll_mem_write(struct kn_coll_comm *c, void *dst, const void *src,
		      size_t bytes, struct kn_error *err)
{
	return mem_copy(c, dst, src, bytes, true, err);
}

int kn_coll_mem_read(struct kn_coll_comm *c, void *dst, const void *src,
		     size_t bytes, struct kn_error *err)
{
	return mem_copy(c, dst, src, bytes, false, err);
}

int kn_coll_sync(struct kn_coll_comm *c, struct kn_error *err)
{
	if (c->world->backend->sync)
		return c->world->backend->sync(c, err);
	return 0;
}

int kn_coll_barrier(struct kn_coll_comm *c, struct kn_error *err)
{
	return c->world->backend->barrier(c, err);
}

/* ---- collectives ---- */

int kn_coll_call(struct kn_coll_comm *c, const struct kn_coll_args *a,
		 struct kn_error *err)
{
	size_t send_count, recv_count;
	int n = c->world->size;

	if ((unsigned)a->kind >= KN_COLL_N_KINDS)
		return kn_errorf(err, KN_EINVAL, "collective",
				 "collective: unknown collective %d", a->kind);
	if ((unsigned)a->type >= KN_COLL_N_TYPES)
		return kn_errorf(err, KN_EINVAL, "datatype",
				 "datatype: unknown data type %d", a->type);
	if (kn_coll_kind_reduces(a->kind) && (unsigned)a->op >= KN_COLL_N_OPS)
		return kn_errorf(err, KN_EINVAL, "op",
				 "op: unknown reduction operator %d", a->op);
	if (kn_coll_kind_rooted(a->kind) && (a->root < 0 || a->root >= n))
		return kn_errorf(err, KN_EINVAL, "root",
				 "root: rank %d is not in 0..%d", a->root,
				 n - 1);
	if (a->count > SIZE_MAX / 8 / (size_t)n)
		return kn_errorf(err, KN_EINVAL, "count",
				 "count: %zu elements is too many", a->count);
	kn_coll_counts(a->kind, a->count, n, &send_count, &recv_count);
	if ((send_count && !a->send) || (recv_count && !a->recv))
		return kn_errorf(err, KN_EINVAL, NULL,
				 "%s of %zu elements without a buffer",
				 kn_coll_kind_name(a->kind), a->count);
	return c->world->backend->call(c, a, err);
}

int kn_coll_all_reduce(struct kn_coll_comm *c, const void *send, void *recv,
		       size_t count, enum kn_coll_type type,
		       enum kn_coll_op op, struct kn_error *err)
{
	struct kn_coll_args a = {KN_COLL_ALL_REDUCE, send, recv, count,
				 type, op, 0};

	return kn_coll_call(c, &a, err);
}

int kn_coll_all_gather(struct kn_coll_comm *c, const void *send, void *recv,
		       size_t count, enum kn_coll_type type,
		       struct kn_error *err)
{
	struct kn_coll_args a = {KN_COLL_ALL_GATHER, send, recv, count,
				 type, KN_COLL_SUM, 0};

	return kn_coll_call(c, &a, err);
}

int kn_coll_broadcast(struct kn_coll_comm *c, const void *send, void *recv,
		      size_t count, enum kn_coll_type type, int root,
		      struct kn_error *err)
{
	struct kn_coll_args a = {KN_COLL_BROADCAST, send, recv, count,
				 type, KN_COLL_SUM, root};

	return kn_coll_call(c, &a, err);
}

/* ---- test data ---- */

static bool type_is_float(enum kn_coll_type t)
{
	return t == KN_COLL_HALF || t == KN_COLL_FLOAT ||
	       t == KN_COLL_DOUBLE || t == KN_COLL_BFLOAT16;
}

static bool type_is_signed(enum kn_coll_type t)
{
	return t == KN_COLL_INT8 || t == KN_COLL_INT32 || t == KN_COLL_INT64;
}

/*
 * The value rank r holds at element i. Products: 2 on one rank, 1 on the
 * others, so the product is 2 at any rank count and a lost or repeated
 * rank shows. Otherwise a hash of (r, i) in -4..4 (0..8 unsigned, halves
 * for floating types), so neighbours, ranks and offsets all differ.
 */
static double pattern(enum kn_coll_type t, enum kn_coll_op op, int r,
		      size_t i, int nranks)
{
	uint64_t x;
	int v;

	if (op == KN_COLL_PROD)
		return i % (size_t)nranks == (size_t)r ? 2 : 1;
	x = (uint64_t)i * 0x9e3779b97f4a7c15ull +
	    (uint64_t)(r + 1) * 0xd1b54a32d192ed03ull;
	v = (int)((x >> 32) % 9);
	if (type_is_float(t))
		return (v - 4) * 0.5;
	return type_is_signed(t) ? v - 4 : v;
}

static void store(enum kn_coll_type t, void *buf, size_t i, double v)
{
	switch (t) {
	case KN_COLL_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
	case KN_COLL_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
	case KN_COLL_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
	case KN_COLL_UINT32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
	case KN_COLL_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
	case KN_COLL_UINT64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
	case KN_COLL_HALF:
		((uint16_t *)buf)[i] = kn_coll_float_to_half((float)v);
		break;
	case KN_COLL_FLOAT: ((float *)buf)[i] = (float)v; break;
	case KN_COLL_DOUBLE: ((double *)buf)[i] = v; break;
	case KN_COLL_BFLOAT16:
		((uint16_t *)buf)[i] = kn_coll_float_to_bf16((float)v);
		break;
	case KN_COLL_N_TYPES: break;
	}
}

static double load_float(enum kn_coll_type t, const void *buf, size_t i)
{
	switch (t) {
	case KN_COLL_HALF:
		return kn_coll_half_to_float(((const uint16_t *)buf)[i]);
	case KN_COLL_BFLOAT16:
		return kn_coll_bf16_to_float(((const uint16_t *)buf)[i]);
	case KN_COLL_FLOAT: return ((const float *)buf)[i];
	default: return ((const double *)buf)[i];
	}
}

/* Integers as their bits, sign-extended for signed types. */
static uint64_t load_int(enum kn_coll_type t, const void *buf, size_t i)
{
	switch (t) {
	case KN_COLL_INT8: return (uint64_t)(int64_t)((const int8_t *)buf)[i];
	case KN_COLL_UINT8: return ((const uint8_t *)buf)[i];
	case KN_COLL_INT32:
		return (uint64_t)(int64_t)((const int32_t *)buf)[i];
	case KN_COLL_UINT32: return ((const uint32_t *)buf)[i];
	case KN_COLL_INT64: return (uint64_t)((const int64_t *)buf)[i];
	default: return ((const uint64_t *)buf)[i];
	}
}

/* v wrapped to t's width, as load_int would read it back. */
static uint64_t wrap_int(enum kn_coll_type t, int64_t v)
{
	switch (t) {
	case KN_COLL_INT8: return (uint64_t)(int64_t)(int8_t)(uint8_t)v;
	case KN_COLL_UINT8: return (uint8_t)v;
	case KN_COLL_INT32: return (uint64_t)(int64_t)(int32_t)(uint32_t)v;
	case KN_COLL_UINT32: return (uint32_t)v;
	default: return (uint64_t)v;
	}
}

/* Collectives that only move data use the sum's patterns. */
static enum kn_coll_op pattern_op(const struct kn_coll_args *a)
{
	return kn_coll_kind_reduces(a->kind) ? a->op : KN_COLL_SUM;
}

void kn_coll_fill(const struct kn_coll_args *a, int rank, int nranks,
		  void *buf)
{
	size_t send_count, recv_count;

	kn_coll_counts(a->kind, a->count, nranks, &send_count, &recv_count);
	for (size_t i = 0; i < send_count; i++)
		store(a->type, buf, i,
		      pattern(a->type, pattern_op(a), rank, i, nranks));
}

/* The reduction of every rank's element i, exact for the patterns. */
static double reduce_expected(const struct kn_coll_args *a, size_t i,
			      int nranks, bool *is_int, uint64_t *int_out)
{
	double acc = pattern(a->type, a->op, 0, i, nranks);
	int64_t iacc;

	for (int r = 1; r < nranks; r++) {
		double v = pattern(a->type, a->op, r, i, nranks);

		switch (a->op) {
		case KN_COLL_PROD: acc *= v; break;
		case KN_COLL_MIN: acc = v < acc ? v : acc; break;
		case KN_COLL_MAX: acc = v > acc ? v : acc; break;
		default: acc += v; break;
		}
	}
	*is_int = !type_is_float(a->type);
	if (!*is_int)
		return a->op == KN_COLL_AVG ? acc / nranks : acc;
	/* Integers wrap at their width before an average divides. */
	iacc = (int64_t)acc;
	*int_out = wrap_int(a->type, iacc);
	if (a->op == KN_COLL_AVG) {
		if (type_is_signed(a->type))
			*int_out = (uint64_t)((int64_t)*int_out / nranks);
		else
			*int_out = *int_out / (uint64_t)nranks;
	}
	return acc;
}

static double type_epsilon(enum kn_coll_type t)
{
	switch (t) {
	case KN_COLL_HALF: return 0x1p-10;
	case KN_COLL_BFLOAT16: return 0x1p-7;
	case KN_COLL_FLOAT: return 0x1p-23;
	default: return 0x1p-52;
	}
}

static bool matches(const struct kn_coll_args *a, const void *result,
		    size_t i, double expected, bool is_int,
		    uint64_t int_expected, int nranks)
{
	double got, tol;

	if (is_int)
		return load_int(a->type, result, i) == int_expected;
	got = load_float(a->type, result, i);
	tol = type_epsilon(a->type) * nranks *
	      (fabs(expected) > 1 ? fabs(expected) : 1);
	return fabs(got - expected) <= tol;
}

size_t kn_coll_count_wrong(const struct kn_coll_args *a, int rank,
			   int nranks, const void *result)
{
	size_t send_count, recv_count, wrong = 0;
	size_t count = a->count;

	if (a->kind == KN_COLL_REDUCE && rank != a->root)
		return 0;
	kn_coll_counts(a->kind, count, nranks, &send_count, &recv_count);
	for (size_t i = 0; i < recv_count; i++) {
		uint64_t iexp = 0;
		bool is_int = !type_is_float(a->type);
		double exp;
		int from = rank;
		size_t at = i;

		switch (a->kind) {
		case KN_COLL_ALL_REDUCE:
		case KN_COLL_REDUCE:
			exp = reduce_expected(a, i, nranks, &is_int, &iexp);
			break;
		case KN_COLL_REDUCE_SCATTER:
			exp = reduce_expected(a, (size_t)rank * count + i,
					      nranks, &is_int, &iexp);
			break;
		default:
			if (a->kind == KN_COLL_ALL_GATHER) {
				from = (int)(i / count);
				at = i % count;
			} else if (a->kind == KN_COLL_BROADCAST) {
				from = a->root;
			} else if (a->kind == KN_COLL_ALLTOALL) {
				from = (int)(i / count);
				at = (size_t)rank * count + i % count;
			} else {
				from = (rank + nranks - 1) % nranks;
			}
			exp = pattern(a->type, pattern_op(a), from, at,
				      nranks);
			iexp = wrap_int(a->type, (int64_t)exp);
			break;
		}
		if (!matches(a, result, i, exp, is_int, iexp, nranks))
			wrong++;
	}
	return wrong;
}
