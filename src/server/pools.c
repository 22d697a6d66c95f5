/*
 * Node pools: groups of like nodes (one VM size, spot or on demand, some
 * zones) that grow when queued work fits no node and shrink when nodes
 * stay idle (docs/capacity.md). A provider makes and deletes the nodes;
 * the decision is kn_autoscale_plan's (src/sched), taken on a timer.
 *
 * The core's nodes grow and shrink here (core_node_add and
 * core_node_remove; a node is removed only when no run is bound to it);
 * which pool each belongs to is this service's own. The providers that
 * make and delete the nodes are in pool_providers.c, the HTTP handlers in
 * pools_http.c.
 */
#include "poolsvc.h"

#include "cost/cost.h"
#include "health/health.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


/* ---- parsing --pool ---- */

static void pool_release(struct pool *p)
{
	kn_pool_spec_release(&p->spec);
	pool_azure_free(p->azure);
	free(p->shape.devices);
	kn_device_set_release(&p->shape_devices);
}

static const struct pool_provider_ops *const providers[] = {
	[KN_POOL_PROVIDER_SIM] = &sim_provider,
	[KN_POOL_PROVIDER_COMMAND] = &command_provider,
	[KN_POOL_PROVIDER_AZURE] = &azure_provider,
};
static void rolling_free(struct rolling *r);

/*
 * The grammar is kn_pool_spec_parse's (src/sched); here what needs the
 * machine: the devices, the command, the provider's client.
 */
static int pool_parse(const char *text, struct pool *p, struct kn_error *err)
{
	int rc;

	memset(p, 0, sizeof(*p));
	p->next_index = 1;
	rc = kn_pool_spec_parse(text, "--pool", &p->spec, err);
	if (rc < 0)
		return rc;
	p->provider = providers[p->spec.provider];
	rc = kn_devices_simulated(p->spec.gpus, &p->shape_devices, err);
	if (rc < 0) {
		char why[sizeof(err->message)];

		kn_strlcpy(why, err->message, sizeof(why));
		return kn_errorf(err, KN_EINVAL, "pool",
				 "--pool \"%s\": GPUS: %s", text, why);
	}
	if (p->spec.command && access(p->spec.command, X_OK) < 0)
		return kn_errorf(err, KN_EINVAL, "pool",
				 "--pool \"%s\": command: %s: %s", text,
				 p->spec.command, strerror(errno));
	return pool_azure_open(p, text, err);
}

/* ---- nodes ---- */

struct pools *pools_state(struct server *s)
{
	return service_state(s, &pools_service);
}

struct pool_member *pool_member_of(struct server *s, const char *name)
{
	struct pools *ps = pools_state(s);

	for (size_t i = 0; ps && i < ps->n_members; i++)
		if (!strcmp(ps->members[i].name, name))
			return &ps->members[i];
	return NULL;
}

void pool_idle_from_now(struct server *s, const char *name)
{
	struct pool_member *m = pool_member_of(s, name);

	if (m)
		m->idle_since = kn_now_ms();
}

struct pool *pool_of_node(struct server *s, size_t i)
{
	struct pool_member *m = pool_member_of(s, core_node_name(s, i));

	return m ? m->pool : NULL;
}

/*
 * Add node name to pool p in state (a restarted server keeps a cordon);
 * running marks a node made after start-up, whose ledger interval opens
 * here rather than in cost_start.
 */
int pool_node_add(struct server *s, struct pool *p, const char *name,
		  const char *state, const char *reason, bool running,
		  struct kn_error *err)
{
	struct pools *ps = pools_state(s);
	int index = p->next_index;
	struct pool_member *m;
	const char *zone;
	char *labels;
	int rc;

