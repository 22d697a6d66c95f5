/*
 * Dev environments (`kind: DevEnvironment`, docs/devenv.md): a job the
 * core runs like any other, which this service stops when it sits idle
 * and whose home directory it keeps in the blob store between starts.
 *
 * Idle: no session attached (devenv_session) and no usage sample of its
 * GPUs at or above the spec's idle_gpu_utilization (devenv_gpu_sample,
 * from usage_sampling.c). A tick each second measures how long that has
 * lasted; at idle_timeout less a lead (a fifth of it, at most 5 minutes)
 * a `devenv.idle_warning` event goes out, and at idle_timeout the job is
 * stopped (jobs_stop_system, audited as devenv.stop by the system).
 * max_duration stops it however busy it is. Anything busy again clears a
 * warning.
 *
 * Home: $HOME is TASK_DIR/home.JOB.ATTEMPT. Before the attempt's tasks
 * start (the hold hook, at launch) the newest saved home of the same owner
 * and name is restored there with the checkpoint code (kn_ckpt_restore:
 * every file's size and sha256 checked); when its tasks have all ended
 * (hold, at the end) the directory is uploaded as the next saved home
 * (kn_ckpt_upload, which walks it without following links and refuses
 * it whole if it holds a link, FIFO, socket or device: the previous home
 * then stays the newest). Two are kept. The key in the store is
 * devenv-HASH, HASH a digest of the owner and the name, so one owner
 * never reaches another's home by naming it.
 *
 * Rejected: a tar made or unpacked by the server (it would follow what
 * the task planted, as the server's user); a home outside the task
 * directory (the sandbox shows a task only its own directories).
 */
#include "internal.h"

#include "devenvsvc.h"
#include "service.h"

#include "ckpt/ckpt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TICK_MS 1000
#define WARN_LEAD_MAX_MS (5 * 60 * 1000)
/* Saved homes kept per dev environment. */
#define HOMES_KEPT 2

enum home_step { HOME_NONE, HOME_BUSY, HOME_DONE };

/* One attempt of a dev environment, as this service follows it. */
struct track {
	int64_t job_id;
	int attempt;
	int64_t last_tick_ms;
	int64_t busy_ms;     /* when it was last seen busy */
	int64_t idle_ms;     /* time it ran idle, all told */
	int gpu_milli;       /* the last GPU sample, -1: none yet */
	int64_t gpu_at_ms;
	int sessions;
	int64_t warned_at;   /* the idle warning went out then; 0: not */
	bool recorded;       /* its start is in the store */
	const char *stop;    /* "idle", "max_duration", or "": why it ends */
	enum home_step restore, save;
	struct track *next;
};

struct devenv_state {
	struct server *s;
	struct kn_timer *timer;
	struct track *tracks;
};

/* Work for a worker: a home restored or saved. */
struct home_work {
	struct server *s;
	int64_t job_id;
	int attempt;
	bool save;
	char *store_url;
	char *key;
	char *task_dir;
	char *home;  /* TASK_DIR/home.JOB.ATTEMPT */
	/* results */
	int rc;
	struct kn_error err;
	char *restored;
	char *warnings;
	struct kn_ckpt_manifest manifest;
};

static struct devenv_state *state(struct server *s)
{
	return service_state(s, &devenv_service);
}

static struct run *find_run(struct server *s, int64_t job_id, int attempt)
{
	for (struct run *r = s->runs; r; r = r->next)
		if (r->job_id == job_id && (attempt < 0 || r->attempt == attempt))
			return r;
	return NULL;
}

static struct run *devenv_run(struct server *s, int64_t job_id, int attempt)
{
	struct run *r = find_run(s, job_id, attempt);

	return r && r->spec->devenv.set ? r : NULL;
}

static struct track *track_find(struct devenv_state *d, int64_t job_id,
				int attempt)
{
	for (struct track *t = d->tracks; t; t = t->next)
		if (t->job_id == job_id && (attempt < 0 || t->attempt == attempt))
			return t;
	return NULL;
}

static void track_drop(struct devenv_state *d, int64_t job_id)
{
	struct track **p = &d->tracks;

	while (*p) {
		struct track *t = *p;
		if (t->job_id == job_id) {
			*p = t->next;
			free(t);
		} else {
			p = &t->next;
		}
	}
}

static struct track *track_get(struct devenv_state *d, const struct run *r)
{
	struct track *t = track_find(d, r->job_id, r->attempt);
	int64_t now = kn_now_ms();

	if (t)
		return t;
	/* An earlier attempt's end is over by the time another starts. */
	track_drop(d, r->job_id);
	t = kn_xcalloc(1, sizeof(*t));
	t->job_id = r->job_id;
	t->attempt = r->attempt;
	/* Starting counts as use: a new environment gets its whole
	   idle_timeout. */
	t->last_tick_ms = now;
	t->busy_ms = now;
	t->gpu_milli = -1;
	t->stop = "";
	t->next = d->tracks;
	d->tracks = t;
	return t;
}

