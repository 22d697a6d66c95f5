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
#include "service.h"

#include "cost/cost.h"
#include "health/health.h"
#include "vmss/vmss.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

/* How often the autoscaler looks. */
#define POOLS_TICK_MS 500

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
	struct kn_pool_spec spec;            /* as --pool gave it */
	const struct pool_provider_ops *provider;
	int next_index;      /* the N of the next POOL-N */
	int provisioning;
	char decision[KN_AUTOSCALE_WHY_LEN]; /* the last change and why */
	int64_t decision_at;
	char error[KN_AUTOSCALE_WHY_LEN];    /* the provider's last failure */
	int64_t error_at;
	struct rolling *rolling;             /* maintenance, the last one */
	struct kn_sched_node shape;          /* a new node, for the plan */
	struct kn_device_set shape_devices;
	struct azure_pool *azure;            /* provider=azure's client */
	const char *joining_zone; /* the zone label of a node joining now */
};

/* A command provider's call in flight (its files in dir). */
struct pool_op {
	struct pool *pool;
	bool scale_up;       /* else a delete of node */
	int n;               /* nodes asked for */
	int first;           /* ... named POOL-first, POOL-first+1, ... */
	char node[64];
	char *dir;
	struct pool_op *next;
};

struct pools {
	struct pool *pool;
	size_t n;
	struct pool_op *ops;
	int64_t next_op;
	struct kn_timer *timer;
	char blocked[KN_AUTOSCALE_WHY_LEN]; /* work no pool can hold */
};

/* ---- parsing --pool ---- */

static void azure_pool_free(struct azure_pool *a);

static void pool_release(struct pool *p)
{
	kn_pool_spec_release(&p->spec);
	azure_pool_free(p->azure);
	free(p->shape.devices);
	kn_device_set_release(&p->shape_devices);
}

static const struct pool_provider_ops sim_provider, command_provider;
static const struct pool_provider_ops azure_provider;
static const struct pool_provider_ops *const providers[] = {
	[KN_POOL_PROVIDER_SIM] = &sim_provider,
	[KN_POOL_PROVIDER_COMMAND] = &command_provider,
	[KN_POOL_PROVIDER_AZURE] = &azure_provider,
};
static void rolling_free(struct rolling *r);
static int azure_open(struct pool *p, const char *text, struct kn_error *err);

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
	return azure_open(p, text, err);
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
	const char *zone;
	char *labels;
	int rc;

	s->nodes = kn_xrealloc(s->nodes, (n + 1) * sizeof(*s->nodes));
	s->cluster.nodes =
		kn_xrealloc(s->cluster.nodes, (n + 1) * sizeof(*s->cluster.nodes));
	node = &s->nodes[n];
	memset(node, 0, sizeof(*node));
	memset(&s->cluster.nodes[n], 0, sizeof(s->cluster.nodes[n]));
	nodes_repoint(s);
	rc = kn_devices_simulated(p->spec.gpus, &node->devices, err);
	if (rc < 0)
		return rc;
	kn_strlcpy(node->name, name, sizeof(node->name));
	node->pool = (size_t)(p - s->pools->pool) + 1;
	kn_strlcpy(node->state, state, sizeof(node->state));
	kn_strlcpy(node->reason, reason ? reason : "", sizeof(node->reason));
	s->cluster.n_nodes = n + 1;
	setup_sched_node(s, n);
	s->cluster.nodes[n].schedulable = strcmp(state, "ready") == 0;
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
				       p->spec.name));
	kn_log(KN_LOG_INFO, "pool %s: node %s up (%s, %s)", p->spec.name, name,
	       p->spec.gpus, p->spec.spot ? "spot" : "on demand");
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

		snprintf(name, sizeof(name), "%s-%d", p->spec.name, p->next_index);
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

/* ---- the command provider: a user's script ---- */

/*
 * Run cmd[0] with cmd[1..] in its own session, stdin from /dev/null, its
 * stdout, stderr and exit status going to files in dir (out, err, rc),
 * which the caller reads once rc is there: the loop never waits. extra
 * ("NAME=value", NULL-ended) is added to the server's environment.
 */
static int run_in_background(const char *dir, char *const *cmd,
			     char *const *extra, struct kn_error *err)
{
	static const char wrapper[] =
		"\"$0\" \"$@\" >\"$KILN_POOL_DIR/out\" 2>\"$KILN_POOL_DIR/err\"; "
		"echo $? >\"$KILN_POOL_DIR/rc.tmp\" && "
		"mv \"$KILN_POOL_DIR/rc.tmp\" \"$KILN_POOL_DIR/rc\"";
	char *argv[20], **env, *dir_env = kn_asprintf("KILN_POOL_DIR=%s", dir);
	size_t n = 0, k = 0;
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t none, all;
	pid_t pid;
	int rc;

	kn_rm_rf(dir);
	rc = kn_mkdir_p(dir, 0700);
	if (rc < 0) {
		free(dir_env);
		return kn_errorf(err, KN_EIO, "pool", "cannot create %s: %s",
				 dir, strerror(-rc));
	}
	argv[k++] = "/bin/sh";
	argv[k++] = "-c";
	argv[k++] = (char *)wrapper;
	for (size_t i = 0; cmd[i] && k < 19; i++)
		argv[k++] = cmd[i];
	argv[k] = NULL;
	for (char **e = environ; *e; e++)
		n++;
	for (char *const *e = extra; *e; e++)
		n++;
	env = kn_xcalloc(n + 2, sizeof(*env));
	n = 0;
	for (char **e = environ; *e; e++)
		if (strncmp(*e, "KILN_POOL_", 10) != 0 &&
		    strncmp(*e, "KILN_NODE=", 10) != 0)
			env[n++] = *e;
	for (char *const *e = extra; *e; e++)
		env[n++] = *e;
	env[n++] = dir_env;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addclosefrom_np(&fa, 3);
	posix_spawnattr_init(&attr);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID |
						POSIX_SPAWN_SETSIGMASK |
						POSIX_SPAWN_SETSIGDEF);
	sigemptyset(&none);
	sigfillset(&all);
	posix_spawnattr_setsigmask(&attr, &none);
	posix_spawnattr_setsigdefault(&attr, &all);
	rc = posix_spawn(&pid, "/bin/sh", &fa, &attr, argv, env);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	free(env);
	free(dir_env);
	if (rc != 0)
		return kn_errorf(err, KN_EIO, "pool", "cannot run %s: %s",
				 cmd[0], strerror(rc));
	return 0;
}

