/*
 * sched: gang placement over a cluster snapshot.
 *
 * Every task of a gang asks for the same thing, so a node's room is a plain
 * count: how many more such tasks it holds, the smallest of what its free
 * GPUs, CPUs and memory allow. Placing a task lowers exactly one node's room
 * by one, which makes the greedy loop below exact: it places the whole gang
 * whenever the rooms of the usable nodes add up to the gang size.
 *
 * Tasks are placed one by one and charged to the snapshot as they go; when
 * one finds no node, the tasks already charged are released again, so a
 * failed call leaves the snapshot exactly as it found it. Bindings are
 * planned in scratch memory and copied out only on success.
 *
 * Reasons are worked out only after a failure, on the restored snapshot:
 * first against the cluster as if it were empty (a request that fails there
 * "can never fit" and should be fixed, not waited on), then against what is
 * free now. The alternative, tracking why each node was rejected during
 * placement, spreads diagnosis through the hot path and still cannot tell
 * "never" from "not now".
 */
#include "sched/sched.h"
#include "sched/mirror_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MIB ((int64_t)1024 * 1024)
#define MILLI 1000

/* NULL and "" are the same missing value in labels, taints and tolerations. */
static bool same_text(const char *a, const char *b)
{
	return strcmp(a ? a : "", b ? b : "") == 0;
}

/* ---- node filters ---------------------------------------------------- */

static bool node_matches_selector(const struct kn_sched_node *node,
				  const struct kn_sched_request *req)
{
	for (size_t s = 0; s < req->n_selector; s++) {
		bool found = false;

		for (size_t l = 0; l < node->n_labels && !found; l++)
			found = same_text(node->labels[l].key,
					  req->selector[s].key) &&
				same_text(node->labels[l].value,
					  req->selector[s].value);
		if (!found)
			return false;
	}
	return true;
}

static bool toleration_matches(const struct kn_sched_toleration *tol,
			       const struct kn_sched_taint *taint)
{
	if (tol->key) {
		if (!same_text(tol->key, taint->key))
			return false;
	} else if (!tol->exists) {
		return false; /* an empty key only makes sense with Exists */
	}
	if (!tol->exists && !same_text(tol->value, taint->value))
		return false;
	return !tol->effect || same_text(tol->effect, taint->effect);
}

static bool taint_tolerated(const struct kn_sched_request *req,
			    const struct kn_sched_taint *taint)
{
	for (size_t t = 0; t < req->n_tolerations; t++)
		if (toleration_matches(&req->tolerations[t], taint))
			return true;
	return false;
}

/*
 * Only PreferNoSchedule is soft. Any other effect, including ones this
 * version does not know (NoExecute), keeps tasks off the node: a taint is
 * put there to keep work away, so the safe reading of an unknown one is no.
 */
static bool taint_is_soft(const struct kn_sched_taint *taint)
{
	return same_text(taint->effect, "PreferNoSchedule");
}

/* The first taint that keeps req off node, or NULL. */
static const struct kn_sched_taint *
blocking_taint(const struct kn_sched_node *node,
	       const struct kn_sched_request *req)
{
	for (size_t t = 0; t < node->n_taints; t++)
		if (!taint_is_soft(&node->taints[t]) &&
		    !taint_tolerated(req, &node->taints[t]))
			return &node->taints[t];
	return NULL;
}

static bool has_untolerated_soft_taint(const struct kn_sched_node *node,
				       const struct kn_sched_request *req)
{
	for (size_t t = 0; t < node->n_taints; t++)
		if (taint_is_soft(&node->taints[t]) &&
		    !taint_tolerated(req, &node->taints[t]))
			return true;
	return false;
}

/* The node's value of label key, or NULL when it has no such label. */
static const char *label_value(const struct kn_sched_node *node,
			       const char *key)
{
	for (size_t l = 0; l < node->n_labels; l++)
		if (same_text(node->labels[l].key, key))
			return node->labels[l].value ? node->labels[l].value
						     : "";
	return NULL;
}

static bool term_holds(const struct kn_sched_node *node,
		       const struct kn_sched_affinity_term *term)
{
	const char *value = label_value(node, term->key);
	bool listed = false;

	for (size_t v = 0; value && v < term->n_values && !listed; v++)
		listed = same_text(term->values[v], value);
	switch (term->op) {
	case KN_SCHED_IN:
		return listed;
	case KN_SCHED_NOT_IN:
		return !listed;
	case KN_SCHED_EXISTS:
		return value != NULL;
	case KN_SCHED_DOES_NOT_EXIST:
		return value == NULL;
	}
	return false;
}

/* The first required affinity term node fails, or NULL. */
static const struct kn_sched_affinity_term *
failed_term(const struct kn_sched_node *node,
	    const struct kn_sched_request *req)
{
	for (size_t t = 0; t < req->n_required; t++)
		if (!term_holds(node, &req->required[t]))
			return &req->required[t];
	return NULL;
}

static int64_t affinity_weight(const struct kn_sched_node *node,
			       const struct kn_sched_request *req)
{
	int64_t sum = 0;

	for (size_t t = 0; t < req->n_preferred; t++)
		if (term_holds(node, &req->preferred[t]))
			sum += req->preferred[t].weight;
	return sum;
}

/*
 * Selector, required affinity and taints: what no amount of free capacity
 * can change.
 */
static bool node_eligible(const struct kn_sched_node *node,
			  const struct kn_sched_request *req)
{
	return node_matches_selector(node, req) && !failed_term(node, req) &&
	       !blocking_taint(node, req);
}

