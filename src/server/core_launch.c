/*
 * The job core's launch path: a bound attempt's run in memory, each
 * task's environment (with what the services add through the job
 * hooks) and its start through the executor; a job's inputs and their
 * digests; what runs on a device.
 */
#include "core_internal.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- starting attempts ---- */

int free_port(void)
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
void devices_text(const struct kn_sched_binding *b, char *buf,
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

char *task_dir_path(struct server *s, int64_t job, int attempt,
			   int rank)
{
	return kn_asprintf("%s/tasks/%lld/%d/%d", s->home, (long long)job,
			   attempt, rank);
}

struct run *run_new(struct server *s, int64_t job_id, int attempt,
			   struct kn_job_spec *spec, char *owner)
{
	struct run *r = kn_xcalloc(1, sizeof(*r));
	struct sreq sr;

	/* Charge owners up to now at the rates before this run. */
	fair_advance(s, kn_now_ms());
	r->job_id = job_id;
	r->owner = owner ? owner : job_owner(s, job_id);
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

void run_free(struct run *r)
{
	sync_run_gone(r);
	kn_timer_free(r->launch_timer);
	for (int i = 0; i < r->n_tasks; i++)
		free(r->tasks[i].task_dir);
	KN_FREE_ALL(r->checkpoint_dir, r->output_dir, r->tasks, r->bindings,
		    (void *)r->req.selector, (void *)r->req.tolerations,
		    (void *)r->req.required, (void *)r->req.preferred);
	kn_job_spec_free(r->spec);
	KN_FREE_ALL(r->owner, r);
}

void run_unlink(struct server *s, struct run *r)
{
	/* Charge owners up to now, this run included. */
	fair_advance(s, kn_now_ms());
	KN_LIST_UNLINK(&s->runs, r);
}

void task_end_unstarted(struct run_task *t, const char *fmt, ...)
{
	va_list ap;

	t->ended = true;
	t->status.ended = true;
	t->status.exit_code = -1;
	t->status.ended_at_ms = kn_now_ms();
	va_start(ap, fmt);
	vsnprintf(t->status.reason, sizeof(t->status.reason), fmt, ap);
	va_end(ap);
}

static void add_env(char ***env, size_t *n, char *entry)
{
	*env = kn_xrealloc(*env, (*n + 2) * sizeof(char *));
	(*env)[(*n)++] = entry;
	(*env)[*n] = NULL;
}

struct env_list {
	char ***env;
	size_t *n;
};

static void add_array_var(void *ctx, const char *name, long long value)
{
	struct env_list *l = ctx;

	add_env(l->env, l->n, kn_asprintf("%s=%lld", name, value));
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
void record_inputs(struct server *s, struct run *r,
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
	rc = core_store_end(s->store, rc, &err);
	if (rc < 0) {
		kn_log(KN_LOG_ERROR, "job %lld: recording its inputs: %s",
		       (long long)r->job_id, err.message);
		r->inputs_recorded = false; /* the next poll tries again */
	}
out:
	json_decref(doc);
	KN_FREE_ALL(text, path);
}

/* A task's environment, and what a pod's shim gets beside it. */
struct task_env {
	char **env; /* "NAME=value" each, n of them */
	size_t n;
	char *inputs;   /* KILN_INPUTS, for a pod's manifest, or NULL */
	char *requires; /* KILN_REQUIRES, likewise */
	bool inputs_ok; /* false: the inputs' digests failed, as inputs_err says */
	struct kn_error inputs_err;
};

/* What task t, bound by b, is told of its GPUs: its share, its MIG
   profile, MPS's cap, whether they are simulated. */
static void task_env_gpu(struct server *s, const struct kn_sched_binding *b,
			 const struct run_task *t, bool mps, char ***env,
			 size_t *n)
{
	bool simulated = s->nodes[b->node].devices.simulated;

	add_env(env, n, kn_asprintf("KILN_GPU_MILLI=%d", b->milli_per_device));
	if (b->mig_profile)
		add_env(env, n, kn_asprintf("KILN_MIG_PROFILE=%s",
					    b->mig_profile->name));
	/* Simulated GPUs cannot be measured: the task may declare what it
	   would use there (usage_sampling.c). */
	if (b->n_devices > 0 && simulated)
		add_env(env, n, kn_asprintf("KILN_SIM_GPU_USAGE=%s/%s",
					    t->task_dir, usage_sim_file()));
	if (b->milli_per_device > 0 && b->milli_per_device < KN_MILLI) {
		char share[16];

		share_text(b->milli_per_device, share, sizeof(share));
		add_env(env, n, kn_asprintf("KILN_GPU_SHARE=%s", share));
	}
	/* MPS caps the task's SMs at its share, in whole percent (>= 1). */
	if (mps)
		add_env(env, n, kn_asprintf("%s=%d", MPS_PERCENTAGE,
					    b->milli_per_device >= 10
						    ? b->milli_per_device / 10
						    : 1));
	if (simulated)
		add_env(env, n, kn_xstrdup("KILN_SIMULATED_GPUS=1"));
}

/*
 * The variables task t of r starts with: the spec's, kiln's own, and
 * what the services that own the job add through the job hooks.
 */
static void task_env_build(struct server *s, struct run *r,
			   const struct run_task *t, struct task_env *out)
{
	const struct kn_job_spec *spec = r->spec;
	struct job_task task;
	struct job_model model;
	char devs[256], **env = NULL, *inputs = NULL, *requires = NULL;
	json_t *step_env;
	size_t n = 0;
	int local_rank = 0;
	bool mps, inputs_ok = true;

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
	if (spec->array.count) {
		struct env_list l = {&env, &n};

		kn_job_array_env(&spec->array, add_array_var, &l);
	}
	add_env(&env, &n, kn_asprintf("KILN_TASK_DIR=%s", t->task_dir));
	add_env(&env, &n, kn_asprintf("KILN_CHECKPOINT_DIR=%s", r->checkpoint_dir));
	add_env(&env, &n, kn_asprintf("KILN_OUTPUT_DIR=%s", r->output_dir));
	/* A workflow step's inputs and prerequisites, which the shim
	 * fetches and checks (workflows.c). */
	add_env(&env, &n, kn_asprintf("KILN_INPUT_DIR=%s/tasks/%lld/%d/inputs",
				      s->home, (long long)r->job_id,
				      r->attempt));
	task.job_id = r->job_id;
	task.attempt = r->attempt;
	task.rank = t->rank;
	task.binding = b;
	if ((step_env = job_hooks_task_env(s->hooks, &task))) {
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
		inputs = inputs_for_shim(s, r->job_id, spec, &out->inputs_err);
		if (inputs)
			add_env(&env, &n, kn_asprintf("KILN_INPUTS=%s", inputs));
		inputs_ok = inputs != NULL;
	}
	if (r->resume_from[0])
		add_env(&env, &n, kn_asprintf("KILN_RESUME_FROM=%s", r->resume_from));
	task_env_gpu(s, b, t, mps, &env, &n);
	/* A service replica serves on its attempt's port (deploy.c); an
	   evaluation job gets the version it tests (revalidate.c). */
	if (job_hooks_model(s->hooks, r->job_id, &model)) {
		if (model.serves)
			add_env(&env, &n, kn_asprintf("KILN_PORT=%d",
						      r->master_port));
		add_env(&env, &n, kn_asprintf("KILN_MODEL_DIR=%s", model.dir));
		if (model.ref)
			add_env(&env, &n, kn_asprintf("KILN_MODEL=%s",
						      model.ref));
	}

	out->env = env;
	out->n = n;
	out->inputs = inputs;
	out->requires = requires;
	out->inputs_ok = inputs_ok;
}

static void launch_task(struct server *s, struct run *r, struct run_task *t)
{
	const struct kn_job_spec *spec = r->spec;
	struct task_env e;
	int rc;
	struct kn_task_launch l;
	struct kn_task_limits limits;
	char **dev_nodes = NULL;
	char run_as[64];
	struct kn_error err, devices_err;
	int devices_rc;

	task_env_build(s, r, t, &e);
	devices_rc = isolation_task_devices(s, &r->bindings[t->rank],
					    &dev_nodes, &devices_err);
	memset(&l, 0, sizeof(l));
	l.task_dir = t->task_dir;
	l.devices = dev_nodes;
	l.argv = spec->command;
	l.env = e.env;
	l.workdir = spec->workdir;
	l.timeout_ms = spec->timeout_ms;
	l.grace_ms = s->cfg.kill_grace_ms;
	l.log_max_bytes = s->cfg.log_max_bytes;
	l.log_keep = KN_LOG_KEEP;
	l.limits = limits_for(s, spec, &limits);
	l.spec = spec;
	l.job_id = r->job_id;
	l.attempt = r->attempt;
	l.rank = t->rank;
	l.ntasks = r->n_tasks;
	l.inputs = e.inputs;
	l.requires = e.requires;
	l.tty = spec->tty;
	rc = kn_mkdir_p(t->task_dir, 0700);
	if (rc == 0 && sync_wanted(r))
		rc = kn_mkdir_p(r->checkpoint_dir, 0700);
	if (rc == 0 && sync_wanted(r))
		rc = kn_mkdir_p(r->output_dir, 0700);
	if (rc < 0)
		kn_errorf(&err, kn_errcode_for_write(rc), NULL,
			  "cannot create %s: %s", t->task_dir, strerror(-rc));
	else if ((rc = devices_rc) < 0)
		err = devices_err;
	else if (!e.inputs_ok)
		rc = kn_errorf(&err, KN_EIO, NULL, "its inputs' digests: %s",
			       e.inputs_err.message);
	else if ((rc = isolation_launch(s, r->job_id, &l, run_as,
					sizeof(run_as), &err)) == 0)
		rc = s->exec->ops->start(s->exec, &l, &t->proc, &err);
	t->launched = true;
	if (rc < 0) {
		kn_log(KN_LOG_ERROR, "job %lld rank %d: %s",
		       (long long)r->job_id, t->rank, err.message);
		task_end_unstarted(t, "cannot start: %.80s", err.message);
		if (err.code == KN_ENOSPACE)
			r->launch_no_space = true;
	}
	for (size_t i = 0; i < e.n; i++)
		free(e.env[i]);
	free(e.env);
	kn_strv_free(dev_nodes);
	KN_FREE_ALL(e.inputs, e.requires);
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

/*
 * How long one loop turn may spend starting a gang's tasks. Each start
 * spawns a shim (milliseconds here, several times that under load), so
 * a gang of hundreds started in one turn would hold
 * every API request for seconds; a batch ends once this much time has
 * passed (after at least one task), and the loop answers what came in
 * before the next. Bounding time rather than a count of tasks keeps the
 * stall the same on a loaded machine. A worker thread cannot do the
 * starts: a launch reads and writes the server's state (the store, the
 * job hooks, the task's run), which only the loop thread may touch.
 */
#define LAUNCH_TURN_MS 50

/*
 * The run was cancelled, evicted or lost a member before its tasks
 * from launch_next on started: they end unstarted, and the run settles.
 */
static void end_unlaunched(struct server *s, struct run *r)
{
	for (int i = r->launch_next; i < r->n_tasks; i++)
		task_end_unstarted(&r->tasks[i], "stopped before it started");
	r->launch_next = r->n_tasks;
	settle(s, &r, 1); /* may free r */
}

/* Start the next batch of r's tasks; the loop calls again for the rest. */
static void launch_batch(void *arg)
{
	struct run *r = arg;
	struct server *s = r->server;
	int64_t until = kn_mono_ms() + LAUNCH_TURN_MS;

	if (r->stopping) {
		end_unlaunched(s, r);
		return;
	}
	do
		launch_task(s, r, &r->tasks[r->launch_next++]);
	while (r->launch_next < r->n_tasks && kn_mono_ms() < until);
	if (r->launch_next < r->n_tasks) {
		if (!r->launch_timer)
			r->launch_timer = kn_timer_new(s->loop, launch_batch, r);
		kn_timer_arm(r->launch_timer, 0);
		return;
	}
	sync_run_started(s, r);
}

void jobs_launch_run(struct server *s, struct run *r)
{
	r->server = s;
	r->launch_next = 0;
	launch_batch(r);
}