/* A background run's status, out and err's first line once rc is there:
   true then (out and errline malloc'd). */
static bool background_done(const char *dir, int *status, char **out,
			    char **errline)
{
	char *path = kn_asprintf("%s/rc", dir), *text = NULL;

	if (kn_read_file(path, 64, &text, NULL) < 0) {
		free(path);
		return false;
	}
	*status = -1;
	sscanf(text, "%d", status);
	free(text);
	free(path);
	path = kn_asprintf("%s/out", dir);
	if (kn_read_file(path, 1 << 20, out, NULL) < 0)
		*out = kn_xstrdup("");
	free(path);
	path = kn_asprintf("%s/err", dir);
	if (kn_read_file(path, 1 << 16, errline, NULL) < 0)
		*errline = kn_xstrdup("");
	free(path);
	*strchrnul(*errline, '\n') = '\0';
	return true;
}

/* Run the pool's script as SCRIPT VERB POOL ARGS... for op. */
static int command_start(struct server *s, struct pool_op *op,
			 char *const *args, struct kn_error *err)
{
	struct pool *p = op->pool;
	char *cmd[16], *extra[4];
	size_t k = 0;
	int rc;

	op->dir = kn_asprintf("%s/pools/%s-%lld", s->home, p->spec.name,
			      (long long)s->pools->next_op++);
	cmd[k++] = p->spec.command;
	for (size_t i = 0; args[i] && k < 15; i++)
		cmd[k++] = args[i];
	cmd[k] = NULL;
	extra[0] = kn_asprintf("KILN_POOL_SKU=%s", p->spec.sku);
	extra[1] = kn_asprintf("KILN_POOL_PRICING=%s",
			       p->spec.spot ? "spot" : "on_demand");
	extra[2] = kn_asprintf("KILN_POOL_GPUS=%s", p->spec.gpus);
	extra[3] = NULL;
	rc = run_in_background(op->dir, cmd, extra, err);
	for (size_t i = 0; extra[i]; i++)
		free(extra[i]);
	if (rc < 0)
		return rc;
	op->next = s->pools->ops;
	s->pools->ops = op;
	return 0;
}

static void op_free(struct pool_op *op, bool remove)
{
	if (op->dir && remove)
		kn_rm_rf(op->dir);
	free(op->dir);
	free(op);
}

/* SCRIPT scale-up POOL N NAME...: the names kiln will give the nodes. */
static int command_scale_up(struct server *s, struct pool *p, int n,
			    struct kn_error *err)
{
	struct pool_op *op = kn_xcalloc(1, sizeof(*op));
	char count[16], *args[16], names[8][64];
	int k = 0, rc;

	/* At most 8 a call: the rest comes next round. */
	if (n > 8)
		n = 8;
	snprintf(count, sizeof(count), "%d", n);
	args[k++] = "scale-up";
	args[k++] = p->spec.name;
	args[k++] = count;
	op->first = p->next_index;
	for (int i = 0; i < n; i++) {
		snprintf(names[i], sizeof(names[i]), "%s-%d", p->spec.name,
			 p->next_index++);
		args[k++] = names[i];
	}
	args[k] = NULL;
	op->pool = p;
	op->scale_up = true;
	op->n = n;
	rc = command_start(s, op, args, err);
	if (rc < 0) {
		op_free(op, true);
		return rc;
	}
	p->provisioning += n;
	return 0;
}

/* SCRIPT delete POOL NODE; the node is cordoned until it answers. */
static int command_delete(struct server *s, struct pool *p, const char *node,
			  struct kn_error *err)
{
	struct pool_op *op = kn_xcalloc(1, sizeof(*op));
	char *args[4] = {"delete", p->spec.name, (char *)node, NULL};
	int rc;

	op->pool = p;
	kn_strlcpy(op->node, node, sizeof(op->node));
	rc = nodes_set_state(s, NULL, node, "cordoned", "being deleted", err);
	if (rc == 0)
		rc = command_start(s, op, args, err);
	if (rc < 0) {
		op_free(op, true);
		return rc;
	}
	return 0;
}

static const struct pool_provider_ops command_provider = {
	.name = "command",
	.scale_up = command_scale_up,
	.delete_node = command_delete,
};

