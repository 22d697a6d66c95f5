/*
 * Unit tests for cost: the catalog (parsing, prices, replacement by size,
 * bad cells named by file:line:column and column), Azure's recommendation
 * table row by row, the memory arithmetic on known numbers, cheapest-fit
 * selection on a small catalog, each warning, and the shipped data files.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/tests/testmain.h"
#include "cost/cost.h"

#define HEADER "family,size,status,gpu_model,gpu_count,gpu_mem_per_gpu_gb," \
	"vcpus,ram_gib,infiniband,payg_linux_usd_hr,spot_usd_hr,ri_1y_usd_hr," \
	"ri_3y_usd_hr,source\n"

/* Line 2's quoted source spans two lines, so A100x1 is on line 4. */
static const char FIXTURE[] = HEADER
	"NC_T4,T4x1,GA,NVIDIA T4,1,16,4,28,no,0.5,0.06,,,\"a\ntwo-line source\"\n"
	"NC_A100,A100x1,GA,NVIDIA A100 80GB PCIe,1,80,24,220,no,3.5,0.45,2.4,1.4,x\n"
	"NC_A100,A100x2,GA,NVIDIA A100 80GB PCIe,2,80,48,440,no,7,0.9,,,x\n"
	"ND_H100,H100x8,GA,NVIDIA H100 80GB SXM5,8,80,96,1900,\"yes, GPUDirect RDMA\",98,,63,43,x\n"
	"NC_OLD,V100x1,RETIRED 2025-09-30,NVIDIA V100 16GB,1,16,6,112,no,0.1,,,,x\n"
	"NV_A10,A10x1,GA,NVIDIA A10,1,24,36,440,no,0.2,,,,x\n"
	"NV_A10,A10share,GA,NVIDIA A10,1/6,4,6,55,no,,,,,x\n"
	"Esv5,E8,GA,,0,,8,64,no,,,,,x\n"
	"Fsv2,F8,GA,,,,8,16,,0.3,,,,x\n";

static struct kn_catalog *fixture_catalog(void)
{
	struct kn_catalog *c = kn_catalog_new();
	struct kn_error err;

	assert_int_equal(kn_catalog_parse(c, FIXTURE, strlen(FIXTURE),
					  "fixture.csv", &err), 0);
	return c;
}

static void test_catalog(void **state)
{
	struct kn_catalog *c = fixture_catalog();
	const struct kn_vm_size *s;
	double usd;

	(void)state;
	assert_int_equal(kn_catalog_count(c), 9);
	s = kn_catalog_find(c, "a100X1");
	assert_non_null(s);
	assert_string_equal(s->gpu_name, "A100-80GB");
	assert_true(s->gpus == 1 && s->gpu_mem_total_gb == 80);
	assert_true(kn_vm_size_price(s, KN_PRICING_ON_DEMAND, &usd) && usd == 3.5);
	assert_true(kn_vm_size_price(s, KN_PRICING_SPOT, &usd) && usd == 0.45);
	assert_true(kn_vm_size_price(s, KN_PRICING_RESERVED_1Y, &usd) && usd == 2.4);
	assert_true(kn_vm_size_price(s, KN_PRICING_RESERVED_3Y, &usd) && usd == 1.4);
	s = kn_catalog_find(c, "A100x2");
	assert_false(kn_vm_size_price(s, KN_PRICING_RESERVED_1Y, &usd));
	assert_true(kn_vm_size_gpu_price(s, KN_PRICING_ON_DEMAND, &usd) && usd == 3.5);
	s = kn_catalog_find(c, "H100x8");
	assert_true(s->infiniband && s->gpu_mem_total_gb == 640);
	assert_false(kn_vm_size_price(s, KN_PRICING_SPOT, &usd));
	assert_true(kn_catalog_find(c, "V100x1")->retired);
	s = kn_catalog_find(c, "A10share");
	assert_true(fabs(s->gpus - 1.0 / 6) < 1e-12);
	assert_string_equal(s->gpu_name, "A10-24GB"); /* a sixth of 24 GB */
	assert_true(s->gpu_mem_total_gb == 4);
	s = kn_catalog_find(c, "F8");
	assert_true(s->gpus == 0 && !s->infiniband && s->gpu_name[0] == '\0');
	assert_false(kn_vm_size_gpu_price(s, KN_PRICING_ON_DEMAND, &usd));
	assert_null(kn_catalog_find(c, "nope"));
	assert_null(kn_catalog_at(c, 9));
	kn_catalog_free(c);
}

