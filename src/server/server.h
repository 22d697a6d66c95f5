/*
 * server: `kiln server`, the control plane. It wires the store, the
 * scheduler and the local executor to the HTTP API, and keeps accepted jobs
 * and running tasks safe across its own crashes: every acknowledged write
 * is in SQLite before the answer, and tasks run under shims that outlive
 * the server and are re-adopted when it starts again.
 */
#ifndef KILN_SERVER_H
#define KILN_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "spec/spec.h"

/*
 * Every option of `kiln server`: its flags and its config file's keys both
 * come from kn_server_options(), so a field here that a user may set has
 * exactly one entry there.
 */
struct kn_server_config {
	const char *home;         /* $KILN_HOME: created 0700 if missing */
	const char *listen_host;  /* default 127.0.0.1 */
	int listen_port;          /* default 7070; 0 = any free port */
	/* HTTPS on the API (docs/tls.md): the certificate chain and key,
	   the CAs client certificates must chain to, each client
	   certificate's "NAME=ROLE" (its common name, the role it gets). */
	const char *tls_cert;
	const char *tls_key;
	const char *tls_client_ca;
	const char **tls_client_roles;
	size_t n_tls_client_roles;
	bool tls_self_signed;     /* make (once) and use HOME/tls's CA and
				     certificate */
	bool insecure;            /* plain HTTP on a non-loopback address */
	const char *gpus;         /* simulated devices ("4xH100-80GB"), or
				     NULL to discover real ones with NVML */
	const char *node_name;    /* default: the short host name */
	const char *gpu_dev_dir;  /* simulated GPUs' device nodes
				     (DIR/nvidiaN), or NULL: none */
	/* Local tasks' limits through cgroups (docs/security.md). */
	const char *cgroup_root;   /* default KN_CGROUP_ROOT */
	const char *cgroup_parent; /* default "kiln": below our own cgroup */
	int64_t pids_max;          /* per task, default 4096 */
	bool no_limits;            /* run tasks unlimited where cgroups
				      cannot be written (--no-limits) */
	int64_t kill_grace_ms;    /* cancel: SIGTERM to SIGKILL, default 10s */
	/* Capacity (docs/scheduling.md): what a task whose spec names no
	   CPUs or memory counts against its node (and, memory, gets as its
	   limit); fair share's half-life; per-owner caps. */
	int64_t default_task_cpu_milli; /* default 100: 0.1 CPU */
	int64_t default_task_memory;    /* default 1Gi */
	int64_t fair_share_half_life_ms; /* default 1 day */
	int64_t max_queued_jobs;  /* per owner, default 1000 */
	int64_t max_tasks;        /* queued or running, per owner, default
				     10000 */
	int64_t max_deployments;  /* per owner, default 100 */
	int64_t max_gateway_keys; /* active, per creator, default 1000 */
	int64_t log_max_bytes;    /* per task log file before rotation */
	const char *blob_store;   /* checkpoint and output store URL; NULL =
				     file://$KILN_HOME/blobs */
	/* Directories file:// URLs a user names may point into, besides
	   the stores' (docs/security.md, "Stores and credentials"). */
	const char **file_roots;
	size_t n_file_roots;
	bool allow_unconfigured_stores; /* http(s) URLs in no store, with
					   no credential */
	bool debug;               /* log debug messages */
	bool azure_events;        /* watch Azure Scheduled Events at the
				     default URL unless one is given */
	const char *azure_events_url; /* poll Azure Scheduled Events, or NULL */
	const char *azure_vm_name;    /* this VM's name in events (default:
					 the node name) */

	/* Alerts (docs/alerts.md). */
	const char *alert_rules;  /* rules file (kn_server_config_check fills
				     in the shipped one), "" = no rules
				     (nothing is scraped) */
	const char *scrape_urls;  /* exporters to scrape, comma-separated
				     http:// URLs, or NULL */
	int64_t scrape_interval_ms; /* default 15s */
	bool scrape_local;        /* read this node's metrics in-process */
	const char *alert_webhook; /* POST each firing/resolved, or NULL */

	/* Node health checks (src/health) gating new work. */
	int64_t health_interval_ms; /* default 5m; 0 = never */
	const char *health_root;    /* "/" or a fixture tree */
	const char *health_sku;     /* VM size for the inventory checks */
	const char *health_sku_file;/* default the shipped catalogue */
	const char *health_kernel_log; /* NULL = ROOT/dev/kmsg */
	const char *mig_profiles;     /* MIG table; default the shipped one */

	/* Where tasks run (docs/scale-out.md). */
	const char *executor;         /* "local" (default), "slurm" or
					 "kubernetes" */
	const char *slurm_partitions; /* "default=P,spot=P,pool:NAME=P", or
					 NULL: Slurm's default partition */
	int slurm_shards_per_gpu;     /* gres.conf's shards per GPU: a share
					 of milli m asks m*N/1000 (default 100) */
	const char *policy;       /* packing policy (kn_pack_policies);
				     default "kiln" */
	/* --executor kubernetes (docs/kubernetes.md). */
	const char *kube_namespace;   /* default "default" */
	const char *kubeconfig;       /* NULL: $KUBECONFIG's first file, else
					 the pod's service account */
	const char *kube_context;     /* NULL: the current-context */
	const char *kube_image;       /* for specs without image, or NULL */
	const char *kube_scheduler;   /* every pod's schedulerName, or NULL */
	const char *kube_shim_image;  /* the pods' kiln, or NULL: the task's */
	int64_t kube_poll_ms;         /* list Jobs and pods this often
					 (default 1s) */
	const char *node_labels;  /* "zone=1,fault_domain=0", or NULL */
	/* Simulated nodes run on this machine instead of the local node
	   (docs/scheduling.md): each "NAME GPUS [KEY=VALUE ...]". */
	const char **sim_nodes;
	size_t n_sim_nodes;
	/* Node pools (docs/capacity.md): each --pool "NAME SKU GPUS
	   [KEY=VALUE ...]"; their nodes run on this machine too. */
	const char **pools;
	size_t n_pools;

