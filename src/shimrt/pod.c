/*
 * kiln shim --kube, the shim as a Kubernetes pod's first process.
 *
 * In a pod nothing is shared with the server, so the shim does there
 * what the server's sync (src/server/sync.c) does for local and Slurm
 * tasks, talking to the store itself with the credentials the pod's
 * environment carries (a Secret): before the task, the newest checkpoint
 * that verifies is restored into KILN_CHECKPOINT_DIR (an emptyDir) and
 * KILN_RESUME_FROM names it; while it runs, a thread uploads each newly
 * committed checkpoint (the newest when several are waiting) and prunes
 * the store to KILN_CHECKPOINT_KEEP; when it has ended, the last one
 * committed is uploaded before the shim exits. Only rank 0 uploads (each
 * pod has its own directory, and one manifest per checkpoint wins).
 *
 * What the server needs back for its accounting, the last checkpoint
 * synced and when it was committed, the one restored and how long that
 * took, goes in the container's termination message (KILN_TERMINATION_LOG,
 * the container's terminationMessagePath): the API then carries it in
 * the pod's status, which the executor already reads; no connection
 * from the pod to the server is needed. So does what the server records
 * about the job's own inputs (their digests, fetched from the store into
 * KILN_INPUT_DIR, an emptyDir path, before the task) and its outputs:
 * when rank 0's task exits 0, the shim uploads KILN_OUTPUT_DIR to
 * KILN_OUTPUT_STORE as the server's sync would, and reports the count and
 * the manifest's sha256.
 *
 * The checkpoint signal (the pod's preStop hook sends it to PID 1, the
 * shim) is a stop: the task gets it and three quarters of the grace
 * (KILN_CHECKPOINT_GRACE_MS, the pod's terminationGracePeriodSeconds) to
 * exit; the last quarter is the final upload's.
 */
#include "shimrt/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "base/base.h"
#include "ckpt/ckpt.h"
#include "exec/exec.h"
#include "sched/sched.h"
#include "spec/spec.h"

extern char **environ;

#define NAME_MAX_LEN 128

struct pod_sync {
	const char *store_url;
	const char *dir;
	char job[32];
	int keep;
	char restored[NAME_MAX_LEN];
	struct kn_ckpt_watch *watch;
	struct kn_ckpt_sent *sent; /* files sent before their commit */
	struct kn_blob_store *store; /* the thread's, opened once */
	bool early_paused; /* a file sent ahead failed: wait for a commit */
	int wake_fd;
	pthread_t thread;
	/* The thread's alone until it is joined. */
	char synced[NAME_MAX_LEN];
	int64_t synced_at;
};

static int open_store(const char *url, struct kn_blob_store **store,
		      struct kn_error *err)
{
	struct kn_blob_store_config cfg = {.use_env = true};

	cfg.url = url;
	/* One file at a time, as the server's sync: beside the task. */
	cfg.files_in_flight = 1;
	return kn_blob_store_open(&cfg, store, err);
}

/* The sync thread's store: one connection for a checkpoint's many files. */
static struct kn_blob_store *sync_store(struct pod_sync *ps,
					struct kn_error *err)
{
	if (!ps->store && open_store(ps->store_url, &ps->store, err) < 0)
		return NULL;
	return ps->store;
}

static void upload(struct pod_sync *ps, const char *name, int64_t at)
{
	struct kn_ckpt_manifest m = {0};
	struct kn_blob_store *store;
	struct kn_error err = {0};
	char *dir = kn_asprintf("%s/%s", ps->dir, name);
	int64_t start = kn_mono_ms();

	if ((store = sync_store(ps, &err)) &&
	    kn_ckpt_upload(store, ps->job, dir, ps->sent, &m, &err) == 0) {
		struct kn_error perr;

		kn_strlcpy(ps->synced, name, sizeof(ps->synced));
		ps->synced_at = at;
		ps->early_paused = false;
		fprintf(stderr, "kiln: checkpoint %s synced (%zu files, %zu sent "
			"before the commit, %lld ms)\n", name, m.n,
			kn_ckpt_sent_reused(ps->sent),
			(long long)(kn_mono_ms() - start));
		if (ps->keep > 0 &&
		    kn_ckpt_prune(store, ps->job, (size_t)ps->keep, NULL,
				  &perr) < 0)
			fprintf(stderr, "kiln: pruning checkpoints: %s\n",
				perr.message);
	} else {
		fprintf(stderr, "kiln: checkpoint %s: sync failed: %s\n", name,
			err.message);
	}
	kn_ckpt_manifest_release(&m);
	free(dir);
}