static void test_pricing_names(void **state)
{
	enum kn_pricing p;
	struct kn_error err;

	(void)state;
	for (int i = 0; i < KN_PRICINGS; i++) {
		assert_int_equal(kn_pricing_parse(kn_pricing_name(i), &p, &err), 0);
		assert_int_equal(p, i);
	}
	assert_int_equal(kn_pricing_parse("ondemand", &p, &err), -EINVAL);
	assert_string_equal(err.field, "pricing");
}

static void test_catalog_override(void **state)
{
	static const char mine[] = HEADER
		"NC_A100,a100x1,,NVIDIA A100 80GB PCIe,1,80,24,220,no,2.0,,,,negotiated\n"
		"onprem,box1,,NVIDIA L40S,1,48,64,512,no,0.8,,,,our rack\n";
	struct kn_catalog *c = fixture_catalog();
	const struct kn_vm_size *s;
	struct kn_error err;
	double usd;

	(void)state;
	assert_int_equal(kn_catalog_parse(c, mine, strlen(mine), "mine.csv",
					  &err), 0);
	assert_int_equal(kn_catalog_count(c), 10);
	s = kn_catalog_find(c, "A100x1");
	assert_ptr_equal(s, kn_catalog_at(c, 1)); /* replaced in place */
	assert_true(kn_vm_size_price(s, KN_PRICING_ON_DEMAND, &usd) && usd == 2.0);
	assert_false(kn_vm_size_price(s, KN_PRICING_SPOT, &usd));
	s = kn_catalog_find(c, "box1");
	assert_non_null(s);
	assert_int_equal(kn_vm_size_class(s), KN_CLASS_GPU_OTHER);
	kn_catalog_free(c);
}

/* The 1-based column where field i of an unquoted row begins. */
static int column_of(const char *row, int field)
{
	int col = 1;

	for (const char *p = row; field > 0 && *p; p++, col++)
		if (*p == ',')
			field--;
	return col;
}

static void test_catalog_errors(void **state)
{
	static const struct {
		const char *row;
		int field;          /* index of the bad cell in row */
		const char *column; /* err.field */
		const char *why;
	} cases[] = {
		{"NC,s1,GA,NVIDIA T4,x,16,4,28,no,1,,,", 4, "gpu_count", "not a GPU count"},
		{"NC,s1,GA,NVIDIA T4,2/1,16,4,28,no,1,,,", 4, "gpu_count", "not a GPU count"},
		{"NC,s1,GA,NVIDIA T4,65,16,4,28,no,1,,,", 4, "gpu_count", "not a GPU count"},
		{"NC,s1,GA,NVIDIA T4,1,,4,28,no,1,,,", 5, "gpu_mem_per_gpu_gb", "positive number"},
		{"NC,s1,GA,,1,16,4,28,no,1,,,", 3, "gpu_model", "empty"},
		{"NC,s1,GA,NVIDIA T4,1,16,1.5,28,no,1,,,", 6, "vcpus", "whole number"},
		{"NC,s1,GA,NVIDIA T4,1,16,4,-3,no,1,,,", 7, "ram_gib", "positive number"},
		{"NC,s1,GA,NVIDIA T4,1,16,4,28,maybe,1,,,", 8, "infiniband", "neither yes nor no"},
		{"NC,s1,GA,NVIDIA T4,1,16,4,28,no,abc,,,", 9, "payg_linux_usd_hr", "not a price"},
		{"NC,s1,GA,NVIDIA T4,1,16,4,28,no,1,-1,,", 10, "spot_usd_hr", "not a price"},
		{"NC,s1,GA,NVIDIA T4,1,16,4,28,no,1,,1e400,", 11, "ri_1y_usd_hr", "not a price"},
		{"NC,s1,GA,NVIDIA T4,1,16,4,28,no,1,,,nan", 12, "ri_3y_usd_hr", "not a price"},
		{"NC,,GA,NVIDIA T4,1,16,4,28,no,1,,,", 1, "size", "empty"},
		{"NC,s1,GA,NVIDIA T4,1,16,4,28", 0, "infiniband", "missing"},
	};
	static const char head[] = "family,size,status,gpu_model,gpu_count,"
		"gpu_mem_per_gpu_gb,vcpus,ram_gib,infiniband,payg_linux_usd_hr,"
		"spot_usd_hr,ri_1y_usd_hr,ri_3y_usd_hr\n";

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		struct kn_catalog *c = fixture_catalog();
		char text[512], want[128];
		struct kn_error err;

		/* A good row first, so the bad one is on line 3. */
		snprintf(text, sizeof(text), "%sNC,ok,GA,NVIDIA T4,1,16,4,28,no,"
			 "1,,,\n%s\n", head, cases[i].row);
		assert_int_equal(kn_catalog_parse(c, text, strlen(text),
						  "bad.csv", &err), -EINVAL);
		snprintf(want, sizeof(want), "bad.csv:3:%d: %s: ",
			 column_of(cases[i].row, cases[i].field),
			 cases[i].column);
		if (strncmp(err.message, want, strlen(want)) != 0 ||
		    !strstr(err.message, cases[i].why))
			fail_msg("case %zu: \"%s\", wanted \"%s...%s\"", i,
				 err.message, want, cases[i].why);
		assert_string_equal(err.field, cases[i].column);
		/* Nothing of the bad file was added. */
		assert_int_equal(kn_catalog_count(c), 9);
		assert_null(kn_catalog_find(c, "ok"));
		kn_catalog_free(c);
	}
}

