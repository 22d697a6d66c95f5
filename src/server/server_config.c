/*
 * server/server_config.c: the server's options as one table, its config file
 * and the checks that span options.
 *
 * `kiln server`'s getopt options, the values each accepts and the keys of
 * its config file all come from the table below: adding a field to
 * struct kn_server_config that users set means adding one row here (and
 * its line in the help and docs/cli.md, which a unit test holds to the
 * table). The file is refused when another user could have written it:
 * it names the keys the server signs with.
 */
#include "server/server.h"
#include "server/executors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cost/cost.h"
#include "loop/loop.h"
#include "server/internal.h"

/* A config file is a page or two of text. */
#define CONFIG_MAX_BYTES (256 * 1024)

#define F(field) offsetof(struct kn_server_config, field)

/* HOST:PORT, or [V6]:PORT; port 0 picks a free one. */
static int set_listen(const struct kn_option *o, void *target,
		      const char *text, struct kn_strpool *pool,
		      struct kn_error *err)
{
	struct kn_server_config *cfg = target;
	const char *colon = strrchr(text, ':');
	char host[256], *end;
	long port;

	if (!colon || colon == text || (size_t)(colon - text) >= sizeof(host))
		goto bad;
	port = strtol(colon + 1, &end, 10);
	if (*end || end == colon + 1 || port < 0 || port > 65535)
		goto bad;
	memcpy(host, text, (size_t)(colon - text));
	host[colon - text] = '\0';
	if (host[0] == '[' && host[strlen(host) - 1] == ']') {
		memmove(host, host + 1, strlen(host));
		host[strlen(host) - 1] = '\0';
	}
	if (!host[0])
		goto bad;
	cfg->listen_host = kn_strpool_keep(pool, host);
	cfg->listen_port = (int)port;
	return 0;
bad:
	return kn_errorf(err, KN_EINVAL, o->name, "\"%s\" is not HOST:PORT "
			 "(e.g. 127.0.0.1:7070)", text);
}

static int set_pricing(const struct kn_option *o, void *target,
		       const char *text, struct kn_strpool *pool,
		       struct kn_error *err)
{
	struct kn_server_config *cfg = target;
	enum kn_pricing pricing;

	if (kn_pricing_parse(text, &pricing, err) < 0)
		return kn_errorf(err, KN_EINVAL, o->name, "\"%s\" is not "
				 "on_demand, spot, reserved_1y or reserved_3y",
				 text);
	cfg->node_pricing = kn_strpool_keep(pool, text);
	return 0;
}

static int set_cgroup_parent(const struct kn_option *o, void *target,
			     const char *text, struct kn_strpool *pool,
			     struct kn_error *err)
{
	struct kn_server_config *cfg = target;

	if (!text[0] || strstr(text, ".."))
		return kn_errorf(err, KN_EINVAL, o->name, "\"%s\" is not a "
				 "cgroup path (e.g. kiln or /kiln.slice)",
				 text);
	cfg->cgroup_parent = kn_strpool_keep(pool, text);
	return 0;
}

/* A number of CPUs, kept in thousandths: a whole machine's worth at most. */
static int set_default_cpus(const struct kn_option *o, void *target,
			    const char *text, struct kn_strpool *pool,
			    struct kn_error *err)
{
	struct kn_server_config *cfg = target;
	char *end;
	double cpus = strtod(text, &end);

	(void)pool;
	if (*end || end == text || !(cpus >= 0 && cpus <= 1024))
		return kn_errorf(err, KN_EINVAL, o->name, "\"%s\" is not a "
				 "number of CPUs in 0..1024 (e.g. 0.5)", text);
	cfg->default_task_cpu_milli = (int64_t)(cpus * 1000 + 0.5);
	return 0;
}

static void show_listen(const struct kn_option *o, const void *target,
			struct kn_buf *out)
{
	const struct kn_server_config *cfg = target;

