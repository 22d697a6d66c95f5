/*
 * ckpt: checkpoint sync, and the blob stores it writes to.
 *
 * Blob stores sit behind one ops table (like curl's vtls backends): a
 * local directory (file:///path, the default $KILN_HOME/blobs) and Azure
 * Blob Storage (https://ACCOUNT.blob.core.windows.net/CONTAINER[/PREFIX],
 * or any endpoint in path style such as Azurite's
 * http://127.0.0.1:10000/devstoreaccount1/CONTAINER[/PREFIX]). Blob names
 * are relative to the store's prefix and use '/' as separator.
 *
 * Every function here blocks: the server runs them on worker threads, never
 * on its event loop. A store is used by one thread at a time (it owns
 * reusable I/O buffers); open one per worker.
 *
 * Checkpoints follow DESIGN.md's contract: a checkpoint lives under
 * JOB/checkpoints/NAME/ and exists only once its MANIFEST.json (every file,
 * its size and sha256) is there; the manifest is written last and deleted
 * first, so an interrupted upload or prune never leaves one that looks
 * complete. Checkpoint names order by strverscmp (step-9 < step-10), newest
 * last, so tasks should name them by step.
 *
 * Secrets (account keys, SAS signatures) never appear in error messages.
 */
#ifndef KILN_CKPT_H
#define KILN_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

#define KN_SHA256_HEX_LEN 64
#define KN_CKPT_MANIFEST "MANIFEST.json"

/* The sha256 of len bytes at data, as lowercase hex. */
void kn_sha256_hex(const void *data, size_t len,
		   char hex[KN_SHA256_HEX_LEN + 1]);

/* ---- blob stores ---- */

struct kn_blob_store;

/*
 * How to open a store. Only url is required; NULL fields fall back to the
 * environment when use_env is set (AZURE_STORAGE_CONNECTION_STRING, then
 * AZURE_STORAGE_ACCOUNT + AZURE_STORAGE_KEY / AZURE_STORAGE_SAS_TOKEN).
 * An explicit field always wins over the environment.
 */
struct kn_blob_store_config {
	const char *url;               /* file:///dir, https://..., http://... */
	const char *account_key;       /* base64 Shared Key */
	const char *sas_token;         /* "sv=...&sig=..." (leading '?' ok) */
	const char *connection_string; /* AccountName=...;AccountKey=...;... */
	const char *api_version;       /* x-ms-version; NULL = 2023-11-03 */
	bool use_env;
	/* No credential at all is fine: requests go unsigned (a public
	   container, or a SAS the URL itself carries). */
	bool anonymous;
	size_t block_size;   /* Put Block size; 0 = 8 MiB */
	/* Files up to this size go in one Put Blob, larger ones in blocks;
	   0 = 64 MiB, the Azure SDKs' max_single_put_size. */
	size_t single_put_max;
	int parallel;        /* blocks (put) or ranges (get) in flight; 0 = 6 */
	int max_retries;     /* transient failures retried; 0 = 5, <0 = none */
	int files_in_flight; /* files copied at once by checkpoint calls;
				0 = the backend's default (file: up to 4) */
	int64_t retry_base_ms; /* first backoff, doubled each time; 0 = 200 */
	/* file://: what it writes is for the server's user alone (files
	   0600 in 0700 directories), as backups holding the database are. */
	bool private_files;
};

#define KN_BLOB_DEFAULT_API_VERSION "2023-11-03"

/*
 * Open a store. No network traffic happens here; bad URLs, bad keys and
 * missing credentials are reported now, naming the field. *out is owned
 * by the caller (kn_blob_store_free).
 */
int kn_blob_store_open(const struct kn_blob_store_config *cfg,
		       struct kn_blob_store **out, struct kn_error *err);
void kn_blob_store_free(struct kn_blob_store *store);
/* The store's URL without credentials, for logs and the API. */
const char *kn_blob_store_url(const struct kn_blob_store *store);
/* "file:///HOME/blobs" for a kiln home; malloc'd. */
char *kn_blob_default_url(const char *kiln_home);

struct kn_blob_info {
	char *name;      /* relative to the store's prefix; malloc'd */
	int64_t size;
};

struct kn_blob_list {
	struct kn_blob_info *items; /* sorted by name */
	size_t n;
};
void kn_blob_list_release(struct kn_blob_list *list);

/* Put flags. */
#define KN_BLOB_CREATE_ONLY 0x1 /* fail with -EEXIST if the blob exists */

