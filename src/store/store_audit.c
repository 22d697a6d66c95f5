/*
 * store audit: the audit log and its hash chain (HMAC-SHA256 over each
 * row and the previous row's hash, as store.h spells out), and the walk
 * that verifies it.
 */
#include "internal.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

/* The audit list's page size when the filter names none. */
#define AUDIT_LIST_DEFAULT_LIMIT 100

/* The audit table's columns: a row's, and a link's below. */
#define AUDIT_FIELDS(X)                                                    \
	X(id) X(time_ms) X(actor) X(role) X(action) X(object) X(outcome)    \
	X(detail) X(hash)
#define A(field) STORE_COL(struct kn_audit, field),
static const struct store_row AUDIT_ROW =
	STORE_ROW(struct kn_audit, "audit row", AUDIT_FIELDS(A));
#undef A

/* The verifying walk also reads each row's link to the one before. */
struct audit_link {
	struct kn_audit a;
	char *prev_hash;
};
#define W(field)                                                           \
	STORE_COL_AS(struct audit_link, a.field, #field,                     \
		     STORE_TYPE_OF(struct audit_link, a.field)),
static const struct store_row AUDIT_LINK_ROW =
	STORE_ROW(struct audit_link, "audit row",
		  AUDIT_FIELDS(W) STORE_COL(struct audit_link, prev_hash));
#undef W

/* The newest row: where the chain's head is. */
struct audit_head {
	int64_t id;
	char *hash;
};
static const struct store_row AUDIT_HEAD_ROW =
	STORE_ROW(struct audit_head, "audit head",
		  STORE_COL(struct audit_head, id),
		  STORE_COL(struct audit_head, hash));

static const char SQL_AUDIT_INSERT[] =
	"INSERT INTO audit (time_ms, actor, role, action, object, outcome,"
	" detail) VALUES (:time_ms, :actor, :role, :action, :object, :outcome,"
	" :detail)";
/* The chain: the row before ?1, and filling in a row's links. */
static const char SQL_AUDIT_PREV[] =
	"SELECT hash FROM audit WHERE id < ?1 ORDER BY id DESC LIMIT 1";
static const char SQL_AUDIT_SET_CHAIN[] =
	"UPDATE audit SET prev_hash = ?1, hash = ?2 WHERE id = ?3";
static const char SQL_AUDIT_HASH_OF[] =
	"SELECT hash FROM audit WHERE id = ?1";
static const char SQL_AUDIT_MAX_ID[] = "SELECT coalesce(max(id), 0) FROM audit";

const struct store_stmt store_audit_stmts[] = {
	STORE_STMT(STMT_AUDIT_INSERT, SQL_AUDIT_INSERT, &AUDIT_ROW),
	/* ?2 is an action prefix; substr keeps "_" and "%" literal, unlike
	   LIKE. */
	STORE_SELECT(STMT_AUDIT_LIST, &AUDIT_ROW,
		     "FROM audit WHERE (?1 IS NULL OR actor = ?1)"
		     " AND (?2 IS NULL OR substr(action, 1, length(?2)) = ?2)"
		     " AND time_ms >= ?3"
		     " ORDER BY time_ms DESC, id DESC LIMIT ?4"),
	STORE_STMT(STMT_AUDIT_PREV, SQL_AUDIT_PREV, NULL),
	STORE_STMT(STMT_AUDIT_SET_CHAIN, SQL_AUDIT_SET_CHAIN, NULL),
	STORE_SELECT(STMT_AUDIT_UNCHAINED, &AUDIT_ROW,
		     "FROM audit WHERE hash IS NULL ORDER BY id"),
	STORE_SELECT(STMT_AUDIT_WALK, &AUDIT_LINK_ROW,
		     "FROM audit ORDER BY id"),
	STORE_SELECT(STMT_AUDIT_HEAD, &AUDIT_HEAD_ROW,
		     "FROM audit ORDER BY id DESC LIMIT 1"),
	STORE_STMT(STMT_AUDIT_HASH_OF, SQL_AUDIT_HASH_OF, NULL),
	STORE_STMT(STMT_AUDIT_MAX_ID, SQL_AUDIT_MAX_ID, NULL),
	{0},
};

