/* kiln server: flags in, kn_server_run, exit code out. */
#include "cmd/cli.h"
#include "cmd/cli_client.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost/cost.h"
#include "server/server.h"

static int split_listen(const char *arg, char *host, size_t hlen, int *port)
{
	const char *colon = strrchr(arg, ':');
	char *end;
	long p;

	if (!colon || colon == arg || (size_t)(colon - arg) >= hlen)
		return -1;
	p = strtol(colon + 1, &end, 10);
	if (*end || end == colon + 1 || p < 0 || p > 65535)
		return -1;
	memcpy(host, arg, (size_t)(colon - arg));
	host[colon - arg] = '\0';
	/* [::1]:7070 */
	if (host[0] == '[' && host[strlen(host) - 1] == ']') {
		memmove(host, host + 1, strlen(host));
		host[strlen(host) - 1] = '\0';
	}
	*port = (int)p;
	return 0;
}

/* A whole number in lo..hi for flag, or -1 after saying what is wrong. */
static int parse_count(const char *flag, const char *arg, long long lo,
		       long long hi, int64_t *out)
{
	char *end;
	long long n = strtoll(arg, &end, 10);

	if (*end || end == arg || n < lo || n > hi) {
		fprintf(stderr, "kiln server: %s: \"%s\" is not a number in "
			"%lld..%lld\n", flag, arg, lo, hi);
		return -1;
	}
	*out = n;
	return 0;
}

