/*
 * Unit tests for coll: the 16-bit float conversions against known
 * encodings, the kernels against hand-computed values, and every
 * collective on the cpu backend with 2 and 4 ranks, in place and out of
 * place, for every data type and operator. Ranks run on their own threads
 * and cmocka is not thread-safe, so ranks record failures and the test
 * asserts on them after kn_coll_run returns.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/tests/testmain.h"
#include "coll/coll.h"

/* Every finite value of a 16-bit float format (its exponent bits, in
   exponent_mask, not all set) survives a round trip through float. */
static void assert_round_trips(float (*widen)(uint16_t),
			       uint16_t (*narrow)(float), uint32_t exponent_mask)
{
	for (uint32_t h = 0; h < 0x10000; h++) {
		if ((h & exponent_mask) == exponent_mask)
			continue;
		assert_int_equal(narrow(widen((uint16_t)h)), h);
	}
}

static void test_half(void **state)
{
	assert_int_equal(kn_coll_float_to_half(1.0f), 0x3c00);
	assert_int_equal(kn_coll_float_to_half(-2.0f), 0xc000);
	assert_int_equal(kn_coll_float_to_half(65504.0f), 0x7bff);
	/* Halfway between 65504 and 65536 rounds to even: infinity. */
	assert_int_equal(kn_coll_float_to_half(65520.0f), 0x7c00);
	assert_int_equal(kn_coll_float_to_half(65519.0f), 0x7bff);
	assert_int_equal(kn_coll_float_to_half(0x1p-24f), 0x0001);
	assert_int_equal(kn_coll_float_to_half(0x1p-25f), 0x0000);
	assert_int_equal(kn_coll_float_to_half(0x1.8p-24f), 0x0002);
	assert_int_equal(kn_coll_float_to_half(0x1p-14f), 0x0400);
	assert_int_equal(kn_coll_float_to_half(1.0f + 0x1p-11f), 0x3c00);
	assert_int_equal(kn_coll_float_to_half(1.0f + 0x3p-11f), 0x3c02);
	assert_true(kn_coll_half_to_float(0x7c00) > 1e30f);
	assert_true(kn_coll_half_to_float(0x0001) == 0x1p-24f);
	assert_true(kn_coll_half_to_float(0xbc00) == -1.0f);
	assert_round_trips(kn_coll_half_to_float, kn_coll_float_to_half,
			   0x7c00);
}

static void test_bf16(void **state)
{
	assert_int_equal(kn_coll_float_to_bf16(1.0f), 0x3f80);
	assert_int_equal(kn_coll_float_to_bf16(1.0f + 0x1p-8f), 0x3f80);
	assert_int_equal(kn_coll_float_to_bf16(1.0f + 0x3p-8f), 0x3f82);
	assert_true(kn_coll_bf16_to_float(0xc000) == -2.0f);
	assert_round_trips(kn_coll_bf16_to_float, kn_coll_float_to_bf16,
			   0x7f80);
}

static void test_kernels(void **state)
{
	int8_t a8[3] = {100, -5, 7}, b8[3] = {100, 3, -9}, d8[3];
	uint8_t u[2] = {16, 3}, v[2] = {16, 5}, du[2];
	int32_t a32[2] = {-7, 9}, b32[2] = {4, -2}, d32[2];
	float af[2] = {1.5f, -2.0f}, bf[2] = {0.25f, 8.0f}, df[2];
	uint16_t ah = kn_coll_float_to_half(1.5f), bh = kn_coll_float_to_half(2.5f), dh;

	kn_coll_reduce_pair(d8, a8, b8, 3, KN_COLL_INT8, KN_COLL_SUM);
	assert_int_equal(d8[0], -56); /* 200 wraps */
	assert_int_equal(d8[1], -2);
	assert_int_equal(d8[2], -2);
	kn_coll_reduce_pair(du, u, v, 2, KN_COLL_UINT8, KN_COLL_PROD);
	assert_int_equal(du[0], 0); /* 256 wraps */
	assert_int_equal(du[1], 15);
	kn_coll_reduce_pair(d32, a32, b32, 2, KN_COLL_INT32, KN_COLL_MIN);
	assert_int_equal(d32[0], -7);
	assert_int_equal(d32[1], -2);
	kn_coll_reduce_pair(d32, a32, b32, 2, KN_COLL_INT32, KN_COLL_MAX);
	assert_int_equal(d32[0], 4);
	assert_int_equal(d32[1], 9);
	kn_coll_reduce_pair(d32, a32, b32, 2, KN_COLL_INT32, KN_COLL_SUM);
	kn_coll_divide(d32, 2, KN_COLL_INT32, 2);
	assert_int_equal(d32[0], -1); /* -3 / 2 truncates */
	assert_int_equal(d32[1], 3);
	kn_coll_reduce_pair(df, af, bf, 2, KN_COLL_FLOAT, KN_COLL_PROD);
	assert_true(df[0] == 0.375f && df[1] == -16.0f);
	kn_coll_reduce_pair(&dh, &ah, &bh, 1, KN_COLL_HALF, KN_COLL_SUM);
	assert_true(kn_coll_half_to_float(dh) == 4.0f);
	/* In place: dst aliasing the first input. */
	kn_coll_reduce_pair(af, af, bf, 2, KN_COLL_FLOAT, KN_COLL_MAX);
	assert_true(af[0] == 1.5f && af[1] == 8.0f);
}

