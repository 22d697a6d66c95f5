/*
 * kiln advise: which Azure VM to rent for a training or inference job,
 * and what it costs under each pricing model. The reasoning is cost/'s
 * (kn_advise); this file reads the flags, the catalog files, the model
 * presets and the GPU bandwidth figures, and prints the advice as a
 * table with the arithmetic or as JSON with the same facts.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "cost/cost.h"
#include "health/health.h"
#include "spec/spec.h"

static cli_runner cmd_advise;

const struct cli_command cmd_advise_entry = {
	.name = "advise",
	.run = cmd_advise,
	.summary = "say which VM to rent for a job and what it costs",
	.help = "usage: kiln advise --phase train|finetune|infer\n"
		"                   (--params N [--dtype T] | --preset NAME)\n"
		"                   [--workload generative|complex|small]\n"
		"                   [--nodes N | --throughput TOKENS/S]\n"
		"                   [--interruptible] [--checkpoints] [--budget USD]\n"
		"                   [--context N] [--batch N] [--layers N --hidden N]\n"
		"                   [--catalog FILE] [--options N] [-o json]\n"
		"\n"
		"Name the VM family Azure's compute recommendations give for the phase\n"
		"and workload (training: ND, or NC with Ethernet; RDMA/InfiniBand for\n"
		"multi-node training; inference: NC or ND; small models: E-series CPU\n"
		"for training, F-series for inference), the memory the model needs\n"
		"(weights; training adds 16 bytes/param for gradients and Adam state\n"
		"plus 20% for activations; inference adds the KV cache plus 10%), and\n"
		"the cheapest sizes that hold it, with the GPUs used and the cost per\n"
		"hour and per month (730 h) on demand, on spot and reserved for 1 and 3\n"
		"years (\"—\" where the catalog has no price). Warnings go to stderr.\n"
		"Needs no server. docs/cost.md has the arithmetic.\n"
		"\n"
		"  --phase P         train, finetune or infer\n"
		"  --workload W      generative (default), complex (non-generative) or\n"
		"                    small (non-generative, on CPU)\n"
		"  --params N        parameters: 7B, 350M, 1.5T or a plain count\n"
		"  --dtype T         fp32, bf16 (default), fp16, fp8, int8, int4\n"
		"  --preset NAME     a model of kiln's model-presets.csv (its\n"
		"                    parameters and dtype)\n"
		"  --nodes N         VMs: training shares the memory over them,\n"
		"                    inference runs N replicas (default 1)\n"
		"  --throughput T    decode tokens/s wanted (infer): VMs are added until\n"
		"                    50% of the GPUs' memory bandwidth reaches it\n"
		"  --interruptible   the job may run on spot VMs (ranked by spot price)\n"
		"  --checkpoints     the job checkpoints (spot training without it warns)\n"
		"  --budget USD      monthly budget; sizes above it are flagged\n"
		"  --context N       tokens of context for the KV cache (default 4096)\n"
		"  --batch N         concurrent sequences for the KV cache (default 1)\n"
		"  --layers N, --hidden N  the model's shape (default: estimated from\n"
		"                    the parameters as hidden = 128 x layers)\n"
		"  --catalog FILE    more sizes or prices, same columns as\n"
		"                    kiln's azure-gpu-skus.csv; rows replace by size\n"
		"                    name\n"
		"  --options N       how many sizes to list (default 5, at most 32)\n"
		"\n"
		"Exit status: 0 with advice, 1 when no size fits or a file is bad, 2 on\n"
		"a usage error.\n",
};

/* The flags that are text to check; the numbers and switches go
   straight into the request. */
struct advise_flags {
	const char *phase, *workload, *params, *dtype, *preset, *throughput,
		*budget, *catalog;
};

/* A positive number from a flag; a usage error naming the flag else. */
static int number_flag(struct cli_ctx *ctx, const char *flag, const char *s,
		       double *out)
{
	char *end;
	double v = strtod(s, &end);

	if (end == s || *end || !isfinite(v) || !(v > 0))
		return cli_usage_error(ctx, "--%s: \"%s\" is not a number > 0",
				       flag, s);
	*out = v;
	return CLI_GO;
}

