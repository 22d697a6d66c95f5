/*
 * Backups (docs/backup.md): the running server copies kiln.db at one
 * consistent moment (SQLite's online backup, on the loop thread, where no
 * write can interleave), the public key files of $KILN_HOME/keys, and
 * audit.key when asked, and uploads them with a manifest to
 * STORE/backups/NAME/, NAME being the UTC time ("20261203T041500.123Z",
 * which sorts by time).
 *
 * The copy is quick (pages of a local file); the uploads may not be (an
 * Azure store), so they run on a worker with copies of everything they
 * need, and the request is answered 202 at once: GET /v1/backups/NAME
 * says when it is over. The manifest goes last, create-only: a backup
 * without one is not complete, like a checkpoint. --backup-every runs the
 * same thing on a timer and, on the same worker, prunes beyond
 * --backup-keep, so a completed scheduled backup has always been pruned
 * after.
 */
#include "service.h"

#include "ckpt/ckpt.h"
#include "server/blobstores.h"
#include "server/core.h"
#include "server/server_alert.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Runs kept in memory for GET /v1/backups; older ones are dropped. */
#define BACKUP_RUNS_KEPT 32
/* Blob names: "backups/" NAME "/" PATH. */
#define BACKUP_PREFIX "backups/"
#define BACKUP_NAME_MAX 32

enum run_state { RUN_RUNNING, RUN_DONE, RUN_FAILED };
static const char *const RUN_STATE_NAMES[] = {"running", "done", "failed"};

struct backup_run {
	char name[BACKUP_NAME_MAX];
	char *url;        /* the store, without credentials */
	char *actor;      /* token name, or "system" for the schedule */
	enum run_state state;
	char error[512];
	bool with_audit_key;
	size_t parts;
	int64_t bytes;
	size_t pruned;    /* scheduled: backups deleted by retention */
	int64_t started_at;
	int64_t ended_at;
};

/* The service's own state (its slot in the core). */
struct backup_state {
	struct server *core;
	const struct kn_server_config *cfg;
	struct backup_run runs[BACKUP_RUNS_KEPT]; /* ring, oldest overwritten */
	size_t n_runs, next;
	struct kn_timer *timer;
	bool scheduled_busy;
	bool failing;     /* the backup_failed alert is firing */
};

struct part {
	char *path;       /* relative to the home, '/'-separated */
	char *local;      /* the file to upload */
	bool secret;
	int64_t size;
	char sha256[KN_SHA256_HEX_LEN + 1];
};

/* One backup's upload: owned by the worker until done runs. */
struct backup_job {
	struct backup_state *b;
	struct backup_run *run;   /* loop side only */
	struct kn_blob_store *store;
	char *staging;            /* $HOME/backup-staging/NAME */
	char name[BACKUP_NAME_MAX];
	int64_t created_ms;
	int64_t head_id;
	char head_hash[KN_AUDIT_HASH_HEX_LEN + 1];
	bool with_audit_key;
	struct part *parts;
	size_t n_parts, alloc_parts;
	size_t keep;              /* prune beyond this many; 0 = no pruning */

	/* Results, written by the worker. */
	int rc;
	struct kn_error err;
	size_t pruned;
};

static void job_add_part(struct backup_job *j, const char *path,
			 const char *local, bool secret)
{
	if (j->n_parts == j->alloc_parts) {
		j->alloc_parts = j->alloc_parts ? 2 * j->alloc_parts : 8;
		j->parts = kn_xrealloc(j->parts,
				       j->alloc_parts * sizeof(*j->parts));
	}
	memset(&j->parts[j->n_parts], 0, sizeof(j->parts[0]));
	j->parts[j->n_parts].path = kn_xstrdup(path);
	j->parts[j->n_parts].local = kn_xstrdup(local);
	j->parts[j->n_parts].secret = secret;
	j->n_parts++;
}

static void job_free(struct backup_job *j)
{
	if (!j)
		return;
	if (j->staging)
		kn_rm_rf(j->staging);
	free(j->staging);
	for (size_t i = 0; i < j->n_parts; i++) {
		KN_FREE_ALL(j->parts[i].path, j->parts[i].local);
	}
	free(j->parts);
	kn_blob_store_free(j->store);
	free(j);
}

