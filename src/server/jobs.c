/*
 * Jobs: the queue, the scheduler tick, attempts and their tasks, retries,
 * cancel, and recovery after a restart.
 *
 * Each state change is written to the store before anything acts on it:
 * a tick commits every binding of the turn in one transaction and only
 * then starts shims; task exits found in one turn are committed together.
 * On start-up the store says which attempts were running and the task
 * directories say what became of them (status.json from the shim, or a
 * live shim to re-adopt), so a crash loses neither jobs nor outcomes.
 *
 * The alternative, the server waiting on its tasks as plain children, is
 * what makes most single-node launchers lose running work on a restart.
 */
#include "internal.h"

#include "kube/kube.h"

#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* How often adopted tasks (not our children) are checked for an exit. */
#define POLL_MS 500

/* The scheduler's view of a spec; arrays owned here. */
struct sreq {
	struct kn_sched_request req;
	struct kn_sched_label *selector;
	struct kn_sched_toleration *tolerations;
	struct kn_sched_affinity_term *required;
	struct kn_sched_affinity_term *preferred;
};

/* The spec's terms for the scheduler; the strings stay the spec's. */
static struct kn_sched_affinity_term *
affinity_build(const struct kn_affinity_term *terms, size_t n)
{
	struct kn_sched_affinity_term *out;

	if (n == 0)
		return NULL;
	out = kn_xcalloc(n, sizeof(*out));
	for (size_t i = 0; i < n; i++) {
		out[i].key = terms[i].key;
		out[i].op = terms[i].op == KN_AFFINITY_IN ? KN_SCHED_IN
			    : terms[i].op == KN_AFFINITY_NOT_IN
				    ? KN_SCHED_NOT_IN
			    : terms[i].op == KN_AFFINITY_EXISTS
				    ? KN_SCHED_EXISTS
				    : KN_SCHED_DOES_NOT_EXIST;
		out[i].values = (const char *const *)terms[i].values;
		out[i].n_values = terms[i].n_values;
		out[i].weight = terms[i].weight;
	}
	return out;
}

static void sreq_build(const struct server *s, const struct kn_job_spec *spec,
		       struct sreq *r)
{
	const struct kn_placement_spec *p = &spec->placement;
	size_t n_selector = 0;

	memset(r, 0, sizeof(*r));
	r->req.tasks = spec->tasks;
	r->req.gpu_milli = spec->resources.gpu_milli;
	r->req.mig_profile = spec->resources.mig_profile;
	r->req.gpu_models = (const char *const *)spec->resources.gpu_models;
	r->req.n_gpu_models = spec->resources.n_gpu_models;
	r->req.cpu_milli = spec->resources.cpu_milli;
	r->req.memory_bytes = spec->resources.memory_bytes;
	/* The cluster matches models and placement terms (kube.c). */
	if (kube_places(s)) {
		r->req.gpu_models = NULL;
		r->req.n_gpu_models = 0;
		return;
	}
	if (p->n_selector) {
		r->selector = kn_xcalloc(p->n_selector, sizeof(*r->selector));
		for (size_t i = 0; i < p->n_selector; i++) {
			if (slurm_selects(s, p->selector[i].key))
				continue;
			r->selector[n_selector].key = p->selector[i].key;
			r->selector[n_selector++].value = p->selector[i].value;
		}
	}
	if (p->n_tolerations) {
		r->tolerations =
			kn_xcalloc(p->n_tolerations, sizeof(*r->tolerations));
		for (size_t i = 0; i < p->n_tolerations; i++) {
			const struct kn_toleration *t = &p->tolerations[i];
			r->tolerations[i].key = t->key;
			r->tolerations[i].exists =
				t->operator_ && !strcmp(t->operator_, "Exists");
			r->tolerations[i].value = t->value;
			r->tolerations[i].effect = t->effect;
		}
	}
	r->req.selector = r->selector;
	r->req.n_selector = n_selector;
	r->req.tolerations = r->tolerations;
	r->req.n_tolerations = p->n_tolerations;
	r->required = affinity_build(p->required, p->n_required);
	r->preferred = affinity_build(p->preferred, p->n_preferred);
	r->req.required = r->required;
	r->req.n_required = p->n_required;
	r->req.preferred = r->preferred;
	r->req.n_preferred = p->n_preferred;
	/* The node label names spread reads (docs/scheduling.md). */
	r->req.spread_key = p->spread == KN_SPREAD_ZONE ? "zone"
			    : p->spread == KN_SPREAD_FAULT_DOMAIN
				    ? "fault_domain"
				    : NULL;
}

static void sreq_release(struct sreq *r)
{
	free(r->selector);
	free(r->tolerations);
	free(r->required);
	free(r->preferred);
}

/* ---- audit helpers ---- */

static void audit_init(struct kn_audit *a, const struct caller *c,
		       const char *action, const char *object)
{
	memset(a, 0, sizeof(*a));
	a->actor = (char *)c->name;
	a->role = (char *)role_name(c->role);
	a->action = (char *)action;
	a->object = (char *)object;
	a->outcome = "ok";
}

/* ---- queue ---- */

static struct queued_job *queue_find(struct server *s, int64_t id,
				     struct queued_job ***link)
{
	for (struct queued_job **p = &s->queue; *p; p = &(*p)->next) {
		if ((*p)->id == id) {
			if (link)
				*link = p;
			return *p;
		}
	}
	return NULL;
}

static void queue_push(struct server *s, int64_t id, int priority,
		       int64_t submitted_at, int64_t not_before,
		       struct kn_job_spec *spec)
{
	struct queued_job *q = kn_xcalloc(1, sizeof(*q));

	q->id = id;
	q->priority = priority;
	q->submitted_at = submitted_at;
	q->not_before = not_before;
	q->spec = spec;
	q->next = s->queue;
	s->queue = q;
	s->queue_len++;
}

static void queued_free(struct queued_job *q)
{
	kn_job_spec_free(q->spec);
	free(q);
}

static void queue_remove(struct server *s, int64_t id)
{
	struct queued_job **link, *q = queue_find(s, id, &link);

	if (!q)
		return;
	*link = q->next;
	s->queue_len--;
	queued_free(q);
}

const char *jobs_queue_reason(struct server *s, int64_t id)
{
	struct queued_job *q = queue_find(s, id, NULL);
	return q && q->reason[0] ? q->reason : NULL;
}

size_t jobs_pending(struct server *s, struct pending_job **out)
{
	int64_t now = kn_now_ms();
	struct kn_sched_queue_entry *order =
		kn_xcalloc(s->queue_len ? s->queue_len : 1, sizeof(*order));
	size_t n = 0, k = 0;

	for (struct queued_job *q = s->queue; q; q = q->next)
		if (q->reason[0] && q->not_before <= now && !q->preempting) {
			order[n].job_id = q->id;
			order[n].priority = q->priority;
			order[n++].submitted_at = q->submitted_at;
		}
	kn_sched_sort_queue(order, n);
	*out = kn_xcalloc(n ? n : 1, sizeof(**out));
	for (size_t i = 0; i < n; i++) {
		struct queued_job *q = queue_find(s, order[i].job_id, NULL);
		struct sreq *r = kn_xcalloc(1, sizeof(*r));

		sreq_build(s, q->spec, r);
		(*out)[k].id = q->id;
		(*out)[k].preemptible = q->spec->preemptible;
		(*out)[k++].req = &r->req;
	}
	free(order);
	return k;
}

void jobs_pending_free(struct pending_job *jobs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		/* req is the first member of the sreq it was built in. */
		struct sreq *r = (struct sreq *)jobs[i].req;

		sreq_release(r);
		free(r);
	}
	free(jobs);
}

static void wake_scheduler(struct server *s)
{
	if (!kn_timer_pending(s->tick_timer))
		kn_timer_arm(s->tick_timer, 0);
}

void jobs_wake(struct server *s)
{
	wake_scheduler(s);
}

/* ---- submit ---- */

/*
 * Tasks start in the spec's `workdir`, which may be relative to the spec
 * file; with none, in the spec file's directory (as `sbatch` starts in the
 * directory it was called from). Only an absolute file name tells where
 * that is; otherwise a task starts in its task directory.
 */
static void resolve_workdir(struct kn_job_spec *spec, const char *filename)
{
	const char *slash;
	char *dir;

	if (spec->workdir && spec->workdir[0] == '/')
		return;
	if (!filename || filename[0] != '/')
		return;
	slash = strrchr(filename, '/');
	dir = slash == filename ? kn_xstrdup("/")
				: kn_asprintf("%.*s", (int)(slash - filename),
					      filename);
	if (spec->workdir) {
		char *abs = kn_asprintf("%s/%s", dir, spec->workdir);
		free(spec->workdir);
		free(dir);
		spec->workdir = abs;
	} else {
		spec->workdir = dir;
	}
}

/*
 * Paths in `inputs:` are relative to the spec file, like its workdir:
 * file:///ABSOLUTE URLs from here on. shown names the file in messages.
 */
static int resolve_inputs(struct kn_job_spec *spec, const char *filename,
			  const char *shown, struct kn_error *err)
{
	const char *slash = filename ? strrchr(filename, '/') : NULL;
	char *dir = NULL;
	int rc;

	if (filename && filename[0] == '/')
		dir = slash == filename ? kn_xstrdup("/")
					: kn_asprintf("%.*s",
						      (int)(slash - filename),
						      filename);
	rc = kn_job_spec_resolve_inputs(spec, dir, shown, err);
	free(dir);
	return rc;
}

