/*
 * sim: openb CSV loading and the paper's one-shot packing experiment.
 *
 * The CSV files are read with base's reader (kn_csv): every error names
 * FILE:LINE:COLUMN.
 *
 * The resampling rule follows the paper's code, quirk included: a sample
 * is appended while total + its per-GPU milli <= 1.3 x capacity, but the
 * total grows by num_gpu x milli (METHOD.md §2.1), so arrivals end just
 * past 130 %. Our own RNG replaces Go's, so streams differ from the
 * paper's seed by seed; means over seeds (with their spread) are what
 * compare, and two policies compare seed by seed on the same streams.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/internal.h"

int sim_csv_column(struct sim_csv *c, const char *name, struct kn_error *err)
{
	int i = kn_csv_find(&c->csv, name);

	if (i >= 0)
		return i;
	return kn_errorf(err, KN_EINVAL, name,
			 "%s:%d:1: no column '%s' in the header", c->csv.path,
			 c->csv.line, name);
}

int sim_csv_field(struct sim_csv *c, int col, const char *name,
		  const char **out, struct kn_error *err)
{
	const struct kn_csv *r = &c->csv;
	int last = r->n_fields - 1;

	if (col >= r->n_fields)
		return kn_errorf(err, KN_EINVAL, name,
				 "%s:%d:%d: %s: missing (only %d columns)",
				 r->path, r->lines[last],
				 r->cols[last] + (int)strlen(r->fields[last]) +
					 1,
				 name, r->n_fields);
	*out = r->fields[col];
	return 0;
}

int sim_csv_int(struct sim_csv *c, int col, const char *name, int64_t max,
		int64_t *out, struct kn_error *err)
{
	const char *s;
	char *end;
	long long v;
	int rc = sim_csv_field(c, col, name, &s, err);

	if (rc < 0)
		return rc;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (!*s || *end || errno || v < 0 || v > max)
		return kn_errorf(err, KN_EINVAL, name,
				 "%s:%d:%d: %s: '%s' is not a whole number "
				 "0..%lld",
				 c->csv.path, c->csv.lines[col],
				 c->csv.cols[col], name, s, (long long)max);
	*out = v;
	return 0;
}

const char *sim_csv_text(struct sim_csv *c, int col)
{
	const char *s = c->csv.fields[col];

	return !*s || !strcmp(s, "nan") ? NULL : s;
}

int sim_csv_open(struct sim_csv *c, const char *path, struct kn_error *err)
{
	size_t len;
	int rc;

	memset(c, 0, sizeof(*c));
	rc = kn_read_file(path, KN_SIM_MAX_FILE, &c->text, &len);
	if (rc == -EFBIG)
		return kn_errorf(err, KN_EINVAL, NULL,
				 "%s: larger than %u MiB", path,
				 KN_SIM_MAX_FILE >> 20);
	if (rc < 0)
		return kn_errorf(err, KN_EIO, NULL, "%s: %s", path,
				 strerror(-rc));
	kn_csv_init(&c->csv, c->text, path);
	rc = kn_csv_next(&c->csv, err);
	if (rc == 0)
		return kn_errorf(err, KN_EINVAL, NULL, "%s:1:1: empty file",
				 path);
	return rc < 0 ? rc : 0;
}

/* Node specs, owning their names and models. */
struct node_list {
	struct kn_pack_node_spec *specs;
	char **strings; /* 2 per node: name, model (or NULL) */
	size_t n;
};

static void node_list_release(struct node_list *l)
{
	for (size_t i = 0; i < 2 * l->n; i++)
		free(l->strings[i]);
	KN_FREE_ALL(l->strings, l->specs);
}

/* A CSV file's n rows, read: sorted by order, or -EINVAL "PATH: no WHAT"
   when there are none. */
static int rows_sorted(void *rows, size_t n, size_t size,
		       int (*order)(const void *, const void *),
		       const char *path, const char *what,
		       struct kn_error *err)
{
	if (n == 0)
		return kn_errorf(err, KN_EINVAL, NULL, "%s: no %s", path, what);
	qsort(rows, n, size, order);
	return 0;
}

