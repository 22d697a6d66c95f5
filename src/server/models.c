/*
 * The model registry (docs/registry.md), its domain: immutable numbered
 * versions whose manifest lives in SQLite (the truth) and, as a copy, in
 * the blob store as models/NAME/VERSION.json, signatures that are kept
 * only when they verify, aliases with their history, versions made from
 * a job's outputs with their lineage, and the checked copies a
 * deployment runs from. Its HTTP handlers and the blob uploads in
 * progress are in models_http.c; the rules that need no server, in
 * modelrules.c.
 *
 * Every call is audited, reads included (model.read, model.pull,
 * model.verify), refusals and failures with outcome "error".
 */
#include "modelsvc.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"

static int64_t upload_sweep_ms(const struct server *s)
{
	return core_config(s)->upload_idle_ms / 2 > 500 ? core_config(s)->upload_idle_ms / 2
					       : 500;
}

static void upload_sweep(void *arg)
{
	struct server *s = arg;

	models_uploads_expire(s);
	kn_timer_arm(models_state(s)->idle_timer, upload_sweep_ms(s));
}

static int signers_start(struct server *s, struct kn_error *err);

struct model_state *models_state(struct server *s)
{
	return service_state(s, &models_service);
}

int models_start(struct server *s, struct kn_error *err)
{
	struct model_state *m = kn_xcalloc(1, sizeof(*m));
	struct kn_model_keyring ring;
	glob_t partials = {0};
	char *pattern;
	int rc;

	m->staging = kn_asprintf("%s/registry/uploads", core_home(s));
	m->trusted_keys = core_config(s)->trusted_keys
				  ? kn_xstrdup(core_config(s)->trusted_keys)
				  : kn_asprintf("%s/keys/trusted", core_home(s));
	service_state_set(s, &models_service, m);
	/* Parts of uploads cut short by a stop are of no use to anyone. */
	kn_rm_rf(m->staging);
	rc = kn_mkdir_p(m->staging, 0700);
	if (rc < 0)
		return kn_errorf(err, KN_EIO, NULL, "cannot create %s: %s",
				 m->staging, strerror(-rc));
	/* Deployment copies cut short by a stop (see make_copy). */
	pattern = kn_asprintf("%s/registry/models/*/*.partial*", core_home(s));
	if (glob(pattern, 0, NULL, &partials) == 0)
		for (size_t i = 0; i < partials.gl_pathc; i++)
			kn_rm_rf(partials.gl_pathv[i]);
	globfree(&partials);
	free(pattern);
	/* Idle uploads go within half the idle time past it. */
	m->idle_timer = kn_timer_new(core_loop(s), upload_sweep, s);
	kn_timer_arm(m->idle_timer, upload_sweep_ms(s));
	/* A bad key file is reported at start, not at the first pull. */
	rc = kn_model_keyring_load(m->trusted_keys, &ring, err);
	if (rc < 0)
		return rc;
	kn_log(KN_LOG_INFO, "model registry: %zu trusted key%s in %s", ring.n,
	       ring.n == 1 ? "" : "s", m->trusted_keys);
	kn_model_keyring_release(&ring);
	rc = models_local_start(s, err);
	if (rc < 0)
		return rc;
	return signers_start(s, err);
}

void models_stop(struct server *s)
{
	struct model_state *m = models_state(s);

	if (!m)
		return;
	models_uploads_drop(m);
	models_local_stop(m);
	kn_timer_free(m->idle_timer);
	KN_FREE_ALL(m->staging, m->trusted_keys, m);
	service_state_set(s, &models_service, NULL);
}

/* ---- helpers ---- */

int models_open_store(const char *url, struct kn_blob_store **out,
		      struct kn_error *err)
{
	struct kn_blob_store_config cfg = {.url = url, .use_env = true};

	return kn_blob_store_open(&cfg, out, err);
}

int models_resolve(struct server *s, const struct kn_model_ref *ref,
		   struct kn_model_version_row *out, struct kn_error *err)
{
	int64_t version = ref->version;
	int rc;

	if (ref->alias[0]) {
		rc = kn_store_model_alias_get(core_store(s), ref->name, ref->alias,
					      &version, err);
		if (rc < 0)
			return rc;
	}
	return kn_store_model_version_get(core_store(s), ref->name, version, out,
					  err);
}

/* ---- versions ---- */

int models_check_blobs(struct kn_blob_store *store,
		       const struct kn_model_files *f, struct kn_error *err)
{
	int rc = 0;

	for (size_t i = 0; rc == 0 && i < f->n; i++) {
		struct kn_blob_info info = {0};
		char *name = kn_model_blob_name(f->items[i].sha256);
		rc = kn_blob_stat(store, name, &info, err);
		if (rc == -ENOENT)
			rc = kn_errorf(err, KN_ECONFLICT, "files",
				       "file %s: blob %s is not in the store; "
				       "upload it first", f->items[i].path,
				       name);
		else if (rc == 0 && info.size != f->items[i].size)
			rc = kn_errorf(err, KN_EINVAL, "files",
				       "file %s: size %lld, but blob %s has "
				       "%lld bytes", f->items[i].path,
				       (long long)f->items[i].size, name,
				       (long long)info.size);
		free(name);
	}
	if (rc == 0)
		rc = kn_blob_sync(store, err);
	return rc;
}

