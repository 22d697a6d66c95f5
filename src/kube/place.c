/*
 * The secondary scheduler's state and decisions, over the API's JSON.
 *
 * Nodes and pods are kept as the objects the API sent (a watch event
 * replaces a pod whole), and every decision rebuilds a kn_pack cluster
 * from them: the nodes this pod may use (ready, schedulable, selector,
 * required affinity, taints), charged with the pods bound there. Rebuilding
 * costs O(nodes + pods) per decision, nothing next to an API round trip,
 * and there is no incremental state to drift from the API's.
 *
 * Which GPU a bound pod holds: a share's is the kiln.dev/gpu annotation
 * this scheduler wrote through the binding; whole GPUs are handed out by
 * the device plugin, which kiln cannot see, so they are charged to the
 * lowest idle GPUs (the count is what matters for them). Bound pods whose
 * amounts no longer fit the node's allocatable (the kubelet's view
 * differs) are left uncharged rather than failing the decision.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "kube/internal.h"
#include "kube/kube.h"

#define GPU_RESOURCE "nvidia.com/gpu"
#define MIG_PREFIX "nvidia.com/mig-"

struct kn_kube_cluster {
	char *scheduler;
	const struct kn_kube_products *products;
	json_t *nodes; /* array of Node objects */
	json_t *pods;  /* array of Pod objects */
};

struct kn_kube_cluster *kn_kube_cluster_new(const char *scheduler_name,
					    const struct kn_kube_products *p)
{
	struct kn_kube_cluster *c = kn_xcalloc(1, sizeof(*c));

	c->scheduler = kn_xstrdup(scheduler_name);
	c->products = p;
	c->nodes = json_array();
	c->pods = json_array();
	return c;
}

void kn_kube_cluster_free(struct kn_kube_cluster *c)
{
	if (!c)
		return;
	free(c->scheduler);
	json_decref(c->nodes);
	json_decref(c->pods);
	free(c);
}

/* obj's string member key, or dflt. */
static const char *str_or(json_t *obj, const char *key, const char *dflt)
{
	const char *s = json_string_value(json_object_get(obj, key));

	return s ? s : dflt;
}

static int check_items(json_t *list, const char *what, struct kn_error *err)
{
	json_t *items = json_object_get(list, "items"), *item;
	size_t i;

	/* An empty list comes with "items": [] (or null from some proxies). */
	if (!json_is_array(items) && !json_is_null(items) && items)
		return kn_errorf(err, KN_EINVAL, "items",
				 "%s list: items is not an array", what);
	json_array_foreach(items, i, item)
		if (!kube_str_at(item, "metadata", "name"))
			return kn_errorf(err, KN_EINVAL, "items",
					 "%s list: items[%zu] has no "
					 "metadata.name", what, i);
	return 0;
}

static json_t *items_copy(json_t *list)
{
	json_t *items = json_object_get(list, "items");

	return json_is_array(items) ? json_deep_copy(items) : json_array();
}

/* *slot becomes a copy of list's items, once they are all objects. */
static int set_items(json_t **slot, json_t *list, const char *what,
		     struct kn_error *err)
{
	int rc = check_items(list, what, err);

	if (rc < 0)
		return rc;
	json_decref(*slot);
	*slot = items_copy(list);
	return 0;
}

int kn_kube_cluster_set_nodes(struct kn_kube_cluster *c, json_t *node_list,
			      struct kn_error *err)
{
	return set_items(&c->nodes, node_list, "node", err);
}

int kn_kube_cluster_set_pods(struct kn_kube_cluster *c, json_t *pod_list,
			     struct kn_error *err)
{
	return set_items(&c->pods, pod_list, "pod", err);
}

static bool same_pod(json_t *pod, const char *ns, const char *name)
{
	const char *pns = kube_str_at(pod, "metadata", "namespace");

	return !strcmp(kube_str_at(pod, "metadata", "name"), name) &&
	       !strcmp(pns ? pns : "", ns ? ns : "");
}