	/* Only POOL-N names are kiln's own (an azure node has its VM's). */
	if (!strncmp(name, p->spec.name, strlen(p->spec.name)))
		sscanf(name + strlen(p->spec.name), "-%d", &index);
	zone = p->joining_zone ? p->joining_zone
	       : p->spec.n_zones
		       ? p->spec.zones[(size_t)(index - 1) % p->spec.n_zones]
		       : NULL;
	labels = kn_asprintf("pool=%s sku=%s pricing=%s%s%s%s", p->spec.name,
			     p->spec.sku, p->spec.spot ? "spot" : "on_demand",
			     zone ? " zone=" : "", zone ? zone : "",
			     p->spec.labels);
	rc = core_node_add(s,
			   &(struct node_new){ .name = name,
					       .state = state,
					       .reason = reason,
					       .gpus = p->spec.gpus,
					       .labels = labels,
					       .flag = "--pool",
					       .running = running },
			   err);
	free(labels);
	if (rc < 0)
		return rc;
	ps->members = kn_xrealloc(ps->members,
				  (ps->n_members + 1) * sizeof(*ps->members));
	m = &ps->members[ps->n_members++];
	memset(m, 0, sizeof(*m));
	kn_strlcpy(m->name, name, sizeof(m->name));
	m->pool = p;
	if (index >= p->next_index)
		p->next_index = index + 1;
	if (running)
		feed_publish(s, "node.added",
			     json_pack("{s:s, s:s}", "node", name, "pool",
				       p->spec.name));
	kn_log(KN_LOG_INFO, "pool %s: node %s up (%s, %s)", p->spec.name, name,
	       p->spec.gpus, p->spec.spot ? "spot" : "on demand");
	return 0;
}

int pool_node_remove(struct server *s, size_t i, struct kn_error *err)
{
	struct pools *ps = pools_state(s);
	struct pool_member *m = pool_member_of(s, core_node_name(s, i));
	int rc = core_node_remove(s, i, err);

	if (rc < 0 || !m)
		return rc;
	ps->n_members--;
	memmove(m, m + 1,
		(size_t)(ps->members + ps->n_members - m) * sizeof(*m));
	return 0;
}

/* ---- start-up ---- */

/* The pool a stored node row belongs to (label pool=), or NULL. */
static struct pool *row_pool(struct server *s, const struct kn_node_row *row)
{
	json_t *labels = json_loads(row->labels_json ? row->labels_json : "{}",
				    0, NULL);
	const char *name = json_string_value(json_object_get(labels, "pool"));
	struct pool *found = NULL;

	for (size_t i = 0; name && i < pools_state(s)->n; i++)
		if (!strcmp(pools_state(s)->pool[i].spec.name, name))
			found = &pools_state(s)->pool[i];
	json_decref(labels);
	return found;
}

static void shape_build(struct pool *p)
{
	struct kn_sched_node *sn = &p->shape;

	sn->name = p->spec.name;
	sn->schedulable = true;
	sn->n_devices = p->shape_devices.n;
	sn->devices = kn_xcalloc(sn->n_devices, sizeof(*sn->devices));
	for (size_t i = 0; i < sn->n_devices; i++) {
		sn->devices[i].index = p->shape_devices.devices[i].index;
		sn->devices[i].model = p->shape_devices.devices[i].model;
		sn->devices[i].memory_bytes =
			p->shape_devices.devices[i].memory_bytes;
	}
}

/*
 * The pools' nodes at start: those a previous run left (not removed; a
 * task may still run there), then new ones up to min.
 */