	(void)o;
	kn_buf_printf(out, strchr(cfg->listen_host, ':') ? "\"[%s]:%d\"" :
							    "\"%s:%d\"",
		      cfg->listen_host, cfg->listen_port);
}

static void show_default_cpus(const struct kn_option *o, const void *target,
			      struct kn_buf *out)
{
	const struct kn_server_config *cfg = target;

	(void)o;
	kn_buf_printf(out, "%g", (double)cfg->default_task_cpu_milli / 1000);
}

static const char *const executors[] = {"local", "slurm", "kubernetes",
					NULL};

/* Rows in the order of `kiln server --help`. */
static const struct kn_option server_options[] = {
	{"listen", KN_OPT_STRING, "HOST:PORT", .set = set_listen,
	 .show = show_listen, .help = "address of the API"},
	{"tls-cert", KN_OPT_PATH, "FILE", F(tls_cert),
	 .help = "the API's certificate chain (PEM): serve HTTPS"},
	{"tls-key", KN_OPT_PATH, "FILE", F(tls_key),
	 .help = "the certificate's private key (PEM)"},
	{"tls-client-ca", KN_OPT_PATH, "FILE", F(tls_client_ca),
	 .help = "CAs that client certificates must chain to"},
	{"tls-client-role", KN_OPT_LIST, "NAME=ROLE", F(tls_client_roles),
	 F(n_tls_client_roles),
	 .help = "the role of a client certificate's name (repeatable)"},
	{"tls-self-signed", KN_OPT_BOOL, NULL, F(tls_self_signed),
	 .help = "make a CA and a certificate in HOME/tls and serve HTTPS"},
	{"insecure", KN_OPT_BOOL, NULL, F(insecure),
	 .help = "allow plain HTTP on a non-loopback address"},
	{"gpus", KN_OPT_STRING, "SPEC", F(gpus),
	 .help = "simulate devices instead of using NVML"},
	{"gpu-dev-dir", KN_OPT_PATH, "DIR", F(gpu_dev_dir),
	 .flags = KN_OPT_ABSOLUTE, .help = "device nodes of simulated GPUs"},
	{"cgroup-parent", KN_OPT_STRING, "PATH", F(cgroup_parent),
	 .set = set_cgroup_parent, .help = "the cgroup local tasks run under"},
	/* The kernel's own ceiling on processes is 4194304 (pid_max). */
	{"pids-max", KN_OPT_COUNT, "N", F(pids_max), .min = 16,
	 .max = 4194304, .help = "processes per task"},
	{"no-limits", KN_OPT_BOOL, NULL, F(no_limits),
	 .help = "run tasks unlimited where cgroups cannot be written"},
	/* Capacity (docs/scheduling.md). */
	{"default-task-cpus", KN_OPT_STRING, "N", .set = set_default_cpus,
	 .show = show_default_cpus, .help = "CPUs a local task that names none counts"},
	{"default-task-memory", KN_OPT_SIZE, "SIZE", F(default_task_memory),
	 .example = "1Gi", .help = "memory such a task counts and gets"},
	{"fair-share-half-life", KN_OPT_DURATION, "DURATION",
	 F(fair_share_half_life_ms), .min = 1000,
	 .flags = KN_OPT_ZERO_IS_NONE, .example = "1d",
	 .help = "half-life of each owner's usage"},
	{"max-queued-jobs-per-user", KN_OPT_COUNT, "N", F(max_queued_jobs),
	 .min = 1, .max = 1000000, .help = "queued jobs one owner may have"},
	{"max-tasks-per-user", KN_OPT_COUNT, "N", F(max_tasks), .min = 1,
	 .max = 10000000, .help = "tasks queued or running per owner"},
	{"max-deployments-per-user", KN_OPT_COUNT, "N", F(max_deployments),
	 .min = 1, .max = 1000000, .help = "deployments per owner"},
	{"max-keys-per-user", KN_OPT_COUNT, "N", F(max_gateway_keys),
	 .min = 1, .max = 1000000, .help = "active gateway keys per creator"},
	/* The API's front (docs/security.md). */
	{"max-connections", KN_OPT_COUNT, "N", F(max_conns), .min = 1,
	 .max = 1000000, .flags = KN_OPT_INT,
	 .help = "open API connections in all"},
	{"max-connections-per-client", KN_OPT_COUNT, "N",
	 F(max_conns_per_client), .min = 1, .max = 1000000,
	 .flags = KN_OPT_INT, .help = "open API connections from one address"},
	{"head-timeout", KN_OPT_DURATION, "DURATION", F(head_timeout_ms),
	 .min = 100, .max = 3600 * 1000, .example = "10s",
	 .help = "the time a whole request head may take"},
	{"body-timeout", KN_OPT_DURATION, "DURATION", F(body_idle_ms),
	 .min = 100, .max = 3600 * 1000, .example = "30s",
	 .help = "the most time between a body's bytes"},
	{"max-follows-per-token", KN_OPT_COUNT, "N", F(max_follows_per_token),
	 .min = 1, .max = 1000000, .flags = KN_OPT_INT,
	 .help = "event and log streams one token may hold open"},
	{"upload-max-open", KN_OPT_COUNT, "N", F(upload_max_open), .min = 1,
	 .max = 100000, .help = "model-blob uploads one token may have open"},
	{"upload-max-staged", KN_OPT_SIZE, "SIZE", F(upload_max_staged),
	 .min = 1 << 20, .example = "16Gi",
	 .help = "bytes one token's open uploads may stage"},
	{"upload-idle", KN_OPT_DURATION, "DURATION", F(upload_idle_ms),
	 .min = 1000, .example = "5m",
	 .help = "drop an upload with no part for this long"},
	{"staging-reserve", KN_OPT_COUNT, "PCT", F(staging_reserve_pct),
	 .min = 0, .max = 90,
	 .help = "percent of the upload file system kept free"},
	{"mig-profiles", KN_OPT_PATH, "FILE", F(mig_profiles),
	 .help = "MIG profile table"},
	{"home", KN_OPT_PATH, "DIR", F(home), .help = "state directory"},
	{"node-name", KN_OPT_STRING, "NAME", F(node_name),
	 .help = "name of this node"},
	{"node-labels", KN_OPT_STRING, "K=V,...", F(node_labels),
	 .help = "labels of this node"},
	{"sim-node", KN_OPT_LIST, "\"NAME GPUS [K=V ...]\"", F(sim_nodes),
	 F(n_sim_nodes), .help = "run a simulated node (repeatable)"},
	{"pool", KN_OPT_LIST, "\"NAME SKU GPUS [K=V ...]\"", F(pools),
	 F(n_pools), .help = "a node pool (repeatable)"},
	{"node-sku", KN_OPT_STRING, "SIZE", F(node_sku),
	 .help = "this node's VM size in the catalog"},
	{"node-pricing", KN_OPT_STRING, "MODEL", F(node_pricing),
	 .set = set_pricing, .help = "this node's pricing model"},
	{"catalog", KN_OPT_PATH, "FILE", F(cost_catalog),
	 .help = "extra VM size rows for the cost ledger"},
	{"usage-interval", KN_OPT_DURATION, "DURATION", F(usage_interval_ms),
	 .min = 100, .flags = KN_OPT_ZERO_IS_NONE, .example = "10s",
	 .help = "sample each local task's use this often"},
	{"task-user", KN_OPT_STRING, "USER", F(task_user),
	 .help = "as root, the Unix user tasks run as"},
	{"task-user-map", KN_OPT_PATH, "FILE", F(task_user_map),
	 .help = "as root, token names to Unix users"},
	{"unisolated", KN_OPT_BOOL, NULL, F(unisolated),
	 .help = "run tasks without the sandbox"},
	{"policy", KN_OPT_STRING, "NAME", F(policy),
	 .help = "how a GPU job's node is chosen"},
	{"kill-grace", KN_OPT_DURATION, "DURATION", F(kill_grace_ms),
	 .example = "10s", .help = "time between SIGTERM and SIGKILL"},
	{"log-max-size", KN_OPT_SIZE, "SIZE", F(log_max_bytes), .min = 4096,
	 .example = "64Mi", .help = "rotate a task's log at this size"},
	{"debug", KN_OPT_BOOL, NULL, F(debug), .help = "log debug messages"},
	{"azure-events", KN_OPT_BOOL, NULL, F(azure_events),
	 .help = "watch Azure Scheduled Events"},
	{"azure-events-url", KN_OPT_STRING, "URL", F(azure_events_url),
	 .help = "where to poll Scheduled Events"},
	{"azure-vm-name", KN_OPT_STRING, "NAME", F(azure_vm_name),
	 .help = "this VM's name in events"},
	{"blob-store", KN_OPT_STRING, "URL", F(blob_store),
	 .help = "where checkpoints and outputs go"},
	{"file-root", KN_OPT_LIST, "DIR", F(file_roots), F(n_file_roots),
	 .help = "file:// URLs may point below DIR (repeatable)"},
	{"allow-unconfigured-stores", KN_OPT_BOOL, NULL,
	 F(allow_unconfigured_stores),
	 .help = "let jobs name http(s) stores not configured (no "
		 "credentials)"},
	{"trusted-keys", KN_OPT_PATH, "DIR", F(trusted_keys),
	 .help = "the model registry's trusted public keys"},
	{"alert-rules", KN_OPT_PATH, "FILE", F(alert_rules),
	 .flags = KN_OPT_EMPTY_OK, .help = "alert rules (\"\": none)"},
	{"scrape", KN_OPT_STRING, "URL,...", F(scrape_urls),
	 .help = "Prometheus exporters to scrape"},
	{"scrape-interval", KN_OPT_DURATION, "DURATION", F(scrape_interval_ms),
	 .min = 100, .example = "15s", .help = "how often to scrape"},
	{"no-local-metrics", KN_OPT_BOOL, NULL, F(scrape_local),
	 .flags = KN_OPT_CLEARS,
	 .help = "do not read this node's metrics in-process"},
	{"alert-webhook", KN_OPT_STRING, "URL", F(alert_webhook),
	 .flags = KN_OPT_SECRET,
	 .help = "POST each firing and resolved alert"},
	{"health-interval", KN_OPT_DURATION, "DURATION", F(health_interval_ms),
	 .min = 1000, .flags = KN_OPT_ZERO_IS_NONE, .example = "5m",
	 .help = "run the node health checks this often"},
	{"health-root", KN_OPT_PATH, "DIR", F(health_root),
	 .help = "read /proc, /sys and /dev/kmsg under DIR"},
	{"health-sku", KN_OPT_STRING, "SIZE", F(health_sku),
	 .help = "the VM size to check the inventory against"},
	{"health-sku-file", KN_OPT_PATH, "FILE", F(health_sku_file),
	 .help = "the size catalogue"},
	{"health-kernel-log", KN_OPT_PATH, "FILE", F(health_kernel_log),
	 .help = "the kernel log to read for XIDs"},
	{"executor", KN_OPT_STRING, "local|slurm|kubernetes", F(executor),
	 .choices = executors, .help = "where tasks run"},
	{"slurm-partitions", KN_OPT_STRING, "MAP", F(slurm_partitions),
	 .help = "Slurm partition by job"},
	{"slurm-shards-per-gpu", KN_OPT_COUNT, "N", F(slurm_shards_per_gpu),
	 .min = 1, .max = 1000, .flags = KN_OPT_INT,
	 .help = "shards per GPU in the cluster's gres.conf"},
	{"kube-namespace", KN_OPT_STRING, "NS", F(kube_namespace),
	 .help = "where Jobs and Deployments go"},
	{"kubeconfig", KN_OPT_PATH, "FILE", F(kubeconfig),
	 .help = "Kubernetes credentials"},
	{"kube-context", KN_OPT_STRING, "NAME", F(kube_context),
	 .help = "the kubeconfig context"},
	{"image", KN_OPT_STRING, "IMAGE", F(kube_image),
	 .help = "the container image of specs without one"},
	{"kube-scheduler-name", KN_OPT_STRING, "NAME", F(kube_scheduler),
	 .help = "schedulerName of every pod"},
	{"kube-shim-image", KN_OPT_STRING, "IMAGE", F(kube_shim_image),
	 .help = "the image whose kiln the pods run tasks under"},
	/* Each pass is two list requests to the API server: a tenth of a
	   second at most keeps that load bounded. */
	{"kube-poll-interval", KN_OPT_DURATION, "DURATION", F(kube_poll_ms),
	 .min = 100, .max = 60 * 1000, .example = "1s",
	 .help = "how often the Jobs and pods of live attempts are listed"},
	{"backup-every", KN_OPT_DURATION, "DURATION", F(backup_every_ms),
	 .min = 100, .example = "6h", .help = "take a backup this often"},
	{"backup-keep", KN_OPT_COUNT, "N", F(backup_keep), .min = 1,
	 .max = 10000, .flags = KN_OPT_INT,
	 .help = "keep the newest N complete backups"},
	{"backup-to", KN_OPT_STRING, "URL", F(backup_to),
	 .help = "where backups go"},
	{"backup-with-audit-key", KN_OPT_BOOL, NULL, F(backup_with_audit_key),
	 .help = "scheduled backups include audit.key"},
};