static ssize_t find_pod(const struct kn_kube_cluster *c, const char *ns,
			const char *name)
{
	size_t i;
	json_t *pod;

	json_array_foreach(c->pods, i, pod)
		if (same_pod(pod, ns, name))
			return (ssize_t)i;
	return -1;
}

int kn_kube_cluster_pod_event(struct kn_kube_cluster *c, const char *type,
			      json_t *pod, struct kn_error *err)
{
	const char *name = kube_str_at(pod, "metadata", "name");
	const char *ns = kube_str_at(pod, "metadata", "namespace");
	bool deleted = !strcmp(type, "DELETED");
	ssize_t at;

	if (strcmp(type, "ADDED") && strcmp(type, "MODIFIED") && !deleted)
		return 0;
	if (!json_is_object(pod) || !name)
		return kn_errorf(err, KN_EINVAL, "object",
				 "%s event: the object is not a pod with a "
				 "name", type);
	at = find_pod(c, ns, name);
	if (deleted) {
		if (at >= 0)
			json_array_remove(c->pods, (size_t)at);
	} else if (at >= 0) {
		json_array_set(c->pods, (size_t)at, pod);
	} else {
		json_array_append(c->pods, pod);
	}
	return 0;
}

static bool pod_ended(json_t *pod)
{
	const char *phase = kube_str_at(pod, "status", "phase");

	return phase && (!strcmp(phase, "Succeeded") ||
			 !strcmp(phase, "Failed"));
}

static bool pod_pending_here(const struct kn_kube_cluster *c, json_t *pod)
{
	const char *sched = kube_str_at(pod, "spec", "schedulerName");
	const char *node = kube_str_at(pod, "spec", "nodeName");
	const char *phase = kube_str_at(pod, "status", "phase");

	return sched && !strcmp(sched, c->scheduler) && (!node || !*node) &&
	       (!phase || !strcmp(phase, "Pending")) &&
	       !json_object_get(json_object_get(pod, "metadata"),
				"deletionTimestamp");
}

static int pending_cmp(const void *a, const void *b)
{
	json_t *const *pa = a, *const *pb = b;
	const char *ta = kube_str_at(*pa, "metadata", "creationTimestamp");
	const char *tb = kube_str_at(*pb, "metadata", "creationTimestamp");
	const char *na = kube_str_at(*pa, "metadata", "namespace");
	const char *nb = kube_str_at(*pb, "metadata", "namespace");
	int d;

	/* RFC 3339 in UTC with whole seconds: text order is time order. */
	d = strcmp(ta ? ta : "", tb ? tb : "");
	if (d == 0)
		d = strcmp(na ? na : "", nb ? nb : "");
	if (d == 0)
		d = strcmp(kube_str_at(*pa, "metadata", "name"),
			   kube_str_at(*pb, "metadata", "name"));
	return d;
}

size_t kn_kube_cluster_pending(const struct kn_kube_cluster *c,
			       struct kn_kube_pod_ref *out, size_t max)
{
	size_t i, n = 0, total = json_array_size(c->pods);
	json_t **list = kn_xcalloc(total + 1, sizeof(*list)), *pod;

	json_array_foreach(c->pods, i, pod)
		if (pod_pending_here(c, pod))
			list[n++] = pod;
	qsort(list, n, sizeof(*list), pending_cmp);
	for (i = 0; i < n && i < max; i++) {
		const char *ns = kube_str_at(list[i], "metadata", "namespace");
		out[i].namespace_ = ns ? ns : "";
		out[i].name = kube_str_at(list[i], "metadata", "name");
	}
	free(list);
	return n;
}

/* ---- what a pod asks for ---- */

struct pod_shape {
	struct kn_pack_pod pack;
	bool mig;
	int gpu_index; /* the annotated GPU of a share, or -1 */
};

