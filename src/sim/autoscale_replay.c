/*
 * The autoscaling replay behind `kiln sim --autoscale`: a timed trace
 * played through node pools that kn_autoscale_plan grows and shrinks, as
 * the server's pools do (src/server/pools.c), with the trace's clock in
 * place of the wall clock.
 *
 * The run is event driven: time jumps to the next arrival, pod end, node
 * ready or idle node reaching its pool's scale-down delay, and after each
 * event the queue is placed and the plan consulted. A node is billed from
 * the moment it is asked for until it is removed or the trace ends, as a
 * cloud bills a VM from its creation.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "sim/internal.h"

#define MS_PER_HOUR 3600000.0

/* ---- pools ---- */

static int shape_from(struct kn_sim_pool *p, const char *text,
		      struct kn_error *err)
{
	struct kn_device_set set = {0};
	struct kn_sched_node *sn = &p->shape;
	int rc = kn_devices_simulated(p->gpus, &set, err);

	if (rc < 0) {
		char why[sizeof(err->message)];

		kn_strlcpy(why, err->message, sizeof(why));
		return kn_errorf(err, KN_EINVAL, "pool", "pool \"%s\": GPUS: %s",
				 text, why);
	}
	sn->name = p->name;
	sn->schedulable = true;
	sn->n_devices = set.n;
	sn->devices = kn_xcalloc(set.n ? set.n : 1, sizeof(*sn->devices));
	p->models = kn_xcalloc(set.n ? set.n : 1, sizeof(*p->models));
	for (size_t i = 0; i < set.n; i++) {
		kn_strlcpy(p->models[i], set.devices[i].model,
			   sizeof(p->models[i]));
		sn->devices[i].index = set.devices[i].index;
		sn->devices[i].model = p->models[i];
		sn->devices[i].memory_bytes = set.devices[i].memory_bytes;
	}
	kn_device_set_release(&set);
	return 0;
}

int kn_sim_pool_parse(const char *text, struct kn_sim_pool *p,
		      struct kn_error *err)
{
	struct kn_pool_spec spec;
	int rc;

	memset(p, 0, sizeof(*p));
	rc = kn_pool_spec_parse(text, "pool", &spec, err);
	if (rc < 0)
		return rc;
	/* A replay's nodes are its own: no script, no scale set to ask. */
	if (spec.provider != KN_POOL_PROVIDER_SIM) {
		rc = kn_errorf(err, KN_EINVAL, "pool",
			       "pool \"%s\": provider: \"%s\": a replay makes "
			       "its nodes itself (sim)",
			       text, kn_pool_provider_name(spec.provider));
		goto out;
	}
	kn_strlcpy(p->name, spec.name, sizeof(p->name));
	p->sku = spec.sku;
	p->gpus = spec.gpus;
	spec.sku = spec.gpus = NULL;
	p->spot = spec.spot;
	p->min = spec.min;
	p->max = spec.max;
	p->scale_down_delay_ms = spec.scale_down_delay_ms;
	p->usd_hr = -1;
	rc = shape_from(p, text, err);
	if (rc < 0)
		kn_sim_pool_release(p);
out:
	kn_pool_spec_release(&spec);
	return rc;
}

void kn_sim_pool_release(struct kn_sim_pool *p)
{
	KN_FREE_ALL(p->sku, p->gpus, p->shape.devices, p->models);
	memset(p, 0, sizeof(*p));
}

/* ---- the timed trace ---- */

struct trace_pod {
	int64_t arrival_ms;
	int64_t duration_ms;
	bool preemptible;
	size_t row;                  /* file order, to keep ties stable */
	struct kn_sched_request req; /* one task, no model constraint */
};

struct kn_sim_trace {
	struct trace_pod *pods;      /* by arrival */
	size_t n;
	size_t unscheduled;
};

static int arrival_order(const void *pa, const void *pb)
{
	const struct trace_pod *a = pa, *b = pb;

	if (a->arrival_ms != b->arrival_ms)
		return a->arrival_ms < b->arrival_ms ? -1 : 1;
	return a->row < b->row ? -1 : a->row > b->row;
}

