/*
 * Node pools: groups of like nodes (one VM size, spot or on demand, some
 * zones) that grow when queued work fits no node and shrink when nodes
 * stay idle (docs/capacity.md). A provider makes and deletes the nodes;
 * the decision is kn_autoscale_plan's (src/sched), taken on a timer.
 *
 * The server's node arrays (s->nodes, s->cluster.nodes) grow and shrink
 * here. A node is removed only when no run is bound to it, and every
 * binding's node index past it moves down one, so no index dangles.
 */
#include "internal.h"

#include "cost/cost.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How often the autoscaler looks. */
#define POOLS_TICK_MS 500
#define POOL_NAME_MAX 40

struct pool;

/*
 * A provider: where a pool's nodes come from. scale_up asks for n more
 * nodes (they join through pool_node_add, now or later; the pool counts
 * them as provisioning until then); delete takes one empty node away.
 */
struct pool_provider_ops {
	const char *name;
	int (*scale_up)(struct server *s, struct pool *p, int n,
			struct kn_error *err);
	int (*delete_node)(struct server *s, struct pool *p, const char *node,
			   struct kn_error *err);
};

struct pool {
	char name[POOL_NAME_MAX + 1];
	char *sku;
	char *gpus;          /* the simulated devices of each node */
	char **zones;        /* round-robin over new nodes; may be empty */
	size_t n_zones;
	char *labels;        /* extra "K=V K=V", or "" */
	bool spot;
	int min, max;
	int64_t scale_down_delay_ms;
	const struct pool_provider_ops *provider;
	int next_index;      /* the N of the next POOL-N */
	int provisioning;
	char decision[KN_AUTOSCALE_WHY_LEN]; /* the last change and why */
	int64_t decision_at;
	struct kn_sched_node shape;          /* a new node, for the plan */
	struct kn_device_set shape_devices;
};

struct pools {
	struct pool *pool;
	size_t n;
	struct kn_timer *timer;
	char blocked[KN_AUTOSCALE_WHY_LEN]; /* work no pool can hold */
};

/* ---- parsing --pool ---- */

static bool pool_name_ok(const char *name)
{
	size_t len = strlen(name);

	if (len == 0 || len > POOL_NAME_MAX)
		return false;
	for (const char *p = name; *p; p++)
		if (!(isalnum((unsigned char)*p) || *p == '-' || *p == '_'))
			return false;
	return true;
}

static int parse_count(const char *text, const char *key, const char *value,
		       int *out, struct kn_error *err)
{
	char *end;
	long n;

	errno = 0;
	n = strtol(value, &end, 10);
	if (errno || end == value || *end || n < 0 || n > 1000)
		return kn_errorf(err, KN_EINVAL, "pool",
				 "--pool \"%s\": %s: \"%s\" is not a number in "
				 "0..1000",
				 text, key, value);
	*out = (int)n;
	return 0;
}

static void pool_release(struct pool *p)
{
	free(p->sku);
	free(p->gpus);
	for (size_t i = 0; i < p->n_zones; i++)
		free(p->zones[i]);
	free(p->zones);
	free(p->labels);
	free(p->shape.devices);
	kn_device_set_release(&p->shape_devices);
}

static const struct pool_provider_ops sim_provider;

/* One option after NAME SKU GPUS. */
static int parse_option(struct pool *p, const char *text, char *item,
			struct kn_buf *labels, bool *has_max,
			struct kn_error *err)
{
	char *eq = strchr(item, '=');
	const char *value = eq ? eq + 1 : NULL;