int models_alias_move(struct server *s, const struct caller *c,
		      const char *name, const char *alias, const char *action,
		      int64_t to, int64_t *from, struct kn_error *err)
{
	struct kn_model_alias_row ev;
	struct kn_audit a;
	char object[160], detail[96];
	int rc;

	*from = 0;
	rc = kn_store_model_alias_get(core_store(s), name, alias, from, err);
	if (rc < 0 && rc != -ENOENT)
		return rc;
	memset(&ev, 0, sizeof(ev));
	ev.alias = (char *)alias;
	ev.version = to;
	ev.action = (char *)action;
	ev.from_version = *from;
	ev.actor = (char *)c->name;
	ev.time_ms = kn_now_ms();
	snprintf(object, sizeof(object), "model/%s@%s", name, alias);
	snprintf(detail, sizeof(detail), "%lld -> %lld", (long long)*from,
		 (long long)to);
	caller_audit(&a, c,
		     strcmp(action, "promote") ? "model.rollback"
					       : "model.promote",
		     object, "ok", detail);
	rc = kn_store_model_alias_move(core_store(s), name, &ev, &a, err);
	if (rc == 0)
		services_alias_moved(s, name, alias);
	return rc;
}

int models_alias_point(struct server *s, const struct caller *c,
		       const char *name, const char *alias, int64_t version,
		       struct kn_error *err)
{
	int64_t now = 0, from;
	int rc = kn_store_model_alias_get(core_store(s), name, alias, &now, err);

	if (rc < 0 && rc != -ENOENT)
		return rc;
	if (rc == 0 && now == version)
		return 0;
	return models_alias_move(s, c, name, alias, "promote", version, &from, err);
}

bool models_key_trusted(struct server *s, const char *key_id)
{
	struct kn_model_keyring ring = {0};
	struct kn_error err;
	bool trusted = false;

	if (kn_model_keyring_load(models_state(s)->trusted_keys, &ring, &err) == 0)
		trusted = kn_model_keyring_has(&ring, key_id);
	kn_model_keyring_release(&ring);
	return trusted;
}

/*
 * A push that moves an alias is a promote: below operator (promote's
 * role), a caller may set a new alias or move one it moved last, never
 * one another token set.
 */
static int alias_push_allowed(struct server *s, const struct caller *c,
			      const char *name, const char *alias,
			      struct kn_error *err)
{
	struct kn_model_alias_row *hist = NULL;
	const char *owner = NULL;
	size_t n = 0;
	int rc;

	if (!alias || c->role >= KN_ROLE_OPERATOR)
		return 0;
	rc = kn_store_model_alias_history(core_store(s), name, &hist, &n, err);
	if (rc < 0)
		return rc;
	for (size_t i = 0; i < n; i++) /* oldest first: the last one holds */
		if (!strcmp(hist[i].alias, alias))
			owner = hist[i].actor;
	if (owner && strcmp(owner, c->name) != 0)
		rc = kn_errorf(err, KN_EPERM, "alias",
			       "role %s may not move alias %s of model %s, "
			       "set by %s (needs operator, as promote does)",
			       role_name(c->role), alias, name, owner);
	kn_model_alias_list_free(hist, n);
	return rc;
}

int models_version_create(struct server *s, const struct caller *c,
			  const char *name, const struct kn_model_files *files,
			  json_t *lineage, json_t *metrics, const char *alias,
			  json_t **reply, struct kn_error *err)
{
	struct kn_model_version_row v;
	struct kn_blob_store *store = NULL;
	struct kn_audit a;
	json_t *manifest = NULL;
	char *canonical = NULL, *blob = NULL, object[96], detail[64];
	int64_t version = 0, now = kn_now_ms(), from;
	int rc;

	rc = alias_push_allowed(s, c, name, alias, err);
	if (rc < 0)
		return rc;
	rc = kn_store_begin(core_store(s), err);
	if (rc < 0)
		return rc;
	rc = kn_store_model_version_next(core_store(s), name, now, &version, err);
	if (rc == 0) {
		manifest = kn_model_manifest_new(name, version, files, c->name,
						 now);
		if (lineage)
			json_object_set(manifest, "lineage", lineage);
		if (metrics)
			json_object_set(manifest, "metrics", metrics);
		canonical = kn_model_manifest_canonical(manifest);
		memset(&v, 0, sizeof(v));
		v.name = (char *)name;
		v.version = version;
		v.manifest = canonical;
		v.created_by = (char *)c->name;
		v.created_at = now;
		snprintf(object, sizeof(object), "model/%s@%lld", name,
			 (long long)version);
		snprintf(detail, sizeof(detail), "%zu files, %lld bytes%s",
			 files->n, (long long)kn_model_files_bytes(files),
			 lineage ? ", from a job" : "");
		caller_audit(&a, c, "model.push", object,
			     "ok", detail);
		rc = kn_store_model_version_insert(core_store(s), &v, &a, err);
	}
	rc = core_store_end(core_store(s), rc, err);
	if (rc < 0)
		goto out;

	/* The store's copy, for whoever reads the store without the DB. */
	blob = kn_model_manifest_blob_name(name, version);
	rc = models_open_store(core_blob_url(s), &store, err);
	if (rc == 0)
		rc = kn_blob_put_bytes(store, blob, canonical, strlen(canonical),
				       KN_BLOB_CREATE_ONLY, err);
	if (rc < 0) {
		kn_store_model_version_delete(core_store(s), name, version, NULL);
		goto out;
	}
	if (alias)
		rc = models_alias_move(s, c, name, alias, "promote", version, &from,
				err);
	if (rc == 0)
		*reply = json_pack("{s:s, s:I, s:I, s:I, s:s?, s:O}", "name",
				   name, "version", (json_int_t)version,
				   "files", (json_int_t)files->n, "bytes",
				   (json_int_t)kn_model_files_bytes(files),
				   "alias", alias, "manifest", manifest);
out:
	kn_blob_store_free(store);
	KN_FREE_ALL(blob, canonical);
	json_decref(manifest);
	return rc;
}