static void test_catalog_header_and_lines(void **state)
{
	static const char no_col[] = "family,size,gpu_model,gpu_count\n";
	static const char multi[] = HEADER
		"NC,a,GA,NVIDIA T4,1,16,4,28,no,1,,,,\"one\ntwo\nthree\"\n"
		"NC,b,GA,NVIDIA T4,1,16,4,zero,no,1,,,x\n";
	struct kn_catalog *c = kn_catalog_new();
	struct kn_error err;

	(void)state;
	assert_int_equal(kn_catalog_parse(c, no_col, strlen(no_col), "h.csv",
					  &err), -EINVAL);
	assert_string_equal(err.message, "h.csv:1: no column \"gpu_mem_per_gpu_gb\"");
	/* The record before spans three lines: the bad row is line 5. */
	assert_int_equal(kn_catalog_parse(c, multi, strlen(multi), "m.csv",
					  &err), -EINVAL);
	assert_non_null(strstr(err.message, "m.csv:5:26: ram_gib:"));
	assert_true(kn_catalog_load(c, "/nonexistent/cat.csv", &err) < 0);
	assert_string_equal(err.message, "/nonexistent/cat.csv: No such file "
			    "or directory");
	assert_int_equal(kn_catalog_count(c), 0);
	kn_catalog_free(c);
}

/* Seed 004's table, row by row: phase x workload -> family. */
static void test_family_table(void **state)
{
	static const struct {
		enum kn_phase phase;
		enum kn_workload workload;
		int nodes;
		bool gpu;
		enum kn_family_class preferred, alternative;
		bool infiniband;
	} rows[] = {
		{KN_PHASE_TRAIN, KN_WORKLOAD_GENERATIVE, 1, true, KN_CLASS_ND, KN_CLASS_NC, false},
		{KN_PHASE_TRAIN, KN_WORKLOAD_COMPLEX, 1, true, KN_CLASS_ND, KN_CLASS_NC, false},
		{KN_PHASE_TRAIN, KN_WORKLOAD_SMALL, 1, false, KN_CLASS_CPU_MEMORY, KN_CLASS_CPU_MEMORY, false},
		{KN_PHASE_FINETUNE, KN_WORKLOAD_GENERATIVE, 1, true, KN_CLASS_ND, KN_CLASS_NC, false},
		{KN_PHASE_FINETUNE, KN_WORKLOAD_COMPLEX, 1, true, KN_CLASS_ND, KN_CLASS_NC, false},
		{KN_PHASE_FINETUNE, KN_WORKLOAD_SMALL, 1, false, KN_CLASS_CPU_MEMORY, KN_CLASS_CPU_MEMORY, false},
		{KN_PHASE_INFER, KN_WORKLOAD_GENERATIVE, 1, true, KN_CLASS_NC, KN_CLASS_ND, false},
		{KN_PHASE_INFER, KN_WORKLOAD_COMPLEX, 1, true, KN_CLASS_NC, KN_CLASS_ND, false},
		{KN_PHASE_INFER, KN_WORKLOAD_SMALL, 1, false, KN_CLASS_CPU_COMPUTE, KN_CLASS_CPU_COMPUTE, false},
		/* RDMA/InfiniBand only for multi-node training. */
		{KN_PHASE_TRAIN, KN_WORKLOAD_GENERATIVE, 4, true, KN_CLASS_ND, KN_CLASS_NC, true},
		{KN_PHASE_FINETUNE, KN_WORKLOAD_COMPLEX, 2, true, KN_CLASS_ND, KN_CLASS_NC, true},
		{KN_PHASE_INFER, KN_WORKLOAD_GENERATIVE, 4, true, KN_CLASS_NC, KN_CLASS_ND, false},
		{KN_PHASE_TRAIN, KN_WORKLOAD_SMALL, 4, false, KN_CLASS_CPU_MEMORY, KN_CLASS_CPU_MEMORY, false},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(rows) / sizeof(*rows); i++) {
		struct kn_family_advice a;

		kn_advise_family(rows[i].phase, rows[i].workload, rows[i].nodes, &a);
		if (strcmp(kn_family_class_name(a.preferred),
			   rows[i].phase == KN_PHASE_INFER ? (a.gpu ? "NC" :
			   "CPU compute-optimized") : (a.gpu ? "ND" :
			   "CPU memory-optimized")) != 0 ||
		    a.gpu != rows[i].gpu || a.preferred != rows[i].preferred ||
		    a.alternative != rows[i].alternative ||
		    a.infiniband != rows[i].infiniband || !a.text)
			fail_msg("row %zu (%s x %s, %d nodes)", i,
				 kn_phase_name(rows[i].phase),
				 kn_workload_name(rows[i].workload), rows[i].nodes);
	}
}

