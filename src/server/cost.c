/*
 * The cost ledger in the server: what it records as it happens, and GET
 * /v1/cost, which prices that record with src/cost's ledger.
 *
 * Recorded: each node's state over time (node_states: an interval opens
 * at start-up and at every state change, all close on a clean stop; after
 * a crash the open ones close when the server starts again, so the time it
 * was down counts in the state it was in). Task allocations are already in
 * the store (tasks: node, devices, milli per device, start and end), as
 * are each attempt's outcome and last checkpoint time (attempts) and each
 * replica job's deployment (job_deployments, written with the replica).
 *
 * Prices: each node's labels sku= and pricing= (the local node's come
 * from --node-sku / --node-pricing), looked up in the shipped catalogs and
 * --catalog's rows. A node without a known size or price is costed at 0
 * and reported unpriced; its size is never guessed.
 */
#include "costsvc.h"
#include "devenvsvc.h"
#include "service.h"

#include "server/core.h"

#include "cost/cost.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* What a row's efficiency is, in the answer and under the table. */
#define EFFICIENCY_SOURCE                                                  \
	"used over requested from per-task samples: GPU utilisation x "    \
	"share over GPU time held, CPU cores used over requested, "        \
	"resident memory over requested; a row's figure is the mean of "   \
	"those it has (- when none was sampled)"

/* The default window of GET /v1/cost: 30 days. */
#define COST_DEFAULT_WINDOW_MS (30LL * 24 * 60 * 60 * 1000)

/* The service's own state (its slot in the core). */
struct cost_state {
	struct server *core;
	struct kn_store *store;
	struct kn_catalog *catalog;
	const struct kn_mig_table *mig; /* NULL: no device in MIG mode */
};

/* Load the catalogs, check each node's pricing label and open each node's
   state interval (the nodes, pools' too, exist by then). */
static int cost_start(struct server *core, struct kn_error *err)
{
	struct cost_state *cs = kn_xcalloc(1, sizeof(*cs));
	size_t n_nodes = core_node_count(core);
	int64_t now = kn_now_ms();
	int rc = 0;

	cs->core = core;
	cs->store = core_store(core);
	cs->mig = core_mig(core);
	cs->catalog = kn_catalog_new();
	service_state_set(core, &cost_service, cs);
	/* Without the shipped catalogs (a data directory removed) nodes
	   are unpriced, which the reports say; the server still runs. A bad --catalog is the user's to fix: refused. */
	if (kn_catalog_load_shipped(cs->catalog, err) < 0)
		kn_log(KN_LOG_WARN, "cost ledger: %s", err->message);
	if (core_config(core)->cost_catalog)
		rc = kn_catalog_load(cs->catalog, core_config(core)->cost_catalog,
				     err);
	for (size_t i = 0; rc == 0 && i < n_nodes; i++) {
		const char *pricing = core_node_label(core, i, "pricing");
		enum kn_pricing p;

		if (pricing && kn_pricing_parse(pricing, &p, err) < 0) {
			char why[sizeof(err->message)];

			kn_strlcpy(why, err->message, sizeof(why));
			rc = kn_errorf(err, KN_EINVAL, "pricing",
				       "node %s: label pricing=%s: %s",
				       core_node_name(core, i), pricing, why);
		}
	}
	if (rc == 0)
		rc = kn_store_begin(cs->store, err);
	for (size_t i = 0; rc == 0 && i < n_nodes; i++)
		rc = kn_store_node_state_open(cs->store, core_node_name(core, i),
					      core_node_state(core, i), now,
					      err);
	return core_store_end(cs->store, rc, err);
}

/* Close the open state intervals (a clean stop) and free the catalog. */
static void cost_stop(struct server *core)
{
	struct cost_state *cs = service_state(core, &cost_service);
	struct kn_error err;

	if (!cs)
		return;
	if (kn_store_node_state_close_all(cs->store, kn_now_ms(), &err) < 0)
		kn_log(KN_LOG_WARN, "closing node states: %s", err.message);
	kn_catalog_free(cs->catalog);
	free(cs);
}

const struct kn_catalog *cost_catalog(struct server *core)
{
	struct cost_state *cs = service_state(core, &cost_service);

	return cs ? cs->catalog : NULL;
}

/* ---- GET /v1/cost ---- */

/* Read the node's sku and pricing labels from its stored labels. */
static void stored_labels(const struct kn_node_row *n, const char **sku,
			  enum kn_pricing *pricing, json_t **labels)
{
	json_t *l = json_loads(n->labels_json ? n->labels_json : "{}", 0, NULL);
	const char *p;
	struct kn_error err;

	*labels = l;
	*sku = json_string_value(json_object_get(l, "sku"));
	p = json_string_value(json_object_get(l, "pricing"));
	*pricing = KN_PRICING_ON_DEMAND;
	if (p)
		kn_pricing_parse(p, pricing, &err);
}