/*
 * Upload a local file as blob name, reading it once; sha256_hex (65 bytes,
 * may be NULL) receives the digest of the bytes sent and *size_out (may be
 * NULL) their count. Readers never see a partial blob.
 */
int kn_blob_put_file(struct kn_blob_store *store, const char *name,
		     const char *path, unsigned flags, char *sha256_hex,
		     int64_t *size_out, struct kn_error *err);
/*
 * Put the file at path in the store as blob name, create-only (-EEXIST,
 * KN_ECONFLICT, if present), without copying a byte where the store keeps
 * blobs as files on path's file system: a hard link, after which the
 * caller unlinks path and never writes the file again. -EXDEV where it
 * cannot (a remote store, another file system): the caller copies with
 * kn_blob_put_file. The bytes are the caller's to have checked.
 */
int kn_blob_put_link(struct kn_blob_store *store, const char *name,
		     const char *path, struct kn_error *err);
/*
 * Copy len bytes of in, from its start, to out (a fresh temporary of
 * the caller's, opened for reading and writing), hashing them on a
 * second thread: one pass, the hash beside the copy. Where the file
 * system shares blocks (FICLONE) in is cloned, not copied, and the clone
 * is hashed; elsewhere on one file system the kernel copies
 * (copy_file_range) and out's pages are hashed as each span lands;
 * between two file systems the source is read with pread into buffers
 * of its own. Never mapped, so a source another process may truncate
 * meanwhile (a client's file) makes a short copy, an error, not a
 * fault. hex (65 bytes) receives the digest of the bytes copied (what
 * out holds) and *copied their count. 0, or -errno with *failed_op
 * naming the step.
 */
int kn_copy_fd_hashed(int in, int out, int64_t len, char *hex,
		      int64_t *copied, const char **failed_op);
/* Upload bytes. KN_BLOB_CREATE_ONLY: -EEXIST (KN_ECONFLICT) if present. */
int kn_blob_put_bytes(struct kn_blob_store *store, const char *name,
		      const void *data, size_t len, unsigned flags,
		      struct kn_error *err);
/*
 * Download blob name into path (replaced atomically). length < 0 means to
 * the end; offset/length select a byte range. sha256_hex (may be NULL)
 * receives the digest of the bytes written. -ENOENT when missing.
 */
int kn_blob_get_file(struct kn_blob_store *store, const char *name,
		     const char *path, int64_t offset, int64_t length,
		     char *sha256_hex, struct kn_error *err);
/* Download a blob of at most max bytes into a malloc'd NUL-terminated buffer. */
int kn_blob_get_bytes(struct kn_blob_store *store, const char *name,
		      size_t max, char **out, size_t *out_len,
		      struct kn_error *err);
/* Every blob whose name starts with prefix (all pages), sorted by name. */
int kn_blob_list(struct kn_blob_store *store, const char *prefix,
		 struct kn_blob_list *out, struct kn_error *err);
/* Delete a blob; -ENOENT when missing. */
int kn_blob_delete(struct kn_blob_store *store, const char *name,
		   struct kn_error *err);
/* Size of a blob; -ENOENT when missing. out->name is left NULL. */
int kn_blob_stat(struct kn_blob_store *store, const char *name,
		 struct kn_blob_info *out, struct kn_error *err);

/*
 * Staged blocks, where the store offers them (Azure: true; elsewhere
 * false, and the calls answer -ENOTSUP): a blob sent in parts that go
 * to the store as they arrive, in any order, under a staging name no
 * reader sees, then made blob name at once. kn_blob_stage_block puts
 * len bytes at offset; kn_blob_stage_commit makes the n blocks staged
 * at offsets (any order; the caller vouches that they tile the blob)
 * blob name, create-only with KN_BLOB_CREATE_ONLY (-EEXIST when
 * present), and removes the staging blob. A stage never committed
 * costs nothing lasting: the service drops its blocks.
 */
bool kn_blob_can_stage(const struct kn_blob_store *store);
int kn_blob_stage_block(struct kn_blob_store *store, const char *stage,
			int64_t offset, const void *data, size_t len,
			struct kn_error *err);
int kn_blob_stage_commit(struct kn_blob_store *store, const char *stage,
			 const int64_t *offsets, size_t n, const char *name,
			 unsigned flags, struct kn_error *err);

/*
 * Where blob name lies on this machine's file system when the store keeps
 * blobs as local files (file://), so a reader may hash it in place with
 * no copy; malloc'd, or NULL for a remote store.
 */
