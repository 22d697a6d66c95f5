/*
 * kiln bench COLLECTIVE: nccl-tests' measurements on kiln's collectives,
 * with nccl-tests' flags and output, on the cpu (threads), mpi (processes
 * and hosts under mpirun) or nccl (GPUs) backend.
 *
 * Timing follows nccl-tests: warm-up calls at the largest and smallest
 * sizes, then for each size a barrier, -n calls back to back, a wait for
 * completion, and the elapsed time divided by -n; ranks then agree on one
 * time (-a: rank 0's, the average, the minimum or the maximum) through the
 * backend itself. algbw is the bytes of the size column over that time;
 * busbw scales it by the collective's factor so that every collective is
 * comparable to the link speed (all_reduce 2(n-1)/n; reduce_scatter,
 * all_gather and alltoall (n-1)/n; broadcast, reduce and sendrecv 1).
 * Counts per size: size / element size, split evenly between ranks (and
 * rounded down to 16 bytes per rank) for the collectives whose buffers
 * hold one block per rank, as nccl-tests does. -c 1 checks a separate call
 * on fresh data after the timed ones, so checking never costs time.
 *
 * Every rank runs the same loop, so all ranks make the same calls; rank 0
 * alone prints.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "coll/coll.h"

static cli_runner cmd_bench;

const struct cli_command cmd_bench_entry = {
	.name = "bench",
	.run = cmd_bench,
	.summary = "measure collectives the way nccl-tests does",
	.help = "usage: kiln bench COLLECTIVE [-b MIN] [-e MAX] [-i STEP | -f FACTOR]\n"
		"                  [-g N] [-t N] [-o OP] [-d TYPE] [-r ROOT] [-n ITERS]\n"
		"                  [-w ITERS] [-c 0|1] [-a 0-3] [-z 0|1] [-G N]\n"
		"                  [--backend cpu|mpi|nccl] [--min-busbw GB/s]\n"
		"\n"
		"Time a collective over a range of sizes and print nccl-tests' table:\n"
		"size, count, type, redop, root, then out-of-place and in-place time\n"
		"(us), algbw and busbw (GB/s) and #wrong, and the average bus\n"
		"bandwidth. COLLECTIVE: all_reduce, all_gather, reduce_scatter,\n"
		"broadcast, reduce, alltoall, sendrecv.\n"
		"\n"
		"  -b, --minbytes SIZE    smallest size (default 32M; K, M, G suffixes)\n"
		"  -e, --maxbytes SIZE    largest size (default 32M)\n"
		"  -i, --stepbytes SIZE   add this between sizes (default 1M)\n"
		"  -f, --stepfactor N     multiply by N between sizes instead\n"
		"  -g, --ngpus N          ranks per thread: GPUs (nccl) or ranks (cpu)\n"
		"  -t, --nthreads N       threads; a cpu or nccl run has g x t ranks\n"
		"  -o, --op OP            sum, prod, min, max, avg or all (default sum)\n"
		"  -d, --datatype TYPE    int8, uint8, int32, uint32, int64, uint64,\n"
		"                         half, float, double, bfloat16 or all\n"
		"  -r, --root N           root of broadcast and reduce (default 0)\n"
		"  -n, --iters N          timed calls per size (default 20)\n"
		"  -w, --warmup_iters N   untimed calls first (default 5)\n"
		"  -c, --check 0|1        check results, counted in #wrong (default 1)\n"
		"  -a, --average 0-3      time reported: rank 0's, mean, min, max (1)\n"
		"  -z, --blocking 0|1     wait for each call (cpu and mpi always do)\n"
		"  -G, --cudagraph N      accepted for nccl-tests scripts; ignored\n"
		"  --backend B            cpu: threads over shared memory (default);\n"
		"                         mpi: one rank per process, run under mpirun;\n"
		"                         nccl: GPUs of this machine\n"
		"  --min-busbw GB/s       exit 1 when the average bus bandwidth is lower\n"
		"\n"
		"Exit status: 0, or 1 when a result was wrong, the bandwidth was below\n"
		"--min-busbw or the backend failed; 2 on a usage error.\n",
};

/* A sweep longer than this is a mistake in -b/-e/-i, not a benchmark. */
#define MAX_SIZES 100000
/* One rank's "Using devices" line, exchanged with all_gather. */
#define DESCRIBE_BYTES 160