/* Every "*.pub" in home/sub (not recursive): the keys' public halves. */
static void add_public_keys(struct backup_job *j, const char *home,
			    const char *sub)
{
	char *dir = kn_asprintf("%s/%s", home, sub);
	DIR *d = opendir(dir);
	struct dirent *e;

	while (d && (e = readdir(d))) {
		size_t len = strlen(e->d_name);
		char *local, *rel;
		struct stat st;

		if (len < 5 || strcmp(e->d_name + len - 4, ".pub") != 0)
			continue;
		local = kn_asprintf("%s/%s", dir, e->d_name);
		rel = kn_asprintf("%s/%s", sub, e->d_name);
		if (stat(local, &st) == 0 && S_ISREG(st.st_mode))
			job_add_part(j, rel, local, false);
		KN_FREE_ALL(local, rel);
	}
	if (d)
		closedir(d);
	free(dir);
}

static char *manifest_json(const struct backup_job *j)
{
	json_t *parts = json_array(), *doc;
	char *text;

	for (size_t i = 0; i < j->n_parts; i++)
		json_array_append_new(
			parts, json_pack("{s:s, s:I, s:s, s:b}", "path",
					 j->parts[i].path, "size",
					 (json_int_t)j->parts[i].size, "sha256",
					 j->parts[i].sha256, "secret",
					 j->parts[i].secret));
	doc = json_pack("{s:s, s:s, s:I, s:s, s:i, s:b, s:o, s:o}", "kind",
			"kiln-backup", "name", j->name, "created_ms",
			(json_int_t)j->created_ms, "kiln_version", KN_VERSION,
			"schema_version", KN_STORE_SCHEMA_VERSION,
			"with_audit_key", j->with_audit_key, "audit_head",
			j->head_id ? json_pack("{s:I, s:s}", "id",
					       (json_int_t)j->head_id, "hash",
					       j->head_hash)
				   : json_null(),
			"parts", parts);
	text = json_dumps(doc, JSON_INDENT(2) | JSON_SORT_KEYS);
	json_decref(doc);
	return text;
}

/*
 * Retention: keep the newest `keep` complete backups (those with a
 * manifest); delete older ones manifest first, so none is left looking
 * complete with parts missing, and incomplete ones older than the oldest
 * kept (left by a failed run).
 */
static int prune(struct kn_blob_store *store, size_t keep, size_t *deleted,
		 struct kn_error *err)
{
	struct kn_blob_list list = {0};
	char **complete = NULL;
	size_t n_complete = 0;
	const char *oldest_kept = NULL;
	int rc = kn_blob_list(store, BACKUP_PREFIX, &list, err);

	*deleted = 0;
	if (rc < 0)
		return rc;
	complete = kn_xcalloc(list.n + 1, sizeof(*complete));
	for (size_t i = 0; i < list.n; i++) {
		const char *name = list.items[i].name + strlen(BACKUP_PREFIX);
		const char *slash = strchr(name, '/');

		if (slash && !strcmp(slash + 1, KN_CKPT_MANIFEST))
			complete[n_complete++] =
				kn_asprintf("%.*s", (int)(slash - name), name);
	}
	/* The list is sorted by blob name, so by backup name: by time. */
	if (n_complete > keep)
		oldest_kept = complete[n_complete - keep];
	for (size_t c = 0; rc == 0 && oldest_kept && c + keep < n_complete;
	     c++) {
		char *manifest = kn_asprintf(BACKUP_PREFIX "%s/%s", complete[c],
					     KN_CKPT_MANIFEST);

		rc = kn_blob_delete(store, manifest, err);
		free(manifest);
		if (rc == 0)
			rc = kn_blob_sync(store, err);
		if (rc == 0)
			(*deleted)++;
	}
	for (size_t i = 0; rc == 0 && oldest_kept && i < list.n; i++) {
		const char *name = list.items[i].name + strlen(BACKUP_PREFIX);

		if (strncmp(name, oldest_kept, strlen(oldest_kept)) < 0 &&
		    strcmp(strchr(name, '/') ? strchr(name, '/') + 1 : "",
			   KN_CKPT_MANIFEST) != 0)
			rc = kn_blob_delete(store, list.items[i].name, err);
	}
	for (size_t c = 0; c < n_complete; c++)
		free(complete[c]);
	free(complete);
	kn_blob_list_release(&list);
	return rc;
}