bool kn_sched_model_accepts(const char *wanted, const char *model)
{
	size_t n = strlen(wanted);

	if (!model)
		return false;
	return strncasecmp(wanted, model, n) == 0 &&
	       (model[n] == '\0' || model[n] == '-');
}

static bool wants_gpu(const struct kn_sched_request *req)
{
	return req->gpu_milli > 0 || req->mig_profile;
}

static bool wants_models(const struct kn_sched_request *req)
{
	return wants_gpu(req) && req->gpu_models && req->n_gpu_models > 0;
}

/*
 * A device in MIG mode serves MIG requests for the profiles of its model
 * only; any other device serves everything else.
 */
static bool device_usable(const struct kn_sched_request *req,
			  const struct kn_sched_device *dev)
{
	if (req->mig_profile ? !dev->mig || !kn_mig_profile(dev->mig,
							    req->mig_profile)
			     : dev->mig != NULL)
		return false;
	if (!wants_models(req))
		return true;
	for (size_t m = 0; m < req->n_gpu_models; m++)
		if (kn_sched_model_accepts(req->gpu_models[m], dev->model))
			return true;
	return false;
}

/* ---- room ------------------------------------------------------------ */

/* Tasks of req that a node holds, by resource; INT_MAX = not limited. */
struct room {
	int gpu;
	int cpu;
	int mem;
};

static int room_total(const struct room *r)
{
	int n = r->gpu;

	if (r->cpu < n)
		n = r->cpu;
	if (r->mem < n)
		n = r->mem;
	return n;
}

static int clamp_int(int64_t v)
{
	return v > INT_MAX ? INT_MAX : (int)v;
}

/* empty: as if nothing were allocated, to tell "never" from "not now". */
static int device_free(const struct kn_sched_device *dev, bool empty)
{
	int used = empty ? 0 : dev->used_milli;

	if (used <= 0)
		return MILLI;
	return used >= MILLI ? 0 : MILLI - used;
}

static bool cpu_limited(const struct kn_sched_node *node,
			const struct kn_sched_request *req)
{
	return node->cpu_milli_total > 0 && req->cpu_milli > 0;
}

static bool mem_limited(const struct kn_sched_node *node,
			const struct kn_sched_request *req)
{
	return node->memory_total > 0 && req->memory_bytes > 0;
}

static int cpu_free(const struct kn_sched_node *node, bool empty)
{
	int used = empty ? 0 : node->cpu_milli_used;

	return used >= node->cpu_milli_total ? 0
					     : node->cpu_milli_total - used;
}

static int64_t mem_free(const struct kn_sched_node *node, bool empty)
{
	int64_t used = empty ? 0 : node->memory_used;

	return used >= node->memory_total ? 0 : node->memory_total - used;
}

/* Usable devices on node, and those of them with nothing allocated. */
static void count_whole(const struct kn_sched_node *node,
			const struct kn_sched_request *req, bool empty,
			int *usable, int *idle)
{
	*usable = 0;
	*idle = 0;
	for (size_t d = 0; d < node->n_devices; d++) {
		if (!device_usable(req, &node->devices[d]))
			continue;
		(*usable)++;
		if (device_free(&node->devices[d], empty) == MILLI)
			(*idle)++;
	}
}

/*
 * How many more instances of the request's profile a MIG device takes,
 * placing them as kn_sched_place would: placing one then lowers this by
 * exactly one, which the gang loop relies on.
 */
static int mig_room(const struct kn_sched_device *dev,
		    const struct kn_sched_request *req, bool empty)
{
	const struct kn_mig_profile *p = kn_mig_profile(dev->mig,
						       req->mig_profile);
	struct kn_sched_mig_slice used[KN_MIG_MAX_SLICES];
	int n = empty ? 0 : dev->n_mig_slices, k = 0, start;

	memcpy(used, dev->mig_slices, (size_t)n * sizeof(*used));
	while (n < KN_MIG_MAX_SLICES &&
	       kn_mig_fit(dev->mig, used, n, p, &start) == 0) {
		used[n].profile = p;
		used[n++].start = start;
		k++;
	}
	return k;
}

static struct room node_room(const struct kn_sched_node *node,
			     const struct kn_sched_request *req, bool empty)
{
	struct room r = {INT_MAX, INT_MAX, INT_MAX};

	if (req->mig_profile) {
		r.gpu = 0;
		for (size_t d = 0; d < node->n_devices; d++)
			if (device_usable(req, &node->devices[d]))
				r.gpu += mig_room(&node->devices[d], req,
						  empty);
	} else if (req->gpu_milli >= MILLI) {
		int usable, idle;

		count_whole(node, req, empty, &usable, &idle);
		r.gpu = idle / (req->gpu_milli / MILLI);
	} else if (req->gpu_milli > 0) {
		int64_t n = 0;

		for (size_t d = 0; d < node->n_devices; d++)
			if (device_usable(req, &node->devices[d]))
				n += device_free(&node->devices[d], empty) /
				     req->gpu_milli;
		r.gpu = clamp_int(n);
	}
	if (cpu_limited(node, req))
		r.cpu = cpu_free(node, empty) / req->cpu_milli;
	if (mem_limited(node, req))
		r.mem = clamp_int(mem_free(node, empty) / req->memory_bytes);
	return r;
}

static int64_t node_free_gpu_milli(const struct kn_sched_node *node)
{
	int64_t n = 0;

	for (size_t d = 0; d < node->n_devices; d++)
		if (!node->devices[d].mig)
			n += device_free(&node->devices[d], false);
	return n;
}

