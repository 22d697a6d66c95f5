/*
 * Unit tests for the workflow engine's rules (server/wfplan.c): a step
 * waits for its needs, starts when they succeeded and its `when` holds,
 * is skipped (and why) when a need did not succeed or a condition is
 * false or reads a missing metric; a stop keeps ready steps waiting; a
 * run's outcome; what a retry runs again.
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
#include "server/wfplan.h"

/*
 * prep -> train -> eval -> report (when: eval.metrics.loss < 1.8);
 * prep -> lint (independent of train); cleanup reads train's outcome.
 */
static const char DAG[] =
	"kind: Workflow\n"
	"name: dag\n"
	"steps:\n"
	"  - {name: prep, job: {command: [\"true\"]}}\n"
	"  - {name: train, needs: [prep], job: {command: [\"true\"]}}\n"
	"  - {name: lint, needs: [prep], job: {command: [\"true\"]}}\n"
	"  - {name: eval, needs: [train], job: {command: [\"true\"]}}\n"
	"  - name: report\n"
	"    needs: [eval]\n"
	"    when: \"eval.metrics.loss < 1.8\"\n"
	"    job: {command: [\"true\"]}\n"
	"  - name: cleanup\n"
	"    needs: [train]\n"
	"    when: \"train.outcome == failed\"\n"
	"    job: {command: [\"true\"]}\n";

enum { PREP, TRAIN, LINT, EVAL, REPORT, CLEANUP, N };

struct fx {
	struct kn_workflow_spec *w;
	struct wf_step_view v[N];
	char why[512];
	bool by_condition;
};

static int setup(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	struct kn_error err = {0};

	assert_int_equal(kn_workflow_spec_parse(DAG, strlen(DAG), "dag.yaml",
						&fx->w, &err),
			 0);
	assert_int_equal(fx->w->n_steps, N);
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fx *fx = *state;

	for (int i = 0; i < N; i++)
		json_decref(fx->v[i].metrics);
	kn_workflow_spec_free(fx->w);
	free(fx);
	return 0;
}

static enum wf_decision plan(struct fx *fx, size_t i, bool stopping)
{
	fx->why[0] = '\0';
	fx->by_condition = false;
	return wf_plan_step(fx->w, i, fx->v, stopping, &fx->by_condition,
			    fx->why, sizeof(fx->why));
}

static void test_waits_then_starts(void **state)
{
	struct fx *fx = *state;

	assert_int_equal(plan(fx, PREP, false), WF_START);
	assert_int_equal(plan(fx, TRAIN, false), WF_WAIT);
	fx->v[PREP].state = WF_RUNNING;
	assert_int_equal(plan(fx, TRAIN, false), WF_WAIT);
	fx->v[PREP].state = WF_SUCCEEDED;
	/* Both branches are ready at once: they run in parallel. */
	assert_int_equal(plan(fx, TRAIN, false), WF_START);
	assert_int_equal(plan(fx, LINT, false), WF_START);
	/* A stop keeps a ready step waiting. */
	assert_int_equal(plan(fx, LINT, true), WF_WAIT);
}

static void test_failed_need_skips(void **state)
{
	struct fx *fx = *state;

	fx->v[PREP].state = WF_SUCCEEDED;
	fx->v[TRAIN].state = WF_FAILED;
	assert_int_equal(plan(fx, EVAL, false), WF_SKIP);
	assert_false(fx->by_condition);
	assert_string_equal(fx->why, "need train failed");
	/* A skip is decided even while the run stops. */
	assert_int_equal(plan(fx, EVAL, true), WF_SKIP);
	fx->v[TRAIN].state = WF_CANCELLED;
	assert_int_equal(plan(fx, EVAL, false), WF_SKIP);
	assert_string_equal(fx->why, "need train was cancelled");
}

static void test_outcome_condition_runs_after_failure(void **state)
{
	struct fx *fx = *state;

	fx->v[PREP].state = WF_SUCCEEDED;
	fx->v[TRAIN].state = WF_FAILED;
	assert_int_equal(plan(fx, CLEANUP, false), WF_START);
	fx->v[TRAIN].state = WF_SUCCEEDED;
	assert_int_equal(plan(fx, CLEANUP, false), WF_SKIP);
	assert_true(fx->by_condition);
	assert_string_equal(fx->why, "when: train.outcome == failed is false "
				     "(train succeeded)");
}