	if (!strcmp(item, "spot")) {
		p->spot = true;
		return 0;
	}
	if (!eq || eq == item)
		return kn_errorf(err, KN_EINVAL, "pool",
				 "--pool \"%s\": \"%s\" is not KEY=VALUE or "
				 "spot",
				 text, item);
	*eq = '\0';
	if (!strcmp(item, "min"))
		return parse_count(text, "min", value, &p->min, err);
	if (!strcmp(item, "max")) {
		*has_max = true;
		return parse_count(text, "max", value, &p->max, err);
	}
	if (!strcmp(item, "scale-down-delay")) {
		if (kn_parse_duration(value, &p->scale_down_delay_ms) < 0)
			return kn_errorf(err, KN_EINVAL, "pool",
					 "--pool \"%s\": scale-down-delay: "
					 "\"%s\" is not a duration (e.g. 10m)",
					 text, value);
		return 0;
	}
	if (!strcmp(item, "provider")) {
		if (strcmp(value, "sim") != 0)
			return kn_errorf(err, KN_EINVAL, "pool",
					 "--pool \"%s\": provider: \"%s\" is "
					 "not one of sim",
					 text, value);
		p->provider = &sim_provider;
		return 0;
	}
	if (!strcmp(item, "zones")) {
		char *copy = kn_xstrdup(value), *save = NULL;

		for (char *z = strtok_r(copy, ",", &save); z;
		     z = strtok_r(NULL, ",", &save)) {
			p->zones = kn_xrealloc(p->zones, (p->n_zones + 1) *
								 sizeof(*p->zones));
			p->zones[p->n_zones++] = kn_xstrdup(z);
		}
		free(copy);
		return 0;
	}
	if (!strcmp(item, "pool") || !strcmp(item, "sku") ||
	    !strcmp(item, "pricing") || !strcmp(item, "zone"))
		return kn_errorf(err, KN_EINVAL, "pool",
				 "--pool \"%s\": label %s= is the pool's own "
				 "(from its name, SKU, spot and zones)",
				 text, item);
	kn_buf_printf(labels, " %s=%s", item, value);
	return 0;
}

/* "NAME SKU GPUS [min=N] [max=N] [spot] [zones=a,b]
   [scale-down-delay=DUR] [provider=sim] [K=V ...]" */
static int pool_parse(const char *text, struct pool *p, struct kn_error *err)
{
	char *copy = kn_xstrdup(text), *save = NULL, *name, *sku, *gpus;
	struct kn_buf labels;
	bool has_max = false;
	int rc = 0;

	memset(p, 0, sizeof(*p));
	kn_buf_init(&labels, 4096);
	p->min = 1;
	p->scale_down_delay_ms = 10 * 60 * 1000;
	p->provider = &sim_provider;
	p->next_index = 1;
	name = strtok_r(copy, " \t", &save);
	sku = name ? strtok_r(NULL, " \t", &save) : NULL;
	gpus = sku ? strtok_r(NULL, " \t", &save) : NULL;
	if (!gpus) {
		rc = kn_errorf(err, KN_EINVAL, "pool",
			       "--pool \"%s\": want \"NAME SKU GPUS [min=N] "
			       "[max=N] [spot] [zones=a,b] "
			       "[scale-down-delay=10m] [K=V ...]\", e.g. "
			       "\"a100 Standard_NC24ads_A100_v4 1xA100-80GB "
			       "max=4\"",
			       text);
		goto out;
	}
	if (!pool_name_ok(name)) {
		rc = kn_errorf(err, KN_EINVAL, "pool",
			       "--pool \"%s\": name: \"%s\" is not 1..%d of "
			       "A-Z a-z 0-9 - _",
			       text, name, POOL_NAME_MAX);
		goto out;
	}
	kn_strlcpy(p->name, name, sizeof(p->name));
	p->sku = kn_xstrdup(sku);
	p->gpus = kn_xstrdup(gpus);
	rc = kn_devices_simulated(gpus, &p->shape_devices, err);
	if (rc < 0) {
		char why[sizeof(err->message)];

		kn_strlcpy(why, err->message, sizeof(why));
		rc = kn_errorf(err, KN_EINVAL, "pool",
			       "--pool \"%s\": GPUS: %s", text, why);
		goto out;
	}
	for (char *item = strtok_r(NULL, " \t", &save); rc == 0 && item;
	     item = strtok_r(NULL, " \t", &save))
		rc = parse_option(p, text, item, &labels, &has_max, err);
	if (rc < 0)
		goto out;
	if (!has_max)
		p->max = p->min > 10 ? p->min : 10;
	if (p->max < 1 || p->min > p->max) {
		rc = kn_errorf(err, KN_EINVAL, "pool",
			       "--pool \"%s\": max: %d is below min %d or 1",
			       text, p->max, p->min);
		goto out;
	}
	p->labels = kn_xstrdup(labels.data ? labels.data : "");
out:
	kn_buf_release(&labels);
	free(copy);
	return rc;
}

/* ---- nodes ---- */

/* cluster.nodes[i].name points into nodes[i]: after a move, again. */
static void nodes_repoint(struct server *s)
{
	for (size_t i = 0; i < s->cluster.n_nodes; i++)
		s->cluster.nodes[i].name = s->nodes[i].name;
}

