/*
 * Unit tests for deployment specs and model presets: each bad spec with
 * its exact message (file:line:column, field path), a full good spec
 * field by field, presets and what overrides them, the preset table's
 * computed GPUs and its errors, and the job form a replica is stored in.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/tests/testmain.h"
#include "spec/spec.h"
#include "spec_cases.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* The smallest valid deployment; bad cases add lines from line 5 on. */
#define BASE "kind: Deployment\nname: chat\nmodel: /m\ncommand: [srv]\n"

/* A deployment of a registry alias, its revalidate: from line 6 on. */
#define RV_BASE                                                        \
	"kind: Deployment\nname: chat\nmodel: gpt@prod\ncommand: [srv]\n" \
	"revalidate:\n"

static struct kn_model_presets *presets;

static int load_presets(void **state)
{
	struct kn_error err;

	(void)state;
	return kn_model_presets_load(KN_TEST_DATA_DIR "/model-presets.csv", &presets, &err);
}

static int free_presets(void **state)
{
	(void)state;
	kn_model_presets_free(presets);
	return 0;
}

static const struct bad_case bad_cases[] = {
	{"kind: Deployment\nname: chat\ncommand: [srv]\n", "model",
	 "d.yaml:1:1: missing required field \"model\" in deployment"},
	{BASE "replica: 2\n", "replica",
	 "d.yaml:5:1: unknown field \"replica\" in deployment; did you mean "
	 "\"replicas\"?"},
	{BASE "replicas: -1\n", "replicas",
	 "d.yaml:5:11: replicas: must be an integer 0..64; got -1"},
	{BASE "replicas: 65\n", "replicas",
	 "d.yaml:5:11: replicas: must be an integer 0..64; got 65"},
	{"kind: Deployment\nname: chat\nmodel: job:x\ncommand: [srv]\n",
	 "model",
	 "d.yaml:3:8: model: must be job:<id> with a job id such as job:12; "
	 "got \"job:x\""},
	{BASE "spread: region\n", "spread",
	 "d.yaml:5:9: spread: must be zone or fault_domain; got \"region\""},
	{BASE "spread: zone\nplacement:\n  spread: zone\n", "spread",
	 "d.yaml:5:9: spread: is given twice (also as placement.spread); "
	 "keep one"},
	{BASE "readiness:\n  period_s: 1\n", "readiness.path",
	 "d.yaml:6:3: missing required field \"path\" in readiness"},
	{BASE "readiness:\n  path: health\n", "readiness.path",
	 "d.yaml:6:9: readiness.path: must be an HTTP path starting with "
	 "'/', without spaces (e.g. /health); got \"health\""},
	{BASE "liveness:\n  path: /h\n  period_s: 0.01\n", "liveness.period_s",
	 "d.yaml:7:13: liveness.period_s: must be a number of seconds "
	 "0.05..86400 (e.g. 0.5 or 10); got 0.01"},
	{BASE "liveness:\n  path: /h\n  failure_threshold: 0\n",
	 "liveness.failure_threshold",
	 "d.yaml:7:22: liveness.failure_threshold: must be an integer "
	 "1..100; got 0"},
	{BASE "liveness:\n  path: /h\n  initial_delay: 3\n",
	 "liveness.initial_delay",
	 "d.yaml:7:3: unknown field \"initial_delay\" in liveness; did you "
	 "mean \"initial_delay_s\"?"},
	{BASE "fallback: chat\n", "fallback",
	 "d.yaml:5:11: fallback: must name another deployment, not this one "
	 "(chat)"},
	{BASE "fallback: Big Model\n", "fallback",
	 "d.yaml:5:11: fallback: must be another deployment's name (1 to 63 "
	 "characters: lowercase letters, digits, '.', '_' and '-'); got "
	 "\"Big Model\""},
	{BASE "limits:\n  rpm: lots\n", "limits.rpm",
	 "d.yaml:6:8: limits.rpm: must be an integer 0..1000000000; got "
	 "\"lots\""},
	{BASE "preset: \"\"\n", "preset",
	 "d.yaml:5:9: preset: must be a model preset's name; got an empty "
	 "string"},
	{BASE "preset: gpt-5\n", "preset",
	 "d.yaml:5:9: preset: unknown preset \"gpt-5\" (known: tiny-gpt, "
	 "phi-3-mini, mistral-7b, llama-3-8b, llama-3-8b-int4, llama-3-70b, "
	 "llama-3-70b-a100)"},
	{BASE "backoff: 2m\nbackoff_max: 1m\n", "backoff_max",
	 "d.yaml:6:14: backoff_max: must be at least backoff (2m0s); got 1m0s"},
	{BASE "retries: 3\n", "retries",
	 "d.yaml:5:1: unknown field \"retries\" in deployment"},
	{"kind: Job\nname: chat\nmodel: /m\ncommand: [srv]\n", "kind",
	 "d.yaml:1:7: kind: must be \"Deployment\"; got \"Job\""},
	/* A Job spec is told it is one, not that its fields are unknown. */
	{"name: x\ntasks: 2\nkind: Job\ncommand: [x]\n", "kind",
	 "d.yaml:3:7: kind: must be \"Deployment\"; got \"Job\""},
	{"name: chat\nmodel: /m\ncommand: [srv]\n", "kind",
	 "d.yaml:1:1: missing required field \"kind\" in deployment "
	 "(kind: Deployment)"},
	/* revalidate: only for a registry alias, with a job and a limit. */
	{BASE "revalidate: {job: e.yaml, every: 1h, max: {loss: 2}}\n",
	 "revalidate",
	 "d.yaml:5:13: revalidate: needs model: NAME@ALIAS (a registry alias "
	 "to re-validate); model is \"/m\""},
	{RV_BASE "  job: e.yaml\n  every: 1h\n", "revalidate",
	 "d.yaml:6:3: revalidate: needs at least one threshold: max: "
	 "{METRIC: N} or min: {METRIC: N}"},
	{RV_BASE "  job: e.yaml\n  every: 1h\n  max: {loss: high}\n",
	 "revalidate.max.loss",
	 "d.yaml:8:15: revalidate.max.loss: must be a finite number; got "
	 "\"high\""},
	{RV_BASE "  job: e.yaml\n  every: 500ms\n  min: {acc: 0.9}\n",
	 "revalidate.every",
	 "d.yaml:7:10: revalidate.every: must be a duration from 1s to 366d "
	 "(e.g. 6h); got \"500ms\""},
	{RV_BASE "  job: e.yaml\n  every: 367d\n  min: {acc: 0.9}\n",
	 "revalidate.every",
	 "d.yaml:7:10: revalidate.every: must be a duration from 1s to 366d "
	 "(e.g. 6h); got \"367d\""},
	{RV_BASE "  every: 1h\n  min: {acc: 0.9}\n", "revalidate.job",
	 "d.yaml:6:3: missing required field \"job\" in revalidate"},
	{RV_BASE "  job: {command: 7}\n  every: 1h\n  min: {acc: 0.9}\n",
	 "revalidate.job.command",
	 "d.yaml:6:18: revalidate.job.command: must be a non-empty list of "
	 "strings (the program and its arguments), e.g. [\"python\", "
	 "\"train.py\"]; got 7"},
};