/* On a worker: upload every part, then the manifest; then prune. */
static void job_work(void *arg)
{
	struct backup_job *j = arg;
	char *blob = NULL, *manifest = NULL;

	j->rc = 0;
	for (size_t i = 0; j->rc == 0 && i < j->n_parts; i++) {
		struct part *p = &j->parts[i];

		free(blob);
		blob = kn_asprintf(BACKUP_PREFIX "%s/%s", j->name, p->path);
		j->rc = kn_blob_put_file(j->store, blob, p->local,
					 KN_BLOB_CREATE_ONLY, p->sha256,
					 &p->size, &j->err);
	}
	if (j->rc == 0)
		j->rc = kn_blob_sync(j->store, &j->err);
	if (j->rc == 0) {
		manifest = manifest_json(j);
		free(blob);
		blob = kn_asprintf(BACKUP_PREFIX "%s/%s", j->name,
				   KN_CKPT_MANIFEST);
		j->rc = kn_blob_put_bytes(j->store, blob, manifest,
					  strlen(manifest), KN_BLOB_CREATE_ONLY,
					  &j->err);
	}
	if (j->rc == 0)
		j->rc = kn_blob_sync(j->store, &j->err);
	if (j->rc == 0 && j->keep > 0)
		j->rc = prune(j->store, j->keep, &j->pruned, &j->err);
	KN_FREE_ALL(manifest, blob);
}

static void audit_backup(struct backup_state *b, const struct backup_run *run,
			 const char *action, const char *outcome,
			 const char *detail)
{
	struct kn_audit a;
	struct kn_error err;
	char object[64];

	snprintf(object, sizeof(object), "backup/%s", run->name);
	memset(&a, 0, sizeof(a));
	a.actor = run->actor;
	a.role = "admin";
	a.action = (char *)action;
	a.object = object;
	a.outcome = (char *)outcome;
	a.detail = (char *)detail;
	if (kn_store_audit_insert(core_store(b->core), &a, &err) < 0)
		kn_log(KN_LOG_ERROR, "backup %s: %s", run->name, err.message);
}

/* A failing scheduled backup fires backup_failed; the next success ends it. */
static void backup_alert(struct backup_state *b, const struct backup_run *run,
			 bool firing)
{
	struct kn_error err;
	json_t *labels;
	char *summary;

	if (firing == b->failing)
		return;
	labels = json_pack("{s:s}", "store", run->url);
	summary = firing ? kn_asprintf("scheduled backup %s to %s failed: %s",
				       run->name, run->url, run->error)
			 : kn_asprintf("scheduled backup %s to %s succeeded",
				       run->name, run->url);
	struct server_alert a = server_alert_critical(
		"backup_failed", "backup:failed", summary, labels,
		run->started_at);

	if (monitor_server_alert(b->core, &a, firing, &err) < 0)
		kn_log(KN_LOG_ERROR, "backup alert: %s", err.message);
	else
		b->failing = firing;
	free(summary);
	json_decref(labels);
}

/* On the loop: record how it went. ran false: the server is stopping. */
static void job_done(void *arg, bool ran)
{
	struct backup_job *j = arg;
	struct backup_state *b = j->b;
	struct backup_run *run = j->run;
	bool scheduled = j->keep > 0;
	char detail[640];

	run->ended_at = kn_now_ms();
	if (!ran) {
		j->rc = kn_errorf(&j->err, KN_EIO, NULL,
				  "the server stopped before it ran");
	}
	if (j->rc < 0) {
		run->state = RUN_FAILED;
		kn_strlcpy(run->error, j->err.message, sizeof(run->error));
		kn_log(KN_LOG_ERROR, "backup %s to %s failed: %s", run->name,
		       run->url, run->error);
	} else {
		run->state = RUN_DONE;
		run->parts = j->n_parts;
		for (size_t i = 0; i < j->n_parts; i++)
			run->bytes += j->parts[i].size;
		run->pruned = j->pruned;
		kn_log(KN_LOG_INFO,
		       "backup %s: %zu parts, %" PRId64 " bytes to %s%s",
		       run->name, run->parts, run->bytes, run->url,
		       run->with_audit_key ? " (with audit.key)" : "");
	}
	if (!core_closing(b->core)) {
		snprintf(detail, sizeof(detail), "%s%s%s", run->url,
			 run->state == RUN_FAILED ? ": " : "",
			 run->state == RUN_FAILED ? run->error
			 : run->with_audit_key	  ? " (with audit.key)"
						  : "");
		audit_backup(b, run, "backup.create",
			     run->state == RUN_DONE ? "ok" : "error", detail);
		if (scheduled && run->pruned) {
			snprintf(detail, sizeof(detail),
				 "deleted %zu backup%s beyond the newest %zu",
				 run->pruned, run->pruned == 1 ? "" : "s",
				 j->keep);
			audit_backup(b, run, "backup.prune", "ok", detail);
		}
		if (scheduled)
			backup_alert(b, run, run->state == RUN_FAILED);
	}
	if (scheduled)
		b->scheduled_busy = false;
	job_free(j);
}