enum trace_col {
	COL_CPU,
	COL_MEM,
	COL_NUM_GPU,
	COL_GPU_MILLI,
	COL_CREATION,
	COL_DELETION,
	N_REQUIRED,
};

static const char *const required_columns[N_REQUIRED] = {
	"cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "creation_time",
	"deletion_time",
};

/* Whether the pod is preemptible; -EINVAL on a value neither way. */
static int preemptible_of(struct sim_csv *c, int col_pre, int col_qos,
			  bool *out, struct kn_error *err)
{
	const char *v;

	*out = false;
	if (col_pre >= 0) {
		v = col_pre < c->csv.n_fields ? c->csv.fields[col_pre] : "";
		if (!strcmp(v, "true") || !strcmp(v, "1"))
			*out = true;
		else if (*v && strcmp(v, "false") != 0 && strcmp(v, "0") != 0)
			return kn_errorf(err, KN_EINVAL, "preemptible",
					 "%s:%d:%d: preemptible: '%s' is not "
					 "true, false, 1 or 0",
					 c->csv.path, c->csv.line,
					 c->csv.cols[col_pre], v);
		return 0;
	}
	if (col_qos >= 0 && col_qos < c->csv.n_fields)
		*out = !strcmp(c->csv.fields[col_qos], "BE");
	return 0;
}

static int trace_row(struct kn_sim_trace *t, struct sim_csv *c,
		     const int *col, int col_sched, int col_pre, int col_qos,
		     struct trace_pod *p, bool *ran, struct kn_error *err)
{
	const int64_t max_s = INT64_MAX / 4000;
	int64_t v[N_REQUIRED], start;
	const char *sched;
	int rc;

	for (int i = 0; i < N_REQUIRED; i++) {
		int64_t max = i == COL_NUM_GPU	   ? KN_PACK_MAX_GPUS
			      : i == COL_GPU_MILLI ? 1000
			      : i >= COL_CREATION  ? max_s
						   : INT32_MAX;

		rc = sim_csv_int(c, col[i], required_columns[i], max, &v[i],
				 err);
		if (rc < 0)
			return rc;
	}
	start = v[COL_CREATION];
	*ran = true;
	if (col_sched >= 0) {
		sched = col_sched < c->csv.n_fields ? c->csv.fields[col_sched]
						    : "";
		if (!*sched) {
			*ran = false;
			return 0;
		}
		rc = sim_csv_int(c, col_sched, "scheduled_time", max_s, &start,
				 err);
		if (rc < 0)
			return rc;
	}
	if (v[COL_DELETION] < start)
		return kn_errorf(err, KN_EINVAL, "deletion_time",
				 "%s:%d:%d: deletion_time: %lld is before the "
				 "pod started (%lld)",
				 c->csv.path, c->csv.line,
				 c->csv.cols[col[COL_DELETION]],
				 (long long)v[COL_DELETION], (long long)start);
	if ((v[COL_NUM_GPU] == 0) != (v[COL_GPU_MILLI] == 0) ||
	    (v[COL_NUM_GPU] > 1 && v[COL_GPU_MILLI] != 1000))
		return kn_errorf(err, KN_EINVAL, "gpu_milli",
				 "%s:%d:%d: gpu_milli: %lld does not suit "
				 "num_gpu %lld (1..1000 with one GPU, 1000 "
				 "with more, 0 without)",
				 c->csv.path, c->csv.line,
				 c->csv.cols[col[COL_GPU_MILLI]],
				 (long long)v[COL_GPU_MILLI],
				 (long long)v[COL_NUM_GPU]);
	rc = preemptible_of(c, col_pre, col_qos, &p->preemptible, err);
	if (rc < 0)
		return rc;
	p->arrival_ms = v[COL_CREATION] * 1000;
	p->duration_ms = (v[COL_DELETION] - start) * 1000;
	p->row = t->n;
	p->req.tasks = 1;
	p->req.gpu_milli = (int)(v[COL_NUM_GPU] > 1 ? v[COL_NUM_GPU] * 1000
						    : v[COL_GPU_MILLI]);
	p->req.cpu_milli = (int)v[COL_CPU];
	p->req.memory_bytes = v[COL_MEM] << 20;
	return 0;
}