static int add_amount(json_t *res, const char *key, bool bytes, int64_t *sum,
		      const char *where, struct kn_error *err)
{
	const char *s = json_string_value(json_object_get(res, key));
	json_t *num = json_object_get(res, key);
	int64_t v;

	if (!s && json_is_integer(num)) {
		*sum += bytes ? json_integer_value(num) :
				json_integer_value(num) * 1000;
		return 0;
	}
	if (!s)
		return 0;
	if ((bytes ? kn_kube_quantity_bytes(s, &v) :
		     kn_kube_quantity_milli(s, &v)) < 0)
		return kn_errorf(err, KN_EINVAL, key,
				 "%s: %s: not a quantity: \"%s\"", where, key,
				 s);
	*sum += v;
	return 0;
}

static int pod_shape(json_t *pod, struct pod_shape *out,
		     struct kn_error *err)
{
	json_t *containers = json_object_get(json_object_get(pod, "spec"),
					     "containers"), *ctr;
	json_t *ann = json_object_get(json_object_get(pod, "metadata"),
				      "annotations");
	const char *name = kube_str_at(pod, "metadata", "name");
	const char *share = json_string_value(
		json_object_get(ann, KN_KUBE_ANN_GPU_MILLI));
	const char *index = json_string_value(
		json_object_get(ann, KN_KUBE_ANN_GPU));
	int64_t cpu = 0, mem = 0, gpus = 0, milli;
	size_t i;
	int rc;

	memset(out, 0, sizeof(*out));
	out->gpu_index = -1;
	json_array_foreach(containers, i, ctr) {
		json_t *res = json_object_get(ctr, "resources");
		json_t *req = json_object_get(res, "requests");
		json_t *lim = json_object_get(res, "limits");
		const char *key;
		json_t *v;
		int64_t g = 0;

		/* Without requests, Kubernetes requests the limits. */
		rc = add_amount(json_object_get(req, "cpu") ? req : lim, "cpu",
				false, &cpu, name, err);
		if (rc == 0)
			rc = add_amount(json_object_get(req, "memory") ? req :
					lim, "memory", true, &mem, name, err);
		if (rc == 0)
			rc = add_amount(lim, GPU_RESOURCE, false, &g, name,
					err);
		if (rc < 0)
			return rc;
		gpus += g / 1000;
		json_object_foreach(lim, key, v)
			if (!strncmp(key, MIG_PREFIX, strlen(MIG_PREFIX)))
				out->mig = true;
	}
	if (gpus > KN_PACK_MAX_GPUS)
		return kn_errorf(err, KN_EINVAL, GPU_RESOURCE,
				 "%s: asks for %lld GPUs; one node has at "
				 "most %d", name, (long long)gpus,
				 KN_PACK_MAX_GPUS);
	out->pack.cpu_milli = cpu > INT32_MAX ? INT32_MAX : (int)cpu;
	out->pack.memory_mib = (mem + 1048575) / 1048576;
	if (share) {
		char *end;
		milli = strtol(share, &end, 10);
		if (*end || end == share || milli < 1 || milli > 999 || gpus)
			return kn_errorf(err, KN_EINVAL, KN_KUBE_ANN_GPU_MILLI,
					 "%s: %s: want 1..999 thousandths of "
					 "one GPU, and no %s limit; got "
					 "\"%s\"", name, KN_KUBE_ANN_GPU_MILLI,
					 GPU_RESOURCE, share);
		out->pack.num_gpu = 1;
		out->pack.gpu_milli = (int)milli;
		if (index) {
			long at = strtol(index, &end, 10);
			if (!*end && end != index && at >= 0 &&
			    at < KN_PACK_MAX_GPUS)
				out->gpu_index = (int)at;
		}
	} else if (gpus) {
		out->pack.num_gpu = (int)gpus;
		out->pack.gpu_milli = 1000;
	}
	return 0;
}

/* ---- which nodes a pod may use ---- */

