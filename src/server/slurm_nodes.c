/*
 * The cluster an engine keeps its own inventory of (Slurm's, through the
 * executor's inventory op): its nodes become the server's, so `kiln
 * nodes`, GET /v1/nodes and the scheduler's fit see what Slurm sees.
 *
 * Each Slurm node is a server node: whole GPUs from its gpu GRES (the
 * GRES type as the model, "gpu" when untyped), its CPUs and memory, and
 * labels slurm_partitions= and slurm_features=. It takes new work when
 * kiln has it ready and Slurm would start a job on it. Slurm's own state
 * and reason ride along for the listing. A node Slurm no longer lists
 * leaves once nothing runs on it.
 *
 * --gpus under Slurm declares the capacity by hand instead: the server's
 * one node stays as declared and the inventory serves the listing's
 * Slurm view and admission only.
 *
 * The first reading is waited for at start-up, at most FIRST_READ_MS
 * (no loop runs yet); then a timer looks every CHECK_MS, and asks for a
 * reading at once when the set of runs changed or a job ended.
 */
#include "internal.h"
#include "poolsvc.h"
#include "service.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FIRST_READ_MS 10000
#define CHECK_MS 1000

struct slurm_nodes {
	struct kn_slurm_inventory inv; /* a copy of the last reading */
	bool replaces;                 /* its nodes are the server's */
	struct kn_timer *timer;
	size_t runs_seen;
	bool job_ended;                /* since the last check */
	/* One-slice geometries of the MIG profiles Slurm lists, which the
	   scheduler's devices point to (mig_model). */
	struct kn_mig_model **mig_models;
	size_t n_mig_models;
};

static const struct kn_slurm_node *inv_node(const struct slurm_nodes *sn,
					    const char *name)
{
	for (size_t i = 0; i < sn->inv.n_nodes; i++)
		if (!strcmp(sn->inv.nodes[i].name, name))
			return &sn->inv.nodes[i];
	return NULL;
}

/* ---- one server node from one Slurm node ---- */

/*
 * The devices of a Slurm node: its whole GPUs (gpu GRES not typed as a
 * MIG profile), then one device per MIG instance Slurm lists
 * (gres/gpu:1g.10gb:N, or a100_1g.10gb). An instance is already made, so
 * its device holds exactly one instance of its profile and nothing else:
 * a geometry of one slice (mig_model), which kiln's MIG placement then
 * fills or leaves free like any other.
 */
struct gres_device {
	const char *model; /* the GRES type, "gpu" when untyped */
	const struct kn_slurm_gres *mig; /* the instance's GRES, or NULL */
};

/* Node n's devices into out (at most KN_MAX_DEVICES): how many. A MIG
   profile too long for kiln's tables is left out: none could ask for it. */
static size_t gres_devices(const struct kn_slurm_node *n,
			   struct gres_device *out)
{
	const char *type = kn_slurm_node_gpu_type(n);
	int64_t gpus = kn_slurm_node_gpus(n);
	size_t k = 0;

	for (int64_t g = 0; g < gpus && k < KN_MAX_DEVICES; g++)
		out[k++] = (struct gres_device){type[0] ? type : "gpu", NULL};
	for (size_t i = 0; i < n->n_gres; i++) {
		const struct kn_slurm_gres *gr = &n->gres[i];

		if (!gr->mig || strlen(kn_slurm_gres_mig_profile(gr)) >=
					sizeof(((struct kn_mig_profile *)0)->name))
			continue;
		for (int64_t c = 0; c < gr->count && k < KN_MAX_DEVICES; c++)
			out[k++] = (struct gres_device){gr->type, gr};
	}
	return k;
}

/*
 * The one-slice geometry of MIG instances of g's profile (a name that
 * fits, gres_devices), shared by every device of that profile and kept
 * until the server stops.
 */
static const struct kn_mig_model *mig_model(struct slurm_nodes *sl,
					    const struct kn_slurm_gres *g)
{
	const char *profile = kn_slurm_gres_mig_profile(g);
	struct kn_mig_model *m;

	for (size_t i = 0; i < sl->n_mig_models; i++)
		if (!strcmp(sl->mig_models[i]->profiles[0].name, profile))
			return sl->mig_models[i];
	m = kn_xcalloc(1, sizeof(*m));
	snprintf(m->name, sizeof(m->name), "slurm:%s", profile);
	m->compute = m->memory = 1;
	kn_strlcpy(m->profiles[0].name, profile, sizeof(m->profiles[0].name));
	m->profiles[0].compute = m->profiles[0].memory = 1;
	m->profiles[0].max_instances = 1;
	m->profiles[0].starts = 1;
	m->n_profiles = 1;
	sl->mig_models = kn_xrealloc(sl->mig_models, (sl->n_mig_models + 1) *
							     sizeof(*sl->mig_models));
	sl->mig_models[sl->n_mig_models++] = m;
	return m;
}