const struct kn_option *kn_server_options(size_t *n)
{
	*n = KN_LEN(server_options);
	return server_options;
}

void kn_server_config_release(struct kn_server_config *cfg)
{
	kn_server_conf_release(&cfg->sections);
	kn_strpool_release(&cfg->strings);
}

int kn_server_config_load(struct kn_server_config *cfg, const char *path,
			  struct kn_option_origin *origins,
			  struct kn_error *err)
{
	struct kn_server_conf sections = {0};
	size_t len = 0;
	char *text = NULL;
	int rc = kn_config_file_read(path, CONFIG_MAX_BYTES,
				     "names the keys the server signs with",
				     &text, &len, err);

	if (rc)
		return rc;
	rc = kn_server_conf_parse(text, len, path, server_options,
				  KN_LEN(server_options), cfg,
				  &cfg->strings, &sections, origins, err);
	free(text);
	if (rc)
		return rc;
	kn_server_conf_release(&cfg->sections);
	cfg->sections = sections;
	return 0;
}

/* Nodes that bring their own devices and labels exclude the local one's. */
static int check_nodes(const struct kn_server_config *cfg,
		       struct kn_error *err)
{
	bool local_node = cfg->gpus || cfg->node_labels || cfg->node_name ||
			  cfg->node_sku || cfg->node_pricing;
	bool local_exec = executor_runs_here(cfg);