static void *parse_deployment(const char *yaml, const char *file, int *rc,
			      struct kn_error *err)
{
	struct kn_deployment_spec *d = NULL;

	*rc = kn_deployment_spec_parse(yaml, strlen(yaml), file, presets, &d,
				       err);
	return d;
}

static void test_bad(void **state)
{
	(void)state;
	expect_refused(bad_cases, ARRAY_SIZE(bad_cases), "d.yaml",
		       parse_deployment);
}

static void test_good(void **state)
{
	static const char yaml[] =
		BASE "replicas: 3\nspread: zone\npriority: 7\n"
		"env:\n  A: b\n"
		"readiness:\n  path: /ready\n  period_s: 0.2\n"
		"liveness:\n  path: /live\n  failure_threshold: 2\n"
		"  initial_delay_s: 1.5\n"
		"fallback: chat-small\nlimits:\n  rpm: 600\n  tpm: 100000\n";
	struct kn_deployment_spec *d = NULL;
	struct kn_error err;
	json_t *j;

	(void)state;
	assert_int_equal(kn_deployment_spec_parse(yaml, strlen(yaml), "d.yaml",
						  presets, &d, &err),
			 0);
	assert_string_equal(d->job.name, "chat");
	assert_string_equal(d->model, "/m");
	assert_int_equal(d->model_job, 0);
	assert_int_equal(d->replicas, 3);
	assert_int_equal(d->job.placement.spread, KN_SPREAD_ZONE);
	assert_int_equal(d->job.priority, 7);
	assert_int_equal(d->job.tasks, 1);
	assert_int_equal(d->job.backoff_ms, 1000);
	assert_true(d->readiness.set);
	assert_string_equal(d->readiness.path, "/ready");
	assert_int_equal(d->readiness.period_ms, 200);
	assert_int_equal(d->readiness.failure_threshold, 3);
	assert_string_equal(d->liveness.path, "/live");
	assert_int_equal(d->liveness.period_ms, 5000);
	assert_int_equal(d->liveness.failure_threshold, 2);
	assert_int_equal(d->liveness.initial_delay_ms, 1500);
	assert_string_equal(d->fallback, "chat-small");
	assert_int_equal(d->limit_rpm, 600);
	assert_int_equal(d->limit_tpm, 100000);
	j = kn_deployment_spec_to_json(d);
	assert_string_equal(json_string_value(json_object_get(j, "kind")),
			    "Deployment");
	assert_int_equal(json_integer_value(json_object_get(j, "replicas")),
			 3);
	assert_null(json_object_get(j, "retries"));
	json_decref(j);
	kn_deployment_spec_free(d);
}

