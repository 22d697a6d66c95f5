/*
 * Checkpoint sync: the server side of the checkpoint contract.
 *
 * Jobs that are preemptible or have a `checkpoint:` section are synced
 * (for the others the directories are named but not made: two directory
 * creations per task are a large part of a short job's cost on ext4).
 * Every attempt's tasks share one KILN_CHECKPOINT_DIR on local scratch. A
 * checkpoint is committed when its directory is renamed from NAME.tmp to
 * NAME (in a multi-task job, by rank 0 once every rank has written its
 * part: the rename is the one commit). The watcher notices commits and the
 * newest one not yet in the store is uploaded by a worker thread, never on
 * the loop and never by the task; retention then prunes the store to the
 * spec's `keep`. Intermediate checkpoints committed while an upload runs
 * are skipped for the newest, which is all a resume needs. While nothing
 * committed waits, each file a task has finished writing into NAME.tmp is
 * sent ahead, one at a time (kn_ckpt_upload_early), so the upload runs
 * beside the save and the commit's upload sends only what is left.
 *
 * Before attempt 2 and later, the newest checkpoint that verifies is
 * restored into the new attempt's directory and KILN_RESUME_FROM names it;
 * skipped ones are reported in the tasks' logs. When every task has ended,
 * the attempt waits for a last sync (the checkpoint a preempted task wrote
 * on its way out) and, if it succeeded, for its outputs' upload, and only
 * then ends. A Kubernetes pod's shim uploads its outputs itself and
 * reports the manifest's sha256: that manifest is read from the store,
 * checked and recorded the same way.
 *
 * Worker threads get copies (URLs, paths, names) and find their run again
 * by job and attempt when they finish: a run may be gone by then.
 */
#include "core_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


#include "ckpt/ckpt.h"

#define SYNC_THREADS 2

enum work_kind {
	WORK_RESTORE,
	WORK_UPLOAD,
	WORK_EARLY,
	WORK_OUTPUTS,
	WORK_OUTPUTS_READ
};

/* The most of an outputs manifest read back from the store. */
#define OUTPUTS_MANIFEST_MAX (16u << 20)

struct sync_work {
	struct server *s;
	enum work_kind kind;
	int64_t job_id;
	int attempt;
	char *store_url;
	char job[32];
	char *dir;        /* restore: where to; upload: the checkpoint; outputs;
			     early: the checkpoint directory */
	char *path;       /* early: the file, below dir/name.tmp */
	int keep;
	struct kn_ckpt_sent *sent; /* upload, early: the run's, while out */
	/* upload, early: the run's open store, while out (one connection
	   for a checkpoint's many files, not one each) */
	struct kn_blob_store *store;
	char digest[65];  /* outputs read: the manifest's, as the pod said */
	int64_t committed_at;
	/* results */
	int rc;
	struct kn_error err;
	char *name;       /* restored checkpoint; early: the checkpoint */
	char *warnings;
	struct kn_ckpt_manifest manifest;
	int64_t took_ms;
};

static struct run *find_run(struct server *s, int64_t job_id, int attempt)
{
	for (struct run *r = s->runs; r; r = r->next)
		if (r->job_id == job_id && r->attempt == attempt)
			return r;
	return NULL;
}

/*
 * The outputs manifest a pod's shim wrote (JOB/outputs/MANIFEST.json),
 * if it is the one the pod reported: its sha256 is in the termination
 * message, the manifest itself too big for it.
 */
static int read_outputs_manifest(struct kn_blob_store *store,
				 struct sync_work *w)
{
	char *blob = kn_asprintf("%s/outputs/" KN_CKPT_MANIFEST, w->job);
	char *text = NULL, got[65];
	size_t len = 0;
	int rc;

	rc = kn_blob_get_bytes(store, blob, OUTPUTS_MANIFEST_MAX, &text, &len,
			       &w->err);
	if (rc < 0)
		goto out;
	kn_sha256_hex(text, len, got);
	if (strcmp(got, w->digest) != 0) {
		rc = kn_errorf(&w->err, KN_EIO, NULL, "%s has sha256 %.12s, "
			       "the pod reported %.12s", blob, got, w->digest);
		goto out;
	}
	rc = kn_ckpt_manifest_parse(text, len, blob, &w->manifest, &w->err);
out:
	KN_FREE_ALL(text, blob);
	return rc;
}

