/*
 * Job arrays under the Kubernetes executor: the elements the server
 * starts together go to the API as one batch/v1 Job with completionMode
 * Indexed, as the Slurm executor submits them as one sbatch --array.
 * Each element stays a kiln job of its own (attempts, task directory,
 * log, checkpoints, outputs); its attempt is one completion index of
 * that Job.
 *
 * start renders the element's own Job (kn_kube_attempt_manifests) and
 * keeps it here; flush, which the server calls after its starts, sorts
 * what it kept and cuts it into runs: elements of one array and one
 * attempt number whose indexes follow each other. A run is one Indexed
 * Job named after its first element's attempt (kiln-JOBID-ATTEMPT, the
 * name that element would have on its own, so no two runs share one),
 * and completion index i is the run's element first+i, whose kiln job
 * is JOBID+i: the server numbers an array's elements in order
 * (core_queue.c). The pod's shim reads its completion index from the
 * annotation batch.kubernetes.io/job-completion-index and sets the
 * element's own KILN_JOB_ID, KILN_ARRAY_INDEX and SLURM_ARRAY_TASK_ID
 * (shimrt/pod.c), so a task sees what it sees in a Job of its own.
 *
 * Elements started at another time form runs of their own, never lost
 * and never added to a Job that was already posted (its completions
 * could grow, but not with indexes of its choosing): the elements a
 * restored server starts again, the ones a hold let go later, and a
 * retry, which kiln's retry policy decides as for any job: its new
 * attempt is a run of one, an Indexed Job of one completion whose
 * element index is set explicitly, so the element's variables stay its
 * own.
 *
 * Files: the run's manifests go to its first element's attempt
 * directory (kube-job.json, then kube-submitted as for any attempt);
 * every other element's attempt directory gets kube-array-run, the path
 * of that directory, written before the manifests, so that a restarted
 * server finds each element's run and adopts the Job, and one that
 * stopped between the two finds no manifests and starts none of them.
 * Attempt directories are the server's own; no pod reaches them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube/internal.h"
#include "kube/kube.h"

#define RUN_POINTER "kube-array-run"
#define RUN_POINTER_MAX 4096

struct element {
	int64_t array_id;
	int attempt;
	int index;
	int64_t job_id;
	int parallel;
	char *attempt_dir;
	/* Its manifests as a Job of its own; NULL when it follows the
	   element kept before it, so it starts no run. */
	json_t *docs;
};

struct kube_runs {
	struct element *v;
	size_t n, cap;
};

struct kube_runs *kube_runs_new(void)
{
	return kn_xcalloc(1, sizeof(struct kube_runs));
}

static void elements_clear(struct kube_runs *r)
{
	for (size_t i = 0; i < r->n; i++) {
		free(r->v[i].attempt_dir);
		json_decref(r->v[i].docs);
	}
	free(r->v);
	r->v = NULL;
	r->n = r->cap = 0;
}

void kube_runs_free(struct kube_runs *r)
{
	if (!r)
		return;
	elements_clear(r);
	free(r);
}

static char *parent_of(const char *path)
{
	const char *slash = strrchr(path, '/');

	return slash ? kn_asprintf("%.*s", (int)(slash - path), path)
		     : kn_xstrdup(".");
}

int kube_runs_add(struct kube_runs *r, const struct kn_kube_exec_config *cfg,
		  const struct kn_kube_task *task, const char *task_dir,
		  struct kn_error *err)
{
	const struct element *prev = r->n ? &r->v[r->n - 1] : NULL;
	struct element *e;
	json_t *docs = NULL;
	int rc;

	/* Started in order, the element after one kept is never a run's
	   first: its Job (the same spec's) is not rendered, nor held, so an
	   array of thousands costs one rendering per run. */
	if (!prev || prev->array_id != task->spec->array.job_id ||
	    prev->attempt != task->attempt ||
	    prev->index + 1 != task->spec->array.index ||
	    prev->job_id + 1 != task->job_id) {
		rc = kn_kube_attempt_manifests(cfg, task, &docs, err);
		if (rc < 0)
			return rc;
	}
	if (r->n == r->cap) {
		r->cap = r->cap ? 2 * r->cap : 64;
		r->v = kn_xrealloc(r->v, r->cap * sizeof(*r->v));
	}
	e = &r->v[r->n++];
	e->array_id = task->spec->array.job_id;
	e->attempt = task->attempt;
	e->index = task->spec->array.index;
	e->job_id = task->job_id;
	e->parallel = task->spec->array.parallel;
	e->attempt_dir = parent_of(task_dir);
	e->docs = docs;
	return 0;
}

static int element_cmp(const void *pa, const void *pb)
{
	const struct element *a = pa, *b = pb;

	if (a->array_id != b->array_id)
		return a->array_id < b->array_id ? -1 : 1;
	if (a->attempt != b->attempt)
		return a->attempt < b->attempt ? -1 : 1;
	return (a->index > b->index) - (a->index < b->index);
}

static json_t *job_spec(json_t *docs)
{
	return json_object_get(json_array_get(docs, 0), "spec");
}

/* The element's own variables go; the shim sets them from the index. */
static void drop_env(json_t *env, const char *name)
{
	json_t *v;
	size_t i;

	json_array_foreach(env, i, v) {
		const char *n = kube_str_at(v, "name", NULL);

		if (n && !strcmp(n, name)) {
			json_array_remove(env, i);
			return;
		}
	}
}

static void add_env_number(json_t *env, const char *name, long long value)
{
	char buf[24];

	snprintf(buf, sizeof(buf), "%lld", value);
	json_array_append_new(env, kube_env_value(name, buf));
}