static struct pool *node_pool(struct server *s, size_t i)
{
	return s->nodes[i].pool ? &s->pools->pool[s->nodes[i].pool - 1]
				: NULL;
}

static void pool_audit(struct server *s, const char *action,
		       const char *object, const char *detail)
{
	struct kn_audit a;
	struct kn_error err;

	memset(&a, 0, sizeof(a));
	a.actor = "system";
	a.role = "admin";
	a.action = (char *)action;
	a.object = (char *)object;
	a.outcome = "ok";
	a.detail = (char *)detail;
	if (kn_store_audit_insert(s->store, &a, &err) < 0)
		kn_log(KN_LOG_WARN, "auditing %s: %s", action, err.message);
}

/*
 * Add node name to pool p in state (a restarted server keeps a cordon);
 * running marks a node made after start-up, whose ledger interval opens
 * here rather than in cost_start.
 */
static int pool_node_add(struct server *s, struct pool *p, const char *name,
			 const char *state, const char *reason, bool running,
			 struct kn_error *err)
{
	size_t n = s->cluster.n_nodes;
	int index = p->next_index;
	struct server_node *node;
	char *labels;
	int rc;

	s->nodes = kn_xrealloc(s->nodes, (n + 1) * sizeof(*s->nodes));
	s->cluster.nodes =
		kn_xrealloc(s->cluster.nodes, (n + 1) * sizeof(*s->cluster.nodes));
	node = &s->nodes[n];
	memset(node, 0, sizeof(*node));
	memset(&s->cluster.nodes[n], 0, sizeof(s->cluster.nodes[n]));
	nodes_repoint(s);
	rc = kn_devices_simulated(p->gpus, &node->devices, err);
	if (rc < 0)
		return rc;
	kn_strlcpy(node->name, name, sizeof(node->name));
	node->pool = (size_t)(p - s->pools->pool) + 1;
	kn_strlcpy(node->state, state, sizeof(node->state));
	kn_strlcpy(node->reason, reason ? reason : "", sizeof(node->reason));
	s->cluster.n_nodes = n + 1;
	setup_sched_node(s, n);
	s->cluster.nodes[n].schedulable = strcmp(state, "ready") == 0;
	sscanf(name + strlen(p->name), "-%d", &index);
	labels = kn_asprintf("pool=%s sku=%s pricing=%s%s%s%s", p->name, p->sku,
			     p->spot ? "spot" : "on_demand",
			     p->n_zones ? " zone=" : "",
			     p->n_zones ? p->zones[(size_t)(index - 1) %
						   p->n_zones]
					: "",
			     p->labels);
	rc = setup_labels(s, n, labels, " ", "--pool", err);
	free(labels);
	if (rc == 0 && running) {
		rc = kn_store_begin(s->store, err);
		if (rc == 0)
			rc = nodes_save(s, n, err);
		if (rc == 0)
			rc = kn_store_node_state_open(s->store, name, state,
						      kn_now_ms(), err);
		if (rc == 0)
			rc = kn_store_commit(s->store, err);
		else
			kn_store_rollback(s->store);
	}
	if (rc < 0)
		return rc;
	if (index >= p->next_index)
		p->next_index = index + 1;
	if (running)
		feed_publish(s, "node.added",
			     json_pack("{s:s, s:s}", "node", name, "pool",
				       p->name));
	kn_log(KN_LOG_INFO, "pool %s: node %s up (%s, %s)", p->name, name,
	       p->gpus, p->spot ? "spot" : "on demand");
	return 0;
}

static bool node_busy(const struct server *s, size_t i)
{
	for (const struct run *r = s->runs; r; r = r->next)
		for (int t = 0; t < r->n_tasks; t++)
			if (r->bindings[t].node == i)
				return true;
	return false;
}

/*
 * Take node i out of the server: only an empty one. Its row stays in the
 * store as "removed" (the ledger prices its past by its labels), its
 * state interval ends, and bindings past it move down one.
 */
