/*
 * GPU performance checks: memory bandwidth and GEMM throughput of every
 * GPU, against the vendor's figures for its model (data/gpu-perf.csv).
 *
 * The CUDA runtime and cuBLAS are opened with dlopen behind a table of
 * the entry points used, with the C signatures cuda_runtime_api.h and
 * cublas_api.h declare, so kiln runs where they are missing: the checks
 * then skip. $KILN_CUDART_LIBRARY and $KILN_CUBLAS_LIBRARY name the
 * libraries (tests point both at a stand-in that scripts elapsed times);
 * otherwise the sonames of CUDA 13, 12 and 11 are tried in turn.
 *
 * Bandwidth: device-to-device copies of one buffer (1 GiB, less when
 * memory is short) timed with CUDA events, counted as bandwidthTest does
 * (each copy reads and writes the buffer). GEMM: cublasGemmEx on square
 * bf16 matrices (fp16 before compute capability 8.0, which has no bf16
 * tensor cores) with fp32 accumulation, 2·M·N·K flops each. Both repeat
 * after a warm-up, so clocks have ramped and cuBLAS has chosen its kernel.
 * A measurement below the configured fraction of the figure fails.
 *
 * Written against NVIDIA's documented API; untested on a real GPU here.
 */
#include "internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Constants from cuda_runtime_api.h, driver_types.h, library_types.h and
   cublas_api.h. */
enum {
	CUDA_SUCCESS = 0,
	CUDA_MEMCPY_HOST_TO_DEVICE = 1,
	CUDA_MEMCPY_DEVICE_TO_DEVICE = 3,
	CUDA_DEV_ATTR_CC_MAJOR = 75,   /* cudaDevAttrComputeCapabilityMajor */
	CUDA_R_16F = 2,
	CUDA_R_16BF = 14,
	CUBLAS_STATUS_SUCCESS = 0,
	CUBLAS_OP_N = 0,
	CUBLAS_COMPUTE_32F = 68,
	CUBLAS_GEMM_DEFAULT = -1,
};

#define PERF_FILE_MAX (256 * 1024)
/* cudaDeviceProp only grows between CUDA versions (about 1 KiB in 12);
   only its first member, char name[256], is read, into a buffer larger
   than any version's struct. */
#define DEVICE_PROP_BUF 16384
#define COPY_BYTES_MAX (1LL << 30)
#define COPY_BYTES_MIN (64LL << 20)
#define COPY_WARMUP 2
#define COPY_REPS 40
#define GEMM_N 8192
#define GEMM_N_SMALL 4096
#define GEMM_WARMUP 2
#define GEMM_REPS 20
/* A board reports a little less memory than its nominal <N>GB. */
#define MODEL_MEM_TOLERANCE 0.15

typedef void *cuda_event;
typedef void *cuda_stream;
typedef void *cublas_handle;

struct cuda_api {
	int (*device_count)(int *);
	int (*set_device)(int);
	int (*device_props)(void *, int);
	int (*device_attribute)(int *, int, int);
	int (*mem_info)(size_t *, size_t *);
	int (*malloc_dev)(void **, size_t);
	int (*free_dev)(void *);
	int (*memcpy)(void *, const void *, size_t, int);
	int (*event_create)(cuda_event *);
	int (*event_record)(cuda_event, cuda_stream);
	int (*event_sync)(cuda_event);
	int (*event_elapsed)(float *, cuda_event, cuda_event);
	int (*event_destroy)(cuda_event);
	int (*device_sync)(void);
	const char *(*error_string)(int);
};

struct cublas_api {
	int (*create)(cublas_handle *);
	int (*destroy)(cublas_handle);
	int (*gemm_ex)(cublas_handle, int, int, int, int, int, const void *,
		       const void *, int, int, const void *, int, int,
		       const void *, void *, int, int, int, int);
};

struct sym {
	const char *names[2]; /* the first one found is used */
	size_t offset;
};