char *kn_blob_local_path(struct kn_blob_store *store, const char *name);

/*
 * Run fn(ctx, i, err) for every i < n, up to the store's files in flight
 * at once (its backend's concurrency, or files_in_flight; capped by the
 * CPUs: SHA-256 is what the workers share out), the calling thread being
 * one of the workers. Stops handing out work at the first error, which
 * is the one returned, with its message in err.
 */
int kn_blob_for_each_file(struct kn_blob_store *store, size_t n,
			  int (*fn)(void *ctx, size_t i, struct kn_error *err),
			  void *ctx, struct kn_error *err);

/*
 * Make every finished write durable (the file store's writes reach the
 * page cache first; Azure's are durable when answered).
 */
int kn_blob_sync(struct kn_blob_store *store, struct kn_error *err);

/*
 * The backends. Names arrive checked and relative to the store; adding
 * the store's prefix is the backend's business. Errors as everywhere.
 */
struct kn_blob_store_ops {
	const char *scheme;
	/* How many calls may run at once on one store (>= 1). */
	int concurrency;
	int (*put_file)(struct kn_blob_store *store, const char *name,
			const char *path, unsigned flags, char *sha256_hex,
			int64_t *size_out, struct kn_error *err);
	int (*put_bytes)(struct kn_blob_store *store, const char *name,
			 const void *data, size_t len, unsigned flags,
			 struct kn_error *err);
	/* A local file linked in place, create-only; NULL for remote
	   stores. */
	int (*put_link)(struct kn_blob_store *store, const char *name,
			const char *path, struct kn_error *err);
	int (*get_file)(struct kn_blob_store *store, const char *name,
			const char *path, int64_t offset, int64_t length,
			char *sha256_hex, struct kn_error *err);
	int (*list)(struct kn_blob_store *store, const char *prefix,
		    struct kn_blob_list *out, struct kn_error *err);
	int (*del)(struct kn_blob_store *store, const char *name,
		   struct kn_error *err);
	int (*stat)(struct kn_blob_store *store, const char *name,
		    struct kn_blob_info *out, struct kn_error *err);
	/* Staged blocks (kn_blob_stage_block); NULL where not offered. */
	int (*stage_block)(struct kn_blob_store *store, const char *stage,
			   int64_t offset, const void *data, size_t len,
			   struct kn_error *err);
	int (*stage_commit)(struct kn_blob_store *store, const char *stage,
			    const int64_t *offsets, size_t n, const char *name,
			    unsigned flags, struct kn_error *err);
	/* The local file behind a blob; NULL for remote stores. */
	char *(*local_path)(struct kn_blob_store *store, const char *name);
	/* Make every finished write durable; NULL when they already are. */
	int (*sync)(struct kn_blob_store *store, struct kn_error *err);
	void (*free)(struct kn_blob_store *store);
};

extern const struct kn_blob_store_ops kn_file_store_ops;
extern const struct kn_blob_store_ops kn_azure_store_ops;

/* ---- which store a URL is in, and whose credential it gets ---- */

/*
 * Whether url lies inside the store at store_url: the same scheme, host
 * (case aside) and port (80 and 443 implied), and a path equal to the
 * store's or below it at a '/' (for Azure: the same account, container
 * and prefix). Never for URLs with user@, a fragment, a backslash, any
 * %-escape, control characters, or empty, "." or ".." path parts, nor
 * for file:// URLs with a host. The store's own query (a SAS) is ignored.
 */
bool kn_store_url_covers(const char *store_url, const char *url);

/*
 * A set of named stores, each with its own credential, the directories
 * file:// URLs outside them may point into, and whether http(s) URLs in
 * no store may be used at all (without credentials). Built once at
 * start, then only read: threads may share it.
 */
struct kn_stores;
/* The server's --blob-store among its stores. */
#define KN_DEFAULT_STORE "default"
/* The stores' scopes, for the shims (kn_stores_scopes_json). */
#define KN_STORE_SCOPES_ENV "KILN_STORE_SCOPES"
struct kn_stores *kn_stores_new(void);
void kn_stores_free(struct kn_stores *stores);
/*
 * Add store name at url. Its credential is read now, from the variable
 * cred_env or the file cred_file (owned by this user, mode 0600 or
 * stricter: -EPERM otherwise); with neither, from_environment lends it
 * the AZURE_STORAGE_* environment (the server's default store), or it
 * has none. A key, a SAS or a connection string, told apart by its look.
 */