/* Whether node i's devices are other than want[0..n). */
static bool devices_differ(const struct server_node *node,
			   const struct gres_device *want, size_t n)
{
	if (node->devices.n != n)
		return true;
	for (size_t k = 0; k < n; k++)
		if (strcmp(node->devices.devices[k].model, want[k].model) ||
		    node->devices.devices[k].mig != (want[k].mig != NULL))
			return true;
	return false;
}

/* What runs hold of node i's devices, charged again. */
static void devices_charge(struct server *s, size_t i)
{
	struct kn_sched_node *sn = &s->cluster.nodes[i];

	for (const struct run *r = s->runs; r; r = r->next)
		for (int t = 0; t < r->n_tasks; t++) {
			const struct kn_sched_binding *b = &r->bindings[t];

			for (int d = 0; b->node == i && d < b->n_devices; d++) {
				struct kn_sched_device *sd;

				if (b->devices[d] < 0 ||
				    (size_t)b->devices[d] >= sn->n_devices)
					continue;
				sd = &sn->devices[b->devices[d]];
				if (!b->mig_profile) {
					sd->used_milli += b->milli_per_device;
				} else if (sd->mig &&
					   sd->n_mig_slices < KN_MIG_MAX_SLICES) {
					sd->mig_slices[sd->n_mig_slices]
						.profile = kn_mig_profile(
						sd->mig, b->mig_profile->name);
					sd->mig_slices[sd->n_mig_slices++]
						.start = b->mig_start;
				}
			}
		}
}

/* Node i's devices from Slurm, with what its runs hold charged again. */
static void devices_set(struct server *s, size_t i,
			const struct gres_device *want, size_t n)
{
	struct server_node *node = &s->nodes[i];
	struct kn_sched_node *sn = &s->cluster.nodes[i];

	kn_device_set_release(&node->devices);
	free(sn->devices);
	node->devices.devices = kn_xcalloc(n ? n : 1,
					   sizeof(*node->devices.devices));
	node->devices.n = n;
	kn_strlcpy(node->devices.source, "slurm",
		   sizeof(node->devices.source));
	sn->devices = kn_xcalloc(n ? n : 1, sizeof(*sn->devices));
	sn->n_devices = n;
	for (size_t k = 0; k < n; k++) {
		struct kn_device_info *d = &node->devices.devices[k];

		d->index = (int)k;
		kn_strlcpy(d->model, want[k].model, sizeof(d->model));
		snprintf(d->uuid, sizeof(d->uuid), "slurm-%s-gpu%zu",
			 node->name, k);
		sn->devices[k].index = (int)k;
		sn->devices[k].model = d->model;
		if (want[k].mig) {
			d->mig = true;
			sn->devices[k].mig =
				mig_model(s->slurm_nodes, want[k].mig);
		}
	}
	devices_charge(s, i);
}

/* "slurm_partitions=a,b slurm_features=x": the labels node i gets. */
static char *labels_text(const struct kn_slurm_node *n)
{
	return kn_asprintf("%s%s%s%s%s", n->partitions[0] ? "slurm_partitions="
							  : "",
			   n->partitions, n->features[0] ? " " : "",
			   n->features[0] ? "slurm_features=" : "",
			   n->features);
}