static void test_parse_inputs(void **state)
{
	static const struct {
		const char *text;
		double want; /* 0: an error */
	} params[] = {
		{"7B", 7e9}, {"7b", 7e9}, {"350M", 3.5e8}, {"1.5T", 1.5e12},
		{"125000", 125000}, {"70.6B", 70.6e9}, {"2K", 2000},
		{"", 0}, {"7X", 0}, {"-1B", 0}, {"0", 0}, {"B", 0}, {"7BB", 0},
		{"nan", 0}, {"1e20", 0},
	};
	enum kn_phase ph;
	enum kn_workload wl;
	struct kn_error err;
	double v;

	(void)state;
	for (size_t i = 0; i < sizeof(params) / sizeof(*params); i++) {
		int rc = kn_parse_params(params[i].text, &v, &err);

		if (params[i].want > 0 ? rc != 0 || fabs(v - params[i].want) > 1e-3
				       : rc != -EINVAL)
			fail_msg("params \"%s\"", params[i].text);
	}
	assert_string_equal(err.field, "params");
	assert_int_equal(kn_phase_parse("finetune", &ph, &err), 0);
	assert_int_equal(ph, KN_PHASE_FINETUNE);
	assert_int_equal(kn_phase_parse("serve", &ph, &err), -EINVAL);
	assert_string_equal(err.field, "phase");
	assert_int_equal(kn_workload_parse("small", &wl, &err), 0);
	assert_int_equal(wl, KN_WORKLOAD_SMALL);
	assert_int_equal(kn_workload_parse("tiny", &wl, &err), -EINVAL);
	assert_string_equal(err.field, "workload");
	assert_int_equal(kn_dtype_bytes("int4", &v, &err), 0);
	assert_true(v == 0.5);
	assert_int_equal(kn_dtype_bytes("fp64", &v, &err), -EINVAL);
	assert_string_equal(err.field, "dtype");
}

