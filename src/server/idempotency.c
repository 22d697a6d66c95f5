/*
 * Idempotent creates: a client that lost the answer to a create (a job,
 * a deployment, a workflow run, a model version) and sends it again with
 * the same Idempotency-Key gets the first answer, not a second object.
 *
 * The key's row (caller, key, route, the body's sha256, the answer) is
 * written in the store transaction that writes the object: idem_begin
 * opens it right before the create, on the loop thread, so no other
 * request runs between the check and the commit, and idem_reply records
 * the answer and commits. A crash before that commit leaves neither the
 * object nor the key, so the retry creates it once; after it, the retry
 * finds both. The same key with another body (or on another route) is a
 * conflict: it cannot be the same request. Rows live a day. The jobs
 * the create submits wait outside the queue until that commit
 * (jobs_idem_settle): a commit the disk refuses leaves no job queued, no
 * event, and no id that the next job, given the same one, would share.
 *
 * A job submit with a key joins the submits' group commit instead
 * (submit_group.c): idem_record writes its key row as part of the
 * member's writes, so the key and the job share a savepoint and the
 * group's one COMMIT, and its answer waits for that commit like any
 * member's. A key found while a group is open may be one of that
 * group's, not yet on disk: the group commits before it is replayed,
 * so a replay never answers for a job the disk may still lose.
 *
 * Rejected: keeping keys in memory (lost with the server, which is when
 * clients retry), and storing the key after the answer was sent (a crash
 * between the two creates the object twice).
 */
#include "internal.h"
#include "service.h"

#include "ckpt/ckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IDEM_HEADER "Idempotency-Key"
/* As long as any client's generated key needs, short enough to index. */
#define IDEM_KEY_MAX 128
/* How long a key holds: a day, the window clients are told to retry in. */
#define IDEM_TTL_MS (24LL * 3600 * 1000)
/* Expired rows are swept at most this often, by the creates themselves. */
#define IDEM_SWEEP_MS (60LL * 1000)

/* Printable ASCII without spaces, 1..IDEM_KEY_MAX bytes. */
static bool key_ok(const char *key)
{
	size_t n = strlen(key);

	if (n == 0 || n > IDEM_KEY_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (key[i] <= ' ' || key[i] > '~')
			return false;
	return true;
}

static void route_of(struct kn_http_req *req, char *out, size_t len)
{
	snprintf(out, len, "%s %s", kn_http_method(req), kn_http_path(req));
}

static void body_hash(struct kn_http_req *req, char hex[65])
{
	size_t len;
	const char *body = kn_http_body(req, &len);

	kn_sha256_hex(body ? body : "", body ? len : 0, hex);
}

static void sweep(struct server *s, int64_t now)
{
	struct kn_error err;

	if (now - s->idem_swept_at < IDEM_SWEEP_MS)
		return;
	s->idem_swept_at = now;
	if (kn_store_idem_expire(s->store, now - IDEM_TTL_MS, &err) < 0)
		kn_log(KN_LOG_WARN, "expiring idempotency keys: %s",
		       err.message);
}

int idem_replayed(struct server *s, struct kn_http_req *req,
		  const struct caller *c)
{
	const char *key = kn_http_header(req, IDEM_HEADER);
	struct kn_idem_row row;
	struct kn_error err;
	char route[320], hash[65];
	int64_t now = kn_now_ms();
	int rc;

	if (!key)
		return 0;
	if (!key_ok(key)) {
		kn_errorf(&err, KN_EINVAL, IDEM_HEADER,
			  IDEM_HEADER " must be 1 to %d printable characters "
			  "without spaces",
			  IDEM_KEY_MAX);
		kn_http_reply_error(req, &err);
		return 1;
	}
	sweep(s, now);
	rc = kn_store_idem_get(s->store, c->name, key, now - IDEM_TTL_MS, &row,
			       &err);
	if (rc > 0 && kn_store_group_open(s->store)) {
		/* Perhaps the open group's own row: on disk first. A failed
		   commit took the row with it, and the get says so. */
		kn_idem_row_release(&row);
		submit_group_flush(s);
		rc = kn_store_idem_get(s->store, c->name, key,
				       now - IDEM_TTL_MS, &row, &err);
	}
	if (rc < 0) {
		kn_http_reply_error(req, &err);
		return 1;
	}
	if (rc == 0)
		return 0;
	route_of(req, route, sizeof(route));
	body_hash(req, hash);
	if (strcmp(row.route, route) != 0 || strcmp(row.body_sha256, hash) != 0) {
		kn_errorf(&err, KN_ECONFLICT, IDEM_HEADER,
			  IDEM_HEADER " \"%s\" was used for another request "
			  "(%s, another body); send a new key for a new "
			  "request",
			  key, row.route);
		kn_http_reply_error(req, &err);
	} else {
		kn_http_reply_text(req, row.status, "application/json",
				   row.answer, strlen(row.answer));
	}
	kn_idem_row_release(&row);
	return 1;
}

int idem_begin(struct server *s, struct kn_http_req *req,
	       const struct caller *c)
{
	struct kn_error err;
	int rc = idem_replayed(s, req, c);

	if (rc != 0 || !kn_http_header(req, IDEM_HEADER))
		return rc;
	if (kn_store_begin(s->store, &err) < 0) {
		kn_http_reply_error(req, &err);
		return 1;
	}
	s->idem_open = true;
	return 0;
}

void idem_abort(struct server *s, struct kn_http_req *req)
{
	if (!kn_http_header(req, IDEM_HEADER))
		return;
	kn_store_rollback(s->store);
	jobs_idem_settle(s, false);
}

/* The key's row for req's answer; row.answer is malloc'd. */
static void row_fill(struct kn_http_req *req, const struct caller *c,
		     int status, const json_t *answer, char route[320],
		     char hash[65], struct kn_idem_row *row)
{
	route_of(req, route, 320);
	body_hash(req, hash);
	memset(row, 0, sizeof(*row));
	row->owner = (char *)c->name;
	row->key = (char *)kn_http_header(req, IDEM_HEADER);
	row->route = route;
	row->body_sha256 = hash;
	row->status = status;
	row->answer = json_dumps(answer, JSON_COMPACT);
	row->created_at = kn_now_ms();
}

int idem_record(struct server *s, struct kn_http_req *req,
		const struct caller *c, int status, const json_t *answer,
		char **stored, struct kn_error *err)
{
	struct kn_idem_row row;
	char route[320], hash[65];
	int rc;

	if (!kn_http_header(req, IDEM_HEADER)) {
		*stored = NULL;
		return 0;
	}
	row_fill(req, c, status, answer, route, hash, &row);
	rc = kn_store_idem_put(s->store, &row, err);
	if (rc < 0)
		free(row.answer);
	else
		*stored = row.answer;
	return rc;
}

void idem_reply(struct server *s, struct kn_http_req *req,
		const struct caller *c, int status, json_t *answer)
{
	struct kn_idem_row row;
	struct kn_error err;
	char route[320], hash[65];

	if (!kn_http_header(req, IDEM_HEADER)) {
		kn_http_reply_json(req, status, answer);
		return;
	}
	row_fill(req, c, status, answer, route, hash, &row);
	if (core_store_end(s->store, kn_store_idem_put(s->store, &row, &err),
			   &err) < 0) {
		jobs_idem_settle(s, false);
		kn_http_reply_error(req, &err);
	} else {
		jobs_idem_settle(s, true);
		kn_http_reply_text(req, status, "application/json", row.answer,
				   strlen(row.answer));
	}
	free(row.answer);
	json_decref(answer);
}
