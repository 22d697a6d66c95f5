/*
 * The model registry service's own header: its domain (models.c), its
 * HTTP handlers (models_http.c) and its blobs with the uploads in
 * progress (models_blobs.c). Nothing outside these files includes it or
 * touches struct model_state.
 */
#ifndef KILN_SERVER_MODELSVC_H
#define KILN_SERVER_MODELSVC_H

#include "ckpt/ckpt.h"
#include "registry/registry.h"
#include "server/access.h"
#include "server/core.h"
#include "server/feed.h"
#include "server/idempotency.h"
#include "server/modelrules.h"
#include "server/peers.h"
#include "server/service.h"

struct upload;
struct commit_seen;
struct model_local;

/* The registry's state, in its slot: made by models_start, freed by
   models_stop. */
struct model_state {
	char *staging;          /* $KILN_HOME/registry/uploads */
	char *trusted_keys;     /* directory of *.pub files */
	struct upload *uploads; /* in progress (models_blobs.c) */
	struct commit_seen *commits; /* begun, kept for commits sent again */
	struct model_local *local; /* push.sock (models_local.c), or NULL */
	struct kn_timer *idle_timer; /* drops uploads idle too long */
};

/* The registry's state (NULL before models_start). */
struct model_state *models_state(struct server *s);

/* Drop the uploads idle longer than --upload-idle, and the commits
   ended longer ago than that (models_blobs.c). */
void models_uploads_expire(struct server *s);

/* models.c */
int models_start(struct server *s, struct kn_error *err);
void models_stop(struct server *s);
/*
 * Open the registry's blob store at url (core_blob_url, or a worker's
 * copy of it) with the credentials the environment gives; any thread.
 */
int models_open_store(const char *url, struct kn_blob_store **out,
		      struct kn_error *err);
/* The version a reference names (N@V or N@alias). */
int models_resolve(struct server *s, const struct kn_model_ref *ref,
		   struct kn_model_version_row *out, struct kn_error *err);
/*
 * Every file's blob is in the store with the size the manifest says, and
 * durable: a version must never name a blob a crash can take away.
 */
int models_check_blobs(struct kn_blob_store *store,
		       const struct kn_model_files *f, struct kn_error *err);
/* Move alias of name to version to (action "promote" or "rollback"),
   audited; *from is where it pointed (0: nowhere). */
int models_alias_move(struct server *s, const struct caller *c,
		      const char *name, const char *alias, const char *action,
		      int64_t to, int64_t *from, struct kn_error *err);
/*
 * Number, record and copy to the store a new version of name with these
 * files (their blobs already checked), lineage and metrics (NULL: null),
 * then move alias when given. *reply is what the API answers with.
 */
int models_version_create(struct server *s, const struct caller *c,
			  const char *name, const struct kn_model_files *files,
			  json_t *lineage, json_t *metrics, const char *alias,
			  json_t **reply, struct kn_error *err);
/* Each input of lineage that came from a job gets that job's lineage,
   recursively. */
int models_lineage_expand(struct server *s, struct kn_blob_store *store,
			  json_t *lineage, int depth, struct kn_error *err);

/* models_blobs.c: drop every upload in progress and every commit kept
   (the service stops). */
void models_uploads_drop(struct model_state *m);

/* models_blobs.c: the blob routes (docs/api.md). */
route_handler models_h_blob_put, models_h_blob_status,
	models_h_upload_part, models_h_upload_status, models_h_upload_commit;

/* models_present.c: which blobs the store holds, asked on a worker: the
   missing-blobs route, and the answer to a commit for an upload that is
   gone (stored, dropped or expired). */
route_handler models_h_blobs_missing;
void models_commit_gone(struct server *s, struct kn_http_req *req,
			const struct caller *c, const char *id,
			const char *digest, const char *object);

/*
 * models_blobs.c: room to stage len more bytes for owner: its cap on
 * bytes staged (429) and the staging file system's free-space reserve
 * (507). 0, or a negative errno with err set.
 */
int models_staging_room(struct server *s, const char *owner, int64_t len,
			struct kn_error *err);

/* models_local.c: blobs from clients on this machine, by descriptor,
   when the store is a file store. */
int models_local_start(struct server *s, struct kn_error *err);
void models_local_stop(struct model_state *m);
/* {"socket", "boot_id"} for the missing-blobs answer, or NULL when
   there is no such path. */
json_t *models_local_json(struct server *s);

#endif
