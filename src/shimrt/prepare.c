/*
 * What `kiln shim` does before any task starts, wherever it runs: the
 * task's prerequisites (KILN_REQUIRES: a workflow step's tools, modules
 * and GPU driver), then its inputs (KILN_INPUTS, set by the server): a
 * workflow step's, from the producing jobs' outputs manifests, and a job
 * spec's own `inputs:`. Each one is downloaded from its blob store into
 * $KILN_INPUT_DIR and its sha256 checked when one is known (a step's
 * output, or a job input its first attempt fetched), so files pass by
 * store URL and digest, never through the server. What it fetched goes
 * to $KILN_TASK_DIR/inputs.json, from which the server records a job
 * input's digest the first time. This lives outside src/exec so the
 * executors need no blob stores.
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

void shimrt_say(int fd, const char *fmt, ...)
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
		shimrt_say(log_fd, "kiln: input %s: cannot fetch %s/%s: %s\n",
			   name, url, blob, err.message);
		snprintf(why, len, "input %s: cannot fetch it", name);
	} else if (want && strcmp(got, want) != 0 && first) {
		/* A job's own input, recorded by its first fetch: the task
		   would resume from a checkpoint made with other data. */
		unlink(dest);
		shimrt_say(log_fd, "kiln: input %s (%s/%s) has sha256 %s now; "
			   "attempt %lld fetched it with sha256 %s\n", name,
			   url, blob, got,
			   (long long)json_integer_value(first), want);
		snprintf(why, len, KN_INPUT_CHANGED_PREFIX "%s is sha256:%.12s, "
			 "attempt %lld had sha256:%.12s", name, got,
			 (long long)json_integer_value(first), want);
		rc = -EIO;
	} else if (want && strcmp(got, want) != 0) {
		unlink(dest);
		shimrt_say(log_fd, "kiln: input %s: its sha256 is %s, not %s as "
			   "the outputs manifest says\n", name, got, want);
		snprintf(why, len, "input %s: sha256 mismatch", name);
		rc = -EIO;
	} else if (stat(dest, &st) < 0) {
		shimrt_say(log_fd, "kiln: input %s: %s\n", name, strerror(errno));
		snprintf(why, len, "input %s: cannot fetch it", name);
		rc = -errno;
	} else {
		shimrt_say(log_fd, "kiln: input %s fetched (sha256 %s)\n", name,
			   got);
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
/* requires.scratch: {path, free_bytes} free there. */
static int check_scratch(json_t *scratch, char *why, size_t len)
{
	const char *dir = json_string_value(json_object_get(scratch, "path"));
	int64_t want = json_integer_value(json_object_get(scratch,
							  "free_bytes"));
	struct statvfs st;
	char have_text[32], want_text[32];
	int64_t have;

	if (!dir || statvfs(dir, &st) < 0) {
		snprintf(why, len, KN_PREREQUISITE_PREFIX "scratch %s: %s", dir,
			 strerror(errno));
		return -errno;
	}
	have = (int64_t)st.f_bavail * (int64_t)st.f_frsize;
	if (have >= want)
		return 0;
	kn_format_bytes(have, have_text, sizeof(have_text));
	kn_format_bytes(want, want_text, sizeof(want_text));
	snprintf(why, len, KN_PREREQUISITE_PREFIX "scratch %s has %s free, "
		 "needs %s", dir, have_text, want_text);
	return -ENOSPC;
}

/* requires.gpus: {count, model, task_models} against the task's
   CUDA_VISIBLE_DEVICES and the models it was given. */
static int check_gpus(char *const *env, json_t *gpus, char *why, size_t len)
{
	const char *devs = kn_env_get(env, "CUDA_VISIBLE_DEVICES");
	const char *model = json_string_value(json_object_get(gpus, "model"));
	int want = (int)json_integer_value(json_object_get(gpus, "count"));
	int have = 0;
	json_t *v;
	size_t i;

	for (const char *p = devs; p && *p; p += strcspn(p, ","),
			p += *p == ',')
		have++;
	if (have < want) {
		snprintf(why, len, KN_PREREQUISITE_PREFIX "%d GPU%s needed, "
			 "the task has %d", want, want == 1 ? "" : "s", have);
		return -ENODEV;
	}
	json_array_foreach(json_object_get(gpus, "task_models"), i, v) {
		if (model && !kn_sched_model_accepts(model,
						     json_string_value(v))) {
			snprintf(why, len, KN_PREREQUISITE_PREFIX "GPU model "
				 "%s needed, the task has %s", model,
				 json_string_value(v));
			return -ENODEV;
		}
	}
	return 0;
}

/* requires.store: the store answers (a name no one writes: "not found"
   is the store answering). */
static int check_store(const char *url, int log_fd, char *why, size_t len)
{
	struct kn_blob_store *store = NULL;
	struct kn_blob_info info = {0};
	struct kn_error err = {0};
	int rc = open_named_store(url, &store, &err);

	if (rc == 0)
		rc = kn_blob_stat(store, "kiln-prerequisite-check", &info,
				  &err);
	kn_blob_store_free(store);
	if (rc < 0 && rc != -ENOENT) {
		shimrt_say(log_fd, "kiln: the store %s does not answer: %s\n",
			   url, err.message);
		snprintf(why, len, KN_PREREQUISITE_PREFIX "the store does not "
			 "answer");
		return rc;
	}
	return 0;
}

static int check_requires(char *const *env, int log_fd, char *why,
			  size_t len)
{
	const char *text = kn_env_get(env, "KILN_REQUIRES");
	const char *path = kn_env_get(env, "PATH");
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
	if (json_is_object(scratch) &&
	    (rc = check_scratch(scratch, why, len)) < 0)
		goto out;
	gpus = json_object_get(req, "gpus");
	if (json_is_object(gpus) && (rc = check_gpus(env, gpus, why, len)) < 0)
		goto out;
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
	if (json_is_string(json_object_get(req, "store")))
		rc = check_store(json_string_value(json_object_get(req,
								   "store")),
				 log_fd, why, len);
out:
	if (rc < 0)
		shimrt_say(log_fd, "kiln: %s\n", why);
	json_decref(req);
	return rc;
}

int kn_shimrt_prepare(void *arg, char *const *env, int log_fd, char *why,
		      size_t len)
{
	const char *list = kn_env_get(env, "KILN_INPUTS");
	const char *dir = kn_env_get(env, "KILN_INPUT_DIR");
	const char *task_dir = kn_env_get(env, "KILN_TASK_DIR");
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
			shimrt_say(log_fd, "kiln: cannot write %s: %s\n",
				   path, strerror(-rc));
			snprintf(why, len, "cannot record the inputs' digests");
		}
		KN_FREE_ALL(text, path);
	}
	json_decref(fetched);
	json_decref(doc);
	return rc;
}
