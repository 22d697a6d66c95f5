/*
 * Unit tests for the audit hash chain: the hash of known rows against
 * one computed here with OpenSSL's HMAC() over an encoding written out by
 * hand, and verify naming the first bad row after each kind of tampering
 * (done through a second SQLite connection, as someone editing kiln.db
 * would).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sqlite3.h>

#include "base/base.h"
#include "base/tests/testmain.h"
#include "store/store.h"

struct fixture {
	char dir[64];
	char path[128];
	struct kn_store *st;
	unsigned char key[KN_AUDIT_KEY_LEN];
	int heads;            /* on_head calls */
	int64_t head_id;
	char head_hash[KN_AUDIT_HASH_HEX_LEN + 1];
};

static void on_head(void *arg, int64_t id, const char *hash)
{
	struct fixture *fx = arg;

	fx->heads++;
	fx->head_id = id;
	kn_strlcpy(fx->head_hash, hash, sizeof(fx->head_hash));
}

static int setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));
	struct kn_error err = {0};

	if (!fx)
		return -1;
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/kn-chain-test-XXXXXX");
	if (!mkdtemp(fx->dir))
		return -1;
	snprintf(fx->path, sizeof(fx->path), "%s/kiln.db", fx->dir);
	for (int i = 0; i < KN_AUDIT_KEY_LEN; i++)
		fx->key[i] = (unsigned char)i;
	if (kn_store_open(fx->path, &fx->st, &err) < 0) {
		fprintf(stderr, "open: %s\n", err.message);
		return -1;
	}
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *fx = *state;

	kn_store_free(fx->st);
	kn_rm_rf(fx->dir);
	free(fx);
	return 0;
}

static void start_chain(struct fixture *fx, int64_t want_chained)
{
	struct kn_error err = {0};
	int64_t chained = -1;

	assert_int_equal(kn_store_audit_chain_start(fx->st, fx->key, on_head,
						    fx, &chained, &err),
			 0);
	assert_int_equal(chained, want_chained);
}

static void insert(struct fixture *fx, int64_t time_ms, const char *actor,
		   const char *role, const char *action, const char *object,
		   const char *outcome, const char *detail)
{
	struct kn_audit a = {
		.time_ms = time_ms,
		.actor = (char *)actor,
		.role = (char *)role,
		.action = (char *)action,
		.object = (char *)object,
		.outcome = (char *)outcome,
		.detail = (char *)detail,
	};
	struct kn_error err = {0};

	assert_int_equal(kn_store_audit_insert(fx->st, &a, &err), 0);
}

/* Rows 1..n, each a job submit by alice at time 1000 + i. */
static void insert_rows(struct fixture *fx, int n)
{
	for (int i = 1; i <= n; i++) {
		char object[32];

		snprintf(object, sizeof(object), "job/%d", i);
		insert(fx, 1000 + i, "alice", "user", "job.submit", object,
		       "ok", NULL);
	}
}

static void raw_exec(const char *path, const char *sql)
{
	sqlite3 *db = NULL;

	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
}

static void verify(struct fixture *fx, int64_t anchor_id,
		   const char *anchor_hash, struct kn_audit_verify *v)
{
	struct kn_error err = {0};

	assert_int_equal(kn_store_audit_verify(fx->st, fx->key, anchor_id,
					       anchor_hash, v, &err),
			 0);
}

/* ---- the expected hash, built independently ---- */

static size_t put_be(unsigned char *p, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++)
		p[i] = (unsigned char)(v >> (8 * (bytes - 1 - i)));
	return (size_t)bytes;
}

static size_t put_str(unsigned char *p, const char *s)
{
	size_t n;

	if (!s)
		return put_be(p, 0xffffffffu, 4);
	n = put_be(p, strlen(s), 4);
	memcpy(p + n, s, strlen(s));
	return n + strlen(s);
}

