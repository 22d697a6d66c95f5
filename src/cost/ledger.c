/*
 * ledger: GPU time and its cost over a recorded timeline.
 *
 * Busy, lost and sampled time come straight from each allocation (its
 * GPUs x milli x duration, cut at UTC midnights when grouping by day). Idle
 * and unhealthy time need what no allocation says, the unallocated rest of
 * the node, so each node's timeline is swept once: its allocation starts
 * and ends and its state intervals as sorted events, the allocated milli
 * and the state held between consecutive events. Allocated milli above
 * the node's capacity (an allocation recorded on a node the ledger was told
 * has fewer GPUs) leaves no negative idle: idle is clamped at zero.
 *
 * CPU and memory efficiency ride on the busy spans: each allocation's
 * requests and mean use (from usage samples) times the span's length. A
 * task without GPUs has busy spans of 0 milli that carry only those.
 *
 * Time is integer milli-GPU-milliseconds, exact; dollars are the per-GPU
 * hourly price x that / 3.6e9, summed in double (a cent is far above the
 * rounding). Rejected: a per-second grid (inexact for share boundaries
 * and slow over months).
 */
#include "cost/cost.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MS_PER_DAY 86400000LL
#define MMS_PER_GPU_HOUR 3600000000.0 /* 1000 milli x 3,600,000 ms */

struct ledger_node {
	char *name;
	int gpus;
	double gpu_usd_hr; /* 0 when unpriced */
	bool priced;
};

struct ledger_state {
	size_t node;
	enum kn_ledger_state state;
	int64_t start_ms, end_ms;
};

struct ledger_alloc {
	size_t node;
	int64_t job_id;
	char *user;
	char *deployment; /* "" for none */
	int64_t milli;    /* all devices */
	int64_t start_ms, end_ms;
	bool lost;
	int64_t checkpoint_ms;
	double gpu_util;
	int cpu_milli;
	double cpu_milli_used;
	int64_t memory_bytes;
	double memory_bytes_used;
};

struct kn_ledger {
	const struct kn_catalog *catalog;
	struct ledger_node *nodes;
	size_t n_nodes, cap_nodes;
	struct ledger_state *states;
	size_t n_states, cap_states;
	struct ledger_alloc *allocs;
	size_t n_allocs, cap_allocs;
};

static const char *const BY_NAMES[] = {
	[KN_LEDGER_BY_JOB] = "job",
	[KN_LEDGER_BY_USER] = "user",
	[KN_LEDGER_BY_DEPLOYMENT] = "deployment",
	[KN_LEDGER_BY_NODE] = "node",
	[KN_LEDGER_BY_DAY] = "day",
};

const char *kn_ledger_by_name(enum kn_ledger_by by)
{
	return (size_t)by < sizeof(BY_NAMES) / sizeof(BY_NAMES[0])
		       ? BY_NAMES[by]
		       : "unknown";
}

int kn_ledger_by_parse(const char *s, enum kn_ledger_by *out,
		       struct kn_error *err)
{
	for (size_t i = 0; i < sizeof(BY_NAMES) / sizeof(BY_NAMES[0]); i++)
		if (s && !strcmp(s, BY_NAMES[i])) {
			*out = (enum kn_ledger_by)i;
			return 0;
		}
	return kn_errorf(err, KN_EINVAL, "by",
			 "by: unknown grouping \"%s\" (job, user, deployment, "
			 "node or day)", s ? s : "");
}

struct kn_ledger *kn_ledger_new(const struct kn_catalog *catalog)
{
	struct kn_ledger *l = kn_xcalloc(1, sizeof(*l));

	l->catalog = catalog;
	return l;
}

void kn_ledger_free(struct kn_ledger *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->n_nodes; i++)
		free(l->nodes[i].name);
	for (size_t i = 0; i < l->n_allocs; i++) {
		KN_FREE_ALL(l->allocs[i].user, l->allocs[i].deployment);
	}
	KN_FREE_ALL(l->nodes, l->states, l->allocs, l);
}

static int node_index(const struct kn_ledger *l, const char *name)
{
	for (size_t i = 0; name && i < l->n_nodes; i++)
		if (!strcmp(l->nodes[i].name, name))
			return (int)i;
	return -1;
}

int kn_ledger_add_node(struct kn_ledger *l, const char *name,
		       const char *sku, enum kn_pricing pricing, int gpus,
		       struct kn_error *err)
{
	struct ledger_node *n;
	const struct kn_vm_size *size;

