/*
 * Checkpoints on top of a blob store.
 *
 * Layout: JOB/checkpoints/NAME/<files> and JOB/checkpoints/NAME/MANIFEST.json,
 * JOB/outputs/<files> and JOB/outputs/MANIFEST.json.
 *
 * Invariants: the manifest is written last (create-only, so two uploaders
 * of one checkpoint cannot both claim it) and deleted first; restore
 * trusts nothing it has not verified (size and sha256 of every file, read
 * back in one pass) and builds the result under NAME.partial, renaming it
 * only when complete. Store writes never expose half a file (each backend
 * guarantees that), so a crash at any point leaves either no manifest
 * (the checkpoint does not exist and the next upload redoes it) or a
 * complete checkpoint.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/internal.h"

/* Manifests are small; this bounds what a corrupt one makes us read. */
#define MANIFEST_MAX_BYTES (16u << 20)

static int check_part(const char *value, const char *field,
		      struct kn_error *err)
{
	if (!value || !*value || strchr(value, '/') || strcmp(value, ".") == 0 ||
	    strcmp(value, "..") == 0)
		return kn_errorf(err, KN_EINVAL, field,
				 "%s: must be a non-empty name without '/'",
				 field);
	return 0;
}

/* ---- local directory walk ---- */

static int walk_local(const char *root, const char *rel,
		      struct kn_ckpt_manifest *m, struct kn_error *err)
{
	int fd = kn_task_file_open(root, *rel ? rel : ".",
				   O_RDONLY | O_DIRECTORY, KN_ANY_OWNER, err);
	DIR *d = fd < 0 ? NULL : fdopendir(fd);
	struct dirent *e;
	int rc = 0;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return fd < 0 ? fd : -ENOMEM;
	}
	while (rc == 0 && (e = readdir(d))) {
		struct stat st;
		char *name;

		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		name = *rel ? kn_asprintf("%s/%s", rel, e->d_name)
			    : kn_xstrdup(e->d_name);
		/* Never followed: a link could reach any file the server can
		   read. Such a checkpoint is refused whole, since one without
		   the file would restore as something the task never wrote. */
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			rc = kn_errorf(err, KN_EIO, "dir", "%s/%s: %s", root,
				       name, strerror(errno));
		else if (S_ISDIR(st.st_mode))
			rc = walk_local(root, name, m, err);
		else if (!S_ISREG(st.st_mode))
			rc = kn_errorf(err, KN_EPERM, KN_TASK_FILE_REFUSED,
				       "%s/%s is %s: a checkpoint holds only "
				       "regular files and directories",
				       root, name, kn_file_kind(st.st_mode));
		else if (strcmp(name, KN_CKPT_MANIFEST) == 0)
			rc = kn_errorf(err, KN_EINVAL, "dir",
				       "%s/%s: the name is reserved for kiln's "
				       "manifest", root, name);
		else {
			m->files = kn_xrealloc(m->files,
					       (m->n + 1) * sizeof(m->files[0]));
			memset(&m->files[m->n], 0, sizeof(m->files[0]));
			m->files[m->n].path = name;
			name = NULL;
			m->n++;
		}
		free(name);
	}
	closedir(d);
	return rc;
}

static int file_cmp(const void *a, const void *b)
{
	const struct kn_ckpt_file *x = a, *y = b;
	return strcmp(x->path, y->path);
}

/* kn_blob_for_each_file's shared state. */
struct each {
	int (*fn)(void *ctx, size_t i, struct kn_error *err);
	void *ctx;
	size_t n, next;
	pthread_mutex_t mu;
	int rc;
	struct kn_error err;
};