/*
 * The share of one GPU a task held per device, in milli: its gpu_milli,
 * or for a MIG instance ("0:mig=1g.10gb@6") its compute slices over the
 * GPU's (seven 1g instances fill an A100). 0 when it cannot be told.
 */
static int task_milli(const struct cost_state *cs, const struct kn_node_row *node,
		      const struct kn_cost_task_row *t, int *n_devices)
{
	char profile[32];
	int index, start;
	const struct kn_mig_model *model = NULL;
	const struct kn_mig_profile *p;

	*n_devices = 1;
	if (!strstr(t->devices, ":mig=")) {
		for (const char *c = t->devices; *c; c++)
			*n_devices += *c == ',';
		return t->gpu_milli;
	}
	if (!node || !cs->mig ||
	    sscanf(t->devices, "%d:mig=%31[^@]@%d", &index, profile, &start) != 3)
		return 0;
	for (size_t d = 0; d < node->n_devices; d++)
		if (node->devices[d].index == index && node->devices[d].model)
			model = kn_mig_find(cs->mig, node->devices[d].model);
	p = model ? kn_mig_profile(model, profile) : NULL;
	if (!p || model->compute <= 0)
		return 0;
	return (p->compute * 1000 + model->compute / 2) / model->compute;
}

static json_t *row_json(const struct kn_ledger_row *r)
{
	json_t *by_resource = json_object();
	double eff;
	json_t *o = json_pack(
		"{s:s, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:b}",
		"key", r->key, "gpu_seconds", kn_ledger_gpu_seconds(r->busy_mms),
		"cost_usd", r->busy_usd, "idle_gpu_seconds",
		kn_ledger_gpu_seconds(r->idle_mms), "idle_cost_usd", r->idle_usd,
		"unhealthy_gpu_seconds", kn_ledger_gpu_seconds(r->unhealthy_mms),
		"unhealthy_cost_usd", r->unhealthy_usd, "lost_gpu_seconds",
		kn_ledger_gpu_seconds(r->lost_mms), "lost_cost_usd", r->lost_usd,
		"total_cost_usd", kn_ledger_total_usd(r), "goodput",
		kn_ledger_goodput(r), "unpriced", r->unpriced);

	json_object_set_new(o, "efficiency",
			    kn_ledger_efficiency(r, &eff) ? json_real(eff)
							  : json_null());
	for (int i = 0; i < KN_EFFS; i++)
		json_object_set_new(
			by_resource, kn_efficiency_name((enum kn_efficiency_of)i),
			kn_ledger_resource_efficiency(
				r, (enum kn_efficiency_of)i, &eff)
				? json_real(eff)
				: json_null());
	json_object_set_new(o, "efficiency_by_resource", by_resource);
	return o;
}

/* since/until: Unix milliseconds; -1 with a reply sent when bad. */
static int query_window(struct kn_http_req *req, int64_t now, int64_t *since,
			int64_t *until)
{
	*since = now - COST_DEFAULT_WINDOW_MS;
	*until = now;
	if (kn_http_query_int(req, "since", 0, INT64_MAX, since) < 0 ||
	    kn_http_query_int(req, "until", 1, INT64_MAX, until) < 0 ||
	    *until <= *since) {
		struct kn_error err;

		kn_errorf(&err, KN_EINVAL, "since",
			  "since and until are Unix milliseconds, since before "
			  "until");
		kn_http_reply_error(req, &err);
		return -1;
	}
	return 0;
}

/* One task's usage sketches (task_usage) and what it asked for. */
struct task_usage {
	int64_t job_id;
	int attempt, rank;
	const char *job_name;     /* into the record's usage rows */
	int cpu_milli;            /* requested; 0: not */
	int64_t memory_bytes;     /* requested; 0: not */
	double gpu_memory_bytes;  /* held: its devices' memory x share; 0:
				     none or unknown (MIG) */
	double gpu_device_bytes;  /* one of its devices' memory */
	bool has[KN_USAGE_RESOURCES];
	struct kn_usage_hist h[KN_USAGE_RESOURCES];
};

/* What the store recorded for a window, and the ledger it fills. */
struct record {
	struct kn_node_row *nodes;
	size_t n_nodes;
	struct kn_node_state_row *states;
	size_t n_states;
	struct kn_cost_task_row *tasks;
	size_t n_tasks;
	struct kn_ledger *ledger;
	json_t *node_list, *state_list, *alloc_list; /* for ?detail=1 */
	int unresolved; /* tasks whose share could not be told */
	struct kn_cost_task_row *cpu_tasks; /* tasks without devices */
	size_t n_cpu_tasks;
	struct kn_task_usage_row *usage_rows;
	size_t n_usage_rows;
	struct task_usage *usage; /* by job, attempt and rank */
	size_t n_usage;
};