static void test_memory(void **state)
{
	struct kn_advise_request req = {.phase = KN_PHASE_TRAIN,
					.params = 7e9, .dtype = "bf16"};
	struct kn_memory_need m;
	struct kn_error err;

	(void)state;
	/* 7B in bf16: 14 GB of weights; Adam in mixed precision, 16
	   bytes/param: 112 GB; +20% activations: 134.4 GB. */
	assert_int_equal(kn_memory_need(&req, &m, &err), 0);
	assert_true(fabs(m.weights_gb - 14.0) < 1e-9);
	assert_true(fabs(m.weights_gb + m.gradients_gb + m.optimizer_gb - 112.0) < 1e-9);
	assert_true(fabs(m.optimizer_gb - 84.0) < 1e-9);
	assert_true(fabs(m.total_gb - 134.4) < 1e-9);
	/* fp32 training is the same 16 bytes/param. */
	req.dtype = "fp32";
	assert_int_equal(kn_memory_need(&req, &m, &err), 0);
	assert_true(fabs(m.weights_gb - 28.0) < 1e-9);
	assert_true(fabs(m.total_gb - 134.4) < 1e-9);
	req.dtype = "int4";
	assert_int_equal(kn_memory_need(&req, &m, &err), -EINVAL);
	assert_string_equal(err.field, "dtype");

	/* Inference with Llama-2-7B's shape: 32 layers, 4096 hidden; the KV
	   cache at 4096 tokens, batch 1, bf16 is 2 x 32 x 4096 x 4096 x 2 B. */
	req = (struct kn_advise_request){.phase = KN_PHASE_INFER, .params = 7e9,
		.dtype = "bf16", .layers = 32, .hidden = 4096};
	assert_int_equal(kn_memory_need(&req, &m, &err), 0);
	assert_false(m.shape_estimated);
	assert_true(fabs(m.kv_cache_gb - 2147483648.0 / 1e9) < 1e-9);
	assert_true(fabs(m.total_gb - (14.0 + 2.147483648) * 1.1) < 1e-9);
	req.batch = 8;
	req.context = 8192;
	assert_int_equal(kn_memory_need(&req, &m, &err), 0);
	assert_true(fabs(m.kv_cache_gb - 16 * 2.147483648) < 1e-9);
	/* int4 weights keep an fp16 KV cache. */
	req = (struct kn_advise_request){.phase = KN_PHASE_INFER, .params = 7e9,
		.dtype = "int4", .layers = 32, .hidden = 4096};
	assert_int_equal(kn_memory_need(&req, &m, &err), 0);
	assert_true(fabs(m.weights_gb - 3.5) < 1e-9 && m.kv_bytes == 2);
	/* The shape estimate: 7e9 / (12 x 128^2) = 35,603 = 32.9^3. */
	req = (struct kn_advise_request){.phase = KN_PHASE_INFER, .params = 7e9,
		.dtype = "fp16"};
	assert_int_equal(kn_memory_need(&req, &m, &err), 0);
	assert_true(m.shape_estimated && m.layers == 33 && m.hidden == 4224);
	assert_true(m.context == KN_DEFAULT_CONTEXT && m.batch == KN_DEFAULT_BATCH);
	req.layers = 32;
	assert_int_equal(kn_memory_need(&req, &m, &err), -EINVAL);
	assert_string_equal(err.field, "layers");
}

static bool has_note(const struct kn_advice *a, enum kn_advice_warning w,
		     const char *size)
{
	for (int i = 0; i < a->n_notes; i++)
		if (a->notes[i].code == w &&
		    (!size || !strcmp(a->notes[i].size, size)))
			return true;
	return false;
}

static void advise(const struct kn_catalog *c,
		   const struct kn_advise_request *req, struct kn_advice *a)
{
	struct kn_error err;

	if (kn_advise(c, req, a, &err) != 0)
		fail_msg("kn_advise: %s", err.message);
}