/* Each catalog row's GPU bandwidth from data/gpu-perf.csv, for sizing
   by throughput. */
static int add_bandwidths(struct cli_ctx *ctx, struct kn_catalog *cat)
{
	struct kn_gpu_perf_table perf;
	struct kn_error err;
	char *path = kn_data_path("gpu-perf.csv");
	int rc = kn_gpu_perf_load(path, &perf, &err);

	free(path);
	if (rc < 0)
		return cli_fail(ctx, "%s", err.message);
	for (size_t i = 0; i < kn_catalog_count(cat); i++) {
		const struct kn_vm_size *s = kn_catalog_at(cat, i);
		const struct kn_gpu_perf_row *row;
		double whole;

		if (!(s->gpus > 0))
			continue;
		whole = s->gpus < 1 ? s->gpu_mem_gb / s->gpus : s->gpu_mem_gb;
		row = kn_gpu_perf_lookup(&perf, s->gpu_model, whole);
		if (row && row->mem_bandwidth_gbs > 0)
			kn_catalog_set_bandwidth(cat, i, row->mem_bandwidth_gbs);
	}
	kn_gpu_perf_table_release(&perf);
	return CLI_GO;
}

/* "$3.67/h $2681/mo", or "—" when the catalog has no price. */
static void price_cell(char *buf, size_t len, double usd_hr)
{
	if (usd_hr < 0)
		snprintf(buf, len, "—");
	else
		snprintf(buf, len, "$%.2f/h $%.0f/mo", usd_hr,
			 usd_hr * KN_HOURS_PER_MONTH);
}

static json_t *price_json(double usd_hr)
{
	return usd_hr < 0 ? json_null() : json_real(usd_hr);
}

static json_t *advice_json(const struct kn_advise_request *req,
			   const struct kn_advice *a, const char *preset)
{
	const struct kn_memory_need *m = &a->memory;
	json_t *root = json_object(), *mem = json_object(),
	       *opts = json_array(), *warns = json_array();

	json_object_set_new(root, "phase", json_string(kn_phase_name(req->phase)));
	json_object_set_new(root, "workload",
			    json_string(kn_workload_name(req->workload)));
	json_object_set_new(root, "preset", preset ? json_string(preset)
						   : json_null());
	json_object_set_new(root, "params", json_real(req->params));
	json_object_set_new(root, "dtype", json_string(req->dtype));
	json_object_set_new(root, "family", json_pack(
		"{s:b, s:s, s:s, s:b, s:s}", "gpu", a->family.gpu,
		"preferred", kn_family_class_name(a->family.preferred),
		"alternative", kn_family_class_name(a->family.alternative),
		"infiniband", a->family.infiniband,
		"recommendation", a->family.text));
	json_object_set_new(mem, "bytes_per_param", json_real(m->bytes_per_param));
	json_object_set_new(mem, "weights_gb", json_real(m->weights_gb));
	if (req->phase != KN_PHASE_INFER) {
		json_object_set_new(mem, "train_bytes_per_param",
				    json_real(m->train_bytes_per_param));
		json_object_set_new(mem, "gradients_gb", json_real(m->gradients_gb));
		json_object_set_new(mem, "optimizer_gb", json_real(m->optimizer_gb));
		json_object_set_new(mem, "activations_gb",
				    json_real(m->activations_gb));
		json_object_set_new(mem, "activations_share",
				    json_real(KN_TRAIN_ACTIVATION_SHARE));
	} else {
		json_object_set_new(mem, "layers", json_integer(m->layers));
		json_object_set_new(mem, "hidden", json_integer(m->hidden));
		json_object_set_new(mem, "shape_estimated",
				    json_boolean(m->shape_estimated));
		json_object_set_new(mem, "context", json_integer(m->context));
		json_object_set_new(mem, "batch", json_integer(m->batch));
		json_object_set_new(mem, "kv_bytes", json_real(m->kv_bytes));
		json_object_set_new(mem, "kv_cache_gb", json_real(m->kv_cache_gb));
		json_object_set_new(mem, "headroom_gb", json_real(m->headroom_gb));
		json_object_set_new(mem, "headroom_share",
				    json_real(KN_INFER_HEADROOM_SHARE));
	}
	json_object_set_new(mem, "total_gb", json_real(m->total_gb));
	json_object_set_new(root, "memory", mem);
	for (int i = 0; i < a->n_options; i++) {
		const struct kn_advice_option *o = &a->options[i];
		json_t *prices = json_object(), *j;

		for (int p = 0; p < KN_PRICINGS; p++)
			json_object_set_new(prices, kn_pricing_name(p), json_pack(
				"{s:o, s:o}", "usd_hour", price_json(o->usd_hr[p]),
				"usd_month", price_json(o->usd_hr[p] < 0 ? -1 :
					o->usd_hr[p] * KN_HOURS_PER_MONTH)));
		j = json_pack("{s:s, s:s, s:o, s:f, s:i, s:i, s:f, s:f, s:b, "
			      "s:b, s:o}",
			      "size", o->vm->size, "family", o->vm->family,
			      "gpu", o->vm->gpu_name[0] ? json_string(o->vm->gpu_name)
					  : json_null(), "gpus_per_vm", o->vm->gpus,
			      "gpus_used", o->gpus_used, "nodes", o->nodes,
			      "need_per_vm_gb", o->need_per_vm_gb,
			      "capacity_gb", o->capacity_gb,
			      "infiniband", o->vm->infiniband,
			      "over_budget", o->over_budget, "prices", prices);
		if (o->tokens_per_s > 0)
			json_object_set_new(j, "tokens_per_s_per_vm",
					    json_real(o->tokens_per_s));
		json_array_append_new(opts, j);
	}
	json_object_set_new(root, "options", opts);
	for (int i = 0; i < a->n_notes; i++)
		json_array_append_new(warns, json_pack(
			"{s:s, s:o, s:s}", "code",
			kn_advice_warning_name(a->notes[i].code), "size",
			a->notes[i].size[0] ? json_string(a->notes[i].size)
					    : json_null(),
			"message", a->notes[i].message));
	json_object_set_new(root, "warnings", warns);
	json_object_set_new(root, "hours_per_month", json_real(KN_HOURS_PER_MONTH));
	if (req->throughput > 0) {
		json_object_set_new(root, "throughput", json_real(req->throughput));
		json_object_set_new(root, "decode_efficiency",
				    json_real(KN_DECODE_EFFICIENCY));
	}
	return root;
}