static void record_release(struct record *rec)
{
	json_decref(rec->node_list);
	json_decref(rec->state_list);
	json_decref(rec->alloc_list);
	kn_ledger_free(rec->ledger);
	kn_node_list_free(rec->nodes, rec->n_nodes);
	kn_node_state_list_free(rec->states, rec->n_states);
	kn_cost_task_list_free(rec->tasks, rec->n_tasks);
	kn_cost_task_list_free(rec->cpu_tasks, rec->n_cpu_tasks);
	kn_task_usage_list_free(rec->usage_rows, rec->n_usage_rows);
	free(rec->usage);
}

static const struct kn_node_row *record_node(const struct record *rec,
					     const char *name)
{
	for (size_t k = 0; k < rec->n_nodes; k++)
		if (!strcmp(rec->nodes[k].name, name))
			return &rec->nodes[k];
	return NULL;
}

/* The memory of device index on node, 0 when unknown. */
static double device_bytes(const struct kn_node_row *node, int index)
{
	for (size_t d = 0; node && d < node->n_devices; d++)
		if (node->devices[d].index == index)
			return (double)node->devices[d].memory_bytes;
	return 0;
}

/* The requests of a task from its job's spec and its devices. */
static void usage_requests(const struct record *rec,
			   const struct kn_task_usage_row *row,
			   struct task_usage *u)
{
	json_t *spec = json_loads(row->spec_json ? row->spec_json : "{}", 0,
				  NULL);
	json_t *res = json_object_get(spec, "resources");
	const struct kn_node_row *node = record_node(rec, row->node);
	const char *p = row->devices ? row->devices : "";

	u->cpu_milli = (int)json_integer_value(json_object_get(res, "cpu_milli"));
	u->memory_bytes = json_integer_value(json_object_get(res,
							     "memory_bytes"));
	json_decref(spec);
	/* A MIG instance's memory is its profile's, not a share of the
	   GPU's: left unknown. */
	if (strstr(p, ":mig=") || row->gpu_milli <= 0)
		return;
	while (*p) {
		char *end;
		long index = strtol(p, &end, 10);
		double bytes;

		if (end == p)
			break;
		bytes = device_bytes(node, (int)index);
		u->gpu_device_bytes = bytes;
		u->gpu_memory_bytes += bytes * row->gpu_milli / 1000.0;
		p = *end == ',' ? end + 1 : end;
		if (*end && *end != ',')
			break;
	}
}

/* Group the usage rows by task: one sketch per resource. */
static void usage_group(struct record *rec)
{
	rec->usage = kn_xcalloc(rec->n_usage_rows + 1, sizeof(*rec->usage));
	for (size_t i = 0; i < rec->n_usage_rows; i++) {
		const struct kn_task_usage_row *row = &rec->usage_rows[i];
		struct task_usage *u = rec->n_usage ? &rec->usage[rec->n_usage - 1]
						    : NULL;
		enum kn_usage_resource r;
		struct kn_error err;

		if (!u || u->job_id != row->job_id ||
		    u->attempt != row->attempt || u->rank != row->rank) {
			u = &rec->usage[rec->n_usage++];
			u->job_id = row->job_id;
			u->attempt = row->attempt;
			u->rank = row->rank;
			u->job_name = row->job_name ? row->job_name : "";
			usage_requests(rec, row, u);
		}
		if (kn_usage_resource_parse(row->resource, &r, &err) < 0)
			continue;
		kn_usage_hist_init(&u->h[r], r);
		if (kn_usage_hist_decode(&u->h[r], row->histogram, &err) < 0)
			continue;
		u->h[r].samples = row->samples;
		u->h[r].sum = row->sum;
		u->h[r].max = row->max;
		u->has[r] = row->samples > 0;
	}
}

static int usage_cmp(const void *key, const void *elem)
{
	const struct kn_cost_task_row *t = key;
	const struct task_usage *u = elem;

	if (t->job_id != u->job_id)
		return t->job_id < u->job_id ? -1 : 1;
	if (t->attempt != u->attempt)
		return t->attempt < u->attempt ? -1 : 1;
	return t->rank - u->rank;
}

static const struct task_usage *usage_find(const struct record *rec,
					   const struct kn_cost_task_row *t)
{
	return rec->n_usage ? bsearch(t, rec->usage, rec->n_usage,
				      sizeof(*rec->usage), usage_cmp)
			    : NULL;
}

/*
 * A task's usage into its ledger allocation: requests, and the means of
 * its samples. GPU utilisation is sampled as the fraction of the GPU's
 * time its processes kept busy; over a share that is used / held.
 */
static void usage_fill(const struct task_usage *u, struct kn_ledger_alloc *a)
{
	a->gpu_util = -1;
	a->cpu_milli_used = -1;
	a->memory_bytes_used = -1;
	if (!u)
		return;
	a->cpu_milli = u->cpu_milli;
	a->memory_bytes = u->memory_bytes;
	if (u->has[KN_USAGE_CPU])
		a->cpu_milli_used = kn_usage_hist_mean(&u->h[KN_USAGE_CPU]);
	if (u->has[KN_USAGE_MEMORY])
		a->memory_bytes_used =
			kn_usage_hist_mean(&u->h[KN_USAGE_MEMORY]);
	if (u->has[KN_USAGE_GPU_UTIL] && a->milli_per_device > 0) {
		double util = kn_usage_hist_mean(&u->h[KN_USAGE_GPU_UTIL]) /
			      a->milli_per_device;

		a->gpu_util = util > 1 ? 1 : util;
	}
}

