/*
 * cost: what compute costs. The VM size catalog (data/azure-gpu-skus.csv,
 * data/azure-cpu-skus.csv and a user's own rows) with each size's price
 * per hour under each pricing model, and the advisor behind `kiln
 * advise`: which family Azure's compute recommendations name for a phase
 * and workload, the memory a model needs, and the cheapest sizes that
 * hold it.
 *
 * Pure logic: the only I/O is reading catalog files. A price the catalog
 * does not have is unknown (kn_vm_size_price says false), never guessed.
 *
 * For a cost ledger: load the catalog once (kn_catalog_new, then
 * kn_catalog_load for each file, later files replacing rows by size
 * name), find a node's size with kn_catalog_find, and price its time with
 * kn_vm_size_price (a whole VM) or kn_vm_size_gpu_price (one GPU of it,
 * for GPU-seconds of a job or a share) under the node's pricing model.
 */
#ifndef KILN_COST_H
#define KILN_COST_H

#include <stdbool.h>
#include <stddef.h>

#include "base/base.h"

/* Azure's (and kiln's) month for monthly prices: 8,760 h / 12. */
#define KN_HOURS_PER_MONTH 730.0

enum kn_pricing {
	KN_PRICING_ON_DEMAND,   /* pay as you go */
	KN_PRICING_SPOT,
	KN_PRICING_RESERVED_1Y, /* hourly equivalent of a 1-year reservation */
	KN_PRICING_RESERVED_3Y,
	KN_PRICINGS
};

/* "on_demand", "spot", "reserved_1y", "reserved_3y". */
const char *kn_pricing_name(enum kn_pricing p);
/* The reverse; -EINVAL (err field "pricing") for any other text. */
int kn_pricing_parse(const char *s, enum kn_pricing *out,
		     struct kn_error *err);

/* One VM size. */
struct kn_vm_size {
	char size[64];        /* "Standard_ND96isr_H100_v5"; the key */
	char family[48];      /* "ND_H100_v5", "Esv5" */
	char gpu_model[96];   /* as the catalog writes it; "" on CPU sizes */
	char gpu_name[48];    /* kiln's name ("H100-80GB"); "" on CPU sizes */
	double gpus;          /* per VM; a vGPU share is a fraction; 0: CPU */
	double gpu_mem_gb;    /* per GPU, or the share's memory */
	double gpu_mem_total_gb; /* all of the VM's GPU memory */
	int vcpus;
	double ram_gib;
	bool infiniband;
	bool retired;         /* the status column says RETIRED */
	double usd_hr[KN_PRICINGS]; /* < 0: not in the catalog */
	double gpu_bandwidth_gbs; /* per GPU; 0 unknown (kn_catalog_set_bandwidth) */
};

struct kn_catalog;

struct kn_catalog *kn_catalog_new(void);
void kn_catalog_free(struct kn_catalog *c);

/*
 * Add the rows of the CSV at path (or in text, named path in messages)
 * to the catalog: a row whose size is already there replaces it, others
 * are appended. Needs a header with the columns family, size, gpu_model,
 * gpu_count, gpu_mem_per_gpu_gb, vcpus, ram_gib, infiniband,
 * payg_linux_usd_hr, spot_usd_hr, ri_1y_usd_hr and ri_3y_usd_hr (others,
 * such as status and the sources, are read or ignored). A bad cell is
 * -EINVAL with "PATH:LINE:COLUMN: COLUMN_NAME: why" (err field the
 * column name); the catalog is then unchanged.
 */
int kn_catalog_load(struct kn_catalog *c, const char *path,
		    struct kn_error *err);
/* The GPU and CPU catalogs shipped with kiln (see kn_data_path). */
int kn_catalog_load_shipped(struct kn_catalog *c, struct kn_error *err);
int kn_catalog_parse(struct kn_catalog *c, const char *text, size_t len,
		     const char *path, struct kn_error *err);

