/*
 * wfplan: the pure decisions of the workflow engine (workflows.c) — when a
 * pending step starts, is skipped or waits; whether its `when:` holds;
 * how a run ends; which steps a retry runs again. No I/O: the engine
 * hands in the steps' states and metrics and writes what comes back, so
 * these rules are unit-tested on their own (tests/test_wfplan.c).
 */
#ifndef KILN_SERVER_WFPLAN_H
#define KILN_SERVER_WFPLAN_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "spec/spec.h"

enum wf_step_state {
	WF_PENDING,
	WF_RUNNING,
	WF_SUCCEEDED,
	WF_FAILED,
	WF_SKIPPED,
	WF_CANCELLED,
};

/* The store's and the API's names; NULL / -1 outside the enum. */
const char *wf_step_state_name(enum wf_step_state s);
int wf_step_state_parse(const char *name);
bool wf_step_ended(enum wf_step_state s);

/* What the engine knows of one step (indexes as the spec's steps). */
struct wf_step_view {
	enum wf_step_state state;
	bool by_condition; /* skipped by a false `when` (directly or not) */
	json_t *metrics;   /* the job's metrics.json object, or NULL */
};

enum wf_decision {
	WF_WAIT,  /* a need has not ended yet (or the run is stopping) */
	WF_START, /* every need ended well and `when` holds */
	WF_SKIP,  /* a need did not succeed, or `when` is false */
};

/*
 * Decide pending step i. A need that did not succeed skips the step
 * unless its `when` reads that need's outcome (then the condition
 * decides); stopping (a failed step's on_failure is stop) keeps a step
 * that could start waiting. On WF_SKIP, *by_condition says whether only
 * conditions were to blame, and why (len bytes) names the need or the
 * condition.
 */
enum wf_decision wf_plan_step(const struct kn_workflow_spec *w, size_t i,
			      const struct wf_step_view *v, bool stopping,
			      bool *by_condition, char *why, size_t len);

/*
 * Whether every condition of step i's `when` holds; when one does not,
 * why says which and with what value ("evaluate.metrics.loss < 1.8 is
 * false (loss = 2.1)", or that the metric is missing).
 */
bool wf_when_holds(const struct kn_workflow_spec *w, size_t i,
		   const struct wf_step_view *v, char *why, size_t len);

/*
 * A run whose steps have all ended: succeeded when each succeeded or was
 * skipped by a condition. Otherwise false, with the first step to blame
 * in *culprit (-1 when none: a skip alone).
 */
bool wf_run_succeeded(const struct kn_workflow_spec *w,
		      const struct wf_step_view *v, int *culprit);

/*
 * The steps a retry runs again (retry[i] set): failed and cancelled ones,
 * ones skipped because of a failure, and any skipped step that needs,
 * directly or not, a step run again. Succeeded steps stay as they are.
 * Returns how many.
 */
size_t wf_retry_plan(const struct kn_workflow_spec *w,
		     const struct wf_step_view *v, bool *retry);

#endif
