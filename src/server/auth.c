/*
 * Bearer tokens. A token is 32 random bytes shown once as
 * "kiln_<base64url>"; the store keeps only its SHA-256, so a copy of the
 * database grants nothing. A fast hash is right here: the secret has 256
 * bits of entropy, so there is nothing for a slow KDF to protect.
 */
#include "internal.h"
#include "ckpt/ckpt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>


static const char *const role_names[] = {
	[KN_ROLE_VIEWER] = "viewer",
	[KN_ROLE_USER] = "user",
	[KN_ROLE_OPERATOR] = "operator",
	[KN_ROLE_ADMIN] = "admin",
};

void caller_audit(struct kn_audit *a, const struct caller *c,
		  const char *action, const char *object, const char *outcome,
		  const char *detail)
{
	memset(a, 0, sizeof(*a));
	a->actor = (char *)c->name;
	a->role = (char *)role_name(c->role);
	a->action = (char *)action;
	a->object = (char *)object;
	a->outcome = (char *)outcome;
	a->detail = (char *)detail;
}

bool caller_owns(const struct caller *c, const char *owner)
{
	return c->role >= KN_ROLE_OPERATOR || !strcmp(owner, c->name);
}

const char *role_name(enum kn_role r)
{
	return role_names[r];
}

int role_parse(const char *s, enum kn_role *out)
{
	for (size_t i = 0; s && i < KN_LEN(role_names); i++) {
		if (strcmp(s, role_names[i]) == 0) {
			*out = (enum kn_role)i;
			return 0;
		}
	}
	return -EINVAL;
}

void token_hash(const char *secret, char hash[65])
{
	kn_sha256_hex(secret, strlen(secret), hash);
}

