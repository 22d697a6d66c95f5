/*
 * The audit chain's two files in $KILN_HOME (docs/audit.md):
 *
 * - audit.key: 32 random bytes as hex, 0600, made on the first start. The
 *   store chains every audit row with HMAC-SHA256 under it, so someone
 *   who can edit kiln.db but not read this file cannot recompute the
 *   chain after a change.
 * - audit.head: "ID HASH", 0600, the newest row's id and hash, rewritten
 *   (write + rename) after every commit that adds rows. Deleting the
 *   newest rows leaves a chain that is whole on its own; this anchor,
 *   outside the database, is what catches it.
 *
 * A database whose rows no longer reach the anchor at start-up (rows cut
 * from the end) keeps the anchor as it is, so verify goes on reporting
 * the cut; removing audit.head after looking into it re-anchors at the
 * next start. Without fsync: after a crash the anchor may lag the
 * database by the last commits, which verify accepts (rows after the
 * anchor are checked by the chain); it is never ahead of it.
 */
#include "internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int key_from_hex(const char *text, unsigned char key[KN_AUDIT_KEY_LEN])
{
	for (int i = 0; i < KN_AUDIT_KEY_LEN; i++) {
		unsigned int byte;

		if (sscanf(text + 2 * i, "%2x", &byte) != 1)
			return -EINVAL;
		key[i] = (unsigned char)byte;
	}
	return 0;
}

/* Read audit.key, or make one when the log has no chain yet. */
static int load_key(struct server *s, struct kn_error *err)
{
	char *path = kn_asprintf("%s/audit.key", s->home);
	char *text = NULL, hex[2 * KN_AUDIT_KEY_LEN + 2];
	size_t len = 0;
	bool chained = false;
	int rc = kn_read_file(path, 1024, &text, &len);

	if (rc == 0) {
		if (len < 2 * KN_AUDIT_KEY_LEN ||
		    key_from_hex(text, s->audit_key) < 0)
			rc = kn_errorf(err, KN_EINVAL, "audit.key",
				       "%s: not a kiln audit key (64 hex"
				       " digits)",
				       path);
		goto out;
	}
	if (rc != -ENOENT) {
		rc = kn_errorf(err, KN_EIO, "audit.key", "cannot read %s: %s",
			       path, strerror(-rc));
		goto out;
	}
	rc = kn_store_audit_has_chain(s->store, &chained, err);
	if (rc < 0)
		goto out;
	if (chained) {
		rc = kn_errorf(err, KN_EINVAL, "audit.key",
			       "%s is missing but kiln.db holds an audit log"
			       " chained with it: put back the key it was"
			       " written with (a backup made with"
			       " --with-audit-key has it)",
			       path);
		goto out;
	}
	rc = kn_random_bytes(s->audit_key, sizeof(s->audit_key));
	if (rc < 0) {
		rc = kn_errorf(err, KN_EIO, "audit.key",
			       "no random bytes for the audit key: %s",
			       strerror(-rc));
		goto out;
	}
	for (int i = 0; i < KN_AUDIT_KEY_LEN; i++)
		snprintf(hex + 2 * i, 3, "%02x", s->audit_key[i]);
	hex[2 * KN_AUDIT_KEY_LEN] = '\n';
	hex[2 * KN_AUDIT_KEY_LEN + 1] = '\0';
	rc = kn_write_file_atomic(path, hex, strlen(hex), 0600);
	if (rc < 0)
		rc = kn_errorf(err, KN_EIO, "audit.key", "cannot write %s: %s",
			       path, strerror(-rc));
	else
		kn_log(KN_LOG_INFO, "audit: new chain key in %s", path);
out:
	KN_FREE_ALL(text, path);
	return rc;
}

int audit_anchor_read(const char *home, int64_t *id,
		      char hash[KN_AUDIT_HASH_HEX_LEN + 1],
		      struct kn_error *err)
{
	char *path = kn_asprintf("%s/audit.head", home);
	char *text = NULL;
	long long n = 0;
	int rc = kn_read_file(path, 1024, &text, NULL);