bool models_name_checked(const char *name, struct kn_error *err)
{
	if (kn_model_name_ok(name))
		return true;
	kn_errorf(err, KN_EINVAL, "name",
		  "\"%s\" is not a model name: 1-64 of letters, digits, '.', "
		  "'_', '-', starting with a letter or digit", name);
	return false;
}


int models_alias_rollback(struct server *s, const struct caller *c,
			  const char *name, const char *alias, int64_t *to,
			  int64_t *from, struct kn_error *err)
{
	struct kn_model_alias_row *hist = NULL;
	size_t nh = 0;
	int rc = kn_store_model_alias_history(core_store(s), name, &hist, &nh, err);

	if (rc == 0) {
		*to = model_rollback_target(hist, nh, alias);
		if (!*to)
			rc = kn_errorf(err, KN_ECONFLICT, "alias",
				       "alias %s of model %s has no earlier "
				       "version to roll back to", alias, name);
	}
	if (rc == 0)
		rc = models_alias_move(s, c, name, alias, "rollback", *to, from, err);
	kn_model_alias_list_free(hist, nh);
	return rc;
}

/* ---- deployments ---- */

/* Hash the files of f under dir in parallel; the first mismatch named. */
static int check_copy(const char *at, const char *dir,
		      const struct kn_model_files *f, struct kn_error *err)
{
	struct kn_hash_item *items = kn_xcalloc(f->n + 1, sizeof(*items));
	char **paths = kn_xcalloc(f->n + 1, sizeof(*paths));
	int rc = 0;

	for (size_t i = 0; i < f->n; i++) {
		paths[i] = kn_asprintf("%s/%s", dir, f->items[i].path);
		items[i].path = paths[i];
	}
	kn_hash_files(items, f->n, kn_hash_threads_default(), 0, NULL, NULL);
	for (size_t i = 0; rc == 0 && i < f->n; i++) {
		if (items[i].error)
			rc = kn_errorf(err, KN_EIO, "model",
				       "%s: file %s: %s", at, paths[i],
				       strerror(-items[i].error));
		else if (strcmp(items[i].sha256, f->items[i].sha256) ||
			 items[i].size != f->items[i].size)
			rc = kn_errorf(err, KN_EPERM, "model",
				       "refused: %s: file %s of its copy in %s "
				       "does not match its digest", at,
				       f->items[i].path, dir);
	}
	for (size_t i = 0; i < f->n; i++)
		free(paths[i]);
	KN_FREE_ALL(paths, items);
	return rc;
}

/*
 * Copy the version's blobs from the store into dir, each digest checked
 * as it is written; dir is built as dir.partial-XXXXXX (one per copy: two
 * deployments may copy one version at once) and renamed. When another
 * copy got there first, that one is used.
 */
static int make_copy(const char *store_url, const char *at, const char *dir,
		     const struct kn_model_files *f, struct kn_error *err)
{
	char *partial = kn_asprintf("%s.partial-XXXXXX", dir);
	char *parent = kn_xstrdup(dir);
	struct kn_blob_store *store = NULL;
	int rc;

	*strrchr(parent, '/') = '\0';
	rc = kn_mkdir_p(parent, 0755);
	if (rc == 0 && !mkdtemp(partial))
		rc = -errno;
	if (rc < 0) {
		rc = kn_errorf(err, KN_EIO, NULL, "cannot create %s: %s",
			       partial, strerror(-rc));
		goto out;
	}
	chmod(partial, 0755);
	rc = models_open_store(store_url, &store, err);
	for (size_t i = 0; rc == 0 && i < f->n; i++) {
		char *path = kn_asprintf("%s/%s", partial, f->items[i].path);
		char *blob = kn_model_blob_name(f->items[i].sha256);
		char got[KN_SHA256_HEX + 1], *slash = strrchr(path, '/');

		*slash = '\0';
		kn_mkdir_p(path, 0755);
		*slash = '/';
		rc = kn_blob_get_file(store, blob, path, 0, -1, got, err);
		if (rc == 0 && strcmp(got, f->items[i].sha256) != 0)
			rc = kn_errorf(err, KN_EPERM, "model",
				       "refused: %s: file %s does not match its "
				       "digest: blob %s hashes to %s", at,
				       f->items[i].path, blob, got);
		KN_FREE_ALL(blob, path);
	}
	if (rc == 0 && rename(partial, dir) < 0 && errno != EEXIST &&
	    errno != ENOTEMPTY)
		rc = kn_errorf(err, KN_EIO, NULL, "cannot rename %s: %s",
			       partial, strerror(errno));
	kn_rm_rf(partial); /* gone when renamed */
	kn_blob_store_free(store);
out:
	KN_FREE_ALL(parent, partial);
	return rc;
}

/*
 * A deployment's model check: what the database says (the version, its
 * signatures, the keys trusted) on the loop (model_copy_begin), the files
 * hashed or copied on any thread with copies (model_copy_work).
 */
