/*
 * Unit tests for workflow specs: a full pipeline read field by field, the
 * step order (needs first, file order among independent steps), and each
 * bad workflow with its exact message (file:line:column, field path):
 * unknown and self needs, cycles named step by step, duplicate names,
 * conditions and inputs that read steps not needed, step kinds.
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

static const char PIPELINE[] =
	"apiVersion: kiln/v1\n"
	"kind: Workflow\n"
	"name: gpt-pipeline\n"
	"on_failure: continue\n"
	"requires:\n"
	"  commands: [python3]\n"
	"steps:\n"
	"  - name: prepare\n"
	"    job: prepare.yaml\n"
	"  - name: train\n"
	"    needs: [prepare]\n"
	"    on_failure: retry\n"
	"    retries: 3\n"
	"    inputs: [prepare.outputs/data/train.bin, /data/vocab.txt,\n"
	"             \"azure://c/x.outputs/y\"]\n"
	"    requires:\n"
	"      gpus: {model: H100, count: 2}\n"
	"      driver: \"535.104\"\n"
	"      cuda: \"12.2\"\n"
	"      python_modules: [torch]\n"
	"      scratch: {path: /mnt/scratch, free: 10Gi}\n"
	"      store: true\n"
	"    job:\n"
	"      command: [python3, train.py]\n"
	"      tasks: 2\n"
	"      preemptible: true\n"
	"  - name: evaluate\n"
	"    needs: [train]\n"
	"    job: {kind: Job, name: eval-job, command: [python3, eval.py]}\n"
	"  - name: register\n"
	"    needs: [evaluate]\n"
	"    when: [\"evaluate.metrics.loss < 1.8\", \"train.outcome == "
	"succeeded\"]\n"
	"    register: {from: train, model: gpt-tiny, alias: staging,\n"
	"               signer: release}\n"
	"  - name: deploy\n"
	"    needs: [register]\n"
	"    deploy: {deployment: chat, from: register}\n";

static struct kn_workflow_spec *parse_ok(const char *yaml)
{
	struct kn_workflow_spec *spec = NULL;
	struct kn_error err;
	int rc = kn_workflow_spec_parse(yaml, strlen(yaml), "w.yaml", &spec,
					&err);

	if (rc != 0)
		fail_msg("unexpected error: %s", err.message);
	return spec;
}

static void test_pipeline(void **state)
{
	struct kn_workflow_spec *w = parse_ok(PIPELINE);
	const struct kn_workflow_step *st;

	(void)state;
	assert_string_equal(w->name, "gpt-pipeline");
	assert_int_equal(w->n_steps, 5);
	assert_int_equal(w->on_failure, KN_ON_FAILURE_CONTINUE);
	assert_true(w->requires.set);
	assert_int_equal(w->requires.n_commands, 1);

	st = kn_workflow_step_find(w, "prepare");
	assert_int_equal(st->kind, KN_STEP_JOB);
	assert_string_equal(st->job_file, "prepare.yaml");
	assert_null(st->job);
	assert_int_equal(st->on_failure, KN_ON_FAILURE_CONTINUE);
	assert_int_equal(st->retries, 1);

	st = kn_workflow_step_find(w, "train");
	assert_int_equal(st->on_failure, KN_ON_FAILURE_RETRY);
	assert_int_equal(st->retries, 3);
	assert_int_equal(st->n_inputs, 3);
	assert_string_equal(st->inputs[0].step, "prepare");
	assert_string_equal(st->inputs[0].path, "data/train.bin");
	assert_null(st->inputs[1].step);
	assert_string_equal(st->inputs[1].text, "/data/vocab.txt");
	assert_null(st->inputs[2].step); /* a URL, not a step's output */
	assert_true(st->requires.set);
	assert_string_equal(st->requires.gpu_model, "H100");
	assert_int_equal(st->requires.gpu_count, 2);
	assert_string_equal(st->requires.driver_min, "535.104");
	assert_string_equal(st->requires.cuda_min, "12.2");
	assert_string_equal(st->requires.python_modules[0], "torch");
	assert_string_equal(st->requires.scratch_path, "/mnt/scratch");
	assert_int_equal(st->requires.scratch_bytes, 10LL << 30);
	assert_true(st->requires.store);
	/* An inline job without kind or name takes the step's name. */
	assert_non_null(st->job);
	assert_string_equal(st->job->name, "train");
	assert_int_equal(st->job->tasks, 2);
	assert_true(st->job->preemptible);

	st = kn_workflow_step_find(w, "evaluate");
	assert_string_equal(st->job->name, "eval-job");

	st = kn_workflow_step_find(w, "register");
	assert_int_equal(st->kind, KN_STEP_REGISTER);
	assert_string_equal(st->from, "train");
	assert_string_equal(st->model, "gpt-tiny");
	assert_string_equal(st->alias, "staging");
	assert_string_equal(st->signer, "release");
	assert_int_equal(st->n_when, 2);
	assert_string_equal(st->when[0].step, "evaluate");
	assert_string_equal(st->when[0].metric, "loss");
	assert_int_equal(st->when[0].op, KN_CMP_LT);
	assert_true(st->when[0].number == 1.8);
	assert_string_equal(st->when[1].step, "train");
	assert_null(st->when[1].metric);
	assert_int_equal(st->when[1].op, KN_CMP_EQ);
	assert_string_equal(st->when[1].outcome, "succeeded");

	st = kn_workflow_step_find(w, "deploy");
	assert_int_equal(st->kind, KN_STEP_DEPLOY);
	assert_string_equal(st->deployment, "chat");
	assert_string_equal(st->from, "register");
	assert_true(kn_workflow_depends(w, 4, 0));
	assert_false(kn_workflow_depends(w, 0, 4));
	assert_null(kn_workflow_step_find(w, "nope"));

	{
		json_t *j = kn_workflow_spec_to_json(w);
		json_t *steps = json_object_get(j, "steps");

		assert_string_equal(
			json_string_value(json_array_get(
				json_object_get(json_array_get(steps, 3),
						"when"),
				0)),
			"evaluate.metrics.loss < 1.8");
		assert_string_equal(json_string_value(json_array_get(
					    json_object_get(j, "order"), 4)),
				    "deploy");
		json_decref(j);
	}
	assert_string_equal(kn_spec_kind(PIPELINE, strlen(PIPELINE)),
			    "Workflow");
	kn_workflow_spec_free(w);
}

