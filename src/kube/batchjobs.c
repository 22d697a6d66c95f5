/*
 * The server's Kubernetes executor: kiln keeps its queue, attempts and
 * retries; Kubernetes places and runs the pods.
 *
 * One batch/v1 Job per attempt, as the Slurm executor submits one sbatch
 * per attempt: the gang is all-or-nothing in both, and one name
 * (kiln-JOBID-ATTEMPT) finds the attempt again after a restart. Its
 * backoffLimit is 0 so that a failed pod fails the attempt and kiln's own
 * retry policy (with its backoff and its accounting) decides what next.
 * The elements of a job array started together are one Indexed Job
 * instead (indexed.c): one attempt here whose ranks are the elements,
 * each with its own task directory, and a stop of one element deletes
 * its pod rather than the Job.
 *
 * libcurl's easy calls block, and the server's loop must not, so every
 * API call happens on one worker thread. The ops only write files and
 * queue work under a lock:
 *
 *   ATTEMPT_DIR/kube-job.json   the manifests to submit (written by start;
 *                               adopt reads the Job's name back from it)
 *   ATTEMPT_DIR/kube-submitted  the Job's uid once the API accepted it
 *                               (and a gang's Service), so a restarted
 *                               server adopts and never POSTs again
 *   TASK_DIR/kube.json          the task's end, written by the worker once
 *                               the Job and pods say it ended; status
 *                               reads nothing else
 *   TASK_DIR/inputs.json        the inputs the pod's shim fetched (from
 *                               its termination message), written just
 *                               before kube.json
 *   TASK_DIR/output.log         the pod's log, fetched every fifth pass
 *                               while it runs and once at its end
 *   TASK_DIR/stop.json          a stop asked for (as under Slurm)
 *
 * The worker lists the namespace's kiln Jobs and pods once a pass, every
 * second by default, while attempts are live (two requests, whatever the
 * number of attempts) rather than keeping watches: a watch per kind
 * would need a thread of its own to let submits and deletes through, and
 * a list is its own resync, with no resourceVersion to lose. After each
 * pass the same worker keeps the deployments in step (deployments.c).
 *
 * Pods run their task under `kiln shim --kube` (render.c), which syncs
 * the checkpoints, fetches the job's inputs (KILN_INPUTS here) and
 * uploads its outputs itself, and reports the last checkpoint, the
 * inputs' digests and the outputs' manifest digest in the container's
 * termination message; the task's state carries them to the server. The
 * store's credentials reach the pods through a Secret the worker writes
 * before its first submit, never inline in a manifest.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kube/internal.h"
#include "kube/kube.h"

/* A running pod's log is fetched again after this many passes' time. */
#define LOG_EVERY_POLLS 5
/* The log kept of a pod: its last bytes are what `kiln logs` serves. */
#define LOG_MAX_BYTES (16 * 1024 * 1024)
/* Finished Jobs are the API's to delete; kiln has read them by then. */
#define TTL_AFTER_FINISHED_S 3600
/* The same API failure is logged again after this long at most. */
#define WARN_EVERY_MS 30000
/* How long a stop waits for session bridges to see their sockets close. */
#define BRIDGES_WAIT_MS 5000
#define MANAGED_SELECTOR "labelSelector=app.kubernetes.io%2Fmanaged-by%3Dkiln"
#define STATE_FILE "kube.json"
#define SUBMITTED_FILE "kube-submitted"
#define INPUTS_FILE "inputs.json"
#define STATE_MAX 4096
#define MANIFEST_MAX (4 * 1024 * 1024)

struct attempt {
	char *dir;         /* the attempt directory */
	char name[64];     /* the Job's */
	int ntasks;
	json_t *manifests; /* the Job, then the Service of a gang */
	int64_t grace_s;   /* the pods' terminationGracePeriodSeconds */
	bool *ended;       /* per rank: kube.json says so */
	int64_t *log_at;   /* per rank: last log fetch (monotonic ms) */
	/* Under the lock: set by the ops, cleared by the worker. */
	bool submit;
	bool delete_asked;
	int64_t delete_grace_s;
	/* Written by the worker alone (deleted under the lock). */
	bool submitted;
	bool deleted;
	/* A job array's run of elements (indexed.c): rank r is the element
	   whose kiln job is first_job + r, its attempt run_attempt, its
	   task directory under tasks_root. Each rank's stop moves from
	   STOP_NEW (asked) to STOP_ASKED (flushed, for the worker) under
	   the lock: a whole array's cancel reaches the worker at once. */
	bool run;
	int64_t first_job;
	int run_attempt;
	char *tasks_root;
	unsigned char *stop;
	bool *stopping; /* the worker's copy of stop, each pass */
	struct attempt *next;
};

enum { STOP_NONE, STOP_NEW, STOP_ASKED };

struct kube_exec {
	struct kn_kube_exec_config cfg; /* strings owned */
	struct kn_kube_client *client;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	volatile int stop;
	bool work;                  /* queued since the worker last looked */
	struct attempt *attempts;   /* prepended under the lock */
	char last_warning[256];
	int64_t warned_at;
	json_t *secret;             /* to write first; NULL once written */
	struct kube_runs *runs;     /* array elements until the flush */
	/* The deployments the same worker keeps in step. */
	struct kube_deploys *deploys;
	struct kube_bridges *bridges; /* sessions and port connections */
};

/* ---- the manifests ---- */

static void set_label(json_t *meta, const char *key, const char *value)
{
	json_t *labels = json_object_get(meta, "labels");

	if (!json_is_object(labels)) {
		labels = json_object();
		json_object_set_new(meta, "labels", labels);
	}
	json_object_set_new(labels, key, json_string(value));
}

static void add_env_value(void *env, const char *name, long long value)
{
	char buf[24];

	snprintf(buf, sizeof(buf), "%lld", value);
	json_array_append_new(env, kube_env_value(name, buf));
}

int kn_kube_attempt_manifests(const struct kn_kube_exec_config *cfg,
			      const struct kn_kube_task *task, json_t **out,
			      struct kn_error *err)
{
	struct kn_job_spec named = *task->spec;
	struct kn_kube_render_opts opts = {0};
	char name[64], id[32], attempt[16];
	json_t *docs = NULL, *job, *tmeta, *container, *env;
	size_t i;
	json_t *doc;
	int rc;