static int pool_node_remove(struct server *s, size_t i, struct kn_error *err)
{
	struct server_node *node = &s->nodes[i];
	char name[sizeof(node->name)];
	int rc;

	if (node_busy(s, i))
		return kn_errorf(err, KN_ECONFLICT, "node",
				 "node %s still runs tasks", node->name);
	kn_strlcpy(name, node->name, sizeof(name));
	kn_strlcpy(node->state, "removed", sizeof(node->state));
	kn_strlcpy(node->reason, "scaled down", sizeof(node->reason));
	rc = kn_store_begin(s->store, err);
	if (rc == 0)
		rc = nodes_save(s, i, err);
	if (rc == 0)
		rc = kn_store_node_state_close(s->store, name, kn_now_ms(), err);
	if (rc == 0)
		rc = kn_store_commit(s->store, err);
	if (rc < 0) {
		kn_store_rollback(s->store);
		kn_strlcpy(node->state, "ready", sizeof(node->state));
		node->reason[0] = '\0';
		return rc;
	}
	free(s->cluster.nodes[i].devices);
	free(node->labels);
	free(node->labels_text);
	kn_device_set_release(&node->devices);
	memmove(&s->nodes[i], &s->nodes[i + 1],
		(s->cluster.n_nodes - i - 1) * sizeof(*s->nodes));
	memmove(&s->cluster.nodes[i], &s->cluster.nodes[i + 1],
		(s->cluster.n_nodes - i - 1) * sizeof(*s->cluster.nodes));
	s->cluster.n_nodes--;
	nodes_repoint(s);
	for (struct run *r = s->runs; r; r = r->next)
		for (int t = 0; t < r->n_tasks; t++)
			if (r->bindings[t].node > i)
				r->bindings[t].node--;
	feed_publish(s, "node.removed", json_pack("{s:s}", "node", name));
	return 0;
}

/* ---- the sim provider: nodes in this process ---- */