static bool node_ready(json_t *node)
{
	json_t *conds = json_object_get(json_object_get(node, "status"),
					"conditions"), *cond;
	size_t i;

	if (json_is_true(json_object_get(json_object_get(node, "spec"),
					 "unschedulable")))
		return false;
	json_array_foreach(conds, i, cond)
		if (!strcmp(str_or(cond, "type", ""), "Ready"))
			return !strcmp(str_or(cond, "status", ""),
				       "True");
	return false;
}

static bool in_values(json_t *values, const char *v)
{
	size_t i;
	json_t *item;

	json_array_foreach(values, i, item)
		if (v && json_string_value(item) &&
		    !strcmp(json_string_value(item), v))
			return true;
	return false;
}

/* One node selector requirement on a value (NULL when the node has no
   such label or field). */
static bool requirement(json_t *req, const char *v)
{
	const char *op = kube_str_at(req, "operator", NULL);
	json_t *values = json_object_get(req, "values");
	const char *first = json_string_value(json_array_get(values, 0));

	if (!op)
		return false;
	if (!strcmp(op, "In"))
		return in_values(values, v);
	if (!strcmp(op, "NotIn"))
		return !in_values(values, v);
	if (!strcmp(op, "Exists"))
		return v != NULL;
	if (!strcmp(op, "DoesNotExist"))
		return v == NULL;
	if ((!strcmp(op, "Gt") || !strcmp(op, "Lt")) && v && first) {
		long long a = strtoll(v, NULL, 10), b = strtoll(first, NULL, 10);
		return op[0] == 'G' ? a > b : a < b;
	}
	return false;
}

static bool term_holds(json_t *term, json_t *node, json_t *labels)
{
	json_t *req;
	size_t i;

	json_array_foreach(json_object_get(term, "matchExpressions"), i, req)
		if (!requirement(req, json_string_value(json_object_get(
				labels, str_or(req, "key", "")))))
			return false;
	json_array_foreach(json_object_get(term, "matchFields"), i, req)
		if (!requirement(req,
				 !strcmp(str_or(req, "key", ""),
					 "metadata.name") ?
					 kube_str_at(node, "metadata", "name") :
					 NULL))
			return false;
	return true;
}

static bool tolerated(json_t *taint, json_t *tolerations)
{
	const char *key = str_or(taint, "key", "");
	const char *value = str_or(taint, "value", "");
	const char *effect = str_or(taint, "effect", "");
	json_t *t;
	size_t i;

	json_array_foreach(tolerations, i, t) {
		const char *tk = str_or(t, "key", "");
		const char *op = str_or(t, "operator", "Equal");
		const char *tv = str_or(t, "value", "");
		const char *te = str_or(t, "effect", "");
		bool exists = !strcmp(op, "Exists");

		if (*te && strcmp(te, effect))
			continue;
		if (!*tk && exists)
			return true;
		if (!strcmp(tk, key) && (exists || !strcmp(tv, value)))
			return true;
	}
	return false;
}

enum verdict { FITS, NOT_READY, SELECTOR, AFFINITY, TAINT };

static enum verdict node_verdict(json_t *node, json_t *pod)
{
	json_t *spec = json_object_get(pod, "spec");
	json_t *labels = json_object_get(json_object_get(node, "metadata"),
					 "labels");
	json_t *terms = json_object_get(
		json_object_get(json_object_get(json_object_get(
					spec, "affinity"), "nodeAffinity"),
				"requiredDuringSchedulingIgnoredDuringExecution"),
		"nodeSelectorTerms");
	json_t *v, *taint;
	const char *key;
	size_t i;
	bool any = false;