int kn_sim_trace_load(const char *pods_csv, struct kn_sim_trace **out,
		      struct kn_error *err)
{
	struct kn_sim_trace *t = kn_xcalloc(1, sizeof(*t));
	struct sim_csv c;
	int col[N_REQUIRED], col_sched, col_pre, col_qos, rc;
	size_t cap = 0;

	rc = sim_csv_open(&c, pods_csv, err);
	if (rc < 0)
		goto out;
	for (int i = 0; i < N_REQUIRED; i++) {
		col[i] = kn_csv_find(&c.csv, required_columns[i]);
		if (col[i] < 0) {
			rc = kn_errorf(err, KN_EINVAL, required_columns[i],
				       "%s:%d:1: no column '%s' in the header "
				       "(--autoscale replays pods in time: it "
				       "needs creation_time and deletion_time, "
				       "in seconds)",
				       pods_csv, c.csv.line,
				       required_columns[i]);
			goto out;
		}
	}
	col_sched = kn_csv_find(&c.csv, "scheduled_time");
	col_pre = kn_csv_find(&c.csv, "preemptible");
	col_qos = kn_csv_find(&c.csv, "qos");
	while ((rc = kn_csv_next(&c.csv, err)) > 0) {
		struct trace_pod p = {0};
		bool ran;

		rc = trace_row(t, &c, col, col_sched, col_pre, col_qos, &p,
			       &ran, err);
		if (rc < 0)
			goto out;
		if (!ran) {
			t->unscheduled++;
			continue;
		}
		t->pods = kn_xgrow(t->pods, &cap, t->n, sizeof(*t->pods));
		t->pods[t->n++] = p;
	}
	if (rc < 0)
		goto out;
	if (t->n == 0) {
		rc = kn_errorf(err, KN_EINVAL, NULL, "%s: no pod that ran",
			       pods_csv);
		goto out;
	}
	qsort(t->pods, t->n, sizeof(*t->pods), arrival_order);
	rc = 0;
out:
	free(c.text);
	if (rc < 0) {
		kn_sim_trace_free(t);
		return rc;
	}
	*out = t;
	return 0;
}

void kn_sim_trace_free(struct kn_sim_trace *t)
{
	if (!t)
		return;
	KN_FREE_ALL(t->pods, t);
}

size_t kn_sim_trace_n_pods(const struct kn_sim_trace *t)
{
	return t->n;
}

size_t kn_sim_trace_n_unscheduled(const struct kn_sim_trace *t)
{
	return t->unscheduled;
}

/* ---- the replay ---- */

struct node_info {
	size_t pool;
	int pods;
	int64_t idle_since; /* 0 while a pod runs there */
	int64_t billed_from;
};

struct running {
	int64_t end;
	size_t pod;
	struct kn_sched_binding binding;
};

/* A node asked for and not ready yet. */
struct coming {
	size_t pool;
	int64_t asked_at;
	int64_t ready_at;
};

struct replay {
	const struct kn_sim_trace *t;
	const struct kn_sim_pool *pools;
	size_t n_pools;
	const struct kn_sim_autoscale_opts *opts;
	struct kn_sim_autoscale_report *out;
	/* The replay's clock is the trace's less origin. The plan reads an
	   idle_since of 0 as busy, so the clock starts at 1 ms. */
	int64_t origin;
	struct kn_sched_packing packing;
	struct kn_sched_cluster cluster;
	struct node_info *info;
	size_t cap_nodes;
	struct kn_heap running; /* of struct running, by end */
	struct coming *coming; /* by ready_at: one delay for all */
	size_t coming_head, n_coming, cap_coming;
	size_t *queue;        /* pod indexes, oldest first */
	size_t n_queue;
	bool *never_fit;
	int *up, *asked;      /* per pool: nodes ready, nodes coming */
	double **waits;       /* per pool, seconds */
	size_t *n_waits;
};