static void test_cheapest_fit(void **state)
{
	struct kn_catalog *c = fixture_catalog();
	struct kn_advice *a = calloc(1, sizeof(*a));
	struct kn_advise_request req = {.phase = KN_PHASE_TRAIN,
		.workload = KN_WORKLOAD_GENERATIVE, .params = 7e9, .dtype = "bf16"};

	(void)state;
	/* 134.4 GB: two A100 80GB, or the 8-GPU ND; not one A100. */
	advise(c, &req, a);
	assert_int_equal(a->n_options, 2);
	assert_string_equal(a->options[0].vm->size, "A100x2");
	assert_int_equal(a->options[0].gpus_used, 2);
	assert_int_equal(a->options[0].nodes, 1);
	assert_true(a->options[0].usd_hr[KN_PRICING_ON_DEMAND] == 7);
	assert_true(a->options[0].usd_hr[KN_PRICING_RESERVED_1Y] < 0);
	assert_string_equal(a->options[1].vm->size, "H100x8");
	assert_int_equal(a->options[1].gpus_used, 2);
	assert_int_equal(a->n_notes, 0);

	/* A 1B model for inference: the T4 is cheapest; the retired V100
	   (cheaper still) and the NV A10 (not in the table) are left out,
	   and the A100 after it earns a premium-GPU warning. */
	req = (struct kn_advise_request){.phase = KN_PHASE_INFER,
		.workload = KN_WORKLOAD_GENERATIVE, .params = 1e9, .dtype = "bf16"};
	advise(c, &req, a);
	assert_string_equal(a->options[0].vm->size, "T4x1");
	for (int i = 0; i < a->n_options; i++) {
		assert_string_not_equal(a->options[i].vm->size, "V100x1");
		assert_string_not_equal(a->options[i].vm->size, "A10x1");
		assert_true(a->options[i].vm->gpus > 0);
	}
	assert_string_equal(a->options[1].vm->size, "A100x1");
	assert_true(has_note(a, KN_WARN_PREMIUM_GPU, "A100x1"));
	assert_true(has_note(a, KN_WARN_PREMIUM_GPU, "H100x8"));
	assert_false(has_note(a, KN_WARN_PREMIUM_GPU, "T4x1"));
	req.max_options = 1;
	advise(c, &req, a);
	assert_int_equal(a->n_options, 1);
	/* 40B in bf16 for inference: 88 GB, two 80 GB GPUs; 180B (396 GB)
	   needs 5 of the ND's by memory and is served on 8. */
	req = (struct kn_advise_request){.phase = KN_PHASE_INFER,
		.params = 40e9, .dtype = "bf16", .layers = 1, .hidden = 1};
	advise(c, &req, a);
	assert_string_equal(a->options[0].vm->size, "A100x2");
	assert_int_equal(a->options[0].gpus_used, 2);
	req.params = 180e9; /* 396 GB */
	advise(c, &req, a);
	assert_string_equal(a->options[0].vm->size, "H100x8");
	assert_int_equal(a->options[0].gpus_used, 8);

	/* Small models on CPU: E series to train, F series to serve; the
	   unpriced E8 still listed. */
	req = (struct kn_advise_request){.phase = KN_PHASE_TRAIN,
		.workload = KN_WORKLOAD_SMALL, .params = 1e8, .dtype = "fp32"};
	advise(c, &req, a);
	assert_int_equal(a->n_options, 1);
	assert_string_equal(a->options[0].vm->size, "E8");
	assert_int_equal(a->options[0].gpus_used, 0);
	assert_true(a->options[0].usd_hr[KN_PRICING_ON_DEMAND] < 0);
	req.phase = KN_PHASE_INFER;
	advise(c, &req, a);
	assert_int_equal(a->n_options, 1);
	assert_string_equal(a->options[0].vm->size, "F8");
	free(a);
	kn_catalog_free(c);
}

static void test_multi_node_and_spot(void **state)
{
	struct kn_catalog *c = fixture_catalog();
	struct kn_advice *a = calloc(1, sizeof(*a));
	struct kn_advise_request req = {.phase = KN_PHASE_TRAIN,
		.workload = KN_WORKLOAD_GENERATIVE, .params = 7e9, .dtype = "bf16",
		.nodes = 2};

	(void)state;
	/* Two nodes share 134.4 GB: InfiniBand sizes first, then the
	   single A100 at 67.2 GB each, warned about. */
	advise(c, &req, a);
	assert_true(a->family.infiniband);
	assert_string_equal(a->options[0].vm->size, "H100x8");
	assert_int_equal(a->options[0].nodes, 2);
	assert_true(a->options[0].usd_hr[KN_PRICING_ON_DEMAND] == 196);
	assert_true(fabs(a->options[0].need_per_vm_gb - 67.2) < 1e-9);
	assert_string_equal(a->options[1].vm->size, "A100x1");
	assert_true(has_note(a, KN_WARN_NO_INFINIBAND, "A100x1"));
	assert_false(has_note(a, KN_WARN_NO_INFINIBAND, "H100x8"));
	assert_false(has_note(a, KN_WARN_SPOT_NO_CHECKPOINT, NULL));

	/* Interruptible: ranked by spot price; without checkpoints warned. */
	req.nodes = 0;
	req.interruptible = true;
	advise(c, &req, a);
	assert_true(has_note(a, KN_WARN_SPOT_NO_CHECKPOINT, NULL));
	assert_string_equal(a->options[0].vm->size, "A100x2");
	req.checkpoints = true;
	advise(c, &req, a);
	assert_false(has_note(a, KN_WARN_SPOT_NO_CHECKPOINT, NULL));
	/* Spot inference is what spot is for: no warning. */
	req = (struct kn_advise_request){.phase = KN_PHASE_INFER,
		.params = 1e9, .dtype = "bf16", .interruptible = true};
	advise(c, &req, a);
	assert_false(has_note(a, KN_WARN_SPOT_NO_CHECKPOINT, NULL));
	assert_string_equal(a->options[0].vm->size, "T4x1"); /* $0.06 spot */
	free(a);
	kn_catalog_free(c);
}