STORE_RELEASE_FN(kn_audit_release, struct kn_audit, AUDIT_ROW)

/* ---- the audit chain ---- */

static void put_u64(unsigned char *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (unsigned char)v;
}

/* A string field: 4-byte big-endian length, 0xffffffff for NULL. */
static void mac_field(EVP_MAC_CTX *ctx, const char *v)
{
	unsigned char len[4];
	uint32_t n = v ? (uint32_t)strlen(v) : UINT32_MAX;

	for (int i = 3; i >= 0; i--, n >>= 8)
		len[i] = (unsigned char)n;
	EVP_MAC_update(ctx, len, sizeof(len));
	if (v)
		EVP_MAC_update(ctx, (const unsigned char *)v, strlen(v));
}

/*
 * An HMAC-SHA256 context keyed once; chain_hash copies it per row, so
 * the key schedule is not redone for every row a verify reads.
 */
static EVP_MAC_CTX *mac_new(const unsigned char key[KN_AUDIT_KEY_LEN])
{
	EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
	EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
	OSSL_PARAM params[] = {
		OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST,
						 (char *)"SHA256", 0),
		OSSL_PARAM_construct_end(),
	};

	EVP_MAC_free(mac);
	if (ctx && EVP_MAC_init(ctx, key, KN_AUDIT_KEY_LEN, params) != 1) {
		EVP_MAC_CTX_free(ctx);
		ctx = NULL;
	}
	return ctx;
}

/* 64 lowercase hex digits into 32 bytes; false when it is not that. */
static bool hash_from_hex(const char *hex, unsigned char out[32])
{
	return hex && kn_unhex(hex, 32, out);
}

/*
 * hash = HMAC-SHA256(key, prev || id || time || fields), as store.h
 * spells out; keyed is mac_new's context. The id is a parameter so verify
 * can ask whether a row's hash belongs to another position.
 */
static void chain_hash(EVP_MAC_CTX *keyed, const unsigned char prev[32],
		       int64_t id, const struct kn_audit *a,
		       char out[KN_AUDIT_HASH_HEX_LEN + 1])
{
	unsigned char num[16], mac[EVP_MAX_MD_SIZE];
	size_t len = 0;
	EVP_MAC_CTX *ctx = EVP_MAC_CTX_dup(keyed);

	if (!ctx)
		abort(); /* out of memory, as kn_xmalloc */
	put_u64(num, (uint64_t)id);
	put_u64(num + 8, (uint64_t)a->time_ms);
	EVP_MAC_update(ctx, prev, 32);
	EVP_MAC_update(ctx, num, sizeof(num));
	mac_field(ctx, a->actor);
	mac_field(ctx, a->role);
	mac_field(ctx, a->action);
	mac_field(ctx, a->object);
	mac_field(ctx, a->outcome);
	mac_field(ctx, a->detail);
	EVP_MAC_final(ctx, mac, &len, sizeof(mac));
	EVP_MAC_CTX_free(ctx);
	kn_hex(mac, 32, out);
}

/* The hash of the row before id (32 zero bytes when there is none). */
static int chain_prev(struct kn_store *st, int64_t id, unsigned char prev[32],
		      char prev_hex[KN_AUDIT_HASH_HEX_LEN + 1],
		      struct kn_error *err)
{
	const struct store_key keys[] = {KEY_I64(id)};
	char *h = NULL;
	int rc;

	memset(prev, 0, 32);
	kn_hex(prev, 32, prev_hex);
	rc = store_one_text(st, STMT_AUDIT_PREV, keys, N_KEYS(keys),
			    "reading the audit chain", &h, err);
	if (rc == 1) {
		if (!hash_from_hex(h, prev))
			rc = kn_errorf(err, KN_EIO, NULL,
				       "store: audit row before %lld has no"
				       " valid chain hash",
				       (long long)id);
		else
			kn_hex(prev, 32, prev_hex);
	}
	free(h);
	return rc < 0 ? rc : 0;
}

/* Link row a (already inserted, a->id set) to the row before it. */
static int chain_row(struct kn_store *st, const struct kn_audit *a,
		     struct kn_error *err)
{
	unsigned char prev[32];
	char prev_hex[KN_AUDIT_HASH_HEX_LEN + 1];
	char hash[KN_AUDIT_HASH_HEX_LEN + 1];
	const struct store_key keys[] = {KEY_TEXT(prev_hex), KEY_TEXT(hash),
					 KEY_I64(a->id)};
	int rc = chain_prev(st, a->id, prev, prev_hex, err);

