/*
 * Node health in the server: the checks of `kiln health` (src/health)
 * run at start and every --health-interval on the worker pool (they read
 * the kernel log and NVML, which may be slow). A failure makes a ready
 * node unhealthy with the first failed check as the reason, so it gets no
 * new work and `kiln nodes` says why; a pass brings an unhealthy node
 * back to ready. A node an operator cordoned or drained is left as it is
 * either way: health never overrides a person.
 *
 * Each run opens NVML for itself rather than sharing the scraper's
 * handle: runs are minutes apart and the two never need to coordinate.
 */
#include "internal.h"

#include "health/health.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The reason a failing check gives; a passing one clears only these. */
#define HEALTH_REASON "health check failed: "

struct health_job {
	struct node_health *nh;
	int failed;
	char first[700]; /* "check: message" of the first failure */
};

struct node_health {
	struct server *s;
	struct kn_timer *timer;
	struct kn_sku sku;
	bool have_sku;
	bool busy;
	struct health_job job;
};

static void health_work(void *arg)
{
	struct health_job *j = arg;
	struct node_health *nh = j->nh;
	struct kn_health_config cfg = {0};

	cfg.root = nh->s->cfg.health_root;
	cfg.kernel_log = nh->s->cfg.health_kernel_log;
	cfg.sku = nh->have_sku ? &nh->sku : NULL;
	j->failed = kn_health_run_here(&cfg, j->first, sizeof(j->first));
}

static void health_done(void *arg, bool ran)
{
	struct health_job *j = arg;
	struct node_health *nh = j->nh;
	struct server *s = nh->s;
	struct kn_error err;
	char reason[192];

	nh->busy = false;
	if (s->closing || !ran)
		return;
	/* The checks describe this machine, which every node runs on. A
	   passing check clears only what a failing check set: a node an
	   operator or an outside agent reported unhealthy stays so until
	   they report it healthy. */
	for (size_t i = 0; i < s->cluster.n_nodes; i++) {
		const char *name = s->nodes[i].name;

		if (j->failed && !strcmp(s->nodes[i].state, "ready")) {
			snprintf(reason, sizeof(reason),
				 HEALTH_REASON "%.160s", j->first);
			kn_log(KN_LOG_WARN, "node %s is unhealthy: %s", name,
			       j->first);
			if (nodes_set_state(s, NULL, name, "unhealthy", reason,
					    &err) < 0)
				kn_log(KN_LOG_ERROR,
				       "marking the node unhealthy: %s",
				       err.message);
		} else if (!j->failed &&
			   !strcmp(s->nodes[i].state, "unhealthy") &&
			   !strncmp(s->nodes[i].reason, HEALTH_REASON,
				    strlen(HEALTH_REASON))) {
			kn_log(KN_LOG_INFO,
			       "node %s passes its health checks again", name);
			if (nodes_set_state(s, NULL, name, "ready", "", &err) < 0)
				kn_log(KN_LOG_ERROR, "marking the node ready: %s",
				       err.message);
			else
				jobs_wake(s);
		}
	}
}

static void health_tick(void *arg)
{
	struct node_health *nh = arg;

	if (nh->s->cfg.health_interval_ms > 0)
		kn_timer_arm(nh->timer, nh->s->cfg.health_interval_ms);
	if (nh->busy)
		return;
	nh->busy = true;
	kn_workers_submit(nh->s->workers, health_work, health_done, &nh->job);
}

int health_start(struct server *s, struct node_health **out,
		 struct kn_error *err)
{
	struct node_health *nh;

	*out = NULL;
	if (s->cfg.health_interval_ms == 0)
		return 0;
	nh = kn_xcalloc(1, sizeof(*nh));
	nh->s = s;
	nh->job.nh = nh;
	if (s->cfg.health_sku && *s->cfg.health_sku) {
		int rc = kn_sku_load(s->cfg.health_sku_file,
				     s->cfg.health_sku, &nh->sku, err);
		if (rc < 0) {
			free(nh);
			return rc;
		}
		nh->have_sku = true;
	}
	nh->timer = kn_timer_new(s->loop, health_tick, nh);
	kn_timer_arm(nh->timer, 0);
	*out = nh;
	return 0;
}

void health_free(struct node_health *nh)
{
	if (!nh)
		return;
	kn_timer_free(nh->timer);
	free(nh);
}
