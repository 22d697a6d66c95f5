/*
 * kiln sim --autoscale: replay a timed trace through autoscaled node
 * pools and, for comparison, through the same pools held at their max,
 * and print what each costs and how long pods waited
 * (docs/scheduling.md). The replay is src/sim/autoscale_replay.c; this file
 * reads the pools, prices them from the catalog and prints.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/sim_autoscale.h"
#include "cost/cost.h"
#include "sim/sim.h"

/* More pools than this is a typo, not a cluster. */
#define MAX_POOLS 32

struct pool_list {
	struct kn_sim_pool pools[MAX_POOLS];
	size_t n;
};

static void pool_list_release(struct pool_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		kn_sim_pool_release(&l->pools[i]);
	l->n = 0;
}

/* One pool's text; where names the file line it came from, or NULL. */
static int pool_add(const struct cli_ctx *ctx, struct pool_list *l,
		    const char *text, const char *where)
{
	struct kn_error err = {0};

	if (l->n == MAX_POOLS)
		return cli_usage_error(ctx, "--autoscale: at most %d pools",
				       MAX_POOLS);
	if (kn_sim_pool_parse(text, &l->pools[l->n], &err) < 0)
		return where ? cli_usage_error(ctx, "--autoscale: %s: %s", where,
					       err.message)
			     : cli_usage_error(ctx, "--autoscale: %s",
					       err.message);
	for (size_t k = 0; k < l->n; k++)
		if (!strcmp(l->pools[k].name, l->pools[l->n].name)) {
			kn_sim_pool_release(&l->pools[l->n]);
			return cli_usage_error(ctx,
					       "--autoscale: pool %s is given "
					       "twice",
					       l->pools[k].name);
		}
	l->n++;
	return CLI_GO;
}

/* "POOL; POOL" or "@FILE" with one pool a line (# starts a comment). */
static int pools_read(const struct cli_ctx *ctx, const char *arg,
		      struct pool_list *l)
{
	char *text = NULL, *save = NULL, *line;
	int rc = CLI_GO, n = 0;
	size_t len;

	if (arg[0] == '@') {
		int r = kn_read_file(arg + 1, 1 << 20, &text, &len);

		if (r < 0)
			return cli_usage_error(ctx, "--autoscale: %s: %s",
					       arg + 1, strerror(-r));
	} else {
		text = kn_xstrdup(arg);
	}
	for (char *p = text; *p; p++)
		if (arg[0] != '@' && *p == ';')
			*p = '\n';
	/* strtok_r would skip empty lines and lose the numbering. */
	for (line = text; rc == CLI_GO && line; line = save) {
		char *hash, *end, *where;

		save = strchr(line, '\n');
		if (save)
			*save++ = '\0';
		n++;
		if (arg[0] == '@' && (hash = strchr(line, '#')))
			*hash = '\0';
		while (*line == ' ' || *line == '\t')
			line++;
		end = line + strlen(line);
		while (end > line && strchr(" \t\r", end[-1]))
			*--end = '\0';
		if (!*line)
			continue;
		/* Allocated: a long path must keep its line number. */
		where = kn_asprintf("%s:%d", arg + 1, n);
		rc = pool_add(ctx, l, line, arg[0] == '@' ? where : NULL);
		free(where);
	}
	free(text);
	if (rc == CLI_GO && l->n == 0)
		rc = cli_usage_error(ctx, "--autoscale: no pool given");
	return rc;
}

/* Prices and node sizes from the shipped catalog. */
static int pools_price(const struct cli_ctx *ctx, struct pool_list *l)
{
	struct kn_catalog *cat = kn_catalog_new();
	struct kn_error err = {0};
	int rc = CLI_GO;

	if (kn_catalog_load_shipped(cat, &err) < 0) {
		rc = cli_fail(ctx, "%s", err.message);
		goto out;
	}
	for (size_t i = 0; i < l->n; i++) {
		struct kn_sim_pool *p = &l->pools[i];
		const struct kn_vm_size *vm = kn_catalog_find(cat, p->sku);

		if (!vm) {
			fprintf(stderr,
				"%s: pool %s: %s is not in the catalog: its "
				"cost is unknown, its CPU and memory not "
				"counted\n",
				ctx->prog, p->name, p->sku);
			continue;
		}
		p->shape.cpu_milli_total = vm->vcpus * 1000;
		p->shape.memory_total = (int64_t)(vm->ram_gib * 1073741824.0);
		if (!kn_vm_size_price(vm,
				      p->spot ? KN_PRICING_SPOT
					      : KN_PRICING_ON_DEMAND,
				      &p->usd_hr))
			fprintf(stderr,
				"%s: pool %s: the catalog has no %s price for "
				"%s: its cost is unknown\n",
				ctx->prog, p->name,
				p->spot ? "spot" : "on-demand", p->sku);
	}
out:
	kn_catalog_free(cat);
	return rc;
}