/* The home's key in the store: the owner's and the name's digest. */
static char *home_key(const struct run *r)
{
	char *id = kn_asprintf("%s\n%s", r->owner ? r->owner : "",
			       r->spec->name);
	char hex[KN_SHA256_HEX_LEN + 1];

	kn_sha256_hex(id, strlen(id), hex);
	free(id);
	return kn_asprintf("devenv-%.32s", hex);
}

static char *home_path(const struct run *r)
{
	return kn_asprintf("%s/home.%lld.%d", r->tasks[0].task_dir,
			   (long long)r->job_id, r->attempt);
}

/* ---- idle and max_duration ---- */

static int64_t warn_lead(int64_t idle_timeout_ms)
{
	int64_t lead = idle_timeout_ms / 5;

	return lead < WARN_LEAD_MAX_MS ? lead : WARN_LEAD_MAX_MS;
}

static bool gpu_busy(const struct server *s, const struct track *t,
		     const struct kn_devenv_policy *p, int64_t now)
{
	/* A sample older than two intervals says nothing of now. */
	int64_t fresh = 2 * s->cfg.usage_interval_ms + TICK_MS;

	return t->gpu_milli >= 0 && t->gpu_milli >= p->idle_gpu_milli &&
	       now - t->gpu_at_ms <= fresh;
}

static void stop(struct server *s, struct run *r, struct track *t,
		 const char *kind, const char *why)
{
	struct kn_error err;

	t->stop = kind;
	kn_log(KN_LOG_INFO, "job %lld: %s", (long long)r->job_id, why);
	if (jobs_stop_system(s, r->job_id, "devenv.stop", why, &err) < 0)
		kn_log(KN_LOG_WARN, "job %lld: %s", (long long)r->job_id,
		       err.message);
}

static void warn(struct server *s, const struct run *r, int64_t idle_ms,
		 int64_t left_ms)
{
	feed_publish(s, "devenv.idle_warning",
		     json_pack("{s:I, s:s, s:o, s:I, s:I}", "job",
			       (json_int_t)r->job_id, "name", r->spec->name,
			       "owner", r->owner ? json_string(r->owner)
						 : json_null(),
			       "idle_ms", (json_int_t)idle_ms, "stops_in_ms",
			       (json_int_t)left_ms));
}

static void check_run(struct server *s, struct run *r, struct track *t,
		      int64_t now)
{
	const struct kn_devenv_policy *p = &r->spec->devenv;
	char limit[32], why[200];
	int64_t idle, lead;

	if (t->sessions > 0 || gpu_busy(s, t, p, now)) {
		t->busy_ms = now;
		t->warned_at = 0;
	} else {
		t->idle_ms += now - t->last_tick_ms;
	}
	t->last_tick_ms = now;
	if (p->max_duration_ms && now - r->started_at >= p->max_duration_ms) {
		kn_format_duration(p->max_duration_ms, limit, sizeof(limit));
		snprintf(why, sizeof(why),
			 "stopped: ran for its max_duration of %s", limit);
		stop(s, r, t, "max_duration", why);
		return;
	}
	idle = now - t->busy_ms;
	lead = warn_lead(p->idle_timeout_ms);
	/* Never stopped sooner than the lead after its warning, however
	   coarse the ticks. */
	if (idle >= p->idle_timeout_ms && t->warned_at &&
	    now - t->warned_at >= lead) {
		kn_format_duration(p->idle_timeout_ms, limit, sizeof(limit));
		snprintf(why, sizeof(why),
			 "stopped: idle for %s (no session attached, GPUs "
			 "below %d.%d%%)",
			 limit, p->idle_gpu_milli / 10, p->idle_gpu_milli % 10);
		stop(s, r, t, "idle", why);
	} else if (!t->warned_at && idle >= p->idle_timeout_ms - lead) {
		t->warned_at = now;
		warn(s, r, idle, p->idle_timeout_ms > idle
					 ? p->idle_timeout_ms - idle
					 : lead);
	}
}

/* The run in the store, for `kiln cost` (devenv_cost.c). */
static void record_start(struct server *s, const struct run *r,
			 struct track *t)
{
	const struct kn_devenv_policy *p = &r->spec->devenv;
	struct kn_devenv_row row = {
		.job_id = r->job_id,
		.owner = r->owner ? r->owner : "",
		.name = r->spec->name,
		.gpu_milli = r->spec->resources.gpu_milli,
		.started_at = r->started_at,
		.max_end_at = p->max_duration_ms
				      ? r->started_at + p->max_duration_ms
				      : 0,
	};
	struct kn_error err;

