/*
 * The executors `kiln server --executor` chooses from, as a table: each
 * one's name, the check of its own options and how its instance is made.
 * The server picks an entry once, at start-up, and from then on drives
 * the instance through its ops (exec.h): what an engine does itself
 * (placing tasks, syncing checkpoints, a selector key) is a field of its
 * ops, never a question about which engine it is. A new executor is a row
 * here and an ops table in its own module.
 *
 * Under Kubernetes the server's one node stands for the capacity it may
 * hand the cluster (--gpus), so the queue, priorities and preemption work
 * as they do locally; where tasks go is the engine's business (a pod's
 * selector and affinity). Under Slurm the nodes are Slurm's own, read
 * through the executor's inventory (slurm_nodes.c), unless --gpus
 * declares one; Slurm still places each task in its partition.
 */
#include "internal.h"
#include "executors.h"

#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "kube/kube.h"

#define SERVICE_ACCOUNT_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

struct executor_kind {
	const char *name;
	/* Its tasks are processes of this machine, so the server's nodes
	   (--sim-node, --pool) are where they run; elsewhere the one node
	   stands for the capacity the engine is handed. */
	bool runs_here;
	/* Its options given although another executor is chosen: the
	   flags' names for the error, or NULL when none was given. */
	const char *(*options_given)(const struct kn_server_config *cfg);
	/* The instance, once its own options are checked. */
	int (*create)(const struct server *s, struct kn_executor **out,
		      struct kn_error *err);
};

static int local_create(const struct server *s, struct kn_executor **out,
			struct kn_error *err)
{
	(void)s;
	(void)err;
	*out = kn_local_executor_new();
	return 0;
}

static int slurm_create(const struct server *s, struct kn_executor **out,
			struct kn_error *err)
{
	/* The inventory's readings go to HOME/slurm. */
	char *dir = kn_asprintf("%s/slurm", s->cfg.home);
	struct kn_slurm_config slurm = {s->cfg.slurm_shards_per_gpu,
					s->cfg.slurm_partitions, dir};
	int rc = kn_slurm_config_check(&slurm, err);

	*out = rc < 0 ? NULL : kn_slurm_executor_new(&slurm);
	free(dir);
	return rc;
}

static const char *kube_options_given(const struct kn_server_config *cfg)
{
	if (cfg->kube_namespace || cfg->kubeconfig || cfg->kube_context ||
	    cfg->kube_image || cfg->kube_scheduler || cfg->kube_shim_image ||
	    cfg->kube_poll_ms != KN_KUBE_POLL_DEFAULT_MS)
		return "--kube-namespace, --kubeconfig, --kube-context, "
		       "--image, --kube-scheduler-name, --kube-shim-image and "
		       "--kube-poll-interval";
	return NULL;
}

/* Credentials (a kubeconfig, else the pod's service account), the GPU
   products, the pods' store; the instance starts its worker. */
static int kube_create(const struct server *s, struct kn_executor **out,
		       struct kn_error *err)
{
	const struct kn_server_config *cfg = &s->cfg;
	struct kn_kube_auth auth = {0};
	struct kn_kube_exec_config ec = {0};
	struct kn_kube_products *products = NULL;
	char *store_url = NULL;
	int rc;

	*out = NULL;
	rc = kn_kube_auth_load(cfg->kubeconfig, cfg->kube_context,
			       SERVICE_ACCOUNT_DIR, &auth, err);
	if (rc == 0) {
		char *products_file = kn_data_path("gpu-products.csv");

		rc = kn_kube_products_load(products_file, &products, err);
		free(products_file);
	}
	if (rc < 0)
		goto out;
	ec.auth = &auth;
	ec.namespace_ = cfg->kube_namespace ? cfg->kube_namespace : "default";
	ec.image = cfg->kube_image;
	ec.scheduler_name = cfg->kube_scheduler;
	ec.shim_image = cfg->kube_shim_image;
	ec.poll_ms = cfg->kube_poll_ms;
	/* The pods' shims sync with the server's store (--blob-store). */
	store_url = cfg->blob_store ? kn_xstrdup(cfg->blob_store)
				    : kn_blob_default_url(s->home);
	ec.store_url = store_url;
	ec.products = products; /* the executor's from here on */
	rc = kn_kube_executor_new(&ec, out, err);
	if (rc == 0)
		kn_log(KN_LOG_INFO, "kubernetes: Jobs go to %s, namespace %s",
		       auth.server, ec.namespace_);
out:
	kn_kube_auth_release(&auth);
	free(store_url);
	return rc;
}

static const struct executor_kind kinds[] = {
	{"local", true, NULL, local_create},
	{"slurm", false, NULL, slurm_create},
	{"kubernetes", false, kube_options_given, kube_create},
};

/* The entry --executor names (none: local), or NULL. */
static const struct executor_kind *kind_of(const struct kn_server_config *cfg)
{
	const char *name = cfg->executor ? cfg->executor : "local";

	for (size_t i = 0; i < KN_LEN(kinds); i++)
		if (!strcmp(kinds[i].name, name))
			return &kinds[i];
	return NULL;
}

static int unknown_kind(const struct kn_server_config *cfg,
			struct kn_error *err)
{
	return kn_errorf(err, KN_EINVAL, "executor",
			 "--executor: \"%s\" is not local, slurm or "
			 "kubernetes", cfg->executor);
}

int executors_config_check(const struct kn_server_config *cfg,
			   struct kn_error *err)
{
	const struct executor_kind *chosen = kind_of(cfg);

	if (!chosen)
		return unknown_kind(cfg, err);
	for (size_t i = 0; i < KN_LEN(kinds); i++) {
		const char *given;

		if (&kinds[i] == chosen || !kinds[i].options_given ||
		    !(given = kinds[i].options_given(cfg)))
			continue;
		return kn_errorf(err, KN_EINVAL, "executor", "%s need "
				 "--executor %s", given, kinds[i].name);
	}
	return 0;
}

bool executor_runs_here(const struct kn_server_config *cfg)
{
	const struct executor_kind *kind = kind_of(cfg);

	return kind && kind->runs_here;
}

int executors_create(struct server *s, struct kn_error *err)
{
	const struct executor_kind *kind = kind_of(&s->cfg);

	if (!kind)
		return unknown_kind(&s->cfg, err);
	return kind->create(s, &s->exec, err);
}

int executor_check_inputs(const struct server *s,
			  const struct kn_job_spec *spec, const char *filename,
			  struct kn_error *err)
{
	char *store;
	int rc;

	/* Only a pod's shim fetches inputs away from this machine. */
	if (!s->exec->ops->syncs_checkpoints)
		return 0;
	store = blobstores_url(s, spec->checkpoint.store);
	rc = kn_kube_check_inputs(spec, store, filename, err);
	free(store);
	return rc;
}