	if (rc == -ENOENT) {
		*id = 0;
		hash[0] = '\0';
		rc = 0;
	} else if (rc < 0) {
		rc = kn_errorf(err, KN_EIO, "audit.head", "cannot read %s: %s",
			       path, strerror(-rc));
	} else if (sscanf(text, "%lld %64s", &n, hash) != 2 || n < 1 ||
		   strlen(hash) != KN_AUDIT_HASH_HEX_LEN) {
		rc = kn_errorf(err, KN_EINVAL, "audit.head",
			       "%s: want \"ID HASH\"", path);
	} else {
		*id = n;
	}
	KN_FREE_ALL(text, path);
	return rc;
}

int audit_anchor_write(const char *home, int64_t id, const char *hash,
		       struct kn_error *err)
{
	char *path = kn_asprintf("%s/audit.head", home);
	char *line = kn_asprintf("%" PRId64 " %s\n", id, hash);
	int rc = kn_write_file_replace(path, line, strlen(line), 0600);

	if (rc < 0)
		rc = kn_errorf(err, KN_EIO, "audit.head", "cannot write %s: %s",
			       path, strerror(-rc));
	KN_FREE_ALL(line, path);
	return rc;
}

static void on_head(void *arg, int64_t id, const char *hash)
{
	struct server *s = arg;
	struct kn_error err;

	if (s->audit_anchor_frozen)
		return;
	if (audit_anchor_write(s->home, id, hash, &err) < 0)
		kn_log(KN_LOG_ERROR, "audit: %s", err.message);
}

/*
 * Whether the database still reaches the anchor: the anchored row is
 * there with the anchored hash. Rows after it are fine (a crash between
 * commit and anchor).
 */
static bool anchor_holds(struct server *s, int64_t id, const char *hash)
{
	char have[KN_AUDIT_HASH_HEX_LEN + 1];

	if (kn_store_audit_hash_of(s->store, id, have, NULL) < 0)
		return false;
	return strcmp(have, hash) == 0;
}

int audit_start(struct server *s, struct kn_error *err)
{
	char hash[KN_AUDIT_HASH_HEX_LEN + 1];
	int64_t id = 0, chained = 0;
	int rc = load_key(s, err);

	if (rc < 0)
		return rc;
	rc = audit_anchor_read(s->home, &id, hash, err);
	if (rc < 0)
		return rc;
	if (id > 0 && !anchor_holds(s, id, hash)) {
		s->audit_anchor_frozen = true;
		kn_log(KN_LOG_ERROR,
		       "audit: kiln.db no longer reaches the head recorded"
		       " in audit.head (row %" PRId64 "): rows were removed;"
		       " the anchor is kept until audit.head is removed"
		       " (see kiln audit verify)",
		       id);
	}
	rc = kn_store_audit_chain_start(s->store, s->audit_key, on_head, s,
					&chained, err);
	if (rc < 0)
		return rc;
	if (chained)
		kn_log(KN_LOG_INFO, "audit: chained %" PRId64
		       " row%s written before the chain", chained,
		       chained == 1 ? "" : "s");
	if (id == 0 && !chained) {
		/* No anchor yet: start one at the present head. */
		rc = kn_store_audit_head(s->store, &id, hash, err);
		if (rc == 0 && id > 0)
			rc = audit_anchor_write(s->home, id, hash, err);
	}
	return rc;
}

/* The verify answer: GET /v1/audit/verify and kiln audit verify --home. */
static json_t *verify_doc(const struct kn_audit_verify *v, int64_t anchor_id,
			  const char *anchor)
{
	json_t *doc = json_pack(
		"{s:b, s:I, s:{s:I, s:s}, s:o}", "ok", v->problem == KN_AUDIT_OK,
		"rows", (json_int_t)v->rows, "head", "id",
		(json_int_t)v->head_id, "hash", v->head_hash, "anchor",
		anchor_id ? json_pack("{s:I, s:s}", "id", (json_int_t)anchor_id,
				      "hash", anchor)
			  : json_null());

	if (v->problem != KN_AUDIT_OK) {
		json_object_set_new(doc, "problem",
				    json_string(kn_audit_problem_name(
					    v->problem)));
		json_object_set_new(doc, "bad_row",
				    json_integer((json_int_t)v->bad_id));
		json_object_set_new(doc, "message", json_string(v->message));
	}
	return doc;
}

