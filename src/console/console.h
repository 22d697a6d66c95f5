/*
 * console: the web console's assets, compiled into the binary
 * (gen_assets.c turns assets/ into a C table at build time), and the
 * table of console grants: one-time login codes and browser sessions.
 *
 * A grant stands for an API token: it keeps that token's hash, so the
 * caller behind it is whatever the token is now (its role, or nothing
 * once revoked). Grants are kept by the SHA-256 of their secret only and
 * live in memory: a restart logs every browser out, and a copy of the
 * process's memory holds no usable secret. The table is pure (the time
 * is passed in), so its rules are unit-tested without a server.
 */
#ifndef KILN_CONSOLE_CONSOLE_H
#define KILN_CONSOLE_CONSOLE_H

#include <stddef.h>
#include <stdint.h>

struct kn_console_asset {
	const char *name;         /* "app.js": served at /ui/app.js */
	const char *content_type; /* "text/javascript; charset=utf-8" */
	const unsigned char *data;
	size_t len;
	const char *etag; /* "\"0123456789abcdef\"", quotes included */
};

/* The generated table (assets.c). */
extern const struct kn_console_asset kn_console_assets[];
extern const size_t kn_console_n_assets;

/* The asset named name, or NULL. */
const struct kn_console_asset *kn_console_asset_find(const char *name);

/* ---- grants ---- */

enum kn_console_grant_kind {
	KN_CONSOLE_CODE,    /* a one-time login code (`kiln ui`) */
	KN_CONSOLE_SESSION, /* a browser session */
};

/* Their secrets' prefixes: a leaked one is told apart from an API token. */
#define KN_CONSOLE_CODE_PREFIX "kui_"
#define KN_CONSOLE_SESSION_PREFIX "kses_"

/* How long each kind lives, from its creation. */
#define KN_CONSOLE_CODE_TTL_MS (5 * 60 * 1000)
#define KN_CONSOLE_SESSION_TTL_MS (8 * 3600 * 1000)

struct kn_console_grants;

/* A table holding at most max live grants. */
struct kn_console_grants *kn_console_grants_new(size_t max);
void kn_console_grants_free(struct kn_console_grants *g);

/*
 * Keep a grant of kind: secret_hash and token_hash are 64 hex digits
 * (the SHA-256 of the grant's secret and of the API token it stands
 * for). It expires at now + the kind's TTL. Expired grants are dropped
 * first; 0, or -ENOSPC when max grants are still live, -EINVAL for a
 * hash that is not 64 hex digits.
 */
int kn_console_grant_add(struct kn_console_grants *g,
			 enum kn_console_grant_kind kind,
			 const char *secret_hash, const char *token_hash,
			 int64_t now);

/*
 * The token hash behind a live grant of kind (copied into token_hash,
 * 65 bytes): 0, or -ENOENT when there is none (unknown, expired, or of
 * the other kind). A code is removed as it is used: it works once.
 */
int kn_console_grant_use(struct kn_console_grants *g,
			 enum kn_console_grant_kind kind,
			 const char *secret_hash, int64_t now,
			 char token_hash[65]);

/* Remove a grant (a logout): 0, or -ENOENT when there was none. */
int kn_console_grant_revoke(struct kn_console_grants *g,
			    const char *secret_hash);

/* Live grants of kind at now. */
size_t kn_console_grant_count(struct kn_console_grants *g,
			      enum kn_console_grant_kind kind, int64_t now);

#endif