/* 7e9 as "7B", 3.5e8 as "350M". */
static void format_params(double n, char *buf, size_t len)
{
	if (n >= 1e12)
		snprintf(buf, len, "%.4gT", n / 1e12);
	else if (n >= 1e9)
		snprintf(buf, len, "%.4gB", n / 1e9);
	else if (n >= 1e6)
		snprintf(buf, len, "%.4gM", n / 1e6);
	else
		snprintf(buf, len, "%.0f", n);
}

static void print_memory(const struct kn_advise_request *req,
			 const struct kn_memory_need *m)
{
	char params[32];

	format_params(req->params, params, sizeof(params));
	printf("Memory (GB = 1e9 bytes):\n");
	printf("  weights       %s params x %g bytes (%s) = %.1f GB\n",
	       params, m->bytes_per_param, req->dtype, m->weights_gb);
	if (req->phase != KN_PHASE_INFER) {
		printf("  training      %g bytes/param (weights %g + gradients %g "
		       "+ fp32 master and Adam m, v) = %.1f GB\n",
		       m->train_bytes_per_param, m->bytes_per_param,
		       m->bytes_per_param,
		       m->weights_gb + m->gradients_gb + m->optimizer_gb);
		printf("  activations   +%.0f%% = %.1f GB\n",
		       KN_TRAIN_ACTIVATION_SHARE * 100, m->activations_gb);
	} else {
		printf("  KV cache      2 x %d layers x %d hidden x %d context x "
		       "%d batch x %g bytes = %.1f GB%s\n", m->layers, m->hidden,
		       m->context, m->batch, m->kv_bytes, m->kv_cache_gb,
		       m->shape_estimated ? " (layers and hidden estimated "
					    "from the parameter count)" : "");
		printf("  headroom      +%.0f%% = %.1f GB\n",
		       KN_INFER_HEADROOM_SHARE * 100, m->headroom_gb);
	}
	printf("  total         %.1f GB\n", m->total_gb);
}

