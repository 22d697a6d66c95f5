/*
 * kiln nodes: each node with its devices and what is allocated on them.
 * Simulated devices are said plainly, so nobody mistakes a CPU run for
 * GPU numbers.
 */
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "cmd/cli_client.h"
#include "cmd/cli_watch.h"

static cli_runner cmd_nodes;

const struct cli_command cmd_nodes_entry = {
	.name = "nodes",
	.run = cmd_nodes,
	.summary = "list nodes and their devices",
	.help = "usage: kiln nodes [-w] [-o table|json|yaml|name]\n"
		"\n"
		"List each node (name, state, CPUs, memory, labels, taints; whether\n"
		"its devices are simulated; its GPU fragmentation, FGD's measure\n"
		"against the server's GPU jobs) and its devices: INDEX MODEL MEMORY\n"
		"and what is ALLOCATED on each (\"1.0 GPU: job 7 rank 0\").\n"
		"\n"
		"  -w, --watch   draw again whenever the server's event stream says\n"
		"                something changed (no polling); until interrupted\n"
		"  -o json|yaml  print the server's answer instead\n",
};

/* "k=v, k=v" or "none". */
static void describe_labels(json_t *labels, struct kn_buf *out)
{
	const char *key;
	json_t *value;
	bool first = true;

	json_object_foreach(labels, key, value) {
		kn_buf_printf(out, "%s%s=%s", first ? "" : ", ", key,
			      json_string_value(value) ? json_string_value(value)
						       : "");
		first = false;
	}
	if (first)
		kn_buf_printf(out, "none");
}

/* "key=value:Effect, ..." from objects, or the strings as they are. */
static void describe_taints(json_t *taints, struct kn_buf *out)
{
	json_t *taint;
	size_t i;

	json_array_foreach(taints, i, taint) {
		const char *value =
			json_string_value(json_object_get(taint, "value"));
		const char *effect =
			json_string_value(json_object_get(taint, "effect"));

		if (i)
			kn_buf_printf(out, ", ");
		if (json_is_string(taint)) {
			kn_buf_printf(out, "%s", json_string_value(taint));
			continue;
		}
		kn_buf_printf(out, "%s", cli_json_str(taint, "key"));
		if (value)
			kn_buf_printf(out, "=%s", value);
		if (effect)
			kn_buf_printf(out, ":%s", effect);
	}
}

/* "1.0 GPU: job 7 rank 0; 0.5 GPU: job 8 rank 1", or "-". */
static void describe_allocations(json_t *device, struct kn_buf *out)
{
	json_t *allocs = json_object_get(device, "allocations");
	json_t *a;
	char amount[32];
	size_t i;

	json_array_foreach(allocs, i, a) {
		const char *profile =
			json_string_value(json_object_get(a, "mig_profile"));

		if (profile) {
			kn_buf_printf(out, "%sMIG %s@%lld: job %lld rank %lld",
				      i ? "; " : "", profile,
				      (long long)cli_json_int(a, "mig_start"),
				      (long long)cli_json_int(a, "job"),
				      (long long)cli_json_int(a, "rank"));
			continue;
		}
		cli_format_milli(cli_json_int(a, "milli"), amount,
				 sizeof(amount));
		kn_buf_printf(out, "%s%s GPU: job %lld rank %lld",
			      i ? "; " : "", amount,
			      (long long)cli_json_int(a, "job"),
			      (long long)cli_json_int(a, "rank"));
	}
	if (!json_array_size(allocs) &&
	    cli_json_int(device, "allocated_milli") > 0) {
		cli_format_milli(cli_json_int(device, "allocated_milli"),
				 amount, sizeof(amount));
		kn_buf_printf(out, "%s GPU", amount);
	}
}

static void line(const char *text)
{
	char clean[2048];

	cli_clean(clean, text, sizeof(clean));
	printf("%s\n", clean);
}

/* "  limits: cgroup v1: memory, cpu, 4096 pids, devices" or why none. */
static void describe_limits(json_t *limits, struct kn_buf *b)
{
	if (!json_is_object(limits))
		return;
	b->len = 0;
	if (!json_is_true(json_object_get(limits, "enforced"))) {
		kn_buf_printf(b, "  limits: none enforced (%s)",
			      cli_json_str(limits, "why"));
	} else {
		kn_buf_printf(b, "  limits: cgroup %s:%s%s", 
			      cli_json_str(limits, "cgroup"),
			      json_is_true(json_object_get(limits, "memory"))
				      ? " memory," : "",
			      json_is_true(json_object_get(limits, "cpu"))
				      ? " cpu," : "");
		if (cli_json_int(limits, "pids_max") > 0)
			kn_buf_printf(b, " %lld processes,",
				      (long long)cli_json_int(limits, "pids_max"));
		kn_buf_printf(b, "%s", json_is_true(json_object_get(limits,
								    "devices"))
					       ? " devices"
					       : "");
		if (b->data[b->len - 1] == ',')
			b->data[--b->len] = '\0';
	}
	line(b->data);
}

static bool nonempty(json_t *obj, const char *key)
{
	const char *v = json_string_value(json_object_get(obj, key));

	return v && *v;
}

/*
 * "  slurm: drained (kiln health: ...); partitions kiln; features ib;
 * gres gpu:a100:4 (1 used)": what Slurm says of the node, if anything.
 */
