/*
 * The web console's server side: its page and assets at / and /ui/NAME
 * (compiled in, src/console), and its logins. A browser holds a console
 * session secret in sessionStorage and sends it as a bearer token; it
 * gets one by showing an API token once, or a one-time code that
 * `kiln ui` asked for. No cookie is ever set, so no request carries a
 * credential the page did not add itself: a cross-site form or script
 * gets nothing the API accepts (docs/security.md).
 *
 * Rejected: an HttpOnly session cookie (every state-changing route would
 * then need CSRF checks), and the API token itself in sessionStorage
 * for the page's life (a session expires and can be ended alone).
 */
#include "internal.h"
#include "service.h"

#include <errno.h>
#include <string.h>

/* Open browsers and pending codes; past this, a new login waits for
   one to expire or log out. */
#define CONSOLE_MAX_GRANTS 1024

/*
 * Nothing but this origin's own files and API: no inline script or
 * style, no framing, no other origin for anything.
 */
#define CONSOLE_CSP                                                          \
	"default-src 'none'; script-src 'self'; style-src 'self'; "          \
	"img-src 'self' data:; connect-src 'self'; base-uri 'none'; "       \
	"form-action 'self'; frame-ancestors 'none'"

static void security_headers(struct kn_http_req *req)
{
	kn_http_add_header(req, "Content-Security-Policy", CONSOLE_CSP);
	kn_http_add_header(req, "X-Frame-Options", "DENY");
	kn_http_add_header(req, "X-Content-Type-Options", "nosniff");
	kn_http_add_header(req, "Referrer-Policy", "no-referrer");
	kn_http_add_header(req, "Cross-Origin-Opener-Policy", "same-origin");
	kn_http_add_header(req, "Cross-Origin-Resource-Policy", "same-origin");
}

bool console_serve(struct server *s, struct kn_http_req *req)
{
	const char *path = kn_http_path(req), *seen;
	const struct kn_console_asset *a;

	(void)s;
	if (strcmp(kn_http_method(req), "GET") != 0)
		return false;
	if (!strcmp(path, "/"))
		a = kn_console_asset_find("index.html");
	else if (!strncmp(path, "/ui/", 4))
		a = kn_console_asset_find(path + 4);
	else
		return false;
	security_headers(req);
	if (!a) {
		struct kn_error err;

		kn_errorf(&err, KN_ENOTFOUND, NULL, "no console file %s", path);
		kn_http_reply_error(req, &err);
		return true;
	}
	/* Names carry no hash, so a browser asks again each time and the
	   ETag keeps that to a 304. */
	kn_http_add_header(req, "Cache-Control", "no-cache");
	kn_http_add_header(req, "ETag", a->etag);
	seen = kn_http_header(req, "If-None-Match");
	if (seen && !strcmp(seen, a->etag))
		kn_http_reply_text(req, 304, a->content_type, "", 0);
	else
		kn_http_reply_text(req, 200, a->content_type, a->data, a->len);
	return true;
}

int console_session_token(struct server *s, const char *secret,
			  char hash[65])
{
	char secret_hash[65];

	if (!s->console)
		return -ENOENT;
	token_hash(secret, secret_hash);
	return kn_console_grant_use(s->console, KN_CONSOLE_SESSION,
				    secret_hash, kn_now_ms(), hash);
}

/*
 * The hash of the API token behind req's bearer credential (through a
 * console session when it is one), for a grant to stand for.
 */
static int bearer_token_hash(struct server *s, struct kn_http_req *req,
			     char hash[65], struct kn_error *err)
{
	const char *authz = kn_http_header(req, "Authorization");

	if (!authz && kn_http_client_cert(req))
		return kn_errorf(err, KN_EINVAL, NULL,
				 "console logins stand for a bearer token; "
				 "a client certificate cannot make one");
	return auth_bearer_hash(s, authz, hash, err);
}

/* A new grant of kind for token_hash: its secret, or -1 and err. */
static int grant_new(struct server *s, enum kn_console_grant_kind kind,
		     const char *token, char secret[64], int64_t *expires_at,
		     struct kn_error *err)
{
	char hash[65];
	int64_t now = kn_now_ms();

	secret_generate(kind == KN_CONSOLE_CODE ? KN_CONSOLE_CODE_PREFIX
						: KN_CONSOLE_SESSION_PREFIX,
			secret, hash);
	if (kn_console_grant_add(s->console, kind, hash, token, now) < 0)
		return kn_errorf(err, KN_ELIMIT, NULL,
				 "%d console logins are open: wait for one to "
				 "expire or log out",
				 CONSOLE_MAX_GRANTS);
	*expires_at = now + (kind == KN_CONSOLE_CODE
				     ? KN_CONSOLE_CODE_TTL_MS
				     : KN_CONSOLE_SESSION_TTL_MS);
	return 0;
}