static int pools_adopt(struct server *s, struct kn_error *err)
{
	struct kn_node_row *rows = NULL;
	size_t n_rows = 0;
	int rc = kn_store_node_list(core_store(s), &rows, &n_rows, err);

	for (size_t k = 0; rc == 0 && k < n_rows; k++) {
		struct pool *p = row_pool(s, &rows[k]);
		json_t *labels = NULL;

		if (!p || !strcmp(rows[k].state, "removed") ||
		    nodes_find(s, rows[k].name) >= 0)
			continue;
		/* An azure node keeps its VM's zone, which only Azure knew. */
		if (p->provider == &azure_provider) {
			labels = json_loads(rows[k].labels_json
						    ? rows[k].labels_json
						    : "{}",
					    0, NULL);
			p->joining_zone = json_string_value(
				json_object_get(labels, "zone"));
		}
		rc = pool_node_add(s, p, rows[k].name, rows[k].state,
				   rows[k].reason, false, err);
		p->joining_zone = NULL;
		json_decref(labels);
	}
	kn_node_list_free(rows, n_rows);
	for (size_t i = 0; rc == 0 && i < pools_state(s)->n; i++) {
		struct pool *p = &pools_state(s)->pool[i];
		int have = 0;

		/* A scale set's VMs join when listed: the autoscaler asks
		   for min. */
		if (p->provider == &azure_provider)
			continue;
		for (size_t n = 0; n < core_node_count(s); n++)
			have += pool_of_node(s, n) == p;
		while (rc == 0 && have++ < p->spec.min) {
			char name[64];

			snprintf(name, sizeof(name), "%s-%d", p->spec.name,
				 p->next_index);
			rc = pool_node_add(s, p, name, "ready", NULL, false, err);
		}
	}
	for (size_t n = 0; rc == 0 && n < core_node_count(s); n++)
		if (pool_of_node(s, n))
			rc = nodes_save(s, n, err);
	return rc;
}

/* Parse --pool, create or adopt each pool's nodes. */
int pools_start(struct server *s, struct kn_error *err)
{
	struct pools *ps;
	int rc = 0;

	if (!core_config(s)->n_pools)
		return 0;
	ps = kn_xcalloc(1, sizeof(*ps));
	ps->pool = kn_xcalloc(core_config(s)->n_pools, sizeof(*ps->pool));
	service_state_set(s, &pools_service, ps);
	{
		/* The command provider's calls of an earlier run are over or
		   forgotten. */
		char *dir = kn_asprintf("%s/pools", core_home(s));

		kn_rm_rf(dir);
		free(dir);
	}
	for (size_t i = 0; rc == 0 && i < core_config(s)->n_pools; i++) {
		rc = pool_parse(core_config(s)->pools[i], &ps->pool[i], err);
		ps->n = i + 1;
		for (size_t k = 0; rc == 0 && k < i; k++)
			if (!strcmp(ps->pool[k].spec.name, ps->pool[i].spec.name))
				rc = kn_errorf(err, KN_EINVAL, "pool",
					       "--pool: pool %s is given twice",
					       ps->pool[i].spec.name);
		for (size_t k = 0; rc == 0 && k < core_node_count(s); k++)
			if (!strncmp(core_node_name(s, k), ps->pool[i].spec.name,
				     strlen(ps->pool[i].spec.name)) &&
			    core_node_name(s, k)[strlen(ps->pool[i].spec.name)] == '-')
				rc = kn_errorf(err, KN_EINVAL, "pool",
					       "--pool %s: node %s would clash "
					       "with its nodes' names",
					       ps->pool[i].spec.name,
					       core_node_name(s, k));
		if (rc == 0)
			shape_build(&ps->pool[i]);
	}
	if (rc == 0)
		rc = pools_adopt(s, err);
	if (rc == 0 && core_node_count(s) == 0)
		rc = kn_errorf(err, KN_EINVAL, "pool",
			       "--pool: every pool has min=0 or is an azure "
			       "pool (whose VMs join once listed), so the "
			       "server would start with no node: give one "
			       "min=1 or add a --sim-node");
	return rc;
}

/* ---- the autoscaler ---- */

/*
 * The pools' nodes as the plan sees them (an_node[k]: the core's index of
 * an[k]), each pool's count in ap; returns how many. A node's idle time
 * is kept here.
 */
static size_t autoscale_nodes(struct server *s, const struct pools *ps,
			      int64_t now, struct kn_autoscale_pool *ap,
			      struct kn_autoscale_node *an, size_t *an_node)
{
	size_t n_an = 0;

	for (size_t n = 0; n < core_node_count(s); n++) {
		struct pool_member *m = pool_member_of(s, core_node_name(s, n));
		size_t pool;

		if (!m)
			continue;
		/* Only a ready node counts as idle: a cordoned one is an
		   operator's, not the autoscaler's. */
		if (core_node_busy(s, n) ||
		    strcmp(core_node_state(s, n), "ready") != 0)
			m->idle_since = 0;
		else if (!m->idle_since)
			m->idle_since = now;
		pool = (size_t)(m->pool - ps->pool);
		ap[pool].current++;
		an[n_an].pool = pool;
		an[n_an].idle_since = m->idle_since;
		an_node[n_an++] = n;
	}
	return n_an;
}