struct bench {
	const char *backend;
	enum kn_coll_kind kind;
	size_t min_bytes, max_bytes, step_bytes, step_factor;
	enum kn_coll_type types[KN_COLL_N_TYPES];
	int n_types;
	enum kn_coll_op ops[KN_COLL_N_OPS];
	int n_ops;
	int root, iters, warmup, check, average, blocking, graph;
	int nthreads, ngpus;
	/* Results, written by the first rank of each process: every rank
	 * sees the same agreed figures, so each process can judge them. */
	double bw_sum;
	int bw_count;
	uint64_t wrong;
};

/* One rank's buffers: send and recv for the data, small for agreeing. */
struct rank_state {
	struct kn_coll_comm *comm;
	const struct bench *b;
	char *send, *recv, *small, *host;
	size_t small_bytes;
	int rank, n;
};

static int parse_size(const char *text, size_t *out)
{
	char *end;
	unsigned long long v;
	unsigned shift = 0;

	errno = 0;
	v = strtoull(text, &end, 10);
	if (text[0] < '0' || text[0] > '9' || errno)
		return -EINVAL;
	switch (*end) {
	case 'K': case 'k': shift = 10; end++; break;
	case 'M': case 'm': shift = 20; end++; break;
	case 'G': case 'g': shift = 30; end++; break;
	default: break;
	}
	if (*end || v > (SIZE_MAX >> shift))
		return -EINVAL;
	*out = (size_t)v << shift;
	return 0;
}

static double bus_factor(enum kn_coll_kind kind, int n)
{
	switch (kind) {
	case KN_COLL_ALL_REDUCE:
		return 2.0 * (n - 1) / n;
	case KN_COLL_REDUCE_SCATTER:
	case KN_COLL_ALL_GATHER:
	case KN_COLL_ALLTOALL:
		return (double)(n - 1) / n;
	default:
		return 1.0;
	}
}