int kn_stores_add(struct kn_stores *stores, const char *name,
		  const char *url, const char *cred_env, const char *cred_file,
		  bool from_environment, struct kn_error *err);
/* Allow file:// URLs below dir (resolved now; must exist). */
int kn_stores_add_root(struct kn_stores *stores, const char *dir,
		       struct kn_error *err);
/* Let http(s) URLs in no store through, without credentials. */
void kn_stores_allow_unconfigured(struct kn_stores *stores, bool allow);
/*
 * What ref (a store's name, or a URL) may be used as: *url_out
 * (malloc'd) is the store's URL for a name, the URL itself otherwise.
 * -EINVAL for an unknown name or a URL that is not plain, -EPERM for a
 * file:// URL outside the stores and roots or (unless allowed) an
 * http(s) URL in no store; err names field.
 */
int kn_stores_resolve(const struct kn_stores *stores, const char *ref,
		      const char *field, char **url_out, struct kn_error *err);
/*
 * Open ref as kn_stores_resolve allows it, with the credential of the
 * store that covers it (the most specific) and none otherwise. tuning
 * (may be NULL) gives the rest of the config; its url and credential
 * fields are ignored.
 */
int kn_stores_open(const struct kn_stores *stores, const char *ref,
		   const char *field, const struct kn_blob_store_config *tuning,
		   struct kn_blob_store **out, struct kn_error *err);
/*
 * A credential's text from the variable env or else the file (as
 * kn_stores_add reads them), trailing white space cut; malloc'd.
 */
int kn_store_credential_read(const char *env, const char *file,
			     const char *field, char **out,
			     struct kn_error *err);
/*
 * The stores' names, URLs and where each credential comes from (never
 * the secrets) as JSON, for a shim to rebuild the set with
 * kn_stores_from_scopes_json, which reads the credentials again and lets
 * every URL through (the server checked them).
 */
char *kn_stores_scopes_json(const struct kn_stores *stores);
int kn_stores_from_scopes_json(const char *text, struct kn_stores **out,
			       struct kn_error *err);

/* ---- manifests ---- */

struct kn_ckpt_file {
	char *path; /* relative, '/'-separated */
	int64_t size;
	char sha256[KN_SHA256_HEX_LEN + 1];
};

struct kn_ckpt_manifest {
	char *name; /* checkpoint name, or "outputs" */
	int64_t created_ms;
	struct kn_ckpt_file *files; /* sorted by path */
	size_t n;
};
void kn_ckpt_manifest_release(struct kn_ckpt_manifest *m);
/* The manifest as JSON text (malloc'd). */
char *kn_ckpt_manifest_to_json(const struct kn_ckpt_manifest *m);
/*
 * Parse and validate a manifest (paths relative without "..", sizes >= 0,
 * 64 lowercase hex digits). err names the source and the bad field.
 */
int kn_ckpt_manifest_parse(const char *text, size_t len, const char *source,
			   struct kn_ckpt_manifest *out, struct kn_error *err);

/* ---- checkpoints ---- */

struct kn_ckpt_sent;

/*
 * Upload the completed checkpoint directory dir as JOB/checkpoints/NAME/
 * (NAME is dir's last component): every regular file, then MANIFEST.json
 * create-only. If the manifest is already there nothing is sent (a re-run
 * after a crash is idempotent; one cut short redoes the files). Files
 * recorded in sent (may be NULL) are not sent again; the checkpoint's
 * records go after a successful upload. manifest_out (may be NULL)
 * receives what was (or had been) recorded.
 */
int kn_ckpt_upload(struct kn_blob_store *store, const char *job,
		   const char *dir, struct kn_ckpt_sent *sent,
		   struct kn_ckpt_manifest *manifest_out, struct kn_error *err);

/*
 * Files of a checkpoint sent before its commit (kn_ckpt_upload_early),
 * for kn_ckpt_upload to skip: a file still the same (device, inode, size,
 * modification and change times) as when it was sent, whose blob is there
 * with its size, is not sent again and keeps the digest taken as it went.
 * Used by one thread at a time.
 */
struct kn_ckpt_sent *kn_ckpt_sent_new(void);
void kn_ckpt_sent_free(struct kn_ckpt_sent *sent);
/* Files the last kn_ckpt_upload with this record took from it. */
size_t kn_ckpt_sent_reused(const struct kn_ckpt_sent *sent);
/* The bytes of checkpoint name's files recorded as sent ahead. */
int64_t kn_ckpt_sent_bytes(const struct kn_ckpt_sent *sent, const char *name);