	if (!name || !*name || node_index(l, name) >= 0)
		return kn_errorf(err, KN_EINVAL, "node",
				 "node: \"%s\" is empty or already added",
				 name ? name : "");
	if (gpus < 0)
		return kn_errorf(err, KN_EINVAL, "gpus",
				 "gpus: %d is negative (node %s)", gpus, name);
	l->nodes = kn_xgrow(l->nodes, &l->cap_nodes, l->n_nodes,
			    sizeof(*l->nodes));
	n = &l->nodes[l->n_nodes++];
	memset(n, 0, sizeof(*n));
	n->name = kn_xstrdup(name);
	n->gpus = gpus;
	size = sku && *sku && l->catalog ? kn_catalog_find(l->catalog, sku)
					 : NULL;
	n->priced = kn_vm_size_gpu_price(size, pricing, &n->gpu_usd_hr);
	if (!n->priced)
		n->gpu_usd_hr = 0;
	return 0;
}

int kn_ledger_add_state(struct kn_ledger *l, const char *node,
			enum kn_ledger_state state, int64_t start_ms,
			int64_t end_ms, struct kn_error *err)
{
	int i = node_index(l, node);
	struct ledger_state *st;

	if (i < 0)
		return kn_errorf(err, KN_EINVAL, "node", "node: unknown node %s",
				 node ? node : "");
	if (end_ms && end_ms < start_ms)
		return kn_errorf(err, KN_EINVAL, "end",
				 "end: %" PRId64 " is before the start %" PRId64
				 " (node %s)", end_ms, start_ms, node);
	l->states = kn_xgrow(l->states, &l->cap_states, l->n_states,
			     sizeof(*l->states));
	st = &l->states[l->n_states++];
	st->node = (size_t)i;
	st->state = state;
	st->start_ms = start_ms;
	st->end_ms = end_ms;
	return 0;
}

int kn_ledger_add_alloc(struct kn_ledger *l, const struct kn_ledger_alloc *a,
			struct kn_error *err)
{
	int i = node_index(l, a->node);
	struct ledger_alloc *al;

	if (i < 0)
		return kn_errorf(err, KN_EINVAL, "node", "node: unknown node %s",
				 a->node ? a->node : "");
	if (a->n_devices == 0 && a->milli_per_device == 0)
		; /* a task without GPUs: CPU and memory only */
	else if (a->milli_per_device < 1 || a->milli_per_device > 1000)
		return kn_errorf(err, KN_EINVAL, "milli_per_device",
				 "milli_per_device: %d is outside 1..1000 (job "
				 "%" PRId64 ")", a->milli_per_device, a->job_id);
	else if (a->n_devices < 1)
		return kn_errorf(err, KN_EINVAL, "n_devices",
				 "n_devices: %d is below 1 (job %" PRId64 ")",
				 a->n_devices, a->job_id);
	if (a->end_ms && a->end_ms < a->start_ms)
		return kn_errorf(err, KN_EINVAL, "end",
				 "end: %" PRId64 " is before the start %" PRId64
				 " (job %" PRId64 ")", a->end_ms, a->start_ms,
				 a->job_id);
	l->allocs = kn_xgrow(l->allocs, &l->cap_allocs, l->n_allocs,
			     sizeof(*l->allocs));
	al = &l->allocs[l->n_allocs++];
	al->node = (size_t)i;
	al->job_id = a->job_id;
	al->user = kn_xstrdup(a->user ? a->user : "");
	al->deployment = kn_xstrdup(a->deployment ? a->deployment : "");
	al->milli = (int64_t)a->n_devices * a->milli_per_device;
	al->start_ms = a->start_ms;
	al->end_ms = a->end_ms;
	al->lost = a->lost;
	al->checkpoint_ms = a->checkpoint_ms;
	al->gpu_util = a->gpu_util;
	al->cpu_milli = a->cpu_milli;
	al->cpu_milli_used = a->cpu_milli_used;
	al->memory_bytes = a->memory_bytes;
	al->memory_bytes_used = a->memory_bytes_used;
	return 0;
}

/* ---- figures of a row ---- */

double kn_ledger_gpu_seconds(int64_t mms)
{
	return (double)mms / 1e6;
}

double kn_ledger_goodput(const struct kn_ledger_row *r)
{
	if (r->busy_mms <= 0)
		return 1.0;
	return (double)(r->busy_mms - r->lost_mms) / (double)r->busy_mms;
}

static const char *const EFF_NAMES[KN_EFFS] = {
	[KN_EFF_GPU] = "gpu",
	[KN_EFF_CPU] = "cpu",
	[KN_EFF_MEMORY] = "memory",
};