static int spec_order(const void *pa, const void *pb)
{
	const struct kn_pack_node_spec *a = pa, *b = pb;

	return strcmp(a->name, b->name);
}

static int load_nodes(const char *path, struct node_list *l,
		      struct kn_error *err)
{
	struct sim_csv c;
	int col[5], rc;
	const char *names[5] = {"sn", "cpu_milli", "memory_mib", "gpu",
				"model"};
	size_t cap = 0;

	memset(l, 0, sizeof(*l));
	rc = sim_csv_open(&c, path, err);
	if (rc < 0)
		goto out;
	for (int i = 0; i < 5; i++) {
		col[i] = rc = sim_csv_column(&c, names[i], err);
		if (rc < 0)
			goto out;
	}
	while ((rc = kn_csv_next(&c.csv, err)) > 0) {
		struct kn_pack_node_spec *s;
		const char *name;
		int64_t cpu, mem, gpus;

		if ((rc = sim_csv_field(&c, col[0], "sn", &name, err)) < 0 ||
		    (rc = sim_csv_int(&c, col[1], "cpu_milli", INT_MAX, &cpu,
				    err)) < 0 ||
		    (rc = sim_csv_int(&c, col[2], "memory_mib", INT64_MAX / 2,
				    &mem, err)) < 0 ||
		    (rc = sim_csv_int(&c, col[3], "gpu", KN_PACK_MAX_GPUS, &gpus,
				    err)) < 0)
			goto out;
		if (gpus > 0 && (col[4] >= c.csv.n_fields ||
				 !sim_csv_text(&c, col[4]))) {
			rc = kn_errorf(
				err, KN_EINVAL, "model",
				"%s:%d:%d: model: a node with GPUs needs "
				"a model",
				path, c.csv.line,
				col[4] < c.csv.n_fields ? c.csv.cols[col[4]]
							: 1);
			goto out;
		}
		if (l->n == cap) {
			cap = cap ? 2 * cap : 256;
			l->specs = kn_xrealloc(l->specs, cap * sizeof(*l->specs));
			l->strings = kn_xrealloc(l->strings,
						 2 * cap * sizeof(*l->strings));
		}
		s = &l->specs[l->n];
		memset(s, 0, sizeof(*s));
		s->name = l->strings[2 * l->n] = kn_xstrdup(name);
		s->model = l->strings[2 * l->n + 1] =
			gpus > 0 ? kn_xstrdup(sim_csv_text(&c, col[4])) : NULL;
		s->cpu_milli = (int)cpu;
		s->memory_mib = mem;
		s->n_gpus = (int)gpus;
		l->n++;
	}
	/* The paper sorts nodes by name before drawing their order. */
	if (rc == 0)
		rc = rows_sorted(l->specs, l->n, sizeof(*l->specs), spec_order,
				 path, "nodes", err);
out:
	if (rc < 0)
		node_list_release(l);
	free(c.text);
	return rc;
}

static int pod_order(const void *pa, const void *pb)
{
	const struct sim_pod *a = pa, *b = pb;

	return strcmp(a->name, b->name);
}

/* The pod list's columns: the first five required, the rest optional. */
enum {
	POD_NAME,
	POD_CPU,
	POD_MEM,
	POD_NUM,
	POD_MILLI,
	POD_REQUIRED,
	POD_SPEC = POD_REQUIRED,
	POD_CREATED,
	POD_DELETED,
	POD_SCHEDULED,
	POD_COLUMNS
};
static const char *const pod_columns[POD_COLUMNS] = {
	"name",	    "cpu_milli",     "memory_mib",    "num_gpu",
	"gpu_milli", "gpu_spec",      "creation_time", "deletion_time",
	"scheduled_time",
};

/* An optional whole number: *out = -1 when the column is absent or the
   field empty. */
static int optional_int(struct sim_csv *c, int col, const char *name,
			int64_t *out, struct kn_error *err)
{
	const char *s;
	int rc;

	*out = -1;
	if (col < 0)
		return 0;
	rc = sim_csv_field(c, col, name, &s, err);
	if (rc < 0 || !*s)
		return rc;
	return sim_csv_int(c, col, name, INT64_MAX / 4, out, err);
}