int kn_kube_array_run(json_t *docs, int64_t array_id, int first_index,
		      int64_t first_job_id, int n, int parallel,
		      struct kn_error *err)
{
	json_t *spec = job_spec(docs), *tmpl, *pod, *env, *deadline;
	char id[24];

	tmpl = json_object_get(spec, "template");
	pod = json_object_get(tmpl, "spec");
	env = json_object_get(json_array_get(json_object_get(pod,
							     "containers"),
					     0),
			      "env");
	if (!json_is_object(pod) || !json_is_array(env) || n < 1 ||
	    json_array_size(docs) != 1)
		return kn_errorf(err, KN_EINVAL, "array",
				 "array: the element's Job is no one-task Job "
				 "to index");
	json_object_set_new(spec, "completionMode", json_string("Indexed"));
	json_object_set_new(spec, "completions", json_integer(n));
	json_object_set_new(spec, "parallelism",
			    json_integer(parallel > 0 && parallel < n ? parallel
								       : n));
	/* One element's failure is its own: backoffLimit would count all
	   of them, and 0 per index leaves each retry to kiln. A pod deleted
	   (an element's cancel) counts as its index's failure, so the Job
	   controller does not start it again. */
	json_object_del(spec, "backoffLimit");
	json_object_set_new(spec, "backoffLimitPerIndex", json_integer(0));
	/* A timeout is each element's, from its pod's start: the Job's
	   deadline would cut elements that wait for the parallel limit. */
	deadline = json_object_get(spec, "activeDeadlineSeconds");
	if (deadline) {
		json_object_set(pod, "activeDeadlineSeconds", deadline);
		json_object_del(spec, "activeDeadlineSeconds");
	}
	snprintf(id, sizeof(id), "%lld", (long long)array_id);
	json_object_set_new(json_object_get(json_object_get(
						    json_array_get(docs, 0),
						    "metadata"),
					    "labels"),
			    KN_KUBE_LABEL_ARRAY_ID, json_string(id));
	json_object_set_new(json_object_get(json_object_get(tmpl, "metadata"),
					    "labels"),
			    KN_KUBE_LABEL_ARRAY_ID, json_string(id));
	drop_env(env, "KILN_JOB_ID");
	drop_env(env, "KILN_ARRAY_INDEX");
	drop_env(env, "SLURM_ARRAY_TASK_ID");
	json_array_append_new(env, kube_env_field("KILN_COMPLETION_INDEX",
						  "metadata.annotations['"
						  KUBE_INDEX_ANNOTATION "']"));
	add_env_number(env, "KILN_ARRAY_RUN_INDEX", first_index);
	add_env_number(env, "KILN_ARRAY_RUN_JOB_ID", (long long)first_job_id);
	add_env_number(env, "KILN_ARRAY_RUN_SIZE", n);
	return 0;
}

/* The run of v[0..n): pointers, then its manifests, then tracked. */
static void run_submit(struct element *v, size_t n, kube_run_track_fn track,
		       void *ctx)
{
	struct element *first = &v[0];
	struct kn_error err;
	char why[256] = "", *path;
	int rc;

	rc = kn_kube_array_run(first->docs, first->array_id, first->index,
			       first->job_id, (int)n, first->parallel, &err);
	if (rc < 0)
		kn_strlcpy(why, err.message, sizeof(why));
	for (size_t i = 1; rc == 0 && i < n; i++) {
		path = kn_asprintf("%s/" RUN_POINTER, v[i].attempt_dir);
		rc = kn_write_file_replace(path, first->attempt_dir,
					   strlen(first->attempt_dir), 0600);
		if (rc < 0)
			snprintf(why, sizeof(why), "cannot write %s: %s", path,
				 strerror(-rc));
		free(path);
	}
	if (rc == 0) {
		rc = kube_manifests_write(first->attempt_dir, first->docs,
					  &err);
		if (rc < 0)
			kn_strlcpy(why, err.message, sizeof(why));
	}
	if (rc < 0)
		kn_log(KN_LOG_ERROR, "kubernetes: array %lld: %s",
		       (long long)first->array_id, why);
	track(ctx, first->attempt_dir, first->docs, rc < 0 ? why : NULL);
	first->docs = NULL;
}

void kube_runs_flush(struct kube_runs *r, kube_run_track_fn track, void *ctx)
{
	size_t i = 0;

	if (r->n > 1) /* r->v is NULL while none was kept */
		qsort(r->v, r->n, sizeof(*r->v), element_cmp);
	while (i < r->n) {
		size_t j = i + 1;

		while (j < r->n && r->v[j].array_id == r->v[i].array_id &&
		       r->v[j].attempt == r->v[i].attempt &&
		       r->v[j].index == r->v[j - 1].index + 1 &&
		       r->v[j].job_id == r->v[j - 1].job_id + 1)
			j++;
		run_submit(&r->v[i], j - i, track, ctx);
		i = j;
	}
	elements_clear(r);
}

char *kube_run_dir_of(const char *task_dir)
{
	char *attempt = parent_of(task_dir);
	char *path = kn_asprintf("%s/" RUN_POINTER, attempt), *text = NULL;
	size_t len = 0;

	if (kn_read_file(path, RUN_POINTER_MAX, &text, &len) == 0 &&
	    len > 1 && text[0] == '/' && strlen(text) == len) {
		free(attempt);
		attempt = text;
		text = NULL;
	}
	KN_FREE_ALL(text, path);
	return attempt;
}
