/*
 * kiln shim --dir TASK_DIR: internal, started by the local executor for
 * each task (see src/exec/shim.c); kiln shim --slurm ATTEMPT_DIR: the
 * same, started by srun inside a Slurm allocation (src/exec/slurm.c).
 * Not listed in `kiln --help`.
 *
 * Before a task starts, the shim fetches a workflow step's inputs
 * (KILN_INPUTS, set by the server from the producing jobs' outputs
 * manifests): each one is downloaded from its blob store into
 * $KILN_INPUT_DIR and its sha256 checked, so files pass from step to
 * step by store URL and digest, never through the server. This lives
 * here rather than in src/exec so the executors need no blob stores.
 */
#include "cmd/cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "base/base.h"
#include "ckpt/ckpt.h"
#include "exec/exec.h"

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

static int fetch_one(const char *dir, json_t *in, int log_fd, char *why,
		     size_t len)
{
	const char *name = json_string_value(json_object_get(in, "name"));
	const char *url = json_string_value(json_object_get(in, "store"));
	const char *blob = json_string_value(json_object_get(in, "blob"));
	const char *want = json_string_value(json_object_get(in, "sha256"));
	struct kn_blob_store_config cfg = {.use_env = true};
	struct kn_blob_store *store = NULL;
	struct kn_error err = {0};
	char got[KN_SHA256_HEX_LEN + 1] = "", *dest = NULL, *slash;
	int rc;

	if (!want)
		return 0; /* a plain path or URL: the task's to read */
	if (!name || !url || !blob || !name_safe(name)) {
		snprintf(why, len, "KILN_INPUTS: a malformed entry");
		return -EINVAL;
	}
	dest = kn_asprintf("%s/%s", dir, name);
	slash = strrchr(dest, '/');
	*slash = '\0';
	rc = kn_mkdir_p(dest, 0700);
	*slash = '/';
	cfg.url = url;
	if (rc == 0)
		rc = kn_blob_store_open(&cfg, &store, &err);
	else
		kn_errorf(&err, KN_EIO, NULL, "%s", strerror(-rc));
	if (rc == 0)
		rc = kn_blob_get_file(store, blob, dest, 0, -1, got, &err);
	if (rc < 0) {
		say(log_fd, "kiln: input %s: cannot fetch %s/%s: %s\n", name,
		    url, blob, err.message);
		snprintf(why, len, "input %s: cannot fetch it", name);
	} else if (strcmp(got, want) != 0) {
		unlink(dest);
		say(log_fd, "kiln: input %s: its sha256 is %s, not %s as the "
		    "outputs manifest says\n", name, got, want);
		snprintf(why, len, "input %s: sha256 mismatch", name);
		rc = -EIO;
	} else {
		say(log_fd, "kiln: input %s fetched (sha256 %s)\n", name, got);
	}
	kn_blob_store_free(store);
	free(dest);
	return rc;
}

static int fetch_inputs(void *arg, char *const *env, int log_fd, char *why,
			size_t len)
{
	const char *list = env_get(env, "KILN_INPUTS");
	const char *dir = env_get(env, "KILN_INPUT_DIR");
	json_t *doc, *in;
	size_t i;
	int rc = 0;

	(void)arg;
	if (!list)
		return 0;
	doc = json_loads(list, 0, NULL);
	if (!json_is_array(doc) || !dir) {
		json_decref(doc);
		snprintf(why, len, "KILN_INPUTS is not a JSON list, or "
			 "KILN_INPUT_DIR is not set");
		return -EINVAL;
	}
	json_array_foreach(doc, i, in) {
		rc = fetch_one(dir, in, log_fd, why, len);
		if (rc < 0)
			break;
	}
	json_decref(doc);
	return rc;
}

int cmd_shim(int argc, char **argv)
{
	const struct kn_shim_prepare prep = {fetch_inputs, NULL};
	struct kn_error err;
	int rc;

	if (argc != 3 || (strcmp(argv[1], "--dir") != 0 &&
			  strcmp(argv[1], "--slurm") != 0)) {
		fputs("usage: kiln shim --dir TASK_DIR | --slurm ATTEMPT_DIR "
		      "(internal: started by kiln server)\n", stderr);
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