static struct backup_run *run_new(struct backup_state *b)
{
	struct backup_run *run = &b->runs[b->next];

	KN_FREE_ALL(run->url, run->actor);
	memset(run, 0, sizeof(*run));
	b->next = (b->next + 1) % BACKUP_RUNS_KEPT;
	if (b->n_runs < BACKUP_RUNS_KEPT)
		b->n_runs++;
	return run;
}

/*
 * Take the snapshot now and start the upload. to NULL = the server's
 * backup store; keep > 0 marks a scheduled run. *out (may be NULL) gets
 * the run. A bad URL or a failed snapshot fails here.
 */
static int backup_start(struct backup_state *b, const char *actor,
			const char *to,
			bool with_audit_key, size_t keep,
			struct backup_run **out, struct kn_error *err)
{
	struct kn_blob_store_config bc = {.use_env = true,
					  .private_files = true};
	struct backup_job *j = kn_xcalloc(1, sizeof(*j));
	struct backup_run *run;
	char *path = NULL;
	int rc;

	/* A request's target is a user's: only what the stores allow. The
	   operator's --backup-to URL keeps the AZURE_STORAGE_* credential. */
	if (to || !b->cfg->backup_to || !strstr(b->cfg->backup_to, "://")) {
		rc = blobstores_open(b->core, to ? to : b->cfg->backup_to,
				     to ? "to" : "backup-to", &bc, &j->store,
				     err);
	} else {
		bc.url = b->cfg->backup_to;
		rc = kn_blob_store_open(&bc, &j->store, err);
	}
	if (rc < 0)
		goto fail;
	j->b = b;
	j->keep = keep;
	j->with_audit_key = with_audit_key;
	j->created_ms = kn_now_ms();
	kn_format_time_basic(j->created_ms, j->name, sizeof(j->name));
	path = kn_asprintf("%s/backup-staging", core_home(b->core));
	kn_mkdir_p(path, 0700);
	j->staging = kn_asprintf("%s/%s", path, j->name);
	rc = kn_mkdir_p(j->staging, 0700);
	if (rc < 0) {
		rc = kn_errorf(err, kn_errcode_for_write(rc), NULL,
			       "cannot create %s: %s", j->staging,
			       strerror(-rc));
		goto fail;
	}
	free(path);
	path = kn_asprintf("%s/kiln.db", j->staging);
	/* The snapshot and its head, with no write in between: one turn. */
	rc = kn_store_backup(core_store(b->core), path, err);
	if (rc == 0)
		rc = kn_store_audit_head(core_store(b->core), &j->head_id,
					 j->head_hash, err);
	if (rc < 0)
		goto fail;
	job_add_part(j, "kiln.db", path, false);
	add_public_keys(j, core_home(b->core), "keys");
	add_public_keys(j, core_home(b->core), "keys/trusted");
	if (with_audit_key) {
		free(path);
		path = kn_asprintf("%s/audit.key", core_home(b->core));
		job_add_part(j, "audit.key", path, true);
	}
	run = run_new(b);
	kn_strlcpy(run->name, j->name, sizeof(run->name));
	run->url = kn_asprintf("%.*s/" BACKUP_PREFIX "%s/",
			       (int)kn_url_base_len(kn_blob_store_url(j->store)),
			       kn_blob_store_url(j->store), j->name);
	run->actor = kn_xstrdup(actor);
	run->state = RUN_RUNNING;
	run->with_audit_key = with_audit_key;
	run->started_at = j->created_ms;
	j->run = run;
	free(path);
	if (out)
		*out = run;
	kn_workers_submit(core_workers(b->core), job_work, job_done, j);
	return 0;
fail:
	free(path);
	job_free(j);
	return rc;
}