/* ---- placement ------------------------------------------------------- */

static bool bound_to(const struct kn_sched_binding *bindings, size_t placed,
		     size_t node)
{
	for (size_t t = 0; t < placed; t++)
		if (bindings[t].node == node)
			return true;
	return false;
}

/*
 * Tasks of this gang (and of its spread group, req->spread_placed) already
 * on nodes whose spread label has the same value as node's; a missing
 * label is one more value of its own.
 */
static int spread_used(const struct kn_sched_cluster *cluster,
		       const struct kn_sched_request *req,
		       const struct kn_sched_binding *bindings, size_t placed,
		       size_t node)
{
	const char *mine = label_value(&cluster->nodes[node], req->spread_key);
	int n = 0;

	for (size_t t = 0; t < placed; t++) {
		const char *theirs = label_value(
			&cluster->nodes[bindings[t].node], req->spread_key);

		if (mine && theirs ? strcmp(mine, theirs) == 0
				   : mine == theirs)
			n++;
	}
	for (size_t i = 0; req->spread_placed && i < cluster->n_nodes; i++) {
		const char *theirs =
			label_value(&cluster->nodes[i], req->spread_key);

		if (mine && theirs ? strcmp(mine, theirs) == 0
				   : mine == theirs)
			n += req->spread_placed[i];
	}
	return n;
}

/* Lower is better, compared field by field; node order breaks ties. */
struct node_score {
	int soft_taint;     /* an untolerated PreferNoSchedule taint */
	int spread;         /* gang tasks already in this spread domain */
	int64_t affinity;   /* minus the preferred terms' weight */
	int new_node;       /* no earlier task of this gang is there */
	int cannot_finish;  /* cannot hold every task still to place */
	int64_t fit;        /* best fit: least GPU left free; or minus the
			       packing policy's score */
};

static bool score_less(const struct node_score *a, const struct node_score *b)
{
	if (a->soft_taint != b->soft_taint)
		return a->soft_taint < b->soft_taint;
	if (a->spread != b->spread)
		return a->spread < b->spread;
	if (a->affinity != b->affinity)
		return a->affinity < b->affinity;
	if (a->new_node != b->new_node)
		return a->new_node < b->new_node;
	if (a->cannot_finish != b->cannot_finish)
		return a->cannot_finish < b->cannot_finish;
	return a->fit < b->fit;
}

/*
 * The node for the next task, or SIZE_MAX when none has room. Preferring a
 * node that can hold the rest of the gang keeps a gang on one node whenever
 * one can take it, even if a fuller node would take the first task.
 */
static size_t choose_node(const struct kn_sched_cluster *cluster,
			  const struct kn_sched_request *req,
			  const struct kn_sched_binding *bindings, size_t placed,
			  struct mirror *packing)
{
	size_t best = SIZE_MAX;
	struct node_score best_score = {0};
	int remaining = req->tasks - (int)placed;

	for (size_t i = 0; i < cluster->n_nodes; i++) {
		const struct kn_sched_node *node = &cluster->nodes[i];
		struct node_score score;
		struct room r;
		int room;

		if (!node->schedulable || !node_eligible(node, req))
			continue;
		r = node_room(node, req, false);
		room = room_total(&r);
		if (room < 1)
			continue;
		score.soft_taint = has_untolerated_soft_taint(node, req);
		score.spread = req->spread_key ? spread_used(cluster, req,
							     bindings, placed,
							     i)
					       : 0;
		score.affinity = -affinity_weight(node, req);
		score.new_node = !bound_to(bindings, placed, i);
		score.cannot_finish = room < remaining;
		score.fit = packing ? -mirror_score(packing, i)
				    : node_free_gpu_milli(node);
		if (best == SIZE_MAX || score_less(&score, &best_score)) {
			best = i;
			best_score = score;
		}
	}
	return best;
}

/*
 * A MIG instance goes to the usable device that already holds the most
 * instances (packing MIG GPUs before opening another), lowest index on
 * ties, at the start kn_mig_fit picks.
 */
static void pick_mig(const struct kn_sched_node *node,
		     const struct kn_sched_request *req,
		     struct kn_sched_binding *b)
{
	const struct kn_sched_device *best = NULL;
	int best_start = -1;

	for (size_t d = 0; d < node->n_devices; d++) {
		const struct kn_sched_device *dev = &node->devices[d];
		int start;

		if (!device_usable(req, dev) ||
		    kn_mig_fit(dev->mig, dev->mig_slices, dev->n_mig_slices,
			       kn_mig_profile(dev->mig, req->mig_profile),
			       &start) < 0)
			continue;
		if (!best || dev->n_mig_slices > best->n_mig_slices ||
		    (dev->n_mig_slices == best->n_mig_slices &&
		     dev->index < best->index)) {
			best = dev;
			best_start = start;
		}
	}
	b->devices[b->n_devices++] = best->index;
	b->mig_start = best_start;
	b->mig_profile = kn_mig_profile(best->mig, req->mig_profile);
}

/*
 * Pick devices for one task on a node that has room for it. Whole GPUs take
 * the idle usable devices with the lowest indexes, so a task sees "0,1"
 * rather than whatever order the snapshot lists them in. A share goes to
 * the fullest device that still has room for it (best fit), which leaves
 * whole devices free for whole-GPU work, unless a packing policy named the
 * device (share_device, a position in node->devices, or -1).
 */