static struct kn_sched_request request_of(const struct replay *r, size_t k)
{
	struct kn_sched_request req = r->t->pods[k].req;

	req.packing = &r->packing;
	return req;
}

static void bill(struct replay *r, size_t pool, int64_t from, int64_t to)
{
	r->out->pools[pool].node_hours += (double)(to - from) / MS_PER_HOUR;
}

static void count_peak(struct replay *r)
{
	int total = 0;

	for (size_t p = 0; p < r->n_pools; p++) {
		int n = r->up[p] + r->asked[p];

		if (n > r->out->pools[p].peak_nodes)
			r->out->pools[p].peak_nodes = n;
		total += n;
	}
	if (total > r->out->total.peak_nodes)
		r->out->total.peak_nodes = total;
}

static void node_add(struct replay *r, size_t pool, int64_t now,
		     int64_t billed_from)
{
	const struct kn_sched_node *shape = &r->pools[pool].shape;
	struct kn_sched_node *n;
	size_t i = r->cluster.n_nodes;

	if (i == r->cap_nodes) {
		r->cap_nodes = r->cap_nodes ? 2 * r->cap_nodes : 16;
		r->cluster.nodes = kn_xrealloc(
			r->cluster.nodes, r->cap_nodes * sizeof(*n));
		r->info = kn_xrealloc(r->info,
				      r->cap_nodes * sizeof(*r->info));
	}
	n = &r->cluster.nodes[i];
	*n = *shape;
	n->devices = kn_xcalloc(shape->n_devices ? shape->n_devices : 1,
				sizeof(*n->devices));
	memcpy(n->devices, shape->devices,
	       shape->n_devices * sizeof(*n->devices));
	r->info[i] = (struct node_info){.pool = pool,
					.idle_since = now,
					.billed_from = billed_from};
	r->cluster.n_nodes++;
	r->up[pool]++;
}

/* Remove idle node i; the nodes after it move down one. */
static void node_remove(struct replay *r, size_t i, int64_t now)
{
	size_t pool = r->info[i].pool;

	bill(r, pool, r->info[i].billed_from, now);
	free(r->cluster.nodes[i].devices);
	memmove(&r->cluster.nodes[i], &r->cluster.nodes[i + 1],
		(r->cluster.n_nodes - i - 1) * sizeof(*r->cluster.nodes));
	memmove(&r->info[i], &r->info[i + 1],
		(r->cluster.n_nodes - i - 1) * sizeof(*r->info));
	r->cluster.n_nodes--;
	for (size_t k = 0; k < r->running.n; k++) {
		struct running *e = (struct running *)r->running.v + k;

		if (e->binding.node > i)
			e->binding.node--;
	}
	r->up[pool]--;
	r->out->pools[pool].nodes_removed++;
}

static bool ends_before(const void *a, const void *b)
{
	return ((const struct running *)a)->end <
	       ((const struct running *)b)->end;
}

/* When the next running pod ends; INT64_MAX with none running. */
static int64_t next_departure(const struct replay *r)
{
	return r->running.n ? ((const struct running *)r->running.v)->end
			    : INT64_MAX;
}

static void wait_add(struct replay *r, size_t pool, double s)
{
	size_t n = r->n_waits[pool];

	/* Grown to the next power of two. */
	if ((n & (n - 1)) == 0)
		r->waits[pool] = kn_xrealloc(r->waits[pool], (n ? 2 * n : 1) *
							     sizeof(**r->waits));
	r->waits[pool][r->n_waits[pool]++] = s;
}

static bool try_place(struct replay *r, size_t k, int64_t now)
{
	const struct trace_pod *p = &r->t->pods[k];
	struct kn_sched_request req = request_of(r, k);
	struct running e = {.end = now + p->duration_ms, .pod = k};
	struct node_info *n;
	struct kn_sim_pool_report *pr;

	if (kn_sched_place(&r->cluster, &req, &e.binding, NULL, 0) < 0)
		return false;
	n = &r->info[e.binding.node];
	n->pods++;
	n->idle_since = 0;
	kn_heap_push(&r->running, &e);
	pr = &r->out->pools[n->pool];
	pr->pods++;
	pr->gpu_hours_used += (double)p->req.gpu_milli / 1000.0 *
			      (double)p->duration_ms / MS_PER_HOUR;
	wait_add(r, n->pool,
		 (double)(now - (p->arrival_ms - r->origin)) / 1000.0);
	return true;
}