const char *kn_efficiency_name(enum kn_efficiency_of e)
{
	return (unsigned)e < KN_EFFS ? EFF_NAMES[e] : "unknown";
}

bool kn_ledger_resource_efficiency(const struct kn_ledger_row *r,
				   enum kn_efficiency_of e, double *out)
{
	double used, requested;

	switch (e) {
	case KN_EFF_GPU:
		used = r->used_mms;
		requested = (double)r->sampled_mms;
		break;
	case KN_EFF_CPU:
		used = r->cpu_used;
		requested = r->cpu_requested;
		break;
	case KN_EFF_MEMORY:
		used = r->memory_used;
		requested = r->memory_requested;
		break;
	default:
		return false;
	}
	if (requested <= 0)
		return false;
	*out = used / requested;
	return true;
}

bool kn_ledger_efficiency(const struct kn_ledger_row *r, double *out)
{
	double sum = 0, e;
	int n = 0;

	for (int i = 0; i < KN_EFFS; i++)
		if (kn_ledger_resource_efficiency(r, (enum kn_efficiency_of)i,
						  &e)) {
			sum += e;
			n++;
		}
	if (!n)
		return false;
	*out = sum / n;
	return true;
}

double kn_ledger_total_usd(const struct kn_ledger_row *r)
{
	return r->busy_usd + r->idle_usd + r->unhealthy_usd;
}

/* ---- the report ---- */

/* Rows are found by key through an open-addressing index (a month of
   jobs is many thousand rows; a linear search per span would be
   quadratic). */
struct builder {
	const struct kn_ledger *l;
	struct kn_ledger_report *rep;
	size_t cap;
	size_t *slots;   /* row index + 1, 0 = empty */
	size_t n_slots;  /* a power of two, at least twice the rows */
};

static uint64_t key_hash(const char *s)
{
	uint64_t h = 1469598103934665603ULL; /* FNV-1a */

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return h;
}

static void index_put(size_t *slots, size_t n_slots, const char *key,
		      size_t row)
{
	size_t i = (size_t)key_hash(key) & (n_slots - 1);

	while (slots[i])
		i = (i + 1) & (n_slots - 1);
	slots[i] = row + 1;
}

static void index_grow(struct builder *b)
{
	size_t n = b->n_slots ? b->n_slots * 2 : 64;

	free(b->slots);
	b->slots = kn_xcalloc(n, sizeof(*b->slots));
	b->n_slots = n;
	for (size_t r = 0; r < b->rep->n_rows; r++)
		index_put(b->slots, n, b->rep->rows[r].key, r);
}

static void day_key(int64_t ms, char *buf, size_t len)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(buf, len, "%Y-%m-%d", &tm);
}

/* The row called key (cut to the key's size), added zeroed when
   missing. */
static struct kn_ledger_row *row(struct builder *b, const char *full_key)
{
	struct kn_ledger_report *rep = b->rep;
	struct kn_ledger_row *r;
	char key[sizeof(r->key)];
	size_t i;

	kn_strlcpy(key, full_key, sizeof(key));
	if (b->n_slots) {
		for (i = (size_t)key_hash(key) & (b->n_slots - 1); b->slots[i];
		     i = (i + 1) & (b->n_slots - 1))
			if (!strcmp(rep->rows[b->slots[i] - 1].key, key))
				return &rep->rows[b->slots[i] - 1];
	}
	if (2 * (rep->n_rows + 1) > b->n_slots)
		index_grow(b);
	rep->rows = kn_xgrow(rep->rows, &b->cap, rep->n_rows,
			     sizeof(*rep->rows));
	r = &rep->rows[rep->n_rows++];
	memset(r, 0, sizeof(*r));
	kn_strlcpy(r->key, key, sizeof(r->key));
	index_put(b->slots, b->n_slots, r->key, rep->n_rows - 1);
	return r;
}

enum part { PART_BUSY, PART_LOST, PART_IDLE, PART_UNHEALTHY };

/* Add mms of part to a row and the total, priced at node's price;
   busy time of a (NULL for idle time) over ms also adds its CPU and
   memory. */