static void print_advice(const struct kn_advise_request *req,
			 const struct kn_advice *a)
{
	static const char *const headers[] = {
		"SIZE", "GPU", "GPUS", "NODES", "NEED/VM", "HAS/VM", "ON-DEMAND",
		"SPOT", "RESERVED-1Y", "RESERVED-3Y", NULL};
	struct cli_table *t;
	char cell[64];

	printf("Family: %s\n", a->family.text);
	print_memory(req, &a->memory);
	if (a->n_options) {
		printf("\nCheapest sizes that fit (%s%s; a month is %.0f h):\n",
		       a->family.infiniband ? "InfiniBand first, then " : "",
		       req->interruptible ? "by spot price where known"
					  : "by on-demand price",
		       KN_HOURS_PER_MONTH);
		t = cli_table_new(headers);
		for (int i = 0; i < a->n_options; i++) {
			const struct kn_advice_option *o = &a->options[i];

			cli_table_cell(t, o->vm->size);
			cli_table_cell(t, o->vm->gpus > 0 ? o->vm->gpu_name : "CPU");
			if (o->vm->gpus > 0)
				cli_table_cellf(t, "%d of %g", o->gpus_used,
						o->vm->gpus);
			else
				cli_table_cell(t, "—");
			cli_table_cellf(t, "%d", o->nodes);
			cli_table_cellf(t, "%.1f GB", o->need_per_vm_gb);
			cli_table_cellf(t, "%.1f GB", o->capacity_gb);
			for (int p = 0; p < KN_PRICINGS; p++) {
				price_cell(cell, sizeof(cell), o->usd_hr[p]);
				cli_table_cell(t, cell);
			}
		}
		cli_table_print(t, stdout, 2);
		cli_table_free(t);
		if (a->options[0].tokens_per_s > 0)
			printf("Decode throughput per VM: %.0f%% of the GPUs' "
			       "memory bandwidth x batch / (weights + KV cache) "
			       "bytes; %s: %.0f tokens/s.\n",
			       KN_DECODE_EFFICIENCY * 100,
			       a->options[0].vm->size, a->options[0].tokens_per_s);
	}
	for (int i = 0; i < a->n_notes; i++)
		fprintf(stderr, "warning: %s\n", a->notes[i].message);
}

/* The request the flags describe, each checked (its numbers and
   switches already in it; a preset's size is read later); CLI_GO, or
   the usage error. */
static int request_from_flags(struct cli_ctx *ctx,
			      const struct advise_flags *f,
			      struct kn_advise_request *req)
{
	struct kn_error err;
	int rc;

	if (!f->phase)
		return cli_usage_error(ctx, "--phase is required (train, "
				       "finetune, infer)");
	if (kn_phase_parse(f->phase, &req->phase, &err) < 0)
		return cli_usage_error(ctx, "--phase: %s", err.message);
	if (kn_workload_parse(f->workload ? f->workload : "generative",
			      &req->workload, &err) < 0)
		return cli_usage_error(ctx, "--workload: %s", err.message);
	if (f->preset && f->params)
		return cli_usage_error(ctx, "--preset and --params: give one");
	if (!f->preset && !f->params)
		return cli_usage_error(ctx, "--params N (such as 7B) or "
				       "--preset NAME is required");
	if (req->nodes && f->throughput)
		return cli_usage_error(ctx, "--nodes and --throughput: give "
				       "one");
	if (f->params) {
		if (kn_parse_params(f->params, &req->params, &err) < 0)
			return cli_usage_error(ctx, "--params: %s", err.message);
		req->dtype = f->dtype ? f->dtype : "bf16";
	}
	if (f->dtype && kn_dtype_bytes(f->dtype, &(double){0}, &err) < 0)
		return cli_usage_error(ctx, "--dtype: %s", err.message);
	if (f->throughput &&
	    (rc = number_flag(ctx, "throughput", f->throughput,
			      &req->throughput)) != CLI_GO)
		return rc;
	if (f->budget &&
	    (rc = number_flag(ctx, "budget", f->budget,
			      &req->budget_usd_month)) != CLI_GO)
		return rc;
	if ((req->layers > 0) != (req->hidden > 0))
		return cli_usage_error(ctx, "--layers and --hidden go together");
	if (req->max_options > KN_ADVISE_OPTIONS_MAX)
		return cli_usage_error(ctx, "--options: at most %d",
				       KN_ADVISE_OPTIONS_MAX);
	return CLI_GO;
}