/* A file the task finished writing into a checkpoint not committed yet. */
static void upload_early(struct pod_sync *ps, const char *name,
			 const char *path)
{
	struct kn_blob_store *store;
	struct kn_error err = {0};

	if (!(store = sync_store(ps, &err)) ||
	    kn_ckpt_upload_early(store, ps->job, ps->dir, name, path, ps->sent,
				 &err) < 0) {
		/* The commit's upload sends it; until one succeeds no more go
		   ahead (one message, not one per file, while the store is
		   down). */
		ps->early_paused = true;
		fprintf(stderr, "kiln: sending %s/%s before its commit: %s\n",
			name, path, err.message);
	}
}

static void *sync_main(void *arg)
{
	struct pod_sync *ps = arg;
	char pending[NAME_MAX_LEN] = "";
	int64_t pending_at = 0;
	bool finishing = false, early = false;

	/* The upload must never slow the task down: it gets what is left. */
	kn_thread_background();
	for (;;) {
		struct pollfd fds[2] = {
			{kn_ckpt_watch_fd(ps->watch), POLLIN, 0},
			{ps->wake_fd, POLLIN, 0},
		};
		struct kn_error err;
		char *name = NULL, *path = NULL;
		uint64_t n;
		int rc;

		/* Files written ahead of a commit are sent between polls. */
		if (poll(fds, 2, finishing || early ? 0 : -1) < 0 &&
		    errno != EINTR)
			break;
		if ((fds[1].revents & POLLIN) &&
		    read(ps->wake_fd, &n, sizeof(n)) == sizeof(n))
			finishing = true;
		/* After the task's end, its last rename is queued already. */
		while ((rc = kn_ckpt_watch_next(ps->watch, &name, &err)) == 1) {
			if (strcmp(name, ps->restored) != 0) {
				kn_strlcpy(pending, name, sizeof(pending));
				pending_at = kn_now_ms();
			}
			free(name);
			name = NULL;
		}
		if (rc < 0)
			fprintf(stderr, "kiln: watching checkpoints: %s\n",
				err.message);
		early = false;
		if (pending[0]) {
			upload(ps, pending, pending_at);
			pending[0] = '\0';
		} else if (finishing) {
			break;
		} else if (!ps->early_paused &&
			   kn_ckpt_watch_next_written(ps->watch, &name,
						      &path) == 1) {
			upload_early(ps, name, path);
			KN_FREE_ALL(name, path);
			early = true;
		}
	}
	kn_blob_store_free(ps->store);
	ps->store = NULL;
	return NULL;
}

/* Restore into dir: 0 with name filled, -ENOENT when there is none. */
static int pod_restore(const char *url, const char *job, const char *dir,
		       char *name, size_t len)
{
	struct kn_blob_store *store = NULL;
	struct kn_error err = {0};
	char *got = NULL, *warnings = NULL;
	int rc;

	rc = kn_mkdir_p(dir, 0700);
	if (rc < 0)
		kn_errorf(&err, KN_EIO, NULL, "%s: %s", dir, strerror(-rc));
	if (rc == 0)
		rc = open_store(url, &store, &err);
	if (rc == 0)
		rc = kn_ckpt_restore(store, job, dir, &got, &warnings, &err);
	if (warnings)
		fputs(warnings, stderr);
	if (rc == 0) {
		kn_strlcpy(name, got, len);
		printf("kiln: resuming from checkpoint %s\n", got);
		fflush(stdout);
	} else if (rc != -ENOENT) {
		fprintf(stderr, "kiln: restoring a checkpoint failed, starting "
			"without one: %s\n", err.message);
	}
	kn_blob_store_free(store);
	KN_FREE_ALL(got, warnings);
	return rc;
}


