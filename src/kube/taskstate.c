/*
 * A task's state from its Job's and pods' objects as the API server
 * lists them: pure, so the recorded answers of tests/fixtures/kube test
 * it as they are.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube/internal.h"
#include "kube/kube.h"

/* RFC 3339 "2026-12-03T04:05:06Z" as ms since the epoch, 0 if not. */
static int64_t time_ms(const char *s)
{
	int64_t ms;

	return s && kn_parse_time(s, "%Y-%m-%dT%H:%M:%S", &ms) ? ms : 0;
}

/* The condition of type in obj's status.conditions when it is True. */
json_t *kube_condition_true(json_t *obj, const char *type)
{
	json_t *conds = json_object_get(json_object_get(obj, "status"),
					"conditions"), *c;
	size_t i;

	json_array_foreach(conds, i, c) {
		const char *t = json_string_value(json_object_get(c, "type"));
		const char *st = json_string_value(json_object_get(c, "status"));
		if (t && st && !strcmp(t, type) && !strcmp(st, "True"))
			return c;
	}
	return NULL;
}

/* The completion index of pod, or -1 (none: a one-task Job's). */
static long pod_index(json_t *pod)
{
	const char *idx = json_string_value(json_object_get(
		json_object_get(json_object_get(pod, "metadata"),
				"annotations"),
		KUBE_INDEX_ANNOTATION));
	char *end = NULL;
	long k = idx ? strtol(idx, &end, 10) : -1;

	return idx && *idx && !*end && k >= 0 ? k : -1;
}

/* Whether pod is newer than best (NULL: none yet). RFC 3339 in UTC
   sorts as text. */
static bool newer(json_t *pod, json_t *best)
{
	const char *at = kube_str_at(pod, "metadata", "creationTimestamp");
	const char *best_at = kube_str_at(best, "metadata",
					  "creationTimestamp");

	return !best || (at && (!best_at || strcmp(at, best_at) > 0));
}

/*
 * The pod of rank: an Indexed Job's pods carry their index as an
 * annotation; a one-task Job's have none, and all are rank 0's. The
 * newest wins (a Job with backoffLimit 0 has one).
 */
json_t *kube_rank_pod(json_t *pods, int rank)
{
	json_t *pod, *best = NULL;
	size_t i;

	json_array_foreach(pods, i, pod) {
		long k = pod_index(pod);

		if (k < 0 ? rank != 0 : k != rank)
			continue;
		if (newer(pod, best))
			best = pod;
	}
	return best;
}

json_t **kube_pods_by_index(json_t *pods, int n)
{
	json_t **by = kn_xcalloc(n > 0 ? (size_t)n : 1, sizeof(*by)), *pod;
	size_t i;

	json_array_foreach(pods, i, pod) {
		long k = pod_index(pod);

		if (k >= 0 && k < n && newer(pod, by[k]))
			by[k] = pod;
	}
	return by;
}

/* The task's container status ("task"; else the first). */
static json_t *task_container(json_t *pod)
{
	json_t *list = json_object_get(json_object_get(pod, "status"),
				       "containerStatuses"), *c;
	size_t i;

	json_array_foreach(list, i, c) {
		const char *n = json_string_value(json_object_get(c, "name"));
		if (n && !strcmp(n, "task"))
			return c;
	}
	return json_array_get(list, 0);
}

void kube_view_ended(struct kn_kube_task_view *v, int exit_code, int sig,
		     const char *reason)
{
	v->ended = true;
	v->running = false;
	v->exit_code = exit_code;
	v->signal = sig;
	snprintf(v->reason, sizeof(v->reason), "%s", reason ? reason : "");
}

/*
 * The shim's termination message (shim.c) into v, and the reason it gave
 * for the task's end (a refused input, a failed outputs' upload) into
 * why; others are ignored.
 */
static void shim_report(json_t *term, struct kn_kube_task_view *v,
			char *why, size_t len)
{
	json_t *doc = json_loads(kube_str_at(term, "message", NULL) ?
				 kube_str_at(term, "message", NULL) : "", 0, NULL);
	const char *ck = json_string_value(json_object_get(doc, "checkpoint"));
	const char *re = json_string_value(json_object_get(doc, "restored"));
	const char *reason = json_string_value(json_object_get(doc, "reason"));
	json_t *inputs = json_object_get(doc, "inputs");
	json_t *outputs = json_object_get(doc, "outputs");
	const char *digest = json_string_value(
		json_object_get(outputs, "manifest_sha256"));

	if (ck) {
		kn_strlcpy(v->checkpoint, ck, sizeof(v->checkpoint));
		v->checkpoint_at_ms = json_integer_value(
			json_object_get(doc, "checkpoint_at_ms"));
	}
	if (re)
		kn_strlcpy(v->restored, re, sizeof(v->restored));
	v->restore_ms = json_integer_value(json_object_get(doc, "restore_ms"));
	if (json_is_array(inputs)) {
		char *text = json_dumps(inputs, JSON_COMPACT);

		if (text && strlen(text) < sizeof(v->inputs))
			kn_strlcpy(v->inputs, text, sizeof(v->inputs));
		free(text);
	}
	if (digest && strlen(digest) == 64) {
		kn_strlcpy(v->outputs_manifest_sha256, digest,
			   sizeof(v->outputs_manifest_sha256));
		v->outputs_files = (int)json_integer_value(
			json_object_get(outputs, "files"));
	}
	kn_strlcpy(why, reason ? reason : "", len);
	json_decref(doc);
}

