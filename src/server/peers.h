/*
 * What one service offers the others: a deployment's surge and apply
 * (deploy.c), the registry's versions, aliases, signatures and checked
 * copies (models.c), and a deployment's re-validation (revalidate.c).
 * Each service reaches another only through these; none sees another's
 * state.
 */
#ifndef KILN_SERVER_PEERS_H
#define KILN_SERVER_PEERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/base.h"
#include "registry/registry.h"
#include "server/caller.h"
#include "spec/spec.h"
#include "store/store.h"

struct server;
struct kn_http_req;

/* deploy.c: how many deployments owner owns. */
int64_t deploy_count_owned(struct server *s, const char *owner);

/* deploy.c: deployments, probes, rollouts, gateway keys and config */
struct deployment;
/*
 * deploy.c: replace the replica whose job is job_id without a gap
 * (rolling maintenance): a surge replica, a new job of its deployment, is
 * submitted now and placed as any job is (the caller cordons the node
 * first). Once it passes readiness and a gateway has fetched a config
 * listing it (or none polls), job_id is cancelled and the new job takes
 * its replica's place: the replica count is the spec's again. One surge
 * per replica: asking again gives the one on its way. Returns 0 with
 * *surge_job set, or -ENOENT (not a replica) or jobs_submit's error.
 */
int deploy_surge(struct server *s, int64_t job_id, int64_t *surge_job,
		 struct kn_error *err);
/*
 * Where surge replica surge_job stands: 1 once it has taken its
 * replica's place (or became one by a scale-up), 0 while it waits, -1
 * when it is gone (its deployment deleted or scaled down, its job
 * cancelled). why (len bytes) says on what it waits, or why it is gone.
 */
int deploy_surge_state(struct server *s, int64_t surge_job, char *why,
		       size_t len);
/* Give a waiting surge up: its job is cancelled, the old replica stays. */
void deploy_surge_cancel(struct server *s, int64_t surge_job);
/*
 * Create or update a deployment from spec text, as POST /v1/deployments
 * does (file names it in errors; path, absolute, is where it was read):
 * a changed spec rolls out one replica at a time. *out is the deployment.
 */
/* Called on the loop when deploy_apply_start's apply ends (as rc, err). */
typedef void (*deploy_applied_cb)(struct server *s, int rc,
				  const struct kn_error *err, void *arg);
/*
 * deploy_apply with a registry model's check and copy on a worker:
 * returns 1 when cb will be called once, later; 0 when applied now (a
 * model that is not a registry version) and < 0 with err when refused
 * now, cb never called then.
 */
int deploy_apply_start(struct server *s, const struct caller *c,
		       const char *body, size_t len, const char *file,
		       const char *path, deploy_applied_cb cb, void *arg,
		       struct kn_error *err);
int deploy_apply(struct server *s, const struct caller *c, const char *body,
		 size_t len, const char *file, const char *path,
		 const struct deployment **out, struct kn_error *err);

/* models.c: the model registry's API (docs/registry.md) */
/* Whether name is a model name; err names the field when not. */
bool models_name_checked(const char *name, struct kn_error *err);
/*
 * models_http.c: what the registry's routes share with re-validation's,
 * so both word a bad request alike. models_fail: a failed call, audited
 * as c's action on object, and its error answered. models_body_object:
 * the request's body as a JSON object, or NULL with err set.
 * models_body_alias: the "alias" body names, or NULL with err set when
 * it is absent or not an alias.
 */
void models_fail(struct server *s, struct kn_http_req *req,
		 const struct caller *c, const char *action, const char *object,
		 const struct kn_error *err);
json_t *models_body_object(struct kn_http_req *req, struct kn_error *err);
const char *models_body_alias(json_t *body, struct kn_error *err);
/* Point alias of name at version (as a promote, by c) unless it does. */
int models_alias_point(struct server *s, const struct caller *c,
		       const char *name, const char *alias, int64_t version,
		       struct kn_error *err);
/* Whether the server's trusted keys hold key_id. */
bool models_key_trusted(struct server *s, const char *key_id);
/*
 * The one check before the server signs anything: signer is a signer of
 * the server's config and c may sign with it (its role or token name is
 * granted). 0 with *out the signer, or -EPERM with err naming the signer;
 * a refusal is audited as model.sign_refused on object.
 */