size_t kn_catalog_count(const struct kn_catalog *c);
/* The i-th size (file order, replacements in place), NULL past the end. */
const struct kn_vm_size *kn_catalog_at(const struct kn_catalog *c, size_t i);
/* The size of that name (case-insensitive), or NULL. */
const struct kn_vm_size *kn_catalog_find(const struct kn_catalog *c,
					 const char *size);
/* Set the i-th size's per-GPU memory bandwidth (GB/s), e.g. from
   data/gpu-perf.csv; sizing by throughput needs it. */
void kn_catalog_set_bandwidth(struct kn_catalog *c, size_t i, double gbs);

/* The VM's price per hour under p into *usd_hr; false when unknown. */
bool kn_vm_size_price(const struct kn_vm_size *s, enum kn_pricing p,
		      double *usd_hr);
/* One GPU's share of it (price / GPUs); false when unknown or no GPU. */
bool kn_vm_size_gpu_price(const struct kn_vm_size *s, enum kn_pricing p,
			  double *usd_hr);

/* ---- the advisor ---- */

enum kn_phase { KN_PHASE_TRAIN, KN_PHASE_FINETUNE, KN_PHASE_INFER };
enum kn_workload {
	KN_WORKLOAD_GENERATIVE,
	KN_WORKLOAD_COMPLEX, /* non-generative, complex models */
	KN_WORKLOAD_SMALL,   /* non-generative, small models */
};

const char *kn_phase_name(enum kn_phase p);
const char *kn_workload_name(enum kn_workload w);
/* -EINVAL naming the field ("phase", "workload") and the choices. */
int kn_phase_parse(const char *s, enum kn_phase *out, struct kn_error *err);
int kn_workload_parse(const char *s, enum kn_workload *out,
		      struct kn_error *err);
/* Bytes per parameter of fp32, bf16, fp16, fp8, int8, int4; -EINVAL
   (field "dtype") otherwise. */
int kn_dtype_bytes(const char *dtype, double *out, struct kn_error *err);
/* "7B", "350M", "1.5T", "123456" (a plain count) -> parameters; -EINVAL
   (field "params") when not a positive number. */
int kn_parse_params(const char *s, double *out, struct kn_error *err);

/* What Azure's table says for a phase and workload. */
enum kn_family_class {
	KN_CLASS_ND,          /* GPU, ND family */
	KN_CLASS_NC,          /* GPU, NC family */
	KN_CLASS_NV,          /* GPU, NV (visualisation): in no row of the table */
	KN_CLASS_GPU_OTHER,   /* a GPU size of the user's, outside Azure */
	KN_CLASS_CPU_MEMORY,  /* memory-optimised CPU (E series) */
	KN_CLASS_CPU_COMPUTE, /* compute-optimised CPU (F series) */
	KN_CLASS_CPU_OTHER,
};
struct kn_family_advice {
	bool gpu;
	enum kn_family_class preferred;
	enum kn_family_class alternative; /* == preferred when none */
	bool infiniband;   /* RDMA/InfiniBand wanted (multi-node training) */
	const char *text;  /* the recommendation in words, static */
};
/* "ND", "NC", "NV", "GPU", "CPU memory-optimized", "CPU compute-optimized",
   "CPU". */
const char *kn_family_class_name(enum kn_family_class c);
/* The row of the table for phase x workload; nodes > 1 asks for RDMA
   in training. */
void kn_advise_family(enum kn_phase phase, enum kn_workload workload,
		      int nodes, struct kn_family_advice *out);
/* The class a catalog row belongs to (by its family and GPUs). */
enum kn_family_class kn_vm_size_class(const struct kn_vm_size *s);

/* The arithmetic's constants, stated in the output and docs/cost.md. */
#define KN_TRAIN_BYTES_PER_PARAM 16.0 /* weights + gradients + Adam state */
#define KN_TRAIN_ACTIVATION_SHARE 0.20 /* activations, on top of that */
#define KN_INFER_HEADROOM_SHARE 0.10   /* runtime and allocator slack */
#define KN_DECODE_EFFICIENCY 0.5       /* of peak memory bandwidth */
#define KN_SHAPE_HIDDEN_PER_LAYER 128  /* hidden = 128 x layers estimate */
#define KN_DEFAULT_CONTEXT 4096
#define KN_DEFAULT_BATCH 1
#define KN_ADVISE_OPTIONS_MAX 32