struct model_copy {
	struct server *s; /* loop only */
	models_dir_cb cb;
	void *arg;
	char at[KN_MODEL_NAME_MAX + 24];
	int64_t version;
	char *dir, *store_url;
	struct kn_model_files files;
	int rc;
	struct kn_error err;
};

static void model_copy_free(struct model_copy *w)
{
	KN_FREE_ALL(w->dir, w->store_url);
	kn_model_files_release(&w->files);
	free(w);
}

static int model_copy_begin(struct server *s, const char *text,
			    struct model_copy **out, struct kn_error *err)
{
	struct kn_model_version_row v = {0};
	struct kn_model_signature_row *rows = NULL;
	struct kn_model_keyring ring = {0};
	struct kn_model_sig *sigs = NULL;
	struct kn_model_ref ref;
	struct model_copy *w = kn_xcalloc(1, sizeof(*w));
	json_t *manifest = NULL;
	size_t ns = 0;
	int rc;

	rc = kn_model_ref_parse(text, true, "model", &ref, err);
	if (rc == 0)
		rc = models_resolve(s, &ref, &v, err);
	if (rc < 0)
		goto out;
	snprintf(w->at, sizeof(w->at), "%s@%lld", v.name,
		 (long long)v.version);
	rc = kn_store_model_signature_list(core_store(s), v.name, v.version, &rows,
					   &ns, err);
	if (rc == 0)
		rc = kn_model_keyring_load(models_state(s)->trusted_keys, &ring, err);
	if (rc < 0)
		goto out;
	sigs = kn_xcalloc(ns + 1, sizeof(*sigs));
	for (size_t i = 0; i < ns; i++) {
		sigs[i].key_id = rows[i].key_id;
		sigs[i].public_key = rows[i].public_key;
		sigs[i].signature = rows[i].signature;
		sigs[i].trusted = kn_model_keyring_has(&ring, rows[i].key_id);
	}
	rc = kn_model_trust_check(w->at, v.manifest, sigs, ns, err);
	if (rc < 0)
		goto out;
	manifest = json_loads(v.manifest, 0, NULL);
	rc = kn_model_manifest_read(manifest, w->at, &w->files, NULL, NULL,
				    err);
	if (rc < 0)
		goto out;
	w->s = s;
	w->version = v.version;
	w->dir = kn_asprintf("%s/registry/models/%s/%lld", core_home(s), v.name,
			     (long long)v.version);
	w->store_url = kn_xstrdup(core_blob_url(s));
out:
	json_decref(manifest);
	free(sigs);
	kn_model_keyring_release(&ring);
	kn_model_signature_list_free(rows, ns);
	kn_model_version_row_release(&v);
	if (rc < 0) {
		model_copy_free(w);
		return rc;
	}
	*out = w;
	return 0;
}

static void model_copy_work(void *arg)
{
	struct model_copy *w = arg;
	struct stat st;

	/* A copy made earlier is checked again: replicas read it. */
	if (stat(w->dir, &st) == 0)
		w->rc = check_copy(w->at, w->dir, &w->files, &w->err);
	else
		w->rc = make_copy(w->store_url, w->at, w->dir, &w->files,
				  &w->err);
}

int models_deploy_dir(struct server *s, const char *text, char **out,
		      struct kn_error *err)
{
	struct model_copy *w = NULL;
	int rc = model_copy_begin(s, text, &w, err);

	if (rc < 0)
		return rc;
	model_copy_work(w);
	rc = w->rc;
	if (rc < 0) {
		*err = w->err;
	} else {
		*out = w->dir;
		w->dir = NULL;
	}
	model_copy_free(w);
	return rc;
}

static void model_copy_done(void *arg, bool ran)
{
	struct model_copy *w = arg;

	if (!ran)
		w->rc = kn_errorf(&w->err, KN_EUNAVAIL, NULL,
				  "the server stopped before %s was checked",
				  w->at);
	w->cb(w->s, w->rc, w->rc < 0 ? NULL : w->dir, w->version, &w->err,
	      w->arg);
	model_copy_free(w);
}

int models_deploy_dir_start(struct server *s, const char *text,
			    models_dir_cb cb, void *arg, struct kn_error *err)
{
	struct model_copy *w = NULL;
	int rc = model_copy_begin(s, text, &w, err);

	if (rc < 0)
		return rc;
	w->cb = cb;
	w->arg = arg;
	kn_workers_submit(core_request_workers(s), model_copy_work, model_copy_done,
			  w);
	return 0;
}

/* ---- versions from a job's outputs, with lineage ---- */

/* metrics.json is a flat object of numbers; checkpoint manifests list
   files. Both are small. */
#define METRICS_MAX_BYTES (64 * 1024)
#define CKPT_MANIFEST_MAX_BYTES (16 * 1024 * 1024)
/* How many producing jobs back `lineage` follows an input. */
#define LINEAGE_DEPTH_MAX 16