	if (kn_store_devenv_start(s->store, &row, &err) < 0)
		kn_log(KN_LOG_WARN, "job %lld: %s", (long long)r->job_id,
		       err.message);
	else
		t->recorded = true;
}

static void record_end(struct server *s, const struct track *t)
{
	struct kn_error err;

	if (kn_store_devenv_end(s->store, t->job_id, kn_now_ms(), t->idle_ms,
				t->stop, &err) < 0)
		kn_log(KN_LOG_WARN, "job %lld: %s", (long long)t->job_id,
		       err.message);
}

static void tick(void *arg)
{
	struct server *s = arg;
	struct devenv_state *d = state(s);
	int64_t now = kn_now_ms();

	for (struct run *r = s->runs; r; r = r->next) {
		struct track *t;

		if (!r->spec->devenv.set || r->stopping || !r->started_at)
			continue;
		t = track_get(d, r);
		if (!t->recorded)
			record_start(s, r, t);
		if (!*t->stop && t->restore != HOME_BUSY)
			check_run(s, r, t, now);
	}
	kn_timer_arm(d->timer, TICK_MS);
}

void devenv_gpu_sample(struct server *core, int64_t job_id, int attempt,
		       int util_milli, int64_t at_ms)
{
	struct devenv_state *d = state(core);
	struct run *r = d ? devenv_run(core, job_id, attempt) : NULL;
	struct track *t;

	if (!r)
		return;
	t = track_get(d, r);
	t->gpu_milli = util_milli;
	t->gpu_at_ms = at_ms;
}

void devenv_session(struct server *core, int64_t job_id, int delta)
{
	struct devenv_state *d = state(core);
	struct run *r = d ? devenv_run(core, job_id, -1) : NULL;
	struct track *t;

	/* After the service stopped (open forwards end with the HTTP
	   server), nothing is followed. */
	if (!r)
		return;
	t = track_get(d, r);
	t->sessions += delta;
	if (t->sessions < 0)
		t->sessions = 0;
	t->busy_ms = kn_now_ms();
	t->warned_at = 0;
}

/* ---- home: restored before the start, saved after the end ---- */

static void home_work_free(struct home_work *w)
{
	KN_FREE_ALL(w->store_url, w->key, w->task_dir, w->home, w->restored,
		    w->warnings);
	kn_ckpt_manifest_release(&w->manifest);
	free(w);
}

/* The newest saved home into w->home, or an empty one. */
static void restore_home(struct kn_blob_store *store, struct home_work *w)
{
	char *from;

	w->rc = kn_ckpt_restore(store, w->key, w->task_dir, &w->restored,
				&w->warnings, &w->err);
	if (w->rc == -ENOENT) {
		free(w->restored);
		w->restored = NULL;
		w->rc = kn_mkdir_p(w->home, 0700);
		if (w->rc < 0)
			kn_errorf(&w->err, KN_EIO, NULL, "cannot create %s: %s",
				  w->home, strerror(-w->rc));
		return;
	}
	if (w->rc < 0)
		return;
	from = kn_asprintf("%s/%s", w->task_dir, w->restored);
	if (strcmp(from, w->home) != 0 && rename(from, w->home) < 0)
		w->rc = kn_errorf(&w->err, KN_EIO, NULL, "cannot rename %s: %s",
				  from, strerror(errno));
	free(from);
}

static void home_work(void *arg)
{
	struct home_work *w = arg;
	struct kn_blob_store *store = NULL;

	kn_thread_background();
	if (!w->save)
		kn_mkdir_p(w->task_dir, 0700);
	w->rc = blobstores_open(w->s, w->store_url, "devenv.home", NULL,
				&store, &w->err);
	if (w->rc < 0)
		goto out;
	if (!w->save) {
		restore_home(store, w);
		goto out;
	}
	w->rc = kn_ckpt_upload(store, w->key, w->home, NULL, &w->manifest,
			       &w->err);
	if (w->rc == 0) {
		struct kn_error perr;
		if (kn_ckpt_prune(store, w->key, HOMES_KEPT, NULL, &perr) < 0)
			kn_log(KN_LOG_WARN, "devenv %s: pruning homes: %s",
			       w->key, perr.message);
	}
out:
	kn_blob_store_free(store);
}

static json_t *home_event(const struct home_work *w)
{
	json_t *doc = json_pack("{s:I, s:i, s:s}", "job", (json_int_t)w->job_id,
				"attempt", w->attempt, "home", w->home);
	int64_t bytes = 0;

	if (w->rc < 0) {
		json_object_set_new(doc, "error", json_string(w->err.message));
		return doc;
	}
	for (size_t i = 0; i < w->manifest.n; i++)
		bytes += w->manifest.files[i].size;
	json_object_set_new(doc, "files", json_integer((json_int_t)w->manifest.n));
	json_object_set_new(doc, "bytes", json_integer(bytes));
	return doc;
}