static const struct sym cuda_syms[] = {
#define SYM(field, a, b) {{a, b}, offsetof(struct cuda_api, field)}
	SYM(device_count, "cudaGetDeviceCount", NULL),
	SYM(set_device, "cudaSetDevice", NULL),
	SYM(device_props, "cudaGetDeviceProperties_v2",
	    "cudaGetDeviceProperties"),
	SYM(device_attribute, "cudaDeviceGetAttribute", NULL),
	SYM(mem_info, "cudaMemGetInfo", NULL),
	SYM(malloc_dev, "cudaMalloc", NULL),
	SYM(free_dev, "cudaFree", NULL),
	SYM(memcpy, "cudaMemcpy", NULL),
	SYM(event_create, "cudaEventCreate", NULL),
	SYM(event_record, "cudaEventRecord", NULL),
	SYM(event_sync, "cudaEventSynchronize", NULL),
	SYM(event_elapsed, "cudaEventElapsedTime", NULL),
	SYM(event_destroy, "cudaEventDestroy", NULL),
	SYM(device_sync, "cudaDeviceSynchronize", NULL),
	SYM(error_string, "cudaGetErrorString", NULL),
#undef SYM
};

static const struct sym cublas_syms[] = {
#define SYM(field, a) {{a, NULL}, offsetof(struct cublas_api, field)}
	SYM(create, "cublasCreate_v2"),
	SYM(destroy, "cublasDestroy_v2"),
	SYM(gemm_ex, "cublasGemmEx"),
#undef SYM
};

static const char *const cudart_names[] = {
	"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0",
	"libcudart.so", NULL};
static const char *const cublas_names[] = {
	"libcublas.so.13", "libcublas.so.12", "libcublas.so.11",
	"libcublas.so", NULL};

/*
 * Load $env or the first of names that loads, and resolve syms into
 * table. Returns the handle, or NULL with why[] saying what was missing.
 */
static void *load(const char *env, const char *const *names,
		  const struct sym *syms, size_t nsyms, void *table,
		  char *why, size_t why_len)
{
	const char *path = getenv(env);
	void *lib = NULL;

	if (path && *path) {
		lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
		if (!lib) {
			snprintf(why, why_len, "cannot load %s ($%s)", path, env);
			return NULL;
		}
	} else {
		for (const char *const *n = names; *n && !lib; n++)
			if ((lib = dlopen(*n, RTLD_NOW | RTLD_LOCAL)) != NULL)
				path = *n;
		if (!lib) {
			snprintf(why, why_len, "cannot load %s", names[0]);
			return NULL;
		}
	}
	for (size_t i = 0; i < nsyms; i++) {
		void *fn = NULL;
		for (int k = 0; k < 2 && !fn && syms[i].names[k]; k++)
			fn = dlsym(lib, syms[i].names[k]);
		if (!fn) {
			snprintf(why, why_len, "%s lacks %s", path,
				 syms[i].names[0]);
			dlclose(lib);
			return NULL;
		}
		memcpy((char *)table + syms[i].offset, &fn, sizeof(fn));
	}
	return lib;
}

/* ---- the table of expected figures ---- */

void kn_gpu_perf_table_release(struct kn_gpu_perf_table *t)
{
	free(t->rows);
	t->rows = NULL;
	t->n = 0;
}

/* A blank cell is 0 (no figure); anything else must be a positive number. */
static int parse_figure(const char *s, double *out)
{
	char *end;

	if (!*s) {
		*out = 0;
		return 0;
	}
	*out = strtod(s, &end);
	return *end || !(*out > 0) || !isfinite(*out) ? -1 : 0;
}

/* The table's columns, in the order perf_row's cells come. */
static const char *const perf_columns[] = {"model", "mem_bandwidth_gbs",
					   "tensor_tflops"};

/* kn_gpu_perf_load's table as it grows. */
struct perf_read {
	const char *path;
	struct kn_gpu_perf_table *out;
	size_t cap;
};

/* A row: model, mem_bandwidth_gbs, tensor_tflops. */
static int perf_row(void *arg, char **cells, int line, struct kn_error *err)
{
	struct perf_read *t = arg;
	struct kn_gpu_perf_row *r;

	if (t->out->n == t->cap) {
		t->cap = t->cap ? t->cap * 2 : 16;
		t->out->rows = kn_xrealloc(t->out->rows, t->cap * sizeof(*r));
	}
	r = &t->out->rows[t->out->n];
	memset(r, 0, sizeof(*r));
	if (!cells[0][0] ||
	    kn_strlcpy(r->model, cells[0], sizeof(r->model)) >= sizeof(r->model))
		return kn_errorf(err, KN_EINVAL, "perf",
				 "%s:%d: model is empty or too long", t->path,
				 line);
	for (int w = 1; w < 3; w++) {
		double *dst = w == 1 ? &r->mem_bandwidth_gbs : &r->tensor_tflops;

		if (parse_figure(cells[w], dst) < 0)
			return kn_errorf(err, KN_EINVAL, "perf",
					 "%s:%d: %s \"%s\" is not a positive "
					 "number or blank",
					 t->path, line, perf_columns[w],
					 cells[w]);
	}
	t->out->n++;
	return 0;
}