	snprintf(name, sizeof(name), "kiln-%lld-%d", (long long)task->job_id,
		 task->attempt);
	snprintf(id, sizeof(id), "%lld", (long long)task->job_id);
	snprintf(attempt, sizeof(attempt), "%d", task->attempt);
	/* kiln's names may repeat; a Job's may not. */
	named.name = name;
	/* An array's element renders as a Job of its own (its place goes in
	   as env below); kn_kube_array_run makes a run of elements of the
	   first's, an Indexed Job whose indexes are elements. */
	named.array.count = 0;
	opts.image = task->spec->image ? task->spec->image : cfg->image;
	opts.namespace_ = cfg->namespace_;
	opts.scheduler_name = cfg->scheduler_name;
	opts.products = cfg->products;
	opts.shim_image = cfg->shim_image ? cfg->shim_image : opts.image;
	opts.store_url = cfg->store_url;
	opts.inputs = task->inputs;
	opts.requires = task->requires;
	rc = kn_kube_render_job(&named, &opts, &docs, err);
	if (rc < 0)
		return rc;
	json_array_foreach(docs, i, doc) {
		json_t *meta = json_object_get(doc, "metadata");
		set_label(meta, KN_KUBE_LABEL_JOB_ID, id);
		set_label(meta, KN_KUBE_LABEL_ATTEMPT, attempt);
		json_object_set_new(meta, "annotations",
				    json_pack("{s:s}", "kiln.dev/name",
					      task->spec->name));
	}
	job = json_array_get(docs, 0);
	json_object_set_new(json_object_get(job, "spec"), "backoffLimit",
			    json_integer(0));
	json_object_set_new(json_object_get(job, "spec"),
			    "ttlSecondsAfterFinished",
			    json_integer(TTL_AFTER_FINISHED_S));
	tmeta = json_object_get(
		json_object_get(json_object_get(job, "spec"), "template"),
		"metadata");
	set_label(tmeta, KN_KUBE_LABEL_JOB_ID, id);
	set_label(tmeta, KN_KUBE_LABEL_ATTEMPT, attempt);
	container = json_array_get(
		json_object_get(
			json_object_get(json_object_get(json_object_get(job,
									"spec"),
							"template"),
					"spec"),
			"containers"),
		0);
	env = json_object_get(container, "env");
	json_array_append_new(env, kube_env_value("KILN_JOB_ID", id));
	json_array_append_new(env, kube_env_value("KILN_ATTEMPT", attempt));
	json_array_append_new(env, kube_env_value("KILN_JOB_NAME",
						  task->spec->name));
	if (task->spec->array.count)
		kn_job_array_env(&task->spec->array, add_env_value, env);
	if (task->spec->devenv.set)
		json_array_append_new(env, kube_env_value("KILN_DEVENV",
							  task->spec->name));
	*out = docs;
	return 0;
}

/* ---- files ---- */

static char *attempt_dir_of(const char *task_dir)
{
	const char *slash = strrchr(task_dir, '/');

	return slash ? kn_asprintf("%.*s", (int)(slash - task_dir), task_dir)
		     : kn_xstrdup(".");
}

static int write_view(const char *task_dir,
		      const struct kn_kube_task_view *v)
{
	json_t *doc = json_pack("{s:b, s:i, s:i, s:s, s:b, s:I, s:I, s:s, s:s, "
				"s:I, s:s, s:I, s:i, s:s}",
				"ended", v->ended, "exit_code", v->exit_code,
				"signal", v->signal, "reason", v->reason,
				"preempted", v->preempted, "started_at_ms",
				(json_int_t)v->started_at_ms, "ended_at_ms",
				(json_int_t)v->ended_at_ms, "pod", v->pod,
				"checkpoint", v->checkpoint,
				"checkpoint_at_ms",
				(json_int_t)v->checkpoint_at_ms, "restored",
				v->restored, "restore_ms",
				(json_int_t)v->restore_ms, "outputs_files",
				v->outputs_files, "outputs_manifest_sha256",
				v->outputs_manifest_sha256);
	char *text = json_dumps(doc, JSON_COMPACT);
	char *path = kn_asprintf("%s/" STATE_FILE, task_dir);
	char *inputs = kn_asprintf("%s/" INPUTS_FILE, task_dir);
	int rc;

	/* The server creates the later ranks' directories just after rank
	   0 submitted: a fast failure can come first. */
	rc = kn_mkdir_p(task_dir, 0700);
	/* Before the end: the server records the inputs the pod fetched
	   from where a local task's shim leaves them (jobs.c). */
	if (rc == 0 && v->inputs[0])
		rc = kn_write_file_replace(inputs, v->inputs,
					   strlen(v->inputs), 0600);
	if (rc == 0)
		rc = kn_write_file_replace(path, text, strlen(text), 0600);
	free(inputs);

	KN_FREE_ALL(path, text);
	json_decref(doc);
	return rc;
}

/* true when TASK_DIR/kube.json records the task's end. */
static bool view_read(const char *task_dir, struct kn_task_status *st)
{
	char *path = kn_asprintf("%s/" STATE_FILE, task_dir), *text = NULL;
	json_t *doc = NULL;
	bool done = false;

	if (kn_read_file(path, STATE_MAX, &text, NULL) == 0 &&
	    (doc = json_loads(text, 0, NULL)) != NULL &&
	    json_is_true(json_object_get(doc, "ended"))) {
		memset(st, 0, sizeof(*st));
		st->ended = true;
		st->exit_code = (int)json_integer_value(
			json_object_get(doc, "exit_code"));
		st->signal = (int)json_integer_value(
			json_object_get(doc, "signal"));
		st->preempted = json_is_true(json_object_get(doc, "preempted"));
		st->started_at_ms = json_integer_value(
			json_object_get(doc, "started_at_ms"));
		st->ended_at_ms = json_integer_value(
			json_object_get(doc, "ended_at_ms"));
		st->checkpoint_at_ms = json_integer_value(
			json_object_get(doc, "checkpoint_at_ms"));
		st->restore_ms = json_integer_value(
			json_object_get(doc, "restore_ms"));
		st->outputs_files = (int)json_integer_value(
			json_object_get(doc, "outputs_files"));
		if (json_is_string(json_object_get(doc,
						   "outputs_manifest_sha256")))
			kn_strlcpy(st->outputs_manifest_sha256,
				   json_string_value(json_object_get(
					   doc, "outputs_manifest_sha256")),
				   sizeof(st->outputs_manifest_sha256));
		if (json_is_string(json_object_get(doc, "checkpoint")))
			kn_strlcpy(st->checkpoint, json_string_value(
					   json_object_get(doc, "checkpoint")),
				   sizeof(st->checkpoint));
		if (json_is_string(json_object_get(doc, "restored")))
			kn_strlcpy(st->restored, json_string_value(
					   json_object_get(doc, "restored")),
				   sizeof(st->restored));
		kn_strlcpy(st->reason,
			   json_string_value(json_object_get(doc, "reason")) ?
				   json_string_value(json_object_get(doc,
								     "reason")) :
				   "",
			   sizeof(st->reason));
		done = true;
	}
	json_decref(doc);
	KN_FREE_ALL(text, path);
	return done;
}