static void test_model_job(void **state)
{
	static const char yaml[] = "kind: Deployment\nname: c\nmodel: job:42\n"
				   "command: [s]\nreplicas: 0\n";
	struct kn_deployment_spec *d = NULL;
	struct kn_error err;

	(void)state;
	assert_int_equal(kn_deployment_spec_parse(yaml, strlen(yaml), "d.yaml",
						  NULL, &d, &err),
			 0);
	assert_int_equal(d->model_job, 42);
	assert_int_equal(d->replicas, 0);
	assert_false(d->readiness.set);
	kn_deployment_spec_free(d);
}

static struct kn_deployment_spec *parse_ok(const char *yaml)
{
	struct kn_deployment_spec *d = NULL;
	struct kn_error err;

	memset(&err, 0, sizeof(err));
	if (kn_deployment_spec_parse(yaml, strlen(yaml), "d.yaml", presets, &d,
				     &err) < 0)
		fail_msg("%s", err.message);
	return d;
}

static void test_revalidate(void **state)
{
	struct kn_deployment_spec *d;
	char *text;

	(void)state;
	d = parse_ok(RV_BASE "  job: {command: [sh, e.sh], env: {A: b}}\n"
			     "  every: 6h\n  max: {loss: 1.8}\n"
			     "  min: {acc: 0.5, f1: 1}\n  rollback: true\n");
	assert_non_null(d->revalidate);
	assert_null(d->revalidate->job_file);
	/* An inline job is named after the deployment. */
	assert_string_equal(d->revalidate->job->name, "chat-eval");
	assert_string_equal(d->revalidate->job->command[1], "e.sh");
	assert_int_equal(d->revalidate->every_ms, 6 * 3600 * 1000);
	assert_true(d->revalidate->rollback);
	text = json_dumps(d->revalidate->thresholds,
			  JSON_COMPACT | JSON_SORT_KEYS);
	assert_string_equal(text, "{\"max\":{\"loss\":1.8},\"min\":"
				  "{\"acc\":0.5,\"f1\":1.0}}");
	free(text);
	kn_deployment_spec_free(d);

	d = parse_ok(RV_BASE "  job: eval/e.yaml\n  every: 1s\n"
			     "  max: {loss: 2}\n");
	assert_string_equal(d->revalidate->job_file, "eval/e.yaml");
	assert_null(d->revalidate->job);
	assert_false(d->revalidate->rollback);
	kn_deployment_spec_free(d);

	d = parse_ok(BASE);
	assert_null(d->revalidate);
	kn_deployment_spec_free(d);
}