int kn_gpu_perf_load(const char *path, struct kn_gpu_perf_table *out,
		     struct kn_error *err)
{
	struct perf_read t = {.path = path, .out = out};
	int rc;

	memset(out, 0, sizeof(*out));
	rc = kn_csv_read_columns(path, PERF_FILE_MAX, "perf", perf_columns, 3,
				 perf_row, &t, err);
	if (rc < 0)
		kn_gpu_perf_table_release(out);
	return rc;
}

/* "NVIDIA H100 80GB HBM3" -> "H100"; "NVIDIA A100-SXM4-40GB" -> "A100";
   "Tesla V100-PCIE-16GB" -> "V100". */
static void device_family(const char *name, char *out, size_t len)
{
	char copy[128], *save = NULL, *w;

	out[0] = '\0';
	kn_strlcpy(copy, name, sizeof(copy));
	for (w = strtok_r(copy, " ", &save); w; w = strtok_r(NULL, " ", &save))
		if (strcmp(w, "NVIDIA") != 0 && strcmp(w, "Tesla") != 0) {
			w[strcspn(w, "-")] = '\0';
			kn_strlcpy(out, w, len);
			return;
		}
}

const struct kn_gpu_perf_row *kn_gpu_perf_lookup(const struct kn_gpu_perf_table *t,
						 const char *device_name,
						 double mem_gib)
{
	const struct kn_gpu_perf_row *best = NULL;
	double best_off = MODEL_MEM_TOLERANCE;
	char family[64];
	size_t fl;

	device_family(device_name, family, sizeof(family));
	fl = strlen(family);
	if (!fl)
		return NULL;
	for (size_t i = 0; i < t->n; i++) {
		const char *m = t->rows[i].model;
		double gb, off;
		if (strncasecmp(m, family, fl) != 0 || m[fl] != '-')
			continue;
		gb = strtod(m + fl + 1, NULL);
		if (!(gb > 0))
			continue;
		off = fabs(gb - mem_gib) / gb;
		if (off <= best_off) {
			best_off = off;
			best = &t->rows[i];
		}
	}
	return best;
}

/* ---- arithmetic ---- */

double kn_copy_gbs(int64_t bytes, int copies, double elapsed_ms)
{
	if (!(elapsed_ms > 0))
		return 0;
	return 2.0 * (double)bytes * copies / (elapsed_ms / 1e3) / 1e9;
}

double kn_gemm_tflops(int64_t m, int64_t n, int64_t k, int reps,
		      double elapsed_ms)
{
	if (!(elapsed_ms > 0))
		return 0;
	return 2.0 * (double)m * (double)n * (double)k * reps /
	       (elapsed_ms / 1e3) / 1e12;
}

enum kn_check_status kn_gpu_perf_judge(double measured, double expected,
				       double fraction)
{
	if (!(expected > 0))
		return KN_CHECK_SKIP;
	return measured < fraction * expected ? KN_CHECK_FAIL : KN_CHECK_PASS;
}

/* ---- measuring ---- */

struct cuda {
	void *cudart, *cublas;
	struct cuda_api rt;
	struct cublas_api bl;
};

static const char *cuda_err(const struct cuda *cu, int code)
{
	const char *s = cu->rt.error_string(code);
	return s ? s : "unknown CUDA error";
}

/* Elapsed milliseconds between two recorded events. */
static int elapsed(const struct cuda *cu, cuda_event a, cuda_event b,
		   double *ms)
{
	float f = 0;
	int c;

	if ((c = cu->rt.event_sync(b)) != CUDA_SUCCESS ||
	    (c = cu->rt.event_elapsed(&f, a, b)) != CUDA_SUCCESS)
		return c;
	*ms = f;
	return CUDA_SUCCESS;
}

static int measure_copy(const struct cuda *cu, cuda_event ev[2],
			struct kn_gpu_perf_sample *s, size_t free_bytes)
{
	int64_t bytes = COPY_BYTES_MAX;
	void *src = NULL, *dst = NULL;
	double ms = 0;
	int c;