static void expected_hash(const unsigned char key[32], const char *prev_hex,
			  int64_t id, int64_t time_ms,
			  const char *const fields[6], char out[65])
{
	unsigned char msg[1024], mac[32];
	unsigned int mac_len = 0;
	size_t n = 0;

	for (int i = 0; i < 32; i++) {
		unsigned int byte = 0;
		if (prev_hex)
			sscanf(prev_hex + 2 * i, "%2x", &byte);
		msg[n++] = (unsigned char)byte;
	}
	n += put_be(msg + n, (uint64_t)id, 8);
	n += put_be(msg + n, (uint64_t)time_ms, 8);
	for (int i = 0; i < 6; i++)
		n += put_str(msg + n, fields[i]);
	assert_non_null(HMAC(EVP_sha256(), key, 32, msg, n, mac, &mac_len));
	assert_int_equal(mac_len, 32);
	for (int i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", mac[i]);
}

static void test_known_rows(void **state)
{
	struct fixture *fx = *state;
	static const char *const row1[6] = {"admin", "admin", "token.create",
					    "token/alice", "ok", "user"};
	/* NULL role and detail, and an empty string: all distinct. */
	static const char *const row2[6] = {"system", NULL, "job.submit",
					    "job/1", "ok", NULL};
	static const char *const row3[6] = {"alice", "user", "", "job/1",
					    "denied", "ab"};
	struct kn_audit *rows = NULL;
	struct kn_audit_filter f = {.limit = 10};
	char want1[65], want2[65], want3[65];
	size_t n = 0;

	start_chain(fx, 0);
	insert(fx, 1764700000000, row1[0], row1[1], row1[2], row1[3], row1[4],
	       row1[5]);
	insert(fx, 1764700000001, row2[0], row2[1], row2[2], row2[3], row2[4],
	       row2[5]);
	insert(fx, 1764700000002, row3[0], row3[1], row3[2], row3[3], row3[4],
	       row3[5]);
	expected_hash(fx->key, NULL, 1, 1764700000000, row1, want1);
	expected_hash(fx->key, want1, 2, 1764700000001, row2, want2);
	expected_hash(fx->key, want2, 3, 1764700000002, row3, want3);

	assert_int_equal(kn_store_audit_list(fx->st, &f, &rows, &n, NULL), 0);
	assert_int_equal(n, 3);
	/* Newest first. */
	assert_string_equal(rows[2].hash, want1);
	assert_string_equal(rows[1].hash, want2);
	assert_string_equal(rows[0].hash, want3);
	kn_audit_list_free(rows, n);

	/* Each commit told the watcher its head. */
	assert_int_equal(fx->heads, 3);
	assert_int_equal(fx->head_id, 3);
	assert_string_equal(fx->head_hash, want3);
}

static void test_chain_start_chains_old_rows(void **state)
{
	struct fixture *fx = *state;
	struct kn_audit_verify v;
	char hash[KN_AUDIT_HASH_HEX_LEN + 1];
	int64_t id = -1;
	bool has = true;

	insert_rows(fx, 3); /* before the chain: a database from before v5 */
	assert_int_equal(kn_store_audit_has_chain(fx->st, &has, NULL), 0);
	assert_false(has);
	verify(fx, 0, NULL, &v);
	assert_int_equal(v.problem, KN_AUDIT_UNCHAINED);
	assert_int_equal(v.bad_id, 1);

	start_chain(fx, 3);
	assert_int_equal(fx->heads, 1);
	start_chain(fx, 0); /* once */
	insert_rows(fx, 1);
	assert_int_equal(kn_store_audit_head(fx->st, &id, hash, NULL), 0);
	assert_int_equal(id, 4);
	assert_string_equal(hash, fx->head_hash);
	verify(fx, 4, hash, &v);
	assert_int_equal(v.problem, KN_AUDIT_OK);
	assert_int_equal(v.rows, 4);
	assert_int_equal(v.head_id, 4);
	assert_string_equal(v.head_hash, hash);
}

static void test_rollback_reports_no_head(void **state)
{
	struct fixture *fx = *state;

	start_chain(fx, 0);
	assert_int_equal(kn_store_begin(fx->st, NULL), 0);
	insert_rows(fx, 1);
	kn_store_rollback(fx->st);
	assert_int_equal(fx->heads, 0);
	assert_int_equal(kn_store_begin(fx->st, NULL), 0);
	insert_rows(fx, 2);
	assert_int_equal(kn_store_commit(fx->st, NULL), 0);
	assert_int_equal(fx->heads, 1); /* one commit, one report */
	/* The rolled-back insert's id was not used: AUTOINCREMENT's
	   counter rolls back with it, so ids stay gapless. */
	assert_int_equal(fx->head_id, 2);
}

static void test_wrong_key(void **state)
{
	struct fixture *fx = *state;
	struct kn_audit_verify v;
	struct kn_error err = {0};
	unsigned char other[KN_AUDIT_KEY_LEN] = {1};

	start_chain(fx, 0);
	insert_rows(fx, 2);
	assert_int_equal(kn_store_audit_verify(fx->st, other, 0, NULL, &v,
					       &err),
			 0);
	assert_int_equal(v.problem, KN_AUDIT_EDITED);
	assert_int_equal(v.bad_id, 1);
}

/* One way to tamper with five chained rows, and what verify says. */
struct tamper_case {
	const char *name;
	const char *sql;               /* through a second connection */
	bool anchored;                 /* verify against the head it had */
	bool any_problem;              /* instead of problem: any but ok */
	enum kn_audit_problem problem;
	int64_t bad_id;
	int64_t rows;                  /* read, bad one included; 0: any */
	const char *message;           /* part of it; NULL: not checked */
};

static const struct tamper_case TAMPERING[] = {
	{"edited", "UPDATE audit SET outcome = 'denied' WHERE id = 3", true,
	 false, KN_AUDIT_EDITED, 3, 3,
	 "row 3 (job.submit job/3 by alice) does not match its hash"
	 " (edited)"},
	{"deleted middle row", "DELETE FROM audit WHERE id = 3", true, false,
	 KN_AUDIT_DELETED, 3, 0, "row 3 is missing"},
	/* Close the gap: the rows after it move down by one. */
	{"deleted and renumbered",
	 "DELETE FROM audit WHERE id = 3;"
	 " UPDATE audit SET id = id - 1 WHERE id > 3",
	 false, true, KN_AUDIT_OK, 3, 0, NULL},
	{"reordered",
	 "UPDATE audit SET id = -1 WHERE id = 2;"
	 " UPDATE audit SET id = 2 WHERE id = 4;"
	 " UPDATE audit SET id = 4 WHERE id = -1",
	 true, false, KN_AUDIT_REORDERED, 2, 0, "written as row 4"},
};

static void test_tampering_found(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(TAMPERING) / sizeof(TAMPERING[0]); i++) {
		const struct tamper_case *c = &TAMPERING[i];
		struct kn_audit_verify v;
		struct fixture *fx;
		void *fresh = NULL;

		print_message("tampering: %s\n", c->name);
		assert_int_equal(setup(&fresh), 0);
		fx = fresh;
		start_chain(fx, 0);
		insert_rows(fx, 5);
		raw_exec(fx->path, c->sql);
		verify(fx, c->anchored ? 5 : 0,
		       c->anchored ? fx->head_hash : NULL, &v);
		if (c->any_problem)
			assert_int_not_equal(v.problem, KN_AUDIT_OK);
		else
			assert_int_equal(v.problem, c->problem);
		assert_int_equal(v.bad_id, c->bad_id);
		if (c->rows)
			assert_int_equal(v.rows, c->rows);
		if (c->message)
			assert_non_null(strstr(v.message, c->message));
		teardown(&fresh);
	}
}

