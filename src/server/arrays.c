/*
 * Job arrays as the API shows them. An array is its elements, each an
 * ordinary job with consecutive ids; the first element's id names the
 * array (as Slurm's array job id does). So the scheduler, retries, logs
 * and checkpoints need nothing new: what is here is how listings fold an
 * array into one row with counts by state, how a job's detail lists its
 * elements, and how a verb given the array reaches every element.
 *
 * The alternative, a parent row that is no job, would have needed every
 * reader of the jobs table (recovery, the scheduler's queue, usage,
 * backups) to learn to skip it.
 */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The spec's array: {first, count, parallel}, or NULL. A new reference. */
static json_t *spec_array(const struct kn_job_row *j)
{
	json_t *spec, *a;

	if (!j->spec_json)
		return NULL;
	spec = json_loads(j->spec_json, 0, NULL);
	a = json_incref(json_object_get(spec, "array"));
	json_decref(spec);
	return a;
}

json_t *array_summary_json(const struct kn_job_row *j)
{
	json_t *a = spec_array(j), *o;

	o = json_pack("{s:I, s:i, s:i, s:i, s:i}", "id", (json_int_t)j->array_id,
		      "index", j->array_index, "first",
		      (int)json_integer_value(json_object_get(a, "first")),
		      "count",
		      (int)json_integer_value(json_object_get(a, "count")),
		      "parallel",
		      (int)json_integer_value(json_object_get(a, "parallel")));
	json_decref(a);
	return o;
}

/* Running beats queued beats failed beats cancelled beats succeeded. */
static const enum kn_job_state state_rank[] = {
	KN_JOB_SUCCEEDED, KN_JOB_CANCELLED, KN_JOB_FAILED,
	KN_JOB_PREEMPTED, KN_JOB_QUEUED,    KN_JOB_RUNNING,
};

static int rank_of(enum kn_job_state st)
{
	for (size_t i = 0; i < KN_LEN(state_rank); i++)
		if (state_rank[i] == st)
			return (int)i;
	return 0;
}

/* Count one element into the summary's counts and state. */
static void count_element(json_t *summary, json_t *row,
			  enum kn_job_state st)
{
	json_t *counts = json_object_get(summary, "counts");
	const char *name = kn_job_state_name(st);
	json_int_t had = json_integer_value(json_object_get(counts, name));
	int prev = kn_job_state_parse(
		json_string_value(json_object_get(row, "state")));

	json_object_set_new(counts, name, json_integer(had + 1));
	if (prev < 0 || rank_of(st) > rank_of((enum kn_job_state)prev))
		json_object_set_new(row, "state", json_string(name));
}

json_t *jobs_list_json(struct server *s, const struct kn_job_row *rows,
		       size_t n, bool elements)
{
	json_t *list = json_array(), *head = NULL;
	int64_t head_id = 0;

	for (size_t i = 0; i < n; i++) {
		const struct kn_job_row *j = &rows[i];

		if (elements || j->array_id == 0) {
			json_array_append_new(list, job_to_json(s, j));
			continue;
		}
		/* Elements come by id, so an array's are together. */
		if (head && j->array_id == head_id) {
			count_element(json_object_get(head, "array"), head,
				      j->state);
			continue;
		}
		head = job_to_json(s, j);
		head_id = j->array_id;
		/* The row is the array: its id, its first matching element's
		   other fields, and a state that says what is going on. */
		json_object_set_new(head, "id", json_integer(head_id));
		json_object_set_new(head, "state", json_null());
		json_object_set_new(head, "array", array_summary_json(j));
		json_object_del(json_object_get(head, "array"), "index");
		json_object_set_new(json_object_get(head, "array"), "counts",
				    json_object());
		count_element(json_object_get(head, "array"), head, j->state);
		json_array_append_new(list, head);
	}
	return list;
}