/* POST /v1/console/codes: a one-time login code for the caller. */
static void h_code(struct server *s, struct kn_http_req *req,
		   const struct caller *c, const char *param)
{
	char token[65], secret[64];
	struct kn_error err;
	int64_t expires_at = 0;

	(void)c;
	(void)param;
	if (bearer_token_hash(s, req, token, &err) < 0 ||
	    grant_new(s, KN_CONSOLE_CODE, token, secret, &expires_at, &err) < 0) {
		kn_http_reply_error(req, &err);
		return;
	}
	kn_http_reply_json(req, 201,
			   json_pack("{s:s, s:I}", "code", secret,
				     "expires_at_ms", (json_int_t)expires_at));
}

/*
 * The token hash a login shows: a one-time code from the body
 * ({"code": ...}, used up here), else the request's bearer credential.
 */
static int login_token_hash(struct server *s, struct kn_http_req *req,
			    char token[65], struct kn_error *err)
{
	size_t len = 0;
	const char *body = kn_http_body(req, &len);
	json_t *doc = len ? json_loadb(body, len, 0, NULL) : NULL;
	json_t *code = doc ? json_object_get(doc, "code") : NULL;
	char hash[65];
	int rc = 0;

	if (len && !json_is_object(doc)) {
		rc = kn_errorf(err, KN_EINVAL, NULL,
			       "the body must be a JSON object");
	} else if (code && !json_is_string(code)) {
		rc = kn_errorf(err, KN_EINVAL, "code", "must be a string");
	} else if (code) {
		token_hash(json_string_value(code), hash);
		if (kn_console_grant_use(s->console, KN_CONSOLE_CODE, hash,
					 kn_now_ms(), token) < 0)
			rc = kn_errorf(err, KN_EAUTH, "code",
				       "unknown, expired or already used login "
				       "code: run kiln ui again");
	} else if (!kn_http_header(req, "Authorization") &&
		   !kn_http_client_cert(req)) {
		rc = kn_errorf(err, KN_EINVAL, "code",
			       "log in with {\"code\": ...} from kiln ui, or "
			       "with an API token as the bearer token");
	} else {
		rc = bearer_token_hash(s, req, token, err);
	}
	json_decref(doc);
	return rc;
}

/*
 * POST /v1/console/sessions (public: a code needs no token): a session
 * for the token the login shows, checked as any request's would be.
 */
static void h_login(struct server *s, struct kn_http_req *req,
		    const struct caller *c, const char *param)
{
	char token[65], secret[64];
	struct caller who;
	struct kn_error err;
	struct kn_audit a;
	int64_t expires_at = 0;

	(void)c;
	(void)param;
	if (login_token_hash(s, req, token, &err) < 0 ||
	    auth_check_hash(s, token, &who, &err) < 0 ||
	    grant_new(s, KN_CONSOLE_SESSION, token, secret, &expires_at,
		      &err) < 0) {
		kn_http_reply_error(req, &err);
		return;
	}
	memset(&a, 0, sizeof(a));
	a.actor = who.name;
	a.role = (char *)role_name(who.role);
	a.action = "console.login";
	a.object = "console";
	a.outcome = "ok";
	kn_store_audit_insert(s->store, &a, NULL);
	kn_http_reply_json(req, 201,
			   json_pack("{s:s, s:I, s:s, s:s}", "session", secret,
				     "expires_at_ms", (json_int_t)expires_at,
				     "name", who.name, "role",
				     role_name(who.role)));
}

/* DELETE /v1/console/sessions: end the session the request came with. */
static void h_logout(struct server *s, struct kn_http_req *req,
		     const struct caller *c, const char *param)
{
	const char *authz = kn_http_header(req, "Authorization");
	char hash[65];
	struct kn_error err;

	(void)c;
	(void)param;
	if (!authz || strncmp(authz, "Bearer ", 7) != 0 ||
	    strncmp(authz + 7, KN_CONSOLE_SESSION_PREFIX,
		    strlen(KN_CONSOLE_SESSION_PREFIX)) != 0) {
		kn_errorf(&err, KN_EINVAL, NULL,
			  "only a console session can be ended here");
		kn_http_reply_error(req, &err);
		return;
	}
	token_hash(authz + 7, hash);
	kn_console_grant_revoke(s->console, hash);
	kn_http_reply_json(req, 200, json_pack("{s:b}", "ended", 1));
}

static int console_start(struct server *s, struct kn_error *err)
{
	s->console = kn_console_grants_new(CONSOLE_MAX_GRANTS);
	if (!s->console)
		return kn_errorf(err, KN_EIO, NULL, "out of memory");
	return 0;
}

static void console_stop(struct server *s)
{
	kn_console_grants_free(s->console);
	s->console = NULL;
}

static const struct route console_routes[] = {
	{"POST", "/v1/console/codes", KN_ROLE_ADMIN, false, "console.code",
	 h_code},
	{"POST", "/v1/console/sessions", KN_ROLE_VIEWER, true, NULL, h_login},
	{"DELETE", "/v1/console/sessions", KN_ROLE_VIEWER, false, NULL,
	 h_logout},
	{0},
};

const struct service console_service = {
	.name = "console",
	.phase = SERVICE_PHASE_NODES,
	.start = console_start,
	.stop = console_stop,
	.routes = console_routes,
};