static int record_nodes(const struct cost_state *cs, struct record *rec,
			struct kn_error *err)
{
	for (size_t i = 0; i < rec->n_nodes; i++) {
		const struct kn_vm_size *size;
		const char *sku;
		enum kn_pricing pricing;
		json_t *labels;
		double usd;
		bool priced;

		stored_labels(&rec->nodes[i], &sku, &pricing, &labels);
		if (kn_ledger_add_node(rec->ledger, rec->nodes[i].name, sku,
				       pricing, (int)rec->nodes[i].n_devices,
				       err) < 0) {
			json_decref(labels);
			return -EINVAL;
		}
		size = sku ? kn_catalog_find(cs->catalog, sku) : NULL;
		priced = kn_vm_size_gpu_price(size, pricing, &usd);
		json_array_append_new(
			rec->node_list,
			json_pack("{s:s, s:s?, s:s, s:i, s:o, s:b}", "name",
				  rec->nodes[i].name, "sku", sku, "pricing",
				  kn_pricing_name(pricing), "gpus",
				  (int)rec->nodes[i].n_devices, "gpu_usd_hr",
				  priced ? json_real(usd) : json_null(),
				  "priced", priced));
		json_decref(labels);
	}
	return 0;
}

static int record_states(struct record *rec, struct kn_error *err)
{
	for (size_t i = 0; i < rec->n_states; i++) {
		const struct kn_node_state_row *st = &rec->states[i];

		if (kn_ledger_add_state(rec->ledger, st->node,
					strcmp(st->state, "unhealthy")
						? KN_LEDGER_UP
						: KN_LEDGER_UNHEALTHY,
					st->started_at, st->ended_at, err) < 0)
			return -EINVAL;
		json_array_append_new(
			rec->state_list,
			json_pack("{s:s, s:s, s:I, s:I}", "node", st->node,
				  "state", st->state, "start_ms",
				  (json_int_t)st->started_at, "end_ms",
				  (json_int_t)st->ended_at));
	}
	return 0;
}

/* The ledger's record of task t: where, whose and when it ran. */
static void task_alloc(const struct kn_cost_task_row *t,
		       struct kn_ledger_alloc *a)
{
	a->node = t->node;
	a->job_id = t->job_id;
	a->attempt = t->attempt;
	a->user = t->owner;
	a->deployment = t->deployment;
	a->start_ms = t->started_at;
	a->end_ms = t->ended_at;
}

static int record_tasks(const struct cost_state *cs, struct record *rec,
			struct kn_error *err)
{
	for (size_t i = 0; i < rec->n_tasks; i++) {
		const struct kn_cost_task_row *t = &rec->tasks[i];
		const struct kn_node_row *node = record_node(rec, t->node);
		struct kn_ledger_alloc a;

		memset(&a, 0, sizeof(a));
		a.milli_per_device = task_milli(cs, node, t, &a.n_devices);
		if (!node || a.milli_per_device <= 0) {
			rec->unresolved++;
			continue;
		}
		task_alloc(t, &a);
		a.lost = t->attempt_state == KN_JOB_PREEMPTED ||
			 t->attempt_state == KN_JOB_FAILED;
		a.checkpoint_ms = t->checkpoint_at;
		usage_fill(usage_find(rec, t), &a);
		if (kn_ledger_add_alloc(rec->ledger, &a, err) < 0)
			return -EINVAL;
		json_array_append_new(
			rec->alloc_list,
			json_pack("{s:I, s:i, s:i, s:s, s:s, s:i, s:i, s:I, s:I, "
				  "s:s?, s:s?, s:b, s:I}",
				  "job", (json_int_t)t->job_id, "attempt",
				  t->attempt, "rank", t->rank, "node", t->node,
				  "devices", t->devices, "n_devices",
				  a.n_devices, "milli_per_device",
				  a.milli_per_device, "start_ms",
				  (json_int_t)t->started_at, "end_ms",
				  (json_int_t)t->ended_at, "user", t->owner,
				  "deployment", t->deployment, "lost", a.lost,
				  "checkpoint_ms",
				  (json_int_t)t->checkpoint_at));
	}
	return 0;
}

/* Tasks without GPUs hold no GPU time; those with usage samples still
   have an efficiency. */