double pools_gpu_price(struct server *s, const struct pool *p)
{
	const struct kn_catalog *catalog = cost_catalog(s);
	const struct kn_vm_size *size =
		catalog ? kn_catalog_find(catalog, p->spec.sku) : NULL;
	double usd;

	if (!size || !kn_vm_size_price(size, p->spec.spot ? KN_PRICING_SPOT
						     : KN_PRICING_ON_DEMAND,
				       &usd) ||
	    p->shape_devices.n == 0)
		return -1;
	return usd / (double)p->shape_devices.n;
}

static void decide(struct server *s, struct pool *p, const char *why,
		   int64_t now)
{
	char object[96];

	kn_strlcpy(p->decision, why, sizeof(p->decision));
	p->decision_at = now;
	kn_log(KN_LOG_INFO, "pool %s: %s", p->spec.name, why);
	snprintf(object, sizeof(object), "pool/%s", p->spec.name);
	core_audit(s, NULL, why[0] == '+' ? "pool.scale_up" : "pool.scale_down",
		   object, "ok", why);
	feed_publish(s, "pool.scale",
		     json_pack("{s:s, s:s}", "pool", p->spec.name, "why", why));
}

static void pools_tick(void *arg)
{
	struct server *s = arg;
	struct pools *ps = pools_state(s);
	int64_t now = kn_now_ms();
	struct kn_autoscale_pool *ap = kn_xcalloc(ps->n, sizeof(*ap));
	struct kn_autoscale_job *aj;
	struct kn_autoscale_node *an;
	struct pending_job *pending = NULL;
	size_t n_pending, n_an = 0, n_nodes = core_node_count(s);
	size_t *an_node;
	char (*why)[KN_AUTOSCALE_WHY_LEN] = kn_xcalloc(ps->n, sizeof(*why));
	char blocked[KN_AUTOSCALE_WHY_LEN], (*doomed)[64];
	int *add = kn_xcalloc(ps->n, sizeof(*add));
	bool *remove, added = false;
	size_t n_doomed = 0;

	if (core_closing(s))
		goto out_early;
	/* New nodes: the scheduler places the queue on them first, or the
	   jobs they will take would look unplaced and ask again. */
	if (pool_ops_poll(s)) {
		kn_timer_arm(ps->timer, POOLS_TICK_MS);
		goto out_early;
	}
	an = kn_xcalloc(n_nodes ? n_nodes : 1, sizeof(*an));
	an_node = kn_xcalloc(n_nodes ? n_nodes : 1, sizeof(*an_node));
	remove = kn_xcalloc(n_nodes ? n_nodes : 1, sizeof(*remove));
	doomed = kn_xcalloc(n_nodes ? n_nodes : 1, sizeof(*doomed));
	for (size_t i = 0; i < ps->n; i++) {
		ap[i].name = ps->pool[i].spec.name;
		ap[i].spot = ps->pool[i].spec.spot;
		ap[i].gpu_hour_price = pools_gpu_price(s, &ps->pool[i]);
		ap[i].min = ps->pool[i].spec.min;
		ap[i].max = ps->pool[i].spec.max;
		ap[i].provisioning = ps->pool[i].provisioning;
		ap[i].scale_down_delay_ms = ps->pool[i].spec.scale_down_delay_ms;
		ap[i].shape = &ps->pool[i].shape;
	}
	n_an = autoscale_nodes(s, ps, now, ap, an, an_node);
	n_pending = jobs_pending(s, &pending);
	aj = kn_xcalloc(n_pending ? n_pending : 1, sizeof(*aj));
	for (size_t i = 0; i < n_pending; i++) {
		aj[i].id = pending[i].id;
		aj[i].preemptible = pending[i].preemptible;
		aj[i].req = pending[i].req;
	}
	kn_autoscale_plan(ap, ps->n, aj, n_pending, an, n_an, now, add, remove,
			  why, blocked);
	if (strcmp(blocked, ps->blocked) != 0) {
		if (blocked[0])
			kn_log(KN_LOG_WARN, "pools: %s", blocked);
		kn_strlcpy(ps->blocked, blocked, sizeof(ps->blocked));
	}
	/* Names first: removal moves the nodes. */
	for (size_t k = 0; k < n_an; k++)
		if (remove[k])
			kn_strlcpy(doomed[n_doomed++], core_node_name(s, an_node[k]),
				   sizeof(doomed[0]));
	for (size_t i = 0; i < ps->n; i++) {
		struct pool *p = &ps->pool[i];
		struct kn_error err;

		if (!why[i][0])
			continue;
		decide(s, p, why[i], now);
		if (add[i] > 0) {
			if (p->provider->scale_up(s, p, add[i], &err) < 0)
				kn_log(KN_LOG_ERROR, "pool %s: scaling up: %s",
				       p->spec.name, err.message);
			added = true;
		}
	}
	for (size_t k = 0; k < n_doomed; k++) {
		int n = nodes_find(s, doomed[k]);
		struct pool *p = n >= 0 ? pool_of_node(s, (size_t)n) : NULL;
		struct kn_error err;
		char object[96];

		/* The server keeps a node: its routes name one. */
		if (!p || core_node_count(s) <= 1)
			continue;
		if (p->provider->delete_node(s, p, doomed[k], &err) < 0) {
			kn_log(KN_LOG_ERROR, "pool %s: deleting %s: %s", p->spec.name,
			       doomed[k], err.message);
			continue;
		}
		snprintf(object, sizeof(object), "node/%s", doomed[k]);
		core_audit(s, NULL, "node.remove", object, "ok",
			   "idle: scaled down");
	}
	if (added)
		jobs_wake(s);
	jobs_pending_free(pending, n_pending);
	KN_FREE_ALL(aj, an, an_node, remove, doomed);
	kn_timer_arm(ps->timer, POOLS_TICK_MS);
out_early:
	KN_FREE_ALL(ap, why, add);
}