	/* Scheduled backups (docs/backup.md). */
	int64_t backup_every_ms;  /* 0 = none */
	int backup_keep;          /* complete backups kept (default 7) */
	const char *backup_to;    /* store URL; NULL = blob_store */
	bool backup_with_audit_key; /* scheduled backups carry audit.key */
	/* The cost ledger (docs/cost.md). */
	const char *node_sku;     /* the local node's VM size, label sku=;
				     NULL: health_sku, else unknown */
	const char *node_pricing; /* its pricing model, label pricing= */
	const char *cost_catalog; /* extra catalog rows, or NULL */
	int64_t usage_interval_ms; /* per-task usage samples, default 10s;
				      0 = none */
	/* Model registry: the directory of trusted Ed25519 public keys
	   (*.pub); NULL = $KILN_HOME/keys/trusted. */
	const char *trusted_keys;
	/* Model-blob uploads (docs/security.md, "Upload caps"): per token,
	   uploads open at once and bytes staged; how long one may sit idle;
	   the share of the staging file system kept free. */
	int64_t upload_max_open;     /* default 8 */
	int64_t upload_max_staged;   /* bytes, default 16 GiB */
	int64_t upload_idle_ms;      /* default 5 minutes */
	int64_t staging_reserve_pct; /* default 5 */
	/* Task isolation (docs/security.md). */
	const char *task_user;     /* as root: tasks' Unix user, NULL =
				      kiln-task */
	const char *task_user_map; /* "TOKEN-NAME: UNIX-USER" lines, or NULL */
	bool unisolated;           /* run tasks without a sandbox */
	/* The API's front (docs/security.md): connections in all and per
	   client address, the time a request head and the gaps between body
	   bytes may take, and streams (event and log follows) per token. */
	int max_conns;             /* default 4096 */
	int max_conns_per_client;  /* default 256 */
	int64_t head_timeout_ms;   /* default 10s */
	int64_t body_idle_ms;      /* default 30s */
	int max_follows_per_token; /* default 32 */

	/* What the config file names beyond options: signing keys and
	   named blob stores. */
	struct kn_server_conf sections;
	/* The copies of strings the fields above point at when they came
	   from kn_option_set (the command line's point into argv). */
	struct kn_strpool strings;
};

/* Where Azure's metadata service serves Scheduled Events. */
#define KN_AZURE_EVENTS_URL                                                   \
	"http://169.254.169.254/metadata/scheduledevents?api-version=2020-07-01"

/* Defaults for every field. */
void kn_server_config_init(struct kn_server_config *cfg);
/* Frees what the config holds (strings, sections); NULL-safe fields. */
void kn_server_config_release(struct kn_server_config *cfg);

/* The options table: every flag and config file key, in help order. */
const struct kn_option *kn_server_options(size_t *n);

/*
 * Read the config file at path into cfg (options and sections). The file
 * must be a regular file owned by this user or root and writable by no
 * one else: it may hold secrets and says which keys sign. Returns
 * -ENOENT (err filled) when there is no such file, -EPERM for a file
 * others could have written, -EINVAL with "FILE:LINE:COLUMN: KEY: ..."
 * for what is wrong inside. With origins (one per row of
 * kn_server_options(), or NULL) each option's position in the file is
 * recorded, {0, 0} where the file does not set it.
 */
int kn_server_config_load(struct kn_server_config *cfg, const char *path,
			  struct kn_option_origin *origins,
			  struct kn_error *err);

/*
 * The checks that span options (--sim-node with --gpus, kube flags
 * without --executor kubernetes, ...), after flags and file are both in;
 * fills the values that follow from others (--azure-events' URL). 0 or
 * -EINVAL naming the options.
 */
int kn_server_config_check(struct kn_server_config *cfg, struct kn_error *err);

/*
 * Run until SIGTERM or SIGINT. Returns 0 after a clean stop, or a negative
 * errno with err filled when start-up failed (home not writable, port in
 * use, database refused, bad --gpus).
 */
int kn_server_run(const struct kn_server_config *cfg, struct kn_error *err);

/*
 * The API's OpenAPI 3.1 document (GET /v1/openapi.json), as indented JSON
 * text to free, built from the route tables without a server. NULL with
 * err naming a route that has no description.
 */
char *kn_server_openapi(struct kn_error *err);

/*
 * `kiln audit verify --home DIR`: the check GET /v1/audit/verify makes,
 * on a home's kiln.db, audit.key and audit.head, without a server (a
 * stopped one, or a restored home). *json_out (malloc'd) is the same
 * answer as the route's. -ENOENT when the home has no kiln.db or no
 * audit.key.
 */
int kn_server_audit_verify_home(const char *home, char **json_out,
				struct kn_error *err);

#endif
