/*
 * Node states, for each node this server runs (the local one, or the
 * --sim-node list). A node is ready, cordoned (gets no new work), draining
 * (gets no new work and its preemptible jobs are evicted; the others run
 * to their end) or unhealthy (as cordoned, set by `kiln health --drain`). The state survives restarts: it is in the store, and a
 * starting server keeps what it finds there.
 */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int nodes_find(const struct server *s, const char *name)
{
	for (size_t i = 0; i < s->cluster.n_nodes; i++)
		if (!strcmp(s->nodes[i].name, name))
			return (int)i;
	return -1;
}

size_t core_node_count(const struct server *s)
{
	return s->cluster.n_nodes;
}

const char *core_node_name(const struct server *s, size_t i)
{
	return s->nodes[i].name;
}

const char *core_node_state(const struct server *s, size_t i)
{
	return s->nodes[i].state;
}

const struct kn_device_set *core_node_devices(const struct server *s,
					      size_t i)
{
	return &s->nodes[i].devices;
}

const char *core_node_label(const struct server *s, size_t i,
			    const char *key)
{
	const struct kn_sched_node *sn = &s->cluster.nodes[i];

	for (size_t k = 0; k < sn->n_labels; k++)
		if (!strcmp(sn->labels[k].key, key))
			return sn->labels[k].value;
	return NULL;
}