static int parse_spec(const struct server *s, const char *text, size_t len,
		      const char *filename, struct kn_job_spec **out,
		      struct kn_error *err)
{
	int rc = kn_job_spec_parse(text, len, filename, out, err);

	/* In a pod, a workdir is the container's, not the spec file's. */
	if (rc == 0 && !kube_places(s))
		resolve_workdir(*out, filename);
	if (rc == 0 && (rc = resolve_inputs(*out, filename, filename, err)) < 0) {
		kn_job_spec_free(*out);
		*out = NULL;
	}
	return rc;
}

/*
 * The code revision of a job whose workdir is in a git repository, for
 * the lineage of models made from it (docs/registry.md). A pod's workdir
 * is the container's: nothing to read here.
 */
static void record_revision(struct server *s, int64_t id,
			    const struct kn_job_spec *spec)
{
	struct kn_error err;
	char rev[65];

	if (kube_places(s) || !spec->workdir || spec->workdir[0] != '/' ||
	    kn_git_revision(spec->workdir, rev) < 0)
		return;
	/* The job runs without it; only its lineage will lack it. */
	if (kn_store_job_revision_put(s->store, id, rev, &err) < 0)
		kn_log(KN_LOG_ERROR, "job %lld: code revision %s not recorded: "
		       "%s", (long long)id, rev, err.message);
}

