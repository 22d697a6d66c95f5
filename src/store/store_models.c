/*
 * store models: the model registry (models, their immutable versions,
 * aliases with every move kept, signatures) and model re-validation
 * (what evaluation runs against an alias, and each run's outcome).
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define M(field) STORE_COL(struct kn_model_row, field)
static const struct store_row MODEL_ROW =
	STORE_ROW(struct kn_model_row, "model", M(name), M(versions), M(latest),
		  M(created_at), M(updated_at));
#undef M

#define V(field) STORE_COL(struct kn_model_version_row, field)
static const struct store_row VERSION_ROW =
	STORE_ROW(struct kn_model_version_row, "model version", V(name),
		  V(version), V(manifest), V(created_by), V(created_at));
#undef V

/* An alias where it points now, or one move of it in its history. */
#define L(field) STORE_COL(struct kn_model_alias_row, field)
static const struct store_row ALIAS_ROW =
	STORE_ROW(struct kn_model_alias_row, "model alias", L(alias),
		  L(version), L(action), L(from_version), L(actor), L(time_ms));
#undef L

#define G(field) STORE_COL(struct kn_model_signature_row, field)
static const struct store_row SIGNATURE_ROW =
	STORE_ROW(struct kn_model_signature_row, "model signature", G(key_id),
		  G(public_key), G(signature), G(signed_by), G(signed_at));
#undef G

#define R(field) STORE_COL(struct kn_revalidation_row, field)
static const struct store_row REVAL_ROW =
	STORE_ROW(struct kn_revalidation_row, "model re-validation", R(name),
		  R(alias), R(owner), R(spec_yaml), R(filename), R(every_ms),
		  R(thresholds_json), R(rollback), R(created_at),
		  R(deployment));
#undef R

#define E(field) STORE_COL(struct kn_evaluation_row, field)
static const struct store_row EVAL_ROW =
	STORE_ROW(struct kn_evaluation_row, "model evaluation", E(id), E(name),
		  E(version), E(alias), E(job_id), E(outcome), E(metrics_json),
		  E(detail), E(time_ms));
#undef E

static const char SQL_MODEL_LIST[] =
	"SELECT m.name AS name, count(v.version) AS versions,"
	" coalesce(max(v.version), 0) AS latest, m.created_at AS created_at,"
	" coalesce(max(v.created_at), m.created_at) AS updated_at"
	" FROM models m LEFT JOIN model_versions v ON v.name = m.name"
	" GROUP BY m.name ORDER BY m.name";
static const char SQL_MODEL_CREATE[] =
	"INSERT OR IGNORE INTO models (name, next_version, created_at)"
	" VALUES (?1, 1, ?2)";
static const char SQL_MODEL_NEXT[] =
	"UPDATE models SET next_version = next_version + 1 WHERE name = ?1"
	" RETURNING next_version - 1";
static const char SQL_MODEL_VERSION_DELETE[] =
	"DELETE FROM model_versions WHERE name = ?1 AND version = ?2";
static const char SQL_REVAL_DELETE[] =
	"DELETE FROM model_revalidations WHERE name = ?1 AND alias = ?2";
static const char SQL_MODEL_ALIAS_GET[] =
	"SELECT version FROM model_aliases WHERE name = ?1 AND alias = ?2";
static const char SQL_MODEL_ALIAS_PUT[] =
	"INSERT INTO model_aliases (name, alias, version, updated_by,"
	" updated_at) VALUES (?1, ?2, ?3, ?4, ?5)"
	" ON CONFLICT (name, alias) DO UPDATE SET version = ?3,"
	" updated_by = ?4, updated_at = ?5";
static const char SQL_MODEL_ALIAS_LIST[] =
	"SELECT alias, version, 'current' AS action, 0 AS from_version,"
	" updated_by AS actor, updated_at AS time_ms"
	" FROM model_aliases WHERE name = ?1 ORDER BY alias";
static const char SQL_MODEL_ALIAS_EVENT[] =
	"INSERT INTO model_alias_history (name, alias, action, from_version,"
	" to_version, actor, time_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