/* Bring server node i to what Slurm says of it; true when changed. */
static bool node_update(struct server *s, size_t i,
			const struct kn_slurm_node *n)
{
	struct server_node *node = &s->nodes[i];
	struct kn_sched_node *sn = &s->cluster.nodes[i];
	struct gres_device want[KN_MAX_DEVICES];
	size_t n_want = gres_devices(n, want);
	char *labels = labels_text(n);
	bool changed = false;
	struct kn_error err;

	if (devices_differ(node, want, n_want)) {
		devices_set(s, i, want, n_want);
		changed = true;
	}
	if (sn->cpu_milli_total != n->cpus * 1000 ||
	    sn->memory_total != (n->memory_mb << 20)) {
		sn->cpu_milli_total = n->cpus * 1000;
		sn->memory_total = n->memory_mb << 20;
		changed = true;
	}
	if (!node->labels_text || strcmp(node->labels_text, labels)) {
		KN_FREE_ALL(node->labels, node->labels_text);
		node->labels = NULL;
		node->labels_text = NULL;
		sn->labels = NULL;
		sn->n_labels = 0;
		/* Slurm's names hold no space or '=' (slurm_nodes.c). */
		if (setup_labels(s, i, labels, " ", "slurm", &err) < 0)
			kn_log(KN_LOG_WARN, "slurm: node %s: %s", node->name,
			       err.message);
		changed = true;
	}
	free(labels);
	sn->schedulable = n->schedulable && !strcmp(node->state, "ready");
	return changed;
}

static int row_name_cmp(const void *name, const void *row)
{
	return strcmp(name, ((const struct kn_node_row *)row)->name);
}

/*
 * The state kiln last kept for node i in the store, rows (by name, as
 * the store lists them: a search, where a scan per node made adding
 * thousands quadratic); a cordon outlives a restart, as for the server's
 * own nodes. Ready when none, or when the row says Slurm had dropped it.
 */
static void stored_state(struct server *s, size_t i,
			 const struct kn_node_row *rows, size_t n_rows)
{
	struct server_node *node = &s->nodes[i];
	const struct kn_node_row *row =
		n_rows ? bsearch(node->name, rows, n_rows, sizeof(*rows),
				 row_name_cmp)
		       : NULL;

	kn_strlcpy(node->state, "ready", sizeof(node->state));
	if (row && strcmp(row->state, "removed")) {
		kn_strlcpy(node->state, row->state, sizeof(node->state));
		kn_strlcpy(node->reason, row->reason ? row->reason : "",
			   sizeof(node->reason));
	}
}

/* A Slurm node kiln has not had yet, in the state kiln kept for it. */
static void node_add(struct server *s, const struct kn_slurm_node *n,
		     const struct kn_node_row *rows, size_t n_rows)
{
	size_t i = s->cluster.n_nodes;
	struct kn_error err;

	s->nodes = kn_xrealloc(s->nodes, (i + 1) * sizeof(*s->nodes));
	s->cluster.nodes =
		kn_xrealloc(s->cluster.nodes, (i + 1) * sizeof(*s->cluster.nodes));
	memset(&s->nodes[i], 0, sizeof(s->nodes[i]));
	memset(&s->cluster.nodes[i], 0, sizeof(s->cluster.nodes[i]));
	for (size_t k = 0; k < i; k++)
		s->cluster.nodes[k].name = s->nodes[k].name;
	kn_strlcpy(s->nodes[i].name, n->name, sizeof(s->nodes[i].name));
	stored_state(s, i, rows, n_rows);
	kn_strlcpy(s->nodes[i].devices.source, "slurm",
		   sizeof(s->nodes[i].devices.source));
	s->cluster.n_nodes = i + 1;
	setup_sched_node(s, i);
	node_update(s, i, n);
	if (nodes_save(s, i, &err) < 0 ||
	    kn_store_node_state_open(s->store, n->name, s->nodes[i].state,
				     kn_now_ms(), &err) < 0)
		kn_log(KN_LOG_WARN, "slurm: node %s: %s", n->name, err.message);
	feed_publish(s, "node.added",
		     json_pack("{s:s, s:s}", "node", n->name, "engine",
			       "slurm"));
}

/*
 * The server's node named name, looked for first at *hint (Slurm lists
 * its nodes in the same order each time, and kiln added them in that
 * order), then everywhere; -1 when none. *hint moves past a hit.
 */
static int node_index(const struct server *s, const char *name,
		      size_t *hint)
{
	int i;

	if (*hint < s->cluster.n_nodes && !strcmp(s->nodes[*hint].name, name))
		i = (int)*hint;
	else
		i = nodes_find(s, name);
	if (i >= 0)
		*hint = (size_t)i + 1;
	return i;
}

/*
 * The server's nodes made Slurm's, in one transaction: new ones added,
 * changed ones saved; then those Slurm no longer lists go once nothing
 * runs on them, each row kept as removed.
 */