struct kn_advise_request {
	enum kn_phase phase;
	enum kn_workload workload;
	double params;         /* parameter count, > 0 */
	const char *dtype;     /* "bf16" ... */
	int layers, hidden;    /* 0 and 0: estimated from params */
	int nodes;             /* 0: one (or as the throughput needs) */
	double throughput;     /* decode tokens/s wanted (infer); 0: none */
	int context, batch;    /* KV cache; 0: the defaults */
	bool interruptible;    /* may run on spot */
	bool checkpoints;      /* the job checkpoints */
	double budget_usd_month; /* 0: none */
	int max_options;       /* 0: 5 */
};

/* The memory arithmetic, every term in GB (1e9 bytes). */
struct kn_memory_need {
	double bytes_per_param;  /* of the dtype */
	double weights_gb;
	double gradients_gb;     /* training: same dtype as the weights */
	double optimizer_gb;     /* training: fp32 master + Adam m and v */
	double train_bytes_per_param; /* KN_TRAIN_BYTES_PER_PARAM or 0 */
	double activations_gb;   /* training headroom */
	int layers, hidden;
	bool shape_estimated;    /* layers and hidden were estimated */
	int context, batch;
	double kv_bytes;         /* bytes per KV element */
	double kv_cache_gb;      /* inference */
	double headroom_gb;      /* inference headroom */
	double total_gb;         /* what one copy of the job needs */
};

enum kn_advice_warning {
	KN_WARN_PREMIUM_GPU,        /* A100/H100/H200 where a cheaper GPU fits */
	KN_WARN_SPOT_NO_CHECKPOINT, /* interruptible training, no checkpoints */
	KN_WARN_OVER_BUDGET,
	KN_WARN_NO_INFINIBAND,      /* multi-node training without RDMA */
	KN_WARN_NO_FIT,
	KN_WARN_NO_BANDWIDTH,       /* a size left out: no bandwidth figure */
};
/* "premium_gpu", "spot_without_checkpoints", "over_budget",
   "no_infiniband", "no_fit", "no_bandwidth". */
const char *kn_advice_warning_name(enum kn_advice_warning w);

struct kn_advice_note {
	enum kn_advice_warning code;
	char size[64];        /* the size it is about, or "" */
	char message[384];
};

struct kn_advice_option {
	const struct kn_vm_size *vm; /* into the catalog */
	int nodes;                   /* VMs to rent */
	int gpus_used;               /* per VM; 0 on CPU */
	double need_per_vm_gb;
	double capacity_gb;          /* GPU memory, or RAM in GB on CPU */
	double tokens_per_s;         /* per VM (infer), 0 when not sized */
	double usd_hr[KN_PRICINGS];  /* all nodes; < 0 unknown */
	bool over_budget;
};

struct kn_advice {
	struct kn_family_advice family;
	struct kn_memory_need memory;
	struct kn_advice_option options[KN_ADVISE_OPTIONS_MAX];
	int n_options;
	const struct kn_vm_size *largest; /* the roomiest eligible size */
	struct kn_advice_note notes[KN_ADVISE_OPTIONS_MAX + 8];
	int n_notes;
};

/*
 * The memory arithmetic alone (kn_advise does it too): -EINVAL naming
 * the field for a bad request (training in int8/int4, a non-positive
 * count).
 */
int kn_memory_need(const struct kn_advise_request *req,
		   struct kn_memory_need *out, struct kn_error *err);

/*
 * Advice for req from the catalog: the family, the memory, the cheapest
 * fitting sizes of the family's classes (not retired), cheapest first by
 * on-demand price (spot when interruptible; unpriced sizes last), and
 * warnings. No fitting size is not an error: n_options is 0 and a
 * no_fit note says what the largest size offers. out points into the
 * catalog, which must outlive it.
 */