static void test_truncated_tail(void **state)
{
	struct fixture *fx = *state;
	struct kn_audit_verify v;
	char head[KN_AUDIT_HASH_HEX_LEN + 1];

	start_chain(fx, 0);
	insert_rows(fx, 5);
	kn_strlcpy(head, fx->head_hash, sizeof(head));
	raw_exec(fx->path, "DELETE FROM audit WHERE id >= 4");
	/* Without an anchor the shorter chain is whole: why there is one. */
	verify(fx, 0, NULL, &v);
	assert_int_equal(v.problem, KN_AUDIT_OK);
	assert_int_equal(v.head_id, 3);
	verify(fx, 5, head, &v);
	assert_int_equal(v.problem, KN_AUDIT_TRUNCATED);
	assert_int_equal(v.bad_id, 4);
	assert_non_null(strstr(v.message, "row 4 is missing"));

	/* New rows written over the cut end: the anchored row differs. */
	raw_exec(fx->path, "DELETE FROM sqlite_sequence WHERE name = 'audit'");
	insert_rows(fx, 2);
	verify(fx, 5, head, &v);
	assert_int_equal(v.problem, KN_AUDIT_TRUNCATED);
	assert_int_equal(v.bad_id, 5);
}

static void test_backup_copy(void **state)
{
	struct fixture *fx = *state;
	struct kn_audit_verify v;
	struct kn_store *copy = NULL;
	struct kn_error err = {0};
	char *path = kn_asprintf("%s/copy.db", fx->dir);

	start_chain(fx, 0);
	insert_rows(fx, 3);
	assert_int_equal(kn_store_backup(fx->st, path, &err), 0);
	/* Never over an existing file. */
	assert_int_equal(kn_store_backup(fx->st, path, &err), -EIO);
	insert_rows(fx, 1); /* after the copy: not in it */
	assert_int_equal(kn_store_open(path, &copy, &err), 0);
	assert_int_equal(kn_store_audit_verify(copy, fx->key, 3, NULL, &v,
					       &err),
			 0);
	assert_int_equal(v.problem, KN_AUDIT_OK);
	assert_int_equal(v.rows, 3);
	kn_store_free(copy);
	free(path);
}

