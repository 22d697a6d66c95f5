/*
 * kiln shim --dir TASK_DIR: internal, started by the local executor for
 * each task (see src/exec/shim.c); kiln shim --slurm ATTEMPT_DIR: the
 * same, started by srun inside a Slurm allocation (src/exec/slurm.c);
 * kiln shim --kube -- CMD...: the same as a Kubernetes pod's first
 * process, and kiln shim --install DIR, the pod's initContainer that
 * puts kiln there (see "Checkpoints, outputs and inputs in pods" below).
 * Not listed in `kiln --help`.
 *
 * Before a task starts, the shim fetches its inputs (KILN_INPUTS, set by
 * the server): a workflow step's, from the producing jobs' outputs
 * manifests, and a job spec's own `inputs:`. Each one is downloaded from
 * its blob store into $KILN_INPUT_DIR and its sha256 checked when one is
 * known (a step's output, or a job input its first attempt fetched), so
 * files pass by store URL and digest, never through the server. What it
 * fetched goes to $KILN_TASK_DIR/inputs.json, from which the server
 * records a job input's digest the first time. This lives here rather
 * than in src/exec so the executors need no blob stores.
 *
 * In a pod (--kube) the shim also uploads the task's outputs itself and
 * tells the server what it fetched and uploaded through the container's
 * termination message: see "Checkpoints, outputs and inputs in pods".
 */
#include "cmd/cli.h"

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

static const char *env_get(char *const *env, const char *key)
{
	size_t n = strlen(key);

	for (char *const *e = env; e && *e; e++)
		if (!strncmp(*e, key, n) && (*e)[n] == '=')
			return *e + n + 1;
	return NULL;
}