/* In a pod the task's environment is the shim's own (launch.json has
   none), KILN_INPUTS and KILN_INPUT_DIR included. */
static int prepare_pod_task(void *arg, char *const *env, int log_fd,
			    char *why, size_t len)
{
	(void)env;
	return kn_shimrt_prepare(arg, environ, log_fd, why, len);
}

/* What the outputs' upload reports in the termination message. */
struct pod_outputs {
	int files;
	int64_t bytes;
	char manifest_sha256[KN_SHA256_HEX_LEN + 1];
};

/*
 * After rank 0's task exited 0: every file under dir to JOB/outputs/ in
 * the store, as the server's sync does for local tasks
 * (kn_ckpt_upload_outputs, which writes JOB/outputs/MANIFEST.json last).
 * The manifest itself is too big for a termination message, so only its
 * sha256 goes there; the server reads it from the store and checks it.
 */
static int pod_upload_outputs(const char *url, const char *job,
			      const char *dir, struct pod_outputs *out,
			      char *why, size_t len)
{
	struct kn_ckpt_manifest m = {0};
	struct kn_blob_store *store = NULL;
	struct kn_error err = {0};
	int64_t start = kn_mono_ms();
	char *json;
	int rc;

	rc = open_store(url, &store, &err);
	if (rc == 0)
		rc = kn_ckpt_upload_outputs(store, job, dir, &m, &err);
	if (rc < 0) {
		fprintf(stderr, "kiln: uploading outputs to %s failed: %s\n",
			url, err.message);
		snprintf(why, len, "outputs: upload failed: %.60s", err.message);
		goto out;
	}
	json = kn_ckpt_manifest_to_json(&m);
	kn_sha256_hex(json, strlen(json), out->manifest_sha256);
	free(json);
	out->files = (int)m.n;
	for (size_t i = 0; i < m.n; i++)
		out->bytes += m.files[i].size;
	printf("kiln: %d output%s uploaded (%lld bytes, %lld ms)\n",
	       out->files, out->files == 1 ? "" : "s", (long long)out->bytes,
	       (long long)(kn_mono_ms() - start));
	fflush(stdout);
out:
	kn_ckpt_manifest_release(&m);
	kn_blob_store_free(store);
	return rc;
}

/*
 * What the executor reads back from the pod's status (kube/batchjobs.c): the
 * checkpoints, the inputs fetched (TASK_DIR/inputs.json, as the server
 * reads it locally), the outputs uploaded and the reason the task ended
 * when the shim has one. The kubelet keeps 4096 bytes of it; a job
 * under Kubernetes has few enough inputs for them to fit (jobs.c).
 */
static void termination_message(const char *path, const char *task_dir,
				const struct pod_sync *ps,
				const char *restored, int64_t restore_ms,
				const struct pod_outputs *outputs,
				const char *reason)
{
	char *inputs_text = NULL;
	json_t *doc = json_object(), *inputs;
	char *text;

	if (ps && ps->synced[0]) {
		json_object_set_new(doc, "checkpoint", json_string(ps->synced));
		json_object_set_new(doc, "checkpoint_at_ms",
				    json_integer(ps->synced_at));
	}
	if (restored[0])
		json_object_set_new(doc, "restored", json_string(restored));
	json_object_set_new(doc, "restore_ms", json_integer(restore_ms));
	/* The task can write its directory: no links, FIFOs or devices. */
	if (kn_task_file_read(task_dir, "inputs.json", 4096, &inputs_text, NULL,
			      NULL) == 0) {
		inputs = json_loads(inputs_text, 0, NULL);
		if (json_is_array(inputs))
			json_object_set(doc, "inputs", inputs);
		json_decref(inputs);
	}
	if (outputs->manifest_sha256[0])
		json_object_set_new(
			doc, "outputs",
			json_pack("{s:i, s:I, s:s}", "files", outputs->files,
				  "bytes", (json_int_t)outputs->bytes,
				  "manifest_sha256", outputs->manifest_sha256));
	if (reason[0])
		json_object_set_new(doc, "reason", json_string(reason));
	text = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	if (kn_write_file_replace(path, text, strlen(text), 0644) < 0)
		fprintf(stderr, "kiln: cannot write %s\n", path);
	KN_FREE_ALL(text, inputs_text);
}