int jobs_submit(struct server *s, const struct caller *c, const char *text,
		size_t len, const char *filename, const char *path,
		int64_t *out_id, struct kn_error *err)
{
	struct kn_job_spec *spec = NULL;
	struct kn_job_row j;
	struct kn_audit a;
	json_t *norm;
	char *norm_text;
	int64_t id = 0;
	int rc;

	rc = kn_job_spec_parse(text, len, filename, &spec, err);
	if (rc < 0)
		return rc;
	if (spec->image && s->exec == &kn_local_executor) {
		kn_job_spec_free(spec);
		return kn_errorf(err, KN_EINVAL, "image",
				 "%s: image: the %s executor runs no containers "
				 "(--executor slurm does, with pyxis, and "
				 "--executor kubernetes)",
				 filename, s->exec->name);
	}
	rc = kube_check_spec(s, spec, filename, err);
	if (rc == 0)
		rc = resolve_inputs(spec, path ? path : filename, filename, err);
	if (rc == 0)
		rc = kube_check_inputs(s, spec, filename, err);
	if (rc < 0) {
		kn_job_spec_free(spec);
		return rc;
	}
	/* Stored as the file name, so a restart resolves it the same way. */
	if (path)
		filename = path;
	if (!kube_places(s))
		resolve_workdir(spec, filename);
	norm = kn_job_spec_to_json(spec);
	norm_text = json_dumps(norm, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(norm);

	memset(&j, 0, sizeof(j));
	j.name = spec->name;
	j.owner = (char *)c->name;
	j.state = KN_JOB_QUEUED;
	j.priority = spec->priority;
	j.tasks = spec->tasks;
	j.filename = (char *)(filename ? filename : "");
	j.spec_yaml = (char *)text;
	j.spec_json = norm_text;
	j.submitted_at = kn_now_ms();
	j.exit_code = -1;
	audit_init(&a, c, "job.submit", NULL); /* the store names job/ID */
	a.detail = spec->name;
	rc = kn_store_job_insert(s->store, &j, &a, &id, err);
	free(norm_text);
	if (rc == 0)
		record_revision(s, id, spec);
	if (rc < 0) {
		kn_job_spec_free(spec);
		return rc;
	}
	workload_add(s, spec);
	queue_push(s, id, spec->priority, j.submitted_at, 0, spec);
	feed_job(s, id, "queued", NULL);
	wake_scheduler(s);
	*out_id = id;
	return 0;
}

/* ---- starting attempts ---- */

static int free_port(void)
{
	struct sockaddr_in sa;
	socklen_t sl = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = 0;

	if (fd < 0)
		return 0;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
		port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

/*
 * What a task row keeps of a binding: "0,1" for GPUs or shares, and for a
 * MIG instance its GPU, profile and first memory slice, "0:mig=1g.10gb@6",
 * which rebind reads back after a restart.
 */
static void devices_text(const struct kn_sched_binding *b, char *buf,
			 size_t len)
{
	size_t o = 0;

	buf[0] = '\0';
	if (b->mig_profile && b->n_devices == 1) {
		snprintf(buf, len, "%d:mig=%s@%d", b->devices[0],
			 b->mig_profile->name, b->mig_start);
		return;
	}
	for (int i = 0; i < b->n_devices && o < len; i++)
		o += (size_t)snprintf(buf + o, len - o, "%s%d", i ? "," : "",
				      b->devices[i]);
}

/*
 * CUDA_VISIBLE_DEVICES for a MIG instance. Only simulated devices are in
 * MIG mode (NVML's MIG mode is not queried), so the id is synthetic:
 * "MIG-sim-<GPU uuid>-<profile>-<start>". With real MIG devices it would
 * be the instance's MIG-<uuid> from NVML, which kiln does not look up yet.
 */
static void mig_visible(const struct server *s,
			const struct kn_sched_binding *b, char *buf, size_t len)
{
	const struct kn_device_set *set = &s->nodes[b->node].devices;
	const char *uuid = "unknown";

	for (size_t i = 0; i < set->n; i++)
		if (set->devices[i].index == b->devices[0])
			uuid = set->devices[i].uuid;
	snprintf(buf, len, "MIG-sim-%s-%s-%d", uuid, b->mig_profile->name,
		 b->mig_start);
}

static char *task_dir_path(struct server *s, int64_t job, int attempt,
			   int rank)
{
	return kn_asprintf("%s/tasks/%lld/%d/%d", s->home, (long long)job,
			   attempt, rank);
}

static struct run *run_new(struct server *s, int64_t job_id, int attempt,
			   struct kn_job_spec *spec)
{
	struct run *r = kn_xcalloc(1, sizeof(*r));
	struct sreq sr;

	r->job_id = job_id;
	r->attempt = attempt;
	r->spec = spec;
	r->stop_grace_ms = -1;
	sreq_build(s, spec, &sr);
	r->req = sr.req;
	/* The run keeps the arrays alive through req's pointers. */
	r->n_tasks = spec->tasks;
	r->bindings = kn_xcalloc((size_t)spec->tasks, sizeof(*r->bindings));
	r->tasks = kn_xcalloc((size_t)spec->tasks, sizeof(*r->tasks));
	for (int i = 0; i < spec->tasks; i++) {
		r->tasks[i].rank = i;
		r->tasks[i].task_dir = task_dir_path(s, job_id, attempt, i);
	}
	/* Shared by the attempt's tasks: rank 0 commits what all wrote. */
	r->checkpoint_dir = kn_asprintf("%s/tasks/%lld/%d/checkpoints", s->home,
					(long long)job_id, attempt);
	r->output_dir = kn_asprintf("%s/tasks/%lld/%d/outputs", s->home,
				    (long long)job_id, attempt);
	r->next = s->runs;
	s->runs = r;
	return r;
}

static void run_free(struct run *r)
{
	sync_run_gone(r);
	for (int i = 0; i < r->n_tasks; i++)
		free(r->tasks[i].task_dir);
	free(r->checkpoint_dir);
	free(r->output_dir);
	free(r->tasks);
	free(r->bindings);
	free((void *)r->req.selector);
	free((void *)r->req.tolerations);
	free((void *)r->req.required);
	free((void *)r->req.preferred);
	kn_job_spec_free(r->spec);
	free(r);
}

static void run_unlink(struct server *s, struct run *r)
{
	for (struct run **p = &s->runs; *p; p = &(*p)->next) {
		if (*p == r) {
			*p = r->next;
			return;
		}
	}
}

static void add_env(char ***env, size_t *n, char *entry)
{
	*env = kn_xrealloc(*env, (*n + 2) * sizeof(char *));
	(*env)[(*n)++] = entry;
	(*env)[*n] = NULL;
}

#define MPS_PERCENTAGE "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"

/* A share of a GPU as a decimal: 500 -> "0.5", 1 -> "0.001". */
static void share_text(int milli, char *buf, size_t len)
{
	int digits = 3;

	while (digits > 1 && milli % 10 == 0) {
		milli /= 10;
		digits--;
	}
	snprintf(buf, len, "0.%0*d", digits, milli);
}

/* ---- a job's inputs ---- */

/*
 * Where an input's digest comes from: the shim, which reads every byte
 * of it anyway to fetch it into $KILN_INPUT_DIR, writes what it fetched
 * to TASK_DIR/inputs.json before the task starts, and the server records
 * the first one it finds (record_inputs). The task directory is the
 * shim's only channel to the server, as status.json is: the shim never
 * talks to the server, so this holds while the server is down, and the
 * server never reads a dataset itself (on the event loop, or twice).
 * Later attempts get the recorded digests in KILN_INPUTS, and the shim
 * refuses to start the task when an input no longer matches.
 */
#define INPUTS_JSON "inputs.json"
#define INPUTS_JSON_MAX (256 * 1024)

/*
 * The spec's inputs ({input, name, url} from kn_job_spec_to_json) with
 * what was recorded for each: sha256, size and the attempt that fetched
 * it. A new list (without a record an input is listed as it is), or
 * NULL when the records cannot be read.
 */
static json_t *inputs_with_digests(struct server *s, int64_t job_id,
				   json_t *spec_inputs, struct kn_error *err)
{
	struct kn_job_input_row *rows = NULL;
	json_t *out, *in;
	size_t n = 0, i;

	if (kn_store_job_input_list(s->store, job_id, &rows, &n, err) < 0)
		return NULL;
	out = json_array();
	json_array_foreach(spec_inputs, i, in) {
		const char *name = json_string_value(json_object_get(in, "name"));
		json_t *o = json_deep_copy(in);

		for (size_t k = 0; name && k < n; k++) {
			if (strcmp(rows[k].name, name) != 0)
				continue;
			json_object_set_new(o, "sha256",
					    json_string(rows[k].sha256));
			json_object_set_new(o, "size",
					    json_integer(rows[k].size));
			json_object_set_new(o, "attempt",
					    json_integer(rows[k].attempt));
		}
		json_array_append_new(out, o);
	}
	kn_job_input_list_free(rows, n);
	return out;
}

json_t *jobs_inputs_json(struct server *s, int64_t job_id,
			 const char *spec_json)
{
	json_t *spec = spec_json ? json_loads(spec_json, 0, NULL) : NULL;
	json_t *inputs = json_object_get(spec, "inputs"), *out = NULL;
	struct kn_error err;

	if (json_array_size(inputs) &&
	    !(out = inputs_with_digests(s, job_id, inputs, &err)))
		kn_log(KN_LOG_ERROR, "job %lld: %s", (long long)job_id,
		       err.message);
	json_decref(spec);
	return out;
}

/*
 * KILN_INPUTS of a job with `inputs:`, in a workflow step's format
 * (docs/workflows.md): each input's store (its URL up to the last '/')
 * and blob (the rest), with the recorded sha256 the shim checks, if any.
 * NULL when the records cannot be read: the task must not start without
 * the digests it is to be checked against.
 */
static char *inputs_for_shim(struct server *s, int64_t job_id,
			     const struct kn_job_spec *spec,
			     struct kn_error *err)
{
	json_t *doc = kn_job_spec_to_json(spec), *list;
	char *text = NULL;

	/* Resolved at submit: every input has a URL with a '/'. */
	list = inputs_with_digests(s, job_id, json_object_get(doc, "inputs"),
				   err);
	if (list)
		text = kn_job_inputs_for_shim(list);
	json_decref(list);
	json_decref(doc);
	return text;
}

/*
 * Record what the shim of rank 0 fetched (TASK_DIR/inputs.json), once
 * per run: the first recording of an input stays (the store keeps it),
 * so a later attempt only confirms what the first one found.
 */
static void record_inputs(struct server *s, struct run *r,
			  const struct run_task *t)
{
	char *path = kn_asprintf("%s/" INPUTS_JSON, t->task_dir), *text = NULL;
	struct kn_error err, why;
	json_t *doc = NULL, *in;
	size_t len, i;
	int rc;

	rc = kn_task_file_read(t->task_dir, INPUTS_JSON, INPUTS_JSON_MAX, &text,
			       &len, &why);
	if (rc < 0 && kn_task_file_refused(&why)) {
		r->inputs_recorded = true; /* not to be tried again */
		server_task_file_refused(s, r->job_id, path, &why);
	}
	if (rc < 0)
		goto out; /* not fetched yet */
	r->inputs_recorded = true;
	doc = json_loadb(text, len, 0, NULL);
	if (!json_is_array(doc)) {
		kn_log(KN_LOG_WARN, "job %lld: %s is not a JSON list",
		       (long long)r->job_id, path);
		goto out;
	}
	rc = kn_store_begin(s->store, &err);
	json_array_foreach(doc, i, in) {
		const char *name = json_string_value(json_object_get(in, "name"));
		const char *sha = json_string_value(json_object_get(in, "sha256"));
		json_t *size = json_object_get(in, "size");
		struct kn_job_input_row row = {0};

		if (rc < 0)
			break;
		for (size_t k = 0; name && k < r->spec->n_inputs; k++)
			if (!strcmp(r->spec->inputs[k].name, name))
				row.url = r->spec->inputs[k].url;
		if (!row.url || !sha || strlen(sha) != KN_SHA256_HEX ||
		    strspn(sha, "0123456789abcdef") != KN_SHA256_HEX ||
		    !json_is_integer(size) || json_integer_value(size) < 0)
			continue;
		row.job_id = r->job_id;
		row.name = (char *)name;
		row.sha256 = (char *)sha;
		row.size = json_integer_value(size);
		row.attempt = r->attempt;
		row.recorded_at = kn_now_ms();
		rc = kn_store_job_input_put(s->store, &row, &err);
	}
	if (rc == 0)
		rc = kn_store_commit(s->store, &err);
	if (rc < 0) {
		kn_store_rollback(s->store);
		kn_log(KN_LOG_ERROR, "job %lld: recording its inputs: %s",
		       (long long)r->job_id, err.message);
		r->inputs_recorded = false; /* the next poll tries again */
	}
out:
	json_decref(doc);
	free(text);
	free(path);
}

static void launch_task(struct server *s, struct run *r, struct run_task *t)
{
	const struct kn_job_spec *spec = r->spec;
	const char *model_dir, *model_ref;
	char devs[256], **env = NULL, *inputs = NULL, *requires = NULL;
	json_t *step_env;
	size_t n = 0;
	int local_rank = 0, rc;
	bool mps;
	struct kn_task_launch l;
	struct kn_slurm_task slurm;
	struct kn_kube_task kube;
	char partition[128];
	struct kn_error err, inputs_err;
	bool inputs_ok = true;

	const struct kn_sched_binding *b = &r->bindings[t->rank];

	for (int i = 0; i < t->rank; i++)
		if (r->bindings[i].node == b->node)
			local_rank++;
	if (b->mig_profile && b->n_devices == 1)
		mig_visible(s, b, devs, sizeof(devs));
	else
		devices_text(b, devs, sizeof(devs));
	mps = b->milli_per_device > 0 && b->milli_per_device < KN_MILLI &&
	      spec->resources.sharing == KN_SHARING_MPS;
	for (size_t i = 0; i < spec->n_env; i++) {
		/* kiln's MPS limit is what the scheduler counted on. */
		if (mps && !strcmp(spec->env[i].key, MPS_PERCENTAGE))
			continue;
		add_env(&env, &n, kn_asprintf("%s=%s", spec->env[i].key,
					      spec->env[i].value));
	}
	/* No GPU asked for: hide them all rather than expose every one. */
	add_env(&env, &n, kn_asprintf("CUDA_VISIBLE_DEVICES=%s", devs));
	add_env(&env, &n, kn_asprintf("NVIDIA_VISIBLE_DEVICES=%s",
				      devs[0] ? devs : "void"));
	add_env(&env, &n, kn_asprintf("RANK=%d", t->rank));
	add_env(&env, &n, kn_asprintf("LOCAL_RANK=%d", local_rank));
	add_env(&env, &n, kn_asprintf("WORLD_SIZE=%d", r->n_tasks));
	add_env(&env, &n, kn_xstrdup("MASTER_ADDR=127.0.0.1"));
	add_env(&env, &n, kn_asprintf("MASTER_PORT=%d", r->master_port));
	add_env(&env, &n, kn_asprintf("KILN_JOB_ID=%lld", (long long)r->job_id));
	add_env(&env, &n, kn_asprintf("KILN_JOB_NAME=%s", spec->name));
	add_env(&env, &n, kn_asprintf("KILN_ATTEMPT=%d", r->attempt));
	add_env(&env, &n, kn_asprintf("KILN_TASK_DIR=%s", t->task_dir));
	add_env(&env, &n, kn_asprintf("KILN_CHECKPOINT_DIR=%s", r->checkpoint_dir));
	add_env(&env, &n, kn_asprintf("KILN_OUTPUT_DIR=%s", r->output_dir));
	/* A workflow step's inputs and prerequisites, which the shim
	 * fetches and checks (workflows.c). */
	add_env(&env, &n, kn_asprintf("KILN_INPUT_DIR=%s/tasks/%lld/%d/inputs",
				      s->home, (long long)r->job_id,
				      r->attempt));
	if ((step_env = workflows_task_env(s, r->job_id, b))) {
		const char *key;
		json_t *v;

		json_object_foreach(step_env, key, v)
			add_env(&env, &n, kn_asprintf("%s=%s", key,
						      json_string_value(v)));
		/* A pod gets only what its manifest names: the step's inputs
		   and prerequisites go to its shim there (render.c). */
		if ((v = json_object_get(step_env, "KILN_INPUTS")))
			inputs = kn_xstrdup(json_string_value(v));
		if ((v = json_object_get(step_env, "KILN_REQUIRES")))
			requires = kn_xstrdup(json_string_value(v));
		json_decref(step_env);
	}
	if (spec->n_inputs) {
		free(inputs); /* a step's job has none of its own */
		inputs = inputs_for_shim(s, r->job_id, spec, &inputs_err);
		if (inputs)
			add_env(&env, &n, kn_asprintf("KILN_INPUTS=%s", inputs));
		inputs_ok = inputs != NULL;
	}
	if (r->resume_from[0])
		add_env(&env, &n, kn_asprintf("KILN_RESUME_FROM=%s", r->resume_from));
	add_env(&env, &n, kn_asprintf("KILN_GPU_MILLI=%d",
				      b->milli_per_device));
	if (b->mig_profile)
		add_env(&env, &n, kn_asprintf("KILN_MIG_PROFILE=%s",
					      b->mig_profile->name));
	/* Simulated GPUs cannot be measured: the task may declare what it
	   would use there (usage.c). */
	if (b->n_devices > 0 && s->nodes[b->node].devices.simulated)
		add_env(&env, &n, kn_asprintf("KILN_SIM_GPU_USAGE=%s/%s",
					      t->task_dir, usage_sim_file()));
	if (b->milli_per_device > 0 && b->milli_per_device < KN_MILLI) {
		char share[16];

		share_text(b->milli_per_device, share, sizeof(share));
		add_env(&env, &n, kn_asprintf("KILN_GPU_SHARE=%s", share));
	}
	/* MPS caps the task's SMs at its share, in whole percent (>= 1). */
	if (mps)
		add_env(&env, &n, kn_asprintf("%s=%d", MPS_PERCENTAGE,
					      b->milli_per_device >= 10
						      ? b->milli_per_device / 10
						      : 1));
	if (s->nodes[b->node].devices.simulated)
		add_env(&env, &n, kn_xstrdup("KILN_SIMULATED_GPUS=1"));
	/* A deployment's replica serves on its attempt's port (deploy.c). */
	if ((model_dir = deploy_model_dir(s, r->job_id))) {
		add_env(&env, &n, kn_asprintf("KILN_PORT=%d", r->master_port));
		add_env(&env, &n, kn_asprintf("KILN_MODEL_DIR=%s", model_dir));
	}
	/* An evaluation job gets the version it tests (revalidate.c). */
	if ((model_dir = reval_model_dir(s, r->job_id, &model_ref))) {
		add_env(&env, &n, kn_asprintf("KILN_MODEL_DIR=%s", model_dir));
		add_env(&env, &n, kn_asprintf("KILN_MODEL=%s", model_ref));
	}

	memset(&l, 0, sizeof(l));
	l.task_dir = t->task_dir;
	l.argv = spec->command;
	l.env = env;
	l.workdir = spec->workdir;
	l.timeout_ms = spec->timeout_ms;
	l.grace_ms = s->cfg.kill_grace_ms;
	l.log_max_bytes = s->cfg.log_max_bytes;
	l.log_keep = KN_LOG_KEEP;
	if (s->exec == &kn_slurm_executor) {
		slurm_task_fill(s, r, t->rank, &slurm, partition,
				sizeof(partition));
		l.slurm = &slurm;
	}
	if (kube_places(s)) {
		kube.spec = spec;
		kube.job_id = r->job_id;
		kube.attempt = r->attempt;
		kube.rank = t->rank;
		kube.inputs = inputs;
		kube.requires = requires;
		l.kube = &kube;
	}
	rc = kn_mkdir_p(t->task_dir, 0700);
	if (rc == 0 && sync_wanted(r))
		rc = kn_mkdir_p(r->checkpoint_dir, 0700);
	if (rc == 0 && sync_wanted(r))
		rc = kn_mkdir_p(r->output_dir, 0700);
	if (rc < 0)
		kn_errorf(&err, KN_EIO, NULL, "cannot create %s: %s",
			  t->task_dir, strerror(-rc));
	else if (!inputs_ok)
		rc = kn_errorf(&err, KN_EIO, NULL, "its inputs' digests: %s",
			       inputs_err.message);
	else
		rc = s->exec->start(&l, &t->proc, &err);
	t->launched = true;
	if (rc < 0) {
		kn_log(KN_LOG_ERROR, "job %lld rank %d: %s",
		       (long long)r->job_id, t->rank, err.message);
		t->ended = true;
		t->status.ended = true;
		t->status.exit_code = -1;
		t->status.ended_at_ms = kn_now_ms();
		snprintf(t->status.reason, sizeof(t->status.reason),
			 "cannot start: %.80s", err.message);
	}
	for (size_t i = 0; i < n; i++)
		free(env[i]);
	free(env);
	free(inputs);
	free(requires);
}

struct placed {
	struct queued_job *q;
	struct kn_sched_binding *bindings;
	struct sreq sr;
	int attempt; /* the number the bind gives the new attempt */
};

/*
 * For a replica of a deployment with spread: per node, the tasks of its
 * other replicas, running or placed earlier this turn (pl[0..np)), so the
 * scheduler spreads replicas and not only one gang's tasks. NULL for any
 * other job.
 */
static int *spread_group_placed(struct server *s, const struct queued_job *q,
				const struct kn_sched_request *req,
				const struct placed *pl, size_t np)
{
	const struct deployment *group;
	int *counts;

	if (!req->spread_key)
		return NULL;
	group = deploy_of(s, q->id);
	if (!group)
		return NULL;
	counts = kn_xcalloc(s->cluster.n_nodes, sizeof(*counts));
	for (const struct run *r = s->runs; r; r = r->next)
		if (r->job_id != q->id && !r->stopping &&
		    deploy_of(s, r->job_id) == group)
			for (int t = 0; t < r->n_tasks; t++)
				counts[r->bindings[t].node]++;
	for (size_t k = 0; k < np; k++)
		if (deploy_of(s, pl[k].q->id) == group)
			for (int t = 0; t < pl[k].q->spec->tasks; t++)
				counts[pl[k].bindings[t].node]++;
	return counts;
}

/* Commit the bindings of one turn, then start the shims. */
static int bind_placed(struct server *s, struct placed *pl, size_t n,
		       int64_t now)
{
	struct kn_error err;
	int *ports = kn_xcalloc(n ? n : 1, sizeof(int));
	int rc;

	rc = kn_store_begin(s->store, &err);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		struct queued_job *q = pl[i].q;
		struct kn_job_row j;
		struct kn_attempt_row a;

		memset(&j, 0, sizeof(j));
		rc = kn_store_job_get(s->store, q->id, &j, &err);
		if (rc < 0)
			break;
		j.state = KN_JOB_RUNNING;
		j.attempts++;
		if (!j.started_at)
			j.started_at = now;
		free(j.reason);
		j.reason = NULL;
		rc = kn_store_job_update(s->store, &j, NULL, &err);
		memset(&a, 0, sizeof(a));
		a.job_id = q->id;
		a.number = j.attempts;
		a.state = KN_JOB_RUNNING;
		a.started_at = now;
		a.exit_code = -1;
		if (rc == 0)
			rc = kn_store_attempt_put(s->store, &a, &err);
		ports[i] = free_port();
		for (int t = 0; rc == 0 && t < q->spec->tasks; t++) {
			struct kn_task_row tr;
			char devs[256];
			char *dir = task_dir_path(s, q->id, j.attempts, t);

			devices_text(&pl[i].bindings[t], devs, sizeof(devs));
			memset(&tr, 0, sizeof(tr));
			tr.job_id = q->id;
			tr.attempt = j.attempts;
			tr.rank = t;
			tr.node = s->nodes[pl[i].bindings[t].node].name;
			tr.devices = devs;
			tr.gpu_milli = pl[i].bindings[t].milli_per_device;
			tr.task_dir = dir;
			tr.state = KN_TASK_RUNNING;
			tr.started_at = now;
			tr.exit_code = -1;
			tr.master_port = ports[i];
			rc = kn_store_task_put(s->store, &tr, &err);
			free(dir);
		}
		pl[i].attempt = j.attempts;
		kn_job_row_release(&j);
	}
	if (rc == 0)
		rc = kn_store_commit(s->store, &err);
	if (rc < 0) {
		kn_store_rollback(s->store);
		kn_log(KN_LOG_ERROR, "binding jobs failed: %s", err.message);
		for (size_t i = 0; i < n; i++)
			kn_sched_release(&s->cluster, &pl[i].sr.req,
					 pl[i].bindings);
		free(ports);
		return rc;
	}
	for (size_t i = 0; i < n; i++) {
		struct queued_job *q = pl[i].q, **link = NULL;
		struct run *r;
		/* The run takes over the spec from the queue entry. */
		r = run_new(s, q->id, pl[i].attempt, q->spec);
		q->spec = NULL;
		r->submitted_at = q->submitted_at;
		r->started_at = now;
		r->master_port = ports[i];
		feed_job(s, q->id, "running", NULL);
		memcpy(r->bindings, pl[i].bindings,
		       (size_t)r->n_tasks * sizeof(*r->bindings));
		sync_restore_then_launch(s, r);
		queue_find(s, q->id, &link);
		*link = q->next;
		s->queue_len--;
		queued_free(q);
	}
	free(ports);
	return 0;
}

static bool evictions_in_flight(struct server *s)
{
	for (struct run *r = s->runs; r; r = r->next)
		if (r->evicting)
			return true;
	return false;
}

/*
 * q does not fit: evict the cheapest set of lower-priority preemptible
 * jobs that makes room, if there is one. Returns true when it did.
 */
static bool preempt_for(struct server *s, struct queued_job *q,
			const struct kn_sched_request *req)
{
	struct kn_sched_victim *cands;
	size_t n = 0, *victims, n_victims = 0;
	bool done = false;

	for (struct run *r = s->runs; r; r = r->next)
		n++;
	cands = kn_xcalloc(n ? n : 1, sizeof(*cands));
	victims = kn_xcalloc(n ? n : 1, sizeof(*victims));
	n = 0;
	for (struct run *r = s->runs; r; r = r->next) {
		if (r->stopping)
			continue;
		cands[n].job_id = r->job_id;
		cands[n].priority = r->spec->priority;
		cands[n].preemptible = r->spec->preemptible;
		cands[n].started_at = r->started_at;
		cands[n].req = &r->req;
		cands[n].bindings = r->bindings;
		n++;
	}
	if (kn_sched_find_victims(&s->cluster, req, q->priority, cands, n,
				  victims, &n_victims) == 0) {
		char why[128];
		snprintf(why, sizeof(why),
			 "preempted for job %lld (priority %d)", (long long)q->id,
			 q->priority);
		for (size_t i = 0; i < n_victims; i++) {
			struct kn_error err;
			if (jobs_evict(s, NULL, cands[victims[i]].job_id, -1, why,
				       &err) < 0)
				kn_log(KN_LOG_WARN, "%s", err.message);
		}
		snprintf(q->reason, sizeof(q->reason),
			 "waiting for %zu lower-priority job%s to be preempted",
			 n_victims, n_victims == 1 ? "" : "s");
		done = true;
	}
	free(cands);
	free(victims);
	return done;
}

void jobs_tick(void *arg)
{
	struct server *s = arg;
	int64_t now = kn_now_ms(), next_wake = 0;
	struct kn_sched_queue_entry *order;
	struct kn_sched_packing packing = {
		.policy = s->policy,
		.workload = s->workload,
		.n_workload = s->n_workload,
	};
	struct placed *pl;
	size_t n = 0, np = 0;
	bool hold = false;

	if (!s->queue)
		return;
	order = kn_xcalloc(s->queue_len, sizeof(*order));
	pl = kn_xcalloc(s->queue_len, sizeof(*pl));
	for (struct queued_job *q = s->queue; q; q = q->next) {
		order[n].job_id = q->id;
		order[n].priority = q->priority;
		order[n].submitted_at = q->submitted_at;
		n++;
	}
	kn_sched_sort_queue(order, n);
	for (size_t i = 0; i < n; i++) {
		struct queued_job *q = queue_find(s, order[i].job_id, NULL);
		struct placed *p = &pl[np];
		int *spread_placed;
		int rc;

		if (q->not_before > now) {
			char in[32];
			kn_format_duration(q->not_before - now, in, sizeof(in));
			snprintf(q->reason, sizeof(q->reason),
				 "waiting for retry backoff (%s left)", in);
			if (!next_wake || q->not_before < next_wake)
				next_wake = q->not_before;
			continue;
		}
		sreq_build(s, q->spec, &p->sr);
		p->bindings = kn_xcalloc((size_t)q->spec->tasks,
					 sizeof(*p->bindings));
		spread_placed = spread_group_placed(s, q, &p->sr.req, pl, np);
		p->sr.req.spread_placed = spread_placed;
		packing.seed = (uint64_t)q->id;
		p->sr.req.packing = &packing;
		rc = kn_sched_place(&s->cluster, &p->sr.req, p->bindings,
				    q->reason, sizeof(q->reason));
		/* Of this turn only: the run keeps no pointer to them. */
		p->sr.req.spread_placed = NULL;
		p->sr.req.packing = NULL;
		free(spread_placed);
		if (rc == 0) {
			p->q = q;
			q->reason[0] = '\0';
			q->preempting = false;
			np++;
			continue;
		}
		if (strncmp(q->reason, KN_SCHED_NEVER,
			    strlen(KN_SCHED_NEVER)) != 0) {
			if (q->preempting && evictions_in_flight(s)) {
				snprintf(q->reason, sizeof(q->reason),
					 "waiting for preempted jobs to stop");
				hold = true;
			} else {
				q->preempting = preempt_for(s, q, &p->sr.req);
				hold = q->preempting;
			}
		}
		free(p->bindings);
		sreq_release(&p->sr);
		memset(p, 0, sizeof(*p));
		/* What the victims free is for q: nothing behind it jumps in. */
		if (hold) {
			for (size_t k = i + 1; k < n; k++) {
				struct queued_job *w =
					queue_find(s, order[k].job_id, NULL);
				snprintf(w->reason, sizeof(w->reason),
					 "waiting behind job %lld, for which "
					 "lower-priority jobs are being preempted",
					 (long long)q->id);
			}
			break;
		}
	}
	if (np)
		bind_placed(s, pl, np, now);
	for (size_t i = 0; i < np; i++) {
		free(pl[i].bindings);
		sreq_release(&pl[i].sr);
	}
	free(pl);
	free(order);
	if (next_wake)
		kn_timer_arm(s->tick_timer, next_wake - now);
}

/* ---- task exits and attempt outcomes ---- */

static const char *signal_label(int sig)
{
	const char *d = sigabbrev_np(sig);
	return d ? d : "?";
}

/* "rank 1: exit code 3", "rank 0: killed by SIGKILL", "rank 0: timeout". */
static void describe_failure(const struct run_task *t, char *buf, size_t len)
{
	const struct kn_task_status *st = &t->status;

	if (st->reason[0] && strcmp(st->reason, "timeout") != 0)
		snprintf(buf, len, "rank %d: %s", t->rank, st->reason);
	else if (st->signal)
		snprintf(buf, len, "rank %d: killed by SIG%s%s", t->rank,
			 signal_label(st->signal),
			 !strcmp(st->reason, "timeout") ? " after timeout" : "");
	else
		snprintf(buf, len, "rank %d: exit code %d", t->rank,
			 st->exit_code);
}

static bool task_failed(const struct run_task *t)
{
	return t->status.exit_code != 0 || t->status.signal != 0;
}

static int64_t backoff_ms(const struct kn_job_spec *spec, int retry)
{
	int64_t ms = spec->backoff_ms;

	for (int i = 1; i < retry && ms < spec->backoff_max_ms; i++)
		ms *= 2;
	return ms < spec->backoff_max_ms ? ms : spec->backoff_max_ms;
}

/*
 * Goodput of an attempt in task-milliseconds. A succeeded attempt kept all
 * its work but its restore; a failed, preempted or cancelled one kept only
 * what its last synced checkpoint holds, and the rest — with the restore —
 * is lost and will be done again.
 */
static void account_goodput(const struct run *r, struct kn_attempt_row *a)
{
	int64_t ran = a->ended_at - a->started_at, kept;

	if (ran < 0)
		ran = 0;
	a->checkpoint = r->checkpoint[0] ? (char *)r->checkpoint : NULL;
	a->checkpoint_at = r->checkpoint_at;
	a->restore_ms = r->restore_ms;
	if (a->state == KN_JOB_SUCCEEDED)
		kept = ran - r->restore_ms;
	else if (r->checkpoint_at > a->started_at + r->restore_ms)
		kept = r->checkpoint_at - a->started_at - r->restore_ms;
	else
		kept = 0;
	if (kept < 0)
		kept = 0;
	if (kept > ran)
		kept = ran;
	a->useful_ms = kept * r->n_tasks;
	a->lost_ms = (ran - kept) * r->n_tasks;
}

/*
 * Write an attempt's end and the job's next state; requeues go back into
 * the queue once the transaction has committed (the caller's).
 */
static int finish_run(struct server *s, struct run *r, int64_t now,
		      bool *requeue, struct kn_error *err)
{
	struct kn_job_row j;
	struct kn_attempt_row a;
	const struct run_task *failed = NULL;
	bool timeout = false, restart = false;
	char why[256] = "";
	int rc;

	*requeue = false;
	for (int i = 0; i < r->n_tasks; i++) {
		const struct run_task *t = &r->tasks[i];
		if (!strcmp(t->status.reason, "timeout"))
			timeout = true;
		/* The first rank to fail is the cause; the rest were stopped. */
		if (task_failed(t) && (!failed || t->status.ended_at_ms <
							  failed->status.ended_at_ms))
			failed = t;
	}
	memset(&j, 0, sizeof(j));
	rc = kn_store_job_get(s->store, r->job_id, &j, err);
	if (rc < 0)
		return rc;
	memset(&a, 0, sizeof(a));
	a.job_id = r->job_id;
	a.number = r->attempt;
	a.started_at = r->started_at;
	a.ended_at = now;
	a.exit_code = failed ? failed->status.exit_code : 0;
	a.signal = failed ? failed->status.signal : 0;
	j.exit_code = a.exit_code;

	if (j.cancel_requested) {
		a.state = KN_JOB_CANCELLED;
		snprintf(why, sizeof(why), "%s", j.reason ? j.reason : "cancelled");
		j.state = KN_JOB_CANCELLED;
		j.ended_at = now;
	} else if (r->evicting) {
		/* Preemption is not the job's failure: no retry is used. */
		a.state = KN_JOB_PREEMPTED;
		snprintf(why, sizeof(why), "%s", r->stop_reason);
		j.state = KN_JOB_QUEUED;
		j.not_before = now;
		*requeue = true;
	} else if (r->stop_reason[0] && !strncmp(r->stop_reason, "interrupted", 11)) {
		/* Lost to a server crash before it started: not the job's fault. */
		a.state = KN_JOB_FAILED;
		snprintf(why, sizeof(why), "%s", r->stop_reason);
		j.state = KN_JOB_QUEUED;
		j.not_before = now;
		*requeue = true;
	} else if (deploy_model_dir(s, r->job_id)) {
		/* A replica serves until it is undeployed: whatever the exit,
		 * it comes back after backoff. One that had been up longer
		 * than backoff_max starts its crash count over. */
		if (failed)
			describe_failure(failed, why, sizeof(why));
		else
			snprintf(why, sizeof(why), "exited 0");
		a.state = failed ? KN_JOB_FAILED : KN_JOB_SUCCEEDED;
		if (now - r->started_at >= r->spec->backoff_max_ms)
			j.retries_used = 0;
		j.retries_used++;
		j.state = KN_JOB_QUEUED;
		j.not_before = now + backoff_ms(r->spec, j.retries_used);
		*requeue = true;
		restart = true;
	} else if (!failed) {
		a.state = KN_JOB_SUCCEEDED;
		j.state = KN_JOB_SUCCEEDED;
		j.ended_at = now;
		snprintf(why, sizeof(why), "all %d task%s exited 0", r->n_tasks,
			 r->n_tasks == 1 ? "" : "s");
	} else {
		describe_failure(failed, why, sizeof(why));
		a.state = KN_JOB_FAILED;
		if (timeout) {
			char limit[32];
			kn_format_duration(r->spec->timeout_ms, limit, sizeof(limit));
			snprintf(why, sizeof(why), "timeout: ran past %s", limit);
		}
		/* A node without a step's prerequisites, or an input that
		   changed since the first attempt: retrying is no use. */
		if (!timeout && j.retries_used < r->spec->retries &&
		    !strstr(why, KN_PREREQUISITE_PREFIX) &&
		    !strstr(why, KN_INPUT_CHANGED_PREFIX)) {
			j.retries_used++;
			j.state = KN_JOB_QUEUED;
			j.not_before = now + backoff_ms(r->spec, j.retries_used);
			*requeue = true;
		} else {
			j.state = KN_JOB_FAILED;
			j.ended_at = now;
		}
	}
	a.reason = why;
	account_goodput(r, &a);
	free(j.reason);
	if (restart) {
		char in[32];
		kn_format_duration(j.not_before - now, in, sizeof(in));
		j.reason = kn_asprintf("restart in %s after %s", in, why);
	} else if (a.state == KN_JOB_PREEMPTED) {
		j.reason = kn_asprintf("%s; back in the queue", why);
	} else if (j.state == KN_JOB_QUEUED && j.retries_used && failed &&
		   !timeout) {
		char in[32];
		kn_format_duration(j.not_before - now, in, sizeof(in));
		j.reason = kn_asprintf("retry %d of %d in %s after %s",
				       j.retries_used, r->spec->retries, in, why);
	} else if (j.state == KN_JOB_FAILED && j.retries_used) {
		j.reason = kn_asprintf("%s (after %d retr%s)", why,
				       j.retries_used,
				       j.retries_used == 1 ? "y" : "ies");
	} else {
		j.reason = kn_xstrdup(why);
	}
	rc = kn_store_attempt_put(s->store, &a, err);
	if (rc == 0)
		rc = kn_store_job_update(s->store, &j, NULL, err);
	if (rc == 0) { /* announced by settle once committed */
		kn_strlcpy(r->end_state, kn_job_state_name(j.state),
			   sizeof(r->end_state));
		kn_strlcpy(r->end_reason, j.reason ? j.reason : "",
			   sizeof(r->end_reason));
	}
	if (rc == 0 && *requeue)
		r->requeue_at = j.not_before;
	kn_job_row_release(&j);
	return rc;
}

static void stop_run(struct server *s, struct run *r, const char *reason)
{
	struct kn_error err;

	if (r->stopping)
		return;
	r->stopping = true;
	if (reason && !r->stop_reason[0])
		kn_strlcpy(r->stop_reason, reason, sizeof(r->stop_reason));
	for (int i = 0; i < r->n_tasks; i++) {
		struct run_task *t = &r->tasks[i];
		if (t->ended)
			continue;
		if (s->exec->stop(t->task_dir, &t->proc, r->stop_signal,
				  r->stop_grace_ms, &err) < 0)
			kn_log(KN_LOG_WARN, "job %lld rank %d: %s",
			       (long long)r->job_id, t->rank, err.message);
	}
}

/*
 * Write the tasks that ended since the last call, end the attempts whose
 * tasks have all ended, and release their devices. One transaction.
 */
static void settle(struct server *s, struct run **changed, size_t n)
{
	struct kn_error err;
	struct run **done = kn_xcalloc(n ? n : 1, sizeof(*done));
	bool *requeue = kn_xcalloc(n ? n : 1, sizeof(*requeue));
	size_t nd = 0;
	int64_t now = kn_now_ms();
	int rc;

	rc = kn_store_begin(s->store, &err);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		struct run *r = changed[i];
		int ended = 0;

		for (int k = 0; rc == 0 && k < r->n_tasks; k++) {
			struct run_task *t = &r->tasks[k];
			struct kn_task_row tr;
			char devs[256];

			if (!t->ended)
				continue;
			ended++;
			if (t->recorded)
				continue;
			devices_text(&r->bindings[k], devs, sizeof(devs));
			memset(&tr, 0, sizeof(tr));
			tr.job_id = r->job_id;
			tr.attempt = r->attempt;
			tr.rank = t->rank;
			tr.node = s->nodes[r->bindings[k].node].name;
			tr.devices = devs;
			tr.gpu_milli = r->bindings[k].milli_per_device;
			tr.task_dir = t->task_dir;
			tr.state = KN_TASK_EXITED;
			tr.shim_pid = t->proc.pid;
			tr.shim_start = t->proc.start;
			tr.started_at = t->status.started_at_ms
						? t->status.started_at_ms
						: r->started_at;
			tr.ended_at = t->status.ended_at_ms ? t->status.ended_at_ms
							    : now;
			tr.exit_code = t->status.exit_code;
			tr.signal = t->status.signal;
			tr.master_port = r->master_port;
			rc = kn_store_task_put(s->store, &tr, &err);
		}
		if (rc == 0 && ended == r->n_tasks) {
			bool ok = !r->evicting;
			for (int k = 0; k < r->n_tasks; k++)
				if (task_failed(&r->tasks[k]))
					ok = false;
			if (!sync_finish_ready(s, r, ok))
				continue;
			rc = finish_run(s, r, now, &requeue[nd], &err);
			done[nd++] = r;
		}
	}
	if (rc == 0)
		rc = kn_store_commit(s->store, &err);
	if (rc < 0) {
		/* Nothing is lost: the next poll finds the same exits again. */
		kn_store_rollback(s->store);
		kn_log(KN_LOG_ERROR, "recording task exits failed: %s",
		       err.message);
		free(done);
		free(requeue);
		return;
	}
	for (size_t i = 0; i < n; i++)
		for (int k = 0; k < changed[i]->n_tasks; k++)
			if (changed[i]->tasks[k].ended)
				changed[i]->tasks[k].recorded = true;
	for (size_t i = 0; i < nd; i++) {
		struct run *r = done[i];
		int64_t job_id = r->job_id;

		feed_job(s, r->job_id, r->end_state, r->end_reason);
		kn_sched_release(&s->cluster, &r->req, r->bindings);
		run_unlink(s, r);
		if (requeue[i]) {
			queue_push(s, r->job_id, r->spec->priority,
				   r->submitted_at, r->requeue_at, r->spec);
			r->spec = NULL;
		}
		run_free(r);
		if (!requeue[i]) {
			workflows_job_ended(s, job_id);
			reval_job_ended(s, job_id);
		}
	}
	free(done);
	free(requeue);
	if (nd)
		wake_scheduler(s);
}

