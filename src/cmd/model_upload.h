/*
 * One file sent as a model blob in large parts, several at once, hashed
 * as it is read (model_upload.c), for `kiln model push`.
 */
#ifndef KILN_CMD_MODEL_UPLOAD_H
#define KILN_CMD_MODEL_UPLOAD_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include <jansson.h>

#include "cmd/cli.h"

/* Parts in flight for one file, each over its own connection. */
#define MODEL_UPLOAD_STREAMS 4

/* Called with the bytes the push has sent or found held in all, with
   the push's lock held (one call at a time). */
typedef void (*model_upload_progress)(int64_t done, void *arg);

/* What the files of one push share: their counts and progress. */
struct model_push_totals {
	pthread_mutex_t lock;
	int64_t sent;    /* bytes sent */
	int64_t resumed; /* bytes the server held from a push before */
	model_upload_progress progress;
	void *progress_arg;
};

struct model_upload {
	const char *path;   /* the file */
	int64_t part_max;   /* the server's, from the missing-blobs answer */
	struct model_push_totals *totals;
	/* out */
	char digest[65];    /* the sha256 of the bytes read and sent */
	struct stat st;     /* the file as it was read throughout */
};

/*
 * Read u->path once, hashing it in order and sending its parts of
 * u->part_max bytes, MODEL_UPLOAD_STREAMS at once, each sent again on a
 * lost connection, as an upload named at its commit; then commit it
 * under the digest. The upload's id comes from the file's identity and
 * state, so a push killed midway and run again asks the server what it
 * holds and sends only the rest. A file that changed while it was read
 * or sent is refused by name and not committed. 0, or an exit status
 * after saying why, naming the file.
 */
int model_upload_file(struct cli_ctx *ctx, struct model_upload *u);

/* model_local.c: whether the server's "local" (from the missing-blobs
   answer) is on this machine: its boot id is this kernel's. */
bool model_local_same_machine(json_t *local);

/* model_upload_local's answer when the socket cannot be used: send the
   file over HTTP instead. */
#define MODEL_UPLOAD_OVER_HTTP (-100)

/*
 * Hand u->path to the server at socket_path by its open descriptor
 * (the server copies and hashes it); u->digest and u->st filled. 0, an
 * exit status after saying why, naming the file, or
 * MODEL_UPLOAD_OVER_HTTP.
 */
int model_upload_local(struct cli_ctx *ctx, const char *socket_path,
		       const char *token, struct model_upload *u);

#endif