static void test_presets_fill_resources(void **state)
{
	static const struct {
		const char *yaml;
		int gpu_milli;
		const char *gpu_model; /* NULL: none */
	} cases[] = {
		/* 70.6B x 2 bytes x 1.2 = 169 GB over 72 usable GB each: 3,
		   so 4. */
		{BASE "preset: llama-3-70b\n", 4000, "H100-80GB"},
		{BASE "preset: llama-3-8b\n", 1000, "A10-24GB"},
		/* Explicit resources win, field by field. */
		{BASE "preset: llama-3-70b\nresources:\n  gpus: 8\n", 8000,
		 "H100-80GB"},
		{BASE "preset: llama-3-8b\nresources:\n"
		      "  gpu_model: H100-80GB\n",
		 1000, "H100-80GB"},
		/* The tiny example model runs on CPUs: memory, no GPU. */
		{BASE "preset: tiny-gpt\n", 0, NULL},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct kn_deployment_spec *d = parse_ok(cases[i].yaml);
		const struct kn_resources *r = &d->job.resources;

		assert_int_equal(r->gpu_milli, cases[i].gpu_milli);
		assert_int_equal(r->n_gpu_models, cases[i].gpu_model ? 1 : 0);
		if (cases[i].gpu_model)
			assert_string_equal(r->gpu_models[0],
					    cases[i].gpu_model);
		else
			assert_true(r->memory_bytes >= 512LL * 1024 * 1024);
		kn_deployment_spec_free(d);
	}
}

static void test_preset_table(void **state)
{
	const struct kn_model_preset *p;

	(void)state;
	p = kn_model_preset_find(presets, "phi-3-mini");
	assert_non_null(p);
	assert_int_equal(p->gpus, 1);
	assert_string_equal(p->dtype, "fp16");
	p = kn_model_preset_find(presets, "llama-3-8b-int4");
	assert_int_equal(p->gpus, 1);
	assert_true(p->memory_gb > 4.8 && p->memory_gb < 4.9);
	assert_null(kn_model_preset_find(presets, "nope"));
}

static void test_preset_table_errors(void **state)
{
	static const struct {
		const char *csv, *message;
	} cases[] = {
		{"name,parameters_b,dtype,gpu_model\n",
		 "p.csv:1: no column \"kv_headroom\""},
		{"name,parameters_b,dtype,kv_headroom,gpu_model\n"
		 "a,7,fp16,0.2,A10-24GB\nb,7,fp12,0.2,A10-24GB\n",
		 "p.csv:3: dtype: must be fp32, fp16, bf16, fp8, int8 or int4; "
		 "got \"fp12\""},
		{"name,parameters_b,dtype,kv_headroom,gpu_model\n"
		 "a,-1,fp16,0.2,A10-24GB\n",
		 "p.csv:2: parameters_b: must be a number of billions above 0 "
		 "and at most 100000; got \"-1\""},
		{"name,parameters_b,dtype,kv_headroom,gpu_model\n"
		 "a,4e123,fp16,0.2,\n",
		 "p.csv:2: parameters_b: must be a number of billions above 0 "
		 "and at most 100000; got \"4e123\""},
		{"name,parameters_b,dtype,kv_headroom,gpu_model\n"
		 "a,7,fp16,0.2,A10\n",
		 "p.csv:2: gpu_model: must name its memory like A100-80GB; got "
		 "\"A10\""},
		{"name,parameters_b,dtype,kv_headroom,gpu_model\n"
		 "a,400,fp16,0.2,T4-16GB\n",
		 "p.csv:2: gpu_model: cannot hold the model on one machine (more "
		 "than 8 GPUs); got \"T4-16GB\""},
		{"name,parameters_b,dtype,kv_headroom,gpu_model\n"
		 "a,7,fp16,0.2,A10-24GB\na,8,fp16,0.2,A10-24GB\n",
		 "p.csv:3: name: appears twice; got \"a\""},
		{"name,parameters_b,dtype,kv_headroom,gpu_model\na,7,fp16\n",
		 "p.csv:2: the row has no \"kv_headroom\" column"},
		{"name,parameters_b,dtype,kv_headroom,gpu_model\n"
		 "\"a, quoted\",7,fp16,0.2,A10-24GB\nb,\"7,fp16\n",
		 "p.csv:3:3: a quoted field is not closed"},
	};

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct kn_model_presets *p = NULL;
		struct kn_error err;

		memset(&err, 0, sizeof(err));
		assert_int_not_equal(kn_model_presets_parse(cases[i].csv,
							    strlen(cases[i].csv),
							    "p.csv", &p, &err),
				     0);
		if (strcmp(err.message, cases[i].message) != 0)
			fail_msg("case %zu: got %s", i, err.message);
		assert_null(p);
	}
}