static json_t *number_or_null(double v)
{
	return isnan(v) || v < 0 ? json_null() : json_real(v);
}

static json_t *report_json(const struct kn_sim_pool_report *r)
{
	return json_pack(
		"{s:f, s:o, s:f, s:f, s:o, s:i, s:i, s:i, s:I, "
		"s:{s:o, s:o, s:o}}",
		"node_hours", r->node_hours, "cost_usd",
		number_or_null(r->cost_usd), "gpu_hours", r->gpu_hours,
		"gpu_hours_used", r->gpu_hours_used, "gpu_utilization",
		r->gpu_hours > 0 ? json_real(r->gpu_hours_used / r->gpu_hours)
				 : json_null(),
		"peak_nodes", r->peak_nodes, "nodes_added", r->nodes_added,
		"nodes_removed", r->nodes_removed, "pods", (json_int_t)r->pods,
		"wait_s", "p50", number_or_null(r->wait_p50_s), "p95",
		number_or_null(r->wait_p95_s), "max",
		number_or_null(r->wait_max_s));
}

static json_t *run_json(const struct pool_list *l,
			const struct kn_sim_autoscale_report *r)
{
	json_t *pools = json_array();

	for (size_t i = 0; i < l->n; i++) {
		json_t *p = report_json(&r->pools[i]);

		json_object_set_new(p, "name", json_string(l->pools[i].name));
		json_object_set_new(p, "sku", json_string(l->pools[i].sku));
		json_object_set_new(p, "spot", json_boolean(l->pools[i].spot));
		json_object_set_new(p, "min", json_integer(l->pools[i].min));
		json_object_set_new(p, "max", json_integer(l->pools[i].max));
		json_object_set_new(p, "usd_per_node_hour",
				    number_or_null(l->pools[i].usd_hr));
		json_array_append_new(pools, p);
	}
	return json_pack("{s:f, s:I, s:o, s:o}", "span_hours", r->span_hours,
			 "never_fit", (json_int_t)r->never_fit, "pools", pools,
			 "total", report_json(&r->total));
}

static void cell_wait(struct cli_table *t, double s)
{
	char buf[32];

	if (isnan(s)) {
		cli_table_cell(t, "-");
		return;
	}
	kn_format_duration((int64_t)llround(s * 1000.0), buf, sizeof(buf));
	cli_table_cell(t, buf);
}

static void row(struct cli_table *t, const char *name, const char *sku,
		const char *pricing, const struct kn_sim_pool_report *r)
{
	cli_table_cell(t, name);
	cli_table_cell(t, sku);
	cli_table_cell(t, pricing);
	cli_table_cellf(t, "%.1f", r->node_hours);
	if (r->cost_usd >= 0)
		cli_table_cellf(t, "%.2f", r->cost_usd);
	else
		cli_table_cell(t, "-");
	if (r->gpu_hours > 0)
		cli_table_cellf(t, "%.1f%%",
				100.0 * r->gpu_hours_used / r->gpu_hours);
	else
		cli_table_cell(t, "-");
	cell_wait(t, r->wait_p50_s);
	cell_wait(t, r->wait_p95_s);
	cell_wait(t, r->wait_max_s);
	cli_table_cellf(t, "%d", r->peak_nodes);
	cli_table_cellf(t, "%zu", r->pods);
}

static void print_run(const char *title, const struct pool_list *l,
		      const struct kn_sim_autoscale_report *r)
{
	static const char *const headers[] = {
		"POOL",	    "SKU",	"PRICING",  "NODE-HOURS",
		"COST-USD", "GPU-UTIL", "WAIT-P50", "WAIT-P95",
		"WAIT-MAX", "PEAK",	"PODS",	    NULL};
	struct cli_table *t = cli_table_new(headers);

	printf("%s, %.1f hours:\n", title, r->span_hours);
	for (size_t i = 0; i < l->n; i++)
		row(t, l->pools[i].name, l->pools[i].sku,
		    l->pools[i].spot ? "spot" : "on-demand", &r->pools[i]);
	row(t, "TOTAL", "", "", &r->total);
	cli_table_print(t, stdout, 2);
	cli_table_free(t);
}