/* The job's newest complete checkpoint, {name, manifest_sha256}, or null. */
static int checkpoint_json(struct kn_blob_store *store, int64_t job_id,
			   json_t **out, struct kn_error *err)
{
	struct kn_ckpt_list list = {0};
	char job[24], hex[KN_SHA256_HEX + 1];
	int rc;

	*out = json_null();
	snprintf(job, sizeof(job), "%lld", (long long)job_id);
	rc = kn_ckpt_list(store, job, &list, err);
	for (size_t i = 0; rc == 0 && i < list.n; i++) {
		char *name, *text = NULL;
		size_t len = 0;

		if (!list.items[i].complete)
			continue;
		name = kn_asprintf("%s/checkpoints/%s/%s", job,
				   list.items[i].name, KN_CKPT_MANIFEST);
		rc = kn_blob_get_bytes(store, name, CKPT_MANIFEST_MAX_BYTES,
				       &text, &len, err);
		if (rc == 0) {
			kn_sha256_hex(text, len, hex);
			*out = json_pack("{s:s, s:s}", "name",
					 list.items[i].name, "manifest_sha256",
					 hex);
		}
		KN_FREE_ALL(text, name);
		break;
	}
	kn_ckpt_list_release(&list);
	return rc;
}

/*
 * The inputs a job got: its spec's own `inputs:` ({name, url} and the
 * sha256 and size its first fetch recorded), or as a workflow step
 * (KILN_INPUTS): {name, url} and, for another step's output, its sha256,
 * size and the producing job.
 */
static json_t *job_inputs_json(struct server *s, int64_t job_id,
			       const char *spec_json)
{
	json_t *env, *list, *in, *out;
	const char *text;
	size_t i;

	out = jobs_inputs_json(s, job_id, spec_json);
	if (out) {
		/* The same fields as a step's inputs. */
		json_array_foreach(out, i, in) {
			json_object_del(in, "input");
			json_object_del(in, "attempt");
		}
		return out;
	}
	/* A step's inputs are what its tasks are given (workflows.c). */
	env = job_hooks_task_env(core_hooks(s),
				 &(struct job_task){ .job_id = job_id });
	text = json_string_value(json_object_get(env, "KILN_INPUTS"));
	out = json_array();
	list = text ? json_loads(text, 0, NULL) : NULL;
	json_array_foreach(list, i, in) {
		const char *blob = json_string_value(json_object_get(in, "blob"));
		json_t *o = json_pack("{s:O?, s:O?}", "name",
				      json_object_get(in, "name"), "url",
				      json_object_get(in, "url"));
		long long producer;
		int used = 0;

		if (json_object_get(in, "sha256")) {
			json_object_set(o, "sha256",
					json_object_get(in, "sha256"));
			json_object_set(o, "size", json_object_get(in, "size"));
		}
		/* Another job's output: "JOB/outputs/PATH". */
		if (blob && sscanf(blob, "%lld/outputs/%n", &producer, &used) == 1 &&
		    used > 0)
			json_object_set_new(o, "job", json_integer(producer));
		json_array_append_new(out, o);
	}
	json_decref(list);
	json_decref(env);
	return out;
}

/*
 * What a job's lineage records: the job, its spec's digest (of the stored
 * normalized spec), its newest checkpoint (filled in by the caller: it
 * reads the store), its inputs with their digests and the code revision
 * recorded at submit (null when its workdir was not a git repository).
 */
static int lineage_of_job(struct server *s, const struct kn_job_row *j,
			  json_t **out, struct kn_error *err)
{
	char spec[KN_SHA256_HEX + 1], *revision = NULL;
	int rc = kn_store_job_revision_get(core_store(s), j->id, &revision, err);

	if (rc == -ENOENT)
		rc = 0;
	if (rc == 0) {
		kn_sha256_hex(j->spec_json, strlen(j->spec_json), spec);
		*out = json_pack("{s:I, s:s, s:s, s:s, s:n, s:s?, s:o}", "job",
				 (json_int_t)j->id, "job_name", j->name,
				 "state", kn_job_state_name(j->state),
				 "spec_sha256", spec, "checkpoint",
				 "code_revision", revision, "inputs",
				 job_inputs_json(s, j->id, j->spec_json));
	}
	free(revision);
	return rc;
}

/* The lineage of job job_id, its checkpoint read from store. */
static int job_lineage(struct server *s, struct kn_blob_store *store,
		       int64_t job_id, json_t **out, struct kn_error *err)
{
	struct kn_job_row j = {0};
	json_t *ckpt = NULL;
	int rc;

	rc = kn_store_job_get(core_store(s), job_id, &j, err);
	if (rc == -ENOENT)
		rc = kn_errorf(err, KN_ENOTFOUND, "job", "no job %lld",
			       (long long)job_id);
	if (rc == 0)
		rc = checkpoint_json(store, job_id, &ckpt, err);
	if (rc == 0)
		rc = lineage_of_job(s, &j, out, err);
	if (rc == 0)
		json_object_set(*out, "checkpoint", ckpt);
	json_decref(ckpt);
	kn_job_row_release(&j);
	return rc;
}

/* The numbers of the job's outputs/metrics.json, or NULL without one. */
static json_t *job_metrics(struct kn_blob_store *store, int64_t job_id)
{
	char *name = kn_asprintf("%lld/outputs/metrics.json",
				 (long long)job_id), *text = NULL;
	json_t *doc = NULL, *nums = NULL, *v;
	const char *key;
	size_t len = 0;

	if (kn_blob_get_bytes(store, name, METRICS_MAX_BYTES, &text, &len,
			      NULL) == 0)
		doc = json_loadb(text, len, 0, NULL);
	if (json_is_object(doc)) {
		nums = json_object();
		json_object_foreach(doc, key, v)
			if (json_is_number(v))
				json_object_set(nums, key, v);
	}
	json_decref(doc);
	KN_FREE_ALL(text, name);
	return nums;
}

