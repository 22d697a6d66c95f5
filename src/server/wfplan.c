/*
 * The workflow engine's pure rules (wfplan.h). Each function reads the
 * parsed workflow and the steps' views and decides; nothing here touches
 * the store, the queue or a file, so a decision is the same at start-up,
 * after a job's end or after an API call.
 */
#include "server/wfplan.h"

#include <stdio.h>
#include <string.h>

static const char *const STATE_NAMES[] = {
	[WF_PENDING] = "pending",     [WF_RUNNING] = "running",
	[WF_SUCCEEDED] = "succeeded", [WF_FAILED] = "failed",
	[WF_SKIPPED] = "skipped",     [WF_CANCELLED] = "cancelled",
};
#define N_STATES (sizeof(STATE_NAMES) / sizeof(STATE_NAMES[0]))

const char *wf_step_state_name(enum wf_step_state s)
{
	return (unsigned)s < N_STATES ? STATE_NAMES[s] : NULL;
}

int wf_step_state_parse(const char *name)
{
	for (size_t i = 0; name && i < N_STATES; i++)
		if (!strcmp(STATE_NAMES[i], name))
			return (int)i;
	return -1;
}

bool wf_step_ended(enum wf_step_state s)
{
	return s != WF_PENDING && s != WF_RUNNING;
}

static int step_index(const struct kn_workflow_spec *w, const char *name)
{
	for (size_t i = 0; i < w->n_steps; i++)
		if (!strcmp(w->steps[i].name, name))
			return (int)i;
	return -1;
}

static const char *const OP_TEXT[] = {
	[KN_CMP_LT] = "<", [KN_CMP_LE] = "<=", [KN_CMP_GT] = ">",
	[KN_CMP_GE] = ">=", [KN_CMP_EQ] = "==", [KN_CMP_NE] = "!=",
};

static bool compare(double a, enum kn_compare op, double b)
{
	switch (op) {
	case KN_CMP_LT: return a < b;
	case KN_CMP_LE: return a <= b;
	case KN_CMP_GT: return a > b;
	case KN_CMP_GE: return a >= b;
	case KN_CMP_EQ: return a == b;
	case KN_CMP_NE: return a != b;
	}
	return false;
}

/* The outcome a condition compares: a cancelled step is neither. */
static const char *outcome_of(enum wf_step_state s)
{
	return s == WF_SUCCEEDED ? "succeeded"
	       : s == WF_FAILED  ? "failed"
	       : s == WF_SKIPPED ? "skipped"
				 : wf_step_state_name(s);
}

bool wf_when_holds(const struct kn_workflow_spec *w, size_t i,
		   const struct wf_step_view *v, char *why, size_t len)
{
	const struct kn_workflow_step *st = &w->steps[i];

	for (size_t k = 0; k < st->n_when; k++) {
		const struct kn_condition *c = &st->when[k];
		int j = step_index(w, c->step);
		const char *op = OP_TEXT[c->op];

		if (j < 0) { /* the parser refuses this; be safe anyway */
			snprintf(why, len, "when: no step %s", c->step);
			return false;
		}
		if (c->metric) {
			json_t *m = v[j].metrics
					    ? json_object_get(v[j].metrics,
							      c->metric)
					    : NULL;
			if (!json_is_number(m)) {
				snprintf(why, len,
					 "when: %s.metrics.%s %s %g: step %s "
					 "left no metric %s in metrics.json",
					 c->step, c->metric, op, c->number,
					 c->step, c->metric);
				return false;
			}
			if (!compare(json_number_value(m), c->op, c->number)) {
				snprintf(why, len,
					 "when: %s.metrics.%s %s %g is false "
					 "(%s = %g)",
					 c->step, c->metric, op, c->number,
					 c->metric, json_number_value(m));
				return false;
			}
		} else {
			const char *got = outcome_of(v[j].state);
			bool eq = !strcmp(got, c->outcome);

			if (eq != (c->op == KN_CMP_EQ)) {
				snprintf(why, len,
					 "when: %s.outcome %s %s is false "
					 "(%s %s)",
					 c->step, op, c->outcome, c->step,
					 got);
				return false;
			}
		}
	}
	return true;
}

/* Whether step i's `when` reads the outcome of step `need`. */
static bool reads_outcome(const struct kn_workflow_step *st,
			  const char *need)
{
	for (size_t k = 0; k < st->n_when; k++)
		if (!st->when[k].metric && !strcmp(st->when[k].step, need))
			return true;
	return false;
}

enum wf_decision wf_plan_step(const struct kn_workflow_spec *w, size_t i,
			      const struct wf_step_view *v, bool stopping,
			      bool *by_condition, char *why, size_t len)
{
	const struct kn_workflow_step *st = &w->steps[i];
	int blame = -1;

	for (size_t k = 0; k < st->n_needs; k++) {
		int j = step_index(w, st->needs[k]);

		if (j < 0 || !wf_step_ended(v[j].state))
			return WF_WAIT;
	}
	for (size_t k = 0; k < st->n_needs; k++) {
		int j = step_index(w, st->needs[k]);

		if (v[j].state == WF_SUCCEEDED ||
		    reads_outcome(st, st->needs[k]))
			continue;
		/* A failure is to blame before a condition's skip. */
		if (blame < 0 || (v[blame].by_condition && !v[j].by_condition))
			blame = j;
	}
	if (blame >= 0) {
		*by_condition = v[blame].state == WF_SKIPPED &&
				v[blame].by_condition;
		snprintf(why, len, "need %s %s", w->steps[blame].name,
			 v[blame].state == WF_SKIPPED ? "was skipped"
			 : v[blame].state == WF_CANCELLED
				 ? "was cancelled"
				 : "failed");
		return WF_SKIP;
	}
	if (!wf_when_holds(w, i, v, why, len)) {
		*by_condition = true;
		return WF_SKIP;
	}
	return stopping ? WF_WAIT : WF_START;
}

bool wf_run_succeeded(const struct kn_workflow_spec *w,
		      const struct wf_step_view *v, int *culprit)
{
	int skipped = -1;

	for (size_t k = 0; k < w->n_steps; k++) {
		size_t i = w->order[k];

		if (v[i].state == WF_SUCCEEDED ||
		    (v[i].state == WF_SKIPPED && v[i].by_condition))
			continue;
		if (v[i].state == WF_FAILED || v[i].state == WF_CANCELLED) {
			*culprit = (int)i;
			return false;
		}
		if (skipped < 0)
			skipped = (int)i;
	}
	*culprit = skipped;
	return skipped < 0;
}

size_t wf_retry_plan(const struct kn_workflow_spec *w,
		     const struct wf_step_view *v, bool *retry)
{
	size_t n = 0;

	for (size_t k = 0; k < w->n_steps; k++) {
		size_t i = w->order[k];
		const struct kn_workflow_step *st = &w->steps[i];
		bool again = v[i].state == WF_FAILED ||
			     v[i].state == WF_CANCELLED ||
			     v[i].state == WF_PENDING ||
			     (v[i].state == WF_SKIPPED && !v[i].by_condition);

		for (size_t m = 0; !again && v[i].state == WF_SKIPPED &&
				   m < st->n_needs;
		     m++) {
			int j = step_index(w, st->needs[m]);
			again = j >= 0 && retry[j];
		}
		retry[i] = again;
		n += again;
	}
	return n;
}
