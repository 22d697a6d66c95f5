/*
 * kiln health: run the node checks and report them the way LBNL NHC does,
 * so it can be Slurm's HealthCheckProgram: silent with exit 0 when
 * healthy; otherwise one line per failed check on standard output,
 *
 *     ERROR:  kiln:  Health check failed:  gpu_ecc: GPU 0 (...): ...
 *
 * and exit 1. --drain also tells the kiln server (POST
 * /v1/nodes/{name}/health, healthy or not, so a recovered node comes
 * back) and, where Slurm's scontrol is on PATH, drains the node in Slurm
 * itself with the first failure as the reason, as NHC does, so a node is
 * drained even when the kiln server cannot be reached; a passing run
 * resumes a node whose Slurm reason is still this command's.
 *
 * --perf adds the GPU memory-bandwidth and GEMM checks, which occupy every
 * GPU for seconds; they run only when asked for.
 */
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "cmd/cli_client.h"
#include "health/health.h"

static cli_runner cmd_health;

const struct cli_command cmd_health_entry = {
	.name = "health",
	.run = cmd_health,
	.summary = "check this node's GPUs, memory, links and disks",
	.help = "usage: kiln health [--json] [--drain] [--root DIR] [--sku SIZE]\n"
		"                   [--sku-file FILE] [--dir LIST] [--min-free SIZE]\n"
		"                   [--kernel-log FILE] [--node-name NAME]\n"
		"                   [--perf] [--perf-fraction F] [--perf-file FILE]\n"
		"\n"
		"Run the node checks: GPU count and model against the VM size, GPU\n"
		"double-bit ECC, pending page retirement and row-remap failures, clock\n"
		"throttling, PCIe links below capability, NVLinks down, NVIDIA XIDs and\n"
		"machine checks in the kernel log (and EDAC), InfiniBand ports not\n"
		"Active or slower than the VM size's, memory below the VM size's, and\n"
		"free space. Output follows LBNL NHC, so it can be Slurm's\n"
		"HealthCheckProgram: nothing and exit 0 when healthy, else one line\n"
		"per failed check (ERROR:  kiln:  Health check failed:  CHECK: why)\n"
		"and exit 1.\n"
		"\n"
		"  --json            every check with pass, fail or skip and why\n"
		"  --drain           report to the kiln server (healthy or not), and\n"
		"                    drain the node in Slurm when scontrol is on PATH\n"
		"  --root DIR        read proc/, sys/ and dev/kmsg under DIR\n"
		"  --sku SIZE        the Azure VM size (default $KILN_SKU), e.g.\n"
		"                    Standard_ND96isr_H100_v5\n"
		"  --sku-file FILE   the catalogue (default kiln's azure-gpu-skus.csv)\n"
		"  --dir LIST        scratch and checkpoint directories, comma-separated\n"
		"  --min-free SIZE   free space each --dir needs (default 10Gi)\n"
		"  --kernel-log FILE read the kernel log here (default /dev/kmsg)\n"
		"  --node-name NAME  this node's name for --drain (default: short\n"
		"                    host name)\n"
		"  --perf            also measure each GPU's memory bandwidth and bf16\n"
		"                    GEMM throughput through CUDA (seconds per GPU,\n"
		"                    which it occupies): checks gpu_mem_bandwidth and\n"
		"                    gpu_gemm, skipped without CUDA or a GPU\n"
		"  --perf-fraction F fail a GPU below F of its model's figure\n"
		"                    (default 0.7)\n"
		"  --perf-file FILE  the figures (default kiln's gpu-perf.csv)\n"
		"\n"
		"Exit status: 0 healthy, 1 a check failed, 2 usage error, 3 --drain\n"
		"could not reach the server.\n",
};

extern char **environ;

#define DIRS_MAX 16

static int drain_in_kiln(struct cli_ctx *ctx, const char *node, bool healthy,
			 const char *reason)
{
	struct cli_client *c;
	struct kn_buf path;
	json_t *body;
	int rc = cli_client_open(ctx, &c);

	if (rc)
		return rc;
	body = json_pack("{s:b,s:s}", "healthy", healthy, "reason", reason);
	kn_buf_init(&path, 1024);
	cli_path_object(&path, "/v1/nodes", node, "/health");
	rc = cli_post_json(c, path.data, body, NULL);
	kn_buf_release(&path);
	json_decref(body);
	cli_client_free(c);
	return rc;
}