	if (cfg->n_sim_nodes && local_node)
		return kn_errorf(err, KN_EINVAL, "sim-node", "--sim-node "
				 "cannot be combined with --gpus, "
				 "--node-labels, --node-name, --node-sku or "
				 "--node-pricing: give each node's GPUs and "
				 "labels (sku=, pricing=) in its --sim-node");
	/* Elsewhere the one node stands for the engine's GPUs. */
	if (cfg->n_sim_nodes && !local_exec)
		return kn_errorf(err, KN_EINVAL, "sim-node", "--sim-node runs "
				 "its nodes on this machine: it needs "
				 "--executor local");
	if (cfg->n_pools && (local_node || !local_exec))
		return kn_errorf(err, KN_EINVAL, "pool", "--pool cannot be "
				 "combined with --gpus, --node-labels, "
				 "--node-name, --node-sku, --node-pricing or "
				 "another executor than local: its nodes bring "
				 "their GPUs and labels");
	return 0;
}

/* Each "NAME=ROLE" of --tls-client-role: a name, and a role tokens have. */
static int check_client_roles(const struct kn_server_config *cfg,
			      struct kn_error *err)
{
	for (size_t i = 0; i < cfg->n_tls_client_roles; i++) {
		const char *m = cfg->tls_client_roles[i],
			   *eq = strrchr(m, '=');
		enum kn_role role;
		if (!eq || eq == m || role_parse(eq + 1, &role) < 0)
			return kn_errorf(err, KN_EINVAL, "tls-client-role",
					 "tls-client-role: \"%s\" is not "
					 "NAME=ROLE with a role of viewer, "
					 "user, operator or admin", m);
	}
	return 0;
}