static void *each_worker(void *arg)
{
	struct each *e = arg;

	for (;;) {
		struct kn_error ferr = {0};
		size_t i;
		int rc;

		pthread_mutex_lock(&e->mu);
		if (e->rc < 0 || e->next >= e->n) {
			pthread_mutex_unlock(&e->mu);
			return NULL;
		}
		i = e->next++;
		pthread_mutex_unlock(&e->mu);
		rc = e->fn(e->ctx, i, &ferr);
		if (rc < 0) {
			pthread_mutex_lock(&e->mu);
			if (e->rc == 0) {
				e->rc = rc;
				e->err = ferr;
			}
			pthread_mutex_unlock(&e->mu);
		}
	}
}

int kn_blob_for_each_file(struct kn_blob_store *s, size_t n,
			  int (*fn)(void *ctx, size_t i, struct kn_error *err),
			  void *ctx, struct kn_error *err)
{
	struct each e = {.fn = fn, .ctx = ctx, .n = n};
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int workers = s->ops->concurrency;

	if (s->files_in_flight > 0 && workers > s->files_in_flight)
		workers = s->files_in_flight;
	if (cpus > 0 && workers > cpus)
		workers = (int)cpus;
	if ((size_t)workers > n)
		workers = (int)n;
	pthread_mutex_init(&e.mu, NULL);
	kn_run_threads(workers, each_worker, &e);
	pthread_mutex_destroy(&e.mu);
	if (e.rc < 0 && err)
		*err = e.err;
	return e.rc;
}

/* ---- files sent before the commit ---- */

/* What identifies one version of a file without reading it. */
struct file_id {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime, ctime;
};

struct sent_file {
	char *name, *path;
	struct file_id id;
	char sha256[KN_SHA256_HEX_LEN + 1];
};

struct kn_ckpt_sent {
	struct sent_file *files;
	size_t n;
	char **complete; /* names with a manifest in the store: not streamed */
	size_t ncomplete;
	char **checked;  /* names without one, when first streamed */
	size_t nchecked;
	size_t reused;
};

