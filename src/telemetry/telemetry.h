/*
 * telemetry: what this node's hardware says about itself, read from
 * procfs/sysfs and from NVML, and written as Prometheus text exposition
 * (format 0.0.4) under node_exporter's and dcgm-exporter's metric names, so
 * their Grafana dashboards work unchanged.
 *
 * Every file is read under a root directory ("/" on a real machine, a
 * fixture tree in tests): root "/x" reads /x/proc/stat, /x/sys/class/...
 *
 * NVML is opened with dlopen behind a table of its own entry points (same
 * C signatures as nvml.h), so the binary runs without a GPU and tests load
 * a stand-in library that answers from a recorded JSON file. The library
 * is $KILN_NVML_LIBRARY when set, else libnvidia-ml.so.1.
 */
#ifndef KILN_TELEMETRY_H
#define KILN_TELEMETRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/* ---- Prometheus text exposition ---- */

/* One scrape's text is held whole; a node with 8 GPUs writes ~100 KiB. */
#define KN_PROM_MAX_BYTES (8 * 1024 * 1024)
#define KN_PROM_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/*
 * Begin a metric family: "# HELP name help" (help escaped: \\ and \n) and
 * "# TYPE name type" (type is "counter", "gauge" or "untyped"). Every
 * sample of the family must follow before the next family begins.
 * Returns 0, -EINVAL for a name outside [a-zA-Z_:][a-zA-Z0-9_:]*, or
 * -E2BIG when out is full.
 */
int kn_prom_family(struct kn_buf *out, const char *name, const char *type,
		   const char *help);
/*
 * One sample line: name{l1="v1",...} value. labels holds name/value pairs
 * and ends with NULL (may be NULL itself); values are escaped (\\, \", \n).
 * Values are printed the way Prometheus parses them (NaN, +Inf, -Inf;
 * whole numbers without exponent). Returns 0, -EINVAL for a bad name or
 * label name, -E2BIG when out is full.
 */
int kn_prom_sample(struct kn_buf *out, const char *name,
		   const char *const *labels, double value);

/* A histogram: at most this many bucket bounds (+Inf is implied). */
#define KN_PROM_BOUNDS_MAX 16
struct kn_prom_histogram {
	const double *bounds; /* ascending upper bounds, not +Inf */
	size_t n_bounds;
	uint64_t counts[KN_PROM_BOUNDS_MAX + 1]; /* per bucket, last: +Inf */
	double sum;
	uint64_t count;
};
/* Empty, with n (at most KN_PROM_BOUNDS_MAX) bounds that outlive h. */
void kn_prom_histogram_init(struct kn_prom_histogram *h,
			    const double *bounds, size_t n);
void kn_prom_histogram_observe(struct kn_prom_histogram *h, double v);
/*
 * name_bucket (cumulative, le last among labels), name_sum and
 * name_count samples of h; labels as kn_prom_sample's, at most 6 pairs.
 * The family's HELP and TYPE (histogram) come first, from the caller.
 */
int kn_prom_histogram_write(struct kn_buf *out, const char *name,
			    const char *const *labels,
			    const struct kn_prom_histogram *h);

/* ---- node metrics (procfs, sysfs) ---- */

/* Mount points to report; NULL-terminated. NULL: every real filesystem. */
struct kn_node_options {
	const char *root;              /* "/" or a fixture tree */
	const char *const *mounts;
};

/*
 * Append node_exporter's families for identity (kn_node_identity), CPU
 * (node_cpu_seconds_total), load, boot time, kernel counters
 * (context switches, forks, interrupts, processes; kn_node_kernel),
 * memory (every /proc/meminfo field as
 * node_memory_<Field>_bytes), network (node_network_*_total per device),
 * disks (node_disk_*) and filesystems (node_filesystem_*) to out.
 * A missing /proc/stat or /proc/meminfo is an error naming the file; the
 * other sources are optional (a container may lack them).
 */
int kn_node_collect(const struct kn_node_options *opt, struct kn_buf *out,
		    struct kn_error *err);

/*
 * Append node_exporter's identity series: node_uname_info, node_time_seconds
 * (now_ms) and, when root has an os-release file, node_os_info and
 * node_os_version. kn_node_collect includes them.
 */
int kn_node_identity(const char *root, int64_t now_ms, struct kn_buf *out,
		     struct kn_error *err);

/*
 * Append node_exporter's vmstat (its default fields) and filefd series,
 * from whichever of their files root has. kn_node_collect
 * includes them.
 */
int kn_node_kernel(const char *root, struct kn_buf *out, struct kn_error *err);

/* /proc/meminfo's MemTotal in bytes. */
int kn_node_mem_total(const char *root, int64_t *out, struct kn_error *err);

/* An InfiniBand port from /sys/class/infiniband/DEV/ports/N. */
struct kn_ib_port {
	char device[64];    /* "mlx5_0" */
	int port;           /* 1 */
	char state[32];     /* "ACTIVE", from "4: ACTIVE" */
	char phys_state[32];/* "LinkUp", from "5: LinkUp" */
	double rate_gbps;   /* 400, from "400 Gb/sec (4X NDR)" */
	char link_layer[32];/* "InfiniBand" or "Ethernet" */
};

/*
 * Every InfiniBand port under root, sorted by device and port. *out is
 * malloc'd (NULL with *n 0 when there is no /sys/class/infiniband).
 */
int kn_ib_ports(const char *root, struct kn_ib_port **out, size_t *n,
		struct kn_error *err);

/* ---- GPUs (NVML) ---- */

#define KN_NVLINK_MAX 18 /* NVML_NVLINK_MAX_LINKS in current drivers */