/*
 * TLS settings that go together, and the rule that keeps credentials off
 * the network in clear: plain HTTP only on loopback, unless insecure.
 */
static int check_tls(const struct kn_server_config *cfg, struct kn_error *err)
{
	bool tls = cfg->tls_cert || cfg->tls_key || cfg->tls_self_signed;

	if (cfg->tls_self_signed && (cfg->tls_cert || cfg->tls_key))
		return kn_errorf(err, KN_EINVAL, "tls-self-signed",
				 "tls-self-signed: makes its own certificate; "
				 "give it or tls-cert and tls-key, not both");
	if (!cfg->tls_self_signed && !cfg->tls_cert != !cfg->tls_key)
		return kn_errorf(err, KN_EINVAL,
				 cfg->tls_cert ? "tls-key" : "tls-cert",
				 "%s: missing: tls-cert and tls-key go "
				 "together", cfg->tls_cert ? "tls-key"
							   : "tls-cert");
	if ((cfg->tls_client_ca || cfg->n_tls_client_roles) && !tls)
		return kn_errorf(err, KN_EINVAL, "tls-client-ca",
				 "tls-client-ca and tls-client-role need TLS "
				 "(tls-cert and tls-key, or tls-self-signed)");
	if (cfg->n_tls_client_roles && !cfg->tls_client_ca)
		return kn_errorf(err, KN_EINVAL, "tls-client-role",
				 "tls-client-role: needs tls-client-ca, the "
				 "CAs client certificates are checked "
				 "against");
	if (cfg->listen_host &&
	    kn_tls_listen_check(cfg->listen_host, tls, cfg->insecure, err) < 0)
		return -EINVAL;
	return check_client_roles(cfg, err);
}

/* An option naming a data file defaults to the one shipped with kiln,
   found where kiln is installed (kn_data_path). */
static void shipped_default(struct kn_server_config *cfg, const char **field,
			    const char *name)
{
	char *path;

	if (*field)
		return;
	path = kn_data_path(name);
	*field = kn_strpool_keep(&cfg->strings, path);
	free(path);
}

int kn_server_config_check(struct kn_server_config *cfg, struct kn_error *err)
{
	int rc = check_nodes(cfg, err);

	if (rc)
		return rc;
	rc = executors_config_check(cfg, err);
	if (rc)
		return rc;
	rc = check_tls(cfg, err);
	if (rc)
		return rc;
	if (cfg->azure_events && !cfg->azure_events_url)
		cfg->azure_events_url = KN_AZURE_EVENTS_URL;
	shipped_default(cfg, &cfg->alert_rules, "alert-rules.yaml");
	shipped_default(cfg, &cfg->health_sku_file, "azure-gpu-skus.csv");
	shipped_default(cfg, &cfg->mig_profiles, "mig-profiles.csv");
	return 0;
}
