/*
 * The Slurm side of the server: which executor runs tasks, and the
 * check of the partition map the Slurm executor (src/exec/slurm.c) reads
 * each task's partition from.
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

		if (!eq || klen == 0 || klen + 1 == n ||
		    klen >= KN_SLURM_PARTITION_KEY_MAX ||
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
	struct kn_slurm_config slurm = {cfg->slurm_shards_per_gpu,
					cfg->slurm_partitions};

	if (cfg->executor && !strcmp(cfg->executor, "kubernetes"))
		return kn_kube_executor_new();
	return cfg->executor && !strcmp(cfg->executor, "slurm")
		       ? kn_slurm_executor_new(&slurm)
		       : kn_local_executor_new();
}