/* A replica's job text parses back to the same job, under its name. */
static void test_job_input_roundtrip(void **state)
{
	static const char job_yaml[] =
		"kind: Job\nname: j\ncommand: [python, s.py, '']\n"
		"env: {A: '1'}\nworkdir: /w\n"
		"resources: {gpus: 0.1, cpus: 1.5, memory: 2Gi, gpu_model: "
		"[A100-80GB, H100-80GB], sharing: mps}\n"
		"tasks: 2\nretries: 3\nbackoff: 1500ms\npriority: 9\n"
		"preemptible: true\ntimeout: 1h\n"
		"checkpoint: {every: 5m, keep: 2, signal: USR1, store: "
		"file:///b}\n"
		"placement:\n  selector: {zone: '1'}\n  tolerations:\n"
		"    - {key: spot, operator: Exists}\n    - {key: k, value: v, "
		"effect: NoSchedule}\n  spread: fault_domain\n  affinity:\n"
		"    required: [{key: sku, operator: In, values: [a, b]}]\n"
		"    preferred: [{key: z, operator: Exists, weight: 5}]\n";
	struct kn_job_spec *a = NULL, *b = NULL;
	struct kn_error err;
	json_t *ja, *jb;
	char *text;

	(void)state;
	assert_int_equal(kn_job_spec_parse(job_yaml, strlen(job_yaml), "j.yaml",
					   &a, &err),
			 0);
	text = kn_job_spec_to_input_text(a, "j-0");
	if (kn_job_spec_parse(text, strlen(text), "text", &b, &err) < 0)
		fail_msg("%s\n%s", err.message, text);
	ja = kn_job_spec_to_json(a);
	jb = kn_job_spec_to_json(b);
	assert_string_equal(json_string_value(json_object_get(jb, "name")),
			    "j-0");
	json_object_set_new(jb, "name", json_string("j"));
	if (!json_equal(ja, jb)) {
		char *x = json_dumps(ja, JSON_SORT_KEYS);
		char *y = json_dumps(jb, JSON_SORT_KEYS);
		fail_msg("differ:\n%s\n%s", x, y);
	}
	json_decref(ja);
	json_decref(jb);
	free(text);
	kn_job_spec_free(a);
	kn_job_spec_free(b);
}

static void test_kind(void **state)
{
	(void)state;
	assert_true(kn_spec_name_valid("chat-small.v2"));
	assert_false(kn_spec_name_valid("Chat"));
	assert_false(kn_spec_name_valid(""));
	assert_false(kn_spec_name_valid(NULL));
	assert_string_equal(kn_spec_kind(BASE, strlen(BASE)), "Deployment");
	assert_string_equal(kn_spec_kind("kind: Job\n", 10), "Job");
	assert_null(kn_spec_kind("kind: Pod\n", 10));
	assert_null(kn_spec_kind("[a, b\n", 6));
	/* Invalid UTF-8 in a directive hangs libfyaml 0.7.12: refused first. */
	assert_null(kn_spec_kind("%m\xef\nkind: Job\n", 14));
}

KN_TEST_MAIN(load_presets, free_presets,
	cmocka_unit_test(test_bad),
	cmocka_unit_test(test_good),
	cmocka_unit_test(test_model_job),
	cmocka_unit_test(test_revalidate),
	cmocka_unit_test(test_presets_fill_resources),
	cmocka_unit_test(test_preset_table),
	cmocka_unit_test(test_preset_table_errors),
	cmocka_unit_test(test_job_input_roundtrip),
	cmocka_unit_test(test_kind))