	if (!node_ready(node))
		return NOT_READY;
	json_object_foreach(json_object_get(spec, "nodeSelector"), key, v) {
		const char *have =
			json_string_value(json_object_get(labels, key));
		if (!json_string_value(v) || !have ||
		    strcmp(json_string_value(v), have))
			return SELECTOR;
	}
	json_array_foreach(terms, i, v)
		if (term_holds(v, node, labels))
			any = true;
	if (json_array_size(terms) && !any)
		return AFFINITY;
	json_array_foreach(json_object_get(json_object_get(node, "spec"),
					   "taints"), i, taint) {
		const char *effect = str_or(taint, "effect", "");
		if ((!strcmp(effect, "NoSchedule") ||
		     !strcmp(effect, "NoExecute")) &&
		    !tolerated(taint, json_object_get(spec, "tolerations")))
			return TAINT;
	}
	return FITS;
}

/* ---- the pack cluster ---- */

struct view {
	struct kn_pack *pack;
	json_t **nodes;  /* eligible nodes, in pack order */
	size_t n;
	const char **models;
};

static void view_release(struct view *v)
{
	kn_pack_free(v->pack);
	KN_FREE_ALL(v->nodes, v->models);
}

static int node_amounts(const struct kn_kube_cluster *c, json_t *node,
			struct kn_pack_node_spec *out, struct kn_error *err)
{
	json_t *alloc = json_object_get(json_object_get(node, "status"),
					"allocatable");
	const char *name = kube_str_at(node, "metadata", "name");
	const char *product = json_string_value(json_object_get(
		json_object_get(json_object_get(node, "metadata"), "labels"),
		KN_KUBE_LABEL_PRODUCT));
	int64_t cpu = 0, mem = 0, gpus = 0;
	int rc;

	rc = add_amount(alloc, "cpu", false, &cpu, name, err);
	if (rc == 0)
		rc = add_amount(alloc, "memory", true, &mem, name, err);
	if (rc == 0)
		rc = add_amount(alloc, GPU_RESOURCE, false, &gpus, name, err);
	if (rc < 0)
		return rc;
	gpus /= 1000;
	out->name = name;
	out->cpu_milli = cpu > INT32_MAX ? INT32_MAX : (int)cpu;
	out->memory_mib = mem / 1048576;
	/* More than a pack node holds: the rest is left unused, not refused,
	   so one odd node does not stop the scheduler. */
	out->n_gpus = gpus > KN_PACK_MAX_GPUS ? KN_PACK_MAX_GPUS : (int)gpus;
	out->model = NULL;
	if (out->n_gpus) {
		const char *model =
			product ? kn_kube_model_for(c->products, product) : NULL;
		out->model = model ? model : product ? product : "unknown";
	}
	return 0;
}

/* The fullest GPU that has room for milli, or -1. */
static int fullest_fit(const struct kn_pack_node_state *st, int milli)
{
	int best = -1;

	for (int g = 0; g < st->n_gpus; g++)
		if (st->gpu_free[g] >= milli &&
		    (best < 0 || st->gpu_free[g] < st->gpu_free[best]))
			best = g;
	return best;
}

static void charge(struct view *v, size_t node, const struct pod_shape *s)
{
	struct kn_pack_node_state st;
	int gpus[KN_PACK_MAX_GPUS], n = 0;

	kn_pack_node_state(v->pack, node, &st);
	if (s->pack.num_gpu && s->pack.gpu_milli < 1000) {
		gpus[0] = s->gpu_index >= 0 ? s->gpu_index :
			  fullest_fit(&st, s->pack.gpu_milli);
		n = 1;
		if (gpus[0] < 0)
			return;
	} else {
		for (int g = 0; g < st.n_gpus && n < s->pack.num_gpu; g++)
			if (st.gpu_free[g] == 1000)
				gpus[n++] = g;
		if (n < s->pack.num_gpu)
			return;
	}
	/* A pod that does not fit our view stays uncharged (see top). */
	(void)kn_pack_bind(v->pack, node, &s->pack, gpus, n);
}

/* Bound pods in the order their GPUs are known best: annotated shares,
   whole GPUs, then shares kiln did not place. */