	if (rc < 0)
		return rc;
	chain_hash(st->audit_mac, prev, a->id, a, hash);
	rc = store_run_keyed(st, STMT_AUDIT_SET_CHAIN, keys, N_KEYS(keys),
			     "chaining an audit row", err);
	if (rc == 0) {
		st->head_dirty = true;
		st->head_id = a->id;
		memcpy(st->head_hash, hash, sizeof(hash));
	}
	return rc;
}

/*
 * Insert a's row (nothing when a is NULL) and chain it. object stands in
 * for a->object when that is NULL, so a caller can audit a job before it
 * has an id. Runs inside the caller's transaction.
 */
int audit_write(struct kn_store *st, const struct kn_audit *a,
		       const char *object, struct kn_error *err)
{
	struct kn_audit row;
	int rc;

	if (!a)
		return 0;
	row = *a;
	row.time_ms = a->time_ms ? a->time_ms : kn_now_ms();
	row.object = a->object ? a->object : (char *)object;
	rc = store_put(st, STMT_AUDIT_INSERT, &row, "writing an audit row", err);
	if (rc < 0 || !st->audit_mac)
		return rc;
	row.id = sqlite3_last_insert_rowid(st->db);
	return chain_row(st, &row, err);
}

int kn_store_audit_insert(struct kn_store *st, const struct kn_audit *a,
			  struct kn_error *err)
{
	bool own;
	int rc = write_begin(st, &own, err);

	if (rc < 0)
		return rc;
	rc = audit_write(st, a, NULL, err);
	return write_end(st, own, rc, err);
}

int kn_store_audit_list(struct kn_store *st, const struct kn_audit_filter *f,
			struct kn_audit **out, size_t *n, struct kn_error *err)
{
	static const struct kn_audit_filter none = {0};
	const struct kn_audit_filter *by = f ? f : &none;
	const struct store_key keys[] = {
		KEY_TEXT(by->actor), KEY_TEXT(by->action), KEY_I64(by->since_ms),
		KEY_I64(by->limit > 0 ? by->limit : AUDIT_LIST_DEFAULT_LIMIT),
	};

	return store_list_keyed(st, STMT_AUDIT_LIST, keys, N_KEYS(keys),
				"listing the audit log", out, n, err);
}

STORE_LIST_FREE_FN(kn_audit_list_free, struct kn_audit, AUDIT_ROW)

int kn_store_audit_chain_start(struct kn_store *st,
			       const unsigned char key[KN_AUDIT_KEY_LEN],
			       kn_store_audit_head_cb on_head, void *arg,
			       int64_t *chained, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_AUDIT_UNCHAINED];
	const char *what = "chaining the audit log";
	struct kn_audit *rows = NULL;
	size_t count = 0;
	bool own;
	int rc;

	EVP_MAC_CTX_free(st->audit_mac);
	st->audit_mac = mac_new(key);
	if (!st->audit_mac)
		return kn_errorf(err, KN_EIO, NULL,
				 "store: OpenSSL has no HMAC-SHA256");
	st->on_head = on_head;
	st->on_head_arg = arg;
	rc = write_begin(st, &own, err);
	if (rc < 0)
		return rc;
	/* Read them all first: one statement steps while another updates. */
	rc = store_list(st, s, &AUDIT_ROW, what, &rows, &count, err);
	for (size_t i = 0; rc == 0 && i < count; i++)
		rc = chain_row(st, &rows[i], err);
	kn_audit_list_free(rows, count);
	rc = write_end(st, own, rc, err);
	if (rc == 0 && chained)
		*chained = (int64_t)count;
	return rc;
}

int kn_store_audit_has_chain(struct kn_store *st, bool *out,
			     struct kn_error *err)
{
	int64_t id;
	char hash[KN_AUDIT_HASH_HEX_LEN + 1];
	int rc = kn_store_audit_head(st, &id, hash, err);

	if (rc == 0)
		*out = hash[0] != '\0';
	return rc;
}