/* scontrol update NodeName=N State=DRAIN Reason="kiln health: ..." */
static void drain_in_slurm(struct cli_ctx *ctx, const char *node,
			   const char *reason)
{
	char *name_arg = kn_asprintf("NodeName=%s", node);
	char *reason_arg = kn_asprintf("Reason=kiln health: %.200s", reason);
	char *argv[] = {"scontrol", "update", name_arg, "State=DRAIN",
			reason_arg, NULL};
	pid_t pid;
	int status;

	if (posix_spawnp(&pid, "scontrol", NULL, NULL, argv, environ) == 0) {
		if (waitpid(pid, &status, 0) == pid &&
		    (!WIFEXITED(status) || WEXITSTATUS(status) != 0))
			fprintf(stderr, "%s: scontrol could not drain %s\n",
				ctx->prog, node);
	}
	KN_FREE_ALL(name_arg, reason_arg);
}

/*
 * A node this command drained comes back once its checks pass, as NHC
 * does: when Slurm's reason for it is still ours ("kiln health: ..."),
 * scontrol update NodeName=N State=RESUME. A reason anyone else set stays.
 */
static void resume_in_slurm(struct cli_ctx *ctx, const char *node)
{
	char *argv[] = {"sinfo", "-h", "-N", "-n", (char *)node, "-o", "%E",
			NULL};
	char *name_arg = kn_asprintf("NodeName=%s", node);
	char *resume[] = {"scontrol", "update", name_arg, "State=RESUME",
			  NULL};
	posix_spawn_file_actions_t fa;
	char reason[256] = "";
	int fds[2], status;
	pid_t pid;
	ssize_t n = 0, got;

	if (pipe(fds) < 0) {
		free(name_arg);
		return;
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
	posix_spawn_file_actions_addclose(&fa, fds[0]);
	if (posix_spawnp(&pid, "sinfo", &fa, NULL, argv, environ) != 0)
		pid = -1;
	posix_spawn_file_actions_destroy(&fa);
	close(fds[1]);
	while (pid > 0 && (size_t)n < sizeof(reason) - 1 &&
	       (got = read(fds[0], reason + n, sizeof(reason) - 1 - (size_t)n)) >
		       0)
		n += got;
	reason[n] = '\0';
	close(fds[0]);
	if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
	    WEXITSTATUS(status) == 0 &&
	    !strncmp(reason, "kiln health:", strlen("kiln health:")) &&
	    posix_spawnp(&pid, "scontrol", NULL, NULL, resume, environ) == 0 &&
	    (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
	     WEXITSTATUS(status) != 0))
		fprintf(stderr, "%s: scontrol could not resume %s\n", ctx->prog,
			node);
	free(name_arg);
}

/* The checks as JSON, or each failure as a line Slurm's health check
   convention reads. */
static void results_print(struct cli_ctx *ctx,
			  const struct kn_check_result *r, int n, int failed,
			  bool json)
{
	json_t *checks, *doc;

	if (!json) {
		for (int i = 0; i < n; i++)
			if (r[i].status == KN_CHECK_FAIL)
				printf("ERROR:  kiln:  Health check failed:  "
				       "%s: %s\n", r[i].name, r[i].message);
		return;
	}
	checks = json_array();
	for (int i = 0; i < n; i++)
		json_array_append_new(
			checks, json_pack("{s:s,s:s,s:s}", "name", r[i].name,
					  "status",
					  kn_check_status_name(r[i].status),
					  "message", r[i].message));
	doc = json_pack("{s:b,s:i,s:o}", "healthy", failed == 0, "failed",
			failed, "checks", checks);
	cli_print_data(ctx, doc);
	json_decref(doc);
}

/*
 * --drain: node (NULL: this host's short name) drained in Slurm and in
 * kiln when a check failed (first says which), resumed when all passed.
 * Returns kiln's answer (0 when it took it).
 */
static int drain_or_resume(struct cli_ctx *ctx, const char *node,
			   int failed, const char *first)
{
	char host[256];

	if (!node) {
		if (gethostname(host, sizeof(host)) < 0)
			kn_strlcpy(host, "localhost", sizeof(host));
		host[sizeof(host) - 1] = '\0';
		host[strcspn(host, ".")] = '\0';
		node = host;
	}
	if (failed)
		drain_in_slurm(ctx, node, first);
	else
		resume_in_slurm(ctx, node);
	return drain_in_kiln(ctx, node, failed == 0,
			     failed ? first : "all checks passed");
}

