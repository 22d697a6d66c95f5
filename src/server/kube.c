/*
 * The Kubernetes side of the server: credentials and the executor's
 * worker (src/kube/batchjobs.c) for --executor kubernetes.
 *
 * As under Slurm, the server's one node stands for the capacity it may
 * hand the cluster (--gpus), so the queue, priorities and preemption work
 * as they do locally; where pods go is the cluster's business, so the
 * spec's selector, tolerations, affinity and spread go into the pod
 * template and not into kiln's placement.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "kube/kube.h"

#define SERVICE_ACCOUNT_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

int kube_start(struct server *s, struct kn_error *err)
{
	const struct kn_server_config *cfg = &s->cfg;
	struct kn_kube_auth auth = {0};
	struct kn_kube_exec_config ec = {0};
	char *env_config = NULL, *store_url = NULL;
	const char *kubeconfig = cfg->kubeconfig;
	int rc;

	if (!s->exec->ops->places_tasks)
		return 0;
	/* $KUBECONFIG may list several files; kubectl merges them, kiln
	   reads the first (as kiln kube-scheduler). */
	if (!kubeconfig && getenv("KUBECONFIG") && *getenv("KUBECONFIG")) {
		env_config = kn_xstrdup(getenv("KUBECONFIG"));
		env_config[strcspn(env_config, ":")] = '\0';
		kubeconfig = env_config;
	}
	rc = kubeconfig ? kn_kube_kubeconfig_load(kubeconfig, cfg->kube_context,
						  &auth, err)
			: kn_kube_in_cluster(SERVICE_ACCOUNT_DIR, &auth, err);
	if (rc == 0) {
		char *products = kn_data_path("gpu-products.csv");

		rc = kn_kube_products_load(products, &s->kube_products, err);
		free(products);
	}
	if (rc < 0)
		goto out;
	ec.auth = &auth;
	ec.namespace_ = cfg->kube_namespace ? cfg->kube_namespace : "default";
	ec.image = cfg->kube_image;
	ec.scheduler_name = cfg->kube_scheduler;
	ec.shim_image = cfg->kube_shim_image;
	/* The pods' shims sync with the server's store (--blob-store). */
	store_url = cfg->blob_store ? kn_xstrdup(cfg->blob_store)
				    : kn_blob_default_url(s->home);
	ec.store_url = store_url;
	ec.products = s->kube_products;
	rc = kn_kube_executor_start(&ec, err);
	if (rc == 0)
		kn_log(KN_LOG_INFO, "kubernetes: Jobs go to %s, namespace %s",
		       auth.server, ec.namespace_);
out:
	kn_kube_auth_release(&auth);
	free(env_config);
	free(store_url);
	return rc;
}

void kube_stop(struct server *s)
{
	kn_kube_executor_stop();
	kn_kube_products_free(s->kube_products);
	s->kube_products = NULL;
}

int kube_check_inputs(const struct server *s, const struct kn_job_spec *spec,
		      const char *filename, struct kn_error *err)
{
	char *store;
	int rc;

	if (!s->exec->ops->places_tasks)
		return 0;
	store = blobstores_url(s, spec->checkpoint.store);
	rc = kn_kube_check_inputs(spec, store, filename, err);
	free(store);
	return rc;
}