static int sim_scale_up(struct server *s, struct pool *p, int n,
			struct kn_error *err)
{
	for (int k = 0; k < n; k++) {
		char name[64];
		int rc;

		snprintf(name, sizeof(name), "%s-%d", p->name, p->next_index);
		rc = pool_node_add(s, p, name, "ready", NULL, true, err);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int sim_delete(struct server *s, struct pool *p, const char *node,
		      struct kn_error *err)
{
	int i = nodes_find(s, node);

	(void)p;
	if (i < 0)
		return kn_errorf(err, KN_ENOTFOUND, "node", "node %s not found",
				 node);
	return pool_node_remove(s, (size_t)i, err);
}

static const struct pool_provider_ops sim_provider = {
	.name = "sim",
	.scale_up = sim_scale_up,
	.delete_node = sim_delete,
};

/* ---- start-up ---- */

/* The pool a stored node row belongs to (label pool=), or NULL. */
static struct pool *row_pool(struct server *s, const struct kn_node_row *row)
{
	json_t *labels = json_loads(row->labels_json ? row->labels_json : "{}",
				    0, NULL);
	const char *name = json_string_value(json_object_get(labels, "pool"));
	struct pool *found = NULL;

	for (size_t i = 0; name && i < s->pools->n; i++)
		if (!strcmp(s->pools->pool[i].name, name))
			found = &s->pools->pool[i];
	json_decref(labels);
	return found;
}

static void shape_build(struct pool *p)
{
	struct kn_sched_node *sn = &p->shape;

	sn->name = p->name;
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
	int rc = kn_store_node_list(s->store, &rows, &n_rows, err);

	for (size_t k = 0; rc == 0 && k < n_rows; k++) {
		struct pool *p = row_pool(s, &rows[k]);

		if (!p || !strcmp(rows[k].state, "removed") ||
		    nodes_find(s, rows[k].name) >= 0)
			continue;
		rc = pool_node_add(s, p, rows[k].name, rows[k].state,
				   rows[k].reason, false, err);
	}
	kn_node_list_free(rows, n_rows);
	for (size_t i = 0; rc == 0 && i < s->pools->n; i++) {
		struct pool *p = &s->pools->pool[i];
		int have = 0;

		for (size_t n = 0; n < s->cluster.n_nodes; n++)
			have += node_pool(s, n) == p;
		while (rc == 0 && have++ < p->min) {
			char name[64];

			snprintf(name, sizeof(name), "%s-%d", p->name,
				 p->next_index);
			rc = pool_node_add(s, p, name, "ready", NULL, false, err);
		}
	}
	for (size_t n = 0; rc == 0 && n < s->cluster.n_nodes; n++)
		if (s->nodes[n].pool)
			rc = nodes_save(s, n, err);
	return rc;
}

int pools_start(struct server *s, struct kn_error *err)
{
	struct pools *ps;
	int rc = 0;

	if (!s->cfg.n_pools)
		return 0;
	ps = kn_xcalloc(1, sizeof(*ps));
	ps->pool = kn_xcalloc(s->cfg.n_pools, sizeof(*ps->pool));
	s->pools = ps;
	for (size_t i = 0; rc == 0 && i < s->cfg.n_pools; i++) {
		rc = pool_parse(s->cfg.pools[i], &ps->pool[i], err);
		ps->n = i + 1;
		for (size_t k = 0; rc == 0 && k < i; k++)
			if (!strcmp(ps->pool[k].name, ps->pool[i].name))
				rc = kn_errorf(err, KN_EINVAL, "pool",
					       "--pool: pool %s is given twice",
					       ps->pool[i].name);
		for (size_t k = 0; rc == 0 && k < s->cluster.n_nodes; k++)
			if (!strncmp(s->nodes[k].name, ps->pool[i].name,
				     strlen(ps->pool[i].name)) &&
			    s->nodes[k].name[strlen(ps->pool[i].name)] == '-')
				rc = kn_errorf(err, KN_EINVAL, "pool",
					       "--pool %s: node %s would clash "
					       "with its nodes' names",
					       ps->pool[i].name,
					       s->nodes[k].name);
		if (rc == 0)
			shape_build(&ps->pool[i]);
	}
	if (rc == 0)
		rc = pools_adopt(s, err);
	if (rc == 0 && s->cluster.n_nodes == 0)
		rc = kn_errorf(err, KN_EINVAL, "pool",
			       "--pool: every pool has min=0, so the server "
			       "would start with no node: give one min=1 or "
			       "add a --sim-node");
	return rc;
}

/* ---- the autoscaler ---- */

static double pool_gpu_price(struct server *s, const struct pool *p)
{
	const struct kn_vm_size *size =
		s->catalog ? kn_catalog_find(s->catalog, p->sku) : NULL;
	double usd;

	if (!size || !kn_vm_size_price(size, p->spot ? KN_PRICING_SPOT
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
	kn_log(KN_LOG_INFO, "pool %s: %s", p->name, why);
	snprintf(object, sizeof(object), "pool/%s", p->name);
	pool_audit(s, why[0] == '+' ? "pool.scale_up" : "pool.scale_down",
		   object, why);
	feed_publish(s, "pool.scale",
		     json_pack("{s:s, s:s}", "pool", p->name, "why", why));
}

static void pools_tick(void *arg)
{
	struct server *s = arg;
	struct pools *ps = s->pools;
	int64_t now = kn_now_ms();
	struct kn_autoscale_pool *ap = kn_xcalloc(ps->n, sizeof(*ap));
	struct kn_autoscale_job *aj;
	struct kn_autoscale_node *an;
	struct pending_job *pending = NULL;
	size_t n_pending, n_an = 0, n_nodes = s->cluster.n_nodes;
	size_t *an_node;
	char (*why)[KN_AUTOSCALE_WHY_LEN] = kn_xcalloc(ps->n, sizeof(*why));
	char blocked[KN_AUTOSCALE_WHY_LEN], (*doomed)[64];
	int *add = kn_xcalloc(ps->n, sizeof(*add));
	bool *remove, added = false;
	size_t n_doomed = 0;

	if (s->closing)
		goto out_early;
	an = kn_xcalloc(n_nodes ? n_nodes : 1, sizeof(*an));
	an_node = kn_xcalloc(n_nodes ? n_nodes : 1, sizeof(*an_node));
	remove = kn_xcalloc(n_nodes ? n_nodes : 1, sizeof(*remove));
	doomed = kn_xcalloc(n_nodes ? n_nodes : 1, sizeof(*doomed));
	for (size_t i = 0; i < ps->n; i++) {
		ap[i].name = ps->pool[i].name;
		ap[i].spot = ps->pool[i].spot;
		ap[i].gpu_hour_price = pool_gpu_price(s, &ps->pool[i]);
		ap[i].min = ps->pool[i].min;
		ap[i].max = ps->pool[i].max;
		ap[i].provisioning = ps->pool[i].provisioning;
		ap[i].scale_down_delay_ms = ps->pool[i].scale_down_delay_ms;
		ap[i].shape = &ps->pool[i].shape;
	}
	for (size_t n = 0; n < n_nodes; n++) {
		struct server_node *node = &s->nodes[n];

		/* Only a ready node counts as idle: a cordoned one is an
		   operator's, not the autoscaler's. */
		if (node_busy(s, n) || strcmp(node->state, "ready") != 0)
			node->idle_since = 0;
		else if (!node->idle_since)
			node->idle_since = now;
		if (!node->pool)
			continue;
		ap[node->pool - 1].current++;
		an[n_an].pool = node->pool - 1;
		an[n_an].idle_since = node->idle_since;
		an_node[n_an++] = n;
	}
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
			kn_strlcpy(doomed[n_doomed++], s->nodes[an_node[k]].name,
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
				       p->name, err.message);
			added = true;
		}
	}
	for (size_t k = 0; k < n_doomed; k++) {
		int n = nodes_find(s, doomed[k]);
		struct pool *p = n >= 0 ? node_pool(s, (size_t)n) : NULL;
		struct kn_error err;
		char object[96];

		/* The server keeps a node: its routes name one. */
		if (!p || s->cluster.n_nodes <= 1)
			continue;
		if (p->provider->delete_node(s, p, doomed[k], &err) < 0) {
			kn_log(KN_LOG_ERROR, "pool %s: deleting %s: %s", p->name,
			       doomed[k], err.message);
			continue;
		}
		snprintf(object, sizeof(object), "node/%s", doomed[k]);
		pool_audit(s, "node.remove", object, "idle: scaled down");
	}
	if (added)
		jobs_wake(s);
	jobs_pending_free(pending, n_pending);
	free(aj);
	free(an);
	free(an_node);
	free(remove);
	free(doomed);
	kn_timer_arm(ps->timer, POOLS_TICK_MS);
out_early:
	free(ap);
	free(why);
	free(add);
}

void pools_run(struct server *s)
{
	if (!s->pools)
		return;
	s->pools->timer = kn_timer_new(s->loop, pools_tick, s);
	kn_timer_arm(s->pools->timer, POOLS_TICK_MS);
}

void pools_free(struct server *s)
{
	if (!s->pools)
		return;
	kn_timer_free(s->pools->timer);
	for (size_t i = 0; i < s->pools->n; i++)
		pool_release(&s->pools->pool[i]);
	free(s->pools->pool);
	free(s->pools);
	s->pools = NULL;
}

/* ---- GET /v1/pools ---- */

static json_t *pool_json(struct server *s, const struct pool *p, int64_t now)
{
	json_t *nodes = json_array(), *zones = json_array();
	double price = pool_gpu_price(s, p);
	int current = 0;

	for (size_t i = 0; i < p->n_zones; i++)
		json_array_append_new(zones, json_string(p->zones[i]));
	for (size_t n = 0; n < s->cluster.n_nodes; n++) {
		const struct server_node *node = &s->nodes[n];

		if (node_pool(s, n) != p)
			continue;
		current++;
		json_array_append_new(
			nodes,
			json_pack("{s:s, s:s, s:o}", "name", node->name, "state",
				  node->state, "idle_s",
				  node->idle_since
					  ? json_real((double)(now -
							       node->idle_since) /
						      1000.0)
					  : json_null()));
	}
	return json_pack(
		"{s:s, s:s, s:s, s:s, s:s, s:o, s:i, s:i, s:i, s:i, s:i, s:f, "
		"s:o, s:o, s:o}",
		"name", p->name, "provider", p->provider->name, "sku", p->sku,
		"gpus", p->gpus, "pricing", p->spot ? "spot" : "on_demand",
		"zones", zones, "min", p->min, "max", p->max, "current", current,
		"provisioning", p->provisioning, "desired",
		current + p->provisioning, "scale_down_delay_s",
		(double)p->scale_down_delay_ms / 1000.0, "gpu_hour_usd",
		price >= 0 ? json_real(price) : json_null(), "last_decision",
		p->decision[0] ? json_pack("{s:s, s:I}", "why", p->decision,
					   "at_ms", (json_int_t)p->decision_at)
			       : json_null(),
		"nodes", nodes);
}

void pools_h_list(struct server *s, struct kn_http_req *req,
		  const struct caller *c, const char *param)
{
	json_t *list = json_array();
	int64_t now = kn_now_ms();

	(void)c;
	(void)param;
	for (size_t i = 0; s->pools && i < s->pools->n; i++)
		json_array_append_new(list,
				      pool_json(s, &s->pools->pool[i], now));
	kn_http_reply_json(
		req, 200,
		json_pack("{s:o, s:o}", "pools", list, "blocked",
			  s->pools && s->pools->blocked[0]
				  ? json_string(s->pools->blocked)
				  : json_null()));
}