static void print_cost(const char *label, double usd)
{
	if (usd >= 0)
		printf("%s $%.2f", label, usd);
	else
		printf("%s unknown", label);
}

static void print_wait(const char *label, double s)
{
	char buf[32];

	if (isnan(s)) {
		printf("%s -", label);
		return;
	}
	kn_format_duration((int64_t)llround(s * 1000.0), buf, sizeof(buf));
	printf("%s %s", label, buf);
}

int sim_autoscale_run(const struct cli_ctx *ctx,
		      const struct sim_autoscale_args *a)
{
	struct pool_list pools = {0};
	struct kn_sim_autoscale_opts opts = {.seed = a->seed};
	struct kn_sim_autoscale_report scaled = {0}, fixed = {0};
	struct kn_sim_trace *trace = NULL;
	struct kn_error err = {0};
	int64_t start, ms;
	int rc;

	if (a->provision_delay &&
	    kn_parse_duration(a->provision_delay, &opts.provision_delay_ms) <
		    0) {
		rc = cli_usage_error(ctx,
				     "--provision-delay: \"%s\" is not a "
				     "duration (e.g. 3m)",
				     a->provision_delay);
		goto out;
	}
	opts.policy = kn_pack_policy_find(a->policy ? a->policy : "kiln");
	if (!opts.policy) {
		rc = cli_usage_error(ctx,
				     "--policy: unknown policy '%s' (one of "
				     "random, dot-product, gpu-clustering, "
				     "gpu-packing, best-fit, fgd, kiln; "
				     "--autoscale takes one)",
				     a->policy);
		goto out;
	}
	rc = pools_read(ctx, a->pools, &pools);
	if (rc != CLI_GO)
		goto out;
	rc = pools_price(ctx, &pools);
	if (rc != CLI_GO)
		goto out;
	if (kn_sim_trace_load(a->pods, &trace, &err) < 0) {
		rc = cli_fail(ctx, "%s", err.message);
		goto out;
	}
	start = kn_mono_ms();
	kn_sim_autoscale(trace, pools.pools, pools.n, &opts, &scaled);
	opts.fixed = true;
	kn_sim_autoscale(trace, pools.pools, pools.n, &opts, &fixed);
	ms = kn_mono_ms() - start;
	fprintf(stderr,
		"%s: %zu pods (%zu never ran in the trace, left out), %zu "
		"pool%s; both runs took %.2f s\n",
		ctx->prog, kn_sim_trace_n_pods(trace),
		kn_sim_trace_n_unscheduled(trace), pools.n,
		pools.n == 1 ? "" : "s", (double)ms / 1000.0);
	if (cli_want_json(ctx)) {
		json_t *j = json_pack(
			"{s:s, s:f, s:I, s:I, s:I, s:o, s:o}", "policy",
			opts.policy->name,
			"provision_delay_s",
			(double)opts.provision_delay_ms / 1000.0, "pods",
			(json_int_t)kn_sim_trace_n_pods(trace), "unscheduled",
			(json_int_t)kn_sim_trace_n_unscheduled(trace),
			"never_fit", (json_int_t)scaled.never_fit, "autoscaled",
			run_json(&pools, &scaled), "fixed",
			run_json(&pools, &fixed));

		cli_print_data(ctx, j);
		json_decref(j);
		rc = CLI_EXIT_OK;
		goto out;
	}
	if (scaled.never_fit)
		printf("%zu pod%s fit no pool's empty node and were left "
		       "out.\n\n",
		       scaled.never_fit, scaled.never_fit == 1 ? "" : "s");
	print_run("Autoscaled", &pools, &scaled);
	printf("\n");
	print_run("Fixed at each pool's max", &pools, &fixed);
	printf("\n");
	print_cost("Cost: autoscaled", scaled.total.cost_usd);
	print_cost(", fixed", fixed.total.cost_usd);
	print_wait(". Wait p95: autoscaled", scaled.total.wait_p95_s);
	print_wait(", fixed", fixed.total.wait_p95_s);
	printf(".\n");
	rc = CLI_EXIT_OK;
out:
	kn_sim_autoscale_report_release(&scaled);
	kn_sim_autoscale_report_release(&fixed);
	kn_sim_trace_free(trace);
	pool_list_release(&pools);
	return rc;
}