static void test_metric_condition(void **state)
{
	struct fx *fx = *state;

	fx->v[PREP].state = fx->v[TRAIN].state = WF_SUCCEEDED;
	fx->v[EVAL].state = WF_SUCCEEDED;
	fx->v[EVAL].metrics = json_pack("{s:f}", "loss", 1.5);
	assert_int_equal(plan(fx, REPORT, false), WF_START);
	json_object_set_new(fx->v[EVAL].metrics, "loss", json_real(2.5));
	assert_int_equal(plan(fx, REPORT, false), WF_SKIP);
	assert_true(fx->by_condition);
	assert_string_equal(fx->why, "when: eval.metrics.loss < 1.8 is false "
				     "(loss = 2.5)");
	/* An integer compares as a number too. */
	json_object_set_new(fx->v[EVAL].metrics, "loss", json_integer(1));
	assert_int_equal(plan(fx, REPORT, false), WF_START);
	json_object_del(fx->v[EVAL].metrics, "loss");
	assert_int_equal(plan(fx, REPORT, false), WF_SKIP);
	assert_string_equal(fx->why, "when: eval.metrics.loss < 1.8: step "
				     "eval left no metric loss in "
				     "metrics.json");
}

static void test_condition_skip_propagates(void **state)
{
	struct fx *fx = *state;
	static const char W[] =
		"kind: Workflow\nname: w\nsteps:\n"
		"  - {name: a, job: {command: [\"true\"]}}\n"
		"  - {name: b, needs: [a], when: \"a.metrics.x > 1\",\n"
		"     job: {command: [\"true\"]}}\n"
		"  - {name: c, needs: [b], job: {command: [\"true\"]}}\n";
	struct kn_workflow_spec *w = NULL;
	struct wf_step_view v[3];
	struct kn_error err = {0};
	bool by_condition = false;
	char why[256];
	int culprit = 0;

	(void)fx;
	assert_int_equal(kn_workflow_spec_parse(W, strlen(W), "w.yaml", &w,
						&err),
			 0);
	memset(v, 0, sizeof(v));
	v[0].state = WF_SUCCEEDED;
	v[1].state = WF_SKIPPED;
	v[1].by_condition = true;
	assert_int_equal(wf_plan_step(w, 2, v, false, &by_condition, why,
				      sizeof(why)),
			 WF_SKIP);
	assert_true(by_condition);
	assert_string_equal(why, "need b was skipped");
	v[2].state = WF_SKIPPED;
	v[2].by_condition = true;
	/* Skips by conditions only: the run succeeded. */
	assert_true(wf_run_succeeded(w, v, &culprit));
	/* A skip because of a failure fails it. */
	v[2].by_condition = false;
	assert_false(wf_run_succeeded(w, v, &culprit));
	assert_int_equal(culprit, 2);
	v[0].state = WF_FAILED;
	assert_false(wf_run_succeeded(w, v, &culprit));
	assert_int_equal(culprit, 0);
	kn_workflow_spec_free(w);
}

static void test_retry_plan(void **state)
{
	struct fx *fx = *state;
	bool again[N];

	fx->v[PREP].state = WF_SUCCEEDED;
	fx->v[TRAIN].state = WF_FAILED;
	fx->v[LINT].state = WF_SUCCEEDED;
	fx->v[EVAL].state = WF_SKIPPED; /* need train failed */
	fx->v[REPORT].state = WF_SKIPPED;
	fx->v[REPORT].by_condition = false;
	fx->v[CLEANUP].state = WF_SUCCEEDED;
	assert_int_equal(wf_retry_plan(fx->w, fx->v, again), 3);
	assert_false(again[PREP]);
	assert_true(again[TRAIN]);
	assert_false(again[LINT]);
	assert_true(again[EVAL]);
	assert_true(again[REPORT]);
	assert_false(again[CLEANUP]);

	/* A condition's skip stays, unless a need runs again. */
	fx->v[TRAIN].state = WF_SUCCEEDED;
	fx->v[EVAL].state = WF_SUCCEEDED;
	fx->v[REPORT].by_condition = true;
	assert_int_equal(wf_retry_plan(fx->w, fx->v, again), 0);
	fx->v[EVAL].state = WF_CANCELLED;
	assert_int_equal(wf_retry_plan(fx->w, fx->v, again), 2);
	assert_true(again[REPORT]);
}

static void test_state_names(void **state)
{
	(void)state;
	for (int s = WF_PENDING; s <= WF_CANCELLED; s++)
		assert_int_equal(wf_step_state_parse(wf_step_state_name(
					 (enum wf_step_state)s)),
				 s);
	assert_int_equal(wf_step_state_parse("done"), -1);
	assert_null(wf_step_state_name((enum wf_step_state)42));
	assert_false(wf_step_ended(WF_RUNNING));
	assert_true(wf_step_ended(WF_SKIPPED));
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test_setup_teardown(test_waits_then_starts, setup,
					teardown),
	cmocka_unit_test_setup_teardown(test_failed_need_skips, setup,
					teardown),
	cmocka_unit_test_setup_teardown(
		test_outcome_condition_runs_after_failure, setup,
		teardown),
	cmocka_unit_test_setup_teardown(test_metric_condition, setup,
					teardown),
	cmocka_unit_test_setup_teardown(test_condition_skip_propagates,
					setup, teardown),
	cmocka_unit_test_setup_teardown(test_retry_plan, setup,
					teardown),
	cmocka_unit_test(test_state_names))
