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
