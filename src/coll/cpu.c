/*
 * The cpu backend: every rank is a thread of this process, and every rank
 * reads the other ranks' buffers directly.
 *
 * A call publishes the rank's arguments in its slot, waits at a barrier,
 * moves data, and waits at a second barrier so that no rank returns (and
 * reuses its buffers) while another still reads them. Reductions split
 * the elements into blocks that the ranks claim from a shared counter:
 * the rank that claims a block reduces it across every rank's input and
 * writes the result into every rank's output while the block is still in
 * its cache (for results larger than the caches, with non-temporal
 * stores). Every byte is thus read once and written once — the traffic of
 * one memcpy — by all ranks at the same time, and a rank the kernel has
 * not scheduled (machines are often oversubscribed) delays no one: the
 * running ranks take its blocks. The alternative, a ring of
 * point-to-point steps as MPI uses between processes, moves every byte
 * 2(n-1)/n times through intermediate buffers and needs no shared memory;
 * here memory is shared, so it only costs bandwidth.
 *
 * In place: only the rank that claimed a block touches that block of any
 * buffer, and it reads the block of every input before writing it
 * anywhere, so outputs may overwrite inputs. alltoall and sendrecv in place would overwrite
 * data another rank still has to read: the rank first copies its input to
 * a scratch buffer of its own, kept and grown for later calls.
 *
 * The barrier spins briefly, then sleeps on a futex, so that ranks on an
 * oversubscribed machine do not burn the core the late rank needs.
 */
#include "coll/internal.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

/* Checks of the barrier before sleeping: a few microseconds. */
#define SPIN_CHECKS 2000
/* Blocks of the all-reduce that stay in the L2 cache from reduction to
 * the copies into the other ranks' outputs. */
#define BLOCK_BYTES (64 * 1024)
/* Blocks are whole cache lines, so no two ranks write one line. */
#define CACHE_LINE 64
/*
 * All-reduces of this many bytes or more are larger than the caches:
 * their results are written with non-temporal stores, which skip reading
 * each destination line before overwriting it (a third of the memory
 * traffic otherwise), as glibc's memcpy does for large copies. Smaller
 * results stay in the cache, where the next reader finds them.
 */
#define STREAM_BYTES ((size_t)8 << 20)
/* Reduced blocks wait here, in the L1 cache, before being streamed out. */
#define STREAM_BLOCK_BYTES (16 * 1024)

struct barrier {
	_Atomic uint32_t arrived;
	_Atomic uint32_t generation;
	uint32_t n;
};

struct slot {
	alignas(CACHE_LINE) struct kn_coll_args args;
	const void *src; /* args.send, or the scratch copy of it */
};

struct cpu_rank {
	void *scratch;
	size_t scratch_bytes;
};

struct cpu_world {
	struct barrier barrier;
	/* The next block of the current all-reduce or reduce to claim. */
	alignas(CACHE_LINE) _Atomic size_t next_block;
	struct slot *slots;
	struct cpu_rank *ranks;
};

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static void futex(_Atomic uint32_t *addr, int op, uint32_t val)
{
	syscall(SYS_futex, (uint32_t *)addr, op, val, NULL, NULL, 0);
}

static void barrier_wait(struct barrier *b)
{
	uint32_t gen = atomic_load_explicit(&b->generation,
					    memory_order_acquire);

	if (atomic_fetch_add_explicit(&b->arrived, 1, memory_order_acq_rel) +
		    1 == b->n) {
		/* Reset before the release: a rank can only arrive at the
		 * next barrier after it has seen the new generation. */
		atomic_store_explicit(&b->arrived, 0, memory_order_relaxed);
		atomic_fetch_add_explicit(&b->generation, 1,
					  memory_order_release);
		if (b->n > 1)
			futex(&b->generation, FUTEX_WAKE_PRIVATE, INT_MAX);
		return;
	}
	for (int i = 0; i < SPIN_CHECKS; i++) {
		if (atomic_load_explicit(&b->generation,
					 memory_order_acquire) != gen)
			return;
		cpu_relax();
	}
	while (atomic_load_explicit(&b->generation, memory_order_acquire) ==
	       gen)
		futex(&b->generation, FUTEX_WAIT_PRIVATE, gen);
}

static int cpu_open(struct kn_coll_world *w, int local_ranks,
		    struct kn_error *err)
{
	/* aligned_alloc: the block counter has a cache line of its own. */
	struct cpu_world *cw = aligned_alloc(CACHE_LINE, sizeof(*cw));
	size_t slots_bytes = sizeof(struct slot) * (size_t)local_ranks;

	if (!cw)
		return kn_errorf(err, KN_EIO, NULL, "out of memory");
	memset(cw, 0, sizeof(*cw));
	cw->barrier.n = (uint32_t)local_ranks;
	cw->slots = aligned_alloc(CACHE_LINE, slots_bytes);
	if (!cw->slots) {
		free(cw);
		return kn_errorf(err, KN_EIO, NULL, "out of memory");
	}
	memset(cw->slots, 0, slots_bytes);
	cw->ranks = kn_xcalloc((size_t)local_ranks, sizeof(*cw->ranks));
	w->size = local_ranks;
	w->first_rank = 0;
	w->priv = cw;
	return 0;
}