static void do_work(void *arg)
{
	struct sync_work *w = arg;
	struct kn_blob_store_config cfg;
	struct kn_blob_store *store = w->store;
	int64_t start = kn_mono_ms();

	/* Sync must never slow the tasks down: it gets what they leave. */
	kn_thread_background();
	memset(&cfg, 0, sizeof(cfg));
	/* One file at a time: a background copy, not a race with the tasks. */
	cfg.files_in_flight = 1;
	if (!store) {
		w->rc = blobstores_open(w->s, w->store_url, "checkpoint.store",
					&cfg, &store, &w->err);
		if (w->rc < 0)
			goto out;
	}
	switch (w->kind) {
	case WORK_RESTORE:
		w->rc = kn_ckpt_restore(store, w->job, w->dir, &w->name,
					&w->warnings, &w->err);
		break;
	case WORK_UPLOAD:
		w->rc = kn_ckpt_upload(store, w->job, w->dir, w->sent,
				       &w->manifest, &w->err);
		if (w->rc == 0 && w->keep > 0) {
			struct kn_error perr;
			if (kn_ckpt_prune(store, w->job, (size_t)w->keep, NULL,
					  &perr) < 0)
				kn_log(KN_LOG_WARN, "job %s: pruning checkpoints: "
				       "%s", w->job, perr.message);
		}
		break;
	case WORK_EARLY:
		w->rc = kn_ckpt_upload_early(store, w->job, w->dir, w->name,
					     w->path, w->sent, &w->err);
		break;
	case WORK_OUTPUTS:
		w->rc = kn_ckpt_upload_outputs(store, w->job, w->dir,
					       &w->manifest, &w->err);
		break;
	case WORK_OUTPUTS_READ:
		w->rc = read_outputs_manifest(store, w);
		break;
	}
out:
	if (w->kind == WORK_UPLOAD || w->kind == WORK_EARLY)
		w->store = store; /* back to the run with the work */
	else
		kn_blob_store_free(store);
	w->took_ms = kn_mono_ms() - start;
}

static void work_free(struct sync_work *w)
{
	KN_FREE_ALL(w->store_url, w->dir, w->path);
	kn_ckpt_sent_free(w->sent);
	kn_blob_store_free(w->store);
	KN_FREE_ALL(w->name, w->warnings);
	kn_ckpt_manifest_release(&w->manifest);
	free(w);
}

static struct sync_work *work_new(struct server *s, struct run *r,
				  enum work_kind kind, const char *dir)
{
	struct sync_work *w = kn_xcalloc(1, sizeof(*w));

	w->s = s;
	w->kind = kind;
	w->job_id = r->job_id;
	w->attempt = r->attempt;
	w->store_url = blobstores_url(s, r->spec->checkpoint.store);
	snprintf(w->job, sizeof(w->job), "%lld", (long long)r->job_id);
	w->dir = kn_xstrdup(dir);
	w->keep = r->spec->checkpoint.set ? r->spec->checkpoint.keep : 3;
	return w;
}

/* Put a line at the top of every task's log before the tasks start. */
static void note_in_logs(struct run *r, const char *text)
{
	for (int i = 0; i < r->n_tasks; i++) {
		char *path = kn_asprintf("%s/" KN_LOG_FILE, r->tasks[i].task_dir);
		int fd;

		kn_mkdir_p(r->tasks[i].task_dir, 0700);
		fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		if (fd >= 0) {
			if (write(fd, text, strlen(text)) < 0) {
				/* the server's log has it too */
			}
			close(fd);
		}
		free(path);
	}
}

/* ---- uploads ---- */

static void start_upload(struct server *s, struct run *r);

/* The bytes of the files a checkpoint holds. */
static int64_t manifest_bytes(const struct kn_ckpt_manifest *m)
{
	int64_t bytes = 0;

	for (size_t i = 0; i < m->n; i++)
		bytes += m->files[i].size;
	return bytes;
}