static int record_cpu_tasks(struct record *rec, struct kn_error *err)
{
	for (size_t i = 0; i < rec->n_cpu_tasks; i++) {
		const struct kn_cost_task_row *t = &rec->cpu_tasks[i];
		const struct task_usage *u = usage_find(rec, t);
		struct kn_ledger_alloc a;

		if (!u || !record_node(rec, t->node))
			continue;
		memset(&a, 0, sizeof(a));
		task_alloc(t, &a);
		usage_fill(u, &a);
		if (kn_ledger_add_alloc(rec->ledger, &a, err) < 0)
			return -EINVAL;
	}
	return 0;
}

/* Read the record from since on and fill a ledger with it. */
static int record_load(const struct cost_state *cs, int64_t since, struct record *rec,
		       struct kn_error *err)
{
	memset(rec, 0, sizeof(*rec));
	rec->node_list = json_array();
	rec->state_list = json_array();
	rec->alloc_list = json_array();
	rec->ledger = kn_ledger_new(cs->catalog);
	if (kn_store_node_list(cs->store, &rec->nodes, &rec->n_nodes, err) < 0 ||
	    kn_store_node_state_list(cs->store, since, &rec->states,
				     &rec->n_states, err) < 0 ||
	    kn_store_cost_task_list(cs->store, since, &rec->tasks, &rec->n_tasks,
				    err) < 0 ||
	    kn_store_cost_cpu_task_list(cs->store, since, &rec->cpu_tasks,
					&rec->n_cpu_tasks, err) < 0 ||
	    kn_store_task_usage_list(cs->store, since, &rec->usage_rows,
				     &rec->n_usage_rows, err) < 0)
		return -EINVAL;
	usage_group(rec);
	if (record_nodes(cs, rec, err) < 0 || record_states(rec, err) < 0 ||
	    record_tasks(cs, rec, err) < 0 || record_cpu_tasks(rec, err) < 0)
		return -EINVAL;
	return 0;
}

/*
 * The record over the window the request names (?since, ?until): 0, or
 * -1 once the error is answered. rec is ready for record_release either
 * way.
 */
static int window_load(const struct cost_state *cs, struct kn_http_req *req,
		       struct record *rec, int64_t *since, int64_t *until)
{
	struct kn_error err;

	memset(rec, 0, sizeof(*rec));
	if (query_window(req, kn_now_ms(), since, until) < 0)
		return -1;
	if (record_load(cs, *since, rec, &err) < 0) {
		kn_http_reply_error(req, &err);
		return -1;
	}
	return 0;
}

/* The by-job rows of rep as an object keyed by job id. */
static json_t *rows_by_key(const struct kn_ledger_report *rep)
{
	json_t *o = json_object();

	for (size_t i = 0; i < rep->n_rows; i++)
		json_object_set_new(o, rep->rows[i].key,
				    row_json(&rep->rows[i]));
	return o;
}

/* The dev environments' idle hours and savings (devenv_cost.c), priced
   by the window's by-job rows: jobs, or computed here when NULL. */
static int devenvs_add(struct server *core, const struct record *rec,
		       const struct kn_ledger_report *jobs, int64_t since,
		       int64_t until, json_t *reply, struct kn_error *err)
{
	struct kn_ledger_report *own = NULL;
	json_t *by_job, *devenvs;

	if (!jobs && kn_ledger_report(rec->ledger, KN_LEDGER_BY_JOB, since,
				      until, &own, err) < 0)
		return -EINVAL;
	by_job = rows_by_key(jobs ? jobs : own);
	kn_ledger_report_free(own);
	devenvs = devenv_cost_json(core, since, until, by_job, err);
	json_decref(by_job);
	if (!devenvs)
		return -EIO;
	json_object_set_new(reply, "devenvs", devenvs);
	return 0;
}

static void cost_h_report(struct server *core, struct kn_http_req *req,
			  const struct caller *c, const char *param)
{
	const struct cost_state *cs = service_state(core, &cost_service);
	const char *by_text = kn_http_query(req, "by");
	struct record rec;
	struct kn_ledger_report *rep = NULL;
	enum kn_ledger_by by = KN_LEDGER_BY_JOB;
	int64_t since, until, detail = 0;
	json_t *rows = NULL, *reply, *unpriced;
	struct kn_error err;

	(void)c;
	(void)param;
	memset(&rec, 0, sizeof(rec));
	if (by_text && kn_ledger_by_parse(by_text, &by, &err) < 0)
		goto fail;
	if (query_window(req, kn_now_ms(), &since, &until) < 0)
		goto out;
	if (kn_http_query_int(req, "detail", 0, 1, &detail) < 0) {
		kn_errorf(&err, KN_EINVAL, "detail", "detail must be 0 or 1");
		goto fail;
	}
	if (record_load(cs, since, &rec, &err) < 0 ||
	    kn_ledger_report(rec.ledger, by, since, until, &rep, &err) < 0)
		goto fail;
	rows = json_array();
	for (size_t i = 0; i < rep->n_rows; i++)
		json_array_append_new(rows, row_json(&rep->rows[i]));
	unpriced = json_array();
	for (size_t i = 0; i < rep->n_unpriced_nodes; i++)
		json_array_append_new(unpriced,
				      json_string(rep->unpriced_nodes[i]));
	reply = json_pack("{s:s, s:I, s:I, s:o, s:o, s:O, s:o, s:i, s:s}",
			  "by", kn_ledger_by_name(by), "since_ms",
			  (json_int_t)since, "until_ms", (json_int_t)until,
			  "rows", rows, "total", row_json(&rep->total), "nodes",
			  rec.node_list, "unpriced_nodes", unpriced,
			  "unresolved_tasks", rec.unresolved,
			  "efficiency_source", EFFICIENCY_SOURCE);
	rows = NULL;
	if (detail) {
		json_object_set(reply, "intervals", rec.state_list);
		json_object_set(reply, "allocations", rec.alloc_list);
	}
	if (devenvs_add(core, &rec, by == KN_LEDGER_BY_JOB ? rep : NULL,
			since, until, reply, &err) < 0) {
		json_decref(reply);
		goto fail;
	}
	kn_http_reply_json(req, 200, reply);
	goto out;
fail:
	kn_http_reply_error(req, &err);
out:
	json_decref(rows);
	kn_ledger_report_free(rep);
	record_release(&rec);
}