static struct run *run_find_pid(struct server *s, int pid, int *rank)
{
	for (struct run *r = s->runs; r; r = r->next)
		for (int i = 0; i < r->n_tasks; i++)
			if (r->tasks[i].proc.pid == pid && !r->tasks[i].ended) {
				*rank = i;
				return r;
			}
	return NULL;
}

/* Read one task's state; true when it has just been found ended. */
static bool check_task(struct server *s, struct run *r, struct run_task *t)
{
	struct kn_task_status st;
	struct kn_error err;

	/* A task waiting for its restore has no process to look at yet. */
	if (t->ended || !t->launched)
		return false;
	if (t->rank == 0 && r->spec->n_inputs && !r->inputs_recorded)
		record_inputs(s, r, t);
	if (s->exec->status(t->task_dir, &t->proc, &st, &err) < 0) {
		if (kn_task_file_refused(&err)) {
			char *path = kn_asprintf("%s/status.json", t->task_dir);
			server_task_file_refused(s, r->job_id, path, &err);
			free(path);
		} else
			kn_log(KN_LOG_WARN, "job %lld rank %d: %s",
			       (long long)r->job_id, t->rank, err.message);
		return false;
	}
	if (!st.ended)
		return false;
	t->ended = true;
	t->status = st;
	/* A pod's inputs are known with its end (kube/executor.c). */
	if (t->rank == 0 && r->spec->n_inputs && !r->inputs_recorded)
		record_inputs(s, r, t);
	/* A task that synced its own checkpoints (a Kubernetes pod's shim):
	   the newest any rank reports counts, as the server's sync would. */
	if (st.checkpoint[0] && st.checkpoint_at_ms > r->checkpoint_at) {
		kn_strlcpy(r->checkpoint, st.checkpoint, sizeof(r->checkpoint));
		r->checkpoint_at = st.checkpoint_at_ms;
	}
	if (st.restored[0] && !r->restored[0])
		kn_strlcpy(r->restored, st.restored, sizeof(r->restored));
	if (st.restore_ms > r->restore_ms)
		r->restore_ms = st.restore_ms;
	/* Taken away by the platform (a spot eviction): a preemptible job
	   goes back to the queue as an eviction would send it. */
	if (st.preempted && r->spec->preemptible && !r->stopping &&
	    !r->evicting) {
		r->evicting = true;
		snprintf(r->stop_reason, sizeof(r->stop_reason),
			 "preempted: rank %d %s", t->rank, st.reason);
	}
	return true;
}