/* Arm the autoscaler's timer once the loop exists. */
void pools_run(struct server *s)
{
	struct pools *ps = pools_state(s);

	if (!ps)
		return;
	ps->timer = kn_timer_new(core_loop(s), pools_tick, s);
	pool_azure_run(s);
	kn_timer_arm(ps->timer, POOLS_TICK_MS);
}

void pools_stop(struct server *s)
{
	struct pools *ps = pools_state(s);

	if (!ps)
		return;
	kn_timer_free(ps->timer);
	/* Calls in flight run on; their nodes are unknown to the next
	   start (docs/capacity.md). */
	while (ps->ops) {
		struct pool_op *op = ps->ops;

		ps->ops = op->next;
		pool_op_free(op, false);
	}
	for (size_t i = 0; i < ps->n; i++) {
		rolling_free(ps->pool[i].rolling);
		pool_release(&ps->pool[i]);
	}
	KN_FREE_ALL(ps->pool, ps->members, ps);
}

/* ---- rolling maintenance ---- */

#define ROLLING_TICK_MS 200

enum rolling_step {
	STEP_CORDON,    /* next: cordon the node */
	STEP_MOVE,      /* move deployment replicas off it, one at a time */
	STEP_DRAIN,     /* evict preemptible jobs, wait until empty */
	STEP_PATCH,     /* the command runs */
	STEP_HEALTH,    /* the health checks run */
};

static const char *const STEP_NAMES[] = {
	"cordon", "moving replicas", "draining", "patching", "health checks",
};

struct rolling {
	struct server *s;
	struct pool *pool;
	char *command;
	char actor[128];
	char (*nodes)[64];
	size_t n_nodes, at;       /* the node being maintained */
	enum rolling_step step;
	char state[16];           /* running, succeeded, failed */
	char error[512];
	int64_t started_at, ended_at;
	/* STEP_MOVE: the surge replica taking the place of one on the
	   node (deploy_surge), since when, and what it waits on. */
	int64_t surge_job;
	int64_t surge_started;
	int64_t surge_timeout_ms;
	char waiting[512];
	char *dir;                /* the patch command's files */
	/* STEP_HEALTH, run on a worker: copies of what it reads. */
	bool health_busy;
	char *health_root, *health_kernel_log;
	struct kn_sku sku;
	bool have_sku;
	int health_failed;
	char health_first[700];
	struct kn_timer *timer;
};