/* The row's times: deletion_time and scheduled_time may not come before
   creation_time, nor deletion_time before scheduled_time. */
static int read_times(struct sim_csv *c, const int *col, struct sim_pod *p,
		      struct kn_error *err)
{
	int rc;

	/* Without a scheduled_time column a pod started when created. */
	if ((rc = optional_int(c, col[POD_CREATED], "creation_time",
			       &p->created, err)) < 0 ||
	    (rc = optional_int(c, col[POD_DELETED], "deletion_time",
			       &p->deleted, err)) < 0 ||
	    (rc = optional_int(c, col[POD_SCHEDULED], "scheduled_time",
			       &p->scheduled, err)) < 0)
		return rc;
	if (col[POD_SCHEDULED] < 0)
		p->scheduled = p->created;
	if (p->created >= 0 && p->deleted >= 0 &&
	    (p->deleted < p->created ||
	     (p->scheduled >= 0 &&
	      (p->scheduled < p->created || p->deleted < p->scheduled)))) {
		int at = p->scheduled >= 0 && p->scheduled < p->created
				 ? col[POD_SCHEDULED]
				 : col[POD_DELETED];

		return kn_errorf(err, KN_EINVAL, pod_columns[POD_DELETED],
				 "%s:%d:%d: %s: before the pod was created "
				 "or scheduled",
				 c->csv.path, c->csv.line, c->csv.cols[at],
				 at == col[POD_DELETED] ? "deletion_time"
							: "scheduled_time");
	}
	if ((p->created < 0) != (p->deleted < 0) && col[POD_CREATED] >= 0 &&
	    col[POD_DELETED] >= 0)
		return kn_errorf(err, KN_EINVAL, "creation_time",
				 "%s:%d:1: creation_time and deletion_time: "
				 "one is empty",
				 c->csv.path, c->csv.line);
	return 0;
}

static int read_pod(struct kn_sim *sim, struct sim_csv *c, const int *col,
		    struct sim_pod *p, struct kn_error *err)
{
	struct kn_error why = {0};
	const char *name, *spec;
	int64_t cpu, mem, num, milli;
	int rc;

	if ((rc = sim_csv_field(c, col[POD_NAME], "name", &name, err)) < 0 ||
	    (rc = sim_csv_int(c, col[POD_CPU], "cpu_milli", INT_MAX, &cpu,
			      err)) < 0 ||
	    (rc = sim_csv_int(c, col[POD_MEM], "memory_mib", INT64_MAX / 2,
			      &mem, err)) < 0 ||
	    (rc = sim_csv_int(c, col[POD_NUM], "num_gpu", KN_PACK_MAX_GPUS,
			      &num, err)) < 0 ||
	    (rc = sim_csv_int(c, col[POD_MILLI], "gpu_milli", 1000, &milli,
			      err)) < 0)
		return rc;
	spec = NULL;
	if (col[POD_SPEC] >= 0) {
		if ((rc = sim_csv_field(c, col[POD_SPEC], "gpu_spec", &spec,
					err)) < 0)
			return rc;
		spec = sim_csv_text(c, col[POD_SPEC]);
	}
	p->name = kn_xstrdup(name);
	p->gpu_spec = spec ? kn_xstrdup(spec) : NULL;
	p->pod.cpu_milli = (int)cpu;
	p->pod.memory_mib = mem;
	p->pod.num_gpu = (int)num;
	p->pod.gpu_milli = (int)milli;
	p->pod.gpu_spec = p->gpu_spec;
	p->pod.models = kn_pack_models(sim->cluster, p->gpu_spec,
				       &p->pod.constrained);
	if (kn_pack_check_pod(&p->pod, &why) < 0) {
		int at = !strcmp(why.field, "cpu_milli")    ? col[POD_CPU]
			 : !strcmp(why.field, "memory_mib") ? col[POD_MEM]
			 : !strcmp(why.field, "num_gpu")    ? col[POD_NUM]
							    : col[POD_MILLI];

		return kn_errorf(err, KN_EINVAL, why.field, "%s:%d:%d: %s",
				 c->csv.path, c->csv.line, c->csv.cols[at],
				 why.message);
	}
	return read_times(c, col, p, err);
}