static void upload_done(void *arg, bool ran)
{
	struct sync_work *w = arg;
	struct server *s = w->s;
	struct run *r = ran ? find_run(s, w->job_id, w->attempt) : NULL;

	if (ran && w->kind == WORK_UPLOAD)
		metrics_checkpoint_synced(s, w->rc == 0,
					  manifest_bytes(&w->manifest),
					  w->took_ms);
	if (!r)
		goto out;
	r->sync_busy = false;
	r->sent = w->sent;
	r->sync_store = w->store;
	w->sent = NULL;
	w->store = NULL;
	if (w->kind == WORK_EARLY) {
		/* The record is the loop's again: what it holds of the
		   checkpoint, each file once however often it went. */
		if (w->rc == 0 && kn_ckpt_sent_bytes(r->sent, w->name) > 0) {
			kn_strlcpy(r->checkpoint_next, w->name,
				   sizeof(r->checkpoint_next));
			r->checkpoint_next_sent =
				kn_ckpt_sent_bytes(r->sent, w->name);
		}
		/* The commit's upload sends it; no more go ahead until an
		   upload succeeds (one warning, not one per file, while the
		   store is down). */
		if (w->rc < 0) {
			r->early_paused = true;
			kn_log(KN_LOG_WARN, "job %lld: sending %s/%s before its "
			       "commit: %s", (long long)r->job_id, w->name,
			       w->path, w->err.message);
		}
	} else if (w->rc == 0) {
		r->early_paused = false;
		const char *name = strrchr(w->dir, '/') + 1;
		kn_strlcpy(r->checkpoint, name, sizeof(r->checkpoint));
		r->checkpoint_at = w->committed_at;
		/* Sent ahead and now synced whole: no longer the next. */
		if (!strcmp(r->checkpoint_next, name)) {
			r->checkpoint_next[0] = '\0';
			r->checkpoint_next_sent = 0;
		}
		kn_log(KN_LOG_INFO, "job %lld: checkpoint %s synced (%zu files, "
		       "%zu sent before the commit, %lld ms)",
		       (long long)r->job_id, name, w->manifest.n,
		       kn_ckpt_sent_reused(r->sent), (long long)w->took_ms);
	} else if (kn_task_file_refused(&w->err)) {
		server_task_file_refused(s, r->job_id, w->dir, &w->err);
	} else {
		kn_log(KN_LOG_WARN, "job %lld: checkpoint sync failed: %s",
		       (long long)r->job_id, w->err.message);
	}
	start_upload(s, r);
	if (!r->sync_busy && r->sync_waiting)
		jobs_sync_settled(s, r);
out:
	work_free(w);
}

/*
 * The next upload: the newest commit, else (while the tasks run) a file
 * written into a checkpoint not committed yet.
 */
static void start_upload(struct server *s, struct run *r)
{
	struct sync_work *w;
	char *name, *path;

	if (r->sync_busy)
		return;
	if (r->sync_pending[0]) {
		char *dir = kn_asprintf("%s/%s", r->checkpoint_dir,
					r->sync_pending);
		w = work_new(s, r, WORK_UPLOAD, dir);
		w->committed_at = r->sync_pending_at;
		free(dir);
		r->sync_pending[0] = '\0';
	} else if (!r->sync_waiting && !r->early_paused && r->watch &&
		   kn_ckpt_watch_next_written(r->watch, &name, &path) == 1) {
		w = work_new(s, r, WORK_EARLY, r->checkpoint_dir);
		w->name = name;
		w->path = path;
	} else {
		return;
	}
	if (!r->sent)
		r->sent = kn_ckpt_sent_new();
	w->sent = r->sent;
	w->store = r->sync_store;
	r->sent = NULL;
	r->sync_store = NULL;
	r->sync_busy = true;
	kn_workers_submit(s->workers, do_work, upload_done, w);
}

/* Take every newly committed checkpoint; the newest one is to upload. */
static void drain_watch(struct server *s, struct run *r)
{
	char *name = NULL;
	struct kn_error err;
	int rc;

	while ((rc = kn_ckpt_watch_next(r->watch, &name, &err)) == 1) {
		/* The checkpoint this attempt resumed from is in the store. */
		if (strcmp(name, r->restored) != 0) {
			kn_strlcpy(r->sync_pending, name,
				   sizeof(r->sync_pending));
			r->sync_pending_at = kn_now_ms();
		}
		free(name);
		name = NULL;
	}
	if (rc < 0)
		kn_log(KN_LOG_WARN, "job %lld: watching checkpoints: %s",
		       (long long)r->job_id, err.message);
	start_upload(s, r);
}