static void on_schedule(void *arg)
{
	struct backup_state *b = arg;
	struct backup_run *run = NULL;
	struct kn_error err;

	kn_timer_arm(b->timer, b->cfg->backup_every_ms);
	if (b->scheduled_busy) {
		kn_log(KN_LOG_WARN, "scheduled backup skipped: the last one is"
		       " still running");
		return;
	}
	if (backup_start(b, "system", NULL, b->cfg->backup_with_audit_key,
			 (size_t)b->cfg->backup_keep, &run, &err) < 0) {
		struct backup_run failed;

		memset(&failed, 0, sizeof(failed));
		kn_format_time_basic(kn_now_ms(), failed.name,
				     sizeof(failed.name));
		failed.actor = "system";
		failed.url = (char *)(b->cfg->backup_to
					      ? b->cfg->backup_to
					      : core_blob_url(b->core));
		failed.started_at = kn_now_ms();
		kn_strlcpy(failed.error, err.message, sizeof(failed.error));
		kn_log(KN_LOG_ERROR, "scheduled backup failed: %s",
		       err.message);
		audit_backup(b, &failed, "backup.create", "error", err.message);
		backup_alert(b, &failed, true);
		return;
	}
	b->scheduled_busy = true;
}

/* Check --backup-every, --backup-keep and --backup-to. */
static int backup_config_check(const struct kn_server_config *cfg,
			struct kn_error *err)
{
	if (cfg->backup_every_ms < 0)
		return kn_errorf(err, KN_EINVAL, "backup-every",
				 "--backup-every must be a positive duration");
	if (cfg->backup_every_ms > 0 && cfg->backup_keep < 1)
		return kn_errorf(err, KN_EINVAL, "backup-keep",
				 "--backup-keep must be at least 1");
	/* A store's name is checked with the stores, at start. */
	if (cfg->backup_to && strstr(cfg->backup_to, "://")) {
		struct kn_blob_store_config bc = {.url = cfg->backup_to,
						  .use_env = true};
		struct kn_blob_store *probe = NULL;
		int rc = kn_blob_store_open(&bc, &probe, err);

		kn_blob_store_free(probe);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* Set up (and with --backup-every, arm) the backups. */
static int backups_start(struct server *core, struct kn_error *err)
{
	struct backup_state *b = kn_xcalloc(1, sizeof(*b));

	(void)err;
	b->core = core;
	b->cfg = core_config(core);
	service_state_set(core, &backup_service, b);
	if (b->cfg->backup_every_ms > 0) {
		b->timer = kn_timer_new(core_loop(core), on_schedule, b);
		kn_timer_arm(b->timer, b->cfg->backup_every_ms);
		kn_log(KN_LOG_INFO, "backups every %" PRId64 " ms to %s,"
		       " keeping %d", b->cfg->backup_every_ms,
		       b->cfg->backup_to ? b->cfg->backup_to
					 : core_blob_url(core),
		       b->cfg->backup_keep);
	}
	return 0;
}

/* After the worker pool is freed: its done callbacks use the state. */
static void backup_free(struct server *core)
{
	struct backup_state *b = service_state(core, &backup_service);

	if (!b)
		return;
	kn_timer_free(b->timer);
	for (size_t i = 0; i < BACKUP_RUNS_KEPT; i++) {
		KN_FREE_ALL(b->runs[i].url, b->runs[i].actor);
	}
	free(b);
}

static json_t *run_json(const struct backup_run *run)
{
	json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:b, s:I, s:I, s:I, s:I, "
			      "s:I}",
			      "name", run->name, "url", run->url, "actor",
			      run->actor, "state", RUN_STATE_NAMES[run->state],
			      "with_audit_key", run->with_audit_key, "parts",
			      (json_int_t)run->parts, "bytes",
			      (json_int_t)run->bytes, "pruned",
			      (json_int_t)run->pruned, "started_at_ms",
			      (json_int_t)run->started_at, "ended_at_ms",
			      (json_int_t)run->ended_at);

	json_object_set_new(o, "error", run->state == RUN_FAILED
						? json_string(run->error)
						: json_null());
	return o;
}

static void backup_h_create(struct server *core, struct kn_http_req *req,
			    const struct caller *c, const char *param)
{
	struct backup_state *b = service_state(core, &backup_service);
	struct backup_run *run = NULL;
	struct kn_error err;
	size_t len;
	const char *text = kn_http_body(req, &len);
	json_t *body = len ? json_loadb(text, len, 0, NULL) : json_object();
	json_t *to, *with_key;
	int rc = 0;

	(void)param;
	to = json_object_get(body, "to");
	with_key = json_object_get(body, "with_audit_key");
	if (!json_is_object(body))
		rc = kn_errorf(&err, KN_EINVAL, NULL,
			       "body must be a JSON object {\"to\": URL,"
			       " \"with_audit_key\": bool} (both optional)");
	else if (to && !json_is_null(to) && !json_is_string(to))
		rc = kn_errorf(&err, KN_EINVAL, "to",
			       "to must be a store URL");
	else if (with_key && !json_is_boolean(with_key))
		rc = kn_errorf(&err, KN_EINVAL, "with_audit_key",
			       "with_audit_key must be true or false");
	if (rc == 0)
		rc = backup_start(b, c->name, json_string_value(to),
				  json_is_true(with_key), 0, &run, &err);
	if (rc < 0) {
		struct backup_run failed;

		memset(&failed, 0, sizeof(failed));
		kn_format_time_basic(kn_now_ms(), failed.name,
				     sizeof(failed.name));
		failed.actor = (char *)c->name;
		audit_backup(b, &failed, "backup.create", "error", err.message);
		kn_http_reply_error(req, &err);
	} else {
		kn_http_reply_json(req, 202,
				   json_pack("{s:o}", "backup", run_json(run)));
	}
	json_decref(body);
}

static void backup_h_list(struct server *core, struct kn_http_req *req,
			  const struct caller *c, const char *param)
{
	struct backup_state *b = service_state(core, &backup_service);
	json_t *list = json_array();

	(void)c;
	(void)param;
	/* Oldest first. */
	for (size_t i = 0; i < b->n_runs; i++) {
		size_t k = (b->next + BACKUP_RUNS_KEPT - b->n_runs + i) %
			   BACKUP_RUNS_KEPT;
		json_array_append_new(list, run_json(&b->runs[k]));
	}
	kn_http_reply_json(
		req, 200,
		json_pack("{s:s, s:o, s:o}", "store",
			  b->cfg->backup_to ? b->cfg->backup_to
					    : core_blob_url(core),
			  "schedule",
			  b->cfg->backup_every_ms > 0
				  ? json_pack("{s:I, s:i, s:b}", "every_ms",
					      (json_int_t)b->cfg->backup_every_ms,
					      "keep", b->cfg->backup_keep,
					      "with_audit_key",
					      b->cfg->backup_with_audit_key)
				  : json_null(),
			  "runs", list));
}

static void backup_h_get(struct server *core, struct kn_http_req *req,
			 const struct caller *c, const char *param)
{
	struct backup_state *b = service_state(core, &backup_service);
	struct kn_error err;

	(void)c;
	for (size_t i = 0; i < b->n_runs; i++)
		if (!strcmp(b->runs[i].name, param)) {
			kn_http_reply_json(req, 200,
					   json_pack("{s:o}", "backup",
						     run_json(&b->runs[i])));
			return;
		}
	kn_errorf(&err, KN_ENOTFOUND, NULL,
		  "no backup %s among this server's last %d runs (kiln backup"
		  " ls lists the store)",
		  param, BACKUP_RUNS_KEPT);
	kn_http_reply_error(req, &err);
}

static const struct route routes[] = {
	{"POST", "/v1/backups", KN_ROLE_ADMIN, false, "backup.create",
	 backup_h_create},
	{"GET", "/v1/backups", KN_ROLE_ADMIN, false, "backup.list",
	 backup_h_list},
	{"GET", "/v1/backups/{name}", KN_ROLE_ADMIN, false, "backup.list",
	 backup_h_get},
	{0},
};

const struct service backup_service = {
	.name = "backups",
	.phase = SERVICE_PHASE_LOOP,
	.config_check = backup_config_check,
	.start = backups_start,
	.stop = backup_free,
	.routes = routes,
};
