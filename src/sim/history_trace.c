/*
 * A server's history as a trace for the simulator (`kiln sim
 * --from-history`): its ended jobs as an openb pod list and its nodes as
 * an openb node list, which the simulator then replays like any trace.
 *
 * Each task of a job is one pod (openb has no gangs: the simulator places
 * pods one by one). A share (gpus: 0.5) is one GPU at 500 milli; whole
 * GPUs are num_gpu at 1000. A job's gpu_model constraint names kiln
 * models ("H100" accepts "H100-80GB"), so it is turned into the exact
 * node models of the trace that it accepts. MIG jobs are left out: openb
 * has no MIG slices. A node whose GPUs are of several models becomes one
 * node per model, its CPUs and memory split in proportion to the GPUs.
 * Each pod also carries its job's times (submitted, started, ended) and
 * preemptible flag, so the autoscaling replay can replay it in time.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "sim/sim.h"

#define MAX_MODELS 64

struct model_list {
	char *names[MAX_MODELS];
	int n;
};

static void model_add(struct model_list *m, const char *name)
{
	for (int i = 0; i < m->n; i++)
		if (!strcmp(m->names[i], name))
			return;
	if (m->n < MAX_MODELS)
		m->names[m->n++] = kn_xstrdup(name);
}

static void model_list_release(struct model_list *m)
{
	for (int i = 0; i < m->n; i++)
		free(m->names[i]);
	m->n = 0;
}

/*
 * A CSV field without commas, quotes or line breaks, so the trace reads
 * as openb's; at the start of a cell, one a spreadsheet would run as a
 * formula gets a single quote first (node and GPU model names come from
 * the nodes).
 */
static void put_field(struct kn_buf *b, const char *s)
{
	bool cell_start = !b->len || b->data[b->len - 1] == ',' ||
			  b->data[b->len - 1] == '\n';

	if (cell_start && kn_csv_formula_start(s))
		kn_buf_append(b, "'", 1);
	for (; *s; s++) {
		char c = strchr(",\"\r\n", *s) ? '_' : *s;

		kn_buf_append(b, &c, 1);
	}
}

static void node_row(struct kn_buf *b, const char *name, const char *model,
		     int gpus, int64_t cpu_milli, int64_t memory_mib)
{
	put_field(b, name);
	kn_buf_printf(b, ",%lld,%lld,%d,", (long long)cpu_milli,
		       (long long)memory_mib, gpus);
	put_field(b, model);
	kn_buf_printf(b, "\n");
}

/* Node rows of one /v1/nodes entry; its non-MIG GPU models into models. */
static void node_rows(struct kn_buf *b, json_t *node,
		      struct model_list *models, size_t *n_nodes)
{
	const char *name = json_string_value(json_object_get(node, "name"));
	json_t *devs = json_object_get(node, "devices"), *d;
	int64_t cpu = (int64_t)llround(
		json_number_value(json_object_get(node, "cpus")) * 1000.0);
	int64_t mem = json_integer_value(json_object_get(node, "memory_bytes")) >>
		      20;
	struct model_list here = {0};
	int counts[MAX_MODELS] = {0}, total = 0;
	size_t i;

	if (!name)
		return;
	json_array_foreach(devs, i, d) {
		const char *model =
			json_string_value(json_object_get(d, "model"));

		if (!model || json_is_true(json_object_get(d, "mig")))
			continue;
		model_add(&here, model);
		for (int k = 0; k < here.n; k++)
			if (!strcmp(here.names[k], model))
				counts[k]++;
		total++;
	}
	if (here.n <= 1) {
		node_row(b, name, here.n ? here.names[0] : "", total, cpu, mem);
		(*n_nodes)++;
	}
	for (int k = 0; here.n > 1 && k < here.n; k++) {
		char *part = kn_asprintf("%s/%s", name, here.names[k]);

		node_row(b, part, here.names[k], counts[k],
			 cpu * counts[k] / total, mem * counts[k] / total);
		(*n_nodes)++;
		free(part);
	}
	for (int k = 0; k < here.n; k++)
		model_add(models, here.names[k]);
	model_list_release(&here);
}

/*
 * gpu_spec for a job's gpu_model list: the trace's models each constraint
 * accepts (equal, or the constraint followed by '-', ignoring case), or
 * the constraint as written when the node list is the user's own.
 */