	if ((int64_t)(free_bytes / 4) < bytes)
		bytes = (int64_t)(free_bytes / 4) & ~((1LL << 20) - 1);
	if (bytes < COPY_BYTES_MIN) {
		snprintf(s->error, sizeof(s->error), "only %zu MiB of GPU "
			 "memory free, too little to measure bandwidth",
			 free_bytes >> 20);
		return -1;
	}
	s->copy_bytes = bytes;
	if ((c = cu->rt.malloc_dev(&src, (size_t)bytes)) != CUDA_SUCCESS ||
	    (c = cu->rt.malloc_dev(&dst, (size_t)bytes)) != CUDA_SUCCESS)
		goto out;
	for (int i = 0; i < COPY_WARMUP + COPY_REPS; i++) {
		if (i == COPY_WARMUP &&
		    (c = cu->rt.event_record(ev[0], NULL)) != CUDA_SUCCESS)
			goto out;
		if ((c = cu->rt.memcpy(dst, src, (size_t)bytes,
				       CUDA_MEMCPY_DEVICE_TO_DEVICE)) !=
		    CUDA_SUCCESS)
			goto out;
	}
	if ((c = cu->rt.event_record(ev[1], NULL)) != CUDA_SUCCESS ||
	    (c = elapsed(cu, ev[0], ev[1], &ms)) != CUDA_SUCCESS)
		goto out;
	s->copy_gbs = kn_copy_gbs(bytes, COPY_REPS, ms);
out:
	if (c != CUDA_SUCCESS)
		snprintf(s->error, sizeof(s->error), "copy: %s",
			 cuda_err(cu, c));
	cu->rt.free_dev(src);
	cu->rt.free_dev(dst);
	return c == CUDA_SUCCESS ? 0 : -1;
}

/*
 * Values in [-1, -0.5] and [0.5, 1] with random mantissas, as bf16 or fp16
 * bit patterns: real data, since all-zero operands draw less power and
 * would flatter the clocks.
 */
static void fill_matrix(uint16_t *m, size_t n, bool bf16)
{
	uint32_t x = 0x9e3779b9u;

	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		if (bf16) /* exponent 126: [0.5, 1) */
			m[i] = (uint16_t)(((x >> 31) << 15) | (126u << 7) |
					  (x & 0x7f));
		else      /* exponent 14: [0.5, 1) */
			m[i] = (uint16_t)(((x >> 31) << 15) | (14u << 10) |
					  (x & 0x3ff));
	}
}

static void measure_gemm(const struct cuda *cu, cuda_event ev[2],
			 struct kn_gpu_perf_sample *s, size_t free_bytes)
{
	bool bf16 = s->cc_major >= 8;
	int type = bf16 ? CUDA_R_16BF : CUDA_R_16F, n = GEMM_N, c = 0, st = 0;
	size_t elems, bytes;
	uint16_t *host = NULL;
	void *a = NULL, *b = NULL, *d = NULL;
	cublas_handle h = NULL;
	const float alpha = 1.0f, beta = 0.0f;
	double ms = 0;

	/* A, B and C, and as much again spare for cuBLAS' workspace. */
	if (free_bytes < 4ULL * GEMM_N * GEMM_N * 2)
		n = GEMM_N_SMALL;
	s->gemm_n = n;
	s->gemm_type = bf16 ? "bf16" : "fp16";
	elems = (size_t)n * (size_t)n;
	bytes = elems * 2;
	if ((st = cu->bl.create(&h)) != CUBLAS_STATUS_SUCCESS)
		goto out;
	if ((c = cu->rt.malloc_dev(&a, bytes)) != CUDA_SUCCESS ||
	    (c = cu->rt.malloc_dev(&b, bytes)) != CUDA_SUCCESS ||
	    (c = cu->rt.malloc_dev(&d, bytes)) != CUDA_SUCCESS)
		goto out;
	host = kn_xmalloc(bytes);
	fill_matrix(host, elems, bf16);
	if ((c = cu->rt.memcpy(a, host, bytes, CUDA_MEMCPY_HOST_TO_DEVICE)) !=
		    CUDA_SUCCESS ||
	    (c = cu->rt.memcpy(b, host, bytes, CUDA_MEMCPY_HOST_TO_DEVICE)) !=
		    CUDA_SUCCESS)
		goto out;
	for (int i = 0; i < GEMM_WARMUP + GEMM_REPS; i++) {
		if (i == GEMM_WARMUP &&
		    (c = cu->rt.event_record(ev[0], NULL)) != CUDA_SUCCESS)
			goto out;
		st = cu->bl.gemm_ex(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n,
				    &alpha, a, type, n, b, type, n, &beta, d,
				    type, n, CUBLAS_COMPUTE_32F,
				    CUBLAS_GEMM_DEFAULT);
		if (st != CUBLAS_STATUS_SUCCESS)
			goto out;
	}
	if ((c = cu->rt.event_record(ev[1], NULL)) != CUDA_SUCCESS ||
	    (c = elapsed(cu, ev[0], ev[1], &ms)) != CUDA_SUCCESS)
		goto out;
	s->gemm_tflops = kn_gemm_tflops(n, n, n, GEMM_REPS, ms);
out:
	if (st != CUBLAS_STATUS_SUCCESS)
		snprintf(s->error, sizeof(s->error), "cuBLAS %s: status %d",
			 h ? "GemmEx" : "create", st);
	else if (c != CUDA_SUCCESS)
		snprintf(s->error, sizeof(s->error), "GEMM: %s",
			 cuda_err(cu, c));
	free(host);
	cu->rt.free_dev(a);
	cu->rt.free_dev(b);
	cu->rt.free_dev(d);
	if (h)
		cu->bl.destroy(h);
}