/* After exits: stop the rest of a gang whose member failed, then settle. */
static void after_exits(struct server *s, struct run **changed, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct run *r = changed[i];
		for (int k = 0; k < r->n_tasks; k++) {
			char why[160];
			if (!r->tasks[k].ended || !task_failed(&r->tasks[k]) ||
			    r->stopping)
				continue;
			describe_failure(&r->tasks[k], why, sizeof(why));
			stop_run(s, r, why);
		}
	}
	if (n)
		settle(s, changed, n);
}

static void changed_add(struct run ***v, size_t *n, struct run *r)
{
	for (size_t i = 0; i < *n; i++)
		if ((*v)[i] == r)
			return;
	*v = kn_xrealloc(*v, (*n + 1) * sizeof(**v));
	(*v)[(*n)++] = r;
}

void jobs_on_sigchld(void *arg)
{
	struct server *s = arg;
	struct run **changed = NULL;
	size_t n = 0;
	int status, pid, rank;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		struct run *r = run_find_pid(s, pid, &rank);
		if (r && check_task(s, r, &r->tasks[rank]))
			changed_add(&changed, &n, r);
	}
	after_exits(s, changed, n);
	free(changed);
}

void jobs_poll(void *arg)
{
	struct server *s = arg;
	struct run **changed = NULL;
	size_t n = 0;

	/* Children are reaped here too, in case a SIGCHLD was coalesced. */
	jobs_on_sigchld(s);
	for (struct run *r = s->runs; r; r = r->next)
		for (int k = 0; k < r->n_tasks; k++) {
			struct run_task *t = &r->tasks[k];
			/* An exit whose write failed earlier is tried again. */
			if (check_task(s, r, t) || (t->ended && !t->recorded))
				changed_add(&changed, &n, r);
		}
	after_exits(s, changed, n);
	free(changed);
	kn_timer_arm(s->poll_timer, POLL_MS);
}