static void rolling_free(struct rolling *r)
{
	if (!r)
		return;
	kn_timer_free(r->timer);
	KN_FREE_ALL(r->command, r->nodes);
	if (r->dir)
		kn_rm_rf(r->dir);
	KN_FREE_ALL(r->dir, r->health_root, r->health_kernel_log, r);
}

static void rolling_end(struct rolling *r, const char *error)
{
	struct kn_audit a;
	struct kn_error err;
	char object[96];

	/* A surge still waiting is not needed: the old replica stays. */
	if (r->surge_job)
		deploy_surge_cancel(r->s, r->surge_job);
	r->surge_job = 0;
	r->waiting[0] = '\0';
	kn_strlcpy(r->state, error ? "failed" : "succeeded", sizeof(r->state));
	kn_strlcpy(r->error, error ? error : "", sizeof(r->error));
	r->ended_at = kn_now_ms();
	kn_log(error ? KN_LOG_ERROR : KN_LOG_INFO,
	       "rolling maintenance of pool %s: %s", r->pool->spec.name,
	       error ? error : "every node done");
	snprintf(object, sizeof(object), "pool/%s", r->pool->spec.name);
	memset(&a, 0, sizeof(a));
	a.actor = r->actor;
	a.role = "operator";
	a.action = "pool.rolling.end";
	a.object = object;
	a.outcome = error ? "failed" : "ok";
	a.detail = (char *)error;
	if (kn_store_audit_insert(core_store(r->s), &a, &err) < 0)
		kn_log(KN_LOG_WARN, "auditing: %s", err.message);
	feed_publish(r->s, "pool.rolling",
		     json_pack("{s:s, s:s, s:o}", "pool", r->pool->spec.name,
			       "state", r->state, "error",
			       error ? json_string(error) : json_null()));
}

static void health_work(void *arg)
{
	struct rolling *r = arg;
	struct kn_health_config cfg = {0};

	cfg.root = r->health_root;
	cfg.kernel_log = r->health_kernel_log;
	cfg.sku = r->have_sku ? &r->sku : NULL;
	r->health_failed = kn_health_run_here(&cfg, r->health_first,
					      sizeof(r->health_first));
}

static void health_done(void *arg, bool ran)
{
	struct rolling *r = arg;

	r->health_busy = false;
	if (!ran || core_closing(r->s))
		return;
	if (r->health_failed) {
		char why[512];

		snprintf(why, sizeof(why),
			 "node %s failed its health checks after the patch "
			 "(%.300s); it stays drained",
			 r->nodes[r->at], r->health_first);
		rolling_end(r, why);
		return;
	}
	kn_timer_arm(r->timer, 0);
}

/*
 * The surge replica r waits on for node name: true while it is on its way
 * (or the rolling ended: it did not serve in time); false once it took
 * its replica's place or is gone, r->surge_job then 0.
 */
static bool surge_pending(struct rolling *r, const char *name)
{
	struct server *s = r->s;
	int64_t now = kn_now_ms();
	int rc = deploy_surge_state(s, r->surge_job, r->waiting,
				    sizeof(r->waiting));
	char why[512];

	if (rc == 0 && now - r->surge_started >= r->surge_timeout_ms) {
		char limit[32];

		kn_format_duration(r->surge_timeout_ms, limit, sizeof(limit));
		snprintf(why, sizeof(why),
			 "node %s: no surge replica served within "
			 "--surge-timeout %s (%.300s); it stays cordoned and "
			 "its replicas keep serving",
			 name, limit, r->waiting);
		rolling_end(r, why);
		return true;
	}
	if (rc == 0)
		return true;
	if (rc < 0) {
		/* Its replica, if still there, gets another. */
		kn_log(KN_LOG_WARN, "rolling maintenance of pool %s: %s",
		       r->pool->spec.name, r->waiting);
		deploy_surge_cancel(s, r->surge_job);
	}
	r->surge_job = 0;
	r->waiting[0] = '\0';
	return false;
}