static void measure(const struct cuda *cu, int dev, struct kn_gpu_perf_sample *s)
{
	char *props = kn_xcalloc(1, DEVICE_PROP_BUF);
	cuda_event ev[2] = {NULL, NULL};
	size_t free_bytes = 0, total = 0;
	int c;

	if ((c = cu->rt.set_device(dev)) != CUDA_SUCCESS ||
	    (c = cu->rt.device_props(props, dev)) != CUDA_SUCCESS ||
	    (c = cu->rt.device_attribute(&s->cc_major, CUDA_DEV_ATTR_CC_MAJOR,
					 dev)) != CUDA_SUCCESS ||
	    (c = cu->rt.mem_info(&free_bytes, &total)) != CUDA_SUCCESS ||
	    (c = cu->rt.event_create(&ev[0])) != CUDA_SUCCESS ||
	    (c = cu->rt.event_create(&ev[1])) != CUDA_SUCCESS) {
		snprintf(s->error, sizeof(s->error), "%s", cuda_err(cu, c));
		goto out;
	}
	props[255] = '\0';
	kn_strlcpy(s->name, props, sizeof(s->name));
	s->mem_gib = (double)total / (1024.0 * 1024 * 1024);
	if (measure_copy(cu, ev, s, free_bytes) < 0)
		goto out;
	if (cu->cublas)
		measure_gemm(cu, ev, s, free_bytes);
out:
	for (int i = 0; i < 2; i++)
		if (ev[i])
			cu->rt.event_destroy(ev[i]);
	cu->rt.device_sync();
	free(props);
}

/* ---- reporting ---- */

/*
 * One check over all GPUs: which = 0 bandwidth, 1 GEMM. Status: fail if
 * any GPU failed or measured below its fraction (the message then lists
 * only failures); pass if at least one was compared; skip if no GPU's
 * model has a figure.
 */
static void report_one(const struct kn_gpu_perf_table *t, double fraction,
		       const struct kn_gpu_perf_sample *s, size_t n, int which,
		       struct kn_check_result *r)
{
	const char *unit = which == 0 ? "GB/s" : "TFLOP/s";

	r->status = KN_CHECK_SKIP;
	r->message[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		const struct kn_gpu_perf_row *row =
			kn_gpu_perf_lookup(t, s[i].name, s[i].mem_gib);
		double got = which == 0 ? s[i].copy_gbs : s[i].gemm_tflops;
		double want = !row ? 0 : which == 0 ? row->mem_bandwidth_gbs
						    : row->tensor_tflops;
		char what[160];

		if (which == 0)
			snprintf(what, sizeof(what), "GPU %zu (%s): %.0f GB/s "
				 "copying %lld MiB", i, s[i].name, got,
				 (long long)(s[i].copy_bytes >> 20));
		else
			snprintf(what, sizeof(what), "GPU %zu (%s): %.1f "
				 "TFLOP/s on %d^3 %s GEMM", i, s[i].name, got,
				 s[i].gemm_n, s[i].gemm_type ? s[i].gemm_type
							     : "bf16");
		if (!(got > 0)) {
			check_add(r, KN_CHECK_FAIL, "GPU %zu (%s): %s", i,
				  s[i].name,
				  s[i].error[0] ? s[i].error
						: "no elapsed time measured");
			continue;
		}
		switch (kn_gpu_perf_judge(got, want, fraction)) {
		case KN_CHECK_SKIP:
			check_add(r, KN_CHECK_SKIP,
				  "%s; no expected figure for %s, "
				  "nothing compared",
				  what, row ? row->model : "this model");
			break;
		case KN_CHECK_FAIL:
			check_add(r, KN_CHECK_FAIL,
				  "%s, below %.0f%% of %s's %g %s", what,
				  fraction * 100, row->model, want, unit);
			break;
		case KN_CHECK_PASS:
			if (r->status == KN_CHECK_SKIP)
				r->status = KN_CHECK_PASS;
			check_add(r, KN_CHECK_PASS, "%s, %.0f%% of %s's %g",
				  what, 100 * got / want, row->model, want);
			break;
		}
	}
}

