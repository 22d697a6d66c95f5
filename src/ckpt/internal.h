/*
 * ckpt internals shared by the backends and the unit tests: the store
 * object, the reusable buffer pool, the hashing pipeline, and the Azure
 * pieces that are pure functions (URL, connection string, signing, list
 * XML) so tests and fuzzers reach them without a network.
 */
#ifndef KILN_CKPT_INTERNAL_H
#define KILN_CKPT_INTERNAL_H

#include <stdint.h>

#include "ckpt/ckpt.h"

/* Most blocks in flight, and the biggest block Azure takes (4000 MiB). */
#define KN_BLOB_MAX_PARALLEL 16
#define KN_BLOB_MAX_BLOCK (64u << 20)
/* Put Blob's own limit on one request's body. */
#define KN_BLOB_MAX_SINGLE_PUT ((size_t)5000 << 20)
/* The file store copies through buffers of this size (dd bs=16M). */
#define KN_FILE_CHUNK (16u << 20)

/*
 * Large buffers allocated once per store and reused: first touch of fresh
 * memory costs 150-325 MB/s on these machines (notes/environment.md), more
 * than the copy itself. Huge pages where the kernel gives them.
 */
struct kn_bufpool {
	char *bufs[KN_BLOB_MAX_PARALLEL];
	size_t size;
	int n;
};
/* Buffer i (0 <= i < KN_BLOB_MAX_PARALLEL) of pool->size bytes. */
char *kn_bufpool_get(struct kn_bufpool *pool, int i);
void kn_bufpool_release(struct kn_bufpool *pool);

struct kn_blob_store {
	const struct kn_blob_store_ops *ops;
	char *url;  /* without credentials */
	void *impl; /* the backend's */
	int files_in_flight; /* 0 = ops->concurrency */
	struct kn_bufpool pool;
};

/*
 * SHA-256 on a second thread, so a copy reads, writes (or sends) and
 * hashes at once: one pass over the data, the hash off the I/O path.
 * Chunks are hashed in submission order; a chunk's memory must stay
 * untouched until kn_hashpipe_wait(its sequence number) returns.
 */
struct kn_hashpipe;
struct kn_hashpipe *kn_hashpipe_start(void);
uint64_t kn_hashpipe_submit(struct kn_hashpipe *p, const void *data,
			    size_t len);
/* The same for len bytes of fd from offset, read back by the hashing
   thread: for bytes a copy just wrote into a file of the caller's, which
   must not change until kn_hashpipe_wait(the sequence number). */
uint64_t kn_hashpipe_submit_file(struct kn_hashpipe *p, int fd,
				 int64_t offset, size_t len);
void kn_hashpipe_wait(struct kn_hashpipe *p, uint64_t seq);
/* Joins the thread; hex gets 64 digits + NUL (NULL hex just discards).
   0, or the -errno of a span that could not be read back (a short read:
   -EIO), and then hex is left alone. */
int kn_hashpipe_finish(struct kn_hashpipe *p, char *hex);

/* Names are relative, '/'-separated, without empty, "." or ".." parts. */
int kn_blob_check_name(const char *name, const char *field,
		       struct kn_error *err);

/* private_files: files 0600 in 0700 directories, else 0644 in 0755. */
int kn_file_store_open(const char *url, bool private_files,
		       struct kn_blob_store *store, struct kn_error *err);

/* ---- Azure, pure parts ---- */

struct kn_azure_url {
	char *endpoint;  /* scheme://host[:port][/account in path style] */
	char *path_base; /* "" or "/account": the request path before container */
	char *account;
	char *container;
	char *prefix;    /* "" or "dir/sub/" */
	char *sas;       /* query string of the URL, if any */
};
/* https://ACCOUNT.blob.HOST/CONTAINER[/P] or scheme://HOST/ACCOUNT/CONTAINER[/P]. */
int kn_azure_parse_url(const char *url, struct kn_azure_url *out,
		       struct kn_error *err);
void kn_azure_url_release(struct kn_azure_url *u);

struct kn_azure_conn {
	char *account_name;
	char *account_key;
	char *blob_endpoint;
	char *sas;
};
/* "Key=Value;..." as the portal prints it; unknown keys are ignored. */
int kn_azure_parse_connection_string(const char *s, struct kn_azure_conn *out,
				     struct kn_error *err);
void kn_azure_conn_release(struct kn_azure_conn *c);

struct kn_kv {
	const char *name;
	const char *value;
};

/* What goes into a Shared Key signature. */
struct kn_azure_sign_input {
	const char *method;
	int64_t content_length; /* 0 or less: signed as "" */
	const char *content_md5;
	const char *content_type;
	const char *if_match;
	const char *if_none_match;
	const char *range;
	const struct kn_kv *headers; /* x-ms-* headers, any order */
	size_t n_headers;
	const char *account;
	const char *path;            /* URL-encoded request path, as sent */
	const struct kn_kv *query;   /* decoded, any order */
	size_t n_query;
};
/* The string to sign (malloc'd), headers and query sorted by name. */
char *kn_azure_string_to_sign(const struct kn_azure_sign_input *in);
/* Base64(HMAC-SHA256(key, text)) into out (at least 45 bytes). */
int kn_azure_sign(const unsigned char *key, size_t key_len, const char *text,
		  char *out, size_t out_len);
/* Percent-encode everything but unreserved characters (and '/' if keep_slash). */
char *kn_url_encode(const char *s, int keep_slash);

/*
 * One page of List Blobs XML: appends each blob (name with strip_prefix
 * removed) to *out and sets *next_marker (malloc'd, NULL on the last page).
 */
int kn_azure_parse_list(const char *xml, size_t len, const char *strip_prefix,
			struct kn_blob_list *out, char **next_marker,
			struct kn_error *err);

/*
 * What the Azure store reads of a reply's header: written line by line
 * as curl hands them over (not NUL-terminated, CRLF included), each
 * value kept only when it is whole, printable and fits. The service's
 * bytes are hostile like any peer's: nothing here reads past len.
 */
struct kn_azure_head {
	long status;            /* 0 until a status line, or when unreadable */
	char error_code[96];    /* x-ms-error-code, letters and digits only */
	int64_t content_length; /* -1: none, or not a plain count */
	char content_range[96]; /* as sent, "" when absent or too long */
	char etag[128];         /* as sent, "" when absent or too long */
	char copy_status[16];   /* x-ms-copy-status: "success", "pending" */
};
/* One header line into h; a status line ("HTTP/1.1 206 ...") starts a
   new reply (after a redirect or a 100) and clears what came before. */
void kn_azure_head_line(struct kn_azure_head *h, const char *line,
			size_t len);

/* Add a blob to a list (takes a copy of name). */
void kn_blob_list_add(struct kn_blob_list *list, const char *name,
		      int64_t size);
int kn_azure_store_open(const struct kn_blob_store_config *cfg,
			struct kn_blob_store *store, struct kn_error *err);

#endif