static const char SQL_MODEL_ALIAS_HISTORY[] =
	"SELECT alias, to_version AS version, action, from_version, actor,"
	" time_ms"
	" FROM model_alias_history WHERE name = ?1 ORDER BY id";
static const char SQL_MODEL_SIGNATURE_INSERT[] =
	"INSERT INTO model_signatures (name, version, key_id, public_key,"
	" signature, signed_by, signed_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";

const struct store_stmt store_model_stmts[] = {
	STORE_STMT(STMT_MODEL_LIST, SQL_MODEL_LIST, &MODEL_ROW),
	STORE_STMT(STMT_MODEL_CREATE, SQL_MODEL_CREATE, NULL),
	STORE_STMT(STMT_MODEL_NEXT, SQL_MODEL_NEXT, NULL),
	STORE_INSERT(STMT_MODEL_VERSION_INSERT, &VERSION_ROW,
		     "INSERT INTO model_versions", 0),
	STORE_STMT(STMT_MODEL_VERSION_DELETE, SQL_MODEL_VERSION_DELETE, NULL),
	STORE_SELECT(STMT_MODEL_VERSION_GET, &VERSION_ROW,
		     "FROM model_versions WHERE name = ?1 AND version = ?2"),
	STORE_SELECT(STMT_MODEL_VERSION_LIST, &VERSION_ROW,
		     "FROM model_versions WHERE name = ?1 ORDER BY version"),
	STORE_STMT(STMT_MODEL_ALIAS_GET, SQL_MODEL_ALIAS_GET, NULL),
	STORE_STMT(STMT_MODEL_ALIAS_PUT, SQL_MODEL_ALIAS_PUT, NULL),
	STORE_STMT(STMT_MODEL_ALIAS_LIST, SQL_MODEL_ALIAS_LIST, &ALIAS_ROW),
	STORE_STMT(STMT_MODEL_ALIAS_EVENT, SQL_MODEL_ALIAS_EVENT, NULL),
	STORE_STMT(STMT_MODEL_ALIAS_HISTORY, SQL_MODEL_ALIAS_HISTORY,
		   &ALIAS_ROW),
	STORE_STMT(STMT_MODEL_SIGNATURE_INSERT, SQL_MODEL_SIGNATURE_INSERT,
		   NULL),
	STORE_SELECT(STMT_MODEL_SIGNATURE_LIST, &SIGNATURE_ROW,
		     "FROM model_signatures WHERE name = ?1 AND version = ?2"
		     " ORDER BY signed_at, key_id"),
	STORE_INSERT(STMT_REVAL_PUT, &REVAL_ROW,
		     "INSERT OR REPLACE INTO model_revalidations", 0),
	STORE_SELECT(STMT_REVAL_LIST, &REVAL_ROW,
		     "FROM model_revalidations ORDER BY name, alias"),
	STORE_STMT(STMT_REVAL_DELETE, SQL_REVAL_DELETE, NULL),
	/* The database assigns the id. */
	STORE_INSERT(STMT_EVAL_INSERT, &EVAL_ROW,
		     "INSERT INTO model_evaluations", 1),
	STORE_SELECT(STMT_EVAL_LIST, &EVAL_ROW,
		     "FROM model_evaluations WHERE name = ?1 AND version = ?2"
		     " ORDER BY id"),
	{0},
};

/* ---- models ---- */

STORE_LIST_FN(kn_store_model_list, struct kn_model_row, STMT_MODEL_LIST,
	      "listing models")

STORE_LIST_FREE_FN(kn_model_list_free, struct kn_model_row, MODEL_ROW)

STORE_RELEASE_FN(kn_model_version_row_release, struct kn_model_version_row,
		 VERSION_ROW)

int kn_store_model_version_next(struct kn_store *st, const char *name,
				int64_t now_ms, int64_t *out,
				struct kn_error *err)
{
	const struct store_key create[] = {KEY_TEXT(name), KEY_I64(now_ms)};
	const struct store_key named[] = {KEY_TEXT(name)};
	const char *what = "numbering a model version";
	bool own;
	int rc = write_begin(st, &own, err);