static void pick_devices(const struct kn_sched_node *node,
			 const struct kn_sched_request *req, int share_device,
			 struct kn_sched_binding *b)
{
	b->n_devices = 0;
	b->milli_per_device = 0;
	b->mig_start = -1;
	b->mig_profile = NULL;
	if (req->mig_profile) {
		pick_mig(node, req, b);
	} else if (req->gpu_milli >= MILLI) {
		int want = req->gpu_milli / MILLI;
		int last = INT_MIN;

		b->milli_per_device = MILLI;
		while (b->n_devices < want) {
			int next = INT_MAX;

			for (size_t d = 0; d < node->n_devices; d++) {
				const struct kn_sched_device *dev =
					&node->devices[d];

				if (device_usable(req, dev) &&
				    device_free(dev, false) == MILLI &&
				    dev->index > last && dev->index < next)
					next = dev->index;
			}
			b->devices[b->n_devices++] = next;
			last = next;
		}
	} else if (req->gpu_milli > 0) {
		const struct kn_sched_device *best = NULL;

		bool named = share_device >= 0 &&
			     device_usable(req, &node->devices[share_device]) &&
			     device_free(&node->devices[share_device],
					 false) >= req->gpu_milli;

		if (named)
			best = &node->devices[share_device];
		for (size_t d = 0; d < node->n_devices; d++) {
			const struct kn_sched_device *dev = &node->devices[d];
			int free_milli = device_free(dev, false);

			if (named || !device_usable(req, dev) ||
			    free_milli < req->gpu_milli)
				continue;
			if (!best || free_milli < device_free(best, false) ||
			    (free_milli == device_free(best, false) &&
			     dev->index < best->index))
				best = dev;
		}
		b->milli_per_device = req->gpu_milli;
		b->devices[b->n_devices++] = best->index;
	}
}

static struct kn_sched_device *find_device(struct kn_sched_node *node,
					   int index)
{
	for (size_t d = 0; d < node->n_devices; d++)
		if (node->devices[d].index == index)
			return &node->devices[d];
	return NULL;
}

/* Add a binding's MIG instance to its device, or take it away. */
static void mig_apply(struct kn_sched_device *dev,
		      const struct kn_sched_binding *b, int sign)
{
	if (sign > 0) {
		if (dev->n_mig_slices < KN_MIG_MAX_SLICES) {
			dev->mig_slices[dev->n_mig_slices].profile =
				b->mig_profile;
			dev->mig_slices[dev->n_mig_slices++].start =
				b->mig_start;
		}
		return;
	}
	/* The same start may hold two instances while one is promised
	   over another (kn_sched_charge): give back the binding's own. */
	for (int i = 0; i < dev->n_mig_slices; i++)
		if (dev->mig_slices[i].start == b->mig_start &&
		    dev->mig_slices[i].profile == b->mig_profile) {
			dev->mig_slices[i] =
				dev->mig_slices[--dev->n_mig_slices];
			return;
		}
}

/* sign +1 charges a binding, -1 gives it back (never below zero). */
static void apply_binding(struct kn_sched_cluster *cluster,
			  const struct kn_sched_request *req,
			  const struct kn_sched_binding *b, int sign)
{
	struct kn_sched_node *node;

	if (b->node >= cluster->n_nodes)
		return;
	node = &cluster->nodes[b->node];
	for (int i = 0; i < b->n_devices; i++) {
		struct kn_sched_device *dev = find_device(node, b->devices[i]);

		if (!dev)
			continue;
		if (b->mig_profile && dev->mig) {
			mig_apply(dev, b, sign);
			continue;
		}
		dev->used_milli += sign * b->milli_per_device;
		if (dev->used_milli < 0)
			dev->used_milli = 0;
	}
	if (cpu_limited(node, req)) {
		node->cpu_milli_used += sign * req->cpu_milli;
		if (node->cpu_milli_used < 0)
			node->cpu_milli_used = 0;
	}
	if (mem_limited(node, req)) {
		node->memory_used += sign * req->memory_bytes;
		if (node->memory_used < 0)
			node->memory_used = 0;
	}
}

static void release_first(struct kn_sched_cluster *cluster,
			  const struct kn_sched_request *req,
			  const struct kn_sched_binding *bindings, size_t n)
{
	for (size_t t = 0; t < n; t++)
		apply_binding(cluster, req, &bindings[t], -1);
}

/* ---- reasons --------------------------------------------------------- */

struct reason {
	char *buf;
	size_t len;
};