/* Which fields of a sample the device answered (others: not supported). */
enum {
	KN_GPU_UTIL = 1u << 0,
	KN_GPU_FB = 1u << 1,
	KN_GPU_TEMP = 1u << 2,
	KN_GPU_POWER = 1u << 3,
	KN_GPU_CLOCKS = 1u << 4,
	KN_GPU_MAX_CLOCKS = 1u << 5,
	KN_GPU_THROTTLE = 1u << 6,
	KN_GPU_ECC = 1u << 7,
	KN_GPU_RETIRED = 1u << 8,
	KN_GPU_REMAP = 1u << 9,
	KN_GPU_PCIE = 1u << 10,
	KN_GPU_APP_CLOCKS = 1u << 11,
	KN_GPU_ENERGY = 1u << 12,
};

/* Clock event ("throttle") reason bits, as NVML defines them. */
#define KN_THROTTLE_GPU_IDLE 0x1ULL
#define KN_THROTTLE_APP_CLOCKS 0x2ULL
#define KN_THROTTLE_SW_POWER_CAP 0x4ULL
#define KN_THROTTLE_HW_SLOWDOWN 0x8ULL
#define KN_THROTTLE_SYNC_BOOST 0x10ULL
#define KN_THROTTLE_SW_THERMAL 0x20ULL
#define KN_THROTTLE_HW_THERMAL 0x40ULL
#define KN_THROTTLE_HW_POWER_BRAKE 0x80ULL

struct kn_gpu_sample {
	unsigned index;
	unsigned minor;            /* /dev/nvidiaN */
	char uuid[96];
	char name[96];             /* "NVIDIA H100 80GB HBM3" */
	char pci_bus_id[32];       /* "00000000:18:00.0" */
	uint32_t have;             /* KN_GPU_* */
	unsigned util_gpu, util_mem;          /* percent */
	uint64_t fb_total, fb_free, fb_used;  /* bytes */
	unsigned temp_c;
	unsigned power_mw;
	uint64_t energy_mj;                   /* since driver load */
	unsigned sm_clock, mem_clock;         /* MHz, current */
	unsigned max_sm_clock, max_mem_clock;
	unsigned app_sm_clock, app_mem_clock;
	uint64_t throttle;                    /* KN_THROTTLE_* */
	uint64_t ecc_sbe_vol, ecc_dbe_vol, ecc_sbe_agg, ecc_dbe_agg;
	unsigned retired_sbe, retired_dbe;
	bool retired_pending;
	unsigned remap_correctable, remap_uncorrectable;
	bool remap_pending, remap_failure;
	unsigned pcie_gen, pcie_max_gen, pcie_width, pcie_max_width;
	int nvlinks;                          /* links the device has */
	bool nvlink_up[KN_NVLINK_MAX];
};

struct kn_nvml;

/*
 * Load NVML and initialise it. -ENOENT (err says why) when there is no
 * library or no working driver: the machine has no usable GPU. Other
 * failures are -EIO.
 */
int kn_nvml_open(struct kn_nvml **out, struct kn_error *err);
/* Shut NVML down and unload it; NULL is fine. */
void kn_nvml_close(struct kn_nvml *nv);
unsigned kn_nvml_count(const struct kn_nvml *nv);
/* "550.54.15", or "" when the driver does not say. */
const char *kn_nvml_driver_version(const struct kn_nvml *nv);
/* Read device index; fields the device does not support are left out. */
int kn_nvml_sample(struct kn_nvml *nv, unsigned index,
		   struct kn_gpu_sample *out, struct kn_error *err);
/*
 * Drain pending XID events (without waiting); *last_xid[i] is set for
 * each device that reported one. last_xid has kn_nvml_count entries.
 */
int kn_nvml_poll_xids(struct kn_nvml *nv, unsigned *last_xid,
		      struct kn_error *err);

/* Application clocks: the highest supported pair, and setting them. */
struct kn_gpu_clocks {
	unsigned sm_mhz, mem_mhz;
};
int kn_nvml_app_clocks(struct kn_nvml *nv, unsigned index,
		       struct kn_gpu_clocks *current,
		       struct kn_gpu_clocks *max_supported,
		       struct kn_error *err);
int kn_nvml_set_app_clocks(struct kn_nvml *nv, unsigned index,
			   const struct kn_gpu_clocks *clocks,
			   struct kn_error *err);
int kn_nvml_reset_app_clocks(struct kn_nvml *nv, unsigned index,
			     struct kn_error *err);

/* One compute process on a GPU (kn_nvml_processes). */
#define KN_GPU_PROCS_MAX 64 /* per GPU and call: a bound on the stack */
struct kn_gpu_proc_usage {
	unsigned pid;
	int64_t memory_bytes; /* GPU memory it holds; -1 unknown */
	double sm_util;       /* 0..1 of the GPU's time, < 0 unknown */
};
/*
 * The compute processes on GPU index (nvmlDeviceGetComputeRunningProcesses)
 * with their memory, and their SM utilisation averaged over the driver's
 * samples since since_us (nvmlDeviceGetProcessUtilization; 0: all it
 * kept). At most max into out, *n of them; a driver without the calls
 * gives none. Untested on a real GPU here.
 */
int kn_nvml_processes(struct kn_nvml *nv, unsigned index,
		      unsigned long long since_us,
		      struct kn_gpu_proc_usage *out, size_t max, size_t *n,
		      struct kn_error *err);

/*
 * Append dcgm-exporter's families (DCGM_FI_DEV_*) for samples[0..n) with
 * labels gpu, UUID, pci_bus_id, device, modelName, Hostname.
 * last_xid may be NULL (then DCGM_FI_DEV_XID_ERRORS is 0).
 */
int kn_gpu_write(const struct kn_gpu_sample *samples, const unsigned *last_xid,
		 size_t n, const char *hostname, struct kn_buf *out,
		 struct kn_error *err);

#endif
