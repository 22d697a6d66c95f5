/*
 * kiln kube-scheduler: flags, credentials and signals for the secondary
 * Kubernetes scheduler whose loop is kn_kube_scheduler_run (src/kube).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "kube/kube.h"
#include "sched/sched.h"

static cli_runner cmd_kube_scheduler;

const struct cli_command cmd_kube_scheduler_entry = {
	.name = "kube-scheduler",
	.run = cmd_kube_scheduler,
	.summary = "place pods on Kubernetes with kiln's packing policies",
	.help = "usage: kiln kube-scheduler [--kubeconfig FILE] [--context NAME]\n"
		"                           [--policy NAME] [--scheduler-name NAME]\n"
		"                           [--gpu-products FILE]\n"
		"                           [--service-account-dir DIR]\n"
		"                           [--watch-timeout SECONDS] [--debug]\n"
		"\n"
		"A secondary Kubernetes scheduler: list nodes and pods, watch pods,\n"
		"and bind each pending pod whose spec.schedulerName is NAME to the\n"
		"node the packing policy picks (GPU shares from the kiln.dev/gpu-milli\n"
		"annotation go to a GPU, written back as kiln.dev/gpu). Runs until\n"
		"SIGTERM or SIGINT. Needs RBAC: pods get/list/watch, pods/binding\n"
		"create, nodes get/list/watch (docs/kubernetes.md).\n"
		"\n"
		"  --kubeconfig FILE      credentials from a kubeconfig (default the\n"
		"                         first file in $KUBECONFIG; else the pod's\n"
		"                         service account)\n"
		"  --context NAME         the kubeconfig context (default its\n"
		"                         current-context)\n"
		"  --policy NAME          random, dot-product, gpu-clustering,\n"
		"                         gpu-packing, best-fit, fgd or kiln (default)\n"
		"  --scheduler-name NAME  the schedulerName to serve (default kiln)\n"
		"  --gpu-products FILE    as for kiln render\n"
		"  --service-account-dir DIR  token and ca.crt in a cluster (default\n"
		"                         /var/run/secrets/kubernetes.io/serviceaccount)\n"
		"  --watch-timeout SECONDS  how long the API keeps one watch open;\n"
		"                         nodes are listed again between watches\n"
		"                         (default 300)\n"
		"  --debug                log debug messages\n"
		"\n"
		"Exit status: 0 after SIGTERM or SIGINT, 1 when credentials or the\n"
		"product table cannot be read, 2 on a usage error.\n",
};

#define DEFAULT_SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"
/* The server ends each watch after this long; between watches the node
   list is refreshed (nodes are listed, not watched). */
#define DEFAULT_WATCH_SECONDS 300

static volatile int stop_flag;

static void on_stop(int sig)
{
	stop_flag = 1;
}

static int cmd_kube_scheduler(struct cli_ctx *ctx, int argc, char **argv)
{
	const char *kubeconfig = NULL, *context = NULL, *policy_name = "kiln";
	const char *scheduler_name = KN_KUBE_DEFAULT_SCHEDULER;
	const char *products_file = NULL;
	const char *sa_dir = DEFAULT_SA_DIR;
	struct kn_kube_products *products = NULL;
	struct kn_kube_auth auth = {0};
	struct kn_kube_scheduler_config sc = {0};
	struct kn_error err = {0};
	struct sigaction sa = {0};
	int watch_seconds = DEFAULT_WATCH_SECONDS, rc;
	long binds = 0;
	bool debug = false;
	char *shipped = NULL;
	const struct cli_flag flags[] = {
		{"kubeconfig", 0, CLI_FLAG_STRING, &kubeconfig},
		{"context", 0, CLI_FLAG_STRING, &context},
		{"policy", 0, CLI_FLAG_STRING, &policy_name},
		{"scheduler-name", 0, CLI_FLAG_STRING, &scheduler_name},
		{"gpu-products", 0, CLI_FLAG_STRING, &products_file},
		{"service-account-dir", 0, CLI_FLAG_STRING, &sa_dir},
		{"watch-timeout", 0, CLI_FLAG_COUNT, &watch_seconds},
		{"debug", 0, CLI_FLAG_BOOL, &debug},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};

	rc = cli_parse(ctx, argc, argv, flags, NULL, NULL);
	if (rc != CLI_GO)
		return rc;
	sc.policy = kn_pack_policy_find(policy_name);
	if (!sc.policy) {
		char names[256] = "";

		for (size_t i = 0; kn_pack_policies[i]; i++)
			snprintf(names + strlen(names),
				 sizeof(names) - strlen(names), "%s%s",
				 i ? ", " : "", kn_pack_policies[i]->name);
		return cli_usage_error(ctx, "--policy: no policy '%s' (one of "
					    "%s)",
				       policy_name, names);
	}
	if (watch_seconds < 1)
		return cli_usage_error(ctx, "--watch-timeout: at least 1");
	if (!*scheduler_name)
		return cli_usage_error(ctx, "--scheduler-name: empty");
	if (debug)
		kn_log_level = KN_LOG_DEBUG;
	rc = kn_kube_auth_load(kubeconfig, context, sa_dir, &auth, &err);
	if (rc == 0 && !products_file)
		products_file = shipped = kn_data_path("gpu-products.csv");
	if (rc == 0)
		rc = kn_kube_products_load(products_file, &products, &err);
	if (rc < 0)
		goto fail;
	sa.sa_handler = on_stop;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sc.auth = &auth;
	sc.scheduler_name = scheduler_name;
	sc.products = products;
	sc.watch_seconds = watch_seconds;
	kn_log(KN_LOG_INFO, "kube-scheduler: %s, scheduler name %s, policy %s",
	       auth.server, scheduler_name, sc.policy->name);
	rc = kn_kube_scheduler_run(&sc, &stop_flag, &binds, &err);
	if (rc < 0)
		goto fail;
	kn_log(KN_LOG_INFO, "kube-scheduler: stopped after %ld binding%s",
	       binds, binds == 1 ? "" : "s");
	rc = CLI_EXIT_OK;
	goto out;
fail:
	cli_fail(ctx, "%s", err.message);
	rc = CLI_EXIT_FAIL;
out:
	kn_kube_products_free(products);
	kn_kube_auth_release(&auth);
	free(shipped);
	return rc;
}