int kn_store_audit_head(struct kn_store *st, int64_t *id,
			char hash[KN_AUDIT_HASH_HEX_LEN + 1],
			struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_AUDIT_HEAD];
	struct audit_head head = {0};
	int rc = store_get(st, s, &AUDIT_HEAD_ROW, "reading the audit head",
			   &head, err);

	if (rc < 0)
		return rc;
	*id = head.id;
	kn_strlcpy(hash, head.hash ? head.hash : "",
		   KN_AUDIT_HASH_HEX_LEN + 1);
	store_row_release(&AUDIT_HEAD_ROW, &head);
	return 0;
}

int kn_store_audit_hash_of(struct kn_store *st, int64_t id,
			   char hash[KN_AUDIT_HASH_HEX_LEN + 1],
			   struct kn_error *err)
{
	const struct store_key keys[] = {KEY_I64(id)};
	char *h = NULL;
	int rc = store_one_text(st, STMT_AUDIT_HASH_OF, keys, N_KEYS(keys),
				"reading an audit row", &h, err);

	if (rc == 1)
		kn_strlcpy(hash, h ? h : "", KN_AUDIT_HASH_HEX_LEN + 1);
	rc = store_found(rc, err, NULL, "audit row %lld not found",
			 (long long)id);
	free(h);
	return rc;
}

static const char *const AUDIT_PROBLEM_NAMES[] = {
	[KN_AUDIT_OK] = "ok",
	[KN_AUDIT_EDITED] = "edited",
	[KN_AUDIT_REORDERED] = "reordered",
	[KN_AUDIT_DELETED] = "deleted",
	[KN_AUDIT_TRUNCATED] = "truncated",
	[KN_AUDIT_UNCHAINED] = "unchained",
};

const char *kn_audit_problem_name(enum kn_audit_problem p)
{
	if ((unsigned)p >= sizeof(AUDIT_PROBLEM_NAMES) /
				   sizeof(AUDIT_PROBLEM_NAMES[0]))
		return "unknown";
	return AUDIT_PROBLEM_NAMES[p];
}

