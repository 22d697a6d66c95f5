/*
 * store deployments: deployments, the job each replica runs as, and the
 * gateway keys that may call them.
 */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>

#define D(field) STORE_COL(struct kn_deployment_row, field)
static const struct store_row DEPLOYMENT_ROW =
	STORE_ROW(struct kn_deployment_row, "deployment", D(name), D(owner),
		  D(filename), D(spec_yaml), D(spec_json), D(model_dir),
		  D(replicas), D(generation), D(rollout_next), D(created_at),
		  D(updated_at));
#undef D

#define R(field) STORE_COL(struct kn_replica_row, field)
static const struct store_row REPLICA_ROW =
	STORE_ROW(struct kn_replica_row, "replica", R(deployment), R(replica),
		  R(job_id));
#undef R

static const char SQL_DEPLOYMENT_DELETE[] =
	"DELETE FROM deployments WHERE name = ?1";
static const char SQL_REPLICA_DELETE[] =
	"DELETE FROM deployment_replicas WHERE deployment = ?1 AND replica = ?2";

#define K(field) STORE_COL(struct kn_gateway_key_row, field)
static const struct store_row GWKEY_ROW =
	STORE_ROW(struct kn_gateway_key_row, "gateway key", K(id), K(name),
		  K(hash), K(deployments_json), K(rpm), K(tpm), K(quota_day),
		  K(quota_month), K(created_by), K(created_at), K(revoked_at));
#undef K
static const char SQL_GWKEY_REVOKE[] =
	"UPDATE gateway_keys SET revoked_at = ?1 WHERE name = ?2"
	" AND revoked_at = 0";
static const char SQL_JOB_DEPLOYMENT_PUT[] =
	"INSERT OR IGNORE INTO job_deployments (job_id, deployment)"
	" VALUES (:job_id, :deployment)";

const struct store_stmt store_deploy_stmts[] = {
	/* A deployment written again keeps when it was created. */
	STORE_UPSERT_KEEP(STMT_DEPLOYMENT_PUT, &DEPLOYMENT_ROW, "deployments",
			  1, "created_at"),
	STORE_SELECT(STMT_DEPLOYMENT_LIST, &DEPLOYMENT_ROW,
		     "FROM deployments ORDER BY name"),
	STORE_STMT(STMT_DEPLOYMENT_DELETE, SQL_DEPLOYMENT_DELETE, NULL),
	STORE_UPSERT(STMT_REPLICA_PUT, &REPLICA_ROW, "deployment_replicas", 2),
	STORE_STMT(STMT_REPLICA_DELETE, SQL_REPLICA_DELETE, NULL),
	STORE_SELECT(STMT_REPLICA_LIST, &REPLICA_ROW,
		     "FROM deployment_replicas ORDER BY deployment, replica"),
	/* The database assigns the id. */
	STORE_INSERT(STMT_GWKEY_INSERT, &GWKEY_ROW, "INSERT INTO gateway_keys",
		     1),
	STORE_SELECT(STMT_GWKEY_LIST, &GWKEY_ROW,
		     "FROM gateway_keys WHERE ?1 = 0 OR revoked_at = 0"
		     " ORDER BY id"),
	STORE_STMT(STMT_GWKEY_REVOKE, SQL_GWKEY_REVOKE, NULL),
	STORE_STMT(STMT_JOB_DEPLOYMENT_PUT, SQL_JOB_DEPLOYMENT_PUT,
		   &REPLICA_ROW),
	{0},
};

/* ---- deployments and their replicas ---- */

STORE_RELEASE_FN(kn_deployment_row_release, struct kn_deployment_row,
		 DEPLOYMENT_ROW)

int kn_store_deployment_put(struct kn_store *st,
			    const struct kn_deployment_row *d,
			    const struct kn_audit *a, struct kn_error *err)
{
	struct store_write w = {.what = "writing a deployment"};
	struct kn_deployment_row row = *d;
	int rc;

	/* No file name is stored as "": the column holds no NULL. */
	if (!row.filename)
		row.filename = "";
	w.object = kn_asprintf("deployment/%s", d->name);
	rc = store_write_row(st, STMT_DEPLOYMENT_PUT, &row, &w, a, NULL, err);
	free((char *)w.object);
	return rc;
}