/* A line for the task's log. */
static void say(int fd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void say(int fd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vdprintf(fd, fmt, ap);
	va_end(ap);
}

/* A relative path that stays inside the directory it is joined to. */
static bool name_safe(const char *name)
{
	const char *p = name;

	if (!*name || *name == '/')
		return false;
	while (*p) {
		size_t n = strcspn(p, "/");
		if ((n == 2 && !strncmp(p, "..", 2)) || n == 0)
			return false;
		p += n;
		if (*p == '/')
			p++;
	}
	return true;
}

/*
 * A store a task's input or prerequisite names, opened with the
 * credential of the server's store it lies in (KILN_STORE_SCOPES, which
 * a local shim inherits from the server and the task never sees) and
 * none otherwise. In a pod the one store is the pod's (KILN_OUTPUT_STORE,
 * its credential the Secret's AZURE_STORAGE_* variables).
 */
static int open_named_store(const char *url, struct kn_blob_store **out,
			    struct kn_error *err)
{
	const char *scopes = getenv(KN_STORE_SCOPES_ENV);
	const char *pod_store = getenv("KILN_OUTPUT_STORE");
	struct kn_stores *stores = NULL;
	char *text = NULL;
	int rc;

	if (!scopes) {
		json_t *list = json_array();

		if (pod_store)
			json_array_append_new(
				list, json_pack("{s:s, s:s, s:b}", "name",
						KN_DEFAULT_STORE, "url",
						pod_store, "environment", 1));
		scopes = text = json_dumps(list, JSON_COMPACT);
		json_decref(list);
	}
	rc = kn_stores_from_scopes_json(scopes, &stores, err);
	free(text);
	if (rc == 0)
		rc = kn_stores_open(stores, url, "store", NULL, out, err);
	kn_stores_free(stores);
	return rc;
}

/*
 * Fetch one KILN_INPUTS entry that names a store and blob into dir/name
 * and check it against its sha256 when the entry has one; what was
 * fetched ({name, sha256, size}) is appended to fetched. An entry with
 * neither (a workflow step's plain path or URL) is the task's to read.
 */
static int fetch_one(const char *dir, json_t *in, json_t *fetched, int log_fd,
		     char *why, size_t len)
{
	const char *name = json_string_value(json_object_get(in, "name"));
	const char *url = json_string_value(json_object_get(in, "store"));
	const char *blob = json_string_value(json_object_get(in, "blob"));
	const char *want = json_string_value(json_object_get(in, "sha256"));
	json_t *first = json_object_get(in, "attempt");
	struct kn_blob_store *store = NULL;
	struct kn_error err = {0};
	char got[KN_SHA256_HEX_LEN + 1] = "", *dest = NULL, *slash;
	struct stat st;
	int rc;

	if (!url && !blob && !want)
		return 0;
	if (!name || !url || !blob || !name_safe(name)) {
		snprintf(why, len, "KILN_INPUTS: a malformed entry");
		return -EINVAL;
	}
	dest = kn_asprintf("%s/%s", dir, name);
	slash = strrchr(dest, '/');
	*slash = '\0';
	rc = kn_mkdir_p(dest, 0700);
	*slash = '/';
	if (rc == 0)
		rc = open_named_store(url, &store, &err);
	else
		kn_errorf(&err, KN_EIO, NULL, "%s", strerror(-rc));
	if (rc == 0)
		rc = kn_blob_get_file(store, blob, dest, 0, -1, got, &err);
	if (rc < 0) {
		say(log_fd, "kiln: input %s: cannot fetch %s/%s: %s\n", name,
		    url, blob, err.message);
		snprintf(why, len, "input %s: cannot fetch it", name);
	} else if (want && strcmp(got, want) != 0 && first) {
		/* A job's own input, recorded by its first fetch: the task
		   would resume from a checkpoint made with other data. */
		unlink(dest);
		say(log_fd, "kiln: input %s (%s/%s) has sha256 %s now; attempt "
		    "%lld fetched it with sha256 %s\n", name, url, blob, got,
		    (long long)json_integer_value(first), want);
		snprintf(why, len, KN_INPUT_CHANGED_PREFIX "%s is sha256:%.12s, "
			 "attempt %lld had sha256:%.12s", name, got,
			 (long long)json_integer_value(first), want);
		rc = -EIO;
	} else if (want && strcmp(got, want) != 0) {
		unlink(dest);
		say(log_fd, "kiln: input %s: its sha256 is %s, not %s as the "
		    "outputs manifest says\n", name, got, want);
		snprintf(why, len, "input %s: sha256 mismatch", name);
		rc = -EIO;
	} else if (stat(dest, &st) < 0) {
		say(log_fd, "kiln: input %s: %s\n", name, strerror(errno));
		snprintf(why, len, "input %s: cannot fetch it", name);
		rc = -errno;
	} else {
		say(log_fd, "kiln: input %s fetched (sha256 %s)\n", name, got);
		json_array_append_new(fetched,
				      json_pack("{s:s, s:s, s:I}", "name", name,
						"sha256", got, "size",
						(json_int_t)st.st_size));
	}
	kn_blob_store_free(store);
	free(dest);
	return rc;
}

/* Whether name is an executable file in one of PATH's directories. */
static bool on_path(const char *name, const char *path)
{
	const char *p = path;

	if (strchr(name, '/'))
		return access(name, X_OK) == 0;
	while (p && *p) {
		size_t n = strcspn(p, ":");
		char *full = kn_asprintf("%.*s/%s", (int)n, n ? p : ".", name);
		bool ok = access(full, X_OK) == 0;

		free(full);
		if (ok)
			return true;
		p += n;
		if (*p == ':')
			p++;
	}
	return false;
}

/* Whether `python3 -c "import MODULE"` succeeds (its output dropped). */
static bool importable(const char *module, const char *path)
{
	char *code = kn_asprintf("import %s", module);
	int status = 0;
	pid_t pid = fork();

	if (pid == 0) {
		int null_fd = open("/dev/null", O_RDWR);

		if (null_fd >= 0) {
			dup2(null_fd, STDIN_FILENO);
			dup2(null_fd, STDOUT_FILENO);
			dup2(null_fd, STDERR_FILENO);
		}
		if (path)
			setenv("PATH", path, 1);
		execlp("python3", "python3", "-c", code, (char *)NULL);
		_exit(127);
	}
	free(code);
	if (pid < 0)
		return false;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/*
 * What `nvidia-smi ARGS...` prints first that line_prefix starts (the
 * rest of that line, trimmed), or "" when it prints no such line or does
 * not run. out has len bytes.
 */
static void nvidia_smi(const char *const *args, const char *prefix,
		       char *out, size_t len)
{
	char buf[8192];
	size_t got = 0;
	int fds[2], status = 0;
	const char *p;
	pid_t pid;
	ssize_t n;

	out[0] = '\0';
	if (pipe(fds) < 0)
		return;
	pid = fork();
	if (pid == 0) {
		int null_fd = open("/dev/null", O_RDWR);

		dup2(fds[1], STDOUT_FILENO);
		if (null_fd >= 0) {
			dup2(null_fd, STDIN_FILENO);
			dup2(null_fd, STDERR_FILENO);
		}
		close(fds[0]);
		close(fds[1]);
		execvp("nvidia-smi", (char *const *)args);
		_exit(127);
	}
	close(fds[1]);
	while (pid > 0 && got < sizeof(buf) - 1 &&
	       ((n = read(fds[0], buf + got, sizeof(buf) - 1 - got)) > 0 ||
		(n < 0 && errno == EINTR)))
		if (n > 0)
			got += (size_t)n;
	close(fds[0]);
	if (pid < 0)
		return;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return;
	buf[got] = '\0';
	for (p = buf; *p; p += strcspn(p, "\n"), p += *p == '\n') {
		const char *at = strstr(p, prefix);
		size_t line = strcspn(p, "\n");

		if (!at || at >= p + line)
			continue;
		at += strlen(prefix);
		line -= (size_t)(at - p);
		while (line && (*at == ' ' || *at == ':')) {
			at++;
			line--;
		}
		snprintf(out, len, "%.*s", (int)strcspn(at, " \n|"), at);
		return;
	}
}

/* Compare versions part by part as numbers: <0, 0 or >0 like strcmp. */
static int version_cmp(const char *a, const char *b)
{
	while (*a || *b) {
		long x = strtol(a, (char **)&a, 10);
		long y = strtol(b, (char **)&b, 10);

		if (x != y)
			return x < y ? -1 : 1;
		a += *a == '.';
		b += *b == '.';
		if ((*a && (*a < '0' || *a > '9')) ||
		    (*b && (*b < '0' || *b > '9')))
			break;
	}
	return 0;
}

/*
 * The NVIDIA driver's (what == "driver") or its CUDA's version against
 * the least wanted; 0, or -ENODEV with why.
 */
static int check_version(const char *what, const char *want, char *why,
			 size_t len)
{
	static const char *const driver_args[] = {
		"nvidia-smi", "--query-gpu=driver_version",
		"--format=csv,noheader", NULL,
	};
	static const char *const plain_args[] = {"nvidia-smi", NULL};
	bool driver = !strcmp(what, "driver");
	char have[64];

	nvidia_smi(driver ? driver_args : plain_args,
		   driver ? "" : "CUDA Version", have, sizeof(have));
	if (!have[0]) {
		snprintf(why, len, KN_PREREQUISITE_PREFIX "%s %s needed; "
			 "nvidia-smi tells none on this node", what, want);
		return -ENODEV;
	}
	if (version_cmp(have, want) < 0) {
		snprintf(why, len, KN_PREREQUISITE_PREFIX "%s %s needed, the "
			 "node has %s", what, want, have);
		return -ENODEV;
	}
	return 0;
}

/* A module name Python could import: dotted identifiers only. */
static bool module_name_ok(const char *m)
{
	return *m && strspn(m, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRS"
			       "TUVWXYZ0123456789_.") == strlen(m);
}

/*
 * KILN_REQUIRES (a step's `requires:`, docs/workflows.md): commands on
 * PATH, importable Python modules, free scratch space, the GPU count the
 * task was given and the blob store answering. The first one missing
 * fails the task with a reason naming it.
 */
static int check_requires(char *const *env, int log_fd, char *why,
			  size_t len)
{
	const char *text = env_get(env, "KILN_REQUIRES");
	const char *path = env_get(env, "PATH");
	json_t *req, *v, *gpus, *scratch;
	size_t i;
	int rc = 0;

	if (!text)
		return 0;
	if (!path)
		path = getenv("PATH");
	req = json_loads(text, 0, NULL);
	if (!json_is_object(req)) {
		json_decref(req);
		snprintf(why, len, KN_PREREQUISITE_PREFIX "KILN_REQUIRES is "
			 "not a JSON object");
		return -EINVAL;
	}
	json_array_foreach(json_object_get(req, "commands"), i, v) {
		if (!json_is_string(v) || !on_path(json_string_value(v), path)) {
			snprintf(why, len, KN_PREREQUISITE_PREFIX "command %s "
				 "is not on PATH", json_string_value(v));
			rc = -ENOENT;
			goto out;
		}
	}
	json_array_foreach(json_object_get(req, "python_modules"), i, v) {
		const char *m = json_string_value(v);

		if (!m || !module_name_ok(m) || !importable(m, path)) {
			snprintf(why, len, KN_PREREQUISITE_PREFIX "python3 "
				 "cannot import %s", m);
			rc = -ENOENT;
			goto out;
		}
	}
	scratch = json_object_get(req, "scratch");
	if (json_is_object(scratch)) {
		const char *dir = json_string_value(
			json_object_get(scratch, "path"));
		int64_t want = json_integer_value(
			json_object_get(scratch, "free_bytes"));
		struct statvfs st;
		char have_text[32], want_text[32];
		int64_t have;

		if (!dir || statvfs(dir, &st) < 0) {
			snprintf(why, len, KN_PREREQUISITE_PREFIX "scratch "
				 "%s: %s", dir, strerror(errno));
			rc = -errno;
			goto out;
		}
		have = (int64_t)st.f_bavail * (int64_t)st.f_frsize;
		if (have < want) {
			cli_format_bytes(have, have_text, sizeof(have_text));
			cli_format_bytes(want, want_text, sizeof(want_text));
			snprintf(why, len, KN_PREREQUISITE_PREFIX "scratch %s "
				 "has %s free, needs %s", dir, have_text,
				 want_text);
			rc = -ENOSPC;
			goto out;
		}
	}
	gpus = json_object_get(req, "gpus");
	if (json_is_object(gpus)) {
		const char *devs = env_get(env, "CUDA_VISIBLE_DEVICES");
		int want = (int)json_integer_value(
			json_object_get(gpus, "count"));
		int have = 0;

		for (const char *p = devs; p && *p; p += strcspn(p, ","),
				p += *p == ',')
			have++;
		const char *model = json_string_value(
			json_object_get(gpus, "model"));
		json_t *given = json_object_get(gpus, "task_models");

		if (have < want) {
			snprintf(why, len, KN_PREREQUISITE_PREFIX "%d GPU%s "
				 "needed, the task has %d", want,
				 want == 1 ? "" : "s", have);
			rc = -ENODEV;
			goto out;
		}
		json_array_foreach(given, i, v) {
			if (model && !kn_sched_model_accepts(
					     model, json_string_value(v))) {
				snprintf(why, len, KN_PREREQUISITE_PREFIX
					 "GPU model %s needed, the task has "
					 "%s", model, json_string_value(v));
				rc = -ENODEV;
				goto out;
			}
		}
	}
	if (json_is_string(json_object_get(req, "driver")) &&
	    (rc = check_version("driver",
				json_string_value(json_object_get(req,
								  "driver")),
				why, len)) < 0)
		goto out;
	if (json_is_string(json_object_get(req, "cuda")) &&
	    (rc = check_version("cuda",
				json_string_value(json_object_get(req, "cuda")),
				why, len)) < 0)
		goto out;
	if (json_is_string(json_object_get(req, "store"))) {
		const char *url =
			json_string_value(json_object_get(req, "store"));
		struct kn_blob_store *store = NULL;
		struct kn_blob_info info = {0};
		struct kn_error err = {0};

		rc = open_named_store(url, &store, &err);
		/* A name no one writes: "not found" is the store answering. */
		if (rc == 0)
			rc = kn_blob_stat(store, "kiln-prerequisite-check",
					  &info, &err);
		kn_blob_store_free(store);
		if (rc < 0 && rc != -ENOENT) {
			say(log_fd, "kiln: the store %s does not answer: %s\n",
			    url, err.message);
			snprintf(why, len, KN_PREREQUISITE_PREFIX "the store "
				 "does not answer");
			goto out;
		}
		rc = 0;
	}
out:
	if (rc < 0)
		say(log_fd, "kiln: %s\n", why);
	json_decref(req);
	return rc;
}

/* Before the task: its prerequisites, then its inputs. */
static int prepare_task(void *arg, char *const *env, int log_fd, char *why,
			size_t len)
{
	const char *list = env_get(env, "KILN_INPUTS");
	const char *dir = env_get(env, "KILN_INPUT_DIR");
	const char *task_dir = env_get(env, "KILN_TASK_DIR");
	json_t *doc, *in, *fetched;
	size_t i;
	int rc = 0;

	(void)arg;
	rc = check_requires(env, log_fd, why, len);
	if (rc < 0 || !list)
		return rc;
	doc = json_loads(list, 0, NULL);
	if (!json_is_array(doc) || !dir) {
		json_decref(doc);
		snprintf(why, len, "KILN_INPUTS is not a JSON list, or "
			 "KILN_INPUT_DIR is not set");
		return -EINVAL;
	}
	fetched = json_array();
	json_array_foreach(doc, i, in) {
		rc = fetch_one(dir, in, fetched, log_fd, why, len);
		if (rc < 0)
			break;
	}
	/* The server records the digests from here (jobs.c, record_inputs):
	   the task directory is how the shim tells it anything. */
	if (rc == 0 && json_array_size(fetched) && task_dir) {
		char *path = kn_asprintf("%s/inputs.json", task_dir);
		char *text = json_dumps(fetched, JSON_COMPACT);

		rc = kn_write_file_atomic(path, text, strlen(text), 0600);
		if (rc < 0) {
			say(log_fd, "kiln: cannot write %s: %s\n", path,
			    strerror(-rc));
			snprintf(why, len, "cannot record the inputs' digests");
		}
		free(text);
		free(path);
	}
	json_decref(fetched);
	json_decref(doc);
	return rc;
}

/* ---- checkpoints, outputs and inputs in pods: kiln shim --kube ---- */

/*
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
			free(name);
			free(path);
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
	free(got);
	free(warnings);
	return rc;
}

extern char **environ;

/* In a pod the task's environment is the shim's own (launch.json has
   none), KILN_INPUTS and KILN_INPUT_DIR included. */
static int prepare_pod_task(void *arg, char *const *env, int log_fd,
			    char *why, size_t len)
{
	(void)env;
	return prepare_task(arg, environ, log_fd, why, len);
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
	free(text);
	free(inputs_text);
}

static const char *env_or(const char *key, const char *fallback)
{
	const char *v = getenv(key);

	return v && *v ? v : fallback;
}

static int shim_kube(char **argv)
{
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

	if (!task_dir || !*argv) {
		fputs("kiln shim --kube: KILN_TASK_DIR and a command are "
		      "needed\n", stderr);
		return 2;
	}
	if (signo <= 0)
		signo = SIGTERM;
	/* Blocked before any thread starts, so only the shim's signalfd
	   takes them (and PID 1 does not lose them). */
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	sigaddset(&mask, SIGUSR1);
	sigaddset(&mask, SIGUSR2);
	sigaddset(&mask, signo);
	sigprocmask(SIG_BLOCK, &mask, NULL);
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

/* ---- kiln shim --install DIR ---- */

static int copy_file(const char *from, const char *to, mode_t mode)
{
	char buf[65536], *tmp = kn_asprintf("%s.tmp", to);
	int in = open(from, O_RDONLY | O_CLOEXEC), out = -1, rc = 0;
	ssize_t n;

	if (in >= 0)
		out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	if (in < 0 || out < 0)
		rc = -errno;
	while (rc == 0 && (n = read(in, buf, sizeof(buf))) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || write(out, buf, (size_t)n) != n)
			rc = n < 0 ? -errno : -EIO;
	}
	if (out >= 0 && (close(out) < 0 && rc == 0))
		rc = -errno;
	if (in >= 0)
		close(in);
	if (rc == 0 && (fchmodat(AT_FDCWD, tmp, mode, 0) < 0 ||
			rename(tmp, to) < 0))
		rc = -errno;
	if (rc < 0)
		unlink(tmp);
	free(tmp);
	return rc;
}

struct install {
	const char *lib_dir;
	const char *interp; /* the dynamic loader's path */
	int rc;
	char failed[512];
};

static int install_lib(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct install *in = arg;
	const char *base;
	char *dest;
	int rc;

	(void)size;
	/* The executable itself has no name here; the vDSO no file. */
	if (!info->dlpi_name || info->dlpi_name[0] != '/' || in->rc < 0)
		return 0;
	base = strrchr(info->dlpi_name, '/') + 1;
	/* The loader under one fixed name: the pod's command names it. */
	if (in->interp && !strcmp(info->dlpi_name, in->interp))
		dest = kn_asprintf("%s/ld.so", in->lib_dir);
	else
		dest = kn_asprintf("%s/%s", in->lib_dir, base);
	rc = copy_file(info->dlpi_name, dest, 0755);
	if (rc < 0) {
		in->rc = rc;
		snprintf(in->failed, sizeof(in->failed), "%s: %s",
			 info->dlpi_name, strerror(-rc));
	}
	free(dest);
	return 0;
}

/* The PT_INTERP of the running executable, or NULL (static). */
static const char *interpreter(void)
{
	const ElfW(Phdr) *ph = (const ElfW(Phdr) *)getauxval(AT_PHDR);
	size_t n = getauxval(AT_PHNUM);
	uintptr_t bias = 0;

	for (size_t i = 0; ph && i < n; i++)
		if (ph[i].p_type == PT_PHDR)
			bias = (uintptr_t)ph - ph[i].p_vaddr;
	for (size_t i = 0; ph && i < n; i++)
		if (ph[i].p_type == PT_INTERP)
			return (const char *)(bias + ph[i].p_vaddr);
	return NULL;
}

/*
 * kiln and every shared library it runs with into DIR/bin and DIR/lib,
 * the loader as DIR/lib/ld.so: the task's image need not have kiln's
 * libraries (nor the same C library), since the pod runs
 * DIR/lib/ld.so --library-path DIR/lib DIR/bin/kiln.
 */
static int shim_install(const char *dir)
{
	struct install in = {0};
	char *bin = kn_asprintf("%s/bin", dir), *lib = kn_asprintf("%s/lib", dir);
	char *exe = kn_asprintf("%s/kiln", bin);
	int rc;

	rc = kn_mkdir_p(bin, 0755);
	if (rc == 0)
		rc = kn_mkdir_p(lib, 0755);
	if (rc < 0) {
		fprintf(stderr, "kiln shim --install: %s: %s\n", dir,
			strerror(-rc));
		goto out;
	}
	rc = copy_file("/proc/self/exe", exe, 0755);
	if (rc < 0) {
		fprintf(stderr, "kiln shim --install: %s: %s\n", exe,
			strerror(-rc));
		goto out;
	}
	in.lib_dir = lib;
	in.interp = interpreter();
	dl_iterate_phdr(install_lib, &in);
	rc = in.rc;
	if (rc < 0)
		fprintf(stderr, "kiln shim --install: %s\n", in.failed);
out:
	free(exe);
	free(lib);
	free(bin);
	return rc < 0 ? 1 : 0;
}

int cmd_shim(int argc, char **argv)
{
	const struct kn_shim_prepare prep = {prepare_task, NULL};
	struct kn_error err;
	int rc;

	if (argc >= 2 && !strcmp(argv[1], "--kube"))
		return shim_kube(argv + 2 + (argc > 2 &&
					     !strcmp(argv[2], "--")));
	if (argc == 3 && !strcmp(argv[1], "--install"))
		return shim_install(argv[2]);
	if (argc != 3 || (strcmp(argv[1], "--dir") != 0 &&
			  strcmp(argv[1], "--slurm") != 0)) {
		fputs("usage: kiln shim --dir TASK_DIR | --slurm ATTEMPT_DIR | "
		      "--kube -- CMD... | --install DIR\n"
		      "(internal: started by kiln server and in its pods)\n",
		      stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--slurm"))
		rc = kn_slurm_shim_main(argv[2], &prep, &err);
	else
		rc = kn_shim_main_prepared(argv[2], &prep, &err);
	if (rc != 0)
		fprintf(stderr, "kiln shim: %s\n", err.message);
	return rc;
}