static void watch_ready(void *arg)
{
	struct run *r = arg;
	drain_watch(r->server, r);
}

bool sync_wanted(const struct run *r)
{
	return r->spec->preemptible || r->spec->checkpoint.set;
}

void sync_run_started(struct server *s, struct run *r)
{
	struct kn_error err;

	r->server = s;
	/* A pod's shim syncs its own checkpoint directory (src/shimrt/pod.c)
	   and reports the last one in the task's status (core_finish.c). */
	if (!sync_wanted(r) || s->exec->ops->syncs_checkpoints)
		return;
	if (kn_mkdir_p(r->checkpoint_dir, 0700) < 0 ||
	    kn_mkdir_p(r->output_dir, 0700) < 0 ||
	    kn_ckpt_watch_new(r->checkpoint_dir, 0, KN_CKPT_WATCH_FILES,
			      &r->watch, &err) < 0) {
		kn_log(KN_LOG_WARN, "job %lld: checkpoints will not be synced: "
		       "cannot watch %s", (long long)r->job_id, r->checkpoint_dir);
		return;
	}
	r->watch_fd = kn_fd_watch_new(s->loop, kn_ckpt_watch_fd(r->watch),
				      watch_ready, r);
	/* A restarted server picks up what was committed while it was down. */
	drain_watch(s, r);
}

void sync_run_gone(struct run *r)
{
	kn_fd_watch_free(r->watch_fd);
	kn_ckpt_watch_free(r->watch);
	kn_ckpt_sent_free(r->sent);
	kn_blob_store_free(r->sync_store);
	r->watch_fd = NULL;
	r->watch = NULL;
	r->sent = NULL;
	r->sync_store = NULL;
}

/* ---- outputs ---- */

/* How often outputs that a full disk refused are tried again. */
#define OUTPUTS_RETRY_MS 2000

/*
 * A full disk refused the outputs (their upload, or their rows): they
 * stay in the task directory and the job stays running until the poll
 * tries again (jobs_poll), never ending without them.
 */
static void outputs_wait_for_space(struct run *r, const struct kn_error *err,
				   const char *what)
{
	if (!r->disk_wait[0])
		kn_log(KN_LOG_ERROR, "job %lld: outputs wait for disk space: %s",
		       (long long)r->job_id, err->message);
	r->outputs_done = false;
	/* Exits not yet stored say more: they come first. */
	for (int k = 0; k < r->n_tasks; k++)
		if (r->tasks[k].ended && !r->tasks[k].recorded)
			return;
	snprintf(r->disk_wait, sizeof(r->disk_wait),
		 "outputs kept on the node; waiting for disk space to %s them",
		 what);
	r->disk_retry_at = kn_mono_ms() + OUTPUTS_RETRY_MS;
}

static void outputs_done(void *arg, bool ran)
{
	struct sync_work *w = arg;
	struct server *s = w->s;
	struct run *r = ran ? find_run(s, w->job_id, w->attempt) : NULL;
	struct kn_error err;

	if (!r)
		goto out;
	r->sync_busy = false;
	r->outputs_done = true;
	if (w->rc < 0 && w->err.code == KN_ENOSPACE) {
		outputs_wait_for_space(r, &w->err, "upload");
		goto out;
	}
	if (w->rc < 0 && kn_task_file_refused(&w->err)) {
		server_task_file_refused(s, r->job_id, w->dir, &w->err);
	} else if (w->rc < 0) {
		kn_log(KN_LOG_WARN, "job %lld: %s outputs failed: %s",
		       (long long)r->job_id,
		       w->kind == WORK_OUTPUTS ? "uploading" : "reading the pod's",
		       w->err.message);
	} else if (kn_store_begin(s->store, &err) == 0) {
		int rc = 0;
		for (size_t i = 0; rc == 0 && i < w->manifest.n; i++) {
			struct kn_output_row o;
			/* Below the store's URL less its query (its SAS). */
			char *url = kn_asprintf(
				"%.*s/%s/outputs/%s",
				(int)kn_url_base_len(w->store_url),
				w->store_url, w->job,
				w->manifest.files[i].path);
			o.job_id = r->job_id;
			o.name = w->manifest.files[i].path;
			o.size = w->manifest.files[i].size;
			o.sha256 = w->manifest.files[i].sha256;
			o.url = url;
			rc = kn_store_output_put(s->store, &o, &err);
			free(url);
		}
		rc = core_store_end(s->store, rc, &err);
		if (rc < 0 && err.code == KN_ENOSPACE) {
			outputs_wait_for_space(r, &err, "store");
			goto out;
		}
		if (rc < 0)
			kn_log(KN_LOG_ERROR, "job %lld: recording outputs: %s",
			       (long long)r->job_id, err.message);
	}
	if (r->sync_waiting)
		jobs_sync_settled(s, r);
out:
	work_free(w);
}