static void test_names(void **state)
{
	struct kn_error err = {0};
	enum kn_coll_type t;
	enum kn_coll_op op;
	enum kn_coll_kind kind;

	assert_int_equal(kn_coll_type_parse("bfloat16", &t, &err), 0);
	assert_int_equal(t, KN_COLL_BFLOAT16);
	assert_int_equal(kn_coll_type_size(t), 2);
	assert_int_equal(kn_coll_op_parse("avg", &op, &err), 0);
	assert_int_equal(op, KN_COLL_AVG);
	assert_int_equal(kn_coll_kind_parse("reduce_scatter", &kind, &err), 0);
	assert_int_equal(kind, KN_COLL_REDUCE_SCATTER);
	assert_int_equal(kn_coll_type_parse("float32", &t, &err), -EINVAL);
	assert_non_null(strstr(err.message, "unknown datatype 'float32'"));
	assert_non_null(strstr(err.message, "bfloat16"));
	assert_int_equal(kn_coll_kind_parse("allreduce", &kind, &err),
			 -EINVAL);
	assert_string_equal(kn_coll_kind_name(KN_COLL_ALLTOALL), "alltoall");
}

/* ---- collectives on the cpu backend ---- */

struct sweep {
	pthread_mutex_t lock;
	int failures;
	char first[256];
	size_t max_count;
};

static void record(struct sweep *s, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&s->lock);
	if (!s->failures++) {
		va_start(ap, fmt);
		vsnprintf(s->first, sizeof(s->first), fmt, ap);
		va_end(ap);
	}
	pthread_mutex_unlock(&s->lock);
}

/*
 * One collective on every rank: fill, call, check. In place uses NCCL's
 * layouts: the input inside the output (all_gather) or the output inside
 * the input (reduce_scatter), else one buffer.
 */
static void run_one(struct kn_coll_comm *c, struct sweep *s,
		    struct kn_coll_args a, bool in_place, char *send,
		    char *recv, char *host)
{
	int r = kn_coll_rank(c), n = kn_coll_size(c);
	size_t size = kn_coll_type_size(a.type), sc, rcount, wrong;
	struct kn_error err = {0};
	char *in = send, *out = recv;
	int rc;

	kn_coll_counts(a.kind, a.count, n, &sc, &rcount);
	if (in_place) {
		in = out = recv;
		if (a.kind == KN_COLL_ALL_GATHER)
			in = recv + (size_t)r * a.count * size;
		else if (a.kind == KN_COLL_REDUCE_SCATTER)
			out = recv + (size_t)r * a.count * size;
	}
	memset(recv, 0x5a, rcount > sc ? rcount * size : sc * size);
	kn_coll_fill(&a, r, n, in);
	a.send = in;
	a.recv = out;
	rc = kn_coll_call(c, &a, &err);
	if (rc < 0) {
		record(s, "%s %s %s %s count %zu: %s", kn_coll_kind_name(a.kind),
		       kn_coll_type_name(a.type), kn_coll_op_name(a.op),
		       in_place ? "in place" : "out of place", a.count,
		       err.message);
		return;
	}
	memcpy(host, out, rcount * size);
	wrong = kn_coll_count_wrong(&a, r, n, host);
	if (wrong)
		record(s, "%s %s %s root %d %s count %zu, %d ranks: rank %d "
			  "has %zu wrong",
		       kn_coll_kind_name(a.kind), kn_coll_type_name(a.type),
		       kn_coll_op_name(a.op), a.root,
		       in_place ? "in place" : "out of place", a.count, n, r,
		       wrong);
}