static void say(struct reason *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Append to the reason, truncating at its end. */
static void say(struct reason *r, const char *fmt, ...)
{
	size_t used;
	va_list ap;

	if (!r->buf || r->len == 0)
		return;
	used = strlen(r->buf);
	if (used + 1 >= r->len)
		return;
	va_start(ap, fmt);
	vsnprintf(r->buf + used, r->len - used, fmt, ap);
	va_end(ap);
}

/* 500 -> "0.5", 2000 -> "2", 1 -> "0.001". */
static void say_milli(struct reason *r, int64_t milli)
{
	int64_t frac = milli % MILLI;
	int digits = 3;

	if (frac == 0) {
		say(r, "%lld", (long long)(milli / MILLI));
		return;
	}
	while (frac % 10 == 0) {
		frac /= 10;
		digits--;
	}
	say(r, "%lld.%0*lld", (long long)(milli / MILLI), digits,
	    (long long)frac);
}

static void say_gpus(struct reason *r, int64_t milli)
{
	say_milli(r, milli);
	say(r, " GPU%s", milli > MILLI ? "s" : "");
}

static void say_cpus(struct reason *r, int64_t milli)
{
	say_milli(r, milli);
	say(r, " CPU%s", milli > MILLI ? "s" : "");
}

/* Whole MiB when exact (the usual case), else bytes: never rounded. */
static void say_memory(struct reason *r, int64_t bytes)
{
	if (bytes % MIB == 0)
		say(r, "%lld MiB", (long long)(bytes / MIB));
	else
		say(r, "%lld bytes", (long long)bytes);
}

/* "needs NEED[what] per task but the largest node has LARGEST (node)",
   amounts as say_amount writes them. */
static void say_beyond_largest(struct reason *r,
			       void (*say_amount)(struct reason *, int64_t),
			       int64_t need, const char *what,
			       int64_t largest, const char *node)
{
	say(r, "needs ");
	say_amount(r, need);
	say(r, "%s per task but the largest node has ", what);
	say_amount(r, largest);
	say(r, " (%s)", node);
}

enum resource { RES_GPU, RES_CPU, RES_MEM, RES_ALL };

/*
 * What one task asks for, of one resource or of all it names:
 * "2 GPUs, 4 CPUs and 4096 MiB memory". Only called for a request that
 * failed, so it asks for something.
 */
static void say_ask(struct reason *r, const struct kn_sched_request *req,
		    enum resource res)
{
	bool gpu = (res == RES_GPU || res == RES_ALL) && wants_gpu(req);
	bool cpu = (res == RES_CPU || res == RES_ALL) && req->cpu_milli > 0;
	bool mem = (res == RES_MEM || res == RES_ALL) && req->memory_bytes > 0;

	if (gpu && req->mig_profile)
		say(r, "a MIG %s instance", req->mig_profile);
	else if (gpu)
		say_gpus(r, req->gpu_milli);
	if (cpu) {
		say(r, "%s", !gpu ? "" : mem ? ", " : " and ");
		say_cpus(r, req->cpu_milli);
	}
	if (mem) {
		say(r, "%s", gpu || cpu ? " and " : "");
		say_memory(r, req->memory_bytes);
		say(r, " memory");
	}
}

/* "needs 2 GPUs per task" or "needs 3 tasks x 2 GPUs". */
static void say_needs(struct reason *r, const struct kn_sched_request *req,
		      enum resource res)
{
	say(r, "needs ");
	if (req->tasks == 1) {
		say_ask(r, req, res);
		say(r, " per task");
	} else {
		say(r, "%d tasks x ", req->tasks);
		say_ask(r, req, res);
	}
}

static void say_taint(struct reason *r, const struct kn_sched_taint *taint)
{
	say(r, "%s", taint->key ? taint->key : "");
	if (taint->value && taint->value[0])
		say(r, "=%s", taint->value);
	say(r, ":%s", taint->effect ? taint->effect : "");
}

/* "zone In (a, b)", "gpu Exists". */
static void say_term(struct reason *r, const struct kn_sched_affinity_term *t)
{
	static const char *const ops[] = {
		[KN_SCHED_IN] = "In",
		[KN_SCHED_NOT_IN] = "NotIn",
		[KN_SCHED_EXISTS] = "Exists",
		[KN_SCHED_DOES_NOT_EXIST] = "DoesNotExist",
	};

	say(r, "%s %s", t->key ? t->key : "",
	    t->op <= KN_SCHED_DOES_NOT_EXIST ? ops[t->op] : "?");
	if (t->op != KN_SCHED_IN && t->op != KN_SCHED_NOT_IN)
		return;
	say(r, " (");
	for (size_t v = 0; v < t->n_values; v++)
		say(r, "%s%s", v ? ", " : "",
		    t->values[v] ? t->values[v] : "");
	say(r, ")");
}

static int compare_text(const void *a, const void *b)
{
	const char *x = *(const char *const *)a;
	const char *y = *(const char *const *)b;
	int c = strcasecmp(x, y);

	return c ? c : strcmp(x, y);
}

/* The distinct models on eligible nodes, sorted: what the user can ask for. */
static void say_models_present(struct reason *r,
			       const struct kn_sched_cluster *cluster,
			       const struct kn_sched_request *req)
{
	size_t total = 0, n = 0;
	const char **models;

	for (size_t i = 0; i < cluster->n_nodes; i++)
		if (node_eligible(&cluster->nodes[i], req))
			total += cluster->nodes[i].n_devices;
	if (total == 0) {
		say(r, "cluster has no GPUs");
		return;
	}
	models = kn_xcalloc(total, sizeof(*models));
	for (size_t i = 0; i < cluster->n_nodes; i++) {
		const struct kn_sched_node *node = &cluster->nodes[i];

		if (!node_eligible(node, req))
			continue;
		for (size_t d = 0; d < node->n_devices; d++)
			models[n++] = node->devices[d].model
					      ? node->devices[d].model
					      : "unknown";
	}
	qsort(models, n, sizeof(*models), compare_text);
	say(r, "cluster has: ");
	for (size_t k = 0; k < n; k++)
		if (k == 0 || strcasecmp(models[k - 1], models[k]) != 0)
			say(r, "%s%s", k == 0 ? "" : ", ", models[k]);
	free(models);
}

/*
 * Static filters: selector, required affinity, NoSchedule taints, GPU
 * model. These hold for the cluster whatever runs on it, so each failure
 * here is permanent.
 */
static bool explain_filters(const struct kn_sched_cluster *cluster,
			    const struct kn_sched_request *req,
			    struct reason *r)
{
	const struct kn_sched_taint *taint = NULL;
	const struct kn_sched_affinity_term *term = NULL;
	size_t selected = 0, affine = 0, eligible = 0, usable = 0;

	if (cluster->n_nodes == 0) {
		say(r, KN_SCHED_NEVER "the cluster has no nodes");
		return true;
	}
	for (size_t i = 0; i < cluster->n_nodes; i++) {
		const struct kn_sched_node *node = &cluster->nodes[i];
		const struct kn_sched_taint *t;

		if (!node_matches_selector(node, req))
			continue;
		selected++;
		if (failed_term(node, req)) {
			if (!term)
				term = failed_term(node, req);
			continue;
		}
		affine++;
		t = blocking_taint(node, req);
		if (t) {
			if (!taint)
				taint = t;
			continue;
		}
		eligible++;
		for (size_t d = 0; d < node->n_devices; d++)
			usable += device_usable(req, &node->devices[d]);
	}
	if (selected == 0) {
		say(r, KN_SCHED_NEVER "no node matches selector ");
		for (size_t s = 0; s < req->n_selector; s++)
			say(r, "%s%s=%s", s ? "," : "",
			    req->selector[s].key ? req->selector[s].key : "",
			    req->selector[s].value ? req->selector[s].value
						   : "");
		return true;
	}
	if (affine == 0) {
		say(r, KN_SCHED_NEVER "no node matches required affinity ");
		say_term(r, term);
		return true;
	}
	if (eligible == 0) {
		say(r, KN_SCHED_NEVER "no node tolerates taint ");
		say_taint(r, taint);
		return true;
	}
	if (req->mig_profile && usable == 0) {
		say(r, KN_SCHED_NEVER "no GPU in MIG mode offers profile %s",
		    req->mig_profile);
		if (wants_models(req)) {
			say(r, " among models ");
			for (size_t m = 0; m < req->n_gpu_models; m++)
				say(r, "%s%s", m ? " or " : "",
				    req->gpu_models[m]);
		}
		return true;
	}
	if (wants_models(req) && usable == 0) {
		say(r, KN_SCHED_NEVER "no GPU of model ");
		for (size_t m = 0; m < req->n_gpu_models; m++)
			say(r, "%s%s", m ? " or " : "", req->gpu_models[m]);
		say(r, " (");
		say_models_present(r, cluster, req);
		say(r, ")");
		return true;
	}
	return false;
}

/*
 * A gang that CPUs or memory hold back: what it asks for in all against
 * the largest node ("; 1024 CPUs in all, the largest node has 2 CPUs
 * (local)"), which says at once how far off it is.
 */
static void say_gang_total(struct reason *r, const struct kn_sched_request *req,
			   const struct kn_sched_node *most_cpu,
			   const struct kn_sched_node *most_mem)
{
	if (most_cpu) {
		say(r, "; ");
		say_cpus(r, (int64_t)req->tasks * req->cpu_milli);
		say(r, " in all, the largest node has ");
		say_cpus(r, most_cpu->cpu_milli_total);
		say(r, " (%s)", most_cpu->name);
	} else if (most_mem) {
		say(r, "; ");
		say_memory(r, (int64_t)req->tasks * req->memory_bytes);
		say(r, " memory in all, the largest node has ");
		say_memory(r, most_mem->memory_total);
		say(r, " (%s)", most_mem->name);
	}
}

/* One task, or the whole gang, does not fit even the empty cluster. */
static bool explain_never(const struct kn_sched_cluster *cluster,
			  const struct kn_sched_request *req, struct reason *r)
{
	const struct kn_sched_node *most_gpus = NULL, *most_cpu = NULL,
				   *most_mem = NULL;
	bool gpu_fits = false, cpu_fits = false, mem_fits = false;
	int max_gpus = 0;
	int64_t holds = 0, cpu_holds = 0, mem_holds = 0;

	for (size_t i = 0; i < cluster->n_nodes; i++) {
		const struct kn_sched_node *node = &cluster->nodes[i];
		struct room room;
		int usable, idle;

		if (!node_eligible(node, req))
			continue;
		room = node_room(node, req, true);
		holds += room_total(&room) < req->tasks ? room_total(&room)
							: req->tasks;
		cpu_holds += room.cpu < req->tasks ? room.cpu : req->tasks;
		mem_holds += room.mem < req->tasks ? room.mem : req->tasks;
		gpu_fits |= room.gpu > 0;
		cpu_fits |= room.cpu > 0;
		mem_fits |= room.mem > 0;
		count_whole(node, req, true, &usable, &idle);
		if (usable > max_gpus) {
			max_gpus = usable;
			most_gpus = node;
		}
		if (cpu_limited(node, req) &&
		    (!most_cpu ||
		     node->cpu_milli_total > most_cpu->cpu_milli_total))
			most_cpu = node;
		if (mem_limited(node, req) &&
		    (!most_mem || node->memory_total > most_mem->memory_total))
			most_mem = node;
	}
	if (holds >= req->tasks)
		return false;
	say(r, KN_SCHED_NEVER);
	if (holds > 0) {
		say_needs(r, req, RES_ALL);
		say(r, " but the cluster holds at most %lld such task%s",
		    (long long)holds, holds == 1 ? "" : "s");
		say_gang_total(r, req, cpu_holds < req->tasks ? most_cpu : NULL,
			       mem_holds < req->tasks ? most_mem : NULL);
	} else if (!gpu_fits && req->mig_profile) {
		say(r, "no MIG GPU has a placement for %s", req->mig_profile);
	} else if (!gpu_fits) {
		say(r, "needs ");
		say_gpus(r, req->gpu_milli);
		if (most_gpus)
			say(r, " per task but the largest node has %d (%s)",
			    max_gpus, most_gpus->name);
		else
			say(r, " per task but no node has a GPU");
	} else if (!cpu_fits) {
		say_beyond_largest(r, say_cpus, req->cpu_milli, "",
				   most_cpu->cpu_milli_total, most_cpu->name);
	} else if (!mem_fits) {
		say_beyond_largest(r, say_memory, req->memory_bytes, " memory",
				   most_mem->memory_total, most_mem->name);
	} else {
		say(r, "needs ");
		say_ask(r, req, RES_ALL);
		say(r, " per task but no single node has all of it");
	}
	return true;
}

/* What is free now on the node that comes closest, for the short resource. */
static void say_most_free(struct reason *r,
			  const struct kn_sched_cluster *cluster,
			  const struct kn_sched_request *req, enum resource res)
{
	const struct kn_sched_node *best = NULL;
	int64_t best_free = -1;
	int best_usable = 0;

	for (size_t i = 0; i < cluster->n_nodes; i++) {
		const struct kn_sched_node *node = &cluster->nodes[i];
		int64_t free_now = -1;
		int usable = 0, idle;

		if (!node->schedulable || !node_eligible(node, req))
			continue;
		if (res == RES_GPU && req->mig_profile) {
			free_now = node_room(node, req, false).gpu;
		} else if (res == RES_GPU && req->gpu_milli >= MILLI) {
			count_whole(node, req, false, &usable, &idle);
			free_now = idle;
		} else if (res == RES_GPU) {
			for (size_t d = 0; d < node->n_devices; d++)
				if (device_usable(req, &node->devices[d]) &&
				    device_free(&node->devices[d], false) >
					    free_now)
					free_now = device_free(
						&node->devices[d], false);
		} else if (res == RES_CPU && cpu_limited(node, req)) {
			free_now = cpu_free(node, false);
		} else if (res == RES_MEM && mem_limited(node, req)) {
			free_now = mem_free(node, false);
		}
		if (free_now > best_free ||
		    (free_now == best_free && usable > best_usable)) {
			best = node;
			best_free = free_now;
			best_usable = usable;
		}
	}
	if (!best) {
		say(r, "none free on any schedulable node");
		return;
	}
	switch (res) {
	case RES_GPU:
		if (req->mig_profile) {
			say(r, "most free on one node is %lld such instance%s "
			       "(%s)",
			    (long long)best_free, best_free == 1 ? "" : "s",
			    best->name);
		} else if (req->gpu_milli >= MILLI) {
			say(r, "%lld of %d GPU%s free on %s",
			    (long long)best_free, best_usable,
			    best_usable == 1 ? "" : "s", best->name);
		} else {
			say(r, "most free on one GPU is ");
			say_milli(r, best_free);
			say(r, " (%s)", best->name);
		}
		break;
	case RES_CPU:
		say(r, "most free on any node is ");
		say_cpus(r, best_free);
		say(r, " (%s)", best->name);
		break;
	case RES_MEM:
		say(r, "most free on any node is ");
		say_memory(r, best_free);
		say(r, " (%s)", best->name);
		break;
	case RES_ALL:
		break;
	}
}

/* It would fit an empty cluster: say what is taken or switched off now. */
static void explain_now(const struct kn_sched_cluster *cluster,
			const struct kn_sched_request *req, struct reason *r)
{
	int64_t gpu = 0, cpu = 0, mem = 0, all = 0;
	size_t up = 0, down = 0;
	enum resource res;

	for (size_t i = 0; i < cluster->n_nodes; i++) {
		const struct kn_sched_node *node = &cluster->nodes[i];
		struct room room;

		if (!node_eligible(node, req))
			continue;
		if (!node->schedulable) {
			down++;
			continue;
		}
		up++;
		room = node_room(node, req, false);
		gpu += room.gpu < req->tasks ? room.gpu : req->tasks;
		cpu += room.cpu < req->tasks ? room.cpu : req->tasks;
		mem += room.mem < req->tasks ? room.mem : req->tasks;
		all += room_total(&room) < req->tasks ? room_total(&room)
						      : req->tasks;
	}
	if (up == 0) {
		say(r, "no schedulable node (%zu cordoned or unhealthy)", down);
		return;
	}
	res = gpu < req->tasks   ? RES_GPU
	      : cpu < req->tasks ? RES_CPU
	      : mem < req->tasks ? RES_MEM
				 : RES_ALL;
	say_needs(r, req, res);
	say(r, "; ");
	if (res == RES_ALL)
		say(r, "no node has all of it free now");
	else
		say_most_free(r, cluster, req, res);
	if (all > 0)
		say(r, "; room for %lld of %d tasks now", (long long)all,
		    req->tasks);
	if (down > 0)
		say(r, "; %zu node%s cordoned or unhealthy", down,
		    down == 1 ? "" : "s");
}

/* ---- entry points ---------------------------------------------------- */

static bool request_valid(const struct kn_sched_request *req,
			  struct reason *r)
{
	int g = req->gpu_milli;

	if (req->tasks < 1) {
		say(r, "invalid request: tasks must be at least 1 (got %d)",
		    req->tasks);
		return false;
	}
	if (g < 0 || (g >= MILLI && (g % MILLI != 0 ||
				     g / MILLI > KN_SCHED_MAX_GPUS_PER_TASK))) {
		say(r,
		    "invalid request: gpu_milli %d is neither a share "
		    "(1..999) nor 1 to %d whole GPUs",
		    g, KN_SCHED_MAX_GPUS_PER_TASK);
		return false;
	}
	if (req->mig_profile && g != 0) {
		say(r, "invalid request: a MIG request has gpu_milli 0 (got "
		       "%d)", g);
		return false;
	}
	if (req->cpu_milli < 0 || req->memory_bytes < 0) {
		say(r, "invalid request: negative cpu or memory");
		return false;
	}
	return true;
}

int kn_sched_place(struct kn_sched_cluster *cluster,
		   const struct kn_sched_request *req,
		   struct kn_sched_binding *bindings, char *reason,
		   size_t reason_len)
{
	struct reason r = {reason, reason_len};
	struct kn_sched_binding *plan = NULL;
	struct mirror m, *packing = NULL;
	size_t placed = 0;
	int rc = 0;

	if (reason && reason_len)
		reason[0] = '\0';
	if (!request_valid(req, &r))
		return -EINVAL;

	plan = kn_xcalloc((size_t)req->tasks, sizeof(*plan));
	packing = mirror_build(cluster, req, &m) == 0 ? &m : NULL;
	for (placed = 0; placed < (size_t)req->tasks; placed++) {
		size_t node = choose_node(cluster, req, plan, placed, packing);
		int share_device = -1;

		if (node == SIZE_MAX) {
			release_first(cluster, req, plan, placed);
			if (!explain_filters(cluster, req, &r) &&
			    !explain_never(cluster, req, &r))
				explain_now(cluster, req, &r);
			rc = -ENOSPC;
			goto out;
		}
		if (packing && packing->share_pos[node] >= 0)
			share_device =
				packing->pos_device[node][packing->share_pos[node]];
		plan[placed].node = node;
		pick_devices(&cluster->nodes[node], req, share_device,
			     &plan[placed]);
		apply_binding(cluster, req, &plan[placed], +1);
		if (packing)
			mirror_charge(packing, cluster, &plan[placed]);
	}
	memcpy(bindings, plan, (size_t)req->tasks * sizeof(*plan));
out:
	if (packing)
		mirror_release(packing);
	free(plan);
	return rc;
}

void kn_sched_release(struct kn_sched_cluster *cluster,
		      const struct kn_sched_request *req,
		      const struct kn_sched_binding *bindings)
{
	if (req->tasks > 0)
		release_first(cluster, req, bindings, (size_t)req->tasks);
}

void kn_sched_charge(struct kn_sched_cluster *cluster,
		     const struct kn_sched_request *req,
		     const struct kn_sched_binding *bindings)
{
	for (int t = 0; t < req->tasks; t++)
		apply_binding(cluster, req, &bindings[t], +1);
}

static bool same_texts(const char *const *a, size_t na, const char *const *b,
		       size_t nb)
{
	if (na != nb)
		return false;
	for (size_t i = 0; i < na; i++)
		if (!same_text(a[i], b[i]))
			return false;
	return true;
}

static bool same_terms(const struct kn_sched_affinity_term *a, size_t na,
		       const struct kn_sched_affinity_term *b, size_t nb)
{
	if (na != nb)
		return false;
	for (size_t i = 0; i < na; i++)
		if (!same_text(a[i].key, b[i].key) || a[i].op != b[i].op ||
		    a[i].weight != b[i].weight ||
		    !same_texts(a[i].values, a[i].n_values, b[i].values,
				b[i].n_values))
			return false;
	return true;
}

bool kn_sched_request_same(const struct kn_sched_request *a,
			   const struct kn_sched_request *b)
{
	if (a->spread_key || b->spread_key)
		return false;
	if (a->tasks != b->tasks || a->gpu_milli != b->gpu_milli ||
	    a->cpu_milli != b->cpu_milli ||
	    a->memory_bytes != b->memory_bytes ||
	    !same_text(a->mig_profile, b->mig_profile) ||
	    !same_texts(a->gpu_models, a->n_gpu_models, b->gpu_models,
			b->n_gpu_models) ||
	    a->n_selector != b->n_selector ||
	    a->n_tolerations != b->n_tolerations)
		return false;
	for (size_t i = 0; i < a->n_selector; i++)
		if (!same_text(a->selector[i].key, b->selector[i].key) ||
		    !same_text(a->selector[i].value, b->selector[i].value))
			return false;
	for (size_t i = 0; i < a->n_tolerations; i++) {
		const struct kn_sched_toleration *x = &a->tolerations[i];
		const struct kn_sched_toleration *y = &b->tolerations[i];

		if (!same_text(x->key, y->key) || x->exists != y->exists ||
		    !same_text(x->value, y->value) ||
		    !same_text(x->effect, y->effect))
			return false;
	}
	return same_terms(a->required, a->n_required, b->required,
			  b->n_required) &&
	       same_terms(a->preferred, a->n_preferred, b->preferred,
			  b->n_preferred);
}

static int compare_queue(const void *a, const void *b)
{
	const struct kn_sched_queue_entry *x = a, *y = b;

	if (x->priority != y->priority)
		return x->priority > y->priority ? -1 : 1;
	if (x->usage != y->usage)
		return x->usage < y->usage ? -1 : 1;
	if (x->submitted_at != y->submitted_at)
		return x->submitted_at < y->submitted_at ? -1 : 1;
	if (x->job_id != y->job_id)
		return x->job_id < y->job_id ? -1 : 1;
	return 0;
}

void kn_sched_sort_queue(struct kn_sched_queue_entry *entries, size_t n)
{
	if (n > 1)
		qsort(entries, n, sizeof(*entries), compare_queue);
}