static void depart(struct replay *r, int64_t now)
{
	struct running e;
	struct kn_sched_request req;
	struct node_info *n;

	kn_heap_pop(&r->running, &e);
	req = request_of(r, e.pod);
	n = &r->info[e.binding.node];
	kn_sched_release(&r->cluster, &req, &e.binding);
	if (--n->pods == 0)
		n->idle_since = now;
}

/* Pods that even an empty node of every pool refuses. */
static void find_never_fit(struct replay *r)
{
	struct kn_sched_cluster one = {0};
	struct kn_sched_binding b;

	for (size_t k = 0; k < r->t->n; k++) {
		struct kn_sched_request req = r->t->pods[k].req;
		bool fits = false;

		for (size_t p = 0; !fits && p < r->n_pools; p++) {
			struct kn_sched_node node = r->pools[p].shape;
			struct kn_sched_device devices[KN_MAX_DEVICES];

			memcpy(devices, node.devices,
			       node.n_devices * sizeof(*devices));
			node.devices = devices;
			one.nodes = &node;
			one.n_nodes = 1;
			fits = kn_sched_place(&one, &req, &b, NULL, 0) == 0;
		}
		r->never_fit[k] = !fits;
		r->out->never_fit += !fits;
	}
}

/* One round of the server's autoscaler on the replay's state. */
static void autoscale(struct replay *r, int64_t now)
{
	size_t n_pools = r->n_pools, n_nodes = r->cluster.n_nodes;
	struct kn_autoscale_pool *ap = kn_xcalloc(n_pools, sizeof(*ap));
	struct kn_autoscale_job *jobs =
		kn_xcalloc(r->n_queue ? r->n_queue : 1, sizeof(*jobs));
	struct kn_sched_request *reqs =
		kn_xcalloc(r->n_queue ? r->n_queue : 1, sizeof(*reqs));
	struct kn_autoscale_node *nodes =
		kn_xcalloc(n_nodes ? n_nodes : 1, sizeof(*nodes));
	bool *remove = kn_xcalloc(n_nodes ? n_nodes : 1, sizeof(*remove));
	int *add = kn_xcalloc(n_pools, sizeof(*add));
	char (*why)[KN_AUTOSCALE_WHY_LEN] = kn_xcalloc(n_pools, sizeof(*why));
	char blocked[KN_AUTOSCALE_WHY_LEN];

	for (size_t p = 0; p < n_pools; p++) {
		const struct kn_sim_pool *pool = &r->pools[p];

		ap[p].name = pool->name;
		ap[p].spot = pool->spot;
		ap[p].gpu_hour_price =
			pool->usd_hr >= 0 && pool->shape.n_devices
				? pool->usd_hr / (double)pool->shape.n_devices
				: -1;
		ap[p].min = pool->min;
		ap[p].max = pool->max;
		ap[p].current = r->up[p];
		ap[p].provisioning = r->asked[p];
		ap[p].scale_down_delay_ms = pool->scale_down_delay_ms;
		ap[p].shape = &pool->shape;
	}
	for (size_t i = 0; i < r->n_queue; i++) {
		reqs[i] = request_of(r, r->queue[i]);
		jobs[i].id = (int64_t)r->queue[i];
		jobs[i].preemptible = r->t->pods[r->queue[i]].preemptible;
		jobs[i].req = &reqs[i];
	}
	for (size_t i = 0; i < n_nodes; i++) {
		nodes[i].pool = r->info[i].pool;
		nodes[i].idle_since = r->info[i].idle_since;
	}
	kn_autoscale_plan(ap, n_pools, jobs, r->n_queue, nodes, n_nodes, now,
			  add, remove, why, blocked);
	for (size_t p = 0; p < n_pools; p++) {
		for (int k = 0; k < add[p]; k++) {
			r->coming = kn_xgrow(r->coming, &r->cap_coming,
					     r->n_coming, sizeof(*r->coming));
			r->coming[r->n_coming++] = (struct coming){
				.pool = p,
				.asked_at = now,
				.ready_at = now + r->opts->provision_delay_ms};
		}
		r->asked[p] += add[p];
		r->out->pools[p].nodes_added += add[p];
	}
	for (size_t i = n_nodes; i-- > 0;)
		if (remove[i])
			node_remove(r, i, now);
	count_peak(r);
	KN_FREE_ALL(ap, jobs, reqs, nodes, remove, add, why);
}