	if (rc < 0)
		return rc;
	rc = store_run_keyed(st, STMT_MODEL_CREATE, create, N_KEYS(create),
			     what, err);
	if (rc < 0)
		goto out;
	rc = store_one_i64(st, STMT_MODEL_NEXT, named, N_KEYS(named), what,
			   out, err);
	if (rc == 1)
		rc = 0;
	else if (rc == 0)
		rc = kn_errorf(err, KN_EIO, NULL, "store: %s: no row", what);
out:
	return write_end(st, own, rc, err);
}

int kn_store_model_version_insert(struct kn_store *st,
				  const struct kn_model_version_row *v,
				  const struct kn_audit *a,
				  struct kn_error *err)
{
	static const struct store_write w = {.what = "inserting a model version"};

	return store_write_row(st, STMT_MODEL_VERSION_INSERT, v, &w, a, NULL,
			       err);
}

int kn_store_model_version_delete(struct kn_store *st, const char *name,
				  int64_t version, struct kn_error *err)
{
	const struct store_key keys[] = {KEY_TEXT(name), KEY_I64(version)};

	return store_run_keyed(st, STMT_MODEL_VERSION_DELETE, keys,
			       N_KEYS(keys), "deleting a model version", err);
}

int kn_store_model_version_get(struct kn_store *st, const char *name,
			       int64_t version,
			       struct kn_model_version_row *out,
			       struct kn_error *err)
{
	const struct store_key keys[] = {KEY_TEXT(name), KEY_I64(version)};
	int rc;

	memset(out, 0, sizeof(*out));
	rc = store_get_keyed(st, STMT_MODEL_VERSION_GET, keys, N_KEYS(keys),
			     "reading a model version", out, err);
	return store_found(rc, err, NULL, "model %s has no version %lld", name,
			   (long long)version);
}

int kn_store_model_version_list(struct kn_store *st, const char *name,
				struct kn_model_version_row **out, size_t *n,
				struct kn_error *err)
{
	const struct store_key keys[] = {KEY_TEXT(name)};

	return store_list_keyed(st, STMT_MODEL_VERSION_LIST, keys, N_KEYS(keys),
				"listing model versions", out, n, err);
}

STORE_LIST_FREE_FN(kn_model_version_list_free, struct kn_model_version_row,
		   VERSION_ROW)

int kn_store_model_alias_get(struct kn_store *st, const char *name,
			     const char *alias, int64_t *version,
			     struct kn_error *err)
{
	const struct store_key keys[] = {KEY_TEXT(name), KEY_TEXT(alias)};
	int rc = store_one_i64(st, STMT_MODEL_ALIAS_GET, keys, N_KEYS(keys),
			       "reading a model alias", version, err);

	return store_found(rc, err, NULL, "model %s has no alias %s", name,
			   alias);
}

int kn_store_model_alias_move(struct kn_store *st, const char *name,
			      const struct kn_model_alias_row *ev,
			      const struct kn_audit *a, struct kn_error *err)
{
	const struct store_key alias[] = {
		KEY_TEXT(name), KEY_TEXT(ev->alias), KEY_I64(ev->version),
		KEY_TEXT(ev->actor), KEY_I64(ev->time_ms),
	};
	const struct store_key event[] = {
		KEY_TEXT(name), KEY_TEXT(ev->alias), KEY_TEXT(ev->action),
		KEY_I64(ev->from_version), KEY_I64(ev->version),
		KEY_TEXT(ev->actor), KEY_I64(ev->time_ms),
	};
	const char *what = "moving a model alias";
	bool own;
	int rc = write_begin(st, &own, err);

	if (rc < 0)
		return rc;
	rc = store_run_keyed(st, STMT_MODEL_ALIAS_PUT, alias, N_KEYS(alias),
			     what, err);
	if (rc == 0)
		rc = store_run_keyed(st, STMT_MODEL_ALIAS_EVENT, event,
				     N_KEYS(event), what, err);
	if (rc == 0)
		rc = audit_write(st, a, NULL, err);
	return write_end(st, own, rc, err);
}