/* One node's steps; true when it is done (uncordoned) or gone. */
static bool rolling_node(struct rolling *r, const char *name, int i)
{
	struct server *s = r->s;
	struct kn_error err;
	char why[512], reason[192];

	snprintf(reason, sizeof(reason), "rolling maintenance of pool %s",
		 r->pool->spec.name);
	switch (r->step) {
	case STEP_CORDON:
		if (nodes_set_state(s, NULL, name, "cordoned", reason, &err) <
		    0) {
			rolling_end(r, err.message);
			return false;
		}
		r->step = STEP_MOVE;
		r->surge_job = 0;
		/* fall through */
	case STEP_MOVE: {
		int64_t replica;

		if (r->surge_job && surge_pending(r, name))
			return false;
		/* Each replica there gets a surge replica elsewhere first; it
		 * retires the old one once it serves. */
		replica = core_node_replica(s, (size_t)i);
		if (replica) {
			if (deploy_surge(s, replica, &r->surge_job, &err) <
			    0) {
				rolling_end(r, err.message);
				return false;
			}
			r->surge_started = kn_now_ms();
			return false;
		}
		r->step = STEP_DRAIN;
		if (nodes_set_state(s, NULL, name, "draining", reason, &err) <
		    0) {
			rolling_end(r, err.message);
			return false;
		}
	}
		/* fall through */
	case STEP_DRAIN: {
		char *cmd[4], *extra[3];
		int rc;

		if (core_node_busy(s, (size_t)i))
			return false;
		free(r->dir);
		r->dir = kn_asprintf("%s/pools/rolling-%s", core_home(s), name);
		cmd[0] = "/bin/sh";
		cmd[1] = "-c";
		cmd[2] = r->command;
		cmd[3] = NULL;
		extra[0] = kn_asprintf("KILN_NODE=%s", name);
		extra[1] = kn_asprintf("KILN_POOL=%s", r->pool->spec.name);
		extra[2] = NULL;
		rc = pool_run_in_background(r->dir, cmd, extra, &err);
		KN_FREE_ALL(extra[0], extra[1]);
		if (rc < 0) {
			rolling_end(r, err.message);
			return false;
		}
		r->step = STEP_PATCH;
		return false;
	}
	case STEP_PATCH: {
		char *out = NULL, *errline = NULL;
		int status;

		if (!pool_background_done(r->dir, &status, &out, &errline))
			return false;
		if (status != 0)
			snprintf(why, sizeof(why),
				 "the patch command exited %d on node %s: "
				 "%.200s; it stays drained",
				 status, name, errline);
		KN_FREE_ALL(out, errline);
		kn_rm_rf(r->dir);
		if (status != 0) {
			rolling_end(r, why);
			return false;
		}
		r->step = STEP_HEALTH;
		r->health_busy = true;
		kn_workers_submit(core_workers(s), health_work, health_done, r);
		return false;
	}
	case STEP_HEALTH:
		if (r->health_busy)
			return false;
		if (nodes_set_state(s, NULL, name, "ready", "", &err) < 0) {
			rolling_end(r, err.message);
			return false;
		}
		return true;
	}
	return false;
}

static void rolling_tick(void *arg)
{
	struct rolling *r = arg;

	while (!core_closing(r->s) && !strcmp(r->state, "running")) {
		const char *name = r->nodes[r->at];
		int i = nodes_find(r->s, name);

		/* A node the autoscaler removed meanwhile needs nothing. */
		if (i >= 0 && !rolling_node(r, name, i)) {
			if (!strcmp(r->state, "running") &&
			    !(r->step == STEP_HEALTH && r->health_busy))
				kn_timer_arm(r->timer, ROLLING_TICK_MS);
			return;
		}
		r->step = STEP_CORDON;
		if (++r->at == r->n_nodes)
			rolling_end(r, NULL);
	}
}