/*
 * A reader connection verifies the log while the writer goes on: its walk
 * sees the rows committed before it began, and it cannot write.
 */
static void test_reader_connection(void **state)
{
	struct fixture *fx = *state;
	struct kn_audit_verify v;
	struct kn_store *reader = NULL;
	struct kn_error err = {0};
	struct kn_audit a = {.time_ms = 1, .actor = "x", .action = "x",
			     .object = "x", .outcome = "ok"};
	char *old = kn_asprintf("%s/old.db", fx->dir);

	start_chain(fx, 0);
	insert_rows(fx, 3);
	assert_int_equal(kn_store_open_reader(fx->path, &reader, &err), 0);
	insert_rows(fx, 2);
	assert_int_equal(kn_store_audit_verify(reader, fx->key, 0, NULL, &v,
					       &err),
			 0);
	assert_int_equal(v.problem, KN_AUDIT_OK);
	assert_int_equal(v.rows, 5);
	assert_int_not_equal(kn_store_audit_insert(reader, &a, &err), 0);
	kn_store_free(reader);
	/* A file kn_store_open has not brought to this schema is refused. */
	raw_exec(old, "CREATE TABLE t (x); PRAGMA user_version = 1");
	reader = NULL;
	assert_int_equal(kn_store_open_reader(old, &reader, &err), -EIO);
	assert_non_null(strstr(err.message, "schema version 1"));
	assert_null(reader);
	free(old);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test_setup_teardown(test_known_rows, setup,
					teardown),
	cmocka_unit_test_setup_teardown(
		test_chain_start_chains_old_rows, setup, teardown),
	cmocka_unit_test_setup_teardown(test_rollback_reports_no_head,
					setup, teardown),
	cmocka_unit_test_setup_teardown(test_wrong_key, setup,
					teardown),
	cmocka_unit_test(test_tampering_found),
	cmocka_unit_test_setup_teardown(test_truncated_tail, setup,
					teardown),
	cmocka_unit_test_setup_teardown(test_backup_copy, setup,
					teardown),
	cmocka_unit_test_setup_teardown(test_reader_connection, setup,
					teardown))