static void charge_bound(const struct kn_kube_cluster *c, struct view *v)
{
	for (int pass = 0; pass < 3; pass++) {
		size_t i;
		json_t *pod;

		json_array_foreach(c->pods, i, pod) {
			const char *node = kube_str_at(pod, "spec", "nodeName");
			struct pod_shape s;
			bool share;

			if (!node || !*node || pod_ended(pod) ||
			    pod_shape(pod, &s, NULL) < 0 || s.mig)
				continue;
			share = s.pack.num_gpu && s.pack.gpu_milli < 1000;
			if ((pass == 0) != (share && s.gpu_index >= 0) ||
			    (pass == 1 && share) || (pass == 2 && !share))
				continue;
			for (size_t k = 0; k < v->n; k++)
				if (!strcmp(kube_str_at(v->nodes[k], "metadata",
						   "name"), node))
					charge(v, k, &s);
		}
	}
}

static void set_typical(const struct kn_kube_cluster *c, struct view *v)
{
	size_t i, n = 0;
	struct kn_pack_pod *shapes =
		kn_xcalloc(json_array_size(c->pods) + 1, sizeof(*shapes));
	json_t *pod;

	json_array_foreach(c->pods, i, pod) {
		struct pod_shape s;
		if (!pod_ended(pod) && pod_shape(pod, &s, NULL) == 0 && !s.mig)
			shapes[n++] = s.pack;
	}
	kn_pack_set_typical(v->pack, shapes, n);
	free(shapes);
}

