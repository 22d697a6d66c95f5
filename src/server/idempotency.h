/*
 * Creates that a retry with the same Idempotency-Key repeats
 * (idempotency.c), for any create handler of the API or a service.
 */
#ifndef KILN_SERVER_IDEMPOTENCY_H
#define KILN_SERVER_IDEMPOTENCY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/base.h"
#include "server/caller.h"

struct server;
struct kn_http_req;


/*
 * A create request whose key was seen: 1 when req was answered (the
 * first answer again, 409 for another request under the key, 400 for a
 * malformed key, or a store error), else 0. For a create that first
 * waits on a worker: a cheap early answer, before idem_begin.
 */
int idem_replayed(struct server *s, struct kn_http_req *req,
		  const struct caller *c);
/*
 * Right before the create writes anything: idem_replayed, and for a
 * request with a key a store transaction the create's writes join. 0:
 * create, then end with idem_reply or (on failure) idem_abort; 1: req
 * was answered.
 */
int idem_begin(struct server *s, struct kn_http_req *req,
	       const struct caller *c);
/* The create failed: undo what the key's transaction holds. */
void idem_abort(struct server *s, struct kn_http_req *req);
/*
 * The create succeeded: record answer under the request's key and
 * commit, then send it (a failed commit answers its error instead).
 * Steals answer.
 */
void idem_reply(struct server *s, struct kn_http_req *req,
		const struct caller *c, int status, json_t *answer);
/*
 * For a create that joined the submits' group commit instead of
 * idem_begin's transaction: write answer's row under the request's key
 * into the open transaction. 0 with *stored the row's answer text
 * (malloc'd; NULL and nothing written without a key), or a store error
 * in err: the caller undoes its writes and answers that.
 */
int idem_record(struct server *s, struct kn_http_req *req,
		const struct caller *c, int status, const json_t *answer,
		char **stored, struct kn_error *err);

#endif