static int load_pods(struct kn_sim *sim, const char *path,
		     struct kn_error *err)
{
	struct sim_csv c;
	int col[POD_COLUMNS], rc;
	size_t cap = 0;

	rc = sim_csv_open(&c, path, err);
	if (rc < 0)
		goto out;
	for (int i = 0; i < POD_COLUMNS; i++) {
		col[i] = i < POD_REQUIRED
				 ? sim_csv_column(&c, pod_columns[i], err)
				 : kn_csv_find(&c.csv, pod_columns[i]);
		if (i < POD_REQUIRED && (rc = col[i]) < 0)
			goto out;
	}
	sim->timed = col[POD_CREATED] >= 0 && col[POD_DELETED] >= 0;
	while ((rc = kn_csv_next(&c.csv, err)) > 0) {
		sim->pods = kn_xgrow(sim->pods, &cap, sim->n_pods,
				     sizeof(*sim->pods));
		memset(&sim->pods[sim->n_pods], 0, sizeof(*sim->pods));
		/* Counted first so a half-read pod is freed with the rest. */
		rc = read_pod(sim, &c, col, &sim->pods[sim->n_pods++], err);
		if (rc < 0)
			goto out;
	}
	if (rc == 0)
		rc = rows_sorted(sim->pods, sim->n_pods, sizeof(*sim->pods),
				 pod_order, path, "pods", err);
out:
	free(c.text);
	return rc;
}

int kn_sim_load(const char *nodes_csv, const char *pods_csv,
		struct kn_sim **out, struct kn_error *err)
{
	struct kn_sim *sim = kn_xcalloc(1, sizeof(*sim));
	struct node_list nodes;
	struct kn_pack_pod *typical = NULL;
	int rc;

	rc = load_nodes(nodes_csv, &nodes, err);
	if (rc < 0)
		goto out;
	rc = kn_pack_new(nodes.specs, nodes.n, &sim->cluster, err);
	node_list_release(&nodes);
	if (rc < 0)
		goto out;
	if (kn_pack_gpu_capacity(sim->cluster) == 0) {
		rc = kn_errorf(err, KN_EINVAL, NULL, "%s: no GPUs", nodes_csv);
		goto out;
	}
	rc = load_pods(sim, pods_csv, err);
	if (rc < 0)
		goto out;
	typical = kn_xcalloc(sim->n_pods, sizeof(*typical));
	for (size_t i = 0; i < sim->n_pods; i++)
		typical[i] = sim->pods[i].pod;
	kn_pack_set_typical(sim->cluster, typical, sim->n_pods);
	sim->order = kn_xcalloc(kn_pack_n_nodes(sim->cluster),
				sizeof(*sim->order));
out:
	free(typical);
	if (rc < 0) {
		kn_sim_free(sim);
		return rc;
	}
	*out = sim;
	return 0;
}

void kn_sim_free(struct kn_sim *sim)
{
	if (!sim)
		return;
	for (size_t i = 0; i < sim->n_pods; i++) {
		KN_FREE_ALL(sim->pods[i].name, sim->pods[i].gpu_spec);
	}
	KN_FREE_ALL(sim->pods, sim->stream, sim->order);
	kn_pack_free(sim->cluster);
	free(sim);
}

size_t kn_sim_n_nodes(const struct kn_sim *sim)
{
	return kn_pack_n_nodes(sim->cluster);
}

size_t kn_sim_n_pods(const struct kn_sim *sim)
{
	return sim->n_pods;
}

bool kn_sim_timed(const struct kn_sim *sim)
{
	return sim->timed;
}

int64_t kn_sim_capacity(const struct kn_sim *sim)
{
	return kn_pack_gpu_capacity(sim->cluster);
}

static void push(struct kn_sim *sim, size_t *n, const struct kn_pack_pod *p)
{
	sim->stream = kn_xgrow(sim->stream, &sim->cap_stream, *n,
			       sizeof(*sim->stream));
	sim->stream[(*n)++] = *p;
}