static int sweep_rank(struct kn_coll_comm *c, void *arg)
{
	static const size_t counts[] = {0, 1, 1031};
	struct sweep *s = arg;
	size_t bytes = s->max_count * 8 * 4;
	struct kn_error err = {0};
	char *send, *recv, *host;
	int n = kn_coll_size(c);

	/* cmocka cannot assert here, and a rank that left would hang the
	 * others: out of memory ends the test. */
	if (kn_coll_mem_alloc(c, bytes, (void **)&send, &err) < 0 ||
	    kn_coll_mem_alloc(c, bytes, (void **)&recv, &err) < 0 ||
	    !(host = malloc(bytes)))
		abort();
	for (int k = 0; k < KN_COLL_N_KINDS; k++) {
		bool reduces = kn_coll_kind_reduces((enum kn_coll_kind)k);
		int n_ops = reduces ? KN_COLL_N_OPS : 1;
		int n_roots = kn_coll_kind_rooted((enum kn_coll_kind)k) ? n : 1;

		for (int t = 0; t < KN_COLL_N_TYPES; t++)
		for (int op = 0; op < n_ops; op++)
		for (int root = 0; root < n_roots; root++)
		for (size_t ci = 0; ci <= sizeof(counts) / sizeof(counts[0]); ci++)
		for (int in_place = 0; in_place < 2; in_place++) {
			struct kn_coll_args a = {
				.kind = (enum kn_coll_kind)k,
				.type = (enum kn_coll_type)t,
				.op = (enum kn_coll_op)op,
				.root = root,
			};

			/* Past the cache blocks, for a few types. */
			if (ci == sizeof(counts) / sizeof(counts[0])) {
				if (t != KN_COLL_FLOAT && t != KN_COLL_INT8 &&
				    t != KN_COLL_HALF)
					continue;
				a.count = s->max_count;
			} else {
				a.count = counts[ci];
			}
			run_one(c, s, a, in_place, send, recv, host);
		}
	}
	free(host);
	kn_coll_mem_free(c, send, bytes);
	kn_coll_mem_free(c, recv, bytes);
	return 0;
}

static void sweep_ranks(int nranks)
{
	struct sweep s = {.lock = PTHREAD_MUTEX_INITIALIZER,
			  .max_count = 70001};
	struct kn_coll_world *w = NULL;
	struct kn_error err = {0};

	assert_int_equal(kn_coll_world_new("cpu", nranks, &w, &err), 0);
	assert_int_equal(kn_coll_world_size(w), nranks);
	assert_int_equal(kn_coll_run(w, sweep_rank, &s), 0);
	kn_coll_world_free(w);
	if (s.failures)
		fail_msg("%d failures; first: %s", s.failures, s.first);
}

static void test_all_2_ranks(void **state)
{
	sweep_ranks(2);
}

static void test_all_4_ranks(void **state)
{
	sweep_ranks(4);
}

static void test_all_3_ranks(void **state)
{
	sweep_ranks(3);
}

/* All-reduces larger than the caches take the streaming path. */
static int streaming_rank(struct kn_coll_comm *c, void *arg)
{
	struct sweep *s = arg;
	size_t bytes = ((size_t)9 << 20) + 4 * 7;
	struct kn_error err = {0};
	char *send, *recv, *host;
	const enum kn_coll_type types[] = {KN_COLL_FLOAT, KN_COLL_HALF};
	const enum kn_coll_op ops[] = {KN_COLL_SUM, KN_COLL_MAX};

	if (kn_coll_mem_alloc(c, bytes, (void **)&send, &err) < 0 ||
	    kn_coll_mem_alloc(c, bytes, (void **)&recv, &err) < 0 ||
	    !(host = malloc(bytes)))
		abort();
	for (int i = 0; i < 2; i++)
		for (int in_place = 0; in_place < 2; in_place++) {
			struct kn_coll_args a = {
				.kind = KN_COLL_ALL_REDUCE, .type = types[i],
				.op = ops[i],
				.count = bytes / kn_coll_type_size(types[i]),
			};

			run_one(c, s, a, in_place, send, recv, host);
		}
	free(host);
	kn_coll_mem_free(c, send, bytes);
	kn_coll_mem_free(c, recv, bytes);
	return 0;
}

static void test_all_reduce_streaming(void **state)
{
	for (int n = 2; n <= 3; n++) {
		struct sweep s = {.lock = PTHREAD_MUTEX_INITIALIZER};
		struct kn_coll_world *w = NULL;
		struct kn_error err = {0};

		assert_int_equal(kn_coll_world_new("cpu", n, &w, &err), 0);
		assert_int_equal(kn_coll_run(w, streaming_rank, &s), 0);
		kn_coll_world_free(w);
		if (s.failures)
			fail_msg("%d failures; first: %s", s.failures, s.first);
	}
}

/* ---- values worked out by hand, and the checker catching errors ---- */

struct by_hand {
	float out[2][3];
	size_t wrong_after_damage;
	int disagree[2];
};

