/*
 * health: node checks that should keep work off a bad machine — the GPU
 * inventory against the VM size's catalogue row, GPU ECC, page retirement
 * and row remapping, XIDs and machine checks in the kernel log, clock
 * throttling, PCIe links below capability, NVLinks down, InfiniBand ports,
 * a lost DIMM, and free space where jobs write.
 *
 * Each check gives pass, fail (with a message saying what and where) or
 * skip (the check does not apply or cannot look, with the reason). Files
 * are read under a root, as in telemetry/, so every check is tested on
 * fixture trees and recorded NVML answers.
 */
#ifndef KILN_HEALTH_H
#define KILN_HEALTH_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "telemetry/telemetry.h"

/* One row of data/azure-gpu-skus.csv, the fields the checks use. */
struct kn_sku {
	char size[64];        /* "Standard_ND96isr_H100_v5" */
	char gpu_model[96];   /* "NVIDIA H100 80GB SXM5" */
	int gpu_count;        /* a vGPU fraction ("1/6") counts as 1 */
	double ram_gib;
	int ib_ports;         /* 0 when the size has no InfiniBand */
	double ib_gbps;       /* per port */
};

/*
 * The row for size (case-insensitive) in the CSV at path. Errors name the
 * file and line, or say the size is unknown (with the closest name).
 */
int kn_sku_load(const char *path, const char *size, struct kn_sku *out,
		struct kn_error *err);

enum kn_check_status { KN_CHECK_PASS, KN_CHECK_FAIL, KN_CHECK_SKIP };

struct kn_check_result {
	const char *name; /* "gpu_ecc", static */
	enum kn_check_status status;
	char message[512];
};

/* Memory may read this far below the catalogue (firmware, kernel). */
#define KN_HEALTH_MEM_TOLERANCE 0.05

struct kn_health_config {
	const char *root;            /* "/" or a fixture tree */
	const struct kn_sku *sku;    /* NULL: inventory checks are skipped */
	struct kn_nvml *nvml;        /* NULL: no GPU (GPU checks skipped) */
	const char *kernel_log;      /* NULL: ROOT/dev/kmsg */
	const char *const *dirs;     /* scratch/checkpoint dirs; NULL-ended */
	int64_t min_free_bytes;      /* for each of dirs */
};

#define KN_HEALTH_CHECKS 11

/*
 * Run every check; results[KN_HEALTH_CHECKS] is filled in a fixed order.
 * Returns the number of failed checks (>= 0); a check that cannot read
 * its source fails or skips itself, so nothing here is fatal.
 */
int kn_health_run(const struct kn_health_config *cfg,
		  struct kn_check_result *results);

/*
 * kn_health_run on this machine's GPUs, for a caller that only needs the
 * verdict: NVML is opened for the run and closed after (none: the GPU
 * checks skip; cfg->nvml is not used). Returns the number of failed
 * checks and writes "check: message" of the first failure to first
 * (first_size bytes, truncated), or "" when none failed.
 */
int kn_health_run_here(const struct kn_health_config *cfg, char *first,
		       size_t first_size);

const char *kn_check_status_name(enum kn_check_status s);

/* ---- GPU performance: memory bandwidth and GEMM throughput (--perf) ---- */

/*
 * One row of data/gpu-perf.csv: a GPU model as kiln names it
 * ("H100-80GB") with its vendor figures. 0 means no figure (the CSV cell
 * is blank): that GPU's measurement is reported but compared with nothing.
 */
struct kn_gpu_perf_row {
	char model[64];
	double mem_bandwidth_gbs; /* peak memory bandwidth, GB/s (1e9 B/s) */
	double tensor_tflops;     /* dense bf16 (fp16 before Ampere) TFLOP/s */
};

struct kn_gpu_perf_table {
	struct kn_gpu_perf_row *rows;
	size_t n;
};

/* Read the table at path; errors name the file and line. */
int kn_gpu_perf_load(const char *path, struct kn_gpu_perf_table *out,
		     struct kn_error *err);
void kn_gpu_perf_table_release(struct kn_gpu_perf_table *t);

/*
 * The row for a device as CUDA names it ("NVIDIA H100 80GB HBM3") with
 * mem_gib of memory: the rows of its family ("H100") whose <N>GB is
 * within 15% of mem_gib (boards report less than their nominal size),
 * the closest one. NULL when there is none.
 */
const struct kn_gpu_perf_row *kn_gpu_perf_lookup(const struct kn_gpu_perf_table *t,
						 const char *device_name,
						 double mem_gib);

/* Copy bandwidth as bandwidthTest counts it: each copy reads and writes
   bytes, so 2 * bytes * copies / seconds, in GB/s (1e9). */
double kn_copy_gbs(int64_t bytes, int copies, double elapsed_ms);
/* 2 * m * n * k * reps / seconds, in TFLOP/s (1e12). */
double kn_gemm_tflops(int64_t m, int64_t n, int64_t k, int reps,
		      double elapsed_ms);
/*
 * measured against fraction * expected: SKIP when expected is 0 (no
 * figure), FAIL below, PASS at or above.
 */
enum kn_check_status kn_gpu_perf_judge(double measured, double expected,
				       double fraction);

/* What one GPU measured. */
struct kn_gpu_perf_sample {
	char name[96];          /* as CUDA names it */
	double mem_gib;
	int cc_major;           /* compute capability */
	int64_t copy_bytes;     /* buffer size of each copy */
	double copy_gbs;        /* 0 when not measured */
	int gemm_n;             /* M = N = K */
	const char *gemm_type;  /* "bf16" or "fp16" */
	double gemm_tflops;     /* 0 when not measured */
	char error[256];        /* a CUDA or cuBLAS failure, else "" */
};

#define KN_GPU_PERF_CHECKS 2
#define KN_GPU_PERF_FRACTION 0.7

struct kn_gpu_perf_config {
	const char *table_path;  /* data/gpu-perf.csv */
	double fraction;         /* of the expected figure, (0, 1] */
};

/*
 * Measure every GPU CUDA sees and fill results[KN_GPU_PERF_CHECKS]
 * ("gpu_mem_bandwidth", "gpu_gemm"). Without the CUDA runtime or a GPU
 * both skip; without cuBLAS the GEMM check skips. Occupies each GPU for
 * a few seconds. Returns the number of failed checks, or a negative
 * errno with err filled when the table cannot be read.
 */
int kn_gpu_perf_run(const struct kn_gpu_perf_config *cfg,
		    struct kn_check_result *results, struct kn_error *err);

/*
 * The judging half of kn_gpu_perf_run, on samples already taken (n may be
 * 0, with skip_reason saying why there is nothing; cublas_missing names a
 * reason the GEMM was not run, or NULL).
 */
int kn_gpu_perf_report(const struct kn_gpu_perf_table *table, double fraction,
		       const struct kn_gpu_perf_sample *s, size_t n,
		       const char *skip_reason, const char *cublas_missing,
		       struct kn_check_result *results);

#endif
