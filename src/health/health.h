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

const char *kn_check_status_name(enum kn_check_status s);

#endif