static int by_hand_rank(struct kn_coll_comm *c, void *arg)
{
	struct by_hand *h = arg;
	int r = kn_coll_rank(c);
	float in[3] = {1.0f + (float)r * 9, 2.0f + (float)r * 18,
		       3.0f + (float)r * 27};
	float out[3];
	struct kn_coll_args a = {KN_COLL_ALL_REDUCE, NULL, NULL, 1031,
				 KN_COLL_INT32, KN_COLL_SUM, 0};
	int32_t *send = calloc(1031, 4), *recv = calloc(1031, 4);
	struct kn_error err = {0};

	kn_coll_all_reduce(c, in, out, 3, KN_COLL_FLOAT, KN_COLL_SUM, &err);
	memcpy(h->out[r], out, sizeof(out));
	/* A correct result with one element damaged: exactly one wrong. */
	kn_coll_fill(&a, r, 2, send);
	kn_coll_all_reduce(c, send, recv, 1031, KN_COLL_INT32, KN_COLL_SUM,
			   &err);
	if (r == 1) {
		recv[500] += 1;
		h->wrong_after_damage = kn_coll_count_wrong(&a, r, 2, recv);
	}
	/* Ranks that disagree on the count all get an error. */
	h->disagree[r] = kn_coll_all_reduce(c, send, recv, r ? 5 : 6,
					    KN_COLL_INT32, KN_COLL_SUM, &err);
	KN_FREE_ALL(send, recv);
	return 0;
}

static void test_by_hand(void **state)
{
	struct by_hand h = {0};
	struct kn_coll_world *w = NULL;
	struct kn_error err = {0};

	assert_int_equal(kn_coll_world_new("cpu", 2, &w, &err), 0);
	assert_int_equal(kn_coll_run(w, by_hand_rank, &h), 0);
	kn_coll_world_free(w);
	for (int r = 0; r < 2; r++) {
		assert_true(h.out[r][0] == 11.0f);
		assert_true(h.out[r][1] == 22.0f);
		assert_true(h.out[r][2] == 33.0f);
		assert_int_equal(h.disagree[r], -EINVAL);
	}
	assert_int_equal(h.wrong_after_damage, 1);
}

static int bad_root_rank(struct kn_coll_comm *c, void *arg)
{
	struct kn_error err = {0};
	int v = 0;

	return kn_coll_broadcast(c, &v, &v, 1, KN_COLL_INT32, 2, &err) ==
			       -EINVAL &&
		       strstr(err.message, "root")
		       ? 0
		       : 1;
}

static void test_bad_arguments(void **state)
{
	struct kn_coll_world *w = NULL;
	struct kn_error err = {0};

	assert_int_equal(kn_coll_world_new("gpu", 1, &w, &err), -EINVAL);
	assert_non_null(strstr(err.message, "unknown backend 'gpu'"));
	assert_int_equal(kn_coll_world_new("cpu", 0, &w, &err), -EINVAL);
	assert_int_equal(kn_coll_world_new("mpi", 2, &w, &err), -EINVAL);
	assert_non_null(strstr(err.message, "mpirun"));
	assert_int_equal(kn_coll_world_new("cpu", 2, &w, &err), 0);
	assert_int_equal(kn_coll_run(w, bad_root_rank, NULL), 0);
	kn_coll_world_free(w);
}

/*
 * Without a GPU the nccl backend must fail cleanly: -ENOENT without the
 * CUDA runtime, else an error from CUDA's device count. With a GPU there
 * is nothing to check here (tests/gpu/ does).
 */
static void test_nccl_without_gpu(void **state)
{
	struct kn_coll_world *w = NULL;
	struct kn_error err = {0};
	void *cudart = dlopen("libcudart.so", RTLD_NOW | RTLD_LOCAL);
	int rc;

	if (access("/dev/nvidia0", F_OK) == 0)
		skip();
	rc = kn_coll_world_new("nccl", 1, &w, &err);
	if (!cudart) {
		assert_int_equal(rc, -ENOENT);
		assert_non_null(strstr(err.message, "CUDA runtime"));
		return;
	}
	dlclose(cudart);
	assert_true(rc < 0);
	assert_null(w);
	assert_true(strstr(err.message, "cudaGetDeviceCount") ||
		    strstr(err.message, "GPUs asked for") ||
		    strstr(err.message, "libnccl"));
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_half),
	cmocka_unit_test(test_bf16),
	cmocka_unit_test(test_kernels),
	cmocka_unit_test(test_names),
	cmocka_unit_test(test_by_hand),
	cmocka_unit_test(test_bad_arguments),
	cmocka_unit_test(test_nccl_without_gpu),
	cmocka_unit_test(test_all_reduce_streaming),
	cmocka_unit_test(test_all_2_ranks),
	cmocka_unit_test(test_all_3_ranks),
	cmocka_unit_test(test_all_4_ranks))
