/*
 * store idempotency keys: the answer a create request got, by its
 * caller and Idempotency-Key, so a retry gets that answer again instead
 * of a second object. The row is written in the transaction that wrote
 * the object (the caller holds kn_store_begin around both), so a crash
 * leaves either both or neither: a retry after it never finds a key
 * without its object, nor an object without its key. Rows expire after
 * a day (kn_store_idem_expire), the window clients are told to retry in.
 */
#include "internal.h"

#define I(field) STORE_COL(struct kn_idem_row, field)
static const struct store_row IDEM_ROW =
	STORE_ROW(struct kn_idem_row, "idempotency key", I(owner), I(key),
		  I(route), I(body_sha256), I(status), I(answer),
		  I(created_at));
#undef I

static const char SQL_IDEM_EXPIRE[] =
	"DELETE FROM idempotency_keys WHERE created_at < ?1";

const struct store_stmt store_idem_stmts[] = {
	STORE_SELECT(STMT_IDEM_GET, &IDEM_ROW,
		     "FROM idempotency_keys"
		     " WHERE owner = ?1 AND key = ?2 AND created_at >= ?3"),
	/* A row past its day may still be there: a reuse of the key
	   replaces it. */
	STORE_INSERT(STMT_IDEM_PUT, &IDEM_ROW,
		     "INSERT OR REPLACE INTO idempotency_keys", 0),
	STORE_STMT(STMT_IDEM_EXPIRE, SQL_IDEM_EXPIRE, NULL),
	{0},
};

STORE_RELEASE_FN(kn_idem_row_release, struct kn_idem_row, IDEM_ROW)

int kn_store_idem_get(struct kn_store *st, const char *owner, const char *key,
		      int64_t since, struct kn_idem_row *out,
		      struct kn_error *err)
{
	const struct store_key keys[] = {KEY_TEXT(owner), KEY_TEXT(key),
					 KEY_I64(since)};

	return store_get_keyed(st, STMT_IDEM_GET, keys, N_KEYS(keys),
			       "reading an idempotency key", out, err);
}

STORE_PUT_FN(kn_store_idem_put, struct kn_idem_row, STMT_IDEM_PUT,
	     "recording an idempotency key")

int kn_store_idem_expire(struct kn_store *st, int64_t before,
			 struct kn_error *err)
{
	const struct store_key keys[] = {KEY_I64(before)};

	return store_run_keyed(st, STMT_IDEM_EXPIRE, keys, N_KEYS(keys),
			       "expiring idempotency keys", err);
}