static void verify_bad(struct kn_audit_verify *v, enum kn_audit_problem p,
		       int64_t id, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void verify_bad(struct kn_audit_verify *v, enum kn_audit_problem p,
		       int64_t id, const char *fmt, ...)
{
	va_list ap;

	v->problem = p;
	v->bad_id = id;
	va_start(ap, fmt);
	vsnprintf(v->message, sizeof(v->message), fmt, ap);
	va_end(ap);
}

/*
 * Row a's fields do not match its hash: was it written at another id
 * (rows swapped or moved)? Tried for every id the log has ever used, so
 * this costs one more pass, and only once, at the first bad row.
 */
static int64_t written_as(struct kn_store *st, EVP_MAC_CTX *keyed,
			  const struct kn_audit *a, const unsigned char prev[32],
			  struct kn_error *err)
{
	char hash[KN_AUDIT_HASH_HEX_LEN + 1];
	int64_t max_id = 0;

	store_one_i64(st, STMT_AUDIT_MAX_ID, NULL, 0, "reading the audit log",
		      &max_id, err);
	for (int64_t id = 1; id <= max_id; id++) {
		if (id == a->id)
			continue;
		chain_hash(keyed, prev, id, a, hash);
		if (!strcmp(hash, a->hash))
			return id;
	}
	return 0;
}

/* One row of the walk; false when it is bad (v filled). */
static bool verify_row(struct kn_store *st, EVP_MAC_CTX *keyed,
		       const struct kn_audit *a, const char *prev_hash_col,
		       int64_t last_id, const char *last_hash,
		       struct kn_audit_verify *v, struct kn_error *err)
{
	unsigned char prev[32];
	char hash[KN_AUDIT_HASH_HEX_LEN + 1];
	int64_t other;

	if (!a->hash) {
		verify_bad(v, KN_AUDIT_UNCHAINED, a->id,
			   "row %lld has no chain hash (written without the"
			   " chain, or its hash was removed)",
			   (long long)a->id);
		return false;
	}
	if (a->id != last_id + 1) {
		verify_bad(v, KN_AUDIT_DELETED, last_id + 1,
			   last_id + 1 == a->id - 1
				   ? "row %lld is missing (deleted): the log"
				     " goes from row %lld to row %lld"
				   : "rows %lld.. are missing (deleted): the log"
				     " goes from row %lld to row %lld",
			   (long long)(last_id + 1), (long long)last_id,
			   (long long)a->id);
		return false;
	}
	if (!hash_from_hex(prev_hash_col, prev)) {
		verify_bad(v, KN_AUDIT_EDITED, a->id,
			   "row %lld: its link to the previous row is not a"
			   " hash (edited)",
			   (long long)a->id);
		return false;
	}
	chain_hash(keyed, prev, a->id, a, hash);
	if (strcmp(hash, a->hash) != 0) {
		other = written_as(st, keyed, a, prev, err);
		if (other)
			verify_bad(v, KN_AUDIT_REORDERED, a->id,
				   "row %lld holds the row written as row"
				   " %lld (rows were reordered)",
				   (long long)a->id, (long long)other);
		else
			verify_bad(v, KN_AUDIT_EDITED, a->id,
				   "row %lld (%s %s by %s) does not match its"
				   " hash (edited)",
				   (long long)a->id, a->action ? a->action : "",
				   a->object ? a->object : "",
				   a->actor ? a->actor : "");
		return false;
	}
	if (strcmp(prev_hash_col, last_hash) != 0) {
		verify_bad(v, KN_AUDIT_DELETED, a->id,
			   "row %lld does not follow row %lld (a row between"
			   " them was deleted or replaced)",
			   (long long)a->id, (long long)last_id);
		return false;
	}
	return true;
}

int kn_store_audit_verify(struct kn_store *st,
			  const unsigned char key[KN_AUDIT_KEY_LEN],
			  int64_t anchor_id, const char *anchor_hash,
			  struct kn_audit_verify *out, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_AUDIT_WALK];
	const char *what = "reading the audit log";
	EVP_MAC_CTX *keyed = mac_new(key);
	struct kn_audit_verify v;
	char last_hash[KN_AUDIT_HASH_HEX_LEN + 1];
	char anchor_row_hash[KN_AUDIT_HASH_HEX_LEN + 1] = "";
	unsigned char zero[32] = {0};
	int64_t last_id = 0;
	bool good = true;
	int rc;

	if (!keyed)
		return kn_errorf(err, KN_EIO, NULL,
				 "store: OpenSSL has no HMAC-SHA256");
	memset(&v, 0, sizeof(v));
	kn_hex(zero, 32, last_hash);
	while (good && (rc = step_row(st, s, what, err)) == 1) {
		struct audit_link row;

		rc = store_read_row(s, &AUDIT_LINK_ROW, &row, err);
		if (rc < 0)
			break;
		v.rows++;
		good = verify_row(st, keyed, &row.a,
				  row.prev_hash ? row.prev_hash : "", last_id,
				  last_hash, &v, err);
		if (good) {
			last_id = row.a.id;
			kn_strlcpy(last_hash, row.a.hash, sizeof(last_hash));
			if (row.a.id == anchor_id)
				kn_strlcpy(anchor_row_hash, row.a.hash,
					   sizeof(anchor_row_hash));
		}
		store_row_release(&AUDIT_LINK_ROW, &row);
	}
	stmt_done(s);
	EVP_MAC_CTX_free(keyed);
	if (rc < 0)
		return rc;
	if (good && anchor_id > last_id)
		verify_bad(&v, KN_AUDIT_TRUNCATED, last_id + 1,
			   "row %lld is missing: the log ends at row %lld but"
			   " its recorded head is row %lld (rows were deleted"
			   " from the end)",
			   (long long)(last_id + 1), (long long)last_id,
			   (long long)anchor_id);
	else if (good && anchor_id > 0 && anchor_hash &&
		 strcmp(anchor_row_hash, anchor_hash) != 0)
		verify_bad(&v, KN_AUDIT_TRUNCATED, anchor_id,
			   "row %lld is not the row recorded as the head"
			   " (rows were deleted from the end and others"
			   " written in their place)",
			   (long long)anchor_id);
	v.head_id = last_id;
	kn_strlcpy(v.head_hash, last_id ? last_hash : "", sizeof(v.head_hash));
	*out = v;
	return 0;
}
