/*
 * The model registry's rules that need no server (modelrules.c), shared
 * by its domain (models.c) and its HTTP handlers (models_http.c).
 */
#ifndef KILN_SERVER_MODELRULES_H
#define KILN_SERVER_MODELRULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "store/store.h"

/* The longest id a client may give an upload in progress. */
#define MODEL_UPLOAD_ID_MAX 32

/* Whether id is 1..MODEL_UPLOAD_ID_MAX ASCII letters and digits. */
bool model_upload_id_ok(const char *id);

/*
 * The largest part of a blob the server takes in one request, told to
 * clients with the missing-blobs answer. A part is held whole in memory
 * while it arrives, so this times a client's parts in flight is what one
 * pushing client may hold of the server's memory.
 */
#define MODEL_PART_MAX (16 * 1024 * 1024)
/* The most separate byte ranges one upload may hold before its gaps are
   filled: bounds its memory however small and scattered its parts. */
#define MODEL_RANGES_MAX 1024

/* How far past the bytes held from 0 a part may end: the server hashes a
   blob in order as its parts arrive, the parts that came early from their
   pages when the gap before them is filled, on the worker that writes
   the upload's parts; this bounds that catch-up (a client with a few
   parts in flight stays far within it). */
#define MODEL_AHEAD_MAX (16 * (int64_t)MODEL_PART_MAX)

/* The byte ranges [start, end) an upload has received: sorted, disjoint,
   touching ranges merged. Zeroed is empty. */
struct model_ranges {
	int64_t (*r)[2];
	size_t n, cap;
};

enum model_range_fit {
	MODEL_RANGE_NEW,     /* none of it was received */
	MODEL_RANGE_HELD,    /* all of it was (a part sent twice) */
	MODEL_RANGE_OVERLAP, /* some of it was: refused */
};

enum model_range_fit model_ranges_fit(const struct model_ranges *rs,
				      int64_t start, int64_t end);
/* Add a NEW range: 0, or -1 (nothing added) when the ranges would number
   more than MODEL_RANGES_MAX. */
int model_ranges_add(struct model_ranges *rs, int64_t start, int64_t end);
/* Bytes received in all. */
int64_t model_ranges_total(const struct model_ranges *rs);
/* Where the bytes received from 0 without a gap end. */
int64_t model_ranges_prefix(const struct model_ranges *rs);
/* [[start, end], ...] for the API. */
json_t *model_ranges_json(const struct model_ranges *rs);
void model_ranges_release(struct model_ranges *rs);

/*
 * Where a rollback of alias takes it, from the model's alias history
 * (oldest first, every alias mixed): the version promoted before the
 * current one once rollbacks are undone. 0 when there is none.
 */
int64_t model_rollback_target(const struct kn_model_alias_row *hist,
			      size_t n, const char *alias);

/*
 * rows as the API's list of aliases: alias, version, by, time_ms, and with
 * history, action and from (null for a first promote).
 */
json_t *model_aliases_json(struct kn_model_alias_row *rows, size_t n,
			   bool history);

#endif