static void nodes_sync(struct server *s, const struct slurm_nodes *sl)
{
	struct kn_node_row *rows = NULL;
	size_t n_rows = 0, hint = 0, added = 0, before = s->cluster.n_nodes;
	bool *seen = kn_xcalloc(before + sl->inv.n_nodes + 1, sizeof(*seen));
	struct kn_error err;
	int rc = kn_store_node_list(s->store, &rows, &n_rows, &err);

	if (rc == 0)
		rc = kn_store_begin(s->store, &err);
	if (rc < 0)
		kn_log(KN_LOG_WARN, "slurm: nodes: %s", err.message);
	for (size_t k = 0; k < sl->inv.n_nodes; k++) {
		const struct kn_slurm_node *n = &sl->inv.nodes[k];
		int i = node_index(s, n->name, &hint);

		if (i < 0) {
			node_add(s, n, rows, n_rows);
			i = (int)s->cluster.n_nodes - 1;
			added++;
		} else if (node_update(s, (size_t)i, n) &&
			   nodes_save(s, (size_t)i, &err) < 0) {
			kn_log(KN_LOG_WARN, "slurm: node %s: %s", n->name,
			       err.message);
		}
		seen[i] = true;
	}
	/* A failed commit has rolled back. */
	if (rc == 0 && kn_store_commit(s->store, &err) < 0)
		kn_log(KN_LOG_WARN, "slurm: nodes not stored: %s", err.message);
	kn_node_list_free(rows, n_rows);
	if (added)
		kn_log(KN_LOG_INFO, "slurm: %zu node%s added (%zu listed)",
		       added, added == 1 ? "" : "s", sl->inv.n_nodes);
	/* Backwards: a removal moves the nodes after it down one. */
	for (size_t i = s->cluster.n_nodes; sl->inv.n_nodes && i-- > 0;) {
		if (seen[i])
			continue;
		s->cluster.nodes[i].schedulable = false;
		if (pool_node_remove(s, i, &err) < 0)
			kn_log(KN_LOG_INFO, "slurm: node %s stays until its "
			       "work ends: %s", s->nodes[i].name, err.message);
	}
	free(seen);
	if (s->loop)
		jobs_wake(s); /* not at start-up: the first turn is to come */
}

/* ---- readings ---- */

/*
 * An event for each node whose Slurm state or reason the reading changed
 * (old: the one before), so `kiln nodes -w` and the console follow Slurm.
 */
static void publish_changes(struct server *s,
			    const struct kn_slurm_inventory *old,
			    const struct kn_slurm_inventory *inv)
{
	for (size_t k = 0; k < inv->n_nodes; k++) {
		const struct kn_slurm_node *n = &inv->nodes[k], *o = NULL;

		if (k < old->n_nodes && !strcmp(old->nodes[k].name, n->name))
			o = &old->nodes[k];
		for (size_t j = 0; !o && j < old->n_nodes; j++)
			if (!strcmp(old->nodes[j].name, n->name))
				o = &old->nodes[j];
		if (o && !strcmp(o->state, n->state) &&
		    !strcmp(o->reason, n->reason))
			continue;
		feed_publish(s, "node.slurm",
			     json_pack("{s:s, s:s, s:o}", "node", n->name,
				       "state", n->state, "reason",
				       n->reason[0] ? json_string(n->reason)
						    : json_null()));
	}
}

static void inventory_take(struct server *s,
			   const struct kn_slurm_inventory *inv)
{
	struct slurm_nodes *sl = s->slurm_nodes;

	if (s->loop)
		publish_changes(s, &sl->inv, inv);
	kn_slurm_inventory_release(&sl->inv);
	sl->inv.nodes = kn_xcalloc(inv->n_nodes ? inv->n_nodes : 1,
				   sizeof(*inv->nodes));
	memcpy(sl->inv.nodes, inv->nodes, inv->n_nodes * sizeof(*inv->nodes));
	sl->inv.n_nodes = inv->n_nodes;
	sl->inv.partitions = kn_xcalloc(inv->n_partitions ? inv->n_partitions
							  : 1,
					sizeof(*inv->partitions));
	memcpy(sl->inv.partitions, inv->partitions,
	       inv->n_partitions * sizeof(*inv->partitions));
	sl->inv.n_partitions = inv->n_partitions;
	if (sl->replaces)
		nodes_sync(s, sl);
}

static size_t runs_count(const struct server *s)
{
	size_t n = 0;

	for (const struct run *r = s->runs; r; r = r->next)
		n++;
	return n;
}