int kn_advise(const struct kn_catalog *c, const struct kn_advise_request *req,
	      struct kn_advice *out, struct kn_error *err);


/* ---- the ledger: what the cluster's GPU time cost, and who used it ---- */

/*
 * Pure arithmetic over a recorded timeline (no I/O, no clock): node
 * intervals by state, task allocations, each node's size and pricing
 * model. A GPU's time is busy (allocated to a task, by its share: whole
 * GPUs 1000 milli, a share its milli, a MIG slice its fraction of the
 * GPU), idle (not allocated while the node is up: ready, cordoned or
 * draining) or unhealthy (not allocated while the node is unhealthy). Busy
 * time of a preempted or failed attempt after its last checkpoint (all of
 * it without one) is also lost. Each is priced at the node's per-GPU price
 * (kn_vm_size_gpu_price); a node whose size or price the catalog lacks is
 * costed at 0 and its rows are flagged unpriced. Times are Unix
 * milliseconds; GPU time is kept in milli-GPU-milliseconds (exact).
 */

enum kn_ledger_by {
	KN_LEDGER_BY_JOB,
	KN_LEDGER_BY_USER,
	KN_LEDGER_BY_DEPLOYMENT,
	KN_LEDGER_BY_NODE,
	KN_LEDGER_BY_DAY, /* UTC days, "2026-12-03" */
};
/* "job", "user", "deployment", "node", "day". */
const char *kn_ledger_by_name(enum kn_ledger_by by);
/* -EINVAL (err field "by") naming the choices for any other text. */
int kn_ledger_by_parse(const char *s, enum kn_ledger_by *out,
		       struct kn_error *err);

/* A node's state over an interval, as the ledger counts it. */
enum kn_ledger_state {
	KN_LEDGER_UP,        /* ready, cordoned, draining */
	KN_LEDGER_UNHEALTHY,
};

struct kn_ledger_alloc {
	const char *node;       /* a node added before */
	int64_t job_id;
	int attempt;
	const char *user;       /* the job's owner */
	const char *deployment; /* the deployment it is a replica of, or NULL */
	int n_devices;
	int milli_per_device;   /* 1..1000; a MIG slice: its fraction x 1000 */
	int64_t start_ms, end_ms; /* end 0: still running (the report's end) */
	bool lost;              /* the attempt was preempted or failed */
	int64_t checkpoint_ms;  /* its last checkpoint, 0 = none */
	double gpu_util;        /* mean GPU utilisation 0..1, < 0 unknown */
	/* CPU and memory the task asked for (0: not requested) and its mean
	   use from samples (< 0: never sampled). A task without GPUs
	   (n_devices 0, milli_per_device 0) adds no GPU time, only these. */
	int cpu_milli;          /* requested, thousandths of a core */
	double cpu_milli_used;
	int64_t memory_bytes;   /* requested */
	double memory_bytes_used;
};

struct kn_ledger;

/* The catalog prices the nodes; it must outlive the ledger. */
struct kn_ledger *kn_ledger_new(const struct kn_catalog *catalog);
void kn_ledger_free(struct kn_ledger *l);

/*
 * A node with gpus GPUs, of size sku ("" or NULL: unknown) under pricing.
 * -EINVAL (field "node") for a name already added, "gpus" when < 0.
 */
int kn_ledger_add_node(struct kn_ledger *l, const char *name,
		       const char *sku, enum kn_pricing pricing, int gpus,
		       struct kn_error *err);
/*
 * The node was in state from start_ms to end_ms (0: still). A node's
 * intervals must not overlap. -EINVAL naming "node" (unknown) or "end"
 * (before the start).
 */
int kn_ledger_add_state(struct kn_ledger *l, const char *node,
			enum kn_ledger_state state, int64_t start_ms,
			int64_t end_ms, struct kn_error *err);