/* The next time something happens after now (or at it, for nodes
   already due), or INT64_MAX. */
static int64_t next_event(const struct replay *r, size_t next_arrival,
			  int64_t now)
{
	int64_t next = INT64_MAX;

	if (next_arrival < r->t->n)
		next = r->t->pods[next_arrival].arrival_ms - r->origin;
	if (next_departure(r) < next)
		next = next_departure(r);
	if (r->coming_head < r->n_coming &&
	    r->coming[r->coming_head].ready_at < next)
		next = r->coming[r->coming_head].ready_at;
	if (r->opts->fixed)
		return next;
	for (size_t i = 0; i < r->cluster.n_nodes; i++) {
		const struct node_info *n = &r->info[i];
		int64_t at = n->idle_since +
			     r->pools[n->pool].scale_down_delay_ms;

		if (n->idle_since && r->up[n->pool] > r->pools[n->pool].min &&
		    at > now && at < next)
			next = at;
	}
	return next;
}

static void pool_summary(struct kn_sim_pool_report *pr,
			 const struct kn_sim_pool *pool, double *waits,
			 size_t n)
{
	pr->gpu_hours = pr->node_hours * (double)pool->shape.n_devices;
	pr->cost_usd = pool->usd_hr >= 0 ? pr->node_hours * pool->usd_hr : -1;
	pr->wait_max_s = kn_sim_quantile(waits, n, 1.0);
	pr->wait_p95_s = kn_sim_quantile(waits, n, 0.95);
	pr->wait_p50_s = kn_sim_quantile(waits, n, 0.5);
}

static void summarize(struct replay *r)
{
	struct kn_sim_pool_report *tot = &r->out->total;
	size_t n_all = 0;
	double *all;

	for (size_t p = 0; p < r->n_pools; p++)
		n_all += r->n_waits[p];
	all = kn_xcalloc(n_all ? n_all : 1, sizeof(*all));
	n_all = 0;
	tot->cost_usd = 0;
	for (size_t p = 0; p < r->n_pools; p++) {
		struct kn_sim_pool_report *pr = &r->out->pools[p];

		/* A pool that placed nothing has no waits array. */
		if (r->n_waits[p])
			memcpy(all + n_all, r->waits[p],
			       r->n_waits[p] * sizeof(*all));
		n_all += r->n_waits[p];
		pool_summary(pr, &r->pools[p], r->waits[p], r->n_waits[p]);
		tot->node_hours += pr->node_hours;
		tot->gpu_hours += pr->gpu_hours;
		tot->gpu_hours_used += pr->gpu_hours_used;
		tot->nodes_added += pr->nodes_added;
		tot->nodes_removed += pr->nodes_removed;
		tot->pods += pr->pods;
		tot->cost_usd = tot->cost_usd >= 0 && pr->cost_usd >= 0
					? tot->cost_usd + pr->cost_usd
					: -1;
	}
	tot->wait_max_s = kn_sim_quantile(all, n_all, 1.0);
	tot->wait_p95_s = kn_sim_quantile(all, n_all, 0.95);
	tot->wait_p50_s = kn_sim_quantile(all, n_all, 0.5);
	free(all);
}