/* prefix + 43 base64url characters of 32 random bytes, and its hash. */
void secret_generate(const char *prefix, char secret[64],
			    char hash[65])
{
	static const char b64url[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	unsigned char raw[33];
	size_t o = 0;

	if (kn_random_bytes(raw, 32) < 0)
		abort(); /* no entropy: nothing safe to hand out */
	raw[32] = 0;
	o = strlen(prefix);
	memcpy(secret, prefix, o);
	/* 32 bytes -> 43 characters, no padding. */
	for (size_t i = 0; i < 32; i += 3) {
		unsigned v = (unsigned)raw[i] << 16 |
			     (unsigned)(i + 1 < 32 ? raw[i + 1] : 0) << 8 |
			     (unsigned)(i + 2 < 32 ? raw[i + 2] : 0);
		secret[o++] = b64url[(v >> 18) & 63];
		secret[o++] = b64url[(v >> 12) & 63];
		if (i + 1 < 32)
			secret[o++] = b64url[(v >> 6) & 63];
		if (i + 2 < 32)
			secret[o++] = b64url[v & 63];
	}
	secret[o] = '\0';
	token_hash(secret, hash);
}

void token_generate(char secret[64], char hash[65])
{
	secret_generate("kiln_", secret, hash);
}

/* Its own prefix: a leaked gateway key is told apart from an API token. */
void key_generate(char secret[64], char hash[65])
{
	secret_generate("kgw_", secret, hash);
}

void credential_revoke_reply(struct server *s, struct kn_http_req *req,
			     const struct caller *c, const char *kind,
			     const char *name, credential_revoke_fn *revoke)
{
	struct kn_audit a;
	struct kn_error err;
	char action[16], object[96];

	snprintf(action, sizeof(action), "%s.revoke", kind);
	snprintf(object, sizeof(object), "%s/%s", kind, name);
	caller_audit(&a, c, action, object, "ok", NULL);
	if (revoke(s->store, name, &a, &err) < 0) {
		kn_http_reply_error(req, &err);
		return;
	}
	kn_http_reply_json(req, 200,
			   json_pack("{s:{s:s, s:b}}", kind, "name", name,
				     "revoked", 1));
}

int auth_bootstrap(struct server *s, struct kn_error *err)
{
	struct kn_token_row t;
	struct kn_audit a;
	char secret[64], hash[65], *path, *line;
	int count = 0, rc;

	rc = kn_store_token_count(s->store, &count, err);
	if (rc < 0 || count > 0)
		return rc;
	token_generate(secret, hash);
	memset(&t, 0, sizeof(t));
	t.name = "admin";
	t.role = "admin";
	t.hash = hash;
	t.created_by = "system";
	t.created_at = kn_now_ms();
	memset(&a, 0, sizeof(a));
	a.actor = "system";
	a.role = "admin";
	a.action = "token.create";
	a.object = "token/admin";
	a.outcome = "ok";
	a.detail = "first start: admin token written to admin.token";
	/* The file first: a token in the store that nobody holds is useless. */
	path = kn_asprintf("%s/admin.token", s->home);
	line = kn_asprintf("%s\n", secret);
	rc = kn_write_text_atomic(path, line, 0600, err);
	KN_FREE_ALL(line, path);
	if (rc < 0)
		return rc;
	return kn_store_token_insert(s->store, &t, &a, NULL, err);
}

int auth_check_hash(struct server *s, const char *hash, struct caller *out,
		    struct kn_error *err)
{
	struct kn_token_row t;
	enum kn_role role;
	int rc;

	memset(&t, 0, sizeof(t));
	rc = kn_store_token_by_hash(s->store, hash, &t, NULL);
	if (rc == -ENOENT)
		return kn_errorf(err, KN_EAUTH, NULL,
				 "unknown or revoked token");
	if (rc < 0)
		return kn_errorf(err, KN_EIO, NULL, "token lookup failed");
	if (role_parse(t.role, &role) < 0) {
		kn_token_row_release(&t);
		return kn_errorf(err, KN_EIO, NULL, "token has unknown role");
	}
	kn_strlcpy(out->name, t.name, sizeof(out->name));
	out->role = role;
	kn_token_row_release(&t);
	return 0;
}

int auth_bearer_hash(struct server *s, const char *header, char hash[65],
		     struct kn_error *err)
{
	if (!header || strncmp(header, "Bearer ", 7) != 0 || !header[7])
		return kn_errorf(err, KN_EAUTH, NULL,
				 "missing bearer token (Authorization: Bearer "
				 "<token>)");
	/* A console session stands for the token it was made from, as that
	   token is now: revoking the token ends its sessions too. */
	if (!strncmp(header + 7, KN_CONSOLE_SESSION_PREFIX,
		     strlen(KN_CONSOLE_SESSION_PREFIX))) {
		if (console_session_token(s, header + 7, hash) < 0)
			return kn_errorf(err, KN_EAUTH, NULL,
					 "unknown, expired or ended console "
					 "session: log in again");
	} else {
		token_hash(header + 7, hash);
	}
	return 0;
}

int auth_check(struct server *s, const char *header, struct caller *out,
	       struct kn_error *err)
{
	char hash[65];
	int rc = auth_bearer_hash(s, header, hash, err);

	if (rc < 0)
		return rc;
	return auth_check_hash(s, hash, out, err);
}

/* Actors the server writes into the audit log itself: no token may
   pass for them. */
static const char *const reserved_actors[] = {"system"};

bool credential_name_reserved(const char *name)
{
	for (size_t i = 0; i < KN_LEN(reserved_actors); i++)
		if (!strcasecmp(name, reserved_actors[i]))
			return true;
	return false;
}

bool credential_name_ok(const char *name)
{
	size_t len = name ? strlen(name) : 0;

	if (len == 0 || len > 64)
		return false;
	for (const char *p = name; *p; p++)
		if (!(*p >= 'a' && *p <= 'z') && !(*p >= 'A' && *p <= 'Z') &&
		    !(*p >= '0' && *p <= '9') && *p != '-' && *p != '_' &&
		    *p != '.' && *p != '@')
			return false;
	return true;
}