static void on_check(void *arg)
{
	struct server *s = arg;
	struct slurm_nodes *sl = s->slurm_nodes;
	size_t runs = runs_count(s);
	const struct kn_slurm_inventory *inv = s->exec->ops->inventory(
		s->exec, runs != sl->runs_seen || sl->job_ended);

	sl->runs_seen = runs;
	sl->job_ended = false;
	if (inv)
		inventory_take(s, inv);
	kn_timer_arm(sl->timer, CHECK_MS);
}

static int slurm_nodes_start(struct server *s, struct kn_error *err)
{
	const struct kn_slurm_inventory *inv = NULL;
	int64_t deadline = kn_mono_ms() + FIRST_READ_MS;

	(void)err;
	if (!s->exec->ops->inventory)
		return 0;
	s->slurm_nodes = kn_xcalloc(1, sizeof(*s->slurm_nodes));
	s->slurm_nodes->replaces = !s->cfg.gpus;
	for (bool first = true; !inv && kn_mono_ms() < deadline;
	     first = false) {
		inv = s->exec->ops->inventory(s->exec, first);
		if (!inv)
			nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
	}
	if (inv)
		inventory_take(s, inv);
	else
		kn_log(KN_LOG_WARN, "slurm: no reading of the cluster's nodes "
		       "within %d s; the server's own node stands in until "
		       "one comes", FIRST_READ_MS / 1000);
	return 0;
}

static void slurm_nodes_run(struct server *s)
{
	if (!s->slurm_nodes)
		return;
	s->slurm_nodes->timer = kn_timer_new(s->loop, on_check, s);
	kn_timer_arm(s->slurm_nodes->timer, CHECK_MS);
}

static void slurm_nodes_stop(struct server *s)
{
	if (!s->slurm_nodes)
		return;
	kn_timer_free(s->slurm_nodes->timer);
	kn_slurm_inventory_release(&s->slurm_nodes->inv);
	for (size_t i = 0; i < s->slurm_nodes->n_mig_models; i++)
		free(s->slurm_nodes->mig_models[i]);
	KN_FREE_ALL(s->slurm_nodes->mig_models, s->slurm_nodes);
	s->slurm_nodes = NULL;
}

json_t *slurm_nodes_json(const struct server *s, size_t i)
{
	const struct slurm_nodes *sl = s->slurm_nodes;
	const char *name = s->nodes[i].name;
	const struct kn_slurm_node *n =
		!sl ? NULL
		: i < sl->inv.n_nodes && !strcmp(sl->inv.nodes[i].name, name)
			? &sl->inv.nodes[i]
			: inv_node(sl, name);
	json_t *gres;

	if (!n)
		return NULL;
	gres = json_array();
	for (size_t k = 0; k < n->n_gres; k++)
		json_array_append_new(
			gres, json_pack("{s:s, s:s, s:I, s:I, s:b}", "name",
					n->gres[k].name, "type",
					n->gres[k].type, "count",
					(json_int_t)n->gres[k].count, "used",
					(json_int_t)n->gres[k].used, "mig",
					n->gres[k].mig));
	return json_pack("{s:s, s:s, s:o, s:s, s:s, s:i, s:i, s:I, s:I, s:o, "
			 "s:b}",
			 "state", n->state, "flags", n->flags, "reason",
			 n->reason[0] ? json_string(n->reason) : json_null(),
			 "partitions", n->partitions, "features", n->features,
			 "cpus", n->cpus, "cpus_allocated", n->cpus_alloc,
			 "memory_mb", (json_int_t)n->memory_mb,
			 "memory_allocated_mb", (json_int_t)n->memory_alloc_mb,
			 "gres", gres, "schedulable", n->schedulable);
}

/* A job's end frees what it held in Slurm: read again at once. */
static void on_job_ended(void *arg, int64_t job_id)
{
	struct server *s = arg;

	(void)job_id;
	if (s->slurm_nodes)
		s->slurm_nodes->job_ended = true;
}

static const struct job_hook_ops hooks = {
	.name = "slurm_nodes",
	.job_ended = on_job_ended,
};

const struct service slurm_nodes_service = {
	.name = "slurm_nodes",
	.phase = SERVICE_PHASE_NODES,
	.hooks = &hooks,
	.start = slurm_nodes_start,
	.run = slurm_nodes_run,
	.stop = slurm_nodes_stop,
};