static void test_budget_and_no_fit(void **state)
{
	struct kn_catalog *c = fixture_catalog();
	struct kn_advice *a = calloc(1, sizeof(*a));
	struct kn_advise_request req = {.phase = KN_PHASE_TRAIN,
		.params = 7e9, .dtype = "bf16", .budget_usd_month = 1000};
	struct kn_error err;

	(void)state;
	/* $7/h x 730 h = $5,110 a month. */
	advise(c, &req, a);
	assert_true(a->options[0].over_budget && a->options[1].over_budget);
	assert_true(has_note(a, KN_WARN_OVER_BUDGET, "A100x2"));
	assert_non_null(strstr(a->notes[0].message, "$5110/month"));
	req.budget_usd_month = 6000;
	advise(c, &req, a);
	assert_false(a->options[0].over_budget);
	assert_true(a->options[1].over_budget);
	assert_false(has_note(a, KN_WARN_OVER_BUDGET, NULL));

	/* 100B parameters to train: 1,920 GB; the largest GPU size holds 640. */
	req = (struct kn_advise_request){.phase = KN_PHASE_TRAIN,
		.params = 100e9, .dtype = "bf16"};
	advise(c, &req, a);
	assert_int_equal(a->n_options, 0);
	assert_true(has_note(a, KN_WARN_NO_FIT, NULL));
	assert_string_equal(a->largest->size, "H100x8");
	assert_non_null(strstr(a->notes[0].message, "1920.0 GB"));
	assert_non_null(strstr(a->notes[0].message, "H100x8, has 640.0 GB"));
	/* Three nodes share it: 640 GB each fits. */
	req.nodes = 3;
	advise(c, &req, a);
	assert_int_equal(a->n_options, 1);
	assert_int_equal(a->options[0].nodes, 3);

	req.nodes = -1;
	assert_int_equal(kn_advise(c, &req, a, &err), -EINVAL);
	assert_string_equal(err.field, "nodes");
	req.nodes = 0;
	req.throughput = 100;
	assert_int_equal(kn_advise(c, &req, a, &err), -EINVAL);
	assert_string_equal(err.field, "throughput");
	free(a);
	kn_catalog_free(c);
}

static void test_throughput(void **state)
{
	struct kn_catalog *c = fixture_catalog();
	struct kn_advice *a = calloc(1, sizeof(*a));
	struct kn_advise_request req = {.phase = KN_PHASE_INFER,
		.params = 7e9, .dtype = "bf16", .layers = 32, .hidden = 4096,
		.throughput = 100};
	double per_vm;

	(void)state;
	for (size_t i = 0; i < kn_catalog_count(c); i++)
		if (!strncmp(kn_catalog_at(c, i)->size, "A100", 4))
			kn_catalog_set_bandwidth(c, i, 2039);
	/* One A100: 0.5 x 2039 GB/s / (14 + 2.147 GB) per token = 63.1
	   tokens/s, so 100 tokens/s take 2 VMs; two A100s in one VM double
	   it, for the same $7/h: the one VM is listed first. */
	advise(c, &req, a);
	per_vm = 0.5 * 2039 / (14.0 + 2.147483648);
	assert_string_equal(a->options[0].vm->size, "A100x2");
	assert_int_equal(a->options[0].nodes, 1);
	assert_int_equal(a->options[0].gpus_used, 2);
	assert_true(fabs(a->options[0].tokens_per_s - 2 * per_vm) < 1e-6);
	assert_string_equal(a->options[1].vm->size, "A100x1");
	assert_true(fabs(a->options[1].tokens_per_s - per_vm) < 1e-6);
	assert_int_equal(a->options[1].nodes, 2);
	assert_true(a->options[1].usd_hr[KN_PRICING_ON_DEMAND] == 7);
	/* The H100 size has no bandwidth figure here: left out, said so. */
	assert_int_equal(a->n_options, 2);
	assert_true(has_note(a, KN_WARN_NO_BANDWIDTH, "H100x8"));
	/* CPU sizes have no bandwidth figure: a small model cannot be sized
	   by throughput, and the notes say why. */
	req = (struct kn_advise_request){.phase = KN_PHASE_INFER,
		.workload = KN_WORKLOAD_SMALL, .params = 1e8, .dtype = "fp32",
		.throughput = 10};
	advise(c, &req, a);
	assert_int_equal(a->n_options, 0);
	assert_true(has_note(a, KN_WARN_NO_BANDWIDTH, "F8"));
	assert_true(has_note(a, KN_WARN_NO_FIT, NULL));
	req = (struct kn_advise_request){.phase = KN_PHASE_INFER,
		.params = 7e9, .dtype = "bf16", .layers = 32, .hidden = 4096,
		.throughput = 100};
	/* A batch of 8 makes each step yield 8 tokens. */
	req.batch = 8;
	advise(c, &req, a);
	assert_string_equal(a->options[0].vm->size, "A100x1");
	assert_true(fabs(a->options[0].tokens_per_s -
			 0.5 * 2039 * 8 / (14.0 + 8 * 2.147483648)) < 1e-6);
	assert_int_equal(a->options[0].nodes, 1);
	free(a);
	kn_catalog_free(c);
}