/*
 * Put the job's output o into the registry as sha256/HEX, create-only,
 * with its bytes checked against the digest its outputs manifest gave
 * (downloaded through staging first).
 */
static int output_adopt(struct kn_blob_store *store, const char *staging,
			const struct kn_output_row *o, struct kn_error *err)
{
	struct kn_blob_info info = {0};
	char *src = kn_asprintf("%lld/outputs/%s", (long long)o->job_id,
				o->name);
	char *dst = kn_model_blob_name(o->sha256);
	/* One per copy: two pushes from one job may run at once. */
	char *tmp = kn_asprintf("%s/job-%lld.%s.XXXXXX", staging,
				(long long)o->job_id, o->sha256);
	char got[KN_SHA256_HEX + 1];
	int rc = 0, fd;

	if (kn_blob_stat(store, dst, &info, NULL) == 0 && info.size == o->size)
		goto out;
	fd = mkstemp(tmp);
	if (fd < 0) {
		rc = kn_errorf(err, KN_EIO, NULL, "cannot create %s: %s", tmp,
			       strerror(errno));
		goto out;
	}
	close(fd);
	rc = kn_blob_get_file(store, src, tmp, 0, -1, got, err);
	if (rc == 0 && strcmp(got, o->sha256) != 0)
		rc = kn_errorf(err, KN_EPERM, "job",
			       "refused: output %s of job %lld hashes to %s, "
			       "not %s as its outputs manifest says", o->name,
			       (long long)o->job_id, got, o->sha256);
	if (rc == 0)
		rc = kn_blob_put_file(store, dst, tmp, KN_BLOB_CREATE_ONLY, got,
				      NULL, err);
	if (rc == 0 && strcmp(got, o->sha256) != 0) {
		/* Never keep a blob whose name lies about its bytes. */
		kn_blob_delete(store, dst, NULL);
		rc = kn_errorf(err, KN_EIO, NULL,
			       "output %s of job %lld changed while copied",
			       o->name, (long long)o->job_id);
	}
	if (rc == -EEXIST)
		rc = 0;
	unlink(tmp);
out:
	KN_FREE_ALL(tmp, dst, src);
	return rc;
}

/*
 * A version from a job's outputs, in three steps: what the database
 * says, on the loop (models_from_job_start); the copy of every output into the
 * registry, the blobs' check and the reads of the newest checkpoint and
 * metrics.json, on a worker with copies (from_job_work); the version's
 * record, on the loop (from_job_finish).
 */
struct from_job {
	struct server *s;  /* loop only */
	models_made_cb cb; /* who waits (models_from_job_start) */
	void *arg;
	struct caller caller;
	char *name, *alias;
	int64_t job_id;
	char *store_url, *staging;
	struct kn_output_row *outs;
	size_t n;
	json_t *lineage; /* loop only; its checkpoint comes from the worker */
	/* from the worker */
	struct kn_model_files files;
	json_t *checkpoint, *metrics;
	int rc;
	struct kn_error err;
};

static void from_job_free(struct from_job *w)
{
	KN_FREE_ALL(w->name, w->alias, w->store_url, w->staging);
	kn_output_list_free(w->outs, w->n);
	json_decref(w->lineage);
	kn_model_files_release(&w->files);
	json_decref(w->checkpoint);
	json_decref(w->metrics);
	free(w);
}

static void from_job_work(void *arg)
{
	struct from_job *w = arg;
	struct kn_blob_store *store = NULL;
	int rc = models_open_store(w->store_url, &store, &w->err);

	for (size_t i = 0; rc == 0 && i < w->n; i++) {
		rc = output_adopt(store, w->staging, &w->outs[i], &w->err);
		kn_model_files_add(&w->files, w->outs[i].name, w->outs[i].size,
				   w->outs[i].sha256);
	}
	if (rc == 0)
		rc = kn_model_files_sort(&w->files, &w->err);
	if (rc == 0)
		rc = models_check_blobs(store, &w->files, &w->err);
	if (rc == 0)
		rc = checkpoint_json(store, w->job_id, &w->checkpoint, &w->err);
	if (rc == 0)
		w->metrics = job_metrics(store, w->job_id);
	w->rc = rc;
	kn_blob_store_free(store);
}

static int from_job_finish(struct from_job *w, json_t **reply,
			   struct kn_error *err)
{
	if (w->rc < 0) {
		*err = w->err;
		return w->rc;
	}
	json_object_set(w->lineage, "checkpoint", w->checkpoint);
	return models_version_create(w->s, &w->caller, w->name, &w->files,
			      w->lineage, w->metrics, w->alias, reply, err);
}

static void from_job_done(void *arg, bool ran)
{
	struct from_job *w = arg;
	struct kn_error err;
	json_t *reply = NULL;
	int rc;

	if (!ran)
		w->rc = kn_errorf(&w->err, KN_EUNAVAIL, NULL,
				  "the server stopped before job %lld's "
				  "outputs were copied; push again",
				  (long long)w->job_id);
	rc = from_job_finish(w, &reply, &err);
	w->cb(w->s, rc, reply, &err, w->arg);
	json_decref(reply);
	from_job_free(w);
}