static void cpu_close(struct kn_coll_world *w)
{
	struct cpu_world *cw = w->priv;

	for (int i = 0; i < w->size; i++)
		kn_coll_host_free(cw->ranks[i].scratch,
				  cw->ranks[i].scratch_bytes);
	KN_FREE_ALL(cw->ranks, cw->slots, cw);
}

static bool same_call(const struct kn_coll_args *a,
		      const struct kn_coll_args *b)
{
	return a->kind == b->kind && a->count == b->count &&
	       a->type == b->type &&
	       (!kn_coll_kind_reduces(a->kind) || a->op == b->op) &&
	       (!kn_coll_kind_rooted(a->kind) || a->root == b->root);
}

#define AT(p, i, size) ((char *)(p) + (i) * (size))

/* memcpy with non-temporal stores where the CPU has them (SSE2). */
static void stream_copy(void *dst, const void *src, size_t bytes)
{
#if defined(__x86_64__)
	char *d = dst;
	const char *s = src;
	size_t head = (16 - ((uintptr_t)d & 15)) & 15;

	if (head > bytes)
		head = bytes;
	memcpy(d, s, head);
	d += head;
	s += head;
	bytes -= head;
	for (; bytes >= 64; bytes -= 64, d += 64, s += 64) {
		__m128i a = _mm_loadu_si128((const __m128i *)s);
		__m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
		__m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
		__m128i e = _mm_loadu_si128((const __m128i *)(s + 48));

		_mm_stream_si128((__m128i *)d, a);
		_mm_stream_si128((__m128i *)(d + 16), b);
		_mm_stream_si128((__m128i *)(d + 32), c);
		_mm_stream_si128((__m128i *)(d + 48), e);
	}
	memcpy(d, s, bytes);
#else
	memcpy(dst, src, bytes);
#endif
}

/* Non-temporal stores are weakly ordered: fence them before a barrier
 * publishes the result to the other ranks. */
static void stream_fence(void)
{
#if defined(__x86_64__)
	_mm_sfence();
#endif
}

/* A large all-reduce: reduce a block into the cache, stream it out to
 * every rank. Every input block is read before any output is written. */
/*
 * Blocks of count elements, each claimed by whichever rank gets to it
 * first: a rank the kernel has not scheduled holds no one up, the ranks
 * that run do its share. Returns false when none is left.
 */
static bool claim(struct cpu_world *cw, size_t count, size_t block,
		  size_t *off, size_t *len)
{
	size_t b = atomic_fetch_add_explicit(&cw->next_block, 1,
					     memory_order_relaxed);

	if (b >= (count + block - 1) / block)
		return false;
	*off = b * block;
	*len = count - *off < block ? count - *off : block;
	return true;
}

/*
 * Reduce elements off to off + len of every rank's input into dst, rank
 * first's input first: in place, that one is dst itself.
 */
static void reduce_block(struct cpu_world *cw, int n, int first, size_t off,
			 size_t len, const struct kn_coll_args *a, void *dst)
{
	size_t size = kn_coll_type_size(a->type);
	const void *src[n];
	int k = 1;

	src[0] = AT(cw->slots[first].src, off, size);
	for (int j = 0; j < n; j++)
		if (j != first)
			src[k++] = AT(cw->slots[j].src, off, size);
	kn_coll_reduce_many(dst, src, n, len, a->type, a->op);
}

static void all_reduce_streaming(struct cpu_world *cw, int n,
				 const struct kn_coll_args *a)
{
	size_t size = kn_coll_type_size(a->type);
	size_t block = STREAM_BLOCK_BYTES / size, off, len;
	alignas(CACHE_LINE) char tmp[STREAM_BLOCK_BYTES];

	while (claim(cw, a->count, block, &off, &len)) {
		reduce_block(cw, n, 0, off, len, a, tmp);
		for (int j = 0; j < n; j++)
			stream_copy(AT(cw->slots[j].args.recv, off, size), tmp,
				    len * size);
	}
	stream_fence();
}

static void all_reduce(struct cpu_world *cw, int n,
		       const struct kn_coll_args *a)
{
	size_t size = kn_coll_type_size(a->type);
	size_t block = BLOCK_BYTES / size, off, len;

	if (a->count * size >= STREAM_BYTES) {
		all_reduce_streaming(cw, n, a);
		return;
	}
	while (claim(cw, a->count, block, &off, &len)) {
		/* Reduce into the first rank's output, whose input comes
		 * first: in place that is the same block. */
		char *dst = AT(cw->slots[0].args.recv, off, size);

		reduce_block(cw, n, 0, off, len, a, dst);
		for (int j = 1; j < n; j++)
			memcpy(AT(cw->slots[j].args.recv, off, size), dst,
			       len * size);
	}
}