/* ---- cancel ---- */

int jobs_cancel(struct server *s, const struct caller *c, int64_t id,
		struct kn_error *err)
{
	struct kn_job_row j;
	struct kn_audit a;
	char object[48];
	int rc;

	memset(&j, 0, sizeof(j));
	rc = kn_store_job_get(s->store, id, &j, err);
	if (rc < 0)
		return rc;
	if (c->role < KN_ROLE_OPERATOR && strcmp(j.owner, c->name) != 0) {
		rc = kn_errorf(err, KN_EPERM, NULL,
			       "job %lld belongs to %s; a user may cancel only "
			       "its own jobs",
			       (long long)id, j.owner);
		goto out;
	}
	if (kn_job_state_terminal(j.state)) {
		rc = kn_errorf(err, KN_ECONFLICT, "state",
			       "job %lld has already %s", (long long)id,
			       kn_job_state_name(j.state));
		goto out;
	}
	if (j.cancel_requested)
		goto out; /* asked twice: the first request stands */
	snprintf(object, sizeof(object), "job/%lld", (long long)id);
	audit_init(&a, c, "job.cancel", object);
	free(j.reason);
	if (j.state == KN_JOB_QUEUED) {
		j.state = KN_JOB_CANCELLED;
		j.ended_at = kn_now_ms();
		j.cancel_requested = true;
		j.reason = kn_asprintf("cancelled by %s while queued", c->name);
		rc = kn_store_job_update(s->store, &j, &a, err);
		if (rc == 0) {
			queue_remove(s, id);
			feed_job(s, id, "cancelled", j.reason);
			workflows_job_ended(s, id);
			reval_job_ended(s, id);
		}
		goto out;
	}
	j.cancel_requested = true;
	j.reason = kn_asprintf("cancelled by %s", c->name);
	rc = kn_store_job_update(s->store, &j, &a, err);
	if (rc < 0)
		goto out;
	for (struct run *r = s->runs; r; r = r->next)
		if (r->job_id == id)
			stop_run(s, r, j.reason);
out:
	kn_job_row_release(&j);
	return rc;
}