/*
 * Send DIR/NAME.tmp/PATH, a file the task finished writing into a
 * checkpoint it has not committed yet, to JOB/checkpoints/NAME/PATH, and
 * record it in sent. Nothing is sent (0) when the file is gone (the
 * checkpoint was committed or dropped meanwhile), is not a regular file,
 * is recorded already, or when NAME has a manifest in the store already
 * (its commit's upload will find it complete). A file that changed while
 * it went is not recorded. The manifest is never written here.
 */
int kn_ckpt_upload_early(struct kn_blob_store *store, const char *job,
			 const char *dir, const char *name, const char *path,
			 struct kn_ckpt_sent *sent, struct kn_error *err);

struct kn_ckpt_entry {
	char *name;
	bool complete; /* its manifest exists */
};
struct kn_ckpt_list {
	struct kn_ckpt_entry *items; /* newest first */
	size_t n;
};
void kn_ckpt_list_release(struct kn_ckpt_list *list);
/* The job's checkpoints in the store, newest first, complete or not. */
int kn_ckpt_list(struct kn_blob_store *store, const char *job,
		 struct kn_ckpt_list *out, struct kn_error *err);

/*
 * Download the newest complete checkpoint whose files verify (size and
 * sha256) into DEST_PARENT/NAME, which must not exist yet (it is built as
 * NAME.partial and renamed). Corrupt or incomplete ones are skipped: for
 * each, a line "checkpoint NAME skipped: REASON" is appended to *warnings
 * (malloc'd, NULL when none; set even on failure). *name_out (malloc'd)
 * names the restored one. -ENOENT (KN_ENOTFOUND) when none verifies.
 */
int kn_ckpt_restore(struct kn_blob_store *store, const char *job,
		    const char *dest_parent, char **name_out, char **warnings,
		    struct kn_error *err);

/*
 * Retention: keep the newest `keep` complete checkpoints; delete older
 * complete ones (manifest first) and incomplete ones older than the oldest
 * kept, after making the store durable (kn_blob_sync) if any is to go.
 * *deleted (may be
 * NULL) receives how many checkpoints went.
 */
int kn_ckpt_prune(struct kn_blob_store *store, const char *job, size_t keep,
		  size_t *deleted, struct kn_error *err);

/*
 * Upload every regular file under dir to JOB/outputs/ and return each
 * file's size and sha256 in *out (name "outputs"); also writes
 * JOB/outputs/MANIFEST.json last.
 */
int kn_ckpt_upload_outputs(struct kn_blob_store *store, const char *job,
			   const char *dir, struct kn_ckpt_manifest *out,
			   struct kn_error *err);

/* ---- watching KILN_CHECKPOINT_DIR ---- */

struct kn_ckpt_watch;

/* Also report the files written into NAME.tmp before its commit. */
#define KN_CKPT_WATCH_FILES 0x1

/*
 * Watch dir for checkpoints committed by renaming NAME.tmp to NAME
 * (inotify), with a scan every scan_ms (0 = 2000) as a fallback for lost
 * events. Directories already there count as committed.
 */
int kn_ckpt_watch_new(const char *dir, int64_t scan_ms, unsigned flags,
		      struct kn_ckpt_watch **out, struct kn_error *err);
void kn_ckpt_watch_free(struct kn_ckpt_watch *w);
/* A descriptor that polls readable when kn_ckpt_watch_next may have news. */
int kn_ckpt_watch_fd(const struct kn_ckpt_watch *w);
/*
 * Drain events (non-blocking) and return 1 with the oldest newly
 * committed name in *name (malloc'd), 0 when there is none, or a negative
 * errno. Each name is returned once, in strverscmp order among those
 * noticed together.
 */
int kn_ckpt_watch_next(struct kn_ckpt_watch *w, char **name,
		       struct kn_error *err);
/*
 * With KN_CKPT_WATCH_FILES: 1 with the oldest file a task closed after
 * writing (or moved) into an uncommitted checkpoint, not taken yet: *name
 * the checkpoint's (without .tmp), *path relative to NAME.tmp (both
 * malloc'd); 0 when there is none. A commit drops its checkpoint's files
 * (its upload sends what is left). Events are read by kn_ckpt_watch_next:
 * call it first.
 */
int kn_ckpt_watch_next_written(struct kn_ckpt_watch *w, char **name,
			       char **path);

#endif