static const char *env_or(const char *key, const char *fallback)
{
	const char *v = getenv(key);

	return v && *v ? v : fallback;
}

/* A decimal count in 0..max, the whole of s: 0, or -1. */
static int parse_count(const char *s, long long max, long long *out)
{
	char *end = NULL;
	long long v;

	if (!s || *s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || *end || v > max)
		return -1;
	*out = v;
	return 0;
}

/*
 * A pod of a job array's run, one Indexed Job for many elements
 * (kube/indexed.c): the element's own KILN_JOB_ID, KILN_ARRAY_INDEX and
 * SLURM_ARRAY_TASK_ID from the pod's completion index, so that the task
 * and this shim see what a Job of the element's own gives them. 0 (also
 * for a pod of no run), or -1 with why when the run's variables are not
 * counts or the index is past the run.
 */
static int array_element_env(char *why, size_t len)
{
	static const char *const names[] = {
		"KILN_COMPLETION_INDEX", "KILN_ARRAY_RUN_INDEX",
		"KILN_ARRAY_RUN_JOB_ID", "KILN_ARRAY_RUN_SIZE",
	};
	/* Sums of two stay far from overflow. */
	static const long long max[] = {INT32_MAX, INT32_MAX, INT64_MAX / 2,
					INT32_MAX};
	long long v[4];
	char buf[24];

	if (!getenv("KILN_ARRAY_RUN_SIZE"))
		return 0;
	for (size_t i = 0; i < 4; i++)
		if (parse_count(getenv(names[i]), max[i], &v[i]) < 0) {
			snprintf(why, len, "%s is not a count: \"%.40s\"",
				 names[i], getenv(names[i]) ? getenv(names[i])
							    : "");
			return -1;
		}
	if (v[0] >= v[3] || v[1] + v[0] > INT32_MAX) {
		snprintf(why, len, "KILN_COMPLETION_INDEX %lld is past the "
			 "run's %lld elements from %lld", v[0], v[3], v[1]);
		return -1;
	}
	snprintf(buf, sizeof(buf), "%lld", v[1] + v[0]);
	setenv("KILN_ARRAY_INDEX", buf, 1);
	setenv("SLURM_ARRAY_TASK_ID", buf, 1);
	snprintf(buf, sizeof(buf), "%lld", v[2] + v[0]);
	setenv("KILN_JOB_ID", buf, 1);
	return 0;
}

