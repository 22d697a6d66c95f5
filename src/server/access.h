/*
 * Who a caller is and what it may add: roles, tokens and gateway keys
 * (auth.c), and the per-owner caps (user_caps.c).
 */
#ifndef KILN_SERVER_ACCESS_H
#define KILN_SERVER_ACCESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/base.h"
#include "server/caller.h"

struct server;
struct kn_audit;
struct kn_http_req;
struct kn_store;

const char *role_name(enum kn_role r);
int role_parse(const char *s, enum kn_role *out);
/* A new secret "kiln_<43 base64url chars>" and its hex sha256. */
void token_generate(char secret[64], char hash[65]);
/* A new secret prefix + 43 base64url chars (prefix at most 8) and its
   hex sha256. */
void secret_generate(const char *prefix, char secret[64], char hash[65]);
void token_hash(const char *secret, char hash[65]);
/* A token's or gateway key's name: 1..64 of A-Z a-z 0-9 - _ . @. */
bool credential_name_ok(const char *name);
/* Whether name is one the audit log uses for the server itself
   ("system", in any case), which no token may take. */
bool credential_name_reserved(const char *name);
/* A new gateway key "kgw_<43 base64url chars>" and its hex sha256. */
void key_generate(char secret[64], char hash[65]);
/* The store's revoke of one kind of credential, by name. */
typedef int credential_revoke_fn(struct kn_store *st, const char *name,
				 const struct kn_audit *a,
				 struct kn_error *err);
/*
 * DELETE of a token or a gateway key (kind "token" or "key") called
 * name, by c: revoked through revoke, audited as KIND.revoke on
 * KIND/NAME and answered {KIND: {name, revoked: true}}, or the store's
 * error (404 when no active one has that name).
 */
void credential_revoke_reply(struct server *s, struct kn_http_req *req,
			     const struct caller *c, const char *kind,
			     const char *name, credential_revoke_fn *revoke);
/* Create the admin token on the first start; writes admin.token 0600. */
int auth_bootstrap(struct server *s, struct kn_error *err);
/* The token whose hash is hash: 0 and *out, or a negative errno + err. */
int auth_check_hash(struct server *s, const char *hash, struct caller *out,
		    struct kn_error *err);
/* The hash of the token an Authorization header shows (through the
   console session it names, when it names one): 0, or -EACCES + err. */
int auth_bearer_hash(struct server *s, const char *header, char hash[65],
		     struct kn_error *err);
/* From the Authorization header: 0 and *out, or a negative errno + err. */
int auth_check(struct server *s, const char *header, struct caller *out,
	       struct kn_error *err);

/* user_caps.c: per-owner caps (kiln server --max-*-per-user) */
enum cap {
	CAP_JOB,         /* queued jobs, and tasks queued or running */
	CAP_DEPLOYMENT,  /* deployments owned */
	CAP_GATEWAY_KEY, /* active gateway keys created */
};
/*
 * Whether c may add one more of what (a job of tasks tasks; tasks is
 * ignored otherwise): 0, or -EDQUOT (KN_ELIMIT: 429) with a message
 * naming the cap and the flag that sets it; -EIO when the store cannot
 * count.
 */
int caps_check(struct server *s, const struct caller *c, enum cap what,
	       int tasks, struct kn_error *err);
/* The same for jobs jobs at once (an array's elements), each of
   tasks_each tasks. */
int caps_check_jobs(struct server *s, const struct caller *c, int jobs,
		    int tasks_each, struct kn_error *err);

#endif