/* The pods of one run: shuffled originals, then resampled clones. */
static size_t build_stream(struct kn_sim *sim, struct kn_rng *rng)
{
	int64_t limit = kn_pack_gpu_capacity(sim->cluster) * 13 / 10;
	int64_t total = 0;
	size_t n = 0;

	for (size_t i = 0; i < sim->n_pods; i++) {
		push(sim, &n, &sim->pods[i].pod);
		total += (int64_t)sim->pods[i].pod.num_gpu *
			 sim->pods[i].pod.gpu_milli;
	}
	for (size_t i = n; i > 1; i--) {
		size_t j = (size_t)kn_rng_below(rng, i);
		struct kn_pack_pod t = sim->stream[i - 1];

		sim->stream[i - 1] = sim->stream[j];
		sim->stream[j] = t;
	}
	for (;;) {
		const struct kn_pack_pod *p =
			&sim->pods[kn_rng_below(rng, sim->n_pods)].pod;

		if (total + p->gpu_milli > limit)
			break;
		push(sim, &n, p);
		total += (int64_t)p->num_gpu * p->gpu_milli;
	}
	return n;
}

void sim_node_order(struct kn_sim *sim, struct kn_rng *rng)
{
	size_t n_nodes = kn_pack_n_nodes(sim->cluster);

	for (size_t i = 0; i < n_nodes; i++)
		sim->order[i] = i;
	for (size_t i = n_nodes; i > 1; i--) {
		size_t j = (size_t)kn_rng_below(rng, i);
		size_t t = sim->order[i - 1];

		sim->order[i - 1] = sim->order[j];
		sim->order[j] = t;
	}
	kn_pack_reset(sim->cluster);
	kn_pack_set_order(sim->cluster, sim->order, n_nodes);
}

int kn_sim_run(struct kn_sim *sim, const struct kn_pack_policy *policy,
	       uint64_t seed, struct kn_sim_curve *out)
{
	double alloc_sum[KN_SIM_BINS] = {0}, frag_sum[KN_SIM_BINS] = {0};
	size_t count[KN_SIM_BINS] = {0};
	size_t n;
	double capacity = (double)kn_pack_gpu_capacity(sim->cluster);
	struct kn_rng rng, policy_rng;
	int64_t arrived = 0;

	kn_rng_seed(&rng, seed);
	/* The random policy draws from its own stream so that the pods and
	   the node order of a seed are the same for every policy. */
	kn_rng_seed(&policy_rng, seed ^ 0x6b696c6e2d73696dULL);
	n = build_stream(sim, &rng);
	sim_node_order(sim, &rng);
	memset(out, 0, sizeof(*out));
	out->offered = n;
	for (size_t i = 0; i < n; i++) {
		const struct kn_pack_pod *p = &sim->stream[i];
		struct kn_pack_placement where;
		double pct;
		long bin;

		arrived += (int64_t)p->num_gpu * p->gpu_milli;
		if (kn_pack_place(sim->cluster, policy, p, &policy_rng,
				  &where) == 0)
			out->placed++;
		pct = 100.0 * (double)arrived / capacity;
		/* Round half to even, as the paper's pandas scripts do. */
		bin = lrint(pct);
		if (bin < 0 || bin > KN_SIM_MAX_ARRIVED)
			continue;
		alloc_sum[bin] += 100.0 *
				  (double)kn_pack_used_milli(sim->cluster) /
				  capacity;
		frag_sum[bin] += 100.0 * kn_pack_frag_milli(sim->cluster) /
				 capacity;
		count[bin]++;
	}
	for (int x = 0; x < KN_SIM_BINS; x++) {
		double a = alloc_sum[x], f = frag_sum[x];
		size_t k = count[x];

		if (k == 0) {
			for (int d = -1; d <= 1; d += 2) {
				if (x + d < 0 || x + d >= KN_SIM_BINS)
					continue;
				a += alloc_sum[x + d];
				f += frag_sum[x + d];
				k += count[x + d];
			}
		}
		out->unallocated[x] = k ? 100.0 - a / (double)k : NAN;
		out->frag[x] = k ? f / (double)k : NAN;
	}
	return 0;
}