/* From a pod that has ended (or is being disrupted): true when it has. */
static bool pod_state(json_t *pod, struct kn_kube_task_view *v)
{
	json_t *cs = task_container(pod);
	json_t *term = json_object_get(json_object_get(cs, "state"),
				       "terminated");
	json_t *run = json_object_get(json_object_get(cs, "state"), "running");
	json_t *disrupted = kube_condition_true(pod, "DisruptionTarget");
	const char *phase = kube_str_at(pod, "status", "phase");
	const char *pod_reason = kube_str_at(pod, "status", "reason");
	const char *term_reason = kube_str_at(term, "reason", NULL);
	int code = term ? (int)json_integer_value(json_object_get(term,
								  "exitCode"))
			: -1;
	int sig = term ? (int)json_integer_value(json_object_get(term,
								 "signal"))
		       : 0;
	char why[96], shim_why[96] = "";

	v->started_at_ms = time_ms(kube_str_at(run ? run : term, "startedAt", NULL));
	if (!v->started_at_ms)
		v->started_at_ms = time_ms(kube_str_at(pod, "status", "startTime"));
	v->ended_at_ms = time_ms(kube_str_at(term, "finishedAt", NULL));
	if (term)
		shim_report(term, v, shim_why, sizeof(shim_why));
	if (disrupted) {
		/* Taken away (spot eviction, preemption, node drain): not the
		   task's failure; it may still be saving its checkpoint. */
		snprintf(why, sizeof(why), "disrupted: %s",
			 kube_str_at(disrupted, "reason", NULL) ?
				 kube_str_at(disrupted, "reason", NULL) : "unknown");
		kube_view_ended(v, code, sig, why);
		v->preempted = true;
		return true;
	}
	if (phase && !strcmp(phase, "Succeeded")) {
		kube_view_ended(v, term ? code : 0, 0, NULL);
		return true;
	}
	if (!phase || strcmp(phase, "Failed") != 0) {
		v->running = run != NULL;
		return false;
	}
	if (pod_reason && !strcmp(pod_reason, "DeadlineExceeded")) {
		kube_view_ended(v, code, sig ? sig : SIGKILL, "timeout");
	} else if (pod_reason) {
		snprintf(why, sizeof(why), "%s: %s", pod_reason,
			 kube_str_at(pod, "status", "message") ?
				 kube_str_at(pod, "status", "message") : "");
		kube_view_ended(v, code, sig, why);
	} else if (term_reason && strcmp(term_reason, "Error") != 0 &&
		   strcmp(term_reason, "Completed") != 0) {
		snprintf(why, sizeof(why), "%s, exit code %d", term_reason, code);
		kube_view_ended(v, code, sig, why);
	} else {
		/* The shim's own reason, as status.json carries it locally. */
		kube_view_ended(v, code, sig, shim_why);
	}
	return true;
}

void kn_kube_task_state(json_t *job, json_t *pods, int rank, bool stopping,
			struct kn_kube_task_view *out)
{
	json_t *pod = kube_rank_pod(pods, rank), *cond;
	char why[96];

	memset(out, 0, sizeof(*out));
	out->exit_code = -1;
	if (pod) {
		snprintf(out->pod, sizeof(out->pod), "%s",
			 kube_str_at(pod, "metadata", "name") ?
				 kube_str_at(pod, "metadata", "name") : "");
		if (pod_state(pod, out))
			return;
	}
	if (!job) {
		if (stopping)
			kube_view_ended(out, -1, SIGTERM, "stopped: Job deleted");
		else
			kube_view_ended(out, -1, 0, "lost: the Kubernetes Job is gone");
		return;
	}
	if ((cond = kube_condition_true(job, "Failed"))) {
		const char *reason = kube_str_at(cond, "reason", NULL);

		if (reason && !strcmp(reason, "DeadlineExceeded")) {
			kube_view_ended(out, -1, SIGKILL, "timeout");
		} else {
			snprintf(why, sizeof(why), "Job failed: %s",
				 reason ? reason : "no reason given");
			kube_view_ended(out, -1, SIGTERM, why);
		}
		return;
	}
	if (kube_condition_true(job, "Complete")) {
		kube_view_ended(out, 0, 0, NULL);
		return;
	}
	if (stopping && !pod)
		kube_view_ended(out, -1, SIGTERM, "stopped: Job deleted");
}