static int cmd_health(struct cli_ctx *ctx, int argc, char **argv)
{
	const char *root = "/", *sku_name = getenv("KILN_SKU"),
		   *sku_file = NULL, *dir_arg = NULL, *min_free = "10Gi",
		   *kernel_log = NULL, *node = NULL,
		   *perf_file = NULL, *perf_fraction = NULL;
	bool json = false, drain = false, perf = false;
	struct cli_flag flags[] = {
		{"json", 0, CLI_FLAG_BOOL, &json},
		{"drain", 0, CLI_FLAG_BOOL, &drain},
		{"root", 0, CLI_FLAG_STRING, &root},
		{"sku", 0, CLI_FLAG_STRING, &sku_name},
		{"sku-file", 0, CLI_FLAG_STRING, &sku_file},
		{"dir", 0, CLI_FLAG_STRING, &dir_arg},
		{"min-free", 0, CLI_FLAG_STRING, &min_free},
		{"kernel-log", 0, CLI_FLAG_STRING, &kernel_log},
		{"node-name", 0, CLI_FLAG_STRING, &node},
		{"perf", 0, CLI_FLAG_BOOL, &perf},
		{"perf-file", 0, CLI_FLAG_STRING, &perf_file},
		{"perf-fraction", 0, CLI_FLAG_STRING, &perf_fraction},
		{NULL, 0, 0, NULL},
	};
	struct kn_check_result r[KN_HEALTH_CHECKS + KN_GPU_PERF_CHECKS];
	struct kn_gpu_perf_config perf_cfg = {0};
	int nchecks = KN_HEALTH_CHECKS;
	struct kn_health_config cfg = {0};
	struct kn_sku sku;
	struct kn_error err;
	const char *dirs[DIRS_MAX];
	char *dir_buf = NULL, first[700] = "";
	char *shipped_sku = NULL, *shipped_perf = NULL;
	int rc, failed;

	rc = cli_parse(ctx, argc, argv, flags, NULL, NULL);
	if (rc != CLI_GO)
		return rc;
	cfg.root = root;
	cfg.kernel_log = kernel_log;
	if (kn_parse_size(min_free, &cfg.min_free_bytes) < 0)
		return cli_usage_error(ctx, "--min-free: \"%s\" is not a size "
					    "(e.g. 50Gi)", min_free);
	perf_cfg.fraction = KN_GPU_PERF_FRACTION;
	if (perf_fraction) {
		char *end;
		perf_cfg.fraction = strtod(perf_fraction, &end);
		if (*end || end == perf_fraction || !(perf_cfg.fraction > 0) ||
		    perf_cfg.fraction > 1)
			return cli_usage_error(ctx, "--perf-fraction: \"%s\" is "
						    "not a number in (0, 1]",
					       perf_fraction);
	}
	if (!perf_file)
		perf_file = shipped_perf = kn_data_path("gpu-perf.csv");
	if (!sku_file)
		sku_file = shipped_sku = kn_data_path("azure-gpu-skus.csv");
	perf_cfg.table_path = perf_file;
	if (dir_arg && (rc = cli_split_list(ctx, "dir", dir_arg, false,
					     &dir_buf, dirs, DIRS_MAX)) != CLI_GO)
		goto out;
	cfg.dirs = dir_arg ? dirs : NULL;
	if (sku_name && *sku_name) {
		if (kn_sku_load(sku_file, sku_name, &sku, &err) < 0) {
			rc = cli_usage_error(ctx, "--sku: %s", err.message);
			goto out;
		}
		cfg.sku = &sku;
	}
	rc = kn_nvml_open(&cfg.nvml, &err);
	if (rc < 0 && rc != -ENOENT) {
		rc = cli_fail(ctx, "%s", err.message);
		goto out;
	}
	failed = kn_health_run(&cfg, r);
	kn_nvml_close(cfg.nvml);
	if (perf) {
		int pf = kn_gpu_perf_run(&perf_cfg, r + KN_HEALTH_CHECKS, &err);
		if (pf < 0) {
			rc = cli_usage_error(ctx, "--perf-file: %s", err.message);
			goto out;
		}
		failed += pf;
		nchecks += KN_GPU_PERF_CHECKS;
	}

	for (int i = 0; i < nchecks; i++)
		if (r[i].status == KN_CHECK_FAIL && !first[0])
			snprintf(first, sizeof(first), "%s: %s", r[i].name,
				 r[i].message);
	results_print(ctx, r, nchecks, failed, json);
	rc = failed ? CLI_EXIT_FAIL : CLI_EXIT_OK;
	if (drain) {
		int drc = drain_or_resume(ctx, node, failed, first);

		if (drc != 0 && rc == CLI_EXIT_OK)
			rc = drc;
	}
out:
	KN_FREE_ALL(shipped_perf, shipped_sku, dir_buf);
	return rc;
}