int kn_sim_autoscale(const struct kn_sim_trace *t,
		     const struct kn_sim_pool *pools, size_t n_pools,
		     const struct kn_sim_autoscale_opts *opts,
		     struct kn_sim_autoscale_report *out)
{
	struct replay r = {.t = t, .pools = pools, .n_pools = n_pools,
			   .opts = opts, .out = out,
			   .running = {.size = sizeof(struct running),
				       .before = ends_before}};
	struct kn_sched_shape *workload = kn_xcalloc(t->n, sizeof(*workload));
	size_t next_arrival = 0;
	int64_t now = 1;

	memset(out, 0, sizeof(*out));
	out->n_pools = n_pools;
	out->pools = kn_xcalloc(n_pools, sizeof(*out->pools));
	r.up = kn_xcalloc(n_pools, sizeof(*r.up));
	r.asked = kn_xcalloc(n_pools, sizeof(*r.asked));
	r.waits = kn_xcalloc(n_pools, sizeof(*r.waits));
	r.n_waits = kn_xcalloc(n_pools, sizeof(*r.n_waits));
	r.queue = kn_xcalloc(t->n, sizeof(*r.queue));
	r.never_fit = kn_xcalloc(t->n, sizeof(*r.never_fit));
	for (size_t k = 0; k < t->n; k++)
		workload[k].gpu_milli = t->pods[k].req.gpu_milli;
	r.packing = (struct kn_sched_packing){.policy = opts->policy,
					      .workload = workload,
					      .n_workload = t->n,
					      .seed = opts->seed};
	find_never_fit(&r);
	r.origin = t->pods[0].arrival_ms - now;
	for (size_t p = 0; p < n_pools; p++)
		for (int k = 0; k < (opts->fixed ? pools[p].max : pools[p].min);
		     k++)
			node_add(&r, p, now, now);
	count_peak(&r);
	for (;;) {
		bool freed = false;
		size_t first_new = r.n_queue, kept = 0;
		int64_t next;

		while (r.coming_head < r.n_coming &&
		       r.coming[r.coming_head].ready_at <= now) {
			const struct coming *c = &r.coming[r.coming_head++];

			r.asked[c->pool]--;
			node_add(&r, c->pool, now, c->asked_at);
			freed = true;
		}
		while (r.running.n && next_departure(&r) <= now) {
			depart(&r, now);
			freed = true;
		}
		while (next_arrival < t->n &&
		       t->pods[next_arrival].arrival_ms - r.origin <= now) {
			if (!r.never_fit[next_arrival])
				r.queue[r.n_queue++] = next_arrival;
			next_arrival++;
		}
		/* Nothing freed: the older pods still fit nowhere. */
		for (size_t i = 0; i < r.n_queue; i++)
			if (!((freed || i >= first_new) &&
			      try_place(&r, r.queue[i], now)))
				r.queue[kept++] = r.queue[i];
		r.n_queue = kept;
		if (!opts->fixed)
			autoscale(&r, now);
		if (next_arrival == t->n && r.n_queue == 0 && r.running.n == 0)
			break;
		next = next_event(&r, next_arrival, now);
		/* Not reached: a queued pod fits an empty node of some pool,
		   so it runs, or waits for a pod's end or a coming node. */
		if (next == INT64_MAX) {
			out->never_fit += r.n_queue;
			break;
		}
		now = next;
	}
	for (size_t i = 0; i < r.cluster.n_nodes; i++) {
		bill(&r, r.info[i].pool, r.info[i].billed_from, now);
		free(r.cluster.nodes[i].devices);
	}
	for (size_t c = r.coming_head; c < r.n_coming; c++)
		bill(&r, r.coming[c].pool, r.coming[c].asked_at, now);
	out->span_hours = (double)(now - 1) / MS_PER_HOUR;
	summarize(&r);
	for (size_t p = 0; p < n_pools; p++)
		free(r.waits[p]);
	KN_FREE_ALL(r.waits, r.n_waits, r.up, r.asked, r.queue, r.never_fit);
	kn_heap_release(&r.running);
	KN_FREE_ALL(r.coming, r.cluster.nodes, r.info, workload);
	return 0;
}

void kn_sim_autoscale_report_release(struct kn_sim_autoscale_report *r)
{
	free(r->pools);
	memset(r, 0, sizeof(*r));
}