int models_from_job_start(struct server *s, const struct caller *c,
			  const char *name, int64_t job_id, const char *alias,
			  models_made_cb cb, void *arg, struct kn_error *err)
{
	struct from_job *w;
	struct kn_job_row j = {0};
	int rc;

	if (!models_name_checked(name, err))
		return -EINVAL;
	w = kn_xcalloc(1, sizeof(*w));
	w->s = s;
	w->caller = *c;
	w->name = kn_xstrdup(name);
	w->alias = alias ? kn_xstrdup(alias) : NULL;
	w->job_id = job_id;
	w->store_url = kn_xstrdup(core_blob_url(s));
	w->staging = kn_xstrdup(models_state(s)->staging);
	rc = kn_store_job_get(core_store(s), job_id, &j, err);
	if (rc == -ENOENT)
		rc = kn_errorf(err, KN_ENOTFOUND, "job", "no job %lld",
			       (long long)job_id);
	if (rc == 0 && j.state != KN_JOB_SUCCEEDED)
		rc = kn_errorf(err, KN_ECONFLICT, "job",
			       "job %lld is %s: only a succeeded job's outputs "
			       "make a model version", (long long)job_id,
			       kn_job_state_name(j.state));
	if (rc == 0)
		rc = kn_store_output_list(core_store(s), job_id, &w->outs, &w->n,
					  err);
	if (rc == 0 && w->n == 0)
		rc = kn_errorf(err, KN_ECONFLICT, "job",
			       "job %lld left no outputs (files in "
			       "KILN_OUTPUT_DIR) to make a model of",
			       (long long)job_id);
	for (size_t i = 0; rc == 0 && i < w->n; i++) {
		const struct kn_output_row *o = &w->outs[i];
		char *want = kn_asprintf("%.*s/%lld/outputs/%s",
					 (int)kn_url_base_len(core_blob_url(s)),
					 core_blob_url(s), (long long)o->job_id,
					 o->name);

		if (strcmp(o->url, want) != 0)
			rc = kn_errorf(err, KN_ECONFLICT, "job",
				       "output %s of job %lld is in %s, not in "
				       "this server's store %s", o->name,
				       (long long)o->job_id, o->url,
				       core_blob_url(s));
		free(want);
	}
	if (rc == 0)
		rc = lineage_of_job(s, &j, &w->lineage, err);
	kn_job_row_release(&j);
	if (rc < 0) {
		from_job_free(w);
		return rc;
	}
	w->cb = cb;
	w->arg = arg;
	kn_workers_submit(core_request_workers(s), from_job_work, from_job_done,
			  w);
	return 0;
}

int models_lineage_expand(struct server *s, struct kn_blob_store *store,
			  json_t *lineage, int depth, struct kn_error *err)
{
	json_t *in;
	size_t i;

	json_array_foreach(json_object_get(lineage, "inputs"), i, in) {
		json_t *producer = json_object_get(in, "job"), *up = NULL;
		int rc;

		if (!json_is_integer(producer) || depth >= LINEAGE_DEPTH_MAX)
			continue;
		rc = job_lineage(s, store, json_integer_value(producer), &up,
				 err);
		if (rc == 0)
			rc = models_lineage_expand(s, store, up, depth + 1, err);
		if (rc < 0) {
			json_decref(up);
			return rc;
		}
		json_object_set_new(in, "produced_by", up);
	}
	return 0;
}

/* ---- signing: keys the server holds by name ---- */

/*
 * A signer's key is the server's own secret: a regular file owned by the
 * server's user, readable by no one else (0600 or 0400).
 */
static int signer_key_check(const struct kn_signer_conf *sg,
			    struct kn_error *err)
{
	struct stat st;
	mode_t mode;

	if (stat(sg->key_file, &st) < 0)
		return kn_errorf(err, KN_EIO, "signers", "signer %s: %s: %s",
				 sg->name, sg->key_file, strerror(errno));
	mode = st.st_mode & 07777;
	if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
	    (mode != 0600 && mode != 0400))
		return kn_errorf(err, KN_EPERM, "signers",
				 "signer %s: %s is %s owned by uid %u with mode "
				 "%04o; a signer's key must be a file owned by "
				 "the server's user (uid %u) with mode 0600 or "
				 "0400",
				 sg->name, sg->key_file,
				 kn_file_kind(st.st_mode), (unsigned)st.st_uid,
				 (unsigned)mode, (unsigned)geteuid());
	return 0;
}

/* Every signer's key, checked and tried once before the server serves. */
static int signers_start(struct server *s, struct kn_error *err)
{
	const struct kn_server_conf *conf = &core_config(s)->sections;

	for (size_t i = 0; i < conf->n_signers; i++) {
		const struct kn_signer_conf *sg = &conf->signers[i];
		unsigned char pub[KN_ED25519_PUB_LEN], sig[KN_ED25519_SIG_LEN];
		char key_id[KN_SHA256_HEX + 1];
		int rc = signer_key_check(sg, err);

		if (rc < 0)
			return rc;
		rc = kn_model_sign(sg->key_file, "kiln", 4, pub, sig, err);
		if (rc < 0) {
			char *why = kn_xstrdup(err->message);

			rc = kn_errorf(err, err->code, "signers", "signer %s: "
				       "%s", sg->name, why);
			free(why);
			return rc;
		}
		kn_model_key_id(pub, key_id);
		kn_log(KN_LOG_INFO, "signer %s: key %.16s... (%s)", sg->name,
		       key_id, models_key_trusted(s, key_id) ?
		       "trusted" : "not among the trusted keys");
	}
	return 0;
}

