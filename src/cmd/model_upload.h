/*
 * One file sent as a model blob in large parts, several at once
 * (model_upload.c), for `kiln model push`.
 */
#ifndef KILN_CMD_MODEL_UPLOAD_H
#define KILN_CMD_MODEL_UPLOAD_H

#include <stdint.h>
#include <time.h>

#include "cmd/cli.h"

/* Parts in flight for one file, each over its own connection. */
#define MODEL_UPLOAD_STREAMS 4

/* Called with the bytes the push has sent or found held in all, from any
   thread (one at a time). */
typedef void (*model_upload_progress)(int64_t done, void *arg);

struct model_upload {
	const char *path;   /* the file */
	const char *digest; /* its sha256, as hashed */
	int64_t size;       /* its size, as hashed */
	/* When it was hashed: a file modified since is refused by name. */
	struct timespec hashed_at;
	int64_t part_max;   /* the server's, from the missing-blobs answer */
	model_upload_progress progress;
	void *progress_arg;
	int64_t *sent;      /* in: bytes sent before; out: after */
	int64_t *resumed;   /* out: plus bytes the server had already */
};

/*
 * Send u->path as blob u->digest: ask what the server already holds of
 * it (a push killed before, under the same upload id), then send the
 * other parts, MODEL_UPLOAD_STREAMS at once, each sent again on a lost
 * connection. 0, or an exit status after saying why, naming the file.
 */
int model_upload_blob(struct cli_ctx *ctx, const struct model_upload *u);

#endif
