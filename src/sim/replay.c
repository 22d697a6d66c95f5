/*
 * sim: the replay with departures (kiln sim --departures). Where the
 * paper's experiment only fills the cluster, here pods arrive at their
 * recorded times, wait in a queue when nothing fits, run for their
 * recorded time and leave, so a policy is judged by what users feel:
 * how long GPU pods wait, how many never start, and how much idle GPU
 * sat next to a queue that asked for it.
 *
 * A failed placement attempt costs a pass over every node, and a long
 * queue is retried after every departure; within one pass a pod whose
 * shape already failed is skipped, as the cluster only fills during a
 * pass and the same shape cannot fit where it did not.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/internal.h"

enum pod_state { POD_COMING, POD_WAITING, POD_RUNNING, POD_GONE };

/* A timed event: a placed pod leaving or a waiting one giving up. */
struct event {
	double t;
	size_t pod;
	bool give_up; /* at equal times departures come first */
};

static bool event_before(const void *a, const void *b)
{
	const struct event *x = a, *y = b;

	if (x->t != y->t)
		return x->t < y->t;
	if (x->give_up != y->give_up)
		return !x->give_up;
	return x->pod < y->pod;
}

struct replay {
	struct kn_sim *sim;
	const struct kn_pack_policy *policy;
	struct kn_rng rng;
	size_t *arrivals; /* replayed pods by arrival time */
	size_t n_arrivals;
	double *arrive;   /* per pod, replay seconds */
	enum pod_state *state;
	struct kn_pack_placement *where;
	size_t *queue;    /* waiting pods, oldest first (gone ones skipped) */
	size_t n_queue;
	struct kn_heap events; /* of struct event */
	double *waits;    /* GPU pods placed */
	size_t n_waits;
	int64_t waiting_milli; /* GPU asked for by the queue */
};

static void push_event(struct replay *r, double t, size_t pod, bool give_up)
{
	struct event e = {t, pod, give_up};

	kn_heap_push(&r->events, &e);
}

/* When the next event is due; INFINITY with none left. */
static double next_event_time(const struct replay *r)
{
	return r->events.n > 0 ? ((const struct event *)r->events.v)->t
			       : INFINITY;
}

static double run_time(const struct sim_pod *p)
{
	return (double)(p->deleted - p->scheduled);
}

static bool is_gpu(const struct sim_pod *p)
{
	return p->pod.num_gpu > 0;
}

static int64_t gpu_milli(const struct sim_pod *p)
{
	return (int64_t)p->pod.num_gpu * p->pod.gpu_milli;
}

static bool same_shape(const struct kn_pack_pod *a,
		       const struct kn_pack_pod *b)
{
	return a->cpu_milli == b->cpu_milli &&
	       a->memory_mib == b->memory_mib && a->num_gpu == b->num_gpu &&
	       a->gpu_milli == b->gpu_milli &&
	       a->constrained == b->constrained &&
	       (!a->constrained || a->models == b->models);
}

/* Try the queue from position first on; place what fits, at time t. */
static void place_queue(struct replay *r, size_t first, double t)
{
	const struct kn_pack_pod *failed[256];
	size_t n_failed = 0, kept = first;

	for (size_t q = first; q < r->n_queue; q++) {
		size_t i = r->queue[q];
		struct sim_pod *p = &r->sim->pods[i];
		bool skip = false;

		if (r->state[i] != POD_WAITING)
			continue;
		for (size_t f = 0; f < n_failed && !skip; f++)
			skip = same_shape(failed[f], &p->pod);
		if (skip || kn_pack_place(r->sim->cluster, r->policy, &p->pod,
					  &r->rng, &r->where[i]) < 0) {
			if (!skip && n_failed < sizeof(failed) / sizeof(*failed))
				failed[n_failed++] = &p->pod;
			r->queue[kept++] = i;
			continue;
		}
		r->state[i] = POD_RUNNING;
		r->waiting_milli -= gpu_milli(p);
		if (is_gpu(p))
			r->waits[r->n_waits++] = t - r->arrive[i];
		push_event(r, t + run_time(p), i, false);
	}
	r->n_queue = kept;
}

/* Handle the events due at t; true when a pod left (room was freed). */
static bool due_events(struct replay *r, double t, struct kn_sim_replay *out)
{
	bool freed = false;

	while (r->events.n > 0 && next_event_time(r) <= t) {
		struct event e;
		struct sim_pod *p;

		kn_heap_pop(&r->events, &e);
		p = &r->sim->pods[e.pod];

		if (!e.give_up) {
			kn_pack_unbind(r->sim->cluster, &r->where[e.pod],
				       &p->pod);
			r->state[e.pod] = POD_GONE;
			freed = true;
		} else if (r->state[e.pod] == POD_WAITING) {
			r->state[e.pod] = POD_GONE;
			r->waiting_milli -= gpu_milli(p);
			out->never_placed++;
			out->gpu_never_placed += is_gpu(p);
		}
	}
	return freed;
}