int nodes_save(struct server *s, size_t i, struct kn_error *err)
{
	const struct server_node *node = &s->nodes[i];
	const struct kn_sched_node *sn = &s->cluster.nodes[i];
	const struct kn_device_set *set = &node->devices;
	struct kn_node_row row;
	struct kn_device_row *devs;
	json_t *labels = json_object();
	char *labels_text;
	int rc;

	for (size_t k = 0; k < sn->n_labels; k++)
		json_object_set_new(labels, sn->labels[k].key,
				    json_string(sn->labels[k].value));
	labels_text = json_dumps(labels, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(labels);
	memset(&row, 0, sizeof(row));
	row.name = (char *)node->name;
	row.state = (char *)node->state;
	row.labels_json = labels_text;
	row.taints_json = "[]";
	row.cpu_milli = sn->cpu_milli_total;
	row.memory_bytes = sn->memory_total;
	row.simulated = set->simulated;
	row.updated_at = kn_now_ms();
	row.reason = node->reason[0] ? (char *)node->reason : NULL;
	devs = kn_xcalloc(set->n ? set->n : 1, sizeof(*devs));
	for (size_t k = 0; k < set->n; k++) {
		devs[k].node = (char *)node->name;
		devs[k].index = set->devices[k].index;
		devs[k].uuid = set->devices[k].uuid;
		devs[k].model = set->devices[k].model;
		devs[k].memory_bytes = set->devices[k].memory_bytes;
		devs[k].simulated = set->simulated;
	}
	row.devices = devs;
	row.n_devices = set->n;
	rc = kn_store_node_put(s->store, &row, err);
	KN_FREE_ALL(devs, labels_text);
	return rc;
}

static bool runs_on(const struct run *r, size_t node)
{
	for (int t = 0; t < r->n_tasks; t++)
		if (r->bindings[t].node == node)
			return true;
	return false;
}

void nodes_evict_preemptible(struct server *s, size_t node, const char *why)
{
	int64_t *ids;
	size_t n = 0, cap = 0;

	for (struct run *r = s->runs; r; r = r->next)
		cap++;
	ids = kn_xcalloc(cap ? cap : 1, sizeof(*ids));
	/* Collect first: eviction may change the list of runs. */
	for (struct run *r = s->runs; r; r = r->next)
		if (r->spec->preemptible && !r->stopping && runs_on(r, node))
			ids[n++] = r->job_id;
	for (size_t i = 0; i < n; i++) {
		struct kn_error err;
		if (jobs_evict(s, NULL, ids[i], -1, why, &err) < 0)
			kn_log(KN_LOG_WARN, "evicting job %lld: %s",
			       (long long)ids[i], err.message);
	}
	free(ids);
}

bool core_node_busy(const struct server *s, size_t i)
{
	for (const struct run *r = s->runs; r; r = r->next)
		if (runs_on(r, i))
			return true;
	return false;
}

int64_t core_node_replica(struct server *s, size_t i)
{
	struct job_model model;

	for (const struct run *r = s->runs; r; r = r->next)
		if (!r->stopping && r->n_tasks > 0 && r->bindings[0].node == i &&
		    job_hooks_model(s->hooks, r->job_id, &model) &&
		    model.serves)
			return r->job_id;
	return 0;
}

/* cluster.nodes[i].name points into nodes[i]: after a move, again. */
static void nodes_repoint(struct server *s)
{
	for (size_t i = 0; i < s->cluster.n_nodes; i++)
		s->cluster.nodes[i].name = s->nodes[i].name;
}

/* The new node's row and its ledger interval, in one transaction. */
static int node_added_save(struct server *s, size_t n, struct kn_error *err)
{
	int rc = kn_store_begin(s->store, err);

	if (rc == 0)
		rc = nodes_save(s, n, err);
	if (rc == 0)
		rc = kn_store_node_state_open(s->store, s->nodes[n].name,
					      s->nodes[n].state, kn_now_ms(),
					      err);
	return core_store_end(s->store, rc, err);
}

int core_node_add(struct server *s, const struct node_new *nn,
		  struct kn_error *err)
{
	size_t n = s->cluster.n_nodes;
	struct server_node *node;
	int rc;

	s->nodes = kn_xrealloc(s->nodes, (n + 1) * sizeof(*s->nodes));
	s->cluster.nodes =
		kn_xrealloc(s->cluster.nodes, (n + 1) * sizeof(*s->cluster.nodes));
	node = &s->nodes[n];
	memset(node, 0, sizeof(*node));
	memset(&s->cluster.nodes[n], 0, sizeof(s->cluster.nodes[n]));
	nodes_repoint(s);
	rc = kn_devices_simulated(nn->gpus, &node->devices, err);
	if (rc < 0)
		return rc;
	kn_strlcpy(node->name, nn->name, sizeof(node->name));
	kn_strlcpy(node->state, nn->state, sizeof(node->state));
	kn_strlcpy(node->reason, nn->reason ? nn->reason : "",
		   sizeof(node->reason));
	s->cluster.n_nodes = n + 1;
	setup_sched_node(s, n);
	s->cluster.nodes[n].schedulable = strcmp(nn->state, "ready") == 0;
	rc = setup_labels(s, n, nn->labels, " ", nn->flag, err);
	if (rc == 0 && nn->running)
		rc = node_added_save(s, n, err);
	return rc < 0 ? rc : (int)n;
}

int core_node_remove(struct server *s, size_t i, struct kn_error *err)
{
	struct server_node *node = &s->nodes[i];
	char name[sizeof(node->name)];
	int rc;

	if (core_node_busy(s, i))
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
	rc = core_store_end(s->store, rc, err);
	if (rc < 0) {
		kn_strlcpy(node->state, "ready", sizeof(node->state));
		node->reason[0] = '\0';
		return rc;
	}
	KN_FREE_ALL(s->cluster.nodes[i].devices, node->labels,
		    node->labels_text);
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

/*
 * The engine's side of a state change (Slurm: scontrol update), with
 * who and why in Slurm's reason, so `sinfo -R` says it came from kiln.
 */
static void engine_set_node(struct server *s, const char *name,
			    const char *state, const char *reason)
{
	bool drain = strcmp(state, "ready") != 0;
	struct kn_error err;
	char why[192];

	/* The reason already names who ("cordoned by alice: ..."). */
	snprintf(why, sizeof(why), "kiln: %s",
		 reason && *reason ? reason : state);
	if (s->exec->ops->set_node(s->exec, name, drain, why, &err) < 0)
		kn_log(KN_LOG_WARN, "node %s: Slurm not told: %s", name,
		       err.message);
}

int nodes_set_state(struct server *s, const struct caller *c,
		    const char *name, const char *state, const char *reason,
		    struct kn_error *err)
{
	int i = nodes_find(s, name);
	struct server_node *node;
	struct kn_sched_node *sn;
	char prev_state[sizeof(node->state)], prev_reason[sizeof(node->reason)];
	int rc;

	if (i < 0)
		return kn_errorf(err, KN_ENOTFOUND, "name", "node %s not found "
				 "(this server runs node%s %s%s)", name,
				 s->cluster.n_nodes > 1 ? "s" : "",
				 s->nodes[0].name,
				 s->cluster.n_nodes > 1 ? ", ..." : "");
	node = &s->nodes[i];
	sn = &s->cluster.nodes[i];
	memcpy(prev_state, node->state, sizeof(prev_state));
	memcpy(prev_reason, node->reason, sizeof(prev_reason));
	kn_strlcpy(node->state, state, sizeof(node->state));
	kn_strlcpy(node->reason, reason ? reason : "", sizeof(node->reason));
	sn->schedulable = strcmp(state, "ready") == 0;
	rc = kn_store_begin(s->store, err);
	if (rc == 0)
		rc = nodes_save(s, (size_t)i, err);
	if (rc == 0)
		rc = kn_store_node_state_open(s->store, name, state, kn_now_ms(),
					      err);
	if (rc == 0) {
		struct kn_audit a;
		char object[96], detail[320];

		snprintf(object, sizeof(object), "node/%s", name);
		memset(&a, 0, sizeof(a));
		a.actor = c ? (char *)c->name : "system";
		a.role = c ? (char *)role_name(c->role) : "admin";
		a.action = !strcmp(state, "ready")       ? "node.uncordon"
			   : !strcmp(state, "draining")  ? "node.drain"
			   : !strcmp(state, "unhealthy") ? "node.health"
							 : "node.cordon";
		a.object = object;
		a.outcome = "ok";
		a.detail = (char *)reason;
		if (s->exec->ops->set_node && strcmp(state, "unhealthy")) {
			/* What the engine is asked to do is on the record. */
			snprintf(detail, sizeof(detail), "%s%sslurm: State=%s",
				 reason ? reason : "",
				 reason && *reason ? "; " : "",
				 strcmp(state, "ready") ? "DRAIN" : "RESUME");
			a.detail = detail;
		}
		rc = kn_store_audit_insert(s->store, &a, err);
	}
	rc = core_store_end(s->store, rc, err);
	if (rc < 0) {
		memcpy(node->state, prev_state, sizeof(prev_state));
		memcpy(node->reason, prev_reason, sizeof(prev_reason));
		sn->schedulable = strcmp(prev_state, "ready") == 0;
		return rc;
	}
	/* Unhealthy: `kiln health --drain` drains the node in Slurm
	   itself, with the check's own words (cmd_health.c). */
	if (s->exec->ops->set_node && strcmp(state, "unhealthy"))
		engine_set_node(s, name, state, reason);
	if (strcmp(prev_state, state) || strcmp(prev_reason, node->reason))
		feed_publish(s, "node.state",
			     json_pack("{s:s, s:s, s:o}", "node", name, "state",
				       state, "reason",
				       node->reason[0]
					       ? json_string(node->reason)
					       : json_null()));
	if (!strcmp(state, "draining"))
		nodes_evict_preemptible(s, (size_t)i,
					reason && *reason ? reason
							  : "node drained");
	return 0;
}

/* ---- fragmentation ---- */

/* A model group of the node's GPUs not in MIG mode: one pack node. */
struct frag_group {
	const char *model;
	int n_gpus;
	int index[KN_PACK_MAX_GPUS]; /* device index of each GPU position */
};

static int frag_groups(struct server *s, size_t node, struct frag_group *g,
		       int max)
{
	const struct kn_sched_node *sn = &s->cluster.nodes[node];
	int n = 0;

	for (size_t i = 0; i < sn->n_devices; i++) {
		const struct kn_sched_device *d = &sn->devices[i];
		int k;

		if (d->mig)
			continue;
		for (k = 0; k < n && strcmp(g[k].model, d->model); k++)
			;
		if (k == n) {
			if (n == max)
				continue;
			memset(&g[n], 0, sizeof(g[n]));
			g[n++].model = d->model;
		}
		if (g[k].n_gpus < KN_PACK_MAX_GPUS)
			g[k].index[g[k].n_gpus++] = d->index;
	}
	return n;
}

/*
 * The workload's distinct shapes (workload.c) as pack pods, GPUs only,
 * each weighing its count of jobs. Returns the number of pods; *specs
 * owns the strings, *jobs gets the jobs they stand for.
 */
static size_t frag_workload(struct server *s, struct kn_pack *pack,
			    const struct kn_pack_node_spec *nodes,
			    size_t n_nodes,
			    struct kn_pack_pod **out, size_t **weights,
			    char ***specs, size_t *jobs)
{
	size_t k = 0;

	*out = kn_xcalloc(s->n_shapes + 1, sizeof(**out));
	*weights = kn_xcalloc(s->n_shapes + 1, sizeof(**weights));
	*specs = kn_xcalloc(s->n_shapes + 1, sizeof(**specs));
	*jobs = 0;
	for (size_t i = 0; i < s->n_shapes; i++) {
		const struct kn_sched_shape *shape = &s->shapes[i];
		struct kn_pack_pod *p = &(*out)[k];
		int milli = shape->gpu_milli;

		p->num_gpu = milli >= 1000 ? milli / 1000 : 1;
		p->gpu_milli = milli >= 1000 ? 1000 : milli;
		if (p->num_gpu > KN_PACK_MAX_GPUS) {
			memset(p, 0, sizeof(*p));
			continue;
		}
		if (shape->n_gpu_models) {
			(*specs)[k] = kn_pack_gpu_spec(nodes, n_nodes, shape);
			p->gpu_spec = (*specs)[k];
			p->models = kn_pack_models(pack, p->gpu_spec,
						   &p->constrained);
		}
		(*weights)[k] = shape->count ? shape->count : 1;
		*jobs += (*weights)[k];
		k++;
	}
	return k;
}

/* Charge the node's running tasks' whole and shared GPUs to the pack
   nodes. */
static void frag_charge(struct server *s, size_t node, struct kn_pack *pack,
			const struct frag_group *g, int n_groups)
{
	for (struct run *r = s->runs; r; r = r->next)
		for (int t = 0; t < r->n_tasks; t++) {
			const struct kn_sched_binding *b = &r->bindings[t];
			struct kn_pack_pod pod = {0};
			int pos[KN_PACK_MAX_GPUS], n = 0, group = -1;

			if (b->node != node || b->mig_profile ||
			    b->n_devices == 0)
				continue;
			for (int d = 0; d < b->n_devices && n < KN_PACK_MAX_GPUS;
			     d++)
				for (int k = 0; k < n_groups; k++)
					for (int p = 0; p < g[k].n_gpus; p++)
						if (g[k].index[p] == b->devices[d]) {
							group = k;
							pos[n++] = p;
						}
			if (group < 0 || n != b->n_devices)
				continue;
			pod.num_gpu = n;
			pod.gpu_milli = b->milli_per_device;
			/* CPU and memory are the server's to count; the
			   measure is about GPUs. */
			kn_pack_bind(pack, (size_t)group, &pod, pos, n);
		}
}

json_t *nodes_fragmentation(struct server *s, size_t node)
{
	struct kn_pack_node_spec specs[KN_PACK_MAX_MODELS];
	struct frag_group g[KN_PACK_MAX_MODELS];
	struct kn_pack_pod *pods = NULL;
	size_t *weights = NULL, jobs = 0;
	struct kn_pack *pack = NULL;
	struct kn_error err;
	char **gpu_specs = NULL;
	size_t n_pods = 0, capacity = 0;
	int n_groups = frag_groups(s, node, g, KN_PACK_MAX_MODELS);
	double milli = 0;
	json_t *out = json_null();

	for (int k = 0; k < n_groups; k++) {
		memset(&specs[k], 0, sizeof(specs[k]));
		specs[k].name = s->nodes[node].name;
		specs[k].n_gpus = g[k].n_gpus;
		specs[k].model = g[k].model;
		capacity += (size_t)g[k].n_gpus * 1000;
	}
	if (n_groups == 0 ||
	    kn_pack_new(specs, (size_t)n_groups, &pack, &err) < 0)
		goto out;
	n_pods = frag_workload(s, pack, specs, (size_t)n_groups, &pods,
			       &weights, &gpu_specs, &jobs);
	if (n_pods == 0)
		goto out; /* no GPU job yet: nothing to measure against */
	kn_pack_set_typical_weighted(pack, pods, weights, n_pods);
	frag_charge(s, node, pack, g, n_groups);
	for (int k = 0; k < n_groups; k++)
		milli += kn_pack_node_frag(pack, (size_t)k);
	json_decref(out);
	out = json_pack("{s:f, s:f, s:I, s:I}", "milli", milli, "percent",
			100.0 * milli / (double)capacity, "workload_jobs",
			(json_int_t)jobs, "typical_shapes",
			(json_int_t)kn_pack_n_typical(pack));
out:
	for (size_t i = 0; gpu_specs && i < n_pods; i++)
		free(gpu_specs[i]);
	KN_FREE_ALL(gpu_specs, weights, pods);
	kn_pack_free(pack);
	return out;
}