/* -EINVAL naming "node", "milli_per_device", "n_devices" or "end"
   (n_devices 0 with milli_per_device 0: a task without GPUs). */
int kn_ledger_add_alloc(struct kn_ledger *l, const struct kn_ledger_alloc *a,
			struct kn_error *err);

struct kn_ledger_row {
	char key[96];  /* the job id, user, deployment ("" for none), node or day */
	int64_t busy_mms;      /* milli-GPU-milliseconds allocated */
	int64_t idle_mms;
	int64_t unhealthy_mms;
	int64_t lost_mms;      /* part of busy */
	int64_t sampled_mms;   /* busy time with a utilisation figure */
	double used_mms;       /* sampled time x utilisation */
	/* Over the sampled time of tasks that asked for them: CPU in
	   milli-core-milliseconds, memory in byte-milliseconds. */
	double cpu_requested, cpu_used;
	double memory_requested, memory_used;
	double busy_usd, idle_usd, unhealthy_usd, lost_usd;
	bool unpriced;         /* some of it ran on a node without a price */
};
/* GPU-seconds of a milli-GPU-millisecond count. */
double kn_ledger_gpu_seconds(int64_t mms);
/* Useful over allocated (1 when nothing was allocated). */
double kn_ledger_goodput(const struct kn_ledger_row *r);
/*
 * Efficiency of one resource, used over requested where sampled: GPU as
 * GPU-seconds used (utilisation x share) over GPU-seconds allocated, CPU
 * as core-seconds used over requested, memory as resident byte-seconds
 * over requested. false when the row has no sampled request of it.
 */
enum kn_efficiency_of { KN_EFF_GPU, KN_EFF_CPU, KN_EFF_MEMORY, KN_EFFS };
/* "gpu", "cpu", "memory". */
const char *kn_efficiency_name(enum kn_efficiency_of e);
bool kn_ledger_resource_efficiency(const struct kn_ledger_row *r,
				   enum kn_efficiency_of e, double *out);
/* The row's efficiency: the mean of the resources' figures it has
   (kn_ledger_resource_efficiency); false when it has none. */
bool kn_ledger_efficiency(const struct kn_ledger_row *r, double *out);
/* busy + idle + unhealthy dollars. */
double kn_ledger_total_usd(const struct kn_ledger_row *r);

struct kn_ledger_report {
	enum kn_ledger_by by;
	int64_t since_ms, until_ms;
	/* By job, user or deployment only busy and lost time has an owner:
	   idle and unhealthy time is in the total alone. */
	struct kn_ledger_row *rows; /* by key (days and job ids in order) */
	size_t n_rows;
	struct kn_ledger_row total; /* key "total" */
	/* Nodes without a price, in the order added (points into the
	   ledger). */
	const char **unpriced_nodes;
	size_t n_unpriced_nodes;
};

/*
 * The timeline clipped to [since_ms, until_ms) grouped by `by`; open
 * intervals and allocations end at until_ms. -EINVAL (field "since") when
 * until_ms <= since_ms. *out is freed with kn_ledger_report_free and
 * must not outlive the ledger.
 */
int kn_ledger_report(const struct kn_ledger *l, enum kn_ledger_by by,
		     int64_t since_ms, int64_t until_ms,
		     struct kn_ledger_report **out, struct kn_error *err);
void kn_ledger_report_free(struct kn_ledger_report *r);


/* ---- reservation advice from history ---- */

/*
 * Whether reserving a size pays off at a measured utilisation (busy GPU
 * time over the GPU time its nodes were up, 0..1). A reservation is paid
 * for every hour; on demand, only the hours used: a term pays off when
 * utilisation is at least its break-even, price_reserved / price_on_demand.
 */
struct kn_reservation_advice {
	double utilisation;
	double on_demand_usd_hr;      /* < 0: unknown */
	double reserved_usd_hr[2];    /* 1 year, 3 years; < 0 unknown */
	double break_even[2];         /* < 0 when a price is unknown */
	bool pays_off[2];
};
/* out for size s at utilisation u; u is clamped to 0..1. */
void kn_reservation_advise(const struct kn_vm_size *s, double u,
			   struct kn_reservation_advice *out);