int kn_gpu_perf_report(const struct kn_gpu_perf_table *table, double fraction,
		       const struct kn_gpu_perf_sample *s, size_t n,
		       const char *skip_reason, const char *cublas_missing,
		       struct kn_check_result *results)
{
	int failed = 0;

	memset(results, 0, KN_GPU_PERF_CHECKS * sizeof(*results));
	results[0].name = "gpu_mem_bandwidth";
	results[1].name = "gpu_gemm";
	if (n == 0) {
		for (int i = 0; i < KN_GPU_PERF_CHECKS; i++)
			check_set(&results[i], KN_CHECK_SKIP, "%s",
				  skip_reason ? skip_reason : "no GPU");
		return 0;
	}
	report_one(table, fraction, s, n, 0, &results[0]);
	if (cublas_missing)
		check_set(&results[1], KN_CHECK_SKIP, "%s", cublas_missing);
	else
		report_one(table, fraction, s, n, 1, &results[1]);
	for (int i = 0; i < KN_GPU_PERF_CHECKS; i++)
		failed += results[i].status == KN_CHECK_FAIL;
	return failed;
}

int kn_gpu_perf_run(const struct kn_gpu_perf_config *cfg,
		    struct kn_check_result *results, struct kn_error *err)
{
	struct kn_gpu_perf_table table;
	struct kn_gpu_perf_sample *s = NULL;
	struct cuda cu;
	char why[256], skip[320], nocublas[320];
	int count = 0, c, rc;

	if ((rc = kn_gpu_perf_load(cfg->table_path, &table, err)) < 0)
		return rc;
	memset(&cu, 0, sizeof(cu));
	cu.cudart = load("KILN_CUDART_LIBRARY", cudart_names, cuda_syms,
			 sizeof(cuda_syms) / sizeof(cuda_syms[0]), &cu.rt, why,
			 sizeof(why));
	if (!cu.cudart) {
		snprintf(skip, sizeof(skip), "no CUDA runtime: %s", why);
		rc = kn_gpu_perf_report(&table, cfg->fraction, NULL, 0, skip,
					NULL, results);
		goto out;
	}
	c = cu.rt.device_count(&count);
	if (c != CUDA_SUCCESS || count <= 0) {
		snprintf(skip, sizeof(skip), "no GPU: %s",
			 c != CUDA_SUCCESS ? cuda_err(&cu, c)
					   : "CUDA sees no device");
		rc = kn_gpu_perf_report(&table, cfg->fraction, NULL, 0, skip,
					NULL, results);
		goto out;
	}
	cu.cublas = load("KILN_CUBLAS_LIBRARY", cublas_names, cublas_syms,
			 sizeof(cublas_syms) / sizeof(cublas_syms[0]), &cu.bl,
			 why, sizeof(why));
	if (!cu.cublas)
		snprintf(nocublas, sizeof(nocublas), "no cuBLAS: %s", why);
	s = kn_xcalloc((size_t)count, sizeof(*s));
	for (int d = 0; d < count; d++)
		measure(&cu, d, &s[d]);
	rc = kn_gpu_perf_report(&table, cfg->fraction, s, (size_t)count, NULL,
				cu.cublas ? NULL : nocublas, results);
out:
	free(s);
	if (cu.cublas)
		dlclose(cu.cublas);
	if (cu.cudart)
		dlclose(cu.cudart);
	kn_gpu_perf_table_release(&table);
	return rc;
}
