/*
 * The Slurm side of the server: which executor runs tasks, and the
 * per-task sbatch options (src/exec/slurm.c) derived from a run's spec and
 * the server's partition map.
 *
 * The partition map is "KEY=PARTITION,..." with keys "default", "spot"
 * (preemptible jobs) and "pool:NAME" (jobs whose placement.selector has
 * pool: NAME); the first of pool, spot, default that matches is used, and
 * none leaves the choice to Slurm's default partition. A pool is Slurm's
 * to honour: the kiln scheduler, whose one node stands for the whole
 * cluster, does not match that selector key.
 */
#include "internal.h"

#include "kube/kube.h"

#include <string.h>

#define PARTITION_KEY_MAX 128

/* The partition for key from the map, copied into out; false if absent. */
static bool partition_lookup(const char *map, const char *key, char *out,
			     size_t len)
{
	size_t klen = strlen(key);
	const char *p = map;

	while (p && *p) {
		size_t n = strcspn(p, ",");
		const char *eq = memchr(p, '=', n);

		if (eq && (size_t)(eq - p) == klen && !strncmp(p, key, klen)) {
			size_t v = n - klen - 1;
			if (v >= len)
				v = len - 1;
			memcpy(out, eq + 1, v);
			out[v] = '\0';
			return true;
		}
		p += n;
		if (*p == ',')
			p++;
	}
	return false;
}

int slurm_config_check(const struct kn_server_config *cfg,
		       struct kn_error *err)
{
	const char *p = cfg->slurm_partitions;

	if (cfg->executor && strcmp(cfg->executor, "local") != 0 &&
	    strcmp(cfg->executor, "slurm") != 0 &&
	    strcmp(cfg->executor, "kubernetes") != 0)
		return kn_errorf(err, KN_EINVAL, "executor",
				 "--executor: \"%s\" is not local, slurm or "
				 "kubernetes",
				 cfg->executor);
	if (cfg->slurm_shards_per_gpu < 1 || cfg->slurm_shards_per_gpu > 1000)
		return kn_errorf(err, KN_EINVAL, "slurm_shards_per_gpu",
				 "--slurm-shards-per-gpu: %d is not in 1..1000",
				 cfg->slurm_shards_per_gpu);
	while (p && *p) {
		size_t n = strcspn(p, ",");
		const char *eq = memchr(p, '=', n);
		size_t klen = eq ? (size_t)(eq - p) : 0;

		if (!eq || klen == 0 || klen + 1 == n || klen >= PARTITION_KEY_MAX ||
		    !((klen == 7 && !strncmp(p, "default", 7)) ||
		      (klen == 4 && !strncmp(p, "spot", 4)) ||
		      (klen > 5 && !strncmp(p, "pool:", 5))))
			return kn_errorf(err, KN_EINVAL, "slurm_partitions",
					 "--slurm-partitions: \"%.*s\" is not "
					 "default=P, spot=P or pool:NAME=P",
					 (int)n, p);
		p += n;
		if (*p == ',')
			p++;
	}
	return 0;
}

struct kn_executor *slurm_executor_chosen(const struct kn_server_config *cfg)
{
	if (cfg->executor && !strcmp(cfg->executor, "kubernetes"))
		return kn_kube_executor_new();
	return cfg->executor && !strcmp(cfg->executor, "slurm")
		       ? kn_slurm_executor_new()
		       : kn_local_executor_new();
}

void slurm_task_fill(const struct server *s, const struct run *r, int rank,
		     struct kn_slurm_task *out, char *partition, size_t len)
{
	const struct kn_job_spec *spec = r->spec;
	const struct kn_resources *res = &spec->resources;
	const char *pool = NULL;
	char key[PARTITION_KEY_MAX];

	memset(out, 0, sizeof(*out));
	out->rank = rank;
	out->ntasks = r->n_tasks;
	out->job_name = spec->name;
	if (res->mig_profile)
		out->mig_profile = res->mig_profile;
	else if (res->gpu_milli >= KN_MILLI)
		out->gpus = res->gpu_milli / KN_MILLI;
	else if (res->gpu_milli > 0)
		out->shards = (res->gpu_milli * s->cfg.slurm_shards_per_gpu +
			       KN_MILLI - 1) / KN_MILLI;
	out->cpus = (res->cpu_milli + KN_MILLI - 1) / KN_MILLI;
	out->memory_mb = (res->memory_bytes + (1 << 20) - 1) >> 20;
	out->requeue = spec->preemptible;
	out->image = spec->image;
	if (spec->checkpoint.set) {
		out->checkpoint_signal = spec->checkpoint.signal;
		out->checkpoint_grace_ms = spec->checkpoint.grace_ms;
	}
	for (size_t i = 0; i < spec->placement.n_selector; i++)
		if (!strcmp(spec->placement.selector[i].key, "pool"))
			pool = spec->placement.selector[i].value;
	partition[0] = '\0';
	snprintf(key, sizeof(key), "pool:%s", pool ? pool : "");
	if ((pool && partition_lookup(s->cfg.slurm_partitions, key, partition,
				      len)) ||
	    (spec->preemptible &&
	     partition_lookup(s->cfg.slurm_partitions, "spot", partition, len)) ||
	    partition_lookup(s->cfg.slurm_partitions, "default", partition, len))
		out->partition = partition;
}