int jobs_evict(struct server *s, const struct caller *c, int64_t id,
	       int64_t grace_ms, const char *why, struct kn_error *err)
{
	struct kn_job_row j;
	struct kn_audit a;
	struct run *r = NULL;
	char object[48];
	int rc;

	memset(&j, 0, sizeof(j));
	rc = kn_store_job_get(s->store, id, &j, err);
	if (rc < 0)
		return rc;
	if (c && c->role < KN_ROLE_OPERATOR && strcmp(j.owner, c->name) != 0) {
		rc = kn_errorf(err, KN_EPERM, NULL,
			       "job %lld belongs to %s; a user may evict only "
			       "its own jobs",
			       (long long)id, j.owner);
		goto out;
	}
	for (struct run *p = s->runs; p; p = p->next)
		if (p->job_id == id)
			r = p;
	if (!r || j.state != KN_JOB_RUNNING) {
		rc = kn_errorf(err, KN_ECONFLICT, "state",
			       "job %lld is %s, not running: nothing to evict",
			       (long long)id, kn_job_state_name(j.state));
		goto out;
	}
	if (!r->spec->preemptible) {
		rc = kn_errorf(err, KN_ECONFLICT, "preemptible",
			       "job %lld is not preemptible (its spec does not "
			       "say preemptible: true)",
			       (long long)id);
		goto out;
	}
	if (r->stopping)
		goto out; /* already on its way out */
	if (c) {
		snprintf(object, sizeof(object), "job/%lld", (long long)id);
		audit_init(&a, c, "job.evict", object);
		a.detail = (char *)why;
		rc = kn_store_audit_insert(s->store, &a, err);
		if (rc < 0)
			goto out;
	}
	r->evicting = true;
	if (r->spec->checkpoint.set) {
		r->stop_signal = r->spec->checkpoint.signal;
		r->stop_grace_ms = r->spec->checkpoint.grace_ms;
	}
	if (grace_ms >= 0)
		r->stop_grace_ms = grace_ms;
	{
		char reason[128];
		snprintf(reason, sizeof(reason), "preempted: %s", why);
		stop_run(s, r, reason);
	}
out:
	kn_job_row_release(&j);
	return rc;
}

int jobs_restart(struct server *s, int64_t id, const char *why,
		 struct kn_error *err)
{
	for (struct run *r = s->runs; r; r = r->next) {
		if (r->job_id != id)
			continue;
		stop_run(s, r, why);
		return 0;
	}
	return kn_errorf(err, KN_ENOTFOUND, NULL, "job %lld is not running",
			 (long long)id);
}

/* ---- node view ---- */

json_t *jobs_device_allocations(struct server *s, size_t node,
				int device_index)
{
	json_t *list = json_array();

	for (struct run *r = s->runs; r; r = r->next)
		for (int k = 0; k < r->n_tasks; k++)
			for (int d = 0; d < r->bindings[k].n_devices; d++) {
				const struct kn_sched_binding *b =
					&r->bindings[k];
				json_t *a;

				if (b->node != node ||
				    b->devices[d] != device_index)
					continue;
				a = json_pack("{s:I, s:i, s:i}", "job",
					      (json_int_t)r->job_id, "rank", k,
					      "milli", b->milli_per_device);
				/* A MIG instance: which, and where. */
				if (b->mig_profile) {
					json_object_set_new(
						a, "mig_profile",
						json_string(
							b->mig_profile->name));
					json_object_set_new(
						a, "mig_start",
						json_integer(b->mig_start));
				}
				json_array_append_new(list, a);
			}
	return list;
}

bool jobs_task_active(struct server *s, int64_t job_id, int attempt, int rank)
{
	for (struct run *r = s->runs; r; r = r->next)
		if (r->job_id == job_id && r->attempt == attempt &&
		    rank < r->n_tasks)
			return !r->tasks[rank].recorded;
	return false;
}