static char *task_dir_of(const struct attempt *a, int rank)
{
	if (a->run)
		return kn_asprintf("%s/%lld/%d/0", a->tasks_root,
				   (long long)(a->first_job + rank),
				   a->run_attempt);
	return kn_asprintf("%s/%d", a->dir, rank);
}

/* The rank of the run a that task_dir (TASKS/JOB/ATTEMPT/0) is, or -1. */
static int run_rank(const struct attempt *a, const char *task_dir)
{
	char *attempt = attempt_dir_of(task_dir);
	char *job_dir = attempt_dir_of(attempt), *mine, *end = NULL;
	const char *base = strrchr(job_dir, '/');
	long long job = base ? strtoll(base + 1, &end, 10) : -1;
	int rank = -1;

	if (base && end && !*end && job >= a->first_job &&
	    job - a->first_job < a->ntasks) {
		mine = task_dir_of(a, (int)(job - a->first_job));
		if (!strcmp(mine, task_dir))
			rank = (int)(job - a->first_job);
		free(mine);
	}
	KN_FREE_ALL(job_dir, attempt);
	return rank;
}

/* ---- the worker ---- */

static void warn(struct kube_exec *ex, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Log an API failure; the same one again only after WARN_EVERY_MS. */
static void warn(struct kube_exec *ex, const char *fmt, ...)
{
	char msg[256];
	int64_t now = kn_mono_ms();
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (!strcmp(msg, ex->last_warning) && ex->warned_at &&
	    now - ex->warned_at < WARN_EVERY_MS)
		return;
	kn_strlcpy(ex->last_warning, msg, sizeof(ex->last_warning));
	ex->warned_at = now;
	kn_log(KN_LOG_WARN, "kubernetes: %s", msg);
}

/* "HTTP 403: jobs.batch is forbidden: ..." from a Status answer. */
static void http_error(long status, json_t *answer, char *out, size_t len)
{
	const char *msg = json_string_value(json_object_get(answer, "message"));

	snprintf(out, len, "HTTP %ld%s%s", status, msg ? ": " : "",
		 msg ? msg : "");
}

/* A transport error's cause alone ("Couldn't connect to server"): the
   request and URL before it would fill a task's reason. */
static const char *cause_of(const struct kn_error *err)
{
	const char *p = strrchr(err->message, ':');

	return p && p[1] == ' ' ? p + 2 : err->message;
}

/* Every rank not yet ended ends with reason (the attempt never ran). */
static void fail_attempt(struct attempt *a, const char *reason)
{
	struct kn_kube_task_view v;

	memset(&v, 0, sizeof(v));
	kube_view_ended(&v, -1, 0, reason);
	v.ended_at_ms = kn_now_ms();
	for (int r = 0; r < a->ntasks; r++) {
		char *dir = task_dir_of(a, r);
		if (!a->ended[r] && write_view(dir, &v) == 0)
			a->ended[r] = true;
		free(dir);
	}
}

/* Queue the Job's deletion. Under the lock. */
static void ask_delete(struct kube_exec *ex, struct attempt *a,
		       int64_t grace_s)
{
	if (!a->delete_asked && !a->deleted) {
		a->delete_asked = true;
		a->delete_grace_s = grace_s;
	}
	ex->work = true;
	pthread_cond_signal(&ex->wake);
}

/*
 * Write the store's credentials to the pods' Secret: POST, and PUT over
 * one that exists (credentials rotate). true once it is written.
 */
static bool write_secret(struct kube_exec *ex)
{
	const char *ns = ex->cfg.namespace_;
	char *path = kn_asprintf("/api/v1/namespaces/%s/secrets", ns);
	json_t *answer = NULL;
	struct kn_error err;
	long status = 0;
	bool done = false;

	if (kn_kube_post(ex->client, path, ex->secret, &status, &answer,
			 &err) < 0) {
		warn(ex, "cannot write Secret %s: %s", KN_KUBE_STORE_SECRET,
		     err.message);
		goto out;
	}
	if (status == 409) {
		free(path);
		path = kn_asprintf("/api/v1/namespaces/%s/secrets/%s", ns,
				   KN_KUBE_STORE_SECRET);
		json_decref(answer);
		answer = NULL;
		if (kn_kube_put(ex->client, path, ex->secret, &status, &answer,
				&err) < 0) {
			warn(ex, "cannot write Secret %s: %s",
			     KN_KUBE_STORE_SECRET, err.message);
			goto out;
		}
	}
	if (status == 200 || status == 201) {
		done = true;
		kn_log(KN_LOG_INFO, "kubernetes: store credentials written to "
		       "Secret %s/%s", ns, KN_KUBE_STORE_SECRET);
	} else {
		char detail[200];
		http_error(status, answer, detail, sizeof(detail));
		warn(ex, "cannot write Secret %s: %s", KN_KUBE_STORE_SECRET,
		     detail);
	}
out:
	json_decref(answer);
	free(path);
	return done;
}

/* The Secret of the store credentials in this environment, or NULL. */
static json_t *secret_from_env(const char *ns)
{
	static const char *const keys[] = {
		"AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT",
		"AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN",
	};
	json_t *data = json_object();

	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (getenv(keys[i]) && *getenv(keys[i]))
			json_object_set_new(data, keys[i],
					    json_string(getenv(keys[i])));
	if (!json_object_size(data)) {
		json_decref(data);
		return NULL;
	}
	/* stringData: the API server encodes it into data. */
	return json_pack("{s:s, s:s, s:{s:s, s:s, s:{s:s}}, s:s, s:o}",
			 "apiVersion", "v1", "kind", "Secret", "metadata",
			 "name", KN_KUBE_STORE_SECRET, "namespace", ns,
			 "labels", KN_KUBE_LABEL_MANAGED, "kiln", "type",
			 "Opaque", "stringData", data);
}

static void submit(struct kube_exec *ex, struct attempt *a)
{
	const char *ns = ex->cfg.namespace_;
	json_t *job = json_array_get(a->manifests, 0);
	json_t *svc = json_array_get(a->manifests, 1), *answer = NULL;
	char *path = kn_asprintf("/apis/batch/v1/namespaces/%s/jobs", ns);
	char why[256], *marker = NULL;
	const char *uid;
	struct kn_error err;
	long status = 0;

	if (kn_kube_post(ex->client, path, job, &status, &answer, &err) < 0) {
		kn_log(KN_LOG_ERROR, "kubernetes: %s", err.message);
		snprintf(why, sizeof(why), "cannot submit to Kubernetes: %.200s",
			 cause_of(&err));
		goto failed;
	}
	if (status == 409) {
		/* A submit the crash hid: it is ours (kiln-JOBID-ATTEMPT). */
		free(path);
		path = kn_asprintf("/apis/batch/v1/namespaces/%s/jobs/%s", ns,
				   a->name);
		json_decref(answer);
		answer = NULL;
		if (kn_kube_get(ex->client, path, &status, &answer, &err) < 0) {
			kn_log(KN_LOG_ERROR, "kubernetes: %s", err.message);
			snprintf(why, sizeof(why), "cannot submit to "
				 "Kubernetes: %.200s", cause_of(&err));
			goto failed;
		}
	}
	if (status != 200 && status != 201) {
		char detail[200];
		http_error(status, answer, detail, sizeof(detail));
		snprintf(why, sizeof(why), "cannot submit to Kubernetes: %s",
			 detail);
		goto failed;
	}
	uid = kube_str_at(answer, "metadata", "uid");
	a->submitted = true;
	if (svc) {
		/* Deleted with its Job by the garbage collector. */
		json_t *body = json_deep_copy(svc), *created = NULL;

		json_object_set_new(
			json_object_get(body, "metadata"), "ownerReferences",
			json_pack("[{s:s, s:s, s:s, s:s}]", "apiVersion",
				  "batch/v1", "kind", "Job", "name", a->name,
				  "uid", uid ? uid : ""));
		free(path);
		path = kn_asprintf("/api/v1/namespaces/%s/services", ns);
		if (kn_kube_post(ex->client, path, body, &status, &created,
				 &err) < 0) {
			snprintf(why, sizeof(why), "cannot create the gang's "
				 "Service: %.200s", err.message);
		} else if (status != 201 && status != 200 && status != 409) {
			char detail[200];
			http_error(status, created, detail, sizeof(detail));
			snprintf(why, sizeof(why), "cannot create the gang's "
				 "Service: %s", detail);
		} else {
			why[0] = '\0';
		}
		json_decref(body);
		json_decref(created);
		if (why[0] && ex->stop)
			goto out; /* posted again (409) by the next start */
		if (why[0]) {
			/* Rank 0 would have no name: the attempt cannot run. */
			kn_log(KN_LOG_ERROR, "kubernetes: %s: %s", a->name, why);
			fail_attempt(a, why);
			pthread_mutex_lock(&ex->lock);
			ask_delete(ex, a, 0);
			pthread_mutex_unlock(&ex->lock);
			goto out;
		}
	}
	/* Once the Service is there too: a restart before this posts both
	   again, and their 409s say they exist. */
	marker = kn_asprintf("%s/" SUBMITTED_FILE, a->dir);
	kn_write_file_replace(marker, uid ? uid : "", uid ? strlen(uid) : 0,
			      0600);
	kn_log(KN_LOG_INFO, "kubernetes: submitted Job %s/%s", ns, a->name);
	goto out;
failed:
	if (ex->stop) {
		/* Cut short by the server's stop: not the attempt's failure.
		   Without kube-submitted, the next start posts it again. */
		goto out;
	}
	kn_log(KN_LOG_ERROR, "kubernetes: Job %s/%s: %s", ns, a->name, why);
	fail_attempt(a, why);
out:
	json_decref(answer);
	KN_FREE_ALL(marker, path);
}

/* DELETE path, what names it ("Job kiln-7-1"); Foreground: its pods
   go first. true once the API has it gone or going. */
static bool delete_object(struct kube_exec *ex, const char *path,
			  const char *what, int64_t grace_s, bool foreground)
{
	json_t *body = json_pack("{s:s, s:s}", "kind", "DeleteOptions",
				 "apiVersion", "v1"), *answer = NULL;
	struct kn_error err;
	long status = 0;
	bool done = false;

	if (foreground)
		json_object_set_new(body, "propagationPolicy",
				    json_string("Foreground"));
	if (grace_s >= 0)
		json_object_set_new(body, "gracePeriodSeconds",
				    json_integer(grace_s));
	if (kn_kube_delete(ex->client, path, body, &status, &answer, &err) < 0) {
		warn(ex, "cannot delete %s: %s", what, err.message);
	} else if (status == 200 || status == 202 || status == 404) {
		done = true;
		kn_log(KN_LOG_INFO, "kubernetes: deleted %s (grace %llds)",
		       what, (long long)grace_s);
	} else {
		char detail[200];
		http_error(status, answer, detail, sizeof(detail));
		warn(ex, "cannot delete %s: %s", what, detail);
	}
	json_decref(body);
	json_decref(answer);
	return done;
}

static void delete_job(struct kube_exec *ex, struct attempt *a,
		       int64_t grace_s)
{
	char *path = kn_asprintf("/apis/batch/v1/namespaces/%s/jobs/%s",
				 ex->cfg.namespace_, a->name);
	char *what = kn_asprintf("Job %s", a->name);
	bool done = delete_object(ex, path, what, grace_s, true);

	pthread_mutex_lock(&ex->lock);
	if (done) {
		a->deleted = true;
	} else {
		/* Asked again on the next turn. */
		a->delete_asked = true;
		a->delete_grace_s = grace_s;
	}
	pthread_mutex_unlock(&ex->lock);
	KN_FREE_ALL(what, path);
}

/*
 * The pod of a run's element asked to stop, unless it has ended or is
 * going: the Job controller counts a deleted pod as its index's failure
 * and, with backoffLimitPerIndex 0, starts no other. Also a pod that
 * appears after the stop (the element was waiting for the parallel
 * limit) goes as soon as a list shows it.
 */
static void stop_pod(struct kube_exec *ex, json_t *pod, int64_t grace_s)
{
	const char *phase = kube_str_at(pod, "status", "phase");
	const char *name = kube_str_at(pod, "metadata", "name");
	char *path, *what;

	if (!name || kube_str_at(pod, "metadata", "deletionTimestamp") ||
	    (phase && (!strcmp(phase, "Succeeded") ||
		       !strcmp(phase, "Failed"))))
		return;
	path = kn_asprintf("/api/v1/namespaces/%s/pods/%s", ex->cfg.namespace_,
			   name);
	what = kn_asprintf("pod %s", name);
	delete_object(ex, path, what, grace_s, false);
	KN_FREE_ALL(what, path);
}

/*
 * Bring TASK_DIR/output.log up to the pod's log. The file grows in place
 * (a follower of `kiln logs -f` reads on from its offset) as long as the
 * pod's log is at least as long; a shorter one (the kubelet rotated it)
 * replaces it.
 */
static void write_log(const char *task_dir, const char *text, size_t len)
{
	char *path = kn_asprintf("%s/" KN_LOG_FILE, task_dir);
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	struct stat st;
	size_t from = 0;

	if (fd < 0) {
		free(path);
		return;
	}
	if (fstat(fd, &st) == 0 && (size_t)st.st_size <= len)
		from = (size_t)st.st_size;
	else if (ftruncate(fd, 0) < 0)
		from = len; /* nothing sensible to write */
	while (from < len) {
		ssize_t n = pwrite(fd, text + from, len - from, (off_t)from);
		if (n <= 0)
			break;
		from += (size_t)n;
	}
	close(fd);
	free(path);
}

static void fetch_log(struct kube_exec *ex, const char *task_dir,
		      const char *pod)
{
	char *path = kn_asprintf("/api/v1/namespaces/%s/pods/%s/log"
				 "?container=task&limitBytes=%d",
				 ex->cfg.namespace_, pod, LOG_MAX_BYTES);
	char *text = NULL;
	struct kn_error err;
	long status = 0;
	size_t len = 0;

	if (kn_kube_get_text(ex->client, path, LOG_MAX_BYTES + 4096, &status,
			     &text, &len, &err) < 0) {
		warn(ex, "cannot read the log of pod %s: %s", pod, err.message);
	} else if (status == 200) {
		write_log(task_dir, text, len);
	} else if (status != 404 && status != 400) {
		/* 400: the container has not started; 404: the pod is gone. */
		warn(ex, "cannot read the log of pod %s: HTTP %ld", pod,
		     status);
	}
	KN_FREE_ALL(text, path);
}

static int list(struct kube_exec *ex, const char *path, json_t **out)
{
	struct kn_error err;
	long status = 0;

	*out = NULL;
	if (kn_kube_get(ex->client, path, &status, out, &err) < 0) {
		warn(ex, "cannot follow Jobs: %s", err.message);
		return -1;
	}
	if (status != 200) {
		char detail[200];
		http_error(status, *out, detail, sizeof(detail));
		warn(ex, "cannot follow Jobs: GET %s: %s", path, detail);
		json_decref(*out);
		*out = NULL;
		return -1;
	}
	return 0;
}

/*
 * A run's stops, read into a->stopping before its ranks are: when every
 * element not yet ended is stopping (the array's cancel) the Job goes as
 * a whole; else each stopping element's pod goes, also one that ended in
 * kiln before Kubernetes created its pod (the parallel limit) and whose
 * pod appears later. true when some element is stopping.
 */
static bool run_stops(struct kube_exec *ex, struct attempt *a, json_t **by)
{
	bool all = true, any = false;
	int64_t grace;

	pthread_mutex_lock(&ex->lock);
	for (int r = 0; r < a->ntasks; r++)
		a->stopping[r] = a->stop[r] == STOP_ASKED;
	grace = a->delete_grace_s;
	pthread_mutex_unlock(&ex->lock);
	for (int r = 0; r < a->ntasks; r++) {
		any |= a->stopping[r];
		if (!a->ended[r] && !a->stopping[r])
			all = false;
	}
	if (!any || a->deleted)
		return any;
	if (all) {
		delete_job(ex, a, grace);
		return any;
	}
	for (int r = 0; r < a->ntasks; r++)
		if (a->stopping[r])
			stop_pod(ex, by[r], grace);
	return any;
}

static bool attempt_over(const struct attempt *a)
{
	for (int r = 0; r < a->ntasks; r++)
		if (!a->ended[r])
			return false;
	return true;
}

static void follow(struct kube_exec *ex, struct attempt *head)
{
	char *jobs_path = kn_asprintf("/apis/batch/v1/namespaces/%s/jobs?%s",
				      ex->cfg.namespace_, MANAGED_SELECTOR);
	char *pods_path = kn_asprintf("/api/v1/namespaces/%s/pods?%s",
				      ex->cfg.namespace_, MANAGED_SELECTOR);
	json_t *jobs = NULL, *pods = NULL;
	int64_t now = kn_mono_ms();

	if (list(ex, jobs_path, &jobs) < 0 || list(ex, pods_path, &pods) < 0)
		goto out;
	for (struct attempt *a = head; a; a = a->next) {
		json_t *job, *mine, **by = NULL;
		bool stops = false;

		if (!a->submitted)
			continue;
		job = kube_item_named(jobs, a->name);
		mine = kube_items_labelled(pods, KN_KUBE_LABEL_JOB, a->name);
		if (a->run) {
			/* Each element's pod found once, not per element. */
			by = kube_pods_by_index(mine, a->ntasks);
			stops = run_stops(ex, a, by);
		}
		for (int r = 0; r < a->ntasks; r++) {
			bool stopping = a->run && a->stopping[r];
			json_t *rank_pods = mine;
			struct kn_kube_task_view v;
			char *dir;

			if (a->ended[r])
				continue;
			if (by) {
				rank_pods = json_array();
				if (by[r])
					json_array_append(rank_pods, by[r]);
			}
			kn_kube_task_state(job, rank_pods, r,
					   a->deleted || stopping, &v);
			if (by)
				json_decref(rank_pods);
			if (stopping && !a->deleted && v.ended && !v.pod[0])
				snprintf(v.reason, sizeof(v.reason),
					 "stopped: its pod deleted");
			dir = task_dir_of(a, r);
			if (v.pod[0] && (v.ended || (v.running &&
						     now - a->log_at[r] >=
							     LOG_EVERY_POLLS *
							     ex->cfg.poll_ms))) {
				fetch_log(ex, dir, v.pod);
				a->log_at[r] = now;
			}
			if (v.ended) {
				if (!v.ended_at_ms)
					v.ended_at_ms = kn_now_ms();
				if (write_view(dir, &v) == 0)
					a->ended[r] = true;
			}
			/* The attempt is over for kiln, which requeues it: no
			   pod of it may run beside the next attempt's. A run's
			   disrupted pod fails its index, which no other pod
			   takes up (backoffLimitPerIndex 0). */
			if (v.preempted && !a->deleted && !a->run)
				delete_job(ex, a, a->grace_s);
			free(dir);
		}
		/* Over for kiln while Kubernetes still owes a stopped
		   element's pod: the Job goes, so that none starts. */
		if (stops && !a->deleted && job && attempt_over(a) &&
		    !kube_condition_true(job, "Complete") &&
		    !kube_condition_true(job, "Failed"))
			delete_job(ex, a, 0);
		free(by);
		json_decref(mine);
	}
out:
	json_decref(jobs);
	json_decref(pods);
	KN_FREE_ALL(jobs_path, pods_path);
}

static void attempt_free(struct attempt *a)
{
	json_decref(a->manifests);
	KN_FREE_ALL(a->ended, a->log_at, a->stop, a->stopping, a->tasks_root,
		    a->dir, a);
}

static void *worker(void *arg)
{
	struct kube_exec *ex = arg;
	struct attempt *head;

	pthread_mutex_lock(&ex->lock);
	while (!ex->stop) {
		if (!ex->work) {
			struct timespec until = kn_realtime_in(ex->cfg.poll_ms);

			pthread_cond_timedwait(&ex->wake, &ex->lock, &until);
		}
		if (ex->stop)
			break;
		ex->work = false;
		head = ex->attempts;
		pthread_mutex_unlock(&ex->lock);
		/* Before any pod could need it; tried again each turn. */
		if (ex->secret && write_secret(ex)) {
			json_decref(ex->secret);
			ex->secret = NULL;
		}
		/* Only this thread frees attempts: the list is safe to walk. */
		for (struct attempt *a = head; a && !ex->stop; a = a->next) {
			bool sub, del;
			int64_t grace;

			pthread_mutex_lock(&ex->lock);
			sub = a->submit;
			del = a->delete_asked;
			grace = a->delete_grace_s;
			a->submit = a->delete_asked = false;
			pthread_mutex_unlock(&ex->lock);
			if (sub)
				submit(ex, a);
			if (del && a->submitted && !a->deleted)
				delete_job(ex, a, grace);
		}
		if (head && !ex->stop)
			follow(ex, head);
		if (!ex->stop)
			kube_deploy_turn(ex->deploys, ex->client, ex->cfg.namespace_,
					 &ex->stop);
		pthread_mutex_lock(&ex->lock);
		for (struct attempt **p = &ex->attempts; *p;) {
			struct attempt *a = *p;
			if (attempt_over(a) && !a->submit && !a->delete_asked) {
				*p = a->next;
				attempt_free(a);
			} else {
				p = &a->next;
			}
		}
	}
	pthread_mutex_unlock(&ex->lock);
	return NULL;
}

/* ---- the ops (the server's loop thread) ---- */

/* The attempt in dir, or NULL. Under the lock. */
static struct attempt *attempt_find(struct kube_exec *ex, const char *dir)
{
	for (struct attempt *a = ex->attempts; a; a = a->next)
		if (!strcmp(a->dir, dir))
			return a;
	return NULL;
}

/* A job array's run, from its Job's labels: its ranks are elements. */
static void run_init(struct attempt *a, json_t *job)
{
	json_t *labels = json_object_get(json_object_get(job, "metadata"),
					 "labels");
	const char *first = json_string_value(json_object_get(
		labels, KN_KUBE_LABEL_JOB_ID));
	const char *attempt = json_string_value(json_object_get(
		labels, KN_KUBE_LABEL_ATTEMPT));
	char *job_dir = attempt_dir_of(a->dir);

	a->run = json_object_get(labels, KN_KUBE_LABEL_ARRAY_ID) && first &&
		 attempt;
	a->first_job = a->run ? strtoll(first, NULL, 10) : 0;
	a->run_attempt = a->run ? atoi(attempt) : 0;
	a->tasks_root = attempt_dir_of(job_dir);
	/* A stop adopted from stop.json: the pods' own grace. */
	a->delete_grace_s = a->grace_s;
	a->stop = kn_xcalloc((size_t)a->ntasks, sizeof(*a->stop));
	a->stopping = kn_xcalloc((size_t)a->ntasks, sizeof(*a->stopping));
	free(job_dir);
}

/*
 * Track an attempt (taking manifests over, so that no other thread holds
 * them); its ranks' kube.json say which have ended, and a run's
 * stop.json which were asked to stop. why: it cannot be submitted, and
 * its ranks end so.
 */
static void attempt_add(struct kube_exec *ex, const char *dir,
			json_t *manifests, bool to_submit, const char *why)
{
	json_t *job = json_array_get(manifests, 0);
	json_t *grace = json_object_get(json_object_get(json_object_get(
		json_object_get(job, "spec"), "template"), "spec"),
		"terminationGracePeriodSeconds");
	struct attempt *a = kn_xcalloc(1, sizeof(*a));
	struct kn_task_status st;

	a->dir = kn_xstrdup(dir);
	kn_strlcpy(a->name, kube_str_at(job, "metadata", "name") ?
			    kube_str_at(job, "metadata", "name") : "",
		   sizeof(a->name));
	a->ntasks = (int)json_integer_value(json_object_get(
		json_object_get(job, "spec"), "completions"));
	if (a->ntasks < 1)
		a->ntasks = 1;
	a->manifests = manifests;
	a->grace_s = json_is_integer(grace) ? json_integer_value(grace) : -1;
	a->ended = kn_xcalloc((size_t)a->ntasks, sizeof(*a->ended));
	a->log_at = kn_xcalloc((size_t)a->ntasks, sizeof(*a->log_at));
	run_init(a, job);
	for (int r = 0; r < a->ntasks; r++) {
		char *t = task_dir_of(a, r);
		char *stop = kn_asprintf("%s/stop.json", t);

		a->ended[r] = view_read(t, &st);
		if (a->run && access(stop, F_OK) == 0)
			a->stop[r] = STOP_ASKED;
		KN_FREE_ALL(stop, t);
	}
	a->submit = to_submit && !why;
	a->submitted = !to_submit;
	if (why)
		fail_attempt(a, why);
	pthread_mutex_lock(&ex->lock);
	a->next = ex->attempts;
	ex->attempts = a;
	ex->work = true;
	pthread_cond_signal(&ex->wake);
	pthread_mutex_unlock(&ex->lock);
}

int kube_manifests_write(const char *dir, json_t *docs, struct kn_error *err)
{
	char *path = kn_asprintf("%s/" KUBE_MANIFEST_FILE, dir);
	char *text = json_dumps(docs, JSON_COMPACT);
	int rc = kn_write_text_replace(path, text, 0600, err);

	KN_FREE_ALL(text, path);
	return rc;
}

/* The manifests kube_manifests_write left in dir, or NULL. */
static json_t *manifests_read(const char *dir)
{
	char *path = kn_asprintf("%s/" KUBE_MANIFEST_FILE, dir), *text = NULL;
	json_t *docs = NULL;

	if (kn_read_file(path, MANIFEST_MAX, &text, NULL) == 0)
		docs = json_loads(text, 0, NULL);
	KN_FREE_ALL(text, path);
	return docs;
}

static int kube_start(struct kn_executor *self, const struct kn_task_launch *l,
		      struct kn_task_proc *out, struct kn_error *err)
{
	struct kube_exec *ex = self->impl;
	struct kn_kube_task task = {
		.spec = l->spec,
		.job_id = l->job_id,
		.attempt = l->attempt,
		.rank = l->rank,
		.inputs = l->inputs,
		.requires = l->requires,
	};
	json_t *docs = NULL;
	char *dir;
	int rc;

	if (!l->spec)
		return kn_errorf(err, KN_EINVAL, NULL, "the Kubernetes executor "
				 "has no job to submit");
	out->pid = 0;
	out->start = 0;
	/* Submitted with the other elements started with it at the flush. */
	if (l->spec->array.count)
		return kube_runs_add(ex->runs, &ex->cfg, &task, l->task_dir,
				     err);
	if (l->rank != 0)
		return 0; /* rank 0 submits the whole attempt */
	rc = kn_kube_attempt_manifests(&ex->cfg, &task, &docs, err);
	if (rc < 0)
		return rc;
	dir = attempt_dir_of(l->task_dir);
	rc = kube_manifests_write(dir, docs, err);
	if (rc == 0)
		attempt_add(ex, dir, docs, true, NULL);
	else
		json_decref(docs);
	free(dir);
	return rc;
}

static int kube_stop(struct kn_executor *self, const char *task_dir,
		     const struct kn_task_proc *proc, int signo,
		     int64_t grace_ms, struct kn_error *err)
{
	struct kube_exec *ex = self->impl;
	char *dir = kube_run_dir_of(task_dir);
	struct attempt *a;
	int rc, rank;

	(void)proc;
	rc = kn_task_stop_request(task_dir, signo, grace_ms, err);
	/* Found and marked under one lock: the worker frees attempts that
	   are over. The kubelet sends SIGTERM (the preStop hook the
	   checkpoint signal) and kills after the grace. */
	pthread_mutex_lock(&ex->lock);
	a = attempt_find(ex, dir);
	if (a && a->run) {
		/* One element's pod, or the whole Job when the flush finds
		   every element of the run stopping (the array's cancel). */
		rank = run_rank(a, task_dir);
		if (rank >= 0 && a->stop[rank] == STOP_NONE)
			a->stop[rank] = STOP_NEW;
		a->delete_grace_s = grace_ms >= 0 ? (grace_ms + 999) / 1000
						  : a->grace_s;
	} else if (a) {
		ask_delete(ex, a, grace_ms >= 0 ? (grace_ms + 999) / 1000
						: a->grace_s);
	}
	pthread_mutex_unlock(&ex->lock);
	free(dir);
	return rc;
}

static int kube_status(struct kn_executor *self, const char *task_dir,
		       const struct kn_task_proc *proc,
		       struct kn_task_status *out, struct kn_error *err)
{
	(void)proc;
	(void)err;
	if (!view_read(task_dir, out))
		memset(out, 0, sizeof(*out));
	return 0;
}

static int kube_adopt(struct kn_executor *self, const char *task_dir,
		      struct kn_task_proc *out, struct kn_error *err)
{
	struct kube_exec *ex = self->impl;
	char *dir = kube_run_dir_of(task_dir), *path;
	json_t *docs = manifests_read(dir);
	struct attempt *a;

	out->pid = 0;
	out->start = 0;
	if (!docs) {
		kn_errorf(err, KN_ENOTFOUND, NULL, "%s: never submitted", dir);
		free(dir);
		return -ENOENT;
	}
	pthread_mutex_lock(&ex->lock);
	a = attempt_find(ex, dir);
	pthread_mutex_unlock(&ex->lock);
	if (a) {
		json_decref(docs);
	} else {
		path = kn_asprintf("%s/" SUBMITTED_FILE, dir);
		attempt_add(ex, dir, docs, access(path, F_OK) != 0, NULL);
		free(path);
	}
	free(dir);
	return 0;
}

/* The spec renders into manifests (image, name, GPU model). */
static int kube_check(struct kn_executor *self, const struct kn_job_spec *spec,
		      struct kn_error *err)
{
	struct kube_exec *ex = self->impl;
	struct kn_kube_task task = {.spec = spec, .job_id = 1, .attempt = 1};
	json_t *docs = NULL;
	int rc;

	/* An array's elements are one Indexed Job's completion indexes. */
	if (spec->array.count && spec->tasks > 1)
		return kn_errorf(err, KN_EINVAL, "array",
				 "array: an array of gangs (tasks: %d) does not "
				 "run under the kubernetes executor: an Indexed "
				 "Job indexes either the ranks or the elements",
				 spec->tasks);
	if (spec->array.count && spec->tty)
		return kn_errorf(err, KN_EINVAL, "array",
				 "array: an array's element takes its index from "
				 "kiln's shim, which a job with a terminal (tty) "
				 "runs without on Kubernetes");
	rc = kn_kube_attempt_manifests(&ex->cfg, &task, &docs, err);
	json_decref(docs);
	return rc;
}

/*
 * A session on, or a connection to port of, task_dir's pod (session.c):
 * the Job's name from the attempt this executor keeps, the rank from the
 * task directory's name (ATTEMPT_DIR/RANK).
 */
static int kube_connect(struct kn_executor *self, const char *task_dir,
			int port, struct kn_error *err)
{
	struct kube_exec *ex = self->impl;
	char *dir = kube_run_dir_of(task_dir), job[64] = "", *end = NULL;
	const char *base = strrchr(task_dir, '/');
	long rank = base ? strtol(base + 1, &end, 10) : -1;
	struct attempt *a;

	pthread_mutex_lock(&ex->lock);
	a = attempt_find(ex, dir);
	if (a && a->run) /* an array's element: its completion index */
		rank = run_rank(a, task_dir);
	if (a && base && !*end && rank >= 0 && rank < a->ntasks)
		kn_strlcpy(job, a->name, sizeof(job)); /* set once, at add */
	pthread_mutex_unlock(&ex->lock);
	free(dir);
	/* The executor forgets an attempt once its Job ended, which the
	   server may not have seen yet: the same answer as the server's. */
	if (!job[0])
		return kn_errorf(err, KN_ECONFLICT, "state",
				 "task %ld is not running (its Kubernetes Job "
				 "has ended)", rank);
	return kube_session_start(ex->bridges, kube_client_auth(ex->client),
				  ex->cfg.namespace_, job, (int)rank, port, err);
}

static int kube_session_connect(struct kn_executor *self,
				const char *task_dir, struct kn_error *err)
{
	return kube_connect(self, task_dir, 0, err);
}

static int kube_port_connect(struct kn_executor *self, const char *task_dir,
			     int port, struct kn_error *err)
{
	return kube_connect(self, task_dir, port, err);
}

static void track_run(void *ctx, const char *dir, json_t *manifests,
		      const char *why)
{
	attempt_add(ctx, dir, manifests, true, why);
}

/* The runs started since the last flush, and the stops asked since. */
static void kube_flush(struct kn_executor *self)
{
	struct kube_exec *ex = self->impl;
	bool asked = false;

	kube_runs_flush(ex->runs, track_run, ex);
	pthread_mutex_lock(&ex->lock);
	for (struct attempt *a = ex->attempts; a; a = a->next)
		for (int r = 0; a->run && r < a->ntasks; r++)
			if (a->stop[r] == STOP_NEW) {
				a->stop[r] = STOP_ASKED;
				asked = true;
			}
	/* The server flushes every poll: the worker wakes for a stop only,
	   not to list again before its pass is due. */
	if (asked) {
		ex->work = true;
		pthread_cond_signal(&ex->wake);
	}
	pthread_mutex_unlock(&ex->lock);
}

static void config_release(struct kn_kube_exec_config *cfg)
{
	KN_FREE_ALL((char *)cfg->namespace_, (char *)cfg->image,
		    (char *)cfg->scheduler_name, (char *)cfg->shim_image,
		    (char *)cfg->store_url);
	kn_kube_products_free((struct kn_kube_products *)cfg->products);
}

/* What a worker not running (any more) leaves to free. */
static void exec_free(struct kube_exec *ex)
{
	pthread_mutex_destroy(&ex->lock);
	pthread_cond_destroy(&ex->wake);
	kn_kube_client_free(ex->client);
	config_release(&ex->cfg);
	json_decref(ex->secret);
	kube_deploys_free(ex->deploys);
	kube_runs_free(ex->runs);
	kube_bridges_free(ex->bridges, BRIDGES_WAIT_MS);
	free(ex);
}

/* Stop the worker (an API call in flight is cut within a second), then
   forget the attempts and the deployments, and wait for the session
   bridges, whose sockets the server has closed by now. */
static void kube_release(struct kn_executor *self)
{
	struct kube_exec *ex = self->impl;

	pthread_mutex_lock(&ex->lock);
	ex->stop = 1;
	pthread_cond_signal(&ex->wake);
	pthread_mutex_unlock(&ex->lock);
	pthread_join(ex->thread, NULL);
	while (ex->attempts) {
		struct attempt *a = ex->attempts;
		ex->attempts = a->next;
		attempt_free(a);
	}
	exec_free(ex);
}

static const struct kn_executor_ops kube_ops = {
	.name = "kubernetes",
	.places_tasks = true,
	.syncs_checkpoints = true,
	.runs_arrays = true,
	.flush = kube_flush,
	.isolation = "kubernetes executor: its own; environment built",
	.limits = "tasks run under the kubernetes executor",
	.start = kube_start,
	.stop = kube_stop,
	.status = kube_status,
	.adopt = kube_adopt,
	.check = kube_check,
	.release = kube_release,
	.deployments = &kube_deploy_ops,
	.session_connect = kube_session_connect,
	.port_connect = kube_port_connect,
};

static char *dup_or_null(const char *s)
{
	return s ? kn_xstrdup(s) : NULL;
}

int kn_kube_executor_new(const struct kn_kube_exec_config *cfg,
			 struct kn_executor **out, struct kn_error *err)
{
	struct kube_exec *ex;
	int rc;

	*out = NULL;
	if (!cfg->namespace_ || !*cfg->namespace_) {
		kn_kube_products_free((struct kn_kube_products *)cfg->products);
		return kn_errorf(err, KN_EINVAL, "namespace",
				 "--kube-namespace: empty");
	}
	ex = kn_xcalloc(1, sizeof(*ex));
	ex->cfg.products = cfg->products;
	rc = kn_kube_client_new(cfg->auth, &ex->client, err);
	if (rc < 0) {
		config_release(&ex->cfg);
		free(ex);
		return rc;
	}
	kn_kube_client_stop_on(ex->client, &ex->stop);
	ex->cfg.namespace_ = kn_xstrdup(cfg->namespace_);
	ex->cfg.image = dup_or_null(cfg->image);
	ex->cfg.scheduler_name = dup_or_null(cfg->scheduler_name);
	ex->cfg.shim_image = dup_or_null(cfg->shim_image);
	ex->cfg.store_url = dup_or_null(cfg->store_url);
	ex->cfg.poll_ms = cfg->poll_ms > 0 ? cfg->poll_ms
					    : KN_KUBE_POLL_DEFAULT_MS;
	ex->secret = secret_from_env(cfg->namespace_);
	ex->deploys = kube_deploys_new();
	ex->runs = kube_runs_new();
	ex->bridges = kube_bridges_new();
	pthread_mutex_init(&ex->lock, NULL);
	pthread_cond_init(&ex->wake, NULL);
	rc = pthread_create(&ex->thread, NULL, worker, ex);
	if (rc != 0) {
		exec_free(ex);
		return kn_errorf(err, KN_EIO, NULL, "cannot start the "
				 "Kubernetes worker: %s", strerror(rc));
	}
	*out = kn_executor_new(&kube_ops, ex);
	return 0;
}

struct kube_exec *kube_exec_of(struct kn_executor *ex)
{
	return ex && ex->ops == &kube_ops ? ex->impl : NULL;
}

void kube_exec_wake(struct kube_exec *ex)
{
	pthread_mutex_lock(&ex->lock);
	ex->work = true;
	pthread_cond_signal(&ex->wake);
	pthread_mutex_unlock(&ex->lock);
}

const struct kn_kube_exec_config *kube_exec_config(const struct kube_exec *ex)
{
	return &ex->cfg;
}

struct kube_deploys *kube_exec_deploys(struct kube_exec *ex)
{
	return ex->deploys;
}