/* A provider's call failed: the pool's last_error, the log, the audit. */
static void pool_failed(struct server *s, struct pool *p, bool scale_up,
			const char *why)
{
	char object[96];

	snprintf(object, sizeof(object), "pool/%s", p->spec.name);
	kn_log(KN_LOG_ERROR, "pool %s: %s", p->spec.name, why);
	kn_strlcpy(p->error, why, sizeof(p->error));
	p->error_at = kn_now_ms();
	{
		struct kn_audit a;
		struct kn_error err;

		memset(&a, 0, sizeof(a));
		a.actor = "system";
		a.role = "admin";
		a.action = scale_up ? "pool.scale_up" : "node.remove";
		a.object = object;
		a.outcome = "failed";
		a.detail = (char *)why;
		if (kn_store_audit_insert(s->store, &a, &err) < 0)
			kn_log(KN_LOG_WARN, "auditing: %s", err.message);
	}
}

static void op_failed(struct server *s, struct pool_op *op, const char *why)
{
	pool_failed(s, op->pool, op->scale_up, why);
}

/* The names a scale-up's script says are up: {"nodes": [NAME, ...]}. */
static void scale_up_done(struct server *s, struct pool_op *op,
			  const char *out, char *why, size_t why_len)
{
	json_error_t jerr;
	json_t *doc = json_loads(out, 0, &jerr), *nodes, *name;
	size_t i;

	nodes = json_object_get(doc, "nodes");
	if (!json_is_array(nodes)) {
		snprintf(why, why_len,
			 "scale-up: %s printed no {\"nodes\": [...]}: %.80s",
			 op->pool->spec.command, doc ? "nodes missing" : jerr.text);
		goto out;
	}
	json_array_foreach(nodes, i, name) {
		const char *text = json_string_value(name);
		struct kn_error err;
		bool asked = false;
		int k;

		/* Only the names it was given: kiln owns its nodes' names. */
		for (k = 0; text && k < op->n; k++) {
			char want[64];

			snprintf(want, sizeof(want), "%s-%d", op->pool->spec.name,
				 op->first + k);
			asked |= !strcmp(want, text);
		}
		if (!asked || nodes_find(s, text) >= 0) {
			snprintf(why, why_len,
				 "scale-up: %s named node %.60s, which it was "
				 "not asked for",
				 op->pool->spec.command, text ? text : "(not a string)");
			continue;
		}
		if (pool_node_add(s, op->pool, text, "ready", NULL, true,
				  &err) < 0)
			snprintf(why, why_len, "adding node %s: %.160s", text,
				 err.message);
	}
out:
	json_decref(doc);
}

/* Settle the command provider's calls whose status is in; true when
   nodes came up. */
static bool ops_poll(struct server *s)
{
	struct pool_op **link = &s->pools->ops;
	bool added = false;

	while (*link) {
		struct pool_op *op = *link;
		char *out = NULL, *errtext = NULL, why[KN_AUTOSCALE_WHY_LEN] = "";
		struct kn_error err;
		int status = -1;

		if (!background_done(op->dir, &status, &out, &errtext)) {
			link = &op->next;
			continue;
		}
		*link = op->next;
		if (status != 0)
			snprintf(why, sizeof(why), "%s %s: %s exited %d: %.120s",
				 op->scale_up ? "scale-up" : "delete",
				 op->scale_up ? op->pool->spec.name : op->node,
				 op->pool->spec.command, status, errtext);
		else if (op->scale_up) {
			scale_up_done(s, op, out, why, sizeof(why));
			added = true;
		} else {
			int i = nodes_find(s, op->node);

			if (i >= 0 && pool_node_remove(s, (size_t)i, &err) < 0)
				snprintf(why, sizeof(why), "removing %s: %.160s",
					 op->node, err.message);
		}
		if (op->scale_up)
			op->pool->provisioning -= op->n;
		else if (status != 0 && nodes_find(s, op->node) >= 0) {
			/* Back in service; the next try waits a whole delay. */
			if (nodes_set_state(s, NULL, op->node, "ready", "",
					    &err) < 0)
				kn_log(KN_LOG_ERROR, "pool %s: %s",
				       op->pool->spec.name, err.message);
			s->nodes[nodes_find(s, op->node)].idle_since =
				kn_now_ms();
		}
		if (why[0])
			op_failed(s, op, why);
		free(out);
		free(errtext);
		op_free(op, true);
	}
	if (added)
		jobs_wake(s);
	return added;
}

/* ---- the azure provider: a VM Scale Set ---- */

/*
 * Calls go to the pool's own worker thread, one at a time in order, so
 * the event loop never waits on Azure and a delete never overtakes the
 * scale-up before it. After a failed scale-up, its nodes stay counted
 * as provisioning this long, so the autoscaler does not ask again at
 * once (a 403 would otherwise be retried twice a second).
 */
#define AZURE_COOLDOWN_MS (30 * 1000)

struct azure_pool {
	struct kn_vmss_client *client;
	struct kn_workers *worker;
	volatile int stop;
	/* The worker's alone: computer names handed to kiln as nodes. */
	char (*known)[64];
	size_t n_known;
	struct kn_timer *cooldown;
	struct pool *pool;
	int held; /* provisioning kept by the cooldown */
};

struct azure_call {
	struct server *s;
	struct pool *pool;
	bool scale_up;
	int n;             /* scale-up: nodes asked for */
	char node[64];     /* delete: the node */
	/* What the worker found. */
	struct kn_vmss_vm *joined;
	size_t n_joined;
	int rc;
	struct kn_error err;
};