static void home_done(void *arg, bool ran)
{
	struct home_work *w = arg;
	struct server *s = w->s;
	struct devenv_state *d = state(s);
	struct track *t = d ? track_find(d, w->job_id, w->attempt) : NULL;

	if (!ran || s->closing || !d)
		goto out;
	if (w->rc < 0)
		kn_log(KN_LOG_WARN, "job %lld: %s its home: %s",
		       (long long)w->job_id,
		       w->save ? "not saving" : "not restoring",
		       w->err.message);
	if (w->warnings)
		kn_log(KN_LOG_WARN, "job %lld: %s", (long long)w->job_id,
		       w->warnings);
	/* The core goes on whatever became of the track meanwhile. */
	if (w->save) {
		if (t)
			t->save = HOME_DONE;
		feed_publish(s, w->rc < 0 ? "devenv.home_refused"
					  : "devenv.home_saved",
			     home_event(w));
		jobs_end_resume(s, w->job_id, w->attempt);
	} else {
		struct run *r = devenv_run(s, w->job_id, w->attempt);

		if (!t && r)
			t = track_get(d, r);
		if (t) {
			t->restore = HOME_DONE;
			/* Its idle time starts when it does. */
			t->busy_ms = t->last_tick_ms = kn_now_ms();
		}
		jobs_launch_resume(s, w->job_id, w->attempt);
	}
out:
	home_work_free(w);
}

/* Whether the home lives where this server reaches it. */
static bool home_kept(const struct server *s)
{
	return !s->exec->ops->places_tasks;
}

static bool hold(void *arg, int64_t job_id, int attempt,
		 enum job_hold_at at)
{
	struct server *s = arg;
	bool save = at == JOB_HOLD_END;
	struct devenv_state *d = state(s);
	struct run *r = devenv_run(s, job_id, attempt);
	struct home_work *w;
	struct track *t;
	enum home_step *step;

	if (!d || !r)
		return false;
	t = track_get(d, r);
	step = save ? &t->save : &t->restore;
	if (*step != HOME_NONE)
		return *step == HOME_BUSY;
	if (save && t->recorded)
		record_end(s, t);
	if (!home_kept(s)) {
		*step = HOME_DONE;
		return false;
	}
	*step = HOME_BUSY;
	w = kn_xcalloc(1, sizeof(*w));
	w->s = s;
	w->job_id = job_id;
	w->attempt = attempt;
	w->save = save;
	w->store_url = blobstores_url(s, NULL);
	w->key = home_key(r);
	w->task_dir = kn_xstrdup(r->tasks[0].task_dir);
	w->home = home_path(r);
	kn_workers_submit(s->workers, home_work, home_done, w);
	return true;
}

static void task_env(void *arg, const struct job_task *task, json_t *env)
{
	struct server *s = arg;
	struct run *r = devenv_run(s, task->job_id, task->attempt);
	char *home;

	if (!r)
		return;
	json_object_set_new(env, "KILN_DEVENV", json_string(r->spec->name));
	if (!home_kept(s))
		return;
	home = home_path(r);
	json_object_set_new(env, "HOME", json_string(home));
	/* The shim gives it, with what it holds, to the task's user. */
	json_object_set_new(env, "KILN_DEVENV_HOME", json_string(home));
	free(home);
}

static void job_ended(void *arg, int64_t job_id)
{
	struct devenv_state *d = state(arg);

	if (d)
		track_drop(d, job_id);
}

static const struct job_hook_ops hooks = {
	.name = "devenv",
	.job_ended = job_ended,
	.task_env = task_env,
	.hold = hold,
};

/* ---- the service ---- */

static int devenv_start(struct server *s, struct kn_error *err)
{
	struct devenv_state *d = kn_xcalloc(1, sizeof(*d));

	(void)err;
	d->s = s;
	d->timer = kn_timer_new(s->loop, tick, s);
	service_state_set(s, &devenv_service, d);
	return 0;
}

static void devenv_run_timer(struct server *s)
{
	struct devenv_state *d = state(s);

	if (d)
		kn_timer_arm(d->timer, TICK_MS);
}

static void devenv_stop(struct server *s)
{
	struct devenv_state *d = state(s);

	if (!d)
		return;
	kn_timer_free(d->timer);
	while (d->tracks)
		track_drop(d, d->tracks->job_id);
	free(d);
}

const struct service devenv_service = {
	.name = "devenv",
	.phase = SERVICE_PHASE_LOOP,
	.start = devenv_start,
	.run = devenv_run_timer,
	.stop = devenv_stop,
	.hooks = &hooks,
};