/* FNV-1a of "ns/name". */
static uint64_t name_hash(const char *ns, const char *name)
{
	uint64_t h = 14695981039346656037ull;

	for (const char *p = ns; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
	h = (h ^ '/') * 1099511628211ull;
	for (const char *p = name; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
	return h;
}

int kn_kube_place(struct kn_kube_cluster *c,
		  const struct kn_pack_policy *policy, const char *ns,
		  const char *name, struct kn_kube_decision *out,
		  struct kn_error *err)
{
	size_t n_nodes = json_array_size(c->nodes), counts[TAINT + 1] = {0};
	struct kn_pack_node_spec *specs = NULL;
	struct view v = {0};
	struct kn_pack_placement placed;
	struct pod_shape shape;
	struct kn_rng rng;
	ssize_t at = find_pod(c, ns, name);
	json_t *pod, *node;
	size_t i;
	int rc;

	if (at < 0 || !pod_pending_here(c, json_array_get(c->pods, (size_t)at)))
	{
		kn_errorf(err, KN_ENOTFOUND, NULL,
			  "%s/%s: no such pending pod", ns, name);
		return -ENOENT;
	}
	pod = json_array_get(c->pods, (size_t)at);
	rc = pod_shape(pod, &shape, err);
	if (rc < 0)
		return rc;
	if (shape.mig)
		return kn_errorf(err, KN_EINVAL, "resources",
				 "%s/%s: MIG resources are counted by the "
				 "device plugin; leave such pods to the "
				 "default scheduler", ns, name);
	v.nodes = kn_xcalloc(n_nodes + 1, sizeof(*v.nodes));
	specs = kn_xcalloc(n_nodes + 1, sizeof(*specs));
	json_array_foreach(c->nodes, i, node) {
		enum verdict verdict = node_verdict(node, pod);
		counts[verdict]++;
		if (verdict != FITS)
			continue;
		rc = node_amounts(c, node, &specs[v.n], err);
		if (rc < 0)
			goto out;
		v.nodes[v.n++] = node;
	}
	rc = kn_pack_new(specs, v.n, &v.pack, err);
	if (rc < 0)
		goto out;
	charge_bound(c, &v);
	set_typical(c, &v);
	/* Only the random policy draws; seeding from the pod's name keeps a
	   decision reproducible from the same snapshot. */
	kn_rng_seed(&rng, name_hash(ns, name));
	rc = v.n ? kn_pack_place(v.pack, policy, &shape.pack, &rng, &placed) :
		   -ENOSPC;
	if (rc < 0) {
		rc = kn_errorf(err, KN_EUNAVAIL, NULL,
			       "%s/%s: no node has room for %d GPU%s x %d "
			       "milli, %d mCPU, %lld MiB: %zu of %zu nodes "
			       "eligible (%zu not ready, %zu by selector, %zu "
			       "by affinity, %zu by taints)",
			       ns, name, shape.pack.num_gpu,
			       shape.pack.num_gpu == 1 ? "" : "s",
			       shape.pack.gpu_milli, shape.pack.cpu_milli,
			       (long long)shape.pack.memory_mib, v.n, n_nodes,
			       counts[NOT_READY], counts[SELECTOR],
			       counts[AFFINITY], counts[TAINT]);
		rc = -ENOSPC;
		goto out;
	}
	memset(out, 0, sizeof(*out));
	kn_strlcpy(out->node, kube_str_at(v.nodes[placed.node], "metadata", "name"),
		   sizeof(out->node));
	out->n_gpus = placed.n_gpus;
	memcpy(out->gpus, placed.gpus, sizeof(out->gpus));
	out->gpu_milli = placed.milli_per_gpu;
out:
	view_release(&v);
	free(specs);
	return rc;
}

json_t *kn_kube_binding(const char *ns, const char *name,
			const struct kn_kube_decision *d)
{
	json_t *meta = json_pack("{s:s, s:s}", "name", name, "namespace", ns);
	char index[16];

	if (d->n_gpus == 1 && d->gpu_milli < 1000) {
		snprintf(index, sizeof(index), "%d", d->gpus[0]);
		json_object_set_new(meta, "annotations",
				    json_pack("{s:s}", KN_KUBE_ANN_GPU, index));
	}
	return json_pack("{s:s, s:s, s:o, s:{s:s, s:s, s:s}}", "apiVersion",
			 "v1", "kind", "Binding", "metadata", meta, "target",
			 "apiVersion", "v1", "kind", "Node", "name", d->node);
}

int kn_kube_cluster_assume(struct kn_kube_cluster *c, const char *ns,
			   const char *name, const struct kn_kube_decision *d)
{
	ssize_t at = find_pod(c, ns, name);
	json_t *pod, *meta, *ann;
	char index[16];

	if (at < 0)
		return -ENOENT;
	pod = json_array_get(c->pods, (size_t)at);
	/* The object may be shared with a watch event: change a copy. */
	pod = json_deep_copy(pod);
	json_object_set_new(json_object_get(pod, "spec"), "nodeName",
			    json_string(d->node));
	if (d->n_gpus == 1 && d->gpu_milli < 1000) {
		meta = json_object_get(pod, "metadata");
		ann = json_object_get(meta, "annotations");
		if (!json_is_object(ann)) {
			ann = json_object();
			json_object_set_new(meta, "annotations", ann);
		}
		snprintf(index, sizeof(index), "%d", d->gpus[0]);
		json_object_set_new(ann, KN_KUBE_ANN_GPU, json_string(index));
	}
	json_array_set_new(c->pods, (size_t)at, pod);
	return 0;
}

/* The gang size of a pod (its annotation), or 0 when it is alone. */
static long gang_size(json_t *pod)
{
	const char *v = json_string_value(json_object_get(
		json_object_get(json_object_get(pod, "metadata"), "annotations"),
		KN_KUBE_ANN_GANG));
	char *end;
	long size;

	if (!v)
		return 0;
	size = strtol(v, &end, 10);
	return *end || end == v || size < 2 || size > KN_SPEC_MAX_TASKS ?
		       -1 : size;
}

static const char *job_label(json_t *pod)
{
	return json_string_value(json_object_get(
		json_object_get(json_object_get(pod, "metadata"), "labels"),
		KN_KUBE_LABEL_JOB));
}

static void placement(struct kn_kube_placement *p, json_t *pod,
		      const struct kn_kube_decision *d)
{
	kn_strlcpy(p->namespace_, str_or(json_object_get(pod, "metadata"),
					 "namespace", ""),
		   sizeof(p->namespace_));
	kn_strlcpy(p->name, kube_str_at(pod, "metadata", "name"), sizeof(p->name));
	p->d = *d;
}

int kn_kube_place_gang(struct kn_kube_cluster *c,
		       const struct kn_pack_policy *policy, const char *ns,
		       const char *name, struct kn_kube_placement *out,
		       size_t max, size_t *n, struct kn_error *err)
{
	struct kn_kube_cluster trial = *c;
	ssize_t at = find_pod(c, ns, name);
	json_t *pod = at >= 0 ? json_array_get(c->pods, (size_t)at) : NULL;
	json_t *members = NULL, *other;
	struct kn_kube_decision d;
	const char *job;
	size_t i, k = 0, alive = 0;
	long size;
	int rc;

	if (!pod || !pod_pending_here(c, pod)) {
		kn_errorf(err, KN_ENOTFOUND, NULL,
			  "%s/%s: no such pending pod", ns, name);
		return -ENOENT;
	}
	size = gang_size(pod);
	if (size < 0)
		return kn_errorf(err, KN_EINVAL, KN_KUBE_ANN_GANG,
				 "%s/%s: %s: want 2..%d", ns, name,
				 KN_KUBE_ANN_GANG, KN_SPEC_MAX_TASKS);
	job = job_label(pod);
	if (size == 0 || !job) {
		rc = kn_kube_place(c, policy, ns, name, &d, err);
		if (rc < 0)
			return rc;
		if (max < 1)
			return kn_errorf(err, KN_EINVAL, NULL, "no room for "
					 "the placement");
		placement(&out[0], pod, &d);
		*n = 1;
		return 0;
	}
	/* The gang's pods that have not ended; the pending ones in order. */
	members = json_array();
	json_array_foreach(c->pods, i, other) {
		const char *ons = str_or(json_object_get(other, "metadata"),
					 "namespace", "");
		const char *ojob = job_label(other);

		if (strcmp(ons, ns) || !ojob || strcmp(ojob, job) ||
		    pod_ended(other))
			continue;
		alive++;
		if (pod_pending_here(c, other))
			json_array_append(members, other);
	}
	if ((long)alive < size) {
		rc = kn_errorf(err, KN_EUNAVAIL, NULL,
			       "%s/%s: waiting for the gang's pods: %zu of "
			       "%ld exist", ns, name, alive, size);
		rc = -EAGAIN;
		goto out;
	}
	if (json_array_size(members) > max) {
		rc = kn_errorf(err, KN_EINVAL, NULL,
			       "%s/%s: a gang of %zu pending pods", ns, name,
			       json_array_size(members));
		goto out;
	}
	/* Place on a trial copy: the pod array is copied (assume replaces
	   entries), nodes are shared and never changed. */
	trial.pods = json_copy(c->pods);
	json_array_foreach(members, i, other) {
		const char *oname = kube_str_at(other, "metadata", "name");

		rc = kn_kube_place(&trial, policy, ns, oname, &d, err);
		if (rc == -ENOSPC) {
			char why[sizeof(err->message)];

			kn_strlcpy(why, err->message, sizeof(why));
			kn_errorf(err, KN_EUNAVAIL, NULL,
				  "%s/%s: the gang of %ld does not fit at "
				  "once: %s", ns, name, size, why);
		}
		if (rc < 0)
			goto out;
		kn_kube_cluster_assume(&trial, ns, oname, &d);
		placement(&out[k++], other, &d);
	}
	*n = k;
	rc = 0;
out:
	if (trial.pods != c->pods)
		json_decref(trial.pods);
	json_decref(members);
	return rc;
}