/* Needs first; among steps ready together, file order. */
static void test_order(void **state)
{
	static const char yaml[] =
		"kind: Workflow\nname: dag\nsteps:\n"
		"  - {name: report, needs: [left, right], job: r.yaml}\n"
		"  - {name: right, needs: [root], job: b.yaml}\n"
		"  - {name: left, needs: [root], job: a.yaml}\n"
		"  - {name: root, job: root.yaml}\n"
		"  - {name: lone, job: lone.yaml}\n";
	static const char *const want[] = {"root", "right", "left", "report",
					   "lone"};
	struct kn_workflow_spec *w = parse_ok(yaml);

	(void)state;
	/* root is the first step ready; after it, the first ready in file
	   order each time: report waits for both branches. */
	for (size_t i = 0; i < ARRAY_SIZE(want); i++)
		assert_string_equal(w->steps[w->order[i]].name, want[i]);
	assert_int_equal(w->on_failure, KN_ON_FAILURE_STOP);
	assert_int_equal(w->steps[0].on_failure, KN_ON_FAILURE_STOP);
	kn_workflow_spec_free(w);
}

#define HEAD "kind: Workflow\nname: w\nsteps:\n"

static const struct bad_case bad_cases[] = {
	{"kind: Workflow\nname: w\nrequires: {commands: []}\nsteps:\n"
	 "  - {name: a, job: a.yaml}\n",
	 "requires.commands",
	 "w.yaml:3:22: requires.commands: must be a list of command names "
	 "such as [nvidia-smi, torchrun]; got an empty list"},
	{"kind: Workflow\nname: w\nrequires: {gpus: {model: ''}}\nsteps:\n"
	 "  - {name: a, job: a.yaml}\n",
	 "requires.gpus.model",
	 "w.yaml:3:26: requires.gpus.model: must be a GPU model such as H100; "
	 "got an empty string"},
	{HEAD "  - name: a\n    job: a.yaml\n"
	 "    requires: {python_modules: [torch, '']}\n",
	 "steps[0].requires.python_modules[1]",
	 "w.yaml:6:40: steps[0].requires.python_modules[1]: must be a "
	 "non-empty string; got an empty string"},
	{HEAD "  - name: a\n    job: {command: [x], array: 0-9}\n",
	 "steps[0].job.array",
	 "w.yaml:5:32: steps[0].job.array: a workflow's job runs as one job; "
	 "an array is submitted on its own"},
	{HEAD "  - {name: a, needs: [b], job: a.yaml}\n", "steps[0].needs[0]",
	 "w.yaml:4:23: steps[0].needs[0]: step \"a\" needs \"b\", which is no "
	 "step of this workflow"},
	{HEAD "  - {name: a, needs: [a], job: a.yaml}\n", "steps[0].needs[0]",
	 "w.yaml:4:23: steps[0].needs[0]: step \"a\" needs itself"},
	{HEAD "  - {name: a, needs: [c], job: a.yaml}\n"
	      "  - {name: b, needs: [a], job: b.yaml}\n"
	      "  - {name: c, needs: [b], job: c.yaml}\n"
	      "  - {name: d, job: d.yaml}\n",
	 "steps[0].needs",
	 "w.yaml:4:5: steps[0].needs: the steps' needs form a cycle: a -> c "
	 "-> b -> a"},
	{HEAD "  - {name: a, job: a.yaml}\n  - {name: a, job: b.yaml}\n",
	 "steps[1].name",
	 "w.yaml:5:5: steps[1].name: two steps are named \"a\" (the first is "
	 "steps[0])"},
	{HEAD "  - {name: a, job: a.yaml}\n"
	      "  - {name: b, when: \"a.metrics.loss < 2\", job: b.yaml}\n",
	 "steps[1].when",
	 "w.yaml:5:21: steps[1].when: the condition reads step \"a\", which "
	 "step \"b\" does not need (add it to needs)"},
	{HEAD "  - {name: a, job: a.yaml}\n"
	      "  - {name: b, inputs: [a.outputs/x], job: b.yaml}\n",
	 "steps[1].inputs[0]",
	 "w.yaml:5:24: steps[1].inputs[0]: the input reads step \"a\", which "
	 "step \"b\" does not need (add it to needs)"},
	{HEAD "  - {name: a, job: a.yaml}\n"
	      "  - {name: b, needs: [a], inputs: [a.outputs/../x], job: b}\n",
	 "steps[1].inputs[0]",
	 "w.yaml:5:36: steps[1].inputs[0]: must name a file under the step's "
	 "outputs (STEP.outputs/PATH, no \"..\"); got \"a.outputs/../x\""},
	{HEAD "  - {name: a, job: a.yaml}\n"
	      "  - {name: b, needs: [a], when: \"a.metrics.loss ~ 2\", "
	      "job: b}\n",
	 "steps[1].when",
	 "w.yaml:5:33: steps[1].when: \"~\" is not a comparison: use <, <=, "
	 ">, >=, == or !="},
	{HEAD "  - {name: a, job: a.yaml}\n"
	      "  - {name: b, needs: [a], when: \"a.outcome < done\", job: b}\n",
	 "steps[1].when",
	 "w.yaml:5:33: steps[1].when: an outcome is compared with == or != "
	 "only; got \"a.outcome < done\""},
	{HEAD "  - {name: a, job: a.yaml}\n"
	      "  - {name: b, needs: [a], when: \"a.metrics.loss < low\", "
	      "job: b}\n",
	 "steps[1].when",
	 "w.yaml:5:33: steps[1].when: a metric is compared with a number; "
	 "got \"low\""},
	{HEAD "  - {name: a, job: a.yaml, deploy: {deployment: d, from: a}}\n",
	 "steps[0]",
	 "w.yaml:4:28: steps[0]: step \"a\" must have exactly one of job, "
	 "register or deploy"},
	/* Both kinds name a from: the first one must not leak. */
	{HEAD "  - {name: a, job: a.yaml}\n"
	      "  - {name: b, needs: [a], register: {from: a, model: m},\n"
	      "     deploy: {deployment: d, from: a}}\n",
	 "steps[1]",
	 "w.yaml:5:27: steps[1]: step \"b\" must have exactly one of job, "
	 "register or deploy"},
	{HEAD "  - {name: a}\n", "steps[0]",
	 "w.yaml:4:5: steps[0]: step \"a\" must have exactly one of job, "
	 "register or deploy"},
	{HEAD "  - {name: a, job: a.yaml}\n"
	      "  - {name: b, needs: [a], register: {from: a, model: m}}\n"
	      "  - {name: c, needs: [b], register: {from: b, model: m}}\n",
	 "steps[2].register.from",
	 "w.yaml:6:44: steps[2].register.from: register.from reads step "
	 "\"b\", which is not a job step"},
	/* The server signs only with keys it holds by name. */
	{HEAD "  - {name: a, job: a.yaml}\n"
	      "  - {name: b, needs: [a], register: {from: a, model: m,\n"
	      "     sign_key: /etc/kiln/release.pem}}\n",
	 "steps[1].register.sign_key",
	 "w.yaml:6:16: steps[1].register.sign_key: the server no longer "
	 "signs with a key file a spec names: use signer: NAME, a signer the "
	 "server's config holds (signers:)"},
	{HEAD "  - {name: a, job: a.yaml}\n"
	      "  - {name: b, needs: [a], register: {from: a, model: m,\n"
	      "     signer: /etc/kiln/release.pem}}\n",
	 "steps[1].register.signer",
	 "w.yaml:6:14: steps[1].register.signer: must be a signer's name, as "
	 "the server's config file names it under signers:; got "
	 "\"/etc/kiln/release.pem\""},
	{HEAD "  - {name: a, job: a.yaml}\n"
	      "  - {name: b, needs: [a], deploy: {deployment: d, from: a}}\n",
	 "steps[1].deploy.from",
	 "w.yaml:5:57: steps[1].deploy.from: deploy.from must name a register "
	 "step; \"a\" is not one"},
	{HEAD "  - {name: a, job: a.yaml, on_failure: ignore}\n",
	 "steps[0].on_failure",
	 "w.yaml:4:40: steps[0].on_failure: must be one of retry, continue or "
	 "stop; got \"ignore\""},
	{HEAD "  - {name: a, job: a.yaml, requires: {cuda: \"12.x\"}}\n",
	 "steps[0].requires.cuda",
	 "w.yaml:4:45: steps[0].requires.cuda: must be a version such as "
	 "\"535.104\" or \"12.2\" (numbers and dots); got \"12.x\""},
	{HEAD "  - {name: a, job: {command: [x], gpus: 1}}\n",
	 "steps[0].job.gpus",
	 "w.yaml:4:35: unknown field \"gpus\" in steps[0].job; did you mean "
	 "\"resources.gpus\"?"},
	{HEAD "  - {name: a, job: {command: [x], inputs: [d.txt]}}\n",
	 "steps[0].job.inputs",
	 "w.yaml:4:43: steps[0].job.inputs: a step's inputs go in the step's "
	 "inputs: list, not in its job"},
	{"kind: Workflow\nname: w\nsteps: []\n", "steps",
	 "w.yaml:3:8: steps: must be a list of 1 to 64 steps; got an empty "
	 "list"},
	{"kind: Job\nname: w\nsteps: []\n", "kind",
	 "w.yaml:1:7: kind: must be \"Workflow\"; got \"Job\""},
};

static void *parse_workflow(const char *yaml, const char *file, int *rc,
			    struct kn_error *err)
{
	struct kn_workflow_spec *spec = NULL;

	*rc = kn_workflow_spec_parse(yaml, strlen(yaml), file, &spec, err);
	return spec;
}

static void test_bad_workflows(void **state)
{
	(void)state;
	expect_refused(bad_cases, ARRAY_SIZE(bad_cases), "w.yaml",
		       parse_workflow);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_pipeline),
	cmocka_unit_test(test_order),
	cmocka_unit_test(test_bad_workflows))