/* ---- usage sketches and right-size advice ---- */

/*
 * What a task used, as a fixed-size histogram per resource (the sketch
 * the Kubernetes vertical pod autoscaler keeps): bucket 0 holds values
 * below the resource's first edge, bucket i >= 1 [first x 1.05^(i-1),
 * first x 1.05^i), the last everything above. A sketch's size is fixed
 * however long the task runs, sketches of many tasks merge by adding
 * counts, and a percentile read from one is at most 5% above the true
 * value (the bucket's upper edge, never above the exact maximum).
 */
enum kn_usage_resource {
	KN_USAGE_CPU,        /* thousandths of a core */
	KN_USAGE_MEMORY,     /* resident bytes */
	KN_USAGE_GPU_MEMORY, /* bytes of GPU memory */
	KN_USAGE_GPU_UTIL,   /* thousandths of the GPU's time busy */
	KN_USAGE_RESOURCES
};
#define KN_USAGE_BUCKETS 400
#define KN_USAGE_GROWTH 1.05

/* "cpu", "memory", "gpu_memory", "gpu_util". */
const char *kn_usage_resource_name(enum kn_usage_resource r);
/* The reverse; -EINVAL (err field "resource") for other text. */
int kn_usage_resource_parse(const char *s, enum kn_usage_resource *out,
			    struct kn_error *err);

struct kn_usage_hist {
	enum kn_usage_resource resource;
	int64_t samples;
	double sum, max;
	uint32_t counts[KN_USAGE_BUCKETS];
};
void kn_usage_hist_init(struct kn_usage_hist *h, enum kn_usage_resource r);
/* One sample (negative values count as 0). */
void kn_usage_hist_add(struct kn_usage_hist *h, double value);
/* Add from's samples to h (the same resource). */
void kn_usage_hist_merge(struct kn_usage_hist *h,
			 const struct kn_usage_hist *from);
/* The q-quantile (0 < q <= 1): the upper edge of the bucket holding it,
   at most the maximum; 0 when empty. */
double kn_usage_hist_percentile(const struct kn_usage_hist *h, double q);
/* The mean; 0 when empty. */
double kn_usage_hist_mean(const struct kn_usage_hist *h);
/* The counts as text, "INDEX:COUNT" of non-empty buckets joined by ","
   (at most KN_USAGE_BUCKETS of them); freed by the caller. */
char *kn_usage_hist_encode(const struct kn_usage_hist *h);
/* The reverse, into h's counts (h initialised; its samples, sum and max
   are the caller's). -EINVAL (field "histogram") on bad text, h then
   unchanged. */
int kn_usage_hist_decode(struct kn_usage_hist *h, const char *text,
			 struct kn_error *err);

/*
 * The right-size rule: target = p95 x 1.15 (15% headroom above the 95th
 * percentile), rounded up to a step (CPU 0.1 core, memory 64 MiB, GPU
 * memory 1 GiB). A request is over-provisioned when there are at least
 * KN_RIGHTSIZE_MIN_SAMPLES samples and the target is below 70% of it
 * (the suggestion frees at least 30%); the suggested request is the
 * target.
 */
#define KN_RIGHTSIZE_PERCENTILE 0.95
#define KN_RIGHTSIZE_HEADROOM 1.15
#define KN_RIGHTSIZE_MARGIN 0.70
#define KN_RIGHTSIZE_MIN_SAMPLES 10

struct kn_rightsize {
	int64_t samples;
	double p50, p95, max;  /* in the resource's unit */
	double requested;      /* 0: not requested */
	double target;         /* p95 x headroom, rounded up to the step */
	bool over;             /* suggest target instead of requested */
};
void kn_rightsize(const struct kn_usage_hist *h, double requested,
		  struct kn_rightsize *out);

#endif