int cost_by_job(struct server *core, int64_t since_ms, json_t **out,
		struct kn_error *err)
{
	const struct cost_state *cs = service_state(core, &cost_service);
	struct kn_ledger_report *rep = NULL;
	struct record rec;
	int64_t now = kn_now_ms();
	int rc;

	if (since_ms >= now)
		since_ms = now - 1;
	rc = record_load(cs, since_ms, &rec, err);
	if (rc == 0)
		rc = kn_ledger_report(rec.ledger, KN_LEDGER_BY_JOB, since_ms,
				      now, &rep, err);
	if (rc == 0)
		*out = rows_by_key(rep);
	kn_ledger_report_free(rep);
	record_release(&rec);
	return rc;
}

/* ---- GET /v1/cost/reservations ---- */

/* Busy and up GPU time per size, from the by-node report. */
static json_t *sku_advice(const struct cost_state *cs, const struct record *rec,
			  const struct kn_ledger_report *rep)
{
	json_t *list = json_array();
	size_t i, k;
	json_t *n;

	json_array_foreach(rec->node_list, i, n) {
		const char *sku = json_string_value(json_object_get(n, "sku"));
		int64_t up = 0, busy = 0;
		json_t *names = json_array(), *m;
		struct kn_reservation_advice adv;
		bool seen = false;

		/* One entry per size, at its first node. */
		json_array_foreach(rec->node_list, k, m) {
			const char *other =
				json_string_value(json_object_get(m, "sku"));

			if (!sku || !other || strcasecmp(sku, other))
				continue;
			if (k < i) {
				seen = true;
				break;
			}
			json_array_append_new(
				names, json_string(json_string_value(
					       json_object_get(m, "name"))));
			for (size_t r = 0; r < rep->n_rows; r++)
				if (!strcmp(rep->rows[r].key,
					    json_string_value(
						    json_object_get(m, "name")))) {
					busy += rep->rows[r].busy_mms;
					up += rep->rows[r].busy_mms +
					      rep->rows[r].idle_mms +
					      rep->rows[r].unhealthy_mms;
				}
		}
		if (!sku || seen) {
			json_decref(names);
			continue;
		}
		kn_reservation_advise(kn_catalog_find(cs->catalog, sku),
				      up > 0 ? (double)busy / (double)up : 0,
				      &adv);
#define PRICE(x) ((x) >= 0 ? json_real(x) : json_null())
		json_array_append_new(
			list,
			json_pack("{s:s, s:o, s:f, s:f, s:f, s:o, s:o, s:o, s:o, "
				  "s:o, s:b, s:b}",
				  "sku", sku, "nodes", names,
				  "gpu_seconds_up", kn_ledger_gpu_seconds(up),
				  "gpu_seconds_busy", kn_ledger_gpu_seconds(busy),
				  "utilisation", adv.utilisation,
				  "on_demand_usd_hr", PRICE(adv.on_demand_usd_hr),
				  "reserved_1y_usd_hr",
				  PRICE(adv.reserved_usd_hr[0]),
				  "reserved_3y_usd_hr",
				  PRICE(adv.reserved_usd_hr[1]),
				  "break_even_1y", PRICE(adv.break_even[0]),
				  "break_even_3y", PRICE(adv.break_even[1]),
				  "pays_off_1y", adv.pays_off[0], "pays_off_3y",
				  adv.pays_off[1]));
#undef PRICE
	}
	return list;
}

static bool node_on_spot(const struct record *rec, const char *node)
{
	size_t i;
	json_t *n;

	json_array_foreach(rec->node_list, i, n)
		if (!strcmp(json_string_value(json_object_get(n, "name")), node))
			return !strcmp(json_string_value(json_object_get(
					       n, "pricing")),
				       "spot");
	return false;
}