static void azure_pool_free(struct azure_pool *a)
{
	if (!a)
		return;
	/* Interrupts a call in flight; its done sees the server closing. */
	a->stop = 1;
	kn_workers_free(a->worker);
	kn_timer_free(a->cooldown);
	kn_vmss_client_free(a->client);
	free(a->known);
	free(a);
}

static const char *env_nonempty(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

/* Make provider=azure's client (kn_pool_spec_parse checked its options). */
static int azure_open(struct pool *p, const char *text, struct kn_error *err)
{
	struct kn_vmss_config cfg = {0};
	const char *missing = NULL;
	bool sp;
	int rc;

	if (p->provider != &azure_provider)
		return 0;
	sp = p->spec.azure_identity &&
	     !strcmp(p->spec.azure_identity, "service-principal");
	cfg.id = p->spec.vmss;
	cfg.arm_url = p->spec.azure_arm_url;
	cfg.imds_url = p->spec.azure_imds_url;
	cfg.login_url = p->spec.azure_login_url;
	cfg.identity = sp ? KN_VMSS_SERVICE_PRINCIPAL : KN_VMSS_MANAGED_IDENTITY;
	cfg.client_id = p->spec.azure_client_id;
	if (sp) {
		cfg.tenant_id = env_nonempty("AZURE_TENANT_ID");
		if (!cfg.client_id)
			cfg.client_id = env_nonempty("AZURE_CLIENT_ID");
		cfg.client_secret = env_nonempty("AZURE_CLIENT_SECRET");
		missing = !cfg.tenant_id	 ? "AZURE_TENANT_ID"
			  : !cfg.client_id	 ? "AZURE_CLIENT_ID"
			  : !cfg.client_secret ? "AZURE_CLIENT_SECRET"
					       : NULL;
		if (missing)
			return kn_errorf(err, KN_EINVAL, "pool",
					 "--pool \"%s\": azure-identity: "
					 "service-principal needs $%s",
					 text, missing);
	}
	p->azure = kn_xcalloc(1, sizeof(*p->azure));
	p->azure->pool = p;
	rc = kn_vmss_client_new(&cfg, &p->azure->stop, &p->azure->client, err);
	if (rc < 0) {
		char why[sizeof(err->message)];

		kn_strlcpy(why, err->message, sizeof(why));
		return kn_errorf(err, KN_EINVAL, "pool", "--pool \"%s\": %s",
				 text, why);
	}
	return 0;
}

static bool azure_known(const struct azure_pool *a, const char *name)
{
	for (size_t i = 0; i < a->n_known; i++)
		if (!strcmp(a->known[i], name))
			return true;
	return false;
}

static void azure_know(struct azure_pool *a, const char *name)
{
	a->known = kn_xrealloc(a->known, (a->n_known + 1) * sizeof(*a->known));
	kn_strlcpy(a->known[a->n_known++], name, sizeof(a->known[0]));
}

static void azure_forget(struct azure_pool *a, const char *name)
{
	for (size_t i = 0; i < a->n_known; i++)
		if (!strcmp(a->known[i], name)) {
			a->known[i][0] = '\0';
			memmove(a->known[i], a->known[a->n_known - 1],
				sizeof(a->known[0]));
			a->n_known--;
			return;
		}
}

/* Hand the VMs that are up and not kiln's yet to call; count in *coming
   those Azure is still making. */
static void azure_take_new(struct azure_call *call,
			   const struct kn_vmss_vm *vms, size_t n, int *coming)
{
	struct azure_pool *a = call->pool->azure;

	for (size_t i = 0; i < n; i++) {
		if (azure_known(a, vms[i].computer_name))
			continue;
		if (!strcmp(vms[i].state, "Succeeded")) {
			call->joined = kn_xrealloc(call->joined,
						   (call->n_joined + 1) *
							   sizeof(*call->joined));
			call->joined[call->n_joined++] = vms[i];
			azure_know(a, vms[i].computer_name);
		} else if (coming && strcmp(vms[i].state, "Failed") != 0 &&
			   strcmp(vms[i].state, "Deleting") != 0) {
			(*coming)++;
		}
	}
}

/*
 * Scale-up: VMs already there and not kiln's count first (a scale-up of
 * an earlier run, or one made by hand); the capacity grows by the rest.
 */
static void azure_scale_up_work(struct azure_call *call)
{
	struct azure_pool *a = call->pool->azure;
	struct kn_vmss_vm *vms = NULL;
	size_t n = 0;
	int coming = 0, need;
	int64_t capacity = 0;

	call->rc = kn_vmss_list(a->client, &vms, &n, &call->err);
	if (call->rc < 0)
		return;
	azure_take_new(call, vms, n, &coming);
	free(vms);
	need = call->n - (int)call->n_joined - coming;
	if (need <= 0)
		return;
	call->rc = kn_vmss_capacity(a->client, &capacity, &call->err);
	if (call->rc == 0)
		call->rc = kn_vmss_set_capacity(a->client, capacity + need,
						&call->err);
	if (call->rc == 0)
		call->rc = kn_vmss_list(a->client, &vms, &n, &call->err);
	if (call->rc == 0) {
		azure_take_new(call, vms, n, NULL);
		free(vms);
	}
}

/* Delete: the instance whose computer name is the node's. */
static void azure_delete_work(struct azure_call *call)
{
	struct azure_pool *a = call->pool->azure;
	struct kn_vmss_vm *vms = NULL;
	size_t n = 0;

	call->rc = kn_vmss_list(a->client, &vms, &n, &call->err);
	for (size_t i = 0; call->rc == 0 && i < n; i++)
		if (!strcmp(vms[i].computer_name, call->node))
			call->rc = kn_vmss_delete_instance(
				a->client, vms[i].instance_id, &call->err);
	/* Not listed: gone already, nothing to delete. */
	if (call->rc == 0)
		azure_forget(a, call->node);
	free(vms);
}

static void azure_work(void *arg)
{
	struct azure_call *call = arg;

	if (call->scale_up)
		azure_scale_up_work(call);
	else
		azure_delete_work(call);
}

static void azure_cooldown_over(void *arg)
{
	struct azure_pool *a = arg;

	a->pool->provisioning -= a->held;
	a->held = 0;
}

static void azure_done(void *arg, bool ran)
{
	struct azure_call *call = arg;
	struct server *s = call->s;
	struct pool *p = call->pool;
	/* Cut to the pool's last_error by pool_failed. */
	char why[1024] = "";
	struct kn_error err;

	if (!ran || s->closing)
		goto out;
	if (call->scale_up) {
		int held = call->rc < 0 ? call->n - (int)call->n_joined : 0;

		p->provisioning -= call->n - (held > 0 ? held : 0);
		if (held > 0) {
			p->azure->held += held;
			kn_timer_arm(p->azure->cooldown, AZURE_COOLDOWN_MS);
		}
		for (size_t i = 0; i < call->n_joined; i++) {
			const char *name = call->joined[i].computer_name;

			if (nodes_find(s, name) >= 0) {
				snprintf(why, sizeof(why),
					 "VM %s: a node has its name already",
					 name);
				continue;
			}
			p->joining_zone = call->joined[i].zone[0]
						  ? call->joined[i].zone
						  : NULL;
			if (pool_node_add(s, p, name, "ready", NULL, true,
					  &err) < 0)
				snprintf(why, sizeof(why), "adding node %s: %.160s",
					 name, err.message);
			p->joining_zone = NULL;
		}
		if (call->n_joined)
			jobs_wake(s);
	} else {
		int i = nodes_find(s, call->node);

		if (call->rc == 0 && i >= 0 &&
		    pool_node_remove(s, (size_t)i, &err) < 0)
			snprintf(why, sizeof(why), "removing %s: %.160s",
				 call->node, err.message);
		if (call->rc < 0 && i >= 0) {
			/* Back in service; the next try waits a whole delay. */
			if (nodes_set_state(s, NULL, call->node, "ready", "",
					    &err) < 0)
				kn_log(KN_LOG_ERROR, "pool %s: %s", p->spec.name,
				       err.message);
			s->nodes[i].idle_since = kn_now_ms();
		}
	}
	if (call->rc < 0)
		snprintf(why, sizeof(why), "%s %s: %s",
			 call->scale_up ? "scale-up" : "delete",
			 call->scale_up ? p->spec.name : call->node,
			 call->err.message);
	if (why[0])
		pool_failed(s, p, call->scale_up, why);
out:
	free(call->joined);
	free(call);
}

static int azure_scale_up(struct server *s, struct pool *p, int n,
			  struct kn_error *err)
{
	struct azure_call *call = kn_xcalloc(1, sizeof(*call));

	(void)err;
	call->s = s;
	call->pool = p;
	call->scale_up = true;
	call->n = n;
	p->provisioning += n;
	kn_workers_submit(p->azure->worker, azure_work, azure_done, call);
	return 0;
}

/* The node is cordoned until Azure answers. */
static int azure_delete(struct server *s, struct pool *p, const char *node,
			struct kn_error *err)
{
	struct azure_call *call;
	int rc = nodes_set_state(s, NULL, node, "cordoned", "being deleted",
				 err);

	if (rc < 0)
		return rc;
	call = kn_xcalloc(1, sizeof(*call));
	call->s = s;
	call->pool = p;
	kn_strlcpy(call->node, node, sizeof(call->node));
	kn_workers_submit(p->azure->worker, azure_work, azure_done, call);
	return 0;
}

static const struct pool_provider_ops azure_provider = {
	.name = "azure",
	.scale_up = azure_scale_up,
	.delete_node = azure_delete,
};

/* Each azure pool's worker, knowing the nodes the pool has now. */
static void azure_run(struct server *s)
{
	for (size_t i = 0; i < s->pools->n; i++) {
		struct pool *p = &s->pools->pool[i];

		if (!p->azure)
			continue;
		for (size_t n = 0; n < s->cluster.n_nodes; n++)
			if (node_pool(s, n) == p)
				azure_know(p->azure, s->nodes[n].name);
		p->azure->worker = kn_workers_new(s->loop, 1);
		p->azure->cooldown =
			kn_timer_new(s->loop, azure_cooldown_over, p->azure);
	}
}

/* ---- start-up ---- */

/* The pool a stored node row belongs to (label pool=), or NULL. */
static struct pool *row_pool(struct server *s, const struct kn_node_row *row)
{
	json_t *labels = json_loads(row->labels_json ? row->labels_json : "{}",
				    0, NULL);
	const char *name = json_string_value(json_object_get(labels, "pool"));
	struct pool *found = NULL;

	for (size_t i = 0; name && i < s->pools->n; i++)
		if (!strcmp(s->pools->pool[i].spec.name, name))
			found = &s->pools->pool[i];
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
	int rc = kn_store_node_list(s->store, &rows, &n_rows, err);

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
	for (size_t i = 0; rc == 0 && i < s->pools->n; i++) {
		struct pool *p = &s->pools->pool[i];
		int have = 0;

		/* A scale set's VMs join when listed: the autoscaler asks
		   for min. */
		if (p->provider == &azure_provider)
			continue;
		for (size_t n = 0; n < s->cluster.n_nodes; n++)
			have += node_pool(s, n) == p;
		while (rc == 0 && have++ < p->spec.min) {
			char name[64];

			snprintf(name, sizeof(name), "%s-%d", p->spec.name,
				 p->next_index);
			rc = pool_node_add(s, p, name, "ready", NULL, false, err);
		}
	}
	for (size_t n = 0; rc == 0 && n < s->cluster.n_nodes; n++)
		if (s->nodes[n].pool)
			rc = nodes_save(s, n, err);
	return rc;
}

/* Parse --pool, create or adopt each pool's nodes. */
static int pools_start(struct server *s, struct kn_error *err)
{
	struct pools *ps;
	int rc = 0;

	if (!s->cfg.n_pools)
		return 0;
	ps = kn_xcalloc(1, sizeof(*ps));
	ps->pool = kn_xcalloc(s->cfg.n_pools, sizeof(*ps->pool));
	s->pools = ps;
	{
		/* The command provider's calls of an earlier run are over or
		   forgotten. */
		char *dir = kn_asprintf("%s/pools", s->home);

		kn_rm_rf(dir);
		free(dir);
	}
	for (size_t i = 0; rc == 0 && i < s->cfg.n_pools; i++) {
		rc = pool_parse(s->cfg.pools[i], &ps->pool[i], err);
		ps->n = i + 1;
		for (size_t k = 0; rc == 0 && k < i; k++)
			if (!strcmp(ps->pool[k].spec.name, ps->pool[i].spec.name))
				rc = kn_errorf(err, KN_EINVAL, "pool",
					       "--pool: pool %s is given twice",
					       ps->pool[i].spec.name);
		for (size_t k = 0; rc == 0 && k < s->cluster.n_nodes; k++)
			if (!strncmp(s->nodes[k].name, ps->pool[i].spec.name,
				     strlen(ps->pool[i].spec.name)) &&
			    s->nodes[k].name[strlen(ps->pool[i].spec.name)] == '-')
				rc = kn_errorf(err, KN_EINVAL, "pool",
					       "--pool %s: node %s would clash "
					       "with its nodes' names",
					       ps->pool[i].spec.name,
					       s->nodes[k].name);
		if (rc == 0)
			shape_build(&ps->pool[i]);
	}
	if (rc == 0)
		rc = pools_adopt(s, err);
	if (rc == 0 && s->cluster.n_nodes == 0)
		rc = kn_errorf(err, KN_EINVAL, "pool",
			       "--pool: every pool has min=0 or is an azure "
			       "pool (whose VMs join once listed), so the "
			       "server would start with no node: give one "
			       "min=1 or add a --sim-node");
	return rc;
}

/* ---- the autoscaler ---- */

static double pool_gpu_price(struct server *s, const struct pool *p)
{
	const struct kn_vm_size *size =
		s->catalog ? kn_catalog_find(s->catalog, p->spec.sku) : NULL;
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
	pool_audit(s, why[0] == '+' ? "pool.scale_up" : "pool.scale_down",
		   object, why);
	feed_publish(s, "pool.scale",
		     json_pack("{s:s, s:s}", "pool", p->spec.name, "why", why));
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
	/* New nodes: the scheduler places the queue on them first, or the
	   jobs they will take would look unplaced and ask again. */
	if (ops_poll(s)) {
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
		ap[i].gpu_hour_price = pool_gpu_price(s, &ps->pool[i]);
		ap[i].min = ps->pool[i].spec.min;
		ap[i].max = ps->pool[i].spec.max;
		ap[i].provisioning = ps->pool[i].provisioning;
		ap[i].scale_down_delay_ms = ps->pool[i].spec.scale_down_delay_ms;
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
				       p->spec.name, err.message);
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
			kn_log(KN_LOG_ERROR, "pool %s: deleting %s: %s", p->spec.name,
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

static void azure_run(struct server *s);

/* Arm the autoscaler's timer once the loop exists. */
static void pools_run(struct server *s)
{
	if (!s->pools)
		return;
	s->pools->timer = kn_timer_new(s->loop, pools_tick, s);
	azure_run(s);
	kn_timer_arm(s->pools->timer, POOLS_TICK_MS);
}

static void pools_free(struct server *s)
{
	if (!s->pools)
		return;
	kn_timer_free(s->pools->timer);
	/* Calls in flight run on; their nodes are unknown to the next
	   start (docs/capacity.md). */
	while (s->pools->ops) {
		struct pool_op *op = s->pools->ops;

		s->pools->ops = op->next;
		op_free(op, false);
	}
	for (size_t i = 0; i < s->pools->n; i++) {
		rolling_free(s->pools->pool[i].rolling);
		pool_release(&s->pools->pool[i]);
	}
	free(s->pools->pool);
	free(s->pools);
	s->pools = NULL;
}

/* ---- rolling maintenance ---- */

#define ROLLING_TICK_MS 200
/* How long a surge replica may take to serve before the node fails. */
#define SURGE_TIMEOUT_DEFAULT_MS (10 * 60 * 1000)
/* A week: longer is a mistake, not a plan. */
#define SURGE_TIMEOUT_MAX_S (7 * 24 * 3600)

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
	free(r->command);
	free(r->nodes);
	if (r->dir)
		kn_rm_rf(r->dir);
	free(r->dir);
	free(r->health_root);
	free(r->health_kernel_log);
	free(r);
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
	if (kn_store_audit_insert(r->s->store, &a, &err) < 0)
		kn_log(KN_LOG_WARN, "auditing: %s", err.message);
	feed_publish(r->s, "pool.rolling",
		     json_pack("{s:s, s:s, s:o}", "pool", r->pool->spec.name,
			       "state", r->state, "error",
			       error ? json_string(error) : json_null()));
}

/* The first deployment replica still running on node i, or NULL. */
static const struct run *replica_on(struct server *s, size_t i)
{
	struct job_model model;

	for (const struct run *run = s->runs; run; run = run->next)
		if (!run->stopping && run->bindings[0].node == i &&
		    job_hooks_model(s->hooks, run->job_id, &model) &&
		    model.serves)
			return run;
	return NULL;
}

static void health_work(void *arg)
{
	struct rolling *r = arg;
	struct kn_check_result res[KN_HEALTH_CHECKS];
	struct kn_health_config cfg = {0};
	struct kn_error err;

	cfg.root = r->health_root;
	cfg.kernel_log = r->health_kernel_log;
	cfg.sku = r->have_sku ? &r->sku : NULL;
	if (kn_nvml_open(&cfg.nvml, &err) < 0)
		cfg.nvml = NULL; /* no GPU: its checks skip */
	r->health_failed = kn_health_run(&cfg, res);
	kn_nvml_close(cfg.nvml);
	r->health_first[0] = '\0';
	for (int i = 0; i < KN_HEALTH_CHECKS; i++)
		if (res[i].status == KN_CHECK_FAIL && !r->health_first[0])
			snprintf(r->health_first, sizeof(r->health_first),
				 "%s: %s", res[i].name, res[i].message);
}

static void health_done(void *arg, bool ran)
{
	struct rolling *r = arg;

	r->health_busy = false;
	if (!ran || r->s->closing)
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
		const struct run *run;

		if (r->surge_job && surge_pending(r, name))
			return false;
		/* Each replica there gets a surge replica elsewhere first; it
		 * retires the old one once it serves. */
		run = replica_on(s, (size_t)i);
		if (run) {
			if (deploy_surge(s, run->job_id, &r->surge_job, &err) <
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

		if (node_busy(s, (size_t)i))
			return false;
		free(r->dir);
		r->dir = kn_asprintf("%s/pools/rolling-%s", s->home, name);
		cmd[0] = "/bin/sh";
		cmd[1] = "-c";
		cmd[2] = r->command;
		cmd[3] = NULL;
		extra[0] = kn_asprintf("KILN_NODE=%s", name);
		extra[1] = kn_asprintf("KILN_POOL=%s", r->pool->spec.name);
		extra[2] = NULL;
		rc = run_in_background(r->dir, cmd, extra, &err);
		free(extra[0]);
		free(extra[1]);
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

		if (!background_done(r->dir, &status, &out, &errline))
			return false;
		if (status != 0)
			snprintf(why, sizeof(why),
				 "the patch command exited %d on node %s: "
				 "%.200s; it stays drained",
				 status, name, errline);
		free(out);
		free(errline);
		kn_rm_rf(r->dir);
		if (status != 0) {
			rolling_end(r, why);
			return false;
		}
		r->step = STEP_HEALTH;
		r->health_busy = true;
		kn_workers_submit(s->workers, health_work, health_done, r);
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

	while (!r->s->closing && !strcmp(r->state, "running")) {
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

static json_t *rolling_json(const struct rolling *r)
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

static struct pool *pool_named(struct server *s, const char *name)
{
	for (size_t i = 0; s->pools && i < s->pools->n; i++)
		if (!strcmp(s->pools->pool[i].spec.name, name))
			return &s->pools->pool[i];
	return NULL;
}

static void pools_h_rolling_start(struct server *s, struct kn_http_req *req,
			   const struct caller *c, const char *param)
{
	struct pool *p = pool_named(s, param);
	struct kn_error err;
	json_error_t jerr;
	size_t len;
	const char *text = kn_http_body(req, &len);
	json_t *body = json_loadb(text, len, 0, &jerr);
	const char *command =
		json_string_value(json_object_get(body, "command"));
	json_t *surge = json_object_get(body, "surge_timeout_s");
	struct rolling *r;
	struct kn_audit a;
	char object[96];

	if (!p) {
		kn_errorf(&err, KN_ENOTFOUND, "pool", "pool %s not found",
			  param);
		goto fail;
	}
	if (!command || !*command) {
		kn_errorf(&err, KN_EINVAL, "command",
			  "body must be {\"command\": \"PATCH COMMAND\"}");
		goto fail;
	}
	if (surge && (!json_is_number(surge) || json_number_value(surge) <= 0 ||
		      json_number_value(surge) > SURGE_TIMEOUT_MAX_S)) {
		kn_errorf(&err, KN_EINVAL, "surge_timeout_s",
			  "surge_timeout_s must be a number of seconds above 0 "
			  "and at most %d", SURGE_TIMEOUT_MAX_S);
		goto fail;
	}
	if (p->rolling && !strcmp(p->rolling->state, "running")) {
		kn_errorf(&err, KN_ECONFLICT, "pool",
			  "pool %s: rolling maintenance is already running "
			  "(node %s)",
			  p->spec.name, p->rolling->nodes[p->rolling->at]);
		goto fail;
	}
	r = kn_xcalloc(1, sizeof(*r));
	r->s = s;
	r->pool = p;
	if (s->cfg.health_sku && *s->cfg.health_sku) {
		if (kn_sku_load(s->cfg.health_sku_file ? s->cfg.health_sku_file
							: KN_SKU_FILE,
				s->cfg.health_sku, &r->sku, &err) < 0) {
			free(r);
			goto fail;
		}
		r->have_sku = true;
	}
	r->command = kn_xstrdup(command);
	r->surge_timeout_ms =
		surge ? (int64_t)(json_number_value(surge) * 1000.0)
		      : SURGE_TIMEOUT_DEFAULT_MS;
	kn_strlcpy(r->actor, c->name, sizeof(r->actor));
	r->health_root = kn_xstrdup(s->cfg.health_root ? s->cfg.health_root
						       : "/");
	r->health_kernel_log = s->cfg.health_kernel_log
				       ? kn_xstrdup(s->cfg.health_kernel_log)
				       : NULL;
	r->nodes = kn_xcalloc(s->cluster.n_nodes, sizeof(*r->nodes));
	for (size_t n = 0; n < s->cluster.n_nodes; n++)
		if (node_pool(s, n) == p)
			kn_strlcpy(r->nodes[r->n_nodes++], s->nodes[n].name,
				   sizeof(r->nodes[0]));
	kn_strlcpy(r->state, r->n_nodes ? "running" : "succeeded",
		   sizeof(r->state));
	r->started_at = kn_now_ms();
	r->ended_at = r->n_nodes ? 0 : r->started_at;
	r->timer = kn_timer_new(s->loop, rolling_tick, r);
	rolling_free(p->rolling);
	p->rolling = r;
	snprintf(object, sizeof(object), "pool/%s", p->spec.name);
	memset(&a, 0, sizeof(a));
	a.actor = (char *)c->name;
	a.role = (char *)role_name(c->role);
	a.action = "pool.rolling";
	a.object = object;
	a.outcome = "ok";
	a.detail = r->command;
	if (kn_store_audit_insert(s->store, &a, &err) < 0)
		kn_log(KN_LOG_WARN, "auditing: %s", err.message);
	kn_log(KN_LOG_INFO, "rolling maintenance of pool %s (%zu nodes): %s",
	       p->spec.name, r->n_nodes, r->command);
	if (r->n_nodes)
		kn_timer_arm(r->timer, 0);
	json_decref(body);
	kn_http_reply_json(req, 202, json_pack("{s:o}", "rolling",
						rolling_json(r)));
	return;
fail:
	json_decref(body);
	kn_http_reply_error(req, &err);
}

static void pools_h_rolling_get(struct server *s, struct kn_http_req *req,
			 const struct caller *c, const char *param)
{
	struct pool *p = pool_named(s, param);
	struct kn_error err;

	(void)c;
	if (!p || !p->rolling) {
		kn_errorf(&err, KN_ENOTFOUND, "pool",
			  p ? "pool %s has had no rolling maintenance"
			    : "pool %s not found",
			  param);
		kn_http_reply_error(req, &err);
		return;
	}
	kn_http_reply_json(req, 200, json_pack("{s:o}", "rolling",
					       rolling_json(p->rolling)));
}

/* ---- GET /v1/pools ---- */

static json_t *pool_json(struct server *s, const struct pool *p, int64_t now)
{
	json_t *nodes = json_array(), *zones = json_array();
	double price = pool_gpu_price(s, p);
	int current = 0;

	for (size_t i = 0; i < p->spec.n_zones; i++)
		json_array_append_new(zones, json_string(p->spec.zones[i]));
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
		"s:o, s:o, s:o, s:o, s:o}",
		"name", p->spec.name, "provider", p->provider->name, "sku", p->spec.sku,
		"gpus", p->spec.gpus, "pricing", p->spec.spot ? "spot" : "on_demand",
		"zones", zones, "min", p->spec.min, "max", p->spec.max, "current", current,
		"provisioning", p->provisioning, "desired",
		current + p->provisioning, "scale_down_delay_s",
		(double)p->spec.scale_down_delay_ms / 1000.0, "gpu_hour_usd",
		price >= 0 ? json_real(price) : json_null(), "last_decision",
		p->decision[0] ? json_pack("{s:s, s:I}", "why", p->decision,
					   "at_ms", (json_int_t)p->decision_at)
			       : json_null(),
		"rolling", p->rolling ? rolling_json(p->rolling) : json_null(),
		"last_error",
		p->error[0] ? json_pack("{s:s, s:I}", "why", p->error, "at_ms",
					(json_int_t)p->error_at)
			    : json_null(),
		"nodes", nodes);
}

static void pools_h_list(struct server *s, struct kn_http_req *req,
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

static const struct route routes[] = {
	{"GET", "/v1/pools", KN_ROLE_VIEWER, false, NULL, pools_h_list},
	{"POST", "/v1/pools/{name}/rolling", KN_ROLE_OPERATOR, false, NULL,
	 pools_h_rolling_start},
	{"GET", "/v1/pools/{name}/rolling", KN_ROLE_VIEWER, false, NULL,
	 pools_h_rolling_get},
};

const struct service pools_service = {
	.name = "pools",
	.phase = SERVICE_PHASE_NODES,
	.start = pools_start,
	.run = pools_run,
	.stop = pools_free,
	.routes = routes,
	.n_routes = sizeof(routes) / sizeof(routes[0]),
};