int array_elements_json(struct server *s, const struct kn_job_row *j,
			json_t *array, struct kn_error *err)
{
	struct kn_job_filter f;
	struct kn_job_row *rows = NULL;
	json_t *elements = json_array(), *counts = json_object();
	const char **reasons;
	size_t n = 0;
	int rc;

	memset(&f, 0, sizeof(f));
	f.state = -1;
	f.array_id = j->array_id;
	rc = kn_store_job_list(s->store, &f, &rows, &n, err);
	reasons = kn_xcalloc(n ? n : 1, sizeof(*reasons));
	if (rc == 0)
		jobs_queue_reasons(s, rows, n, reasons);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		const char *st = kn_job_state_name(rows[i].state);
		json_int_t had = json_integer_value(json_object_get(counts, st));
		const char *why = rows[i].state == KN_JOB_QUEUED ? reasons[i]
								 : NULL;

		json_object_set_new(counts, st, json_integer(had + 1));
		json_array_append_new(
			elements,
			json_pack("{s:i, s:I, s:s, s:i, s:i, s:o}", "index",
				  rows[i].array_index, "id",
				  (json_int_t)rows[i].id, "state", st,
				  "attempts", rows[i].attempts, "exit_code",
				  rows[i].exit_code, "reason",
				  why || rows[i].reason
					  ? json_string(why ? why
							    : rows[i].reason)
					  : json_null()));
	}
	kn_job_list_free(rows, n);
	free(reasons);
	if (rc < 0) {
		json_decref(elements);
		json_decref(counts);
		return rc;
	}
	json_object_set_new(array, "counts", counts);
	json_object_set_new(array, "elements", elements);
	return 0;
}

/* 1 when job id is a job array's (its first element), with *first that
   element's index; 0 when it is not; or the store's negative errno. */
static int array_first(struct server *s, int64_t id, int64_t *first,
		       struct kn_error *err)
{
	struct kn_job_row j;
	int rc = kn_store_job_get(s->store, id, &j, err);

	if (rc < 0)
		return rc;
	*first = j.array_index;
	rc = j.array_id == id;
	kn_job_row_release(&j);
	return rc;
}

int jobs_array_element(struct server *s, int64_t id, int64_t index,
		       int64_t *out, struct kn_error *err)
{
	struct kn_job_row e;
	int64_t first, want;
	int rc = array_first(s, id, &first, err);

	if (rc < 0)
		return rc;
	if (rc == 0)
		return kn_errorf(err, KN_ENOTFOUND, "index",
				 "job %lld is no job array", (long long)id);
	/* Ids are consecutive from the first element (the store's insert). */
	want = id + (index - first);
	memset(&e, 0, sizeof(e));
	rc = want >= id ? kn_store_job_get(s->store, want, &e, err) : -1;
	if (rc < 0 || e.array_id != id || e.array_index != index)
		rc = kn_errorf(err, KN_ENOTFOUND, "index",
			       "job array %lld has no element %lld",
			       (long long)id, (long long)index);
	kn_job_row_release(&e);
	if (rc == 0)
		*out = want;
	return rc;
}

int jobs_array_each(struct server *s, int64_t id, array_verb_fn verb,
		    void *arg, struct kn_error *err)
{
	struct kn_job_filter f;
	struct kn_job_row *rows = NULL;
	size_t n = 0, done = 0;
	int64_t first;
	int rc = array_first(s, id, &first, err);

	if (rc < 0)
		return rc;
	if (rc == 0)
		return verb(s, id, arg, err);
	memset(&f, 0, sizeof(f));
	f.state = -1;
	f.active_only = true;
	f.array_id = id;
	rc = kn_store_job_list(s->store, &f, &rows, &n, err);
	/* One transaction, so the elements' writes share one fsync instead
	   of one each (thousands of them would hold the loop for minutes);
	   the answer still goes out only after the commit. */
	if (rc == 0 && n > 0)
		rc = kn_store_begin(s->store, err);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		struct kn_error one;

		/* An element that ended meanwhile is no failure of the whole;
		   a refusal (permission, not preemptible) is, and ends the
		   loop with what was done so far kept. */
		rc = verb(s, rows[i].id, arg, &one);
		if (rc < 0 && one.code == KN_ECONFLICT &&
		    !strcmp(one.field, "state"))
			rc = 0;
		else if (rc < 0)
			*err = one;
		else
			done++;
		if (rc < 0 || i + 1 == n) {
			struct kn_error cerr;

			if (kn_store_commit(s->store, &cerr) < 0 && rc == 0) {
				*err = cerr;
				rc = -EIO;
			}
		}
	}
	kn_job_list_free(rows, n);
	if (rc == 0 && done == 0 && n == 0)
		return verb(s, id, arg, err); /* says why nothing was done */
	return rc;
}