static int by_arrival(const void *pa, const void *pb, void *ctx)
{
	const double *arrive = ctx;
	size_t a = *(const size_t *)pa, b = *(const size_t *)pb;

	if (arrive[a] != arrive[b])
		return arrive[a] < arrive[b] ? -1 : 1;
	return a < b ? -1 : a > b;
}

static int replay_init(struct replay *r, struct kn_sim *sim, double load,
		       struct kn_sim_replay *out, struct kn_error *err)
{
	size_t n = sim->n_pods;

	if (!sim->timed)
		return kn_errorf(err, KN_EINVAL, "creation_time",
				 "the pod list has no creation_time and "
				 "deletion_time columns: a replay with "
				 "departures needs both");
	if (!(load > 0) || !isfinite(load))
		return kn_errorf(err, KN_EINVAL, "load",
				 "load: must be a number above 0");
	r->arrivals = kn_xcalloc(n, sizeof(*r->arrivals));
	r->arrive = kn_xcalloc(n, sizeof(*r->arrive));
	r->state = kn_xcalloc(n, sizeof(*r->state));
	r->where = kn_xcalloc(n, sizeof(*r->where));
	r->queue = kn_xcalloc(n, sizeof(*r->queue));
	r->waits = kn_xcalloc(n, sizeof(*r->waits));
	for (size_t i = 0; i < n; i++) {
		const struct sim_pod *p = &sim->pods[i];

		if (p->created < 0 || p->scheduled < 0) {
			out->left_out++;
			continue;
		}
		r->arrive[i] = (double)p->created / load;
		r->arrivals[r->n_arrivals++] = i;
		out->gpu_pods += is_gpu(p);
	}
	out->pods = r->n_arrivals;
	qsort_r(r->arrivals, r->n_arrivals, sizeof(*r->arrivals), by_arrival,
		r->arrive);
	return 0;
}

static void replay_release(struct replay *r)
{
	KN_FREE_ALL(r->arrivals, r->arrive, r->state, r->where, r->queue,
		    r->waits);
	kn_heap_release(&r->events);
}

/* Add the interval [from, to) at the cluster's present state. */
static void account(struct replay *r, double from, double to,
		    struct kn_sim_replay *out)
{
	struct kn_pack *c = r->sim->cluster;
	double hours = (to - from) / 3600.0;
	int64_t idle;

	if (hours <= 0)
		return;
	idle = kn_pack_idle_milli(c);
	out->used_gpu_hours +=
		hours * (double)(kn_pack_gpu_capacity(c) - idle) / 1000.0;
	out->frag_gpu_hours += hours * kn_pack_frag_milli(c) / 1000.0;
	out->stranded_gpu_hours +=
		hours *
		(double)(idle < r->waiting_milli ? idle : r->waiting_milli) /
		1000.0;
}

int kn_sim_replay_run(struct kn_sim *sim, const struct kn_pack_policy *policy,
		      uint64_t seed, double load, struct kn_sim_replay *out,
		      struct kn_error *err)
{
	struct replay r = {
		.sim = sim,
		.policy = policy,
		.events = {.size = sizeof(struct event), .before = event_before},
	};
	struct kn_rng order_rng;
	double now = 0, start = 0;
	size_t next = 0;
	int rc;

	memset(out, 0, sizeof(*out));
	rc = replay_init(&r, sim, load, out, err);
	if (rc < 0)
		goto out;
	kn_rng_seed(&order_rng, seed);
	kn_rng_seed(&r.rng, seed ^ 0x6b696c6e2d73696dULL);
	sim_node_order(sim, &order_rng);
	if (r.n_arrivals > 0)
		now = start = r.arrive[r.arrivals[0]];
	while (next < r.n_arrivals || r.events.n > 0) {
		double t = next < r.n_arrivals ? r.arrive[r.arrivals[next]]
					       : INFINITY;
		bool freed;
		size_t first_new = r.n_queue;

		if (next_event_time(&r) < t)
			t = next_event_time(&r);
		account(&r, now, t, out);
		now = t;
		freed = due_events(&r, t, out);
		for (; next < r.n_arrivals && r.arrive[r.arrivals[next]] <= t;
		     next++) {
			size_t i = r.arrivals[next];
			const struct sim_pod *p = &sim->pods[i];

			r.state[i] = POD_WAITING;
			r.queue[r.n_queue++] = i;
			r.waiting_milli += gpu_milli(p);
			push_event(&r, t + (double)(p->deleted - p->created), i,
				   true);
		}
		/* Nothing left since the last pass: only newcomers can fit. */
		place_queue(&r, freed ? 0 : first_new, t);
	}
	out->span_hours = (now - start) / 3600.0;
	out->wait_mean_s = NAN;
	if (r.n_waits > 0) {
		struct kn_sim_stats s;

		kn_sim_stats(r.waits, r.n_waits, &s);
		out->wait_mean_s = s.mean;
	}
	out->wait_p50_s = kn_sim_quantile(r.waits, r.n_waits, 0.5);
	out->wait_p99_s = kn_sim_quantile(r.waits, r.n_waits, 0.99);
out:
	replay_release(&r);
	return rc;
}