static void add_to(struct kn_ledger_row *r, const struct ledger_node *n,
		   const struct ledger_alloc *a, enum part part, int64_t mms,
		   int64_t ms, double util)
{
	double usd = (double)mms * n->gpu_usd_hr / MMS_PER_GPU_HOUR;

	if (!n->priced && mms > 0)
		r->unpriced = true;
	switch (part) {
	case PART_BUSY:
		r->busy_mms += mms;
		r->busy_usd += usd;
		if (util >= 0) {
			r->sampled_mms += mms;
			r->used_mms += (double)mms * util;
		}
		if (a && a->cpu_milli > 0 && a->cpu_milli_used >= 0) {
			r->cpu_requested += (double)a->cpu_milli * (double)ms;
			r->cpu_used += a->cpu_milli_used * (double)ms;
		}
		if (a && a->memory_bytes > 0 && a->memory_bytes_used >= 0) {
			r->memory_requested +=
				(double)a->memory_bytes * (double)ms;
			r->memory_used += a->memory_bytes_used * (double)ms;
		}
		break;
	case PART_LOST:
		r->lost_mms += mms;
		r->lost_usd += usd;
		break;
	case PART_IDLE:
		r->idle_mms += mms;
		r->idle_usd += usd;
		break;
	case PART_UNHEALTHY:
		r->unhealthy_mms += mms;
		r->unhealthy_usd += usd;
		break;
	}
}

/*
 * milli GPUs of part over [start, end) on node, for the allocation a
 * (NULL for idle and unhealthy time, which only node and day rows own),
 * cut at UTC midnights when grouping by day.
 */
static void add_span(struct builder *b, size_t node,
		     const struct ledger_alloc *a, enum part part,
		     int64_t milli, int64_t start, int64_t end)
{
	const struct ledger_node *n = &b->l->nodes[node];
	double util = a ? a->gpu_util : -1;
	char key[96];

	if (start < b->rep->since_ms)
		start = b->rep->since_ms;
	if (end > b->rep->until_ms)
		end = b->rep->until_ms;
	/* A task without GPUs still has busy time for its CPU and memory. */
	while (start < end && (milli > 0 || (a && part == PART_BUSY))) {
		int64_t stop = end;
		struct kn_ledger_row *r = NULL;

		switch (b->rep->by) {
		case KN_LEDGER_BY_DAY: {
			int64_t midnight = (start / MS_PER_DAY + 1) * MS_PER_DAY;

			if (midnight < stop)
				stop = midnight;
			day_key(start, key, sizeof(key));
			r = row(b, key);
			break;
		}
		case KN_LEDGER_BY_NODE:
			r = row(b, n->name);
			break;
		case KN_LEDGER_BY_JOB:
			if (a) {
				snprintf(key, sizeof(key), "%" PRId64, a->job_id);
				r = row(b, key);
			}
			break;
		case KN_LEDGER_BY_USER:
			if (a)
				r = row(b, a->user);
			break;
		case KN_LEDGER_BY_DEPLOYMENT:
			if (a)
				r = row(b, a->deployment);
			break;
		}
		if (r)
			add_to(r, n, a, part, milli * (stop - start),
			       stop - start, util);
		add_to(&b->rep->total, n, a, part, milli * (stop - start),
		       stop - start, util);
		start = stop;
	}
}

struct event {
	int64_t t;
	int order;       /* at one time: state ends, state starts, the rest */
	int64_t dmilli;  /* allocation start (+) or end (-) */
	int state;       /* -1 none, else enum kn_ledger_state */
};

static int event_cmp(const void *pa, const void *pb)
{
	const struct event *a = pa, *b = pb;

	if (a->t != b->t)
		return a->t < b->t ? -1 : 1;
	return a->order - b->order;
}

/* Idle and unhealthy time of one node, by sweeping its events. */
static void sweep_node(struct builder *b, size_t node)
{
	const struct kn_ledger *l = b->l;
	int64_t until = b->rep->until_ms;
	int64_t capacity = (int64_t)l->nodes[node].gpus * 1000;
	struct event *ev = kn_xcalloc(2 * (l->n_states + l->n_allocs) + 1,
				      sizeof(*ev));
	size_t n = 0;
	int64_t allocated = 0, prev = 0;
	int state = -1;

	for (size_t i = 0; i < l->n_states; i++) {
		const struct ledger_state *st = &l->states[i];

		if (st->node != node)
			continue;
		ev[n++] = (struct event){ st->start_ms, 1, 0, (int)st->state };
		ev[n++] = (struct event){ st->end_ms ? st->end_ms : until, 0, 0,
					  -1 };
	}
	for (size_t i = 0; i < l->n_allocs; i++) {
		const struct ledger_alloc *a = &l->allocs[i];

		if (a->node != node)
			continue;
		ev[n++] = (struct event){ a->start_ms, 2, a->milli, -2 };
		ev[n++] = (struct event){ a->end_ms ? a->end_ms : until, 2,
					  -a->milli, -2 };
	}
	qsort(ev, n, sizeof(*ev), event_cmp);
	for (size_t i = 0; i < n; i++) {
		if (state >= 0 && ev[i].t > prev) {
			int64_t free_milli = capacity - allocated;

			add_span(b, node, NULL,
				 state == KN_LEDGER_UP ? PART_IDLE
						       : PART_UNHEALTHY,
				 free_milli > 0 ? free_milli : 0, prev, ev[i].t);
		}
		prev = ev[i].t;
		if (ev[i].state == -2)
			allocated += ev[i].dmilli;
		else
			state = ev[i].state;
	}
	free(ev);
}