static int cmd_advise(struct cli_ctx *ctx, int argc, char **argv)
{
	struct advise_flags f = {.phase = NULL, .workload = NULL};
	struct kn_advise_request req = {0};
	const struct cli_flag flags[] = {
		{"phase", 0, CLI_FLAG_STRING, &f.phase},
		{"workload", 0, CLI_FLAG_STRING, &f.workload},
		{"params", 0, CLI_FLAG_STRING, &f.params},
		{"dtype", 0, CLI_FLAG_STRING, &f.dtype},
		{"preset", 0, CLI_FLAG_STRING, &f.preset},
		{"nodes", 0, CLI_FLAG_COUNT, &req.nodes},
		{"throughput", 0, CLI_FLAG_STRING, &f.throughput},
		{"interruptible", 0, CLI_FLAG_BOOL, &req.interruptible},
		{"checkpoints", 0, CLI_FLAG_BOOL, &req.checkpoints},
		{"budget", 0, CLI_FLAG_STRING, &f.budget},
		{"context", 0, CLI_FLAG_COUNT, &req.context},
		{"batch", 0, CLI_FLAG_COUNT, &req.batch},
		{"layers", 0, CLI_FLAG_COUNT, &req.layers},
		{"hidden", 0, CLI_FLAG_COUNT, &req.hidden},
		{"options", 0, CLI_FLAG_COUNT, &req.max_options},
		{"catalog", 0, CLI_FLAG_STRING, &f.catalog},
		{NULL, 0, 0, NULL},
	};
	struct kn_model_presets *presets = NULL;
	char *data_dir = NULL;
	struct kn_catalog *cat = NULL;
	struct kn_advice *advice = NULL;
	struct kn_error err;
	int rc;

	if ((rc = cli_parse(ctx, argc, argv, flags, NULL, NULL)) != CLI_GO ||
	    (rc = cli_check_output(ctx)) != CLI_GO)
		return rc;
	if ((rc = request_from_flags(ctx, &f, &req)) != CLI_GO)
		return rc;

	if (f.preset) {
		const struct kn_model_preset *p;

		if (kn_model_presets_load_shipped(&presets, &err) < 0) {
			rc = cli_fail(ctx, "%s", err.message);
			goto out;
		}
		if (!(p = kn_model_preset_find(presets, f.preset))) {
			rc = cli_usage_error(ctx, "--preset: no preset \"%s\" "
					     "(see model-presets.csv in %s)",
					     f.preset, data_dir = kn_data_dir());
			goto out;
		}
		req.params = p->parameters_b * 1e9;
		req.dtype = f.dtype ? f.dtype : p->dtype;
	}
	cat = kn_catalog_new();
	if (kn_catalog_load_shipped(cat, &err) < 0) {
		rc = cli_fail(ctx, "%s", err.message);
		goto out;
	}
	if (f.catalog && kn_catalog_load(cat, f.catalog, &err) < 0) {
		rc = cli_fail(ctx, "--catalog: %s", err.message);
		goto out;
	}
	if (req.throughput > 0 && (rc = add_bandwidths(ctx, cat)) != CLI_GO)
		goto out;
	advice = kn_xcalloc(1, sizeof(*advice));
	if (kn_advise(cat, &req, advice, &err) < 0) {
		rc = cli_usage_error(ctx, "--%s: %s", err.field, err.message);
		goto out;
	}
	if (cli_want_json(ctx)) {
		json_t *j = advice_json(&req, advice, f.preset);

		cli_print_data(ctx, j);
		json_decref(j);
	} else {
		print_advice(&req, advice);
	}
	rc = advice->n_options ? CLI_EXIT_OK : CLI_EXIT_FAIL;
out:
	free(advice);
	kn_catalog_free(cat);
	kn_model_presets_free(presets);
	free(data_dir);
	return rc;
}