static void reduce_scatter(struct cpu_world *cw, int r, int n,
			   const struct kn_coll_args *a)
{
	/* In place, recv is this rank's own block of its input. */
	reduce_block(cw, n, r, (size_t)r * a->count, a->count, a, a->recv);
}

static void reduce(struct cpu_world *cw, int n, const struct kn_coll_args *a)
{
	size_t size = kn_coll_type_size(a->type);
	size_t block = BLOCK_BYTES / size, off, len;

	/* The root's input first: in place it is the output. */
	while (claim(cw, a->count, block, &off, &len))
		reduce_block(cw, n, a->root, off, len, a,
			     AT(cw->slots[a->root].args.recv, off, size));
}

static void copy(void *dst, const void *src, size_t bytes)
{
	if (dst != src && bytes)
		memcpy(dst, src, bytes);
}

static void move_data(struct cpu_world *cw, int r, int n,
		      const struct kn_coll_args *a)
{
	size_t size = kn_coll_type_size(a->type);
	size_t bytes = a->count * size;

	switch (a->kind) {
	case KN_COLL_ALL_GATHER:
		for (int j = 0; j < n; j++)
			copy(AT(a->recv, (size_t)j * a->count, size),
			     cw->slots[j].src, bytes);
		break;
	case KN_COLL_BROADCAST:
		copy(a->recv, cw->slots[a->root].src, bytes);
		break;
	case KN_COLL_ALLTOALL:
		for (int j = 0; j < n; j++)
			copy(AT(a->recv, (size_t)j * a->count, size),
			     AT(cw->slots[j].src, (size_t)r * a->count, size),
			     bytes);
		break;
	case KN_COLL_SENDRECV:
		copy(a->recv, cw->slots[(r + n - 1) % n].src, bytes);
		break;
	default:
		break;
	}
}

/* alltoall and sendrecv in place: keep the input where no one writes. */
static int stage_input(struct cpu_rank *cr, const struct kn_coll_args *a,
		       int n, const void **src, struct kn_error *err)
{
	size_t send_count, recv_count, bytes;
	int rc;

	kn_coll_counts(a->kind, a->count, n, &send_count, &recv_count);
	bytes = send_count * kn_coll_type_size(a->type);
	if (bytes > cr->scratch_bytes) {
		void *p;

		rc = kn_coll_host_alloc(bytes, &p, err);
		if (rc < 0)
			return rc;
		kn_coll_host_free(cr->scratch, cr->scratch_bytes);
		cr->scratch = p;
		cr->scratch_bytes = bytes;
	}
	memcpy(cr->scratch, a->send, bytes);
	*src = cr->scratch;
	return 0;
}

static int cpu_call(struct kn_coll_comm *c, const struct kn_coll_args *a,
		    struct kn_error *err)
{
	struct cpu_world *cw = c->world->priv;
	struct slot *mine = &cw->slots[c->rank];
	int n = c->world->size, r = c->rank, rc = 0;
	bool ok = true;

	mine->args = *a;
	mine->src = a->send;
	if ((a->kind == KN_COLL_ALLTOALL || a->kind == KN_COLL_SENDRECV) &&
	    a->send == a->recv && a->count)
		rc = stage_input(&cw->ranks[r], a, n, &mine->src, err);
	/* A rank that failed still meets the others at both barriers. */
	if (rc < 0)
		mine->args.count = SIZE_MAX;
	barrier_wait(&cw->barrier);
	for (int j = 1; j < n; j++)
		if (!same_call(&cw->slots[0].args, &cw->slots[j].args))
			ok = false;
	if (!ok) {
		barrier_wait(&cw->barrier);
		if (rc < 0)
			return rc;
		return kn_errorf(err, KN_EINVAL, NULL,
				 "%s: ranks disagree on count, type, operator "
				 "or root (rank %d: %zu x %s)",
				 kn_coll_kind_name(a->kind), r, a->count,
				 kn_coll_type_name(a->type));
	}
	switch (a->kind) {
	case KN_COLL_ALL_REDUCE:
		all_reduce(cw, n, a);
		break;
	case KN_COLL_REDUCE_SCATTER:
		reduce_scatter(cw, r, n, a);
		break;
	case KN_COLL_REDUCE:
		reduce(cw, n, a);
		break;
	default:
		move_data(cw, r, n, a);
		break;
	}
	barrier_wait(&cw->barrier);
	/* Every rank is done with the blocks; the next call's first barrier
	 * publishes the reset. */
	if (r == 0)
		atomic_store_explicit(&cw->next_block, 0,
				      memory_order_relaxed);
	return 0;
}

static int cpu_barrier(struct kn_coll_comm *c, struct kn_error *err)
{
	struct cpu_world *cw = c->world->priv;

	barrier_wait(&cw->barrier);
	return 0;
}

static void cpu_describe(const struct kn_coll_comm *c, char *buf, size_t len)
{
	kn_strlcpy(buf, "cpu thread", len);
}

const struct kn_coll_backend kn_coll_cpu_backend = {
	.name = "cpu",
	.open = cpu_open,
	.close = cpu_close,
	.call = cpu_call,
	.barrier = cpu_barrier,
	.describe = cpu_describe,
};