bool sync_finish_ready(struct server *s, struct run *r, bool succeeded)
{
	const char *digest = r->tasks[0].status.outputs_manifest_sha256;

	r->sync_waiting = true;
	if (r->watch)
		drain_watch(s, r);
	if (r->sync_busy || r->sync_pending[0])
		return false;
	/* A pod's shim uploaded them: record them from the store. */
	if (succeeded && !r->outputs_done &&
	    s->exec->ops->syncs_checkpoints && digest[0]) {
		struct sync_work *w = work_new(s, r, WORK_OUTPUTS_READ, "");
		kn_strlcpy(w->digest, digest, sizeof(w->digest));
		r->sync_busy = true;
		kn_workers_submit(s->workers, do_work, outputs_done, w);
		return false;
	}
	if (succeeded && !r->outputs_done && kn_dir_has_entries(r->output_dir)) {
		struct sync_work *w = work_new(s, r, WORK_OUTPUTS, r->output_dir);
		r->sync_busy = true;
		kn_workers_submit(s->workers, do_work, outputs_done, w);
		return false;
	}
	/* A service's own work at the end (a dev environment's home). */
	return !job_hooks_hold(s->hooks, r->job_id, r->attempt, JOB_HOLD_END);
}

/* ---- restore ---- */

static void restore_done(void *arg, bool ran)
{
	struct sync_work *w = arg;
	struct server *s = w->s;
	struct run *r = ran ? find_run(s, w->job_id, w->attempt) : NULL;

	if (!r)
		goto out;
	r->restore_ms = w->took_ms;
	if (w->warnings) {
		kn_log(KN_LOG_WARN, "job %lld: %s", (long long)r->job_id,
		       w->warnings);
		note_in_logs(r, w->warnings);
	}
	if (w->rc == 0) {
		char *line = kn_asprintf("kiln: resuming from checkpoint %s\n",
					 w->name);
		snprintf(r->resume_from, sizeof(r->resume_from), "%s/%s",
			 r->checkpoint_dir, w->name);
		kn_strlcpy(r->restored, w->name, sizeof(r->restored));
		note_in_logs(r, line);
		free(line);
	} else if (w->rc != -ENOENT) {
		kn_log(KN_LOG_WARN, "job %lld: restoring a checkpoint failed, "
		       "starting without one: %s", (long long)r->job_id,
		       w->err.message);
	}
	jobs_launch_run(s, r);
out:
	work_free(w);
}

void sync_restore_then_launch(struct server *s, struct run *r)
{
	struct sync_work *w;

	/* A service's own work first (a dev environment's home). */
	if (job_hooks_hold(s->hooks, r->job_id, r->attempt, JOB_HOLD_LAUNCH))
		return;
	/* A pod's shim restores into the pod, not here. */
	if (r->attempt <= 1 || s->exec->ops->syncs_checkpoints) {
		jobs_launch_run(s, r);
		return;
	}
	kn_mkdir_p(r->checkpoint_dir, 0700);
	w = work_new(s, r, WORK_RESTORE, r->checkpoint_dir);
	kn_workers_submit(s->workers, do_work, restore_done, w);
}

void jobs_launch_resume(struct server *s, int64_t id, int attempt)
{
	struct run *r = find_run(s, id, attempt);

	if (r)
		sync_restore_then_launch(s, r);
}
