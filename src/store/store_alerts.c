/*
 * store alerts: alerts that fired and resolved (the server's alert rules).
 */
#include "internal.h"

#define A(field) STORE_COL(struct kn_alert_row, field)
static const struct store_row ALERT_ROW =
	STORE_ROW(struct kn_alert_row, "alert", A(id), A(fingerprint), A(rule),
		  A(severity), A(state), A(labels_json), A(summary), A(value),
		  A(active_at), A(fired_at), A(resolved_at));
#undef A

static const char SQL_ALERT_RESOLVE[] =
	"UPDATE alerts SET state = 'resolved', resolved_at = ?2"
	" WHERE state = 'firing' AND fingerprint = ?1";
static const char SQL_ALERT_RESOLVE_ALL[] =
	"UPDATE alerts SET state = 'resolved', resolved_at = ?1"
	" WHERE state = 'firing'";


const struct store_stmt store_alert_stmts[] = {
	/* The database assigns the id. */
	STORE_INSERT(STMT_ALERT_INSERT, &ALERT_ROW, "INSERT INTO alerts", 1),
	STORE_STMT(STMT_ALERT_RESOLVE, SQL_ALERT_RESOLVE, NULL),
	STORE_STMT(STMT_ALERT_RESOLVE_ALL, SQL_ALERT_RESOLVE_ALL, NULL),
	STORE_SELECT(STMT_ALERT_LIST, &ALERT_ROW,
		     "FROM alerts WHERE state = 'firing' OR resolved_at >= ?1"
		     " ORDER BY state = 'firing' DESC,"
		     " max(fired_at, resolved_at) DESC, id DESC LIMIT ?2"),
	{0},
};

STORE_RELEASE_FN(kn_alert_row_release, struct kn_alert_row, ALERT_ROW)

int kn_store_alert_fire(struct kn_store *st, const struct kn_alert_row *a,
			int64_t *out_id, struct kn_error *err)
{
	struct kn_alert_row row = *a;
	int rc;

	/* An alert is written as it fires; resolving it is a later write. */
	row.state = "firing";
	row.resolved_at = 0;
	rc = store_put(st, STMT_ALERT_INSERT, &row, "recording an alert", err);
	if (rc == 0 && out_id)
		*out_id = sqlite3_last_insert_rowid(st->db);
	return rc;
}

int kn_store_alert_resolve(struct kn_store *st, const char *fingerprint,
			   int64_t at, struct kn_error *err)
{
	const struct store_key keys[] = {KEY_TEXT(fingerprint), KEY_I64(at)};

	return store_run_keyed(st, STMT_ALERT_RESOLVE, keys, N_KEYS(keys),
			       "resolving an alert", err);
}

int kn_store_alert_resolve_all(struct kn_store *st, int64_t at,
			       struct kn_error *err)
{
	const struct store_key keys[] = {KEY_I64(at)};

	return store_run_keyed(st, STMT_ALERT_RESOLVE_ALL, keys, N_KEYS(keys),
			       "resolving alerts", err);
}

int kn_store_alert_list(struct kn_store *st, int64_t resolved_since,
			int limit, struct kn_alert_row **out, size_t *n,
			struct kn_error *err)
{
	const struct store_key keys[] = {
		KEY_I64(resolved_since),
		KEY_I64(limit),
	};

	return store_list_keyed(st, STMT_ALERT_LIST, keys, N_KEYS(keys),
				"listing alerts", out, n, err);
}

STORE_LIST_FREE_FN(kn_alert_list_free, struct kn_alert_row, ALERT_ROW)