/*
 * Jobs of the window that could run on spot: preemptible, with a
 * checkpoint policy. longest_unsaved_ms is the most work an attempt of
 * theirs had done past its last checkpoint when it ended (all of it when
 * it had none): what one preemption would have cost.
 */
static int spot_candidates(const struct cost_state *cs, const struct record *rec,
			   json_t **out, struct kn_error *err)
{
	json_t *list = json_array();

	for (size_t i = 0; i < rec->n_tasks; i++) {
		const struct kn_cost_task_row *t = &rec->tasks[i];
		struct kn_job_row job;
		json_t *spec, *ck;
		int64_t unsaved = 0;
		bool on_spot = true;

		if (i > 0 && rec->tasks[i - 1].job_id == t->job_id)
			continue; /* tasks come by job */
		if (kn_store_job_get(cs->store, t->job_id, &job, err) < 0) {
			json_decref(list);
			return -EIO;
		}
		spec = json_loads(job.spec_json ? job.spec_json : "{}", 0, NULL);
		ck = json_object_get(spec, "checkpoint");
		if (json_is_true(json_object_get(spec, "preemptible")) &&
		    json_is_object(ck)) {
			for (size_t k = i; k < rec->n_tasks &&
					   rec->tasks[k].job_id == t->job_id;
			     k++) {
				const struct kn_cost_task_row *u = &rec->tasks[k];
				int64_t from = u->checkpoint_at > u->started_at
						       ? u->checkpoint_at
						       : u->started_at;

				if (u->ended_at && u->ended_at - from > unsaved)
					unsaved = u->ended_at - from;
				on_spot = on_spot && node_on_spot(rec, u->node);
			}
			json_array_append_new(
				list,
				json_pack("{s:I, s:s, s:s, s:I, s:I, s:b}", "job",
					  (json_int_t)job.id, "name", job.name,
					  "user", job.owner,
					  "checkpoint_every_ms",
					  (json_int_t)json_integer_value(
						  json_object_get(ck,
								  "every_ms")),
					  "longest_unsaved_ms",
					  (json_int_t)unsaved, "on_spot",
					  on_spot));
		}
		json_decref(spec);
		kn_job_row_release(&job);
	}
	*out = list;
	return 0;
}

static void cost_h_reservations(struct server *core, struct kn_http_req *req,
				const struct caller *c, const char *param)
{
	const struct cost_state *cs = service_state(core, &cost_service);
	struct record rec;
	struct kn_ledger_report *rep = NULL;
	int64_t since, until;
	json_t *spot = NULL;
	struct kn_error err;

	(void)c;
	(void)param;
	if (window_load(cs, req, &rec, &since, &until) < 0)
		goto out;
	if (kn_ledger_report(rec.ledger, KN_LEDGER_BY_NODE, since, until, &rep,
			     &err) < 0 ||
	    spot_candidates(cs, &rec, &spot, &err) < 0) {
		kn_http_reply_error(req, &err);
		goto out;
	}
	kn_http_reply_json(req, 200,
			   json_pack("{s:I, s:I, s:o, s:o}", "since_ms",
				     (json_int_t)since, "until_ms",
				     (json_int_t)until, "skus",
				     sku_advice(cs, &rec, rep), "spot_candidates",
				     spot));
out:
	kn_ledger_report_free(rep);
	record_release(&rec);
}

/* ---- GET /v1/cost/rightsize ---- */

/* The resources a job asks for by amount, and how the answer writes
   them: CPU in cores (sketched in thousandths), the rest in bytes. */
static const struct {
	enum kn_usage_resource resource;
	double scale; /* sketch unit -> answer unit */
	const char *unit;
} RIGHTSIZED[] = {
	{ KN_USAGE_CPU, 1e-3, "cores" },
	{ KN_USAGE_MEMORY, 1, "bytes" },
	{ KN_USAGE_GPU_MEMORY, 1, "bytes" },
};
#define N_RIGHTSIZED (sizeof(RIGHTSIZED) / sizeof(RIGHTSIZED[0]))

/* A job name's history: its tasks' sketches merged, the newest job's
   requests. */
struct name_usage {
	const char *name;
	json_t *jobs;
	int tasks;
	const struct task_usage *newest;
	bool has[KN_USAGE_RESOURCES];
	struct kn_usage_hist h[KN_USAGE_RESOURCES];
};

static double requested_of(const struct task_usage *u,
			   enum kn_usage_resource r)
{
	switch (r) {
	case KN_USAGE_CPU:
		return u->cpu_milli;
	case KN_USAGE_MEMORY:
		return (double)u->memory_bytes;
	case KN_USAGE_GPU_MEMORY:
		return u->gpu_memory_bytes;
	default:
		return 0;
	}
}

/* GPUs per task that would hold bytes of GPU memory: a share in eighths
   below one GPU, whole GPUs above. */