int kn_shimrt_kube(char **argv)
{
	char element_why[160];
	/* First: what follows reads the element's KILN_JOB_ID. */
	int element = array_element_env(element_why, sizeof(element_why));
	const struct kn_shim_prepare prep = {prepare_pod_task, NULL};
	const char *task_dir = env_or("KILN_TASK_DIR", NULL);
	const char *ckpt_dir = env_or("KILN_CHECKPOINT_DIR", NULL);
	const char *store = env_or("KILN_STORE", NULL);
	const char *job = env_or("KILN_JOB_ID", env_or("KILN_JOB", NULL));
	const char *end_log = env_or("KILN_TERMINATION_LOG", NULL);
	const char *out_dir = env_or("KILN_OUTPUT_DIR", NULL);
	const char *out_store = env_or("KILN_OUTPUT_STORE", NULL);
	bool rank0 = atoi(env_or("RANK", "0")) == 0;
	int attempt = atoi(env_or("KILN_ATTEMPT", "0"));
	int signo = kn_signal_from_name(env_or("KILN_CHECKPOINT_SIGNAL",
					       "SIGTERM"));
	int64_t grace = atoll(env_or("KILN_CHECKPOINT_GRACE_MS", "30000"));
	struct pod_sync ps = {.wake_fd = -1};
	bool syncing = false;
	char restored[NAME_MAX_LEN] = "", reason[160] = "";
	struct pod_outputs outputs = {0};
	int64_t restore_ms = 0;
	struct kn_error err = {0};
	sigset_t mask;
	int code = 1;

	if (element < 0) {
		fprintf(stderr, "kiln shim --kube: %s\n", element_why);
		return 2;
	}
	if (!task_dir || !*argv) {
		fputs("kiln shim --kube: KILN_TASK_DIR and a command are "
		      "needed\n", stderr);
		return 2;
	}
	if (signo <= 0)
		signo = SIGTERM;
	/* Before any thread starts (and so PID 1 does not lose them). */
	kn_shim_signals_block(signo, &mask);
	if (store && ckpt_dir && job) {
		/* Attempt 1 has nothing to resume; a Job applied by hand
		   (no KILN_ATTEMPT) may have been restarted. */
		if (attempt != 1) {
			int64_t t0 = kn_mono_ms();

			if (pod_restore(store, job, ckpt_dir, restored,
					sizeof(restored)) == 0) {
				char *path = kn_asprintf("%s/%s", ckpt_dir,
							 restored);
				setenv("KILN_RESUME_FROM", path, 1);
				free(path);
			}
			restore_ms = kn_mono_ms() - t0;
		}
		ps.store_url = store;
		ps.dir = ckpt_dir;
		kn_strlcpy(ps.job, job, sizeof(ps.job));
		ps.keep = atoi(env_or("KILN_CHECKPOINT_KEEP", "3"));
		kn_strlcpy(ps.restored, restored, sizeof(ps.restored));
		if (atoi(env_or("RANK", "0")) == 0 &&
		    kn_mkdir_p(ckpt_dir, 0700) == 0 &&
		    kn_ckpt_watch_new(ckpt_dir, 0, KN_CKPT_WATCH_FILES,
				      &ps.watch, &err) == 0 &&
		    (ps.sent = kn_ckpt_sent_new()) &&
		    (ps.wake_fd = eventfd(0, EFD_CLOEXEC)) >= 0 &&
		    pthread_create(&ps.thread, NULL, sync_main, &ps) == 0)
			syncing = true;
		else if (atoi(env_or("RANK", "0")) == 0)
			fprintf(stderr, "kiln: checkpoints will not be synced: "
				"cannot watch %s: %s\n", ckpt_dir,
				err.message[0] ? err.message : strerror(errno));
	} else if (ckpt_dir) {
		kn_mkdir_p(ckpt_dir, 0700);
	}
	if (out_dir)
		kn_mkdir_p(out_dir, 0700);
	if (kn_kube_shim_run(task_dir, argv, signo, grace - grace / 4, &prep,
			     &code, reason, sizeof(reason), &err) < 0)
		fprintf(stderr, "kiln shim: %s\n", err.message);
	if (syncing) {
		uint64_t one = 1;

		if (write(ps.wake_fd, &one, sizeof(one)) == sizeof(one))
			pthread_join(ps.thread, NULL);
	}
	/* Outputs are a succeeded job's, as locally; one manifest per job,
	   so rank 0's. A failed upload fails the attempt: the job's result
	   would be missing. */
	if (code == 0 && rank0 && out_dir && out_store && job &&
	    kn_dir_has_entries(out_dir) &&
	    pod_upload_outputs(out_store, job, out_dir, &outputs, reason,
			       sizeof(reason)) < 0)
		code = 1;
	if (end_log)
		termination_message(end_log, task_dir, syncing ? &ps : NULL,
				    restored, restore_ms, &outputs, reason);
	if (ps.wake_fd >= 0)
		close(ps.wake_fd);
	kn_ckpt_watch_free(ps.watch);
	kn_ckpt_sent_free(ps.sent);
	return code;
}