/* The shipped data: every row loads; a 7B bf16 training job needs at
   least 2 x 80 GB; the CPU sizes are there without prices. */
static void test_shipped_catalog(void **state)
{
	struct kn_catalog *c = kn_catalog_new();
	struct kn_advice *a = calloc(1, sizeof(*a));
	struct kn_advise_request req = {.phase = KN_PHASE_TRAIN,
		.params = 7e9, .dtype = "bf16"};
	const struct kn_vm_size *s;
	struct kn_error err;
	char path[1024];
	double usd;

	(void)state;
	if (kn_catalog_load(c, KN_TEST_DATA_DIR "/azure-gpu-skus.csv", &err) < 0 ||
	    kn_catalog_load(c, KN_TEST_DATA_DIR "/azure-cpu-skus.csv", &err) < 0)
		fail_msg("%s", err.message);
	assert_true(kn_catalog_count(c) > 20);
	s = kn_catalog_find(c, "Standard_ND96isr_H200_v5");
	assert_true(s && s->gpus == 8 && s->gpu_mem_total_gb == 8 * 141 &&
		    s->infiniband);
	assert_string_equal(s->gpu_name, "H200-141GB");
	assert_true(kn_vm_size_price(s, KN_PRICING_RESERVED_3Y, &usd) && usd == 42.22);
	assert_false(kn_vm_size_price(s, KN_PRICING_SPOT, &usd));
	s = kn_catalog_find(c, "Standard_E16s_v5");
	assert_true(s && s->gpus == 0 && s->vcpus == 16 && s->ram_gib == 128);
	assert_false(kn_vm_size_price(s, KN_PRICING_ON_DEMAND, &usd));
	assert_int_equal(kn_vm_size_class(s), KN_CLASS_CPU_MEMORY);
	assert_int_equal(kn_vm_size_class(kn_catalog_find(c, "Standard_F8s_v2")),
			 KN_CLASS_CPU_COMPUTE);
	assert_true(kn_catalog_find(c, "Standard_NC6s_v3")->retired);
	advise(c, &req, a);
	assert_string_equal(a->options[0].vm->size, "Standard_NC48ads_A100_v4");
	for (int i = 0; i < a->n_options; i++)
		assert_true(a->options[i].vm->gpu_mem_total_gb >= 2 * 80);
	/* The existing health fixture has the same columns. */
	snprintf(path, sizeof(path), "%s/skus.csv", getenv("KILN_TEST_FIXTURES"));
	assert_int_equal(kn_catalog_load(c, path, &err), 0);
	s = kn_catalog_find(c, "Test_2xH100");
	assert_true(s && s->gpus == 2 && s->infiniband);
	assert_int_equal(kn_vm_size_class(s), KN_CLASS_GPU_OTHER);
	assert_false(kn_vm_size_price(s, KN_PRICING_ON_DEMAND, &usd));
	free(a);
	kn_catalog_free(c);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_catalog),
	cmocka_unit_test(test_pricing_names),
	cmocka_unit_test(test_catalog_override),
	cmocka_unit_test(test_catalog_errors),
	cmocka_unit_test(test_catalog_header_and_lines),
	cmocka_unit_test(test_family_table),
	cmocka_unit_test(test_parse_inputs),
	cmocka_unit_test(test_memory),
	cmocka_unit_test(test_cheapest_fit),
	cmocka_unit_test(test_multi_node_and_spot),
	cmocka_unit_test(test_budget_and_no_fit),
	cmocka_unit_test(test_throughput),
	cmocka_unit_test(test_shipped_catalog))