int cmd_server(int argc, char **argv)
{
	static const struct option opts[] = {
		{"listen", required_argument, NULL, 'l'},
		{"gpus", required_argument, NULL, 'g'},
		{"home", required_argument, NULL, 'H'},
		{"node-name", required_argument, NULL, 'n'},
		{"kill-grace", required_argument, NULL, 'k'},
		{"log-max-size", required_argument, NULL, 'm'},
		{"debug", no_argument, NULL, 'd'},
		{"azure-events", no_argument, NULL, 'a'},
		{"azure-events-url", required_argument, NULL, 'u'},
		{"azure-vm-name", required_argument, NULL, 'v'},
		{"blob-store", required_argument, NULL, 'b'},
		{"alert-rules", required_argument, NULL, 'R'},
		{"scrape", required_argument, NULL, 'S'},
		{"scrape-interval", required_argument, NULL, 'I'},
		{"no-local-metrics", no_argument, NULL, 'L'},
		{"alert-webhook", required_argument, NULL, 'W'},
		{"health-interval", required_argument, NULL, 'h'},
		{"health-root", required_argument, NULL, 'r'},
		{"health-sku", required_argument, NULL, 's'},
		{"health-sku-file", required_argument, NULL, 'f'},
		{"health-kernel-log", required_argument, NULL, 'K'},
		{"mig-profiles", required_argument, NULL, 'M'},
		{"executor", required_argument, NULL, 'x'},
		{"slurm-partitions", required_argument, NULL, 'P'},
		{"slurm-shards-per-gpu", required_argument, NULL, 'X'},
		{"node-labels", required_argument, NULL, 'N'},
		{"sim-node", required_argument, NULL, 'O'},
		{"policy", required_argument, NULL, 'p'},
		{"backup-every", required_argument, NULL, 'B'},
		{"backup-keep", required_argument, NULL, 'Y'},
		{"backup-to", required_argument, NULL, 'T'},
		{"backup-with-audit-key", no_argument, NULL, 'Z'},
		{"kube-namespace", required_argument, NULL, 256},
		{"kubeconfig", required_argument, NULL, 257},
		{"kube-context", required_argument, NULL, 258},
		{"image", required_argument, NULL, 259},
		{"kube-scheduler-name", required_argument, NULL, 260},
		{"node-sku", required_argument, NULL, 261},
		{"node-pricing", required_argument, NULL, 262},
		{"catalog", required_argument, NULL, 263},
		{"trusted-keys", required_argument, NULL, 264},
		{"pool", required_argument, NULL, 265},
		{"kube-shim-image", required_argument, NULL, 268},
		{"usage-interval", required_argument, NULL, 272},
		{"task-user", required_argument, NULL, 273},
		{"task-user-map", required_argument, NULL, 274},
		{"unisolated", no_argument, NULL, 275},
		{"gpu-dev-dir", required_argument, NULL, 290},
		{"cgroup-parent", required_argument, NULL, 291},
		{"pids-max", required_argument, NULL, 292},
		{"no-limits", no_argument, NULL, 293},
		{"upload-max-open", required_argument, NULL, 300},
		{"upload-max-staged", required_argument, NULL, 301},
		{"upload-idle", required_argument, NULL, 302},
		{"staging-reserve", required_argument, NULL, 303},
		{NULL, 0, NULL, 0},
	};
	struct kn_server_config cfg;
	struct kn_error err;
	char host[256], *home = NULL;
	const char **sim_nodes = kn_xcalloc((size_t)argc, sizeof(*sim_nodes));
	size_t n_sim_nodes = 0;
	const char **pools = kn_xcalloc((size_t)argc, sizeof(*pools));
	size_t n_pools = 0;
	int c, rc = 2;

	kn_server_config_init(&cfg);
	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'l':
			if (split_listen(optarg, host, sizeof(host),
					 &cfg.listen_port) < 0) {
				fprintf(stderr, "kiln server: --listen: \"%s\" is "
					"not HOST:PORT (e.g. 127.0.0.1:7070)\n",
					optarg);
				goto out;
			}
			cfg.listen_host = host;
			break;
		case 'g':
			cfg.gpus = optarg;
			break;
		case 290:
			if (optarg[0] != '/') {
				fprintf(stderr, "kiln server: --gpu-dev-dir: \"%s\" "
					"is not an absolute path\n", optarg);
				goto out;
			}
			cfg.gpu_dev_dir = optarg;
			break;
		case 291:
			if (!optarg[0] || strstr(optarg, "..")) {
				fprintf(stderr, "kiln server: --cgroup-parent: "
					"\"%s\" is not a cgroup path (e.g. kiln "
					"or /kiln.slice)\n", optarg);
				goto out;
			}
			cfg.cgroup_parent = optarg;
			break;
		case 292:
			/* The kernel's own ceiling is 4194304 (pid_max). */
			if (parse_count("--pids-max", optarg, 16, 4194304,
					&cfg.pids_max) < 0)
				goto out;
			break;
		case 293:
			cfg.no_limits = true;
			break;
		case 300:
			if (parse_count("--upload-max-open", optarg, 1, 100000,
					&cfg.upload_max_open) < 0)
				goto out;
			break;
		case 301:
			if (kn_parse_size(optarg, &cfg.upload_max_staged) < 0 ||
			    cfg.upload_max_staged < (1 << 20)) {
				fprintf(stderr, "kiln server: --upload-max-staged: "
					"\"%s\" is not a size of at least 1Mi "
					"(e.g. 16Gi)\n", optarg);
				goto out;
			}
			break;
		case 302:
			if (kn_parse_duration(optarg, &cfg.upload_idle_ms) < 0 ||
			    cfg.upload_idle_ms < 1000) {
				fprintf(stderr, "kiln server: --upload-idle: \"%s\" "
					"is not a duration of at least 1s "
					"(e.g. 5m)\n", optarg);
				goto out;
			}
			break;
		case 303:
			if (parse_count("--staging-reserve", optarg, 0, 90,
					&cfg.staging_reserve_pct) < 0)
				goto out;
			break;
		case 'H':
			cfg.home = optarg;
			break;
		case 'n':
			cfg.node_name = optarg;
			break;
		case 'k':
			if (kn_parse_duration(optarg, &cfg.kill_grace_ms) < 0) {
				fprintf(stderr, "kiln server: --kill-grace: \"%s\" "
					"is not a duration (e.g. 10s)\n", optarg);
				goto out;
			}
			break;
		case 'm':
			if (kn_parse_size(optarg, &cfg.log_max_bytes) < 0 ||
			    cfg.log_max_bytes < 4096) {
				fprintf(stderr, "kiln server: --log-max-size: \"%s\" "
					"is not a size of at least 4096 bytes "
					"(e.g. 64Mi)\n", optarg);
				goto out;
			}
			break;
		case 'd':
			kn_log_level = KN_LOG_DEBUG;
			break;
		case 'a':
			if (!cfg.azure_events_url)
				cfg.azure_events_url = KN_AZURE_EVENTS_URL;
			break;
		case 'u':
			cfg.azure_events_url = optarg;
			break;
		case 'v':
			cfg.azure_vm_name = optarg;
			break;
		case 'b':
			cfg.blob_store = optarg;
			break;
		case 264:
			cfg.trusted_keys = optarg;
			break;
		case 'R':
			cfg.alert_rules = optarg;
			break;
		case 'S':
			cfg.scrape_urls = optarg;
			break;
		case 'I':
			if (kn_parse_duration(optarg, &cfg.scrape_interval_ms) < 0 ||
			    cfg.scrape_interval_ms < 100) {
				fprintf(stderr, "kiln server: --scrape-interval: "
					"\"%s\" is not a duration of at least "
					"100ms (e.g. 15s)\n", optarg);
				goto out;
			}
			break;
		case 'L':
			cfg.scrape_local = false;
			break;
		case 'W':
			cfg.alert_webhook = optarg;
			break;
		case 'h':
			if (strcmp(optarg, "0") != 0 &&
			    (kn_parse_duration(optarg, &cfg.health_interval_ms) < 0 ||
			     cfg.health_interval_ms < 1000)) {
				fprintf(stderr, "kiln server: --health-interval: "
					"\"%s\" is not 0 or a duration of at "
					"least 1s (e.g. 5m)\n", optarg);
				goto out;
			}
			if (!strcmp(optarg, "0"))
				cfg.health_interval_ms = 0;
			break;
		case 'r':
			cfg.health_root = optarg;
			break;
		case 's':
			cfg.health_sku = optarg;
			break;
		case 'f':
			cfg.health_sku_file = optarg;
			break;
		case 'K':
			cfg.health_kernel_log = optarg;
			break;
		case 'M':
			cfg.mig_profiles = optarg;
			break;
		case 'x':
			if (strcmp(optarg, "local") != 0 &&
			    strcmp(optarg, "slurm") != 0 &&
			    strcmp(optarg, "kubernetes") != 0) {
				fprintf(stderr, "kiln server: --executor: \"%s\" "
					"is not local, slurm or kubernetes\n",
					optarg);
				goto out;
			}
			cfg.executor = optarg;
			break;
		case 'P':
			cfg.slurm_partitions = optarg;
			break;
		case 'X': {
			int64_t n;
			if (parse_count("--slurm-shards-per-gpu", optarg, 1, 1000,
					&n) < 0)
				goto out;
			cfg.slurm_shards_per_gpu = (int)n;
			break;
		}
		case 'N':
			cfg.node_labels = optarg;
			break;
		case 'O':
			sim_nodes[n_sim_nodes++] = optarg;
			break;
		case 'p':
			cfg.policy = optarg;
			break;
		case 'B':
			if (kn_parse_duration(optarg, &cfg.backup_every_ms) < 0 ||
			    cfg.backup_every_ms < 100) {
				fprintf(stderr, "kiln server: --backup-every: "
					"\"%s\" is not a duration of at least "
					"100ms (e.g. 6h)\n", optarg);
				goto out;
			}
			break;
		case 'Y': {
			int64_t n;
			if (parse_count("--backup-keep", optarg, 1, 10000, &n) < 0)
				goto out;
			cfg.backup_keep = (int)n;
			break;
		}
		case 'T':
			cfg.backup_to = optarg;
			break;
		case 'Z':
			cfg.backup_with_audit_key = true;
			break;
		case 256:
			cfg.kube_namespace = optarg;
			break;
		case 257:
			cfg.kubeconfig = optarg;
			break;
		case 258:
			cfg.kube_context = optarg;
			break;
		case 259:
			cfg.kube_image = optarg;
			break;
		case 260:
			cfg.kube_scheduler = optarg;
			break;
		case 268:
			cfg.kube_shim_image = optarg;
			break;
		case 261:
			cfg.node_sku = optarg;
			break;
		case 262: {
			enum kn_pricing pricing;

			if (kn_pricing_parse(optarg, &pricing, &err) < 0) {
				fprintf(stderr, "kiln server: --node-pricing: "
					"\"%s\" is not on_demand, spot, "
					"reserved_1y or reserved_3y\n", optarg);
				goto out;
			}
			cfg.node_pricing = optarg;
			break;
		}
		case 263:
			cfg.cost_catalog = optarg;
			break;
		case 265:
			pools[n_pools++] = optarg;
			break;
		case 272:
			if (!strcmp(optarg, "0")) {
				cfg.usage_interval_ms = 0;
			} else if (kn_parse_duration(optarg,
						     &cfg.usage_interval_ms) < 0 ||
				   cfg.usage_interval_ms < 100) {
				fprintf(stderr, "kiln server: --usage-interval: "
					"\"%s\" is not 0 or a duration of at "
					"least 100ms (e.g. 10s)\n", optarg);
				goto out;
			}
			break;
		case 273:
			cfg.task_user = optarg;
			break;
		case 274:
			cfg.task_user_map = optarg;
			break;
		case 275:
			cfg.unisolated = true;
			break;
		default:
			fputs("see 'kiln server --help'\n", stderr);
			goto out;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "kiln server: unexpected argument \"%s\"\n",
			argv[optind]);
		goto out;
	}
	/* Simulated nodes bring their own devices, names and labels. */
	if (n_sim_nodes && (cfg.gpus || cfg.node_labels || cfg.node_name ||
			    cfg.node_sku || cfg.node_pricing)) {
		fprintf(stderr, "kiln server: --sim-node cannot be combined "
			"with --gpus, --node-labels, --node-name, --node-sku or "
			"--node-pricing: give each node's GPUs and labels "
			"(sku=, pricing=) in its --sim-node\n");
		goto out;
	}
	/* Under Slurm the one node stands for the partitions' GPUs. */
	if (n_sim_nodes && strcmp(cfg.executor, "local") != 0) {
		fprintf(stderr, "kiln server: --sim-node runs its nodes on this "
			"machine: it needs --executor local\n");
		goto out;
	}
	/* Pool nodes, like simulated ones, bring their own devices and
	   labels and run here. */
	if (n_pools && (cfg.gpus || cfg.node_labels || cfg.node_name ||
			cfg.node_sku || cfg.node_pricing ||
			strcmp(cfg.executor, "local") != 0)) {
		fprintf(stderr, "kiln server: --pool cannot be combined with "
			"--gpus, --node-labels, --node-name, --node-sku, "
			"--node-pricing or another executor than local: its "
			"nodes bring their GPUs and labels\n");
		goto out;
	}
	if ((cfg.kube_namespace || cfg.kubeconfig || cfg.kube_context ||
	     cfg.kube_image || cfg.kube_scheduler || cfg.kube_shim_image) &&
	    strcmp(cfg.executor, "kubernetes") != 0) {
		fprintf(stderr, "kiln server: --kube-namespace, --kubeconfig, "
			"--kube-context, --image, --kube-scheduler-name and "
			"--kube-shim-image need --executor kubernetes\n");
		goto out;
	}
	if (cfg.kube_namespace && !*cfg.kube_namespace) {
		fprintf(stderr, "kiln server: --kube-namespace: empty\n");
		goto out;
	}
	cfg.sim_nodes = sim_nodes;
	cfg.n_sim_nodes = n_sim_nodes;
	cfg.pools = pools;
	cfg.n_pools = n_pools;
	if (!cfg.health_sku)
		cfg.health_sku = getenv("KILN_SKU");
	if (!cfg.home) {
		home = cli_kiln_home();
		cfg.home = home;
	}
	rc = kn_server_run(&cfg, &err);
	free(home);
	if (rc < 0)
		fprintf(stderr, "kiln server: %s\n", err.message);
	rc = rc < 0 ? 1 : 0;
out:
	free(sim_nodes);
	free(pools);
	return rc;
}