/* The per-rank count for size bytes, as nccl-tests rounds it. */
static size_t count_for(enum kn_coll_kind kind, size_t bytes, size_t esize,
			int n)
{
	size_t count = bytes / esize, base;

	if (kind != KN_COLL_ALL_GATHER && kind != KN_COLL_REDUCE_SCATTER &&
	    kind != KN_COLL_ALLTOALL)
		return count;
	base = count / (size_t)n;
	return base & ~(16 / esize - 1);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void say_error(const struct rank_state *s, const char *what,
		      const struct kn_error *err)
{
	fprintf(stderr, "kiln bench: rank %d: %s: %s\n", s->rank, what,
		err->message);
}

/*
 * One value at v (size bytes of type), made the same on every rank:
 * rank 0's when broadcast, else all ranks' combined by op. v is written
 * only on success; what failed is said as what.
 */
static int agree(struct rank_state *s, void *v, size_t size,
		 enum kn_coll_type type, bool broadcast, enum kn_coll_op op,
		 const char *what)
{
	struct kn_error err = {0};
	uint64_t out; /* the widest type agreed on */
	int rc;

	rc = kn_coll_mem_write(s->comm, s->small, v, size, &err);
	if (rc == 0 && broadcast)
		rc = kn_coll_broadcast(s->comm, s->small, s->small, 1, type, 0,
				       &err);
	else if (rc == 0)
		rc = kn_coll_all_reduce(s->comm, s->small, s->small, 1, type,
					op, &err);
	if (rc == 0)
		rc = kn_coll_sync(s->comm, &err);
	if (rc == 0)
		rc = kn_coll_mem_read(s->comm, &out, s->small, size, &err);
	if (rc < 0) {
		say_error(s, what, &err);
		return rc;
	}
	memcpy(v, &out, size);
	return 0;
}

/* A time agreed as -a asks: 0 rank 0's, 1 the average, 2 the minimum,
   3 the maximum. */
static int agree_time(struct rank_state *s, double *sec, int how)
{
	static const enum kn_coll_op ops[] = {KN_COLL_AVG, KN_COLL_AVG,
					      KN_COLL_MIN, KN_COLL_MAX};

	return agree(s, sec, sizeof(*sec), KN_COLL_DOUBLE, how == 0, ops[how],
		     "combining times");
}

static int sum_u64(struct rank_state *s, uint64_t *v)
{
	return agree(s, v, sizeof(*v), KN_COLL_UINT64, false, KN_COLL_SUM,
		     "adding up wrong elements");
}

/* The collective's arguments for this rank, with NCCL's in-place layout. */
static struct kn_coll_args args_for(const struct rank_state *s,
				    enum kn_coll_type type,
				    enum kn_coll_op op, size_t count,
				    bool in_place)
{
	size_t block = count * kn_coll_type_size(type) * (size_t)s->rank;
	struct kn_coll_args a = {s->b->kind, s->send, s->recv, count,
				 type, op, s->b->root};

	if (in_place) {
		a.send = a.recv = s->recv;
		if (a.kind == KN_COLL_ALL_GATHER)
			a.send = s->recv + block;
		else if (a.kind == KN_COLL_REDUCE_SCATTER)
			a.recv = s->recv + block;
	}
	return a;
}

static int run_calls(struct rank_state *s, const struct kn_coll_args *a,
		     int calls)
{
	struct kn_error err = {0};

	for (int i = 0; i < calls; i++) {
		if (kn_coll_call(s->comm, a, &err) < 0 ||
		    (s->b->blocking && kn_coll_sync(s->comm, &err) < 0)) {
			say_error(s, kn_coll_kind_name(a->kind), &err);
			return -EIO;
		}
	}
	if (kn_coll_sync(s->comm, &err) < 0) {
		say_error(s, "waiting for completion", &err);
		return -EIO;
	}
	return 0;
}

/* One fresh call on known data; the wrong elements of every rank. */
static int check_once(struct rank_state *s, const struct kn_coll_args *a,
		      uint64_t *wrong)
{
	size_t esize = kn_coll_type_size(a->type), send_count, recv_count;
	struct kn_error err = {0};
	int rc;

	kn_coll_counts(a->kind, a->count, s->n, &send_count, &recv_count);
	kn_coll_fill(a, s->rank, s->n, s->host);
	rc = kn_coll_mem_write(s->comm, (void *)a->send, s->host,
			       send_count * esize, &err);
	if (rc == 0)
		rc = kn_coll_call(s->comm, a, &err);
	if (rc == 0)
		rc = kn_coll_sync(s->comm, &err);
	if (rc == 0)
		rc = kn_coll_mem_read(s->comm, s->host, a->recv,
				      recv_count * esize, &err);
	if (rc < 0) {
		say_error(s, "checking", &err);
		return rc;
	}
	*wrong = kn_coll_count_wrong(a, s->rank, s->n, s->host);
	return sum_u64(s, wrong);
}

static void format_time(double us, char *buf, size_t len)
{
	if (us >= 10000.0)
		snprintf(buf, len, "%7.0f", us);
	else if (us >= 100.0)
		snprintf(buf, len, "%7.1f", us);
	else
		snprintf(buf, len, "%7.2f", us);
}

/* One size: out of place then in place; rank 0 prints the row. */
static int bench_size(struct rank_state *s, struct bench *b,
		      enum kn_coll_type type, enum kn_coll_op op,
		      size_t bytes)
{
	size_t esize = kn_coll_type_size(type);
	size_t count = count_for(b->kind, bytes, esize, s->n);
	size_t send_count, recv_count, shown;
	char row[256];
	int len, rc;

	kn_coll_counts(b->kind, count, s->n, &send_count, &recv_count);
	shown = (send_count > recv_count ? send_count : recv_count) * esize;
	len = snprintf(row, sizeof(row), "%12zu  %12zu  %8s  %6s  %6d",
		       shown, count, kn_coll_type_name(type),
		       kn_coll_kind_reduces(b->kind) ? kn_coll_op_name(op)
						     : "none",
		       kn_coll_kind_rooted(b->kind) ? b->root : -1);
	for (int in_place = 0; in_place < 2; in_place++) {
		struct kn_coll_args a = args_for(s, type, op, count, in_place);
		struct kn_error err = {0};
		double t0, sec, algbw, busbw;
		uint64_t wrong = 0;
		char when[32], wrong_text[32];

		rc = kn_coll_barrier(s->comm, &err);
		if (rc < 0) {
			say_error(s, "barrier", &err);
			return rc;
		}
		t0 = now_s();
		rc = run_calls(s, &a, b->iters);
		if (rc < 0)
			return rc;
		sec = (now_s() - t0) / b->iters;
		rc = agree_time(s, &sec, b->average);
		if (rc < 0)
			return rc;
		algbw = sec > 0 ? (double)shown / 1e9 / sec : 0;
		busbw = algbw * bus_factor(b->kind, s->n);
		if (b->check) {
			rc = check_once(s, &a, &wrong);
			if (rc < 0)
				return rc;
			snprintf(wrong_text, sizeof(wrong_text), "%llu",
				 (unsigned long long)wrong);
		} else {
			kn_strlcpy(wrong_text, "N/A", sizeof(wrong_text));
		}
		format_time(sec * 1e6, when, sizeof(when));
		len += snprintf(row + len, sizeof(row) - (size_t)len,
				"  %7s  %6.2f  %6.2f  %5s", when, algbw, busbw,
				wrong_text);
		if (kn_coll_local_index(s->comm) == 0) {
			b->bw_sum += busbw;
			b->bw_count++;
			b->wrong += wrong;
		}
	}
	if (s->rank == 0)
		printf("%s\n", row);
	return 0;
}

static void print_header(const struct rank_state *s, const char *lines)
{
	const struct bench *b = s->b;
	bool by_factor = b->step_factor > 1;

	printf("# Collective test starting: %s_perf (kiln %s, backend %s)\n",
	       kn_coll_kind_name(b->kind), KN_VERSION, b->backend);
	printf("# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) "
	       "warmup iters: %d iters: %d agg iters: 1 validation: %d "
	       "graph: 0\n",
	       b->nthreads, b->ngpus, b->min_bytes, b->max_bytes,
	       by_factor ? b->step_factor : b->step_bytes,
	       by_factor ? "factor" : "bytes", b->warmup, b->iters, b->check);
	printf("#\n# Using devices\n");
	for (int i = 0; i < s->n; i++)
		printf("%s\n", lines + (size_t)i * DESCRIBE_BYTES);
	printf("#\n"
	       "#%74s%31s\n"
	       "#%11s%14s%10s%8s%8s%9s%8s%8s%7s%9s%8s%8s%7s\n"
	       "#%11s%14s%35s%8s%8s%16s%8s%8s\n",
	       "out-of-place", "in-place", "size", "count", "type", "redop",
	       "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
	       "busbw", "#wrong", "(B)", "(elements)", "(us)", "(GB/s)",
	       "(GB/s)", "(us)", "(GB/s)", "(GB/s)");
}

static int describe_ranks(struct rank_state *s, char *all)
{
	char mine[DESCRIBE_BYTES], host[64] = "?", what[96];
	struct kn_error err = {0};
	int rc;

	gethostname(host, sizeof(host) - 1);
	kn_coll_describe(s->comm, what, sizeof(what));
	memset(mine, 0, sizeof(mine));
	snprintf(mine, sizeof(mine),
		 "#  Rank %2d Group  0 Pid %6d on %10.24s device %2d [%.32s]",
		 s->rank, (int)getpid(), host, s->rank, what);
	rc = kn_coll_mem_write(s->comm, s->small, mine, sizeof(mine), &err);
	if (rc == 0)
		rc = kn_coll_all_gather(s->comm, s->small,
					s->small + sizeof(mine) * (size_t)s->n,
					sizeof(mine), KN_COLL_UINT8, &err);
	if (rc == 0)
		rc = kn_coll_sync(s->comm, &err);
	if (rc == 0)
		rc = kn_coll_mem_read(s->comm, all,
				      s->small + sizeof(mine) * (size_t)s->n,
				      sizeof(mine) * (size_t)s->n, &err);
	if (rc < 0)
		say_error(s, "exchanging rank descriptions", &err);
	return rc;
}

static int warm_up(struct rank_state *s, enum kn_coll_type type,
		   enum kn_coll_op op, size_t bytes)
{
	size_t count = count_for(s->b->kind, bytes, kn_coll_type_size(type),
				 s->n);
	struct kn_coll_args a = args_for(s, type, op, count, false);

	return run_calls(s, &a, s->b->warmup);
}

static int sweep(struct rank_state *s, struct bench *b)
{
	int rc;

	for (int ti = 0; ti < b->n_types; ti++) {
		for (int oi = 0; oi < b->n_ops; oi++) {
			enum kn_coll_type type = b->types[ti];
			enum kn_coll_op op = b->ops[oi];

			rc = warm_up(s, type, op, b->max_bytes);
			if (rc == 0)
				rc = warm_up(s, type, op, b->min_bytes);
			for (size_t bytes = b->min_bytes;
			     rc == 0 && bytes <= b->max_bytes;
			     bytes = b->step_factor > 1 ? bytes * b->step_factor
							: bytes + b->step_bytes)
				rc = bench_size(s, b, type, op, bytes);
			if (rc < 0)
				return rc;
		}
	}
	return 0;
}

static int bench_rank(struct kn_coll_comm *c, void *arg)
{
	struct bench *b = arg;
	struct rank_state s = {.comm = c, .b = b};
	size_t bytes = b->max_bytes ? b->max_bytes : 1;
	struct kn_error err = {0};
	char *lines = NULL;
	int rc;

	s.rank = kn_coll_rank(c);
	s.n = kn_coll_size(c);
	s.small_bytes = DESCRIBE_BYTES * ((size_t)s.n + 1);
	if (kn_coll_mem_alloc(c, bytes, (void **)&s.send, &err) < 0 ||
	    kn_coll_mem_alloc(c, bytes, (void **)&s.recv, &err) < 0 ||
	    kn_coll_mem_alloc(c, s.small_bytes, (void **)&s.small, &err) < 0) {
		/* Every rank asks for the same sizes: all fail alike. */
		say_error(&s, "allocating buffers", &err);
		rc = -ENOMEM;
		goto out;
	}
	s.host = kn_xmalloc(bytes);
	lines = kn_xcalloc((size_t)s.n, DESCRIBE_BYTES);
	rc = describe_ranks(&s, lines);
	if (rc < 0)
		goto out;
	if (s.rank == 0)
		print_header(&s, lines);
	rc = sweep(&s, b);
	if (rc == 0 && s.rank == 0) {
		printf("# Out of bounds values : %llu %s\n",
		       (unsigned long long)b->wrong, b->wrong ? "FAILED" : "OK");
		printf("# Avg bus bandwidth    : %g \n#\n",
		       b->bw_count ? b->bw_sum / b->bw_count : 0.0);
		fflush(stdout);
	}
out:
	KN_FREE_ALL(lines, s.host);
	kn_coll_mem_free(c, s.send, bytes);
	kn_coll_mem_free(c, s.recv, bytes);
	kn_coll_mem_free(c, s.small, s.small_bytes);
	return rc < 0 ? 1 : 0;
}

static int parse_sizes(struct cli_ctx *ctx, struct bench *b,
		       const char *const text[4])
{
	static const char *const names[4] = {"minbytes", "maxbytes",
					     "stepbytes", "stepfactor"};
	size_t *dest[4] = {&b->min_bytes, &b->max_bytes, &b->step_bytes,
			   &b->step_factor};
	size_t n_sizes = 0;

	for (int i = 0; i < 4; i++)
		if (text[i] && parse_size(text[i], dest[i]) < 0)
			return cli_usage_error(ctx,
					       "--%s wants a size such as 8, "
					       "64K, 128M or 1G, got '%s'",
					       names[i], text[i]);
	if (b->min_bytes > b->max_bytes)
		return cli_usage_error(ctx, "--minbytes %zu is above --maxbytes "
					    "%zu", b->min_bytes, b->max_bytes);
	if (b->step_factor <= 1 && b->step_bytes == 0)
		return cli_usage_error(ctx, "--stepbytes must be above 0 "
					    "(or give --stepfactor above 1)");
	if (b->step_factor > 1 && b->min_bytes == 0)
		return cli_usage_error(ctx, "--minbytes must be above 0 with "
					    "--stepfactor");
	for (size_t v = b->min_bytes; v <= b->max_bytes; n_sizes++) {
		if (n_sizes == MAX_SIZES)
			return cli_usage_error(ctx, "more than %d sizes from "
						    "-b, -e, -i and -f",
					       MAX_SIZES);
		if (v > SIZE_MAX / (b->step_factor > 1 ? b->step_factor : 1) -
				b->step_bytes)
			break;
		v = b->step_factor > 1 ? v * b->step_factor : v + b->step_bytes;
	}
	return CLI_GO;
}

static int parse_choices(struct cli_ctx *ctx, struct bench *b,
			 const char *type_text, const char *op_text)
{
	struct kn_error err = {0};

	if (!strcmp(type_text, "all")) {
		for (int t = 0; t < KN_COLL_N_TYPES; t++)
			b->types[b->n_types++] = (enum kn_coll_type)t;
	} else if (kn_coll_type_parse(type_text, &b->types[0], &err) == 0) {
		b->n_types = 1;
	} else {
		return cli_usage_error(ctx, "-d %s (or all)", err.message);
	}
	if (!kn_coll_kind_reduces(b->kind)) {
		b->ops[b->n_ops++] = KN_COLL_SUM;
	} else if (!strcmp(op_text, "all")) {
		for (int o = 0; o < KN_COLL_N_OPS; o++)
			b->ops[b->n_ops++] = (enum kn_coll_op)o;
	} else if (kn_coll_op_parse(op_text, &b->ops[0], &err) == 0) {
		b->n_ops = 1;
	} else {
		return cli_usage_error(ctx, "-o %s (or all)", err.message);
	}
	return CLI_GO;
}

static int cmd_bench(struct cli_ctx *ctx, int argc, char **argv)
{
	struct bench b = {
		.backend = "cpu",
		.min_bytes = 32u << 20,
		.max_bytes = 32u << 20,
		.step_bytes = 1u << 20,
		.step_factor = 1,
		.iters = 20,
		.warmup = 5,
		.check = 1,
		.average = 1,
		.nthreads = 1,
		.ngpus = 1,
	};
	const char *sizes[4] = {NULL}, *type_text = "float", *op_text = "sum";
	const char *name = NULL, *min_busbw_text = NULL;
	const struct cli_flag flags[] = {
		{"minbytes", 'b', CLI_FLAG_STRING, &sizes[0]},
		{"maxbytes", 'e', CLI_FLAG_STRING, &sizes[1]},
		{"stepbytes", 'i', CLI_FLAG_STRING, &sizes[2]},
		{"stepfactor", 'f', CLI_FLAG_STRING, &sizes[3]},
		{"ngpus", 'g', CLI_FLAG_COUNT, &b.ngpus},
		{"nthreads", 't', CLI_FLAG_COUNT, &b.nthreads},
		{"op", 'o', CLI_FLAG_STRING, &op_text},
		{"datatype", 'd', CLI_FLAG_STRING, &type_text},
		{"root", 'r', CLI_FLAG_COUNT, &b.root},
		{"iters", 'n', CLI_FLAG_COUNT, &b.iters},
		{"warmup_iters", 'w', CLI_FLAG_COUNT, &b.warmup},
		{"check", 'c', CLI_FLAG_COUNT, &b.check},
		{"average", 'a', CLI_FLAG_COUNT, &b.average},
		{"blocking", 'z', CLI_FLAG_COUNT, &b.blocking},
		{"cudagraph", 'G', CLI_FLAG_COUNT, &b.graph},
		{"backend", 0, CLI_FLAG_STRING, &b.backend},
		{"min-busbw", 0, CLI_FLAG_STRING, &min_busbw_text},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	struct kn_coll_world *w = NULL;
	struct kn_error err = {0};
	double min_busbw = -1, avg;
	char *end;
	int rc;

	rc = cli_parse(ctx, argc, argv, flags, "COLLECTIVE", &name);
	if (rc != CLI_GO)
		return rc;
	if (kn_coll_kind_parse(name, &b.kind, &err) < 0)
		return cli_usage_error(ctx, "%s", err.message);
	rc = parse_sizes(ctx, &b, sizes);
	if (rc == CLI_GO)
		rc = parse_choices(ctx, &b, type_text, op_text);
	if (rc != CLI_GO)
		return rc;
	if (b.iters < 1)
		return cli_usage_error(ctx, "--iters must be at least 1");
	if (b.check > 1 || b.blocking > 1)
		return cli_usage_error(ctx, "--check and --blocking take 0 or 1");
	if (b.average > 3)
		return cli_usage_error(ctx, "--average takes 0 (rank 0), 1 "
					    "(mean), 2 (min) or 3 (max)");
	if (b.ngpus < 1 || b.nthreads < 1 || b.ngpus > 1024 / b.nthreads)
		return cli_usage_error(ctx, "--ngpus times --nthreads must be "
					    "1 to 1024");
	if (min_busbw_text) {
		errno = 0;
		min_busbw = strtod(min_busbw_text, &end);
		if (end == min_busbw_text || *end || errno || !(min_busbw >= 0))
			return cli_usage_error(ctx, "--min-busbw wants GB/s such "
						    "as 12.5, got '%s'",
					       min_busbw_text);
	}
	if (b.graph)
		fprintf(stderr, "kiln bench: -G %d ignored: collectives are "
				"launched one by one, never as CUDA graphs\n",
			b.graph);
	if (kn_coll_world_new(b.backend, b.ngpus * b.nthreads, &w, &err) < 0)
		return cli_fail(ctx, "%s", err.message);
	if (kn_coll_kind_rooted(b.kind) && b.root >= kn_coll_world_size(w)) {
		rc = cli_usage_error(ctx, "--root %d is not a rank (0..%d)",
				     b.root, kn_coll_world_size(w) - 1);
		goto out;
	}
	rc = kn_coll_run(w, bench_rank, &b) ? CLI_EXIT_FAIL : CLI_EXIT_OK;
	if (rc != CLI_EXIT_OK)
		goto out;
	if (b.wrong) {
		rc = cli_fail(ctx, "%llu wrong elements",
			      (unsigned long long)b.wrong);
		goto out;
	}
	avg = b.bw_count ? b.bw_sum / b.bw_count : 0;
	if (min_busbw >= 0 && avg < min_busbw)
		rc = cli_fail(ctx, "average bus bandwidth %.3f GB/s is below "
				   "--min-busbw %.3f GB/s",
			      avg, min_busbw);
out:
	kn_coll_world_free(w);
	return rc;
}
