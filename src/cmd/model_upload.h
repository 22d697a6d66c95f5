/*
 * One file sent as a model blob in large parts, several at once, hashed
 * as it is read (model_upload.c), for `kiln model push`.
 */
#ifndef KILN_CMD_MODEL_UPLOAD_H
#define KILN_CMD_MODEL_UPLOAD_H

#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>

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

#endif