/*
 * A verify reads the whole log: it runs on a worker over its own
 * read-only connection (WAL: it sees one moment while the loop writes),
 * and the request is answered when it ends.
 */
struct verify_work {
	struct kn_http_req *req;
	char *db_path;
	unsigned char key[KN_AUDIT_KEY_LEN];
	int64_t anchor_id;
	char anchor[KN_AUDIT_HASH_HEX_LEN + 1];
	int rc;
	struct kn_error err;
	struct kn_audit_verify v;
};

static void verify_work(void *arg)
{
	struct verify_work *w = arg;
	struct kn_store *reader = NULL;

	w->rc = kn_store_open_reader(w->db_path, &reader, &w->err);
	if (w->rc == 0)
		w->rc = kn_store_audit_verify(reader, w->key, w->anchor_id,
					      w->anchor_id ? w->anchor : NULL,
					      &w->v, &w->err);
	kn_store_free(reader);
}

static void verify_done(void *arg, bool ran)
{
	struct verify_work *w = arg;

	if (!ran)
		kn_errorf(&w->err, KN_EUNAVAIL, NULL,
			  "the server stopped before the verify ran");
	if (!ran || w->rc < 0)
		kn_http_reply_error(w->req, &w->err);
	else
		kn_http_reply_json(w->req, 200,
				   verify_doc(&w->v, w->anchor_id, w->anchor));
	KN_FREE_ALL(w->db_path, w);
}

void audit_h_verify(struct server *s, struct kn_http_req *req,
		    const struct caller *c, const char *param)
{
	struct verify_work *w = kn_xcalloc(1, sizeof(*w));

	(void)c;
	(void)param;
	if (audit_anchor_read(s->home, &w->anchor_id, w->anchor, &w->err) <
	    0) {
		kn_http_reply_error(req, &w->err);
		free(w);
		return;
	}
	w->req = req;
	w->db_path = kn_asprintf("%s/kiln.db", s->home);
	memcpy(w->key, s->audit_key, sizeof(w->key));
	kn_workers_submit(s->request_workers, verify_work, verify_done, w);
}

int kn_server_audit_verify_home(const char *home, char **json_out,
				struct kn_error *err)
{
	struct server s;
	struct kn_audit_verify v;
	char anchor[KN_AUDIT_HASH_HEX_LEN + 1];
	char *path = kn_asprintf("%s/kiln.db", home), *key_path = NULL;
	int64_t anchor_id = 0;
	json_t *doc;
	int rc;

	/* load_key reads the key (and would make one only for a log with
	   no chain, which verify then reports as unchained: so refuse). */
	memset(&s, 0, sizeof(s));
	s.home = (char *)home;
	key_path = kn_asprintf("%s/audit.key", home);
	if (access(key_path, F_OK) < 0) {
		rc = kn_errorf(err, KN_ENOTFOUND, "audit.key",
			       "%s: %s", key_path, strerror(errno));
		goto out;
	}
	if (access(path, F_OK) < 0) {
		rc = kn_errorf(err, KN_ENOTFOUND, "home", "%s: %s", path,
			       strerror(errno));
		goto out;
	}
	rc = kn_store_open(path, &s.store, err);
	if (rc == 0)
		rc = load_key(&s, err);
	if (rc == 0)
		rc = audit_anchor_read(home, &anchor_id, anchor, err);
	if (rc == 0)
		rc = kn_store_audit_verify(s.store, s.audit_key, anchor_id,
					   anchor_id ? anchor : NULL, &v, err);
	if (rc == 0) {
		doc = verify_doc(&v, anchor_id, anchor);
		*json_out = json_dumps(doc, JSON_COMPACT);
		json_decref(doc);
	}
out:
	kn_store_free(s.store);
	KN_FREE_ALL(key_path, path);
	return rc;
}

void core_audit(struct server *s, const struct caller *c, const char *action,
		const char *object, const char *outcome, const char *detail)
{
	static const struct caller system_caller = {"system", KN_ROLE_ADMIN};
	struct kn_audit a;
	struct kn_error err;

	caller_audit(&a, c ? c : &system_caller, action, object, outcome,
		     detail);
	if (kn_store_audit_insert(s->store, &a, &err) < 0)
		kn_log(KN_LOG_WARN, "auditing %s: %s", action, err.message);
}