void jobs_launch_run(struct server *s, struct run *r)
{
	if (r->stopping) {
		/* Cancelled or evicted while its checkpoint was restored. */
		for (int i = 0; i < r->n_tasks; i++) {
			struct run_task *t = &r->tasks[i];
			t->ended = true;
			t->status.ended = true;
			t->status.exit_code = -1;
			t->status.ended_at_ms = kn_now_ms();
			kn_strlcpy(t->status.reason, "stopped before it started",
				   sizeof(t->status.reason));
		}
		settle(s, &r, 1);
		return;
	}
	for (int i = 0; i < r->n_tasks; i++)
		launch_task(s, r, &r->tasks[i]);
	sync_run_started(s, r);
}

void jobs_sync_settled(struct server *s, struct run *r)
{
	settle(s, &r, 1);
}

/* ---- recovery ---- */

static struct kn_sched_device *node_device(struct server *s, size_t node,
					   int index)
{
	struct kn_sched_node *n = &s->cluster.nodes[node];

	for (size_t i = 0; i < n->n_devices; i++)
		if (n->devices[i].index == index)
			return &n->devices[i];
	return NULL;
}

/*
 * "0:mig=1g.10gb@6" -> a MIG binding, its instance put back on the device.
 * false when the text is not of that form. A device or profile this node
 * no longer has in MIG mode is logged and the task holds nothing.
 */
static bool rebind_mig(struct server *s, struct kn_sched_binding *b,
		       const char *text)
{
	struct kn_sched_device *dev;
	char profile[32];
	int index, start, used = 0;

	if (sscanf(text, "%d:mig=%31[^@]@%d%n", &index, profile, &start,
		   &used) != 3 || text[used] != '\0')
		return false;
	dev = node_device(s, b->node, index);
	if (!dev || !dev->mig || !kn_mig_profile(dev->mig, profile) ||
	    dev->n_mig_slices >= KN_MIG_MAX_SLICES) {
		kn_log(KN_LOG_WARN, "task's MIG instance %s is not on this "
		       "node now; not counted", text);
		return true;
	}
	b->n_devices = 1;
	b->devices[0] = index;
	b->mig_profile = kn_mig_profile(dev->mig, profile);
	b->mig_start = start;
	dev->mig_slices[dev->n_mig_slices].profile = b->mig_profile;
	dev->mig_slices[dev->n_mig_slices++].start = start;
	return true;
}

/*
 * "0,2" -> binding on the task row's node, charged to the snapshot. A
 * node this server no longer runs (renamed, or not in --sim-node now):
 * the first one, as a single-node server always did.
 */
static void rebind(struct server *s, struct run *r, int rank,
		  const struct kn_task_row *tr)
{
	struct kn_sched_binding *b = &r->bindings[rank];
	const char *p = tr->devices;
	int node = tr->node ? nodes_find(s, tr->node) : -1;
	struct kn_sched_node *sn;

	if (node < 0 && s->cluster.n_nodes > 1)
		kn_log(KN_LOG_WARN, "job %lld's task %d ran on node %s, which "
		       "this server does not run now; counted on %s",
		       (long long)r->job_id, rank, tr->node ? tr->node : "?",
		       s->nodes[0].name);
	memset(b, 0, sizeof(*b));
	b->node = node < 0 ? 0 : (size_t)node;
	sn = &s->cluster.nodes[b->node];
	b->mig_start = -1;
	b->milli_per_device = tr->gpu_milli;
	if (p && strstr(p, ":mig=") && rebind_mig(s, b, p))
		p = NULL;
	while (p && *p && b->n_devices < KN_SCHED_MAX_GPUS_PER_TASK) {
		char *end;
		long idx = strtol(p, &end, 10);
		if (end == p)
			break;
		b->devices[b->n_devices++] = (int)idx;
		p = *end == ',' ? end + 1 : end;
	}
	for (int d = 0; d < b->n_devices; d++) {
		struct kn_sched_device *dev =
			node_device(s, b->node, b->devices[d]);

		if (dev)
			dev->used_milli += b->milli_per_device;
	}
	sn->cpu_milli_used += r->req.cpu_milli;
	sn->memory_used += r->req.memory_bytes;
}

static int recover_running(struct server *s, const struct kn_job_row *j,
			   struct kn_error *err)
{
	struct kn_job_spec *spec = NULL;
	struct kn_task_row *tasks = NULL;
	struct kn_attempt_row *attempts = NULL;
	size_t nt = 0, na = 0;
	struct run *r;
	int rc;

	rc = parse_spec(s, j->spec_yaml, strlen(j->spec_yaml), j->filename,
			&spec, err);
	if (rc < 0)
		return rc;
	rc = kn_store_task_list(s->store, j->id, j->attempts, &tasks, &nt, err);
	if (rc == 0)
		rc = kn_store_attempt_list(s->store, j->id, &attempts, &na, err);
	if (rc < 0) {
		kn_job_spec_free(spec);
		return rc;
	}
	r = run_new(s, j->id, j->attempts, spec);
	r->submitted_at = j->submitted_at;
	r->started_at = na ? attempts[na - 1].started_at : j->started_at;
	for (size_t i = 0; i < nt && (int)tasks[i].rank < r->n_tasks; i++) {
		struct run_task *t = &r->tasks[tasks[i].rank];
		struct kn_error aerr;

		r->master_port = tasks[i].master_port;
		rebind(s, r, tasks[i].rank, &tasks[i]);
		if (tasks[i].state == KN_TASK_EXITED) {
			t->ended = t->recorded = true;
			t->status.ended = true;
			t->status.exit_code = tasks[i].exit_code;
			t->status.signal = tasks[i].signal;
			t->status.started_at_ms = tasks[i].started_at;
			t->status.ended_at_ms = tasks[i].ended_at;
			continue;
		}
		if (s->exec->adopt(t->task_dir, &t->proc, &aerr) < 0) {
			/* Bound but never started: the crash came first. */
			t->ended = true;
			t->status.ended = true;
			t->status.exit_code = -1;
			t->status.ended_at_ms = kn_now_ms();
			kn_strlcpy(t->status.reason, "never started",
				   sizeof(t->status.reason));
			snprintf(r->stop_reason, sizeof(r->stop_reason),
				 "interrupted: the server stopped while starting "
				 "attempt %d",
				 r->attempt);
			continue;
		}
		t->launched = true;
		check_task(s, r, t);
	}
	kn_task_list_free(tasks, nt);
	kn_attempt_list_free(attempts, na);
	/* An eviction that was under way when the server stopped goes on. */
	for (int i = 0; i < r->n_tasks && !r->stop_reason[0]; i++) {
		char *stop = kn_asprintf("%s/stop.json", r->tasks[i].task_dir);
		if (access(stop, F_OK) == 0 && !j->cancel_requested) {
			r->evicting = true;
			r->stopping = true;
			snprintf(r->stop_reason, sizeof(r->stop_reason),
				 "preempted: eviction under way when the server "
				 "restarted");
		}
		free(stop);
	}
	if (r->stop_reason[0] && !r->stopping) {
		char reason[128];
		kn_strlcpy(reason, r->stop_reason, sizeof(reason));
		stop_run(s, r, reason);
	}
	sync_run_started(s, r);
	return 0;
}

int jobs_recover(struct server *s, struct kn_error *err)
{
	struct kn_job_filter f;
	struct kn_job_row *jobs = NULL;
	struct run **changed = NULL;
	size_t n = 0, nc = 0;
	int rc, adopted = 0, queued = 0;

	memset(&f, 0, sizeof(f));
	f.state = -1;
	f.active_only = true;
	f.with_spec = true;
	rc = kn_store_job_list(s->store, &f, &jobs, &n, err);
	if (rc < 0)
		return rc;
	for (size_t i = 0; i < n; i++) {
		struct kn_job_spec *spec = NULL;
		struct kn_error perr;

		if (jobs[i].state == KN_JOB_RUNNING) {
			if (recover_running(s, &jobs[i], &perr) < 0) {
				kn_log(KN_LOG_ERROR, "job %lld: cannot recover: %s",
				       (long long)jobs[i].id, perr.message);
				continue;
			}
			adopted++;
			continue;
		}
		if (parse_spec(s, jobs[i].spec_yaml, strlen(jobs[i].spec_yaml),
			       jobs[i].filename, &spec, &perr) < 0) {
			kn_log(KN_LOG_ERROR, "job %lld: stored spec no longer "
			       "parses: %s", (long long)jobs[i].id, perr.message);
			continue;
		}
		queue_push(s, jobs[i].id, jobs[i].priority, jobs[i].submitted_at,
			   jobs[i].not_before, spec);
		queued++;
	}
	kn_job_list_free(jobs, n);
	for (struct run *r = s->runs; r; r = r->next)
		changed_add(&changed, &nc, r);
	after_exits(s, changed, nc);
	free(changed);
	if (adopted || queued)
		kn_log(KN_LOG_INFO, "recovered %d running and %d queued job%s",
		       adopted, queued, adopted + queued == 1 ? "" : "s");
	wake_scheduler(s);
	return 0;
}

void jobs_free_all(struct server *s)
{
	while (s->queue) {
		struct queued_job *q = s->queue;
		s->queue = q->next;
		queued_free(q);
	}
	s->queue_len = 0;
	while (s->runs) {
		struct run *r = s->runs;
		s->runs = r->next;
		run_free(r);
	}
}