static double gpus_for(double bytes, double device_bytes)
{
	double gpus = bytes / device_bytes;

	return gpus < 1 ? ceil(gpus * 8) / 8 : ceil(gpus);
}

static json_t *name_json(const struct name_usage *n, int *suggestions)
{
	json_t *resources = json_array();

	for (size_t k = 0; k < N_RIGHTSIZED; k++) {
		enum kn_usage_resource r = RIGHTSIZED[k].resource;
		double scale = RIGHTSIZED[k].scale;
		struct kn_rightsize rs;
		json_t *o;

		if (!n->has[r])
			continue;
		kn_rightsize(&n->h[r], requested_of(n->newest, r), &rs);
		o = json_pack("{s:s, s:s, s:I, s:f, s:f, s:f, s:o, s:o, s:b}",
			      "resource", kn_usage_resource_name(r), "unit",
			      RIGHTSIZED[k].unit, "samples",
			      (json_int_t)rs.samples, "p50", rs.p50 * scale,
			      "p95", rs.p95 * scale, "max", rs.max * scale,
			      "requested",
			      rs.requested > 0 ? json_real(rs.requested * scale)
					       : json_null(),
			      "suggested",
			      rs.over ? json_real(rs.target * scale)
				      : json_null(),
			      "over", rs.over);
		if (rs.over && r == KN_USAGE_GPU_MEMORY &&
		    n->newest->gpu_device_bytes > 0)
			json_object_set_new(
				o, "suggested_gpus",
				json_real(gpus_for(rs.target,
						   n->newest->gpu_device_bytes)));
		*suggestions += rs.over;
		json_array_append_new(resources, o);
	}
	return resources;
}

static void cost_h_rightsize(struct server *core, struct kn_http_req *req,
			     const struct caller *c, const char *param)
{
	const struct cost_state *cs = service_state(core, &cost_service);
	struct record rec;
	struct name_usage *names = NULL;
	size_t n_names = 0;
	int64_t since, until;
	json_t *list;

	(void)c;
	(void)param;
	if (window_load(cs, req, &rec, &since, &until) < 0)
		goto out;
	names = kn_xcalloc(rec.n_usage + 1, sizeof(*names));
	for (size_t i = 0; i < rec.n_usage; i++) {
		const struct task_usage *u = &rec.usage[i];
		struct name_usage *n = NULL;

		for (size_t k = 0; k < n_names && !n; k++)
			if (!strcmp(names[k].name, u->job_name))
				n = &names[k];
		if (!n) {
			n = &names[n_names++];
			n->name = u->job_name;
			n->jobs = json_array();
			for (int r = 0; r < KN_USAGE_RESOURCES; r++)
				kn_usage_hist_init(&n->h[r],
						   (enum kn_usage_resource)r);
		}
		/* Usage comes by job id: the last one is the newest. */
		if (!n->newest || n->newest->job_id != u->job_id)
			json_array_append_new(n->jobs,
					      json_integer(u->job_id));
		n->newest = u;
		n->tasks++;
		for (int r = 0; r < KN_USAGE_RESOURCES; r++)
			if (u->has[r]) {
				kn_usage_hist_merge(&n->h[r], &u->h[r]);
				n->has[r] = true;
			}
	}
	list = json_array();
	for (size_t k = 0; k < n_names; k++) {
		int suggestions = 0;
		json_t *resources = name_json(&names[k], &suggestions);

		json_array_append_new(
			list, json_pack("{s:s, s:O, s:i, s:o, s:i}", "name",
					names[k].name, "jobs", names[k].jobs,
					"tasks", names[k].tasks, "resources",
					resources, "suggestions", suggestions));
	}
	kn_http_reply_json(
		req, 200,
		json_pack("{s:I, s:I, s:{s:f, s:f, s:f, s:i}, s:o}", "since_ms",
			  (json_int_t)since, "until_ms", (json_int_t)until,
			  "rule", "percentile", KN_RIGHTSIZE_PERCENTILE,
			  "headroom", KN_RIGHTSIZE_HEADROOM, "margin",
			  KN_RIGHTSIZE_MARGIN, "min_samples",
			  KN_RIGHTSIZE_MIN_SAMPLES, "jobs", list));
out:
	for (size_t k = 0; k < n_names; k++)
		json_decref(names[k].jobs);
	free(names);
	record_release(&rec);
}

static const struct route routes[] = {
	{"GET", "/v1/cost", KN_ROLE_VIEWER, false, NULL, cost_h_report},
	{"GET", "/v1/cost/reservations", KN_ROLE_VIEWER, false, NULL,
	 cost_h_reservations},
	{"GET", "/v1/cost/rightsize", KN_ROLE_VIEWER, false, NULL,
	 cost_h_rightsize},
	{0},
};

const struct service cost_service = {
	.name = "cost",
	.phase = SERVICE_PHASE_NODES,
	.start = cost_start,
	.stop = cost_stop,
	.routes = routes,
};
