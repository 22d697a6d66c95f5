/*
 * store tokens: API tokens, kept as the hash of their secret.
 */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>

/*
 * last_used_at is informational ("used 3m ago"); writing it on every API
 * request would turn each read into an fsync'd write, so it is refreshed
 * only when older than this.
 */
#define TOKEN_LAST_USED_GRANULARITY_MS 60000

#define T(field) STORE_COL(struct kn_token_row, field)
static const struct store_row TOKEN_ROW =
	STORE_ROW(struct kn_token_row, "token", T(id), T(name), T(role),
		  T(hash), T(created_by), T(created_at), T(revoked_at),
		  T(last_used_at));
#undef T

static const char SQL_TOKEN_TOUCH[] =
	"UPDATE tokens SET last_used_at = ?1 WHERE id = ?2";
static const char SQL_TOKEN_REVOKE[] =
	"UPDATE tokens SET revoked_at = ?1 WHERE name = ?2 AND revoked_at = 0";
static const char SQL_TOKEN_COUNT[] =
	"SELECT count(*) FROM tokens WHERE revoked_at = 0";

const struct store_stmt store_token_stmts[] = {
	/* The database assigns the id. */
	STORE_INSERT(STMT_TOKEN_INSERT, &TOKEN_ROW, "INSERT INTO tokens", 1),
	STORE_SELECT(STMT_TOKEN_BY_HASH, &TOKEN_ROW,
		     "FROM tokens WHERE hash = ?1 AND revoked_at = 0"),
	STORE_STMT(STMT_TOKEN_TOUCH, SQL_TOKEN_TOUCH, NULL),
	STORE_SELECT(STMT_TOKEN_LIST, &TOKEN_ROW, "FROM tokens ORDER BY id"),
	STORE_STMT(STMT_TOKEN_REVOKE, SQL_TOKEN_REVOKE, NULL),
	STORE_STMT(STMT_TOKEN_COUNT, SQL_TOKEN_COUNT, NULL),
	{0},
};

STORE_RELEASE_FN(kn_token_row_release, struct kn_token_row, TOKEN_ROW)

int kn_store_token_insert(struct kn_store *st, const struct kn_token_row *t,
			  const struct kn_audit *a, int64_t *out_id,
			  struct kn_error *err)
{
	struct store_write w = {.what = "inserting a token"};
	int rc;

	w.object = kn_asprintf("token/%s", t->name);
	/* The only unique key on tokens is the active name. */
	w.conflict = kn_asprintf("a token named %s already exists", t->name);
	rc = store_write_row(st, STMT_TOKEN_INSERT, t, &w, a, out_id, err);
	KN_FREE_ALL((char *)w.object, (char *)w.conflict);
	return rc;
}

int kn_store_token_by_hash(struct kn_store *st, const char *hash,
			   struct kn_token_row *out, struct kn_error *err)
{
	const struct store_key keys[] = {KEY_TEXT(hash)};
	struct kn_token_row t = {0};
	struct kn_error touch_err;
	int64_t now;
	int rc = store_get_keyed(st, STMT_TOKEN_BY_HASH, keys, N_KEYS(keys),
				 "looking up a token", &t, err);

	rc = store_found(rc, err, "token", "no active token matches");
	if (rc < 0)
		return rc;

	now = kn_now_ms();
	if (now - t.last_used_at >= TOKEN_LAST_USED_GRANULARITY_MS) {
		const struct store_key use[] = {KEY_I64(now), KEY_I64(t.id)};

		rc = store_run_keyed(st, STMT_TOKEN_TOUCH, use, N_KEYS(use),
				     "recording a token's use", &touch_err);
		/* Informational: a full disk must not refuse every caller,
		   reads included; the next use past the minute retries. */
		if (rc < 0 && touch_err.code == KN_ENOSPACE)
			rc = 0;
		else if (rc == 0)
			t.last_used_at = now;
		if (rc < 0 && err)
			*err = touch_err;
	}
	if (rc < 0) {
		kn_token_row_release(&t);
		return rc;
	}
	*out = t;
	return 0;
}

STORE_LIST_FN(kn_store_token_list, struct kn_token_row, STMT_TOKEN_LIST,
	      "listing tokens")

STORE_LIST_FREE_FN(kn_token_list_free, struct kn_token_row, TOKEN_ROW)

int kn_store_token_revoke(struct kn_store *st, const char *name,
			  const struct kn_audit *a, struct kn_error *err)
{
	static const struct store_named named = {
		.what = "revoking a token", .object_kind = "token",
		.missing = "no active token named"};
	const struct store_key keys[] = {KEY_I64(kn_now_ms()), KEY_TEXT(name)};

	return store_write_named(st, STMT_TOKEN_REVOKE, keys, N_KEYS(keys),
				 &named, name, a, err);
}

int kn_store_token_count(struct kn_store *st, int *out, struct kn_error *err)
{
	int64_t count = 0;
	int rc = store_one_i64(st, STMT_TOKEN_COUNT, NULL, 0, "counting tokens",
			       &count, err);

	if (rc < 0)
		return rc;
	*out = (int)count;
	return 0;
}