static void describe_slurm(json_t *slurm, struct kn_buf *b)
{
	json_t *g;
	size_t i;

	if (!json_is_object(slurm))
		return;
	b->len = 0;
	kn_buf_printf(b, "  slurm: %s", cli_json_str(slurm, "state"));
	if (json_is_string(json_object_get(slurm, "reason")))
		kn_buf_printf(b, " (%s)", cli_json_str(slurm, "reason"));
	if (nonempty(slurm, "partitions"))
		kn_buf_printf(b, "; partitions %s",
			      cli_json_str(slurm, "partitions"));
	if (nonempty(slurm, "features"))
		kn_buf_printf(b, "; features %s",
			      cli_json_str(slurm, "features"));
	json_array_foreach(json_object_get(slurm, "gres"), i, g)
		kn_buf_printf(b, "%s%s%s%s:%lld (%lld used)",
			      i ? ", " : "; gres ", cli_json_str(g, "name"),
			      nonempty(g, "type") ? ":" : "",
			      nonempty(g, "type") ? cli_json_str(g, "type") : "",
			      (long long)cli_json_int(g, "count"),
			      (long long)cli_json_int(g, "used"));
	line(b->data);
}

static void show_node(json_t *node)
{
	static const char *const headers[] = {
		"INDEX", "MODEL", "MEMORY", "ALLOCATED", NULL,
	};
	bool simulated = json_is_true(json_object_get(node, "simulated"));
	json_t *devices = json_object_get(node, "devices");
	json_t *dev, *frag;
	struct cli_table *t;
	struct kn_buf b;
	char size[32];
	size_t i;

	kn_buf_init(&b, SIZE_MAX);
	kn_buf_printf(&b, "node %s: %s", cli_json_str(node, "name"),
		      cli_json_str(node, "state"));
	if (cli_json_int(node, "cpus") > 0)
		kn_buf_printf(&b, ", %lld CPUs",
			      (long long)cli_json_int(node, "cpus"));
	if (cli_json_int(node, "memory_bytes") > 0) {
		kn_format_bytes(cli_json_int(node, "memory_bytes"), size,
				 sizeof(size));
		kn_buf_printf(&b, ", %s memory", size);
	}
	line(b.data);
	if (json_is_string(json_object_get(node, "reason"))) {
		b.len = 0;
		kn_buf_printf(&b, "  why: %s", cli_json_str(node, "reason"));
		line(b.data);
	}
	describe_slurm(json_object_get(node, "slurm"), &b);
	if (simulated)
		line("  simulated devices: tasks run on the CPU; no GPU is used");
	if (json_is_string(json_object_get(node, "isolation"))) {
		b.len = 0;
		kn_buf_printf(&b, "  isolation: %s",
			      cli_json_str(node, "isolation"));
		line(b.data);
	}
	describe_limits(json_object_get(node, "limits"), &b);
	b.len = 0;
	kn_buf_printf(&b, "  labels: ");
	describe_labels(json_object_get(node, "labels"), &b);
	line(b.data);
	if (json_array_size(json_object_get(node, "taints"))) {
		b.len = 0;
		kn_buf_printf(&b, "  taints: ");
		describe_taints(json_object_get(node, "taints"), &b);
		line(b.data);
	}
	frag = json_object_get(node, "fragmentation");
	if (json_is_object(frag)) {
		b.len = 0;
		kn_buf_printf(
			&b,
			"  fragmentation: %.1f %% of the GPUs (%.2f GPU idle that "
			"a job shaped like this server's %lld GPU jobs could not use)",
			json_number_value(json_object_get(frag, "percent")),
			json_number_value(json_object_get(frag, "milli")) /
				1000.0,
			(long long)cli_json_int(frag, "workload_jobs"));
		line(b.data);
	}
	kn_buf_release(&b);
	if (!json_array_size(devices)) {
		line("  no GPUs");
		return;
	}
	t = cli_table_new(headers);
	json_array_foreach(devices, i, dev) {
		cli_table_int(t, dev, "index");
		/* Say it per device too when only some are simulated. */
		cli_table_cellf(t, "%s%s%s", cli_json_str(dev, "model"),
				!simulated &&
						json_is_true(json_object_get(
							dev, "simulated"))
					? " (simulated)"
					: "",
				json_is_true(json_object_get(dev, "mig"))
					? " (MIG)"
					: "");
		kn_format_bytes(cli_json_int(dev, "memory_bytes"), size,
				 sizeof(size));
		cli_table_cell(t, size);
		kn_buf_init(&b, SIZE_MAX);
		describe_allocations(dev, &b);
		cli_table_cell(t, b.len ? b.data : "-");
		kn_buf_release(&b);
	}
	cli_table_print(t, stdout, 2);
	cli_table_free(t);
}

static void print_nodes(const struct cli_ctx *ctx, json_t *answer,
			void *arg)
{
	json_t *nodes = json_object_get(answer, "nodes"), *node;
	size_t i;

	(void)ctx;
	(void)arg;
	if (!json_array_size(nodes))
		fputs("no nodes\n", stderr);
	json_array_foreach(nodes, i, node) {
		if (i)
			putchar('\n');
		show_node(node);
	}
}

static int cmd_nodes(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct watch_listing nodes = {"/v1/nodes", print_nodes,
						   NULL, "nodes", "name"};

	return watch_listing_command(ctx, argc, argv, &nodes);
}