static void gpu_spec(struct kn_buf *b, json_t *wanted,
		     const struct model_list *models, bool server_nodes)
{
	size_t i;
	json_t *w;
	bool first = true;

	json_array_foreach(wanted, i, w) {
		const char *c = json_string_value(w);

		if (!c)
			continue;
		if (!server_nodes) {
			put_field(b, first ? "" : "|");
			put_field(b, c);
			first = false;
			continue;
		}
		for (int k = 0; k < models->n; k++) {
			const char *m = models->names[k];

			if (!kn_sched_model_accepts(c, m))
				continue;
			put_field(b, first ? "" : "|");
			put_field(b, m);
			first = false;
		}
		/* Accepts none of these nodes: keep the name, so the
		   pod is offered and fits nowhere, as it would. */
		if (first) {
			put_field(b, c);
			first = false;
		}
	}
}

static bool ended(const char *state)
{
	return state && (!strcmp(state, "succeeded") ||
			 !strcmp(state, "failed") ||
			 !strcmp(state, "cancelled"));
}

/* The time columns, in whole seconds as openb's: a job that never
   started has no scheduled_time (kiln sim --autoscale leaves it out). */
static void times(struct kn_buf *b, json_t *job)
{
	int64_t submitted = json_integer_value(
		json_object_get(job, "submitted_at_ms"));
	int64_t started = json_integer_value(
		json_object_get(job, "started_at_ms"));
	int64_t ended_at = json_integer_value(
		json_object_get(job, "ended_at_ms"));
	int64_t last = ended_at > started ? ended_at : started;

	kn_buf_printf(b, ",%lld,%lld,", (long long)(submitted / 1000),
		      (long long)((last > submitted ? last : submitted) /
				  1000));
	if (started > 0)
		kn_buf_printf(b, "%lld", (long long)(started / 1000));
	kn_buf_printf(b, ",%s\n",
		      json_is_true(json_object_get(job, "preemptible"))
			      ? "true"
			      : "false");
}

/* Pod rows for one job (one per task); false when it cannot be one. */
static bool pod_rows(struct kn_buf *b, json_t *job,
		     const struct model_list *models, bool server_nodes,
		     size_t *n_pods)
{
	json_t *res = json_object_get(job, "resources");
	json_t *gpus = json_object_get(res, "gpus");
	int64_t id = json_integer_value(json_object_get(job, "id"));
	int tasks = (int)json_integer_value(json_object_get(job, "tasks"));
	int64_t gpu_milli, cpu_milli, mem_mib, num_gpu;

	if (!res || json_is_string(gpus))
		return false; /* MIG: "mig:1g.10gb" */
	gpu_milli = (int64_t)llround(json_number_value(gpus) * 1000.0);
	cpu_milli = (int64_t)llround(
		json_number_value(json_object_get(res, "cpus")) * 1000.0);
	mem_mib = (json_integer_value(json_object_get(res, "memory_bytes")) +
		   (1 << 20) - 1) >> 20;
	num_gpu = gpu_milli >= 1000 ? gpu_milli / 1000 : gpu_milli > 0;
	if (gpu_milli > 1000)
		gpu_milli = 1000;
	for (int t = 0; t < (tasks > 0 ? tasks : 1); t++) {
		kn_buf_printf(b, "job-%lld-%d,%lld,%lld,%lld,%lld,",
			       (long long)id, t, (long long)cpu_milli,
			       (long long)mem_mib, (long long)num_gpu,
			       (long long)gpu_milli);
		gpu_spec(b, json_object_get(res, "gpu_model"), models,
			 server_nodes);
		times(b, job);
		(*n_pods)++;
	}
	return true;
}

void kn_sim_history_csv(json_t *jobs, json_t *nodes, struct kn_buf *pods,
			struct kn_buf *node_list, struct kn_sim_history *out)
{
	struct model_list models = {0};
	json_t *v;
	size_t i;

	memset(out, 0, sizeof(*out));
	if (nodes) {
		kn_buf_printf(node_list, "sn,cpu_milli,memory_mib,gpu,model\n");
		json_array_foreach(json_object_get(nodes, "nodes"), i, v)
			node_rows(node_list, v, &models, &out->nodes);
	}
	kn_buf_printf(pods, "name,cpu_milli,memory_mib,num_gpu,gpu_milli,"
			    "gpu_spec,creation_time,deletion_time,"
			    "scheduled_time,preemptible\n");
	json_array_foreach(json_object_get(jobs, "jobs"), i, v) {
		if (!ended(json_string_value(json_object_get(v, "state"))))
			continue;
		out->jobs++;
		if (!pod_rows(pods, v, &models, nodes != NULL, &out->pods))
			out->skipped_mig++;
	}
	model_list_release(&models);
}