STORE_LIST_FN(kn_store_deployment_list, struct kn_deployment_row,
	      STMT_DEPLOYMENT_LIST, "listing deployments")

STORE_LIST_FREE_FN(kn_deployment_list_free, struct kn_deployment_row,
		   DEPLOYMENT_ROW)

int kn_store_deployment_delete(struct kn_store *st, const char *name,
			       const struct kn_audit *a, struct kn_error *err)
{
	static const struct store_named named = {
		.what = "deleting a deployment", .object_kind = "deployment",
		.missing = "no deployment named"};
	const struct store_key keys[] = {KEY_TEXT(name)};

	return store_write_named(st, STMT_DEPLOYMENT_DELETE, keys,
				 N_KEYS(keys), &named, name, a, err);
}

int kn_store_replica_put(struct kn_store *st, const struct kn_replica_row *r,
			 struct kn_error *err)
{
	const char *what = "writing a replica";
	bool own;
	int rc = write_begin(st, &own, err);

	if (rc < 0)
		return rc;
	rc = store_put(st, STMT_REPLICA_PUT, r, what, err);
	/* The ledger's: which deployment the job ran for, kept after the
	   replica moves on to another job. */
	if (rc == 0)
		rc = store_put(st, STMT_JOB_DEPLOYMENT_PUT, r, what, err);
	return write_end(st, own, rc, err);
}

int kn_store_replica_delete(struct kn_store *st, const char *deployment,
			    int replica, struct kn_error *err)
{
	const struct store_key keys[] = {
		KEY_TEXT(deployment),
		KEY_I64(replica),
	};

	return store_run_keyed(st, STMT_REPLICA_DELETE, keys, N_KEYS(keys),
			       "deleting a replica", err);
}

STORE_LIST_FN(kn_store_replica_list, struct kn_replica_row, STMT_REPLICA_LIST,
	      "listing replicas")

STORE_LIST_FREE_FN(kn_replica_list_free, struct kn_replica_row, REPLICA_ROW)

/* ---- gateway keys ---- */

STORE_RELEASE_FN(kn_gateway_key_row_release, struct kn_gateway_key_row,
		 GWKEY_ROW)

int kn_store_gateway_key_insert(struct kn_store *st,
				const struct kn_gateway_key_row *k,
				const struct kn_audit *a, int64_t *out_id,
				struct kn_error *err)
{
	struct store_write w = {.what = "inserting a gateway key"};
	struct kn_gateway_key_row row = *k;
	int rc;

	row.revoked_at = 0; /* a key is inserted active */
	w.object = kn_asprintf("key/%s", k->name);
	/* The only unique key is the active name. */
	w.conflict = kn_asprintf("a gateway key named %s already exists",
				 k->name);
	rc = store_write_row(st, STMT_GWKEY_INSERT, &row, &w, a, out_id, err);
	KN_FREE_ALL((char *)w.object, (char *)w.conflict);
	return rc;
}

STORE_LIST_BY_FN(kn_store_gateway_key_list, bool, struct kn_gateway_key_row,
		 STMT_GWKEY_LIST, "listing gateway keys")

STORE_LIST_FREE_FN(kn_gateway_key_list_free, struct kn_gateway_key_row,
		   GWKEY_ROW)

int kn_store_gateway_key_revoke(struct kn_store *st, const char *name,
				const struct kn_audit *a, struct kn_error *err)
{
	static const struct store_named named = {
		.what = "revoking a gateway key", .object_kind = "key",
		.missing = "no active gateway key named"};
	const struct store_key keys[] = {KEY_I64(kn_now_ms()), KEY_TEXT(name)};

	return store_write_named(st, STMT_GWKEY_REVOKE, keys, N_KEYS(keys),
				 &named, name, a, err);
}