int models_signer_check(struct server *s, const struct caller *c,
			const char *signer, const char *object,
			const struct kn_signer_conf **out, struct kn_error *err);
/*
 * Sign name@version's canonical manifest with signer's key, for c (after
 * models_signer_check; the key file is checked again), kept as a posted
 * signature is: only when it verifies. Audited as model.sign (ok or
 * error). key_id gets the key's id, trusted whether the server's trusted
 * keys hold it.
 */
int models_sign(struct server *s, const struct caller *c, const char *name,
		int64_t version, const char *signer,
		char key_id[KN_SHA256_HEX + 1], bool *trusted,
		struct kn_error *err);
/*
 * A deployment's `model: NAME@VERSION|NAME@ALIAS`: refuse (naming the
 * problem) a version that is unsigned, signed by no trusted key or whose
 * files do not match their digests; else *out (malloc'd) is the directory
 * holding its files, $KILN_HOME/registry/models/NAME/VERSION, copied from
 * the store once and hashed again on each later use.
 */
int models_deploy_dir(struct server *s, const char *text, char **out,
		      struct kn_error *err);
/*
 * Called on the loop when models_deploy_dir_start's check ends: rc 0 and
 * dir the copy of version (valid for the call only), or rc < 0 and err
 * (KN_EUNAVAIL when the server stopped first).
 */
typedef void (*models_dir_cb)(struct server *s, int rc, const char *dir,
			      int64_t version, const struct kn_error *err,
			      void *arg);
/*
 * models_deploy_dir with its file work (hashing or copying every file) on
 * a worker: what the database decides (the version, its signatures) is
 * checked now, and a refusal there is returned with cb never called;
 * otherwise cb is called once, later.
 */
int models_deploy_dir_start(struct server *s, const char *text,
			    models_dir_cb cb, void *arg, struct kn_error *err);
/*
 * Called on the loop when models_from_job_start ends: rc 0 and reply (the
 * version made, as POST .../from-job answers; valid for the call only),
 * or rc < 0 and err (KN_EUNAVAIL when the server stopped first).
 */
typedef void (*models_made_cb)(struct server *s, int rc, json_t *reply,
			       const struct kn_error *err, void *arg);
/*
 * A new version of name from a succeeded job's outputs (their blobs put
 * in the registry create-only, digests checked), its manifest's lineage
 * the job's and its metrics the job's metrics.json; alias (may be NULL)
 * moves to it. The copies run on a worker: what the database says (the
 * job, its outputs) is checked now, and a refusal there is returned with
 * cb never called; otherwise cb is called once, later, with the version
 * as POST .../versions answers it. Audits only success: callers audit
 * their failures.
 */
int models_from_job_start(struct server *s, const struct caller *c,
			  const char *name, int64_t job_id, const char *alias,
			  models_made_cb cb, void *arg, struct kn_error *err);
/*
 * Roll alias of model name back (as POST .../rollback does), acting as c;
 * *to and *from the versions. -ECONFLICT when there is nothing earlier.
 */
int models_alias_rollback(struct server *s, const struct caller *c,
			  const char *name, const char *alias, int64_t *to,
			  int64_t *from, struct kn_error *err);
/* One version's stored evaluations (revalidate.c records them), oldest
   first (a new array). */
json_t *models_evaluations_json(struct server *s, const char *name,
				int64_t version);
/* revalidate.c: scheduled evaluation of a model alias (docs/registry.md) */
/*
 * A deployment's revalidate: (docs/deployments.md). reval_for_deployment
 * checks what the spec of deployment (owned by owner, stored under
 * filename) asks for: *out the row to set (NULL when the spec has none),
 * or an error naming the field: the alias is another deployment's, or
 * its job does not parse. job_text is the shipped text of a job file,
 * or NULL: then the text this deployment set before for the same file.
 */
int reval_for_deployment(struct server *s, const char *deployment,
			 const char *owner,
			 const struct kn_deployment_spec *spec,
			 const char *filename, const char *job_text,
			 struct kn_revalidation_row **out,
			 struct kn_error *err);
/*
 * Once the deployment is stored: set row (taken; NULL for none) as
 * deployment's re-validation, acting as c, and remove any other that
 * deployment set. Ones set by hand are left alone.
 */
void reval_deployment_set(struct server *s, const char *deployment,
			  const struct caller *c,
			  struct kn_revalidation_row *row);
void reval_row_free(struct kn_revalidation_row *row);

#endif