static bool signer_grants(const struct kn_signer_conf *sg,
			  const struct caller *c)
{
	for (size_t i = 0; i < sg->n_roles; i++)
		if (!strcmp(sg->roles[i], role_name(c->role)))
			return true;
	for (size_t i = 0; i < sg->n_tokens; i++)
		if (!strcmp(sg->tokens[i], c->name))
			return true;
	return false;
}

int models_signer_check(struct server *s, const struct caller *c,
			const char *signer, const char *object,
			const struct kn_signer_conf **out, struct kn_error *err)
{
	const struct kn_server_conf *conf = &core_config(s)->sections;
	const struct kn_signer_conf *sg = NULL;
	char *detail;
	int rc;

	for (size_t i = 0; !sg && i < conf->n_signers; i++)
		if (!strcmp(conf->signers[i].name, signer))
			sg = &conf->signers[i];
	if (!sg)
		rc = kn_errorf(err, KN_EPERM, "signer", "no signer named %s: "
			       "the server signs only with the signers its "
			       "config file holds", signer);
	else if (!signer_grants(sg, c))
		rc = kn_errorf(err, KN_EPERM, "signer", "signer %s is not "
			       "granted to %s (role %s): its roles and tokens "
			       "in the server's config say who may sign with "
			       "it", signer, c->name, role_name(c->role));
	else
		rc = 0;
	if (rc < 0) {
		detail = kn_asprintf("signer %s: %s", signer, err->message);
		core_audit(s, c, "model.sign_refused", object, "denied",
			   detail);
		free(detail);
		return rc;
	}
	*out = sg;
	return 0;
}

int models_sign(struct server *s, const struct caller *c, const char *name,
		int64_t version, const char *signer,
		char key_id[KN_SHA256_HEX + 1], bool *trusted,
		struct kn_error *err)
{
	const struct kn_signer_conf *sg;
	struct kn_model_version_row v = {0};
	struct kn_model_signature_row row;
	struct kn_model_keyring ring = {0};
	struct kn_audit a;
	unsigned char pub[KN_ED25519_PUB_LEN], sig[KN_ED25519_SIG_LEN];
	char *pub_b64 = NULL, *sig_b64 = NULL, *detail = NULL, object[160];
	int rc;

	snprintf(object, sizeof(object), "model/%s@%lld", name,
		 (long long)version);
	rc = models_signer_check(s, c, signer, object, &sg, err);
	if (rc < 0)
		return rc;
	rc = signer_key_check(sg, err);
	if (rc == 0)
		rc = kn_store_model_version_get(core_store(s), name, version, &v,
						err);
	if (rc == 0)
		rc = kn_model_sign(sg->key_file, v.manifest,
				   strlen(v.manifest), pub, sig, err);
	if (rc < 0)
		goto out;
	kn_model_key_id(pub, key_id);
	/* As a posted signature is: kept only when it verifies. */
	if (kn_model_sig_check(pub, v.manifest, strlen(v.manifest), sig) < 0) {
		rc = kn_errorf(err, KN_EINVAL, "signer",
			       "signer %s: its signature of %s does not verify",
			       signer, object + 6);
		goto out;
	}
	rc = kn_model_keyring_load(models_state(s)->trusted_keys, &ring, err);
	if (rc < 0)
		goto out;
	*trusted = kn_model_keyring_has(&ring, key_id);
	pub_b64 = kn_base64_encode(pub, sizeof(pub));
	sig_b64 = kn_base64_encode(sig, sizeof(sig));
	detail = kn_asprintf("signer %s key %s", signer, key_id);
	memset(&row, 0, sizeof(row));
	row.key_id = key_id;
	row.public_key = pub_b64;
	row.signature = sig_b64;
	row.signed_by = (char *)c->name;
	row.signed_at = kn_now_ms();
	caller_audit(&a, c, "model.sign", object,
		     "ok", detail);
	rc = kn_store_model_signature_insert(core_store(s), name, version, &row, &a,
					     err);
out:
	if (rc < 0)
		core_audit(s, c, "model.sign", object, "error", err->message);
	KN_FREE_ALL(detail, pub_b64, sig_b64);
	kn_model_keyring_release(&ring);
	kn_model_version_row_release(&v);
	return rc;
}

/* ---- evaluations (re-validation's results per version) ---- */

static json_t *evaluation_json(const void *row)
{
	const struct kn_evaluation_row *e = row;

	return json_pack("{s:I, s:s, s:I, s:o, s:s, s:o, s:o, s:I}", "id",
			 (json_int_t)e->id, "alias", e->alias, "version",
			 (json_int_t)e->version, "job",
			 e->job_id ? json_integer(e->job_id) : json_null(),
			 "outcome", e->outcome, "metrics",
			 e->metrics_json ? json_loads(e->metrics_json, 0, NULL)
					 : json_null(),
			 "detail", e->detail ? json_string(e->detail)
					     : json_null(),
			 "time_ms", (json_int_t)e->time_ms);
}

json_t *models_evaluations_json(struct server *s, const char *name,
				int64_t version)
{
	struct kn_evaluation_row *rows = NULL;
	struct kn_error err;
	json_t *list;
	size_t n = 0;

	if (kn_store_evaluation_list(core_store(s), name, version, &rows, &n,
				     &err) < 0) {
		kn_log(KN_LOG_ERROR, "model %s@%lld: %s", name,
		       (long long)version, err.message);
		return json_array();
	}
	list = rows_json(rows, n, sizeof(*rows), evaluation_json);
	kn_evaluation_list_free(rows, n);
	return list;
}