/*
 * Start rolling maintenance of pool p as c: command on each node in
 * turn, surge_timeout_ms the wait for a surge node. -ECONFLICT while one
 * is running.
 */
int pools_rolling_start(struct server *s, struct pool *p,
			const struct caller *c, const char *command,
			int64_t surge_timeout_ms, struct kn_error *err)
{
	struct rolling *r;
	char object[96];
	int rc;

	if (p->rolling && !strcmp(p->rolling->state, "running")) {
		return kn_errorf(err, KN_ECONFLICT, "pool",
				 "pool %s: rolling maintenance is already "
				 "running (node %s)", p->spec.name,
				 p->rolling->nodes[p->rolling->at]);
	}
	r = kn_xcalloc(1, sizeof(*r));
	r->s = s;
	r->pool = p;
	if (core_config(s)->health_sku && *core_config(s)->health_sku) {
		rc = kn_sku_load(core_config(s)->health_sku_file, core_config(s)->health_sku,
				 &r->sku, err);
		if (rc < 0) {
			free(r);
			return rc;
		}
		r->have_sku = true;
	}
	r->command = kn_xstrdup(command);
	r->surge_timeout_ms = surge_timeout_ms;
	kn_strlcpy(r->actor, c->name, sizeof(r->actor));
	r->health_root = kn_xstrdup(core_config(s)->health_root ? core_config(s)->health_root
						       : "/");
	r->health_kernel_log = core_config(s)->health_kernel_log
				       ? kn_xstrdup(core_config(s)->health_kernel_log)
				       : NULL;
	r->nodes = kn_xcalloc(core_node_count(s), sizeof(*r->nodes));
	for (size_t n = 0; n < core_node_count(s); n++)
		if (pool_of_node(s, n) == p)
			kn_strlcpy(r->nodes[r->n_nodes++], core_node_name(s, n),
				   sizeof(r->nodes[0]));
	kn_strlcpy(r->state, r->n_nodes ? "running" : "succeeded",
		   sizeof(r->state));
	r->started_at = kn_now_ms();
	r->ended_at = r->n_nodes ? 0 : r->started_at;
	r->timer = kn_timer_new(core_loop(s), rolling_tick, r);
	rolling_free(p->rolling);
	p->rolling = r;
	snprintf(object, sizeof(object), "pool/%s", p->spec.name);
	core_audit(s, c, "pool.rolling", object, "ok", r->command);
	kn_log(KN_LOG_INFO, "rolling maintenance of pool %s (%zu nodes): %s",
	       p->spec.name, r->n_nodes, r->command);
	if (r->n_nodes)
		kn_timer_arm(r->timer, 0);
	return 0;
}

json_t *pools_rolling_json(const struct rolling *r)
{
	json_t *done = json_array();

	for (size_t k = 0; k < r->at && k < r->n_nodes; k++)
		json_array_append_new(done, json_string(r->nodes[k]));
	return json_pack(
		"{s:f, s:o, s:s, s:s, s:s, s:o, s:o, s:o, s:I, s:I, s:I, s:o}",
		"surge_timeout_s", (double)r->surge_timeout_ms / 1000.0,
		"waiting", r->waiting[0] ? json_string(r->waiting) : json_null(),
		"pool", r->pool->spec.name, "command", r->command, "state", r->state, "node",
		!strcmp(r->state, "succeeded") ? json_null()
					       : json_string(r->nodes[r->at]),
		"step",
		!strcmp(r->state, "succeeded") ? json_null()
					       : json_string(STEP_NAMES[r->step]),
		"done", done, "nodes", (json_int_t)r->n_nodes, "started_at_ms",
		(json_int_t)r->started_at, "ended_at_ms",
		(json_int_t)r->ended_at, "error",
		r->error[0] ? json_string(r->error) : json_null());
}

struct pool *pools_pool_named(struct server *s, const char *name)
{
	for (size_t i = 0; pools_state(s) && i < pools_state(s)->n; i++)
		if (!strcmp(pools_state(s)->pool[i].spec.name, name))
			return &pools_state(s)->pool[i];
	return NULL;
}