static bool all_digits(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (*s < '0' || *s > '9')
			return false;
	return true;
}

/* Keys in order: job ids as numbers (shorter is smaller), the rest (days,
   names) as text. */
static int row_cmp(const void *pa, const void *pb)
{
	const struct kn_ledger_row *a = pa, *b = pb;

	if (all_digits(a->key) && all_digits(b->key) &&
	    strlen(a->key) != strlen(b->key))
		return strlen(a->key) < strlen(b->key) ? -1 : 1;
	return strcmp(a->key, b->key);
}

int kn_ledger_report(const struct kn_ledger *l, enum kn_ledger_by by,
		     int64_t since_ms, int64_t until_ms,
		     struct kn_ledger_report **out, struct kn_error *err)
{
	struct builder b = { .l = l };
	struct kn_ledger_report *rep;

	if (until_ms <= since_ms)
		return kn_errorf(err, KN_EINVAL, "since",
				 "since: %" PRId64 " is not before the end of "
				 "the report %" PRId64, since_ms, until_ms);
	rep = kn_xcalloc(1, sizeof(*rep));
	rep->by = by;
	rep->since_ms = since_ms;
	rep->until_ms = until_ms;
	kn_strlcpy(rep->total.key, "total", sizeof(rep->total.key));
	b.rep = rep;
	for (size_t i = 0; i < l->n_allocs; i++) {
		const struct ledger_alloc *a = &l->allocs[i];
		int64_t end = a->end_ms ? a->end_ms : until_ms;

		add_span(&b, a->node, a, PART_BUSY, a->milli, a->start_ms, end);
		if (a->lost)
			add_span(&b, a->node, a, PART_LOST, a->milli,
				 a->checkpoint_ms > a->start_ms
					 ? a->checkpoint_ms
					 : a->start_ms,
				 end);
	}
	for (size_t i = 0; i < l->n_nodes; i++)
		sweep_node(&b, i);
	rep->unpriced_nodes = kn_xcalloc(l->n_nodes + 1,
					 sizeof(*rep->unpriced_nodes));
	for (size_t i = 0; i < l->n_nodes; i++)
		if (!l->nodes[i].priced)
			rep->unpriced_nodes[rep->n_unpriced_nodes++] =
				l->nodes[i].name;
	free(b.slots);
	if (rep->n_rows)
		qsort(rep->rows, rep->n_rows, sizeof(*rep->rows), row_cmp);
	*out = rep;
	return 0;
}

void kn_ledger_report_free(struct kn_ledger_report *r)
{
	if (!r)
		return;
	KN_FREE_ALL(r->rows, r->unpriced_nodes, r);
}

/* ---- reservation advice ---- */

void kn_reservation_advise(const struct kn_vm_size *s, double u,
			   struct kn_reservation_advice *out)
{
	static const enum kn_pricing terms[2] = { KN_PRICING_RESERVED_1Y,
						  KN_PRICING_RESERVED_3Y };
	double payg = -1;

	memset(out, 0, sizeof(*out));
	out->utilisation = u < 0 ? 0 : u > 1 ? 1 : u;
	if (!kn_vm_size_price(s, KN_PRICING_ON_DEMAND, &payg) || payg <= 0)
		payg = -1;
	out->on_demand_usd_hr = payg;
	for (int k = 0; k < 2; k++) {
		double ri = -1;

		if (!kn_vm_size_price(s, terms[k], &ri))
			ri = -1;
		out->reserved_usd_hr[k] = ri;
		out->break_even[k] = payg > 0 && ri >= 0 ? ri / payg : -1;
		out->pays_off[k] = out->break_even[k] >= 0 &&
				   out->utilisation >= out->break_even[k];
	}
}