static int alias_rows(struct kn_store *st, enum stmt_id id, const char *name,
		      struct kn_model_alias_row **out, size_t *n,
		      struct kn_error *err)
{
	const struct store_key keys[] = {KEY_TEXT(name)};

	return store_list_keyed(st, id, keys, N_KEYS(keys),
				"listing model aliases", out, n, err);
}

int kn_store_model_alias_list(struct kn_store *st, const char *name,
			      struct kn_model_alias_row **out, size_t *n,
			      struct kn_error *err)
{
	return alias_rows(st, STMT_MODEL_ALIAS_LIST, name, out, n, err);
}

int kn_store_model_alias_history(struct kn_store *st, const char *name,
				 struct kn_model_alias_row **out, size_t *n,
				 struct kn_error *err)
{
	return alias_rows(st, STMT_MODEL_ALIAS_HISTORY, name, out, n, err);
}

STORE_LIST_FREE_FN(kn_model_alias_list_free, struct kn_model_alias_row,
		   ALIAS_ROW)

int kn_store_model_signature_insert(struct kn_store *st, const char *name,
				    int64_t version,
				    const struct kn_model_signature_row *sig,
				    const struct kn_audit *a,
				    struct kn_error *err)
{
	static const struct store_write w = {
		.what = "inserting a model signature"};
	const struct store_key keys[] = {
		KEY_TEXT(name), KEY_I64(version), KEY_TEXT(sig->key_id),
		KEY_TEXT(sig->public_key), KEY_TEXT(sig->signature),
		KEY_TEXT(sig->signed_by), KEY_I64(sig->signed_at),
	};

	return store_write_keyed(st, STMT_MODEL_SIGNATURE_INSERT, keys,
				 N_KEYS(keys), &w, a, err);
}

int kn_store_model_signature_list(struct kn_store *st, const char *name,
				  int64_t version,
				  struct kn_model_signature_row **out,
				  size_t *n, struct kn_error *err)
{
	const struct store_key keys[] = {KEY_TEXT(name), KEY_I64(version)};

	return store_list_keyed(st, STMT_MODEL_SIGNATURE_LIST, keys,
				N_KEYS(keys), "listing model signatures", out,
				n, err);
}

STORE_LIST_FREE_FN(kn_model_signature_list_free, struct kn_model_signature_row,
		   SIGNATURE_ROW)

/* ---- model re-validation ---- */

int kn_store_revalidation_put(struct kn_store *st,
			      const struct kn_revalidation_row *r,
			      const struct kn_audit *a, struct kn_error *err)
{
	static const struct store_write w = {
		.what = "saving a model re-validation"};

	return store_write_row(st, STMT_REVAL_PUT, r, &w, a, NULL, err);
}

STORE_LIST_FN(kn_store_revalidation_list, struct kn_revalidation_row,
	      STMT_REVAL_LIST, "listing model re-validations")

STORE_LIST_FREE_FN(kn_revalidation_list_free, struct kn_revalidation_row,
		   REVAL_ROW)

int kn_store_revalidation_delete(struct kn_store *st, const char *name,
				 const char *alias, const struct kn_audit *a,
				 struct kn_error *err)
{
	static const struct store_write w = {
		.what = "removing a model re-validation"};
	const struct store_key keys[] = {KEY_TEXT(name), KEY_TEXT(alias)};

	return store_write_keyed(st, STMT_REVAL_DELETE, keys, N_KEYS(keys), &w,
				 a, err);
}

STORE_PUT_FN(kn_store_evaluation_add, struct kn_evaluation_row,
	     STMT_EVAL_INSERT, "recording a model evaluation")

int kn_store_evaluation_list(struct kn_store *st, const char *name,
			     int64_t version, struct kn_evaluation_row **out,
			     size_t *n, struct kn_error *err)
{
	const struct store_key keys[] = {KEY_TEXT(name), KEY_I64(version)};

	return store_list_keyed(st, STMT_EVAL_LIST, keys, N_KEYS(keys),
				"listing model evaluations", out, n, err);
}

STORE_LIST_FREE_FN(kn_evaluation_list_free, struct kn_evaluation_row, EVAL_ROW)