static int file_id_of(const char *path, struct file_id *id)
{
	struct stat st;

	if (lstat(path, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	*id = (struct file_id){st.st_dev, st.st_ino, st.st_size, st.st_mtim,
			       st.st_ctim};
	return 0;
}

static bool file_id_equal(const struct file_id *a, const struct file_id *b)
{
	return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
	       a->mtime.tv_sec == b->mtime.tv_sec &&
	       a->mtime.tv_nsec == b->mtime.tv_nsec &&
	       a->ctime.tv_sec == b->ctime.tv_sec &&
	       a->ctime.tv_nsec == b->ctime.tv_nsec;
}

struct kn_ckpt_sent *kn_ckpt_sent_new(void)
{
	return kn_xcalloc(1, sizeof(struct kn_ckpt_sent));
}

static bool has_name(char **names, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(names[i], name) == 0)
			return true;
	return false;
}

static void add_name(char ***names, size_t *n, const char *name)
{
	*names = kn_xrealloc(*names, (*n + 1) * sizeof(**names));
	(*names)[(*n)++] = kn_xstrdup(name);
}

/* Forget a checkpoint once its upload is done. */
static void sent_forget(struct kn_ckpt_sent *sent, const char *name)
{
	for (size_t i = sent->n; i-- > 0;)
		if (strcmp(sent->files[i].name, name) == 0) {
			KN_FREE_ALL(sent->files[i].name, sent->files[i].path);
			sent->files[i] = sent->files[--sent->n];
		}
	for (size_t i = sent->nchecked; i-- > 0;)
		if (strcmp(sent->checked[i], name) == 0) {
			free(sent->checked[i]);
			sent->checked[i] = sent->checked[--sent->nchecked];
		}
}

void kn_ckpt_sent_free(struct kn_ckpt_sent *sent)
{
	if (!sent)
		return;
	for (size_t i = 0; i < sent->n; i++) {
		KN_FREE_ALL(sent->files[i].name, sent->files[i].path);
	}
	free(sent->files);
	kn_strv_free_n(sent->complete, sent->ncomplete);
	kn_strv_free_n(sent->checked, sent->nchecked);
	free(sent);
}

size_t kn_ckpt_sent_reused(const struct kn_ckpt_sent *sent)
{
	return sent->reused;
}

int64_t kn_ckpt_sent_bytes(const struct kn_ckpt_sent *sent, const char *name)
{
	int64_t bytes = 0;

	for (size_t i = 0; sent && i < sent->n; i++)
		if (!strcmp(sent->files[i].name, name))
			bytes += sent->files[i].id.size;
	return bytes;
}

static struct sent_file *sent_find(const struct kn_ckpt_sent *sent,
				   const char *name, const char *path)
{
	for (size_t i = 0; sent && i < sent->n; i++)
		if (strcmp(sent->files[i].name, name) == 0 &&
		    strcmp(sent->files[i].path, path) == 0)
			return &sent->files[i];
	return NULL;
}

struct tree {
	struct kn_blob_store *s;
	const char *prefix, *dir; /* blob prefix, local directory */
	struct kn_ckpt_manifest *m;
	const struct kn_ckpt_sent *sent; /* NULL, or files sent already */
	bool *reused;                     /* with sent: per file */
};

/*
 * A file sent before the commit and unchanged since, whose blob is still
 * there: its digest is the one taken as it went.
 */
static bool reuse_sent(struct tree *t, size_t i)
{
	struct kn_ckpt_file *f = &t->m->files[i];
	const struct sent_file *sf = sent_find(t->sent, t->m->name, f->path);
	char *local, *blob;
	struct kn_blob_info info = {0};
	struct kn_error ignored;
	struct file_id now;
	bool same;

	if (!sf)
		return false;
	local = kn_asprintf("%s/%s", t->dir, f->path);
	blob = kn_asprintf("%s%s", t->prefix, f->path);
	same = file_id_of(local, &now) == 0 && file_id_equal(&now, &sf->id) &&
	       kn_blob_stat(t->s, blob, &info, &ignored) == 0 &&
	       info.size == (int64_t)sf->id.size;
	KN_FREE_ALL(info.name, local, blob);
	if (same) {
		memcpy(f->sha256, sf->sha256, sizeof(f->sha256));
		f->size = (int64_t)sf->id.size;
	}
	return same;
}

/*
 * Upload root/rel, a file the task wrote: opened beneath root without
 * following links and handed to the store as /proc/self/fd/N, so the
 * store reads the very file checked, whatever is renamed meanwhile.
 */
static int put_task_file(struct kn_blob_store *s, const char *blob,
			 const char *root, const char *rel, char *sha256_hex,
			 int64_t *size, struct kn_error *err)
{
	char proc[64];
	int fd = kn_task_file_open(root, rel, O_RDONLY, KN_ANY_OWNER, err);
	int rc;

	if (fd < 0)
		return fd;
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	rc = kn_blob_put_file(s, blob, proc, 0, sha256_hex, size, err);
	close(fd);
	return rc;
}

static int put_one(void *ctx, size_t i, struct kn_error *err)
{
	struct tree *t = ctx;
	struct kn_ckpt_file *f = &t->m->files[i];
	char *blob;
	int rc;

	if (t->sent && reuse_sent(t, i)) {
		t->reused[i] = true;
		return 0;
	}
	blob = kn_asprintf("%s%s", t->prefix, f->path);
	rc = put_task_file(t->s, blob, t->dir, f->path, f->sha256, &f->size,
			   err);
	free(blob);
	return rc;
}

/* Download file i and check it against the manifest. */
static int get_one(void *ctx, size_t i, struct kn_error *err)
{
	struct tree *t = ctx;
	const struct kn_ckpt_file *f = &t->m->files[i];
	char *blob = kn_asprintf("%s%s", t->prefix, f->path);
	char *local = kn_asprintf("%s/%s", t->dir, f->path);
	char sha[KN_SHA256_HEX_LEN + 1];
	struct stat st;
	int rc;

	rc = kn_blob_get_file(t->s, blob, local, 0, -1, sha, err);
	if (rc < 0)
		rc = kn_errorf(err, err->code, NULL, "%s: %s", f->path,
			       err->message[0] ? err->message : strerror(-rc));
	else if (stat(local, &st) < 0 || st.st_size != f->size)
		rc = kn_errorf(err, KN_EIO, NULL,
			       "%s: size differs from the manifest's %lld",
			       f->path, (long long)f->size);
	else if (strcmp(sha, f->sha256) != 0)
		rc = kn_errorf(err, KN_EIO, NULL,
			       "%s: sha256 %s does not match the manifest's %s",
			       f->path, sha, f->sha256);
	KN_FREE_ALL(blob, local);
	return rc;
}

/*
 * Upload every file under dir to PREFIX/<path>, then the manifest to
 * PREFIX/MANIFEST.json (create-only). -EEXIST from the manifest means
 * another upload finished first: the checkpoint exists, which is success.
 */
static int upload_tree(struct kn_blob_store *s, const char *prefix,
		       const char *dir, const char *name,
		       struct kn_ckpt_sent *sent,
		       struct kn_ckpt_manifest *out, struct kn_error *err)
{
	struct kn_ckpt_manifest m = {0};
	char *json = NULL, *blob = NULL;
	bool *reused = NULL;
	int rc;

	m.name = kn_xstrdup(name);
	m.created_ms = kn_now_ms();
	rc = walk_local(dir, "", &m, err);
	if (rc < 0)
		goto out;
	if (m.n > 1)
		qsort(m.files, m.n, sizeof(m.files[0]), file_cmp);
	if (sent) {
		reused = kn_xcalloc(m.n + 1, sizeof(reused[0]));
		sent->reused = 0;
	}
	rc = kn_blob_for_each_file(s, m.n, put_one,
				   &(struct tree){.s = s, .prefix = prefix,
						  .dir = dir, .m = &m,
						  .sent = sent,
						  .reused = reused},
				   err);
	for (size_t i = 0; reused && i < m.n; i++)
		sent->reused += reused[i];
	if (rc < 0)
		goto out;
	json = kn_ckpt_manifest_to_json(&m);
	blob = kn_asprintf("%s" KN_CKPT_MANIFEST, prefix);
	rc = kn_blob_put_bytes(s, blob, json, strlen(json), KN_BLOB_CREATE_ONLY,
			       err);
	if (rc == -EEXIST)
		rc = 0;
	if (rc == 0 && out) {
		*out = m;
		memset(&m, 0, sizeof(m));
	}
out:
	KN_FREE_ALL(reused, json, blob);
	kn_ckpt_manifest_release(&m);
	return rc;
}

static int read_manifest(struct kn_blob_store *s, const char *blob,
			 struct kn_ckpt_manifest *out, struct kn_error *err)
{
	char *text = NULL;
	size_t len = 0;
	int rc = kn_blob_get_bytes(s, blob, MANIFEST_MAX_BYTES, &text, &len,
				   err);
	if (rc < 0)
		return rc;
	rc = kn_ckpt_manifest_parse(text, len, blob, out, err);
	free(text);
	return rc;
}

int kn_ckpt_upload(struct kn_blob_store *store, const char *job,
		   const char *dir, struct kn_ckpt_sent *sent,
		   struct kn_ckpt_manifest *manifest_out, struct kn_error *err)
{
	const char *slash;
	char *name, *prefix, *mblob;
	struct kn_blob_info info;
	int rc;

	rc = check_part(job, "job", err);
	if (rc < 0)
		return rc;
	slash = strrchr(dir, '/');
	name = kn_xstrdup(slash ? slash + 1 : dir);
	rc = check_part(name, "dir", err);
	if (rc < 0) {
		free(name);
		return rc;
	}
	prefix = kn_asprintf("%s/checkpoints/%s/", job, name);
	mblob = kn_asprintf("%s" KN_CKPT_MANIFEST, prefix);
	rc = kn_blob_stat(store, mblob, &info, err);
	if (rc == 0) {
		/* Already complete: a re-run after a crash sends nothing. */
		rc = manifest_out ? read_manifest(store, mblob, manifest_out, err)
				  : 0;
		goto out;
	}
	if (rc != -ENOENT)
		goto out;
	rc = upload_tree(store, prefix, dir, name, sent, manifest_out, err);
out:
	if (rc == 0 && sent)
		sent_forget(sent, name);
	KN_FREE_ALL(mblob, prefix, name);
	return rc;
}

int kn_ckpt_upload_early(struct kn_blob_store *store, const char *job,
			 const char *dir, const char *name, const char *path,
			 struct kn_ckpt_sent *sent, struct kn_error *err)
{
	char *prefix = NULL, *local = NULL, *committed = NULL, *blob = NULL;
	char *tmp_rel = NULL;
	struct sent_file *sf;
	struct file_id before, after;
	char sha[KN_SHA256_HEX_LEN + 1];
	int64_t size = 0;
	int rc;

	if ((rc = check_part(job, "job", err)) < 0 ||
	    (rc = check_part(name, "name", err)) < 0 ||
	    (rc = kn_blob_check_name(path, "path", err)) < 0)
		return rc;
	if (has_name(sent->complete, sent->ncomplete, name) ||
	    strcmp(path, KN_CKPT_MANIFEST) == 0)
		return 0;
	prefix = kn_asprintf("%s/checkpoints/%s/", job, name);
	local = kn_asprintf("%s/%s.tmp/%s", dir, name, path);
	committed = kn_asprintf("%s/%s/%s", dir, name, path);
	if (file_id_of(local, &before) < 0)
		goto out; /* committed, dropped or not a file: the commit sends */
	sf = sent_find(sent, name, path);
	if (sf && file_id_equal(&sf->id, &before))
		goto out;
	if (!has_name(sent->checked, sent->nchecked, name)) {
		struct kn_blob_info info = {0};

		/* A checkpoint of this name is complete in the store already
		   (an earlier attempt's): its files are not to be replaced. */
		blob = kn_asprintf("%s" KN_CKPT_MANIFEST, prefix);
		rc = kn_blob_stat(store, blob, &info, err);
		KN_FREE_ALL(info.name, blob);
		if (rc == 0) {
			add_name(&sent->complete, &sent->ncomplete, name);
			goto out;
		}
		if (rc != -ENOENT)
			goto out;
		add_name(&sent->checked, &sent->nchecked, name);
	}
	blob = kn_asprintf("%s%s", prefix, path);
	tmp_rel = kn_asprintf("%s.tmp/%s", name, path);
	rc = put_task_file(store, blob, dir, tmp_rel, sha, &size, err);
	free(blob);
	if (rc == -ENOENT) { /* committed or dropped while it went */
		rc = 0;
		goto out;
	}
	if (rc < 0)
		goto out;
	/* The commit may have renamed the directory meanwhile. */
	if ((file_id_of(local, &after) < 0 &&
	     file_id_of(committed, &after) < 0) ||
	    !file_id_equal(&before, &after) || size != (int64_t)before.size)
		goto out;
	if (!sf) {
		sent->files = kn_xrealloc(sent->files,
					  (sent->n + 1) * sizeof(sent->files[0]));
		sf = &sent->files[sent->n++];
		sf->name = kn_xstrdup(name);
		sf->path = kn_xstrdup(path);
	}
	sf->id = before;
	memcpy(sf->sha256, sha, sizeof(sf->sha256));
out:
	KN_FREE_ALL(prefix, local, tmp_rel, committed);
	return rc;
}

int kn_ckpt_upload_outputs(struct kn_blob_store *store, const char *job,
			   const char *dir, struct kn_ckpt_manifest *out,
			   struct kn_error *err)
{
	char *prefix, *mblob;
	int rc = check_part(job, "job", err);
	if (rc < 0)
		return rc;
	prefix = kn_asprintf("%s/outputs/", job);
	mblob = kn_asprintf("%s" KN_CKPT_MANIFEST, prefix);
	/* Outputs are written once per job, when it succeeds; a repeat (a
	 * server restarted mid-upload) replaces an earlier partial record. */
	rc = kn_blob_delete(store, mblob, err);
	if (rc == 0 || rc == -ENOENT)
		rc = upload_tree(store, prefix, dir, "outputs", NULL, out, err);
	KN_FREE_ALL(mblob, prefix);
	return rc;
}

/* ---- listing ---- */

static int entry_newest_first(const void *a, const void *b)
{
	const struct kn_ckpt_entry *x = a, *y = b;
	return strverscmp(y->name, x->name);
}

void kn_ckpt_list_release(struct kn_ckpt_list *list)
{
	if (list)
		KN_ROWS_RELEASE(list->items, list->n, name);
}

int kn_ckpt_list(struct kn_blob_store *store, const char *job,
		 struct kn_ckpt_list *out, struct kn_error *err)
{
	struct kn_blob_list blobs = {0};
	struct kn_ckpt_list list = {0};
	char *prefix;
	size_t plen;
	int rc = check_part(job, "job", err);

	if (rc < 0)
		return rc;
	prefix = kn_asprintf("%s/checkpoints/", job);
	plen = strlen(prefix);
	rc = kn_blob_list(store, prefix, &blobs, err);
	if (rc < 0)
		goto out;
	/* Blobs come sorted by name, so one checkpoint's files are adjacent. */
	for (size_t i = 0; i < blobs.n; i++) {
		const char *rest = blobs.items[i].name + plen;
		const char *slash = strchr(rest, '/');
		size_t nlen;
		struct kn_ckpt_entry *last;

		if (!slash)
			continue;
		nlen = (size_t)(slash - rest);
		last = list.n ? &list.items[list.n - 1] : NULL;
		if (!last || strlen(last->name) != nlen ||
		    strncmp(last->name, rest, nlen) != 0) {
			list.items = kn_xrealloc(list.items, (list.n + 1) *
							     sizeof(list.items[0]));
			last = &list.items[list.n++];
			last->name = strndup(rest, nlen);
			if (!last->name)
				abort();
			last->complete = false;
		}
		if (strcmp(slash + 1, KN_CKPT_MANIFEST) == 0)
			last->complete = true;
	}
	if (list.n > 1)
		qsort(list.items, list.n, sizeof(list.items[0]),
		      entry_newest_first);
	*out = list;
	memset(&list, 0, sizeof(list));
out:
	kn_ckpt_list_release(&list);
	kn_blob_list_release(&blobs);
	free(prefix);
	return rc;
}

/* ---- restore ---- */

static void warn(char **warnings, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void warn(char **warnings, const char *name, const char *fmt, ...)
{
	char reason[1024];
	char *joined;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	joined = kn_asprintf("%scheckpoint %s skipped: %s\n",
			     *warnings ? *warnings : "", name, reason);
	free(*warnings);
	*warnings = joined;
}

int kn_ckpt_restore(struct kn_blob_store *store, const char *job,
		    const char *dest_parent, char **name_out, char **warnings,
		    struct kn_error *err)
{
	struct kn_ckpt_list list = {0};
	char *found = NULL;
	int rc;

	*warnings = NULL;
	rc = kn_ckpt_list(store, job, &list, err);
	if (rc < 0)
		return rc;
	rc = kn_mkdir_p(dest_parent, 0755);
	if (rc < 0) {
		rc = kn_errorf(err, KN_EIO, "dest", "%s: %s", dest_parent,
			       strerror(-rc));
		goto out;
	}
	for (size_t i = 0; i < list.n && !found; i++) {
		const char *name = list.items[i].name;
		struct kn_ckpt_manifest m = {0};
		struct kn_error merr = {0};
		char *prefix, *mblob, *partial, *final;

		if (!list.items[i].complete) {
			warn(warnings, name, "no %s (upload incomplete)",
			     KN_CKPT_MANIFEST);
			continue;
		}
		prefix = kn_asprintf("%s/checkpoints/%s/", job, name);
		mblob = kn_asprintf("%s" KN_CKPT_MANIFEST, prefix);
		partial = kn_asprintf("%s/%s.partial", dest_parent, name);
		final = kn_asprintf("%s/%s", dest_parent, name);
		kn_rm_rf(partial);
		if (read_manifest(store, mblob, &m, &merr) < 0)
			warn(warnings, name, "%s", merr.message);
		else if (strcmp(m.name, name) != 0)
			warn(warnings, name, "its manifest names \"%s\"",
			     m.name);
		else if (kn_mkdir_p(partial, 0755) < 0)
			warn(warnings, name, "%s: cannot create", partial);
		else if (kn_blob_for_each_file(
				 store, m.n, get_one,
				 &(struct tree){.s = store, .prefix = prefix,
						.dir = partial, .m = &m},
				 &merr) < 0)
			warn(warnings, name, "%s", merr.message);
		else if (rename(partial, final) < 0)
			rc = kn_errorf(err, KN_EIO, "dest", "%s: %s", final,
				       strerror(errno));
		else
			found = kn_xstrdup(name);
		if (!found)
			kn_rm_rf(partial);
		kn_ckpt_manifest_release(&m);
		KN_FREE_ALL(prefix, mblob, partial, final);
		if (rc < 0)
			goto out;
	}
	if (!found) {
		rc = kn_errorf(err, KN_ENOTFOUND, "job",
			       "job %s: no checkpoint verifies", job);
		goto out;
	}
	*name_out = found;
out:
	kn_ckpt_list_release(&list);
	return rc;
}

/* ---- retention ---- */

static int delete_checkpoint(struct kn_blob_store *s, const char *job,
			     const char *name, struct kn_error *err)
{
	struct kn_blob_list blobs = {0};
	char *prefix = kn_asprintf("%s/checkpoints/%s/", job, name);
	char *mblob = kn_asprintf("%s" KN_CKPT_MANIFEST, prefix);
	int rc = kn_blob_delete(s, mblob, err);

	if (rc == -ENOENT)
		rc = 0;
	if (rc == 0)
		rc = kn_blob_list(s, prefix, &blobs, err);
	for (size_t i = 0; rc == 0 && i < blobs.n; i++) {
		rc = kn_blob_delete(s, blobs.items[i].name, err);
		if (rc == -ENOENT)
			rc = 0;
	}
	kn_blob_list_release(&blobs);
	KN_FREE_ALL(mblob, prefix);
	return rc;
}

int kn_ckpt_prune(struct kn_blob_store *store, const char *job, size_t keep,
		  size_t *deleted, struct kn_error *err)
{
	struct kn_ckpt_list list = {0};
	size_t complete = 0, gone = 0, to_drop = 0;
	bool *drop = NULL;
	int rc = kn_ckpt_list(store, job, &list, err);

	if (rc < 0)
		return rc;
	drop = kn_xcalloc(list.n + 1, sizeof(drop[0]));
	for (size_t i = 0; i < list.n; i++) {
		if (list.items[i].complete)
			drop[i] = ++complete > keep;
		else /* an upload cut short, unless it is still going on */
			drop[i] = complete >= keep && complete > 0;
		to_drop += drop[i];
	}
	/* The kept checkpoints must be durable before older ones go (and
	   when none goes, there is nothing to wait for). */
	if (to_drop > 0)
		rc = kn_blob_sync(store, err);
	for (size_t i = 0; i < list.n && rc == 0; i++) {
		if (drop[i]) {
			rc = delete_checkpoint(store, job, list.items[i].name,
					       err);
			gone += rc == 0;
		}
	}
	free(drop);
	kn_ckpt_list_release(&list);
	if (rc == 0 && deleted)
		*deleted = gone;
	return rc;
}
